//! The GPU encode against its CPU twin on seeded random problems: every storage type, every
//! position builder, forced chunking. Bit for bit without a scale.

use crate::support::{Rng, flush_subnormal, gpu, is_flushed, may_flush_subnormals, random_ids};
use half::{bf16, f16};
use ndarray::{Array2, Axis};
use posenc::encode::{Dtype, Embeddings, EncodeOptions, Encoded, Scale};
use posenc::{PeSpec, cpu, positions};

/// A random table in the requested storage type, values in [-2, 2).
struct Table {
    f32: Array2<f32>,
    f16: Array2<f16>,
    bf16: Array2<bf16>,
}

impl Table {
    fn new(rng: &mut Rng, vocab: usize, dim: usize) -> Self {
        let f32 =
            Array2::from_shape_fn((vocab, dim), |_| (rng.next_u32() as f32 / 2f32.powi(30)) - 2.0);
        Self { f16: f32.mapv(f16::from_f32), bf16: f32.mapv(bf16::from_f32), f32 }
    }
    fn view(&self, dtype: Dtype) -> Embeddings<'_> {
        match dtype {
            Dtype::F32 => Embeddings::F32(self.f32.view()),
            Dtype::F16 => Embeddings::F16(self.f16.view()),
            Dtype::Bf16 => Embeddings::Bf16(self.bf16.view()),
        }
    }
}

const DTYPES: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::Bf16];

fn assert_same_bits(what: &str, gpu: &Encoded, cpu: &Encoded) {
    assert_eq!(gpu.dim(), cpu.dim(), "{what}: shapes differ");
    let (g, c) = (gpu.bits(), cpu.bits());
    if let Some(i) = g.iter().zip(&c).position(|(a, b)| a != b) {
        let dim = gpu.dim().2;
        panic!(
            "{what}: first difference at token {}, column {}: gpu {:#x}, cpu {:#x}",
            i / dim,
            i % dim,
            g[i],
            c[i]
        );
    }
}

/// The output bytes of one record of the recorded encode pass `desc` over `ids` and `pos`,
/// uploaded as storage buffers.
fn run_pass(
    ctx: &posenc::gpu::Context,
    spec: &PeSpec,
    table: &posenc::gpu::GpuTable,
    desc: &posenc::gpu::EncodePassDescriptor,
    ids: &Array2<u32>,
    pos: &Array2<u32>,
) -> Vec<u8> {
    use wgpu::util::DeviceExt;
    let pass = ctx.encode_pass(spec, table, desc).unwrap();
    let words = |a: &Array2<u32>| {
        ctx.device().create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("test.words"),
            contents: bytemuck::cast_slice(a.as_slice().unwrap()),
            usage: wgpu::BufferUsages::STORAGE,
        })
    };
    let out = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("test.out"),
        size: pass.output_bytes().next_multiple_of(4),
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    pass.record(&mut encoder, words(ids).slice(..), words(pos).slice(..), out.slice(..)).unwrap();
    ctx.queue().submit([encoder.finish()]);
    ctx.read_buffer(&out).unwrap()
}

#[test]
fn gpu_equals_cpu_bit_for_bit_on_random_problems() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(31);
    for case in 0..24 {
        let vocab = 1 + rng.below(300) as usize;
        let dim = 2 * (1 + rng.below(70) as usize);
        let batch = 1 + rng.below(4) as usize;
        let len = [1, 3, 5, 17, 255, 257][rng.below(6) as usize];
        let spec = PeSpec::new(dim as u32).unwrap();
        let table = Table::new(&mut rng, vocab, dim);
        let ids = random_ids(&mut rng, batch, len, vocab);
        let pos = Array2::from_shape_fn((batch, len), |_| rng.next_u32());
        for in_dtype in DTYPES {
            let uploaded = ctx.upload_table(table.view(in_dtype)).unwrap();
            for out_dtype in DTYPES {
                let options = EncodeOptions { out_dtype, ..Default::default() };
                let g = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
                let c = cpu::encode(&spec, table.view(in_dtype), ids.view(), pos.view(), &options)
                    .unwrap();
                let what = format!(
                    "case {case}: V={vocab} D={dim} B={batch} L={len} {in_dtype:?}->{out_dtype:?}"
                );
                assert_same_bits(&what, &g, &c);
            }
        }
    }
}

/// With a scale, `s * e + pe` is two roundings on the CPU. WGSL would let a backend fuse it
/// into one fma (NVIDIA's Vulkan driver did); the kernels round the product first
/// (shaders/shared/rounded.wgsl), so every backend gives the CPU's bits.
#[test]
fn gpu_with_a_scale_equals_the_cpu_bit_for_bit() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(32);
    let (vocab, batch, len) = (97, 3, 29);
    let ids = random_ids(&mut rng, batch, len, vocab);
    let pos = positions::contiguous_batch(batch, len).unwrap();
    // dim 66 takes the general kernel, 64 the unit kernel.
    for dim in [66, 64] {
        let spec = PeSpec::new(dim as u32).unwrap();
        let table = Table::new(&mut rng, vocab, dim);
        for dtype in [Dtype::F32, Dtype::Bf16] {
            let uploaded = ctx.upload_table(table.view(dtype)).unwrap();
            for scale in [Scale::SqrtDim, Scale::Value(0.125), Scale::Value(-3.7)] {
                let options = EncodeOptions { scale, ..Default::default() };
                let g = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
                let c = cpu::encode(&spec, table.view(dtype), ids.view(), pos.view(), &options)
                    .unwrap();
                assert_same_bits(&format!("{scale:?} dim {dim} {dtype:?}"), &g, &c);
            }
        }
    }
}

