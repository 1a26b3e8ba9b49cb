//! RoPE on the GPU against its CPU twin, on whatever adapter wgpu picks (CI runs this file on
//! lavapipe and on llvmpipe): the cos/sin tables and the rotated tensors bit for bit (the
//! kernels round each product before a sum takes it, so no backend contracts them), for both
//! layouts, both pairings, partial rotary, odd head dims, every scaling scheme and
//! all three element types, through both rotation kernels (the vec4 in-place one for
//! head_dim % 8 == 0 and rotary_dim % 16 == 0, the general one otherwise) and every
//! chunking path, on host arrays and device buffers.

use crate::support::rope::{assert_rope_same, dtype_name, hard_batch, tensor, token_major};
use crate::support::{Rng, flush_subnormal, gpu, is_flushed, may_flush_subnormals};
use half::{bf16, f16};
use ndarray::{Array2, Array4};
use posenc::gpu::{AccessPattern, Context};
use posenc::rope::{
    Dtype, Element, Layout, Llama3, LongRope, Pairing, Proportional, RopeSpec, Scaling, Yarn,
};
use posenc::{Error, cpu, positions};

/// Specs covering every scheme, pairing, partial rotary and odd head dims.
fn specs() -> Vec<(&'static str, RopeSpec)> {
    let llama3 = Scaling::Llama3(Llama3::new(8.0, 1.0, 4.0, 8192));
    let mut yarn = Yarn::new(40.0, 4096);
    yarn.mscale = Some(1.0);
    yarn.mscale_all_dim = Some(0.707);
    let long = LongRope::new(
        (0..6).map(|i| 1.0 + 0.25 * i as f64).collect(),
        (0..6).map(|i| 2.0 + 3.0 * i as f64).collect(),
        Some(32.0),
        1000,
    );
    vec![
        ("plain 64", RopeSpec::new(64).unwrap()),
        (
            "gptj partial 48/64 linear",
            RopeSpec::partial(64, 48)
                .unwrap()
                .with_pairing(Pairing::Gptj)
                .with_scaling(Scaling::Linear { factor: 4.0 })
                .unwrap(),
        ),
        (
            "odd head 7 r 4 yarn",
            RopeSpec::partial(7, 4).unwrap().with_scaling(Scaling::Yarn(yarn)).unwrap(),
        ),
        (
            "odd head 9 r 6 gptj dynamic",
            RopeSpec::partial(9, 6)
                .unwrap()
                .with_pairing(Pairing::Gptj)
                .with_scaling(Scaling::Dynamic { factor: 2.0, max_position_embeddings: 64 })
                .unwrap(),
        ),
        (
            "llama3 130/128 base 5e5",
            RopeSpec::partial(130, 128)
                .unwrap()
                .with_base(500000.0)
                .unwrap()
                .with_scaling(llama3)
                .unwrap(),
        ),
        (
            "x4 llama3 128",
            RopeSpec::new(128)
                .unwrap()
                .with_base(500000.0)
                .unwrap()
                .with_scaling(Scaling::Llama3(Llama3::new(8.0, 1.0, 4.0, 8192)))
                .unwrap(),
        ),
        (
            "x4 gptj partial 32/40 yarn",
            RopeSpec::partial(40, 32)
                .unwrap()
                .with_pairing(Pairing::Gptj)
                .with_scaling(Scaling::Yarn(Yarn::new(8.0, 512)))
                .unwrap(),
        ),
        ("general even 16/8", RopeSpec::partial(16, 8).unwrap()),
        ("longrope 12", RopeSpec::new(12).unwrap().with_scaling(Scaling::LongRope(long)).unwrap()),
        (
            "x4 proportional 64 of 128, factor 2",
            RopeSpec::new(128)
                .unwrap()
                .with_base(1e6)
                .unwrap()
                .with_scaling(Scaling::Proportional(Proportional::new(2.0, 0.5)))
                .unwrap(),
        ),
        (
            "gptj proportional 3 of 7 pairs in head 18",
            RopeSpec::partial(18, 14)
                .unwrap()
                .with_pairing(Pairing::Gptj)
                .with_scaling(Scaling::Proportional(Proportional::new(1.0, 0.45)))
                .unwrap(),
        ),
    ]
}

