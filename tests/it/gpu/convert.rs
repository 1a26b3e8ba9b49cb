//! The kernels' half-precision conversions against their CPU twins in `posenc::convert`,
//! bit for bit (`support/convert_probe.rs`; the browser suite runs the same probe): every
//! one of the 65536 f16 and bf16 values widened, and f32 values of every exponent rounded
//! to f16 and bf16, with the mantissas where rounding turns (each tie of every subnormal
//! shift, one below and above it, the extremes) and a million random ones, signs and NaN
//! payloads included, in groups of four that take both the vec4 forms' normal path and
//! their general one; each in the forms built for GPUs and for CPU adapters.

use crate::support::convert_probe::{CONVERSIONS, FOR_CPU_ADAPTERS, check, inputs, submit};
use crate::support::gpu;

#[test]
fn every_conversion_has_the_cpu_twin_bits() {
    let Some(ctx) = gpu() else { return };
    for masked in FOR_CPU_ADAPTERS {
        for (entry, twin, widens) in CONVERSIONS {
            let (input, out_words) = inputs(widens);
            let output = submit(ctx, entry, masked, &input, out_words);
            let what = format!("{entry} (built for CPU adapters: {masked})");
            check(&what, twin, widens, &input, &ctx.read_buffer(&output).unwrap());
        }
    }
}
