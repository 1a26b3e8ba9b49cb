// The recorded encode for rows of whole units of four elements (dim % 4 == 0): the same
// job, arithmetic and bits as encode_pass.wgsl (and the CPU twin, src/cpu/encode.rs), each
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
// encode_pass_scan.wgsl): STAGE 1 serves the tokens whose positions are cached (and writes the
// pad and faulty tokens' zero rows), with no PE computation compiled in; STAGE 2, an
// indirect dispatch, serves the tokens the scan listed, computing their PE values, and
// reads that list through binding 3 in place of the cache.
//
// The host prepends the specialisation (src/shaders.rs, `EncodePassX4::source`): TableWord,
// OutWord, `widen`/`narrow`, the buffers (`encode_pass_io`: `cache`, f32 units, row-major
// [cached_rows, dim / 4], one unit when nothing is cached, and in STAGE 2 the scan's list,
// four words to a unit; `out`, of OutWord), TABLE_SLOTS table bindings with
// `table_word(slot, i)`, X4_UNITS, X4_WORKGROUP and STAGE.
#import encode_pass_common
#import convert4

// The PE unit x (columns 4x .. 4x + 3) of position p: cached, or computed with the table
// kernel's phase (one sin/cos pair per two columns when the layout interleaves them).
fn pe_unit(p: u32, cached: bool, x: u32) -> vec4<f32> {
    if STAGE == 1u || (STAGE == 0u && cached) {
        return bitcast<vec4<f32>>(cache[p * params.row_units + x]);
    }
    let c = 4u * x;
    return bitcast<vec4<f32>>(vec4<u32>(pe_pair(p, c), pe_pair(p, c + 2u)));
}

// One unit of the flat grid: unit u of the part's rows laid end to end, loaded.
struct FlatUnit {
    // Written as the sum of `e` and `p`, or as zeros.
    live: bool,
    zero: bool,
    at: u32,
    e: vec4<f32>,
    p: vec4<f32>,
}

fn flat_unit(u: u32) -> FlatUnit {
    var r: FlatUnit;
    let n = params.row_units;
    let t = u / n;
    let x = u - t * n;
    if t >= params.n_tokens {
        return r;
    }
    r.at = params.out_base + u;
    let k = token(t);
    if k.zero {
        if (params.flags & FLAG_FIRST_WINDOW) != 0u && STAGE != 2u {
            if x == 0u {
                count_fault(k);
            }
            r.zero = true;
        }
        return r;
    }
    if !k.in_window || (STAGE == 1u && !k.cached) {
        return r;
    }
    r.live = true;
    r.e = widen(table_word(k.slot, k.row * n + x));
    r.p = pe_unit(k.position, k.cached, x);
    return r;
}

fn flat_store(r: FlatUnit) {
    if r.zero {
        out[r.at] = OutWord();
    } else if r.live {
        if (params.flags & FLAG_SCALE) != 0u {
            out[r.at] = narrow(rounded4(r.e * bitcast<f32>(params.scale_bits), params.zero) + r.p);
        } else {
            out[r.at] = narrow(r.e + r.p);
        }
    }
}

@compute @workgroup_size(X4_WORKGROUP)
fn encode_pass_x4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let n = params.row_units;
    var t = wg.z * params.groups_y + wg.y;
    var x0 = wg.x * X4_UNITS * X4_WORKGROUP + li;
    if FLAT && X4_UNITS == 2u {
        let u = t * 2u * X4_WORKGROUP + li;
        let a = flat_unit(u);
        let b = flat_unit(u + X4_WORKGROUP);
        flat_store(a);
        flat_store(b);
        return;
    }
    if FLAT {
        // One unit per invocation (X4_UNITS == 1), the part's rows end to end.
        let u = t * X4_WORKGROUP + li;
        t = u / n;
        x0 = u - t * n;
    }
    if STAGE == 2u {
        if t >= cache[0].w {
            return;
        }
        let word = 4u + t;
        t = cache[word >> 2u][word & 3u];
    }
    if t >= params.n_tokens {
        return;
    }
    let at = params.out_base + t * n;
    let k = token(t);
    let first = (params.flags & FLAG_FIRST_WINDOW) != 0u;
    if k.zero {
        // Zero rows and faults, written by the first stage's first window (a learned
        // table's position without a row is never listed for a late stage).
        if first && STAGE != 2u {
            if x0 == 0u {
                count_fault(k);
            }
            for (var j = 0u; j < X4_UNITS; j++) {
                let x = x0 + j * X4_WORKGROUP;
                if x < n {
                    out[at + x] = OutWord();
                }
            }
        }
        return;
    }
    if !k.in_window {
        return;
    }
    // The late stage serves these.
    if STAGE == 1u && !k.cached {
        return;
    }
    let row = k.row * n;
    // Every unit's loads before any store: the loops have constant bounds, so a driver
    // unrolls them and keeps the arrays in registers.
    var e: array<vec4<f32>, X4_UNITS>;
    var p: array<vec4<f32>, X4_UNITS>;
    for (var j = 0u; j < X4_UNITS; j++) {
        let x = x0 + j * X4_WORKGROUP;
        if x < n {
            e[j] = widen(table_word(k.slot, row + x));
            p[j] = pe_unit(k.position, k.cached, x);
        }
    }
    if (params.flags & FLAG_SCALE) != 0u {
        // The product rounded before the sum takes it, as on the CPU (rounded.wgsl).
        let s = bitcast<f32>(params.scale_bits);
        for (var j = 0u; j < X4_UNITS; j++) {
            let x = x0 + j * X4_WORKGROUP;
            if x < n {
                out[at + x] = narrow(rounded4(e[j] * s, params.zero) + p[j]);
            }
        }
        return;
    }
    for (var j = 0u; j < X4_UNITS; j++) {
        let x = x0 + j * X4_WORKGROUP;
        if x < n {
            out[at + x] = narrow(e[j] + p[j]);
        }
    }
}
