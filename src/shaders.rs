//! WGSL sources and their composition. Shared code lives once in `shaders/shared/` and
//! kernels pull it in with `#import NAME`. Every number the host and the kernels both use
//! (the CPU twins' coefficients, workgroup sizes, the codes the host packs into `Params` and
//! token records) is defined here or beside its CPU twin and written into each kernel's
//! prelude, so none is written twice.

pub mod diagnostics;

use crate::cpu::sincos::{COS_COEFFS, SIN_COEFFS};
use crate::dtype::Dtype;
use crate::error::{Error, Result};

/// Threads per workgroup of every kernel: within WebGPU's default limits (256).
pub const WORKGROUP_SIZE: u32 = 256;

pub use crate::dtype::{DTYPE_BF16, DTYPE_F16, DTYPE_F32};

/// `flags` bit of `encode` and `rope_cs`: multiply by the f32 in `scale_bits`.
pub const FLAG_SCALE: u32 = 1;
/// `flags` bit of `encode_pass`: tokens whose id is `pad_id` are padding (zero rows).
pub const FLAG_PAD_ID: u32 = 2;
/// `flags` bit of `encode_pass`: `positions` holds one first position per sequence, and token `t`
/// of a sequence is at that position plus `t`.
pub const FLAG_OFFSETS: u32 = 4;
/// `flags` bit of `encode_pass`: this dispatch binds the first window of table chunks, and also
/// writes pad tokens and ids outside the vocabulary.
pub const FLAG_FIRST_WINDOW: u32 = 8;
/// `flags` bit of `encode_pass` and `encode_pass_x4`: the rows in `cache` are a learned position
/// table of `cached_rows` rows, and a position without a row is a fault (a zero row, counted).
pub const FLAG_LEARNED: u32 = 16;
/// `flags` bit of `rope_cs` and `rope_pass`: each slot has three positions (a multimodal
/// RoPE's time, height and width), and each frequency takes the one of its axis
/// (`rope_pass` branches on its specialisation, [`RopePassKernel::axes`], instead).
pub const FLAG_AXES: u32 = 32;
/// `flags` bit of `rope_cs` and `rope_pass` beside [`FLAG_AXES`]: the axes are Qwen3-VL's
/// interleaved
/// layout ([`crate::rope::Mrope::Interleaved`]); with neither this nor [`FLAG_ALTERNATING`],
/// the sections layout.
pub const FLAG_INTERLEAVED: u32 = 64;
/// `flags` bit of `rope_cs` and `rope_pass` beside [`FLAG_AXES`]: the axes are ERNIE 4.5 VL's
/// alternating
/// layout ([`crate::rope::Mrope::Alternating`]).
pub const FLAG_ALTERNATING: u32 = 128;
/// `flags` bit of `table` (and `spec_flags` of `encode_pass`): float32 frequencies (the steps
/// of powers of two follow them).
pub const FLAG_F32: u32 = 1;
/// `flags` bit of `table`: the row of position `padding_idx` is all zeros.
pub const FLAG_PADDING: u32 = 2;
/// `flags` bit of `table`: column `zero_col` is always zero.
pub const FLAG_ZERO_COL: u32 = 4;

/// `pairing` of `rope` and `rope_x4`: frequency `i` rotates dimensions `i` and `i + r/2`.
pub const PAIRING_NEOX: u32 = 0;
/// `pairing` of `rope` and `rope_x4`: frequency `i` rotates dimensions `2i` and `2i + 1`.
pub const PAIRING_GPTJ: u32 = 1;

/// A pad token's id record in the encode kernels: its output row is zero (its id may lie
/// outside the vocabulary).
pub const PAD: u32 = u32::MAX;
/// Bits of an `encode_x4` id record below its table chunk's slot: table chunks hold at most
/// `1 << SLOT_SHIFT` rows.
pub const SLOT_SHIFT: u32 = 28;
/// The row (in its table chunk) of an `encode_x4` id record.
pub const ROW_MASK: u32 = (1 << SLOT_SHIFT) - 1;

/// Shared modules that kernels may `#import`, by name: each is `shaders/shared/<name>.wgsl`.
const MODULES: &[(&str, &str)] = &[
    ("intmath", include_str!("../shaders/shared/intmath.wgsl")),
    ("sincos", include_str!("../shaders/shared/sincos.wgsl")),
    ("f32_angle", include_str!("../shaders/shared/f32_angle.wgsl")),
    ("convert", include_str!("../shaders/shared/convert.wgsl")),
    ("convert4", include_str!("../shaders/shared/convert4.wgsl")),
    ("pe_phase", include_str!("../shaders/shared/pe_phase.wgsl")),
    ("encode_pass_params", include_str!("../shaders/shared/encode_pass_params.wgsl")),
    ("encode_pass_common", include_str!("../shaders/shared/encode_pass_common.wgsl")),
    ("rope_unit", include_str!("../shaders/shared/rope_unit.wgsl")),
    ("mrope_axis", include_str!("../shaders/shared/mrope_axis.wgsl")),
    ("alibi_common", include_str!("../shaders/shared/alibi_common.wgsl")),
    ("rounded", include_str!("../shaders/shared/rounded.wgsl")),
];

/// The kernels, by entry-point name: each is `shaders/<name>.wgsl`, but for `copy_x4`. The
/// vec4 encode kernel, `shaders/encode_x4.wgsl`, is specialised per use: see [`EncodeX4`].
pub const KERNELS: &[(&str, &str)] = &[
    ("table", include_str!("../shaders/table.wgsl")),
    ("encode", include_str!("../shaders/encode.wgsl")),
    ("narrow", include_str!("../shaders/narrow.wgsl")),
    ("alibi", include_str!("../shaders/alibi.wgsl")),
    ("alibi_x4", include_str!("../shaders/alibi_x4.wgsl")),
    ("alibi_flat", include_str!("../shaders/alibi_flat.wgsl")),
    ("rope_cs", include_str!("../shaders/rope_cs.wgsl")),
    ("rope", include_str!("../shaders/rope.wgsl")),
];

/// Threads per workgroup of `alibi_x4`, each writing four keys of each of its workgroup's
/// [`ALIBI_X4_ROWS`] rows.
pub const ALIBI_X4_WORKGROUP: u32 = 64;

/// Rows (head, query) each workgroup of `alibi_x4` serves.
pub const ALIBI_X4_ROWS: u32 = 4;

/// Threads per workgroup of kernels that give each workgroup one row and loop along it.
pub const ROW_WORKGROUP_SIZE: u32 = 64;

/// Most threads per workgroup of `encode_x4`: a workgroup covers at most
/// `x4_units(..) * 128` units of a row. See [`x4_workgroup`].
pub const PAIR_WORKGROUP_SIZE: u32 = 128;

/// Units of four elements each invocation of `encode_x4` moves per token: two in the
/// coalesced pattern (GPUs: units `li` and `li + X4_WORKGROUP`), four adjacent ones in the
/// pattern for adapters that run shaders on CPU cores, whose cost is per buffer access: a
/// token's record is loaded once per four units, and a one-token group (every token of a
/// single sequence) pays its group and token records over twice the work. On lavapipe, four
/// against two: llama3-8b 29.5 - 30.5 % -> 33.6 - 36.2 % of the copy ceiling in four
/// interleaved pairs, the D = 768 presets and the default shape within the noise
/// (docs/performance.md).
pub fn x4_units(coalesced: bool) -> u32 {
    if coalesced { 2 } else { 4 }
}

/// Units per invocation of the encode kernels in the coalesced pattern: `chosen`
/// ([`Options::units`](crate::gpu::Options::units)) when given, else 2 for the host-array
/// kernel ([`x4_units`]) and 1 for the recorded one ([`EncodePassX4::shape`]).
pub fn coalesced_units(chosen: Option<u32>, recorded: bool) -> u32 {
    chosen.unwrap_or(if recorded { 1 } else { x4_units(true) })
}

/// Units a step of a recorded encode moves (tokens times vec4 units per row) from which a
/// GPU's pass whose PE rows all come from the cache or a learned table (no PE code in its
/// kernel) takes two units per invocation rather than one ([`recorded_encode_units`]).
pub const ENCODE_PASS_TWO_UNITS_MIN: u64 = 1 << 20;

/// The units per invocation a recorded encode's pass asks of [`EncodePassX4::shape`]:
/// `chosen` ([`Options::units`](crate::gpu::Options::units)) when given; else, on a GPU (the
/// coalesced access pattern), 2 for a pass without PE code (`cached_only`: every row from
/// the cache or a learned table) whose steps move at least [`ENCODE_PASS_TWO_UNITS_MIN`]
/// units; else posenc's default (`None`).
///
/// On an H200 (2026-12-04, docs/performance.md) two units took such a pass's prefill steps
/// from 17.1 to 15.5 us at gpt2 (8 x 1024 tokens of 192 units) and from 25.1 to 23.8 at
/// llama3-8b (2048 of 1024), but from 6.2 to 6.4 at whisper-small (3584 of 192), 6.7 to
/// 6.6 at bert-base (4096 of 192: either way at these sizes), and 2.6 - 2.8 to 2.7 - 3.2
/// us at decode steps of 8 tokens. A kernel with the exact phase's code took 1.2 - 1.7x
/// longer with two units there, so the others keep one.
pub fn recorded_encode_units(
    chosen: Option<u32>,
    coalesced: bool,
    cached_only: bool,
    step_units: u64,
) -> Option<u32> {
    chosen.or((coalesced && cached_only && step_units >= ENCODE_PASS_TWO_UNITS_MIN).then_some(2))
}

