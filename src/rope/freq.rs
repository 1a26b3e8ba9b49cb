//! The rotary frequencies of a spec, computed at 256 bits from the published formulas and
//! the float64 parameters, then held as 64-bit fractions of a turn for the exact phase.
//!
//! Hugging Face computes `inv_freq` in float32 (`base ** (arange / dim)` on a float32
//! tensor), which is a few float32 ulps (~1e-7 relative) off the formula; at position 1e5
//! that alone moves the angle by up to 1e-2 rad. posenc's contract is the formula itself.

use std::sync::Mutex;

use astro_float::{BigFloat, Consts, RoundingMode, Sign};

use super::{Frequencies, RopeSpec, Scaling};
use crate::exact::{PREC, frac_fixed64, significand};

const RM: RoundingMode = RoundingMode::ToEven;

/// Big-float arithmetic at [`PREC`] bits with a constant cache.
struct Big {
    cc: Consts,
}

impl Big {
    fn new() -> Self {
        // Consts::new only fails when the allocator does; there is nothing to recover then.
        Self { cc: Consts::new().expect("astro-float constant cache allocation") }
    }
    fn f(&self, v: f64) -> BigFloat {
        BigFloat::from_f64(v, PREC)
    }
    fn u(&self, v: u64) -> BigFloat {
        BigFloat::from_u64(v, PREC)
    }
    fn ln(&mut self, x: &BigFloat) -> BigFloat {
        x.ln(PREC, RM, &mut self.cc)
    }
    fn exp(&mut self, x: &BigFloat) -> BigFloat {
        x.exp(PREC, RM, &mut self.cc)
    }
    fn two_pi(&mut self) -> BigFloat {
        self.cc.pi(PREC, RM).mul(&self.u(2), PREC, RM)
    }
}

fn mul(a: &BigFloat, b: &BigFloat) -> BigFloat {
    a.mul(b, PREC, RM)
}
fn div(a: &BigFloat, b: &BigFloat) -> BigFloat {
    a.div(b, PREC, RM)
}
fn add(a: &BigFloat, b: &BigFloat) -> BigFloat {
    a.add(b, PREC, RM)
}
fn sub(a: &BigFloat, b: &BigFloat) -> BigFloat {
    a.sub(b, PREC, RM)
}

/// `base^(-2i/r)` for `i` in `0..r/2`, for a base given by its natural log: one `exp` and
/// repeated products (each adds at most 2^-256 relative; 32768 of them stay below 2^-240).
fn default_freqs(big: &mut Big, ln_base: &BigFloat, r: u32) -> Vec<BigFloat> {
    let n = r / 2;
    let ratio = big.exp(&div(&mul(ln_base, &big.u(2)), &big.u(u64::from(r))).neg());
    let mut w = big.u(1);
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        out.push(w.clone());
        w = mul(&w, &ratio);
    }
    out
}

/// The default frequencies of an NTK-stretched base, `base' = base * g^(r / (r - 2))`
/// (dynamic NTK's `g` by length, HunYuan's fixed `alpha`): `ln base' = ln base + r / (r - 2)
/// ln g`. For `r = 2` the only frequency is `base'^0 = 1` whatever `base'` is (HF's exponent
/// `r / (r - 2)` divides by zero there).
fn ntk_freqs(big: &mut Big, ln_base: &BigFloat, g: &BigFloat, r: u32) -> Vec<BigFloat> {
    if r == 2 {
        return vec![big.u(1)];
    }
    let exponent = div(&big.u(u64::from(r)), &big.u(u64::from(r - 2)));
    let ln_scaled = add(ln_base, &mul(&exponent, &big.ln(g)));
    default_freqs(big, &ln_scaled, r)
}

