//! CPU twin of `shaders/encode.wgsl`: the fused gather + positional-encoding add, with the
//! same per-element arithmetic and conversions as the shader. Small calls (decode steps)
//! run on the calling thread, larger ones in rayon tasks; the row loop is compiled for
//! AVX-512 and AVX2 besides the baseline and picked at run time, with the same bits.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use half::{bf16, f16};
use ndarray::{Array2, Array3, ArrayView2, ArrayViewMut3};
use rayon::prelude::*;

use super::convert::{
    bf16_to_f32_bits, f16_to_f32_bits_branchless, f32_to_bf16_bits, f32_to_f16_bits,
};
use super::table::RowKernel;
use crate::alloc;
use crate::encode::{self, Dtype, Element, Embeddings, EncodeOptions, Encoded};
use crate::error::{Error, Result};
use crate::simd::{Set, Simd};
use crate::spec::PeSpec;

/// Most bytes the cache of PE rows for positions `0..n` may hold per [`Encoder`].
pub const PE_CACHE_BUDGET: usize = 64 << 20;

/// Output elements up to which a call runs on the calling thread. Handing work to rayon
/// from outside the pool wakes a worker and waits for it: 40 to 80 us when the pool is
/// asleep, more than a whole decode step (16 tokens of 2560: 2 to 3 us). Measured on 2
/// cores (1 x L x 4096, bf16 table, f32 out): with the pool awake two threads overtake
/// one between 1 and 2 MiB of output (2 MiB: 40-50 against 51 us; 4 MiB: 93-100 against
/// 151-166 us), while with the pool asleep one thread still wins at 8 MiB (431 against
/// 467 us). 2^19 elements (2 MiB of f32) sits at the first crossover.
const SERIAL_MAX_ELEMENTS: usize = 1 << 19;

/// Output bytes per rayon task. Measured at the bench shapes, tasks of 32 KiB (the old 8
/// rows of 1024 f32) cost 10 to 20 % more than 256 KiB ones and 1 MiB ones were no
/// faster; 256 KiB still gives a 32 MiB output 128 tasks to balance between threads.
const TASK_BYTES: usize = 256 << 10;

/// How many tokens ahead the table row is prefetched. 1, 2, 4 and 8 measured alike, all
/// about 10 % faster than no prefetch at the bench shapes (35 % at bert-base's); two rows
/// (0.2 to 2 us of work each) cover a DRAM miss with room to spare.
const PREFETCH_AHEAD: usize = 2;

/// `out[b, t, :] = scale * E[ids[b, t], :] + PE(positions[b, t], :)`, multi-threaded.
/// Bit-identical to the GPU path when `options.scale` is [`encode::Scale::None`]. A one-off
/// call that keeps nothing: it computes the PE rows its tokens need, each token's row
/// beside its output row where the call has no more tokens than the rows `0..=max
/// position` (one sequence, a decode step), else those rows once (past 64 MiB of them, the
/// rows of its distinct positions); an [`Encoder`] keeps PE rows between calls.
///
/// ```
/// use ndarray::{Array2, array};
/// use posenc::{PeSpec, cpu, encode::{EncodeOptions, Embeddings}};
///
/// let spec = PeSpec::new(4)?;
/// let table = Array2::<f32>::ones((10, 4));
/// let ids = array![[3u32, 7]];
/// let positions = posenc::positions::contiguous_batch(1, 2)?;
/// let out = cpu::encode(&spec, Embeddings::F32(table.view()), ids.view(), positions.view(),
///                       &EncodeOptions::default())?;
/// let out = out.into_f32().unwrap();
/// assert_eq!(out[[0, 0, 1]], 2.0); // 1 + cos(0)
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// A table in standard (row-major) order is read in place; of one in other strides (a
/// transposed or broadcast view) a call gathers the tokens' rows where there are fewer tokens
/// than rows, else copies the whole table into that order, every call.
///
/// # Errors
/// Before any work: [`Error::Shape`] if the table's dim is not the spec's or the
/// positions' shape is not the ids'; [`Error::TooLarge`] for an output `[batch, len, dim]`
/// no array can hold; [`Error::InvalidParameter`] for a NaN or infinite scale; then
/// [`Error::Alloc`] if the output cannot be allocated, at once, before the ids are read;
/// [`Error::TokenId`] for the first id `>= vocab`; [`Error::Alloc`] if a buffer the call
/// sizes (a copy of a view not in standard order, the distinct positions, their PE rows)
/// cannot be had, before the output is written.
pub fn encode(
    spec: &PeSpec,
    table: Embeddings<'_>,
    ids: ArrayView2<'_, u32>,
    positions: ArrayView2<'_, u32>,
    options: &EncodeOptions,
) -> Result<Encoded> {
    Encoder::one_off(spec.clone()).encode(table, ids, positions, options)
}

/// A CPU encoder for one spec that keeps the PE rows of positions `0..n` between calls
/// (they are a pure function of position), growing them as positions grow. `Sync`: share
/// one between threads.
#[derive(Debug)]
pub struct Encoder {
    spec: PeSpec,
    cache: Mutex<Option<Arc<Array2<f32>>>>,
    /// The encoder of one call ([`encode()`]): it keeps no rows, so it computes only what
    /// the call needs, and each token's row in turn where that is no more work.
    one_off: bool,
}

impl Encoder {
    /// An encoder with an empty cache.
    pub fn new(spec: PeSpec) -> Self {
        Self { spec, cache: Mutex::new(None), one_off: false }
    }

    /// An encoder for one call, as [`encode()`] makes: it keeps no PE rows, so it computes
    /// only the rows its call needs (each token's in turn beside its output row, where that
    /// is no more work). For [`Encoder::encode_into`] a caller's array once; an encoder
    /// kept for many calls is [`Encoder::new`]'s.
    pub fn one_off(spec: PeSpec) -> Self {
        Self { one_off: true, ..Self::new(spec) }
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
        let dim = self.spec.dim() as usize;
        let scale = encode::check_shapes(dim, table.dim(), ids, positions, options)?;
        // The output before the loop over the ids: an output the memory cannot hold is
        // refused at once, not after a pass over every token.
        let mut out = allocate((ids.nrows(), ids.ncols(), dim), options.out_dtype)?;
        encode::check_ids(ids, table.dim().0, options.pad_id)?;
        self.run(table, ids, positions, options.pad_id, scale, out_slice(&mut out))?;
        Ok(out)
    }

    /// Like [`Encoder::encode`], written into `out` (shape `[batch, len, dim]`, standard
    /// layout) of the output type `T` (f32, f16 or bf16, which `options.out_dtype` must
    /// name): no output allocation per call. Positions below the encoder's PE cache
    /// (64 MiB of rows: 4096 at D = 4096) are served from it; a call with a larger
    /// position computes the PE rows of its distinct positions, each token's row beside
    /// its output row when no two tokens share a position.
    ///
    /// ```
    /// use half::bf16;
    /// use ndarray::{Array2, Array3, array};
    /// use posenc::encode::{Dtype, EncodeOptions, Embeddings};
    ///
    /// let encoder = posenc::cpu::Encoder::new(posenc::PeSpec::new(4)?);
    /// let table = Array2::<bf16>::from_elem((10, 4), bf16::ONE);
    /// let options = EncodeOptions { out_dtype: Dtype::Bf16, ..Default::default() };
    /// let mut out = Array3::<bf16>::from_elem((1, 2, 4), bf16::ZERO);
    /// let positions = posenc::positions::contiguous_batch(1, 2)?;
    /// encoder.encode_into(Embeddings::Bf16(table.view()), array![[3u32, 7]].view(),
    ///                     positions.view(), &options, out.view_mut())?;
    /// assert_eq!(out[[0, 0, 1]], bf16::from_f32(2.0)); // 1 + cos(0)
    /// # Ok::<(), posenc::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`encode()`]; [`Error::Shape`] if `out` has another shape or is not in standard
    /// layout; [`Error::InvalidParameter`] naming `out_dtype` unless `options.out_dtype` is
    /// `T`'s type.
    pub fn encode_into<T: Element>(
        &self,
        table: Embeddings<'_>,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
        mut out: ArrayViewMut3<'_, T>,
    ) -> Result<()> {
        let scale = encode::check(&self.spec, table.dim(), ids, positions, options)?;
        if options.out_dtype != T::DTYPE {
            return Err(Error::InvalidParameter {
                field: "out_dtype",
                value: format!("{:?}", options.out_dtype),
                allowed: "the element type of the output array",
            });
        }
        let (batch, len) = ids.dim();
        let expected = (batch, len, self.spec.dim() as usize);
        let actual = out.dim();
        // The right shape in another layout is named as such ("expected (3, 5, 4), got
        // (3, 5, 4)" said nothing, round twelve).
        let strides = format!("{:?}", out.strides());
        let Some(flat) = out.as_slice_mut().filter(|_| actual == expected) else {
            let actual = match actual == expected {
                true => format!("{actual:?} with strides {strides}, not standard layout"),
                false => format!("{actual:?}"),
            };
            return Err(Error::Shape {
                op: "encode_into",
                what: "output (standard layout)",
                expected: format!("{expected:?}"),
                actual,
            });
        };
        // T is f32, f16 or bf16 (the trait is sealed), and DTYPE says which.
        let out = match T::DTYPE {
            Dtype::F32 => OutSlice::F32(bytemuck::cast_slice_mut(flat)),
            Dtype::F16 => OutSlice::F16(bytemuck::cast_slice_mut(flat)),
            Dtype::Bf16 => OutSlice::Bf16(bytemuck::cast_slice_mut(flat)),
        };
        self.run(table, ids, positions, options.pad_id, scale, out)
    }

