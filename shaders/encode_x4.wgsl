// Fast path of encode (see encode.wgsl) for dims that are a multiple of 4, every table and
// output type: out[t] = scale * E[id(t)] + PE[slot(t)] in units of four elements. Same
// arithmetic, same bits as the general kernel and the CPU twin (src/cpu/encode.rs).
//
// The host specialises this file per variant (src/shaders.rs, `EncodeX4::source`): the
// storage word of a unit of the table (`TableWord`: vec4<u32> for f32, vec2<u32> for
// 16-bit) and of the output (`OutWord`), `widen`/`narrow` between them and vec4<f32>, the
// number of table bindings `TABLE_SLOTS` with `table_word(slot, i)` choosing among them,
// the access pattern `COALESCED` with its `UNITS_PER_INVOCATION` (2 coalesced, 4 adjacent)
// and the threads per workgroup `X4_WORKGROUP`.
//
// The host sorts the tokens by PE row and cuts them into groups of at most
// MAX_GROUP_TOKENS tokens sharing one. A workgroup owns one group and one block of
// UNITS_PER_INVOCATION * X4_WORKGROUP units of the row: it reads the PE values of its units once and
// adds them to every token of the group. A vocabulary larger than one binding is held in
// row chunks; one dispatch binds up to TABLE_SLOTS of them (a window) and each token's
// record names its chunk's slot, so tokens sharing a PE row share a group whichever chunk
// holds their rows. Tables of more chunks than slots take one dispatch per window, each
// serving the groups of its window's tokens: every token is read and written once,
// whatever the chunking.
//
// Two access patterns, the same results:
// - adjacent (COALESCED false), for adapters that run shaders on CPU cores (lavapipe,
//   llvmpipe): each invocation moves UNITS_PER_INVOCATION (4) adjacent units per token, so
//   a token's record is loaded once per four units (their cost is per buffer access, and
//   adjacent units share cache lines), and the first invocations prefetch the rows of the
//   group two ahead.
// - coalesced (COALESCED true), for GPUs: invocation li moves units li + k * X4_WORKGROUP
//   of the block for k < UNITS_PER_INVOCATION, so each load and store instruction of a
//   warp touches one contiguous span; each token's loads are issued before the previous
//   token's stores, in registers.