/// The angular frequencies `w_i` (radians per position) of `spec` for `seq_len`.
fn angular(big: &mut Big, spec: &RopeSpec, seq_len: u64) -> Vec<BigFloat> {
    let r = spec.rotary_dim();
    let ln_base = big.ln(&big.f(spec.base()));
    match spec.scaling() {
        Scaling::None => default_freqs(big, &ln_base, r),
        Scaling::Linear { factor } => {
            let f = big.f(*factor);
            default_freqs(big, &ln_base, r).iter().map(|w| div(w, &f)).collect()
        }
        Scaling::Dynamic { factor, max_position_embeddings } => {
            // g = factor * s / m - (factor - 1), s = max(s, m), taken as 1 + factor (s - m) / m,
            // the same number without the cancellation that loses the 1 (and gives ln 0) for
            // a factor past the working precision.
            let m = big.u(*max_position_embeddings);
            let s = big.u(seq_len.max(*max_position_embeddings));
            let f = big.f(*factor);
            let g = add(&big.u(1), &div(&mul(&f, &sub(&s, &m)), &m));
            ntk_freqs(big, &ln_base, &g, r)
        }
        Scaling::NtkAlpha { alpha } => ntk_freqs(big, &ln_base, &big.f(*alpha), r),
        Scaling::Yarn(y) => {
            let two_pi = big.two_pi();
            let original = big.u(y.original_max_position_embeddings);
            let rr = big.u(u64::from(r));
            // The dimension at which a frequency turns `rotations` times over the original
            // context: r ln(original / (rotations 2 pi)) / (2 ln base).
            let mut correction = |rotations: f64| {
                let turns = mul(&big.f(rotations), &two_pi);
                let ln = big.ln(&div(&original, &turns));
                div(&mul(&rr, &ln), &mul(&big.u(2), &ln_base))
            };
            let mut low = correction(y.beta_fast);
            let mut high = correction(y.beta_slow);
            if y.truncate {
                low = low.floor();
                high = high.ceil();
            }
            let zero = big.u(0);
            let top = big.u(u64::from(r - 1));
            if low < zero {
                low = zero.clone();
            }
            if high > top {
                high = top;
            }
            if low == high {
                // HF's guard against a zero-width ramp.
                high = add(&high, &big.f(0.001));
            }
            let width = sub(&high, &low);
            let one = big.u(1);
            let factor = big.f(y.factor);
            default_freqs(big, &ln_base, r)
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let t = div(&sub(&big.u(i as u64), &low), &width);
                    let ramp = if t < zero {
                        zero.clone()
                    } else if t > one {
                        one.clone()
                    } else {
                        t
                    };
                    // interpolation * ramp + extrapolation * (1 - ramp)
                    let interpolated = div(w, &factor);
                    add(&mul(&interpolated, &ramp), &mul(w, &sub(&one, &ramp)))
                })
                .collect()
        }
        Scaling::LongRope(l) => {
            let ext = if seq_len > l.original_max_position_embeddings {
                &l.long_factor
            } else {
                &l.short_factor
            };
            default_freqs(big, &ln_base, r)
                .iter()
                .zip(ext)
                .map(|(w, &e)| div(w, &big.f(e)))
                .collect()
        }
        Scaling::Llama3(l) => {
            let two_pi = big.two_pi();
            let original = big.u(l.original_max_position_embeddings);
            let (lff, hff) = (big.f(l.low_freq_factor), big.f(l.high_freq_factor));
            let low_wavelen = div(&original, &lff);
            let high_wavelen = div(&original, &hff);
            let factor = big.f(l.factor);
            let one = big.u(1);
            default_freqs(big, &ln_base, r)
                .iter()
                .map(|w| {
                    let wavelen = div(&two_pi, w);
                    if wavelen < high_wavelen {
                        w.clone()
                    } else if wavelen > low_wavelen || lff == hff {
                        // Equal factors: the band is the single wavelength L / low, which a
                        // transcendental 2 pi base^(2i/r) never is; only a 256-bit tie gets
                        // here, divided rather than a 0 / 0 (transformers' NaN).
                        div(w, &factor)
                    } else {
                        let smooth = div(&sub(&div(&original, &wavelen), &lff), &sub(&hff, &lff));
                        let k = add(&div(&sub(&one, &smooth), &factor), &smooth);
                        mul(w, &k)
                    }
                })
                .collect()
        }
        Scaling::Proportional(p) => {
            let k = p.rope_angles(r) as usize;
            let factor = big.f(p.factor);
            let zero = big.u(0);
            default_freqs(big, &ln_base, r)
                .iter()
                .enumerate()
                .map(|(i, w)| if i < k { div(w, &factor) } else { zero.clone() })
                .collect()
        }
        // Exactly the given values: from_f64 is exact.
        // (-0 is 0.)
        Scaling::Explicit { inv_freq, .. } => {
            inv_freq.iter().map(|&w| if w == 0.0 { big.u(0) } else { big.f(w) }).collect()
        }
        Scaling::PerFrequency { factors, .. } => default_freqs(big, &ln_base, r)
            .iter()
            .zip(factors)
            .map(|(w, &f)| div(w, &big.f(f)))
            .collect(),
    }
}

/// Specs whose frequencies [`resolve`] keeps: a decode loop asks for the same ones every
/// step, and each costs about 0.3 ms of 256-bit arithmetic at r = 128.
const CACHED_SPECS: usize = 16;

/// What of `seq_len` the frequencies of `spec` depend on: nothing (0) but for `dynamic`
/// (the length, from `max_position_embeddings` up) and `longrope` (whether it passes the
/// original context).
fn seq_len_key(spec: &RopeSpec, seq_len: u64) -> u64 {
    match spec.scaling() {
        Scaling::Dynamic { max_position_embeddings, .. } => seq_len.max(*max_position_embeddings),
        Scaling::LongRope(l) => u64::from(seq_len > l.original_max_position_embeddings),
        _ => 0,
    }
}

