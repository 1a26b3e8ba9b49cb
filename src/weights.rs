//! Embedding tables from files: one 2-D tensor of a `.safetensors` file, or a `.npy` array,
//! stored as float32, float16 or bfloat16.
//!
//! Only the chosen tensor's bytes are read: a `.safetensors` header is parsed and checked
//! (offsets contiguous, sizes matching dtype and shape, the data filling the file) before
//! any tensor data is touched, so a checkpoint of many tensors costs one table's memory.
//! Nothing is allocated at a size a header states until that size has been checked
//! against the bytes the file actually holds.
//!
//! Non-finite weights are refused: a table holding a NaN or an infinity is an
//! [`Error::NonFinite`] naming the first one, so a corrupt checkpoint fails at load rather
//! than spreading NaNs through every output row that gathers it.

use std::io::{self, BufReader, Cursor, Read, Seek, SeekFrom};
use std::path::Path;

use half::vec::HalfBitsVecExt;
use half::{bf16, f16};
use ndarray::{Array2, Ix2};
use rayon::prelude::*;
use safetensors::tensor::{Dtype as StDtype, Metadata};

use crate::encode::Embeddings;
use crate::error::{Error, Result};
use crate::npy::{self, Expected, NpyArray, NpyDtype};
use crate::source::{self, Source};

/// The largest `.safetensors` header accepted, the limit the safetensors crate itself sets.
pub const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

/// How error messages name an embedding table.
const WHAT: &str = "weights";

/// The role of a learned position table (`--position-table`), whose tensor is named by
/// `--position-tensor`.
pub(crate) const POSITION_TABLE: &str = "position table";

/// An embedding table `[vocab, dim]`, owned, in C order.
#[derive(Clone, Debug, PartialEq)]
pub enum Table {
    /// float32 rows.
    F32(Array2<f32>),
    /// float16 rows.
    F16(Array2<f16>),
    /// bfloat16 rows.
    Bf16(Array2<bf16>),
}

impl Table {
    /// The table as the encode paths take it.
    pub fn embeddings(&self) -> Embeddings<'_> {
        match self {
            Table::F32(a) => Embeddings::F32(a.view()),
            Table::F16(a) => Embeddings::F16(a.view()),
            Table::Bf16(a) => Embeddings::Bf16(a.view()),
        }
    }

    /// `(vocab, dim)`.
    pub fn dim(&self) -> (usize, usize) {
        match self {
            Table::F32(a) => a.dim(),
            Table::F16(a) => a.dim(),
            Table::Bf16(a) => a.dim(),
        }
    }
}

/// Loads an embedding table from a `.safetensors` file (recognised by content, not by
/// name) or a `.npy` file (by its magic string).
///
/// `tensor` names the `.safetensors` tensor to load; without it the file must hold exactly
/// one 2-D tensor. A `.npy` table must be `'<f4'` or `'<f2'`: NumPy has no bfloat16, so
/// bfloat16 tables come from `.safetensors` only.
///
/// ```
/// use std::collections::HashMap;
/// use safetensors::tensor::{Dtype, TensorView};
///
/// let values: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
/// let view = TensorView::new(Dtype::F32, vec![2, 2], &values)?;
/// let bytes = safetensors::serialize([("embed", view)], None)?;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("model.safetensors");
/// std::fs::write(&path, bytes)?;
///
/// let table = posenc::weights::load(&path, None)?;
/// assert_eq!(table, posenc::weights::Table::F32(ndarray::array![[1.0, 2.0], [3.0, 4.0]]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// All naming the file: [`Error::Io`] if it cannot be read or is not a regular file (a directory, a
/// pipe); [`Error::Format`] if it is neither format or is malformed; [`Error::Tensor`] if the named
/// tensor is missing, or none was named and the file does not hold exactly one 2-D tensor;
/// [`Error::Dtype`] for a dtype other than F32/F16/BF16 (`'<f4'`/`'<f2'` in `.npy`);
/// [`Error::Rank`] if the array is not 2-D; [`Error::NonFinite`] for a NaN or infinite weight;
/// [`Error::InvalidParameter`] naming `tensor` if one is named for a `.npy` file.
pub fn load(path: impl AsRef<Path>, tensor: Option<&str>) -> Result<Table> {
    load_as(Source::File(path.as_ref()), tensor, WHAT)
}

