//! `posenc bench`: CPU vs GPU encode, table generation and checkpoint loading, each against
//! a ceiling measured in the same rounds over the same bytes, plus a bit-for-bit agreement
//! check of the two encodes. Shapes come from the caller ([`Config`]) or from real models'
//! configs ([`PRESETS`]), one at a time ([`run`]) or all in one suite ([`run_suite`]);
//! [`chart`] draws the results.
//!
//! Every item names the ceiling it is measured against ([`Item::ceiling`]):
//!
//! - `cpu_encode`, `cpu_encode_cold`, `cpu_table`: `cpu_copy_ceiling`, a multi-threaded
//!   memcpy of the output's bytes;
//! - `gpu_encode`, `gpu_encode_cold`, `gpu_table`, `gpu_readback`: `gpu_copy_ceiling`, the
//!   faster of two vec4 copy shaders over the output's bytes, timed as the device-timed
//!   items are (device timestamps where the adapter has them);
//! - `gpu_encode_call`, `gpu_encode_host`, `gpu_encode_stream`: `gpu_copy_ceiling_call`,
//!   that copy as a whole call (encoder, submission, wait) by the wall clock;
//! - `cpu_load`: `cpu_read_ceiling`, `std::fs::read` of the same checkpoint from a warm page
//!   cache.
//!
//! Each round times every item once, its ceiling included, so a drift in the machine's speed
//! (other load, clock frequency) moves an item and its ceiling together.

pub mod decode;
pub mod ops;
pub mod steps;

use std::borrow::Cow;
use std::path::Path;
use std::time::Instant;

use half::{bf16, f16};
use ndarray::{Array2, Array3};
use rayon::prelude::*;
use serde::Serialize;

use crate::encode::{Dtype, Embeddings, EncodeOptions};
use crate::error::{Error, Result};
use crate::spec::PeSpec;
use crate::{cpu, gpu, plot, positions, weights};

/// Timed rounds of a single bench unless told otherwise.
pub const DEFAULT_REPEATS: usize = 10;
/// Timed rounds of each preset in a suite unless told otherwise: the whole suite (six
/// presets, two checkpoint loads of 1 GiB included) then takes two to three minutes on a
/// two-core machine with a software GPU (lavapipe), most of it in the loads.
pub const SUITE_REPEATS: usize = 5;
/// The most timed rounds a bench accepts: far more than any median needs, and a bound on
/// how long a run that was asked for too many can take.
pub const MAX_REPEATS: usize = 10_000;
/// The most tokens (`batch * len`) a bench encodes: 2^24, 64 MiB of ids and as much of
/// positions, 2048 times the tokens of a 8 x 1024 batch.
pub const MAX_TOKENS: u64 = 1 << 24;
/// The largest embedding table a bench builds, in bytes: 4 GiB, above every open
/// checkpoint's table in its own dtype (Llama 3 8B: 1 GiB in bf16). A run that loads a
/// checkpoint holds the table about four times (the table, the file in the page cache, the
/// loaded table, the bytes read), so this also bounds a run's memory.
pub const MAX_TABLE_BYTES: u64 = 1 << 32;
/// The largest encode output a bench writes, in bytes: 1 GiB (the default run writes 32
/// MiB). Tighter than the 2^31 values `posenc encode` accepts, because a run holds the
/// output about five times (the CPU result, the memcpy ceiling's source and destination,
/// the GPU buffer and its readback).
pub const MAX_OUTPUT_BYTES: u64 = 1 << 30;

/// Bytes of output per batch of `gpu_encode_stream`: a few batches even at the smaller
/// presets' sizes, so that batches overlap (`posenc encode` streams batches of 32 MiB, for
/// outputs much larger than the bench's).
pub const STREAM_BATCH_BYTES: u64 = 4 << 20;

/// Batches `gpu_encode_stream` keeps in flight, as `posenc encode` does.
pub const STREAM_IN_FLIGHT: usize = 3;

