//! Accuracy of the table paths (cpu, reference) against exact values.

use crate::support::{Rng, hard_positions, max_abs_diff};
use approx::abs_diff_eq;
use posenc::{ACCURACY_BOUND, PeSpec, cpu, reference};

// The accuracy promise, posenc::ACCURACY_BOUND: half an f32 ulp at 1.0 (2^-25 = 3.0e-8) of
// final rounding plus the fixed-point and phase budget; the bar is 6e-8, and we test
// exactly that bar.

/// The reference's promise; its real error is a few 1e-16.
const REFERENCE_MAX_ABS: f64 = 1e-9;

/// The seed notes print three decimals, sometimes rounded (sin 0.1 = 0.0998 as 0.100) and
/// sometimes truncated (cos 0.02 = 0.99980 as 0.999): agreeing to 3 decimals means within 1e-3.
const THREE_DECIMALS: f64 = 1e-3;

#[test]
fn seed_example_d8_positions_0_to_3() {
    let spec = PeSpec::new(8).unwrap();
    let t = cpu::table(&spec, &[0, 1, 2, 3]);
    let row1 = [0.841, 0.540, 0.100, 0.995, 0.010, 1.000, 0.001, 1.000];
    for (j, want) in row1.iter().enumerate() {
        assert!((f64::from(t[[1, j]]) - want).abs() < THREE_DECIMALS, "column {j}: {}", t[[1, j]]);
    }
    // Position 0 is [0, 1, 0, 1, ...] exactly.
    let row0: Vec<f32> = t.row(0).to_vec();
    assert_eq!(row0, [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]);
}

#[test]
fn seed_example_d4_position_2() {
    let spec = PeSpec::new(4).unwrap();
    let t = cpu::table(&spec, &[2]);
    for (j, want) in [0.909, -0.416, 0.020, 0.999].iter().enumerate() {
        assert!((f64::from(t[[0, j]]) - want).abs() < THREE_DECIMALS, "column {j}: {}", t[[0, j]]);
    }
}

/// Values from mpmath at 50 digits (an independent implementation):
/// `mp.dps = 50; w = power(mpf(base), -mpf(2*i)/d); sin(p*w), cos(p*w)`.
#[allow(clippy::excessive_precision)] // the digits as mpmath printed them
const MPMATH_WITNESSES: &[(u32, usize, u32, f64, f64, f64)] = &[
    (4294967295, 0, 8, 10000.0, 0.49667719175328819253, -0.8679353473572022873),
    (4294967295, 1, 8, 10000.0, -0.25918922850930379901, -0.96582655990853342176),
    (16777217, 3, 512, 10000.0, -0.30546280883144060521, -0.9522040077739679265),
    (2147483648, 100, 512, 10000.0, -0.77171680296265446405, 0.63596633246194687709),
    (1048576, 0, 512, 10000.0, 0.33049314002173467164, 0.94380839390131198401),
    (123456789, 7, 64, 500000.0, -0.93122253119551975576, -0.36445109053727529671),
];

#[test]
fn reference_and_cpu_match_independent_high_precision_values() {
    for &(p, i, d, base, s, c) in MPMATH_WITNESSES {
        let spec = PeSpec::new(d).unwrap().with_base(base).unwrap();
        let r = reference::table(&spec, &[p]);
        assert!((r[[0, 2 * i]] - s).abs() < 1e-15, "reference sin p={p} i={i}: {}", r[[0, 2 * i]]);
        assert!((r[[0, 2 * i + 1]] - c).abs() < 1e-15, "reference cos p={p} i={i}");
        let f = cpu::table(&spec, &[p]);
        assert!(
            abs_diff_eq!(f64::from(f[[0, 2 * i]]), s, epsilon = ACCURACY_BOUND),
            "cpu sin p={p} i={i}"
        );
        assert!(
            abs_diff_eq!(f64::from(f[[0, 2 * i + 1]]), c, epsilon = ACCURACY_BOUND),
            "cpu cos p={p} i={i}"
        );
    }
}

/// An independent big-float route: w by `pow` (the reference uses exp/ln and products),
/// the angle unreduced, sin and cos by astro-float at 320 bits.
fn bigfloat_sincos(p: u32, i: u32, d: u32, base: f64) -> (f64, f64) {
    use astro_float::{BigFloat, Consts, RoundingMode};
    let (prec, rm) = (320, RoundingMode::ToEven);
    let mut cc = Consts::new().unwrap();
    let exponent = BigFloat::from_f64(-2.0 * f64::from(i) / f64::from(d), prec);
    // -2i/d is exact in f64 only when d divides nicely; rebuild it as a quotient instead.
    let exponent = if exponent.is_zero() {
        exponent
    } else {
        BigFloat::from_i64(-2 * i64::from(i), prec).div(&BigFloat::from_u32(d, prec), prec, rm)
    };
    let w = BigFloat::from_f64(base, prec).pow(&exponent, prec, rm, &mut cc);
    let angle = w.mul(&BigFloat::from_u32(p, prec), prec, rm);
    let to_f64 = |x: BigFloat| -> f64 { format!("{x}").parse().unwrap() };
    (to_f64(angle.sin(prec, rm, &mut cc)), to_f64(angle.cos(prec, rm, &mut cc)))
}

