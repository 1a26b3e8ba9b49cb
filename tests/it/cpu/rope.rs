//! RoPE on the CPU against an independent reference of the published formulas.
//!
//! The reference reads the same Hugging Face `rope_scaling` JSON itself (serde_json, not the
//! library's reader) and evaluates `transformers.modeling_rope_utils`' formulas written out
//! here once, generically: in float64, to check the library's frequencies the way Hugging
//! Face's own float64 code would compute them, and in 320-bit big floats, for the rotation
//! reference, whose angle `p * w_i` is reduced exactly even at positions near 2^31 and
//! 2^32 (float64 `p * w` alone is off by ~2.4e-7 rad there).
//!
//! Tolerance of an element `out = x c -+ y s` (a rigorous bound, not a fitted one): the
//! library's cos and sin are within `E = 6e-8` of the truth (its promise, tested for tables),
//! `c` and `s` times the attention factor `af` round once in f32 (relative 2^-24), each
//! product rounds once (2^-24) and the sum once (2^-24 of the result), so
//! `|out - exact| <= af (|x| + |y|) (E + 3 * 2^-24) (1 + 1e-6)`; 16-bit results add half an
//! ulp of their type for the final rounding.

use std::cell::RefCell;

use crate::support::Rng;
use crate::support::rope::{hard_batch, pair_of, tensor, token_major, ulp_of};
use astro_float::{BigFloat, Consts, RoundingMode};
use half::{bf16, f16};
use ndarray::{Array2, Array4, ArrayView2, ArrayView4};
use posenc::rope::{Dtype, Element, Layout, Pairing, RopeSpec, Scaling};
use posenc::{Error, cpu, positions};
use proptest::prelude::Strategy;
use serde_json::Value;

// ---------------------------------------------------------------------------------------
// The formulas, generic over the number type.

/// The arithmetic the formulas need.
trait Num: Clone + PartialOrd {
    fn of(v: f64) -> Self;
    fn add(&self, o: &Self) -> Self;
    fn sub(&self, o: &Self) -> Self;
    fn mul(&self, o: &Self) -> Self;
    fn div(&self, o: &Self) -> Self;
    fn ln(&self) -> Self;
    fn exp(&self) -> Self;
    fn floor(&self) -> Self;
    fn ceil(&self) -> Self;
    fn pi() -> Self;
    /// `self^e = exp(e ln self)`.
    fn pow(&self, e: &Self) -> Self {
        e.mul(&self.ln()).exp()
    }
}

impl Num for f64 {
    fn of(v: f64) -> Self {
        v
    }
    fn add(&self, o: &Self) -> Self {
        self + o
    }
    fn sub(&self, o: &Self) -> Self {
        self - o
    }
    fn mul(&self, o: &Self) -> Self {
        self * o
    }
    fn div(&self, o: &Self) -> Self {
        self / o
    }
    fn ln(&self) -> Self {
        f64::ln(*self)
    }
    fn exp(&self) -> Self {
        f64::exp(*self)
    }
    fn floor(&self) -> Self {
        f64::floor(*self)
    }
    fn ceil(&self) -> Self {
        f64::ceil(*self)
    }
    fn pi() -> Self {
        std::f64::consts::PI
    }
    fn pow(&self, e: &Self) -> Self {
        self.powf(*e)
    }
}

const P: usize = 320;
const RM: RoundingMode = RoundingMode::ToEven;

thread_local! {
    static CONSTS: RefCell<Consts> = RefCell::new(Consts::new().unwrap());
}

#[derive(Clone, Debug, PartialEq, PartialOrd)]
struct Big(BigFloat);

impl Num for Big {
    fn of(v: f64) -> Self {
        Big(BigFloat::from_f64(v, P))
    }
    fn add(&self, o: &Self) -> Self {
        Big(self.0.add(&o.0, P, RM))
    }
    fn sub(&self, o: &Self) -> Self {
        Big(self.0.sub(&o.0, P, RM))
    }
    fn mul(&self, o: &Self) -> Self {
        Big(self.0.mul(&o.0, P, RM))
    }
    fn div(&self, o: &Self) -> Self {
        Big(self.0.div(&o.0, P, RM))
    }
    fn ln(&self) -> Self {
        CONSTS.with(|cc| Big(self.0.ln(P, RM, &mut cc.borrow_mut())))
    }
    fn exp(&self) -> Self {
        CONSTS.with(|cc| Big(self.0.exp(P, RM, &mut cc.borrow_mut())))
    }
    fn floor(&self) -> Self {
        Big(self.0.floor())
    }
    fn ceil(&self) -> Self {
        Big(self.0.ceil())
    }
    fn pi() -> Self {
        CONSTS.with(|cc| Big(cc.borrow_mut().pi(P, RM)))
    }
}

impl Big {
    /// To float64 through the decimal text astro-float prints (Rust's parser rounds
    /// correctly), so nothing here shares code with the library.
    fn to_f64(&self) -> f64 {
        format!("{}", self.0).parse().unwrap()
    }
}

/// A field of the JSON object as f64, if present and not null.
fn get(json: &Value, key: &str) -> Option<f64> {
    json.get(key).and_then(Value::as_f64)
}

