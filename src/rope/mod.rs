//! Rotary position embedding (RoPE) of query and key tensors: the validated spec, the
//! frequency scaling schemes of Hugging Face's `rope_scaling`, and the checks every path
//! runs. The CPU path is [`crate::cpu::rope()`], the GPU path [`crate::gpu::Context::rope`].
//!
//! For a token at position `p`, frequency `i < r/2` and the pair of dimensions `(a, b)` it
//! rotates (`(i, i + r/2)` for [`Pairing::Neox`], `(2i, 2i + 1)` for [`Pairing::Gptj`]):
//!
//! ```text
//! out_a = x_a * c - x_b * s        c = af * cos(p * w_i)
//! out_b = x_b * c + x_a * s        s = af * sin(p * w_i)
//! ```
//!
//! with `w_i = base^(-2i/r)` changed by the [`Scaling`] and `af` its attention factor.
//! Dimensions `r..head_dim` pass through unchanged.
//!
//! The angle comes from the exact-phase engine: each `w_i` is computed at 256 bits from the
//! published formula and the float64 parameters, held as a 64-bit fraction of a turn, and
//! `p * w_i` is reduced exactly for every u32 position (see ARCHITECTURE.md).
//!
//! ```
//! use posenc::rope::{Layout, Pairing, RopeSpec, Scaling};
//!
//! let scaling = Scaling::from_hf_json(
//!     r#"{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
//!         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}"#,
//! )?;
//! let spec = RopeSpec::new(64)?.with_base(500000.0)?.with_scaling(scaling)?;
//! let q = ndarray::Array4::<f32>::ones((1, 3, 2, 64)); // [B, L, H, Dh]
//! let positions = posenc::positions::contiguous_batch(1, 3)?;
//! let rotated = posenc::cpu::rope(&spec, q.view(), positions.view(), Layout::Blhd)?;
//! assert_eq!(rotated[[0, 0, 1, 5]], 1.0); // position 0 is the identity
//! # Ok::<(), posenc::Error>(())
//! ```
//!
//! A multimodal RoPE (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V, ...) turns each
//! frequency by the position of one of three axes (time, height, width): its tokens have a
//! position per axis, `[3, B, L]`, and [`MultimodalRope`] says which axis each frequency
//! takes ([`crate::cpu::rope_multimodal`], [`crate::gpu::Context::rope_multimodal`]). Text
//! tokens have the same position on every axis, and rotate as the 1-D RoPE does.

mod cache;
mod config;
pub mod families;
mod freq;
mod scaling;

use ndarray::{ArrayView2, ArrayView3};

pub use crate::dtype::Dtype;
use crate::error::{Error, Result, float};
pub use cache::RopeCache;
pub(crate) use cache::cache_frequencies;
pub use cache::check_cache_size;
pub use config::MultimodalRope;
pub use families::Mrope;
pub use scaling::{
    Llama3, LongRope, MAX_FACTORS, MAX_JSON_BYTES, Proportional, ROPE_TYPES, Scaling,
    YARN_BETA_FAST, YARN_BETA_SLOW, Yarn,
};
pub(crate) use scaling::{duplicate_key, excerpt, parse_json};

/// The largest head dimension posenc accepts.
pub const MAX_HEAD_DIM: u32 = 65536;
/// The frequency base of the RoPE paper and of most models.
pub const DEFAULT_BASE: f64 = 10000.0;

/// Which dimensions a frequency rotates together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Pairing {
    /// Frequency `i` rotates dimensions `i` and `i + r/2` (GPT-NeoX, Llama and most Hugging
    /// Face models: `rotate_half`).
    #[default]
    Neox,
    /// Frequency `i` rotates dimensions `2i` and `2i + 1` (GPT-J, the RoFormer paper).
    Gptj,
}

/// The axis order of a query or key tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// `[batch, len, heads, head_dim]` (Hugging Face's projections before the transpose,
    /// flash attention).
    Blhd,
    /// `[batch, heads, len, head_dim]` (Hugging Face's attention after the transpose).
    Bhld,
}

impl Layout {
    /// `(batch, len, heads, head_dim)` of a tensor of this layout.
    pub fn dims(self, shape: [usize; 4]) -> (usize, usize, usize, usize) {
        match self {
            Layout::Blhd => (shape[0], shape[1], shape[2], shape[3]),
            Layout::Bhld => (shape[0], shape[2], shape[1], shape[3]),
        }
    }
}

