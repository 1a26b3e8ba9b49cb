//! RoPE frequency scaling as Hugging Face's `rope_scaling` object defines it: the schemes,
//! their validation, and the JSON reader.
//!
//! Every scheme is held with the float64 parameters its JSON gives; the frequencies they
//! define are computed from those values at 256 bits (see [`super::RopeSpec::frequencies`]).

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::error::{Error, Result, float};
use crate::spec::MAX_INV_FREQ;

/// The `rope_type` values posenc knows, as Hugging Face spells them.
pub const ROPE_TYPES: &[&str] =
    &["default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional", "ntk_alpha"];

/// The keys each rope type reads besides `rope_type`/`type`: any other is refused.
pub(crate) const ROPE_TYPE_KEYS: &[(&str, &[&str])] = &[
    ("default", &[]),
    ("linear", &["factor"]),
    ("dynamic", &["factor", "max_position_embeddings", "original_max_position_embeddings"]),
    (
        "yarn",
        &[
            "factor",
            "original_max_position_embeddings",
            "max_position_embeddings",
            "beta_fast",
            "beta_slow",
            "mscale",
            "mscale_all_dim",
            "attention_factor",
            "truncate",
            // The YaRN authors' configs (NousResearch's Yarn-Llama-2, Yarn-Mistral) carry it
            // for their dynamic variant's code; their static YaRN, and transformers', ignore
            // it: read past, a bool.
            "finetuned",
        ],
    ),
    (
        "longrope",
        &[
            "short_factor",
            "long_factor",
            "factor",
            "attention_factor",
            "original_max_position_embeddings",
            "max_position_embeddings",
        ],
    ),
    (
        "llama3",
        &[
            "factor",
            "low_freq_factor",
            "high_freq_factor",
            "original_max_position_embeddings",
            "max_position_embeddings",
        ],
    ),
    ("proportional", &["factor", "partial_rotary_factor"]),
    ("ntk_alpha", &["alpha"]),
];

/// Largest `rope_scaling` JSON text accepted, in bytes. A longrope object for the largest
/// rotary dimension (two vectors of 32768 numbers) is well under it.
pub const MAX_JSON_BYTES: usize = 4 << 20;

/// Most entries a longrope factor vector may have: one per frequency of the largest
/// rotary dimension.
pub const MAX_FACTORS: usize = (super::MAX_HEAD_DIM / 2) as usize;

/// YaRN's defaults for `beta_fast` and `beta_slow` (HF: `get("beta_fast") or 32`).
pub const YARN_BETA_FAST: f64 = 32.0;
/// See [`YARN_BETA_FAST`].
pub const YARN_BETA_SLOW: f64 = 1.0;

/// How the rotary frequencies are scaled. The variants follow Hugging Face's `rope_scaling`
/// (`transformers.modeling_rope_utils`); [`Scaling::PerFrequency`] is the general form
/// underneath most of them: `w_i = base^(-2i/r) / factors[i]`.
#[derive(Clone, Debug, PartialEq, Default)]
#[non_exhaustive]
pub enum Scaling {
    /// `w_i = base^(-2i/r)` (HF `"default"`).
    #[default]
    None,
    /// Position interpolation: `w_i = base^(-2i/r) / factor` (HF `"linear"`).
    Linear {
        /// The interpolation factor, finite and >= 2^-64 (it divides the frequencies).
        factor: f64,
    },
    /// Dynamic NTK: the base grows with the sequence length `s`:
    /// `base' = base * (factor * s' / m - (factor - 1))^(r / (r - 2))`, `s' = max(s, m)`,
    /// `m = max_position_embeddings` (HF `"dynamic"`).
    Dynamic {
        /// The scaling factor, > 0.
        factor: f64,
        /// The model's `max_position_embeddings`.
        max_position_embeddings: u64,
    },
    /// YaRN (HF `"yarn"`).
    Yarn(Yarn),
    /// LongRoPE, Phi-3's per-frequency factors (HF `"longrope"`).
    LongRope(LongRope),
    /// Llama 3.1's piecewise scaling by wavelength (HF `"llama3"`).
    Llama3(Llama3),
    /// Gemma 4's proportional RoPE (HF `"proportional"`): the first
    /// `int(partial_rotary_factor * r // 2)` frequencies are the default ones over the whole
    /// rotary width `r`, divided by `factor`; the rest are 0: their pairs are rotated by
    /// angle 0 (cos 1, sin 0), which leaves finite values as they are.
    Proportional(Proportional),
    /// HunYuan's NTK-alpha (transformers' `ntk_alpha`, which the HunYuan families' rotary
    /// modules make of a `"dynamic"` RoPE with a non-zero `alpha`): a fixed stretch of the
    /// base, `base' = base * alpha^(r / (r - 2))`, whatever the sequence length. For `r = 2`
    /// the only frequency is `base'^0 = 1`.
    NtkAlpha {
        /// The stretch, finite and >= 2^-64 (below 1 it shrinks the base; the largest
        /// frequency is then at most `1 / alpha`).
        alpha: f64,
    },
    /// Any per-frequency divisor: `w_i = base^(-2i/r) / factors[i]`, and cos and sin
    /// multiplied by `attention_factor`.
    PerFrequency {
        /// One divisor per frequency (`r / 2` of them), each finite and >= 2^-64.
        factors: Vec<f64>,
        /// Multiplies cos and sin; its float32 a positive normal number.
        attention_factor: f64,
    },
    /// A model's own frequencies, taken exactly as given: `w_i = inv_freq[i]` radians per
    /// position (the base does not enter), and cos and sin multiplied by
    /// `attention_factor`. For reproducing a framework whose float32 `inv_freq` is not the
    /// correctly rounded formula: dump its buffer and pass the values; posenc reduces
    /// `p * inv_freq[i]` exactly for those very values.
    Explicit {
        /// `w_i`, one per frequency (`r / 2` of them), each finite, >= 0 (0: the pair is
        /// rotated by angle 0, as proportional RoPE's last pairs are) and at most
        /// [`MAX_INV_FREQ`](crate::MAX_INV_FREQ) (past it 256-bit arithmetic no longer
        /// holds the fraction of a turn a position advances).
        inv_freq: Vec<f64>,
        /// Multiplies cos and sin; its float32 a positive normal number.
        attention_factor: f64,
    },
}

/// YaRN's parameters. With `ramp_i = clamp((i - low) / (high - low), 0, 1)`,
/// `w_i = base^(-2i/r) * (ramp_i / factor + 1 - ramp_i)`, where `low` and `high` are the
/// dimensions at which a frequency turns `beta_fast` and `beta_slow` times over
/// `original_max_position_embeddings` positions (floored and ceiled when `truncate`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Yarn {
    /// The context extension factor, finite and >= 2^-64 (it divides the frequencies).
    pub factor: f64,
    /// The context length the model was trained with.
    pub original_max_position_embeddings: u64,
    /// Rotations above which a frequency is left unscaled (default 32).
    pub beta_fast: f64,
    /// Rotations below which a frequency is fully interpolated (default 1).
    pub beta_slow: f64,
    /// DeepSeek's `mscale`: with `mscale_all_dim`, the attention factor is
    /// `m(factor, mscale) / m(factor, mscale_all_dim)`.
    pub mscale: Option<f64>,
    /// DeepSeek's `mscale_all_dim`.
    pub mscale_all_dim: Option<f64>,
    /// An explicit attention factor, overriding the mscale rule.
    pub attention_factor: Option<f64>,
    /// Floor `low` and ceil `high` (HF's default, true).
    pub truncate: bool,
}

impl Yarn {
    /// YaRN with the given factor and original context length and HF's defaults for the
    /// rest (`beta_fast` 32, `beta_slow` 1, no mscale, truncate).
    pub fn new(factor: f64, original_max_position_embeddings: u64) -> Self {
        Self {
            factor,
            original_max_position_embeddings,
            beta_fast: YARN_BETA_FAST,
            beta_slow: YARN_BETA_SLOW,
            mscale: None,
            mscale_all_dim: None,
            attention_factor: None,
            truncate: true,
        }
    }
}

