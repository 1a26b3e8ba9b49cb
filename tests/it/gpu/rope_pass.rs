//! The recorded RoPE step's routes: q and k in one dispatch (`shaders/rope_pass.wgsl`),
//! recorded into a caller's encoder or into a compute pass the caller has open, against the
//! CPU path and the host-array GPU path, bit for bit (both compile
//! `shaders/shared/rope_unit.wgsl`).

use half::{bf16, f16};
use ndarray::{Array2, Array4};
use posenc::encode::Dtype;
use posenc::gpu::{Context, Positions, RopePass, RopePassDescriptor};
use posenc::rope::{Element, Layout, Llama3, Pairing, RopeSpec, Scaling, Yarn};
use posenc::{Error, cpu};
use wgpu::util::DeviceExt;

use crate::support::rope::{assert_rope_same, hard_batch, tensor};
use crate::support::{Rng, gpu};

/// Where the tensors and positions sit in their buffers.
#[derive(Clone, Copy, Debug)]
enum Arrangement {
    /// q at 256, k right after it (16-byte aligned), positions 20 bytes into a buffer of
    /// their own.
    Apart,
    /// q and k as above, and the positions after k in the same buffer: the split route.
    SharedWithPositions,
}

/// How the step is recorded.
#[derive(Clone, Copy, Debug)]
enum Recording {
    /// `record_qk` into an encoder.
    Encoder,
    /// `record_qk_in` twice into one compute pass the test opened: the second rotation
    /// must see the first.
    TwiceInOnePass,
}

fn bytes_of<T: Element>(a: &Array4<T>) -> &[u8] {
    bytemuck::cast_slice(a.as_slice().unwrap())
}

/// The q and k tensors after a recorded step, and after Context::rope of each.
struct Rotated<T> {
    q: Array4<T>,
    k: Array4<T>,
}

#[allow(clippy::too_many_arguments)]
fn run<T: Element>(
    ctx: &Context,
    pass: &RopePass,
    q: &Array4<T>,
    k: &Array4<T>,
    starts: &[u32],
    arrangement: Arrangement,
    recording: Recording,
) -> Rotated<T> {
    let (qb, kb) = (bytes_of(q), bytes_of(k));
    let q_at = 256usize;
    let k_at = (q_at + qb.len()).next_multiple_of(16);
    let end = (k_at + kb.len()).next_multiple_of(16);
    let pos_bytes: &[u8] = bytemuck::cast_slice(starts);
    let mut contents = vec![0xCDu8; end];
    contents[q_at..q_at + qb.len()].copy_from_slice(qb);
    contents[k_at..k_at + kb.len()].copy_from_slice(kb);
    let shared = matches!(arrangement, Arrangement::SharedWithPositions);
    if shared {
        contents.extend_from_slice(pos_bytes);
    }
    contents.resize(contents.len() + 16, 0xCD);
    let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
    let data = ctx.device().create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("test.qk"),
        contents: &contents,
        usage,
    });
    // The positions of their own buffer start 20 bytes in (the kernels' pos_base 5), after
    // five positions no token has: a step that read from the buffer's start would turn by
    // those.
    let own_at = 20u64;
    let mut own_contents = vec![0xFFu8; own_at as usize];
    own_contents.extend_from_slice(pos_bytes);
    let own = ctx.device().create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("test.positions"),
        contents: &own_contents,
        usage,
    });
    let positions = if shared { data.slice(end as u64..) } else { own.slice(own_at..) };
    let (qs, ks) = (data.slice(q_at as u64..), data.slice(k_at as u64..));
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    match recording {
        Recording::Encoder => pass.record_qk(&mut encoder, qs, ks, positions).unwrap(),
        Recording::TwiceInOnePass => {
            let mut cpass = encoder.begin_compute_pass(&Default::default());
            pass.record_qk_in(&mut cpass, qs, ks, positions).unwrap();
            pass.record_qk_in(&mut cpass, qs, ks, positions).unwrap();
        }
    }
    ctx.queue().submit([encoder.finish()]);
    let all = ctx.read_buffer(&data).unwrap();
    assert!(all[..q_at].iter().all(|&b| b == 0xCD), "bytes before q");
    assert!(all[q_at + qb.len()..k_at].iter().all(|&b| b == 0xCD), "bytes between q and k");
    let after = if shared { end + pos_bytes.len() } else { end };
    assert!(all[k_at + kb.len()..end].iter().all(|&b| b == 0xCD), "bytes after k");
    assert!(all[after..].iter().all(|&b| b == 0xCD), "bytes at the end");
    let back = |at: usize, like: &Array4<T>| {
        let n = bytes_of(like).len();
        let v: Vec<T> = bytemuck::pod_collect_to_vec(&all[at..at + n]);
        Array4::from_shape_vec(like.raw_dim(), v).unwrap()
    };
    Rotated { q: back(q_at, q), k: back(k_at, k) }
}