/// [`load`] from `source`, naming the table `what` in errors (`weights`, `position table`).
pub(crate) fn load_as(
    source: Source<'_>,
    tensor: Option<&str>,
    what: &'static str,
) -> Result<Table> {
    match source {
        Source::File(path) => {
            let (file, len) = source::open_file(path)?;
            load_from(file, len, path, tensor, what)
        }
        Source::Bytes { name, bytes } => {
            load_from(Cursor::new(bytes), bytes.len() as u64, name, tensor, what)
        }
    }
}

/// [`load`] from bytes already in memory (a download, a memory map, a fuzzer's input).
/// Errors name the source `<memory>`.
///
/// ```
/// let mut bytes = Vec::new();
/// posenc::npy::write(&mut bytes, ndarray::array![[1.0f32, 2.0]].view())?;
/// let table = posenc::weights::from_bytes(&bytes, None)?;
/// assert_eq!(table.dim(), (1, 2));
/// assert!(posenc::weights::from_bytes(&bytes[..20], None).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// As [`load`], less [`Error::Io`] for opening.
pub fn from_bytes(bytes: &[u8], tensor: Option<&str>) -> Result<Table> {
    load_as(Source::Bytes { name: Path::new("<memory>"), bytes }, tensor, WHAT)
}

/// [`load`] from a seekable reader holding exactly `len` bytes; `path` names it in errors,
/// `what` the table.
fn load_from<R: Read + Seek>(
    mut reader: R,
    len: u64,
    path: &Path,
    tensor: Option<&str>,
    what: &'static str,
) -> Result<Table> {
    let io_error = |source| Error::Io { path: path.to_path_buf(), source };
    let is_npy = npy::starts_with_magic(&mut reader).map_err(io_error)?;
    let table = if is_npy {
        if let Some(name) = tensor {
            let (field, allowed) = match what {
                POSITION_TABLE => (
                    "position_tensor",
                    "a tensor name only for a .safetensors position table (a .npy holds one \
                     array)",
                ),
                _ => (
                    "tensor",
                    "a tensor name only for .safetensors weights (a .npy holds one array)",
                ),
            };
            return Err(Error::InvalidParameter { field, value: name.to_string(), allowed });
        }
        load_npy(BufReader::new(reader), len, path, what)?
    } else {
        load_safetensors(reader, len, path, tensor, what)?
    };
    check_finite(&table, path, what)?;
    Ok(table)
}

/// Refuses a table holding a NaN or an infinity, naming the first one (row-major).
fn check_finite(table: &Table, path: &Path, what: &'static str) -> Result<()> {
    fn flat<T>(a: &Array2<T>) -> &[T] {
        a.as_slice().expect("tables are loaded in C order")
    }
    // A value is non-finite iff its exponent bits are all ones, so the scan needs only the
    // raw words: no conversion, and a compare the compiler vectorises.
    let (index, value) = match table {
        Table::F32(a) => {
            let values = flat(a);
            match first_non_finite(bytemuck::cast_slice::<f32, u32>(values), 0x7f80_0000) {
                Some(i) => (i, values[i].to_string()),
                None => return Ok(()),
            }
        }
        Table::F16(a) => {
            let values = flat(a);
            match first_non_finite(bytemuck::cast_slice::<f16, u16>(values), 0x7c00) {
                Some(i) => (i, values[i].to_string()),
                None => return Ok(()),
            }
        }
        Table::Bf16(a) => {
            let values = flat(a);
            match first_non_finite(bytemuck::cast_slice::<bf16, u16>(values), 0x7f80) {
                Some(i) => (i, values[i].to_string()),
                None => return Ok(()),
            }
        }
    };
    let dim = table.dim().1;
    Err(Error::NonFinite {
        path: path.to_path_buf(),
        what,
        row: index / dim,
        col: index % dim,
        value,
    })
}

/// Words per block of the finiteness scan: 64 KiB of f16 (128 KiB of f32), small enough
/// to stay in cache between the block test and the search of a failing block, large
/// enough that rayon's per-block cost is noise.
const FINITE_BLOCK: usize = 1 << 15;

