// The recorded RoPE step: q and k of one batch rotated in place in one dispatch, in one of
// three forms; the host picks one (src/gpu/rope/pass.rs) and all give the same bits.
//
// `rope_pass`, for GPUs: a token's units (rope_unit.wgsl: q's heads, then k's) are cut into
// blocks of RP_UNITS * RP_WORKGROUP, one workgroup per (block, token), RP_UNITS units per
// invocation. Each invocation first loads its units' words; the workgroup then computes its
// token's cos/sin with the exact phase (rope_cs.wgsl's arithmetic, so the same bits) into
// workgroup memory, four frequencies per invocation, once for all the heads of its block, while
// those loads are in flight; then each invocation rotates its units and writes them back,
// reading each four frequencies' cos (and sin) as one vec4 of workgroup memory. (One
// workgroup per token walking all its units measured 17 us per Llama-2-13B decode step on
// an H100, 2026-11-26: eight workgroups of serial units.)
// A warp's units are consecutive units of consecutive head rows, so each load and store
// instruction touches whole spans of rows in both layouts ([B, L, H, Dh]: a token's rows are
// adjacent; [B, H, L, Dh]: they are L rows apart, each row still contiguous).
//
// `rope_pass_heads`, in two variants. With RP_HEAD_GROUP = 0, for adapters that run shaders
// on CPU cores (lavapipe, llvmpipe, SwiftShader, WARP): invocation g takes unit x = g %
// RP_ROW_UNITS of token g / RP_ROW_UNITS, reads (or computes) that unit's cos/sin once,
// and rotates unit x of every head row of the token, q's heads then k's. No workgroup
// memory and no barrier, which such adapters run as coroutines, and no division per unit;
// the consecutive invocations of one SIMD batch touch consecutive words of each row. On
// lavapipe (2026-11-26) this took Llama-3-8B's prefill RoPE from 20 ms to the figure in
// docs/performance.md; on a GPU it leaves too few threads. With RP_HEAD_GROUP = G > 0 (a
// GPU form, chosen by POSENC_GPU_ROPE_HEADS): the heads of q and k (q's first) are cut
// into groups of G, and invocation g takes unit x of group g / RP_ROW_UNITS % head_groups
// of token g / RP_ROW_UNITS / head_groups. It loads its G units, reads its unit's cos/sin
// (from the cache, else computed), keeps them in registers for the G rows, and writes the
// units back: no workgroup memory, no barrier, and the addressing of one unit paid once
// per G. Eight consecutive invocations cover a whole head row of 128 16-bit elements.
//
// Units are disjoint, so in place is race-free; pass-through dimensions are never touched.
//
// The host specialises the kernel (src/shaders.rs, `RopePassKernel`): ROPE_DTYPE,
// ROPE_F32, ROPE_NEOX, ROPE_UNIT_FREQS, RP_WORKGROUP, RP_UNITS, RP_ROW_UNITS (units per
// head row, so a unit's head is found by a constant divisor), RP_HEAD_GROUP,
// RP_GROUP_SLOTS (at least 1: the group's array length), RP_FREQ_VECS (the vec4s of
// cos, and of sin, a workgroup holds: at least n_freqs / 4) and RP_AXES (a multimodal step:
// three positions per token, each frequency turning by its axis's; cos_sin4_at). Every
// form reads the cos/sin of positions below cached_rows from the cache the host built when
// it prepared the pass (until 2026-12-04 the form for CPU adapters had none and computed
// every one: the cache took 6 - 13 % off lavapipe's prefill RoPE). Host:
// src/gpu/rope/pass.rs (RopePassParams mirrors Params).
#import rope_unit
#import sincos
#import mrope_axis

