//! Peer benchmark for posenc: the same job (embedding gather + sinusoidal positional
//! encoding, f32) done the way a burn user would do it, on burn's wgpu backend with its
//! default kernel fusion and autotuning.
//!
//! Prints one JSON object per line on stdout: an `info` line, then for each preset an
//! `encode_call` line (forward + device sync) and an `encode_host` line (forward + read
//! back into host memory). Diagnostics go to stderr.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use burn::backend::{Backend, Dispatch};
use burn::nn::{Embedding, EmbeddingConfig, PositionalEncoding, PositionalEncodingConfig};
use burn::tensor::wgpu::WgpuBackend;
use burn::tensor::{Device, Int, Tensor, TensorData};
use serde_json::json;

/// The burn release this binary is pinned to (`=0.22.1` in Cargo.toml).
const BURN_VERSION: &str = "0.22.1";

/// Seed for the embedding weights (burn's device RNG) and for the token ids (ours).
const SEED: u64 = 0x5EED_0F_B0_12;

struct Preset {
    name: &'static str,
    b: usize,
    l: usize,
    d: usize,
    v: usize,
}

const PRESETS: &[Preset] = &[
    Preset { name: "default", b: 8, l: 1024, d: 1024, v: 32000 },
    Preset { name: "bert-base", b: 32, l: 128, d: 768, v: 30522 },
    Preset { name: "gpt2", b: 8, l: 1024, d: 768, v: 50257 },
    Preset { name: "whisper-small", b: 8, l: 448, d: 768, v: 51865 },
];

struct Args {
    presets: Vec<&'static Preset>,
    iters: usize,
    warmup: usize,
}

const USAGE: &str = "usage: posenc-burn-peer [PRESET ...] [--iters N] [--warmup N]\n\
presets: default, bert-base, gpt2, whisper-small (all when none is named)\n\
env: WGPU_BACKEND=vulkan|gl|dx12|metal|webgpu pins the graphics API (else burn picks)";

fn parse_args() -> Result<Args, String> {
    let mut presets = Vec::new();
    let mut iters = 50usize;
    let mut warmup = 10usize;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut count = |flag: &str, inline: Option<&str>| -> Result<usize, String> {
            let raw = match inline {
                Some(v) => v.to_string(),
                None => it.next().ok_or_else(|| format!("{flag} needs a value"))?,
            };
            raw.parse::<usize>().map_err(|_| format!("{flag}: not a non-negative integer: {raw:?}"))
        };
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--iters" => iters = count("--iters", None)?,
            "--warmup" => warmup = count("--warmup", None)?,
            s if s.starts_with("--iters=") => iters = count("--iters", Some(&s[8..]))?,
            s if s.starts_with("--warmup=") => warmup = count("--warmup", Some(&s[9..]))?,
            s if s.starts_with('-') => return Err(format!("unknown option {s:?}")),
            name => {
                let p = PRESETS
                    .iter()
                    .find(|p| p.name == name)
                    .ok_or_else(|| format!("unknown preset {name:?}"))?;
                presets.push(p);
            }
        }
    }
    if iters == 0 {
        return Err("--iters must be at least 1".into());
    }
    if presets.is_empty() {
        presets = PRESETS.iter().collect();
    }
    Ok(Args { presets, iters, warmup })
}

/// burn's wgpu runtime does not read `WGPU_BACKEND` itself (cubecl picks Vulkan first,
/// then DX12, then GL); map it onto burn's own graphics-API pin. wgpu's spelling is a
/// comma-separated list; the first name we recognise wins.
fn graphics_api_from_env() -> Result<(WgpuBackend, Option<String>), String> {
    let Ok(raw) = std::env::var("WGPU_BACKEND") else {
        return Ok((WgpuBackend::Auto, None));
    };
    for name in raw.split(',').map(|s| s.trim().to_ascii_lowercase()) {
        let api = match name.as_str() {
            "vulkan" | "vk" => WgpuBackend::Vulkan,
            "gl" | "gles" | "opengl" => WgpuBackend::Gl,
            "dx12" | "d3d12" => WgpuBackend::Dx12,
            "metal" | "mtl" => WgpuBackend::Metal,
            "webgpu" | "browser" | "browser_webgpu" => WgpuBackend::WebGpu,
            _ => continue,
        };
        return Ok((api, Some(raw)));
    }
    Err(format!("WGPU_BACKEND={raw:?} names no graphics API burn knows"))
}

