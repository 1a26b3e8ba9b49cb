//! `table` and `encode`: the sinusoid's convention read from keyword arguments by
//! `posenc::commands`, as `posenc table` and `posenc encode` read it from their flags, and
//! the fused encode. The tests compare every path with the binary.

use std::path::{Path, PathBuf};
use std::sync::PoisonError;

use half::{bf16, f16};
use ndarray::{Array2, ArrayView2, Ix1, Ix2};
use numpy::{PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2};
use posenc::commands::{self, ConfigSource, InvFreq, PeOptions};
use posenc::encode::{Dtype, Embeddings, EncodeOptions, Encoded, Scale};
use posenc::inputs::{self, EncodePositions, Ids, MAX_OUTPUT_VALUES, Source};
use posenc::model_config::{ModelConfig, ModelPositions};
use posenc::{Error, Frequencies, PeSpec, Variant, cpu, positions, reference};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::ints::IntArray;
use crate::rope::in_config;
use crate::{Device, Failure, Noted, compute, on_device};
use posenc::placement::HostJob;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(table, m)?)?;
    m.add_function(wrap_pyfunction!(encode, m)?)?;
    Ok(())
}

/// A config given as a file or as JSON text (the Python side passes one of them).
pub(crate) fn config_source<'a>(
    path: &'a Option<PathBuf>,
    text: &'a Option<String>,
) -> Option<ConfigSource<'a>> {
    match (path, text) {
        (Some(p), _) => Some(ConfigSource::File(p)),
        (None, Some(t)) => Some(ConfigSource::Text(t)),
        (None, None) => None,
    }
}

pub(crate) fn inv_freq_of<'a>(
    values: Option<PyReadonlyArray1<'a, f64>>,
    path: &'a Option<PathBuf>,
    tensor: &'a Option<String>,
) -> PyResult<Option<InvFreq<'a>>> {
    Ok(match (values, path) {
        (Some(v), _) => {
            crate::arrays::check_aligned(v.as_untyped(), "inv_freq")?;
            Some(InvFreq::Values(v.as_array().to_vec()))
        }
        (None, Some(p)) => Some(InvFreq::File(p, tensor.as_deref())),
        (None, None) => None,
    })
}

fn parse_variant(text: Option<&str>) -> PyResult<Option<Variant>> {
    text.map(|t| t.parse::<Variant>().map_err(crate::to_py)).transpose()
}

fn parse_frequencies(text: &str) -> PyResult<Frequencies> {
    match text {
        "exact" => Ok(Frequencies::Exact),
        "f32" => Ok(Frequencies::F32),
        other => Err(PyValueError::new_err(format!(
            "invalid frequencies: {other:?} (allowed: \"exact\", \"f32\")"
        ))),
    }
}

/// `padding_idx=`: an int, or `"none"`.
fn parse_padding_idx(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Option<u32>>> {
    let Some(value) = value else { return Ok(None) };
    if let Ok(text) = value.extract::<String>() {
        if text == "none" {
            return Ok(Some(None));
        }
    } else if let Ok(n) = value.extract::<u32>() {
        return Ok(Some(Some(n)));
    }
    Err(PyValueError::new_err(format!(
        "invalid padding_idx: {} (allowed: \"none\" or an integer in 0..=4294967295)",
        value.repr()?
    )))
}

/// The table's output size check, as `posenc table` makes it.
fn check_table_size(rows: u64, dim: u32) -> Result<(), Error> {
    let rows = usize::try_from(rows).unwrap_or(usize::MAX);
    inputs::check_shape(
        "table",
        "the output",
        &[rows, dim as usize],
        MAX_OUTPUT_VALUES,
        "MAX_OUTPUT_VALUES",
    )
}

/// `posenc table`, numpy out: `[positions, dim]` float32.
#[pyfunction]
#[pyo3(signature = (*, dim, len, positions_spec, positions, config_path, config_json,
    config_name = None, variant,
    frequencies, inv_freq, inv_freq_path, inv_freq_tensor, base, min_timescale, max_timescale,
    start_index, padding_idx, device, gpu_memory_budget, out = None))]
