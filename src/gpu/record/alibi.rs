//! [`AlibiPass`]: the ALiBi bias recorded into the caller's command encoder, written into
//! the caller's buffer.

use super::{BindCache, Need, Span, uniform_blocks};
use crate::alibi::{AlibiSpec, Form};
use crate::error::{Error, Result};
use crate::gpu::alibi::{AlibiKernel, AlibiParams, MAX_GROUPS_X};
use crate::gpu::memory::DeviceBuffer;
use crate::gpu::{Context, fold_dispatch};
use crate::shaders::WORKGROUP_SIZE;

/// The ALiBi bias of one spec, prepared once and recorded into the caller's command
/// encoders: see [`Context::alibi_pass`].
pub struct AlibiPass {
    ctx: Context,
    spec: AlibiSpec,
    kernel: AlibiKernel,
    params: AlibiParams,
    grid: (u32, u32, u32),
    slopes: DeviceBuffer,
    bound: BindCache<Bound>,
}

impl std::fmt::Debug for AlibiPass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlibiPass").field("spec", &self.spec).finish()
    }
}

struct Bound {
    group: wgpu::BindGroup,
    _params: wgpu::Buffer,
}

impl Context {
    /// Prepares the bias tensor `[heads, len, kv_len]` of `spec` (f32, row-major) to be
    /// recorded with [`AlibiPass::record`] into a buffer and command encoder the caller
    /// owns.
    ///
    /// # Errors
    /// [`Error::Limit`] if the tensor exceeds one storage binding or 2^31 - 1 values (a
    /// recorded pass is one dispatch); [`Error::DeviceLost`], [`Error::OutOfMemory`],
    /// [`Error::Gpu`].
    pub fn alibi_pass(&self, spec: &AlibiSpec) -> Result<AlibiPass> {
        const OP: &str = "alibi_pass";
        let values = spec.n_values();
        let cap = (self.max_binding / 4).min((1 << 31) - 1);
        if values > u128::from(cap) {
            return Err(Error::Limit {
                op: OP,
                what: "bias values of one recorded pass",
                requested: u64::try_from(values).unwrap_or(u64::MAX),
                limit_name: "one storage binding of f32 values, below 2^31",
                limit: cap,
            });
        }
        let heads = spec.heads();
        let rows = u64::from(heads) * spec.len();
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension;
        let groups_x = (spec.kv_len().div_ceil(u64::from(WORKGROUP_SIZE)) as u32)
            .clamp(1, MAX_GROUPS_X.min(max_groups));
        let (groups_y, groups_z) = fold_dispatch(rows as u32, max_groups);
        let params = AlibiParams {
            n_rows: rows as u32,
            n_cols: spec.kv_len() as u32,
            len: spec.len() as u32,
            offset: spec.offset(),
            causal: u32::from(spec.form() == Form::Causal),
            groups_x,
            groups_y,
            ..AlibiParams::default()
        };
        let kernel = self.alibi.get_or_init(|| AlibiKernel::new(&self.device)).clone();
        let slope_bits: Vec<u32> = spec.slopes().iter().map(|s| s.to_bits()).collect();
        let slopes = self.scoped(OP, || {
            use wgpu::BufferUsages as U;
            let slopes = self.create_buffer(
                "posenc.alibi_pass.slopes",
                (slope_bits.len() as u64 * 4).max(4),
                U::STORAGE | U::COPY_DST,
            )?;
            self.queue.write_buffer(&slopes, 0, bytemuck::cast_slice(&slope_bits));
            self.queue.submit([]);
            Ok(slopes)
        })?;
        Ok(AlibiPass {
            ctx: self.clone(),
            spec: spec.clone(),
            kernel,
            params,
            grid: (groups_x, groups_y, groups_z),
            slopes,
            bound: BindCache::default(),
        })
    }
}

impl AlibiPass {
    /// The spec the pass was prepared for.
    pub fn spec(&self) -> &AlibiSpec {
        &self.spec
    }

    /// Bytes a step writes: `heads * len * kv_len` f32 values.
    pub fn output_bytes(&self) -> u64 {
        u64::from(self.params.n_rows) * u64::from(self.params.n_cols) * 4
    }

    /// Records the bias into `out` (from the slice's start, row-major `[heads, len,
    /// kv_len]` f32), bit for bit [`crate::alibi::bias_cpu`]. `out` needs `STORAGE` usage
    /// and an offset that is a multiple of 4; nothing is submitted or waited for.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a missing usage or a misaligned offset,
    /// [`Error::Shape`] for a slice smaller than the tensor, [`Error::DeviceLost`],
    /// [`Error::Gpu`] if wgpu refuses the buffer.
    pub fn record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        out: wgpu::BufferSlice<'_>,
    ) -> Result<()> {
        const OP: &str = "alibi_pass.record";
        let need = Need {
            name: "out",
            bytes: self.output_bytes(),
            usage: wgpu::BufferUsages::STORAGE,
            usage_text: "STORAGE",
        };
        let out = self.ctx.span(OP, out, &need)?;
        if self.output_bytes() == 0 {
            return Ok(());
        }
        let bound = self.bound.get_or_make(vec![out], |spans| self.bind(spans))?;
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("posenc.alibi_pass.pass"),
            timestamp_writes: None,
        });
        pass.set_pipeline(&self.kernel.pipeline);
        pass.set_bind_group(0, &bound.group, &[]);
        pass.dispatch_workgroups(self.grid.0, self.grid.1, self.grid.2);
        Ok(())
    }

    fn bind(&self, spans: &[Span]) -> Result<Bound> {
        let [out] = spans else { unreachable!("one span") };
        let params = AlibiParams { out_base: out.base, ..self.params };
        let ctx = &self.ctx;
        ctx.validated("alibi_pass.record", || -> Result<Bound> {
            let (buffer, _) =
                uniform_blocks(ctx, "posenc.alibi_pass.params", &[bytemuck::bytes_of(&params)])?;
            let entry = |binding: u32, resource| wgpu::BindGroupEntry { binding, resource };
            let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("posenc.alibi_pass.bind_group"),
                layout: &self.kernel.layout,
                entries: &[
                    entry(0, buffer.as_entire_binding()),
                    entry(1, self.slopes.as_entire_binding()),
                    entry(2, out.binding()),
                ],
            });
            Ok(Bound { group, _params: buffer })
        })?
    }
}
