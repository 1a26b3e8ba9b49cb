//! Fused encode, CPU vs GPU, at the README's default size (B = 8, L = 1024, D = 1024,
//! V = 32000, f32), and with a chunked bf16 table: 32768 x 4096 (256 MiB, a Mistral-sized
//! vocabulary) held in four 64 MiB chunks, bf16 out, at a decode step (8 x 1) and a
//! prefill (1 x 2048). Throughput counts ids read, embedding rows gathered and output
//! written. The GPU result stays on the device, so the figure is the encode, not the
//! readback; the table is uploaded once, outside the timing. PE rows are cached after the
//! first call on both paths (warm), except in `cpu-one-off`, the one-off `cpu::encode`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use half::bf16;
use ndarray::{Array2, Array3};
use posenc::encode::{Dtype, Embeddings, EncodeOptions};
use posenc::{PeSpec, cpu, gpu, positions};

fn bench_encode(c: &mut Criterion) {
    let (batch, len, dim, vocab) = (8usize, 1024usize, 1024usize, 32000usize);
    let spec = PeSpec::new(dim as u32).unwrap();
    let table =
        Array2::from_shape_fn((vocab, dim), |(i, j)| ((i * 31 + j * 7) % 1000) as f32 * 1e-3);
    let ids =
        Array2::from_shape_fn((batch, len), |(b, t)| ((b * 7919 + t * 104_729) % vocab) as u32);
    let pos = positions::contiguous_batch(batch, len).unwrap();
    let options = EncodeOptions::default();
    let tokens = (batch * len) as u64;
    let bytes = tokens * 4 + 2 * tokens * dim as u64 * 4;

    let mut group = c.benchmark_group("encode");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes));
    let encoder = cpu::Encoder::new(spec.clone());
    let mut out = Array3::<f32>::zeros((batch, len, dim));
    group.bench_function("cpu/8x1024x1024", |b| {
        b.iter(|| {
            encoder
                .encode_into(
                    Embeddings::F32(table.view()),
                    ids.view(),
                    pos.view(),
                    &options,
                    out.view_mut(),
                )
                .unwrap()
        })
    });
    match gpu::Options::from_env().and_then(|o| gpu::Context::new(&o)) {
        Ok(ctx) => {
            let uploaded = ctx.upload_table(Embeddings::F32(table.view())).unwrap();
            group.bench_function("gpu/8x1024x1024", |b| {
                b.iter(|| {
                    black_box(
                        ctx.encode_to_buffer(&spec, &uploaded, ids.view(), pos.view(), &options)
                            .unwrap(),
                    )
                })
            });
        }
        Err(e) => eprintln!("encode bench: GPU skipped, no adapter: {e}"),
    }
    group.finish();
}

/// The binding cap that splits the 256 MiB bf16 table into four chunks.
const CHUNK_BYTES: u64 = 64 << 20;

fn bench_encode_bf16_chunked(c: &mut Criterion) {
    let (vocab, dim) = (32768usize, 4096usize);
    let spec = PeSpec::new(dim as u32).unwrap();
    let table = Array2::from_shape_fn((vocab, dim), |(i, j)| {
        bf16::from_f32(((i * 31 + j * 7) % 1000) as f32 * 1e-3 - 0.5)
    });
    let options = EncodeOptions { out_dtype: Dtype::Bf16, ..EncodeOptions::default() };
    let gpu = match gpu::Options::from_env().and_then(|o| gpu::Context::new(&o)) {
        Ok(ctx) => {
            let ctx = ctx.with_max_binding_size(CHUNK_BYTES);
            let uploaded = ctx.upload_table(Embeddings::Bf16(table.view())).unwrap();
            assert_eq!(uploaded.n_chunks(), 4, "the table is to be chunked");
            Some((ctx, uploaded))
        }
        Err(e) => {
            eprintln!("encode bench: GPU skipped, no adapter: {e}");
            None
        }
    };
    let encoder = cpu::Encoder::new(spec.clone());

    let mut group = c.benchmark_group("encode_bf16_chunked");
    group.sample_size(10);
    for (name, batch, len) in
        [("decode/8x1x4096", 8usize, 1usize), ("prefill/1x2048x4096", 1, 2048)]
    {
        let ids =
            Array2::from_shape_fn((batch, len), |(b, t)| ((b * 7919 + t * 104_729) % vocab) as u32);
        let pos = positions::contiguous_batch(batch, len).unwrap();
        let values = (batch * len * dim) as u64;
        group.throughput(Throughput::Bytes((batch * len) as u64 * 4 + 2 * values * 2));
        group.bench_function(format!("cpu/{name}"), |b| {
            b.iter(|| {
                black_box(
                    encoder
                        .encode(Embeddings::Bf16(table.view()), ids.view(), pos.view(), &options)
                        .unwrap(),
                )
            })
        });
        // One call that keeps nothing (what `posenc encode` and Python's `encode` run):
        // its PE rows computed within the call. A decode step's sequences sit at
        // positions near 500, a prefill starts at 0.
        let once_pos = if len == 1 {
            Array2::from_shape_fn((batch, 1), |(b, _)| 500 + b as u32)
        } else {
            pos.clone()
        };
        group.bench_function(format!("cpu-one-off/{name}"), |b| {
            b.iter(|| {
                black_box(
                    cpu::encode(
                        &spec,
                        Embeddings::Bf16(table.view()),
                        ids.view(),
                        once_pos.view(),
                        &options,
                    )
                    .unwrap(),
                )
            })
        });
        if let Some((ctx, uploaded)) = &gpu {
            let out = ctx.device().create_buffer(&wgpu::BufferDescriptor {
                label: Some("posenc.bench.encode.out"),
                size: (values * 2).next_multiple_of(4),
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            group.bench_function(format!("gpu/{name}"), |b| {
                b.iter(|| {
                    ctx.encode_into_buffer(&spec, uploaded, ids.view(), pos.view(), &options, &out)
                        .unwrap();
                    // The call may return before the device is done; the figure is the
                    // finished encode.
                    ctx.device().poll(wgpu::PollType::wait_indefinitely()).unwrap();
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_encode, bench_encode_bf16_chunked);
criterion_main!(benches);
