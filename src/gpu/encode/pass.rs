//! [`EncodePass`]: the fused gather + PE recorded into the caller's command encoder, with
//! token ids and positions read from device buffers (`shaders/encode_pass.wgsl`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytemuck::{Pod, Zeroable};

use crate::encode::{Dtype, EncodeOptions};
use crate::error::{Error, Result};
use crate::gpu::encode::{GpuTable, Kernel, PeCache, PositionSource};
use crate::gpu::memory::DeviceBuffer;
use crate::gpu::pass::{BindCache, Need, PartShape, Positions, Span, uniform_blocks};
use crate::gpu::table::flat_steps;
use crate::gpu::{Context, fold_dispatch};
use crate::shaders::{
    EncodePassX4, FLAG_F32, FLAG_FIRST_WINDOW, FLAG_LEARNED, FLAG_OFFSETS, FLAG_PAD_ID,
    FLAG_PADDING, FLAG_SCALE, FLAG_ZERO_COL, MAX_TABLE_SLOTS, WORKGROUP_SIZE,
    recorded_encode_units, takes_unpack,
};
use crate::spec::Frequencies;

/// The op every record of this pass names in its errors.
const RECORD_OP: &str = "encode_pass.record";

/// Mirror of `Params` in `shaders/encode_pass.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct EncodePassParams {
    /// Output words of the batch.
    pub n_words: u32,
    /// Model dimension.
    pub dim: u32,
    /// Rows of the embedding table.
    pub vocab: u32,
    /// Rows of every table chunk but the last.
    pub rows_per_chunk: u32,
    /// The dispatch's first table chunk.
    pub first_chunk: u32,
    /// Table chunks the dispatch binds.
    pub n_slots: u32,
    /// The first id's index in the bound ids.
    pub ids_base: u32,
    /// The first position's index in the bound positions.
    pub pos_base: u32,
    /// The first output word's index in the bound output.
    pub out_base: u32,
    /// Tokens per sequence (for [`FLAG_OFFSETS`]).
    pub seq_len: u32,
    /// Positions below this read the cached PE rows.
    pub cached_rows: u32,
    /// The pad id (with [`FLAG_PAD_ID`]).
    pub pad_id: u32,
    /// f32 bits of the scale (with [`FLAG_SCALE`]).
    pub scale_bits: u32,
    /// [`FLAG_SCALE`], [`FLAG_PAD_ID`], [`FLAG_OFFSETS`], [`FLAG_FIRST_WINDOW`].
    pub flags: u32,
    /// Table storage type code.
    pub in_dtype: u32,
    /// Output storage type code.
    pub out_dtype: u32,
    /// Workgroups along x of a dispatch folded into 2-D.
    pub groups_x: u32,
    /// [`FLAG_F32`], [`FLAG_PADDING`], [`FLAG_ZERO_COL`] of the spec.
    pub spec_flags: u32,
    /// Frequencies per row.
    pub n_freqs: u32,
    /// Column step between frequencies.
    pub stride: u32,
    /// Column of the first cos.
    pub cos_offset: u32,
    /// The always-zero column (with [`FLAG_ZERO_COL`]).
    pub zero_col: u32,
    /// Added to every position.
    pub start: u32,
    /// The position whose row is zeros (with [`FLAG_PADDING`]).
    pub padding_idx: u32,
    /// Tokens of the batch (`encode_pass_x4`).
    pub n_tokens: u32,
    /// Units of four elements per row (`encode_pass_x4`).
    pub row_units: u32,
    /// Workgroups along y, tokens beyond folded into z (`encode_pass_x4`).
    pub groups_y: u32,
    /// The first token (in the whole batch) of this dispatch's part of the batch.
    pub token_base: u32,
    /// Always 0: the zero the kernel ORs into each product an add takes, which a compiler
    /// cannot see through, so it cannot contract the two into a multiply-add
    /// (`shaders/shared/rounded.wgsl`).
    pub zero: u32,
}

/// The positions whose PE rows an [`EncodePass`] reads from the context's cache unless
/// told otherwise; rows of other positions are computed in the kernel, with the same bits.
pub const DEFAULT_CACHED_POSITIONS: u32 = 4096;

/// The shape and options of an [`EncodePass`].
#[derive(Clone, Debug, PartialEq)]
pub struct EncodePassDescriptor {
    /// Sequences per step.
    pub batch: usize,
    /// Tokens per sequence per step (1 for a decode step).
    pub len: usize,
    /// Where the positions come from.
    pub positions: Positions,
    /// Scale, pad id and output storage type, as for [`Context::encode`].
    pub options: EncodeOptions,
    /// PE rows of positions `0..cached_positions` are computed once, kept on the device
    /// (shared by the context's passes and encodes of the same spec, at most the context's
    /// [PE cache budget](crate::gpu::Options::pe_cache_budget), and held by the pass until
    /// it is dropped) and read; other positions' rows are computed in the kernel, bit for
    /// bit the same. 0 computes every row.
    pub cached_positions: u32,
    /// `Some(n)`: every position is below `n` (the model's context length), so the PE rows
    /// of `0..n` are cached and the kernels carry no PE computation of their own: one
    /// dispatch per step (per window of table chunks) where adapters that run shaders on
    /// CPU cores take three, and a kernel without the exact phase's arithmetic on GPUs. A
    /// position at or above `n` is written as a zero row and counted in
    /// [`Faults::bad_positions`], as a learned table's position without a row is; pad
    /// tokens are zero rows anyway. `cached_positions` is then unused; with a learned
    /// position table, its rows past `n` are not read either. `None` (the default) serves
    /// every u32 position ([`Error::InvalidParameter`] for `Some(0)`, [`Error::Limit`] if
    /// `n` rows do not fit the context's PE cache).
    pub max_positions: Option<u32>,
}

impl Default for EncodePassDescriptor {
    fn default() -> Self {
        Self {
            batch: 1,
            len: 1,
            positions: Positions::PerToken,
            options: EncodeOptions::default(),
            cached_positions: DEFAULT_CACHED_POSITIONS,
            max_positions: None,
        }
    }
}

/// What the kernels of an [`EncodePass`] found wrong with the ids they read since the
/// counters were last reset: such tokens were written as zero rows, and nothing was read
/// out of bounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Tokens whose id was at or above the vocabulary size (pad tokens excepted); wraps
    /// past `u32::MAX`.
    pub bad_ids: u32,
    /// The largest such id, when there was one.
    pub largest_bad_id: Option<u32>,
    /// Tokens of a pass over a learned position table whose position had no row in it
    /// (pad tokens and bad ids excepted); wraps past `u32::MAX`.
    pub bad_positions: u32,
    /// The largest such position, when there was one.
    pub largest_bad_position: Option<u32>,
}

