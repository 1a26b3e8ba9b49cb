//! The `posenc` command line: positional-encoding tables, the adapters wgpu can see, and
//! the accuracy report of the README.
//!
//! Every failure is one line on stderr, `posenc: <what went wrong>`, and an exit status:
//! 2 when the arguments or input are invalid (checked before any file is opened or any GPU
//! touched, so nothing is written), 1 when a valid request failed while running.

use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ndarray::{Array2, Axis};
use posenc::output::AtomicFile;
use posenc::{DEFAULT_BASE, Error, PeSpec, cpu, gpu, npy, positions, reference};

/// Exit status for a valid request that failed while running.
const EXIT_RUNTIME: u8 = 1;
/// Exit status for invalid arguments or input.
const EXIT_USAGE: u8 = 2;

/// `--len` when neither `--len` nor `--positions` is given.
const DEFAULT_LEN: u64 = 8;
/// The most values (positions x dim) one table may have: 8 GiB of float32, before any
/// text formatting, is already more than a command-line tool should hold.
const MAX_TABLE_VALUES: u64 = 1 << 31;

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
}

#[derive(Debug, Args)]
struct TableArgs {
    /// Model dimension: the values per row, an even number in 2..=65536.
    #[arg(long, value_name = "D", default_value_t = 512, allow_negative_numbers = true)]
    dim: u32,
    /// Positions 0..N [default: 8 when --positions is not given].
    #[arg(long, value_name = "N", conflicts_with = "positions", allow_negative_numbers = true)]
    len: Option<u64>,
    /// Comma-separated positions and half-open ranges, e.g. `0..4,1000000,4294967295`.
    #[arg(long, value_name = "SPEC")]
    positions: Option<String>,
    /// Frequency base, in (1, 1e7].
    #[arg(long, value_name = "B", default_value_t = DEFAULT_BASE, allow_negative_numbers = true)]
    base: f64,
    /// Where to compute. `auto` uses the GPU when one opens, else the CPU with a note on
    /// stderr; `gpu` fails without one. cpu and gpu give the same bits.
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    device: Device,
    /// csv: no header, shortest round-trip decimals. npy: '<f4', C order, shape
    /// (positions, D); on stdout only when stdout is not a terminal. json: {"dim",
    /// "positions", "values"}.
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    format: Format,
    /// Write to PATH instead of stdout. The file appears complete or not at all; on any
    /// error an existing PATH is left untouched.
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct AccuracyArgs {
    /// Model dimension, an even number in 2..=65536.
    #[arg(long, value_name = "D", default_value_t = 512, allow_negative_numbers = true)]
    dim: u32,
    /// Frequency base, in (1, 1e7].
    #[arg(long, value_name = "B", default_value_t = DEFAULT_BASE, allow_negative_numbers = true)]
    base: f64,
    /// Where posenc's column is computed (cpu and gpu give the same bits).
    #[arg(long, value_enum, default_value_t = AccuracyDevice::Auto)]
    device: AccuracyDevice,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum AccuracyDevice {
    /// The fast multi-threaded CPU path.
    Cpu,
    /// The GPU, through wgpu.
    Gpu,
    /// The GPU if one opens, else the CPU.
    Auto,
}

impl From<AccuracyDevice> for Device {
    fn from(d: AccuracyDevice) -> Self {
        match d {
            AccuracyDevice::Cpu => Device::Cpu,
            AccuracyDevice::Gpu => Device::Gpu,
            AccuracyDevice::Auto => Device::Auto,
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
            Error::InvalidParameter { .. } | Error::PositionSpec { .. } => EXIT_USAGE,
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
    let result = match cli.command {
        Command::Table(args) => table(&args),
        Command::Devices { json } => devices(json),
        Command::Accuracy(args) => accuracy(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure { code, error }) => {
            eprintln!("posenc: {}", one_line(&error.to_string()));
            ExitCode::from(code)
        }
    }
}

/// Help and version go out whole; a parse error becomes its first line only, because the
/// usage clap appends would bury the one line that says what is wrong.
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
    let first =
        rendered.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("invalid arguments");
    eprintln!("posenc: {}", first.strip_prefix("error: ").unwrap_or(first));
    ExitCode::from(EXIT_USAGE)
}

/// Joins a message's lines: wgpu's errors can span several, and the contract is one.
fn one_line(message: &str) -> String {
    message.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

fn note(message: &str) {
    eprintln!("posenc: note: {}", one_line(message));
}

/// Where a table is computed, once chosen.
enum Engine {
    Cpu,
    Reference,
    Gpu(Box<gpu::Context>),
}

impl Engine {
    fn open(device: Device) -> Result<Self, Failure> {
        Ok(match device {
            Device::Cpu => Self::Cpu,
            Device::Reference => Self::Reference,
            Device::Gpu => Self::Gpu(Box::new(gpu::Context::new()?)),
            Device::Auto => match gpu::Context::new() {
                Ok(ctx) => Self::Gpu(Box::new(ctx)),
                Err(e @ (Error::NoAdapter { .. } | Error::RequestDevice { .. })) => {
                    note(&format!("computing on the CPU: {e}"));
                    Self::Cpu
                }
                Err(e) => return Err(e.into()),
            },
        })
    }

    fn table(&self, spec: &PeSpec, positions: &[u32]) -> Result<Array2<f32>, Failure> {
        Ok(match self {
            Self::Cpu => cpu::table(spec, positions),
            Self::Reference => reference::table_f32(spec, positions),
            Self::Gpu(ctx) => ctx.table(spec, positions)?,
        })
    }

    fn describe(&self) -> String {
        match self {
            Self::Cpu => "cpu".into(),
            Self::Reference => "reference".into(),
            Self::Gpu(ctx) => {
                let s = ctx.summary();
                format!("gpu: {}, {}", s.name, s.backend)
            }
        }
    }
}

fn spec_of(dim: u32, base: f64) -> Result<PeSpec, Failure> {
    PeSpec::new(dim).and_then(|s| s.with_base(base)).map_err(Failure::usage)
}

/// Refuses tables over [`MAX_TABLE_VALUES`] before anything of their size is allocated.
fn check_size(n_positions: u64, dim: u32) -> Result<(), Failure> {
    let values = n_positions.saturating_mul(u64::from(dim));
    if values > MAX_TABLE_VALUES {
        return Err(Failure::usage(Error::Limit {
            op: "table",
            what: "the output (positions x dim values)",
            requested: values,
            limit_name: "MAX_TABLE_VALUES",
            limit: MAX_TABLE_VALUES,
        }));
    }
    Ok(())
}

fn table(args: &TableArgs) -> Result<(), Failure> {
    let spec = spec_of(args.dim, args.base)?;
    let positions = match &args.positions {
        Some(text) => positions::parse_spec(text).map_err(Failure::usage)?,
        None => {
            let len = args.len.unwrap_or(DEFAULT_LEN);
            check_size(len, spec.dim())?;
            positions::contiguous(len).map_err(Failure::usage)?
        }
    };
    check_size(positions.len() as u64, spec.dim())?;
    if args.format == Format::Npy && args.output.is_none() && io::stdout().is_terminal() {
        return Err(Failure::usage(Error::InvalidParameter {
            field: "format",
            value: "npy".into(),
            allowed: "npy only with -o PATH or a redirected stdout; csv or json on a terminal",
        }));
    }

    // The request is valid: from here on failures are the run's (exit 1), save a malformed
    // environment variable met when the GPU opens.
    let file = args.output.as_ref().map(AtomicFile::create).transpose()?;
    let table = Engine::open(args.device)?.table(&spec, &positions)?;
    let write = |w: &mut dyn Write| write_table(w, args.format, spec.dim(), &positions, &table);
    match file {
        Some(mut file) => {
            write(file.writer()).map_err(|e| file.io_error(e))?;
            file.commit()?;
            Ok(())
        }
        None => to_stdout(write),
    }
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
        Format::Npy => npy::write_f32(w, table.view()),
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

    let engine = Engine::open(args.device.into())?;
    let fast = engine.table(&spec, &positions)?;
    let exact = reference::table(&spec, &positions);
    let naive = naive_table(&spec, &positions);

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
            engine.describe()
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

/// The usual float32 implementation: frequency, product and sin/cos all in f32. Above 2^24
/// the position itself rounds, and the product's rounding alone is worth radians.
fn naive_table(spec: &PeSpec, positions: &[u32]) -> Array2<f32> {
    let d = spec.dim() as f32;
    let base = spec.base() as f32;
    let w: Vec<f32> = (0..spec.n_freqs()).map(|i| base.powf(-((2 * i) as f32) / d)).collect();
    Array2::from_shape_fn((positions.len(), spec.dim() as usize), |(r, c)| {
        let phase = positions[r] as f32 * w[c / 2];
        if c.is_multiple_of(2) { phase.sin() } else { phase.cos() }
    })
}
