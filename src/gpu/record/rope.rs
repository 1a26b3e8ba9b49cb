//! [`RopePass`]: RoPE recorded into the caller's command encoder, in place on a q or k
//! tensor in the caller's buffer, with positions read from a device buffer.

use super::{BindCache, Need, PartShape, Positions, Span, uniform_blocks};
use crate::encode::Dtype;
use crate::error::{Error, Result};
use crate::gpu::memory::DeviceBuffer;
use crate::gpu::rope::{Kernel, Plan, RopeCsParams, RopeParams, RopeX4Params};
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
    spec: RopeSpec,
    plan: Plan,
    /// Bytes of the tensor, rounded up to whole words.
    bytes: u64,
    /// Head rows per part: all of them, unless the tensor exceeds one storage binding;
    /// then each part binds its own range of the tensor (see [`RopePass::parts`]).
    part_rows: usize,
    /// Per head row, its token (`b * L + l`): its slot in `cs`. A part binds its rows'
    /// range (part sizes keep those ranges at the storage-offset alignment).
    row_slot: DeviceBuffer,
    steps: DeviceBuffer,
    /// cos/sin per token and frequency, written by each step's first dispatch.
    cs: DeviceBuffer,
    /// The general kernel's source copy of one part.
    src: Option<DeviceBuffer>,
    bound: BindCache<Bound>,
}

impl std::fmt::Debug for RopePass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RopePass")
            .field("desc", &self.desc)
            .field("kernel", &self.plan.kernel)
            .finish()
    }
}

struct Bound {
    cs_group: wgpu::BindGroup,
    parts: Vec<PartBound>,
    _cs_params: wgpu::Buffer,
}

/// One part's rotation: its grid, bind group and parameters, and (general kernel) the
/// range of the caller's buffer copied to the source before it.
struct PartBound {
    grid: (u32, u32),
    group: wgpu::BindGroup,
    copy: Option<(u64, u64)>,
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
    /// [`Error::Shape`] if the last axis is not the spec's head dim, or an axis is 0;
    /// [`Error::InvalidParameter`] for a sequence-length-dependent scaling without a fixed
    /// length; [`Error::Limit`] if the cos/sin rows of all its tokens or its row slots
    /// exceed one storage binding, or one part's worth of head rows (a storage-alignment's
    /// worth, 64 rows on most devices) does not fit one binding; [`Error::DeviceLost`],
    /// [`Error::OutOfMemory`], [`Error::Gpu`].
    ///
    /// A tensor larger than one storage binding is rotated in parts, each binding its own
    /// range of the caller's buffer ([`RopePass::parts`]): a long prefill's q or k on
    /// WebGPU's default 128 MiB binding, for one.
    pub fn rope_pass(&self, spec: &RopeSpec, desc: &RopePassDescriptor) -> Result<RopePass> {
        const OP: &str = "rope_pass";
        let (batch, len, ..) = desc.layout.dims(desc.shape);
        let geometry = Geometry::check(spec, desc.shape, desc.layout, (batch, len))?;
        if geometry.elements() == 0 {
            return Err(Error::Shape {
                op: OP,
                what: "q/k tensor",
                expected: "every axis at least 1 (a pass records work)".into(),
                actual: format!("{:?}", desc.shape),
            });
        }
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
        let slot_bytes = rows as u64 * 4;
        if cs_bytes.max(slot_bytes) > self.max_binding {
            return Err(Error::Limit {
                op: OP,
                what: if cs_bytes >= slot_bytes {
                    "the cos/sin rows of one recorded step's tokens"
                } else {
                    "the row slots of one recorded step"
                },
                requested: cs_bytes.max(slot_bytes),
                limit_name: "max storage binding size",
                limit: self.max_binding,
            });
        }
        let bytes = (geometry.elements() as u64 * desc.dtype.size() as u64).next_multiple_of(4);
        let part_rows = self.rope_part_rows(OP, &plan, &geometry, desc.dtype, bytes)?;
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
            let src_bytes =
                (part_rows as u64 * geometry.head_dim as u64 * desc.dtype.size() as u64)
                    .next_multiple_of(4)
                    .min(bytes);
            let src = match plan.kernel {
                Kernel::X4 { .. } => None,
                Kernel::General { .. } => {
                    Some(make("posenc.rope_pass.src", src_bytes, U::STORAGE | U::COPY_DST)?)
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
            spec: spec.clone(),
            plan,
            bytes,
            part_rows,
            row_slot,
            steps,
            cs,
            src,
            bound: BindCache::default(),
        })
    }
}

