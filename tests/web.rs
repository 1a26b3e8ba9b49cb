//! posenc in the browser: the async API on wgpu's WebGPU backend, in headless Chromium
//! (`cargo test --target wasm32-unknown-unknown --no-default-features --test web`; the
//! runner and the browser's flags are in `.cargo/config.toml`, see docs/browser.md). Natively
//! the same checks run on whatever adapter wgpu picks, each future driven by pollster, so
//! the async API is tested on every platform.
//!
//! Every result is compared with the CPU path's, bit for bit: the half-precision
//! conversions, the sinusoid table, the fused encode, the RoPE cos/sin cache, the RoPE
//! rotations (whose products the kernels round before a sum takes them, so no backend
//! contracts them) and ALiBi. Positions include the neighbourhoods of 2^16, 2^24, 2^31 and
//! 2^32 - 1, where a builtin `sin(p * w)` has no accuracy left.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[allow(dead_code)]
#[path = "it/support/rope.rs"]
mod rope_support;

#[path = "it/support/random.rs"]
mod random;

#[path = "it/support/convert_probe.rs"]
mod convert_probe;
use random::{Rng, hard_positions};

use half::bf16;
use ndarray::{Array2, Array4};
use posenc::alibi::{AlibiSpec, bias_cpu};
use posenc::encode::{Dtype, Embeddings, EncodeOptions};
use posenc::gpu::{Context, EncodePassDescriptor, Options, Positions, RopePassDescriptor};
use posenc::rope::{Layout, Pairing, RopeSpec};
use posenc::{Error, PeSpec, cpu, positions};

/// Each check as a browser test (wasm32) and as a native test driven by pollster.
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        #[cfg(target_arch = "wasm32")]
        mod browser {
            $(
                #[wasm_bindgen_test::wasm_bindgen_test]
                async fn $name() {
                    super::$name().await
                }
            )*
        }
        #[cfg(not(target_arch = "wasm32"))]
        mod native {
            $(
                #[test]
                fn $name() {
                    pollster::block_on(super::$name())
                }
            )*
        }
    };
}

both!(
    half_conversions_have_the_cpu_bits,
    sinusoid_table_has_the_cpu_bits,
    fused_encode_has_the_cpu_bits,
    rope_has_the_cpu_bits,
    multimodal_rope_has_the_cpu_bits,
    alibi_has_the_cpu_bits,
    recorded_decode_step_on_the_callers_device,
    blocking_calls_are_refused_on_the_web,
    dropped_and_overlapping_calls_leave_the_context_working,
    a_pages_own_error_scopes_interleave_with_calls_in_flight,
    host_results_past_the_address_space_are_errors,
    adapters_are_listed_and_large_readbacks_come_back_whole,
);

/// The context the checks run on, or `None` (the test then passes as skipped) where there
/// is no adapter natively and CI did not ask for one. In the browser an adapter is required.
async fn context() -> Option<Context> {
    match Context::open(&Options::default()).await {
        Ok(gpu) => Some(gpu),
        Err(e) if cfg!(not(target_arch = "wasm32")) && std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED: no GPU adapter ({e})");
            None
        }
        Err(e) => panic!("no GPU adapter: {e}"),
    }
}

fn same_bits(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "{what}: element {i}: {g:e} against the CPU's {w:e}");
    }
}

/// The kernels' f16 and bf16 conversions, every half and f32 values around every tie
/// (`it/support/convert_probe.rs`), through the browser's own shader compiler.
async fn half_conversions_have_the_cpu_bits() {
    let Some(gpu) = context().await else { return };
    for build in convert_probe::builds(&gpu) {
        for (entry, twin, widens) in convert_probe::CONVERSIONS {
            let (input, out_words) = convert_probe::inputs(widens);
            let output = convert_probe::submit(&gpu, entry, build, &input, out_words);
            let got = gpu.read_buffer_async(&output).await.unwrap();
            convert_probe::check(entry, build, twin, widens, &input, &got);
        }
    }
}

