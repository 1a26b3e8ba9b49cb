//! posenc in a web page (examples/web/README.md): on the visitor's GPU, through WebGPU, the
//! sinusoid table at large positions from posenc and from the usual shader (the angle
//! `f32(p) * w` rounded to float32, then WGSL's builtin `sin`/`cos`), each compared with a
//! float64 reference computed here on the host; a RoPE rotation the same way; and, with
//! `?bench`, the time of a fused encode against a plain copy of the same bytes.
//!
//! The page calls [`accuracy`] and [`bench`]; each returns a JSON string
//! `{"text": ..., "summary": {...}}`: the text is shown, the summary is for scripts
//! (test_page.py reads it).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context as TaskContext, Poll, Waker};

use ndarray::{Array2, Array4};
use posenc::encode::{Embeddings, EncodeOptions};
use posenc::gpu::{Context, EncodePassDescriptor, Options, Positions};
use posenc::rope::{Layout, RopeSpec};
use posenc::{PeSpec, cpu};
use serde_json::json;
use wasm_bindgen::prelude::*;

/// The table's width (d_model) and the frequency base, as in "Attention Is All You Need".
const DIM: usize = 64;
const BASE: f64 = 10000.0;

/// Positions from a short prompt to the largest a signed 32-bit index holds.
const POSITIONS: [u32; 8] =
    [1, 1000, 1 << 16, 1 << 20, 1 << 24, 100_000_000, 1 << 30, (1 << 31) - 1];

/// The usual shader: the angle rounded to float32, then the builtin `sin` and `cos`. The
/// frequencies are float32 too, as an engine uploads them. Output `[rows, 2 * pairs]`,
/// `[sin w0 p, cos w0 p, sin w1 p, ...]`.
const NAIVE_WGSL: &str = r"
struct Params { rows: u32, pairs: u32 }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> positions: array<u32>;
@group(0) @binding(2) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= params.rows * params.pairs) { return; }
    let row = i / params.pairs;
    let k = i % params.pairs;
    let angle = f32(positions[row]) * inv_freq[k];
    let at = row * 2u * params.pairs + 2u * k;
    out[at] = sin(angle);
    out[at + 1u] = cos(angle);
}
";

/// The accuracy page: the PE table and a RoPE rotation against float64.
#[wasm_bindgen]
pub async fn accuracy() -> Result<String, JsValue> {
    run_accuracy().await.map_err(|e| JsValue::from_str(&e))
}

/// The measured figure: `encode_async` and a recorded encode against copies of the same
/// bytes, medians of wall-clock times.
#[wasm_bindgen]
pub async fn bench() -> Result<String, JsValue> {
    run_bench().await.map_err(|e| JsValue::from_str(&e))
}

fn text<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

async fn open() -> Result<Context, String> {
    Context::open(&Options::default()).await.map_err(text("posenc::gpu::Context::open"))
}

fn adapter_line(ctx: &Context) -> String {
    let info = ctx.adapter_info();
    format!(
        "wgpu's AdapterInfo: name {:?}, vendor {:?}, device type {:?}, driver {:?} {:?}, \
         backend {:?}",
        info.name, info.vendor, info.device_type, info.driver, info.driver_info, info.backend
    )
}

/// `w_i = base^(-2i/d)` in float64.
fn inv_freq_f64(dim: usize) -> Vec<f64> {
    (0..dim / 2).map(|i| BASE.powf(-((2 * i) as f64) / dim as f64)).collect()
}

