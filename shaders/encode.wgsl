// Fused embedding gather + positional encoding, general form:
//     out[t, c] = scale * E[id(t), c] + PE[slot(t), c]
// for every storage type. PE rows come from the table kernel (exact phase), computed once
// for the positions in use. The grid is 2-D: y names the token (plus z * groups_y when
// folded), x the output word within its row, so no invocation divides. One invocation
// writes one output word: one f32 element, or two f16/bf16 elements of the same row (dim is
// even). A vocabulary larger than one binding is split into chunks, one dispatch each; a
// dispatch writes only the rows whose id falls in its chunk and keeps the others (the first
// dispatch initialises every row). CPU twin: src/cpu/encode.rs. Host: src/gpu/encode.rs.
#import convert

const DTYPE_F32: u32 = 0u;
const DTYPE_F16: u32 = 1u;

const FLAG_SCALE: u32 = 1u;
const FLAG_PAD: u32 = 2u;
const FLAG_FIRST: u32 = 4u;
// 16-bit output of an odd dim: a word may hold the end of one row and the start of the
// next, so invocations own output words in token order (tokens arrive unsorted) and each
// half finds its own token.
const FLAG_ODD16: u32 = 8u;

struct Params {
    n_tokens: u32,
    // Output words per row: dim for f32, dim / 2 for 16-bit outputs.
    row_words: u32,
    dim: u32,
    // Vocabulary rows [vocab_lo, vocab_hi) are in `table`.
    vocab_lo: u32,
    vocab_hi: u32,
    scale_bits: u32,
    flags: u32,
    pad_id: u32,
    in_dtype: u32,
    out_dtype: u32,
    // Workgroups along y; the grid folds tokens beyond it into z.
    groups_y: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// Tokens arrive sorted by PE row, so the tokens sharing a row run back to back and read it
// from cache. Three words per sorted token g: its id, its PE row (slot), and the output row
// it goes to. One buffer for the three keeps the kernel within the 4 storage buffers per
// stage of WebGPU's downlevel limits.
@group(0) @binding(1) var<storage, read> tokens: array<u32>;
@group(0) @binding(2) var<storage, read> pe: array<u32>;
@group(0) @binding(3) var<storage, read> table: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;

fn load_table_bits(i: u32) -> u32 {
    if params.in_dtype == DTYPE_F32 {
        return table[i];
    }
    let half = (table[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu;
    if params.in_dtype == DTYPE_F16 {
        return f16_to_f32_bits(half);
    }
    return bf16_to_f32_bits(half);
}

// f32 bits of column col for a token whose table row starts at element `row` and whose PE
// row starts at `pe_row`.
fn value_bits(row: u32, pe_row: u32, col: u32) -> u32 {
    var v = bitcast<f32>(load_table_bits(row + col));
    if (params.flags & FLAG_SCALE) != 0u {
        v = v * bitcast<f32>(params.scale_bits);
    }
    return bitcast<u32>(v + bitcast<f32>(pe[pe_row + col]));
}

fn to_half_bits(bits: u32) -> u32 {
    if params.out_dtype == DTYPE_F16 {
        return f32_to_f16_bits(bits);
    }
    return f32_to_bf16_bits(bits);
}

// The 16-bit bits of element (token t, column c), or `old` when this dispatch's vocabulary
// chunk does not hold the token's row.
fn half_bits(t: u32, c: u32, old: u32) -> u32 {
    let id = tokens[3u * t];
    if (params.flags & FLAG_PAD) != 0u && id == params.pad_id {
        return 0u;
    }
    if id < params.vocab_lo || id >= params.vocab_hi {
        return select(old, 0u, (params.flags & FLAG_FIRST) != 0u);
    }
    return to_half_bits(value_bits((id - params.vocab_lo) * params.dim, tokens[3u * t + 1u] * params.dim, c));
}

fn encode_odd16(token: u32, x: u32) {
    let w = token * params.row_words + x;
    let n_elems = params.n_tokens * params.dim;
    let e = 2u * w;
    if e >= n_elems {
        return;
    }
    let old = out[w];
    let t0 = e / params.dim;
    let lo = half_bits(t0, e - t0 * params.dim, old & 0xffffu);
    var hi = 0u;
    if e + 1u < n_elems {
        let t1 = (e + 1u) / params.dim;
        hi = half_bits(t1, e + 1u - t1 * params.dim, old >> 16u);
    }
    out[w] = lo | (hi << 16u);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn encode(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let token = wg.z * params.groups_y + wg.y;
    let x = wg.x * WORKGROUP_SIZE + li;
    if token >= params.n_tokens || x >= params.row_words {
        return;
    }
    if (params.flags & FLAG_ODD16) != 0u {
        encode_odd16(token, x);
        return;
    }
    let w = tokens[3u * token + 2u] * params.row_words + x;
    let id = tokens[3u * token];
    if (params.flags & FLAG_PAD) != 0u && id == params.pad_id {
        out[w] = 0u;
        return;
    }
    if id < params.vocab_lo || id >= params.vocab_hi {
        if (params.flags & FLAG_FIRST) != 0u {
            out[w] = 0u;
        }
        return;
    }
    let row = (id - params.vocab_lo) * params.dim;
    let pe_row = tokens[3u * token + 1u] * params.dim;
    if params.out_dtype == DTYPE_F32 {
        out[w] = value_bits(row, pe_row, x);
        return;
    }
    let lo = to_half_bits(value_bits(row, pe_row, 2u * x));
    let hi = to_half_bits(value_bits(row, pe_row, 2u * x + 1u));
    out[w] = lo | (hi << 16u);
}
