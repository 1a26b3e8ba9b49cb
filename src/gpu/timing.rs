//! Device timings for `posenc bench`: the vec4 copy ceiling, the table kernel into a device
//! buffer, and readback. Each figure is the wall time from submission to completion of work
//! whose inputs are already on the device, measured the same way for every item so the
//! ratios compare like with like.

use std::time::Instant;

use bytemuck::{Pod, Zeroable};

use super::table::{TableBuffers, flat_steps};
use super::{Context, fold_dispatch};
use crate::error::{Error, Result};
use crate::shaders::WORKGROUP_SIZE;
use crate::spec::PeSpec;

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

#[derive(Clone)]
pub(super) struct CopyKernel {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
}

impl CopyKernel {
    pub(super) fn new(device: &wgpu::Device) -> Self {
        let (layout, pipeline) = super::build_kernel(device, "copy", 2);
        Self { layout, pipeline }
    }
}

impl Context {
    /// Seconds from submission to completion of what `record` encodes, once per repeat
    /// after one untimed warm-up run.
    fn time_submissions(
        &self,
        op: &'static str,
        repeats: usize,
        mut record: impl FnMut(&mut wgpu::CommandEncoder),
    ) -> Result<Vec<f64>> {
        let mut times = Vec::with_capacity(repeats);
        for run in 0..=repeats {
            let mut encoder = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(op) });
            record(&mut encoder);
            let commands = encoder.finish();
            let start = Instant::now();
            let index = self.queue.submit([commands]);
            self.wait(op, index)?;
            if run > 0 {
                times.push(start.elapsed().as_secs_f64());
            }
        }
        Ok(times)
    }

    /// Seconds per run of a vec4 copy of `bytes` (rounded down to 16; at most one binding),
    /// one figure per repeat, after one warm-up run.
    ///
    /// # Errors
    /// [`Error::Gpu`] if wgpu reports an error.
    pub fn time_copy(&self, bytes: u64, repeats: usize) -> Result<Vec<f64>> {
        let bytes = (bytes.min(self.max_binding) & !15).max(16);
        self.scoped("copy", || {
            let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
            let src = self.pool.take(&self.device, "posenc.copy.src", bytes, usage);
            let dst = self.pool.take(&self.device, "posenc.copy.dst", bytes, usage);
            let params_buf = self.pool.take(
                &self.device,
                "posenc.copy.params",
                16,
                wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            );
            let n_vecs = (bytes / 16) as u32;
            let (gx, gy) = fold_dispatch(
                n_vecs.div_ceil(WORKGROUP_SIZE),
                self.device.limits().max_compute_workgroups_per_dimension,
            );
            let params = CopyParams { n_vecs, groups_x: gx, _pad: [0; 2] };
            self.queue.write_buffer(&params_buf, 0, bytemuck::bytes_of(&params));
            let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("posenc.copy.bind_group"),
                layout: &self.copy.layout,
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: params_buf.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: src.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 2, resource: dst.as_entire_binding() },
                ],
            });
            self.time_submissions("posenc.copy.encoder", repeats, |encoder| {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("posenc.copy.pass"),
                    timestamp_writes: None,
                });
                pass.set_pipeline(&self.copy.pipeline);
                pass.set_bind_group(0, &group, &[]);
                pass.dispatch_workgroups(gx, gy, 1);
            })
        })
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
            );
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
        let mut bytes = vec![0u8; buffer.size() as usize];
        self.scoped("read_buffer", || {
            let staging = self.pool.take(
                &self.device,
                "posenc.read.staging",
                buffer.size(),
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            );
            let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("posenc.read.encoder"),
            });
            encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, buffer.size());
            self.finish_and_read("read_buffer", encoder, &staging, &mut bytes)
        })?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_match_the_wgsl_struct_size() {
        assert_eq!(size_of::<CopyParams>(), 16);
    }
}