/// The name of the tensor in a bench checkpoint.
const CHECKPOINT_TENSOR: &str = "embed_tokens.weight";

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
        source: "bert-base-uncased config.json: hidden_size 768, vocab_size 30522; float32 checkpoint",
    },
    Preset {
        name: "gpt2",
        batch: 8,
        len: 1024,
        dim: 768,
        vocab: 50257,
        dtype: Dtype::F32,
        source: "gpt2 config.json: n_embd 768, vocab_size 50257, n_positions 1024; float32 checkpoint",
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
                            llama3-8b-rope-decode, phi-2-rope, bloom-7b1-alibi, \
                            bloom-7b1-alibi-decode, gemma-7b-step, llama3-8b-step, \
                            llama2-13b-step, starcoder2-15b-step, llama3-70b-step";

impl Preset {
    /// The preset by name.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `model` and listing the presets' names.
    pub fn find(name: &str) -> Result<&'static Preset> {
        PRESETS.iter().find(|p| p.name == name).ok_or_else(|| Error::InvalidParameter {
            field: "model",
            value: format!("{name:?}"),
            allowed: PRESET_NAMES,
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
    /// Steps per steps-mode measurement ([`steps::steps_for`] when `None`).
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

    /// Checks everything [`run`] would refuse, before anything is allocated, and returns the
    /// spec to encode with.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a dim the spec refuses (odd, 0, above 65536), a zero
    /// batch, len, vocab or repeats, repeats above [`MAX_REPEATS`], or a vocabulary past u32
    /// token ids; [`Error::Limit`] for more tokens than [`MAX_TOKENS`], a table larger than
    /// [`MAX_TABLE_BYTES`] or an output larger than [`MAX_OUTPUT_BYTES`].
    pub fn check(&self) -> Result<PeSpec> {
        let spec = PeSpec::new(u32::try_from(self.dim).unwrap_or(u32::MAX))?;
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
        if self.vocab > u32::MAX as usize {
            return Err(Error::InvalidParameter {
                field: "vocab",
                value: self.vocab.to_string(),
                allowed: "at most 4294967295 (token ids are u32)",
            });
        }
        // Saturating: the caps are far below u64::MAX, so a saturated product is refused.
        let tokens = (self.batch as u64).saturating_mul(self.len as u64);
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

    /// The most bytes of host memory a run holds at once, by what [`run`] allocates: the
    /// table, ids and positions, and the CPU output throughout; then one of the CPU rounds
    /// (the memcpy ceiling's source and destination, the PE table), the checkpoint load (one
    /// more table) or the GPU rounds (the streamed output, a readback and a host encode with
    /// its bytes). Device buffers are the device's. Saturating: a size past `u64` is refused
    /// as one.
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
    fn shape(&self) -> String {
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

fn dtype_name(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F32 => "f32",
        Dtype::F16 => "f16",
        Dtype::Bf16 => "bf16",
    }
}

/// The adapter a report was measured on.
#[derive(Clone, Debug, Serialize)]
pub struct AdapterInfo {
    /// Adapter name.
    pub name: String,
    /// Backend.
    pub backend: String,
    /// Device type.
    pub device_type: String,
    /// How the GPU items timed on the device (copy ceiling, encodes, table) were timed.
    pub timing: gpu::TimingSource,
    /// The vec4 encode kernel's access pattern (`coalesced` or `adjacent`; see
    /// [`gpu::AccessPattern`], chosen by the adapter's type or `POSENC_GPU_ACCESS`).
    pub access: String,
}

impl AdapterInfo {
    /// `name (backend, device type, access pattern access)`, as the tables print it.
    pub fn describe(&self) -> String {
        format!("{} ({}, {}, {} access)", self.name, self.backend, self.device_type, self.access)
    }
}

/// The sizes of a report.
#[derive(Clone, Debug, Serialize)]
pub struct Sizes {
    /// Sequences per batch.
    pub batch: usize,
    /// Tokens per sequence.
    pub len: usize,
    /// Model dimension.
    pub dim: usize,
    /// Vocabulary rows.
    pub vocab: usize,
    /// Embedding storage type.
    pub dtype: String,
    /// Encode output type.
    pub out_dtype: String,
    /// Timed runs per item.
    pub repeats: usize,
    /// Bytes one encode reads and writes: ids, gathered rows, output.
    pub encode_bytes: u64,
    /// Bytes one table generation reads and writes: positions, f32 table.
    pub table_bytes: u64,
    /// Size of the `.safetensors` checkpoint whose load was timed, if one was.
    pub checkpoint_bytes: Option<u64>,
}

/// One measured item, and the ceiling measured in the same rounds that its `ratio` is
/// against ([`Item::ceiling`] names it):
///
/// | item | ceiling |
/// | --- | --- |
/// | `cpu_encode`, `cpu_encode_cold`, `cpu_table` | `cpu_copy_ceiling` (memcpy) |
/// | `gpu_encode`, `gpu_encode_cold`, `gpu_table`, `gpu_readback` | `gpu_copy_ceiling` |
/// | `gpu_encode_call`, `gpu_encode_host`, `gpu_encode_stream` | `gpu_copy_ceiling_call` (wall clock) |
/// | `cpu_load` | `cpu_read_ceiling` (`std::fs::read`) |
///
/// A ceiling is its own ceiling (ratio 1).
#[derive(Clone, Debug, Serialize)]
pub struct Item {
    /// `cpu_encode`, `cpu_encode_cold`, `cpu_table`, `gpu_encode`, `gpu_encode_cold`,
    /// `gpu_encode_call`, `gpu_encode_host`, `gpu_encode_stream`, `gpu_table`,
    /// `gpu_readback`, `cpu_load`, or a ceiling: `cpu_copy_ceiling`, `gpu_copy_ceiling`,
    /// `gpu_copy_ceiling_call`, `cpu_read_ceiling`.
    ///
    /// `gpu_encode` is the device time of an encode (see [`gpu::TimingSource`]);
    /// `gpu_encode_call` the wall time of a whole `encode_into_buffer` call followed by
    /// waiting for the device, as a caller sees it; `gpu_encode_host` the wall time of one
    /// blocking `Context::encode` (result in host memory); `gpu_encode_stream` the wall
    /// time of the same tokens encoded into host memory as `posenc encode` streams them, in
    /// batches of [`STREAM_BATCH_BYTES`] of output through `Context::encode_submit`,
    /// [`STREAM_IN_FLIGHT`] in flight, each copied into one host array as it arrives;
    /// `gpu_readback` the wall time of reading the output back. `gpu_table` is left out when the table of `len` rows does not fit
    /// one storage binding. `cpu_load` is `weights::load` of a one-tensor `.safetensors`
    /// file holding the table, from a warm page cache.
    pub name: String,
    /// The ceiling this item is measured against, by name (see the [module](self) docs);
    /// a ceiling names itself.
    pub ceiling: String,
    /// Median seconds per run.
    pub median_s: f64,
    /// Fastest run.
    pub min_s: f64,
    /// Slowest run.
    pub max_s: f64,
    /// Bytes read plus written per run over the median time, in GB/s (1e9 bytes).
    pub gbps: f64,
    /// The ceiling's GB/s.
    pub ceiling_gbps: f64,
    /// `gbps / ceiling_gbps`: for an item and its ceiling over the same bytes, the ceiling's
    /// time over the item's.
    pub ratio: f64,
    /// Steps recorded into one command buffer (steps mode): the times are per step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<usize>,
    /// The median over the same run's `gpu_dispatch_floor` (steps mode): how many trivial
    /// dispatches a step costs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_floor: Option<f64>,
}

/// The median of `times` as every table of the bench reports it: the middle run, or for an
/// even count the mean of the two middle runs; NaN for no runs.
pub(crate) fn median(times: &[f64]) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n.is_multiple_of(2) => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        _ => sorted[n / 2],
    }
}

impl Item {
    /// Statistics of `times` over `bytes` per run, as its own ceiling.
    fn new(name: &str, mut times: Vec<f64>, bytes: u64) -> Self {
        times.sort_by(f64::total_cmp);
        let at = |i: usize| times.get(i).copied().unwrap_or(f64::NAN);
        let median_s = median(&times);
        let gbps = bytes as f64 / median_s / 1e9;
        Item {
            name: name.to_string(),
            ceiling: name.to_string(),
            median_s,
            min_s: at(0),
            max_s: at(times.len().wrapping_sub(1)),
            gbps,
            ceiling_gbps: gbps,
            ratio: 1.0,
            steps: None,
            per_floor: None,
        }
    }

    /// The item, timed as `steps` steps recorded into one command buffer.
    fn with_steps(self, steps: usize) -> Self {
        Item { steps: Some(steps), ..self }
    }

    /// The item with its median over `floor`'s.
    fn over_floor(self, floor: &Item) -> Self {
        Item { per_floor: Some(self.median_s / floor.median_s), ..self }
    }

    /// The item measured against `ceiling`.
    fn against(self, ceiling: &Item) -> Self {
        Item {
            ceiling: ceiling.name.clone(),
            ceiling_gbps: ceiling.gbps,
            ratio: self.gbps / ceiling.gbps,
            ..self
        }
    }
}

/// A whole bench run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The preset measured, if the shape came from one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The GPU adapter, if one was used.
    pub adapter: Option<AdapterInfo>,
    /// The sizes.
    pub sizes: Sizes,
    /// Whether the CPU and GPU encodes (host-array and recorded) agree bit for bit in the
    /// output type (`None` without a GPU).
    pub agree: Option<bool>,
    /// The copy method of `gpu_copy_ceiling`, `gpu_copy_ceiling_call` and
    /// `gpu_copy_steps`: the fastest in [`Report::copy_methods`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceiling_method: Option<String>,
    /// Every copy method over the ceiling's bytes, fastest first (empty without a GPU).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub copy_methods: Vec<steps::CopyFigure>,
    /// The items, in a fixed order.
    pub results: Vec<Item>,
}

/// Several runs, one per preset: what `posenc bench --suite --json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Suite {
    /// One report per encode preset, in the order run.
    pub suite: Vec<Report>,
    /// One report per operation preset (RoPE, ALiBi, decode steps), in the order run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ops: Vec<ops::OpReport>,
    /// The device's large copy and dispatch costs, when a GPU ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<steps::DeviceReport>,
}

fn timed(f: impl FnOnce() -> Result<()>) -> Result<f64> {
    timed_value(f).map(|(s, ())| s)
}

/// Times `f` and returns its value too, so that dropping a large result stays out of the
/// timing.
fn timed_value<T>(f: impl FnOnce() -> Result<T>) -> Result<(f64, T)> {
    let start = Instant::now();
    let value = f()?;
    Ok((start.elapsed().as_secs_f64(), value))
}

/// A deterministic table of `dtype` with values in [-1, 1), built in parallel (a Llama
/// table has half a billion values).
fn make_table(config: &Config) -> TableData {
    fn build<T: Copy + Send + Sync>(
        (vocab, dim): (usize, usize),
        zero: T,
        convert: impl Fn(f32) -> T + Sync,
    ) -> Array2<T> {
        let mut values = vec![zero; vocab * dim];
        values.par_chunks_mut(dim).enumerate().for_each(|(i, row)| {
            for (j, v) in row.iter_mut().enumerate() {
                let k = (i.wrapping_mul(7919) ^ j.wrapping_mul(104_729)) % 2000;
                *v = convert(k as f32 / 1000.0 - 1.0);
            }
        });
        Array2::from_shape_vec((vocab, dim), values).expect("vocab x dim values")
    }
    let shape = (config.vocab, config.dim);
    match config.dtype {
        Dtype::F32 => TableData::F32(build(shape, 0.0, |v| v)),
        Dtype::F16 => TableData::F16(build(shape, f16::ZERO, f16::from_f32)),
        Dtype::Bf16 => TableData::Bf16(build(shape, bf16::ZERO, bf16::from_f32)),
    }
}

enum TableData {
    F32(Array2<f32>),
    F16(Array2<f16>),
    Bf16(Array2<bf16>),
}

impl TableData {
    fn view(&self) -> Embeddings<'_> {
        match self {
            TableData::F32(a) => Embeddings::F32(a.view()),
            TableData::F16(a) => Embeddings::F16(a.view()),
            TableData::Bf16(a) => Embeddings::Bf16(a.view()),
        }
    }

    /// The values as `.safetensors` stores them: little-endian, row-major.
    fn le_bytes(&self) -> Cow<'_, [u8]> {
        fn bytes<T: bytemuck::Pod>(a: &Array2<T>, le: impl Fn(&T) -> Vec<u8>) -> Cow<'_, [u8]> {
            match a.as_slice() {
                Some(s) if cfg!(target_endian = "little") => Cow::Borrowed(bytemuck::cast_slice(s)),
                _ => Cow::Owned(a.iter().flat_map(le).collect()),
            }
        }
        match self {
            TableData::F32(a) => bytes(a, |v| v.to_le_bytes().to_vec()),
            TableData::F16(a) => bytes(a, |v| v.to_le_bytes().to_vec()),
            TableData::Bf16(a) => bytes(a, |v| v.to_le_bytes().to_vec()),
        }
    }

    /// Whether `loaded` holds exactly these values.
    fn same_as(&self, loaded: &weights::Table) -> bool {
        fn same<T: bytemuck::Pod + PartialEq>(a: &Array2<T>, b: &Array2<T>) -> bool {
            match (a.as_slice(), b.as_slice()) {
                (Some(x), Some(y)) => {
                    bytemuck::cast_slice::<T, u8>(x) == bytemuck::cast_slice::<T, u8>(y)
                }
                _ => a.dim() == b.dim() && a.iter().zip(b).all(|(x, y)| x == y),
            }
        }
        match (self, loaded) {
            (TableData::F32(a), weights::Table::F32(b)) => same(a, b),
            (TableData::F16(a), weights::Table::F16(b)) => same(a, b),
            (TableData::Bf16(a), weights::Table::Bf16(b)) => same(a, b),
            _ => false,
        }
    }

    /// Writes the table as the one tensor of a `.safetensors` file.
    fn write_checkpoint(&self, path: &Path) -> Result<()> {
        use safetensors::tensor::{Dtype as St, TensorView};
        let (vocab, dim, dtype) = match self {
            TableData::F32(a) => (a.nrows(), a.ncols(), St::F32),
            TableData::F16(a) => (a.nrows(), a.ncols(), St::F16),
            TableData::Bf16(a) => (a.nrows(), a.ncols(), St::BF16),
        };
        let io = |e: safetensors::SafeTensorError| Error::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        };
        let bytes = self.le_bytes();
        let view = TensorView::new(dtype, vec![vocab, dim], &bytes).map_err(io)?;
        safetensors::tensor::serialize_to_file([(CHECKPOINT_TENSOR, view)], None, path).map_err(io)
    }
}