fn same_bits<T: Element>(a: &Array4<T>, b: &Array4<T>) -> bool {
    a.iter().zip(b.iter()).all(|(x, y)| bytemuck::bytes_of(x) == bytemuck::bytes_of(y))
}

#[allow(clippy::too_many_arguments)]
fn check<T: Element>(
    ctx: &Context,
    what: &str,
    spec: &RopeSpec,
    layout: Layout,
    shape: (usize, usize),
    heads: (usize, usize),
    per_sequence: bool,
    seed: u64,
) {
    check_with::<T>(ctx, what, spec, layout, shape, heads, per_sequence, seed, None, None);
}

/// [`check`] around the cos/sin cache's `end`, with given first positions per sequence
/// (`Some`), or per token with the positions just below and at `end` first (`None`).
#[allow(clippy::too_many_arguments)]
fn check_at<T: Element>(
    ctx: &Context,
    what: &str,
    spec: &RopeSpec,
    layout: Layout,
    shape: (usize, usize),
    heads: (usize, usize),
    (end, starts): (u32, Option<&[u32]>),
    seed: u64,
) {
    let around = [end - 1, end, 0, end + 1, end - 2];
    let (per_sequence, at) = match starts {
        Some(_) => (true, None),
        None => (false, Some(&around[..])),
    };
    check_with::<T>(ctx, what, spec, layout, shape, heads, per_sequence, seed, starts, at);
}

#[allow(clippy::too_many_arguments)]
fn check_with<T: Element>(
    ctx: &Context,
    what: &str,
    spec: &RopeSpec,
    layout: Layout,
    (batch, len): (usize, usize),
    heads: (usize, usize),
    per_sequence: bool,
    seed: u64,
    sequence_starts: Option<&[u32]>,
    token_positions: Option<&[u32]>,
) {
    let dh = spec.head_dim() as usize;
    let shape = |h: usize| match layout {
        Layout::Blhd => [batch, len, h, dh],
        Layout::Bhld => [batch, h, len, dh],
    };
    let (q, k) = (tensor::<T>(shape(heads.0), seed), tensor::<T>(shape(heads.1), seed + 1));
    let mut rng = Rng::new(seed);
    let (positions, starts): (Array2<u32>, Vec<u32>) = if per_sequence {
        let starts: Vec<u32> = (0..batch).map(|b| [7, 70_000, u32::MAX - 1][b % 3]).collect();
        let p = Array2::from_shape_fn((batch, len), |(b, l)| starts[b].wrapping_add(l as u32));
        (p, starts)
    } else {
        let mut p = hard_batch(&mut rng, batch, len);
        if let Some(at) = token_positions {
            for (slot, &position) in p.iter_mut().zip(at) {
                *slot = position;
            }
        }
        let flat = p.iter().copied().collect();
        (p, flat)
    };
    let (positions, starts) = match sequence_starts {
        Some(given) => {
            let p = Array2::from_shape_fn((batch, len), |(b, l)| given[b].wrapping_add(l as u32));
            (p, given[..batch].to_vec())
        }
        None => (positions, starts),
    };
    let desc = RopePassDescriptor {
        shape: shape(heads.0),
        layout,
        dtype: T::DTYPE,
        positions: if per_sequence { Positions::PerSequence } else { Positions::PerToken },
        k_heads: heads.1,
    };
    let pass = ctx.rope_pass(spec, &desc).unwrap();
    assert!(pass.is_one_dispatch(), "{what}: one dispatch");
    assert_eq!(pass.dispatches(), 1, "{what}");
    let host = |x: &Array4<T>| ctx.rope(spec, x.view(), positions.view(), layout).unwrap();
    let cpu = |x: &Array4<T>| cpu::rope(spec, x.view(), positions.view(), layout).unwrap();
    let (q_host, k_host) = (host(&q), host(&k));
    let (q_cpu, k_cpu) = (cpu(&q), cpu(&k));
    let mut fused = None;
    for arrangement in [Arrangement::Apart, Arrangement::SharedWithPositions] {
        let what = format!("{what} {arrangement:?}");
        let got = run(ctx, &pass, &q, &k, &starts, arrangement, Recording::Encoder);
        for (name, g, h, c) in [("q", &got.q, &q_host, &q_cpu), ("k", &got.k, &k_host, &k_cpu)] {
            let what = format!("{what} {name}");
            assert!(same_bits(g, h), "{what}: the recorded step differs from Context::rope");
            assert_rope_same(&what, positions.view(), layout, g.view(), c.view());
        }
        // The split route (positions in the tensors' buffer) gives the one dispatch's bits.
        match &fused {
            None => fused = Some(got),
            Some(f) => {
                let f: &Rotated<T> = f;
                assert!(same_bits(&f.q, &got.q) && same_bits(&f.k, &got.k), "{what}: routes");
            }
        }
    }
    // Twice in one caller's pass: the second dispatch sees the first's writes.
    let twice = run(ctx, &pass, &q, &k, &starts, Arrangement::Apart, Recording::TwiceInOnePass);
    for (name, g, h) in [("q", &twice.q, &q_host), ("k", &twice.k, &k_host)] {
        let again = ctx.rope(spec, h.view(), positions.view(), layout).unwrap();
        assert!(same_bits(g, &again), "{what} {name}: twice in one pass");
    }
}