/// LongRoPE's parameters: `w_i = base^(-2i/r) / ext_i` with `ext = long_factor` when the
/// sequence is longer than `original_max_position_embeddings`, else `short_factor`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct LongRope {
    /// Divisors for sequences up to the original length, one per frequency, each finite
    /// and >= 2^-64.
    pub short_factor: Vec<f64>,
    /// Divisors for longer sequences, one per frequency, each finite and >= 2^-64.
    pub long_factor: Vec<f64>,
    /// The context extension factor; sets the default attention factor.
    pub factor: Option<f64>,
    /// An explicit attention factor, else `sqrt(1 + ln(factor) / ln(original))` (1 when
    /// `factor <= 1`).
    pub attention_factor: Option<f64>,
    /// The context length the model was trained with.
    pub original_max_position_embeddings: u64,
}

impl LongRope {
    /// LongRoPE with both vectors, the original context length and the extension factor.
    pub fn new(
        short_factor: Vec<f64>,
        long_factor: Vec<f64>,
        factor: Option<f64>,
        original_max_position_embeddings: u64,
    ) -> Self {
        Self {
            short_factor,
            long_factor,
            factor,
            attention_factor: None,
            original_max_position_embeddings,
        }
    }
}

/// Llama 3.1's parameters. With wavelength `l_i = 2 pi / w_i`, `L = original`:
/// `l_i < L / high_freq_factor` keeps `w_i`; `l_i > L / low_freq_factor` divides it by
/// `factor`; in between `w_i ((1 - k) / factor + k)` with
/// `k = (L / l_i - low_freq_factor) / (high_freq_factor - low_freq_factor)`. With equal
/// factors (Llama 4) that band is the one wavelength `L / low_freq_factor`, which no frequency
/// has: `2 pi base^(2i/r)` is never rational.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Llama3 {
    /// The divisor of low frequencies, finite and >= 2^-64.
    pub factor: f64,
    /// > 0.
    pub low_freq_factor: f64,
    /// >= `low_freq_factor`.
    pub high_freq_factor: f64,
    /// The context length the model was trained with.
    pub original_max_position_embeddings: u64,
}

impl Llama3 {
    /// Llama 3.1's scaling with the given parameters.
    pub fn new(
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: u64,
    ) -> Self {
        Self { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings }
    }
}

/// Proportional RoPE's parameters (Gemma 4's full-attention layers). With rotary width `r`
/// (the whole head in Hugging Face's rotary module) and `k = int(partial_rotary_factor * r
/// // 2)`: `w_i = base^(-2i/r) / factor` for `i < k`, and `w_i = 0` for `k <= i < r/2`.
///
/// Unlike a partial rotary RoPE (`default` with `partial_rotary_factor`), whose `k`
/// frequencies are taken over the rotated width (`base^(-2i/(2k))`), the exponent here keeps
/// the whole width `r`: same rotated pairs, slower angles.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Proportional {
    /// Divides every frequency (HF's default 1); finite and >= 2^-64.
    pub factor: f64,
    /// The share of the pairs that rotate, in [0, 1] (HF's default 1).
    pub partial_rotary_factor: f64,
}

impl Proportional {
    /// Proportional RoPE rotating `partial_rotary_factor` of the pairs, frequencies
    /// divided by `factor`.
    pub fn new(factor: f64, partial_rotary_factor: f64) -> Self {
        Self { factor, partial_rotary_factor }
    }

    /// How many of the `rotary_dim / 2` frequencies are not zero:
    /// `int(partial_rotary_factor * rotary_dim // 2)`, as Python computes it in float64.
    pub fn rope_angles(&self, rotary_dim: u32) -> u32 {
        // The product is exact or rounded once in float64, as in Python; halving is exact.
        let k = (self.partial_rotary_factor * f64::from(rotary_dim) / 2.0).floor();
        // In range for a valid factor (<= 1); clamped so an unvalidated one cannot overflow.
        k.clamp(0.0, f64::from(rotary_dim / 2)) as u32
    }
}

/// A typed error about one field of a `rope_scaling` object.
pub(super) fn invalid(
    field: impl Into<String>,
    value: impl Into<String>,
    allowed: impl Into<String>,
) -> Error {
    Error::RopeScaling { field: field.into(), value: value.into(), allowed: allowed.into() }
}

/// `v` as a whole number in 1..=2^53 (a JSON number written as an integer or as a float,
/// 8192 or 8192.0, as Python takes either), if it is one.
pub(super) fn whole_number(v: f64) -> Option<u64> {
    (v.fract() == 0.0 && (1.0..=9_007_199_254_740_992.0).contains(&v)).then_some(v as u64)
}

const POSITIVE: &str = "a finite number > 0";
const WHOLE: &str = "a whole number in 1..=9007199254740992";
const ATTENTION: &str = "a finite number whose float32 is normal and > 0";
const FACTORS: &str = "an array of finite numbers > 0, one per frequency (rotary_dim / 2)";
/// A model's own frequencies and their attention factor are options of their own
/// (`inv_freq`, `attention_factor`), not keys of a `rope_scaling` object, and their errors
/// name them so (as [`crate::PeSpec::with_inv_freq`]'s do).
const INV_FREQ_VALUES: &str = "finite numbers in [0, 2^64] radians per position";
/// A factor that divides a frequency: the largest frequency is 1 radian per position, and
/// the quotient must stay within [`MAX_INV_FREQ`].
const DIVISOR: &str = "a finite number >= 2^-64 (it divides frequencies of up to 1 rad per \
                       position)";

fn check_positive(field: &str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 { Ok(()) } else { Err(invalid(field, float(v), POSITIVE)) }
}

/// Checks a factor the frequencies are divided by (see [`DIVISOR`]).
fn check_divisor(field: &str, v: f64) -> Result<()> {
    if v.is_finite() && v >= 1.0 / MAX_INV_FREQ {
        Ok(())
    } else {
        Err(invalid(field, float(v), DIVISOR))
    }
}

fn check_whole(field: &str, v: u64) -> Result<()> {
    if (1..=1 << 53).contains(&v) { Ok(()) } else { Err(invalid(field, v.to_string(), WHOLE)) }
}

/// Checks factors the frequencies are divided by, one per frequency (see [`DIVISOR`]).
fn check_divisors(field: &str, factors: &[f64]) -> Result<()> {
    check_vector(field, factors, |v| v.is_finite() && v >= 1.0 / MAX_INV_FREQ, DIVISOR)
}

fn check_vector(field: &str, factors: &[f64], ok: impl Fn(f64) -> bool, range: &str) -> Result<()> {
    if factors.len() > MAX_FACTORS {
        return Err(invalid(
            field,
            format!("{} numbers", factors.len()),
            format!("at most {MAX_FACTORS} numbers ({FACTORS})"),
        ));
    }
    for (k, &v) in factors.iter().enumerate() {
        if !ok(v) {
            return Err(invalid(format!("{field}[{k}]"), float(v), range));
        }
    }
    Ok(())
}

/// `0.1 * m * ln(s) + 1`, or 1 when `s <= 1`: YaRN's magnitude scale (in float64; the
/// attention factor is rounded to float32 before use, far above this error).
fn yarn_mscale(s: f64, m: f64) -> f64 {
    if s <= 1.0 { 1.0 } else { 0.1 * m * s.ln() + 1.0 }
}

impl Scaling {
    /// The attention factor that multiplies cos and sin, as Hugging Face defines it: 1 for
    /// `None`, `Linear`, `Dynamic`, `Llama3`, `Proportional` and `NtkAlpha`; YaRN's and
    /// LongRoPE's rules otherwise.
    ///
    /// Computed in float64 from the float64 parameters, as Hugging Face does (in the default
    /// rounding, whatever the calling thread's); it is rounded to float32 once, before it
    /// multiplies the float32 cos and sin.
    pub fn attention_factor(&self) -> f64 {
        crate::simd::in_default_mode(|| self.attention_factor_here())
    }

    fn attention_factor_here(&self) -> f64 {
        match self {
            Scaling::None
            | Scaling::Linear { .. }
            | Scaling::Dynamic { .. }
            | Scaling::Llama3(_)
            | Scaling::Proportional(_)
            | Scaling::NtkAlpha { .. } => 1.0,
            Scaling::Yarn(y) => match (y.attention_factor, y.mscale, y.mscale_all_dim) {
                (Some(a), _, _) => a,
                // HF tests both for truthiness: absent and 0 mean "not given".
                (None, Some(m), Some(a)) if m != 0.0 && a != 0.0 => {
                    yarn_mscale(y.factor, m) / yarn_mscale(y.factor, a)
                }
                _ => yarn_mscale(y.factor, 1.0),
            },
            Scaling::LongRope(l) => match (l.attention_factor, l.factor) {
                (Some(a), _) => a,
                (None, Some(f)) if f > 1.0 => {
                    (1.0 + f.ln() / (l.original_max_position_embeddings as f64).ln()).sqrt()
                }
                _ => 1.0,
            },
            Scaling::PerFrequency { attention_factor, .. }
            | Scaling::Explicit { attention_factor, .. } => *attention_factor,
        }
    }

