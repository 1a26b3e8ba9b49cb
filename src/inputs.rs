//! The command line's input files, read and checked before any work: token ids, positions,
//! offsets, embedding and position tables for `posenc encode`, the query or key tensor and
//! its positions for `posenc rope`, and the size of every array derived from their shapes.
//!
//! The `.npy` reader ([`crate::npy`]) already refuses a header whose data the file does not
//! hold. What a header alone still decides is the shape of what is built from it: an ids
//! file of shape `(0, 2^62)` holds no data at all, yet its output `[0, 2^62, dim]` could not
//! be indexed, and positions for the `[batch, len]` of an empty `(2^20, 2^20, 0, 8)` tensor
//! would take 4 TiB. So every derived shape is checked here, with its zero axes set aside
//! ([`check_shape`]), before anything of that shape is allocated or looped over, and
//! positions are built only for tensors that hold data, whose size the file vouches for.
//!
//! The CLI reads its files through these functions; tests and fuzz targets call the same
//! ones on bytes in memory ([`Source::Bytes`]).
//!
//! ```
//! use std::path::Path;
//! use posenc::inputs::{self, EncodePositions, Source};
//!
//! // A valid header declaring ids of shape (0, 2^62) and no data: refused before the
//! // output [0, 2^62, 8] or its positions exist.
//! let header = posenc::npy::header::<i64>(&[0, 1 << 62]).unwrap();
//! let ids = Source::Bytes { name: Path::new("ids.npy"), bytes: &header };
//! let err = inputs::read_ids(ids, (16, 8), None).unwrap_err();
//! assert!(matches!(err, posenc::Error::TooLarge { op: "encode", .. }), "{err}");
//!
//! let mut bytes = Vec::new();
//! posenc::npy::write(&mut bytes, ndarray::array![[3i64, 0, 5]].view()).unwrap();
//! let ids = inputs::read_ids(Source::Bytes { name: Path::new("ids.npy"), bytes: &bytes },
//!                            (16, 8), Some(0))?;
//! let positions = inputs::encode_positions(&ids, EncodePositions::LeftPadded { pad_id: 0 })?;
//! assert_eq!(positions, ndarray::array![[0u32, 0, 1]]);
//! # Ok::<(), posenc::Error>(())
//! ```

use std::fs::File;
use std::io::{self, BufReader, Cursor, Read, Seek, SeekFrom};
use std::path::Path;

use half::{bf16, f16};
use ndarray::{Array2, Array3, Array4, ArrayD, Dimension, Ix2, Ix4};
use safetensors::tensor::Dtype as StDtype;

use crate::encode::ids_to_u32;
use crate::error::{Error, Result};
use crate::model_config::ModelConfig;
use crate::npy::{self, Expected, NpyArray, NpyDtype};
use crate::positions;
use crate::rope::{MAX_JSON_BYTES, RopeSpec, Scaling};
use crate::weights::{self, Table};

pub(crate) use crate::source::open_file;
pub use crate::source::{MAX_OUTPUT_VALUES, Source, check_shape};

/// [`check_shape`] against [`MAX_OUTPUT_VALUES`].
fn check_output(op: &'static str, what: &'static str, shape: &[usize]) -> Result<()> {
    check_shape(op, what, shape, MAX_OUTPUT_VALUES, "MAX_OUTPUT_VALUES")
}

/// Reads an npy array from `source`.
fn read_npy(source: Source<'_>, expected: &Expected<'_>) -> Result<NpyArray> {
    match source {
        Source::File(path) => npy::read(path, expected),
        Source::Bytes { name, bytes } => npy::read_from(bytes, bytes.len() as u64, name, expected),
    }
}

/// A dtype the reader returned although it was not asked for it: the matches on its result
/// must be total, and this is their last arm.
fn unexpected_dtype(source: Source<'_>, what: &'static str, array: &NpyArray) -> Error {
    Error::Dtype {
        path: source.name().to_path_buf(),
        what,
        dtype: format!("'{}'", array.dtype().descr()),
        allowed: "the dtypes this input accepts".into(),
    }
}

/// An embedding table `[V, D]`: a `.safetensors` tensor (`tensor`, or the only 2-D one) or
/// a `.npy` array, as [`weights::load`] reads it.
///
/// # Errors
/// As [`weights::load`].
pub fn read_table(source: Source<'_>, tensor: Option<&str>) -> Result<Table> {
    weights::load_as(source, tensor, "weights")
}

/// A learned position table `[P, D]`, read as [`read_table`] reads embeddings; errors call
/// it `position table`.
///
/// # Errors
/// As [`weights::load`].
pub fn read_position_table(source: Source<'_>, tensor: Option<&str>) -> Result<Table> {
    weights::load_as(source, tensor, weights::POSITION_TABLE)
}

/// Token ids read and checked: a `[B, L]` batch of u32, each below the vocabulary or the
/// pad id, whose encode output `[B, L, D]` is within [`MAX_OUTPUT_VALUES`].
#[derive(Clone, Debug, PartialEq)]
pub struct Ids {
    /// The ids, `[B, L]` (`[1, L]` for a file of shape `[L]`).
    pub ids: Array2<u32>,
    /// The shape the file gave them: `[B, L]` or `[L]`.
    pub shape: Vec<usize>,
}

impl Ids {
    /// Whether the file held one sequence `[L]`: the output then drops the batch axis.
    pub fn one_sequence(&self) -> bool {
        self.shape.len() == 1
    }
}

/// `posenc encode --ids`: int32, int64 or uint32, shape `[B, L]` or `[L]`, for a table of
/// `table = (V, D)`. The output `[B, L, D]` is sized against [`MAX_OUTPUT_VALUES`] before
/// the ids are converted or anything is built from their shape; then each id must be below
/// `V`, save `pad_id`.
///
/// # Errors
/// As [`npy::read`] (naming `ids`); [`Error::TooLarge`] for an output over the limit;
/// [`Error::TokenId`] for the first id that is negative or not below `V`.
pub fn read_ids(source: Source<'_>, table: (usize, usize), pad_id: Option<u32>) -> Result<Ids> {
    let expected = Expected {
        what: "ids",
        dtypes: &[NpyDtype::I32, NpyDtype::I64, NpyDtype::U32],
        ranks: &[1, 2],
    };
    let array = read_npy(source, &expected)?;
    let shape = array.shape().to_vec();
    let (batch, len) = batch_dims(&shape);
    let (vocab, dim) = table;
    // The output has the ids' rank plus one: [len, dim] for 1-D ids.
    if shape.len() == 1 {
        check_output("encode", "the output [len, dim]", &[len, dim])?;
    } else {
        check_output("encode", "the output [batch, len, dim]", &[batch, len, dim])?;
    }
    let ids = match array {
        NpyArray::I32(a) => ids_to_u32(as_batch(a, source, "ids")?.view(), vocab, pad_id)?,
        NpyArray::I64(a) => ids_to_u32(as_batch(a, source, "ids")?.view(), vocab, pad_id)?,
        NpyArray::U32(a) => ids_to_u32(as_batch(a, source, "ids")?.view(), vocab, pad_id)?,
        other => return Err(unexpected_dtype(source, "ids", &other)),
    };
    Ok(Ids { ids, shape })
}

