// The recorded encode for rows of whole units of four elements (dim % 4 == 0): the same
// job, arithmetic and bits as embed.wgsl (and the CPU twin, src/cpu/encode.rs), each
// invocation moving whole units: one table word (TableWord: vec4<u32> of f32, vec2<u32> of
// 16-bit pairs), one cached PE unit and one output word (OutWord) at a time.
//
// A workgroup serves one token and one block of X4_UNITS * X4_WORKGROUP units of its row,
// so everything that depends on the token (its id, position, pad and fault checks, table
// chunk and slot) is uniform across the workgroup: a GPU branches on it once per warp,
// and a CPU adapter that runs invocations as SIMD lanes (lavapipe, llvmpipe) loads it once
// and takes only the branch taken, where a per-lane branch would run every slot's load
// under a mask (an 8-chunk table cost 2.6x a one-chunk one in the first form of this
// kernel, which found the token per invocation). Invocation li moves units li + k *
// X4_WORKGROUP of its block for k < X4_UNITS, so each load and store instruction of a
// warp touches one contiguous span.
//
// A learned position table (FLAG_LEARNED) is bound as the cache and takes STAGE 1 alone:
// positions without a row are faults (zero rows, counted), never computed.
//
// STAGE 0 serves every token. On adapters that run shaders on CPU cores, where a branch
// not taken by any invocation still runs under a mask, the job is split (see
// embed_scan.wgsl): STAGE 1 serves the tokens whose positions are cached (and writes the
// pad and faulty tokens' zero rows), with no PE computation compiled in; STAGE 2, an
// indirect dispatch, serves the tokens the scan listed, computing their PE values, and
// reads that list through binding 3 in place of the cache.
//
// The host prepends the specialisation (src/shaders.rs, `EmbedX4::source`): TableWord,
// OutWord, `widen`/`narrow`, TABLE_SLOTS table bindings (6 onwards) with
// `table_word(slot, i)`, X4_UNITS, X4_WORKGROUP and STAGE.
#import embed_common
#import convert4

// f32 units, row-major [cached_rows, dim / 4] (one unit when nothing is cached); in
// STAGE 2, the scan's list, four words to a unit.
@group(0) @binding(3) var<storage, read> cache: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> out: array<OutWord>;

// The PE unit x (columns 4x .. 4x + 3) of position p: cached, or computed with the table
// kernel's phase (one sin/cos pair per two columns when the layout interleaves them).
fn pe_unit(p: u32, cached: bool, x: u32) -> vec4<f32> {
    if STAGE == 1u || (STAGE == 0u && cached) {
        return bitcast<vec4<f32>>(cache[p * params.row_units + x]);
    }
    let c = 4u * x;
    return bitcast<vec4<f32>>(vec4<u32>(pe_pair(p, c), pe_pair(p, c + 2u)));
}

@compute @workgroup_size(X4_WORKGROUP)
fn embed_x4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    var t = wg.z * params.groups_y + wg.y;
    if STAGE == 2u {
        if t >= cache[0].w {
            return;
        }
        let k = 4u + t;
        t = cache[k >> 2u][k & 3u];
    }
    if t >= params.n_tokens {
        return;
    }
    let n = params.row_units;
    let x0 = wg.x * X4_UNITS * X4_WORKGROUP + li;
    let at = params.out_base + t * n;
    let id = ids[params.ids_base + params.token_base + t];
    let first = (params.flags & FLAG_FIRST_WINDOW) != 0u;
    let pad = (params.flags & FLAG_PAD_ID) != 0u && id == params.pad_id;
    let p = position(params.token_base + t);
    let cached = p < params.cached_rows;
    // A learned table's position without a row (never listed for a late stage).
    let bad_id = !pad && id >= params.vocab;
    let bad_position = !pad && !bad_id && !cached && (params.flags & FLAG_LEARNED) != 0u;
    if pad || bad_id || bad_position {
        // Zero rows and faults, written by the first stage's first window.
        if first && STAGE != 2u {
            if wg.x == 0u && li == 0u {
                if bad_id {
                    atomicAdd(&state.faults[0], 1u);
                    atomicMax(&state.faults[1], id);
                } else if bad_position {
                    position_fault(p);
                }
            }
            for (var k = 0u; k < X4_UNITS; k++) {
                let x = x0 + k * X4_WORKGROUP;
                if x < n {
                    out[at + x] = OutWord();
                }
            }
        }
        return;
    }
    let chunk = id / params.rows_per_chunk;
    let slot = chunk - params.first_chunk;
    if chunk < params.first_chunk || slot >= params.n_slots {
        return;
    }
    let row = (id - chunk * params.rows_per_chunk) * n;
    // The late stage serves these.
    if STAGE == 1u && !cached {
        return;
    }
    // e * 1.0 + pe has the bits of e + pe, fused or not.
    var s = 1.0;
    if (params.flags & FLAG_SCALE) != 0u {
        s = bitcast<f32>(params.scale_bits);
    }
    for (var k = 0u; k < X4_UNITS; k++) {
        let x = x0 + k * X4_WORKGROUP;
        if x < n {
            out[at + x] = narrow(widen(table_word(slot, row + x)) * s + pe_unit(p, cached, x));
        }
    }
}