    /// The name Hugging Face gives this scheme (`"per_frequency"` for the general form).
    pub fn rope_type(&self) -> &'static str {
        match self {
            Scaling::None => "default",
            Scaling::Linear { .. } => "linear",
            Scaling::Dynamic { .. } => "dynamic",
            Scaling::Yarn(_) => "yarn",
            Scaling::LongRope(_) => "longrope",
            Scaling::Llama3(_) => "llama3",
            Scaling::Proportional(_) => "proportional",
            Scaling::NtkAlpha { .. } => "ntk_alpha",
            Scaling::PerFrequency { .. } => "per_frequency",
            Scaling::Explicit { .. } => "explicit",
        }
    }

    /// Checks every parameter's range (the same checks [`Scaling::from_hf_json`] runs).
    /// Vector lengths are checked against the rotary dimension by
    /// [`Scaling::check_rotary_dim`].
    ///
    /// # Errors
    /// [`Error::RopeScaling`] naming the first field out of range, its value and the range;
    /// for [`Scaling::Explicit`], whose frequencies and factor are options of their own,
    /// [`Error::InvalidParameter`] naming `inv_freq` (and the index) or `attention_factor`.
    pub fn validate(&self) -> Result<()> {
        match self {
            Scaling::None => {}
            Scaling::Linear { factor } => check_divisor("factor", *factor)?,
            Scaling::Dynamic { factor, max_position_embeddings } => {
                check_positive("factor", *factor)?;
                check_whole("max_position_embeddings", *max_position_embeddings)?;
            }
            Scaling::Yarn(y) => {
                check_divisor("factor", y.factor)?;
                check_whole(
                    "original_max_position_embeddings",
                    y.original_max_position_embeddings,
                )?;
                check_positive("beta_fast", y.beta_fast)?;
                check_positive("beta_slow", y.beta_slow)?;
                for (field, v) in [("mscale", y.mscale), ("mscale_all_dim", y.mscale_all_dim)] {
                    if let Some(v) = v.filter(|v| !v.is_finite()) {
                        return Err(invalid(field, float(v), "a finite number"));
                    }
                }
            }
            Scaling::LongRope(l) => {
                check_divisors("short_factor", &l.short_factor)?;
                check_divisors("long_factor", &l.long_factor)?;
                if let Some(f) = l.factor {
                    check_positive("factor", f)?;
                }
                check_whole(
                    "original_max_position_embeddings",
                    l.original_max_position_embeddings,
                )?;
                if l.factor.is_none() && l.attention_factor.is_none() {
                    return Err(invalid(
                        "factor",
                        "missing",
                        "a finite number > 0; without it, attention_factor or \
                         max_position_embeddings (factor = max_position_embeddings / \
                         original_max_position_embeddings) must be given",
                    ));
                }
            }
            Scaling::Llama3(l) => {
                check_divisor("factor", l.factor)?;
                check_positive("low_freq_factor", l.low_freq_factor)?;
                // Equal factors (Llama 4) leave the middle band empty: transformers warns and
                // computes. Under low_freq_factor its bands overlap: refused.
                if !(l.high_freq_factor.is_finite() && l.high_freq_factor >= l.low_freq_factor) {
                    return Err(invalid(
                        "high_freq_factor",
                        float(l.high_freq_factor),
                        format!(
                            "a finite number >= low_freq_factor ({}); set it to at least \
                             low_freq_factor",
                            float(l.low_freq_factor)
                        ),
                    ));
                }
                check_whole(
                    "original_max_position_embeddings",
                    l.original_max_position_embeddings,
                )?;
            }
            Scaling::Proportional(p) => {
                check_divisor("factor", p.factor)?;
                let f = p.partial_rotary_factor;
                if !(0.0..=1.0).contains(&f) {
                    return Err(invalid("partial_rotary_factor", float(f), "a number in [0, 1]"));
                }
            }
            Scaling::NtkAlpha { alpha } => {
                if !(alpha.is_finite() && *alpha >= 1.0 / MAX_INV_FREQ) {
                    return Err(invalid(
                        "alpha",
                        float(*alpha),
                        "a finite number >= 2^-64 (the largest frequency is at most 1 / alpha \
                         rad per position)",
                    ));
                }
            }
            Scaling::PerFrequency { factors, .. } => check_divisors("factors", factors)?,
            // 0 is a frequency too: proportional RoPE's pairs past its share (Gemma 4's own
            // inv_freq buffer holds them).
            Scaling::Explicit { inv_freq, .. } => {
                // The message's count is MAX_FACTORS, written out for a &'static str.
                const _: () = assert!(MAX_FACTORS == 32768);
                if inv_freq.len() > MAX_FACTORS {
                    return Err(Error::InvalidParameter {
                        field: "inv_freq",
                        value: format!("{} numbers", inv_freq.len()),
                        allowed: "at most 32768 numbers, one per frequency (rotary_dim / 2)",
                    });
                }
                let bad = inv_freq.iter().position(|v| !(0.0..=MAX_INV_FREQ).contains(v));
                if let Some(k) = bad {
                    return Err(Error::InvalidParameter {
                        field: "inv_freq",
                        value: format!("{} at index {k}", float(inv_freq[k])),
                        allowed: INV_FREQ_VALUES,
                    });
                }
            }
        }
        let a = self.attention_factor();
        // 0 would zero every rotated value (a query and key without their rotated part),
        // and a subnormal factor would make every cos and sin subnormal, which GPUs may
        // flush to zero.
        if !(a.is_finite() && (a as f32).is_finite() && a as f32 >= f32::MIN_POSITIVE) {
            return Err(match self {
                Scaling::Explicit { .. } => {
                    let (field, value) = ("attention_factor", float(a));
                    Error::InvalidParameter { field, value, allowed: ATTENTION }
                }
                // Not given but derived, from mscale and mscale_all_dim or from LongRoPE's
                // factor: name what was given.
                Scaling::Yarn(Yarn {
                    attention_factor: None,
                    mscale: Some(m),
                    mscale_all_dim: Some(d),
                    factor,
                    ..
                }) => {
                    // A term that is not a finite number > 0 is the culprit; when both are,
                    // the ratio left float32's range upwards (mscale's term too large) or
                    // downwards (mscale_all_dim's).
                    let off = |v: f64| {
                        let term = yarn_mscale(*factor, v);
                        term.is_nan() || term.is_infinite() || term <= 0.0
                    };
                    let (field, v) = match (off(*m), off(*d)) {
                        (_, true) => ("mscale_all_dim", *d),
                        (true, false) => ("mscale", *m),
                        (false, false) if a > 1.0 => ("mscale", *m),
                        (false, false) => ("mscale_all_dim", *d),
                    };
                    let value = float(v);
                    let allowed = format!(
                        "a value with which YaRN's attention factor, (0.1 mscale ln(factor) + 1) \
                         / (0.1 mscale_all_dim ln(factor) + 1), is {ATTENTION} (it came to {})",
                        float(a)
                    );
                    invalid(field, value, allowed)
                }
                Scaling::LongRope(l) if l.attention_factor.is_none() => invalid(
                    "original_max_position_embeddings",
                    l.original_max_position_embeddings.to_string(),
                    format!(
                        "a whole number >= 2 with a factor > 1 and no attention_factor: \
                         LongRoPE's attention factor, sqrt(1 + ln(factor) / \
                         ln(original_max_position_embeddings)), divides by its logarithm (it \
                         came to {})",
                        float(a)
                    ),
                ),
                _ => invalid("attention_factor", float(a), ATTENTION),
            });
        }
        Ok(())
    }

    /// Checks that per-frequency vectors have one entry per frequency of rotary
    /// dimension `rotary_dim`.
    ///
    /// # Errors
    /// [`Error::RopeScaling`] naming the vector, its length and the length wanted
    /// ([`Error::InvalidParameter`] naming `inv_freq` for [`Scaling::Explicit`]).
    pub fn check_rotary_dim(&self, rotary_dim: u32) -> Result<()> {
        let want = (rotary_dim / 2) as usize;
        if let Scaling::Explicit { inv_freq, .. } = self
            && inv_freq.len() != want
        {
            return Err(Error::InvalidParameter {
                field: "inv_freq",
                value: format!(
                    "{} value{}, where rotary_dim {rotary_dim} needs {want}",
                    inv_freq.len(),
                    if inv_freq.len() == 1 { "" } else { "s" }
                ),
                allowed: "one value per frequency: rotary_dim / 2",
            });
        }
        let vectors: Vec<(&str, &[f64])> = match self {
            Scaling::LongRope(l) => {
                vec![("short_factor", &l.short_factor), ("long_factor", &l.long_factor)]
            }
            Scaling::PerFrequency { factors, .. } => vec![("factors", factors)],
            _ => vec![],
        };
        for (field, v) in vectors {
            if v.len() != want {
                return Err(invalid(
                    field,
                    format!("{} numbers", v.len()),
                    format!("{want} numbers: one per frequency of rotary_dim {rotary_dim}"),
                ));
            }
        }
        Ok(())
    }

    /// Reads a Hugging Face `rope_scaling` object (the JSON text of a model config's
    /// `rope_scaling` field, or of its `rope_parameters` less `rope_theta`), e.g.
    /// `{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    /// "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}`.
    ///
    /// `null` means no scaling. The legacy key `"type"` is read when `"rope_type"` is absent;
    /// when both are given they must agree (Hugging Face writes both when it saves a legacy
    /// config). A key given twice in one object is refused: JSON readers keep one of the
    /// two values, and which one differs between them.
    /// `max_position_embeddings` (a model-config field in Hugging Face, outside
    /// `rope_scaling`) may be given inside the object: `dynamic` needs it (or
    /// `original_max_position_embeddings`), and `yarn`, `longrope` and `llama3` use it where
    /// Hugging Face reads the config's value (a `null` YaRN `factor`, or a missing or `null`
    /// LongRoPE one, is `max_position_embeddings / original_max_position_embeddings`; YaRN
    /// requires the key, as transformers does; a missing
    /// `original_max_position_embeddings` is `max_position_embeddings`, as transformers 5
    /// fills it in).
    ///
    /// ```
    /// use posenc::rope::Scaling;
    /// let s = Scaling::from_hf_json(r#"{"type": "linear", "factor": 4}"#)?;
    /// assert_eq!(s, Scaling::Linear { factor: 4.0 });
    /// let err = Scaling::from_hf_json(r#"{"rope_type": "linear", "factor": -1}"#).unwrap_err();
    /// assert!(err.to_string().contains("factor"));
    /// # Ok::<(), posenc::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::RopeScaling`] naming the field, the offending value and what is allowed:
    /// malformed JSON (numbers beyond float64, such as `1e999`, included), a key given twice
    /// (naming it), `type` and `rope_type` that disagree (naming `type`), a value that is
    /// not an object, an unknown `rope_type` (listing the known ones), a key the type does
    /// not use (listing those it does), a missing required field, a value of the wrong
    /// type, a number out of range (non-finite, negative, zero where a divisor).
    pub fn from_hf_json(text: &str) -> Result<Self> {
        Self::from_hf_value(&parse_json(text)?)
    }

    /// [`Scaling::from_hf_json`] on an already parsed JSON value.
    ///
    /// # Errors
    /// As [`Scaling::from_hf_json`].
    pub fn from_hf_value(value: &Value) -> Result<Self> {
        let map = match value {
            Value::Null => return Ok(Scaling::None),
            Value::Object(map) => map,
            other => {
                return Err(invalid("rope_scaling", excerpt(other), "a JSON object or null"));
            }
        };
        let (type_key, rope_type) = hf_rope_type(map)?;
        let fields = Fields { map };
        let scaling = match rope_type {
            "default" => {
                fields.only("default")?;
                Scaling::None
            }
            "linear" => {
                fields.only("linear")?;
                Scaling::Linear { factor: fields.required_number("factor")? }
            }
            "dynamic" => fields.dynamic()?,
            "yarn" => fields.yarn()?,
            "longrope" => fields.longrope()?,
            "llama3" => fields.llama3()?,
            "proportional" => fields.proportional()?,
            "ntk_alpha" => {
                fields.only("ntk_alpha")?;
                Scaling::NtkAlpha { alpha: fields.required_number("alpha")? }
            }
            other => {
                let known = ROPE_TYPES.join(", ");
                return Err(invalid(type_key, format!("{other:?}"), format!("one of {known}")));
            }
        };
        scaling.validate()?;
        Ok(scaling)
    }
}

