//! Writes a small bf16 embedding table as .safetensors and a batch of ids as .npy, loads the
//! table back the way `posenc encode` does, encodes on the GPU and on the CPU, and checks
//! the two agree bit for bit. The files stay behind (in the directory given as the first
//! argument, default `target/demo`) for trying the CLI:
//!
//! ```sh
//! cargo run --release --example safetensors_roundtrip
//! cargo run --release -- encode --weights target/demo/emb.safetensors \
//!     --ids target/demo/ids.npy --scale sqrt -o target/demo/out.npy
//! ```

use std::path::PathBuf;

use half::bf16;
use ndarray::Array2;
use posenc::encode::{EncodeOptions, Scale};
use posenc::{PeSpec, cpu, gpu, npy, positions, weights};
use safetensors::tensor::{Dtype, TensorView};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "target/demo".into()));
    std::fs::create_dir_all(&dir)?;
    let (vocab, dim) = (1000usize, 64usize);

    // A deterministic table with values in [-1, 1), stored as bf16 like most checkpoints.
    let table = Array2::from_shape_fn((vocab, dim), |(i, j)| {
        bf16::from_f32(((i * 7919 + j * 104_729) % 2000) as f32 / 1000.0 - 1.0)
    });
    let bytes: Vec<u8> = table.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = TensorView::new(Dtype::BF16, vec![vocab, dim], &bytes)?;
    let weights_path = dir.join("emb.safetensors");
    safetensors::serialize_to_file([("embed_tokens.weight", view)], None, &weights_path)?;

    let ids = Array2::from_shape_fn((2, 6), |(b, t)| ((b * 131 + t * 17) % vocab) as u32);
    let ids_path = dir.join("ids.npy");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&ids_path)?);
    npy::write(&mut file, ids.view())?;
    drop(file);

    // Load the table back as the CLI does, then encode both ways.
    let loaded = weights::load(&weights_path, None)?;
    let spec = PeSpec::new(dim as u32)?;
    let pos = positions::contiguous_batch(2, 6)?;
    let options = EncodeOptions { scale: Scale::SqrtDim, ..Default::default() };
    let on_cpu = cpu::encode(&spec, loaded.embeddings(), ids.view(), pos.view(), &options)?;
    println!("wrote {} and {}", weights_path.display(), ids_path.display());
    match gpu::Options::from_env().and_then(|o| gpu::Context::new(&o)) {
        Ok(ctx) => {
            let uploaded = ctx.upload_table(loaded.embeddings())?;
            let on_gpu = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options)?;
            let same = on_gpu.bits() == on_cpu.bits();
            println!("GPU ({}) and CPU agree bit for bit: {same}", ctx.summary().name);
            if !same {
                // They always should agree; if not, report how far apart.
                let (g, c) = (on_gpu.into_f32().unwrap(), on_cpu.clone().into_f32().unwrap());
                let worst = g.iter().zip(c.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                println!("largest difference: {worst:e}");
            }
        }
        Err(e) => println!("no GPU ({e}); CPU result only"),
    }
    let out = on_cpu.into_f32().unwrap();
    println!("out[0, 1, 0..4] = {:?}", &out.as_slice().unwrap()[dim..dim + 4]);
    Ok(())
}