/// A validated RoPE configuration: head dimension, rotary dimension `r` (even,
/// `2 <= r <= head_dim`; dimensions from `r` on pass through), base, pairing and scaling.
///
/// ```
/// use posenc::rope::{Pairing, RopeSpec, Scaling};
/// let spec = RopeSpec::new(128)?
///     .with_rotary_dim(64)?
///     .with_base(1e6)?
///     .with_pairing(Pairing::Gptj)
///     .with_scaling(Scaling::Linear { factor: 4.0 })?;
/// assert_eq!(spec.n_freqs(), 32);
/// # Ok::<(), posenc::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct RopeSpec {
    head_dim: u32,
    rotary_dim: u32,
    base: f64,
    pairing: Pairing,
    scaling: Scaling,
    /// A fixed sequence length for the length-dependent schemes (see
    /// [`RopeSpec::with_seq_len`]); `None`: each call's largest position plus one.
    seq_len: Option<u64>,
}

impl RopeSpec {
    /// Full rotary RoPE on heads of `head_dim` dimensions, base 10000, neox pairing, no
    /// scaling.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `head_dim` unless it is even and in `2..=65536`.
    pub fn new(head_dim: u32) -> Result<Self> {
        if !(2..=MAX_HEAD_DIM).contains(&head_dim) || !head_dim.is_multiple_of(2) {
            // The hint only where a rotary dim helps (an odd dim in range), worded for every
            // front end: RopeSpec::partial here, --rotary-dim and Python's rotary_dim= there.
            let allowed = if head_dim > 2 && head_dim < MAX_HEAD_DIM {
                "an even number in 2..=65536 (an odd head dim takes a partial rotary dim: an \
                 even number of its dims to rotate)"
            } else {
                "an even number in 2..=65536"
            };
            return Err(Error::InvalidParameter {
                field: "head_dim",
                value: head_dim.to_string(),
                allowed,
            });
        }
        Ok(Self {
            head_dim,
            rotary_dim: head_dim,
            base: DEFAULT_BASE,
            pairing: Pairing::Neox,
            scaling: Scaling::None,
            seq_len: None,
        })
    }

    /// Partial rotary RoPE: `rotary_dim` of `head_dim` dimensions rotate. `head_dim` may be
    /// odd here.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `head_dim` (outside `2..=65536`) or `rotary_dim`
    /// (odd, below 2 or above `head_dim`).
    pub fn partial(head_dim: u32, rotary_dim: u32) -> Result<Self> {
        if !(2..=MAX_HEAD_DIM).contains(&head_dim) {
            return Err(Error::InvalidParameter {
                field: "head_dim",
                value: head_dim.to_string(),
                allowed: "a number in 2..=65536",
            });
        }
        let spec = Self {
            head_dim,
            rotary_dim: 2,
            base: DEFAULT_BASE,
            pairing: Pairing::Neox,
            scaling: Scaling::None,
            seq_len: None,
        };
        spec.with_rotary_dim(rotary_dim)
    }

    /// The same spec rotating only the first `rotary_dim` dimensions of each head.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `rotary_dim` unless it is even and in
    /// `2..=head_dim`; [`Error::RopeScaling`] if a per-frequency vector of the scaling does
    /// not have `rotary_dim / 2` entries ([`Error::InvalidParameter`] naming `inv_freq` for a
    /// model's own frequencies, [`Scaling::Explicit`]).
    pub fn with_rotary_dim(mut self, rotary_dim: u32) -> Result<Self> {
        if rotary_dim < 2 || !rotary_dim.is_multiple_of(2) || rotary_dim > self.head_dim {
            return Err(Error::InvalidParameter {
                field: "rotary_dim",
                value: format!("{rotary_dim} (head_dim {})", self.head_dim),
                allowed: "an even number in 2..=head_dim",
            });
        }
        self.scaling.check_rotary_dim(rotary_dim)?;
        self.rotary_dim = rotary_dim;
        Ok(self)
    }

    /// The same spec with another frequency base.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `base` unless it is finite and > 1.
    pub fn with_base(mut self, base: f64) -> Result<Self> {
        if !(base.is_finite() && base > 1.0) {
            return Err(Error::InvalidParameter {
                field: "base",
                value: float(base),
                allowed: "a finite number > 1",
            });
        }
        self.base = base;
        Ok(self)
    }

    /// The same spec with another pairing.
    #[must_use]
    pub fn with_pairing(mut self, pairing: Pairing) -> Self {
        self.pairing = pairing;
        self
    }