/// The key a `rope_scaling` object names its type under (`rope_type`, else the legacy
/// `type`), and the type it names. Both keys given must agree; the type must be a string.
fn hf_rope_type(map: &Map<String, Value>) -> Result<(&'static str, &str)> {
    let given = |key| map.get(key).filter(|v: &&Value| !v.is_null());
    if let (Some(rope_type), Some(legacy)) = (given("rope_type"), given("type")) {
        // Taking either would resolve a contradictory config silently.
        if rope_type != legacy {
            return Err(invalid(
                "type",
                excerpt(legacy),
                format!("absent, or the same as rope_type ({})", excerpt(rope_type)),
            ));
        }
    }
    let type_key = if given("rope_type").is_some() { "rope_type" } else { "type" };
    let known = ROPE_TYPES.join(", ");
    match map.get(type_key) {
        None | Some(Value::Null) => Err(invalid("rope_type", "missing", format!("one of {known}"))),
        Some(Value::String(s)) => Ok((type_key, s.as_str())),
        Some(other) => Err(invalid(type_key, excerpt(other), format!("a string, one of {known}"))),
    }
}

/// Parses JSON text of at most [`MAX_JSON_BYTES`], refusing a key given twice in one object.
/// Python's non-finite literals (`NaN`, `Infinity`, `-Infinity`, which `json.dumps` writes and
/// transformers 4.x saved in Mamba configs' `time_step_limit`) are read as the object
/// transformers 5 writes for them, `{"__float__": "Infinity"}`: a key posenc does not read
/// may hold one, and one it reads is refused, naming it.
pub(crate) fn parse_json(text: &str) -> Result<Value> {
    if text.len() > MAX_JSON_BYTES {
        return Err(invalid(
            "(json)",
            format!("{} bytes", text.len()),
            format!("at most {MAX_JSON_BYTES} bytes"),
        ));
    }
    match non_finite_literals(text) {
        Some(rewritten) => parse_unique(&rewritten),
        None => parse_unique(text),
    }
}

/// `text` with each of Python's non-finite literals outside strings replaced by the object
/// transformers 5 writes for it, or `None` when it has none.
fn non_finite_literals(text: &str) -> Option<String> {
    const LITERALS: [&str; 3] = ["-Infinity", "Infinity", "NaN"];
    let bytes = text.as_bytes();
    let (mut in_string, mut escaped) = (false, false);
    let mut out: Option<String> = None;
    let (mut i, mut copied) = (0, 0);
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if let Some(lit) = LITERALS.iter().find(|l| bytes[i..].starts_with(l.as_bytes())) {
            let o = out.get_or_insert_with(|| String::with_capacity(text.len() + 64));
            o.push_str(&text[copied..i]);
            o.push_str(&format!("{{\"__float__\": \"{lit}\"}}"));
            i += lit.len();
            copied = i;
            continue;
        }
        i += 1;
    }
    out.map(|mut o| {
        o.push_str(&text[copied..]);
        o
    })
}

/// [`parse_json`] of text within the size limit.
fn parse_unique(text: &str) -> Result<Value> {
    // Numbers read as the text says whatever the caller's rounding (serde_json's float
    // steps follow the thread's mode).
    crate::simd::in_default_mode(|| parse_unique_here(text))
}

fn parse_unique_here(text: &str) -> Result<Value> {
    let duplicate = RefCell::new(None);
    let mut reader = serde_json::Deserializer::from_str(text);
    let value = Unique { duplicate: &duplicate, keep: true }
        .deserialize(&mut reader)
        .and_then(|value| reader.end().map(|()| value))
        .map_err(|e| match duplicate.take() {
            Some(key) => invalid(key, "given twice", "each key at most once per object"),
            None => invalid("(json)", format!("not valid JSON ({e})"), "valid JSON"),
        })?;
    Ok(value)
}

