//! The probe of the kernels' half-precision conversions (`shaders/shared/convert.wgsl`,
//! through `convert4.wgsl`'s vec4 forms that the encode and RoPE kernels call), shared by
//! the native test (`tests/it/gpu/convert.rs`) and the browser's (`tests/web.rs`): a WGSL
//! kernel per conversion, the inputs, and the comparison with the CPU twins in
//! `posenc::convert`.

use posenc::convert;
use posenc::gpu::Context;
use wgpu::util::DeviceExt;

use super::random::Rng;

/// The forms of the conversions a kernel may be built with, each probed in a kernel of its
/// own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// As for adapters that run shaders on CPU cores: f16 widened by `widen4_f16_general`.
    CpuAdapters,
    /// As for GPUs: `widen4_f16` with its short path.
    Gpu,
    /// As for GPUs on an adapter with WGSL's unpack2x16float: f16 widened by it
    /// (`posenc::shaders::F16_UNPACK`).
    GpuUnpack,
}

/// The builds to probe on `ctx`: every one, but the unpack form only where the adapter has
/// unpack2x16float (wgpu's `SHADER_F16_IN_F32`), as posenc builds it only there.
pub fn builds(ctx: &Context) -> Vec<Build> {
    let unpack = ctx
        .adapter()
        .get_downlevel_capabilities()
        .flags
        .contains(wgpu::DownlevelFlags::SHADER_F16_IN_F32);
    let mut builds = vec![Build::CpuAdapters, Build::Gpu];
    if unpack {
        builds.push(Build::GpuUnpack);
    }
    builds
}

/// The probe's kernel: for each 16-bit type T (`f16`, `bf16`), entry points `widen_T` and
/// `narrow_T`; each invocation converts one unit, four halves (two words) widened to four
/// f32 words, or four f32 words narrowed to two words of halves, in the forms of `build`.
fn probe_source(build: Build) -> String {
    let mut src = String::from(
        "#import convert4
@group(0) @binding(0) var<storage, read> input: array<u32>;
@group(0) @binding(1) var<storage, read_write> output: array<u32>;
",
    );
    if build == Build::GpuUnpack {
        src += posenc::shaders::F16_UNPACK;
    }
    for t in ["f16", "bf16"] {
        let widen = match (build, t) {
            (Build::CpuAdapters, "f16") => "widen4_f16_general".into(),
            (Build::GpuUnpack, "f16") => "widen4_f16_unpack".into(),
            _ => format!("widen4_{t}"),
        };
        src += &format!(
            "
@compute @workgroup_size(64)
fn widen_{t}(@builtin(global_invocation_id) g: vec3<u32>) {{
    let i = g.x + g.y * 65535u * 64u;
    if 2u * i >= arrayLength(&input) {{ return; }}
    let v = bitcast<vec4<u32>>({widen}(vec2<u32>(input[2u * i], input[2u * i + 1u])));
    for (var k = 0u; k < 4u; k++) {{ output[4u * i + k] = v[k]; }}
}}

@compute @workgroup_size(64)
fn narrow_{t}(@builtin(global_invocation_id) g: vec3<u32>) {{
    let i = g.x + g.y * 65535u * 64u;
    if 4u * i >= arrayLength(&input) {{ return; }}
    let x = vec4<u32>(input[4u * i], input[4u * i + 1u], input[4u * i + 2u], input[4u * i + 3u]);
    let h = narrow4_{t}(bitcast<vec4<f32>>(x));
    output[2u * i] = h.x;
    output[2u * i + 1u] = h.y;
}}
"
        );
    }
    src
}

/// A conversion of the probe: its entry point, its CPU twin, and whether it widens (16 to
/// 32 bits).
pub type Conversion = (&'static str, fn(u32) -> u32, bool);

/// The probe's conversions.
pub const CONVERSIONS: [Conversion; 4] = [
    ("widen_f16", convert::f16_to_f32_bits, true),
    ("widen_bf16", convert::bf16_to_f32_bits, true),
    ("narrow_f16", convert::f32_to_f16_bits, false),
    ("narrow_bf16", convert::f32_to_bf16_bits, false),
];

/// Submits entry point `entry` of the probe's kernel in the forms of `build` over `input`
/// (whole units) and returns the buffer of its `out_words` words, to read back once the
/// queue has run.
pub fn submit(
    ctx: &Context,
    entry: &str,
    build: Build,
    input: &[u32],
    out_words: usize,
) -> wgpu::Buffer {
    let device = ctx.device();
    let source = posenc::shaders::compose(&probe_source(build)).unwrap();
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
    // Four values in or out per invocation, 64 invocations per workgroup.
    let groups = (out_words.max(input.len()) as u32).div_ceil(4 * 64);
    let (x, y) = (groups.min(65535), groups.div_ceil(65535));
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(x, y, 1);
    }
    ctx.queue().submit([encoder.finish()]);
    output
}

