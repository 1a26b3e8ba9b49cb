//! The GPU path: adapter choice, the device context, and host wrappers of the kernels in
//! `shaders/`. Every kernel but the benchmarks' copy has a CPU twin in [`crate::cpu`] that
//! gives the same bits; the hidden `layout` module describes what the host binds to each.

mod alibi;
mod encode;
mod faults;
#[doc(hidden)]
pub mod layout;
mod memory;
mod options;
mod pass;
mod pending;
mod rope;
mod runner;
mod table;
mod timing;
mod wait;

use std::sync::{Arc, Mutex};

pub use alibi::AlibiParams;
pub use alibi::AlibiPass;
#[cfg(feature = "timing")]
pub use encode::decode::DecodeTiming;
pub use encode::pass::{
    ARENA_COPY_BYTES, DEFAULT_CACHED_POSITIONS, EncodePass, EncodePassDescriptor, EncodePassParams,
    Faults,
};
pub use encode::{
    EncodeParams, EncodeX4Params, GpuPositionTable, GpuTable, MAX_GROUP_TOKENS, NarrowParams,
    PE_CACHE_BUDGET, PositionSource,
};
pub use faults::{FAULT_INJECT_ENV, SUBMISSION_TIMEOUT};
pub use options::{
    ACCESS_PATTERN_ENV, AccessPattern, LOOP_BOUNDS_ENV, MAX_ROPE_HEAD_GROUP, MEMORY_BUDGET_ENV,
    Options, PE_CACHE_ENV, ROPE_HEADS_ENV, SPIN_WAIT, SPIN_WAIT_ENV, TIMESTAMPS_ENV, UNITS_ENV,
};
pub use pass::Positions;
pub use pending::{MappedEncode, PendingEncode};
pub use rope::pass::{
    ROPE_PASS_CACHE_MAX_BYTES, ROPE_PASS_CACHED_POSITIONS, RopePass, RopePassDescriptor,
    RopePassParams,
};
pub use rope::{RopeCsParams, RopeParams, RopeX4Params};
pub use table::TableParams;
pub use timing::CopyParams;
#[cfg(feature = "timing")]
pub use timing::{CopyMethod, TimingSource};

use memory::{DeviceBuffer, Memory};

use crate::error::{Error, Result};

/// The hint given whenever no adapter can be found.
#[cfg(target_os = "linux")]
pub const NO_ADAPTER_HINT: &str = "install a GPU driver, or Mesa's software Vulkan driver \
    (`apt-get install mesa-vulkan-drivers`); WGPU_BACKEND and WGPU_ADAPTER_NAME narrow the choice";
/// The hint given whenever no adapter can be found (Mesa's packages are Linux's).
#[cfg(not(target_os = "linux"))]
pub const NO_ADAPTER_HINT: &str = "install or update the GPU driver (Metal on macOS and DX12 \
    on Windows come with the system); WGPU_BACKEND and WGPU_ADAPTER_NAME narrow the choice";

/// [`NO_ADAPTER_HINT`] where `WGPU_BACKEND` leaves GL and not Vulkan, whose software driver
/// would not help.
#[cfg(target_os = "linux")]
const NO_GL_ADAPTER_HINT: &str = "install a GPU driver, or Mesa's EGL and software GL drivers \
    (`apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri`); WGPU_BACKEND and \
    WGPU_ADAPTER_NAME narrow the choice";
/// [`NO_ADAPTER_HINT`] for GL where Mesa's packages are not the system's.
#[cfg(not(target_os = "linux"))]
const NO_GL_ADAPTER_HINT: &str = "install or update the GPU driver's OpenGL (or leave GL out \
    of WGPU_BACKEND); WGPU_BACKEND and WGPU_ADAPTER_NAME narrow the choice";

/// The hint where adapters exist but none has the name `WGPU_ADAPTER_NAME` asks for.
const NO_NAMED_ADAPTER_HINT: &str = "WGPU_ADAPTER_NAME matches part of an adapter's name, \
    case aside: take one of those listed, or unset it";

/// The hint where `WGPU_BACKEND` leaves neither of the backends whose drivers serve
/// Linux and the BSDs.
#[cfg(all(unix, not(target_vendor = "apple")))]
const NO_BACKEND_HERE_HINT: &str = "WGPU_BACKEND leaves out vulkan and gl, the backends \
    of this platform: unset it, or name one of them";

/// The hint for no adapter under `backend` (`WGPU_BACKEND`'s value, if set):
/// [`NO_ADAPTER_HINT`]; where `backend` leaves GL and not Vulkan, Mesa's GL drivers; on
/// Linux and the BSDs, where it leaves neither, that.
pub fn no_adapter_hint(backend: Option<&str>) -> &'static str {
    use wgpu::Backends;
    match backend.map(Backends::from_comma_list) {
        Some(b) if b.contains(Backends::GL) && !b.contains(Backends::VULKAN) => NO_GL_ADAPTER_HINT,
        #[cfg(all(unix, not(target_vendor = "apple")))]
        Some(b) if !b.intersects(Backends::VULKAN | Backends::GL) => NO_BACKEND_HERE_HINT,
        _ => NO_ADAPTER_HINT,
    }
}

/// wgpu's reason for finding no adapter without its list of the backends this build or
/// `WGPU_BACKEND` left out ("metal not requested", "dx12 support not compiled in", ...),
/// which named every backend of every platform.
fn brief_reason(reason: &str) -> String {
    let Some((head, causes)) = reason.split_once("; ") else {
        return reason.to_string();
    };
    let kept: Vec<&str> = causes
        .split(", ")
        .filter(|c| !c.ends_with("not requested") && !c.ends_with("not compiled in"))
        .collect();
    if kept.is_empty() { head.to_string() } else { format!("{head}: {}", kept.join(", ")) }
}

/// Serialises opening devices (instance, adapter search, device, pipelines) across the
/// process. On an H100 with NVIDIA's Vulkan driver (580.159.04), test threads each opening
/// a context at once hung for minutes, where opening them one after another takes a
/// fraction of a second each; a context is opened rarely, so the lock costs nothing that
/// matters.
///
/// Held across the `.await`s of [`Context::open`]: natively wgpu answers those futures at
/// once (the guard never waits on another future), and a blocking driver start is what it
/// serialises. On the web there is one thread and the browser opens devices itself, and
/// two pages' `open` futures may interleave on it, so there is no lock.
#[cfg(not(target_arch = "wasm32"))]
fn opening() -> Option<std::sync::MutexGuard<'static, ()>> {
    static OPENING: Mutex<()> = Mutex::new(());
    Some(OPENING.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
}

#[cfg(target_arch = "wasm32")]
fn opening() -> Option<std::sync::MutexGuard<'static, ()>> {
    None
}

/// Environment variable capping the storage-binding size posenc uses, in bytes.
pub const MAX_BINDING_ENV: &str = "POSENC_MAX_BINDING_SIZE";

/// What `posenc devices` prints about an adapter.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AdapterSummary {
    /// The adapter's name.
    pub name: String,
    /// The backend (Vulkan, Gl, Metal, Dx12).
    pub backend: String,
    /// Discrete, integrated, virtual or CPU.
    pub device_type: String,
    /// Driver name and version.
    pub driver: String,
    /// Largest storage-buffer binding, in bytes.
    pub max_storage_binding: u64,
    /// Largest buffer, in bytes.
    pub max_buffer_size: u64,
    /// Whether the adapter offers `SHADER_F16`.
    pub shader_f16: bool,
    /// Whether the adapter offers `TIMESTAMP_QUERY`.
    pub timestamp_query: bool,
}

impl AdapterSummary {
    fn of(adapter: &wgpu::Adapter) -> Self {
        let info = adapter.get_info();
        let limits = adapter.limits();
        let features = adapter.features();
        let driver = [info.driver.as_str(), info.driver_info.as_str()]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        Self {
            name: info.name,
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver,
            max_storage_binding: limits.max_storage_buffer_binding_size,
            max_buffer_size: limits.max_buffer_size,
            shader_f16: features.contains(wgpu::Features::SHADER_F16),
            timestamp_query: features.contains(wgpu::Features::TIMESTAMP_QUERY),
        }
    }
}

