//! `ModelConfig::from_hf_config` on published `config.json` files (tests/corpus/configs/)
//! and small configs written here: each served family's table against its own formula,
//! written here in float64 as transformers writes it (sharing no code with the library),
//! and every family and malformed config posenc does not serve refused with a typed error
//! naming `model_type` or the key.

use std::fs;
use std::path::Path;

use posenc::encode::Scale;
use posenc::inputs::{self, Source};
use posenc::model_config::{ModelConfig, ModelPositions};
use posenc::{ACCURACY_BOUND, Error, Variant, cpu};

use super::rope_config::config_path;

/// The float64 formula's own error at the positions used here (angles below 2^17 rad,
/// each within a few float64 ulps): far below posenc's bound, but not zero.
const F64_SLACK: f64 = 1e-10;

fn published(name: &str) -> ModelConfig {
    let text = fs::read_to_string(config_path(name)).unwrap();
    ModelConfig::from_hf_config(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn parse(json: &str) -> ModelConfig {
    ModelConfig::from_hf_config(json).unwrap_or_else(|e| panic!("{json}: {e}"))
}

/// posenc's table of `config` at `positions` against `want(position)`, value by value.
fn check_table(
    what: &str,
    config: &ModelConfig,
    positions: &[u32],
    want: impl Fn(u32) -> Vec<f64>,
) {
    let spec = config.spec().expect("a sinusoid");
    let got = cpu::table(&spec, positions);
    for (r, &p) in positions.iter().enumerate() {
        let want = want(p);
        assert_eq!(want.len(), got.ncols(), "{what}");
        for (c, w) in want.iter().enumerate() {
            let g = f64::from(got[[r, c]]);
            let diff = (g - w).abs();
            assert!(
                diff <= ACCURACY_BOUND + F64_SLACK,
                "{what}: position {p}, column {c}: {g} vs {w}"
            );
        }
    }
}

/// `MarianSinusoidalPositionalEmbedding._init_weight`: `pos / 10000^(2 (j // 2) / dim)` in
/// float64 (NumPy), sin of the even columns' angles first (`ceil(dim / 2)` of them), then
/// cos of the odd columns'.
fn marian_row(dim: usize, p: u32) -> Vec<f64> {
    let angle: Vec<f64> =
        (0..dim).map(|j| f64::from(p) / 10000f64.powf((2 * (j / 2)) as f64 / dim as f64)).collect();
    let sin = angle.iter().step_by(2).map(|a| a.sin());
    let cos = angle.iter().skip(1).step_by(2).map(|a| a.cos());
    sin.chain(cos).collect()
}

/// fairseq's `get_embedding` (M2M100, FSMT, Speech2Text): `half = dim // 2`,
/// `w_i = exp(-i ln(10000) / (half - 1))`, `[sin | cos]`, a zero column for an odd dim,
/// and the row of `padding_idx` all zeros.
fn fairseq_row(dim: usize, padding_idx: u32, p: u32) -> Vec<f64> {
    let half = dim / 2;
    let step = 10000f64.ln() / (half - 1) as f64;
    let angle: Vec<f64> = (0..half).map(|i| f64::from(p) * (-(i as f64) * step).exp()).collect();
    let mut row: Vec<f64> =
        angle.iter().map(|a| a.sin()).chain(angle.iter().map(|a| a.cos())).collect();
    if dim % 2 == 1 {
        row.push(0.0);
    }
    if p == padding_idx {
        row.fill(0.0);
    }
    row
}

/// Whisper's `sinusoids`: `log_timescale_increment = ln(10000) / (channels // 2 - 1)`,
/// `inv_timescales = exp(-increment * arange(channels // 2))`, `[sin | cos]`.
fn whisper_row(dim: usize, p: u32) -> Vec<f64> {
    let inc = 10000f64.ln() / (dim / 2 - 1) as f64;
    let angle: Vec<f64> = (0..dim / 2).map(|i| f64::from(p) * (-inc * i as f64).exp()).collect();
    angle.iter().map(|a| a.sin()).chain(angle.iter().map(|a| a.cos())).collect()
}

const POSITIONS: [u32; 9] = [0, 1, 2, 3, 7, 100, 511, 1025, 65535];

#[test]
fn marian_and_pegasus_are_the_float64_half_split_sinusoid() {
    let opus = published("opus-mt-en-de.json");
    assert_eq!(opus.model_type(), "marian");
    assert_eq!((opus.dim(), opus.scale(), opus.pad_id()), (512, Some(Scale::SqrtDim), None));
    assert!(opus.token_inputs());
    assert_eq!(opus.spec().unwrap().variant(), Variant::Marian);
    check_table("opus-mt-en-de", &opus, &POSITIONS, |p| marian_row(512, p));

    // Pegasus copies Marian's module; an odd width has one more sin than cos column.
    let pegasus = parse(
        r#"{"model_type": "pegasus", "d_model": 9, "pad_token_id": 0, "scale_embedding": false}"#,
    );
    assert_eq!((pegasus.scale(), pegasus.pad_id()), (Some(Scale::None), None));
    check_table("pegasus d=9", &pegasus, &POSITIONS, |p| marian_row(9, p));
}

#[test]
fn m2m_100_fsmt_and_speech_to_text_are_fairseq_with_the_pad_row_zero() {
    let nllb = published("nllb-200-distilled-600m.json");
    assert_eq!((nllb.dim(), nllb.scale(), nllb.pad_id()), (1024, Some(Scale::SqrtDim), Some(1)));
    let spec = nllb.spec().unwrap();
    assert_eq!((spec.variant(), spec.padding_idx()), (Variant::Fairseq, Some(1)));
    check_table("nllb", &nllb, &POSITIONS, |p| fairseq_row(1024, 1, p));

    // NLLB-MoE's module is M2M100's (transformers 5.24).
    for (model_type, dim, pad) in
        [("fsmt", 9, 1), ("speech_to_text", 16, 5), ("m2m_100", 7, 0), ("nllb-moe", 12, 1)]
    {
        let json = format!(
            r#"{{"model_type": "{model_type}", "d_model": {dim}, "pad_token_id": {pad},
                "scale_embedding": true}}"#
        );
        let config = parse(&json);
        assert_eq!(config.pad_id(), Some(pad), "{model_type}");
        let mut positions = POSITIONS.to_vec();
        positions.push(pad);
        check_table(model_type, &config, &positions, |p| fairseq_row(dim as usize, pad, p));
    }
}

