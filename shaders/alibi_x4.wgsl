// ALiBi bias tensor [heads, len, kv_len], the form where a row's keys are whole vec4s
// (kv_len, the chunk's first key and its place in the output all multiples of 4) on
// adapters that run shaders on CPU cores (GPUs take alibi_flat.wgsl; see
// src/gpu/alibi/mod.rs): each invocation writes four adjacent keys with one 16-byte
// store, for ALIBI_X4_ROWS rows and up to four vec4s of each, so each workgroup, a task of
// the adapter's thread pool, moves ALIBI_X4_ROWS rows' worth of its columns. The same bits
// as the other forms: alibi_common.wgsl's arithmetic per key. Host wrapper: src/gpu/alibi.
#import alibi_common

// The chunk's values as vec4s of f32 bits, row-major [n_rows, n_cols / 4].
@group(0) @binding(2) var<storage, read_write> out: array<vec4<u32>>;

// Workgroups along y (folded into z) serve blocks of ALIBI_X4_ROWS rows; those along x
// stride over the rows' vec4s of keys.
@compute @workgroup_size(ALIBI_X4_WORKGROUP)
fn alibi_x4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let r0 = (wg.z * params.groups_y + wg.y) * ALIBI_X4_ROWS;
    let causal = params.causal != 0u;
    let n4 = params.n_cols / 4u;
    let stride = params.groups_x * ALIBI_X4_WORKGROUP;
    // Every row's slope is loaded before any value is computed, so the loads overlap.
    var slope: array<u32, ALIBI_X4_ROWS>;
    var query: array<u32, ALIBI_X4_ROWS>;
    for (var i = 0u; i < ALIBI_X4_ROWS; i++) {
        let r = r0 + i;
        if r < params.n_rows {
            let row = params.row0 + r;
            let head = row / params.len;
            query[i] = params.offset + (row - head * params.len);
            slope[i] = slopes[head - params.head0];
        }
    }
    for (var i = 0u; i < ALIBI_X4_ROWS; i++) {
        let r = r0 + i;
        if r >= params.n_rows {
            return;
        }
        let s = slope[i];
        let q = query[i];
        let base = params.out_base / 4u + r * n4;
        for (var c = wg.x * ALIBI_X4_WORKGROUP + li; c < n4; c += stride) {
            let k = params.col0 + 4u * c;
            out[base + c] = vec4<u32>(
                bias_bits(s, q, k, causal),
                bias_bits(s, q, k + 1u, causal),
                bias_bits(s, q, k + 2u, causal),
                bias_bits(s, q, k + 3u, causal),
            );
        }
    }
}
