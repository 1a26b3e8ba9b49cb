//! [`RopePass`]: RoPE recorded into the caller's command encoder or compute pass, in place on
//! a q tensor (and a k tensor beside it) in the caller's buffers, with positions read from a
//! device buffer.
//!
//! Two routes give the same bits. The one-dispatch route (`shaders/rope_pass.wgsl`) rotates q
//! and k together. On GPUs each workgroup puts its token's cos/sin once in workgroup memory
//! for all the heads of its block (or, in the head-group form of
//! [`crate::gpu::Options::rope_heads`], each invocation keeps its unit's in registers for
//! its group of heads). On adapters that run shaders on CPU cores an invocation takes its
//! unit's and walks all the token's heads. Either reads them from a cache of exact values
//! built when the pass is prepared (positions below [`ROPE_PASS_CACHED_POSITIONS`]), or
//! computes them.
//! The split
//! route computes cos/sin per token into a buffer
//! (`rope_cs`), then rotates each tensor (`rope_x4`, or `rope` when the head dim is not a
//! multiple of 8 or the rotary dim of 16), in parts when a tensor exceeds one storage
//! binding. A pass takes the first route wherever it can (see [`RopePass::dispatches`]).

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use crate::encode::Dtype;
use crate::error::{Error, Result};
use crate::gpu::memory::DeviceBuffer;
use crate::gpu::pass::{BindCache, Need, PartShape, Positions, Span, uniform_blocks};
use crate::gpu::rope::{Kernel, Plan, RopeCsParams, RopeKernel, RopeParams, RopeX4Params};
use crate::gpu::{Context, fold_dispatch};
use crate::rope::{Frequencies, Geometry, Layout, MultimodalRope, RopeSpec};
#[cfg(doc)]
use crate::shaders::{FLAG_ALTERNATING, FLAG_INTERLEAVED};
use crate::shaders::{
    FLAG_OFFSETS, FLAG_SCALE, ROPE_PASS_WORKGROUP, RopePassForm, RopePassKernel, WORKGROUP_SIZE,
    rope_pass_workgroup,
};

/// The op every record of this pass names in its errors.
const RECORD_OP: &str = "rope_pass.record";

/// The shape of a [`RopePass`]'s tensors and where its positions come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RopePassDescriptor {
    /// q's shape: `[B, L, H, Dh]` or `[B, H, L, Dh]`, as `layout` says.
    pub shape: [usize; 4],
    /// The tensors' axis order.
    pub layout: Layout,
    /// The element type in the buffers.
    pub dtype: Dtype,
    /// One position per token (`[B, L]`) or per sequence (`[B]`, token `l` at start + l).
    pub positions: Positions,
    /// Heads of a k tensor rotated with q by [`RopePass::record_qk`] (same batch, length,
    /// head dim, layout and element type as q, at the same positions, as every Hugging Face
    /// model applies them); 0 when the pass rotates one tensor.
    pub k_heads: usize,
}

/// Mirror of `Params` in `shaders/rope_pass.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct RopePassParams {
    /// Tokens of the step (`B * L`): one workgroup each.
    pub n_tokens: u32,
    /// Tokens per sequence.
    pub seq_len: u32,
    /// Frequencies, `r / 2`.
    pub n_freqs: u32,
    /// [`FLAG_SCALE`] when the attention factor is not 1; [`FLAG_OFFSETS`] for one first
    /// position per sequence.
    pub flags: u32,
    /// f32 bits of the attention factor.
    pub scale_bits: u32,
    /// Index of the first position in the bound positions.
    pub pos_base: u32,
    /// Workgroups along y (tokens beyond fold into z).
    pub groups_y: u32,
    /// Units (four or eight frequencies) per head row.
    pub units_per_row: u32,
    /// `r / 2` elements in vec4s: the neox partner offset.
    pub half_vecs: u32,
    /// Heads of q.
    pub q_heads: u32,
    /// Heads of k (0: none).
    pub k_heads: u32,
    /// q's first vec4 in its binding.
    pub q_base: u32,
    /// q's stride between sequences, in vec4s.
    pub q_seq: u32,
    /// q's stride between tokens of a sequence, in vec4s.
    pub q_tok: u32,
    /// q's stride between heads, in vec4s.
    pub q_head: u32,
    /// k's first vec4 in its binding.
    pub k_base: u32,
    /// k's stride between sequences, in vec4s.
    pub k_seq: u32,
    /// k's stride between tokens of a sequence, in vec4s.
    pub k_tok: u32,
    /// k's stride between heads, in vec4s.
    pub k_head: u32,
    /// Blocks of the kernel's workgroup (times its units per invocation) units per token:
    /// workgroups along x.
    pub blocks: u32,
    /// Always 0: the zero the kernel ORs into each product an add takes, which a compiler
    /// cannot see through, so it cannot contract the two into a multiply-add
    /// (`shaders/shared/rounded.wgsl`).
    pub zero: u32,
    /// Positions whose cos/sin the kernel reads from the cache after the steps (0: none);
    /// see [`ROPE_PASS_CACHED_POSITIONS`].
    pub cached_rows: u32,
    /// Where the cache starts in the steps binding, in (cos, sin) pairs: even, so that the
    /// kernel reads two pairs as one vec4.
    pub cache_base: u32,
    /// Groups of heads per token in the head-group form (`rope_pass_heads` with a group;
    /// 1 otherwise): q's and k's heads over the group, rounded up.
    pub head_groups: u32,
    /// A multimodal step ([`RopePassKernel::axes`]): the `mrope_section` counts in the
    /// config's order, with the layout's [`FLAG_INTERLEAVED`] or [`FLAG_ALTERNATING`] in
    /// `flags` (neither: sections).
    pub section_t: u32,
    /// See `section_t`.
    pub section_h: u32,
    /// See `section_t`.
    pub section_w: u32,
    /// A multimodal step: the distance between one axis's positions and the next's
    /// (axis-major, `[3, B, L]`): the step's tokens.
    pub axis_stride: u32,
}

/// Positions whose cos/sin a recorded RoPE step reads from a cache of exact values
/// computed when the pass is prepared (`rope_cs.wgsl`, the same arithmetic, so the same
/// bits), rather than computing them in every workgroup: a prefill and a decode step's
/// positions up to this context length. Later positions are computed as before. At most
/// [`ROPE_PASS_CACHE_MAX_BYTES`] of cache: 2 MiB for a head dim of 128, fewer rows for
/// rotary dims above 512. On an H100 (2026-11-27) Llama-3-8B's prefill RoPE took 15.95
/// us a step computing them and 13.5 us with a cheap stand-in for them, the copy's time.
/// On lavapipe (2026-12-04) the form for CPU adapters reads it too: 6 - 13 % off the
/// prefill presets' RoPE (docs/performance.md).
pub const ROPE_PASS_CACHED_POSITIONS: u64 = 4096;

