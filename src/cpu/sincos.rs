//! CPU twin of `shaders/shared/sincos.wgsl`, `intmath.wgsl` and `f32_angle.wgsl`:
//! exact-phase sin/cos in 32-bit integer arithmetic, assembled into float32 bits by hand.
//! Same operations, same constants, same bits as the shaders on every adapter. Read
//! ARCHITECTURE.md ("Exact phase") for the error budget.

/// Taylor coefficients of `sin(u pi/2) = u (S0 - v (S1 - v (S2 - v (S3 - v S4))))`, `v = u^2`,
/// as Q1.31 fixed point: `round((pi/2)^(2k+1) / (2k+1)! * 2^31)`. On `u` in `[0, 1/2]` the
/// first omitted term is below 1.8e-9.
pub const SIN_COEFFS: [u32; 5] = [3373259426, 1387197337, 171138612, 10053990, 344545];

/// Taylor coefficients of `cos(u pi/2) = C0 - v (C1 - v (C2 - v (C3 - v (C4 - v C5))))` as
/// Q1.31: `round((pi/2)^(2k) / (2k)! * 2^31)`. The first omitted term is below 1.2e-10.
pub const COS_COEFFS: [u32; 6] = [2147483648, 2649351758, 544751120, 44803984, 1974096, 54121];

/// `floor(a * b / 2^32)`: the shader builds it from 16-bit halves, which is exact too.
#[inline(always)]
pub fn mul_hi(a: u32, b: u32) -> u32 {
    ((u64::from(a) * u64::from(b)) >> 32) as u32
}

/// The top 32 bits of the phase `(p * step) mod 2^64`, in units of 2^-32 turn, where `step`
/// is the frequency in turns per position as a 64-bit binary fraction `(lo, hi)`.
#[inline(always)]
pub fn phase_turns(p: u32, step_lo: u32, step_hi: u32) -> u32 {
    p.wrapping_mul(step_hi).wrapping_add(mul_hi(p, step_lo))
}

/// A Q1.31 magnitude (`m / 2^31`, `m <= 2^31`) and a sign as float32 bits, rounded to
/// nearest even. Zero is `+0.0` whatever the sign.
#[inline(always)]
pub fn q131_to_f32_bits(m: u32, negative: bool) -> u32 {
    if m == 0 {
        return 0;
    }
    let lz = m.leading_zeros();
    let n = m << lz;
    let round_bit = (n >> 7) & 1;
    let sticky = u32::from(n & 0x7f != 0);
    let lsb = (n >> 8) & 1;
    let up = round_bit & (sticky | lsb);
    // (n >> 8) carries the hidden bit, which adds the 1 that makes 126 the biased exponent
    // of 2^-lz; a rounding carry moves into the exponent field on its own.
    let magnitude = ((126 - lz) << 23) + (n >> 8) + up;
    magnitude | if negative { 0x8000_0000 } else { 0 }
}

/// [`q131_to_f32_bits`] by the hardware's integer conversion: `m` as a signed integer
/// converted to f32 (rounded to nearest even), its magnitude, times 2^-31 (exact: a power of
/// two, the result normal), and the sign for a nonzero `m`. The same bits for every `m <=
/// 2^31` and sign (an exhaustive test), **in the SSE mode's default only**: the conversion
/// rounds as MXCSR says, where the integer form always rounds to nearest even. Vectorised it
/// is one VCVTDQ2PS where the integer form finds the leading zeros, which AVX2 has no
/// instruction for. `2^31` as an `i32` is `i32::MIN`, whose f32 is exactly `-2^31`: the
/// magnitude puts it right.
#[inline(always)]
pub(crate) fn q131_to_f32_bits_cvt(m: u32, negative: bool) -> u32 {
    let magnitude = ((m as i32) as f32).abs() * (1.0 / 2_147_483_648.0);
    magnitude.to_bits() | if negative && m != 0 { 0x8000_0000 } else { 0 }
}

/// sin and cos of the phase `t` (units of 2^-32 turn) as float32 bits.
#[inline(always)]
pub fn sincos_bits(t: u32) -> (u32, u32) {
    sincos_bits_as::<false>(t)
}

