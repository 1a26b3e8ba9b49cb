//! Every sinusoidal variant against an independent high-precision implementation of its
//! published formula, written here the way each project writes it (its own frequency
//! formula, its own column construction), sharing no code with the library.

use crate::support::{Rng, hard_positions, max_abs_diff};
use approx::abs_diff_eq;
use astro_float::{BigFloat, Consts, RoundingMode};
use posenc::{ACCURACY_BOUND, Frequencies, PeSpec, Variant, cpu, reference};

const P: usize = 320;
const RM: RoundingMode = RoundingMode::ToEven;

/// An independent big-float oracle: sin and cos of `position * w` for an angular frequency
/// `w`, reduced modulo 2pi at 320 bits before float64 takes over.
struct Oracle {
    cc: Consts,
    two_pi: BigFloat,
}

impl Oracle {
    fn new() -> Self {
        let mut cc = Consts::new().unwrap();
        let two_pi = cc.pi(P, RM).mul(&BigFloat::from_u8(2, P), P, RM);
        Self { cc, two_pi }
    }

    fn f(&self, x: f64) -> BigFloat {
        BigFloat::from_f64(x, P)
    }

    fn exp(&mut self, x: &BigFloat) -> BigFloat {
        x.exp(P, RM, &mut self.cc)
    }

    fn ln(&mut self, x: f64) -> BigFloat {
        self.f(x).ln(P, RM, &mut self.cc)
    }

    fn to_f64(x: &BigFloat) -> f64 {
        format!("{x}").parse().unwrap()
    }

    /// (sin, cos) of `position * w`.
    fn sincos(&self, position: u64, w: &BigFloat) -> (f64, f64) {
        let angle = w.mul(&BigFloat::from_u64(position, 64), P, RM);
        let turns = angle.div(&self.two_pi, P, RM);
        let frac = turns.sub(&turns.floor(), P, RM);
        let reduced = Self::to_f64(&frac.mul(&self.two_pi, P, RM));
        reduced.sin_cos()
    }

    /// The angular frequencies of each published formula, evaluated directly (each `w_i`
    /// from its own exponential, not by repeated ratios as the library does).
    fn frequencies(&mut self, spec: &PeSpec) -> Vec<BigFloat> {
        let d = spec.dim();
        let int = |i: u32| BigFloat::from_u32(i, P);
        match spec.variant() {
            Variant::Vaswani | Variant::DistilBert | Variant::Marian => {
                // pos / base^(2 (j // 2) / d) for j = 0, 2, 4, ...
                let ln_base = self.ln(spec.base());
                (0..d.div_ceil(2))
                    .map(|i| {
                        let e = int(2 * i).div(&int(d), P, RM).mul(&ln_base, P, RM).neg();
                        self.exp(&e)
                    })
                    .collect()
            }
            Variant::Fairseq | Variant::Whisper => {
                let h = d / 2;
                let inc = self.ln(spec.base()).div(&int(h - 1), P, RM);
                (0..h).map(|i| self.exp(&int(i).mul(&inc, P, RM).neg())).collect()
            }
            Variant::Tensor2Tensor => {
                let n = d / 2;
                let ratio = self.f(spec.base()).div(&self.f(spec.min_timescale()), P, RM);
                let inc = ratio.ln(P, RM, &mut self.cc).div(&int((n.max(2)) - 1), P, RM);
                let min = self.f(spec.min_timescale());
                (0..n).map(|i| min.mul(&self.exp(&int(i).mul(&inc, P, RM).neg()), P, RM)).collect()
            }
            other => panic!("no oracle for {other}"),
        }
    }

    /// One row as each project builds it.
    fn row(&mut self, spec: &PeSpec, w: &[BigFloat], position: u32) -> Vec<f64> {
        let d = spec.dim() as usize;
        let p = u64::from(position) + u64::from(spec.start_index());
        let sc: Vec<(f64, f64)> = w.iter().map(|w| self.sincos(p, w)).collect();
        let mut row = vec![0.0; d];
        match spec.variant() {
            Variant::Vaswani | Variant::DistilBert => {
                // out[:, 0::2] = sin(angle[:, 0::2]); out[:, 1::2] = cos(angle[:, 1::2])
                for (j, v) in row.iter_mut().enumerate() {
                    *v = if j % 2 == 0 { sc[j / 2].0 } else { sc[j / 2].1 };
                }
            }
            Variant::Marian => {
                // sentinel = ceil(d/2); out[:, :sentinel] = sin(angle[:, 0::2]);
                // out[:, sentinel:] = cos(angle[:, 1::2])
                let sentinel = d.div_ceil(2);
                for k in 0..sentinel {
                    row[k] = sc[k].0;
                }
                for k in 0..d / 2 {
                    row[sentinel + k] = sc[k].1;
                }
            }
            Variant::Tensor2Tensor | Variant::Fairseq | Variant::Whisper => {
                // concat([sin, cos], 1), then a zero column when d is odd.
                let h = d / 2;
                for k in 0..h {
                    row[k] = sc[k].0;
                    row[h + k] = sc[k].1;
                }
                if spec.variant() == Variant::Fairseq && spec.padding_idx() == Some(position) {
                    row.fill(0.0);
                }
            }
            other => panic!("no oracle for {other}"),
        }
        row
    }
}