/// The least address space (`ulimit -v`, `RLIMIT_AS`) posenc asks for before it lets GPU
/// drivers start: 1 GiB. Below about 330 MB, Mesa's llvmpipe crashed while setting up EGL
/// (a segmentation fault posenc cannot catch) and wgpu's Vulkan backend panicked, and
/// drivers for real GPUs reserve far more address space than that.
pub const MIN_DRIVER_ADDRESS_SPACE: u64 = 1 << 30;

/// Refuses to start GPU drivers under an address-space limit below
/// [`MIN_DRIVER_ADDRESS_SPACE`], before they are loaded.
///
/// # Errors
/// [`Error::Limit`] naming `RLIMIT_AS` and its value.
pub fn check_driver_address_space() -> Result<()> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes the one struct it is given, which lives on this stack.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) };
        // rlim_t is u64 on the targets posenc is built for, not on every one.
        #[allow(clippy::unnecessary_cast)]
        let current = limit.rlim_cur as u64;
        if rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY && current < MIN_DRIVER_ADDRESS_SPACE {
            return Err(Error::Limit {
                op: "opening a GPU",
                what: "address space for the GPU drivers to start in (ulimit -v)",
                requested: MIN_DRIVER_ADDRESS_SPACE,
                limit_name: "RLIMIT_AS (bytes)",
                limit: current,
            });
        }
    }
    Ok(())
}

/// The `wgpu::Instance` posenc opens its adapters from: one per process for each set of
/// backends and flags the environment asks for (`WGPU_BACKEND`, `WGPU_DEBUG`, ...), shared
/// by every [`Context`] it opens.
///
/// wgpu knows a resource only within its instance: a buffer of one instance given to a
/// device of another is looked up by its number there, and may be another buffer of that
/// instance (a stranger's: `encode_into_buffer` with a buffer of a second context returned
/// `Ok` and wrote a third buffer). Within one instance wgpu refuses a buffer of another
/// device, so contexts opened by posenc refuse each other's buffers. The instance lives as
/// long as the process (its drivers stay loaded after the last context is dropped); its key
/// is the backends and flags the environment names, and other instance variables
/// (`WGPU_DX12_COMPILER`, `WGPU_GLES_MINOR_VERSION`, ...) are read when it is first made.
///
/// Not for GL adapters (see [`Context::open`]): wgpu 30's GL backend gives every device of
/// one instance's adapter the same EGL context, which two threads then fail to make current
/// (`BadAccess`, a panic in wgpu).
fn instance() -> wgpu::Instance {
    let desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    #[cfg(not(target_arch = "wasm32"))]
    {
        type Key = (u32, u32, u64);
        static SHARED: std::sync::Mutex<Vec<(Key, wgpu::Instance)>> =
            std::sync::Mutex::new(Vec::new());
        // A forked child opens its own (its parent's is never dropped there).
        let key = (std::process::id(), desc.backends.bits(), u64::from(desc.flags.bits()));
        let lock = || SHARED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, found)) = lock().iter().find(|(k, _)| *k == key) {
            return found.clone();
        }
        // Made without the lock held (it starts drivers): a fork from another thread
        // meanwhile leaves the child no lock that nobody releases. Two threads may both
        // make one; the first kept is everyone's.
        let made = wgpu::Instance::new(desc);
        let mut shared = lock();
        if let Some((_, found)) = shared.iter().find(|(k, _)| *k == key) {
            return found.clone();
        }
        shared.push((key, made.clone()));
        made
    }
    #[cfg(target_arch = "wasm32")]
    wgpu::Instance::new(desc)
}

/// What `WGPU_BACKEND` may name: wgpu's names for its backends, comma-separated.
const WGPU_BACKEND_ALLOWED: &str = "vulkan (or vk), metal (mtl), dx12 (d3d12), gl (gles, \
                                    opengl), webgpu or noop, comma-separated";

/// Refuses the wgpu environment variables wgpu would misread in silence: a `WGPU_BACKEND`
/// with a name wgpu does not know (it skips the name, and a value of only such names selects
/// no adapter at all), or one that is not UTF-8 (wgpu then takes it for unset and tries every
/// backend); a `WGPU_POWER_PREF` other than `low`, `high` or `none` (wgpu ignores it).
/// [`Options::from_env`] calls it, so a program reading posenc's variables reads these too.
///
/// # Errors
/// [`Error::InvalidParameter`] naming the variable, its value and what it may be.
pub fn check_wgpu_env() -> Result<()> {
    if let Some(text) = crate::error::env_text("WGPU_BACKEND", WGPU_BACKEND_ALLOWED)? {
        const NAMES: [&str; 11] = [
            "vulkan", "vk", "dx12", "d3d12", "metal", "mtl", "opengl", "gles", "gl", "webgpu",
            "noop",
        ];
        // As wgpu reads it: case-insensitive, white space around each name trimmed.
        let lower = text.to_lowercase();
        if lower.split(',').any(|name| !NAMES.contains(&name.trim())) {
            return Err(crate::error::invalid_env("WGPU_BACKEND", &text, WGPU_BACKEND_ALLOWED));
        }
    }
    const POWER: &str = "low, high or none";
    if let Some(text) = crate::error::env_text("WGPU_POWER_PREF", POWER)?
        && !["low", "high", "none"].contains(&text.to_lowercase().as_str())
    {
        return Err(crate::error::invalid_env("WGPU_POWER_PREF", &text, POWER));
    }
    Ok(())
}

/// Every adapter wgpu can see under the current `WGPU_BACKEND`. This starts every driver
/// wgpu finds: under a tight address-space limit call [`check_driver_address_space`] first.
///
/// Not on the web, where waiting for the browser's answer on the page's one thread would
/// hang the page (it did, round twenty-one of the hostile probes): there
/// [`adapters_async`], which works everywhere.
#[cfg(not(target_arch = "wasm32"))]
pub fn adapters() -> Vec<AdapterSummary> {
    pollster::block_on(adapters_async())
}

/// [`adapters`] without blocking the calling thread; on the web, what the browser's WebGPU
/// offers.
pub async fn adapters_async() -> Vec<AdapterSummary> {
    let instance = instance();
    instance
        .enumerate_adapters(wgpu::Backends::all())
        .await
        .iter()
        .map(AdapterSummary::of)
        .collect()
}

async fn select_adapter(instance: &wgpu::Instance) -> Result<wgpu::Adapter> {
    let backend = std::env::var("WGPU_BACKEND").ok();
    let backend_note = match backend.as_deref() {
        None => String::new(),
        // wgpu skips names it does not know; a value of only such names selects nothing.
        Some(b) if wgpu::Backends::from_comma_list(b).is_empty() => format!(
            " for WGPU_BACKEND={b}, which names no backend (allowed: {WGPU_BACKEND_ALLOWED})"
        ),
        Some(b) => format!(" for WGPU_BACKEND={b}"),
    };
    if let Ok(wanted) = std::env::var("WGPU_ADAPTER_NAME") {
        let all = instance.enumerate_adapters(wgpu::Backends::all()).await;
        let names: Vec<String> = all.iter().map(|a| a.get_info().name).collect();
        let lower = wanted.to_lowercase();
        let hint = if names.is_empty() {
            no_adapter_hint(backend.as_deref())
        } else {
            NO_NAMED_ADAPTER_HINT
        };
        return all
            .into_iter()
            .find(|a| a.get_info().name.to_lowercase().contains(&lower))
            .ok_or_else(|| Error::NoAdapter {
                detail: format!(
                    "{backend_note} whose name contains WGPU_ADAPTER_NAME={wanted:?} \
                     (adapters: {})",
                    if names.is_empty() { "none".to_string() } else { names.join(", ") }
                ),
                hint,
            });
    }
    let options = wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::from_env().unwrap_or_default(),
        ..Default::default()
    };
    instance.request_adapter(&options).await.map_err(|e| Error::NoAdapter {
        detail: format!("{backend_note} ({})", brief_reason(&e.to_string())),
        hint: no_adapter_hint(backend.as_deref()),
    })
}

/// The binding-size cap from [`MAX_BINDING_ENV`], if set.
fn binding_cap_from_env() -> Result<Option<u64>> {
    options::bytes_from_env(MAX_BINDING_ENV, 256, "a whole number of bytes, at least 256")
}

