//! The validated description of a sinusoidal positional encoding: which published
//! convention (variant), its frequencies, its column layout and its position numbering.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result, float};

/// The largest model dimension posenc accepts.
pub const MAX_DIM: u32 = 65536;
/// The largest frequency base posenc promises its accuracy for.
pub const MAX_BASE: f64 = 1e7;
/// The base of "Attention Is All You Need".
pub const DEFAULT_BASE: f64 = 10000.0;
/// The largest timescale tensor2tensor's variant accepts (both ends of the range).
pub const MAX_TIMESCALE: f64 = 1e9;
/// The smallest `min_timescale` tensor2tensor's variant accepts.
pub const MIN_TIMESCALE: f64 = 1e-9;
/// The largest frequency posenc takes as given ([`PeSpec::with_inv_freq`], RoPE's
/// `Scaling::Explicit`), 2^64 radians per position: its fraction of a turn per position is
/// then computed from at least 190 bits after the binary point of the 256-bit quotient
/// `w / 2pi`, far more than the 64 the phase keeps. (Past about 2^186 not one bit would be
/// right.) Every frequency a model uses is far below it (its largest is 1).
pub const MAX_INV_FREQ: f64 = 18_446_744_073_709_551_616.0;
/// The smallest frequency a table takes as given ([`PeSpec::with_inv_freq`]), 2^-126
/// radians per position, the smallest normal float32: [`Frequencies::F32`] rounds each
/// given value to float32 and multiplies in float32, which the integer code does for
/// normal operands. (Any smaller frequency turns less than 2^-94 radians by position
/// 2^32: its sin is 0 and its cos 1 to float32's precision.)
pub const MIN_INV_FREQ: f64 = 1.1754943508222875e-38;

/// A published sinusoidal convention. Every variant runs on the same exact-phase engine;
/// only the frequencies, the column layout and the position numbering differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Variant {
    /// `w_i = base^(-2i/d)`, `[sin, cos, sin, cos, ...]`, `d` even ("Attention Is All You
    /// Need", The Annotated Transformer).
    #[default]
    Vaswani,
    /// Like [`Variant::Vaswani`], but `d` may be odd, and then its last column is a sin
    /// (Hugging Face DistilBERT / XLM `create_sinusoidal_embeddings`).
    DistilBert,
    /// The same frequencies, sin in columns `[0, ceil(d/2))` and cos in `[ceil(d/2), d)`
    /// (Hugging Face `MarianSinusoidalPositionalEmbedding`).
    Marian,
    /// tensor2tensor's `get_timing_signal_1d`: `n = floor(d/2)` timescales,
    /// `w_i = min_timescale * exp(-i ln(max_timescale / min_timescale) / max(n - 1, 1))`,
    /// `[sin | cos]`, a zero column appended when `d` is odd, positions from `start_index`.
    Tensor2Tensor,
    /// fairseq's `SinusoidalPositionalEmbedding`: `h = floor(d/2)`,
    /// `w_i = exp(-i ln(base) / (h - 1))`, `[sin | cos]`, a zero column appended when `d` is
    /// odd, and the row of position `padding_idx` all zeros.
    Fairseq,
    /// Whisper's `sinusoids`: `w_i = exp(-i ln(base) / (d/2 - 1))`, `[sin | cos]`, `d` even.
    Whisper,
}

impl Variant {
    /// Every variant, in documentation order.
    pub const ALL: [Variant; 6] = [
        Variant::Vaswani,
        Variant::DistilBert,
        Variant::Marian,
        Variant::Tensor2Tensor,
        Variant::Fairseq,
        Variant::Whisper,
    ];

