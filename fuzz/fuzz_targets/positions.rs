//! Text through the `--positions SPEC` parser: a list within the cap, or a
//! `PositionSpec` error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use posenc::Error;
use posenc::positions::{MAX_SPEC_POSITIONS, parse_spec};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match parse_spec(text) {
        Ok(list) => assert!(list.len() as u64 <= MAX_SPEC_POSITIONS),
        Err(e) => assert!(matches!(e, Error::PositionSpec { .. }), "{e}"),
    }
});