/// An adapter, its device and queue, and the compiled kernels. Build one and reuse it:
/// pipelines are compiled once, here. Clones share the device and the pipelines.
///
/// A context is `Send + Sync`: threads may share one and call it at once. Device faults
/// are errors, never panics or hangs: a lost device gives [`Error::DeviceLost`] (then and
/// on every later call), an allocation the device cannot make [`Error::OutOfMemory`], and
/// with a memory budget ([`Options::memory_budget`], `POSENC_GPU_MEMORY_BUDGET`) posenc's
/// buffers never hold more than the budget at once.
///
/// ```no_run
/// let gpu = posenc::gpu::Options::from_env().and_then(|o| posenc::gpu::Context::new(&o))?;
/// let spec = posenc::PeSpec::new(512)?;
/// let table = gpu.table(&spec, &[0, 1, 2, 4294967295])?;
/// assert_eq!(table.dim(), (4, 512));
/// # Ok::<(), posenc::Error>(())
/// ```
#[derive(Clone)]
pub struct Context {
    adapter: wgpu::Adapter,
    device: wgpu::Device,
    queue: wgpu::Queue,
    max_binding: u64,
    health: Arc<faults::Health>,
    memory: Arc<Memory>,
    timestamp_period: Option<f32>,
    table: table::TableKernel,
    encode: encode::EncodeKernels,
    /// The vec4 encode kernel's access pattern is the coalesced one (see [`AccessPattern`]).
    coalesced: bool,
    /// The adapter has WGSL's `unpack2x16float` (wgpu's `SHADER_F16_IN_F32`): the GPU forms
    /// widen f16 by it (`shaders::F16_UNPACK`).
    f16_unpack: bool,
    /// Units per invocation of the encode kernels in the coalesced pattern, when chosen
    /// ([`Options::units`]).
    units: Option<u32>,
    /// Heads per invocation of the recorded RoPE step's head-group form, when chosen
    /// ([`Options::rope_heads`]).
    rope_heads: Option<u32>,
    /// wgpu bounds the loops of every kernel ([`Options::bound_all_loops`]).
    bound_all_loops: bool,
    rope: rope::RopeKernels,
    /// Most bytes of cached PE rows ([`Options::pe_cache_budget`]).
    pe_cache_budget: u64,
    /// How long a blocking wait polls before it sleeps ([`Options::spin_wait`]).
    spin_wait: std::time::Duration,
    pe_cache: Arc<Mutex<Option<encode::PeCache>>>,
    pool: Arc<BufferPool>,
    /// The copy ceiling's forms, compiled on first use.
    copy: timing::CopyKernels,
    /// The ALiBi kernels, one per form (indexed by `alibi::AlibiForm`), each built on first
    /// use, so contexts that never compute ALiBi never compile them.
    alibi: Arc<[std::sync::OnceLock<alibi::AlibiKernel>; 3]>,
    /// The recorded encode's kernels, built on first use.
    record: encode::pass::EncodePassKernels,
    /// One per device opened, shared by the contexts derived from this one: what tables
    /// remember of the device they live on. (`wgpu::Device`'s own equality compares ids,
    /// which repeat across instances, so two contexts' devices can compare equal.)
    device_token: Arc<()>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("adapter", &self.adapter.get_info().name)
            .field("backend", &self.adapter.get_info().backend)
            .field("max_binding", &self.max_binding)
            .field("memory_budget", &self.memory.budget())
            .finish()
    }
}

impl Context {
    /// Opens the adapter chosen by wgpu's conventions, `WGPU_BACKEND` (vulkan, gl, metal,
    /// dx12), `WGPU_ADAPTER_NAME` (a case-insensitive substring of the name) and
    /// `WGPU_POWER_PREF` (low, high), with `options`. posenc's own environment variables
    /// (`POSENC_MAX_BINDING_SIZE`, `POSENC_GPU_MEMORY_BUDGET`, `POSENC_GPU_TIMESTAMPS` and
    /// the testing knob `POSENC_FAULT_INJECT`) apply through [`Options::from_env`]:
    ///
    /// ```no_run
    /// use posenc::gpu::{Context, Options};
    ///
    /// let gpu = Context::new(&Options::from_env()?)?;
    /// let pinned = Context::new(&Options::default().memory_budget(Some(1 << 30)))?;
    /// # let _ = (gpu, pinned);
    /// # Ok::<(), posenc::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NoAdapter`] with a hint when nothing matches, [`Error::RequestDevice`] when
    /// the adapter refuses a device, [`Error::Limit`] when [`Options::limits`] asks for less
    /// than posenc's kernels need ([`limit_floor`]); on the web [`Error::Blocking`] (use
    /// [`Context::open`]).
    pub fn new(options: &Options) -> Result<Self> {
        wait::blocking("Context::new", "Context::open", Self::open(options))
    }

    /// [`Context::new`] without blocking the calling thread: how a web page opens
    /// its GPU (the browser's WebGPU adapter; natively the adapter [`Context::new`] would
    /// choose).
    ///
    /// ```no_run
    /// # async fn page() -> posenc::Result<()> {
    /// let gpu = posenc::gpu::Context::open(&posenc::gpu::Options::default()).await?;
    /// let spec = posenc::PeSpec::new(64)?;
    /// let pe = gpu.table_async(&spec, &[0, 1, 2, 4_000_000_000]).await?;
    /// assert_eq!(pe.dim(), (4, 64));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`Context::new`], less [`Error::Blocking`].
    #[allow(clippy::await_holding_lock)] // see `opening`
    pub async fn open(options: &Options) -> Result<Self> {
        check_driver_address_space()?;
        let adapter = {
            let _one_at_a_time = opening();
            let adapter = select_adapter(&instance()).await?;
            if adapter.get_info().backend == wgpu::Backend::Gl {
                // A GL adapter of an instance of its own, as every context had before the
                // instance was shared (see `instance`).
                let desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
                select_adapter(&wgpu::Instance::new(desc)).await?
            } else {
                adapter
            }
        };
        Self::from_adapter_async(adapter, options).await
    }

    /// Opens a device on a given adapter.
    ///
    /// posenc needs no optional device feature. It asks for `TIMESTAMP_QUERY` and
    /// `TIMESTAMP_QUERY_INSIDE_ENCODERS` when the adapter has both and the options allow,
    /// to time work on the device; without them timings fall back to the wall clock.
    ///
    /// # Errors
    /// As [`Context::new`], less the adapter search.
    pub fn from_adapter(adapter: wgpu::Adapter, options: &Options) -> Result<Self> {
        let open = Self::from_adapter_async(adapter, options);
        wait::blocking("Context::from_adapter", "Context::from_adapter_async", open)
    }

    /// [`Context::from_adapter`] without blocking the calling thread.
    ///
    /// # Errors
    /// As [`Context::from_adapter`], less [`Error::Blocking`].
    #[allow(clippy::await_holding_lock)] // see `opening`
    pub async fn from_adapter_async(adapter: wgpu::Adapter, options: &Options) -> Result<Self> {
        let name = adapter.get_info().name;
        let timestamp_features =
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
        let timestamps =
            options.wants_timestamps() && adapter.features().contains(timestamp_features);
        let required_limits = options.required_limits(&adapter);
        check_limits("Context::new", &required_limits)?;
        let descriptor = wgpu::DeviceDescriptor {
            label: Some("posenc.device"),
            required_limits,
            required_features: if timestamps {
                timestamp_features
            } else {
                wgpu::Features::empty()
            },
            ..Default::default()
        };
        let _one_at_a_time = opening();
        let (device, queue) = adapter
            .request_device(&descriptor)
            .await
            .map_err(|source| Error::RequestDevice { adapter: name, source })?;
        let health = faults::Health::watch(&device);
        let context = Self::assemble(adapter, device, queue, health, timestamps, options);
        // Once everything is built, as a driver reset would find it: the callback installed
        // above records the loss, and every call then answers Error::DeviceLost.
        if options.fault() == Some(faults::Fault::DeviceLost) {
            context.device.destroy();
        }
        Ok(context)
    }

