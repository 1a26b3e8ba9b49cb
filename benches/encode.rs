//! Fused encode, CPU vs GPU, at the README's default size (B = 8, L = 1024, D = 1024,
//! V = 32000, f32). Throughput counts ids read, embedding rows gathered and output written.
//! The GPU result stays on the device (`encode_to_buffer`), so the figure is the encode,
//! not the readback; the table is uploaded once, outside the timing. PE rows are cached
//! after the first call on both paths (warm).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ndarray::{Array2, Array3};
use posenc::encode::{Embeddings, EncodeOptions};
use posenc::{PeSpec, cpu, gpu, positions};

fn bench_encode(c: &mut Criterion) {
    let (batch, len, dim, vocab) = (8usize, 1024usize, 1024usize, 32000usize);
    let spec = PeSpec::new(dim as u32).unwrap();
    let table =
        Array2::from_shape_fn((vocab, dim), |(i, j)| ((i * 31 + j * 7) % 1000) as f32 * 1e-3);
    let ids =
        Array2::from_shape_fn((batch, len), |(b, t)| ((b * 7919 + t * 104_729) % vocab) as u32);
    let pos = positions::contiguous_batch(batch, len);
    let options = EncodeOptions::default();
    let tokens = (batch * len) as u64;
    let bytes = tokens * 4 + 2 * tokens * dim as u64 * 4;

    let mut group = c.benchmark_group("encode");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes));
    let encoder = cpu::Encoder::new(spec);
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
    match gpu::Context::new() {
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

criterion_group!(benches, bench_encode);
criterion_main!(benches);
