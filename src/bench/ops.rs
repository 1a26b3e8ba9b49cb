//! The bench's RoPE, ALiBi and decode-step items, at shapes from real models' configs
//! ([`ROPE_PRESETS`], [`ALIBI_PRESETS`], [`STEP_PRESETS`]): each on the CPU against a memcpy
//! of the same bytes, on the GPU as one submission against the fastest copy
//! (`gpu_copy_ceiling`) and in steps mode (K steps recorded into one compute pass) against
//! the same copies recorded the same way (`gpu_copy_steps`) and the dispatch floor
//! (`gpu_dispatch_floor`): see [`super::steps`]. Every GPU result is checked against the
//! CPU's before it is timed.

use half::{bf16, f16};
use ndarray::{Array2, Array3, Array4, ArrayViewMut4};
use serde::Serialize;
use wgpu::util::DeviceExt;

use super::steps::{self, CopyFigure};
use super::{AdapterInfo, Config, CopyCeiling, Devices, Item, TableData, make_table, timed};
use crate::alibi::{AlibiSpec, bias_cpu_into};
use crate::cpu;
use crate::encode::{Dtype, EncodeOptions, Encoded};
use crate::error::{Error, Result};
use crate::gpu::{self, CopyMethod, EncodePassDescriptor, Positions, RopePassDescriptor};
use crate::rope::{Element, Layout, Llama3, Mrope, MultimodalRope, RopeSpec, Scaling};
use crate::spec::PeSpec;

/// A RoPE shape from a model's `config.json`: q and k of one step, `[B, L, H, Dh]` (the
/// layout of the projections before attention's transpose, and of flash attention).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopePreset {
    /// The name `--model` takes.
    pub name: &'static str,
    /// Where the sizes come from.
    pub source: &'static str,
    /// Sequences.
    pub batch: usize,
    /// Tokens per sequence.
    pub len: usize,
    /// Heads of q (`num_attention_heads`).
    pub q_heads: usize,
    /// Heads of k (`num_key_value_heads`).
    pub k_heads: usize,
    /// Head dim.
    pub head_dim: u32,
    /// Rotated dims of a head.
    pub rotary_dim: u32,
    /// The checkpoint's type.
    pub dtype: Dtype,
    /// `rope_theta`.
    pub base: f64,
    /// Llama 3's `rope_scaling` (factor 8, low 1, high 4, original 8192).
    pub llama3: bool,
    /// Position of each sequence's first token.
    pub start: u32,
    /// A multimodal RoPE's `mrope_section` (sections layout, as Qwen2-VL's and
    /// Qwen2.5-VL's): each sequence then holds one image after 16 text tokens, with a
    /// position per axis as the model's `get_rope_index` gives them ([`mrope_positions`]).
    pub mrope: Option<[u32; 3]>,
}

/// The RoPE presets:
///
/// - `llama3-8b-rope`: `meta-llama/Meta-Llama-3-8B`, 32 heads of q and 8 of k
///   (`num_key_value_heads`), head dim 128 (4096 / 32), `rope_theta` 500000, the `llama3`
///   `rope_scaling` of Llama 3.1 (factor 8, low 1, high 4, original 8192), bf16; the prefill
///   of one 2048-token prompt.
/// - `llama3-8b-rope-decode`: the same, one decode step of 8 sequences at position 1000.
/// - `phi-2-rope`: `microsoft/phi-2`, 32 heads of q and of k, head dim 80 (2560 / 32),
///   `partial_rotary_factor` 0.4 (32 of 80 dims rotated), `rope_theta` 10000, `torch_dtype`
///   float16; the prefill of one 2048-token prompt.
/// - `qwen2.5-vl-7b-rope`: `Qwen/Qwen2.5-VL-7B-Instruct`, multimodal RoPE: 28 heads of q
///   and 4 of k, head dim 128 (3584 / 28), `rope_theta` 1000000, `mrope_section` [16, 24,
///   24], bf16; the prefill of one 2048-token prompt holding a 36 x 36 image (1296 tokens)
///   after 16 text tokens ([`mrope_positions`]).
pub const ROPE_PRESETS: &[RopePreset] = &[
    RopePreset {
        name: "llama3-8b-rope",
        source: "meta-llama/Meta-Llama-3-8B (rope_scaling of Llama 3.1)",
        batch: 1,
        len: 2048,
        q_heads: 32,
        k_heads: 8,
        head_dim: 128,
        rotary_dim: 128,
        dtype: Dtype::Bf16,
        base: 500_000.0,
        llama3: true,
        start: 0,
        mrope: None,
    },
    RopePreset {
        name: "llama3-8b-rope-decode",
        source: "meta-llama/Meta-Llama-3-8B (rope_scaling of Llama 3.1)",
        batch: 8,
        len: 1,
        q_heads: 32,
        k_heads: 8,
        head_dim: 128,
        rotary_dim: 128,
        dtype: Dtype::Bf16,
        base: 500_000.0,
        llama3: true,
        start: 1000,
        mrope: None,
    },
    RopePreset {
        name: "phi-2-rope",
        source: "microsoft/phi-2",
        batch: 1,
        len: 2048,
        q_heads: 32,
        k_heads: 32,
        head_dim: 80,
        rotary_dim: 32,
        dtype: Dtype::F16,
        base: 10_000.0,
        llama3: false,
        start: 0,
        mrope: None,
    },
    RopePreset {
        name: "qwen2.5-vl-7b-rope",
        source: "Qwen/Qwen2.5-VL-7B-Instruct (mrope_section [16, 24, 24])",
        batch: 1,
        len: 2048,
        q_heads: 28,
        k_heads: 4,
        head_dim: 128,
        rotary_dim: 128,
        dtype: Dtype::Bf16,
        base: 1_000_000.0,
        llama3: false,
        start: 0,
        mrope: Some([16, 24, 24]),
    },
];