    /// Uses a device the caller opened (`adapter` must be the one it was requested from):
    /// posenc creates its pipelines and buffers on it, submits to `queue`, and records into
    /// the caller's encoders ([`Context::encode_pass`], [`Context::rope_pass`],
    /// [`Context::alibi_pass`]). It needs no feature; it times work with timestamp queries
    /// only when the device was opened with `TIMESTAMP_QUERY` and
    /// `TIMESTAMP_QUERY_INSIDE_ENCODERS` (and `options` allow), and sizes its chunks by the
    /// device's limits. [`Options::limits`] does not apply (the device is open), and the
    /// fault-injection knob never destroys a device posenc did not open.
    ///
    /// posenc installs no device-lost callback and no uncaptured-error handler on a
    /// caller's device: those stay the caller's. Its own calls catch their errors in error
    /// scopes, and a lost device is still [`Error::DeviceLost`] (found by a probe when an
    /// operation fails, rather than by the callback).
    ///
    /// Tables and passes are shared between this context and those derived from it
    /// (`clone`, [`Context::with_memory_budget`], ...). Two contexts made by separate
    /// calls on the same device work side by side, each with its own tables, cache and
    /// accounting; a table uploaded through one is refused by the other.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let instance = wgpu::Instance::default();
    /// let adapter = pollster::block_on(instance.request_adapter(&Default::default()))?;
    /// let (device, queue) = pollster::block_on(adapter.request_device(&Default::default()))?;
    /// // The engine keeps using `device` and `queue`; posenc shares them.
    /// let gpu = posenc::gpu::Context::from_device(
    ///     adapter,
    ///     device.clone(),
    ///     queue.clone(),
    ///     &posenc::gpu::Options::default(),
    /// )?;
    /// # let _ = gpu;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::Limit`] naming the first limit of the device below what posenc's kernels
    /// need ([`limit_floor`]: WebGPU's minimums, which every conforming device meets), before
    /// anything is made on it: a pipeline the device cannot run would otherwise be reported
    /// to the caller's uncaptured-error handler, wgpu's default of which panics.
    pub fn from_device(
        adapter: wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        options: &Options,
    ) -> Result<Self> {
        let timestamp_features =
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
        let timestamps =
            options.wants_timestamps() && device.features().contains(timestamp_features);
        check_limits("Context::from_device", &device.limits())?;
        let _one_at_a_time = opening();
        let health = Arc::new(faults::Health::default());
        Ok(Self::assemble(adapter, device, queue, health, timestamps, options))
    }