async fn run_accuracy() -> Result<String, String> {
    let ctx = open().await?;
    let spec = PeSpec::new(DIM as u32).map_err(text("PeSpec"))?;
    let ours = ctx.table_async(&spec, &POSITIONS).await.map_err(text("table_async"))?;
    let on_cpu = cpu::table(&spec, &POSITIONS);
    let same_as_cpu = ours.iter().zip(on_cpu.iter()).all(|(a, b)| a.to_bits() == b.to_bits());
    let w = inv_freq_f64(DIM);
    let naive = naive_table(&ctx, &POSITIONS, &w).await?;

    // The float64 reference: sin and cos of p * w, the angle rounded once to float64.
    let error = |got: &Array2<f32>, row: usize| -> f64 {
        let p = f64::from(POSITIONS[row]);
        (0..DIM / 2)
            .flat_map(|k| {
                let angle = p * w[k];
                let sin = (f64::from(got[[row, 2 * k]]) - angle.sin()).abs();
                let cos = (f64::from(got[[row, 2 * k + 1]]) - angle.cos()).abs();
                [sin, cos]
            })
            .fold(0.0, f64::max)
    };

    let rope = rope_errors(&ctx).await?;

    let mut out = String::new();
    out += &adapter_line(&ctx);
    out += &format!(
        "\n\nSinusoid table, d_model {DIM}, base {BASE}: at each position the largest |value - \
         float64 reference| over the {DIM} columns.\nposenc: ctx.table_async (bit for bit the \
         CPU path's: {}). builtin: a WGSL kernel computing sin(f32(p) * w) and \
         cos(f32(p) * w) with float32 w, as web engines do. posenc RoPE: the largest error of \
         a rotated q at that position (below).\n\n",
        if same_as_cpu { "yes" } else { "NO" }
    );
    out += &format!(
        "{:>12} {:>14} {:>14} {:>14} {:>14}\n",
        "position", "posenc", "builtin", "posenc RoPE", "f64 ref error"
    );
    let mut rows = Vec::new();
    for (row, &p) in POSITIONS.iter().enumerate() {
        let (ours_err, naive_err) = (error(&ours, row), error(&naive, row));
        // The reference's own error: p * w (w <= 1) rounded to float64, w within an ulp
        // or two of its value: about 2^-52 of the angle.
        let reference_err = f64::from(p) * 2f64.powi(-52);
        out += &format!(
            "{p:>12} {ours_err:>14.3e} {naive_err:>14.3e} {:>14.3e} {reference_err:>14.1e}\n",
            rope.per_position[row]
        );
        rows.push(json!({
            "position": p,
            "posenc": ours_err,
            "builtin": naive_err,
            "posenc_rope": rope.per_position[row],
        }));
    }
    out += &format!(
        "\nThe reference is float64, whose own angle p * w is off by up to about 2^-52 of it \
         (last column: ~5e-7 at 2^31), so an error below that says nothing more than \
         \"as good as the reference\"; the builtin's errors reach the whole range of sin \
         (up to 2) at large p, far beyond it. Even at p = 1 the builtin is only as good as \
         WGSL asks: an absolute error of 2^-11 inside [-pi, pi], and nothing promised \
         outside.\n\nRoPE: ctx.rope_async of q [1, {}, {}, {}] \
         (neox pairing, base {BASE}) at the positions above, against the float64 rotation: \
         max error {:.3e} over all {} values.\n",
        POSITIONS.len(),
        rope.heads,
        rope.head_dim,
        rope.max,
        POSITIONS.len() * rope.heads * rope.head_dim,
    );
    let summary = json!({
        "adapter": adapter_line(&ctx),
        "same_as_cpu": same_as_cpu,
        "rows": rows,
        "rope_max": rope.max,
    });
    Ok(json!({ "text": out, "summary": summary }).to_string())
}

/// The table of `positions` computed by [`NAIVE_WGSL`] on posenc's device.
async fn naive_table(ctx: &Context, positions: &[u32], w: &[f64]) -> Result<Array2<f32>, String> {
    use wgpu::BufferUsages as U;
    use wgpu::util::DeviceExt as _;
    let (device, queue) = (ctx.device(), ctx.queue());
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("naive sinusoid"),
        source: wgpu::ShaderSource::Wgsl(NAIVE_WGSL.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("naive sinusoid"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let init = |label, contents: &[u8], usage| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents,
            usage,
        })
    };
    let pairs = w.len() as u32;
    let params = init("params", bytemuck::cast_slice(&[positions.len() as u32, pairs]), U::UNIFORM);
    let pos = init("positions", bytemuck::cast_slice(positions), U::STORAGE);
    let w32: Vec<f32> = w.iter().map(|&v| v as f32).collect();
    let freq = init("inv_freq", bytemuck::cast_slice(&w32), U::STORAGE);
    let count = positions.len() * w.len() * 2;
    let out = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("naive table"),
        size: (count * 4) as u64,
        usage: U::STORAGE | U::COPY_SRC,
        mapped_at_creation: false,
    });
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("naive sinusoid"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: pos.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 2, resource: freq.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 3, resource: out.as_entire_binding() },
        ],
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups((positions.len() as u32 * pairs).div_ceil(64), 1, 1);
    }
    queue.submit([encoder.finish()]);
    if let Some(e) = scope.pop().await {
        return Err(format!("the naive kernel: {e}"));
    }
    let bytes = ctx.read_buffer_async(&out).await.map_err(text("read_buffer_async"))?;
    let values: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes[..count * 4]);
    Array2::from_shape_vec((positions.len(), w.len() * 2), values).map_err(text("naive table"))
}

struct RopeErrors {
    heads: usize,
    head_dim: usize,
    /// The largest error among the values of each position.
    per_position: Vec<f64>,
    max: f64,
}

