//! What `posenc bench` measures: the models' shapes ([`Preset`], [`PRESETS`]) and the
//! configuration a run takes ([`Config`]), checked before anything is allocated.

use crate::encode::Dtype;
use crate::error::{Error, Result};
use crate::spec::PeSpec;

use super::{DEFAULT_REPEATS, MAX_OUTPUT_BYTES, MAX_REPEATS, MAX_TABLE_BYTES, MAX_TOKENS};

/// Which paths to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Devices {
    /// The CPU path only.
    Cpu,
    /// The GPU path only.
    Gpu,
    /// Both, with the GPU/CPU ratio.
    Both,
}

/// A model's shape for the bench: its embedding width, vocabulary and storage type from its
/// `config.json` and checkpoint, with a batch and sequence length typical of its use.
///
/// Only shapes are taken: whatever position scheme the model itself uses (learned rows for
/// BERT, GPT-2 and Whisper's decoder, RoPE for Llama and Mistral), the bench adds posenc's
/// sinusoid. The work measured, a gather of embedding rows plus the add of a cached
/// position row, is the same as adding a learned position table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    /// The name `--model` takes.
    pub name: &'static str,
    /// Sequences per batch.
    pub batch: usize,
    /// Tokens per sequence.
    pub len: usize,
    /// Embedding width.
    pub dim: usize,
    /// Vocabulary rows.
    pub vocab: usize,
    /// The checkpoint's storage type: the table's. The output is f32 unless changed.
    pub dtype: Dtype,
    /// Where the sizes come from.
    pub source: &'static str,
}

/// The presets, checked against each model's Hugging Face `config.json`:
///
/// - `bert-base`: `bert-base-uncased`, `hidden_size` 768, `vocab_size` 30522 (no
///   `torch_dtype`: the checkpoint is float32); 32 sequences of 128 tokens, a usual
///   fine-tuning batch.
/// - `gpt2`: `gpt2`, `n_embd` 768, `vocab_size` 50257, `n_positions` 1024 (float32
///   checkpoint); 8 sequences of the full 1024-token context.
/// - `llama3-8b`: `meta-llama/Meta-Llama-3-8B`, `hidden_size` 4096, `vocab_size` 128256,
///   `torch_dtype` `bfloat16`; the prefill of one 2048-token prompt.
/// - `llama3-8b-decode`: the same model, one decode step (one token) of 8 sequences.
/// - `mistral-7b-decode`: `mistralai/Mistral-7B-v0.3`, `hidden_size` 4096, `vocab_size`
///   32768 (v0.1 and v0.2 had 32000), `torch_dtype` `bfloat16`; one decode step of one
///   sequence.
/// - `whisper-small`: `openai/whisper-small`'s decoder, `d_model` 768, `vocab_size` 51865,
///   `max_target_positions` 448, `torch_dtype` `float32`; 8 transcripts of the full 448
///   tokens.
///
/// Decode steps encode their one token at position 0; the warm figures do not depend on the
/// position (PE rows come from the cache).
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "bert-base",
        batch: 32,
        len: 128,
        dim: 768,
        vocab: 30522,
        dtype: Dtype::F32,
        source: "bert-base-uncased config.json: hidden_size 768, vocab_size 30522; float32 \
            checkpoint",
    },
    Preset {
        name: "gpt2",
        batch: 8,
        len: 1024,
        dim: 768,
        vocab: 50257,
        dtype: Dtype::F32,
        source: "gpt2 config.json: n_embd 768, vocab_size 50257, n_positions 1024; float32 \
            checkpoint",
    },
    Preset {
        name: "llama3-8b",
        batch: 1,
        len: 2048,
        dim: 4096,
        vocab: 128_256,
        dtype: Dtype::Bf16,
        source: "meta-llama/Meta-Llama-3-8B config.json: hidden_size 4096, vocab_size 128256, \
                 torch_dtype bfloat16",
    },
    Preset {
        name: "llama3-8b-decode",
        batch: 8,
        len: 1,
        dim: 4096,
        vocab: 128_256,
        dtype: Dtype::Bf16,
        source: "meta-llama/Meta-Llama-3-8B config.json: hidden_size 4096, vocab_size 128256, \
                 torch_dtype bfloat16",
    },
    Preset {
        name: "mistral-7b-decode",
        batch: 1,
        len: 1,
        dim: 4096,
        vocab: 32768,
        dtype: Dtype::Bf16,
        source: "mistralai/Mistral-7B-v0.3 config.json: hidden_size 4096, vocab_size 32768, \
                 torch_dtype bfloat16",
    },
    Preset {
        name: "whisper-small",
        batch: 8,
        len: 448,
        dim: 768,
        vocab: 51865,
        dtype: Dtype::F32,
        source: "openai/whisper-small config.json: d_model 768, vocab_size 51865, \
                 max_target_positions 448, torch_dtype float32",
    },
];