    /// The PE values of a call's positions: the cached rows `0..n` when every position is
    /// below a budgeted `n` (the positions themselves are then the indices, borrowed when
    /// contiguous), else fresh rows for the distinct positions, or, where that computes
    /// no more rows, each token's row computed in turn beside its output row.
    ///
    /// A row per token costs the same sin/cos work as a table row and no table: at
    /// llama3-8b's 1 x 2048 x 4096, 33.5 MB neither written, faulted in, nor read back.
    /// Within the cache's budget the one-off encoder takes it whenever the call has no more
    /// tokens than the rows `0..n` a table would hold (one sequence, a decode step: 8
    /// tokens at positions near 500 against 512 rows), and rows `0..n` exactly otherwise,
    /// since it keeps nothing; past the budget both encoders compute the rows of the
    /// distinct positions, or a row per token when every position is distinct. An
    /// [`Encoder`] keeps rows `0..n` for its next calls.
    ///
    /// Every buffer sized by the call (a copy of the positions, the distinct positions,
    /// their rows) is allocated fallibly: [`Error::Alloc`] where memory runs out.
    fn pe_rows<'p>(&self, positions: ArrayView2<'p, u32>) -> Result<PeRows<'p>> {
        let dim = self.spec.dim() as usize;
        // In u64: position 2^32 - 1 needs 2^32 rows, past a 32-bit usize (wasm32).
        let needed = positions.iter().copied().max().map_or(0, |p| u64::from(p) + 1);
        let tokens = positions.len() as u64;
        let per_token = || {
            Ok(PeRows::PerToken {
                kernel: RowKernel::new(&self.spec),
                positions: row_major(&positions, "positions")?,
            })
        };
        let cap_rows = (PE_CACHE_BUDGET / (dim * 4)) as u64;
        if self.one_off && tokens <= needed && needed <= cap_rows {
            return per_token();
        }
        if needed > 0
            && needed <= cap_rows
            && let Ok(mut slot) = self.cache.lock()
        {
            let rows = match slot.as_ref() {
                Some(rows) if rows.nrows() as u64 >= needed => Arc::clone(rows),
                _ if self.one_off => {
                    Arc::new(pe_table(&self.spec, &(0..needed as u32).collect::<Vec<_>>())?)
                }
                _ => {
                    let n = needed.next_power_of_two().min(cap_rows) as u32;
                    let rows = Arc::new(pe_table(&self.spec, &(0..n).collect::<Vec<_>>())?);
                    *slot = Some(Arc::clone(&rows));
                    rows
                }
            };
            return Ok(PeRows::Table { rows, slots: row_major(&positions, "positions")? });
        }
        let (unique, slots) = encode::unique_positions(positions)?;
        if unique.len() as u64 == tokens {
            return per_token();
        }
        Ok(PeRows::Table {
            rows: Arc::new(pe_table(&self.spec, &unique)?),
            slots: Cow::Owned(slots),
        })
    }

    fn run(
        &self,
        table: Embeddings<'_>,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        pad_id: Option<u32>,
        scale: Option<f32>,
        out: OutSlice<'_>,
    ) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let pe = self.pe_rows(positions)?;
        fill(table, ids, pe.source(), pad_id, scale, out)
    }
}

/// The PE rows of `positions`, allocated fallibly.
fn pe_table(spec: &PeSpec, positions: &[u32]) -> Result<Array2<f32>> {
    let mut rows = alloc::try_zeros("PE rows", (positions.len(), spec.dim() as usize))?;
    super::table_into(spec, positions, rows.view_mut())?;
    Ok(rows)
}

/// `out[b, t, :] = scale * E[ids[b, t], :] + P[positions[b, t], :]` with a learned position table
/// `P` `[max_positions, dim]` (BERT and GPT-2 style) instead of a sinusoid. `P` is widened to f32
/// exactly; bit-identical to [`crate::gpu::Context::encode`] (given the position table) when the
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
/// As [`encode()`], and [`Error::Position`] for the first position `>= max_positions`
/// (after the ids' check), all before the output is written.
pub fn encode_learned(
    position_table: Embeddings<'_>,
    table: Embeddings<'_>,
    ids: ArrayView2<'_, u32>,
    positions: ArrayView2<'_, u32>,
    options: &EncodeOptions,
) -> Result<Encoded> {
    let (max_positions, dim) = position_table.dim();
    let scale = encode::check_shapes(dim, table.dim(), ids, positions, options)?;
    let mut out = allocate((ids.nrows(), ids.ncols(), dim), options.out_dtype)?;
    encode::check_ids(ids, table.dim().0, options.pad_id)?;
    encode::check_positions(positions, max_positions)?;
    if out_slice(&mut out).is_empty() {
        return Ok(out);
    }
    let slots = row_major(&positions, "positions")?;
    // The whole table widened once, or, for fewer tokens than rows, the tokens' own rows:
    // the same values either way, without a table's worth of work (or memory, for a broadcast
    // view of billions of rows) per call of a few tokens.
    let (pe, slots) = if slots.len() < max_positions && u32::try_from(slots.len()).is_ok() {
        let mut pe = alloc::try_zeros::<f32, _>("the position rows in f32", (slots.len(), dim))?;
        for (k, &p) in slots.iter().enumerate() {
            position_table.widen_row_into(p as usize, pe.row_mut(k));
        }
        let mut own = alloc::try_zeroed_vec::<u32>("positions", slots.len())?;
        for (k, slot) in own.iter_mut().enumerate() {
            // k < slots.len(), which fits a u32.
            *slot = k as u32;
        }
        (pe, Cow::Owned(own))
    } else {
        let mut pe = alloc::try_zeros::<f32, _>("the position table in f32", (max_positions, dim))?;
        position_table.widen_into(&mut pe);
        (pe, slots)
    };
    let pe = pe.as_slice().expect("a new array is contiguous");
    fill(
        table,
        ids,
        PeSource::Rows { pe, slots: &slots },
        options.pad_id,
        scale,
        out_slice(&mut out),
    )?;
    Ok(out)
}

/// A call's PE values, owned: rows and each token's row among them, or each token's row
/// computed as the fill comes to it.
enum PeRows<'p> {
    Table { rows: Arc<Array2<f32>>, slots: Cow<'p, [u32]> },
    PerToken { kernel: RowKernel, positions: Cow<'p, [u32]> },
}

impl PeRows<'_> {
    fn source(&self) -> PeSource<'_> {
        match self {
            PeRows::Table { rows, slots } => {
                PeSource::Rows { pe: rows.as_slice().expect("PE rows are contiguous"), slots }
            }
            PeRows::PerToken { kernel, positions } => PeSource::PerToken { kernel, positions },
        }
    }
}

/// Where the fill finds each token's PE row.
#[derive(Clone, Copy)]
enum PeSource<'a> {
    /// Row `slots[token]` of `pe` (rows of `dim`).
    Rows { pe: &'a [f32], slots: &'a [u32] },
    /// Computed from `positions[token]` into a row of the task's own, just before the
    /// token's output row is written: the same values as a table row (the same code).
    PerToken { kernel: &'a RowKernel, positions: &'a [u32] },
}