/// `(B, L)` of a `[B, L]` or `[L]` shape.
fn batch_dims(shape: &[usize]) -> (usize, usize) {
    match *shape {
        [len] => (1, len),
        [batch, len] => (batch, len),
        // The readers admit ranks 1 and 2 only; an empty batch is the harmless answer.
        _ => (0, 0),
    }
}

/// `[L]` as `[1, L]`; `[B, L]` as it is. Only another rank fails, which the readers admit
/// only when asked to.
fn as_batch<T>(a: ArrayD<T>, source: Source<'_>, what: &'static str) -> Result<Array2<T>> {
    let shape = a.shape().to_vec();
    a.into_shape_with_order(batch_dims(&shape)).map_err(|_| Error::Rank {
        path: source.name().to_path_buf(),
        what,
        expected: vec![1, 2],
        actual: shape,
    })
}

/// Where an encode's positions come from.
#[derive(Clone, Copy, Debug)]
pub enum EncodePositions<'a> {
    /// `--positions`: uint32, the shape of the ids as the file gave it.
    File(Source<'a>),
    /// `--offsets`: uint32 or int64 `[B]`, row `b` at `offsets[b], offsets[b] + 1, ...`.
    Offsets(Source<'a>),
    /// fairseq's `make_positions` ([`positions::fairseq`]).
    Fairseq {
        /// The padding index positions count from.
        padding_idx: u32,
    },
    /// A left-padded batch ([`positions::left_padded`]).
    LeftPadded {
        /// The pad token.
        pad_id: u32,
    },
    /// Every row counts from 0.
    Contiguous,
}

/// The positions of `ids`, `[B, L]`, read or built as `how` says. Their shape is the ids',
/// which [`read_ids`] has bounded.
///
/// # Errors
/// As [`npy::read`] for the files (naming `positions` or `offsets`); [`Error::Shape`] if a
/// file's shape does not fit the ids; [`Error::InvalidParameter`] for an offset outside u32
/// or a position past 4294967295.
pub fn encode_positions(ids: &Ids, how: EncodePositions<'_>) -> Result<Array2<u32>> {
    let (batch, len) = ids.ids.dim();
    match how {
        EncodePositions::File(source) => read_positions(source, &ids.shape),
        EncodePositions::Offsets(source) => {
            positions::from_offsets(&read_offsets(source, batch)?, len)
        }
        EncodePositions::Fairseq { padding_idx } => positions::fairseq(ids.ids.view(), padding_idx),
        EncodePositions::LeftPadded { pad_id } => positions::left_padded(ids.ids.view(), pad_id),
        EncodePositions::Contiguous => positions::contiguous_batch(batch, len),
    }
}

/// `posenc encode --positions`: uint32 of exactly `ids_shape`, as `[B, L]`.
fn read_positions(source: Source<'_>, ids_shape: &[usize]) -> Result<Array2<u32>> {
    let expected = Expected { what: "positions", dtypes: &[NpyDtype::U32], ranks: &[1, 2] };
    let array = read_npy(source, &expected)?;
    if array.shape() != ids_shape {
        return Err(Error::Shape {
            op: "encode",
            what: "positions (must match ids)",
            expected: format!("{ids_shape:?}"),
            actual: format!("{:?}", array.shape()),
        });
    }
    match array {
        NpyArray::U32(a) => as_batch(a, source, "positions"),
        other => Err(unexpected_dtype(source, "positions", &other)),
    }
}

/// `posenc encode --offsets`: uint32 or int64 `[batch]`, each a u32.
fn read_offsets(source: Source<'_>, batch: usize) -> Result<Vec<u32>> {
    let expected =
        Expected { what: "offsets", dtypes: &[NpyDtype::U32, NpyDtype::I64], ranks: &[1] };
    let array = read_npy(source, &expected)?;
    if array.shape() != [batch] {
        return Err(Error::Shape {
            op: "encode",
            what: "offsets (one per row of ids)",
            expected: format!("{:?}", [batch]),
            actual: format!("{:?}", array.shape()),
        });
    }
    match array {
        NpyArray::U32(a) => Ok(a.into_iter().collect()),
        NpyArray::I64(a) => a
            .iter()
            .enumerate()
            .map(|(index, &v)| {
                u32::try_from(v).map_err(|_| Error::InvalidParameter {
                    field: "offsets",
                    value: format!("{v} at index {index}"),
                    allowed: "0..=4294967295",
                })
            })
            .collect(),
        other => Err(unexpected_dtype(source, "offsets", &other)),
    }
}

/// A query or key tensor for `posenc rope`, in its storage type.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeTensor {
    /// `'<f4'`.
    F32(Array4<f32>),
    /// `'<f2'`.
    F16(Array4<f16>),
    /// `'<u2'` holding bfloat16 bits.
    Bf16(Array4<bf16>),
}

impl RopeTensor {
    /// The tensor's shape, in its file's axis order.
    pub fn shape(&self) -> [usize; 4] {
        let shape = match self {
            RopeTensor::F32(a) => a.dim(),
            RopeTensor::F16(a) => a.dim(),
            RopeTensor::Bf16(a) => a.dim(),
        };
        [shape.0, shape.1, shape.2, shape.3]
    }

    /// Whether it holds no values: its rotation is itself, and its positions need not exist.
    pub fn is_empty(&self) -> bool {
        self.shape().contains(&0)
    }
}

/// `posenc rope --input`: rank 4, `'<f4'`, `'<f2'` or `'<u2'` (bfloat16 bits). Its shape is
/// the output's, checked against [`MAX_OUTPUT_VALUES`] with its zero axes set aside, and so
/// bounds the `[batch, len]` of its positions whatever the layout.
///
/// # Errors
/// As [`npy::read`] (naming `input`); [`Error::TooLarge`] for a shape over the limit.
pub fn read_rope_input(source: Source<'_>) -> Result<RopeTensor> {
    let expected = Expected {
        what: "input",
        dtypes: &[NpyDtype::F32, NpyDtype::F16, NpyDtype::U16],
        ranks: &[4],
    };
    let array = read_npy(source, &expected)?;
    let shape: [usize; 4] = array.shape().try_into().unwrap_or([0; 4]);
    // The positions' [batch, len] are two of these axes, so they are bounded too.
    check_output("rope", "the output (the input's shape)", &shape)?;
    Ok(match array {
        NpyArray::F32(a) => RopeTensor::F32(rank4(a, source)?),
        NpyArray::F16(a) => RopeTensor::F16(rank4(a, source)?),
        NpyArray::U16(a) => RopeTensor::Bf16(rank4(a, source)?.mapv(bf16::from_bits)),
        other => {
            return Err(Error::Dtype {
                path: source.name().to_path_buf(),
                what: "input",
                dtype: format!("'{}'", other.dtype().descr()),
                allowed: "'<f4', '<f2' or '<u2'".into(),
            });
        }
    })
}

