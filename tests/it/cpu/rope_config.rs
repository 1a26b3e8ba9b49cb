//! `RopeSpec::from_hf_config` on the published `config.json` of real models
//! (tests/corpus/configs/; each file says which model and which of its values are as
//! published): the spec equals the one the builders give with the model's values, and every
//! config posenc cannot honour is refused with a typed error naming the key.

use std::fs;
use std::path::PathBuf;

use posenc::Error;
use posenc::rope::{Llama3, LongRope, Pairing, Proportional, RopeSpec, Scaling, Yarn};

pub fn config_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/configs").join(name)
}

fn read(name: &str) -> String {
    fs::read_to_string(config_path(name)).unwrap()
}

fn from(name: &str, layer_type: Option<&str>) -> RopeSpec {
    RopeSpec::from_hf_config(&read(name), layer_type).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The same spec, the same frequencies and attention factor at a short and a long length.
fn same(name: &str, got: &RopeSpec, want: &RopeSpec) {
    assert_eq!(got, want, "{name}");
    for len in [16, 200_000] {
        let (g, w) = (got.frequencies(len), want.frequencies(len));
        assert_eq!(g.inv_freq(), w.inv_freq(), "{name} at {len}");
        assert_eq!(g.attention_factor().to_bits(), w.attention_factor().to_bits(), "{name}");
    }
}

/// YaRN with DeepSeek's `mscale` and `mscale_all_dim` both 1 (the attention factor 1), as
/// DeepSeek-V3, Ministral 3 and Mistral 4 publish it.
fn mscale_yarn(factor: f64, original_max_position_embeddings: u64) -> Yarn {
    let mut yarn = Yarn::new(factor, original_max_position_embeddings);
    yarn.mscale = Some(1.0);
    yarn.mscale_all_dim = Some(1.0);
    yarn
}

fn json_field(v: &serde_json::Value, path: &[&str]) -> Vec<f64> {
    let mut v = v;
    for k in path {
        v = &v[*k];
    }
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

#[test]
fn llama_3_1_legacy_and_transformers_5_forms() {
    let want = RopeSpec::new(128)
        .unwrap()
        .with_base(500000.0)
        .unwrap()
        .with_scaling(Scaling::Llama3(Llama3::new(8.0, 1.0, 4.0, 8192)))
        .unwrap();
    for name in ["llama-3.1-8b.json", "llama-3.1-8b.transformers5.json"] {
        same(name, &from(name, None), &want);
    }
}

#[test]
fn qwen2_5_default_and_with_its_documented_yarn() {
    let plain = RopeSpec::new(128).unwrap().with_base(1e6).unwrap();
    same("qwen", &from("qwen2.5-7b-instruct.json", None), &plain);
    let yarn = plain.with_scaling(Scaling::Yarn(Yarn::new(4.0, 32768))).unwrap();
    let got = from("qwen2.5-7b-instruct.yarn.json", None);
    same("qwen yarn", &got, &yarn);
    // 0.1 ln 4 + 1.
    let a = got.frequencies(16).attention_factor();
    assert_eq!(a, (0.1 * 4f64.ln() + 1.0) as f32);
}

#[test]
fn phi_3_longrope_takes_the_top_level_original_length() {
    let text = read("phi-3-mini-128k-instruct.json");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let short = json_field(&v, &["rope_scaling", "short_factor"]);
    let long = json_field(&v, &["rope_scaling", "long_factor"]);
    assert_eq!((short.len(), long.len()), (48, 48));
    // transformers: original = the top-level 4096, factor = 131072 / 4096.
    let want = RopeSpec::new(96)
        .unwrap()
        .with_scaling(Scaling::LongRope(LongRope::new(short.clone(), long, Some(32.0), 4096)))
        .unwrap();
    let got = RopeSpec::from_hf_config(&text, None).unwrap();
    same("phi-3", &got, &want);
    let a = (1.0 + 32f64.ln() / 4096f64.ln()).sqrt() as f32;
    assert_eq!(got.frequencies(1).attention_factor(), a);
    // Up to the original length the short factors divide the default frequencies.
    let base = RopeSpec::new(96).unwrap().frequencies(1);
    let f = got.frequencies(4096);
    for (i, (&w, &w0)) in f.inv_freq().iter().zip(base.inv_freq()).enumerate() {
        assert!((w - w0 / short[i]).abs() <= 1e-15 * w0, "{i}");
    }
    // transformers 5: an explicit factor is kept, and the top-level length wins over the
    // object's.
    let explicit = text.replace(
        "\"type\": \"su\"",
        "\"type\": \"longrope\", \"factor\": 8.0, \"original_max_position_embeddings\": 2048",
    );
    assert_ne!(explicit, text);
    let spec = RopeSpec::from_hf_config(&explicit, None).unwrap();
    let Scaling::LongRope(l) = spec.scaling() else { panic!("{spec:?}") };
    assert_eq!((l.factor, l.original_max_position_embeddings), (Some(8.0), 4096));
    // Without the top-level length, Phi-3's config class fills in its 4096 (transformers
    // 4.x and 5), over any length in the object: the same spec (round twenty-two).
    let mut v2 = v.clone();
    v2.as_object_mut().unwrap().remove("original_max_position_embeddings");
    assert_eq!(RopeSpec::from_hf_config(&v2.to_string(), None).unwrap(), want);
    let scaling = v2["rope_scaling"].as_object_mut().unwrap();
    scaling.insert("original_max_position_embeddings".into(), 8192.into());
    assert_eq!(RopeSpec::from_hf_config(&v2.to_string(), None).unwrap(), want);
    // Elsewhere (a generic config) the object's length, else max_position_embeddings.
    let mut generic = v2.clone();
    generic.as_object_mut().unwrap().remove("model_type");
    let spec = RopeSpec::from_hf_config(&generic.to_string(), None).unwrap();
    let Scaling::LongRope(l) = spec.scaling() else { panic!("{spec:?}") };
    assert_eq!((l.factor, l.original_max_position_embeddings), (Some(16.0), 8192));
    generic["rope_scaling"].as_object_mut().unwrap().remove("original_max_position_embeddings");
    assert_eq!(
        RopeSpec::from_hf_config(&generic.to_string(), None)
            .unwrap()
            .frequencies(1)
            .attention_factor(),
        1.0
    );
    // Phi-3's class reads "yarn" as longrope and refuses the other scaled types; a null
    // top-level length (which transformers would take) is refused in any family.
    let yarn = text.replace("\"su\"", "\"yarn\"");
    assert_eq!(RopeSpec::from_hf_config(&yarn, None).unwrap(), want);
    let llama3 = r#"{"model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 32,
        "max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3",
        "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}}"#;
    let msg = refused(llama3, None, "rope_scaling.rope_type");
    assert!(msg.contains("\"llama3\" (model_type \"phi3\")"), "{msg}");
    let null = text.replacen(
        "\"original_max_position_embeddings\": 4096",
        "\"original_max_position_embeddings\": null",
        1,
    );
    assert_ne!(null, text);
    let msg = refused(&null, None, "original_max_position_embeddings");
    assert!(msg.contains("null (top level)"), "{msg}");
    refused(&null.replace("\"phi3\"", "\"llama\""), None, "original_max_position_embeddings");
    // The file is the first config, which calls it "su"; "longrope" is the same spec.
    let longrope = text.replace("\"su\"", "\"longrope\"");
    assert_ne!(longrope, text);
    assert_eq!(RopeSpec::from_hf_config(&longrope, None).unwrap(), want);
}

#[test]
fn deepseek_v3_rotates_qk_rope_head_dim_interleaved_with_mscale_yarn() {
    let yarn = mscale_yarn(40.0, 4096);
    let want = RopeSpec::new(64)
        .unwrap()
        .with_pairing(Pairing::Gptj)
        .with_scaling(Scaling::Yarn(yarn))
        .unwrap();
    let got = from("deepseek-v3.json", None);
    same("deepseek-v3", &got, &want);
    // mscale == mscale_all_dim: the attention factor is 1.
    assert_eq!(got.frequencies(16).attention_factor(), 1.0);
}

/// Ministral 3's and Mistral 4's RoPE parameters, as transformers 5.24's config classes write
/// them (`Ministral3Config().to_dict()`, `Mistral4Config().to_dict()`, cut to the fields
/// that matter), carry `llama_4_scaling_beta`, a query scale their attention applies after
/// the rotation, and `max_position_embeddings`: both read past, as transformers' classes
/// exempt them from its check (`ignore_keys_at_rope_validation`); elsewhere refused.
#[test]
fn mistral_families_read_past_their_attention_keys() {
    let ministral3 = r#"{"model_type": "ministral3", "hidden_size": 4096,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 262144, "rope_parameters": {"type": "yarn",
        "rope_theta": 1000000.0, "factor": 16.0, "original_max_position_embeddings": 16384,
        "max_position_embeddings": 262144, "beta_fast": 32.0, "beta_slow": 1.0,
        "mscale_all_dim": 1.0, "mscale": 1.0, "llama_4_scaling_beta": 0.1,
        "rope_type": "yarn"}}"#;
    let yarn = mscale_yarn(16.0, 16384);
    let want = RopeSpec::new(128).unwrap().with_base(1e6).unwrap();
    let want = want.with_scaling(Scaling::Yarn(yarn)).unwrap();
    same("ministral3", &RopeSpec::from_hf_config(ministral3, None).unwrap(), &want);
    // Mistral 4 is an MLA family: its qk_rope_head_dim (64) rotates, interleaved.
    let mistral4 = r#"{"model_type": "mistral4", "hidden_size": 4096,
        "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128,
        "max_position_embeddings": 1048576, "rope_parameters": {"type": "yarn",
        "rope_theta": 10000.0, "factor": 128.0, "original_max_position_embeddings": 8192,
        "max_position_embeddings": 1048576, "beta_fast": 32.0, "beta_slow": 1.0,
        "mscale_all_dim": 1.0, "mscale": 1.0, "llama_4_scaling_beta": 0.1,
        "partial_rotary_factor": 0.5, "rope_type": "yarn"}, "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 64, "rope_interleave": true}"#;
    let yarn = mscale_yarn(128.0, 8192);
    let want = RopeSpec::new(64).unwrap().with_pairing(Pairing::Gptj);
    let want = want.with_scaling(Scaling::Yarn(yarn)).unwrap();
    same("mistral4", &RopeSpec::from_hf_config(mistral4, None).unwrap(), &want);
    // Another family's RoPE parameters with the key: refused, naming it.
    let llama = ministral3.replace("\"ministral3\"", "\"llama\"");
    let e = RopeSpec::from_hf_config(&llama, None).unwrap_err();
    assert!(matches!(e, Error::RopeConfig { .. }), "{e}");
    assert!(e.to_string().contains("llama_4_scaling_beta"), "{e}");
}

