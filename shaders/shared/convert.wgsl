// Half-precision unpacking and rounding in integer code, so every backend converts the
// same way and no SHADER_F16 is needed. CPU twin: src/convert.rs. 16-bit elements are
// stored two to a word, element 2w in the low half of word w; storage types are the
// host's DTYPE_* codes (src/shaders.rs).

// f16 bits to f32 bits, exactly.
fn f16_to_f32_bits(h: u32) -> u32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let mant = h & 0x3ffu;
    if e == 0x1fu {
        return sign | 0x7f800000u | (mant << 13u);
    }
    if e != 0u {
        return sign | ((e + 112u) << 23u) | (mant << 13u);
    }
    if mant == 0u {
        return sign;
    }
    let msb = 31u - countLeadingZeros(mant);
    return sign | ((msb + 103u) << 23u) | ((mant << (23u - msb)) & 0x7fffffu);
}

fn bf16_to_f32_bits(h: u32) -> u32 {
    return h << 16u;
}

// f32 bits to bf16 bits, rounded to nearest even; NaN stays a quiet NaN.
fn f32_to_bf16_bits(x: u32) -> u32 {
    if (x & 0x7fffffffu) > 0x7f800000u {
        return (x >> 16u) | 0x40u;
    }
    return (x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u;
}

// f32 bits to f16 bits, rounded to nearest even, overflowing to infinity.
fn f32_to_f16_bits(x: u32) -> u32 {
    let sign = (x >> 16u) & 0x8000u;
    let a = x & 0x7fffffffu;
    if a > 0x7f800000u {
        return sign | 0x7e00u | ((a >> 13u) & 0x3ffu);
    }
    if a >= 0x477ff000u {
        return sign | 0x7c00u;
    }
    if a >= 0x38800000u {
        let rebased = a - (112u << 23u);
        return sign | ((rebased + 0xfffu + ((rebased >> 13u) & 1u)) >> 13u);
    }
    let e = a >> 23u;
    if e < 102u {
        return sign;
    }
    let mant = (a & 0x7fffffu) | 0x800000u;
    let shift = 126u - e;
    let half = 1u << (shift - 1u);
    let rest = mant & ((1u << shift) - 1u);
    var q = mant >> shift;
    if rest > half || (rest == half && (q & 1u) == 1u) {
        q = q + 1u;
    }
    return sign | q;
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
