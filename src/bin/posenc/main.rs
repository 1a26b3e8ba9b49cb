//! The `posenc` command line: positional-encoding tables, embeddings fused with positional
//! encodings from files, the adapters wgpu can see, the accuracy report of the README, and
//! pictures (PNG) of tables, similarities and errors.
//!
//! Every failure is one line on stderr, `posenc: <what went wrong>`, and an exit status:
//! 2 when the arguments or input are invalid (checked before any output is opened or any
//! GPU touched, so nothing is written), 1 when a valid request failed while running.
//!
//! This file parses and dispatches; each command is a module of [`cmd`], and what several
//! share is beside it: [`args`], [`device`] (the one device policy), [`failure`] (exit
//! statuses) and [`output`] (where results go).

mod args;
mod cmd;
mod device;
mod failure;
#[cfg(unix)]
mod memory;
mod output;
mod runtime_dir;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use cmd::{accuracy, alibi, bench, devices, encode, plot, rope, rope_cache, table};
use failure::{EXIT_STATUS_HELP, clap_exit, note, report, with_exit_status};

#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: memory::Allocator = memory::Allocator;

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
    Table(table::TableArgs),
    /// Look up token embeddings and add positional encodings:
    /// out[b, t, :] = scale * E[ids[b, t], :] + PE(positions[b, t], :), written as .npy.
    #[command(after_help = with_exit_status(encode::HELP))]
    Encode(encode::EncodeArgs),
    /// List every GPU adapter wgpu can see (WGPU_BACKEND narrows the search).
    Devices(devices::DevicesArgs),
    /// Print a markdown table of max abs errors against the high-precision reference, for
    /// naive float32 and for posenc, at positions near 2^16 ... 2^32-1.
    #[command(after_help = EXIT_STATUS_HELP)]
    Accuracy(accuracy::AccuracyArgs),
    /// Time the encode and the table on the CPU and the GPU, and loading a checkpoint, each
    /// against a ceiling measured in the same rounds over the same bytes, and check the two
    /// encodes agree; at shapes of real models with --model or --suite.
    #[command(after_help = EXIT_STATUS_HELP)]
    Bench(bench::BenchArgs),
    /// Draw a picture (PNG) of positional encodings: the table as a heatmap, the similarity
    /// between positions, or the error against the exact values.
    #[command(subcommand)]
    Plot(plot::PlotCommand),
    /// ALiBi attention biases: the heads' slopes (--slopes), or the bias tensor
    /// [heads, len, kv_len] as .npy.
    #[command(after_help = with_exit_status(alibi::HELP))]
    Alibi(alibi::AlibiArgs),
    /// Apply rotary position embedding (RoPE) to a query or key tensor from .npy, with
    /// Hugging Face's rope_scaling schemes, and write the result as .npy.
    #[command(after_help = with_exit_status(rope::HELP))]
    Rope(rope::RopeArgs),
    /// Write the exact cos/sin cache of a RoPE configuration in Hugging Face's layout
    /// ([positions, rotary_dim]), as safetensors or .npy, to load into a framework's model.
    #[command(after_help = with_exit_status(rope_cache::HELP))]
    RopeCache(rope_cache::RopeCacheArgs),
}

fn main() -> ExitCode {
    // Before anything opens a file: `-o /dev/fd/N` may name only these, and not a standard
    // descriptor the runtime reopened on /dev/null.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    posenc::output::note_closed_standard_descriptors(&closed_at_start::descriptors());
    posenc::output::note_inherited_descriptors();
    #[cfg(unix)]
    memory::share_one_arena_under_an_address_space_limit();
    let cli = match Cli::try_parse_from(command_line()) {
        Ok(cli) => cli,
        Err(e) => return clap_exit(&e),
    };
    // A cap on the CPU loops' instruction set that names none would measure the widest
    // while its caller believes otherwise.
    if let Err(e) = posenc::cpu::check_simd_env() {
        return report(e.into());
    }
    // Before anything opens an adapter (and before any thread starts).
    runtime_dir::quiet_the_drivers();
    // Without it, Ctrl-C while an output is written would leave its temporary file.
    if let Err(e) = posenc::output::remove_temporaries_on_signals() {
        note(&format!("temporary files will not be removed on a signal: {e}"));
    }
    // Before any CPU work: rayon's own start panics where its worker threads cannot start.
    if let Some(line) = posenc::cpu::threads::start_threads().note() {
        note(&line);
    }
    let result = match &cli.command {
        Command::Table(args) => table::run(args),
        Command::Encode(args) => encode::run(args),
        Command::Devices(args) => devices::run(args),
        Command::Accuracy(args) => accuracy::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Plot(command) => plot::run(command),
        Command::Alibi(args) => alibi::run(args),
        Command::Rope(args) => rope::run(args),
        Command::RopeCache(args) => rope_cache::run(args),
    };
    result.map_or_else(report, |()| ExitCode::SUCCESS)
}

