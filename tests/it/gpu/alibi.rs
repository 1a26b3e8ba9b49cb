//! The GPU ALiBi bias against its CPU twin, bit for bit, on whatever adapter wgpu picks (CI
//! runs this file on lavapipe and on llvmpipe); cpu::alibi ties the CPU to the formula.

use crate::support::{Rng, assert_bits_eq, gpu};
use posenc::alibi::{self, AlibiSpec, Form};

fn spec(heads: u32, len: u64, kv_len: Option<u64>, offset: u32, form: Form) -> AlibiSpec {
    let s = AlibiSpec::new(heads, len).unwrap().with_offset(offset).unwrap().with_form(form);
    match kv_len {
        Some(kv) => s.with_kv_len(kv).unwrap(),
        None => s,
    }
}

/// The bias of `spec` on `ctx` in both access patterns against the CPU, bit for bit: rows of
/// whole vec4s take a four-key kernel (GPUs, the coalesced pattern: `alibi_flat`, the vec4s
/// end to end; CPU adapters: `alibi_x4`, blocks of rows), other rows the one-value kernel
/// (GPUs' one row per workgroup row; CPU adapters' blocks of rows and several keys per
/// thread).
fn check(ctx: &posenc::gpu::Context, spec: &AlibiSpec) {
    use posenc::gpu::AccessPattern;
    for access in [AccessPattern::Coalesced, AccessPattern::Adjacent] {
        check_one(&ctx.with_access_pattern(access), spec);
    }
}

fn check_one(ctx: &posenc::gpu::Context, spec: &AlibiSpec) {
    let g = ctx.alibi_bias(spec).unwrap();
    let c = alibi::bias_cpu(spec).unwrap();
    assert_eq!(g.dim(), spec.shape());
    let what = format!(
        "heads={} len={} kv_len={} offset={} {:?} (rows are head * len + query)",
        spec.heads(),
        spec.len(),
        spec.kv_len(),
        spec.offset(),
        spec.form()
    );
    assert_bits_eq(&what, g.as_slice().unwrap(), c.as_slice().unwrap(), spec.kv_len() as usize);
}

#[test]
fn gpu_equals_cpu_bit_for_bit_for_odd_sizes_and_huge_positions() {
    let Some(ctx) = gpu() else { return };
    for form in [Form::Symmetric, Form::Causal] {
        for (heads, len, kv_len, offset) in [
            (1, 1, None, 0),
            (12, 37, None, 0),
            (8, 255, Some(257), 0),
            (5, 3, Some(1000), 0),
            (16, 70, Some(3), 0),
            (96, 17, None, 100),
            (8, 9, Some(300), (1 << 24) - 5),
            (8, 7, Some(64), (1 << 25) - 3),
            (40, 4, Some(300), (1 << 31) - 2),
            (7, 5, Some(513), u32::MAX - 4),
        ] {
            check(ctx, &spec(heads, len, kv_len, offset, form));
        }
    }
}

/// Dispatches of whole vec4 rows, few (a decode step's) and many, around the 1024 rows
/// where GPUs once switched forms and around the flat grid's workgroups of 256 vec4s
/// (rows of 64 keys: 16 vec4s; of 2048: 512), bit for bit.
#[test]
fn whole_vec4_rows_of_every_count_keep_the_bits() {
    let Some(ctx) = gpu() else { return };
    for form in [Form::Symmetric, Form::Causal] {
        // 1023, 1024 and 1088 rows (heads * len) of 64 or 128 keys; a decode step's 32 of
        // 2048.
        for (heads, len, kv_len, offset) in [
            (31, 33, Some(64), 0),
            (16, 64, None, 5),
            (17, 64, Some(128), 1 << 24),
            (32, 1, Some(2048), 2047),
        ] {
            check(ctx, &spec(heads, len, kv_len, offset, form));
        }
    }
}

#[test]
fn gpu_equals_cpu_for_random_specs() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(31);
    for _ in 0..20 {
        let heads = 1 + rng.below(200) as u32;
        let len = 1 + rng.below(40);
        let kv_len = 1 + rng.below(600);
        let offset = (rng.next_u32()).min((u64::from(u32::MAX) + 1 - len) as u32);
        let form = if rng.below(2) == 0 { Form::Symmetric } else { Form::Causal };
        check(ctx, &spec(heads, len, Some(kv_len), offset, form));
    }
}

