//! `rope`, `rope_cache` and `RopeSpec`: RoPE options resolved by `posenc::commands`, as
//! `posenc rope` and `posenc rope-cache` resolve their flags, on numpy arrays.

use std::path::PathBuf;

use half::{bf16, f16};
use ndarray::{
    Array2, Array3, Array4, ArrayView2, ArrayView3, ArrayView4, ArrayViewMut4, Ix1, IxDyn,
};
use numpy::{
    PyArray1, PyArray2, PyArray4, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray4,
    PyReadwriteArray4, PyUntypedArrayMethods,
};
use posenc::commands::{ConfigSource, InvFreq, RopeOptions, ScalingSource, with_origin};
use posenc::inputs::{self, MAX_OUTPUT_VALUES, Source};
use posenc::rope::{self as rp, Element, MultimodalRope, RopeCache, RopeSpec, Scaling};
use posenc::{Error, cpu, positions};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::ints::{IntArray, IntView};
use crate::pe::{bf16_view, bf16_view_mut, bits_of, config_source, inv_freq_of};
use crate::{Device, Failure, Noted, compute, on_device};
use posenc::placement::HostJob;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(rope, m)?)?;
    m.add_function(wrap_pyfunction!(rope_cache, m)?)?;
    m.add_function(wrap_pyfunction!(read_config_text, m)?)?;
    m.add_function(wrap_pyfunction!(module_pairing, m)?)?;
    m.add_class::<PyRopeSpec>()?;
    Ok(())
}

/// The text of a `config.json`, read as the RoPE reads a config path (at most 4 MiB, a
/// FIFO without a writer refused at once), for the Python side to read a config once:
/// it finds the family's module layout in the text, then hands the text over with the
/// path as `config_name`.
///
/// The read runs on a thread of its own while the caller waits for it with the GIL released,
/// looking for signals every 50 ms: a read that blocks (a FIFO whose writer has written
/// nothing, a terminal) would otherwise hold off Ctrl-C until it ends. An interrupted
/// read's thread is left to end on its own; what it reads is dropped.
#[pyfunction]
fn read_config_text(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    use std::sync::mpsc::{RecvTimeoutError, sync_channel};
    let (sender, receiver) = sync_channel(1);
    // A Receiver is not Sync, which waiting without the GIL needs.
    let receiver = std::sync::Mutex::new(receiver);
    let reading = path.clone();
    let started = std::thread::Builder::new().name("posenc-config".into()).spawn(move || {
        // The receiver may be gone (an interrupt): nothing is waiting for the text then.
        let _ = sender.send(inputs::read_rope_config_text(Source::File(&reading)));
    });
    if started.is_err() {
        // No thread to be had (a process limit): read here, as every other input is read.
        return compute(py, || {
            inputs::read_rope_config_text(Source::File(&path)).map_err(Failure::from)
        });
    }
    loop {
        let wait = || match receiver.lock() {
            Ok(receiver) => receiver.recv_timeout(std::time::Duration::from_millis(50)),
            Err(_) => Err(RecvTimeoutError::Disconnected),
        };
        match py.detach(wait) {
            Ok(read) => return compute(py, || read.map_err(Failure::from)),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                    "posenc: internal error (a bug; please report it): the reader of {} stopped",
                    path.display()
                )));
            }
        }
    }
}

/// The pairing of a cache in the layout the rotary module of a config's family returns
/// (`RopeSpec::module_pairing`, as `rope-cache --config` takes it), errors naming `name`, the
/// file the text was read from.
#[pyfunction]
#[pyo3(signature = (json, name = None))]
fn module_pairing(json: &str, name: Option<PathBuf>) -> PyResult<&'static str> {
    match RopeSpec::module_pairing(json) {
        Ok(rp::Pairing::Neox) => Ok("neox"),
        Ok(rp::Pairing::Gptj) => Ok("gptj"),
        Err(e) => Err(crate::to_py(in_config(e, &name))),
    }
}

/// A config's errors naming `name`: the file Python read the config's text from, or how
/// Python names a config given as no file (`config (a dict)`, ...): the library's own
/// errors say `config.json` there, a file that does not exist.
pub(crate) fn in_config(e: Error, name: &Option<PathBuf>) -> Error {
    match name {
        Some(name) => e.in_config_file(name),
        None => e,
    }
}

fn parse_pairing(text: Option<&str>) -> PyResult<Option<rp::Pairing>> {
    match text {
        None => Ok(None),
        Some("neox") => Ok(Some(rp::Pairing::Neox)),
        Some("gptj") => Ok(Some(rp::Pairing::Gptj)),
        Some(other) => Err(PyValueError::new_err(format!(
            "invalid pairing: {other:?} (allowed: \"neox\", \"gptj\")"
        ))),
    }
}

