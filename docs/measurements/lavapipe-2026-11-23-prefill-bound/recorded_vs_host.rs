use half::bf16;
use ndarray::Array2;
use posenc::PeSpec;
use posenc::encode::{Embeddings, EncodeOptions};
use posenc::gpu::{Context, EncodePassDescriptor, Positions};
use std::time::Instant;

fn main() {
    let vocab: usize = std::env::var("VOCAB").map_or(16384, |v| v.parse().unwrap());
    let (len, dim) = (2048usize, 4096usize);
    let ctx = Context::new().unwrap();
    let mut seed = 0x9E3779B97F4A7C15u64;
    let mut rnd = || { seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17; seed };
    let table = Array2::from_shape_fn((vocab, dim), |(r, c)| bf16::from_f32(((r * 31 + c * 7) % 1000) as f32 / 1000.0 - 0.5));
    let gt = ctx.upload_table(Embeddings::Bf16(table.view())).unwrap();
    let spec = PeSpec::new(dim as u32).unwrap();
    let ids: Vec<u32> = (0..len).map(|_| (rnd() % vocab as u64) as u32).collect();
    let pos: Vec<u32> = (0..len as u32).collect();
    let ids2 = Array2::from_shape_vec((1, len), ids.clone()).unwrap();
    let pos2 = Array2::from_shape_vec((1, len), pos.clone()).unwrap();
    let opts = EncodeOptions::default();
    let out_bytes = (len * dim * 4) as u64;
    let device = ctx.device().clone();
    let queue = ctx.queue().clone();
    use wgpu::util::DeviceExt;
    let mk = |w: &[u32]| device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: None, contents: bytemuck::cast_slice(w), usage: wgpu::BufferUsages::STORAGE });
    let idb = mk(&ids);
    let posb = mk(&pos);
    let out = device.create_buffer(&wgpu::BufferDescriptor { label: None, size: out_bytes, usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC, mapped_at_creation: false });
    let desc = EncodePassDescriptor { batch: 1, len, positions: Positions::PerToken, options: opts.clone(), ..Default::default() };
    let pass = ctx.encode_pass(&spec, &gt, &desc).unwrap();
    let rec = || {
        let mut enc = device.create_command_encoder(&Default::default());
        pass.record(&mut enc, idb.slice(..), posb.slice(..), out.slice(..)).unwrap();
        let t = Instant::now();
        queue.submit([enc.finish()]);
        device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        t.elapsed().as_secs_f64()
    };
    let med = |mut v: Vec<f64>| { v.sort_by(|a, b| a.partial_cmp(b).unwrap()); v[v.len() / 2] };
    for _ in 0..2 { rec(); ctx.time_encode(&spec, &gt, ids2.view(), pos2.view(), &opts, &out, false).unwrap(); }
    let (mut r, mut h, mut c, mut cc) = (vec![], vec![], vec![], vec![]);
    for _ in 0..7 {
        r.push(rec());
        h.push(ctx.time_encode(&spec, &gt, ids2.view(), pos2.view(), &opts, &out, false).unwrap());
        c.extend(ctx.time_copy(out_bytes, 1).unwrap());
        cc.extend(ctx.time_copy_call(out_bytes, 1).unwrap());
    }
    let enc_bytes = (len * dim * 2 + len * dim * 4 + len * 4) as f64;
    let copy_bytes = 2.0 * out_bytes as f64;
    let (r, h, c, cc) = (med(r), med(h), med(c), med(cc));
    println!("V={vocab}: recorded pass {:.2} ms (wall, {:.1}% of copy call {:.2} ms); host-array encode {:.2} ms (device, {:.1}% of copy {:.2} ms)",
        r * 1e3, 100.0 * (enc_bytes / r) / (copy_bytes / cc), cc * 1e3, h * 1e3, 100.0 * (enc_bytes / h) / (copy_bytes / c), c * 1e3);
}
