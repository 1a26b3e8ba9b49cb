//! Table generation, CPU vs GPU. Throughput counts bytes read (positions) plus written
//! (the f32 table). The GPU figure includes upload and readback, as `Context::table` does;
//! `posenc bench` separates device time from transfers.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use posenc::{PeSpec, cpu, gpu};

fn bench_table(c: &mut Criterion) {
    let ctx = gpu::Options::from_env()
        .and_then(|o| gpu::Context::new(&o))
        .map_err(|e| eprintln!("table bench: GPU skipped, no adapter: {e}"))
        .ok();
    let mut group = c.benchmark_group("table");
    group.sample_size(10);
    for (n, d) in [(1024u32, 1024u32), (8192, 512)] {
        let spec = PeSpec::new(d).unwrap();
        let positions: Vec<u32> = (0..n).collect();
        let bytes = u64::from(n) * 4 + u64::from(n) * u64::from(d) * 4;
        group.throughput(Throughput::Bytes(bytes));
        let label = format!("{n}x{d}");
        group.bench_with_input(BenchmarkId::new("cpu", &label), &positions, |b, p| {
            b.iter(|| black_box(cpu::table(&spec, p)))
        });
        if let Some(ctx) = &ctx {
            group.bench_with_input(BenchmarkId::new("gpu", &label), &positions, |b, p| {
                b.iter(|| black_box(ctx.table(&spec, p).unwrap()))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_table);
criterion_main!(benches);
