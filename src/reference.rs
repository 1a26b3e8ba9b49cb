//! The reference path: slow, high precision, obviously correct. Tests compare every fast
//! path against it, and `--device reference` exposes it.
//!
//! Each frequency is held in turns per position at 256 bits; the phase `p * w_i / 2pi` is
//! multiplied out exactly and reduced to one turn before float64 takes over, so the result
//! is within a few 1e-16 of the exact value at every u32 position.

use ndarray::Array2;
use rayon::prelude::*;

use crate::exact;
use crate::spec::{Layout, PeSpec};

/// The positional-encoding table for `positions`, shape `[positions.len(), dim]`, in
/// float64, within 1e-15 of the exact values.
///
/// ```
/// let spec = posenc::PeSpec::new(4)?;
/// let t = posenc::reference::table(&spec, &[2]);
/// assert!((t[[0, 0]] - 2f64.sin()).abs() < 1e-15);
/// # Ok::<(), posenc::Error>(())
/// ```
pub fn table(spec: &PeSpec, positions: &[u32]) -> Array2<f64> {
    let dim = spec.dim() as usize;
    let turns = exact::turns_per_position(spec);
    let mut out = Array2::<f64>::zeros((positions.len(), dim));
    if let Some(flat) = out.as_slice_mut() {
        flat.par_chunks_mut(dim).zip(positions.par_iter()).for_each(|(row, &p)| {
            for (i, w) in turns.iter().enumerate() {
                let (s, c) = exact::sincos_of_turn128(exact::phase_fixed128(p, w));
                match spec.layout() {
                    Layout::Interleaved => {
                        row[2 * i] = s;
                        row[2 * i + 1] = c;
                    }
                }
            }
        });
    }
    out
}

/// [`table`] rounded to float32 (round to nearest even).
pub fn table_f32(spec: &PeSpec, positions: &[u32]) -> Array2<f32> {
    table(spec, positions).mapv(|v| v as f32)
}
