//! High-precision arithmetic on the host: frequencies in turns and the reference path's
//! phase reduction. Everything here runs in big-float arithmetic (astro-float), never in
//! float64, because float64 runs out of bits long before position 2^32 (see ARCHITECTURE.md).

use std::sync::{Arc, Mutex, PoisonError};

use astro_float::{BigFloat, Consts, RoundingMode, Sign};

use crate::spec::{Frequencies, PeSpec, Variant};

/// Working precision in bits. Positions have 32 bits and the turn fractions we keep have at
/// most 128, so 256 bits leaves a wide margin for the rounding of `ln`, `exp` and `pi`.
pub(crate) const PREC: usize = 256;
const RM: RoundingMode = RoundingMode::ToEven;

/// A big float's significand (astro-float's words, least significant first) read as 64-bit
/// words from the top: `word(0)` holds its leading 64 bits, `word(1)` the next 64, and so on,
/// zero past the end. astro-float's word is 64 bits on 64-bit targets and 32 on wasm32; code
/// that indexed the words directly would take 32 bits for 64 there and give other bits.
pub(crate) struct Significand<'a, W> {
    words: &'a [W],
    /// Words of `W` per 64 bits: 1 or 2.
    per: usize,
}

impl<'a, W: Copy + Into<u64>> Significand<'a, W> {
    /// The words of [`BigFloat::as_raw_parts`], `bits_per_word` (64 or 32) bits each.
    pub(crate) fn new(words: &'a [W], bits_per_word: usize) -> Self {
        debug_assert!(bits_per_word == 64 || bits_per_word == 32);
        Significand { words, per: 64 / bits_per_word }
    }

    /// The `k`-th 64 bits from the top.
    pub(crate) fn word(&self, k: usize) -> u64 {
        let n = self.words.len();
        (0..self.per).fold(0u64, |v, j| {
            let i = k * self.per + j;
            let w: u64 = if i < n { self.words[n - 1 - i].into() } else { 0 };
            v.checked_shl((64 / self.per) as u32).unwrap_or(0) | w
        })
    }

    /// Whether any bit below the top `k` 64-bit words is set.
    pub(crate) fn any_below(&self, k: usize) -> bool {
        let n = self.words.len();
        self.words[..n.saturating_sub(k * self.per)].iter().any(|&w| w.into() != 0)
    }
}

/// [`Significand`] of this target's astro-float words.
pub(crate) fn significand(words: &[astro_float::Word]) -> Significand<'_, astro_float::Word> {
    Significand::new(words, astro_float::WORD_BIT_SIZE)
}

fn consts() -> Consts {
    // Consts::new only fails when the allocator does; there is nothing to recover then.
    Consts::new().expect("astro-float constant cache allocation")
}

fn two_pi(cc: &mut Consts) -> BigFloat {
    cc.pi(PREC, RM).mul(&BigFloat::from_u8(2, PREC), PREC, RM)
}

fn big(x: f64) -> BigFloat {
    BigFloat::from_f64(x, PREC)
}