fn check<T: Element>(
    ctx: &Context,
    what: &str,
    spec: &RopeSpec,
    shape: [usize; 4],
    layout: Layout,
    positions: &Array2<u32>,
    seed: u64,
) {
    let x = tensor::<T>(shape, seed);
    let g = ctx.rope(spec, x.view(), positions.view(), layout).unwrap();
    let c = cpu::rope(spec, x.view(), positions.view(), layout).unwrap();
    let what = format!("{what} {} {layout:?} {shape:?}", dtype_name::<T>());
    assert_rope_same(&what, positions.view(), layout, g.view(), c.view());
}

fn shape_of(layout: Layout, b: usize, l: usize, h: usize, dh: usize) -> [usize; 4] {
    match layout {
        Layout::Blhd => [b, l, h, dh],
        Layout::Bhld => [b, h, l, dh],
    }
}

#[test]
fn gpu_cos_sin_tables_equal_cpu_bit_for_bit() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(21);
    let positions = crate::support::hard_positions(&mut rng, 100);
    for (what, spec) in specs() {
        let freqs = spec.frequencies(5000);
        let g = ctx.rope_cos_sin(&freqs, &positions).unwrap();
        let c = cpu::rope_cos_sin(&freqs, &positions);
        assert_eq!(g.dim(), (positions.len(), spec.n_freqs() as usize, 2));
        crate::support::assert_bits_eq(what, g.as_slice().unwrap(), c.as_slice().unwrap(), 2);
    }
    // An attention factor other than 1 is applied identically on both.
    let mut yarn = Yarn::new(16.0, 2048);
    yarn.attention_factor = Some(1.37);
    let spec = RopeSpec::new(32).unwrap().with_scaling(Scaling::Yarn(yarn)).unwrap();
    let freqs = spec.frequencies(0);
    assert_eq!(freqs.attention_factor(), 1.37f32);
    let g = ctx.rope_cos_sin(&freqs, &positions).unwrap();
    let c = cpu::rope_cos_sin(&freqs, &positions);
    crate::support::assert_bits_eq("af 1.37", g.as_slice().unwrap(), c.as_slice().unwrap(), 2);
}

#[test]
fn gpu_matches_cpu_for_every_spec_layout_and_dtype() {
    let Some(ctx) = gpu() else { return };
    // f16 in the kernels of both access patterns, whose f16 widenings differ (the adjacent
    // pattern's by the general form alone): on any adapter, both are checked.
    let patterns = [AccessPattern::Coalesced, AccessPattern::Adjacent];
    let f16_contexts = patterns.map(|a| ctx.with_access_pattern(a));
    let mut rng = Rng::new(22);
    for (k, (what, spec)) in specs().into_iter().enumerate() {
        let dh = spec.head_dim() as usize;
        for layout in [Layout::Blhd, Layout::Bhld] {
            // Odd sizes, not multiples of any workgroup.
            let (b, l, h) =
                (1 + rng.below(3) as usize, 1 + rng.below(7) as usize, 1 + rng.below(5) as usize);
            let positions = hard_batch(&mut rng, b, l);
            let shape = shape_of(layout, b, l, h, dh);
            let seed = 100 + k as u64;
            check::<f32>(ctx, what, &spec, shape, layout, &positions, seed);
            for ctx in &f16_contexts {
                check::<f16>(ctx, what, &spec, shape, layout, &positions, seed);
            }
            check::<bf16>(ctx, what, &spec, shape, layout, &positions, seed);
        }
    }
}

