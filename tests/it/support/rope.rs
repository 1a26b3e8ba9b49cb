//! Helpers shared by the RoPE tests: deterministic tensors and positions, and the
//! element-by-element comparison of two RoPE results.

use ndarray::{Array2, Array4, ArrayView2, ArrayView4};
use posenc::rope::{Dtype, Element, Layout, Pairing};

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

/// Asserts that `got` has `want`'s bits (both RoPE of the same tensor at `positions`),
/// naming the first element that differs, its position and both values. The GPU rounds each
/// product before the sum takes it (shaders/shared/rounded.wgsl), so no backend may differ
/// from the CPU, not even by the multiply-add contraction WGSL would otherwise allow.
pub fn assert_rope_same<T: Element>(
    what: &str,
    positions: ArrayView2<'_, u32>,
    layout: Layout,
    got: ArrayView4<'_, T>,
    want: ArrayView4<'_, T>,
) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    let (got, want) = (token_major(got, layout), token_major(want, layout));
    for ((at, g), w) in got.indexed_iter().zip(want.iter()) {
        if bytemuck::bytes_of(g) != bytemuck::bytes_of(w) {
            let (b, l, h, d) = at;
            panic!(
                "{what}: element [{b}, {l}, {h}, {d}] at position {}: got {:e}, want {:e}",
                positions[[b, l]],
                g.to_f32(),
                w.to_f32()
            );
        }
    }
}

/// Helpers to name dtypes in messages.
pub fn dtype_name<T: Element>() -> &'static str {
    match T::DTYPE {
        Dtype::F32 => "f32",
        Dtype::F16 => "f16",
        Dtype::Bf16 => "bf16",
    }
}