/// Most bytes of a recorded RoPE step's cos/sin cache ([`ROPE_PASS_CACHED_POSITIONS`]).
pub const ROPE_PASS_CACHE_MAX_BYTES: u64 = 8 << 20;

/// RoPE prepared once for a spec and a tensor shape, then recorded into the caller's
/// command encoders or compute passes: see [`Context::rope_pass`].
pub struct RopePass {
    ctx: Context,
    desc: RopePassDescriptor,
    spec: RopeSpec,
    freqs: Frequencies,
    /// A multimodal RoPE's axes: positions per axis, `[3, B, L]`.
    mrope: Option<MultimodalRope>,
    /// The frequencies' turn steps, then (the GPU form) the cos/sin cache.
    steps: DeviceBuffer,
    /// The split route's cos/sin per token and frequency, written by a step's first
    /// dispatch.
    cs: DeviceBuffer,
    /// The one-dispatch route, where the shapes allow it.
    fused: Option<Fused>,
    /// The split route of q, and of k when the pass has one.
    q: Split,
    k: Option<Split>,
    fused_bound: BindCache<FusedBound>,
    split_bound: BindCache<SplitBound>,
}

impl std::fmt::Debug for RopePass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RopePass")
            .field("desc", &self.desc)
            .field("kernel", &self.q.plan.kernel)
            .field("one_dispatch", &self.fused.is_some())
            .finish()
    }
}

/// The one-dispatch route: its kernel and parameters less the bound offsets and blocks.
struct Fused {
    kernel: Arc<RopeKernel>,
    form: RopePassForm,
    params: RopePassParams,
}

impl Fused {
    /// The dispatch grid for `tokens` tokens of `units` units each (q's and k's heads) in
    /// `head_groups` groups of heads (1 but in the head-group form): `(blocks, groups_y,
    /// groups_z)`. Blocks: one workgroup per block of a token's units, tokens folded into y
    /// and z; heads: one invocation per unit of a head row (and group of heads), its
    /// workgroups folded into y and z.
    fn grid(&self, tokens: u32, units: u32, head_groups: u32, max_groups: u32) -> (u32, u32, u32) {
        match self.form {
            RopePassForm::Blocks { units: per, workgroup } => {
                let (y, z) = fold_dispatch(tokens, max_groups);
                (units.div_ceil(workgroup * per), y, z)
            }
            RopePassForm::Heads { .. } => {
                // Fits a u32: checked when the route was chosen.
                let invocations = tokens * head_groups * self.params.units_per_row;
                let groups = invocations.div_ceil(ROPE_PASS_WORKGROUP);
                let (y, z) = fold_dispatch(groups, max_groups);
                (1, y, z)
            }
        }
    }
}

struct FusedBound {
    group: wgpu::BindGroup,
    grid: (u32, u32, u32),
    _params: wgpu::Buffer,
}

/// The split route of one tensor: its shape, rotation kernel, parts, and buffers.
struct Split {
    geometry: Geometry,
    plan: Plan,
    /// Bytes of the tensor, rounded up to whole words.
    bytes: u64,
    /// Head rows per part: all of them, unless the tensor exceeds one storage binding;
    /// then each part binds its own range of the tensor.
    part_rows: usize,
    /// Per head row, its token (`b * L + l`): its slot in `cs`. A part binds its rows'
    /// range (part sizes keep those ranges at the storage-offset alignment).
    row_slot: DeviceBuffer,
    /// The general kernel's source copy of one part.
    src: Option<DeviceBuffer>,
}

struct SplitBound {
    cs_group: wgpu::BindGroup,
    /// q's parts, then k's.
    parts: Vec<PartBound>,
    _cs_params: wgpu::Buffer,
}

/// One part's rotation: its grid, bind group and parameters, and (general kernel) the
/// copy of the caller's range to the source before it.
struct PartBound {
    grid: (u32, u32),
    group: wgpu::BindGroup,
    pipeline: wgpu::ComputePipeline,
    copy: Option<PartCopy>,
    _params: wgpu::Buffer,
}

/// A copy of `bytes` from `at` in the caller's buffer to the start of `to`.
struct PartCopy {
    from: wgpu::Buffer,
    at: u64,
    to: wgpu::Buffer,
    bytes: u64,
}

impl Context {
    /// Prepares RoPE of `spec` for tensors of `desc.shape` (and a k tensor of
    /// `desc.k_heads` heads) in device buffers, to be recorded with [`RopePass::record`]
    /// or [`RopePass::record_qk`] into command encoders the caller owns, or with
    /// [`RopePass::record_in`] / [`RopePass::record_qk_in`] into a compute pass the caller
    /// has open, with the positions in a device buffer. The frequencies are resolved here:
    /// a scaling that depends on the sequence length (`dynamic`, `longrope`) needs it
    /// fixed with [`RopeSpec::with_seq_len`].
    ///
    /// # Errors
    /// [`Error::Shape`] if the last axis is not the spec's head dim, or an axis is 0;
    /// [`Error::TooLarge`] if q or k would hold more 4-byte elements than `isize::MAX`
    /// bytes; [`Error::InvalidParameter`] for a sequence-length-dependent scaling without a
    /// fixed length; [`Error::Limit`] if the cos/sin rows of all its tokens or its row slots
    /// exceed one storage binding, or one part's worth of head rows (a storage-alignment's
    /// worth, 64 rows on most devices) does not fit one binding; [`Error::DeviceLost`],
    /// [`Error::OutOfMemory`], [`Error::Gpu`].
    ///
    /// A tensor larger than one storage binding is rotated in parts, each binding its own
    /// range of the caller's buffer ([`RopePass::parts`]): a long prefill's q or k on
    /// WebGPU's default 128 MiB binding, for one.
    pub fn rope_pass(&self, spec: &RopeSpec, desc: &RopePassDescriptor) -> Result<RopePass> {
        self.scoped("rope_pass", || self.prepare_rope_pass(spec, None, desc))
    }

