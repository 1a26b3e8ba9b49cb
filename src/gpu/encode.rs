//! Host wrapper of `shaders/encode.wgsl`: embedding tables resident on the device, and the
//! fused gather + positional-encoding add in token chunks.

use bytemuck::{Pod, Zeroable};
use half::{bf16, f16};
use ndarray::{Array3, ArrayView2};

use super::Context;
use super::memory::DeviceBuffer;
use super::table::{TableBuffers, flat_steps};
use super::timing::SpanTimer;
use crate::encode::{self, Dtype, Embeddings, EncodeOptions, Encoded};
use crate::error::{Error, Result};
use crate::shaders::{PAIR_WORKGROUP_SIZE, WORKGROUP_SIZE};
use crate::spec::PeSpec;

/// Mirror of `Params` in `shaders/encode.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct EncodeParams {
    /// Tokens in this dispatch.
    pub n_tokens: u32,
    /// Output words per row: dim for f32 output, dim / 2 for 16-bit output.
    pub row_words: u32,
    /// Model dimension.
    pub dim: u32,
    /// First vocabulary row in the bound table chunk.
    pub vocab_lo: u32,
    /// One past the last vocabulary row in the bound table chunk.
    pub vocab_hi: u32,
    /// f32 bits of the scale (used when `FLAG_SCALE` is set).
    pub scale_bits: u32,
    /// `FLAG_SCALE | FLAG_PAD | FLAG_FIRST`.
    pub flags: u32,
    /// Pad token id (used when `FLAG_PAD` is set).
    pub pad_id: u32,
    /// Table storage type code.
    pub in_dtype: u32,
    /// Output storage type code.
    pub out_dtype: u32,
    /// Workgroups along y; tokens beyond fold into z.
    pub groups_y: u32,
    /// Padding to a multiple of 16 bytes.
    pub _pad: u32,
}

/// Mirror of `Params` in `shaders/encode_f32x4.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct EncodeF32x4Params {
    /// Token groups in this dispatch (tokens sharing a PE row, at most
    /// [`MAX_GROUP_TOKENS`] each).
    pub n_groups: u32,
    /// vec4s per row: dim / 4.
    pub row_vecs: u32,
    /// f32 bits of the scale (used when `FLAG_SCALE` is set).
    pub scale_bits: u32,
    /// `FLAG_SCALE | FLAG_PAD`.
    pub flags: u32,
    /// Pad token id (used when `FLAG_PAD` is set).
    pub pad_id: u32,
    /// Workgroups along y; groups beyond fold into z.
    pub groups_y: u32,
    /// Index (in `vec2<u32>` records) of the first group record in the tokens buffer.
    pub groups_at: u32,
    /// Always 0: a branch on it keeps the kernel's prefetch loads alive.
    pub keep: u32,
}

/// Most tokens one workgroup of `encode_f32x4` serves from one read of their shared PE
/// row: more saves PE reads, fewer keeps a GPU's workgroups many when a batch shares one
/// position.
pub const MAX_GROUP_TOKENS: usize = 8;

/// The `encode_f32x4` token records for one chunk: tokens sorted by PE slot (stable) as
/// `(id, output row)`, then one `(first token, slot)` record per group of at most
/// [`MAX_GROUP_TOKENS`] tokens sharing a slot, then `(n, 0)`. Returns the records and the
/// number of groups.
pub(super) fn group_records(ids: &[u32], slots: &[u32]) -> (Vec<[u32; 2]>, usize) {
    let n = ids.len();
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_by_key(|&g| slots[g as usize]);
    let mut records: Vec<[u32; 2]> = Vec::with_capacity(2 * n + 1);
    records.extend(order.iter().map(|&g| [ids[g as usize], g]));
    let mut start = 0;
    while start < n {
        let slot = slots[order[start] as usize];
        let mut end = start + 1;
        while end < n && end - start < MAX_GROUP_TOKENS && slots[order[end] as usize] == slot {
            end += 1;
        }
        records.push([start as u32, slot]);
        start = end;
    }
    let groups = records.len() - n;
    records.push([n as u32, 0]);
    (records, groups)
}

const FLAG_SCALE: u32 = 1;
const FLAG_PAD: u32 = 2;
const FLAG_FIRST: u32 = 4;
const FLAG_ODD16: u32 = 8;

/// Most bytes the cache of PE rows for positions `0..n` may hold per context.
pub const PE_CACHE_BUDGET: u64 = 64 << 20;

#[derive(Clone)]
pub(super) struct EncodeKernel {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
    fast_layout: wgpu::BindGroupLayout,
    fast_pipeline: wgpu::ComputePipeline,
}