    /// A context on an open device: limits, pipelines, accounting.
    fn assemble(
        adapter: wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        health: Arc<faults::Health>,
        timestamps: bool,
        options: &Options,
    ) -> Self {
        let timestamp_period = timestamps.then(|| queue.get_timestamp_period());
        let limits = device.limits();
        let mut max_binding = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size);
        if let Some(cap) = options.binding_cap() {
            max_binding = max_binding.min(cap);
        }
        // Bindings are sized in whole 4-byte words, at least one (a cap below that would
        // leave chunk plans dividing by zero).
        max_binding = (max_binding & !3).max(4);
        let table = table::TableKernel::new(&device);
        let encode = encode::EncodeKernels::new(&device);
        let coalesced =
            options.access().resolve(adapter.get_info().device_type) == AccessPattern::Coalesced;
        let rope = rope::RopeKernels::new(&device);
        let f16_unpack = adapter
            .get_downlevel_capabilities()
            .flags
            .contains(wgpu::DownlevelFlags::SHADER_F16_IN_F32);
        Self {
            adapter,
            device,
            queue,
            max_binding,
            health,
            memory: Arc::new(Memory::new(options.budget())),
            timestamp_period,
            table,
            encode,
            coalesced,
            f16_unpack,
            units: options.chosen_units(),
            rope_heads: options.chosen_rope_heads(),
            bound_all_loops: options.bounds_all_loops(),
            pe_cache_budget: options.chosen_pe_cache_budget(),
            // Nothing blocks on the web, so nothing polls there.
            spin_wait: if wait::CAN_BLOCK {
                options.chosen_spin_wait()
            } else {
                std::time::Duration::ZERO
            },
            rope,
            pe_cache: Arc::new(Mutex::new(None)),
            pool: Arc::new(BufferPool::default()),
            copy: timing::CopyKernels::default(),
            alibi: Arc::default(),
            record: encode::pass::EncodePassKernels::default(),
            device_token: Arc::new(()),
        }
    }

    /// What this context runs on.
    pub fn adapter_info(&self) -> wgpu::AdapterInfo {
        self.adapter.get_info()
    }

    /// The adapter this context's device was opened on.
    pub fn adapter(&self) -> &wgpu::Adapter {
        &self.adapter
    }

    /// Whether the adapter runs shaders on the CPU's cores (`DeviceType::Cpu`: lavapipe,
    /// llvmpipe, WARP, SwiftShader).
    pub fn is_software(&self) -> bool {
        self.adapter.get_info().device_type == wgpu::DeviceType::Cpu
    }

    /// [`AdapterSummary`] of this context's adapter.
    pub fn summary(&self) -> AdapterSummary {
        AdapterSummary::of(&self.adapter)
    }

    /// The largest storage binding posenc uses on this context, in bytes: the adapter's
    /// limit, capped by `POSENC_MAX_BINDING_SIZE` when set.
    pub fn max_binding_size(&self) -> u64 {
        self.max_binding
    }

    /// A context on the same device whose bindings are capped at `bytes` (rounded down to
    /// whole words, at least one word, never above the current cap): what
    /// `POSENC_MAX_BINDING_SIZE` does, per context. Large tables and outputs are then
    /// processed in more, smaller chunks; what does not fit even one chunk is refused with
    /// [`Error::Limit`].
    #[must_use]
    pub fn with_max_binding_size(&self, bytes: u64) -> Self {
        let mut capped = self.clone();
        capped.max_binding = (self.max_binding.min(bytes) & !3).max(4);
        // Cached PE rows were sized for the old cap; the capped context builds its own.
        capped.pe_cache = Arc::new(Mutex::new(None));
        capped
    }

    /// A context on the same device whose kernels take the forms of access pattern `access`
    /// (the vec4 encode's walk through memory, the recorded passes' forms, the f16
    /// widening; [`AccessPattern::Auto`] chooses by the adapter's type). Both patterns give
    /// the same bits; this is for measuring them against each other and for testing both.
    #[must_use]
    pub fn with_access_pattern(&self, access: AccessPattern) -> Self {
        let mut other = self.clone();
        other.coalesced =
            access.resolve(self.adapter.get_info().device_type) == AccessPattern::Coalesced;
        other
    }

    /// The units per invocation [`Options::units`] chose for the coalesced pattern's
    /// kernels, if it chose any (`None`: posenc's choice).
    pub fn chosen_units(&self) -> Option<u32> {
        self.units
    }

    /// A context on the same device whose recorded RoPE steps take the head-group form
    /// with `heads` heads per invocation ([`Options::rope_heads`]; `None`: posenc's
    /// choice). Every form gives the same bits; this is for measuring them against each
    /// other and for testing each.
    #[must_use]
    pub fn with_rope_heads(&self, heads: Option<u32>) -> Self {
        let mut other = self.clone();
        other.rope_heads = heads.filter(|n| (1..=MAX_ROPE_HEAD_GROUP).contains(n));
        other
    }

    /// The heads per invocation [`Options::rope_heads`] chose for the recorded RoPE step,
    /// if it chose any (`None`: posenc's choice).
    pub fn chosen_rope_heads(&self) -> Option<u32> {
        self.rope_heads
    }

    /// Whether wgpu bounds the loops of every kernel this context builds
    /// ([`Options::bound_all_loops`]).
    pub fn bounds_all_loops(&self) -> bool {
        self.bound_all_loops
    }

    /// How long a blocking wait polls the device before it sleeps
    /// ([`Options::spin_wait`]); zero on the web, where nothing blocks.
    pub fn spin_wait(&self) -> std::time::Duration {
        self.spin_wait
    }

    /// The access pattern of this context's vec4 encode kernel: never
    /// [`AccessPattern::Auto`].
    pub fn access_pattern(&self) -> AccessPattern {
        if self.coalesced { AccessPattern::Coalesced } else { AccessPattern::Adjacent }
    }

    /// A context on the same device whose buffers hold at most `bytes` at once (see
    /// [`Options::memory_budget`]). It keeps its own accounting, scratch buffers and PE
    /// cache; tables it uploads count against its budget.
    #[must_use]
    pub fn with_memory_budget(&self, bytes: u64) -> Self {
        let mut budgeted = self.clone();
        budgeted.memory = Arc::new(Memory::new(Some(bytes)));
        budgeted.pool = Arc::new(BufferPool::default());
        budgeted.pe_cache = Arc::new(Mutex::new(None));
        budgeted
    }

    /// The memory budget, if any.
    pub fn memory_budget(&self) -> Option<u64> {
        self.memory.budget()
    }

    /// Bytes of device buffers this context's accounting holds now: uploaded tables still
    /// alive, cached PE rows, pooled scratch.
    pub fn allocated_bytes(&self) -> u64 {
        self.memory.held()
    }

    /// The most bytes this context's buffers held at once since it was opened or since
    /// [`Context::reset_peak_allocated_bytes`].
    pub fn peak_allocated_bytes(&self) -> u64 {
        self.memory.peak()
    }

    /// Starts a new peak measurement from what is held now.
    pub fn reset_peak_allocated_bytes(&self) {
        self.memory.reset_peak();
    }

    /// Why the device was lost, or `None` while it works.
    pub fn lost_reason(&self) -> Option<String> {
        self.health.lost()
    }

    /// The wgpu device, for callers who keep results on the GPU.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The wgpu queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// Runs `f` inside validation and out-of-memory error scopes and turns whatever wgpu
    /// reports into posenc's errors: [`Error::DeviceLost`] once the device is lost (checked
    /// before `f` runs too), [`Error::OutOfMemory`], else [`Error::Gpu`].
    ///
    /// On the web, where a scope's answer needs an `.await`, `f` runs without scopes: what
    /// the browser refuses goes to the device's uncaptured-error handler (posenc's own,
    /// which the next call reports, on a device posenc opened). The `_async` calls scope
    /// their work there too ([`Context::scoped_async`]).
    #[cfg(not(target_arch = "wasm32"))]
    fn scoped<T>(&self, op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        pollster::block_on(self.scoped_async(op, async || f()))
    }

    #[cfg(target_arch = "wasm32")]
    fn scoped<T>(&self, op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if let Some(reason) = self.health.lost() {
            return Err(Error::DeviceLost { op, reason });
        }
        let result = f();
        if let Some(message) = self.health.take_uncaptured() {
            return Err(Error::Gpu { op, message });
        }
        result
    }

    /// [`Context::scoped`] for work that itself waits: the scopes' answers are awaited.
    pub(super) async fn scoped_async<T>(
        &self,
        op: &'static str,
        f: impl AsyncFnOnce() -> Result<T>,
    ) -> Result<T> {
        if let Some(reason) = self.health.lost() {
            return Err(Error::DeviceLost { op, reason });
        }
        // On the web, one operation's scopes at a time (see `wait::AsyncLock`). Natively
        // every await here is ready at once, so operations never interleave on a thread,
        // and wgpu's scopes belong to the thread that pushed them.
        let _scopes = match wait::CAN_BLOCK {
            true => None,
            false => Some(wait::SCOPES.lock().await),
        };
        let outer_bytes = Memory::start_scope();
        let scopes = wait::Scopes::enter(&self.device);
        let result = f().await;
        let (validation, oom) = scopes.finish().await;
        let uncaptured = self.health.take_uncaptured();
        // A request refused by posenc's own checks (its shape, a limit, the budget) says
        // nothing of the device: it returns at once, without waiting for the queue.
        let device_error = matches!(&result, Err(e) if e.kind() == crate::error::ErrorKind::Device);
        let failed = device_error || validation.is_some() || oom.is_some();
        let bytes = Memory::scope_bytes();
        Memory::end_scope(outer_bytes);
        if failed || uncaptured.is_some() {
            // A destroyed device reports its loss once its queue has drained (other threads
            // may have work in flight); let it, so the error names the cause rather than
            // its symptoms. On the web only what the browser has already said is known.
            let lost = if wait::CAN_BLOCK {
                let drain = wgpu::PollType::Wait {
                    submission_index: None,
                    timeout: Some(SUBMISSION_TIMEOUT),
                };
                let _ = self.device.poll(drain);
                faults::confirm_loss(&self.device, &self.health)
            } else {
                self.health.lost()
            };
            if let Some(reason) = lost {
                return Err(Error::DeviceLost { op, reason });
            }
        }
        if let Some(e) = oom {
            return Err(faults::classify(op, e, bytes, self.memory.held()));
        }
        if let Some(e) = validation {
            return Err(faults::classify(op, e, 0, 0));
        }
        if let Some(message) = uncaptured {
            return Err(Error::Gpu { op, message });
        }
        result
    }

    /// Blocks until every submission so far has completed: what the calls that leave their
    /// results on the device (`encode_to_buffer`, `encode_into_buffer`, `rope_in_place`,
    /// `alibi_bias_to_buffer`) do not do, so that a caller can overlap work with them.
    ///
    /// # Errors
    /// [`Error::DeviceLost`] if the device is lost or the work outlives
    /// [`SUBMISSION_TIMEOUT`]; [`Error::Gpu`] for another failure of the wait.
    pub fn wait_idle(&self) -> Result<()> {
        if !wait::CAN_BLOCK {
            return Err(Error::Blocking { op: "wait_idle", instead: "wait_idle_async" });
        }
        if let Some(reason) = self.health.lost() {
            return Err(Error::DeviceLost { op: "wait_idle", reason });
        }
        let index = self.queue.submit([]);
        self.wait("wait_idle", index)?;
        match self.health.lost() {
            Some(reason) => Err(Error::DeviceLost { op: "wait_idle", reason }),
            None => Ok(()),
        }
    }

    /// [`Context::wait_idle`] without blocking the calling thread: resolves once every
    /// submission so far has completed (no timeout).
    ///
    /// # Errors
    /// [`Error::DeviceLost`] if the device is lost.
    pub async fn wait_idle_async(&self) -> Result<()> {
        if wait::CAN_BLOCK {
            return self.wait_idle();
        }
        if let Some(reason) = self.health.lost() {
            return Err(Error::DeviceLost { op: "wait_idle", reason });
        }
        let (tx, rx) = wait::oneshot();
        self.queue.on_submitted_work_done(move || tx.send(()));
        self.queue.submit([]);
        let _ = rx.await;
        match self.health.lost() {
            Some(reason) => Err(Error::DeviceLost { op: "wait_idle", reason }),
            None => Ok(()),
        }
    }

    /// Blocks until submission `index` has completed, for at most [`SUBMISSION_TIMEOUT`];
    /// past that the device counts as lost. For the first [`Options::spin_wait`] it polls
    /// the device without sleeping, yielding the core between polls, until a work-done
    /// callback says the queue's work so far is done (`index` is the newest submission in
    /// every caller but the readbacks, which use [`Context::wait_until`] with their own
    /// map callback); past the budget it sleeps in wgpu's wait.
    fn wait(&self, op: &'static str, index: wgpu::SubmissionIndex) -> Result<()> {
        // Zero on the web (see `Context::new`), where nothing polls.
        if self.spin_wait.is_zero() {
            return self.wait_until(op, index, || false);
        }
        let (tx, done) = wait::oneshot();
        self.queue.on_submitted_work_done(move || tx.send(()));
        self.wait_until(op, index, || done.has_value())
    }

    /// Blocks until submission `index` has completed, as [`Context::wait`], polling first
    /// until `ready` says it has. `ready` must become true once `index` is done and one
    /// poll has run since (a map callback of that submission's buffer, or a work-done
    /// callback registered after it was submitted); a signal of later work only delays
    /// the return, by at most the budget.
    ///
    /// (Not a wait for `index` with a zero timeout: wgpu-core 30 asserts, and panics,
    /// when another thread's poll retires the submission between that wait and its own
    /// reading of the fence.)
    fn wait_until(
        &self,
        op: &'static str,
        index: wgpu::SubmissionIndex,
        ready: impl Fn() -> bool,
    ) -> Result<()> {
        // Never on the web, which cannot block (nor read `Instant`).
        if wait::CAN_BLOCK && !self.spin_wait.is_zero() {
            let start = std::time::Instant::now();
            // A lost device is left to the wait below, which reports it.
            while start.elapsed() < self.spin_wait && self.health.lost().is_none() {
                // wgpu answers a plain poll with `Ok` (a device error is fatal there).
                let _ = self.device.poll(wgpu::PollType::Poll);
                if ready() {
                    return Ok(());
                }
                std::thread::yield_now();
            }
        }
        let timeout = Some(SUBMISSION_TIMEOUT);
        match self.device.poll(wgpu::PollType::Wait { submission_index: Some(index), timeout }) {
            Ok(_) => Ok(()),
            Err(wgpu::PollError::Timeout) => {
                let reason = format!(
                    "a submission did not complete within {} s",
                    SUBMISSION_TIMEOUT.as_secs()
                );
                self.health.mark_lost(reason.clone());
                Err(Error::DeviceLost { op, reason })
            }
            Err(e) => Err(Error::Gpu { op, message: e.to_string() }),
        }
    }

    /// The buffer of a result left on the device (`STORAGE | COPY_SRC | COPY_DST`, `bytes`
    /// rounded up to one word), for `op`: refused before anything is allocated if it
    /// exceeds the device's largest buffer or the memory budget.
    ///
    /// # Errors
    /// [`Error::Limit`] naming the limit; what [`Context::scoped`] reports of the
    /// allocation.
    pub(crate) fn result_buffer(
        &self,
        op: &'static str,
        label: &'static str,
        bytes: u64,
    ) -> Result<DeviceBuffer> {
        self.check_result_buffer(op, bytes)?;
        self.scoped(op, || {
            use wgpu::BufferUsages as U;
            self.create_buffer(label, bytes.max(4), U::STORAGE | U::COPY_SRC | U::COPY_DST)
        })
    }

    /// [`Context::result_buffer`]'s checks, before anything is made: the device's largest
    /// buffer and the memory budget.
    ///
    /// # Errors
    /// [`Error::Limit`] naming whichever `bytes` exceeds.
    pub(crate) fn check_result_buffer(&self, op: &'static str, bytes: u64) -> Result<()> {
        let max = self.device.limits().max_buffer_size;
        if bytes > max {
            return Err(Error::Limit {
                op,
                what: "the output buffer",
                requested: bytes,
                limit_name: "max buffer size (bytes)",
                limit: max,
            });
        }
        self.check_fits_budget(op, "the output buffer", bytes)
    }

    /// A buffer counted against this context's memory. With a budget, spare pooled
    /// buffers are freed to make room first.
    ///
    /// # Errors
    /// [`Error::Limit`] naming the budget if it cannot hold `size` more bytes.
    pub(crate) fn create_buffer(
        &self,
        label: &'static str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<DeviceBuffer> {
        // A software adapter's buffers are host memory: a large one is weighed as a host
        // allocation first, so that an address-space limit refuses it here with an error,
        // not inside the driver (llvmpipe through GL dereferenced a failed allocation and
        // the process died of SIGSEGV; round twenty-two of the hostile probes).
        const SOFTWARE_HOST_CHECK_BYTES: u64 = 64 << 20;
        // Spare pooled buffers hold host memory there too: freed first where they would
        // make room.
        if size >= SOFTWARE_HOST_CHECK_BYTES && self.is_software() {
            while let Err(e) = crate::alloc::check_allocation(label, size) {
                if !self.pool.evict_one() {
                    return Err(e);
                }
            }
        }
        DeviceBuffer::create(&self.device, &self.memory, label, size, usage, || {
            self.pool.evict_one()
        })
        .ok_or_else(|| Error::Limit {
            op: label,
            what: "a device buffer on top of the bytes already held",
            requested: self.memory.held().saturating_add(size),
            limit_name: "GPU memory budget (bytes)",
            limit: self.memory.budget().unwrap_or(u64::MAX),
        })
    }

    /// Identifies this context's device: contexts derived from one another share it, each
    /// context that opens a device has its own.
    pub(crate) fn device_key(&self) -> usize {
        Arc::as_ptr(&self.device_token) as usize
    }

    /// Identifies this context's accounting (clones made by `with_max_binding_size` share it).
    pub(crate) fn memory_id(&self) -> usize {
        Arc::as_ptr(&self.memory) as usize
    }

    /// Refuses, before anything is allocated, an object of `bytes` larger than the whole
    /// memory budget (if there is one), or on a CPU adapter one of 64 MiB or more larger
    /// than the host memory available (its device memory is the host's, and the OOM killer
    /// would end the process): [`Error::Limit`] naming `op` and `what`.
    pub(crate) fn check_fits_budget(
        &self,
        op: &'static str,
        what: &'static str,
        bytes: u64,
    ) -> Result<()> {
        let over_budget = self.memory_budget().filter(|&budget| bytes > budget);
        let past_host = || {
            let available = self.is_software().then(|| crate::alloc::past_host_memory(bytes));
            available.flatten().map(|limit| {
                let name = "host memory available (MemAvailable and free swap; a CPU adapter's \
                            device memory is the host's)";
                (name, limit)
            })
        };
        match over_budget.map(|limit| ("GPU memory budget (bytes)", limit)).or_else(past_host) {
            Some((limit_name, limit)) => {
                Err(Error::Limit { op, what, requested: bytes, limit_name, limit })
            }
            None => Ok(()),
        }
    }

    /// Bytes a budgeted operation may still allocate: the budget less what is held, not
    /// counting spare pooled buffers (which are freed on demand). `None` without a budget.
    pub(crate) fn budget_left(&self) -> Option<u64> {
        let budget = self.memory.budget()?;
        let in_use = self.memory.held().saturating_sub(self.pool.free_bytes());
        Some(budget.saturating_sub(in_use))
    }

    /// A pooled scratch buffer of exactly `size` bytes and `usage`.
    pub(crate) fn pooled(
        &self,
        label: &'static str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<PooledBuffer> {
        let reused = self.pool.reuse(size, usage);
        let buffer = match reused {
            Some(b) => b,
            None => self.create_buffer(label, size, usage)?,
        };
        Ok(PooledBuffer { pool: Arc::clone(&self.pool), buffer: Some(buffer) })
    }

    /// Submits `encoder`, then copies `staging[..len]` into `dst` once the GPU is done.
    async fn finish_and_read(
        &self,
        op: &'static str,
        encoder: wgpu::CommandEncoder,
        staging: &wgpu::Buffer,
        dst: &mut [u8],
    ) -> Result<()> {
        let len = dst.len() as u64;
        let read = |at: usize, piece: &[u8]| copy_out(&mut dst[at..at + piece.len()], piece);
        self.finish_and_read_with(op, encoder, staging, len, read).await
    }

    /// Submits `encoder`, then hands `staging[..len]`, mapped, to `read` once the GPU is
    /// done, as pieces in order with their byte offsets, and unmaps it; `read` is not called
    /// if the readback fails, and a failure between pieces leaves the later ones unread.
    ///
    /// Natively the mapping is the staging memory itself, handed over as one piece. On the
    /// web, wgpu copies each mapped range into a new `Vec` of its size, and a failed
    /// allocation there aborts the module: so the range goes in pieces of
    /// [`WEB_READ_PIECE`], each allocation checked first ([`Error::Alloc`]), where one copy
    /// of a whole result aborted a page whose memory held the result but not twice
    /// (round twenty-one of the hostile probes, 2026-12-03).
    async fn finish_and_read_with(
        &self,
        op: &'static str,
        encoder: wgpu::CommandEncoder,
        staging: &wgpu::Buffer,
        len: u64,
        mut read: impl FnMut(usize, &[u8]),
    ) -> Result<()> {
        let index = self.queue.submit([encoder.finish()]);
        let slice = staging.slice(..len);
        let (tx, rx) = wait::oneshot();
        slice.map_async(wgpu::MapMode::Read, move |r| tx.send(r));
        // A future dropped before the mapping is read (on the web, where it waits at the
        // `.await` below) unmaps the staging buffer, cancelling a pending map, so the pool
        // never lends a buffer that is mapped or about to be.
        let mut unmap = wait::UnmapOnDrop::new(staging);
        if wait::CAN_BLOCK {
            self.wait_until(op, index, || rx.has_value())?;
        }
        match rx.await {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(Error::Gpu { op, message: e.to_string() }),
            None => return Err(Error::Gpu { op, message: "readback never completed".into() }),
        }
        let piece = if wait::CAN_BLOCK { len } else { WEB_READ_PIECE };
        let mut at = 0;
        while at < len {
            let end = len.min(at + piece);
            if !wait::CAN_BLOCK {
                crate::alloc::check_allocation("a piece of a readback", end - at)?;
            }
            let view = staging
                .slice(at..end)
                .get_mapped_range()
                .map_err(|e| Error::Gpu { op, message: e.to_string() })?;
            read(at as usize, &view);
            at = end;
        }
        unmap.now();
        Ok(())
    }
}

