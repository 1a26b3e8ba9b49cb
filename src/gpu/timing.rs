//! Device timings for `posenc bench`: the vec4 copy ceiling, the table kernel into a device
//! buffer, and readback. Each figure is measured the same way for every item so the ratios
//! compare like with like: with GPU timestamps written before and after the work when the
//! device has them (`TIMESTAMP_QUERY` and `TIMESTAMP_QUERY_INSIDE_ENCODERS`), else as the
//! wall time from submission to completion of work whose inputs are already on the device.

// Without the `timing` feature the helpers the public timing calls are built on go unused.
#![cfg_attr(not(feature = "timing"), allow(dead_code, unused_imports))]

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::wait;

/// What the timings' readbacks name in [`crate::Error::Blocking`]: there is no async twin.
const NATIVE_ONLY: &str = "a native build (timings are not taken on the web)";

use ndarray::ArrayView2;

use bytemuck::{Pod, Zeroable};

use super::encode::Kernel;
use super::table::{TableBuffers, flat_steps};
use super::{Context, fold_dispatch};
use crate::encode::EncodeOptions;
use crate::error::{Error, Result};
use crate::shaders::{COPY_GRID_GROUPS, CopyForm};
use crate::spec::PeSpec;

use super::GpuTable;

/// How a context times work on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimingSource {
    /// Timestamps the device writes before and after the work: device time alone.
    DeviceTimestamps,
    /// Wall time on the host from submission to completion, which adds the submission's
    /// and the wait's overheads; the fallback when the device has no timestamp queries.
    WallClock,
}

/// A two-slot timestamp query set and the buffers its values are read back through.
struct Stamps {
    set: wgpu::QuerySet,
    resolve: super::memory::DeviceBuffer,
    staging: super::memory::DeviceBuffer,
    /// Nanoseconds per timestamp tick.
    period: f64,
}

impl Stamps {
    fn new(ctx: &Context, period: f32) -> Result<Self> {
        use wgpu::BufferUsages as U;
        let set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("posenc.timing.queries"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        });
        let resolve =
            ctx.create_buffer("posenc.timing.resolve", 16, U::QUERY_RESOLVE | U::COPY_SRC)?;
        let staging = ctx.create_buffer("posenc.timing.staging", 16, U::MAP_READ | U::COPY_DST)?;
        Ok(Self { set, resolve, staging, period: f64::from(period) })
    }

    /// Seconds between the two timestamps of the last submission, or `None` if they do not
    /// advance (a coarse clock on very short work).
    fn read(&self, ctx: &Context, op: &'static str) -> Result<Option<f64>> {
        let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("posenc.timing.read"),
        });
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &self.staging, 0, 16);
        let mut bytes = [0u8; 16];
        let read = ctx.finish_and_read(op, encoder, &self.staging, &mut bytes);
        wait::blocking(op, NATIVE_ONLY, read)?;
        let [t0, t1] =
            [0, 8].map(|i| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes")));
        Ok((t1 > t0).then(|| (t1 - t0) as f64 * self.period * 1e-9))
    }
}

/// Timestamps around work that may span several submissions (an encode that fills the PE
/// cache first, or runs in chunks): the first encoder that asks writes the start, the last
/// the end, so the span includes any host time between the submissions.
pub(super) struct SpanTimer {
    stamps: Stamps,
    started: Cell<bool>,
}

impl SpanTimer {
    /// Writes the start timestamp if no encoder has yet.
    pub(super) fn start(&self, encoder: &mut wgpu::CommandEncoder) {
        if !self.started.replace(true) {
            encoder.write_timestamp(&self.stamps.set, 0);
        }
    }

    /// Writes the end timestamp and resolves both.
    pub(super) fn stop(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.write_timestamp(&self.stamps.set, 1);
        encoder.resolve_query_set(&self.stamps.set, 0..2, &self.stamps.resolve, 0);
    }
}

