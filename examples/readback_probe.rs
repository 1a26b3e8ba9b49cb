//! Where the time of a readback goes on this machine's GPU: wgpu's own steps (a copy into a
//! `MAP_READ` staging buffer and its wait, the map, the copy out of the mapping into host
//! memory already touched and into fresh memory) beside posenc's `Context::read_buffer` of
//! the same bytes. One JSON line per size, medians in microseconds.
//!
//! ```text
//! cargo run --release --example readback_probe [MiB ...]     # default: 12 25 32 64
//! ```
use std::time::Instant;

use posenc::gpu;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn wait(device: &wgpu::Device, index: Option<wgpu::SubmissionIndex>) {
    let poll = wgpu::PollType::Wait { submission_index: index, timeout: None };
    device.poll(poll).expect("the device answers");
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sizes: Vec<u64> = std::env::args().skip(1).map(|a| a.parse()).collect::<Result<_, _>>()?;
    let sizes = if sizes.is_empty() { vec![12, 25, 32, 64] } else { sizes };
    let ctx = gpu::Context::new(&gpu::Options::from_env()?)?;
    let (device, queue) = (ctx.device(), ctx.queue());
    let info = ctx.adapter_info();
    eprintln!("{} ({:?})", info.name, info.backend);
    const REPS: usize = 9;
    for mib in sizes {
        let n = mib << 20;
        use wgpu::BufferUsages as U;
        let src = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("probe.src"),
            size: n,
            usage: U::STORAGE | U::COPY_SRC | U::COPY_DST,
            mapped_at_creation: false,
        });
        let fill: Vec<u8> = (0..n).map(|i| (i * 7 + 1) as u8).collect();
        queue.write_buffer(&src, 0, &fill);
        let staging = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("probe.staging"),
            size: n,
            usage: U::MAP_READ | U::COPY_DST,
            mapped_at_creation: false,
        });
        let mut touched = vec![1u8; n as usize];
        let (mut copy, mut map, mut out_touched, mut out_fresh, mut both, mut posenc) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for rep in 0..=REPS {
            // The copy into staging, submitted and waited for.
            let t = Instant::now();
            let mut encoder = device.create_command_encoder(&Default::default());
            encoder.copy_buffer_to_buffer(&src, 0, &staging, 0, n);
            let index = queue.submit([encoder.finish()]);
            wait(device, Some(index));
            let t_copy = t.elapsed();
            // The map of a buffer the device is done with.
            let t = Instant::now();
            staging.slice(..).map_async(wgpu::MapMode::Read, |r| r.expect("mapped"));
            wait(device, None);
            let t_map = t.elapsed();
            {
                let view = staging.slice(..).get_mapped_range()?;
                let t = Instant::now();
                touched.copy_from_slice(&view);
                let t_touched = t.elapsed();
                let t = Instant::now();
                let mut fresh = vec![0u8; n as usize];
                fresh.copy_from_slice(&view);
                let t_fresh = t.elapsed();
                assert_eq!(fresh[..64], fill[..64]);
                assert_eq!(touched[n as usize - 64..], fill[n as usize - 64..]);
                if rep > 0 {
                    out_touched.push(t_touched.as_secs_f64() * 1e6);
                    out_fresh.push(t_fresh.as_secs_f64() * 1e6);
                }
            }
            staging.unmap();
            // Copy and map in one go, as a readback does: one wait for both.
            let t = Instant::now();
            let mut encoder = device.create_command_encoder(&Default::default());
            encoder.copy_buffer_to_buffer(&src, 0, &staging, 0, n);
            let index = queue.submit([encoder.finish()]);
            staging.slice(..).map_async(wgpu::MapMode::Read, |r| r.expect("mapped"));
            wait(device, Some(index));
            wait(device, None);
            let t_both = t.elapsed();
            staging.unmap();
            // posenc's readback of the same buffer, into a fresh array.
            let t = Instant::now();
            let bytes = ctx.read_buffer(&src)?;
            let t_posenc = t.elapsed();
            assert_eq!(bytes[..64], fill[..64]);
            if rep > 0 {
                copy.push(t_copy.as_secs_f64() * 1e6);
                map.push(t_map.as_secs_f64() * 1e6);
                both.push(t_both.as_secs_f64() * 1e6);
                posenc.push(t_posenc.as_secs_f64() * 1e6);
            }
        }
        println!(
            "{{\"mib\": {mib}, \"copy_wait_us\": {:.1}, \"map_us\": {:.1}, \
             \"copy_and_map_us\": {:.1}, \"memcpy_touched_us\": {:.1}, \
             \"memcpy_fresh_us\": {:.1}, \"posenc_read_buffer_us\": {:.1}}}",
            median(copy),
            median(map),
            median(both),
            median(out_touched),
            median(out_fresh),
            median(posenc),
        );
    }
    Ok(())
}
