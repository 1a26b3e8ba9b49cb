//! Host wrapper of `shaders/rope_cs.wgsl` (cos/sin per distinct position and frequency) and
//! `shaders/rope.wgsl` (the rotation), for tensors on the host and in device buffers.

use std::collections::HashMap;

use bytemuck::{Pod, Zeroable};
use ndarray::{Array3, Array4, ArrayView2, ArrayView4};

use super::{Context, PooledBuffer, fold_dispatch};
use crate::encode::Dtype;
use crate::error::{Error, Result};
use crate::rope::{Element, Frequencies, Geometry, Layout, Pairing, RopeSpec};
use crate::shaders::{ROW_WORKGROUP_SIZE, WORKGROUP_SIZE};

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
    /// `FLAG_SCALE` when the attention factor is not 1.
    pub flags: u32,
    /// f32 bits of the attention factor.
    pub scale_bits: u32,
    /// Padding to a multiple of 16 bytes.
    pub _pad: [u32; 3],
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
    /// 0 for neox, 1 for gptj.
    pub pairing: u32,
    /// Storage type code.
    pub dtype: u32,
    /// Workgroups along y; groups beyond fold into z.
    pub groups_y: u32,
    /// Padding to a multiple of 16 bytes.
    pub _pad: u32,
}

const FLAG_SCALE: u32 = 1;

#[derive(Clone)]
pub(super) struct RopeKernels {
    cs_layout: wgpu::BindGroupLayout,
    cs_pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
}

impl RopeKernels {
    pub(super) fn new(device: &wgpu::Device) -> Self {
        let (cs_layout, cs_pipeline) = super::build_kernel(device, "rope_cs", 3);
        let (layout, pipeline) = super::build_kernel(device, "rope", 4);
        Self { cs_layout, cs_pipeline, layout, pipeline }
    }
}

/// Where a RoPE call's tensor lives: host memory (in and out) or one device buffer.
enum Io<'a> {
    Host { input: &'a [u8], output: &'a mut [u8] },
    Device(&'a wgpu::Buffer),
}