/// Threads per workgroup of `encode_x4` for rows of `row_units` units, each thread moving
/// `units` of them ([`x4_units`]): the row is cut into the fewest blocks of at most `units *
/// PAIR_WORKGROUP_SIZE` units, and a workgroup gets just enough threads for one block, in
/// whole warps of 32 (a width-768 row is one block of 96 two-unit threads rather than 128
/// with a quarter idle: 2 - 3 points of the copy ceiling on lavapipe at the D = 768
/// presets).
pub fn x4_workgroup(row_units: u32, units: u32) -> u32 {
    let per_block_max = units * PAIR_WORKGROUP_SIZE;
    let blocks = row_units.div_ceil(per_block_max).max(1);
    let threads = row_units.div_ceil(blocks).div_ceil(units);
    threads.next_multiple_of(32).clamp(32, PAIR_WORKGROUP_SIZE)
}

/// Most tokens one workgroup of `encode_x4` serves from one read of their shared PE row:
/// more saves PE reads, fewer keeps a GPU's workgroups many when a batch shares one
/// position.
pub const MAX_GROUP_TOKENS: u32 = 8;

/// Most table bindings one dispatch of `encode_x4` chooses among; a token's record names
/// its slot in three bits.
pub const MAX_TABLE_SLOTS: u32 = 8;

/// The vec4 encode kernel, `shaders/encode_x4.wgsl`, before its specialisation.
const ENCODE_X4: &str = include_str!("../shaders/encode_x4.wgsl");

/// One specialisation of `shaders/encode_x4.wgsl`: the table and output storage types, how
/// many table bindings one dispatch chooses among, and the access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EncodeX4 {
    /// Table storage type.
    pub table: Dtype,
    /// Output storage type.
    pub out: Dtype,
    /// Table bindings (1 to [`MAX_TABLE_SLOTS`]), at bindings 4 onwards.
    pub slots: u32,
    /// Threads per workgroup: a multiple of 32 up to [`PAIR_WORKGROUP_SIZE`] (see
    /// [`x4_workgroup`]).
    pub workgroup: u32,
    /// The GPU access pattern (each warp instruction touches one contiguous span) rather
    /// than the one for adapters that run shaders on CPU cores (four adjacent units per
    /// invocation, software prefetch).
    pub coalesced: bool,
    /// Units each invocation moves per token: [`x4_units`] for the adjacent pattern, 1, 2,
    /// 4 or 8 for the coalesced one ([`coalesced_units`]).
    pub units: u32,
    /// A GPU form (`coalesced`) on an adapter with WGSL's `unpack2x16float` (wgpu's
    /// `SHADER_F16_IN_F32`): an f16 table or tensor is widened by it ([`F16_UNPACK`]) rather
    /// than by `widen4_f16`. Ignored for other types and for CPU adapters' forms.
    pub f16_unpack: bool,
}

impl EncodeX4 {
    /// Every specialisation posenc may build, for tests that translate each of them.
    pub fn all() -> Vec<Self> {
        let mut all = Vec::new();
        for (table, out, slots) in unit_types() {
            for coalesced in [false, true] {
                for workgroup in (32..=PAIR_WORKGROUP_SIZE).step_by(32) {
                    let units = x4_units(coalesced);
                    let f16_unpack = false;
                    all.push(Self { table, out, slots, coalesced, workgroup, units, f16_unpack });
                }
            }
            for units in [1, 4, 8] {
                let (workgroup, coalesced, f16_unpack) = (PAIR_WORKGROUP_SIZE, true, false);
                all.push(Self { table, out, slots, coalesced, workgroup, units, f16_unpack });
            }
            // GPUs' forms with unpack2x16float (f16 tables only: the others ignore it).
            if table == Dtype::F16 {
                for units in [1, 2] {
                    let (workgroup, coalesced, f16_unpack) = (PAIR_WORKGROUP_SIZE, true, true);
                    all.push(Self { table, out, slots, coalesced, workgroup, units, f16_unpack });
                }
            }
        }
        all
    }

    /// The complete WGSL of this specialisation: prelude, the generated header (word
    /// types, conversions, table bindings), imports, kernel.
    pub fn source(&self) -> String {
        let mut s = prelude();
        s += &format!("const COALESCED: bool = {};\n", self.coalesced);
        s += &format!("const X4_WORKGROUP: u32 = {}u;\n", self.workgroup);
        s += &format!("const UNITS_PER_INVOCATION: u32 = {}u;\n", self.units);
        // Table units per 64-byte cache line, for the prefetch.
        s += &format!("const UNITS_PER_LINE: u32 = {}u;\n", 64 / (4 * self.table.size()));
        unit_header(self.table, self.out, self.slots, 4, self.coalesced, self.f16_unpack, &mut s);
        let mut imported = Vec::new();
        expand(ENCODE_X4, &mut imported, &mut s);
        s
    }
}

/// Every table type, output type and number of table bindings the unit kernels are
/// specialised for, as the tests' `all()` lists walk them.
fn unit_types() -> impl Iterator<Item = (Dtype, Dtype, u32)> {
    let dtypes = [Dtype::F32, Dtype::F16, Dtype::Bf16];
    dtypes.into_iter().flat_map(move |table| {
        dtypes
            .into_iter()
            .flat_map(move |out| (1..=MAX_TABLE_SLOTS).map(move |slots| (table, out, slots)))
    })
}

/// The specialisation both unit kernels (`encode_x4`, `encode_pass_x4`) share: the storage words
/// of a unit of four elements of the table (`TableWord`) and of the output (`OutWord`),
/// `widen`/`narrow` between them and vec4<f32> (an f16 table's widening as
/// [`f16_widening`] picks it for `coalesced`), `slots` table bindings from binding
/// `first_binding` on, and `table_word(slot, i)` choosing among them.
fn unit_header(
    table: Dtype,
    out: Dtype,
    slots: u32,
    first_binding: u32,
    coalesced: bool,
    f16_unpack: bool,
    s: &mut String,
) {
    let word = |d: Dtype| if d == Dtype::F32 { "vec4<u32>" } else { "vec2<u32>" };
    let name = |d: Dtype| match d {
        Dtype::F32 => "f32",
        Dtype::F16 => "f16",
        Dtype::Bf16 => "bf16",
    };
    *s += &format!("alias TableWord = {};\n", word(table));
    *s += &format!("alias OutWord = {};\n", word(out));
    *s += &format!("const TABLE_SLOTS: u32 = {slots}u;\n");
    let unpack = takes_unpack(table, coalesced, f16_unpack);
    let widen = match table {
        Dtype::F16 => f16_widening(coalesced, unpack).to_string(),
        _ => format!("widen4_{}", name(table)),
    };
    if unpack {
        *s += F16_UNPACK;
    }
    *s += &format!("fn widen(w: TableWord) -> vec4<f32> {{ return {widen}(w); }}\n");
    *s += &format!("fn narrow(v: vec4<f32>) -> OutWord {{ return narrow4_{}(v); }}\n", name(out));
    for k in 0..slots {
        *s += &format!(
            "@group(0) @binding({}) var<storage, read> table{k}: array<TableWord>;\n",
            first_binding + k
        );
    }
    *s += "fn table_word(slot: u32, i: u32) -> TableWord {\n    ";
    slot_tree(0, slots, s);
    *s += "\n}\n";
}

/// The vec4 f16 widening (`shaders/shared/convert4.wgsl`) of a kernel built for a GPU
/// (`coalesced`), `widen4_f16` with its short path, or for an adapter that runs shaders on
/// CPU cores, which runs its lanes through both sides of a branch that depends on their
/// values: `widen4_f16_general` alone (convert4 says why). The same bits either way. Both
/// the encode unit kernels ([`unit_header`]'s `widen`) and the RoPE unit
/// ([`RopeUnitKind`]'s `rope_widen_f16`) take it from here.
///
/// `unpack` (a GPU form on an adapter with wgpu's `SHADER_F16_IN_F32`, which every Vulkan,
/// Metal, DX12, GL and WebGPU adapter has but llvmpipe's Vulkan without `SHADER_F16`):
/// `widen4_f16_unpack`, WGSL's `unpack2x16float`, which the header then defines ([`F16_UNPACK`]);
/// the same bits but for which NaN a NaN half becomes, the hardware's.
fn f16_widening(coalesced: bool, unpack: bool) -> &'static str {
    match (coalesced, unpack) {
        (true, true) => "widen4_f16_unpack",
        (true, false) => "widen4_f16",
        (false, _) => "widen4_f16_general",
    }
}

/// The f16 widening of GPU forms on adapters that have WGSL's `unpack2x16float` (wgpu's
/// `SHADER_F16_IN_F32`), prepended by a kernel's header only where it takes it: a module
/// that calls the builtin is refused on an adapter without it, even if nothing runs it.
/// On an H200 (2026-12-04) it took Phi-2's f16 prefill RoPE from 9.24 to 8.28 us a step
/// and Llama-2-13B's f16 decode step from 6.20 to 5.88 (docs/performance.md): the integer
/// widening's test and general form, which no step of normal values takes, cost that much
/// beside its short path. Exact for every half but NaNs on IEEE hardware (f16 to f32 loses
/// nothing); `tests/it/gpu/convert.rs` checks every one of the 65536 on the adapter.
pub const F16_UNPACK: &str = "fn widen4_f16_unpack(w: vec2<u32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}
";