/// transformers' dynamic, yarn and longrope read the config's `max_position_embeddings`,
/// never one inside the scaling object: the config's wins where both are given.
#[test]
fn the_configs_max_position_embeddings_wins_over_the_objects() {
    let config = |inner: &str| {
        format!(
            r#"{{"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 8,
            "max_position_embeddings": 4096, "rope_scaling": {{"rope_type": "yarn",
            "factor": null, "original_max_position_embeddings": 1024{inner}}}}}"#
        )
    };
    // factor = max_position_embeddings / original_max_position_embeddings = 4.
    let want = RopeSpec::new(128).unwrap().with_scaling(Scaling::Yarn(Yarn::new(4.0, 1024)));
    let want = want.unwrap();
    for inner in ["", r#", "max_position_embeddings": 8192"#] {
        let got = RopeSpec::from_hf_config(&config(inner), None).unwrap();
        same(inner, &got, &want);
    }
    // Without the config's own, transformers reads its config class's default, which posenc
    // does not know: the object's is refused, not read in its place.
    let bare = config(r#", "max_position_embeddings": 8192"#)
        .replace(r#""max_position_embeddings": 4096, "#, "");
    let e = RopeSpec::from_hf_config(&bare, None).unwrap_err();
    assert!(e.to_string().contains("rope_scaling.max_position_embeddings"), "{e}");
    assert!(e.to_string().contains("top level"), "{e}");
}

/// A model whose attention applies no RoPE by its own switch is refused, not given a
/// default RoPE (a porting stranger's Granite 4.0-H config, 2026-12-02): any
/// `position_embedding_type` other than `rope` or `rotary`, and in the families that apply
/// RoPE only on their switch (Granite 4.0 Hybrid, ESM) a config without it.
#[test]
fn models_without_rope_by_their_switch_are_refused() {
    let granite = |switch: &str| {
        format!(
            r#"{{"model_type": "granitemoehybrid", "hidden_size": 512,
            "num_attention_heads": 8, "rope_theta": 10000.0{switch}}}"#
        )
    };
    let cases = [
        (granite(r#", "position_embedding_type": "nope""#), "\"nope\""),
        (granite(""), "missing"),
        (granite(r#", "position_embedding_type": null"#), "missing"),
        (
            r#"{"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8,
            "position_embedding_type": "absolute"}"#
                .to_string(),
            "\"absolute\"",
        ),
        (
            r#"{"model_type": "esm", "hidden_size": 320, "num_attention_heads": 20}"#.into(),
            "missing",
        ),
    ];
    for (config, value) in cases {
        let e = RopeSpec::from_hf_config(&config, None).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("position_embedding_type"), "{config}: {text}");
        assert!(text.contains(value) && text.contains("no rotary module"), "{config}: {text}");
    }
    let served = RopeSpec::from_hf_config(&granite(r#", "position_embedding_type": "rope""#), None);
    assert_eq!(served.unwrap(), RopeSpec::new(64).unwrap());
    let esm = r#"{"model_type": "esm", "hidden_size": 320, "num_attention_heads": 20,
        "position_embedding_type": "rotary"}"#;
    assert_eq!(RopeSpec::from_hf_config(esm, None).unwrap(), RopeSpec::new(16).unwrap());
}

/// Phi-3.5-MoE's longrope scales cos and sin by `short_mscale` or `long_mscale` per range,
/// which posenc does not compute: refused by that key, not as a key longrope does not use.
#[test]
fn per_range_mscales_are_refused_by_name() {
    let phimoe = r#"{"model_type": "phimoe", "hidden_size": 4096, "num_attention_heads": 32,
        "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
        "rope_scaling": {"type": "longrope", "long_mscale": 1.243163121016122,
        "short_mscale": 1.243163121016122, "original_max_position_embeddings": 4096,
        "long_factor": [1.0], "short_factor": [1.0]}}"#;
    let e = RopeSpec::from_hf_config(phimoe, None).unwrap_err().to_string();
    assert!(e.contains("rope_scaling.long_mscale") && e.contains("per-range"), "{e}");
}

#[test]
fn partial_rotary_gpt_neox_phi_2_and_gpt_j() {
    // int(96 * 0.25) = 24, int(80 * 0.4) = 32, rotary_dim 64 of 4096 / 16.
    let neox = RopeSpec::partial(96, 24).unwrap();
    same("gpt-neox", &from("gpt-neox-20b.json", None), &neox);
    let phi2 = RopeSpec::partial(80, 32).unwrap();
    same("phi-2", &from("phi-2.json", None), &phi2);
    let gptj = RopeSpec::partial(256, 64).unwrap().with_pairing(Pairing::Gptj);
    same("gpt-j", &from("gpt-j-6b.json", None), &gptj);
    // transformers 5 keeps partial_rotary_factor in rope_parameters.
    let tf5 = r#"{"model_type": "phi", "hidden_size": 2560, "num_attention_heads": 32,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                            "partial_rotary_factor": 0.4}}"#;
    same("phi-2 tf5", &RopeSpec::from_hf_config(tf5, None).unwrap(), &phi2);
}

#[test]
fn gemma_3_per_layer_type_in_both_forms() {
    let full = RopeSpec::new(256)
        .unwrap()
        .with_base(1e6)
        .unwrap()
        .with_scaling(Scaling::Linear { factor: 8.0 })
        .unwrap();
    let sliding = RopeSpec::new(256).unwrap();
    for name in ["gemma-3-4b-it.transformers5.json", "gemma-3-4b-it.json"] {
        same(name, &from(name, Some("full_attention")), &full);
        same(name, &from(name, Some("sliding_attention")), &sliding);
    }
    // Two RoPEs in either form: a layer type must choose.
    refused(&read("gemma-3-4b-it.json"), None, "layer_type");
    refused(&read("gemma-3-4b-it.transformers5.json"), None, "layer_type");
}

/// Gemma 4: the full-attention layers' proportional RoPE covers `global_head_dim` (512), with
/// `int(0.25 * 512 // 2)` = 64 frequencies `1e6^(-2i/512)` and 192 zero ones, as
/// transformers' `_compute_proportional_rope_parameters` builds them; the sliding layers'
/// is a default RoPE over `head_dim` (256).
#[test]
fn gemma_4_proportional_rope_covers_the_global_head() {
    let name = "gemma-4-e2b-it.json";
    let full = from(name, Some("full_attention"));
    let want = RopeSpec::new(512)
        .unwrap()
        .with_base(1e6)
        .unwrap()
        .with_scaling(Scaling::Proportional(Proportional::new(1.0, 0.25)))
        .unwrap();
    same(name, &full, &want);
    same(name, &from(name, Some("sliding_attention")), &RopeSpec::new(256).unwrap());
    let f = full.frequencies(16);
    assert_eq!(f.inv_freq().len(), 256);
    for (i, &w) in f.inv_freq().iter().enumerate() {
        if i < 64 {
            let reference = 1e6f64.powf(-(2.0 * i as f64) / 512.0);
            assert!((w - reference).abs() <= 4.0 * f64::EPSILON * reference, "{i}: {w}");
        } else {
            assert_eq!(w, 0.0, "{i}");
        }
    }
    assert_eq!(f.attention_factor(), 1.0);
    // Not the partial rotary RoPE of the same share, whose exponent is over 128.
    let partial = RopeSpec::partial(512, 128).unwrap().with_base(1e6).unwrap();
    assert_ne!(partial.frequencies(16).inv_freq()[1], f.inv_freq()[1]);
    // A factor divides the non-zero frequencies; a second partial_rotary_factor (top level)
    // that disagrees is refused; without global_head_dim the width is transformers' 512.
    let text = read(name);
    let scaled = text.replace(
        "\"rope_type\": \"proportional\"",
        "\"rope_type\": \"proportional\", \"factor\": 4.0",
    );
    assert_ne!(scaled, text);
    let g = RopeSpec::from_hf_config(&scaled, Some("full_attention")).unwrap().frequencies(16);
    assert_eq!(g.inv_freq()[3], f.inv_freq()[3] / 4.0);
    assert_eq!(g.inv_freq()[64], 0.0);
    let twice =
        text.replace("\"head_dim\": 256,", "\"head_dim\": 256, \"partial_rotary_factor\": 0.5,");
    assert_ne!(twice, text);
    refused(&twice, Some("full_attention"), "partial_rotary_factor");
    let narrow = text.replace("\"global_head_dim\": 512,", "");
    assert_ne!(narrow, text);
    let spec = RopeSpec::from_hf_config(&narrow, Some("full_attention")).unwrap();
    same(name, &spec, &want);
    for bad in ["511", "0", "70000", "4294967296"] {
        let odd = text.replace("\"global_head_dim\": 512", &format!("\"global_head_dim\": {bad}"));
        let msg = refused(&odd, Some("full_attention"), "global_head_dim");
        assert!(msg.contains(&format!("global_head_dim: {bad}")) || bad == "0", "{msg}");
    }
    let zero = text.replace("\"rope_theta\": 1000000.0", "\"rope_theta\": 0");
    refused(&zero, Some("full_attention"), "rope_theta");
    // A layer type whose entry is null is named as such, chosen or not.
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut nulled = v.clone();
    nulled["text_config"]["rope_parameters"]["full_attention"] = serde_json::Value::Null;
    let nulled = nulled.to_string();
    refused(&nulled, Some("full_attention"), "rope_parameters.full_attention");
    RopeSpec::from_hf_config(&nulled, Some("sliding_attention")).unwrap();
    refused(&nulled, None, "layer_type");
    let wide = text.replace("\"partial_rotary_factor\": 0.25", "\"partial_rotary_factor\": 1.5");
    refused(&wide, Some("full_attention"), "rope_parameters.full_attention.partial_rotary_factor");
}

/// `w` within 4 ulps of the float64 `reference`.
fn near(w: f64, reference: f64, what: &str) {
    assert!((w - reference).abs() <= 4.0 * f64::EPSILON * reference, "{what}: {w} vs {reference}");
}

/// Config A (a Gemma 3 text config with a `partial_rotary_factor`): transformers' Gemma 3
/// builds its `"default"` sliding-attention RoPE with its own
/// `compute_default_rope_parameters`, over the whole `head_dim` (256: 128 frequencies
/// `1e4^(-2i/256)`), ignoring the factor wherever it is given; its linear full-attention
/// RoPE reads it: `int(256 * 0.5)` = 128, 64 frequencies `1e6^(-2i/128) / 8`.
#[test]
fn gemma_default_rope_ignores_partial_rotary_factor() {
    let top = r#"{"model_type": "gemma3_text", "head_dim": 256, "hidden_size": 2560,
        "num_attention_heads": 8, "max_position_embeddings": 131072,
        "partial_rotary_factor": 0.5,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}}}"#;
    let nested = top.replace("\"partial_rotary_factor\": 0.5,", "").replace(
        "\"rope_type\": \"default\",",
        "\"rope_type\": \"default\", \"partial_rotary_factor\": 0.5,",
    );
    assert_eq!(nested.matches("0.5").count(), 1, "{nested}");
    let full_want = RopeSpec::partial(256, 128)
        .unwrap()
        .with_base(1e6)
        .unwrap()
        .with_scaling(Scaling::Linear { factor: 8.0 })
        .unwrap();
    for (what, text) in [("top level", top), ("nested in sliding_attention", &nested)] {
        let sliding = RopeSpec::from_hf_config(text, Some("sliding_attention")).unwrap();
        same(what, &sliding, &RopeSpec::new(256).unwrap());
        let f = sliding.frequencies(16);
        assert_eq!(f.inv_freq().len(), 128, "{what}");
        for (i, &w) in f.inv_freq().iter().enumerate() {
            near(w, 1e4f64.powf(-(2.0 * i as f64) / 256.0), what);
        }
        near(f.inv_freq()[1], 0.930572040929699, what);
        near(f.inv_freq()[127], 0.00010746078283213175, what);
    }
    // The linear layers read the top-level factor (the nested variant has none for them).
    let full = RopeSpec::from_hf_config(top, Some("full_attention")).unwrap();
    same("full_attention", &full, &full_want);
    let f = full.frequencies(16);
    assert_eq!(f.inv_freq().len(), 64);
    assert_eq!(f.inv_freq()[0], 0.125);
    near(f.inv_freq()[1], 0.10073027347018523, "full_attention");
    let whole = RopeSpec::from_hf_config(&nested, Some("full_attention")).unwrap();
    assert_eq!(whole.rotary_dim(), 256);
    // A factor in full_attention's own object is read there alone.
    let own = top.replace("\"partial_rotary_factor\": 0.5,", "").replace(
        "\"rope_type\": \"linear\",",
        "\"rope_type\": \"linear\", \"partial_rotary_factor\": 0.5,",
    );
    same("own", &RopeSpec::from_hf_config(&own, Some("full_attention")).unwrap(), &full_want);
    let sliding = RopeSpec::from_hf_config(&own, Some("sliding_attention")).unwrap();
    same("own", &sliding, &RopeSpec::new(256).unwrap());
    // The legacy Gemma 3 form, as transformers 5 reads it: its sliding layers' default
    // RoPE is the model's own too.
    let legacy = read("gemma-3-4b-it.json").replacen(
        "\"head_dim\"",
        "\"partial_rotary_factor\": 0.5, \"head_dim\"",
        1,
    );
    assert!(legacy.contains("\"partial_rotary_factor\": 0.5"));
    let sliding = RopeSpec::from_hf_config(&legacy, Some("sliding_attention")).unwrap();
    assert_eq!(sliding.rotary_dim(), 256);
}

