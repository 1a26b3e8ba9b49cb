//! `.npy` bytes through the reader under every role posenc reads them in (ids, positions,
//! offsets, weights), then ids through the vocabulary check. Any panic is a bug; so is an
//! accepted array whose data could not have come from the input.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use posenc::encode::ids_to_u32;
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
});
