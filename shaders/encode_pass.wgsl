// The recorded encode (src/gpu/encode/pass.rs): out = scale * E[id] + PE(position) for a
// batch whose token ids and positions live in the caller's device buffers, so the host
// can neither sort nor check them. This is the general form, for rows that are not whole
// units of four elements or an output slice not aligned to its kernel's words (the usual
// case is encode_pass_x4.wgsl): one invocation writes one output word (one f32 element, or two
// f16/bf16 elements), reading its token's id and position itself; 16-bit output of an odd
// dim lets a word's halves belong to two tokens, which works the same. Same arithmetic,
// same bits as encode.wgsl and the CPU twin (src/cpu/encode.rs).
//
// PE values come from the context's cache of PE rows for positions below `cached_rows`
// (the table kernel's rows), and are computed here, with the table kernel's exact phase,
// for any other position: every u32 position is served, at the table's bits. With
// FLAG_LEARNED `cache` is a learned position table instead, and a position without a row
// gives a zero row and counts as a fault.
//
// A vocabulary larger than one binding is held in row chunks; a dispatch binds up to
// TABLE_SLOTS of them (a window) and writes the words of the tokens whose rows it holds.
// Tables of more chunks take one dispatch per window. A token whose id is the pad id, or
// outside the vocabulary, is written as zeros by the first window's dispatch; an id
// outside the vocabulary also counts in `state.faults` (never read out of bounds).
//
// The host prepends TABLE_SLOTS, the buffers (`cache`: f32 bits, row-major [cached_rows,
// dim], one word when nothing is cached; `out`: u32 words; see `encode_pass_io` in
// src/shaders.rs), the table bindings and `table_word(slot, i)`.
#import encode_pass_common

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
    let k = token(t);
    let first = (params.flags & FLAG_FIRST_WINDOW) != 0u;
    if k.zero {
        if first && c == 0u {
            count_fault(k);
        }
        return vec2<u32>(0u, u32(first));
    }
    if !k.in_window {
        return vec2<u32>(0u, 0u);
    }
    var v = bitcast<f32>(table_bits(k.slot, k.row * params.dim + c));
    if (params.flags & FLAG_SCALE) != 0u {
        v = rounded(v * bitcast<f32>(params.scale_bits), params.zero);
    }
    var pe: u32;
    if k.cached {
        pe = cache[k.position * params.dim + c];
    } else {
        pe = pe_bits(k.position, c);
    }
    return vec2<u32>(bitcast<u32>(v + bitcast<f32>(pe)), 1u);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn encode_pass(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
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