/// A per-layer-type config of Laguna, whose config class copies no top-level value into the
/// layer types' parameters (transformers 5.23): its default layers read their own entry's
/// `partial_rotary_factor`, else 1. A top-level factor reaches them only when another layer's
/// non-default type makes transformers standardize every layer type's parameters (here the
/// linear `full_attention`, built first in sorted order), so beside a default layer without
/// its own factor it is refused; the linear layer reads it, as every family's non-default
/// types do.
#[test]
fn per_layer_families_read_partial_rotary_factor_from_the_layer_entry() {
    let text = r#"{"model_type": "laguna", "head_dim": 128, "hidden_size": 2048,
        "num_attention_heads": 16, "max_position_embeddings": 131072,
        "partial_rotary_factor": 0.5,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 500000.0}}}"#;
    refused(text, Some("sliding_attention"), "partial_rotary_factor");
    let full = RopeSpec::from_hf_config(text, Some("full_attention")).unwrap();
    let want = RopeSpec::partial(128, 64)
        .unwrap()
        .with_base(500000.0)
        .unwrap()
        .with_scaling(Scaling::Linear { factor: 4.0 })
        .unwrap();
    same("laguna full", &full, &want);
    // Given in the sliding layers' own object only, it narrows them alone.
    let nested = text.replace("\"partial_rotary_factor\": 0.5,", "").replace(
        "\"rope_type\": \"default\",",
        "\"rope_type\": \"default\", \"partial_rotary_factor\": 0.25,",
    );
    let sliding = RopeSpec::from_hf_config(&nested, Some("sliding_attention")).unwrap();
    assert_eq!(sliding.rotary_dim(), 32);
    near(sliding.frequencies(1).inv_freq()[1], 1e4f64.powf(-2.0 / 32.0), "laguna sliding");
    assert_eq!(
        RopeSpec::from_hf_config(&nested, Some("full_attention")).unwrap().rotary_dim(),
        128
    );
}