#[allow(clippy::too_many_arguments)]
fn table<'py>(
    py: Python<'py>,
    dim: Option<u32>,
    len: Option<u64>,
    positions_spec: Option<String>,
    positions: Option<&Bound<'py, PyAny>>,
    config_path: Option<PathBuf>,
    config_json: Option<String>,
    config_name: Option<PathBuf>,
    variant: Option<String>,
    frequencies: &str,
    inv_freq: Option<PyReadonlyArray1<'py, f64>>,
    inv_freq_path: Option<PathBuf>,
    inv_freq_tensor: Option<String>,
    base: Option<f64>,
    min_timescale: Option<f64>,
    max_timescale: Option<f64>,
    start_index: Option<u32>,
    padding_idx: Option<&Bound<'py, PyAny>>,
    device: &str,
    gpu_memory_budget: Option<u64>,
    out: Option<&Bound<'py, PyAny>>,
) -> crate::MaybeNew<'py, PyArray2<f32>> {
    if let Some(out) = out {
        crate::arrays::check_apart(out, "out", &[(positions, "positions")])?;
    }
    let mut out_array = out.map(crate::arrays::f32_out::<ndarray::Ix2>).transpose()?;
    let out_view = out_array.as_mut().map(|o| o.as_array_mut());
    let reference_path = device == "reference";
    let device = if reference_path { Device::Cpu } else { Device::parse_beside_reference(device)? };
    let source = config_source(&config_path, &config_json);
    let options = PeOptions {
        variant: parse_variant(variant.as_deref())?,
        frequencies: parse_frequencies(frequencies)?,
        inv_freq: inv_freq_of(inv_freq, &inv_freq_path, &inv_freq_tensor)?,
        base,
        min_timescale,
        max_timescale,
        start_index,
        padding_idx: parse_padding_idx(padding_idx)?,
    };
    let given_array = positions.map(|p| IntArray::<Ix1>::extract(p, "positions")).transpose()?;
    let given = given_array.as_ref().map(IntArray::view);
    let named = |e| in_config(e, &config_name);
    let (table, note) = compute(
        py,
        crate::naming(named, || -> Result<Noted<Option<Array2<f32>>>, Failure> {
            if gpu_memory_budget.is_some() && (device == Device::Cpu) {
                return Err(off_gpu(
                    "gpu_memory_budget",
                    if reference_path { "reference" } else { "cpu" },
                )
                .into());
            }
            let config = source.map(|s| options.config(s)).transpose()?;
            let path = source.as_ref().and_then(ConfigSource::path);
            let from_config = config.map(|c| commands::table_spec(&c, path)).transpose()?;
            let dim = dim.or(from_config.as_ref().map(PeSpec::dim)).unwrap_or(512);
            let spec = options.spec(dim, from_config.as_ref())?;
            let positions = match (&positions_spec, given) {
                (Some(text), _) => positions::parse_spec(text)?,
                (None, Some(p)) => {
                    // The output's size first: a broadcast array of billions of positions is
                    // refused before its u32 copy is made.
                    check_table_size(p.len() as u64, spec.dim())?;
                    p.to_u32s("positions")?
                }
                (None, None) => {
                    let len = len.unwrap_or(8);
                    check_table_size(len, spec.dim())?;
                    positions::contiguous(len)?
                }
            };
            check_table_size(positions.len() as u64, spec.dim())?;
            let shape = [positions.len(), spec.dim() as usize];
            if let Some(o) = &out_view {
                crate::arrays::check_out_shape("table", &shape, o.shape())?;
            }
            let bytes = positions.len() as u64 * u64::from(spec.dim()) * 4;
            // Into a caller's `out`: the CPU's table writes it where it is (a strided one
            // through a table of its own); the reference and the GPU make theirs first.
            let out_view = std::sync::Mutex::new(out_view);
            let into_out = |table: Array2<f32>| -> Option<Array2<f32>> {
                let mut out = out_view.lock().unwrap_or_else(PoisonError::into_inner);
                match out.as_mut() {
                    Some(o) => {
                        o.assign(&table);
                        None
                    }
                    None => Some(table),
                }
            };
            if reference_path {
                posenc::alloc::check_allocation("the table", bytes)?;
                return Ok((into_out(reference::table_f32(&spec, &positions)), None));
            }
            let job = HostJob::Table { values: positions.len() as u64 * u64::from(spec.dim()) };
            on_device(device, gpu_memory_budget, job, |ctx| match ctx {
                None => {
                    let mut out = out_view.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(o) = out.as_mut() {
                        if !o.is_standard_layout() {
                            posenc::alloc::check_allocation("the table", bytes)?;
                        }
                        cpu::table_into(&spec, &positions, o.view_mut())?;
                        return Ok(None);
                    }
                    posenc::alloc::check_allocation("the table", bytes)?;
                    Ok(Some(cpu::table(&spec, &positions)))
                }
                Some(ctx) => ctx.table(&spec, &positions).map(into_out),
            })
        }),
    )?;
    Ok((table.map(|t| PyArray2::from_owned_array(py, t)), note))
}

