//! # posenc
//!
//! Exact transformer positional encodings on any GPU wgpu reaches, with a CPU path that
//! gives the same bits.
//!
//! `PE(p, 2i) = sin(p w_i)`, `PE(p, 2i+1) = cos(p w_i)`, `w_i = base^(-2i/d)` ("Attention
//! Is All You Need"), computed in exact fixed-point turns: within 6e-8 of the true value for
//! every u32 position, where the usual `f32(p) * f32(w)` is off by 6e-2 near position 2^20
//! and by more than 1 near 2^24 (`posenc accuracy` measures it).
//!
//! Three paths, one contract:
//! - [`reference`](mod@reference): high precision (big-float phase reduction), for tests;
//! - [`cpu`](mod@cpu): fast, multi-threaded, the twin of each shader;
//! - [`gpu`](mod@gpu): WGSL compute shaders through wgpu, bit-identical to [`cpu`](mod@cpu).
//!
//! Around them: [`encode`](mod@encode) adds PE to gathered embedding rows in one pass,
//! [`positions`] builds the positions of common batch shapes (KV-cache offsets, left
//! padding, packing), [`naive`] is the float32 formula most code uses (to measure against)
//! and [`plot`] draws tables, similarities and errors as PNG images. The repository's
//! `examples/` show word order in attention, KV-cache decoding and a safetensors round trip.
//! ALiBi attention biases (slopes and the bias tensor, on both paths) are in [`alibi`].
//! [`inputs`] reads the command line's input files and checks every shape derived from
//! them before anything of that shape exists; [`alloc`] allocates outputs fallibly.
//! The same engine drives rotary position embeddings ([`rope`](mod@rope)) with Hugging
//! Face's `rope_scaling` schemes, on query/key tensors on the CPU and the GPU.
//!
//! The `cli` feature, on by default, builds the `posenc` binary and the modules only it
//! needs: [`plot`], [`bench`](mod@bench) (the `posenc bench` measurements) and [`output`]
//! (where `-o` sends a result), with clap and png. `default-features = false` leaves the
//! encodings, their inputs and the GPU engine. The `diagnostics` feature is for measuring
//! the kernels on a GPU, never for use ([`shaders::diagnostics`]).
//!
//! ```
//! use posenc::{PeSpec, cpu, reference};
//!
//! let spec = PeSpec::new(8)?;
//! let fast = cpu::table(&spec, &[0, 1, 2, 3, 4_294_967_295]);
//! let exact = reference::table(&spec, &[0, 1, 2, 3, 4_294_967_295]);
//! for (f, e) in fast.iter().zip(exact.iter()) {
//!     assert!((f64::from(*f) - e).abs() <= posenc::ACCURACY_BOUND);
//! }
//! # Ok::<(), posenc::Error>(())
//! ```
#![warn(missing_docs)]
// Without `cli` the crate docs still name `plot`, `bench` and `output`, which are not built.
#![cfg_attr(not(feature = "cli"), allow(rustdoc::broken_intra_doc_links))]
// On the web (wasm32) wgpu's handles are neither Send nor Sync (one thread), so the Arcs
// that share them natively between threads are single-threaded there.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

pub mod alibi;
pub mod alloc;
#[cfg(feature = "cli")]
pub mod bench;
// The options of the commands, resolved once for the command line and the Python package;
// a config or a model's frequencies may be a path, so not for the web either.
#[cfg(not(target_arch = "wasm32"))]
pub mod commands;
pub mod convert;
pub mod cpu;
pub mod dtype;
pub mod encode;
mod error;
mod exact;
pub mod gpu;
// Reading the command line's inputs from paths, FIFOs and standard input: there are none
// in a browser, where configs, tables and arrays arrive as bytes
// (`RopeSpec::from_hf_config`, `npy::read`, `weights::from_bytes`).
#[cfg(not(target_arch = "wasm32"))]
pub mod inputs;
pub mod model_config;
pub mod naive;
pub mod npy;
#[cfg(feature = "cli")]
pub mod output;
pub mod placement;
#[cfg(feature = "cli")]
pub mod plot;
pub mod positions;
pub mod reference;
pub mod rope;
pub mod shaders;
mod simd;
pub mod source;
mod spec;
pub mod weights;

pub use error::{Error, ErrorKind, MAX_PROSE_CHARS, MAX_SHOWN_CHARS, Result, message_text};

/// The most an exact-mode value (sinusoid table, encode's PE term, RoPE cos/sin) differs
/// from the true value, at every u32 position: one f32 ulp at magnitudes 0.5 to 1. The
/// error before the final rounding is under 6e-9, after it under 3.6e-8 (ARCHITECTURE.md,
/// "Numerics"); this is the bound the tests check and the docs quote.
pub const ACCURACY_BOUND: f64 = 6e-8;
pub use spec::{
    DEFAULT_BASE, Frequencies, Layout, MAX_BASE, MAX_DIM, MAX_INV_FREQ, MAX_TIMESCALE,
    MIN_INV_FREQ, MIN_TIMESCALE, PeSpec, Variant,
};

/// The Rust blocks of the README and of every page under `docs/` are doctests: they
/// compile and run with `cargo test --doc` (blocks that are not Rust name their language).
#[cfg(doctest)]
mod doc_pages {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/adapters.md")]
    struct Adapters;
    #[doc = include_str!("../docs/alibi.md")]
    struct Alibi;
    #[doc = include_str!("../docs/commands.md")]
    struct Commands;
    #[doc = include_str!("../docs/examples.md")]
    struct Examples;
    #[doc = include_str!("../docs/families.md")]
    struct Families;
    #[doc = include_str!("../docs/guarantees.md")]
    struct Guarantees;
    #[doc = include_str!("../docs/library.md")]
    struct Library;
    #[doc = include_str!("../docs/performance.md")]
    struct Performance;
    #[doc = include_str!("../docs/pictures.md")]
    struct Pictures;
    #[doc = include_str!("../docs/rope.md")]
    struct Rope;
    #[doc = include_str!("../docs/variants.md")]
    struct Variants;
}