/// The names of [`PRESETS`], for the error that lists them (a unit test keeps the two in
/// step).
const PRESET_NAMES: &str = "bert-base, gpt2, llama3-8b, llama3-8b-decode, mistral-7b-decode, \
                            whisper-small; and the operations' llama3-8b-rope, \
                            llama3-8b-rope-decode, phi-2-rope, qwen2.5-vl-7b-rope, \
                            bloom-7b1-alibi, bloom-7b1-alibi-decode, gemma-7b-step, \
                            llama3-8b-step, llama2-13b-step, starcoder2-15b-step, \
                            llama3-70b-step";

/// What an encode's preset may be where an operation's is not taken.
const ENCODE_PRESET_NAMES: &str = "an encode preset here (bert-base, gpt2, llama3-8b, \
                                   llama3-8b-decode, mistral-7b-decode, whisper-small): an \
                                   operation's preset runs alone, as `posenc bench --model NAME`";

impl Preset {
    /// The preset by name.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `model` and listing the presets' names.
    pub fn find(name: &str) -> Result<&'static Preset> {
        // An operation's preset where only an encode's is taken (`--decode`): named as one,
        // not listed among the allowed as if it were not.
        let allowed = if super::ops::OpPreset::find(name).is_some() {
            ENCODE_PRESET_NAMES
        } else {
            PRESET_NAMES
        };
        PRESETS.iter().find(|p| p.name == name).ok_or_else(|| Error::InvalidParameter {
            field: "model",
            value: format!("{name:?}"),
            allowed,
        })
    }

    /// The preset as a bench configuration: its shape, its storage type as the table's,
    /// f32 output (what the model-shapes issue measured, and the type of the sum posenc
    /// computes; `out_dtype` may be changed to the storage type), both devices,
    /// [`DEFAULT_REPEATS`] rounds, and the checkpoint load timed.
    pub fn config(&self) -> Config {
        Config {
            model: Some(self.name),
            batch: self.batch,
            len: self.len,
            dim: self.dim,
            vocab: self.vocab,
            dtype: self.dtype,
            out_dtype: Dtype::F32,
            load: true,
            ..Config::default()
        }
    }
}

/// What to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The preset the shape came from, if any; reports carry it.
    pub model: Option<&'static str>,
    /// Sequences per batch.
    pub batch: usize,
    /// Tokens per sequence (positions 0..len).
    pub len: usize,
    /// Model dimension.
    pub dim: usize,
    /// Vocabulary rows.
    pub vocab: usize,
    /// Embedding storage type.
    pub dtype: Dtype,
    /// Encode output type.
    pub out_dtype: Dtype,
    /// Which encode paths.
    pub devices: Devices,
    /// Timed rounds; each round times every item once, its ceiling included.
    pub repeats: usize,
    /// Whether to time loading the table from a `.safetensors` checkpoint (`cpu_load`,
    /// against `cpu_read_ceiling`), whatever `devices` says.
    pub load: bool,
    /// Steps per steps-mode measurement ([`steps::steps_for`](super::steps::steps_for) when
    /// `None`).
    pub steps: Option<usize>,
}

