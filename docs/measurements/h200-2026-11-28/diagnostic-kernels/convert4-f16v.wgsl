// Units of four consecutive elements between their storage words and f32 values: f32 as a
// vec4 of words, f16/bf16 as two words of two halves each (the first element in the low
// half). The vec4 encode kernel picks one widen and one narrow per table and output type.
// CPU twin: the element-by-element conversions of src/convert.rs, which give the same
// bits. The f16 forms take a short path when all four values (or results) are normal
// f16, the case of nearly every weight and activation, so that a warp (or a software
// adapter's batch of lanes) skips the general form none of its lanes needs.
#import convert

fn widen4_f32(w: vec4<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(w);
}

fn widen4_f16(w: vec2<u32>) -> vec4<f32> {
    let h = vec4<u32>(w.x & 0xffffu, w.x >> 16u, w.y & 0xffffu, w.y >> 16u);
    // f16_to_f32_bits on each lane of the vector, the same operations.
    let em = h & vec4<u32>(0x7fffu);
    let big = em >= vec4<u32>(0x7c00u);
    let normal = (em << vec4<u32>(13u)) + select(vec4<u32>(0x38000000u), vec4<u32>(0x70000000u), big);
    let shifted = bitcast<vec4<f32>>(normal + vec4<u32>(0x800000u));
    let sub = bitcast<vec4<u32>>(shifted - vec4<f32>(6.103515625e-5)) & vec4<u32>(0x7fffffffu);
    let sign = (h & vec4<u32>(0x8000u)) << vec4<u32>(16u);
    return bitcast<vec4<f32>>(sign | select(normal, sub, em < vec4<u32>(0x400u)));
}

// bf16_to_f32_bits of each half: the low half shifted up, the high half masked in place.
fn widen4_bf16(w: vec2<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(w.x << 16u, w.x & 0xffff0000u, w.y << 16u, w.y & 0xffff0000u));
}

fn narrow4_f32(v: vec4<f32>) -> vec4<u32> {
    return bitcast<vec4<u32>>(v);
}

fn narrow4_f16(v: vec4<f32>) -> vec2<u32> {
    // f32_to_f16_bits on each lane of the vector, the same operations.
    let x = bitcast<vec4<u32>>(v);
    let a = x & vec4<u32>(0x7fffffffu);
    let rebased = a - vec4<u32>(0x38000000u);
    let lsb = (rebased >> vec4<u32>(13u)) & vec4<u32>(1u);
    let normal = (rebased + vec4<u32>(0xfffu) + lsb) >> vec4<u32>(13u);
    let small = bitcast<vec4<f32>>(min(a, vec4<u32>(0x38800000u)));
    let sub = vec4<u32>(round(small * 16777216.0));
    var r = select(sub, normal, a >= vec4<u32>(0x38800000u));
    r = select(r, vec4<u32>(0x7c00u), a >= vec4<u32>(0x477ff000u));
    let nan = vec4<u32>(0x7e00u) | ((a >> vec4<u32>(13u)) & vec4<u32>(0x3ffu));
    r = select(r, nan, a > vec4<u32>(0x7f800000u));
    let h = ((x >> vec4<u32>(16u)) & vec4<u32>(0x8000u)) | r;
    return vec2<u32>(h.x | (h.y << 16u), h.z | (h.w << 16u));
}

fn narrow4_bf16(v: vec4<f32>) -> vec2<u32> {
    let b = bitcast<vec4<u32>>(v);
    return vec2<u32>(
        f32_to_bf16_bits(b.x) | (f32_to_bf16_bits(b.y) << 16u),
        f32_to_bf16_bits(b.z) | (f32_to_bf16_bits(b.w) << 16u),
    );
}