/// The command line, where a value that starts with one `-` after an option that takes
/// exactly one value is that option's (`--dim -inf`, `--positions -1..3`, `--heads -e5`):
/// clap read it as flags (`-i`, `-n`, `-f`) and refused one without naming the option
/// (round twenty-two). Such a pair is passed on joined (`--dim=-inf`, `-o-x.npy`), so that
/// the option's own parser refuses the value naming the option and what it allows (or, for
/// a path, takes it: `-o -h` writes a file named `-h`, as getopt reads it). A value that
/// starts with `--` stays a flag, so a value left out (`--dim --len 5`) is still "a value
/// is required for '--dim'"; `-` alone (standard output) and options of several values or
/// an optional one (`--load[=BOOL]`) are left to clap.
fn command_line() -> Vec<std::ffi::OsString> {
    let cli = Cli::command();
    let args: Vec<_> = std::env::args_os().collect();
    let mut out = Vec::with_capacity(args.len());
    let mut cmd = &cli;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        let text = if i == 0 { None } else { arg.to_str() };
        if text == Some("--") {
            break;
        }
        if let Some(joined) = text.and_then(|t| option_of_one_value(cmd, t))
            && let Some(value) = args.get(i + 1)
        {
            // Only the value's start is read as text: the rest passes on as given (a
            // file name need not be UTF-8).
            let lossy = value.to_string_lossy();
            if lossy.starts_with('-') && !lossy.starts_with("--") && lossy != "-" {
                let mut pair = std::ffi::OsString::from(joined);
                pair.push(value);
                out.push(pair);
                i += 2;
            } else if lossy.starts_with("--") {
                // A value left out: the next flag is read as one.
                out.push(arg.clone());
                i += 1;
            } else {
                // The option's value, which is never a subcommand's name.
                out.extend([arg.clone(), value.clone()]);
                i += 2;
            }
            continue;
        }
        if let Some(t) = text
            && !t.starts_with('-')
            && let Some(sub) = cmd.find_subcommand(t)
        {
            cmd = sub;
        }
        out.push(arg.clone());
        i += 1;
    }
    out.extend(args[i..].iter().cloned());
    out
}

/// Whether `token` names one of `cmd`'s options that take exactly one value, given after
/// it (`--name` or `-x`): the prefix its value joins, `--name=` or `-x`.
fn option_of_one_value(cmd: &clap::Command, token: &str) -> Option<String> {
    let long = token.strip_prefix("--").filter(|n| !n.is_empty() && !n.contains('='));
    let short = token.strip_prefix('-').filter(|s| !s.starts_with('-')).and_then(|s| {
        let mut chars = s.chars();
        chars.next().filter(|_| chars.next().is_none())
    });
    let found = cmd.get_arguments().any(|a| {
        let named = match (long, short) {
            (Some(name), _) => {
                a.get_long() == Some(name)
                    || a.get_all_aliases().is_some_and(|aliases| aliases.contains(&name))
            }
            (None, Some(c)) => {
                a.get_short() == Some(c)
                    || a.get_all_short_aliases().is_some_and(|aliases| aliases.contains(&c))
            }
            (None, None) => false,
        };
        let one = a.get_num_args().is_none_or(|n| n.min_values() == 1 && n.max_values() == 1);
        named && a.get_action().takes_values() && one && !a.is_require_equals_set()
    });
    match (found, long) {
        (false, _) => None,
        (true, Some(name)) => Some(format!("--{name}=")),
        (true, None) => Some(token.to_string()),
    }
}

/// Which standard descriptors were closed when the process started. Rust's runtime opens
/// `/dev/null` in their place before `main`, so only code that runs before it can tell: an
/// ELF constructor (`.init_array`), which the C runtime calls before `main` and so before
/// Rust's start-up.
#[cfg(any(target_os = "linux", target_os = "android"))]
mod closed_at_start {
    use std::sync::atomic::{AtomicU8, Ordering};

    /// One bit per standard descriptor, set if it was closed.
    static CLOSED: AtomicU8 = AtomicU8::new(0);

    /// The constructor: the C runtime passes it `argc`, `argv` and `envp`, unused here.
    extern "C" fn record(
        _argc: libc::c_int,
        _argv: *const *const libc::c_char,
        _envp: *const *const libc::c_char,
    ) {
        for fd in 0..3 {
            // SAFETY: F_GETFD reads a descriptor's flags and touches no memory; a closed
            // descriptor gives -1 (EBADF).
            if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
                CLOSED.fetch_or(1 << fd, Ordering::Relaxed);
            }
        }
    }

    #[used]
    #[unsafe(link_section = ".init_array")]
    static RECORD: extern "C" fn(
        libc::c_int,
        *const *const libc::c_char,
        *const *const libc::c_char,
    ) = record;

    /// The standard descriptors that were closed when the process started.
    pub(crate) fn descriptors() -> Vec<i32> {
        let closed = CLOSED.load(Ordering::Relaxed);
        (0..3).filter(|fd| closed & (1 << fd) != 0).collect()
    }
}