struct Params {
    n_tokens: u32,
    // Tokens per sequence: token t is (t / seq_len, t % seq_len).
    seq_len: u32,
    n_freqs: u32,
    // FLAG_SCALE: multiply cos and sin by the f32 in scale_bits; FLAG_OFFSETS: positions[b]
    // is sequence b's first position, and its token l is at that position plus l (wrapping).
    flags: u32,
    scale_bits: u32,
    // The index of the first position in `positions`.
    pos_base: u32,
    // Workgroups along y: tokens (rope_pass) or workgroups (rope_pass_heads) beyond fold
    // into z.
    groups_y: u32,
    // Units per head row: RP_ROW_UNITS, which the kernels use.
    units_per_row: u32,
    // The neox partner offset (r/2 elements) in vec4s.
    half_vecs: u32,
    q_heads: u32,
    k_heads: u32,
    // Each tensor's first vec4 in its binding, and its strides in vec4s between sequences,
    // tokens of a sequence, and heads.
    q_base: u32,
    q_seq: u32,
    q_tok: u32,
    q_head: u32,
    k_base: u32,
    k_seq: u32,
    k_tok: u32,
    k_head: u32,
    // Blocks of RP_UNITS * RP_WORKGROUP units per token: workgroups along x.
    blocks: u32,
    // Always 0: the opaque zero of rounded.wgsl.
    zero: u32,
    // Positions below cached_rows read their cos/sin from the cache that follows the steps
    // in `steps`: pair f of position p at vec2 cache_base + p * n_freqs + f (cache_base
    // even), as rope_cs.wgsl wrote it when the pass was prepared (the same arithmetic, so
    // the same bits).
    cached_rows: u32,
    cache_base: u32,
    // Groups of RP_HEAD_GROUP heads per token (rope_pass_heads with RP_HEAD_GROUP > 0).
    head_groups: u32,
    // A multimodal step (RP_AXES): token t's positions are three, time, height and width,
    // at positions[pos_base + axis * axis_stride + t] (axis-major, as transformers' position
    // ids [3, B, L]), and frequency f turns by the one of axis mrope_axis(f, flags, the
    // mrope_section counts).
    section_t: u32,
    section_h: u32,
    section_w: u32,
    axis_stride: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> positions: array<u32>;
// The frequencies' turn steps (see sincos.wgsl's phase_turns; frequency f's at vec2 f),
// then the cos/sin cache (pair f of position p at vec2 cache_base + p * n_freqs + f), two
// vec2s to a vec4.
@group(0) @binding(2) var<storage, read> steps: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> q: array<vec4<u32>>;
// k's own binding; when a step rotates q alone it is bound to q too and never touched.
@group(0) @binding(4) var<storage, read_write> k: array<vec4<u32>>;

// A token's cos and sin, frequency f at component f % 4 of vec4 f / 4: a unit's four
// frequencies (f a multiple of 4) are one 16-byte load each.
var<workgroup> cos_w: array<vec4<f32>, RP_FREQ_VECS>;
var<workgroup> sin_w: array<vec4<f32>, RP_FREQ_VECS>;

@compute @workgroup_size(RP_WORKGROUP)
fn rope_pass(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let t = wg.z * params.groups_y + wg.y;
    if t >= params.n_tokens {
        return;
    }
    let bl = sequence_and_index(t);
    let b = bl.x;
    let l = bl.y;
    let p = token_positions(t, b, l);
    // Each invocation's words are loaded before the token's cos/sin are computed, so the
    // memory's latency overlaps that arithmetic (a decode step waits for both in turn
    // otherwise); the loops have constant bounds, so the words stay in registers.
    let units = (params.q_heads + params.k_heads) * RP_ROW_UNITS;
    var at: array<UnitAt, RP_UNITS>;
    var words: array<RopeUnit, RP_UNITS>;
    for (var k = 0u; k < RP_UNITS; k++) {
        let u = (wg.x * RP_UNITS + k) * RP_WORKGROUP + li;
        if u < units {
            at[k] = unit_at(u, b, l);
            words[k] = load_unit(at[k]);
        }
    }
    // Each invocation writes whole vec4s: WGSL counts a write to one component as an
    // access to the whole vector, so invocations writing components of one vec4 would race.
    for (var v = li; v < (params.n_freqs >> 2u); v += RP_WORKGROUP) {
        let cs = cos_sin4_at(p, v << 2u);
        cos_w[v] = cs[0];
        sin_w[v] = cs[1];
    }
    workgroupBarrier();
    for (var k = 0u; k < RP_UNITS; k++) {
        let u = (wg.x * RP_UNITS + k) * RP_WORKGROUP + li;
        if u >= units {
            break;
        }
        let v = at[k].freq >> 2u;
        let c0 = cos_w[v];
        let s0 = sin_w[v];
        var c1 = c0;
        var s1 = s0;
        if ROPE_UNIT_FREQS == 8u {
            c1 = cos_w[v + 1u];
            s1 = sin_w[v + 1u];
        }
        let w = words[k];
        store_unit(at[k], rope_unit(w.a, w.b, c0, s0, c1, s1, params.zero));
    }
}

// Token t's sequence b and index l in it, (t / seq_len, t % seq_len), without a division
// by a parameter (about twenty instructions on a GPU) in the usual cases: one sequence (a
// prefill of batch 1, every t below seq_len) and one token per sequence (a decode step).
fn sequence_and_index(t: u32) -> vec2<u32> {
    if t < params.seq_len {
        return vec2<u32>(0u, t);
    }
    if params.seq_len == 1u {
        return vec2<u32>(t, 0u);
    }
    let b = t / params.seq_len;
    return vec2<u32>(b, t - b * params.seq_len);
}

// The positions of token t, sequence b's token l: its time, height and width in a
// multimodal step (RP_AXES), else its one position three times.
fn token_positions(t: u32, b: u32, l: u32) -> vec3<u32> {
    if RP_AXES {
        let at = params.pos_base + t;
        let s = params.axis_stride;
        return vec3<u32>(positions[at], positions[at + s], positions[at + 2u * s]);
    }
    if (params.flags & FLAG_OFFSETS) != 0u {
        return vec3<u32>(positions[params.pos_base + b] + l);
    }
    return vec3<u32>(positions[params.pos_base + t]);
}

// Where a unit lives: its first word `ia` in k (`in_k`) or q, and its first frequency.
// Its partner word follows `half_vecs` on (neox) or next to it (gptj f32).
struct UnitAt {
    in_k: bool,
    ia: u32,
    freq: u32,
}

// Unit u of token (b, l): q's units first, then k's.
fn unit_at(u: u32, b: u32, l: u32) -> UnitAt {
    let q_units = params.q_heads * RP_ROW_UNITS;
    let in_k = u >= q_units;
    let w = select(u, u - q_units, in_k);
    let h = w / RP_ROW_UNITS;
    let x = w - h * RP_ROW_UNITS;
    var ia: u32;
    if in_k {
        ia = params.k_base + b * params.k_seq + l * params.k_tok + h * params.k_head;
    } else {
        ia = params.q_base + b * params.q_seq + l * params.q_tok + h * params.q_head;
    }
    return UnitAt(in_k, ia + rope_unit_word(x), x * ROPE_UNIT_FREQS);
}

// Whether a unit has a partner word (neox, or gptj f32).
const TWO_WORDS: bool = ROPE_NEOX || ROPE_F32;

fn partner(ia: u32) -> u32 {
    if ROPE_NEOX {
        return ia + params.half_vecs;
    }
    return ia + 1u;
}

// The words of a unit (b is a copy of a when it has no partner).
fn load_unit(at: UnitAt) -> RopeUnit {
    var r: RopeUnit;
    let ib = partner(at.ia);
    if at.in_k {
        r.a = k[at.ia];
        r.b = r.a;
        if TWO_WORDS {
            r.b = k[ib];
        }
    } else {
        r.a = q[at.ia];
        r.b = r.a;
        if TWO_WORDS {
            r.b = q[ib];
        }
    }
    return r;
}

// Writes a unit's rotated words back in place.
fn store_unit(at: UnitAt, r: RopeUnit) {
    let ib = partner(at.ia);
    if at.in_k {
        k[at.ia] = r.a;
        if TWO_WORDS {
            k[ib] = r.b;
        }
    } else {
        q[at.ia] = r.a;
        if TWO_WORDS {
            q[ib] = r.b;
        }
    }
}

// Rotates in place the unit whose first word is word `ia` of k (`in_k`) or of q.
fn rotate_at(in_k: bool, ia: u32, c0: vec4<f32>, s0: vec4<f32>, c1: vec4<f32>, s1: vec4<f32>) {
    let at = UnitAt(in_k, ia, 0u);
    let w = load_unit(at);
    store_unit(at, rope_unit(w.a, w.b, c0, s0, c1, s1, params.zero));
}

// The cos and sin of a unit's frequencies f..f+3 (c0, s0) and f+4..f+7 (c1, s1; a copy of
// the first four for units of four frequencies), as cos_sin4 gives them.
struct UnitCosSin {
    c0: vec4<f32>,
    s0: vec4<f32>,
    c1: vec4<f32>,
    s1: vec4<f32>,
}

fn unit_cos_sin(p: vec3<u32>, f: u32) -> UnitCosSin {
    let a = cos_sin4_at(p, f);
    var r = UnitCosSin(a[0], a[1], a[0], a[1]);
    if ROPE_UNIT_FREQS == 8u {
        let b = cos_sin4_at(p, f + 4u);
        r.c1 = b[0];
        r.s1 = b[1];
    }
    return r;
}

// The cos (first) and sin of frequencies f..f+3 at position p, as rope_cs.wgsl computes
// them (the same bits): read from the cache for a position it holds, computed otherwise,
// with the cache's branch taken once for the four (p is the same across a workgroup of
// rope_pass, so the branch is uniform there).
fn cos_sin4(p: u32, f: u32) -> array<vec4<f32>, 2> {
    if p < params.cached_rows {
        return packed4(cached_row4(p, f));
    }
    return packed4(computed4(vec4<u32>(p), f));
}

// The cached (cos, sin) of frequencies f..f+3 at position p (below cached_rows).
// f is a multiple of 4 and cache_base even, so the four pairs are two whole vec4s of
// `steps`: two 16-byte loads (a compiler may not merge four 8-byte ones on its own where
// out-of-bounds reads must stay safe).
fn cached_row4(p: u32, f: u32) -> array<vec2<f32>, 4> {
    let at = (params.cache_base + p * params.n_freqs + f) >> 1u;
    let w0 = bitcast<vec4<f32>>(steps[at]);
    let w1 = bitcast<vec4<f32>>(steps[at + 1u]);
    return array<vec2<f32>, 4>(w0.xy, w0.zw, w1.xy, w1.zw);
}

// The (cos, sin) of frequency f + i at position q[i], computed with the exact phase, for i
// in 0..4. A loop, not four calls: the exact phase is long, and one copy of it is enough.
fn computed4(q: vec4<u32>, f: u32) -> array<vec2<f32>, 4> {
    let scaled = (params.flags & FLAG_SCALE) != 0u;
    let s0 = steps[f >> 1u];
    let s1 = steps[(f >> 1u) + 1u];
    let s = array<vec2<u32>, 4>(s0.xy, s0.zw, s1.xy, s1.zw);
    var e: array<vec2<f32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        e[i] = rope_cos_sin(q[i], s[i], scaled, params.scale_bits);
    }
    return e;
}