    /// [`Context::rope_pass`] for a multimodal RoPE (M-RoPE: Qwen2-VL, Qwen3-VL, GLM-4V,
    /// ...): a step's positions are one per token and axis, `[3, B, L]` row-major (time,
    /// then height, then width, as transformers' position ids are), and frequency `i` turns
    /// by the position of axis `mrope.axes()[i]`, bit for bit as
    /// [`crate::cpu::rope_multimodal`]. `desc.positions` must be
    /// [`Positions::PerToken`]. Such a pass takes the routes of [`Context::rope_pass`]
    /// ([`RopePass::dispatches`]): one dispatch, whose kernel reads the token's three
    /// positions and turns each frequency by its axis's (from the cos/sin cache for
    /// positions it holds), wherever the 1-D pass of the same shape takes one; the split
    /// route otherwise, whose cos/sin dispatch gathers each frequency from its axis. A step
    /// of text tokens, whose axes agree, is the 1-D rotation, which [`Context::rope_pass`]
    /// also records, with a third of the positions.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `mrope` if it assigns another number of
    /// frequencies than the spec's `rotary_dim / 2`, and naming `positions` for
    /// [`Positions::PerSequence`]; [`Error::Limit`] if the step's positions, three per
    /// token, exceed one storage binding; otherwise as [`Context::rope_pass`].
    pub fn rope_pass_multimodal(
        &self,
        spec: &RopeSpec,
        mrope: &MultimodalRope,
        desc: &RopePassDescriptor,
    ) -> Result<RopePass> {
        self.scoped("rope_pass", || self.prepare_rope_pass(spec, Some(mrope), desc))
    }

    /// [`Context::rope_pass_multimodal`], its error scopes awaited rather than blocked on.
    ///
    /// # Errors
    /// As [`Context::rope_pass_multimodal`].
    pub async fn rope_pass_multimodal_async(
        &self,
        spec: &RopeSpec,
        mrope: &MultimodalRope,
        desc: &RopePassDescriptor,
    ) -> Result<RopePass> {
        self.scoped_async("rope_pass", async || self.prepare_rope_pass(spec, Some(mrope), desc))
            .await
    }

    /// [`Context::rope_pass`], its error scopes awaited rather than blocked on, as
    /// [`Context::encode_pass_async`].
    ///
    /// # Errors
    /// As [`Context::rope_pass`].
    pub async fn rope_pass_async(
        &self,
        spec: &RopeSpec,
        desc: &RopePassDescriptor,
    ) -> Result<RopePass> {
        self.scoped_async("rope_pass", async || self.prepare_rope_pass(spec, None, desc)).await
    }

    fn prepare_rope_pass(
        &self,
        spec: &RopeSpec,
        mrope: Option<&MultimodalRope>,
        desc: &RopePassDescriptor,
    ) -> Result<RopePass> {
        const OP: &str = "rope_pass";
        if let Some(m) = mrope {
            crate::rope::check_axes(spec, m)?;
            if desc.positions != Positions::PerToken {
                return Err(Error::InvalidParameter {
                    field: "positions",
                    value: format!("{:?} with a multimodal RoPE", desc.positions),
                    allowed: "PerToken: a multimodal step reads a position per token and \
                              axis, [3, B, L]",
                });
            }
        }
        let (batch, len, ..) = desc.layout.dims(desc.shape);
        let geometry = Geometry::check(OP, spec, desc.shape, desc.layout, (batch, len))?;
        if geometry.elements() == 0 {
            return Err(Error::Shape {
                op: OP,
                what: "q/k tensor",
                expected: "every axis at least 1 (a pass records work)".into(),
                actual: format!("{:?}", desc.shape),
            });
        }
        let k_geometry = match desc.k_heads {
            0 => None,
            heads => {
                let shape = match desc.layout {
                    Layout::Blhd => [batch, len, heads, geometry.head_dim],
                    Layout::Bhld => [batch, heads, len, geometry.head_dim],
                };
                // k's shape is q's with k_heads: its errors name k.
                Some(Geometry::check(OP, spec, shape, desc.layout, (batch, len)).map_err(|e| {
                    match e {
                        Error::TooLarge { op, shape, limit_name, limit, .. } => Error::TooLarge {
                            op,
                            what: "k (batch x len x k_heads x head_dim)",
                            shape,
                            limit_name,
                            limit,
                        },
                        other => other,
                    }
                })?)
            }
        };
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
        let tokens = batch * len;
        let axis_bytes = tokens as u64 * 12;
        if mrope.is_some() && axis_bytes > self.max_binding {
            return Err(Error::Limit {
                op: OP,
                what: "the positions of one recorded step's tokens, three each",
                requested: axis_bytes,
                limit_name: "max storage binding size (bytes)",
                limit: self.max_binding,
            });
        }
        let cs_bytes = tokens as u64 * u64::from(spec.n_freqs()) * 8;
        if cs_bytes > self.max_binding {
            return Err(Error::Limit {
                op: OP,
                what: "the cos/sin rows of one recorded step's tokens",
                requested: cs_bytes,
                limit_name: "max storage binding size (bytes)",
                limit: self.max_binding,
            });
        }
        let steps_words: Vec<u32> = freqs.steps().iter().flatten().copied().collect();
        let (steps, cs, q, k) = self.scoped(OP, || {
            use wgpu::BufferUsages as U;
            let steps_buf = self.create_buffer(
                "posenc.rope_pass.steps",
                (steps_words.len() as u64 * 4).max(4),
                U::STORAGE | U::COPY_DST,
            )?;
            self.queue.write_buffer(&steps_buf, 0, bytemuck::cast_slice(&steps_words));
            let cs = self.create_buffer("posenc.rope_pass.cs", cs_bytes.max(4), U::STORAGE)?;
            let q = Split::new(self, spec, &geometry, desc)?;
            let k = k_geometry.as_ref().map(|g| Split::new(self, spec, g, desc)).transpose()?;
            self.queue.submit([]);
            Ok((steps_buf, cs, q, k))
        })?;
        let mut fused = self.fused_rope(spec, &freqs, mrope, desc, &q, k.as_ref());
        // Every form reads the cos/sin of its positions from a cache after the steps.
        let steps = match fused.as_mut() {
            Some(f) => match self.rope_cos_sin_cache(OP, &freqs, &steps_words, &steps)? {
                Some((buffer, rows, base)) => {
                    f.params.cached_rows = rows;
                    f.params.cache_base = base;
                    buffer
                }
                None => steps,
            },
            None => steps,
        };
        Ok(RopePass {
            ctx: self.clone(),
            desc: desc.clone(),
            spec: spec.clone(),
            freqs,
            mrope: mrope.copied(),
            steps,
            cs,
            fused,
            q,
            k,
            fused_bound: BindCache::default(),
            split_bound: BindCache::default(),
        })
    }

