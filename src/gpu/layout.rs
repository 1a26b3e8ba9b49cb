//! What the host binds to each kernel, as data: the layout of the `#[repr(C)]` parameter
//! struct it uploads, and the buffer types of its bind group layout. The pipelines are built
//! from [`bindings`], and `tests/it/shaders/bindings.rs` holds both against the composed WGSL
//! (parsed by naga), so a kernel and its host wrapper cannot drift apart unnoticed.

use std::mem::offset_of;

use bytemuck::Zeroable;
use wgpu::BufferBindingType;

use super::{
    AlibiParams, CopyParams, EncodeParams, EncodePassParams, EncodeX4Params, NarrowParams,
    RopeCsParams, RopeParams, RopePassParams, RopeX4Params, TableParams,
};
use crate::shaders::{
    CopyForm, EncodePassX4, EncodeX4, KERNELS, MAX_TABLE_SLOTS, RopePassKernel, RopeUnitKind,
};

/// One field of a parameter struct.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The field's name (padding fields start with `_`).
    pub name: &'static str,
    /// Its offset in bytes.
    pub offset: usize,
    /// Its size in bytes.
    pub size: usize,
    /// Its Rust type, as [`std::any::type_name`] writes it (`u32`, `[u32; 3]`).
    pub ty: &'static str,
}

/// A parameter struct as the host lays it out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// The Rust type's name.
    pub name: &'static str,
    /// `size_of` the struct.
    pub size: usize,
    /// Every field, in declaration order.
    pub fields: Vec<Field>,
}

/// A kernel as posenc compiles it, with what the host binds to it.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// The kernel's name: the entry point, or an `encode_x4` specialisation's fields.
    pub name: String,
    /// The entry point.
    pub entry: &'static str,
    /// The composed WGSL.
    pub source: String,
    /// The parameters the host uploads to binding 0.
    pub params: Params,
    /// The bind group layout's entries of group 0, at bindings `0..`.
    pub bindings: Vec<BufferBindingType>,
}

/// The [`Params`] of struct `$t`, whose fields are all listed: the destructuring without
/// `..` stops a field left out from compiling.
macro_rules! params {
    ($t:ident { $($field:ident),* $(,)? }) => {{
        let value = <$t as Zeroable>::zeroed();
        let $t { $($field: _),* } = value;
        Params {
            name: stringify!($t),
            size: size_of::<$t>(),
            fields: vec![$(Field {
                name: stringify!($field),
                offset: offset_of!($t, $field),
                size: size_of_val(&value.$field),
                ty: std::any::type_name_of_val(&value.$field),
            }),*],
        }
    }};
}

