// The recorded encode (src/gpu/record/encode.rs): out = scale * E[id] + PE(position) for a
// batch whose token ids and positions live in the caller's device buffers, so the host
// can neither sort nor check them. One invocation writes one output word (one f32
// element, or two f16/bf16 elements), reading its token's id and position itself; 16-bit
// output of an odd dim lets a word's halves belong to two tokens, which works the same.
// Same arithmetic, same bits as encode.wgsl and the CPU twin (src/cpu/encode.rs).
//
// PE values come from the context's cache of PE rows for positions below `cached_rows`
// (the table kernel's rows), and are computed here, with the table kernel's exact phase,
// for any other position: every u32 position is served, at the table's bits.
//
// A vocabulary larger than one binding is held in row chunks; a dispatch binds up to
// TABLE_SLOTS of them (a window) and writes the words of the tokens whose rows it holds.
// Tables of more chunks take one dispatch per window. A token whose id is the pad id, or
// outside the vocabulary, is written as zeros by the first window's dispatch; an id
// outside the vocabulary also counts in `state.faults` (never read out of bounds).
//
// The host prepends TABLE_SLOTS, the table bindings (6 onwards) and `table_word(slot, i)`.
#import pe_phase
#import convert

struct Params {
    // Output words of the batch.
    n_words: u32,
    dim: u32,
    vocab: u32,
    // Rows of every table chunk but the last.
    rows_per_chunk: u32,
    // This dispatch's window: the first chunk bound, and how many are.
    first_chunk: u32,
    n_slots: u32,
    // Indices (in u32 elements) of the batch's first id, position and output word in the
    // bound buffers.
    ids_base: u32,
    pos_base: u32,
    out_base: u32,
    // With FLAG_OFFSETS, tokens per sequence: positions[b] is sequence b's first position.
    seq_len: u32,
    // Positions below this have their PE row in `cache`.
    cached_rows: u32,
    pad_id: u32,
    scale_bits: u32,
    // FLAG_SCALE, FLAG_PAD_ID, FLAG_OFFSETS, FLAG_FIRST_WINDOW.
    flags: u32,
    in_dtype: u32,
    out_dtype: u32,
    // Workgroups along x of a dispatch folded into 2-D.
    groups_x: u32,
    // The spec, as the table kernel takes it: FLAG_F32, FLAG_PADDING, FLAG_ZERO_COL.
    spec_flags: u32,
    n_freqs: u32,
    stride: u32,
    cos_offset: u32,
    zero_col: u32,
    start: u32,
    padding_idx: u32,
}

