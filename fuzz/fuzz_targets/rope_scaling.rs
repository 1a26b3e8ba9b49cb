//! Text through the Hugging Face `rope_scaling` JSON parser; what it accepts is applied to a
//! small RoPE spec and its frequencies resolved at a sequence length taken from the input,
//! which must give finite frequencies and attention factor, and no panic anywhere.
#![no_main]

use libfuzzer_sys::fuzz_target;
use posenc::Error;
use posenc::rope::{RopeSpec, Scaling};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let scaling = match Scaling::from_hf_json(text) {
        Ok(s) => s,
        Err(e) => {
            assert!(matches!(e, Error::RopeScaling { .. }), "{e}");
            return;
        }
    };
    let Ok(spec) = RopeSpec::new(64).and_then(|s| s.with_scaling(scaling)) else { return };
    let seq_len = data.iter().fold(1u64, |n, &b| n.wrapping_mul(31).wrapping_add(u64::from(b)));
    let freqs = spec.frequencies(seq_len % (1 << 33));
    assert!(freqs.inv_freq().iter().all(|w| w.is_finite()));
    assert!(freqs.attention_factor().is_finite());
});
