//! `posenc encode`: token embeddings from a table on file, plus positional encodings (a
//! sinusoid or a learned table), written as `.npy`.

use std::collections::VecDeque;
use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use ndarray::{Array2, Array3, ArrayView2, Axis};
use posenc::encode::{EncodeOptions, Encoded, Scale};
use posenc::gpu::{self, PendingEncode};
use posenc::inputs::{self, EncodePositions, Source};
use posenc::model_config::{ModelConfig, ModelPositions};
use posenc::output::Target;
use posenc::{Error, PeSpec, cpu, npy, weights};

use crate::args::{OutDtype, PeArgs, parse_budget, refuse_off_gpu, whole, whole_at_least};
use crate::device::{Compute, FastDevice, on_device};
use crate::failure::Failure;
use crate::output::{emit, npy_target, output_help};
use posenc::placement::HostJob;

/// `posenc encode --help` after the options, before the exit statuses.
pub(crate) const HELP: &str = "Positions: --positions gives each token's; --offsets gives each \
    row's first (row b holds positions offsets[b], offsets[b]+1, ..., as when decoding with a KV \
    cache); with neither, every row counts from 0, except that with --variant fairseq positions \
    follow fairseq's make_positions (tokens equal to --padding-idx get padding_idx, the others \
    padding_idx + 1, padding_idx + 2, ...), and otherwise with --pad-id the batch is taken as \
    left-padded and each row counts only its non-pad tokens from 0 (pad tokens get position 0). \
    Pad tokens' (--pad-id) output rows are zeros whatever their position.

With --position-table, a learned table P replaces the sinusoid: out = scale * E[id] + P[position].

Everything (files, dtypes, shapes, ids against the vocabulary, the scale) is checked before any \
    GPU work and before OUT is opened.

On the GPU, an output larger than one batch (about 32 MiB, or --stream-batch tokens) is streamed: \
    the tokens go to the GPU in batches, three in flight at once, and each batch is written to OUT \
    as it comes back; a file still appears only when complete. On a terminal, stderr shows the \
    progress.";

#[derive(Debug, Args)]
pub(crate) struct EncodeArgs {
    /// Embedding table [V, D] (D as the variant allows): one tensor of a .safetensors file (F32,
    /// F16 or BF16), or a .npy array ('<f4' or '<f2'; NumPy has no bfloat16, so bf16 tables come
    /// from .safetensors only).
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
    /// --positions or --offsets it also makes the batch left-padded (see below) [default:
    /// the config's pad_token_id for m2m_100, fsmt and speech_to_text, else none].
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = whole::<u32>("a whole number in 0..=4294967295 (token ids are u32)"))]
    pad_id: Option<u32>,
    /// Embedding scale: none, sqrt (sqrt(D), the Transformer's) or a finite number (cpu and
    /// gpu give the same bits with one too) [default: with --config, sqrt when its
    /// scale_embedding is true and none when false (a config without it is refused); else
    /// none].
    #[arg(long, value_name = "S", value_parser = parse_scale, allow_hyphen_values = true)]
    scale: Option<Scale>,
    /// Where to compute. `auto` computes where the result reaches the host sooner (the CPU
    /// unless a large job meets a hardware GPU; POSENC_AUTO=gpu: the GPU when one opens),
    /// and on the CPU with a note when the GPU fails; `gpu` fails without one.
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
                                "max_timescale", "start_index", "padding_idx", "inv_freq"])]
    position_table: Option<PathBuf>,
    /// The .safetensors tensor of --position-table; may be left out when the file holds
    /// exactly one 2-D tensor.
    #[arg(long, value_name = "NAME", requires = "position_table")]
    position_tensor: Option<String>,
    #[arg(short, long, value_name = "OUT.npy",
        help = "The output .npy, shape [B, L, D] ([L, D] for [L] ids), C order.",
        long_help = output_help!("The output .npy, shape [B, L, D] ([L, D] for [L] ids), C \
            order."))]
    output: PathBuf,
    /// At most this many bytes of GPU memory in posenc's buffers at once, at least 1: the
    /// batch is streamed through in chunks that fit (default: the POSENC_GPU_MEMORY_BUDGET
    /// environment variable, also at least 1, else no budget).
    #[arg(long, value_name = "BYTES", value_parser = parse_budget,
          allow_hyphen_values = true)]
    gpu_memory_budget: Option<u64>,
    /// Tokens per batch when the GPU streams the output (default: about 32 MiB of output
    /// per batch, fewer when one storage binding or the memory budget holds less; the CPU
    /// computes the whole output at once). Outputs of at most one batch are not streamed.
    #[arg(long, value_name = "TOKENS",
          value_parser = whole_at_least::<u64>(
              Some(1),
              "a whole number of tokens in 1..=18446744073709551615",
          ),
          allow_hyphen_values = true)]
    stream_batch: Option<u64>,
}

