// The float32 angle f32(p + start) * w of a float32 framework, computed in integers (WGSL's
// int-to-float conversion may round either way), for the table kernel's float32
// frequencies. CPU twin: u33_to_f32_parts and f32_angle_parts in src/cpu/sincos.rs.
#import intmath

// A float32 value m * 2^e with m in [2^23, 2^24), or m = 0 for zero.
struct F32Parts {
    m: u32,
    e: i32,
}

// Rounds a 24-bit kept mantissa to nearest even; a carry into bit 24 renormalises.
fn round_mantissa(kept: u32, round_bit: u32, sticky: bool, e: i32) -> F32Parts {
    let up = round_bit & (select(0u, 1u, sticky) | (kept & 1u));
    let m = kept + up;
    if m == 0x1000000u {
        return F32Parts(0x800000u, e + 1);
    }
    return F32Parts(m, e);
}

// The 33-bit integer carry * 2^32 + r rounded to float32, without WGSL's int-to-float
// conversion (which may round either way).
fn u33_to_f32_parts(r: u32, carry: bool) -> F32Parts {
    if carry {
        return round_mantissa(0x800000u | (r >> 9u), (r >> 8u) & 1u, (r & 0xffu) != 0u, 9);
    }
    if r == 0u {
        return F32Parts(0u, 0);
    }
    let lz = countLeadingZeros(r);
    let n = r << lz;
    return round_mantissa(n >> 8u, (n >> 7u) & 1u, (n & 0x7fu) != 0u, 8 - i32(lz));
}

// The float32 product f32(p + start) * w, rounded to nearest even as IEEE multiplication
// rounds it, from integer mantissas (w_bits: a positive normal f32 or zero).
fn f32_angle_parts(r: u32, carry: bool, w_bits: u32) -> F32Parts {
    let p = u33_to_f32_parts(r, carry);
    if p.m == 0u || w_bits == 0u {
        return F32Parts(0u, 0);
    }
    let mw = (w_bits & 0x7fffffu) | 0x800000u;
    let ew = i32((w_bits >> 23u) & 0xffu) - 150;
    let hi = mul_hi(p.m, mw);
    let lo = p.m * mw;
    if hi >= 0x8000u {
        return round_mantissa((hi << 8u) | (lo >> 24u), (lo >> 23u) & 1u, (lo & 0x7fffffu) != 0u, p.e + ew + 24);
    }
    return round_mantissa((hi << 9u) | (lo >> 23u), (lo >> 22u) & 1u, (lo & 0x3fffffu) != 0u, p.e + ew + 23);
}
