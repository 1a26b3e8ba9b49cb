//! WGSL sources and their composition. Shared code lives once in `shaders/` and kernels pull
//! it in with `#import NAME`; constants the CPU twins also use are generated from Rust here,
//! so no number is written twice.

use crate::cpu::sincos::{COS_COEFFS, SIN_COEFFS};

/// Threads per workgroup of every kernel: within WebGPU's default limits (256).
pub const WORKGROUP_SIZE: u32 = 256;

/// Shared modules that kernels may `#import`, by name.
const MODULES: &[(&str, &str)] = &[
    ("sincos", include_str!("../shaders/sincos.wgsl")),
    ("convert", include_str!("../shaders/convert.wgsl")),
];

/// The kernels, by entry-point name: each is `shaders/<name>.wgsl`, but for `copy_x4`.
pub const KERNELS: &[(&str, &str)] = &[
    ("table", include_str!("../shaders/table.wgsl")),
    ("encode", include_str!("../shaders/encode.wgsl")),
    ("encode_f32x4", include_str!("../shaders/encode_f32x4.wgsl")),
    ("copy", include_str!("../shaders/copy.wgsl")),
    // The ceiling's second form, an entry point of the same file.
    ("copy_x4", include_str!("../shaders/copy.wgsl")),
    ("alibi", include_str!("../shaders/alibi.wgsl")),
    ("rope_cs", include_str!("../shaders/rope_cs.wgsl")),
    ("rope", include_str!("../shaders/rope.wgsl")),
    ("rope_x4", include_str!("../shaders/rope_x4.wgsl")),
];

/// Threads per workgroup of kernels that give each workgroup one row and loop along it.
pub const ROW_WORKGROUP_SIZE: u32 = 64;

/// Threads per workgroup of `encode_f32x4`, each moving two adjacent vec4s: a workgroup
/// covers 256 vec4s (1024 columns) of a row.
pub const PAIR_WORKGROUP_SIZE: u32 = 128;

fn prelude() -> String {
    let mut s = format!("const WORKGROUP_SIZE: u32 = {WORKGROUP_SIZE}u;\n");
    s += &format!("const ROW_WORKGROUP_SIZE: u32 = {ROW_WORKGROUP_SIZE}u;\n");
    s += &format!("const PAIR_WORKGROUP_SIZE: u32 = {PAIR_WORKGROUP_SIZE}u;\n");
    s += &format!("const F32_STEP_BIAS: i32 = {};\n", crate::exact::F32_STEP_BIAS);
    s += &format!("const F32_STEPS: u32 = {}u;\n", crate::exact::F32_STEPS);
    for (k, c) in SIN_COEFFS.iter().enumerate() {
        s += &format!("const SIN_S{k}: u32 = {c}u;\n");
    }
    for (k, c) in COS_COEFFS.iter().enumerate() {
        s += &format!("const COS_C{k}: u32 = {c}u;\n");
    }
    s
}

/// The complete WGSL of kernel `name` (see [`KERNELS`]): prelude, imports, kernel.
///
/// # Panics
/// If `name` is not a kernel or imports an unknown module: both are programming errors
/// that the shader tests catch.
pub fn source(name: &str) -> String {
    let (_, kernel) = KERNELS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no kernel named {name}"));
    let mut out = prelude();
    let mut imported = Vec::new();
    expand(kernel, &mut imported, &mut out);
    out
}

fn expand(src: &str, imported: &mut Vec<&'static str>, out: &mut String) {
    for line in src.lines() {
        if let Some(name) = line.trim().strip_prefix("#import ") {
            let name = name.trim();
            let (module_name, module) = MODULES
                .iter()
                .find(|(n, _)| *n == name)
                .unwrap_or_else(|| panic!("unknown WGSL module {name}"));
            if !imported.contains(module_name) {
                imported.push(module_name);
                expand(module, imported, out);
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
}