/// q `[1, L, heads, head_dim]` rotated by `rope_async` at [`POSITIONS`], against the
/// float64 rotation of the same float32 inputs (neox pairing: `i` with `i + head_dim/2`).
async fn rope_errors(ctx: &Context) -> Result<RopeErrors, String> {
    let (heads, head_dim) = (2, 64);
    let spec = RopeSpec::new(head_dim as u32).map_err(text("RopeSpec"))?;
    let len = POSITIONS.len();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let q = Array4::from_shape_fn((1, len, heads, head_dim), |_| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    });
    let positions =
        Array2::from_shape_vec((1, len), POSITIONS.to_vec()).map_err(text("positions"))?;
    let got = ctx
        .rope_async(&spec, q.view(), positions.view(), Layout::Blhd)
        .await
        .map_err(text("rope_async"))?;
    let w = inv_freq_f64(head_dim);
    let half = head_dim / 2;
    let mut per_position = vec![0f64; len];
    for (t, &p) in POSITIONS.iter().enumerate() {
        for h in 0..heads {
            for (i, &wi) in w.iter().enumerate() {
                let (sin, cos) = (f64::from(p) * wi).sin_cos();
                let (a, b) = (f64::from(q[[0, t, h, i]]), f64::from(q[[0, t, h, i + half]]));
                let want = [a * cos - b * sin, b * cos + a * sin];
                let have = [got[[0, t, h, i]], got[[0, t, h, i + half]]];
                for (g, r) in have.iter().zip(want) {
                    per_position[t] = per_position[t].max((f64::from(*g) - r).abs());
                }
            }
        }
    }
    let max = per_position.iter().copied().fold(0.0, f64::max);
    Ok(RopeErrors { heads, head_dim, per_position, max })
}

fn now() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

const WARMUP: usize = 3;
const RUNS: usize = 20;

