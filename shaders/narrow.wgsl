// f32 values to 16-bit words: out word w holds elements 2w (low half) and 2w + 1 (high
// half, zero past the end), rounded to nearest even by the shared integer code. The encode
// uses it for 16-bit output of an odd dim, whose rows straddle words: it writes f32 rows
// first (each token once) and narrows the whole chunk here. CPU twin: the rounding in
// src/convert.rs. Host: src/gpu/encode.rs.
#import convert

struct Params {
    n_elems: u32,
    out_dtype: u32,
    // Workgroups along x of a dispatch folded into 2-D.
    groups_x: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn narrow(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let w = (wg.y * params.groups_x + wg.x) * WORKGROUP_SIZE + li;
    let e = 2u * w;
    if e >= params.n_elems {
        return;
    }
    var hi = 0u;
    if e + 1u < params.n_elems {
        hi = f32_to_half_bits(src[e + 1u], params.out_dtype);
    }
    out[w] = f32_to_half_bits(src[e], params.out_dtype) | (hi << 16u);
}