/// Multi-threaded memcpy of `src` into `dst`: the CPU ceiling.
fn parallel_copy(dst: &mut [u8], src: &[u8]) {
    const CHUNK: usize = 1 << 20;
    dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| d.copy_from_slice(s));
}

/// The CPU encode's result, kept for the agreement check: one preallocated array of the
/// output type, written by `encode_into` each run.
enum CpuOut {
    F32(Array3<f32>),
    F16(Array3<f16>),
    Bf16(Array3<bf16>),
}

impl CpuOut {
    fn new(config: &Config) -> Self {
        let shape = (config.batch, config.len, config.dim);
        match config.out_dtype {
            Dtype::F32 => CpuOut::F32(Array3::zeros(shape)),
            Dtype::F16 => CpuOut::F16(Array3::from_elem(shape, f16::ZERO)),
            Dtype::Bf16 => CpuOut::Bf16(Array3::from_elem(shape, bf16::ZERO)),
        }
    }

    fn encode(
        &mut self,
        encoder: &cpu::Encoder,
        inputs: &Inputs,
        options: &EncodeOptions,
    ) -> Result<()> {
        let (table, ids, pos) = (inputs.table.view(), inputs.ids.view(), inputs.pos.view());
        match self {
            CpuOut::F32(out) => encoder.encode_into(table, ids, pos, options, out.view_mut()),
            CpuOut::F16(out) => encoder.encode_into(table, ids, pos, options, out.view_mut()),
            CpuOut::Bf16(out) => encoder.encode_into(table, ids, pos, options, out.view_mut()),
        }
    }

    /// Whether `gpu`, the GPU's output buffer (16-bit elements two to a word, low half
    /// first, padded to whole words), holds the same bits.
    fn agrees(&self, gpu: &[u8]) -> bool {
        let words = gpu.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let halves = || gpu.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        let fits = |n: usize, size: usize| n.checked_mul(size).is_some_and(|b| b <= gpu.len());
        match self {
            CpuOut::F32(a) => fits(a.len(), 4) && words.zip(a).all(|(g, c)| g == c.to_bits()),
            CpuOut::F16(a) => fits(a.len(), 2) && halves().zip(a).all(|(g, c)| g == c.to_bits()),
            CpuOut::Bf16(a) => fits(a.len(), 2) && halves().zip(a).all(|(g, c)| g == c.to_bits()),
        }
    }
}