/// `--scale`: `none`, `sqrt` or a finite number.
fn parse_scale(text: &str) -> Result<Scale, String> {
    match text {
        "none" => Ok(Scale::None),
        "sqrt" => Ok(Scale::SqrtDim),
        _ => {
            match text.parse::<f32>() {
                Ok(v) if v.is_finite() => Ok(Scale::Value(v)),
                _ => Err("expected none, sqrt or a number finite in float32 (|S| <= 3.4028235e38)"
                    .into()),
            }
        }
    }
}

pub(crate) fn run(args: &EncodeArgs) -> Result<(), Failure> {
    for (given, flag) in [
        (args.gpu_memory_budget.is_some(), "--gpu-memory-budget"),
        (args.stream_batch.is_some(), "--stream-batch"),
    ] {
        refuse_off_gpu(given, flag, args.device).map_err(Failure::usage)?;
    }
    let out = npy_target(&args.output)?;
    let input = EncodeInput::load(args).map_err(Failure::usage)?;

    // The request is valid: from here on failures are the run's (exit 1).
    crate::output::note_npy_extension(&args.output);
    let values = input.ids.len() as u64 * input.table.dim().1 as u64;
    let bytes = values * input.options.out_dtype.size() as u64;
    posenc::alloc::check_allocation("the encode output", bytes)?;
    let job = input.host_job(bytes);
    let done = on_device(args.device, args.gpu_memory_budget, job, |c| match c {
        Compute::Gpu(ctx) => {
            let batch = stream_batch(ctx, &input, args.stream_batch);
            if input.ids.len() > batch {
                return stream(ctx, &input, batch, &out).map(|()| None);
            }
            encode(c, &input).map(Some)
        }
        Compute::Cpu => encode(c, &input).map(Some),
    })?;
    match done {
        Some(encoded) => emit(&out, |w| write_encoded(w, &encoded, input.one_sequence)),
        None => Ok(()),
    }
}

/// Bytes of output per streamed batch unless `--stream-batch` says otherwise: enough for a
/// batch's fixed costs (a submission, a readback, a write) to vanish against its bytes,
/// small enough that three in flight hold little memory.
const STREAM_BATCH_BYTES: u64 = 32 << 20;

/// Batches a streamed encode keeps in flight: one being computed, one being read back,
/// one being written, so that none of the three waits for the others.
const IN_FLIGHT: usize = 3;

/// Tokens per streamed batch on `ctx`: `--stream-batch`, else [`STREAM_BATCH_BYTES`] of
/// output, fewer if one storage binding holds less (so that each batch is one chunk and
/// its submission never waits) or, under a memory budget, an eighth of the budget.
fn stream_batch(ctx: &gpu::Context, input: &EncodeInput, flag: Option<u64>) -> usize {
    if let Some(tokens) = flag {
        return usize::try_from(tokens).unwrap_or(usize::MAX);
    }
    let dim = input.table.dim().1.max(1) as u64;
    let row = dim * input.options.out_dtype.size() as u64;
    // Odd dims with 16-bit output, and PE rows computed per batch, use f32 rows of a chunk.
    let wide_row = dim * 4;
    let binding = ctx.max_binding_size();
    // A token record is at most 16 bytes.
    let mut tokens = (STREAM_BATCH_BYTES / row).min(binding / wide_row).min(binding / 16);
    if let Some(budget) = ctx.memory_budget() {
        tokens = tokens.min(budget / 8 / (wide_row + 16));
    }
    usize::try_from(tokens.max(1)).unwrap_or(usize::MAX)
}

