// Exact-phase sin/cos in 32-bit integer arithmetic, assembled into f32 bits by hand.
// CPU twin: src/cpu/sincos.rs (same operations, same constants, same bits).
// SIN_S0..SIN_S4 and COS_C0..COS_C5 come from the host (src/shaders.rs), so the
// coefficients exist once.
//
// Why integers: WGSL lets int-to-float conversion round either way, lets compilers contract
// a * b + c, and promises builtin sin only on [-pi, pi]. Integer arithmetic is exact on
// every backend, so the bits are the same everywhere.
#import intmath

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

// RoPE's (cos, sin) of position p for the frequency of turn step `step`, each multiplied by
// the f32 whose bits are `scale_bits` when `scaled` (the attention factor): one correctly
// rounded f32 multiply each, as on the CPU (src/cpu/rope.rs).
fn rope_cos_sin(p: u32, step: vec2<u32>, scaled: bool, scale_bits: u32) -> vec2<f32> {
    let sc = sincos_bits(phase_turns(p, step));
    var c = bitcast<f32>(sc.y);
    var s = bitcast<f32>(sc.x);
    if scaled {
        let af = bitcast<f32>(scale_bits);
        c = c * af;
        s = s * af;
    }
    return vec2<f32>(c, s);
}

// The phase of position p + start, given as r = p + start mod 2^32 and its carry: exact,
// because 2^32 * step mod 2^64 has top half step.x and bottom half zero.
fn phase_turns_u33(r: u32, carry: bool, step: vec2<u32>) -> u32 {
    return phase_turns(r, step) + select(0u, step.x, carry);
}