fn specs() -> Vec<PeSpec> {
    let mut out = Vec::new();
    for d in [1, 2, 3, 4, 5, 8, 9, 64, 77] {
        for v in Variant::ALL {
            if let Ok(s) = PeSpec::for_variant(v, d) {
                out.push(s);
            }
        }
    }
    let t2t = PeSpec::for_variant(Variant::Tensor2Tensor, 33).unwrap();
    out.push(t2t.clone().with_timescales(0.5, 2e5).unwrap().with_start_index(5));
    out.push(t2t.with_start_index(u32::MAX - 2));
    out.push(PeSpec::for_variant(Variant::Fairseq, 16).unwrap().with_padding_idx(None));
    out.push(PeSpec::for_variant(Variant::Fairseq, 15).unwrap().with_padding_idx(Some(1 << 31)));
    // The padding position is a position as given: row 1 stays the zero row when the
    // encodings start at 1 (row 0 is then the encoding of 1).
    out.push(PeSpec::for_variant(Variant::Fairseq, 6).unwrap().with_start_index(1));
    out.push(PeSpec::for_variant(Variant::Whisper, 40).unwrap().with_base(500_000.0).unwrap());
    out.push(PeSpec::for_variant(Variant::Marian, 31).unwrap().with_base(1e7).unwrap());
    out
}

fn positions(spec: &PeSpec, rng: &mut Rng) -> Vec<u32> {
    let mut p = hard_positions(rng, 8);
    p.extend(spec.padding_idx());
    p
}

#[test]
fn every_variant_matches_its_published_formula_within_6e8() {
    let mut oracle = Oracle::new();
    let mut rng = Rng::new(51);
    for spec in specs() {
        let w = oracle.frequencies(&spec);
        let positions = positions(&spec, &mut rng);
        let fast = cpu::table(&spec, &positions);
        let exact = reference::table(&spec, &positions);
        for (k, &p) in positions.iter().enumerate() {
            let want = oracle.row(&spec, &w, p);
            let (err, col) =
                max_abs_diff(fast.row(k).iter().map(|&v| f64::from(v)), want.iter().copied());
            assert!(err <= ACCURACY_BOUND, "{spec:?} position {p} column {col}: error {err:e}");
            let (err, col) = max_abs_diff(exact.row(k).iter().copied(), want.iter().copied());
            assert!(err <= 1e-12, "reference {spec:?} position {p} column {col}: {err:e}");
        }
    }
}

#[test]
fn fairseq_zeroes_the_padding_row_and_appends_a_zero_column() {
    let spec = PeSpec::for_variant(Variant::Fairseq, 7).unwrap();
    let t = cpu::table(&spec, &[0, 1, 2]);
    assert!(t.row(1).iter().all(|&v| v.to_bits() == 0), "padding row: {:?}", t.row(1));
    assert_eq!(t[[0, 6]].to_bits(), 0);
    assert_eq!(t[[2, 6]].to_bits(), 0);
    assert_eq!(t[[0, 3]], 1.0, "cos(0) opens the cos half");
}

/// The float32 recipes, written independently: frequencies as each framework computes them
/// in float32 (pow and exp through float64, then rounded), the angle as an f32 product.
fn f32_recipe(spec: &PeSpec) -> Vec<f32> {
    let d = spec.dim();
    match spec.variant() {
        Variant::Vaswani | Variant::DistilBert | Variant::Marian => (0..d.div_ceil(2))
            .map(|i| {
                let e = (2 * i) as f32 / d as f32;
                1.0 / (f64::from(spec.base() as f32).powf(f64::from(e)) as f32)
            })
            .collect(),
        Variant::Fairseq | Variant::Whisper => {
            let h = d / 2;
            let inc = -(spec.base().ln() / f64::from(h - 1)) as f32;
            (0..h).map(|i| (f64::from(i as f32 * inc)).exp() as f32).collect()
        }
        Variant::Tensor2Tensor => {
            let n = d / 2;
            let inc = ((spec.base() / spec.min_timescale()).ln() as f32) / (n.max(2) - 1) as f32;
            let min = spec.min_timescale() as f32;
            (0..n).map(|i| min * (f64::from(i as f32 * -inc)).exp() as f32).collect()
        }
        other => panic!("no recipe for {other}"),
    }
}