/// splitmix64: a tiny deterministic generator for the token ids.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n) (Lemire's multiply-shift; the bias is far below what matters here).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

fn median_min(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort_unstable();
    let n = samples.len();
    let median = if n % 2 == 1 {
        samples[n / 2].as_secs_f64()
    } else {
        0.5 * (samples[n / 2 - 1].as_secs_f64() + samples[n / 2].as_secs_f64())
    };
    (median, samples[0].as_secs_f64())
}

fn forward(emb: &Embedding, pe: &PositionalEncoding, ids: &Tensor<2, Int>) -> Tensor<3> {
    pe.forward(emb.forward(ids.clone()))
}

/// Reads the output into host memory and touches it, so that nothing about the read can
/// be deferred; returns a checksum of a few values to keep the optimiser honest.
fn read_back(x: Tensor<3>) -> f64 {
    let data = x.into_data();
    let values = data.as_slice::<f32>().expect("the output is f32");
    let n = values.len();
    f64::from(values[0]) + f64::from(values[n / 2]) + f64::from(values[n - 1])
}

/// Checks a few output rows against weight[id] + sinusoids[position], read back
/// separately; returns the largest absolute difference.
fn spot_check(
    emb: &Embedding,
    pe: &PositionalEncoding,
    ids_host: &[i32],
    out: &[f32],
    p: &Preset,
) -> f32 {
    let weight = emb.weight.val();
    let mut worst = 0.0f32;
    let rows = [0, p.b * p.l / 2 + 1, p.b * p.l - 1];
    for &r in &rows {
        let (pos, id) = (r % p.l, ids_host[r] as usize);
        let w = weight.clone().slice([id..id + 1, 0..p.d]).into_data();
        let s = pe.sinusoids.clone().slice([0..1, pos..pos + 1, 0..p.d]).into_data();
        let (w, s) = (w.as_slice::<f32>().unwrap(), s.as_slice::<f32>().unwrap());
        for j in 0..p.d {
            let want = w[j] + s[j];
            worst = worst.max((out[r * p.d + j] - want).abs());
        }
    }
    worst
}

