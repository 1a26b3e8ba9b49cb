// Positional-encoding table: one exact-phase (sin, cos) pair per (row, frequency).
// CPU twin: src/cpu/table.rs. Host wrapper: src/gpu/table.rs (TableParams mirrors Params).
#import sincos

struct Params {
    // rows * n_freqs in this dispatch; the host keeps it below 2^32.
    n_pairs: u32,
    n_freqs: u32,
    // workgroups along x, for dispatches folded into 2-D.
    groups_x: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> positions: array<u32>;
@group(0) @binding(2) var<storage, read> steps: array<vec2<u32>>;
// f32 bits of (sin, cos) for pair idx = row * n_freqs + i: the interleaved row layout.
@group(0) @binding(3) var<storage, read_write> out: array<vec2<u32>>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn table(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let idx = (wg.y * params.groups_x + wg.x) * WORKGROUP_SIZE + li;
    if idx >= params.n_pairs {
        return;
    }
    let row = idx / params.n_freqs;
    let i = idx - row * params.n_freqs;
    out[idx] = sincos_bits(phase_turns(positions[row], steps[i]));
}
