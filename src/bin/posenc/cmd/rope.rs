//! `posenc rope`: rotary position embedding of a `.npy` tensor, on the CPU or the GPU.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use ndarray::{Array4, ArrayView2, ArrayView3};
use posenc::alloc::check_allocation;
use posenc::commands::{ConfigSource, InvFreq, RopeOptions, ScalingSource, with_origin};
use posenc::inputs::{self, RopePositions, RopeTensor, Source};
use posenc::npy;
use posenc::rope::{self as rp, Element, MultimodalRope, RopeSpec};
use posenc::{Error, cpu};

use crate::args::{refuse_without, whole};
use crate::device::{Compute, FastDevice, on_device};
use crate::failure::Failure;
use crate::output::{emit, npy_target, output_help};
use posenc::placement::HostJob;

/// `posenc rope --help` after the options, before the exit statuses.
pub(crate) const HELP: &str = "For frequency i < r/2 (r = --rotary-dim) and the dimensions (a, b) \
    it rotates, (i, i + r/2) with --pairing neox or (2i, 2i + 1) with gptj: out_a = x_a cos(p w_i) \
    - x_b sin(p w_i), out_b = x_b cos(p w_i) + x_a sin(p w_i), w_i = base^(-2i/r) as --scaling \
    changes it, cos and sin times its attention factor. Dimensions from r on pass through. The \
    angle p w_i is reduced exactly for every u32 position.

--scaling takes a Hugging Face rope_scaling object, as JSON text or @FILE, e.g. '{\"rope_type\": \
    \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \
    \"original_max_position_embeddings\": 8192}'. rope_type (or the legacy type) is one of \
    default, linear, dynamic, yarn, longrope, llama3, proportional (Gemma 4: \
    \"partial_rotary_factor\" inside it sets how many frequencies are not zero, over the whole \
    --rotary-dim), ntk_alpha (HunYuan: \"alpha\" stretches the base, as HunYuan's \
    \"dynamic\" with alpha does); max_position_embeddings may be given inside it where the \
    scheme reads the model config's (dynamic needs it). dynamic and longrope use the sequence \
    length max(position) + 1 of this call, or --seq-len N: a Hugging Face module that grew its \
    frequencies for an earlier, longer call keeps them (max_seq_len_cached), and --seq-len with \
    that length reproduces it.

--config takes a Hugging Face model's config.json: its base, scaling (rope_scaling or \
    rope_parameters), rotary dim and pairing become the defaults, the flags override them, and \
    --layer-type picks one of per-layer-type rope_parameters (Gemma 3). The tensor's last axis \
    must be the config's head dim. A multimodal RoPE's config (M-RoPE: Qwen2-VL, Qwen2.5-VL, \
    Qwen3-VL, GLM-4V, ...) turns each frequency by the position of one of three axes, time, \
    height and width, as its mrope_section says.

Positions: --positions gives each token's (.npy [B, L] of uint32, int32 or int64; with a \
    multimodal config also [3, B, L], a position per axis, as the model's position ids give them: \
    text tokens have the same three); --offset N makes every sequence count from N (decoding \
    with a KV cache); the default is --offset 0.

Everything (files, dtypes, shapes, positions, the scaling) is checked before any GPU work and \
    before OUT is opened.";