/// Inputs at the edges of the range (infinities, the largest finite values, signed zeros,
/// subnormals) give the CPU's bits on the GPU, but for which NaN an infinity turns into
/// (`inf * 0`, `inf - inf`): sign and payload are the hardware's (docs/rope.md), and for
/// subnormals on a GPU that flushes them, which may give the bits of flushing every
/// subnormal input and result to a zero of its sign (a zero's sign free: `-0 - -0` is
/// `+0`): WGSL lets an implementation flush f32 subnormals, and NVIDIA's Vulkan driver does
/// (an H200, 2026-12-04: `MIN_POSITIVE / 8` rotated at position 0 came out 0). Adapters
/// that run shaders on CPU cores keep subnormals, and must give the CPU's bits everywhere.
/// A product past f32's range is infinite before the sum, on both: with yarn's attention
/// factor over 1, `f32::MAX * (af cos 13)` (a stranger's case, 2026-12-02).
#[test]
fn gpu_special_values_equal_the_cpus_but_for_nans_and_flushes() {
    let Some(ctx) = gpu() else { return };
    let specials = [
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        -f32::MAX,
        0.0,
        -0.0,
        f32::MIN_POSITIVE / 8.0,
        1.0,
        -3.5,
        65504.0,
    ];
    let mut yarn = Yarn::new(4.0, 32768);
    yarn.attention_factor = None;
    let specs = [
        ("default", RopeSpec::new(8).unwrap()),
        (
            "yarn",
            RopeSpec::new(8)
                .unwrap()
                .with_base(1e6)
                .unwrap()
                .with_scaling(Scaling::Yarn(yarn))
                .unwrap(),
        ),
    ];
    let n = specials.len();
    // Every ordered pair of specials in one rotated pair, at positions 0, 1 and 13.
    let shape = [3, n * n, 1, 8];
    let x =
        Array4::from_shape_fn(shape, |(_, l, _, d)| specials[if d < 4 { l / n } else { l % n }]);
    let positions = Array2::from_shape_fn((3, n * n), |(b, _)| [0u32, 1, 13][b]);
    let may_flush = may_flush_subnormals(ctx);
    for (what, spec) in specs {
        let g = ctx.rope(&spec, x.view(), positions.view(), Layout::Blhd).unwrap();
        let c = cpu::rope(&spec, x.view(), positions.view(), Layout::Blhd).unwrap();
        // What a GPU that flushes subnormals computes: the CPU's arithmetic on flushed
        // inputs, its subnormal results flushed.
        let m = cpu::rope(&spec, x.mapv(flush_subnormal).view(), positions.view(), Layout::Blhd)
            .unwrap()
            .mapv(flush_subnormal);
        let (mut nans, mut infs, mut differ, mut flushed) = (0, 0, 0, 0);
        let mut wrong = Vec::new();
        for (((at, g), c), m) in g.indexed_iter().zip(c.iter()).zip(m.iter()) {
            if g.is_nan() && c.is_nan() {
                nans += 1;
                continue;
            }
            infs += usize::from(c.is_infinite());
            differ += usize::from(c.to_bits() != m.to_bits() && !m.is_nan());
            if g.to_bits() == c.to_bits() {
                continue;
            }
            if may_flush && is_flushed(*g, *m) {
                flushed += 1;
                continue;
            }
            wrong.push(format!("{at:?}: {g:e} against {c:e} (flushed: {m:e})"));
        }
        eprintln!("{what}: {flushed} of the {differ} results that flushing changes were flushed");
        assert!(wrong.is_empty(), "{what}: {} differ: {}", wrong.len(), wrong.join(", "));
        assert!(nans > 0 && infs > 0 && differ > 0, "{what}: {nans} NaNs, {infs} infinities");
        let pair = Array4::from_elem([1, 1, 1, 8], f32::MAX);
        let at13 = Array2::from_elem((1, 1), 13u32);
        let g = ctx.rope(&spec, pair.view(), at13.view(), Layout::Blhd).unwrap();
        let c = cpu::rope(&spec, pair.view(), at13.view(), Layout::Blhd).unwrap();
        assert_eq!(g[[0, 0, 0, 0]].to_bits(), c[[0, 0, 0, 0]].to_bits(), "{what}");
        // Without an attention factor cos is at most 1: the product stays finite.
        assert_eq!(c[[0, 0, 0, 0]].is_infinite(), what == "yarn", "{what}: {}", c[[0, 0, 0, 0]]);
    }
}

#[test]
fn gpu_decoding_offsets_and_larger_batches() {
    let Some(ctx) = gpu() else { return };
    let spec = RopeSpec::new(128).unwrap().with_base(1e6).unwrap();
    // Decoding: one new token per sequence at its cache length.
    let offsets = [0u32, 17, 4095, 1 << 24, (1 << 31) + 3, u32::MAX];
    let positions = positions::from_offsets(&offsets, 1).unwrap();
    for layout in [Layout::Blhd, Layout::Bhld] {
        let shape = shape_of(layout, offsets.len(), 1, 8, 128);
        check::<f32>(ctx, "decode", &spec, shape, layout, &positions, 1);
        check::<bf16>(ctx, "decode", &spec, shape, layout, &positions, 2);
    }
    // Prefill: every sequence from 0, sharing cos/sin rows.
    let positions = positions::contiguous_batch(4, 300).unwrap();
    for layout in [Layout::Blhd, Layout::Bhld] {
        let shape = shape_of(layout, 4, 300, 3, 128);
        check::<f16>(ctx, "prefill", &spec, shape, layout, &positions, 3);
    }
}