/// The angular frequencies `w_i` of a spec's published formula, in radians per position, at
/// [`PREC`] bits. Each is `w_0 r^i`; every product adds at most one rounding of 2^-256
/// relative, so even 32768 of them stay below 2^-240. A spec's own frequencies
/// ([`PeSpec::with_inv_freq`]) are taken as they are (every f64 is exact at [`PREC`] bits).
pub(crate) fn angular_frequencies(spec: &PeSpec) -> Vec<BigFloat> {
    if let Some(inv_freq) = spec.inv_freq() {
        return inv_freq.iter().map(|&w| big(w)).collect();
    }
    let mut cc = consts();
    let n = spec.n_freqs();
    let ln = |x: f64, cc: &mut Consts| big(x).ln(PREC, RM, cc);
    // ln r and w_0 per variant; see Variant's docs for the formulas.
    let (ln_ratio, w0) = match spec.variant() {
        Variant::Vaswani | Variant::DistilBert | Variant::Marian => {
            // w_i = base^(-2i/d).
            let l = ln(spec.base(), &mut cc).mul(&BigFloat::from_u8(2, PREC), PREC, RM);
            (l.div(&BigFloat::from_u32(spec.dim(), PREC), PREC, RM), BigFloat::from_u8(1, PREC))
        }
        Variant::Fairseq | Variant::Whisper => {
            // w_i = exp(-i ln(base) / (h - 1)), h = floor(d/2) >= 2.
            let l = ln(spec.base(), &mut cc);
            (l.div(&BigFloat::from_u32(n - 1, PREC), PREC, RM), BigFloat::from_u8(1, PREC))
        }
        Variant::Tensor2Tensor => {
            // w_i = min exp(-i ln(max / min) / max(n - 1, 1)).
            let (min, max) = (big(spec.min_timescale()), big(spec.base()));
            let l = max.div(&min, PREC, RM).ln(PREC, RM, &mut cc);
            (l.div(&BigFloat::from_u32((n - 1).max(1), PREC), PREC, RM), min)
        }
    };
    let ratio = ln_ratio.neg().exp(PREC, RM, &mut cc);
    let mut w = w0;
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        out.push(w.clone());
        w = w.mul(&ratio, PREC, RM);
    }
    out
}

/// The frequencies of [`angular_frequencies`] in turns per position (`w_i / 2pi`).
pub(crate) fn turns_per_position(spec: &PeSpec) -> Vec<BigFloat> {
    let two_pi = two_pi(&mut consts());
    angular_frequencies(spec).iter().map(|w| w.div(&two_pi, PREC, RM)).collect()
}

/// `x` rounded to nearest (ties to even) with `bits` significant bits (`bits <= 53`), as
/// float64: exact for f64 (53) and, through an exact conversion, for f32 (24). `x` must be
/// finite, and the result within float64's normal range.
pub(crate) fn round_to_bits(x: &BigFloat, bits: u32) -> f64 {
    let Some((words, _, sign, exp, _)) = x.as_raw_parts() else {
        unreachable!("round_to_bits of a finite number")
    };
    if x.is_zero() {
        return 0.0;
    }
    // x = 0.m * 2^exp with m's leading bit at the top of the last (most significant) word.
    let m = significand(words);
    let top = m.word(0);
    let sticky_below = m.any_below(1);
    let drop = 64 - bits;
    let kept = top >> drop;
    let rest = top & ((1u64 << drop) - 1);
    let half = 1u64 << (drop - 1);
    let up = rest > half || (rest == half && (sticky_below || kept & 1 == 1));
    let m = kept + u64::from(up);
    let v = m as f64 * 2f64.powi(exp - bits as i32);
    if sign == Sign::Neg { -v } else { v }
}

/// The nearest f32 to `x` (ties to even).
pub(crate) fn nearest_f32(x: &BigFloat) -> f32 {
    round_to_bits(x, 24) as f32
}

/// The nearest f64 to `x` (ties to even).
pub(crate) fn nearest_f64(x: &BigFloat) -> f64 {
    round_to_bits(x, 53)
}