#[derive(Debug, Args)]
pub(crate) struct RopeArgs {
    /// The query or key tensor: .npy of rank 4, '<f4', '<f2', or '<u2' holding bfloat16 bits
    /// (what `posenc encode --out-dtype bf16` writes). The output has the same dtype.
    #[arg(long, value_name = "X.npy")]
    input: PathBuf,
    /// Axis order of the tensor: blhd = [batch, len, heads, head_dim], bhld = [batch, heads,
    /// len, head_dim].
    #[arg(long, value_enum)]
    layout: LayoutArg,
    #[command(flatten)]
    params: RopeParams,
    /// Each token's position: .npy [B, L] of uint32, int32 or int64; with a multimodal
    /// RoPE's --config also [3, B, L], a position per axis (time, height, width).
    #[arg(long, value_name = "PATH", conflicts_with = "offset")]
    positions: Option<PathBuf>,
    /// Every sequence's first position: token l of each sequence is at N + l.
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = whole::<u32>("a whole number in 0..=4294967295 (offset + len - 1 <= \
              4294967295)"))]
    offset: Option<u32>,
    /// Where to compute. `auto` computes where the result reaches the host sooner (the CPU
    /// unless a large job meets a hardware GPU; POSENC_AUTO=gpu: the GPU when one opens),
    /// and on the CPU with a note when the GPU fails; `gpu` fails without one.
    #[arg(long, value_enum, default_value_t = FastDevice::Auto)]
    device: FastDevice,
    #[arg(short, long, value_name = "OUT.npy",
        help = "The output .npy, the input's shape and dtype, C order.",
        long_help = output_help!("The output .npy, the input's shape and dtype, C order."))]
    output: PathBuf,
}

/// The RoPE configuration's flags, shared by `rope` and `rope-cache`.
#[derive(Debug, Args)]
pub(crate) struct RopeParams {
    /// A Hugging Face model's config.json: base (rope_theta), scaling (rope_scaling or
    /// rope_parameters), rotary dim (partial_rotary_factor, rotary_pct, rotary_dim), pairing
    /// and head dim as transformers reads them. The flags below override it.
    #[arg(long, value_name = "CONFIG.json")]
    config: Option<PathBuf>,
    /// With --config: which of per-layer-type rope_parameters to use (e.g. Gemma 3's
    /// full_attention or sliding_attention).
    #[arg(long, value_name = "NAME", requires = "config")]
    layer_type: Option<String>,
    /// Which dimensions rotate together: neox (i, i + r/2; Llama and most HF models) or
    /// gptj (2i, 2i + 1) [default: the config's (rope-cache: the layout of its family's
    /// rotary module), else neox].
    #[arg(long, value_enum)]
    pairing: Option<PairingArg>,
    /// Rotated dimensions per head, even, 2..=head_dim [default: the config's, else
    /// head_dim].
    #[arg(long, value_name = "R", allow_negative_numbers = true,
          value_parser = whole::<u32>("an even number in 2..=head_dim"))]
    rotary_dim: Option<u32>,
    /// Frequency base (rope_theta), finite and > 1 [default: the config's, else 10000].
    #[arg(long, value_name = "B", allow_hyphen_values = true,
          value_parser = crate::args::float64)]
    base: Option<f64>,
    /// A Hugging Face rope_scaling object as JSON text, or @FILE to read it from a file
    /// [default: the config's, else none].
    #[arg(long, value_name = "JSON")]
    scaling: Option<String>,
    /// A model's own frequencies (its inv_freq buffer: radians per position, one per
    /// rotated pair, rotary_dim / 2 of them): a 1-D .npy of float32 or float64, or a
    /// .safetensors tensor of F32 or F64 (--inv-freq-tensor, or the file's only 1-D
    /// tensor). Each value is taken exactly: reproduces a framework whose float32 inv_freq
    /// is not the correctly rounded formula. Replaces --scaling, the base and --seq-len.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["scaling", "base", "seq_len"])]
    inv_freq: Option<PathBuf>,
    /// With --inv-freq: the tensor of the .safetensors file to read [default: its only
    /// 1-D tensor].
    #[arg(long, value_name = "NAME", requires = "inv_freq")]
    inv_freq_tensor: Option<String>,
    /// With --inv-freq: the factor cos and sin are multiplied by (transformers'
    /// attention_scaling), a positive normal number in float32 [default: the --config's
    /// scaling's (yarn, longrope), else 1].
    #[arg(long, value_name = "F", requires = "inv_freq", allow_hyphen_values = true,
          value_parser = crate::args::float64)]
    attention_factor: Option<f64>,
    /// The sequence length dynamic and longrope scaling see, 1..=2^32 [default: the largest
    /// position + 1]: pass a framework module's cached length (transformers'
    /// max_seq_len_cached) to reproduce frequencies it grew in an earlier, longer call.
    /// Refused beside any other scheme, which does not read it.
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = whole::<u64>("a whole number in 1..=4294967296 (one more than the largest \
              u32 position)"))]
    seq_len: Option<u64>,
}

