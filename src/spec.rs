//! The validated description of a sinusoidal positional encoding.

use crate::error::{Error, Result};

/// The largest model dimension posenc accepts.
pub const MAX_DIM: u32 = 65536;
/// The largest frequency base posenc promises its accuracy for.
pub const MAX_BASE: f64 = 1e7;
/// The base of "Attention Is All You Need".
pub const DEFAULT_BASE: f64 = 10000.0;

/// Where sin and cos of each frequency go in a row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layout {
    /// `[sin w0 p, cos w0 p, sin w1 p, cos w1 p, ...]`, as in "Attention Is All You Need".
    #[default]
    Interleaved,
}

/// A validated sinusoidal positional-encoding spec:
/// `PE(p, 2i) = sin(p w_i)`, `PE(p, 2i+1) = cos(p w_i)`, `w_i = base^(-2i/dim)`.
///
/// ```
/// let spec = posenc::PeSpec::new(512)?.with_base(10000.0)?;
/// assert_eq!(spec.dim(), 512);
/// assert_eq!(spec.n_freqs(), 256);
/// # Ok::<(), posenc::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeSpec {
    dim: u32,
    base: f64,
    layout: Layout,
}

impl PeSpec {
    /// A spec of dimension `dim` with the default base (10000) and the interleaved layout.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `dim` unless it is even and in `2..=65536`.
    pub fn new(dim: u32) -> Result<Self> {
        if dim == 0 || !dim.is_multiple_of(2) || dim > MAX_DIM {
            return Err(Error::InvalidParameter {
                field: "dim",
                value: dim.to_string(),
                allowed: "an even number in 2..=65536",
            });
        }
        Ok(Self { dim, base: DEFAULT_BASE, layout: Layout::Interleaved })
    }

    /// The same spec with another frequency base.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `base` unless it is finite and in `(1, 1e7]`.
    pub fn with_base(mut self, base: f64) -> Result<Self> {
        if !(base.is_finite() && base > 1.0 && base <= MAX_BASE) {
            return Err(Error::InvalidParameter {
                field: "base",
                value: base.to_string(),
                allowed: "a finite number in (1, 1e7]",
            });
        }
        self.base = base;
        Ok(self)
    }

    /// The model dimension: the number of values in a row.
    pub fn dim(&self) -> u32 {
        self.dim
    }

    /// The frequency base.
    pub fn base(&self) -> f64 {
        self.base
    }

    /// The column layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The number of frequencies, `dim / 2`.
    pub fn n_freqs(&self) -> u32 {
        self.dim / 2
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
    fn base_must_be_finite_and_in_range() {
        let spec = PeSpec::new(8).unwrap();
        for bad in [1.0, 0.5, -3.0, 0.0, f64::NAN, f64::INFINITY, 1e7 * 1.0001] {
            let err = spec.with_base(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidParameter { field: "base", .. }), "{bad}: {err}");
        }
        assert_eq!(spec.with_base(1e7).unwrap().base(), 1e7);
        assert_eq!(spec.with_base(1.000001).unwrap().base(), 1.000001);
    }
}