/// The frequencies of [`Frequencies::F32`]: each variant's float32 recipe, with every
/// elementary operation rounded to nearest f32 (ARCHITECTURE.md, "float32 frequencies"); a
/// spec's own frequencies each rounded to the nearest f32 (exact for a float32 buffer; a
/// normal f32, as the spec's range guarantees).
pub(crate) fn f32_frequencies(spec: &PeSpec) -> Vec<f32> {
    if let Some(inv_freq) = spec.inv_freq() {
        return inv_freq.iter().map(|&w| w as f32).collect();
    }
    let mut cc = consts();
    let n = spec.n_freqs();
    let exp_f32 = |v: f32, cc: &mut Consts| nearest_f32(&big(f64::from(v)).exp(PREC, RM, cc));
    match spec.variant() {
        Variant::Vaswani | Variant::DistilBert | Variant::Marian => {
            // inv_freq = 1 / base ** (arange(0, d, 2, float32) / d), all in float32.
            let ln_base = big(f64::from(spec.base() as f32)).ln(PREC, RM, &mut cc);
            (0..n)
                .map(|i| {
                    let e = (2 * i) as f32 / spec.dim() as f32;
                    let pow = ln_base.mul(&big(f64::from(e)), PREC, RM).exp(PREC, RM, &mut cc);
                    1.0f32 / nearest_f32(&pow)
                })
                .collect()
        }
        Variant::Fairseq | Variant::Whisper => {
            // inc = ln(base) / (h - 1) in float64; w_i = exp(f32(i) * f32(-inc)) in float32.
            let ln_base = nearest_f64(&big(spec.base()).ln(PREC, RM, &mut cc));
            let neg_inc = (-(ln_base / f64::from(n - 1))) as f32;
            (0..n).map(|i| exp_f32(i as f32 * neg_inc, &mut cc)).collect()
        }
        Variant::Tensor2Tensor => {
            // inc = f32(ln(max / min)) / f32(max(n - 1, 1)); w_i = f32(min) * exp(f32(i) * -inc).
            let ratio = spec.base() / spec.min_timescale();
            let ln_ratio = nearest_f64(&big(ratio).ln(PREC, RM, &mut cc)) as f32;
            let inc = ln_ratio / (n.max(2) - 1) as f32;
            let min = spec.min_timescale() as f32;
            (0..n).map(|i| min * exp_f32(i as f32 * -inc, &mut cc)).collect()
        }
    }
}

/// Exponent bias of the turn steps of [`Frequencies::F32`]: entry `k` holds the step of
/// `2^(k - F32_STEP_BIAS)` radians. Angles `m 2^e` (m of 24 bits) of every formula have
/// `e` in `[-114, 41]`, and those of frequencies given in `[2^-126, 2^64]`
/// ([`PeSpec::with_inv_freq`]) `e` in `[-149, 73]` (positions `[1, 2^33)`), inside
/// `[-160, 95]`.
pub const F32_STEP_BIAS: i32 = 160;
/// Entries in the table of turn steps of powers of two.
pub const F32_STEPS: usize = 256;

/// Specs whose [`kernel_words`] are kept. A process rarely uses more than a few specs;
/// sixteen covers every variant at a couple of dims while bounding the memory (at most
/// 16 x 32768 pairs x 8 bytes = 4 MiB at the largest dim).
pub(crate) const KERNEL_WORDS_CACHED: usize = 16;

/// The most recently used specs' kernel words, most recent last, keyed by
/// [`kernel_words_key`].
static KERNEL_WORDS: WordsCache = WordsCache::new(KERNEL_WORDS_CACHED);

/// A bounded least-recently-used list of kernel words per spec. A linear scan: `PeSpec`
/// holds `f64`s and so is not `Hash`, and comparing sixteen entries costs nanoseconds
/// against the big-float work a miss costs (0.2 to 1 ms).
pub(crate) struct WordsCache {
    capacity: usize,
    entries: Mutex<Vec<(PeSpec, Arc<[u32]>)>>,
}

impl WordsCache {
    pub(crate) const fn new(capacity: usize) -> Self {
        Self { capacity, entries: Mutex::new(Vec::new()) }
    }