/// Text tokens before a multimodal preset's image.
const MROPE_TEXT_BEFORE: usize = 16;

/// Rows and columns of a multimodal preset's image, in the language model's tokens (after
/// Qwen2.5-VL's 2 x 2 merge: a 1008 x 1008 picture of 14-pixel patches).
const MROPE_IMAGE_SIDE: usize = 36;

/// A multimodal preset's positions, `[3, B, L]` (time, height, width), as Qwen2-VL's
/// `get_rope_index` numbers a prompt of 16 text tokens, one still image of 36 x 36 tokens,
/// and text to the end: text tokens take one position on every axis, counting on; the
/// image's tokens take the next position on the time axis and it plus their row and column
/// on the others; the text after it goes on from one past the largest of those. Every
/// sequence the same, from `p.start`. Tokens past `p.len` are cut off.
pub fn mrope_positions(p: &RopePreset) -> ndarray::Array3<u32> {
    let (before, side) = (MROPE_TEXT_BEFORE, MROPE_IMAGE_SIDE);
    let image_end = before + side * side;
    ndarray::Array3::from_shape_fn((3, p.batch, p.len), |(axis, _, l)| {
        let at = if l < before {
            l
        } else if l < image_end {
            let (row, col) = ((l - before) / side, (l - before) % side);
            before + [0, row, col][axis]
        } else {
            before + side + (l - image_end)
        };
        p.start.wrapping_add(at as u32)
    })
}

/// An ALiBi bias shape: `[heads, len, kv_len]` f32, queries at the last `len` positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlibiPreset {
    /// The name `--model` takes.
    pub name: &'static str,
    /// Where the sizes come from.
    pub source: &'static str,
    /// Heads (`n_head`).
    pub heads: u32,
    /// Queries.
    pub len: u64,
    /// Keys.
    pub kv_len: u64,
}

/// The ALiBi presets, `bigscience/bloom-7b1` (`n_head` 32): the bias of a 512-token
/// prefill (32 x 512 x 512), and of one decode step against 2048 keys (32 x 1 x 2048).
pub const ALIBI_PRESETS: &[AlibiPreset] = &[
    AlibiPreset {
        name: "bloom-7b1-alibi",
        source: "bigscience/bloom-7b1",
        heads: 32,
        len: 512,
        kv_len: 512,
    },
    AlibiPreset {
        name: "bloom-7b1-alibi-decode",
        source: "bigscience/bloom-7b1",
        heads: 32,
        len: 1,
        kv_len: 2048,
    },
];

/// A decode step as an engine records it: the encode of B new tokens (posenc's sinusoid
/// added to the embedding rows, in the checkpoint's type) and RoPE of their q and k, in one
/// compute pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepPreset {
    /// The name `--model` takes.
    pub name: &'static str,
    /// Where the sizes come from.
    pub source: &'static str,
    /// Sequences, one new token each.
    pub batch: usize,
    /// `hidden_size`.
    pub dim: usize,
    /// `vocab_size`.
    pub vocab: usize,
    /// The checkpoint's type: the table's, the output's and q's and k's.
    pub dtype: Dtype,
    /// Heads of q.
    pub q_heads: usize,
    /// Heads of k.
    pub k_heads: usize,
    /// Head dim.
    pub head_dim: u32,
    /// `rope_theta`.
    pub base: f64,
}

/// The decode-step presets, one per width from 3072 to 8192, 8 sequences each:
/// `gemma-7b-step` (`google/gemma-7b`: 3072, vocabulary 256000, 16 heads of 256, bf16),
/// `llama3-8b-step` (4096, 128256, 32 and 8 heads of 128, bf16, `rope_theta` 500000),
/// `llama2-13b-step` (`meta-llama/Llama-2-13b-hf`: 5120, 32000, 40 and 40 heads of 128,
/// f16), `starcoder2-15b-step` (`bigcode/starcoder2-15b`: 6144, 49152, 48 and 4 heads of
/// 128, bf16, `rope_theta` 100000), `llama3-70b-step` (`meta-llama/Meta-Llama-3-70B`:
/// 8192, 128256, 64 and 8 heads of 128, bf16, `rope_theta` 500000).
pub const STEP_PRESETS: &[StepPreset] = &[
    StepPreset {
        name: "gemma-7b-step",
        source: "google/gemma-7b",
        batch: 8,
        dim: 3072,
        vocab: 256_000,
        dtype: Dtype::Bf16,
        q_heads: 16,
        k_heads: 16,
        head_dim: 256,
        base: 10_000.0,
    },
    StepPreset {
        name: "llama3-8b-step",
        source: "meta-llama/Meta-Llama-3-8B",
        batch: 8,
        dim: 4096,
        vocab: 128_256,
        dtype: Dtype::Bf16,
        q_heads: 32,
        k_heads: 8,
        head_dim: 128,
        base: 500_000.0,
    },
    StepPreset {
        name: "llama2-13b-step",
        source: "meta-llama/Llama-2-13b-hf",
        batch: 8,
        dim: 5120,
        vocab: 32_000,
        dtype: Dtype::F16,
        q_heads: 40,
        k_heads: 40,
        head_dim: 128,
        base: 10_000.0,
    },
    StepPreset {
        name: "starcoder2-15b-step",
        source: "bigcode/starcoder2-15b",
        batch: 8,
        dim: 6144,
        vocab: 49_152,
        dtype: Dtype::Bf16,
        q_heads: 48,
        k_heads: 4,
        head_dim: 128,
        base: 100_000.0,
    },
    StepPreset {
        name: "llama3-70b-step",
        source: "meta-llama/Meta-Llama-3-70B",
        batch: 8,
        dim: 8192,
        vocab: 128_256,
        dtype: Dtype::Bf16,
        q_heads: 64,
        k_heads: 8,
        head_dim: 128,
        base: 500_000.0,
    },
];