/// The parameters the host uploads to kernel entry point `entry`.
///
/// # Panics
/// If `entry` is not a kernel posenc compiles.
pub fn params(entry: &str) -> Params {
    match entry {
        "table" => params!(TableParams {
            n_pairs,
            n_freqs,
            groups_x,
            dim,
            n_cos,
            stride,
            cos_offset,
            zero_col,
            start,
            padding_idx,
            flags,
            _pad,
        }),
        "encode" => params!(EncodeParams {
            n_tokens,
            token_base,
            row_words,
            dim,
            scale_bits,
            flags,
            in_dtype,
            out_dtype,
            groups_y,
            zero,
            _pad,
        }),
        "encode_x4" => params!(EncodeX4Params {
            n_groups,
            group_base,
            row_units,
            scale_bits,
            groups_y,
            groups_at,
            keep,
            zero,
        }),
        "encode_pass" | "encode_pass_x4" | "encode_pass_scan" => params!(EncodePassParams {
            n_words,
            dim,
            vocab,
            rows_per_chunk,
            first_chunk,
            n_slots,
            ids_base,
            pos_base,
            out_base,
            seq_len,
            cached_rows,
            pad_id,
            scale_bits,
            flags,
            in_dtype,
            out_dtype,
            groups_x,
            spec_flags,
            n_freqs,
            stride,
            cos_offset,
            zero_col,
            start,
            padding_idx,
            n_tokens,
            row_units,
            groups_y,
            token_base,
            zero,
        }),
        "narrow" => params!(NarrowParams { n_elems, out_dtype, groups_x, _pad }),
        "copy" => params!(CopyParams { n_vecs, groups_x, n_groups, _pad }),
        "alibi" | "alibi_x4" | "alibi_flat" => params!(AlibiParams {
            n_rows,
            row0,
            n_cols,
            col0,
            len,
            offset,
            causal,
            head0,
            groups_x,
            groups_y,
            out_base,
            rows_per_group,
        }),
        "rope_cs" => params!(RopeCsParams {
            n_pairs,
            n_freqs,
            groups_x,
            flags,
            scale_bits,
            pos_base,
            seq_len,
            section_t,
            section_h,
            section_w,
            axis_stride,
            _pad,
        }),
        "rope" => params!(RopeParams {
            n_elems,
            n_groups,
            group_elems,
            group_words,
            rows_per_group,
            head_dim,
            rotary_dim,
            n_freqs,
            pairing,
            dtype,
            groups_per_wg,
            groups_x,
            data_base,
            zero,
        }),
        "rope_x4" => params!(RopeX4Params {
            n_units,
            units_per_row,
            row_vecs,
            half_vecs,
            n_freqs,
            groups_x,
            data_base,
            zero,
        }),
        "rope_pass" => params!(RopePassParams {
            n_tokens,
            seq_len,
            n_freqs,
            flags,
            scale_bits,
            pos_base,
            groups_y,
            units_per_row,
            half_vecs,
            q_heads,
            k_heads,
            q_base,
            q_seq,
            q_tok,
            q_head,
            k_base,
            k_seq,
            k_tok,
            k_head,
            blocks,
            zero,
            cached_rows,
            cache_base,
            head_groups,
            section_t,
            section_h,
            section_w,
            axis_stride,
        }),
        _ => panic!("no kernel named {entry}"),
    }
}

/// Storage buffers of each kernel of [`KERNELS`] (and `copy` and `rope_x4`, specialised per
/// [`CopyForm`] and [`RopeUnitKind`]): the last is the read-write output, those
/// before it are read-only inputs.
const STORAGE_BUFFERS: &[(&str, u32)] = &[
    ("table", 3),
    ("encode", 4),
    ("narrow", 2),
    ("copy", 2),
    ("alibi", 2),
    ("alibi_x4", 2),
    ("alibi_flat", 2),
    ("rope_cs", 3),
    ("rope", 4),
    ("rope_x4", 3),
];

/// The bind group layout of kernel `name` of [`KERNELS`], at bindings `0..` of group 0: the
/// uniform `Params`, then its storage buffers, read-only inputs before the read-write
/// output.
///
/// # Panics
/// If `name` is not one of [`KERNELS`].
pub fn bindings(name: &str) -> Vec<BufferBindingType> {
    let (_, n_storage) = STORAGE_BUFFERS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no kernel named {name}"));
    let mut bindings = vec![BufferBindingType::Uniform];
    bindings
        .extend((1..=*n_storage).map(|b| BufferBindingType::Storage { read_only: b < *n_storage }));
    bindings
}

/// The bind group layout of an `encode_x4` specialisation with `slots` table bindings: the
/// uniform `Params`, the token records and the PE rows (read-only), the output, then the
/// table slots (read-only).
pub fn encode_x4_bindings(slots: u32) -> Vec<BufferBindingType> {
    use BufferBindingType as B;
    let mut bindings = vec![
        B::Uniform,
        B::Storage { read_only: true },
        B::Storage { read_only: true },
        B::Storage { read_only: false },
    ];
    bindings.extend((0..slots).map(|_| B::Storage { read_only: true }));
    bindings
}

