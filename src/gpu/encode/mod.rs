//! Host wrapper of `shaders/encode.wgsl`: embedding tables resident on the device, and the
//! fused gather + positional-encoding add in token chunks.

pub(super) mod decode;
pub(super) mod pass;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytemuck::{Pod, Zeroable};
use ndarray::ArrayView2;

use super::memory::DeviceBuffer;
use super::pending::{HostResult, PendingEncode, Readback};
use super::runner::{ENCODE, Output, Sink};
use super::table::{TableBuffers, flat_steps};
use super::timing::SpanTimer;
use super::{Context, PooledBuffer, fold_dispatch, wait};
use crate::cpu::encode::row_major;
use crate::encode::{self, Dtype, Embeddings, EncodeOptions, Encoded};
use crate::error::{Error, Result};
use crate::shaders::{
    EncodeX4, FLAG_SCALE, MAX_TABLE_SLOTS, PAD, SLOT_SHIFT, WORKGROUP_SIZE, coalesced_units,
    takes_unpack, x4_units, x4_workgroup,
};
use crate::spec::PeSpec;

/// Mirror of `Params` in `shaders/encode.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct EncodeParams {
    /// Tokens in this dispatch.
    pub n_tokens: u32,
    /// The first of them, among the chunk's sorted tokens.
    pub token_base: u32,
    /// Output words per row: dim when `out_dtype` is f32 (so for the f32 rows of an odd
    /// dim's 16-bit output), else dim / 2.
    pub row_words: u32,
    /// Model dimension.
    pub dim: u32,
    /// f32 bits of the scale (used when [`FLAG_SCALE`] is set).
    pub scale_bits: u32,
    /// [`FLAG_SCALE`] or 0.
    pub flags: u32,
    /// Table storage type code (`DTYPE_*` of [`crate::shaders`]).
    pub in_dtype: u32,
    /// Output storage type code (`DTYPE_*` of [`crate::shaders`]).
    pub out_dtype: u32,
    /// Workgroups along y; tokens beyond fold into z.
    pub groups_y: u32,
    /// Always 0: the zero the kernel ORs into each product an add takes, which a compiler
    /// cannot see through, so it cannot contract the two into a multiply-add
    /// (`shaders/shared/rounded.wgsl`).
    pub zero: u32,
    /// Padding to a multiple of 16 bytes.
    pub _pad: [u32; 2],
}

/// Mirror of `Params` in `shaders/encode_x4.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct EncodeX4Params {
    /// Token groups in this dispatch (tokens sharing a table chunk and a PE row, at most
    /// [`MAX_GROUP_TOKENS`] each).
    pub n_groups: u32,
    /// The first of them, among the chunk's groups.
    pub group_base: u32,
    /// Units of four elements per row: dim / 4.
    pub row_units: u32,
    /// f32 bits of the scale; 1.0 without one.
    pub scale_bits: u32,
    /// Workgroups along y; groups beyond fold into z.
    pub groups_y: u32,
    /// Index (in `vec2<u32>` records) of the first group record in the tokens buffer.
    pub groups_at: u32,
    /// Always 0: a branch on it keeps the kernel's prefetch loads alive.
    pub keep: u32,
    /// Always 0: the zero the kernel ORs into each product an add takes, which a compiler
    /// cannot see through, so it cannot contract the two into a multiply-add
    /// (`shaders/shared/rounded.wgsl`).
    pub zero: u32,
}

/// Mirror of `Params` in `shaders/narrow.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct NarrowParams {
    /// f32 elements to narrow.
    pub n_elems: u32,
    /// Output storage type code ([`DTYPE_F16`](crate::shaders::DTYPE_F16) or
    /// [`DTYPE_BF16`](crate::shaders::DTYPE_BF16)).
    pub out_dtype: u32,
    /// Workgroups along x of a dispatch folded into 2-D.
    pub groups_x: u32,
    /// Padding to 16 bytes.
    pub _pad: u32,
}

/// Most tokens one workgroup of `encode_x4` serves from one read of their shared PE row:
/// more saves PE reads, fewer keeps a GPU's workgroups many when a batch shares one
/// position.
pub const MAX_GROUP_TOKENS: usize = crate::shaders::MAX_GROUP_TOKENS as usize;

/// One token chunk's records (see the kernels' `tokens`), sorted by dispatch window (the
/// table chunks one dispatch binds) and then PE row, ties in token order.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Records {
    /// The words to upload.
    words: Vec<u32>,
    /// `starts[w]`: the first item (group for `encode_x4`, token for `encode`) of window `w`,
    /// for every window and one past the last (the number of items).
    starts: Vec<u32>,
}

/// Each token's dispatch window and id record (its row in its table chunk, the chunk's slot
/// in the window above [`SLOT_SHIFT`]; `PAD` for a pad token, in window 0), the order of
/// the tokens sorted by (window, PE slot), ties in token order, and their sort keys in that
/// order (`window << 32 | slot`).
fn sorted_tokens(
    ids: &[u32],
    slots: &[u32],
    rows_per_chunk: u32,
    table_slots: u32,
    pad_id: Option<u32>,
) -> (Vec<u32>, Vec<[u32; 2]>, Vec<u64>) {
    // A table of one chunk (the usual case) needs no division per token.
    let one_chunk = ids.iter().all(|&id| id < rows_per_chunk || pad_id == Some(id));
    let placed: Vec<[u32; 2]> = ids
        .iter()
        .map(|&id| {
            if pad_id == Some(id) {
                return [0, PAD];
            }
            if one_chunk {
                return [0, id];
            }
            let chunk = id / rows_per_chunk;
            [chunk / table_slots, (id % rows_per_chunk) | ((chunk % table_slots) << SLOT_SHIFT)]
        })
        .collect();
    let keys: Vec<u64> = placed
        .iter()
        .zip(slots)
        .map(|(p, &slot)| (u64::from(p[0]) << 32) | u64::from(slot))
        .collect();
    let order = stable_order(&keys);
    let sorted = order.iter().map(|&g| keys[g as usize]).collect();
    (order, placed, sorted)
}