/// Subnormal table values and scaled products: the CPU's bits, or on a GPU those of
/// flushing every subnormal operand and result to a zero of its sign (and a zero's sign
/// free): WGSL lets an implementation flush f32 subnormals, and NVIDIA's Vulkan driver
/// does, the table's subnormals as it reads them (an H200, 2026-12-04: `4 * (-MIN_POSITIVE
/// / 3)` came out 0, not the normal -1.567e-38; docs/guarantees.md). Adapters that run
/// shaders on CPU cores keep subnormals, and must give the CPU's bits everywhere. Position
/// 0's sine is 0, so a row at position 0 keeps its values; elsewhere the PE value absorbs
/// them.
#[test]
fn subnormal_values_keep_the_cpu_bits_or_flush_on_a_gpu() {
    let Some(ctx) = gpu() else { return };
    let may_flush = may_flush_subnormals(ctx);
    let dim = 64;
    let spec = PeSpec::new(dim as u32).unwrap();
    let tiny = [f32::MIN_POSITIVE / 8.0, -f32::MIN_POSITIVE / 3.0, f32::MIN_POSITIVE, 1e-40, -1.0];
    let f32 = Array2::from_shape_fn((4, dim), |(r, c)| tiny[(r + c) % tiny.len()]);
    let table = Table { f16: f32.mapv(f16::from_f32), bf16: f32.mapv(bf16::from_f32), f32 };
    // The table as a flushing GPU reads it.
    let flushed_table = Table {
        f32: table.f32.mapv(flush_subnormal),
        f16: table.f16.clone(),
        bf16: table.bf16.mapv(|v| bf16::from_f32(flush_subnormal(v.to_f32()))),
    };
    let ids = Array2::from_shape_fn((2, 3), |(b, l)| ((b * 3 + l) % 4) as u32);
    let pos = Array2::from_shape_fn((2, 3), |(b, l)| [0u32, 0, 7][l] + b as u32);
    let (mut flushed, mut differ) = (0, 0);
    for dtype in [Dtype::F32, Dtype::Bf16] {
        let uploaded = ctx.upload_table(table.view(dtype)).unwrap();
        for scale in [Scale::None, Scale::Value(0.125), Scale::Value(4.0)] {
            let options = EncodeOptions { scale, ..Default::default() };
            let g = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
            let c =
                cpu::encode(&spec, table.view(dtype), ids.view(), pos.view(), &options).unwrap();
            let m = cpu::encode(&spec, flushed_table.view(dtype), ids.view(), pos.view(), &options)
                .unwrap();
            let mut wrong = Vec::new();
            for (i, ((g, c), m)) in g.bits().into_iter().zip(c.bits()).zip(m.bits()).enumerate() {
                let (gv, cv) = (f32::from_bits(g), f32::from_bits(c));
                let mv = flush_subnormal(f32::from_bits(m));
                differ += usize::from(cv.to_bits() != mv.to_bits());
                if g == c {
                    continue;
                }
                if may_flush && is_flushed(gv, mv) {
                    flushed += 1;
                    continue;
                }
                wrong.push(format!("{i}: {gv:e} against {cv:e} (flushed: {mv:e})"));
            }
            assert!(wrong.is_empty(), "{dtype:?} {scale:?}: {}", wrong.join(", "));
        }
    }
    eprintln!("{flushed} of the {differ} results that flushing changes were flushed");
    assert!(differ > 0);
}

#[test]
fn gpu_equals_cpu_for_every_position_builder() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(33);
    let (vocab, dim, batch, len) = (50, 12, 3, 9);
    let spec = PeSpec::new(dim as u32).unwrap();
    let table = Table::new(&mut rng, vocab, dim);
    let uploaded = ctx.upload_table(table.view(Dtype::Bf16)).unwrap();
    let mut ids = random_ids(&mut rng, batch, len, vocab);
    let pad = 0u32;
    // Left padding: row b starts with b pad tokens.
    for b in 0..batch {
        for t in 0..b {
            ids[[b, t]] = pad;
        }
        for t in b..len {
            if ids[[b, t]] == pad {
                ids[[b, t]] = 1;
            }
        }
    }
    let builders = [
        ("contiguous", positions::contiguous_batch(batch, len).unwrap(), None),
        (
            "offsets",
            positions::from_offsets(&[0, 1000, u32::MAX - len as u32 + 1], len).unwrap(),
            None,
        ),
        ("left padded", positions::left_padded(ids.view(), pad).unwrap(), Some(pad)),
        ("packed", positions::packed(len, &[vec![], vec![4], vec![2, 3, 7]]).unwrap(), None),
    ];
    for (name, pos, pad_id) in builders {
        let options = EncodeOptions { pad_id, ..Default::default() };
        let g = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
        let c =
            cpu::encode(&spec, table.view(Dtype::Bf16), ids.view(), pos.view(), &options).unwrap();
        assert_same_bits(name, &g, &c);
        if pad_id.is_some() {
            let out = g.into_f32().unwrap();
            // Row 2 starts with two pad tokens: all-zero rows; its first real token is at
            // position 0, so it equals row 0's computation for the same id.
            assert!(out.index_axis(Axis(0), 2).index_axis(Axis(0), 0).iter().all(|&v| v == 0.0));
            assert!(out.index_axis(Axis(0), 2).index_axis(Axis(0), 1).iter().all(|&v| v == 0.0));
            assert!(out.index_axis(Axis(0), 2).index_axis(Axis(0), 2).iter().any(|&v| v != 0.0));
        }
    }
}

/// The f32 fast kernel serves groups of up to `MAX_GROUP_TOKENS` tokens sharing a PE row
/// from one read of it, and blocks of 256 vec4s per workgroup. Batches larger than a group,
/// rows with an odd number of vec4s and more than one block, pad tokens (in and outside the
/// vocabulary), duplicate positions within a row, and token chunks all give the CPU's bits.
#[test]
fn gpu_fast_kernel_groups_tokens_sharing_a_position() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(35);
    let group = posenc::gpu::MAX_GROUP_TOKENS;
    for (dim, batch, len) in
        [(4, 2 * group + 3, 5), (12, 1, 40), (1024, group + 1, 6), (2052, 3, 4), (1028, 20, 3)]
    {
        let vocab = 37;
        let spec = PeSpec::new(dim as u32).unwrap();
        let table = Table::new(&mut rng, vocab, dim);
        let uploaded = ctx.upload_table(table.view(Dtype::F32)).unwrap();
        let mut ids = random_ids(&mut rng, batch, len, vocab);
        // Positions repeat across the batch and within rows (a few tokens share position 1).
        let mut pos = positions::contiguous_batch(batch, len).unwrap();
        for b in (0..batch).step_by(2) {
            pos[[b, len - 1]] = 1;
        }
        for pad in [3, vocab as u32 + 5] {
            ids[[0, 1]] = pad;
            ids[[batch - 1, 0]] = pad;
            let options = EncodeOptions { pad_id: Some(pad), ..Default::default() };
            let what = format!("D={dim} B={batch} L={len} pad={pad}");
            let g = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
            let c = cpu::encode(&spec, table.view(Dtype::F32), ids.view(), pos.view(), &options)
                .unwrap();
            assert_same_bits(&what, &g, &c);
            assert!(
                g.into_f32()
                    .unwrap()
                    .index_axis(Axis(0), 0)
                    .index_axis(Axis(0), 1)
                    .iter()
                    .all(|&v| v == 0.0)
            );
        }
        // A binding as large as the table: chunks of `vocab` tokens, the table in one piece.
        let small = ctx.with_max_binding_size(vocab as u64 * dim as u64 * 4);
        let uploaded = small.upload_table(table.view(Dtype::F32)).unwrap();
        let options = EncodeOptions { pad_id: Some(vocab as u32 + 5), ..Default::default() };
        let g = small.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
        let c =
            cpu::encode(&spec, table.view(Dtype::F32), ids.view(), pos.view(), &options).unwrap();
        assert_same_bits(&format!("chunked D={dim}"), &g, &c);
    }
}

