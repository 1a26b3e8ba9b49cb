//! The GPU path: adapter choice, the device context, and host wrappers of the kernels in
//! `shaders/`. Every kernel has a CPU twin in [`crate::cpu`] that gives the same bits.

mod alibi;
mod encode;
mod rope;
mod table;
mod timing;

use std::sync::{Arc, Mutex};

pub use alibi::AlibiParams;
pub use encode::{EncodeF32x4Params, EncodeParams, GpuPositionTable, GpuTable, PE_CACHE_BUDGET};
pub use rope::{RopeCsParams, RopeParams, RopeX4Params};
pub use table::TableParams;
pub use timing::CopyParams;

use crate::error::{Error, Result};

/// The hint given whenever no adapter can be found.
pub const NO_ADAPTER_HINT: &str = "install a GPU driver, or Mesa's software Vulkan driver \
    (`apt-get install mesa-vulkan-drivers`); WGPU_BACKEND and WGPU_ADAPTER_NAME narrow the choice";

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

fn instance() -> wgpu::Instance {
    // with_env honours WGPU_BACKEND (and wgpu's other instance variables).
    wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env())
}

/// Every adapter wgpu can see under the current `WGPU_BACKEND`.
pub fn adapters() -> Vec<AdapterSummary> {
    let instance = instance();
    pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
        .iter()
        .map(AdapterSummary::of)
        .collect()
}

fn select_adapter(instance: &wgpu::Instance) -> Result<wgpu::Adapter> {
    let backend = std::env::var("WGPU_BACKEND").ok();
    let backend_note =
        backend.as_deref().map(|b| format!(" for WGPU_BACKEND={b}")).unwrap_or_default();
    if let Ok(wanted) = std::env::var("WGPU_ADAPTER_NAME") {
        let all = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        let names: Vec<String> = all.iter().map(|a| a.get_info().name).collect();
        let lower = wanted.to_lowercase();
        return all
            .into_iter()
            .find(|a| a.get_info().name.to_lowercase().contains(&lower))
            .ok_or_else(|| Error::NoAdapter {
                detail: format!(
                    "{backend_note} whose name contains WGPU_ADAPTER_NAME={wanted:?} (adapters: {})",
                    if names.is_empty() { "none".to_string() } else { names.join(", ") }
                ),
                hint: NO_ADAPTER_HINT,
            });
    }
    let options = wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::from_env().unwrap_or_default(),
        ..Default::default()
    };
    pollster::block_on(instance.request_adapter(&options)).map_err(|e| Error::NoAdapter {
        detail: format!("{backend_note} ({e})"),
        hint: NO_ADAPTER_HINT,
    })
}

/// The binding-size cap from [`MAX_BINDING_ENV`], if set.
fn binding_cap_from_env() -> Result<Option<u64>> {
    match std::env::var(MAX_BINDING_ENV) {
        Err(_) => Ok(None),
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(v) if v >= 256 => Ok(Some(v)),
            _ => Err(Error::InvalidParameter {
                field: MAX_BINDING_ENV,
                value: text,
                allowed: "a whole number of bytes, at least 256",
            }),
        },
    }
}

/// An adapter, its device and queue, and the compiled kernels. Build one and reuse it:
/// pipelines are compiled once, here. Clones share the device and the pipelines.
///
/// ```no_run
/// let gpu = posenc::gpu::Context::new()?;
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
    uncaptured: Arc<Mutex<Option<String>>>,
    table: table::TableKernel,
    encode: encode::EncodeKernel,
    rope: rope::RopeKernels,
    pe_cache: Arc<Mutex<Option<encode::PeCache>>>,
    pool: Arc<BufferPool>,
    copy: timing::CopyKernel,
    /// Built on first use, so contexts that never compute ALiBi never compile it.
    alibi: Arc<std::sync::OnceLock<alibi::AlibiKernel>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("adapter", &self.adapter.get_info().name)
            .field("backend", &self.adapter.get_info().backend)
            .field("max_binding", &self.max_binding)
            .finish()
    }
}

impl Context {
    /// Opens the adapter chosen by wgpu's conventions: `WGPU_BACKEND` (vulkan, gl, metal,
    /// dx12), `WGPU_ADAPTER_NAME` (a case-insensitive substring of the name) and
    /// `WGPU_POWER_PREF` (low, high).
    ///
    /// # Errors
    /// [`Error::NoAdapter`] with a hint when nothing matches, [`Error::RequestDevice`] when
    /// the adapter refuses a device, [`Error::InvalidParameter`] for a malformed
    /// `POSENC_MAX_BINDING_SIZE`.
    pub fn new() -> Result<Self> {
        let instance = instance();
        let adapter = select_adapter(&instance)?;
        Self::from_adapter(adapter)
    }

