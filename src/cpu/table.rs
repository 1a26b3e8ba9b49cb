//! CPU twin of `shaders/table.wgsl`: one exact-phase sin/cos pair per (position, frequency).

use std::sync::Arc;

use super::threads::for_each_chunk;
use ndarray::{Array2, ArrayViewMut2};

use super::sincos::{
    f32_angle_phase, f32_product_parts, phase_turns_u33, sincos_bits_as, u33_to_f32_parts,
};
use crate::error::{Error, Result};
use crate::exact;
use crate::simd::{Set, Simd};
use crate::spec::{Columns, Frequencies, PeSpec};

/// Rows per rayon task: large enough to amortise scheduling, small enough to balance.
const ROWS_PER_TASK: usize = 16;

/// Values up to which a table is computed on the calling thread, about 30 us of one core.
/// Handing work to rayon from outside the pool wakes a worker and waits for it, which costs
/// more than that (see `super::encode`). Measured on 2 cores (2026-12-02, rows of 4096,
/// medians of 60 calls), one thread against the pool, with calls back to back and with 3
/// ms between them (the pool asleep): 32768 values 32 against 35 us and 40 against 39 us;
/// 131072 values 139 against 146 and 152 against 355. A table of one task's rows runs on
/// the calling thread whatever its size.
const SERIAL_MAX_VALUES: usize = 1 << 15;

/// The positional-encoding table for `positions`, shape `[positions.len(), dim]`,
/// bit-identical to the GPU path. Its result is allocated as `ndarray` allocates (a refusal
/// aborts the process, as `Vec`'s does); for a size that comes from untrusted input,
/// allocate with [`crate::alloc::try_zeros`] and call [`table_into`], as the CLI does.
///
/// ```
/// let spec = posenc::PeSpec::new(8)?;
/// let t = posenc::cpu::table(&spec, &[0, 1, 2, 3]);
/// assert_eq!(t[[0, 1]], 1.0);
/// assert!(f64::from((t[[1, 0]] - 1f32.sin()).abs()) < posenc::ACCURACY_BOUND);
/// # Ok::<(), posenc::Error>(())
/// ```
pub fn table(spec: &PeSpec, positions: &[u32]) -> Array2<f32> {
    let mut out = Array2::<f32>::zeros((positions.len(), spec.dim() as usize));
    let values = out.as_slice_mut().expect("a new array is contiguous");
    crate::alloc::advise_huge_pages(values);
    fill(spec, positions, values);
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
    let rows = RowKernel::new(spec);
    let simd = Simd::detect();
    let serial = flat.len() <= SERIAL_MAX_VALUES || positions.len() <= ROWS_PER_TASK;
    for_each_chunk(flat, dim * ROWS_PER_TASK, serial, |(task, chunk)| {
        let ps = &positions[task * ROWS_PER_TASK..];
        for (row, &p) in chunk.chunks_exact_mut(dim).zip(ps) {
            rows.fill_row(simd, p, row);
        }
    });
}

/// Everything a row needs from its spec, computed once per table (and by the one-off
/// encode, which computes its tokens' rows one at a time: `super::encode`).
pub(super) struct RowKernel {
    cols: Columns,
    frequencies: Frequencies,
    /// [`exact::kernel_words`] as pairs, shared with its cache. Exact: the step of each
    /// frequency. f32: each frequency's bits in `[0]`, then the turn steps of powers of two.
    words: Arc<[u32]>,
    n_freqs: usize,
    start: u32,
    padding_idx: Option<u32>,
}

impl RowKernel {
    pub(super) fn new(spec: &PeSpec) -> Self {
        Self {
            cols: spec.columns(),
            frequencies: spec.frequencies(),
            words: exact::kernel_words(spec),
            n_freqs: spec.n_freqs() as usize,
            start: spec.start_index(),
            padding_idx: spec.padding_idx(),
        }
    }