impl Default for Config {
    /// The README's size: B = 8, L = 1024, D = 1024, V = 32000, f32 in and out, both
    /// devices, [`DEFAULT_REPEATS`] rounds, no checkpoint load.
    fn default() -> Self {
        Self {
            model: None,
            batch: 8,
            len: 1024,
            dim: 1024,
            vocab: 32000,
            dtype: Dtype::F32,
            out_dtype: Dtype::F32,
            devices: Devices::Both,
            repeats: DEFAULT_REPEATS,
            load: false,
            steps: None,
        }
    }
}

impl Config {
    /// The configuration of the preset named `name` (see [`Preset::config`]); change its
    /// fields to override them.
    ///
    /// ```
    /// use posenc::bench::Config;
    /// use posenc::encode::Dtype;
    ///
    /// let config = Config { batch: 2, ..Config::preset("llama3-8b")? };
    /// assert_eq!((config.batch, config.len, config.dim, config.vocab), (2, 2048, 4096, 128256));
    /// assert_eq!((config.dtype, config.out_dtype), (Dtype::Bf16, Dtype::F32));
    /// assert!(Config::preset("llama9").is_err());
    /// # Ok::<(), posenc::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `model` and listing the presets for an unknown name.
    pub fn preset(name: &str) -> Result<Config> {
        Preset::find(name).map(Preset::config)
    }

    /// Checks everything [`run`](super::run) would refuse, before anything is allocated, and
    /// returns the spec to encode with.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a dim the spec refuses (odd, 0, above 65536), a zero
    /// batch, len, vocab, repeats or steps, repeats or steps above [`MAX_REPEATS`], or a
    /// vocabulary past u32 token ids; [`Error::Limit`] for more tokens than [`MAX_TOKENS`], a
    /// table larger than [`MAX_TABLE_BYTES`] or an output larger than [`MAX_OUTPUT_BYTES`].
    pub fn check(&self) -> Result<PeSpec> {
        // A dim past u32 is named as given, not as the u32 it would be cut to.
        let spec =
            PeSpec::new(u32::try_from(self.dim).unwrap_or(u32::MAX)).map_err(|e| match e {
                Error::InvalidParameter { field: "dim", allowed, .. } => {
                    Error::InvalidParameter { field: "dim", value: self.dim.to_string(), allowed }
                }
                other => other,
            })?;
        for (field, value) in [
            ("batch", self.batch),
            ("len", self.len),
            ("vocab", self.vocab),
            ("repeats", self.repeats),
        ] {
            if value == 0 {
                return Err(Error::InvalidParameter {
                    field,
                    value: "0".into(),
                    allowed: "at least 1",
                });
            }
        }
        if self.repeats > MAX_REPEATS {
            return Err(Error::InvalidParameter {
                field: "repeats",
                value: self.repeats.to_string(),
                allowed: "1..=10000 (bench::MAX_REPEATS)",
            });
        }
        super::steps::check_steps(self.steps)?;
        if self.vocab > u32::MAX as usize {
            return Err(Error::InvalidParameter {
                field: "vocab",
                value: self.vocab.to_string(),
                allowed: "at most 4294967295 (token ids are u32)",
            });
        }
        // A product past u64 is named by its larger factor, not saturated (it was named as
        // 18446744073709551615, round twelve); the others saturate, far above their caps.
        let Some(tokens) = (self.batch as u64).checked_mul(self.len as u64) else {
            let (what, n) = match self.batch >= self.len {
                true => ("tokens (batch, the larger factor)", self.batch),
                false => ("tokens (len, the larger factor)", self.len),
            };
            return Err(Error::Limit {
                op: "bench",
                what,
                requested: n as u64,
                limit_name: "bench::MAX_TOKENS",
                limit: MAX_TOKENS,
            });
        };
        let table = (self.vocab as u64)
            .saturating_mul(self.dim as u64)
            .saturating_mul(self.dtype.size() as u64);
        let output =
            tokens.saturating_mul(self.dim as u64).saturating_mul(self.out_dtype.size() as u64);
        for (what, requested, limit_name, limit) in [
            ("tokens (batch x len)", tokens, "bench::MAX_TOKENS", MAX_TOKENS),
            (
                "the embedding table, in bytes (vocab x dim x dtype size)",
                table,
                "bench::MAX_TABLE_BYTES",
                MAX_TABLE_BYTES,
            ),
            (
                "the encode output, in bytes (batch x len x dim x out-dtype size)",
                output,
                "bench::MAX_OUTPUT_BYTES",
                MAX_OUTPUT_BYTES,
            ),
        ] {
            if requested > limit {
                return Err(Error::Limit { op: "bench", what, requested, limit_name, limit });
            }
        }
        Ok(spec)
    }