impl Context {
    /// The cos/sin table `[positions.len(), r / 2, 2]` (cos, then sin; attention factor
    /// included) that [`Context::rope`] rotates with, bit-identical to
    /// [`crate::cpu::rope_cos_sin`]. Computed in chunks that fit one binding.
    ///
    /// # Errors
    /// [`Error::Limit`] if one position's row does not fit the binding cap; [`Error::Gpu`]
    /// if wgpu reports an error.
    pub fn rope_cos_sin(&self, freqs: &Frequencies, positions: &[u32]) -> Result<Array3<f32>> {
        let n = freqs.len();
        let mut out = Array3::<f32>::zeros((positions.len(), n, 2));
        if positions.is_empty() || n == 0 {
            return Ok(out);
        }
        let row_bytes = n as u64 * 8;
        if row_bytes > self.max_binding {
            return Err(self.binding_limit("one position's cos/sin row", row_bytes));
        }
        let per_chunk = (self.max_binding / row_bytes).min(positions.len() as u64) as usize;
        let flat = out.as_slice_mut().expect("a new array is contiguous");
        self.scoped("rope", || {
            let steps = self.rope_steps(freqs);
            use wgpu::BufferUsages as U;
            let take = |label, size: u64, usage| self.pool.take(&self.device, label, size, usage);
            let params = take("posenc.rope_cs.params", 32, U::UNIFORM | U::COPY_DST);
            let pos_buf =
                take("posenc.rope_cs.positions", per_chunk as u64 * 4, U::STORAGE | U::COPY_DST);
            let cs_bytes = per_chunk as u64 * row_bytes;
            let cs = take("posenc.rope_cs.out", cs_bytes, U::STORAGE | U::COPY_SRC);
            let staging = take("posenc.rope_cs.staging", cs_bytes, U::MAP_READ | U::COPY_DST);
            let bind_group = self.rope_cs_bind_group(&params, &pos_buf, &steps, &cs);
            for (rows, ps) in flat.chunks_mut(per_chunk * 2 * n).zip(positions.chunks(per_chunk)) {
                let mut encoder = self.encoder("posenc.rope_cs.encoder");
                self.queue.write_buffer(&pos_buf, 0, bytemuck::cast_slice(ps));
                self.record_rope_cs(freqs, ps.len(), &params, &bind_group, &mut encoder);
                let bytes = rows.len() as u64 * 4;
                encoder.copy_buffer_to_buffer(&cs, 0, &staging, 0, bytes);
                self.finish_and_read("rope", encoder, &staging, bytemuck::cast_slice_mut(rows))?;
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Applies RoPE to a host tensor and returns the result: [`crate::cpu::rope()`] on the
    /// GPU. `x` is `[B, L, H, Dh]` or `[B, H, L, Dh]` as `layout` says, `positions` is
    /// `[B, L]`. Tensors larger than one storage binding are processed in chunks of head
    /// rows.
    ///
    /// The result equals the CPU path's except where the backend contracts
    /// `x * c - y * s` into a fused multiply-add, which WGSL allows: then an element can
    /// differ by the rounding of one product, at most one f32 ulp of the larger product
    /// (lavapipe and llvmpipe do not contract). The cos/sin table is bit-identical
    /// everywhere ([`Context::rope_cos_sin`]).
    ///
    /// # Errors
    /// [`Error::Shape`] if the last axis is not the spec's head dim or `positions` is not
    /// `[B, L]`; [`Error::Limit`] if one head row (two for 16-bit tensors with an odd head
    /// dim) does not fit the binding cap; [`Error::Gpu`] if wgpu reports an error.
    pub fn rope<T: Element>(
        &self,
        spec: &RopeSpec,
        x: ArrayView4<'_, T>,
        positions: ArrayView2<'_, u32>,
        layout: Layout,
    ) -> Result<Array4<T>> {
        let shape = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
        let geometry = Geometry::check(spec, shape, layout, positions.dim())?;
        let input = x.as_standard_layout();
        let mut out = Array4::<T>::from_elem(x.raw_dim(), T::zeroed());
        if geometry.elements() == 0 {
            return Ok(out);
        }
        let input: &[T] = input.as_slice().expect("a standard-layout array is contiguous");
        let output: &mut [T] = out.as_slice_mut().expect("a new array is contiguous");
        let io = Io::Host {
            input: bytemuck::cast_slice(input),
            output: bytemuck::cast_slice_mut(output),
        };
        self.run_rope(spec, &geometry, layout, T::DTYPE, positions, io)?;
        Ok(out)
    }

    /// Applies RoPE in place to a tensor in a device buffer, starting at byte 0: `shape`
    /// is `[B, L, H, Dh]` or `[B, H, L, Dh]` as `layout` says, elements of `dtype` in C
    /// order (16-bit elements two to a 32-bit word, the first in the low half).
    ///
    /// The buffer needs `COPY_SRC | COPY_DST` usage and at least the tensor's size rounded
    /// up to 4 bytes; bytes past the tensor are left as they are. Each chunk of the tensor is
    /// copied to a scratch buffer and rotated from there, so no invocation reads what another
    /// writes. With `STORAGE` usage too and a tensor that fits one binding, the result is
    /// written straight into the buffer (one copy fewer). Returns once the GPU is done.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `buffer usage` if a usage is missing;
    /// [`Error::Limit`] if the buffer is smaller than the tensor or one head row does not
    /// fit the binding cap; [`Error::Shape`] as [`Context::rope`]; [`Error::Gpu`] if wgpu
    /// reports an error.
    pub fn rope_in_place(
        &self,
        spec: &RopeSpec,
        buffer: &wgpu::Buffer,
        shape: [usize; 4],
        layout: Layout,
        dtype: Dtype,
        positions: ArrayView2<'_, u32>,
    ) -> Result<()> {
        let geometry = Geometry::check(spec, shape, layout, positions.dim())?;
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
                op: "rope",
                what: "the tensor, in bytes rounded up to 4",
                requested: bytes,
                limit_name: "buffer size",
                limit: buffer.size(),
            });
        }
        if geometry.elements() == 0 {
            return Ok(());
        }
        self.run_rope(spec, &geometry, layout, dtype, positions, Io::Device(buffer))
    }

    fn binding_limit(&self, what: &'static str, requested: u64) -> Error {
        Error::Limit {
            op: "rope",
            what,
            requested,
            limit_name: "max storage binding size",
            limit: self.max_binding,
        }
    }

    fn encoder(&self, label: &'static str) -> wgpu::CommandEncoder {
        self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) })
    }

    /// The frequencies' turn steps, on the device.
    fn rope_steps(&self, freqs: &Frequencies) -> PooledBuffer {
        use wgpu::BufferUsages as U;
        let flat: Vec<u32> = freqs.steps().iter().flatten().copied().collect();
        let buffer = self.pool.take(
            &self.device,
            "posenc.rope_cs.steps",
            flat.len() as u64 * 4,
            U::STORAGE | U::COPY_DST,
        );
        self.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&flat));
        buffer
    }

    fn rope_cs_bind_group(
        &self,
        params: &wgpu::Buffer,
        positions: &wgpu::Buffer,
        steps: &wgpu::Buffer,
        out: &wgpu::Buffer,
    ) -> wgpu::BindGroup {
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("posenc.rope_cs.bind_group"),
            layout: &self.rope.cs_layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: positions.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: steps.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: out.as_entire_binding() },
            ],
        })
    }

    /// Records the cos/sin pass for the first `slots` positions of the bound positions
    /// buffer.
    fn record_rope_cs(
        &self,
        freqs: &Frequencies,
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
        let params = RopeCsParams {
            n_pairs,
            n_freqs,
            groups_x: gx,
            flags: if af == 1.0 { 0 } else { FLAG_SCALE },
            scale_bits: af.to_bits(),
            _pad: [0; 3],
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

    fn run_rope(
        &self,
        spec: &RopeSpec,
        geometry: &Geometry,
        layout: Layout,
        dtype: Dtype,
        positions: ArrayView2<'_, u32>,
        mut io: Io<'_>,
    ) -> Result<()> {
        let freqs = spec.frequencies_for(positions);
        let size = dtype.size();
        let head_dim = geometry.head_dim;
        let n_freqs = spec.n_freqs() as usize;
        // 16-bit rows of odd length straddle words; two of them fill whole words.
        let rows_per_group = if size == 2 && head_dim % 2 == 1 { 2 } else { 1 };
        let row_bytes = (head_dim * size) as u64;
        let cs_row_bytes = n_freqs as u64 * 8;
        let total_rows = geometry.rows();
        // Rows per chunk: its elements, its cos/sin rows (at most one per row) and its row
        // slots each fit one binding, and its element count stays well inside u32.
        let per_chunk = (self.max_binding / row_bytes)
            .min(self.max_binding / cs_row_bytes)
            .min(self.max_binding / 4)
            .min((1 << 30) / head_dim as u64)
            .min(total_rows as u64) as usize;
        let per_chunk = per_chunk / rows_per_group * rows_per_group;
        if per_chunk == 0 {
            let what = if rows_per_group == 2 { "two head rows" } else { "one head row" };
            let need = (row_bytes * rows_per_group as u64).max(cs_row_bytes);
            return Err(self.binding_limit(what, need));
        }
        let n_chunks = total_rows.div_ceil(per_chunk);
        let slot_cap = per_chunk.min(geometry.batch * geometry.len);
        let chunk_bytes = (per_chunk as u64 * row_bytes).next_multiple_of(4);
        let positions: Vec<u32> = positions.iter().copied().collect();
        let group_elems = rows_per_group * head_dim;
        let group_words = (group_elems * size / 4) as u32;
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension;

        self.scoped("rope", || {
            use wgpu::BufferUsages as U;
            let take = |label, size: u64, usage| self.pool.take(&self.device, label, size, usage);
            let steps = self.rope_steps(&freqs);
            let cs_params = take("posenc.rope_cs.params", 32, U::UNIFORM | U::COPY_DST);
            let params_buf = take("posenc.rope.params", 48, U::UNIFORM | U::COPY_DST);
            let pos_buf =
                take("posenc.rope_cs.positions", slot_cap as u64 * 4, U::STORAGE | U::COPY_DST);
            let cs = take("posenc.rope_cs.out", slot_cap as u64 * cs_row_bytes, U::STORAGE);
            let slots_buf =
                take("posenc.rope.row_slot", per_chunk as u64 * 4, U::STORAGE | U::COPY_DST);
            let src = take("posenc.rope.src", chunk_bytes, U::STORAGE | U::COPY_DST);
            // A device buffer that one chunk covers and that may be bound is written
            // directly; otherwise results go through a scratch buffer.
            let direct = match &io {
                Io::Device(b) if n_chunks == 1 && b.usage().contains(U::STORAGE) => Some(*b),
                _ => None,
            };
            let scratch = direct
                .is_none()
                .then(|| take("posenc.rope.dst", chunk_bytes, U::STORAGE | U::COPY_SRC));
            let staging = matches!(io, Io::Host { .. })
                .then(|| take("posenc.rope.staging", chunk_bytes, U::MAP_READ | U::COPY_DST));
            let cs_group = self.rope_cs_bind_group(&cs_params, &pos_buf, &steps, &cs);
            let dst_binding = match (direct, &scratch) {
                (Some(b), _) => wgpu::BufferBinding {
                    buffer: b,
                    offset: 0,
                    size: wgpu::BufferSize::new(chunk_bytes),
                },
                (None, Some(s)) => s.as_entire_buffer_binding(),
                (None, None) => unreachable!("one of the two exists"),
            };
            let rope_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("posenc.rope.bind_group"),
                layout: &self.rope.layout,
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: params_buf.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: slots_buf.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 2, resource: cs.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 3, resource: src.as_entire_binding() },
                    wgpu::BindGroupEntry {
                        binding: 4,
                        resource: wgpu::BindingResource::Buffer(dst_binding),
                    },
                ],
            });

            let mut slots = Slots::new(positions.len());
            for chunk in 0..n_chunks {
                let row_lo = chunk * per_chunk;
                let row_hi = (row_lo + per_chunk).min(total_rows);
                let rows = row_hi - row_lo;
                let n_elems = rows * head_dim;
                let byte_lo = row_lo as u64 * row_bytes;
                let bytes = n_elems * size;
                let padded = (bytes as u64).next_multiple_of(4);

                let (row_slot, slot_positions) = slots.chunk(
                    row_lo..row_hi,
                    |row| geometry.token_of_row(layout, row),
                    &positions,
                );
                self.queue.write_buffer(&pos_buf, 0, bytemuck::cast_slice(slot_positions));
                self.queue.write_buffer(&slots_buf, 0, bytemuck::cast_slice(row_slot));
                let mut encoder = self.encoder("posenc.rope.encoder");
                match &io {
                    Io::Host { input, .. } => {
                        let part = &input[byte_lo as usize..byte_lo as usize + bytes];
                        if part.len() % 4 == 0 {
                            self.queue.write_buffer(&src, 0, part);
                        } else {
                            let mut tail = part.to_vec();
                            tail.resize(padded as usize, 0);
                            self.queue.write_buffer(&src, 0, &tail);
                        }
                    }
                    Io::Device(b) => encoder.copy_buffer_to_buffer(b, byte_lo, &src, 0, padded),
                }
                self.record_rope_cs(
                    &freqs,
                    slot_positions.len(),
                    &cs_params,
                    &cs_group,
                    &mut encoder,
                );
                let n_groups = rows.div_ceil(rows_per_group) as u32;
                let gy = n_groups.min(max_groups);
                let gz = n_groups.div_ceil(gy);
                let params = RopeParams {
                    n_elems: n_elems as u32,
                    n_groups,
                    group_elems: group_elems as u32,
                    group_words,
                    rows_per_group: rows_per_group as u32,
                    head_dim: head_dim as u32,
                    rotary_dim: spec.rotary_dim(),
                    n_freqs: n_freqs as u32,
                    pairing: match spec.pairing() {
                        Pairing::Neox => 0,
                        Pairing::Gptj => 1,
                    },
                    dtype: dtype.code(),
                    groups_y: gy,
                    _pad: 0,
                };
                self.queue.write_buffer(&params_buf, 0, bytemuck::bytes_of(&params));
                {
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some("posenc.rope.pass"),
                        timestamp_writes: None,
                    });
                    pass.set_pipeline(&self.rope.pipeline);
                    pass.set_bind_group(0, &rope_group, &[]);
                    pass.dispatch_workgroups(group_words.div_ceil(ROW_WORKGROUP_SIZE), gy, gz);
                }
                match (&mut io, &scratch, &staging) {
                    (Io::Host { output, .. }, Some(dst), Some(staging)) => {
                        encoder.copy_buffer_to_buffer(dst, 0, staging, 0, padded);
                        let out = &mut output[byte_lo as usize..byte_lo as usize + bytes];
                        if bytes as u64 == padded {
                            self.finish_and_read("rope", encoder, staging, out)?;
                        } else {
                            let mut tail = vec![0u8; padded as usize];
                            self.finish_and_read("rope", encoder, staging, &mut tail)?;
                            out.copy_from_slice(&tail[..bytes]);
                        }
                    }
                    (Io::Device(b), scratch, _) => {
                        if let Some(dst) = scratch {
                            encoder.copy_buffer_to_buffer(dst, 0, b, byte_lo, padded);
                        }
                        let index = self.queue.submit([encoder.finish()]);
                        // Wait before the next chunk reuses the scratch buffers.
                        self.wait("rope", index)?;
                    }
                    _ => unreachable!("host calls get a scratch and a staging buffer"),
                }
            }
            Ok(())
        })
    }
}

/// The cos/sin slots of a chunk's head rows: one per distinct position among the rows'
/// tokens, so sequences sharing positions share cos/sin rows.
struct Slots {
    of_token: Vec<u32>,
    touched: Vec<usize>,
    of_position: HashMap<u32, u32>,
    row_slot: Vec<u32>,
    positions: Vec<u32>,
}

impl Slots {
    fn new(tokens: usize) -> Self {
        Self {
            of_token: vec![u32::MAX; tokens],
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
        positions: &[u32],
    ) -> (&[u32], &[u32]) {
        for t in self.touched.drain(..) {
            self.of_token[t] = u32::MAX;
        }
        self.of_position.clear();
        self.row_slot.clear();
        self.positions.clear();
        for row in rows {
            let t = token_of_row(row);
            if self.of_token[t] == u32::MAX {
                let p = positions[t];
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_match_the_wgsl_struct_sizes() {
        // Eight and twelve u32 fields in shaders/rope_cs.wgsl's and shaders/rope.wgsl's Params.
        assert_eq!(size_of::<RopeCsParams>(), 32);
        assert_eq!(size_of::<RopeParams>(), 48);
    }
}