/// The index of the first word whose `exponent` bits are all set, if any. Blocks are
/// tested with a branch-free reduction (no early exit, so it vectorises); only a block
/// that fails is searched element by element, and the first failing block wins.
fn first_non_finite<W: ExponentWord>(words: &[W], exponent: W) -> Option<usize> {
    words
        .par_chunks(FINITE_BLOCK)
        .enumerate()
        .find_first(|(_, block)| W::any_all_ones(block, exponent))
        .and_then(|(k, block)| {
            let i = block.iter().position(|&w| w & exponent == exponent)?;
            Some(k * FINITE_BLOCK + i)
        })
}

/// A raw little-endian float word (u16 for f16/bf16, u32 for f32).
trait ExponentWord: Copy + Sync + PartialEq + std::ops::BitAnd<Output = Self> {
    /// Whether any word of `block` has all of `exponent`'s bits set.
    fn any_all_ones(block: &[Self], exponent: Self) -> bool;
}

macro_rules! exponent_word {
    ($t:ty) => {
        impl ExponentWord for $t {
            #[inline]
            fn any_all_ones(block: &[Self], exponent: Self) -> bool {
                // An OR of compare results over the whole block, not `any`, whose early
                // exit keeps the loop scalar.
                block.iter().fold(0, |acc: $t, &w| acc | <$t>::from(w & exponent == exponent)) != 0
            }
        }
    };
}
exponent_word!(u16);
exponent_word!(u32);

fn load_npy(reader: impl Read, len: u64, path: &Path, what: &'static str) -> Result<Table> {
    let expected = Expected { what, dtypes: &[NpyDtype::F32, NpyDtype::F16], ranks: &[2] };
    let array = npy::read_from(reader, len, path, &expected).map_err(|e| match e {
        Error::Dtype { path, what, dtype, allowed } => Error::Dtype {
            path,
            what,
            dtype,
            allowed: format!("{allowed} (bfloat16 tables: use .safetensors)"),
        },
        other => other,
    })?;
    const CHECKED: &str = "the reader checked the rank";
    Ok(match array {
        NpyArray::F32(a) => Table::F32(a.into_dimensionality::<Ix2>().expect(CHECKED)),
        NpyArray::F16(a) => Table::F16(a.into_dimensionality::<Ix2>().expect(CHECKED)),
        // The reader returns only the dtypes asked for; the match must still be total.
        other => {
            return Err(Error::Dtype {
                path: path.to_path_buf(),
                what,
                dtype: format!("'{}'", other.dtype().descr()),
                allowed: "'<f4' or '<f2'".into(),
            });
        }
    })
}

/// A `.safetensors` header, parsed and checked against the file's length: every tensor's
/// byte range is within the data, and the data ends where the file does.
pub(crate) struct SafetensorsHeader {
    /// The tensors' names, dtypes, shapes and byte ranges.
    pub(crate) metadata: Metadata,
    /// Where the data starts in the file: tensor offsets count from here.
    pub(crate) data_start: u64,
}