impl EncodeKernel {
    pub(super) fn new(device: &wgpu::Device) -> Self {
        let (layout, pipeline) = super::build_kernel(device, "encode", 4);
        let (fast_layout, fast_pipeline) = super::build_kernel(device, "encode_f32x4", 4);
        Self { layout, pipeline, fast_layout, fast_pipeline }
    }
}

/// PE rows for positions `0..rows` of one spec, kept on the device between calls: PE rows
/// are a pure function of position, so the common case (positions below the context
/// length) never recomputes them.
#[derive(Clone)]
pub(super) struct PeCache {
    spec: PeSpec,
    rows: u32,
    buffer: DeviceBuffer,
}

/// An embedding table uploaded to the device once and reused by many encode calls. Tables
/// larger than one storage binding are held in several chunks of whole rows.
pub struct GpuTable {
    vocab: usize,
    dim: usize,
    dtype: Dtype,
    chunks: Vec<TableChunk>,
    /// Identifies the accounting its chunks count against (the address of its `Memory`).
    accounted_by: usize,
}

struct TableChunk {
    rows: std::ops::Range<u32>,
    buffer: DeviceBuffer,
}

impl std::fmt::Debug for GpuTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuTable")
            .field("vocab", &self.vocab)
            .field("dim", &self.dim)
            .field("dtype", &self.dtype)
            .field("chunks", &self.chunks.len())
            .finish()
    }
}

impl GpuTable {
    /// `(vocab, dim)`.
    pub fn dim(&self) -> (usize, usize) {
        (self.vocab, self.dim)
    }

    /// The storage type on the device.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// How many device buffers hold the table.
    pub fn n_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Bytes of device memory the table's buffers hold.
    pub fn device_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.buffer.size()).sum()
    }
}