/// Llama 3's RoPE: head dim 128, base 500000, its frequency scaling.
fn llama3_128() -> RopeSpec {
    RopeSpec::new(128)
        .unwrap()
        .with_base(500_000.0)
        .unwrap()
        .with_scaling(Scaling::Llama3(Llama3::new(8.0, 1.0, 4.0, 8192)))
        .unwrap()
}

/// YaRN at head dim 64 for a length of 100: an attention factor other than 1.
fn yarn_64() -> RopeSpec {
    RopeSpec::new(64)
        .unwrap()
        .with_scaling(Scaling::Yarn(Yarn::new(4.0, 4096)))
        .unwrap()
        .with_seq_len(100)
        .unwrap()
}

#[test]
fn q_and_k_rotate_in_one_dispatch_with_the_other_paths_bits() {
    let Some(ctx) = gpu() else { return };
    let llama3 = llama3_128();
    let yarn = yarn_64();
    let specs = [
        ("llama3 128", llama3),
        ("yarn 64 (attention factor)", yarn),
        ("gptj 32", RopeSpec::new(32).unwrap().with_pairing(Pairing::Gptj)),
        ("phi-2 partial 80/32", RopeSpec::partial(80, 32).unwrap()),
        ("gptj partial 48/16", RopeSpec::partial(48, 16).unwrap().with_pairing(Pairing::Gptj)),
    ];
    // Both forms of the one dispatch: workgroup blocks (GPUs) and an invocation per unit
    // walking the heads (CPU adapters); each adapter runs its own by default.
    use posenc::gpu::AccessPattern;
    for access in [AccessPattern::Coalesced, AccessPattern::Adjacent] {
        let ctx = &ctx.with_access_pattern(access);
        for (n, (what, spec)) in specs.iter().enumerate() {
            for (j, layout) in [Layout::Blhd, Layout::Bhld].into_iter().enumerate() {
                let per_sequence = (n + j) % 2 == 1;
                let what = format!("{access:?} {what} {layout:?} per_sequence={per_sequence}");
                let seed = (10 * n + j) as u64;
                let shape = (3, 5);
                check::<f32>(ctx, &what, spec, layout, shape, (4, 2), per_sequence, seed);
                check::<bf16>(ctx, &what, spec, layout, shape, (4, 2), per_sequence, seed);
                check::<f16>(ctx, &what, spec, layout, shape, (3, 1), per_sequence, seed);
                // A decode step's shape: one token per sequence.
                check::<bf16>(ctx, &what, spec, layout, (5, 1), (4, 2), per_sequence, seed);
            }
        }
    }
}