/// `inv_freq` (radians per position) and the attention factor of Hugging Face's
/// `_compute_*_parameters` for a rope_scaling JSON object, rotary dim `dim`, base `base`
/// and sequence length `seq_len`, in the number type `N` (the attention factor in f64,
/// as Hugging Face computes it).
fn hf_inv_freq<N: Num>(json: &Value, dim: usize, base: f64, seq_len: u64) -> (Vec<N>, f64) {
    let rope_type = json
        .get("rope_type")
        .filter(|v| !v.is_null())
        .or_else(|| json.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let n = |v: f64| N::of(v);
    let one = n(1.0);
    let half = dim / 2;
    // base^(2i / dim) for a base given as N.
    let pos_freqs = |b: &N| -> Vec<N> {
        (0..half).map(|i| b.pow(&n(2.0 * i as f64).div(&n(dim as f64)))).collect()
    };
    let inv = |b: &N| -> Vec<N> { pos_freqs(b).iter().map(|p| one.div(p)).collect() };
    let base_n = n(base);
    let max = get(json, "max_position_embeddings");
    match rope_type {
        "default" => (inv(&base_n), 1.0),
        "linear" => {
            let f = n(get(json, "factor").unwrap());
            (inv(&base_n).iter().map(|w| w.div(&f)).collect(), 1.0)
        }
        "dynamic" => {
            let m = max.or_else(|| get(json, "original_max_position_embeddings")).unwrap();
            let f = get(json, "factor").unwrap();
            let s = (seq_len as f64).max(m);
            if dim == 2 {
                return (vec![one], 1.0);
            }
            let g = n(f).mul(&n(s)).div(&n(m)).sub(&n(f - 1.0));
            let scaled = base_n.mul(&g.pow(&n(dim as f64).div(&n(dim as f64 - 2.0))));
            (inv(&scaled), 1.0)
        }
        "yarn" => {
            let original = get(json, "original_max_position_embeddings").or(max).unwrap();
            let factor = get(json, "factor").unwrap_or_else(|| max.unwrap() / original);
            let mscale = |s: f64, m: f64| if s <= 1.0 { 1.0 } else { 0.1 * m * s.ln() + 1.0 };
            let af = match (
                get(json, "attention_factor"),
                get(json, "mscale").filter(|&v| v != 0.0),
                get(json, "mscale_all_dim").filter(|&v| v != 0.0),
            ) {
                (Some(a), _, _) => a,
                (None, Some(m), Some(a)) => mscale(factor, m) / mscale(factor, a),
                _ => mscale(factor, 1.0),
            };
            let beta_fast = get(json, "beta_fast").filter(|&v| v != 0.0).unwrap_or(32.0);
            let beta_slow = get(json, "beta_slow").filter(|&v| v != 0.0).unwrap_or(1.0);
            let truncate = json.get("truncate").and_then(Value::as_bool).unwrap_or(true);
            let correction = |rot: f64| {
                let two_pi = N::pi().mul(&n(2.0));
                n(dim as f64)
                    .mul(&n(original).div(&n(rot).mul(&two_pi)).ln())
                    .div(&n(2.0).mul(&base_n.ln()))
            };
            let (mut low, mut high) = (correction(beta_fast), correction(beta_slow));
            if truncate {
                low = low.floor();
                high = high.ceil();
            }
            if low < n(0.0) {
                low = n(0.0);
            }
            if high > n(dim as f64 - 1.0) {
                high = n(dim as f64 - 1.0);
            }
            if low == high {
                high = high.add(&n(0.001));
            }
            let pf = pos_freqs(&base_n);
            let w = (0..half)
                .map(|i| {
                    let mut ramp = n(i as f64).sub(&low).div(&high.sub(&low));
                    if ramp < n(0.0) {
                        ramp = n(0.0);
                    }
                    if ramp > one {
                        ramp = one.clone();
                    }
                    let extrapolation_factor = one.sub(&ramp);
                    let extrapolation = one.div(&pf[i]);
                    let interpolation = one.div(&n(factor).mul(&pf[i]));
                    interpolation
                        .mul(&one.sub(&extrapolation_factor))
                        .add(&extrapolation.mul(&extrapolation_factor))
                })
                .collect();
            (w, af)
        }
        "longrope" => {
            let original = get(json, "original_max_position_embeddings").or(max).unwrap();
            let factor = get(json, "factor").or(max.map(|m| m / original));
            let af = match (get(json, "attention_factor"), factor) {
                (Some(a), _) => a,
                (None, Some(f)) if f > 1.0 => (1.0 + f.ln() / original.ln()).sqrt(),
                _ => 1.0,
            };
            let key = if seq_len as f64 > original { "long_factor" } else { "short_factor" };
            let ext: Vec<f64> =
                json[key].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            let pf = pos_freqs(&base_n);
            (pf.iter().zip(&ext).map(|(p, &e)| one.div(&n(e).mul(p))).collect(), af)
        }
        "llama3" => {
            let factor = n(get(json, "factor").unwrap());
            let lff = get(json, "low_freq_factor").unwrap();
            let hff = get(json, "high_freq_factor").unwrap();
            let old = get(json, "original_max_position_embeddings").unwrap();
            let low_wavelen = n(old / lff);
            let high_wavelen = n(old / hff);
            let w = inv(&base_n)
                .into_iter()
                .map(|w| {
                    let wavelen = N::pi().mul(&n(2.0)).div(&w);
                    if wavelen < high_wavelen {
                        w
                    } else if wavelen > low_wavelen {
                        w.div(&factor)
                    } else {
                        let smooth = n(old).div(&wavelen).sub(&n(lff)).div(&n(hff - lff));
                        one.sub(&smooth).mul(&w).div(&factor).add(&smooth.mul(&w))
                    }
                })
                .collect();
            (w, 1.0)
        }
        other => panic!("no reference for {other}"),
    }
}

// ---------------------------------------------------------------------------------------
// The rotation reference and the comparison.

/// `(cos, sin)` of `p * w` in float64, the angle reduced to one turn in big floats first.
fn exact_cos_sin(p: u32, w: &Big) -> (f64, f64) {
    let turns = w.div(&Big::pi().mul(&Big::of(2.0)));
    let phase = Big(turns.mul(&Big::of(f64::from(p))).0.fract()).to_f64();
    // Centre on zero so angles near a full turn keep their absolute precision.
    let centred = if phase >= 0.5 { phase - 1.0 } else { phase };
    let (s, c) = (std::f64::consts::TAU * centred).sin_cos();
    (c, s)
}

/// The library's promised bound on its cos/sin error.
const E_CS: f64 = posenc::ACCURACY_BOUND;

/// Checks the library's RoPE of `x` (any dtype and layout) against the reference of the
/// scaling JSON `json`, returning the largest error relative to its bound's scale
/// `af (|x| + |y|)`.
#[allow(clippy::too_many_arguments)]
fn check_against_reference<T: Element>(
    what: &str,
    json: &Value,
    spec: &RopeSpec,
    x: ArrayView4<'_, T>,
    positions: ArrayView2<'_, u32>,
    layout: Layout,
) -> f64 {
    let got = cpu::rope(spec, x, positions, layout).unwrap();
    let r = spec.rotary_dim() as usize;
    let seq_len = positions.iter().max().map_or(0, |&p| u64::from(p) + 1);
    let (w, af) = hf_inv_freq::<Big>(json, r, spec.base(), seq_len);
    let (x, got) = (token_major(x, layout), token_major(got.view(), layout));
    let (batch, len, heads, dh) = x.dim();
    let mut worst = 0.0f64;
    for b in 0..batch {
        for l in 0..len {
            let p = positions[[b, l]];
            let cs: Vec<(f64, f64)> = w.iter().map(|w| exact_cos_sin(p, w)).collect();
            for h in 0..heads {
                for d in 0..dh {
                    let (xv, gv) = (x[[b, l, h, d]], got[[b, l, h, d]]);
                    if d >= r {
                        assert_eq!(
                            bytemuck::bytes_of(&gv),
                            bytemuck::bytes_of(&xv),
                            "{what}: pass-through [{b}, {l}, {h}, {d}]"
                        );
                        continue;
                    }
                    let (i, partner, first) = pair_of(spec.pairing(), r, d);
                    let (c, s) = cs[i];
                    let xf = f64::from(xv.to_f32());
                    let yf = f64::from(x[[b, l, h, partner]].to_f32());
                    let exact = if first { af * (xf * c - yf * s) } else { af * (xf * c + yf * s) };
                    let scale = af * (xf.abs() + yf.abs());
                    let mut tol = scale * (E_CS + 3.0 * 2f64.powi(-24)) * (1.0 + 1e-6);
                    if T::DTYPE != Dtype::F32 {
                        tol += ulp_of(T::DTYPE, exact.abs() + tol) / 2.0;
                    }
                    let err = (f64::from(gv.to_f32()) - exact).abs();
                    assert!(
                        err <= tol,
                        "{what}: [{b}, {l}, {h}, {d}] at position {p}: got {:e}, exact {exact:e}, \
                         error {err:e} > {tol:e}",
                        gv.to_f32()
                    );
                    if scale > 0.0 && T::DTYPE == Dtype::F32 {
                        worst = worst.max(err / scale);
                    }
                }
            }
        }
    }
    worst
}

/// Scaling configurations as Hugging Face writes them, with a rotary dim they fit.
fn configs() -> Vec<(&'static str, String, u32)> {
    let long_short: Vec<String> = (0..16).map(|i| format!("{}", 1.0 + 0.05 * i as f64)).collect();
    let long_long: Vec<String> = (0..16).map(|i| format!("{}", 1.5 + 1.7 * i as f64)).collect();
    let longrope = |max: u64| {
        format!(
            r#"{{"rope_type": "longrope", "short_factor": [{}], "long_factor": [{}],
                "original_max_position_embeddings": 4096, "max_position_embeddings": {max}}}"#,
            long_short.join(", "),
            long_long.join(", ")
        )
    };
    vec![
        ("default", "null".into(), 64),
        ("default named", r#"{"rope_type": "default"}"#.into(), 32),
        ("linear", r#"{"type": "linear", "factor": 4.0}"#.into(), 64),
        (
            "dynamic",
            r#"{"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 2048}"#.into(),
            64,
        ),
        (
            "dynamic r2",
            r#"{"rope_type": "dynamic", "factor": 3.0, "max_position_embeddings": 16}"#.into(),
            2,
        ),
        (
            "yarn deepseek",
            r#"{"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096}"#
                .into(),
            64,
        ),
        (
            "yarn gpt-oss",
            r#"{"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                "truncate": false, "original_max_position_embeddings": 4096}"#
                .into(),
            64,
        ),
        (
            "yarn qwen",
            r#"{"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}"#.into(),
            128,
        ),
        (
            "yarn attention factor",
            r#"{"rope_type": "yarn", "factor": 8.0, "attention_factor": 0.75,
                "original_max_position_embeddings": 2048}"#
                .into(),
            32,
        ),
        ("longrope", longrope(131072), 32),
        ("longrope factor 1", longrope(4096), 32),
        (
            "llama3",
            r#"{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}"#
                .into(),
            128,
        ),
        (
            "llama3 narrow",
            r#"{"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                "high_freq_factor": 1.5, "original_max_position_embeddings": 512}"#
                .into(),
            64,
        ),
    ]
}

