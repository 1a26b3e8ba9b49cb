//! A decode loop that stays on the device. Each step records posenc's `EncodePass` (one
//! token per sequence, `Positions::PerSequence`) reading the token ids from a device
//! buffer, then the program's own tiny WGSL kernel that "samples" each sequence's next
//! token from its encoded row (an integer hash of the row's bits, mod the vocabulary),
//! writes it into the ids buffer for the next step, appends it to the generated tokens and
//! bumps the sequence's position. Every step is submitted without waiting and without a
//! read; the generated tokens are read back once at the end.
//!
//! The same loop then runs on the host with `posenc::cpu::encode` and the same hash. The
//! hash reads every bit of every row, so one differing bit would send a sequence down
//! another path: the tokens must be the same, and the pass's fault counters clean. The
//! encode's bits are the CPU's on every backend (with a scale too: the kernels round the
//! product before the sum takes it, see ARCHITECTURE.md). The three sequences start at
//! position 0, just below the PE rows posenc caches on the device (4096: later rows are
//! computed in the kernel) and just below `u32::MAX` (positions wrap). Without an adapter
//! it prints SKIP and exits 0, unless `CI=true`.
//!
//! ```sh
//! cargo run --release --example decode_loop
//! ```

use ndarray::Array2;
use posenc::encode::{Embeddings, EncodeOptions};
use posenc::gpu::{Context, EncodePassDescriptor, Faults, Options, Positions};
use posenc::{PeSpec, cpu};
use wgpu::util::DeviceExt;

const VOCAB: usize = 64;
const DIM: usize = 32;
const STEPS: usize = 16;
/// The first token of each sequence and the position it is at.
const FIRST_IDS: [u32; 3] = [3, 40, 17];
const STARTS: [u32; 3] = [0, 4090, u32::MAX - 5];
const BATCH: usize = FIRST_IDS.len();

/// The program's sampler, one invocation for the whole batch (the batch is tiny): FNV-1a
/// over the bits of each sequence's row, mod the vocabulary.
const SAMPLE_WGSL: &str = r"
@group(0) @binding(0) var<storage, read> rows: array<u32>;
@group(0) @binding(1) var<storage, read_write> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> positions: array<u32>;
@group(0) @binding(3) var<storage, read_write> generated: array<u32>;
@group(0) @binding(4) var<storage, read_write> step: array<u32>;

@compute @workgroup_size(1)
fn main() {
    let s = step[0];
    for (var b = 0u; b < BATCHu; b++) {
        var h = 2166136261u;
        for (var j = 0u; j < DIMu; j++) {
            h = (h ^ rows[b * DIMu + j]) * 16777619u;
        }
        let next = h % VOCABu;
        ids[b] = next;
        generated[s * BATCHu + b] = next;
        positions[b] = positions[b] + 1u;
    }
    step[0] = s + 1u;
}
";

/// The sampler on the host, on the bits of one row.
fn sample(row: &[f32]) -> u32 {
    let h = row.iter().fold(2_166_136_261u32, |h, x| (h ^ x.to_bits()).wrapping_mul(16_777_619));
    h % VOCAB as u32
}

/// Opens the program's device, or `None` (after printing SKIP) when there is no adapter;
/// under `CI=true` a missing adapter is a failure.
fn open() -> Option<(wgpu::Adapter, wgpu::Device, wgpu::Queue)> {
    // Honours WGPU_BACKEND (vulkan, gl, ...) like posenc's own Context::new.
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = match pollster::block_on(instance.request_adapter(&Default::default())) {
        Ok(adapter) => adapter,
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true but no GPU adapter: {e}")
        }
        Err(e) => {
            println!("SKIP: no GPU adapter ({e})");
            return None;
        }
    };
    // posenc runs within WebGPU's downlevel limits; ask for what the adapter has, so a
    // pass can bind up to 8 table chunks per dispatch.
    let descriptor = wgpu::DeviceDescriptor {
        label: Some("decode.device"),
        required_limits: adapter.limits(),
        ..Default::default()
    };
    let (device, queue) =
        pollster::block_on(adapter.request_device(&descriptor)).expect("a device on the adapter");
    Some((adapter, device, queue))
}

/// Copies `buffer` back to the host: map_async, then poll until the callback has run.
fn read_back(device: &wgpu::Device, buffer: &wgpu::Buffer) -> Vec<u8> {
    let slice = buffer.slice(..);
    let (tx, rx) = std::sync::mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| tx.send(r).expect("the receiver waits"));
    device.poll(wgpu::PollType::wait_indefinitely()).expect("the device completes the work");
    rx.recv().expect("the callback ran").expect("the buffer maps");
    let bytes = slice.get_mapped_range().expect("the range is mapped").to_vec();
    buffer.unmap();
    bytes
}

/// The program's embedding table, `[VOCAB, DIM]`.
fn table() -> Array2<f32> {
    Array2::from_shape_fn((VOCAB, DIM), |(i, j)| {
        ((i * 7919 + j * 104_729) % 2000) as f32 / 1000.0 - 1.0
    })
}

/// The line printed for sequence `b` and its generated tokens.
fn seq_line(b: usize, tokens: &[u32]) -> String {
    format!("seq {b} (id {:>2} at position {:>10}): {tokens:?}", FIRST_IDS[b], STARTS[b])
}

