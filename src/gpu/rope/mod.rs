//! Host wrapper of `shaders/rope_cs.wgsl` (cos/sin per distinct position and frequency) and
//! `shaders/rope.wgsl` (the rotation), for tensors on the host and in device buffers.

pub(super) mod pass;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytemuck::{Pod, Zeroable};
use ndarray::{Array3, Array4, ArrayView2, ArrayView3, ArrayView4, ArrayViewMut4, Axis};

use super::runner::{Output, ROPE, Sink};
use super::{Context, PooledBuffer, fold_dispatch, wait};
use crate::encode::Dtype;
use crate::error::{Error, Result};
use crate::rope::{
    Element, Frequencies, Geometry, Layout, Mrope, MultimodalRope, Pairing, RopeSpec,
    TokenPositions,
};
use crate::shaders::{
    FLAG_ALTERNATING, FLAG_AXES, FLAG_INTERLEAVED, FLAG_SCALE, PAIRING_GPTJ, PAIRING_NEOX,
    RopePassKernel, RopeUnitKind, WORKGROUP_SIZE, takes_unpack,
};

/// Mirror of `Params` in `shaders/rope_cs.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct RopeCsParams {
    /// Slots times frequencies in this dispatch.
    pub n_pairs: u32,
    /// Frequencies per slot (`r / 2`).
    pub n_freqs: u32,
    /// Workgroups along x of a dispatch folded into 2-D.
    pub groups_x: u32,
    /// [`FLAG_SCALE`] when the attention factor is not 1;
    /// [`FLAG_OFFSETS`](crate::shaders::FLAG_OFFSETS) for per-sequence first positions.
    pub flags: u32,
    /// f32 bits of the attention factor.
    pub scale_bits: u32,
    /// Index of the first position in the bound positions.
    pub pos_base: u32,
    /// Tokens per sequence (with `FLAG_OFFSETS`).
    pub seq_len: u32,
    /// With [`FLAG_AXES`](crate::shaders::FLAG_AXES): the `mrope_section` counts of a
    /// multimodal RoPE (time, height, width); each slot has three positions.
    pub section_t: u32,
    /// See `section_t`.
    pub section_h: u32,
    /// See `section_t`.
    pub section_w: u32,
    /// With [`FLAG_AXES`](crate::shaders::FLAG_AXES): the distance between one axis's
    /// positions and the next's (axis-major, as transformers' `[3, B, L]` position ids).
    pub axis_stride: u32,
    /// Padding to a multiple of 16 bytes.
    pub _pad: u32,
}

/// Mirror of `Params` in `shaders/rope.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct RopeParams {
    /// Elements in this chunk.
    pub n_elems: u32,
    /// Row groups in this chunk.
    pub n_groups: u32,
    /// Elements per row group.
    pub group_elems: u32,
    /// Output words per row group.
    pub group_words: u32,
    /// Head rows per group: 1, or 2 for 16-bit tensors with an odd head dim.
    pub rows_per_group: u32,
    /// Elements per head row.
    pub head_dim: u32,
    /// Rotated elements per head row, `r`.
    pub rotary_dim: u32,
    /// `r / 2`.
    pub n_freqs: u32,
    /// [`PAIRING_NEOX`] or [`PAIRING_GPTJ`].
    pub pairing: u32,
    /// Storage type code (`DTYPE_*` of [`crate::shaders`]).
    pub dtype: u32,
    /// Row groups each workgroup walks.
    pub groups_per_wg: u32,
    /// Workgroups along x of a dispatch folded into 2-D.
    pub groups_x: u32,
    /// The tensor's first word in the bound output (a recorded pass's offset; else 0).
    pub data_base: u32,
    /// Always 0: the zero the kernel ORs into each product an add takes, which a compiler
    /// cannot see through, so it cannot contract the two into a multiply-add
    /// (`shaders/shared/rounded.wgsl`).
    pub zero: u32,
}

/// Mirror of `Params` in `shaders/rope_x4.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct RopeX4Params {
    /// Units (four or eight frequencies of a head row) in this chunk.
    pub n_units: u32,
    /// Units per head row.
    pub units_per_row: u32,
    /// vec4s per head row.
    pub row_vecs: u32,
    /// `r / 2` elements in vec4s: the neox partner offset.
    pub half_vecs: u32,
    /// `r / 2`.
    pub n_freqs: u32,
    /// Workgroups along x of a dispatch folded into 2-D.
    pub groups_x: u32,
    /// The tensor's first vec4 in the bound data (a recorded pass's offset; else 0).
    pub data_base: u32,
    /// Always 0: the zero the kernel ORs into each product an add takes, which a compiler
    /// cannot see through, so it cannot contract the two into a multiply-add
    /// (`shaders/shared/rounded.wgsl`).
    pub zero: u32,
}

/// Bytes of the `rope_cs` parameters.
const CS_PARAMS_BYTES: u64 = size_of::<RopeCsParams>() as u64;

/// Bytes of the rotation's parameters: those of either kernel, as words (see
/// [`Plan::params`]).
const PARAMS_BYTES: u64 = size_of::<[u32; PARAMS_WORDS]>() as u64;

/// Words of the rotation's parameter buffer: room for [`RopeParams`] and [`RopeX4Params`].
pub(super) const PARAMS_WORDS: usize = {
    let (general, x4) = (size_of::<RopeParams>(), size_of::<RopeX4Params>());
    if general > x4 { general / 4 } else { x4 / 4 }
};

/// Output words a rotation workgroup writes, roughly (whole row groups).
const WORDS_PER_WORKGROUP: u32 = 2048;

/// A compiled RoPE kernel: its bind group layout and pipeline.
pub(crate) struct RopeKernel {
    pub(crate) layout: wgpu::BindGroupLayout,
    pub(crate) pipeline: wgpu::ComputePipeline,
}