#[test]
fn gpu_chunks_give_the_same_bits_as_one_pass() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(23);
    for (what, spec) in specs() {
        let dh = spec.head_dim() as usize;
        for layout in [Layout::Blhd, Layout::Bhld] {
            let positions = hard_batch(&mut rng, 3, 11);
            let shape = shape_of(layout, 3, 11, 5, dh);
            let x = tensor::<f16>(shape, 7);
            let whole = ctx.rope(&spec, x.view(), positions.view(), layout).unwrap();
            // Room for two or three head rows per chunk: dozens of chunks.
            let cap = (3 * dh * 2).max(spec.n_freqs() as usize * 8 * 2).next_multiple_of(4) as u64;
            let capped = ctx.with_max_binding_size(cap.max(256));
            let chunked = capped.rope(&spec, x.view(), positions.view(), layout).unwrap();
            assert_eq!(whole, chunked, "{what} {layout:?}");
            let y = tensor::<f32>(shape, 8);
            let whole = ctx.rope(&spec, y.view(), positions.view(), layout).unwrap();
            let chunked = capped.rope(&spec, y.view(), positions.view(), layout).unwrap();
            assert_eq!(whole, chunked, "{what} {layout:?} f32");
        }
    }
    // A head row that does not fit one binding is refused, naming the limit.
    let spec = RopeSpec::new(256).unwrap();
    let x = Array4::<f32>::zeros((1, 1, 1, 256));
    let err = ctx
        .with_max_binding_size(512)
        .rope(&spec, x.view(), positions::contiguous_batch(1, 1).unwrap().view(), Layout::Blhd)
        .unwrap_err();
    assert!(matches!(err, Error::Limit { requested: 1024, limit: 512, .. }), "{err}");
}

#[test]
fn gpu_rope_into_a_callers_array_equals_the_array_path() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(24);
    for (what, spec) in specs() {
        let dh = spec.head_dim() as usize;
        for layout in [Layout::Blhd, Layout::Bhld] {
            let positions = hard_batch(&mut rng, 2, 5);
            let shape = shape_of(layout, 2, 5, 3, dh);
            let x = tensor::<bf16>(shape, 9);
            let want = ctx.rope(&spec, x.view(), positions.view(), layout).unwrap();
            // Read back into the caller's array where it is contiguous...
            let mut out = Array4::from_elem(x.raw_dim(), bf16::ONE);
            ctx.rope_into(&spec, x.view(), out.view_mut(), positions.view(), layout).unwrap();
            assert_eq!(out, want, "{what} {layout:?}");
            // ...and through a scratch array where it is not; the elements between stay.
            let [a, b, c, d] = shape;
            let mut wide = Array4::from_elem((a, b, c, 2 * d), bf16::NEG_ONE);
            let every_other = wide.slice_mut(ndarray::s![.., .., .., ..;2]);
            ctx.rope_into(&spec, x.view(), every_other, positions.view(), layout).unwrap();
            assert_eq!(wide.slice(ndarray::s![.., .., .., ..;2]), want, "{what} {layout:?}");
            assert!(wide.slice(ndarray::s![.., .., .., 1..;2]).iter().all(|v| *v == bf16::NEG_ONE));
        }
    }
    // An out of another shape is refused before anything runs or is written.
    let spec = RopeSpec::new(8).unwrap();
    let x = Array4::<f32>::ones((1, 2, 3, 8));
    let mut out = Array4::<f32>::from_elem((1, 2, 3, 16), 5.0);
    let positions = positions::contiguous_batch(1, 2).unwrap();
    let e = ctx.rope_into(&spec, x.view(), out.view_mut(), positions.view(), Layout::Blhd);
    assert!(matches!(e, Err(Error::Shape { what: "out (x's shape)", .. })), "{e:?}");
    assert!(out.iter().all(|v| *v == 5.0));
}