/// Reads and checks the header of a `.safetensors` file of `len` bytes from `file`'s
/// start; nothing is allocated beyond the header, whose size is bounded by the file's and
/// by [`MAX_SAFETENSORS_HEADER`].
///
/// # Errors
/// [`Error::Format`] naming `path` for a short file, an oversized or truncated header, a
/// header that is not valid safetensors metadata or gives a key twice (a tensor's name, a
/// `__metadata__` key: naming it), or data that does not fill the file;
/// [`Error::Io`] if reading fails.
pub(crate) fn read_safetensors_header(
    file: &mut impl Read,
    len: u64,
    path: &Path,
) -> Result<SafetensorsHeader> {
    let format_error =
        |reason: String| Error::Format { path: path.to_path_buf(), format: ".safetensors", reason };
    let io_error = |source: io::Error| crate::error::read_error(path, ".safetensors", len, source);

    if len < 8 {
        return Err(format_error(format!(
            "it is {len} bytes, too short for the 8-byte header length (nor is it a .npy file)"
        )));
    }
    let mut n = [0u8; 8];
    file.read_exact(&mut n).map_err(io_error)?;
    let header_len = u64::from_le_bytes(n);
    if header_len > MAX_SAFETENSORS_HEADER {
        return Err(format_error(format!(
            "the header length field says {header_len} bytes, over the limit of \
             {MAX_SAFETENSORS_HEADER}"
        )));
    }
    if header_len > len - 8 {
        return Err(format_error(format!(
            "the header length field says {header_len} bytes but only {} follow it",
            len - 8
        )));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header).map_err(io_error)?;
    // serde keeps the last of a key given twice (a tensor's name, a `__metadata__` key)
    // silently; a config.json's key given twice is refused, and so is a header's.
    if let Ok(Some(key)) = crate::rope::duplicate_key(&header) {
        return Err(format_error(format!(
            "the header gives the key {key:?} twice (allowed: each key at most once per object)"
        )));
    }
    let metadata: Metadata = serde_json::from_slice(&header).map_err(|e| {
        // safetensors names no tensor when a byte range disagrees with a shape, and no reason
        // when offsets do not follow on (naming either of two tensors with the same offsets,
        // as its map's order falls): said in its place, found as it checks them.
        let reason = offsets_problem(&header).unwrap_or_else(|| e.to_string());
        format_error(format!("the header is not valid: {reason}"))
    })?;
    let data_start = 8 + header_len;
    let data_len = metadata.data_len() as u64;
    if data_start.checked_add(data_len) != Some(len) {
        return Err(format_error(format!(
            "the header describes {data_len} bytes of tensor data but {} follow it",
            len - data_start
        )));
    }
    Ok(SafetensorsHeader { metadata, data_start })
}

/// Why a safetensors header's `data_offsets` are refused, found as the format checks them:
/// the tensors in the order of their offsets (ties by name) must lie end to end from byte
/// 0 of the data, each spanning the bytes its shape and dtype need. The first tensor that
/// starts elsewhere (overlapping the one before it, or leaving a gap) or spans another
/// number of bytes, with the reason; `None` if every tensor that can be read agrees.
fn offsets_problem(header: &[u8]) -> Option<String> {
    let tensors: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(header).ok()?;
    let mut ranges: Vec<(usize, usize, &str, Option<u64>, String)> = Vec::new();
    for (name, info) in tensors.iter().filter(|(name, _)| *name != "__metadata__") {
        let [start, end]: [usize; 2] =
            serde_json::from_value(info.get("data_offsets")?.clone()).ok()?;
        let dtype: Option<StDtype> =
            info.get("dtype").and_then(|d| serde_json::from_value(d.clone()).ok());
        let shape: Option<Vec<usize>> =
            info.get("shape").and_then(|s| serde_json::from_value(s.clone()).ok());
        // The bytes its shape and dtype need, where they can be read and do not overflow.
        let (needed, what) = match (dtype, shape) {
            (Some(dtype), Some(shape)) => {
                let bits = shape.iter().try_fold(dtype.bitsize(), |n, &d| n.checked_mul(d));
                let needed = bits.map(|b| b.div_ceil(8) as u64);
                let text = needed.map_or_else(|| "more than usize::MAX".into(), |n| n.to_string());
                (
                    Some(needed.unwrap_or(u64::MAX)),
                    format!("shape {shape:?} of {dtype:?} needs {text}"),
                )
            }
            _ => (None, String::new()),
        };
        ranges.push((start, end, name.as_str(), needed, what));
    }
    ranges.sort_unstable_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
    let mut previous: Option<(usize, &str)> = None;
    for (start, end, name, needed, what) in &ranges {
        let expected = previous.map_or(0, |(end, _)| end);
        if *start != expected {
            let after = previous.map_or_else(
                || "the data begins at 0".to_string(),
                |(end, p)| format!("tensor {p:?} ends at {end}"),
            );
            let how = if *start < expected { "overlap" } else { "leave a gap" };
            return Some(format!(
                "tensor {name:?}: its data_offsets [{start}, {end}] {how}: {after}, and the \
                 tensors must lie end to end from byte 0"
            ));
        }
        let spans = end.checked_sub(*start).map(|n| n as u64);
        if let Some(needed) = needed
            && spans != Some(*needed)
        {
            return Some(format!(
                "tensor {name:?}: {what} bytes, but its data_offsets [{start}, {end}] span {}",
                spans.map_or_else(|| "a negative range".into(), |n| n.to_string())
            ));
        }
        previous = Some((*end, name));
    }
    None
}