/// [`sincos_bits`], its float32 assembly by [`q131_to_f32_bits_cvt`] when `CVT` (the
/// same bits in the SSE mode's default only), else by [`q131_to_f32_bits`].
#[inline(always)]
pub(crate) fn sincos_bits_as<const CVT: bool>(t: u32) -> (u32, u32) {
    // Shift by 1/8 turn so the top two bits name the nearest quadrant and the rest is an
    // offset in [-1/8, 1/8) turn around it.
    let shifted = t.wrapping_add(0x2000_0000);
    let q = shifted >> 30;
    let x = shifted & 0x3fff_ffff;
    let negative = x < 0x2000_0000;
    let a = if negative { 0x2000_0000 - x } else { x - 0x2000_0000 };
    // u = a / 2^30 in [0, 1/2] quarter turns, as Q0.32; the angle is u * pi/2.
    let u = a << 2;
    let v = mul_hi(u, u);
    let [s0, s1, s2, s3, s4] = SIN_COEFFS;
    let sin_mag = mul_hi(u, s0 - mul_hi(v, s1 - mul_hi(v, s2 - mul_hi(v, s3 - mul_hi(v, s4)))));
    let [c0, c1, c2, c3, c4, c5] = COS_COEFFS;
    let cos_mag =
        c0 - mul_hi(v, c1 - mul_hi(v, c2 - mul_hi(v, c3 - mul_hi(v, c4 - mul_hi(v, c5)))));
    let odd = q & 1 == 1;
    let (sin_m, cos_m) = if odd { (cos_mag, sin_mag) } else { (sin_mag, cos_mag) };
    let sin_neg = (q >= 2) != (!odd && negative);
    let cos_neg = (q == 1 || q == 2) != (odd && negative);
    if CVT {
        return (q131_to_f32_bits_cvt(sin_m, sin_neg), q131_to_f32_bits_cvt(cos_m, cos_neg));
    }
    (q131_to_f32_bits(sin_m, sin_neg), q131_to_f32_bits(cos_m, cos_neg))
}

/// The phase of position `p + start` (a 33-bit sum: `r = p + start mod 2^32` and its
/// carry), exact: `2^32 step mod 2^64` is `lo << 32`, whose top half adds `lo` and whose
/// bottom half is zero, so the carry changes nothing but that one addition.
#[inline(always)]
pub fn phase_turns_u33(r: u32, carry: bool, step_lo: u32, step_hi: u32) -> u32 {
    phase_turns(r, step_lo, step_hi).wrapping_add(if carry { step_lo } else { 0 })
}

/// Round `m` (already shifted so that the bit below its kept 24 is bit `guard`) to nearest
/// even; returns the 24-bit mantissa and whether it carried into a 25th bit.
#[inline(always)]
fn round_mantissa(kept: u32, round_bit: u32, sticky: bool) -> (u32, bool) {
    let up = round_bit & (u32::from(sticky) | (kept & 1));
    let m = kept + up;
    if m == 1 << 24 { (1 << 23, true) } else { (m, false) }
}

/// The 33-bit integer `carry 2^32 + r` rounded to f32 as `(m, e)`, `value = m 2^e`, `m` in
/// `[2^23, 2^24)`; `m = 0` for zero.
#[inline(always)]
pub fn u33_to_f32_parts(r: u32, carry: bool) -> (u32, i32) {
    if carry {
        let (m, c) = round_mantissa((1 << 23) | (r >> 9), (r >> 8) & 1, r & 0xff != 0);
        return (m, 9 + i32::from(c));
    }
    if r == 0 {
        return (0, 0);
    }
    let lz = r.leading_zeros();
    let n = r << lz;
    let (m, c) = round_mantissa(n >> 8, (n >> 7) & 1, n & 0x7f != 0);
    (m, 8 - lz as i32 + i32::from(c))
}

/// The float32 product `f32(p + start) * w` (round to nearest even, as IEEE multiplication
/// gives for these normal operands) as `(m, e)`, `value = m 2^e`; `m = 0` for zero. `w_bits`
/// is a positive normal f32 (or zero).
#[inline(always)]
pub fn f32_angle_parts(r: u32, carry: bool, w_bits: u32) -> (u32, i32) {
    let (mp, ep) = u33_to_f32_parts(r, carry);
    f32_product_parts(mp, ep, w_bits)
}