/// Uploads `x` into a buffer of `usage`, `extra` bytes larger, filled with 0xAB beyond.
fn upload<T: Element>(
    ctx: &Context,
    x: &Array4<T>,
    usage: wgpu::BufferUsages,
    extra: u64,
) -> wgpu::Buffer {
    let bytes: Vec<u8> = bytemuck::cast_slice(x.as_slice().unwrap()).to_vec();
    let size = (bytes.len() as u64).next_multiple_of(4) + extra;
    let mut padded = bytes.clone();
    padded.resize(size as usize, 0xab);
    let buffer = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("test.rope.tensor"),
        size,
        usage,
        mapped_at_creation: false,
    });
    ctx.queue().write_buffer(&buffer, 0, &padded);
    buffer
}

#[test]
fn gpu_in_place_on_device_buffers_equals_the_array_path() {
    let Some(ctx) = gpu() else { return };
    use wgpu::BufferUsages as U;
    let mut rng = Rng::new(24);
    for (what, spec) in specs() {
        let dh = spec.head_dim() as usize;
        for layout in [Layout::Blhd, Layout::Bhld] {
            // 3 * 5 * 3 rows: an odd element count for odd head dims, so 16-bit tensors end
            // in half a word, whose other half must survive.
            let positions = hard_batch(&mut rng, 3, 5);
            let shape = shape_of(layout, 3, 5, 3, dh);
            let x = tensor::<bf16>(shape, 9);
            let want = ctx.rope(&spec, x.view(), positions.view(), layout).unwrap();
            let want_bytes: Vec<u8> = bytemuck::cast_slice(want.as_slice().unwrap()).to_vec();
            for (usage, cap) in [
                (U::STORAGE | U::COPY_SRC | U::COPY_DST, None),
                (U::COPY_SRC | U::COPY_DST, None),
                (U::STORAGE | U::COPY_SRC | U::COPY_DST, Some(512u64)),
            ] {
                let buffer = upload(ctx, &x, usage, 8);
                let ctx = match cap {
                    Some(c) => ctx.with_max_binding_size(c.max((4 * dh) as u64)),
                    None => ctx.clone(),
                };
                ctx.rope_in_place(&spec, &buffer, shape, layout, Dtype::Bf16, positions.view())
                    .unwrap();
                let got = ctx.read_buffer(&buffer).unwrap();
                let n = want_bytes.len();
                assert_eq!(&got[..n], &want_bytes[..], "{what} {layout:?} {usage:?} {cap:?}");
                let pad = n.next_multiple_of(4) - n;
                assert!(got[n..n + pad].iter().all(|&b| b == 0xab), "{what}: padding half changed");
                assert!(
                    got[n + pad..].iter().all(|&b| b == 0xab),
                    "{what}: bytes past the tensor changed"
                );
            }
        }
    }
}

#[test]
fn gpu_in_place_refuses_bad_buffers_and_shapes() {
    let Some(ctx) = gpu() else { return };
    use wgpu::BufferUsages as U;
    let spec = RopeSpec::new(8).unwrap();
    let x = tensor::<f32>([1, 2, 3, 8], 1);
    let p = positions::contiguous_batch(1, 2).unwrap();
    let storage_only = upload(ctx, &x, U::STORAGE | U::COPY_DST, 0);
    let err = ctx
        .rope_in_place(&spec, &storage_only, [1, 2, 3, 8], Layout::Blhd, Dtype::F32, p.view())
        .unwrap_err();
    assert!(matches!(err, Error::InvalidParameter { field: "buffer usage", .. }), "{err}");
    let small = upload(ctx, &x, U::COPY_SRC | U::COPY_DST, 0);
    let err = ctx
        .rope_in_place(
            &spec,
            &small,
            [1, 3, 3, 8],
            Layout::Blhd,
            Dtype::F32,
            positions::contiguous_batch(1, 3).unwrap().view(),
        )
        .unwrap_err();
    assert!(matches!(err, Error::Limit { requested: 288, limit: 192, .. }), "{err}");
    // Errors name the function called (round fourteen: they said "rope").
    assert!(err.to_string().starts_with("rope_in_place: "), "{err}");
    // A shape whose element count overflows is refused by its shape, not a count that
    // overflowed, before the positions (which no array of that shape could hold) are
    // looked at.
    let huge = [1 << 40, 1 << 30, 1, 8];
    let err =
        ctx.rope_in_place(&spec, &small, huge, Layout::Blhd, Dtype::F32, p.view()).unwrap_err();
    assert!(matches!(err, Error::TooLarge { op: "rope_in_place", .. }), "{err}");
    assert!(err.to_string().contains("(1099511627776, 1073741824, 1, 8)"), "{err}");
    let err = ctx
        .rope_in_place(
            &spec,
            &small,
            [1, 2, 3, 8],
            Layout::Blhd,
            Dtype::F32,
            positions::contiguous_batch(2, 2).unwrap().view(),
        )
        .unwrap_err();
    assert!(matches!(err, Error::Shape { .. }), "{err}");
    let err = ctx.rope(&spec, x.view(), p.view(), Layout::Bhld).unwrap_err();
    assert!(matches!(err, Error::Shape { .. }), "{err}");
    // Empty tensors are fine and do nothing.
    let empty = Array4::<f32>::zeros((0, 2, 3, 8));
    let out = ctx.rope(&spec, empty.view(), Array2::zeros((0, 2)).view(), Layout::Blhd).unwrap();
    assert_eq!(out.dim(), (0, 2, 3, 8));
}