async fn sinusoid_table_has_the_cpu_bits() {
    let Some(gpu) = context().await else { return };
    let positions = hard_positions(&mut Rng::new(1), 200);
    for spec in [PeSpec::new(64).unwrap(), PeSpec::new(6).unwrap(), PeSpec::new(768).unwrap()] {
        let want = cpu::table(&spec, &positions);
        let got = gpu.table_async(&spec, &positions).await.unwrap();
        same_bits(
            &format!("table dim {}", spec.dim()),
            got.as_slice().unwrap(),
            want.as_slice().unwrap(),
        );
    }
    // Chunked: a binding of 1 KiB holds one row of 256 floats at a time.
    let spec = PeSpec::new(256).unwrap();
    let small = gpu.with_max_binding_size(1024);
    let got = small.table_async(&spec, &positions).await.unwrap();
    same_bits(
        "chunked table",
        got.as_slice().unwrap(),
        cpu::table(&spec, &positions).as_slice().unwrap(),
    );
}

async fn fused_encode_has_the_cpu_bits() {
    let Some(gpu) = context().await else { return };
    let mut rng = Rng::new(2);
    let (vocab, dim, batch, len) = (500, 64, 3, 40);
    let table =
        Array2::from_shape_fn((vocab, dim), |_| rng.next_u32() as f32 / 2f32.powi(31) - 1.0);
    let table16 = table.mapv(bf16::from_f32);
    let ids = Array2::from_shape_fn((batch, len), |_| rng.below(vocab as u64) as u32);
    let pool = hard_positions(&mut rng, 16);
    let positions =
        Array2::from_shape_fn((batch, len), |_| pool[rng.below(pool.len() as u64) as usize]);
    let spec = PeSpec::new(dim as u32).unwrap();
    let tables =
        [("f32", Embeddings::F32(table.view())), ("bf16", Embeddings::Bf16(table16.view()))];
    for (name, rows) in tables {
        for out_dtype in [Dtype::F32, Dtype::Bf16] {
            for (chunked, ctx) in [(false, gpu.clone()), (true, gpu.with_max_binding_size(1024))] {
                let options = EncodeOptions { out_dtype, ..Default::default() };
                let uploaded = ctx.upload_table(rows).unwrap();
                let got = ctx
                    .encode_async(&spec, &uploaded, ids.view(), positions.view(), &options)
                    .await
                    .unwrap();
                let want =
                    cpu::encode(&spec, rows, ids.view(), positions.view(), &options).unwrap();
                assert_eq!(
                    got.bits(),
                    want.bits(),
                    "encode of a {name} table to {out_dtype:?} (chunked: {chunked})"
                );
            }
        }
    }
}

async fn rope_has_the_cpu_bits() {
    let Some(gpu) = context().await else { return };
    let llama3 = r#"{"model_type": "llama", "hidden_size": 512, "num_attention_heads": 4,
        "rope_theta": 500000.0, "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}"#;
    let specs = [
        ("neox 64", RopeSpec::new(64).unwrap()),
        ("gptj partial 32 of 48", RopeSpec::partial(48, 32).unwrap().with_pairing(Pairing::Gptj)),
        ("llama3 config", RopeSpec::from_hf_config(llama3, None).unwrap()),
    ];
    let mut rng = Rng::new(3);
    let pool = hard_positions(&mut rng, 8);
    for (name, spec) in specs {
        let flat: Vec<u32> = pool.clone();
        let got = gpu.rope_cache_async(&spec, &flat).await.unwrap();
        let want = cpu::rope_cache(&spec, &flat).unwrap();
        same_bits(
            &format!("{name}: cos"),
            got.cos.as_slice().unwrap(),
            want.cos.as_slice().unwrap(),
        );
        same_bits(
            &format!("{name}: sin"),
            got.sin.as_slice().unwrap(),
            want.sin.as_slice().unwrap(),
        );

        let (batch, len, heads) = (2, 5, 3);
        let dh = spec.head_dim() as usize;
        let x: Array4<f32> = rope_support::tensor([batch, len, heads, dh], 4);
        let positions =
            Array2::from_shape_fn((batch, len), |_| pool[rng.below(pool.len() as u64) as usize]);
        let got = gpu.rope_async(&spec, x.view(), positions.view(), Layout::Blhd).await.unwrap();
        let want = cpu::rope(&spec, x.view(), positions.view(), Layout::Blhd).unwrap();
        rope_support::assert_rope_same(
            name,
            positions.view(),
            Layout::Blhd,
            got.view(),
            want.view(),
        );
        // Into a caller's array, read back straight into it; and every other element of a
        // wider one, through a scratch array.
        let mut into = Array4::<f32>::zeros(x.raw_dim());
        let (p, blhd) = (positions.view(), Layout::Blhd);
        gpu.rope_into_async(&spec, x.view(), into.view_mut(), p, blhd).await.unwrap();
        same_bits(name, into.as_slice().unwrap(), want.as_slice().unwrap());
        let mut wide = Array4::<f32>::from_elem((batch, len, heads, 2 * dh), 7.0);
        let every_other = wide.slice_mut(ndarray::s![.., .., .., ..;2]);
        gpu.rope_into_async(&spec, x.view(), every_other, p, blhd).await.unwrap();
        assert_eq!(wide.slice(ndarray::s![.., .., .., ..;2]), want, "{name}: strided");
        assert!(wide.slice(ndarray::s![.., .., .., 1..;2]).iter().all(|v| *v == 7.0));
    }
}

