//! CPU twin of `shaders/encode.wgsl`: the fused gather + positional-encoding add,
//! multi-threaded, with the same per-element arithmetic and conversions as the shader.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use half::{bf16, f16};
use ndarray::{Array2, Array3, ArrayView2, ArrayViewMut3};
use rayon::prelude::*;

use super::convert::{bf16_to_f32_bits, f16_to_f32_bits, f32_to_bf16_bits, f32_to_f16_bits};
use crate::encode::{self, Dtype, Embeddings, EncodeOptions, Encoded};
use crate::error::{Error, Result};
use crate::spec::PeSpec;

/// Most bytes the cache of PE rows for positions `0..n` may hold per [`Encoder`].
pub const PE_CACHE_BUDGET: usize = 64 << 20;

/// Tokens per rayon task: enough work to amortise scheduling.
const TOKENS_PER_TASK: usize = 8;

/// `out[b, t, :] = scale * E[ids[b, t], :] + PE(positions[b, t], :)`, multi-threaded.
/// Bit-identical to the GPU path when `options.scale` is [`encode::Scale::None`]. A one-off
/// call: an [`Encoder`] keeps PE rows between calls.
///
/// ```
/// use ndarray::{Array2, array};
/// use posenc::{PeSpec, cpu, encode::{EncodeOptions, Embeddings}};
///
/// let spec = PeSpec::new(4)?;
/// let table = Array2::<f32>::ones((10, 4));
/// let ids = array![[3u32, 7]];
/// let positions = posenc::positions::contiguous_batch(1, 2);
/// let out = cpu::encode(&spec, Embeddings::F32(table.view()), ids.view(), positions.view(),
///                       &EncodeOptions::default())?;
/// let out = out.into_f32().unwrap();
/// assert_eq!(out[[0, 0, 1]], 2.0); // 1 + cos(0)
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// # Errors
/// Before any work: [`Error::Shape`] if the table's dim is not the spec's or the
/// positions' shape is not the ids'; [`Error::TokenId`] for the first id `>= vocab`;
/// [`Error::InvalidParameter`] for a NaN or infinite scale.
pub fn encode(
    spec: &PeSpec,
    table: Embeddings<'_>,
    ids: ArrayView2<'_, u32>,
    positions: ArrayView2<'_, u32>,
    options: &EncodeOptions,
) -> Result<Encoded> {
    Encoder::new(*spec).encode(table, ids, positions, options)
}

/// A CPU encoder for one spec that keeps the PE rows of positions `0..n` between calls
/// (they are a pure function of position), growing them as positions grow. `Sync`: share
/// one between threads.
#[derive(Debug)]
pub struct Encoder {
    spec: PeSpec,
    cache: Mutex<Option<Arc<Array2<f32>>>>,
}

impl Encoder {
    /// An encoder with an empty cache.
    pub fn new(spec: PeSpec) -> Self {
        Self { spec, cache: Mutex::new(None) }
    }

    /// The spec this encoder adds.
    pub fn spec(&self) -> &PeSpec {
        &self.spec
    }

    /// Drops the cached PE rows.
    pub fn clear_cache(&self) {
        if let Ok(mut c) = self.cache.lock() {
            *c = None;
        }
    }

    /// Like [`encode()`], allocating the output in `options.out_dtype`.
    ///
    /// # Errors
    /// As [`encode()`].
    pub fn encode(
        &self,
        table: Embeddings<'_>,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
    ) -> Result<Encoded> {
        let scale = encode::check(&self.spec, table.dim(), ids, positions, options)?;
        let shape = (ids.nrows(), ids.ncols(), self.spec.dim() as usize);
        let (pe, slots) = self.pe_rows(positions);
        let pe = pe.as_slice().expect("PE rows are contiguous");
        Ok(allocate_and_fill(shape, options.out_dtype, |out| {
            fill(table, ids, pe, &slots, options.pad_id, scale, out)
        }))
    }

    /// Like [`Encoder::encode`] with f32 output, written into `out` (shape
    /// `[batch, len, dim]`, standard layout): no allocation per call.
    ///
    /// # Errors
    /// As [`encode()`]; [`Error::Shape`] if `out` has another shape or is not in standard
    /// layout; [`Error::InvalidParameter`] naming `out_dtype` unless `options.out_dtype` is
    /// f32.
    pub fn encode_into(
        &self,
        table: Embeddings<'_>,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
        mut out: ArrayViewMut3<'_, f32>,
    ) -> Result<()> {
        let scale = encode::check(&self.spec, table.dim(), ids, positions, options)?;
        if options.out_dtype != Dtype::F32 {
            return Err(Error::InvalidParameter {
                field: "out_dtype",
                value: format!("{:?}", options.out_dtype),
                allowed: "F32 for encode_into",
            });
        }
        let (batch, len) = ids.dim();
        let expected = (batch, len, self.spec.dim() as usize);
        let actual = out.dim();
        let Some(flat) = out.as_slice_mut().filter(|_| actual == expected) else {
            return Err(Error::Shape {
                op: "encode_into",
                what: "output (standard layout)",
                expected: format!("{expected:?}"),
                actual: format!("{actual:?}"),
            });
        };
        self.run(table, ids, positions, options.pad_id, scale, flat)
    }

