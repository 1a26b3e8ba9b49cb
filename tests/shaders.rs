//! Every kernel parses and validates with naga, and translates to the shading languages of
//! the other backends (MSL for Metal, HLSL for DX12, SPIR-V for Vulkan, GLSL ES for GL), so
//! a translation failure shows up on Linux. No kernel may call the builtin sin/cos/exp/pow.

use naga::back::{glsl, hlsl, msl, spv};
use naga::valid::{Capabilities, ValidationFlags, Validator};

fn validated(name: &str, src: &str) -> (naga::Module, naga::valid::ModuleInfo) {
    let module = naga::front::wgsl::parse_str(src)
        .unwrap_or_else(|e| panic!("{name} does not parse:\n{}", e.emit_to_string(src)));
    // Capabilities::empty(): the kernels must need no optional feature.
    let info = Validator::new(ValidationFlags::all(), Capabilities::empty())
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name} does not validate:\n{}", e.emit_to_string(src)));
    (module, info)
}

#[test]
fn every_kernel_translates_to_msl_hlsl_spirv_and_glsl() {
    for (name, entry, src) in posenc::shaders::all_sources() {
        let (module, info) = validated(&name, &src);
        msl::write_string(
            &module,
            &info,
            &msl::Options::default(),
            &msl::PipelineOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{name} -> MSL: {e}"));
        let mut hlsl_out = String::new();
        hlsl::Writer::new(
            &mut hlsl_out,
            &hlsl::Options::default(),
            &hlsl::PipelineOptions::default(),
        )
        .write(&module, &info, None)
        .unwrap_or_else(|e| panic!("{name} -> HLSL: {e}"));
        spv::write_vec(&module, &info, &spv::Options::default(), None)
            .unwrap_or_else(|e| panic!("{name} -> SPIR-V: {e}"));
        let mut glsl_out = String::new();
        let options = glsl::Options {
            version: glsl::Version::Embedded { version: 310, is_webgl: false },
            ..Default::default()
        };
        let pipeline = glsl::PipelineOptions {
            shader_stage: naga::ShaderStage::Compute,
            entry_point: entry.to_string(),
            multiview: None,
        };
        glsl::Writer::new(
            &mut glsl_out,
            &module,
            &info,
            &options,
            &pipeline,
            naga::proc::BoundsCheckPolicies::default(),
        )
        .and_then(|mut w| w.write())
        .unwrap_or_else(|e| panic!("{name} -> GLSL ES: {e}"));
    }
}

#[test]
fn no_kernel_calls_builtin_transcendentals() {
    for (name, _, src) in posenc::shaders::all_sources() {
        let (module, _) = validated(&name, &src);
        let mut calls = Vec::new();
        let mut check = |f: &naga::Function| {
            for (_, e) in f.expressions.iter() {
                if let naga::Expression::Math { fun, .. } = e {
                    use naga::MathFunction as M;
                    if matches!(
                        fun,
                        M::Sin | M::Cos | M::Tan | M::Exp | M::Exp2 | M::Pow | M::Log | M::Log2
                    ) {
                        calls.push(format!("{fun:?}"));
                    }
                }
            }
        };
        for (_, f) in module.functions.iter() {
            check(f);
        }
        for ep in &module.entry_points {
            check(&ep.function);
        }
        assert!(calls.is_empty(), "{name} calls {calls:?}");
    }
}

#[test]
fn kernels_fit_webgpu_downlevel_default_limits() {
    for (name, _, src) in posenc::shaders::all_sources() {
        let (module, _) = validated(&name, &src);
        let limits = wgpu::Limits::downlevel_defaults();
        for ep in &module.entry_points {
            let [x, y, z] = ep.workgroup_size;
            assert!(
                x * y * z <= limits.max_compute_invocations_per_workgroup,
                "{name}: {x}x{y}x{z}"
            );
            assert!(x <= limits.max_compute_workgroup_size_x, "{name}");
        }
        // Every kernel has one entry point, so the module's bindings are the stage's.
        let count = |space: fn(&naga::AddressSpace) -> bool| {
            module.global_variables.iter().filter(|(_, g)| space(&g.space)).count() as u32
        };
        let storage = count(|s| matches!(s, naga::AddressSpace::Storage { .. }));
        let uniform = count(|s| matches!(s, naga::AddressSpace::Uniform));
        // A vec4 encode with more than one table slot is built only for devices with the
        // storage buffers for them (3 + slots); with one slot it fits the downlevel limit.
        let extra_slots = src
            .lines()
            .find_map(|l| l.strip_prefix("const TABLE_SLOTS: u32 = "))
            .map_or(0, |k| k.trim_end_matches("u;").parse::<u32>().unwrap() - 1);
        let storage = storage - extra_slots;
        assert!(
            storage <= limits.max_storage_buffers_per_shader_stage,
            "{name}: {storage} storage buffers, the downlevel limit is {}",
            limits.max_storage_buffers_per_shader_stage
        );
        assert!(uniform <= limits.max_uniform_buffers_per_shader_stage, "{name}");
        let ctx = module.to_ctx();
        for (_, g) in module.global_variables.iter() {
            let size = module.types[g.ty].inner.size(ctx);
            match g.space {
                naga::AddressSpace::Uniform => {
                    assert!(size <= limits.max_uniform_buffer_binding_size as u32, "{name}")
                }
                naga::AddressSpace::WorkGroup => {
                    assert!(size <= limits.max_compute_workgroup_storage_size, "{name}")
                }
                _ => {}
            }
        }
    }
}