struct Params {
    // Groups in this dispatch, from group_base.
    n_groups: u32,
    group_base: u32,
    // Units per row: dim / 4.
    row_units: u32,
    // f32 bits of the scale; 1.0 without one (e * 1.0 is e).
    scale_bits: u32,
    // Workgroups along y; the grid folds groups beyond it into z.
    groups_y: u32,
    // Index in `tokens` of the record of group 0.
    groups_at: u32,
    // Always 0 (see the end of the kernel).
    keep: u32,
    // Always 0: the opaque zero of rounded.wgsl.
    zero: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// tokens[j] for j < groups_at: sorted token j as (row in its table chunk | slot <<
// SLOT_SHIFT, or PAD; output row). tokens[groups_at + g]: group g as (its first sorted
// token, its PE row); the record after the last group holds (number of tokens, 0), so
// group g's tokens end where g + 1's begin. One buffer for both keeps the kernel within the
// 4 storage buffers per stage of WebGPU's downlevel limits (with one table slot).
@group(0) @binding(1) var<storage, read> tokens: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> pe: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> out: array<OutWord>;
// Bindings 4.. are the table slots, declared by the host's header.

#import convert4
#import rounded

fn value(t: vec2<u32>, x: u32, p: vec4<f32>, s: f32) -> OutWord {
    // A pad token reads row 0 of slot 0 in its place and writes zeros.
    let zero = t.x == PAD;
    let id = select(t.x, 0u, zero);
    let w = table_word(id >> SLOT_SHIFT, (id & ROW_MASK) * params.row_units + x);
    return narrow(select(rounded4(widen(w) * s, params.zero) + p, vec4<f32>(0.0), zero));
}

@compute @workgroup_size(X4_WORKGROUP)
fn encode_x4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let local = wg.z * params.groups_y + wg.y;
    let n = params.row_units;
    let block = wg.x * UNITS_PER_INVOCATION * X4_WORKGROUP;
    var x0: u32;
    var x1: u32;
    if COALESCED {
        x0 = block + li;
        x1 = x0 + X4_WORKGROUP;
    } else {
        x0 = block + UNITS_PER_INVOCATION * li;
        x1 = x0 + 1u;
    }
    if local >= params.n_groups || x0 >= n {
        return;
    }
    // Past the row's end the invocation moves its last unit again (the same value to the
    // same place), which costs less than a branch around the others.
    x1 = select(x1, x0, x1 >= n);
    let group = params.group_base + local;
    let head = tokens[params.groups_at + group];
    let end = tokens[params.groups_at + group + 1u].x;
    let s = bitcast<f32>(params.scale_bits);
    if COALESCED {
        // Invocation li moves units li + k * X4_WORKGROUP of the block; past the row's end,
        // its first unit again (the same value to the same place, by the same invocation).
        var xs: array<u32, UNITS_PER_INVOCATION>;
        var ps: array<vec4<f32>, UNITS_PER_INVOCATION>;
        for (var k = 0u; k < UNITS_PER_INVOCATION; k++) {
            let x = x0 + k * X4_WORKGROUP;
            xs[k] = select(x, x0, x >= n);
            ps[k] = pe[head.y * n + xs[k]];
        }
        // One token ahead: the next token's loads are issued before this one's stores
        // (the compiler may not move loads past stores to `out`), in registers: the loops
        // have constant bounds, so a driver unrolls them and keeps the arrays in registers.
        var t = tokens[head.x];
        var v: array<OutWord, UNITS_PER_INVOCATION>;
        for (var k = 0u; k < UNITS_PER_INVOCATION; k++) {
            v[k] = value(t, xs[k], ps[k], s);
        }
        for (var j = head.x + 1u; j < end; j++) {
            let u = tokens[j];
            var w: array<OutWord, UNITS_PER_INVOCATION>;
            for (var k = 0u; k < UNITS_PER_INVOCATION; k++) {
                w[k] = value(u, xs[k], ps[k], s);
            }
            for (var k = 0u; k < UNITS_PER_INVOCATION; k++) {
                out[t.y * n + xs[k]] = v[k];
            }
            t = u;
            v = w;
        }
        for (var k = 0u; k < UNITS_PER_INVOCATION; k++) {
            out[t.y * n + xs[k]] = v[k];
        }
        return;
    }
    let p0 = pe[head.y * n + x0];
    let p1 = pe[head.y * n + x1];
    // Software prefetch: the first eight invocations each read the first four 64-byte
    // lines of this block in the table row of one token of the group two ahead, so its page
    // walk and first misses overlap this group's work instead of stalling the next one. On
    // a software adapter, whose code keeps few loads in flight, this saved 12 % of the
    // default encode.
    var touch = 0u;
    let ahead = group + 2u;
    if li < MAX_GROUP_TOKENS && ahead < params.group_base + params.n_groups {
        let k = tokens[params.groups_at + ahead].x + li;
        if k < tokens[params.groups_at + ahead + 1u].x && tokens[k].x != PAD {
            let id = tokens[k].x;
            let row = (id & ROW_MASK) * n + block;
            let last = n - 1u - block;
            for (var c = 0u; c < 4u * UNITS_PER_LINE; c += UNITS_PER_LINE) {
                touch += table_word(id >> SLOT_SHIFT, row + min(c, last)).x;
            }
        }
    }
    if UNITS_PER_INVOCATION == 4u {
        let x2 = min(x0 + 2u, n - 1u);
        let x3 = min(x0 + 3u, n - 1u);
        let p2 = pe[head.y * n + x2];
        let p3 = pe[head.y * n + x3];
        for (var j = head.x; j < end; j++) {
            let t = tokens[j];
            let dst = t.y * n;
            out[dst + x0] = value(t, x0, p0, s);
            out[dst + x1] = value(t, x1, p1, s);
            out[dst + x2] = value(t, x2, p2, s);
            out[dst + x3] = value(t, x3, p3, s);
        }
    } else {
        for (var j = head.x; j < end; j++) {
            let t = tokens[j];
            let dst = t.y * n;
            out[dst + x0] = value(t, x0, p0, s);
            out[dst + x1] = value(t, x1, p1, s);
        }
    }
    // Never taken (the host passes 0); it keeps the prefetch loads from being removed.
    if params.keep != 0u {
        out[x0] = OutWord(touch);
    }
}