fn load_safetensors<R: Read + Seek>(
    mut file: R,
    len: u64,
    path: &Path,
    tensor: Option<&str>,
    what: &'static str,
) -> Result<Table> {
    let format_error =
        |reason: String| Error::Format { path: path.to_path_buf(), format: ".safetensors", reason };
    let io_error = |source: io::Error| crate::error::read_error(path, ".safetensors", len, source);
    let SafetensorsHeader { metadata, data_start } = read_safetensors_header(&mut file, len, path)?;

    let flag = match what {
        POSITION_TABLE => "--position-tensor NAME",
        _ => "--tensor NAME",
    };
    let (name, info) = choose(&metadata, path, tensor, 2, flag)?;
    if info.shape.len() != 2 {
        return Err(Error::Rank {
            path: path.to_path_buf(),
            what,
            expected: vec![2],
            actual: info.shape.clone(),
        });
    }
    let shape = (info.shape[0], info.shape[1]);
    if shape.0.max(shape.1) > isize::MAX as usize {
        return Err(format_error(format!("the shape {:?} of {name:?} is too large", info.shape)));
    }
    // Metadata's own validation ties the byte range to the dtype and shape.
    let offset = data_start + info.data_offsets.0 as u64;
    file.seek(SeekFrom::Start(offset)).map_err(io_error)?;
    let mut reader = BufReader::new(file);
    Ok(match info.dtype {
        StDtype::F32 => Table::F32(read_rows(&mut reader, shape, |v: Vec<f32>| v, io_error)?),
        StDtype::F16 => {
            Table::F16(read_rows(&mut reader, shape, Vec::<u16>::reinterpret_into, io_error)?)
        }
        StDtype::BF16 => {
            Table::Bf16(read_rows(&mut reader, shape, Vec::<u16>::reinterpret_into, io_error)?)
        }
        other => {
            return Err(Error::Dtype {
                path: path.to_path_buf(),
                what,
                dtype: format!("{other:?} (tensor {name:?})"),
                allowed: "F32, F16 or BF16".into(),
            });
        }
    })
}

/// The tensor to load: the one named, or the file's only tensor of rank `rank`; `flag` is
/// how a user names one (`--tensor NAME`), for the error when several qualify.
///
/// # Errors
/// [`Error::Tensor`] naming `path` and listing the tensors of rank `rank`: the named tensor
/// is missing, or none was named and the file does not hold exactly one of that rank.
pub(crate) fn choose<'m>(
    metadata: &'m Metadata,
    path: &Path,
    tensor: Option<&str>,
    rank: usize,
    flag: &str,
) -> Result<(String, &'m safetensors::tensor::TensorInfo)> {
    let mut available: Vec<String> = metadata
        .tensors()
        .into_iter()
        .filter(|(_, info)| info.shape.len() == rank)
        .map(|(name, _)| name)
        .collect();
    available.sort();
    let fail = |problem: String, available: Vec<String>| Error::Tensor {
        path: path.to_path_buf(),
        problem,
        rank,
        available,
    };
    let name = match (tensor, available.as_slice()) {
        (Some(name), _) => name.to_string(),
        (None, [only]) => only.clone(),
        (None, []) => {
            return Err(fail(format!("no tensor was named and none is {rank}-D"), available));
        }
        (None, several) => {
            let problem = format!("{} {rank}-D tensors and none named ({flag})", several.len());
            return Err(fail(problem, available));
        }
    };
    match metadata.info(&name) {
        Some(info) => Ok((name, info)),
        None => Err(fail(format!("no tensor named {name:?}"), available)),
    }
}

