//! `.npy` bytes through the reader under every role posenc reads them in (ids, positions,
//! offsets, weights), then ids through the vocabulary check, and through the CLI's up-front
//! checks (`posenc::inputs`: encode's ids, output size and positions, rope's input and
//! positions). Any panic is a bug; so is an accepted array whose data could not have come
//! from the input, or an accepted shape over the output limit.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use posenc::encode::ids_to_u32;
use posenc::inputs::{self, MAX_OUTPUT_VALUES, Source};

#[path = "common.rs"]
mod common;
use posenc::npy::{Expected, NpyArray, NpyDtype, read_from};

const ROLES: [Expected<'static>; 4] = [
    Expected {
        what: "ids",
        dtypes: &[NpyDtype::I32, NpyDtype::I64, NpyDtype::U32],
        ranks: &[1, 2],
    },
    Expected { what: "positions", dtypes: &[NpyDtype::U32], ranks: &[1, 2] },
    Expected { what: "offsets", dtypes: &[NpyDtype::U32, NpyDtype::I64], ranks: &[1] },
    Expected { what: "weights", dtypes: &[NpyDtype::F32, NpyDtype::F16], ranks: &[2] },
];

fn as_batch<T: Clone>(a: ndarray::ArrayD<T>) -> Option<ndarray::Array2<T>> {
    let shape = match *a.shape() {
        [len] => (1, len),
        [batch, len] => (batch, len),
        _ => return None,
    };
    a.into_shape_with_order(shape).ok()
}

fuzz_target!(|data: &[u8]| {
    for expected in &ROLES {
        let Ok(array) = read_from(data, data.len() as u64, Path::new("fuzz.npy"), expected) else {
            continue;
        };
        let elements: usize = array.shape().iter().product();
        assert!(elements * array.dtype().size() <= data.len());
        let _ = match array {
            NpyArray::I32(a) => as_batch(a).map(|a| ids_to_u32(a.view(), 1000, Some(7)).is_ok()),
            NpyArray::I64(a) => as_batch(a).map(|a| ids_to_u32(a.view(), 1000, None).is_ok()),
            NpyArray::U32(a) => as_batch(a).map(|a| ids_to_u32(a.view(), 1000, None).is_ok()),
            _ => None,
        };
    }
    let _ = posenc::weights::from_bytes(data, None);

    let source = Source::Bytes { name: Path::new("fuzz.npy"), bytes: data };
    let nonzero = |shape: &[usize]| {
        shape.iter().filter(|&&d| d != 0).fold(1u64, |n, &d| n.saturating_mul(d as u64))
    };
    for (table, pad_id) in [((1000, 8), None), ((1, 65536), Some(0)), ((0, 1), Some(7))] {
        let Ok(ids) = inputs::read_ids(source, table, pad_id) else { continue };
        let (batch, len) = ids.ids.dim();
        assert!(nonzero(&[batch, len, table.1]) <= MAX_OUTPUT_VALUES);
        common::check_position_builders(&ids, source, 0, 1);
    }
    if let Ok(tensor) = inputs::read_rope_input(source) {
        let shape = tensor.shape();
        assert!(nonzero(&shape) <= MAX_OUTPUT_VALUES);
        let (batch, len) = (shape[0], shape[1]);
        if let Ok(p) = inputs::rope_positions(None, Some(u32::MAX - 3), batch, len) {
            if let Some(built) = p.for_tensor(&tensor) {
                assert_eq!(built.dim(), (batch, len));
            }
        }
    }
});