impl Context {
    /// Head rows per part of a recorded RoPE of `geometry` (`bytes` in all): all of them
    /// when the tensor fits one storage binding, else the most that fit one binding from
    /// any offset, in a multiple that keeps every part's range of the tensor and of the row
    /// slots a whole number of storage-alignment units apart (so every part sits at the
    /// first part's offset within its binding, and 16-bit parts stay whole words), with at
    /// most 2^30 elements a part.
    fn rope_part_rows(
        &self,
        op: &'static str,
        plan: &Plan,
        geometry: &Geometry,
        dtype: Dtype,
        bytes: u64,
    ) -> Result<usize> {
        let rows = geometry.rows();
        let head_dim = geometry.head_dim as u64;
        if self.fits_one_binding(bytes) && rows as u64 * head_dim <= 1 << 30 {
            return Ok(rows);
        }
        let unit = match plan.kernel {
            Kernel::X4 { .. } => 1,
            Kernel::General { rows_per_group } => rows_per_group as u64,
        };
        // Row slots are bound per part too: 4 bytes a row, each part's at the storage
        // alignment.
        let align = self.storage_align();
        let shape = PartShape {
            row_bytes: head_dim * dtype.size() as u64,
            // Both powers of two: their least common multiple is the larger.
            multiple: (align / 4).max(unit),
            max_rows: (1 << 30) / head_dim,
            what: "head rows of one part of a recorded RoPE (one binding from any offset)",
        };
        Ok(self.part_rows(op, &shape)? as usize)
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

    /// Parts a step is recorded in: one, unless the tensor is larger than one storage
    /// binding; then each part rotates its own range of head rows, bound on its own.
    pub fn parts(&self) -> usize {
        self.geometry.rows().div_ceil(self.part_rows.max(1)).max(1)
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
    /// waited for. A tensor larger than one binding is rotated in [`RopePass::parts`], each
    /// in its own compute pass (after its copy, for the general kernel).
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
        let general = matches!(self.plan.kernel, Kernel::General { .. });
        let usage = if general {
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC
        } else {
            wgpu::BufferUsages::STORAGE
        };
        let usage_text = if general { "STORAGE | COPY_SRC" } else { "STORAGE" };
        // One range of the tensor per part (one unless the tensor exceeds a binding).
        // Whole words: a last (or only) part of 16-bit elements ends with the pad half.
        let part_bytes = (self.part_rows as u64 * self.row_bytes()).next_multiple_of(4);
        let data_need = Need { name: "data", bytes: self.bytes, usage, usage_text };
        let parts = self.ctx.part_spans(OP, data, &data_need, part_bytes)?;
        if !general && parts.iter().any(|span| !span.base.is_multiple_of(4)) {
            return Err(Error::InvalidParameter {
                field: "data",
                value: format!("a slice at byte offset {}", data.offset()),
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
        let mut spans = vec![positions];
        spans.extend(parts);
        let bound = self.bound.get_or_make(spans, |spans| self.bind(spans))?;
        let tokens = (self.geometry.batch * self.geometry.len) as u32;
        let n_pairs = tokens * self.freqs.len() as u32;
        let max_groups = self.ctx.device.limits().max_compute_workgroups_per_dimension;
        let (cx, cy) = fold_dispatch(n_pairs.div_ceil(WORKGROUP_SIZE), max_groups);
        let rotation = match self.plan.kernel {
            Kernel::X4 { .. } => &self.ctx.rope.x4_pipeline,
            Kernel::General { .. } => &self.ctx.rope.pipeline,
        };
        for (k, part) in bound.parts.iter().enumerate() {
            if let (Some(src), Some((at, bytes))) = (&self.src, part.copy) {
                encoder.copy_buffer_to_buffer(data.buffer(), at, src, 0, bytes);
            }
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("posenc.rope_pass.pass"),
                timestamp_writes: None,
            });
            if k == 0 {
                pass.set_pipeline(&self.ctx.rope.cs_pipeline);
                pass.set_bind_group(0, &bound.cs_group, &[]);
                pass.dispatch_workgroups(cx, cy, 1);
            }
            pass.set_pipeline(rotation);
            pass.set_bind_group(0, &part.group, &[]);
            pass.dispatch_workgroups(part.grid.0, part.grid.1, 1);
        }
        Ok(())
    }

    /// Bytes of one head row of the tensor.
    fn row_bytes(&self) -> u64 {
        (self.geometry.head_dim * self.desc.dtype.size()) as u64
    }

    /// Dispatches one [`RopePass::record`] records: the cos/sin rows, then the rotation of
    /// each part.
    pub fn dispatches(&self) -> usize {
        1 + self.parts()
    }

    /// Bytes `data`'s offset must be a multiple of: 16 for the vec4 kernel (head dim a
    /// multiple of 8, rotary dim of 16), else 4.
    pub fn data_alignment(&self) -> u64 {
        match self.plan.kernel {
            Kernel::X4 { .. } => 16,
            Kernel::General { .. } => 4,
        }
    }

    /// The cos/sin parameters and bind group, and each part's rotation, of one set of
    /// buffers: `spans` is the positions, then each part's range of the tensor.
    fn bind(&self, spans: &[Span]) -> Result<Bound> {
        let [positions, parts @ ..] = spans else { unreachable!("at least two spans") };
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
        let ctx = &self.ctx;
        ctx.validated("rope_pass.record", || -> Result<Bound> {
            let (params, _) = uniform_blocks(
                ctx,
                "posenc.rope_pass.cs_params",
                &[bytemuck::bytes_of(&cs_params)],
            )?;
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
            let parts = parts
                .iter()
                .enumerate()
                .map(|(k, data)| self.bind_part(k, data))
                .collect::<Result<Vec<_>>>()?;
            Ok(Bound { cs_group, parts, _cs_params: params })
        })?
    }

    /// Part `k`'s rotation, rotating the rows bound at `data`.
    fn bind_part(&self, k: usize, data: &Span) -> Result<PartBound> {
        let ctx = &self.ctx;
        let all = self.geometry.rows();
        let lo = k * self.part_rows;
        let rows = self.part_rows.min(all - lo);
        let max_groups = ctx.device.limits().max_compute_workgroups_per_dimension;
        let (gx, gy, mut words) = self.plan.params(&self.spec, self.desc.dtype, rows, max_groups);
        // The tensor's offset in the part's binding: in vec4s for the vec4 kernel (`record`
        // checked it is whole), in words for the general one.
        match self.plan.kernel {
            Kernel::X4 { .. } => {
                words[std::mem::offset_of!(RopeX4Params, data_base) / 4] = data.base / 4;
            }
            Kernel::General { .. } => {
                words[std::mem::offset_of!(RopeParams, data_base) / 4] = data.base;
            }
        }
        let (params, _) =
            uniform_blocks(ctx, "posenc.rope_pass.params", &[bytemuck::cast_slice(&words)])?;
        // This part's row slots: part sizes keep `lo * 4` at the storage alignment.
        let slots = wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.row_slot,
            offset: lo as u64 * 4,
            size: std::num::NonZeroU64::new(rows as u64 * 4),
        });
        let entry = |binding: u32, resource| wgpu::BindGroupEntry { binding, resource };
        let (group, copy) = match &self.src {
            None => {
                let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("posenc.rope_pass.x4_bind_group"),
                    layout: &ctx.rope.x4_layout,
                    entries: &[
                        entry(0, params.as_entire_binding()),
                        entry(1, slots),
                        entry(2, self.cs.as_entire_binding()),
                        entry(3, data.binding()),
                    ],
                });
                (group, None)
            }
            Some(src) => {
                let bytes = (rows as u64 * self.row_bytes()).next_multiple_of(4);
                let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("posenc.rope_pass.bind_group"),
                    layout: &ctx.rope.layout,
                    entries: &[
                        entry(0, params.as_entire_binding()),
                        entry(1, slots),
                        entry(2, self.cs.as_entire_binding()),
                        entry(
                            3,
                            wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                buffer: src,
                                offset: 0,
                                size: std::num::NonZeroU64::new(bytes),
                            }),
                        ),
                        entry(4, data.binding()),
                    ],
                });
                (group, Some((data.start(), bytes)))
            }
        };
        Ok(PartBound { grid: (gx, gy), group, copy, _params: params })
    }
}