// Four (cos, sin) pairs as a vec4 of cos and one of sin.
fn packed4(e: array<vec2<f32>, 4>) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(
        vec4<f32>(e[0].x, e[1].x, e[2].x, e[3].x),
        vec4<f32>(e[0].y, e[1].y, e[2].y, e[3].y),
    );
}

// The cos (first) and sin of frequencies f..f+3 for a token at positions p
// (token_positions): cos_sin4 at its one position, or in a multimodal step (RP_AXES) each
// frequency at its axis's position, with cos_sin4's arithmetic (the same bits: the cache's
// rows are rope_cs.wgsl's, whose multimodal form takes the same position per frequency)
// and one copy of the exact phase, as there. Where the four are cached and share one
// position (a text token, whose axes agree; four frequencies of one axis, as every unit of
// Qwen2-VL's and Qwen2.5-VL's sections), cos_sin4's two 16-byte loads; where they are
// cached at other positions (axes that cycle, as Qwen3-VL's), four 8-byte loads issued
// together.
fn cos_sin4_at(p: vec3<u32>, f: u32) -> array<vec4<f32>, 2> {
    if !RP_AXES {
        return cos_sin4(p.x, f);
    }
    let section = vec3<u32>(params.section_t, params.section_h, params.section_w);
    let q = vec4<u32>(
        p[mrope_axis(f, params.flags, section)],
        p[mrope_axis(f + 1u, params.flags, section)],
        p[mrope_axis(f + 2u, params.flags, section)],
        p[mrope_axis(f + 3u, params.flags, section)],
    );
    if !all(q < vec4<u32>(params.cached_rows)) {
        return packed4(computed4(q, f));
    }
    if all(q == vec4<u32>(q.x)) {
        return packed4(cached_row4(q.x, f));
    }
    // Pair f + i of row q[i], at cache_base + q[i] * n_freqs + f + i: cache_base, f and
    // n_freqs (a multiple of 8 on this route) are even, so pair f + i is the first half of
    // its vec4 for even i and the second for odd i.
    let at = (vec4<u32>(params.cache_base + f) + q * params.n_freqs) >> vec4<u32>(1u);
    return packed4(array<vec2<f32>, 4>(
        bitcast<vec2<f32>>(steps[at.x].xy),
        bitcast<vec2<f32>>(steps[at.y].zw),
        bitcast<vec2<f32>>(steps[at.z + 1u].xy),
        bitcast<vec2<f32>>(steps[at.w + 1u].zw),
    ));
}