/// Bytes of a mapped readback wgpu copies out at a time on the web
/// ([`Context::finish_and_read_with`]): a multiple of wgpu's map alignment (8), so every
/// piece but the last starts and ends aligned, and the last ends where the range does.
const WEB_READ_PIECE: u64 = 16 << 20;

/// Copies a mapped staging range into host memory, on several threads when it is large:
/// one core copies out of a mapping at about 10 GB/s (an H100 host, 2026-11-26), below what
/// the bus delivers, and a fresh host array pays its page faults in the same loop.
pub(crate) fn copy_out(dst: &mut [u8], src: &[u8]) {
    // SAFETY: MaybeUninit<u8> has u8's layout, and copy_out_uninit writes only initialised
    // bytes through it, so `dst` stays initialised.
    let dst = unsafe { &mut *(std::ptr::from_mut(dst) as *mut [std::mem::MaybeUninit<u8>]) };
    copy_out_uninit(dst, src);
}

/// [`copy_out`] into memory not yet initialised, every byte of which it writes (`dst` and
/// `src` have the same length; a readback's lengths always match).
pub(crate) fn copy_out_uninit(dst: &mut [std::mem::MaybeUninit<u8>], src: &[u8]) {
    use rayon::prelude::*;
    const PIECE: usize = 1 << 20;
    assert_eq!(dst.len(), src.len(), "a readback fills its destination exactly");
    let copy = |d: &mut [std::mem::MaybeUninit<u8>], s: &[u8]| {
        // SAFETY: d and s have the same length (chunked alike from slices of the same
        // length), d is writable and the two do not overlap (every caller copies out of a
        // mapping or another allocation); MaybeUninit<u8> has u8's layout.
        unsafe { copy_bytes(d.as_mut_ptr().cast::<u8>(), s.as_ptr(), s.len()) }
    };
    if dst.len() < 4 * PIECE {
        copy(dst, src);
        return;
    }
    dst.par_chunks_mut(PIECE).zip(src.par_chunks(PIECE)).for_each(|(d, s)| copy(d, s));
}

