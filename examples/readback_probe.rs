//! Where the time of a readback goes on this machine's GPU: wgpu's own steps (a copy into a
//! `MAP_READ` staging buffer and its wait, the map, the copy out of the mapping into host
//! memory already touched and into fresh memory) beside posenc's `Context::read_buffer` of
//! the same bytes. One JSON line per size on stdout (the adapter's name on stderr), medians
//! in microseconds.
//!
//! First, the round trip of a small readback (a copy into a staging buffer, its map and the
//! wait, 4 KiB and 64 KiB, a decode step's result) waited for two ways, interleaved: by
//! wgpu's blocking poll (`PollType::Wait`, what posenc did before), and by polling without
//! blocking (`PollType::Poll`, yielding the core between polls) until the map's callback
//! has run, as posenc's waits now do first (`gpu::Options::spin_wait`). Where the second is
//! much the faster, the blocking wait's wake-up is what a small call pays.
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

/// One small readback of `src` into `staging`, waited for by blocking or by spinning on
/// non-blocking polls; its wall time in microseconds and the polls it took.
fn round_trip(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    src: &wgpu::Buffer,
    staging: &wgpu::Buffer,
    spin: bool,
) -> (f64, u32) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let t = Instant::now();
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(src, 0, staging, 0, src.size());
    let index = queue.submit([encoder.finish()]);
    let mapped = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&mapped);
    staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
        r.expect("mapped");
        flag.store(true, Ordering::Release);
    });
    let mut polls = 0;
    if spin {
        while !mapped.load(Ordering::Acquire) {
            device.poll(wgpu::PollType::Poll).expect("the device answers");
            polls += 1;
            std::thread::yield_now();
        }
    } else {
        wait(device, Some(index));
        polls = 1;
    }
    assert!(mapped.load(Ordering::Acquire), "mapped once the submission is done");
    let first = staging.slice(..4).get_mapped_range().expect("mapped")[0];
    let elapsed = t.elapsed().as_secs_f64() * 1e6;
    assert_eq!(first, 1, "the copy's first byte");
    staging.unmap();
    (elapsed, polls)
}

/// The round trips of small readbacks, blocking and spinning, one JSON line per size.
fn round_trips(device: &wgpu::Device, queue: &wgpu::Queue) {
    const REPS: usize = 60;
    for kib in [4u64, 64] {
        use wgpu::BufferUsages as U;
        let n = kib << 10;
        let buffer = |label, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: n,
                usage,
                mapped_at_creation: false,
            })
        };
        let src = buffer("probe.trip.src", U::STORAGE | U::COPY_SRC | U::COPY_DST);
        queue.write_buffer(&src, 0, &vec![1u8; n as usize]);
        let staging = buffer("probe.trip.staging", U::MAP_READ | U::COPY_DST);
        let (mut block, mut spin, mut polls) = (vec![], vec![], vec![]);
        for rep in 0..=REPS {
            let b = round_trip(device, queue, &src, &staging, false);
            let s = round_trip(device, queue, &src, &staging, true);
            if rep > 0 {
                block.push(b.0);
                spin.push(s.0);
                polls.push(f64::from(s.1));
            }
        }
        println!(
            "{{\"round_trip_kib\": {kib}, \"block_us\": {:.1}, \"spin_us\": {:.1}, \
             \"spin_polls\": {:.0}}}",
            median(block),
            median(spin),
            median(polls),
        );
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sizes: Vec<u64> = std::env::args().skip(1).map(|a| a.parse()).collect::<Result<_, _>>()?;
    let sizes = if sizes.is_empty() { vec![12, 25, 32, 64] } else { sizes };
    let ctx = gpu::Context::new(&gpu::Options::from_env()?)?;
    let (device, queue) = (ctx.device(), ctx.queue());
    let info = ctx.adapter_info();
    eprintln!("{} ({:?})", info.name, info.backend);
    round_trips(device, queue);
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
