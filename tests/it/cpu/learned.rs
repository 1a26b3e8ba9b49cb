//! Learned position tables (BERT, GPT-2) and fairseq's position numbering on the CPU,
//! against the formula written out directly.

use half::f16;
use ndarray::{Array2, array};
use posenc::encode::{Embeddings, EncodeOptions, Scale};
use posenc::{Error, PeSpec, Variant, cpu, positions};

#[test]
fn learned_rows_are_added_as_they_are() {
    let table = Array2::from_shape_fn((7, 6), |(i, j)| (i * 10 + j) as f32 * 0.25);
    let learned = Array2::from_shape_fn((5, 6), |(p, j)| f16::from_f32(p as f32 - j as f32 / 8.0));
    let ids = array![[3u32, 0, 6], [1, 1, 2]];
    let pos = array![[0u32, 4, 2], [3, 3, 1]];
    let options = EncodeOptions { scale: Scale::Value(2.0), ..Default::default() };
    let out = cpu::encode_learned(
        Embeddings::F16(learned.view()),
        Embeddings::F32(table.view()),
        ids.view(),
        pos.view(),
        &options,
    )
    .unwrap()
    .into_f32()
    .unwrap();
    for ((b, t, c), &v) in out.indexed_iter() {
        let (id, p) = (ids[[b, t]] as usize, pos[[b, t]] as usize);
        let want = 2.0 * table[[id, c]] + learned[[p, c]].to_f32();
        assert_eq!(v.to_bits(), want.to_bits(), "[{b}, {t}, {c}]");
    }
}

#[test]
fn positions_past_the_learned_table_are_refused() {
    let table = Array2::<f32>::zeros((4, 2));
    let learned = Array2::<f32>::zeros((3, 2));
    let err = cpu::encode_learned(
        Embeddings::F32(learned.view()),
        Embeddings::F32(table.view()),
        array![[0u32, 1]].view(),
        array![[2u32, 3]].view(),
        &EncodeOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::Position { row: 0, col: 1, position: 3, max_positions: 3 }),
        "{err}"
    );
    let learned = Array2::<f32>::zeros((3, 4));
    let err = cpu::encode_learned(
        Embeddings::F32(learned.view()),
        Embeddings::F32(table.view()),
        array![[0u32]].view(),
        array![[0u32]].view(),
        &EncodeOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::Shape { .. }), "{err}");
}

#[test]
fn fairseq_positions_follow_make_positions() {
    // mask = ids != pad; positions = cumsum(mask) * mask + pad, written out.
    let ids = array![[1u32, 1, 9, 4, 1], [5, 6, 7, 8, 9]];
    let pad = 1;
    let got = positions::fairseq(ids.view(), pad).unwrap();
    let mut want = Array2::<u32>::zeros(ids.dim());
    for (b, row) in ids.rows().into_iter().enumerate() {
        let mut cumsum = 0;
        for (t, &id) in row.iter().enumerate() {
            let mask = u32::from(id != pad);
            cumsum += mask;
            want[[b, t]] = cumsum * mask + pad;
        }
    }
    assert_eq!(got, want);
    assert!(positions::fairseq(ids.view(), u32::MAX - 2).is_err());

    // Pad tokens land on the zero row: their output is their embedding row alone.
    let spec = PeSpec::for_variant(Variant::Fairseq, 6).unwrap();
    let table = Array2::from_shape_fn((10, 6), |(i, j)| (i + j) as f32);
    let out = cpu::encode(
        &spec,
        Embeddings::F32(table.view()),
        ids.view(),
        got.view(),
        &EncodeOptions::default(),
    )
    .unwrap()
    .into_f32()
    .unwrap();
    for c in 0..6 {
        assert_eq!(out[[0, 0, c]], table[[1, c]]);
    }
    assert_ne!(out[[0, 2, 0]], table[[9, 0]], "position 2 adds a non-zero row");
}