/// Marked vec4s per copy-ceiling check.
const COPY_PROBES: u64 = 64;

/// Mirror of `Params` in `shaders/copy.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct CopyParams {
    /// `vec4<u32>` elements to copy.
    pub n_vecs: u32,
    /// Workgroups along x of a dispatch folded into 2-D.
    pub groups_x: u32,
    /// Workgroups of a grid-stride form's grid.
    pub n_groups: u32,
    /// Padding to 16 bytes.
    pub _pad: u32,
}

/// How a copy ceiling copies: a WGSL kernel in one of its forms, or the driver's copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CopyMethod {
    /// `shaders/copy.wgsl` specialised, in a compute pass: at most one storage binding.
    Shader(CopyForm),
    /// `copy_buffer_to_buffer`, the driver's own copy (a copy engine or a kernel of its
    /// own), outside any compute pass.
    Driver,
}

impl CopyMethod {
    /// Every method the bench tries: the WGSL forms ([`CopyForm::all`]), then the driver's.
    pub fn all() -> Vec<Self> {
        let mut all: Vec<Self> = CopyForm::all().into_iter().map(Self::Shader).collect();
        all.push(Self::Driver);
        all
    }

    /// The form's name, or `driver`.
    pub fn name(&self) -> String {
        match self {
            Self::Shader(form) => form.name(),
            Self::Driver => "driver".to_string(),
        }
    }
}

/// The copy kernels, one per form, compiled on first use.
#[derive(Clone, Default)]
pub(super) struct CopyKernels {
    forms: Arc<Mutex<HashMap<CopyForm, Arc<Kernel>>>>,
}

/// Buffers for copies of `n_vecs` vec4s: a source with marked vec4s, a destination.
struct CopyRig {
    src: super::PooledBuffer,
    dst: super::PooledBuffer,
    n_vecs: u32,
}

/// A copy ready to record.
enum ReadyCopy {
    Shader { kernel: Arc<Kernel>, group: wgpu::BindGroup, grid: (u32, u32), _params: wgpu::Buffer },
    Driver { bytes: u64 },
}

impl ReadyCopy {
    /// Records the copy into a compute pass (a shader form) or, for the driver's copy,
    /// nothing: see [`ReadyCopy::record`].
    fn dispatch(&self, pass: &mut wgpu::ComputePass<'_>) {
        if let ReadyCopy::Shader { kernel, group, grid, .. } = self {
            pass.set_pipeline(&kernel.pipeline);
            pass.set_bind_group(0, group, &[]);
            pass.dispatch_workgroups(grid.0, grid.1, 1);
        }
    }

    /// Records `steps` copies into `encoder`: a shader form's in one compute pass, the
    /// driver's as copy commands.
    fn record(&self, rig: &CopyRig, encoder: &mut wgpu::CommandEncoder, steps: usize) {
        match self {
            ReadyCopy::Shader { .. } => {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("posenc.copy.pass"),
                    timestamp_writes: None,
                });
                for _ in 0..steps {
                    self.dispatch(&mut pass);
                }
            }
            ReadyCopy::Driver { bytes } => {
                for _ in 0..steps {
                    encoder.copy_buffer_to_buffer(&rig.src, 0, &rig.dst, 0, *bytes);
                }
            }
        }
    }
}

impl Context {
    /// How this context's timings are taken: device timestamps when the device offers them
    /// and [`Options::timestamps`](super::Options::timestamps) allowed them, else the wall
    /// clock.
    #[cfg(feature = "timing")]
    pub fn timing_source(&self) -> TimingSource {
        match self.timestamp_period {
            Some(_) => TimingSource::DeviceTimestamps,
            None => TimingSource::WallClock,
        }
    }