/// Every form reads the cos/sin of positions below `RopePass::cached_positions` (on a
/// device whose binding holds them, `posenc::gpu::ROPE_PASS_CACHED_POSITIONS`) from a cache
/// built when the pass is prepared and computes the rest: a step whose positions cross the
/// cache's end, with and without an attention factor, keeps the CPU's bits on both sides,
/// in the GPU form and in the one for adapters that run shaders on CPU cores; so does a
/// cache cut short by a small binding.
#[test]
fn positions_on_both_sides_of_the_cos_sin_cache_keep_the_bits() {
    use posenc::gpu::{AccessPattern, ROPE_PASS_CACHED_POSITIONS};
    let Some(ctx) = gpu() else { return };
    let coalesced = &ctx.with_access_pattern(AccessPattern::Coalesced);
    let adjacent = &ctx.with_access_pattern(AccessPattern::Adjacent);
    let end = ROPE_PASS_CACHED_POSITIONS as u32;
    let llama3 = llama3_128();
    let desc = RopePassDescriptor {
        shape: [1, 11, 1, 128],
        layout: Layout::Blhd,
        dtype: Dtype::F32,
        positions: Positions::PerToken,
        k_heads: 1,
    };
    // Both forms cache (the one for CPU adapters since 2026-12-04).
    for form in [coalesced, adjacent] {
        assert_eq!(form.rope_pass(&llama3, &desc).unwrap().cached_positions(), end);
    }
    let yarn = yarn_64();
    for (form, pattern) in [(coalesced, "coalesced"), (adjacent, "adjacent")] {
        for (what, spec) in [("llama3 128", &llama3), ("yarn 64 (attention factor)", &yarn)] {
            // Sequence 0 runs from end - 5 to end + 5; the per-token batch holds end - 1,
            // end and others of hard_batch's.
            let starts: &[u32] = &[end - 5, 3, end];
            let what = format!("{what}, positions around {end}, {pattern}");
            let around = (end, Some(starts));
            check_at::<bf16>(form, &what, spec, Layout::Blhd, (3, 11), (4, 2), around, 90);
            check_at::<f32>(form, &what, spec, Layout::Bhld, (3, 11), (4, 2), around, 91);
            check_at::<f16>(form, &what, spec, Layout::Blhd, (2, 11), (3, 1), (end, None), 92);
        }
    }
    // A binding of llama3's 64 steps (512 bytes) and 100 cos/sin rows (512 bytes each).
    let small = &coalesced.with_max_binding_size(512 + 100 * 512);
    assert_eq!(small.rope_pass(&llama3, &desc).unwrap().cached_positions(), 100);
    let what = "llama3 128, a cache of 100 positions";
    check_at::<f32>(
        small,
        what,
        &llama3,
        Layout::Blhd,
        (2, 11),
        (1, 1),
        (100, Some(&[95, 100])),
        93,
    );
    check_at::<bf16>(small, what, &llama3, Layout::Bhld, (1, 11), (1, 1), (100, None), 94);
    // A memory budget holds the cache to a quarter of what it has left; the pass is still
    // prepared, and what the cache lacks is computed.
    let options = posenc::gpu::Options::default()
        .access_pattern(AccessPattern::Coalesced)
        .memory_budget(Some(1 << 20));
    let Some(budgeted) = crate::support::fresh_gpu(&options) else { return };
    let cached = budgeted.rope_pass(&llama3, &desc).unwrap().cached_positions();
    assert!((1..=(1 << 20) / 4 / 512).contains(&cached), "{cached} positions cached");
    let what = format!("llama3 128, a budget's cache of {cached} positions");
    let starts: &[u32] = &[cached - 3, 7];
    check_at::<f32>(
        &budgeted,
        &what,
        &llama3,
        Layout::Blhd,
        (2, 8),
        (2, 1),
        (cached, Some(starts)),
        95,
    );
}

