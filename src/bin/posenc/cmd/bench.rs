//! `posenc bench`: the encode and the table timed on the CPU and the GPU against ceilings
//! measured in the same run, at a shape of its own or of real models.

use std::io::{self, IsTerminal};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use posenc::bench::{self, Config, PRESETS, SUITE_REPEATS};
use posenc::{Error, gpu};

use crate::args::{OutDtype, whole};
use crate::failure::Failure;
use crate::output::{emit, note_foreign_extension, target, to_stdout};

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Take the shape from a real model's config: bert-base, gpt2, llama3-8b,
    /// llama3-8b-decode, mistral-7b-decode or whisper-small: its width, vocabulary and
    /// table storage type (the output is f32 unless --out-dtype says otherwise), and the
    /// checkpoint load is timed. Shape and type flags given with it override the preset's.
    /// Or an operation's: llama3-8b-rope, llama3-8b-rope-decode, phi-2-rope,
    /// qwen2.5-vl-7b-rope (RoPE of q and k; the last multimodal), bloom-7b1-alibi,
    /// bloom-7b1-alibi-decode (the ALiBi bias), gemma-7b-step, llama3-8b-step,
    /// llama2-13b-step, starcoder2-15b-step, llama3-70b-step (a decode step: the encode and
    /// RoPE of q and k in one compute pass), whose shapes are fixed; --dtype sets the type of
    /// a RoPE or decode-step preset's tensors.
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
    /// Run every preset of --model in turn and print one table (with --json, {"suite":
    /// [...], "ops": [...], "device": {...}}: one bench object per encode preset, one per
    /// operation preset, and the device's large copy and dispatch costs). Shape and type
    /// flags given with it override every encode preset's; the operation presets keep
    /// their own shapes and checkpoints' types.
    #[arg(long, conflicts_with = "model")]
    suite: bool,
    /// Steps per steps-mode measurement: K steps of an operation recorded into one compute
    /// pass and submitted once, against K copies of the same bytes and K trivial dispatches
    /// recorded the same way [default: about 256 MiB of traffic, 4 to 200 steps].
    #[arg(long, value_name = "K", conflicts_with = "decode", allow_negative_numbers = true,
          value_parser = whole::<usize>("a whole number in 1..=10000"))]
    steps: Option<usize>,
    /// Sequences per batch [default: 8].
    #[arg(long, value_name = "B", allow_negative_numbers = true,
          value_parser = whole::<usize>("a whole number, at least 1"))]
    batch: Option<usize>,
    /// Tokens per sequence (positions 0..L) [default: 1024].
    #[arg(long, value_name = "L", allow_negative_numbers = true,
          value_parser = whole::<usize>("a whole number, at least 1"))]
    len: Option<usize>,
    /// Model dimension, even [default: 1024].
    #[arg(long, value_name = "D", allow_negative_numbers = true,
          value_parser = whole::<usize>("an even number in 2..=65536"))]
    dim: Option<usize>,
    /// Vocabulary rows [default: 32000].
    #[arg(long, value_name = "V", allow_negative_numbers = true,
          value_parser = whole::<usize>("a whole number in 1..=4294967295 (token ids are u32)"))]
    vocab: Option<usize>,
    /// Embedding table storage type [default: f32]. With a RoPE or decode-step preset: the
    /// type of q and k (and of the step's table and output), in the checkpoint's place.
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
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = whole::<usize>("a whole number in 1..=10000 (bench::MAX_REPEATS)"))]
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
    /// Time a decode loop instead: STEPS steps of B sequences (--batch, default 8), one new
    /// token each, ids already on the device and positions advancing, each step recorded
    /// into its own command buffer and submitted without waiting (gpu_decode_step, seconds
    /// per step), against as many trivial dispatches recorded and submitted the same way
    /// (gpu_dispatch_floor). Shape defaults to Llama 3 8B's embedding (D = 4096, V =
    /// 128256, bf16 table and output); --model, --dim, --vocab, --dtype and --out-dtype
    /// change it. GPU only. STEPS is at most 100000, and STEPS x (--repeats + 1), the timed
    /// loops and one warm-up, at most 262144 (bench::decode::MAX_DECODE_TOTAL_STEPS).
    #[arg(long, value_name = "STEPS", conflicts_with_all = ["suite", "plot", "load", "len"],
          allow_negative_numbers = true,
          value_parser = whole::<usize>("a whole number in 1..=100000 steps"))]
    decode: Option<usize>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