    /// The same spec with a frequency scaling.
    ///
    /// # Errors
    /// [`Error::RopeScaling`] naming the field if a parameter is out of range or a
    /// per-frequency vector does not have `rotary_dim / 2` entries; for a model's own
    /// frequencies ([`Scaling::Explicit`]) [`Error::InvalidParameter`] naming `inv_freq` or
    /// `attention_factor` ([`Scaling::validate`]).
    pub fn with_scaling(mut self, scaling: Scaling) -> Result<Self> {
        scaling.validate()?;
        scaling.check_rotary_dim(self.rotary_dim)?;
        self.scaling = scaling;
        Ok(self)
    }

    /// The same spec with the sequence length that `dynamic` and `longrope` see fixed at
    /// `seq_len`, whatever positions a call has. Without it (the default) each call uses its
    /// largest position plus one, which is what a Hugging Face rotary module computes from
    /// the `position_ids` of one forward pass; a module that keeps frequencies it grew for
    /// an earlier, longer call (transformers' `dynamic_rope_update` keeps
    /// `max_seq_len_cached`) is reproduced by passing that cached length here. The other
    /// schemes do not depend on it.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `seq_len` unless it is in `1..=2^32` (positions
    /// are u32).
    pub fn with_seq_len(mut self, seq_len: u64) -> Result<Self> {
        if !(1..=1u64 << 32).contains(&seq_len) {
            return Err(Error::InvalidParameter {
                field: "seq_len",
                value: seq_len.to_string(),
                allowed: "1..=4294967296 (one more than the largest u32 position)",
            });
        }
        self.seq_len = Some(seq_len);
        Ok(self)
    }

    /// The fixed sequence length of [`RopeSpec::with_seq_len`], if any.
    pub fn seq_len(&self) -> Option<u64> {
        self.seq_len
    }

    /// Dimensions per head.
    pub fn head_dim(&self) -> u32 {
        self.head_dim
    }

    /// Rotated dimensions per head, `r`.
    pub fn rotary_dim(&self) -> u32 {
        self.rotary_dim
    }

    /// Frequencies, `r / 2`.
    pub fn n_freqs(&self) -> u32 {
        self.rotary_dim / 2
    }

    /// The frequency base.
    pub fn base(&self) -> f64 {
        self.base
    }

    /// The pairing.
    pub fn pairing(&self) -> Pairing {
        self.pairing
    }

    /// The scaling.
    pub fn scaling(&self) -> &Scaling {
        &self.scaling
    }

    /// The frequencies for a batch whose sequences are `seq_len` long (the largest
    /// position plus one, as Hugging Face's dynamic update takes it): only `dynamic` and
    /// `longrope` depend on it.
    pub fn frequencies(&self, seq_len: u64) -> Frequencies {
        freq::resolve(self, seq_len)
    }

    /// The frequencies for a batch at `positions`: [`RopeSpec::frequencies`] of the fixed
    /// sequence length ([`RopeSpec::with_seq_len`]) if there is one, else of the largest
    /// position plus one (0 for no positions).
    pub fn frequencies_for(&self, positions: ArrayView2<'_, u32>) -> Frequencies {
        self.frequencies(self.seq_len.unwrap_or_else(|| seq_len(positions)))
    }
}

/// The sequence length Hugging Face's dynamic and longrope updates see for a batch: the
/// largest position plus one, or 0 for an empty batch.
pub fn seq_len(positions: ArrayView2<'_, u32>) -> u64 {
    largest_plus_one(positions.iter())
}

/// The largest of `positions` plus one, or 0 for none.
fn largest_plus_one<'a>(positions: impl Iterator<Item = &'a u32>) -> u64 {
    positions.max().map_or(0, |&p| u64::from(p) + 1)
}

/// The resolved frequencies of a spec for one sequence length: what every path uses.
#[derive(Clone, Debug, PartialEq)]
pub struct Frequencies {
    inv_freq: Vec<f64>,
    steps: Vec<[u32; 2]>,
    attention_factor: f32,
}

impl Frequencies {
    /// `w_i` in radians per position, rounded to float64 from the 256-bit value (for
    /// inspection; the paths use the exact turn fractions).
    pub fn inv_freq(&self) -> &[f64] {
        &self.inv_freq
    }

    /// The attention factor that multiplies cos and sin, rounded to float32.
    pub fn attention_factor(&self) -> f32 {
        self.attention_factor
    }

    /// Each `w_i / 2pi` as the 64-bit fraction of a turn `round(2^64 frac(w_i / 2pi))`,
    /// split `[lo, hi]`.
    pub fn steps(&self) -> &[[u32; 2]] {
        &self.steps
    }