/// The fused embedding gather + PE, prepared once for a spec, a table and a batch shape,
/// then recorded into the caller's command encoders with ids and positions in device
/// buffers. See [`Context::encode_pass`].
pub struct EncodePass {
    ctx: Context,
    desc: EncodePassDescriptor,
    dim: usize,
    /// Fixed parameters; the per-buffer ones (`*_base`), the part's (`n_words`, `n_tokens`,
    /// `token_base`, `groups_x`) and the window's are set per bind.
    params: EncodePassParams,
    /// Per dispatch: the first table chunk and how many are bound.
    windows: Vec<(u32, u32)>,
    chunks: Vec<DeviceBuffer>,
    /// The unit kernel's specialisation and grid, for rows of whole units.
    x4: Option<UnitKernel>,
    /// Tokens per part of a step (every part but the last): a step whose output exceeds one
    /// storage binding is served in parts, each bound at its own output range.
    part_tokens: u32,
    /// The cached PE rows (kept alive while the pass is), or a learned position table, or a
    /// one-unit stand-in.
    cache: Option<PeCache>,
    learned: Option<DeviceBuffer>,
    no_cache: Option<DeviceBuffer>,
    /// Fault counters (16 bytes), then the spec's frequency words.
    state: DeviceBuffer,
    /// The split's work buffer (see `shaders/encode_pass_scan.wgsl`), when the pass is split.
    work: Option<DeviceBuffer>,
    /// Where the state buffer has room for a copy of a step's ids and positions: always on
    /// devices of fewer than 6 storage buffers per shader stage (`compact_device`), whose
    /// records always copy them; elsewhere when it takes at most [`ARENA_COPY_BYTES`], for
    /// records whose output shares the ids' or positions' buffer.
    copies: Option<CompactIo>,
    compact_device: bool,
    bound: BindCache<Bound>,
}

/// The byte offsets in the state buffer of the copies of a step's ids and positions (the
/// compact layout, `crate::shaders::encode_pass_io`).
#[derive(Clone, Copy, Debug)]
struct CompactIo {
    ids_at: u64,
    positions_at: u64,
}

impl std::fmt::Debug for EncodePass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodePass")
            .field("desc", &self.desc)
            .field("dim", &self.dim)
            .field("windows", &self.windows.len())
            .field("cached_rows", &self.params.cached_rows)
            .finish()
    }
}

/// A set of buffers as bound: one entry per part of the step.
struct Bound {
    parts: Vec<PartBound>,
}

/// One part of a step as bound: the kernel chosen for its output range, its grid, the
/// parameter blocks and one bind group per window.
struct PartBound {
    kernel: Arc<Kernel>,
    grid: (u32, u32, u32),
    groups: Vec<wgpu::BindGroup>,
    /// A split pass's scan and late stage.
    split: Option<SplitBound>,
    _params: wgpu::Buffer,
}

/// The scan (one bind group) and late stage (one per window) of a split pass.
struct SplitBound {
    scan: Arc<Kernel>,
    scan_group: wgpu::BindGroup,
    late: Arc<Kernel>,
    late_groups: Vec<wgpu::BindGroup>,
}

/// Bytes of the fault counters at the start of the state buffer.
const FAULT_BYTES: u64 = 16;

/// The most bytes of ids and positions a pass on a device of 6 or more storage buffers
/// keeps room to copy, for records whose output shares their buffer (an engine's arena).
pub const ARENA_COPY_BYTES: u64 = 16 << 20;

/// The recorded encode's kernels, compiled on first use.
#[derive(Clone, Default)]
pub(in crate::gpu) struct EncodePassKernels {
    by_key: Arc<Mutex<HashMap<EncodePassKey, Arc<Kernel>>>>,
}

/// A compiled kernel of the recorded encode: `encode_pass` with its table slots, or a
/// specialisation of `encode_pass_x4`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum EncodePassKey {
    /// `encode_pass` with its table slots, in the compact layout or not.
    General(u32, bool),
    X4(EncodePassX4),
    Scan,
}

impl Context {
    fn encode_pass_kernel(&self, key: EncodePassKey) -> Arc<Kernel> {
        let mut kernels = self.record.by_key.lock().unwrap_or_else(|e| e.into_inner());
        let kernel = kernels.entry(key).or_insert_with(|| {
            use crate::gpu::layout::{encode_pass_bindings, encode_pass_scan_bindings};
            let (entry, source, bindings) = match key {
                EncodePassKey::General(slots, compact) => (
                    "encode_pass",
                    crate::shaders::encode_pass_source(slots, compact),
                    encode_pass_bindings(slots, compact),
                ),
                EncodePassKey::X4(v) => {
                    ("encode_pass_x4", v.source(), encode_pass_bindings(v.slots, v.compact))
                }
                EncodePassKey::Scan => (
                    "encode_pass_scan",
                    crate::shaders::encode_pass_scan_source(),
                    encode_pass_scan_bindings(),
                ),
            };
            let (layout, pipeline) = crate::gpu::build_pipeline_with(
                &self.device,
                entry,
                &source,
                &bindings,
                self.bound_all_loops,
            );
            Arc::new(Kernel { layout, pipeline })
        });
        Arc::clone(kernel)
    }

