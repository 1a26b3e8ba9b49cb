//! The `posenc` command line: positional-encoding tables, embeddings fused with positional
//! encodings from files, the adapters wgpu can see, the accuracy report of the README, and
//! pictures (PNG) of tables, similarities and errors.
//!
//! Every failure is one line on stderr, `posenc: <what went wrong>`, and an exit status:
//! 2 when the arguments or input are invalid (checked before any output is opened or any
//! GPU touched, so nothing is written), 1 when a valid request failed while running.

use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ndarray::{Array2, Array3, Axis};
use posenc::encode::{self as enc, EncodeOptions, Encoded, Scale};
use posenc::inputs::{self, EncodePositions, MAX_OUTPUT_VALUES, Source};
use posenc::output::Target;
use posenc::{
    DEFAULT_BASE, Error, Frequencies, PeSpec, Variant, cpu, gpu, naive, npy, plot, positions,
    reference, weights,
};

mod cmd;
mod output;
mod runtime_dir;
use cmd::rope::{ROPE_HELP, RopeArgs, rope};
use output::{cpu_table, emit, refuse_binary_on_terminal, reserve_table, target};

/// Exit status for a valid request that failed while running.
const EXIT_RUNTIME: u8 = 1;
/// Exit status for invalid arguments or input.
const EXIT_USAGE: u8 = 2;

/// `--len` when neither `--len` nor `--positions` is given.
const DEFAULT_LEN: u64 = 8;

/// Positions per starting point in the accuracy report.
const ACCURACY_RUN: u32 = 64;
/// Where the accuracy report's runs start, labelled as the README shows them.
const ACCURACY_STARTS: [(&str, u32); 6] = [
    ("2^16", 1 << 16),
    ("2^20", 1 << 20),
    ("2^24", 1 << 24),
    ("2^28", 1 << 28),
    ("2^31", 1 << 31),
    ("2^32-1", u32::MAX),
];

const EXIT_STATUS_HELP: &str = "Exit status: 0 on success; 1 when a valid request fails while \
running (no GPU for --device gpu, a GPU error, an unwritable output); 2 for invalid arguments \
or input, in which case nothing is written.";

/// Exact sinusoidal positional encodings on the GPU (wgpu) or CPU, bit-identical on both.
#[derive(Debug, Parser)]
#[command(name = "posenc", version, after_help = EXIT_STATUS_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compute a positional-encoding table: one row per position, `dim` values per row.
    #[command(after_help = EXIT_STATUS_HELP)]
    Table(TableArgs),
    /// Look up token embeddings and add positional encodings:
    /// out[b, t, :] = scale * E[ids[b, t], :] + PE(positions[b, t], :), written as .npy.
    #[command(after_help = ENCODE_HELP)]
    Encode(EncodeArgs),
    /// List every GPU adapter wgpu can see (WGPU_BACKEND narrows the search).
    Devices {
        /// Print a JSON array instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a markdown table of max abs errors against the high-precision reference, for
    /// naive float32 and for posenc, at positions near 2^16 ... 2^32-1.
    #[command(after_help = EXIT_STATUS_HELP)]
    Accuracy(AccuracyArgs),
    /// Time the encode and the table on the CPU and the GPU, and loading a checkpoint, each
    /// against a ceiling measured in the same rounds over the same bytes, and check the two
    /// encodes agree; at shapes of real models with --model or --suite.
    #[command(after_help = EXIT_STATUS_HELP)]
    Bench(BenchArgs),
    /// Draw a picture (PNG) of positional encodings: the table as a heatmap, the similarity
    /// between positions, or the error against the exact values.
    #[command(subcommand)]
    Plot(PlotCommand),
    /// ALiBi attention biases: the heads' slopes (--slopes), or the bias tensor
    /// [heads, len, kv_len] as .npy.
    #[command(after_help = ALIBI_HELP)]
    Alibi(AlibiArgs),
    /// Apply rotary position embedding (RoPE) to a query or key tensor from .npy, with
    /// Hugging Face's rope_scaling schemes, and write the result as .npy.
    #[command(after_help = ROPE_HELP)]
    Rope(RopeArgs),
}

#[derive(Debug, Subcommand)]
enum PlotCommand {
    /// The table as a heatmap: one row per position (0 at the top), one column per
    /// dimension, coloured from -1 (blue) through 0 (white) to 1 (red), with a colour bar.
    #[command(after_help = EXIT_STATUS_HELP)]
    Heatmap(HeatmapArgs),
    /// The cosine similarity between every pair of positions 0..N (it depends only on their
    /// distance), as a picture or, with --format text, as numbers.
    #[command(after_help = EXIT_STATUS_HELP)]
    Similarity(SimilarityArgs),
    /// Max abs error against the high-precision reference as a function of position, from 1
    /// to 2^32-1 on log-log axes, for posenc and for the naive float32 formula.
    #[command(after_help = EXIT_STATUS_HELP)]
    Error(ErrorPlotArgs),
}