    /// The most bytes of host memory a run holds at once, by what [`run`](super::run) allocates:
    /// the table, ids and positions, and the CPU output throughout; then one of the CPU rounds (the
    /// memcpy ceiling's source and destination, the PE table), the checkpoint load (one more table)
    /// or the GPU rounds (the streamed output, a readback and a host encode with its bytes). Device
    /// buffers are the device's. Saturating: a size past `u64` is refused as one.
    pub fn host_bytes(&self) -> u64 {
        let tokens = (self.batch as u64).saturating_mul(self.len as u64);
        let table = (self.vocab as u64)
            .saturating_mul(self.dim as u64)
            .saturating_mul(self.dtype.size() as u64);
        let output =
            tokens.saturating_mul(self.dim as u64).saturating_mul(self.out_dtype.size() as u64);
        let pe_table = (self.len as u64).saturating_mul(self.dim as u64).saturating_mul(4);
        let cpu_rounds = match self.devices {
            Devices::Gpu => 0,
            _ => output.saturating_mul(2).saturating_add(pe_table),
        };
        let load = if self.load { table } else { 0 };
        let gpu_rounds = match self.devices {
            Devices::Cpu => 0,
            _ => output.saturating_mul(4),
        };
        table
            .saturating_add(tokens.saturating_mul(8))
            .saturating_add(output)
            .saturating_add(cpu_rounds.max(load).max(gpu_rounds))
    }

    /// `BxLxD`, then the vocabulary and the types (`f32`, or `f32->bf16` when the output
    /// type differs).
    pub(super) fn shape(&self) -> String {
        format!("{}x{}x{} V{} {}", self.batch, self.len, self.dim, self.vocab, self.types())
    }

    fn types(&self) -> String {
        if self.dtype == self.out_dtype {
            dtype_name(self.dtype).to_string()
        } else {
            format!("{}->{}", dtype_name(self.dtype), dtype_name(self.out_dtype))
        }
    }
}

