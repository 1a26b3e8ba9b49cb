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
//! correctly rounded float32 of `f32(m_h)` times the exact integer distance, so it is exact at
//! every u32 distance where `f32(distance)` would already have rounded, and the same on every
//! device: below 2^24 the distance is exact in float32 and one correctly rounded float32
//! product is that value; from 2^24 on, integer arithmetic builds and rounds the product
//! (`neg_scaled_bits`, twin of `shaders/shared/alibi_common.wgsl`).
//! Zero distances and the masked region are `+0.0`.

use astro_float::{BigFloat, Consts, RoundingMode};
use ndarray::{Array3, ArrayViewMut3};

use crate::cpu::sincos::mul_hi;
use crate::cpu::threads::for_each_chunk;
use crate::error::{Error, Result};
use crate::simd::{Set, Simd};

/// The most heads [`slopes`] and [`AlibiSpec`] accept.
pub const MAX_HEADS: u32 = 65536;

/// The most values (`heads x len x kv_len`) one bias tensor may have: 8 GiB of float32.
pub const MAX_VALUES: u64 = 1 << 31;

/// Positions are u32, so a sequence covers at most positions `0..2^32`.
const POSITIONS: u64 = 1 << 32;

/// Working precision of the slopes' big floats, in bits. It decides the rounding of every
/// slope of up to 65536 heads (a unit test checks); [`exp2_neg_nearest_f32`] would double
/// it otherwise. (Double precision decides every one first; big floats are its fallback.)
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
    // distinct ones), so each is computed once.
    let mut rests: Vec<u32> = exponents.iter().map(|num| num % c).collect();
    rests.sort_unstable();
    rests.dedup();
    let mut cc = None;
    let fractions: Vec<f32> =
        rests.iter().map(|&rest| exp2_neg_nearest_f32(rest, c, &mut cc)).collect();
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

/// The float32 nearest to `2^(-num/den)`, `den` a power of two up to 2^16, `num/den` in
/// `[0, 126)`: from double-precision arithmetic where that decides it (for every fraction
/// `slopes` meets, a unit test checks all 16383), else from big floats (their constants
/// made in `cc` on first use).
fn exp2_neg_nearest_f32(num: u32, den: u32, cc: &mut Option<Consts>) -> f32 {
    exp2_neg_nearest_f32_with(num, den, cc, exp2_neg_frac_nearest_f32_double)
}

/// [`exp2_neg_nearest_f32`] with `double` in place of the double-precision try (the unit
/// tests force the big floats through it).
fn exp2_neg_nearest_f32_with(
    num: u32,
    den: u32,
    cc: &mut Option<Consts>,
    double: fn(u32, u32) -> Option<f32>,
) -> f32 {
    debug_assert!(den.is_power_of_two());
    let (whole, rest) = (num / den, num % den);
    // 2^-whole, exactly; whole < 126 keeps it a normal float32.
    let scale = f32::from_bits((127 - whole) << 23);
    if rest == 0 {
        return scale;
    }
    // y in [1/2, 1]; scaling by a power of two is exact.
    if let Some(y) = double(rest, den) {
        return y * scale;
    }
    let cc = cc.get_or_insert_with(consts);
    // rest/den is a non-integer dyadic rational, so 2^(-rest/den) is irrational: never a
    // midpoint between two floats, and a precision that decides its rounding always exists.
    let mut prec = SLOPE_PREC;
    loop {
        if let Some(y) = exp2_neg_frac_nearest_f32(rest, den, prec, cc) {
            return y * scale;
        }
        prec *= 2;
    }
}

/// How close, in float32 ulps, [`exp2_neg_frac_nearest_f32_double`]'s value may come to a
/// midpoint between two floats before big floats decide: 2^-16, 128 times its error bound.
const DOUBLE_MARGIN: f64 = 1.0 / 65536.0;

