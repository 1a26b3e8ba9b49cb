//! ALiBi on the CPU against independent computations of the published formulas: slopes from
//! the paper's recursive `get_slopes` evaluated in 512-bit arithmetic by a different route
//! (square roots, not exp/ln), and every bias value from exact integer products.

use std::collections::HashMap;

use crate::support::{Rng, bits};
use astro_float::{BigFloat, RoundingMode};
use ndarray::Array3;
use posenc::Error;
use posenc::alibi::{self, AlibiSpec, Form, MAX_HEADS, MAX_VALUES};

/// The slopes of the paper's `get_slopes(n)`, each kept as its exact exponent `(num, den)`,
/// slope = `2^(-num/den)`: for a power of two, `start = 2^(-8/n)` and `start * start^i`;
/// otherwise the power-of-two list for `c`, then `get_slopes(2c)[0::2][:n - c]`.
fn published_exponents(n: u32) -> Vec<(u32, u32)> {
    let power_of_2 = |n: u32| (0..n).map(|i| (8 * (i + 1), n)).collect::<Vec<_>>();
    if n.is_power_of_two() {
        return power_of_2(n);
    }
    let c = 1 << n.ilog2();
    let mut slopes = power_of_2(c);
    slopes.extend(published_exponents(2 * c).into_iter().step_by(2).take((n - c) as usize));
    slopes
}

/// `2^(-num/den)` (den a power of two) in 512-bit arithmetic, rounded to float32 through its
/// decimal expansion: `2^(1/den)` by repeated square roots of 2, its integer power, a
/// division. Rust's decimal parser rounds correctly, and the 150 digits leave no doubt.
#[derive(Default)]
struct Exact {
    /// `2^(1/2^b)`, by `b`.
    roots: HashMap<u32, BigFloat>,
    /// `2^(-rest/den)` rounded to float32, by the fraction in lowest terms.
    fractions: HashMap<(u32, u32), f32>,
}

impl Exact {
    const PREC: usize = 512;
    const RM: RoundingMode = RoundingMode::ToEven;

    fn slope(&mut self, num: u32, den: u32) -> f32 {
        // 2^(-num/den) = 2^-whole * 2^(-rest/den); the power of two scales a float exactly.
        let (whole, rest) = (num / den, num % den);
        let shift = rest.trailing_zeros().min(den.trailing_zeros());
        let (rest, den) = (rest >> shift, den >> shift);
        let fraction = match self.fractions.get(&(rest, den)) {
            Some(&f) => f,
            None => {
                let root = self.root(den.ilog2()).clone();
                let (p, rm) = (Self::PREC, Self::RM);
                let value = BigFloat::from_u8(1, p).div(&root.powi(rest as usize, p, rm), p, rm);
                let text = format!("{value}");
                let f = text.parse::<f32>().unwrap_or_else(|e| panic!("{text}: {e}"));
                self.fractions.insert((rest, den), f);
                f
            }
        };
        fraction * 0.5f32.powi(whole as i32)
    }

    fn root(&mut self, b: u32) -> &BigFloat {
        self.roots.entry(b).or_insert_with(|| {
            let mut root = BigFloat::from_u8(2, Self::PREC);
            for _ in 0..b {
                root = root.sqrt(Self::PREC, Self::RM);
            }
            root
        })
    }
}

#[test]
fn slopes_of_powers_of_two_are_exact_and_twelve_heads_mix_two_lists() {
    let eight: Vec<f32> = (1..=8).map(|k| 0.5f32.powi(k)).collect();
    assert_eq!(alibi::slopes(8).unwrap(), eight);
    assert_eq!(alibi::slopes(1).unwrap(), [1.0 / 256.0]);
    assert_eq!(alibi::slopes(2).unwrap(), [1.0 / 16.0, 1.0 / 256.0]);
    // 12 heads: c = 8, then 2^(-8(2j-1)/16) = 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
    let mut twelve = eight.clone();
    let r = std::f64::consts::FRAC_1_SQRT_2;
    twelve.extend([r, r / 2.0, r / 4.0, r / 8.0].map(|v| v as f32));
    assert_eq!(bits(alibi::slopes(12).unwrap()), bits(&twelve));
    assert_eq!(alibi::slopes(12).unwrap()[8].to_bits(), 0x3f35_04f3);
}

