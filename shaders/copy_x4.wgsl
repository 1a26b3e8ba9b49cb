// The GPU ceiling's second form: each invocation copies four adjacent vec4s. Adapters that
// emulate a GPU on CPU cores (lavapipe, llvmpipe) run this faster than `copy`, one vec4 per
// invocation; real GPUs usually prefer `copy`. Benchmarks take the faster of the two.

struct Params {
    n_vecs: u32,
    groups_x: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> dst: array<vec4<u32>>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn copy_x4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = 4u * ((wg.y * params.groups_x + wg.x) * WORKGROUP_SIZE + li);
    for (var k = 0u; k < 4u; k++) {
        if i + k < params.n_vecs {
            dst[i + k] = src[i + k];
        }
    }
}