    fn pairs(&self) -> &[[u32; 2]] {
        // The words come in pairs by construction; an odd tail would only be dropped.
        let even = self.words.len() & !1;
        bytemuck::cast_slice(&self.words[..even])
    }

    /// Exact: each frequency's step. f32: each frequency's bits in `[0]`.
    fn freqs(&self) -> &[[u32; 2]] {
        &self.pairs()[..self.n_freqs]
    }

    /// PE row `p` into `row` (`dim` values), compiled for `simd`'s set.
    pub(super) fn fill_row(&self, simd: Simd, p: u32, row: &mut [f32]) {
        if self.padding_idx == Some(p) {
            row.fill(0.0);
            return;
        }
        match simd.set() {
            Set::Portable => self.fill_row_portable::<false>(p, row),
            // SAFETY: a `Simd` names a set this CPU runs (see its type). The conversion form
            // in the SSE mode's default only, read on the thread that fills the row.
            #[cfg(target_arch = "x86_64")]
            Set::Avx2 if simd.unless_nondefault_mode() == simd => unsafe {
                self.fill_row_avx2_cvt(p, row)
            },
            #[cfg(target_arch = "x86_64")]
            Set::Avx2 => unsafe { self.fill_row_avx2(p, row) },
            #[cfg(target_arch = "x86_64")]
            Set::Avx512 if simd.unless_nondefault_mode() == simd => unsafe {
                self.fill_row_avx512_cvt(p, row)
            },
            #[cfg(target_arch = "x86_64")]
            Set::Avx512 => unsafe { self.fill_row_avx512(p, row) },
        }
    }