#[test]
fn slopes_match_the_published_recursion_in_512_bit_arithmetic() {
    let mut exact = Exact::default();
    let large = [65, 96, 100, 127, 128, 129, 255, 1000, 4095, 4096, 4097, 65535, MAX_HEADS];
    for n in (1..=64).chain(large) {
        let got = alibi::slopes(n).unwrap();
        let want: Vec<f32> =
            published_exponents(n).into_iter().map(|(num, den)| exact.slope(num, den)).collect();
        assert_eq!(got.len(), n as usize);
        if let Some(k) = got.iter().zip(&want).position(|(g, w)| g.to_bits() != w.to_bits()) {
            panic!("n = {n}, head {k}: got {:e}, want {:e}", got[k], want[k]);
        }
    }
}

#[test]
fn slopes_are_within_half_an_ulp_of_float64_exp2() {
    // A second, cruder route: float64 exp2 is within 1e-15 relative, so the float32 slope
    // must be within half a float32 ulp of it, up to that.
    for n in 1..=300 {
        for (slope, (num, den)) in alibi::slopes(n).unwrap().into_iter().zip(published_exponents(n))
        {
            let truth = (-f64::from(num) / f64::from(den)).exp2();
            // The slope is 2^E * (1 + f); half its ulp is 2^(E - 24).
            let power = f64::from(f32::from_bits(slope.to_bits() & 0x7f80_0000));
            let half_ulp = power * 2f64.powi(-24);
            assert!(
                (f64::from(slope) - truth).abs() <= half_ulp * (1.0 + 1e-9),
                "n = {n}: {slope:e} vs {truth:e}"
            );
        }
    }
}

#[test]
fn head_counts_outside_1_to_65536_are_refused() {
    for n in [0, MAX_HEADS + 1, u32::MAX] {
        let err = alibi::slopes(n).unwrap_err();
        assert!(matches!(err, Error::InvalidParameter { field: "heads", .. }), "{err}");
        assert!(err.to_string().contains(&n.to_string()), "{err}");
        assert!(AlibiSpec::new(n, 4).is_err());
    }
}

/// The bias by the published formula, from exact integers: the float32 slope is
/// `m * 2^e` with a 24-bit integer `m`; `m * d` is exact in u64; Rust's `as f32` rounds it
/// to nearest even, and scaling by the power of two `2^e` is exact.
fn expected(slope: f32, q: u64, k: u64, form: Form) -> f32 {
    let d = match form {
        Form::Symmetric => q.abs_diff(k),
        Form::Causal => q.saturating_sub(k),
    };
    if d == 0 {
        return 0.0;
    }
    let b = slope.to_bits();
    let m = u64::from(b & 0x7f_ffff | 0x80_0000);
    let scale = f32::from_bits(((b >> 23) - 23) << 23);
    -((m * d) as f32 * scale)
}

/// Compares every value of `bias_cpu(spec)` with [`expected`], by bits.
fn check_against_formula(spec: &AlibiSpec) -> Array3<f32> {
    let bias = alibi::bias_cpu(spec).unwrap();
    assert_eq!(bias.dim(), spec.shape());
    let slopes = spec.slopes();
    for ((h, i, j), &v) in bias.indexed_iter() {
        let q = u64::from(spec.offset()) + i as u64;
        let want = expected(slopes[h], q, j as u64, spec.form());
        assert_eq!(
            v.to_bits(),
            want.to_bits(),
            "{spec:?}: head {h}, query {i} (position {q}), key {j}: got {v:e}, want {want:e}"
        );
    }
    bias
}