fn pairing_name(p: rp::Pairing) -> &'static str {
    match p {
        rp::Pairing::Neox => "neox",
        rp::Pairing::Gptj => "gptj",
    }
}

/// A query or key tensor from Python.
enum TensorArray<'py> {
    F32(PyReadonlyArray4<'py, f32>),
    F16(PyReadonlyArray4<'py, f16>),
    Bf16(PyReadonlyArray4<'py, u16>),
}

enum TensorView<'a> {
    F32(ArrayView4<'a, f32>),
    F16(ArrayView4<'a, f16>),
    Bf16(ArrayView4<'a, bf16>),
    /// In place (`out=x`): only the shape; the source is the destination.
    Shape([usize; 4]),
}

impl TensorView<'_> {
    fn shape(&self) -> [usize; 4] {
        let s = match self {
            Self::F32(a) => a.shape(),
            Self::F16(a) => a.shape(),
            Self::Bf16(a) => a.shape(),
            Self::Shape(s) => return *s,
        };
        [s[0], s[1], s[2], s[3]]
    }

    /// The source of a rotation into `out`: None in place.
    fn f32(&self) -> Option<ArrayView4<'_, f32>> {
        if let Self::F32(a) = self { Some(a.view()) } else { None }
    }

    fn f16(&self) -> Option<ArrayView4<'_, f16>> {
        if let Self::F16(a) = self { Some(a.view()) } else { None }
    }

    fn bf16(&self) -> Option<ArrayView4<'_, bf16>> {
        if let Self::Bf16(a) = self { Some(a.view()) } else { None }
    }
}

impl<'py> TensorArray<'py> {
    fn extract(x: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(untyped) = x.cast::<numpy::PyUntypedArray>() {
            crate::arrays::check_aligned(untyped, "x")?;
        }
        let readable = |e| crate::arrays::unreadable("x", e);
        if let Ok(a) = x.cast::<PyArray4<f32>>() {
            Ok(Self::F32(a.try_readonly().map_err(readable)?))
        } else if let Ok(a) = x.cast::<PyArray4<f16>>() {
            Ok(Self::F16(a.try_readonly().map_err(readable)?))
        } else if let Ok(a) = x.cast::<PyArray4<u16>>() {
            Ok(Self::Bf16(a.try_readonly().map_err(readable)?))
        } else {
            Err(PyValueError::new_err(
                "x must be a 4-D array of float32, float16 or bfloat16 (ml_dtypes.bfloat16, or \
                 uint16 holding its bits)",
            ))
        }
    }
}

fn parse_layout(text: &str) -> PyResult<rp::Layout> {
    match text {
        "blhd" => Ok(rp::Layout::Blhd),
        "bhld" => Ok(rp::Layout::Bhld),
        other => Err(PyValueError::new_err(format!(
            "invalid layout: {other:?} (allowed: \"blhd\" = [batch, len, heads, head_dim], \
             \"bhld\" = [batch, heads, len, head_dim])"
        ))),
    }
}

#[allow(clippy::too_many_arguments)]
fn options<'a>(
    config_path: &'a Option<PathBuf>,
    config_json: &'a Option<String>,
    layer_type: &'a Option<String>,
    pairing: Option<rp::Pairing>,
    rotary_dim: Option<u32>,
    base: Option<f64>,
    scaling_json: &'a Option<String>,
    scaling_path: &'a Option<PathBuf>,
    inv_freq: Option<InvFreq<'a>>,
    attention_factor: Option<f64>,
    seq_len: Option<u64>,
) -> RopeOptions<'a> {
    // The Python side passes at most one of each pair.
    let scaling = match (scaling_path, scaling_json) {
        (Some(path), _) => Some(ScalingSource::File(path)),
        (None, Some(text)) => Some(ScalingSource::Json(text)),
        (None, None) => None,
    };
    RopeOptions {
        config: config_source(config_path, config_json),
        layer_type: layer_type.as_deref(),
        pairing,
        rotary_dim,
        base,
        scaling,
        inv_freq,
        attention_factor,
        seq_len,
    }
}

/// `posenc rope`, numpy in and out: the tensor rotated, in its own dtype.
#[pyfunction]
#[pyo3(signature = (*, x, out = None, layout, positions, offset, config_path, config_json,
    config_name = None, layer_type, pairing, rotary_dim, base, scaling_json, scaling_path,
    inv_freq, inv_freq_path, inv_freq_tensor, attention_factor, seq_len, device))]