#[test]
fn gpu_rope_cache_equals_cpu_bit_for_bit() {
    let Some(ctx) = gpu() else { return };
    let positions: Vec<u32> = (0..300).chain([1 << 20, u32::MAX - 1, u32::MAX]).collect();
    for (name, spec) in specs() {
        let c = cpu::rope_cache(&spec, &positions).unwrap();
        let g = ctx.rope_cache(&spec, &positions).unwrap();
        assert_eq!(g.inv_freq, c.inv_freq, "{name}");
        assert_eq!(g.attention_factor.to_bits(), c.attention_factor.to_bits(), "{name}");
        for (what, a, b) in [("cos", &g.cos, &c.cos), ("sin", &g.sin, &c.sin)] {
            assert_eq!(a.dim(), b.dim(), "{name} {what}");
            let differ = a.iter().zip(b.iter()).position(|(x, y)| x.to_bits() != y.to_bits());
            assert_eq!(differ, None, "{name} {what}");
        }
    }
}

/// Multimodal RoPE (M-RoPE) on the GPU against its CPU twin, bit for bit: both layouts of
/// its axes, both pairings, partial rotary, both rotation kernels, chunked and whole, on
/// host arrays, a caller's array and a device buffer; a token whose axes agree rotates as
/// the 1-D RoPE does, and axes that differ change the result.
#[test]
fn gpu_multimodal_rope_equals_cpu_bit_for_bit() {
    use posenc::rope::{Mrope, MultimodalRope};
    use wgpu::BufferUsages as U;
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(31);
    let llama3 = Scaling::Llama3(Llama3::new(8.0, 1.0, 4.0, 8192));
    let cases = [
        // Qwen2-VL's: sections of a head of 128 (the vec4 kernel).
        (RopeSpec::new(128).unwrap().with_base(1e6).unwrap(), Mrope::Sections, [16, 24, 24]),
        // Qwen3-VL's interleaved layout, with a scaling's attention factor.
        (
            RopeSpec::new(64).unwrap().with_scaling(Scaling::Yarn(Yarn::new(4.0, 256))).unwrap(),
            Mrope::Interleaved,
            [12, 10, 10],
        ),
        // GLM-4V's: gptj pairing, partial rotary (the general kernel for 24 of 40).
        (
            RopeSpec::partial(40, 24).unwrap().with_pairing(Pairing::Gptj),
            Mrope::Sections,
            [4, 4, 4],
        ),
        (
            RopeSpec::partial(130, 128).unwrap().with_scaling(llama3).unwrap(),
            Mrope::Interleaved,
            [3, 40, 2],
        ),
        // ERNIE 4.5 VL's alternating height and width, then time (gptj, the vec4 kernel).
        (
            RopeSpec::new(128).unwrap().with_base(5e5).unwrap().with_pairing(Pairing::Gptj),
            Mrope::Alternating,
            [22, 22, 20],
        ),
    ];
    for (spec, layout_m, section) in cases {
        let mrope = MultimodalRope::new(layout_m, section, spec.rotary_dim()).unwrap();
        let dh = spec.head_dim() as usize;
        let (batch, len, heads) = (2, 9, 3);
        // Image tokens (time, row, column) sharing some positions, hard text ones after.
        let text = hard_batch(&mut rng, batch, len);
        let positions = ndarray::Array3::from_shape_fn((3, batch, len), |(a, b, l)| {
            if l < 6 {
                [3, 3 + (l / 3) as u32, 3 + (l % 3) as u32][a] + b as u32
            } else {
                text[[b, l]]
            }
        });
        for layout in [Layout::Blhd, Layout::Bhld] {
            let shape = shape_of(layout, batch, len, heads, dh);
            let what = format!("{layout_m:?} {section:?} r {} {layout:?}", spec.rotary_dim());
            let x = tensor::<bf16>(shape, 12);
            let p = positions.view();
            let want = cpu::rope_multimodal(&spec, &mrope, x.view(), p, layout).unwrap();
            let got = ctx.rope_multimodal(&spec, &mrope, x.view(), p, layout).unwrap();
            assert_rope_same(
                &what,
                positions.index_axis(ndarray::Axis(0), 0),
                layout,
                got.view(),
                want.view(),
            );
            // Chunks of a few head rows: cos/sin slots by (t, h, w) in every chunk.
            let cap = (3 * dh * 2).max(spec.n_freqs() as usize * 8 * 2).next_multiple_of(4) as u64;
            let capped = ctx.with_max_binding_size(cap.max(256));
            assert_eq!(
                capped.rope_multimodal(&spec, &mrope, x.view(), p, layout).unwrap(),
                want,
                "{what} chunked"
            );
            let y = tensor::<f32>(shape, 13);
            let want32 = cpu::rope_multimodal(&spec, &mrope, y.view(), p, layout).unwrap();
            let got32 = ctx.rope_multimodal(&spec, &mrope, y.view(), p, layout).unwrap();
            assert_rope_same(
                &what,
                positions.index_axis(ndarray::Axis(0), 0),
                layout,
                got32.view(),
                want32.view(),
            );
            let mut into = Array4::from_elem(x.raw_dim(), bf16::ONE);
            ctx.rope_multimodal_into(&spec, &mrope, x.view(), into.view_mut(), p, layout).unwrap();
            assert_eq!(into, want, "{what} into");
            for usage in [U::STORAGE | U::COPY_SRC | U::COPY_DST, U::COPY_SRC | U::COPY_DST] {
                let buffer = upload(ctx, &x, usage, 4);
                ctx.rope_multimodal_in_place(&spec, &mrope, &buffer, shape, layout, Dtype::Bf16, p)
                    .unwrap();
                let got = ctx.read_buffer(&buffer).unwrap();
                let want_bytes: &[u8] = bytemuck::cast_slice(want.as_slice().unwrap());
                assert_eq!(&got[..want_bytes.len()], want_bytes, "{what} in place {usage:?}");
            }
            // The text tokens rotate as the 1-D RoPE; the image tokens do not.
            let one = ctx
                .rope(&spec, x.view(), positions.index_axis(ndarray::Axis(0), 0), layout)
                .unwrap();
            let (one, got) = (token_major(one.view(), layout), token_major(got.view(), layout));
            let tail = ndarray::s![.., 6.., .., ..];
            assert_eq!(one.slice(tail), got.slice(tail), "{what} text");
            assert_ne!(one, got, "{what}: the axes changed nothing");
        }
    }
    // One frequency per head (rotary dim 2): a slot's three positions (12 bytes) outweigh
    // its cos/sin row (8), and chunks must fit them in one binding too.
    let spec = RopeSpec::new(2).unwrap();
    let mrope = MultimodalRope::new(Mrope::Sections, [0, 1, 0], 2).unwrap();
    let positions = ndarray::Array3::from_shape_fn((3, 1, 200), |(a, _, l)| (l * 3 + a) as u32);
    let x = tensor::<f32>([1, 200, 1, 2], 14);
    let want =
        cpu::rope_multimodal(&spec, &mrope, x.view(), positions.view(), Layout::Blhd).unwrap();
    let capped = ctx.with_max_binding_size(256);
    let got = capped.rope_multimodal(&spec, &mrope, x.view(), positions.view(), Layout::Blhd);
    assert_eq!(got.unwrap(), want, "rotary dim 2, chunked");
    // The checks of the CPU path, before any GPU work.
    let spec = RopeSpec::new(16).unwrap();
    let mrope = MultimodalRope::new(Mrope::Sections, [2, 3, 3], 16).unwrap();
    let x = Array4::<f32>::ones((1, 2, 1, 16));
    let flat = ndarray::Array3::<u32>::zeros((1, 1, 2));
    let e = ctx.rope_multimodal(&spec, &mrope, x.view(), flat.view(), Layout::Blhd).unwrap_err();
    assert!(matches!(e, Error::Shape { op: "rope_multimodal", .. }), "{e}");
}
