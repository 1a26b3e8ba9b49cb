//! The kernels' half-precision conversions against their CPU twins in `posenc::convert`,
//! bit for bit (`support/convert_probe.rs`; the browser suite runs the same probe): every
//! one of the 65536 f16 and bf16 values widened, and f32 values of every exponent rounded
//! to f16 and bf16, with the mantissas where rounding turns (each tie of every subnormal
//! shift, one below and above it, the extremes) and a million random ones, signs and NaN
//! payloads included, in groups of four that take both the vec4 forms' normal path and
//! their general one; each in the forms built for GPUs and for CPU adapters, and the GPUs'
//! f16 widening by unpack2x16float where the adapter has it (a NaN half may become any NaN
//! there, the promise's exception; every other half exactly).

use crate::support::convert_probe::{CONVERSIONS, builds, check, inputs, submit};
use crate::support::gpu;

#[test]
fn every_conversion_has_the_cpu_twin_bits() {
    let Some(ctx) = gpu() else { return };
    for build in builds(ctx) {
        for (entry, twin, widens) in CONVERSIONS {
            let (input, out_words) = inputs(widens);
            let output = submit(ctx, entry, build, &input, out_words);
            check(entry, build, twin, widens, &input, &ctx.read_buffer(&output).unwrap());
        }
    }
}