#[test]
fn reference_is_within_1e_9_of_an_independent_bigfloat_route() {
    let mut rng = Rng::new(7);
    let mut worst = 0.0f64;
    for (d, base) in [(8, 10000.0), (512, 10000.0), (128, 500000.0), (64, 1.5), (4096, 1e7)] {
        let spec = PeSpec::new(d).unwrap().with_base(base).unwrap();
        let positions = hard_positions(&mut rng, 6);
        let table = reference::table(&spec, &positions);
        for _ in 0..40 {
            let row = rng.below(positions.len() as u64) as usize;
            let i = rng.below(u64::from(d / 2)) as u32;
            let (s, c) = bigfloat_sincos(positions[row], i, d, base);
            worst = worst.max((table[[row, 2 * i as usize]] - s).abs());
            worst = worst.max((table[[row, 2 * i as usize + 1]] - c).abs());
        }
    }
    assert!(worst <= REFERENCE_MAX_ABS, "worst {worst:e}");
}

#[test]
fn plain_float64_is_not_enough_past_2_pow_27() {
    // sin(p * w) in float64: the product's rounding alone is ulp(2^31)/2 ~ 2.4e-7 rad.
    let spec = PeSpec::new(64).unwrap();
    let positions: Vec<u32> = (0..64).map(|k| (1u32 << 31) + 977 * k).collect();
    let exact = reference::table(&spec, &positions);
    let mut worst = 0.0f64;
    for (r, &p) in positions.iter().enumerate() {
        for i in 0..32 {
            let w = 10000f64.powf(-2.0 * f64::from(i) / 64.0);
            let (s, c) = (f64::from(p) * w).sin_cos();
            worst = worst.max((s - exact[[r, 2 * i as usize]]).abs());
            worst = worst.max((c - exact[[r, 2 * i as usize + 1]]).abs());
        }
    }
    assert!(worst > 10.0 * REFERENCE_MAX_ABS, "float64 was unexpectedly accurate: {worst:e}");
}

#[test]
fn naive_float32_is_far_off_where_posenc_is_not() {
    let spec = PeSpec::new(512).unwrap();
    let positions: Vec<u32> = (0..32).map(|k| (1u32 << 24) + 3 * k).collect();
    let exact = reference::table(&spec, &positions);
    let ours = cpu::table(&spec, &positions);
    let mut naive_worst = 0.0f64;
    for (r, &p) in positions.iter().enumerate() {
        for i in 0..256 {
            let w = 10000f32.powf(-2.0 * i as f32 / 512.0);
            let a = p as f32 * w;
            naive_worst = naive_worst.max((f64::from(a.sin()) - exact[[r, 2 * i]]).abs());
        }
    }
    let (ours_worst, _) = max_abs_diff(ours.iter().map(|&v| f64::from(v)), exact.iter().copied());
    assert!(naive_worst > 1.0, "naive f32 at 2^24: {naive_worst}");
    assert!(ours_worst <= ACCURACY_BOUND, "posenc at 2^24: {ours_worst:e}");
}

#[test]
fn cpu_is_within_6e_8_everywhere_for_many_dims_and_bases() {
    let mut rng = Rng::new(2026);
    for (d, base) in [
        (2, 10000.0),
        (4, 10000.0),
        (6, 10.0),
        (8, 10000.0),
        (66, 1.0001),
        (512, 10000.0),
        (1000, 500000.0),
        (2048, 1e7),
        (4096, 1e6),
    ] {
        let spec = PeSpec::new(d).unwrap().with_base(base).unwrap();
        let positions = hard_positions(&mut rng, 64);
        let fast = cpu::table(&spec, &positions);
        let exact = reference::table(&spec, &positions);
        let (worst, at) = max_abs_diff(fast.iter().map(|&v| f64::from(v)), exact.iter().copied());
        assert!(
            worst <= ACCURACY_BOUND,
            "d={d} base={base}: error {worst:e} at position {} column {}",
            positions[at / d as usize],
            at % d as usize
        );
    }
}

#[test]
fn cpu_is_within_6e_8_at_the_largest_dim() {
    let spec = PeSpec::new(65536).unwrap();
    let positions = [1, 65535, 16_777_215, 2_147_483_647, u32::MAX];
    let fast = cpu::table(&spec, &positions);
    let exact = reference::table(&spec, &positions);
    let (worst, at) = max_abs_diff(fast.iter().map(|&v| f64::from(v)), exact.iter().copied());
    assert!(worst <= ACCURACY_BOUND, "error {worst:e} at flat index {at}");
}

#[test]
fn table_into_checks_the_output_shape() {
    let spec = PeSpec::new(8).unwrap();
    let mut out = ndarray::Array2::<f32>::zeros((2, 6));
    let err = cpu::table_into(&spec, &[0, 1], out.view_mut()).unwrap_err();
    assert!(matches!(err, posenc::Error::Shape { .. }), "{err}");
    let mut out = ndarray::Array2::<f32>::zeros((2, 8));
    cpu::table_into(&spec, &[0, 1], out.view_mut()).unwrap();
    assert_eq!(out, cpu::table(&spec, &[0, 1]));
    // A non-contiguous destination works too.
    let mut wide = ndarray::Array2::<f32>::zeros((8, 2));
    cpu::table_into(&spec, &[0, 1], wide.view_mut().reversed_axes()).unwrap();
    assert_eq!(wide.t(), cpu::table(&spec, &[0, 1]));
}