/// `len` bytes from `src` to `dst`: `memcpy`, but for a destination 1 - 31 bytes past the
/// source modulo a 4 KiB page and a copy under 1 MiB, which goes by 16-byte loads and
/// stores. There glibc's `memcpy` (2.36) ran at 5 - 6 GB/s on the development machine's
/// AMD EPYC (Zen 3), where this loop moved 55 - 98 GB/s and `memcpy` at other offsets 50 -
/// 160 (4 KiB - 256 KiB, 2026-12-05, docs/performance.md). glibc leaves its `rep movsb`
/// path, the slow one, at the core's L2 size on AMD's CPUs: 512 KiB on Zen 3 (where copies
/// of 512 KiB and more ran at full speed), 1 MiB on Zen 4 and 5, hence the bound; the loop
/// moves 67 - 78 GB/s at 1 MiB, as memcpy does. A result read back into a fresh array (an
/// allocation of 128 KiB or more starts 16 bytes into its page) from a mapping that starts
/// on a page is such a copy, a decode step's result among them.
///
/// # Safety
/// `src` is readable and `dst` writable for `len` bytes, and the two do not overlap.
#[inline]
unsafe fn copy_bytes(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if len < 1 << 20 && (1..32).contains(&((dst as usize).wrapping_sub(src as usize) % 4096)) {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
        // Four vectors a step: a loop of one load and one store of its stride would be
        // turned back into a call of memcpy by the compiler.
        let vectors = len / 64 * 64;
        let mut at = 0;
        while at < vectors {
            // SAFETY: `at + 64 <= len`; unaligned loads and stores (SSE2, x86_64's
            // baseline); the caller's bounds and no overlap.
            unsafe {
                let (s, d) = (src.add(at).cast::<__m128i>(), dst.add(at).cast::<__m128i>());
                let (a, b) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)));
                let (c, e) = (_mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
                _mm_storeu_si128(d, a);
                _mm_storeu_si128(d.add(1), b);
                _mm_storeu_si128(d.add(2), c);
                _mm_storeu_si128(d.add(3), e);
            }
            at += 64;
        }
        // SAFETY: the rest, under 64 bytes, within the caller's bounds.
        unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), len - at) };
        return;
    }
    // SAFETY: the caller's.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
}

/// Scratch buffers kept between calls, so repeated calls neither allocate nor pay wgpu's
/// zero-initialisation of fresh buffers again. Buffers are matched by exact size and usage;
/// at most [`BufferPool::KEEP`] wait unused, and a budgeted context frees them (oldest
/// first) when it needs the room.
#[derive(Default)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<DeviceBuffer>>,
}

impl BufferPool {
    /// Spare buffers kept. A streamed encode keeps three batches in flight, each with its
    /// records, scratch output and staging buffer, beside a blocking call's own and the
    /// copy ceilings': with 16, every round of `posenc bench` evicted its output-sized
    /// staging buffers and made new ones.
    const KEEP: usize = 32;

    fn free(&self) -> std::sync::MutexGuard<'_, Vec<DeviceBuffer>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn reuse(&self, size: u64, usage: wgpu::BufferUsages) -> Option<DeviceBuffer> {
        let mut free = self.free();
        let i = free.iter().position(|b| b.size() == size && b.usage() == usage)?;
        Some(free.swap_remove(i))
    }

    /// Frees the oldest spare buffer; `false` if there was none.
    fn evict_one(&self) -> bool {
        let mut free = self.free();
        if free.is_empty() {
            return false;
        }
        free.remove(0);
        true
    }

    fn free_bytes(&self) -> u64 {
        self.free().iter().map(|b| b.size()).sum()
    }
}

/// A buffer on loan from a [`BufferPool`]; it goes back when dropped.
pub(crate) struct PooledBuffer {
    pool: Arc<BufferPool>,
    buffer: Option<DeviceBuffer>,
}

impl std::ops::Deref for PooledBuffer {
    type Target = wgpu::Buffer;
    fn deref(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("present until drop")
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            let mut free = self.pool.free();
            free.push(buffer);
            if free.len() > BufferPool::KEEP {
                free.remove(0);
            }
        }
    }
}

/// Compiles kernel `name` of [`crate::shaders::KERNELS`] (entry point of the same name) with
/// its bind group layout, [`layout::bindings`].
pub(crate) fn build_kernel(
    device: &wgpu::Device,
    name: &'static str,
) -> (wgpu::BindGroupLayout, wgpu::ComputePipeline) {
    build_pipeline(device, name, &crate::shaders::source(name), &layout::bindings(name))
}

/// Compiles `source`, whose entry point is `name`, with one buffer binding of each type in
/// `bindings` at bindings `0..` of group 0, its loops bounded by wgpu as
/// [`crate::shaders::bounds_loops_of`] says.
pub(crate) fn build_pipeline(
    device: &wgpu::Device,
    name: &'static str,
    source: &str,
    bindings: &[wgpu::BufferBindingType],
) -> (wgpu::BindGroupLayout, wgpu::ComputePipeline) {
    build_pipeline_with(device, name, source, bindings, false)
}