/// A GPU-only option beside a device that opens none, refused as the CLI refuses it.
pub(crate) fn off_gpu(flag: &str, device: &str) -> Error {
    Error::InvalidParameter {
        field: "device",
        value: format!("{device} (with --{})", flag.replace('_', "-")),
        allowed: "gpu or auto with a flag for the GPU; the others open none",
    }
}

/// An embedding or position table handed over from Python: float32, float16, or uint16
/// holding bfloat16 bits.
enum TableArray<'py> {
    F32(PyReadonlyArray2<'py, f32>),
    F16(PyReadonlyArray2<'py, f16>),
    Bf16(PyReadonlyArray2<'py, u16>),
}

impl<'py> TableArray<'py> {
    fn extract(value: &Bound<'py, PyAny>, what: &str) -> PyResult<Self> {
        use numpy::{PyArray2, PyArrayMethods};
        if let Ok(untyped) = value.cast::<numpy::PyUntypedArray>() {
            crate::arrays::check_aligned(untyped, what)?;
        }
        let readable = |e| crate::arrays::unreadable(what, e);
        if let Ok(a) = value.cast::<PyArray2<f32>>() {
            return Ok(Self::F32(a.try_readonly().map_err(readable)?));
        }
        if let Ok(a) = value.cast::<PyArray2<f16>>() {
            return Ok(Self::F16(a.try_readonly().map_err(readable)?));
        }
        if let Ok(a) = value.cast::<PyArray2<u16>>() {
            return Ok(Self::Bf16(a.try_readonly().map_err(readable)?));
        }
        Err(PyValueError::new_err(format!(
            "{what} must be a 2-D array of float32, float16 or bfloat16 (ml_dtypes.bfloat16, \
             or uint16 holding its bits)"
        )))
    }

    fn view(&self) -> TableView<'_> {
        match self {
            Self::F32(a) => TableView::F32(a.as_array()),
            Self::F16(a) => TableView::F16(a.as_array()),
            Self::Bf16(a) => TableView::Bf16(bf16_view(a.as_array())),
        }
    }
}

/// A table's rows as the encode takes them, bfloat16 reinterpreted from uint16 in place.
enum TableView<'a> {
    F32(ArrayView2<'a, f32>),
    F16(ArrayView2<'a, f16>),
    Bf16(ArrayView2<'a, bf16>),
}

impl TableView<'_> {
    fn reborrow(&self) -> TableView<'_> {
        match self {
            Self::F32(a) => TableView::F32(a.view()),
            Self::F16(a) => TableView::F16(a.view()),
            Self::Bf16(a) => TableView::Bf16(a.view()),
        }
    }

    fn embeddings(&self) -> Embeddings<'_> {
        match self {
            Self::F32(a) => Embeddings::F32(a.view()),
            Self::F16(a) => Embeddings::F16(a.view()),
            Self::Bf16(a) => Embeddings::Bf16(a.view()),
        }
    }
}

/// uint16 bits as bfloat16, without a copy, in any strides: half's `bf16` is
/// `#[repr(transparent)]` over `u16`, so each element is read as the bits it holds. (A copy
/// of a strided view, as this was, could be of a broadcast view of terabytes, made before
/// any size was checked.)
pub(crate) fn bf16_view<'a, D: ndarray::Dimension>(
    a: ndarray::ArrayView<'a, u16, D>,
) -> ndarray::ArrayView<'a, bf16, D> {
    const { assert!(size_of::<bf16>() == 2 && align_of::<bf16>() == align_of::<u16>()) };
    // SAFETY: `bf16` is `#[repr(transparent)]` over `u16` (same size and alignment, every
    // bit pattern a value), so the raw view addresses exactly `a`'s elements, with `a`'s
    // strides in elements; the result borrows them for `a`'s lifetime, read-only.
    unsafe { a.raw_view().cast::<bf16>().deref_into_view() }
}

/// [`bf16_view`], writable: the exclusive borrow of the bits passes to the result.
pub(crate) fn bf16_view_mut<'a, D: ndarray::Dimension>(
    mut a: ndarray::ArrayViewMut<'a, u16, D>,
) -> ndarray::ArrayViewMut<'a, bf16, D> {
    // SAFETY: as `bf16_view`; `a` is consumed, so the result is the only view of its
    // elements for `a`'s lifetime.
    unsafe { a.raw_view_mut().cast::<bf16>().deref_into_view_mut() }
}

/// Where the table comes from: an array, or a file read as `--weights` (`--tensor`) is.
enum TableSource<'py> {
    Array(TableArray<'py>),
    File(PathBuf, Option<String>),
}

impl TableSource<'_> {
    fn view(&self) -> TableSourceView<'_> {
        match self {
            Self::Array(a) => TableSourceView::Array(a.view()),
            Self::File(p, t) => TableSourceView::File(p, t.as_deref()),
        }
    }
}