/// What a pass cannot record is refused by name, before anything is recorded.
#[test]
fn rope_pass_routes_refuse_what_they_cannot_record() {
    let Some(ctx) = gpu() else { return };
    let desc = RopePassDescriptor {
        shape: [1, 2, 2, 64],
        layout: Layout::Blhd,
        dtype: Dtype::F32,
        positions: Positions::PerToken,
        k_heads: 0,
    };
    let q_only = ctx.rope_pass(&RopeSpec::new(64).unwrap(), &desc).unwrap();
    // A k too large to hold is refused naming k and its shape (round seven of the hostile
    // probes: it said "rope", "the tensor's element count", u64::MAX; round fourteen: a
    // product that overflowed was shown as u64::MAX).
    for k_heads in [usize::MAX, 1 << 56] {
        let huge = RopePassDescriptor { k_heads, ..desc.clone() };
        match ctx.rope_pass(&RopeSpec::new(64).unwrap(), &huge) {
            Err(e @ Error::TooLarge { op: "rope_pass", what, .. }) => {
                assert!(what.contains("k_heads"), "{what}");
                assert!(e.to_string().contains(&format!("(1, 2, {k_heads}, 64)")), "{e}");
            }
            other => panic!("k_heads {k_heads}: {other:?}"),
        }
    }
    // So is a q whose element count overflows, by the operation's name and the shape.
    for shape in [[1 << 40, 1 << 30, 1, 64], [1 << 20, 1 << 20, 1 << 20, 64]] {
        let huge = RopePassDescriptor { shape, ..desc.clone() };
        let e = ctx.rope_pass(&RopeSpec::new(64).unwrap(), &huge).unwrap_err();
        assert!(matches!(e, Error::TooLarge { op: "rope_pass", .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains(&format!("({}, {}, {}, 64)", shape[0], shape[1], shape[2])), "{e}");
        assert!(!text.contains("18446744073709551615"), "{e}");
    }
    let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
    let buffer = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("test.qk"),
        size: 4096,
        usage,
        mapped_at_creation: false,
    });
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    let (q, k, p) = (buffer.slice(..1024), buffer.slice(1024..2048), buffer.slice(2048..));
    let e = q_only.record_qk(&mut encoder, q, k, p).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { field: "k", .. }), "{e}");
    // k's offset must be a multiple of 16 bytes too, and its slice large enough.
    let with_k = ctx
        .rope_pass(&RopeSpec::new(64).unwrap(), &RopePassDescriptor { k_heads: 1, ..desc.clone() })
        .unwrap();
    let e = with_k.record_qk(&mut encoder, q, buffer.slice(1028..2048), p).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { field: "k", .. }), "{e}");
    let e = with_k.record_qk(&mut encoder, q, buffer.slice(1024..1056), p).unwrap_err();
    assert!(matches!(e, Error::Shape { what: "k", .. }), "{e}");
    // q and k overlapping in one buffer: a shared element would be rotated twice. q takes
    // bytes 0..1024 (2 tokens of 2 heads of 64 f32), k 512 from its start.
    for (k_at, what) in [(0, "k is q"), (512, "k starts inside q"), (1008, "k takes q's end")] {
        let k = buffer.slice(k_at..k_at + 512);
        let e = with_k.record_qk(&mut encoder, q, k, p).unwrap_err();
        assert!(matches!(e, Error::InvalidParameter { field: "k", .. }), "{what}: {e}");
        assert!(e.to_string().contains("q takes bytes 0..1024"), "{what}: {e}");
        let mut cpass = encoder.begin_compute_pass(&Default::default());
        let e = with_k.record_qk_in(&mut cpass, q, k, p).unwrap_err();
        assert!(matches!(e, Error::InvalidParameter { field: "k", .. }), "{what}: {e}");
    }
    // k before q, overlapping its start, is refused too; k right after q is not.
    let e = with_k.record_qk(&mut encoder, buffer.slice(512..1536), buffer.slice(256..768), p);
    assert!(matches!(e, Err(Error::InvalidParameter { field: "k", .. })), "{e:?}");
    with_k.record_qk(&mut encoder, q, buffer.slice(1024..1536), p).unwrap();
    // A 16-bit tensor of 7 elements (rotary dim 6 of head dim 7) is bound as 4 words: a
    // slice of its 14 bytes is refused, saying why; one of 16 is taken.
    let desc7 = RopePassDescriptor { shape: [1, 1, 1, 7], dtype: Dtype::F16, ..desc.clone() };
    let odd = ctx.rope_pass(&RopeSpec::partial(7, 6).unwrap(), &desc7).unwrap();
    let e = odd.record(&mut encoder, buffer.slice(..14), p).unwrap_err();
    assert!(matches!(e, Error::Shape { what: "data", .. }), "{e}");
    assert!(e.to_string().contains("the tensor's 14, rounded up to whole 4-byte words"), "{e}");
    odd.record(&mut encoder, buffer.slice(..16), p).unwrap();
    // The general kernel reads copies: not in a caller's pass.
    let general = RopeSpec::partial(10, 6).unwrap();
    let desc10 = RopePassDescriptor { shape: [1, 2, 2, 10], ..desc };
    let pass = ctx.rope_pass(&general, &desc10).unwrap();
    assert!(!pass.is_one_dispatch());
    {
        let mut cpass = encoder.begin_compute_pass(&Default::default());
        let e = pass.record_in(&mut cpass, q, p).unwrap_err();
        assert!(matches!(e, Error::InvalidParameter { field: "pass", .. }), "{e}");
        assert!(e.to_string().contains("RopePass::record"), "{e}");
    }
    ctx.queue().submit([encoder.finish()]);
    ctx.wait_idle().unwrap();
}

/// Every number of units per invocation of the GPU form (`Options::units`), with a token's
/// units spread over several workgroups and the last one partly idle, and a prefill's
/// token count (workgroups fitted to the token), gives the bits of the other paths.
#[test]
fn every_units_per_invocation_of_the_one_dispatch_keeps_the_bits() {
    use posenc::gpu::{AccessPattern, Options};
    let llama3 = llama3_128();
    let gptj = RopeSpec::partial(80, 32).unwrap().with_pairing(Pairing::Gptj);
    for units in [1, 2, 4, 8] {
        let options =
            Options::default().access_pattern(AccessPattern::Coalesced).units(Some(units));
        let Some(ctx) = crate::support::fresh_gpu(&options) else { return };
        for (n, (what, spec)) in
            [("llama3 128", &llama3), ("gptj partial 80/32", &gptj)].into_iter().enumerate()
        {
            let what = format!("units {units} {what}");
            let seed = 500 + n as u64;
            // 33 heads: 264 - 1056 units per token, several blocks, the last partly idle.
            let heads = (24, 9);
            check::<f32>(&ctx, &what, spec, Layout::Blhd, (2, 3), heads, false, seed);
            check::<bf16>(&ctx, &what, spec, Layout::Bhld, (2, 3), heads, true, seed);
            check::<f16>(&ctx, &what, spec, Layout::Blhd, (1, 2), heads, false, seed);
        }
        // From 256 tokens on the workgroups fit the token's units (shaders.rs,
        // `rope_pass_workgroup`): 40 heads of 8 bf16 units take two blocks of 160, 33 heads
        // of 16 f32 units three of 192 (48 idle).
        let what = format!("units {units} llama3 128, {} tokens", 2 * 130);
        check::<bf16>(&ctx, &what, &llama3, Layout::Blhd, (2, 130), (32, 8), true, 510);
        check::<f32>(&ctx, &what, &llama3, Layout::Bhld, (2, 130), (24, 9), false, 511);
    }
}

