//! CPU twin of `shaders/shared/convert.wgsl` and `convert4.wgsl`: half-precision unpacking
//! and rounding in integer code, so every backend converts the same way (WGSL needs no
//! SHADER_F16 for this).

/// f16 bits to f32 bits, exactly (every f16 is an f32).
#[inline(always)]
pub fn f16_to_f32_bits(h: u32) -> u32 {
    let sign = (h & 0x8000) << 16;
    let exp = (h >> 10) & 0x1f;
    let mant = h & 0x3ff;
    if exp == 0x1f {
        // Inf and NaN keep their payload.
        return sign | 0x7f80_0000 | (mant << 13);
    }
    if exp != 0 {
        return sign | ((exp + 112) << 23) | (mant << 13);
    }
    if mant == 0 {
        return sign;
    }
    // Subnormal: mant * 2^-24 = 1.f * 2^(msb - 24), with msb the index of its top bit.
    let msb = 31 - mant.leading_zeros();
    sign | ((msb + 103) << 23) | ((mant << (23 - msb)) & 0x7f_ffff)
}

/// [`f16_to_f32_bits`] without branches, so a loop of it vectorises: every f16 gives the
/// same bits (an exhaustive test checks all 65536). A subnormal `m 2^-24` is found as
/// `(1 + m/1024) 2^-14 - 2^-14`, a float subtraction whose result is representable and
/// therefore exact.
#[inline(always)]
pub fn f16_to_f32_bits_branchless(h: u32) -> u32 {
    let sign = (h & 0x8000) << 16;
    let shifted = (h & 0x7fff) << 13;
    let exp = shifted & 0x0f80_0000;
    let normal = shifted + (112 << 23);
    let special = normal + (112 << 23);
    // The difference is exact and not negative, but a zero comes out -0 when the caller's
    // thread rounds down (x - x = -0 there): its sign is cleared, so a +0 half widens to +0
    // in every rounding mode (a stranger's, round twenty-seven).
    let sub =
        (f32::from_bits(normal + (1 << 23)) - f32::from_bits(113 << 23)).to_bits() & 0x7fff_ffff;
    let magnitude = if exp == 0x0f80_0000 {
        special
    } else if exp == 0 {
        sub
    } else {
        normal
    };
    sign | magnitude
}

/// bf16 bits to f32 bits: a shift.
#[inline(always)]
pub fn bf16_to_f32_bits(h: u32) -> u32 {
    h << 16
}

/// f32 bits to bf16 bits, rounded to nearest even; NaN stays a (quiet) NaN.
#[inline(always)]
pub fn f32_to_bf16_bits(x: u32) -> u32 {
    if x & 0x7fff_ffff > 0x7f80_0000 {
        return (x >> 16) | 0x40;
    }
    (x + 0x7fff + ((x >> 16) & 1)) >> 16
}

/// f32 bits to f16 bits, rounded to nearest even, overflowing to infinity; NaN stays a
/// (quiet) NaN.
#[inline(always)]
pub fn f32_to_f16_bits(x: u32) -> u32 {
    let sign = (x >> 16) & 0x8000;
    let abs = x & 0x7fff_ffff;
    if abs > 0x7f80_0000 {
        return sign | 0x7e00 | ((abs >> 13) & 0x3ff);
    }
    // 65520 and above round to infinity.
    if abs >= 0x477f_f000 {
        return sign | 0x7c00;
    }
    // Normal f16 range starts at 2^-14.
    if abs >= 0x3880_0000 {
        let rebased = abs - (112 << 23);
        let rounded = rebased + 0xfff + ((rebased >> 13) & 1);
        return sign | (rounded >> 13);
    }
    // Subnormal f16 (or zero): value / 2^-24, rounded to nearest even.
    let exp = abs >> 23;
    if exp < 102 {
        // Below 2^-25: rounds to zero (2^-25 itself is a tie that rounds to even zero).
        return sign;
    }
    let mant = (abs & 0x7f_ffff) | 0x80_0000;
    let shift = 126 - exp; // 14..=24
    let half = 1u32 << (shift - 1);
    let rest = mant & ((1u32 << shift) - 1);
    let mut q = mant >> shift;
    if rest > half || (rest == half && q & 1 == 1) {
        q += 1;
    }
    sign | q
}