/// The first key given twice in one object of JSON `text` (a safetensors header, a
/// config.json), at any depth, the check [`parse_json`] makes, without building the values:
/// `Ok(None)` when each key is given once, `Err` for text that is not valid JSON.
pub(crate) fn duplicate_key(text: &[u8]) -> std::result::Result<Option<String>, serde_json::Error> {
    let duplicate = RefCell::new(None);
    let mut reader = serde_json::Deserializer::from_slice(text);
    let checked = Unique { duplicate: &duplicate, keep: false }
        .deserialize(&mut reader)
        .and_then(|_| reader.end());
    match (checked, duplicate.take()) {
        (_, Some(key)) => Ok(Some(key)),
        (Ok(()), None) => Ok(None),
        (Err(e), None) => Err(e),
    }
}

fn missing_original(rope_type: &str) -> Error {
    invalid(
        "original_max_position_embeddings",
        "missing",
        format!(
            "{WHOLE}, required by rope_type {rope_type:?} unless max_position_embeddings is \
                 given (the config's, or inside a scaling object given in place of the config's), \
                 which is read in its place"
        ),
    )
}

/// Reads a JSON value as `serde_json::Value` does, but refuses an object that repeats a key,
/// leaving the key in `duplicate`: `Value` keeps the last of the two silently. Without
/// `keep`, only the keys are checked: every value comes back as `Null`.
#[derive(Clone, Copy)]
struct Unique<'a> {
    duplicate: &'a RefCell<Option<String>>,
    keep: bool,
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<Value, D::Error> {
        reader.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // serde_json hands over finite numbers only; `Null` is what `Value` makes of others.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(if self.keep { Value::String(v.to_owned()) } else { Value::Null })
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(if self.keep { Value::String(v) } else { Value::Null })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            if self.keep {
                items.push(item);
            }
        }
        Ok(if self.keep { Value::Array(items) } else { Value::Null })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = entries.next_key::<String>()? {
            let value = entries.next_value_seed(self)?;
            if map.contains_key(&key) {
                let message = format!("the key {key:?} is given twice");
                *self.duplicate.borrow_mut() = Some(key);
                return Err(de::Error::custom(message));
            }
            map.insert(key, value);
        }
        Ok(if self.keep { Value::Object(map) } else { Value::Null })
    }
}

/// Whether `v` is a non-finite number as transformers 5 writes one (and [`parse_json`] reads
/// Python's literals): `{"__float__": "NaN"}`, `"Infinity"` or `"-Infinity"`.
pub(crate) fn is_non_finite(v: &Value) -> bool {
    match v {
        Value::Object(map) if map.len() == 1 => matches!(
            map.get("__float__").and_then(Value::as_str),
            Some("NaN" | "Infinity" | "-Infinity")
        ),
        _ => false,
    }
}

/// A JSON value shortened for an error message; a non-finite number as transformers 5
/// writes it (`{"__float__": "Infinity"}`) as the number.
pub(crate) fn excerpt(v: &Value) -> String {
    const MAX: usize = 48;
    if is_non_finite(v)
        && let Some(Value::String(number)) = v.get("__float__")
    {
        return number.clone();
    }
    let text = match v {
        Value::Array(a) if a.len() > 4 => format!("an array of {} values", a.len()),
        _ => v.to_string(),
    };
    if text.chars().count() <= MAX {
        text
    } else {
        let cut: String = text.chars().take(MAX).collect();
        format!("{cut}...")
    }
}

/// The fields of one `rope_scaling` object, read with type checks.
struct Fields<'a> {
    map: &'a Map<String, Value>,
}

impl Fields<'_> {
    /// Refuses any key other than `rope_type`/`type` and the type's ([`ROPE_TYPE_KEYS`]).
    fn only(&self, rope_type: &str) -> Result<()> {
        let allowed =
            ROPE_TYPE_KEYS.iter().find(|(t, _)| *t == rope_type).map_or(&[][..], |(_, keys)| keys);
        for (key, value) in self.map {
            if key == "rope_type" || key == "type" || allowed.contains(&key.as_str()) {
                continue;
            }
            // A model config's key, which the config's reading takes out before this: here
            // it is a scaling object's (`--scaling`), which sets no axes.
            if key == "mrope_section" {
                return Err(invalid(
                    key.clone(),
                    excerpt(value),
                    "absent from a scaling object: a multimodal RoPE's axes are its model \
                     config's (--config, RopeSpec::from_hf_config_multimodal), which keep \
                     them beside a scaling given on its own",
                ));
            }
            let keys = ["rope_type"].iter().chain(allowed).copied().collect::<Vec<_>>().join(", ");
            // HunYuan's configs say "dynamic" with alpha, which their modules read as
            // ntk_alpha: a scaling object given on its own names it.
            let hint = if rope_type == "dynamic" && key == "alpha" {
                " (HunYuan's \"dynamic\" with alpha is rope_type \"ntk_alpha\")"
            } else {
                ""
            };
            return Err(invalid(
                key.clone(),
                excerpt(value),
                format!("no such key for rope_type {rope_type:?}; its keys are {keys}{hint}"),
            ));
        }
        Ok(())
    }

    /// A number, or `None` when absent or null.
    fn number(&self, key: &str) -> Result<Option<f64>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => {
                // serde_json refuses numbers beyond float64 at parse time; what is left
                // converts (large integers round to the nearest float64).
                n.as_f64().map(Some).ok_or_else(|| invalid(key, n.to_string(), "a number"))
            }
            Some(other) => Err(invalid(key, excerpt(other), "a finite number")),
        }
    }

    fn required_number(&self, key: &str) -> Result<f64> {
        self.number(key)?.ok_or_else(|| invalid(key, "missing", POSITIVE))
    }

    /// HF's `get(key) or default`: absent, null and 0 take the default.
    fn falsy_default(&self, key: &str, default: f64) -> Result<f64> {
        Ok(self.number(key)?.filter(|&v| v != 0.0).unwrap_or(default))
    }

    /// A positive whole number (written as an integer or as a float with no fraction).
    fn whole(&self, key: &str) -> Result<Option<u64>> {
        // An integer as written, exactly: past 2^53 its float64 would round into the range
        // (2^53 + 1 to 2^53) and a message would name the rounded value.
        if let Some(Value::Number(n)) = self.map.get(key)
            && (n.is_u64() || n.is_i64())
        {
            return match n.as_u64().filter(|v| (1..=1u64 << 53).contains(v)) {
                Some(v) => Ok(Some(v)),
                None => Err(invalid(key, n.to_string(), WHOLE)),
            };
        }
        let Some(v) = self.number(key)? else { return Ok(None) };
        whole_number(v).map(Some).ok_or_else(|| invalid(key, float(v), WHOLE))
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(invalid(key, excerpt(other), "true or false")),
        }
    }

    fn vector(&self, key: &str) -> Result<Vec<f64>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Err(invalid(key, "missing", FACTORS)),
            Some(Value::Array(items)) => {
                if items.len() > MAX_FACTORS {
                    return Err(invalid(
                        key,
                        format!("{} numbers", items.len()),
                        format!("at most {MAX_FACTORS} numbers ({FACTORS})"),
                    ));
                }
                items
                    .iter()
                    .enumerate()
                    .map(|(k, item)| match item {
                        Value::Number(n) => n
                            .as_f64()
                            .ok_or_else(|| invalid(format!("{key}[{k}]"), n.to_string(), POSITIVE)),
                        other => Err(invalid(format!("{key}[{k}]"), excerpt(other), POSITIVE)),
                    })
                    .collect()
            }
            Some(other) => Err(invalid(key, excerpt(other), FACTORS)),
        }
    }
}