/// [`f32_angle_parts`] with the position already converted: `m_p 2^e_p` from
/// [`u33_to_f32_parts`]. Branch-free, so a row's loop over frequencies vectorises.
#[inline(always)]
pub fn f32_product_parts(mp: u32, ep: i32, w_bits: u32) -> (u32, i32) {
    let mw = (w_bits & 0x7f_ffff) | 0x80_0000;
    let ew = ((w_bits >> 23) & 0xff) as i32 - 150;
    // The 48-bit product of two 24-bit mantissas, in two words; keep its top 24 bits.
    let hi = mul_hi(mp, mw);
    let lo = mp.wrapping_mul(mw);
    let top = hi >> 15;
    let s = 23 + top;
    let kept = (hi << (32 - s)) | (lo >> s);
    let round_bit = (lo >> (s - 1)) & 1;
    let sticky = u32::from(lo & ((1 << (s - 1)) - 1) != 0);
    let m = kept + (round_bit & (sticky | (kept & 1)));
    // A rounding carry into bit 24 leaves 2^24, which renormalises to 2^23 one exponent up.
    let c = m >> 24;
    let zero = mp == 0 || w_bits == 0;
    let m = if zero { 0 } else { m >> c };
    let e = if zero { 0 } else { ep + ew + s as i32 + c as i32 };
    (m, e)
}

