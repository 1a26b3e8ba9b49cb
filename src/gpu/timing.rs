//! Device timings for `posenc bench`: the vec4 copy ceiling, the table kernel into a device
//! buffer, and readback. Each figure is measured the same way for every item so the ratios
//! compare like with like: with GPU timestamps written before and after the work when the
//! device has them (`TIMESTAMP_QUERY` and `TIMESTAMP_QUERY_INSIDE_ENCODERS`), else as the
//! wall time from submission to completion of work whose inputs are already on the device.

use std::cell::Cell;
use std::time::Instant;

use ndarray::ArrayView2;

use bytemuck::{Pod, Zeroable};

use super::table::{TableBuffers, flat_steps};
use super::{Context, fold_dispatch};
use crate::encode::EncodeOptions;
use crate::error::{Error, Result};
use crate::shaders::WORKGROUP_SIZE;
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
        ctx.finish_and_read(op, encoder, &self.staging, &mut bytes)?;
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

/// One form of the copy ceiling, ready to record.
struct CopyForm<'a> {
    pipeline: &'a wgpu::ComputePipeline,
    group: &'a wgpu::BindGroup,
    grid: (u32, u32),
}

impl CopyForm<'_> {
    fn record(&self, encoder: &mut wgpu::CommandEncoder) {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("posenc.copy.pass"),
            timestamp_writes: None,
        });
        pass.set_pipeline(self.pipeline);
        pass.set_bind_group(0, self.group, &[]);
        pass.dispatch_workgroups(self.grid.0, self.grid.1, 1);
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
    /// Padding to 16 bytes.
    pub _pad: [u32; 2],
}

/// The two forms of the copy ceiling: one vec4 per invocation (`copy`), four adjacent
/// vec4s per invocation (`copy_x4`). Which is faster depends on the adapter.
#[derive(Clone)]
pub(super) struct CopyKernel {
    pub(super) layout: wgpu::BindGroupLayout,
    pub(super) pipeline: wgpu::ComputePipeline,
    x4_layout: wgpu::BindGroupLayout,
    x4_pipeline: wgpu::ComputePipeline,
}

impl CopyKernel {
    pub(super) fn new(device: &wgpu::Device) -> Self {
        let (layout, pipeline) = super::build_kernel(device, "copy");
        let (x4_layout, x4_pipeline) = super::build_kernel(device, "copy_x4");
        Self { layout, pipeline, x4_layout, x4_pipeline }
    }
}

impl Context {
    /// How this context's timings are taken: device timestamps when the device offers them
    /// and [`Options::timestamps`](super::Options::timestamps) allowed them, else the wall
    /// clock.
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

    /// Seconds per run of the fastest vec4 copy of `bytes` (rounded down to 16; at most one
    /// binding), one figure per repeat: each repeat times both forms of the copy (one vec4,
    /// or four adjacent vec4s, per invocation) and keeps the faster, after one warm-up run
    /// of each.
    ///
    /// # Errors
    /// [`Error::Gpu`] if wgpu reports an error.
    pub fn time_copy(&self, bytes: u64, repeats: usize) -> Result<Vec<f64>> {
        let mark = |v: u64| [v as u32, !(v as u32), 0x5EED_0000 ^ v as u32, 0xC0FF_EE00];
        let runs = self.copy_forms("copy", bytes, mark, |form| {
            self.time_submissions("posenc.copy.encoder", repeats, |encoder| form.record(encoder))
        })?;
        Ok(runs[0].iter().zip(&runs[1]).map(|(a, b)| a.min(*b)).collect())
    }

