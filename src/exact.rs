//! High-precision arithmetic on the host: frequencies in turns and the reference path's
//! phase reduction. Everything here runs in big-float arithmetic (astro-float), never in
//! float64, because float64 runs out of bits long before position 2^32 (see ARCHITECTURE.md).

use astro_float::{BigFloat, Consts, RoundingMode, Sign};

use crate::spec::PeSpec;

/// Working precision in bits. Positions have 32 bits and the turn fractions we keep have at
/// most 128, so 256 bits leaves a wide margin for the rounding of `ln`, `exp` and `pi`.
pub(crate) const PREC: usize = 256;
const RM: RoundingMode = RoundingMode::ToEven;

fn consts() -> Consts {
    // Consts::new only fails when the allocator does; there is nothing to recover then.
    Consts::new().expect("astro-float constant cache allocation")
}

/// The angular frequencies `w_i = base^(-2i/dim)` of a spec, in turns per position
/// (`w_i / 2pi`), at [`PREC`] bits.
pub(crate) fn turns_per_position(spec: &PeSpec) -> Vec<BigFloat> {
    let mut cc = consts();
    let two_pi = cc.pi(PREC, RM).mul(&BigFloat::from_u8(2, PREC), PREC, RM);
    let ln_base = BigFloat::from_f64(spec.base(), PREC).ln(PREC, RM, &mut cc);
    // w_{i+1} = w_i * r with r = base^(-2/dim): each product adds at most one rounding of
    // 2^-256 relative, so even 32768 of them stay below 2^-240.
    let exponent = ln_base
        .mul(&BigFloat::from_u8(2, PREC), PREC, RM)
        .div(&BigFloat::from_u32(spec.dim(), PREC), PREC, RM)
        .neg();
    let ratio = exponent.exp(PREC, RM, &mut cc);
    let mut w = BigFloat::from_u8(1, PREC);
    let mut out = Vec::with_capacity(spec.n_freqs() as usize);
    for _ in 0..spec.n_freqs() {
        out.push(w.div(&two_pi, PREC, RM));
        w = w.mul(&ratio, PREC, RM);
    }
    out
}

/// `frac(x)` as a 128-bit binary fraction, rounded to nearest (wrapping to 0 at 1), for a
/// finite non-negative `x`.
pub(crate) fn frac_fixed128(x: &BigFloat) -> u128 {
    let f = x.fract();
    let Some((words, _, sign, exp, _)) = f.as_raw_parts() else {
        unreachable!("frac of a finite number is finite")
    };
    debug_assert!(sign == Sign::Pos || f.is_zero());
    if f.is_zero() {
        return 0;
    }
    // The value is 0.m * 2^exp with m's leading bit at the top of the last word; exp <= 0
    // because f < 1. Gather the top 256 bits of m, shift right by -exp, round to 128 bits.
    let top = words.len();
    let word = |k: usize| if k < top { words[top - 1 - k] } else { 0 };
    let hi = (u128::from(word(0)) << 64) | u128::from(word(1));
    let lo = (u128::from(word(2)) << 64) | u128::from(word(3));
    let shift = (-exp) as u32;
    if shift >= 128 {
        // Below 2^-128: rounds to 0 unless it is at least 2^-129.
        return u128::from(shift == 128 && hi >> 127 == 1);
    }
    let (value, rest_top) =
        if shift == 0 { (hi, lo >> 127 == 1) } else { (hi >> shift, (hi >> (shift - 1)) & 1 == 1) };
    // Round half away from zero: the exact value is irrational in all our uses, so ties
    // never happen and the choice does not matter.
    value.wrapping_add(u128::from(rest_top))
}

/// `frac(x)` as a 64-bit binary fraction, rounded to nearest (wrapping to 0 at 1).
pub(crate) fn frac_fixed64(x: &BigFloat) -> u64 {
    let v = frac_fixed128(x);
    ((v >> 64) as u64).wrapping_add(((v >> 63) & 1) as u64)
}

/// `frac(position * turns)` at full precision, as a 128-bit binary fraction.
pub(crate) fn phase_fixed128(position: u32, turns: &BigFloat) -> u128 {
    let product = turns.mul(&BigFloat::from_u32(position, 32), PREC + 32, RM);
    frac_fixed128(&product)
}

/// sin and cos of the angle `2 pi * t / 2^128` in float64. The argument is already reduced
/// to one turn, so the only errors left are float64's own (a few 1e-16).
pub(crate) fn sincos_of_turn128(t: u128) -> (f64, f64) {
    // Centre the turn on zero so that angles near a full turn lose no absolute precision.
    let centred = t as i128 as f64 / 2f64.powi(128);
    let angle = std::f64::consts::TAU * centred;
    angle.sin_cos()
}

/// Each frequency of `spec` as the 64-bit binary fraction of a turn per position,
/// `round(2^64 frac(w_i / 2pi))`, split `[lo, hi]` for 32-bit arithmetic.
pub(crate) fn phase_steps(spec: &PeSpec) -> Vec<[u32; 2]> {
    turns_per_position(spec)
        .iter()
        .map(|w| {
            let f = frac_fixed64(w);
            [f as u32, (f >> 32) as u32]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_fractions_round_to_nearest() {
        let p = PREC;
        assert_eq!(frac_fixed64(&BigFloat::from_f64(0.5, p)), 1 << 63);
        assert_eq!(frac_fixed64(&BigFloat::from_f64(2.25, p)), 1 << 62);
        assert_eq!(frac_fixed64(&BigFloat::from_f64(0.0, p)), 0);
        assert_eq!(frac_fixed64(&BigFloat::from_f64(7.0, p)), 0);
        // 2^-64 * 1.5 rounds up to 2; 2^-64 * 1.25 rounds down to 1.
        assert_eq!(frac_fixed64(&BigFloat::from_f64(1.5 * 2f64.powi(-64), p)), 2);
        assert_eq!(frac_fixed64(&BigFloat::from_f64(1.25 * 2f64.powi(-64), p)), 1);
        // Just below one turn wraps to zero.
        assert_eq!(frac_fixed64(&BigFloat::from_f64(1.0 - 2f64.powi(-70), p)), 0);
        assert_eq!(frac_fixed128(&BigFloat::from_f64(0.75, p)), 3 << 126);
    }

    #[test]
    fn first_frequency_is_one_radian_per_position() {
        let spec = PeSpec::new(8).unwrap();
        let turns = turns_per_position(&spec);
        // 1 / (2 pi) = 0.15915494309189533576888376337251436203445964574046 ...
        let expected = 0.159_154_943_091_895_34_f64;
        let got = frac_fixed64(&turns[0]) as f64 / 2f64.powi(64);
        assert!((got - expected).abs() < 1e-17, "{got}");
        // w_1 = 10000^(-2/8) = 0.1 exactly.
        let got1 = frac_fixed64(&turns[1]) as f64 / 2f64.powi(64) * std::f64::consts::TAU;
        assert!((got1 - 0.1).abs() < 1e-16, "{got1}");
    }
}