/// The indices of `keys` in the order of their keys, ties in index order. A counting sort
/// when the keys span a range no wider than a few times their number (the usual case:
/// windows times PE slots, the slots being positions below the cache's rows or one per
/// distinct position), else a sort of packed (key, index) words: a comparison sort that
/// fetched both halves of each key through the index cost 200 us of a 290 us bert-base call
/// on an H100's host (4096 tokens, 2026-11-26).
fn stable_order(keys: &[u64]) -> Vec<u32> {
    let n = keys.len();
    let (Some(&lo), Some(&hi)) = (keys.iter().min(), keys.iter().max()) else {
        return Vec::new();
    };
    // Keys are (window << 32 | slot): rank the windows, then slots within them.
    let windows = (hi >> 32) - (lo >> 32) + 1;
    let max_slot = keys.iter().map(|k| k & 0xffff_ffff).max().unwrap_or(0) + 1;
    let span = windows.saturating_mul(max_slot);
    if span <= (4 * n as u64).max(1024) {
        let rank = |k: u64| (((k >> 32) - (lo >> 32)) * max_slot + (k & 0xffff_ffff)) as usize;
        let mut starts = vec![0u32; span as usize + 1];
        for &k in keys {
            starts[rank(k) + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let mut order = vec![0u32; n];
        for (g, &k) in keys.iter().enumerate() {
            let at = &mut starts[rank(k)];
            order[*at as usize] = g as u32;
            *at += 1;
        }
        return order;
    }
    let mut packed: Vec<(u64, u32)> = keys.iter().copied().zip(0..n as u32).collect();
    packed.sort_unstable();
    packed.into_iter().map(|(_, g)| g).collect()
}

/// How one token chunk's tokens are grouped for `encode_x4`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Grouping {
    /// Rows per table chunk.
    pub(super) rows_per_chunk: u32,
    /// Table chunks one dispatch binds (a window).
    pub(super) table_slots: u32,
    /// Windows: dispatches the table needs.
    pub(super) windows: usize,
    /// Most tokens per group (at most [`MAX_GROUP_TOKENS`]).
    pub(super) cap: usize,
    pub(super) pad_id: Option<u32>,
}

/// The `encode_x4` records of one token chunk: sorted tokens as `(id record, output row)`,
/// then one `(first token, PE slot)` record per group of at most `g.cap` (at most
/// [`MAX_GROUP_TOKENS`]) tokens sharing a window and a PE slot, then `(n, 0)`.
///
/// `row_len`: tokens per sequence when the chunk is whole sequences, else 0. When every
/// sequence of the chunk has the same PE slots (the usual batch: each row at positions
/// `0..len`) and one dispatch binds the whole table, the groups are the columns (token `l`
/// of every sequence), cut at `g.cap`, and the records are written in one pass with no
/// sort: at 8192 tokens the sort took 100 - 180 us of a 270 us call on the host, the
/// largest part of it (2026-11-27).
pub(super) fn group_records(ids: &[u32], slots: &[u32], g: &Grouping, row_len: usize) -> Records {
    let n = ids.len();
    if let Some(records) = column_records(ids, slots, g, row_len) {
        return records;
    }
    let Grouping { rows_per_chunk, table_slots, windows, cap, pad_id } = *g;
    let (order, placed, sorted) = sorted_tokens(ids, slots, rows_per_chunk, table_slots, pad_id);
    let mut words: Vec<u32> = Vec::with_capacity(4 * n + 2);
    for &g in &order {
        words.push(placed[g as usize][1]);
        words.push(g);
    }
    let mut starts = Vec::with_capacity(windows + 1);
    let mut groups = 0u32;
    let mut start = 0;
    while start < n {
        let key = sorted[start];
        let window = (key >> 32) as usize;
        while starts.len() <= window {
            starts.push(groups);
        }
        let mut end = start + 1;
        while end < n && end - start < cap && sorted[end] == key {
            end += 1;
        }
        words.extend([start as u32, key as u32]);
        groups += 1;
        start = end;
    }
    starts.resize(windows + 1, groups);
    words.extend([n as u32, 0]);
    Records { words, starts }
}

/// [`group_records`] for a chunk of whole sequences that all have the same PE slots: the
/// groups are the columns (token `l` of every sequence) within each window, cut at
/// `g.cap`, found in one pass over the tokens. `None` where that does not hold.
fn column_records(ids: &[u32], slots: &[u32], g: &Grouping, row_len: usize) -> Option<Records> {
    let Grouping { rows_per_chunk, table_slots, windows, cap, pad_id } = *g;
    let n = ids.len();
    if row_len == 0 || n == 0 || !n.is_multiple_of(row_len) || windows == 0 {
        return None;
    }
    let first = &slots[..row_len];
    if !slots.chunks_exact(row_len).all(|row| row == first) {
        return None;
    }
    let rows = n / row_len;
    let cap = cap.max(1);
    // Each window's tokens in column-major order as (id record, output row), and where
    // each column's run in it begins.
    let mut tokens: Vec<Vec<u32>> = vec![Vec::new(); windows];
    tokens[0].reserve(2 * n);
    let mut runs: Vec<Vec<(u32, u32)>> = vec![Vec::new(); windows];
    for col in 0..row_len {
        for b in 0..rows {
            let g = b * row_len + col;
            let id = ids[g];
            let (window, record) = if pad_id == Some(id) {
                (0, PAD)
            } else if id < rows_per_chunk {
                (0, id)
            } else {
                let chunk = id / rows_per_chunk;
                let record = (id % rows_per_chunk) | ((chunk % table_slots) << SLOT_SHIFT);
                ((chunk / table_slots) as usize, record)
            };
            let at = (tokens[window].len() / 2) as u32;
            // A new group at each column's first token in the window and every cap tokens.
            let run = runs[window].last().copied();
            if run.is_none_or(|(start, c)| c != col as u32 || (at - start) as usize == cap) {
                runs[window].push((at, col as u32));
            }
            tokens[window].extend([record, g as u32]);
        }
    }
    let groups: usize = runs.iter().map(Vec::len).sum();
    let counts: Vec<u32> = tokens.iter().map(|t| (t.len() / 2) as u32).collect();
    // One window (the usual case): its tokens' records are the words' start.
    let mut words = if windows == 1 { std::mem::take(&mut tokens[0]) } else { Vec::new() };
    words.reserve(2 * n + 2 * groups + 2 - words.len());
    if windows > 1 {
        for t in &tokens {
            words.extend_from_slice(t);
        }
    }
    let mut starts = Vec::with_capacity(windows + 1);
    let (mut base, mut count) = (0u32, 0u32);
    for (r, tokens_in_window) in runs.iter().zip(counts) {
        starts.push(count);
        for &(at, col) in r {
            words.extend([base + at, first[col as usize]]);
        }
        base += tokens_in_window;
        count += r.len() as u32;
    }
    starts.push(count);
    words.extend([n as u32, 0]);
    Some(Records { words, starts })
}

/// The `encode` records of one token chunk: sorted tokens as `(row in its table chunk or
/// PAD, PE slot, output row)`; one window per table chunk.
pub(super) fn token_records(
    ids: &[u32],
    slots: &[u32],
    rows_per_chunk: u32,
    n_chunks: usize,
    pad_id: Option<u32>,
) -> Records {
    let (order, placed, _) = sorted_tokens(ids, slots, rows_per_chunk, 1, pad_id);
    let words = order.iter().flat_map(|&g| [placed[g as usize][1], slots[g as usize], g]).collect();
    let starts = (0..=n_chunks as u32)
        .map(|c| order.partition_point(|&g| placed[g as usize][0] < c) as u32)
        .collect();
    Records { words, starts }
}

/// Fewest workgroups a coalesced `encode_x4` dispatch should have before its groups shrink:
/// a decode step of eight sequences at one position would otherwise be one group, four
/// workgroups at D = 4096, too few to spread over a GPU's cores. 2048 workgroups of 96 to
/// 128 threads keep an H100's 132 cores busy: raised from 64, it took bert-base from 61 -
/// 64 % to 71 - 73 % of the copy ceiling and whisper-small from 69 % to 84 - 87 %
/// (2026-11-22, with the one-token-ahead loop; docs/performance.md). (On lavapipe smaller
/// groups made decode steps slower: 0.27 against 0.14 ms for 8 x 4096, so the adjacent
/// pattern keeps full groups.)
const MIN_WORKGROUPS: usize = 2048;

/// Most tokens per chunk for which the adjacent pattern binds several table chunks per
/// dispatch (see `run_encode`).
const MULTI_SLOT_TOKENS: usize = 64;

/// Tokens per group for `n` tokens of dim `dim`: [`MAX_GROUP_TOKENS`] (fewest PE reads)
/// unless that leaves fewer than [`MIN_WORKGROUPS`] workgroups, then fewer, down to one.
fn group_cap(n: usize, dim: usize, per: u32) -> usize {
    let units = (dim / 4) as u32;
    let blocks = units.div_ceil(per * x4_workgroup(units, per)).max(1) as usize;
    (n * blocks / MIN_WORKGROUPS).clamp(1, MAX_GROUP_TOKENS)
}

/// Most bytes the cache of PE rows for positions `0..n` may hold per context, unless
/// [`Options::pe_cache_budget`](crate::gpu::Options::pe_cache_budget) says otherwise.
pub const PE_CACHE_BUDGET: u64 = 256 << 20;

/// A compiled kernel: its bind group layout and pipeline.
pub(super) struct Kernel {
    pub(super) layout: wgpu::BindGroupLayout,
    pub(super) pipeline: wgpu::ComputePipeline,
}

/// The encode kernels: the general one and the narrowing pass, compiled with the context,
/// and the `encode_x4` specialisations, compiled on first use.
#[derive(Clone)]
pub(super) struct EncodeKernels {
    general: Arc<Kernel>,
    narrow: Arc<Kernel>,
    x4: Arc<Mutex<HashMap<EncodeX4, Arc<Kernel>>>>,
}

impl EncodeKernels {
    pub(super) fn new(device: &wgpu::Device) -> Self {
        let (layout, pipeline) = super::build_kernel(device, "encode");
        let general = Arc::new(Kernel { layout, pipeline });
        let (layout, pipeline) = super::build_kernel(device, "narrow");
        let narrow = Arc::new(Kernel { layout, pipeline });
        Self { general, narrow, x4: Arc::default() }
    }
}

impl Context {
    /// The `encode_x4` specialisation `variant`, compiled on first use.
    fn x4_kernel(&self, variant: EncodeX4) -> Arc<Kernel> {
        let mut kernels = self.encode.x4.lock().unwrap_or_else(|e| e.into_inner());
        let kernel = kernels.entry(variant).or_insert_with(|| {
            let bindings = super::layout::encode_x4_bindings(variant.slots);
            let (layout, pipeline) = super::build_pipeline_with(
                &self.device,
                "encode_x4",
                &variant.source(),
                &bindings,
                self.bound_all_loops,
            );
            Arc::new(Kernel { layout, pipeline })
        });
        Arc::clone(kernel)
    }

    /// Units per invocation of this context's `encode_x4`: [`x4_units`] for the adjacent
    /// pattern, [`coalesced_units`] for the coalesced one.
    fn x4_units(&self) -> u32 {
        if self.coalesced { coalesced_units(self.units, false) } else { x4_units(false) }
    }

    /// Table bindings one `encode_x4` dispatch may choose among on this device: the storage
    /// buffers a stage may bind, less the tokens, PE rows and output.
    fn max_table_slots(&self) -> u32 {
        let storage = self.device.limits().max_storage_buffers_per_shader_stage;
        storage.saturating_sub(3).clamp(1, MAX_TABLE_SLOTS)
    }
}

/// PE rows for positions `0..rows` of one spec, kept on the device between calls: PE rows
/// are a pure function of position, so the common case (positions below the context
/// length) never recomputes them.
#[derive(Clone)]
pub(super) struct PeCache {
    spec: PeSpec,
    pub(super) rows: u32,
    pub(super) buffer: DeviceBuffer,
}

/// An embedding table uploaded to the device once and reused by many encode calls. Tables
/// larger than one storage binding are held in several chunks of whole rows.
pub struct GpuTable {
    pub(super) vocab: usize,
    pub(super) dim: usize,
    pub(super) dtype: Dtype,
    pub(super) chunks: Vec<TableChunk>,
    /// Rows of every chunk but the last.
    pub(super) rows_per_chunk: u32,
    /// Identifies the accounting its chunks count against (the address of its `Memory`).
    accounted_by: usize,
    /// Identifies the device its chunks live on (see [`Context::device_key`]).
    pub(super) device_key: usize,
}

pub(super) struct TableChunk {
    pub(super) buffer: DeviceBuffer,
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
    /// rows, or it is larger than the context's memory budget or, on a CPU adapter
    /// (lavapipe, llvmpipe), than the host memory available (naming both sizes), all
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
                limit_name: "max storage binding size (bytes)",
                limit: self.max_binding,
            });
        }
        // The vec4 kernel's id records leave SLOT_SHIFT bits for a row in its chunk.
        let rows_per_chunk = rows_per_chunk.min(vocab.max(1) as u64).min(1 << SLOT_SHIFT) as usize;
        // Each chunk is whole words, at least one (a zero-sized binding is invalid).
        let chunk_bytes = |rows: usize| ((rows * dim * dtype.size()).div_ceil(4).max(1) * 4) as u64;
        let full = vocab / rows_per_chunk;
        let total = full as u64 * chunk_bytes(rows_per_chunk)
            + if vocab % rows_per_chunk > 0 { chunk_bytes(vocab % rows_per_chunk) } else { 0 };
        self.check_fits_budget("upload_table", "the embedding table", total)?;
        let mut chunks = Vec::new();
        self.scoped("upload_table", || {
            let mut lo = 0usize;
            let mut in_flight = None;
            while lo < vocab {
                let hi = (lo + rows_per_chunk).min(vocab);
                let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
                let buffer =
                    self.create_buffer("posenc.encode.table", chunk_bytes(hi - lo), usage)?;
                match table.rows_bytes(lo..hi) {
                    // The rows' own bytes (a standard-layout table): no copy but the queue's.
                    // A 16-bit chunk of an odd element count ends in a half word, written
                    // as a whole one with a zero upper half.
                    Some(bytes) => {
                        let whole = bytes.len() / 4 * 4;
                        if whole > 0 {
                            self.queue.write_buffer(&buffer, 0, &bytes[..whole]);
                        }
                        if whole < bytes.len() {
                            let mut last = [0u8; 4];
                            last[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
                            self.queue.write_buffer(&buffer, whole as u64, &last);
                        }
                    }
                    // Converted chunk by chunk, so a 1 GiB table never exists twice on the
                    // host.
                    None => {
                        let words = table.rows_to_words(lo..hi);
                        self.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&words));
                    }
                }
                let index = self.queue.submit([]);
                chunks.push(TableChunk { buffer });
                // wgpu frees a write's staging copy once its submission is done: waiting for
                // the chunk before this one holds at most two chunks of staging on the host,
                // not up to the whole table (round seventeen: lavapipe's process was killed
                // uploading 16 GiB), and keeps one chunk's copy beside the next one's write.
                if let Some(previous) = in_flight.replace(index)
                    && wait::CAN_BLOCK
                {
                    self.wait("upload_table", previous)?;
                }
                lo = hi;
            }
            Ok(())
        })?;
        Ok(GpuTable {
            vocab,
            dim,
            dtype,
            chunks,
            rows_per_chunk: rows_per_chunk as u32,
            accounted_by: self.memory_id(),
            device_key: self.device_key(),
        })
    }

    /// `out[b, t, :] = scale * E[ids[b, t], :] + PE(positions[b, t], :)` on the device, read
    /// back to the host. Bit-identical to [`crate::cpu::encode()`], with a scale or without:
    /// the kernels round the product before the add takes it, so no backend fuses the two.
    ///
    /// # Errors
    /// As [`crate::cpu::encode()`], all checked before any GPU work; [`Error::Limit`] if
    /// the memory budget cannot hold one token's scratch; [`Error::DeviceLost`],
    /// [`Error::OutOfMemory`], or [`Error::Gpu`] for any other error wgpu reports; on the
    /// web [`Error::Blocking`] (use [`Context::encode_async`]).
    pub fn encode<'a>(
        &self,
        pe: impl Into<PositionSource<'a>>,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
    ) -> Result<Encoded> {
        if !wait::CAN_BLOCK {
            // Named as called, not as the `encode_submit` it is made of.
            return Err(Error::Blocking { op: "encode", instead: "encode_async" });
        }
        self.encode_submit(pe, table, ids, positions, options)?.wait()
    }

    /// [`Context::encode`] without blocking the calling thread: the form a web page uses.
    /// The same bits.
    ///
    /// # Errors
    /// As [`Context::encode`], less [`Error::Blocking`].
    pub async fn encode_async<'a>(
        &self,
        pe: impl Into<PositionSource<'a>>,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
    ) -> Result<Encoded> {
        let request = self.check_request(pe.into(), table, ids, positions, options)?;
        let (host, _) = self.run_host(&request, false).await?;
        Ok(host.into_encoded(request.shape()))
    }

    /// The checks of an encode's request that read no id or position: the arrays' shapes
    /// against the spec or position table and the table, the output's, and both tables'
    /// device. What a result of that shape needs (its host memory, its buffer) is checked
    /// next, then [`Request::check_values`], a loop over every token: a request for more
    /// than the memory holds is refused at once, not after a pass over its tokens.
    fn check_request<'a>(
        &self,
        pe: PositionSource<'a>,
        table: &'a GpuTable,
        ids: ArrayView2<'a, u32>,
        positions: ArrayView2<'a, u32>,
        options: &'a EncodeOptions,
    ) -> Result<Request<'a>> {
        let pe_dim = match pe {
            PositionSource::Sinusoid(spec) => spec.dim() as usize,
            PositionSource::Learned(p) => p.dim().1,
        };
        let scale = encode::check_shapes(pe_dim, table.dim(), ids, positions, options)?;
        self.check_same_device(table.device_key, "table")?;
        if let PositionSource::Learned(p) = pe {
            self.check_same_device(p.device_key, "position_table")?;
        }
        Ok(Request { pe, table, ids, positions, options, scale })
    }

    /// Uploads a learned position table `P` `[max_positions, dim]` (BERT and GPT-2 style),
    /// widened to f32 exactly, for [`Context::encode`] and [`Context::encode_pass`] (given
    /// in the spec's place). It must fit one storage binding.
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
                limit_name: "max storage binding size (bytes)",
                limit: self.max_binding,
            });
        }
        self.check_fits_budget("upload_position_table", "the position table as f32", bytes)?;
        // Widened into a new array in standard layout, whatever the caller's strides (a
        // table in Fortran order or with its rows reversed).
        let mut values =
            crate::alloc::try_zeros::<f32, _>("the position table in f32", (rows, dim))?;
        position_table.widen_into(&mut values);
        let values = values.as_slice().expect("a new array is contiguous");
        let buffer = self.scoped("upload_position_table", || {
            let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
            let buffer = self.create_buffer("posenc.encode.position_table", bytes.max(4), usage)?;
            self.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(values));
            self.queue.submit([]);
            Ok(buffer)
        })?;
        Ok(GpuPositionTable {
            rows,
            dim,
            buffer,
            accounted_by: self.memory_id(),
            device_key: self.device_key(),
        })
    }

    /// A checked request's encode into host memory, every chunk read back as it completes,
    /// or with `deferred` the last chunk's readback left in flight (returned).
    async fn run_host(
        &self,
        request: &Request<'_>,
        deferred: bool,
    ) -> Result<(HostResult, Option<Readback>)> {
        let n = request.elements();
        let out_dtype = request.options.out_dtype;
        let mut host = if deferred {
            let bytes = (n as u64).saturating_mul(out_dtype.size() as u64);
            crate::alloc::check_allocation("an encode's host result", bytes)?;
            HostResult::deferred(out_dtype, n)
        } else {
            HostResult::zeros(out_dtype, n)?
        };
        request.check_values()?;
        let readback = if n == 0 {
            None
        } else {
            let sink = if deferred {
                Sink::HostDeferred(&mut host)
            } else {
                Sink::Host(host.bytes_mut()?)
            };
            self.run_encode(request, sink, None).await?
        };
        Ok((host, readback))
    }

    /// [`Context::encode`] without the wait: checks the request, uploads it, records and
    /// submits the work, starts reading the result back, and returns a handle to wait on
    /// ([`PendingEncode::wait`]). Meanwhile the caller can submit the next batch, or write
    /// out the previous one, so that upload, compute and readback of successive batches
    /// overlap. The result has the bits [`Context::encode`] gives (which is this call
    /// followed by the wait).
    ///
    /// Nothing blocks on the device when the request fits one chunk: one storage binding
    /// of output (and of token records), within the memory budget left. A larger request
    /// is read back chunk by chunk as [`Context::encode`] reads it, and only its last
    /// chunk is left in flight, so the call blocks until the others are home; batches of at
    /// most [`Context::max_binding_size`] bytes of output (of f32 rows, for a 16-bit output
    /// of an odd dim) always fit when there is no budget.
    ///
    /// Each pending encode holds its staging buffer, counted against the memory budget,
    /// until it is waited for or dropped; a budget therefore also bounds how many can be
    /// in flight (a submission that finds no room gets [`Error::Limit`]).
    ///
    /// ```no_run
    /// use ndarray::Array2;
    /// use posenc::encode::{Embeddings, EncodeOptions};
    ///
    /// let gpu = posenc::gpu::Options::from_env().and_then(|o| posenc::gpu::Context::new(&o))?;
    /// let spec = posenc::PeSpec::new(64)?;
    /// let table = gpu.upload_table(Embeddings::F32(Array2::zeros((100, 64)).view()))?;
    /// let ids = Array2::<u32>::from_elem((8, 128), 7);
    /// let positions = posenc::positions::contiguous_batch(8, 128)?;
    /// let options = EncodeOptions::default();
    /// // Two batches in flight at once, then their results in order.
    /// let first = gpu.encode_submit(&spec, &table, ids.view(), positions.view(), &options)?;
    /// let second = gpu.encode_submit(&spec, &table, ids.view(), positions.view(), &options)?;
    /// assert_eq!(first.wait()?.dim(), (8, 128, 64));
    /// assert_eq!(second.wait()?.dim(), (8, 128, 64));
    /// # Ok::<(), posenc::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Context::encode`]: every check of the request before any GPU work;
    /// [`Error::Limit`] if the memory budget cannot hold one token's scratch;
    /// [`Error::DeviceLost`], [`Error::OutOfMemory`], [`Error::Gpu`] for what wgpu reports
    /// while submitting. Faults met while the work runs come from [`PendingEncode::wait`].
    pub fn encode_submit<'a>(
        &self,
        pe: impl Into<PositionSource<'a>>,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
    ) -> Result<PendingEncode> {
        let request = self.check_request(pe.into(), table, ids, positions, options)?;
        let run = self.run_host(&request, true);
        let (host, readback) = wait::blocking("encode_submit", "encode_async", run)?;
        Ok(PendingEncode::new(self, "encode", host, request.shape(), readback))
    }

    /// Like [`Context::encode`], but the result stays on the device: a storage buffer of
    /// `batch * len * dim` elements of `options.out_dtype`, row-major (16-bit elements two
    /// to a word, low half first; the size is rounded up to whole words), ready to bind in
    /// a downstream pipeline. Usages: `STORAGE | COPY_SRC | COPY_DST`.
    ///
    /// The work is submitted, not waited for: WebGPU runs a queue's work in order, so a
    /// later [`Context::read_buffer`], or a pass the caller submits to [`Context::queue`],
    /// sees the finished result; [`Context::wait_idle`] waits for it.
    ///
    /// With a memory budget, the result counts against it while the call runs; once
    /// returned, it is the caller's and leaves posenc's accounting.
    ///
    /// # Errors
    /// As [`Context::encode`]; [`Error::Limit`] if the output exceeds the device's largest
    /// buffer or the memory budget, before anything is allocated; on the web
    /// [`Error::Blocking`] (use [`Context::encode_to_buffer_async`]).
    pub fn encode_to_buffer<'a>(
        &self,
        pe: impl Into<PositionSource<'a>>,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
    ) -> Result<wgpu::Buffer> {
        let run = self.encode_to_buffer_async(pe, table, ids, positions, options);
        wait::blocking("encode_to_buffer", "encode_to_buffer_async", run)
    }

    /// [`Context::encode_to_buffer`] without blocking the calling thread (it waits only for
    /// the device's answer to its error scopes, never for the work).
    ///
    /// # Errors
    /// As [`Context::encode_to_buffer`], less [`Error::Blocking`].
    pub async fn encode_to_buffer_async<'a>(
        &self,
        pe: impl Into<PositionSource<'a>>,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
    ) -> Result<wgpu::Buffer> {
        let request = self.check_request(pe.into(), table, ids, positions, options)?;
        let bytes = request.out_bytes();
        // The buffer's size, then the tokens, then the buffer: a refused request makes none.
        self.check_result_buffer("encode_to_buffer", bytes)?;
        request.check_values()?;
        let out = self.result_buffer("encode_to_buffer", "posenc.encode.result", bytes)?;
        if bytes > 0 {
            self.run_encode(&request, Sink::Device { buffer: &out, offset: 0 }, None).await?;
        }
        Ok(wgpu::Buffer::clone(&out))
    }

    /// Like [`Context::encode_to_buffer`], writing into a buffer the caller owns (and can
    /// reuse across calls). `out` must be a buffer of this context's device holding at
    /// least `batch * len * dim` elements of `options.out_dtype`, rounded up to whole
    /// words. With `STORAGE` usage, an output that fits one binding (and the memory
    /// budget's chunk) is written in place; otherwise posenc writes scratch buffers and
    /// copies them in, which needs `COPY_DST` usage. `STORAGE | COPY_DST` serves every
    /// size. As there, the work is submitted and not waited for; a decode loop can call
    /// this every step without a blocking round trip.
    ///
    /// # Errors
    /// As [`Context::encode`], all checked before any GPU work;
    /// [`Error::InvalidParameter`] (field `buffer usage`) if `out` would need the copy
    /// and lacks `COPY_DST`, or (field `table`) if `table` was uploaded on another device;
    /// [`Error::Shape`] if `out` is too small; on the web [`Error::Blocking`] (use
    /// [`Context::encode_into_buffer_async`], or record an [`EncodePass`](super::EncodePass)).
    pub fn encode_into_buffer<'a>(
        &self,
        pe: impl Into<PositionSource<'a>>,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        self.encode_into_buffer_timed(pe.into(), table, ids, positions, options, out, None)
    }

    /// [`Context::encode_into_buffer`] without blocking the calling thread (it waits only
    /// for the device's answer to its error scopes, never for the work).
    ///
    /// # Errors
    /// As [`Context::encode_into_buffer`], less [`Error::Blocking`].
    pub async fn encode_into_buffer_async<'a>(
        &self,
        pe: impl Into<PositionSource<'a>>,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        self.encode_into_buffer_core(pe.into(), table, ids, positions, options, out, None).await
    }

    /// [`Context::encode_into_buffer`], with `timer` bracketing every submission it makes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn encode_into_buffer_timed(
        &self,
        pe: PositionSource<'_>,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
        out: &wgpu::Buffer,
        timer: Option<&SpanTimer>,
    ) -> Result<()> {
        let run = self.encode_into_buffer_core(pe, table, ids, positions, options, out, timer);
        wait::blocking("encode_into_buffer", "encode_into_buffer_async", run)
    }

    #[allow(clippy::too_many_arguments)]
    async fn encode_into_buffer_core(
        &self,
        pe: PositionSource<'_>,
        table: &GpuTable,
        ids: ArrayView2<'_, u32>,
        positions: ArrayView2<'_, u32>,
        options: &EncodeOptions,
        out: &wgpu::Buffer,
        timer: Option<&SpanTimer>,
    ) -> Result<()> {
        let request = self.check_request(pe, table, ids, positions, options)?;
        let bytes = request.out_bytes();
        if out.size() < bytes {
            return Err(Error::Shape {
                op: "encode_into_buffer",
                what: "output buffer bytes",
                expected: format!("at least {bytes}"),
                actual: out.size().to_string(),
            });
        }
        request.check_values()?;
        if bytes > 0 {
            self.run_encode(&request, Sink::Device { buffer: out, offset: 0 }, timer).await?;
        }
        Ok(())
    }

    /// Refuses a table uploaded through another context (on another device, which wgpu
    /// cannot tell and would read some other buffer of this device, or panic; or on this
    /// device, opened into a second `Context`, whose accounting and caches are its own).
    pub(super) fn check_same_device(&self, key: usize, field: &'static str) -> Result<()> {
        if key == self.device_key() {
            return Ok(());
        }
        Err(Error::InvalidParameter {
            field,
            value: "uploaded through another context (of another device, or of this device \
                    opened again)"
                .into(),
            allowed: "a table uploaded through this context or one derived from it \
                      (with_max_binding_size, with_memory_budget, with_access_pattern)",
        })
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

    /// Drops the context's cached PE rows (the next encode computes them again): for cold
    /// timings, or to give the memory back. An [`EncodePass`](crate::gpu::EncodePass) keeps
    /// the rows it was prepared with until it is dropped, so their memory returns then.
    pub fn clear_pe_cache(&self) {
        if let Ok(mut slot) = self.pe_cache.lock() {
            *slot = None;
        }
    }

    /// The most PE rows of `spec` the cache holds: the context's cache budget
    /// ([`Options::pe_cache_budget`](crate::gpu::Options::pe_cache_budget)), one binding, a
    /// quarter of a memory budget.
    pub(super) fn pe_cache_cap(&self, spec: &PeSpec) -> u64 {
        let row_bytes = u64::from(spec.dim()) * 4;
        // Under a memory budget the cache takes at most a quarter of it.
        let budget_share = self.memory_budget().map_or(u64::MAX, |b| b / 4);
        self.max_binding.min(self.pe_cache_budget).min(budget_share) / row_bytes
    }

    /// The cached PE rows covering positions `0..needed`, built (or grown) if the budget
    /// allows; `None` sends the caller to per-call rows.
    pub(super) fn cached_pe_rows(
        &self,
        spec: &PeSpec,
        needed: u64,
        timer: Option<&SpanTimer>,
    ) -> Option<PeCache> {
        let cap_rows = self.pe_cache_cap(spec);
        if needed == 0 || needed > cap_rows {
            return None;
        }
        // Grow in powers of two so a decode loop rebuilds the cache O(log n) times. A
        // budget too tight for the cache sends the caller to per-call rows.
        let rows = needed.next_power_of_two().min(cap_rows) as u32;
        self.pe_rows(spec, needed, rows, timer).ok()
    }

    /// The cached PE rows of exactly positions `0..rows` (the cache's own, if it holds
    /// them), for a pass that reads no others: not rounded up as [`Context::cached_pe_rows`]
    /// grows, and what keeps them from being made is returned.
    ///
    /// # Errors
    /// [`Error::Limit`] for rows past the cache's room, or a memory budget's; what wgpu
    /// reports.
    pub(super) fn exact_pe_rows(
        &self,
        op: &'static str,
        spec: &PeSpec,
        rows: u32,
    ) -> Result<PeCache> {
        let row_bytes = u64::from(spec.dim()) * 4;
        let cap_rows = self.pe_cache_cap(spec);
        if u64::from(rows) > cap_rows {
            return Err(Error::Limit {
                op,
                what: "bytes of the PE rows of positions 0..max_positions",
                requested: u64::from(rows) * row_bytes,
                limit_name: "the PE cache's room (pe_cache_budget, one storage binding, a \
                             quarter of a memory budget)",
                limit: cap_rows * row_bytes,
            });
        }
        self.pe_rows(spec, u64::from(rows), rows, None)
    }

    /// The context's cache if it holds `spec`'s rows `0..needed`, else a new cache of
    /// `rows` rows in its place. The old rows go first, so old and new never count against
    /// a budget together.
    fn pe_rows(
        &self,
        spec: &PeSpec,
        needed: u64,
        rows: u32,
        timer: Option<&SpanTimer>,
    ) -> Result<PeCache> {
        let mut slot = self.pe_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(cache) = slot.as_ref()
            && cache.spec == *spec
            && u64::from(cache.rows) >= needed
        {
            return Ok(cache.clone());
        }
        *slot = None;
        let cache = self.fill_pe_cache(spec, rows, timer)?;
        *slot = Some(cache.clone());
        Ok(cache)
    }

    /// Computes PE rows `0..rows` of `spec` into a new cache buffer (submitted, not
    /// waited for).
    fn fill_pe_cache(
        &self,
        spec: &PeSpec,
        rows: u32,
        timer: Option<&SpanTimer>,
    ) -> Result<PeCache> {
        let positions: Vec<u32> = (0..rows).collect();
        let buffers =
            TableBuffers::new(self, rows as usize, spec.dim() as usize, &flat_steps(spec))?;
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("posenc.encode.pe_cache"),
        });
        if let Some(timer) = timer {
            timer.start(&mut encoder);
        }
        self.record_table(spec, &buffers, &positions, &mut encoder);
        self.queue.submit([encoder.finish()]);
        Ok(PeCache { spec: spec.clone(), rows, buffer: buffers.out().clone() })
    }

    async fn run_encode(
        &self,
        request: &Request<'_>,
        sink: Sink<'_>,
        timer: Option<&SpanTimer>,
    ) -> Result<Option<Readback>> {
        let &Request { pe, table, ids, positions, options, scale } = request;
        let dim = table.dim;
        // Tokens per sequence: chunks of whole sequences may skip the sort.
        let row_len = ids.ncols().max(1);
        // Borrowed when the arrays are in standard order (a copy costs 10 - 20 us of the
        // host's time at 8192 tokens).
        let (ids, positions) = (row_major(&ids, "ids")?, row_major(&positions, "positions")?);
        let n_tokens = ids.len();
        let out_dtype = options.out_dtype;
        let out_size = out_dtype.size();
        let x4 = dim.is_multiple_of(4);
        // 16-bit output of an odd dim packs rows across word boundaries: the general kernel
        // writes f32 rows, which the narrow pass rounds, and token chunks hold an even number
        // of tokens, so every chunk but the last is whole words.
        let odd16 = out_size == 2 && dim % 2 == 1;
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension;
        let max_position = positions.iter().copied().max().map_or(0, |p| u64::from(p) + 1);
        let _exclusive = self.memory.exclusive();
        self.scoped_async("encode", async || {
            // PE rows: a learned table as it is; a sinusoid from the cache of rows 0..n, or
            // else computed per chunk for the chunk's distinct positions.
            let (spec, learned) = match pe {
                PositionSource::Sinusoid(spec) => (Some(spec), None),
                PositionSource::Learned(t) => (None, Some(t)),
            };
            let cache = spec.and_then(|spec| self.cached_pe_rows(spec, max_position, timer));
            // What the table kernel reads, when PE rows are computed per chunk.
            let steps = spec.filter(|_| cache.is_none()).map(|spec| (spec, flat_steps(spec)));
            let plan = ChunkPlan {
                dim: dim as u64,
                out_size: out_size as u64,
                host: matches!(sink, Sink::Host(_) | Sink::HostDeferred(_)),
                per_call_pe: steps.is_some(),
                steps_bytes: steps.as_ref().map_or(0, |(_, w)| w.len() as u64 * 4),
                x4,
                odd16,
            };
            let budget_left = self.budget_left().map(|left| {
                let learned_bytes = learned.map_or(0, |t| self.unaccounted_position_bytes(t));
                left.saturating_sub(self.unaccounted_bytes(table)).saturating_sub(learned_bytes)
            });
            let per_chunk = plan.tokens(self.max_binding, max_groups, budget_left, n_tokens)?;
            let per_call_pe = match &steps {
                Some((spec, words)) => {
                    Some((*spec, TableBuffers::new(self, per_chunk, dim, words)?))
                }
                None => None,
            };
            let pe_buffer = match (learned, &cache, &per_call_pe) {
                (Some(t), _, _) => &t.buffer,
                (None, Some(c), _) => &c.buffer,
                (None, None, Some((_, p))) => p.out(),
                (None, None, None) => unreachable!("one of the three exists"),
            };
            use wgpu::BufferUsages as U;
            let tokens_buf = self.pooled(
                "posenc.encode.tokens",
                plan.token_bytes(per_chunk as u64),
                U::STORAGE | U::COPY_DST,
            )?;
            let call = EncodeCall::new(self, table, options, scale, per_chunk);
            let total = (n_tokens * dim * out_size) as u64;
            let chunk_bytes = (per_chunk * dim * out_size) as u64;
            let mut output = Output::new(self, &ENCODE, sink, total, chunk_bytes, timer)?;
            let windows = self.encode_windows(&call, per_chunk, &tokens_buf, pe_buffer, &output)?;
            for start in (0..n_tokens).step_by(per_chunk) {
                let end = (start + per_chunk).min(n_tokens);
                let n = end - start;
                let mut encoder = output.encoder();
                let slots_of_tokens = match &per_call_pe {
                    None => std::borrow::Cow::Borrowed(&positions[start..end]),
                    Some((spec, pe)) => {
                        let chunk_pos = ArrayView2::from_shape((1, n), &positions[start..end])
                            .expect("one row");
                        let (unique, slots) = encode::unique_positions(chunk_pos)?;
                        self.record_table(spec, pe, &unique, &mut encoder);
                        slots.into()
                    }
                };
                let whole_rows = start.is_multiple_of(row_len) && n.is_multiple_of(row_len);
                let row_len = if whole_rows { row_len } else { 0 };
                let records = call.records(self, &ids[start..end], &slots_of_tokens, row_len);
                self.queue.write_buffer(&tokens_buf, 0, bytemuck::cast_slice(&records.words));
                let (params, busy) = call.window_params(&windows, &records, n);
                self.queue.write_buffer(&windows.params, 0, &params);
                {
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some("posenc.encode.pass"),
                        timestamp_writes: None,
                    });
                    pass.set_pipeline(&windows.kernel.pipeline);
                    for &(w, gx, gy, gz) in &busy {
                        pass.set_bind_group(0, &windows.groups[w], &[]);
                        pass.dispatch_workgroups(gx, gy, gz);
                    }
                }
                if let Some(narrow) = &windows.narrow {
                    self.record_narrow(narrow, (n * dim) as u32, call.out_dtype, &mut encoder);
                }
                output.deliver(encoder, (n * dim * out_size) as u64).await?;
            }
            Ok(output.into_readback())
        })
        .await
    }
}