/// Config B (Gemma 4 E2B's config, changed): every `full_attention` layer is
/// `global_head_dim` wide, 512 when the config omits it; the sliding layers' default RoPE
/// ignores a top-level `partial_rotary_factor`; a full_attention `rope_type` other than
/// proportional (whose width transformers versions disagree on) is refused.
#[test]
fn gemma_4_head_dims_and_partial_rotary_factor() {
    let name = "gemma-4-e2b-it.json";
    let text = read(name);
    // (i) No global_head_dim: 256 frequencies, 64 of them 1e6^(-2i/512), the rest zero.
    let narrow = text.replace("\"global_head_dim\": 512,", "");
    assert_ne!(narrow, text);
    let full = RopeSpec::from_hf_config(&narrow, Some("full_attention")).unwrap();
    assert_eq!((full.head_dim(), full.rotary_dim()), (512, 512));
    let f = full.frequencies(16);
    assert_eq!(f.inv_freq().len(), 256);
    assert_eq!(f.inv_freq().iter().filter(|w| **w != 0.0).count(), 64);
    near(f.inv_freq()[1], 0.9474635256553754, "gemma 4 full");
    // The sliding layers keep head_dim.
    let sliding = RopeSpec::from_hf_config(&narrow, Some("sliding_attention")).unwrap();
    same(name, &sliding, &RopeSpec::new(256).unwrap());
    // (ii) A top-level partial_rotary_factor (the same as full_attention's): the sliding
    // layers' default RoPE still spans head_dim.
    let top =
        text.replace("\"head_dim\": 256,", "\"head_dim\": 256, \"partial_rotary_factor\": 0.25,");
    assert_ne!(top, text);
    let sliding = RopeSpec::from_hf_config(&top, Some("sliding_attention")).unwrap();
    same(name, &sliding, &RopeSpec::new(256).unwrap());
    let f = sliding.frequencies(16);
    assert_eq!(f.inv_freq().len(), 128);
    near(f.inv_freq()[1], 0.930572040929699, "gemma 4 sliding");
    let full = RopeSpec::from_hf_config(&top, Some("full_attention")).unwrap();
    same(name, &full, &from(name, Some("full_attention")));
    // A full_attention layer of another rope type is refused, naming the key.
    for other in [r#""default""#, r#""linear", "factor": 2.0"#] {
        let changed =
            text.replace("\"rope_type\": \"proportional\"", &format!("\"rope_type\": {other}"));
        assert_ne!(changed, text);
        let msg =
            refused(&changed, Some("full_attention"), "rope_parameters.full_attention.rope_type");
        assert!(msg.contains("proportional") && msg.contains("global_head_dim"), "{msg}");
        RopeSpec::from_hf_config(&changed, Some("sliding_attention")).unwrap();
    }
    // A proportional sliding layer is head_dim wide (only full_attention reads
    // global_head_dim), as is a proportional RoPE of another family.
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut prop = v.clone();
    prop["text_config"]["rope_parameters"]["sliding_attention"]["rope_type"] =
        "proportional".into();
    let spec = RopeSpec::from_hf_config(&prop.to_string(), Some("sliding_attention")).unwrap();
    assert_eq!((spec.head_dim(), spec.rotary_dim()), (256, 256));
    let other = r#"{"model_type": "llama", "head_dim": 128, "global_head_dim": 512,
        "rope_parameters": {"rope_type": "proportional", "partial_rotary_factor": 0.5}}"#;
    let spec = RopeSpec::from_hf_config(other, None).unwrap();
    assert_eq!((spec.head_dim(), spec.rotary_dim()), (128, 128));
}

