//! Every composed kernel against its host wrapper, read from the WGSL by naga: the `Params`
//! struct's members (names, offsets, sizes, scalar types) against the host's `#[repr(C)]`
//! struct, and the module's bindings (group, binding, address space and access, type)
//! against the bind group layout the host builds. A field renamed, reordered, added or
//! retyped on one side only, or a binding moved or made writable, fails here rather than as
//! wrong numbers on a GPU.

use naga::{AddressSpace, StorageAccess, TypeInner};
use posenc::gpu::layout::{self, Field, Kernel};
use wgpu::BufferBindingType;

/// A member or field as both sides are compared: name, offset, size, scalar type.
type Member = (String, usize, usize, String);

/// The WGSL name of a scalar type (`u32`), or naga's description of anything else.
fn wgsl_type(module: &naga::Module, ty: naga::Handle<naga::Type>) -> String {
    match &module.types[ty].inner {
        TypeInner::Scalar(s) => match (s.kind, s.width) {
            (naga::ScalarKind::Uint, 4) => "u32".into(),
            (naga::ScalarKind::Sint, 4) => "i32".into(),
            (naga::ScalarKind::Float, 4) => "f32".into(),
            other => format!("{other:?}"),
        },
        other => format!("{other:?}"),
    }
}

/// Padding is named `_pad`, `_pad0`, ... on either side and need not match field for field:
/// the struct sizes do.
fn is_padding(name: &str) -> bool {
    name.starts_with('_')
}

/// The members of the WGSL struct `Params` and its size, padding left out.
fn wgsl_params(kernel: &Kernel, module: &naga::Module) -> (Vec<Member>, usize) {
    let (_, ty) = module
        .types
        .iter()
        .find(|(_, t)| t.name.as_deref() == Some("Params"))
        .unwrap_or_else(|| panic!("{}: no struct Params", kernel.name));
    let TypeInner::Struct { members, span } = &ty.inner else {
        panic!("{}: Params is not a struct", kernel.name)
    };
    let ctx = module.to_ctx();
    let members = members
        .iter()
        .map(|m| {
            let name = m.name.clone().unwrap_or_default();
            let size = module.types[m.ty].inner.size(ctx) as usize;
            (name, m.offset as usize, size, wgsl_type(module, m.ty))
        })
        .filter(|(name, ..)| !is_padding(name))
        .collect();
    (members, *span as usize)
}

/// The host's fields, padding left out.
fn host_params(kernel: &Kernel) -> Vec<Member> {
    kernel
        .params
        .fields
        .iter()
        .filter(|f| !is_padding(f.name))
        .map(|&Field { name, offset, size, ty }| (name.to_string(), offset, size, ty.to_string()))
        .collect()
}

/// A binding as both sides are compared: group, binding, and what it is.
type Binding = (u32, u32, String);

/// The module's bindings, sorted: a uniform must be the struct `Params`, a storage buffer a
/// runtime-sized array or a struct ending in one.
fn wgsl_bindings(kernel: &Kernel, module: &naga::Module) -> Vec<Binding> {
    let mut bindings: Vec<Binding> = module
        .global_variables
        .iter()
        .filter_map(|(_, g)| {
            let b = g.binding.as_ref()?;
            let what = match g.space {
                AddressSpace::Uniform => {
                    assert_eq!(
                        module.types[g.ty].name.as_deref(),
                        Some("Params"),
                        "{}: the uniform at binding {} is not Params",
                        kernel.name,
                        b.binding
                    );
                    "uniform Params".to_string()
                }
                AddressSpace::Storage { access } => {
                    // A runtime-sized array, or a struct ending in one (fixed fields first).
                    let runtime_array = |ty: naga::Handle<naga::Type>| {
                        matches!(
                            module.types[ty].inner,
                            TypeInner::Array { size: naga::ArraySize::Dynamic, .. }
                        )
                    };
                    let sized = match &module.types[g.ty].inner {
                        TypeInner::Struct { members, .. } => {
                            members.last().is_some_and(|m| runtime_array(m.ty))
                        }
                        _ => runtime_array(g.ty),
                    };
                    assert!(
                        sized,
                        "{}: binding {} is not a runtime-sized array (or a struct ending in one)",
                        kernel.name, b.binding
                    );
                    if access == StorageAccess::LOAD {
                        "storage, read".to_string()
                    } else if access == StorageAccess::LOAD | StorageAccess::STORE {
                        "storage, read_write".to_string()
                    } else {
                        format!("storage {access:?}")
                    }
                }
                other => format!("{other:?}"),
            };
            Some((b.group, b.binding, what))
        })
        .collect();
    bindings.sort();
    bindings
}

/// The bind group layout the host builds, in the same terms.
fn host_bindings(kernel: &Kernel) -> Vec<Binding> {
    kernel
        .bindings
        .iter()
        .enumerate()
        .map(|(binding, ty)| {
            let what = match ty {
                BufferBindingType::Uniform => "uniform Params",
                BufferBindingType::Storage { read_only: true } => "storage, read",
                BufferBindingType::Storage { read_only: false } => "storage, read_write",
            };
            (0, binding as u32, what.to_string())
        })
        .collect()
}

fn parsed(kernel: &Kernel) -> naga::Module {
    naga::front::wgsl::parse_str(&kernel.source).unwrap_or_else(|e| {
        panic!("{} does not parse:\n{}", kernel.name, e.emit_to_string(&kernel.source))
    })
}

#[test]
fn every_kernels_params_are_the_hosts_struct() {
    let kernels = layout::all();
    assert_eq!(kernels.len(), posenc::shaders::all_sources().len());
    for kernel in &kernels {
        let module = parsed(kernel);
        let (wgsl, wgsl_size) = wgsl_params(kernel, &module);
        assert_eq!(
            wgsl,
            host_params(kernel),
            "{}: WGSL Params (left) against {} (right)",
            kernel.name,
            kernel.params.name
        );
        assert_eq!(
            wgsl_size, kernel.params.size,
            "{}: size of WGSL Params against {}",
            kernel.name, kernel.params.name
        );
    }
}

#[test]
fn every_kernels_bindings_are_the_hosts_layout() {
    for kernel in &layout::all() {
        let module = parsed(kernel);
        assert_eq!(
            wgsl_bindings(kernel, &module),
            host_bindings(kernel),
            "{}: WGSL bindings (left) against the host's bind group layout (right)",
            kernel.name
        );
        // Each entry point uses every binding, so the layout holds nothing it ignores.
        // The GPU forms' f16 widening by unpack2x16float takes a capability (the shader
        // tests say which kernels may).
        let capabilities = if posenc::shaders::calls_unpack(&kernel.source) {
            naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32
        } else {
            naga::valid::Capabilities::empty()
        };
        let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities)
            .validate(&module)
            .unwrap_or_else(|e| panic!("{} does not validate: {e}", kernel.name));
        let (index, _) = module
            .entry_points
            .iter()
            .enumerate()
            .find(|(_, ep)| ep.name == kernel.entry)
            .unwrap_or_else(|| panic!("{}: no entry point {}", kernel.name, kernel.entry));
        let ep = info.get_entry_point(index);
        for (handle, g) in module.global_variables.iter() {
            if let Some(b) = &g.binding {
                assert!(!ep[handle].is_empty(), "{}: binding {} unused", kernel.name, b.binding);
            }
        }
    }
}