/// The arrays every path encodes.
struct Inputs {
    table: TableData,
    ids: Array2<u32>,
    pos: Array2<u32>,
}

/// Opens the GPU unless only the CPU is wanted.
fn open_gpu(devices: Devices, progress: &mut impl FnMut(&str)) -> Result<Option<gpu::Context>> {
    if devices == Devices::Cpu {
        return Ok(None);
    }
    progress("opening the GPU");
    gpu::Context::new().map(Some)
}

/// Runs the bench. `progress` hears the name of each step before it starts.
///
/// # Errors
/// Before anything is allocated, what [`Config::check`] refuses; [`Error::NoAdapter`] when
/// the GPU is asked for and none opens; GPU errors; [`Error::Io`] if the checkpoint cannot
/// be written or read; [`Error::Format`] if it loads as another table than was written.
pub fn run(config: &Config, mut progress: impl FnMut(&str)) -> Result<Report> {
    let spec = config.check()?;
    let ctx = open_gpu(config.devices, &mut progress)?;
    run_on(config, &spec, ctx.as_ref(), &mut progress)
}

/// Runs each configuration in turn (usually [`PRESETS`] through [`Preset::config`]), all on
/// one GPU context. Every configuration is checked before any runs. `progress` hears each
/// step, prefixed with the model's name.
///
/// # Errors
/// As [`run`], for the first configuration that fails.
pub fn run_suite(
    configs: &[Config],
    op_presets: &[ops::OpPreset],
    mut progress: impl FnMut(&str),
) -> Result<Suite> {
    let specs = configs.iter().map(Config::check).collect::<Result<Vec<_>>>()?;
    let first = configs.first().copied().unwrap_or_default();
    if let Some(steps) = first.steps {
        check_steps(steps)?;
    }
    let wants_gpu = configs.iter().find(|c| c.devices != Devices::Cpu);
    let ctx = match wants_gpu {
        Some(c) => open_gpu(c.devices, &mut progress)?,
        None => None,
    };
    let mut suite = Vec::with_capacity(configs.len());
    for (config, spec) in configs.iter().zip(&specs) {
        let name = config.model.map_or_else(|| config.shape(), str::to_string);
        let ctx = ctx.as_ref().filter(|_| config.devices != Devices::Cpu);
        suite.push(run_on(config, spec, ctx, &mut |step: &str| {
            progress(&format!("{name}: {step}"))
        })?);
        if let Some(ctx) = ctx {
            // The next preset has another dim; its cold figure must not find these rows.
            ctx.clear_pe_cache();
        }
    }
    let op_config =
        ops::OpConfig { devices: first.devices, repeats: first.repeats, steps: first.steps };
    let mut op_reports = Vec::with_capacity(op_presets.len());
    for &preset in op_presets {
        let name = preset.name();
        op_reports.push(ops::run_op(preset, &op_config, ctx.as_ref(), &mut |step: &str| {
            progress(&format!("{name}: {step}"))
        })?);
        if let Some(ctx) = &ctx {
            ctx.clear_pe_cache();
        }
    }
    let device = match &ctx {
        Some(ctx) if first.devices != Devices::Cpu => {
            progress("the device's copies and dispatches");
            Some(steps::device_report(ctx, first.repeats)?)
        }
        _ => None,
    };
    Ok(Suite { suite, ops: op_reports, device })
}

/// Refuses a steps count outside `1..=`[`MAX_REPEATS`].
fn check_steps(steps: usize) -> Result<()> {
    if steps == 0 || steps > MAX_REPEATS {
        return Err(Error::InvalidParameter {
            field: "steps",
            value: steps.to_string(),
            allowed: "1..=10000",
        });
    }
    Ok(())
}

/// Runs the operation preset `preset` (RoPE, ALiBi or a decode step) with the devices,
/// rounds and steps of `config` (its shape is the preset's).
///
/// # Errors
/// As [`run`].
pub fn run_op(
    preset: ops::OpPreset,
    config: &Config,
    mut progress: impl FnMut(&str),
) -> Result<ops::OpReport> {
    if let Some(steps) = config.steps {
        check_steps(steps)?;
    }
    let ctx = open_gpu(config.devices, &mut progress)?;
    let op_config =
        ops::OpConfig { devices: config.devices, repeats: config.repeats, steps: config.steps };
    ops::run_op(preset, &op_config, ctx.as_ref(), &mut progress)
}

