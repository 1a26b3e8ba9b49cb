// A lower bound for the recorded decode step on a CPU adapter (lavapipe): the least work a
// B = 32 Llama-3 step can do (one bf16 table row read, one f32 PE row read, one bf16 row
// written per token, as vec2/vec4 words, no exactness or fault logic) in the loop shape of
// `posenc bench --decode` (one command buffer per step, no waits), against the same number
// of trivial dispatches. Run: `DECODE=32 cargo run --release` (see README.md). The plain
// run compares the PE read from a storage buffer, a texture and none, per token.
use std::time::Instant;
use wgpu::util::DeviceExt;

const COMMON: &str = r"
struct P { units: u32, vocab: u32, positions: u32, pad: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> table: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read> step: array<u32>;
fn hash(x0: u32) -> u32 {
    var x = x0 * 747796405u + 2891336453u;
    x = ((x >> ((x >> 28u) + 4u)) ^ x) * 277803737u;
    return (x >> 22u) ^ x;
}
fn widen(e: vec2<u32>) -> vec4<f32> {
    return vec4<f32>(bitcast<f32>(e.x << 16u), bitcast<f32>(e.x & 0xffff0000u),
                     bitcast<f32>(e.y << 16u), bitcast<f32>(e.y & 0xffff0000u));
}
fn narrow(s: vec4<f32>) -> vec2<u32> {
    let u = bitcast<vec4<u32>>(s);
    return vec2<u32>((u.x >> 16u) | (u.y & 0xffff0000u), (u.z >> 16u) | (u.w & 0xffff0000u));
}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let t = wg.x + 32u * step[0];
    let row = select(hash(t) % p.vocab, t % 32u, p.pad == 1u);
    let pos = (t * 7u + 3u) % p.positions;
    let at = (t % 32u) * p.units;
    for (var j = 0u; j < 4u; j++) {
        let x = li + j * 256u;
        if x < p.units {
            let e = widen(table[row * p.units + x]);
            out[at + x] = narrow(e + pe(pos, x));
        }
    }
}
";
const SSBO: &str = r"
@group(0) @binding(2) var<storage, read> cache: array<vec4<u32>>;
fn pe(pos: u32, x: u32) -> vec4<f32> { return bitcast<vec4<f32>>(cache[pos * p.units + x]); }
";
const TEX: &str = r"
@group(0) @binding(2) var cache: texture_2d<u32>;
fn pe(pos: u32, x: u32) -> vec4<f32> { return bitcast<vec4<f32>>(textureLoad(cache, vec2<u32>(x, pos), 0)); }
";
const NONE: &str = r"
@group(0) @binding(2) var<storage, read> cache: array<vec4<u32>>;
fn pe(pos: u32, x: u32) -> vec4<f32> { return vec4<f32>(f32(pos + x)); }
fn unused() -> u32 { return cache[0].x; }
";

