//! The fast CPU path: multi-threaded twins of the shaders, bit-identical to them.

/// The half-precision conversions, at the bottom of the layers since [`crate::dtype`]
/// uses them: `crate::convert`, here under its earlier path.
pub use crate::convert;
pub mod encode;
pub mod rope;
pub mod sincos;
pub mod table;
pub mod threads;

pub use encode::{Encoder, encode, encode_learned};
pub use rope::{
    rope, rope_cache, rope_cos_sin, rope_in_place, rope_into, rope_multimodal,
    rope_multimodal_in_place, rope_multimodal_into,
};
pub use table::{table, table_into};

use crate::error::{Result, invalid_env};

pub use crate::simd::SIMD_ENV;

/// Checks [`SIMD_ENV`].
///
/// # Errors
/// [`crate::Error::InvalidParameter`] naming the variable and its value if it names no set.
pub fn check_simd_env() -> Result<()> {
    crate::simd::cap_from_env()
        .map(drop)
        .map_err(|value| invalid_env(SIMD_ENV, &value, crate::simd::CAP_NAMES))
}
