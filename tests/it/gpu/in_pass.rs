//! Recording into a compute pass the caller has open: a whole decode step (the encode, RoPE
//! of q and k, the ALiBi bias) beside the caller's own dispatches, one pass for all of it,
//! with the bits each pass's `record` gives; and the cases that need a pass of their own.

use half::bf16;
use ndarray::Array2;
use posenc::alibi::{AlibiSpec, bias_cpu};
use posenc::encode::{Dtype, Embeddings, EncodeOptions};
use posenc::gpu::{Context, EncodePassDescriptor, Positions, RopePassDescriptor};
use posenc::rope::{Layout, RopeSpec};
use posenc::{Error, PeSpec, cpu};
use wgpu::util::DeviceExt;

use crate::support::rope::tensor;
use crate::support::{Rng, downlevel_gpu, gpu, random_table};

fn buffer(ctx: &Context, contents: &[u8]) -> wgpu::Buffer {
    ctx.device().create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("test.in_pass"),
        contents,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
    })
}

#[test]
fn a_decode_step_records_into_one_caller_pass_with_the_bits_of_separate_records() {
    let Some(ctx) = gpu() else { return };
    let (batch, dim, vocab, heads, kv_heads, head_dim) = (4, 64, 300, 4, 2, 16);
    let mut rng = Rng::new(3);
    let table = random_table(&mut rng, vocab, dim).mapv(bf16::from_f32);
    let gpu_table = ctx.upload_table(Embeddings::Bf16(table.view())).unwrap();
    let spec = PeSpec::new(dim as u32).unwrap();
    let options = EncodeOptions { out_dtype: Dtype::Bf16, ..EncodeOptions::default() };
    let encode_desc = EncodePassDescriptor {
        batch,
        len: 1,
        positions: Positions::PerSequence,
        options,
        ..EncodePassDescriptor::default()
    };
    let encode = ctx.encode_pass(&spec, &gpu_table, &encode_desc).unwrap();
    let rope_spec = RopeSpec::new(head_dim as u32).unwrap();
    let rope_desc = RopePassDescriptor {
        shape: [batch, 1, heads, head_dim],
        layout: Layout::Blhd,
        dtype: Dtype::Bf16,
        positions: Positions::PerSequence,
        k_heads: kv_heads,
    };
    let rope = ctx.rope_pass(&rope_spec, &rope_desc).unwrap();
    let alibi_spec = AlibiSpec::new(heads as u32, 1).unwrap().with_kv_len(40).unwrap();
    let alibi_spec = alibi_spec.with_offset(39).unwrap();
    let alibi = ctx.alibi_pass(&alibi_spec).unwrap();

    let ids: Vec<u32> = (0..batch).map(|_| rng.below(vocab as u64) as u32).collect();
    let starts: Vec<u32> = vec![0, 5, 4000, u32::MAX - 1];
    let q = tensor::<bf16>([batch, 1, heads, head_dim], 1);
    let k = tensor::<bf16>([batch, 1, kv_heads, head_dim], 2);
    let q_bytes: &[u8] = bytemuck::cast_slice(q.as_slice().unwrap());
    let k_bytes: &[u8] = bytemuck::cast_slice(k.as_slice().unwrap());
    let inputs = |ctx: &Context| {
        (
            buffer(ctx, bytemuck::cast_slice(&ids)),
            buffer(ctx, bytemuck::cast_slice(&starts)),
            buffer(ctx, &vec![0xAB; encode.output_bytes() as usize]),
            buffer(ctx, &[q_bytes, k_bytes].concat()),
            buffer(ctx, &vec![0xAB; alibi.output_bytes() as usize]),
        )
    };
    let k_at = q_bytes.len() as u64;

    // Each pass's own record, in its own passes.
    let (ids_a, pos_a, out_a, qk_a, bias_a) = inputs(ctx);
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    encode.record(&mut encoder, ids_a.slice(..), pos_a.slice(..), out_a.slice(..)).unwrap();
    rope.record_qk(&mut encoder, qk_a.slice(..k_at), qk_a.slice(k_at..), pos_a.slice(..)).unwrap();
    alibi.record(&mut encoder, bias_a.slice(..)).unwrap();
    ctx.queue().submit([encoder.finish()]);

    // All three in one pass of the caller's, between dispatches of the caller's own (a
    // second encode, standing in for an engine's kernels).
    let (ids_b, pos_b, out_b, qk_b, bias_b) = inputs(ctx);
    let other = buffer(ctx, &vec![0u8; encode.output_bytes() as usize]);
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        encode.record_in(&mut pass, ids_b.slice(..), pos_b.slice(..), other.slice(..)).unwrap();
        encode.record_in(&mut pass, ids_b.slice(..), pos_b.slice(..), out_b.slice(..)).unwrap();
        rope.record_qk_in(&mut pass, qk_b.slice(..k_at), qk_b.slice(k_at..), pos_b.slice(..))
            .unwrap();
        alibi.record_in(&mut pass, bias_b.slice(..)).unwrap();
    }
    ctx.queue().submit([encoder.finish()]);

    let read = |b: &wgpu::Buffer| ctx.read_buffer(b).unwrap();
    assert_eq!(read(&out_a), read(&out_b), "encode");
    assert_eq!(read(&other), read(&out_b), "the caller's dispatch");
    assert_eq!(read(&qk_a), read(&qk_b), "rope");
    assert_eq!(read(&bias_a), read(&bias_b), "alibi");
    // And the CPU's bits.
    let positions = Array2::from_shape_fn((batch, 1), |(b, _)| starts[b]);
    let ids2 = Array2::from_shape_vec((batch, 1), ids.clone()).unwrap();
    let want =
        cpu::encode(&spec, Embeddings::Bf16(table.view()), ids2.view(), positions.view(), &options)
            .unwrap();
    let want: Vec<u8> = match want {
        posenc::encode::Encoded::Bf16(a) => {
            a.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect()
        }
        other => panic!("bf16 out, got {other:?}"),
    };
    assert_eq!(read(&out_b), want, "encode against the CPU");
    let bias: Vec<u8> =
        bias_cpu(&alibi_spec).unwrap().iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(read(&bias_b), bias, "alibi against the CPU");
    let host_q = ctx.rope(&rope_spec, q.view(), positions.view(), Layout::Blhd).unwrap();
    let host_k = ctx.rope(&rope_spec, k.view(), positions.view(), Layout::Blhd).unwrap();
    let host: Vec<u8> = [
        bytemuck::cast_slice::<bf16, u8>(host_q.as_slice().unwrap()),
        bytemuck::cast_slice(host_k.as_slice().unwrap()),
    ]
    .concat();
    assert_eq!(read(&qk_b), host, "rope against Context::rope");
}