/// An encode's request, its shapes checked ([`Context::check_request`]; its tokens by
/// [`Request::check_values`], once its result is known to fit), and its scale.
#[derive(Clone, Copy)]
struct Request<'a> {
    pe: PositionSource<'a>,
    table: &'a GpuTable,
    ids: ArrayView2<'a, u32>,
    positions: ArrayView2<'a, u32>,
    options: &'a EncodeOptions,
    scale: Option<f32>,
}

impl Request<'_> {
    /// The checks that read every token, after the result's own: each id within the
    /// vocabulary (or the pad id), and with a learned table each position within its rows.
    fn check_values(&self) -> Result<()> {
        encode::check_ids(self.ids, self.table.dim().0, self.options.pad_id)?;
        if let PositionSource::Learned(p) = self.pe {
            encode::check_positions(self.positions, p.dim().0)?;
        }
        Ok(())
    }

    /// The result's shape, `(batch, len, dim)`.
    fn shape(&self) -> (usize, usize, usize) {
        (self.ids.nrows(), self.ids.ncols(), self.table.dim)
    }

    /// The result's element count.
    fn elements(&self) -> usize {
        self.ids.len() * self.table.dim
    }

    /// The result's bytes in the output type, rounded up to whole words.
    fn out_bytes(&self) -> u64 {
        (self.elements() * self.options.out_dtype.size()).next_multiple_of(4) as u64
    }
}