    /// The name the CLI uses.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Vaswani => "vaswani",
            Variant::DistilBert => "distilbert",
            Variant::Marian => "marian",
            Variant::Tensor2Tensor => "tensor2tensor",
            Variant::Fairseq => "fairseq",
            Variant::Whisper => "whisper",
        }
    }

    /// The dims this variant is defined for, as text for error messages.
    pub(crate) fn allowed_dims(self) -> &'static str {
        match self {
            Variant::Vaswani => "an even number in 2..=65536",
            Variant::DistilBert | Variant::Marian => "a number in 1..=65536",
            Variant::Tensor2Tensor => "a number in 2..=65536",
            Variant::Fairseq => "a number in 4..=65536",
            Variant::Whisper => "an even number in 4..=65536",
        }
    }

    fn accepts_dim(self, dim: u32) -> bool {
        let even = dim.is_multiple_of(2);
        dim <= MAX_DIM
            && match self {
                Variant::Vaswani => dim >= 2 && even,
                Variant::DistilBert | Variant::Marian => dim >= 1,
                Variant::Tensor2Tensor => dim >= 2,
                Variant::Fairseq => dim >= 4,
                Variant::Whisper => dim >= 4 && even,
            }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Variant {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Variant::ALL.into_iter().find(|v| v.name() == s).ok_or_else(|| Error::InvalidParameter {
            field: "variant",
            value: s.to_string(),
            allowed: "vaswani, distilbert, marian, tensor2tensor, fairseq, whisper",
        })
    }
}

/// How frequencies and angles are computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Frequencies {
    /// The published formula at full precision: each frequency exact to 2^-64 turn per
    /// position and the phase `p w_i` reduced exactly, within 6e-8 at every u32 position.
    #[default]
    Exact,
    /// Frequencies and angles rounded to f32 the way the frameworks compute them
    /// (`angle = f32(f32(p) * f32 frequency)`), then the exact sin/cos of that rounded angle:
    /// reproduces checkpoints trained with float32 encodings, including their error at
    /// large positions. ARCHITECTURE.md lists each variant's float32 recipe.
    F32,
}

impl Frequencies {
    /// The name the CLI uses.
    pub fn name(self) -> &'static str {
        match self {
            Frequencies::Exact => "exact",
            Frequencies::F32 => "f32",
        }
    }
}

/// Where sin and cos of each frequency go in a row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layout {
    /// `[sin w0 p, cos w0 p, sin w1 p, cos w1 p, ...]`, as in "Attention Is All You Need".
    #[default]
    Interleaved,
    /// `[sin w0 p, sin w1 p, ..., cos w0 p, cos w1 p, ...]`: the half-split layout of
    /// fairseq, tensor2tensor, Whisper and Marian.
    Split,
}

/// Where each frequency's sin and cos land in a row of `dim` columns: sin of frequency `i`
/// in column `i * stride`, its cos (for `i < n_cos`) in `cos_offset + i * stride`, and
/// column `zero_col` (if any) always zero. Every column is covered exactly once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Columns {
    pub n_freqs: u32,
    pub n_cos: u32,
    pub stride: u32,
    pub cos_offset: u32,
    pub zero_col: Option<u32>,
}

/// A validated sinusoidal positional-encoding spec. [`PeSpec::new`] is the Transformer's
/// `PE(p, 2i) = sin(p w_i)`, `PE(p, 2i+1) = cos(p w_i)`, `w_i = base^(-2i/dim)`;
/// [`PeSpec::for_variant`] gives the other published conventions.
///
/// ```
/// use posenc::{PeSpec, Variant};
///
/// let spec = PeSpec::new(512)?.with_base(10000.0)?;
/// assert_eq!(spec.dim(), 512);
/// assert_eq!(spec.n_freqs(), 256);
///
/// let fairseq = PeSpec::for_variant(Variant::Fairseq, 513)?; // odd dims get a zero column
/// assert_eq!(fairseq.padding_idx(), Some(1));
/// # Ok::<(), posenc::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct PeSpec {
    dim: u32,
    variant: Variant,
    /// A model's own frequencies ([`PeSpec::with_inv_freq`]), in place of the formula's;
    /// shared, so a clone costs no copy of them.
    inv_freq: Option<Arc<[f64]>>,
    /// The frequency base; tensor2tensor's `max_timescale`.
    base: f64,
    min_timescale: f64,
    frequencies: Frequencies,
    start_index: u32,
    padding_idx: Option<u32>,
}

impl PeSpec {
    /// The Transformer's encoding ([`Variant::Vaswani`]) of dimension `dim`, base 10000.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `dim` unless it is even and in `2..=65536`.
    pub fn new(dim: u32) -> Result<Self> {
        Self::for_variant(Variant::Vaswani, dim)
    }

