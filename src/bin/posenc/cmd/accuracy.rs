//! `posenc accuracy`: the README's table of max abs errors against the high-precision
//! reference, for naive float32 and for posenc, at positions near 2^16 ... 2^32-1.

use clap::Args;
use ndarray::Array2;
use posenc::{DEFAULT_BASE, naive, reference};

use crate::args::{spec_of, whole};
use crate::device::{FastDevice, on_device};
use crate::failure::Failure;
use crate::output::to_stdout;
use posenc::placement::HostJob;

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

#[derive(Debug, Args)]
pub(crate) struct AccuracyArgs {
    /// Model dimension, an even number in 2..=65536.
    #[arg(long, value_name = "D", default_value_t = 512, allow_negative_numbers = true,
          value_parser = whole::<u32>("an even number in 2..=65536"))]
    dim: u32,
    /// Frequency base, in (1, 1e7].
    #[arg(long, value_name = "B", default_value_t = DEFAULT_BASE, allow_hyphen_values = true,
          value_parser = crate::args::float64)]
    base: f64,
    /// Where posenc's column is computed (cpu and gpu give the same bits).
    #[arg(long, value_enum, default_value_t = FastDevice::Auto)]
    device: FastDevice,
}

pub(crate) fn run(args: &AccuracyArgs) -> Result<(), Failure> {
    crate::output::check_report_stdout()?;
    let spec = spec_of(args.dim, args.base)?;
    let run = ACCURACY_RUN as usize;
    let positions: Vec<u32> = ACCURACY_STARTS
        .iter()
        .flat_map(|&(_, p)| {
            let start = p.min(u32::MAX - (ACCURACY_RUN - 1));
            start..=start + (ACCURACY_RUN - 1)
        })
        .collect();

    let job = HostJob::Table { values: positions.len() as u64 * spec.dim() as u64 };
    let (fast, engine) =
        on_device(args.device, None, job, |c| Ok((c.table(&spec, &positions)?, c.describe())))?;
    let exact = reference::table(&spec, &positions);
    let naive = naive::table(&spec, &positions);

    let max_err = |a: &Array2<f32>, group: usize| {
        let rows = group * run..(group + 1) * run;
        a.slice(ndarray::s![rows.clone(), ..])
            .iter()
            .zip(exact.slice(ndarray::s![rows, ..]))
            .map(|(&v, &e)| (f64::from(v) - e).abs())
            // A NaN (which would be a bug) shows as NaN, not as the largest finite error.
            .fold(0.0, |m: f64, d| if d.is_nan() || m.is_nan() { f64::NAN } else { m.max(d) })
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
