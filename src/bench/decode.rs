//! `posenc bench --decode STEPS`: a decode loop of recorded [`gpu::EncodePass`] steps
//! against the same number of trivial dispatches recorded and submitted the same way (see
//! [`gpu::Context::time_decode`]).

use serde::Serialize;

use crate::encode::{Dtype, Embeddings, EncodeOptions};
use crate::error::{Error, Result};
use crate::gpu::{self, EncodePassDescriptor, Positions};
use crate::spec::PeSpec;

use super::median;

/// Most steps one decode bench times.
pub const MAX_DECODE_STEPS: usize = 100_000;

/// Most steps one decode bench runs of each of its two loops (the pass and the dispatch
/// floor), counting the timed loops and the one warm-up loop: `steps x (repeats + 1)` at
/// most 2^18. Further warm-up loops run only within the first 0.3 s. At the cap a run takes
/// about two minutes on lavapipe at B = 8 (0.3 ms a step and 0.2 ms of floor) and seconds
/// on a GPU, where 100000 steps x 10000 repeats, each within its own range, would take
/// weeks. 100000 steps with one timed loop stay within it.
pub const MAX_DECODE_TOTAL_STEPS: u64 = 1 << 18;

/// The shape of a decode bench: `batch` sequences, one new token each per step.
#[derive(Clone, Debug)]
pub struct DecodeConfig {
    /// Sequences per step.
    pub batch: usize,
    /// Model dimension.
    pub dim: usize,
    /// Vocabulary rows.
    pub vocab: usize,
    /// Embedding table storage type.
    pub dtype: Dtype,
    /// Output storage type.
    pub out_dtype: Dtype,
    /// Steps per timed loop.
    pub steps: usize,
    /// Timed loops (of each of the two items).
    pub repeats: usize,
}

impl Default for DecodeConfig {
    /// Llama 3 8B's embedding: D = 4096, V = 128256, bf16 in and out, 8 sequences.
    fn default() -> Self {
        Self {
            batch: 8,
            dim: 4096,
            vocab: 128_256,
            dtype: Dtype::Bf16,
            out_dtype: Dtype::Bf16,
            steps: 256,
            repeats: 5,
        }
    }
}

/// What `posenc bench --decode` reports.
#[derive(Clone, Debug, Serialize)]
pub struct DecodeReport {
    /// The adapter.
    pub adapter: String,
    /// Sequences per step.
    pub batch: usize,
    /// Model dimension.
    pub dim: usize,
    /// Vocabulary rows.
    pub vocab: usize,
    /// Embedding table storage type.
    pub dtype: String,
    /// Output storage type.
    pub out_dtype: String,
    /// Steps per timed loop.
    pub steps: usize,
    /// Timed loops of each item.
    pub repeats: usize,
    /// Dispatches each step records.
    pub dispatches_per_step: usize,
    /// Median wall-clock seconds per decode step (recorded, submitted without waiting), as
    /// every bench table reports it: the mean of the middle two runs for an even count.
    pub gpu_decode_step: f64,
    /// Median wall-clock seconds per step of as many trivial dispatches.
    pub gpu_dispatch_floor: f64,
    /// `gpu_decode_step / gpu_dispatch_floor`.
    pub ratio_to_floor: f64,
    /// Every timed loop's seconds per step, decode then floor.
    pub decode_runs: Vec<f64>,
    /// As `decode_runs`, for the floor.
    pub floor_runs: Vec<f64>,
}

impl DecodeConfig {
    /// Checks the sizes before anything is allocated.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming the field out of range; [`Error::Limit`] for more
    /// steps than [`MAX_DECODE_TOTAL_STEPS`] (`steps x (repeats + 1)`) or a table whose
    /// float32 values (built on the host before the upload, whatever `dtype`) exceed
    /// [`super::MAX_TABLE_BYTES`].
    pub fn check(&self) -> Result<PeSpec> {
        let range = |field: &'static str, v: usize, lo: usize, hi: usize, allowed| {
            if v < lo || v > hi {
                Err(Error::InvalidParameter { field, value: v.to_string(), allowed })
            } else {
                Ok(())
            }
        };
        range("decode", self.steps, 1, MAX_DECODE_STEPS, "1..=100000 steps")?;
        range("batch", self.batch, 1, 4096, "1..=4096 sequences for --decode")?;
        range("vocab", self.vocab, 1, 1 << 20, "1..=1048576 rows for --decode")?;
        range("repeats", self.repeats, 1, 10_000, "1..=10000")?;
        let total = (self.steps as u64).saturating_mul(self.repeats as u64 + 1);
        if total > MAX_DECODE_TOTAL_STEPS {
            return Err(Error::Limit {
                op: "bench --decode",
                what: "a run of STEPS x (repeats + 1) steps (the timed loops and one warm-up)",
                requested: total,
                limit_name: "bench::decode::MAX_DECODE_TOTAL_STEPS",
                limit: MAX_DECODE_TOTAL_STEPS,
            });
        }
        let spec = PeSpec::new(u32::try_from(self.dim).unwrap_or(u32::MAX))?;
        // `run_decode` builds the table as float32 values first: bound those bytes.
        let table = (self.vocab as u64).saturating_mul(self.dim as u64).saturating_mul(4);
        if table > super::MAX_TABLE_BYTES {
            return Err(Error::Limit {
                op: "bench --decode",
                what: "the embedding table, built in float32, in bytes (vocab x dim x 4)",
                requested: table,
                limit_name: "bench::MAX_TABLE_BYTES",
                limit: super::MAX_TABLE_BYTES,
            });
        }
        Ok(spec)
    }
}

