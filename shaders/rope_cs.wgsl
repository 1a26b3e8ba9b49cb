// RoPE cos/sin table: one exact-phase (cos, sin) pair per (position slot, frequency), each
// times the attention factor in f32 when it is not 1. The rotation kernel (rope.wgsl) reads
// it, so cos and sin are computed once per distinct position and frequency, not per head.
// CPU twin: cos_sin_row in src/cpu/rope.rs. Host: src/gpu/rope.rs (RopeCsParams).
#import sincos
#import mrope_axis

struct Params {
    // slots * n_freqs in this dispatch; the host keeps it below 2^32.
    n_pairs: u32,
    n_freqs: u32,
    // workgroups along x, for dispatches folded into 2-D.
    groups_x: u32,
    // FLAG_SCALE; FLAG_OFFSETS: positions[b] is the first position of sequence b, and
    // slot t (token t of the batch) is at positions[t / seq_len] + t % seq_len (wrapping);
    // FLAG_AXES (with FLAG_INTERLEAVED or FLAG_ALTERNATING for those layouts): below.
    flags: u32,
    // f32 bits of the attention factor (used with FLAG_SCALE).
    scale_bits: u32,
    // The index of the first position in `positions`.
    pos_base: u32,
    // Tokens per sequence (with FLAG_OFFSETS).
    seq_len: u32,
    // With FLAG_AXES (a multimodal RoPE): slot s's positions are three, time, height and
    // width, axis-major as transformers' position ids [3, B, L] are, at
    // positions[pos_base + axis * axis_stride + s], and frequency i takes the axis
    // mrope_axis.wgsl gives for these mrope_section counts (each at most 32768).
    section_t: u32,
    section_h: u32,
    section_w: u32,
    axis_stride: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> positions: array<u32>;
@group(0) @binding(2) var<storage, read> steps: array<vec2<u32>>;
// f32 bits of (cos, sin) for pair idx = slot * n_freqs + i.
@group(0) @binding(3) var<storage, read_write> out: array<vec2<u32>>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn rope_cs(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let idx = (wg.y * params.groups_x + wg.x) * WORKGROUP_SIZE + li;
    if idx >= params.n_pairs {
        return;
    }
    let slot = idx / params.n_freqs;
    let i = idx - slot * params.n_freqs;
    var p: u32;
    if (params.flags & FLAG_AXES) != 0u {
        let section = vec3<u32>(params.section_t, params.section_h, params.section_w);
        let axis = mrope_axis(i, params.flags, section);
        p = positions[params.pos_base + axis * params.axis_stride + slot];
    } else if (params.flags & FLAG_OFFSETS) != 0u {
        let b = slot / params.seq_len;
        p = positions[params.pos_base + b] + (slot - b * params.seq_len);
    } else {
        p = positions[params.pos_base + slot];
    }
    let cs = rope_cos_sin(p, steps[i], (params.flags & FLAG_SCALE) != 0u, params.scale_bits);
    out[idx] = bitcast<vec2<u32>>(cs);
}