/// [`run`] of a checked configuration, on `ctx` if given.
fn run_on(
    config: &Config,
    spec: &PeSpec,
    ctx: Option<&gpu::Context>,
    progress: &mut dyn FnMut(&str),
) -> Result<Report> {
    let (batch, len, dim) = (config.batch, config.len, config.dim);
    let tokens = (batch * len) as u64;
    let values = tokens * dim as u64;
    let out_bytes = values * config.out_dtype.size() as u64;
    let encode_bytes = tokens * 4 + values * config.dtype.size() as u64 + out_bytes;
    let table_positions: Vec<u32> = (0..len as u32).collect();
    let table_bytes = len as u64 * 4 + len as u64 * dim as u64 * 4;
    let repeats = config.repeats;
    // Where the memory is not there, one error rather than an abort while building.
    crate::alloc::check_allocation("the bench's host arrays", config.host_bytes())?;

    progress("building inputs");
    let inputs = Inputs {
        table: make_table(config),
        ids: Array2::from_shape_fn((batch, len), |(b, t)| {
            ((b * 7919 + t * 104_729) % config.vocab) as u32
        }),
        pos: positions::contiguous_batch(batch, len),
    };
    let options = EncodeOptions { out_dtype: config.out_dtype, ..EncodeOptions::default() };
    let mut results = Vec::new();

    // The CPU output is computed whatever the devices, for the agreement check.
    let encoder = cpu::Encoder::new(spec.clone());
    let mut cpu_out = CpuOut::new(config);
    cpu_out.encode(&encoder, &inputs, &options)?;

    if config.devices != Devices::Gpu {
        let src = vec![1u8; out_bytes as usize];
        let mut dst = vec![0u8; out_bytes as usize];
        let mut t = [(); 4].map(|()| Vec::with_capacity(repeats));
        // Tables are written into one preallocated array, as the GPU writes one buffer.
        let mut pe_table = Array2::<f32>::zeros((len, dim));
        // Warm-up (the encode was warmed by the agreement run above).
        progress("cpu warm-up");
        parallel_copy(&mut dst, &src);
        cpu::table_into(spec, &table_positions, pe_table.view_mut())?;
        for round in 0..repeats {
            progress(&format!("cpu round {}/{repeats}", round + 1));
            t[0].push(timed(|| {
                parallel_copy(&mut dst, &src);
                Ok(())
            })?);
            t[1].push(timed(|| cpu_out.encode(&encoder, &inputs, &options))?);
            encoder.clear_cache();
            t[2].push(timed(|| cpu_out.encode(&encoder, &inputs, &options))?);
            t[3].push(timed(|| cpu::table_into(spec, &table_positions, pe_table.view_mut()))?);
        }
        let [copy, warm, cold, tables] = t;
        // Ceilings are GB/s of a copy moving (read + write) the bytes in question.
        let ceiling = Item::new("cpu_copy_ceiling", copy, 2 * out_bytes);
        results.push(Item::new("cpu_encode", warm, encode_bytes).against(&ceiling));
        results.push(Item::new("cpu_encode_cold", cold, encode_bytes).against(&ceiling));
        results.push(Item::new("cpu_table", tables, table_bytes).against(&ceiling));
        results.push(ceiling);
    }

    // Before the GPU's copy of the table exists, so the run never holds everything at once.
    let (load_items, checkpoint_bytes) = if config.load {
        let (items, bytes) = time_load(&inputs.table, repeats, progress)?;
        (items, Some(bytes))
    } else {
        (Vec::new(), None)
    };

    let mut adapter = None;
    let mut agree = None;
    let mut ceiling_method = None;
    let mut copy_methods = Vec::new();
    if let Some(ctx) = ctx {
        let info = ctx.adapter_info();
        adapter = Some(AdapterInfo {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            timing: ctx.timing_source(),
            access: format!("{:?}", ctx.access_pattern()).to_lowercase(),
        });
        progress("uploading the table");
        let uploaded = ctx.upload_table(inputs.table.view())?;
        let out = ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("posenc.bench.out"),
            size: out_bytes.next_multiple_of(4).max(4),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let (ids, pos) = (inputs.ids.view(), inputs.pos.view());
        // The whole call as a caller sees it: checks, sorting, submission, and the wait for
        // the device, which the call itself need not do before returning.
        let call = || {
            ctx.encode_into_buffer(spec, &uploaded, ids, pos, &options, &out)?;
            wait_for_device(ctx)
        };
        progress("gpu warm-up");
        call()?;
        agree = Some(cpu_out.agrees(&ctx.read_buffer(&out)?));
        let time_encode = |cold| ctx.time_encode(spec, &uploaded, ids, pos, &options, &out, cold);
        // The copy ceilings copy the output's bytes, as much as fits one binding.
        let copy_bytes = (out_bytes.min(ctx.max_binding_size()) & !15).max(16);
        let table_fits = len as u64 * dim as u64 * 4 <= ctx.max_binding_size();
        // The streamed encode's batches, and the host array they are copied into.
        let row_bytes = (dim * config.out_dtype.size()) as u64;
        let stream_batch = (STREAM_BATCH_BYTES / row_bytes).max(1) as usize;
        let mut streamed = vec![0u8; out_bytes as usize];
        let stream = |host: &mut [u8]| {
            let (ids, pos) = (inputs.ids.as_slice(), inputs.pos.as_slice());
            let (ids, pos) = (ids.expect("a new array"), pos.expect("a new array"));
            let mut at = 0;
            stream_encode(ctx, spec, &uploaded, ids, pos, &options, stream_batch, |batch| {
                let mut rest = &mut host[at..];
                let room = rest.len();
                write_encoded(&mut rest, batch);
                at += room - rest.len();
            })
        };
        let host_call = || ctx.encode(spec, &uploaded, ids, pos, &options);
        stream(&mut streamed)?;
        agree = agree.map(|a| {
            a && cpu_out.agrees(&streamed)
                && host_call().is_ok_and(|e| {
                    let mut bytes = Vec::new();
                    write_encoded(&mut bytes, &e);
                    cpu_out.agrees(&bytes)
                })
        });
        progress("warming the GPU up");
        ctx.warm_up(steps::WARM_UP)?;
        progress("searching for the fastest copy");
        let search = steps::search_copy(ctx, copy_bytes, steps::SEARCH_REPEATS)?;
        let best = steps::best_shader(&search);
        ceiling_method = Some(best.name());
        copy_methods = search.into_iter().map(|(_, f)| f).collect();
        let mut t = [(); 12].map(|()| Vec::with_capacity(repeats));
        for round in 0..repeats {
            progress(&format!("gpu round {}/{repeats}", round + 1));
            steps::warm(ctx)?;
            t[0].extend(ctx.time_copy_method(best, copy_bytes, 1)?);
            t[9].extend(ctx.time_copy_method(gpu::CopyMethod::Driver, copy_bytes, 1)?);
            t[1].extend(ctx.time_copy_call(best, copy_bytes, 1)?);
            t[2].push(time_encode(false)?);
            t[3].push(time_encode(true)?);
            t[4].push(timed(call)?);
            // The host's part of the call alone: it returns once the work is submitted.
            t[10]
                .push(timed(|| ctx.encode_into_buffer(spec, &uploaded, ids, pos, &options, &out))?);
            wait_for_device(ctx)?;
            if table_fits {
                t[5].extend(ctx.time_table(spec, &table_positions, 1)?);
            }
            t[6].push(timed_value(|| ctx.read_buffer(&out))?.0);
            t[7].push(timed_value(host_call)?.0);
            // The result left mapped, as burn hands it over: a few values read in place.
            t[11].push(
                timed_value(|| {
                    let mapped =
                        ctx.encode_submit(spec, &uploaded, ids, pos, &options)?.wait_mapped()?;
                    let bytes = mapped.bytes();
                    Ok(u32::from(bytes[0]) + u32::from(bytes[bytes.len() - 1]))
                })?
                .0,
            );
            t[8].push(timed(|| stream(&mut streamed))?);
        }
        let [
            copy,
            copy_call,
            warm,
            cold,
            calls,
            tables,
            readback,
            host,
            streams,
            driver,
            submits,
            mapped,
        ] = t;
        let ceiling = Item::new("gpu_copy_ceiling", copy, 2 * copy_bytes);
        let call_ceiling = Item::new("gpu_copy_ceiling_call", copy_call, 2 * copy_bytes);
        results.push(Item::new("gpu_encode", warm, encode_bytes).against(&ceiling));
        results.push(Item::new("gpu_encode_cold", cold, encode_bytes).against(&ceiling));
        results.push(Item::new("gpu_encode_call", calls, encode_bytes).against(&call_ceiling));
        results.push(Item::new("gpu_encode_submit", submits, encode_bytes).against(&call_ceiling));
        results.push(Item::new("gpu_encode_host", host, encode_bytes).against(&call_ceiling));
        results.push(Item::new("gpu_encode_mapped", mapped, encode_bytes).against(&call_ceiling));
        results.push(Item::new("gpu_encode_stream", streams, encode_bytes).against(&call_ceiling));
        if table_fits {
            results.push(Item::new("gpu_table", tables, table_bytes).against(&ceiling));
        }
        results.push(Item::new("gpu_readback", readback, out_bytes).against(&ceiling));
        results.push(Item::new("gpu_copy_driver", driver, 2 * copy_bytes).against(&ceiling));
        results.push(ceiling);
        results.push(call_ceiling);

        // The recorded pass, as an engine runs it: K steps in one compute pass.
        progress("steps: the recorded encode");
        let desc = gpu::EncodePassDescriptor {
            batch,
            len,
            options,
            ..gpu::EncodePassDescriptor::default()
        };
        let pass = ctx.encode_pass(spec, &uploaded, &desc)?;
        let words = |label, a: &Array2<u32>| {
            use wgpu::util::DeviceExt;
            ctx.device().create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytemuck::cast_slice(a.as_slice().expect("a new array")),
                usage: wgpu::BufferUsages::STORAGE,
            })
        };
        let (ids_buf, pos_buf) =
            (words("posenc.bench.ids", &inputs.ids), words("posenc.bench.pos", &inputs.pos));
        let k = steps::steps_for(encode_bytes, config.steps);
        let mut step_items = steps::steps_items(
            ctx,
            "gpu_encode_steps",
            encode_bytes,
            copy_bytes,
            best,
            k,
            repeats,
            |p| pass.record_in(p, ids_buf.slice(..), pos_buf.slice(..), out.slice(..)),
        )?;
        let recorded = ctx.read_buffer(&out)?;
        agree = agree.map(|a| a && cpu_out.agrees(&recorded[..out_bytes as usize]));
        results.append(&mut step_items);
    }
    results.extend(load_items);
    Ok(Report {
        model: config.model.map(str::to_string),
        adapter,
        sizes: Sizes {
            batch,
            len,
            dim,
            vocab: config.vocab,
            dtype: dtype_name(config.dtype).to_string(),
            out_dtype: dtype_name(config.out_dtype).to_string(),
            repeats,
            encode_bytes,
            table_bytes,
            checkpoint_bytes,
        },
        agree,
        ceiling_method,
        copy_methods,
        results,
    })
}