/// One of the operation presets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OpPreset {
    /// RoPE of q and k.
    Rope(&'static RopePreset),
    /// The ALiBi bias.
    Alibi(&'static AlibiPreset),
    /// A decode step: encode, then RoPE of q and k.
    Step(&'static StepPreset),
}

impl OpPreset {
    /// Every operation preset, in the suite's order.
    pub fn all() -> Vec<OpPreset> {
        let rope = ROPE_PRESETS.iter().map(OpPreset::Rope);
        let alibi = ALIBI_PRESETS.iter().map(OpPreset::Alibi);
        rope.chain(alibi).chain(STEP_PRESETS.iter().map(OpPreset::Step)).collect()
    }

    /// The preset named `name`, if there is one.
    pub fn find(name: &str) -> Option<OpPreset> {
        Self::all().into_iter().find(|p| p.name() == name)
    }

    /// Its name.
    pub fn name(&self) -> &'static str {
        match self {
            OpPreset::Rope(p) => p.name,
            OpPreset::Alibi(p) => p.name,
            OpPreset::Step(p) => p.name,
        }
    }
}

/// How to run an operation preset: `OpConfig::default()` (both paths, 10 rounds, the
/// default steps, the preset's own type), then set the fields that differ. New fields may
/// come, with defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpConfig {
    /// Which paths.
    pub devices: Devices,
    /// Timed rounds.
    pub repeats: usize,
    /// Steps per steps-mode measurement ([`steps::steps_for`] when `None`).
    pub steps: Option<usize>,
    /// The storage type of q and k (and of a decode step's table and output) in the
    /// preset's place, to compare types at one shape; ALiBi's bias is f32 whatever it says
    /// and refuses a 16-bit type.
    pub dtype: Option<Dtype>,
}

impl Default for OpConfig {
    fn default() -> Self {
        let config = Config::default();
        OpConfig { devices: config.devices, repeats: config.repeats, steps: None, dtype: None }
    }
}

/// One operation preset measured.
#[derive(Clone, Debug, Serialize)]
pub struct OpReport {
    /// `rope`, `alibi` or `decode_step`.
    pub op: &'static str,
    /// The preset.
    pub model: &'static str,
    /// The shapes, readably.
    pub shape: String,
    /// Where they come from.
    pub source: &'static str,
    /// The GPU adapter, if one was used.
    pub adapter: Option<AdapterInfo>,
    /// Timed rounds.
    pub repeats: usize,
    /// Bytes one step reads plus writes (the GB/s of its items count these).
    pub bytes: u64,
    /// Whether the GPU's result has the CPU's bits (`None` without a GPU); for RoPE,
    /// `differing` counts the elements that differ (none on any adapter posenc has met: the
    /// kernels round each product before a sum takes it, so no backend contracts them).
    pub agree: Option<bool>,
    /// Elements whose bits differ from the CPU's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub differing: Option<u64>,
    /// The copy method of the ceilings (the fastest in `copy_methods`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceiling_method: Option<String>,
    /// The form of `cpu_copy_ceiling` ([`Report::cpu_ceiling_method`](super::Report)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ceiling_method: Option<String>,
    /// Every copy method over half the step's bytes (the copy moves them twice), fastest
    /// first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub copy_methods: Vec<CopyFigure>,
    /// The items.
    pub results: Vec<Item>,
}

/// Runs `preset` on the CPU and, with `ctx`, on the GPU.
///
/// # Errors
/// Shapes a device cannot hold ([`Error::Limit`]) and GPU errors.
pub fn run_op(
    preset: OpPreset,
    config: &OpConfig,
    ctx: Option<&gpu::Context>,
    progress: &mut dyn FnMut(&str),
) -> Result<OpReport> {
    check(preset, config)?;
    let ctx = ctx.filter(|_| config.devices != Devices::Cpu);
    match preset {
        OpPreset::Rope(p) => {
            let p = &RopePreset { dtype: config.dtype.unwrap_or(p.dtype), ..*p };
            match p.dtype {
                Dtype::F32 => run_rope::<f32>(p, config, ctx, progress),
                Dtype::F16 => run_rope::<f16>(p, config, ctx, progress),
                Dtype::Bf16 => run_rope::<bf16>(p, config, ctx, progress),
            }
        }
        OpPreset::Alibi(p) => run_alibi(p, config, ctx, progress),
        OpPreset::Step(p) => {
            let p = &StepPreset { dtype: config.dtype.unwrap_or(p.dtype), ..*p };
            match p.dtype {
                Dtype::F32 => run_step::<f32>(p, config, ctx, progress),
                Dtype::F16 => run_step::<f16>(p, config, ctx, progress),
                Dtype::Bf16 => run_step::<bf16>(p, config, ctx, progress),
            }
        }
    }
}

