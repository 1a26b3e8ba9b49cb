//! The fused operation `out[b, t, :] = scale * E[ids[b, t], :] + PE(pos[b, t], :)`: its
//! argument types and the checks every path runs before any work starts.

use half::{bf16, f16};
use ndarray::{Array3, ArrayView2};

pub use crate::dtype::{Dtype, Element};
use crate::error::{Error, Result};
use crate::spec::PeSpec;

/// A borrowed embedding table `[vocab, dim]` in one of the supported storage types.
#[derive(Clone, Copy, Debug)]
pub enum Embeddings<'a> {
    /// float32 rows.
    F32(ArrayView2<'a, f32>),
    /// float16 rows.
    F16(ArrayView2<'a, f16>),
    /// bfloat16 rows.
    Bf16(ArrayView2<'a, bf16>),
}

impl Embeddings<'_> {
    /// `(vocab, dim)`.
    pub fn dim(&self) -> (usize, usize) {
        match self {
            Embeddings::F32(a) => a.dim(),
            Embeddings::F16(a) => a.dim(),
            Embeddings::Bf16(a) => a.dim(),
        }
    }

    /// The storage type.
    pub fn dtype(&self) -> Dtype {
        match self {
            Embeddings::F32(_) => Dtype::F32,
            Embeddings::F16(_) => Dtype::F16,
            Embeddings::Bf16(_) => Dtype::Bf16,
        }
    }

    /// Rows `rows` as the bytes [`Embeddings::rows_to_words`] gives, borrowed rather than
    /// converted, when the view keeps them contiguous in row-major order (a standard-layout
    /// table, or rows of one), less the zero padding of a 16-bit chunk of an odd element
    /// count. `None` for other layouts, and for 16-bit elements on a big-endian host.
    pub(crate) fn rows_bytes(&self, rows: std::ops::Range<usize>) -> Option<&[u8]> {
        use ndarray::s;
        match self {
            Embeddings::F32(a) => a.slice(s![rows, ..]).to_slice().map(bytemuck::cast_slice),
            Embeddings::F16(a) if cfg!(target_endian = "little") => {
                a.slice(s![rows, ..]).to_slice().map(bytemuck::cast_slice)
            }
            Embeddings::Bf16(a) if cfg!(target_endian = "little") => {
                a.slice(s![rows, ..]).to_slice().map(bytemuck::cast_slice)
            }
            _ => None,
        }
    }

    /// Rows `rows` as raw element bits in row-major order: one u32 per f32 element, or
    /// two 16-bit elements per u32 word (low half first, the last word zero-padded).
    pub(crate) fn rows_to_words(&self, rows: std::ops::Range<usize>) -> Vec<u32> {
        use ndarray::s;
        match self {
            Embeddings::F32(a) => a.slice(s![rows, ..]).iter().map(|v| v.to_bits()).collect(),
            Embeddings::F16(a) => pack_halves(a.slice(s![rows, ..]).iter().map(|v| v.to_bits())),
            Embeddings::Bf16(a) => pack_halves(a.slice(s![rows, ..]).iter().map(|v| v.to_bits())),
        }
    }
}

impl Embeddings<'_> {
    /// The rows widened to f32, exactly (every f16 and bf16 value is an f32), by the same
    /// integer conversions the shaders use. The result's memory order follows the view's
    /// (ndarray's `to_owned`, `mapv`): a view in Fortran order gives an array in Fortran
    /// order.
    pub fn to_f32(&self) -> ndarray::Array2<f32> {
        use crate::convert::{bf16_to_f32_bits, f16_to_f32_bits};
        match self {
            Embeddings::F32(a) => a.to_owned(),
            Embeddings::F16(a) => {
                a.mapv(|v| f32::from_bits(f16_to_f32_bits(u32::from(v.to_bits()))))
            }
            Embeddings::Bf16(a) => {
                a.mapv(|v| f32::from_bits(bf16_to_f32_bits(u32::from(v.to_bits()))))
            }
        }
    }

    /// Row `row` widened to f32 into `out` (of `dim` elements), as [`Embeddings::to_f32`]
    /// widens it.
    pub(crate) fn widen_row_into(&self, row: usize, out: ndarray::ArrayViewMut1<'_, f32>) {
        use crate::convert::{bf16_to_f32_bits, f16_to_f32_bits};
        let mut out = out;
        match self {
            Embeddings::F32(a) => out.assign(&a.row(row)),
            Embeddings::F16(a) => out.zip_mut_with(&a.row(row), |o, v| {
                *o = f32::from_bits(f16_to_f32_bits(u32::from(v.to_bits())));
            }),
            Embeddings::Bf16(a) => out.zip_mut_with(&a.row(row), |o, v| {
                *o = f32::from_bits(bf16_to_f32_bits(u32::from(v.to_bits())));
            }),
        }
    }

    /// [`Embeddings::to_f32`] written into `out`, an array of the same shape (allocated by the
    /// caller, fallibly).
    pub(crate) fn widen_into(self, out: &mut ndarray::Array2<f32>) {
        use crate::convert::{bf16_to_f32_bits, f16_to_f32_bits};
        match self {
            Embeddings::F32(a) => out.assign(&a),
            Embeddings::F16(a) => out.zip_mut_with(&a, |o, v| {
                *o = f32::from_bits(f16_to_f32_bits(u32::from(v.to_bits())));
            }),
            Embeddings::Bf16(a) => out.zip_mut_with(&a, |o, v| {
                *o = f32::from_bits(bf16_to_f32_bits(u32::from(v.to_bits())));
            }),
        }
    }
}