/// The RoPE kernels: the cos/sin table and the general rotation, compiled with the context;
/// the specialisations of the unit kernels (`rope_x4` per storage type and pairing,
/// `rope_pass` also per room for cos/sin), compiled on first use.
#[derive(Clone)]
pub(super) struct RopeKernels {
    pub(super) cs_layout: wgpu::BindGroupLayout,
    pub(super) cs_pipeline: wgpu::ComputePipeline,
    pub(super) layout: wgpu::BindGroupLayout,
    pub(super) pipeline: wgpu::ComputePipeline,
    x4: Arc<Mutex<HashMap<RopeUnitKind, Arc<RopeKernel>>>>,
    fused: Arc<Mutex<HashMap<RopePassKernel, Arc<RopeKernel>>>>,
}

impl RopeKernels {
    pub(super) fn new(device: &wgpu::Device) -> Self {
        let (cs_layout, cs_pipeline) = super::build_kernel(device, "rope_cs");
        let (layout, pipeline) = super::build_kernel(device, "rope");
        Self { cs_layout, cs_pipeline, layout, pipeline, x4: Arc::default(), fused: Arc::default() }
    }
}

impl Context {
    /// The `rope_x4` specialisation for `kind`, compiled on first use.
    pub(super) fn rope_x4_kernel(&self, kind: RopeUnitKind) -> Arc<RopeKernel> {
        let mut kernels = self.rope.x4.lock().unwrap_or_else(|e| e.into_inner());
        let kernel = kernels.entry(kind).or_insert_with(|| {
            let (layout, pipeline) = super::build_pipeline(
                &self.device,
                "rope_x4",
                &kind.x4_source(),
                &super::layout::bindings("rope_x4"),
            );
            Arc::new(RopeKernel { layout, pipeline })
        });
        Arc::clone(kernel)
    }

    /// The `rope_pass` specialisation `v`, compiled on first use.
    pub(crate) fn rope_pass_kernel(&self, v: RopePassKernel) -> Arc<RopeKernel> {
        let mut kernels = self.rope.fused.lock().unwrap_or_else(|e| e.into_inner());
        let kernel = kernels.entry(v).or_insert_with(|| {
            let (layout, pipeline) = super::build_pipeline_with(
                &self.device,
                v.entry(),
                &v.source(),
                &super::layout::rope_pass_bindings(),
                self.bound_all_loops,
            );
            Arc::new(RopeKernel { layout, pipeline })
        });
        Arc::clone(kernel)
    }
}

/// Where a RoPE call's tensor lives: host memory (in and out) or one device buffer.
enum Io<'a> {
    Host { input: &'a [u8], output: &'a mut [u8] },
    Device(&'a wgpu::Buffer),
}

impl Context {
    /// The cos/sin cache of `spec` at `positions` in Hugging Face's layout (see
    /// [`crate::rope::RopeCache`]), bit-identical to [`crate::cpu::rope_cache`].
    ///
    /// # Errors
    /// [`Error::TooLarge`] as there, before any GPU work; then as
    /// [`Context::rope_cos_sin`]; [`Error::Alloc`] if the caches' host memory cannot be had.
    pub fn rope_cache(&self, spec: &RopeSpec, positions: &[u32]) -> Result<crate::rope::RopeCache> {
        wait::blocking("rope_cache", "rope_cache_async", self.rope_cache_async(spec, positions))
    }

    /// [`Context::rope_cache`] without blocking the calling thread.
    ///
    /// # Errors
    /// As [`Context::rope_cache`], less [`Error::Blocking`].
    pub async fn rope_cache_async(
        &self,
        spec: &RopeSpec,
        positions: &[u32],
    ) -> Result<crate::rope::RopeCache> {
        crate::rope::check_cache_size(spec, positions.len())?;
        let freqs = crate::rope::cache_frequencies(spec, positions);
        let cs = self.rope_cos_sin_async(&freqs, positions).await?;
        crate::rope::RopeCache::from_cos_sin(spec, &freqs, cs.view())
    }

    /// The cos/sin table `[positions.len(), r / 2, 2]` (cos, then sin; attention factor
    /// included) that [`Context::rope`] rotates with, bit-identical to
    /// [`crate::cpu::rope_cos_sin`]. Computed in chunks that fit one binding and the memory
    /// budget.
    ///
    /// # Errors
    /// [`Error::Alloc`] if the table's host memory cannot be had; [`Error::Limit`] if one
    /// position's row does not fit the binding cap, or its scratch the memory budget left;
    /// [`Error::Gpu`] if wgpu reports an
    /// error; on the web [`Error::Blocking`] (use [`Context::rope_cos_sin_async`]).
    pub fn rope_cos_sin(&self, freqs: &Frequencies, positions: &[u32]) -> Result<Array3<f32>> {
        let run = self.rope_cos_sin_async(freqs, positions);
        wait::blocking("rope_cos_sin", "rope_cos_sin_async", run)
    }