#[test]
fn gpu_chunks_tables_and_outputs_beyond_the_binding_cap() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(34);
    let (vocab, dim, batch, len) = (301, 30, 2, 77);
    let spec = PeSpec::new(dim as u32).unwrap();
    let table = Table::new(&mut rng, vocab, dim);
    let ids = random_ids(&mut rng, batch, len, vocab);
    let pos = Array2::from_shape_fn((batch, len), |_| rng.next_u32());
    // 1 KiB bindings: 8 f32 rows (or 17 half rows) per table chunk, 8 tokens per chunk.
    let small = ctx.with_max_binding_size(1024);
    for in_dtype in DTYPES {
        let uploaded = small.upload_table(table.view(in_dtype)).unwrap();
        assert!(uploaded.n_chunks() > 10, "{in_dtype:?}: {} chunks", uploaded.n_chunks());
        for out_dtype in DTYPES {
            let options =
                EncodeOptions { out_dtype, pad_id: Some(ids[[0, 3]]), ..Default::default() };
            let g = small.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
            let c =
                cpu::encode(&spec, table.view(in_dtype), ids.view(), pos.view(), &options).unwrap();
            assert_same_bits(&format!("chunked {in_dtype:?}->{out_dtype:?}"), &g, &c);
        }
    }

    // Caps too small for one token: refused naming what does not fit (a cap under 8
    // bytes underflowed, a panic in a debug build; the message named the PE row whatever
    // bound the chunk). f16 rows of dim 2 are one word, so the table fits every cap.
    let spec = PeSpec::new(2).unwrap();
    let table = Array2::from_elem((3, 2), f16::from_f32(0.5));
    let ids = ndarray::array![[0u32, 2, 1]];
    let pos = positions::contiguous_batch(1, 3).unwrap();
    let half = EncodeOptions { out_dtype: Dtype::F16, ..Default::default() };
    let f32_out = EncodeOptions::default();
    for (cap, options, want) in [
        (4, &half, ("one token's records", 12)),
        (8, &half, ("one token's records", 12)),
        (4, &f32_out, ("one row of output", 8)),
    ] {
        let small = ctx.with_max_binding_size(cap);
        let uploaded = small.upload_table(Embeddings::F16(table.view())).unwrap();
        let err = small.encode(&spec, &uploaded, ids.view(), pos.view(), options).unwrap_err();
        match err {
            posenc::Error::Limit { what, requested, limit, .. }
                if (what, requested) == want && limit == cap => {}
            other => panic!("cap {cap}, {:?}: {other}", options.out_dtype),
        }
    }
    // 12 bytes hold one token's records (the general kernel's, dim 2 being no whole
    // vec4): chunks of one token, the CPU's bits.
    let small = ctx.with_max_binding_size(12);
    let uploaded = small.upload_table(Embeddings::F16(table.view())).unwrap();
    let g = small.encode(&spec, &uploaded, ids.view(), pos.view(), &half).unwrap();
    let c = cpu::encode(&spec, Embeddings::F16(table.view()), ids.view(), pos.view(), &half);
    assert_same_bits("a cap of one token's records", &g, &c.unwrap());
}

#[test]
fn gpu_rejects_bad_input_before_any_work() {
    let Some(ctx) = gpu() else { return };
    let spec = PeSpec::new(4).unwrap();
    let table = Array2::<f32>::zeros((10, 4));
    let uploaded = ctx.upload_table(Embeddings::F32(table.view())).unwrap();
    let ids = ndarray::array![[1u32, 2, 3], [4, 10, 5]];
    let pos = positions::contiguous_batch(2, 3).unwrap();
    let err = ctx
        .encode(&spec, &uploaded, ids.view(), pos.view(), &EncodeOptions::default())
        .unwrap_err();
    match err {
        posenc::Error::TokenId { row: 1, col: 1, ref id, vocab: 10 } if id == "10" => {}
        other => panic!("{other}"),
    }
    let bad_pos = positions::contiguous_batch(2, 2).unwrap();
    let ok_ids = ndarray::array![[1u32, 2, 3], [4, 9, 5]];
    assert!(matches!(
        ctx.encode(&spec, &uploaded, ok_ids.view(), bad_pos.view(), &EncodeOptions::default()),
        Err(posenc::Error::Shape { .. })
    ));
    let nan = EncodeOptions { scale: Scale::Value(f32::NAN), ..Default::default() };
    assert!(matches!(
        ctx.encode(&spec, &uploaded, ok_ids.view(), pos.view(), &nan),
        Err(posenc::Error::InvalidParameter { field: "scale", .. })
    ));
    let other_dim = PeSpec::new(6).unwrap();
    assert!(matches!(
        ctx.encode(&other_dim, &uploaded, ok_ids.view(), pos.view(), &EncodeOptions::default()),
        Err(posenc::Error::Shape { .. })
    ));
    let empty = Array2::<u32>::zeros((0, 3));
    let out = ctx
        .encode(&spec, &uploaded, empty.view(), empty.view(), &EncodeOptions::default())
        .unwrap();
    assert_eq!(out.dim(), (0, 3, 4));

    // A table of no rows, every id a pad: refused on both paths, as the recorded pass
    // refuses it (the GPU's host paths divided by zero).
    let none = Array2::<f32>::zeros((0, 4));
    let no_rows = ctx.upload_table(Embeddings::F32(none.view())).unwrap();
    let pads = ndarray::array![[0u32, 0]];
    let pad = EncodeOptions { pad_id: Some(0), ..Default::default() };
    let pos = positions::contiguous_batch(1, 2).unwrap();
    let refused = |e: posenc::Error| {
        assert!(matches!(e, posenc::Error::Shape { what: "embedding table rows", .. }), "{e}");
    };
    refused(
        cpu::encode(&spec, Embeddings::F32(none.view()), pads.view(), pos.view(), &pad)
            .unwrap_err(),
    );
    refused(ctx.encode(&spec, &no_rows, pads.view(), pos.view(), &pad).unwrap_err());
    refused(ctx.encode_to_buffer(&spec, &no_rows, pads.view(), pos.view(), &pad).unwrap_err());
    let out = ctx.encode_to_buffer(&spec, &uploaded, pads.view(), pos.view(), &pad).unwrap();
    refused(
        ctx.encode_into_buffer(&spec, &no_rows, pads.view(), pos.view(), &pad, &out).unwrap_err(),
    );
}