fn spec_for(json_text: &str, head_dim: u32, r: u32, base: f64, pairing: Pairing) -> RopeSpec {
    RopeSpec::partial(head_dim, r)
        .unwrap()
        .with_base(base)
        .unwrap()
        .with_pairing(pairing)
        .with_scaling(Scaling::from_hf_json(json_text).unwrap())
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// Tests.

#[test]
fn frequencies_match_the_float64_formulas() {
    for (what, text, r) in configs() {
        let json: Value = serde_json::from_str(&text).unwrap();
        for base in [10000.0, 500000.0, 1e6] {
            let spec = spec_for(&text, r, r, base, Pairing::Neox);
            for seq_len in [0u64, 100, 4096, 4097, 1 << 20, 1 << 31] {
                let (want, af) = hf_inv_freq::<f64>(&json, r as usize, base, seq_len);
                let got = spec.frequencies(seq_len);
                assert_eq!(got.attention_factor(), af as f32, "{what}: attention factor");
                for (i, (&g, &w)) in got.inv_freq().iter().zip(&want).enumerate() {
                    // float64's pow/exp/ln chains: a few ulps; 1e-13 leaves a wide margin.
                    assert!(
                        (g - w).abs() <= 1e-13 * w,
                        "{what} base {base} seq {seq_len}: w[{i}] = {g:e}, float64 formula {w:e}"
                    );
                }
            }
        }
    }
}

#[test]
fn big_float_formulas_agree_with_float64_ones() {
    // The two instances of the reference formulas check each other.
    for (what, text, r) in configs() {
        let json: Value = serde_json::from_str(&text).unwrap();
        let (a, _) = hf_inv_freq::<f64>(&json, r as usize, 10000.0, 1 << 20);
        let (b, _) = hf_inv_freq::<Big>(&json, r as usize, 10000.0, 1 << 20);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y.to_f64()).abs() <= 1e-13 * x, "{what}");
        }
    }
}