    /// Seconds the device spends on what `record` encodes (see [`TimingSource`]), once per
    /// repeat after one untimed warm-up run. A run whose timestamps do not advance is
    /// timed by the wall clock.
    fn time_submissions(
        &self,
        op: &'static str,
        repeats: usize,
        mut record: impl FnMut(&mut wgpu::CommandEncoder),
    ) -> Result<Vec<f64>> {
        let stamps = self.timestamp_period.map(|period| Stamps::new(self, period)).transpose()?;
        let mut times = Vec::with_capacity(repeats);
        for run in 0..=repeats {
            let mut encoder = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(op) });
            if let Some(s) = &stamps {
                encoder.write_timestamp(&s.set, 0);
            }
            record(&mut encoder);
            if let Some(s) = &stamps {
                encoder.write_timestamp(&s.set, 1);
                encoder.resolve_query_set(&s.set, 0..2, &s.resolve, 0);
            }
            let commands = encoder.finish();
            let start = Instant::now();
            let index = self.queue.submit([commands]);
            self.wait(op, index)?;
            let wall = start.elapsed().as_secs_f64();
            let device = match &stamps {
                Some(s) => s.read(self, op)?,
                None => None,
            };
            if run > 0 {
                times.push(device.unwrap_or(wall));
            }
        }
        Ok(times)
    }

    /// The copy kernel of `form`, compiled on first use.
    pub(super) fn copy_kernel(&self, form: CopyForm) -> Arc<Kernel> {
        let mut kernels = self.copy.forms.lock().unwrap_or_else(|e| e.into_inner());
        let kernel = kernels.entry(form).or_insert_with(|| {
            let (layout, pipeline) = super::build_pipeline(
                &self.device,
                "copy",
                &form.source(),
                &super::layout::bindings("copy"),
            );
            Arc::new(Kernel { layout, pipeline })
        });
        Arc::clone(kernel)
    }

    /// Source and destination of `bytes` (rounded down to 16, at least 16), the source's
    /// probe vec4s marked with `mark`.
    fn copy_rig(&self, bytes: u64, mark: &impl Fn(u64) -> [u32; 4]) -> Result<CopyRig> {
        let bytes = (bytes & !15).max(16);
        use wgpu::BufferUsages as U;
        let usage = U::STORAGE | U::COPY_DST | U::COPY_SRC;
        let src = self.pooled("posenc.copy.src", bytes, usage)?;
        let dst = self.pooled("posenc.copy.dst", bytes, usage)?;
        let n_vecs = u32::try_from(bytes / 16).map_err(|_| Error::Limit {
            op: "copy",
            what: "vec4s of one copy",
            requested: bytes / 16,
            limit_name: "u32::MAX",
            limit: u64::from(u32::MAX),
        })?;
        for v in probes(n_vecs) {
            self.queue.write_buffer(&src, 16 * v, bytemuck::cast_slice(&mark(v)));
        }
        Ok(CopyRig { src, dst, n_vecs })
    }

    /// `method` over `rig`, ready to record, with the destination cleared.
    fn ready_copy(&self, rig: &CopyRig, method: CopyMethod) -> Result<ReadyCopy> {
        let mut clear = self.device.create_command_encoder(&Default::default());
        clear.clear_buffer(&rig.dst, 0, None);
        self.queue.submit([clear.finish()]);
        let form = match method {
            CopyMethod::Driver => {
                return Ok(ReadyCopy::Driver { bytes: u64::from(rig.n_vecs) * 16 });
            }
            CopyMethod::Shader(form) => form,
        };
        if u64::from(rig.n_vecs) * 16 > self.max_binding {
            return Err(Error::Limit {
                op: "copy",
                what: "the bytes of a WGSL copy (one binding)",
                requested: u64::from(rig.n_vecs) * 16,
                limit_name: "max storage binding size (bytes)",
                limit: self.max_binding,
            });
        }
        let kernel = self.copy_kernel(form);
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension;
        let blocks = rig.n_vecs.div_ceil(form.block());
        let groups = if form.grid_stride { blocks.min(COPY_GRID_GROUPS) } else { blocks };
        let (gx, gy) = fold_dispatch(groups, max_groups);
        let params =
            CopyParams { n_vecs: rig.n_vecs, groups_x: gx, n_groups: groups.max(1), _pad: 0 };
        let (params, _) = super::pass::uniform_blocks(
            self,
            "copy",
            "posenc.copy.params",
            &[bytemuck::bytes_of(&params)],
        )?;
        let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("posenc.copy.bind_group"),
            layout: &kernel.layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: rig.src.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: rig.dst.as_entire_binding() },
            ],
        });
        Ok(ReadyCopy::Shader { kernel, group, grid: (gx, gy), _params: params })
    }

    /// Checks that `method` really copied over `rig`: its marked vec4s must be in the
    /// destination.
    fn check_copy(
        &self,
        op: &'static str,
        rig: &CopyRig,
        method: CopyMethod,
        mark: &impl Fn(u64) -> [u32; 4],
    ) -> Result<()> {
        use wgpu::BufferUsages as U;
        let staging =
            self.pooled("posenc.copy.probes", 16 * COPY_PROBES, U::MAP_READ | U::COPY_DST)?;
        let mut encoder = self.device.create_command_encoder(&Default::default());
        let probes = probes(rig.n_vecs);
        for (k, &v) in probes.iter().enumerate() {
            encoder.copy_buffer_to_buffer(&rig.dst, 16 * v, &staging, 16 * k as u64, 16);
        }
        let mut got = vec![0u8; 16 * probes.len()];
        let read = self.finish_and_read(op, encoder, &staging, &mut got);
        wait::blocking(op, NATIVE_ONLY, read)?;
        for (k, &v) in probes.iter().enumerate() {
            if got[16 * k..16 * k + 16] != *bytemuck::cast_slice::<u32, u8>(&mark(v)) {
                return Err(Error::Gpu {
                    op,
                    message: format!(
                        "the copy ceiling ({}) left vec4 {v} of {} wrong",
                        method.name(),
                        rig.n_vecs
                    ),
                });
            }
        }
        Ok(())
    }

    /// Runs `time` with `method` ready over `bytes`, then checks the copy.
    fn with_copy<T>(
        &self,
        op: &'static str,
        method: CopyMethod,
        bytes: u64,
        time: impl FnOnce(&CopyRig, &ReadyCopy) -> Result<T>,
    ) -> Result<T> {
        let mark = |v: u64| [v as u32, !(v as u32), 0x5EED_0000 ^ v as u32, 0xC0FF_EE00];
        self.scoped(op, || {
            let rig = self.copy_rig(bytes, &mark)?;
            let ready = self.ready_copy(&rig, method)?;
            // The marks, the clear and the parameters go ahead of the timed runs.
            self.wait(op, self.queue.submit([]))?;
            let value = time(&rig, &ready)?;
            self.check_copy(op, &rig, method, &mark)?;
            Ok(value)
        })
    }

    /// Seconds per run of `method` copying `bytes` (rounded down to 16; a shader form at
    /// most one binding), one submission a run, device time (see [`TimingSource`]), after
    /// one warm-up run; the copy is checked afterwards (marked vec4s must be in the
    /// destination).
    ///
    /// # Errors
    /// [`Error::Limit`] for a shader form over one binding; [`Error::Gpu`] if wgpu reports
    /// an error or the copy left a marked vec4 wrong.
    #[cfg(feature = "timing")]
    pub fn time_copy_method(
        &self,
        method: CopyMethod,
        bytes: u64,
        repeats: usize,
    ) -> Result<Vec<f64>> {
        self.time_copy_steps(method, bytes, 1, repeats)
    }

    /// Seconds per copy of `steps` copies of `bytes` by `method` recorded into one command
    /// buffer and submitted once (a shader form's in one compute pass), device time: the
    /// ceiling of work recorded the way an engine records its steps. Checked as
    /// [`Context::time_copy_method`].
    ///
    /// # Errors
    /// As [`Context::time_copy_method`].
    #[cfg(feature = "timing")]
    pub fn time_copy_steps(
        &self,
        method: CopyMethod,
        bytes: u64,
        steps: usize,
        repeats: usize,
    ) -> Result<Vec<f64>> {
        let steps = steps.max(1);
        self.with_copy("copy", method, bytes, |rig, ready| {
            let times = self.time_recorded(repeats, |encoder| {
                ready.record(rig, encoder, steps);
                Ok(())
            })?;
            Ok(times.into_iter().map(|t| t / steps as f64).collect())
        })
    }

    /// Seconds per run of the fastest copy of `bytes` (rounded down to 16; at most one
    /// binding) among the WGSL forms and the driver's copy, one figure per repeat.
    ///
    /// # Errors
    /// [`Error::Gpu`] if wgpu reports an error.
    #[cfg(feature = "timing")]
    pub fn time_copy(&self, bytes: u64, repeats: usize) -> Result<Vec<f64>> {
        let bytes = bytes.min(self.max_binding);
        let mut best = vec![f64::INFINITY; repeats];
        for method in CopyMethod::all() {
            let times = self.time_copy_method(method, bytes, repeats)?;
            for (b, t) in best.iter_mut().zip(times) {
                *b = b.min(t);
            }
        }
        Ok(best)
    }

    /// Seconds per call of `method` copying `bytes` as a caller sees a one-dispatch
    /// operation, by the wall clock: creating the command encoder, recording the copy,
    /// submitting it and waiting for the device to finish. This is the ceiling of a whole
    /// call such as [`Context::encode_into_buffer`] followed by a wait, which pays the same
    /// submission and wait on top of its work. Pipelines, buffers and the bind group are
    /// made beforehand, as a context keeps its own. One figure per repeat after one warm-up
    /// call; checked as [`Context::time_copy_method`].
    ///
    /// # Errors
    /// As [`Context::time_copy_method`]; [`Error::DeviceLost`] if a call does not complete
    /// within [`SUBMISSION_TIMEOUT`](super::SUBMISSION_TIMEOUT).
    #[cfg(feature = "timing")]
    pub fn time_copy_call(
        &self,
        method: CopyMethod,
        bytes: u64,
        repeats: usize,
    ) -> Result<Vec<f64>> {
        const OP: &str = "copy_call";
        self.with_copy(OP, method, bytes, |rig, ready| {
            let mut times = Vec::with_capacity(repeats);
            for run in 0..=repeats {
                let start = Instant::now();
                let mut encoder =
                    self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("posenc.copy_call.encoder"),
                    });
                ready.record(rig, &mut encoder, 1);
                let index = self.queue.submit([encoder.finish()]);
                self.wait(OP, index)?;
                if run > 0 {
                    times.push(start.elapsed().as_secs_f64());
                }
            }
            Ok(times)
        })
    }

    /// Seconds per dispatch of `steps` dispatches of one workgroup copying one vec4 (the
    /// least work a dispatch can do), recorded into one command buffer and submitted once:
    /// all in one compute pass, or with `own_pass` each in a compute pass of its own. The
    /// floor under any operation recorded the same way.
    ///
    /// # Errors
    /// [`Error::Gpu`] if wgpu reports an error.
    #[cfg(feature = "timing")]
    pub fn time_dispatch_floor(
        &self,
        steps: usize,
        repeats: usize,
        own_pass: bool,
    ) -> Result<Vec<f64>> {
        let steps = steps.max(1);
        self.with_copy("dispatch_floor", CopyMethod::Shader(CopyForm::ONE), 16, |_, ready| {
            let times = self.time_recorded(repeats, |encoder| {
                if own_pass {
                    for _ in 0..steps {
                        let mut pass = encoder.begin_compute_pass(&Default::default());
                        ready.dispatch(&mut pass);
                    }
                } else {
                    let mut pass = encoder.begin_compute_pass(&Default::default());
                    for _ in 0..steps {
                        ready.dispatch(&mut pass);
                    }
                }
                Ok(())
            })?;
            Ok(times.into_iter().map(|t| t / steps as f64).collect())
        })
    }

    /// Keeps the device busy with copies for `duration`, so that a GPU has raised its
    /// clocks before the first timed item (they rise over tens of milliseconds of load).
    ///
    /// # Errors
    /// [`Error::Gpu`] if wgpu reports an error.
    #[cfg(feature = "timing")]
    pub fn warm_up(&self, duration: std::time::Duration) -> Result<()> {
        let bytes = (64 << 20).min(self.max_binding);
        let form = CopyMethod::Shader(CopyForm::ONE);
        self.with_copy("warm_up", form, bytes, |rig, ready| {
            let start = Instant::now();
            while start.elapsed() < duration {
                let mut encoder = self.device.create_command_encoder(&Default::default());
                ready.record(rig, &mut encoder, 8);
                let index = self.queue.submit([encoder.finish()]);
                self.wait("warm_up", index)?;
            }
            Ok(())
        })
    }

    /// Seconds the device spends on what `record` records into one command encoder, one
    /// submission per repeat after one untimed warm-up submission (see [`TimingSource`]):
    /// how the bench times steps recorded as an engine records them.
    ///
    /// # Errors
    /// What `record` returns; [`Error::Gpu`] if wgpu reports an error.
    #[cfg(feature = "timing")]
    pub fn time_recorded(
        &self,
        repeats: usize,
        mut record: impl FnMut(&mut wgpu::CommandEncoder) -> Result<()>,
    ) -> Result<Vec<f64>> {
        let mut failed = None;
        let times = self.time_submissions("posenc.steps.encoder", repeats, |encoder| {
            if failed.is_none() {
                failed = record(encoder).err();
            }
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(times),
        }
    }

    /// Seconds the device spends on one [`Context::encode_into_buffer`] (see
    /// [`TimingSource`]): from the first command it records to the last, PE-cache fill
    /// included when the call fills the cache. `cold` clears the PE cache first. Host work
    /// before the first submission (checks, sorting the tokens) is not counted; the wall
    /// clock, used without timestamps, counts all of it.
    ///
    /// # Errors
    /// As [`Context::encode_into_buffer`].
    #[allow(clippy::too_many_arguments)]
    #[cfg(feature = "timing")]
    pub fn time_encode(
        &self,
        spec: &PeSpec,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
        out: &wgpu::Buffer,
        cold: bool,
    ) -> Result<f64> {
        if cold {
            self.clear_pe_cache();
        }
        let timer = self
            .timestamp_period
            .map(|period| Stamps::new(self, period))
            .transpose()?
            .map(|stamps| SpanTimer { stamps, started: Cell::new(false) });
        let start = Instant::now();
        self.encode_into_buffer_timed(
            spec.into(),
            table,
            ids,
            positions,
            options,
            out,
            timer.as_ref(),
        )?;
        let wall = start.elapsed().as_secs_f64();
        let device = match &timer {
            Some(t) if t.started.get() => t.stamps.read(self, "encode")?,
            _ => None,
        };
        Ok(device.unwrap_or(wall))
    }

    /// Seconds per run of the table kernel for `positions`, writing a device buffer (no
    /// readback), after one warm-up run. All rows must fit one binding.
    ///
    /// # Errors
    /// [`Error::Limit`] if they do not; [`Error::Gpu`] if wgpu reports an error.
    #[cfg(feature = "timing")]
    pub fn time_table(&self, spec: &PeSpec, positions: &[u32], repeats: usize) -> Result<Vec<f64>> {
        let bytes = positions.len() as u64 * u64::from(spec.dim()) * 4;
        if bytes > self.max_binding || positions.is_empty() {
            return Err(Error::Limit {
                op: "time_table",
                what: "the table (one binding, at least one row)",
                requested: bytes,
                limit_name: "max storage binding size (bytes)",
                limit: self.max_binding,
            });
        }
        self.scoped("table", || {
            let buffers =
                TableBuffers::new(self, positions.len(), spec.dim() as usize, &flat_steps(spec))?;
            self.time_submissions("posenc.table.encoder", repeats, |encoder| {
                self.record_table(spec, &buffers, positions, encoder)
            })
        })
    }

    /// Copies a whole buffer (usage must include `COPY_SRC`) back to host memory, once
    /// every submission so far has completed.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `buffer` if it lacks `COPY_SRC` usage or its size
    /// is not a multiple of 4 bytes (wgpu's copies move whole words); [`Error::Gpu`] if wgpu
    /// reports an error; on the web [`Error::Blocking`] (use [`Context::read_buffer_async`]).
    pub fn read_buffer(&self, buffer: &wgpu::Buffer) -> Result<Vec<u8>> {
        wait::blocking("read_buffer", "read_buffer_async", self.read_buffer_async(buffer))
    }

    /// [`Context::read_buffer`] without blocking: the way to read a recorded pass's output
    /// on the web.
    ///
    /// # Errors
    /// As [`Context::read_buffer`], less [`Error::Blocking`].
    pub async fn read_buffer_async(&self, buffer: &wgpu::Buffer) -> Result<Vec<u8>> {
        self.read_buffer_range_async("read_buffer", buffer, 0, buffer.size()).await
    }

    /// Copies `size` bytes of `buffer` from `offset` (both multiples of 4; usage must
    /// include `COPY_SRC`) back to host memory, once every submission so far has completed.
    /// Its errors name `op`, the call the caller made.
    pub(crate) async fn read_buffer_range_async(
        &self,
        op: &'static str,
        buffer: &wgpu::Buffer,
        offset: u64,
        size: u64,
    ) -> Result<Vec<u8>> {
        if !buffer.usage().contains(wgpu::BufferUsages::COPY_SRC) {
            return Err(Error::InvalidParameter {
                field: "buffer",
                value: format!("a buffer with usage {:?}", buffer.usage()),
                allowed: "a buffer with COPY_SRC usage (it is copied to a staging buffer)",
            });
        }
        if !offset.is_multiple_of(4) || !size.is_multiple_of(4) {
            return Err(Error::InvalidParameter {
                field: "buffer",
                value: format!("{size} bytes from byte {offset}"),
                allowed: "a size and offset that are multiples of 4 bytes (copies move whole \
                          words)",
            });
        }
        // Filled straight from the mapping, never zeroed first: one pass over its pages.
        let n = size as usize;
        let mut bytes: Vec<u8> = Vec::new();
        if bytes.try_reserve_exact(n).is_err() {
            return Err(Error::Alloc { what: "a buffer read back", bytes: size });
        }
        let mut filled = false;
        self.scoped_async(op, async || {
            let staging = self.pooled(
                "posenc.read.staging",
                size,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            )?;
            let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("posenc.read.encoder"),
            });
            encoder.copy_buffer_to_buffer(buffer, offset, &staging, 0, size);
            let dst = &mut bytes.spare_capacity_mut()[..n];
            crate::alloc::advise_huge_pages(dst);
            self.finish_and_read_with(op, encoder, &staging, size, |at, piece| {
                super::copy_out_uninit(&mut dst[at..at + piece.len()], piece);
                filled = at + piece.len() == n;
            })
            .await
        })
        .await?;
        if filled {
            // SAFETY: copy_out_uninit wrote all n bytes of the spare capacity.
            unsafe { bytes.set_len(n) };
        }
        Ok(bytes)
    }
}

/// The vec4 indices a copy check reads: [`COPY_PROBES`] spread over `n_vecs`.
fn probes(n_vecs: u32) -> Vec<u64> {
    let n = u64::from(n_vecs);
    if n <= COPY_PROBES {
        return (0..n).collect();
    }
    (0..COPY_PROBES).map(|k| (n - 1) * k / (COPY_PROBES - 1)).collect()
}
