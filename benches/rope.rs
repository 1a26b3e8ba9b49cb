//! RoPE of one query tensor, CPU vs GPU. Throughput counts bytes read plus written (the
//! tensor twice; positions are negligible). `gpu` includes upload and readback, as
//! `Context::rope` does; `gpu_in_place` rotates a tensor already in a device buffer.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use half::f16;
use ndarray::Array4;
use posenc::rope::{Dtype, Layout, RopeSpec, Scaling};
use posenc::{cpu, gpu, positions};

fn bench_rope(c: &mut Criterion) {
    let ctx = gpu::Options::from_env()
        .and_then(|o| gpu::Context::new(&o))
        .map_err(|e| eprintln!("rope bench: GPU skipped, no adapter: {e}"))
        .ok();
    let mut group = c.benchmark_group("rope");
    group.sample_size(10);
    let scaling = Scaling::from_hf_json(
        r#"{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}"#,
    )
    .unwrap();
    let spec =
        RopeSpec::new(128).unwrap().with_base(500000.0).unwrap().with_scaling(scaling).unwrap();
    // Prefill of 2 x 1024 tokens, 32 heads of 128 (Llama 3 8B's queries), f16.
    let (b, l, h, d) = (2usize, 1024usize, 32usize, 128usize);
    let x = Array4::from_shape_fn((b, l, h, d), |(_, t, k, j)| {
        f16::from_f32(((t * 31 + k * 7 + j) % 97) as f32 / 48.0 - 1.0)
    });
    let p = positions::contiguous_batch(b, l).unwrap();
    let bytes = (x.len() * 2 * 2) as u64;
    group.throughput(Throughput::Bytes(bytes));
    let label = format!("{b}x{l}x{h}x{d}_f16");
    group.bench_function(BenchmarkId::new("cpu", &label), |bench| {
        bench.iter(|| black_box(cpu::rope(&spec, x.view(), p.view(), Layout::Blhd).unwrap()))
    });
    if let Some(ctx) = &ctx {
        group.bench_function(BenchmarkId::new("gpu", &label), |bench| {
            bench.iter(|| black_box(ctx.rope(&spec, x.view(), p.view(), Layout::Blhd).unwrap()))
        });
        let buffer = ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("bench.rope.tensor"),
            size: (x.len() * 2) as u64,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        ctx.queue().write_buffer(&buffer, 0, bytemuck::cast_slice(x.as_slice().unwrap()));
        let shape = [b, l, h, d];
        group.bench_function(BenchmarkId::new("gpu_in_place", &label), |bench| {
            bench.iter(|| {
                ctx.rope_in_place(&spec, &buffer, shape, Layout::Blhd, Dtype::F16, p.view())
                    .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_rope);
criterion_main!(benches);