#[allow(clippy::too_many_arguments)]
fn rope<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    layout: &str,
    positions: Option<&Bound<'py, PyAny>>,
    offset: Option<u32>,
    config_path: Option<PathBuf>,
    config_json: Option<String>,
    config_name: Option<PathBuf>,
    layer_type: Option<String>,
    pairing: Option<String>,
    rotary_dim: Option<u32>,
    base: Option<f64>,
    scaling_json: Option<String>,
    scaling_path: Option<PathBuf>,
    inv_freq: Option<PyReadonlyArray1<'py, f64>>,
    inv_freq_path: Option<PathBuf>,
    inv_freq_tensor: Option<String>,
    attention_factor: Option<f64>,
    seq_len: Option<u64>,
    device: &str,
) -> PyResult<(Option<Bound<'py, PyAny>>, Option<String>)> {
    let device = Device::parse(device)?;
    let layout = parse_layout(layout)?;
    // `out=x` rotates x where it is: x is then borrowed once, for writing (numpy's borrow
    // checks refuse a read-only and a writable borrow of the same memory).
    let in_place = out.is_some_and(|o| o.is(x));
    if let Some(out) = out {
        // x itself where it is out (in place); the Python side copies an x whose range
        // overlaps out's without a shared element.
        let x_apart = if in_place { None } else { Some(x) };
        crate::arrays::check_apart(out, "out", &[(positions, "positions"), (x_apart, "x")])?;
    }
    let (array, mut dest) = if in_place {
        (None, Dest::InPlace(Writable::extract(x, "x (as out)")?))
    } else {
        let array = TensorArray::extract(x)?;
        let dest = match out {
            None => Dest::New,
            Some(out) => {
                let out = Writable::extract(out, "out")?;
                if !out.same_type(&array) {
                    return Err(PyValueError::new_err("out must have x's dtype"));
                }
                Dest::Into(out)
            }
        };
        (Some(array), dest)
    };
    let view = match &array {
        Some(TensorArray::F32(a)) => TensorView::F32(a.as_array()),
        Some(TensorArray::F16(a)) => TensorView::F16(a.as_array()),
        Some(TensorArray::Bf16(a)) => TensorView::Bf16(bf16_view(a.as_array())),
        // In place: the shape is all that is read before the rotation.
        None => TensorView::Shape(dest.shape()),
    };
    if let Some(o) = dest.shape_of_out()
        && o != view.shape()
    {
        return Err(PyValueError::new_err(format!(
            "out must have x's shape {:?}; got {:?}",
            view.shape(),
            o
        )));
    }
    let targets = dest.targets();
    let options = options(
        &config_path,
        &config_json,
        &layer_type,
        parse_pairing(pairing.as_deref())?,
        rotary_dim,
        base,
        &scaling_json,
        &scaling_path,
        inv_freq_of(inv_freq, &inv_freq_path, &inv_freq_tensor)?,
        attention_factor,
        seq_len,
    );
    let given_array = positions.map(|p| IntArray::<IxDyn>::extract(p, "positions")).transpose()?;
    let given = given_array.as_ref().map(IntArray::view);
    let (result, note) = compute(py, || -> Result<Noted<Option<crate::pe::Out>>, Failure> {
        if given.is_some() && offset.is_some() {
            return Err(Error::InvalidParameter {
                field: "offset",
                value: "given beside positions".into(),
                allowed: "positions or offset, not both",
            }
            .into());
        }
        let shape = view.shape();
        // The output (the input's shape, as `posenc rope` checks it) and the positions
        // before anything is made: x may be a broadcast view of any size.
        inputs::check_shape(
            "rope",
            "the output (the input's shape)",
            &shape,
            MAX_OUTPUT_VALUES,
            "MAX_OUTPUT_VALUES",
        )?;
        let scaling = options.scaling()?;
        let (batch, len, _, head_dim) = layout.dims(shape);
        let head_dim = u32::try_from(head_dim).unwrap_or(u32::MAX);
        let (config, mrope) =
            options.config_multimodal(Some(head_dim)).map_err(|e| in_config(e, &config_name))?;
        if let Some(c) = &config
            && c.head_dim() != head_dim
        {
            let name = match (&options.config, &config_name) {
                (Some(ConfigSource::File(p)), _) => p.display().to_string(),
                (_, Some(p)) => p.display().to_string(),
                _ => "config.json".into(),
            };
            return Err(Error::InvalidParameter {
                field: "head_dim",
                value: format!("{head_dim} (the last axis of x), but {} in {name}", c.head_dim()),
                allowed: "the config's head dim: the tensor's last axis is the head",
            }
            .into());
        }
        let spec = options
            .spec(head_dim, config.as_ref(), scaling, |e, h, r| {
                with_origin(e, "the last axis of x", h, r)
            })
            .map_err(|e| in_config(e, &config_name))?;
        let mrope = options.axes_for(mrope, &spec, None).map_err(|e| in_config(e, &config_name))?;
        // The output and the positions must both be had before either is made (a
        // caller's `out` is had already).
        let elements = shape.iter().product::<usize>() as u64;
        let element_bytes = if matches!(view, TensorView::F32(_)) { 4 } else { 2 };
        if matches!(targets, Targets::New) {
            posenc::alloc::check_allocation("the rope output", elements * element_bytes)?;
        }
        let axes = given.as_ref().is_some_and(|p| p.shape().len() == 3);
        let per_token = if axes { 3 } else { 1 };
        posenc::alloc::check_allocation(
            "the rope positions",
            (batch * len) as u64 * 4 * per_token,
        )?;
        let positions = match given {
            Some(p) => {
                let (want, what) = if axes {
                    (vec![3, batch, len], "positions ([3, batch, len]: time, height and width)")
                } else {
                    (vec![batch, len], "positions ([batch, len] of the input)")
                };
                if p.shape() != want.as_slice() {
                    return Err(Error::Shape {
                        op: "rope",
                        what,
                        expected: format!("{want:?}"),
                        actual: format!("{:?}", p.shape()),
                    }
                    .into());
                }
                let flat = p.to_u32s("positions")?;
                if axes {
                    let a = Array3::from_shape_vec((3, batch, len), flat).expect("[3, batch, len]");
                    let given = inputs::RopePositions::Axes(a);
                    given.check_axes(mrope.is_some())?;
                    given
                } else {
                    let a = Array2::from_shape_vec((batch, len), flat).expect("[batch, len]");
                    inputs::RopePositions::Given(a)
                }
            }
            None => inputs::RopePositions::Given(
                inputs::rope_positions(None, offset, batch, len)?.to_array()?,
            ),
        };
        let p = match (&positions, &mrope) {
            (inputs::RopePositions::Axes(a), Some(m)) => Positions::Axes(a.view(), m),
            (inputs::RopePositions::Given(a), _) => Positions::One(a.view()),
            _ => unreachable!("positions per axis come with axes, else were refused"),
        };
        let run = Run { device, spec: &spec, positions: p, layout };
        Ok(match (&view, targets) {
            (TensorView::F32(x), Targets::New) => {
                let (a, note) = run.fresh(x.view())?;
                (Some(crate::pe::Out::F32(a.into_dyn())), note)
            }
            (TensorView::F16(x), Targets::New) => {
                let (a, note) = run.fresh(x.view())?;
                (Some(crate::pe::Out::F16(a.into_dyn())), note)
            }
            (TensorView::Bf16(x), Targets::New) => {
                let (a, note) = run.fresh(x.view())?;
                (Some(crate::pe::Out::Bf16(bits_of(a).into_dyn())), note)
            }
            (TensorView::Shape(_), Targets::New) => unreachable!("a new array has its source"),
            (x, Targets::F32(o)) => (None, run.to(x.f32(), o)?),
            (x, Targets::F16(o)) => (None, run.to(x.f16(), o)?),
            (x, Targets::Bf16(o)) => (None, run.to(x.bf16(), bf16_view_mut(o))?),
        })
    })?;
    // The caller's `out` is returned by the Python side.
    Ok((result.map(|o| o.into_py(py)), note))
}