/// A multimodal RoPE (Qwen2-VL's config, positions per axis) on host arrays and recorded
/// into the caller's encoder, with the CPU's bits.
async fn multimodal_rope_has_the_cpu_bits() {
    let Some(gpu) = context().await else { return };
    let qwen2_vl = r#"{"model_type": "qwen2_vl", "hidden_size": 256, "num_attention_heads": 2,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}"#;
    let (spec, mrope) = RopeSpec::from_hf_config_multimodal(qwen2_vl, None, None).unwrap();
    let mrope = mrope.unwrap();
    let mut rng = Rng::new(5);
    let pool = hard_positions(&mut rng, 8);
    let (batch, len, heads) = (2, 6, 2);
    let positions = ndarray::Array3::from_shape_fn((3, batch, len), |(a, b, l)| {
        if l < 4 { [1, 1 + (l / 2) as u32, 1 + (l % 2) as u32][a] + b as u32 } else { pool[l + b] }
    });
    let x: Array4<f32> = rope_support::tensor([batch, len, heads, 128], 8);
    let (p, blhd) = (positions.view(), Layout::Blhd);
    let want = cpu::rope_multimodal(&spec, &mrope, x.view(), p, blhd).unwrap();
    let got = gpu.rope_multimodal_async(&spec, &mrope, x.view(), p, blhd).await.unwrap();
    same_bits("multimodal rope", got.as_slice().unwrap(), want.as_slice().unwrap());
    // ERNIE 4.5 VL's alternating axes (gptj pairs) through the same compiler.
    let ernie = r#"{"model_type": "ernie4_5_vl_moe_text", "hidden_size": 256,
        "num_attention_heads": 2, "rope_parameters": {"rope_type": "default",
        "rope_theta": 500000.0, "mrope_section": [22, 22, 20]}}"#;
    let (e_spec, e_mrope) = RopeSpec::from_hf_config_multimodal(ernie, None, None).unwrap();
    let e_mrope = e_mrope.unwrap();
    let e_want = cpu::rope_multimodal(&e_spec, &e_mrope, x.view(), p, blhd).unwrap();
    let e_got = gpu.rope_multimodal_async(&e_spec, &e_mrope, x.view(), p, blhd).await.unwrap();
    same_bits("alternating axes", e_got.as_slice().unwrap(), e_want.as_slice().unwrap());

    let desc = RopePassDescriptor {
        shape: [batch, len, heads, 128],
        layout: blhd,
        dtype: Dtype::F32,
        positions: Positions::PerToken,
        k_heads: 0,
    };
    let pass = gpu.rope_pass_multimodal_async(&spec, &mrope, &desc).await.unwrap();
    let (device, queue) = (gpu.device(), gpu.queue());
    use wgpu::BufferUsages as U;
    let buffer = |label, contents: &[u8]| {
        let b = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: contents.len() as u64,
            usage: U::STORAGE | U::COPY_DST | U::COPY_SRC,
            mapped_at_creation: false,
        });
        queue.write_buffer(&b, 0, contents);
        b
    };
    let flat: Vec<u32> = positions.iter().copied().collect();
    let q_buf = buffer("q", bytemuck::cast_slice(x.as_slice().unwrap()));
    let p_buf = buffer("positions", bytemuck::cast_slice(&flat));
    let mut encoder = device.create_command_encoder(&Default::default());
    pass.record(&mut encoder, q_buf.slice(..), p_buf.slice(..)).unwrap();
    queue.submit([encoder.finish()]);
    let back = gpu.read_buffer_async(&q_buf).await.unwrap();
    let got: Vec<f32> = bytemuck::pod_collect_to_vec(&back);
    same_bits("recorded multimodal rope", &got, want.as_slice().unwrap());
}

