//! The CPU encode against an independent float64 computation of the formula, and the
//! checks at the API edge.

use crate::support::{Rng, random_ids, random_table};
use approx::abs_diff_eq;
use ndarray::Array2;
use posenc::encode::{Embeddings, EncodeOptions, Scale, ids_to_u32};
use posenc::{ACCURACY_BOUND, PeSpec, cpu, positions};

/// The PE promise (`ACCURACY_BOUND`, 6e-8) plus the two f32 roundings of `s * e + pe` (half
/// an ulp each at magnitudes below 2 * |s| * 2 + 1).
fn tolerance(scaled_max: f64) -> f64 {
    ACCURACY_BOUND + f64::from(f32::EPSILON) * (scaled_max + 1.0)
}

#[test]
fn cpu_encode_matches_a_naive_float64_computation() {
    let mut rng = Rng::new(41);
    let (vocab, dim, batch, len) = (40, 16, 2, 7);
    let spec = PeSpec::new(dim as u32).unwrap();
    let table = random_table(&mut rng, vocab, dim);
    let ids = random_ids(&mut rng, batch, len, vocab);
    let pos = Array2::from_shape_fn((batch, len), |(b, t)| {
        if b == 0 { t as u32 } else { (1 << 31) + 5 * t as u32 }
    });
    for (scale, s) in [(Scale::None, 1.0f64), (Scale::SqrtDim, 4.0), (Scale::Value(0.5), 0.5)] {
        let options = EncodeOptions { scale, ..Default::default() };
        let out =
            cpu::encode(&spec, Embeddings::F32(table.view()), ids.view(), pos.view(), &options)
                .unwrap()
                .into_f32()
                .unwrap();
        for ((b, t, col), &v) in out.indexed_iter() {
            let p = f64::from(pos[[b, t]]);
            // Naive float64 is exact enough below 2^27 only; row 1 sits at 2^31, so reduce
            // the angle with the exact integer period trick: p = q * 2^20 + r.
            let i = (col / 2) as f64;
            let w = 10000f64.powf(-2.0 * i / dim as f64);
            let (q, r) = ((p / 2f64.powi(20)).floor(), p % 2f64.powi(20));
            let angle = ((q * 2f64.powi(20) * w) % std::f64::consts::TAU) + r * w;
            let pe = if col % 2 == 0 { angle.sin() } else { angle.cos() };
            let want = s * f64::from(table[[ids[[b, t]] as usize, col]]) + pe;
            let epsilon = tolerance(s) + if b == 1 { 1e-6 } else { 0.0 };
            assert!(
                abs_diff_eq!(f64::from(v), want, epsilon = epsilon),
                "{scale:?} at {b},{t},{col}: {v} vs {want}"
            );
        }
    }
}

#[test]
fn ids_at_the_edge_are_checked_and_named() {
    let ids = ndarray::array![[1i64, 2], [-3, 4]];
    match ids_to_u32(ids.view(), 10, None) {
        Err(posenc::Error::TokenId { row: 1, col: 0, id, vocab: 10 }) => assert_eq!(id, "-3"),
        other => panic!("{other:?}"),
    }
    let ids = ndarray::array![[1i32, 12]];
    let err = ids_to_u32(ids.view(), 10, None).unwrap_err();
    assert!(err.to_string().contains("12") && err.to_string().contains("10"), "{err}");
    // A pad id is exempt from the vocabulary check.
    assert_eq!(ids_to_u32(ids.view(), 10, Some(12)).unwrap(), ndarray::array![[1u32, 12]]);
    let big = ndarray::array![[5_000_000_000i64]];
    assert!(ids_to_u32(big.view(), usize::MAX, None).is_err());
}

#[test]
fn pad_tokens_give_zero_rows_and_do_not_advance_positions() {
    let spec = PeSpec::new(8).unwrap();
    let table = Array2::<f32>::ones((5, 8));
    let ids = ndarray::array![[0u32, 0, 3, 4]];
    let pos = positions::left_padded(ids.view(), 0).unwrap();
    let options = EncodeOptions { pad_id: Some(0), ..Default::default() };
    let out = cpu::encode(&spec, Embeddings::F32(table.view()), ids.view(), pos.view(), &options)
        .unwrap()
        .into_f32()
        .unwrap();
    assert!(out.slice(ndarray::s![0, 0..2, ..]).iter().all(|&v| v == 0.0));
    // The first real token is at position 0: 1 + [sin 0, cos 0, ...] = [1, 2, 1, 2, ...].
    assert_eq!(out.slice(ndarray::s![0, 2, ..]).to_vec(), [1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
}

#[test]
fn empty_batches_are_valid() {
    let spec = PeSpec::new(4).unwrap();
    let table = Array2::<f32>::zeros((3, 4));
    let ids = Array2::<u32>::zeros((2, 0));
    let out = cpu::encode(
        &spec,
        Embeddings::F32(table.view()),
        ids.view(),
        ids.view(),
        &EncodeOptions::default(),
    )
    .unwrap();
    assert_eq!(out.dim(), (2, 0, 4));
}