/// Whether a kernel for `dtype` (its table's or tensor's) in the GPU form (`coalesced`) on
/// an adapter with `unpack2x16float` (`unpack`) widens f16 by it ([`F16_UNPACK`]): only f16
/// ones do. The kernels' keys take this, so that one source is one pipeline.
pub fn takes_unpack(dtype: Dtype, coalesced: bool, unpack: bool) -> bool {
    dtype == Dtype::F16 && coalesced && unpack
}

/// Whether kernel source `source` calls `unpack2x16float` ([`F16_UNPACK`], or a diagnostic's
/// rewrite) or `pack2x16float` (a diagnostic's): the one capability a posenc kernel may take
/// (naga's `SHADER_FLOAT16_IN_FLOAT32`, wgpu's `SHADER_F16_IN_F32`, which covers both),
/// which validators must grant it. Every other kernel must need none.
pub fn calls_unpack(source: &str) -> bool {
    // "unpack2x16float(" contains it too.
    source.contains("pack2x16float(")
}

/// The copy ceiling's kernel, `shaders/copy.wgsl`, before its specialisation.
const COPY: &str = include_str!("../shaders/copy.wgsl");

/// Workgroups of a grid-stride [`CopyForm`]: enough to fill a large GPU several times over
/// (an H100 holds 1056 workgroups of 256 threads at once), few enough that each walks many
/// blocks.
pub const COPY_GRID_GROUPS: u32 = 2048;

/// One form of the copy ceiling, `shaders/copy.wgsl` specialised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct CopyForm {
    /// vec4s each invocation moves.
    pub vecs: u32,
    /// Threads per workgroup.
    pub workgroup: u32,
    /// Invocation `li` moves vec4s `li + k * workgroup` of its block (else `vecs` adjacent
    /// vec4s).
    pub coalesced: bool,
    /// [`COPY_GRID_GROUPS`] workgroups walk the blocks (else one workgroup per block).
    pub grid_stride: bool,
}

impl CopyForm {
    /// The trivial dispatch of the dispatch floor, and the classic one-vec4 copy.
    pub const ONE: CopyForm =
        CopyForm { vecs: 1, workgroup: 256, coalesced: true, grid_stride: false };

    /// Every form the bench tries: 1, 2, 4 or 8 vec4s per invocation, 64 or 256 threads,
    /// coalesced or adjacent, and two grid-stride forms.
    pub fn all() -> Vec<Self> {
        let mut all = Vec::new();
        for vecs in [1, 2, 4, 8] {
            for workgroup in [64, 256] {
                for coalesced in [true, false] {
                    if vecs == 1 && !coalesced {
                        continue;
                    }
                    all.push(Self { vecs, workgroup, coalesced, grid_stride: false });
                }
            }
        }
        for vecs in [1, 4] {
            all.push(Self { vecs, workgroup: 256, coalesced: true, grid_stride: true });
        }
        all
    }

    /// vec4s one workgroup moves per block.
    pub fn block(self) -> u32 {
        self.vecs * self.workgroup
    }

    /// A short name: `v4x256c` (4 vec4s, 256 threads, coalesced; `a` adjacent; `g` for a
    /// grid stride).
    pub fn name(self) -> String {
        let pattern = if self.coalesced { "c" } else { "a" };
        let grid = if self.grid_stride { "g" } else { "" };
        format!("v{}x{}{pattern}{grid}", self.vecs, self.workgroup)
    }

    /// The complete WGSL of this form.
    pub fn source(self) -> String {
        let mut s = prelude();
        s += &format!("const COPY_WG: u32 = {}u;\n", self.workgroup);
        s += &format!("const COPY_VECS: u32 = {}u;\n", self.vecs);
        s += &format!("const COPY_COALESCED: bool = {};\n", self.coalesced);
        s += &format!("const COPY_GRID_STRIDE: bool = {};\n", self.grid_stride);
        s += "fn copy_block(base: u32, li: u32) {\n";
        s += "    if base + COPY_WG * COPY_VECS > params.n_vecs {\n";
        s += "        copy_tail(base, li);\n        return;\n    }\n";
        for k in 0..self.vecs {
            s += &format!("    let i{k} = at(base, li, {k}u);\n");
        }
        for k in 0..self.vecs {
            s += &format!("    let v{k} = src[i{k}];\n");
        }
        for k in 0..self.vecs {
            s += &format!("    dst[i{k}] = v{k};\n");
        }
        s += "}\n";
        let mut imported = Vec::new();
        expand(COPY, &mut imported, &mut s);
        s
    }
}

/// Entry points whose workgroup memory every invocation reads only where the workgroup has
/// written it before a barrier: their pipelines are built without WebGPU's zero
/// initialisation of workgroup memory
/// ([`zero_initializes_workgroup_memory`]). `rope_pass` fills its token's cos/sin for
/// frequencies `0..n_freqs` (whole vec4s, `n_freqs / 4` of them) and reads vec4 `f / 4` of
/// a unit's frequencies `f < n_freqs` after the barrier. The initialisation is a loop of
/// stores and a barrier of its own before the kernel's first load: on RADV (ACO, RDNA 2),
/// Llama-3-8B's kernel counts 720 instructions with it and 703 without, and a second
/// barrier per workgroup (`benches/isa`). Keyed by entry point: only
/// [`RopePassKernel`]'s sources are built under that name.
pub const WORKGROUP_MEMORY_WRITTEN_FIRST: &[&str] = &["rope_pass"];

/// Whether posenc asks wgpu to zero `entry`'s workgroup memory before the kernel runs
/// (`wgpu::PipelineCompilationOptions::zero_initialize_workgroup_memory`): all but
/// [`WORKGROUP_MEMORY_WRITTEN_FIRST`]. A browser's WebGPU zeroes it whatever is asked.
/// An internal of posenc's, public for `benches/isa`, like the kernel sources.
pub fn zero_initializes_workgroup_memory(entry: &str) -> bool {
    !WORKGROUP_MEMORY_WRITTEN_FIRST.contains(&entry)
}

/// Entry points whose every loop has been read to end on its own, whatever the parameters
/// and buffer contents: their pipelines are built without wgpu's loop bounding
/// ([`bounds_loops`]). For every other kernel, wgpu (naga, on Vulkan, Metal and DX12) gives
/// each loop a 64-bit counter that breaks out after 2^64 iterations, so that a driver
/// cannot treat a loop that never ends as unreachable. That counter is per-lane state and
/// a test in every loop: on RADV (ACO, RDNA 2; `benches/isa`), the hot path of Llama-3-8B's
/// `rope_pass` counts 255 vector and 194 scalar instructions and 56 vector registers with
/// it, 236, 160 and 48 without. Each loop of these kernels (the [`REVIEWED_LOOPS`]) counts
/// up from a value to a bound fixed before the loop, with no other write to its counter or
/// bound: by one, or by a positive constant to a bound that cannot wrap (`rope_pass`'s
/// fill: `v < n_freqs / 4 < 2^30`, by the workgroup size, which WGSL caps far below 2^31).
/// Keyed by entry point, and checked on each source: a source of one of these entries
/// with any other loop, or a body that writes a header's names, keeps the counter
/// ([`bounds_loops_of`]).
pub const LOOPS_END_BY_CONSTRUCTION: &[&str] =
    &["encode_pass_x4", "encode_x4", "rope_pass", "rope_pass_heads"];

/// The loop headers (whitespace collapsed) that may run without wgpu's loop bounding, each
/// read to end: see [`LOOPS_END_BY_CONSTRUCTION`]. `v` and `c` step by constants (the
/// workgroup size; `UNITS_PER_LINE`, 4 or 8, to at most 32); the rest by one.
pub const REVIEWED_LOOPS: &[&str] = &[
    "for (var c = 0u; c < 4u * UNITS_PER_LINE; c += UNITS_PER_LINE)",
    "for (var h = 0u; h < params.k_heads; h++)",
    "for (var h = 0u; h < params.q_heads; h++)",
    "for (var i = 0u; i < 4u; i++)",
    "for (var j = 0u; j < RP_HEAD_GROUP; j++)",
    "for (var j = 0u; j < X4_UNITS; j++)",
    "for (var j = head.x + 1u; j < end; j++)",
    "for (var j = head.x; j < end; j++)",
    "for (var k = 0u; k < RP_UNITS; k++)",
    "for (var k = 0u; k < UNITS_PER_INVOCATION; k++)",
    "for (var v = li; v < (params.n_freqs >> 2u); v += RP_WORKGROUP)",
];

/// Whether posenc asks wgpu to bound `entry`'s loops (`wgpu::ShaderRuntimeChecks`'s
/// `force_loop_bounding`) by its name alone: all but [`LOOPS_END_BY_CONSTRUCTION`].
/// [`bounds_loops_of`] also reads the source.
pub fn bounds_loops(entry: &str) -> bool {
    !LOOPS_END_BY_CONSTRUCTION.contains(&entry)
}

