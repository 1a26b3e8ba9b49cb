// Products rounded as the CPU rounds them. WGSL lets a compiler contract a product and the
// add or subtract that takes it into one fused multiply-add, which skips the product's
// rounding, and NVIDIA's Vulkan driver does (an H100, 2026-11-27: 155 of Llama-3-8B's
// rotated elements at the bench's prefill shape, and 528 of Phi-2's, differed from the
// CPU's by that rounding). WGSL has no way to forbid it (SPIR-V's NoContraction, HLSL's and
// MSL's `precise`). So a product that an add takes passes through `rounded`, which
// multiplies it by a one the compiler cannot know: the bits of 1.0 ORed with `z`, a zero
// that is a parameter field the host always writes as 0. The add's operand is then that
// second multiply's result, whose own operand is the rounded product; a compiler may
// contract the second multiply and the add, but fma(p, 1, q) rounds p + q once, exactly
// the CPU's sum of the rounded product p and q. Every backend gives the CPU's bits (the
// GPU tests hold each to them), as long as no compiler reassociates (x * c) * 1 into
// x * (c * 1), which IEEE float semantics forbid and which naga's SPIR-V, MSL, HLSL and GLSL
// never license (no fast-math flags).
//
// Until 2026-12-04 the barrier was an integer OR of the product's bits with `z`: the same
// bits, but an integer operation, and a GPU issues half as many of those as float ones
// per clock (NVIDIA's Hopper: 64 against 128 per core). On an H200 the multiply took
// Llama-3-8B's prefill RoPE from 12.40 to 11.93 us a step and Phi-2's from 9.24 to 9.01
// (docs/performance.md).
fn rounded(v: f32, z: u32) -> f32 {
    return v * bitcast<f32>(z | 0x3f800000u);
}

fn rounded4(v: vec4<f32>, z: u32) -> vec4<f32> {
    return v * vec4<f32>(bitcast<f32>(z | 0x3f800000u));
}
