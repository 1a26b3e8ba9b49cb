// Fast path of encode (see encode.wgsl): f32 table, f32 output, dim a multiple of 4, the
// whole vocabulary in one binding. Same arithmetic, same bits as the general kernel and the
// CPU twin.
//
// The host sorts the tokens by PE row and cuts them into groups of at most
// MAX_GROUP_TOKENS tokens sharing one row. A workgroup owns one group and one block of
// 2 * PAIR_WORKGROUP_SIZE columns (vec4s): it reads the PE values of its columns once and
// adds them to every token of the group, so PE rows are read once per group instead of once
// per token. Each invocation moves two adjacent vec4s per token: on adapters that emulate a
// GPU on CPU cores (lavapipe, llvmpipe) every buffer access costs a per-lane loop, and two
// adjacent vec4s per lane share the loads of the token's id and row.

// The host's FLAG_SCALE (1) is implied by scale_bits here.
const FLAG_PAD: u32 = 2u;

struct Params {
    n_groups: u32,
    // vec4s per row: dim / 4.
    row_vecs: u32,
    scale_bits: u32,
    flags: u32,
    pad_id: u32,
    // Workgroups along y; the grid folds groups beyond it into z.
    groups_y: u32,
    // Index in `tokens` of the first group record.
    groups_at: u32,
    // Always 0 (see the end of the kernel).
    keep: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// tokens[j] for j < groups_at: sorted token j as (embedding id, output row).
// tokens[groups_at + g]: group g as (its first sorted token, its PE row); the record after
// the last group holds (number of tokens, 0), so group g's tokens end where g + 1's begin.
// One buffer for both keeps the kernel within the 4 storage buffers per stage of WebGPU's
// downlevel limits.
@group(0) @binding(1) var<storage, read> tokens: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> pe: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> table: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>;

@compute @workgroup_size(PAIR_WORKGROUP_SIZE)
fn encode_f32x4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let group = wg.z * params.groups_y + wg.y;
    let n = params.row_vecs;
    let x = 2u * (wg.x * PAIR_WORKGROUP_SIZE + li);
    if group >= params.n_groups || x >= n {
        return;
    }
    // Rows may hold an odd number of vec4s: the last invocation then moves its one vec4
    // twice (the same value to the same place), which costs less than a branch.
    let x1 = min(x + 1u, n - 1u);
    let head = tokens[params.groups_at + group];
    let end = tokens[params.groups_at + group + 1u].x;
    let p0 = pe[head.y * n + x];
    let p1 = pe[head.y * n + x1];
    // Without FLAG_SCALE the host passes 1.0: e * 1.0 + p has the bits of e + p, fused or
    // not, and saves a branch per token.
    let s = bitcast<f32>(params.scale_bits);
    let pad = (params.flags & FLAG_PAD) != 0u;
    // Software prefetch: the first eight invocations each read the first four cache lines
    // of this block in the embedding row of one token of the group two ahead, so its page
    // walk and first misses overlap this group's work instead of stalling the next one.
    // Random rows make each token a fresh page; on a software adapter, whose code keeps
    // few loads in flight, this saved 12 % of the default encode.
    var touch = 0.0;
    let ahead = group + 2u;
    if li < 8u && ahead < params.n_groups {
        let k = tokens[params.groups_at + ahead].x + li;
        // A pad id may lie outside the table: nothing to fetch for it.
        if k < tokens[params.groups_at + ahead + 1u].x && !(pad && tokens[k].x == params.pad_id) {
            let block = x - 2u * li;
            let row = tokens[k].x * n + block;
            let last = n - 1u - block;
            for (var c = 0u; c < 16u; c += 4u) {
                touch += table[row + min(c, last)].x;
            }
        }
    }
    for (var j = head.x; j < end; j++) {
        let t = tokens[j];
        // A pad token's row is zero: no embedding, no position. Its id may lie outside the
        // vocabulary, so it reads row 0 in its place.
        let zero = pad && t.x == params.pad_id;
        let src = select(t.x, 0u, zero) * n;
        let dst = t.y * n;
        out[dst + x] = select(table[src + x] * s + p0, vec4<f32>(0.0), zero);
        out[dst + x1] = select(table[src + x1] * s + p1, vec4<f32>(0.0), zero);
    }
    // Never taken (the host passes 0); it keeps the prefetch loads from being removed.
    if params.keep != 0u {
        out[x] = vec4<f32>(touch);
    }
}
