//! What a fresh output costs on the CPU path: each call that returns a new array (the
//! table, the encode, RoPE, the ALiBi bias, as Python and the CLI call them), timed beside
//! the same work written into an array already faulted in (the `_into` and `_in_place`
//! forms, which `posenc bench` times). The difference is the allocation and the page
//! faults of the new array's first writes. Each fresh call runs with the huge-page advice
//! (`posenc::alloc::advise_huge_pages`, `fresh`) and without it (`fresh_4k`), alternately.
//! One JSON line per operation on stdout, medians and extremes in milliseconds over
//! interleaved repetitions.
//!
//! ```text
//! cargo run --release --example fresh_output_probe [repeats]     # default: 15
//! ```
//!
//! The shapes are Llama-3-8B's prefill (2048 positions of 4096; q of 32 heads of 128) and
//! BLOOM's 32 x 512 x 512 bias: 32 MiB of f32 each, above glibc's largest threshold for
//! reusing freed memory, so every fresh array is a fresh mapping.
use std::time::Instant;

use ndarray::{Array2, Array3, Array4};
use posenc::alibi::{self, AlibiSpec};
use posenc::encode::{Embeddings, EncodeOptions};
use posenc::rope::{Layout, RopeSpec};
use posenc::{PeSpec, cpu};

fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// Times `fresh` with the huge-page advice and without, and `kept`, `repeats` times each,
/// interleaved (the order of the two fresh forms alternating), and prints their medians
/// and extremes.
fn probe(
    name: &str,
    repeats: usize,
    mut fresh: impl FnMut() -> posenc::Result<()>,
    mut kept: impl FnMut() -> posenc::Result<()>,
) -> posenc::Result<()> {
    let mut times = [(); 3].map(|()| Vec::with_capacity(repeats));
    kept()?;
    for rep in 0..repeats {
        for advised in if rep % 2 == 0 { [true, false] } else { [false, true] } {
            posenc::alloc::set_huge_pages(advised);
            let t = Instant::now();
            fresh()?;
            times[usize::from(!advised)].push(ms(t));
        }
        let t = Instant::now();
        kept()?;
        times[2].push(ms(t));
    }
    posenc::alloc::set_huge_pages(true);
    let mut fields = Vec::new();
    for (form, v) in ["fresh", "fresh_4k", "kept"].iter().zip(&mut times) {
        v.sort_by(f64::total_cmp);
        let (lo, mid, hi) = (v[0], v[v.len() / 2], v[v.len() - 1]);
        fields.push(format!(
            "\"{form}_ms\": {mid:.3}, \"{form}_min_ms\": {lo:.3}, \"{form}_max_ms\": {hi:.3}"
        ));
    }
    println!("{{\"op\": \"{name}\", {}}}", fields.join(", "));
    Ok(())
}

fn main() -> posenc::Result<()> {
    let repeats: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(15);
    let (len, dim) = (2048usize, 4096usize);
    let spec = PeSpec::new(dim as u32)?;
    let positions: Vec<u32> = (0..len as u32).collect();

    // The table.
    let mut out = Array2::<f32>::zeros((len, dim));
    probe(
        "table",
        repeats,
        || {
            drop(cpu::table(&spec, &positions));
            Ok(())
        },
        || cpu::table_into(&spec, &positions, out.view_mut()),
    )?;

    // The encode: one sequence of random ids into a table of 32000 rows.
    let vocab = 32000usize;
    let weights = Array2::from_shape_fn((vocab, dim), |(r, c)| ((r * 31 + c) % 997) as f32 * 1e-3);
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let ids = Array2::from_shape_fn((1, len), |_| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % vocab as u64) as u32
    });
    let pos = posenc::positions::contiguous_batch(1, len)?;
    let encoder = cpu::Encoder::new(spec.clone());
    let options = EncodeOptions::default();
    let table = Embeddings::F32(weights.view());
    let mut out = Array3::<f32>::zeros((1, len, dim));
    probe(
        "encode",
        repeats,
        || encoder.encode(table, ids.view(), pos.view(), &options).map(drop),
        || encoder.encode_into(table, ids.view(), pos.view(), &options, out.view_mut()),
    )?;

    // RoPE of q: a new rotated array, against rotating a copy in place.
    let rope = RopeSpec::new(128)?;
    let q =
        Array4::from_shape_fn((1, len, 32, 128), |(_, l, h, d)| ((l + h + d) % 89) as f32 * 0.01);
    let rope_pos = posenc::positions::contiguous_batch(1, len)?;
    let mut work = q.clone();
    probe(
        "rope",
        repeats,
        || cpu::rope(&rope, q.view(), rope_pos.view(), Layout::Blhd).map(drop),
        || cpu::rope_in_place(&rope, work.view_mut(), rope_pos.view(), Layout::Blhd),
    )?;

    // The ALiBi bias.
    let bias_spec = AlibiSpec::new(32, 512)?;
    let mut out = alibi::bias_cpu(&bias_spec)?;
    probe(
        "alibi",
        repeats,
        || alibi::bias_cpu(&bias_spec).map(drop),
        || alibi::bias_cpu_into(&bias_spec, out.view_mut()),
    )
}
