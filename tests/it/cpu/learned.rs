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

/// Round twelve: the learned table was widened whole on every call (53 ms for three tokens
/// of a 500000-row table; 2 TiB asked for a broadcast view of 2^33 rows). Fewer tokens than
/// rows now widen the tokens' rows alone: the same bits as the whole table's path, which a
/// call with as many tokens as rows still takes.
#[test]
fn few_tokens_widen_only_their_position_rows() {
    use half::bf16;
    let table = Array2::from_shape_fn((9, 5), |(i, j)| (i * 7 + j) as f32 * 0.375 - 3.0);
    let rows = 6;
    let f32s = Array2::from_shape_fn((rows, 5), |(p, j)| (p as f32 * 0.7 - j as f32).sin());
    let f16s = f32s.mapv(f16::from_f32);
    let bf16s = f32s.mapv(bf16::from_f32);
    let by_formula =
        |ids: &Array2<u32>, pos: &Array2<u32>, learned: &dyn Fn(usize, usize) -> f32| {
            Array2::from_shape_fn((ids.len(), 5), |(k, c)| {
                let (id, p) = (ids.as_slice().unwrap()[k], pos.as_slice().unwrap()[k] as usize);
                // A pad token's output row is zero.
                if id == 4 { 0.0 } else { table[[id as usize, c]] + learned(p, c) }
            })
        };
    // 3 tokens (the rows' path) and 6 (the whole table's), a pad among them.
    for (ids, pos) in [
        (array![[2u32, 4, 8]], array![[5u32, 0, 5]]),
        (array![[2u32, 4, 8], [0, 1, 3]], array![[5u32, 0, 5], [1, 2, 3]]),
    ] {
        let options = EncodeOptions { pad_id: Some(4), ..Default::default() };
        for (learned, value) in [
            (
                Embeddings::F32(f32s.view()),
                &(|p: usize, c: usize| f32s[[p, c]]) as &dyn Fn(usize, usize) -> f32,
            ),
            (Embeddings::F16(f16s.view()), &|p: usize, c: usize| f16s[[p, c]].to_f32()),
            (Embeddings::Bf16(bf16s.view()), &|p: usize, c: usize| bf16s[[p, c]].to_f32()),
        ] {
            let out = cpu::encode_learned(
                learned,
                Embeddings::F32(table.view()),
                ids.view(),
                pos.view(),
                &options,
            )
            .unwrap()
            .into_f32()
            .unwrap();
            let want = by_formula(&ids, &pos, value);
            let got = out.into_shape_with_order((ids.len(), 5)).unwrap();
            assert_eq!(got.mapv(f32::to_bits), want.mapv(f32::to_bits), "{ids:?}");
        }
    }
    // A broadcast view of 2^33 rows: two tokens, two rows widened.
    let row = ndarray::Array1::from_vec(vec![0.5f32; 5]);
    let huge = row.broadcast((1usize << 33, 5)).unwrap();
    let out = cpu::encode_learned(
        Embeddings::F32(huge),
        Embeddings::F32(table.view()),
        array![[1u32, 2]].view(),
        array![[7u32, 1 << 31]].view(),
        &EncodeOptions::default(),
    )
    .unwrap()
    .into_f32()
    .unwrap();
    assert_eq!(out[[0, 1, 3]], table[[2, 3]] + 0.5);
}
