//! ALiBi, "attention with linear biases" (Press, Smith and Lewis, "Train Short, Test Long",
//! ICLR 2022): the per-head slopes, the validated request ([`AlibiSpec`]) and the bias tensor
//! on the CPU. The GPU path is [`crate::gpu::Context::alibi_bias`]; it gives the same bits.
//!
//! Slopes, for `n` heads: when `n` is a power of two, `m_k = 2^(-8k/n)` for `k = 1..=n`;
//! otherwise the `c = 2^floor(log2 n)` slopes of `c` heads, followed by
//! `2^(-8(2j-1)/(2c))` for `j = 1..=n-c` (the odd-numbered slopes of `2c` heads), as in the
//! paper's reference `get_slopes`. Each slope is the float32 nearest to the exact value.
//!
//! The bias of head `h` between query `i` (at position `offset + i`) and key `j` (at
//! position `j`) is `-m_h |offset + i - j|` in the symmetric form, and `-m_h (offset + i - j)`
//! for `j <= offset + i` and `0` above the diagonal in the causal form. Each value is the
//! correctly rounded float32 of `f32(m_h)` times the exact integer distance, computed in
//! integer arithmetic (`bias_bits`, twin of `shaders/alibi.wgsl`), so it is exact at every u32
//! distance where `f32(distance)` would already have rounded, and the same on every device.
//! Zero distances and the masked region are `+0.0`.

use astro_float::{BigFloat, Consts, RoundingMode};
use ndarray::{Array3, ArrayViewMut3};
use rayon::prelude::*;

use crate::cpu::sincos::mul_hi;
use crate::error::{Error, Result};

/// The most heads [`slopes`] and [`AlibiSpec`] accept.
pub const MAX_HEADS: u32 = 65536;

/// The most values (`heads x len x kv_len`) one bias tensor may have: 8 GiB of float32.
pub const MAX_VALUES: u64 = 1 << 31;

/// Positions are u32, so a sequence covers at most positions `0..2^32`.
const POSITIONS: u64 = 1 << 32;

/// Working precision of the slopes, in bits. It decides the rounding of every slope of up to
/// 65536 heads (a unit test checks); [`exp2_neg_nearest_f32`] would double it otherwise.
const SLOPE_PREC: usize = 256;
const RM: RoundingMode = RoundingMode::ToEven;

/// Which pairs of positions get a bias.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Form {
    /// `-m |q - k|` for every query position `q` and key position `k` (bidirectional
    /// attention).
    #[default]
    Symmetric,
    /// `-m (q - k)` for `k <= q` and `+0.0` for `k > q` (decoder attention). The zeros above
    /// the diagonal are no mask: the caller's causal mask still applies there.
    Causal,
}

