// Products rounded as the CPU rounds them. WGSL lets a compiler contract a product and the
// add or subtract that takes it into one fused multiply-add, which skips the product's
// rounding, and NVIDIA's Vulkan driver does (an H100, 2026-11-27: 155 of Llama-3-8B's
// rotated elements at the bench's prefill shape, and 528 of Phi-2's, differed from the
// CPU's by that rounding). WGSL has no way to forbid it (SPIR-V's NoContraction, HLSL's and
// MSL's `precise`). So a product that an add takes passes through `rounded`: an integer OR
// with `z`, a zero the compiler cannot know (a parameter field the host always writes as 0),
// makes the add's operand the result of an integer operation rather than of a multiply, and
// no compiler fuses across it. The add then takes the rounded product, as the CPU's does,
// and every backend gives the CPU's bits. It costs one integer operation per component.
fn rounded(v: f32, z: u32) -> f32 {
    return bitcast<f32>(bitcast<u32>(v) | z);
}

fn rounded4(v: vec4<f32>, z: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(bitcast<vec4<u32>>(v) | vec4<u32>(z));
}