// Where head h of token (b, l) has its unit of first word `word`: q's heads, then k's.
fn head_at(h: u32, b: u32, l: u32, word: u32) -> UnitAt {
    let in_k = h >= params.q_heads;
    var ia: u32;
    if in_k {
        let hk = h - params.q_heads;
        ia = params.k_base + b * params.k_seq + l * params.k_tok + hk * params.k_head;
    } else {
        ia = params.q_base + b * params.q_seq + l * params.q_tok + h * params.q_head;
    }
    return UnitAt(in_k, ia + word, 0u);
}

@compute @workgroup_size(RP_WORKGROUP)
fn rope_pass_heads(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = (wg.z * params.groups_y + wg.y) * RP_WORKGROUP + li;
    let r = g / RP_ROW_UNITS;
    let x = g - r * RP_ROW_UNITS;
    var t = r;
    var first = 0u;
    if RP_HEAD_GROUP != 0u {
        t = r / params.head_groups;
        first = (r - t * params.head_groups) * RP_HEAD_GROUP;
    }
    if t >= params.n_tokens {
        return;
    }
    let bl = sequence_and_index(t);
    let b = bl.x;
    let l = bl.y;
    let p = token_positions(t, b, l);
    let f = x * ROPE_UNIT_FREQS;
    let word = rope_unit_word(x);
    if RP_HEAD_GROUP != 0u {
        // The group's words are loaded before the cos/sin are read, so their latencies
        // overlap; the loops have constant bounds, so the words stay in registers.
        let heads = params.q_heads + params.k_heads;
        var at: array<UnitAt, RP_GROUP_SLOTS>;
        var words: array<RopeUnit, RP_GROUP_SLOTS>;
        for (var j = 0u; j < RP_HEAD_GROUP; j++) {
            if first + j < heads {
                at[j] = head_at(first + j, b, l, word);
                words[j] = load_unit(at[j]);
            }
        }
        let cs = unit_cos_sin(p, f);
        for (var j = 0u; j < RP_HEAD_GROUP; j++) {
            if first + j >= heads {
                break;
            }
            let w = words[j];
            store_unit(at[j], rope_unit(w.a, w.b, cs.c0, cs.s0, cs.c1, cs.s1, params.zero));
        }
        return;
    }
    let cs = unit_cos_sin(p, f);
    let q_at = params.q_base + b * params.q_seq + l * params.q_tok + word;
    for (var h = 0u; h < params.q_heads; h++) {
        rotate_at(false, q_at + h * params.q_head, cs.c0, cs.s0, cs.c1, cs.s1);
    }
    let k_at = params.k_base + b * params.k_seq + l * params.k_tok + word;
    for (var h = 0u; h < params.k_heads; h++) {
        rotate_at(true, k_at + h * params.k_head, cs.c0, cs.s0, cs.c1, cs.s1);
    }
}
