// The GPU ceiling for benchmarks: a plain vec4 copy over the same bytes an operation
// moves, on the same adapter, in two forms. `copy` moves one vec4 per invocation, the
// natural form for a real GPU; `copy_x4` moves four adjacent vec4s per invocation, which
// adapters that emulate a GPU on CPU cores (lavapipe, llvmpipe) run faster. Benchmarks
// take the faster of the two.

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
fn copy(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = (wg.y * params.groups_x + wg.x) * WORKGROUP_SIZE + li;
    if i < params.n_vecs {
        dst[i] = src[i];
    }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn copy_x4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = 4u * ((wg.y * params.groups_x + wg.x) * WORKGROUP_SIZE + li);
    for (var k = 0u; k < 4u; k++) {
        if i + k < params.n_vecs {
            dst[i + k] = src[i + k];
        }
    }
}