/// `ids` at `pos` encoded on the GPU as `posenc encode` streams them: batches of `batch`
/// tokens through [`gpu::Context::encode_submit`], [`STREAM_IN_FLIGHT`] in flight, each
/// result handed to `each`, in order, as it comes back.
#[allow(clippy::too_many_arguments)]
fn stream_encode(
    ctx: &gpu::Context,
    spec: &PeSpec,
    table: &gpu::GpuTable,
    ids: &[u32],
    pos: &[u32],
    options: &EncodeOptions,
    batch: usize,
    mut each: impl FnMut(&crate::encode::Encoded),
) -> Result<()> {
    let mut in_flight = std::collections::VecDeque::with_capacity(STREAM_IN_FLIGHT);
    let mut next = 0;
    loop {
        while in_flight.len() < STREAM_IN_FLIGHT && next < ids.len() {
            let end = (next + batch).min(ids.len());
            let row = |v| ndarray::ArrayView2::from_shape((1, end - next), v).expect("one row");
            let (ids, pos) = (row(&ids[next..end]), row(&pos[next..end]));
            in_flight.push_back(ctx.encode_submit(spec, table, ids, pos, options)?);
            next = end;
        }
        match in_flight.pop_front() {
            Some(pending) => each(&pending.wait()?),
            None => return Ok(()),
        }
    }
}

/// Writes an encode's values to `w` as little-endian bytes, as the GPU's buffer holds
/// them. `w` must take them all (a `Vec`, or a slice with room: the bench sizes both).
fn write_encoded(w: &mut impl std::io::Write, encoded: &crate::encode::Encoded) {
    use crate::encode::Encoded;
    let written = match encoded {
        Encoded::F32(a) => crate::npy::write_data(w, a.as_slice().expect("C order")),
        Encoded::F16(a) => crate::npy::write_data(w, a.as_slice().expect("C order")),
        Encoded::Bf16(a) => crate::npy::write_data(w, a.as_slice().expect("C order")),
    };
    written.expect("room for every value");
}

/// Waits until the device has finished everything submitted, for at most
/// [`gpu::SUBMISSION_TIMEOUT`].
fn wait_for_device(ctx: &gpu::Context) -> Result<()> {
    let wait =
        wgpu::PollType::Wait { submission_index: None, timeout: Some(gpu::SUBMISSION_TIMEOUT) };
    match ctx.device().poll(wait) {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::Gpu { op: "bench", message: format!("waiting for the encode: {e}") }),
    }
}

/// Writes `table` as a one-tensor `.safetensors` file in a fresh temporary directory, then
/// times [`weights::load`] of it (`cpu_load`) against [`std::fs::read`] of it
/// (`cpu_read_ceiling`) in the same rounds, both from a warm page cache. Both are credited
/// with the file's bytes read and written once, so the ratio is the read's time over the
/// load's. The directory is deleted on return, whatever happens. Returns the items and
/// the file's size. While it runs, a signal the CLI catches removes the directory too.
fn time_load(
    table: &TableData,
    repeats: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<Item>, u64)> {
    progress("writing the checkpoint");
    // A Ctrl-C must not leave a checkpoint of up to a few GiB behind, nor its directory (the
    // CLI installs the cleanup).
    let dir = crate::output::ScratchDir::new()?;
    let path = dir.path().join("bench.safetensors");
    let io = |source| Error::Io { path: path.clone(), source };
    table.write_checkpoint(&path)?;
    // Warm the page cache, and check once that the load gives back the table written.
    progress("checkpoint warm-up");
    let bytes = std::fs::read(&path).map_err(io)?.len() as u64;
    if !table.same_as(&weights::load(&path, None)?) {
        return Err(Error::Format {
            path: path.clone(),
            format: ".safetensors",
            reason: "weights::load gave back another table than the bench wrote".into(),
        });
    }
    let mut t = [(); 2].map(|()| Vec::with_capacity(repeats));
    for round in 0..repeats {
        progress(&format!("load round {}/{repeats}", round + 1));
        t[0].push(timed_value(|| std::fs::read(&path).map_err(io))?.0);
        t[1].push(timed_value(|| weights::load(&path, None))?.0);
    }
    let [read, load] = t;
    let ceiling = Item::new("cpu_read_ceiling", read, 2 * bytes);
    let load = Item::new("cpu_load", load, 2 * bytes).against(&ceiling);
    Ok((vec![load, ceiling], bytes))
}

impl Report {
    /// The item named `name`, if measured.
    pub fn item(&self, name: &str) -> Option<&Item> {
        self.results.iter().find(|i| i.name == name)
    }

    /// `BxLxD`, the vocabulary and the types.
    fn shape(&self) -> String {
        let s = &self.sizes;
        let types = if s.dtype == s.out_dtype {
            s.dtype.clone()
        } else {
            format!("{}->{}", s.dtype, s.out_dtype)
        };
        format!("{}x{}x{} V{} {types}", s.batch, s.len, s.dim, s.vocab)
    }