    /// [`Context::rope_cos_sin`] without blocking the calling thread.
    ///
    /// # Errors
    /// As [`Context::rope_cos_sin`], less [`Error::Blocking`].
    pub async fn rope_cos_sin_async(
        &self,
        freqs: &Frequencies,
        positions: &[u32],
    ) -> Result<Array3<f32>> {
        let n = freqs.len();
        let mut out =
            crate::alloc::try_zeros::<f32, _>("the cos/sin table", (positions.len(), n, 2))?;
        if positions.is_empty() || n == 0 {
            return Ok(out);
        }
        let row_bytes = n as u64 * 8;
        if row_bytes > self.max_binding {
            return Err(self.binding_limit("one position's cos/sin row", row_bytes));
        }
        let mut per_chunk = (self.max_binding / row_bytes).min(positions.len() as u64);
        // Held from the plan to the last allocation, as every budgeted operation holds it,
        // so that no other call takes the room this one planned with.
        let _exclusive = self.memory.exclusive();
        // Under a memory budget, each position's share of the scratch: its row in the
        // runner's buffer and in the staging buffer, and its slot; fixed: the frequency
        // steps and the parameters.
        if let Some(left) = self.budget_left() {
            let per_position = 2 * row_bytes + 4;
            let fixed = row_bytes + CS_PARAMS_BYTES;
            per_chunk = per_chunk.min(left.saturating_sub(fixed) / per_position);
            if per_chunk == 0 {
                return Err(Error::Limit {
                    op: "rope",
                    what: "the scratch of one position's cos/sin row",
                    requested: fixed + per_position,
                    limit_name: "GPU memory budget left (bytes)",
                    limit: left,
                });
            }
        }
        let per_chunk = per_chunk as usize;
        let flat = out.as_slice_mut().expect("a new array is contiguous");
        self.scoped_async("rope", async || {
            let steps = self.rope_steps(freqs)?;
            use wgpu::BufferUsages as U;
            let take = |label, size: u64, usage| self.pooled(label, size, usage);
            let params = take("posenc.rope_cs.params", CS_PARAMS_BYTES, U::UNIFORM | U::COPY_DST)?;
            let pos_buf =
                take("posenc.rope_cs.positions", per_chunk as u64 * 4, U::STORAGE | U::COPY_DST)?;
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(flat);
            let total = bytes.len() as u64;
            let mut output = Output::new(
                self,
                &ROPE,
                Sink::Host(bytes),
                total,
                per_chunk as u64 * row_bytes,
                None,
            )?;
            let bind_group = self.rope_cs_bind_group(&params, &pos_buf, &steps, output.binding());
            for ps in positions.chunks(per_chunk) {
                let mut encoder = output.encoder();
                self.queue.write_buffer(&pos_buf, 0, bytemuck::cast_slice(ps));
                self.record_rope_cs(freqs, None, ps.len(), &params, &bind_group, &mut encoder);
                output.deliver(encoder, ps.len() as u64 * row_bytes).await?;
            }
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// Applies RoPE to a host tensor and returns the result: [`crate::cpu::rope()`] on the
    /// GPU. `x` is `[B, L, H, Dh]` or `[B, H, L, Dh]` as `layout` says, `positions` is
    /// `[B, L]`. Tensors larger than one storage binding are processed in chunks of head
    /// rows.
    ///
    /// The result has the CPU path's bits, as the cos/sin table has
    /// ([`Context::rope_cos_sin`]): the kernels round each product of `x * c - y * s` before
    /// the sum takes it, so no backend contracts the two into a fused multiply-add (which
    /// WGSL would allow, and NVIDIA's Vulkan driver did).
    ///
    /// # Errors
    /// [`Error::Shape`] if the last axis is not the spec's head dim or `positions` is not
    /// `[B, L]`; [`Error::TooLarge`] if `x` (a broadcast view, say) has more elements than
    /// `isize::MAX` bytes of 4-byte ones and no zero axis; [`Error::Limit`] if one head row
    /// (two for 16-bit tensors with an odd head dim) does not fit the binding cap;
    /// [`Error::Gpu`] if wgpu reports an error; on the web [`Error::Blocking`] (use
    /// [`Context::rope_async`]).
    pub fn rope<T: Element>(
        &self,
        spec: &RopeSpec,
        x: ArrayView4<'_, T>,
        positions: ArrayView2<'_, u32>,
        layout: Layout,
    ) -> Result<Array4<T>> {
        wait::blocking("rope", "rope_async", self.rope_async(spec, x, positions, layout))
    }

    /// [`Context::rope`] without blocking the calling thread.
    ///
    /// # Errors
    /// As [`Context::rope`], less [`Error::Blocking`].
    pub async fn rope_async<T: Element>(
        &self,
        spec: &RopeSpec,
        x: ArrayView4<'_, T>,
        positions: ArrayView2<'_, u32>,
        layout: Layout,
    ) -> Result<Array4<T>> {
        let positions = TokenPositions::One(positions);
        self.rotate_async("rope", spec, x, positions, layout).await
    }

    /// [`Context::rope_async`] and [`Context::rope_multimodal_async`] as `op`.
    async fn rotate_async<T: Element>(
        &self,
        op: &'static str,
        spec: &RopeSpec,
        x: ArrayView4<'_, T>,
        positions: TokenPositions<'_>,
        layout: Layout,
    ) -> Result<Array4<T>> {
        let shape = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
        let geometry = Geometry::check(op, spec, shape, layout, positions.dim())?;
        let bytes = geometry.elements() as u64 * size_of::<T>() as u64;
        // The result, and a copy of a strided x, had before either is made.
        let copies = if x.is_standard_layout() { 1 } else { 2 };
        crate::alloc::check_allocation("the RoPE output", bytes.saturating_mul(copies))?;
        let mut out = Array4::<T>::from_elem(x.raw_dim(), T::zeroed());
        // Read back straight into the new array, which is in standard layout.
        self.rotate_into_async(op, spec, x, out.view_mut(), positions, layout).await?;
        Ok(out)
    }

    /// [`Context::rope`] into an array the caller has: `out` (of `x`'s shape) receives `x`
    /// rotated, read back into it directly when it is in standard layout (C order,
    /// contiguous), else through a scratch array of the result. Nothing is written to `out`
    /// before the checks pass; a device error can leave it partly written.
    ///
    /// # Errors
    /// As [`Context::rope`], and [`Error::Shape`] if `out`'s shape is not `x`'s.
    pub fn rope_into<T: Element>(
        &self,
        spec: &RopeSpec,
        x: ArrayView4<'_, T>,
        out: ArrayViewMut4<'_, T>,
        positions: ArrayView2<'_, u32>,
        layout: Layout,
    ) -> Result<()> {
        let run = self.rope_into_async(spec, x, out, positions, layout);
        wait::blocking("rope_into", "rope_into_async", run)
    }

    /// [`Context::rope_into`] without blocking the calling thread.
    ///
    /// # Errors
    /// As [`Context::rope_into`], less [`Error::Blocking`].
    pub async fn rope_into_async<T: Element>(
        &self,
        spec: &RopeSpec,
        x: ArrayView4<'_, T>,
        out: ArrayViewMut4<'_, T>,
        positions: ArrayView2<'_, u32>,
        layout: Layout,
    ) -> Result<()> {
        let positions = TokenPositions::One(positions);
        self.rotate_into_async("rope_into", spec, x, out, positions, layout).await
    }

    /// [`Context::rope_into_async`] and [`Context::rope_multimodal_into_async`] as `op`.
    #[allow(clippy::too_many_arguments)]
    async fn rotate_into_async<T: Element>(
        &self,
        op: &'static str,
        spec: &RopeSpec,
        x: ArrayView4<'_, T>,
        mut out: ArrayViewMut4<'_, T>,
        positions: TokenPositions<'_>,
        layout: Layout,
    ) -> Result<()> {
        let geometry =
            Geometry::check_into(op, spec, x.shape(), out.shape(), layout, positions.dim())?;
        if geometry.elements() == 0 {
            return Ok(());
        }
        let bytes = geometry.elements() as u64 * size_of::<T>() as u64;
        // A copy of a strided x and a scratch array for a strided out, had before either.
        let copies = u64::from(!x.is_standard_layout()) + u64::from(!out.is_standard_layout());
        if copies > 0 {
            crate::alloc::check_allocation("the RoPE output", bytes.saturating_mul(copies))?;
        }
        let input = x.as_standard_layout();
        let input: &[T] = input.as_slice().expect("a standard-layout array is contiguous");
        match out.as_slice_mut() {
            Some(output) => {
                let io = Io::Host {
                    input: bytemuck::cast_slice(input),
                    output: bytemuck::cast_slice_mut(output),
                };
                self.run_rope(spec, &geometry, layout, T::DTYPE, positions, io).await
            }
            None => {
                let mut scratch = Array4::<T>::from_elem(x.raw_dim(), T::zeroed());
                let output = scratch.as_slice_mut().expect("a new array is contiguous");
                let io = Io::Host {
                    input: bytemuck::cast_slice(input),
                    output: bytemuck::cast_slice_mut(output),
                };
                self.run_rope(spec, &geometry, layout, T::DTYPE, positions, io).await?;
                out.assign(&scratch);
                Ok(())
            }
        }
    }

    /// Applies RoPE in place to a tensor in a device buffer, starting at byte 0: `shape`
    /// is `[B, L, H, Dh]` or `[B, H, L, Dh]` as `layout` says, elements of `dtype` in C
    /// order (16-bit elements two to a 32-bit word, the first in the low half).
    ///
    /// The buffer needs `COPY_SRC | COPY_DST` usage and at least the tensor's size rounded
    /// up to 4 bytes; bytes past the tensor are left as they are. When it also has `STORAGE`
    /// usage and the tensor fits one binding, the tensor is rotated where it is: with no
    /// copy at all by the vec4 kernel (`head_dim % 8 == 0` and `rotary_dim % 16 == 0`, the
    /// usual shapes), after one copy to a scratch source by the general kernel (whose
    /// invocations read partners another invocation writes). Otherwise each chunk is
    /// copied to scratch buffers, rotated there and copied back. Returns once the work is
    /// submitted: later work on the queue (a read, the caller's passes) sees the result;
    /// [`Context::wait_idle`] waits for it.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `buffer usage` if a usage is missing;
    /// [`Error::Limit`] if the buffer is smaller than the tensor or one head row does not
    /// fit the binding cap; [`Error::TooLarge`] if `shape` has no zero axis and would hold
    /// more 4-byte elements than `isize::MAX` bytes; [`Error::Shape`] as [`Context::rope`];
    /// [`Error::Gpu`] if wgpu reports an error; on the web [`Error::Blocking`] (use
    /// [`Context::rope_in_place_async`], or record a [`RopePass`](super::RopePass)).
    pub fn rope_in_place(
        &self,
        spec: &RopeSpec,
        buffer: &wgpu::Buffer,
        shape: [usize; 4],
        layout: Layout,
        dtype: Dtype,
        positions: ArrayView2<'_, u32>,
    ) -> Result<()> {
        let run = self.rope_in_place_async(spec, buffer, shape, layout, dtype, positions);
        wait::blocking("rope_in_place", "rope_in_place_async", run)
    }

    /// [`Context::rope_in_place`] without blocking the calling thread (it waits only for
    /// the device's answer to its error scopes, never for the work).
    ///
    /// # Errors
    /// As [`Context::rope_in_place`], less [`Error::Blocking`].
    pub async fn rope_in_place_async(
        &self,
        spec: &RopeSpec,
        buffer: &wgpu::Buffer,
        shape: [usize; 4],
        layout: Layout,
        dtype: Dtype,
        positions: ArrayView2<'_, u32>,
    ) -> Result<()> {
        let positions = TokenPositions::One(positions);
        self.rotate_buffer_async("rope_in_place", spec, buffer, shape, layout, dtype, positions)
            .await
    }

    /// [`Context::rope_in_place_async`] and [`Context::rope_multimodal_in_place_async`] as
    /// `op`.
    #[allow(clippy::too_many_arguments)]
    async fn rotate_buffer_async(
        &self,
        op: &'static str,
        spec: &RopeSpec,
        buffer: &wgpu::Buffer,
        shape: [usize; 4],
        layout: Layout,
        dtype: Dtype,
        positions: TokenPositions<'_>,
    ) -> Result<()> {
        let geometry = Geometry::check(op, spec, shape, layout, positions.dim())?;
        let needed = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        if !buffer.usage().contains(needed) {
            return Err(Error::InvalidParameter {
                field: "buffer usage",
                value: format!("{:?}", buffer.usage()),
                allowed: "COPY_SRC | COPY_DST (STORAGE optional)",
            });
        }
        let bytes = (geometry.elements() as u64 * dtype.size() as u64).next_multiple_of(4);
        if buffer.size() < bytes {
            return Err(Error::Limit {
                op,
                what: "the tensor, in bytes rounded up to 4",
                requested: bytes,
                limit_name: "buffer size",
                limit: buffer.size(),
            });
        }
        if geometry.elements() == 0 {
            return Ok(());
        }
        self.run_rope(spec, &geometry, layout, dtype, positions, Io::Device(buffer)).await
    }

    /// Applies a multimodal RoPE (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V, ...) to a
    /// host tensor and returns the result: [`crate::cpu::rope_multimodal`] on the GPU, bit
    /// for bit. `positions` is `[3, B, L]` (time, height and width); frequency `i` turns
    /// by the position of axis `mrope.axes()[i]`. Otherwise as [`Context::rope`].
    ///
    /// # Errors
    /// As [`crate::cpu::rope_multimodal`] for `mrope` and the positions' shape, then as
    /// [`Context::rope`]; on the web [`Error::Blocking`] (use
    /// [`Context::rope_multimodal_async`]).
    pub fn rope_multimodal<T: Element>(
        &self,
        spec: &RopeSpec,
        mrope: &MultimodalRope,
        x: ArrayView4<'_, T>,
        positions: ArrayView3<'_, u32>,
        layout: Layout,
    ) -> Result<Array4<T>> {
        let run = self.rope_multimodal_async(spec, mrope, x, positions, layout);
        wait::blocking("rope_multimodal", "rope_multimodal_async", run)
    }

    /// [`Context::rope_multimodal`] without blocking the calling thread.
    ///
    /// # Errors
    /// As [`Context::rope_multimodal`], less [`Error::Blocking`].
    pub async fn rope_multimodal_async<T: Element>(
        &self,
        spec: &RopeSpec,
        mrope: &MultimodalRope,
        x: ArrayView4<'_, T>,
        positions: ArrayView3<'_, u32>,
        layout: Layout,
    ) -> Result<Array4<T>> {
        let op = "rope_multimodal";
        let positions = TokenPositions::axes(op, spec, mrope, positions)?;
        self.rotate_async(op, spec, x, positions, layout).await
    }

    /// [`Context::rope_multimodal`] into an array the caller has, as [`Context::rope_into`].
    ///
    /// # Errors
    /// As [`Context::rope_multimodal`], and [`Error::Shape`] if `out`'s shape is not `x`'s.
    pub fn rope_multimodal_into<T: Element>(
        &self,
        spec: &RopeSpec,
        mrope: &MultimodalRope,
        x: ArrayView4<'_, T>,
        out: ArrayViewMut4<'_, T>,
        positions: ArrayView3<'_, u32>,
        layout: Layout,
    ) -> Result<()> {
        let run = self.rope_multimodal_into_async(spec, mrope, x, out, positions, layout);
        wait::blocking("rope_multimodal_into", "rope_multimodal_into_async", run)
    }

    /// [`Context::rope_multimodal_into`] without blocking the calling thread.
    ///
    /// # Errors
    /// As [`Context::rope_multimodal_into`], less [`Error::Blocking`].
    pub async fn rope_multimodal_into_async<T: Element>(
        &self,
        spec: &RopeSpec,
        mrope: &MultimodalRope,
        x: ArrayView4<'_, T>,
        out: ArrayViewMut4<'_, T>,
        positions: ArrayView3<'_, u32>,
        layout: Layout,
    ) -> Result<()> {
        let op = "rope_multimodal_into";
        let positions = TokenPositions::axes(op, spec, mrope, positions)?;
        self.rotate_into_async(op, spec, x, out, positions, layout).await
    }

    /// [`Context::rope_in_place`] with a multimodal RoPE: `positions` is `[3, B, L]`, as
    /// [`Context::rope_multimodal`] takes them.
    ///
    /// # Errors
    /// As [`crate::cpu::rope_multimodal`] for `mrope` and the positions' shape, then as
    /// [`Context::rope_in_place`]; on the web [`Error::Blocking`] (use
    /// [`Context::rope_multimodal_in_place_async`]).
    #[allow(clippy::too_many_arguments)]
    pub fn rope_multimodal_in_place(
        &self,
        spec: &RopeSpec,
        mrope: &MultimodalRope,
        buffer: &wgpu::Buffer,
        shape: [usize; 4],
        layout: Layout,
        dtype: Dtype,
        positions: ArrayView3<'_, u32>,
    ) -> Result<()> {
        let run = self
            .rope_multimodal_in_place_async(spec, mrope, buffer, shape, layout, dtype, positions);
        wait::blocking("rope_multimodal_in_place", "rope_multimodal_in_place_async", run)
    }

    /// [`Context::rope_multimodal_in_place`] without blocking the calling thread.
    ///
    /// # Errors
    /// As [`Context::rope_multimodal_in_place`], less [`Error::Blocking`].
    #[allow(clippy::too_many_arguments)]
    pub async fn rope_multimodal_in_place_async(
        &self,
        spec: &RopeSpec,
        mrope: &MultimodalRope,
        buffer: &wgpu::Buffer,
        shape: [usize; 4],
        layout: Layout,
        dtype: Dtype,
        positions: ArrayView3<'_, u32>,
    ) -> Result<()> {
        let op = "rope_multimodal_in_place";
        let positions = TokenPositions::axes(op, spec, mrope, positions)?;
        self.rotate_buffer_async(op, spec, buffer, shape, layout, dtype, positions).await
    }

    fn binding_limit(&self, what: &'static str, requested: u64) -> Error {
        Error::Limit {
            op: "rope",
            what,
            requested,
            limit_name: "max storage binding size (bytes)",
            limit: self.max_binding,
        }
    }

    /// The frequencies' turn steps, on the device.
    fn rope_steps(&self, freqs: &Frequencies) -> Result<PooledBuffer> {
        use wgpu::BufferUsages as U;
        let flat: Vec<u32> = freqs.steps().iter().flatten().copied().collect();
        let buffer =
            self.pooled("posenc.rope_cs.steps", flat.len() as u64 * 4, U::STORAGE | U::COPY_DST)?;
        self.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&flat));
        Ok(buffer)
    }

    fn rope_cs_bind_group(
        &self,
        params: &wgpu::Buffer,
        positions: &wgpu::Buffer,
        steps: &wgpu::Buffer,
        out: wgpu::BindingResource<'_>,
    ) -> wgpu::BindGroup {
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("posenc.rope_cs.bind_group"),
            layout: &self.rope.cs_layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: positions.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: steps.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: out },
            ],
        })
    }

    /// Records the cos/sin pass for the first `slots` positions of the bound positions
    /// buffer (with `mrope`, three per slot, one per axis: `slots` of time, then of height,
    /// then of width).
    fn record_rope_cs(
        &self,
        freqs: &Frequencies,
        mrope: Option<&MultimodalRope>,
        slots: usize,
        params_buf: &wgpu::Buffer,
        bind_group: &wgpu::BindGroup,
        encoder: &mut wgpu::CommandEncoder,
    ) {
        let n_freqs = freqs.len() as u32;
        let n_pairs = slots as u32 * n_freqs;
        let (gx, gy) = fold_dispatch(
            n_pairs.div_ceil(WORKGROUP_SIZE),
            self.device.limits().max_compute_workgroups_per_dimension,
        );
        let af = freqs.attention_factor();
        let scale = if af == 1.0 { 0 } else { FLAG_SCALE };
        let (axes, [section_t, section_h, section_w]) = axes_flags(mrope);
        let params = RopeCsParams {
            n_pairs,
            n_freqs,
            groups_x: gx,
            flags: scale | axes,
            scale_bits: af.to_bits(),
            section_t,
            section_h,
            section_w,
            axis_stride: slots as u32,
            ..RopeCsParams::default()
        };
        self.queue.write_buffer(params_buf, 0, bytemuck::bytes_of(&params));
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("posenc.rope_cs.pass"),
            timestamp_writes: None,
        });
        pass.set_pipeline(&self.rope.cs_pipeline);
        pass.set_bind_group(0, bind_group, &[]);
        pass.dispatch_workgroups(gx, gy, 1);
    }

    /// Rotates with `positions` (one per token, or one per axis of a multimodal RoPE).
    #[allow(clippy::too_many_arguments)]
    async fn run_rope(
        &self,
        spec: &RopeSpec,
        geometry: &Geometry,
        layout: Layout,
        dtype: Dtype,
        positions: TokenPositions<'_>,
        io: Io<'_>,
    ) -> Result<()> {
        let freqs = positions.frequencies(spec);
        let mrope = positions.mrope();
        let mut slots = match positions {
            TokenPositions::One(p) => SlotsOf::One(Slots::new(p.iter().copied().collect())),
            TokenPositions::Axes(p, _) => {
                let (t, h, w) =
                    (p.index_axis(Axis(0), 0), p.index_axis(Axis(0), 1), p.index_axis(Axis(0), 2));
                let keys = t.iter().zip(h.iter()).zip(w.iter()).map(|((&t, &h), &w)| [t, h, w]);
                SlotsOf::Axes(Slots::new(keys.collect()), Vec::new())
            }
        };
        let per_slot = if mrope.is_some() { 3 } else { 1 };
        let total_rows = geometry.rows();
        let total = geometry.elements() as u64 * dtype.size() as u64;
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension;
        let _exclusive = self.memory.exclusive();
        let host = matches!(io, Io::Host { .. });
        let plan = Plan::new(self, spec, geometry, dtype, host, mrope.is_some())?;
        let n_chunks = total_rows.div_ceil(plan.rows_per_chunk);
        let slot_cap = plan.rows_per_chunk.min(geometry.batch * geometry.len);
        let chunk_bytes = (plan.rows_per_chunk as u64 * plan.row_bytes).next_multiple_of(4);

        self.scoped_async("rope", async || {
            use wgpu::BufferUsages as U;
            let take = |label, size: u64, usage| self.pooled(label, size, usage);
            let steps = self.rope_steps(&freqs)?;
            let cs_params =
                take("posenc.rope_cs.params", CS_PARAMS_BYTES, U::UNIFORM | U::COPY_DST)?;
            let pos_bytes = slot_cap as u64 * 4 * per_slot;
            let pos_buf = take("posenc.rope_cs.positions", pos_bytes, U::STORAGE | U::COPY_DST)?;
            let cs_bytes = slot_cap as u64 * spec.n_freqs() as u64 * 8;
            let cs = take("posenc.rope_cs.out", cs_bytes, U::STORAGE)?;
            let cs_group =
                self.rope_cs_bind_group(&cs_params, &pos_buf, &steps, cs.as_entire_binding());
            let slots_buf = take(
                "posenc.rope.row_slot",
                plan.rows_per_chunk as u64 * 4,
                U::STORAGE | U::COPY_DST,
            )?;
            let params_buf = take("posenc.rope.params", PARAMS_BYTES, U::UNIFORM | U::COPY_DST)?;
            let (input, sink, device) = match io {
                Io::Host { input, output } => (Some(input), Sink::Host(output), None),
                Io::Device(b) => (None, Sink::Device { buffer: b, offset: 0 }, Some(b)),
            };
            // The x4 kernel rotates in place in the buffer the runner hands out (the
            // caller's buffer itself when one chunk covers it and it may be bound); the
            // general kernel reads a source copy that nobody writes.
            let mut output = Output::new(self, &ROPE, sink, total, chunk_bytes, None)?;
            let entry = |binding: u32, resource| wgpu::BindGroupEntry { binding, resource };
            let (src, rotation, rope_group) = match plan.kernel {
                Kernel::X4 { kind, .. } => {
                    let x4 = self.rope_x4_kernel(kind);
                    let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some("posenc.rope_x4.bind_group"),
                        layout: &x4.layout,
                        entries: &[
                            entry(0, params_buf.as_entire_binding()),
                            entry(1, slots_buf.as_entire_binding()),
                            entry(2, cs.as_entire_binding()),
                            entry(3, output.binding()),
                        ],
                    });
                    (None, x4.pipeline.clone(), group)
                }
                Kernel::General { .. } => {
                    let src = take("posenc.rope.src", chunk_bytes, U::STORAGE | U::COPY_DST)?;
                    let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some("posenc.rope.bind_group"),
                        layout: &self.rope.layout,
                        entries: &[
                            entry(0, params_buf.as_entire_binding()),
                            entry(1, slots_buf.as_entire_binding()),
                            entry(2, cs.as_entire_binding()),
                            entry(3, src.as_entire_binding()),
                            entry(4, output.binding()),
                        ],
                    });
                    (Some(src), self.rope.pipeline.clone(), group)
                }
            };

            for chunk in 0..n_chunks {
                let row_lo = chunk * plan.rows_per_chunk;
                let row_hi = (row_lo + plan.rows_per_chunk).min(total_rows);
                let rows = row_hi - row_lo;
                let byte_lo = row_lo as u64 * plan.row_bytes;
                let bytes = rows as u64 * plan.row_bytes;
                let padded = bytes.next_multiple_of(4);

                let (row_slot, slot_positions, n_slots) =
                    slots.chunk(row_lo..row_hi, |row| geometry.token_of_row(layout, row));
                self.queue.write_buffer(&pos_buf, 0, slot_positions);
                self.queue.write_buffer(&slots_buf, 0, bytemuck::cast_slice(row_slot));
                let mut encoder = output.encoder();
                // The chunk's input goes where the kernel reads it: the source copy, or (x4)
                // the runner's buffer, unless that is the caller's buffer itself.
                let (written, _) = output.buffer();
                let dst = match &src {
                    Some(src) => Some(&**src),
                    None if output.is_direct() => None,
                    None => Some(written),
                };
                match (input, device, dst) {
                    (Some(input), _, Some(dst)) => {
                        let part = &input[byte_lo as usize..(byte_lo + bytes) as usize];
                        if bytes == padded {
                            self.queue.write_buffer(dst, 0, part);
                        } else {
                            let mut tail = part.to_vec();
                            tail.resize(padded as usize, 0);
                            self.queue.write_buffer(dst, 0, &tail);
                        }
                    }
                    (None, Some(b), Some(dst)) => {
                        encoder.copy_buffer_to_buffer(b, byte_lo, dst, 0, padded)
                    }
                    _ => {}
                }
                self.record_rope_cs(&freqs, mrope, n_slots, &cs_params, &cs_group, &mut encoder);
                let (gx, gy, params) = plan.params(spec, dtype, rows, max_groups);
                self.queue.write_buffer(&params_buf, 0, bytemuck::cast_slice(&params));
                {
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some("posenc.rope.pass"),
                        timestamp_writes: None,
                    });
                    pass.set_pipeline(&rotation);
                    pass.set_bind_group(0, &rope_group, &[]);
                    pass.dispatch_workgroups(gx, gy, 1);
                }
                output.deliver(encoder, bytes).await?;
            }
            Ok(())
        })
        .await
    }
}