/// The encode of `input` on the GPU in batches of `batch` tokens, [`IN_FLIGHT`] at once,
/// each written to `out` as it comes back. A file appears only when complete; on failure
/// its temporary file is removed. A stream (standard output, a FIFO) gets the header
/// only with the first batch, so that a fault before then leaves `--device auto` free to
/// start again on the CPU; a failure after it is marked as delivered.
fn stream(
    ctx: &gpu::Context,
    input: &EncodeInput,
    batch: usize,
    out: &Target,
) -> Result<(), Failure> {
    let table = ctx.upload_table(input.table.embeddings())?;
    let learned = match &input.pe {
        PeInput::Learned(p) => Some(ctx.upload_position_table(p.embeddings())?),
        PeInput::Spec(_) => None,
    };
    let ids = input.ids.as_standard_layout();
    let positions = input.positions.as_standard_layout();
    let (ids, positions) =
        (ids.as_slice().expect("C order"), positions.as_slice().expect("C order"));
    let submit = |range: std::ops::Range<usize>| {
        let n = range.len();
        let ids = ArrayView2::from_shape((1, n), &ids[range.clone()]).expect("one row");
        let positions = ArrayView2::from_shape((1, n), &positions[range]).expect("one row");
        let options = &input.options;
        match (&input.pe, &learned) {
            (_, Some(p)) => ctx.encode_submit(p, &table, ids, positions, options),
            (PeInput::Spec(spec), None) => ctx.encode_submit(spec, &table, ids, positions, options),
            (PeInput::Learned(_), None) => unreachable!("uploaded above"),
        }
    };
    let total = ids.len();
    let mut output = out.open()?;
    let stream = output.is_stream();
    let mut progress = Progress::on_terminal(total);
    let mut in_flight: VecDeque<(usize, PendingEncode)> = VecDeque::with_capacity(IN_FLIGHT);
    let (mut submitted, mut written) = (0, 0);
    while written < total {
        // Keep IN_FLIGHT batches submitted. A memory budget with no room for another while
        // some are in flight is a reason to wait for the oldest, not a failure.
        while in_flight.len() < IN_FLIGHT && submitted < total {
            let end = (submitted + batch).min(total);
            match submit(submitted..end) {
                Ok(pending) => in_flight.push_back((end - submitted, pending)),
                Err(Error::Limit { .. }) if !in_flight.is_empty() => break,
                Err(e) => return Err(delivered(e.into(), stream, written)),
            }
            submitted = end;
        }
        let Some((tokens, pending)) = in_flight.pop_front() else {
            unreachable!("a batch is in flight until every token is written")
        };
        let encoded = pending.wait().map_err(|e| delivered(e.into(), stream, written))?;
        let writer = output.writer();
        let wrote = (|| {
            if written == 0 {
                write_header(writer, &encoded, input.shape(), input.one_sequence)?;
            }
            write_data(writer, &encoded)
        })();
        match wrote {
            Err(e) if stream && e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(Failure::from(output.io_error(e)).after_delivery()),
            Ok(()) => {}
        }
        written += tokens;
        progress.show(written);
    }
    progress.clear();
    match output.commit() {
        Err(Error::Io { source, .. }) if stream && source.kind() == io::ErrorKind::BrokenPipe => {
            Ok(())
        }
        other => Ok(other?),
    }
}

/// `failure`, marked as delivered if a stream has had bytes already.
fn delivered(failure: Failure, stream: bool, written: usize) -> Failure {
    if stream && written > 0 { failure.after_delivery() } else { failure }
}

/// A progress line on stderr, redrawn in place at most ten times a second, when stderr is a
/// terminal; nothing otherwise.
struct Progress {
    total: usize,
    last: Option<Instant>,
    shown: bool,
}