    /// A readable table: one line per item with the ceiling it is measured against, then
    /// the GPU/CPU ratios and the agreement.
    pub fn to_table(&self) -> String {
        let s = &self.sizes;
        let model = self.model.as_ref().map_or_else(String::new, |m| format!("{m}, "));
        let mut out = format!(
            "posenc bench: {model}B={} L={} D={} V={} {} -> {}, {} runs each; encode moves {}, table {}\n",
            s.batch,
            s.len,
            s.dim,
            s.vocab,
            s.dtype,
            s.out_dtype,
            s.repeats,
            size(s.encode_bytes),
            size(s.table_bytes)
        );
        if let Some(bytes) = s.checkpoint_bytes {
            out += &format!("checkpoint: one-tensor .safetensors of {}\n", size(bytes));
        }
        if let Some(a) = &self.adapter {
            out += &format!(
                "GPU: {}; GPU items timed by {} (gpu_encode_call, gpu_encode_host, \
                 gpu_encode_stream, gpu_readback, \
                 gpu_copy_ceiling_call: the wall clock)\n",
                a.describe(),
                timing_name(a.timing)
            );
        }
        out += &items_table(&self.results, self.ceiling_method.as_deref());
        for (what, g, c) in
            [("encode", "gpu_encode", "cpu_encode"), ("table", "gpu_table", "cpu_table")]
        {
            if let (Some(g), Some(c)) = (self.item(g), self.item(c)) {
                out +=
                    &format!("GPU/CPU speed, {what}: {}x\n", significant(c.median_s / g.median_s));
            }
        }
        if let Some(t) = self.item("cpu_table") {
            let values = (s.len * s.dim) as f64;
            out += &format!("CPU table: {} G values/s\n", significant(values / t.median_s / 1e9));
        }
        match self.agree {
            Some(true) => {
                out += &format!("CPU and GPU encodes agree bit for bit ({}).\n", s.out_dtype)
            }
            Some(false) => out += &format!("CPU and GPU encodes DIFFER ({}).\n", s.out_dtype),
            None => {}
        }
        out
    }

    /// The report's bars in [`chart`].
    fn bars(&self) -> plot::BenchGroup {
        let gbps = |name| self.item(name).map(|i| i.gbps);
        let s = &self.sizes;
        let shape = format!("{}x{}x{}", s.batch, s.len, s.dim);
        let types = if s.dtype == s.out_dtype {
            s.dtype.clone()
        } else {
            format!("{}->{}", s.dtype, s.out_dtype)
        };
        let (label, detail) = match &self.model {
            Some(model) => (model.clone(), format!("{shape} {types}")),
            None => (shape, format!("V{} {types}", s.vocab)),
        };
        plot::BenchGroup {
            label,
            detail,
            values: [
                gbps("cpu_encode"),
                gbps("cpu_copy_ceiling"),
                gbps("gpu_encode"),
                gbps("gpu_copy_ceiling"),
            ],
        }
    }
}

/// The items' lines, under a header: times, GB/s and % of the ceiling, and for steps-mode
/// items the steps and the multiple of the dispatch floor; then the copy method of the GPU
/// ceilings, if any.
fn items_table(items: &[Item], ceiling_method: Option<&str>) -> String {
    let mut out = format!(
        "{:<22} {:>10} {:>10} {:>10} {:>9} {:>9} {:>8}  {}\n",
        "item", "median ms", "min ms", "max ms", "GB/s", "% ceiling", "x floor", "ceiling"
    );
    for i in items {
        let ceiling = if i.ceiling == i.name { "" } else { &i.ceiling };
        let floor = i.per_floor.map_or(String::new(), |f| format!("{f:.2}"));
        let steps = i.steps.map_or(String::new(), |k| format!(" ({k} steps in one pass)"));
        let line = format!(
            "{:<22} {:>10} {:>10} {:>10} {:>9.2} {:>8.1}% {:>8}  {ceiling}{steps}",
            i.name,
            millis(i.median_s),
            millis(i.min_s),
            millis(i.max_s),
            i.gbps,
            100.0 * i.ratio,
            floor
        );
        out += line.trim_end();
        out += "\n";
    }
    if let Some(method) = ceiling_method {
        out += &format!(
            "GPU copy ceilings: {method}, the fastest WGSL copy of every form tried \
             (gpu_copy_driver: the driver's copy_buffer_to_buffer of the same bytes)\n"
        );
    }
    out
}

/// `x` with three significant digits (at least two decimals), so that small ratios such as
/// a decode step's do not print as 0.00.
fn significant(x: f64) -> String {
    with_decimals(x, 2, 12)
}

/// `x` with enough decimals for three significant digits, between `min` and `max` of them
/// (`min` for zero, negatives and non-finite values).
fn with_decimals(x: f64, min: i64, max: i64) -> String {
    let decimals =
        if x > 0.0 && x.is_finite() { (2 - x.log10().floor() as i64).clamp(min, max) } else { min };
    format!("{x:.*}", decimals as usize)
}

fn timing_name(timing: gpu::TimingSource) -> &'static str {
    match timing {
        gpu::TimingSource::DeviceTimestamps => "device timestamps",
        gpu::TimingSource::WallClock => "the wall clock",
    }
}

/// `seconds` in milliseconds with at least three significant digits (a decode step's
/// 0.00183 ms rather than 0.002), between three and six decimals.
fn millis(seconds: f64) -> String {
    with_decimals(seconds * 1e3, 3, 6)
}

/// A byte count in kB, MB or GB (decimal), one decimal.
fn size(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..1_000_000 => format!("{:.1} kB", b / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", b / 1e6),
        _ => format!("{:.1} GB", b / 1e9),
    }
}

/// The items of the suite table, each with the ceiling its % is of.
const SUITE_COLUMNS: [&str; 4] = ["cpu_encode", "gpu_encode", "gpu_encode_call", "cpu_load"];

impl Suite {
    /// One line per preset (its shape, then each of `cpu_encode`, `gpu_encode`,
    /// `gpu_encode_call` and `cpu_load` as median ms and % of its ceiling, then the
    /// agreement), under 120 columns; `-` for what was not measured.
    pub fn to_table(&self) -> String {
        let repeats = self.suite.first().map_or(0, |r| r.sizes.repeats);
        let mut out = format!(
            "posenc bench --suite, {repeats} runs each: median ms and % of the ceiling measured in the same rounds\n\
             (cpu_encode: cpu_copy_ceiling; gpu_encode: gpu_copy_ceiling; gpu_encode_call, a whole call and the\n\
             wait by the wall clock: gpu_copy_ceiling_call; cpu_load, from a warm page cache: cpu_read_ceiling)\n"
        );
        if let Some(a) = self.suite.iter().find_map(|r| r.adapter.as_ref()) {
            out +=
                &format!("GPU: {}; gpu_encode timed by {}\n", a.describe(), timing_name(a.timing));
        }
        let shape_width = self.suite.iter().map(|r| r.shape().len()).max().unwrap_or(0).max(26);
        out += &format!("{:<17} {:<shape_width$}", "model", "shape");
        for name in SUITE_COLUMNS {
            out += &format!("  {name:>15}");
        }
        out += "  agree\n";
        out += &format!("{:<w$}", "", w = 18 + shape_width);
        for _ in SUITE_COLUMNS {
            out += &format!("  {:>8} {:>6}", "ms", "%");
        }
        out += "\n";
        for r in &self.suite {
            let model = r.model.as_deref().unwrap_or("-");
            out += &format!("{model:<17} {:<shape_width$}", r.shape());
            for name in SUITE_COLUMNS {
                out += &match r.item(name) {
                    Some(i) => format!("  {:>8} {:>5.1}%", millis(i.median_s), 100.0 * i.ratio),
                    None => format!("  {:>8} {:>6}", "-", "-"),
                };
            }
            out += match r.agree {
                Some(true) => "  yes\n",
                Some(false) => "  NO\n",
                None => "  -\n",
            };
        }
        out += &self.steps_table();
        out
    }