/// Which rotation kernel a call uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kernel {
    /// `rope_x4.wgsl`: in place, a unit of four or eight frequencies per step; `per_vec`
    /// elements per vec4.
    X4 { per_vec: usize, kind: RopeUnitKind },
    /// `rope.wgsl`: one output word per step from a separate source; `rows_per_group` head
    /// rows per group (2 when 16-bit rows of odd length straddle words).
    General { rows_per_group: usize },
}

/// How a call is cut into chunks and dispatched.
pub(super) struct Plan {
    pub(super) kernel: Kernel,
    head_dim: usize,
    row_bytes: u64,
    pub(super) rows_per_chunk: usize,
}

impl Plan {
    /// `host`: the tensor comes from and goes back to host memory (staging buffers);
    /// `axes`: each cos/sin slot has three positions (a multimodal RoPE), else one.
    pub(super) fn new(
        ctx: &Context,
        spec: &RopeSpec,
        geometry: &Geometry,
        dtype: Dtype,
        host: bool,
        axes: bool,
    ) -> Result<Self> {
        let size = dtype.size();
        let head_dim = geometry.head_dim;
        let rotary_dim = spec.rotary_dim() as usize;
        let kernel = if head_dim.is_multiple_of(8) && rotary_dim.is_multiple_of(16) {
            let neox = spec.pairing() == Pairing::Neox;
            let coalesced = ctx.coalesced;
            let f16_unpack = takes_unpack(dtype, coalesced, ctx.f16_unpack);
            let kind = RopeUnitKind { dtype, neox, coalesced, f16_unpack };
            Kernel::X4 { per_vec: 16 / size, kind }
        } else {
            Kernel::General {
                rows_per_group: if size == 2 && !head_dim.is_multiple_of(2) { 2 } else { 1 },
            }
        };
        let unit = match kernel {
            Kernel::X4 { .. } => 1,
            Kernel::General { rows_per_group } => rows_per_group,
        };
        let row_bytes = (head_dim * size) as u64;
        let cs_row_bytes = u64::from(spec.n_freqs()) * 8;
        // Rows per chunk: its elements, its cos/sin rows (at most one per row), its row
        // slots and its slots' positions each fit one binding, and its element count stays
        // well inside u32.
        let position_bytes = if axes { 12 } else { 4 };
        let rows = (ctx.max_binding / row_bytes)
            .min(ctx.max_binding / cs_row_bytes)
            .min(ctx.max_binding / position_bytes)
            .min((1 << 30) / head_dim as u64)
            .min(geometry.rows() as u64) as usize;
        // Whole groups of `unit` rows, unless one chunk takes every row (an odd count of
        // 16-bit rows of odd length ends in a group of one, as a last chunk may).
        let whole = |rows: usize| if rows >= geometry.rows() { rows } else { rows / unit * unit };
        let rows_per_chunk = whole(rows);
        if rows_per_chunk == 0 {
            let what = if unit == 2 { "two head rows" } else { "one head row" };
            let need = (row_bytes * unit as u64).max(cs_row_bytes);
            return Err(ctx.binding_limit(what, need));
        }
        // Under a memory budget, each row's share of the scratch: its elements in the
        // runner's buffer, in the staging buffer (host tensors) and in the general
        // kernel's source copy, a cos/sin row, its slot and its position; fixed: the
        // frequency steps and the parameters.
        let Some(left) = ctx.budget_left() else {
            return Ok(Self { kernel, head_dim, row_bytes, rows_per_chunk });
        };
        let copies = 1 + u64::from(host) + u64::from(matches!(kernel, Kernel::General { .. }));
        let per_row = copies * row_bytes + cs_row_bytes + 4 + position_bytes;
        let fixed = u64::from(spec.n_freqs()) * 8 + 32 + 48 + 16;
        let fit = (left.saturating_sub(fixed) / per_row).min(rows_per_chunk as u64) as usize;
        let rows_per_chunk = whole(fit);
        if rows_per_chunk == 0 {
            return Err(Error::Limit {
                op: "rope",
                what: if unit == 2 {
                    "the scratch of two head rows"
                } else {
                    "the scratch of one head row"
                },
                requested: fixed + per_row * unit as u64,
                limit_name: "GPU memory budget left (bytes)",
                limit: left,
            });
        }
        Ok(Self { kernel, head_dim, row_bytes, rows_per_chunk })
    }