/// The phase (units of 2^-32 turn) of the float32 angle `m 2^e` from the table of turn
/// steps of powers of two (`steps[k]` is `2^(k - bias)` radians); 0 for `m = 0`.
#[inline(always)]
pub fn f32_angle_phase((m, e): (u32, i32), steps: &[[u32; 2]], bias: i32) -> u32 {
    let k = (e + bias).clamp(0, steps.len() as i32 - 1) as usize;
    let [lo, hi] = steps[k];
    phase_turns(m, lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use astro_float::{BigFloat, Consts, RoundingMode};

    #[test]
    fn coefficients_are_the_rounded_taylor_terms() {
        let (p, rm) = (256, RoundingMode::ToEven);
        let mut cc = Consts::new().unwrap();
        let half_pi = cc.pi(p, rm).div(&BigFloat::from_u8(2, p), p, rm);
        let scale = BigFloat::from_u64(1 << 31, p);
        let term = |n: usize| {
            let mut fact = BigFloat::from_u8(1, p);
            for k in 2..=n {
                fact = fact.mul(&BigFloat::from_u64(k as u64, p), p, rm);
            }
            let v = half_pi.powi(n, p, rm).div(&fact, p, rm).mul(&scale, p, rm);
            let r = v.add(&BigFloat::from_f64(0.5, p), p, rm).floor();
            // Integers below 2^32 print exactly.
            let text = format!("{r}");
            let mantissa: f64 = text.parse().unwrap();
            mantissa as u32
        };
        for (k, &c) in SIN_COEFFS.iter().enumerate() {
            assert_eq!(c, term(2 * k + 1), "S{k}");
        }
        for (k, &c) in COS_COEFFS.iter().enumerate() {
            assert_eq!(c, term(2 * k), "C{k}");
        }
    }

    #[test]
    fn mul_hi_matches_the_16_bit_split_the_shader_uses() {
        let split = |a: u32, b: u32| {
            let (a0, a1, b0, b1) = (a & 0xffff, a >> 16, b & 0xffff, b >> 16);
            let (lo, m1, m2) = (a0 * b0, a1 * b0, a0 * b1);
            let mid = (lo >> 16) + (m1 & 0xffff) + (m2 & 0xffff);
            a1 * b1 + (m1 >> 16) + (m2 >> 16) + (mid >> 16)
        };
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let y = x.rotate_left(11) ^ 0xdead_beef;
            assert_eq!(mul_hi(x, y), split(x, y));
        }
        for (a, b) in [(u32::MAX, u32::MAX), (0, u32::MAX), (1 << 31, 1 << 31)] {
            assert_eq!(mul_hi(a, b), split(a, b));
        }
    }

    #[test]
    fn q131_assembly_matches_float_conversion() {
        // Rounding m / 2^31 to f32 with the hardware gives the same bits on the host.
        let mut m = 1u64;
        while m <= 1 << 31 {
            let m32 = m as u32;
            for delta in [0u32, 1, 0x7f, 0x80, 0x81, 0x17f, 0x180] {
                let v = m32.saturating_add(delta).min(1 << 31);
                let expected = ((f64::from(v)) / 2f64.powi(31)) as f32;
                assert_eq!(q131_to_f32_bits(v, false), expected.to_bits(), "{v:#x}");
                assert_eq!(q131_to_f32_bits(v, true), (-expected).to_bits(), "-{v:#x}");
            }
            m = m * 9 / 8 + 1;
        }
        assert_eq!(q131_to_f32_bits(0, true), 0);
    }

    /// The conversion form gives the integer form's bits for every magnitude up to 2^31
    /// and both signs (the SSE mode of a test thread is the default one).
    #[test]
    fn the_conversion_assembly_matches_the_integer_one_everywhere() {
        use rayon::prelude::*;
        // Every magnitude in an optimised build (2^31 + 1 of them); in a debug build every
        // 4099th, and the ends.
        let step: u64 = if cfg!(debug_assertions) { 4099 } else { 1 };
        let bad = (0..=(1u64 << 31) / step).into_par_iter().find_map_any(|k| {
            let m = (k * step).min(1 << 31) as u32;
            [false, true].into_iter().find_map(|neg| {
                let (got, want) = (q131_to_f32_bits_cvt(m, neg), q131_to_f32_bits(m, neg));
                (got != want).then_some((m, neg, got, want))
            })
        });
        assert_eq!(bad, None, "(m, negative, conversion, integer)");
        for m in [0u32, 1, (1 << 31) - 1, 1 << 31] {
            for neg in [false, true] {
                assert_eq!(q131_to_f32_bits_cvt(m, neg), q131_to_f32_bits(m, neg), "{m:#x}");
            }
        }
    }

    #[test]
    fn float32_angles_match_ieee_multiplication() {
        let mut x = 0x1234_5678_u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let parts_value = |(m, e): (u32, i32)| f64::from(m) * 2f64.powi(e);
        for _ in 0..200_000 {
            let (r, carry) = (next() >> (next() % 32), next() % 4 == 0);
            // Positive normal frequencies from 1e-27 to 1e9.
            let w = f32::from_bits(0x1000_0000 + next() % 0x3e00_0000);
            let p = (u64::from(carry) << 32) + u64::from(r);
            assert_eq!(parts_value(u33_to_f32_parts(r, carry)), f64::from(p as f32), "{p}");
            let expected = f64::from(p as f32 * w);
            assert_eq!(parts_value(f32_angle_parts(r, carry, w.to_bits())), expected, "{p} {w}");
        }
        assert_eq!(f32_angle_parts(0, false, 1f32.to_bits()), (0, 0));
        assert_eq!(u33_to_f32_parts(u32::MAX, true).1, 10, "2^33 - 1 rounds up to 2^33");
    }

    #[test]
    fn quadrants_have_the_right_signs() {
        let quarter = 1u32 << 30;
        let cases = [(0, 0.0f32, 1.0f32), (quarter, 1.0, 0.0), (2 * quarter, 0.0, -1.0)];
        for (t, s, c) in cases {
            let (sb, cb) = sincos_bits(t);
            assert_eq!((f32::from_bits(sb), f32::from_bits(cb)), (s, c), "t = {t:#x}");
        }
        let (sb, cb) = sincos_bits(3 * quarter);
        assert_eq!((f32::from_bits(sb), f32::from_bits(cb)), (-1.0, 0.0));
        // One eighth of a turn in each octant: |sin| = |cos| = sqrt(1/2).
        for k in 0..8u32 {
            let t = (2 * k + 1) << 28;
            let angle = std::f64::consts::TAU * f64::from(t) / 2f64.powi(32);
            let (sb, cb) = sincos_bits(t);
            assert!(
                (f64::from(f32::from_bits(sb)) - angle.sin()).abs() < crate::ACCURACY_BOUND,
                "sin {k}"
            );
            assert!(
                (f64::from(f32::from_bits(cb)) - angle.cos()).abs() < crate::ACCURACY_BOUND,
                "cos {k}"
            );
        }
    }

    #[test]
    fn every_phase_on_a_fine_grid_is_within_the_budget() {
        // 2^22 evenly spread phases plus their neighbours: fixed-point and polynomial error
        // only (the phase itself is exact here), so the bound is half an ulp plus 4e-9.
        let mut worst = 0.0f64;
        for k in 0..(1u32 << 22) {
            let t = k.wrapping_mul(1031) ^ (k >> 3);
            let angle = std::f64::consts::TAU * f64::from(t) / 2f64.powi(32);
            let (sb, cb) = sincos_bits(t);
            let es = (f64::from(f32::from_bits(sb)) - angle.sin()).abs();
            let ec = (f64::from(f32::from_bits(cb)) - angle.cos()).abs();
            worst = worst.max(es).max(ec);
        }
        assert!(worst <= 2f64.powi(-25) + 4e-9, "worst {worst:e}");
    }
}