pub(super) fn dtype_name(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F32 => "f32",
        Dtype::F16 => "f16",
        Dtype::Bf16 => "bf16",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::ops;

    #[test]
    fn the_listed_names_are_the_presets() {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        let ops: Vec<&str> = ops::OpPreset::all().iter().map(ops::OpPreset::name).collect();
        let listed = format!("{}; and the operations' {}", names.join(", "), ops.join(", "));
        assert_eq!(PRESET_NAMES, listed);
    }

    #[test]
    fn every_preset_passes_the_checks() {
        for p in PRESETS {
            let config = p.config();
            config.check().unwrap_or_else(|e| panic!("{}: {e}", p.name));
            assert_eq!(config.out_dtype, Dtype::F32, "{}", p.name);
            assert!(config.load, "{}", p.name);
        }
    }

    #[test]
    fn presets_are_found_by_name_and_their_fields_can_be_overridden() {
        let gpt2 = Config::preset("gpt2").unwrap();
        assert_eq!(gpt2.model, Some("gpt2"));
        assert_eq!((gpt2.batch, gpt2.len, gpt2.dim, gpt2.vocab), (8, 1024, 768, 50257));
        assert_eq!((gpt2.dtype, gpt2.out_dtype, gpt2.load), (Dtype::F32, Dtype::F32, true));
        let decode = Config::preset("mistral-7b-decode").unwrap();
        assert_eq!((decode.batch, decode.len, decode.dim, decode.vocab), (1, 1, 4096, 32768));
        assert_eq!((decode.dtype, decode.out_dtype), (Dtype::Bf16, Dtype::F32));
        let changed = Config { len: 4, out_dtype: Dtype::Bf16, ..decode };
        assert_eq!((changed.len, changed.out_dtype, changed.model), (4, Dtype::Bf16, decode.model));
        assert_eq!(Preset::find("whisper-small").unwrap().vocab, 51865);
    }

    #[test]
    fn an_unknown_preset_is_an_error_listing_the_presets() {
        match Config::preset("llama-9") {
            Err(Error::InvalidParameter { field: "model", value, allowed }) => {
                assert_eq!(value, "\"llama-9\"");
                for p in PRESETS {
                    assert!(allowed.contains(p.name), "{allowed}");
                }
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_operations_preset_where_an_encodes_is_taken_is_named_as_one() {
        match Preset::find("llama3-8b-rope") {
            Err(Error::InvalidParameter { field: "model", allowed, .. }) => {
                assert!(allowed.starts_with("an encode preset here"), "{allowed}");
                assert!(!allowed.contains("llama3-8b-rope"), "{allowed}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_dim_past_u32_is_named_as_given() {
        let config = Config { dim: (1 << 32) + 2, ..Config::preset("gpt2").unwrap() };
        match config.check() {
            Err(Error::InvalidParameter { field: "dim", value, .. }) => {
                assert_eq!(value, "4294967298");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sizes_past_the_caps_are_refused_naming_the_value_and_the_limit() {
        let limit = |config: Config| match config.check() {
            Err(Error::Limit { requested, limit_name, limit, .. }) => {
                (requested, limit_name, limit)
            }
            other => panic!("{config:?}: {other:?}"),
        };
        let base = Config::default();
        let huge_table = Config { vocab: 1 << 24, dim: 65536, ..base };
        assert_eq!(limit(huge_table), (1 << 42, "bench::MAX_TABLE_BYTES", MAX_TABLE_BYTES));
        let long = Config { len: u32::MAX as usize, ..base };
        assert_eq!(limit(long), (8 * u64::from(u32::MAX), "bench::MAX_TOKENS", MAX_TOKENS));
        let many = Config { batch: 1 << 33, len: 1 << 32, ..base };
        assert_eq!(limit(many), (1 << 33, "bench::MAX_TOKENS", MAX_TOKENS));
        let wide = Config { batch: 1 << 12, len: 1 << 12, dim: 65536, vocab: 16, ..base };
        assert_eq!(limit(wide), (1 << 42, "bench::MAX_OUTPUT_BYTES", MAX_OUTPUT_BYTES));
        // Products that overflow u64 saturate, and are refused like any other.
        let overflow = Config { batch: usize::MAX, len: usize::MAX, ..base };
        assert_eq!(limit(overflow).1, "bench::MAX_TOKENS");
        // At the caps exactly, nothing is refused.
        let at_caps = Config { batch: 1 << 14, len: 1 << 10, dim: 16, vocab: 1 << 26, ..base };
        at_caps.check().unwrap();
        match (Config { repeats: MAX_REPEATS + 1, ..base }).check() {
            Err(Error::InvalidParameter { field: "repeats", value, .. }) => {
                assert_eq!(value, "10001");
            }
            other => panic!("{other:?}"),
        }
        Config { repeats: MAX_REPEATS, ..base }.check().unwrap();
    }
}