/// [`TableSource`] as views, which may leave the GIL.
enum TableSourceView<'a> {
    Array(TableView<'a>),
    File(&'a Path, Option<&'a str>),
}

/// The output as numpy: float32, float16, or uint16 bfloat16 bits (moved, not copied).
pub(crate) enum Out {
    F32(ndarray::ArrayD<f32>),
    F16(ndarray::ArrayD<f16>),
    Bf16(ndarray::ArrayD<u16>),
}

impl Out {
    fn of(encoded: Encoded, one_sequence: bool) -> Self {
        fn shaped<T>(a: ndarray::Array3<T>, one_sequence: bool) -> ndarray::ArrayD<T> {
            let a = a.into_dyn();
            if one_sequence { a.index_axis_move(ndarray::Axis(0), 0) } else { a }
        }
        match encoded {
            Encoded::F32(a) => Out::F32(shaped(a, one_sequence)),
            Encoded::F16(a) => Out::F16(shaped(a, one_sequence)),
            Encoded::Bf16(a) => Out::Bf16(shaped(bits_of(a), one_sequence)),
        }
    }

    pub(crate) fn into_py(self, py: Python<'_>) -> Bound<'_, PyAny> {
        match self {
            Out::F32(a) => numpy::PyArrayDyn::from_owned_array(py, a).into_any(),
            Out::F16(a) => numpy::PyArrayDyn::from_owned_array(py, a).into_any(),
            Out::Bf16(a) => numpy::PyArrayDyn::from_owned_array(py, a).into_any(),
        }
    }
}

/// bfloat16 values as their bits, reusing the allocation.
pub(crate) fn bits_of<D: ndarray::Dimension>(a: ndarray::Array<bf16, D>) -> ndarray::Array<u16, D> {
    let a = if a.is_standard_layout() { a } else { a.as_standard_layout().into_owned() };
    let dim = a.raw_dim();
    let (values, offset) = a.into_raw_vec_and_offset();
    debug_assert!(offset.unwrap_or(0) == 0);
    let bits: Vec<u16> = bytemuck::allocation::cast_vec(values);
    ndarray::Array::from_shape_vec(dim, bits).expect("the same shape over the same values")
}

fn parse_dtype(text: &str) -> PyResult<Dtype> {
    match text {
        "f32" => Ok(Dtype::F32),
        "f16" => Ok(Dtype::F16),
        "bf16" => Ok(Dtype::Bf16),
        other => Err(PyValueError::new_err(format!(
            "invalid out_dtype: {other:?} (allowed: \"f32\", \"f16\", \"bf16\")"
        ))),
    }
}

/// What `scale=` allows, as the command line's `--scale` words it.
const SCALES: &str = "\"none\", \"sqrt\" or a number finite in float32 (|scale| <= 3.4028235e38)";

/// `scale=`: None (not given), "none", "sqrt" or a number finite in float32.
fn parse_scale(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Scale>> {
    let Some(value) = value else { return Ok(None) };
    if let Ok(text) = value.extract::<String>() {
        return match text.as_str() {
            "none" => Ok(Some(Scale::None)),
            "sqrt" => Ok(Some(Scale::SqrtDim)),
            _ => Err(PyValueError::new_err(format!("invalid scale: {text:?} (allowed: {SCALES})"))),
        };
    }
    match value.extract::<f64>() {
        Ok(v) if v.is_finite() && (v as f32).is_finite() => Ok(Some(Scale::Value(v as f32))),
        _ => Err(PyValueError::new_err(format!(
            "invalid scale: {} (allowed: {SCALES})",
            shown(value)
        ))),
    }
}

/// `value` as an error names it, bounded: an integer past 128 bits by its size (its digits
/// may be thousands, past what Python's `repr` converts), anything else by a `repr` cut to 80
/// characters.
fn shown(value: &Bound<'_, PyAny>) -> String {
    if let Ok(bits) = value.call_method0("bit_length").and_then(|b| b.extract::<u64>())
        && bits > 128
    {
        return format!("an integer of {bits} bits");
    }
    let text = value.repr().map_or_else(|_| "(a value without a repr)".into(), |r| r.to_string());
    if text.chars().count() <= 80 {
        text
    } else {
        format!("{}...", text.chars().take(77).collect::<String>())
    }
}

/// `posenc encode`, numpy in and out.
#[pyfunction]
#[pyo3(signature = (*, weights, weights_path, tensor, ids, one_sequence, positions, offsets,
    pad_id, scale, config_path, config_json, config_name = None, variant, frequencies, inv_freq,
    inv_freq_path,
    inv_freq_tensor, base, min_timescale, max_timescale, start_index, padding_idx,
    position_table, position_table_path, position_tensor, out_dtype, device,
    gpu_memory_budget, out = None))]
