//! [`AlibiPass`]: the ALiBi bias recorded into the caller's command encoder, written into
//! the caller's buffer.

use std::sync::Arc;

use crate::alibi::{AlibiSpec, Form};
use crate::error::{Error, Result};
use crate::gpu::Context;
use crate::gpu::alibi::{AlibiParams, AlibiShape};
use crate::gpu::memory::DeviceBuffer;
use crate::gpu::pass::{BindCache, Need, PartShape, Span, uniform_blocks};

/// The op every record of this pass names in its errors.
const RECORD_OP: &str = "alibi_pass.record";

/// The ALiBi bias of one spec, prepared once and recorded into the caller's command
/// encoders: see [`Context::alibi_pass`].
pub struct AlibiPass {
    ctx: Context,
    spec: AlibiSpec,
    /// The parameters common to every part; each part's own are set when it is bound.
    params: AlibiParams,
    /// Rows (head, query) per part: all of them, unless the output exceeds one storage
    /// binding; then each part binds its own range of rows ([`AlibiPass::parts`]).
    part_rows: u64,
    slopes: DeviceBuffer,
    bound: BindCache<Bound>,
}

impl std::fmt::Debug for AlibiPass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlibiPass").field("spec", &self.spec).finish()
    }
}

struct Bound {
    parts: Vec<PartBound>,
}

struct PartBound {
    /// The part's form: four keys per thread where its keys are whole vec4s.
    pipeline: wgpu::ComputePipeline,
    grid: (u32, u32, u32),
    group: wgpu::BindGroup,
    _params: wgpu::Buffer,
}

impl Context {
    /// Prepares the bias tensor `[heads, len, kv_len]` of `spec` (f32, row-major) to be
    /// recorded with [`AlibiPass::record`] into a buffer and command encoder the caller
    /// owns.
    ///
    /// An output larger than one storage binding (or than 2^31 - 1 values) is written in
    /// parts of whole rows, each binding its own range of the caller's buffer
    /// ([`AlibiPass::parts`]).
    ///
    /// # Errors
    /// [`Error::Limit`] if a storage-alignment's worth of rows (one row where a row is a
    /// multiple of 256 bytes) does not fit one binding, the tensor has 2^32 rows (head,
    /// query) or more, or one step's bias is larger than the device's largest buffer;
    /// [`Error::DeviceLost`], [`Error::OutOfMemory`], [`Error::Gpu`].
    pub fn alibi_pass(&self, spec: &AlibiSpec) -> Result<AlibiPass> {
        self.scoped("alibi_pass", || self.prepare_alibi_pass(spec))
    }

    /// [`Context::alibi_pass`], its error scopes awaited rather than blocked on, as
    /// [`Context::encode_pass_async`].
    ///
    /// # Errors
    /// As [`Context::alibi_pass`].
    pub async fn alibi_pass_async(&self, spec: &AlibiSpec) -> Result<AlibiPass> {
        self.scoped_async("alibi_pass", async || self.prepare_alibi_pass(spec)).await
    }

    fn prepare_alibi_pass(&self, spec: &AlibiSpec) -> Result<AlibiPass> {
        const OP: &str = "alibi_pass";
        let heads = spec.heads();
        let rows = u64::from(heads) * spec.len();
        let kv_len = spec.kv_len();
        if rows > u64::from(u32::MAX) || kv_len > u64::from(u32::MAX) {
            // The figure is the count the message names (round 24 found the larger of the
            // two named as keys per row).
            let (what, requested) = if kv_len > u64::from(u32::MAX) {
                ("keys per row of one recorded pass", kv_len)
            } else {
                ("rows (head, query) of one recorded pass", rows)
            };
            return Err(Error::Limit {
                op: OP,
                what,
                requested,
                limit_name: "u32 indices",
                limit: u64::from(u32::MAX),
            });
        }
        // One step's bias must fit one buffer: at most 2^32 x 2^32 f32 values would
        // overflow the byte counts below (u64), and no device holds them.
        let bytes = u128::from(rows) * u128::from(kv_len) * 4;
        let max_buffer = self.device.limits().max_buffer_size;
        if bytes > u128::from(max_buffer) {
            return Err(Error::Limit {
                op: OP,
                what: "bytes of one step's bias (heads x len x kv_len f32), which one buffer \
                       must hold",
                requested: u64::try_from(bytes).unwrap_or(u64::MAX),
                limit_name: "the device's max_buffer_size",
                limit: max_buffer,
            });
        }
        let part_rows = self.alibi_part_rows(OP, rows, kv_len)?;
        let params = AlibiParams {
            n_rows: rows as u32,
            n_cols: kv_len as u32,
            len: spec.len() as u32,
            offset: spec.offset(),
            causal: u32::from(spec.form() == Form::Causal),
            ..AlibiParams::default()
        };
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
            params,
            part_rows,
            slopes,
            bound: BindCache::default(),
        })
    }
}