fn run_preset(device: &Device, p: &Preset, iters: usize, warmup: usize, max_binding: u64) {
    // burn's gather binds the whole embedding table as one storage buffer; an adapter
    // whose binding limit is below the table (lavapipe: 128 MiB, so gpt2 and
    // whisper-small) fails with a wgpu validation error that poisons the device. Skip
    // such presets with a line that says so instead.
    let biggest = (p.v.max(p.b * p.l) * p.d * std::mem::size_of::<f32>()) as u64;
    if biggest > max_binding {
        emit(json!({
            "peer": "burn", "op": "skip", "model": p.name, "shape": [p.b, p.l, p.d, p.v],
            "reason": format!(
                "a {biggest}-byte buffer exceeds the device's max_storage_buffer_binding_size \
                 ({max_binding}); burn binds the whole embedding table"
            ),
        }));
        return;
    }
    device.seed(SEED);
    let emb = EmbeddingConfig::new(p.v, p.d).init(device);
    let pe = PositionalEncodingConfig::new(p.d).with_max_sequence_size(p.l).init(device);

    let mut rng = SplitMix64(SEED ^ (p.b * p.l) as u64 ^ ((p.v as u64) << 32));
    let ids_host: Vec<i32> = (0..p.b * p.l).map(|_| rng.below(p.v) as i32).collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids_host.clone(), [p.b, p.l]), device);
    device.sync().expect("device sync after setup");

    // Correctness, once, outside the timings.
    let first = forward(&emb, &pe, &ids).into_data();
    let out = first.as_slice::<f32>().expect("the output is f32");
    assert_eq!(out.len(), p.b * p.l * p.d, "output element count");
    let check_err = spot_check(&emb, &pe, &ids_host, out, p);
    if !(check_err <= 1e-5) {
        eprintln!("posenc-burn-peer: {}: spot check off by {check_err}", p.name);
    }

    let bytes = (p.b * p.l * p.d * std::mem::size_of::<f32>()) as u64;
    let shape = [p.b, p.l, p.d, p.v];

    // 1. A whole call: forward, then wait for the device.
    for _ in 0..warmup {
        let x = forward(&emb, &pe, &ids);
        device.sync().expect("device sync");
        drop(x);
    }
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        let x = forward(&emb, &pe, &ids);
        device.sync().expect("device sync");
        samples.push(t.elapsed());
        drop(x);
    }
    let (median, min) = median_min(&mut samples);
    emit(json!({
        "peer": "burn", "op": "encode_call", "model": p.name, "shape": shape,
        "median_s": median, "min_s": min, "iters": iters, "warmup": warmup,
        "bytes": bytes, "gbps_median": bytes as f64 / median / 1e9,
        "gbps_best": bytes as f64 / min / 1e9,
    }));

    // 2. Until the host holds the bytes.
    let mut sink = 0.0f64;
    for _ in 0..warmup {
        sink += read_back(forward(&emb, &pe, &ids));
    }
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        sink += read_back(forward(&emb, &pe, &ids));
        samples.push(t.elapsed());
    }
    let (median, min) = median_min(&mut samples);
    emit(json!({
        "peer": "burn", "op": "encode_host", "model": p.name, "shape": shape,
        "median_s": median, "min_s": min, "iters": iters, "warmup": warmup,
        "bytes": bytes, "gbps_median": bytes as f64 / median / 1e9,
        "gbps_best": bytes as f64 / min / 1e9,
        "check_max_abs_err": check_err, "checksum": std::hint::black_box(sink),
    }));
}

fn emit(value: serde_json::Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{value}").expect("write stdout");
    out.flush().expect("flush stdout");
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("posenc-burn-peer: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let (api, env_backend) = match graphics_api_from_env() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("posenc-burn-peer: {e}");
            return ExitCode::from(2);
        }
    };

    let (device, setup) = match Device::wgpu_options().graphics_api(api).init_with_setup() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("posenc-burn-peer: no wgpu device ({api:?}): {e}");
            return ExitCode::from(1);
        }
    };
    let info = setup.adapter.get_info();
    let max_binding = setup.device.limits().max_storage_buffer_binding_size as u64;
    // e.g. "dispatch<fusion<cubecl<wgpu<wgsl>>>>": names the shader compiler in use.
    let runtime = <Dispatch as Backend>::name(device.as_dispatch());
    let mut features = vec!["std", "wgpu", "fusion", "autotune"];
    if cfg!(feature = "spirv") {
        features.push("vulkan");
    }
    emit(json!({
        "peer": "burn", "op": "info", "burn": BURN_VERSION,
        "features": features, "runtime": runtime,
        "adapter": info.name, "backend": format!("{:?}", info.backend),
        "device_type": format!("{:?}", info.device_type),
        "driver": info.driver, "driver_info": info.driver_info,
        "graphics_api": format!("{api:?}"), "wgpu_backend_env": env_backend,
        "max_storage_buffer_binding_size": max_binding,
    }));

    for p in &args.presets {
        run_preset(&device, p, args.iters, args.warmup, max_binding);
    }
    ExitCode::SUCCESS
}
