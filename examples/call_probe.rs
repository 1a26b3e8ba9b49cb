//! Where the host side of a small GPU call goes on this machine: each wgpu step a
//! decode-sized posenc call takes, timed one by one with wgpu alone. A call of posenc's
//! host-array encode uploads its parameters and token records (two `Queue::write_buffer`),
//! makes a bind group of five bindings, records one compute pass with one dispatch,
//! finishes the encoder, submits it and waits. This probe does the same with a trivial
//! kernel of the same bindings, and also with a bind group made once and kept, so the
//! cost of each step (and what a bind-group cache would save) is visible on a real GPU,
//! where the host part of a one-token call was 30 - 60 us of 110 - 165 (NVIDIA H100,
//! 2026-11-27). Beside them, posenc's own call of the same size (`encode_into_buffer` of
//! that many tokens at Llama-3-8B's width, bf16, then the wait), interleaved with the two
//! forms: its `submit_us` is the whole host part, to set against the sum of the steps on
//! a GPU (a software adapter may run a kernel inside `submit`, and posenc's moves far more
//! than the probe's, so there the difference is not posenc's own share).
//! One JSON line per form on stdout (the adapter's name on stderr), medians in
//! microseconds.
//!
//! ```text
//! cargo run --release --example call_probe [tokens]      # default: 8 tokens
//! ```
use std::time::Instant;

use ndarray::Array2;
use posenc::PeSpec;
use posenc::encode::{Embeddings, EncodeOptions};
use posenc::gpu;