    /// The steps-mode lines: each encode preset's recorded encode and each operation
    /// preset's step, as median µs per step, % of the same run's copies recorded the same
    /// way and the multiple of the dispatch floor; one-submission figures beside them.
    fn steps_table(&self) -> String {
        let mut out = String::new();
        // Per row: model, operation, then its steps, one-submission and CPU items.
        type Row<'a> = (String, String, Option<&'a Item>, Option<&'a Item>, Option<&'a Item>);
        let mut rows: Vec<Row<'_>> = Vec::new();
        for r in &self.suite {
            let model = r.model.clone().unwrap_or_else(|| r.shape());
            rows.push((
                model,
                "encode".into(),
                r.item("gpu_encode_steps"),
                r.item("gpu_encode"),
                r.item("cpu_encode"),
            ));
        }
        for o in &self.ops {
            let (steps, one, cpu) =
                (format!("gpu_{}_steps", o.op), format!("gpu_{}", o.op), format!("cpu_{}", o.op));
            rows.push((
                o.model.to_string(),
                o.op.to_string(),
                o.item(&steps),
                o.item(&one),
                o.item(&cpu),
            ));
        }
        if rows.iter().all(|r| r.2.is_none() && r.4.is_none()) {
            return out;
        }
        out += "\nsteps mode: K steps recorded into one compute pass, submitted once; us per step, % of as many \n\
                copies of the same bytes recorded the same way, and x the one-workgroup dispatch floor; \n\
                one submission (gpu) and the CPU beside it, % of their own ceilings\n";
        out += &format!(
            "{:<24} {:<12} {:>10} {:>7} {:>8} {:>5}  {:>10} {:>7}  {:>10} {:>7}\n",
            "model", "op", "step us", "%", "x floor", "K", "gpu us", "%", "cpu us", "%"
        );
        let us = |i: Option<&Item>| i.map_or("-".to_string(), |i| significant(i.median_s * 1e6));
        let pct =
            |i: Option<&Item>| i.map_or("-".to_string(), |i| format!("{:.1}%", 100.0 * i.ratio));
        for (model, op, step, one, cpu) in rows {
            let floor =
                step.and_then(|i| i.per_floor).map_or("-".to_string(), |f| format!("{f:.2}"));
            let k = step.and_then(|i| i.steps).map_or("-".to_string(), |k| k.to_string());
            out += &format!(
                "{model:<24} {op:<12} {:>10} {:>7} {floor:>8} {k:>5}  {:>10} {:>7}  {:>10} {:>7}\n",
                us(step),
                pct(step),
                us(one),
                pct(one),
                us(cpu),
                pct(cpu)
            );
        }
        if let Some(d) = &self.device {
            out += &d.to_table();
        }
        out
    }
}

/// A bar chart of `reports`: per report (one group, labelled with its model or shape),
/// CPU and GPU encode throughput next to their same-run copy ceilings, in GB/s; what a
/// report did not measure has no bar.
///
/// # Errors
/// As [`plot::bench_chart`]: [`Error::Shape`] for no reports, [`Error::Limit`] for more
/// than [`plot::MAX_BENCH_GROUPS`].
pub fn chart(reports: &[Report]) -> Result<plot::Image> {
    let groups: Vec<plot::BenchGroup> = reports.iter().map(Report::bars).collect();
    let mut title = "posenc bench: encode throughput and copy ceilings".to_string();
    if let Some(a) = reports.iter().find_map(|r| r.adapter.as_ref()) {
        title += &format!(", GPU {} ({})", a.name, a.backend);
    }
    plot::bench_chart(&groups, &title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(Item::new("x", vec![4.0, 1.0], 8).median_s, 2.5);
        assert_eq!(Item::new("x", vec![3.0, 1.0, 2.0], 8).median_s, 2.0);
        assert_eq!(Item::new("x", vec![4.0, 1.0, 3.0, 2.0], 8).median_s, 2.5);
        assert!(Item::new("x", vec![], 8).median_s.is_nan());
    }

    #[test]
    fn small_times_keep_three_significant_digits() {
        assert_eq!(millis(0.000_001_83), "0.00183");
        assert_eq!(millis(0.000_164), "0.164");
        assert_eq!(millis(0.012_345), "12.345");
        assert_eq!(millis(0.0), "0.000");
        assert_eq!(millis(1e-12), "0.000000");
        assert_eq!(size(163_840), "163.8 kB");
        assert_eq!(size(1_050_700_000), "1.1 GB");
    }

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

    #[test]
    fn an_item_against_its_ceiling() {
        let ceiling = Item::new("c", vec![2.0, 1.0, 3.0], 4_000_000_000);
        assert_eq!((ceiling.median_s, ceiling.min_s, ceiling.max_s), (2.0, 1.0, 3.0));
        assert_eq!((ceiling.gbps, ceiling.ratio, ceiling.ceiling.as_str()), (2.0, 1.0, "c"));
        let item = Item::new("i", vec![4.0], 4_000_000_000).against(&ceiling);
        assert_eq!((item.gbps, item.ceiling_gbps, item.ratio), (1.0, 2.0, 0.5));
        assert_eq!(item.ceiling, "c");
        // No times: no panic, no figure.
        assert!(Item::new("e", Vec::new(), 1).median_s.is_nan());
    }

    #[test]
    fn the_cpu_result_is_compared_in_its_own_type() {
        let a = ndarray::array![[[1.0f32, -2.0, 3.5]]];
        let mut bytes: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert!(CpuOut::F32(a.clone()).agrees(&bytes));
        bytes[4] ^= 1;
        assert!(!CpuOut::F32(a.clone()).agrees(&bytes));
        assert!(!CpuOut::F32(a.clone()).agrees(&bytes[..8]));

        let h = a.mapv(bf16::from_f32);
        // Three halves padded to two words.
        let mut bytes: Vec<u8> = h.iter().flat_map(|v| v.to_le_bytes()).collect();
        bytes.extend([0, 0]);
        let out = CpuOut::Bf16(h.clone());
        assert!(out.agrees(&bytes));
        assert!(!CpuOut::Bf16(h).agrees(&bytes[..4]));
        bytes[2] ^= 0x80;
        assert!(!out.agrees(&bytes));
    }
}