#[test]
fn whisper_is_the_encoder_sinusoid_and_takes_no_tokens() {
    let tiny = published("whisper-tiny.json");
    assert_eq!((tiny.dim(), tiny.scale(), tiny.pad_id()), (384, Some(Scale::None), None));
    assert!(!tiny.token_inputs(), "its sinusoid meets audio features");
    assert_eq!(tiny.spec().unwrap().variant(), Variant::Whisper);
    check_table("whisper-tiny", &tiny, &[0, 1, 2, 750, 1499, 65535], |p| whisper_row(384, p));
}

#[test]
fn bart_and_mbart_are_learned_tables_read_two_rows_on() {
    let bart = published("bart-base.json");
    assert_eq!(bart.positions(), ModelPositions::Learned { offset: 2 });
    assert_eq!(
        (bart.dim(), bart.scale(), bart.pad_id(), bart.spec()),
        (768, Some(Scale::None), None, None)
    );
    let mbart = parse(r#"{"model_type": "mbart", "d_model": 1024, "scale_embedding": true}"#);
    assert_eq!(mbart.positions(), ModelPositions::Learned { offset: 2 });
    assert_eq!(mbart.scale(), Some(Scale::SqrtDim));
}

fn refused_family(json: &str, model_type: &str, reason: &str) {
    match ModelConfig::from_hf_config(json) {
        Err(e @ Error::ModelFamily { .. }) => {
            let Error::ModelFamily { model_type: t, reason: r, .. } = &e else { unreachable!() };
            assert_eq!(t, model_type, "{e}");
            assert!(r.contains(reason), "{e}");
            assert!(e.to_string().contains(&format!("{model_type:?}")), "{e}");
        }
        other => panic!("{model_type}: expected ModelFamily, got {other:?}"),
    }
}

#[test]
fn families_posenc_does_not_serve_are_refused_by_model_type() {
    let llama = fs::read_to_string(config_path("llama-3.1-8b.json")).unwrap();
    refused_family(&llama, "llama", "posenc rope --config");
    let neox = fs::read_to_string(config_path("gpt-neox-20b.json")).unwrap();
    refused_family(&neox, "gpt_neox", "posenc rope --config");
    // Rotary configs known by their rotary dim (GPT-J) or by the language model under
    // text_config (Gemma 3) point to `rope` too.
    let gptj = fs::read_to_string(config_path("gpt-j-6b.json")).unwrap();
    refused_family(&gptj, "gptj", "posenc rope --config");
    let gemma = fs::read_to_string(config_path("gemma-3-4b-it.json")).unwrap();
    refused_family(&gemma, "gemma3", "posenc rope --config");
    // A hostile model_type is named by its first 64 characters, not echoed whole.
    let long = "x".repeat(100_000);
    match ModelConfig::from_hf_config(&format!(r#"{{"model_type": "{long}"}}"#)) {
        Err(Error::ModelFamily { model_type, .. }) => {
            assert_eq!(model_type, format!("{}...", "x".repeat(64)));
        }
        other => panic!("expected ModelFamily, got {other:?}"),
    }
    for (model_type, extra) in [
        ("bert", r#""hidden_size": 768, "max_position_embeddings": 512"#),
        ("gpt2", r#""n_embd": 768, "n_positions": 1024"#),
        ("distilbert", r#""dim": 768, "sinusoidal_pos_embds": false"#),
        ("opt", r#""hidden_size": 768, "d_model": 768"#),
        ("xglm", r#""d_model": 1024, "pad_token_id": 1, "scale_embedding": true"#),
        ("blenderbot", r#""d_model": 2560, "scale_embedding": true"#),
    ] {
        let json = format!(r#"{{"model_type": "{model_type}", {extra}}}"#);
        refused_family(&json, model_type, "served: marian");
    }
    // ALiBi families are pointed to `posenc alibi`.
    refused_family(r#"{"model_type": "bloom", "n_head": 16}"#, "bloom", "posenc alibi");
    refused_family(r#"{"model_type": "mpt", "d_model": 4096}"#, "mpt", "posenc alibi");
}

fn refused_key(json: &str, field: &str) {
    match ModelConfig::from_hf_config(json) {
        Err(Error::PeConfig { field: f, .. }) => assert_eq!(f, field, "{json}"),
        other => panic!("{json}: expected PeConfig naming {field}, got {other:?}"),
    }
}

#[test]
fn malformed_configs_are_refused_naming_the_key() {
    let m2m = |rest: &str| format!(r#"{{"model_type": "m2m_100", {rest}}}"#);
    let cases: Vec<(String, &str)> = vec![
        ("not json".into(), "(json)"),
        (r#"{"model_type": "marian", "d_model": 512"#.into(), "(json)"),
        ("[1, 2]".into(), "(json)"),
        (r#"{"model_type": "marian", "model_type": "m2m_100"}"#.into(), "model_type"),
        (r#"{"d_model": 512}"#.into(), "model_type"),
        (r#"{"model_type": null, "d_model": 512}"#.into(), "model_type"),
        (r#"{"model_type": 5}"#.into(), "model_type"),
        (m2m(r#""pad_token_id": 1, "scale_embedding": true"#), "d_model"),
        (m2m(r#""d_model": "1024", "pad_token_id": 1, "scale_embedding": true"#), "d_model"),
        (m2m(r#""d_model": -4, "pad_token_id": 1, "scale_embedding": true"#), "d_model"),
        (m2m(r#""d_model": 10.5, "pad_token_id": 1, "scale_embedding": true"#), "d_model"),
        (m2m(r#""d_model": 3, "pad_token_id": 1, "scale_embedding": true"#), "d_model"),
        (m2m(r#""d_model": 4294967296, "pad_token_id": 1, "scale_embedding": true"#), "d_model"),
        (r#"{"model_type": "whisper", "d_model": 385}"#.into(), "d_model"),
        (
            r#"{"model_type": "marian", "d_model": 70000, "scale_embedding": true}"#.into(),
            "d_model",
        ),
        (m2m(r#""d_model": 1024, "scale_embedding": true"#), "pad_token_id"),
        (m2m(r#""d_model": 1024, "pad_token_id": -1, "scale_embedding": true"#), "pad_token_id"),
        (m2m(r#""d_model": 1024, "pad_token_id": "1", "scale_embedding": true"#), "pad_token_id"),
        (m2m(r#""d_model": 1024, "pad_token_id": 1, "scale_embedding": 1"#), "scale_embedding"),
        (
            r#"{"model_type": "bart", "d_model": 768, "scale_embedding": "no"}"#.into(),
            "scale_embedding",
        ),
    ];
    for (json, field) in &cases {
        refused_key(json, field);
    }
    // An error names the key and says what is allowed.
    let e = ModelConfig::from_hf_config(&m2m(r#""d_model": 1024, "scale_embedding": true"#))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "config.json: invalid pad_token_id: missing (allowed: a whole number in 0..=4294967295)"
    );
    // A whole float is in the range but no integer: the message says which (it named the
    // range alone, which 64.0 is in; round twenty-two).
    let e = ModelConfig::from_hf_config(&m2m(r#""d_model": 64.0, "pad_token_id": 1,
        "scale_embedding": true"#))
    .unwrap_err();
    assert!(e.to_string().ends_with("written as an integer (without a fraction))"), "{e}");
}

/// A refused `d_model` of a sinusoid family names the width that family allows, whatever
/// the value's fault: 0, a negative, a fraction, text or a number past u32 had been told
/// "a whole number in 1..=4294967295", a limit no family has (the widths stop at 65536,
/// fairseq's and Whisper's start at 4).
#[test]
fn a_refused_d_model_names_the_familys_own_range() {
    let families = [
        ("marian", "a number in 1..=65536"),
        ("m2m_100", "a number in 4..=65536"),
        ("whisper", "an even number in 4..=65536"),
    ];
    let values = ["0", "-4", "10.5", "\"512\"", "4294967296", "99999999999999999999999", "70000"];
    for (model_type, allowed) in families {
        for value in values {
            let json = format!(
                r#"{{"model_type": "{model_type}", "d_model": {value}, "pad_token_id": 1,
                    "scale_embedding": true}}"#
            );
            match ModelConfig::from_hf_config(&json) {
                Err(Error::PeConfig { field, allowed: a, .. }) => {
                    assert_eq!((field.as_str(), a.as_str()), ("d_model", allowed), "{json}");
                }
                other => panic!("{json}: expected PeConfig naming d_model, got {other:?}"),
            }
        }
        let json = format!(r#"{{"model_type": "{model_type}", "pad_token_id": 1}}"#);
        let e = ModelConfig::from_hf_config(&json).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("config.json: invalid d_model: missing (allowed: {allowed})"),
            "{json}"
        );
    }
}

/// A refused number is named as it was written: serde_json prints a float of 1e23 as
/// `1e+23`, and a whole number written as a float is refused as `512.0`, not `512` (which
/// would look allowed).
#[test]
fn refused_numbers_are_named_as_written() {
    let cases = [
        (r#""d_model": 1e23, "pad_token_id": 1"#, "d_model: 1e23", "a number in 4..=65536"),
        (r#""d_model": 1e300, "pad_token_id": 1"#, "d_model: 1e300", "a number in 4..=65536"),
        (r#""d_model": 2.5e-7, "pad_token_id": 1"#, "d_model: 2.5e-7", "a number in 4..=65536"),
        (
            r#""d_model": 512.0, "pad_token_id": 1"#,
            "d_model: 512.0",
            "a number in 4..=65536, written as an integer (without a fraction)",
        ),
        (r#""d_model": -3, "pad_token_id": 1"#, "d_model: -3", "a number in 4..=65536"),
        (
            r#""d_model": 512, "pad_token_id": 1e23"#,
            "pad_token_id: 1e23",
            "a whole number in 0..=4294967295",
        ),
        (
            r#""d_model": 512, "pad_token_id": 4294967296"#,
            "pad_token_id: 4294967296",
            "a whole number in 0..=4294967295",
        ),
    ];
    for (fields, named, allowed) in cases {
        let json = format!(r#"{{"model_type": "m2m_100", {fields}, "scale_embedding": true}}"#);
        let e = ModelConfig::from_hf_config(&json).unwrap_err();
        assert_eq!(e.to_string(), format!("config.json: invalid {named} (allowed: {allowed})"));
    }
}

#[test]
fn read_model_config_bounds_what_it_reads() {
    let name = Path::new("huge.json");
    let mut huge = br#"{"model_type": "marian", "d_model": 512, "scale_embedding": true}"#.to_vec();
    huge.resize(posenc::rope::MAX_JSON_BYTES + 2, b' ');
    let e = inputs::read_model_config(Source::Bytes { name, bytes: &huge }).unwrap_err();
    assert!(matches!(&e, Error::PeConfig { field, .. } if field == "(json)"), "{e}");
    assert!(e.to_string().contains("at most"), "{e}");
    let missing = inputs::read_model_config(Source::File(Path::new("/nonexistent/config.json")));
    assert!(matches!(missing, Err(Error::Io { .. })), "{missing:?}");
    let fine = br#"{"model_type": "marian", "d_model": 512, "scale_embedding": true}"#;
    let c = inputs::read_model_config(Source::Bytes { name, bytes: fine }).unwrap();
    assert_eq!(c, published("opus-mt-en-de.json"));
}

#[test]
fn config_errors_name_the_file_they_were_read_from() {
    let no_pad = br#"{"model_type": "m2m_100", "d_model": 1024, "scale_embedding": true}"#;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("my-cfg.json");
    fs::write(&path, no_pad).unwrap();
    let e = inputs::read_model_config(Source::File(&path)).unwrap_err();
    assert!(
        matches!(&e, Error::PeConfig { path: Some(p), field, .. }
            if *p == path && field == "pad_token_id"),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!(
            "{}: invalid pad_token_id: missing (allowed: a whole number in 0..=4294967295)",
            path.display()
        )
    );
    // A source in memory is named as its caller names it; families are refused naming it too.
    let name = Path::new("models/llama/cfg.json");
    let llama = fs::read(config_path("llama-3.1-8b.json")).unwrap();
    let e = inputs::read_model_config(Source::Bytes { name, bytes: &llama }).unwrap_err();
    assert!(matches!(&e, Error::ModelFamily { path: Some(p), .. } if p == name), "{e:?}");
    assert!(e.to_string().starts_with("models/llama/cfg.json: model_type \"llama\": "), "{e}");
    // The text alone cannot know its file: `config.json`, until the caller names it.
    let e = ModelConfig::from_hf_config(std::str::from_utf8(no_pad).unwrap()).unwrap_err();
    assert!(matches!(&e, Error::PeConfig { path: None, .. }), "{e:?}");
    assert!(e.to_string().starts_with("config.json: invalid pad_token_id"), "{e}");
    let e = e.in_config_file("elsewhere.json");
    assert!(e.to_string().starts_with("elsewhere.json: invalid pad_token_id"), "{e}");
    assert_eq!(e.kind(), posenc::ErrorKind::Usage);
}

/// `scale_embedding` may be left out (a table does not use it); what uses the scale asks for
/// it and is refused, naming the key, when it is absent.
#[test]
fn scale_embedding_is_asked_for_only_where_the_scale_is_used() {
    let marian = parse(r#"{"model_type": "marian", "d_model": 512}"#);
    assert_eq!(marian.scale(), None);
    assert_eq!(marian.spec(), published("opus-mt-en-de.json").spec());
    match marian.required_scale() {
        Err(e @ Error::PeConfig { .. }) => assert_eq!(
            e.to_string(),
            "config.json: invalid scale_embedding: missing (allowed: true or false (the \
             family's default is not guessed))"
        ),
        other => panic!("{other:?}"),
    }
    let m2m = parse(r#"{"model_type": "m2m_100", "d_model": 1024, "pad_token_id": 1}"#);
    assert_eq!((m2m.scale(), m2m.pad_id()), (None, Some(1)));
    assert!(matches!(m2m.required_scale(),
            Err(Error::PeConfig { field, .. }) if field == "scale_embedding"));
    assert_eq!(published("opus-mt-en-de.json").required_scale().unwrap(), Scale::SqrtDim);
    assert_eq!(published("bart-base.json").required_scale().unwrap(), Scale::None);
    // Whisper's sinusoid meets no token embedding: no scale, whatever the config says.
    let whisper = parse(r#"{"model_type": "whisper", "d_model": 384}"#);
    assert_eq!(whisper.required_scale().unwrap(), Scale::None);
}
