// The GPU ceiling for benchmarks: a plain copy of vec4s over the same bytes an operation
// moves, on the same adapter, in many forms, of which the bench keeps the fastest. The host
// specialises it (src/shaders.rs, `CopyKernel`):
// - COPY_WG threads per workgroup, each moving COPY_VECS vec4s of a block of COPY_WG *
//   COPY_VECS;
// - COPY_COALESCED: invocation li moves vec4s li, li + COPY_WG, ... of its block (each load
//   and store instruction of a warp touches one contiguous span, as GPUs want); else
//   COPY_VECS adjacent vec4s (as adapters that run shaders on CPU cores want);
// - COPY_GRID_STRIDE: a fixed grid of params.n_groups workgroups walks the blocks, rather
//   than one workgroup per block;
// - `copy_block(base, li)`, generated: every load of a whole block before any store, in
//   straight-line code, so no loop and no private array stands between the loads.
// The one-vec4 form (COPY_VECS 1, COPY_WG 256) is also the trivial dispatch of the
// dispatch floor.

struct Params {
    n_vecs: u32,
    groups_x: u32,
    // Workgroups of the grid (COPY_GRID_STRIDE).
    n_groups: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> dst: array<vec4<u32>>;

// The index of vec4 k of invocation li in the block starting at vec4 `base`.
fn at(base: u32, li: u32, k: u32) -> u32 {
    if COPY_COALESCED {
        return base + k * COPY_WG + li;
    }
    return base + li * COPY_VECS + k;
}

// A block that ends past the buffer: each vec4 guarded.
fn copy_tail(base: u32, li: u32) {
    for (var k = 0u; k < COPY_VECS; k++) {
        let i = at(base, li, k);
        if i < params.n_vecs {
            dst[i] = src[i];
        }
    }
}

@compute @workgroup_size(COPY_WG)
fn copy(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let block = COPY_WG * COPY_VECS;
    let first = wg.y * params.groups_x + wg.x;
    if !COPY_GRID_STRIDE {
        copy_block(first * block, li);
        return;
    }
    let blocks = (params.n_vecs + block - 1u) / block;
    for (var b = first; b < blocks; b += params.n_groups) {
        copy_block(b * block, li);
    }
}