impl Context {
    /// Rows per part of a recorded ALiBi bias of `rows` rows of `kv_len` f32 values: all
    /// of them when they fit one storage binding and stay below 2^31 values, else the most
    /// that do from any offset, in a multiple that keeps every part a whole number of
    /// storage-alignment units from the first.
    fn alibi_part_rows(&self, op: &'static str, rows: u64, kv_len: u64) -> Result<u64> {
        let row_bytes = kv_len * 4;
        let max_values = (1u64 << 31) - 1;
        if self.fits_one_binding(rows * row_bytes) && rows * kv_len <= max_values {
            return Ok(rows.max(1));
        }
        let shape = PartShape {
            row_bytes,
            multiple: 1,
            max_rows: max_values / kv_len,
            what: "bias rows of one part of a recorded pass (one binding from any offset)",
        };
        self.part_rows(op, &shape)
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

    /// Parts a step is recorded in, one dispatch each: one, unless the output exceeds one
    /// storage binding (or 2^31 - 1 values); then each part writes its own range of rows,
    /// bound on its own. None for an empty bias, whose record records nothing.
    pub fn parts(&self) -> usize {
        if self.output_bytes() == 0 {
            return 0;
        }
        u64::from(self.params.n_rows).div_ceil(self.part_rows) as usize
    }

    /// Records the bias into `out` (from the slice's start, row-major `[heads, len,
    /// kv_len]` f32), bit for bit [`crate::alibi::bias_cpu`]. `out` needs `STORAGE` usage
    /// and an offset that is a multiple of 4; nothing is submitted or waited for. An output
    /// larger than one binding is written in [`AlibiPass::parts`], one dispatch each.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a missing usage or a misaligned offset,
    /// [`Error::Shape`] for a slice smaller than the tensor, [`Error::DeviceLost`];
    /// natively [`Error::Gpu`] if wgpu refuses the buffer (on the web that goes to the
    /// page's error scope, docs/browser.md).
    pub fn record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        out: wgpu::BufferSlice<'_>,
    ) -> Result<()> {
        let bound = self.prepare_record(out)?;
        if let Some(bound) = bound {
            self.dispatch(&mut crate::gpu::pass::begin(encoder, "posenc.alibi_pass.pass"), &bound);
        }
        Ok(())
    }

    /// [`AlibiPass::record`] into a compute pass the caller has open, beside the caller's
    /// other dispatches (one per part). They leave their pipeline and bind group 0 set in
    /// the pass, as [`EncodePass::record_in`](crate::gpu::EncodePass::record_in) says.
    ///
    /// # Errors
    /// As [`AlibiPass::record`].
    pub fn record_in(
        &self,
        pass: &mut wgpu::ComputePass<'_>,
        out: wgpu::BufferSlice<'_>,
    ) -> Result<()> {
        if let Some(bound) = self.prepare_record(out)? {
            self.dispatch(pass, &bound);
        }
        Ok(())
    }

    fn dispatch(&self, pass: &mut wgpu::ComputePass<'_>, bound: &Bound) {
        for part in &bound.parts {
            pass.set_pipeline(&part.pipeline);
            pass.set_bind_group(0, &part.group, &[]);
            pass.dispatch_workgroups(part.grid.0, part.grid.1, part.grid.2);
        }
    }

    /// Checks `out` and returns the bind groups of its parts; `None` for an empty tensor.
    fn prepare_record(&self, out: wgpu::BufferSlice<'_>) -> Result<Option<Arc<Bound>>> {
        let total = self.output_bytes();
        let storage = wgpu::BufferUsages::STORAGE;
        let need = |bytes| Need { name: "out", bytes, usage: storage, usage_text: "STORAGE" };
        if total == 0 {
            self.ctx.span(RECORD_OP, out, &need(0))?;
            return Ok(None);
        }
        // One output range per part (one unless the output exceeds a binding).
        let part_bytes = self.part_rows * u64::from(self.params.n_cols) * 4;
        let spans = self.ctx.part_spans(RECORD_OP, out, &need(total), part_bytes)?;
        Ok(Some(self.bound.get_or_make(spans, |spans| self.bind(spans))?))
    }

    /// The parameters and bind group of each part, writing the output ranges `spans`.
    fn bind(&self, spans: &[Span]) -> Result<Bound> {
        let ctx = &self.ctx;
        let max_groups = ctx.device.limits().max_compute_workgroups_per_dimension;
        let all = u64::from(self.params.n_rows);
        ctx.validated(RECORD_OP, || -> Result<Bound> {
            let parts = spans
                .iter()
                .enumerate()
                .map(|(k, out)| {
                    let row0 = k as u64 * self.part_rows;
                    let rows = self.part_rows.min(all - row0) as u32;
                    let n_cols = self.params.n_cols;
                    let aligned = n_cols.is_multiple_of(4) && out.base.is_multiple_of(4);
                    let shape = AlibiShape::new(n_cols.into(), ctx.coalesced, aligned, max_groups);
                    let (groups_y, groups_z) = shape.fold(rows, n_cols, max_groups);
                    let params = AlibiParams {
                        n_rows: rows,
                        row0: row0 as u32,
                        groups_x: shape.groups_x,
                        groups_y,
                        out_base: out.base,
                        rows_per_group: shape.rows_per_group,
                        ..self.params
                    };
                    let kernel = ctx.alibi_kernel(shape.form);
                    let (buffer, _) = uniform_blocks(
                        ctx,
                        RECORD_OP,
                        "posenc.alibi_pass.params",
                        &[bytemuck::bytes_of(&params)],
                    )?;
                    let entry = |binding: u32, resource| wgpu::BindGroupEntry { binding, resource };
                    let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some("posenc.alibi_pass.bind_group"),
                        layout: &kernel.layout,
                        entries: &[
                            entry(0, buffer.as_entire_binding()),
                            entry(1, self.slopes.as_entire_binding()),
                            entry(2, out.binding()),
                        ],
                    });
                    let grid = (shape.groups_x, groups_y, groups_z);
                    Ok(PartBound {
                        pipeline: kernel.pipeline.clone(),
                        grid,
                        group,
                        _params: buffer,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Bound { parts })
        })?
    }
}