    /// The defaults of `variant` at dimension `dim`: base (tensor2tensor: `max_timescale`)
    /// 10000, `min_timescale` 1, exact frequencies, positions from 0, and for fairseq
    /// `padding_idx` 1.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `dim` if the variant is not defined for it.
    pub fn for_variant(variant: Variant, dim: u32) -> Result<Self> {
        if !variant.accepts_dim(dim) {
            return Err(Error::InvalidParameter {
                field: "dim",
                value: format!("{dim} (variant {variant})"),
                allowed: variant.allowed_dims(),
            });
        }
        Ok(Self {
            dim,
            variant,
            inv_freq: None,
            base: DEFAULT_BASE,
            min_timescale: 1.0,
            frequencies: Frequencies::Exact,
            start_index: 0,
            padding_idx: (variant == Variant::Fairseq).then_some(1),
        })
    }

    /// The same spec with another frequency base (tensor2tensor: `max_timescale`).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `base` unless it is finite and in `(1, 1e7]`
    /// (tensor2tensor: see [`PeSpec::with_timescales`]).
    pub fn with_base(self, base: f64) -> Result<Self> {
        if self.variant == Variant::Tensor2Tensor {
            let min = self.min_timescale;
            return self.with_timescales(min, base);
        }
        if !(base.is_finite() && base > 1.0 && base <= MAX_BASE) {
            return Err(Error::InvalidParameter {
                field: "base",
                value: float(base),
                allowed: "a finite number in (1, 1e7]",
            });
        }
        Ok(Self { base, ..self })
    }

    /// tensor2tensor's `min_timescale` and `max_timescale`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless the variant is tensor2tensor and
    /// `1e-9 <= min <= max <= 1e9`.
    pub fn with_timescales(self, min: f64, max: f64) -> Result<Self> {
        if self.variant != Variant::Tensor2Tensor {
            return Err(Error::InvalidParameter {
                field: "variant",
                value: format!("{} (timescales given)", self.variant),
                allowed: "tensor2tensor for min/max timescales",
            });
        }
        let in_range = |x: f64| x.is_finite() && (MIN_TIMESCALE..=MAX_TIMESCALE).contains(&x);
        if !in_range(min) {
            return Err(Error::InvalidParameter {
                field: "min_timescale",
                value: float(min),
                allowed: "a finite number in [1e-9, 1e9]",
            });
        }
        if !(in_range(max) && max >= min) {
            return Err(Error::InvalidParameter {
                field: "max_timescale",
                value: float(max),
                allowed: "a finite number in [min_timescale, 1e9]",
            });
        }
        Ok(Self { min_timescale: min, base: max, ..self })
    }

    /// The same spec with frequencies computed at full precision or rounded to f32. With
    /// frequencies given by [`PeSpec::with_inv_freq`], `F32` rounds each given value to
    /// the nearest float32 (exact for a float32 buffer) and the angle to float32, as a
    /// framework holding that buffer computes it.
    pub fn with_frequencies(self, frequencies: Frequencies) -> Self {
        Self { frequencies, ..self }
    }

