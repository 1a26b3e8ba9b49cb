//! Every kernel parses and validates with naga, and translates to the shading languages of
//! the other backends (MSL for Metal, HLSL for DX12, SPIR-V for Vulkan, GLSL ES for GL), so
//! a translation failure shows up on Linux. The SPIR-V and GLSL then go through the
//! platforms' own validators, `spirv-val` and `glslangValidator` (MSL and HLSL have no
//! compiler on Linux: they are only translated). No kernel may call the builtin
//! sin/cos/exp/pow. `bindings` checks each kernel's `Params` and bindings against the host's.

mod bindings;

use naga::back::{glsl, hlsl, msl, spv};
use naga::valid::{Capabilities, ValidationFlags, Validator};

fn validated(name: &str, src: &str) -> (naga::Module, naga::valid::ModuleInfo) {
    let module = naga::front::wgsl::parse_str(src)
        .unwrap_or_else(|e| panic!("{name} does not parse:\n{}", e.emit_to_string(src)));
    // Capabilities::empty(): the kernels must need no optional feature, but for the GPU
    // forms that widen f16 by unpack2x16float (`shaders::F16_UNPACK`), which posenc builds
    // only on an adapter that has it.
    let capabilities = if posenc::shaders::calls_unpack(src) {
        Capabilities::SHADER_FLOAT16_IN_FLOAT32
    } else {
        Capabilities::empty()
    };
    let info = Validator::new(ValidationFlags::all(), capabilities)
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
        // Every entry point uses every binding of its module (tests/shader_bindings.rs), so
        // the module's bindings are the stage's.
        let count = |space: fn(&naga::AddressSpace) -> bool| {
            module.global_variables.iter().filter(|(_, g)| space(&g.space)).count() as u32
        };
        let storage = count(|s| matches!(s, naga::AddressSpace::Storage { .. }));
        let uniform = count(|s| matches!(s, naga::AddressSpace::Uniform));
        // A vec4 encode (or recorded encode) with more than one table slot is built only for
        // devices with the storage buffers for them; with one slot it fits the downlevel
        // limit.
        let extra_slots = src
            .lines()
            .find_map(|l| l.strip_prefix("const TABLE_SLOTS: u32 = "))
            .map_or(0, |k| k.trim_end_matches("u;").parse::<u32>().unwrap() - 1);
        let storage = storage - extra_slots;
        // The recorded encode (encode_pass) binds the caller's ids and positions, the PE cache,
        // its state and the output besides one table chunk: 6, past the downlevel limit of
        // 4. Devices with fewer get its compact layout (the ids and positions copied into
        // the state), which fits; every other kernel fits the downlevel limit.
        let compact = name.contains("compact: true") || name.ends_with(", compact)");
        let full_embed =
            !compact && (name.starts_with("encode_pass(") || name.starts_with("EncodePassX4"));
        let allowed = if full_embed { 6 } else { limits.max_storage_buffers_per_shader_stage };
        assert!(storage <= allowed, "{name}: {storage} storage buffers, the limit is {allowed}");
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

/// The SPIR-V wgpu's Vulkan backend writes for `entry` on a Vulkan 1.1 device: SPIR-V 1.3,
/// indices and buffer accesses clamped (no `robustBufferAccess2` assumed), workgroup memory
/// zeroed by the shader, and no capability but `Shader`, because posenc asks for no
/// optional feature.
fn spirv_for_vulkan_1_1(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
) -> Vec<u32> {
    use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
    let options = spv::Options {
        lang_version: (1, 3),
        flags: spv::WriterFlags::LABEL_VARYINGS | spv::WriterFlags::FORCE_POINT_SIZE,
        capabilities: Some([spv::Capability::Shader].into_iter().collect()),
        bounds_check_policies: BoundsCheckPolicies {
            index: BoundsCheckPolicy::Restrict,
            buffer: BoundsCheckPolicy::Restrict,
            image_load: BoundsCheckPolicy::Restrict,
            binding_array: BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::Polyfill,
        ..Default::default()
    };
    let pipeline = spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: entry.into(),
    };
    spv::write_vec(module, info, &options, Some(&pipeline))
        .unwrap_or_else(|e| panic!("{entry} -> SPIR-V: {e}"))
}

/// The GLSL wgpu's GL backend writes for `entry` at `version`: uniform and storage
/// buffers numbered apart in binding order, workgroup memory zeroed, no bounds checks
/// (GL provides them).
fn glsl_as_wgpu_writes(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
    version: glsl::Version,
) -> String {
    let mut bindings: Vec<_> = module
        .global_variables
        .iter()
        .filter_map(|(_, g)| g.binding.map(|b| (b, g.space)))
        .collect();
    bindings.sort_by_key(|(b, _)| (b.group, b.binding));
    let (mut uniform, mut storage) = (0u8, 0u8);
    let mut binding_map = glsl::BindingMap::default();
    for (binding, space) in bindings {
        let slot =
            if matches!(space, naga::AddressSpace::Uniform) { &mut uniform } else { &mut storage };
        binding_map.insert(binding, *slot);
        *slot += 1;
    }
    let options = glsl::Options {
        version,
        writer_flags: glsl::WriterFlags::ADJUST_COORDINATE_SPACE
            | glsl::WriterFlags::FORCE_POINT_SIZE,
        binding_map,
        zero_initialize_workgroup_memory: true,
    };
    let pipeline = glsl::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: entry.to_string(),
        multiview: None,
    };
    let mut out = String::new();
    glsl::Writer::new(
        &mut out,
        module,
        info,
        &options,
        &pipeline,
        naga::proc::BoundsCheckPolicies::default(),
    )
    .and_then(|mut w| w.write())
    .unwrap_or_else(|e| panic!("{entry} -> GLSL {version:?}: {e}"));
    out
}

