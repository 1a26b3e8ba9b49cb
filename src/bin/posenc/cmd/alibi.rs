//! `posenc alibi`: ALiBi slopes, or the attention bias tensor as `.npy`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use posenc::alibi::{self, AlibiSpec};
use posenc::alloc::check_allocation;
use posenc::npy;

use crate::args::whole;
use crate::device::{Compute, FastDevice, on_device};
use crate::failure::Failure;
use crate::output::{emit, npy_target, output_help, to_stdout};
use posenc::placement::HostJob;

/// `posenc alibi --help` after the options, before the exit statuses.
pub(crate) const HELP: &str = "Slopes of H heads: for H a power of two, m_k = 2^(-8k/H) for k = \
    1..H; otherwise the c = 2^floor(log2 H) slopes of c heads, then 2^(-8(2j-1)/(2c)) for j = \
    1..H-c. Each is the float32 nearest to its exact value.

Bias of head h, query i (at position offset + i) and key j (at position j): symmetric, -m_h \
    |offset + i - j|; causal, -m_h (offset + i - j) for j <= offset + i and 0 above the diagonal \
    (no mask: apply your own there). Each value is the correctly rounded float32 of m_h times the \
    exact distance, bit for bit the same on the CPU and the GPU. Zeros are +0.0.

Everything is checked before any GPU work and before OUT is opened.";

#[derive(Debug, Args)]
pub(crate) struct AlibiArgs {
    /// Attention heads, 1..=65536.
    #[arg(long, value_name = "H", allow_negative_numbers = true,
          value_parser = whole::<u32>("a whole number in 1..=65536"))]
    heads: u32,
    /// Print the heads' slopes, one per line (the shortest decimals that read back to the
    /// same float32), instead of computing a bias tensor.
    /// (`--device cpu` and `auto` are taken: the slopes are computed on the host; `gpu` is
    /// refused, as it would go unused.)
    #[arg(long, conflicts_with_all = ["len", "kv_len", "form", "offset", "output"])]
    slopes: bool,
    /// Queries per head, at positions offset..offset+L.
    #[arg(
        long,
        value_name = "L",
        required_unless_present = "slopes",
        allow_negative_numbers = true,
        value_parser = whole::<u64>("a whole number in 0..=4294967296 (positions are u32)")
    )]
    len: Option<u64>,
    /// Keys, at positions 0..LK [default: offset + L].
    #[arg(long, value_name = "LK", allow_negative_numbers = true,
          value_parser = whole::<u64>("a whole number in 0..=4294967296 (positions are u32)"))]
    kv_len: Option<u64>,
    /// symmetric: -m |q - k|. causal: -m (q - k) for k <= q, 0 for k > q.
    #[arg(long, value_enum, default_value_t = AlibiForm::Symmetric)]
    form: AlibiForm,
    /// Position of the first query: a decoding step with N cached tokens is
    /// --len 1 --offset N.
    #[arg(long, value_name = "N", default_value_t = 0, allow_negative_numbers = true,
          value_parser = whole::<u32>("a whole number in 0..=4294967295 (offset + len <= \
              4294967296)"))]
    offset: u32,
    /// Where to compute. `auto` computes where the result reaches the host sooner (the CPU
    /// unless a large job meets a hardware GPU; POSENC_AUTO=gpu: the GPU when one opens),
    /// and on the CPU with a note when the GPU fails; `gpu` fails without one. cpu and gpu
    /// give the same bits.
    #[arg(long, value_enum, default_value_t = FastDevice::Auto)]
    device: FastDevice,
    #[arg(short, long, value_name = "OUT.npy", required_unless_present = "slopes",
        help = "The output .npy: '<f4', shape (H, L, LK), C order.",
        long_help = output_help!("The output .npy: '<f4', shape (H, L, LK), C order."))]
    output: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum AlibiForm {
    /// -m |q - k| everywhere (bidirectional attention).
    Symmetric,
    /// -m (q - k) for keys up to the query, 0 after it (decoder attention).
    Causal,
}

impl From<AlibiForm> for alibi::Form {
    fn from(f: AlibiForm) -> Self {
        match f {
            AlibiForm::Symmetric => alibi::Form::Symmetric,
            AlibiForm::Causal => alibi::Form::Causal,
        }
    }
}

pub(crate) fn run(args: &AlibiArgs) -> Result<(), Failure> {
    if args.slopes {
        // A script that passes `--device cpu` everywhere keeps working; a GPU asked for
        // would be silently unused.
        if args.device == FastDevice::Gpu {
            return Err(Failure::usage(posenc::Error::InvalidParameter {
                field: "device",
                value: "gpu".into(),
                allowed: "cpu or auto with --slopes, which are computed on the host",
            }));
        }
        crate::output::check_report_stdout()?;
        let slopes = alibi::slopes(args.heads).map_err(Failure::usage)?;
        // Display prints the shortest decimal that reads back to the same f32.
        return to_stdout(|w| slopes.iter().try_for_each(|s| writeln!(w, "{s}")));
    }
    let (Some(len), Some(output)) = (args.len, &args.output) else {
        unreachable!("clap requires --len and -o unless --slopes is given")
    };
    let out = npy_target(output)?;
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
    crate::output::note_npy_extension(output);
    let job = HostJob::Alibi { values: u64::try_from(spec.n_values()).unwrap_or(u64::MAX) };
    let bias = on_device(args.device, None, job, |c| match c {
        Compute::Cpu => Ok(alibi::bias_cpu(&spec)?),
        Compute::Gpu(ctx) => {
            check_allocation("the ALiBi bias", spec.n_values() as u64 * 4)?;
            Ok(ctx.alibi_bias(&spec)?)
        }
    })?;
    emit(&out, |w| npy::write(w, bias.view()))
}