/// Whether posenc asks wgpu to bound the loops of `source` built for `entry`: unless the
/// entry is one of [`LOOPS_END_BY_CONSTRUCTION`] and every loop of the source is one of
/// the [`REVIEWED_LOOPS`] whose body writes none of its header's names. Bounds checks on
/// memory stay on for every kernel; a browser's WebGPU bounds loops as it chooses. An
/// internal of posenc's, public for `benches/isa`, like the kernel sources.
pub fn bounds_loops_of(entry: &str, source: &str) -> bool {
    bounds_loops(entry)
        || !for_loops(source).is_some_and(|loops| {
            loops.iter().all(|(header, body)| {
                REVIEWED_LOOPS.contains(&header.as_str()) && !writes_header_names(header, body)
            })
        })
}

/// The `for` loops of WGSL `source` (comments dropped), each as its header with whitespace
/// collapsed (`for (...)`) and its body (between its braces); `None` if the source has a
/// `loop` or `while`, or a `for` whose parentheses or braces do not close.
fn for_loops(source: &str) -> Option<Vec<(String, String)>> {
    let code: String = source
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let bytes = code.as_bytes();
    let mut loops = Vec::new();
    for (at, word) in words(&code) {
        match word {
            "loop" | "while" => return None,
            "for" => {}
            _ => continue,
        }
        let open = at + 3 + code[at + 3..].find(|c: char| !c.is_whitespace())?;
        if bytes[open] != b'(' {
            return None;
        }
        let close = matching(bytes, open, b'(', b')')?;
        let header =
            format!("for {}", code[open..=close].split_whitespace().collect::<Vec<_>>().join(" "));
        let brace = close + 1 + code[close + 1..].find(|c: char| !c.is_whitespace())?;
        if bytes[brace] != b'{' {
            return None;
        }
        let end = matching(bytes, brace, b'{', b'}')?;
        loops.push((header, code[brace + 1..end].to_string()));
    }
    Some(loops)
}

/// The byte index of the bracket closing the one at `open`.
fn matching(bytes: &[u8], open: usize, left: u8, right: u8) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        if b == left {
            depth += 1;
        } else if b == right {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// The identifiers and keywords of `code` with their byte offsets.
fn words(code: &str) -> impl Iterator<Item = (usize, &str)> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    code.char_indices().filter_map(move |(i, c)| {
        let starts = is_word(c) && !code[..i].ends_with(is_word);
        starts.then(|| (i, code[i..].split(|c: char| !is_word(c)).next().unwrap_or("")))
    })
}

/// Whether `body` may write a name that `header` reads: an assignment, compound
/// assignment, increment or decrement of it, its address taken, or a declaration that
/// shadows it. Field names (after a `.`) are not names.
fn writes_header_names(header: &str, body: &str) -> bool {
    let names: Vec<&str> = words(header)
        .filter(|&(at, w)| {
            !w.starts_with(|c: char| c.is_ascii_digit())
                && !matches!(w, "for" | "var")
                && !header[..at].ends_with('.')
        })
        .map(|(_, w)| w)
        .collect();
    words(body).any(|(at, w)| {
        if !names.contains(&w) || body[..at].ends_with('.') {
            return false;
        }
        let before = body[..at].trim_end();
        let after = body[at + w.len()..].trim_start();
        let assigns = after.starts_with('=') && !after.starts_with("==");
        let compound = ["+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "++", "--"]
            .iter()
            .any(|op| after.starts_with(op));
        let declared =
            before.ends_with("let") || before.ends_with("var") || before.ends_with("const");
        assigns || compound || before.ends_with('&') || declared
    })
}

/// The host-array RoPE kernel for whole units, `shaders/rope_x4.wgsl`, before its
/// specialisation.
const ROPE_X4: &str = include_str!("../shaders/rope_x4.wgsl");

/// The recorded RoPE step, `shaders/rope_pass.wgsl`, before its specialisation.
const ROPE_PASS: &str = include_str!("../shaders/rope_pass.wgsl");

/// Threads per workgroup of `rope_pass_heads`, and of `rope_pass` for few tokens
/// ([`rope_pass_workgroup`]).
pub const ROPE_PASS_WORKGROUP: u32 = 128;

/// Fewest threads per workgroup of `rope_pass` ([`rope_pass_workgroup`]): smaller ones
/// would cap a GPU's occupancy by its resident workgroups per core (32 on NVIDIA's) rather
/// than by its threads.
pub const ROPE_PASS_MIN_WORKGROUP: u32 = 64;

/// Most threads per workgroup of `rope_pass`: WebGPU's default
/// `max_compute_invocations_per_workgroup`.
pub const ROPE_PASS_MAX_WORKGROUP: u32 = 256;

/// Fewest tokens a `rope_pass` dispatch takes for [`rope_pass_workgroup`] to fit its
/// workgroups to the token's units; fewer take [`ROPE_PASS_WORKGROUP`] threads. On an H100
/// (2026-11-27) the fitted workgroups took Llama-3-8B's prefill RoPE (2048 tokens) from
/// 18.1 to 16.1 us a step, and made the decode steps' RoPE (8 tokens, one wave of a few
/// dozen workgroups) 4 - 7 % slower at every preset (docs/performance.md). Measured at those
/// two token counts only.
pub const ROPE_PASS_FIT_MIN_TOKENS: u64 = 256;

/// Threads per workgroup of `rope_pass` for `tokens` tokens of `units` units each (q's and
/// k's heads), each thread rotating `per` of them. From [`ROPE_PASS_FIT_MIN_TOKENS`] tokens
/// on: the multiple of 32 from [`ROPE_PASS_MIN_WORKGROUP`] to [`ROPE_PASS_MAX_WORKGROUP`]
/// whose blocks leave the fewest threads idle, and of those the one with the fewest blocks
/// (each block puts its token's cos/sin in workgroup memory once). A fixed 128 left a sixth
/// of Llama-3-8B's threads idle (40 heads of 8 units: blocks of 128, 128 and 64), where 160
/// fits two blocks exactly; Llama-2-13B's 640 units take four blocks of 160, Llama-3-70B's
/// 576 three of 192. Fewer tokens take [`ROPE_PASS_WORKGROUP`].
pub fn rope_pass_workgroup(tokens: u64, units: u64, per: u32) -> u32 {
    if tokens < ROPE_PASS_FIT_MIN_TOKENS {
        return ROPE_PASS_WORKGROUP;
    }
    let cost = |threads: u32| {
        let block = u64::from(threads * per);
        let blocks = units.div_ceil(block).max(1);
        (blocks * block - units, blocks)
    };
    (ROPE_PASS_MIN_WORKGROUP..=ROPE_PASS_MAX_WORKGROUP)
        .step_by(32)
        .min_by_key(|&threads| cost(threads))
        .unwrap_or(ROPE_PASS_MAX_WORKGROUP)
}

/// Most vec4s of cos (and of sin) a `rope_pass` workgroup holds: 1024 frequencies, 8 KiB
/// of workgroup memory in all, within WebGPU's default 16 KiB. Larger rotary dims take the
/// two-dispatch path.
pub const ROPE_PASS_MAX_FREQ_VECS: u32 = 256;

/// What the RoPE unit kernels (`rope_x4`, `rope_pass`; `shaders/shared/rope_unit.wgsl`) are
/// specialised for: the storage type, the pairing and the kind of adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RopeUnitKind {
    /// Element type of the tensor.
    pub dtype: Dtype,
    /// Neox pairing (frequency `i` rotates dimensions `i` and `i + r/2`); else gptj.
    pub neox: bool,
    /// Built for a GPU (the coalesced access pattern) rather than for an adapter that runs
    /// shaders on CPU cores, which widens f16 without the short path
    /// (`widen4_f16_general` in `shaders/shared/convert4.wgsl` says why); the same bits.
    pub coalesced: bool,
    /// A GPU form (`coalesced`) on an adapter with WGSL's `unpack2x16float` (wgpu's
    /// `SHADER_F16_IN_F32`): an f16 table or tensor is widened by it ([`F16_UNPACK`]) rather
    /// than by `widen4_f16`. Ignored for other types and for CPU adapters' forms.
    pub f16_unpack: bool,
}

impl RopeUnitKind {
    /// Every storage type and pairing, for GPUs and for CPU adapters.
    pub fn all() -> Vec<Self> {
        let mut all = Vec::new();
        for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
            for neox in [true, false] {
                for coalesced in [true, false] {
                    all.push(Self { dtype, neox, coalesced, f16_unpack: false });
                }
                if dtype == Dtype::F16 {
                    all.push(Self { dtype, neox, coalesced: true, f16_unpack: true });
                }
            }
        }
        all
    }

    /// Frequencies one unit rotates: 8 for a neox unit of 16-bit elements (a vec4 of each
    /// half), else 4.
    pub fn unit_freqs(self) -> u32 {
        if self.neox && self.dtype != Dtype::F32 { 8 } else { 4 }
    }

    fn header(self, s: &mut String) {
        *s += &format!("const ROPE_DTYPE: u32 = {}u;\n", self.dtype.code());
        *s += &format!("const ROPE_F32: bool = {};\n", self.dtype == Dtype::F32);
        *s += &format!("const ROPE_NEOX: bool = {};\n", self.neox);
        *s += &format!("const ROPE_UNIT_FREQS: u32 = {}u;\n", self.unit_freqs());
        let unpack = takes_unpack(self.dtype, self.coalesced, self.f16_unpack);
        if unpack {
            *s += F16_UNPACK;
        }
        *s += &format!(
            "fn rope_widen_f16(w: vec2<u32>) -> vec4<f32> {{ return {}(w); }}\n",
            f16_widening(self.coalesced, unpack)
        );
    }

    /// The complete WGSL of `shaders/rope_x4.wgsl` for this kind.
    pub fn x4_source(self) -> String {
        let mut s = prelude();
        self.header(&mut s);
        let mut imported = Vec::new();
        expand(ROPE_X4, &mut imported, &mut s);
        s
    }
}