/// Every head group of the head-group form (`Options::rope_heads`): one head, groups that
/// do not divide q's and k's heads (the last group partly past k's end, a group holding q's
/// last heads and k's first), a group larger than all the heads, on both sides of the
/// cos/sin cache's end, keeps the bits of the other paths.
#[test]
fn every_head_group_of_the_one_dispatch_keeps_the_bits() {
    use posenc::gpu::{MAX_ROPE_HEAD_GROUP, ROPE_PASS_CACHED_POSITIONS};
    let Some(ctx) = gpu() else { return };
    let llama3 = llama3_128();
    let yarn = yarn_64();
    let gptj = RopeSpec::partial(80, 32).unwrap().with_pairing(Pairing::Gptj);
    let phi2 = RopeSpec::partial(80, 32).unwrap();
    let end = ROPE_PASS_CACHED_POSITIONS as u32;
    for group in [1, 3, 8, MAX_ROPE_HEAD_GROUP] {
        let ctx = &ctx.with_rope_heads(Some(group));
        assert_eq!(ctx.chosen_rope_heads(), Some(group));
        let specs = [
            ("llama3 128", &llama3),
            ("yarn 64 (attention factor)", &yarn),
            ("gptj partial 80/32", &gptj),
            ("phi-2 partial 80/32", &phi2),
        ];
        for (n, (what, spec)) in specs.into_iter().enumerate() {
            let what = format!("{group} heads per invocation, {what}");
            let seed = 700 + n as u64;
            // 5 + 2 heads: groups of 3 hold q's last and k's first heads, and the third
            // group has one head.
            let heads = (5, 2);
            let per_sequence = n % 2 == 1;
            check::<f32>(ctx, &what, spec, Layout::Blhd, (2, 3), heads, per_sequence, seed);
            check::<bf16>(ctx, &what, spec, Layout::Bhld, (2, 3), heads, !per_sequence, seed);
            check::<f16>(ctx, &what, spec, Layout::Blhd, (3, 2), (3, 1), per_sequence, seed);
            check::<bf16>(ctx, &what, spec, Layout::Bhld, (5, 1), heads, per_sequence, seed);
        }
        // The head-group form reads the cache too, and computes the positions past it.
        let desc = RopePassDescriptor {
            shape: [1, 11, 1, 128],
            layout: Layout::Blhd,
            dtype: Dtype::F32,
            positions: Positions::PerToken,
            k_heads: 1,
        };
        assert_eq!(ctx.rope_pass(&llama3, &desc).unwrap().cached_positions(), end);
        let what = format!("{group} heads per invocation, llama3 128, positions around {end}");
        let starts: &[u32] = &[end - 5, 3, end];
        check_at::<bf16>(
            ctx,
            &what,
            &llama3,
            Layout::Blhd,
            (3, 11),
            (4, 2),
            (end, Some(starts)),
            720,
        );
        check_at::<f16>(ctx, &what, &yarn, Layout::Bhld, (2, 11), (3, 1), (end, None), 721);
    }
    // q alone (`record`) on a pass prepared with k: only q's groups are dispatched, and k's
    // buffer is never bound.
    for group in [1, 3] {
        let ctx = &ctx.with_rope_heads(Some(group));
        let desc = RopePassDescriptor {
            shape: [2, 3, 5, 128],
            layout: Layout::Blhd,
            dtype: Dtype::Bf16,
            positions: Positions::PerToken,
            k_heads: 2,
        };
        let pass = ctx.rope_pass(&llama3, &desc).unwrap();
        let q = tensor::<bf16>(desc.shape, 730);
        let positions = Array2::from_shape_fn((2, 3), |(b, l)| (b * 5000 + l * 7) as u32);
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
        let init = |label, contents: &[u8]| {
            ctx.device().create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents,
                usage,
            })
        };
        let data = init("test.q", bytes_of(&q));
        let pos = init("test.positions", bytemuck::cast_slice(positions.as_slice().unwrap()));
        let mut encoder = ctx.device().create_command_encoder(&Default::default());
        pass.record(&mut encoder, data.slice(..), pos.slice(..)).unwrap();
        ctx.queue().submit([encoder.finish()]);
        let v: Vec<bf16> = bytemuck::pod_collect_to_vec(&ctx.read_buffer(&data).unwrap());
        let got = Array4::from_shape_vec(q.raw_dim(), v).unwrap();
        let want = cpu::rope(&llama3, q.view(), positions.view(), Layout::Blhd).unwrap();
        let what = format!("{group} heads per invocation, q alone");
        assert_rope_same(&what, positions.view(), Layout::Blhd, got.view(), want.view());
    }
    // Out of range, the choice is ignored.
    for ignored in [0, MAX_ROPE_HEAD_GROUP + 1] {
        assert_eq!(ctx.with_rope_heads(Some(ignored)).chosen_rope_heads(), None);
    }
}

