// Fast path of encode (see encode.wgsl): f32 table, f32 output, dim a multiple of 4, the
// whole vocabulary in one binding. One invocation moves one vec4; same arithmetic, same
// bits as the general kernel and the CPU twin.

const FLAG_SCALE: u32 = 1u;
const FLAG_PAD: u32 = 2u;

struct Params {
    n_tokens: u32,
    // vec4s per row: dim / 4.
    row_vecs: u32,
    scale_bits: u32,
    flags: u32,
    pad_id: u32,
    // Workgroups along y; the grid folds tokens beyond it into z.
    groups_y: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// Tokens arrive sorted by PE row, so the tokens sharing a row run back to back and read it
// from cache; order[g] is where sorted token g's output row goes.
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> slots: array<u32>;
@group(0) @binding(3) var<storage, read> order: array<u32>;
@group(0) @binding(4) var<storage, read> pe: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> table: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> out: array<vec4<f32>>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn encode_f32x4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let token = wg.z * params.groups_y + wg.y;
    let x = wg.x * WORKGROUP_SIZE + li;
    if token >= params.n_tokens || x >= params.row_vecs {
        return;
    }
    let w = order[token] * params.row_vecs + x;
    let id = ids[token];
    if (params.flags & FLAG_PAD) != 0u && id == params.pad_id {
        out[w] = vec4<f32>(0.0);
        return;
    }
    var v = table[id * params.row_vecs + x];
    if (params.flags & FLAG_SCALE) != 0u {
        v = v * bitcast<f32>(params.scale_bits);
    }
    out[w] = v + pe[slots[token] * params.row_vecs + x];
}