/// A record that must copy the step's ids first cannot go into a caller's pass: it is
/// refused by name, and `record` still takes it.
#[test]
fn encode_records_that_copy_first_are_refused_in_a_callers_pass() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(5);
    let table = random_table(&mut rng, 50, 8);
    let spec = PeSpec::new(8).unwrap();
    let check = |ctx: &Context, arena: bool| {
        let gpu_table = ctx.upload_table(Embeddings::F32(table.view())).unwrap();
        let desc = EncodePassDescriptor { batch: 2, ..EncodePassDescriptor::default() };
        let pass = ctx.encode_pass(&spec, &gpu_table, &desc).unwrap();
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
        let words = ctx.device().create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("test.arena"),
            contents: &[0u8; 256],
            usage,
        });
        let own = buffer(ctx, &[0; 64]);
        let out = if arena { words.slice(64..) } else { own.slice(..) };
        let mut encoder = ctx.device().create_command_encoder(&Default::default());
        {
            let mut cpass = encoder.begin_compute_pass(&Default::default());
            let e =
                pass.record_in(&mut cpass, words.slice(..8), words.slice(8..16), out).unwrap_err();
            assert!(matches!(e, Error::InvalidParameter { field: "pass", .. }), "{e}");
        }
        pass.record(&mut encoder, words.slice(..8), words.slice(8..16), out).unwrap();
        ctx.queue().submit([encoder.finish()]);
        ctx.wait_idle().unwrap();
    };
    check(ctx, true);
    if let Some(small) = downlevel_gpu() {
        check(small, false);
    }
}
