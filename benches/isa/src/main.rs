//! posenc's kernels compiled to a real GPU's machine code on a machine with no GPU.
//!
//! Mesa's RADV driver (AMD) opens a "null" device when `RADV_FORCE_FAMILY` names a chip: no
//! hardware, but its shader compiler (ACO) runs in full. This tool translates each kernel
//! from WGSL to SPIR-V as wgpu's Vulkan backend does (naga, the same options), builds a
//! compute pipeline on that device, and prints the compiler's statistics
//! (`VK_KHR_pipeline_executable_properties`): registers, instructions, ACO's latency and
//! throughput estimates. `--dump DIR` writes each kernel's NIR, ACO IR and assembly.
//!
//! It times nothing: statistics of one compiler for one architecture (RDNA 2 by default),
//! a proxy for the instruction work a change adds or removes, to be confirmed by
//! `posenc bench` on a GPU. See README.md.

use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::process::ExitCode;

use ash::vk;
use posenc::dtype::Dtype;
use posenc::shaders::{
    self, EncodePassX4, RopePassForm, RopePassKernel, RopeUnitKind, rope_pass_workgroup,
    takes_unpack,
};

const USAGE: &str =
    "usage: posenc-isa [--dump DIR] [--bound-loops] [--all | --wgsl FILE:ENTRY...] [FILTER...]

