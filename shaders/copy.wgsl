// The GPU ceiling for benchmarks: a plain vec4 copy over the same bytes an operation
// moves, on the same adapter, one vec4 per invocation (see copy_x4.wgsl for the other form).

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