    /// The same spec with a model's own frequencies in place of the variant's formula:
    /// `w_i = inv_freq[i]` radians per position, each taken exactly as given (a float32
    /// buffer widened to float64 is exact), one per frequency ([`PeSpec::n_freqs`]). The
    /// variant still decides the column layout, the position numbering and the zero row;
    /// the base and timescales no longer enter. With [`Frequencies::Exact`] (the default)
    /// the phase `p w_i` is reduced exactly, so the table is within
    /// [`ACCURACY_BOUND`](crate::ACCURACY_BOUND) of sin and cos of these very values at
    /// every u32 position, with the same bits on the CPU and every GPU.
    ///
    /// This is how to reproduce a framework whose float32 frequencies are not the correctly
    /// rounded formula: dump its buffer (`posenc::inputs::read_inv_freq` reads `.npy` and
    /// `.safetensors`) and pass the values.
    ///
    /// ```
    /// use posenc::PeSpec;
    ///
    /// // fairseq's float32 frequencies at d = 8, as torch computes them.
    /// let stored = [1.0f32, 0.046415888, 0.0021544346];
    /// let w: Vec<f64> = stored.iter().map(|&v| f64::from(v)).collect();
    /// let spec = PeSpec::for_variant(posenc::Variant::Fairseq, 6)?.with_inv_freq(&w)?;
    /// assert_eq!(spec.inv_freq(), Some(&w[..]));
    /// let t = posenc::reference::table(&spec, &[1000]);
    /// assert!((t[[0, 1]] - (1000.0 * w[1]).sin()).abs() < 1e-12);
    /// assert!(PeSpec::new(8)?.with_inv_freq(&w).is_err(), "vaswani at d = 8 has 4 frequencies");
    /// # Ok::<(), posenc::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `inv_freq` if there are not [`PeSpec::n_freqs`]
    /// values, or for the first value that is not finite and in
    /// [[`MIN_INV_FREQ`], [`MAX_INV_FREQ`]].
    pub fn with_inv_freq(self, inv_freq: &[f64]) -> Result<Self> {
        let n = self.n_freqs() as usize;
        if inv_freq.len() != n {
            return Err(Error::InvalidParameter {
                field: "inv_freq",
                value: format!(
                    "{} values for the {n} frequencies of {} at dim {}",
                    inv_freq.len(),
                    self.variant,
                    self.dim
                ),
                allowed: "one value per frequency: ceil(dim / 2) for vaswani, distilbert and \
                          marian, floor(dim / 2) for the others",
            });
        }
        let in_range = |v: f64| (MIN_INV_FREQ..=MAX_INV_FREQ).contains(&v);
        if let Some((k, &v)) = inv_freq.iter().enumerate().find(|(_, v)| !in_range(**v)) {
            return Err(Error::InvalidParameter {
                field: "inv_freq",
                value: format!("{} at index {k}", float(v)),
                allowed: "finite numbers in [2^-126, 2^64] radians per position",
            });
        }
        Ok(Self { inv_freq: Some(inv_freq.into()), ..self })
    }

    /// The frequencies given by [`PeSpec::with_inv_freq`], if any.
    pub fn inv_freq(&self) -> Option<&[f64]> {
        self.inv_freq.as_deref()
    }

    /// Numbers positions from `start`: the row of position `p` is the encoding of
    /// `p + start` (tensor2tensor's `start_index`), exact even when the sum passes 2^32.
    /// The padding position ([`PeSpec::with_padding_idx`]) is a position as given, before
    /// the offset: its row is zeros whatever `start` is.
    pub fn with_start_index(self, start: u32) -> Self {
        Self { start_index: start, ..self }
    }

    /// The position whose row is all zeros (fairseq's `padding_idx`), or none.
    pub fn with_padding_idx(self, padding_idx: Option<u32>) -> Self {
        Self { padding_idx, ..self }
    }

    /// The model dimension: the number of values in a row.
    pub fn dim(&self) -> u32 {
        self.dim
    }

    /// The convention.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// The frequency base (tensor2tensor: `max_timescale`).
    pub fn base(&self) -> f64 {
        self.base
    }

    /// tensor2tensor's `min_timescale` (1 for the other variants, where it is unused).
    pub fn min_timescale(&self) -> f64 {
        self.min_timescale
    }

    /// How frequencies and angles are computed.
    pub fn frequencies(&self) -> Frequencies {
        self.frequencies
    }

    /// The offset added to every position.
    pub fn start_index(&self) -> u32 {
        self.start_index
    }

    /// The position whose row is all zeros, if any.
    pub fn padding_idx(&self) -> Option<u32> {
        self.padding_idx
    }

    /// The column layout.
    pub fn layout(&self) -> Layout {
        match self.variant {
            Variant::Vaswani | Variant::DistilBert => Layout::Interleaved,
            _ => Layout::Split,
        }
    }

    /// The number of distinct frequencies: `ceil(dim / 2)` for vaswani, distilbert and
    /// marian, `floor(dim / 2)` for the others.
    pub fn n_freqs(&self) -> u32 {
        self.columns().n_freqs
    }