#[test]
fn every_scheme_matches_the_reference_at_hard_positions() {
    let mut rng = Rng::new(31);
    let mut worst = 0.0f64;
    for (k, (what, text, r)) in configs().into_iter().enumerate() {
        let json: Value = serde_json::from_str(&text).unwrap();
        for pairing in [Pairing::Neox, Pairing::Gptj] {
            for layout in [Layout::Blhd, Layout::Bhld] {
                // Partial rotary with a pass-through tail, and an odd head dim.
                let head_dim = r + 2 * (k as u32 % 2) + u32::from((k as u32).is_multiple_of(3));
                let spec = spec_for(&text, head_dim, r, 500000.0, pairing);
                let positions = hard_batch(&mut rng, 2, 5);
                let shape = match layout {
                    Layout::Blhd => [2, 5, 2, head_dim as usize],
                    Layout::Bhld => [2, 2, 5, head_dim as usize],
                };
                let what = format!("{what} {pairing:?} {layout:?} head_dim {head_dim}");
                let x = tensor::<f32>(shape, k as u64);
                let e = check_against_reference(
                    &what,
                    &json,
                    &spec,
                    x.view(),
                    positions.view(),
                    layout,
                );
                worst = worst.max(e);
                let x = tensor::<f16>(shape, k as u64);
                check_against_reference(&what, &json, &spec, x.view(), positions.view(), layout);
                let x = tensor::<bf16>(shape, k as u64);
                check_against_reference(&what, &json, &spec, x.view(), positions.view(), layout);
            }
        }
    }
    // Measured, for docs/rope.md: the worst f32 error in units of af (|x| + |y|).
    eprintln!("worst f32 error / (af (|x| + |y|)): {worst:e}");
}

#[test]
fn positions_near_2_24_2_31_and_2_32_with_decoding_offsets() {
    let text = r#"{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}"#;
    let json: Value = serde_json::from_str(text).unwrap();
    let spec = spec_for(text, 128, 128, 500000.0, Pairing::Neox);
    let offsets = [(1u32 << 24) - 2, (1 << 31) - 3, (1 << 31) + 1, u32::MAX - 4];
    let positions = positions::from_offsets(&offsets, 5).unwrap();
    for layout in [Layout::Blhd, Layout::Bhld] {
        let shape = match layout {
            Layout::Blhd => [4, 5, 3, 128],
            Layout::Bhld => [4, 3, 5, 128],
        };
        let x = tensor::<f32>(shape, 5);
        check_against_reference("far positions", &json, &spec, x.view(), positions.view(), layout);
    }
    // Decoding one token at a time equals the same tokens in one prefill call.
    let x = tensor::<f32>([1, 6, 2, 128], 6);
    let all = cpu::rope(
        &spec,
        x.view(),
        Array2::from_shape_fn((1, 6), |(_, l)| 1000 + l as u32).view(),
        Layout::Blhd,
    )
    .unwrap();
    // (llama3 does not depend on the sequence length, so single steps see the same w.)
    for l in 0..6 {
        let one = x.slice(ndarray::s![.., l..l + 1, .., ..]);
        let p = positions::from_offsets(&[1000 + l as u32], 1).unwrap();
        let step = cpu::rope(&spec, one, p.view(), Layout::Blhd).unwrap();
        assert_eq!(step, all.slice(ndarray::s![.., l..l + 1, .., ..]), "token {l}");
    }
}

#[test]
fn cos_sin_are_within_6e_8_of_the_exact_values_at_every_range() {
    // The table the rotation multiplies by, for Llama 3.1's scaling (d = 128, base 5e5),
    // against the exactly reduced angle: the figures in docs/rope.md.
    let text = r#"{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}"#;
    let json: Value = serde_json::from_str(text).unwrap();
    let spec = spec_for(text, 128, 128, 500000.0, Pairing::Neox);
    let freqs = spec.frequencies(0);
    let (w, _) = hf_inv_freq::<Big>(&json, 128, 500000.0, 0);
    for (label, start) in [
        ("2^12", 1u32 << 12),
        ("2^16", 1 << 16),
        ("2^20", 1 << 20),
        ("2^24", 1 << 24),
        ("2^31", 1 << 31),
        ("2^32-1", u32::MAX - 31),
    ] {
        let positions: Vec<u32> = (start..=start + 31).collect();
        let table = cpu::rope_cos_sin(&freqs, &positions);
        let mut worst = 0.0f64;
        for (k, &p) in positions.iter().enumerate() {
            for (i, w) in w.iter().enumerate() {
                let (c, s) = exact_cos_sin(p, w);
                worst = worst.max((f64::from(table[[k, i, 0]]) - c).abs());
                worst = worst.max((f64::from(table[[k, i, 1]]) - s).abs());
            }
        }
        eprintln!("| {label} | {worst:.1e} |");
        assert!(worst <= E_CS, "{label}: {worst:e}");
    }
}