/// A window with work in a token chunk: `(window, workgroups along x, y, z)`.
type Busy = (usize, u32, u32, u32);

/// What one host-array encode call is, for the pieces of its dispatches.
struct EncodeCall<'a> {
    table: &'a GpuTable,
    dim: usize,
    out_dtype: Dtype,
    /// `encode_x4` (dims a multiple of 4), else the general kernel.
    x4: bool,
    /// 16-bit output of an odd dim: f32 rows, then the narrow pass.
    odd16: bool,
    scale: Option<f32>,
    pad_id: Option<u32>,
    /// Table chunks one dispatch binds.
    slots: usize,
    /// Dispatches per token chunk at most: one per window of `slots` table chunks.
    windows: usize,
    max_groups: u32,
    units: u32,
}

/// The dispatch windows of a call: its kernel, one bind group per window, their
/// parameters' buffer (one block per window, `stride` apart), and the narrow pass.
struct Windows {
    kernel: Arc<Kernel>,
    groups: Vec<wgpu::BindGroup>,
    params: PooledBuffer,
    stride: u64,
    params_size: usize,
    narrow: Option<Narrow>,
}

/// The narrow pass of 16-bit output of an odd dim: its parameters and bind group, and the
/// f32 rows it reads (held for the whole call: back in the pool, another call could take
/// them while this one's commands still use them).
struct Narrow {
    params: PooledBuffer,
    group: wgpu::BindGroup,
    _wide: PooledBuffer,
}