impl Progress {
    fn on_terminal(total: usize) -> Self {
        let last = io::stderr().is_terminal().then(|| Instant::now() - Duration::from_secs(1));
        Self { total, last, shown: false }
    }

    fn show(&mut self, done: usize) {
        let Some(last) = self.last else { return };
        if last.elapsed() < Duration::from_millis(100) && done < self.total {
            return;
        }
        self.last = Some(Instant::now());
        self.shown = true;
        let percent = 100 * done as u64 / self.total.max(1) as u64;
        crate::failure::to_stderr(format_args!(
            "\rposenc: encoding: {done} of {} tokens ({percent}%)",
            self.total
        ));
    }

    /// Erases the line, so that what follows on stderr starts clean.
    fn clear(&mut self) {
        if std::mem::take(&mut self.shown) {
            crate::failure::to_stderr(format_args!("\r\x1b[2K"));
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The `.npy` header of the whole output, in `encoded`'s type.
fn write_header(
    w: &mut dyn Write,
    encoded: &Encoded,
    (batch, len, dim): (usize, usize, usize),
    one_sequence: bool,
) -> io::Result<()> {
    let shape = if one_sequence { vec![len, dim] } else { vec![batch, len, dim] };
    w.write_all(&match encoded {
        Encoded::F32(_) => npy::header::<f32>(&shape)?,
        Encoded::F16(_) => npy::header::<half::f16>(&shape)?,
        Encoded::Bf16(_) => npy::header::<half::bf16>(&shape)?,
    })
}

/// `encoded`'s values as `.npy` data.
fn write_data(w: &mut dyn Write, encoded: &Encoded) -> io::Result<()> {
    fn values<T: npy::Element>(w: &mut dyn Write, a: &Array3<T>) -> io::Result<()> {
        npy::write_data(w, a.as_slice().expect("a new array is in C order"))
    }
    match encoded {
        Encoded::F32(a) => values(w, a),
        Encoded::F16(a) => values(w, a),
        Encoded::Bf16(a) => values(w, a),
    }
}

/// The encode of `input` where `compute` says.
fn encode(compute: &Compute, input: &EncodeInput) -> Result<Encoded, Failure> {
    let (table, ids, positions) =
        (input.table.embeddings(), input.ids.view(), input.positions.view());
    let options = &input.options;
    Ok(match (compute, &input.pe) {
        (Compute::Cpu, PeInput::Spec(spec)) => cpu::encode(spec, table, ids, positions, options)?,
        (Compute::Cpu, PeInput::Learned(p)) => {
            cpu::encode_learned(p.embeddings(), table, ids, positions, options)?
        }
        (Compute::Gpu(ctx), PeInput::Spec(spec)) => {
            let table = ctx.upload_table(table)?;
            ctx.encode(spec, &table, ids, positions, options)?
        }
        (Compute::Gpu(ctx), PeInput::Learned(p)) => {
            let p = ctx.upload_position_table(p.embeddings())?;
            let table = ctx.upload_table(table)?;
            ctx.encode(&p, &table, ids, positions, options)?
        }
    })
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
    /// The work for `--device auto`'s cost model: `bytes` of output.
    fn host_job(&self, bytes: u64) -> HostJob {
        let sinusoid = matches!(self.pe, PeInput::Spec(_));
        HostJob::encode(&self.positions, self.table.dim().1 as u64, bytes, sinusoid)
    }

    /// `(batch, len, dim)` of the output.
    fn shape(&self) -> (usize, usize, usize) {
        let (batch, len) = self.ids.dim();
        (batch, len, self.table.dim().1)
    }

    fn load(args: &EncodeArgs) -> Result<Self, Error> {
        let config = args.pe.config()?;
        if let Some((c, path)) = &config {
            posenc::commands::check_encode_config(c, Some(path), args.position_table.is_some())?;
            posenc::commands::check_encode_pad_id(c, args.pad_id)?;
        }
        // A config must state the scale unless --scale does: transformers' default differs
        // between families.
        let scale = match (&config, args.scale) {
            (_, Some(scale)) => scale,
            (Some((c, path)), None) => c.required_scale().map_err(|e| e.in_config_file(path))?,
            (None, None) => Scale::default(),
        };
        let table = inputs::read_table(Source::File(&args.weights), args.tensor.as_deref())?;
        // Refused whatever the ids are: with none that needs a row (an empty batch, all pad
        // ids) the library would find it only once running.
        if table.dim().0 == 0 {
            return Err(Error::InvalidParameter {
                field: "embedding table rows",
                value: format!("0 (the table in {})", args.weights.display()),
                allowed: "at least 1 row",
            });
        }
        let width = table.dim().1;
        // Named as the config's other errors are: its file and key, then what was expected.
        if let Some((c, path)) = config.as_ref().filter(|(c, _)| c.dim() as usize != width) {
            let e = Error::PeConfig {
                path: None,
                field: "d_model".into(),
                value: c.dim().to_string(),
                allowed: format!("{width}, the width of the table in {}", args.weights.display()),
            };
            return Err(e.in_config_file(path));
        }
        let config_path = config.as_ref().map(|(_, path)| path.to_path_buf());
        let config = config.as_ref().map(|(c, _)| c);
        let config_spec = config.and_then(ModelConfig::spec);
        let offset = match config.map(ModelConfig::positions) {
            Some(ModelPositions::Learned { offset }) => offset,
            _ => 0,
        };
        let pad_id = args.pad_id.or(config.and_then(ModelConfig::pad_id));
        crate::args::refuse_without(
            args.position_tensor.is_some(),
            "position_tensor",
            "--position-tensor",
            args.position_table.is_some(),
            "--position-table",
        )?;
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
            None => Some(args.pe.spec(dim, config_spec.as_ref()).map_err(|e| match e {
                Error::InvalidParameter { field: "dim", allowed, .. } => Error::InvalidParameter {
                    field: "dim",
                    value: format!(
                        "{width} (the width of the table in {}, variant {})",
                        args.weights.display(),
                        args.pe.variant(config_spec.as_ref())
                    ),
                    allowed,
                },
                other => other,
            })?),
        };
        let options = EncodeOptions { scale, pad_id, out_dtype: args.out_dtype.into() };
        options.scale.factor(width)?;

        // The output's shape is checked as the ids are read, before anything is built from it.
        let ids = inputs::read_ids(Source::File(&args.ids), table.dim(), pad_id)?;
        let fairseq_padding = spec.as_ref().and_then(PeSpec::padding_idx);
        let how = match (&args.positions, &args.offsets) {
            (Some(path), _) => EncodePositions::File(Source::File(path)),
            (None, Some(path)) => EncodePositions::Offsets(Source::File(path)),
            (None, None) => match (fairseq_padding, pad_id) {
                (Some(padding_idx), _) => EncodePositions::Fairseq { padding_idx },
                (None, Some(pad_id)) => EncodePositions::LeftPadded { pad_id },
                (None, None) => EncodePositions::Contiguous,
            },
        };
        // fairseq positions count from the padding index: one the config gave is named as
        // the config's key, in its file.
        let config_padding = config_spec.as_ref().and_then(PeSpec::padding_idx);
        let mut positions = inputs::encode_positions(&ids, how).map_err(|e| match e {
            Error::InvalidParameter { field: "padding_idx", value, allowed }
                if config_padding.is_some() && config_padding == fairseq_padding =>
            {
                Error::PeConfig {
                    path: config_path,
                    field: "pad_token_id".into(),
                    value,
                    allowed: allowed.replace("padding_idx", "pad_token_id"),
                }
            }
            other => other,
        })?;
        let model_type = config.map_or("", |c| c.model_type());
        let rows = learned.as_ref().map(|p| p.dim().0);
        posenc::commands::learned_rows(&mut positions, offset, model_type, rows)?;
        let pe = match (spec, learned) {
            (Some(spec), _) => PeInput::Spec(spec),
            (None, Some(p)) => PeInput::Learned(p),
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
