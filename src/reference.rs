//! The reference path: slow, high precision, obviously correct. Tests compare every fast
//! path against it, and `--device reference` exposes it.
//!
//! Each frequency is held in turns per position at 256 bits; the phase `p * w_i / 2pi` is
//! multiplied out exactly and reduced to one turn before float64 takes over, so the result
//! is within a few 1e-16 of the exact value at every u32 position.

use ndarray::Array2;
use rayon::prelude::*;

use crate::exact;
use crate::spec::{Frequencies, PeSpec};

/// The positional-encoding table for `positions`, shape `[positions.len(), dim]`, in
/// float64, within 1e-15 of the exact values of the spec's formula (for
/// [`Frequencies::F32`]: of the exact sin and cos of the float32 angle).
///
/// ```
/// let spec = posenc::PeSpec::new(4)?;
/// let t = posenc::reference::table(&spec, &[2]);
/// assert!((t[[0, 0]] - 2f64.sin()).abs() < 1e-15);
/// # Ok::<(), posenc::Error>(())
/// ```
pub fn table(spec: &PeSpec, positions: &[u32]) -> Array2<f64> {
    table_as(spec, positions, |v| v)
}

/// [`table`] rounded to float32 (round to nearest even), made without the float64 table:
/// 4 bytes a value at its peak, as the fast paths' tables, where rounding a float64 table
/// held 12 (a `--device reference` table of 2^31 values took 24 GiB; round twenty-one of
/// the hostile probes).
pub fn table_f32(spec: &PeSpec, positions: &[u32]) -> Array2<f32> {
    table_as(spec, positions, |v| v as f32)
}

/// [`table`] with each value passed through `round` as it is written.
fn table_as<T: Copy + Default + Send>(
    spec: &PeSpec,
    positions: &[u32],
    round: impl Fn(f64) -> T + Sync,
) -> Array2<T> {
    let dim = spec.dim() as usize;
    let cols = spec.columns();
    let mut out = Array2::<T>::from_elem((positions.len(), dim), T::default());
    // Per frequency, the phase of a position in 2^-128 turns.
    let phase: Box<dyn Fn(u32, usize) -> u128 + Sync> = match spec.frequencies() {
        Frequencies::Exact => {
            let turns = exact::turns_per_position(spec);
            let start = u64::from(spec.start_index());
            Box::new(move |p, i| exact::phase_fixed128(u64::from(p) + start, &turns[i]))
        }
        Frequencies::F32 => {
            // The angle is the float32 product the frameworks compute; only its sin and
            // cos are exact.
            let freqs = exact::f32_frequencies(spec);
            let start = u64::from(spec.start_index());
            let inv_two_pi = exact::inv_two_pi();
            Box::new(move |p, i| {
                let angle = (u64::from(p) + start) as f32 * freqs[i];
                exact::angle_to_turn128(f64::from(angle), &inv_two_pi)
            })
        }
    };
    if let Some(flat) = out.as_slice_mut()
        && dim > 0
    {
        flat.par_chunks_mut(dim).zip(positions.par_iter()).for_each(|(row, &p)| {
            if spec.padding_idx() == Some(p) {
                return;
            }
            for i in 0..cols.n_freqs {
                let (s, c) = exact::sincos_of_turn128(phase(p, i as usize));
                row[(i * cols.stride) as usize] = round(s);
                if i < cols.n_cos {
                    row[(cols.cos_offset + i * cols.stride) as usize] = round(c);
                }
            }
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Variant;

    /// The float32 table, made as it goes, is the float64 table rounded value by value:
    /// every variant, odd widths, float32 angles and a padding row.
    #[test]
    fn the_float32_table_is_the_float64_table_rounded() {
        let positions = [0, 1, 2, 1000, 65_535, 1 << 24, u32::MAX];
        for variant in Variant::ALL {
            for dim in [1, 6, 7] {
                let Ok(spec) = PeSpec::for_variant(variant, dim) else { continue };
                let specs = [
                    spec.clone(),
                    spec.clone().with_frequencies(Frequencies::F32),
                    spec.with_padding_idx(Some(2)),
                ];
                for spec in specs {
                    let want = table(&spec, &positions).mapv(|v| v as f32);
                    let got = table_f32(&spec, &positions);
                    let same = want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{variant:?} d = {dim}: {spec:?}");
                }
            }
        }
    }
}