impl RopeParams {
    /// The options as [`posenc::commands`] resolves them.
    pub(crate) fn options(&self) -> RopeOptions<'_> {
        RopeOptions {
            config: self.config.as_deref().map(ConfigSource::File),
            layer_type: self.layer_type.as_deref(),
            pairing: self.pairing.map(|p| match p {
                PairingArg::Neox => rp::Pairing::Neox,
                PairingArg::Gptj => rp::Pairing::Gptj,
            }),
            rotary_dim: self.rotary_dim,
            base: self.base,
            scaling: self.scaling.as_deref().map(|text| match text.strip_prefix('@') {
                Some(path) => ScalingSource::File(Path::new(path)),
                None => ScalingSource::Json(text),
            }),
            inv_freq: self
                .inv_freq
                .as_deref()
                .map(|path| InvFreq::File(path, self.inv_freq_tensor.as_deref())),
            attention_factor: self.attention_factor,
            seq_len: self.seq_len,
        }
    }

    /// The check clap's `requires` skips beside a conflicting flag
    /// ([`crate::args::refuse_without`]); [`RopeOptions::spec`] makes the others.
    pub(crate) fn check(&self) -> Result<(), Error> {
        let inv_freq = self.inv_freq.is_some();
        let tensor = self.inv_freq_tensor.is_some();
        refuse_without(tensor, "inv_freq_tensor", "--inv-freq-tensor", inv_freq, "--inv-freq")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LayoutArg {
    /// [batch, len, heads, head_dim].
    Blhd,
    /// [batch, heads, len, head_dim].
    Bhld,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PairingArg {
    /// i with i + r/2.
    Neox,
    /// 2i with 2i + 1.
    Gptj,
}

/// A rope request, read and checked.
struct RopeInput {
    spec: RopeSpec,
    /// A multimodal config's axes.
    mrope: Option<MultimodalRope>,
    tensor: RopeTensor,
    positions: RopePositions,
    layout: rp::Layout,
}

pub(crate) fn run(args: &RopeArgs) -> Result<(), Failure> {
    let out = npy_target(&args.output)?;
    let input = RopeInput::load(args).map_err(Failure::usage)?;

    // The request is valid: from here on failures are the run's (exit 1).
    crate::output::note_npy_extension(&args.output);
    let (spec, layout) = (&input.spec, input.layout);
    // Positions per axis, with the config's axes (`load` refuses them without); else one
    // per token, made here for an offset.
    let axes = match (&input.positions, &input.mrope) {
        (RopePositions::Axes(p), Some(m)) if !input.tensor.is_empty() => Some((p.view(), m)),
        _ => None,
    };
    let one = match axes {
        Some(_) => None,
        None => input.positions.for_tensor(&input.tensor)?,
    };
    let p = match (axes, &one) {
        (Some((p, m)), _) => Some(PositionsView::Axes(p, m)),
        (None, one) => one.as_ref().map(|p| PositionsView::One(p.view())),
    };
    let (elements, size) = match &input.tensor {
        RopeTensor::F32(x) => (x.len(), 4),
        RopeTensor::F16(x) => (x.len(), 2),
        RopeTensor::Bf16(x) => (x.len(), 2),
    };
    let job = HostJob::Rope { elements: elements as u64, bytes: elements as u64 * size };
    let rotated = on_device(args.device, None, job, |c| {
        Ok(match &input.tensor {
            RopeTensor::F32(x) => RopeTensor::F32(rotate(c, spec, x, p, layout)?),
            RopeTensor::F16(x) => RopeTensor::F16(rotate(c, spec, x, p, layout)?),
            RopeTensor::Bf16(x) => RopeTensor::Bf16(rotate(c, spec, x, p, layout)?),
        })
    })?;
    match rotated {
        RopeTensor::F32(x) => write(&out, x),
        RopeTensor::F16(x) => write(&out, x),
        // NumPy has no bfloat16: the raw bits go out as '<u2', as they came in.
        RopeTensor::Bf16(x) => write(&out, x),
    }
}

/// A rotation's positions: one per token, or one per axis with a multimodal RoPE's axes.
#[derive(Clone, Copy)]
enum PositionsView<'a> {
    One(ArrayView2<'a, u32>),
    Axes(ArrayView3<'a, u32>, &'a MultimodalRope),
}

fn rotate<T: Element>(
    compute: &Compute,
    spec: &RopeSpec,
    x: &Array4<T>,
    positions: Option<PositionsView<'_>>,
    layout: rp::Layout,
) -> Result<Array4<T>, Failure> {
    const WHAT: &str = "the RoPE output";
    // No positions: the tensor is empty, and its own rotation.
    let Some(positions) = positions else { return Ok(x.clone()) };
    Ok(match (compute, positions) {
        // A fallibly allocated output, each task copying its tokens just before it rotates
        // them: the output is as large as the input, which the user chose.
        (Compute::Cpu, PositionsView::One(p)) => cpu::rope(spec, x.view(), p, layout)?,
        (Compute::Cpu, PositionsView::Axes(p, m)) => {
            cpu::rope_multimodal(spec, m, x.view(), p, layout)?
        }
        (Compute::Gpu(ctx), positions) => {
            check_allocation(WHAT, (x.len() as u64).saturating_mul(size_of::<T>() as u64))?;
            match positions {
                PositionsView::One(p) => ctx.rope(spec, x.view(), p, layout)?,
                PositionsView::Axes(p, m) => ctx.rope_multimodal(spec, m, x.view(), p, layout)?,
            }
        }
    })
}

fn write<T: npy::Element>(out: &posenc::output::Target, a: Array4<T>) -> Result<(), Failure> {
    emit(out, |w| npy::write(w, a.view()))
}

impl RopeInput {
    fn load(args: &RopeArgs) -> Result<Self, Error> {
        let layout = match args.layout {
            LayoutArg::Blhd => rp::Layout::Blhd,
            LayoutArg::Bhld => rp::Layout::Bhld,
        };
        args.params.check()?;
        let options = args.params.options();
        let scaling = options.scaling()?;
        // Its shape, the output's, is checked against the size limit as it is read.
        let tensor = inputs::read_rope_input(Source::File(&args.input))?;
        let (batch, len, _, head_dim) = layout.dims(tensor.shape());
        let head_dim = u32::try_from(head_dim).unwrap_or(u32::MAX);
        // The tensor's head stands in for a head dim the config does not give.
        let (config, mrope) = options.config_multimodal(Some(head_dim))?;
        if let (Some(c), Some(path)) = (&config, &args.params.config)
            && c.head_dim() != head_dim
        {
            return Err(Error::InvalidParameter {
                field: "head_dim",
                value: format!(
                    "{head_dim} (the last axis of {}), but {} in {}",
                    args.input.display(),
                    c.head_dim(),
                    path.display()
                ),
                allowed: "the config's head dim: the tensor's last axis is the head",
            });
        }
        let origin = format!("the last axis of {}", args.input.display());
        let spec =
            options.spec(head_dim, config.as_ref(), scaling, |e, head_dim, rotary_dim| {
                with_origin(e, &origin, head_dim, rotary_dim)
            })?;
        let mrope = options.axes_for(mrope, &spec, None)?;
        let positions_file = args.positions.as_deref().map(Source::File);
        let positions = inputs::rope_positions_multimodal(positions_file, args.offset, batch, len)?;
        // Before OUT is opened.
        positions.check_axes(mrope.is_some())?;
        Ok(Self { spec, mrope, tensor, positions, layout })
    }
}
