// Positional-encoding table: one exact-phase (sin, cos) pair per (row, frequency), placed in
// the spec's columns. CPU twin: src/cpu/table.rs. Host wrapper: src/gpu/table.rs
// (TableParams mirrors Params).
#import pe_phase

struct Params {
    // rows * n_freqs in this dispatch; the host keeps it below 2^32.
    n_pairs: u32,
    n_freqs: u32,
    // workgroups along x, for dispatches folded into 2-D.
    groups_x: u32,
    dim: u32,
    // Column map: sin of frequency i in column i * stride, its cos (i < n_cos) in
    // cos_offset + i * stride, column zero_col (FLAG_ZERO_COL) always zero.
    n_cos: u32,
    stride: u32,
    cos_offset: u32,
    zero_col: u32,
    // Added to every position (a 33-bit sum).
    start: u32,
    // The position whose row is all zeros (FLAG_PADDING).
    padding_idx: u32,
    flags: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> positions: array<u32>;
// Exact: one 64-bit step per frequency. FLAG_F32: each frequency's f32 bits in .x, then
// F32_STEPS steps of 2^(k - F32_STEP_BIAS) radians.
@group(0) @binding(2) var<storage, read> freqs: array<vec2<u32>>;
// f32 bits, row-major [rows, dim].
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

fn freq_step(k: u32) -> vec2<u32> {
    return freqs[k];
}

fn phase(p: u32, i: u32) -> u32 {
    return pe_phase(p, params.start, (params.flags & FLAG_F32) != 0u, params.n_freqs, i);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn table(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let idx = (wg.y * params.groups_x + wg.x) * WORKGROUP_SIZE + li;
    if idx >= params.n_pairs {
        return;
    }
    let row = idx / params.n_freqs;
    let i = idx - row * params.n_freqs;
    let p = positions[row];
    let base = row * params.dim;
    var sc = vec2<u32>(0u, 0u);
    if (params.flags & FLAG_PADDING) == 0u || p != params.padding_idx {
        sc = sincos_bits(phase(p, i));
    }
    out[base + i * params.stride] = sc.x;
    if i < params.n_cos {
        out[base + params.cos_offset + i * params.stride] = sc.y;
    }
    if i == 0u && (params.flags & FLAG_ZERO_COL) != 0u {
        out[base + params.zero_col] = 0u;
    }
}