    /// Runs `time` once for each form of the copy ceiling over `bytes` (rounded down to 16;
    /// at most one binding), with the form's pipeline and bind group ready and its
    /// destination cleared, then checks that the form really copied: vec4s of the source
    /// marked with `mark` must be in the destination. Returns what each `time` returned.
    fn copy_forms(
        &self,
        op: &'static str,
        bytes: u64,
        mark: impl Fn(u64) -> [u32; 4],
        mut time: impl FnMut(&CopyForm<'_>) -> Result<Vec<f64>>,
    ) -> Result<[Vec<f64>; 2]> {
        let bytes = (bytes.min(self.max_binding) & !15).max(16);
        self.scoped(op, || {
            use wgpu::BufferUsages as U;
            let usage = U::STORAGE | U::COPY_DST | U::COPY_SRC;
            let src = self.pooled("posenc.copy.src", bytes, usage)?;
            let dst = self.pooled("posenc.copy.dst", bytes, usage)?;
            let n_vecs = (bytes / 16) as u32;
            // A ceiling must really copy: marked vec4s spread over the buffer are checked
            // in the destination after each form's runs (cleared before them).
            let probes: Vec<u64> =
                (0..COPY_PROBES).map(|k| (u64::from(n_vecs) - 1) * k / (COPY_PROBES - 1)).collect();
            for &v in &probes {
                self.queue.write_buffer(&src, 16 * v, bytemuck::cast_slice(&mark(v)));
            }
            let staging =
                self.pooled("posenc.copy.probes", 16 * COPY_PROBES, U::MAP_READ | U::COPY_DST)?;
            let params_buf = self.pooled(
                "posenc.copy.params",
                size_of::<CopyParams>() as u64,
                U::UNIFORM | U::COPY_DST,
            )?;
            let max_groups = self.device.limits().max_compute_workgroups_per_dimension;
            let forms = [
                (&self.copy.layout, &self.copy.pipeline, 1),
                (&self.copy.x4_layout, &self.copy.x4_pipeline, 4),
            ];
            let mut runs = [Vec::new(), Vec::new()];
            for (k, (layout, pipeline, per_invocation)) in forms.into_iter().enumerate() {
                let mut clear = self.device.create_command_encoder(&Default::default());
                clear.clear_buffer(&dst, 0, None);
                self.queue.submit([clear.finish()]);
                let invocations = n_vecs.div_ceil(per_invocation);
                let (gx, gy) = fold_dispatch(invocations.div_ceil(WORKGROUP_SIZE), max_groups);
                let params = CopyParams { n_vecs, groups_x: gx, _pad: [0; 2] };
                self.queue.write_buffer(&params_buf, 0, bytemuck::bytes_of(&params));
                let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("posenc.copy.bind_group"),
                    layout,
                    entries: &[
                        wgpu::BindGroupEntry {
                            binding: 0,
                            resource: params_buf.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry { binding: 1, resource: src.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 2, resource: dst.as_entire_binding() },
                    ],
                });
                // The clear and the parameters go ahead of the timed runs.
                self.wait(op, self.queue.submit([]))?;
                runs[k] = time(&CopyForm { pipeline, group: &group, grid: (gx, gy) })?;
                let mut encoder = self.device.create_command_encoder(&Default::default());
                for (k, &v) in probes.iter().enumerate() {
                    encoder.copy_buffer_to_buffer(&dst, 16 * v, &staging, 16 * k as u64, 16);
                }
                let mut got = vec![0u8; 16 * COPY_PROBES as usize];
                self.finish_and_read(op, encoder, &staging, &mut got)?;
                for (k, &v) in probes.iter().enumerate() {
                    if got[16 * k..16 * k + 16] != *bytemuck::cast_slice::<u32, u8>(&mark(v)) {
                        return Err(Error::Gpu {
                            op,
                            message: format!(
                                "the copy ceiling ({per_invocation} vec4 per invocation) left \
                                 vec4 {v} of {n_vecs} wrong"
                            ),
                        });
                    }
                }
            }
            Ok(runs)
        })
    }