/// One specialisation of `shaders/rope_pass.wgsl`: the unit kind, the units per head row,
/// the room for cos/sin in workgroup memory, and the form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RopePassKernel {
    /// Storage type and pairing.
    pub unit: RopeUnitKind,
    /// Units per head row (the frequencies over [`RopeUnitKind::unit_freqs`]), a constant
    /// of the kernel so that finding a unit's head and place in its row divides by a
    /// constant (a shift for the usual powers of two) rather than by a parameter.
    pub row_units: u32,
    /// vec4s of cos (and of sin) a workgroup holds: a power of two, at least a quarter of
    /// the frequencies, at most [`ROPE_PASS_MAX_FREQ_VECS`].
    pub freq_vecs: u32,
    /// How the step's work is cut among invocations.
    pub form: RopePassForm,
    /// A multimodal step: three positions per token, each frequency turning by its axis's
    /// ([`RopePassKernel::with_axes`]).
    pub axes: bool,
}

/// The two forms of the recorded RoPE step (`shaders/rope_pass.wgsl` says why each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopePassForm {
    /// `rope_pass`, for GPUs: one workgroup per block of a token's units, cos/sin shared
    /// through workgroup memory; `units` per invocation.
    Blocks {
        /// Units each invocation rotates.
        units: u32,
        /// Threads per workgroup ([`rope_pass_workgroup`]).
        workgroup: u32,
    },
    /// `rope_pass_heads`: one invocation per unit of a token's head row, walking every
    /// head of q and k (`group` 0: for adapters that run shaders on CPU cores), or the heads
    /// of one group of `group` (a GPU form, [`crate::gpu::Options::rope_heads`]).
    Heads {
        /// Heads each invocation rotates (q's, then k's, cut into groups of this many); 0:
        /// all of them.
        group: u32,
    },
}

impl RopePassKernel {
    /// The specialisation for `n_freqs` frequencies (a multiple of the unit's), or `None`
    /// when they exceed [`ROPE_PASS_MAX_FREQ_VECS`] vec4s.
    pub fn new(unit: RopeUnitKind, n_freqs: u32, form: RopePassForm) -> Option<Self> {
        let freq_vecs = match form {
            RopePassForm::Blocks { .. } => (n_freqs / 4).next_power_of_two().max(2),
            // The heads forms keep cos/sin in registers.
            RopePassForm::Heads { .. } => 2,
        };
        let row_units = n_freqs / unit.unit_freqs();
        (freq_vecs <= ROPE_PASS_MAX_FREQ_VECS).then_some(Self {
            unit,
            row_units,
            freq_vecs,
            form,
            axes: false,
        })
    }

    /// This specialisation for a multimodal step (M-RoPE): each token's positions are three
    /// (time, height and width), and each frequency turns by the one of its axis, as the
    /// host-array path's cos/sin pass gathers them.
    pub fn with_axes(self) -> Self {
        Self { axes: true, ..self }
    }

    /// Representative specialisations for tests that translate each: every unit kind with
    /// the least and the most room, and in the heads form; the form for CPU adapters as
    /// they build it, the others as GPUs do.
    pub fn all() -> Vec<Self> {
        RopeUnitKind::all()
            .into_iter()
            .flat_map(|unit| {
                [
                    (2, RopePassForm::Blocks { units: 1, workgroup: ROPE_PASS_MIN_WORKGROUP }),
                    (2, RopePassForm::Blocks { units: 1, workgroup: ROPE_PASS_WORKGROUP }),
                    (2, RopePassForm::Blocks { units: 1, workgroup: 160 }),
                    (
                        ROPE_PASS_MAX_FREQ_VECS,
                        RopePassForm::Blocks { units: 4, workgroup: ROPE_PASS_MAX_WORKGROUP },
                    ),
                    (2, RopePassForm::Heads { group: 0 }),
                    (2, RopePassForm::Heads { group: 3 }),
                ]
                .map(|(freq_vecs, form)| {
                    let row_units = match form {
                        // As many as the room holds.
                        RopePassForm::Blocks { .. } => 4 * freq_vecs / unit.unit_freqs(),
                        RopePassForm::Heads { .. } => 8,
                    };
                    Self { unit, row_units, freq_vecs, form, axes: false }
                })
            })
            .filter(|k| k.unit.coalesced != matches!(k.form, RopePassForm::Heads { group: 0 }))
            .flat_map(|k| {
                // The multimodal form of the most room and of the heads forms.
                let multimodal = k.freq_vecs == ROPE_PASS_MAX_FREQ_VECS
                    || matches!(k.form, RopePassForm::Heads { .. });
                [Some(k), multimodal.then(|| k.with_axes())]
            })
            .flatten()
            .collect()
    }

    /// The entry point of this form.
    pub fn entry(self) -> &'static str {
        match self.form {
            RopePassForm::Blocks { .. } => "rope_pass",
            RopePassForm::Heads { .. } => "rope_pass_heads",
        }
    }

    /// The complete WGSL of this specialisation.
    pub fn source(self) -> String {
        let (units, workgroup, group) = match self.form {
            RopePassForm::Blocks { units, workgroup } => (units, workgroup, 0),
            RopePassForm::Heads { group } => (1, ROPE_PASS_WORKGROUP, group),
        };
        let row_units = self.row_units;
        let mut s = prelude();
        self.unit.header(&mut s);
        s += &format!("const RP_WORKGROUP: u32 = {workgroup}u;\n");
        s += &format!("const RP_FREQ_VECS: u32 = {}u;\n", self.freq_vecs);
        s += &format!("const RP_UNITS: u32 = {units}u;\n");
        s += &format!("const RP_ROW_UNITS: u32 = {row_units}u;\n");
        s += &format!("const RP_HEAD_GROUP: u32 = {group}u;\n");
        s += &format!("const RP_GROUP_SLOTS: u32 = {}u;\n", group.max(1));
        s += &format!("const RP_AXES: bool = {};\n", self.axes);
        let mut imported = Vec::new();
        expand(ROPE_PASS, &mut imported, &mut s);
        s
    }
}

/// The recorded encode's unit kernel, `shaders/encode_pass_x4.wgsl`, before its specialisation.
const ENCODE_PASS_X4: &str = include_str!("../shaders/encode_pass_x4.wgsl");

/// Most threads per workgroup of `encode_pass_x4`.
pub const ENCODE_PASS_X4_MAX_WORKGROUP: u32 = 256;

/// One specialisation of `shaders/encode_pass_x4.wgsl`, the recorded encode for rows of whole
/// units of four elements: table and output storage types, table bindings, units per
/// invocation and threads per workgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EncodePassX4 {
    /// Table storage type.
    pub table: Dtype,
    /// Output storage type.
    pub out: Dtype,
    /// Table bindings (1 to [`MAX_TABLE_SLOTS`]), at bindings 6 onwards (4 in the compact
    /// layout).
    pub slots: u32,
    /// Units of four elements each invocation moves (1 on GPUs; more on adapters that run
    /// shaders on CPU cores, where each invocation has a fixed cost).
    pub units: u32,
    /// Threads per workgroup: a multiple of 32 up to [`ENCODE_PASS_X4_MAX_WORKGROUP`].
    pub workgroup: u32,
    /// 0: every token; 1: the tokens whose positions are cached, with no PE computation
    /// compiled in; 2: the tokens `encode_pass_scan` listed (see `shaders/encode_pass_x4.wgsl`).
    pub stage: u32,
    /// The buffer layout of devices with fewer than 6 storage buffers per shader stage
    /// (see [`encode_pass_bindings`](crate::gpu::layout::encode_pass_bindings)).
    pub compact: bool,
    /// Built for a GPU (the coalesced access pattern) rather than for an adapter that runs
    /// shaders on CPU cores, which widens f16 without the short path
    /// (`widen4_f16_general` in `shaders/shared/convert4.wgsl` says why); the same bits.
    pub coalesced: bool,
    /// A GPU form (`coalesced`) on an adapter with WGSL's `unpack2x16float` (wgpu's
    /// `SHADER_F16_IN_F32`): an f16 table or tensor is widened by it ([`F16_UNPACK`]) rather
    /// than by `widen4_f16`. Ignored for other types and for CPU adapters' forms.
    pub f16_unpack: bool,
}

impl EncodePassX4 {
    /// The units per invocation and threads per workgroup for rows of `row_units` units:
    /// the row is cut into the fewest blocks of at most `units *
    /// ENCODE_PASS_X4_MAX_WORKGROUP` units (`units` 1 for the coalesced access pattern, 4 for
    /// the adjacent one), and a workgroup gets just enough whole warps of 32 threads for
    /// one block.
    ///
    /// On lavapipe a Llama-3 row (1024 units) in one block of 256 threads, one workgroup
    /// per token, ran a decode step of 8 tokens in 0.27 - 0.34 ms against 0.63 ms in four
    /// blocks of 64 threads (32 workgroups); serving several tokens per workgroup was
    /// slower again (docs/performance.md, 2026-11-23).
    pub fn shape(row_units: u32, coalesced: bool, chosen: Option<u32>) -> (u32, u32) {
        let units = if coalesced { coalesced_units(chosen, true) } else { 4 };
        let blocks = row_units.div_ceil(units * ENCODE_PASS_X4_MAX_WORKGROUP).max(1);
        let threads = row_units.div_ceil(blocks).div_ceil(units);
        (units, threads.next_multiple_of(32).clamp(32, ENCODE_PASS_X4_MAX_WORKGROUP))
    }