/// Where `rope` writes: a new array, a caller's `out` or x itself.
enum Dest<'py> {
    New,
    Into(Writable<'py>),
    InPlace(Writable<'py>),
}

impl Dest<'_> {
    fn shape(&self) -> [usize; 4] {
        match self {
            Self::New => [0; 4],
            Self::Into(w) | Self::InPlace(w) => w.shape(),
        }
    }

    /// The shape of a caller's `out` beside x.
    fn shape_of_out(&self) -> Option<[usize; 4]> {
        match self {
            Self::Into(w) => Some(w.shape()),
            _ => None,
        }
    }

    fn targets(&mut self) -> Targets<'_> {
        match self {
            Self::New => Targets::New,
            Self::Into(w) | Self::InPlace(w) => match w {
                Writable::F32(a) => Targets::F32(a.as_array_mut()),
                Writable::F16(a) => Targets::F16(a.as_array_mut()),
                Writable::Bf16(a) => Targets::Bf16(a.as_array_mut()),
            },
        }
    }
}

/// A caller's array to write, borrowed for writing.
enum Writable<'py> {
    F32(PyReadwriteArray4<'py, f32>),
    F16(PyReadwriteArray4<'py, f16>),
    Bf16(PyReadwriteArray4<'py, u16>),
}

impl<'py> Writable<'py> {
    fn extract(a: &Bound<'py, PyAny>, name: &str) -> PyResult<Self> {
        let writable = |e: numpy::BorrowError| crate::arrays::unwritable(name, e);
        if let Ok(untyped) = a.cast::<numpy::PyUntypedArray>() {
            crate::arrays::check_writable(untyped, name)?;
        }
        if let Ok(a) = a.cast::<PyArray4<f32>>() {
            Ok(Self::F32(a.try_readwrite().map_err(writable)?))
        } else if let Ok(a) = a.cast::<PyArray4<f16>>() {
            Ok(Self::F16(a.try_readwrite().map_err(writable)?))
        } else if let Ok(a) = a.cast::<PyArray4<u16>>() {
            Ok(Self::Bf16(a.try_readwrite().map_err(writable)?))
        } else {
            Err(PyValueError::new_err(format!(
                "{name} must be a 4-D array of float32, float16 or bfloat16 (ml_dtypes.bfloat16, \
                 or uint16 holding its bits)"
            )))
        }
    }

    fn shape(&self) -> [usize; 4] {
        let s = match self {
            Self::F32(a) => a.shape(),
            Self::F16(a) => a.shape(),
            Self::Bf16(a) => a.shape(),
        };
        [s[0], s[1], s[2], s[3]]
    }

    fn same_type(&self, x: &TensorArray<'_>) -> bool {
        matches!(
            (self, x),
            (Self::F32(_), TensorArray::F32(_))
                | (Self::F16(_), TensorArray::F16(_))
                | (Self::Bf16(_), TensorArray::Bf16(_))
        )
    }
}

/// [`Dest`]'s arrays as views, which may leave the GIL.
enum Targets<'a> {
    New,
    F32(ArrayViewMut4<'a, f32>),
    F16(ArrayViewMut4<'a, f16>),
    Bf16(ArrayViewMut4<'a, u16>),
}

/// A rotation's positions: one per token, or one per axis with a multimodal RoPE's axes.
#[derive(Clone, Copy)]
enum Positions<'a> {
    One(ArrayView2<'a, u32>),
    Axes(ArrayView3<'a, u32>, &'a MultimodalRope),
}

/// One rotation's settings, for each dtype and destination.
struct Run<'a> {
    device: Device,
    spec: &'a RopeSpec,
    positions: Positions<'a>,
    layout: rp::Layout,
}

impl Run<'_> {
    /// `x` rotated into a new array.
    fn fresh<T: Element>(&self, x: ArrayView4<'_, T>) -> Result<Noted<Array4<T>>, Failure> {
        on_device(self.device, None, rope_job::<T>(x.len()), |ctx| {
            rotate(ctx, self.spec, x.view(), self.positions, self.layout)
        })
    }

    /// `x` rotated into `out`; `x` None: `out` rotated in place.
    fn to<T: Element>(
        &self,
        x: Option<ArrayView4<'_, T>>,
        out: ArrayViewMut4<'_, T>,
    ) -> Result<Option<String>, Failure> {
        if out.is_empty() {
            return Ok(None);
        }
        let (spec, p, layout) = (self.spec, self.positions, self.layout);
        let job = rope_job::<T>(out.len());
        let bytes = (out.len() * size_of::<T>()) as u64;
        // In place on a GPU, the result comes back into an array of its own first, which
        // the CPU does not need: with `auto`, a host that cannot hold it rotates on the CPU.
        let device = match self.device {
            Device::Auto
                if x.is_none()
                    && posenc::alloc::check_allocation("the rope output", bytes).is_err() =>
            {
                Device::Cpu
            }
            device => device,
        };
        let out = std::sync::Mutex::new(out);
        let ((), note) = on_device(device, None, job, |ctx| {
            let mut out = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match (ctx, &x, p) {
                (None, Some(x), Positions::One(p)) => {
                    cpu::rope_into(spec, x.view(), out.view_mut(), p, layout)
                }
                (None, Some(x), Positions::Axes(p, m)) => {
                    cpu::rope_multimodal_into(spec, m, x.view(), out.view_mut(), p, layout)
                }
                (Some(ctx), Some(x), Positions::One(p)) => {
                    ctx.rope_into(spec, x.view(), out.view_mut(), p, layout)
                }
                (Some(ctx), Some(x), Positions::Axes(p, m)) => {
                    ctx.rope_multimodal_into(spec, m, x.view(), out.view_mut(), p, layout)
                }
                (None, None, Positions::One(p)) => {
                    cpu::rope_in_place(spec, out.view_mut(), p, layout)
                }
                (None, None, Positions::Axes(p, m)) => {
                    cpu::rope_multimodal_in_place(spec, m, out.view_mut(), p, layout)
                }
                (Some(ctx), None, p) => {
                    // Into a result of its own: `out` is written only once the device is
                    // done, so a fault that falls back to the CPU finds x as it was.
                    posenc::alloc::check_allocation("the rope output", bytes)?;
                    let rotated = match p {
                        Positions::One(p) => ctx.rope(spec, out.view(), p, layout)?,
                        Positions::Axes(p, m) => {
                            ctx.rope_multimodal(spec, m, out.view(), p, layout)?
                        }
                    };
                    out.assign(&rotated);
                    Ok(())
                }
            }
        })?;
        Ok(note)
    }
}

/// RoPE of `elements` elements of `T`, for `auto`'s cost model.
fn rope_job<T: Element>(elements: usize) -> HostJob {
    let elements = elements as u64;
    HostJob::Rope { elements, bytes: elements * size_of::<T>() as u64 }
}

fn rotate<T: Element>(
    ctx: Option<&posenc::gpu::Context>,
    spec: &RopeSpec,
    x: ArrayView4<'_, T>,
    positions: Positions<'_>,
    layout: rp::Layout,
) -> Result<Array4<T>, Error> {
    // The caller checked that the output can be allocated, before the positions were.
    if x.is_empty() {
        return Ok(x.to_owned());
    }
    match (ctx, positions) {
        (None, Positions::One(p)) => cpu::rope(spec, x, p, layout),
        (None, Positions::Axes(p, m)) => cpu::rope_multimodal(spec, m, x, p, layout),
        (Some(ctx), Positions::One(p)) => ctx.rope(spec, x, p, layout),
        (Some(ctx), Positions::Axes(p, m)) => ctx.rope_multimodal(spec, m, x, p, layout),
    }
}

/// The spec and positions of `rope-cache`, checked as the CLI checks them.
fn cache_request(
    options: &RopeOptions<'_>,
    head_dim: Option<u32>,
    len: Option<u64>,
    positions_spec: Option<&str>,
    positions: Option<IntView<'_, Ix1>>,
) -> Result<(RopeSpec, Option<MultimodalRope>, Vec<u32>), Error> {
    let (spec, mrope) = options.cache_spec(head_dim)?;
    let check = |n: u64| {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let shape = [2, n, spec.rotary_dim() as usize];
        inputs::check_shape(
            "rope-cache",
            "cos and sin",
            &shape,
            MAX_OUTPUT_VALUES,
            "MAX_OUTPUT_VALUES",
        )
    };
    let positions = match (positions_spec, positions) {
        (Some(text), _) => positions::parse_spec(text)?,
        (None, Some(p)) => {
            // The output's size first: a broadcast array of billions of positions is
            // refused before its u32 copy is made.
            check(p.len() as u64)?;
            p.to_u32s("positions")?
        }
        (None, None) => {
            let len = len.unwrap_or(0);
            check(len)?;
            positions::contiguous(len)?
        }
    };
    check(positions.len() as u64)?;
    Ok((spec, mrope, positions))
}

fn parse_cache_dtype(text: &str) -> PyResult<rp::Dtype> {
    match text {
        "f32" => Ok(rp::Dtype::F32),
        "f16" => Ok(rp::Dtype::F16),
        "bf16" => Ok(rp::Dtype::Bf16),
        other => Err(PyValueError::new_err(format!(
            "invalid dtype: {other:?} (allowed: \"f32\", \"f16\", \"bf16\")"
        ))),
    }
}

/// cos or sin in the cache's dtype, as numpy (bf16 as uint16 bits).
fn cache_array(py: Python<'_>, a: Array2<f32>, dtype: rp::Dtype) -> Bound<'_, PyAny> {
    match dtype {
        rp::Dtype::F32 => PyArray2::from_owned_array(py, a).into_any(),
        rp::Dtype::F16 => PyArray2::from_owned_array(py, a.mapv(f16::from_f32)).into_any(),
        rp::Dtype::Bf16 => {
            PyArray2::from_owned_array(py, bits_of(a.mapv(bf16::from_f32))).into_any()
        }
    }
}

/// `(cos, sin)` as numpy float32.
type CosSin<'py> = (Bound<'py, PyArray2<f32>>, Bound<'py, PyArray2<f32>>);

/// A multimodal RoPE's `(section, layout, axes)`, as Python receives it.
type MropeResult<'py> = ((u32, u32, u32), &'static str, Bound<'py, PyArray1<u8>>);

fn mrope_to_py(py: Python<'_>, mrope: Option<MultimodalRope>) -> Option<MropeResult<'_>> {
    mrope.map(|m| {
        let [t, h, w] = m.section();
        ((t, h, w), m.layout().name(), PyArray1::from_vec(py, m.axes()))
    })
}

type CacheResult<'py> = (
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyArray1<f32>>,
    f32,
    &'static str,
    Option<String>,
    Option<MropeResult<'py>>,
);

fn cache_to_py(
    py: Python<'_>,
    cache: RopeCache,
    dtype: rp::Dtype,
    pairing: rp::Pairing,
    note: Option<String>,
    mrope: Option<MultimodalRope>,
) -> CacheResult<'_> {
    let RopeCache { cos, sin, inv_freq, attention_factor } = cache;
    (
        cache_array(py, cos, dtype),
        cache_array(py, sin, dtype),
        PyArray1::from_vec(py, inv_freq),
        attention_factor,
        pairing_name(pairing),
        note,
        mrope_to_py(py, mrope),
    )
}

/// `posenc rope-cache`, numpy out: `(cos, sin, inv_freq, attention_factor, pairing, note,
/// mrope)`, `mrope` a multimodal RoPE's `(section, layout, axes)` or `None`.
#[pyfunction]
#[pyo3(signature = (*, head_dim, config_path, config_json, config_name = None, layer_type,
    pairing, rotary_dim, base, scaling_json, scaling_path, inv_freq, inv_freq_path,
    inv_freq_tensor, attention_factor, seq_len, len, positions_spec, positions, dtype, device))]
