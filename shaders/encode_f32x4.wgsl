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
// from cache. Three words per sorted token g: its id, its PE row (slot), and the output row
// it goes to. One buffer for the three keeps the kernel within the 4 storage buffers per
// stage of WebGPU's downlevel limits.
@group(0) @binding(1) var<storage, read> tokens: array<u32>;
@group(0) @binding(2) var<storage, read> pe: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> table: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>;

// One workgroup per token: the token's id, PE row and destination are read once per
// invocation and serve every vec4 it moves along the row.
@compute @workgroup_size(ROW_WORKGROUP_SIZE)
fn encode_f32x4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let token = wg.z * params.groups_y + wg.y;
    if token >= params.n_tokens {
        return;
    }
    let n = params.row_vecs;
    let dst = tokens[3u * token + 2u] * n;
    let id = tokens[3u * token];
    if (params.flags & FLAG_PAD) != 0u && id == params.pad_id {
        for (var x = li; x < n; x += ROW_WORKGROUP_SIZE) {
            out[dst + x] = vec4<f32>(0.0);
        }
        return;
    }
    let src = id * n;
    let pe_row = tokens[3u * token + 1u] * n;
    if (params.flags & FLAG_SCALE) != 0u {
        let s = bitcast<f32>(params.scale_bits);
        for (var x = li; x < n; x += ROW_WORKGROUP_SIZE) {
            out[dst + x] = table[src + x] * s + pe[pe_row + x];
        }
    } else {
        for (var x = li; x < n; x += ROW_WORKGROUP_SIZE) {
            out[dst + x] = table[src + x] + pe[pe_row + x];
        }
    }
}