    pub(crate) fn columns(&self) -> Columns {
        let d = self.dim;
        let (lo, hi) = (d / 2, d.div_ceil(2));
        match self.variant {
            Variant::Vaswani | Variant::DistilBert => {
                Columns { n_freqs: hi, n_cos: lo, stride: 2, cos_offset: 1, zero_col: None }
            }
            Variant::Marian => {
                Columns { n_freqs: hi, n_cos: lo, stride: 1, cos_offset: hi, zero_col: None }
            }
            Variant::Tensor2Tensor | Variant::Fairseq | Variant::Whisper => Columns {
                n_freqs: lo,
                n_cos: lo,
                stride: 1,
                cos_offset: lo,
                zero_col: (d % 2 == 1).then_some(d - 1),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dim_must_be_even_and_in_range() {
        for bad in [0, 1, 3, 65537, 65538, u32::MAX] {
            let err = PeSpec::new(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidParameter { field: "dim", .. }), "{bad}: {err}");
            assert!(err.to_string().contains(&bad.to_string()));
        }
        for good in [2, 4, 512, 65536] {
            assert_eq!(PeSpec::new(good).unwrap().dim(), good);
        }
    }

    #[test]
    fn each_variant_names_the_dims_it_accepts() {
        let cases = [
            (Variant::DistilBert, &[0, 65537][..], &[1, 3, 512][..]),
            (Variant::Marian, &[0], &[1, 7]),
            (Variant::Tensor2Tensor, &[0, 1], &[2, 3]),
            (Variant::Fairseq, &[0, 2, 3], &[4, 5]),
            (Variant::Whisper, &[2, 5, 65538], &[4, 6]),
        ];
        for (variant, bad, good) in cases {
            for &d in bad {
                let err = PeSpec::for_variant(variant, d).unwrap_err();
                assert!(err.to_string().contains(variant.name()), "{err}");
            }
            for &d in good {
                assert_eq!(PeSpec::for_variant(variant, d).unwrap().dim(), d);
            }
        }
    }

    #[test]
    fn columns_cover_every_column_once() {
        for variant in Variant::ALL {
            for d in 1..40 {
                let Ok(spec) = PeSpec::for_variant(variant, d) else { continue };
                let c = spec.columns();
                let mut seen = vec![0u32; d as usize];
                for i in 0..c.n_freqs {
                    seen[(i * c.stride) as usize] += 1;
                    if i < c.n_cos {
                        seen[(c.cos_offset + i * c.stride) as usize] += 1;
                    }
                }
                if let Some(z) = c.zero_col {
                    seen[z as usize] += 1;
                }
                assert!(seen.iter().all(|&n| n == 1), "{variant} d={d}: {seen:?}");
            }
        }
    }

    #[test]
    fn variant_names_round_trip() {
        for v in Variant::ALL {
            assert_eq!(v.name().parse::<Variant>().unwrap(), v);
        }
        let err = "bert".parse::<Variant>().unwrap_err();
        assert!(err.to_string().contains("bert") && err.to_string().contains("fairseq"));
    }

    #[test]
    fn timescales_only_for_tensor2tensor() {
        let t2t = PeSpec::for_variant(Variant::Tensor2Tensor, 8).unwrap();
        let s = t2t.clone().with_timescales(2.0, 5000.0).unwrap();
        assert_eq!((s.min_timescale(), s.base()), (2.0, 5000.0));
        assert!(t2t.clone().with_timescales(5.0, 4.0).is_err());
        assert!(t2t.clone().with_timescales(0.0, 4.0).is_err());
        assert!(t2t.clone().with_timescales(1.0, f64::NAN).is_err());
        assert!(t2t.with_base(0.5).is_err(), "max below min");
        assert!(PeSpec::new(8).unwrap().with_timescales(1.0, 2.0).is_err());
    }

    #[test]
    fn base_must_be_finite_and_in_range() {
        let spec = PeSpec::new(8).unwrap();
        for bad in [1.0, 0.5, -3.0, 0.0, f64::NAN, f64::INFINITY, 1e7 * 1.0001] {
            let err = spec.clone().with_base(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidParameter { field: "base", .. }), "{bad}: {err}");
        }
        assert_eq!(spec.clone().with_base(1e7).unwrap().base(), 1e7);
        assert_eq!(spec.with_base(1.000001).unwrap().base(), 1.000001);
    }
}