#[test]
fn f32_frequencies_take_the_exact_sin_of_the_float32_angle() {
    let mut rng = Rng::new(52);
    for spec in specs() {
        let spec = spec.with_frequencies(Frequencies::F32);
        let w = f32_recipe(&spec);
        let positions = positions(&spec, &mut rng);
        let fast = cpu::table(&spec, &positions);
        let exact = reference::table(&spec, &positions);
        let cols = |d: usize| -> Vec<(usize, bool, usize)> {
            // (frequency, is_cos, column) as the oracle's row builder places them.
            let mut v = Vec::new();
            let h = d / 2;
            match spec.variant() {
                Variant::Vaswani | Variant::DistilBert => {
                    (0..d).for_each(|j| v.push((j / 2, j % 2 == 1, j)));
                }
                Variant::Marian => {
                    let s = d.div_ceil(2);
                    (0..s).for_each(|k| v.push((k, false, k)));
                    (0..h).for_each(|k| v.push((k, true, s + k)));
                }
                _ => {
                    (0..h).for_each(|k| v.push((k, false, k)));
                    (0..h).for_each(|k| v.push((k, true, h + k)));
                }
            }
            v
        };
        for (k, &p) in positions.iter().enumerate() {
            if spec.padding_idx() == Some(p) {
                assert!(fast.row(k).iter().all(|&v| v == 0.0));
                continue;
            }
            let pos = (u64::from(p) + u64::from(spec.start_index())) as f32;
            for (i, is_cos, col) in cols(spec.dim() as usize) {
                let angle = f64::from(pos * w[i]);
                let want = if is_cos { angle.cos() } else { angle.sin() };
                let got = f64::from(fast[[k, col]]);
                assert!(
                    abs_diff_eq!(got, want, epsilon = ACCURACY_BOUND),
                    "{spec:?} position {p} column {col}: {got} vs {want}"
                );
                assert!((exact[[k, col]] - want).abs() <= 1e-12, "reference {spec:?} {p} {col}");
            }
        }
    }
}

#[test]
fn f32_frequencies_reproduce_the_naive_error_at_large_positions() {
    // The point of the mode: near 2^24 the float32 angle is far from the true one, and the
    // table follows the float32 angle, not the true phase.
    let exact = PeSpec::new(64).unwrap();
    let f32s = exact.clone().with_frequencies(Frequencies::F32);
    let positions = [(1u32 << 24) + 1, 3 << 24, u32::MAX];
    let a = cpu::table(&exact, &positions);
    let b = cpu::table(&f32s, &positions);
    let (diff, _) = max_abs_diff(a.iter().map(|&v| f64::from(v)), b.iter().map(|&v| f64::from(v)));
    assert!(diff > 0.1, "float32 angles should differ visibly at 2^24: {diff}");
}

#[test]
fn start_index_past_u32_max_stays_exact() {
    // Position p with start s is the encoding of p + s, even when the sum passes 2^32.
    let base = PeSpec::for_variant(Variant::Tensor2Tensor, 16).unwrap();
    let shifted = base.clone().with_start_index(10);
    let a = cpu::table(&shifted, &[u32::MAX - 3]);
    let b = reference::table(&base.with_start_index(0), &[]);
    assert_eq!(b.nrows(), 0);
    let mut oracle = Oracle::new();
    let w = oracle.frequencies(&shifted);
    let want = oracle.row(&shifted, &w, u32::MAX - 3);
    let (err, _) = max_abs_diff(a.row(0).iter().map(|&v| f64::from(v)), want);
    assert!(err <= ACCURACY_BOUND, "{err:e}");
}

/// A model's own frequencies ([`PeSpec::with_inv_freq`]): what a float32 framework holds
/// (each variant's float32 recipe, widened exactly) gives the table of sin and cos of those
/// very values, within the bound of the oracle at every hard position and in every
/// variant's columns, and is not the formula's table.
#[test]
fn given_frequencies_are_taken_exactly_in_every_variant() {
    let mut oracle = Oracle::new();
    let mut rng = Rng::new(53);
    let mut differs = 0;
    for spec in specs() {
        let stored: Vec<f64> = f32_recipe(&spec).iter().map(|&v| f64::from(v)).collect();
        let given = spec.clone().with_inv_freq(&stored).unwrap();
        assert_eq!(given.inv_freq(), Some(&stored[..]));
        let w: Vec<BigFloat> = stored.iter().map(|&v| oracle.f(v)).collect();
        let positions = positions(&given, &mut rng);
        let fast = cpu::table(&given, &positions);
        let exact = reference::table(&given, &positions);
        for (k, &p) in positions.iter().enumerate() {
            let want = oracle.row(&given, &w, p);
            let (err, col) =
                max_abs_diff(fast.row(k).iter().map(|&v| f64::from(v)), want.iter().copied());
            assert!(err <= ACCURACY_BOUND, "{given:?} position {p} column {col}: error {err:e}");
            let (err, col) = max_abs_diff(exact.row(k).iter().copied(), want.iter().copied());
            assert!(err <= 1e-12, "reference {given:?} position {p} column {col}: {err:e}");
        }
        let formula = cpu::table(&spec, &positions);
        let (diff, _) =
            max_abs_diff(fast.iter().map(|&v| f64::from(v)), formula.iter().map(|&v| f64::from(v)));
        differs += usize::from(diff > 1e-3);
    }
    assert!(differs > specs().len() / 2, "float32 frequencies move most tables: {differs}");
}

