//! `posenc plot`: pictures (PNG) of a table, of the similarity between positions, and of
//! the error against the exact values.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use posenc::alloc::check_allocation;
use posenc::output::Target;
use posenc::{DEFAULT_BASE, Error, PeSpec, Variant, plot};

use crate::args::{VariantArg, spec_of, whole};
use crate::failure::{EXIT_STATUS_HELP, Failure};
use crate::output::{
    cpu_table, emit, note_foreign_extension, output_help, refuse_binary_on_terminal, target,
};

#[derive(Debug, Subcommand)]
pub(crate) enum PlotCommand {
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
pub(crate) struct HeatmapArgs {
    /// Model dimension: the columns of the picture, in 1..=4096 as the variant allows.
    #[arg(long, value_name = "D", default_value_t = 512, allow_negative_numbers = true,
          value_parser = whole::<u32>("a whole number in 1..=4096 (plot::MAX_CELLS) as the variant \
              allows"))]
    dim: u32,
    /// Positions 0..N: the rows of the picture, 1..=4096.
    #[arg(long, value_name = "N", default_value_t = 50, allow_negative_numbers = true,
          value_parser = whole::<u64>("a whole number in 1..=4096 (plot::MAX_CELLS)"))]
    len: u64,
    /// Frequency base, in (1, 1e7].
    #[arg(long, value_name = "B", default_value_t = DEFAULT_BASE, allow_hyphen_values = true,
          value_parser = crate::args::float64)]
    base: f64,
    /// Which positional encoding to picture.
    #[arg(long, value_name = "NAME", value_enum, default_value_t = VariantArg::Vaswani)]
    variant: VariantArg,
    #[arg(short, long, value_name = "PATH",
        help = "The PNG to write; without it (or with -) the PNG goes to stdout, if stdout is not \
            a terminal.",
        long_help = output_help!("The PNG to write; without it (or with -) the PNG goes to stdout, \
            if stdout is not a terminal."))]
    output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct SimilarityArgs {
    /// Model dimension, an even number in 2..=65536.
    #[arg(long, value_name = "D", default_value_t = 64, allow_negative_numbers = true,
          value_parser = whole::<u32>("an even number in 2..=65536"))]
    dim: u32,
    /// Positions 0..N, 1..=4096 (and N x N x D at most 2^32).
    #[arg(long, value_name = "N", default_value_t = 32, allow_negative_numbers = true,
          value_parser = whole::<u64>("a whole number in 1..=4096 (plot::MAX_CELLS)"))]
    len: u64,
    /// Frequency base, in (1, 1e7].
    #[arg(long, value_name = "B", default_value_t = DEFAULT_BASE, allow_hyphen_values = true,
          value_parser = crate::args::float64)]
    base: f64,
    /// png: the picture. text: the N x N matrix, one row per line, values separated by
    /// spaces, 6 decimals.
    #[arg(long, value_enum, default_value_t = PlotFormat::Png)]
    format: PlotFormat,
    #[arg(short, long, value_name = "PATH",
        help = "Write to PATH instead of stdout (a PNG goes to stdout only if it is not a \
            terminal).",
        long_help = output_help!("Write to PATH instead of stdout (a PNG goes to stdout only if it \
            is not a terminal)."))]
    output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ErrorPlotArgs {
    /// Model dimension, an even number in 2..=65536 (65536 takes a few seconds).
    #[arg(long, value_name = "D", default_value_t = 512, allow_negative_numbers = true,
          value_parser = whole::<u32>("an even number in 2..=65536"))]
    dim: u32,
    /// Frequency base, in (1, 1e7].
    #[arg(long, value_name = "B", default_value_t = DEFAULT_BASE, allow_hyphen_values = true,
          value_parser = crate::args::float64)]
    base: f64,
    #[arg(short, long, value_name = "PATH",
        help = "The PNG to write; without it (or with -) the PNG goes to stdout, if stdout is not \
            a terminal.",
        long_help = output_help!("The PNG to write; without it (or with -) the PNG goes to stdout, \
            if stdout is not a terminal."))]
    output: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PlotFormat {
    /// A PNG image.
    Png,
    /// The numbers, as text.
    Text,
}

/// The most multiply-adds `plot similarity` may spend (N x N x D): a few seconds.
const MAX_SIMILARITY_WORK: u64 = 1 << 32;

pub(crate) fn run(command: &PlotCommand) -> Result<(), Failure> {
    match command {
        PlotCommand::Heatmap(args) => heatmap(args),
        PlotCommand::Similarity(args) => similarity(args),
        PlotCommand::Error(args) => error(args),
    }
}

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
        "a PNG needs a file (-o PATH) or a redirected stdout, not a terminal",
    )
}

fn heatmap(args: &HeatmapArgs) -> Result<(), Failure> {
    const OP: &str = "plot heatmap";
    let variant = Variant::from(args.variant);
    // The picture's limit first: past it, the variant's own range (up to 65536) is not
    // the one that matters.
    plot_cells(OP, "dim", "dim (columns of the picture)", args.dim.into())?;
    let spec = PeSpec::for_variant(variant, args.dim)
        .and_then(|s| s.with_base(args.base))
        .map_err(Failure::usage)?;
    let rows = plot_cells(OP, "len", "len (rows of the picture)", args.len)?;
    let out = target(args.output.as_deref())?;
    note_foreign_extension(args.output.as_deref(), "png", "");
    refuse_png_on_terminal(&out)?;

    let positions = posenc::positions::contiguous(rows as u64)?;
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

fn similarity(args: &SimilarityArgs) -> Result<(), Failure> {
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
    match args.format {
        PlotFormat::Png => {
            note_foreign_extension(args.output.as_deref(), "png", " (--format text for numbers)");
            refuse_png_on_terminal(&out)?;
        }
        PlotFormat::Text => {
            note_foreign_extension(args.output.as_deref(), "text", " (--format png for a picture)")
        }
    }

    let positions = posenc::positions::contiguous(n as u64)?;
    let table = cpu_table(&spec, &positions)?;
    check_allocation("the similarity matrix", (n * n * 4) as u64)?;
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

fn error(args: &ErrorPlotArgs) -> Result<(), Failure> {
    let spec = spec_of(args.dim, args.base)?;
    let out = target(args.output.as_deref())?;
    note_foreign_extension(args.output.as_deref(), "png", "");
    refuse_png_on_terminal(&out)?;

    let image = plot::error_plot(&plot::error_curve(&spec));
    emit(&out, |w| image.write_png(w))
}