/// A zeroed output of `shape` in `dtype`, allocated fallibly ([`Error::Alloc`]).
fn allocate(shape: (usize, usize, usize), dtype: Dtype) -> Result<Encoded> {
    const WHAT: &str = "the encode's output";
    Ok(match dtype {
        Dtype::F32 => Encoded::F32(alloc::try_zeros(WHAT, shape)?),
        Dtype::F16 => Encoded::F16(alloc::try_zeros(WHAT, shape)?),
        Dtype::Bf16 => Encoded::Bf16(alloc::try_zeros(WHAT, shape)?),
    })
}

/// The elements of a new output.
fn out_slice(out: &mut Encoded) -> OutSlice<'_> {
    match out {
        Encoded::F32(a) => OutSlice::F32(flat_mut(a)),
        Encoded::F16(a) => OutSlice::F16(flat_mut(a)),
        Encoded::Bf16(a) => OutSlice::Bf16(flat_mut(a)),
    }
}

/// An output buffer in one of the storage types.
enum OutSlice<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [f16]),
    Bf16(&'a mut [bf16]),
}

impl OutSlice<'_> {
    fn is_empty(&self) -> bool {
        match self {
            OutSlice::F32(o) => o.is_empty(),
            OutSlice::F16(o) => o.is_empty(),
            OutSlice::Bf16(o) => o.is_empty(),
        }
    }
}

/// The fused gather + add over the PE rows `pe` gives.
fn fill(
    table: Embeddings<'_>,
    ids: ArrayView2<'_, u32>,
    pe: PeSource<'_>,
    pad_id: Option<u32>,
    scale: Option<f32>,
    out: OutSlice<'_>,
) -> Result<()> {
    let dim = table.dim().1;
    if dim == 0 || ids.is_empty() {
        return Ok(());
    }
    // Copies (of views not in standard order) before anything is written.
    let ids = row_major(&ids, "ids")?;
    macro_rules! run {
        ($a:expr) => {{
            // A table in other strides: only the tokens' rows where they are fewer than the
            // table's, else all of it, in standard order.
            let gathered = gather_rows(&$a, &ids, pad_id)?;
            let (table, job) = match &gathered {
                Some((rows, renumbered)) => {
                    let pad_id = pad_id.map(|_| GATHERED_PAD);
                    (Cow::Borrowed(&rows[..]), Job { dim, ids: renumbered, pe, pad_id, scale })
                }
                None => {
                    let table = row_major(&$a, "the embedding table")?;
                    (table, Job { dim, ids: &ids, pe, pad_id, scale })
                }
            };
            match out {
                OutSlice::F32(o) => job.fill(&table, o),
                OutSlice::F16(o) => job.fill(&table, o),
                OutSlice::Bf16(o) => job.fill(&table, o),
            }
        }};
    }
    match table {
        Embeddings::F32(a) => run!(a),
        Embeddings::F16(a) => run!(a),
        Embeddings::Bf16(a) => run!(a),
    }
    Ok(())
}

fn flat_mut<T>(a: &mut Array3<T>) -> &mut [T] {
    a.as_slice_mut().expect("a new array is contiguous")
}

/// The id a gathered table's pad tokens are renumbered to: past every gathered row (there
/// are fewer than the table's rows, at most 2^32 - 1 of them).
const GATHERED_PAD: u32 = u32::MAX;

/// For a table not in standard order with fewer tokens than rows: the tokens' rows, in token
/// order (a pad token's left zero, never read), and the ids renumbered to them (`k` for
/// token `k`, [`GATHERED_PAD`] for a pad token), so that a call reads the rows it needs and
/// not the whole table (a Fortran-order table of 100000 x 1024 was copied whole for three
/// tokens: 591 ms a call, against 2.3 ms in standard order). `None` for a table in standard
/// order (read in place) or with no more rows than tokens (copied whole: no more bytes).
/// The ids were checked against the table's rows.
fn gather_rows<T: Copy + bytemuck::Zeroable>(
    a: &ArrayView2<'_, T>,
    ids: &[u32],
    pad_id: Option<u32>,
) -> Result<Option<(Vec<T>, Vec<u32>)>> {
    let (rows, dim) = a.dim();
    if a.is_standard_layout() || ids.len() >= rows {
        return Ok(None);
    }
    // At most the output's elements, which were allocated before.
    let mut gathered = alloc::try_zeroed_vec("the embedding table's rows", ids.len() * dim)?;
    let mut renumbered = alloc::try_zeroed_vec("ids", ids.len())?;
    for (k, (&id, new)) in ids.iter().zip(&mut renumbered).enumerate() {
        if pad_id == Some(id) {
            *new = GATHERED_PAD;
            continue;
        }
        // k < rows <= 2^32, and never GATHERED_PAD: fewer tokens than rows.
        *new = k as u32;
        let row = a.row(id as usize);
        for (g, v) in gathered[k * dim..][..dim].iter_mut().zip(row) {
            *g = *v;
        }
    }
    Ok(Some((gathered, renumbered)))
}

/// The elements of `a` in row-major order: borrowed when it is in standard order, else
/// copied into a buffer allocated fallibly ([`Error::Alloc`] naming `what`: a broadcast
/// view may describe far more elements than it holds).
pub(crate) fn row_major<'a, T: Clone + bytemuck::Zeroable>(
    a: &ArrayView2<'a, T>,
    what: &'static str,
) -> Result<Cow<'a, [T]>> {
    if let Some(s) = a.to_slice() {
        return Ok(Cow::Borrowed(s));
    }
    let mut copy = alloc::try_zeroed_vec(what, a.len())?;
    for (c, v) in copy.iter_mut().zip(a) {
        *c = v.clone();
    }
    Ok(Cow::Owned(copy))
}

/// A table element decoded to f32 bits exactly as the shader decodes it.
trait TableElem: Element {
    fn f32_bits(self) -> u32;

    /// `src[j..j + 8]` widened to f32, each to the bits of [`TableElem::f32_bits`]: for
    /// [`add_row_f16c`]'s groups, into which it is inlined (where the features are on).
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C, the thread's SSE mode must be the default (f16's
    /// VCVTPH2PS), and `j + 8 <= src.len()`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn widen8(src: &[Self], j: usize) -> std::arch::x86_64::__m256;

    /// Whether [`TableElem::add_row_avx512`] may take `src`: never, unless the type has a
    /// faster vector decode than the fused loop's.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, BW and VL.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn plain_avx512(_src: &[Self]) -> bool {
        false
    }

    /// [`add_row`] for a row [`TableElem::plain_avx512`] accepted: the same bits.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, BW and VL and F16C, and `plain_avx512(src)` must hold.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn add_row_avx512<O: OutElem>(
        out: &mut [O],
        src: &[Self],
        pe: &[f32],
        scale: Option<f32>,
    ) {
        add_row(out, src, pe, scale);
    }
}

impl TableElem for f32 {
    #[inline(always)]
    fn f32_bits(self) -> u32 {
        self.to_bits()
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn widen8(src: &[Self], j: usize) -> std::arch::x86_64::__m256 {
        // SAFETY: the caller keeps the 32-byte load inside `src` and guarantees AVX.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(src.as_ptr().add(j)) }
    }
}

// f16 is the one table type whose decode is real work: 14 vector instructions per 16
// values in the branch-free integer form, against one VCVTPH2PS. With AVX-512 a row of
// zeros and normal numbers takes the instruction (2.0 against 3.0 us for 16 tokens of
// 2560); any other row the integer form.
impl TableElem for f16 {
    #[inline(always)]
    fn f32_bits(self) -> u32 {
        f16_to_f32_bits_branchless(u32::from(self.to_bits()))
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn widen8(src: &[Self], j: usize) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm256_cvtph_ps};
        // SAFETY: the caller keeps the 16-byte load inside `src` and guarantees F16C and the
        // default SSE mode, in which VCVTPH2PS widens every half as `f32_bits` does (an
        // exhaustive test).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(src.as_ptr().add(j).cast::<__m128i>())) }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn plain_avx512(src: &[Self]) -> bool {
        // SAFETY: the caller guarantees AVX-512 F/BW/VL.
        unsafe { f16_plain_avx512(bytemuck::cast_slice(src)) }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn add_row_avx512<O: OutElem>(
        out: &mut [O],
        src: &[Self],
        pe: &[f32],
        scale: Option<f32>,
    ) {
        // SAFETY: the caller guarantees AVX-512 F and F16C, and that every value is a zero
        // or a normal number.
        unsafe { f16_add_row_avx512(out, bytemuck::cast_slice(src), pe, scale) }
    }
}

impl TableElem for bf16 {
    #[inline(always)]
    fn f32_bits(self) -> u32 {
        bf16_to_f32_bits(u32::from(self.to_bits()))
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn widen8(src: &[Self], j: usize) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::{
            __m128i, _mm_loadu_si128, _mm256_castsi256_ps, _mm256_cvtepu16_epi32, _mm256_slli_epi32,
        };
        // SAFETY: the caller keeps the 16-byte load inside `src` and guarantees AVX2. A
        // bf16 is the top half of its f32.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(j).cast::<__m128i>());
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
        }
    }
}