/// [`f32_to_f16_bits`] without branches, as the kernels' `f32_to_f16_bits`
/// (`shaders/shared/convert.wgsl`) computes it, so a loop of it vectorises: every case is
/// computed and one selected. A subnormal result is `|x| 2^24` rounded to an integer, ties
/// to even: the product is exact (a power of two; normal wherever the result is not zero),
/// `min` holds the other cases' lanes within `[0, 1024]`, and adding 2^23 rounds to an
/// integer (the float add rounds to nearest even, and 2^23's neighbours are 1 apart) with
/// no `round` instruction, which x86-64's baseline lacks. The same bits for every f32 (a
/// test checks all 2^32).
#[inline(always)]
pub fn f32_to_f16_bits_branchless(x: u32) -> u32 {
    let abs = x & 0x7fff_ffff;
    let rebased = abs.wrapping_sub(112 << 23);
    let normal = (rebased + 0xfff + ((rebased >> 13) & 1)) >> 13;
    let scaled = f32::from_bits(abs.min(0x3880_0000)) * 16_777_216.0;
    let sub = (scaled + 8_388_608.0).to_bits() - 0x4b00_0000;
    let mut r = if abs >= 0x3880_0000 { normal } else { sub };
    r = if abs >= 0x477f_f000 { 0x7c00 } else { r };
    r = if abs > 0x7f80_0000 { 0x7e00 | ((abs >> 13) & 0x3ff) } else { r };
    ((x >> 16) & 0x8000) | r
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn f16_unpacking_matches_half_for_every_value() {
        for h in 0..=u16::MAX {
            let want = f16::from_bits(h).to_f32();
            let got = f32::from_bits(f16_to_f32_bits(u32::from(h)));
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#06x}");
            }
        }
    }

    #[test]
    fn branchless_f16_unpacking_gives_the_same_bits_for_every_value() {
        for h in 0..=u32::from(u16::MAX) {
            assert_eq!(f16_to_f32_bits_branchless(h), f16_to_f32_bits(h), "{h:#06x}");
        }
    }

    /// Every f32, in parallel: about 4 s on 2 cores in a release build (a debug build takes
    /// every 61st block of 65536 values, all the exponents).
    #[test]
    fn branchless_rounding_to_f16_gives_the_same_bits_for_every_value() {
        use rayon::prelude::*;
        let stride = if cfg!(debug_assertions) { 61 } else { 1 };
        let blocks = (0..=u32::MAX >> 16).step_by(stride).collect::<Vec<u32>>();
        let bad = blocks.into_par_iter().find_map_any(|hi| {
            (0..=0xffffu32)
                .map(|lo| (hi << 16) | lo)
                .find(|&x| f32_to_f16_bits_branchless(x) != f32_to_f16_bits(x))
        });
        assert_eq!(bad, None, "the first value whose bits differ");
    }

    #[test]
    fn rounding_to_halves_matches_half() {
        let mut x = 0x1234_5678u32;
        let check = |bits: u32| {
            let v = f32::from_bits(bits);
            let (h, b) = (f32_to_f16_bits(bits), f32_to_bf16_bits(bits));
            if v.is_nan() {
                assert!(f16::from_bits(h as u16).is_nan() && bf16::from_bits(b as u16).is_nan());
            } else {
                assert_eq!(h, u32::from(f16::from_f32(v).to_bits()), "f16 of {v:e} ({bits:#x})");
                assert_eq!(b, u32::from(bf16::from_f32(v).to_bits()), "bf16 of {v:e} ({bits:#x})");
            }
        };
        for _ in 0..2_000_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            check(x);
        }
        // Every f16 boundary neighbourhood: the values themselves, ties and one ulp around.
        for h in 0..=0x7c00u32 {
            let base = f16_to_f32_bits(h);
            for d in [0u32, 1, 0xfff, 0x1000, 0x1001, 0x1fff] {
                check(base.wrapping_add(d));
                check(base.wrapping_add(d) | 0x8000_0000);
            }
        }
        for special in
            [0, 0x8000_0000, 0x7f80_0000, 0xff80_0000, 0x7fc0_0000, 0x3300_0000, 0x3300_0001]
        {
            check(special);
        }
    }
}