Compiles posenc's kernels on Mesa RADV's null device (no GPU needed) and prints the
compiler's statistics, one line per kernel. Without --all: the kernels posenc's GPU paths
build for the bench's presets; with --all: every kernel source posenc has
(posenc::shaders::all_sources); with --wgsl: the complete WGSL in FILE, entry point ENTRY
(a kernel's source from --dump, edited: a diagnostic). FILTERs keep the kernels whose name
contains any of them. --dump DIR writes each kernel's WGSL to DIR/<name>.wgsl and its NIR,
ACO IR and assembly to DIR/<name>.txt. --bound-loops compiles every kernel with wgpu's loop
counter, as posenc does with POSENC_GPU_LOOP_BOUNDS=all (by default, as posenc asks wgpu:
posenc::shaders::bounds_loops_of).

Environment: RADV_FORCE_FAMILY (default navi21, RDNA 2) picks the chip; VK_ICD_FILENAMES
defaults to Mesa's radeon ICD.";

/// A kernel to compile: a name, its entry point and its WGSL.
struct Kernel {
    name: String,
    entry: &'static str,
    source: String,
}

/// The kernels posenc's GPU paths build for the bench's presets, chosen by posenc's own
/// functions (the RoPE workgroup, the encode's units and workgroup), so they follow the
/// library as it changes.
fn presets() -> Vec<Kernel> {
    let mut all = Vec::new();
    let mut rope = |name: &str, dtype: Dtype, rotary: u32, heads: u32, tokens: u64, axes: bool| {
        // As a GPU with unpack2x16float builds them (RADV has it).
        let f16_unpack = takes_unpack(dtype, true, true);
        let kind = RopeUnitKind { dtype, neox: true, coalesced: true, f16_unpack };
        let n_freqs = rotary / 2;
        let units = u64::from(heads * n_freqs / kind.unit_freqs());
        let workgroup = rope_pass_workgroup(tokens, units, 1);
        let forms = [
            ("", RopePassForm::Blocks { units: 1, workgroup }),
            ("-h1", RopePassForm::Heads { group: 1 }),
            ("-h2", RopePassForm::Heads { group: 2 }),
            ("-h4", RopePassForm::Heads { group: 4 }),
            ("-h8", RopePassForm::Heads { group: 8 }),
            ("-cpu", RopePassForm::Heads { group: 0 }),
        ];
        for (suffix, form) in forms {
            if let Some(k) = RopePassKernel::new(kind, n_freqs, form) {
                let k = if axes { k.with_axes() } else { k };
                all.push(Kernel {
                    name: format!("{name}{suffix}"),
                    entry: k.entry(),
                    source: k.source(),
                });
            }
        }
    };
    // Llama-3-8B: head dim 128, q 32 heads and k 8, bf16; prefill 1 x 2048, decode 8 x 1.
    rope("llama3-8b-rope", Dtype::Bf16, 128, 40, 2048, false);
    rope("llama3-8b-rope-decode", Dtype::Bf16, 128, 40, 8, false);
    // Phi-2: rotary dim 32 of 80, 32 + 32 heads, f16.
    rope("phi-2-rope", Dtype::F16, 32, 64, 2048, false);
    // Llama-2-13B's decode step: head dim 128, 40 + 40 heads, f16.
    rope("llama2-13b-rope-decode", Dtype::F16, 128, 80, 8, false);
    // Qwen2.5-VL-7B's prefill: head dim 128, 28 + 4 heads, bf16, multimodal (positions per
    // axis), and the 1-D kernel of the same shape beside it.
    rope("qwen2.5-vl-7b-rope", Dtype::Bf16, 128, 32, 2048, true);
    rope("qwen2.5-vl-7b-rope-1d", Dtype::Bf16, 128, 32, 2048, false);
    // The recorded encode of tokens whose positions are cached (stage 1), one table slot.
    let mut encode = |name: &str, table: Dtype, out: Dtype, dim: u32| {
        let (units, workgroup) = EncodePassX4::shape(dim / 4, true, None);
        let v = EncodePassX4 {
            table,
            out,
            slots: 1,
            units,
            workgroup,
            stage: 1,
            compact: false,
            coalesced: true,
            f16_unpack: takes_unpack(table, true, true),
        };
        all.push(Kernel { name: name.to_string(), entry: "encode_pass_x4", source: v.source() });
    };
    encode("bert-base-encode", Dtype::F32, Dtype::F32, 768);
    encode("llama3-8b-encode", Dtype::Bf16, Dtype::F32, 4096);
    encode("llama3-8b-encode-bf16-out", Dtype::Bf16, Dtype::Bf16, 4096);
    encode("llama2-13b-encode-f16", Dtype::F16, Dtype::F16, 5120);
    all
}

/// SPIR-V for `source`'s `entry`, as wgpu-hal 30's Vulkan backend writes it for a device
/// with robust buffer access 2 (buffer accesses left to the driver, array indices clamped)
/// and Vulkan 1.3, its loops bounded or not as posenc asks, and the descriptor type of each
/// binding of group 0.
fn spirv(
    source: &str,
    entry: &str,
    bound_all_loops: bool,
) -> Result<(Vec<u32>, Vec<vk::DescriptorType>), String> {
    use naga::back::spv;
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| format!("{e:?}"))?;
    let mut options = spv::Options {
        lang_version: (1, 6),
        flags: spv::WriterFlags::FORCE_POINT_SIZE | spv::WriterFlags::LABEL_VARYINGS,
        ..Default::default()
    };
    options.bounds_check_policies = naga::proc::BoundsCheckPolicies {
        index: naga::proc::BoundsCheckPolicy::Restrict,
        buffer: naga::proc::BoundsCheckPolicy::Unchecked,
        image_load: naga::proc::BoundsCheckPolicy::Unchecked,
        binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
    };
    // As posenc asks wgpu for this kernel (posenc::shaders::zero_initializes_workgroup_memory).
    options.zero_initialize_workgroup_memory = if shaders::zero_initializes_workgroup_memory(entry)
    {
        spv::ZeroInitializeWorkgroupMemoryMode::Native
    } else {
        spv::ZeroInitializeWorkgroupMemoryMode::None
    };
    // As posenc asks wgpu (posenc::shaders::bounds_loops_of); division checks stay on.
    options.force_loop_bounding = bound_all_loops || shaders::bounds_loops_of(entry, source);
    let pipeline = spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: entry.to_string(),
    };
    let words =
        spv::write_vec(&module, &info, &options, Some(&pipeline)).map_err(|e| format!("{e:?}"))?;
    let mut types = Vec::new();
    for (_, var) in module.global_variables.iter() {
        let Some(binding) = &var.binding else { continue };
        let ty = match var.space {
            naga::AddressSpace::Uniform => vk::DescriptorType::UNIFORM_BUFFER,
            naga::AddressSpace::Storage { .. } => vk::DescriptorType::STORAGE_BUFFER,
            _ => continue,
        };
        let at = binding.binding as usize;
        if types.len() <= at {
            types.resize(at + 1, vk::DescriptorType::STORAGE_BUFFER);
        }
        types[at] = ty;
    }
    Ok((words, types))
}