    /// The 2-D grid and the params (as words; x4 uses the first of them) of a chunk of
    /// `rows` head rows.
    pub(super) fn params(
        &self,
        spec: &RopeSpec,
        dtype: Dtype,
        rows: usize,
        max_groups: u32,
    ) -> (u32, u32, [u32; PARAMS_WORDS]) {
        let n_freqs = spec.n_freqs();
        let pairing = match spec.pairing() {
            Pairing::Neox => PAIRING_NEOX,
            Pairing::Gptj => PAIRING_GPTJ,
        };
        match self.kernel {
            Kernel::X4 { per_vec, kind } => {
                let units_per_row = (n_freqs / kind.unit_freqs()) as usize;
                let n_units = (rows * units_per_row) as u32;
                let (gx, gy) = fold_dispatch(n_units.div_ceil(WORKGROUP_SIZE), max_groups);
                let p = RopeX4Params {
                    n_units,
                    units_per_row: units_per_row as u32,
                    row_vecs: (self.head_dim / per_vec) as u32,
                    half_vecs: n_freqs / per_vec as u32,
                    n_freqs,
                    groups_x: gx,
                    data_base: 0,
                    zero: 0,
                };
                let mut words = [0u32; PARAMS_WORDS];
                let x4_words = size_of::<RopeX4Params>() / 4;
                words[..x4_words].copy_from_slice(bytemuck::cast_slice(bytemuck::bytes_of(&p)));
                (gx, gy, words)
            }
            Kernel::General { rows_per_group } => {
                let group_elems = rows_per_group * self.head_dim;
                let group_words = (group_elems * dtype.size() / 4) as u32;
                // About WORDS_PER_WORKGROUP words per workgroup: plenty of workgroups for a
                // large GPU on any real tensor, few enough that per-workgroup costs vanish.
                let groups_per_wg = WORDS_PER_WORKGROUP.div_ceil(group_words).max(1);
                let n_groups = rows.div_ceil(rows_per_group) as u32;
                let (gx, gy) = fold_dispatch(n_groups.div_ceil(groups_per_wg), max_groups);
                let p = RopeParams {
                    n_elems: (rows * self.head_dim) as u32,
                    n_groups,
                    group_elems: group_elems as u32,
                    group_words,
                    rows_per_group: rows_per_group as u32,
                    head_dim: self.head_dim as u32,
                    rotary_dim: spec.rotary_dim(),
                    n_freqs,
                    pairing,
                    dtype: dtype.code(),
                    groups_per_wg,
                    groups_x: gx,
                    data_base: 0,
                    zero: 0,
                };
                (gx, gy, bytemuck::cast(p))
            }
        }
    }
}