    /// Prepares the fused gather + PE of `spec` and `table` for batches of
    /// `desc.batch` sequences of `desc.len` tokens, to be recorded with
    /// [`EncodePass::record`] into command encoders the caller owns, reading token ids and
    /// positions from device buffers. Everything the host can check is checked here;
    /// the PE rows of `0..desc.cached_positions` are computed (a submission, not waited
    /// for) unless the context already holds them.
    ///
    /// ```no_run
    /// use posenc::gpu::{Context, EncodePassDescriptor, Options, Positions};
    /// use posenc::PeSpec;
    /// use posenc::encode::Embeddings;
    ///
    /// let gpu = Options::from_env().and_then(|o| Context::new(&o))?;
    /// let spec = PeSpec::new(64)?;
    /// let weights = vec![0.5f32; 1000 * 64];
    /// let rows = ndarray::ArrayView2::from_shape((1000, 64), &weights).unwrap();
    /// let table = gpu.upload_table(Embeddings::F32(rows))?;
    /// let desc = EncodePassDescriptor {
    ///     batch: 8,
    ///     positions: Positions::PerSequence,
    ///     ..Default::default()
    /// };
    /// let pass = gpu.encode_pass(&spec, &table, &desc)?;
    /// # let _ = pass;
    /// # Ok::<(), posenc::Error>(())
    /// ```
    ///
    /// With a learned position table (`&position_table`, uploaded with
    /// [`Context::upload_position_table`]; BERT and GPT-2 style) in place of the sinusoid:
    /// `out[b, t, :] = scale * E[ids[b, t], :] + P[position, :]`, bit for bit what
    /// [`crate::cpu::encode_learned`] gives, with a scale or without. `desc.cached_positions`
    /// is not used then: the table is the cache. A position without a row in the table
    /// cannot be refused on the host when positions live on the device: such a token gives
    /// a zero row and counts in [`Faults::bad_positions`], as an id outside the vocabulary
    /// does in [`Faults::bad_ids`]; nothing is read out of bounds.
    ///
    /// A descriptor of no tokens (`batch` or `len` 0) prepares a pass whose records add
    /// nothing and read no ids or positions (checked on lavapipe, 2026-12-03);
    /// [`Context::rope_pass`] refuses an empty shape instead.
    ///
    /// # Errors
    /// [`Error::Shape`] if the table's dim is not the spec's (or the position table's), if
    /// a position table has no rows, or for a 16-bit output of an odd number of elements
    /// per step (its last word would be shared with whatever follows it);
    /// [`Error::InvalidParameter`] for a table or position table of another device or a
    /// scale that is not finite; [`Error::Limit`] if one step's output has more than 2^32 -
    /// 1 elements or one output row with the storage alignment does not fit one storage
    /// binding (a larger output is recorded in parts, [`EncodePass::parts`]), if one step's
    /// ids or positions do not fit one (they are bound whole), if the device binds fewer
    /// than 4 storage buffers per shader stage, if on a device of 4 or 5 (the compact
    /// layout, see [`EncodePass::record`]) the state buffer with a copy of one step's ids
    /// and positions would not fit one storage binding, or for a 16-bit output of an odd
    /// dim over a table of more chunks than one dispatch binds; [`Error::DeviceLost`],
    /// [`Error::OutOfMemory`], [`Error::Gpu`].
    pub fn encode_pass<'a>(
        &self,
        pe: impl Into<PositionSource<'a>>,
        table: &GpuTable,
        desc: &EncodePassDescriptor,
    ) -> Result<EncodePass> {
        let pe = pe.into();
        self.scoped("encode_pass", || self.checked_encode_pass(pe, table, desc))
    }

    /// [`Context::encode_pass`] outside its error scopes.
    fn checked_encode_pass(
        &self,
        pe: PositionSource<'_>,
        table: &GpuTable,
        desc: &EncodePassDescriptor,
    ) -> Result<EncodePass> {
        if let PositionSource::Learned(position_table) = pe {
            self.check_same_device(position_table.device_key, "position table")?;
            if position_table.dim().0 == 0 {
                return Err(Error::Shape {
                    op: "encode_pass",
                    what: "position table rows",
                    expected: "at least 1".into(),
                    actual: "0".into(),
                });
            }
        }
        self.prepare_pass("encode_pass", pe, table, desc)
    }

    /// [`Context::encode_pass`], its error scopes awaited rather than blocked on: on the
    /// web, where the blocking form cannot wait for their answer and leaves what the
    /// browser refuses to the device's uncaptured-error handler, this one returns it as
    /// [`Error::OutOfMemory`] or [`Error::Gpu`]. Natively the two are the same.
    ///
    /// # Errors
    /// As [`Context::encode_pass`].
    pub async fn encode_pass_async<'a>(
        &self,
        pe: impl Into<PositionSource<'a>>,
        table: &GpuTable,
        desc: &EncodePassDescriptor,
    ) -> Result<EncodePass> {
        let pe = pe.into();
        self.scoped_async("encode_pass", async || self.checked_encode_pass(pe, table, desc)).await
    }

    /// Tokens per part of a step of `n_tokens` rows of `dim` elements of `out_dtype`
    /// (`out_bytes` in all): all of them when the output fits one storage binding from any
    /// offset ([`Context::fits_one_binding`]), else the
    /// most that fit one binding from any offset, in a multiple that keeps every part at the
    /// first part's offset within its binding (a whole number of storage-alignment units
    /// apart), which also keeps 16-bit parts whole words.
    fn part_tokens(
        &self,
        op: &'static str,
        n_tokens: u64,
        dim: usize,
        out_dtype: Dtype,
        out_bytes: u64,
    ) -> Result<u32> {
        if self.fits_one_binding(out_bytes) {
            return Ok(n_tokens as u32);
        }
        let shape = PartShape {
            row_bytes: (dim * out_dtype.size()) as u64,
            multiple: 1,
            max_rows: u64::MAX,
            what: "output rows of one part of a step (one binding from any offset)",
        };
        Ok(self.part_rows(op, &shape)?.min(n_tokens) as u32)
    }

    fn prepare_pass(
        &self,
        op: &'static str,
        pe: PositionSource<'_>,
        table: &GpuTable,
        desc: &EncodePassDescriptor,
    ) -> Result<EncodePass> {
        if desc.max_positions == Some(0) {
            return Err(Error::InvalidParameter {
                field: "max_positions",
                value: "0".into(),
                allowed: "at least 1: positions 0..max_positions have PE rows (None serves \
                          every position)",
            });
        }
        let shape = self.pass_shape(op, pe, table, desc)?;
        let scale = desc.options.scale.factor(shape.dim)?;
        let (flags, spec_flags) = pass_flags(pe, desc, scale);
        let (split, x4) = self.pass_unit_kernel(pe, table, desc, &shape);
        let state = self.pass_state(op, pe, desc, &shape)?;
        let (state_buffer, no_cache, work) =
            self.pass_buffers(op, &state, split, x4.is_some(), shape.part_tokens)?;
        let params = pass_params(pe, table, desc, &shape, &state, scale, (flags, spec_flags), x4);
        let PassState { cache, learned, copies, .. } = state;
        Ok(EncodePass {
            ctx: self.clone(),
            desc: desc.clone(),
            dim: shape.dim,
            params,
            windows: shape.windows,
            chunks: table.chunks.iter().map(|c| c.buffer.clone()).collect(),
            x4,
            part_tokens: shape.part_tokens,
            cache,
            learned: learned.map(|(buffer, _)| buffer),
            no_cache,
            state: state_buffer,
            work,
            copies,
            compact_device: shape.compact,
            bound: BindCache::default(),
        })
    }

    /// The checks of a pass's shape against the spec, the table and the device, before
    /// anything is made: its dim, parts, layout and table windows.
    fn pass_shape(
        &self,
        op: &'static str,
        pe: PositionSource<'_>,
        table: &GpuTable,
        desc: &EncodePassDescriptor,
    ) -> Result<PassShape> {
        self.check_same_device(table.device_key, "table")?;
        let dim = table.dim;
        let pe_dim = match pe {
            PositionSource::Sinusoid(spec) => spec.dim() as usize,
            PositionSource::Learned(p) => p.dim().1,
        };
        if table.chunks.is_empty() {
            return Err(Error::Shape {
                op,
                what: "embedding table rows",
                expected: "at least 1".into(),
                actual: "0".into(),
            });
        }
        if dim != pe_dim {
            return Err(Error::Shape {
                op,
                what: "embedding dim vs positional-encoding dim",
                expected: pe_dim.to_string(),
                actual: dim.to_string(),
            });
        }
        let out_dtype = desc.options.out_dtype;
        // Sequences and tokens are u32 in the kernels (and every size below fits a u64).
        let n_tokens_all = (desc.batch as u64).saturating_mul(desc.len as u64);
        for (what, requested) in
            [("sequences per step", desc.batch as u64), ("tokens per step", n_tokens_all)]
        {
            if requested > u64::from(u32::MAX) {
                return Err(Error::Limit {
                    op,
                    what,
                    requested,
                    limit_name: "u32 indices",
                    limit: u64::from(u32::MAX),
                });
            }
        }
        // A step's ids and positions are bound whole (its output goes in parts): if they
        // cannot fit one binding, no record could bind them.
        let values = [
            ("ids", n_tokens_all),
            ("positions", desc.positions.values(desc.batch, desc.len) as u64),
        ];
        for (what, values) in values {
            let requested = values.saturating_mul(4);
            if requested > self.max_binding {
                let limit_name = "max storage binding size (bytes)";
                return Err(Error::Limit {
                    op,
                    what,
                    requested,
                    limit_name,
                    limit: self.max_binding,
                });
            }
        }
        let elements = n_tokens_all.saturating_mul(dim as u64);
        let out_bytes = elements.saturating_mul(out_dtype.size() as u64);
        let part_tokens = self.part_tokens(op, n_tokens_all, dim, out_dtype, out_bytes)?;
        // Element indices stay below 2^32 in the kernel.
        if elements > u64::from(u32::MAX) {
            return Err(Error::Limit {
                op,
                what: "one step's output elements",
                requested: elements,
                limit_name: "u32 indices",
                limit: u64::from(u32::MAX),
            });
        }
        if out_dtype != Dtype::F32 && elements % 2 == 1 {
            return Err(Error::Shape {
                op,
                what: "a 16-bit output's elements per step (batch x len x dim)",
                expected: "an even count: a step's last 4-byte word would be shared with \
                           whatever follows it"
                    .to_string(),
                actual: format!("{elements} ({} x {} x {dim})", desc.batch, desc.len),
            });
        }
        // Devices of fewer than 6 storage buffers per stage (WebGPU's downlevel limits allow
        // 4) take the compact layout: the ids and positions are copied into the state buffer
        // and bound with it.
        let storage = self.device.limits().max_storage_buffers_per_shader_stage;
        if storage < 4 {
            return Err(Error::Limit {
                op,
                what: "storage buffers per shader stage (3 and one table chunk)",
                requested: 4,
                limit_name: "the device's max_storage_buffers_per_shader_stage",
                limit: u64::from(storage),
            });
        }
        let compact = storage < 6;
        let slots = (storage - if compact { 3 } else { 5 }).min(MAX_TABLE_SLOTS);
        let n_chunks = table.chunks.len() as u32;
        let windows: Vec<(u32, u32)> = (0..n_chunks)
            .step_by(slots as usize)
            .map(|first| (first, slots.min(n_chunks - first)))
            .collect();
        if windows.len() > 1 && out_dtype != Dtype::F32 && dim % 2 == 1 {
            return Err(Error::Limit {
                op,
                what: "table chunks for a 16-bit output of an odd dim",
                requested: u64::from(n_chunks),
                limit_name: "table chunks one dispatch binds",
                limit: u64::from(slots),
            });
        }
        Ok(PassShape { dim, out_dtype, part_tokens, compact, slots, windows, n_chunks })
    }

    /// The unit kernel (rows of whole vec4 units), compiled here, and whether it runs in
    /// the two stages of CPU adapters; `None` for the general kernel, compiled when first
    /// bound.
    fn pass_unit_kernel(
        &self,
        pe: PositionSource<'_>,
        table: &GpuTable,
        desc: &EncodePassDescriptor,
        shape: &PassShape,
    ) -> (bool, Option<UnitKernel>) {
        let PassShape { dim, out_dtype, part_tokens, slots, n_chunks, compact, .. } = *shape;
        // The unit kernel's grid is one part's (the whole batch when it fits one binding);
        // the counts of each part, and the general kernel's grid, are set when bound.
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension;
        let n_tokens = part_tokens;
        let row_units = (dim / 4) as u32;
        let kernel_slots = slots.min(n_chunks);
        // Rows of whole units take the unit kernel (compiled here); others, and outputs
        // not aligned to its words, the general one (compiled when first bound).
        // Adapters that run shaders on CPU cores split the unit kernel in two stages (see
        // shaders/encode_pass_x4.wgsl), which takes indirect dispatches.
        // A pass bounded by `max_positions` reads every PE row from the cache, as a learned
        // table's does: one stage, no PE code.
        let cached_only = rows_all_cached(pe, desc);
        let split = !cached_only
            && !self.coalesced
            && self
                .adapter
                .get_downlevel_capabilities()
                .flags
                .contains(wgpu::DownlevelFlags::INDIRECT_EXECUTION);
        let x4 = dim.is_multiple_of(4).then(|| {
            let step_units = u64::from(n_tokens) * u64::from(row_units);
            let chosen = recorded_encode_units(self.units, self.coalesced, cached_only, step_units);
            let (units, workgroup) = EncodePassX4::shape(row_units, self.coalesced, chosen);
            // Rows all cached have no PE to compute: the cached tokens' stage alone.
            let stage = if split || cached_only { 1 } else { 0 };
            let v = EncodePassX4 {
                table: table.dtype,
                out: out_dtype,
                slots: kernel_slots,
                units,
                workgroup,
                stage,
                compact,
                coalesced: self.coalesced,
                f16_unpack: takes_unpack(table.dtype, self.coalesced, self.f16_unpack),
            };
            let (groups_y, groups_z) = fold_dispatch(n_tokens, max_groups);
            let grid = (row_units.div_ceil(units * workgroup), groups_y, groups_z);
            self.encode_pass_kernel(EncodePassKey::X4(v));
            if split {
                self.encode_pass_kernel(EncodePassKey::X4(EncodePassX4 { stage: 2, ..v }));
                self.encode_pass_kernel(EncodePassKey::Scan);
            }
            (v, grid)
        });
        (split, x4)
    }

    /// What the state buffer holds (fault counters, frequency words and, in the compact
    /// layout or for an arena's record, room for a step's ids and positions) and the PE
    /// rows the kernels read.
    fn pass_state(
        &self,
        op: &'static str,
        pe: PositionSource<'_>,
        desc: &EncodePassDescriptor,
        shape: &PassShape,
    ) -> Result<PassState> {
        let compact = shape.compact;
        let (steps, cache, learned) = match pe {
            PositionSource::Sinusoid(spec) => {
                // As many of the positions asked for as the cache holds: past 4096 wide
                // the default 4096 rows exceed it, and asking for all of them left every
                // position uncached, each step computing every PE row (a B = 8 step on
                // lavapipe, 2026-11-26: 1.09 ms at D = 4608 against 0.21 at 4096; 0.24
                // with this).
                let cache = match (desc.max_positions, desc.cached_positions) {
                    // Every row the pass reads, exactly: a bound is not a cache to grow.
                    (Some(n), _) => Some(self.exact_pe_rows(op, spec, n)?),
                    (None, 0) => None,
                    (None, n) => {
                        self.cached_pe_rows(spec, u64::from(n).min(self.pe_cache_cap(spec)), None)
                    }
                };
                (flat_steps(spec), cache, None)
            }
            PositionSource::Learned(p) => {
                (Vec::new(), None, Some((p.buffer.clone(), p.dim().0 as u32)))
            }
        };
        // At least one frequency word pair: the kernels' smallest binding.
        let steps_end = FAULT_BYTES + steps.len().max(2) as u64 * 4;
        let ids_bytes = (desc.batch * desc.len) as u64 * 4;
        let positions_bytes = desc.positions.values(desc.batch, desc.len) as u64 * 4;
        let io = CompactIo { ids_at: steps_end, positions_at: steps_end + ids_bytes };
        let copy_bytes = io.positions_at + positions_bytes;
        let (copies, state_bytes) = if compact {
            if copy_bytes > self.max_binding {
                return Err(Error::Limit {
                    op,
                    what: "bytes of the state buffer (fault counters, frequency words and a \
                           copy of a step's ids and positions) on a device of fewer than 6 \
                           storage buffers per stage",
                    requested: copy_bytes,
                    limit_name: "max storage binding size (bytes)",
                    limit: self.max_binding,
                });
            }
            (Some(io), copy_bytes)
        } else if ids_bytes + positions_bytes <= ARENA_COPY_BYTES && copy_bytes <= self.max_binding
        {
            (Some(io), copy_bytes)
        } else {
            (None, steps_end)
        };
        Ok(PassState { steps, cache, learned, copies, state_bytes })
    }

    /// The pass's own buffers: the state (counters cleared, frequency words written), a
    /// stand-in for a missing PE cache, and the two-stage kernel's work list.
    fn pass_buffers(
        &self,
        op: &'static str,
        state: &PassState,
        split: bool,
        unit: bool,
        n_tokens: u32,
    ) -> Result<(DeviceBuffer, Option<DeviceBuffer>, Option<DeviceBuffer>)> {
        let PassState { steps, cache, learned, state_bytes, .. } = state;
        let state_bytes = *state_bytes;
        self.scoped(op, || {
            use wgpu::BufferUsages as U;
            let state = self.create_buffer(
                "posenc.encode_pass.state",
                state_bytes,
                U::STORAGE | U::COPY_SRC | U::COPY_DST,
            )?;
            self.queue.write_buffer(&state, 0, &[0u8; FAULT_BYTES as usize]);
            self.queue.write_buffer(&state, FAULT_BYTES, bytemuck::cast_slice(steps));
            let no_cache = match (&cache, &learned) {
                (Some(_), _) | (_, Some(_)) => None,
                // One unit, the smallest binding either kernel takes.
                (None, None) => {
                    Some(self.create_buffer("posenc.encode_pass.no_cache", 16, U::STORAGE)?)
                }
            };
            // The split's list: the late stage's dispatch, the count, one word per token.
            let work = match unit {
                true if split => Some(self.create_buffer(
                    "posenc.encode_pass.work",
                    ((4 + u64::from(n_tokens)) * 4).next_multiple_of(16),
                    U::STORAGE | U::INDIRECT,
                )?),
                _ => None,
            };
            self.queue.submit([]);
            Ok((state, no_cache, work))
        })
    }
}