/// With wgpu's loop bounding put back in every kernel (`Options::bound_all_loops`), each
/// form of the one dispatch (blocks, head groups, the CPU adapters' form) keeps the bits;
/// so does the default build, whose RoPE kernels go without it.
#[test]
fn every_form_keeps_the_bits_with_every_loop_bounded() {
    use posenc::gpu::{AccessPattern, Options};
    let Some(shared) = gpu() else { return };
    assert!(!shared.bounds_all_loops() || std::env::var_os("POSENC_GPU_LOOP_BOUNDS").is_some());
    let options = Options::from_env().unwrap().bound_all_loops(true);
    let llama3 = llama3_128();
    let phi2 = RopeSpec::partial(80, 32).unwrap();
    for access in [AccessPattern::Coalesced, AccessPattern::Adjacent] {
        let ctx = Context::new(&options.clone().access_pattern(access)).unwrap();
        assert!(ctx.bounds_all_loops());
        for heads in [None, Some(3)] {
            let ctx = &ctx.with_rope_heads(heads);
            let what = format!("every loop bounded, {access:?}, head groups {heads:?}");
            check::<bf16>(ctx, &what, &llama3, Layout::Blhd, (2, 5), (5, 2), false, 740);
            check::<f16>(ctx, &what, &phi2, Layout::Bhld, (3, 2), (3, 1), true, 741);
        }
    }
}

/// One multimodal case of `a_multimodal_step_rotates_as_the_cpu_with_a_position_per_axis`
/// in storage type `T`: an image's (time, row, column) at the first four tokens of each
/// sequence (sequence 0's small, in the GPU forms' cos/sin cache; sequence 1's from 4095,
/// its last row and column just past the cache's end while its time is in it), text
/// positions (hard_batch's, some far past it) after them.
fn check_multimodal<T: Element>(
    ctx: &Context,
    what: &str,
    spec: &RopeSpec,
    mrope: &posenc::rope::MultimodalRope,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let (batch, len, heads, k_heads) = (2, 7, 4, 2);
    let dh = spec.head_dim() as usize;
    let text = hard_batch(&mut rng, batch, len);
    let positions = ndarray::Array3::from_shape_fn((3, batch, len), |(a, b, l)| {
        let base = [2, posenc::gpu::ROPE_PASS_CACHED_POSITIONS as u32 - 1][b];
        if l < 4 { base + [0, (l / 2) as u32, (l % 2) as u32][a] } else { text[[b, l]] }
    });
    let flat: Vec<u32> = positions.iter().copied().collect();
    for layout in [Layout::Blhd, Layout::Bhld] {
        let shape = |h| match layout {
            Layout::Blhd => [batch, len, h, dh],
            Layout::Bhld => [batch, h, len, dh],
        };
        let desc = RopePassDescriptor {
            shape: shape(heads),
            layout,
            dtype: T::DTYPE,
            positions: Positions::PerToken,
            k_heads,
        };
        let pass = ctx.rope_pass_multimodal(spec, mrope, &desc).unwrap();
        let what = format!("{what} {:?} {layout:?}", T::DTYPE);
        assert_eq!(pass.positions_bytes(), 3 * (batch * len) as u64 * 4);
        assert_eq!(pass.multimodal(), Some(mrope));
        // The vec4 kernel's head dims take the one dispatch, as the 1-D pass does.
        let one_d = ctx.rope_pass(spec, &desc).unwrap();
        assert_eq!(pass.is_one_dispatch(), one_d.is_one_dispatch(), "{what}");
        assert_eq!(pass.is_one_dispatch(), spec.rotary_dim().is_multiple_of(16), "{what}");
        assert_eq!(pass.cached_positions(), one_d.cached_positions(), "{what}");
        let q = tensor::<T>(shape(heads), seed + 5);
        let k = tensor::<T>(shape(k_heads), seed + 6);
        let p = positions.view();
        let want_q = cpu::rope_multimodal(spec, mrope, q.view(), p, layout).unwrap();
        let want_k = cpu::rope_multimodal(spec, mrope, k.view(), p, layout).unwrap();
        for arrangement in [Arrangement::Apart, Arrangement::SharedWithPositions] {
            let got = run(ctx, &pass, &q, &k, &flat, arrangement, Recording::Encoder);
            let text = positions.index_axis(ndarray::Axis(0), 0);
            let what = format!("{what} {arrangement:?}");
            assert_rope_same(&what, text, layout, got.q.view(), want_q.view());
            assert_rope_same(&what, text, layout, got.k.view(), want_k.view());
        }
        // Twice in one pass: the second rotation sees the first (the vec4 kernel's; the
        // general one reads a copy, made outside a compute pass).
        if pass.data_alignment() == 16 {
            let twice =
                run(ctx, &pass, &q, &k, &flat, Arrangement::Apart, Recording::TwiceInOnePass);
            let again = cpu::rope_multimodal(spec, mrope, want_q.view(), p, layout).unwrap();
            assert!(same_bits(&twice.q, &again), "{what} twice");
        }
        // The 1-D pass at the time axis's positions gives other values for the image.
        let text_only: Vec<u32> = flat[..batch * len].to_vec();
        let got = run(ctx, &one_d, &q, &k, &text_only, Arrangement::Apart, Recording::Encoder);
        assert!(!same_bits(&got.q, &want_q), "{what}: the axes changed nothing");
    }
}