#[derive(Debug, Args)]
struct HeatmapArgs {
    /// Model dimension: the columns of the picture, in 1..=4096 as the variant allows.
    #[arg(long, value_name = "D", default_value_t = 512, allow_negative_numbers = true)]
    dim: u32,
    /// Positions 0..N: the rows of the picture, 1..=4096.
    #[arg(long, value_name = "N", default_value_t = 50, allow_negative_numbers = true)]
    len: u64,
    /// Frequency base, in (1, 1e7].
    #[arg(long, value_name = "B", default_value_t = DEFAULT_BASE, allow_hyphen_values = true)]
    base: f64,
    /// Which positional encoding to picture.
    #[arg(long, value_name = "NAME", value_enum, default_value_t = VariantArg::Vaswani)]
    variant: VariantArg,
    /// The PNG to write; without it (or with -) the PNG goes to stdout, if stdout is not a
    /// terminal.
    ///
    /// With -, stdout. A regular file or a new path appears complete or not at all (a temporary
    /// file in its directory, renamed over it; on any error an existing file is left
    /// untouched); a symbolic link is followed, the file it leads to replaced and the link
    /// kept. A character device (/dev/null), a FIFO or a descriptor (/dev/stdout, /dev/fd/N)
    /// is written directly. A directory, a socket or a block device is refused (exit 2).
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct SimilarityArgs {
    /// Model dimension, an even number in 2..=65536.
    #[arg(long, value_name = "D", default_value_t = 64, allow_negative_numbers = true)]
    dim: u32,
    /// Positions 0..N, 1..=4096 (and N x N x D at most 2^32).
    #[arg(long, value_name = "N", default_value_t = 32, allow_negative_numbers = true)]
    len: u64,
    /// Frequency base, in (1, 1e7].
    #[arg(long, value_name = "B", default_value_t = DEFAULT_BASE, allow_hyphen_values = true)]
    base: f64,
    /// png: the picture. text: the N x N matrix, one row per line, values separated by
    /// spaces, 6 decimals.
    #[arg(long, value_enum, default_value_t = PlotFormat::Png)]
    format: PlotFormat,
    /// Write to PATH instead of stdout (a PNG goes to stdout only if it is not a terminal).
    ///
    /// With -, stdout. A regular file or a new path appears complete or not at all (a temporary
    /// file in its directory, renamed over it; on any error an existing file is left
    /// untouched); a symbolic link is followed, the file it leads to replaced and the link
    /// kept. A character device (/dev/null), a FIFO or a descriptor (/dev/stdout, /dev/fd/N)
    /// is written directly. A directory, a socket or a block device is refused (exit 2).
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ErrorPlotArgs {
    /// Model dimension, an even number in 2..=65536 (65536 takes a few seconds).
    #[arg(long, value_name = "D", default_value_t = 512, allow_negative_numbers = true)]
    dim: u32,
    /// Frequency base, in (1, 1e7].
    #[arg(long, value_name = "B", default_value_t = DEFAULT_BASE, allow_hyphen_values = true)]
    base: f64,
    /// The PNG to write; without it (or with -) the PNG goes to stdout, if stdout is not a
    /// terminal.
    ///
    /// With -, stdout. A regular file or a new path appears complete or not at all (a temporary
    /// file in its directory, renamed over it; on any error an existing file is left
    /// untouched); a symbolic link is followed, the file it leads to replaced and the link
    /// kept. A character device (/dev/null), a FIFO or a descriptor (/dev/stdout, /dev/fd/N)
    /// is written directly. A directory, a socket or a block device is refused (exit 2).
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PlotFormat {
    /// A PNG image.
    Png,
    /// The numbers, as text.
    Text,
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// Take the shape from a real model's config: bert-base, gpt2, llama3-8b,
    /// llama3-8b-decode, mistral-7b-decode or whisper-small: its width, vocabulary and
    /// table storage type (the output is f32 unless --out-dtype says otherwise), and the
    /// checkpoint load is timed. Shape and type flags given with it override the preset's.
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
    /// Run every preset of --model in turn and print one table (with --json, {"suite":
    /// [...]}, one bench object per preset). Shape and type flags given with it override
    /// every preset's.
    #[arg(long, conflicts_with = "model")]
    suite: bool,
    /// Sequences per batch [default: 8].
    #[arg(long, value_name = "B", allow_negative_numbers = true)]
    batch: Option<usize>,
    /// Tokens per sequence (positions 0..L) [default: 1024].
    #[arg(long, value_name = "L", allow_negative_numbers = true)]
    len: Option<usize>,
    /// Model dimension, even [default: 1024].
    #[arg(long, value_name = "D", allow_negative_numbers = true)]
    dim: Option<usize>,
    /// Vocabulary rows [default: 32000].
    #[arg(long, value_name = "V", allow_negative_numbers = true)]
    vocab: Option<usize>,
    /// Embedding table storage type [default: f32].
    #[arg(long, value_enum)]
    dtype: Option<OutDtype>,
    /// Encode output type [default: f32].
    #[arg(long, value_enum)]
    out_dtype: Option<OutDtype>,
    /// Which encode paths to time. Unlike the commands that compute, the bench never
    /// falls back: with gpu or both, a GPU fault (a lost device, as
    /// POSENC_FAULT_INJECT=device-lost makes one, or a GPU limit) ends the run with one line
    /// on stderr and exit status 1, printing no measurements, because timing the CPU in the
    /// GPU's place would report figures nobody asked for. cpu never opens a GPU.
    #[arg(long, value_enum, default_value_t = BenchDevice::Both)]
    device: BenchDevice,
    /// Timed runs per item, after one warm-up; at most 10000 [default: 10, or 5 per preset
    /// with --suite].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    repeats: Option<usize>,
    /// Also time loading the table from a one-tensor .safetensors file (written to a
    /// temporary directory and deleted afterwards) against reading the file, both from a
    /// warm page cache [default: true with --model or --suite, else false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    load: Option<bool>,
    /// Also draw a PNG bar chart of encode throughput against the copy ceilings, one group
    /// per shape, to PATH (not -: the report goes to stdout).
    ///
    /// A regular file or a new path appears complete or not at all (a temporary file in its
    /// directory, renamed over it); a symbolic link is followed, the file it leads to
    /// replaced and the link kept. A character device, a FIFO or a descriptor (/dev/fd/N) is
    /// written directly. A directory, a socket or a block device is refused (exit 2).
    #[arg(long, value_name = "PATH")]
    plot: Option<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

impl BenchArgs {
    /// `base` with every field given on the command line in its place.
    fn apply(&self, base: posenc::bench::Config) -> posenc::bench::Config {
        posenc::bench::Config {
            batch: self.batch.unwrap_or(base.batch),
            len: self.len.unwrap_or(base.len),
            dim: self.dim.unwrap_or(base.dim),
            vocab: self.vocab.unwrap_or(base.vocab),
            dtype: self.dtype.map_or(base.dtype, Into::into),
            out_dtype: self.out_dtype.map_or(base.out_dtype, Into::into),
            devices: match self.device {
                BenchDevice::Cpu => posenc::bench::Devices::Cpu,
                BenchDevice::Gpu => posenc::bench::Devices::Gpu,
                BenchDevice::Both => posenc::bench::Devices::Both,
            },
            repeats: self.repeats.unwrap_or(base.repeats),
            load: self.load.unwrap_or(base.load),
            ..base
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BenchDevice {
    /// The CPU path only.
    Cpu,
    /// The GPU path only.
    Gpu,
    /// Both, with the GPU/CPU speed ratio.
    Both,
}

#[derive(Debug, Args)]
struct TableArgs {
    /// Model dimension: the values per row, in 1..=65536 (even for vaswani and whisper; at
    /// least 2 for tensor2tensor and 4 for fairseq and whisper).
    #[arg(long, value_name = "D", default_value_t = 512, allow_negative_numbers = true)]
    dim: u32,
    /// Positions 0..N [default: 8 when --positions is not given].
    #[arg(long, value_name = "N", conflicts_with = "positions", allow_negative_numbers = true)]
    len: Option<u64>,
    /// Comma-separated positions and half-open ranges, e.g. `0..4,1000000,4294967295`.
    #[arg(long, value_name = "SPEC")]
    positions: Option<String>,
    #[command(flatten)]
    pe: PeArgs,
    /// Where to compute. `auto` uses the GPU when one opens, else the CPU with a note on
    /// stderr; `gpu` fails without one. cpu and gpu give the same bits.
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    device: Device,
    /// csv: no header, shortest round-trip decimals. npy: '<f4', C order, shape
    /// (positions, D); on stdout only when stdout is not a terminal. json: {"dim",
    /// "positions", "values"}.
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    format: Format,
    /// Write to PATH instead of stdout.
    ///
    /// With -, stdout. A regular file or a new path appears complete or not at all (a temporary
    /// file in its directory, renamed over it; on any error an existing file is left
    /// untouched); a symbolic link is followed, the file it leads to replaced and the link
    /// kept. A character device (/dev/null), a FIFO or a descriptor (/dev/stdout, /dev/fd/N)
    /// is written directly. A directory, a socket or a block device is refused (exit 2).
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
    /// At most this many bytes of GPU memory in posenc's buffers at once, at least 1 (default:
    /// the POSENC_GPU_MEMORY_BUDGET environment variable, also at least 1, else no budget).
    #[arg(long, value_name = "BYTES", value_parser = parse_budget,
          allow_hyphen_values = true)]
    gpu_memory_budget: Option<u64>,
}

#[derive(Debug, Args)]
struct AccuracyArgs {
    /// Model dimension, an even number in 2..=65536.
    #[arg(long, value_name = "D", default_value_t = 512, allow_negative_numbers = true)]
    dim: u32,
    /// Frequency base, in (1, 1e7].
    #[arg(long, value_name = "B", default_value_t = DEFAULT_BASE, allow_hyphen_values = true)]
    base: f64,
    /// Where posenc's column is computed (cpu and gpu give the same bits).
    #[arg(long, value_enum, default_value_t = FastDevice::Auto)]
    device: FastDevice,
}

const ENCODE_HELP: &str = "Positions: --positions gives each token's; --offsets gives each row's first (row b holds positions offsets[b], offsets[b]+1, ..., as when decoding with a KV cache); with neither, every row counts from 0, except that with --variant fairseq positions follow fairseq's make_positions (tokens equal to --padding-idx get padding_idx, the others padding_idx + 1, padding_idx + 2, ...), and otherwise with --pad-id the batch is taken as left-padded and each row counts only its non-pad tokens from 0 (pad tokens get position 0). Pad tokens' (--pad-id) output rows are zeros whatever their position.

With --position-table, a learned table P replaces the sinusoid: out = scale * E[id] + P[position].

Everything (files, dtypes, shapes, ids against the vocabulary, the scale) is checked before any GPU work and before OUT is opened.

Exit status: 0 on success; 1 when a valid request fails while running (no GPU for --device gpu, a GPU error, an unwritable output); 2 for invalid arguments or input, in which case nothing is written.";

#[derive(Debug, Args)]
struct EncodeArgs {
    /// Embedding table [V, D] (D as the variant allows): one tensor of a .safetensors file (F32, F16 or BF16),
    /// or a .npy array ('<f4' or '<f2'; NumPy has no bfloat16, so bf16 tables come from
    /// .safetensors only).
    #[arg(long, value_name = "PATH")]
    weights: PathBuf,
    /// The .safetensors tensor to use; may be left out when the file holds exactly one 2-D
    /// tensor.
    #[arg(long, value_name = "NAME")]
    tensor: Option<String>,
    /// Token ids: .npy of int32, int64 or uint32, shape [B, L], or [L] for one sequence (the
    /// output is then [L, D]). Each must be below V, save the pad id.
    #[arg(long, value_name = "PATH")]
    ids: PathBuf,
    /// Each token's position: .npy of uint32, the shape of the ids.
    #[arg(long, value_name = "PATH", conflicts_with = "offsets")]
    positions: Option<PathBuf>,
    /// Each row's first position: .npy of uint32 or int64, shape [B] ([1] for [L] ids).
    #[arg(long, value_name = "PATH")]
    offsets: Option<PathBuf>,
    /// Padding token id: its output rows are zeros and it need not be below V. Without
    /// --positions or --offsets it also makes the batch left-padded (see below).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pad_id: Option<u32>,
    /// Embedding scale: none, sqrt (sqrt(D), the Transformer's) or a finite number. With a
    /// scale, cpu and gpu may differ by one rounding of the product.
    #[arg(long, value_name = "S", default_value = "none", value_parser = parse_scale,
          allow_hyphen_values = true)]
    scale: Scale,
    /// Where to compute. `auto` uses the GPU when one opens, else the CPU with a note on
    /// stderr; `gpu` fails without one.
    #[arg(long, value_enum, default_value_t = FastDevice::Auto)]
    device: FastDevice,
    /// Output dtype: f32 ('<f4'), f16 ('<f2') or bf16, stored as '<u2' holding the raw
    /// bfloat16 bits (in NumPy: (a.astype(np.uint32) << 16).view(np.float32)).
    #[arg(long, value_enum, default_value_t = OutDtype::F32)]
    out_dtype: OutDtype,
    #[command(flatten)]
    pe: PeArgs,
    /// A learned position table P [max_positions, D] (BERT, GPT-2) to add instead of a
    /// sinusoid: a .safetensors tensor or a .npy array, like --weights. Every position must
    /// be below max_positions.
    #[arg(long, value_name = "PATH",
          conflicts_with_all = ["variant", "frequencies", "base", "min_timescale",
                                "max_timescale", "start_index", "padding_idx"])]
    position_table: Option<PathBuf>,
    /// The .safetensors tensor of --position-table; may be left out when the file holds
    /// exactly one 2-D tensor.
    #[arg(long, value_name = "NAME", requires = "position_table")]
    position_tensor: Option<String>,
    /// The output .npy, shape [B, L, D] ([L, D] for [L] ids), C order.
    ///
    /// With -, stdout. A regular file or a new path appears complete or not at all (a temporary
    /// file in its directory, renamed over it; on any error an existing file is left
    /// untouched); a symbolic link is followed, the file it leads to replaced and the link
    /// kept. A character device (/dev/null), a FIFO or a descriptor (/dev/stdout, /dev/fd/N)
    /// is written directly. A directory, a socket or a block device is refused (exit 2).
    #[arg(short, long, value_name = "OUT.npy")]
    output: PathBuf,
    /// At most this many bytes of GPU memory in posenc's buffers at once, at least 1: the
    /// batch is streamed through in chunks that fit (default: the POSENC_GPU_MEMORY_BUDGET
    /// environment variable, also at least 1, else no budget).
    #[arg(long, value_name = "BYTES", value_parser = parse_budget,
          allow_hyphen_values = true)]
    gpu_memory_budget: Option<u64>,
}

