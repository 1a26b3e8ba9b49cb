//! Bytes through the weights loader (`.safetensors`, or `.npy` when the magic says so),
//! with no tensor named and with each of a few names. A loaded table must be no larger
//! than the input could hold, and finite. The same bytes as a model's `inv_freq`: read only
//! with exactly the count asked for.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

use posenc::inputs::{Source, read_inv_freq};
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
        let source = Source::Bytes { name: Path::new("fuzz"), bytes: data };
        for count in [1, 4, 64] {
            if let Ok(values) = read_inv_freq(source, tensor, count) {
                assert_eq!(values.len(), count);
                assert!(values.len() * 4 <= data.len());
            }
        }
    }
});
