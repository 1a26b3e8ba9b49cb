//! Arguments several commands share: the sinusoid's convention (table, encode), the output
//! dtype (encode, bench), the GPU memory budget (table, encode), and a plain spec from
//! `--dim` and `--base` (accuracy, plot).

use std::path::{Path, PathBuf};
use std::str::FromStr;

use clap::{Args, ValueEnum};
use posenc::commands::{ConfigSource, InvFreq, PeOptions};
use posenc::encode as enc;
use posenc::model_config::ModelConfig;
use posenc::{Error, Frequencies, PeSpec, Variant};

use crate::failure::Failure;

/// The sinusoid's convention, shared by `table` and `encode`: variant, frequencies (the
/// formula's, or a model's own from `--inv-freq`) and position numbering.
#[derive(Debug, Args)]
pub(crate) struct PeArgs {
    /// A Hugging Face model's config.json (marian, pegasus, m2m_100/NLLB, nllb-moe, fsmt,
    /// speech_to_text, whisper; encode also bart and mbart with --position-table): variant,
    /// width, padding index and scale come from it; the flags override them, save that a
    /// --variant other than the config's is refused.
    #[arg(long, value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,
    /// The published convention to reproduce (docs/variants.md): column layout, frequency
    /// formula and position numbering [default: the config's, else vaswani].
    #[arg(long, value_enum)]
    pub(crate) variant: Option<VariantArg>,
    /// exact: the formula at full precision (within 6e-8 at every position). f32: the
    /// frequencies and angle rounded to float32 as the frameworks compute them, then the
    /// exact sin/cos of that angle, to match checkpoints trained that way.
    #[arg(long, value_enum, default_value_t = FrequenciesArg::Exact)]
    frequencies: FrequenciesArg,
    /// A model's own frequencies in place of the variant's formula (radians per position,
    /// one per frequency: ceil(D/2) for vaswani, distilbert and marian, floor(D/2) for the
    /// others): a 1-D .npy of float32 or float64, or a .safetensors tensor of F32 or F64
    /// (--inv-freq-tensor, or the file's only 1-D tensor). Each value is taken exactly, in
    /// [2^-126, 2^64]; the variant still sets the columns and the position numbering.
    #[arg(long, value_name = "PATH",
          conflicts_with_all = ["base", "min_timescale", "max_timescale"])]
    inv_freq: Option<PathBuf>,
    /// With --inv-freq: the tensor of the .safetensors file to read [default: its only
    /// 1-D tensor].
    #[arg(long, value_name = "NAME", requires = "inv_freq")]
    inv_freq_tensor: Option<String>,
    /// Frequency base, in (1, 1e7] [default: 10000]; tensor2tensor: max_timescale.
    #[arg(long, value_name = "B", allow_hyphen_values = true,
          value_parser = crate::args::float64)]
    base: Option<f64>,
    /// tensor2tensor's min_timescale [default: 1.0].
    #[arg(long, value_name = "T", allow_hyphen_values = true,
          value_parser = crate::args::float64)]
    min_timescale: Option<f64>,
    /// tensor2tensor's max_timescale [default: 10000.0] (the same as --base).
    #[arg(long, value_name = "T", conflicts_with = "base", allow_hyphen_values = true,
          value_parser = crate::args::float64)]
    max_timescale: Option<f64>,
    /// Added to every position (tensor2tensor's start_index) [default: 0].
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = whole::<u32>("a whole number in 0..=4294967295"))]
    start_index: Option<u32>,
    /// fairseq's padding_idx: the position whose row is zeros, and in encode the number
    /// that positions count from (pad tokens get it, others padding_idx + 1, ...); `none`:
    /// no zero row, positions from 0 [default: a fairseq-family config's pad_token_id, else
    /// 1].
    #[arg(long, value_name = "N|none", value_parser = parse_padding_idx,
          allow_hyphen_values = true)]
    padding_idx: Option<PaddingIdx>,
}

impl PeArgs {
    /// The options as [`posenc::commands`] resolves them.
    fn options(&self) -> PeOptions<'_> {
        PeOptions {
            variant: self.variant.map(Variant::from),
            frequencies: match self.frequencies {
                FrequenciesArg::Exact => Frequencies::Exact,
                FrequenciesArg::F32 => Frequencies::F32,
            },
            inv_freq: self
                .inv_freq
                .as_deref()
                .map(|p| InvFreq::File(p, self.inv_freq_tensor.as_deref())),
            base: self.base,
            min_timescale: self.min_timescale,
            max_timescale: self.max_timescale,
            start_index: self.start_index,
            padding_idx: self.padding_idx.map(|PaddingIdx(p)| p),
        }
    }

    /// The `--config` file, read and checked against `--variant` ([`PeOptions::config`]),
    /// and its path; `None` without the flag.
    pub(crate) fn config(&self) -> Result<Option<(ModelConfig, &Path)>, Error> {
        let Some(path) = &self.config else { return Ok(None) };
        Ok(Some((self.options().config(ConfigSource::File(path))?, path)))
    }

    /// The variant: `--variant`, else the config's sinusoid's, else vaswani.
    pub(crate) fn variant(&self, config: Option<&PeSpec>) -> Variant {
        self.options().variant(config)
    }

    /// The spec these arguments describe at dimension `dim`, over `config`'s sinusoid
    /// ([`PeOptions::spec`]).
    pub(crate) fn spec(&self, dim: u32, config: Option<&PeSpec>) -> Result<PeSpec, Error> {
        refuse_without(
            self.inv_freq_tensor.is_some(),
            "inv_freq_tensor",
            "--inv-freq-tensor",
            self.inv_freq.is_some(),
            "--inv-freq",
        )?;
        self.options().spec(dim, config)
    }
}

