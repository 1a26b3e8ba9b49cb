//! `posenc bench`: CPU vs GPU encode, table generation and checkpoint loading, each against
//! a ceiling measured in the same rounds over the same bytes, plus a bit-for-bit agreement
//! check of the two encodes. Shapes come from the caller ([`Config`]) or from real models'
//! configs ([`PRESETS`]), one at a time ([`run`]) or all in one suite ([`run_suite`]);
//! [`chart`] draws the results.
//!
//! Every item names the ceiling it is measured against ([`Item::ceiling`]):
//!
//! - `cpu_encode`, `cpu_encode_cold`, `cpu_table`: `cpu_copy_ceiling`, the fastest of three
//!   memcpy forms of the output's bytes (on the calling thread or across rayon's pool;
//!   [`Report::cpu_ceiling_method`]);
//! - `gpu_encode`, `gpu_encode_cold`, `gpu_table`, `gpu_readback`: `gpu_copy_ceiling`, the
//!   fastest of the WGSL copy forms moving the encode's bytes (ids and positions, gathered
//!   rows, each distinct position's PE row, output: half read, half written), timed as the
//!   device-timed items are (device timestamps where the adapter has them);
//! - `gpu_encode_call`, `gpu_encode_host`, `gpu_encode_stream`: `gpu_copy_ceiling_call`,
//!   that copy as a whole call (encoder, submission, wait) by the wall clock;
//! - `cpu_load`: `cpu_read_ceiling`, `std::fs::read` of the same checkpoint from a warm page
//!   cache.
//!
//! Each round times every item once, its ceiling included, so a drift in the machine's speed
//! (other load, clock frequency) moves an item and its ceiling together.

//!
//! The code is in three parts: what to measure (`presets`: [`Preset`], [`Config`]), running it
//! (`running`: [`run`], [`run_suite`], [`run_op`]) and reporting it (`reporting`: [`Report`],
//! [`Suite`], [`chart`]); the operations' presets and runs are in [`ops`], steps mode in [`steps`],
//! the decode loop in [`decode`].

pub mod decode;
pub mod ops;
mod presets;
mod reporting;
mod running;
pub mod steps;

use presets::dtype_name;
pub use presets::{Config, Devices, PRESETS, Preset};
pub use reporting::{AdapterInfo, Item, Report, Sizes, Suite, chart};
use reporting::{items_table, median, significant, size, timing_name};
use running::{CopyCeiling, TableData, make_table, timed};
pub use running::{run, run_op, run_suite};

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
