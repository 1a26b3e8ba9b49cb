// ALiBi bias tensor [heads, len, kv_len]: -slope * distance as f32 bits, computed in integer
// arithmetic so every backend gives the bits of the CPU twin (see alibi_common.wgsl). One
// value per invocation, where the four-key forms (alibi_flat.wgsl, alibi_x4.wgsl) do not
// apply: a row per workgroup row on GPUs, blocks of rows on adapters that run shaders on
// CPU cores. Host wrapper: src/gpu/alibi (AlibiParams mirrors Params).
#import alibi_common

// f32 bits of the chunk's values, row-major [n_rows, n_cols].
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

// A block of rows_per_group rows per workgroup row (y, folded into z); the workgroups along
// x stride over each row's keys.
@compute @workgroup_size(WORKGROUP_SIZE)
fn alibi(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let block = wg.z * params.groups_y + wg.y;
    let causal = params.causal != 0u;
    let stride = params.groups_x * WORKGROUP_SIZE;
    for (var i = 0u; i < params.rows_per_group; i++) {
        let r = block * params.rows_per_group + i;
        if r >= params.n_rows {
            return;
        }
        let row = params.row0 + r;
        let head = row / params.len;
        let q = params.offset + (row - head * params.len);
        let slope = slopes[head - params.head0];
        let base = params.out_base + r * params.n_cols;
        for (var c = wg.x * WORKGROUP_SIZE + li; c < params.n_cols; c += stride) {
            out[base + c] = bias_bits(slope, q, params.col0 + c, causal);
        }
    }
}