/// A call's cos/sin slots: by position, or by the three positions of a multimodal RoPE.
enum SlotsOf {
    One(Slots<u32>),
    /// The slots, and their positions axis-major.
    Axes(Slots<[u32; 3]>, Vec<u32>),
}

impl SlotsOf {
    /// [`Slots::chunk`]: the slot of each row, the slots' positions as bytes, and the
    /// number of slots.
    fn chunk(
        &mut self,
        rows: std::ops::Range<usize>,
        token_of_row: impl Fn(usize) -> usize,
    ) -> (&[u32], &[u8], usize) {
        match self {
            SlotsOf::One(s) => {
                let (rows, ps) = s.chunk(rows, token_of_row);
                (rows, bytemuck::cast_slice(ps), ps.len())
            }
            SlotsOf::Axes(s, by_axis) => {
                let (rows, ps) = s.chunk(rows, token_of_row);
                // Axis-major, as the kernel reads them.
                by_axis.clear();
                by_axis.extend((0..3).flat_map(|a| ps.iter().map(move |p| p[a])));
                (rows, bytemuck::cast_slice(by_axis), ps.len())
            }
        }
    }
}

/// The cos/sin slots of a chunk's head rows: one per distinct position (`K`: a position,
/// or one per axis) among the rows' tokens, so sequences sharing positions share cos/sin
/// rows.
struct Slots<K> {
    /// Each token's position, in token order.
    keys: Vec<K>,
    of_token: Vec<u32>,
    touched: Vec<usize>,
    of_position: HashMap<K, u32>,
    row_slot: Vec<u32>,
    positions: Vec<K>,
}