#[test]
fn bias_matches_the_formula_bit_for_bit_at_small_and_huge_distances() {
    let forms = [Form::Symmetric, Form::Causal];
    // (heads, len, kv_len, offset): odd sizes, kv_len shorter and longer than the queries'
    // span, and queries near 2^24, 2^25 (ties, with slope 1/2), 2^31 and the last u32.
    let cases: [(u32, u64, Option<u64>, u32); 9] = [
        (12, 5, None, 0),
        (8, 7, Some(3), 0),
        (3, 3, Some(10), 0),
        (5, 1, None, 1000),
        (8, 6, Some(9), (1 << 24) - 3),
        (8, 5, Some(40), (1 << 25) - 2),
        (5, 4, Some(3), (1 << 31) - 2),
        (7, 4, Some(5), u32::MAX - 3),
        (1, 2, Some(2), u32::MAX - 1),
    ];
    for form in forms {
        for (heads, len, kv_len, offset) in cases {
            let mut spec = AlibiSpec::new(heads, len).unwrap().with_offset(offset).unwrap();
            if let Some(kv) = kv_len {
                spec = spec.with_kv_len(kv).unwrap();
            }
            check_against_formula(&spec.with_form(form));
        }
    }
}

#[test]
fn long_rows_and_tasks_that_cut_heads_match_the_formula() {
    for form in [Form::Symmetric, Form::Causal] {
        // 40000 keys: longer than one CPU task, so rows are computed in pieces.
        let spec = AlibiSpec::new(3, 2).unwrap().with_offset(u32::MAX - 1).unwrap();
        check_against_formula(&spec.with_kv_len(40_000).unwrap().with_form(form));
        // 35000 rows of 13 keys: tasks of whole rows whose boundaries fall inside heads.
        let spec = AlibiSpec::new(7, 5000).unwrap().with_offset((1 << 31) - 10).unwrap();
        check_against_formula(&spec.with_kv_len(13).unwrap().with_form(form));
    }
}

/// The CPU computes a head's values as float32 products where every distance of a block is
/// below 2^24 and by integer steps where one reaches it: blocks that end just below, start at
/// and straddle 2^24, on both sides of the diagonal, in each of the fill's three shapes
/// (several rows of a head, one row of a head, rows longer than a task).
#[test]
fn the_float_and_integer_forms_meet_at_2_pow_24() {
    const F: u32 = 1 << 24;
    // (heads, len, kv_len, offset).
    let cases: [(u32, u64, u64, u32); 8] = [
        (5, 6, 9, F - 6),      // rows of a head: largest distance 2^24 - 1
        (5, 6, 9, F - 5),      // ... 2^24
        (6, 1, 7, F - 1),      // one row a head: 2^24 - 1
        (6, 1, 7, F),          // ... 2^24
        (2, 2, 40_000, F - 2), // rows longer than a task: 2^24 - 1
        (2, 2, 40_000, F - 1), // ... 2^24
        (3, 4, 5, 1),          // near the diagonal, keys past the queries
        (2, 3, 40_000, 20_000),
    ];
    for form in [Form::Symmetric, Form::Causal] {
        for (heads, len, kv_len, offset) in cases {
            let spec = AlibiSpec::new(heads, len).unwrap().with_offset(offset).unwrap();
            check_against_formula(&spec.with_kv_len(kv_len).unwrap().with_form(form));
        }
    }
    // Keys past a query by 2^24 - 1 and more (the symmetric form's negative differences):
    // one query at 0 against 2^24 + 2 keys, cut into tasks of which the one that reaches
    // key 2^24 straddles it.
    let spec = AlibiSpec::new(1, 1).unwrap().with_kv_len(u64::from(F) + 2).unwrap();
    let bias = alibi::bias_cpu(&spec).unwrap();
    let slope = spec.slopes()[0];
    for k in (0..50).chain(F as usize - 40_000..F as usize + 2) {
        let want = expected(slope, 0, k as u64, Form::Symmetric);
        assert_eq!(bias[[0, 0, k]].to_bits(), want.to_bits(), "key {k}");
    }
}