impl Context {
    /// Uploads an embedding table, split into chunks of whole rows that each fit one storage
    /// binding.
    ///
    /// # Errors
    /// [`Error::Limit`] if one row does not fit a binding, the table has more than 2^32
    /// rows, or it is larger than the context's memory budget (naming both sizes), all
    /// before anything is allocated; [`Error::OutOfMemory`] if the device refuses the
    /// memory; [`Error::DeviceLost`].
    pub fn upload_table(&self, table: Embeddings<'_>) -> Result<GpuTable> {
        let (vocab, dim) = table.dim();
        let dtype = table.dtype();
        if vocab > u32::MAX as usize {
            return Err(Error::Limit {
                op: "upload_table",
                what: "vocabulary rows",
                requested: vocab as u64,
                limit_name: "u32 token ids",
                limit: u64::from(u32::MAX),
            });
        }
        let row_bytes = (dim * dtype.size()) as u64;
        // Each chunk is packed into words on its own, so half-precision chunks of an odd
        // element count need no partner row from the next chunk.
        let rows_per_chunk = self.max_binding.checked_div(row_bytes).unwrap_or(vocab.max(1) as u64);
        if rows_per_chunk == 0 {
            return Err(Error::Limit {
                op: "upload_table",
                what: "one embedding row",
                requested: row_bytes,
                limit_name: "max storage binding size",
                limit: self.max_binding,
            });
        }
        let rows_per_chunk = rows_per_chunk.min(vocab.max(1) as u64) as usize;
        // Each chunk is whole words, at least one (a zero-sized binding is invalid).
        let chunk_bytes = |rows: usize| ((rows * dim * dtype.size()).div_ceil(4).max(1) * 4) as u64;
        let full = vocab / rows_per_chunk;
        let total = full as u64 * chunk_bytes(rows_per_chunk)
            + if vocab % rows_per_chunk > 0 { chunk_bytes(vocab % rows_per_chunk) } else { 0 };
        self.check_fits_budget("upload_table", "the embedding table", total)?;
        let mut chunks = Vec::new();
        self.scoped("upload_table", || {
            let mut lo = 0usize;
            while lo < vocab {
                let hi = (lo + rows_per_chunk).min(vocab);
                // Converted chunk by chunk, so a 1 GiB table never exists twice on the host.
                let words = table.rows_to_words(lo..hi);
                let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
                let buffer =
                    self.create_buffer("posenc.encode.table", chunk_bytes(hi - lo), usage)?;
                self.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&words));
                self.queue.submit([]);
                chunks.push(TableChunk { rows: lo as u32..hi as u32, buffer });
                lo = hi;
            }
            Ok(())
        })?;
        Ok(GpuTable { vocab, dim, dtype, chunks, accounted_by: self.memory_id() })
    }

    /// `out[b, t, :] = scale * E[ids[b, t], :] + PE(positions[b, t], :)` on the device, read
    /// back to the host. Bit-identical to [`crate::cpu::encode()`] when the scale is
    /// [`encode::Scale::None`]; with a scale, a backend may fuse the multiply and the add,
    /// which moves a result by at most one rounding of the product.
    ///
    /// # Errors
    /// As [`crate::cpu::encode()`], all checked before any GPU work; [`Error::Limit`] if
    /// the memory budget cannot hold one token's scratch; [`Error::DeviceLost`],
    /// [`Error::OutOfMemory`], or [`Error::Gpu`] for any other error wgpu reports.
    pub fn encode(
        &self,
        spec: &PeSpec,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
    ) -> Result<Encoded> {
        let scale = encode::check(spec, table.dim(), ids, positions, options)?;
        self.encode_host(PeSource::Spec(spec), table, ids, positions, options, scale)
    }

    /// Uploads a learned position table `P` `[max_positions, dim]` (BERT and GPT-2 style),
    /// widened to f32 exactly, for [`Context::encode_learned`]. It must fit one storage
    /// binding.
    ///
    /// # Errors
    /// [`Error::Limit`] if it does not fit one binding; [`Error::Gpu`] if the device
    /// refuses the memory.
    pub fn upload_position_table(
        &self,
        position_table: Embeddings<'_>,
    ) -> Result<GpuPositionTable> {
        let (rows, dim) = position_table.dim();
        let bytes = (rows as u64).saturating_mul(dim as u64).saturating_mul(4);
        if bytes > self.max_binding {
            return Err(Error::Limit {
                op: "upload_position_table",
                what: "the position table as f32",
                requested: bytes,
                limit_name: "max storage binding size",
                limit: self.max_binding,
            });
        }
        self.check_fits_budget("upload_position_table", "the position table as f32", bytes)?;
        let values = position_table.to_f32();
        let values = values.as_slice().expect("a new array is contiguous");
        let buffer = self.scoped("upload_position_table", || {
            let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
            let buffer = self.create_buffer("posenc.encode.position_table", bytes.max(4), usage)?;
            self.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(values));
            self.queue.submit([]);
            Ok(buffer)
        })?;
        Ok(GpuPositionTable { rows, dim, buffer, accounted_by: self.memory_id() })
    }

    /// `out[b, t, :] = scale * E[ids[b, t], :] + P[positions[b, t], :]` with a learned
    /// position table, read back to the host. Bit-identical to [`crate::cpu::encode_learned`]
    /// when the scale is [`encode::Scale::None`].
    ///
    /// # Errors
    /// As [`Context::encode`], and [`Error::Position`] for the first position without a row
    /// in `position_table`, all before any GPU work.
    pub fn encode_learned(
        &self,
        position_table: &GpuPositionTable,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
    ) -> Result<Encoded> {
        let scale =
            encode::check_learned(position_table.dim(), table.dim(), ids, positions, options)?;
        self.encode_host(PeSource::Learned(position_table), table, ids, positions, options, scale)
    }

    /// The encode of checked arguments, read back into an array.
    fn encode_host(
        &self,
        pe: PeSource<'_>,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
        scale: Option<f32>,
    ) -> Result<Encoded> {
        let (batch, len) = ids.dim();
        let dim = table.dim;
        let out_size = options.out_dtype.size();
        let mut bytes = vec![0u8; (batch * len * dim * out_size).next_multiple_of(4)];
        if !bytes.is_empty() {
            let sink = Sink::Host(&mut bytes);
            self.run_encode(pe, table, ids, positions, options, scale, sink, None)?;
        }
        bytes.truncate(batch * len * dim * out_size);
        let shape = (batch, len, dim);
        let halves = || bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        Ok(match options.out_dtype {
            Dtype::F32 => Encoded::F32(shaped(
                shape,
                bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            )),
            Dtype::F16 => Encoded::F16(shaped(shape, halves().map(f16::from_bits))),
            Dtype::Bf16 => Encoded::Bf16(shaped(shape, halves().map(bf16::from_bits))),
        })
    }

    /// Like [`Context::encode`], but the result stays on the device: a storage buffer of
    /// `batch * len * dim` elements of `options.out_dtype`, row-major (16-bit elements two
    /// to a word, low half first; the size is rounded up to whole words), ready to bind in
    /// a downstream pipeline. Usages: `STORAGE | COPY_SRC | COPY_DST`.
    ///
    /// With a memory budget, the result counts against it while the call runs; once
    /// returned, it is the caller's and leaves posenc's accounting.
    ///
    /// # Errors
    /// As [`Context::encode`]; [`Error::Limit`] if the output exceeds the device's largest
    /// buffer or the memory budget, before anything is allocated.
    pub fn encode_to_buffer(
        &self,
        spec: &PeSpec,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
    ) -> Result<wgpu::Buffer> {
        let scale = encode::check(spec, table.dim(), ids, positions, options)?;
        let bytes = (ids.len() * table.dim * options.out_dtype.size()).next_multiple_of(4) as u64;
        let max = self.device.limits().max_buffer_size;
        if bytes > max {
            return Err(Error::Limit {
                op: "encode_to_buffer",
                what: "the output buffer",
                requested: bytes,
                limit_name: "max buffer size",
                limit: max,
            });
        }
        self.check_fits_budget("encode_to_buffer", "the output buffer", bytes)?;
        let out = self.scoped("encode_to_buffer", || {
            use wgpu::BufferUsages as U;
            self.create_buffer(
                "posenc.encode.result",
                bytes.max(4),
                U::STORAGE | U::COPY_SRC | U::COPY_DST,
            )
        })?;
        if bytes > 0 {
            self.run_encode(
                PeSource::Spec(spec),
                table,
                ids,
                positions,
                options,
                scale,
                Sink::Device(&out),
                None,
            )?;
        }
        Ok(wgpu::Buffer::clone(&out))
    }

    /// Like [`Context::encode_to_buffer`], writing into a buffer the caller owns (and can
    /// reuse across calls): it needs `STORAGE | COPY_DST` usage and at least
    /// `batch * len * dim` elements of `options.out_dtype`, rounded up to whole words.
    ///
    /// # Errors
    /// As [`Context::encode`]; [`Error::Shape`] if `out` is too small.
    pub fn encode_into_buffer(
        &self,
        spec: &PeSpec,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        self.encode_into_buffer_timed(spec, table, ids, positions, options, out, None)
    }

    /// [`Context::encode_into_buffer`], with `timer` bracketing every submission it makes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn encode_into_buffer_timed(
        &self,
        spec: &PeSpec,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
        out: &wgpu::Buffer,
        timer: Option<&SpanTimer>,
    ) -> Result<()> {
        let scale = encode::check(spec, table.dim(), ids, positions, options)?;
        let bytes = (ids.len() * table.dim * options.out_dtype.size()).next_multiple_of(4) as u64;
        if out.size() < bytes {
            return Err(Error::Shape {
                op: "encode_into_buffer",
                what: "output buffer bytes",
                expected: format!("at least {bytes}"),
                actual: out.size().to_string(),
            });
        }
        if bytes > 0 {
            self.run_encode(
                PeSource::Spec(spec),
                table,
                ids,
                positions,
                options,
                scale,
                Sink::Device(out),
                timer,
            )?;
        }
        Ok(())
    }

    /// Bytes of `table` that this context's accounting does not hold: a table uploaded
    /// through another context still occupies the device.
    fn unaccounted_bytes(&self, table: &GpuTable) -> u64 {
        if table.accounted_by == self.memory_id() { 0 } else { table.device_bytes() }
    }

    /// As [`Context::unaccounted_bytes`], for a learned position table.
    fn unaccounted_position_bytes(&self, table: &GpuPositionTable) -> u64 {
        if table.accounted_by == self.memory_id() { 0 } else { table.buffer.size() }
    }

    /// Drops the cached PE rows (the next encode computes them again): for cold timings,
    /// or to give the memory back.
    pub fn clear_pe_cache(&self) {
        if let Ok(mut slot) = self.pe_cache.lock() {
            *slot = None;
        }
    }

    /// The cached PE rows covering positions `0..needed`, built (or grown) if the budget
    /// allows; `None` sends the caller to per-call rows.
    fn cached_pe_rows(
        &self,
        spec: &PeSpec,
        needed: u64,
        timer: Option<&SpanTimer>,
    ) -> Option<PeCache> {
        let row_bytes = u64::from(spec.dim()) * 4;
        // Under a memory budget the cache takes at most a quarter of it.
        let budget_share = self.memory_budget().map_or(u64::MAX, |b| b / 4);
        let cap_rows = self.max_binding.min(PE_CACHE_BUDGET).min(budget_share) / row_bytes;
        if needed == 0 || needed > cap_rows {
            return None;
        }
        let mut slot = self.pe_cache.lock().ok()?;
        if let Some(cache) = slot.as_ref()
            && cache.spec == *spec
            && u64::from(cache.rows) >= needed
        {
            return Some(cache.clone());
        }
        // Grow in powers of two so a decode loop rebuilds the cache O(log n) times. The old
        // rows go first, so old and new never count against a budget together.
        *slot = None;
        let rows = needed.next_power_of_two().min(cap_rows) as u32;
        let positions: Vec<u32> = (0..rows).collect();
        // A budget too tight for the cache sends the caller to per-call rows.
        let buffers =
            TableBuffers::new(self, rows as usize, spec.dim() as usize, &flat_steps(spec), false)
                .ok()?;
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("posenc.encode.pe_cache"),
        });
        if let Some(timer) = timer {
            timer.start(&mut encoder);
        }
        self.record_table(spec, &buffers, &positions, &mut encoder);
        self.queue.submit([encoder.finish()]);
        let cache = PeCache { spec: *spec, rows, buffer: buffers.out.clone() };
        *slot = Some(cache.clone());
        Some(cache)
    }

    #[allow(clippy::too_many_arguments)]
    fn run_encode(
        &self,
        pe: PeSource<'_>,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
        scale: Option<f32>,
        mut sink: Sink<'_>,
        timer: Option<&SpanTimer>,
    ) -> Result<()> {
        let dim = table.dim;
        let ids: Vec<u32> = ids.iter().copied().collect();
        let positions: Vec<u32> = positions.iter().copied().collect();
        let n_tokens = ids.len();
        let out_size = options.out_dtype.size();
        let limits = self.device.limits();
        let max_groups = limits.max_compute_workgroups_per_dimension;
        // Tokens per chunk: the chunk's output and its PE rows (f32) each fit one binding,
        // and the grid's y and z dimensions cover it.
        let per_chunk = (self.max_binding / (dim as u64 * 4))
            .min(u64::from(max_groups) * u64::from(max_groups))
            .min(n_tokens as u64) as usize;
        // 16-bit output of an odd dim packs rows across word boundaries: an even number of
        // tokens per chunk keeps every chunk whole words.
        let odd16 = out_size == 2 && dim % 2 == 1;
        let per_chunk = if odd16 && per_chunk < n_tokens { per_chunk & !1 } else { per_chunk };
        if per_chunk == 0 {
            let rows = if odd16 { 2 } else { 1 };
            return Err(Error::Limit {
                op: "encode",
                what: if odd16 {
                    "two rows of PE (16-bit output of an odd dim is chunked in row pairs)"
                } else {
                    "one row of PE"
                },
                requested: rows * dim as u64 * 4,
                limit_name: "max storage binding size",
                limit: self.max_binding,
            });
        }
        let fast = table.dtype == Dtype::F32
            && options.out_dtype == Dtype::F32
            && dim.is_multiple_of(4)
            && table.chunks.len() == 1;
        let max_position = positions.iter().copied().max().map_or(0, |p| u64::from(p) + 1);
        let params_size =
            if fast { size_of::<EncodeF32x4Params>() } else { size_of::<EncodeParams>() };
        let _exclusive = self.memory.exclusive();
        self.scoped("encode", || {
            // PE rows: a learned table as it is; a sinusoid from the cache of rows 0..n, or
            // else computed per chunk for the chunk's distinct positions.
            let (spec, learned) = match pe {
                PeSource::Spec(spec) => (Some(spec), None),
                PeSource::Learned(t) => (None, Some(t)),
            };
            let cache = spec.and_then(|spec| self.cached_pe_rows(spec, max_position, timer));
            // What the table kernel reads, when PE rows are computed per chunk.
            let steps = spec.filter(|_| cache.is_none()).map(|spec| (spec, flat_steps(spec)));
            let per_chunk = match self.budget_left() {
                None => per_chunk,
                Some(left) => {
                    let learned_bytes = learned.map_or(0, |t| self.unaccounted_position_bytes(t));
                    let plan = ChunkPlan {
                        left: left
                            .saturating_sub(self.unaccounted_bytes(table))
                            .saturating_sub(learned_bytes),
                        dim: dim as u64,
                        out_size: out_size as u64,
                        host: matches!(sink, Sink::Host(_)),
                        per_call_pe: steps.is_some(),
                        steps_bytes: steps.as_ref().map_or(0, |(_, w)| w.len() as u64 * 4),
                        params: params_size as u64
                            * if fast { 1 } else { table.chunks.len() as u64 },
                        fast,
                    };
                    let fit = per_chunk.min(plan.tokens()?);
                    // Odd-dim 16-bit chunks stay whole words: an even number of tokens.
                    let fit = if odd16 && fit < n_tokens { fit & !1 } else { fit };
                    if fit == 0 {
                        return Err(Error::Limit {
                            op: "encode",
                            what: "the scratch buffers of two tokens (odd dim, 16-bit output)",
                            requested: 2 * (12 + 2 * dim as u64 * out_size as u64),
                            limit_name: "GPU memory budget left after tables and cached PE rows",
                            limit: plan.left,
                        });
                    }
                    fit
                }
            };
            let per_call_pe = match &steps {
                Some((spec, words)) => {
                    Some((*spec, TableBuffers::new(self, per_chunk, dim, words, false)?))
                }
                None => None,
            };
            let pe_buffer = match (learned, &cache, &per_call_pe) {
                (Some(t), _, _) => &t.buffer,
                (None, Some(c), _) => &c.buffer,
                (None, None, Some((_, p))) => &p.out,
                (None, None, None) => unreachable!("one of the three exists"),
            };
            let buffer = |label, size: u64, usage| self.pooled(label, size, usage);
            use wgpu::BufferUsages as U;
            // The token records (see the kernels' `tokens`).
            let tokens_buf = buffer(
                "posenc.encode.tokens",
                token_buffer_bytes(per_chunk as u64, fast),
                U::STORAGE | U::COPY_DST,
            )?;
            let out_bytes = ((per_chunk * dim * out_size) as u64).next_multiple_of(4);
            // A device sink that one chunk fills is bound directly: no copy afterwards.
            let direct = match &sink {
                Sink::Device(result)
                    if per_chunk == n_tokens && result.size() <= self.max_binding =>
                {
                    Some((*result).clone())
                }
                _ => None,
            };
            let pooled_out = match direct {
                Some(_) => None,
                None => Some(buffer("posenc.encode.out", out_bytes, U::STORAGE | U::COPY_SRC)?),
            };
            let out_buf: &wgpu::Buffer = match (&direct, &pooled_out) {
                (Some(result), _) => result,
                (None, Some(pooled)) => pooled,
                (None, None) => unreachable!("one of the two exists"),
            };
            let staging = match sink {
                Sink::Host(_) => {
                    Some(buffer("posenc.encode.staging", out_bytes, U::MAP_READ | U::COPY_DST)?)
                }
                Sink::Device(_) => None,
            };
            let bind = |layout: &wgpu::BindGroupLayout,
                        params: &wgpu::Buffer,
                        table_buf: &wgpu::Buffer| {
                self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("posenc.encode.bind_group"),
                    layout,
                    entries: &[
                        wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() },
                        wgpu::BindGroupEntry {
                            binding: 1,
                            resource: tokens_buf.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 2,
                            resource: pe_buffer.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 3,
                            resource: table_buf.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry { binding: 4, resource: out_buf.as_entire_binding() },
                    ],
                })
            };
            // One uniform buffer and bind group per vocabulary chunk (each dispatch of a
            // submission needs its own parameters), or one for the fast kernel.
            let passes: Vec<(super::PooledBuffer, wgpu::BindGroup)> = if fast {
                let params = buffer(
                    "posenc.encode_f32x4.params",
                    params_size as u64,
                    U::UNIFORM | U::COPY_DST,
                )?;
                let group = bind(&self.encode.fast_layout, &params, &table.chunks[0].buffer);
                vec![(params, group)]
            } else {
                table
                    .chunks
                    .iter()
                    .map(|chunk| {
                        let params = buffer(
                            "posenc.encode.params",
                            params_size as u64,
                            U::UNIFORM | U::COPY_DST,
                        )?;
                        let group = bind(&self.encode.layout, &params, &chunk.buffer);
                        Ok((params, group))
                    })
                    .collect::<Result<_>>()?
            };
            let mut flags = 0;
            if scale.is_some() {
                flags |= FLAG_SCALE;
            }
            if options.pad_id.is_some() {
                flags |= FLAG_PAD;
            }
            if odd16 {
                flags |= FLAG_ODD16;
            }
            let row_words = if out_size == 4 { dim } else { dim.div_ceil(2) } as u32;
            let mut written = 0usize;
            for start in (0..n_tokens).step_by(per_chunk) {
                let end = (start + per_chunk).min(n_tokens);
                let n = (end - start) as u32;
                let mut encoder =
                    self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("posenc.encode.encoder"),
                    });
                if let Some(timer) = timer {
                    timer.start(&mut encoder);
                }
                let slots = match &per_call_pe {
                    None => positions[start..end].to_vec(),
                    Some((spec, pe)) => {
                        let chunk_pos =
                            ArrayView2::from_shape((1, end - start), &positions[start..end])
                                .expect("one row");
                        let (unique, slots) = encode::unique_positions(chunk_pos);
                        self.record_table(spec, pe, &unique, &mut encoder);
                        slots
                    }
                };
                // The fast kernel serves groups of tokens sharing a PE row; the general one
                // takes tokens sorted by PE row (stable, so ties keep token order), so tokens
                // sharing a row run back to back on the device and find it in cache.
                let (n_items, n_groups) = if fast {
                    let (records, groups) = group_records(&ids[start..end], &slots);
                    self.queue.write_buffer(&tokens_buf, 0, bytemuck::cast_slice(&records));
                    (groups as u32, groups as u32)
                } else {
                    let mut order: Vec<u32> = (0..n).collect();
                    if !odd16 {
                        order.sort_by_key(|&g| slots[g as usize]);
                    }
                    let packed: Vec<u32> = order
                        .iter()
                        .flat_map(|&g| [ids[start + g as usize], slots[g as usize], g])
                        .collect();
                    self.queue.write_buffer(&tokens_buf, 0, bytemuck::cast_slice(&packed));
                    (n, 0)
                };
                let gy = n_items.min(max_groups);
                let gz = n_items.div_ceil(gy);
                // Both kernels spread a row over x: the fast one in blocks of
                // 2 * PAIR_WORKGROUP_SIZE vec4s.
                let gx = if fast {
                    (dim as u32 / 4).div_ceil(2 * PAIR_WORKGROUP_SIZE)
                } else {
                    row_words.div_ceil(WORKGROUP_SIZE)
                };
                for (k, (params_buf, bind_group)) in passes.iter().enumerate() {
                    if fast {
                        let params = EncodeF32x4Params {
                            n_groups,
                            row_vecs: dim as u32 / 4,
                            scale_bits: scale.unwrap_or(1.0).to_bits(),
                            flags,
                            pad_id: options.pad_id.unwrap_or(0),
                            groups_y: gy,
                            groups_at: n,
                            keep: 0,
                        };
                        self.queue.write_buffer(params_buf, 0, bytemuck::bytes_of(&params));
                    } else {
                        let chunk = &table.chunks[k];
                        let params = EncodeParams {
                            n_tokens: n,
                            row_words,
                            dim: dim as u32,
                            vocab_lo: chunk.rows.start,
                            vocab_hi: chunk.rows.end,
                            scale_bits: scale.unwrap_or(1.0).to_bits(),
                            flags: flags | if k == 0 { FLAG_FIRST } else { 0 },
                            pad_id: options.pad_id.unwrap_or(0),
                            in_dtype: table.dtype.code(),
                            out_dtype: options.out_dtype.code(),
                            groups_y: gy,
                            _pad: 0,
                        };
                        self.queue.write_buffer(params_buf, 0, bytemuck::bytes_of(&params));
                    }
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some("posenc.encode.pass"),
                        timestamp_writes: None,
                    });
                    pass.set_pipeline(if fast {
                        &self.encode.fast_pipeline
                    } else {
                        &self.encode.pipeline
                    });
                    pass.set_bind_group(0, bind_group, &[]);
                    pass.dispatch_workgroups(gx, gy, gz);
                }
                let chunk_bytes = ((end - start) * dim * out_size).next_multiple_of(4);
                if let Some(timer) = timer.filter(|_| end == n_tokens) {
                    timer.stop(&mut encoder);
                }
                match (&mut sink, &staging) {
                    (Sink::Host(dst), Some(staging)) => {
                        encoder.copy_buffer_to_buffer(out_buf, 0, staging, 0, chunk_bytes as u64);
                        self.finish_and_read(
                            "encode",
                            encoder,
                            staging,
                            &mut dst[written..written + chunk_bytes],
                        )?;
                    }
                    (Sink::Device(result), _) => {
                        // Every chunk but the last is whole words (odd 16-bit dims take an even
                        // number of tokens per chunk), so offsets stay aligned.
                        if direct.is_none() {
                            encoder.copy_buffer_to_buffer(
                                out_buf,
                                0,
                                result,
                                written as u64,
                                chunk_bytes as u64,
                            );
                        }
                        let index = self.queue.submit([encoder.finish()]);
                        // Wait before the next chunk reuses the chunk buffers.
                        self.wait("encode", index)?;
                    }
                    (Sink::Host(_), None) => unreachable!("host sinks get a staging buffer"),
                }
                written += chunk_bytes;
            }
            Ok(())
        })
    }
}

