//! [`RopePass`]: RoPE recorded into the caller's command encoder, in place on a q or k
//! tensor in the caller's buffer, with positions read from a device buffer.

use super::{BindCache, Need, Positions, Span, uniform_blocks};
use crate::encode::Dtype;
use crate::error::{Error, Result};
use crate::gpu::memory::DeviceBuffer;
use crate::gpu::rope::{Kernel, PARAMS_WORDS, Plan, RopeCsParams, RopeParams, RopeX4Params};
use crate::gpu::{Context, fold_dispatch};
use crate::rope::{Frequencies, Geometry, Layout, RopeSpec};
use crate::shaders::{FLAG_OFFSETS, FLAG_SCALE, WORKGROUP_SIZE};

/// The shape of a [`RopePass`]'s tensor and where its positions come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RopePassDescriptor {
    /// `[B, L, H, Dh]` or `[B, H, L, Dh]`, as `layout` says.
    pub shape: [usize; 4],
    /// The tensor's axis order.
    pub layout: Layout,
    /// The element type in the buffer.
    pub dtype: Dtype,
    /// One position per token (`[B, L]`) or per sequence (`[B]`, token `l` at start + l).
    pub positions: Positions,
}

/// RoPE prepared once for a spec and a tensor shape, then recorded into the caller's
/// command encoders: see [`Context::rope_pass`].
pub struct RopePass {
    ctx: Context,
    desc: RopePassDescriptor,
    geometry: Geometry,
    freqs: Frequencies,
    kernel: Kernel,
    /// Bytes of the tensor, rounded up to whole words.
    bytes: u64,
    /// The rotation's grid and parameters (the tensor's offset in its binding is set per
    /// set of buffers).
    grid: (u32, u32),
    params: [u32; PARAMS_WORDS],
    /// Per head row, its token (`b * L + l`): its slot in `cs`.
    row_slot: DeviceBuffer,
    steps: DeviceBuffer,
    /// cos/sin per token and frequency, written by each step's first dispatch.
    cs: DeviceBuffer,
    /// The general kernel's source copy.
    src: Option<DeviceBuffer>,
    bound: BindCache<Bound>,
}

impl std::fmt::Debug for RopePass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RopePass").field("desc", &self.desc).field("kernel", &self.kernel).finish()
    }
}

struct Bound {
    cs_group: wgpu::BindGroup,
    rope_group: wgpu::BindGroup,
    _cs_params: wgpu::Buffer,
    _params: wgpu::Buffer,
}

impl Context {
    /// Prepares RoPE of `spec` for tensors of `desc.shape` in a device buffer, to be
    /// recorded with [`RopePass::record`] into command encoders the caller owns, with the
    /// positions in a device buffer. The frequencies are resolved here: a scaling that
    /// depends on the sequence length (`dynamic`, `longrope`) needs it fixed with
    /// [`RopeSpec::with_seq_len`].
    ///
    /// # Errors
    /// [`Error::Shape`] if the last axis is not the spec's head dim;
    /// [`Error::InvalidParameter`] for a sequence-length-dependent scaling without a fixed
    /// length; [`Error::Limit`] if the tensor, its cos/sin rows or its row slots exceed one
    /// storage binding (a recorded pass is one chunk), or its element count 2^30;
    /// [`Error::DeviceLost`], [`Error::OutOfMemory`], [`Error::Gpu`].
    pub fn rope_pass(&self, spec: &RopeSpec, desc: &RopePassDescriptor) -> Result<RopePass> {
        const OP: &str = "rope_pass";
        let (batch, len, ..) = desc.layout.dims(desc.shape);
        let geometry = Geometry::check(spec, desc.shape, desc.layout, (batch, len))?;
        let freqs = match spec.seq_len() {
            Some(n) => spec.frequencies(n),
            None => {
                let short = spec.frequencies(0);
                if short != spec.frequencies(1 << 32) {
                    return Err(Error::InvalidParameter {
                        field: "rope spec",
                        value: "a scaling that depends on the sequence length, without one".into(),
                        allowed: "a spec with a fixed length (RopeSpec::with_seq_len)",
                    });
                }
                short
            }
        };
        let plan = Plan::new(self, spec, &geometry, desc.dtype, false)?;
        let rows = geometry.rows();
        let tokens = batch * len;
        let cs_bytes = tokens as u64 * u64::from(spec.n_freqs()) * 8;
        if plan.rows_per_chunk < rows || cs_bytes > self.max_binding {
            return Err(Error::Limit {
                op: OP,
                what: "the tensor of one recorded step (and its cos/sin rows)",
                requested: (geometry.elements() as u64 * desc.dtype.size() as u64).max(cs_bytes),
                limit_name: "max storage binding size",
                limit: self.max_binding,
            });
        }
        let bytes = (geometry.elements() as u64 * desc.dtype.size() as u64).next_multiple_of(4);
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension;
        let (gx, gy, words) = plan.params(spec, desc.dtype, rows, max_groups);
        let slots: Vec<u32> =
            (0..rows).map(|row| geometry.token_of_row(desc.layout, row) as u32).collect();
        let steps: Vec<u32> = freqs.steps().iter().flatten().copied().collect();
        let buffers = self.scoped(OP, || {
            use wgpu::BufferUsages as U;
            let make = |label, size: u64, usage| self.create_buffer(label, size.max(4), usage);
            let row_slot =
                make("posenc.rope_pass.row_slot", rows as u64 * 4, U::STORAGE | U::COPY_DST)?;
            self.queue.write_buffer(&row_slot, 0, bytemuck::cast_slice(&slots));
            let steps_buf =
                make("posenc.rope_pass.steps", steps.len() as u64 * 4, U::STORAGE | U::COPY_DST)?;
            self.queue.write_buffer(&steps_buf, 0, bytemuck::cast_slice(&steps));
            let cs = make("posenc.rope_pass.cs", cs_bytes, U::STORAGE)?;
            let src = match plan.kernel {
                Kernel::X4 { .. } => None,
                Kernel::General { .. } => {
                    Some(make("posenc.rope_pass.src", bytes, U::STORAGE | U::COPY_DST)?)
                }
            };
            self.queue.submit([]);
            Ok((row_slot, steps_buf, cs, src))
        })?;
        let (row_slot, steps, cs, src) = buffers;
        Ok(RopePass {
            ctx: self.clone(),
            desc: desc.clone(),
            geometry,
            freqs,
            kernel: plan.kernel,
            bytes,
            grid: (gx, gy),
            params: words,
            row_slot,
            steps,
            cs,
            src,
            bound: BindCache::default(),
        })
    }
}

