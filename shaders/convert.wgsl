// Half-precision unpacking and rounding in integer code, so every backend converts the
// same way and no SHADER_F16 is needed. CPU twin: src/cpu/convert.rs.

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

// Four consecutive elements ("a unit") between their storage words and f32 values: f32 as a
// vec4 of words, f16/bf16 as two words of two halves each (the first element in the low
// half). The vec4 encode kernel picks one widen and one narrow per table and output type.
fn widen4_f32(w: vec4<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(w);
}

fn widen4_f16(w: vec2<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(
        f16_to_f32_bits(w.x & 0xffffu),
        f16_to_f32_bits(w.x >> 16u),
        f16_to_f32_bits(w.y & 0xffffu),
        f16_to_f32_bits(w.y >> 16u),
    ));
}

// bf16_to_f32_bits of each half: the low half shifted up, the high half masked in place.
fn widen4_bf16(w: vec2<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(w.x << 16u, w.x & 0xffff0000u, w.y << 16u, w.y & 0xffff0000u));
}

fn narrow4_f32(v: vec4<f32>) -> vec4<u32> {
    return bitcast<vec4<u32>>(v);
}

fn narrow4_f16(v: vec4<f32>) -> vec2<u32> {
    let b = bitcast<vec4<u32>>(v);
    return vec2<u32>(
        f32_to_f16_bits(b.x) | (f32_to_f16_bits(b.y) << 16u),
        f32_to_f16_bits(b.z) | (f32_to_f16_bits(b.w) << 16u),
    );
}

fn narrow4_bf16(v: vec4<f32>) -> vec2<u32> {
    let b = bitcast<vec4<u32>>(v);
    return vec2<u32>(
        f32_to_bf16_bits(b.x) | (f32_to_bf16_bits(b.y) << 16u),
        f32_to_bf16_bits(b.z) | (f32_to_bf16_bits(b.w) << 16u),
    );
}
