//! `posenc rope-cache`: the cos and sin caches of a RoPE configuration in Hugging Face's
//! layout, as safetensors or `.npy`, for loading into a framework's rotary module.

use std::path::PathBuf;

use clap::{ArgGroup, Args, ValueEnum};
use half::{bf16, f16};
use ndarray::{Array2, Array3, Axis, stack};
use posenc::alloc::check_allocation;
use posenc::inputs::{self, MAX_OUTPUT_VALUES};
use posenc::rope::{MultimodalRope, RopeCache, RopeSpec};
use posenc::{Error, cpu, npy, positions};

use super::rope::RopeParams;
use crate::args::whole;
use crate::device::{Compute, FastDevice, on_device};
use crate::failure::Failure;
use crate::output::{emit, output_format, output_help, refuse_binary_on_terminal, target};
use posenc::placement::HostJob;

/// `posenc rope-cache --help` after the options, before the exit statuses.
pub(crate) const HELP: &str = "Writes cos and sin of shape [positions, rotary_dim] as a Hugging \
    Face rotary module returns them: the attention factor applied, each frequency's column \
    repeated as the pairing needs it (neox: cat(freqs, freqs); gptj: interleaved). The pairing \
    is --pairing, else with --config the layout of the family's own module, which is not always \
    the pairing its attention rotates: cat(freqs, freqs) for Llama, Qwen, Mistral and also GLM, \
    GLM-4, ERNIE 4.5, Helium, DeepSeek-V3 (whose attention pairs (2i, 2i + 1)), interleaved for \
    Cohere, Cohere 2 and BLT; a family whose module returns another shape (Llama 4, DeepSeek-V2, \
    gpt-oss, GPT-J, CodeGen, RoFormer) is refused unless --pairing is given (docs/rope.md). \
    Without --config: neox. The values are \
    posenc's exact-phase cos and sin (within 6e-8 of the true values at every u32 position, then \
    times the attention factor in f32), the same bits on the CPU and the GPU.