impl BenchArgs {
    /// `base` with every field given on the command line in its place.
    fn apply(&self, base: bench::Config) -> bench::Config {
        bench::Config {
            batch: self.batch.unwrap_or(base.batch),
            len: self.len.unwrap_or(base.len),
            dim: self.dim.unwrap_or(base.dim),
            vocab: self.vocab.unwrap_or(base.vocab),
            dtype: self.dtype.map_or(base.dtype, Into::into),
            out_dtype: self.out_dtype.map_or(base.out_dtype, Into::into),
            devices: match self.device {
                BenchDevice::Cpu => bench::Devices::Cpu,
                BenchDevice::Gpu => bench::Devices::Gpu,
                BenchDevice::Both => bench::Devices::Both,
            },
            repeats: self.repeats.unwrap_or(base.repeats),
            load: self.load.unwrap_or(base.load),
            steps: self.steps.or(base.steps),
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

pub(crate) fn run(args: &BenchArgs) -> Result<(), Failure> {
    crate::output::check_report_stdout()?;
    if let Some(steps) = args.decode {
        return run_decode(args, steps);
    }
    if let Some(preset) = args.model.as_deref().and_then(bench::ops::OpPreset::find) {
        return run_op(args, preset);
    }
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
    note_foreign_extension(args.plot.as_deref(), "png", "");
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
            crate::failure::to_stderr(format_args!("\r\x1b[Kposenc bench: {step} ..."));
            shown = true;
        }
    };
    let suite = if args.suite {
        let ops = bench::ops::OpPreset::all();
        bench::run_suite(&configs, &ops, progress)
    } else {
        bench::run(&configs[0], progress).map(|r| bench::Suite {
            suite: vec![r],
            ops: Vec::new(),
            device: None,
        })
    };
    if shown {
        crate::failure::to_stderr(format_args!("\r\x1b[K"));
    }
    let suite = suite.map_err(|e| bench_hint(e, CPU_ITEMS_HINT))?;
    if let Some(file) = plot_file {
        let image = bench::chart(&suite.suite)?;
        emit(&file, |w| image.write_png(w))?;
    }
    if args.json {
        to_stdout(|w| {
            if args.suite {
                serde_json::to_writer_pretty(&mut *w, &suite)?;
            } else {
                serde_json::to_writer_pretty(&mut *w, &suite.suite[0])?;
            }
            w.write_all(b"\n")
        })
    } else if args.suite {
        let table = suite.to_table();
        to_stdout(|w| w.write_all(table.as_bytes()))
    } else {
        to_stdout(|w| w.write_all(suite.suite[0].to_table().as_bytes()))
    }
}

/// What to install for an adapter: Mesa's packages are Linux's.
#[cfg(target_os = "linux")]
macro_rules! driver_hint {
    () => {
        "install a GPU driver or Mesa's software Vulkan driver (`apt-get install \
         mesa-vulkan-drivers`)"
    };
}
#[cfg(not(target_os = "linux"))]
macro_rules! driver_hint {
    () => {
        "install or update the GPU driver"
    };
}

/// The no-adapter hint of a bench with CPU items: bench measures what it was asked for and
/// never falls back, so it says how to measure the CPU.
const CPU_ITEMS_HINT: &str = concat!(
    "`posenc bench --device cpu` measures the CPU alone; for the GPU items, ",
    driver_hint!()
);

/// The no-adapter hint of a decode step, which has no CPU item to point to (round
/// twenty-five: the hint sent a user to `--device cpu`, which times nothing there).
const GPU_ONLY_HINT: &str =
    concat!("a decode step is a recorded GPU pass, timed on a GPU alone: ", driver_hint!());

/// `e` with `hint` in place of the library's general no-adapter hint (a hint fitted to
/// `WGPU_BACKEND` or `WGPU_ADAPTER_NAME` is kept).
fn bench_hint(e: Error, hint: &'static str) -> Error {
    match e {
        Error::NoAdapter { detail, hint: general } if general == gpu::NO_ADAPTER_HINT => {
            Error::NoAdapter { detail, hint }
        }
        e => e,
    }
}

/// `posenc bench --model OP`: an operation preset, whose shape is fixed.
fn run_op(args: &BenchArgs, preset: bench::ops::OpPreset) -> Result<(), Failure> {
    let fixed = [
        ("batch", args.batch.is_some()),
        ("len", args.len.is_some()),
        ("dim", args.dim.is_some()),
        ("vocab", args.vocab.is_some()),
        ("out-dtype", args.out_dtype.is_some()),
        ("load", args.load.is_some()),
        ("plot", args.plot.is_some()),
    ];
    if let Some((flag, _)) = fixed.iter().find(|(_, given)| *given) {
        return Err(Failure::usage(Error::InvalidParameter {
            field: "model",
            value: format!("{} with --{flag}", preset.name()),
            allowed: "an operation preset on its own shape: only --device, --repeats, --steps, \
                      --dtype (f32 for ALiBi) and --json apply",
        }));
    }
    let applied = args.apply(bench::Config::default());
    let mut config = bench::ops::OpConfig::default();
    config.devices = applied.devices;
    config.repeats = applied.repeats;
    config.steps = applied.steps;
    config.dtype = args.dtype.map(Into::into);
    bench::ops::check(preset, &config).map_err(Failure::usage)?;
    if let (bench::ops::OpPreset::Step(p), bench::Devices::Cpu) = (preset, config.devices) {
        crate::failure::note(&format!(
            "{} is a decode step, a recorded GPU pass with no CPU item: --device cpu times \
             nothing (--device gpu times it)",
            p.name
        ));
    }
    let hint = match preset {
        bench::ops::OpPreset::Step(_) => GPU_ONLY_HINT,
        _ => CPU_ITEMS_HINT,
    };
    let report = bench::run_op(preset, &config, |_| {}).map_err(|e| bench_hint(e, hint))?;
    print_report(args.json, &report, || report.to_table())
}

/// `report` as pretty JSON with `--json`, else as its table.
fn print_report(
    json: bool,
    report: &impl serde::Serialize,
    table: impl FnOnce() -> String,
) -> Result<(), Failure> {
    if json {
        to_stdout(|w| {
            serde_json::to_writer_pretty(&mut *w, report)?;
            w.write_all(b"\n")
        })
    } else {
        let table = table();
        to_stdout(|w| w.write_all(table.as_bytes()))
    }
}

/// `posenc bench --decode STEPS`.
fn run_decode(args: &BenchArgs, steps: usize) -> Result<(), Failure> {
    let mut config = bench::decode::DecodeConfig { steps, ..Default::default() };
    if let Some(name) = &args.model {
        let preset = Config::preset(name).map_err(Failure::usage)?;
        config.dim = preset.dim;
        config.vocab = preset.vocab;
        config.dtype = preset.dtype;
    }
    config.batch = args.batch.unwrap_or(config.batch);
    config.dim = args.dim.unwrap_or(config.dim);
    config.vocab = args.vocab.unwrap_or(config.vocab);
    config.dtype = args.dtype.map_or(config.dtype, Into::into);
    config.out_dtype = args.out_dtype.map_or(config.out_dtype, Into::into);
    config.repeats = args.repeats.unwrap_or(config.repeats);
    if args.device == BenchDevice::Cpu {
        return Err(Failure::usage(Error::InvalidParameter {
            field: "device",
            value: "cpu".into(),
            allowed: "gpu or both: the decode loop runs on the GPU",
        }));
    }
    config.check().map_err(Failure::usage)?;
    let ctx = posenc::gpu::Options::from_env().and_then(|o| posenc::gpu::Context::new(&o))?;
    let report = bench::decode::run_decode(&ctx, &config)?;
    print_report(args.json, &report, || report.to_table())
}