/// The Vulkan objects one compilation needs.
struct Radv {
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    executables: ash::khr::pipeline_executable_properties::Device,
    name: String,
}

impl Radv {
    fn open() -> Result<Self, String> {
        // SAFETY: the Vulkan loader is loaded once, and every call below follows the
        // specification's valid usage for the objects it creates.
        unsafe {
            let entry = ash::Entry::load().map_err(|e| format!("no Vulkan loader: {e}"))?;
            let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
            let instance = entry
                .create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None)
                .map_err(|e| format!("vkCreateInstance: {e}"))?;
            let devices =
                instance.enumerate_physical_devices().map_err(|e| format!("devices: {e}"))?;
            let found = devices.into_iter().find_map(|pd| {
                let props = instance.get_physical_device_properties(pd);
                let name = CStr::from_ptr(props.device_name.as_ptr()).to_string_lossy().to_string();
                name.contains("RADV").then_some((pd, name))
            });
            let Some((physical, name)) = found else {
                return Err("no RADV device: install Mesa's Vulkan drivers (Debian: \
                            mesa-vulkan-drivers) and set RADV_FORCE_FAMILY"
                    .to_string());
            };
            let priorities = [1.0f32];
            let queues = [vk::DeviceQueueCreateInfo::default()
                .queue_family_index(0)
                .queue_priorities(&priorities)];
            // What wgpu-hal 30 enables on a device like this for posenc (which asks for no
            // SHADER_F16): robust buffer access, and robustBufferAccess2 where the driver
            // has VK_EXT_robustness2 (RADV does; it changes how RADV may merge loads), and
            // Vulkan 1.3's zeroing of workgroup memory.
            let extensions = [
                ash::khr::pipeline_executable_properties::NAME.as_ptr(),
                ash::ext::robustness2::NAME.as_ptr(),
            ];
            let core = vk::PhysicalDeviceFeatures::default().robust_buffer_access(true);
            let mut robust2 =
                vk::PhysicalDeviceRobustness2FeaturesEXT::default().robust_buffer_access2(true);
            let mut f13 = vk::PhysicalDeviceVulkan13Features::default()
                .shader_zero_initialize_workgroup_memory(true);
            let mut stats = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
                .pipeline_executable_info(true);
            let info = vk::DeviceCreateInfo::default()
                .queue_create_infos(&queues)
                .enabled_extension_names(&extensions)
                .enabled_features(&core)
                .push_next(&mut robust2)
                .push_next(&mut f13)
                .push_next(&mut stats);
            let device = instance
                .create_device(physical, &info, None)
                .map_err(|e| format!("vkCreateDevice on {name}: {e}"))?;
            let executables =
                ash::khr::pipeline_executable_properties::Device::new(&instance, &device);
            Ok(Self { _entry: entry, instance, device, executables, name })
        }
    }

    /// The compiler's statistics for `kernel` (name, value), and its internal
    /// representations as text when `dump`.
    fn compile(
        &self,
        kernel: &Kernel,
        dump: bool,
        bound_all_loops: bool,
    ) -> Result<(Vec<(String, u64)>, String), String> {
        let (words, types) = spirv(&kernel.source, kernel.entry, bound_all_loops)?;
        // SAFETY: as in `open`; every object is destroyed before returning.
        unsafe {
            let d = &self.device;
            let module = d
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
                .map_err(|e| format!("vkCreateShaderModule: {e}"))?;
            let bindings: Vec<_> = types
                .iter()
                .enumerate()
                .map(|(i, &ty)| {
                    vk::DescriptorSetLayoutBinding::default()
                        .binding(i as u32)
                        .descriptor_type(ty)
                        .descriptor_count(1)
                        .stage_flags(vk::ShaderStageFlags::COMPUTE)
                })
                .collect();
            let set_layout = d
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                    None,
                )
                .map_err(|e| format!("vkCreateDescriptorSetLayout: {e}"))?;
            let set_layouts = [set_layout];
            let layout = d
                .create_pipeline_layout(
                    &vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts),
                    None,
                )
                .map_err(|e| format!("vkCreatePipelineLayout: {e}"))?;
            let entry = CString::new(kernel.entry).expect("entry points have no NUL");
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(&entry);
            let mut flags = vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR;
            if dump {
                flags |= vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR;
            }
            let create =
                [vk::ComputePipelineCreateInfo::default().stage(stage).layout(layout).flags(flags)];
            let result = d.create_compute_pipelines(vk::PipelineCache::null(), &create, None);
            let out = match result {
                Ok(pipelines) => {
                    let out = self.read(pipelines[0], dump);
                    d.destroy_pipeline(pipelines[0], None);
                    out
                }
                Err((_, e)) => Err(format!("vkCreateComputePipelines: {e}")),
            };
            d.destroy_pipeline_layout(layout, None);
            d.destroy_descriptor_set_layout(set_layout, None);
            d.destroy_shader_module(module, None);
            out
        }
    }

    /// # Safety
    /// `pipeline` is a live pipeline of `self.device` created with the capture flags.
    unsafe fn read(
        &self,
        pipeline: vk::Pipeline,
        dump: bool,
    ) -> Result<(Vec<(String, u64)>, String), String> {
        let info = vk::PipelineExecutableInfoKHR::default().pipeline(pipeline).executable_index(0);
        // SAFETY: the caller's contract; the two-call pattern below sizes every buffer
        // before the driver writes into it.
        unsafe {
            let stats = self
                .executables
                .get_pipeline_executable_statistics(&info)
                .map_err(|e| format!("statistics: {e}"))?;
            let stats = stats
                .iter()
                .map(|s| {
                    let name = CStr::from_ptr(s.name.as_ptr()).to_string_lossy().to_string();
                    let value = match s.format {
                        vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64,
                        vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64 as u64,
                        vk::PipelineExecutableStatisticFormatKHR::BOOL32 => u64::from(s.value.b32),
                        _ => s.value.f64 as u64,
                    };
                    (name, value)
                })
                .collect();
            let mut text = String::new();
            if dump {
                let fp = self.executables.fp();
                let get = fp.get_pipeline_executable_internal_representations_khr;
                let handle = self.device.handle();
                let mut count = 0u32;
                get(handle, &info, &mut count, std::ptr::null_mut())
                    .result()
                    .map_err(|e| format!("representations: {e}"))?;
                let mut reps = vec![
                    vk::PipelineExecutableInternalRepresentationKHR::default();
                    count as usize
                ];
                get(handle, &info, &mut count, reps.as_mut_ptr())
                    .result()
                    .map_err(|e| format!("representations: {e}"))?;
                let mut data: Vec<Vec<u8>> = reps.iter().map(|r| vec![0u8; r.data_size]).collect();
                for (r, d) in reps.iter_mut().zip(&mut data) {
                    r.p_data = d.as_mut_ptr().cast();
                }
                get(handle, &info, &mut count, reps.as_mut_ptr())
                    .result()
                    .map_err(|e| format!("representations: {e}"))?;
                for (r, d) in reps.iter().zip(&data) {
                    let name = CStr::from_ptr(r.name.as_ptr()).to_string_lossy();
                    text += &format!("==== {name}\n");
                    text += String::from_utf8_lossy(d).trim_end_matches('\0');
                    text.push('\n');
                }
            }
            Ok((stats, text))
        }
    }
}