/// [`compute`], kept for the last [`CACHED_SPECS`] (spec, length) pairs asked for.
pub(super) fn resolve(spec: &RopeSpec, seq_len: u64) -> Frequencies {
    type Cache = Vec<(RopeSpec, u64, Frequencies)>;
    static CACHE: Mutex<Cache> = Mutex::new(Vec::new());
    let key = seq_len_key(spec, seq_len);
    {
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = cache.iter().position(|(s, k, _)| *k == key && s == spec) {
            // Most recently used last.
            let entry = cache.remove(i);
            let freqs = entry.2.clone();
            cache.push(entry);
            return freqs;
        }
    }
    // Computed outside the lock: other threads' lookups need not wait for it.
    let freqs = compute(spec, seq_len);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= CACHED_SPECS {
        cache.remove(0);
    }
    cache.push((spec.clone(), key, freqs.clone()));
    freqs
}

/// The frequencies of `spec` for `seq_len`, computed, in the default SSE mode whatever the
/// caller's ([`resolve`] keeps them for later calls).
pub(super) fn compute(spec: &RopeSpec, seq_len: u64) -> Frequencies {
    crate::simd::in_default_mode(|| compute_here(spec, seq_len))
}

fn compute_here(spec: &RopeSpec, seq_len: u64) -> Frequencies {
    let mut big = Big::new();
    let w = angular(&mut big, spec, seq_len);
    let two_pi = big.two_pi();
    let steps = w
        .iter()
        .map(|w| {
            let f = frac_fixed64(&div(w, &two_pi));
            [f as u32, (f >> 32) as u32]
        })
        .collect();
    let inv_freq = w.iter().map(to_f64).collect();
    Frequencies { inv_freq, steps, attention_factor: spec.scaling().attention_factor() as f32 }
}

