//! Helpers shared by the integration tests.

pub mod cli;
pub mod convert_probe;
pub mod random;
pub mod recording;
pub mod rope;

pub use random::{Rng, hard_positions};

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::{Mutex, OnceLock};

use ndarray::{Array, Array2, Dimension};
use posenc::gpu::{Context, Options};
use posenc::npy;

/// What a skipping test lacked ("a GPU adapter", "spirv-val", ...) and the tests that
/// skipped for it.
static SKIPPED: Mutex<BTreeMap<String, BTreeSet<String>>> = Mutex::new(BTreeMap::new());

/// Records that the running test skips for lack of `what`, and says so on its own (captured)
/// stderr. A test that skips passes, so libtest's summary cannot tell it from one that ran:
/// when the test binary exits, after that summary, one line counts the skipped tests by what
/// they lacked. `CI=true` makes the GPU's and the validators' absence a failure instead.
pub fn skip(what: &str, detail: impl std::fmt::Display) {
    let test = std::thread::current().name().unwrap_or("main").to_string();
    eprintln!("SKIP {test}: no {what}: {detail}");
    let mut skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
    if skipped.is_empty() {
        extern "C" fn report() {
            let skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
            let counts: Vec<String> = skipped
                .iter()
                .map(|(what, tests)| format!("{} for lack of {what}", tests.len()))
                .collect();
            let total: usize = skipped.values().map(BTreeSet::len).sum();
            let _ = writeln!(
                std::io::stderr(),
                "\nSKIPPED: {total} of these tests passed without running ({}); CI=true makes \
                 a missing GPU adapter or validator fail",
                counts.join(", ")
            );
        }
        unsafe extern "C" {
            fn atexit(f: extern "C" fn()) -> std::ffi::c_int;
        }
        // SAFETY: registers a function for the C runtime to call at exit; `report` only
        // reads a static and writes to stderr, and takes no arguments.
        unsafe { atexit(report) };
    }
    skipped.entry(what.to_string()).or_default().insert(test);
}

/// Whether the test runs under `CI=true`, which promises to run every GPU and validator test.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// `x`, or a zero of its sign where it is subnormal: what a GPU that flushes f32 subnormals
/// reads and writes (WGSL allows it; NVIDIA's Vulkan driver does).
pub fn flush_subnormal(x: f32) -> f32 {
    if x.is_subnormal() { 0f32.copysign(x) } else { x }
}

/// Whether `ctx`'s adapter may flush subnormals: any but one that runs shaders on CPU cores
/// (lavapipe, llvmpipe keep them; the tests hold those to every bit).
pub fn may_flush_subnormals(ctx: &Context) -> bool {
    ctx.adapter_info().device_type != wgpu::DeviceType::Cpu
}

/// Whether a GPU's `got` is what flushing gives, `flushed` being the CPU's arithmetic on
/// flushed inputs with its result flushed: its bits, or a zero where that is a zero of
/// either sign (`-0 - -0` is `+0`).
pub fn is_flushed(got: f32, flushed: f32) -> bool {
    got.to_bits() == flushed.to_bits() || (got == 0.0 && flushed == 0.0)
}

/// One GPU context per test binary (pipelines compile once). `None` means no adapter:
/// the caller skips, and the skip is counted ([`skip`]). Under `CI=true` a missing adapter
/// fails instead, because CI promises to run every GPU test.
pub fn gpu() -> Option<&'static Context> {
    static CTX: OnceLock<Result<Context, String>> = OnceLock::new();
    let ctx = CTX.get_or_init(|| match Options::from_env().and_then(|o| Context::new(&o)) {
        Ok(ctx) => {
            let s = ctx.summary();
            eprintln!("GPU tests run on {} ({}, {})", s.name, s.backend, s.device_type);
            Ok(ctx)
        }
        Err(e) if in_ci() => panic!("CI=true but no GPU adapter: {e}"),
        Err(e) => Err(e.to_string()),
    });
    match ctx {
        Ok(ctx) => Some(ctx),
        Err(e) => {
            skip("a GPU adapter", e);
            None
        }
    }
}

/// One context per test binary on a device opened with WebGPU's downlevel default limits
/// (4 storage buffers per shader stage, 128 MiB bindings), under the same rule as [`gpu`].
pub fn downlevel_gpu() -> Option<&'static Context> {
    static CTX: OnceLock<Option<Context>> = OnceLock::new();
    CTX.get_or_init(|| {
        let limits = wgpu::Limits::downlevel_defaults();
        let ctx = fresh_gpu(&posenc::gpu::Options::default().limits(Some(limits.clone())))?;
        assert_eq!(
            ctx.device().limits().max_storage_buffers_per_shader_stage,
            limits.max_storage_buffers_per_shader_stage
        );
        Some(ctx)
    })
    .as_ref()
}