impl<K: Copy + Eq + std::hash::Hash> Slots<K> {
    fn new(keys: Vec<K>) -> Self {
        Self {
            of_token: vec![u32::MAX; keys.len()],
            keys,
            touched: Vec::new(),
            of_position: HashMap::new(),
            row_slot: Vec::new(),
            positions: Vec::new(),
        }
    }

    /// The slot of each row in `rows` and the position of each slot.
    fn chunk(
        &mut self,
        rows: std::ops::Range<usize>,
        token_of_row: impl Fn(usize) -> usize,
    ) -> (&[u32], &[K]) {
        for t in self.touched.drain(..) {
            self.of_token[t] = u32::MAX;
        }
        self.of_position.clear();
        self.row_slot.clear();
        self.positions.clear();
        for row in rows {
            let t = token_of_row(row);
            if self.of_token[t] == u32::MAX {
                let p = self.keys[t];
                let next = self.positions.len() as u32;
                let slot = *self.of_position.entry(p).or_insert(next);
                if slot == next {
                    self.positions.push(p);
                }
                self.of_token[t] = slot;
                self.touched.push(t);
            }
            self.row_slot.push(self.of_token[t]);
        }
        (&self.row_slot, &self.positions)
    }
}

/// `rope_cs`'s flags for a multimodal RoPE's layout (none without one) and its three
/// `mrope_section` counts.
fn axes_flags(mrope: Option<&MultimodalRope>) -> (u32, [u32; 3]) {
    let Some(m) = mrope else { return (0, [0; 3]) };
    let layout = match m.layout() {
        Mrope::Sections => 0,
        Mrope::Interleaved => FLAG_INTERLEAVED,
        Mrope::Alternating => FLAG_ALTERNATING,
    };
    (FLAG_AXES | layout, m.section())
}
