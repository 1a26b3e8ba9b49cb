//! `posenc._posenc`: the Rust half of the Python package. Each function mirrors one command
//! of the `posenc` binary, taking its options as keyword arguments and numpy arrays in
//! place of files; `python/posenc/__init__.py` normalises the arguments (array-likes,
//! dicts, bfloat16) and turns the device notes into warnings.
//!
//! Three rules hold at this boundary:
//! - every computation runs with the GIL released ([`compute`]);
//! - no panic crosses it: a panic becomes a `RuntimeError` naming it as posenc's bug;
//! - every `posenc::Error` becomes one Python exception carrying the CLI's one-line
//!   message ([`to_py`]): `ValueError` for bad input, `OSError` for files and the system,
//!   `posenc.GpuError` for the device.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, OnceLock};

use posenc::placement::{AutoPolicy, HostJob, cpu_threads};
use posenc::{Error, ErrorKind, gpu};
use pyo3::create_exception;
use pyo3::exceptions::{
    PyFileNotFoundError, PyIsADirectoryError, PyMemoryError, PyOSError, PyPermissionError,
    PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;

mod alibi;
mod arrays;
mod ints;
mod pe;
mod rope;

create_exception!(
    posenc,
    GpuError,
    PyRuntimeError,
    "The GPU could not be had or failed: no adapter (device=\"gpu\"), a wgpu error, a lost \
     device, device memory exhausted, or a request past a limit of the GPU path."
);

/// The most characters of a message, as the CLI cuts its line on stderr.
const MAX_LINE_CHARS: usize = 4096;

/// Joins a message's lines, cut and with control characters escaped, as the CLI's one-line
/// report does.
fn one_line(message: &str) -> String {
    let joined =
        message.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
    posenc::message_text(&joined, MAX_LINE_CHARS)
}

/// A failure and where it happened: a `Limit` met on the GPU is the device's, one met while
/// checking the request (ALiBi's value count) is the caller's.
pub(crate) struct Failure {
    error: Error,
    on_gpu: bool,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Self { error, on_gpu: false }
    }
}

/// `work` with its error mapped by `named` (a config's errors naming where the config came
/// from: `rope::in_config`).
pub(crate) fn naming<T>(
    named: impl FnOnce(Error) -> Error + Send,
    work: impl FnOnce() -> Result<T, Failure> + Send,
) -> impl FnOnce() -> Result<T, Failure> + Send {
    move || work().map_err(|f| Failure { error: named(f.error), on_gpu: f.on_gpu })
}

/// The Python exception of a posenc error, with the CLI's message.
pub(crate) fn to_py(failure: impl Into<Failure>) -> PyErr {
    let Failure { error, on_gpu } = failure.into();
    let message = one_line(&error.to_string());
    match (&error, error.kind()) {
        (Error::Io { source, .. }, _) => match source.kind() {
            std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err(message),
            std::io::ErrorKind::PermissionDenied => PyPermissionError::new_err(message),
            std::io::ErrorKind::IsADirectory => PyIsADirectoryError::new_err(message),
            _ => PyOSError::new_err(message),
        },
        (Error::Alloc { .. }, _) => PyMemoryError::new_err(message),
        (_, ErrorKind::Device) => GpuError::new_err(message),
        (_, ErrorKind::Limit) if on_gpu => GpuError::new_err(message),
        _ => PyValueError::new_err(message),
    }
}

/// The process that imported the module and started rayon's global pool.
static IMPORTED_IN: OnceLock<u32> = OnceLock::new();

/// Whether this process is a child forked after the import (`os.fork`, `multiprocessing`'s
/// `fork` start method, a DataLoader's workers).
fn forked() -> bool {
    IMPORTED_IN.get().is_some_and(|&pid| pid != std::process::id())
}

