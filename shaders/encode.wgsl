// Fused embedding gather + positional encoding, general form, for dims that are not a
// multiple of 4 (encode_x4.wgsl serves the rest):
//     out[t, c] = scale * E[id(t), c] + PE[slot(t), c]
// for every storage type. PE rows are f32 rows of the table kernel (exact phase: cached for
// positions 0..n, or computed for the chunk's positions) or of a learned table. The grid is
// 2-D: y names the token (plus z * groups_y when folded), x the output word within its row,
// so no invocation divides. One invocation writes one output word: one f32 element, or two
// f16/bf16 elements of the same row (out_dtype 16-bit only for an even dim; 16-bit output
// of an odd dim is written as f32 and narrowed by narrow.wgsl). A vocabulary larger than
// one binding is split into chunks; the host sorts the tokens by chunk and each dispatch
// serves the tokens of one chunk, so every token is written once.
// CPU twin: src/cpu/encode.rs. Host: src/gpu/encode.rs.
#import convert
#import rounded

struct Params {
    // Tokens in this dispatch, from token_base.
    n_tokens: u32,
    token_base: u32,
    // Output words per row: dim when out_dtype is DTYPE_F32, else dim / 2 (dim is then
    // even).
    row_words: u32,
    dim: u32,
    scale_bits: u32,
    flags: u32,
    in_dtype: u32,
    out_dtype: u32,
    // Workgroups along y; the grid folds tokens beyond it into z.
    groups_y: u32,
    // Always 0: the opaque zero of rounded.wgsl.
    zero: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// Tokens arrive sorted by table chunk, then PE row, so the tokens sharing a row run back
// to back and read it from cache. Three words per sorted token: its row in its table chunk
// (or PAD), its PE row (slot), and the output row it goes to. One buffer for the three
// keeps the kernel within the 4 storage buffers per stage of WebGPU's downlevel limits.
@group(0) @binding(1) var<storage, read> tokens: array<u32>;
@group(0) @binding(2) var<storage, read> pe: array<u32>;
@group(0) @binding(3) var<storage, read> table: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;

fn load_table_bits(i: u32) -> u32 {
    if params.in_dtype == DTYPE_F32 {
        return table[i];
    }
    return half_to_f32_bits(half_of(table[i >> 1u], i), params.in_dtype);
}

// f32 bits of column col for a token whose table row starts at element `row` and whose PE
// row starts at `pe_row`.
fn value_bits(row: u32, pe_row: u32, col: u32) -> u32 {
    var v = bitcast<f32>(load_table_bits(row + col));
    if (params.flags & FLAG_SCALE) != 0u {
        v = rounded(v * bitcast<f32>(params.scale_bits), params.zero);
    }
    return bitcast<u32>(v + bitcast<f32>(pe[pe_row + col]));
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn encode(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let local = wg.z * params.groups_y + wg.y;
    let x = wg.x * WORKGROUP_SIZE + li;
    if local >= params.n_tokens || x >= params.row_words {
        return;
    }
    let token = params.token_base + local;
    let id = tokens[3u * token];
    let w = tokens[3u * token + 2u] * params.row_words + x;
    if id == PAD {
        out[w] = 0u;
        return;
    }
    let row = id * params.dim;
    let pe_row = tokens[3u * token + 1u] * params.dim;
    if params.out_dtype == DTYPE_F32 {
        out[w] = value_bits(row, pe_row, x);
        return;
    }
    let lo = f32_to_half_bits(value_bits(row, pe_row, 2u * x), params.out_dtype);
    let hi = f32_to_half_bits(value_bits(row, pe_row, 2u * x + 1u), params.out_dtype);
    out[w] = lo | (hi << 16u);
}