impl<'a> EncodeCall<'a> {
    fn new(
        ctx: &Context,
        table: &'a GpuTable,
        options: &EncodeOptions,
        scale: Option<f32>,
        per_chunk: usize,
    ) -> Self {
        let dim = table.dim;
        let x4 = dim.is_multiple_of(4);
        // Dispatch windows: the table chunks one dispatch binds. A GPU picks a token's
        // chunk by a branch uniform across the workgroup, at no cost; an adapter that runs
        // shaders on CPU cores executes every branch under a lane mask, so each table read
        // costs once per slot, and there only calls small enough for dispatch overheads to
        // dominate (decode steps) bind several chunks.
        let n_chunks = table.chunks.len();
        let multi = ctx.coalesced || per_chunk <= MULTI_SLOT_TOKENS;
        let slots = if x4 && multi { n_chunks.min(ctx.max_table_slots() as usize) } else { 1 };
        Self {
            table,
            dim,
            out_dtype: options.out_dtype,
            x4,
            odd16: options.out_dtype.size() == 2 && dim % 2 == 1,
            scale,
            pad_id: options.pad_id,
            slots,
            windows: n_chunks.div_ceil(slots),
            max_groups: ctx.device.limits().max_compute_workgroups_per_dimension,
            units: ctx.x4_units(),
        }
    }