fn pack_halves(bits: impl Iterator<Item = u16>) -> Vec<u32> {
    let mut out = Vec::with_capacity(bits.size_hint().0.div_ceil(2));
    let mut pending: Option<u16> = None;
    for b in bits {
        match pending.take() {
            None => pending = Some(b),
            Some(lo) => out.push(u32::from(lo) | (u32::from(b) << 16)),
        }
    }
    if let Some(lo) = pending {
        out.push(u32::from(lo));
    }
    out
}

/// The embedding scale.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum Scale {
    /// `out = E[id] + PE`: GPU and CPU agree bit for bit.
    #[default]
    None,
    /// `sqrt(dim)`, the Transformer's embedding scale (rounded to f32 once, on the host).
    SqrtDim,
    /// Any finite factor.
    Value(f32),
}

impl Scale {
    /// The factor as f32 for a given dim, or `None` for [`Scale::None`].
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `scale` for NaN or infinite values.
    pub fn factor(self, dim: usize) -> Result<Option<f32>> {
        match self {
            Scale::None => Ok(None),
            Scale::SqrtDim => Ok(Some((dim as f64).sqrt() as f32)),
            Scale::Value(v) if v.is_finite() => Ok(Some(v)),
            Scale::Value(v) => Err(Error::InvalidParameter {
                field: "scale",
                value: v.to_string(),
                allowed: "a number finite in float32",
            }),
        }
    }
}

/// Options of an encode call beyond its arrays.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EncodeOptions {
    /// Embedding scale.
    pub scale: Scale,
    /// Tokens with this id are padding: their output rows are all zeros, and their id is
    /// not looked up (it may be any value).
    pub pad_id: Option<u32>,
    /// Storage type of the output.
    pub out_dtype: Dtype,
}

/// The result of an encode, `[batch, len, dim]`, in the requested storage type.
#[derive(Clone, Debug, PartialEq)]
pub enum Encoded {
    /// float32 output.
    F32(Array3<f32>),
    /// float16 output (rounded to nearest even from the f32 result).
    F16(Array3<f16>),
    /// bfloat16 output (rounded to nearest even from the f32 result).
    Bf16(Array3<bf16>),
}

impl Encoded {
    /// `(batch, len, dim)`.
    pub fn dim(&self) -> (usize, usize, usize) {
        match self {
            Encoded::F32(a) => a.dim(),
            Encoded::F16(a) => a.dim(),
            Encoded::Bf16(a) => a.dim(),
        }
    }

    /// The f32 output, if that is what was asked for.
    pub fn into_f32(self) -> Option<Array3<f32>> {
        match self {
            Encoded::F32(a) => Some(a),
            _ => None,
        }
    }

    /// Every element's raw bits widened to u32, row-major: handy for bit comparisons.
    pub fn bits(&self) -> Vec<u32> {
        match self {
            Encoded::F32(a) => a.iter().map(|v| v.to_bits()).collect(),
            Encoded::F16(a) => a.iter().map(|v| u32::from(v.to_bits())).collect(),
            Encoded::Bf16(a) => a.iter().map(|v| u32::from(v.to_bits())).collect(),
        }
    }
}

/// A token id type accepted at the API edge.
pub trait TokenId: Copy + std::fmt::Display {
    /// The id as u32, or `None` if it is negative or does not fit.
    fn to_u32(self) -> Option<u32>;
}

impl TokenId for u32 {
    fn to_u32(self) -> Option<u32> {
        Some(self)
    }
}

macro_rules! token_ids_by_try_from {
    ($($t:ty),*) => {$(
        impl TokenId for $t {
            fn to_u32(self) -> Option<u32> {
                u32::try_from(self).ok()
            }
        }
    )*};
}
// Every integer type NumPy has (Python's ids come in any of them, taken without a copy).
token_ids_by_try_from!(i8, i16, i32, i64, u8, u16, u64);