async fn alibi_has_the_cpu_bits() {
    let Some(gpu) = context().await else { return };
    for (heads, len) in [(12, 64), (6, 33)] {
        let spec = AlibiSpec::new(heads, len).unwrap();
        let got = gpu.alibi_bias_async(&spec).await.unwrap();
        let want = bias_cpu(&spec).unwrap();
        same_bits(
            &format!("alibi {heads} heads"),
            got.as_slice().unwrap(),
            want.as_slice().unwrap(),
        );
    }
}

/// A decode step as an engine in the page records it: the test opens the device itself,
/// hands it to posenc, and records the fused encode, the RoPE of q and an ALiBi bias into
/// its own encoder, one submission, then reads its own buffers back.
async fn recorded_decode_step_on_the_callers_device() {
    let Some(_) = context().await else { return };
    let instance = wgpu::Instance::default();
    let adapter = instance.request_adapter(&Default::default()).await.unwrap();
    let (device, queue) = adapter
        .request_device(&wgpu::DeviceDescriptor {
            required_limits: adapter.limits(),
            ..Default::default()
        })
        .await
        .unwrap();
    let gpu =
        Context::from_device(adapter, device.clone(), queue.clone(), &Options::default()).unwrap();

    let mut rng = Rng::new(5);
    let (vocab, dim, batch, heads, dh) = (300, 128, 4, 2, 64);
    let table =
        Array2::from_shape_fn((vocab, dim), |_| rng.next_u32() as f32 / 2f32.powi(31) - 1.0);
    let uploaded = gpu.upload_table(Embeddings::F32(table.view())).unwrap();
    let spec = PeSpec::new(dim as u32).unwrap();
    let options = EncodeOptions::default();
    let desc = EncodePassDescriptor {
        batch,
        len: 1,
        positions: Positions::PerSequence,
        options,
        ..Default::default()
    };
    let encode = gpu.encode_pass_async(&spec, &uploaded, &desc).await.unwrap();
    let rope_spec = RopeSpec::new(dh as u32).unwrap();
    let rope_desc = RopePassDescriptor {
        shape: [batch, 1, heads, dh],
        layout: Layout::Blhd,
        dtype: Dtype::F32,
        positions: Positions::PerSequence,
        k_heads: 0,
    };
    let rope = gpu.rope_pass_async(&rope_spec, &rope_desc).await.unwrap();
    let alibi_spec = AlibiSpec::new(heads as u32, 24).unwrap();
    let alibi = gpu.alibi_pass_async(&alibi_spec).await.unwrap();

    let ids: Vec<u32> = (0..batch).map(|_| rng.below(vocab as u64) as u32).collect();
    let starts: Vec<u32> = vec![0, 4096, (1 << 31) - 1, u32::MAX];
    let q: Array4<f32> = rope_support::tensor([batch, 1, heads, dh], 6);
    use wgpu::BufferUsages as U;
    let buffer = |label, contents: &[u8], usage| {
        let b = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: contents.len() as u64,
            usage,
            mapped_at_creation: false,
        });
        queue.write_buffer(&b, 0, contents);
        b
    };
    let ids_buf = buffer("ids", bytemuck::cast_slice(&ids), U::STORAGE | U::COPY_DST);
    let starts_buf = buffer("starts", bytemuck::cast_slice(&starts), U::STORAGE | U::COPY_DST);
    let q_buf = buffer(
        "q",
        bytemuck::cast_slice(q.as_slice().unwrap()),
        U::STORAGE | U::COPY_DST | U::COPY_SRC,
    );
    let out_buf =
        buffer("out", &vec![0u8; batch * dim * 4], U::STORAGE | U::COPY_SRC | U::COPY_DST);
    let bias_buf = buffer(
        "bias",
        &vec![0u8; alibi.output_bytes() as usize],
        U::STORAGE | U::COPY_SRC | U::COPY_DST,
    );

    // On the web what the browser refuses in a record goes to the device's error handler,
    // the caller's: the caller's scope catches it here.
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let mut encoder = device.create_command_encoder(&Default::default());
    encode
        .record(&mut encoder, ids_buf.slice(..), starts_buf.slice(..), out_buf.slice(..))
        .unwrap();
    rope.record(&mut encoder, q_buf.slice(..), starts_buf.slice(..)).unwrap();
    alibi.record(&mut encoder, bias_buf.slice(..)).unwrap();
    queue.submit([encoder.finish()]);
    if let Some(e) = scope.pop().await {
        panic!("the recorded step: {e}");
    }

    let out = gpu.read_buffer_async(&out_buf).await.unwrap();
    let got: Vec<f32> = bytemuck::pod_collect_to_vec(&out);
    let id_rows = Array2::from_shape_vec((batch, 1), ids).unwrap();
    let position_rows = positions::from_offsets(&starts, 1).unwrap();
    let want = cpu::encode(
        &spec,
        Embeddings::F32(table.view()),
        id_rows.view(),
        position_rows.view(),
        &options,
    )
    .unwrap()
    .into_f32()
    .unwrap();
    same_bits("recorded encode", &got, want.as_slice().unwrap());
    let faults = encode.read_faults_async().await.unwrap();
    assert_eq!(faults.bad_ids + faults.bad_positions, 0, "{faults:?}");

    let bias = gpu.read_buffer_async(&bias_buf).await.unwrap();
    let want = bias_cpu(&alibi_spec).unwrap();
    same_bits(
        "recorded alibi",
        &bytemuck::pod_collect_to_vec::<u8, f32>(&bias),
        want.as_slice().unwrap(),
    );

    let rotated = gpu.read_buffer_async(&q_buf).await.unwrap();
    let rotated =
        Array4::from_shape_vec([batch, 1, heads, dh], bytemuck::pod_collect_to_vec(&rotated))
            .unwrap();
    let want = cpu::rope(&rope_spec, q.view(), position_rows.view(), Layout::Blhd).unwrap();
    let rows = position_rows.view();
    rope_support::assert_rope_same(
        "recorded rope",
        rows,
        Layout::Blhd,
        rotated.view(),
        want.view(),
    );
}

