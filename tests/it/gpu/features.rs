//! Portability: posenc needs no optional device feature and runs within WebGPU's downlevel
//! default limits; the one optional feature it uses (timestamp queries, to time work on
//! the device) has a wall-clock fallback, tested here by turning the feature off.

use crate::support::{Rng, fresh_gpu, random_ids, random_table};
use half::{bf16, f16};
use posenc::encode::{Dtype, Embeddings, EncodeOptions};
use posenc::gpu::{Context, Options, TimingSource};
use posenc::{PeSpec, cpu, positions};

const TIMESTAMPS: wgpu::Features =
    wgpu::Features::TIMESTAMP_QUERY.union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);

/// Encodes a few random problems, every table and output type, and compares with the CPU
/// bit for bit.
fn encodes_match_the_cpu(ctx: &Context, what: &str) {
    let mut rng = Rng::new(77);
    for (k, (in_dtype, out_dtype)) in [Dtype::F32, Dtype::F16, Dtype::Bf16]
        .into_iter()
        .flat_map(|a| [Dtype::F32, Dtype::F16, Dtype::Bf16].map(|b| (a, b)))
        .enumerate()
    {
        let (vocab, dim) = (40 + k, 2 * (3 + 5 * k));
        let spec = PeSpec::new(dim as u32).unwrap();
        let f = random_table(&mut rng, vocab, dim);
        let (h, b) = (f.mapv(f16::from_f32), f.mapv(bf16::from_f32));
        let table = match in_dtype {
            Dtype::F32 => Embeddings::F32(f.view()),
            Dtype::F16 => Embeddings::F16(h.view()),
            Dtype::Bf16 => Embeddings::Bf16(b.view()),
        };
        let ids = random_ids(&mut rng, 3, 21, vocab);
        let pos = positions::from_offsets(&[0, 1 << 20, u32::MAX - 20], 21).unwrap();
        let options = EncodeOptions { out_dtype, ..Default::default() };
        let want = cpu::encode(&spec, table, ids.view(), pos.view(), &options).unwrap();
        let uploaded = ctx.upload_table(table).unwrap();
        let got = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
        assert_eq!(got.bits(), want.bits(), "{what}: {in_dtype:?} -> {out_dtype:?}");
    }
}

#[test]
fn no_optional_feature_is_requested_beyond_timestamp_queries() {
    let Some(ctx) = fresh_gpu(&Options::default()) else { return };
    let extra = ctx.device().features() - TIMESTAMPS;
    assert_eq!(extra, wgpu::Features::empty(), "posenc asked for {extra:?}");
    let off = fresh_gpu(&Options::default().timestamps(false)).unwrap();
    assert_eq!(off.device().features(), wgpu::Features::empty());
}

#[test]
fn timings_use_timestamps_when_offered_and_the_wall_clock_when_turned_off() {
    let Some(on) = fresh_gpu(&Options::default()) else { return };
    let off = fresh_gpu(&Options::default().timestamps(false)).unwrap();
    let offered = on.summary().timestamp_query && on.device().features().contains(TIMESTAMPS);
    let expected = if offered { TimingSource::DeviceTimestamps } else { TimingSource::WallClock };
    assert_eq!(on.timing_source(), expected);
    assert_eq!(off.timing_source(), TimingSource::WallClock);
    let spec = PeSpec::new(256).unwrap();
    let positions: Vec<u32> = (0..512).collect();
    for (ctx, what) in [(&on, "timestamps"), (&off, "wall clock")] {
        let times =
            [ctx.time_copy(4 << 20, 3).unwrap(), ctx.time_table(&spec, &positions, 3).unwrap()];
        for t in times.iter().flatten() {
            assert!(t.is_finite() && *t > 0.0, "{what}: {t}");
        }
        assert!(times.iter().all(|t| t.len() == 3), "{what}");
        encodes_match_the_cpu(ctx, what);
        timed_encodes_write_the_cpu_bits(ctx, what);
    }
}