/// The input words of a conversion, and how many words it writes.
pub fn inputs(widens: bool) -> (Vec<u32>, usize) {
    if widens {
        let words = every_half();
        let n = 2 * words.len();
        (words, n)
    } else {
        let values = f32_probes();
        let n = values.len() / 2;
        (values, n)
    }
}

/// The halves a widening input holds, in its order.
fn halves(words: &[u32]) -> Vec<u32> {
    words.iter().flat_map(|w| [w & 0xffff, w >> 16]).collect()
}

/// Checks the words `got` that conversion `entry` built as `build` wrote for `input`
/// against `twin`, naming the first few that differ. Every bit is the twin's, but for the
/// f16 widening by unpack2x16float (`Build::GpuUnpack`), where a NaN half may become any
/// f32 NaN: which NaN is the hardware's, as the promise says (docs/guarantees.md), and
/// the twin keeps the payload, which GPUs need not (NVIDIA's conversions give one NaN).
/// Every other half, subnormals included, must widen exactly there too.
pub fn check(
    entry: &str,
    build: Build,
    twin: fn(u32) -> u32,
    widens: bool,
    input: &[u32],
    got: &[u8],
) {
    let what = format!("{entry} ({build:?})");
    let words: &[u32] = bytemuck::cast_slice(got);
    let (values, got): (Vec<u32>, Vec<u32>) =
        if widens { (halves(input), words.to_vec()) } else { (input.to_vec(), halves(words)) };
    let want: Vec<u32> = values.iter().map(|&v| twin(v)).collect();
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let any_nan = build == Build::GpuUnpack && entry == "widen_f16";
    let is_nan = |bits: u32| bits & 0x7fff_ffff > 0x7f80_0000;
    let same = |g: u32, w: u32| g == w || (any_nan && is_nan(w) && is_nan(g));
    let bad: Vec<String> = values
        .iter()
        .zip(got.iter().zip(&want))
        .filter(|(_, (g, w))| !same(**g, **w))
        .take(8)
        .map(|(v, (g, w))| format!("{v:#010x}: got {g:#010x}, want {w:#010x}"))
        .collect();
    let n = got.iter().zip(&want).filter(|(g, w)| !same(**g, **w)).count();
    assert!(bad.is_empty(), "{what}: {n} of {} differ, first {bad:#?}", want.len());
}

/// Every 16-bit pattern, two to a word, low half first: in order (a unit of four mixes
/// neighbours), then each one four times (a unit of one value, so each value on either side
/// of the vec4 form's test for normal values takes the path that test picks for it).
pub fn every_half() -> Vec<u32> {
    let pairs = (0..0x8000u32).map(|w| (2 * w) | ((2 * w + 1) << 16));
    pairs.chain((0..0x1_0000u32).flat_map(|h| [h | (h << 16); 2])).collect()
}

/// f32 bit patterns where rounding to f16 or bf16 turns, for every exponent and both
/// signs, and random ones; a multiple of four.
pub fn f32_probes() -> Vec<u32> {
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
            // Each of the fixed mantissas four times: a unit of one value, as every_half's
            // second part.
            out.extend(mantissas[..8].iter().flat_map(|m| [sign | (exp << 23) | m; 4]));
        }
    }
    // The vec4 form's bounds for normal results, and one below each, a unit each.
    for x in [0x3880_0000u32, 0x387f_ffff, 0x477f_f000, 0x477f_efff, 0x7f80_0000, 0x7f80_0001] {
        out.extend([x; 4]);
        out.extend([x | (1 << 31); 4]);
    }
    out.extend((0..1 << 20).map(|_| rng.next_u32()));
    out.resize(out.len().next_multiple_of(4), 0);
    out
}