    /// The number of frequencies, `r / 2`.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether there are no frequencies (never, for a valid spec).
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

pub use crate::dtype::Element;

/// Refuses a multimodal RoPE's axes of another number of frequencies than `spec`'s.
pub(crate) fn check_axes(spec: &RopeSpec, mrope: &MultimodalRope) -> Result<()> {
    if mrope.n_freqs() == spec.n_freqs() {
        return Ok(());
    }
    Err(Error::InvalidParameter {
        field: "mrope",
        value: format!(
            "axes of {} frequencies (rotary_dim {}) for a spec of rotary_dim {}",
            mrope.n_freqs(),
            2 * mrope.n_freqs(),
            spec.rotary_dim()
        ),
        allowed: "the spec's rotary_dim / 2 frequencies (MultimodalRope::for_rotary_dim)",
    })
}

/// The positions of a rotation's tokens: one per token, or one per axis of a multimodal
/// RoPE with the axis each frequency takes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum TokenPositions<'a> {
    /// `[B, L]`.
    One(ArrayView2<'a, u32>),
    /// `[3, B, L]`, and the axes of the frequencies.
    Axes(ArrayView3<'a, u32>, &'a MultimodalRope),
}

impl<'a> TokenPositions<'a> {
    /// A multimodal rotation's positions, checked against the spec: `mrope` assigns the
    /// spec's frequencies, and `positions` is `[3, B, L]`.
    pub(crate) fn axes(
        op: &'static str,
        spec: &RopeSpec,
        mrope: &'a MultimodalRope,
        positions: ArrayView3<'a, u32>,
    ) -> Result<Self> {
        check_axes(spec, mrope)?;
        if positions.shape()[0] != 3 {
            return Err(Error::Shape {
                op,
                what: "positions ([3, batch, len]: time, height and width)",
                expected: "3 on the first axis".into(),
                actual: format!("{:?}", positions.shape()),
            });
        }
        Ok(TokenPositions::Axes(positions, mrope))
    }

    /// `(batch, len)`.
    pub(crate) fn dim(&self) -> (usize, usize) {
        match self {
            TokenPositions::One(p) => p.dim(),
            TokenPositions::Axes(p, _) => (p.dim().1, p.dim().2),
        }
    }

    /// The frequencies for these positions: as [`RopeSpec::frequencies_for`], the largest
    /// position of any axis plus one (as transformers' dynamic update takes it).
    pub(crate) fn frequencies(&self, spec: &RopeSpec) -> Frequencies {
        match self {
            TokenPositions::One(p) => spec.frequencies_for(*p),
            TokenPositions::Axes(p, _) => {
                spec.frequencies(spec.seq_len.unwrap_or_else(|| largest_plus_one(p.iter())))
            }
        }
    }

    /// Token `(b, l)`'s position on each axis (the same three for one position).
    #[inline]
    pub(crate) fn at(&self, b: usize, l: usize) -> [u32; 3] {
        match self {
            TokenPositions::One(p) => [p[[b, l]]; 3],
            TokenPositions::Axes(p, _) => [p[[0, b, l]], p[[1, b, l]], p[[2, b, l]]],
        }
    }

    /// The multimodal RoPE whose axes the positions give.
    pub(crate) fn mrope(&self) -> Option<&'a MultimodalRope> {
        match self {
            TokenPositions::One(_) => None,
            TokenPositions::Axes(_, m) => Some(m),
        }
    }
}

/// The sizes of one RoPE call, checked against the spec and the positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub batch: usize,
    pub len: usize,
    pub heads: usize,
    pub head_dim: usize,
}

impl Geometry {
    /// Checks a tensor's shape against the spec and the positions' shape.
    pub(crate) fn check(
        op: &'static str,
        spec: &RopeSpec,
        shape: [usize; 4],
        layout: Layout,
        positions: (usize, usize),
    ) -> Result<Self> {
        let (batch, len, heads, head_dim) = layout.dims(shape);
        if head_dim != spec.head_dim() as usize {
            return Err(Error::Shape {
                op,
                what: "the tensor's last axis (head_dim of the spec)",
                expected: spec.head_dim().to_string(),
                actual: format!("{shape:?}"),
            });
        }
        // A tensor with a zero axis holds nothing to rotate, whatever its other axes (an
        // empty view may have any); otherwise its element count, which is never shown as a
        // product that overflowed.
        let limit = isize::MAX as usize / 4;
        let values = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if !shape.contains(&0) && values.is_none_or(|n| n > limit) {
            return Err(Error::TooLarge {
                op,
                what: "the tensor",
                shape: shape.to_vec(),
                limit_name: "isize::MAX bytes of 4-byte elements",
                limit: limit as u64,
            });
        }
        if positions != (batch, len) {
            return Err(Error::Shape {
                op,
                what: "positions ([batch, len] of the tensor)",
                expected: format!("{:?}", [batch, len]),
                actual: format!("{:?}", [positions.0, positions.1]),
            });
        }
        Ok(Self { batch, len, heads, head_dim })
    }