#[test]
fn float64_angles_are_not_enough_at_2_31() {
    // Why the reference reduces in big floats: float64 p * w near 2^31 rounds the product
    // to 2^-22 rad steps, so its cos misses by up to 1.2e-7.
    let w = 0.987_654_321f64;
    let worst = (0..16u32)
        .map(|k| {
            let p = (1u32 << 31) + 1000 * k + 7;
            let (c_exact, _) = exact_cos_sin(p, &Big::of(w));
            ((f64::from(p) * w).cos() - c_exact).abs()
        })
        .fold(0.0, f64::max);
    assert!(worst > 3e-8, "{worst:e}");
}

#[test]
fn per_frequency_factors_are_the_general_form() {
    let factors: Vec<f64> = (0..16).map(|i| 1.0 + i as f64 / 3.0).collect();
    let general = Scaling::PerFrequency { factors: factors.clone(), attention_factor: 1.25 };
    let spec = RopeSpec::new(32).unwrap().with_scaling(general).unwrap();
    let default = RopeSpec::new(32).unwrap().frequencies(0);
    let f = spec.frequencies(0);
    assert_eq!(f.attention_factor(), 1.25);
    for ((g, d), k) in f.inv_freq().iter().zip(default.inv_freq()).zip(&factors) {
        assert!((g - d / k).abs() <= 1e-15 * g);
    }
    // Linear scaling is the constant vector.
    let linear = RopeSpec::new(32).unwrap().with_scaling(Scaling::Linear { factor: 3.0 }).unwrap();
    let constant = Scaling::PerFrequency { factors: vec![3.0; 16], attention_factor: 1.0 };
    let constant = RopeSpec::new(32).unwrap().with_scaling(constant).unwrap();
    assert_eq!(linear.frequencies(0), constant.frequencies(0));
}

#[test]
fn worked_example_rotates_by_one_radian() {
    // head_dim 2, position 1, w_0 = 1: (1, 0) -> (cos 1, sin 1); (0, 1) -> (-sin 1, cos 1).
    let spec = RopeSpec::new(2).unwrap();
    let x = Array4::from_shape_vec((1, 1, 2, 2), vec![1.0f32, 0.0, 0.0, 1.0]).unwrap();
    let out = cpu::rope(&spec, x.view(), ndarray::array![[1u32]].view(), Layout::Blhd).unwrap();
    let (s, c) = 1f64.sin_cos();
    for (got, want) in out.iter().zip([c, s, -s, c]) {
        // Strictly below the bound, as it always was here (approx's `abs_diff_eq` is `<=`).
        assert!((f64::from(*got) - want).abs() < posenc::ACCURACY_BOUND, "{got} {want}");
    }
}

#[test]
fn dynamic_and_longrope_follow_the_largest_position() {
    let text = r#"{"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": 100}"#;
    let spec = spec_for(text, 16, 16, 10000.0, Pairing::Neox);
    let short = spec.frequencies_for(ndarray::array![[0u32, 99]].view());
    let long = spec.frequencies_for(ndarray::array![[0u32, 100]].view());
    assert_eq!(short, spec.frequencies(0), "up to max_position_embeddings nothing changes");
    assert!(long.inv_freq()[1] < short.inv_freq()[1]);
}

/// A module that grew its dynamic frequencies for 400 positions keeps them for a later call
/// at positions 0..5: `with_seq_len(400)` gives that call the frequencies of a call whose
/// positions reach 399, and the rotation uses them (CPU and the cos/sin it applies).
#[test]
fn a_fixed_sequence_length_reproduces_a_module_that_kept_its_grown_frequencies() {
    let text = r#"{"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": 100}"#;
    let spec = spec_for(text, 16, 16, 10000.0, Pairing::Neox);
    let kept = spec.clone().with_seq_len(400).unwrap();
    assert_eq!(kept.seq_len(), Some(400));
    let early = ndarray::array![[0u32, 1, 2, 3, 4]];
    let grown = spec.frequencies_for(ndarray::array![[0u32, 399]].view());
    assert_eq!(kept.frequencies_for(early.view()), grown);
    assert_ne!(spec.frequencies_for(early.view()), grown, "per call, 0..5 is not grown");
    // The rotation follows: positions 0..5 under the kept spec differ from the per-call one.
    let x = tensor::<f32>([1, 5, 1, 16], 9);
    let per_call = cpu::rope(&spec, x.view(), early.view(), Layout::Blhd).unwrap();
    let with_kept = cpu::rope(&kept, x.view(), early.view(), Layout::Blhd).unwrap();
    assert_eq!(per_call[[0, 0, 0, 3]], with_kept[[0, 0, 0, 3]], "position 0 does not rotate");
    assert_ne!(per_call, with_kept);
    // Out of range: zero, and past one more than the largest u32 position.
    for bad in [0, (1u64 << 32) + 1] {
        match spec.clone().with_seq_len(bad) {
            Err(Error::InvalidParameter { field: "seq_len", .. }) => {}
            other => panic!("{bad}: {other:?}"),
        }
    }
    // Schemes that do not depend on the length ignore it.
    let plain = RopeSpec::new(16).unwrap();
    assert_eq!(
        plain.clone().with_seq_len(400).unwrap().frequencies_for(early.view()),
        plain.frequencies_for(early.view())
    );
}