/// `posenc rope --scaling @FILE`: a Hugging Face `rope_scaling` object as JSON text of at
/// most [`MAX_JSON_BYTES`]. A larger regular file is refused from its size, before it is
/// read. Unlike the arrays it may come from a pipe or a descriptor (`@/dev/stdin`), whose
/// size is not known: it is read no further than one byte past the limit, and refused as
/// `more than` it. No more than the limit is ever held in memory. A FIFO that no process
/// holds open for writing is refused at once: reading it would wait for ever.
///
/// # Errors
/// [`Error::Io`] naming the input if it cannot be read, is a FIFO without a writer, or is
/// not UTF-8;
/// [`Error::RopeScaling`] naming `(json)` and the input's size (`N bytes`, or `more than N
/// bytes` for a pipe) if it is over the limit; as [`Scaling::from_hf_json`].
pub fn read_rope_scaling(source: Source<'_>) -> Result<Scaling> {
    let too_large = |field, value, allowed| Error::RopeScaling { field, value, allowed };
    Scaling::from_hf_json(&read_json(source, too_large)?)
}

/// Reads a model's own frequencies (`inv_freq`, radians per position, one per frequency),
/// each value taken exactly: float32 widened to float64 (exact), float64 as stored. For
/// [`Scaling::Explicit`] (RoPE, `count = rotary_dim / 2`) and
/// [`PeSpec::with_inv_freq`](crate::PeSpec::with_inv_freq) (tables, `count = n_freqs`).
///
/// The format is recognised by content, as [`weights::load`] does: a `.npy` (by its magic
/// string) of dtype `'<f4'` or `'<f8'`, rank 1, as a framework's buffer dumps it
/// (`np.save(path, rotary.inv_freq.cpu().numpy())`); anything else is read as
/// `.safetensors`, whose tensor `tensor` (or, unnamed, the file's only 1-D tensor) must be
/// `F32` or `F64` of rank 1 (`safetensors.torch.save_file({"inv_freq": rotary.inv_freq},
/// path)`). The number of values is checked against `count` from the header, before the
/// data is allocated or read; whether each value is one the spec accepts (finite, not
/// negative, not too large for an exact phase) is the spec's check.
///
/// ```
/// use std::path::Path;
/// use posenc::inputs::{self, Source};
///
/// let mut npy = Vec::new();
/// posenc::npy::write(&mut npy, ndarray::array![1.0f32, 0.1, 0.01].view()).unwrap();
/// let source = Source::Bytes { name: Path::new("inv_freq.npy"), bytes: &npy };
/// let read = inputs::read_inv_freq(source, None, 3)?;
/// assert_eq!(read, [1.0, f64::from(0.1f32), f64::from(0.01f32)]);
/// let err = inputs::read_inv_freq(source, None, 4).unwrap_err();
/// assert!(matches!(err, posenc::Error::Count { expected: 4, actual: 3, .. }), "{err}");
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// # Errors
/// All naming the file: as the `.npy` reader and [`weights::load`] (format, a short file,
/// [`Error::Tensor`] for a missing or ambiguous tensor); [`Error::Dtype`] for another dtype
/// (`BF16` and `F16` included: their values are not a framework's float32 buffer);
/// [`Error::Rank`] for a rank other than 1; [`Error::Count`] for a length other than `count`
/// (an empty array included); [`Error::InvalidParameter`] naming `inv_freq_tensor` if a
/// tensor is named for a `.npy` file.
pub fn read_inv_freq(source: Source<'_>, tensor: Option<&str>, count: usize) -> Result<Vec<f64>> {
    match source {
        Source::File(path) => {
            let (file, len) = open_file(path)?;
            inv_freq_from(BufReader::new(file), len, path, tensor, count)
        }
        Source::Bytes { name, bytes } => {
            inv_freq_from(Cursor::new(bytes), bytes.len() as u64, name, tensor, count)
        }
    }
}

/// How errors name a model's frequencies.
const INV_FREQ: &str = "inv_freq";

/// [`read_inv_freq`] from a seekable reader of exactly `len` bytes, named `path`.
fn inv_freq_from<R: Read + Seek>(
    mut reader: R,
    len: u64,
    path: &Path,
    tensor: Option<&str>,
    count: usize,
) -> Result<Vec<f64>> {
    let io_error = |source| Error::Io { path: path.to_path_buf(), source };
    let wrong_count = |actual: usize| Error::Count {
        path: path.to_path_buf(),
        what: INV_FREQ,
        expected: count,
        actual,
        reason: "one per frequency",
    };
    let is_npy = npy::starts_with_magic(&mut reader).map_err(io_error)?;
    if is_npy {
        if let Some(name) = tensor {
            return Err(Error::InvalidParameter {
                field: "inv_freq_tensor",
                value: name.to_string(),
                allowed: "a tensor name only for a .safetensors file (a .npy holds one array)",
            });
        }
        let expected =
            Expected { what: INV_FREQ, dtypes: &[NpyDtype::F32, NpyDtype::F64], ranks: &[1] };
        let check = |shape: &[usize]| match *shape {
            [n] if n != count => Err(wrong_count(n)),
            _ => Ok(()),
        };
        return match npy::read_checked(reader, len, path, &expected, check)? {
            NpyArray::F32(a) => Ok(a.iter().map(|&v| f64::from(v)).collect()),
            NpyArray::F64(a) => Ok(a.into_iter().collect()),
            other => Err(Error::Dtype {
                path: path.to_path_buf(),
                what: INV_FREQ,
                dtype: format!("'{}'", other.dtype().descr()),
                allowed: "'<f4' or '<f8'".into(),
            }),
        };
    }
    let header = weights::read_safetensors_header(&mut reader, len, path)?;
    let (name, info) =
        weights::choose(&header.metadata, path, tensor, 1, "--inv-freq-tensor NAME")?;
    let size = match info.dtype {
        StDtype::F32 => 4,
        StDtype::F64 => 8,
        other => {
            return Err(Error::Dtype {
                path: path.to_path_buf(),
                what: INV_FREQ,
                dtype: format!("{other:?} (tensor {name:?})"),
                allowed: "F32 or F64: the frequencies as the model holds them, not rounded to \
                          16 bits"
                    .into(),
            });
        }
    };
    if info.shape.len() != 1 {
        return Err(Error::Rank {
            path: path.to_path_buf(),
            what: INV_FREQ,
            expected: vec![1],
            actual: info.shape.clone(),
        });
    }
    if info.shape[0] != count {
        return Err(wrong_count(info.shape[0]));
    }
    // The metadata ties the byte range to the dtype and shape, and the header check the
    // range to the file; `count` values of `size` bytes are what the file holds.
    let offset = header.data_start + info.data_offsets.0 as u64;
    reader.seek(SeekFrom::Start(offset)).map_err(io_error)?;
    let mut bytes = vec![0u8; count * size];
    reader
        .read_exact(&mut bytes)
        .map_err(|e| crate::error::read_error(path, ".safetensors", len, e))?;
    Ok(if size == 4 {
        bytes
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect()
    } else {
        bytes
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect()
    })
}

