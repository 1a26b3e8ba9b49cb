//! The naive float32 positional encoding, the way most code computes it: frequency, product
//! and sin/cos all in f32. It is here to be measured against, never used: above 2^24 the
//! position itself rounds, and the product's rounding alone is worth radians.

use ndarray::Array2;

use crate::spec::PeSpec;

/// `sin(f32(p) * w_i)` and `cos(f32(p) * w_i)` with `w_i = base.powf(-2i / d)` in f32 (or a
/// spec's own frequencies rounded to f32), shape `[positions.len(), dim]`.
///
/// ```
/// // 2^24 + 1 is not a float32: the position itself rounds, and some values are off by
/// // more than 1.
/// let spec = posenc::PeSpec::new(512)?;
/// let exact = posenc::reference::table(&spec, &[(1 << 24) + 1]);
/// let naive = posenc::naive::table(&spec, &[(1 << 24) + 1]);
/// let worst = naive.iter().zip(exact.iter()).map(|(&n, &e)| (f64::from(n) - e).abs());
/// assert!(worst.fold(0.0, f64::max) > 1.0);
/// # Ok::<(), posenc::Error>(())
/// ```
pub fn table(spec: &PeSpec, positions: &[u32]) -> Array2<f32> {
    let d = spec.dim() as f32;
    let base = spec.base() as f32;
    let w: Vec<f32> = match spec.inv_freq() {
        Some(inv_freq) => inv_freq.iter().map(|&w| w as f32).collect(),
        None => (0..spec.n_freqs()).map(|i| base.powf(-((2 * i) as f32) / d)).collect(),
    };
    Array2::from_shape_fn((positions.len(), spec.dim() as usize), |(r, c)| {
        let phase = positions[r] as f32 * w[c / 2];
        if c.is_multiple_of(2) { phase.sin() } else { phase.cos() }
    })
}