safetensors (the default): tensors cos and sin ([positions, rotary_dim], --dtype) and inv_freq \
    ([rotary_dim / 2], f32: the exact frequencies rounded, for a module's buffer), metadata \
    attention_factor, format (pt), pairing, rotary_dim. npy: one array [2, positions, \
    rotary_dim] holding cos then sin (bf16 as '<u2' raw bits).

A multimodal RoPE's config (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5, GLM-4V, \
    PaddleOCR-VL, ...) gives the cache by position that each of its three axes gathers from, \
    with a note; safetensors' metadata adds mrope_section, mrope_layout (sections or \
    interleaved) and mrope_axes, one digit per frequency: the axis (0 time, 1 height, 2 width) \
    whose position that frequency takes. `posenc rope` rotates with such a config, taking a \
    position per axis.

The frequencies are those of a rotation at the same positions: dynamic and longrope see the \
    largest position + 1, or --seq-len N.";

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("range").required(true).args(["len", "positions"])))]
pub(crate) struct RopeCacheArgs {
    /// Dimensions per attention head (head_dim, or hidden_size / num_attention_heads)
    /// [default: the --config's; required without it].
    #[arg(
        long,
        value_name = "D",
        allow_negative_numbers = true,
        required_unless_present = "config",
        value_parser = whole::<u32>("a whole number in 2..=65536")
    )]
    head_dim: Option<u32>,
    #[command(flatten)]
    params: RopeParams,
    /// Positions 0..N.
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = whole::<u64>("a whole number in 0..=4294967296 (positions are u32)"))]
    len: Option<u64>,
    /// Comma-separated positions and half-open ranges, e.g. `0..4096,1000000`.
    #[arg(long, value_name = "SPEC")]
    positions: Option<String>,
    /// The type of cos and sin (inv_freq is always f32): each value rounded to nearest even
    /// from the f32 result.
    #[arg(long, value_enum, default_value_t = CacheDtype::F32)]
    dtype: CacheDtype,
    /// safetensors: cos, sin and inv_freq with metadata. npy: [2, positions, rotary_dim].
    /// [default: as -o PATH's extension names it (.safetensors, .npy), else safetensors]
    #[arg(long, value_enum)]
    format: Option<CacheFormat>,
    /// Where to compute. `auto` computes where the result reaches the host sooner (the CPU
    /// unless a large job meets a hardware GPU; POSENC_AUTO=gpu: the GPU when one opens),
    /// and on the CPU with a note when the GPU fails; `gpu` fails without one. cpu and gpu
    /// give the same bits.
    #[arg(long, value_enum, default_value_t = FastDevice::Auto)]
    device: FastDevice,
    #[arg(short, long, value_name = "OUT",
        help = "The output file (safetensors or .npy, as --format says).",
        long_help = output_help!("The output file (safetensors or .npy, as --format says)."))]
    output: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CacheDtype {
    F32,
    F16,
    Bf16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CacheFormat {
    Safetensors,
    Npy,
}

pub(crate) fn run(args: &RopeCacheArgs) -> Result<(), Failure> {
    let out = target(Some(&args.output))?;
    refuse_binary_on_terminal(
        &out,
        "output",
        "-",
        "the cache needs a file (-o PATH) or a redirected stdout, not a terminal",
    )?;
    let (spec, mrope, positions) = load(args).map_err(Failure::usage)?;
    let known = [("safetensors", CacheFormat::Safetensors), ("npy", CacheFormat::Npy)];
    let format = output_format(args.format, Some(&args.output), &known, CacheFormat::Safetensors);

    // The request is valid: from here on failures are the run's (exit 1).
    let values = 2 * positions.len() as u64 * u64::from(spec.rotary_dim());
    // The [positions, r/2, 2] table and the two laid-out tables, in f32.
    check_allocation("the rope cache", values.saturating_mul(8))?;
    let cache = on_device(args.device, None, HostJob::Table { values }, |c| {
        Ok(match c {
            Compute::Cpu => cpu::rope_cache(&spec, &positions)?,
            Compute::Gpu(ctx) => ctx.rope_cache(&spec, &positions)?,
        })
    })?;
    if let Some(m) = mrope {
        let [t, h, w] = m.section();
        let recorded = match format {
            CacheFormat::Safetensors => "metadata mrope_axes",
            CacheFormat::Npy => "not recorded in .npy; safetensors' metadata mrope_axes",
        };
        crate::failure::note(&format!(
            "the config's RoPE is multimodal (M-RoPE, mrope_section [{t}, {h}, {w}], {}): this \
             cache is by position, and each frequency of a token takes the position of one \
             axis (0 time, 1 height, 2 width; {recorded} lists them per frequency)",
            m.layout().name()
        ));
    }
    match (format, args.dtype) {
        (CacheFormat::Safetensors, dtype) => {
            let bytes = safetensors_bytes(&cache, dtype, &spec, mrope.as_ref());
            emit(&out, |w| w.write_all(&bytes))
        }
        (CacheFormat::Npy, CacheDtype::F32) => {
            emit(&out, |w| npy::write(w, both(&cache, |v| v).view()))
        }
        (CacheFormat::Npy, CacheDtype::F16) => {
            emit(&out, |w| npy::write(w, both(&cache, f16::from_f32).view()))
        }
        (CacheFormat::Npy, CacheDtype::Bf16) => {
            emit(&out, |w| npy::write(w, both(&cache, bf16::from_f32).view()))
        }
    }
}

/// The spec, a multimodal RoPE's axes and the positions, every size checked before the
/// positions exist.
fn load(args: &RopeCacheArgs) -> Result<(RopeSpec, Option<MultimodalRope>, Vec<u32>), Error> {
    args.params.check()?;
    // clap requires --head-dim without --config.
    let (spec, mrope) = args.params.options().cache_spec(args.head_dim)?;
    let check = |n: u64| {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let shape = [2, n, spec.rotary_dim() as usize];
        inputs::check_shape(
            "rope-cache",
            "cos and sin",
            &shape,
            MAX_OUTPUT_VALUES,
            "MAX_OUTPUT_VALUES",
        )
    };
    let positions = match (&args.positions, args.len) {
        (Some(text), _) => positions::parse_spec(text)?,
        (None, len) => {
            let len = len.unwrap_or(0);
            check(len)?;
            positions::contiguous(len)?
        }
    };
    check(positions.len() as u64)?;
    Ok((spec, mrope, positions))
}

/// `[2, positions, rotary_dim]`: cos, then sin, each value converted by `f`.
fn both<T: Copy>(cache: &RopeCache, f: impl Fn(f32) -> T + Copy) -> Array3<T> {
    stack(Axis(0), &[cache.cos.mapv(f).view(), cache.sin.mapv(f).view()])
        .expect("cos and sin have one shape")
}

/// The safetensors file: `cos`, `sin` and `inv_freq` with their metadata. Written here
/// rather than by `safetensors::serialize`, whose header lists the metadata in a hash
/// map's order: this header's keys are sorted, so the same cache is the same bytes on every
/// run and device.
fn safetensors_bytes(
    cache: &RopeCache,
    dtype: CacheDtype,
    spec: &RopeSpec,
    mrope: Option<&MultimodalRope>,
) -> Vec<u8> {
    use serde_json::{Map, Value, json};
    let le = |t: &Array2<f32>| -> (&str, Vec<u8>) {
        match dtype {
            CacheDtype::F32 => ("F32", t.iter().flat_map(|v| v.to_le_bytes()).collect()),
            CacheDtype::F16 => {
                ("F16", t.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect())
            }
            CacheDtype::Bf16 => {
                ("BF16", t.iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect())
            }
        }
    };
    let (st, cos) = le(&cache.cos);
    let (_, sin) = le(&cache.sin);
    let inv_freq: Vec<u8> = cache.inv_freq.iter().flat_map(|v| v.to_le_bytes()).collect();
    let shape = [cache.cos.nrows(), cache.cos.ncols()];
    let pairing = match spec.pairing() {
        posenc::rope::Pairing::Neox => "neox",
        posenc::rope::Pairing::Gptj => "gptj",
    };
    // serde_json's map keeps its keys sorted: __metadata__, cos, inv_freq, sin, which is
    // also the order of the data.
    let mut header = Map::new();
    let mut metadata = json!({
        "attention_factor": cache.attention_factor.to_string(),
        "format": "pt",
        "pairing": pairing,
        "rotary_dim": spec.rotary_dim().to_string(),
    });
    // A multimodal RoPE's axis per frequency, one digit each ("0" time, "1" height, "2"
    // width), its layout and its section.
    if let (Some(m), Value::Object(meta)) = (mrope, &mut metadata) {
        let axes: String = m.axes().iter().map(|a| char::from(b'0' + a)).collect();
        let [t, h, w] = m.section();
        meta.insert("mrope_axes".into(), axes.into());
        meta.insert("mrope_layout".into(), m.layout().name().into());
        meta.insert("mrope_section".into(), format!("{t},{h},{w}").into());
    }
    header.insert("__metadata__".into(), metadata);
    let mut at = 0;
    let mut data = Vec::with_capacity(cos.len() + inv_freq.len() + sin.len());
    for (name, dtype, shape, bytes) in [
        ("cos", st, &shape[..], &cos),
        ("inv_freq", "F32", &[cache.inv_freq.len()][..], &inv_freq),
        ("sin", st, &shape[..], &sin),
    ] {
        let entry = json!({"dtype": dtype, "shape": shape, "data_offsets": [at, at + bytes.len()]});
        header.insert(name.into(), entry);
        at += bytes.len();
        data.extend_from_slice(bytes);
    }
    let mut text = Value::Object(header).to_string().into_bytes();
    // The data starts 8-aligned, as safetensors' own writer pads it.
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + text.len() + data.len());
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(&text);
    out.extend_from_slice(&data);
    out
}