/// The float32 slopes of `heads` attention heads, `m_1 > m_2 > ...` for powers of two, each
/// the float32 nearest to its exact value (see the [module docs](self) for the formula).
///
/// ```
/// let s = posenc::alibi::slopes(8)?;
/// assert_eq!(s, [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]);
/// // 12 heads: the 8 above, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
/// let s = posenc::alibi::slopes(12)?;
/// assert_eq!(s[8], std::f32::consts::FRAC_1_SQRT_2);
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidParameter`] naming `heads` unless it is in `1..=65536`.
pub fn slopes(heads: u32) -> Result<Vec<f32>> {
    check_heads(heads)?;
    let c = 1u32 << heads.ilog2();
    // Every slope is 2^(-4t/c): t = 2k for the c slopes of c heads, t = 2j - 1 for the extra
    // ones (2^(-8(2j-1)/(2c)) = 2^(-4(2j-1)/c)).
    let exponents: Vec<u32> =
        (1..=c).map(|k| 8 * k).chain((1..=heads - c).map(|j| 4 * (2 * j - 1))).collect();
    // 2^(-num/c) = 2^-(num / c) * 2^(-(num % c)/c): the fractional parts repeat (at most c/4
    // distinct ones), so each big-float exponential is computed once, on all cores.
    let mut rests: Vec<u32> = exponents.iter().map(|num| num % c).collect();
    rests.sort_unstable();
    rests.dedup();
    let fractions: Vec<f32> =
        rests.par_iter().map_init(consts, |cc, &rest| exp2_neg_nearest_f32(rest, c, cc)).collect();
    Ok(exponents
        .iter()
        .map(|num| {
            let fraction =
                fractions[rests.binary_search(&(num % c)).expect("every rest is listed")];
            // Times 2^-(num / c), a power of two no smaller than 2^-8: exact.
            fraction * f32::from_bits((127 - num / c) << 23)
        })
        .collect())
}

fn check_heads(heads: u32) -> Result<()> {
    if heads == 0 || heads > MAX_HEADS {
        return Err(Error::InvalidParameter {
            field: "heads",
            value: heads.to_string(),
            allowed: "1..=65536",
        });
    }
    Ok(())
}

fn consts() -> Consts {
    // Consts::new only fails when the allocator does; there is nothing to recover then.
    Consts::new().expect("astro-float constant cache allocation")
}

/// The float32 nearest to `2^(-num/den)`, `den` a power of two, `num/den` in `[0, 126)`.
fn exp2_neg_nearest_f32(num: u32, den: u32, cc: &mut Consts) -> f32 {
    debug_assert!(den.is_power_of_two());
    let (whole, rest) = (num / den, num % den);
    // 2^-whole, exactly; whole < 126 keeps it a normal float32.
    let scale = f32::from_bits((127 - whole) << 23);
    if rest == 0 {
        return scale;
    }
    // rest/den is a non-integer dyadic rational, so 2^(-rest/den) is irrational: never a
    // midpoint between two floats, and a precision that decides its rounding always exists.
    let mut prec = SLOPE_PREC;
    loop {
        if let Some(y) = exp2_neg_frac_nearest_f32(rest, den, prec, cc) {
            // y in [1/2, 1]; scaling by a power of two is exact.
            return y * scale;
        }
        prec *= 2;
    }
}

/// The float32 nearest to `2^(-rest/den)` (`0 < rest < den`) from a `prec`-bit computation,
/// or `None` when the computation is too close to a midpoint between two floats to tell.
fn exp2_neg_frac_nearest_f32(rest: u32, den: u32, prec: usize, cc: &mut Consts) -> Option<f32> {
    // rest/den is exact (den is a power of two); ln 2, the product and exp are each correctly
    // rounded, so y = 2^(-rest/den) (1 + eps) with |eps| < 2^(2 - prec).
    let x = BigFloat::from_u32(rest, prec).div(&BigFloat::from_u32(den, prec), prec, RM);
    let y = x.mul(&cc.ln_2(prec, RM), prec, RM).neg().exp(prec, RM, cc);
    nearest_f32_if_decided(&y, prec)
}

/// The float32 nearest to the positive `y`, known to `prec` bits (relative error below
/// `2^(2 - prec)`), or `None` if that error could move it across a rounding midpoint.
fn nearest_f32_if_decided(y: &BigFloat, prec: usize) -> Option<f32> {
    let (words, _, _, exp, _) = y.as_raw_parts().expect("exp of a finite number is finite");
    // y = 0.m * 2^exp, with m's leading bit at the top of the last word. Gather m's top 128
    // bits: 24 for the float, 104 below them.
    let words = crate::exact::significand(words);
    let m = (u128::from(words.word(0)) << 64) | u128::from(words.word(1));
    let kept = (m >> 104) as u32;
    let below = m & ((1 << 104) - 1);
    let half = 1u128 << 103;
    // In units of 2^-104 float ulp: y's error is below 2^(2 - prec) * 2^24 ulp, that is
    // 2^(130 - prec) units, and the bits dropped past 128 below 1 unit. Keep a factor 64.
    let margin = if prec >= 135 { 2 } else { 1u128 << (136 - prec) };
    if below.abs_diff(half) <= margin {
        return None;
    }
    let mantissa = kept + u32::from(below > half);
    // mantissa * 2^(exp - 24), both factors exact floats for the slopes' range.
    let power = f32::from_bits(((exp - 24 + 127) as u32) << 23);
    Some(mantissa as f32 * power)
}

/// A validated ALiBi request: `heads` slopes and the query and key positions of a bias
/// tensor `[heads, len, kv_len]`.
///
/// Query `i < len` sits at position `offset + i`, key `j < kv_len` at position `j`;
/// `kv_len` defaults to `offset + len` (every key up to the last query). A decoding step
/// with a KV cache of `n` tokens is `len = 1, offset = n`.
///
/// ```
/// use posenc::alibi::{AlibiSpec, Form};
///
/// let spec = AlibiSpec::new(8, 4)?.with_form(Form::Causal).with_offset(100)?;
/// assert_eq!(spec.shape(), (8, 4, 104));
/// let bias = posenc::alibi::bias_cpu(&spec)?;
/// assert_eq!(bias[[0, 0, 90]], -5.0); // head 0: slope 1/2, distance 100 - 90
/// assert_eq!(bias[[0, 0, 101]].to_bits(), 0); // key after the query: +0.0
/// # Ok::<(), posenc::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct AlibiSpec {
    len: u64,
    kv_len: Option<u64>,
    offset: u32,
    form: Form,
    slopes: Vec<f32>,
}