/// On the web the blocking calls refuse at once, naming the call to await instead; natively
/// they are the same calls as ever.
async fn blocking_calls_are_refused_on_the_web() {
    let Some(gpu) = context().await else { return };
    let spec = PeSpec::new(8).unwrap();
    let blocking = gpu.table(&spec, &[1, 2]);
    if cfg!(target_arch = "wasm32") {
        let err = blocking.unwrap_err();
        assert!(matches!(err, Error::Blocking { op: "table", instead: "table_async" }), "{err}");
        assert_eq!(err.kind(), posenc::ErrorKind::Usage);
        let table = gpu.upload_table(Embeddings::F32(ndarray::Array2::zeros((4, 8)).view()));
        let ids = Array2::<u32>::zeros((1, 2));
        let options = EncodeOptions::default();
        let err = gpu.encode(&spec, &table.unwrap(), ids.view(), ids.view(), &options).unwrap_err();
        assert!(matches!(err, Error::Blocking { op: "encode", instead: "encode_async" }), "{err}");
        let open = Context::new(&Options::default()).unwrap_err();
        assert!(open.to_string().contains("Context::open"), "{open}");
    } else {
        same_bits(
            "blocking table",
            blocking.unwrap().as_slice().unwrap(),
            cpu::table(&spec, &[1, 2]).as_slice().unwrap(),
        );
    }
}