/// A finite, non-negative big float rounded to the nearest float64 (ties to even), for
/// values in float64's normal range.
fn to_f64(x: &BigFloat) -> f64 {
    if x.is_zero() {
        return 0.0;
    }
    let Some((words, _, sign, exp, _)) = x.as_raw_parts() else {
        unreachable!("frequencies are finite")
    };
    debug_assert!(sign == Sign::Pos);
    // x = 0.m * 2^exp with m's top bit at the top of the last word.
    let m = significand(words);
    let hi = m.word(0);
    let sticky = m.any_below(1);
    // Keep 53 bits of hi; the 11 below and the rest decide the rounding.
    let kept = hi >> 11;
    let rest = hi & 0x7ff;
    let half = 0x400;
    let up = rest > half || (rest == half && (sticky || kept & 1 == 1));
    let mantissa = kept + u64::from(up);
    // mantissa * 2^(exp - 53), scaled in two steps so no power of two leaves float64's
    // range on the way; a rounding carry to 2^53 is still exact.
    let e = exp - 53;
    let first = e.clamp(-1000, 1000);
    mantissa as f64 * 2f64.powi(first) * 2f64.powi(e - first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_frequencies_equal_computed_ones_for_every_length_they_depend_on() {
        let base = RopeSpec::new(64).unwrap();
        let dynamic = base
            .clone()
            .with_scaling(Scaling::Dynamic { factor: 2.0, max_position_embeddings: 100 })
            .unwrap();
        for spec in [&base, &dynamic] {
            for seq_len in [0, 1, 100, 101, 5000, 5000, 1] {
                assert_eq!(resolve(spec, seq_len), compute(spec, seq_len), "{seq_len}");
            }
        }
        // The dynamic scheme depends on lengths past max_position_embeddings only.
        assert_eq!(seq_len_key(&dynamic, 7), seq_len_key(&dynamic, 100));
        assert_ne!(seq_len_key(&dynamic, 101), seq_len_key(&dynamic, 100));
        assert_eq!(seq_len_key(&base, 7), seq_len_key(&base, 1 << 40));
    }
    use crate::rope::{Llama3, Yarn};

    fn spec(r: u32, base: f64, scaling: Scaling) -> RopeSpec {
        RopeSpec::new(r).unwrap().with_base(base).unwrap().with_scaling(scaling).unwrap()
    }

    #[test]
    fn default_frequencies_match_powf() {
        let f = spec(128, 10000.0, Scaling::None).frequencies(0);
        for (i, &w) in f.inv_freq().iter().enumerate() {
            let want = 10000f64.powf(-(2.0 * i as f64) / 128.0);
            assert!((w - want).abs() <= 4.0 * f64::EPSILON * want, "{i}: {w} {want}");
        }
        assert_eq!(f.inv_freq()[0], 1.0);
        assert_eq!(f.attention_factor(), 1.0);
    }

    #[test]
    fn big_float_to_f64_rounds_to_nearest() {
        for v in [1.0, 0.1, 1e-300, 3.0e300, 0.123_456_789_012_345_68, 2f64.powi(-1000)] {
            assert_eq!(to_f64(&BigFloat::from_f64(v, PREC)), v);
        }
        // 1 + 2^-53 is a tie: even rounds down; 1 + 3 * 2^-54 rounds up.
        let one = BigFloat::from_u8(1, PREC);
        let tie = add(&one, &BigFloat::from_f64(2f64.powi(-53), PREC));
        assert_eq!(to_f64(&tie), 1.0);
        let above = add(&tie, &BigFloat::from_f64(2f64.powi(-60), PREC));
        assert_eq!(to_f64(&above), 1.0 + f64::EPSILON);
    }

    #[test]
    fn llama3_keeps_high_and_divides_low_frequencies() {
        let f =
            spec(128, 500000.0, Scaling::Llama3(Llama3::new(8.0, 1.0, 4.0, 8192))).frequencies(0);
        let d = spec(128, 500000.0, Scaling::None).frequencies(0);
        assert_eq!(f.inv_freq()[0], d.inv_freq()[0]);
        let last = 63;
        assert!((f.inv_freq()[last] * 8.0 - d.inv_freq()[last]).abs() < 1e-20);
    }

    #[test]
    fn dynamic_rotary_dim_2_has_frequency_1() {
        let s = Scaling::Dynamic { factor: 4.0, max_position_embeddings: 16 };
        assert_eq!(spec(2, 10000.0, s).frequencies(1000).inv_freq(), [1.0]);
    }

    /// HunYuan's NTK-alpha: the default frequencies of `base * alpha^(r / (r - 2))`, and
    /// for `r = 2` the one frequency 1.
    #[test]
    fn ntk_alpha_stretches_the_base() {
        let got = spec(8, 10000.0, Scaling::NtkAlpha { alpha: 50.0 }).frequencies(1);
        let want = spec(8, 10000.0 * 50f64.powf(8.0 / 6.0), Scaling::None).frequencies(1);
        for (k, (&g, &w)) in got.inv_freq().iter().zip(want.inv_freq()).enumerate() {
            assert!((g - w).abs() <= 4.0 * f64::EPSILON * w, "{k}: {g} {w}");
        }
        assert_eq!(
            spec(2, 10000.0, Scaling::NtkAlpha { alpha: 50.0 }).frequencies(1).inv_freq(),
            [1.0]
        );
    }

    /// A dynamic factor far past the working precision (accepted: it is finite and
    /// positive) keeps the default frequencies up to max_position_embeddings, where g is
    /// exactly 1, and past it gives a base far larger, not ln 0 (a panic before).
    #[test]
    fn dynamic_with_a_huge_factor_keeps_g_at_least_one() {
        let d = spec(16, 10000.0, Scaling::None).frequencies(0);
        for factor in [1e300, f64::MAX, 1e16] {
            let s = Scaling::Dynamic { factor, max_position_embeddings: 4096 };
            let spec = spec(16, 10000.0, s);
            assert_eq!(spec.frequencies(1).inv_freq(), d.inv_freq(), "{factor}");
            assert_eq!(spec.frequencies(4096).inv_freq(), d.inv_freq(), "{factor}");
            let past = spec.frequencies(4097);
            assert_eq!(past.inv_freq()[0], 1.0, "{factor}");
            for (k, (&w, &w0)) in past.inv_freq().iter().zip(d.inv_freq()).enumerate().skip(1) {
                assert!(w.is_finite() && w >= 0.0 && w < w0, "{factor} {k}: {w} against {w0}");
            }
        }
        // A modest factor: g = 1 + f (s - m) / m exactly as HF's f s / m - (f - 1).
        let s = Scaling::Dynamic { factor: 2.0, max_position_embeddings: 100 };
        let got = spec(8, 10000.0, s).frequencies(300).inv_freq()[1];
        let base = 10000.0 * (2.0f64 * 300.0 / 100.0 - 1.0).powf(8.0 / 6.0);
        let want = base.powf(-2.0 / 8.0);
        assert!((got - want).abs() <= 4.0 * f64::EPSILON * want, "{got} {want}");
    }

    #[test]
    fn yarn_ends_are_extrapolated_and_interpolated() {
        let f = spec(64, 10000.0, Scaling::Yarn(Yarn::new(16.0, 2048))).frequencies(0);
        let d = spec(64, 10000.0, Scaling::None).frequencies(0);
        assert_eq!(f.inv_freq()[0], d.inv_freq()[0]);
        assert!((f.inv_freq()[31] * 16.0 - d.inv_freq()[31]).abs() < 1e-18);
    }
}