#[test]
fn shape_errors_name_what_is_wrong() {
    let spec = RopeSpec::new(8).unwrap();
    let x = Array4::<f32>::zeros((2, 3, 4, 8));
    let err =
        cpu::rope(&spec, x.view(), positions::contiguous_batch(2, 4).unwrap().view(), Layout::Blhd)
            .unwrap_err();
    assert!(matches!(err, Error::Shape { .. }), "{err}");
    // The same tensor read as [B, H, L, Dh] has L = 4.
    cpu::rope(&spec, x.view(), positions::contiguous_batch(2, 4).unwrap().view(), Layout::Bhld)
        .unwrap();
    let err = cpu::rope(
        &spec,
        Array4::<f32>::zeros((1, 1, 1, 6)).view(),
        Array2::zeros((1, 1)).view(),
        Layout::Blhd,
    )
    .unwrap_err();
    assert!(err.to_string().contains("head_dim"), "{err}");
}

#[test]
fn the_gpu_comparison_catches_one_ulp() {
    // The comparison used against the GPU must not wave anything through.
    let spec = RopeSpec::new(8).unwrap();
    let x = tensor::<f32>([1, 2, 1, 8], 3);
    let p = ndarray::array![[5u32, 1 << 31]];
    let want = cpu::rope(&spec, x.view(), p.view(), Layout::Blhd).unwrap();
    crate::support::rope::assert_rope_same(
        "same",
        p.view(),
        Layout::Blhd,
        want.view(),
        want.view(),
    );
    let mut one_ulp = want.clone();
    one_ulp[[0, 1, 0, 2]] = f32::from_bits(one_ulp[[0, 1, 0, 2]].to_bits() + 1);
    let caught = std::panic::catch_unwind(|| {
        crate::support::rope::assert_rope_same(
            "one ulp",
            p.view(),
            Layout::Blhd,
            one_ulp.view(),
            want.view(),
        )
    });
    let message = caught.unwrap_err();
    let message = message.downcast_ref::<String>().unwrap();
    assert!(message.contains("element [0, 1, 0, 2] at position 2147483648"), "{message}");
}

// ---------------------------------------------------------------------------------------
// Malformed scaling objects: typed errors, never a panic.

fn assert_typed(text: &str) {
    match Scaling::from_hf_json(text) {
        Ok(_) | Err(Error::RopeScaling { .. }) => {}
        Err(other) => panic!("{text:?}: untyped error {other:?}"),
    }
}

#[test]
fn corpus_files_give_typed_errors_naming_the_field() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/rope_scaling");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // Each file is named <field>__<what>.json: its error must name that field.
        let field = name.split("__").next().unwrap();
        match Scaling::from_hf_json(&text) {
            Err(Error::RopeScaling { field: f, value, allowed }) => {
                assert_eq!(f, field, "{name}: {value} ({allowed})");
                assert!(!allowed.is_empty());
            }
            other => panic!("{name}: {other:?}"),
        }
        seen += 1;
    }
    assert!(seen >= 10, "{seen} corpus files");
}

#[test]
fn longrope_vectors_of_the_wrong_length_are_refused_once_r_is_known() {
    let text = r#"{"rope_type": "longrope", "short_factor": [1, 1, 1], "long_factor": [1, 1, 1],
                   "factor": 2.0, "original_max_position_embeddings": 4096}"#;
    let scaling = Scaling::from_hf_json(text).unwrap();
    let err = RopeSpec::new(8).unwrap().with_scaling(scaling.clone()).unwrap_err();
    match err {
        Error::RopeScaling { field, value, allowed } => {
            assert_eq!(field, "short_factor");
            assert_eq!(value, "3 numbers");
            assert!(allowed.contains("4 numbers"), "{allowed}");
        }
        other => panic!("{other:?}"),
    }
    RopeSpec::new(6).unwrap().with_scaling(scaling).unwrap();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,200}") {
        assert_typed(&text);
    }

    #[test]
    fn arbitrary_rope_scaling_objects_never_panic(
        rope_type in proptest::sample::select(vec![
            "default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional", "ntk",
            "", "LLAMA3",
        ]),
        legacy in proptest::bool::ANY,
        fields in proptest::collection::vec(
            (
                proptest::sample::select(vec![
                    "factor", "max_position_embeddings", "original_max_position_embeddings",
                    "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor",
                    "truncate", "short_factor", "long_factor", "low_freq_factor",
                    "high_freq_factor", "rope_theta", "type", "partial_rotary_factor",
                ]),
                proptest::prop_oneof![
                    proptest::num::f64::ANY.prop_map(|v| {
                        serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
                    }),
                    proptest::num::i64::ANY.prop_map(Value::from),
                    (-3.0f64..1e6).prop_map(Value::from),
                    proptest::bool::ANY.prop_map(Value::Bool),
                    ".{0,8}".prop_map(Value::String),
                    proptest::collection::vec(-2.0f64..40.0, 0..40).prop_map(Value::from),
                    proptest::strategy::Just(Value::Null),
                    proptest::strategy::Just(serde_json::json!({"nested": [1, {"x": null}]})),
                ],
            ),
            0..8,
        ),
        r in (1u32..40).prop_map(|h| 2 * h),
    ) {
        let mut map = serde_json::Map::new();
        map.insert(if legacy { "type" } else { "rope_type" }.into(), Value::from(rope_type));
        for (k, v) in fields {
            map.insert(k.into(), v);
        }
        let text = Value::Object(map).to_string();
        assert_typed(&text);
        if let Ok(scaling) = Scaling::from_hf_json(&text) {
            // Whatever parses resolves to finite frequencies, or is refused for its length.
            match RopeSpec::new(r).unwrap().with_scaling(scaling) {
                Ok(spec) => {
                    for seq in [0u64, 1 << 20] {
                        let f = spec.frequencies(seq);
                        let finite = f.inv_freq().iter().all(|w| w.is_finite() && *w >= 0.0);
                        proptest::prop_assert!(finite);
                        proptest::prop_assert!(f.attention_factor().is_finite());
                    }
                }
                Err(Error::RopeScaling { .. }) => {}
                Err(other) => proptest::prop_assert!(false, "{other:?}"),
            }
        }
    }
}