/// The loop on the host: `STEPS` tokens per sequence, as `[step][sequence]`.
fn host_loop(spec: &PeSpec, table: &Array2<f32>, options: &EncodeOptions) -> Vec<[u32; BATCH]> {
    let (mut ids, mut starts) = (FIRST_IDS, STARTS);
    let mut generated = Vec::with_capacity(STEPS);
    for _ in 0..STEPS {
        let id_arr = Array2::from_shape_fn((BATCH, 1), |(b, _)| ids[b]);
        let pos_arr = Array2::from_shape_fn((BATCH, 1), |(b, _)| starts[b]);
        let rows = cpu::encode(
            spec,
            Embeddings::F32(table.view()),
            id_arr.view(),
            pos_arr.view(),
            options,
        )
        .expect("cpu encode")
        .into_f32()
        .expect("f32 output");
        for b in 0..BATCH {
            ids[b] = sample(rows.slice(ndarray::s![b, 0, ..]).as_slice().expect("contiguous"));
            starts[b] = starts[b].wrapping_add(1);
        }
        generated.push(ids);
    }
    generated
}

fn main() {
    let Some((adapter, device, queue)) = open() else { return };
    let gpu = Context::from_device(adapter, device.clone(), queue.clone(), &Options::default())
        .expect("posenc on the program's device");
    let summary = gpu.summary();
    println!("device: {} ({})", summary.name, summary.backend);

    let spec = PeSpec::new(DIM as u32).expect("an even dim");
    let table = table();
    let uploaded = gpu.upload_table(Embeddings::F32(table.view())).expect("table upload");
    // No scale (one would give the CPU's bits too: the kernels keep WGSL from fusing
    // `scale * e + pe` into an fma, which the H100's Vulkan driver did before they did).
    let options = EncodeOptions::default();
    let desc = EncodePassDescriptor {
        batch: BATCH,
        len: 1,
        positions: Positions::PerSequence,
        options,
        ..Default::default()
    };
    let pass = gpu.encode_pass(&spec, &uploaded, &desc).expect("encode pass");

    use wgpu::BufferUsages as U;
    let init = |label, contents: &[u8], usage| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents,
            usage,
        })
    };
    let ids_buf = init("decode.ids", bytemuck::cast_slice(&FIRST_IDS), U::STORAGE);
    let pos_buf = init("decode.positions", bytemuck::cast_slice(&STARTS), U::STORAGE);
    let step_buf = init("decode.step", &[0u8; 4], U::STORAGE);
    let generated_bytes = (STEPS * BATCH * 4) as u64;
    let generated_buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("decode.generated"),
        size: generated_bytes,
        usage: U::STORAGE | U::COPY_SRC,
        mapped_at_creation: false,
    });
    let rows_buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("decode.rows"),
        size: pass.output_bytes(),
        usage: U::STORAGE,
        mapped_at_creation: false,
    });
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("decode.staging"),
        size: generated_bytes,
        usage: U::MAP_READ | U::COPY_DST,
        mapped_at_creation: false,
    });

    let source = SAMPLE_WGSL
        .replace("BATCHu", &format!("{BATCH}u"))
        .replace("DIMu", &format!("{DIM}u"))
        .replace("VOCABu", &format!("{VOCAB}u"));
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("decode.sample"),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("decode.sample"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let buffers = [&rows_buf, &ids_buf, &pos_buf, &generated_buf, &step_buf];
    let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
        .iter()
        .enumerate()
        .map(|(k, b)| wgpu::BindGroupEntry { binding: k as u32, resource: b.as_entire_binding() })
        .collect();
    let sample_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("decode.sample"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    });

    // The loop: record, submit, go on. The pass reuses its bind groups (same buffers).
    for _ in 0..STEPS {
        let mut encoder = device.create_command_encoder(&Default::default());
        pass.record(&mut encoder, ids_buf.slice(..), pos_buf.slice(..), rows_buf.slice(..))
            .expect("record the encode");
        {
            let mut cpass = encoder.begin_compute_pass(&Default::default());
            cpass.set_pipeline(&pipeline);
            cpass.set_bind_group(0, &sample_group, &[]);
            cpass.dispatch_workgroups(1, 1, 1);
        }
        queue.submit([encoder.finish()]);
    }
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(&generated_buf, 0, &staging, 0, generated_bytes);
    queue.submit([encoder.finish()]);
    let bytes = read_back(&device, &staging);
    let got: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);

    let want = host_loop(&spec, &table, &options);
    for b in 0..BATCH {
        let device_seq: Vec<u32> = (0..STEPS).map(|s| got[s * BATCH + b]).collect();
        let host_seq: Vec<u32> = want.iter().map(|ids| ids[b]).collect();
        println!("{}", seq_line(b, &device_seq));
        assert_eq!(
            device_seq, host_seq,
            "sequence {b}: the device's tokens differ from the host's"
        );
    }
    let faults = pass.read_faults().expect("read the fault counters");
    assert_eq!(faults, Faults::default(), "ids outside the vocabulary");
    println!(
        "checked: {STEPS} steps x {BATCH} sequences sampled on the device (no host read per step) \
         equal the posenc::cpu::encode loop token for token; no faults"
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn device_loop_equals_host_loop() {
        super::main();
    }

    /// docs/examples.md shows this program's output: its token lines are the host loop's
    /// (which the device's must equal), so they go stale when the loop changes.
    #[test]
    fn the_docs_show_the_tokens_this_program_prints() {
        use super::*;
        let docs = include_str!("../docs/examples.md");
        let spec = PeSpec::new(DIM as u32).expect("an even dim");
        let want = host_loop(&spec, &table(), &EncodeOptions::default());
        for b in 0..BATCH {
            let tokens: Vec<u32> = want.iter().map(|ids| ids[b]).collect();
            let line = seq_line(b, &tokens);
            assert!(docs.contains(&line), "docs/examples.md lacks `{line}`");
        }
    }
}
