// Units of four consecutive elements between their storage words and f32 values: f32 as a
// vec4 of words, f16/bf16 as two words of two halves each (the first element in the low
// half). The vec4 encode kernel picks one widen and one narrow per table and output type.
// CPU twin: the element-by-element conversions of src/convert.rs, which give the same
// bits. The f16 forms take a short path when all four values (or results) are normal
// f16, the case of nearly every weight and activation, and bf16's narrowing one when none
// of the four is a NaN, so that a warp skips the general form none of its lanes needs (a
// software adapter's batch of lanes runs both: widen4_f16_general, below, is the f16
// widening without its short path, for kernels built for such adapters).
#import convert

fn widen4_f32(w: vec4<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(w);
}

fn widen4_f16(w: vec2<u32>) -> vec4<f32> {
    let h = vec4<u32>(w.x & 0xffffu, w.x >> 16u, w.y & 0xffffu, w.y >> 16u);
    let em = h & vec4<u32>(0x7fffu);
    // All four normal, as nearly every weight and activation is: the exponent rebased.
    // (GPU forms on an adapter with WGSL's unpack2x16float, wgpu's SHADER_F16_IN_F32,
    // widen by it instead: src/shaders.rs, F16_UNPACK. This form is theirs elsewhere.)
    if all((em >= vec4<u32>(0x400u)) & (em < vec4<u32>(0x7c00u))) {
        let sign = (h & vec4<u32>(0x8000u)) << vec4<u32>(16u);
        return bitcast<vec4<f32>>(((em << vec4<u32>(13u)) + vec4<u32>(0x38000000u)) | sign);
    }
    return bitcast<vec4<f32>>(vec4<u32>(
        f16_to_f32_bits(h.x),
        f16_to_f32_bits(h.y),
        f16_to_f32_bits(h.z),
        f16_to_f32_bits(h.w),
    ));
}

// widen4_f16 without its short path: the general form alone, for kernels built for an
// adapter that runs shaders on CPU cores (lavapipe, llvmpipe, SwiftShader, WARP: the
// adjacent access pattern's adapters; the host picks it). Such an adapter runs a batch of
// lanes through both sides of every branch that depends on their values, under a mask, so
// the short path is paid beside the general form, not instead of it, and its test and the
// selection of the two results cost more than the few integer operations by which the
// general form is longer (lavapipe, 2026-12-04: Phi-2's prefill RoPE 3.13 - 3.20 -> 2.81 -
// 2.85 ms a step; docs/measurements/lavapipe-2026-12-04-f16-widen). The
// narrowings keep their short paths there too: their general forms are long enough that
// the short path beside them still pays.
fn widen4_f16_general(w: vec2<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(
        f16_to_f32_bits(w.x & 0xffffu),
        f16_to_f32_bits(w.x >> 16u),
        f16_to_f32_bits(w.y & 0xffffu),
        f16_to_f32_bits(w.y >> 16u),
    ));
}

// bf16_to_f32_bits of each half: the low half shifted up, the high half masked in place.
fn widen4_bf16(w: vec2<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(w.x << 16u, w.x & 0xffff0000u, w.y << 16u, w.y & 0xffff0000u));
}

fn narrow4_f32(v: vec4<f32>) -> vec4<u32> {
    return bitcast<vec4<u32>>(v);
}

fn narrow4_f16(v: vec4<f32>) -> vec2<u32> {
    let b = bitcast<vec4<u32>>(v);
    let a = b & vec4<u32>(0x7fffffffu);
    // All four results normal (2^-14 <= |v| < 65520): one rounding each, as
    // f32_to_f16_bits's normal case. (Float comparisons of |v| with the same bounds, as
    // bf16's NaN test below, took Phi-2's f16 RoPE from 8.14 to 8.34 us a step on an H200,
    // 2026-12-04, and left the f16 decode step as it was: the integer test stays.)
    if all((a >= vec4<u32>(0x38800000u)) & (a < vec4<u32>(0x477ff000u))) {
        let rebased = a - vec4<u32>(0x38000000u);
        let lsb = (rebased >> vec4<u32>(13u)) & vec4<u32>(1u);
        let sign = (b >> vec4<u32>(16u)) & vec4<u32>(0x8000u);
        let h = ((rebased + vec4<u32>(0xfffu) + lsb) >> vec4<u32>(13u)) | sign;
        return vec2<u32>(h.x | (h.y << 16u), h.z | (h.w << 16u));
    }
    return vec2<u32>(
        f32_to_f16_bits(b.x) | (f32_to_f16_bits(b.y) << 16u),
        f32_to_f16_bits(b.z) | (f32_to_f16_bits(b.w) << 16u),
    );
}

// f32_to_bf16_bits of four values none of which is a NaN: the rounding alone, which is
// what f32_to_bf16_bits gives anything but a NaN (infinities included).
fn round4_bf16(b: vec4<u32>) -> vec2<u32> {
    let r = (b + vec4<u32>(0x7fffu) + ((b >> vec4<u32>(16u)) & vec4<u32>(1u))) >> vec4<u32>(16u);
    return vec2<u32>(r.x | (r.y << 16u), r.z | (r.w << 16u));
}

fn narrow4_bf16(v: vec4<f32>) -> vec2<u32> {
    let b = bitcast<vec4<u32>>(v);
    // No NaN among the four, as in nearly every unit: the NaN test and select per element
    // are more than half of the general form's instructions. Each value compared with
    // itself, which only a NaN fails: float comparisons, where an integer test (the bits
    // without the sign, their maximum, a compare) cost Llama-3-8B's prefill RoPE 1 us of
    // 12 on an H200 (2026-12-04: 11.96 against 10.91 us a step), a GPU issuing half as
    // many integer operations as float ones. WGSL lets a compiler that assumes no NaNs
    // fold the test to true (docs/guarantees.md says what a NaN input then gives).
    if all(v == v) {
        return round4_bf16(b);
    }
    return vec2<u32>(
        f32_to_bf16_bits(b.x) | (f32_to_bf16_bits(b.y) << 16u),
        f32_to_bf16_bits(b.z) | (f32_to_bf16_bits(b.w) << 16u),
    );
}