/// Reads a Hugging Face model's `config.json` into the RoPE it defines
/// ([`RopeSpec::from_hf_config`]), `layer_type` selecting one of per-layer-type
/// `rope_parameters`. At most [`MAX_JSON_BYTES`] are read, as [`read_rope_scaling`] reads.
///
/// # Errors
/// [`Error::Io`] if it cannot be read; [`Error::RopeConfig`] naming `(json)` and the
/// size if it is over the limit; otherwise as [`RopeSpec::from_hf_config`]. The config
/// errors name the source ([`Error::in_config_file`]).
pub fn read_rope_config(source: Source<'_>, layer_type: Option<&str>) -> Result<RopeSpec> {
    read_rope_config_with_head_dim(source, layer_type, None)
}

/// [`read_rope_config`], with `head_dim`, when given, standing in for a head dim the config
/// does not give ([`RopeSpec::from_hf_config_with_head_dim`]).
///
/// # Errors
/// As [`read_rope_config`].
pub fn read_rope_config_with_head_dim(
    source: Source<'_>,
    layer_type: Option<&str>,
    head_dim: Option<u32>,
) -> Result<RopeSpec> {
    let too_large = |field, value, allowed| Error::RopeConfig { path: None, field, value, allowed };
    read_json(source, too_large)
        .and_then(|text| match head_dim {
            Some(d) => RopeSpec::from_hf_config_with_head_dim(&text, layer_type, d),
            None => RopeSpec::from_hf_config(&text, layer_type),
        })
        .map_err(|e| e.in_config_file(source.name()))
}

/// The text of a Hugging Face model's `config.json`, read as [`read_rope_config`] reads it
/// (at most [`MAX_JSON_BYTES`], a FIFO without a writer refused at once), for a caller that
/// reads a config once and parses it more than once (Python's module layout, then the
/// RoPE; [`Error::in_config_file`] names the file in the second parse's errors).
///
/// # Errors
/// As [`read_rope_config`] before parsing.
pub fn read_rope_config_text(source: Source<'_>) -> Result<String> {
    let too_large = |field, value, allowed| Error::RopeConfig { path: None, field, value, allowed };
    read_json(source, too_large).map_err(|e| e.in_config_file(source.name()))
}

/// Reads a Hugging Face model's `config.json` into its absolute positions
/// ([`ModelConfig::from_hf_config`]). At most [`MAX_JSON_BYTES`] are read, as
/// [`read_rope_scaling`] reads.
///
/// # Errors
/// [`Error::Io`] if it cannot be read; [`Error::PeConfig`] naming `(json)` and the size if
/// it is over the limit; otherwise as [`ModelConfig::from_hf_config`]. The config errors
/// name the source ([`Error::in_config_file`]).
pub fn read_model_config(source: Source<'_>) -> Result<ModelConfig> {
    let too_large = |field, value, allowed| Error::PeConfig { path: None, field, value, allowed };
    read_json(source, too_large)
        .and_then(|text| ModelConfig::from_hf_config(&text))
        .map_err(|e| e.in_config_file(source.name()))
}

/// The text of a JSON input of at most [`MAX_JSON_BYTES`]. A larger one is refused with
/// `too_large(field, value, allowed)`, in the parsers' words for text over the limit
/// (`(json)`, its size). A regular file's size and a slice's are known before anything is
/// read; a pipe's is not, so it is read up to one byte past the limit and said to be `more
/// than` it.
fn read_json(
    source: Source<'_>,
    too_large: impl FnOnce(String, String, String) -> Error,
) -> Result<String> {
    let io_error = |e| Error::Io { path: source.name().to_path_buf(), source: e };
    let refuse =
        |size: String| too_large("(json)".into(), size, format!("at most {MAX_JSON_BYTES} bytes"));
    let bytes = match source {
        Source::Bytes { bytes, .. } if bytes.len() > MAX_JSON_BYTES => {
            return Err(refuse(format!("{} bytes", bytes.len())));
        }
        Source::Bytes { bytes, .. } => bytes.to_vec(),
        Source::File(path) => {
            let (file, first) = open_readable(path).map_err(io_error)?;
            let metadata = file.metadata().map_err(io_error)?;
            // A pipe's or a character device's length says nothing of what it will give.
            let len = metadata.is_file().then_some(metadata.len());
            if let Some(len) = len.filter(|&len| len > MAX_JSON_BYTES as u64) {
                return Err(refuse(format!("{len} bytes")));
            }
            let hint = len.map_or(0, |len| len as usize);
            let reader = io::Cursor::new(first).chain(file);
            match read_at_most(reader, MAX_JSON_BYTES, hint).map_err(io_error)? {
                Some(bytes) => bytes,
                // A pipe, or a file that grew since its size was read.
                None => return Err(refuse(format!("more than {MAX_JSON_BYTES} bytes"))),
            }
        }
    };
    let text = String::from_utf8(bytes).map_err(|_| {
        io_error(io::Error::new(io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
    })?;
    // A byte order mark, which some editors write at the start of UTF-8 text and no JSON
    // parser takes, is no part of the JSON.
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    })
}

/// Opens a text input for reading, and the bytes already read from it (only a FIFO's). A
/// FIFO (a named pipe, or a pipe named as `/dev/stdin` or `/dev/fd/N`) is opened without
/// waiting for a writer, then read once without waiting: nothing and no writer means
/// nothing would ever come, and opening it the usual way would have waited for ever, so it
/// is refused; otherwise it is read as usual, from what that first read gave.
///
/// # Errors
/// What the system reports; `a FIFO that no process has open for writing`.
fn open_readable(path: &Path) -> io::Result<(File, Vec<u8>)> {
    let metadata = std::fs::metadata(path)?;
    // As `open_file` says it: the OS's own error for reading a directory varies by system
    // and names its code.
    if metadata.is_dir() {
        return Err(crate::source::is_a_directory());
    }
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        if metadata.file_type().is_fifo() {
            let file =
                std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
            let mut first = vec![0u8; 4096];
            let n = loop {
                match (&file).read(&mut first) {
                    // Linux and the BSDs give end of file at once when no writer holds it.
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "a FIFO that no process has open for writing: nothing would ever be \
                             read from it",
                        ));
                    }
                    Ok(n) => break n,
                    // A writer holds it and has written nothing yet.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break 0,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            first.truncate(n);
            let fd = file.as_raw_fd();
            // SAFETY: F_GETFL and F_SETFL read and set the open file's status flags; `fd`
            // belongs to `file`, open for the whole block.
            unsafe {
                let flags = libc::fcntl(fd, libc::F_GETFL);
                if flags == -1 || libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == -1 {
                    return Err(io::Error::last_os_error());
                }
            }
            return Ok((file, first));
        }
    }
    Ok((File::open(path)?, Vec::new()))
}

