//! `posenc::commands` as a library caller (the Python package) uses it: the pairs of
//! options the command line's flags refuse together are refused here too, since a caller
//! without clap would otherwise have one of them silently unused; an error the origin
//! rewording does not concern keeps its own value.

use posenc::Error;
use posenc::Variant;
use posenc::commands::{InvFreq, PeOptions, with_origin};

fn refused(options: &PeOptions<'_>, field: &str) -> String {
    match options.spec(8, None) {
        Err(e @ Error::InvalidParameter { field: f, .. }) if f == field => e.to_string(),
        other => panic!("{options:?}: {other:?}"),
    }
}

#[test]
fn options_the_flags_refuse_together_are_refused() {
    let inv_freq = || Some(InvFreq::Values(vec![1.0, 0.1, 0.01, 0.001]));
    let msg = refused(
        &PeOptions { inv_freq: inv_freq(), base: Some(100.0), ..Default::default() },
        "inv_freq",
    );
    assert!(msg.contains("beside base"), "{msg}");
    let t2t = Some(Variant::Tensor2Tensor);
    refused(
        &PeOptions {
            variant: t2t,
            inv_freq: inv_freq(),
            min_timescale: Some(2.0),
            ..Default::default()
        },
        "inv_freq",
    );
    let msg = refused(
        &PeOptions {
            variant: t2t,
            base: Some(100.0),
            max_timescale: Some(5000.0),
            ..Default::default()
        },
        "max_timescale",
    );
    assert!(msg.contains("beside base"), "{msg}");
    // Each alone is taken.
    PeOptions { inv_freq: inv_freq(), ..Default::default() }.spec(8, None).unwrap();
    PeOptions { variant: t2t, max_timescale: Some(5000.0), ..Default::default() }
        .spec(8, None)
        .unwrap();
}

#[test]
fn the_origin_rewording_leaves_other_errors_alone() {
    let base = Error::InvalidParameter { field: "base", value: "NaN".into(), allowed: "(1, 1e7]" };
    assert!(with_origin(base, "--head-dim", 64, 64).to_string().contains("NaN"));
    let head = Error::InvalidParameter { field: "head_dim", value: "0".into(), allowed: "x" };
    assert!(with_origin(head, "--head-dim", 0, 0).to_string().contains("0 (--head-dim)"));
}

/// tensor2tensor's `min_timescale` past the default max is what was given wrong: the error
/// names it (and how to raise the max), not the max nobody gave.
#[test]
fn a_min_timescale_past_the_default_max_is_named() {
    let t2t = Some(Variant::Tensor2Tensor);
    let msg = refused(
        &PeOptions { variant: t2t, min_timescale: Some(20000.0), ..Default::default() },
        "min_timescale",
    );
    assert!(msg.contains("20000 (above max_timescale, 10000 by default)"), "{msg}");
    assert!(msg.contains("--max-timescale"), "{msg}");
    // Given both, the max below the min is the one named, as the library does.
    refused(
        &PeOptions {
            variant: t2t,
            min_timescale: Some(20000.0),
            max_timescale: Some(100.0),
            ..Default::default()
        },
        "max_timescale",
    );
    // Past the range altogether, the library's own message.
    refused(
        &PeOptions { variant: t2t, min_timescale: Some(2e9), ..Default::default() },
        "min_timescale",
    );
}