/// Refuses what `config` cannot run `preset` with: repeats or steps outside `1..=`
/// [`MAX_REPEATS`](super::MAX_REPEATS), and a 16-bit type for an ALiBi preset.
///
/// # Errors
/// [`Error::InvalidParameter`] naming the field.
pub fn check(preset: OpPreset, config: &OpConfig) -> Result<()> {
    if config.repeats == 0 || config.repeats > super::MAX_REPEATS {
        return Err(Error::InvalidParameter {
            field: "repeats",
            value: config.repeats.to_string(),
            allowed: "1..=10000 (bench::MAX_REPEATS)",
        });
    }
    steps::check_steps(config.steps)?;
    if let (OpPreset::Alibi(p), Some(dtype @ (Dtype::F16 | Dtype::Bf16))) = (preset, config.dtype) {
        return Err(Error::InvalidParameter {
            field: "dtype",
            value: format!("{} for {}", super::dtype_name(dtype), p.name),
            allowed: "f32 for an ALiBi preset, whose bias is f32",
        });
    }
    Ok(())
}

/// A deterministic tensor of values in [-1, 1).
fn values<T: Element>(shape: [usize; 4], seed: u64) -> Array4<T> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    Array4::from_shape_simple_fn(shape, || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        T::from_f32(((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
    })
}

/// The adapter `ctx` runs on, as a report names it.
pub(super) fn adapter_of(ctx: &gpu::Context) -> AdapterInfo {
    let info = ctx.adapter_info();
    AdapterInfo {
        name: info.name.clone(),
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        timing: ctx.timing_source(),
        access: format!("{:?}", ctx.access_pattern()).to_lowercase(),
        // Units apply to the coalesced pattern's kernels only.
        units: ctx.chosen_units().filter(|_| ctx.access_pattern() == gpu::AccessPattern::Coalesced),
        rope_heads: ctx.chosen_rope_heads(),
        all_loops_bounded: ctx.bounds_all_loops(),
        spin_wait_us: ctx.spin_wait().as_micros() as u64,
        diagnostics: crate::shaders::diagnostics::active()
            .iter()
            .map(|d| d.name.to_string())
            .collect(),
    }
}

fn storage_init(ctx: &gpu::Context, label: &'static str, bytes: &[u8]) -> wgpu::Buffer {
    ctx.device().create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some(label),
        contents: bytes,
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST,
    })
}

/// q and k in one buffer, k at the first vec4 after q; and that offset.
fn qk_buffer<T: Element>(
    ctx: &gpu::Context,
    q: &Array4<T>,
    k: &Array4<T>,
) -> (wgpu::Buffer, usize) {
    let (qb, kb): (&[u8], &[u8]) = (
        bytemuck::cast_slice(q.as_slice().expect("a new array")),
        bytemuck::cast_slice(k.as_slice().expect("a new array")),
    );
    let k_at = vec4s(qb.len());
    let mut contents = vec![0u8; k_at + vec4s(kb.len())];
    contents[..qb.len()].copy_from_slice(qb);
    contents[k_at..k_at + kb.len()].copy_from_slice(kb);
    (storage_init(ctx, "posenc.bench.qk", &contents), k_at)
}

/// `bytes` rounded up to whole vec4s.
fn vec4s(bytes: usize) -> usize {
    bytes.next_multiple_of(16)
}

