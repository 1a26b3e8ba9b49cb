//! posenc inside an engine's own GPU pipeline. The program opens the wgpu device itself,
//! hands it to posenc (`Context::from_device`), and records into ONE command encoder
//! posenc's fused gather + PE followed by its own compute kernel (WGSL below), which reads
//! posenc's output on the device: the dot product of every token's row with a query
//! vector. One submission, one readback; nothing goes through the host in between.
//!
//! The encoded rows must equal `posenc::cpu::encode` bit for bit, and the dot products
//! the host computes from them in the same order (see `dot` for why they match); the
//! program panics otherwise. Without an adapter it prints SKIP and exits 0, unless
//! `CI=true`.
//!
//! ```sh
//! cargo run --release --example pipeline
//! ```

use ndarray::Array2;
use posenc::encode::{Embeddings, EncodeOptions, Scale};
use posenc::gpu::{Context, EncodePassDescriptor, Options, Positions};
use posenc::{PeSpec, cpu};
use wgpu::util::DeviceExt;

const VOCAB: usize = 100;
const DIM: usize = 64;
const BATCH: usize = 2;
const LEN: usize = 8;
const TOKENS: usize = BATCH * LEN;

/// The engine's kernel: `dots[t] = sum_j rows[t * DIM + j] * query[j]`, j in order.
const DOT_WGSL: &str = r"
@group(0) @binding(0) var<storage, read> rows: array<f32>;
@group(0) @binding(1) var<storage, read> query: array<f32>;
@group(0) @binding(2) var<storage, read_write> dots: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x;
    if t >= TOKENSu { return; }
    var acc = 0.0;
    for (var j = 0u; j < DIMu; j++) {
        acc = acc + rows[t * DIMu + j] * query[j];
    }
    dots[t] = acc;
}
";

/// Opens the engine's device, or `None` (after printing SKIP) when there is no adapter;
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
        label: Some("engine.device"),
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

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect()
}

/// The host's dot product, summed in the kernel's order. Every query value is a power of
/// two, so every product `x * q` is exact (no rounding, no underflow at these magnitudes):
/// whether the device contracts `acc + x * q` into a fused multiply-add or not, each step
/// rounds the same exact sum once, and the two results have the same bits. A compiler
/// that reordered the sum would break that; `main` then still accepts a difference within
/// the bound any summation order meets (and says so).
fn dot(row: &[f32], query: &[f32]) -> f32 {
    row.iter().zip(query).fold(0.0f32, |acc, (x, q)| acc + x * q)
}