/// Runs the decode bench on `ctx`.
///
/// # Errors
/// As [`DecodeConfig::check`], then the GPU's errors.
pub fn run_decode(ctx: &gpu::Context, config: &DecodeConfig) -> Result<DecodeReport> {
    let spec = config.check()?;
    let (vocab, dim) = (config.vocab, config.dim);
    // A table of small distinct values, cheap to make at 128256 x 4096.
    let values: Vec<f32> = (0..vocab * dim).map(|k| ((k % 251) as f32 - 125.0) / 128.0).collect();
    let table = ndarray::ArrayView2::from_shape((vocab, dim), &values).expect("sized above");
    let table = match config.dtype {
        Dtype::F32 => ctx.upload_table(Embeddings::F32(table))?,
        Dtype::F16 => ctx.upload_table(Embeddings::F16(table.mapv(half::f16::from_f32).view()))?,
        Dtype::Bf16 => {
            ctx.upload_table(Embeddings::Bf16(table.mapv(half::bf16::from_f32).view()))?
        }
    };
    drop(values);
    let desc = EncodePassDescriptor {
        batch: config.batch,
        len: 1,
        positions: Positions::PerSequence,
        options: EncodeOptions { out_dtype: config.out_dtype, ..Default::default() },
        ..Default::default()
    };
    let pass = ctx.encode_pass(&spec, &table, &desc)?;
    let timing = ctx.time_decode(&pass, vocab as u32, config.steps, config.repeats)?;
    let (step, floor) = (median(&timing.step), median(&timing.floor));
    let s = ctx.summary();
    Ok(DecodeReport {
        adapter: format!("{} ({}, {})", s.name, s.backend, s.device_type),
        batch: config.batch,
        dim: config.dim,
        vocab: config.vocab,
        dtype: super::dtype_name(config.dtype).into(),
        out_dtype: super::dtype_name(config.out_dtype).into(),
        steps: config.steps,
        repeats: config.repeats,
        dispatches_per_step: timing.dispatches,
        gpu_decode_step: step,
        gpu_dispatch_floor: floor,
        ratio_to_floor: step / floor,
        decode_runs: timing.step,
        floor_runs: timing.floor,
    })
}

impl DecodeReport {
    /// The report as a few lines of text.
    pub fn to_table(&self) -> String {
        let c = self;
        format!(
            "decode loop on {}\n  B = {}, D = {}, V = {}, table {}, output {}, {} steps x {} \
             runs, {} dispatch(es) per step\n  gpu_decode_step     {:>10.1} us\n  \
             gpu_dispatch_floor  {:>10.1} us\n  ratio               {:>10.2}\n",
            self.adapter,
            c.batch,
            c.dim,
            c.vocab,
            c.dtype,
            c.out_dtype,
            c.steps,
            c.repeats,
            self.dispatches_per_step,
            self.gpu_decode_step * 1e6,
            self.gpu_dispatch_floor * 1e6,
            self.ratio_to_floor,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_past_the_cap_are_refused_naming_the_count_and_the_limit() {
        let config = |steps, repeats| DecodeConfig { steps, repeats, ..Default::default() };
        match config(MAX_DECODE_STEPS, 10_000).check() {
            Err(Error::Limit { requested, limit_name, limit, .. }) => {
                assert_eq!(requested, 100_000 * 10_001);
                assert_eq!((limit_name, limit), ("bench::decode::MAX_DECODE_TOTAL_STEPS", 1 << 18));
            }
            other => panic!("{other:?}"),
        }
        // At the cap exactly, nothing is refused; one step more is.
        config(1 << 16, 3).check().unwrap();
        config(MAX_DECODE_STEPS, 1).check().unwrap();
        assert!(config((1 << 16) + 1, 3).check().is_err());
        DecodeConfig::default().check().unwrap();
    }
}