/// Whether every f16 of `src` is a zero or a normal number: the values whose conversion
/// by VCVTPH2PS is exact and cannot depend on anything (a normal f16 is a normal f32). A
/// subnormal, whose conversion could depend on MXCSR.DAZ, and an infinity or NaN (the
/// instruction quietens a signalling NaN) are left to the integer form.
///
/// # Safety
/// The CPU must have AVX-512 F and BW.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn f16_plain_avx512(src: &[u16]) -> bool {
    use std::arch::x86_64::{
        __m512i, _mm512_and_si512, _mm512_cmpge_epu16_mask, _mm512_cmplt_epu16_mask,
        _mm512_loadu_si512, _mm512_max_epu16, _mm512_min_epu16, _mm512_set1_epi16,
        _mm512_setzero_si512, _mm512_sub_epi16,
    };
    // On magnitudes `a`: infinities and NaNs are `a >= 0x7c00`, subnormals `a - 1 < 0x3ff`
    // (wrapping, so a zero becomes 0xffff and passes). One max and one min over the slice
    // tell whether any value is either.
    let special = |w: u16| {
        let a = w & 0x7fff;
        a >= 0x7c00 || a.wrapping_sub(1) < 0x3ff
    };
    let magnitude = _mm512_set1_epi16(0x7fff);
    let one = _mm512_set1_epi16(1);
    let mut max = _mm512_setzero_si512();
    let mut min_less_one = _mm512_set1_epi16(-1);
    let wide = src.len() / 32 * 32;
    for i in (0..wide).step_by(32) {
        // SAFETY: `i + 32 <= src.len()` keeps the 64-byte load inside `src`.
        let h = unsafe { _mm512_loadu_si512(src.as_ptr().add(i).cast::<__m512i>()) };
        let a = _mm512_and_si512(h, magnitude);
        max = _mm512_max_epu16(max, a);
        min_less_one = _mm512_min_epu16(min_less_one, _mm512_sub_epi16(a, one));
    }
    _mm512_cmpge_epu16_mask(max, _mm512_set1_epi16(0x7c00)) == 0
        && _mm512_cmplt_epu16_mask(min_less_one, _mm512_set1_epi16(0x3ff)) == 0
        && !src[wide..].iter().any(|&w| special(w))
}

/// [`add_row`] for f16 words that are all zeros or normal numbers, 16 at a time: VCVTPH2PS
/// gives each the bits of `f16_to_f32_bits` (an exhaustive test checks it), then the same
/// f32 multiply and add, unfused, and the same rounding to `O` as the scalar loop.
///
/// # Safety
/// The CPU must have AVX-512 F and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,f16c")]
unsafe fn f16_add_row_avx512<O: OutElem>(
    out: &mut [O],
    src: &[u16],
    pe: &[f32],
    scale: Option<f32>,
) {
    use std::arch::x86_64::{
        __m256i, __m512, _mm256_loadu_si256, _mm512_add_ps, _mm512_cvtph_ps, _mm512_loadu_ps,
        _mm512_mul_ps, _mm512_set1_ps, _mm512_storeu_ps,
    };
    /// The groups of 16 in `0..groups`, `op` combining each decoded group with its PE
    /// values. A function per arithmetic, so the choice is not made per group.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F and F16C; `groups` is at most each slice's length.
    #[inline(always)]
    unsafe fn each_group<O: OutElem>(
        out: &mut [O],
        src: &[u16],
        pe: &[f32],
        groups: usize,
        op: impl Fn(__m512, __m512) -> __m512,
    ) {
        let mut sum = [0f32; 16];
        for j in (0..groups).step_by(16) {
            // SAFETY: `j + 16 <= groups` keeps the 32-byte and 64-byte loads inside `src`
            // and `pe`; the store fills `sum`; the caller guarantees the features.
            unsafe {
                let h = _mm256_loadu_si256(src.as_ptr().add(j).cast::<__m256i>());
                let p = _mm512_loadu_ps(pe.as_ptr().add(j));
                _mm512_storeu_ps(sum.as_mut_ptr(), op(_mm512_cvtph_ps(h), p));
            }
            for (o, &v) in out[j..j + 16].iter_mut().zip(&sum) {
                *o = O::from_f32_bits(v.to_bits());
            }
        }
    }
    let n = out.len().min(src.len()).min(pe.len());
    let groups = n / 16 * 16;
    // SAFETY: the caller guarantees the features; `groups <= n`.
    unsafe {
        match scale {
            None => each_group(out, src, pe, groups, |e, p| _mm512_add_ps(e, p)),
            Some(s) => {
                let s = _mm512_set1_ps(s);
                each_group(out, src, pe, groups, |e, p| _mm512_add_ps(_mm512_mul_ps(e, s), p));
            }
        }
    }
    let tail: &[f16] = bytemuck::cast_slice(&src[groups..n]);
    add_row(&mut out[groups..n], tail, &pe[groups..n], scale);
}

/// An output element rounded from f32 bits exactly as the shader rounds it.
trait OutElem: Element + Default {
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

/// One call's gather: `out[token] = scale * table[ids[token]] + PE row of the token`.
struct Job<'a> {
    dim: usize,
    ids: &'a [u32],
    pe: PeSource<'a>,
    pad_id: Option<u32>,
    scale: Option<f32>,
}