impl AlibiSpec {
    /// `heads` heads, `len` queries at positions `0..len`, keys `0..len`, symmetric form.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `heads` unless it is in `1..=65536`, or `len`
    /// if it exceeds 2^32 (positions are u32).
    pub fn new(heads: u32, len: u64) -> Result<Self> {
        check_heads(heads)?;
        if len > POSITIONS {
            return Err(Error::InvalidParameter {
                field: "len",
                value: len.to_string(),
                allowed: "0..=4294967296 (positions are u32)",
            });
        }
        Ok(Self { len, kv_len: None, offset: 0, form: Form::Symmetric, slopes: slopes(heads)? })
    }

    /// The same request with queries at positions `offset..offset + len`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `offset` if `offset + len` exceeds 2^32, or if the
    /// default `kv_len` would.
    pub fn with_offset(mut self, offset: u32) -> Result<Self> {
        if u64::from(offset) + self.len > POSITIONS {
            return Err(Error::InvalidParameter {
                field: "offset",
                value: format!(
                    "{offset} with len {} (the last query would be at position {})",
                    self.len,
                    u64::from(offset) + self.len - 1
                ),
                allowed: "offset + len <= 4294967296 (positions are u32)",
            });
        }
        self.offset = offset;
        Ok(self)
    }

    /// The same request with keys at positions `0..kv_len`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `kv_len` if it exceeds 2^32.
    pub fn with_kv_len(mut self, kv_len: u64) -> Result<Self> {
        if kv_len > POSITIONS {
            return Err(Error::InvalidParameter {
                field: "kv_len",
                value: kv_len.to_string(),
                allowed: "0..=4294967296 (positions are u32)",
            });
        }
        self.kv_len = Some(kv_len);
        Ok(self)
    }

    /// The same request in another form.
    #[must_use]
    pub fn with_form(mut self, form: Form) -> Self {
        self.form = form;
        self
    }

    /// Number of heads.
    pub fn heads(&self) -> u32 {
        self.slopes.len() as u32
    }

    /// Number of queries.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the bias tensor has no values.
    pub fn is_empty(&self) -> bool {
        self.n_values() == 0
    }

    /// Number of keys: as set, or `offset + len`.
    pub fn kv_len(&self) -> u64 {
        self.kv_len.unwrap_or(u64::from(self.offset) + self.len)
    }