/// The GPU items every operation shares: the warm-up, the copy search over half of
/// `op_bytes`, `gpu_<op>` (one submission of `record_one` per round) against
/// `gpu_copy_ceiling`, then the steps items of `record_in` and of its `parts`.
#[allow(clippy::too_many_arguments)]
fn gpu_items(
    ctx: &gpu::Context,
    op: &str,
    op_bytes: u64,
    config: &OpConfig,
    progress: &mut dyn FnMut(&str),
    mut record_one: impl FnMut(&mut wgpu::CommandEncoder) -> Result<()>,
    mut record_in: impl FnMut(&mut wgpu::ComputePass<'_>) -> Result<()>,
    parts: &mut [steps::Part<'_>],
) -> Result<(Vec<Item>, CopyMethod, Vec<CopyFigure>)> {
    progress("warming the GPU up");
    ctx.warm_up(steps::WARM_UP)?;
    progress("searching for the fastest copy");
    let copy_bytes = (op_bytes / 2).min(ctx.max_binding_size()) & !15;
    let search = steps::search_copy(ctx, copy_bytes, steps::SEARCH_REPEATS)?;
    let best = steps::best_shader(&search);
    let (mut one, mut copy, mut driver) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..config.repeats {
        progress(&format!("gpu round {}/{}", round + 1, config.repeats));
        steps::warm(ctx)?;
        one.extend(ctx.time_recorded(1, &mut record_one)?);
        copy.extend(ctx.time_copy_method(best, copy_bytes, 1)?);
        driver.extend(ctx.time_copy_method(CopyMethod::Driver, copy_bytes, 1)?);
    }
    let ceiling = Item::new("gpu_copy_ceiling", copy, 2 * copy_bytes);
    let mut items = vec![
        Item::new(&format!("gpu_{op}"), one, op_bytes).against(&ceiling),
        Item::new("gpu_copy_driver", driver, 2 * copy_bytes).against(&ceiling),
        ceiling,
    ];
    progress("steps");
    let k = steps::steps_for(op_bytes, config.steps);
    let name = format!("gpu_{op}_steps");
    items.extend(steps::steps_items(
        ctx,
        &name,
        op_bytes,
        copy_bytes,
        best,
        k,
        config.repeats,
        &mut record_in,
        parts,
    )?);
    Ok((items, best, search.into_iter().map(|(_, f)| f).collect()))
}

/// CPU items: `cpu_<op>` (`work` once per round) against `cpu_copy_ceiling`, the fastest
/// form of a memcpy of half of `op_bytes` ([`CopyCeiling`]), whose form `report`
/// records.
fn cpu_items(
    report: &mut OpReport,
    op: &str,
    op_bytes: u64,
    repeats: usize,
    mut work: impl FnMut() -> Result<()>,
) -> Result<Vec<Item>> {
    let half = (op_bytes / 2) as usize;
    work()?;
    let mut copy = CopyCeiling::new(half);
    report.cpu_ceiling_method = Some(copy.form().name().to_string());
    let (mut t, mut c) = (Vec::new(), Vec::new());
    for _ in 0..repeats {
        t.push(timed(&mut work)?);
        c.push(copy.time()?);
    }
    let ceiling = Item::new("cpu_copy_ceiling", c, 2 * half as u64);
    Ok(vec![Item::new(&format!("cpu_{op}"), t, op_bytes).against(&ceiling), ceiling])
}

fn rope_spec(head_dim: u32, rotary_dim: u32, base: f64, llama3: bool) -> Result<RopeSpec> {
    let mut spec = RopeSpec::partial(head_dim, rotary_dim)?.with_base(base)?;
    if llama3 {
        spec = spec.with_scaling(Scaling::Llama3(Llama3::new(8.0, 1.0, 4.0, 8192)))?;
    }
    Ok(spec)
}

/// Elements of `got` (bytes of `T`) whose bits differ from `want`'s.
fn differing<T: Element>(got: &[u8], want: &Array4<T>) -> u64 {
    let want: &[u8] = bytemuck::cast_slice(want.as_slice().expect("a new array"));
    let size = size_of::<T>();
    got.chunks(size).zip(want.chunks(size)).filter(|(a, b)| a != b).count() as u64
}

fn run_rope<T: Element>(
    p: &RopePreset,
    config: &OpConfig,
    ctx: Option<&gpu::Context>,
    progress: &mut dyn FnMut(&str),
) -> Result<OpReport> {
    let spec = rope_spec(p.head_dim, p.rotary_dim, p.base, p.llama3)?;
    let dh = p.head_dim as usize;
    let (q, k) = (
        values::<T>([p.batch, p.len, p.q_heads, dh], 1),
        values::<T>([p.batch, p.len, p.k_heads, dh], 2),
    );
    let positions = Array2::from_shape_fn((p.batch, p.len), |(_, l)| p.start + l as u32);
    // A multimodal preset's axes and positions per axis; the 1-D ones above are unused then.
    let mrope = p
        .mrope
        .map(|section| MultimodalRope::new(Mrope::Sections, section, spec.rotary_dim()))
        .transpose()?
        .map(|m| (m, mrope_positions(p)));
    let (q_bytes, k_bytes) = (q.len() * size_of::<T>(), k.len() * size_of::<T>());
    // Every item rotates in place, reading and writing the rotated dims alone (the
    // pass-through ones are never touched): counted whole, a partial RoPE (Phi-2's 32 of
    // 80) moved 2.5x the bytes it did and beat copies of them (round twenty-two).
    let rotated = |bytes: usize| (bytes / dh * p.rotary_dim as usize) as u64;
    let op_bytes = 2 * (rotated(q_bytes) + rotated(k_bytes));
    let mut report = OpReport {
        op: "rope",
        model: p.name,
        shape: format!(
            "q {}x{}x{}x{} k {}x{}x{}x{} r{}{} {}",
            p.batch,
            p.len,
            p.q_heads,
            dh,
            p.batch,
            p.len,
            p.k_heads,
            dh,
            p.rotary_dim,
            p.mrope.map_or(String::new(), |[t, h, w]| format!(" mrope [{t}, {h}, {w}]")),
            super::dtype_name(p.dtype)
        ),
        source: p.source,
        adapter: None,
        repeats: config.repeats,
        bytes: op_bytes,
        agree: None,
        differing: None,
        ceiling_method: None,
        cpu_ceiling_method: None,
        copy_methods: Vec::new(),
        results: Vec::new(),
    };
    progress("cpu");
    let rope_cpu = |x: &Array4<T>| match &mrope {
        Some((m, a)) => cpu::rope_multimodal(&spec, m, x.view(), a.view(), Layout::Blhd),
        None => cpu::rope(&spec, x.view(), positions.view(), Layout::Blhd),
    };
    let (q_cpu, k_cpu) = (rope_cpu(&q)?, rope_cpu(&k)?);
    if config.devices != Devices::Gpu {
        // In place, as the GPU rotates and as an engine calls it: `cpu::rope`'s copy would
        // time the allocation and first touch of a fresh tensor too. (Rotating the same
        // copies round after round keeps their values bounded: a rotation keeps norms.)
        let (mut q_work, mut k_work) = (q.clone(), k.clone());
        report.results = cpu_items(&mut report, "rope", op_bytes, config.repeats, || {
            let rotate = |x: ArrayViewMut4<'_, T>| match &mrope {
                Some((m, a)) => cpu::rope_multimodal_in_place(&spec, m, x, a.view(), Layout::Blhd),
                None => cpu::rope_in_place(&spec, x, positions.view(), Layout::Blhd),
            };
            rotate(q_work.view_mut())?;
            rotate(k_work.view_mut())
        })?;
    }
    let Some(ctx) = ctx else { return Ok(report) };
    report.adapter = Some(adapter_of(ctx));
    let desc = RopePassDescriptor {
        shape: [p.batch, p.len, p.q_heads, dh],
        layout: Layout::Blhd,
        dtype: p.dtype,
        positions: Positions::PerToken,
        k_heads: p.k_heads,
    };
    let (pass, flat): (_, Vec<u32>) = match &mrope {
        Some((m, a)) => (ctx.rope_pass_multimodal(&spec, m, &desc)?, a.iter().copied().collect()),
        None => (ctx.rope_pass(&spec, &desc)?, positions.iter().copied().collect()),
    };
    let (qk, k_at) = qk_buffer(ctx, &q, &k);
    let pos = storage_init(ctx, "posenc.bench.positions", bytemuck::cast_slice(&flat));
    let (qs, ks, ps) = (qk.slice(..k_at as u64), qk.slice(k_at as u64..), pos.slice(..));
    // The check: one step against the CPU.
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    pass.record_qk(&mut encoder, qs, ks, ps)?;
    ctx.queue().submit([encoder.finish()]);
    let got = ctx.read_buffer(&qk)?;
    let n = differing(&got[..q_bytes], &q_cpu) + differing(&got[k_at..k_at + k_bytes], &k_cpu);
    report.agree = Some(n == 0);
    report.differing = Some(n);
    let (items, best, figures) = gpu_items(
        ctx,
        "rope",
        op_bytes,
        config,
        progress,
        |encoder| pass.record_qk(encoder, qs, ks, ps),
        |cpass| pass.record_qk_in(cpass, qs, ks, ps),
        &mut [],
    )?;
    report.results.extend(items);
    report.ceiling_method = Some(best.name());
    report.copy_methods = figures;
    Ok(report)
}

fn run_alibi(
    p: &'static AlibiPreset,
    config: &OpConfig,
    ctx: Option<&gpu::Context>,
    progress: &mut dyn FnMut(&str),
) -> Result<OpReport> {
    let spec = AlibiSpec::new(p.heads, p.len)?
        .with_kv_len(p.kv_len)?
        .with_offset(u32::try_from(p.kv_len - p.len).unwrap_or(u32::MAX))?;
    let values = u64::from(p.heads) * p.len * p.kv_len;
    let op_bytes = values * 4;
    let mut report = OpReport {
        op: "alibi",
        model: p.name,
        shape: format!("{}x{}x{} f32", p.heads, p.len, p.kv_len),
        source: p.source,
        adapter: None,
        repeats: config.repeats,
        bytes: op_bytes,
        agree: None,
        differing: None,
        ceiling_method: None,
        cpu_ceiling_method: None,
        copy_methods: Vec::new(),
        results: Vec::new(),
    };
    progress("cpu");
    let mut bias = Array3::<f32>::zeros((p.heads as usize, p.len as usize, p.kv_len as usize));
    bias_cpu_into(&spec, bias.view_mut())?;
    if config.devices != Devices::Gpu {
        let mut out = bias.clone();
        let work = || bias_cpu_into(&spec, out.view_mut());
        report.results = cpu_items(&mut report, "alibi", op_bytes, config.repeats, work)?;
    }
    let Some(ctx) = ctx else { return Ok(report) };
    report.adapter = Some(adapter_of(ctx));
    let pass = ctx.alibi_pass(&spec)?;
    let out = storage_init(ctx, "posenc.bench.bias", &vec![0u8; vec4s(op_bytes as usize)]);
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    pass.record(&mut encoder, out.slice(..))?;
    ctx.queue().submit([encoder.finish()]);
    let got = ctx.read_buffer(&out)?;
    let want: &[u8] = bytemuck::cast_slice(bias.as_slice().expect("a new array"));
    report.agree = Some(got[..want.len()] == *want);
    let (items, best, figures) = gpu_items(
        ctx,
        "alibi",
        op_bytes,
        config,
        progress,
        |encoder| pass.record(encoder, out.slice(..)),
        |cpass| pass.record_in(cpass, out.slice(..)),
        &mut [],
    )?;
    report.results.extend(items);
    report.ceiling_method = Some(best.name());
    report.copy_methods = figures;
    Ok(report)
}

fn run_step<T: Element>(
    p: &StepPreset,
    config: &OpConfig,
    ctx: Option<&gpu::Context>,
    progress: &mut dyn FnMut(&str),
) -> Result<OpReport> {
    let table_config = Config {
        batch: p.batch,
        len: 1,
        dim: p.dim,
        vocab: p.vocab,
        dtype: p.dtype,
        out_dtype: p.dtype,
        devices: config.devices,
        repeats: config.repeats,
        ..Config::default()
    };
    let pe_spec: PeSpec = table_config.check()?;
    let spec = rope_spec(p.head_dim, p.head_dim, p.base, false)?;
    let dh = p.head_dim as usize;
    let size = p.dtype.size();
    let (q, k) =
        (values::<T>([p.batch, 1, p.q_heads, dh], 3), values::<T>([p.batch, 1, p.k_heads, dh], 4));
    let (q_bytes, k_bytes) = (q.len() * size, k.len() * size);
    let starts: Vec<u32> = (0..p.batch as u32).map(|b| 1000 + 37 * b).collect();
    let ids_vec: Vec<u32> = (0..p.batch).map(|b| ((b * 7919 + 104_729) % p.vocab) as u32).collect();
    let out_bytes = p.batch * p.dim * size;
    let encode_bytes = (p.batch * 4 + p.batch * p.dim * size + out_bytes) as u64;
    let op_bytes = encode_bytes + 2 * (q_bytes + k_bytes) as u64;
    let mut report = OpReport {
        op: "decode_step",
        model: p.name,
        shape: format!(
            "B{} D{} V{} q {}x{} k {}x{} {}",
            p.batch,
            p.dim,
            p.vocab,
            p.q_heads,
            dh,
            p.k_heads,
            dh,
            super::dtype_name(p.dtype)
        ),
        source: p.source,
        adapter: None,
        repeats: config.repeats,
        bytes: op_bytes,
        agree: None,
        differing: None,
        ceiling_method: None,
        cpu_ceiling_method: None,
        copy_methods: Vec::new(),
        results: Vec::new(),
    };
    let Some(ctx) = ctx else { return Ok(report) };
    report.adapter = Some(adapter_of(ctx));
    progress("building the table");
    let table: TableData = make_table(&table_config);
    let options = EncodeOptions { out_dtype: p.dtype, ..EncodeOptions::default() };
    let ids = Array2::from_shape_vec((p.batch, 1), ids_vec.clone()).expect("B x 1");
    let pos = Array2::from_shape_vec((p.batch, 1), starts.clone()).expect("B x 1");
    let want = cpu::encode(&pe_spec, table.view(), ids.view(), pos.view(), &options)?;
    let positions = pos.clone();
    let rope_cpu = |x: &Array4<T>| cpu::rope(&spec, x.view(), positions.view(), Layout::Blhd);
    let (q_cpu, k_cpu) = (rope_cpu(&q)?, rope_cpu(&k)?);
    progress("uploading the table");
    let uploaded = ctx.upload_table(table.view())?;
    drop(table);
    let encode_desc = EncodePassDescriptor {
        batch: p.batch,
        len: 1,
        positions: Positions::PerSequence,
        options,
        ..EncodePassDescriptor::default()
    };
    let encode = ctx.encode_pass(&pe_spec, &uploaded, &encode_desc)?;
    // The same encode prepared as an engine that knows its context length prepares it
    // (`max_positions`): every PE row from the cache, no PE code, one dispatch per window.
    let bounded_desc = EncodePassDescriptor {
        max_positions: Some(gpu::DEFAULT_CACHED_POSITIONS),
        ..encode_desc.clone()
    };
    let bounded = ctx.encode_pass(&pe_spec, &uploaded, &bounded_desc)?;
    let rope_desc = RopePassDescriptor {
        shape: [p.batch, 1, p.q_heads, dh],
        layout: Layout::Blhd,
        dtype: p.dtype,
        positions: Positions::PerSequence,
        k_heads: p.k_heads,
    };
    let rope = ctx.rope_pass(&spec, &rope_desc)?;
    let ids_buf = storage_init(ctx, "posenc.bench.ids", bytemuck::cast_slice(&ids_vec));
    let starts_buf = storage_init(ctx, "posenc.bench.starts", bytemuck::cast_slice(&starts));
    let out = storage_init(ctx, "posenc.bench.out", &vec![0u8; vec4s(out_bytes)]);
    let (qk, k_at) = qk_buffer(ctx, &q, &k);
    let (qs, ks) = (qk.slice(..k_at as u64), qk.slice(k_at as u64..));
    let bounded_out = storage_init(ctx, "posenc.bench.bounded_out", &vec![0u8; vec4s(out_bytes)]);
    let (ids_s, starts_s, out_s) = (ids_buf.slice(..), starts_buf.slice(..), out.slice(..));
    let bounded_s = bounded_out.slice(..);
    let record_in = |cpass: &mut wgpu::ComputePass<'_>| {
        encode.record_in(cpass, ids_s, starts_s, out_s)?;
        rope.record_qk_in(cpass, qs, ks, starts_s)
    };
    // The check: one step, and the bounded encode beside it, against the CPU.
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    {
        let mut cpass = encoder.begin_compute_pass(&Default::default());
        record_in(&mut cpass)?;
        bounded.record_in(&mut cpass, ids_s, starts_s, bounded_s)?;
    }
    ctx.queue().submit([encoder.finish()]);
    let got_out = ctx.read_buffer(&out)?;
    let got_bounded = ctx.read_buffer(&bounded_out)?;
    let got_qk = ctx.read_buffer(&qk)?;
    let want_out = encoded_bytes(&want);
    let n =
        differing(&got_qk[..q_bytes], &q_cpu) + differing(&got_qk[k_at..k_at + k_bytes], &k_cpu);
    report.agree =
        Some(got_out[..out_bytes] == *want_out && got_bounded[..out_bytes] == *want_out && n == 0);
    report.differing = Some(n);
    // The host-array encode of the same tokens beside the recorded step (one submission,
    // device time), against the same run's copy ceiling.
    let host_out = storage_init(ctx, "posenc.bench.host_out", &vec![0u8; vec4s(out_bytes)]);
    let time_host =
        || ctx.time_encode(&pe_spec, &uploaded, ids.view(), pos.view(), &options, &host_out, false);
    // One warm-up first, as every item has (without it the first run, which builds the
    // kernel, was the median of two: 102 ms against 0.3; round twenty-two).
    time_host()?;
    let host = (0..config.repeats).map(|_| time_host()).collect::<Result<Vec<_>>>()?;
    // The step's two parts alone too, so that what a step costs over its copy has an owner.
    let rope_bytes = 2 * (q_bytes + k_bytes) as u64;
    let mut encode_alone =
        |cpass: &mut wgpu::ComputePass<'_>| encode.record_in(cpass, ids_s, starts_s, out_s);
    let mut rope_alone =
        |cpass: &mut wgpu::ComputePass<'_>| rope.record_qk_in(cpass, qs, ks, starts_s);
    let mut bounded_alone =
        |cpass: &mut wgpu::ComputePass<'_>| bounded.record_in(cpass, ids_s, starts_s, bounded_s);
    let mut bounded_step = |cpass: &mut wgpu::ComputePass<'_>| {
        bounded.record_in(cpass, ids_s, starts_s, bounded_s)?;
        rope.record_qk_in(cpass, qs, ks, starts_s)
    };
    let mut parts = [
        steps::Part {
            name: "gpu_step_encode_steps",
            bytes: encode_bytes,
            record: &mut encode_alone,
        },
        steps::Part { name: "gpu_step_rope_steps", bytes: rope_bytes, record: &mut rope_alone },
        steps::Part {
            name: "gpu_step_encode_bounded_steps",
            bytes: encode_bytes,
            record: &mut bounded_alone,
        },
        steps::Part {
            name: "gpu_decode_step_bounded_steps",
            bytes: op_bytes,
            record: &mut bounded_step,
        },
    ];
    let (mut items, best, figures) = gpu_items(
        ctx,
        "decode_step",
        op_bytes,
        config,
        progress,
        |encoder| {
            let mut cpass = encoder.begin_compute_pass(&Default::default());
            record_in(&mut cpass)
        },
        record_in,
        &mut parts,
    )?;
    let ceiling = items.iter().find(|i| i.name == "gpu_copy_ceiling").cloned().expect("a ceiling");
    items.insert(0, Item::new("gpu_encode", host, encode_bytes).against(&ceiling));
    report.results.extend(items);
    report.ceiling_method = Some(best.name());
    report.copy_methods = figures;
    Ok(report)
}