    /// The records of a chunk of tokens with PE slots `slots_of_tokens`.
    /// `row_len`: tokens per sequence when the chunk is whole sequences, else 0.
    fn records(
        &self,
        ctx: &Context,
        ids: &[u32],
        slots_of_tokens: &[u32],
        row_len: usize,
    ) -> Records {
        if self.x4 {
            let cap = if ctx.coalesced {
                group_cap(ids.len(), self.dim, self.units)
            } else {
                MAX_GROUP_TOKENS
            };
            let grouping = Grouping {
                rows_per_chunk: self.table.rows_per_chunk,
                table_slots: self.slots as u32,
                windows: self.windows,
                cap,
                pad_id: self.pad_id,
            };
            group_records(ids, slots_of_tokens, &grouping, row_len)
        } else {
            let n_chunks = self.table.chunks.len();
            token_records(ids, slots_of_tokens, self.table.rows_per_chunk, n_chunks, self.pad_id)
        }
    }

    /// Each window's parameters for a chunk of `n` tokens, as the bytes of the parameters'
    /// buffer, and the windows that have work: `(window, workgroups x, y, z)`.
    fn window_params(
        &self,
        windows: &Windows,
        records: &Records,
        n: usize,
    ) -> (Vec<u8>, Vec<Busy>) {
        let (dim, stride, size) = (self.dim, windows.stride, windows.params_size);
        let scale_bits = self.scale.unwrap_or(1.0).to_bits();
        let mut params = vec![0u8; (stride * self.windows as u64) as usize];
        let mut busy = Vec::with_capacity(self.windows);
        for w in 0..self.windows {
            let (lo, hi) = (records.starts[w], records.starts[w + 1]);
            if hi == lo {
                continue;
            }
            let items = hi - lo;
            let gy = items.min(self.max_groups);
            let gz = items.div_ceil(gy);
            let at = (w as u64 * stride) as usize;
            if self.x4 {
                let p = EncodeX4Params {
                    n_groups: items,
                    group_base: lo,
                    row_units: dim as u32 / 4,
                    scale_bits,
                    groups_y: gy,
                    groups_at: n as u32,
                    keep: 0,
                    zero: 0,
                };
                params[at..at + size].copy_from_slice(bytemuck::bytes_of(&p));
                let row_units = dim as u32 / 4;
                let gx = row_units.div_ceil(self.units * x4_workgroup(row_units, self.units));
                busy.push((w, gx, gy, gz));
            } else {
                let out_size = self.out_dtype.size();
                let row_words = if out_size == 4 || self.odd16 { dim } else { dim / 2 } as u32;
                let p = EncodeParams {
                    n_tokens: items,
                    token_base: lo,
                    row_words,
                    dim: dim as u32,
                    scale_bits,
                    flags: if self.scale.is_some() { FLAG_SCALE } else { 0 },
                    in_dtype: self.table.dtype.code(),
                    out_dtype: if self.odd16 { Dtype::F32 } else { self.out_dtype }.code(),
                    groups_y: gy,
                    zero: 0,
                    _pad: [0; 2],
                };
                params[at..at + size].copy_from_slice(bytemuck::bytes_of(&p));
                busy.push((w, row_words.div_ceil(WORKGROUP_SIZE), gy, gz));
            }
        }
        (params, busy)
    }
}