    /// Position of the first query.
    pub fn offset(&self) -> u32 {
        self.offset
    }

    /// The form.
    pub fn form(&self) -> Form {
        self.form
    }

    /// The heads' float32 slopes, as [`slopes`] gives them.
    pub fn slopes(&self) -> &[f32] {
        &self.slopes
    }

    /// Number of values of the bias tensor, `heads x len x kv_len` (at most 2^80, so exact).
    pub fn n_values(&self) -> u128 {
        u128::from(self.heads()) * u128::from(self.len) * u128::from(self.kv_len())
    }

    /// `(heads, len, kv_len)`, the bias tensor's shape. Meaningful for the specs that pass
    /// [`AlibiSpec::check_size`] (a larger `len` or `kv_len` may not fit `usize`).
    pub fn shape(&self) -> (usize, usize, usize) {
        (self.heads() as usize, self.len as usize, self.kv_len() as usize)
    }

    /// Refuses bias tensors of more than [`MAX_VALUES`] values, counted with their zero
    /// axes set aside: `len = 0` with `kv_len = 2^32` holds no values, but its shape is no
    /// array's. Every computation calls it before allocating anything.
    ///
    /// The count is checked in steps whose products each fit a u64, so the error names a
    /// true size: first each of `len` and `kv_len`, then one head's `len x kv_len`, then
    /// the whole tensor.
    ///
    /// # Errors
    /// [`Error::Limit`] naming what was counted, the count and the limit.
    pub fn check_size(&self) -> Result<()> {
        let limit = |what, requested| Error::Limit {
            op: "alibi",
            what,
            requested,
            limit_name: "posenc::alibi::MAX_VALUES",
            limit: MAX_VALUES,
        };
        // Each is at most 2^32 (checked where they are set).
        let (len, kv_len) = (self.len, self.kv_len());
        if len > MAX_VALUES {
            return Err(limit("len (queries, a row of the bias each)", len));
        }
        if kv_len > MAX_VALUES {
            return Err(limit("kv_len (keys, a column of the bias each)", kv_len));
        }
        // At most 2^62, then at most 2^16 x 2^31: neither product overflows.
        let per_head = len.max(1) * kv_len.max(1);
        if per_head > MAX_VALUES {
            return Err(limit("one head's bias (len x kv_len values, zero axes aside)", per_head));
        }
        let values = u64::from(self.heads()) * per_head;
        if values > MAX_VALUES {
            return Err(limit(
                "the bias tensor (heads x len x kv_len values, zero axes aside)",
                values,
            ));
        }
        Ok(())
    }
}

/// The float32 bits of `-(slope * d)`, rounded to nearest even, for the bits of a positive
/// normal float32 `slope < 1` and an integer distance `d`. `d = 0` gives `+0.0`.
///
/// The shader's twin (`bias_bits` in `shaders/alibi.wgsl`) runs the same integer steps.
#[inline(always)]
pub(crate) fn neg_scaled_bits(slope_bits: u32, d: u32) -> u32 {
    if d == 0 {
        return 0;
    }
    let biased_exp = slope_bits >> 23;
    let m = (slope_bits & 0x7f_ffff) | 0x80_0000;
    // Normalise d so the 24 x 32-bit product has its leading bit at 55 or 54.
    let lz = d.leading_zeros();
    let dn = d << lz;
    let hi = mul_hi(m, dn);
    let lo = m.wrapping_mul(dn);
    let wide = hi >= 0x80_0000;
    // The top 24 bits of the product, and the bits below them left-aligned in `rest`.
    let (kept, rest) = if wide { (hi, lo) } else { ((hi << 1) | (lo >> 31), lo << 1) };
    let round_bit = rest >> 31;
    let sticky = u32::from(rest & 0x7fff_ffff != 0);
    let up = round_bit & (sticky | (kept & 1));
    // slope * d = m * dn * 2^(biased_exp - 150 - lz); `kept` carries the hidden bit, which
    // adds the one that makes the field right, and a rounding carry moves into it on its own.
    let exp_field = biased_exp + if wide { 31 } else { 30 } - lz;
    ((exp_field << 23) + kept + up) | 0x8000_0000
}

