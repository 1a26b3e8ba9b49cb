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
        let (batch, len) = ids.dim();
        let shape = (batch, len, self.spec.dim() as usize);
        Ok(match options.out_dtype {
            Dtype::F32 => {
                let mut out = Array3::<f32>::zeros(shape);
                self.run(table, ids, positions, options.pad_id, scale, flat_mut(&mut out))?;
                Encoded::F32(out)
            }
            Dtype::F16 => {
                let mut out = Array3::<f16>::zeros(shape);
                self.run(table, ids, positions, options.pad_id, scale, flat_mut(&mut out))?;
                Encoded::F16(out)
            }
            Dtype::Bf16 => {
                let mut out = Array3::<bf16>::zeros(shape);
                self.run(table, ids, positions, options.pad_id, scale, flat_mut(&mut out))?;
                Encoded::Bf16(out)
            }
        })
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

    fn run<O: OutElem>(
        &self,
        table: Embeddings<'_>,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        pad_id: Option<u32>,
        scale: Option<f32>,
        out: &mut [O],
    ) -> Result<()> {
        let dim = self.spec.dim() as usize;
        if out.is_empty() {
            return Ok(());
        }
        let (pe, slots) = self.pe_rows(positions);
        let pe = pe.as_slice().expect("PE rows are contiguous");
        let ids: Cow<'_, [u32]> = match ids.to_slice() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(ids.iter().copied().collect()),
        };
        let job = Job { dim, ids: &ids, slots: &slots, pe, pad_id, scale };
        match table {
            Embeddings::F32(a) => job.fill(&row_major(&a), out),
            Embeddings::F16(a) => job.fill(&row_major(&a), out),
            Embeddings::Bf16(a) => job.fill(&row_major(&a), out),
        }
        Ok(())
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
