// The first dispatch of a recorded encode split in two stages (src/gpu/encode/pass.rs;
// on adapters that run shaders on CPU cores, where every branch of a kernel runs for
// every invocation, under a mask, so the exact PE computation for positions outside the
// PE cache would cost every token as much as computing its row). One workgroup lists the
// tokens whose positions lie outside the cache and writes the indirect dispatch of the
// late stage (encode_pass_x4 with STAGE 2), which computes their PE values: one workgroup per
// listed token and block of its row, none when every position is cached.
#import encode_pass_params

// [0], [1], [2]: the late stage's dispatch (x, y, z); [3]: tokens listed; [4 + k]: the
// k-th listed token (its index in this dispatch's part of the batch), in no particular order.
@group(0) @binding(1) var<storage, read_write> work: array<atomic<u32>>;
// The positions: the caller's, or (on devices of fewer than 6 storage buffers per stage)
// the pass's state buffer, which holds a copy of them.
@group(0) @binding(2) var<storage, read> positions: array<u32>;

fn position_word(i: u32) -> u32 {
    return positions[i];
}

@compute @workgroup_size(ROW_WORKGROUP_SIZE)
fn encode_pass_scan(@builtin(local_invocation_index) li: u32) {
    if li == 0u {
        atomicStore(&work[3], 0u);
    }
    storageBarrier();
    for (var t = li; t < params.n_tokens; t += ROW_WORKGROUP_SIZE) {
        if position(params.token_base + t) >= params.cached_rows {
            atomicStore(&work[4u + atomicAdd(&work[3], 1u)], t);
        }
    }
    storageBarrier();
    if li == 0u {
        // Folded as the first stage folds its tokens: y below params.groups_y.
        let n = atomicLoad(&work[3]);
        let y = min(n, params.groups_y);
        atomicStore(&work[0], params.groups_x);
        atomicStore(&work[1], y);
        atomicStore(&work[2], select(0u, (n + y - 1u) / max(y, 1u), n > 0u));
    }
}