/// The readers of the longer scaling types (`default` and `linear` are read in place), each
/// refusing the keys its type does not use before reading any.
impl Fields<'_> {
    /// `dynamic`: `factor`, and the model's `max_position_embeddings` (else
    /// `original_max_position_embeddings`).
    fn dynamic(&self) -> Result<Scaling> {
        self.only("dynamic")?;
        let factor = self.required_number("factor")?;
        let max = match self.whole("max_position_embeddings")? {
            Some(m) => m,
            None => self.whole("original_max_position_embeddings")?.ok_or_else(|| {
                invalid(
                    "max_position_embeddings",
                    "missing",
                    format!(
                        "{WHOLE} (the model's max_position_embeddings; \
                             original_max_position_embeddings is read in its place)"
                    ),
                )
            })?,
        };
        Ok(Scaling::Dynamic { factor, max_position_embeddings: max })
    }

    /// `yarn`: `factor` is required, as transformers (4.x and 5) requires the key; a `null`
    /// one is `max_position_embeddings` over the original length, the betas take Hugging
    /// Face's defaults when absent, null or 0, and `truncate` is true when absent (a null is
    /// false, as Python tests None).
    fn yarn(&self) -> Result<Scaling> {
        self.only("yarn")?;
        self.boolean("finetuned")?;
        if !self.map.contains_key("factor") {
            return Err(invalid(
                "factor",
                "missing",
                format!(
                    "{POSITIVE}, or null for max_position_embeddings / \
                     original_max_position_embeddings: transformers requires the key for yarn \
                     (KeyError: Missing required keys)"
                ),
            ));
        }
        let (max, original) = self.max_and_original("yarn")?;
        let factor = match (self.number("factor")?, max) {
            (Some(f), _) => f,
            (None, Some(m)) => m as f64 / original as f64,
            (None, None) => {
                return Err(invalid(
                    "factor",
                    "null",
                    format!(
                        "{POSITIVE}, or null beside max_position_embeddings (giving \
                             factor = max_position_embeddings / original)"
                    ),
                ));
            }
        };
        Ok(Scaling::Yarn(Yarn {
            factor,
            original_max_position_embeddings: original,
            beta_fast: self.falsy_default("beta_fast", YARN_BETA_FAST)?,
            beta_slow: self.falsy_default("beta_slow", YARN_BETA_SLOW)?,
            mscale: self.number("mscale")?,
            mscale_all_dim: self.number("mscale_all_dim")?,
            attention_factor: self.number("attention_factor")?,
            // transformers (and vLLM) read `get("truncate", True)` and test its truth: a null
            // is Python's None, false, so it truncates nothing.
            truncate: match self.map.get("truncate") {
                Some(Value::Null) => false,
                _ => self.boolean("truncate")?.unwrap_or(true),
            },
        }))
    }

    /// `longrope`: the two factor vectors; a missing `factor` is `max_position_embeddings`
    /// over the original length, or none without it.
    fn longrope(&self) -> Result<Scaling> {
        // Phi-3.5-MoE's longrope multiplies cos and sin by short_mscale or long_mscale, as the
        // sequence is short or long (transformers' PhimoeRotaryEmbedding): one attention
        // factor per range, which posenc's longrope (one factor) does not compute.
        for per_range in ["long_mscale", "short_mscale"] {
            if let Some(value) = self.map.get(per_range) {
                return Err(invalid(
                    per_range,
                    excerpt(value),
                    "absent: Phi-3.5-MoE's per-range scales of cos and sin (short_mscale for \
                     short sequences, long_mscale for long ones) are not a scaling posenc \
                     computes; its rotation at one length is the longrope of that range with \
                     --inv-freq and --attention-factor set to that range's scale",
                ));
            }
        }
        self.only("longrope")?;
        let (max, original) = self.max_and_original("longrope")?;
        let factor = match (self.number("factor")?, max) {
            (Some(f), _) => Some(f),
            (None, Some(m)) => Some(m as f64 / original as f64),
            (None, None) => None,
        };
        Ok(Scaling::LongRope(LongRope {
            short_factor: self.vector("short_factor")?,
            long_factor: self.vector("long_factor")?,
            factor,
            attention_factor: self.number("attention_factor")?,
            original_max_position_embeddings: original,
        }))
    }

    /// `llama3`: every field required; a missing `original_max_position_embeddings` is
    /// `max_position_embeddings`, as transformers 5 fills it in (4.x required it).
    fn llama3(&self) -> Result<Scaling> {
        self.only("llama3")?;
        let factor = self.required_number("factor")?;
        let low_freq_factor = self.required_number("low_freq_factor")?;
        let high_freq_factor = self.required_number("high_freq_factor")?;
        let (_, original) = self.max_and_original("llama3")?;
        Ok(Scaling::Llama3(Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings: original,
        }))
    }

    /// `proportional`: both fields 1 when absent.
    fn proportional(&self) -> Result<Scaling> {
        self.only("proportional")?;
        Ok(Scaling::Proportional(Proportional {
            // HF: rope_parameters.get("factor", 1.0), get("partial_rotary_factor", 1.0).
            factor: self.number("factor")?.unwrap_or(1.0),
            partial_rotary_factor: self.number("partial_rotary_factor")?.unwrap_or(1.0),
        }))
    }

    /// The model's `max_position_embeddings` if given, and the original (pretrained) length:
    /// `original_max_position_embeddings`, else `max_position_embeddings`, as `yarn` and
    /// `longrope` read them.
    fn max_and_original(&self, rope_type: &str) -> Result<(Option<u64>, u64)> {
        let max = self.whole("max_position_embeddings")?;
        match (self.whole("original_max_position_embeddings")?, max) {
            (Some(o), _) | (None, Some(o)) => Ok((max, o)),
            (None, None) => Err(missing_original(rope_type)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(text: &str) -> String {
        match Scaling::from_hf_json(text) {
            Err(Error::RopeScaling { field, .. }) => field,
            other => panic!("{text}: {other:?}"),
        }
    }

    /// A whole-number key past 2^53 is refused as written, where its float64 would round
    /// into the range (round ten of the hostile probes, 2026-12-02).
    #[test]
    fn whole_numbers_are_read_exactly() {
        let yarn = |n: &str| {
            Scaling::from_hf_json(&format!(
                r#"{{"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": {n}}}"#
            ))
        };
        let Scaling::Yarn(y) = yarn("9007199254740992").unwrap() else { panic!() };
        assert_eq!(y.original_max_position_embeddings, 1 << 53);
        let Scaling::Yarn(y) = yarn("4096.0").unwrap() else { panic!() };
        assert_eq!(y.original_max_position_embeddings, 4096);
        for n in ["9007199254740993", "18446744073709551615", "0", "-1"] {
            match yarn(n) {
                Err(Error::RopeScaling { field, value, .. }) => {
                    assert_eq!(
                        (field.as_str(), value.as_str()),
                        ("original_max_position_embeddings", n)
                    );
                }
                other => panic!("{n}: {other:?}"),
            }
        }
    }

    /// Python's non-finite literals (a transformers 4.x config's `time_step_limit`) read as
    /// transformers 5 writes them, outside strings only; one in a read key is named.
    #[test]
    fn non_finite_literals_read_as_transformers_5_writes_them() {
        let text = r#"{"a": [0.0, Infinity, -Infinity, NaN], "s": "NaN \" Infinity\\", "b": 1}"#;
        let v = parse_json(text).unwrap();
        let marker = |s: &str| serde_json::json!({ "__float__": s });
        assert_eq!(v["a"][1], marker("Infinity"));
        assert_eq!(v["a"][2], marker("-Infinity"));
        assert_eq!(v["a"][3], marker("NaN"));
        assert_eq!(v["s"], "NaN \" Infinity\\");
        assert_eq!(v["b"], 1);
        assert_eq!(excerpt(&v["a"][2]), "-Infinity");
        assert!(non_finite_literals(r#"{"a": "Infinity"}"#).is_none());
        match Scaling::from_hf_json(r#"{"rope_type": "linear", "factor": Infinity}"#) {
            Err(Error::RopeScaling { field, value, .. }) => {
                assert_eq!((field.as_str(), value.as_str()), ("factor", "Infinity"));
            }
            other => panic!("{other:?}"),
        }
        // Not a literal: still not JSON.
        assert!(parse_json(r#"{"a": Infinit}"#).is_err());
    }

    #[test]
    fn every_rope_type_has_its_keys() {
        let named: Vec<&str> = ROPE_TYPE_KEYS.iter().map(|(t, _)| *t).collect();
        assert_eq!(named, ROPE_TYPES);
    }

    #[test]
    fn reads_every_scheme() {
        assert_eq!(Scaling::from_hf_json("null").unwrap(), Scaling::None);
        assert_eq!(Scaling::from_hf_json(r#"{"rope_type":"default"}"#).unwrap(), Scaling::None);
        let llama = Scaling::from_hf_json(
            r#"{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}"#,
        )
        .unwrap();
        assert_eq!(llama, Scaling::Llama3(Llama3::new(8.0, 1.0, 4.0, 8192)));
        let yarn = Scaling::from_hf_json(
            r#"{"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096}"#,
        )
        .unwrap();
        let Scaling::Yarn(y) = &yarn else { panic!("{yarn:?}") };
        assert_eq!((y.factor, y.original_max_position_embeddings, y.truncate), (40.0, 4096, true));
        // mscale == mscale_all_dim: the ratio is exactly 1.
        assert_eq!(yarn.attention_factor(), 1.0);
        let yarn = Scaling::from_hf_json(
            r#"{"rope_type": "yarn", "factor": 32.0, "beta_fast": 0, "truncate": false,
                "original_max_position_embeddings": 4096}"#,
        )
        .unwrap();
        let Scaling::Yarn(y) = &yarn else { panic!("{yarn:?}") };
        assert_eq!((y.beta_fast, y.truncate), (32.0, false));
        // A null truncate is Python's None, which transformers' `if truncate:` takes as false
        // (round twenty-eight: it had truncated, as an absent one does).
        for (truncate, want) in [("null", false), ("true", true), ("false", false)] {
            let text = format!(
                r#"{{"rope_type": "yarn", "factor": 4, "truncate": {truncate},
                    "original_max_position_embeddings": 2048}}"#
            );
            let Scaling::Yarn(y) = Scaling::from_hf_json(&text).unwrap() else { panic!() };
            assert_eq!(y.truncate, want, "truncate {truncate}");
        }
        assert!((yarn.attention_factor() - (0.1 * 32f64.ln() + 1.0)).abs() < 1e-15);
        let dynamic = Scaling::from_hf_json(
            r#"{"type":"dynamic","factor":2,"max_position_embeddings":2048}"#,
        )
        .unwrap();
        assert_eq!(dynamic, Scaling::Dynamic { factor: 2.0, max_position_embeddings: 2048 });
        let long = Scaling::from_hf_json(
            r#"{"type":"longrope","short_factor":[1,1],"long_factor":[2,3],
                "max_position_embeddings":131072,"original_max_position_embeddings":4096}"#,
        )
        .unwrap();
        let ntk = Scaling::from_hf_json(r#"{"rope_type": "ntk_alpha", "alpha": 1000}"#).unwrap();
        assert_eq!((ntk.rope_type(), ntk.attention_factor()), ("ntk_alpha", 1.0));
        assert_eq!(ntk, Scaling::NtkAlpha { alpha: 1000.0 });
        let Scaling::LongRope(l) = &long else { panic!("{long:?}") };
        assert_eq!(l.factor, Some(32.0));
        let want = (1.0 + 32f64.ln() / 4096f64.ln()).sqrt();
        assert!((long.attention_factor() - want).abs() < 1e-15);
    }

    #[test]
    fn names_the_offending_field() {
        for (text, field) in [
            (r#"{"rope_type":"linear"}"#, "factor"),
            (r#"{"rope_type":"linear","factor":"8"}"#, "factor"),
            (r#"{"rope_type":"linear","factor":-1}"#, "factor"),
            (r#"{"rope_type":"linear","factor":0}"#, "factor"),
            (r#"{"rope_type":"linear","factor":8,"factr":1}"#, "factr"),
            (r#"{"rope_type":"mystery"}"#, "rope_type"),
            (r#"{"type":"mystery"}"#, "type"),
            (r#"{"rope_type":7}"#, "rope_type"),
            (r#"{"factor":2}"#, "rope_type"),
            (r#"[1]"#, "rope_scaling"),
            (r#"{"rope_type":"linear","factor":1e999}"#, "(json)"),
            (r#"{"rope_type":"dynamic","factor":2}"#, "max_position_embeddings"),
            (r#"{"rope_type":"yarn","factor":2}"#, "original_max_position_embeddings"),
            (
                r#"{"rope_type":"yarn","factor":2,"original_max_position_embeddings":1.5}"#,
                "original_max_position_embeddings",
            ),
            (
                concat!(
                    r#"{"rope_type":"yarn","factor":2,"#,
                    r#""original_max_position_embeddings":4,"truncate":1}"#
                ),
                "truncate",
            ),
            (
                r#"{"rope_type":"yarn","factor":2,"original_max_position_embeddings":4,
                    "mscale":1,"mscale_all_dim":-100}"#,
                "mscale_all_dim",
            ),
            (
                r#"{"rope_type":"llama3","factor":8,"low_freq_factor":4,"high_freq_factor":3,
                    "original_max_position_embeddings":8192}"#,
                "high_freq_factor",
            ),
            (
                r#"{"rope_type":"longrope","short_factor":[1,"x"],"long_factor":[1,1],
                    "factor":2,"original_max_position_embeddings":4096}"#,
                "short_factor[1]",
            ),
            (
                r#"{"rope_type":"longrope","short_factor":[1,1],"long_factor":[1,1],
                    "original_max_position_embeddings":4096}"#,
                "factor",
            ),
        ] {
            assert_eq!(field_of(text), field, "{text}");
        }
    }

    #[test]
    fn proportional_reads_hugging_faces_defaults_and_refuses_a_share_past_one() {
        let p = Scaling::from_hf_json(r#"{"rope_type": "proportional"}"#).unwrap();
        assert_eq!(p, Scaling::Proportional(Proportional::new(1.0, 1.0)));
        assert_eq!((p.rope_type(), p.attention_factor()), ("proportional", 1.0));
        let p = Scaling::from_hf_json(
            r#"{"rope_type": "proportional", "factor": 2, "partial_rotary_factor": 0.25}"#,
        )
        .unwrap();
        assert_eq!(p, Scaling::Proportional(Proportional::new(2.0, 0.25)));
        // Python's int(f * r // 2).
        let angles = |f: f64, r: u32| Proportional::new(1.0, f).rope_angles(r);
        assert_eq!(
            [angles(0.25, 512), angles(0.45, 14), angles(0.0, 8), angles(1.0, 6)],
            [64, 3, 0, 3]
        );
        for (text, field) in [
            (
                r#"{"rope_type": "proportional", "partial_rotary_factor": 1.01}"#,
                "partial_rotary_factor",
            ),
            (
                r#"{"rope_type": "proportional", "partial_rotary_factor": -0.5}"#,
                "partial_rotary_factor",
            ),
            (r#"{"rope_type": "proportional", "factor": 0}"#, "factor"),
            (r#"{"rope_type": "proportional", "beta_fast": 2}"#, "beta_fast"),
        ] {
            assert_eq!(field_of(text), field, "{text}");
        }
    }

    /// A factor that divides the frequencies is refused below 2^-64: past that the first
    /// frequency (1 radian per position) would exceed `MAX_INV_FREQ`, and a subnormal one
    /// overflowed to an infinite frequency (found by the proptest in tests/it/cpu/rope.rs).
    #[test]
    fn divisors_below_2_to_the_minus_64_are_refused() {
        let min = 1.0 / MAX_INV_FREQ;
        let below = min * (1.0 - f64::EPSILON);
        type Make = fn(f64) -> Scaling;
        let cases: [(&str, Make); 5] = [
            ("factor", |f| Scaling::Linear { factor: f }),
            ("factor", |f| Scaling::Yarn(Yarn::new(f, 4096))),
            ("factor", |f| Scaling::Llama3(Llama3::new(f, 1.0, 4.0, 8192))),
            ("factors[1]", |f| Scaling::PerFrequency {
                factors: vec![1.0, f],
                attention_factor: 1.0,
            }),
            ("long_factor[0]", |f| {
                Scaling::LongRope(LongRope::new(vec![1.0, 1.0], vec![f, 1.0], Some(2.0), 4096))
            }),
        ];
        for (field, make) in cases {
            make(min).validate().unwrap();
            for bad in [below, 3.672438977910733e-309, 0.0, -min, f64::NAN] {
                match make(bad).validate() {
                    Err(Error::RopeScaling { field: f, allowed, .. }) => {
                        assert_eq!(f, field, "{bad:e}");
                        assert!(allowed.contains(">= 2^-64"), "{allowed}");
                    }
                    other => panic!("{field} = {bad:e}: {other:?}"),
                }
            }
        }
        let err =
            Scaling::from_hf_json(r#"{"rope_type":"linear","factor":3.672438977910733e-309}"#);
        assert!(
            matches!(err, Err(Error::RopeScaling { ref field, .. }) if field == "factor"),
            "{err:?}"
        );
    }

    /// An attention factor multiplies cos and sin: 0 (or a value float32 holds as 0) would
    /// erase the rotated dims, and a subnormal one makes them subnormal (flushed to zero on
    /// some GPUs), so only factors whose float32 is a positive normal number pass.
    #[test]
    fn attention_factors_must_be_positive_in_float32() {
        let explicit = |a| Scaling::Explicit { inv_freq: vec![1.0, 0.1], attention_factor: a };
        explicit(1e-30).validate().unwrap();
        explicit(f64::from(f32::MIN_POSITIVE)).validate().unwrap();
        for bad in [0.0, -0.0, 1e-50, 1e-40, -1.0, f64::INFINITY, 1e39, f64::NAN] {
            // An option of its own beside inv_freq, not a key of a rope_scaling object.
            match explicit(bad).validate() {
                Err(e @ Error::InvalidParameter { field: "attention_factor", allowed, .. }) => {
                    assert!(allowed.contains("> 0"), "{allowed}");
                    assert!(!e.to_string().contains("rope_scaling"), "{e}");
                }
                other => panic!("{bad:e}: {other:?}"),
            }
            let yarn = Scaling::Yarn(Yarn { attention_factor: Some(bad), ..Yarn::new(2.0, 4096) });
            match yarn.validate() {
                Err(Error::RopeScaling { field, .. }) => assert_eq!(field, "attention_factor"),
                other => panic!("yarn {bad:e}: {other:?}"),
            }
        }
        // A factor derived from mscale names mscale, which the config gave, and its result.
        let derived =
            |m, all| Yarn { mscale: Some(m), mscale_all_dim: Some(all), ..Yarn::new(4.0, 4096) };
        let zero = -1.0 / (0.1 * 4f64.ln());
        for (m, all, field) in [
            (-100.0, 1.0, "mscale: -100"),
            (1.0, zero, "mscale_all_dim: -7.2"),
            (1e300, 1.0, "mscale: 1e300"),
            (1.0, -100.0, "mscale_all_dim: -100"),
            // Both terms fine, their ratio below float32's normal numbers.
            (1.0, 1e300, "mscale_all_dim: 1e300"),
        ] {
            match Scaling::Yarn(derived(m, all)).validate() {
                Err(e @ Error::RopeScaling { .. }) => {
                    let text = e.to_string();
                    assert!(text.starts_with(&format!("rope_scaling: invalid {field}")), "{text}");
                    assert!(text.contains("(it came to "), "{text}");
                }
                other => panic!("mscale {m:e}, mscale_all_dim {all:e}: {other:?}"),
            }
        }
        // LongRoPE's derived factor divides by ln(original_max_position_embeddings).
        let longrope = r#"{"rope_type":"longrope","short_factor":[1,1],"long_factor":[1,1],
            "factor":2,"original_max_position_embeddings":1}"#;
        let text = Scaling::from_hf_json(longrope).unwrap_err().to_string();
        let want = "rope_scaling: invalid original_max_position_embeddings: 1 (allowed: a whole";
        assert!(text.starts_with(want) && text.contains("(it came to inf)"), "{text}");
        let yarn = r#"{"rope_type": "yarn", "factor": 4.0, "attention_factor": 0,
            "original_max_position_embeddings": 4096}"#;
        let err = Scaling::from_hf_json(yarn);
        assert!(
            matches!(err, Err(Error::RopeScaling { ref field, .. }) if field == "attention_factor"),
            "{err:?}"
        );
    }

    #[test]
    fn keys_given_twice_are_refused_naming_the_key() {
        for (text, field) in [
            (r#"{"rope_type":"linear","factor":2,"factor":4}"#, "factor"),
            (r#"{"rope_type":"linear","rope_type":"dynamic","factor":2}"#, "rope_type"),
            (r#"{"type":"linear","factor":2,"type":"linear"}"#, "type"),
            // Nested objects too, though every key of rope_scaling holds a scalar or array.
            (r#"{"rope_type":"linear","factor":2,"x":[{"a":1,"a":1}]}"#, "a"),
        ] {
            match Scaling::from_hf_json(text) {
                Err(Error::RopeScaling { field: f, value, allowed }) => {
                    assert_eq!((f.as_str(), value.as_str()), (field, "given twice"), "{text}");
                    assert!(allowed.contains("at most once"), "{allowed}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        // The same key in two different objects is no repetition.
        let text = r#"{"rope_type":"longrope","short_factor":[1,1],"long_factor":[1,1],
                       "factor":2,"original_max_position_embeddings":4096}"#;
        assert!(Scaling::from_hf_json(text).is_ok());
        // Broken JSON is still reported as such, not as a repetition.
        assert_eq!(field_of(r#"{"factor":2,"factor""#), "(json)");
    }

    #[test]
    fn type_and_rope_type_must_agree() {
        let err = Scaling::from_hf_json(r#"{"rope_type":"linear","type":"dynamic","factor":2}"#)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "rope_scaling: invalid type: \"dynamic\" (allowed: absent, or the same as rope_type \
             (\"linear\"))"
        );
        // What Hugging Face writes when it saves a legacy config: both, equal.
        let both = r#"{"type":"linear","rope_type":"linear","factor":2}"#;
        assert_eq!(Scaling::from_hf_json(both).unwrap(), Scaling::Linear { factor: 2.0 });
        // A null stands for absent, as elsewhere.
        let null = r#"{"type":null,"rope_type":"linear","factor":2}"#;
        assert_eq!(Scaling::from_hf_json(null).unwrap(), Scaling::Linear { factor: 2.0 });
    }

    #[test]
    fn large_numbers_print_in_short_scientific_form() {
        let err = Scaling::from_hf_json(r#"{"rope_type":"linear","factor":-1e300}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "rope_scaling: invalid factor: -1e300 (allowed: a finite number >= 2^-64 (it divides \
             frequencies of up to 1 rad per position))"
        );
    }

    #[test]
    fn vector_lengths_are_checked_against_the_rotary_dim() {
        let long = LongRope::new(vec![1.0; 3], vec![1.0; 4], Some(2.0), 4096);
        let s = Scaling::LongRope(long);
        s.validate().unwrap();
        let err = s.check_rotary_dim(8).unwrap_err();
        assert!(err.to_string().contains("short_factor"), "{err}");
        assert!(err.to_string().contains("4 numbers"), "{err}");
    }
}

/// The caller's SSE mode (round twenty-seven): specs read and computed in another rounding
/// keep the default mode's numbers, and leave nothing else in the spec cache.
#[cfg(all(test, target_arch = "x86_64"))]
mod other_modes {
    use super::Scaling;
    use crate::rope::RopeSpec;

    #[test]
    fn json_numbers_read_as_written_in_every_mode() {
        let json = r#"{"rope_type": "linear", "factor": 1.1}"#;
        let want = Scaling::from_hf_json(json).unwrap();
        assert_eq!(want, Scaling::Linear { factor: 1.1 });
        crate::simd::in_other_sse_modes(|bits| {
            let got = Scaling::from_hf_json(std::hint::black_box(json)).unwrap();
            assert_eq!(got, want, "MXCSR bits {bits:#x}");
        });
    }

    #[test]
    fn frequencies_made_in_another_mode_are_the_defaults_and_stay_so() {
        // A spec no other test asks for, so that the first to compute it is this thread in
        // another mode, and what it leaves in the cache is what the default mode then reads.
        let yarn =
            r#"{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2047}"#;
        let spec = || {
            let scaling = Scaling::from_hf_json(yarn).unwrap();
            RopeSpec::new(64).unwrap().with_base(12_345.5).unwrap().with_scaling(scaling).unwrap()
        };
        let bits = |f: &crate::rope::Frequencies| {
            let inv: Vec<u64> = f.inv_freq().iter().map(|v| v.to_bits()).collect();
            (f.attention_factor().to_bits(), inv, f.steps().to_vec())
        };
        let want = bits(&super::super::freq::compute(&spec(), 1 << 17));
        let want_af = spec().scaling().attention_factor().to_bits();
        crate::simd::in_other_sse_modes(|mode| {
            let got = bits(&spec().frequencies(1 << 17));
            assert!(got == want, "MXCSR bits {mode:#x}");
            let af = spec().scaling().attention_factor().to_bits();
            assert_eq!(af, want_af, "MXCSR bits {mode:#x}");
        });
        assert!(bits(&spec().frequencies(1 << 17)) == want, "after the other modes");
    }
}