    /// Representative specialisations for tests that translate each: every table and
    /// output type and number of slots, at both access patterns' unit counts and the
    /// smallest and largest workgroups, and the split stages as CPU adapters build them
    /// (the rest differ only in those constants); 4 units per invocation as CPU adapters
    /// build them, the others as GPUs do.
    /// The compact layout's too, with every number of table slots: a device of 4 or 5
    /// storage buffers binds one or two, and a record whose output shares its ids' buffer
    /// (an engine's arena) takes the compact layout on any device.
    pub fn all() -> Vec<Self> {
        let mut all = Vec::new();
        for (table, out, slots) in unit_types() {
            for (units, workgroup, stage) in [
                (1, 32, 0),
                (1, ENCODE_PASS_X4_MAX_WORKGROUP, 0),
                (2, ENCODE_PASS_X4_MAX_WORKGROUP, 0),
                // A GPU's bounded pass of a prefill's size (recorded_encode_units).
                (2, ENCODE_PASS_X4_MAX_WORKGROUP, 1),
                (8, 128, 0),
                (4, 64, 0),
                (4, ENCODE_PASS_X4_MAX_WORKGROUP, 1),
                (4, ENCODE_PASS_X4_MAX_WORKGROUP, 2),
            ] {
                let coalesced = units != 4;
                let v = Self {
                    table,
                    out,
                    slots,
                    units,
                    workgroup,
                    stage,
                    compact: false,
                    coalesced,
                    f16_unpack: false,
                };
                all.push(v);
                if workgroup == ENCODE_PASS_X4_MAX_WORKGROUP {
                    all.push(Self { compact: true, ..v });
                }
                // GPUs' forms with unpack2x16float (f16 tables only: the others ignore it).
                if coalesced && table == Dtype::F16 {
                    all.push(Self { f16_unpack: true, ..v });
                }
            }
        }
        all
    }

    /// The complete WGSL of this specialisation.
    pub fn source(&self) -> String {
        let mut s = prelude();
        s += &format!("const X4_UNITS: u32 = {}u;\n", self.units);
        s += &format!("const X4_WORKGROUP: u32 = {}u;\n", self.workgroup);
        s += &format!("const STAGE: u32 = {}u;\n", self.stage);
        let tables = encode_pass_io(self.compact, "vec4<u32>", "OutWord", &mut s);
        let (coalesced, unpack) = (self.coalesced, self.f16_unpack);
        unit_header(self.table, self.out, self.slots, tables, coalesced, unpack, &mut s);
        let mut imported = Vec::new();
        expand(ENCODE_PASS_X4, &mut imported, &mut s);
        s
    }
}

/// The recorded encode kernel, `shaders/encode_pass.wgsl`, before its specialisation.
const ENCODE_PASS: &str = include_str!("../shaders/encode_pass.wgsl");

/// The complete WGSL of `shaders/encode_pass.wgsl` (entry point `encode_pass`) with `slots` table
/// bindings (1 to [`MAX_TABLE_SLOTS`]), each an `array<u32>` of one table chunk, in the
/// full or the `compact` buffer layout (see `encode_pass_io` in this module's source).
pub fn encode_pass_source(slots: u32, compact: bool) -> String {
    let mut s = prelude();
    s += &format!("const TABLE_SLOTS: u32 = {slots}u;\n");
    let tables = encode_pass_io(compact, "u32", "u32", &mut s);
    for k in 0..slots {
        s += &format!(
            "@group(0) @binding({}) var<storage, read> table{k}: array<u32>;\n",
            tables + k
        );
    }
    s += "fn table_word(slot: u32, i: u32) -> u32 {\n    ";
    slot_tree(0, slots, &mut s);
    s += "\n}\n";
    let mut imported = Vec::new();
    expand(ENCODE_PASS, &mut imported, &mut s);
    s
}

/// The buffers of the recorded encode's kernels (`encode_pass`, `encode_pass_x4`) and how they
/// reach ids, positions and frequency steps, in one of two layouts (the host binds to match:
/// `crate::gpu::layout::encode_pass_bindings`); returns the first table binding.
///
/// - Full: ids (1), positions (2), `cache` (3), `state` (4: the fault counters, then the
///   frequency steps) and `out` (5), table slots from 6: 5 storage buffers and the slots.
/// - Compact, for devices of fewer than 6 storage buffers per shader stage (WebGPU's
///   downlevel limits allow 4): `state` (1) also holds a copy of the step's ids and
///   positions, which the pass records a buffer copy into before its dispatches; `cache`
///   (2), `out` (3), table slots from 4: 3 storage buffers and the slots. Word indices
///   into ids and positions count from the buffer's start in both layouts.
fn encode_pass_io(compact: bool, cache_word: &str, out_word: &str, s: &mut String) -> u32 {
    let state = |steps: &str| {
        format!(
            "struct State {{\n    // [0]: tokens whose id was outside the vocabulary; [1]: the \
             largest such id; [2]:\n    // tokens of a learned table whose position had no \
             row; [3]: the largest such position.\n    faults: array<atomic<u32>, 4>,\n    \
             {steps}\n}}\n"
        )
    };
    let binding = |k: u32, access: &str, name: &str, ty: &str| {
        format!("@group(0) @binding({k}) var<storage, {access}> {name}: {ty};\n")
    };
    if compact {
        *s += &state("words: array<u32>,");
        *s += &binding(1, "read_write", "state", "State");
        *s += &binding(2, "read", "cache", &format!("array<{cache_word}>"));
        *s += &binding(3, "read_write", "out", &format!("array<{out_word}>"));
        // `words` starts after the 4 fault counters.
        *s += "fn id_word(i: u32) -> u32 { return state.words[i - 4u]; }\n";
        *s += "fn position_word(i: u32) -> u32 { return state.words[i - 4u]; }\n";
        *s += "fn freq_step(k: u32) -> vec2<u32> {\n    \
               return vec2<u32>(state.words[2u * k], state.words[2u * k + 1u]);\n}\n";
        4
    } else {
        *s += &state("steps: array<vec2<u32>>,");
        *s += &binding(1, "read", "ids", "array<u32>");
        *s += &binding(2, "read", "positions", "array<u32>");
        *s += &binding(3, "read", "cache", &format!("array<{cache_word}>"));
        *s += &binding(4, "read_write", "state", "State");
        *s += &binding(5, "read_write", "out", &format!("array<{out_word}>"));
        *s += "fn id_word(i: u32) -> u32 { return ids[i]; }\n";
        *s += "fn position_word(i: u32) -> u32 { return positions[i]; }\n";
        *s += "fn freq_step(k: u32) -> vec2<u32> { return state.steps[k]; }\n";
        6
    }
}

/// The complete WGSL of `shaders/encode_pass_scan.wgsl`, the first dispatch of a split recorded
/// encode.
pub fn encode_pass_scan_source() -> String {
    let mut s = prelude();
    let mut imported = Vec::new();
    expand(include_str!("../shaders/encode_pass_scan.wgsl"), &mut imported, &mut s);
    s
}

/// The body of `table_word(slot, i)` over bindings `table{lo}..table{hi}`: a binary tree
/// of ifs. On a GPU every branch is uniform (all invocations serve the same token), and on
/// lavapipe it measured no slower than a switch (0.09 to 0.14 ms against 0.11 to 0.12 ms
/// for an 8-chunk decode step).
fn slot_tree(lo: u32, hi: u32, out: &mut String) {
    if hi - lo == 1 {
        *out += &format!("return table{lo}[i];");
        return;
    }
    let mid = (lo + hi).div_ceil(2);
    *out += &format!("if slot < {mid}u {{ ");
    slot_tree(lo, mid, out);
    *out += " } else { ";
    slot_tree(mid, hi, out);
    *out += " }";
}

/// `(name, value)` of each listed constant, the name taken from the Rust item.
macro_rules! named {
    ($($name:ident),* $(,)?) => {
        &[$((stringify!($name), $name)),*]
    };
}

/// The `u32` constants of every kernel's prelude, under their Rust names.
const PRELUDE_U32: &[(&str, u32)] = named![
    WORKGROUP_SIZE,
    ROW_WORKGROUP_SIZE,
    ALIBI_X4_WORKGROUP,
    ALIBI_X4_ROWS,
    MAX_GROUP_TOKENS,
    DTYPE_F32,
    DTYPE_F16,
    DTYPE_BF16,
    FLAG_SCALE,
    FLAG_PAD_ID,
    FLAG_OFFSETS,
    FLAG_FIRST_WINDOW,
    FLAG_LEARNED,
    FLAG_AXES,
    FLAG_INTERLEAVED,
    FLAG_ALTERNATING,
    FLAG_F32,
    FLAG_PADDING,
    FLAG_ZERO_COL,
    PAIRING_NEOX,
    PAIRING_GPTJ,
    PAD,
    SLOT_SHIFT,
    ROW_MASK,
];