/// A multimodal RoPE's recorded step (positions `[3, B, L]` in a device buffer) rotates q
/// and k as `cpu::rope_multimodal` does, bit for bit: the three M-RoPE layouts, both tensor
/// layouts, each storage type, the one-dispatch route in its three forms (workgroup blocks
/// and head groups, which read the cos/sin cache below its end and compute them past it, and
/// the form for CPU adapters) and the split route (a head dim the vec4 kernel does not
/// take, or positions in q's buffer), into an encoder and twice into one open compute pass;
/// per-sequence positions and axes of another rotary dim are refused.
#[test]
fn a_multimodal_step_rotates_as_the_cpu_with_a_position_per_axis() {
    use posenc::gpu::AccessPattern;
    use posenc::rope::{Mrope, MultimodalRope};
    let Some(ctx) = gpu() else { return };
    let cases = [
        (RopeSpec::new(128).unwrap().with_base(1e6).unwrap(), Mrope::Sections, [16, 24, 24]),
        (yarn_64(), Mrope::Interleaved, [12, 10, 10]),
        (
            RopeSpec::partial(40, 24).unwrap().with_pairing(Pairing::Gptj),
            Mrope::Sections,
            [4, 4, 4],
        ),
        // Height and width of different counts, and runs that start inside a unit.
        (RopeSpec::new(128).unwrap().with_base(1e4).unwrap(), Mrope::Sections, [3, 40, 21]),
        (RopeSpec::new(128).unwrap(), Mrope::Interleaved, [30, 19, 15]),
        (
            RopeSpec::new(128).unwrap().with_base(5e5).unwrap().with_pairing(Pairing::Gptj),
            Mrope::Alternating,
            [22, 22, 20],
        ),
    ];
    let forms = [
        ("blocks", ctx.with_access_pattern(AccessPattern::Coalesced).with_rope_heads(None)),
        ("head groups of 3", ctx.with_rope_heads(Some(3))),
        ("heads", ctx.with_access_pattern(AccessPattern::Adjacent).with_rope_heads(None)),
    ];
    for (n, (spec, layout_m, section)) in cases.into_iter().enumerate() {
        let mrope = MultimodalRope::new(layout_m, section, spec.rotary_dim()).unwrap();
        for (form, ctx) in &forms {
            let seed = 41 + n as u64;
            let what = format!("{layout_m:?} r {} {form}", spec.rotary_dim());
            check_multimodal::<bf16>(ctx, &what, &spec, &mrope, seed);
            check_multimodal::<f32>(ctx, &what, &spec, &mrope, seed);
            check_multimodal::<f16>(ctx, &what, &spec, &mrope, seed);
        }
    }
    // Refused: per-sequence positions, and axes of another rotary dim.
    let spec = RopeSpec::new(64).unwrap();
    let mrope = MultimodalRope::new(Mrope::Sections, [8, 12, 12], 64).unwrap();
    let mut desc = RopePassDescriptor {
        shape: [1, 2, 2, 64],
        layout: Layout::Blhd,
        dtype: Dtype::F32,
        positions: Positions::PerSequence,
        k_heads: 0,
    };
    let e = ctx.rope_pass_multimodal(&spec, &mrope, &desc).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { field: "positions", .. }), "{e}");
    desc.positions = Positions::PerToken;
    let narrow = MultimodalRope::new(Mrope::Sections, [4, 6, 6], 32).unwrap();
    let e = ctx.rope_pass_multimodal(&spec, &narrow, &desc).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { field: "mrope", .. }), "{e}");
}