#[test]
fn bias_is_within_2_pow_minus_23_of_the_exact_slope_times_distance() {
    // Against the exact (irrational) slopes rather than their float32 roundings: the slope's
    // rounding and the product's each contribute at most 2^-24 relative.
    const RELATIVE: f64 = 1.0 / (1u64 << 23) as f64;
    let spec = AlibiSpec::new(12, 3)
        .unwrap()
        .with_offset(u32::MAX - 2)
        .unwrap()
        .with_kv_len(4)
        .unwrap()
        .with_form(Form::Causal);
    let bias = alibi::bias_cpu(&spec).unwrap();
    let exponents = published_exponents(12);
    for ((h, i, j), &v) in bias.indexed_iter() {
        let (num, den) = exponents[h];
        let d = (u64::from(spec.offset()) + i as u64 - j as u64) as f64;
        let truth = -(-f64::from(num) / f64::from(den)).exp2() * d;
        assert!((f64::from(v) - truth).abs() <= RELATIVE * truth.abs(), "{h} {i} {j}: {v}");
    }
}

#[test]
fn exact_where_float32_distances_already_round() {
    // The usual `slope * f32(q - k)` rounds the distance first: past 2^24 it is off.
    let spec = AlibiSpec::new(8, 1).unwrap().with_offset((1 << 24) + 1).unwrap().with_kv_len(1);
    let bias = alibi::bias_cpu(&spec.unwrap()).unwrap();
    // Head 2 has slope 1/8; distance 2^24 + 1 gives exactly -(2^21 + 1/8).
    assert_eq!(bias[[2, 0, 0]], -2_097_152.125);
    let naive = -(0.125f32 * ((1u32 << 24) + 1) as f32);
    assert_eq!(naive, -2_097_152.0);
}

#[test]
fn zeros_are_positive_on_the_diagonal_and_above_it() {
    for form in [Form::Symmetric, Form::Causal] {
        let bias = alibi::bias_cpu(&AlibiSpec::new(4, 6).unwrap().with_form(form)).unwrap();
        for ((h, i, j), &v) in bias.indexed_iter() {
            if i == j || (form == Form::Causal && j > i) {
                assert_eq!(v.to_bits(), 0, "{form:?} {h} {i} {j}");
            } else {
                assert!(v < 0.0, "{form:?} {h} {i} {j}: {v}");
            }
        }
    }
}

#[test]
fn symmetric_and_causal_agree_up_to_the_diagonal() {
    let mut rng = Rng::new(21);
    let offset = rng.next_u32() >> 1;
    let spec = AlibiSpec::new(9, 6).unwrap().with_offset(offset).unwrap().with_kv_len(50).unwrap();
    let sym = alibi::bias_cpu(&spec).unwrap();
    let causal = alibi::bias_cpu(&spec.clone().with_form(Form::Causal)).unwrap();
    for ((h, i, j), &v) in causal.indexed_iter() {
        assert_eq!(v.to_bits(), sym[[h, i, j]].to_bits(), "{h} {i} {j}");
    }
    check_against_formula(&spec.with_form(Form::Causal));
}

#[test]
fn a_decoding_step_is_the_last_row_of_the_full_causal_tensor() {
    let full = alibi::bias_cpu(&AlibiSpec::new(6, 40).unwrap().with_form(Form::Causal)).unwrap();
    let step = AlibiSpec::new(6, 1).unwrap().with_offset(39).unwrap().with_form(Form::Causal);
    assert_eq!(step.kv_len(), 40);
    let step = alibi::bias_cpu(&step).unwrap();
    for h in 0..6 {
        assert_eq!(
            bits(step.slice(ndarray::s![h, 0, ..]).as_slice().unwrap()),
            bits(full.slice(ndarray::s![h, 39, ..]).to_vec().as_slice())
        );
    }
}

