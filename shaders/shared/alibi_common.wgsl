// What the ALiBi kernels share (alibi.wgsl: a value per invocation; alibi_x4.wgsl: four
// adjacent keys per invocation): the parameters, the slopes, and the bias of one
// key, so every backend gives the bits of the CPU twin (src/alibi.rs: neg_scaled_bits,
// fill_descending). Each kernel declares its own output, binding 2.
#import intmath

struct Params {
    // Rows (head, query) of this chunk; the first is global row row0 = head * len + query.
    n_rows: u32,
    row0: u32,
    // Keys of this chunk: positions col0 .. col0 + n_cols. n_rows * n_cols < 2^31.
    n_cols: u32,
    col0: u32,
    // Queries per head, and the position of query 0.
    len: u32,
    offset: u32,
    // 1 for the causal form, 0 for the symmetric one.
    causal: u32,
    // The head of slopes[0] (the host binds only this chunk's slopes).
    head0: u32,
    // Workgroups along x (the stride of the column loop) and along y (row blocks fold into
    // z).
    groups_x: u32,
    groups_y: u32,
    // The index in `out` of the chunk's first value.
    out_base: u32,
    // Rows each workgroup serves, one after another: ALIBI_X4_ROWS in alibi_x4; 1 in the
    // one-value form on GPUs; more on adapters that run shaders on CPU cores, where each
    // workgroup costs a task of their thread pool. Unused by alibi_flat.
    rows_per_group: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// f32 bits of the slopes of heads head0, head0 + 1, ...
@group(0) @binding(1) var<storage, read> slopes: array<u32>;

// f32 bits of -(slope * d), rounded to nearest even, for the bits of a positive normal
// slope < 1 and an integer distance d; d = 0 gives +0.0. The 24 x 32-bit product is built
// from mul_hi and a wrapping multiply, since WGSL has no 64-bit integers.
fn neg_scaled_bits(slope_bits: u32, d: u32) -> u32 {
    if d == 0u {
        return 0u;
    }
    // Below 2^24 the distance is an exact f32, and WGSL's f32 multiply is correctly
    // rounded: the product's bits are the integer route's, for a fraction of the work.
    if d < 0x1000000u {
        return bitcast<u32>(bitcast<f32>(slope_bits) * f32(d)) | 0x80000000u;
    }
    let biased_exp = slope_bits >> 23u;
    let m = (slope_bits & 0x7fffffu) | 0x800000u;
    let lz = countLeadingZeros(d);
    let dn = d << lz;
    let hi = mul_hi(m, dn);
    let lo = m * dn;
    let wide = hi >= 0x800000u;
    let kept = select((hi << 1u) | (lo >> 31u), hi, wide);
    let rest = select(lo << 1u, lo, wide);
    let round_bit = rest >> 31u;
    let sticky = select(0u, 1u, (rest & 0x7fffffffu) != 0u);
    let up = round_bit & (sticky | (kept & 1u));
    let exp_field = biased_exp + select(30u, 31u, wide) - lz;
    return ((exp_field << 23u) + kept + up) | 0x80000000u;
}

// f32 bits of the bias between query position q and key position k.
fn bias_bits(slope_bits: u32, q: u32, k: u32, causal: bool) -> u32 {
    let after = select(k - q, 0u, causal);
    let d = select(after, q - k, q >= k);
    return neg_scaled_bits(slope_bits, d);
}