    /// PE rows for the positions of a call and each token's row index among them: the
    /// cached rows `0..n` when every position is below a budgeted `n`, else fresh rows for
    /// the distinct positions.
    fn pe_rows(&self, positions: ArrayView2<'_, u32>) -> (Arc<Array2<f32>>, Vec<u32>) {
        let dim = self.spec.dim() as usize;
        let needed = positions.iter().copied().max().map_or(0, |p| p as usize + 1);
        let cap_rows = PE_CACHE_BUDGET / (dim * 4);
        if needed > 0
            && needed <= cap_rows
            && let Ok(mut slot) = self.cache.lock()
        {
            let rows = match slot.as_ref() {
                Some(rows) if rows.nrows() >= needed => Arc::clone(rows),
                _ => {
                    let n = needed.next_power_of_two().min(cap_rows) as u32;
                    let rows = Arc::new(super::table(&self.spec, &(0..n).collect::<Vec<_>>()));
                    *slot = Some(Arc::clone(&rows));
                    rows
                }
            };
            return (rows, positions.iter().copied().collect());
        }
        let (unique, slots) = encode::unique_positions(positions);
        (Arc::new(super::table(&self.spec, &unique)), slots)
    }

    fn run(
        &self,
        table: Embeddings<'_>,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        pad_id: Option<u32>,
        scale: Option<f32>,
        out: &mut [f32],
    ) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let (pe, slots) = self.pe_rows(positions);
        let pe = pe.as_slice().expect("PE rows are contiguous");
        fill(table, ids, pe, &slots, pad_id, scale, OutSlice::F32(out));
        Ok(())
    }
}

/// `out[b, t, :] = scale * E[ids[b, t], :] + P[positions[b, t], :]` with a learned position
/// table `P` `[max_positions, dim]` (BERT and GPT-2 style) instead of a sinusoid. `P` is
/// widened to f32 exactly; bit-identical to [`crate::gpu::Context::encode_learned`] when the
/// scale is [`encode::Scale::None`].
///
/// ```
/// use ndarray::{Array2, array};
/// use posenc::{cpu, encode::{EncodeOptions, Embeddings}};
///
/// let table = Array2::<f32>::ones((10, 4));
/// let learned = Array2::<f32>::from_shape_fn((16, 4), |(p, _)| p as f32);
/// let out = cpu::encode_learned(Embeddings::F32(learned.view()), Embeddings::F32(table.view()),
///                               array![[3u32, 7]].view(), array![[0u32, 5]].view(),
///                               &EncodeOptions::default())?;
/// assert_eq!(out.into_f32().unwrap()[[0, 1, 2]], 6.0);
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// # Errors
/// As [`encode()`], and [`Error::Position`] for the first position `>= max_positions`, all
/// before any work.
pub fn encode_learned(
    position_table: Embeddings<'_>,
    table: Embeddings<'_>,
    ids: ArrayView2<'_, u32>,
    positions: ArrayView2<'_, u32>,
    options: &EncodeOptions,
) -> Result<Encoded> {
    let scale = encode::check_learned(position_table.dim(), table.dim(), ids, positions, options)?;
    let shape = (ids.nrows(), ids.ncols(), position_table.dim().1);
    let pe = position_table.to_f32();
    let pe = pe.as_slice().expect("a new array is contiguous");
    let slots: Vec<u32> = positions.iter().copied().collect();
    Ok(allocate_and_fill(shape, options.out_dtype, |out| {
        fill(table, ids, pe, &slots, options.pad_id, scale, out)
    }))
}

/// An output of `shape` in `dtype`, filled by `fill`.
fn allocate_and_fill(
    shape: (usize, usize, usize),
    dtype: Dtype,
    fill: impl FnOnce(OutSlice<'_>),
) -> Encoded {
    match dtype {
        Dtype::F32 => {
            let mut out = Array3::<f32>::zeros(shape);
            fill(OutSlice::F32(flat_mut(&mut out)));
            Encoded::F32(out)
        }
        Dtype::F16 => {
            let mut out = Array3::<f16>::zeros(shape);
            fill(OutSlice::F16(flat_mut(&mut out)));
            Encoded::F16(out)
        }
        Dtype::Bf16 => {
            let mut out = Array3::<bf16>::zeros(shape);
            fill(OutSlice::Bf16(flat_mut(&mut out)));
            Encoded::Bf16(out)
        }
    }
}

/// An output buffer in one of the storage types.
enum OutSlice<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [f16]),
    Bf16(&'a mut [bf16]),
}