/// [`build_pipeline`], or with every loop bounded when `bound_all_loops`
/// ([`Options::bound_all_loops`]).
pub(crate) fn build_pipeline_with(
    device: &wgpu::Device,
    name: &'static str,
    source: &str,
    bindings: &[wgpu::BufferBindingType],
    bound_all_loops: bool,
) -> (wgpu::BindGroupLayout, wgpu::ComputePipeline) {
    let label = |role: &str| format!("posenc.{name}.{role}");
    // Only a build with the `diagnostics` feature has any active.
    let (source, _) =
        crate::shaders::diagnostics::apply(crate::shaders::diagnostics::active(), name, source);
    let source = source.as_ref();
    let descriptor = wgpu::ShaderModuleDescriptor {
        label: Some(&label("shader")),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    };
    let module = if bound_all_loops || crate::shaders::bounds_loops_of(name, source) {
        device.create_shader_module(descriptor)
    } else {
        let mut checks = wgpu::ShaderRuntimeChecks::checked();
        checks.force_loop_bounding = false;
        // SAFETY: `force_loop_bounding` off requires that no loop of the shader runs
        // forever. Every loop of this source is one of `shaders::REVIEWED_LOOPS`, each read
        // to end whatever the parameters and buffers hold, and its body writes none of
        // its header's names (checked just above, on this very source). Every other check,
        // bounds checks included, stays on.
        unsafe { device.create_shader_module_trusted(descriptor, checks) }
    };
    let entries: Vec<wgpu::BindGroupLayoutEntry> = bindings
        .iter()
        .enumerate()
        .map(|(binding, &ty)| wgpu::BindGroupLayoutEntry {
            binding: binding as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
            count: None,
        })
        .collect();
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(&label("bind_group_layout")),
        entries: &entries,
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(&label("pipeline_layout")),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(&label("pipeline")),
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some(name),
        compilation_options: wgpu::PipelineCompilationOptions {
            zero_initialize_workgroup_memory: crate::shaders::zero_initializes_workgroup_memory(
                name,
            ),
            ..Default::default()
        },
        cache: None,
    });
    (layout, pipeline)
}

/// The device limits posenc's kernels rely on, each with its value in `limits` and the
/// least posenc needs: WebGPU's minimums (wgpu's `Limits::downlevel_defaults`), which every
/// conforming device meets. Workgroups of 256 threads (the table, encode and RoPE kernels),
/// dispatches folded into grids of up to 65535 workgroups a side, bind groups of up to four
/// storage buffers and a uniform (the compact layouts serve devices of fewer than six), and
/// the RoPE pass's cos and sin of up to 1024 frequencies in workgroup memory (8 KiB). Other
/// limits (binding and buffer sizes, alignments) are read and worked within.
///
/// ```
/// let low = wgpu::Limits { max_compute_invocations_per_workgroup: 64, ..Default::default() };
/// let short: Vec<_> = posenc::gpu::limit_floor(&low)
///     .into_iter()
///     .filter(|&(_, have, need)| have < need)
///     .collect();
/// assert_eq!(short, [("max_compute_invocations_per_workgroup", 64, 256)]);
/// assert!(posenc::gpu::limit_floor(&wgpu::Limits::downlevel_defaults())
///     .iter()
///     .all(|&(_, have, need)| have >= need));
/// ```
pub fn limit_floor(limits: &wgpu::Limits) -> [(&'static str, u32, u32); 8] {
    let l = limits;
    // rope_pass's workgroup arrays: cos and sin, each of up to this many vec4s.
    let rope_pass_bytes = 2 * crate::shaders::ROPE_PASS_MAX_FREQ_VECS * 16;
    [
        ("max_compute_invocations_per_workgroup", l.max_compute_invocations_per_workgroup, 256),
        ("max_compute_workgroup_size_x", l.max_compute_workgroup_size_x, 256),
        ("max_compute_workgroups_per_dimension", l.max_compute_workgroups_per_dimension, 65535),
        ("max_storage_buffers_per_shader_stage", l.max_storage_buffers_per_shader_stage, 4),
        ("max_uniform_buffers_per_shader_stage", l.max_uniform_buffers_per_shader_stage, 1),
        ("max_bindings_per_bind_group", l.max_bindings_per_bind_group, 5),
        ("max_bind_groups", l.max_bind_groups, 1),
        (
            "max_compute_workgroup_storage_size",
            l.max_compute_workgroup_storage_size,
            rope_pass_bytes,
        ),
    ]
}

/// Refuses `limits` below [`limit_floor`], naming the first one short.
fn check_limits(op: &'static str, limits: &wgpu::Limits) -> Result<()> {
    match limit_floor(limits).into_iter().find(|&(_, have, need)| have < need) {
        Some((name, have, need)) => Err(Error::Limit {
            op,
            what: "a device limit posenc's kernels need (WebGPU's minimum)",
            requested: u64::from(need),
            limit_name: name,
            limit: u64::from(have),
        }),
        None => Ok(()),
    }
}

/// Splits `groups` workgroups into a 2-D grid `(x, y)` within `max_per_dim` per dimension.
pub(crate) fn fold_dispatch(groups: u32, max_per_dim: u32) -> (u32, u32) {
    if groups <= max_per_dim {
        (groups.max(1), 1)
    } else {
        (max_per_dim, groups.div_ceil(max_per_dim))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// wgpu's reason loses the backends left out, and keeps what failed.
    #[test]
    fn the_no_adapter_reason_names_what_failed() {
        let reason = "No suitable graphics adapter found; noop not requested, vulkan \
            drivers/libraries could not be loaded, metal not requested, dx12 support not \
            compiled in, gl drivers/libraries could not be loaded, webgpu not requested";
        assert_eq!(
            brief_reason(reason),
            "No suitable graphics adapter found: vulkan drivers/libraries could not be \
             loaded, gl drivers/libraries could not be loaded"
        );
        let all_out = "No suitable graphics adapter found; vulkan not requested";
        assert_eq!(brief_reason(all_out), "No suitable graphics adapter found");
        assert_eq!(brief_reason("something else"), "something else");
        assert_eq!(no_adapter_hint(Some("gl")), NO_GL_ADAPTER_HINT);
        assert_eq!(no_adapter_hint(Some("GLES")), NO_GL_ADAPTER_HINT);
        assert_eq!(no_adapter_hint(Some("vulkan,gl")), NO_ADAPTER_HINT);
        assert_eq!(no_adapter_hint(None), NO_ADAPTER_HINT);
        #[cfg(all(unix, not(target_vendor = "apple")))]
        assert_eq!(no_adapter_hint(Some("metal,noop")), NO_BACKEND_HERE_HINT);
    }

    /// `copy_out` copies every byte, and no more, whatever the destination's offset from
    /// the source in its page (the loop's window 1 - 31 and either side) and the length (the
    /// loop's whole steps and its rest, each side of its 1 MiB bound, the threaded pieces).
    #[test]
    fn copy_out_copies_every_byte_at_every_offset() {
        let most = (5 << 20) + 77;
        // No zero byte: the destination is zeroed before each copy.
        let src: Vec<u8> = (0..most + 8192).map(|k| (k * 131 % 251 + 1) as u8).collect();
        let mut dst = vec![0u8; most + 8192 + 64];
        let (s0, d0) = (src.as_ptr() as usize % 4096, dst.as_ptr() as usize % 4096);
        for len in [0, 1, 63, 64, 65, 127, 4096, 4097, 131_072, (1 << 20) - 1, 1 << 20, most] {
            for delta in [0usize, 1, 15, 16, 31, 32, 33, 63, 64, 2048, 4095] {
                // Source and destination `delta` apart modulo a page.
                let from = 3;
                let to = (s0 + from + delta + 4096 - d0) % 4096;
                dst[to..to + len].fill(0);
                // A guard after the destination, which the copy must leave as it is.
                dst[to + len..to + len + 64].fill(0xee);
                copy_out(&mut dst[to..to + len], &src[from..from + len]);
                let got = (dst[to..].as_ptr() as usize).wrapping_sub(src[from..].as_ptr() as usize);
                assert_eq!(got % 4096, delta);
                assert!(dst[to..to + len] == src[from..from + len], "len {len} delta {delta}");
                assert!(dst[to + len..to + len + 64].iter().all(|&b| b == 0xee), "past {len}");
            }
        }
    }

    #[test]
    fn dispatch_folds_into_2d_and_covers_every_group() {
        assert_eq!(fold_dispatch(1, 65535), (1, 1));
        assert_eq!(fold_dispatch(65535, 65535), (65535, 1));
        assert_eq!(fold_dispatch(65536, 65535), (65535, 2));
        for groups in [65536u32, 200_000, 4_000_000] {
            let (x, y) = fold_dispatch(groups, 65535);
            assert!(x <= 65535 && y <= 65535);
            assert!(u64::from(x) * u64::from(y) >= u64::from(groups));
            assert!(u64::from(x) * u64::from(y - 1) < u64::from(groups));
        }
    }
}