/// The float32 bits of the bias between query position `q` and key position `k`.
#[inline(always)]
pub(crate) fn bias_bits(slope_bits: u32, q: u32, k: u32, form: Form) -> u32 {
    let d = match form {
        Form::Symmetric => q.abs_diff(k),
        Form::Causal => q.saturating_sub(k),
    };
    neg_scaled_bits(slope_bits, d)
}

/// Values per rayon task: large enough to amortise scheduling, small enough to balance.
const VALUES_PER_TASK: usize = 1 << 15;

/// The bias tensor `[heads, len, kv_len]` of `spec`, multi-threaded, bit-identical to the
/// GPU path ([`crate::gpu::Context::alibi_bias`]).
///
/// ```
/// let spec = posenc::alibi::AlibiSpec::new(2, 3)?;
/// let bias = posenc::alibi::bias_cpu(&spec)?;
/// // Head 1 of 2 has slope 2^-8; query 0 against key 2 is 2 positions away.
/// assert_eq!(bias[[1, 0, 2]], -2.0 / 256.0);
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// # Errors
/// [`Error::Limit`] if the tensor has more than [`MAX_VALUES`] values; [`Error::Alloc`] if
/// its memory cannot be had.
pub fn bias_cpu(spec: &AlibiSpec) -> Result<Array3<f32>> {
    spec.check_size()?;
    // The size comes from the caller's heads and lengths: up to 16 GiB within MAX_VALUES,
    // so a refusal from the allocator is an error, not an abort.
    let mut out = crate::alloc::try_zeros::<f32, _>("the ALiBi bias", spec.shape())?;
    fill(spec, out.as_slice_mut().expect("a new array is contiguous"));
    Ok(out)
}

/// Like [`bias_cpu`], writing into `out`, which must have the shape `[heads, len, kv_len]`.
///
/// # Errors
/// [`Error::Limit`] as [`bias_cpu`]; [`Error::Shape`] if `out` has another shape.
pub fn bias_cpu_into(spec: &AlibiSpec, mut out: ArrayViewMut3<'_, f32>) -> Result<()> {
    spec.check_size()?;
    let expected = spec.shape();
    if out.dim() != expected {
        return Err(Error::Shape {
            op: "alibi",
            what: "output",
            expected: format!("{expected:?}"),
            actual: format!("{:?}", out.dim()),
        });
    }
    match out.as_slice_mut() {
        Some(flat) => fill(spec, flat),
        None => out.assign(&bias_cpu(spec)?),
    }
    Ok(())
}