/// Whether the validator `bin` (from Debian's `package`) can be run. Without it the test
/// skips and is counted (`support::skip`), except under `CI=true`, which promises to run it.
fn have_validator(bin: &str, package: &str) -> bool {
    match std::process::Command::new(bin).arg("--version").output() {
        Ok(out) if out.status.success() => true,
        _ if crate::support::in_ci() => {
            panic!("CI=true requires {bin} (apt-get install {package})")
        }
        _ => {
            crate::support::skip(bin, format!("apt-get install {package} to run this test"));
            false
        }
    }
}

/// A translation to validate: the kernel's name and the file holding it.
type Translated = (String, std::path::PathBuf);

/// Runs `bin` with `args` on `files` at once (validators that take several) and returns
/// each refused file's kernel and message. A refused batch is run again file by file to
/// name the culprits.
fn refused(bin: &str, args: &[&str], files: &[Translated]) -> Vec<String> {
    let run = |batch: &[Translated]| {
        let out = std::process::Command::new(bin)
            .args(args)
            .args(batch.iter().map(|(_, path)| path))
            .output()
            .unwrap_or_else(|e| panic!("{bin}: {e}"));
        let text = String::from_utf8_lossy(&[out.stdout, out.stderr].concat()).into_owned();
        (out.status.success(), text)
    };
    match run(files) {
        (true, _) => Vec::new(),
        (false, text) if files.len() == 1 => vec![format!("{}: {text}", files[0].0)],
        (false, _) => files.chunks(1).flat_map(|one| refused(bin, args, one)).collect(),
    }
}

/// A kernel's translations: each file's extension and bytes.
type KernelFiles = Vec<(&'static str, Vec<u8>)>;

/// Translates every kernel with `translate` into files (named by extension), on every
/// core, and runs `bin` with `args` on them, `per_call` files to a call; panics listing
/// every kernel it refuses, with the validator's message.
fn validate_all(
    bin: &str,
    args: &[&str],
    per_call: usize,
    translate: impl Fn(&naga::Module, &naga::valid::ModuleInfo, &str) -> KernelFiles + Sync,
) {
    let sources = posenc::shaders::all_sources();
    let dir = tempfile::tempdir().unwrap();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    let start = std::time::Instant::now();
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                let mut pending: Vec<Translated> = Vec::new();
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((name, entry, src)) = sources.get(k) else { break };
                    let (module, info) = validated(name, src);
                    for (ext, bytes) in translate(&module, &info, entry) {
                        let path = dir.path().join(format!("k{k}.{ext}"));
                        std::fs::write(&path, &bytes).unwrap();
                        pending.push((format!("{name} ({ext})"), path));
                    }
                    if pending.len() >= per_call {
                        failures.lock().unwrap().extend(refused(bin, args, &pending));
                        pending.clear();
                    }
                }
                if !pending.is_empty() {
                    failures.lock().unwrap().extend(refused(bin, args, &pending));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    eprintln!(
        "{bin}: {} kernels in {:.1} s, {} refused",
        sources.len(),
        start.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(failures.is_empty(), "{bin} refused:\n{}", failures.join("\n"));
}

#[test]
fn every_kernel_passes_spirv_val_for_vulkan_1_1() {
    if !have_validator("spirv-val", "spirv-tools") {
        return;
    }
    // spirv-val takes one module per call.
    validate_all("spirv-val", &["--target-env", "vulkan1.1"], 1, |module, info, entry| {
        let words = spirv_for_vulkan_1_1(module, info, entry);
        vec![("spv", words.iter().flat_map(|w| w.to_le_bytes()).collect())]
    });
}

#[test]
fn every_kernel_passes_glslang_as_gles_310_and_glsl_450() {
    if !have_validator("glslangValidator", "glslang-tools") {
        return;
    }
    // glslangValidator spends most of a call building its symbol tables: many files to a
    // call.
    validate_all("glslangValidator", &[], 64, |module, info, entry| {
        let es = glsl::Version::Embedded { version: 310, is_webgl: false };
        let desktop = glsl::Version::Desktop(450);
        // glslangValidator takes the stage from the extension and the profile from #version.
        vec![
            ("es.comp", glsl_as_wgpu_writes(module, info, entry, es).into_bytes()),
            ("450.comp", glsl_as_wgpu_writes(module, info, entry, desktop).into_bytes()),
        ]
    });
}

#[test]
fn compose_refuses_a_module_posenc_lacks_naming_it_and_the_modules() {
    let err = posenc::shaders::compose("#import convert4\n#import nosuch\n").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("nosuch") && text.contains("convert4"), "{text}");
    // What it composes parses and validates, the prelude's constants included.
    let src = posenc::shaders::compose("#import convert4\n#import sincos\n").unwrap();
    validated("compose", &src);
}