#[allow(clippy::too_many_arguments)]
fn rope_cache<'py>(
    py: Python<'py>,
    head_dim: Option<u32>,
    config_path: Option<PathBuf>,
    config_json: Option<String>,
    config_name: Option<PathBuf>,
    layer_type: Option<String>,
    pairing: Option<String>,
    rotary_dim: Option<u32>,
    base: Option<f64>,
    scaling_json: Option<String>,
    scaling_path: Option<PathBuf>,
    inv_freq: Option<PyReadonlyArray1<'py, f64>>,
    inv_freq_path: Option<PathBuf>,
    inv_freq_tensor: Option<String>,
    attention_factor: Option<f64>,
    seq_len: Option<u64>,
    len: Option<u64>,
    positions_spec: Option<String>,
    positions: Option<&Bound<'py, PyAny>>,
    dtype: &str,
    device: &str,
) -> PyResult<CacheResult<'py>> {
    let device = Device::parse(device)?;
    let dtype = parse_cache_dtype(dtype)?;
    let options = options(
        &config_path,
        &config_json,
        &layer_type,
        parse_pairing(pairing.as_deref())?,
        rotary_dim,
        base,
        &scaling_json,
        &scaling_path,
        inv_freq_of(inv_freq, &inv_freq_path, &inv_freq_tensor)?,
        attention_factor,
        seq_len,
    );
    let given_array = positions.map(|p| IntArray::<Ix1>::extract(p, "positions")).transpose()?;
    let given = given_array.as_ref().map(IntArray::view);
    type Done = (Noted<RopeCache>, rp::Pairing, Option<MultimodalRope>);
    let ((cache, note), pairing, mrope) = compute(py, || -> Result<Done, Failure> {
        let (spec, mrope, positions) =
            cache_request(&options, head_dim, len, positions_spec.as_deref(), given)
                .map_err(|e| in_config(e, &config_name))?;
        let values = 2 * positions.len() as u64 * u64::from(spec.rotary_dim());
        posenc::alloc::check_allocation("the rope cache", values.saturating_mul(8))?;
        let done = on_device(device, None, HostJob::Table { values }, |ctx| match ctx {
            None => cpu::rope_cache(&spec, &positions),
            Some(ctx) => ctx.rope_cache(&spec, &positions),
        })?;
        Ok((done, spec.pairing(), mrope))
    })?;
    Ok(cache_to_py(py, cache, dtype, pairing, note, mrope))
}