/// The range's edges and float64 values no float32 holds, exact to the oracle in both
/// frequency modes: exact phases of the values themselves, and with `Frequencies::F32`
/// the exact sin and cos of the float32 angle `f32(p) * f32(w)`.
#[test]
fn given_frequencies_at_the_edges_of_their_range_stay_exact_in_both_modes() {
    use posenc::{MAX_INV_FREQ, MIN_INV_FREQ};
    let mut oracle = Oracle::new();
    let mut rng = Rng::new(54);
    let values = [MAX_INV_FREQ, MIN_INV_FREQ, 1e10, 3.0, 0.1, 1.0 / 3.0, 2e-30, 7.5e-5];
    for (variant, d) in [(Variant::Vaswani, 16), (Variant::Marian, 15), (Variant::Fairseq, 17)] {
        let spec = PeSpec::for_variant(variant, d).unwrap();
        let w64: Vec<f64> = values[..spec.n_freqs() as usize].to_vec();
        let given = spec.with_start_index(3).with_inv_freq(&w64).unwrap();
        let w: Vec<BigFloat> = w64.iter().map(|&v| oracle.f(v)).collect();
        let positions = positions(&given, &mut rng);
        let fast = cpu::table(&given, &positions);
        let f32s = given.clone().with_frequencies(Frequencies::F32);
        let fast32 = cpu::table(&f32s, &positions);
        // The float32 angle's sin and cos, placed by the oracle's row builder: its angles
        // at position 1 of a spec numbering from 0 with no zero row.
        let plain = f32s.clone().with_start_index(0).with_padding_idx(None);
        for (k, &p) in positions.iter().enumerate() {
            if given.padding_idx() == Some(p) {
                assert!(fast.row(k).iter().chain(fast32.row(k)).all(|&v| v.to_bits() == 0));
                continue;
            }
            let want = oracle.row(&given, &w, p);
            let (err, col) =
                max_abs_diff(fast.row(k).iter().map(|&v| f64::from(v)), want.iter().copied());
            assert!(err <= ACCURACY_BOUND, "{given:?} position {p} column {col}: {err:e}");
            let pos = (u64::from(p) + 3) as f32;
            let angles: Vec<BigFloat> =
                w64.iter().map(|&v| oracle.f(f64::from(pos * v as f32))).collect();
            let want = oracle.row(&plain, &angles, 1);
            let (err, col) =
                max_abs_diff(fast32.row(k).iter().map(|&v| f64::from(v)), want.iter().copied());
            assert!(err <= ACCURACY_BOUND, "f32 {given:?} position {p} column {col}: {err:e}");
        }
    }
}

#[test]
fn given_frequencies_are_refused_naming_the_count_or_the_value() {
    let spec = PeSpec::for_variant(Variant::Marian, 7).unwrap();
    assert_eq!(spec.n_freqs(), 4);
    let err = spec.clone().with_inv_freq(&[1.0; 3]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid inv_freq: 3 values for the 4 frequencies of marian at dim 7 (allowed: one \
         value per frequency: ceil(dim / 2) for vaswani, distilbert and marian, floor(dim / 2) \
         for the others)"
    );
    let past = posenc::MAX_INV_FREQ * (1.0 + f64::EPSILON);
    let below = posenc::MIN_INV_FREQ * (1.0 - f64::EPSILON);
    for (bad, value) in [
        (0.0, "0 at index 2"),
        (-1.0, "-1 at index 2"),
        (f64::NAN, "NaN at index 2"),
        (f64::INFINITY, "inf at index 2"),
        (past, "18446744073709556000 at index 2"),
        (below, "1.1754943508222872e-38 at index 2"),
    ] {
        match spec.clone().with_inv_freq(&[1.0, 0.5, bad, 0.25]) {
            Err(posenc::Error::InvalidParameter { field: "inv_freq", value: v, .. }) => {
                assert_eq!(v, value)
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    let empty = PeSpec::new(2).unwrap().with_inv_freq(&[]).unwrap_err();
    assert!(empty.to_string().contains("0 values for the 1 frequencies"), "{empty}");
}