/// The float32 nearest to `2^(-rest/den)` (`0 < rest < den <= 2^16`, `den` a power of two)
/// from IEEE double arithmetic alone, or `None` when that is too close to a midpoint between
/// two floats to tell. Only square roots, products and a quotient, each correctly rounded on
/// every IEEE platform, so no libm and the same answer everywhere:
/// `2^(rest/den) = prod 2^(1/2^i)` over the bits of `rest`, where `2^(1/2^i)` is `i` square
/// roots of 2. Each root is within 2^-52 of its value (a square root halves its input's
/// relative error and adds at most 2^-53), the product of at most 16 of them within
/// 24 x 2^-52 after its roundings, the reciprocal within 2^-47: below 2^-23 float32 ulp in
/// `[1/2, 1)`.
fn exp2_neg_frac_nearest_f32_double(rest: u32, den: u32) -> Option<f32> {
    debug_assert!(den.is_power_of_two() && den <= 1 << 16 && 0 < rest && rest < den);
    let k = den.trailing_zeros();
    let (mut root, mut product) = (2.0f64, 1.0f64);
    for i in 1..=k {
        root = root.sqrt();
        // Bit k - i of rest is worth 2^(k - i) / 2^k = 1 / 2^i.
        if (rest >> (k - i)) & 1 == 1 {
            product *= root;
        }
    }
    // y in (1/2, 1): y * 2^24 counts float32 ulps, exactly.
    let ulps = (1.0 / product) * 16_777_216.0;
    let below = ulps.floor();
    let fraction = ulps - below;
    if (fraction - 0.5).abs() <= DOUBLE_MARGIN {
        return None;
    }
    // At most 2^24, exact in float32; times 2^-24 exactly.
    let mantissa = below as u32 + u32::from(fraction > 0.5);
    Some(mantissa as f32 / 16_777_216.0)
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
            return Err(limit("one key's column of the bias (len values, one per query)", len));
        }
        if kv_len > MAX_VALUES {
            return Err(limit("one query's row of the bias (kv_len values, one per key)", kv_len));
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
/// The shaders' twin (`neg_scaled_bits` in `shaders/shared/alibi_common.wgsl`) runs the same
/// integer steps from 2^24 on; below, both take the float product ([`fill_descending`]).
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

/// The float32 bits of the bias between query position `q` and key position `k`: the
/// shaders' `bias_bits`, value by value (the tests' reference for [`fill`]).
#[cfg(test)]
fn bias_bits(slope_bits: u32, q: u32, k: u32, form: Form) -> u32 {
    let d = match form {
        Form::Symmetric => q.abs_diff(k),
        Form::Causal => q.saturating_sub(k),
    };
    neg_scaled_bits(slope_bits, d)
}

/// Values per rayon task: large enough to amortise scheduling, small enough to balance.
const VALUES_PER_TASK: usize = 1 << 15;

/// Values up to which a bias is filled on the calling thread, about 30 us of one core.
/// Handing work to rayon from outside the pool wakes a worker and waits for it, which costs
/// more than that (see `crate::cpu::encode`). Measured on 2 cores (2026-12-02, 32 heads of
/// one query, medians of 60 calls), one thread against the pool, with calls back to back
/// and with 3 ms between them (the pool asleep): 2^18 values 31 against 41 us and 50
/// against 233 us; a decode step's 2^16 8 against 15 and 14 against 96.
const SERIAL_MAX_VALUES: usize = 1 << 18;

/// Distances below this are exact in float32, and so is a float32 slope's product with
/// them rounded once: `0.0 - m * d` is then [`neg_scaled_bits`] (the subtraction from
/// `+0.0` negates without rounding and turns `-0.0` into `+0.0` at `d = 0`), in vector
/// instructions. Slopes are normal and at least 2^-8, so no product is subnormal.
const FLOAT_DISTANCES: i64 = 1 << 24;

/// `out[u]` = the bias of one head at the difference `q - k = s_top - u` (every difference
/// within `(-2^32, 2^32)`): the float form where every distance is below 2^24, else
/// [`neg_scaled_bits`]; the same bits either way.
#[inline(always)]
fn fill_descending(out: &mut [f32], slope_bits: u32, form: Form, s_top: i64) {
    let s_bottom = s_top + 1 - out.len() as i64;
    if s_top < FLOAT_DISTANCES && s_bottom > -FLOAT_DISTANCES {
        // Both ends within (-2^24, 2^24), so every s and u fits i32.
        let (slope, top) = (f32::from_bits(slope_bits), s_top as i32);
        match form {
            Form::Symmetric => {
                for (u, v) in out.iter_mut().enumerate() {
                    *v = 0.0 - slope * (top - u as i32).abs() as f32;
                }
            }
            Form::Causal => {
                for (u, v) in out.iter_mut().enumerate() {
                    *v = 0.0 - slope * (top - u as i32).max(0) as f32;
                }
            }
        }
        return;
    }
    for (u, v) in out.iter_mut().enumerate() {
        let s = s_top - u as i64;
        let d = match form {
            Form::Symmetric => s.unsigned_abs() as u32,
            Form::Causal => s.max(0) as u32,
        };
        *v = f32::from_bits(neg_scaled_bits(slope_bits, d));
    }
}

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

/// [`fill_descending`] with the widest instructions `simd` names (the same bits in each).
#[inline]
fn fill_descending_as(simd: Simd, out: &mut [f32], slope_bits: u32, form: Form, s_top: i64) {
    match simd.set() {
        Set::Portable => fill_descending_portable(out, slope_bits, form, s_top),
        // SAFETY: a `Simd` names a set this CPU runs (see its type).
        #[cfg(target_arch = "x86_64")]
        Set::Avx2 => unsafe { fill_descending_avx2(out, slope_bits, form, s_top) },
        #[cfg(target_arch = "x86_64")]
        Set::Avx512 => unsafe { fill_descending_avx512(out, slope_bits, form, s_top) },
    }
}

#[inline(never)]
fn fill_descending_portable(out: &mut [f32], slope_bits: u32, form: Form, s_top: i64) {
    fill_descending(out, slope_bits, form, s_top);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline(never)]
fn fill_descending_avx2(out: &mut [f32], slope_bits: u32, form: Form, s_top: i64) {
    fill_descending(out, slope_bits, form, s_top);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512cd,avx512vl,avx512bw")]
#[inline(never)]
fn fill_descending_avx512(out: &mut [f32], slope_bits: u32, form: Form, s_top: i64) {
    fill_descending(out, slope_bits, form, s_top);
}

/// Fills the flat `[heads * len, kv_len]` row-major tensor.
///
/// A head's bias depends only on the difference `s = q - k`, and the next query shifts it by
/// one. So a task of whole rows computes each head's values once per difference its rows
/// span (`rows + kv_len - 1` of them rather than `rows * kv_len`), from the largest down,
/// and copies every row out of that table, where some difference reaches 2^24 (the integer
/// form, which the table spares); where all are below it, the float form writes each row
/// in place, faster than the copies. A head with one row in the task (a decode step) is
/// computed in place. Rows longer than a task are cut into pieces computed directly.
fn fill(spec: &AlibiSpec, flat: &mut [f32]) {
    let (_, len, kv_len) = spec.shape();
    if flat.is_empty() {
        return;
    }
    let slope_bits: Vec<u32> = spec.slopes.iter().map(|s| s.to_bits()).collect();
    let (offset, form) = (spec.offset, spec.form);
    // Validated: offset + len <= 2^32 and kv_len <= 2^32, so positions fit u32.
    let query = |row: usize| i64::from(offset + (row % len) as u32);
    let simd = Simd::detect();
    let serial = flat.len() <= SERIAL_MAX_VALUES;
    if kv_len > VALUES_PER_TASK {
        let task = |(task, values): (usize, &mut [f32])| {
            let start = task * VALUES_PER_TASK;
            let (mut row, mut col) = (start / kv_len, start % kv_len);
            let mut values = values;
            while !values.is_empty() {
                let (run, rest) = values.split_at_mut((kv_len - col).min(values.len()));
                // Keys col.. of the row's query: differences from q - col down.
                fill_descending_as(simd, run, slope_bits[row / len], form, query(row) - col as i64);
                values = rest;
                row += 1;
                col = 0;
            }
        };
        for_each_chunk(flat, VALUES_PER_TASK, serial, task);
        return;
    }
    let rows_per_task = VALUES_PER_TASK / kv_len;
    let task = |(task, values): (usize, &mut [f32])| {
        let first_row = task * rows_per_task;
        let n_rows = values.len() / kv_len;
        let mut table = Vec::new();
        let mut r = 0;
        while r < n_rows {
            // The rows of one head in this task, queries q0 .. q0 + run.
            let row = first_row + r;
            let head = row / len;
            let run = (n_rows - r).min((head + 1) * len - row);
            let (slope, q0) = (slope_bits[head], query(row));
            let rows = &mut values[r * kv_len..(r + run) * kv_len];
            // The differences the run's rows span, from q0 + run - 1 down to q0 - kv_len + 1.
            let (s_top, s_bottom) = (q0 + run as i64 - 1, q0 + 1 - kv_len as i64);
            if run == 1 || (s_top < FLOAT_DISTANCES && s_bottom > -FLOAT_DISTANCES) {
                // The float form (a conversion and a product per value, in vectors) writes
                // each row in place faster than a row's copy out of the table, whose source
                // moves by one value a row (BLOOM's 32 x 512 x 512 on 2 cores: see the
                // ALiBi section of ARCHITECTURE.md).
                for (i, out) in rows.chunks_exact_mut(kv_len).enumerate() {
                    fill_descending_as(simd, out, slope, form, q0 + i as i64);
                }
            } else {
                // table[u] is the value at s = q0 + run - 1 - u; row i (query q0 + i, key
                // k at s = q0 + i - k) starts at u = run - 1 - i.
                table.resize(run + kv_len - 1, 0.0);
                fill_descending_as(simd, &mut table, slope, form, q0 + run as i64 - 1);
                for (i, out) in rows.chunks_exact_mut(kv_len).enumerate() {
                    out.copy_from_slice(&table[run - 1 - i..][..kv_len]);
                }
            }
            r += run;
        }
    };
    for_each_chunk(flat, rows_per_task * kv_len, serial, task);
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
        assert!(what.starts_with("one key's column of the bias (len values"), "{what}");
        assert_eq!(n, 1 << 32);
        let (what, n) = refusal(&AlibiSpec::new(1, 0).unwrap().with_kv_len(1 << 32).unwrap());
        assert!(what.starts_with("one query's row of the bias (kv_len values"), "{what}");
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
        // The double-precision path, tried first, must agree wherever it answers, for the
        // fraction in lowest terms and as `slopes` meets it (over 65536).
        let mut cc = consts();
        let (mut undecided, mut double_undecided, den) = (0, 0, 1 << 14);
        for rest in 1..den {
            let fine = exp2_neg_frac_nearest_f32(rest, den, SLOPE_PREC, &mut cc)
                .expect("256 bits decide every slope");
            match exp2_neg_frac_nearest_f32(rest, den, 40, &mut cc) {
                Some(coarse) => assert_eq!(coarse.to_bits(), fine.to_bits(), "{rest}/{den}"),
                None => undecided += 1,
            }
            let double = exp2_neg_frac_nearest_f32_double(rest, den);
            assert_eq!(double, exp2_neg_frac_nearest_f32_double(4 * rest, 4 * den));
            match double {
                Some(y) => assert_eq!(y.to_bits(), fine.to_bits(), "double: {rest}/{den}"),
                None => double_undecided += 1,
            }
        }
        assert!(undecided > 0, "the refinement path was never taken");
        assert_eq!(double_undecided, DOUBLE_UNDECIDED, "the slopes big floats decide");
    }

    /// How many of the 16383 fractions [`exp2_neg_frac_nearest_f32_double`] leaves to big
    /// floats.
    const DOUBLE_UNDECIDED: usize = 0;

    /// Where double precision cannot decide, big floats do, made on first use: forced here
    /// for every slope of 12 and of 48 heads, which must come out the same.
    #[test]
    fn the_big_float_fallback_gives_the_same_slopes() {
        for heads in [12u32, 48] {
            let c = 1 << heads.ilog2();
            let mut cc = None;
            for (k, &slope) in slopes(heads).unwrap().iter().enumerate() {
                let num =
                    if k < c as usize { 8 * (k as u32 + 1) } else { 4 * (2 * (k as u32 - c) + 1) };
                let forced = exp2_neg_nearest_f32_with(num, c, &mut cc, |_, _| None);
                assert_eq!(forced.to_bits(), slope.to_bits(), "{heads} heads, slope {k}");
            }
            assert!(cc.is_some(), "the big floats were made");
        }
    }

    #[test]
    fn exact_powers_of_two_need_no_big_floats() {
        let mut cc = None;
        assert_eq!(exp2_neg_nearest_f32(8, 1, &mut cc), 1.0 / 256.0);
        assert_eq!(exp2_neg_nearest_f32(12, 4, &mut cc), 0.125);
        assert!(cc.is_none());
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

    /// The float form [`fill_descending`] takes below 2^24 is the integer one: every slope of
    /// 1 to 64 heads and of 65536 (the smallest, 2^-8, and the most varied mantissas), at
    /// every distance below 2^16, the 2^16 below 2^24 and 2^16 random ones between.
    #[test]
    fn the_float_form_is_the_integer_form_below_2_pow_24() {
        let mut all: Vec<f32> = (1..=64).flat_map(|h| slopes(h).unwrap()).collect();
        all.extend(slopes(MAX_HEADS).unwrap().iter().step_by(997));
        all.push(f32::from_bits(0x3f7f_ffff));
        all.sort_by(f32::total_cmp);
        all.dedup();
        let top = FLOAT_DISTANCES as u32;
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut random = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as u32 % top
        };
        let distances: Vec<u32> = (0..1 << 16)
            .chain(top - (1 << 16)..top)
            .chain((0..1 << 16).map(|_| random()))
            .collect();
        for &m in &all {
            for &d in &distances {
                let float = (0.0 - m * d as f32).to_bits();
                assert_eq!(float, neg_scaled_bits(m.to_bits(), d), "slope {m:e}, distance {d}");
            }
        }
        // And through the fill's own loops compiled for each instruction set, both forms:
        // `(s_top, values)` within the float range up to both its ends, and past them (the
        // integer steps), the last reaching -2^24 exactly.
        let f = FLOAT_DISTANCES;
        let cases =
            [(f - 1, 40), (5, 40), (-3, 40), (40 - f, 40), (f + 20, 40), (f, 1), (20, f + 21)];
        let slope = 0.375f32.to_bits();
        for simd in Simd::all_here() {
            for form in [Form::Symmetric, Form::Causal] {
                for (s_top, n) in cases {
                    let mut got = vec![9.0f32; n as usize];
                    fill_descending_as(simd, &mut got, slope, form, s_top);
                    // Query 2^30 + s against key 2^30.
                    let k = 1i64 << 30;
                    let same = (0..n).zip(&got).all(|(u, v)| {
                        v.to_bits() == bias_bits(slope, (k + s_top - u) as u32, k as u32, form)
                    });
                    assert!(same, "{simd:?} {form:?}: {n} values from {s_top}");
                }
            }
        }
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