/// An encode's values as the GPU's buffer holds them (little-endian).
fn encoded_bytes(e: &Encoded) -> Vec<u8> {
    match e {
        Encoded::F32(a) => a.iter().flat_map(|v| v.to_le_bytes()).collect(),
        Encoded::F16(a) => a.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect(),
        Encoded::Bf16(a) => a.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect(),
    }
}

impl OpReport {
    /// The item named `name`, if measured.
    pub fn item(&self, name: &str) -> Option<&Item> {
        self.results.iter().find(|i| i.name == name)
    }

    /// A readable table, as [`super::Report::to_table`] prints one.
    pub fn to_table(&self) -> String {
        let mut out = format!(
            "posenc bench: {} ({}), {}; {} runs each; a step moves {}\n",
            self.model,
            self.op,
            self.shape,
            self.repeats,
            super::size(self.bytes)
        );
        if let Some(a) = &self.adapter {
            out += &format!("GPU: {}; timed by {}\n", a.describe(), super::timing_name(a.timing));
        }
        out += &super::items_table(
            &self.results,
            self.ceiling_method.as_deref(),
            self.cpu_ceiling_method.as_deref(),
        );
        match (self.agree, self.differing) {
            (Some(true), _) => out += "CPU and GPU agree bit for bit.\n",
            (Some(false), Some(n)) if n > 0 => {
                out += &format!("CPU and GPU DIFFER in {n} elements.\n")
            }
            (Some(false), _) => out += "CPU and GPU DIFFER.\n",
            (None, _) => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partial RoPE's bytes are its rotated dims' (Phi-2: 32 of 80), which every item
    /// reads and writes in place; counted whole, they beat their copies (round
    /// twenty-two).
    #[test]
    fn a_partial_ropes_bytes_are_its_rotated_dims() {
        let p = ROPE_PRESETS.iter().find(|p| p.name == "phi-2-rope").unwrap();
        let config = OpConfig { devices: Devices::Cpu, repeats: 1, ..OpConfig::default() };
        let report = run_rope::<half::f16>(p, &config, None, &mut |_| {}).unwrap();
        let tokens = (p.batch * p.len) as u64;
        let heads = (p.q_heads + p.k_heads) as u64;
        assert_eq!(p.rotary_dim, 32);
        assert_eq!(report.bytes, 2 * tokens * heads * 32 * 2);
    }

    /// The multimodal preset's positions are those transformers 5.24's
    /// `Qwen2_5_VLModel.get_rope_index` gives a prompt of 15 text tokens, the vision-start
    /// token, a 72 x 72-patch image (`image_grid_thw` [1, 72, 72], merged 2 x 2 into 36 x 36
    /// tokens) and text to 2048 tokens (2026-12-03), at the tokens around each boundary.
    #[test]
    fn multimodal_positions_are_get_rope_index_s() {
        let p = ROPE_PRESETS.iter().find(|p| p.mrope.is_some()).unwrap();
        let at = mrope_positions(p);
        assert_eq!(at.shape(), [3, 1, 2048]);
        let want: [(usize, [u32; 3]); 9] = [
            (0, [0, 0, 0]),
            (15, [15, 15, 15]),
            (16, [16, 16, 16]),
            (17, [16, 16, 17]),
            (51, [16, 16, 51]),
            (52, [16, 17, 16]),
            (1311, [16, 51, 51]),
            (1312, [52, 52, 52]),
            (2047, [787, 787, 787]),
        ];
        for (l, axes) in want {
            assert_eq!([at[[0, 0, l]], at[[1, 0, l]], at[[2, 0, l]]], axes, "token {l}");
        }
    }
}