/// A RoPE configuration read once (from a config, or from options), whose cache is then
/// computed for any positions: what `posenc.hf` calls on every forward.
#[pyclass(name = "RopeSpec", module = "posenc", frozen)]
struct PyRopeSpec {
    spec: RopeSpec,
    mrope: Option<MultimodalRope>,
}

#[pymethods]
impl PyRopeSpec {
    #[new]
    #[pyo3(signature = (*, head_dim, config_path, config_json, config_name = None, layer_type,
        pairing, rotary_dim, base, scaling_json, scaling_path, inv_freq, inv_freq_path,
        inv_freq_tensor, attention_factor, seq_len))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        head_dim: Option<u32>,
        config_path: Option<PathBuf>,
        config_json: Option<String>,
        config_name: Option<PathBuf>,
        layer_type: Option<String>,
        pairing: Option<String>,
        rotary_dim: Option<u32>,
        base: Option<f64>,
        scaling_json: Option<String>,
        scaling_path: Option<PathBuf>,
        inv_freq: Option<PyReadonlyArray1<'_, f64>>,
        inv_freq_path: Option<PathBuf>,
        inv_freq_tensor: Option<String>,
        attention_factor: Option<f64>,
        seq_len: Option<u64>,
    ) -> PyResult<Self> {
        let options = options(
            &config_path,
            &config_json,
            &layer_type,
            parse_pairing(pairing.as_deref())?,
            rotary_dim,
            base,
            &scaling_json,
            &scaling_path,
            inv_freq_of(inv_freq, &inv_freq_path, &inv_freq_tensor)?,
            attention_factor,
            seq_len,
        );
        let (spec, mrope) = compute(py, || {
            cache_request(&options, head_dim, None, None, None)
                .map(|(s, m, _)| (s, m))
                .map_err(|e| Failure::from(in_config(e, &config_name)))
        })?;
        Ok(Self { spec, mrope })
    }

    /// A multimodal RoPE's `(section, layout, axes)`, else `None`.
    #[getter]
    fn mrope<'py>(&self, py: Python<'py>) -> Option<MropeResult<'py>> {
        mrope_to_py(py, self.mrope)
    }

    /// Dimensions per head.
    #[getter]
    fn head_dim(&self) -> u32 {
        self.spec.head_dim()
    }

    /// Rotated dimensions per head.
    #[getter]
    fn rotary_dim(&self) -> u32 {
        self.spec.rotary_dim()
    }

    /// `"neox"` or `"gptj"`.
    #[getter]
    fn pairing(&self) -> &'static str {
        pairing_name(self.spec.pairing())
    }

    /// The frequency base (rope_theta).
    #[getter]
    fn base(&self) -> f64 {
        self.spec.base()
    }

    /// The scaling's `rope_type` (`default` without one).
    #[getter]
    fn rope_type(&self) -> &'static str {
        self.spec.scaling().rope_type()
    }

    /// Whether the frequencies depend on the sequence length (dynamic, longrope): a cache
    /// for some positions is then valid only for calls of the same largest position.
    #[getter]
    fn depends_on_length(&self) -> bool {
        matches!(self.spec.scaling(), Scaling::Dynamic { .. } | Scaling::LongRope(_))
            && self.spec.seq_len().is_none()
    }

    /// The frequencies (float64, radians per position) and attention factor at sequence
    /// length `seq_len`.
    fn frequencies<'py>(&self, py: Python<'py>, seq_len: u64) -> (Bound<'py, PyArray1<f64>>, f32) {
        let f = self.spec.frequencies(seq_len);
        (PyArray1::from_slice(py, f.inv_freq()), f.attention_factor())
    }

    /// This spec with another pairing (the layout of its cache).
    fn with_pairing(&self, pairing: &str) -> PyResult<Self> {
        let pairing = parse_pairing(Some(pairing))?.expect("given");
        Ok(Self { spec: self.spec.clone().with_pairing(pairing), mrope: self.mrope })
    }

    /// `(cos, sin)` at `positions` (a 1-D array of any integer type), `[n, rotary_dim]`
    /// float32, the attention factor applied, laid out as the pairing says; on the CPU.
    fn cache<'py>(&self, py: Python<'py>, positions: &Bound<'py, PyAny>) -> PyResult<CosSin<'py>> {
        let spec = &self.spec;
        if let Ok(text) = positions.extract::<String>() {
            // A spec string, as `rope_cache(positions=...)` and `--positions` take it.
            let cache = compute(py, || {
                let positions = positions::parse_spec(&text)?;
                rp::check_cache_size(spec, positions.len())?;
                Ok(cpu::rope_cache(spec, &positions)?)
            })?;
            let (cos, sin) = (cache.cos, cache.sin);
            return Ok((PyArray2::from_owned_array(py, cos), PyArray2::from_owned_array(py, sin)));
        }
        let given_array = IntArray::<Ix1>::extract(positions, "positions")?;
        let given = given_array.view();
        let cache = compute(py, || {
            // The caches' size first (cpu::rope_cache's own check), before the positions'
            // u32 copy is made.
            rp::check_cache_size(spec, given.len())?;
            let positions = given.to_u32s("positions")?;
            Ok(cpu::rope_cache(spec, &positions)?)
        })?;
        Ok((PyArray2::from_owned_array(py, cache.cos), PyArray2::from_owned_array(py, cache.sin)))
    }

    fn __repr__(&self) -> String {
        format!(
            "posenc.RopeSpec(head_dim={}, rotary_dim={}, pairing={:?}, base={}, rope_type={:?})",
            self.spec.head_dim(),
            self.spec.rotary_dim(),
            pairing_name(self.spec.pairing()),
            self.spec.base(),
            self.spec.scaling().rope_type()
        )
    }
}
