// Units of four consecutive elements between their storage words and f32 values: f32 as a
// vec4 of words, f16/bf16 as two words of two halves each (the first element in the low
// half). The vec4 encode kernel picks one widen and one narrow per table and output type.
// CPU twin: the element-by-element conversions of src/convert.rs, which give the same
// bits.
#import convert

fn widen4_f32(w: vec4<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(w);
}

fn widen4_f16(w: vec2<u32>) -> vec4<f32> {
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
    return vec2<u32>(
        f32_to_f16_bits(b.x) | (f32_to_f16_bits(b.y) << 16u),
        f32_to_f16_bits(b.z) | (f32_to_f16_bits(b.w) << 16u),
    );
}

fn narrow4_bf16(v: vec4<f32>) -> vec2<u32> {
    let b = bitcast<vec4<u32>>(v);
    return vec2<u32>(
        f32_to_bf16_bits(b.x) | (f32_to_bf16_bits(b.y) << 16u),
        f32_to_bf16_bits(b.z) | (f32_to_bf16_bits(b.w) << 16u),
    );
}