/// The tokens per chunk a memory budget allows: what is left of it, less the fixed
/// buffers, divided by each token's share of the scratch buffers.
struct ChunkPlan {
    /// Budget bytes not held by anything else (tables, cached rows, other outputs).
    left: u64,
    dim: u64,
    out_size: u64,
    /// The output is read back, which needs a staging buffer as large as the chunk.
    host: bool,
    /// PE rows are computed per chunk rather than gathered from the cache.
    per_call_pe: bool,
    /// Bytes of the table kernel's phase steps (used with `per_call_pe`).
    steps_bytes: u64,
    /// Bytes of the uniform buffers.
    params: u64,
    /// The records are `encode_f32x4`'s (see [`token_buffer_bytes`]).
    fast: bool,
}

/// Bytes of the token records for `tokens` tokens: the general kernel's `(id, slot, row)`,
/// or the fast kernel's `(id, row)` per token plus at most one group record per token and
/// the closing record.
fn token_buffer_bytes(tokens: u64, fast: bool) -> u64 {
    if fast { 16 * tokens + 8 } else { 12 * tokens }
}

impl ChunkPlan {
    fn tokens(&self) -> Result<usize> {
        let out_row = self.dim * self.out_size;
        let mut per_token = token_buffer_bytes(1, self.fast) - token_buffer_bytes(0, self.fast);
        per_token += out_row;
        // Output and staging buffers are rounded up to whole words.
        let mut fixed = self.params + 8 + token_buffer_bytes(0, self.fast);
        if self.host {
            per_token += out_row;
        }
        if self.per_call_pe {
            // A PE row and its position; the table kernel's params and phase steps.
            per_token += self.dim * 4 + 4;
            fixed += size_of::<super::TableParams>() as u64 + self.steps_bytes;
        }
        let tokens = self.left.saturating_sub(fixed) / per_token;
        if tokens == 0 {
            return Err(Error::Limit {
                op: "encode",
                what: "the scratch buffers of one token",
                requested: fixed + per_token,
                limit_name: "GPU memory budget left after tables and cached PE rows",
                limit: self.left,
            });
        }
        Ok(usize::try_from(tokens).unwrap_or(usize::MAX))
    }
}