/// The unit kernel a pass records and its grid for one part.
type UnitKernel = (EncodePassX4, (u32, u32, u32));

/// A pass's shape, checked ([`Context::pass_shape`]).
#[derive(Clone, Debug)]
struct PassShape {
    dim: usize,
    out_dtype: Dtype,
    /// Tokens of one part of a step (all of them when the output fits one binding).
    part_tokens: u32,
    /// The compact layout: fewer than 6 storage buffers per stage.
    compact: bool,
    /// Table chunks one dispatch binds.
    slots: u32,
    /// (first chunk, chunks) of each dispatch's table window.
    windows: Vec<(u32, u32)>,
    n_chunks: u32,
}

/// What a pass's state buffer holds and the PE rows its kernels read
/// ([`Context::pass_state`]).
struct PassState {
    steps: Vec<u32>,
    cache: Option<PeCache>,
    learned: Option<(DeviceBuffer, u32)>,
    copies: Option<CompactIo>,
    state_bytes: u64,
}

/// The `flags` and `spec_flags` words of a pass's parameters.
/// Whether every PE row a pass reads is a row of its cache or learned table: a learned
/// table's, or PE rows bounded by `max_positions`.
fn rows_all_cached(pe: PositionSource<'_>, desc: &EncodePassDescriptor) -> bool {
    matches!(pe, PositionSource::Learned(_)) || desc.max_positions.is_some()
}