    /// [`Geometry::check`] of `x`, and `out` of `x`'s shape (the into-forms' output).
    pub(crate) fn check_into(
        op: &'static str,
        spec: &RopeSpec,
        x: &[usize],
        out: &[usize],
        layout: Layout,
        positions: (usize, usize),
    ) -> Result<Self> {
        let shape = [x[0], x[1], x[2], x[3]];
        let geometry = Self::check(op, spec, shape, layout, positions)?;
        if out != x {
            return Err(Error::Shape {
                op,
                what: "out (x's shape)",
                expected: format!("{shape:?}"),
                actual: format!("{out:?}"),
            });
        }
        Ok(geometry)
    }

    pub(crate) fn elements(&self) -> usize {
        self.batch * self.len * self.heads * self.head_dim
    }

    pub(crate) fn rows(&self) -> usize {
        self.batch * self.len * self.heads
    }

    /// The token (`b * len + l`) of head row `row` (rows in memory order).
    #[inline]
    pub(crate) fn token_of_row(&self, layout: Layout, row: usize) -> usize {
        match layout {
            Layout::Blhd => row / self.heads,
            Layout::Bhld => {
                let per_batch = self.heads * self.len;
                (row / per_batch) * self.len + row % self.len
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_ranges() {
        assert!(RopeSpec::new(0).is_err());
        assert!(RopeSpec::new(3).is_err());
        assert!(RopeSpec::new(MAX_HEAD_DIM + 2).is_err());
        // The rotary-dim hint where one helps (an odd dim in range) and nowhere else, worded
        // for every front end, naming none's option (round twenty-six).
        let hint = "partial rotary dim";
        for (dim, hinted) in [(3, true), (65535, true), (0, false), (1, false), (65537, false)] {
            let message = RopeSpec::new(dim).unwrap_err().to_string();
            assert_eq!(message.contains(hint), hinted, "{message}");
            assert!(!message.contains("--") && !message.contains("RopeSpec"), "{message}");
        }
        assert!(!RopeSpec::new(MAX_HEAD_DIM + 2).unwrap_err().to_string().contains(hint));
        let spec = RopeSpec::new(8).unwrap();
        for bad in [0, 1, 3, 10] {
            let err = spec.clone().with_rotary_dim(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidParameter { field: "rotary_dim", .. }), "{err}");
        }
        for bad in [1.0, 0.5, f64::NAN, f64::INFINITY, -2.0] {
            assert!(spec.clone().with_base(bad).is_err(), "{bad}");
        }
        assert_eq!(RopeSpec::partial(5, 4).unwrap().rotary_dim(), 4);
        assert!(RopeSpec::partial(5, 6).is_err());
        // A longrope vector must match the rotary dim, whichever is set first.
        let long = Scaling::LongRope(LongRope::new(vec![1.0; 2], vec![1.0; 2], Some(2.0), 64));
        assert!(spec.clone().with_scaling(long.clone()).is_err());
        let spec4 = spec.clone().with_rotary_dim(4).unwrap().with_scaling(long).unwrap();
        assert!(spec4.with_rotary_dim(8).is_err());
    }

    #[test]
    fn rows_map_to_tokens() {
        let g = Geometry { batch: 2, len: 3, heads: 4, head_dim: 8 };
        // blhd: rows are (b, l, h) in order.
        assert_eq!(g.token_of_row(Layout::Blhd, 0), 0);
        assert_eq!(g.token_of_row(Layout::Blhd, 4), 1);
        assert_eq!(g.token_of_row(Layout::Blhd, 23), 5);
        // bhld: rows are (b, h, l) in order.
        assert_eq!(g.token_of_row(Layout::Bhld, 1), 1);
        assert_eq!(g.token_of_row(Layout::Bhld, 3), 0);
        assert_eq!(g.token_of_row(Layout::Bhld, 12), 3);
        assert_eq!(g.token_of_row(Layout::Bhld, 23), 5);
    }
}