/// The cache in Hugging Face's layout is what the rotation uses: rotating a probe whose
/// first rotated dimension of each pair is 1 and the second 0 gives `x_a c - 0 s = c` and
/// `0 c + 1 s = s` exactly, so the rotated probe holds cos and sin column by column, for
/// both pairings, partial rotary, an attention factor and positions up to 2^32 - 1.
#[test]
fn the_rope_cache_is_the_rotation_of_a_probe_in_hugging_faces_layout() {
    let yarn = r#"{"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64}"#;
    let positions = [0u32, 1, 2, 63, 64, 1000, 1 << 24, u32::MAX];
    for (head_dim, rotary_dim, pairing) in [
        (16, 16, Pairing::Neox),
        (16, 16, Pairing::Gptj),
        (20, 12, Pairing::Neox),
        (10, 6, Pairing::Gptj),
    ] {
        let spec = RopeSpec::partial(head_dim, rotary_dim)
            .unwrap()
            .with_pairing(pairing)
            .with_scaling(Scaling::from_hf_json(yarn).unwrap())
            .unwrap();
        let cache = cpu::rope_cache(&spec, &positions).unwrap();
        let (n, r) = (positions.len(), rotary_dim as usize);
        assert_eq!((cache.cos.dim(), cache.sin.dim()), ((n, r), (n, r)));
        assert_ne!(cache.attention_factor, 1.0, "yarn scales cos and sin");
        let freqs =
            spec.frequencies_for(ndarray::ArrayView2::from_shape((1, n), &positions).unwrap());
        assert_eq!(cache.attention_factor, freqs.attention_factor());
        let want_inv: Vec<f32> = freqs.inv_freq().iter().map(|&w| w as f32).collect();
        assert_eq!(cache.inv_freq, want_inv);
        // Probes: for each frequency i and its pair (a, b), x_a = 1 rotates into (c, s).
        let half = r / 2;
        let pair = |i: usize| match pairing {
            Pairing::Neox => (i, i + half),
            Pairing::Gptj => (2 * i, 2 * i + 1),
        };
        let mut x = Array4::<f32>::zeros((1, n, 1, head_dim as usize));
        for t in 0..n {
            for i in 0..half {
                x[[0, t, 0, pair(i).0]] = 1.0;
            }
        }
        let p = Array2::from_shape_vec((1, n), positions.to_vec()).unwrap();
        let rotated = cpu::rope(&spec, x.view(), p.view(), Layout::Blhd).unwrap();
        for t in 0..n {
            for i in 0..half {
                let (a, b) = pair(i);
                let (c, s) = (rotated[[0, t, 0, a]], rotated[[0, t, 0, b]]);
                // Both columns of the pair hold frequency i in the cache.
                for col in [a, b] {
                    assert_eq!(cache.cos[[t, col]].to_bits(), c.to_bits(), "cos t={t} col={col}");
                    assert_eq!(cache.sin[[t, col]].to_bits(), s.to_bits(), "sin t={t} col={col}");
                }
            }
        }
    }
    // Too large a cache is refused before anything is computed.
    let spec = RopeSpec::new(4096).unwrap();
    let many = vec![0u32; (1 << 19) + 1];
    assert!(matches!(cpu::rope_cache(&spec, &many), Err(Error::TooLarge { .. })));
}