fn pass_flags(
    pe: PositionSource<'_>,
    desc: &EncodePassDescriptor,
    scale: Option<f32>,
) -> (u32, u32) {
    let mut spec_flags = 0;
    let mut flags = 0;
    if let PositionSource::Sinusoid(spec) = pe {
        if spec.frequencies() == Frequencies::F32 {
            spec_flags |= FLAG_F32;
        }
        if spec.padding_idx().is_some() {
            spec_flags |= FLAG_PADDING;
        }
        if spec.columns().zero_col.is_some() {
            spec_flags |= FLAG_ZERO_COL;
        }
    }
    // A position without a row is a fault, never computed.
    if rows_all_cached(pe, desc) {
        flags |= FLAG_LEARNED;
    }
    if scale.is_some() {
        flags |= FLAG_SCALE;
    }
    if desc.options.pad_id.is_some() {
        flags |= FLAG_PAD_ID;
    }
    if desc.positions == Positions::PerSequence {
        flags |= FLAG_OFFSETS;
    }
    (flags, spec_flags)
}

/// A pass's parameters, less each part's counts and the general kernel's grid (set when
/// bound).
#[allow(clippy::too_many_arguments)]
fn pass_params(
    pe: PositionSource<'_>,
    table: &GpuTable,
    desc: &EncodePassDescriptor,
    shape: &PassShape,
    state: &PassState,
    scale: Option<f32>,
    (flags, spec_flags): (u32, u32),
    x4: Option<UnitKernel>,
) -> EncodePassParams {
    let (dim, out_dtype) = (shape.dim, shape.out_dtype);
    let row_units = (dim / 4) as u32;
    let (cache, learned) = (&state.cache, &state.learned);
    let rows = match (cache, learned) {
        (Some(c), _) => c.rows,
        (None, Some((_, rows))) => *rows,
        (None, None) => 0,
    };
    // The cache or table may hold more rows than the bound; positions past it are faults.
    let cached_rows = desc.max_positions.map_or(rows, |n| n.min(rows));
    let (columns, start, padding_idx) = match pe {
        PositionSource::Sinusoid(spec) => {
            (spec.columns(), spec.start_index(), spec.padding_idx().unwrap_or(0))
        }
        // Unused with FLAG_LEARNED.
        PositionSource::Learned(_) => (
            crate::spec::Columns { n_freqs: 0, n_cos: 0, stride: 1, cos_offset: 0, zero_col: None },
            0,
            0,
        ),
    };
    EncodePassParams {
        dim: dim as u32,
        vocab: table.vocab as u32,
        rows_per_chunk: table.rows_per_chunk,
        seq_len: desc.len.max(1) as u32,
        cached_rows,
        pad_id: desc.options.pad_id.unwrap_or(0),
        scale_bits: scale.unwrap_or(1.0).to_bits(),
        flags,
        in_dtype: table.dtype.code(),
        out_dtype: out_dtype.code(),
        spec_flags,
        n_freqs: columns.n_freqs,
        stride: columns.stride,
        cos_offset: columns.cos_offset,
        zero_col: columns.zero_col.unwrap_or(0),
        start,
        padding_idx,
        row_units,
        groups_y: x4.map_or(0, |(_, grid)| grid.1),
        ..EncodePassParams::default()
    }
}

