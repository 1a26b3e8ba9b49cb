// Rotary position embedding of a host-array call, fast form: in place on one buffer, one unit
// (rope_unit.wgsl) of four or eight frequencies per invocation. The host uses it when each
// head row is a whole number of vec4s and the rotated pairs fall in whole units (head_dim %
// 8 == 0 and rotary_dim % 16 == 0), else rope.wgsl. An invocation reads its unit, rotates
// it and writes it back; units are disjoint, so in place is race-free, and pass-through
// dimensions are never touched. cos/sin come from the rope_cs table, one slot per distinct
// position of the chunk. The host specialises the kernel per storage type and pairing
// (src/shaders.rs, `RopeX4`). Host: src/gpu/rope.rs (RopeX4Params mirrors Params).
#import rope_unit

struct Params {
    // Units in this chunk (rows * units_per_row).
    n_units: u32,
    units_per_row: u32,
    // vec4s per head row, and the neox partner offset (r/2 elements) in vec4s.
    row_vecs: u32,
    half_vecs: u32,
    n_freqs: u32,
    // Workgroups along x of a dispatch folded into 2-D.
    groups_x: u32,
    // The tensor's first vec4 in the bound `data` (always 0 for a host-array call).
    data_base: u32,
    // Always 0: the opaque zero of rounded.wgsl.
    zero: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> row_slot: array<u32>;
// (cos, sin) bits of two consecutive frequencies per vec4: the rope_cs table read whole.
@group(0) @binding(2) var<storage, read> cs: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> data: array<vec4<u32>>;

// cos (in .c) and sin (in .s) of frequencies f .. f + 3 of slot `slot`: f is a multiple of 4.
struct CosSin {
    c: vec4<f32>,
    s: vec4<f32>,
}

fn cos_sin4(slot: u32, f: u32) -> CosSin {
    let at = (slot * params.n_freqs + f) / 2u;
    let t0 = bitcast<vec4<f32>>(cs[at]);
    let t1 = bitcast<vec4<f32>>(cs[at + 1u]);
    return CosSin(vec4<f32>(t0.x, t0.z, t1.x, t1.z), vec4<f32>(t0.y, t0.w, t1.y, t1.w));
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn rope_x4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let unit = (wg.y * params.groups_x + wg.x) * WORKGROUP_SIZE + li;
    if unit >= params.n_units {
        return;
    }
    let row = unit / params.units_per_row;
    let u = unit - row * params.units_per_row;
    let slot = row_slot[row];
    let f = u * ROPE_UNIT_FREQS;
    let lo = cos_sin4(slot, f);
    var hi = lo;
    if ROPE_UNIT_FREQS == 8u {
        hi = cos_sin4(slot, f + 4u);
    }
    let ia = params.data_base + row * params.row_vecs + rope_unit_word(u);
    var ib = ia + 1u;
    if ROPE_NEOX {
        ib = ia + params.half_vecs;
    }
    let a = data[ia];
    var b = a;
    if ROPE_NEOX || ROPE_F32 {
        b = data[ib];
    }
    let r = rope_unit(a, b, lo.c, lo.s, hi.c, hi.s, params.zero);
    data[ia] = r.a;
    if ROPE_NEOX || ROPE_F32 {
        data[ib] = r.b;
    }
}