/// Host results the caller's sizes make larger than a 32-bit target can address (2 GiB and
/// more) are `Error::Alloc` on the web, where `capacity overflow` panicked and aborted the
/// module (a stranger's probe, 2026-12-02): the RoPE cache of 2^22 positions at head dim
/// 128, on the GPU and the CPU, and a 4 GiB ALiBi bias. The context works on afterwards.
/// Natively such sizes are memory a machine may have, so only the web runs them.
async fn host_results_past_the_address_space_are_errors() {
    if cfg!(not(target_arch = "wasm32")) {
        return;
    }
    let Some(gpu) = context().await else { return };
    let spec = RopeSpec::new(128).unwrap();
    let positions = vec![u32::MAX; 1 << 22];
    let e = gpu.rope_cache_async(&spec, &positions).await.unwrap_err();
    assert!(matches!(e, Error::Alloc { .. }), "{e}");
    let e = cpu::rope_cache(&spec, &positions).unwrap_err();
    assert!(matches!(e, Error::Alloc { .. }), "{e}");
    let e = gpu.alibi_bias_async(&AlibiSpec::new(64, 4096).unwrap()).await.unwrap_err();
    assert!(matches!(e, Error::Alloc { .. }), "{e}");
    assert!(e.to_string().contains("ALiBi"), "{e}");
    let small = [0, 7, u32::MAX];
    let got = gpu.rope_cache_async(&spec, &small).await.unwrap();
    let want = cpu::rope_cache(&spec, &small).unwrap();
    same_bits(
        "rope cache after the refusals",
        got.cos.as_slice().unwrap(),
        want.cos.as_slice().unwrap(),
    );
}

/// `adapters_async` answers on the web, where the blocking `adapters` hung the page (round
/// twenty-one of the hostile probes, 2026-12-03; it is native only now); and results larger
/// than the web's readback pieces (16 MiB, each wgpu's copy of the mapped range, checked
/// before it is made: one copy of a whole result aborted a page short of memory) come back
/// whole, a table through the host-array readback and a buffer through `read_buffer_async`.
async fn adapters_are_listed_and_large_readbacks_come_back_whole() {
    let Some(gpu) = context().await else { return };
    assert!(!posenc::gpu::adapters_async().await.is_empty(), "an open context has an adapter");
    // 8192 x 640 f32: 20 MiB, a piece and a quarter.
    let spec = PeSpec::new(640).unwrap();
    let positions: Vec<u32> = (0..8192).map(|p| p * 977).collect();
    let got = gpu.table_async(&spec, &positions).await.unwrap();
    let want = cpu::table(&spec, &positions);
    same_bits("a 20 MiB table", got.as_slice().unwrap(), want.as_slice().unwrap());
    let words: Vec<u32> = (0..(5u32 << 20) + 3).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let bytes: &[u8] = bytemuck::cast_slice(&words);
    let buffer = gpu.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("test.large_read"),
        size: bytes.len() as u64,
        usage: wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: true,
    });
    buffer.slice(..).get_mapped_range_mut().unwrap().copy_from_slice(bytes);
    buffer.unmap();
    let back = gpu.read_buffer_async(&buffer).await.unwrap();
    assert!(back == bytes, "a 20 MiB buffer read back");
}

/// Polls `future` once, as a page does that starts a call and then drops it (a `select!`
/// whose other branch won, a closed tab's task).
fn poll_once<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
    future.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
}