fn main() {
    let instance = wgpu::Instance::default();
    let adapter = pollster::block_on(instance.request_adapter(&Default::default())).unwrap();
    eprintln!("{:?}", adapter.get_info());
    let mut limits = wgpu::Limits::default();
    limits.max_storage_buffer_binding_size = adapter.limits().max_storage_buffer_binding_size;
    limits.max_buffer_size = adapter.limits().max_buffer_size;
    limits.max_texture_dimension_2d = adapter.limits().max_texture_dimension_2d;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_limits: limits,
        ..Default::default()
    }))
    .unwrap();
    let units: u32 = 1024; // D = 4096
    let vocab: u32 = 16384;
    let positions: u32 = 4096;
    let tokens: u32 = 3200;
    let table: Vec<u32> = (0..vocab as usize * units as usize * 2).map(|i| (i as u32).wrapping_mul(2654435761)).collect();
    let cache: Vec<u32> = (0..positions as usize * units as usize * 4).map(|i| (i as u32 % 1000) * 0x10000 + 0x3f000000).collect();
    let init = |c: &[u32], u| device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: None, contents: bytemuck::cast_slice(c), usage: u });
    use wgpu::BufferUsages as U;
    let hot = std::env::var("HOT").is_ok() as u32;
    let params = init(&[units, vocab, positions, hot], U::UNIFORM);
    let table_b = init(&table, U::STORAGE);
    let cache_b = init(&cache, U::STORAGE);
    let step_b = init(&[0u32, 0, 0, 0], U::STORAGE | U::COPY_DST);
    let trivial_src = "@group(0) @binding(0) var<storage, read_write> c: array<u32>;\n@compute @workgroup_size(64) fn main(@builtin(local_invocation_index) i: u32) { if i == 0u { c[0] = c[0] + 1u; } }";
    let tm = device.create_shader_module(wgpu::ShaderModuleDescriptor { label: None, source: wgpu::ShaderSource::Wgsl(trivial_src.into()) });
    let tpl = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor { label: None, layout: None, module: &tm, entry_point: Some("main"), compilation_options: Default::default(), cache: None });
    let tbg = device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &tpl.get_bind_group_layout(0), entries: &[wgpu::BindGroupEntry { binding: 0, resource: step_b.as_entire_binding() }]});
    let out_b = device.create_buffer(&wgpu::BufferDescriptor { label: None, size: 32 * units as u64 * 8, usage: U::STORAGE | U::COPY_SRC, mapped_at_creation: false });
    let tex = device.create_texture_with_data(&queue, &wgpu::TextureDescriptor {
        label: None,
        size: wgpu::Extent3d { width: units, height: positions, depth_or_array_layers: 1 },
        mip_level_count: 1, sample_count: 1, dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::Rgba32Uint,
        usage: wgpu::TextureUsages::TEXTURE_BINDING,
        view_formats: &[],
    }, wgpu::util::TextureDataOrder::LayerMajor, bytemuck::cast_slice(&cache));
    let view = tex.create_view(&Default::default());
    let mk = |pe: &str, texture: bool| {
        let src = format!("{pe}{COMMON}");
        let m = device.create_shader_module(wgpu::ShaderModuleDescriptor { label: None, source: wgpu::ShaderSource::Wgsl(src.into()) });
        let pl = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor { label: None, layout: None, module: &m, entry_point: Some("main"), compilation_options: Default::default(), cache: None });
        let bgl = pl.get_bind_group_layout(0);
        let e2 = if texture { wgpu::BindingResource::TextureView(&view) } else { cache_b.as_entire_binding() };
        let bg = device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &bgl, entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: table_b.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 2, resource: e2 },
            wgpu::BindGroupEntry { binding: 3, resource: out_b.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 4, resource: step_b.as_entire_binding() },
        ]});
        (pl, bg)
    };
    let mk_none = || {
        let src = format!("{NONE}{COMMON}");
        let m = device.create_shader_module(wgpu::ShaderModuleDescriptor { label: None, source: wgpu::ShaderSource::Wgsl(src.into()) });
        let pl = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor { label: None, layout: None, module: &m, entry_point: Some("main"), compilation_options: Default::default(), cache: None });
        let bgl = pl.get_bind_group_layout(0);
        let bg = device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &bgl, entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: table_b.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 3, resource: out_b.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 4, resource: step_b.as_entire_binding() },
        ]});
        (pl, bg)
    };
    let variants = [("ssbo", mk(SSBO, false)), ("texture", mk(TEX, true)), ("no-pe", mk_none())];
    let run = |pl: &wgpu::ComputePipeline, bg: &wgpu::BindGroup| {
        let mut enc = device.create_command_encoder(&Default::default());
        {
            let mut c = enc.begin_compute_pass(&Default::default());
            c.set_pipeline(pl);
            c.set_bind_group(0, bg, &[]);
            for _ in 0..4 { c.dispatch_workgroups(tokens, 1, 1); }
        }
        let t = Instant::now();
        queue.submit([enc.finish()]);
        device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        t.elapsed().as_secs_f64() / (4.0 * tokens as f64)
    };
    if std::env::var("DECODE").is_ok() {
        let b: u32 = std::env::var("DECODE").unwrap().parse().unwrap();
        let steps = 300;
        let run_loop = |main: Option<&(wgpu::ComputePipeline, wgpu::BindGroup)>| {
            let t = Instant::now();
            for _ in 0..steps {
                let mut enc = device.create_command_encoder(&Default::default());
                {
                    let mut c = enc.begin_compute_pass(&Default::default());
                    c.set_pipeline(&tpl); c.set_bind_group(0, &tbg, &[]); c.dispatch_workgroups(1, 1, 1);
                    c.dispatch_workgroups(1, 1, 1);
                    c.dispatch_workgroups(1, 1, 1);
                    match main {
                        Some((pl, bg)) => { c.set_pipeline(pl); c.set_bind_group(0, bg, &[]); c.dispatch_workgroups(b, 1, 1); }
                        None => { c.dispatch_workgroups(1, 1, 1); }
                    }
                }
                queue.submit([enc.finish()]);
            }
            device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
            t.elapsed().as_secs_f64() / steps as f64
        };
        for _ in 0..2 { run_loop(None); run_loop(Some(&variants[0].1)); }
        let mut r = vec![vec![]; 4];
        for _ in 0..7 {
            r[0].push(run_loop(None));
            for i in 0..3 { r[i + 1].push(run_loop(Some(&variants[i].1))); }
        }
        for v in &mut r { v.sort_by(|a, b| a.partial_cmp(b).unwrap()); }
        println!("B={b} floor {:.1} us; ssbo {:.1} ({:.2}x); texture {:.1} ({:.2}x); no-pe {:.1} ({:.2}x)", r[0][3]*1e6, r[1][3]*1e6, r[1][3]/r[0][3], r[2][3]*1e6, r[2][3]/r[0][3], r[3][3]*1e6, r[3][3]/r[0][3]);
        return;
    }
    let mut res: Vec<Vec<f64>> = vec![vec![]; variants.len()];
    for _ in 0..2 { for (_, (pl, bg)) in &variants { run(pl, bg); } }
    for _ in 0..9 { for (i, (_, (pl, bg))) in variants.iter().enumerate() { res[i].push(run(pl, bg)); } }
    for (i, (name, _)) in variants.iter().enumerate() {
        let mut v = res[i].clone(); v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("{name:8} median {:.2} us/token  min {:.2}", v[v.len()/2] * 1e6, v[0] * 1e6);
    }
}