/// The bind group layout of `encode_pass` and `encode_pass_x4` with `slots` table bindings: the
/// uniform `Params`, the ids, positions and cached PE rows (read-only), the fault counters
/// and frequency words (read-write), the output, then the table slots (read-only); or, in
/// the `compact` layout of devices with fewer than 6 storage buffers per shader stage, the
/// uniform, the state (fault counters, frequency words and a copy of the step's ids and
/// positions), the cached PE rows, the output and the table slots (see
/// `crate::shaders::encode_pass_io`).
pub fn encode_pass_bindings(slots: u32, compact: bool) -> Vec<BufferBindingType> {
    use BufferBindingType as B;
    let read = B::Storage { read_only: true };
    let write = B::Storage { read_only: false };
    let mut bindings = if compact {
        // The uniform Params, the state (fault counters, frequency steps, and the copied ids
        // and positions), the cache, the output.
        vec![B::Uniform, write, read, write]
    } else {
        // The uniform Params, ids, positions, the cache, the state, the output.
        vec![B::Uniform, read, read, read, write, write]
    };
    bindings.extend((0..slots).map(|_| read));
    bindings
}

/// The bind group layout of `rope_pass`: the uniform `Params`, the positions and the
/// frequencies' steps (read-only), then q and k (read-write).
pub fn rope_pass_bindings() -> Vec<BufferBindingType> {
    use BufferBindingType as B;
    let (read, write) = (B::Storage { read_only: true }, B::Storage { read_only: false });
    vec![B::Uniform, read, read, write, write]
}

/// The bind group layout of `encode_pass_scan`: the uniform `Params`, its work buffer (the late
/// stage's dispatch and token list, read-write) and the positions (read-only).
pub fn encode_pass_scan_bindings() -> Vec<BufferBindingType> {
    use BufferBindingType as B;
    vec![B::Uniform, B::Storage { read_only: false }, B::Storage { read_only: true }]
}

/// Every kernel posenc may compile, in the order of [`crate::shaders::all_sources`], with
/// what the host binds to it.
pub fn all() -> Vec<Kernel> {
    let mut all: Vec<Kernel> = KERNELS
        .iter()
        .map(|&(name, _)| Kernel {
            name: name.to_string(),
            entry: name,
            source: crate::shaders::source(name),
            params: params(name),
            bindings: bindings(name),
        })
        .collect();
    all.extend(EncodeX4::all().into_iter().map(|v| Kernel {
        name: format!("{v:?}"),
        entry: "encode_x4",
        source: v.source(),
        params: params("encode_x4"),
        bindings: encode_x4_bindings(v.slots),
    }));
    let compact_slots = (1..=MAX_TABLE_SLOTS).map(|slots| (slots, true));
    for (slots, compact) in (1..=MAX_TABLE_SLOTS).map(|slots| (slots, false)).chain(compact_slots) {
        all.push(Kernel {
            name: if compact {
                format!("encode_pass(slots: {slots}, compact)")
            } else {
                format!("encode_pass(slots: {slots})")
            },
            entry: "encode_pass",
            source: crate::shaders::encode_pass_source(slots, compact),
            params: params("encode_pass"),
            bindings: encode_pass_bindings(slots, compact),
        });
    }
    all.extend(EncodePassX4::all().into_iter().map(|v| Kernel {
        name: format!("{v:?}"),
        entry: "encode_pass_x4",
        source: v.source(),
        params: params("encode_pass_x4"),
        bindings: encode_pass_bindings(v.slots, v.compact),
    }));
    all.push(Kernel {
        name: "encode_pass_scan".to_string(),
        entry: "encode_pass_scan",
        source: crate::shaders::encode_pass_scan_source(),
        params: params("encode_pass_scan"),
        bindings: encode_pass_scan_bindings(),
    });
    all.extend(CopyForm::all().into_iter().map(|form| Kernel {
        name: format!("copy({})", form.name()),
        entry: "copy",
        source: form.source(),
        params: params("copy"),
        bindings: bindings("copy"),
    }));
    all.extend(RopeUnitKind::all().into_iter().map(|kind| Kernel {
        name: format!("rope_x4({kind:?})"),
        entry: "rope_x4",
        source: kind.x4_source(),
        params: params("rope_x4"),
        bindings: bindings("rope_x4"),
    }));
    all.extend(RopePassKernel::all().into_iter().map(|v| Kernel {
        name: format!("{v:?}"),
        entry: v.entry(),
        source: v.source(),
        params: params("rope_pass"),
        bindings: rope_pass_bindings(),
    }));
    all
}
