// What the recorded encode kernels share (src/gpu/encode/pass.rs): the token ids and
// fault counters, and PE values computed with the table kernel's exact phase for
// positions outside the PE cache. The host declares the buffers (src/shaders.rs,
// `encode_pass_io`): `state` (its `faults`, then the spec's frequency words), `cache` and `out`
// with the importing kernel's word types, and the table slots; and `id_word(i)`,
// `position_word(i)` and `freq_step(k)`, which read word i of the bound ids or positions
// and the k-th frequency step (see pe_phase) wherever the layout keeps them.
#import encode_pass_params
#import pe_phase
#import convert
#import rounded

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

// Counts a token of a learned table whose position `p` has no row (FLAG_LEARNED).
fn position_fault(p: u32) {
    atomicAdd(&state.faults[2], 1u);
    atomicMax(&state.faults[3], p);
}

// What a token's id and position say about it in this dispatch, the same for both
// kernels.
struct Token {
    id: u32,
    position: u32,
    // Its PE row is in `cache` (or, with FLAG_LEARNED, in the position table).
    cached: bool,
    // Written as a zero row: a pad token, an id outside the vocabulary, or (FLAG_LEARNED)
    // a position without a row. The last two are faults.
    zero: bool,
    bad_id: bool,
    bad_position: bool,
    // Whether this dispatch's window binds its table chunk, the chunk's slot, and its row in
    // the chunk.
    in_window: bool,
    slot: u32,
    row: u32,
}

// Token t of this dispatch's part of the batch.
fn token(t: u32) -> Token {
    var k: Token;
    k.id = id_word(params.ids_base + params.token_base + t);
    k.position = position(params.token_base + t);
    k.cached = k.position < params.cached_rows;
    let pad = (params.flags & FLAG_PAD_ID) != 0u && k.id == params.pad_id;
    k.bad_id = !pad && k.id >= params.vocab;
    k.bad_position = !pad && !k.bad_id && !k.cached && (params.flags & FLAG_LEARNED) != 0u;
    k.zero = pad || k.bad_id || k.bad_position;
    // A table of one chunk (or an id in the first) needs no division by a parameter, about
    // twenty instructions on a GPU between the id's load and the row's.
    var chunk = 0u;
    if k.id >= params.rows_per_chunk {
        chunk = k.id / params.rows_per_chunk;
    }
    k.slot = chunk - params.first_chunk;
    k.in_window = chunk >= params.first_chunk && k.slot < params.n_slots;
    k.row = k.id - chunk * params.rows_per_chunk;
    return k;
}

// Counts a zero token's fault, if it is one (once per token: the caller picks one
// invocation of the first window).
fn count_fault(k: Token) {
    if k.bad_id {
        atomicAdd(&state.faults[0], 1u);
        atomicMax(&state.faults[1], k.id);
    } else if k.bad_position {
        position_fault(k.position);
    }
}