    /// The steps binding of a GPU-form RoPE step with its cos/sin cache: `freqs`' steps,
    /// then, from pair `base` (a storage-alignment multiple), the (cos, sin) of every
    /// frequency of positions `0..rows`, computed here by the host-array path's cos/sin pass
    /// (`record_rope_cs`, reading the steps from `steps_buf`). `None` when not even one row
    /// fits: the binding, [`ROPE_PASS_CACHE_MAX_BYTES`], or a quarter of what the memory
    /// budget has left (the pass then computes every position's, as without a cache).
    fn rope_cos_sin_cache(
        &self,
        op: &'static str,
        freqs: &Frequencies,
        steps: &[u32],
        steps_buf: &DeviceBuffer,
    ) -> Result<Option<(DeviceBuffer, u32, u32)>> {
        let n_freqs = freqs.len() as u64;
        let row = n_freqs * 8;
        let align = u64::from(self.device.limits().min_storage_buffer_offset_alignment);
        // 16-byte aligned: the kernel reads the cache as vec4s, two pairs each.
        let base = (steps.len() as u64 * 4).max(4).next_multiple_of(align.max(16));
        let fit =
            (self.max_binding.saturating_sub(base) / row).min(ROPE_PASS_CACHE_MAX_BYTES / row);
        let budget =
            self.budget_left().map_or(u64::MAX, |left| (left / 4).saturating_sub(base) / row);
        let rows = fit.min(budget).min(ROPE_PASS_CACHED_POSITIONS);
        if rows == 0 {
            return Ok(None);
        }
        let built = self.scoped(op, || {
            use wgpu::BufferUsages as U;
            let buffer = self.create_buffer(
                "posenc.rope_pass.steps",
                base + rows * row,
                U::STORAGE | U::COPY_DST,
            )?;
            self.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(steps));
            // The host-array path's cos/sin pass, over positions 0..rows, its output the cache
            // after the steps. It reads the steps from the plain buffer: one dispatch may not
            // read a buffer through one binding and write it through another.
            let positions: Vec<u32> = (0..rows as u32).collect();
            let positions_buf = self.create_buffer(
                "posenc.rope_pass.cache_positions",
                rows * 4,
                U::STORAGE | U::COPY_DST,
            )?;
            self.queue.write_buffer(&positions_buf, 0, bytemuck::cast_slice(&positions));
            let params = self.create_buffer(
                "posenc.rope_pass.cache_params",
                std::mem::size_of::<RopeCsParams>() as u64,
                U::UNIFORM | U::COPY_DST,
            )?;
            let cache = wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &buffer,
                offset: base,
                size: std::num::NonZeroU64::new(rows * row),
            });
            let group = self.rope_cs_bind_group(&params, &positions_buf, steps_buf, cache);
            let mut encoder = self.device.create_command_encoder(&Default::default());
            self.record_rope_cs(freqs, None, rows as usize, &params, &group, &mut encoder);
            self.queue.submit([encoder.finish()]);
            Ok(buffer)
        });
        match built {
            Ok(buffer) => Ok(Some((buffer, rows as u32, (base / 8) as u32))),
            // Memory the budget or the device lacks: no cache, every position computed.
            Err(Error::Limit { .. } | Error::OutOfMemory { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The one-dispatch route for these tensors, if they take the vec4 kernel, each fits
    /// one storage binding, and their cos/sin fit a workgroup's memory; with `mrope`, its
    /// multimodal form (each frequency at its axis's position).
    fn fused_rope(
        &self,
        spec: &RopeSpec,
        freqs: &Frequencies,
        mrope: Option<&MultimodalRope>,
        desc: &RopePassDescriptor,
        q: &Split,
        k: Option<&Split>,
    ) -> Option<Fused> {
        let Kernel::X4 { per_vec, kind } = q.plan.kernel else { return None };
        let whole = |s: &Split| s.part_rows == s.geometry.rows();
        if !whole(q) || !k.is_none_or(whole) {
            return None;
        }
        let n_freqs = spec.n_freqs();
        let row_units = n_freqs / kind.unit_freqs();
        let g = &q.geometry;
        let units = (g.heads + desc.k_heads) as u64 * u64::from(row_units);
        let heads = (g.heads + desc.k_heads) as u32;
        let form = match (self.rope_heads, self.coalesced) {
            (Some(group), _) => RopePassForm::Heads { group: group.min(heads) },
            (None, true) => {
                let per = self.units.unwrap_or(1);
                let workgroup = rope_pass_workgroup((g.batch * g.len) as u64, units, per);
                RopePassForm::Blocks { units: per, workgroup }
            }
            (None, false) => RopePassForm::Heads { group: 0 },
        };
        let head_groups = match form {
            RopePassForm::Heads { group, .. } if group > 0 => heads.div_ceil(group),
            _ => 1,
        };
        let kernel = RopePassKernel::new(kind, n_freqs, form)?;
        let kernel = if mrope.is_some() { kernel.with_axes() } else { kernel };
        let tokens = u32::try_from(g.batch * g.len).ok()?;
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension;
        match form {
            RopePassForm::Blocks { units: per, workgroup }
                if units.div_ceil(u64::from(workgroup * per)) > u64::from(max_groups) =>
            {
                return None;
            }
            // The grid folds workgroups of invocations (token, head group, unit) into y and
            // z.
            RopePassForm::Heads { .. }
                if u32::try_from(
                    u64::from(tokens) * u64::from(head_groups) * u64::from(row_units),
                )
                .is_err() =>
            {
                return None;
            }
            _ => {}
        }
        let af = freqs.attention_factor();
        let mut flags = if af == 1.0 { 0 } else { FLAG_SCALE };
        if desc.positions == Positions::PerSequence {
            flags |= FLAG_OFFSETS;
        }
        // The layout's flag beside FLAG_AXES, which the kernel's specialisation stands for.
        let (axes, [section_t, section_h, section_w]) = super::axes_flags(mrope);
        flags |= axes;
        let row_vecs = (g.head_dim / per_vec) as u32;
        let (len, k_heads) = (g.len as u32, desc.k_heads as u32);
        // Strides in vec4s between sequences, tokens and heads of a tensor of `heads` heads.
        let strides = |heads: u32| match desc.layout {
            Layout::Blhd => (len * heads * row_vecs, heads * row_vecs, row_vecs),
            Layout::Bhld => (heads * len * row_vecs, row_vecs, len * row_vecs),
        };
        let (q_seq, q_tok, q_head) = strides(g.heads as u32);
        let (k_seq, k_tok, k_head) = strides(k_heads);
        let params = RopePassParams {
            n_tokens: tokens,
            seq_len: len.max(1),
            n_freqs,
            flags,
            scale_bits: af.to_bits(),
            pos_base: 0,
            // Set per step (`Fused::grid`).
            groups_y: 0,
            units_per_row: n_freqs / kind.unit_freqs(),
            half_vecs: n_freqs / per_vec as u32,
            q_heads: g.heads as u32,
            k_heads,
            q_base: 0,
            q_seq,
            q_tok,
            q_head,
            k_base: 0,
            k_seq,
            k_tok,
            k_head,
            blocks: 0,
            zero: 0,
            // Set when the cache is built (`Context::rope_cos_sin_cache`).
            cached_rows: 0,
            cache_base: 0,
            head_groups,
            section_t,
            section_h,
            section_w,
            axis_stride: tokens,
        };
        Some(Fused { kernel: self.rope_pass_kernel(kernel), form, params })
    }
}

impl Split {
    /// The split route's buffers for one tensor of `geometry`.
    fn new(
        ctx: &Context,
        spec: &RopeSpec,
        geometry: &Geometry,
        desc: &RopePassDescriptor,
    ) -> Result<Self> {
        const OP: &str = "rope_pass";
        let plan = Plan::new(ctx, spec, geometry, desc.dtype, false, false)?;
        let rows = geometry.rows();
        let slot_bytes = rows as u64 * 4;
        if slot_bytes > ctx.max_binding {
            return Err(Error::Limit {
                op: OP,
                what: "the row slots of one recorded step",
                requested: slot_bytes,
                limit_name: "max storage binding size (bytes)",
                limit: ctx.max_binding,
            });
        }
        let bytes = (geometry.elements() as u64 * desc.dtype.size() as u64).next_multiple_of(4);
        let part_rows = ctx.rope_part_rows(OP, &plan, geometry, desc.dtype, bytes)?;
        let slots: Vec<u32> =
            (0..rows).map(|row| geometry.token_of_row(desc.layout, row) as u32).collect();
        use wgpu::BufferUsages as U;
        let make = |label, size: u64, usage| ctx.create_buffer(label, size.max(4), usage);
        let row_slot = make("posenc.rope_pass.row_slot", slot_bytes, U::STORAGE | U::COPY_DST)?;
        ctx.queue.write_buffer(&row_slot, 0, bytemuck::cast_slice(&slots));
        let src_bytes = (part_rows as u64 * geometry.head_dim as u64 * desc.dtype.size() as u64)
            .next_multiple_of(4)
            .min(bytes);
        let src = match plan.kernel {
            Kernel::X4 { .. } => None,
            Kernel::General { .. } => {
                Some(make("posenc.rope_pass.src", src_bytes, U::STORAGE | U::COPY_DST)?)
            }
        };
        Ok(Self { geometry: *geometry, plan, bytes, part_rows, row_slot, src })
    }

    /// Parts a step of this tensor is rotated in.
    fn parts(&self) -> usize {
        self.geometry.rows().div_ceil(self.part_rows.max(1)).max(1)
    }

    fn general(&self) -> bool {
        matches!(self.plan.kernel, Kernel::General { .. })
    }

    /// Bytes of one head row.
    fn row_bytes(&self, dtype: Dtype) -> u64 {
        (self.geometry.head_dim * dtype.size()) as u64
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

/// Where a record's commands go: the caller's encoder (the pass opens its own compute pass)
/// or a compute pass the caller has open.
enum Target<'a, 'p> {
    Encoder(&'a mut wgpu::CommandEncoder),
    Pass(&'a mut wgpu::ComputePass<'p>),
}

impl RopePass {
    /// What the pass was prepared for.
    pub fn descriptor(&self) -> &RopePassDescriptor {
        &self.desc
    }

    /// Bytes of q a step rotates, rounded up to whole words.
    pub fn tensor_bytes(&self) -> u64 {
        self.q.bytes
    }

    /// Bytes of k a step rotates, rounded up to whole words (0 without a k tensor).
    pub fn k_bytes(&self) -> u64 {
        self.k.as_ref().map_or(0, |k| k.bytes)
    }

    /// Bytes of `positions` a step reads (three per token for a multimodal RoPE).
    pub fn positions_bytes(&self) -> u64 {
        let g = &self.q.geometry;
        let axes = if self.mrope.is_some() { 3 } else { 1 };
        self.desc.positions.values(g.batch, g.len) as u64 * 4 * axes
    }

    /// The multimodal RoPE's axes the pass was prepared with
    /// ([`Context::rope_pass_multimodal`]).
    pub fn multimodal(&self) -> Option<&MultimodalRope> {
        self.mrope.as_ref()
    }

    /// Parts q is rotated in: one, unless it is larger than one storage binding; then each
    /// part rotates its own range of head rows, bound on its own.
    pub fn parts(&self) -> usize {
        self.q.parts()
    }

    /// Dispatches one [`RopePass::record_qk`] records (one [`RopePass::record`]: the same
    /// less k's parts): 1 on the one-dispatch route, taken when the head dim is a multiple
    /// of 8 and the rotary dim of 16, each tensor fits one storage binding, and (in the
    /// blocks form, GPUs' default, whose workgroup holds a token's cos/sin) the rotary dim
    /// is at most 2048; else the cos/sin rows, then each part of q and of k.
    pub fn dispatches(&self) -> usize {
        match self.fused {
            Some(_) => 1,
            None => 1 + self.q.parts() + self.k.as_ref().map_or(0, Split::parts),
        }
    }

    /// Whether a step records one dispatch for q and k (see [`RopePass::dispatches`]).
    pub fn is_one_dispatch(&self) -> bool {
        self.fused.is_some()
    }

    /// Positions `0..n` whose cos/sin a step reads from the cache built when the pass was
    /// prepared ([`ROPE_PASS_CACHED_POSITIONS`], fewer when the binding, the cache's byte
    /// cap or the memory budget allow fewer); later positions are computed, with the same
    /// bits. 0 on the split route (and, until 2026-12-04, in the form for adapters that run
    /// shaders on CPU cores).
    pub fn cached_positions(&self) -> u32 {
        self.fused.as_ref().map_or(0, |f| f.params.cached_rows)
    }

    /// Bytes `data`'s offset must be a multiple of: 16 for the vec4 kernel (head dim a
    /// multiple of 8, rotary dim of 16), else 4.
    pub fn data_alignment(&self) -> u64 {
        match self.q.plan.kernel {
            Kernel::X4 { .. } => 16,
            Kernel::General { .. } => 4,
        }
    }

    /// Records one step into `encoder`: rotates the q tensor at the start of `data` in
    /// place, bit for bit what [`crate::cpu::rope()`] gives (see [`Context::rope`]).
    /// `positions` holds one u32 per token or per sequence as
    /// prepared (a multimodal pass: one per token and axis, `[3, B, L]`, as
    /// [`crate::cpu::rope_multimodal`] rotates with them).
    ///
    /// `data` needs `STORAGE` usage (and `COPY_SRC` when the head dim is not a multiple of
    /// 8 or the rotary dim of 16: the general kernel reads a copy) and an offset that is a
    /// multiple of 16 bytes for the vec4 kernel (head dim a multiple of 8 and rotary dim of
    /// 16), of 4 bytes for the general one (see [`RopePass::data_alignment`]); `positions`
    /// needs `STORAGE` and an offset that is a multiple of 4, and may share `data`'s
    /// buffer. A 16-bit tensor of an odd element count is bound as whole 4-byte words:
    /// `data` must hold the last word whole (its pad half is written back unchanged).
    /// Nothing is submitted or waited for.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a missing usage or a misaligned offset,
    /// [`Error::Shape`] for a slice smaller than the step needs, [`Error::DeviceLost`];
    /// natively [`Error::Gpu`] if wgpu refuses a buffer (on the web that goes to the page's
    /// error scope, docs/browser.md).
    pub fn record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        data: wgpu::BufferSlice<'_>,
        positions: wgpu::BufferSlice<'_>,
    ) -> Result<()> {
        self.record_to(Target::Encoder(encoder), data, None, positions)
    }

    /// Records one step rotating q (at the start of `q`) and k (at the start of `k`) at the
    /// same positions, as [`RopePass::record`] rotates q: in one dispatch where the pass
    /// takes the one-dispatch route ([`RopePass::dispatches`]). q and k may be slices of
    /// one buffer (an engine's fused qkv projection), in ranges that do not overlap, and
    /// `positions` may share it.
    ///
    /// # Errors
    /// As [`RopePass::record`], for either tensor; [`Error::InvalidParameter`] on a pass
    /// prepared without a k tensor (`k_heads` 0), and for a k whose bytes overlap q's in
    /// one buffer (a shared element would be rotated twice).
    pub fn record_qk(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        q: wgpu::BufferSlice<'_>,
        k: wgpu::BufferSlice<'_>,
        positions: wgpu::BufferSlice<'_>,
    ) -> Result<()> {
        self.record_to(Target::Encoder(encoder), q, Some(k), positions)
    }

    /// [`RopePass::record`] into a compute pass the caller has open, with the caller's
    /// other dispatches: no pass of its own, no copy. Its dispatches leave their pipeline and
    /// bind group 0 set in the pass, as
    /// [`EncodePass::record_in`](crate::gpu::EncodePass::record_in) says.
    ///
    /// # Errors
    /// As [`RopePass::record`]; [`Error::InvalidParameter`] when the pass takes the general
    /// kernel (head dim not a multiple of 8, or rotary dim not of 16), which reads a copy of
    /// each part made by a copy command before it: those need [`RopePass::record`].
    pub fn record_in(
        &self,
        pass: &mut wgpu::ComputePass<'_>,
        data: wgpu::BufferSlice<'_>,
        positions: wgpu::BufferSlice<'_>,
    ) -> Result<()> {
        self.record_to(Target::Pass(pass), data, None, positions)
    }

    /// [`RopePass::record_qk`] into a compute pass the caller has open.
    ///
    /// # Errors
    /// As [`RopePass::record_qk`] and [`RopePass::record_in`].
    pub fn record_qk_in(
        &self,
        pass: &mut wgpu::ComputePass<'_>,
        q: wgpu::BufferSlice<'_>,
        k: wgpu::BufferSlice<'_>,
        positions: wgpu::BufferSlice<'_>,
    ) -> Result<()> {
        self.record_to(Target::Pass(pass), q, Some(k), positions)
    }

    fn record_to(
        &self,
        target: Target<'_, '_>,
        q: wgpu::BufferSlice<'_>,
        k: Option<wgpu::BufferSlice<'_>>,
        positions: wgpu::BufferSlice<'_>,
    ) -> Result<()> {
        let k = match (k, &self.k) {
            (None, _) => None,
            (Some(slice), Some(split)) => Some((slice, split)),
            (Some(_), None) => {
                return Err(Error::InvalidParameter {
                    field: "k",
                    value: "a k tensor".into(),
                    allowed: "record_qk on a pass prepared with k_heads > 0",
                });
            }
        };
        if matches!(target, Target::Pass(_)) && self.q.general() {
            return Err(Error::InvalidParameter {
                field: "pass",
                value: "a compute pass the caller has open".into(),
                allowed: "a command encoder (RopePass::record): the general kernel (head dim \
                          not a multiple of 8, or rotary dim not of 16) reads a copy of each \
                          part, made by a copy command outside any compute pass",
            });
        }
        // One tensor is `data`, as `record` names it; with k beside it, `q`.
        let q_name = if k.is_some() { "q" } else { "data" };
        let q_parts = self.parts_of(RECORD_OP, q_name, q, &self.q)?;
        let k_parts = match k {
            Some((slice, split)) => {
                let parts = self.parts_of(RECORD_OP, "k", slice, split)?;
                check_apart(q, self.q.bytes, slice, split.bytes)?;
                Some(parts)
            }
            None => None,
        };
        let pos_need = Need {
            name: "positions",
            bytes: self.positions_bytes(),
            usage: wgpu::BufferUsages::STORAGE,
            usage_text: "STORAGE",
        };
        let positions = self.ctx.span(RECORD_OP, positions, &pos_need)?;
        // One dispatch binds the positions read-only beside q and k read-write, which wgpu
        // refuses within one buffer: positions sharing a tensor's buffer take the split
        // route, whose dispatches bind them apart.
        let shares = |parts: &[Span]| parts.iter().any(|p| p.buffer == positions.buffer);
        let aliased = shares(&q_parts) || k_parts.as_deref().is_some_and(shares);
        match &self.fused {
            Some(fused) if !aliased => {
                let key = [vec![positions], q_parts, k_parts.unwrap_or_default()].concat();
                let bound =
                    self.fused_bound.get_or_make(key, |spans| self.bind_fused(fused, spans))?;
                let dispatch = |pass: &mut wgpu::ComputePass<'_>| {
                    pass.set_pipeline(&fused.kernel.pipeline);
                    pass.set_bind_group(0, &bound.group, &[]);
                    let (x, y, z) = bound.grid;
                    pass.dispatch_workgroups(x, y, z);
                };
                match target {
                    Target::Pass(pass) => dispatch(pass),
                    Target::Encoder(encoder) => dispatch(&mut begin(encoder)),
                }
            }
            _ => {
                let q_count = q_parts.len();
                let key = [vec![positions], q_parts, k_parts.unwrap_or_default()].concat();
                let bound =
                    self.split_bound.get_or_make(key, |spans| self.bind_split(spans, q_count))?;
                self.record_split(target, &bound);
            }
        }
        Ok(())
    }

    /// The ranges of `slice` one step of `split`'s tensor binds, checked.
    fn parts_of(
        &self,
        op: &'static str,
        name: &'static str,
        slice: wgpu::BufferSlice<'_>,
        split: &Split,
    ) -> Result<Vec<Span>> {
        let general = split.general();
        let usage = if general {
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC
        } else {
            wgpu::BufferUsages::STORAGE
        };
        let usage_text = if general { "STORAGE | COPY_SRC" } else { "STORAGE" };
        // One range of the tensor per part (one unless the tensor exceeds a binding).
        // Whole words: a last (or only) part of 16-bit elements ends with the pad half.
        let part_bytes =
            (split.part_rows as u64 * split.row_bytes(self.desc.dtype)).next_multiple_of(4);
        // A 16-bit tensor of an odd element count ends inside a word: the kernels bind (and
        // write back) the whole word, so the slice must hold it.
        let exact = split.geometry.elements() as u64 * self.desc.dtype.size() as u64;
        if exact != split.bytes && slice.size() < split.bytes {
            return Err(Error::Shape {
                op,
                what: name,
                expected: format!(
                    "a slice of at least {} bytes: the tensor's {exact}, rounded up to whole \
                     4-byte words (the pad half is read and written back unchanged)",
                    split.bytes
                ),
                actual: format!("{} bytes", slice.size()),
            });
        }
        let need = Need { name, bytes: split.bytes, usage, usage_text };
        let parts = self.ctx.part_spans(op, slice, &need, part_bytes)?;
        if !general && parts.iter().any(|span| !span.base.is_multiple_of(4)) {
            return Err(Error::InvalidParameter {
                field: name,
                value: format!("a slice at byte offset {}", slice.offset()),
                allowed: "slices starting at a multiple of 16 bytes (the vec4 kernel's words)",
            });
        }
        Ok(parts)
    }

    /// The one-dispatch route's parameters and bind group for `spans`: the positions, q,
    /// and k when the step has one.
    fn bind_fused(&self, fused: &Fused, spans: &[Span]) -> Result<FusedBound> {
        let [positions, q, rest @ ..] = spans else { unreachable!("positions and q") };
        let k = rest.first();
        let k_heads = if k.is_some() { fused.params.k_heads } else { 0 };
        let heads = fused.params.q_heads + k_heads;
        let units = heads * fused.params.units_per_row;
        // The head-group form's groups of this step's heads (q's alone when k is not
        // rotated): no workgroup is dispatched for k's groups then.
        let head_groups = match fused.form {
            RopePassForm::Heads { group } if group > 0 => heads.div_ceil(group),
            _ => 1,
        };
        let g = &self.q.geometry;
        let max_groups = self.ctx.device.limits().max_compute_workgroups_per_dimension;
        let tokens = (g.batch * g.len) as u32;
        let (blocks, groups_y, groups_z) = fused.grid(tokens, units, head_groups, max_groups);
        let params = RopePassParams {
            pos_base: positions.base,
            q_base: q.base / 4,
            k_base: k.map_or(0, |k| k.base / 4),
            k_heads,
            blocks,
            groups_y,
            head_groups,
            ..fused.params
        };
        let ctx = &self.ctx;
        ctx.validated(RECORD_OP, || -> Result<FusedBound> {
            let (buffer, _) = uniform_blocks(
                ctx,
                RECORD_OP,
                "posenc.rope_pass.params",
                &[bytemuck::bytes_of(&params)],
            )?;
            let entry = |binding: u32, resource| wgpu::BindGroupEntry { binding, resource };
            // Without a k tensor the kernel never touches binding 4, but it must hold a
            // buffer: a stand-in of one vec4, not q (WebGPU refuses two writable bindings
            // of overlapping ranges of one buffer in a dispatch, wgpu natively does not).
            let stand_in;
            let k = match k {
                Some(k) => k.binding(),
                None => {
                    stand_in = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("posenc.rope_pass.no_k"),
                        size: 16,
                        usage: wgpu::BufferUsages::STORAGE,
                        mapped_at_creation: false,
                    });
                    stand_in.as_entire_binding()
                }
            };
            let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("posenc.rope_pass.bind_group"),
                layout: &fused.kernel.layout,
                entries: &[
                    entry(0, buffer.as_entire_binding()),
                    entry(1, positions.binding()),
                    entry(2, self.steps.as_entire_binding()),
                    entry(3, q.binding()),
                    entry(4, k),
                ],
            });
            Ok(FusedBound { group, grid: (blocks, groups_y, groups_z), _params: buffer })
        })?
    }

    /// Records the split route: the cos/sin rows of the step's tokens, then each part of q
    /// and of k, after its copy for the general kernel.
    fn record_split(&self, target: Target<'_, '_>, bound: &SplitBound) {
        let g = &self.q.geometry;
        let tokens = (g.batch * g.len) as u32;
        let n_pairs = tokens * self.freqs.len() as u32;
        let max_groups = self.ctx.device.limits().max_compute_workgroups_per_dimension;
        let (cx, cy) = fold_dispatch(n_pairs.div_ceil(WORKGROUP_SIZE), max_groups);
        let cs = |pass: &mut wgpu::ComputePass<'_>| {
            pass.set_pipeline(&self.ctx.rope.cs_pipeline);
            pass.set_bind_group(0, &bound.cs_group, &[]);
            pass.dispatch_workgroups(cx, cy, 1);
        };
        let rotate = |pass: &mut wgpu::ComputePass<'_>, part: &PartBound| {
            pass.set_pipeline(&part.pipeline);
            pass.set_bind_group(0, &part.group, &[]);
            pass.dispatch_workgroups(part.grid.0, part.grid.1, 1);
        };
        match target {
            Target::Pass(pass) => {
                cs(pass);
                for part in &bound.parts {
                    rotate(pass, part);
                }
            }
            Target::Encoder(encoder) if bound.parts.iter().all(|p| p.copy.is_none()) => {
                let mut pass = begin(encoder);
                cs(&mut pass);
                for part in &bound.parts {
                    rotate(&mut pass, part);
                }
            }
            Target::Encoder(encoder) => {
                // The general kernel: each part's copy comes before its own pass.
                for (n, part) in bound.parts.iter().enumerate() {
                    if let Some(c) = &part.copy {
                        encoder.copy_buffer_to_buffer(&c.from, c.at, &c.to, 0, c.bytes);
                    }
                    let mut pass = begin(encoder);
                    if n == 0 {
                        cs(&mut pass);
                    }
                    rotate(&mut pass, part);
                }
            }
        }
    }

    /// The split route's cos/sin parameters and bind group, and each part's rotation, of
    /// one set of buffers: `spans` is the positions, then q's parts (`q_parts` of them),
    /// then k's.
    fn bind_split(&self, spans: &[Span], q_parts: usize) -> Result<SplitBound> {
        let [positions, parts @ ..] = spans else { unreachable!("at least two spans") };
        let g = &self.q.geometry;
        let tokens = (g.batch * g.len) as u32;
        let n_freqs = self.freqs.len() as u32;
        let max_groups = self.ctx.device.limits().max_compute_workgroups_per_dimension;
        let (cx, _) = fold_dispatch((tokens * n_freqs).div_ceil(WORKGROUP_SIZE), max_groups);
        let af = self.freqs.attention_factor();
        let mut flags = if af == 1.0 { 0 } else { FLAG_SCALE };
        if self.desc.positions == Positions::PerSequence {
            flags |= FLAG_OFFSETS;
        }
        let (axes, [section_t, section_h, section_w]) = super::axes_flags(self.mrope.as_ref());
        flags |= axes;
        let cs_params = RopeCsParams {
            n_pairs: tokens * n_freqs,
            n_freqs,
            groups_x: cx,
            flags,
            scale_bits: af.to_bits(),
            pos_base: positions.base,
            seq_len: g.len.max(1) as u32,
            section_t,
            section_h,
            section_w,
            // Slot t is token t: the positions are [3, B, L], axis-major.
            axis_stride: tokens,
            ..RopeCsParams::default()
        };
        let ctx = &self.ctx;
        ctx.validated(RECORD_OP, || -> Result<SplitBound> {
            let (params, _) = uniform_blocks(
                ctx,
                RECORD_OP,
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
            let (q, k) = parts.split_at(q_parts);
            let mut bound = Vec::with_capacity(parts.len());
            for (split, spans) in [(&self.q, q), (self.k.as_ref().unwrap_or(&self.q), k)] {
                for (n, data) in spans.iter().enumerate() {
                    bound.push(self.bind_part(split, n, data)?);
                }
            }
            Ok(SplitBound { cs_group, parts: bound, _cs_params: params })
        })?
    }

    /// Part `n` of `split`'s rotation, rotating the rows bound at `data`.
    fn bind_part(&self, split: &Split, n: usize, data: &Span) -> Result<PartBound> {
        let ctx = &self.ctx;
        let all = split.geometry.rows();
        let lo = n * split.part_rows;
        let rows = split.part_rows.min(all - lo);
        let max_groups = ctx.device.limits().max_compute_workgroups_per_dimension;
        let (gx, gy, mut words) = split.plan.params(&self.spec, self.desc.dtype, rows, max_groups);
        // The tensor's offset in the part's binding: in vec4s for the vec4 kernel (`record`
        // checked it is whole), in words for the general one.
        match split.plan.kernel {
            Kernel::X4 { .. } => {
                words[std::mem::offset_of!(RopeX4Params, data_base) / 4] = data.base / 4;
            }
            Kernel::General { .. } => {
                words[std::mem::offset_of!(RopeParams, data_base) / 4] = data.base;
            }
        }
        let (params, _) = uniform_blocks(
            ctx,
            RECORD_OP,
            "posenc.rope_pass.params",
            &[bytemuck::cast_slice(&words)],
        )?;
        // This part's row slots: part sizes keep `lo * 4` at the storage alignment.
        let slots = wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &split.row_slot,
            offset: lo as u64 * 4,
            size: std::num::NonZeroU64::new(rows as u64 * 4),
        });
        let entry = |binding: u32, resource| wgpu::BindGroupEntry { binding, resource };
        let part = match (&split.src, split.plan.kernel) {
            (None, Kernel::X4 { kind, .. }) => {
                let x4 = ctx.rope_x4_kernel(kind);
                let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("posenc.rope_pass.x4_bind_group"),
                    layout: &x4.layout,
                    entries: &[
                        entry(0, params.as_entire_binding()),
                        entry(1, slots),
                        entry(2, self.cs.as_entire_binding()),
                        entry(3, data.binding()),
                    ],
                });
                PartBound {
                    grid: (gx, gy),
                    group,
                    pipeline: x4.pipeline.clone(),
                    copy: None,
                    _params: params,
                }
            }
            (src, _) => {
                let src = src.as_ref().expect("the general kernel has a source copy");
                let bytes = (rows as u64 * split.row_bytes(self.desc.dtype)).next_multiple_of(4);
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
                let copy = PartCopy {
                    from: data.buffer.clone(),
                    at: data.start(),
                    to: (**src).clone(),
                    bytes,
                };
                PartBound {
                    grid: (gx, gy),
                    group,
                    pipeline: ctx.rope.pipeline.clone(),
                    copy: Some(copy),
                    _params: params,
                }
            }
        };
        Ok(part)
    }
}