#[allow(clippy::too_many_arguments)]
fn encode<'py>(
    py: Python<'py>,
    weights: Option<&Bound<'py, PyAny>>,
    weights_path: Option<PathBuf>,
    tensor: Option<String>,
    ids: &Bound<'py, PyAny>,
    one_sequence: bool,
    positions: Option<&Bound<'py, PyAny>>,
    offsets: Option<&Bound<'py, PyAny>>,
    pad_id: Option<u32>,
    scale: Option<&Bound<'py, PyAny>>,
    config_path: Option<PathBuf>,
    config_json: Option<String>,
    config_name: Option<PathBuf>,
    variant: Option<String>,
    frequencies: &str,
    inv_freq: Option<PyReadonlyArray1<'py, f64>>,
    inv_freq_path: Option<PathBuf>,
    inv_freq_tensor: Option<String>,
    base: Option<f64>,
    min_timescale: Option<f64>,
    max_timescale: Option<f64>,
    start_index: Option<u32>,
    padding_idx: Option<&Bound<'py, PyAny>>,
    position_table: Option<&Bound<'py, PyAny>>,
    position_table_path: Option<PathBuf>,
    position_tensor: Option<String>,
    out_dtype: &str,
    device: &str,
    gpu_memory_budget: Option<u64>,
    out: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Option<Bound<'py, PyAny>>, Option<String>)> {
    let device = Device::parse(device)?;
    let out_dtype = parse_dtype(out_dtype)?;
    if let Some(out) = out {
        let inputs = [
            (weights, "weights"),
            (Some(ids), "ids"),
            (positions, "positions"),
            (offsets, "offsets"),
            (position_table, "position_table"),
        ];
        crate::arrays::check_apart(out, "out", &inputs)?;
    }
    let mut out_array = out.map(|o| OutArray::extract(o, out_dtype)).transpose()?;
    let out_view = out_array.as_mut().map(OutArray::view_mut);
    let scale = parse_scale(scale)?;
    let table_source = match (weights, weights_path) {
        (Some(w), _) => TableSource::Array(TableArray::extract(w, "weights")?),
        (None, Some(p)) => TableSource::File(p, tensor),
        (None, None) => return Err(PyValueError::new_err("weights is required")),
    };
    let learned_source = match (position_table, position_table_path) {
        (Some(t), _) => Some(TableSource::Array(TableArray::extract(t, "position_table")?)),
        (None, Some(p)) => Some(TableSource::File(p, position_tensor.clone())),
        (None, None) => None,
    };
    let position_tensor_given = position_tensor.is_some();
    let sinusoid_flags = variant.is_some()
        || frequencies != "exact"
        || base.is_some()
        || min_timescale.is_some()
        || max_timescale.is_some()
        || start_index.is_some()
        || padding_idx.is_some()
        || inv_freq.is_some()
        || inv_freq_path.is_some();
    let source = config_source(&config_path, &config_json);
    let options = PeOptions {
        variant: parse_variant(variant.as_deref())?,
        frequencies: parse_frequencies(frequencies)?,
        inv_freq: inv_freq_of(inv_freq, &inv_freq_path, &inv_freq_tensor)?,
        base,
        min_timescale,
        max_timescale,
        start_index,
        padding_idx: parse_padding_idx(padding_idx)?,
    };
    let ids_array = IntArray::<Ix2>::extract(ids, "ids")?;
    let ids = ids_array.view();
    if one_sequence && ids.dim().0 != 1 {
        // The Python side passes one row for ids of rank 1.
        return Err(PyValueError::new_err(format!(
            "one_sequence needs ids of one row, got shape {:?}",
            ids.shape()
        )));
    }
    let table_source = table_source.view();
    let learned_source = learned_source.as_ref().map(TableSource::view);
    let positions = positions.map(|p| IntArray::<Ix2>::extract(p, "positions")).transpose()?;
    let offsets = offsets.map(|o| IntArray::<Ix1>::extract(o, "offsets")).transpose()?;
    let given_positions = positions.as_ref().map(IntArray::view);
    let given_offsets = offsets.as_ref().map(IntArray::view);
    let named = |e| in_config(e, &config_name);
    let (encoded, note) = compute(
        py,
        crate::naming(named, || -> Result<Noted<Option<Encoded>>, Failure> {
            if gpu_memory_budget.is_some() && device == Device::Cpu {
                return Err(off_gpu("gpu_memory_budget", "cpu").into());
            }
            if learned_source.is_some() && sinusoid_flags {
                return Err(Error::InvalidParameter {
                field: "position_table",
                value: "given beside the sinusoid's options".into(),
                allowed: "position_table alone: a learned table replaces the sinusoid (variant, \
                          frequencies, base, timescales, start_index, padding_idx, inv_freq)",
            }
            .into());
            }
            commands::refuse_without(
                position_tensor_given,
                "position_tensor",
                "--position-tensor",
                learned_source.is_some(),
                "--position-table",
            )?;
            let config = source.map(|s| options.config(s)).transpose()?;
            let config_path = source.as_ref().and_then(ConfigSource::path);
            if let Some(c) = &config {
                commands::check_encode_config(c, config_path.as_deref(), learned_source.is_some())?;
                commands::check_encode_pad_id(c, pad_id)?;
            }
            let scale = match (&config, scale) {
                (_, Some(scale)) => scale,
                (Some(c), None) => c.required_scale().map_err(|e| in_config(e, &config_path))?,
                (None, None) => Scale::default(),
            };
            let loaded;
            let (table_name, table): (String, TableView<'_>) = match &table_source {
                TableSourceView::Array(a) => ("weights".into(), a.reborrow()),
                TableSourceView::File(path, tensor) => {
                    loaded = inputs::read_table(Source::File(path), *tensor)?;
                    (path.display().to_string(), loaded_view(&loaded))
                }
            };
            let width = table.embeddings().dim().1;
            if let Some(c) = config.as_ref().filter(|c| c.dim() as usize != width) {
                let e = Error::PeConfig {
                    path: None,
                    field: "d_model".into(),
                    value: c.dim().to_string(),
                    allowed: format!("{width}, the width of the table in {table_name}"),
                };
                return Err(in_config(e, &config_path).into());
            }
            let config_spec = config.as_ref().and_then(ModelConfig::spec);
            let offset = match config.as_ref().map(ModelConfig::positions) {
                Some(ModelPositions::Learned { offset }) => offset,
                _ => 0,
            };
            let pad_id = pad_id.or(config.as_ref().and_then(ModelConfig::pad_id));
            let learned_loaded;
            let learned: Option<TableView<'_>> = match &learned_source {
                Some(TableSourceView::Array(a)) => Some(a.reborrow()),
                Some(TableSourceView::File(path, tensor)) => {
                    learned_loaded = inputs::read_position_table(Source::File(path), *tensor)?;
                    Some(loaded_view(&learned_loaded))
                }
                None => None,
            };
            let dim = u32::try_from(width).unwrap_or(u32::MAX);
            let spec = match &learned {
                Some(p) if p.embeddings().dim().1 != width => {
                    return Err(Error::Shape {
                        op: "encode",
                        what: "position table width vs embedding width",
                        expected: width.to_string(),
                        actual: p.embeddings().dim().1.to_string(),
                    }
                    .into());
                }
                Some(_) => None,
                None => Some(options.spec(dim, config_spec.as_ref()).map_err(|e| match e {
                    Error::InvalidParameter { field: "dim", allowed, .. } => {
                        Error::InvalidParameter {
                            field: "dim",
                            value: format!(
                                "{width} (the width of the table in {table_name}, variant {})",
                                options.variant(config_spec.as_ref())
                            ),
                            allowed,
                        }
                    }
                    other => other,
                })?),
            };
            let options = EncodeOptions { scale, pad_id, out_dtype };
            options.scale.factor(width)?;

            let (batch, len) = ids.dim();
            inputs::check_shape(
                "encode",
                "the output [batch, len, dim]",
                &[batch, len, width],
                MAX_OUTPUT_VALUES,
                "MAX_OUTPUT_VALUES",
            )?;
            let vocab = table.embeddings().dim().0;
            let shape = if one_sequence { vec![len] } else { vec![batch, len] };
            let ids = Ids { ids: ids.ids_to_u32(vocab, pad_id)?, shape: shape.clone() };
            let fairseq_padding = spec.as_ref().and_then(PeSpec::padding_idx);
            let mut positions = match (given_positions, given_offsets) {
                (Some(p), _) => {
                    if p.dim() != (batch, len) {
                        let actual = if one_sequence { vec![p.len()] } else { p.shape().to_vec() };
                        return Err(Error::Shape {
                            op: "encode",
                            what: "positions (must match ids)",
                            expected: format!("{shape:?}"),
                            actual: format!("{actual:?}"),
                        }
                        .into());
                    }
                    let flat = p.to_u32s("positions")?;
                    Array2::from_shape_vec((batch, len), flat).expect("the ids' shape")
                }
                (None, Some(o)) => {
                    if o.len() != batch {
                        return Err(Error::Shape {
                            op: "encode",
                            what: "offsets (one per row of ids)",
                            expected: format!("{:?}", [batch]),
                            actual: format!("{:?}", o.shape()),
                        }
                        .into());
                    }
                    posenc::positions::from_offsets(&o.to_u32s("offsets")?, len)?
                }
                (None, None) => {
                    let how = match (fairseq_padding, pad_id) {
                        (Some(padding_idx), _) => EncodePositions::Fairseq { padding_idx },
                        (None, Some(pad_id)) => EncodePositions::LeftPadded { pad_id },
                        (None, None) => EncodePositions::Contiguous,
                    };
                    let config_padding = config_spec.as_ref().and_then(PeSpec::padding_idx);
                    inputs::encode_positions(&ids, how).map_err(|e| match e {
                        Error::InvalidParameter { field: "padding_idx", value, allowed }
                            if config_padding.is_some() && config_padding == fairseq_padding =>
                        {
                            Error::PeConfig {
                                path: config_path.clone(),
                                field: "pad_token_id".into(),
                                value,
                                allowed: allowed.replace("padding_idx", "pad_token_id"),
                            }
                        }
                        other => other,
                    })?
                }
            };
            let model_type = config.as_ref().map_or("", |c| c.model_type());
            let rows = learned.as_ref().map(|p| p.embeddings().dim().0);
            commands::learned_rows(&mut positions, offset, model_type, rows)?;
            if let Some(o) = &out_view {
                let expected: &[usize] =
                    if one_sequence { &[len, width][..] } else { &[batch, len, width][..] };
                crate::arrays::check_out_shape("encode", expected, o.shape())?;
            }
            let bytes = (batch * len * width) as u64 * out_dtype.size() as u64;
            // The CPU's sinusoid writes a caller's `out` in C order where it is; every other
            // path makes its result first, then copies it into `out`.
            let writes_out =
                out_view.as_ref().is_some_and(OutView::is_standard_layout) && learned.is_none();
            let had = || posenc::alloc::check_allocation("the encode output", bytes);
            let device = match device {
                Device::Cpu if writes_out => device,
                // `auto` writing `out` on the CPU needs no output of its own: where one cannot
                // be had for the GPU's result, the CPU computes.
                Device::Auto if writes_out => {
                    if had().is_ok() {
                        device
                    } else {
                        Device::Cpu
                    }
                }
                device => {
                    had()?;
                    device
                }
            };
            let (ids, positions, embeddings) =
                (ids.ids.view(), positions.view(), table.embeddings());
            let job = HostJob::encode(positions, width as u64, bytes, spec.is_some());
            let out_view = std::sync::Mutex::new(out_view);
            let (encoded, note) =
                on_device(device, gpu_memory_budget, job, |ctx| match (ctx, &spec, &learned) {
                    (None, Some(spec), _) if writes_out => {
                        let encoder = cpu::Encoder::one_off(spec.clone());
                        let mut out = out_view.lock().unwrap_or_else(PoisonError::into_inner);
                        let out = out.as_mut().expect("writes_out: out is given");
                        out.encode_into(&encoder, embeddings, ids, positions, &options)?;
                        Ok(None)
                    }
                    (None, Some(spec), _) => {
                        cpu::encode(spec, embeddings, ids, positions, &options).map(Some)
                    }
                    (None, None, Some(p)) => {
                        cpu::encode_learned(p.embeddings(), embeddings, ids, positions, &options)
                            .map(Some)
                    }
                    (Some(ctx), Some(spec), _) => {
                        let table = ctx.upload_table(embeddings)?;
                        ctx.encode(spec, &table, ids, positions, &options).map(Some)
                    }
                    (Some(ctx), None, Some(p)) => {
                        let p = ctx.upload_position_table(p.embeddings())?;
                        let table = ctx.upload_table(embeddings)?;
                        ctx.encode(&p, &table, ids, positions, &options).map(Some)
                    }
                    (_, None, None) => unreachable!("a spec unless a position table was given"),
                })?;
            let mut out_view = out_view.into_inner().unwrap_or_else(PoisonError::into_inner);
            match (out_view.as_mut(), encoded) {
                // Written once the result is had: a failure leaves `out` as it was.
                (Some(o), Some(encoded)) => {
                    o.assign(encoded);
                    Ok((None, note))
                }
                (_, encoded) => Ok((encoded, note)),
            }
        }),
    )?;
    // The caller's `out` is returned by the Python side.
    Ok((encoded.map(|e| Out::of(e, one_sequence).into_py(py)), note))
}

