//! `posenc table`: a positional-encoding table as CSV, `.npy` or JSON.

use std::io::{self, Write};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use ndarray::{Array2, Axis};
use posenc::inputs::{self, MAX_OUTPUT_VALUES};
use posenc::{Error, npy, positions, reference};

use crate::args::{PeArgs, parse_budget, refuse_off_gpu, whole};
use crate::device::{FastDevice, on_device};
use crate::failure::Failure;
use crate::output::{
    emit, output_format, output_help, refuse_binary_on_terminal, reserve_table, target,
};
use posenc::placement::HostJob;

/// `--dim` when neither `--dim` nor `--config` is given.
const DEFAULT_DIM: u32 = 512;

/// `--len` when neither `--len` nor `--positions` is given.
const DEFAULT_LEN: u64 = 8;

/// `--dim`'s range over every variant, as a value that is no u32 is refused.
const DIM_RANGE: &str = "a whole number in 1..=65536 as the variant allows (vaswani: an even \
                         number in 2..=65536)";

#[derive(Debug, Args)]
pub(crate) struct TableArgs {
    /// Model dimension: the values per row, in 1..=65536 (even for vaswani and whisper; at
    /// least 2 for tensor2tensor and 4 for fairseq and whisper); with --config, the config's
    /// d_model [default: 512].
    #[arg(long, value_name = "D", allow_negative_numbers = true,
          value_parser = whole::<u32>(DIM_RANGE))]
    dim: Option<u32>,
    /// Positions 0..N [default: 8 when --positions is not given].
    #[arg(long, value_name = "N", conflicts_with = "positions", allow_negative_numbers = true,
          value_parser = whole::<u64>("a whole number in 0..=4294967296 (positions are u32)"))]
    len: Option<u64>,
    /// Comma-separated positions and half-open ranges, e.g. `0..4,1000000,4294967295`.
    #[arg(long, value_name = "SPEC")]
    positions: Option<String>,
    #[command(flatten)]
    pe: PeArgs,
    /// Where to compute. `auto` computes where the result reaches the host sooner (the CPU
    /// unless a large job meets a hardware GPU; POSENC_AUTO=gpu: the GPU when one opens),
    /// and on the CPU with a note when the GPU fails; `gpu` fails without one. cpu and gpu
    /// give the same bits.
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    device: Device,
    /// csv: no header, shortest round-trip decimals. npy: '<f4', C order, shape
    /// (positions, D); on stdout only when stdout is not a terminal. json: {"dim",
    /// "positions", "values"}. [default: as -o PATH's extension names it (.csv, .npy,
    /// .json), else csv]
    #[arg(long, value_enum)]
    format: Option<Format>,
    #[arg(short, long, value_name = "PATH",
        help = "Write to PATH instead of stdout.",
        long_help = output_help!("Write to PATH instead of stdout."))]
    output: Option<PathBuf>,
    /// At most this many bytes of GPU memory in posenc's buffers at once, at least 1 (default:
    /// the POSENC_GPU_MEMORY_BUDGET environment variable, also at least 1, else no budget).
    #[arg(long, value_name = "BYTES", value_parser = parse_budget,
          allow_hyphen_values = true)]
    gpu_memory_budget: Option<u64>,
}

/// `--device` of `table`, which alone offers the reference path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Device {
    /// The fast multi-threaded CPU path.
    Cpu,
    /// The GPU, through wgpu.
    Gpu,
    /// The slow high-precision path, rounded to float32.
    Reference,
    /// The faster of the two for this result (a cost model; POSENC_AUTO=gpu: the GPU if
    /// one opens), the CPU when the GPU fails.
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Comma-separated values, one row per position.
    Csv,
    /// NumPy .npy, float32.
    Npy,
    /// One JSON object.
    Json,
}

pub(crate) fn run(args: &TableArgs) -> Result<(), Failure> {
    let budget = args.gpu_memory_budget.is_some();
    refuse_off_gpu(budget, "--gpu-memory-budget", args.device).map_err(Failure::usage)?;
    let config = args.pe.config().map_err(Failure::usage)?;
    let from_config = config
        .map(|(c, path)| posenc::commands::table_spec(&c, Some(path.to_path_buf())))
        .transpose()
        .map_err(Failure::usage)?;
    let dim = args.dim.or(from_config.as_ref().map(posenc::PeSpec::dim)).unwrap_or(DEFAULT_DIM);
    let spec = args.pe.spec(dim, from_config.as_ref()).map_err(Failure::usage)?;
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
    let known = [("csv", Format::Csv), ("npy", Format::Npy), ("json", Format::Json)];
    let format = output_format(args.format, args.output.as_deref(), &known, Format::Csv);
    if format == Format::Npy {
        let allowed =
            "npy only to a file (-o PATH) or a redirected stdout; csv or json on a terminal";
        refuse_binary_on_terminal(&out, "format", "npy", allowed)?;
    }

    // The request is valid: from here on failures are the run's (exit 1), save a malformed
    // environment variable met when the GPU opens.
    let table = match args.device.fast() {
        Some(fast) => {
            let job = HostJob::Table { values: positions.len() as u64 * spec.dim() as u64 };
            on_device(fast, args.gpu_memory_budget, job, |c| c.table(&spec, &positions))?
        }
        None => {
            reserve_table(&spec, &positions)?;
            reference::table_f32(&spec, &positions)
        }
    };
    emit(&out, |w| write_table(w, format, spec.dim(), &positions, &table))
}

/// Refuses tables over [`MAX_OUTPUT_VALUES`] values before anything of their size is
/// allocated.
fn check_size(rows: u64, dim: u32) -> Result<(), Error> {
    // A count past usize is no smaller a request: it stays too large as usize::MAX.
    let rows = usize::try_from(rows).unwrap_or(usize::MAX);
    let shape = [rows, dim as usize];
    inputs::check_shape("table", "the output", &shape, MAX_OUTPUT_VALUES, "MAX_OUTPUT_VALUES")
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