impl RopePass {
    /// What the pass was prepared for.
    pub fn descriptor(&self) -> &RopePassDescriptor {
        &self.desc
    }

    /// Bytes of the tensor a step rotates, rounded up to whole words.
    pub fn tensor_bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes of `positions` a step reads.
    pub fn positions_bytes(&self) -> u64 {
        self.desc.positions.values(self.geometry.batch, self.geometry.len) as u64 * 4
    }

    /// Records one step into `encoder`: rotates the tensor at the start of `data` in place,
    /// bit for bit what [`crate::cpu::rope()`] gives except where the backend contracts
    /// `x * c - y * s` into a fused multiply-add (see [`Context::rope`]); the cos/sin
    /// values are exact. `positions` holds one u32 per token or per sequence as prepared.
    ///
    /// `data` needs `STORAGE` usage (and `COPY_SRC` when the head dim is not a multiple of
    /// 8 or the rotary dim of 16: the general kernel reads a copy) and an offset that is a
    /// multiple of 16 bytes for the vec4 kernel (head dim a multiple of 8 and rotary dim of
    /// 16), of 4 bytes for the general one (see [`RopePass::data_alignment`]); `positions`
    /// needs `STORAGE` and an offset that is a multiple of 4. Nothing is submitted or
    /// waited for.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a missing usage or a misaligned offset,
    /// [`Error::Shape`] for a slice smaller than the step needs, [`Error::DeviceLost`],
    /// [`Error::Gpu`] if wgpu refuses a buffer.
    pub fn record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        data: wgpu::BufferSlice<'_>,
        positions: wgpu::BufferSlice<'_>,
    ) -> Result<()> {
        const OP: &str = "rope_pass.record";
        let general = matches!(self.kernel, Kernel::General { .. });
        let usage = if general {
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC
        } else {
            wgpu::BufferUsages::STORAGE
        };
        let usage_text = if general { "STORAGE | COPY_SRC" } else { "STORAGE" };
        let data_need = Need { name: "data", bytes: self.bytes, usage, usage_text };
        let data = self.ctx.span(OP, data, &data_need)?;
        if !general && !data.base.is_multiple_of(4) {
            return Err(Error::InvalidParameter {
                field: "data",
                value: format!("a slice at byte offset {}", data.offset + u64::from(data.base) * 4),
                allowed: "slices starting at a multiple of 16 bytes (the vec4 kernel's words)",
            });
        }
        let pos_need = Need {
            name: "positions",
            bytes: self.positions_bytes(),
            usage: wgpu::BufferUsages::STORAGE,
            usage_text: "STORAGE",
        };
        let positions = self.ctx.span(OP, positions, &pos_need)?;
        if self.geometry.elements() == 0 {
            return Ok(());
        }
        let bound =
            self.bound.get_or_make(vec![data.clone(), positions], |spans| self.bind(spans))?;
        if let Some(src) = &self.src {
            let at = data.offset + u64::from(data.base) * 4;
            encoder.copy_buffer_to_buffer(&data.buffer, at, src, 0, self.bytes);
        }
        let tokens = (self.geometry.batch * self.geometry.len) as u32;
        let n_pairs = tokens * self.freqs.len() as u32;
        let max_groups = self.ctx.device.limits().max_compute_workgroups_per_dimension;
        let (cx, cy) = fold_dispatch(n_pairs.div_ceil(WORKGROUP_SIZE), max_groups);
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("posenc.rope_pass.pass"),
            timestamp_writes: None,
        });
        pass.set_pipeline(&self.ctx.rope.cs_pipeline);
        pass.set_bind_group(0, &bound.cs_group, &[]);
        pass.dispatch_workgroups(cx, cy, 1);
        pass.set_pipeline(match self.kernel {
            Kernel::X4 { .. } => &self.ctx.rope.x4_pipeline,
            Kernel::General { .. } => &self.ctx.rope.pipeline,
        });
        pass.set_bind_group(0, &bound.rope_group, &[]);
        pass.dispatch_workgroups(self.grid.0, self.grid.1, 1);
        Ok(())
    }

    /// Dispatches one [`RopePass::record`] records (the cos/sin rows, then the rotation).
    pub fn dispatches(&self) -> usize {
        2
    }

    /// Bytes `data`'s offset must be a multiple of: 16 for the vec4 kernel (head dim a
    /// multiple of 8, rotary dim of 16), else 4.
    pub fn data_alignment(&self) -> u64 {
        match self.kernel {
            Kernel::X4 { .. } => 16,
            Kernel::General { .. } => 4,
        }
    }

    /// The cos/sin parameters and both bind groups of one pair of buffers (data,
    /// positions).
    fn bind(&self, spans: &[Span]) -> Result<Bound> {
        let [data, positions] = spans else { unreachable!("two spans") };
        let tokens = (self.geometry.batch * self.geometry.len) as u32;
        let n_freqs = self.freqs.len() as u32;
        let max_groups = self.ctx.device.limits().max_compute_workgroups_per_dimension;
        let (cx, _) = fold_dispatch((tokens * n_freqs).div_ceil(WORKGROUP_SIZE), max_groups);
        let af = self.freqs.attention_factor();
        let mut flags = if af == 1.0 { 0 } else { FLAG_SCALE };
        if self.desc.positions == Positions::PerSequence {
            flags |= FLAG_OFFSETS;
        }
        let cs_params = RopeCsParams {
            n_pairs: tokens * n_freqs,
            n_freqs,
            groups_x: cx,
            flags,
            scale_bits: af.to_bits(),
            pos_base: positions.base,
            seq_len: self.geometry.len.max(1) as u32,
            _pad: 0,
        };
        // The rotation's parameters with the tensor's offset in its binding: in vec4s for
        // the vec4 kernel (`record` checked it is whole), in words for the general one.
        let mut rotation = self.params;
        match self.kernel {
            Kernel::X4 { .. } => {
                rotation[std::mem::offset_of!(RopeX4Params, data_base) / 4] = data.base / 4;
            }
            Kernel::General { .. } => {
                rotation[std::mem::offset_of!(RopeParams, data_base) / 4] = data.base;
            }
        }
        let ctx = &self.ctx;
        ctx.validated("rope_pass.record", || -> Result<Bound> {
            let (params, _) = uniform_blocks(
                ctx,
                "posenc.rope_pass.cs_params",
                &[bytemuck::bytes_of(&cs_params)],
            )?;
            let (rotation, _) =
                uniform_blocks(ctx, "posenc.rope_pass.params", &[bytemuck::cast_slice(&rotation)])?;
            let entry = |binding: u32, resource| wgpu::BindGroupEntry { binding, resource };
            let cs_group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("posenc.rope_pass.cs_bind_group"),
                layout: &ctx.rope.cs_layout,
                entries: &[
                    entry(0, params.as_entire_binding()),
                    entry(1, positions.binding()),
                    entry(2, self.steps.as_entire_binding()),
                    entry(3, self.cs.as_entire_binding()),
                ],
            });
            let rope_group = match &self.src {
                None => ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("posenc.rope_pass.x4_bind_group"),
                    layout: &ctx.rope.x4_layout,
                    entries: &[
                        entry(0, rotation.as_entire_binding()),
                        entry(1, self.row_slot.as_entire_binding()),
                        entry(2, self.cs.as_entire_binding()),
                        entry(3, data.binding()),
                    ],
                }),
                Some(src) => ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("posenc.rope_pass.bind_group"),
                    layout: &ctx.rope.layout,
                    entries: &[
                        entry(0, rotation.as_entire_binding()),
                        entry(1, self.row_slot.as_entire_binding()),
                        entry(2, self.cs.as_entire_binding()),
                        entry(3, src.as_entire_binding()),
                        entry(4, data.binding()),
                    ],
                }),
            };
            Ok(Bound { cs_group, rope_group, _cs_params: params, _params: rotation })
        })?
    }
}