async fn run_bench() -> Result<String, String> {
    use wgpu::BufferUsages as U;
    use wgpu::util::DeviceExt as _;
    let ctx = open().await?;
    let (device, queue) = (ctx.device(), ctx.queue());
    let (batch, len, dim, vocab) = (8usize, 128usize, 768usize, 1000usize);
    let spec = PeSpec::new(dim as u32).map_err(text("PeSpec"))?;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let table =
        Array2::from_shape_fn((vocab, dim), |_| (next() >> 40) as f32 / (1u64 << 24) as f32);
    let ids = Array2::from_shape_fn((batch, len), |_| (next() % vocab as u64) as u32);
    let positions = Array2::from_shape_fn((batch, len), |(_, t)| t as u32);
    let options = EncodeOptions::default();
    let uploaded = ctx.upload_table(Embeddings::F32(table.view())).map_err(text("upload_table"))?;
    let out_bytes = (batch * len * dim * 4) as u64;

    // The recorded path: ids and positions in the caller's buffers, one record per step.
    let desc = EncodePassDescriptor {
        batch,
        len,
        positions: Positions::PerToken,
        options,
        ..Default::default()
    };
    let pass =
        ctx.encode_pass_async(&spec, &uploaded, &desc).await.map_err(text("encode_pass_async"))?;
    let init = |label, contents: &[u8], usage| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents,
            usage,
        })
    };
    let ids_buf =
        init("ids", bytemuck::cast_slice(ids.as_slice().unwrap()), U::STORAGE | U::COPY_DST);
    let pos_buf = init(
        "positions",
        bytemuck::cast_slice(positions.as_slice().unwrap()),
        U::STORAGE | U::COPY_DST,
    );
    let buffer = |label, usage| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: out_bytes,
            usage,
            mapped_at_creation: false,
        })
    };
    let out_buf = buffer("recorded out", U::STORAGE | U::COPY_SRC | U::COPY_DST);
    // The copies' source (filled once, so the bytes are real) and destinations.
    let src = init("copy source", &vec![0x5au8; out_bytes as usize], U::COPY_SRC);
    let dst = buffer("copy destination", U::COPY_DST);
    let staging = buffer("copy staging", U::COPY_DST | U::MAP_READ);

    // Both encodes are checked against the CPU once before anything is timed.
    let want =
        cpu::encode(&spec, Embeddings::F32(table.view()), ids.view(), positions.view(), &options)
            .map_err(text("cpu::encode"))?
            .into_f32()
            .ok_or("cpu::encode: not f32")?;
    let got = ctx
        .encode_async(&spec, &uploaded, ids.view(), positions.view(), &options)
        .await
        .map_err(text("encode_async"))?
        .into_f32()
        .ok_or("encode_async: not f32")?;
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    if !same(got.as_slice().unwrap(), want.as_slice().unwrap()) {
        return Err("encode_async differs from cpu::encode".into());
    }
    let mut encoder = device.create_command_encoder(&Default::default());
    pass.record(&mut encoder, ids_buf.slice(..), pos_buf.slice(..), out_buf.slice(..))
        .map_err(text("EncodePass::record"))?;
    queue.submit([encoder.finish()]);
    let recorded = ctx.read_buffer_async(&out_buf).await.map_err(text("read_buffer_async"))?;
    if !same(&bytemuck::pod_collect_to_vec::<u8, f32>(&recorded), want.as_slice().unwrap()) {
        return Err("the recorded encode differs from cpu::encode".into());
    }

    let mut times: [Vec<f64>; 4] = Default::default();
    for run in 0..WARMUP + RUNS {
        let mut timed = [0.0; 4];

        // 1. encode_async: ids and positions from the host, the result into a host array.
        let t = now();
        let encoded = ctx
            .encode_async(&spec, &uploaded, ids.view(), positions.view(), &options)
            .await
            .map_err(text("encode_async"))?;
        timed[0] = now() - t;
        drop(encoded);

        // 2. Its baseline: the same number of bytes copied to a mappable buffer, mapped and
        // copied out into host memory (a plain readback).
        let t = now();
        let mut encoder = device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&src, 0, &staging, 0, out_bytes);
        queue.submit([encoder.finish()]);
        let (done, wait) = callback();
        staging.slice(..).map_async(wgpu::MapMode::Read, done);
        wait.await.map_err(text("map_async"))?;
        let host: Vec<f32> = bytemuck::pod_collect_to_vec(
            &staging.slice(..).get_mapped_range().map_err(text("map"))?,
        );
        staging.unmap();
        timed[1] = now() - t;
        drop(host);

        // 3. The recorded encode: recorded, submitted, awaited; the output stays on the device.
        let t = now();
        let mut encoder = device.create_command_encoder(&Default::default());
        pass.record(&mut encoder, ids_buf.slice(..), pos_buf.slice(..), out_buf.slice(..))
            .map_err(text("EncodePass::record"))?;
        queue.submit([encoder.finish()]);
        work_done(queue).await;
        timed[2] = now() - t;

        // 4. Its baseline: copy_buffer_to_buffer of the output's bytes, submitted, awaited.
        let t = now();
        let mut encoder = device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&src, 0, &dst, 0, out_bytes);
        queue.submit([encoder.finish()]);
        work_done(queue).await;
        timed[3] = now() - t;

        if run >= WARMUP {
            for (all, t) in times.iter_mut().zip(timed) {
                all.push(t);
            }
        }
    }
    let [host, readback, recorded, copy] = times.map(median);
    let mb = out_bytes as f64 / 1e6;
    let mut out = String::new();
    out += &format!(
        "Fused encode, batch {batch} x len {len} x dim {dim}, f32 table of {vocab} rows, \
         positions 0..{len}, output {mb:.2} MB. Wall clock (performance.now()), median of \
         {RUNS} runs after {WARMUP} warm-up runs, each form interleaved with its baseline.\n\n"
    );
    out += &format!(
        "encode_async (host arrays in, host array out)   {host:>9.3} ms\n\
         plain readback of {mb:.2} MB (copy, map, copy out) {readback:>9.3} ms   ratio {:.2}\n\
         recorded EncodePass (record, submit, await)     {recorded:>9.3} ms\n\
         copy_buffer_to_buffer of {mb:.2} MB (submit, await) {copy:>9.3} ms   ratio {:.2}\n",
        host / readback,
        recorded / copy,
    );
    out += "\nperformance.now() is coarsened by the browser (to 0.1 ms without cross-origin \
            isolation), so times under a millisecond are rough.\n";
    let summary = json!({
        "adapter": adapter_line(&ctx),
        "shape": [batch, len, dim],
        "vocab": vocab,
        "runs": RUNS,
        "encode_async_ms": host,
        "readback_ms": readback,
        "encode_async_ratio": host / readback,
        "recorded_ms": recorded,
        "copy_ms": copy,
        "recorded_ratio": recorded / copy,
    });
    Ok(json!({ "text": out, "summary": summary }).to_string())
}

/// Waits until the device has finished the work submitted so far.
async fn work_done(queue: &wgpu::Queue) {
    let (done, wait) = callback();
    queue.on_submitted_work_done(move || done(()));
    wait.await;
}

struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

/// A future of the value a wgpu callback is given.
struct Callback<T>(Arc<Mutex<Slot<T>>>);

/// A callback for wgpu and the future of its argument.
fn callback<T: Send + 'static>() -> (impl FnOnce(T) + Send + 'static, Callback<T>) {
    let slot = Arc::new(Mutex::new(Slot { value: None, waker: None }));
    let theirs = Arc::clone(&slot);
    let call = move |value| {
        let waker = {
            let mut slot = theirs.lock().unwrap_or_else(PoisonError::into_inner);
            slot.value = Some(value);
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    };
    (call, Callback(slot))
}

impl<T> Future for Callback<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<T> {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match slot.value.take() {
            Some(value) => Poll::Ready(value),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