/// What every kernel starts with: the constants it shares with the host and the CPU twins.
fn prelude() -> String {
    let mut s = String::new();
    for (name, value) in PRELUDE_U32 {
        s += &format!("const {name}: u32 = {value}u;\n");
    }
    s += &format!("const F32_STEP_BIAS: i32 = {};\n", crate::exact::F32_STEP_BIAS);
    s += &format!("const F32_STEPS: u32 = {}u;\n", crate::exact::F32_STEPS);
    for (k, c) in SIN_COEFFS.iter().enumerate() {
        s += &format!("const SIN_S{k}: u32 = {c}u;\n");
    }
    for (k, c) in COS_COEFFS.iter().enumerate() {
        s += &format!("const COS_C{k}: u32 = {c}u;\n");
    }
    s
}

/// Every kernel source posenc may compile, as `(name, entry point, WGSL)`: each of
/// [`KERNELS`], then every [`EncodeX4`] specialisation (named by its fields), then `encode_pass`
/// with each number of table slots.
pub fn all_sources() -> Vec<(String, &'static str, String)> {
    let mut all: Vec<_> =
        KERNELS.iter().map(|(name, _)| (name.to_string(), *name, source(name))).collect();
    for v in EncodeX4::all() {
        all.push((format!("{v:?}"), "encode_x4", v.source()));
    }
    for slots in 1..=MAX_TABLE_SLOTS {
        all.push((
            format!("encode_pass(slots: {slots})"),
            "encode_pass",
            encode_pass_source(slots, false),
        ));
    }
    for slots in 1..=MAX_TABLE_SLOTS {
        let name = format!("encode_pass(slots: {slots}, compact)");
        all.push((name, "encode_pass", encode_pass_source(slots, true)));
    }
    for v in EncodePassX4::all() {
        all.push((format!("{v:?}"), "encode_pass_x4", v.source()));
    }
    all.push(("encode_pass_scan".to_string(), "encode_pass_scan", encode_pass_scan_source()));
    for form in CopyForm::all() {
        all.push((format!("copy({})", form.name()), "copy", form.source()));
    }
    for kind in RopeUnitKind::all() {
        all.push((format!("rope_x4({kind:?})"), "rope_x4", kind.x4_source()));
    }
    for v in RopePassKernel::all() {
        all.push((format!("{v:?}"), v.entry(), v.source()));
    }
    all
}

/// The complete WGSL of kernel `name` (see [`KERNELS`]): prelude, imports, kernel.
///
/// # Panics
/// If `name` is not a kernel or imports an unknown module: both are programming errors
/// that the shader tests catch.
pub fn source(name: &str) -> String {
    let (_, kernel) = KERNELS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no kernel named {name}"));
    compose(kernel).expect("posenc's kernels import only its own modules")
}

/// `src` as a complete WGSL source: the prelude every kernel starts with (the constants it
/// shares with the host and the CPU twins), then `src` with each `#import NAME` line replaced
/// by the shared module `shaders/shared/NAME.wgsl` (once, with its own imports). A caller's
/// own kernel can so use posenc's exact conversions (`#import convert4`: the functions of
/// [`crate::convert`], with the same bits) or its sine and cosine. A line is an import when,
/// trimmed, it begins with `#import `, wherever it is (comments are not parsed).
///
/// The modules' functions and the prelude's constants are posenc's internals, not part of
/// its stable API: their names and signatures may change in any release. Pin posenc's
/// version where a kernel of yours calls them.
///
/// # Errors
/// [`Error::InvalidParameter`] (field `import`) naming a module posenc does not have; the
/// modules are `convert`, `convert4`, `intmath`, `sincos`, `f32_angle`, `pe_phase`,
/// `rope_unit`, `mrope_axis`, `alibi_common`, `rounded`, `encode_pass_params` and
/// `encode_pass_common`.
pub fn compose(src: &str) -> Result<String> {
    let mut out = prelude();
    let mut imported = Vec::new();
    try_expand(src, &mut imported, &mut out)?;
    Ok(out)
}

/// [`try_expand`] of one of posenc's own sources, which import only its modules (the shader
/// tests compile every one).
fn expand(src: &str, imported: &mut Vec<&'static str>, out: &mut String) {
    try_expand(src, imported, out).expect("posenc's kernels import only its own modules");
}