impl Context {
    /// The kernel, parameters' buffer and bind groups of `call`'s dispatch windows over
    /// chunks of `per_chunk` tokens, and its narrow pass.
    fn encode_windows(
        &self,
        call: &EncodeCall<'_>,
        per_chunk: usize,
        tokens: &wgpu::Buffer,
        pe: &wgpu::Buffer,
        output: &Output<'_>,
    ) -> Result<Windows> {
        use wgpu::BufferUsages as U;
        let (dim, slots, table) = (call.dim, call.slots, call.table);
        let align = u64::from(self.device.limits().min_uniform_buffer_offset_alignment);
        let params_size =
            if call.x4 { size_of::<EncodeX4Params>() } else { size_of::<EncodeParams>() };
        let stride = (params_size as u64).next_multiple_of(align);
        let params = self.pooled(
            "posenc.encode.params",
            stride * call.windows as u64,
            U::UNIFORM | U::COPY_DST,
        )?;
        // The general kernel's f32 rows before the narrow pass.
        let wide = if call.odd16 {
            let bytes = (per_chunk * dim * 4) as u64;
            Some(self.pooled("posenc.encode.wide", bytes, U::STORAGE | U::COPY_SRC)?)
        } else {
            None
        };
        let kernel = if call.x4 {
            self.x4_kernel(EncodeX4 {
                table: table.dtype,
                out: call.out_dtype,
                slots: slots as u32,
                coalesced: self.coalesced,
                f16_unpack: takes_unpack(table.dtype, self.coalesced, self.f16_unpack),
                workgroup: x4_workgroup(dim as u32 / 4, call.units),
                units: call.units,
            })
        } else {
            Arc::clone(&self.encode.general)
        };
        let entry = |binding: u32, resource| wgpu::BindGroupEntry { binding, resource };
        let groups: Vec<wgpu::BindGroup> = (0..call.windows)
            .map(|w| {
                let params = wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &params,
                    offset: w as u64 * stride,
                    size: wgpu::BufferSize::new(params_size as u64),
                });
                let mut entries = vec![
                    entry(0, params),
                    entry(1, tokens.as_entire_binding()),
                    entry(2, pe.as_entire_binding()),
                ];
                let out = match &wide {
                    Some(wide) => wide.as_entire_binding(),
                    None => output.binding(),
                };
                if call.x4 {
                    entries.push(entry(3, out));
                    // Slots past the last chunk bind the window's first chunk again.
                    entries.extend((0..slots).map(|k| {
                        let chunk =
                            table.chunks.get(w * slots + k).unwrap_or(&table.chunks[w * slots]);
                        entry(4 + k as u32, chunk.buffer.as_entire_binding())
                    }));
                } else {
                    entries.push(entry(3, table.chunks[w].buffer.as_entire_binding()));
                    entries.push(entry(4, out));
                }
                self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("posenc.encode.bind_group"),
                    layout: &kernel.layout,
                    entries: &entries,
                })
            })
            .collect();
        let narrow = match wide {
            Some(wide) => {
                let bytes = size_of::<NarrowParams>() as u64;
                let params =
                    self.pooled("posenc.narrow.params", bytes, U::UNIFORM | U::COPY_DST)?;
                let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("posenc.narrow.bind_group"),
                    layout: &self.encode.narrow.layout,
                    entries: &[
                        wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 1, resource: wide.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 2, resource: output.binding() },
                    ],
                });
                Some(Narrow { params, group, _wide: wide })
            }
            None => None,
        };
        Ok(Windows { kernel, groups, params, stride, params_size, narrow })
    }

    /// Records the narrow pass of `n_elems` f32 values into `out_dtype`.
    fn record_narrow(
        &self,
        narrow: &Narrow,
        n_elems: u32,
        out_dtype: Dtype,
        encoder: &mut wgpu::CommandEncoder,
    ) {
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension;
        let (gx, gy) = fold_dispatch(n_elems.div_ceil(2).div_ceil(WORKGROUP_SIZE), max_groups);
        let p = NarrowParams { n_elems, out_dtype: out_dtype.code(), groups_x: gx, _pad: 0 };
        self.queue.write_buffer(&narrow.params, 0, bytemuck::bytes_of(&p));
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("posenc.narrow.pass"),
            timestamp_writes: None,
        });
        pass.set_pipeline(&self.encode.narrow.pipeline);
        pass.set_bind_group(0, &narrow.group, &[]);
        pass.dispatch_workgroups(gx, gy, 1);
    }
}

/// How an encode is cut into token chunks: each chunk's buffers fit one binding, the grid
/// covers it, and with a memory budget what is left of it, less the fixed buffers, holds
/// each token's share of the scratch buffers.
struct ChunkPlan {
    dim: u64,
    out_size: u64,
    /// The output is read back, which needs a staging buffer as large as the chunk.
    host: bool,
    /// PE rows are computed per chunk rather than gathered from the cache.
    per_call_pe: bool,
    /// Bytes of the table kernel's phase steps (used with `per_call_pe`).
    steps_bytes: u64,
    /// The records are `encode_x4`'s (see [`ChunkPlan::token_bytes`]).
    x4: bool,
    /// 16-bit output of an odd dim: f32 rows first, then the narrow pass.
    odd16: bool,
}

impl ChunkPlan {
    /// Bytes of the token records for `tokens` tokens: the general kernel's `(id, slot,
    /// row)`, or `encode_x4`'s `(id, row)` per token plus at most one group record per
    /// token and the closing record.
    fn token_bytes(&self, tokens: u64) -> u64 {
        if self.x4 { 16 * tokens + 8 } else { 12 * tokens }
    }

    /// Tokens per chunk, at most `n_tokens`.
    fn tokens(
        &self,
        max_binding: u64,
        max_groups: u32,
        budget_left: Option<u64>,
        n_tokens: usize,
    ) -> Result<usize> {
        let out_row = self.dim * self.out_size;
        // Each chunk's output, f32 rows (PE rows per call, the narrow pass's input) and
        // token records fit one binding, and its grid's y and z dimensions cover it; the
        // error names whichever of them leaves no room for one token.
        // Each need: (tokens that fit, what, bytes fixed, bytes per token).
        let record = self.token_bytes(1) - self.token_bytes(0);
        let records_fit = max_binding.saturating_sub(self.token_bytes(0)) / record;
        let mut needs = vec![
            (max_binding / out_row.max(1), "one row of output", 0, out_row),
            (records_fit, "one token's records", self.token_bytes(0), record),
        ];
        if self.per_call_pe || self.odd16 {
            let what = if self.per_call_pe { "one row of PE" } else { "one f32 row" };
            needs.push((max_binding / (self.dim * 4).max(1), what, 0, self.dim * 4));
        }
        let (fit, mut what, mut fixed_bytes, mut token_bytes) =
            needs.into_iter().min_by_key(|&(fit, ..)| fit).expect("three needs at most");
        let mut fit = fit.min(u64::from(max_groups).pow(2));
        let mut limit_name = "max storage binding size (bytes)";
        let mut limit = max_binding;
        if let Some(left) = budget_left {
            let mut per_token = self.token_bytes(1) - self.token_bytes(0) + out_row;
            // Params (one per window, at most a few KiB), the closing record, and output
            // and staging rounded up to whole words.
            let mut fixed = 4096 + 8 + self.token_bytes(0);
            if self.host {
                per_token += out_row;
            }
            if self.per_call_pe {
                // A PE row and its position; the table kernel's params and phase steps.
                per_token += self.dim * 4 + 4;
                fixed += size_of::<super::TableParams>() as u64 + self.steps_bytes;
            }
            if self.odd16 {
                per_token += self.dim * 4;
                fixed += size_of::<NarrowParams>() as u64;
            }
            let budget_fit = left.saturating_sub(fixed) / per_token;
            if budget_fit < fit {
                fit = budget_fit;
                what = "one token's scratch";
                (fixed_bytes, token_bytes) = (fixed, per_token);
                limit_name = "GPU memory budget left after tables and cached PE rows (bytes)";
                limit = left;
            }
        }
        let mut fit = usize::try_from(fit).unwrap_or(usize::MAX).min(n_tokens);
        let mut requested = fixed_bytes + token_bytes;
        if self.odd16 && fit < n_tokens {
            fit &= !1;
            if fit == 0 {
                what = "two tokens' buffers (16-bit output of an odd dim is chunked in pairs)";
                requested = fixed_bytes + 2 * token_bytes;
            }
        }
        if fit == 0 {
            return Err(Error::Limit { op: "encode", what, requested, limit_name, limit });
        }
        Ok(fit)
    }
}

/// Where an encode's position rows come from: a sinusoid (computed exactly, or read from
/// the context's cache of its rows), or a learned table uploaded with
/// [`Context::upload_position_table`] (BERT and GPT-2 style). The encode calls take
/// either, as `&spec` or `&position_table`.
#[derive(Clone, Copy, Debug)]
pub enum PositionSource<'a> {
    /// `PE(p, :)` of a sinusoid spec.
    Sinusoid(&'a PeSpec),
    /// Row `p` of a learned position table; a position without a row is refused
    /// ([`Error::Position`]) or, in a recorded pass, a fault.
    Learned(&'a GpuPositionTable),
}

impl<'a> From<&'a PeSpec> for PositionSource<'a> {
    fn from(spec: &'a PeSpec) -> Self {
        PositionSource::Sinusoid(spec)
    }
}

impl<'a> From<&'a GpuPositionTable> for PositionSource<'a> {
    fn from(table: &'a GpuPositionTable) -> Self {
        PositionSource::Learned(table)
    }
}

/// A learned position table on the device, as f32 rows: see
/// [`Context::upload_position_table`].
pub struct GpuPositionTable {
    rows: usize,
    dim: usize,
    pub(super) buffer: DeviceBuffer,
    /// Identifies the accounting its buffer counts against (as for [`GpuTable`]).
    accounted_by: usize,
    /// Identifies the device its buffer lives on (as for [`GpuTable`]).
    pub(super) device_key: usize,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_plans_fit_the_budget_left() {
        let plan = ChunkPlan {
            dim: 64,
            out_size: 4,
            host: true,
            per_call_pe: false,
            steps_bytes: 256,
            x4: false,
            odd16: false,
        };
        let fixed = 4096 + 8;
        let tokens = |plan: &ChunkPlan, binding, left| plan.tokens(binding, 65535, left, 1000);
        // 12 + 256 + 256 bytes per token after the fixed bytes.
        assert_eq!(tokens(&plan, 1 << 20, Some(fixed + 10_000)).unwrap(), 10_000 / 524);
        let cold = ChunkPlan { per_call_pe: true, ..plan };
        assert_eq!(
            tokens(&cold, 1 << 20, Some(fixed + 10_000)).unwrap(),
            (10_000 - 48 - 256) / (524 + 260)
        );
        assert!(matches!(
            tokens(&plan, 1 << 20, Some(fixed + 500)),
            Err(Error::Limit { requested: 4628, limit: 4604, .. })
        ));
        // Without a budget: what one binding holds, at most every token.
        assert_eq!(tokens(&plan, 1024, None).unwrap(), 4);
        assert_eq!(tokens(&plan, 1 << 30, None).unwrap(), 1000);
        // 16-bit rows of an odd dim: pairs of tokens, and f32 rows for the narrow pass.
        let odd = ChunkPlan { dim: 63, out_size: 2, odd16: true, ..plan };
        assert_eq!(tokens(&odd, 3 * 63 * 4, None).unwrap(), 2);
        assert!(matches!(tokens(&odd, 63 * 4, None), Err(Error::Limit { .. })));
    }

