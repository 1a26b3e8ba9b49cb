//! The Rust side of docs/python.md's speed figures: the same library calls the Python
//! functions make, timed the same way (`python/bench/timing.py` times the Python side).
//!
//! `cargo run --release --example timing -- [cpu|gpu]` from `python/`: median of 15 calls,
//! after 3 warm-up calls, of `rope_cache` for 131072 positions at head dim 128, and of the
//! encode at `posenc bench`'s default shape (8 x 1024 ids, V = 32000, D = 1024, f32).

use std::time::Instant;

use ndarray::Array2;
use posenc::encode::{Embeddings, EncodeOptions};
use posenc::rope::RopeSpec;
use posenc::{PeSpec, cpu, gpu, positions};

fn median(mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    let mut times: Vec<f64> = (0..15)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() -> posenc::Result<()> {
    let device = std::env::args().nth(1).unwrap_or_else(|| "cpu".into());
    let ctx =
        if device == "gpu" { Some(gpu::Context::new(&gpu::Options::from_env()?)?) } else { None };

    let spec = RopeSpec::new(128)?;
    let ms = median(|| {
        let p = positions::contiguous(131072).expect("a u32 range");
        let cache = match &ctx {
            None => cpu::rope_cache(&spec, &p),
            Some(ctx) => ctx.rope_cache(&spec, &p),
        }
        .expect("rope_cache");
        std::hint::black_box(cache);
    });
    println!("rust {device} rope_cache 131072 x 128: {ms:.2} ms");

    let pe = PeSpec::new(1024)?;
    let table =
        Array2::from_shape_fn((32000, 1024), |(v, d)| ((v * 31 + d * 7) % 1000) as f32 * 1e-3);
    let ids = Array2::from_shape_fn((8, 1024), |(b, t)| ((b * 1024 + t) * 7919 % 32000) as u32);
    let options = EncodeOptions::default();
    let ms = median(|| {
        let p = positions::contiguous_batch(8, 1024).unwrap();
        let out = match &ctx {
            None => cpu::encode(&pe, Embeddings::F32(table.view()), ids.view(), p.view(), &options),
            Some(ctx) => ctx
                .upload_table(Embeddings::F32(table.view()))
                .and_then(|t| ctx.encode(&pe, &t, ids.view(), p.view(), &options)),
        }
        .expect("encode");
        std::hint::black_box(out);
    });
    println!("rust {device} encode 8 x 1024 x 1024, V 32000, f32: {ms:.2} ms");
    Ok(())
}