/// JSON numbers are read as the nearest float64, as Python's `json` and Rust's `parse` read
/// them: serde_json's default fast path is off by an ulp on some 17-digit decimals, which
/// moved a base (and the cache at large positions) or the count of proportional RoPE's
/// non-zero frequencies.
#[test]
fn json_numbers_are_the_nearest_float64() {
    // Values where the fast path was found off (a stranger's random 17-digit bases).
    for text in ["500480.73622102157", "0.0039062499999999996", "9.999999999999999e-5"] {
        let want: f64 = text.parse().unwrap();
        let config = format!(
            r#"{{"head_dim": 512, "rope_theta": 1e6,
            "rope_scaling": {{"rope_type": "linear", "factor": {text}}}}}"#
        );
        let spec = RopeSpec::from_hf_config(&config, None).unwrap();
        assert_eq!(spec.scaling(), &Scaling::Linear { factor: want }, "{text}");
        let config = format!(r#"{{"head_dim": 64, "rope_theta": {text}1}}"#);
        let want: f64 = format!("{text}1").parse().unwrap();
        if want > 1.0 {
            let spec = RopeSpec::from_hf_config(&config, None).unwrap();
            assert_eq!(spec.base().to_bits(), want.to_bits(), "{text}1");
        }
    }
    // Python: int(0.0039062499999999996 * 512 // 2) == 0.
    let p = Proportional::new(1.0, "0.0039062499999999996".parse().unwrap());
    assert_eq!(p.rope_angles(512), 0);
    let text = r#"{"head_dim": 512, "rope_parameters": {"rope_type": "proportional",
        "partial_rotary_factor": 0.0039062499999999996}}"#;
    let spec = RopeSpec::from_hf_config(text, None).unwrap();
    assert!(spec.frequencies(1).inv_freq().iter().all(|w| *w == 0.0));
}

