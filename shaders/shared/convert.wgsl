// Half-precision unpacking and rounding in integer code, so every backend converts the
// same way and no SHADER_F16 is needed. CPU twin: src/convert.rs. 16-bit elements are
// stored two to a word, element 2w in the low half of word w; storage types are the
// host's DTYPE_* codes (src/shaders.rs).

// f16 bits to f32 bits, exactly, without branches: a kernel's lanes take one path
// whatever their values, which software adapters (which run both sides of a branch under a
// mask) and GPUs (where a warp's lanes may diverge) both want. As the CPU twin's
// f16_to_f32_bits_branchless, a subnormal m 2^-24 is (1 + m/1024) 2^-14 - 2^-14: a
// difference of normal floats that is representable, so exact on every backend (no
// subnormal f32 is involved, which a backend may flush).
fn f16_to_f32_bits(h: u32) -> u32 {
    let em = h & 0x7fffu;
    // Normal: the exponent rebased by 112; infinity and NaN (payload kept) by 224, to 255.
    let normal = (em << 13u) + select(0x38000000u, 0x70000000u, em >= 0x7c00u);
    // (The mask keeps m = 0 at +0 where a compiler assumes no signed zeros.)
    let sub = bitcast<u32>(bitcast<f32>(normal + 0x800000u) - 6.103515625e-5) & 0x7fffffffu;
    return ((h & 0x8000u) << 16u) | select(normal, sub, em < 0x400u);
}

fn bf16_to_f32_bits(h: u32) -> u32 {
    return h << 16u;
}

// f32 bits to bf16 bits, rounded to nearest even; NaN stays a quiet NaN. Without a
// branch, as f16_to_f32_bits.
fn f32_to_bf16_bits(x: u32) -> u32 {
    let rounded = (x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u;
    return select(rounded, (x >> 16u) | 0x40u, (x & 0x7fffffffu) > 0x7f800000u);
}

// f32 bits to f16 bits, rounded to nearest even, overflowing to infinity; NaN stays a
// quiet NaN with the top of its payload. Without branches, as f16_to_f32_bits.
fn f32_to_f16_bits(x: u32) -> u32 {
    let a = x & 0x7fffffffu;
    // Normal results: the exponent rebased by -112, the 13 dropped bits rounded to nearest
    // even.
    let rebased = a - 0x38000000u;
    let normal = (rebased + 0xfffu + ((rebased >> 13u) & 1u)) >> 13u;
    // Subnormal results and zeros (|x| < 2^-14): |x| 2^24 rounded to an integer, ties to
    // even, which WGSL's round() is. The product is exact (a power of two, and normal
    // wherever the result is not zero: a flushed subnormal |x| rounds to zero either way);
    // the min keeps lanes that take another case within [0, 1024], so no conversion of a
    // NaN or an out-of-range float is ever made.
    let sub = u32(round(bitcast<f32>(min(a, 0x38800000u)) * 16777216.0));
    var r = select(sub, normal, a >= 0x38800000u);
    r = select(r, 0x7c00u, a >= 0x477ff000u);
    r = select(r, 0x7e00u | ((a >> 13u) & 0x3ffu), a > 0x7f800000u);
    return ((x >> 16u) & 0x8000u) | r;
}

// The 16-bit element e of a buffer of packed halves, from its word.
fn half_of(word: u32, e: u32) -> u32 {
    return (word >> ((e & 1u) * 16u)) & 0xffffu;
}

// `word` with its half holding element e replaced by the 16-bit value h.
fn with_half(word: u32, e: u32, h: u32) -> u32 {
    let shift = (e & 1u) * 16u;
    return (word & ~(0xffffu << shift)) | (h << shift);
}

// f32 bits of the 16-bit value h of storage type `dtype` (DTYPE_F16 or DTYPE_BF16), exactly.
fn half_to_f32_bits(h: u32, dtype: u32) -> u32 {
    if dtype == DTYPE_F16 {
        return f16_to_f32_bits(h);
    }
    return bf16_to_f32_bits(h);
}

// f32 bits rounded to storage type `dtype` (DTYPE_F16 or DTYPE_BF16), nearest even.
fn f32_to_half_bits(x: u32, dtype: u32) -> u32 {
    if dtype == DTYPE_F16 {
        return f32_to_f16_bits(x);
    }
    return f32_to_bf16_bits(x);
}