#[test]
fn gpu_chunks_tensors_larger_than_the_binding_cap() {
    let Some(ctx) = gpu() else { return };
    // 4 KiB bindings hold 1024 values: whole rows of 300 keys, three rows per chunk, chunks
    // straddling heads.
    let capped = ctx.with_max_binding_size(4096);
    check(&capped, &spec(7, 5, Some(300), 1000, Form::Causal));
    // 256-byte bindings hold 64 values: each row of 1000 keys in 16 pieces.
    let tiny = ctx.with_max_binding_size(256);
    check(&tiny, &spec(3, 4, Some(1000), u32::MAX - 3, Form::Symmetric));
    // 65-value bindings: pieces of 65 keys take the one-value kernel, and each row's last
    // piece (keys 1040 - 1051, whole vec4s) a four-key one, both in one call.
    let odd = ctx.with_max_binding_size(4 * 65);
    check(&odd, &spec(3, 2, Some(1052), 17, Form::Causal));
    // More heads than one binding's worth of slopes: each chunk binds only its own.
    check(&tiny, &spec(200, 2, Some(3), 7, Form::Causal));
    // Keys 2^24 from the query and nearer, the boundary between the kernel's two routes
    // (product and integer) inside a chunk of 64 keys (keys 448 - 511). 12 heads: slopes
    // that are not powers of two, for which the two routes differ past 2^24.
    for form in [Form::Symmetric, Form::Causal] {
        check(&tiny, &spec(12, 3, Some(1000), (1 << 24) + 500, form));
    }
}

/// Keys more than 2^24 - 1 above the query (symmetric; the causal form's zeros there too),
/// a row longer than one workgroup row's loop covers in one pass. One head's slope, 2^-8,
/// gives the same bits by either route, so this checks the columns; the boundary test above
/// checks the routes.
#[test]
fn gpu_equals_cpu_for_keys_far_above_the_query() {
    let Some(ctx) = gpu() else { return };
    for form in [Form::Symmetric, Form::Causal] {
        check(ctx, &spec(1, 2, Some((1 << 24) + 40), 0, form));
    }
}

#[test]
fn gpu_rows_longer_than_the_x_grid_loop_and_many_rows_fold() {
    let Some(ctx) = gpu() else { return };
    // 1024 workgroups of 256 cover 262144 keys; longer rows loop.
    check(ctx, &spec(2, 1, Some(600_001), 4_000_000_000, Form::Symmetric));
    // 70000 rows of one key: more rows than 65535 workgroups along y.
    check(ctx, &spec(7, 10_000, Some(1), 12, Form::Causal));
}

#[test]
fn gpu_result_can_stay_on_the_device() {
    let Some(ctx) = gpu() else { return };
    for (c, spec) in [
        (ctx.clone(), spec(12, 33, Some(70), 5, Form::Causal)),
        // Chunked: pieces copied into the result buffer.
        (ctx.with_max_binding_size(512), spec(3, 5, Some(200), 9, Form::Symmetric)),
    ] {
        let buffer = c.alibi_bias_to_buffer(&spec).unwrap();
        let bytes = spec.n_values() as u64 * 4;
        assert_eq!(buffer.size(), bytes);
        let staging = c.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("posenc.test.staging"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = c.device().create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&buffer, 0, &staging, 0, bytes);
        c.queue().submit([encoder.finish()]);
        staging.slice(..).map_async(wgpu::MapMode::Read, |r| r.unwrap());
        c.device().poll(wgpu::PollType::wait_indefinitely()).unwrap();
        let got: Vec<f32> =
            bytemuck::cast_slice(&staging.slice(..).get_mapped_range().unwrap()).to_vec();
        let want = alibi::bias_cpu(&spec).unwrap();
        assert_bits_eq("to_buffer", &got, want.as_slice().unwrap(), spec.kv_len() as usize);
    }
}

#[test]
fn gpu_empty_and_oversized_requests_do_no_work() {
    let Some(ctx) = gpu() else { return };
    let empty = spec(4, 0, None, 77, Form::Causal);
    assert_eq!(ctx.alibi_bias(&empty).unwrap().dim(), (4, 0, 77));
    assert_eq!(ctx.alibi_bias_to_buffer(&empty).unwrap().size(), 4);
    let big = AlibiSpec::new(64, 8192).unwrap();
    let err = ctx.alibi_bias(&big).unwrap_err();
    assert!(matches!(err, posenc::Error::Limit { requested: 4_294_967_296, .. }), "{err}");
}

/// A binding cap below one 4-byte word is one word: a bias is computed one value per chunk
/// (it divided by zero before), and an encode whose rows do not fit is refused, not a
/// panic.
#[test]
fn a_binding_cap_below_one_word_is_one_word() {
    let Some(base) = gpu() else { return };
    for cap in [0, 1, 3, 4] {
        let ctx = base.with_max_binding_size(cap);
        assert_eq!(ctx.max_binding_size(), 4, "cap {cap}");
        check(&ctx, &spec(2, 3, None, 0, Form::Causal));
        let spec = posenc::PeSpec::new(4).unwrap();
        let t = ndarray::Array2::<f32>::zeros((3, 4));
        let table = ctx.upload_table(posenc::encode::Embeddings::F32(t.view()));
        assert!(matches!(table, Err(posenc::Error::Limit { .. })), "cap {cap}: {table:?}");
        let e = ctx.table(&spec, &[0, 1]).map(drop);
        assert!(matches!(e, Err(posenc::Error::Limit { .. })), "cap {cap}: {e:?}");
    }
}