    /// Seconds per call of the fastest vec4 copy of `bytes` (the copy of
    /// [`Context::time_copy`], same bytes, same two forms) as a caller sees a one-dispatch
    /// operation, by the wall clock: creating the command encoder, recording the dispatch,
    /// submitting it and waiting for the device to finish. This is the ceiling of a whole
    /// call such as [`Context::encode_into_buffer`] followed by a wait, which pays the same
    /// submission and wait on top of its work. Pipelines, buffers and the bind group are
    /// made beforehand, as a context keeps its own. One figure per repeat, the faster of the
    /// two forms, after one warm-up call of each; as for `time_copy`, marked vec4s are
    /// checked in the destination, so each form must really have copied.
    ///
    /// # Errors
    /// [`Error::Gpu`] if wgpu reports an error or a form left a marked vec4 uncopied;
    /// [`Error::DeviceLost`] if a call does not complete within
    /// [`SUBMISSION_TIMEOUT`](super::SUBMISSION_TIMEOUT).
    pub fn time_copy_call(&self, bytes: u64, repeats: usize) -> Result<Vec<f64>> {
        const OP: &str = "copy_call";
        // Marks unlike time_copy's, so a destination left over from it cannot pass.
        let mark = |v: u64| [!(v as u32), v as u32, 0xCA11_0000 ^ v as u32, 0x0C0F_FEE0];
        let runs = self.copy_forms(OP, bytes, mark, |form| {
            let mut times = Vec::with_capacity(repeats);
            for run in 0..=repeats {
                let start = Instant::now();
                let mut encoder =
                    self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("posenc.copy_call.encoder"),
                    });
                form.record(&mut encoder);
                let index = self.queue.submit([encoder.finish()]);
                self.wait(OP, index)?;
                if run > 0 {
                    times.push(start.elapsed().as_secs_f64());
                }
            }
            Ok(times)
        })?;
        Ok(runs[0].iter().zip(&runs[1]).map(|(a, b)| a.min(*b)).collect())
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
        self.encode_into_buffer_timed(spec, table, ids, positions, options, out, timer.as_ref())?;
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
    pub fn time_table(&self, spec: &PeSpec, positions: &[u32], repeats: usize) -> Result<Vec<f64>> {
        let bytes = positions.len() as u64 * u64::from(spec.dim()) * 4;
        if bytes > self.max_binding || positions.is_empty() {
            return Err(Error::Limit {
                op: "time_table",
                what: "the table (one binding, at least one row)",
                requested: bytes,
                limit_name: "max storage binding size",
                limit: self.max_binding,
            });
        }
        self.scoped("table", || {
            let buffers = TableBuffers::new(
                self,
                positions.len(),
                spec.dim() as usize,
                &flat_steps(spec),
                false,
            )?;
            self.time_submissions("posenc.table.encoder", repeats, |encoder| {
                self.record_table(spec, &buffers, positions, encoder)
            })
        })
    }

    /// Copies a whole buffer (usage must include `COPY_SRC`) back to host memory.
    ///
    /// # Errors
    /// [`Error::Gpu`] if wgpu reports an error.
    pub fn read_buffer(&self, buffer: &wgpu::Buffer) -> Result<Vec<u8>> {
        self.read_buffer_range(buffer, 0, buffer.size())
    }

    /// Copies `size` bytes of `buffer` from `offset` (both multiples of 4; usage must
    /// include `COPY_SRC`) back to host memory, once every submission so far has completed.
    pub(crate) fn read_buffer_range(
        &self,
        buffer: &wgpu::Buffer,
        offset: u64,
        size: u64,
    ) -> Result<Vec<u8>> {
        let mut bytes = vec![0u8; size as usize];
        self.scoped("read_buffer", || {
            let staging = self.pooled(
                "posenc.read.staging",
                size,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            )?;
            let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("posenc.read.encoder"),
            });
            encoder.copy_buffer_to_buffer(buffer, offset, &staging, 0, size);
            self.finish_and_read("read_buffer", encoder, &staging, &mut bytes)
        })?;
        Ok(bytes)
    }
}