    /// The same loops compiled for AVX2: eight lanes of the integer kernel per
    /// instruction. Same operations, same bits; only the instruction selection differs.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn fill_row_avx2(&self, p: u32, row: &mut [f32]) {
        self.fill_row_portable::<false>(p, row);
    }

    /// [`RowKernel::fill_row_avx2`] with the sin/cos float32 assembly by VCVTDQ2PS
    /// (`sincos_bits_as`), where the integer form's leading-zero count has no AVX2
    /// instruction: the same bits in the SSE mode's default, which [`RowKernel::fill_row`]
    /// checks.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn fill_row_avx2_cvt(&self, p: u32, row: &mut [f32]) {
        self.fill_row_portable::<true>(p, row);
    }

    /// The same loops compiled for AVX-512: sixteen lanes, and the float32 assembly's
    /// leading zeros in one instruction (VPLZCNTD), which AVX2 lacks (the table twice as
    /// fast as with AVX2 on a Zen 5, 2026-11-28). Same operations, same bits: for threads
    /// in another SSE mode than the default.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512cd,avx512vl,avx512bw")]
    fn fill_row_avx512(&self, p: u32, row: &mut [f32]) {
        self.fill_row_portable::<false>(p, row);
    }

    /// [`RowKernel::fill_row_avx512`] with the float32 assembly by VCVTDQ2PS, as
    /// [`RowKernel::fill_row_avx2_cvt`]: faster than VPLZCNTD's integer form on AVX-512
    /// too (the 2048 x 4096 table in 14 % less time on an AMD EPYC with AVX-512,
    /// 2026-12-05);
    /// the same bits in the SSE mode's default, which [`RowKernel::fill_row`] checks.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512cd,avx512vl,avx512bw")]
    fn fill_row_avx512_cvt(&self, p: u32, row: &mut [f32]) {
        self.fill_row_portable::<true>(p, row);
    }

    #[inline(always)]
    fn fill_row_portable<const CVT: bool>(&self, p: u32, row: &mut [f32]) {
        let r = p.wrapping_add(self.start);
        let carry = r < p;
        match self.frequencies {
            Frequencies::Exact => {
                let phase = |&[lo, hi]: &[u32; 2]| phase_turns_u33(r, carry, lo, hi);
                self.place::<CVT>(row, phase);
            }
            Frequencies::F32 => {
                let steps = &self.pairs()[self.n_freqs..];
                let (mp, ep) = u33_to_f32_parts(r, carry);
                let phase = |&[w, _]: &[u32; 2]| {
                    f32_angle_phase(f32_product_parts(mp, ep, w), steps, exact::F32_STEP_BIAS)
                };
                self.place::<CVT>(row, phase);
            }
        }
    }

    /// Writes sin and cos of each frequency's phase into their columns.
    #[inline(always)]
    fn place<const CVT: bool>(&self, row: &mut [f32], phase: impl Fn(&[u32; 2]) -> u32) {
        let c = self.cols;
        let n_cos = c.n_cos as usize;
        let bits = |f: &[u32; 2]| sincos_bits_as::<CVT>(phase(f));
        if c.stride == 2 {
            // Interleaved: [sin, cos] pairs, then a lone sin when dim is odd.
            let (paired, rest) = row.split_at_mut(2 * n_cos);
            let pairs: &mut [[f32; 2]] = bytemuck::cast_slice_mut(paired);
            for (pair, f) in pairs.iter_mut().zip(self.freqs()) {
                let (s, c) = bits(f);
                *pair = [f32::from_bits(s), f32::from_bits(c)];
            }
            if let (Some(last), Some(f)) = (rest.first_mut(), self.freqs().get(n_cos)) {
                *last = f32::from_bits(bits(f).0);
            }
        } else {
            let (sin, tail) = row.split_at_mut(c.cos_offset as usize);
            let (cos, zero) = tail.split_at_mut(n_cos);
            for ((k, s), f) in sin.iter_mut().enumerate().zip(self.freqs()) {
                let (sb, cb) = bits(f);
                *s = f32::from_bits(sb);
                if let Some(c) = cos.get_mut(k) {
                    *c = f32::from_bits(cb);
                }
            }
            zero.fill(0.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Variant;

    /// A thread whose SSE mode rounds otherwise (or flushes) gets the portable loops' bits:
    /// the AVX2 and AVX-512 rows' conversion form is for the default mode only.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn rows_keep_their_bits_in_another_sse_mode() {
        let rows = RowKernel::new(&PeSpec::new(1026).unwrap().with_base(500_000.0).unwrap());
        let positions = [0u32, 1, 3, 1000, 123_457, 1 << 31, u32::MAX];
        let fill = |simd: Simd| -> Vec<Vec<u32>> {
            positions
                .iter()
                .map(|&p| {
                    let mut row = vec![0f32; 1026];
                    rows.fill_row(simd, p, &mut row);
                    row.iter().map(|v| v.to_bits()).collect()
                })
                .collect()
        };
        let want = fill(Simd::PORTABLE);
        // Every set this CPU runs: an AVX-512 host checks AVX2's arm too.
        for simd in Simd::all_here() {
            crate::simd::in_other_sse_modes(|bits| {
                assert!(fill(simd) == want, "{simd:?}, MXCSR bits {bits:#x}");
            });
        }
    }

    #[test]
    fn every_instruction_set_gives_the_portable_loops_bits() {
        let specs = [
            PeSpec::new(1026).unwrap().with_base(500_000.0).unwrap(),
            PeSpec::for_variant(Variant::DistilBert, 1025).unwrap(),
            PeSpec::for_variant(Variant::Fairseq, 1025).unwrap().with_start_index(7),
            PeSpec::new(1026).unwrap().with_frequencies(Frequencies::F32),
        ];
        let sets = Simd::all_here();
        for spec in specs {
            let rows = RowKernel::new(&spec);
            let dim = spec.dim() as usize;
            for p in [0u32, 1, 2, 12345, 1 << 24, (1 << 31) + 7, u32::MAX] {
                let mut want = vec![1f32; dim];
                rows.fill_row(Simd::PORTABLE, p, &mut want);
                for &simd in &sets {
                    let mut got = vec![2f32; dim];
                    rows.fill_row(simd, p, &mut got);
                    let same = got.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "{spec:?} position {p}: {simd:?}");
                }
            }
        }
    }
}