impl Job<'_> {
    /// Fills `out` (one row of `dim` per token): on the calling thread when the call is
    /// small, else in rayon tasks of whole rows.
    fn fill<T: TableElem, O: OutElem>(&self, table: &[T], out: &mut [O]) {
        let isa = Simd::detect();
        if out.len() <= SERIAL_MAX_ELEMENTS {
            self.fill_rows(isa, 0, table, out);
            return;
        }
        let per_task = (TASK_BYTES / (self.dim * size_of::<O>())).max(1);
        out.par_chunks_mut(self.dim * per_task)
            .enumerate()
            .for_each(|(task, rows)| self.fill_rows(isa, task * per_task, table, rows));
    }

    /// Fills `rows`, the rows of tokens `first..`, compiled for `isa`. Same operations,
    /// same bits in every version: integer conversions, one f32 add (after one f32
    /// multiply with a scale), never fused; only the instruction selection differs.
    fn fill_rows<T: TableElem, O: OutElem>(
        &self,
        isa: Simd,
        first: usize,
        table: &[T],
        rows: &mut [O],
    ) {
        match isa.set() {
            Set::Portable => self.fill_rows_with::<T, O, false>(isa, first, table, rows),
            // SAFETY: a `Simd` names a set this CPU runs (see its type); its AVX-512
            // includes F16C.
            #[cfg(target_arch = "x86_64")]
            Set::Avx2 => unsafe { self.fill_rows_avx2(isa, first, table, rows) },
            #[cfg(target_arch = "x86_64")]
            Set::Avx512 => unsafe { self.fill_rows_avx512(isa, first, table, rows) },
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
    fn fill_rows_avx512<T: TableElem, O: OutElem>(
        &self,
        isa: Simd,
        first: usize,
        table: &[T],
        rows: &mut [O],
    ) {
        self.fill_rows_with::<T, O, true>(isa, first, table, rows);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    fn fill_rows_avx2<T: TableElem, O: OutElem>(
        &self,
        isa: Simd,
        first: usize,
        table: &[T],
        rows: &mut [O],
    ) {
        self.fill_rows_with::<T, O, false>(isa, first, table, rows);
    }

    /// The row loop. `AVX512` is true only when called from [`Job::fill_rows_avx512`],
    /// that is on a CPU with AVX-512 F/BW/VL and F16C; `isa` computes PE rows.
    #[inline(always)]
    fn fill_rows_with<T: TableElem, O: OutElem, const AVX512: bool>(
        &self,
        isa: Simd,
        first: usize,
        table: &[T],
        rows: &mut [O],
    ) {
        let dim = self.dim;
        // F16C's conversions: on a set with F16C (any but the baseline), and in the SSE
        // mode's default only, read here, on the thread that runs these rows (each
        // thread has its own; read only where f16 is involved).
        #[cfg(target_arch = "x86_64")]
        let f16c_mode = (O::DTYPE == Dtype::F16 || T::DTYPE == Dtype::F16)
            && isa.set() != Set::Portable
            && isa.unless_nondefault_mode() == isa;
        // Rows through F16C group by group (`add_row_f16c`): into f16 output from every
        // table type, and from f16 tables into every output type. With f16 output rounded
        // per value by integers the encode took 1.4 - 2.1x as long as with f32 output; f16
        // tables widened per value by integers took 1.3 - 1.5x as long into f32 output,
        // 2.5 - 4x into f16 (gpt2 and bert-base, 2 AVX2 cores, 2026-12-04,
        // docs/performance.md). On AVX-512 an f16 table's rows into f32 and
        // bf16 output keep that set's sixteen-wide rows (`f16_add_row_avx512`; this path
        // against it not timed), whose rounding to bf16 is the integer one per value.
        #[cfg(target_arch = "x86_64")]
        let f16c = f16c_mode && (O::DTYPE == Dtype::F16 || !AVX512);
        // The task's own PE row, where rows are computed per token: one row of f32, in
        // the core's L1 or L2 cache between its write and the add that reads it.
        let mut computed =
            if matches!(self.pe, PeSource::PerToken { .. }) { vec![0f32; dim] } else { Vec::new() };
        for (k, row) in rows.chunks_exact_mut(dim).enumerate() {
            let token = first + k;
            // A pad id may lie past the table; it has no row to fetch.
            if let Some(next) = self
                .ids
                .get(token + PREFETCH_AHEAD)
                .and_then(|&id| table.get(id as usize * dim..).and_then(|rest| rest.get(..dim)))
            {
                prefetch(next);
            }
            let id = self.ids[token];
            if self.pad_id == Some(id) {
                row.fill(O::default());
                continue;
            }
            let src = &table[id as usize * dim..][..dim];
            let pe = match self.pe {
                PeSource::Rows { pe, slots } => &pe[slots[token] as usize * dim..][..dim],
                PeSource::PerToken { kernel, positions } => {
                    kernel.fill_row(isa, positions[token], &mut computed);
                    &computed[..]
                }
            };
            // SAFETY: `f16c` holds only on a set with AVX2 and F16C (`Simd::detect`), on
            // this thread in the default SSE mode.
            #[cfg(target_arch = "x86_64")]
            if f16c {
                unsafe { add_row_f16c(row, src, pe, self.scale) };
                continue;
            }
            // SAFETY (both calls): `AVX512` is set only on a CPU with the features, and
            // the second call only for a row the first accepted.
            #[cfg(target_arch = "x86_64")]
            if AVX512 && unsafe { T::plain_avx512(src) } {
                unsafe { T::add_row_avx512(row, src, pe, self.scale) };
                continue;
            }
            add_row(row, src, pe, self.scale);
        }
    }
}

/// `out = scale * e + p` elementwise, rounded to `O`: the shader's arithmetic. Separate
/// loops with and without a scale so each one vectorises.
#[inline(always)]
fn add_row<T: TableElem, O: OutElem>(out: &mut [O], src: &[T], pe: &[f32], scale: Option<f32>) {
    match scale {
        None => {
            for ((o, &e), &p) in out.iter_mut().zip(src).zip(pe) {
                *o = O::from_f32_bits((f32::from_bits(e.f32_bits()) + p).to_bits());
            }
        }
        Some(s) => {
            for ((o, &e), &p) in out.iter_mut().zip(src).zip(pe) {
                *o = O::from_f32_bits((f32::from_bits(e.f32_bits()) * s + p).to_bits());
            }
        }
    }
}

/// [`add_row`] eight values at a time with AVX2 and F16C, for f16 on either side: each
/// group widened to f32 by [`TableElem::widen8`] (VCVTPH2PS for an f16 table), scaled and
/// added unfused, and stored as `O` rounds (f16 by VCVTPS2PH, bf16 by its integer rounding
/// eight-wide, a bf16 group with a NaN sum by the integer loop, f32 as it is); the tail
/// goes by the integer loop. The bits of the integer loop (tests exhaustive over f16 and
/// bf16 tables, over f32 tables by the rounding's low bits): in the SSE mode's default
/// VCVTPH2PS widens subnormals and infinities exactly, and a signalling NaN it quietens is
/// quietened the same way, its payload kept, by the add that the integer loop's NaN goes
/// through; VCVTPS2PH rounds every f32 as `f32_to_f16_bits` does (an exhaustive test in
/// `cpu::rope`). (Which of two NaN operands an add returns is the
/// compiler's choice in the integer loop too: payloads are not promised.) Unlike the
/// integer rounding, VCVTPS2PH sets MXCSR's sticky overflow and underflow flags.
///
/// Rounding to f16 per value by integers took the encode with f16 output 1.4 - 2.1x as long
/// as with f32 output; widening f16 tables per value by integers, into f16 output, 2.5 - 4x
/// as long as this loop (gpt2 and bert-base, 2 AVX2 cores, 2026-12-04, docs/performance.md).
///
/// # Safety
/// The CPU must have AVX2 and F16C, and the thread's SSE mode must be the default
/// ([`Simd::unless_nondefault_mode`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn add_row_f16c<T: TableElem, O: OutElem>(
    out: &mut [O],
    src: &[T],
    pe: &[f32],
    scale: Option<f32>,
) {
    use std::arch::x86_64::{
        __m128i, __m256, _CMP_UNORD_Q, _mm_packus_epi32, _mm_storeu_si128, _mm256_add_epi32,
        _mm256_add_ps, _mm256_and_si256, _mm256_castps_si256, _mm256_castsi256_si128,
        _mm256_cmp_ps, _mm256_cvtps_ph, _mm256_extracti128_si256, _mm256_loadu_ps,
        _mm256_movemask_ps, _mm256_mul_ps, _mm256_set1_epi32, _mm256_set1_ps, _mm256_srli_epi32,
        _mm256_storeu_ps,
    };
    /// Stores the eight sums `v` at `out[j..j + 8]` rounded to `O` as `O::from_f32_bits`
    /// rounds each; false (nothing stored) for a bf16 group holding a NaN.
    ///
    /// # Safety
    /// As [`add_row_f16c`]'s; `j + 8 <= out.len()`.
    #[inline(always)]
    unsafe fn store<O: OutElem>(out: &mut [O], j: usize, v: __m256) -> bool {
        // SAFETY: the caller keeps the 16- or 32-byte store inside `out` and guarantees the
        // features and the mode.
        unsafe {
            let at = out.as_mut_ptr().add(j);
            match O::DTYPE {
                Dtype::F32 => _mm256_storeu_ps(at.cast::<f32>(), v),
                Dtype::F16 => _mm_storeu_si128(at.cast::<__m128i>(), _mm256_cvtps_ph::<0>(v)),
                Dtype::Bf16 => {
                    if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v)) != 0 {
                        return false;
                    }
                    // f32_to_bf16_bits of a number: (b + 0x7fff + ((b >> 16) & 1)) >> 16.
                    let b = _mm256_castps_si256(v);
                    let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(b), _mm256_set1_epi32(1));
                    let r = _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb);
                    let r = _mm256_srli_epi32::<16>(r);
                    let packed = _mm_packus_epi32(
                        _mm256_castsi256_si128(r),
                        _mm256_extracti128_si256::<1>(r),
                    );
                    _mm_storeu_si128(at.cast::<__m128i>(), packed);
                }
            }
        }
        true
    }
    /// The groups of eight in `0..groups`, `op` combining each widened group with its PE
    /// values; a function per arithmetic, so the choice is not made per group.
    ///
    /// # Safety
    /// As [`add_row_f16c`]'s; `groups` is a multiple of 8 and at most each slice's length.
    #[inline(always)]
    unsafe fn each_group<T: TableElem, O: OutElem>(
        out: &mut [O],
        src: &[T],
        pe: &[f32],
        groups: usize,
        scale: Option<f32>,
        op: impl Fn(__m256, __m256) -> __m256,
    ) {
        for j in (0..groups).step_by(8) {
            // SAFETY: `j + 8 <= groups` keeps the accesses of eight elements inside `src`,
            // `pe` and `out`; the caller guarantees the features and the mode.
            let done = unsafe {
                let e = T::widen8(src, j);
                store(out, j, op(e, _mm256_loadu_ps(pe.as_ptr().add(j))))
            };
            if !done {
                add_row(&mut out[j..j + 8], &src[j..j + 8], &pe[j..j + 8], scale);
            }
        }
    }
    let n = out.len().min(src.len()).min(pe.len());
    let groups = n / 8 * 8;
    // SAFETY: the caller guarantees the features and the mode; `groups <= n`.
    unsafe {
        match scale {
            None => each_group(out, src, pe, groups, scale, |e, p| _mm256_add_ps(e, p)),
            Some(s) => {
                let m = _mm256_set1_ps(s);
                each_group(out, src, pe, groups, scale, |e, p| {
                    _mm256_add_ps(_mm256_mul_ps(e, m), p)
                });
            }
        }
    }
    add_row(&mut out[groups..n], &src[groups..n], &pe[groups..n], scale);
}