/// Appends `src` to `out` with its imports expanded, each module once (`imported` lists
/// those already in `out`).
fn try_expand(src: &str, imported: &mut Vec<&'static str>, out: &mut String) -> Result<()> {
    for line in src.lines() {
        if let Some(name) = line.trim().strip_prefix("#import ") {
            let name = name.trim();
            let Some((module_name, module)) = MODULES.iter().find(|(n, _)| *n == name) else {
                return Err(Error::InvalidParameter {
                    field: "import",
                    value: name.to_string(),
                    allowed: "a shared module of posenc's: convert, convert4, intmath, sincos, \
                              f32_angle, pe_phase, rope_unit, mrope_axis, alibi_common, \
                              rounded, encode_pass_params, encode_pass_common",
                });
            };
            if !imported.contains(module_name) {
                imported.push(module_name);
                try_expand(module, imported, out)?;
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kernels built for adapters that run shaders on CPU cores widen f16 by the general
    /// form alone, GPUs' by the short path (`shaders/shared/convert4.wgsl`), or by
    /// unpack2x16float where the adapter has it, which only those sources define: a flipped
    /// flag would give the same bits, so only the sources can tell.
    #[test]
    fn the_f16_widening_follows_the_access_pattern_and_the_adapter() {
        for (coalesced, f16_unpack) in [(true, false), (false, false), (true, true), (false, true)]
        {
            let widen = f16_widening(coalesced, f16_unpack);
            let want = format!("fn widen(w: TableWord) -> vec4<f32> {{ return {widen}(w); }}");
            let defined = coalesced && f16_unpack;
            let (table, out, slots) = (Dtype::F16, Dtype::F32, 1);
            let units = x4_units(coalesced);
            let x4 = EncodeX4 { table, out, slots, workgroup: 64, coalesced, units, f16_unpack }
                .source();
            let (units, workgroup, stage, compact) = (4, 64, 0, false);
            let pass = EncodePassX4 {
                table,
                out,
                slots,
                units,
                workgroup,
                stage,
                compact,
                coalesced,
                f16_unpack,
            }
            .source();
            let rope =
                format!("fn rope_widen_f16(w: vec2<u32>) -> vec4<f32> {{ return {widen}(w); }}");
            let kind = RopeUnitKind { dtype: Dtype::F16, neox: true, coalesced, f16_unpack };
            let form = RopePassForm::Heads { group: 0 };
            let rope_pass = RopePassKernel::new(kind, 64, form).unwrap().source();
            for (what, source, want) in [
                ("encode_x4", &x4, &want),
                ("encode_pass_x4", &pass, &want),
                ("rope_x4", &kind.x4_source(), &rope),
                ("rope_pass", &rope_pass, &rope),
            ] {
                let case = format!("{what}, coalesced {coalesced}, f16_unpack {f16_unpack}");
                assert!(source.contains(want.as_str()), "{case}");
                assert_eq!(calls_unpack(source), defined, "{case}");
            }
        }
        // bf16 and f32 tables widen as before whatever the pattern and the adapter, and
        // define no unpack.
        for f16_unpack in [false, true] {
            let x4 = EncodeX4 {
                table: Dtype::Bf16,
                out: Dtype::F16,
                slots: 1,
                workgroup: 64,
                coalesced: true,
                units: 1,
                f16_unpack,
            };
            let source = x4.source();
            assert!(source.contains("{ return widen4_bf16(w); }"));
            assert!(!calls_unpack(&source));
        }
    }

    /// docs/guarantees.md says how many sources the platforms' validators check.
    #[test]
    fn the_documented_number_of_kernel_sources() {
        // The recorded RoPE: 6 forms per unit kind, 3 of them also multimodal.
        // rope_x4: 6 unit kinds, each built for GPUs and for CPU adapters.
        let (types, copy, rope_x4, rope_pass) = (9 * 8, 16, 2 * 6, 6 * (6 + 3));
        // GPU forms that widen f16 by unpack2x16float: per f16 table's (out, slots) pair,
        // encode_x4 with 1 and 2 units and encode_pass_x4's 5 coalesced forms; and the two
        // f16 GPU unit kinds' rope_x4 and rope_pass (each its 7 GPU forms).
        let unpack_sources = |kernel: &str| {
            all_sources()
                .iter()
                .filter(|(name, entry, _)| {
                    entry.starts_with(kernel) && name.contains("f16_unpack: true")
                })
                .count()
        };
        assert_eq!(unpack_sources("encode_x4"), 3 * 8 * 2);
        assert_eq!(unpack_sources("encode_pass_x4"), 3 * 8 * 5);
        assert_eq!(unpack_sources("rope_x4"), 2);
        assert_eq!(unpack_sources("rope_pass"), 2 * 7);
        let unpack = 3 * 8 * (2 + 5) + 2 + 2 * 7;
        assert_eq!(
            all_sources().len(),
            8 + types * (2 * 4 + 3) + 2 * 8 + types * 13 + 1 + copy + rope_x4 + rope_pass + unpack
        );
        assert_eq!(all_sources().len(), 2019);
    }

    /// The list of kernels built without the zeroing names kernels that declare workgroup
    /// memory, and the set of kernels that declare any is pinned: a new one fails here
    /// until someone has read whether it writes before it reads, and either listed it or
    /// left it zeroed (then add it to the set). That each listed kernel really writes
    /// first is read from its source (its comment says why); the bit-for-bit tests run it.
    #[test]
    fn every_kernel_with_workgroup_memory_is_zeroed_or_checked() {
        let sources = all_sources();
        let declaring: std::collections::BTreeSet<&str> = sources
            .iter()
            .filter(|(_, _, src)| src.contains("var<workgroup>"))
            .map(|(_, e, _)| *e)
            .collect();
        for entry in WORKGROUP_MEMORY_WRITTEN_FIRST {
            assert!(!zero_initializes_workgroup_memory(entry));
            assert!(
                declaring.contains(entry),
                "{entry} is listed but declares no workgroup memory"
            );
        }
        assert_eq!(
            declaring.into_iter().collect::<Vec<_>>(),
            ["rope_pass", "rope_pass_heads"],
            "kernels declaring workgroup memory: check each new one (see this test's doc)"
        );
        assert!(zero_initializes_workgroup_memory("rope_pass_heads"));
        assert!(zero_initializes_workgroup_memory("encode_pass_x4"));
    }

    /// Every source posenc validates for an entry of [`LOOPS_END_BY_CONSTRUCTION`] passes
    /// the check of [`bounds_loops_of`], every reviewed header occurs in one, and the kernels
    /// with loops by a parameter keep the counter. A new or changed loop in those kernels
    /// brings the counter back (and fails here) until someone has read that it ends and
    /// added its header to [`REVIEWED_LOOPS`].
    #[test]
    fn every_loop_of_an_unbounded_kernel_is_reviewed() {
        let mut found = std::collections::BTreeSet::new();
        let mut entries = std::collections::BTreeSet::new();
        for (name, entry, src) in all_sources() {
            if bounds_loops(entry) {
                continue;
            }
            entries.insert(entry);
            assert!(!bounds_loops_of(entry, &src), "{name}: a loop not reviewed");
            found.extend(for_loops(&src).unwrap().into_iter().map(|(h, _)| h));
        }
        assert_eq!(entries.into_iter().collect::<Vec<_>>(), LOOPS_END_BY_CONSTRUCTION);
        assert_eq!(found.iter().map(String::as_str).collect::<Vec<_>>(), REVIEWED_LOOPS);
        for (name, entry, src) in all_sources() {
            if ["copy", "alibi", "alibi_x4", "encode_pass_scan", "rope"].contains(&entry) {
                assert!(bounds_loops_of(entry, &src), "{name}");
            }
        }
    }

    /// What the check of [`bounds_loops_of`] refuses, on a reviewed kernel's name.
    #[test]
    fn a_loop_not_reviewed_keeps_the_counter() {
        let ok = "fn f() {\n    for (var k = 0u; k < RP_UNITS; k++) { a[k] = k; }\n}";
        assert!(!bounds_loops_of("rope_pass", ok));
        assert!(bounds_loops("copy") && bounds_loops_of("copy", ok));
        // Split over lines and commented, the same loop.
        let split = "for (var k = 0u; // the unit\n  k < RP_UNITS;\n k++)\n{ x = a[k]; }";
        assert!(!bounds_loops_of("rope_pass", split));
        for bad in [
            "for (var k = 0u; k < RP_UNITS; k++) { k = 0u; }",
            "for (var k = 0u; k < RP_UNITS; k++) { k -= 1u; }",
            "for (var k = 0u; k < RP_UNITS; k++) { k--; }",
            "for (var k = 0u; k < RP_UNITS; k++) { f(&k); }",
            "for (var k = 0u; k < RP_UNITS; k++) { var k = 1u; }",
            "for (var j = head.x; j < end; j++) { end = j + 2u; }",
            "for (var j = head.x; j < end; j++) { head = t; }",
            "for (var k = 0u; k < RP_UNITS; k += 1u) { }",
            "for(var k = 1u; k < 2u; k++) { }",
            "for (var k = 0u; k < RP_UNITS; k++) { loop { } }",
            "for (var k = 0u; k < RP_UNITS; k++) { while true { } }",
            "for (var k = 0u; k < RP_UNITS; k++) { ",
            "for (var k = 0u; k < RP_UNITS; k++",
        ] {
            assert!(bounds_loops_of("rope_pass", bad), "{bad}");
        }
        // A comparison and a field of the same name are not writes.
        let reads = "for (var j = head.x; j < end; j++) { if j == end { o.end = 1u; } }";
        assert!(!bounds_loops_of("encode_x4", reads));
    }

    /// The refusal of an unknown import lists every module there is.
    #[test]
    fn an_unknown_import_names_every_module() {
        let text = compose("#import nosuch").unwrap_err().to_string();
        for (name, _) in MODULES {
            assert!(text.contains(name), "{name} not in {text}");
        }
    }

    #[test]
    fn recorded_encodes_take_two_units_where_a_gpu_measured_it_faster() {
        let step = |tokens: u64, dim: u64| tokens * dim / 4;
        // The H200's prefill presets, bounded: gpt2 and llama3-8b two, bert-base and
        // whisper-small one; a decode step one.
        assert_eq!(recorded_encode_units(None, true, true, step(8 * 1024, 768)), Some(2));
        assert_eq!(recorded_encode_units(None, true, true, step(2048, 4096)), Some(2));
        assert_eq!(recorded_encode_units(None, true, true, step(32 * 128, 768)), None);
        assert_eq!(recorded_encode_units(None, true, true, step(8 * 448, 768)), None);
        assert_eq!(recorded_encode_units(None, true, true, step(8, 8192)), None);
        // With PE code, on a CPU adapter, or chosen: unchanged.
        assert_eq!(recorded_encode_units(None, true, false, step(2048, 4096)), None);
        assert_eq!(recorded_encode_units(None, false, true, step(2048, 4096)), None);
        assert_eq!(recorded_encode_units(Some(1), true, true, step(2048, 4096)), Some(1));
        assert_eq!(EncodePassX4::shape(1024, true, Some(2)), (2, 256));
        assert_eq!(EncodePassX4::shape(192, true, Some(2)), (2, 96));
    }

    #[test]
    fn rope_pass_workgroups_leave_the_fewest_threads_idle() {
        assert_eq!(rope_pass_workgroup(2048, 320, 1), 160); // Llama-3-8B: 32 + 8 heads of 8 units
        assert_eq!(rope_pass_workgroup(2048, 256, 1), 256); // Llama-3-8B's q alone: one block
        assert_eq!(rope_pass_workgroup(2048, 640, 1), 160); // Llama-2-13B: 40 + 40 heads
        assert_eq!(rope_pass_workgroup(2048, 576, 1), 192); // Llama-3-70B: 64 + 8 heads
        assert_eq!(rope_pass_workgroup(2048, 128, 1), 128); // Phi-2: 32 + 32 heads of 2 units
        assert_eq!(rope_pass_workgroup(2048, 416, 1), 224); // StarCoder2-15B: 48 + 4 heads
        assert_eq!(rope_pass_workgroup(2048, 1, 1), ROPE_PASS_MIN_WORKGROUP);
        assert_eq!(rope_pass_workgroup(2048, 320, 4), 96); // one block of 384 unit slots
        // A decode step's few tokens keep the fixed workgroup.
        assert_eq!(rope_pass_workgroup(8, 320, 1), ROPE_PASS_WORKGROUP);
        assert_eq!(rope_pass_workgroup(ROPE_PASS_FIT_MIN_TOKENS, 320, 1), 160);
        for units in 1..5000u64 {
            for per in [1, 2, 4, 8] {
                let w = rope_pass_workgroup(2048, units, per);
                assert!(w.is_multiple_of(32), "{units}");
                assert!((ROPE_PASS_MIN_WORKGROUP..=ROPE_PASS_MAX_WORKGROUP).contains(&w));
                // No other size leaves fewer threads idle.
                let idle = |w: u32| units.div_ceil(u64::from(w * per)) * u64::from(w * per) - units;
                assert!((2..=8).all(|k| idle(32 * k) >= idle(w)), "{units} {per}");
            }
        }
    }

    #[test]
    fn x4_workgroups_fit_the_row_in_whole_warps() {
        assert_eq!(x4_workgroup(192, 2), 96); // D = 768
        assert_eq!(x4_workgroup(256, 2), 128); // D = 1024
        assert_eq!(x4_workgroup(1024, 2), 128); // D = 4096: four blocks
        assert_eq!(x4_workgroup(384, 2), 96); // D = 1536: two blocks of 192
        assert_eq!(x4_workgroup(2, 2), 32);
        assert_eq!(x4_workgroup(192, 4), 64); // D = 768, four units a thread: one block
        assert_eq!(x4_workgroup(1024, 4), 128); // D = 4096: two blocks
        for units in 1..3000 {
            for per in [x4_units(true), x4_units(false)] {
                let w = x4_workgroup(units, per);
                assert!(w.is_multiple_of(32) && w <= PAIR_WORKGROUP_SIZE, "{units}");
                // The blocks cover the row, `per` units per thread.
                assert!(units.div_ceil(per * w) * per * w >= units);
            }
        }
    }
}
