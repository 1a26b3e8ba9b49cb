//! Bytes through the weights loader (`.safetensors`, or `.npy` when the magic says so),
//! with no tensor named and with each of a few names. A loaded table must be no larger
//! than the input could hold, and finite.
#![no_main]

use libfuzzer_sys::fuzz_target;
use posenc::weights::{Table, from_bytes};

fuzz_target!(|data: &[u8]| {
    for tensor in [None, Some("embed"), Some("")] {
        if let Ok(table) = from_bytes(data, tensor) {
            let (vocab, dim) = table.dim();
            assert!(vocab * dim * 2 <= data.len());
            let finite = match &table {
                Table::F32(a) => a.iter().all(|v| v.is_finite()),
                Table::F16(a) => a.iter().all(|v| v.is_finite()),
                Table::Bf16(a) => a.iter().all(|v| v.is_finite()),
            };
            assert!(finite);
        }
    }
});