/// Asks the CPU to start loading `row` into cache: the first line of each 4 KiB page it
/// spans, and its last line. Random token ids make every row a fresh page, and the cost
/// of a gather is mostly the page walk and first miss of each page, which the hardware
/// prefetcher, working within a page, cannot start early; once a page's first line has
/// arrived it streams the rest. A hint only: no effect on any value, and nothing on
/// targets without a stable prefetch instruction.
#[inline(always)]
fn prefetch<T>(row: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        const PAGE: usize = 4096;
        let bytes = size_of_val(row);
        let start = row.as_ptr().cast::<i8>();
        let mut offset = 0;
        while offset < bytes {
            // SAFETY: a prefetch never faults and changes no memory; the address lies
            // inside `row` besides.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.add(offset)) };
            offset += PAGE;
        }
        if bytes > 0 {
            // SAFETY: as above; `bytes - 1` is the row's last byte.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.add(bytes - 1)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::f16_to_f32_bits;

    /// The reference: one element at a time, the shader's operations spelled out.
    fn reference<T: TableElem, O: OutElem>(job: &Job<'_>, table: &[T]) -> Vec<O> {
        let dim = job.dim;
        let mut out = vec![O::default(); job.ids.len() * dim];
        for (token, row) in out.chunks_exact_mut(dim).enumerate() {
            let id = job.ids[token];
            if job.pad_id == Some(id) {
                continue;
            }
            let pe = match job.pe {
                PeSource::Rows { pe, slots } => pe[slots[token] as usize * dim..][..dim].to_vec(),
                PeSource::PerToken { kernel, positions } => {
                    let mut pe = vec![0f32; dim];
                    kernel.fill_row(Simd::PORTABLE, positions[token], &mut pe);
                    pe
                }
            };
            for (j, o) in row.iter_mut().enumerate() {
                let e = f32::from_bits(table[id as usize * dim + j].f32_bits());
                let p = pe[j];
                let v = match job.scale {
                    None => e + p,
                    Some(s) => e * s + p,
                };
                *o = O::from_f32_bits(v.to_bits());
            }
        }
        out
    }

    fn isas() -> Vec<Simd> {
        let isas = Simd::all_here();
        #[cfg(target_arch = "x86_64")]
        if isas.last().map(|s| s.set()) != Some(Set::Avx512) {
            eprintln!("SKIP: no AVX-512 here; its row loop is not tested");
        }
        isas
    }

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 32) as u32
        }
    }

    /// Table words: mostly random finite values, and in every third row the values the
    /// fast paths must hand to the integer form (zeros, subnormals, infinities, NaNs of
    /// both kinds) among ordinary ones.
    fn words(rng: &mut Rng, vocab: usize, dim: usize, specials: &[u32], finite: u32) -> Vec<u32> {
        (0..vocab * dim)
            .map(|k| {
                let row = k / dim;
                if row % 3 == 1 && rng.next().is_multiple_of(4) {
                    specials[rng.next() as usize % specials.len()]
                } else {
                    // Random sign and mantissa; the exponent kept finite.
                    let w = rng.next() & finite;
                    if w & 0x7f80_0000 == 0x7f80_0000 { w ^ 0x4000_0000 } else { w }
                }
            })
            .collect()
    }

    fn check_every_isa<T: TableElem + std::fmt::Debug + PartialEq>(name: &str, table: &[T]) {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for dim in [1usize, 2, 18, 100, 1040] {
            let vocab = table.len() / 1040;
            let table = &table[..vocab * dim];
            let tokens = 37;
            let ids: Vec<u32> = (0..tokens).map(|_| rng.next() % (vocab as u32 + 2)).collect();
            let slots: Vec<u32> = (0..tokens).map(|_| rng.next() % 5).collect();
            let positions: Vec<u32> = (0..tokens)
                .map(|k| match k % 4 {
                    0 => rng.next(),
                    1 => u32::MAX - k as u32,
                    _ => rng.next() % 4096,
                })
                .collect();
            let pe: Vec<f32> = (0..5 * dim).map(|k| (k as f32 * 0.37).sin() * 1.5 + 1e-3).collect();
            for (pad_id, scale) in [
                (Some(vocab as u32), None),
                (Some(vocab as u32 + 1), Some(32.0f32.sqrt())),
                (Some(ids[3]), Some(-0.75)),
                (None, None),
            ] {
                // Ids past the table that are not the pad id would be refused upstream.
                let ids: Vec<u32> = ids
                    .iter()
                    .map(|&id| if id as usize >= vocab { pad_id.unwrap_or(0) } else { id })
                    .collect();
                // PE rows from a table, and (where the sinusoid has this dim: an even
                // one) computed per token.
                let kernel = PeSpec::new(dim as u32).ok().map(|spec| RowKernel::new(&spec));
                let mut sources = vec![PeSource::Rows { pe: &pe, slots: &slots }];
                if let Some(kernel) = &kernel {
                    sources.push(PeSource::PerToken { kernel, positions: &positions });
                }
                for pe in sources {
                    let job = Job { dim, ids: &ids, pe, pad_id, scale };
                    macro_rules! compare {
                        ($o:ty) => {
                            let want: Vec<$o> = reference(&job, table);
                            for &isa in &isas() {
                                let mut got = vec![<$o>::default(); want.len()];
                                job.fill_rows(isa, 0, table, &mut got);
                                let same =
                                    got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits());
                                assert!(
                                    same,
                                    "{name} -> {} dim {dim} {isa:?} pad {pad_id:?} scale {scale:?}",
                                    stringify!($o)
                                );
                                // The rows of tokens `first..` land where they belong.
                                let first = 5;
                                let mut part = vec![<$o>::default(); want.len() - first * dim];
                                job.fill_rows(isa, first, table, &mut part);
                                let same = part
                                    .iter()
                                    .zip(&want[first * dim..])
                                    .all(|(g, w)| g.to_bits() == w.to_bits());
                                assert!(
                                    same,
                                    "{name} -> {} dim {dim} {isa:?} from token {first}",
                                    stringify!($o)
                                );
                            }
                        };
                    }
                    compare!(f32);
                    compare!(f16);
                    compare!(bf16);
                }
            }
        }
    }

    /// A thread whose SSE mode is not the default keeps the integer rounding of f16
    /// output: with overflow unmasked, VCVTPS2PH of 70000 would be a SIGFPE (ending this
    /// test binary); the integer rounding gives infinity. The mode is the thread's own, so
    /// the call stays on it (one row, below the pool's threshold).
    #[cfg(target_arch = "x86_64")]
    #[test]
    #[allow(deprecated)]
    fn f16_output_in_another_sse_mode_keeps_the_integer_rounding() {
        std::thread::spawn(|| {
            use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
            let (dim, vocab) = (24, 3);
            let table = vec![7.0e4f32; vocab * dim];
            let pe = vec![1.0f32; dim];
            let (ids, slots) = (vec![1u32], vec![0u32]);
            let job = Job {
                dim,
                ids: &ids,
                pe: PeSource::Rows { pe: &pe, slots: &slots },
                pad_id: None,
                scale: None,
            };
            let mut out = vec![f16::ZERO; dim];
            // SAFETY: this thread's own MXCSR, restored before it ends.
            let default = unsafe { _mm_getcsr() };
            // SAFETY: as above; bit 10 is overflow's mask.
            unsafe { _mm_setcsr(default & !(1 << 10)) };
            job.fill(&table, &mut out);
            // And from an f16 table (its own path): 60000 times 2 overflows too.
            let halves = vec![f16::from_f32(6.0e4); vocab * dim];
            let doubled = Job { scale: Some(2.0), ..job };
            let mut from_halves = vec![f16::ZERO; dim];
            doubled.fill(&halves, &mut from_halves);
            // SAFETY: as above.
            unsafe { _mm_setcsr(default) };
            assert!(out.iter().all(|h| h.to_bits() == 0x7c00), "{out:?}");
            assert!(from_halves.iter().all(|h| h.to_bits() == 0x7c00), "{from_halves:?}");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn every_instruction_set_gives_the_reference_bits() {
        let mut rng = Rng(7);
        let (vocab, dim) = (12, 1040);
        let f32_specials =
            [0, 0x8000_0000, 1, 0x807f_ffff, 0x7f80_0000, 0xff80_0000, 0x7fc0_0001, 0x7f80_0001];
        let f32s: Vec<f32> = words(&mut rng, vocab, dim, &f32_specials, 0xbfff_ffff)
            .into_iter()
            .map(f32::from_bits)
            .collect();
        check_every_isa("f32", &f32s);
        let half_specials = [0, 0x8000, 1, 0x83ff, 0x0200, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfd00];
        let f16s: Vec<f16> = words(&mut rng, vocab, dim, &half_specials, 0xbfff)
            .into_iter()
            .map(|w| f16::from_bits(w as u16))
            .collect();
        check_every_isa("f16", &f16s);
        let bf16_specials = [0, 0x8000, 1, 0x807f, 0x7f80, 0xff80, 0x7fc1, 0x7f81];
        let bf16s: Vec<bf16> = words(&mut rng, vocab, dim, &bf16_specials, 0xbfff)
            .into_iter()
            .map(|w| bf16::from_bits(w as u16))
            .collect();
        check_every_isa("bf16", &bf16s);
    }

    /// A table in other strides gives the bits of its standard-order copy: with fewer tokens
    /// than rows only their rows are gathered (pads included, renumbered past them), with
    /// as many or more it is copied whole.
    #[test]
    fn tables_in_other_strides_give_the_bits_of_standard_order() {
        use ndarray::Array2;
        let spec = PeSpec::new(6).unwrap();
        let c = Array2::from_shape_fn((9, 6), |(r, k)| (r * 6 + k) as f32 * 0.37 - 4.0);
        let fortran = c.t().as_standard_layout().into_owned().reversed_axes();
        assert!(!fortran.is_standard_layout());
        for (ids, pad_id) in [
            (ndarray::array![[3u32, 8, 3], [0, 5, 7]], None),
            (ndarray::array![[3u32, 8, 3], [0, 5, 7]], Some(3)),
            (ndarray::array![[1u32, 2, 4, 6, 8], [0, 3, 5, 7, 8]], Some(0)),
        ] {
            let positions = crate::positions::contiguous_batch(2, ids.ncols()).unwrap();
            for out_dtype in [Dtype::F32, Dtype::Bf16] {
                let options = EncodeOptions { out_dtype, pad_id, ..Default::default() };
                let run = |table: ndarray::ArrayView2<'_, f32>| {
                    encode(&spec, Embeddings::F32(table), ids.view(), positions.view(), &options)
                        .unwrap()
                };
                assert_eq!(run(fortran.view()), run(c.view()), "{ids:?} {pad_id:?}");
            }
        }
        // Gathered where there are fewer tokens than rows, not otherwise.
        let gathered = gather_rows(&fortran.view(), &[3, 8, 3], Some(8)).unwrap().unwrap();
        assert_eq!(gathered.1, [0, GATHERED_PAD, 2]);
        assert_eq!(&gathered.0[..6], c.row(3).as_slice().unwrap());
        assert!(gathered.0[6..12].iter().all(|&v| v == 0.0));
        assert!(gather_rows(&fortran.view(), &[0; 9], None).unwrap().is_none());
        assert!(gather_rows(&c.view(), &[0; 2], None).unwrap().is_none());
    }

    /// Every way a call's PE rows are found (the one-off encoder's row per token and exact
    /// table, an encoder's cache, distinct rows past the cache) gives the bits of the
    /// plain form: a table of every token's own row, gathered.
    #[test]
    fn every_source_of_pe_rows_gives_the_same_bits() {
        use ndarray::Array2;
        let vocab = 50;
        let far = u32::MAX - 3;
        let cases: Vec<(usize, Array2<u32>)> = vec![
            // One sequence: a row per token in the one-off encoder.
            (36, crate::positions::contiguous_batch(1, 40).unwrap()),
            // The same in rayon's tasks (more than 2^19 output values).
            (1024, crate::positions::contiguous_batch(1, 600).unwrap()),
            // A decode step near position 500: 3 rows per token against 500 in a table.
            (36, Array2::from_shape_vec((3, 1), vec![497, 500, 499]).unwrap()),
            // Sequences sharing positions: rows 0..n.
            (36, crate::positions::contiguous_batch(4, 9).unwrap()),
            // Past any cache, distinct: a row per token; repeated: distinct rows.
            (36, Array2::from_shape_vec((2, 2), vec![far, far + 1, 7, 0]).unwrap()),
            (36, Array2::from_shape_vec((2, 2), vec![far, far, far + 3, far + 3]).unwrap()),
        ];
        for (dim, positions) in &cases {
            let dim = *dim;
            let spec = PeSpec::new(dim as u32).expect("an even dim");
            let table =
                Array2::from_shape_fn((vocab, dim), |(r, c)| (r as f32 - 7.5) * 0.25 + c as f32);
            let ids =
                Array2::from_shape_fn(positions.dim(), |(b, t)| ((b * 13 + t * 7) % vocab) as u32);
            let flat: Vec<u32> = positions.iter().copied().collect();
            let rows = super::super::table(&spec, &flat);
            let own: Vec<u32> = (0..flat.len() as u32).collect();
            for (scale, pad_id) in [(None, None), (Some(8.0f32), Some(ids[[0, 0]]))] {
                for out_dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
                    let scale = scale.map_or(encode::Scale::None, encode::Scale::Value);
                    let options = EncodeOptions { out_dtype, pad_id, scale };
                    let factor = scale.factor(dim).expect("a finite scale");
                    let embeddings = Embeddings::F32(table.view());
                    let mut plain = allocate((ids.nrows(), ids.ncols(), dim), out_dtype).unwrap();
                    let pe = PeSource::Rows { pe: rows.as_slice().unwrap(), slots: &own };
                    fill(embeddings, ids.view(), pe, pad_id, factor, out_slice(&mut plain))
                        .unwrap();
                    let once = encode(&spec, embeddings, ids.view(), positions.view(), &options)
                        .expect("valid input");
                    let what = format!("dim {dim} {:?} {options:?}", positions.dim());
                    assert_eq!(once.bits(), plain.bits(), "one-off, {what}");
                    let encoder = Encoder::new(spec.clone());
                    for call in 0..2 {
                        let kept = encoder
                            .encode(embeddings, ids.view(), positions.view(), &options)
                            .expect("valid input");
                        assert_eq!(kept.bits(), plain.bits(), "encoder call {call}, {what}");
                    }
                }
            }
        }
    }

    /// An output no memory can hold (16 PiB here, within `isize::MAX` bytes) is
    /// `Error::Alloc` at once, before the loop over its 2^40 ids (which would take many
    /// minutes) or any copy of them; round five of the hostile probes found the process
    /// aborting on such a request.
    #[test]
    fn an_output_no_memory_can_hold_is_an_error_before_the_ids_are_read() {
        let spec = PeSpec::new(4096).expect("dim 4096");
        let table = ndarray::Array2::<f32>::zeros((3, 4096));
        let one = [1u32];
        let one = ArrayView2::from_shape((1, 1), &one).expect("one element");
        let many = one.broadcast((1 << 20, 1 << 20)).expect("a broadcast");
        let options = EncodeOptions::default();
        let refused = |r: Result<Encoded>| match r {
            Err(Error::Alloc { what: "the encode's output", bytes }) => assert_eq!(bytes, 1 << 54),
            other => panic!("{:?}", other.map(|o| o.dim())),
        };
        refused(encode(&spec, Embeddings::F32(table.view()), many, many, &options));
        let encoder = Encoder::new(spec.clone());
        refused(encoder.encode(Embeddings::F32(table.view()), many, many, &options));
        let learned = ndarray::Array2::<f32>::zeros((2, 4096));
        // The ids' conversion (Python's ids of any integer type) asks for 2^64 bytes.
        let one = [1i64];
        let one = ArrayView2::from_shape((1, 1), &one).expect("one element");
        let wide = one.broadcast((1 << 31, 1 << 31)).expect("a broadcast");
        match encode::ids_to_u32(wide, 3, None) {
            Err(Error::Alloc { what: "ids", .. }) => {}
            other => panic!("{:?}", other.map(|a| a.dim())),
        }
        refused(encode_learned(
            Embeddings::F32(learned.view()),
            Embeddings::F32(table.view()),
            many,
            many,
            &options,
        ));
    }

    /// PE values for the F16C loop's tests, one per table element: mostly ordinary, with
    /// NaNs and infinities as a learned table may hold, but a NaN only beside a table value
    /// that is not one (which of two NaN operands an add returns is the compiler's choice:
    /// payloads are not promised).
    #[cfg(target_arch = "x86_64")]
    fn pe_beside(is_nan: impl Fn(usize) -> bool, len: usize) -> Vec<f32> {
        (0..len)
            .map(|k| match k % 101 {
                7 | 8 if is_nan(k) => 0.5,
                7 => f32::from_bits(0x7fc0_0000 | (k as u32).wrapping_mul(7919) & 0x3f_ffff),
                8 => f32::from_bits(0xff80_0001 + (k as u32 & 0xffff)),
                9 => f32::INFINITY,
                10 => f32::NEG_INFINITY,
                _ => (k as f32 * 0.37).sin() * 1.5,
            })
            .collect()
    }

    /// [`add_row_f16c`] against the integer loop, `src` into every output type, with and
    /// without scales (finite, as `Scale` requires), one of which overflows to infinity.
    #[cfg(target_arch = "x86_64")]
    fn assert_f16c_loop_matches<T: TableElem>(src: &[T], pe: &[f32], what: &str) {
        for scale in [None, Some(3.0f32), Some(-0.1), Some(1.0e5), Some(f32::MIN_POSITIVE)] {
            macro_rules! compare {
                ($o:ty) => {
                    let mut want = vec![<$o>::default(); src.len()];
                    add_row(&mut want, src, pe, scale);
                    let mut got = vec![<$o>::default(); src.len()];
                    // SAFETY: the callers detected AVX2 (with F16C); the test thread's SSE
                    // mode is the default.
                    unsafe { add_row_f16c(&mut got, src, pe, scale) };
                    let diff = got.iter().zip(&want).position(|(g, w)| g.to_bits() != w.to_bits());
                    assert_eq!(diff, None, "{what} into {} scale {scale:?}", stringify!($o));
                };
            }
            compare!(f32);
            compare!(f16);
            compare!(bf16);
        }
    }

    /// f16 and bf16 tables through F16C give the integer loop's bits for every value into
    /// every output type, at every place of its group of eight (the values in order,
    /// shifted by 0 - 7, so each special value falls back with different neighbours), with
    /// PE values holding NaNs and infinities (bf16 output's groups holding a NaN sum take
    /// the integer loop).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn f16_and_bf16_tables_through_f16c_give_the_integer_bits() {
        if !Simd::avx2_here() {
            return;
        }
        let all: Vec<u16> = (0..=u16::MAX).collect();
        for shift in 0..8 {
            let halves: &[f16] = bytemuck::cast_slice(&all[shift..]);
            let pe = pe_beside(|k| halves[k].is_nan(), halves.len());
            assert_f16c_loop_matches(halves, &pe, &format!("f16 shift {shift}"));
            let brains: &[bf16] = bytemuck::cast_slice(&all[shift..]);
            let pe = pe_beside(|k| brains[k].is_nan(), brains.len());
            assert_f16c_loop_matches(brains, &pe, &format!("bf16 shift {shift}"));
        }
    }

    /// f32 tables through the same loop (into f16 output in the encode): every f32 whose
    /// low 13 bits are any of a few patterns (the ones f16's rounding reads: ties, just
    /// above and below), across all exponents and signs, and a spread of others.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn f32_tables_through_f16c_give_the_integer_bits() {
        if !Simd::avx2_here() {
            return;
        }
        let mut bits: Vec<u32> = Vec::new();
        for high in 0..(1u32 << 19) {
            for low in [0u32, 0x0fff, 0x1000, 0x1001, 0x1fff] {
                bits.push(high << 13 | low);
            }
        }
        bits.extend((0..1u32 << 20).map(|k| k.wrapping_mul(0x9e37_79b9)));
        let values: &[f32] = bytemuck::cast_slice(&bits);
        let pe = pe_beside(|k| values[k].is_nan(), values.len());
        assert_f16c_loop_matches(values, &pe, "f32");
        // And with zero PE values (-0.0 changes no sum), so the table's own rounding shows.
        let zeros = vec![-0.0f32; values.len()];
        assert_f16c_loop_matches(values, &zeros, "f32, PE -0");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_f16_instruction_path_gives_the_integer_bits_for_every_value_it_takes() {
        if Simd::widest_here().set() != Set::Avx512 {
            eprintln!("SKIP: no AVX-512 here");
            return;
        }
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let is_plain = |w: u16| {
            let a = w & 0x7fff;
            a == 0 || (0x0400..0x7c00).contains(&a)
        };
        // Each value alone, at every place of a 33-word slice (the vector part, the
        // tail): accepted exactly when it is a zero or a normal number.
        for &w in &all {
            for at in [0, 15, 31, 32] {
                let mut slice = [0x3c00u16; 33];
                slice[at] = w;
                // SAFETY: AVX-512 was detected above.
                let plain = unsafe { f16_plain_avx512(&slice) };
                assert_eq!(plain, is_plain(w), "{w:#06x} at {at}");
            }
        }
        let plain: Vec<f16> =
            all.iter().copied().filter(|&w| is_plain(w)).map(f16::from_bits).collect();
        let pe: Vec<f32> = (0..plain.len()).map(|k| (k as f32 * 0.01).cos()).collect();
        for scale in [None, Some(3.0f32), Some(-0.1)] {
            macro_rules! compare {
                ($o:ty) => {
                    let mut want = vec![<$o>::default(); plain.len()];
                    add_row(&mut want, &plain, &pe, scale);
                    let mut got = vec![<$o>::default(); plain.len()];
                    // SAFETY: AVX-512 was detected above; every value is plain.
                    unsafe { f16::add_row_avx512(&mut got, &plain, &pe, scale) };
                    let diff = got.iter().zip(&want).position(|(g, w)| g.to_bits() != w.to_bits());
                    assert_eq!(diff, None, "{} scale {scale:?}", stringify!($o));
                };
            }
            compare!(f32);
            compare!(f16);
            compare!(bf16);
        }
        // And the decode alone (adding -0.0 changes no value, not even a zero's sign)
        // equals the original integer form's, value for value.
        let mut decoded = vec![0f32; plain.len()];
        // SAFETY: as above.
        unsafe { f16::add_row_avx512(&mut decoded, &plain, &vec![-0.0; plain.len()], None) };
        for (d, h) in decoded.iter().zip(&plain) {
            let want = f16_to_f32_bits(u32::from(h.to_bits()));
            assert_eq!(d.to_bits(), want, "{:#06x}", h.to_bits());
        }
    }
}