impl EncodePass {
    /// What the pass was prepared for.
    pub fn descriptor(&self) -> &EncodePassDescriptor {
        &self.desc
    }

    /// Bytes of `ids` one step reads: `batch * len` u32.
    pub fn ids_bytes(&self) -> u64 {
        (self.desc.batch * self.desc.len) as u64 * 4
    }

    /// Bytes of `positions` one step reads: `batch * len` u32 per token, or `batch` u32
    /// per sequence (none for a step of no tokens).
    pub fn positions_bytes(&self) -> u64 {
        self.desc.positions.values(self.desc.batch, self.desc.len) as u64 * 4
    }

    /// Bytes of one output row: `dim` elements of the output type.
    fn row_bytes(&self) -> u64 {
        (self.dim * self.desc.options.out_dtype.size()) as u64
    }

    /// Parts a step is recorded in: one, unless its output is larger than one storage
    /// binding; then each part binds its own output range. None for a step of no tokens,
    /// whose record records nothing.
    pub fn parts(&self) -> usize {
        let tokens = self.desc.batch * self.desc.len;
        tokens.div_ceil(self.part_tokens.max(1) as usize)
    }

    /// Bytes one step writes: `batch * len * dim` elements of the output type.
    pub fn output_bytes(&self) -> u64 {
        (self.desc.batch * self.desc.len * self.dim * self.desc.options.out_dtype.size()) as u64
    }

    /// Compute dispatches one [`EncodePass::record`] records: one per window of table
    /// chunks a dispatch binds (one unless the table is larger than several bindings);
    /// where the pass is split in two stages (adapters that run shaders on CPU cores, see
    /// `shaders/encode_pass_x4.wgsl`), a scan, then two per window, the second indirect (and of
    /// no workgroups when every position is cached). A record whose output slice is not
    /// aligned to the unit kernel's words takes the general kernel: one per window. All of
    /// it once per part ([`EncodePass::parts`]): none for a step of no tokens.
    pub fn dispatches(&self) -> usize {
        self.parts()
            * match self.work {
                Some(_) => 1 + 2 * self.windows.len(),
                None => self.windows.len(),
            }
    }

    /// Records one step into `encoder`: `out[b, t, :] = scale * E[ids[b, t], :] +
    /// PE(position of (b, t), :)`, row-major in `out`'s slice (16-bit elements two to a
    /// word, the first in the low half), bit for bit what [`crate::cpu::encode()`] gives.
    /// `ids` holds `batch * len` u32 token ids; `positions` one u32 per token or per
    /// sequence as prepared ([`Positions`]). All three slices need `STORAGE` usage and
    /// offsets that are multiples of 4 bytes; the bytes of `out` past the step's output are
    /// not touched. When `out` shares the buffer of `ids` or `positions` (an engine's
    /// arena), wgpu does not let one dispatch bind it both read-only and read-write, so the
    /// record first copies the ids and positions into the pass's state buffer, as the
    /// compact layout below does: that buffer then needs `COPY_SRC` too, and a step's ids
    /// and positions at most [`ARENA_COPY_BYTES`].
    ///
    /// On a device of fewer than 6 storage buffers per shader stage (WebGPU's downlevel
    /// limits allow 4) the pass takes its compact layout: before its dispatches it records
    /// a copy of the step's ids and positions into its own state buffer, so `ids` and
    /// `positions` need `COPY_SRC` usage there instead (and may share `out`'s buffer), and
    /// one dispatch binds one or two table chunks. The bits are the same.
    ///
    /// `encoder` must be of the pass's device, and the buffers must stay alive, and
    /// unmapped, until the work has run: bind groups are kept per set of buffers, so a
    /// buffer destroyed after a record that used it is reported by wgpu when a later
    /// record's commands are submitted, not by that record. wgpu shows neither an encoder's
    /// device nor a buffer's map state, so those mistakes reach wgpu's own validation in the
    /// caller's `finish` or `submit` (its uncaptured-error handler panics by default).
    ///
    /// Nothing is submitted or waited for: the work runs when the caller submits
    /// `encoder`, in order with the caller's own commands. An id at or above the
    /// vocabulary size (and not the pad id) gives a zero row and counts in
    /// [`EncodePass::read_faults`]; nothing is read out of bounds.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a missing usage, a misaligned offset, a slice of the
    /// pass's own [`EncodePass::faults_buffer`], or `out` in
    /// the buffer of ids and positions past [`ARENA_COPY_BYTES`]; [`Error::Shape`]
    /// for a slice smaller than the step needs; [`Error::Limit`] for a range larger than
    /// one storage binding; [`Error::DeviceLost`] once the device is lost; natively
    /// [`Error::Gpu`] if wgpu refuses a buffer of a set not recorded before (one destroyed,
    /// or of another device of the same `wgpu::Instance`; a buffer of another instance
    /// cannot be told apart, as in wgpu itself): on the web that goes to the page's error
    /// scope or the device's uncaptured-error handler (docs/browser.md).
    pub fn record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        ids: wgpu::BufferSlice<'_>,
        positions: wgpu::BufferSlice<'_>,
        out: wgpu::BufferSlice<'_>,
    ) -> Result<()> {
        let Some((bound, copy)) = self.prepare_record(ids, positions, out)? else {
            return Ok(());
        };
        if let Some(copies) = copy {
            for (from, at, to, bytes) in copies {
                encoder.copy_buffer_to_buffer(&from, at, &self.state, to, bytes);
            }
        }
        self.dispatch(&mut crate::gpu::pass::begin(encoder, "posenc.encode_pass.pass"), &bound);
        Ok(())
    }

    /// [`EncodePass::record`] into a compute pass the caller has open, beside the caller's
    /// other dispatches: the pass's dispatches and nothing else. Like any dispatch recorded
    /// into a pass, they leave their pipeline and bind group 0 set in it: a dispatch of the
    /// caller's after them sets its own pipeline and bind groups first (as wgpu requires
    /// whenever the pipeline changes).
    ///
    /// # Errors
    /// As [`EncodePass::record`]; [`Error::InvalidParameter`] naming `pass` where the record
    /// must first copy the step's ids and positions (a copy command, which no compute pass
    /// may hold): on a device of fewer than 6 storage buffers per shader stage (the compact
    /// layout), and when `out` shares the buffer of the ids or positions. Those take
    /// [`EncodePass::record`].
    pub fn record_in(
        &self,
        pass: &mut wgpu::ComputePass<'_>,
        ids: wgpu::BufferSlice<'_>,
        positions: wgpu::BufferSlice<'_>,
        out: wgpu::BufferSlice<'_>,
    ) -> Result<()> {
        let aliased = [ids.buffer(), positions.buffer()].contains(&out.buffer());
        if self.compact_device || aliased {
            return Err(Error::InvalidParameter {
                field: "pass",
                value: "a compute pass the caller has open".into(),
                allowed: "a command encoder (EncodePass::record) where the step's ids and \
                          positions are copied first: on a device of fewer than 6 storage \
                          buffers per stage, or with out in the buffer of the ids or positions",
            });
        }
        if let Some((bound, _)) = self.prepare_record(ids, positions, out)? {
            self.dispatch(pass, &bound);
        }
        Ok(())
    }

    /// Records the dispatches of a step bound as `bound`.
    fn dispatch(&self, pass: &mut wgpu::ComputePass<'_>, bound: &Bound) {
        for part in &bound.parts {
            if let Some(split) = &part.split {
                pass.set_pipeline(&split.scan.pipeline);
                pass.set_bind_group(0, &split.scan_group, &[]);
                pass.dispatch_workgroups(1, 1, 1);
            }
            pass.set_pipeline(&part.kernel.pipeline);
            let (x, y, z) = part.grid;
            for group in &part.groups {
                pass.set_bind_group(0, group, &[]);
                pass.dispatch_workgroups(x, y, z);
            }
            if let (Some(split), Some(work)) = (&part.split, &self.work) {
                pass.set_pipeline(&split.late.pipeline);
                for group in &split.late_groups {
                    pass.set_bind_group(0, group, &[]);
                    pass.dispatch_workgroups_indirect(work, 0);
                }
            }
        }
    }

    /// Checks a step's buffers and returns its bind groups and, where the record copies
    /// the ids and positions first, those copies (source buffer and offset, offset in the
    /// state buffer, bytes); `None` for an empty step.
    #[allow(clippy::type_complexity)]
    fn prepare_record(
        &self,
        ids: wgpu::BufferSlice<'_>,
        positions: wgpu::BufferSlice<'_>,
        out: wgpu::BufferSlice<'_>,
    ) -> Result<Option<(Arc<Bound>, Option<[(wgpu::Buffer, u64, u64, u64); 2]>)>> {
        use wgpu::BufferUsages as U;
        // The pass's own state buffer ([`EncodePass::faults_buffer`]) is bound read-write by
        // every dispatch: as a step's ids or positions wgpu would refuse the pair at the
        // encoder's finish (a panic in its default handler), and as its output it would
        // overwrite the counters and the spec's words the kernel reads.
        for (field, slice) in [("ids", &ids), ("positions", &positions), ("out", &out)] {
            if slice.buffer() == &*self.state {
                return Err(Error::InvalidParameter {
                    field,
                    value: "a slice of the pass's own faults buffer (EncodePass::faults_buffer)"
                        .into(),
                    allowed: "a buffer of the caller's; the faults buffer is there to copy the \
                              counters from",
                });
            }
        }
        let need = |name, bytes| Need { name, bytes, usage: U::STORAGE, usage_text: "STORAGE" };
        // The full layout binds ids and positions read-only beside the output read-write,
        // which wgpu refuses within one buffer (at the encoder's finish, with a panic in its
        // default error handler). An output sharing their buffer (an engine's arena) takes
        // the compact layout's path for the record: the ids and positions are copied first.
        let aliased =
            !self.compact_device && [ids.buffer(), positions.buffer()].contains(&out.buffer());
        if aliased && self.copies.is_none() {
            return Err(Error::InvalidParameter {
                field: "out",
                value: "a slice of the buffer that holds the ids or positions".into(),
                allowed: "a buffer of its own when a step's ids and positions take more than \
                          ARENA_COPY_BYTES (16 MiB), the most a pass keeps room to copy",
            });
        }
        // Copied ids and positions need COPY_SRC: in place of STORAGE on a compact device,
        // beside it for an arena.
        let input = |name, bytes| {
            if self.compact_device {
                Need {
                    name,
                    bytes,
                    usage: U::COPY_SRC,
                    usage_text: "COPY_SRC (on a device of fewer than 6 storage buffers per stage)",
                }
            } else if aliased {
                Need {
                    name,
                    bytes,
                    usage: U::STORAGE | U::COPY_SRC,
                    usage_text: "COPY_SRC as well as STORAGE when out shares the buffer of the \
                                 ids or positions (the pass copies them first)",
                }
            } else {
                need(name, bytes)
            }
        };
        let ids = self.ctx.span(RECORD_OP, ids, &input("ids", self.ids_bytes()))?;
        let positions =
            self.ctx.span(RECORD_OP, positions, &input("positions", self.positions_bytes()))?;
        // One output range per part of the step (one unless the output exceeds a binding).
        let part_bytes = u64::from(self.part_tokens) * self.row_bytes();
        let outs =
            self.ctx.part_spans(RECORD_OP, out, &need("out", self.output_bytes()), part_bytes)?;
        if outs.is_empty() {
            return Ok(None);
        }
        let copy = if self.compact_device || aliased { self.copies } else { None };
        let mut spans = vec![ids.clone(), positions.clone()];
        spans.extend(outs);
        let bound = self.bound.get_or_make(spans, |spans| self.bind(spans, copy))?;
        let copies = copy.map(|io| {
            [
                (ids.buffer.clone(), ids.start(), io.ids_at, self.ids_bytes()),
                (
                    positions.buffer.clone(),
                    positions.start(),
                    io.positions_at,
                    self.positions_bytes(),
                ),
            ]
        });
        Ok(Some((bound, copies)))
    }
}