/// A request whose result the memory or the device cannot hold is refused for that before
/// its tokens are read: a broadcast view of 2^50 tokens (no memory of its own) with every id
/// out of the vocabulary gets `Error::Alloc` or `Error::Limit`, not the id's error after a
/// loop over every token (which took longer than any test allows, 2026-12-02). The same
/// for a learned table's positions; the CPU refuses it so too.
#[test]
fn a_result_too_large_is_refused_before_its_tokens_are_read() {
    let Some(ctx) = gpu() else { return };
    let spec = PeSpec::new(4).unwrap();
    let table = Array2::<f32>::zeros((10, 4));
    let uploaded = ctx.upload_table(Embeddings::F32(table.view())).unwrap();
    let learned = ctx.upload_position_table(Embeddings::F32(table.view())).unwrap();
    let bad = Array2::from_elem((1, 1), 10u32);
    // 2^50 tokens: 2^54 bytes of result, past any address space (2^40 would be 16 TiB,
    // which a host that overcommits might reserve).
    let huge = bad.broadcast((1 << 25, 1 << 25)).unwrap();
    let options = EncodeOptions::default();
    let too_large = |what: &str, e: posenc::Error| {
        let refused = matches!(e, posenc::Error::Alloc { .. } | posenc::Error::Limit { .. });
        assert!(refused, "{what}: {e}");
    };
    too_large("encode", ctx.encode(&spec, &uploaded, huge, huge, &options).unwrap_err());
    too_large(
        "encode_submit",
        ctx.encode_submit(&spec, &uploaded, huge, huge, &options).unwrap_err(),
    );
    too_large(
        "encode_to_buffer",
        ctx.encode_to_buffer(&spec, &uploaded, huge, huge, &options).unwrap_err(),
    );
    let small = ctx.encode_to_buffer(&spec, &uploaded, bad.view(), bad.view(), &options);
    assert!(matches!(small, Err(posenc::Error::TokenId { .. })), "{small:?}");
    too_large("learned", ctx.encode(&learned, &uploaded, huge, huge, &options).unwrap_err());
    too_large(
        "cpu",
        cpu::encode(&spec, Embeddings::F32(table.view()), huge, huge, &options).unwrap_err(),
    );
}