fn main() {
    let Some((adapter, device, queue)) = open() else { return };
    // The engine keeps `device` and `queue`; posenc shares them.
    let gpu = Context::from_device(adapter, device.clone(), queue.clone(), &Options::default())
        .expect("posenc on the engine's device");
    let summary = gpu.summary();
    println!("device: {} ({})", summary.name, summary.backend);

    let spec = PeSpec::new(DIM as u32).expect("an even dim");
    let table = Array2::from_shape_fn((VOCAB, DIM), |(i, j)| {
        ((i * 7919 + j * 104_729) % 2000) as f32 / 1000.0 - 1.0
    });
    let uploaded = gpu.upload_table(Embeddings::F32(table.view())).expect("table upload");
    let options = EncodeOptions { scale: Scale::SqrtDim, ..Default::default() };

    // Two sequences: the first at positions 0..LEN, the second after a cached prefix of 100.
    let ids = Array2::from_shape_fn((BATCH, LEN), |(b, t)| ((b * 31 + t * 17 + 5) % VOCAB) as u32);
    let positions = Array2::from_shape_fn((BATCH, LEN), |(b, t)| (b * 100 + t) as u32);
    // Powers of two with signs: 0.25, -0.5, 1, -2, 0.25, ...
    let query: Vec<f32> = (0..DIM)
        .map(|j| {
            let magnitude = [0.25f32, 0.5, 1.0, 2.0][j % 4];
            if j % 2 == 1 { -magnitude } else { magnitude }
        })
        .collect();

    // The engine's buffers, on its device.
    use wgpu::BufferUsages as U;
    let storage_init = |label, contents: &[u8]| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents,
            usage: U::STORAGE,
        })
    };
    let ids_buf = storage_init("engine.ids", bytemuck::cast_slice(ids.as_slice().unwrap()));
    let pos_buf =
        storage_init("engine.positions", bytemuck::cast_slice(positions.as_slice().unwrap()));
    let query_buf = storage_init("engine.query", bytemuck::cast_slice(&query));
    let rows_bytes = (TOKENS * DIM * 4) as u64;
    let dots_bytes = (TOKENS * 4) as u64;
    let rows_buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("engine.rows"),
        size: rows_bytes,
        usage: U::STORAGE | U::COPY_SRC,
        mapped_at_creation: false,
    });
    let dots_buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("engine.dots"),
        size: dots_bytes,
        usage: U::STORAGE | U::COPY_SRC,
        mapped_at_creation: false,
    });
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("engine.staging"),
        size: rows_bytes + dots_bytes,
        usage: U::MAP_READ | U::COPY_DST,
        mapped_at_creation: false,
    });

    // The engine's kernel.
    let source = DOT_WGSL.replace("TOKENS", &TOKENS.to_string()).replace("DIM", &DIM.to_string());
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("engine.dot"),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("engine.dot"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let dot_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("engine.dot"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: rows_buf.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: query_buf.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 2, resource: dots_buf.as_entire_binding() },
        ],
    });

    // Prepared once per shape (may submit its own setup, never waits)...
    let desc = EncodePassDescriptor {
        batch: BATCH,
        len: LEN,
        positions: Positions::PerToken,
        options,
        ..Default::default()
    };
    let pass = gpu.encode_pass(&spec, &uploaded, &desc).expect("encode pass");

    // ...then recorded: posenc's pass, the engine's kernel, the copies, one submission.
    let mut encoder = device.create_command_encoder(&Default::default());
    pass.record(&mut encoder, ids_buf.slice(..), pos_buf.slice(..), rows_buf.slice(..))
        .expect("record the encode");
    {
        let mut cpass = encoder.begin_compute_pass(&Default::default());
        cpass.set_pipeline(&pipeline);
        cpass.set_bind_group(0, &dot_group, &[]);
        cpass.dispatch_workgroups(TOKENS.div_ceil(64) as u32, 1, 1);
    }
    encoder.copy_buffer_to_buffer(&rows_buf, 0, &staging, 0, rows_bytes);
    encoder.copy_buffer_to_buffer(&dots_buf, 0, &staging, rows_bytes, dots_bytes);
    queue.submit([encoder.finish()]);
    let bytes = read_back(&device, &staging);
    let (rows, dots) = (f32s(&bytes[..rows_bytes as usize]), f32s(&bytes[rows_bytes as usize..]));

    // The CPU path, and the same dot products on the host.
    let want =
        cpu::encode(&spec, Embeddings::F32(table.view()), ids.view(), positions.view(), &options)
            .expect("cpu encode")
            .into_f32()
            .expect("f32 output");
    let want_rows = want.as_slice().expect("a standard layout");
    let differing = rows.iter().zip(want_rows).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    assert_eq!(differing, 0, "{differing} of {} encoded values differ from the CPU", rows.len());

    let mut same_bits = 0;
    for (t, row) in want_rows.chunks_exact(DIM).enumerate() {
        let (got, host) = (dots[t], dot(row, &query));
        if got.to_bits() == host.to_bits() {
            same_bits += 1;
            continue;
        }
        // Any order of summing n exact terms is within (n - 1) * eps/2 * sum |term| of the
        // exact sum; two orders are within twice that of each other.
        let magnitude: f32 = row.iter().zip(&query).map(|(x, q)| (x * q).abs()).sum();
        let bound = 2.0 * (DIM - 1) as f32 * (f32::EPSILON / 2.0) * magnitude;
        assert!(
            (got - host).abs() <= bound,
            "token {t}: device dot {got} vs host {host}, beyond the summation bound {bound}"
        );
        println!(
            "token {t}: device dot {got} differs from host {host} within rounding ({bound:.1e})"
        );
    }
    println!(
        "checked: {TOKENS} tokens x {DIM} encoded values equal posenc::cpu::encode bit for bit; \
         {same_bits}/{TOKENS} dot products (engine kernel, same encoder, one submission) equal the \
         host's bit for bit"
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn records_with_the_engines_kernel() {
        super::main();
    }
}
