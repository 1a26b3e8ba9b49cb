//! Decoding with a KV cache: the prompt is encoded once, then each new token alone, at the
//! position it has in the sequence (`positions::from_offsets`). Every row must be exactly
//! what encoding the whole sequence at once gives, bit for bit, or a model would see other
//! inputs when it generates than when it reads.
//!
//! Two sequences with prompts of different lengths decode together in one batch, each at its own
//! offset. The PE rows the device caches are dropped before every step, so no row is merely a copy
//! of the full encode's. Runs on the GPU when an adapter opens, else on the CPU; the run fails if
//! any row differs.
//!
//! ```sh
//! cargo run --release --example kv_cache_decode
//! ```

use ndarray::{Array2, Array3, ArrayView2, s};
use posenc::encode::{Embeddings, EncodeOptions, Scale};
use posenc::{PeSpec, cpu, gpu, positions};

const VOCAB: usize = 1000;
const DIM: usize = 64;
/// Tokens generated after each prompt.
const STEPS: usize = 4;

/// Where the encodes run.
enum Device {
    Gpu(Box<gpu::Context>, gpu::GpuTable),
    Cpu(cpu::Encoder),
}

impl Device {
    fn encode(
        &self,
        table: &Array2<f32>,
        ids: ArrayView2<'_, u32>,
        pos: ArrayView2<'_, u32>,
    ) -> posenc::Result<Array3<f32>> {
        // The Transformer's embedding scale, sqrt(d).
        let options = EncodeOptions { scale: Scale::SqrtDim, ..Default::default() };
        let out = match self {
            Self::Gpu(ctx, uploaded) => ctx.encode(&spec(), uploaded, ids, pos, &options)?,
            Self::Cpu(encoder) => {
                encoder.encode(Embeddings::F32(table.view()), ids, pos, &options)?
            }
        };
        Ok(out.into_f32().expect("f32 output was asked for"))
    }

    /// Drops the PE rows the device keeps between calls, so the next encode computes its
    /// rows afresh rather than reusing the full encode's.
    fn clear_pe_cache(&self) {
        match self {
            Self::Gpu(ctx, _) => ctx.clear_pe_cache(),
            Self::Cpu(encoder) => encoder.clear_cache(),
        }
    }
}

fn spec() -> PeSpec {
    PeSpec::new(DIM as u32).expect("an even dim")
}

/// A stand-in for a model's choice of the next token.
fn next_token(previous: u32) -> u32 {
    (previous * 37 + 11) % VOCAB as u32
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let table = Array2::from_shape_fn((VOCAB, DIM), |(i, j)| {
        ((i * 7919 + j * 104_729) % 2000) as f32 / 1000.0 - 1.0
    });
    let device = match gpu::Options::from_env().and_then(|o| gpu::Context::new(&o)) {
        Ok(ctx) => {
            let uploaded = ctx.upload_table(Embeddings::F32(table.view()))?;
            println!("device: GPU ({})", ctx.summary().name);
            Device::Gpu(Box::new(ctx), uploaded)
        }
        Err(e) => {
            println!("device: CPU (no GPU: {e})");
            Device::Cpu(cpu::Encoder::new(spec()))
        }
    };

    // Two conversations: the prompts, then STEPS generated tokens each.
    let prompts: [Vec<u32>; 2] = [vec![17, 250, 3, 999, 42], vec![7, 7, 512]];
    let sequences: Vec<Vec<u32>> = prompts
        .iter()
        .map(|prompt| {
            let mut seq = prompt.clone();
            for _ in 0..STEPS {
                seq.push(next_token(*seq.last().unwrap()));
            }
            seq
        })
        .collect();

    // Reference: each whole sequence encoded at once, positions 0..len.
    let full: Vec<Array3<f32>> = sequences
        .iter()
        .map(|seq| {
            let ids = Array2::from_shape_vec((1, seq.len()), seq.clone())?;
            let pos = positions::contiguous_batch(1, seq.len())?;
            Ok(device.encode(&table, ids.view(), pos.view())?)
        })
        .collect::<Result<_, Box<dyn std::error::Error>>>()?;

    let mut mismatches = 0;
    let mut check = |what: String, got: ndarray::ArrayView1<'_, f32>, seq: usize, pos: usize| {
        let want = full[seq].slice(s![0, pos, ..]);
        let same = got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits());
        let head: Vec<String> = got.iter().take(3).map(|v| format!("{v:8.4}")).collect();
        let verdict = if same { "same bits" } else { "DIFFERENT" };
        println!("  {what:<34} [{}, ...]  {verdict}", head.join(","));
        if !same {
            mismatches += 1;
        }
    };

    // Prefill: each prompt on its own, positions 0..len.
    println!("prefill (each prompt at positions 0..len), compared with the full encode:");
    for (b, prompt) in prompts.iter().enumerate() {
        device.clear_pe_cache();
        let ids = Array2::from_shape_vec((1, prompt.len()), prompt.clone())?;
        let pos = positions::contiguous_batch(1, prompt.len())?;
        let out = device.encode(&table, ids.view(), pos.view())?;
        for (t, id) in prompt.iter().enumerate() {
            check(format!("seq {b}, id {id:>3} at position {t}"), out.slice(s![0, t, ..]), b, t);
        }
    }

    // Decode: one new token per sequence per step, both in one batch, each at its offset.
    println!("decode (one token per sequence per step, batched, offsets = tokens so far):");
    for step in 0..STEPS {
        let offsets: Vec<u32> = prompts.iter().map(|p| (p.len() + step) as u32).collect();
        let ids = Array2::from_shape_fn((2, 1), |(b, _)| sequences[b][offsets[b] as usize]);
        let pos = positions::from_offsets(&offsets, 1)?;
        device.clear_pe_cache();
        let out = device.encode(&table, ids.view(), pos.view())?;
        for (b, &offset) in offsets.iter().enumerate() {
            let what = format!("seq {b}, id {:>3} at position {offset}", ids[[b, 0]]);
            check(what, out.slice(s![b, 0, ..]), b, offset as usize);
        }
    }

    if mismatches > 0 {
        return Err(format!("{mismatches} rows differ from the full-sequence encode").into());
    }
    println!("every prefill and decode row equals the full-sequence encode bit for bit");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_and_every_row_matches() {
        super::main().unwrap();
    }
}
