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

/// A config's factor per frequency fits its own rotary dim; a head dim of the caller's that
/// moves the rotary dim is refused once, against the rotary dim used, saying whose the
/// factors are and what serves instead (round twenty-eight: the config's count, which the
/// refusal named, was refused in turn). With `rotary_dim` at the config's they are served.
#[test]
fn a_config_scaling_moved_to_another_rotary_dim_is_refused_once() {
    use posenc::commands::{ConfigSource, RopeOptions};
    let factors = vec!["1.0"; 32].join(", ");
    let phi3 = format!(
        r#"{{"model_type": "phi3", "hidden_size": 128, "num_attention_heads": 2,
            "rope_theta": 10000, "max_position_embeddings": 8192,
            "original_max_position_embeddings": 4096, "rope_scaling": {{"type": "longrope",
            "short_factor": [{factors}], "long_factor": [{factors}]}}}}"#
    );
    let options = RopeOptions { config: Some(ConfigSource::Text(&phi3)), ..Default::default() };
    let (spec, _) = options.cache_spec(None).unwrap();
    assert_eq!((spec.head_dim(), spec.rotary_dim()), (64, 64));
    assert_eq!(options.cache_spec(Some(64)).unwrap().0, spec);
    let msg = match options.cache_spec(Some(128)) {
        Err(e @ Error::RopeScaling { .. }) => e.to_string(),
        other => panic!("{other:?}"),
    };
    for part in [
        "32 numbers, the config's, for its rotary_dim 64",
        "64 numbers: one per frequency of rotary_dim 128, the rotary dim used",
        "a scaling with vectors of 64, or the config's rotary dim 64",
    ] {
        assert!(msg.contains(part), "{part:?} in {msg}");
    }
    assert!(!msg.contains("--"), "no front end's flag: {msg}");
    // A head dim below the config's rotary dim: that rotary dim is no option to offer.
    let msg = match options.cache_spec(Some(32)) {
        Err(e @ Error::RopeScaling { .. }) => e.to_string(),
        other => panic!("{other:?}"),
    };
    assert!(msg.contains("vectors of 16") && !msg.contains("rotary dim 64"), "{msg}");
    let partial = RopeOptions { rotary_dim: Some(64), ..options.clone() };
    let (spec, _) = partial.cache_spec(Some(128)).unwrap();
    assert_eq!((spec.head_dim(), spec.rotary_dim()), (128, 64));
}