/// The fused gather + add over PE rows `pe` (`slots[token]` names each token's row).
fn fill(
    table: Embeddings<'_>,
    ids: ArrayView2<'_, u32>,
    pe: &[f32],
    slots: &[u32],
    pad_id: Option<u32>,
    scale: Option<f32>,
    out: OutSlice<'_>,
) {
    let dim = table.dim().1;
    let ids: Cow<'_, [u32]> = match ids.to_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(ids.iter().copied().collect()),
    };
    if dim == 0 || ids.is_empty() {
        return;
    }
    let job = Job { dim, ids: &ids, slots, pe, pad_id, scale };
    macro_rules! run {
        ($a:expr) => {
            match out {
                OutSlice::F32(o) => job.fill(&row_major(&$a), o),
                OutSlice::F16(o) => job.fill(&row_major(&$a), o),
                OutSlice::Bf16(o) => job.fill(&row_major(&$a), o),
            }
        };
    }
    match table {
        Embeddings::F32(a) => run!(a),
        Embeddings::F16(a) => run!(a),
        Embeddings::Bf16(a) => run!(a),
    }
}

fn flat_mut<T>(a: &mut Array3<T>) -> &mut [T] {
    a.as_slice_mut().expect("a new array is contiguous")
}

fn row_major<'a, T: Clone>(a: &ArrayView2<'a, T>) -> Cow<'a, [T]> {
    match a.to_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(a.iter().cloned().collect()),
    }
}

/// A table element decoded to f32 bits exactly as the shader decodes it.
trait TableElem: Copy + Sync {
    fn f32_bits(self) -> u32;
}

impl TableElem for f32 {
    #[inline(always)]
    fn f32_bits(self) -> u32 {
        self.to_bits()
    }
}

impl TableElem for f16 {
    #[inline(always)]
    fn f32_bits(self) -> u32 {
        f16_to_f32_bits(u32::from(self.to_bits()))
    }
}

impl TableElem for bf16 {
    #[inline(always)]
    fn f32_bits(self) -> u32 {
        bf16_to_f32_bits(u32::from(self.to_bits()))
    }
}

/// An output element rounded from f32 bits exactly as the shader rounds it.
trait OutElem: Copy + Send + Default {
    fn from_f32_bits(bits: u32) -> Self;
}

impl OutElem for f32 {
    #[inline(always)]
    fn from_f32_bits(bits: u32) -> Self {
        f32::from_bits(bits)
    }
}

impl OutElem for f16 {
    #[inline(always)]
    fn from_f32_bits(bits: u32) -> Self {
        f16::from_bits(f32_to_f16_bits(bits) as u16)
    }
}

impl OutElem for bf16 {
    #[inline(always)]
    fn from_f32_bits(bits: u32) -> Self {
        bf16::from_bits(f32_to_bf16_bits(bits) as u16)
    }
}

struct Job<'a> {
    dim: usize,
    ids: &'a [u32],
    slots: &'a [u32],
    pe: &'a [f32],
    pad_id: Option<u32>,
    scale: Option<f32>,
}

impl Job<'_> {
    fn fill<T: TableElem, O: OutElem>(&self, table: &[T], out: &mut [O]) {
        let dim = self.dim;
        out.par_chunks_mut(dim * TOKENS_PER_TASK).enumerate().for_each(|(task, rows)| {
            for (k, row) in rows.chunks_exact_mut(dim).enumerate() {
                let token = task * TOKENS_PER_TASK + k;
                let id = self.ids[token];
                if self.pad_id == Some(id) {
                    row.fill(O::default());
                    continue;
                }
                let src = &table[id as usize * dim..][..dim];
                let pe = &self.pe[self.slots[token] as usize * dim..][..dim];
                // Separate loops so each one vectorises; the arithmetic is the shader's.
                match self.scale {
                    None => {
                        for ((o, &e), &p) in row.iter_mut().zip(src).zip(pe) {
                            *o = O::from_f32_bits((f32::from_bits(e.f32_bits()) + p).to_bits());
                        }
                    }
                    Some(s) => {
                        for ((o, &e), &p) in row.iter_mut().zip(src).zip(pe) {
                            *o = O::from_f32_bits((f32::from_bits(e.f32_bits()) * s + p).to_bits());
                        }
                    }
                }
            }
        });
    }
}