#[test]
fn random_specs_match_the_formula() {
    let mut rng = Rng::new(22);
    for _ in 0..40 {
        let heads = 1 + rng.below(70) as u32;
        let len = rng.below(9);
        let offset = match rng.below(3) {
            0 => rng.below(100) as u32,
            1 => rng.next_u32(),
            _ => u32::MAX - rng.below(20) as u32,
        };
        let offset = offset.min((u64::from(u32::MAX) + 1 - len) as u32);
        let kv_len = rng.below(12);
        let form = if rng.below(2) == 0 { Form::Symmetric } else { Form::Causal };
        let spec = AlibiSpec::new(heads, len)
            .unwrap()
            .with_offset(offset)
            .unwrap()
            .with_kv_len(kv_len)
            .unwrap()
            .with_form(form);
        check_against_formula(&spec);
    }
}

#[test]
fn empty_tensors_are_empty() {
    let spec = AlibiSpec::new(3, 0).unwrap().with_offset(5).unwrap();
    assert_eq!(alibi::bias_cpu(&spec).unwrap().dim(), (3, 0, 5));
    assert!(spec.is_empty());
    let spec = AlibiSpec::new(3, 4).unwrap().with_kv_len(0).unwrap();
    assert_eq!(alibi::bias_cpu(&spec).unwrap().dim(), (3, 4, 0));
}

#[test]
fn bias_into_a_view_matches_and_checks_the_shape() {
    let spec = AlibiSpec::new(5, 7).unwrap().with_kv_len(9).unwrap().with_form(Form::Causal);
    let want = alibi::bias_cpu(&spec).unwrap();
    let mut out = Array3::<f32>::from_elem((5, 7, 9), f32::NAN);
    alibi::bias_cpu_into(&spec, out.view_mut()).unwrap();
    assert_eq!(out, want);
    // A non-contiguous view (every other key) of a larger array.
    let mut wide = Array3::<f32>::zeros((5, 7, 18));
    alibi::bias_cpu_into(&spec, wide.slice_mut(ndarray::s![.., .., ..;2])).unwrap();
    assert_eq!(wide.slice(ndarray::s![.., .., ..;2]), want);
    let err = alibi::bias_cpu_into(&spec, Array3::zeros((5, 7, 8)).view_mut()).unwrap_err();
    assert!(matches!(err, Error::Shape { op: "alibi", .. }), "{err}");
}

#[test]
fn positions_past_u32_and_oversized_tensors_are_refused() {
    let err = AlibiSpec::new(8, 10).unwrap().with_offset(u32::MAX - 8).unwrap_err();
    assert!(matches!(err, Error::InvalidParameter { field: "offset", .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("4294967287") && text.contains("len 10"), "{text}");
    // The last query exactly at u32::MAX is fine.
    assert!(AlibiSpec::new(8, 10).unwrap().with_offset(u32::MAX - 9).is_ok());
    let err = AlibiSpec::new(8, (1 << 32) + 1).unwrap_err();
    assert!(matches!(err, Error::InvalidParameter { field: "len", .. }), "{err}");
    let err = AlibiSpec::new(8, 1).unwrap().with_kv_len((1 << 32) + 1).unwrap_err();
    assert!(matches!(err, Error::InvalidParameter { field: "kv_len", .. }), "{err}");

    let big = AlibiSpec::new(64, 8192).unwrap();
    assert_eq!(big.n_values(), 1 << 32);
    let err = alibi::bias_cpu(&big).unwrap_err();
    match err {
        Error::Limit { requested, limit, .. } => {
            assert_eq!((requested, limit), (1 << 32, MAX_VALUES));
        }
        other => panic!("{other}"),
    }
    assert!(AlibiSpec::new(MAX_HEADS, 1 << 32).unwrap().check_size().is_err());
}
