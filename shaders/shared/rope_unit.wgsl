// The rotation of RoPE on one unit of a head row, shared by the recorded pass (rope_pass.wgsl)
// and the host-array vec4 kernel (rope_x4.wgsl), so both compile the same expressions. For
// frequency i rotating elements x (dimension a) and y (dimension b):
//     x' = x * c - y * s        y' = y * c + x * s
// element by element, the expressions of the CPU twin (src/cpu/rope.rs) in the same order,
// each product rounded before the sum takes it (rounded.wgsl: `z` is the kernel's opaque
// zero), so no backend contracts them and every one gives the CPU's bits.
//
// A unit is four frequencies of a head row (eight for a neox unit of 16-bit elements), as
// vec4 words of the storage type:
// - neox, f32: word a holds x of frequencies f..f+3, word b (r/2 elements on) their y;
// - neox, 16-bit: words a and b hold eight frequencies each;
// - gptj, f32: words a and b are adjacent, four (x, y) pairs in all;
// - gptj, 16-bit: word a holds four (x, y) pairs; b is not used.
// The host's header defines ROPE_DTYPE, ROPE_F32 (f32 storage; else 16-bit), ROPE_NEOX,
// ROPE_UNIT_FREQS (frequencies per unit) and rope_widen_f16 (convert4's widen4_f16 on a
// GPU, widen4_f16_general on an adapter that runs shaders on CPU cores: convert4 says why).
#import convert4
#import rounded

struct RopeUnit {
    a: vec4<u32>,
    b: vec4<u32>,
}

fn rope_widen(w: vec2<u32>) -> vec4<f32> {
    if ROPE_DTYPE == DTYPE_F16 {
        return rope_widen_f16(w);
    }
    return widen4_bf16(w);
}

fn rope_narrow(v: vec4<f32>) -> vec2<u32> {
    if ROPE_DTYPE == DTYPE_F16 {
        return narrow4_f16(v);
    }
    return narrow4_bf16(v);
}

fn rot_x(x: vec4<f32>, y: vec4<f32>, c: vec4<f32>, s: vec4<f32>, z: u32) -> vec4<f32> {
    return rounded4(x * c, z) - rounded4(y * s, z);
}

fn rot_y(x: vec4<f32>, y: vec4<f32>, c: vec4<f32>, s: vec4<f32>, z: u32) -> vec4<f32> {
    return rounded4(y * c, z) + rounded4(x * s, z);
}

// The unit (a, b) rotated: (c0, s0) are cos and sin of its first four frequencies, (c1,
// s1) of the next four (a neox unit of 16-bit elements only); z is the opaque zero.
fn rope_unit(a: vec4<u32>, b: vec4<u32>, c0: vec4<f32>, s0: vec4<f32>, c1: vec4<f32>, s1: vec4<f32>, z: u32) -> RopeUnit {
    var r: RopeUnit;
    if ROPE_NEOX {
        if ROPE_F32 {
            let x = bitcast<vec4<f32>>(a);
            let y = bitcast<vec4<f32>>(b);
            r.a = bitcast<vec4<u32>>(rot_x(x, y, c0, s0, z));
            r.b = bitcast<vec4<u32>>(rot_y(x, y, c0, s0, z));
            return r;
        }
        let x0 = rope_widen(a.xy);
        let x1 = rope_widen(a.zw);
        let y0 = rope_widen(b.xy);
        let y1 = rope_widen(b.zw);
        r.a = vec4<u32>(rope_narrow(rot_x(x0, y0, c0, s0, z)), rope_narrow(rot_x(x1, y1, c1, s1, z)));
        r.b = vec4<u32>(rope_narrow(rot_y(x0, y0, c0, s0, z)), rope_narrow(rot_y(x1, y1, c1, s1, z)));
        return r;
    }
    if ROPE_F32 {
        let e0 = bitcast<vec4<f32>>(a);
        let e1 = bitcast<vec4<f32>>(b);
        let x = vec4<f32>(e0.x, e0.z, e1.x, e1.z);
        let y = vec4<f32>(e0.y, e0.w, e1.y, e1.w);
        let rx = rot_x(x, y, c0, s0, z);
        let ry = rot_y(x, y, c0, s0, z);
        r.a = bitcast<vec4<u32>>(vec4<f32>(rx.x, ry.x, rx.y, ry.y));
        r.b = bitcast<vec4<u32>>(vec4<f32>(rx.z, ry.z, rx.w, ry.w));
        return r;
    }
    let e0 = rope_widen(a.xy);
    let e1 = rope_widen(a.zw);
    let x = vec4<f32>(e0.x, e0.z, e1.x, e1.z);
    let y = vec4<f32>(e0.y, e0.w, e1.y, e1.w);
    let rx = rot_x(x, y, c0, s0, z);
    let ry = rot_y(x, y, c0, s0, z);
    r.a = vec4<u32>(
        rope_narrow(vec4<f32>(rx.x, ry.x, rx.y, ry.y)),
        rope_narrow(vec4<f32>(rx.z, ry.z, rx.w, ry.w)),
    );
    r.b = b;
    return r;
}

// Where unit u of a head row starts, in vec4 words from the row's start (its partner word b
// follows at `half_vecs` for neox, right after it for gptj f32).
fn rope_unit_word(u: u32) -> u32 {
    if !ROPE_NEOX && ROPE_F32 {
        return 2u * u;
    }
    return u;
}