impl Drop for Radv {
    fn drop(&mut self) {
        // SAFETY: every child object was destroyed in `compile`.
        unsafe {
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

/// The statistics printed, by the driver's names, with their column headings.
const COLUMNS: [(&str, &str); 8] = [
    ("VGPRs", "vgprs"),
    ("SGPRs", "sgprs"),
    ("Subgroups per SIMD", "waves"),
    ("LDS size", "lds"),
    ("Instructions", "instrs"),
    ("Branches", "branches"),
    ("Latency", "latency"),
    ("Inverse Throughput", "inv_tput"),
];

fn main() -> ExitCode {
    let mut dump: Option<PathBuf> = None;
    let mut every = false;
    let mut bound_all_loops = false;
    let mut files: Vec<Kernel> = Vec::new();
    let mut filters = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dump" => match args.next() {
                Some(dir) => dump = Some(PathBuf::from(dir)),
                None => {
                    eprintln!("posenc-isa: --dump needs a directory\n\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            "--all" => every = true,
            "--bound-loops" => bound_all_loops = true,
            "--wgsl" => {
                let Some((file, entry)) = args
                    .next()
                    .and_then(|a| a.rsplit_once(':').map(|(f, e)| (f.to_string(), e.to_string())))
                else {
                    eprintln!("posenc-isa: --wgsl needs FILE:ENTRY\n\n{USAGE}");
                    return ExitCode::from(2);
                };
                let source = match std::fs::read_to_string(&file) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("posenc-isa: cannot read {file}: {e}");
                        return ExitCode::from(1);
                    }
                };
                let entry: &'static str = Box::leak(entry.into_boxed_str());
                files.push(Kernel { name: file, entry, source });
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            s if s.starts_with('-') => {
                eprintln!("posenc-isa: unknown option {s}\n\n{USAGE}");
                return ExitCode::from(2);
            }
            _ => filters.push(arg),
        }
    }
    // SAFETY: single-threaded, before anything reads the environment.
    unsafe {
        if std::env::var_os("RADV_FORCE_FAMILY").is_none() {
            std::env::set_var("RADV_FORCE_FAMILY", "navi21");
        }
        let icd = format!("/usr/share/vulkan/icd.d/radeon_icd.{}.json", std::env::consts::ARCH);
        let chosen = ["VK_DRIVER_FILES", "VK_ICD_FILENAMES"];
        if chosen.iter().all(|v| std::env::var_os(v).is_none())
            && std::path::Path::new(&icd).exists()
        {
            std::env::set_var("VK_ICD_FILENAMES", &icd);
        }
    }
    let kernels: Vec<Kernel> = if !files.is_empty() {
        files
    } else if every {
        shaders::all_sources()
            .into_iter()
            .map(|(name, entry, source)| Kernel { name, entry, source })
            .collect()
    } else {
        presets()
    };
    let kernels: Vec<Kernel> = kernels
        .into_iter()
        .filter(|k| filters.is_empty() || filters.iter().any(|f| k.name.contains(f.as_str())))
        .collect();
    if kernels.is_empty() {
        eprintln!("posenc-isa: no kernel's name contains {filters:?}");
        return ExitCode::from(2);
    }
    let radv = match Radv::open() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("posenc-isa: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(dir) = &dump
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        eprintln!("posenc-isa: cannot create {}: {e}", dir.display());
        return ExitCode::from(1);
    }
    println!("# {} (Mesa RADV null device, ACO)", radv.name);
    let heads: Vec<&str> = COLUMNS.iter().map(|(_, h)| *h).collect();
    println!("kernel\t{}", heads.join("\t"));
    let mut failed = false;
    for kernel in &kernels {
        match radv.compile(kernel, dump.is_some(), bound_all_loops) {
            Ok((stats, text)) => {
                let values: Vec<String> = COLUMNS
                    .iter()
                    .map(|(key, _)| {
                        stats
                            .iter()
                            .find(|(n, _)| n == key)
                            .map_or("-".to_string(), |(_, v)| v.to_string())
                    })
                    .collect();
                println!("{}\t{}", kernel.name, values.join("\t"));
                if let Some(dir) = &dump {
                    let file: String = kernel
                        .name
                        .chars()
                        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
                        .collect();
                    for (ext, content) in [("wgsl", &kernel.source), ("txt", &text)] {
                        let path = dir.join(format!("{file}.{ext}"));
                        if let Err(e) = std::fs::write(&path, content) {
                            eprintln!("posenc-isa: cannot write {}: {e}", path.display());
                            failed = true;
                        }
                    }
                }
            }
            Err(e) => {
                eprintln!("posenc-isa: {}: {e}", kernel.name);
                failed = true;
            }
        }
    }
    if failed { ExitCode::from(1) } else { ExitCode::SUCCESS }
}
