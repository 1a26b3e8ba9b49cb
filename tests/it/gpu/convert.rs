//! The kernels' half-precision conversions (`shaders/shared/convert.wgsl`, through
//! `convert4.wgsl`'s vec4 forms that the encode and RoPE kernels call) against their CPU
//! twins in `posenc::convert`, bit for bit: every one of the 65536 f16 and bf16 values
//! widened, and f32 values of every exponent rounded to f16 and bf16, with the mantissas
//! where rounding turns (each tie of every subnormal shift, one below and above it, the
//! extremes) and random ones, signs and NaN payloads included.

use posenc::convert;
use posenc::gpu::Context;
use wgpu::util::DeviceExt;

use crate::support::{Rng, gpu};

/// Each invocation converts one unit: four halves (two words) widened to four f32 words,
/// or four f32 words narrowed to two words of halves.
const PROBE: &str = "
#import convert4

@group(0) @binding(0) var<storage, read> input: array<u32>;
@group(0) @binding(1) var<storage, read_write> output: array<u32>;

@compute @workgroup_size(64)
fn widen_f16(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x + g.y * 65535u * 64u;
    if 2u * i >= arrayLength(&input) { return; }
    let v = bitcast<vec4<u32>>(widen4_f16(vec2<u32>(input[2u * i], input[2u * i + 1u])));
    for (var k = 0u; k < 4u; k++) { output[4u * i + k] = v[k]; }
}

@compute @workgroup_size(64)
fn widen_bf16(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x + g.y * 65535u * 64u;
    if 2u * i >= arrayLength(&input) { return; }
    let v = bitcast<vec4<u32>>(widen4_bf16(vec2<u32>(input[2u * i], input[2u * i + 1u])));
    for (var k = 0u; k < 4u; k++) { output[4u * i + k] = v[k]; }
}

@compute @workgroup_size(64)
fn narrow_f16(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x + g.y * 65535u * 64u;
    if 4u * i >= arrayLength(&input) { return; }
    let x = vec4<u32>(input[4u * i], input[4u * i + 1u], input[4u * i + 2u], input[4u * i + 3u]);
    let h = narrow4_f16(bitcast<vec4<f32>>(x));
    output[2u * i] = h.x;
    output[2u * i + 1u] = h.y;
}

@compute @workgroup_size(64)
fn narrow_bf16(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x + g.y * 65535u * 64u;
    if 4u * i >= arrayLength(&input) { return; }
    let x = vec4<u32>(input[4u * i], input[4u * i + 1u], input[4u * i + 2u], input[4u * i + 3u]);
    let h = narrow4_bf16(bitcast<vec4<f32>>(x));
    output[2u * i] = h.x;
    output[2u * i + 1u] = h.y;
}
";

/// Runs entry point `entry` of [`PROBE`] over `input` (whole units), returning
/// `out_words` words.
fn run(ctx: &Context, entry: &str, input: &[u32], out_words: usize) -> Vec<u32> {
    let device = ctx.device();
    let source = posenc::shaders::compose(PROBE).unwrap();
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("convert probe"),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(entry),
        layout: None,
        module: &module,
        entry_point: Some(entry),
        compilation_options: Default::default(),
        cache: None,
    });
    let input_buf = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("convert probe input"),
        contents: bytemuck::cast_slice(input),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let output = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("convert probe output"),
        size: (out_words * 4) as u64,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: input_buf.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: output.as_entire_binding() },
        ],
    });
    let units = (out_words.max(input.len()) / 2) as u32;
    let groups = units.div_ceil(64);
    let (x, y) = (groups.min(65535), groups.div_ceil(65535));
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(x, y, 1);
    }
    ctx.queue().submit([encoder.finish()]);
    bytemuck::cast_slice(&ctx.read_buffer(&output).unwrap()).to_vec()
}

/// Every 16-bit pattern, two to a word, low half first.
fn every_half() -> Vec<u32> {
    (0..0x8000u32).map(|w| (2 * w) | ((2 * w + 1) << 16)).collect()
}

/// f32 bit patterns where rounding to f16 or bf16 turns, for every exponent and both
/// signs, and random ones; a multiple of four.
fn f32_probes() -> Vec<u32> {
    let mut mantissas: Vec<u32> =
        vec![0, 1, 2, 0x3f_ffff, 0x40_0000, 0x40_0001, 0x7f_fffe, 0x7f_ffff];
    // Around each tie of a right shift by 13 - 24 bits of the mantissa with its implicit bit
    // (f16's normal and subnormal results) and by 16 (bf16), with an even and an odd kept
    // part.
    for shift in 13..=24u32 {
        let half = 1u32 << (shift - 1);
        for kept in [0u32, 1, 2, 3, 0x3ff, 0x7ff] {
            let base = (kept << shift) & 0x7f_ffff;
            for m in [base + half - 1, base + half, base + half + 1, base | ((1 << shift) - 1)] {
                mantissas.push(m & 0x7f_ffff);
            }
        }
    }
    let mut rng = Rng::new(0xf16);
    mantissas.extend((0..256).map(|_| rng.next_u32() & 0x7f_ffff));
    let mut out = Vec::new();
    for sign in [0u32, 1 << 31] {
        for exp in 0..256u32 {
            out.extend(mantissas.iter().map(|m| sign | (exp << 23) | m));
        }
    }
    out.extend((0..1 << 20).map(|_| rng.next_u32()));
    out.resize(out.len().next_multiple_of(4), 0);
    out
}

/// The first few inputs whose conversion differs, for a message.
fn mismatches(inputs: &[u32], got: &[u32], want: &[u32]) -> Vec<String> {
    let bad: Vec<String> = inputs
        .iter()
        .zip(got.iter().zip(want))
        .filter(|(_, (g, w))| g != w)
        .take(8)
        .map(|(i, (g, w))| format!("{i:#010x}: got {g:#010x}, want {w:#010x}"))
        .collect();
    bad
}

#[test]
fn every_half_widens_to_the_cpu_twin_bits() {
    let Some(ctx) = gpu() else { return };
    let words = every_half();
    let halves: Vec<u32> = (0..0x1_0000).collect();
    for (entry, twin) in [
        ("widen_f16", convert::f16_to_f32_bits as fn(u32) -> u32),
        ("widen_bf16", convert::bf16_to_f32_bits),
    ] {
        let got = run(ctx, entry, &words, halves.len());
        let want: Vec<u32> = halves.iter().map(|&h| twin(h)).collect();
        let bad = mismatches(&halves, &got, &want);
        assert!(bad.is_empty(), "{entry}: {} of 65536 differ, first {bad:#?}", {
            got.iter().zip(&want).filter(|(g, w)| g != w).count()
        });
    }
}

#[test]
fn f32_values_round_to_the_cpu_twin_halves() {
    let Some(ctx) = gpu() else { return };
    let inputs = f32_probes();
    for (entry, twin) in [
        ("narrow_f16", convert::f32_to_f16_bits as fn(u32) -> u32),
        ("narrow_bf16", convert::f32_to_bf16_bits),
    ] {
        let words = run(ctx, entry, &inputs, inputs.len() / 2);
        let got: Vec<u32> = words.iter().flat_map(|w| [w & 0xffff, w >> 16]).collect();
        let want: Vec<u32> = inputs.iter().map(|&x| twin(x)).collect();
        let bad = mismatches(&inputs, &got, &want);
        assert!(
            bad.is_empty(),
            "{entry}: {} of {} differ, first {bad:#?}",
            { got.iter().zip(&want).filter(|(g, w)| g != w).count() },
            inputs.len()
        );
    }
}
