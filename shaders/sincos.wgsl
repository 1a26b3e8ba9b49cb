// Exact-phase sin/cos in 32-bit integer arithmetic, assembled into f32 bits by hand.
// CPU twin: src/cpu/sincos.rs (same operations, same constants, same bits).
// SIN_S0..SIN_S4 and COS_C0..COS_C5 come from the host (src/shaders.rs), so the
// coefficients exist once.
//
// Why integers: WGSL lets int-to-float conversion round either way, lets compilers contract
// a * b + c, and promises builtin sin only on [-pi, pi]. Integer arithmetic is exact on
// every backend, so the bits are the same everywhere.

// floor(a * b / 2^32) from 16-bit halves (WGSL has no 32x32 -> 64 multiply).
fn mul_hi(a: u32, b: u32) -> u32 {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let lo = a0 * b0;
    let m1 = a1 * b0;
    let m2 = a0 * b1;
    let mid = (lo >> 16u) + (m1 & 0xffffu) + (m2 & 0xffffu);
    return a1 * b1 + (m1 >> 16u) + (m2 >> 16u) + (mid >> 16u);
}

// Top 32 bits of (p * step) mod 2^64, in units of 2^-32 turn; step = (lo, hi) is the
// frequency in turns per position as a 64-bit binary fraction.
fn phase_turns(p: u32, step: vec2<u32>) -> u32 {
    return p * step.y + mul_hi(p, step.x);
}

// A Q1.31 magnitude and a sign as f32 bits, rounded to nearest even; zero is +0.0.
fn q131_to_f32_bits(m: u32, negative: bool) -> u32 {
    if m == 0u {
        return 0u;
    }
    let lz = countLeadingZeros(m);
    let n = m << lz;
    let round_bit = (n >> 7u) & 1u;
    let sticky = select(0u, 1u, (n & 0x7fu) != 0u);
    let lsb = (n >> 8u) & 1u;
    let up = round_bit & (sticky | lsb);
    let magnitude = ((126u - lz) << 23u) + (n >> 8u) + up;
    return magnitude | select(0u, 0x80000000u, negative);
}

// (sin, cos) of the phase t (units of 2^-32 turn) as f32 bits.
fn sincos_bits(t: u32) -> vec2<u32> {
    let shifted = t + 0x20000000u;
    let q = shifted >> 30u;
    let x = shifted & 0x3fffffffu;
    let negative = x < 0x20000000u;
    let a = select(x - 0x20000000u, 0x20000000u - x, negative);
    let u = a << 2u;
    let v = mul_hi(u, u);
    let sin_mag = mul_hi(u, SIN_S0 - mul_hi(v, SIN_S1 - mul_hi(v, SIN_S2 - mul_hi(v, SIN_S3 - mul_hi(v, SIN_S4)))));
    let cos_mag = COS_C0 - mul_hi(v, COS_C1 - mul_hi(v, COS_C2 - mul_hi(v, COS_C3 - mul_hi(v, COS_C4 - mul_hi(v, COS_C5)))));
    let odd = (q & 1u) == 1u;
    let sin_m = select(sin_mag, cos_mag, odd);
    let cos_m = select(cos_mag, sin_mag, odd);
    let sin_neg = (q >= 2u) != (!odd && negative);
    let cos_neg = (q == 1u || q == 2u) != (odd && negative);
    return vec2<u32>(q131_to_f32_bits(sin_m, sin_neg), q131_to_f32_bits(cos_m, cos_neg));
}

// The phase of position p + start, given as r = p + start mod 2^32 and its carry: exact,
// because 2^32 * step mod 2^64 has top half step.x and bottom half zero.
fn phase_turns_u33(r: u32, carry: bool, step: vec2<u32>) -> u32 {
    return phase_turns(r, step) + select(0u, step.x, carry);
}

// A float32 value m * 2^e with m in [2^23, 2^24), or m = 0 for zero.
struct F32Parts {
    m: u32,
    e: i32,
}

// Rounds a 24-bit kept mantissa to nearest even; a carry into bit 24 renormalises.
fn round_mantissa(kept: u32, round_bit: u32, sticky: bool, e: i32) -> F32Parts {
    let up = round_bit & (select(0u, 1u, sticky) | (kept & 1u));
    let m = kept + up;
    if m == 0x1000000u {
        return F32Parts(0x800000u, e + 1);
    }
    return F32Parts(m, e);
}

// The 33-bit integer carry * 2^32 + r rounded to float32, without WGSL's int-to-float
// conversion (which may round either way).
fn u33_to_f32_parts(r: u32, carry: bool) -> F32Parts {
    if carry {
        return round_mantissa(0x800000u | (r >> 9u), (r >> 8u) & 1u, (r & 0xffu) != 0u, 9);
    }
    if r == 0u {
        return F32Parts(0u, 0);
    }
    let lz = countLeadingZeros(r);
    let n = r << lz;
    return round_mantissa(n >> 8u, (n >> 7u) & 1u, (n & 0x7fu) != 0u, 8 - i32(lz));
}

// The float32 product f32(p + start) * w, rounded to nearest even as IEEE multiplication
// rounds it, from integer mantissas (w_bits: a positive normal f32 or zero).
fn f32_angle_parts(r: u32, carry: bool, w_bits: u32) -> F32Parts {
    let p = u33_to_f32_parts(r, carry);
    if p.m == 0u || w_bits == 0u {
        return F32Parts(0u, 0);
    }
    let mw = (w_bits & 0x7fffffu) | 0x800000u;
    let ew = i32((w_bits >> 23u) & 0xffu) - 150;
    let hi = mul_hi(p.m, mw);
    let lo = p.m * mw;
    if hi >= 0x8000u {
        return round_mantissa((hi << 8u) | (lo >> 24u), (lo >> 23u) & 1u, (lo & 0x7fffffu) != 0u, p.e + ew + 24);
    }
    return round_mantissa((hi << 9u) | (lo >> 23u), (lo >> 22u) & 1u, (lo & 0x3fffffu) != 0u, p.e + ew + 23);
}