/// A compute pass of the record's own in `encoder`.
fn begin(encoder: &mut wgpu::CommandEncoder) -> wgpu::ComputePass<'_> {
    crate::gpu::pass::begin(encoder, "posenc.rope_pass.pass")
}

/// Refuses a k tensor whose bytes (`k_bytes` from `k`'s start) overlap q's (`q_bytes`
/// from `q`'s start) in one buffer: each is rotated in place, so a shared element would be
/// rotated twice (in one dispatch, or by two), and WebGPU refuses two writable bindings of
/// overlapping ranges. The sizes are the tensors' whole words, as the kernels bind them.
fn check_apart(
    q: wgpu::BufferSlice<'_>,
    q_bytes: u64,
    k: wgpu::BufferSlice<'_>,
    k_bytes: u64,
) -> Result<()> {
    let (q_start, k_start) = (q.offset(), k.offset());
    let (q_end, k_end) = (q_start + q_bytes, k_start + k_bytes);
    if q.buffer() == k.buffer() && q_start < k_end && k_start < q_end {
        return Err(Error::InvalidParameter {
            field: "k",
            value: format!(
                "bytes {k_start}..{k_end} of q's buffer, where q takes bytes {q_start}..{q_end}"
            ),
            allowed: "q and k in ranges that do not overlap (each is rotated once, in place)",
        });
    }
    Ok(())
}
