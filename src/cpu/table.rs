//! CPU twin of `shaders/table.wgsl`: one exact-phase sin/cos pair per (position, frequency).

use ndarray::{Array2, ArrayViewMut2};
use rayon::prelude::*;

use super::sincos::{phase_turns, sincos_bits};
use crate::error::{Error, Result};
use crate::exact;
use crate::spec::{Layout, PeSpec};

/// Rows per rayon task: large enough to amortise scheduling, small enough to balance.
const ROWS_PER_TASK: usize = 16;

/// The positional-encoding table for `positions`, shape `[positions.len(), dim]`,
/// bit-identical to the GPU path.
///
/// ```
/// let spec = posenc::PeSpec::new(8)?;
/// let t = posenc::cpu::table(&spec, &[0, 1, 2, 3]);
/// assert_eq!(t[[0, 1]], 1.0);
/// assert!((t[[1, 0]] - 1f32.sin()).abs() < 6e-8);
/// # Ok::<(), posenc::Error>(())
/// ```
pub fn table(spec: &PeSpec, positions: &[u32]) -> Array2<f32> {
    let mut out = Array2::<f32>::zeros((positions.len(), spec.dim() as usize));
    fill(spec, positions, out.as_slice_mut().expect("a new array is contiguous"));
    out
}

/// Like [`table`], writing into `out`, which must have shape `[positions.len(), dim]`.
///
/// # Errors
/// [`Error::Shape`] if `out` has another shape.
pub fn table_into(spec: &PeSpec, positions: &[u32], mut out: ArrayViewMut2<'_, f32>) -> Result<()> {
    let expected = (positions.len(), spec.dim() as usize);
    if out.dim() != expected {
        return Err(Error::Shape {
            op: "table",
            what: "output",
            expected: format!("{expected:?}"),
            actual: format!("{:?}", out.dim()),
        });
    }
    match out.as_slice_mut() {
        Some(flat) => fill(spec, positions, flat),
        None => out.assign(&table(spec, positions)),
    }
    Ok(())
}

fn fill(spec: &PeSpec, positions: &[u32], flat: &mut [f32]) {
    let dim = spec.dim() as usize;
    if dim == 0 || positions.is_empty() {
        return;
    }
    let steps = exact::phase_steps(spec);
    flat.par_chunks_mut(dim * ROWS_PER_TASK).zip(positions.par_chunks(ROWS_PER_TASK)).for_each(
        |(rows, ps)| {
            for (row, &p) in rows.chunks_exact_mut(dim).zip(ps) {
                fill_row(spec.layout(), &steps, p, row);
            }
        },
    );
}

fn fill_row(layout: Layout, steps: &[[u32; 2]], p: u32, row: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        unsafe { fill_row_avx2(layout, steps, p, row) };
        return;
    }
    fill_row_portable(layout, steps, p, row);
}

/// The same loop compiled for AVX2: eight lanes of the integer kernel per instruction. Same
/// operations, same bits; only the instruction selection differs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn fill_row_avx2(layout: Layout, steps: &[[u32; 2]], p: u32, row: &mut [f32]) {
    fill_row_portable(layout, steps, p, row);
}

#[inline(always)]
fn fill_row_portable(layout: Layout, steps: &[[u32; 2]], p: u32, row: &mut [f32]) {
    match layout {
        Layout::Interleaved => {
            let pairs: &mut [[f32; 2]] = bytemuck::cast_slice_mut(row);
            for (pair, &[lo, hi]) in pairs.iter_mut().zip(steps) {
                let (s, c) = sincos_bits(phase_turns(p, lo, hi));
                *pair = [f32::from_bits(s), f32::from_bits(c)];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avx2_and_portable_loops_give_the_same_bits() {
        let spec = PeSpec::new(1026).unwrap().with_base(500_000.0).unwrap();
        let steps = exact::phase_steps(&spec);
        for p in [0u32, 1, 12345, 1 << 24, (1 << 31) + 7, u32::MAX] {
            let mut a = vec![0f32; 1026];
            let mut b = vec![0f32; 1026];
            fill_row_portable(Layout::Interleaved, &steps, p, &mut a);
            fill_row(Layout::Interleaved, &steps, p, &mut b);
            let same = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "position {p}");
        }
    }
}
