// Rotary position embedding, fast form: in place on one buffer, a vec4 of 32-bit words at a
// time (4 f32 or 8 f16/bf16 elements). The host uses it when each head row is a whole
// number of vec4s and the rotated pairs fall in whole vec4s (head_dim % 8 == 0 and
// rotary_dim % 16 == 0), else rope.wgsl. One invocation owns one unit: for neox the vec4 at
// frequency offset u and its partner vec4 r/2 further on; for gptj one vec4 of adjacent
// pairs. It reads its unit, rotates it and writes it back, and units are disjoint, so in
// place is race-free; pass-through dimensions are never touched. Same expressions in the
// same order as rope.wgsl and the CPU twin (src/cpu/rope.rs): out_a = x_a c - x_b s,
// out_b = x_b c + x_a s. Host: src/gpu/rope.rs (RopeX4Params mirrors Params).
#import convert

struct Params {
    // Units in this chunk (rows * units_per_row).
    n_units: u32,
    units_per_row: u32,
    // vec4s per head row, and the neox partner offset (r/2 elements) in vec4s.
    row_vecs: u32,
    half_vecs: u32,
    n_freqs: u32,
    pairing: u32,
    dtype: u32,
    // Workgroups along x of a dispatch folded into 2-D.
    groups_x: u32,
    // The tensor's first vec4 in the bound `data` (a recorded pass's offset; else 0).
    data_base: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> row_slot: array<u32>;
// (cos, sin) bits of two consecutive frequencies per vec4: the rope_cs table read whole.
@group(0) @binding(2) var<storage, read> cs: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> data: array<vec4<u32>>;

// Element j (0..4 for f32, 0..8 for 16-bit) of a vec4 of words, as f32.
fn elem(v: vec4<u32>, j: u32) -> f32 {
    if params.dtype == DTYPE_F32 {
        return bitcast<f32>(v[j]);
    }
    return bitcast<f32>(half_to_f32_bits(half_of(v[j >> 1u], j), params.dtype));
}

// v with element j replaced by x, rounded to the storage type.
fn with_elem(v: vec4<u32>, j: u32, x: f32) -> vec4<u32> {
    var out = v;
    let bits = bitcast<u32>(x);
    if params.dtype == DTYPE_F32 {
        out[j] = bits;
        return out;
    }
    out[j >> 1u] = with_half(out[j >> 1u], j, f32_to_half_bits(bits, params.dtype));
    return out;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn rope_x4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let unit = (wg.y * params.groups_x + wg.x) * WORKGROUP_SIZE + li;
    if unit >= params.n_units {
        return;
    }
    let row = unit / params.units_per_row;
    let u = unit - row * params.units_per_row;
    let per_vec = select(8u, 4u, params.dtype == DTYPE_F32);
    let base = params.data_base + row * params.row_vecs;
    // The first frequency of the unit; even, so (slot * n_freqs + f0) / 2 is exact.
    let cs_base = (row_slot[row] * params.n_freqs) / 2u;
    if params.pairing == PAIRING_NEOX {
        let ia = base + u;
        let ib = ia + params.half_vecs;
        let va = data[ia];
        let vb = data[ib];
        var ra = va;
        var rb = vb;
        let f0 = u * per_vec;
        for (var m = 0u; m < per_vec / 2u; m++) {
            let t = cs[cs_base + f0 / 2u + m];
            for (var k = 0u; k < 2u; k++) {
                let j = 2u * m + k;
                let c = bitcast<f32>(t[2u * k]);
                let s = bitcast<f32>(t[2u * k + 1u]);
                let x = elem(va, j);
                let y = elem(vb, j);
                ra = with_elem(ra, j, x * c - y * s);
                rb = with_elem(rb, j, y * c + x * s);
            }
        }
        data[ia] = ra;
        data[ib] = rb;
    } else {
        let i = base + u;
        let v = data[i];
        var r = v;
        let f0 = u * per_vec / 2u;
        for (var m = 0u; m < per_vec / 4u; m++) {
            let t = cs[cs_base + f0 / 2u + m];
            for (var k = 0u; k < 2u; k++) {
                let j = 4u * m + 2u * k;
                let c = bitcast<f32>(t[2u * k]);
                let s = bitcast<f32>(t[2u * k + 1u]);
                let x = elem(v, j);
                let y = elem(v, j + 1u);
                r = with_elem(r, j, x * c - y * s);
                r = with_elem(r, j + 1u, y * c + x * s);
            }
        }
        data[i] = r;
    }
}