/// `--scale`: `none`, `sqrt` or a finite number.
fn parse_scale(text: &str) -> Result<Scale, String> {
    match text {
        "none" => Ok(Scale::None),
        "sqrt" => Ok(Scale::SqrtDim),
        _ => match text.parse::<f32>() {
            Ok(v) if v.is_finite() => Ok(Scale::Value(v)),
            _ => Err("expected none, sqrt or a finite number".into()),
        },
    }
}

/// `--gpu-memory-budget`: a whole number of bytes, at least 1. Zero is refused, as
/// POSENC_GPU_MEMORY_BUDGET refuses it: no buffer fits in no memory, and "no budget" is
/// leaving the option out.
fn parse_budget(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(bytes) if bytes >= 1 => Ok(bytes),
        _ => Err("expected a whole number of bytes, at least 1".into()),
    }
}

/// The sinusoid's convention, shared by `table` and `encode`.
#[derive(Debug, Args)]
struct PeArgs {
    /// The published convention to reproduce (README, "Variants"): column layout, frequency
    /// formula and position numbering.
    #[arg(long, value_enum, default_value_t = VariantArg::Vaswani)]
    variant: VariantArg,
    /// exact: the formula at full precision (within 6e-8 at every position). f32: the
    /// frequencies and angle rounded to float32 as the frameworks compute them, then the
    /// exact sin/cos of that angle, to match checkpoints trained that way.
    #[arg(long, value_enum, default_value_t = FrequenciesArg::Exact)]
    frequencies: FrequenciesArg,
    /// Frequency base, in (1, 1e7] [default: 10000]; tensor2tensor: max_timescale.
    #[arg(long, value_name = "B", allow_hyphen_values = true)]
    base: Option<f64>,
    /// tensor2tensor's min_timescale [default: 1.0].
    #[arg(long, value_name = "T", allow_hyphen_values = true)]
    min_timescale: Option<f64>,
    /// tensor2tensor's max_timescale [default: 10000.0] (the same as --base).
    #[arg(long, value_name = "T", conflicts_with = "base", allow_hyphen_values = true)]
    max_timescale: Option<f64>,
    /// Added to every position (tensor2tensor's start_index) [default: 0].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    start_index: Option<u32>,
    /// fairseq's padding_idx: the position whose row is zeros, and in encode the number
    /// that positions count from (pad tokens get it, others padding_idx + 1, ...); `none`:
    /// no zero row, positions from 0 [default: 1].
    #[arg(long, value_name = "N|none", value_parser = parse_padding_idx,
          allow_hyphen_values = true)]
    padding_idx: Option<PaddingIdx>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PaddingIdx(Option<u32>);