/// Refuses `flag` given without `needs`. clap declares it (`requires`), but skips that
/// check when a flag that conflicts with `needs` is given (`--base` beside
/// `--attention-factor` passed, and the factor was silently unused), so the commands check
/// again ([`posenc::commands::refuse_without`]).
pub(crate) use posenc::commands::refuse_without;

/// Refuses a GPU-only `flag`, given, beside `--device {device}`, which opens no GPU: the
/// flag would go unused without a word. clap has no rule for a flag that conflicts with one
/// value of another, so the commands check, before any work. `field` and the flags are
/// named as the other usage errors name them.
pub(crate) fn refuse_off_gpu(
    given: bool,
    flag: &str,
    device: impl clap::ValueEnum,
) -> Result<(), Error> {
    let Some(name) = device.to_possible_value() else { return Ok(()) };
    if given && !["gpu", "auto"].contains(&name.get_name()) {
        return Err(Error::InvalidParameter {
            field: "device",
            value: format!("{} (with {flag})", name.get_name()),
            allowed: "gpu or auto with a flag for the GPU; the others open none",
        });
    }
    Ok(())
}

/// The value parser of every integer option: a value that is not a whole number of the
/// option's type (negative, not a number, too large) is refused naming `allowed`, the
/// option's own range, in the words its range check uses, as a float option's negative
/// value reaches its range check. clap's own parsers name the type's range instead
/// ("-5 is not in 0..=4294967295" for a dim of 2..=65536) or none ("invalid digit found in
/// string"). A value of the type goes on to the option's range check.
pub(crate) fn whole<T: Whole>(allowed: &'static str) -> impl WholeParser<T> {
    whole_at_least(None, allowed)
}

/// A float option's value as Rust reads it, except a number past float64's range, which
/// Rust reads as an infinity, or below its smallest, which it reads as zero: refused
/// naming it as written, where a later check would name `inf` or `0` (`--base 1e309`,
/// `--base 1e-400`). A value spelt as an infinity or a NaN passes, for the option's own
/// check to refuse.
pub(crate) fn float64(text: &str) -> Result<f64, String> {
    let value: f64 = text.parse().map_err(|_| "expected a number".to_string())?;
    let unsigned = text.trim_start_matches(['+', '-']);
    let spelt_infinite = unsigned.to_ascii_lowercase().starts_with("inf");
    if value.is_infinite() && !spelt_infinite {
        return Err(format!("{text} is beyond float64's range (|x| <= {:e})", f64::MAX));
    }
    // Digits before the exponent, one of them not 0: a number that is not zero.
    let mantissa = unsigned.split(['e', 'E']).next().unwrap_or("");
    if value == 0.0 && mantissa.bytes().any(|b| matches!(b, b'1'..=b'9')) {
        let least = f64::from_bits(1);
        return Err(format!("{text} is below float64's smallest (|x| >= {least:e}), not zero"));
    }
    Ok(value)
}

/// The integer types of the options.
pub(crate) trait Whole: FromStr + PartialOrd + Clone + Send + Sync + 'static {}
impl<T: FromStr + PartialOrd + Clone + Send + Sync + 'static> Whole for T {}

/// What [`whole`] returns: a clap value parser.
pub(crate) trait WholeParser<T>:
    Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
{
}
impl<T, F: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static> WholeParser<T> for F {}

/// [`whole`], refusing as well a value below `min` (for an option no later check covers).
pub(crate) fn whole_at_least<T: Whole>(
    min: Option<T>,
    allowed: &'static str,
) -> impl WholeParser<T> {
    move |text: &str| match text.parse::<T>() {
        Ok(v) if min.as_ref().is_none_or(|min| v >= *min) => Ok(v),
        _ => Err(format!("expected {allowed}")),
    }
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
pub(crate) enum VariantArg {
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutDtype {
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

/// `--gpu-memory-budget`: a whole number of bytes, at least 1. Zero is refused, as
/// POSENC_GPU_MEMORY_BUDGET refuses it: no buffer fits in no memory, and "no budget" is
/// leaving the option out.
pub(crate) fn parse_budget(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(bytes) if bytes >= 1 => Ok(bytes),
        _ => Err("expected a whole number of bytes, at least 1".into()),
    }
}

/// The vaswani spec of `--dim` and `--base`, for the commands that take no other convention.
pub(crate) fn spec_of(dim: u32, base: f64) -> Result<PeSpec, Failure> {
    PeSpec::new(dim).and_then(|s| s.with_base(base)).map_err(Failure::usage)
}
