//! posenc's integration tests, one test binary, run by part with a name filter:
//!
//! - `cargo test --test it -- cpu::` the library on the CPU against independent references
//!   (tables, variants, encode, RoPE, ALiBi, learned tables, plots, malformed inputs), and
//!   the binary's CPU-only commands (`cpu::cli::`);
//! - `cargo test --test it -- gpu::` everything that opens a GPU adapter: the library's
//!   kernels against their CPU twins, faults and limits, and the binary's commands on
//!   `--device gpu`/`auto` (`gpu::cli::`). CI runs this part twice, on Vulkan and on GL;
//!   without an adapter these tests skip, and a `SKIPPED:` line after libtest's summary counts
//!   them (`support::skip`); under `CI=true` they fail instead;
//! - `cargo test --test it -- cli::` every test of the `posenc` binary, CPU and GPU;
//! - `cargo test --test it -- shaders::` every kernel through naga and the platforms'
//!   validators, and its `Params` and bindings against the host's.
//!
//! `layers` checks that the library's modules use only lower layers (no cycle).
//!
//! `support` holds the helpers they share (the GPU context, running the binary, scratch
//! directories, seeded random data).

mod cpu;
mod gpu;
mod layers;
mod shaders;
mod support;