/// Where an encode's PE rows come from.
#[derive(Clone, Copy)]
enum PeSource<'a> {
    Spec(&'a PeSpec),
    Learned(&'a GpuPositionTable),
}

/// A learned position table on the device, as f32 rows: see
/// [`Context::upload_position_table`].
pub struct GpuPositionTable {
    rows: usize,
    dim: usize,
    buffer: DeviceBuffer,
    /// Identifies the accounting its buffer counts against (as for [`GpuTable`]).
    accounted_by: usize,
}

impl GpuPositionTable {
    /// `(max_positions, dim)`.
    pub fn dim(&self) -> (usize, usize) {
        (self.rows, self.dim)
    }
}

impl std::fmt::Debug for GpuPositionTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuPositionTable")
            .field("rows", &self.rows)
            .field("dim", &self.dim)
            .finish()
    }
}

/// Where an encode's chunks go: read back into host memory, or copied into one device buffer.
enum Sink<'a> {
    Host(&'a mut [u8]),
    Device(&'a wgpu::Buffer),
}

fn shaped<T>(shape: (usize, usize, usize), values: impl Iterator<Item = T>) -> Array3<T> {
    Array3::from_shape_vec(shape, values.collect()).expect("the shape matches")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_plans_fit_the_budget_left() {
        let plan = ChunkPlan {
            left: 10_000,
            dim: 64,
            out_size: 4,
            host: true,
            per_call_pe: false,
            steps_bytes: 256,
            params: 48,
            fast: false,
        };
        // 12 + 256 + 256 bytes per token after 48 + 8 fixed.
        assert_eq!(plan.tokens().unwrap(), (10_000 - 56) / 524);
        let cold = ChunkPlan { per_call_pe: true, ..plan };
        assert_eq!(cold.tokens().unwrap(), (10_000 - 56 - 16 - 256) / (524 + 260));
        let tight = ChunkPlan { left: 500, ..plan };
        assert!(matches!(tight.tokens(), Err(Error::Limit { requested: 580, limit: 500, .. })));
    }

    #[test]
    fn groups_hold_tokens_sharing_a_slot_in_token_order() {
        let ids = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21];
        // Slot 7 is shared by ten tokens: a full group of MAX_GROUP_TOKENS, then the rest.
        let slots = [7, 2, 7, 7, 7, 7, 7, 2, 7, 7, 7, 7];
        let (records, groups) = group_records(&ids, &slots);
        assert_eq!(MAX_GROUP_TOKENS, 8);
        assert_eq!(groups, 3);
        let n = ids.len();
        let tokens: Vec<[u32; 2]> = [1, 7, 0, 2, 3, 4, 5, 6, 8, 9, 10, 11]
            .iter()
            .map(|&g: &u32| [ids[g as usize], g])
            .collect();
        assert_eq!(records[..n], tokens[..]);
        assert_eq!(records[n..], [[0, 2], [2, 7], [10, 7], [12, 0]]);
        assert_eq!(group_records(&[], &[]), (vec![[0, 0]], 0));
    }

    #[test]
    fn params_match_the_wgsl_struct_size() {
        // Twelve u32 fields in shaders/encode.wgsl's Params.
        assert_eq!(size_of::<EncodeParams>(), 48);
        // Eight u32 fields in shaders/encode_f32x4.wgsl's Params.
        assert_eq!(size_of::<EncodeF32x4Params>(), 32);
    }
}