const KERNEL: &str = r"
struct Params { n: u32, a: u32, b: u32, c: u32 }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> tokens: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> pe: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> table: array<vec4<f32>>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    let t = g.y;
    if t >= params.n { return; }
    let r = tokens[t];
    out[r.y * 64u + g.x] = table[r.x * 64u + g.x] + pe[g.x];
}
";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The median microseconds of each step of one form of the call.
#[derive(Default)]
struct Steps {
    upload: Vec<f64>,
    bind_group: Vec<f64>,
    record: Vec<f64>,
    finish: Vec<f64>,
    submit: Vec<f64>,
    wait: Vec<f64>,
    drop: Vec<f64>,
    whole: Vec<f64>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tokens: u32 = std::env::args().nth(1).map_or(Ok(8), |a| a.parse())?;
    if !(1..=4096).contains(&tokens) {
        return Err(format!("tokens: {tokens} (allowed: 1 to 4096)").into());
    }
    let ctx = gpu::Context::new(&gpu::Options::from_env()?)?;
    let (device, queue) = (ctx.device(), ctx.queue());
    let info = ctx.adapter_info();
    eprintln!("{} ({:?}), {tokens} tokens", info.name, info.backend);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("probe.kernel"),
        source: wgpu::ShaderSource::Wgsl(KERNEL.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("probe.pipeline"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let layout = pipeline.get_bind_group_layout(0);
    use wgpu::BufferUsages as U;
    let buffer = |label, size, usage| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: false,
        })
    };
    let params = buffer("probe.params", 16, U::UNIFORM | U::COPY_DST);
    let records = buffer("probe.tokens", 8 * u64::from(tokens), U::STORAGE | U::COPY_DST);
    let pe = buffer("probe.pe", 1024, U::STORAGE);
    let out = buffer("probe.out", 1024 * u64::from(tokens), U::STORAGE);
    let table = buffer("probe.table", 1024 * u64::from(tokens), U::STORAGE);
    let make_group = || {
        fn entry(binding: u32, buffer: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
            wgpu::BindGroupEntry { binding, resource: buffer.as_entire_binding() }
        }
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("probe.bind_group"),
            layout: &layout,
            entries: &[
                entry(0, &params),
                entry(1, &records),
                entry(2, &pe),
                entry(3, &out),
                entry(4, &table),
            ],
        })
    };
    let kept = make_group();
    let words: Vec<u32> = (0..tokens).flat_map(|t| [t, t]).collect();
    let spin_wait = ctx.spin_wait();
    const REPS: usize = 400;
    let mut forms = [("fresh_bind_group", Steps::default()), ("kept_bind_group", Steps::default())];
    let us = |t: Instant| t.elapsed().as_secs_f64() * 1e6;
    // posenc's call: a 1000-row bf16 table of width 4096, one position per sequence.
    let dim = 4096;
    let spec = PeSpec::new(dim as u32)?;
    let rows = Array2::from_shape_fn((1000, dim), |(r, c)| {
        half::bf16::from_f32(((r * 31 + c * 7) % 97) as f32 / 97.0)
    });
    let gpu_table = ctx.upload_table(Embeddings::Bf16(rows.view()))?;
    let ids = Array2::from_shape_fn((tokens as usize, 1), |(b, _)| (b * 37 % 1000) as u32);
    let pos = Array2::from_elem((tokens as usize, 1), 517u32);
    let options = EncodeOptions { out_dtype: posenc::dtype::Dtype::Bf16, ..Default::default() };
    let posenc_out = buffer(
        "probe.posenc.out",
        (tokens as usize * dim * 2) as u64,
        U::STORAGE | U::COPY_SRC | U::COPY_DST,
    );
    let (mut posenc_submit, mut posenc_wait, mut posenc_whole) = (vec![], vec![], vec![]);
    for rep in 0..REPS + 20 {
        let start = Instant::now();
        ctx.encode_into_buffer(&spec, &gpu_table, ids.view(), pos.view(), &options, &posenc_out)?;
        let submit = us(start);
        let t = Instant::now();
        ctx.wait_idle()?;
        if rep >= 20 {
            posenc_submit.push(submit);
            posenc_wait.push(us(t));
            posenc_whole.push(us(start));
        }
        for (fresh, steps) in forms.iter_mut().map(|(name, s)| (*name == "fresh_bind_group", s)) {
            let start = Instant::now();
            let t = Instant::now();
            queue.write_buffer(&params, 0, bytemuck::cast_slice(&[tokens, 0, 0, 0]));
            queue.write_buffer(&records, 0, bytemuck::cast_slice(&words));
            let upload = us(t);
            let t = Instant::now();
            let made = fresh.then(make_group);
            let group = made.as_ref().unwrap_or(&kept);
            let bind_group = us(t);
            let t = Instant::now();
            let mut encoder = device.create_command_encoder(&Default::default());
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, group, &[]);
                pass.dispatch_workgroups(1, tokens, 1);
            }
            let record = us(t);
            let t = Instant::now();
            let commands = encoder.finish();
            let finish = us(t);
            let t = Instant::now();
            queue.submit([commands]);
            let submit = us(t);
            // Wait as posenc does: poll, yielding, for up to its budget, then block.
            let t = Instant::now();
            let (tx, rx) = std::sync::mpsc::channel();
            queue.on_submitted_work_done(move || {
                // The receiver outlives the wait; a failed send has no one to tell.
                let _ = tx.send(());
            });
            while rx.try_recv().is_err() {
                if t.elapsed() >= spin_wait {
                    device.poll(wgpu::PollType::wait_indefinitely())?;
                    break;
                }
                device.poll(wgpu::PollType::Poll)?;
                std::thread::yield_now();
            }
            let wait = us(t);
            let t = Instant::now();
            drop(made);
            let dropped = us(t);
            if rep >= 20 {
                steps.upload.push(upload);
                steps.bind_group.push(bind_group);
                steps.record.push(record);
                steps.finish.push(finish);
                steps.submit.push(submit);
                steps.wait.push(wait);
                steps.drop.push(dropped);
                steps.whole.push(us(start));
            }
        }
    }
    println!(
        "{{\"form\": \"posenc_encode_into_buffer\", \"tokens\": {tokens}, \"submit_us\": {:.1}, \
         \"wait_us\": {:.1}, \"whole_us\": {:.1}}}",
        median(posenc_submit),
        median(posenc_wait),
        median(posenc_whole),
    );
    for (name, s) in forms {
        println!(
            "{{\"form\": \"{name}\", \"tokens\": {tokens}, \"upload_us\": {:.1}, \
             \"bind_group_us\": {:.1}, \"record_us\": {:.1}, \"finish_us\": {:.1}, \
             \"submit_us\": {:.1}, \"wait_us\": {:.1}, \"drop_us\": {:.1}, \"whole_us\": {:.1}}}",
            median(s.upload),
            median(s.bind_group),
            median(s.record),
            median(s.finish),
            median(s.submit),
            median(s.wait),
            median(s.drop),
            median(s.whole),
        );
    }
    Ok(())
}