/// The CPU path's pool in a forked child: the child has none of its parent's threads, so
/// a parallel call into rayon's global pool (whose registry the child inherited) would
/// wait for ever. Each forked process builds its own pool on its first call and runs every
/// computation inside it. A grandchild forked from a child builds its own again. The lock
/// is never held while threads start, so a fork from another thread meanwhile does not
/// leave the child a lock nobody releases.
static FORKED_POOL: Mutex<Option<(u32, Arc<rayon::ThreadPool>)>> = Mutex::new(None);

fn forked_pool() -> PyResult<Arc<rayon::ThreadPool>> {
    let pid = std::process::id();
    let lock = || FORKED_POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((owner, pool)) = lock().as_ref()
        && *owner == pid
    {
        return Ok(pool.clone());
    }
    // The parent's count (RAYON_NUM_THREADS, else the cores, at most four per core: the
    // cap the parent's pool had, which a bare builder would not keep); else one thread.
    let pool = match rayon::ThreadPoolBuilder::new()
        .num_threads(posenc::cpu::threads::pool_size())
        .build()
        .or_else(|_| rayon::ThreadPoolBuilder::new().num_threads(1).build())
    {
        Ok(pool) => Arc::new(pool),
        Err(e) => {
            return Err(PyRuntimeError::new_err(format!(
                "posenc: no thread could start in this forked process: {e}"
            )));
        }
    };
    let mut held = lock();
    match held.as_ref() {
        // Another thread of this process built one first: use it (this one is dropped).
        Some((owner, kept)) if *owner == pid => Ok(kept.clone()),
        _ => {
            // The parent's pool, if this process inherited one from a forked parent, is
            // left as it is: dropping it would wait for threads this process does not have.
            if let Some(old) = held.replace((pid, pool.clone())) {
                std::mem::forget(old);
            }
            Ok(pool)
        }
    }
}

/// Runs `work` with the GIL released, turning a panic into a `RuntimeError`; in a forked
/// child, inside that process's own pool ([`forked_pool`]), unless the calling thread is a
/// worker of a pool already (the parent's calling thread, when no worker thread could start
/// there, is the only worker of a pool of its own, and still is in the child).
pub(crate) fn compute<T: Send>(
    py: Python<'_>,
    work: impl FnOnce() -> Result<T, Failure> + Send,
) -> PyResult<T> {
    let in_a_pool = rayon::current_thread_index().is_some();
    let pool = if forked() && !in_a_pool { Some(forked_pool()?) } else { None };
    let run = || match &pool {
        Some(pool) => pool.install(|| catch_unwind(AssertUnwindSafe(work))),
        None => catch_unwind(AssertUnwindSafe(work)),
    };
    match py.detach(run) {
        Ok(result) => result.map_err(to_py),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(PyRuntimeError::new_err(format!(
                "posenc: internal error (a bug; please report it): {}",
                one_line(&what)
            )))
        }
    }
}

/// `device=`: where the fast paths run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Device {
    Cpu,
    Gpu,
    Auto,
}