/// Fills the flat `[heads * len, kv_len]` row-major tensor.
///
/// A head's bias depends only on the difference `s = q - k`, and the next query shifts it by
/// one. So a task of whole rows computes each head's values once per difference its rows
/// span (`rows + kv_len - 1` of them rather than `rows * kv_len`) and copies every row out of
/// that table, reversed. Rows longer than a task are cut into pieces computed directly.
fn fill(spec: &AlibiSpec, flat: &mut [f32]) {
    let (_, len, kv_len) = spec.shape();
    if flat.is_empty() {
        return;
    }
    let slope_bits: Vec<u32> = spec.slopes.iter().map(|s| s.to_bits()).collect();
    let (offset, form) = (spec.offset, spec.form);
    // Validated: offset + len <= 2^32 and kv_len <= 2^32, so positions fit u32.
    let query = |row: usize| offset + (row % len) as u32;
    if kv_len > VALUES_PER_TASK {
        flat.par_chunks_mut(VALUES_PER_TASK).enumerate().for_each(|(task, values)| {
            let start = task * VALUES_PER_TASK;
            let (mut row, mut col) = (start / kv_len, start % kv_len);
            let mut values = values;
            while !values.is_empty() {
                let (run, rest) = values.split_at_mut((kv_len - col).min(values.len()));
                let (slope, q) = (slope_bits[row / len], query(row));
                for (k, v) in (col as u32..).zip(run) {
                    *v = f32::from_bits(bias_bits(slope, q, k, form));
                }
                values = rest;
                row += 1;
                col = 0;
            }
        });
        return;
    }
    let rows_per_task = VALUES_PER_TASK / kv_len;
    flat.par_chunks_mut(rows_per_task * kv_len).enumerate().for_each(|(task, values)| {
        let first_row = task * rows_per_task;
        let n_rows = values.len() / kv_len;
        let mut table = Vec::with_capacity(n_rows + kv_len - 1);
        let mut r = 0;
        while r < n_rows {
            // The rows of one head in this task, queries q0, q0 + 1, ...: table[t] is the
            // value at s = q0 - (kv_len - 1) + t.
            let row = first_row + r;
            let head = row / len;
            let run = (n_rows - r).min((head + 1) * len - row);
            let slope = slope_bits[head];
            let s_first = i64::from(query(row)) - (kv_len as i64 - 1);
            table.clear();
            table.extend((s_first..s_first + (run + kv_len - 1) as i64).map(|s| {
                // |s| <= max(q, kv_len - 1) < 2^32.
                let d = match form {
                    Form::Symmetric => s.unsigned_abs() as u32,
                    Form::Causal => s.max(0) as u32,
                };
                f32::from_bits(neg_scaled_bits(slope, d))
            }));
            let rows = values[r * kv_len..(r + run) * kv_len].chunks_exact_mut(kv_len);
            for (i, out) in rows.enumerate() {
                // Key k of row i is at t = i + kv_len - 1 - k.
                for (v, &t) in out.iter_mut().zip(table[i..i + kv_len].iter().rev()) {
                    *v = t;
                }
            }
            r += run;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(what, requested)` of `check_size`'s error.
    fn refusal(spec: &AlibiSpec) -> (&'static str, u64) {
        match spec.check_size() {
            Err(Error::Limit { what, requested, limit, .. }) => {
                assert_eq!(limit, MAX_VALUES);
                (what, requested)
            }
            other => panic!("{spec:?}: {other:?}"),
        }
    }

    #[test]
    fn sizes_are_reported_unwrapped_and_zero_axes_do_not_hide_the_others() {
        // 2^32 x 2^32 values is 2^64, which a u64 count would wrap to 0 or saturate.
        let (what, n) = refusal(&AlibiSpec::new(1, 1 << 32).unwrap());
        assert!(what.starts_with("len"), "{what}");
        assert_eq!(n, 1 << 32);
        let (what, n) = refusal(&AlibiSpec::new(1, 0).unwrap().with_kv_len(1 << 32).unwrap());
        assert!(what.starts_with("kv_len"), "{what}");
        assert_eq!(n, 1 << 32);
        // No axis over the limit, but the product 2^78 past any u64.
        let spec = AlibiSpec::new(MAX_HEADS, 1 << 31).unwrap().with_kv_len(1 << 31).unwrap();
        assert_eq!(
            refusal(&spec),
            ("one head's bias (len x kv_len values, zero axes aside)", 1 << 62)
        );
        // No values, yet a shape (65536, 0, 2^31) of 2^47 once the zero axis is set aside.
        let spec = AlibiSpec::new(MAX_HEADS, 0).unwrap().with_kv_len(1 << 31).unwrap();
        assert_eq!(spec.n_values(), 0);
        assert_eq!(refusal(&spec).1, 1 << 47);
        // Up to the limit exactly is fine, empty or not.
        assert!(AlibiSpec::new(1, 0).unwrap().with_kv_len(1 << 31).unwrap().check_size().is_ok());
        assert!(
            AlibiSpec::new(2, 1 << 15).unwrap().with_kv_len(1 << 15).unwrap().check_size().is_ok()
        );
        assert!(AlibiSpec::new(1, 0).unwrap().check_size().is_ok());
    }

    #[test]
    fn undecided_roundings_are_refined_not_guessed() {
        // Every slope of up to 65536 heads is 2^-e with e a multiple of 2^-13, so these are
        // all the fractional parts that ever occur: 256 bits decide each one. At 40 bits
        // about one rounding in a hundred is too close to call; each must come back None,
        // and each decided one must agree with 256 bits.
        let mut cc = consts();
        let (mut undecided, den) = (0, 1 << 14);
        for rest in 1..den {
            let fine = exp2_neg_frac_nearest_f32(rest, den, SLOPE_PREC, &mut cc)
                .expect("256 bits decide every slope");
            match exp2_neg_frac_nearest_f32(rest, den, 40, &mut cc) {
                Some(coarse) => assert_eq!(coarse.to_bits(), fine.to_bits(), "{rest}/{den}"),
                None => undecided += 1,
            }
        }
        assert!(undecided > 0, "the refinement path was never taken");
    }

    #[test]
    fn exact_powers_of_two_need_no_big_floats() {
        let mut cc = consts();
        assert_eq!(exp2_neg_nearest_f32(8, 1, &mut cc), 1.0 / 256.0);
        assert_eq!(exp2_neg_nearest_f32(12, 4, &mut cc), 0.125);
    }

    /// The docs' example of what rounding the distance first costs (docs/alibi.md): 12
    /// heads, slope 2^-0.5, distance 2^24 + 1. The exact product is 11863283.707..., so the
    /// correctly rounded bias is -11863284; `m * f32(d)` rounds d to 2^24 first and gives
    /// -11863283. (Slope 1/8 at the same distance is a tie both ways round to -2097152.)
    #[test]
    fn rounding_the_distance_first_is_off_by_one_at_2_pow_24_plus_1() {
        let m = slopes(12).unwrap()[8];
        assert_eq!(m, std::f32::consts::FRAC_1_SQRT_2);
        let distance = (1u32 << 24) + 1;
        let exact = f64::from(m) * f64::from(distance); // exact: 24 + 25 bits
        assert!((exact - 11_863_283.707_106_77).abs() < 1e-6, "{exact}");
        assert_eq!(f32::from_bits(neg_scaled_bits(m.to_bits(), distance)), -11_863_284.0);
        assert_eq!(-(m * distance as f32), -11_863_283.0);
        // The tie of slope 1/8: -2097152.125 lies halfway; even wins for both.
        let eighth = 0.125f32;
        assert_eq!(f32::from_bits(neg_scaled_bits(eighth.to_bits(), distance)), -2_097_152.0);
        assert_eq!(-(eighth * distance as f32), -2_097_152.0);
    }

    #[test]
    fn scaled_bits_round_to_nearest_even() {
        let half = 0.5f32.to_bits();
        assert_eq!(f32::from_bits(neg_scaled_bits(half, 1)), -0.5);
        assert_eq!(f32::from_bits(neg_scaled_bits(half, 3)), -1.5);
        assert_eq!(neg_scaled_bits(half, 0), 0);
        // 0.5 * (2^25 + 2) = 2^24 + 1, halfway between 2^24 and 2^24 + 2: even wins.
        assert_eq!(f32::from_bits(neg_scaled_bits(half, (1 << 25) + 2)), -16_777_216.0);
        assert_eq!(f32::from_bits(neg_scaled_bits(half, (1 << 25) + 6)), -16_777_220.0);
        // The largest mantissa times the largest distance carries into the exponent.
        let s = f32::from_bits(0x3f7f_ffff);
        let want = -(((u64::from(0xff_ffffu32) * u64::from(u32::MAX)) as f32) * 2f32.powi(-24));
        assert_eq!(f32::from_bits(neg_scaled_bits(s.to_bits(), u32::MAX)), want);
    }
}
