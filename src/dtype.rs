//! The element types of tables, outputs and q/k tensors ([`Dtype`], [`Element`]) and the
//! codes the shaders take for them: the bottom of the library's layers, which every other
//! module may use and which uses none of them but the conversions (`crate::convert`).

use half::{bf16, f16};

/// Storage type code of f32 ([`Dtype::F32`]) in `Params` fields such as `dtype`.
pub const DTYPE_F32: u32 = 0;
/// Storage type code of f16.
pub const DTYPE_F16: u32 = 1;
/// Storage type code of bf16.
pub const DTYPE_BF16: u32 = 2;

/// Storage type of an embedding table or of an encode output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Dtype {
    /// IEEE binary32.
    #[default]
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16: the top half of a binary32.
    Bf16,
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
        }
    }

    /// The code the shaders use (`DTYPE_F32`, `DTYPE_F16`, `DTYPE_BF16`).
    pub(crate) fn code(self) -> u32 {
        match self {
            Dtype::F32 => DTYPE_F32,
            Dtype::F16 => DTYPE_F16,
            Dtype::Bf16 => DTYPE_BF16,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A tensor element type: f32, f16 or bf16, what the encode writes and RoPE rotates. 16-bit values
/// are widened to f32 exactly and the results rounded to nearest even, in integer code shared with
/// the shaders (`src/convert.rs`), so every path rounds alike.
pub trait Element: bytemuck::Pod + Send + Sync + std::fmt::Debug + sealed::Sealed {
    /// The storage type.
    const DTYPE: Dtype;
    /// The value as f32, exactly.
    fn to_f32(self) -> f32;
    /// `v` rounded to nearest even.
    fn from_f32(v: f32) -> Self;
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Element for f16 {
    const DTYPE: Dtype = Dtype::F16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits(crate::convert::f16_to_f32_bits_branchless(u32::from(self.to_bits())))
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        f16::from_bits(crate::convert::f32_to_f16_bits_branchless(v.to_bits()) as u16)
    }
}

impl Element for bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits(crate::convert::bf16_to_f32_bits(u32::from(self.to_bits())))
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        bf16::from_bits(crate::convert::f32_to_bf16_bits(v.to_bits()) as u16)
    }
}