impl Device {
    pub(crate) fn parse(text: &str) -> PyResult<Self> {
        Self::parse_among(text, r#""auto", "cpu", "gpu""#)
    }

    /// [`Device::parse`] for a function that also takes `"reference"` (its caller's own
    /// route), which a refusal then names among the allowed values.
    pub(crate) fn parse_beside_reference(text: &str) -> PyResult<Self> {
        Self::parse_among(text, r#""auto", "cpu", "gpu", "reference""#)
    }

    fn parse_among(text: &str, allowed: &str) -> PyResult<Self> {
        match text {
            "cpu" => Ok(Device::Cpu),
            "gpu" => Ok(Device::Gpu),
            "auto" => Ok(Device::Auto),
            other => Err(PyValueError::new_err(format!(
                "invalid device: {other:?} (allowed: {allowed})"
            ))),
        }
    }
}

/// The process's GPU context, opened on first use and shared by every call (opening one
/// compiles nothing but costs an adapter and device request), with the process that opened
/// it. A lost device is dropped and the next call opens a new one; a forked child does not
/// use its parent's (a driver's state does not survive a fork) and opens its own.
static CONTEXT: Mutex<Option<(u32, Arc<gpu::Context>)>> = Mutex::new(None);

/// The held context if this process opened it and its device is not lost. One inherited
/// from a parent process is forgotten, not dropped: its destruction would call into a
/// driver whose threads this process does not have.
fn held_context(held: &mut Option<(u32, Arc<gpu::Context>)>) -> Option<Arc<gpu::Context>> {
    if held.as_ref().is_some_and(|(pid, _)| *pid != std::process::id()) {
        std::mem::forget(held.take());
    }
    held.as_ref().map(|(_, ctx)| ctx).filter(|c| c.lost_reason().is_none()).cloned()
}

fn open_gpu(budget: Option<u64>) -> Result<Arc<gpu::Context>, Error> {
    let lock = || CONTEXT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let held = held_context(&mut lock());
    let ctx = match held {
        Some(ctx) => ctx,
        None => {
            // Opened without the lock (opening takes a while, and a process forked from
            // another thread meanwhile would inherit the lock held); two threads opening at
            // once keep the first one stored.
            let opened = Arc::new(gpu::Options::from_env().and_then(|o| gpu::Context::new(&o))?);
            let mut held = lock();
            match held_context(&mut held) {
                Some(ctx) => ctx,
                None => {
                    *held = Some((std::process::id(), opened.clone()));
                    opened
                }
            }
        }
    };
    Ok(match budget {
        Some(bytes) => Arc::new(ctx.with_memory_budget(bytes)),
        None => ctx,
    })
}

/// The result of a computation and, when `device="auto"` computed on the CPU after all, the
/// note the CLI prints in that case (the Python side issues it as a `posenc.DeviceWarning`).
pub(crate) type Noted<T> = (T, Option<String>);

/// What a function with `out=` returns to the Python side: its new array, or None when
/// it wrote the caller's `out`, and its note.
pub(crate) type MaybeNew<'py, A> = PyResult<Noted<Option<Bound<'py, A>>>>;

/// Whether the process's GPU context is open (the cost model then leaves out an open).
fn gpu_is_open() -> bool {
    // Only the cost model asks: a lock another thread holds (or held at a fork) answers no.
    let mut held = match CONTEXT.try_lock() {
        Ok(held) => held,
        Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return false,
    };
    held_context(&mut held).is_some()
}

/// Runs `work`, whose result is `job`, where `device` says, as the CLI's `on_device`. Every
/// result goes to a NumPy array, so `auto` by default (`POSENC_AUTO` unset or `cost`) takes
/// the CPU unless the cost model expects the GPU to deliver `job` sooner and the adapter
/// that opens is a hardware one (`posenc::placement`); with `POSENC_AUTO=gpu`, the GPU
/// whenever one opens. On the GPU, `auto` computes on the CPU after all when none opens or
/// the work meets a device fault there (lost, out of memory, past a limit of the GPU
/// path); the CPU gives the same bits.
pub(crate) fn on_device<T>(
    device: Device,
    budget: Option<u64>,
    job: HostJob,
    work: impl Fn(Option<&gpu::Context>) -> Result<T, Error>,
) -> Result<Noted<T>, Failure> {
    let on_gpu = |error| Failure { error, on_gpu: true };
    // posenc's GPU variables are checked whichever device the model picks, as the CLI does.
    let cost = device == Device::Auto
        && gpu::Options::from_env().and(AutoPolicy::from_env())? == AutoPolicy::Cost;
    if cost && !job.prefers_gpu(cpu_threads(), gpu_is_open()) {
        return Ok((work(None)?, None));
    }
    let note = match device {
        Device::Cpu => return Ok((work(None)?, None)),
        Device::Gpu => {
            let ctx = open_gpu(budget).map_err(on_gpu)?;
            return work(Some(&ctx)).map(|v| (v, None)).map_err(on_gpu);
        }
        Device::Auto => match open_gpu(budget) {
            // A software adapter runs the kernels on these same cores, slower than the CPU
            // path.
            Ok(ctx) if cost && ctx.is_software() => return Ok((work(None)?, None)),
            Ok(ctx) => match work(Some(&ctx)) {
                Err(
                    e
                    @ (Error::DeviceLost { .. } | Error::OutOfMemory { .. } | Error::Limit { .. }),
                ) => format!("the GPU failed, computing on the CPU instead: {e}"),
                Err(e) => return Err(on_gpu(e)),
                Ok(v) => return Ok((v, None)),
            },
            // No adapter, none that opens, or one below what the kernels need (its limits
            // under `gpu::limit_floor`): the CPU, as the command line does.
            Err(
                e @ (Error::NoAdapter { .. } | Error::RequestDevice { .. } | Error::Limit { .. }),
            ) => {
                format!("computing on the CPU: {e}")
            }
            Err(e) => return Err(on_gpu(e)),
        },
    };
    Ok((work(None)?, Some(one_line(&note))))
}

/// Every GPU adapter wgpu can see, as the JSON `posenc devices --json` prints.
#[pyfunction]
fn devices_json(py: Python<'_>) -> PyResult<String> {
    compute(py, || {
        // posenc's GPU variables are checked first, as `posenc devices` checks them: a
        // WGPU_BACKEND naming no backend would list nothing.
        gpu::Options::from_env()?;
        serde_json::to_string(&gpu::adapters())
            .map_err(|e| Failure::from(Error::Gpu { op: "devices", message: format!("JSON: {e}") }))
    })
}

/// The hint the CLI gives when no adapter is found under the current `WGPU_BACKEND`.
#[pyfunction]
fn no_adapter_hint() -> &'static str {
    gpu::no_adapter_hint(std::env::var("WGPU_BACKEND").ok().as_deref())
}

/// Panics, for the test that no panic crosses into Python.
#[pyfunction]
fn _panic_for_test(py: Python<'_>) -> PyResult<()> {
    compute(py, || -> Result<(), Failure> { panic!("deliberate panic from posenc's test") })
}

/// Loads NumPy's C API now, at import. rust-numpy loads it on first use and panics if that
/// fails, and it runs Python code (an import) that a pending `KeyboardInterrupt` interrupts:
/// a Ctrl-C during a process's first call became a `PanicException`. Here the failure is
/// the import's exception: the interrupt as itself, anything else an `ImportError`.
fn load_numpy_api(py: Python<'_>) -> PyResult<()> {
    py.check_signals()?;
    let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        numpy::PyArray1::<f32>::zeros(py, 0, false);
    }));
    let Err(payload) = loaded else {
        return Ok(());
    };
    let text = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    if text.contains("KeyboardInterrupt") {
        return Err(pyo3::exceptions::PyKeyboardInterrupt::new_err(()));
    }
    Err(pyo3::exceptions::PyImportError::new_err(format!("NumPy's C API: {text}")))
}

#[pymodule]
fn _posenc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    load_numpy_api(m.py())?;
    m.add("GpuError", m.py().get_type::<GpuError>())?;
    // rayon's global pool, started with the threads that can start (rayon's own start
    // panics where they cannot); the note, if any, becomes a warning on import.
    m.add("THREADS_NOTE", posenc::cpu::threads::start_threads().note())?;
    IMPORTED_IN.get_or_init(std::process::id);
    m.add("ACCURACY_BOUND", posenc::ACCURACY_BOUND)?;
    m.add("MAX_OUTPUT_VALUES", posenc::inputs::MAX_OUTPUT_VALUES)?;
    m.add("MAX_ALIBI_HEADS", posenc::alibi::MAX_HEADS)?;
    m.add("MAX_FREQUENCIES", posenc::rope::MAX_FACTORS)?;
    m.add_function(wrap_pyfunction!(devices_json, m)?)?;
    m.add_function(wrap_pyfunction!(no_adapter_hint, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    pe::register(m)?;
    rope::register(m)?;
    alibi::register(m)?;
    Ok(())
}