    /// Opens a device on a given adapter.
    ///
    /// # Errors
    /// As [`Context::new`], less the adapter search.
    pub fn from_adapter(adapter: wgpu::Adapter) -> Result<Self> {
        let cap = binding_cap_from_env()?;
        let name = adapter.get_info().name;
        let descriptor = wgpu::DeviceDescriptor {
            label: Some("posenc.device"),
            required_limits: adapter.limits(),
            ..Default::default()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&descriptor))
            .map_err(|source| Error::RequestDevice { adapter: name, source })?;
        let uncaptured = Arc::new(Mutex::new(None));
        let sink = Arc::clone(&uncaptured);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut slot) = sink.lock() {
                slot.get_or_insert_with(|| e.to_string());
            }
        }));
        let limits = device.limits();
        let mut max_binding = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size);
        if let Some(cap) = cap {
            max_binding = max_binding.min(cap);
        }
        // Bindings are sized in whole 4-byte words.
        max_binding &= !3;
        let table = table::TableKernel::new(&device);
        let encode = encode::EncodeKernel::new(&device);
        let rope = rope::RopeKernels::new(&device);
        let pe_cache = Arc::new(Mutex::new(None));
        let pool = Arc::new(BufferPool::default());
        let copy = timing::CopyKernel::new(&device);
        Ok(Self {
            adapter,
            device,
            queue,
            max_binding,
            uncaptured,
            table,
            encode,
            rope,
            pe_cache,
            pool,
            copy,
            alibi: Arc::default(),
        })
    }

    /// What this context runs on.
    pub fn adapter_info(&self) -> wgpu::AdapterInfo {
        self.adapter.get_info()
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
    /// whole words, never above the current cap): what `POSENC_MAX_BINDING_SIZE` does, per
    /// context. Large tables and outputs are then processed in more, smaller chunks.
    #[must_use]
    pub fn with_max_binding_size(&self, bytes: u64) -> Self {
        let mut capped = self.clone();
        capped.max_binding = self.max_binding.min(bytes) & !3;
        // Cached PE rows were sized for the old cap; the capped context builds its own.
        capped.pe_cache = Arc::new(Mutex::new(None));
        capped
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
    /// reports into [`Error::Gpu`].
    fn scoped<T>(&self, op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let result = f();
        let validation = pollster::block_on(validation.pop());
        let oom = pollster::block_on(oom.pop());
        if let Some(e) = validation.or(oom) {
            return Err(Error::Gpu { op, message: e.to_string() });
        }
        if let Some(message) = self.uncaptured.lock().ok().and_then(|mut slot| slot.take()) {
            return Err(Error::Gpu { op, message });
        }
        result
    }

    /// Blocks until submission `index` has completed.
    fn wait(&self, op: &'static str, index: wgpu::SubmissionIndex) -> Result<()> {
        self.device
            .poll(wgpu::PollType::Wait { submission_index: Some(index), timeout: None })
            .map(|_| ())
            .map_err(|e| Error::Gpu { op, message: e.to_string() })
    }

    /// Submits `encoder`, then copies `staging[..len]` into `dst` once the GPU is done.
    fn finish_and_read(
        &self,
        op: &'static str,
        encoder: wgpu::CommandEncoder,
        staging: &wgpu::Buffer,
        dst: &mut [u8],
    ) -> Result<()> {
        let index = self.queue.submit([encoder.finish()]);
        let len = dst.len() as u64;
        let slice = staging.slice(..len);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            // The receiver outlives the poll below; a failed send only means it is gone.
            let _ = tx.send(r);
        });
        self.wait(op, index)?;
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(Error::Gpu { op, message: e.to_string() }),
            Err(_) => return Err(Error::Gpu { op, message: "readback never completed".into() }),
        }
        {
            let view =
                slice.get_mapped_range().map_err(|e| Error::Gpu { op, message: e.to_string() })?;
            dst.copy_from_slice(&view);
        }
        staging.unmap();
        Ok(())
    }
}

/// Scratch buffers kept between calls, so repeated calls neither allocate nor pay wgpu's
/// zero-initialisation of fresh buffers again. Buffers are matched by exact size and usage;
/// at most [`BufferPool::KEEP`] wait unused.
#[derive(Default)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<wgpu::Buffer>>,
}

impl BufferPool {
    const KEEP: usize = 16;

    pub(crate) fn take(
        self: &Arc<Self>,
        device: &wgpu::Device,
        label: &'static str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> PooledBuffer {
        let reused = self.free.lock().ok().and_then(|mut free| {
            let i = free.iter().position(|b| b.size() == size && b.usage() == usage)?;
            Some(free.swap_remove(i))
        });
        let buffer = reused.unwrap_or_else(|| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: false,
            })
        });
        PooledBuffer { pool: Arc::clone(self), buffer: Some(buffer) }
    }
}

/// A buffer on loan from a [`BufferPool`]; it goes back when dropped.
pub(crate) struct PooledBuffer {
    pool: Arc<BufferPool>,
    buffer: Option<wgpu::Buffer>,
}

impl std::ops::Deref for PooledBuffer {
    type Target = wgpu::Buffer;
    fn deref(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("present until drop")
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        if let (Some(buffer), Ok(mut free)) = (self.buffer.take(), self.pool.free.lock()) {
            free.push(buffer);
            if free.len() > BufferPool::KEEP {
                free.remove(0);
            }
        }
    }
}

/// Compiles kernel `name` (entry point of the same name) with the binding layout every
/// posenc kernel shares: a uniform `Params` at binding 0, read-only storage at bindings
/// `1..n_storage`, and the read-write output at binding `n_storage`.
pub(crate) fn build_kernel(
    device: &wgpu::Device,
    name: &'static str,
    n_storage: u32,
) -> (wgpu::BindGroupLayout, wgpu::ComputePipeline) {
    let label = |role: &str| format!("posenc.{name}.{role}");
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(&label("shader")),
        source: wgpu::ShaderSource::Wgsl(crate::shaders::source(name).into()),
    });
    let entry = |binding: u32, ty: wgpu::BufferBindingType| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
        count: None,
    };
    let mut entries = vec![entry(0, wgpu::BufferBindingType::Uniform)];
    for binding in 1..=n_storage {
        let read_only = binding < n_storage;
        entries.push(entry(binding, wgpu::BufferBindingType::Storage { read_only }));
    }
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
        compilation_options: Default::default(),
        cache: None,
    });
    (layout, pipeline)
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
