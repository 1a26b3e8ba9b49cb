//! Helpers shared by the RoPE tests: deterministic tensors and positions, and the
//! per-element comparison of two RoPE results with its tolerance.

use ndarray::{Array2, Array4, ArrayView2, ArrayView4};
use posenc::rope::{Dtype, Element, Frequencies, Layout, Pairing, RopeSpec};

use super::Rng;

/// A tensor of values in [-4, 4) with 12 fractional bits, in `T` (rounded to nearest even
/// for 16-bit types, so every value is exactly representable after that).
pub fn tensor<T: Element>(shape: [usize; 4], seed: u64) -> Array4<T> {
    let mut rng = Rng::new(seed);
    Array4::from_shape_fn(shape, |_| {
        let v = (rng.below(1 << 15) as f32 - 16384.0) / 4096.0;
        T::from_f32(v)
    })
}

/// `[batch, len]` positions mixing the phase's hard cases (near 2^16, 2^24, 2^31, 2^32 - 1)
/// with random u32s.
pub fn hard_batch(rng: &mut Rng, batch: usize, len: usize) -> Array2<u32> {
    let pool = super::hard_positions(rng, 8);
    Array2::from_shape_fn((batch, len), |_| pool[rng.below(pool.len() as u64) as usize])
}

/// One f32 ulp at the magnitude of `v`: the spacing of f32 values in `v`'s binade.
pub fn ulp_f32(v: f64) -> f64 {
    let v = v.abs() as f32;
    let exp = (v.to_bits() >> 23) & 0xff;
    if exp == 0 { 2f64.powi(-149) } else { 2f64.powi(exp as i32 - 150) }
}

/// One ulp of the storage type at the magnitude of `v`.
pub fn ulp_of(dtype: Dtype, v: f64) -> f64 {
    match dtype {
        Dtype::F32 => ulp_f32(v),
        // 10 and 7 stored mantissa bits; subnormal spacing below the smallest normal.
        Dtype::F16 => {
            let e = v.abs().max(2f64.powi(-14)).log2().floor();
            2f64.powf(e - 10.0)
        }
        Dtype::Bf16 => {
            let e = v.abs().max(2f64.powi(-126)).log2().floor();
            2f64.powf(e - 7.0)
        }
    }
}

/// For element `d < r` of a head row: its frequency, its partner and whether it is the
/// first of its pair.
pub fn pair_of(pairing: Pairing, r: usize, d: usize) -> (usize, usize, bool) {
    let half = r / 2;
    match pairing {
        Pairing::Neox if d < half => (d, d + half, true),
        Pairing::Neox => (d - half, d - half, false),
        Pairing::Gptj => (d / 2, d ^ 1, d.is_multiple_of(2)),
    }
}

/// A tensor in token-major order `[B, L, H, Dh]`.
pub fn token_major<T>(a: ArrayView4<'_, T>, layout: Layout) -> ArrayView4<'_, T> {
    match layout {
        Layout::Blhd => a,
        Layout::Bhld => a.permuted_axes([0, 2, 1, 3]),
    }
}

/// Asserts that `got` agrees with `want` (both RoPE of `x`) as two backends may: bit for
/// bit on the pass-through dimensions, and elsewhere within the rounding of one product
/// (WGSL lets a compiler fuse `x * c - y * s` into one fma, which skips one product's
/// rounding: at most half an f32 ulp of the larger product) plus one ulp of the result
/// (the two sums then round to neighbouring floats at worst), plus one ulp of the storage
/// type for 16-bit tensors (the two f32 results may round to neighbouring halves).
/// Returns how many elements differ at all.
#[allow(clippy::too_many_arguments)]
pub fn assert_rope_close<T: Element>(
    what: &str,
    spec: &RopeSpec,
    freqs: &Frequencies,
    x: ArrayView4<'_, T>,
    positions: ArrayView2<'_, u32>,
    layout: Layout,
    got: ArrayView4<'_, T>,
    want: ArrayView4<'_, T>,
) -> usize {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    let (x, got, want) =
        (token_major(x, layout), token_major(got, layout), token_major(want, layout));
    let flat: Vec<u32> = positions.iter().copied().collect();
    let cs = posenc::cpu::rope_cos_sin(freqs, &flat);
    let (batch, len, heads, dh) = x.dim();
    let r = spec.rotary_dim() as usize;
    let bits = |v: T| -> u64 {
        let b = bytemuck::bytes_of(&v);
        b.iter().rev().fold(0u64, |acc, &byte| acc << 8 | u64::from(byte))
    };
    let mut differing = 0;
    for b in 0..batch {
        for l in 0..len {
            for h in 0..heads {
                for d in 0..dh {
                    let (g, w) = (got[[b, l, h, d]], want[[b, l, h, d]]);
                    if bits(g) == bits(w) {
                        continue;
                    }
                    differing += 1;
                    assert!(d < r, "{what}: pass-through element [{b}, {l}, {h}, {d}] changed");
                    let (i, partner, _) = pair_of(spec.pairing(), r, d);
                    let t = b * len + l;
                    let (c, s) = (f64::from(cs[[t, i, 0]]), f64::from(cs[[t, i, 1]]));
                    let xv = f64::from(x[[b, l, h, d]].to_f32());
                    let yv = f64::from(x[[b, l, h, partner]].to_f32());
                    let (gv, wv) = (f64::from(g.to_f32()), f64::from(w.to_f32()));
                    let product = (xv * c).abs().max((yv * s).abs());
                    let result = gv.abs().max(wv.abs());
                    let mut tol = ulp_f32(product) / 2.0 + ulp_f32(result);
                    if T::DTYPE != Dtype::F32 {
                        tol += ulp_of(T::DTYPE, result);
                    }
                    let diff = (gv - wv).abs();
                    assert!(
                        diff <= tol,
                        "{what}: element [{b}, {l}, {h}, {d}] at position {}: got {gv:e}, want \
                         {wv:e}, differ by {diff:e} > {tol:e}",
                        positions[[b, l]]
                    );
                }
            }
        }
    }
    differing
}

/// Helpers to name dtypes in messages.
pub fn dtype_name<T: Element>() -> &'static str {
    match T::DTYPE {
        Dtype::F32 => "f32",
        Dtype::F16 => "f16",
        Dtype::Bf16 => "bf16",
    }
}