/// `Scaling::Explicit` takes a framework's float32 `inv_freq` exactly: the resolved
/// frequencies are those very values, and cos/sin at every range are within the bound of
/// the exact `cos(p * w)`, `sin(p * w)` of the stored floats (not of the formula they
/// approximate), so posenc reproduces what that framework means, without its float32
/// angle error.
#[test]
fn explicit_inv_freq_is_taken_exactly_and_its_cos_sin_are_exact() {
    let r = 64usize;
    // What torch computes: 1 / base ** (arange(0, r, 2) / r), in float32.
    let stored: Vec<f32> =
        (0..r / 2).map(|i| 1.0 / 10000f32.powf((2 * i) as f32 / r as f32)).collect();
    let inv_freq: Vec<f64> = stored.iter().map(|&v| f64::from(v)).collect();
    let spec = RopeSpec::new(r as u32)
        .unwrap()
        .with_scaling(Scaling::Explicit { inv_freq: inv_freq.clone(), attention_factor: 1.0 })
        .unwrap();
    let freqs = spec.frequencies(0);
    assert_eq!(freqs.inv_freq(), &inv_freq[..], "the stored values, exactly");
    // The formula's own frequencies differ from torch's float32 ones somewhere.
    let formula = RopeSpec::new(r as u32).unwrap().frequencies(0);
    assert!(formula.inv_freq().iter().zip(&inv_freq).any(|(a, b)| a != b));
    let w: Vec<Big> = inv_freq.iter().map(|&v| Big::of(v)).collect();
    for start in [0u32, 1 << 20, 1 << 31, u32::MAX - 15] {
        let positions: Vec<u32> = (start..=start + 15).collect();
        let table = cpu::rope_cos_sin(&freqs, &positions);
        for (k, &p) in positions.iter().enumerate() {
            for (i, w) in w.iter().enumerate() {
                let (c, s) = exact_cos_sin(p, w);
                let (gc, gs) = (f64::from(table[[k, i, 0]]), f64::from(table[[k, i, 1]]));
                assert!((gc - c).abs() <= E_CS && (gs - s).abs() <= E_CS, "p={p} i={i}");
            }
        }
    }
    // The attention factor multiplies; bad values are refused naming the entry.
    let scaled = RopeSpec::new(4)
        .unwrap()
        .with_scaling(Scaling::Explicit { inv_freq: vec![1.0, 0.01], attention_factor: 0.5 })
        .unwrap();
    assert_eq!(scaled.frequencies(0).attention_factor(), 0.5);
    // Up to 2^64 radians per position the 256-bit quotient still holds every bit of the
    // turn fraction the phase keeps; past it posenc would no longer be exact, so it refuses.
    let edge =
        Scaling::Explicit { inv_freq: vec![posenc::MAX_INV_FREQ, 1.0], attention_factor: 1.0 };
    assert!(RopeSpec::new(4).unwrap().with_scaling(edge).is_ok());
    let past = posenc::MAX_INV_FREQ * (1.0 + f64::EPSILON);
    // A zero frequency is a pair rotated by angle 0 (Gemma 4's proportional buffer holds
    // them): cos 1 and sin 0 at every position, -0 read as 0.
    let zeros = RopeSpec::new(4)
        .unwrap()
        .with_scaling(Scaling::Explicit { inv_freq: vec![0.5, -0.0], attention_factor: 1.0 })
        .unwrap();
    assert_eq!(zeros.frequencies(0).inv_freq()[1].to_bits(), 0);
    let ps = [0u32, 1, 77_777, u32::MAX];
    let table = cpu::rope_cos_sin(&zeros.frequencies(0), &ps);
    for (k, &p) in ps.iter().enumerate() {
        let (c, s) = exact_cos_sin(p, &Big::of(0.5));
        assert!((f64::from(table[[k, 0, 0]]) - c).abs() <= E_CS, "p={p}");
        assert!((f64::from(table[[k, 0, 1]]) - s).abs() <= E_CS, "p={p}");
        assert_eq!((table[[k, 1, 0]], table[[k, 1, 1]].to_bits()), (1.0, 0), "p={p}");
    }
    // Such a pair (a, b) becomes (a - b * 0, b + a * 0): a -0 comes out +0 where the
    // partner's product with 0 has the other sign, the first of a pair when its partner's
    // sign bit is set, the second when its partner's is clear (docs/rope.md; round
    // twenty-six found the second's rule worded as the first's).
    let z = RopeSpec::new(2)
        .unwrap()
        .with_scaling(Scaling::Explicit { inv_freq: vec![0.0], attention_factor: 1.0 })
        .unwrap();
    for (pair, want) in [
        ([-0.0f32, 1.0], [-0.0f32, 1.0]),
        ([-0.0, -1.0], [0.0, -1.0]),
        ([-0.0, 0.0], [-0.0, 0.0]),
        ([-0.0, -0.0], [0.0, -0.0]),
        ([1.0, -0.0], [1.0, 0.0]),
        ([-1.0, -0.0], [-1.0, -0.0]),
        ([0.0, -0.0], [0.0, 0.0]),
    ] {
        let x = ndarray::Array4::from_shape_vec((1, 1, 1, 2), pair.to_vec()).unwrap();
        let out = cpu::rope(&z, x.view(), ndarray::Array2::zeros((1, 1)).view(), Layout::Blhd);
        let got: Vec<u32> = out.unwrap().iter().map(|v| v.to_bits()).collect();
        let want: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, want, "{pair:?}");
    }
    // A model's own frequencies are an option of their own, not a rope_scaling object's key.
    for (bad, message) in [
        (vec![1.0, -1.0], "invalid inv_freq: -1 at index 1 (allowed: finite numbers in [0, 2^64]"),
        (vec![f64::NAN, 1.0], "invalid inv_freq: NaN at index 0"),
        (
            vec![1.0],
            "invalid inv_freq: 1 value, where rotary_dim 4 needs 2 (allowed: one value per",
        ),
        (vec![past, 1.0], "invalid inv_freq: 18446744073709556000 at index 0"),
        (vec![1.0, f64::INFINITY], "invalid inv_freq: inf at index 1"),
    ] {
        let e = RopeSpec::new(4)
            .unwrap()
            .with_scaling(Scaling::Explicit { inv_freq: bad, attention_factor: 1.0 })
            .unwrap_err();
        assert!(e.to_string().starts_with(message), "{e}");
    }
}

/// An empty tensor is rotated as nothing, whatever its other axes (round fourteen's review:
/// an empty view with axes whose product passed the element limit was refused once zero
/// axes were set aside); a non-empty one past the limit is refused by its shape.
#[test]
fn empty_tensors_of_any_axes_rotate_as_nothing() {
    use ndarray::ShapeBuilder;
    let spec = RopeSpec::new(64).unwrap();
    let data: [f32; 0] = [];
    let x = ndarray::ArrayView4::from_shape((0, 1 << 28, 1 << 28, 64), &data[..]).unwrap();
    let positions = ndarray::Array2::<u32>::zeros((0, 1 << 28));
    let out = cpu::rope(&spec, x, positions.view(), Layout::Blhd).unwrap();
    assert_eq!(out.shape(), &[0, 1 << 28, 1 << 28, 64]);
    // A broadcast view of 2^62 elements holds one value, and is refused by its shape.
    let one = [1.0f32];
    let huge = ndarray::ArrayView4::from_shape(
        (1 << 20, 1 << 20, 1 << 16, 64).strides((0, 0, 0, 0)),
        &one[..],
    );
    let positions =
        ndarray::ArrayView2::from_shape((1 << 20, 1 << 20).strides((0, 0)), &[0u32][..]).unwrap();
    let e = cpu::rope(&spec, huge.unwrap(), positions, Layout::Blhd).unwrap_err();
    assert!(matches!(e, posenc::Error::TooLarge { op: "rope", .. }), "{e}");
}
