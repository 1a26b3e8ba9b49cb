// ALiBi bias tensor [heads, len, kv_len], the GPU form where a row's keys are whole vec4s
// (kv_len, the chunk's first key and its place in the output all multiples of 4): the
// chunk's vec4s laid end to end, one per invocation, in full workgroups of WORKGROUP_SIZE
// whatever the row's length. Each invocation finds its row (its head's slope and its
// query) and writes four adjacent keys with one 16-byte store: no loop, no per-invocation
// array, the shape of the fastest copy. The same bits as the other forms: alibi_common.wgsl's
// arithmetic per key. Host wrapper: src/gpu/alibi.
#import alibi_common

// The chunk's values as vec4s of f32 bits, row-major [n_rows, n_cols / 4].
@group(0) @binding(2) var<storage, read_write> out: array<vec4<u32>>;

// Workgroups along y (folded into z) cover the chunk's vec4s in order; n_rows * n_cols <
// 2^31, so every index fits a u32.
@compute @workgroup_size(WORKGROUP_SIZE)
fn alibi_flat(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let u = (wg.z * params.groups_y + wg.y) * WORKGROUP_SIZE + li;
    let n4 = params.n_cols / 4u;
    let r = u / n4;
    if r >= params.n_rows {
        return;
    }
    let c = u - r * n4;
    let row = params.row0 + r;
    let head = row / params.len;
    let q = params.offset + (row - head * params.len);
    let s = slopes[head - params.head0];
    let k = params.col0 + 4u * c;
    let causal = params.causal != 0u;
    out[params.out_base / 4u + u] = vec4<u32>(
        bias_bits(s, q, k, causal),
        bias_bits(s, q, k + 1u, causal),
        bias_bits(s, q, k + 2u, causal),
        bias_bits(s, q, k + 3u, causal),
    );
}