/// `--padding-idx`: `none` or a u32.
fn parse_padding_idx(text: &str) -> Result<PaddingIdx, String> {
    if text == "none" {
        return Ok(PaddingIdx(None));
    }
    text.parse::<u32>()
        .map(|v| PaddingIdx(Some(v)))
        .map_err(|_| "expected none or an integer in 0..=4294967295".into())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum VariantArg {
    /// Interleaved [sin, cos, ...], w_i = base^(-2i/d), d even (Attention Is All You Need).
    Vaswani,
    /// Interleaved like vaswani; an odd d ends with a sin column (HF DistilBERT, XLM).
    Distilbert,
    /// sin in [0, ceil(d/2)), cos after it, vaswani's frequencies (HF Marian).
    Marian,
    /// [sin | cos], w_i = min exp(-i ln(max/min) / max(n-1, 1)), zero column for odd d.
    Tensor2tensor,
    /// [sin | cos], w_i = exp(-i ln(base) / (h-1)), zero column for odd d, zero padding row.
    Fairseq,
    /// [sin | cos], w_i = exp(-i ln(base) / (d/2-1)), d even (OpenAI Whisper).
    Whisper,
}

impl From<VariantArg> for Variant {
    fn from(v: VariantArg) -> Self {
        match v {
            VariantArg::Vaswani => Variant::Vaswani,
            VariantArg::Distilbert => Variant::DistilBert,
            VariantArg::Marian => Variant::Marian,
            VariantArg::Tensor2tensor => Variant::Tensor2Tensor,
            VariantArg::Fairseq => Variant::Fairseq,
            VariantArg::Whisper => Variant::Whisper,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FrequenciesArg {
    /// Full precision.
    Exact,
    /// Rounded to float32 as the frameworks compute them.
    F32,
}

impl PeArgs {
    /// The spec these arguments describe at dimension `dim`.
    fn spec(&self, dim: u32) -> Result<PeSpec, Error> {
        let variant = Variant::from(self.variant);
        let mut spec = PeSpec::for_variant(variant, dim)?;
        let t2t = variant == Variant::Tensor2Tensor;
        if !t2t && (self.min_timescale.is_some() || self.max_timescale.is_some()) {
            return Err(Error::InvalidParameter {
                field: "variant",
                value: format!("{variant} (with --min-timescale or --max-timescale)"),
                allowed: "tensor2tensor for timescales; --base sets the others' base",
            });
        }
        if t2t {
            let max = self.max_timescale.or(self.base).unwrap_or(DEFAULT_BASE);
            spec = spec.with_timescales(self.min_timescale.unwrap_or(1.0), max)?;
        } else if let Some(base) = self.base {
            spec = spec.with_base(base)?;
        }
        if let Some(PaddingIdx(padding_idx)) = self.padding_idx {
            if variant != Variant::Fairseq {
                return Err(Error::InvalidParameter {
                    field: "variant",
                    value: format!("{variant} (with --padding-idx)"),
                    allowed: "fairseq for --padding-idx",
                });
            }
            spec = spec.with_padding_idx(padding_idx);
        }
        let frequencies = match self.frequencies {
            FrequenciesArg::Exact => Frequencies::Exact,
            FrequenciesArg::F32 => Frequencies::F32,
        };
        Ok(spec.with_frequencies(frequencies).with_start_index(self.start_index.unwrap_or(0)))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum OutDtype {
    /// float32, '<f4'.
    F32,
    /// float16, '<f2'.
    F16,
    /// bfloat16, as '<u2' raw bits.
    Bf16,
}

impl From<OutDtype> for enc::Dtype {
    fn from(d: OutDtype) -> Self {
        match d {
            OutDtype::F32 => enc::Dtype::F32,
            OutDtype::F16 => enc::Dtype::F16,
            OutDtype::Bf16 => enc::Dtype::Bf16,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Device {
    /// The fast multi-threaded CPU path.
    Cpu,
    /// The GPU, through wgpu.
    Gpu,
    /// The slow high-precision path, rounded to float32.
    Reference,
    /// The GPU if one opens, else the CPU.
    Auto,
}

impl Device {
    /// The fast device this names, or `None` for the reference path.
    fn fast(self) -> Option<FastDevice> {
        match self {
            Device::Cpu => Some(FastDevice::Cpu),
            Device::Gpu => Some(FastDevice::Gpu),
            Device::Auto => Some(FastDevice::Auto),
            Device::Reference => None,
        }
    }
}

/// A device for work the reference path does not do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FastDevice {
    /// The fast multi-threaded CPU path.
    Cpu,
    /// The GPU, through wgpu.
    Gpu,
    /// The GPU if one opens, else the CPU.
    Auto,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Comma-separated values, one row per position.
    Csv,
    /// NumPy .npy, float32.
    Npy,
    /// One JSON object.
    Json,
}

/// An error and the exit status it earns.
#[derive(Debug)]
struct Failure {
    code: u8,
    error: Error,
}

impl Failure {
    /// An error found while checking the request, whatever its kind.
    fn usage(error: Error) -> Self {
        Self { code: EXIT_USAGE, error }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        // A malformed parameter is the caller's to fix even when found late (for instance
        // POSENC_MAX_BINDING_SIZE, read when the GPU opens).
        let code = match error {
            Error::InvalidParameter { .. }
            | Error::PositionSpec { .. }
            | Error::TokenId { .. }
            | Error::NonFinite { .. }
            | Error::Position { .. }
            | Error::Format { .. }
            | Error::Dtype { .. }
            | Error::Rank { .. }
            | Error::Tensor { .. }
            | Error::RopeScaling { .. }
            | Error::OutputPath { .. }
            | Error::TooLarge { .. } => EXIT_USAGE,
            _ => EXIT_RUNTIME,
        };
        Self { code, error }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(&e),
    };
    // Before anything opens an adapter (and before any thread starts); removed on return.
    let _runtime_dir = runtime_dir::RuntimeDir::ensure();
    // Without it, Ctrl-C while an output is written would leave its temporary file.
    if let Err(e) = posenc::output::remove_temporaries_on_signals() {
        note(&format!("temporary files will not be removed on a signal: {e}"));
    }
    let result = match cli.command {
        Command::Table(args) => table(&args),
        Command::Encode(args) => encode(&args),
        Command::Devices { json } => devices(json),
        Command::Accuracy(args) => accuracy(&args),
        Command::Bench(args) => bench(&args),
        Command::Plot(PlotCommand::Heatmap(args)) => plot_heatmap(&args),
        Command::Plot(PlotCommand::Similarity(args)) => plot_similarity(&args),
        Command::Plot(PlotCommand::Error(args)) => plot_error(&args),
        Command::Alibi(args) => alibi(&args),
        Command::Rope(args) => rope(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure { code, error }) => {
            eprintln!("posenc: {}", one_line(&error.to_string()));
            ExitCode::from(code)
        }
    }
}

/// Help and version go out whole; a parse error becomes its first paragraph joined into one
/// line (a missing argument's name is on the line after the message), because the usage
/// clap appends would bury what is wrong.
fn clap_exit(e: &clap::Error) -> ExitCode {
    if !e.use_stderr() {
        // Nothing useful can be done if stdout is gone.
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = e.print();
        return ExitCode::from(EXIT_USAGE);
    }
    let rendered = e.render().to_string();
    let paragraph: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect();
    let message =
        if paragraph.is_empty() { "invalid arguments".into() } else { paragraph.join(" ") };
    eprintln!("posenc: {}", message.strip_prefix("error: ").unwrap_or(&message));
    ExitCode::from(EXIT_USAGE)
}

/// Joins a message's lines: wgpu's errors can span several, and the contract is one.
fn one_line(message: &str) -> String {
    message.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

fn note(message: &str) {
    eprintln!("posenc: note: {}", one_line(message));
}

/// Where the fast paths run, once chosen.
enum Compute {
    Cpu,
    Gpu(Box<gpu::Context>),
}

impl Compute {
    /// The GPU wgpu's conventions choose; `budget` overrides POSENC_GPU_MEMORY_BUDGET.
    /// POSENC_FAULT_INJECT, read here as every posenc variable is, may lose it at once.
    fn open_gpu(budget: Option<u64>) -> Result<Self, Error> {
        let ctx = gpu::Context::new()?;
        let ctx = match budget {
            Some(bytes) => ctx.with_memory_budget(bytes),
            None => ctx,
        };
        Ok(Self::Gpu(Box::new(ctx)))
    }

    fn table(&self, spec: &PeSpec, positions: &[u32]) -> Result<Array2<f32>, Failure> {
        Ok(match self {
            Self::Cpu => cpu_table(spec, positions)?,
            Self::Gpu(ctx) => {
                reserve_table(spec, positions)?;
                ctx.table(spec, positions)?
            }
        })
    }

    fn encode(&self, input: &EncodeInput) -> Result<Encoded, Failure> {
        let (table, ids, positions) =
            (input.table.embeddings(), input.ids.view(), input.positions.view());
        let options = &input.options;
        Ok(match (self, &input.pe) {
            (Self::Cpu, PeInput::Spec(spec)) => cpu::encode(spec, table, ids, positions, options)?,
            (Self::Cpu, PeInput::Learned(p)) => {
                cpu::encode_learned(p.embeddings(), table, ids, positions, options)?
            }
            (Self::Gpu(ctx), PeInput::Spec(spec)) => {
                let table = ctx.upload_table(table)?;
                ctx.encode(spec, &table, ids, positions, options)?
            }
            (Self::Gpu(ctx), PeInput::Learned(p)) => {
                let p = ctx.upload_position_table(p.embeddings())?;
                let table = ctx.upload_table(table)?;
                ctx.encode_learned(&p, &table, ids, positions, options)?
            }
        })
    }

    fn describe(&self) -> String {
        match self {
            Self::Cpu => "cpu".into(),
            Self::Gpu(ctx) => {
                let s = ctx.summary();
                format!("gpu: {}, {}", s.name, s.backend)
            }
        }
    }
}

/// The device policy of every command that computes (table, encode, rope, alibi,
/// accuracy): runs `work` where `device` says and returns what it computed.
///
/// - `cpu`: on the CPU; no GPU is opened.
/// - `gpu`: on the GPU; any failure stands (exit 1, one line), save a malformed posenc
///   variable met while opening it (exit 2).
/// - `auto`: on the GPU, unless none opens or the work meets a device fault there (see
///   [`is_device_fault`]): then one `posenc: note:` line says why and `work` runs again on
///   the CPU, which gives the same bits. The context is dropped before the CPU starts.
///
/// `work` must leave no trace when it fails, so that running it twice is safe: it computes
/// into memory, and the caller writes the output once it has it.
fn on_device<T>(
    device: FastDevice,
    budget: Option<u64>,
    work: impl Fn(&Compute) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let why = match device {
        FastDevice::Cpu => return work(&Compute::Cpu),
        FastDevice::Gpu => return work(&Compute::open_gpu(budget)?),
        FastDevice::Auto => match Compute::open_gpu(budget) {
            Ok(gpu) => match work(&gpu) {
                Err(Failure { error, .. }) if is_device_fault(&error) => {
                    format!("the GPU failed, computing on the CPU instead: {error}")
                }
                done => return done,
            },
            Err(e @ (Error::NoAdapter { .. } | Error::RequestDevice { .. })) => {
                format!("computing on the CPU: {e}")
            }
            Err(e) => return Err(e.into()),
        },
    };
    note(&why);
    work(&Compute::Cpu)
}

/// Whether `--device auto` answers `error`, met on the GPU, by computing on the CPU: the
/// device was lost or ran out of memory, or the request exceeds a limit of the GPU path (a
/// row larger than one storage binding, a table larger than the memory budget). The CPU
/// has none of these limits. Other GPU errors (`Error::Gpu`: wgpu refused what posenc
/// asked) are posenc's bugs, reported rather than hidden behind a CPU result.
fn is_device_fault(error: &Error) -> bool {
    matches!(error, Error::DeviceLost { .. } | Error::OutOfMemory { .. } | Error::Limit { .. })
}

fn spec_of(dim: u32, base: f64) -> Result<PeSpec, Failure> {
    PeSpec::new(dim).and_then(|s| s.with_base(base)).map_err(Failure::usage)
}

/// Refuses tables over [`MAX_OUTPUT_VALUES`] values before anything of their size is
/// allocated.
fn check_size(rows: u64, dim: u32) -> Result<(), Error> {
    // A count past usize is no smaller a request: it stays too large as usize::MAX.
    let rows = usize::try_from(rows).unwrap_or(usize::MAX);
    let shape = [rows, dim as usize];
    inputs::check_shape("table", "the output", &shape, MAX_OUTPUT_VALUES, "MAX_OUTPUT_VALUES")
}

fn table(args: &TableArgs) -> Result<(), Failure> {
    let spec = args.pe.spec(args.dim).map_err(Failure::usage)?;
    let positions = match &args.positions {
        Some(text) => positions::parse_spec(text).map_err(Failure::usage)?,
        None => {
            let len = args.len.unwrap_or(DEFAULT_LEN);
            check_size(len, spec.dim()).map_err(Failure::usage)?;
            positions::contiguous(len).map_err(Failure::usage)?
        }
    };
    check_size(positions.len() as u64, spec.dim()).map_err(Failure::usage)?;
    let out = target(args.output.as_deref())?;
    if args.format == Format::Npy {
        let allowed = "npy only with -o PATH or a redirected stdout; csv or json on a terminal";
        refuse_binary_on_terminal(&out, "format", "npy", allowed)?;
    }

    // The request is valid: from here on failures are the run's (exit 1), save a malformed
    // environment variable met when the GPU opens.
    let table = match args.device.fast() {
        Some(fast) => on_device(fast, args.gpu_memory_budget, |c| c.table(&spec, &positions))?,
        None => {
            reserve_table(&spec, &positions)?;
            reference::table_f32(&spec, &positions)
        }
    };
    emit(&out, |w| write_table(w, args.format, spec.dim(), &positions, &table))
}

fn write_table(
    w: &mut dyn Write,
    format: Format,
    dim: u32,
    positions: &[u32],
    table: &Array2<f32>,
) -> io::Result<()> {
    match format {
        Format::Csv => {
            for row in table.axis_iter(Axis(0)) {
                for (k, v) in row.iter().enumerate() {
                    // Display prints the shortest decimal that reads back to the same f32.
                    if k == 0 { write!(w, "{v}") } else { write!(w, ",{v}") }?;
                }
                w.write_all(b"\n")?;
            }
            Ok(())
        }
        Format::Npy => npy::write(w, table.view()),
        Format::Json => {
            let values = table.as_standard_layout();
            let flat = values.as_slice().expect("a standard-layout array is one contiguous slice");
            let json = JsonTable { dim, positions, values: Rows { flat, dim: dim as usize } };
            serde_json::to_writer(&mut *w, &json)?;
            w.write_all(b"\n")
        }
    }
}

/// The JSON form of a table, serialised row by row so no second copy of it is built.
#[derive(serde::Serialize)]
struct JsonTable<'a> {
    dim: u32,
    positions: &'a [u32],
    values: Rows<'a>,
}

struct Rows<'a> {
    flat: &'a [f32],
    dim: usize,
}

impl serde::Serialize for Rows<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.flat.chunks(self.dim))
    }
}

fn encode(args: &EncodeArgs) -> Result<(), Failure> {
    let out = target(Some(&args.output))?;
    refuse_binary_on_terminal(&out, "output", "-", "a .npy needs -o PATH or a redirected stdout")?;
    let input = EncodeInput::load(args).map_err(Failure::usage)?;

    // The request is valid: from here on failures are the run's (exit 1).
    let values = input.ids.len() as u64 * input.table.dim().1 as u64;
    let bytes = values * input.options.out_dtype.size() as u64;
    posenc::output::check_allocation("the encode output", bytes)?;
    let encoded = on_device(args.device, args.gpu_memory_budget, |c| c.encode(&input))?;
    emit(&out, |w| write_encoded(w, &encoded, input.one_sequence))
}

/// Where an encode's position rows come from.
enum PeInput {
    Spec(PeSpec),
    Learned(weights::Table),
}

/// An encode request, read and checked: everything the computation needs.
struct EncodeInput {
    pe: PeInput,
    table: weights::Table,
    ids: Array2<u32>,
    positions: Array2<u32>,
    options: EncodeOptions,
    /// The ids were `[L]`: the output drops the batch axis.
    one_sequence: bool,
}

impl EncodeInput {
    fn load(args: &EncodeArgs) -> Result<Self, Error> {
        let table = inputs::read_table(Source::File(&args.weights), args.tensor.as_deref())?;
        let width = table.dim().1;
        let learned = match &args.position_table {
            Some(path) => Some(inputs::read_position_table(
                Source::File(path),
                args.position_tensor.as_deref(),
            )?),
            None => None,
        };
        // A width past u32 becomes u32::MAX, refused like any other bad dim; the error then
        // says where the dim came from.
        let dim = u32::try_from(width).unwrap_or(u32::MAX);
        let spec = match &learned {
            Some(p) if p.dim().1 != width => {
                return Err(Error::Shape {
                    op: "encode",
                    what: "position table width vs embedding width",
                    expected: width.to_string(),
                    actual: p.dim().1.to_string(),
                });
            }
            Some(_) => None,
            None => Some(args.pe.spec(dim).map_err(|e| match e {
                Error::InvalidParameter { field: "dim", allowed, .. } => Error::InvalidParameter {
                    field: "dim",
                    value: format!(
                        "{width} (the width of the table in {}, variant {})",
                        args.weights.display(),
                        Variant::from(args.pe.variant)
                    ),
                    allowed,
                },
                other => other,
            })?),
        };
        let options = EncodeOptions {
            scale: args.scale,
            pad_id: args.pad_id,
            out_dtype: args.out_dtype.into(),
        };
        options.scale.factor(width)?;

        // The output's shape is checked as the ids are read, before anything is built from it.
        let ids = inputs::read_ids(Source::File(&args.ids), table.dim(), args.pad_id)?;
        let fairseq_padding = spec.and_then(|s| s.padding_idx());
        let how = match (&args.positions, &args.offsets) {
            (Some(path), _) => EncodePositions::File(Source::File(path)),
            (None, Some(path)) => EncodePositions::Offsets(Source::File(path)),
            (None, None) => match (fairseq_padding, args.pad_id) {
                (Some(padding_idx), _) => EncodePositions::Fairseq { padding_idx },
                (None, Some(pad_id)) => EncodePositions::LeftPadded { pad_id },
                (None, None) => EncodePositions::Contiguous,
            },
        };
        let positions = inputs::encode_positions(&ids, how)?;
        let pe = match (spec, learned) {
            (Some(spec), _) => PeInput::Spec(spec),
            (None, Some(p)) => {
                enc::check_positions(positions.view(), p.dim().0)?;
                PeInput::Learned(p)
            }
            (None, None) => unreachable!("a spec unless a position table was given"),
        };
        let one_sequence = ids.one_sequence();
        Ok(Self { pe, table, ids: ids.ids, positions, options, one_sequence })
    }
}

fn write_encoded(w: &mut dyn Write, encoded: &Encoded, one_sequence: bool) -> io::Result<()> {
    match encoded {
        Encoded::F32(a) => write_batch(w, a, one_sequence),
        Encoded::F16(a) => write_batch(w, a, one_sequence),
        // NumPy has no bfloat16: the raw bits go out as '<u2'.
        Encoded::Bf16(a) => write_batch(w, a, one_sequence),
    }
}

fn write_batch<T: npy::Element>(
    w: &mut dyn Write,
    a: &Array3<T>,
    one_sequence: bool,
) -> io::Result<()> {
    if one_sequence { npy::write(w, a.index_axis(Axis(0), 0)) } else { npy::write(w, a.view()) }
}

/// Writes to stdout through a buffer. A closed pipe (`posenc table | head`) ends the run
/// quietly and successfully, as it does for other filters.
fn to_stdout(write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<(), Failure> {
    let mut out = BufWriter::new(io::stdout().lock());
    match write(&mut out).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(Error::Io { path: PathBuf::from("<stdout>"), source: e }.into())
        }
        _ => Ok(()),
    }
}

fn bench(args: &BenchArgs) -> Result<(), Failure> {
    use posenc::bench::{self, Config, PRESETS, SUITE_REPEATS};
    let configs: Vec<Config> = if args.suite {
        let suite = |p: &bench::Preset| Config { repeats: SUITE_REPEATS, ..p.config() };
        PRESETS.iter().map(|p| args.apply(suite(p))).collect()
    } else {
        let base = match &args.model {
            Some(name) => Config::preset(name).map_err(Failure::usage)?,
            None => Config::default(),
        };
        vec![args.apply(base)]
    };
    // Every size is checked before anything is allocated, the GPU opened or a file made.
    for config in &configs {
        config.check().map_err(Failure::usage)?;
    }
    let plot_file = args.plot.as_deref().map(|p| target(Some(p))).transpose()?;
    if plot_file.as_ref().is_some_and(|t| t.is_stdout()) {
        return Err(Failure::usage(Error::InvalidParameter {
            field: "plot",
            value: "-".into(),
            allowed: "a path: the report itself goes to stdout",
        }));
    }

    // Progress only where a person watches, and only once the run has taken a second.
    let interactive = io::stderr().is_terminal();
    let start = std::time::Instant::now();
    let mut shown = false;
    let progress = |step: &str| {
        if interactive && start.elapsed().as_secs_f64() > 1.0 {
            eprint!("\r\x1b[Kposenc bench: {step} ...");
            shown = true;
        }
    };
    let reports = if args.suite {
        bench::run_suite(&configs, progress).map(|s| s.suite)
    } else {
        bench::run(&configs[0], progress).map(|r| vec![r])
    };
    if shown {
        eprint!("\r\x1b[K");
    }
    // bench measures what it was asked for and never falls back; say how to measure the CPU.
    let reports = reports.map_err(|e| match e {
        Error::NoAdapter { detail, .. } => Error::NoAdapter {
            detail,
            hint: "`posenc bench --device cpu` measures the CPU alone; for the GPU items, \
                   install a GPU driver or Mesa's software Vulkan driver \
                   (`apt-get install mesa-vulkan-drivers`)",
        },
        e => e,
    })?;
    if let Some(file) = plot_file {
        let image = bench::chart(&reports)?;
        emit(&file, |w| image.write_png(w))?;
    }
    if args.json {
        to_stdout(|w| {
            if args.suite {
                let suite = bench::Suite { suite: reports };
                serde_json::to_writer_pretty(&mut *w, &suite)?;
            } else {
                serde_json::to_writer_pretty(&mut *w, &reports[0])?;
            }
            w.write_all(b"\n")
        })
    } else if args.suite {
        let table = bench::Suite { suite: reports }.to_table();
        to_stdout(|w| w.write_all(table.as_bytes()))
    } else {
        to_stdout(|w| w.write_all(reports[0].to_table().as_bytes()))
    }
}

fn devices(json: bool) -> Result<(), Failure> {
    let adapters = gpu::adapters();
    if json {
        if adapters.is_empty() {
            note(&format!("no GPU adapters found; {}", gpu::NO_ADAPTER_HINT));
        }
        return to_stdout(|w| {
            serde_json::to_writer_pretty(&mut *w, &adapters)?;
            w.write_all(b"\n")
        });
    }
    to_stdout(|w| {
        if adapters.is_empty() {
            return writeln!(w, "no GPU adapters found; {}", gpu::NO_ADAPTER_HINT);
        }
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        for (k, a) in adapters.iter().enumerate() {
            if k > 0 {
                writeln!(w)?;
            }
            writeln!(w, "[{k}] {}", a.name)?;
            writeln!(w, "    backend:             {}", a.backend)?;
            writeln!(w, "    device type:         {}", a.device_type)?;
            writeln!(w, "    driver:              {}", a.driver)?;
            writeln!(w, "    max storage binding: {}", bytes(a.max_storage_binding))?;
            writeln!(w, "    max buffer size:     {}", bytes(a.max_buffer_size))?;
            writeln!(w, "    SHADER_F16:          {}", yes_no(a.shader_f16))?;
            writeln!(w, "    TIMESTAMP_QUERY:     {}", yes_no(a.timestamp_query))?;
        }
        Ok(())
    })
}

/// A byte count, exact and in binary units.
fn bytes(n: u64) -> String {
    let units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = n as f64;
    let mut unit = "B";
    for u in units {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    if unit == "B" { format!("{n} B") } else { format!("{n} B ({value:.1} {unit})") }
}

fn accuracy(args: &AccuracyArgs) -> Result<(), Failure> {
    let spec = spec_of(args.dim, args.base)?;
    let run = ACCURACY_RUN as usize;
    let positions: Vec<u32> = ACCURACY_STARTS
        .iter()
        .flat_map(|&(_, p)| {
            let start = p.min(u32::MAX - (ACCURACY_RUN - 1));
            start..=start + (ACCURACY_RUN - 1)
        })
        .collect();

    let (fast, engine) =
        on_device(args.device, None, |c| Ok((c.table(&spec, &positions)?, c.describe())))?;
    let exact = reference::table(&spec, &positions);
    let naive = naive::table(&spec, &positions);

    let max_err = |a: &Array2<f32>, group: usize| {
        let rows = group * run..(group + 1) * run;
        a.slice(ndarray::s![rows.clone(), ..])
            .iter()
            .zip(exact.slice(ndarray::s![rows, ..]))
            .map(|(&v, &e)| (f64::from(v) - e).abs())
            .fold(0.0, f64::max)
    };
    to_stdout(|w| {
        writeln!(
            w,
            "Max absolute error against the reference, d = {}, base = {}, over {} positions \
             from each start; posenc on {}.",
            spec.dim(),
            spec.base(),
            ACCURACY_RUN,
            engine
        )?;
        writeln!(w)?;
        writeln!(w, "| positions near | naive f32 | posenc |")?;
        writeln!(w, "|---|---:|---:|")?;
        for (group, (label, _)) in ACCURACY_STARTS.iter().enumerate() {
            writeln!(
                w,
                "| {label} | {:.1e} | {:.1e} |",
                max_err(&naive, group),
                max_err(&fast, group)
            )?;
        }
        Ok(())
    })
}

/// The most multiply-adds `plot similarity` may spend (N x N x D): a few seconds.
const MAX_SIMILARITY_WORK: u64 = 1 << 32;

/// `n` as a count of rows or columns of a picture: at least 1, at most [`plot::MAX_CELLS`].
/// `field` is the option, `what` what it counts in the picture.
fn plot_cells(
    op: &'static str,
    field: &'static str,
    what: &'static str,
    n: u64,
) -> Result<usize, Failure> {
    if n == 0 {
        return Err(Failure::usage(Error::InvalidParameter {
            field,
            value: "0".into(),
            allowed: "at least 1",
        }));
    }
    if n > plot::MAX_CELLS as u64 {
        return Err(Failure::usage(Error::Limit {
            op,
            what,
            requested: n,
            limit_name: "plot::MAX_CELLS",
            limit: plot::MAX_CELLS as u64,
        }));
    }
    Ok(n as usize)
}

/// Refuses to pour a PNG into a terminal.
fn refuse_png_on_terminal(out: &Target) -> Result<(), Failure> {
    refuse_binary_on_terminal(
        out,
        "output",
        "a terminal",
        "a PNG needs -o PATH or a redirected stdout",
    )
}

fn plot_heatmap(args: &HeatmapArgs) -> Result<(), Failure> {
    const OP: &str = "plot heatmap";
    let variant = Variant::from(args.variant);
    let spec = PeSpec::for_variant(variant, args.dim)
        .and_then(|s| s.with_base(args.base))
        .map_err(Failure::usage)?;
    plot_cells(OP, "dim", "dim (columns of the picture)", args.dim.into())?;
    let rows = plot_cells(OP, "len", "len (rows of the picture)", args.len)?;
    let out = target(args.output.as_deref())?;
    refuse_png_on_terminal(&out)?;

    let positions: Vec<u32> = (0..rows as u32).collect();
    let table = cpu_table(&spec, &positions)?;
    let title = format!(
        "Positional encoding ({}), d = {}, base {}",
        variant.name(),
        spec.dim(),
        spec.base()
    );
    let image = plot::heatmap(table.view(), &title)?;
    emit(&out, |w| image.write_png(w))
}

fn plot_similarity(args: &SimilarityArgs) -> Result<(), Failure> {
    const OP: &str = "plot similarity";
    let spec = spec_of(args.dim, args.base)?;
    let n = plot_cells(OP, "len", "len (rows and columns of the picture)", args.len)?;
    let work = (n as u64 * n as u64).saturating_mul(spec.dim().into());
    if work > MAX_SIMILARITY_WORK {
        return Err(Failure::usage(Error::Limit {
            op: OP,
            what: "the work (len x len x dim multiply-adds)",
            requested: work,
            limit_name: "MAX_SIMILARITY_WORK",
            limit: MAX_SIMILARITY_WORK,
        }));
    }
    let out = target(args.output.as_deref())?;
    if args.format == PlotFormat::Png {
        refuse_png_on_terminal(&out)?;
    }

    let positions: Vec<u32> = (0..n as u32).collect();
    let table = cpu_table(&spec, &positions)?;
    posenc::output::check_allocation("the similarity matrix", (n * n * 4) as u64)?;
    let matrix = plot::similarity_matrix(table.view());
    match args.format {
        PlotFormat::Png => {
            let title =
                format!("Cosine similarity of positions, d = {}, base {}", spec.dim(), spec.base());
            let image = plot::similarity(matrix.view(), &title)?;
            emit(&out, |w| image.write_png(w))
        }
        PlotFormat::Text => emit(&out, |w| {
            for row in matrix.rows() {
                for (k, v) in row.iter().enumerate() {
                    if k == 0 { write!(w, "{v:9.6}") } else { write!(w, " {v:9.6}") }?;
                }
                w.write_all(b"\n")?;
            }
            Ok(())
        }),
    }
}

fn plot_error(args: &ErrorPlotArgs) -> Result<(), Failure> {
    let spec = spec_of(args.dim, args.base)?;
    let out = target(args.output.as_deref())?;
    refuse_png_on_terminal(&out)?;

    let image = plot::error_plot(&plot::error_curve(&spec));
    emit(&out, |w| image.write_png(w))
}

const ALIBI_HELP: &str = "Slopes of H heads: for H a power of two, m_k = 2^(-8k/H) for k = 1..H; otherwise the c = 2^floor(log2 H) slopes of c heads, then 2^(-8(2j-1)/(2c)) for j = 1..H-c. Each is the float32 nearest to its exact value.

Bias of head h, query i (at position offset + i) and key j (at position j): symmetric, -m_h |offset + i - j|; causal, -m_h (offset + i - j) for j <= offset + i and 0 above the diagonal (no mask: apply your own there). Each value is the correctly rounded float32 of m_h times the exact distance, bit for bit the same on the CPU and the GPU. Zeros are +0.0.

Everything is checked before any GPU work and before OUT is opened.

Exit status: 0 on success; 1 when a valid request fails while running (no GPU for --device gpu, a GPU error, an unwritable output); 2 for invalid arguments, in which case nothing is written.";

#[derive(Debug, Args)]
struct AlibiArgs {
    /// Attention heads, 1..=65536.
    #[arg(long, value_name = "H", allow_negative_numbers = true)]
    heads: u32,
    /// Print the heads' slopes, one per line (the shortest decimals that read back to the
    /// same float32), instead of computing a bias tensor.
    #[arg(long, conflicts_with_all = ["len", "kv_len", "form", "offset", "output"])]
    slopes: bool,
    /// Queries per head, at positions offset..offset+L.
    #[arg(
        long,
        value_name = "L",
        required_unless_present = "slopes",
        allow_negative_numbers = true
    )]
    len: Option<u64>,
    /// Keys, at positions 0..LK [default: offset + L].
    #[arg(long, value_name = "LK", allow_negative_numbers = true)]
    kv_len: Option<u64>,
    /// symmetric: -m |q - k|. causal: -m (q - k) for k <= q, 0 for k > q.
    #[arg(long, value_enum, default_value_t = AlibiForm::Symmetric)]
    form: AlibiForm,
    /// Position of the first query: a decoding step with N cached tokens is
    /// --len 1 --offset N.
    #[arg(long, value_name = "N", default_value_t = 0, allow_negative_numbers = true)]
    offset: u32,
    /// Where to compute. `auto` uses the GPU when one opens, else the CPU with a note on
    /// stderr; `gpu` fails without one. cpu and gpu give the same bits.
    #[arg(long, value_enum, default_value_t = FastDevice::Auto)]
    device: FastDevice,
    /// The output .npy: '<f4', shape (H, L, LK), C order.
    ///
    /// With -, stdout. A regular file or a new path appears complete or not at all (a temporary
    /// file in its directory, renamed over it; on any error an existing file is left
    /// untouched); a symbolic link is followed, the file it leads to replaced and the link
    /// kept. A character device (/dev/null), a FIFO or a descriptor (/dev/stdout, /dev/fd/N)
    /// is written directly. A directory, a socket or a block device is refused (exit 2).
    #[arg(short, long, value_name = "OUT.npy", required_unless_present = "slopes")]
    output: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum AlibiForm {
    /// -m |q - k| everywhere (bidirectional attention).
    Symmetric,
    /// -m (q - k) for keys up to the query, 0 after it (decoder attention).
    Causal,
}

impl From<AlibiForm> for posenc::alibi::Form {
    fn from(f: AlibiForm) -> Self {
        match f {
            AlibiForm::Symmetric => posenc::alibi::Form::Symmetric,
            AlibiForm::Causal => posenc::alibi::Form::Causal,
        }
    }
}

fn alibi(args: &AlibiArgs) -> Result<(), Failure> {
    use posenc::alibi::{self, AlibiSpec};
    if args.slopes {
        let slopes = alibi::slopes(args.heads).map_err(Failure::usage)?;
        // Display prints the shortest decimal that reads back to the same f32.
        return to_stdout(|w| slopes.iter().try_for_each(|s| writeln!(w, "{s}")));
    }
    let (Some(len), Some(output)) = (args.len, &args.output) else {
        unreachable!("clap requires --len and -o unless --slopes is given")
    };
    let out = target(Some(output))?;
    refuse_binary_on_terminal(&out, "output", "-", "a .npy needs -o PATH or a redirected stdout")?;
    let spec = AlibiSpec::new(args.heads, len)
        .and_then(|s| s.with_offset(args.offset))
        .and_then(|s| match args.kv_len {
            Some(kv_len) => s.with_kv_len(kv_len),
            None => Ok(s),
        })
        .map(|s| s.with_form(args.form.into()))
        .and_then(|s| s.check_size().map(|()| s))
        .map_err(Failure::usage)?;

    // The request is valid: from here on failures are the run's (exit 1).
    let bias = on_device(args.device, None, |c| match c {
        Compute::Cpu => Ok(alibi::bias_cpu(&spec)?),
        Compute::Gpu(ctx) => {
            posenc::output::check_allocation("the ALiBi bias", spec.n_values() as u64 * 4)?;
            Ok(ctx.alibi_bias(&spec)?)
        }
    })?;
    emit(&out, |w| npy::write(w, bias.view()))
}