/// A call dropped with its readback in flight leaves no mapped buffer in the pool; two
/// calls in flight at once on a budgeted context both finish (on the web the budget's lock
/// used to be taken twice by the page's one thread, a trap); a table too large for any
/// array is refused before anything is allocated.
async fn dropped_and_overlapping_calls_leave_the_context_working() {
    let Some(gpu) = context().await else { return };
    let spec = PeSpec::new(64).unwrap();
    let positions = hard_positions(&mut Rng::new(7), 5000);
    let want = cpu::table(&spec, &positions);
    {
        let mut dropped = std::pin::pin!(gpu.table_async(&spec, &positions));
        let _ = poll_once(dropped.as_mut());
    }
    gpu.wait_idle_async().await.unwrap();
    for round in 0..2 {
        let got = gpu.table_async(&spec, &positions).await.unwrap();
        same_bits(
            &format!("table after a dropped call, round {round}"),
            got.as_slice().unwrap(),
            want.as_slice().unwrap(),
        );
    }

    let budgeted = gpu.with_memory_budget(64 << 20);
    let mut a = std::pin::pin!(budgeted.table_async(&spec, &positions));
    let mut b = std::pin::pin!(budgeted.table_async(&spec, &positions));
    // Natively the first poll finishes a call; on the web both are left in flight.
    let (first, second) = (poll_once(a.as_mut()), poll_once(b.as_mut()));
    let first = match first {
        std::task::Poll::Ready(done) => done,
        std::task::Poll::Pending => a.as_mut().await,
    };
    let second = match second {
        std::task::Poll::Ready(done) => done,
        std::task::Poll::Pending => b.as_mut().await,
    };
    for (name, got) in [("first", first), ("second", second)] {
        let got = got.unwrap();
        let what = format!("{name} of two budgeted tables in flight");
        same_bits(&what, got.as_slice().unwrap(), want.as_slice().unwrap());
    }

    let wide = PeSpec::new(65536).unwrap();
    let err = gpu.table_async(&wide, &vec![7u32; (1 << 15) + 1]).await.unwrap_err();
    assert!(matches!(err, Error::TooLarge { op: "table", .. }), "{err}");
}

/// A page that wraps its own step in an error scope (docs/browser.md) while a posenc call
/// is in flight: a scope pushed while posenc waits and popped after it finished, and one
/// pushed before posenc's call began and popped while it waits. posenc's scopes are popped
/// across its waits for the GPU, so neither is popped out of order (wgpu panicked: "error
/// scopes must be popped in reverse order"), and what goes wrong inside the page's scope
/// is the page's.
async fn a_pages_own_error_scopes_interleave_with_calls_in_flight() {
    let Some(gpu) = context().await else { return };
    let device = gpu.device().clone();
    let spec = PeSpec::new(64).unwrap();
    let positions = hard_positions(&mut Rng::new(11), 3000);
    let want = cpu::table(&spec, &positions);

    let mut call = std::pin::pin!(gpu.table_async(&spec, &positions));
    let first = poll_once(call.as_mut());
    let page = device.push_error_scope(wgpu::ErrorFilter::Validation);
    // The page's step goes wrong inside its own scope, while posenc's call is in flight.
    let bad = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("the page's own mistake"),
        size: 6,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let got = finish(call.as_mut(), first).await.expect("posenc's call finishes, its scopes clean");
    same_bits("a table around the page's scope", got.as_slice().unwrap(), want.as_slice().unwrap());
    assert!(page.pop().await.is_some(), "the page's scope has the page's error");
    drop(bad);

    let page = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let mut call = std::pin::pin!(gpu.table_async(&spec, &positions));
    let first = poll_once(call.as_mut());
    assert!(page.pop().await.is_none(), "nothing of posenc's in the page's scope");
    let got = finish(call.as_mut(), first).await.unwrap();
    same_bits("a table under the page's scope", got.as_slice().unwrap(), want.as_slice().unwrap());

    // posenc's own errors stay posenc's: one it finds itself (a buffer without COPY_SRC,
    // refused before any command), and one wgpu reports inside posenc's scopes (a buffer
    // destroyed before the read's copy).
    let page = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let no_copy = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("a buffer posenc cannot copy from"),
        size: 64,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let err = gpu.read_buffer_async(&no_copy).await.unwrap_err();
    assert!(matches!(err, Error::InvalidParameter { field: "buffer", .. }), "{err}");
    let destroyed = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("a buffer destroyed before posenc reads it"),
        size: 64,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    destroyed.destroy();
    let err = gpu.read_buffer_async(&destroyed).await.unwrap_err();
    assert!(matches!(err, Error::Gpu { .. }), "{err}");
    assert!(page.pop().await.is_none(), "posenc's errors stayed out of the page's scope");
}

/// A call polled once ([`poll_once`]) and then driven to its end.
async fn finish<F: std::future::Future>(
    call: std::pin::Pin<&mut F>,
    first: std::task::Poll<F::Output>,
) -> F::Output {
    match first {
        std::task::Poll::Ready(done) => done,
        std::task::Poll::Pending => call.await,
    }
}