/// A context of its own (for tests that change or break it), under the same rule as
/// [`gpu`]: `None` skips visibly, except under `CI=true`.
pub fn fresh_gpu(options: &posenc::gpu::Options) -> Option<Context> {
    match Context::new(options) {
        Ok(ctx) => Some(ctx),
        Err(e) if in_ci() => panic!("CI=true but no GPU adapter: {e}"),
        Err(e) => {
            skip("a GPU adapter", e);
            None
        }
    }
}

/// Runs `f` on another thread and fails the test if it takes longer than `limit`: what a
/// hang looks like in a test.
pub fn within<T: Send + 'static>(
    what: &str,
    limit: std::time::Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(value)) => value,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("{what} did not finish within {limit:?}: a hang"),
    }
}

/// A `[vocab, dim]` float32 table of values in [-1, 1).
pub fn random_table(rng: &mut Rng, vocab: usize, dim: usize) -> Array2<f32> {
    Array2::from_shape_fn((vocab, dim), |_| rng.next_u32() as f32 / 2f32.powi(31) - 1.0)
}

/// `[batch, len]` token ids below `vocab`.
pub fn random_ids(rng: &mut Rng, batch: usize, len: usize, vocab: usize) -> Array2<u32> {
    Array2::from_shape_fn((batch, len), |_| rng.below(vocab as u64) as u32)
}

/// A version 1.0 `.npy` file of header `dict` as given (no padding, nothing checked) and
/// raw `data`: for headers posenc does not write.
pub fn raw_npy_dict(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend_from_slice(data);
    out
}

/// A well-formed version 1.0 `.npy` file of any `descr` and `shape` (its header padded as
/// numpy pads it), for dtypes posenc does not write.
pub fn raw_npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    raw_npy_dict(&dict, data)
}

/// A `.safetensors` file of `(name, dtype, shape, little-endian bytes)` tensors.
pub fn safetensors_of(tensors: &[(&str, safetensors::Dtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let views = tensors.iter().map(|(name, dtype, shape, data)| {
        (*name, safetensors::tensor::TensorView::new(*dtype, shape.clone(), data).unwrap())
    });
    safetensors::serialize(views, None).unwrap()
}

/// The little-endian bytes of `values`.
pub fn le_bytes<T: bytemuck::Pod>(values: &[T]) -> Vec<u8> {
    values.iter().flat_map(|v| bytemuck::bytes_of(v).to_vec()).collect()
}

/// The bits of each value, for comparisons that must not treat -0.0 as 0.0 or NaN as
/// unequal to itself.
pub fn bits<V: std::borrow::Borrow<f32>>(values: impl IntoIterator<Item = V>) -> Vec<u32> {
    values.into_iter().map(|v| v.borrow().to_bits()).collect()
}

/// The `.npy` bytes posenc writes for `a`.
pub fn npy_bytes<T: npy::Element, D: Dimension>(a: &Array<T, D>) -> Vec<u8> {
    let mut bytes = Vec::new();
    npy::write(&mut bytes, a.view()).unwrap();
    bytes
}

/// Largest |a - b| over two equally long slices, with its index.
pub fn max_abs_diff(
    a: impl IntoIterator<Item = f64>,
    b: impl IntoIterator<Item = f64>,
) -> (f64, usize) {
    a.into_iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .enumerate()
        // A NaN difference (a NaN on either side) is the largest: `d > m` alone would skip it.
        .fold(
            (0.0, 0),
            |(m, mi), (i, d)| if d > m || (d.is_nan() && !m.is_nan()) { (d, i) } else { (m, mi) },
        )
}

/// Asserts two f32 slices are identical bit for bit, naming the first difference.
pub fn assert_bits_eq(what: &str, got: &[f32], want: &[f32], dim: usize) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g.to_bits() != w.to_bits()) {
        panic!(
            "{what}: first differing value at row {}, column {}: got {:e} ({:#010x}), want {:e} \
                ({:#010x})",
            i / dim,
            i % dim,
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits()
        );
    }
}

/// A decoded 8-bit RGB PNG: width, height and the pixels, three bytes each, row-major.
pub struct Png {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

impl Png {
    /// Decodes `bytes`, which must be an 8-bit RGB PNG (what posenc writes).
    pub fn decode(bytes: &[u8]) -> Self {
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().expect("a PNG header");
        let mut rgb = vec![0; reader.output_buffer_size().expect("a sane size")];
        let info = reader.next_frame(&mut rgb).expect("PNG image data");
        assert_eq!(info.color_type, png::ColorType::Rgb);
        assert_eq!(info.bit_depth, png::BitDepth::Eight);
        rgb.truncate(info.buffer_size());
        Self { width: info.width, height: info.height, rgb }
    }

    pub fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
        let i = 3 * (y as usize * self.width as usize + x as usize);
        [self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]]
    }
}