impl EncodePass {
    /// The parameter blocks and bind groups of one set of buffers (ids, positions, out).
    /// The bind groups of one set of buffers: `spans` is the ids, the positions, then the
    /// output range of each part of the step.
    fn bind(&self, spans: &[Span], copy: Option<CompactIo>) -> Result<Bound> {
        let [ids, positions, outs @ ..] = spans else { unreachable!("at least three spans") };
        // The compact layout's kernels read copies of the ids and positions at fixed places in
        // the state buffer. The copies are commands in the caller's encoder, whose errors
        // wgpu reports only when it finishes; a probe copy finished here, never submitted,
        // refuses a buffer wgpu would refuse (destroyed, of another device) as bind groups
        // with it would, with `Error::Gpu`.
        let state_spans;
        let (ids, positions) = match copy {
            Some(io) => {
                self.ctx.validated(RECORD_OP, || {
                    let device = &self.ctx.device;
                    let mut probe = device.create_command_encoder(&Default::default());
                    for (from, to) in [(ids, io.ids_at), (positions, io.positions_at)] {
                        probe.copy_buffer_to_buffer(&from.buffer, from.start(), &self.state, to, 4);
                    }
                    drop(probe.finish());
                })?;
                let state = |at: u64| Span {
                    buffer: (*self.state).clone(),
                    offset: 0,
                    size: self.state.size(),
                    base: (at / 4) as u32,
                };
                state_spans = [state(io.ids_at), state(io.positions_at)];
                (&state_spans[0], &state_spans[1])
            }
            None => (ids, positions),
        };
        let all = (self.desc.batch * self.desc.len) as u32;
        let parts = outs
            .iter()
            .enumerate()
            .map(|(k, out)| {
                let token_base = k as u32 * self.part_tokens;
                let tokens = self.part_tokens.min(all - token_base);
                self.bind_part(ids, positions, out, token_base, tokens, copy.is_some())
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Bound { parts })
    }

    /// The kernel, grid, parameters and bind groups of the part of `tokens` tokens from
    /// `token_base`, writing `out`; in the compact layout (`ids` and `positions` then span
    /// the copies in the state buffer) when `compact`.
    fn bind_part(
        &self,
        ids: &Span,
        positions: &Span,
        out: &Span,
        token_base: u32,
        tokens: u32,
        compact: bool,
    ) -> Result<PartBound> {
        let elements = u64::from(tokens) * self.dim as u64;
        let n_words =
            if self.desc.options.out_dtype == Dtype::F32 { elements } else { elements / 2 } as u32;
        // The unit kernel addresses the output in its words: the caller's offset must be a
        // whole number of them from the binding's start.
        let out_unit_words = if self.desc.options.out_dtype == Dtype::F32 { 4 } else { 2 };
        let unit = self
            .x4
            .filter(|_| out.base.is_multiple_of(out_unit_words))
            .map(|(v, grid)| (EncodePassX4 { compact, ..v }, grid));
        let (kernel, grid, out_base) = match unit {
            Some((v, grid)) => {
                (self.ctx.encode_pass_kernel(EncodePassKey::X4(v)), grid, out.base / out_unit_words)
            }
            None => {
                let slots = self.kernel_slots();
                let max_groups = self.ctx.device.limits().max_compute_workgroups_per_dimension;
                let (x, y) = fold_dispatch(n_words.div_ceil(WORKGROUP_SIZE), max_groups);
                let key = EncodePassKey::General(slots, compact);
                (self.ctx.encode_pass_kernel(key), (x, y, 1), out.base)
            }
        };
        let blocks: Vec<EncodePassParams> = self
            .windows
            .iter()
            .enumerate()
            .map(|(w, &(first_chunk, n_slots))| EncodePassParams {
                first_chunk,
                n_slots,
                ids_base: ids.base,
                pos_base: positions.base,
                out_base,
                flags: self.params.flags | if w == 0 { FLAG_FIRST_WINDOW } else { 0 },
                groups_x: grid.0,
                n_words,
                n_tokens: tokens,
                token_base,
                ..self.params
            })
            .collect();
        let bytes: Vec<&[u8]> = blocks.iter().map(bytemuck::bytes_of).collect();
        let ctx = &self.ctx;
        ctx.validated(RECORD_OP, || -> Result<PartBound> {
            let (params, stride) =
                uniform_blocks(ctx, RECORD_OP, "posenc.encode_pass.params", &bytes)?;
            let cache: &wgpu::Buffer = match (&self.cache, &self.learned, &self.no_cache) {
                (Some(c), _, _) => &c.buffer,
                (None, Some(b), _) | (None, None, Some(b)) => b,
                (None, None, None) => unreachable!("a stand-in exists without a cache"),
            };
            fn entry(
                binding: u32,
                resource: wgpu::BindingResource<'_>,
            ) -> wgpu::BindGroupEntry<'_> {
                wgpu::BindGroupEntry { binding, resource }
            }
            let params_block = |w: usize| {
                wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &params,
                    offset: w as u64 * stride,
                    size: std::num::NonZeroU64::new(size_of::<EncodePassParams>() as u64),
                })
            };
            // Per window, with `list` bound in place of the cache (the late stage).
            let window_groups = |kernel: &Kernel, list: Option<&wgpu::Buffer>| -> Vec<_> {
                self.windows
                    .iter()
                    .enumerate()
                    .map(|(w, &(first, n))| {
                        let cache = list.unwrap_or(cache).as_entire_binding();
                        // In the compact layout the state holds the ids and positions (`Span`s
                        // into it).
                        let mut entries = if compact {
                            vec![
                                entry(0, params_block(w)),
                                entry(1, self.state.as_entire_binding()),
                                entry(2, cache),
                                entry(3, out.binding()),
                            ]
                        } else {
                            vec![
                                entry(0, params_block(w)),
                                entry(1, ids.binding()),
                                entry(2, positions.binding()),
                                entry(3, cache),
                                entry(4, self.state.as_entire_binding()),
                                entry(5, out.binding()),
                            ]
                        };
                        let first_table = entries.len() as u32;
                        // The kernel declares as many slots as the widest window; a narrower
                        // last window repeats its first chunk in the slots it does not use.
                        let declared = self.kernel_slots();
                        for k in 0..declared {
                            let chunk = first + k.min(n - 1);
                            entries.push(entry(
                                first_table + k,
                                self.chunks[chunk as usize].as_entire_binding(),
                            ));
                        }
                        ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                            label: Some("posenc.encode_pass.bind_group"),
                            layout: &kernel.layout,
                            entries: &entries,
                        })
                    })
                    .collect()
            };
            let groups = window_groups(&kernel, None);
            let split = match (unit, &self.work) {
                (Some((v, _)), Some(work)) => {
                    let scan = ctx.encode_pass_kernel(EncodePassKey::Scan);
                    let scan_group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some("posenc.encode_pass.scan_bind_group"),
                        layout: &scan.layout,
                        entries: &[
                            entry(0, params_block(0)),
                            entry(1, work.as_entire_binding()),
                            entry(2, positions.binding()),
                        ],
                    });
                    let late =
                        ctx.encode_pass_kernel(EncodePassKey::X4(EncodePassX4 { stage: 2, ..v }));
                    let late_groups = window_groups(&late, Some(work));
                    Some(SplitBound { scan, scan_group, late, late_groups })
                }
                _ => None,
            };
            Ok(PartBound { kernel, grid, groups, split, _params: params })
        })?
    }

    /// Table bindings the pass's kernel declares.
    fn kernel_slots(&self) -> u32 {
        self.windows.first().map_or(1, |&(_, n)| n)
    }

    /// The fault counters' buffer: 16 bytes at offset 0, `[bad_ids, largest_bad_id,
    /// bad_positions, largest_bad_position]` as u32 (usages include `COPY_SRC`), for a caller
    /// that copies them into its own readback. The counters accumulate over steps until
    /// [`EncodePass::record_reset_faults`].
    pub fn faults_buffer(&self) -> &wgpu::Buffer {
        &self.state
    }

    /// Records the clearing of the fault counters into `encoder`.
    pub fn record_reset_faults(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.clear_buffer(&self.state, 0, Some(FAULT_BYTES));
    }

    /// Reads the fault counters: **blocks** until every submission so far has completed.
    /// For tests and for the end of a loop, not for every step.
    ///
    /// # Errors
    /// As [`Context::read_buffer`].
    pub fn read_faults(&self) -> Result<Faults> {
        super::super::wait::blocking("read_faults", "read_faults_async", self.read_faults_async())
    }

    /// [`EncodePass::read_faults`] without blocking the calling thread.
    ///
    /// # Errors
    /// As [`Context::read_buffer_async`], named `read_faults`.
    pub async fn read_faults_async(&self) -> Result<Faults> {
        let words =
            self.ctx.read_buffer_range_async("read_faults", &self.state, 0, FAULT_BYTES).await?;
        let word = |k: usize| {
            u32::from_le_bytes([words[4 * k], words[4 * k + 1], words[4 * k + 2], words[4 * k + 3]])
        };
        let (bad_ids, bad_positions) = (word(0), word(2));
        Ok(Faults {
            bad_ids,
            largest_bad_id: (bad_ids > 0).then(|| word(1)),
            bad_positions,
            largest_bad_position: (bad_positions > 0).then(|| word(3)),
        })
    }
}