/// Reads `shape`'s little-endian elements into an aligned array: the file's bytes may sit
/// at any offset, so they are copied, never reinterpreted in place. They are read straight
/// into the array's buffer, a `W` (u16 or f32) buffer allocated fallibly and zeroed by the
/// allocator (the kernel maps the pages lazily, where a fill with `f16` zeros would be a
/// second pass over every page); `into` then retypes it in place.
fn read_rows<W: bytemuck::Pod, T>(
    reader: &mut impl Read,
    shape: (usize, usize),
    into: impl FnOnce(Vec<W>) -> Vec<T>,
    io_error: impl FnOnce(io::Error) -> Error,
) -> Result<Array2<T>> {
    let mut data = crate::alloc::try_zeroed_vec::<W>("the embedding table", shape.0 * shape.1)?;
    reader.read_exact(bytemuck::cast_slice_mut(&mut data)).map_err(io_error)?;
    if cfg!(target_endian = "big") {
        for element in bytemuck::cast_slice_mut::<W, u8>(&mut data).chunks_exact_mut(size_of::<W>())
        {
            element.reverse();
        }
    }
    // The metadata bounds the element count by the file's size, and the caller each axis.
    Ok(Array2::from_shape_vec(shape, into(data)).expect("the data has the shape's length"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn le<T: bytemuck::Pod>(values: &[T]) -> Vec<u8> {
        values.iter().flat_map(|v| bytemuck::bytes_of(v).to_vec()).collect()
    }

    #[test]
    fn tensors_at_unaligned_offsets_load_exactly() {
        // serialize() orders tensors by alignment; a hand-written header puts an f32 tensor
        // 3 bytes into the data, as other writers may.
        let dir = tempfile::tempdir().unwrap();
        let floats = [0.1f32, -2.5, 3.0, f32::MIN_POSITIVE];
        let halves: Vec<bf16> = (0..6).map(|k| bf16::from_f32(k as f32 - 2.5)).collect();
        let header = r#"{"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},"#.to_string()
            + r#""b":{"dtype":"F32","shape":[2,2],"data_offsets":[3,19]},"#
            + r#""c":{"dtype":"BF16","shape":[3,2],"data_offsets":[19,31]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(&[7, 7, 7]);
        bytes.extend_from_slice(&le(&floats));
        bytes.extend_from_slice(&le(&halves));
        let path = write(&dir, "m.safetensors", &bytes);
        let f = load(&path, Some("b")).unwrap();
        assert_eq!(f, Table::F32(Array2::from_shape_vec((2, 2), floats.to_vec()).unwrap()));
        let bf = load(&path, Some("c")).unwrap();
        assert_eq!(bf, Table::Bf16(Array2::from_shape_vec((3, 2), halves).unwrap()));
        assert!(matches!(load(&path, None), Err(Error::Tensor { available, .. })
            if available == ["b", "c"]));
    }

    /// A `[rows, cols]` safetensors file of `dtype` whose element `k` (row-major) has the
    /// bits `bits(k)`.
    fn table_bytes(
        dtype: StDtype,
        rows: usize,
        cols: usize,
        bits: impl Fn(usize) -> u32,
    ) -> Vec<u8> {
        let data: Vec<u8> = match dtype {
            StDtype::F32 => (0..rows * cols).flat_map(|k| bits(k).to_le_bytes()).collect(),
            _ => (0..rows * cols).flat_map(|k| (bits(k) as u16).to_le_bytes()).collect(),
        };
        let view = safetensors::tensor::TensorView::new(dtype, vec![rows, cols], &data).unwrap();
        safetensors::serialize([("embed", view)], None).unwrap()
    }

    #[test]
    fn non_finite_weights_are_found_at_every_place_a_block_scan_could_miss() {
        // (dtype, a finite background, the largest finite magnitude, non-finite values and
        // how they print).
        type Kind = (StDtype, u32, u32, [(u32, &'static str); 4]);
        let kinds: [Kind; 3] = [
            (
                StDtype::F32,
                0x3f80_0000,
                0x7f7f_ffff,
                [
                    (0x7fc0_0000, "NaN"),
                    (0x7f80_0000, "inf"),
                    (0xff80_0000, "-inf"),
                    (0xffff_ffff, "NaN"),
                ],
            ),
            (
                StDtype::F16,
                0x3c00,
                0x7bff,
                [(0x7e00, "NaN"), (0x7c00, "inf"), (0xfc00, "-inf"), (0x7c01, "NaN")],
            ),
            (
                StDtype::BF16,
                0x3f80,
                0x7f7f,
                [(0x7fc0, "NaN"), (0x7f80, "inf"), (0xff80, "-inf"), (0xff81, "NaN")],
            ),
        ];
        // Three blocks and a partial fourth, rows that straddle block boundaries.
        let (rows, cols) = (101, 1000);
        let n = rows * cols;
        let b = FINITE_BLOCK;
        let places = [0, 1, b / 2, b - 1, b, b + 1, 2 * b - 1, 2 * b, n / 2, 3 * b, n - 2, n - 1];
        for (dtype, one, max, bad) in kinds {
            // The largest finite values of both signs pass: the mask is not too wide.
            let sign = if dtype == StDtype::F32 { 0x8000_0000 } else { 0x8000 };
            let edge = table_bytes(dtype, rows, cols, |k| match k % 3 {
                0 => max,
                1 => max | sign,
                _ => one,
            });
            assert!(from_bytes(&edge, None).is_ok(), "{dtype:?}");
            for (i, &place) in places.iter().enumerate() {
                let (value, printed) = bad[i % bad.len()];
                // A second offender later (in the same block, or the last element) must not
                // be the one named.
                let later = if place + 7 < n { place + 7 } else { n - 1 };
                let bytes = table_bytes(dtype, rows, cols, |k| {
                    if k == place || (k == later && later != place) { value } else { one }
                });
                match from_bytes(&bytes, None) {
                    Err(Error::NonFinite { row, col, value, what, .. }) => {
                        assert_eq!(
                            (row, col, value.as_str(), what),
                            (place / cols, place % cols, printed, WHAT),
                            "{dtype:?} at {place}"
                        );
                    }
                    other => panic!("{dtype:?} at {place}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn header_lengths_past_the_file_are_format_errors() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = 1000u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"{}");
        let path = write(&dir, "short.safetensors", &bytes);
        match load(&path, None) {
            Err(Error::Format { reason, .. }) => {
                assert_eq!(reason, "the header length field says 1000 bytes but only 2 follow it")
            }
            other => panic!("{other:?}"),
        }
    }

    /// serde keeps the last of a key given twice; the header is refused instead, naming the
    /// key and the file, as a config.json's key given twice is.
    #[test]
    fn header_keys_given_twice_are_refused_naming_the_key_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let w =
            |offsets: &str| format!(r#"{{"dtype":"F32","shape":[1,1],"data_offsets":{offsets}}}"#);
        let (first, second) = (w("[0,4]"), w("[4,8]"));
        for (header, key) in [
            (format!(r#"{{"w":{first},"w":{second}}}"#), "w"),
            (format!(r#"{{"w":{first},"v":{second},"w":{first}}}"#), "w"),
            (
                format!(r#"{{"__metadata__":{{"format":"pt","format":"np"}},"w":{first}}}"#),
                "format",
            ),
            (format!(r#"{{"__metadata__":{{}},"w":{first},"__metadata__":{{}}}}"#), "__metadata__"),
            (
                r#"{"w":{"dtype":"F32","dtype":"F32","shape":[1,1],"data_offsets":[0,4]}}"#
                    .to_string(),
                "dtype",
            ),
        ] {
            let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
            bytes.extend_from_slice(header.as_bytes());
            bytes.extend_from_slice(&[0; 8]);
            let path = write(&dir, "twice.safetensors", &bytes);
            let err = load(&path, None).unwrap_err();
            match &err {
                Error::Format { path: p, format: ".safetensors", reason } => {
                    assert_eq!(p, &path);
                    assert_eq!(
                        reason,
                        &format!(
                            "the header gives the key {key:?} twice (allowed: each key at most \
                             once per object)"
                        ),
                        "{header}"
                    );
                }
                other => panic!("{header}: {other:?}"),
            }
            assert!(err.to_string().contains("twice.safetensors"), "{err}");
        }
    }

    #[test]
    fn npy_tables_load_and_name_no_tensor() {
        let dir = tempfile::tempdir().unwrap();
        let table = ndarray::array![[f16::ONE, f16::ZERO], [f16::NEG_ONE, f16::MAX]];
        let mut bytes = Vec::new();
        npy::write(&mut bytes, table.view()).unwrap();
        let path = write(&dir, "t.npy", &bytes);
        assert_eq!(load(&path, None).unwrap(), Table::F16(table));
        assert!(matches!(
            load(&path, Some("x")),
            Err(Error::InvalidParameter { field: "tensor", .. })
        ));
    }
}