    #[test]
    fn groups_hold_tokens_sharing_a_slot_in_token_order() {
        let ids = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21];
        // Slot 7 is shared by ten tokens: a full group of MAX_GROUP_TOKENS, then the rest.
        let slots = [7, 2, 7, 7, 7, 7, 7, 2, 7, 7, 7, 7];
        let records = group_records(&ids, &slots, &grouping(100, 1, 1, MAX_GROUP_TOKENS, None), 0);
        assert_eq!(MAX_GROUP_TOKENS, 8);
        let n = ids.len();
        let tokens: Vec<u32> = [1u32, 7, 0, 2, 3, 4, 5, 6, 8, 9, 10, 11]
            .iter()
            .flat_map(|&g| [ids[g as usize], g])
            .collect();
        assert_eq!(records.words[..2 * n], tokens[..]);
        assert_eq!(records.words[2 * n..], [0, 2, 2, 7, 10, 7, 12, 0]);
        assert_eq!(records.starts, [0, 3]);
        let empty = group_records(&[], &[], &grouping(1, 1, 1, MAX_GROUP_TOKENS, None), 0);
        assert_eq!(empty, Records { words: vec![0, 0], starts: vec![0, 0] });
    }

    fn grouping(
        rows_per_chunk: u32,
        table_slots: u32,
        windows: usize,
        cap: usize,
        pad_id: Option<u32>,
    ) -> Grouping {
        Grouping { rows_per_chunk, table_slots, windows, cap, pad_id }
    }

    /// The groups `words` describes, each as (PE slot, its tokens' (id record, output row)),
    /// after `n` token records.
    fn groups_of(words: &[u32], n: usize) -> Vec<(u32, Vec<[u32; 2]>)> {
        let token = |j: usize| [words[2 * j], words[2 * j + 1]];
        let heads: Vec<[u32; 2]> = words[2 * n..].chunks_exact(2).map(|w| [w[0], w[1]]).collect();
        heads
            .windows(2)
            .map(|h| (h[0][1], (h[0][0] as usize..h[1][0] as usize).map(token).collect()))
            .collect()
    }

    #[test]
    fn column_records_group_whole_sequences_of_the_same_positions_without_a_sort() {
        // 5 sequences of 4 tokens at positions 7, 3, 3, 9; chunks of 10 rows; 99 is the
        // pad id. Two slots per window (one window for ids below 20), or one (two windows).
        let ids = [1, 12, 99, 5, 19, 0, 3, 4, 8, 11, 99, 2, 6, 6, 6, 6, 13, 14, 15, 16];
        let slots: Vec<u32> = (0..5).flat_map(|_| [7, 3, 3, 9]).collect();
        for (table_slots, windows) in [(2, 1), (1, 2)] {
            // (window, id record) of each id.
            let place = |id: u32| match id {
                99 => (0, PAD),
                10.. if table_slots == 2 => (0, (id - 10) | (1 << SLOT_SHIFT)),
                10.. => (1, id - 10),
                _ => (0, id),
            };
            for cap in [1, 2, 5, MAX_GROUP_TOKENS] {
                let g = grouping(10, table_slots, windows, cap, Some(99));
                let r = group_records(&ids, &slots, &g, 4);
                let groups = groups_of(&r.words, ids.len());
                assert_eq!(r.starts.len(), windows + 1);
                assert_eq!(r.starts[windows] as usize, groups.len());
                // Every token once, in a group of its own window and PE slot, with its own
                // id record; at most cap tokens a group.
                let mut seen = vec![false; ids.len()];
                for (w, pair) in r.starts.windows(2).enumerate() {
                    for (s, tokens) in &groups[pair[0] as usize..pair[1] as usize] {
                        assert!(tokens.len() <= cap);
                        for &[rec, g] in tokens {
                            assert_eq!(slots[g as usize], *s);
                            assert_eq!((w, rec), place(ids[g as usize]));
                            assert!(!std::mem::replace(&mut seen[g as usize], true));
                        }
                    }
                }
                assert!(seen.iter().all(|&s| s), "{windows} windows, cap {cap}");
                // Columns: four groups per window's columns when one group holds them.
                if cap == MAX_GROUP_TOKENS && windows == 1 {
                    assert_eq!(groups.len(), 4);
                }
            }
        }
        // Sequences of different positions, or a chunk that is not whole sequences, take
        // the sort: groups by PE slot, in slot order.
        let mut other = slots.clone();
        other[17] = 4;
        for (slots, row_len) in [(&other, 4), (&slots, 0)] {
            let g = grouping(10, 2, 1, MAX_GROUP_TOKENS, Some(99));
            let r = group_records(&ids, slots, &g, row_len);
            let firsts: Vec<u32> = groups_of(&r.words, ids.len()).iter().map(|g| g.0).collect();
            let mut sorted = firsts.clone();
            sorted.sort_unstable();
            assert_eq!(firsts, sorted, "row_len {row_len}");
        }
    }

    #[test]
    fn records_name_each_tokens_chunk_slot_and_split_groups_by_window() {
        // Chunks of 10 rows, 2 slots per window: ids 5 and 15 share window 0 (slots 0 and
        // 1), 25 is in window 1 (slot 0), 35 in window 1 (slot 1); 99 is the pad id.
        let ids = [25, 5, 99, 15, 35, 5];
        let slots = [3, 3, 3, 3, 3, 1];
        let r = group_records(&ids, &slots, &grouping(10, 2, 3, MAX_GROUP_TOKENS, Some(99)), 0);
        let slot = |s: u32| s << SLOT_SHIFT;
        // Window 0 sorted by PE slot: token 5 (slot 1), then 1, 2 (pad), 3 (slot 3);
        // window 1: tokens 0 and 4.
        let expected: Vec<u32> =
            [[5, 5], [5, 1], [PAD, 2], [5 | slot(1), 3], [5, 0], [5 | slot(1), 4]].concat();
        assert_eq!(r.words[..12], expected[..]);
        // Groups: (0, slot 1), (1, slot 3) in window 0; (4, slot 3) in window 1; closing.
        assert_eq!(r.words[12..], [0, 1, 1, 3, 4, 3, 6, 0]);
        assert_eq!(r.starts, [0, 2, 3, 3]);
        // The general kernel: one window per chunk, rows without slot bits.
        let t = token_records(&ids, &slots, 10, 4, Some(99));
        assert_eq!(t.words, [5, 1, 5, 5, 3, 1, PAD, 3, 2, 5, 3, 3, 5, 3, 0, 5, 3, 4]);
        assert_eq!(t.starts, [0, 3, 4, 5, 6]);
    }

    #[test]
    fn the_order_is_stable_by_key_whichever_sort_runs() {
        let mut rng = 7u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        // Narrow keys take the counting sort, wide ones the packed sort; both must agree
        // with a stable comparison sort.
        for (n, windows, slots) in
            [(0, 1, 1), (1, 1, 1), (500, 3, 40), (4096, 1, 128), (300, 2, 1 << 30)]
        {
            let keys: Vec<u64> =
                (0..n).map(|_| ((next() % windows) << 32) | (next() % slots)).collect();
            let mut want: Vec<u32> = (0..n as u32).collect();
            want.sort_by_key(|&g| keys[g as usize]);
            assert_eq!(stable_order(&keys), want, "{n} keys, {windows} x {slots}");
        }
    }

    #[test]
    fn small_dispatches_get_smaller_groups() {
        // A decode step of 8 tokens at D = 4096 (4 blocks of 1024 columns): one token each.
        assert_eq!(group_cap(8, 4096, 2), 1);
        assert_eq!(group_cap(1, 4096, 2), 1);
        assert_eq!(group_cap(32, 4096, 2), 1);
        // 1024 tokens x 4 blocks = twice the workgroups wanted: groups of two.
        assert_eq!(group_cap(1024, 4096, 2), 2);
        // The default bench shape, 8192 tokens of one block each: groups of four.
        assert_eq!(group_cap(8192, 1024, 2), 4);
        // A long prefill: full groups.
        assert_eq!(group_cap(65536, 1024, 2), MAX_GROUP_TOKENS);
    }
}