/// `time_encode`, warm and cold, gives a time and writes what the CPU computes.
fn timed_encodes_write_the_cpu_bits(ctx: &Context, what: &str) {
    let mut rng = Rng::new(78);
    let (vocab, dim, batch, len) = (50, 64, 4, 33);
    let spec = PeSpec::new(dim as u32).unwrap();
    let f = random_table(&mut rng, vocab, dim);
    let ids = random_ids(&mut rng, batch, len, vocab);
    let pos = positions::contiguous_batch(batch, len).unwrap();
    let options = EncodeOptions::default();
    let want = cpu::encode(&spec, Embeddings::F32(f.view()), ids.view(), pos.view(), &options)
        .unwrap()
        .bits();
    let uploaded = ctx.upload_table(Embeddings::F32(f.view())).unwrap();
    let out = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("test.timed_encode"),
        size: (batch * len * dim * 4) as u64,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    for cold in [true, false] {
        let t = ctx.time_encode(&spec, &uploaded, ids.view(), pos.view(), &options, &out, cold);
        let t = t.unwrap();
        assert!(t.is_finite() && t > 0.0, "{what}, cold {cold}: {t}");
        let bytes = ctx.read_buffer(&out).unwrap();
        let got: Vec<u32> =
            bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        assert_eq!(got, want, "{what}, cold {cold}");
    }
}

#[test]
fn everything_runs_within_webgpu_downlevel_default_limits() {
    let limits = wgpu::Limits::downlevel_defaults();
    let Some(ctx) = fresh_gpu(&Options::default().limits(Some(limits.clone()))) else { return };
    let got = ctx.device().limits();
    assert_eq!(
        got.max_storage_buffers_per_shader_stage,
        limits.max_storage_buffers_per_shader_stage
    );
    assert_eq!(ctx.max_binding_size(), limits.max_storage_buffer_binding_size);
    encodes_match_the_cpu(&ctx, "downlevel limits");
    // And with every chunking path forced: vocabulary chunks, token chunks, table chunks.
    encodes_match_the_cpu(&ctx.with_max_binding_size(1024), "downlevel limits, 1 KiB bindings");
    let spec = PeSpec::new(64).unwrap();
    let positions: Vec<u32> = (0..300).map(|k| k * 14_316_557).collect();
    let table = ctx.with_max_binding_size(4096).table(&spec, &positions).unwrap();
    let want = cpu::table(&spec, &positions);
    assert!(table.iter().zip(want.iter()).all(|(a, b)| a.to_bits() == b.to_bits()));
}

/// A device below what posenc's kernels need is refused with `Error::Limit` naming the limit
/// before anything is made on it: through `Options::limits` and on a device the caller
/// opened (`Context::from_device`), where wgpu's default error handler panicked at posenc's
/// first pipeline (round ten of the hostile probes). Each limit of the floor in turn one
/// below it, the rest at WebGPU's downlevel defaults, which pass.
#[test]
fn a_device_below_the_kernels_needs_is_refused_naming_the_limit() {
    let Some(ctx) = crate::support::gpu() else { return };
    let base = wgpu::Limits::downlevel_defaults();
    // Each limit one below what posenc needs.
    let lowered = |name: &str, need: u32| {
        let mut l = base.clone();
        let field = match name {
            "max_compute_invocations_per_workgroup" => &mut l.max_compute_invocations_per_workgroup,
            "max_compute_workgroup_size_x" => &mut l.max_compute_workgroup_size_x,
            "max_compute_workgroups_per_dimension" => &mut l.max_compute_workgroups_per_dimension,
            "max_storage_buffers_per_shader_stage" => &mut l.max_storage_buffers_per_shader_stage,
            "max_uniform_buffers_per_shader_stage" => &mut l.max_uniform_buffers_per_shader_stage,
            "max_bindings_per_bind_group" => &mut l.max_bindings_per_bind_group,
            "max_bind_groups" => &mut l.max_bind_groups,
            "max_compute_workgroup_storage_size" => &mut l.max_compute_workgroup_storage_size,
            other => panic!("a limit this test does not know: {other}"),
        };
        *field = need - 1;
        l
    };
    for (name, _, need) in posenc::gpu::limit_floor(&base) {
        let limits = lowered(name, need);
        let check = |what: &str, e: posenc::Error| match e {
            posenc::Error::Limit { limit_name, requested, .. } => {
                assert_eq!((limit_name, requested), (name, u64::from(need)), "{what}");
            }
            other => panic!("{what} with {name} {}: {other}", need - 1),
        };
        check(
            "Options::limits",
            Context::new(&Options::default().limits(Some(limits.clone()))).unwrap_err(),
        );
        let adapter = ctx.adapter().clone();
        let descriptor = wgpu::DeviceDescriptor { required_limits: limits, ..Default::default() };
        let (device, queue) = pollster::block_on(adapter.request_device(&descriptor)).unwrap();
        check(
            "from_device",
            Context::from_device(adapter, device, queue, &Options::default()).unwrap_err(),
        );
    }
}