/// The error, which must be a typed `RopeConfig` naming `field`, on one line.
pub(super) fn refused(text: &str, layer_type: Option<&str>, field: &str) -> String {
    let e = RopeSpec::from_hf_config(text, layer_type).unwrap_err();
    match &e {
        Error::RopeConfig { field: f, .. } => assert_eq!(f, field, "{e}"),
        other => panic!("{other:?}"),
    }
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "{msg}");
    msg
}

#[test]
fn configs_posenc_cannot_honour_are_refused_naming_the_key() {
    let llama = read("llama-3.1-8b.json");
    let msg = refused(&llama.replace("\"llama3\"", "\"xpos\""), None, "rope_scaling.rope_type");
    assert!(msg.contains("xpos") && msg.contains("llama3"), "{msg}");
    let mrope = r#"{"hidden_size": 3584, "num_attention_heads": 28,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}"#;
    refused(mrope, None, "rope_scaling.mrope_section");
    // A field the type does not use.
    refused(&llama.replace("low_freq_factor", "low_freq"), None, "rope_scaling.low_freq");
    // Both forms at once.
    let both = r#"{"head_dim": 64, "rope_scaling": {"rope_type": "linear", "factor": 2},
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000}}"#;
    refused(both, None, "rope_scaling");
    let twice = r#"{"head_dim": 64, "partial_rotary_factor": 0.5,
        "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.25}}"#;
    refused(twice, None, "partial_rotary_factor");
    let bases = r#"{"head_dim": 64, "rope_theta": 500000,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000}}"#;
    refused(bases, None, "rope_theta");
    // The same base in both places reads.
    let same = bases.replace("500000", "10000");
    assert_eq!(RopeSpec::from_hf_config(&same, None).unwrap().base(), 10000.0);
    // Phi-3's 48 factors against a rotary dim of 48 (24 frequencies).
    let phi3 = read("phi-3-mini-128k-instruct.json");
    let half = phi3.replacen("\"rope_theta\"", "\"partial_rotary_factor\": 0.5, \"rope_theta\"", 1);
    let msg = refused(&half, None, "rope_scaling.short_factor");
    assert!(msg.starts_with("config.json: invalid rope_scaling.short_factor: 48 numbers"), "{msg}");

    let gemma = read("gemma-3-4b-it.transformers5.json");
    let msg = refused(&gemma, Some("global"), "layer_type");
    assert!(msg.contains("full_attention, sliding_attention"), "{msg}");
    let msg = refused(&gemma, None, "layer_type");
    assert!(msg.contains("missing") && msg.contains("sliding_attention"), "{msg}");
    refused(&llama, Some("full_attention"), "layer_type");
    refused(&read("gemma-3-4b-it.json"), Some("local"), "layer_type");

    let msg = refused(r#"{"hidden_size": 100, "num_attention_heads": 3}"#, None, "hidden_size");
    assert!(msg.contains("100") && msg.contains('3'), "{msg}");
    // (Llama's, Mistral's and Qwen2's class sizes stand in: cpu::rope_families.)
    refused(r#"{"model_type": "olmo2"}"#, None, "head_dim");
    refused("{}", None, "head_dim");
    // int(90 * 0.1) = 9: odd (Phi's default RoPE reads the factor).
    let odd = r#"{"model_type": "phi", "head_dim": 90, "partial_rotary_factor": 0.1}"#;
    let msg = refused(odd, None, "partial_rotary_factor");
    assert!(msg.contains("rotary dim 9"), "{msg}");
    refused(r#"{"head_dim": 64, "rotary_dim": 33}"#, None, "rotary_dim");
    refused(r#"{"head_dim": 64, "rotary_pct": 1.5}"#, None, "rotary_pct");
    refused(r#"{"head_dim": 64, "rope_theta": "big"}"#, None, "rope_theta");
    // A model_type that is no string was read as none: the generic RoPE, silently.
    refused(r#"{"model_type": ["gptj"], "head_dim": 64}"#, None, "model_type");
    let nested = r#"{"model_type": "llava", "text_config": {"model_type": 5, "head_dim": 64}}"#;
    refused(nested, None, "text_config.model_type");

    refused(&llama[..llama.len() / 2], None, "(json)");
    refused("[1, 2]", None, "(json)");
    refused(r#"{"head_dim": 64, "head_dim": 128}"#, None, "head_dim");
    // The builders' range errors are the config's too (so a file can be named).
    refused(r#"{"head_dim": 70000}"#, None, "head_dim");
    let e = RopeSpec::from_hf_config(r#"{"head_dim": 70000}"#, None).unwrap_err();
    let e = e.in_config_file("models/x/config.json");
    assert!(e.to_string().starts_with("models/x/config.json: invalid head_dim: 70000"), "{e}");
    // Values past u32 are named as given, not saturated; numbers print short.
    let msg = refused(r#"{"head_dim": 4294967296}"#, None, "head_dim");
    assert!(msg.contains("invalid head_dim: 4294967296 "), "{msg}");
    let msg = refused(r#"{"qk_rope_head_dim": 8589934592}"#, None, "qk_rope_head_dim");
    assert!(msg.contains("8589934592"), "{msg}");
    // As written: serde_json prints a float of 1e23 as 1e+23.
    let msg = refused(r#"{"head_dim": 1e23}"#, None, "head_dim");
    assert!(msg.contains("invalid head_dim: 1e23 "), "{msg}");
    let msg = refused(r#"{"hidden_size": 1e23, "num_attention_heads": 8}"#, None, "hidden_size");
    assert!(msg.contains("invalid hidden_size: 1e23 "), "{msg}");
    // Whole numbers written as floats read as Python reads them; fractions are refused.
    let floats = r#"{"hidden_size": 4096.0, "num_attention_heads": 32.0, "head_dim": 128.0}"#;
    assert_eq!(RopeSpec::from_hf_config(floats, None).unwrap(), RopeSpec::new(128).unwrap());
    refused(r#"{"head_dim": 128.5}"#, None, "head_dim");
    refused(r#"{"head_dim": 0.0}"#, None, "head_dim");
    let tiny = r#"{"model_type": "phi", "head_dim": 64, "partial_rotary_factor": 1e-300}"#;
    let msg = refused(tiny, None, "partial_rotary_factor");
    assert!(msg.contains("invalid partial_rotary_factor: 1e-300 (rotary dim 0"), "{msg}");
}

#[test]
fn defaults_without_rope_fields() {
    // No rope_theta: 10000, as transformers; no scaling, neox.
    let spec = RopeSpec::from_hf_config(r#"{"hidden_size": 512, "num_attention_heads": 8}"#, None)
        .unwrap();
    assert_eq!(spec, RopeSpec::new(64).unwrap());
    // A bad base is refused naming the key it was read from.
    refused(r#"{"head_dim": 64, "rope_theta": 0.5}"#, None, "rope_theta");
    refused(r#"{"head_dim": 64, "rotary_emb_base": 1}"#, None, "rotary_emb_base");
}

/// Every prefix of every config, and every number in them replaced by hostile values, gives
/// a spec or a typed error: never a panic.
#[test]
fn cut_and_mutated_configs_never_panic() {
    let dir = config_path("");
    let mut names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    assert!(names.len() >= 11, "{names:?}");
    for name in &names {
        let text = read(name);
        for cut in (0..text.len()).filter(|&k| text.is_char_boundary(k)) {
            let _ = RopeSpec::from_hf_config(&text[..cut], Some("full_attention"));
        }
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let hostile = [
            serde_json::json!(0),
            serde_json::json!(-1),
            serde_json::json!(1e300),
            serde_json::json!(u64::MAX),
            serde_json::json!(0.5),
            serde_json::json!("x"),
            serde_json::json!(null),
            serde_json::json!([]),
        ];
        fn numbers(v: &serde_json::Value, path: Vec<String>, out: &mut Vec<Vec<String>>) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, x) in m {
                        numbers(x, [path.clone(), vec![k.clone()]].concat(), out);
                    }
                }
                serde_json::Value::Number(_) => out.push(path),
                _ => {}
            }
        }
        let mut paths = vec![];
        numbers(&v, vec![], &mut paths);
        for path in paths {
            for h in &hostile {
                let mut w = v.clone();
                let mut slot = &mut w;
                for k in &path {
                    slot = &mut slot[k.as_str()];
                }
                *slot = h.clone();
                for layer_type in [None, Some("full_attention"), Some("sliding_attention")] {
                    let _ = RopeSpec::from_hf_config(&w.to_string(), layer_type);
                }
            }
        }
    }
}

/// Families whose positions are not rotary are refused by `model_type`, whatever head
/// dimensions their configs carry: a default RoPE read out of them would be a silent wrong
/// answer. The corpus's absolute-position configs are among them.
#[test]
fn configs_of_families_without_rope_are_refused_by_model_type() {
    for name in [
        "opus-mt-en-de.json",
        "nllb-200-distilled-600m.json",
        "whisper-tiny.json",
        "bart-base.json",
    ] {
        match RopeSpec::from_hf_config(&read(name), None) {
            Err(Error::ModelFamily { model_type, reason, .. }) => {
                assert!(reason.contains("not rotary"), "{name}: {reason}");
                assert!(!model_type.is_empty(), "{name}");
            }
            other => panic!("{name}: expected ModelFamily, got {other:?}"),
        }
    }
    let not_rotary = posenc::rope::families::all()
        .iter()
        .filter(|f| f.refusal == Some(posenc::rope::families::Refusal::NotRotary));
    for model_type in not_rotary.map(|f| f.model_type) {
        let json = format!(
            r#"{{"model_type": "{model_type}", "hidden_size": 768, "num_attention_heads": 12}}"#
        );
        let e = RopeSpec::from_hf_config(&json, None).unwrap_err();
        assert!(
            matches!(&e, Error::ModelFamily { model_type: m, .. } if m == model_type),
            "{model_type}: {e:?}"
        );
    }
    // A rotary family's config without rope keys still reads (the default base).
    let llama = r#"{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32}"#;
    assert_eq!(RopeSpec::from_hf_config(llama, None).unwrap().head_dim(), 128);
}

#[test]
fn config_errors_name_the_file_they_were_read_from() {
    use posenc::inputs::{self, Source};
    use std::path::Path;

    let name = Path::new("models/llama/cfg.json");
    let bad = br#"{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                   "rope_scaling": {"rope_type": "linear", "factor": -1}}"#;
    let e = inputs::read_rope_config(Source::Bytes { name, bytes: bad }, None).unwrap_err();
    match &e {
        Error::RopeConfig { path: Some(p), field, .. } => {
            assert_eq!((p.as_path(), field.as_str()), (name, "rope_scaling.factor"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().starts_with("models/llama/cfg.json: invalid rope_scaling.factor"), "{e}");
    let opus = fs::read(config_path("opus-mt-en-de.json")).unwrap();
    let e = inputs::read_rope_config(Source::Bytes { name, bytes: &opus }, None).unwrap_err();
    assert!(matches!(&e, Error::ModelFamily { path: Some(p), .. } if p == name), "{e:?}");
    assert!(e.to_string().starts_with("models/llama/cfg.json: model_type \"marian\""), "{e}");
    // The text alone cannot know its file.
    let e = RopeSpec::from_hf_config(std::str::from_utf8(bad).unwrap(), None).unwrap_err();
    assert!(matches!(&e, Error::RopeConfig { path: None, .. }), "{e:?}");
    assert!(e.to_string().starts_with("config.json: invalid rope_scaling.factor"), "{e}");
}

/// Configs where posenc read otherwise than transformers 5.25 (round twenty-two of the
/// hostile probes, 2026-12-03), each checked there by building the family's rotary module.
#[test]
fn configs_read_as_transformers_reads_them() {
    // GPT-NeoX's classes fill the factor from rotary_pct (0.25, Japanese 1): a top-level
    // partial_rotary_factor is ignored, beside rotary_pct or alone.
    let neox = r#"{"model_type": "gpt_neox", "hidden_size": 4096, "num_attention_heads": 16,
        "partial_rotary_factor": 0.5"#;
    let read = |text: String| RopeSpec::from_hf_config(&text, None).unwrap();
    assert_eq!(read(format!("{neox}}}")), RopeSpec::partial(256, 64).unwrap());
    assert_eq!(read(format!("{neox}, \"rotary_pct\": 1.0}}")), RopeSpec::new(256).unwrap());
    let japanese = neox.replace("gpt_neox", "gpt_neox_japanese");
    assert_eq!(read(format!("{japanese}}}")), RopeSpec::new(256).unwrap());
    // The factor inside rope_parameters is the RoPE's own, read over rotary_pct.
    let inside = r#"{"model_type": "gpt_neox", "hidden_size": 4096, "num_attention_heads": 16,
        "rotary_pct": 0.25, "rope_parameters": {"rope_type": "default", "rope_theta": 10000,
        "partial_rotary_factor": 0.5}}"#;
    assert_eq!(read(inside.into()), RopeSpec::partial(256, 128).unwrap());

    // yarn requires the factor key (KeyError in transformers); null is max / original.
    let yarn = |factor: &str| {
        format!(
            r#"{{"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 32768,
            "rope_scaling": {{"rope_type": "yarn", {factor}
            "original_max_position_embeddings": 4096}}}}"#
        )
    };
    let msg = refused(&yarn(""), None, "rope_scaling.factor");
    assert!(msg.contains("factor: missing") && msg.contains("null"), "{msg}");
    let Scaling::Yarn(y) = read(yarn("\"factor\": null, ")).scaling().clone() else { panic!() };
    assert_eq!(y.factor, 8.0);
    assert!(
        Scaling::from_hf_json(r#"{"rope_type": "yarn", "original_max_position_embeddings": 8}"#)
            .is_err()
    );

    // llama3 without original_max_position_embeddings: transformers 5 fills in the config's
    // max_position_embeddings; without that, refused.
    let llama3 = |max: &str| {
        format!(
            r#"{{"hidden_size": 4096, "num_attention_heads": 32{max},
            "rope_scaling": {{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0}}}}"#
        )
    };
    let Scaling::Llama3(l) = read(llama3(", \"max_position_embeddings\": 8192")).scaling().clone()
    else {
        panic!()
    };
    assert_eq!((l.factor, l.original_max_position_embeddings), (8.0, 8192));
    let msg = refused(&llama3(""), None, "rope_scaling.original_max_position_embeddings");
    assert!(msg.contains("unless max_position_embeddings is given"), "{msg}");

    // The YaRN authors' configs carry `finetuned`, which transformers ignores (with a
    // warning): Yarn-Mistral-7b-128k's rope fields.
    let yarn_mistral = r#"{"model_type": "mistral", "hidden_size": 4096,
        "num_attention_heads": 32, "max_position_embeddings": 32768, "rope_theta": 10000.0,
        "rope_scaling": {"factor": 16.0, "finetuned": true,
        "original_max_position_embeddings": 8192, "type": "yarn"}}"#;
    let Scaling::Yarn(y) = read(yarn_mistral.into()).scaling().clone() else { panic!() };
    assert_eq!((y.factor, y.original_max_position_embeddings), (16.0, 8192));
    let msg = refused(
        &yarn_mistral.replace("\"finetuned\": true", "\"finetuned\": 1"),
        None,
        "rope_scaling.finetuned",
    );
    assert!(msg.contains("true or false"), "{msg}");
    // An empty rope_scaling is none (transformers 5 takes `rope_scaling or
    // rope_parameters`), beside rope_parameters too.
    let empty = r#"{"hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000,
        "rope_scaling": {}}"#;
    assert_eq!(read(empty.into()), RopeSpec::new(128).unwrap().with_base(500000.0).unwrap());
    let beside = r#"{"hidden_size": 4096, "num_attention_heads": 32, "rope_scaling": {},
        "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000}}"#;
    assert_eq!(read(beside.into()).scaling(), &Scaling::Linear { factor: 2.0 });
}

/// A `partial_rotary_factor` inside `rope_scaling` is read by transformers 5 and ignored by
/// 4.x: refused, saying where it belongs (it said only that the type has no such key).
#[test]
fn a_partial_factor_inside_rope_scaling_is_refused_saying_where_it_belongs() {
    let text = r#"{"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 32768,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "partial_rotary_factor": 0.5,
        "original_max_position_embeddings": 8192}}"#;
    let msg = refused(text, None, "rope_scaling.partial_rotary_factor");
    assert!(msg.contains("top level") && msg.contains("4.x ignores it"), "{msg}");
    // Beside the same top-level value both versions read 0.5 (Phi-4-mini's shape).
    let same = text.replace(
        "\"max_position_embeddings\"",
        "\"partial_rotary_factor\": 0.5,
        \"max_position_embeddings\"",
    );
    assert_eq!(RopeSpec::from_hf_config(&same, None).unwrap().rotary_dim(), 64);
    // A family whose class ignores the top-level factor is told where it belongs.
    let neox = same.replace("{\"hidden_size\"", "{\"model_type\": \"gpt_neox\", \"hidden_size\"");
    let msg = refused(&neox, None, "rope_scaling.partial_rotary_factor");
    assert!(msg.contains("put it in rope_parameters"), "{msg}");
}