    /// The words of `spec`, from the cache or computed by `compute` (outside the lock, so
    /// a miss never stalls other threads' hits).
    pub(crate) fn get(
        &self,
        spec: &PeSpec,
        compute: impl FnOnce(&PeSpec) -> Vec<u32>,
    ) -> Arc<[u32]> {
        let key = kernel_words_key(spec);
        // A panic elsewhere while the lock was held cannot leave the list inconsistent
        // (every update is a single push or remove), so a poisoned lock is still usable.
        let lock = || self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        {
            let mut entries = lock();
            if let Some(i) = entries.iter().position(|(k, _)| *k == key) {
                let entry = entries.remove(i);
                let words = Arc::clone(&entry.1);
                entries.push(entry);
                return words;
            }
        }
        let words: Arc<[u32]> = compute(&key).into();
        let mut entries = lock();
        // Another thread may have computed the same spec meanwhile; keep one copy.
        if let Some(i) = entries.iter().position(|(k, _)| *k == key) {
            entries.remove(i);
        }
        if entries.len() >= self.capacity {
            entries.remove(0);
        }
        if self.capacity > 0 {
            entries.push((key, Arc::clone(&words)));
        }
        words
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// The part of a spec the kernel words depend on: the start index and padding position
/// only move or blank rows, so specs differing only there share one cache entry.
fn kernel_words_key(spec: &PeSpec) -> PeSpec {
    spec.clone().with_start_index(0).with_padding_idx(None)
}

/// What the table kernels read per spec, as flat u32 words. Exact frequencies: each
/// frequency's step `round(2^64 frac(w_i / 2pi))` as `[lo, hi]`. f32 frequencies: each
/// frequency's f32 bits as `[bits, 0]`, then [`F32_STEPS`] steps of `2^(k - 160)` radians.
///
/// Cached per spec (the last [`KERNEL_WORDS_CACHED`]): the big-float work costs 0.2 to
/// 1 ms, far more than a table of a few positions, and every table and every PE-cache
/// miss needs the words.
pub(crate) fn kernel_words(spec: &PeSpec) -> Arc<[u32]> {
    KERNEL_WORDS.get(spec, compute_kernel_words)
}

/// [`kernel_words`] computed afresh.
fn compute_kernel_words(spec: &PeSpec) -> Vec<u32> {
    let split = |f: u64| [f as u32, (f >> 32) as u32];
    match spec.frequencies() {
        Frequencies::Exact => phase_steps(spec).into_iter().flatten().collect(),
        Frequencies::F32 => {
            let mut out: Vec<u32> =
                f32_frequencies(spec).iter().flat_map(|w| [w.to_bits(), 0]).collect();
            let turn = inv_two_pi();
            for k in 0..F32_STEPS as i32 {
                let e = k - F32_STEP_BIAS;
                let scale = BigFloat::from_u8(2, PREC).powi(e.unsigned_abs() as usize, PREC, RM);
                let t =
                    if e >= 0 { turn.mul(&scale, PREC, RM) } else { turn.div(&scale, PREC, RM) };
                out.extend(split(frac_fixed64(&t)));
            }
            out
        }
    }
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
    let m = significand(words);
    let hi = (u128::from(m.word(0)) << 64) | u128::from(m.word(1));
    let lo = (u128::from(m.word(2)) << 64) | u128::from(m.word(3));
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
pub(crate) fn phase_fixed128(position: u64, turns: &BigFloat) -> u128 {
    let product = turns.mul(&BigFloat::from_u64(position, 64), PREC + 64, RM);
    frac_fixed128(&product)
}

/// `frac(angle / 2pi)` as a 128-bit binary fraction, for a finite non-negative angle in
/// radians (every f64 is exact in [`PREC`] bits).
/// `inv_two_pi` is [`inv_two_pi`]'s value, computed once by the caller.
pub(crate) fn angle_to_turn128(angle: f64, inv_two_pi: &BigFloat) -> u128 {
    frac_fixed128(&big(angle).mul(inv_two_pi, PREC, RM))
}

/// `1 / 2pi` at [`PREC`] bits.
pub(crate) fn inv_two_pi() -> BigFloat {
    BigFloat::from_u8(1, PREC).div(&two_pi(&mut consts()), PREC, RM)
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
    /// wasm32's 32-bit words give the same 64-bit words as 64-bit targets' words.
    #[test]
    fn significand_reads_the_same_bits_from_32_and_64_bit_words() {
        let x = inv_two_pi();
        let (words, ..) = x.as_raw_parts().unwrap();
        #[allow(clippy::unnecessary_cast)] // u32 on wasm32
        let wide: Vec<u64> = words.iter().map(|&w| w as u64).collect();
        let narrow: Vec<u32> = if astro_float::WORD_BIT_SIZE == 64 {
            wide.iter().flat_map(|&w| [w as u32, (w >> 32) as u32]).collect()
        } else {
            wide.iter().map(|&w| w as u32).collect()
        };
        let a = Significand::new(&narrow, 32);
        if astro_float::WORD_BIT_SIZE == 64 {
            let b = Significand::new(&wide, 64);
            for k in 0..6 {
                assert_eq!(a.word(k), b.word(k), "word {k}");
                assert_eq!(a.any_below(k), b.any_below(k), "below {k}");
            }
        }
        // 1/2pi = (2/pi) / 4 has 2/pi's significand, the well-known bits of Payne-Hanek
        // argument reduction: a2f9836e 4e441529 fc2757d1 f534ddc0 db629599 ...
        assert_eq!(a.word(0), 0xa2f9_836e_4e44_1529, "the leading 64 bits of 1/2pi");
        assert_eq!(a.word(1), 0xfc27_57d1_f534_ddc0);
        assert!(a.any_below(2) && !Significand::new(&[0u32, 0, 1], 32).any_below(1));
        assert_eq!(
            Significand::new(&[0x89ab_cdefu32, 0x0123_4567], 32).word(0),
            0x0123_4567_89ab_cdef
        );
        assert_eq!(Significand::new(&[5u32], 32).word(0), 5 << 32);
    }

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

    fn words_specs() -> Vec<PeSpec> {
        use crate::spec::Variant;
        vec![
            PeSpec::new(8).unwrap(),
            PeSpec::new(1026).unwrap().with_base(500_000.0).unwrap(),
            PeSpec::for_variant(Variant::Fairseq, 513).unwrap().with_start_index(7),
            PeSpec::for_variant(Variant::Whisper, 768).unwrap(),
            PeSpec::for_variant(Variant::Tensor2Tensor, 64)
                .unwrap()
                .with_timescales(0.5, 2e4)
                .unwrap(),
            PeSpec::new(512).unwrap().with_frequencies(Frequencies::F32),
            PeSpec::for_variant(Variant::Marian, 6).unwrap().with_frequencies(Frequencies::F32),
        ]
    }

    #[test]
    fn cached_kernel_words_equal_fresh_ones() {
        for spec in words_specs() {
            let fresh = compute_kernel_words(&spec);
            // Twice: the first call may compute, the second must hit.
            assert_eq!(&kernel_words(&spec)[..], &fresh[..], "{spec:?}");
            assert_eq!(&kernel_words(&spec)[..], &fresh[..], "{spec:?}");
            // Start index and padding position do not change the words.
            let moved = spec.with_start_index(12345).with_padding_idx(Some(3));
            assert_eq!(&kernel_words(&moved)[..], &fresh[..], "{moved:?}");
        }
    }

    #[test]
    fn the_words_cache_is_bounded_and_keeps_the_most_recent() {
        let cache = WordsCache::new(4);
        let computed = std::cell::Cell::new(0);
        let get = |dim: u32| {
            let spec = PeSpec::new(dim).unwrap();
            cache.get(&spec, |s| {
                computed.set(computed.get() + 1);
                vec![s.dim()]
            })
        };
        for dim in (2..=40).step_by(2) {
            assert_eq!(&get(dim)[..], &[dim]);
        }
        assert_eq!(computed.get(), 20);
        // The last four are held; touching the oldest of them keeps it past one more miss.
        assert_eq!(&get(34)[..], &[34]);
        assert_eq!(computed.get(), 20);
        get(42);
        assert_eq!(computed.get(), 21);
        get(34);
        assert_eq!(computed.get(), 21);
        get(36);
        assert_eq!(computed.get(), 22, "36 was the least recently used and was dropped");
        assert_eq!(cache.len(), 4);

        // The process-wide cache stays at its bound whatever is asked of it.
        for dim in (2..=2 * KERNEL_WORDS_CACHED as u32 + 2).step_by(2) {
            kernel_words(&PeSpec::new(dim).unwrap());
        }
        assert!(KERNEL_WORDS.len() <= KERNEL_WORDS_CACHED);
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