#[test]
fn results_can_stay_on_the_device() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(35);
    let (vocab, dim, batch, len) = (64, 10, 3, 21);
    let spec = PeSpec::new(dim as u32).unwrap();
    let table = Table::new(&mut rng, vocab, dim);
    let ids = random_ids(&mut rng, batch, len, vocab);
    let pos = positions::from_offsets(&[3, 7, 1 << 30], len).unwrap();
    // Also through chunks: 256-byte bindings hold 6 f32 rows.
    for ctx in [ctx.clone(), ctx.with_max_binding_size(256)] {
        for out_dtype in DTYPES {
            let options = EncodeOptions { out_dtype, ..Default::default() };
            let uploaded = ctx.upload_table(table.view(Dtype::F16)).unwrap();
            let buffer =
                ctx.encode_to_buffer(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
            let bytes = ctx.read_buffer(&buffer).unwrap();
            let c = cpu::encode(&spec, table.view(Dtype::F16), ids.view(), pos.view(), &options)
                .unwrap();
            let got: Vec<u32> = match out_dtype {
                Dtype::F32 => bytes
                    .chunks_exact(4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                _ => bytes
                    .chunks_exact(2)
                    .map(|b| u32::from(u16::from_le_bytes([b[0], b[1]])))
                    .collect(),
            };
            assert_eq!(&got[..c.bits().len()], &c.bits()[..], "{out_dtype:?}");
        }
    }
}

/// The PE-row cache (positions 0..n kept on the device) must be invisible: a decode loop
/// that grows it, a switch of spec that replaces it, and a cleared cache all give the CPU's
/// bits, on the vec4 fast kernel (f32, dim % 4 == 0) and on the general one.
#[test]
fn cached_pe_rows_are_invisible() {
    let Some(ctx) = gpu() else { return };
    let ctx = ctx.with_max_binding_size(u64::MAX); // a private cache for this test
    let mut rng = Rng::new(36);
    let vocab = 33;
    for (dim, dtype) in [(64usize, Dtype::F32), (64, Dtype::Bf16), (18, Dtype::F32)] {
        let spec = PeSpec::new(dim as u32).unwrap();
        let table = Table::new(&mut rng, vocab, dim);
        let uploaded = ctx.upload_table(table.view(dtype)).unwrap();
        let options = EncodeOptions::default();
        // A prompt of 5 tokens, then one token at a time up to position 40.
        let mut offsets = vec![0u32, 3];
        let mut len = 5;
        for step in 0..12 {
            if step == 6 {
                ctx.clear_pe_cache();
            }
            let ids = random_ids(&mut rng, 2, len, vocab);
            let pos = positions::from_offsets(&offsets, len).unwrap();
            let g = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
            let c =
                cpu::encode(&spec, table.view(dtype), ids.view(), pos.view(), &options).unwrap();
            assert_same_bits(&format!("d={dim} {dtype:?} step {step}"), &g, &c);
            for o in &mut offsets {
                *o += len as u32;
            }
            len = 1 + step % 3;
        }
    }
}

/// The PE cache budget (`Options::pe_cache_budget`) bounds the cache: positions beyond it
/// are computed per call, those within it are read from the cache, with the CPU's bits
/// either way, and the cache holds what the budget allows and no more.
#[test]
fn the_pe_cache_budget_bounds_the_cache_and_keeps_the_bits() {
    use posenc::gpu::Options;
    let mut rng = Rng::new(37);
    let (vocab, dim) = (29, 64);
    let row_bytes = dim as u64 * 4;
    let spec = PeSpec::new(dim as u32).unwrap();
    let table = Table::new(&mut rng, vocab, dim);
    let ids = random_ids(&mut rng, 2, 40, vocab);
    let options = EncodeOptions::default();
    // Positions 0..40 need 64 cached rows (the cache grows in powers of two).
    for (budget, cached) in [(0, 0), (16 * row_bytes, 0), (64 * row_bytes, 64 * row_bytes)] {
        let Some(ctx) = crate::support::fresh_gpu(&Options::default().pe_cache_budget(budget))
        else {
            return;
        };
        for dtype in [Dtype::F32, Dtype::Bf16] {
            let what = format!("budget {budget} {dtype:?}");
            let uploaded = ctx.upload_table(table.view(dtype)).unwrap();
            let pos = positions::contiguous_batch(2, 40).unwrap();
            let g = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
            let c = cpu::encode(&spec, table.view(dtype), ids.view(), pos.view(), &options);
            assert_same_bits(&what, &g, &c.unwrap());
            let held = ctx.allocated_bytes();
            ctx.clear_pe_cache();
            assert_eq!(held - ctx.allocated_bytes(), cached, "{what}: bytes of cached rows");
        }
    }
}

/// Whether a blocking wait polls first ([`posenc::gpu::Options::spin_wait`]) or sleeps at
/// once, every way of waiting returns the finished work: several encodes in flight waited
/// for in order, a readback, and a wait for the whole queue.
#[test]
fn waits_that_poll_first_and_waits_that_sleep_finish_the_same_work() {
    use posenc::gpu::Options;
    use std::time::Duration;
    let mut rng = Rng::new(38);
    let (vocab, dim) = (50, 96);
    let spec = PeSpec::new(dim as u32).unwrap();
    let table = Table::new(&mut rng, vocab, dim);
    let options = EncodeOptions::default();
    for spin in [Duration::ZERO, Duration::from_micros(1), Duration::from_secs(1)] {
        let Some(ctx) = crate::support::fresh_gpu(&Options::default().spin_wait(spin)) else {
            return;
        };
        let uploaded = ctx.upload_table(table.view(Dtype::F32)).unwrap();
        let batches: Vec<_> = (0..3).map(|_| random_ids(&mut rng, 4, 33, vocab)).collect();
        let pos = positions::contiguous_batch(4, 33).unwrap();
        let pending: Vec<_> = batches
            .iter()
            .map(|ids| ctx.encode_submit(&spec, &uploaded, ids.view(), pos.view(), &options))
            .collect::<Result<_, _>>()
            .unwrap();
        for (ids, pending) in batches.iter().zip(pending) {
            let c = cpu::encode(&spec, table.view(Dtype::F32), ids.view(), pos.view(), &options);
            assert_same_bits(&format!("spin {spin:?}"), &pending.wait().unwrap(), &c.unwrap());
        }
        let on_device =
            ctx.encode_to_buffer(&spec, &uploaded, batches[0].view(), pos.view(), &options);
        let on_device = on_device.unwrap();
        ctx.wait_idle().unwrap();
        let c = cpu::encode(&spec, table.view(Dtype::F32), batches[0].view(), pos.view(), &options);
        let bytes: Vec<u8> = c.unwrap().bits().iter().flat_map(|b| b.to_le_bytes()).collect();
        assert_eq!(ctx.read_buffer(&on_device).unwrap(), bytes, "spin {spin:?}: read_buffer");
    }
}

#[test]
fn every_variant_and_odd_dims_encode_bit_identically() {
    use posenc::{Frequencies, Variant};
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(36);
    // A small binding cap forces token chunks (3 rows of dim 33), odd ones rounded to even
    // for 16-bit output.
    let small = ctx.with_max_binding_size(512);
    for variant in Variant::ALL {
        for dim in [5usize, 6, 7, 33] {
            let Ok(spec) = PeSpec::for_variant(variant, dim as u32) else { continue };
            let spec = if dim == 33 { spec.with_frequencies(Frequencies::F32) } else { spec };
            let (vocab, batch, len) = (40, 3, 11);
            let table = Table::new(&mut rng, vocab, dim);
            let ids = random_ids(&mut rng, batch, len, vocab);
            let pos = match spec.padding_idx() {
                Some(pad) => positions::fairseq(ids.view(), pad).unwrap(),
                None => Array2::from_shape_fn((batch, len), |_| rng.next_u32()),
            };
            for ctx in [ctx, &small] {
                for in_dtype in DTYPES {
                    let uploaded = ctx.upload_table(table.view(in_dtype)).unwrap();
                    for out_dtype in DTYPES {
                        let options = EncodeOptions {
                            out_dtype,
                            pad_id: Some(ids[[1, 2]]),
                            ..Default::default()
                        };
                        let g = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options);
                        let c = cpu::encode(
                            &spec,
                            table.view(in_dtype),
                            ids.view(),
                            pos.view(),
                            &options,
                        );
                        assert_same_bits(
                            &format!("{variant} d={dim} {in_dtype:?}->{out_dtype:?}"),
                            &g.unwrap(),
                            &c.unwrap(),
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn learned_position_tables_encode_bit_identically() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(37);
    let (vocab, max_positions, dim, batch, len) = (50, 64, 12, 2, 9);
    let table = Table::new(&mut rng, vocab, dim);
    let learned = Table::new(&mut rng, max_positions, dim);
    let ids = random_ids(&mut rng, batch, len, vocab);
    let pos = Array2::from_shape_fn((batch, len), |_| rng.below(max_positions as u64) as u32);
    let uploaded = ctx.upload_table(table.view(Dtype::F32)).unwrap();
    for p_dtype in DTYPES {
        let gpu_p = ctx.upload_position_table(learned.view(p_dtype)).unwrap();
        assert_eq!(gpu_p.dim(), (max_positions, dim));
        for out_dtype in DTYPES {
            let options = EncodeOptions { out_dtype, ..Default::default() };
            let g = ctx.encode(&gpu_p, &uploaded, ids.view(), pos.view(), &options);
            let c = cpu::encode_learned(
                learned.view(p_dtype),
                table.view(Dtype::F32),
                ids.view(),
                pos.view(),
                &options,
            );
            assert_same_bits(
                &format!("learned {p_dtype:?}->{out_dtype:?}"),
                &g.unwrap(),
                &c.unwrap(),
            );
        }
    }
    // Tables in other memory orders (Fortran order, rows reversed) are uploaded in the
    // order the kernel reads, as the CPU reads them (a panic before 2026-12-02).
    let fortran = learned.f32.t().as_standard_layout().into_owned();
    let fortran = fortran.t();
    let mut reversed = learned.f32.clone();
    reversed.invert_axis(ndarray::Axis(0));
    let fortran_bf16 = learned.bf16.t().as_standard_layout().into_owned();
    for (what, p) in [
        ("fortran", Embeddings::F32(fortran.view())),
        ("reversed", Embeddings::F32(reversed.view())),
        ("fortran bf16", Embeddings::Bf16(fortran_bf16.t())),
    ] {
        let gpu_p = ctx.upload_position_table(p).unwrap();
        let options = EncodeOptions::default();
        let g = ctx.encode(&gpu_p, &uploaded, ids.view(), pos.view(), &options).unwrap();
        let c = cpu::encode_learned(p, table.view(Dtype::F32), ids.view(), pos.view(), &options);
        assert_same_bits(what, &g, &c.unwrap());
    }
    // A position without a row is refused before any work, naming both numbers.
    let mut bad = pos.clone();
    bad[[1, 4]] = max_positions as u32;
    let gpu_p = ctx.upload_position_table(learned.view(Dtype::F32)).unwrap();
    let err = ctx
        .encode(&gpu_p, &uploaded, ids.view(), bad.view(), &EncodeOptions::default())
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("64") && text.contains("row 1, column 4"), "{text}");
    // A position table too large for one binding is refused up front.
    let small = ctx.with_max_binding_size(256);
    assert!(matches!(
        small.upload_position_table(learned.view(Dtype::F32)),
        Err(posenc::Error::Limit { .. })
    ));
}

/// Tables larger than one binding, in every storage type, take the vec4 kernel (dim a
/// multiple of 4) with up to `MAX_TABLE_SLOTS` chunks bound per dispatch: more chunks than
/// slots (several dispatch windows), a downlevel device (one slot), both access patterns,
/// decode steps (a batch at one position) and prefills, pad tokens in and outside the
/// vocabulary. Every result has the CPU's bits, and so the unchunked GPU's.
#[test]
fn chunked_tables_of_every_type_encode_bit_identically() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(36);
    let downlevel = crate::support::fresh_gpu(
        &posenc::gpu::Options::default().limits(Some(wgpu::Limits::downlevel_defaults())),
    );
    let patterns = [posenc::gpu::AccessPattern::Adjacent, posenc::gpu::AccessPattern::Coalesced];
    let slots = posenc::shaders::MAX_TABLE_SLOTS as usize;
    for (dim, vocab) in [(8, 97), (1028, 23)] {
        let spec = PeSpec::new(dim as u32).unwrap();
        let table = Table::new(&mut rng, vocab, dim);
        // Decode steps: eight sequences at one position, one sequence at a late position;
        // a prefill of two sequences.
        let decode = (random_ids(&mut rng, 8, 1, vocab), Array2::from_elem((8, 1), 4000u32));
        let single = (random_ids(&mut rng, 1, 1, vocab), Array2::from_elem((1, 1), u32::MAX));
        // Pad tokens inside the vocabulary, and outside it.
        let mut prefill =
            (random_ids(&mut rng, 2, 33, vocab), positions::contiguous_batch(2, 33).unwrap());
        prefill.0[[0, 3]] = 5;
        prefill.0[[1, 0]] = 5;
        let mut outside = prefill.clone();
        outside.0[[1, 7]] = vocab as u32 + 9;
        // Enough tokens for full groups in the coalesced pattern too (16 share each position).
        let wide =
            (random_ids(&mut rng, 16, 40, vocab), positions::contiguous_batch(16, 40).unwrap());
        let cases = [
            ("wide", &wide, None),
            ("decode", &decode, None),
            ("single", &single, None),
            ("prefill", &prefill, Some(5)),
            ("outside", &outside, Some(vocab as u32 + 9)),
        ];
        for in_dtype in DTYPES {
            let row_bytes = (dim * in_dtype.size()) as u64;
            // Bindings of 2 rows (more chunks than slots), of a third of the table (three
            // chunks, one window), and the whole table.
            let caps = [2 * row_bytes, (vocab as u64).div_ceil(3) * row_bytes, 1 << 30];
            for cap in caps {
                for pattern in patterns {
                    let small = ctx.with_max_binding_size(cap).with_access_pattern(pattern);
                    let uploaded = small.upload_table(table.view(in_dtype)).unwrap();
                    if cap == caps[0] {
                        assert!(uploaded.n_chunks() > slots, "{} chunks", uploaded.n_chunks());
                    }
                    let mut contexts = vec![(small, uploaded)];
                    if let Some(d) = downlevel.as_ref().filter(|_| pattern == patterns[0]) {
                        let d = d.with_max_binding_size(cap);
                        let uploaded = d.upload_table(table.view(in_dtype)).unwrap();
                        contexts.push((d, uploaded));
                    }
                    for (k, (c, uploaded)) in contexts.iter().enumerate() {
                        for &(name, (ids, pos), pad_id) in &cases {
                            for out_dtype in DTYPES {
                                let options =
                                    EncodeOptions { out_dtype, pad_id, ..Default::default() };
                                let what = format!(
                                    "{name} D={dim} {in_dtype:?}->{out_dtype:?} cap={cap} \
                                     {pattern:?} downlevel={}",
                                    k == 1
                                );
                                let g = c.encode(&spec, uploaded, ids.view(), pos.view(), &options);
                                let want = cpu::encode(
                                    &spec,
                                    table.view(in_dtype),
                                    ids.view(),
                                    pos.view(),
                                    &options,
                                )
                                .unwrap();
                                assert_same_bits(&what, &g.unwrap(), &want);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `upload_table` writes a standard-layout table's rows from their own bytes and converts
/// any other view first; both give the same encodes, for 16-bit chunks of an odd element
/// count (a half word at the end) too.
#[test]
fn tables_upload_from_their_bytes_or_converted_with_the_same_bits() {
    use ndarray::s;
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(37);
    let (vocab, dim) = (5, 7);
    let spec = PeSpec::for_variant(posenc::Variant::DistilBert, dim as u32).unwrap();
    // A table of width 9 whose columns 1..8 are the one encoded: not contiguous.
    let wide = crate::support::random_table(&mut rng, vocab, dim + 2);
    let standard = wide.slice(s![.., 1..dim + 1]).to_owned();
    let (ids, pos) =
        (random_ids(&mut rng, 3, 4, vocab), positions::contiguous_batch(3, 4).unwrap());
    let (h16, b16) = (standard.mapv(f16::from_f32), standard.mapv(bf16::from_f32));
    let (wide16, wideb16) = (wide.mapv(f16::from_f32), wide.mapv(bf16::from_f32));
    let cols = s![.., 1..dim + 1];
    let tables = [
        ("f32", Embeddings::F32(standard.view()), Embeddings::F32(wide.slice(cols))),
        ("f16", Embeddings::F16(h16.view()), Embeddings::F16(wide16.slice(cols))),
        ("bf16", Embeddings::Bf16(b16.view()), Embeddings::Bf16(wideb16.slice(cols))),
    ];
    for (what, contiguous, strided) in tables {
        // Chunks of three rows and of two: 21 and 14 elements (a half word at the end of
        // the first, in 16 bits).
        let row = (dim * contiguous.dtype().size()) as u64;
        let small = ctx.with_max_binding_size((3 * row).next_multiple_of(4));
        let options = EncodeOptions::default();
        let want = cpu::encode(&spec, contiguous, ids.view(), pos.view(), &options).unwrap();
        for (how, table) in [("contiguous", contiguous), ("strided", strided)] {
            let uploaded = small.upload_table(table).unwrap();
            assert!(uploaded.n_chunks() == 2, "{what} {how}: {} chunks", uploaded.n_chunks());
            let got = small.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
            assert_same_bits(&format!("{what} {how}"), &got, &want);
        }
    }
}

/// An encode into a device buffer submits its work and returns without waiting for it
/// (WebGPU orders later queue work after it): many decode steps recorded back to back, each
/// copied out by the caller's own submission, all hold their CPU bits when read at the end.
#[test]
fn decode_steps_are_one_dispatch_and_need_no_wait() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(37);
    let (vocab, dim) = (64, 16);
    let spec = PeSpec::new(dim as u32).unwrap();
    let table = Table::new(&mut rng, vocab, dim);
    let uploaded = ctx.upload_table(table.view(Dtype::Bf16)).unwrap();
    let options = EncodeOptions { out_dtype: Dtype::Bf16, ..Default::default() };
    let out = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("test.decode.out"),
        size: 64 * 4 * dim as u64 * 2,
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    // Sixty-four decode steps recorded back to back into one buffer region each, read once
    // at the end: each step's result must be there although no step waited for the GPU.
    let mut want = Vec::new();
    for step in 0..64u32 {
        let ids = random_ids(&mut rng, 4, 1, vocab);
        let pos = Array2::from_elem((4, 1), 100 + step);
        let region = ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("test.decode.step"),
            size: 4 * dim as u64 * 2,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        ctx.encode_into_buffer(&spec, &uploaded, ids.view(), pos.view(), &options, &region)
            .unwrap();
        let mut encoder = ctx.device().create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(
            &region,
            0,
            &out,
            u64::from(step) * 4 * dim as u64 * 2,
            4 * dim as u64 * 2,
        );
        ctx.queue().submit([encoder.finish()]);
        let c =
            cpu::encode(&spec, table.view(Dtype::Bf16), ids.view(), pos.view(), &options).unwrap();
        want.extend(c.bits());
    }
    ctx.wait_idle().unwrap();
    let bytes = ctx.read_buffer(&out).unwrap();
    let got: Vec<u32> =
        bytes.chunks_exact(2).map(|b| u32::from(u16::from_le_bytes([b[0], b[1]]))).collect();
    assert_eq!(got.len(), want.len());
    if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
        panic!(
            "step {} differs at element {}: {:#x} != {:#x}",
            i / (4 * dim),
            i % (4 * dim),
            got[i],
            want[i]
        );
    }
}

#[test]
fn encode_into_buffer_writes_in_place_or_copies_in_with_copy_dst() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(77);
    let (vocab, dim) = (40, 12);
    let spec = PeSpec::new(dim as u32).unwrap();
    let table = Table::new(&mut rng, vocab, dim);
    let uploaded = ctx.upload_table(table.view(Dtype::F32)).unwrap();
    let options = EncodeOptions::default();
    let ids = random_ids(&mut rng, 3, 5, vocab);
    let pos = positions::contiguous_batch(3, 5).unwrap();
    let bytes = 3 * 5 * dim as u64 * 4;
    let buffer = |usage| {
        ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("test.into"),
            size: bytes,
            usage,
            mapped_at_creation: false,
        })
    };
    let bits = |b: &wgpu::Buffer| -> Vec<u32> {
        ctx.read_buffer(b)
            .unwrap()
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    let want =
        cpu::encode(&spec, table.view(Dtype::F32), ids.view(), pos.view(), &options).unwrap();
    use wgpu::BufferUsages as U;
    // Without STORAGE the result must be copied in, which needs COPY_DST.
    let neither = buffer(U::COPY_SRC);
    match ctx.encode_into_buffer(&spec, &uploaded, ids.view(), pos.view(), &options, &neither) {
        Err(e @ posenc::Error::InvalidParameter { field: "buffer usage", .. }) => {
            assert!(e.to_string().contains("COPY_DST"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // STORAGE alone: written in place.
    let in_place = buffer(U::STORAGE | U::COPY_SRC);
    ctx.encode_into_buffer(&spec, &uploaded, ids.view(), pos.view(), &options, &in_place).unwrap();
    assert_eq!(bits(&in_place), want.bits());
    // COPY_DST alone: written through scratch buffers, the same bits.
    let copy_only = buffer(U::COPY_DST | U::COPY_SRC);
    ctx.encode_into_buffer(&spec, &uploaded, ids.view(), pos.view(), &options, &copy_only).unwrap();
    assert_eq!(bits(&copy_only), want.bits());
}

/// The coalesced pattern shrinks groups until a dispatch has thousands of workgroups, so
/// small problems give one token per group; large batches sharing positions give groups of
/// several tokens, whose loop issues each token's loads before the previous one's stores.
/// Both group sizes, pads among them, every output type: the CPU's bits.
#[test]
fn coalesced_groups_of_several_tokens_keep_the_cpu_bits() {
    let Some(base) = gpu() else { return };
    let ctx = base.with_access_pattern(posenc::gpu::AccessPattern::Coalesced);
    let mut rng = Rng::new(91);
    // Rows of one block wider than the workgroup, so each invocation moves two distinct
    // units: 10000 tokens give groups of four (65 units: the last one alone), 16384 groups
    // of eight.
    for (dim, batch, len) in [(260, 40, 250), (256, 64, 256)] {
        let vocab = 53;
        let spec = PeSpec::new(dim as u32).unwrap();
        let table = Table::new(&mut rng, vocab, dim);
        let mut ids = random_ids(&mut rng, batch, len, vocab);
        ids[[3, 7]] = 5;
        ids[[batch - 1, len - 1]] = 5;
        let pos = positions::contiguous_batch(batch, len).unwrap();
        for dtype in [Dtype::F32, Dtype::Bf16] {
            let uploaded = ctx.upload_table(table.view(dtype)).unwrap();
            for out_dtype in [Dtype::F32, Dtype::F16] {
                let options = EncodeOptions { pad_id: Some(5), out_dtype, ..Default::default() };
                let g = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
                let c = cpu::encode(&spec, table.view(dtype), ids.view(), pos.view(), &options)
                    .unwrap();
                let what = format!("D={dim} B={batch} L={len} {dtype:?}->{out_dtype:?}");
                assert_same_bits(&what, &g, &c);
            }
        }
    }
}

/// A GPU's bounded pass of a prefill's size takes two units per invocation by default
/// (`posenc::shaders::recorded_encode_units`): the CPU's bits, at the threshold's shape.
#[test]
fn a_large_bounded_pass_keeps_the_cpu_bits_with_its_default_units() {
    use posenc::gpu::{AccessPattern, EncodePassDescriptor, Options, Positions};
    use posenc::shaders::{ENCODE_PASS_TWO_UNITS_MIN, recorded_encode_units};
    let options = Options::default().access_pattern(AccessPattern::Coalesced);
    let Some(ctx) = crate::support::fresh_gpu(&options) else { return };
    let mut rng = Rng::new(94);
    let (vocab, dim, batch, len) = (61, 4096, 2, 512);
    let step_units = (batch * len * dim / 4) as u64;
    assert!(step_units >= ENCODE_PASS_TWO_UNITS_MIN);
    assert_eq!(recorded_encode_units(None, true, true, step_units), Some(2));
    let spec = PeSpec::new(dim as u32).unwrap();
    let table = Table::new(&mut rng, vocab, dim);
    let ids = random_ids(&mut rng, batch, len, vocab);
    let pos = positions::contiguous_batch(batch, len).unwrap();
    let uploaded = ctx.upload_table(table.view(Dtype::Bf16)).unwrap();
    let c =
        cpu::encode(&spec, table.view(Dtype::Bf16), ids.view(), pos.view(), &Default::default())
            .unwrap();
    let desc = EncodePassDescriptor {
        batch,
        len,
        positions: Positions::PerToken,
        max_positions: Some(len as u32),
        ..EncodePassDescriptor::default()
    };
    let got = run_pass(&ctx, &spec, &uploaded, &desc, &ids, &pos);
    let want: Vec<u8> = c.bits().iter().flat_map(|b| b.to_le_bytes()).collect();
    assert!(got[..want.len()] == want[..], "the bounded pass differs from the CPU");
}

/// Every number of units per invocation of the coalesced pattern (`Options::units`): the
/// host-array kernel (groups of one and of several tokens, rows ending inside a block) and
/// the recorded pass (rows of one and of several blocks, bounded by the positions or not, a
/// table in one chunk or several) give the CPU's bits.
#[test]
fn every_units_per_invocation_keeps_the_cpu_bits() {
    use posenc::gpu::{AccessPattern, EncodePassDescriptor, Options, Positions};
    let mut rng = Rng::new(93);
    for units in [1, 2, 4, 8] {
        let options =
            Options::default().access_pattern(AccessPattern::Coalesced).units(Some(units));
        let Some(whole) = crate::support::fresh_gpu(&options) else { return };
        // The widest shape's table also in chunks of 256 KiB: two to four, in one window.
        let chunked = whole.with_max_binding_size(256 << 10);
        for (ctx, dim, batch, len) in [
            (&whole, 260, 40, 250),
            (&whole, 1028, 3, 5),
            (&whole, 4096, 2, 3),
            (&whole, 4608, 2, 2),
            (&chunked, 4608, 2, 2),
        ] {
            let vocab = 53;
            let spec = PeSpec::new(dim as u32).unwrap();
            let table = Table::new(&mut rng, vocab, dim);
            let mut ids = random_ids(&mut rng, batch, len, vocab);
            ids[[0, 0]] = 5;
            let pos = positions::contiguous_batch(batch, len).unwrap();
            for (dtype, out_dtype) in [(Dtype::F32, Dtype::F32), (Dtype::Bf16, Dtype::F16)] {
                let what =
                    format!("units {units} D={dim} B={batch} L={len} {dtype:?}->{out_dtype:?}");
                let uploaded = ctx.upload_table(table.view(dtype)).unwrap();
                let what = format!("{what} chunks {}", uploaded.n_chunks());
                assert_eq!(std::ptr::eq(ctx, &chunked), uploaded.n_chunks() > 1, "{what}");
                let options = EncodeOptions { pad_id: Some(5), out_dtype, ..Default::default() };
                let c = cpu::encode(&spec, table.view(dtype), ids.view(), pos.view(), &options)
                    .unwrap();
                let g = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
                assert_same_bits(&what, &g, &c);
                let desc = EncodePassDescriptor {
                    batch,
                    len,
                    positions: Positions::PerToken,
                    options,
                    ..EncodePassDescriptor::default()
                };
                // The recorded pass, and the same bounded by the batch's positions (every
                // PE row from the cache: the kernel without PE code).
                let bounded = EncodePassDescriptor { max_positions: Some(len as u32), ..desc };
                let want: Vec<u8> = c
                    .bits()
                    .iter()
                    .flat_map(|b| {
                        let bytes = b.to_le_bytes();
                        bytes[..out_dtype.size()].to_vec()
                    })
                    .collect();
                for (form, desc) in [("", &desc), (" bounded", &bounded)] {
                    let got = run_pass(ctx, &spec, &uploaded, desc, &ids, &pos);
                    assert!(
                        got[..want.len()] == want[..],
                        "{what}{form}: the recorded pass differs from the CPU"
                    );
                }
            }
        }
    }
}

/// A model's own frequencies (`PeSpec::with_inv_freq`) through the encode, cached PE rows
/// and cold positions, the vec4 and the general kernel, both frequency modes: the CPU's
/// bits. The formula's spec of the same variant and dim encodes first, so rows it cached
/// would show if the cache did not tell the two apart.
#[test]
fn given_frequencies_encode_bit_identically_and_do_not_share_cached_rows() {
    use posenc::{Frequencies, Variant};
    let Some(ctx) = gpu() else { return };
    let ctx = ctx.with_max_binding_size(u64::MAX); // a private cache for this test
    let mut rng = Rng::new(37);
    let vocab = 29;
    for (variant, dim) in [(Variant::Vaswani, 64usize), (Variant::Marian, 7)] {
        let formula = PeSpec::for_variant(variant, dim as u32).unwrap();
        // What torch computes for the formula, in float32 (not its correctly rounded value).
        let stored: Vec<f64> = (0..formula.n_freqs())
            .map(|i| f64::from(1.0 / 10000f32.powf((2 * i) as f32 / dim as f32)))
            .collect();
        let given = formula.clone().with_inv_freq(&stored).unwrap();
        let table = Table::new(&mut rng, vocab, dim);
        let uploaded = ctx.upload_table(table.view(Dtype::F32)).unwrap();
        let options = EncodeOptions::default();
        let ids = random_ids(&mut rng, 2, 9, vocab);
        // Cached rows (below the cache's reach) and cold ones, with the largest positions.
        let pos = Array2::from_shape_fn((2, 9), |(b, t)| {
            if b == 0 { t as u32 + 3 } else { u32::MAX - 2 * t as u32 }
        });
        for spec in [
            formula.clone(),
            given.clone(),
            formula.with_frequencies(Frequencies::F32),
            given.with_frequencies(Frequencies::F32),
        ] {
            let g = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
            let c = cpu::encode(&spec, table.view(Dtype::F32), ids.view(), pos.view(), &options)
                .unwrap();
            let what = format!(
                "{variant} d={dim} {:?} given={}",
                spec.frequencies(),
                spec.inv_freq().is_some()
            );
            assert_same_bits(&what, &g, &c);
        }
    }
}