/// A caller's `out` for the encode, borrowed for writing: of `out_dtype`'s type (bfloat16
/// as uint16 bits), rank 2 (one sequence) or 3.
enum OutArray<'py> {
    F32(numpy::PyReadwriteArrayDyn<'py, f32>),
    F16(numpy::PyReadwriteArrayDyn<'py, f16>),
    Bf16(numpy::PyReadwriteArrayDyn<'py, u16>),
}

impl<'py> OutArray<'py> {
    fn extract(out: &Bound<'py, PyAny>, dtype: Dtype) -> PyResult<Self> {
        use numpy::{PyArrayDyn, PyArrayMethods};
        let writable = |e: numpy::BorrowError| crate::arrays::unwritable("out", e);
        if let Ok(untyped) = out.cast::<numpy::PyUntypedArray>() {
            crate::arrays::check_writable(untyped, "out")?;
        }
        let array = match dtype {
            Dtype::F32 => out
                .cast::<PyArrayDyn<f32>>()
                .ok()
                .map(|a| a.try_readwrite().map(Self::F32).map_err(writable)),
            Dtype::F16 => out
                .cast::<PyArrayDyn<f16>>()
                .ok()
                .map(|a| a.try_readwrite().map(Self::F16).map_err(writable)),
            Dtype::Bf16 => out
                .cast::<PyArrayDyn<u16>>()
                .ok()
                .map(|a| a.try_readwrite().map(Self::Bf16).map_err(writable)),
        };
        array.unwrap_or_else(|| {
            Err(PyValueError::new_err(format!(
                "out must be an array of out_dtype's type ({})",
                match dtype {
                    Dtype::F32 => "float32",
                    Dtype::F16 => "float16",
                    Dtype::Bf16 => "bfloat16: ml_dtypes.bfloat16, or uint16 holding its bits",
                }
            )))
        })
    }

    fn view_mut(&mut self) -> OutView<'_> {
        match self {
            Self::F32(a) => OutView::F32(a.as_array_mut()),
            Self::F16(a) => OutView::F16(a.as_array_mut()),
            Self::Bf16(a) => OutView::Bf16(a.as_array_mut()),
        }
    }
}

/// [`OutArray`]'s view, which may leave the GIL.
enum OutView<'a> {
    F32(ndarray::ArrayViewMutD<'a, f32>),
    F16(ndarray::ArrayViewMutD<'a, f16>),
    Bf16(ndarray::ArrayViewMutD<'a, u16>),
}

impl OutView<'_> {
    fn shape(&self) -> &[usize] {
        match self {
            Self::F32(a) => a.shape(),
            Self::F16(a) => a.shape(),
            Self::Bf16(a) => a.shape(),
        }
    }

    fn is_standard_layout(&self) -> bool {
        match self {
            Self::F32(a) => a.is_standard_layout(),
            Self::F16(a) => a.is_standard_layout(),
            Self::Bf16(a) => a.is_standard_layout(),
        }
    }

    /// `[batch, len, dim]` of any rank-2 (one sequence) or rank-3 view.
    fn three<T>(a: ndarray::ArrayViewMutD<'_, T>) -> ndarray::ArrayViewMut3<'_, T> {
        let a = if a.ndim() == 2 { a.insert_axis(ndarray::Axis(0)) } else { a };
        a.into_dimensionality().expect("rank 2 or 3, its shape checked")
    }

    /// The encode written into this view (in standard layout) by `encoder`.
    fn encode_into(
        &mut self,
        encoder: &cpu::Encoder,
        table: Embeddings<'_>,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
    ) -> Result<(), Error> {
        match self {
            Self::F32(a) => {
                encoder.encode_into(table, ids, positions, options, Self::three(a.view_mut()))
            }
            Self::F16(a) => {
                encoder.encode_into(table, ids, positions, options, Self::three(a.view_mut()))
            }
            Self::Bf16(a) => {
                let values = bf16_view_mut(Self::three(a.view_mut()));
                encoder.encode_into(table, ids, positions, options, values)
            }
        }
    }

    /// A result of this view's type and shape written into it.
    fn assign(&mut self, encoded: Encoded) {
        match (self, encoded) {
            (Self::F32(a), Encoded::F32(e)) => Self::three(a.view_mut()).assign(&e),
            (Self::F16(a), Encoded::F16(e)) => Self::three(a.view_mut()).assign(&e),
            (Self::Bf16(a), Encoded::Bf16(e)) => {
                bf16_view_mut(Self::three(a.view_mut())).assign(&e)
            }
            _ => unreachable!("the output's type is out_dtype, as out's is"),
        }
    }
}

fn loaded_view(table: &posenc::weights::Table) -> TableView<'_> {
    match table.embeddings() {
        Embeddings::F32(a) => TableView::F32(a),
        Embeddings::F16(a) => TableView::F16(a),
        Embeddings::Bf16(a) => TableView::Bf16(a),
    }
}
