// Rotary position embedding of a query/key tensor, out of place (src -> dst; the host makes
// in-place calls go through a copy). For frequency i rotating dimensions (a, b) of a head
// row -- (i, i + r/2) for neox, (2i, 2i + 1) for gptj --
//     out_a = x_a * c - x_b * s        out_b = x_b * c + x_a * s
// with (c, s) from the rope_cs table, each product rounded before the sum takes it
// (rounded.wgsl); dimensions from r on pass through bit for bit.
//
// One invocation writes one output word at a time: one f32 element, or two f16/bf16
// elements. It reads whatever partners it needs from src, which nobody writes, so no two
// invocations touch the same word and nothing races. Head rows come in groups: one row, or
// two when 16-bit rows of odd length would otherwise straddle words. Each workgroup walks
// `groups_per_wg` consecutive groups, its invocations striding along each group's words,
// so no invocation divides and a software adapter is not swamped by tiny workgroups.
// CPU twin: src/cpu/rope.rs. Host: src/gpu/rope.rs (RopeParams mirrors Params).
#import convert
#import rounded

struct Params {
    // Elements in this chunk (the last group may hold fewer rows than the others).
    n_elems: u32,
    n_groups: u32,
    // Elements and output words per group (rows_per_group * head_dim elements).
    group_elems: u32,
    group_words: u32,
    rows_per_group: u32,
    head_dim: u32,
    rotary_dim: u32,
    // rotary_dim / 2: the frequencies, and the neox partner offset.
    n_freqs: u32,
    pairing: u32,
    dtype: u32,
    // Row groups each workgroup walks.
    groups_per_wg: u32,
    // Workgroups along x of a dispatch folded into 2-D.
    groups_x: u32,
    // The tensor's first word in the bound `dst` (a recorded pass's offset; else 0); `src`
    // is always a copy from the tensor's start.
    data_base: u32,
    // Always 0: the opaque zero of rounded.wgsl.
    zero: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// The cos/sin slot of each head row of the chunk.
@group(0) @binding(1) var<storage, read> row_slot: array<u32>;
@group(0) @binding(2) var<storage, read> cs: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read> src: array<u32>;
@group(0) @binding(4) var<storage, read_write> dst: array<u32>;

// The raw stored bits of element e: f32 bits, or the 16-bit value in the low half.
fn raw(e: u32) -> u32 {
    if params.dtype == DTYPE_F32 {
        return src[e];
    }
    return half_of(src[e >> 1u], e);
}

fn widen(e: u32) -> f32 {
    let h = raw(e);
    if params.dtype == DTYPE_F32 {
        return bitcast<f32>(h);
    }
    return bitcast<f32>(half_to_f32_bits(h, params.dtype));
}

fn narrow(v: f32) -> u32 {
    let bits = bitcast<u32>(v);
    if params.dtype == DTYPE_F32 {
        return bits;
    }
    return f32_to_half_bits(bits, params.dtype);
}

// The stored bits of output element e_in_group of `group`.
fn element(group: u32, e_in_group: u32) -> u32 {
    let e = group * params.group_elems + e_in_group;
    if e >= params.n_elems {
        // Past the chunk's end: the padding half of the last word stays as it was.
        return raw(e);
    }
    let second = e_in_group >= params.head_dim;
    let d = select(e_in_group, e_in_group - params.head_dim, second);
    if d >= params.rotary_dim {
        return raw(e);
    }
    let row_base = e - d;
    let row = group * params.rows_per_group + select(0u, 1u, second);
    var i: u32;
    var partner: u32;
    var first: bool;
    if params.pairing == PAIRING_NEOX {
        first = d < params.n_freqs;
        i = select(d - params.n_freqs, d, first);
        partner = select(d - params.n_freqs, d + params.n_freqs, first);
    } else {
        first = (d & 1u) == 0u;
        i = d >> 1u;
        partner = d ^ 1u;
    }
    let t = cs[row_slot[row] * params.n_freqs + i];
    let c = bitcast<f32>(t.x);
    let s = bitcast<f32>(t.y);
    let x = widen(e);
    let y = widen(row_base + partner);
    // x is the element itself, y its partner: a - b s for the first of a pair, b + a s for
    // the second, the same expressions in the same order as on the CPU, each product
    // rounded before the sum takes it (rounded.wgsl).
    let xc = rounded(x * c, params.zero);
    let ys = rounded(y * s, params.zero);
    var r: f32;
    if first {
        r = xc - ys;
    } else {
        r = xc + ys;
    }
    return narrow(r);
}

@compute @workgroup_size(ROW_WORKGROUP_SIZE)
fn rope(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let first = (wg.y * params.groups_x + wg.x) * params.groups_per_wg;
    let end = min(first + params.groups_per_wg, params.n_groups);
    for (var group = first; group < end; group++) {
        for (var w = li; w < params.group_words; w += ROW_WORKGROUP_SIZE) {
            let word = group * params.group_words + w;
            if params.dtype == DTYPE_F32 {
                if word < params.n_elems {
                    dst[params.data_base + word] = element(group, w);
                }
            } else if 2u * word < params.n_elems {
                let bits = element(group, 2u * w) | (element(group, 2u * w + 1u) << 16u);
                dst[params.data_base + word] = bits;
            }
        }
    }
}