// Fault counters, then the spec's frequency words (see pe_phase).
struct State {
    // [0]: tokens whose id was outside the vocabulary; [1]: the largest such id.
    faults: array<atomic<u32>, 4>,
    steps: array<vec2<u32>>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> positions: array<u32>;
// f32 bits, row-major [cached_rows, dim] (one word when nothing is cached).
@group(0) @binding(3) var<storage, read> cache: array<u32>;
@group(0) @binding(4) var<storage, read_write> state: State;
@group(0) @binding(5) var<storage, read_write> out: array<u32>;

fn freq_step(k: u32) -> vec2<u32> {
    return state.steps[k];
}

fn position(t: u32) -> u32 {
    if (params.flags & FLAG_OFFSETS) != 0u {
        let b = t / params.seq_len;
        // Wraps past 2^32 - 1, as documented.
        return positions[params.pos_base + b] + (t - b * params.seq_len);
    }
    return positions[params.pos_base + t];
}

// f32 bits of column c of the PE row of position p, as the table kernel writes it.
fn pe_bits(p: u32, c: u32) -> u32 {
    if (params.spec_flags & FLAG_PADDING) != 0u && p == params.padding_idx {
        return 0u;
    }
    if (params.spec_flags & FLAG_ZERO_COL) != 0u && c == params.zero_col {
        return 0u;
    }
    var i = c;
    var is_cos = false;
    if params.stride == 2u {
        i = c >> 1u;
        is_cos = (c & 1u) == 1u;
    } else if c >= params.cos_offset {
        i = c - params.cos_offset;
        is_cos = true;
    }
    let f32_freqs = (params.spec_flags & FLAG_F32) != 0u;
    let sc = sincos_bits(pe_phase(p, params.start, f32_freqs, params.n_freqs, i));
    return select(sc.x, sc.y, is_cos);
}

fn table_bits(slot: u32, i: u32) -> u32 {
    if params.in_dtype == DTYPE_F32 {
        return table_word(slot, i);
    }
    return half_to_f32_bits(half_of(table_word(slot, i >> 1u), i), params.in_dtype);
}

// Element e of the batch: (f32 bits, whether this dispatch writes it).
fn element(e: u32) -> vec2<u32> {
    let t = e / params.dim;
    let c = e - t * params.dim;
    let id = ids[params.ids_base + t];
    let first = (params.flags & FLAG_FIRST_WINDOW) != 0u;
    let pad = (params.flags & FLAG_PAD_ID) != 0u && id == params.pad_id;
    if pad || id >= params.vocab {
        if first && !pad && c == 0u {
            atomicAdd(&state.faults[0], 1u);
            atomicMax(&state.faults[1], id);
        }
        return vec2<u32>(0u, u32(first));
    }
    let chunk = id / params.rows_per_chunk;
    let slot = chunk - params.first_chunk;
    if chunk < params.first_chunk || slot >= params.n_slots {
        return vec2<u32>(0u, 0u);
    }
    var v = bitcast<f32>(table_bits(slot, (id - chunk * params.rows_per_chunk) * params.dim + c));
    if (params.flags & FLAG_SCALE) != 0u {
        v = v * bitcast<f32>(params.scale_bits);
    }
    let p = position(t);
    var pe: u32;
    if p < params.cached_rows {
        pe = cache[p * params.dim + c];
    } else {
        pe = pe_bits(p, c);
    }
    return vec2<u32>(bitcast<u32>(v + bitcast<f32>(pe)), 1u);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn embed(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let w = (wg.y * params.groups_x + wg.x) * WORKGROUP_SIZE + li;
    if w >= params.n_words {
        return;
    }
    if params.out_dtype == DTYPE_F32 {
        let v = element(w);
        if v.y != 0u {
            out[params.out_base + w] = v.x;
        }
        return;
    }
    // The host refuses windows that could split a word's halves between dispatches.
    let lo = element(2u * w);
    let hi = element(2u * w + 1u);
    if lo.y != 0u {
        let l = f32_to_half_bits(lo.x, params.out_dtype);
        let h = f32_to_half_bits(hi.x, params.out_dtype);
        out[params.out_base + w] = l | (h << 16u);
    }
}

// f32 bits of one element: the table value (scaled) plus the PE bits.
fn value(slot: u32, i: u32, pe: u32) -> u32 {
    var v = bitcast<f32>(table_bits(slot, i));
    if (params.flags & FLAG_SCALE) != 0u {
        v = v * bitcast<f32>(params.scale_bits);
    }
    return bitcast<u32>(v + bitcast<f32>(pe));
}

// The PE bits of columns c and c + 1 (c even) of position p, computed: one sin/cos pair
// when the layout interleaves them.
fn pe_pair(p: u32, c: u32) -> vec2<u32> {
    if params.stride != 2u {
        return vec2<u32>(pe_bits(p, c), pe_bits(p, c + 1u));
    }
    if (params.spec_flags & FLAG_PADDING) != 0u && p == params.padding_idx {
        return vec2<u32>(0u, 0u);
    }
    let f32_freqs = (params.spec_flags & FLAG_F32) != 0u;
    return sincos_bits(pe_phase(p, params.start, f32_freqs, params.n_freqs, c >> 1u));
}

// Four output words of one token per invocation, for rows of a whole number of vec4 words
// (f32 output: dim % 4 == 0; 16-bit: dim % 8 == 0): the token's id, position, table chunk
// and cache row are found once per four words rather than once per element, which is most
// of the cost of a short decode step.
@compute @workgroup_size(WORKGROUP_SIZE)
fn embed_x4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let w0 = 4u * ((wg.y * params.groups_x + wg.x) * WORKGROUP_SIZE + li);
    if w0 >= params.n_words {
        return;
    }
    let wide = params.out_dtype == DTYPE_F32;
    let per_word = select(2u, 1u, wide);
    let e0 = w0 * per_word;
    let t = e0 / params.dim;
    let c0 = e0 - t * params.dim;
    let id = ids[params.ids_base + t];
    let first = (params.flags & FLAG_FIRST_WINDOW) != 0u;
    let pad = (params.flags & FLAG_PAD_ID) != 0u && id == params.pad_id;
    let at = params.out_base + w0;
    if pad || id >= params.vocab {
        if first {
            if !pad && c0 == 0u {
                atomicAdd(&state.faults[0], 1u);
                atomicMax(&state.faults[1], id);
            }
            for (var k = 0u; k < 4u; k++) {
                out[at + k] = 0u;
            }
        }
        return;
    }
    let chunk = id / params.rows_per_chunk;
    let slot = chunk - params.first_chunk;
    if chunk < params.first_chunk || slot >= params.n_slots {
        return;
    }
    let row = (id - chunk * params.rows_per_chunk) * params.dim;
    let p = position(t);
    let cached = p < params.cached_rows;
    let pe_row = p * params.dim;
    for (var k = 0u; k < 4u; k++) {
        let c = c0 + k * per_word;
        if wide {
            var pe: u32;
            if cached {
                pe = cache[pe_row + c];
            } else {
                pe = pe_bits(p, c);
            }
            out[at + k] = value(slot, row + c, pe);
        } else {
            var pe: vec2<u32>;
            if cached {
                pe = vec2<u32>(cache[pe_row + c], cache[pe_row + c + 1u]);
            } else {
                pe = pe_pair(p, c);
            }
            let lo = f32_to_half_bits(value(slot, row + c, pe.x), params.out_dtype);
            let hi = f32_to_half_bits(value(slot, row + c + 1u, pe.y), params.out_dtype);
            out[at + k] = lo | (hi << 16u);
        }
    }
}