/// Converts ids of any accepted type to u32, checking each against `vocab`. Pad tokens
/// (`pad_id`) are exempt from the vocabulary check.
///
/// # Errors
/// [`Error::TokenId`] for the first (row-major) id that is negative or `>= vocab`;
/// [`Error::Alloc`] if the u32 copy cannot be had (a broadcast view may describe far more
/// ids than it holds), before any id is read.
pub fn ids_to_u32<T: TokenId>(
    ids: ArrayView2<'_, T>,
    vocab: usize,
    pad_id: Option<u32>,
) -> Result<ndarray::Array2<u32>> {
    let mut out = crate::alloc::try_zeros::<u32, _>("ids", ids.raw_dim())?;
    for (((row, col), &id), slot) in ids.indexed_iter().zip(out.iter_mut()) {
        match id.to_u32() {
            Some(v) if pad_id == Some(v) || (v as usize) < vocab => *slot = v,
            _ => {
                return Err(Error::TokenId { row, col, id: id.to_string(), vocab });
            }
        }
    }
    Ok(out)
}

/// The checks every encode path runs before it writes anything: [`check_shapes`] (shapes,
/// dims, the output's size, the scale), then [`check_ids`]. Returns the scale factor. The
/// CPU's allocating paths run the two apart, allocating their output between them.
pub(crate) fn check(
    spec: &PeSpec,
    table: (usize, usize),
    ids: ArrayView2<'_, u32>,
    positions: ArrayView2<'_, u32>,
    options: &EncodeOptions,
) -> Result<Option<f32>> {
    let factor = check_shapes(spec.dim() as usize, table, ids, positions, options)?;
    check_ids(ids, table.0, options.pad_id)?;
    Ok(factor)
}

/// Checks that every position has a row in a learned position table of `max_positions`
/// rows.
///
/// # Errors
/// [`Error::Position`] for the first (row-major) position `>= max_positions`.
pub fn check_positions(positions: ArrayView2<'_, u32>, max_positions: usize) -> Result<()> {
    match positions.indexed_iter().find(|&(_, &p)| p as usize >= max_positions) {
        Some(((row, col), &position)) => Err(Error::Position { row, col, position, max_positions }),
        None => Ok(()),
    }
}

/// The checks of [`check`] that read no id: the shapes (the output's included), the
/// vocabulary and the scale. What they pass, an output can be allocated for; the ids are
/// checked by [`check_ids`], a loop over every token.
pub(crate) fn check_shapes(
    pe_dim: usize,
    table: (usize, usize),
    ids: ArrayView2<'_, u32>,
    positions: ArrayView2<'_, u32>,
    options: &EncodeOptions,
) -> Result<Option<f32>> {
    let (vocab, dim) = table;
    // No model has an empty vocabulary; refused on every path as the recorded pass refuses
    // it (a batch of pad ids would have been zeros on the CPU and a panic on the GPU).
    if vocab == 0 {
        return Err(Error::Shape {
            op: "encode",
            what: "embedding table rows",
            expected: "at least 1".into(),
            actual: "0".into(),
        });
    }
    if dim != pe_dim {
        return Err(Error::Shape {
            op: "encode",
            what: "embedding dim vs positional-encoding dim",
            expected: pe_dim.to_string(),
            actual: dim.to_string(),
        });
    }
    if ids.dim() != positions.dim() {
        return Err(Error::Shape {
            op: "encode",
            what: "positions vs ids",
            expected: format!("{:?}", ids.dim()),
            actual: format!("{:?}", positions.dim()),
        });
    }
    // An empty batch can have axes no output array could have (views allow 2^63 rows of
    // nothing): the output is checked as ndarray would check it, zero axes aside, so this is
    // an error rather than a panic where the output is allocated.
    let (batch, len) = ids.dim();
    let limit = isize::MAX as u64 / options.out_dtype.size() as u64;
    crate::source::check_shape(
        "encode",
        "the output",
        &[batch, len, dim],
        limit,
        "isize::MAX bytes",
    )?;
    options.scale.factor(dim)
}

/// Refuses the first (row-major) id `>= vocab` that is not the pad id.
pub(crate) fn check_ids(ids: ArrayView2<'_, u32>, vocab: usize, pad_id: Option<u32>) -> Result<()> {
    for ((row, col), &id) in ids.indexed_iter() {
        if pad_id != Some(id) && id as usize >= vocab {
            return Err(Error::TokenId { row, col, id: id.to_string(), vocab });
        }
    }
    Ok(())
}

/// The distinct positions of a batch, sorted, and for each token the index of its position
/// in that list: PE rows are computed once per distinct position and gathered per token.
///
/// # Errors
/// [`Error::Alloc`] if the two lists, a u32 per token each, cannot be had.
pub(crate) fn unique_positions(positions: ArrayView2<'_, u32>) -> Result<(Vec<u32>, Vec<u32>)> {
    let mut unique: Vec<u32> = crate::alloc::try_zeroed_vec("positions", positions.len())?;
    for (u, &p) in unique.iter_mut().zip(positions) {
        *u = p;
    }
    unique.sort_unstable();
    unique.dedup();
    let mut slots: Vec<u32> = crate::alloc::try_zeroed_vec("positions", positions.len())?;
    for (slot, p) in slots.iter_mut().zip(positions) {
        *slot = unique.binary_search(p).expect("every position is in the list") as u32;
    }
    Ok((unique, slots))
}