/// All of `reader` if it holds at most `cap` bytes, `None` if it holds more. It reads at
/// most `cap + 1` bytes and never holds more than `cap`, whatever the reader's length:
/// the buffer grows by doubling, from `hint` (a length known beforehand), up to `cap`.
fn read_at_most(mut reader: impl Read, cap: usize, hint: usize) -> io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::with_capacity(hint.min(cap));
    let mut chunk = [0u8; 8192];
    loop {
        // At the cap, one more byte tells a reader of exactly `cap` bytes from a longer one.
        let want = (cap - buf.len()).clamp(1, chunk.len());
        let n = match reader.read(&mut chunk[..want]) {
            Ok(0) => return Ok(Some(buf)),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let len = buf.len() + n;
        if len > cap {
            return Ok(None);
        }
        if len > buf.capacity() {
            let capacity = (buf.capacity() * 2).clamp(len, cap);
            buf.reserve_exact(capacity - buf.len());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// `a` as rank 4, which the reader was asked for.
fn rank4<T>(a: ArrayD<T>, source: Source<'_>) -> Result<Array4<T>> {
    let shape = a.shape().to_vec();
    a.into_dimensionality::<Ix4>().map_err(|_| Error::Rank {
        path: source.name().to_path_buf(),
        what: "input",
        expected: vec![4],
        actual: shape,
    })
}

/// The positions of a RoPE call, `[batch, len]`: read from a file, or every sequence
/// counting from one offset. The latter are built only when asked for
/// ([`RopePositions::for_tensor`] builds them only for a tensor that holds data), so their
/// size never exceeds what a file holds.
#[derive(Clone, Debug, PartialEq)]
pub enum RopePositions {
    /// Read from a file.
    Given(Array2<u32>),
    /// Read from a file, one per axis of a multimodal RoPE: `[3, batch, len]`
    /// ([`rope_positions_multimodal`]).
    Axes(Array3<u32>),
    /// Token `l` of every sequence at `offset + l`; `offset + len - 1` is a u32.
    Offset {
        /// The first position.
        offset: u32,
        /// Sequences.
        batch: usize,
        /// Tokens per sequence.
        len: usize,
    },
}

impl RopePositions {
    /// `(batch, len)`.
    pub fn dim(&self) -> (usize, usize) {
        match self {
            RopePositions::Given(a) => a.dim(),
            RopePositions::Axes(a) => (a.dim().1, a.dim().2),
            &RopePositions::Offset { batch, len, .. } => (batch, len),
        }
    }

    /// The positions to rotate `tensor` with, or `None` when it holds no data: an empty
    /// tensor is its own rotation, and its `[batch, len]` may still be 2^30 tokens that no
    /// byte of the file stands for.
    ///
    /// # Errors
    /// As [`RopePositions::to_array`].
    pub fn for_tensor(&self, tensor: &RopeTensor) -> Result<Option<Array2<u32>>> {
        if tensor.is_empty() { Ok(None) } else { self.to_array().map(Some) }
    }

    /// Refuses positions per axis without a multimodal RoPE (`multimodal` false).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `positions`, as [`RopePositions::to_array`].
    pub fn check_axes(&self, multimodal: bool) -> Result<()> {
        match self {
            RopePositions::Axes(a) if !multimodal => Err(axes_refused(a.shape())),
            _ => Ok(()),
        }
    }

    /// The positions as an array, allocated here for the offset form.
    ///
    /// # Errors
    /// For the offset form (whose fields anyone may set, where [`rope_positions`] checks
    /// them): [`Error::InvalidParameter`] naming `offset` if `offset + len - 1` passes
    /// 4294967295, and as [`positions::contiguous_batch`] for its size ([`Error::Alloc`] if
    /// the memory cannot be had); [`Error::InvalidParameter`] naming `positions` for
    /// positions per axis, which only a multimodal rotation takes.
    pub fn to_array(&self) -> Result<Array2<u32>> {
        match self {
            RopePositions::Given(a) => Ok(a.clone()),
            RopePositions::Axes(a) => Err(axes_refused(a.shape())),
            &RopePositions::Offset { offset, batch, len } => {
                check_offset(offset, len)?;
                let mut out = positions::contiguous_batch(batch, len)?;
                // offset + len - 1 is a u32 (checked above), so no position wraps.
                out.mapv_inplace(|l| offset + l);
                Ok(out)
            }
        }
    }
}

/// `posenc rope`'s positions for a tensor of `batch` sequences of `len` tokens: the `.npy`
/// `positions` (`[batch, len]` of uint32, int32 or int64, each a u32), else every sequence
/// from `offset` (default 0). Nothing of size `batch x len` is allocated for an offset.
///
/// # Errors
/// As [`npy::read`] (naming `positions`); [`Error::Shape`] if the file's shape is not
/// `[batch, len]`; [`Error::InvalidParameter`] naming `positions` for a value outside u32, or
/// `offset` if `offset + len - 1` passes 4294967295.
pub fn rope_positions(
    positions: Option<Source<'_>>,
    offset: Option<u32>,
    batch: usize,
    len: usize,
) -> Result<RopePositions> {
    if let Some(source) = positions {
        return read_rope_positions(source, batch, len).map(RopePositions::Given);
    }
    let offset = offset.unwrap_or(0);
    check_offset(offset, len)?;
    Ok(RopePositions::Offset { offset, batch, len })
}

/// The refusal of positions per axis of `shape` where one per token is taken.
fn axes_refused(shape: &[usize]) -> Error {
    Error::InvalidParameter {
        field: "positions",
        value: format!("{shape:?}, one per axis"),
        allowed: "[batch, len]: positions per axis ([3, batch, len]) only with the config of a \
                  multimodal RoPE (M-RoPE, its mrope_section)",
    }
}

/// [`rope_positions`] for a multimodal RoPE (M-RoPE): the file may also give a position
/// per axis, `[3, batch, len]` (time, height, width; [`RopePositions::Axes`]); `[batch, len]`
/// and the offset give every axis the token's one position.
///
/// # Errors
/// As [`rope_positions`], the file's shape being `[batch, len]` or `[3, batch, len]`.
pub fn rope_positions_multimodal(
    positions: Option<Source<'_>>,
    offset: Option<u32>,
    batch: usize,
    len: usize,
) -> Result<RopePositions> {
    let Some(source) = positions else { return rope_positions(None, offset, batch, len) };
    let a = read_positions_of_rank(source, &[2, 3], batch, len)?;
    Ok(match a.ndim() {
        3 => RopePositions::Axes(a.into_dimensionality().expect("rank 3")),
        _ => RopePositions::Given(a.into_dimensionality().expect("rank 2")),
    })
}

/// Refuses an offset whose last position, `offset + len - 1`, passes u32.
fn check_offset(offset: u32, len: usize) -> Result<()> {
    if len > 0 && u64::from(offset) + (len as u64 - 1) > u64::from(u32::MAX) {
        return Err(Error::InvalidParameter {
            field: "offset",
            value: format!("{offset} with {len} tokens per sequence"),
            allowed: "offset + len - 1 <= 4294967295",
        });
    }
    Ok(())
}

/// `posenc rope --positions`: `[batch, len]` of uint32, int32 or int64, each a u32.
fn read_rope_positions(source: Source<'_>, batch: usize, len: usize) -> Result<Array2<u32>> {
    let a = read_positions_of_rank(source, &[2], batch, len)?;
    Ok(a.into_dimensionality::<Ix2>().expect("a rank the reader was asked for"))
}

/// Positions of one of `ranks` (2: `[batch, len]`; 3: `[3, batch, len]`, one per axis of a
/// multimodal RoPE) of uint32, int32 or int64, each a u32.
fn read_positions_of_rank(
    source: Source<'_>,
    ranks: &'static [usize],
    batch: usize,
    len: usize,
) -> Result<ndarray::ArrayD<u32>> {
    let expected = Expected {
        what: "positions",
        dtypes: &[NpyDtype::U32, NpyDtype::I32, NpyDtype::I64],
        ranks,
    };
    let array = read_npy(source, &expected)?;
    let (want, what): (Vec<usize>, _) = match array.shape().len() {
        3 => (vec![3, batch, len], "positions ([3, batch, len]: time, height and width)"),
        _ => (vec![batch, len], "positions ([batch, len] of the input)"),
    };
    if array.shape() != want.as_slice() {
        return Err(Error::Shape {
            op: "rope",
            what,
            expected: format!("{want:?}"),
            actual: format!("{:?}", array.shape()),
        });
    }
    let checked = |a: ArrayD<i64>| -> Result<ndarray::ArrayD<u32>> {
        if let Some((at, &v)) = a.indexed_iter().find(|(_, v)| u32::try_from(**v).is_err()) {
            return Err(Error::InvalidParameter {
                field: "positions",
                value: format!("{v} at {:?}", at.slice()),
                allowed: "0..=4294967295",
            });
        }
        Ok(a.mapv(|v| v as u32))
    };
    match array {
        NpyArray::U32(a) => Ok(a),
        NpyArray::I32(a) => checked(a.mapv(i64::from)),
        NpyArray::I64(a) => checked(a),
        other => Err(Error::Dtype {
            path: source.name().to_path_buf(),
            what: "positions",
            dtype: format!("'{}'", other.dtype().descr()),
            allowed: "'<u4', '<i4' or '<i8'".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    fn bytes<T: npy::Element, D: ndarray::Dimension>(a: &ndarray::Array<T, D>) -> Vec<u8> {
        let mut out = Vec::new();
        npy::write(&mut out, a.view()).unwrap();
        out
    }

    fn source(bytes: &[u8]) -> Source<'_> {
        Source::Bytes { name: Path::new("t.npy"), bytes }
    }

    /// A header declaring `shape` of `T`, with no data.
    fn header<T: npy::Element>(shape: &[usize]) -> Vec<u8> {
        npy::header::<T>(shape).unwrap()
    }

    #[test]
    fn shapes_are_bounded_with_their_zero_axes_set_aside() {
        let ok = |shape: &[usize]| check_shape("op", "it", shape, 1 << 31, "L").is_ok();
        assert!(ok(&[]));
        assert!(ok(&[0]));
        assert!(ok(&[1 << 31]));
        assert!(ok(&[0, 1 << 31, 1]));
        assert!(ok(&[1 << 15, 0, 1 << 16]));
        assert!(!ok(&[(1 << 31) + 1]));
        assert!(!ok(&[0, 1 << 31, 2]));
        assert!(!ok(&[1 << 16, 1 << 16]));
        // Products past u64, with and without zeros.
        assert!(!ok(&[1 << 40, 1 << 40]));
        assert!(!ok(&[0, usize::MAX, usize::MAX]));
        match check_shape("encode", "the output", &[0, 1 << 62, 8], 1 << 31, "LIMIT") {
            Err(e @ Error::TooLarge { .. }) => assert_eq!(
                e.to_string(),
                "encode: the output would have shape (0, 4611686018427387904, 8), more than \
                 2147483648 values with its zero axes set aside (the limit LIMIT)"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ids_whose_output_is_too_large_are_refused_before_they_are_converted() {
        // An id out of range would be a TokenId error: the size is checked first.
        let over = bytes(&ndarray::Array2::<i64>::from_elem((1, 9), 99));
        let err = read_ids(source(&over), (16, 1 << 28), None).unwrap_err();
        assert!(
            matches!(err, Error::TooLarge { op: "encode", ref shape, .. }
            if shape == &[1, 9, 1 << 28]),
            "{err}"
        );
        for shape in [[0, (1 << 62) - 1], [(1 << 63) - 1, 0], [1 << 31, 0]] {
            let err = read_ids(source(&header::<i64>(&shape)), (16, 8), Some(0)).unwrap_err();
            assert!(matches!(err, Error::TooLarge { .. }), "{shape:?}: {err}");
        }
        // Empty within the limit: an empty batch, whose positions are empty too.
        let ids = read_ids(source(&header::<u32>(&[1 << 28, 0])), (16, 8), Some(0)).unwrap();
        assert_eq!(ids.ids.dim(), (1 << 28, 0));
        for how in [
            EncodePositions::Contiguous,
            EncodePositions::LeftPadded { pad_id: 0 },
            EncodePositions::Fairseq { padding_idx: 1 },
        ] {
            assert_eq!(encode_positions(&ids, how).unwrap().dim(), (1 << 28, 0));
        }
    }

    #[test]
    fn one_sequence_ids_and_their_positions_and_offsets() {
        let ids_bytes = bytes(&array![3u32, 4, 5]);
        let ids = read_ids(source(&ids_bytes), (16, 8), None).unwrap();
        assert!(ids.one_sequence());
        assert_eq!(ids.ids, array![[3u32, 4, 5]]);
        let given = bytes(&array![7u32, 8, 9]);
        let p = encode_positions(&ids, EncodePositions::File(source(&given))).unwrap();
        assert_eq!(p, array![[7u32, 8, 9]]);
        // The shape must be the ids' as the file gave it: [1, 3] is not [3].
        let batch = bytes(&array![[7u32, 8, 9]]);
        let err = encode_positions(&ids, EncodePositions::File(source(&batch))).unwrap_err();
        assert!(matches!(err, Error::Shape { .. }), "{err}");
        let offsets = bytes(&array![10i64]);
        let p = encode_positions(&ids, EncodePositions::Offsets(source(&offsets))).unwrap();
        assert_eq!(p, array![[10u32, 11, 12]]);
        let negative = bytes(&array![-1i64]);
        let err = encode_positions(&ids, EncodePositions::Offsets(source(&negative))).unwrap_err();
        assert!(matches!(err, Error::InvalidParameter { field: "offsets", .. }), "{err}");
    }

    #[test]
    fn rope_inputs_are_bounded_and_offsets_are_not_built_until_asked() {
        for shape in [[1 << 20, 1 << 20, 0, 8], [1 << 16, 1 << 16, 0, 8], [0, 4, 4, 1 << 40]] {
            let err = read_rope_input(source(&header::<f32>(&shape))).unwrap_err();
            assert!(matches!(err, Error::TooLarge { op: "rope", .. }), "{shape:?}: {err}");
        }
        let tensor = read_rope_input(source(&header::<f32>(&[1 << 14, 1 << 15, 0, 4]))).unwrap();
        assert!(tensor.is_empty());
        let positions = rope_positions(None, Some(5), 1 << 14, 1 << 15).unwrap();
        assert_eq!(positions.dim(), (1 << 14, 1 << 15));
        assert_eq!(positions, RopePositions::Offset { offset: 5, batch: 1 << 14, len: 1 << 15 });
        assert_eq!(positions.for_tensor(&tensor).unwrap(), None);
        let small = rope_positions(None, Some(u32::MAX - 2), 2, 3).unwrap();
        let data = RopeTensor::F32(ndarray::Array4::zeros((2, 3, 1, 2)));
        assert_eq!(small.for_tensor(&data).unwrap().unwrap().dim(), (2, 3));
        assert_eq!(
            small.to_array().unwrap(),
            array![[u32::MAX - 2, u32::MAX - 1, u32::MAX], [u32::MAX - 2, u32::MAX - 1, u32::MAX]]
        );
        // The offset form's fields are public: an offset set by hand past the check, or a
        // size no memory holds, is refused rather than wrapped or aborted on.
        let wraps = RopePositions::Offset { offset: u32::MAX, batch: 1, len: 3 };
        let err = wraps.to_array().unwrap_err();
        assert!(matches!(err, Error::InvalidParameter { field: "offset", .. }), "{err}");
        let huge = RopePositions::Offset { offset: 0, batch: 1 << 40, len: 1 << 20 };
        assert!(huge.to_array().is_err());
        let err = rope_positions(None, Some(u32::MAX - 1), 2, 3).unwrap_err();
        assert!(matches!(err, Error::InvalidParameter { field: "offset", .. }), "{err}");
        assert!(rope_positions(None, Some(u32::MAX), 7, 0).is_ok());
        let given = bytes(&array![[1i32, 2], [3, -4]]);
        let err = rope_positions(Some(source(&given)), None, 2, 2).unwrap_err();
        assert!(err.to_string().contains("-4 at [1, 1]"), "{err}");
        let bf16_bits = bytes(&ndarray::Array4::<bf16>::from_elem((1, 1, 1, 2), bf16::ONE));
        match read_rope_input(source(&bf16_bits)).unwrap() {
            RopeTensor::Bf16(a) => assert_eq!(a[[0, 0, 0, 1]], bf16::ONE),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_scaling_is_read_no_further_than_the_parser_accepts() {
        let name = Path::new("scaling.json");
        let json = br#"{"rope_type": "linear", "factor": 4.0}"#;
        let read = |bytes| read_rope_scaling(Source::Bytes { name, bytes });
        assert_eq!(
            read(json).unwrap(),
            Scaling::from_hf_json(std::str::from_utf8(json).unwrap()).unwrap()
        );
        let huge = vec![b' '; MAX_JSON_BYTES + 2];
        match read(&huge) {
            Err(Error::RopeScaling { field, value, .. }) => {
                assert_eq!((field.as_str(), value.as_str()), ("(json)", "4194306 bytes"));
            }
            other => panic!("{other:?}"),
        }
        match read(b"{\xff}") {
            Err(Error::Io { path, .. }) => assert_eq!(path, name),
            other => panic!("{other:?}"),
        }
    }

    /// A UTF-8 byte order mark (Windows editors write one) is no part of the JSON: a
    /// config or scaling file that starts with one reads as it would without.
    #[test]
    fn a_byte_order_mark_is_not_json() {
        let config = "\u{feff}{\"model_type\": \"llama\", \"head_dim\": 8}";
        let name = Path::new("config.json");
        let spec = read_rope_config(Source::Bytes { name, bytes: config.as_bytes() }, None);
        assert_eq!(spec.unwrap().head_dim(), 8);
        let scaling = "\u{feff}{\"rope_type\": \"linear\", \"factor\": 2.0}";
        let read = read_rope_scaling(Source::Bytes { name, bytes: scaling.as_bytes() });
        assert!(matches!(read, Ok(Scaling::Linear { .. })), "{read:?}");
        // Only at the start.
        let inside = "{\"model_type\": \"llama\",\u{feff} \"head_dim\": 8}";
        assert!(read_rope_config(Source::Bytes { name, bytes: inside.as_bytes() }, None).is_err());
    }

    #[test]
    fn an_oversized_json_file_is_refused_from_its_size_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.json");
        // A sparse terabyte: reading it, even up to the limit, is not what refuses it.
        File::create(&path).unwrap().set_len(1 << 40).unwrap();
        let too_large = |field, value, allowed| Error::RopeScaling { field, value, allowed };
        match read_json(Source::File(&path), too_large) {
            Err(e @ Error::RopeScaling { .. }) => assert_eq!(
                e.to_string(),
                "rope_scaling: invalid (json): 1099511627776 bytes (allowed: at most 4194304 bytes)"
            ),
            other => panic!("{other:?}"),
        }
        // The config readers word it as config errors naming the file.
        match read_model_config(Source::File(&path)) {
            Err(Error::PeConfig { path: Some(p), field, value, .. }) => {
                assert_eq!(
                    (p, field.as_str(), value.as_str()),
                    (path.clone(), "(json)", "1099511627776 bytes")
                );
            }
            other => panic!("{other:?}"),
        }
        match read_rope_config(Source::File(&path), None) {
            Err(Error::RopeConfig { path: Some(p), value, .. }) => {
                assert_eq!((p, value.as_str()), (path.clone(), "1099511627776 bytes"));
            }
            other => panic!("{other:?}"),
        }
        // At the limit, read.
        let at_limit = dir.path().join("spaces.json");
        let mut text = b"{}".to_vec();
        text.resize(MAX_JSON_BYTES, b' ');
        std::fs::write(&at_limit, &text).unwrap();
        assert_eq!(read_json(Source::File(&at_limit), too_large).unwrap().len(), MAX_JSON_BYTES);
    }

    /// A reader that gives its bytes a few at a time, as a pipe may.
    struct Trickle(std::iter::RepeatN<u8>);

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let mut n = 0;
            for (slot, byte) in buf.iter_mut().take(1000).zip(&mut self.0) {
                *slot = byte;
                n += 1;
            }
            Ok(n)
        }
    }

    #[test]
    fn a_reader_of_unknown_length_is_read_up_to_one_byte_past_the_cap_and_never_held_past_it() {
        let cap = 10_000;
        let trickle = |len| Trickle(std::iter::repeat_n(b'x', len));
        for len in [0, 1, 8192, 8193, cap - 1, cap] {
            let bytes = read_at_most(trickle(len), cap, 0).unwrap().expect("within the cap");
            assert_eq!(bytes.len(), len);
            assert!(bytes.capacity() <= cap, "{len}: capacity {}", bytes.capacity());
        }
        for len in [cap + 1, cap + 2, 1 << 20] {
            let mut reader = trickle(len);
            assert_eq!(read_at_most(&mut reader, cap, 0).unwrap(), None, "{len}");
            assert_eq!(reader.0.count(), len - cap - 1, "{len}: read one byte past the cap");
        }
        // A hint sizes the first allocation, never past the cap.
        let bytes = read_at_most(trickle(cap), cap, 1 << 30).unwrap().unwrap();
        assert_eq!((bytes.len(), bytes.capacity()), (cap, cap));
    }

    /// A safetensors file of `(name, dtype, shape, little-endian bytes)`.
    fn safetensors_bytes(tensors: &[(&str, StDtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
        let views = tensors.iter().map(|(name, dtype, shape, data)| {
            (*name, safetensors::tensor::TensorView::new(*dtype, shape.clone(), data).unwrap())
        });
        safetensors::serialize(views, None).unwrap()
    }

    fn le32(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn le64(values: &[f64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn inv_freq_is_read_exactly_from_npy_and_safetensors_of_f32_and_f64() {
        let stored = [1.0f32, 0.1, 1.0e-4, f32::MIN_POSITIVE];
        let widened: Vec<f64> = stored.iter().map(|&v| f64::from(v)).collect();
        let wide = [1.0f64, 0.1, 1.0e-4 + 1.0e-20, 1.0 / 3.0];
        let read = |bytes: &[u8], tensor| {
            read_inv_freq(Source::Bytes { name: Path::new("f"), bytes }, tensor, 4)
        };
        assert_eq!(read(&bytes(&ndarray::Array1::from(stored.to_vec())), None).unwrap(), widened);
        assert_eq!(read(&bytes(&ndarray::Array1::from(wide.to_vec())), None).unwrap(), wide);
        let one = safetensors_bytes(&[("inv_freq", StDtype::F32, vec![4], le32(&stored))]);
        assert_eq!(read(&one, None).unwrap(), widened);
        assert_eq!(read(&one, Some("inv_freq")).unwrap(), widened);
        // Several tensors: the only 1-D one is taken unnamed; a named one is found among 1-D
        // tensors of every dtype.
        let many = safetensors_bytes(&[
            ("table", StDtype::F32, vec![2, 2], le32(&[0.0; 4])),
            ("model.rotary.inv_freq", StDtype::F64, vec![4], le64(&wide)),
        ]);
        assert_eq!(read(&many, None).unwrap(), wide);
        let two = safetensors_bytes(&[
            ("a", StDtype::F64, vec![4], le64(&wide)),
            ("b", StDtype::F32, vec![4], le32(&stored)),
        ]);
        assert_eq!(read(&two, Some("a")).unwrap(), wide);
        assert_eq!(read(&two, Some("b")).unwrap(), widened);
        match read(&two, None) {
            Err(e @ Error::Tensor { rank: 1, .. }) => assert_eq!(
                e.to_string(),
                "f: 2 1-D tensors and none named (--inv-freq-tensor NAME); 1-D tensors in the \
                 file: \"a\", \"b\""
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(read(&two, Some("c")), Err(Error::Tensor { .. })));
        assert!(matches!(read(&many, Some("table")), Err(Error::Rank { actual, .. })
            if actual == [2, 2]));
        let npy = bytes(&ndarray::Array1::from(stored.to_vec()));
        assert!(matches!(
            read(&npy, Some("x")),
            Err(Error::InvalidParameter { field: "inv_freq_tensor", .. })
        ));
    }

    #[test]
    fn inv_freq_of_another_dtype_rank_or_length_is_refused_naming_it() {
        let read = |bytes: &[u8], count| {
            read_inv_freq(Source::Bytes { name: Path::new("f"), bytes }, None, count)
        };
        for dtype in [StDtype::BF16, StDtype::F16] {
            let file = safetensors_bytes(&[("inv_freq", dtype, vec![2], vec![0; 4])]);
            match read(&file, 2) {
                Err(Error::Dtype { dtype: named, allowed, .. }) => {
                    assert!(named.starts_with(&format!("{dtype:?}")), "{named}");
                    assert!(allowed.starts_with("F32 or F64"), "{allowed}");
                }
                other => panic!("{dtype:?}: {other:?}"),
            }
        }
        let halves = bytes(&ndarray::Array1::from(vec![f16::ONE; 2]));
        let err = read(&halves, 2).unwrap_err();
        assert!(err.to_string().ends_with("inv_freq has dtype '<f2'; allowed: '<f4' or '<f8'"));
        let matrix = bytes(&ndarray::Array2::<f32>::ones((2, 2)));
        assert!(matches!(read(&matrix, 2), Err(Error::Rank { .. })));
        // The count is checked from the header (tests/it/cpu/bad_input.rs shows that nothing
        // of the declared size is allocated).
        let long = safetensors_bytes(&[("w", StDtype::F64, vec![5], vec![0; 40])]);
        let npy_long = bytes(&ndarray::Array1::<f64>::zeros(5));
        for file in [&long, &npy_long] {
            match read(file, 4) {
                Err(e @ Error::Count { expected: 4, actual: 5, .. }) => assert_eq!(
                    e.to_string(),
                    "f: inv_freq holds 5 values, but 4 are needed (one per frequency)"
                ),
                other => panic!("{other:?}"),
            }
        }
        let empty = bytes(&ndarray::Array1::<f32>::zeros(0));
        assert!(matches!(read(&empty, 4), Err(Error::Count { actual: 0, .. })));
        let empty = safetensors_bytes(&[("w", StDtype::F32, vec![0], vec![])]);
        assert!(matches!(read(&empty, 4), Err(Error::Count { actual: 0, .. })));
    }

    #[test]
    fn only_regular_files_are_opened() {
        let dir = tempfile::tempdir().unwrap();
        let err = open_file(dir.path()).unwrap_err();
        assert_eq!(err.to_string(), format!("{}: is a directory", dir.path().display()));
        let missing = dir.path().join("missing.npy");
        assert!(matches!(open_file(&missing), Err(Error::Io { .. })));
        #[cfg(unix)]
        {
            // /dev/null is a character device: no size to check a header against.
            let err = open_file(Path::new("/dev/null")).unwrap_err();
            assert!(err.to_string().contains("must be a regular file"), "{err}");
        }
        let file = dir.path().join("ids.npy");
        std::fs::write(&file, bytes(&array![1u32])).unwrap();
        assert_eq!(open_file(&file).unwrap().1, 132);
        // The readers go through it, so the type is named before any parsing.
        let ids = read_ids(Source::File(dir.path()), (16, 8), None).unwrap_err();
        assert!(ids.to_string().ends_with("is a directory"), "{ids}");
        let table = read_position_table(Source::File(dir.path()), None).unwrap_err();
        assert!(table.to_string().ends_with("is a directory"), "{table}");
        // So do the JSON readers (configs, scaling files), in the same words.
        let json = read_rope_scaling(Source::File(dir.path())).unwrap_err();
        assert_eq!(json.to_string(), format!("{}: is a directory", dir.path().display()));
        // An empty path is shown quoted, not as nothing before the colon.
        let empty = read_rope_scaling(Source::File(Path::new(""))).unwrap_err();
        assert!(empty.to_string().starts_with("\"\": "), "{empty}");
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_read_as_json_only_while_a_process_holds_it_for_writing() {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c_path = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path, which outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
        let err = read_rope_scaling(Source::File(&fifo)).unwrap_err();
        assert!(err.to_string().contains("a FIFO that no process has open for writing"), "{err}");
        // A writer waiting in its open (as `echo > fifo` does) counts: its text is read. A
        // reader that came and went (a refusal before the writer's open) breaks its pipe, and
        // it writes again.
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                while let Err(e) = std::fs::write(&fifo, r#"{"rope_type": "linear", "factor": 2}"#)
                {
                    assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");
                }
            })
        };
        loop {
            match read_rope_scaling(Source::File(&fifo)) {
                Ok(scaling) => {
                    assert_eq!(scaling, Scaling::Linear { factor: 2.0 });
                    break;
                }
                // The writer's thread has not reached its open yet.
                Err(e) if e.to_string().contains("no process has open") => {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
        }
        writer.join().unwrap();
    }
}
