//! `RopeSpec::from_hf_config` family by family, against transformers 5.23's own rotary modules:
//! each expected value was computed by building that model's rotary module from the config
//! shown (transformers 5.23.0, torch on the CPU) and, for the pairing, by rotating a query
//! vector with the model's own `apply_rotary_pos_emb` (or Llama 4's complex
//! `apply_rotary_emb`). Configs transformers reads differently across versions, or only by
//! accident, must be refused naming the key.

use posenc::rope::families::{self, HeadDimDefault, PairingRule, PartialDefault};
use posenc::rope::{Layout, Pairing, RopeSpec};

use super::rope_config::refused;

/// Whether the family table says `model_type`'s default RoPE reads `partial_rotary_factor`.
fn reads_partial(model_type: &str) -> bool {
    families::lookup(model_type).is_some_and(|f| matches!(f.partial, PartialDefault::Reads { .. }))
}

/// Whether the family table says `model_type`'s default RoPE spans the whole head.
fn full_head(model_type: &str) -> bool {
    families::lookup(model_type).is_some_and(|f| f.partial == PartialDefault::FullHead)
}

/// transformers computes `inv_freq`, the angle and cos/sin in float32: its rotated values are
/// within a few float32 ulps of the exact ones posenc computes.
const FLOAT32_MODULE: f64 = 2e-6;

fn spec(text: &str, layer_type: Option<&str>) -> RopeSpec {
    RopeSpec::from_hf_config(text, layer_type).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// A minimal config of `model_type` with a default RoPE (base 1e4) over a head of 16.
fn small(model_type: &str, extra: &str) -> String {
    format!(
        r#"{{"model_type": "{model_type}", "hidden_size": 64, "num_attention_heads": 4,
            "head_dim": 16, "num_key_value_heads": 4{extra},
            "rope_parameters": {{"rope_type": "default", "rope_theta": 10000.0}}}}"#
    )
}

/// Every `model_type` whose text attention rotates adjacent pairs (2i, 2i + 1) in transformers
/// 5.23 (found by rotating a query with each model's own module): gptj pairing.
#[test]
fn interleaved_families_rotate_adjacent_pairs() {
    let interleaved = [
        "gptj",
        "codegen",
        "cohere",
        "cohere2",
        "cohere2_moe",
        "glm",
        "glm4",
        "glm_ocr_text",
        "glm4v_text",
        "helium",
        "ernie4_5",
        "ernie4_5_moe",
        // (llama4's composite reads its text_config, a flat one is refused: mrope.rs)
        "llama4_text",
        "moonshine",
        "moonshine_streaming",
        "openai_privacy_filter",
        "roformer",
        "blt_global_transformer",
        "blt_local_decoder",
        "blt_local_encoder",
        "blt_patcher",
        "deepseek_v2",
        "deepseek_v32",
        "bailing_hybrid",
        "dots3_note_text",
        "glm_moe_dsa",
        "longcat_flash",
        "mistral_large4_text",
        "axk2",
    ];
    for model_type in interleaved {
        let row = families::lookup(model_type).map(|f| f.pairing);
        assert_eq!(row, Some(PairingRule::Always(Pairing::Gptj)), "{model_type}");
        let got = spec(&small(model_type, ""), None);
        assert_eq!(got.pairing(), Pairing::Gptj, "{model_type}");
    }
    // Families whose MLA attention always interleaves (no rope_interleave switch in their
    // modeling code): a rope_interleave false there is not read by transformers.
    let always =
        r#"{"model_type": "deepseek_v2", "qk_rope_head_dim": 64, "rope_interleave": false}"#;
    assert_eq!(spec(always, None).pairing(), Pairing::Gptj);
    let switch =
        r#"{"model_type": "deepseek_v3", "qk_rope_head_dim": 64, "rope_interleave": false}"#;
    assert_eq!(spec(switch, None).pairing(), Pairing::Neox);
    for model_type in ["llama", "qwen2", "glm4v_moe_text", "glm_image_text", "gpt_oss"] {
        assert_eq!(spec(&small(model_type, ""), None).pairing(), Pairing::Neox, "{model_type}");
    }
    // NeoMME's layers each read their own entry (its class refuses one object).
    let neomme = r#"{"model_type": "neomme", "head_dim": 16, "rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 1e6}}}"#;
    assert_eq!(spec(neomme, Some("full_attention")).pairing(), Pairing::Neox);
}

/// A query vector `q_k = k / 8 - 0.9` (head 16) at position 7, rotated by each family's own
/// rotary module and apply function in transformers 5.23, against posenc's rotation of the same
/// vector with the config's spec: the layout, not only the frequencies, must match.
#[test]
fn interleaved_families_rotate_a_query_as_transformers_does() {
    let cases: [(&str, &str, [f64; 16]); 7] = [
        (
            "llama4_text",
            "",
            [
                -0.16934746503829956,
                -1.1755621433258057,
                0.8098556995391846,
                -0.20556938648223877,
                -0.12877704203128815,
                -0.46801868081092834,
                -0.14085108041763306,
                -0.05732341483235359,
                0.08401796221733093,
                0.23144325613975525,
                0.3394005298614502,
                0.48263058066368103,
                0.5949103236198425,
                0.729182243347168,
                0.8478397130966187,
                0.9768791794776917,
            ],
        ),
        (
            "glm4",
            r#", "partial_rotary_factor": 0.5"#,
            [
                -0.16934742033481598,
                -1.175562183558941,
                -0.15893316119909284,
                -0.8202836468815804,
                -0.3797861266881228,
                -0.30230367034673694,
                -0.14982132680015642,
                -0.02604937900323423,
                0.1,
                0.225,
                0.35,
                0.475,
                0.6,
                0.725,
                0.85,
                0.975,
            ],
        ),
        (
            "ernie4_5",
            "",
            [
                -0.16934741802416653,
                -1.1755621499207294,
                0.8098556631837113,
                -0.20556935784854602,
                -0.12877702635898913,
                -0.46801868473923136,
                -0.14085108577834146,
                -0.057323415014333134,
                0.08401796374816062,
                0.23144325923880749,
                0.3394005380973465,
                0.4826305784843018,
                0.5949103665376774,
                0.7291822290779757,
                0.8478396937421239,
                0.9768791949437982,
            ],
        ),
        (
            "helium",
            "",
            [
                -0.16934742033481598,
                -1.175562183558941,
                0.8098556965589523,
                -0.2055693626403809,
                -0.12877702564001084,
                -0.46801867634058003,
                -0.14085108004510405,
                -0.0573234133422375,
                0.08401796184480188,
                0.23144326508045193,
                0.33940054392442104,
                0.48263058457523583,
                0.5949103428632952,
                0.7291822050698101,
                0.8478396699531003,
                0.9768791710492224,
            ],
        ),
        (
            "cohere2_moe",
            "",
            [
                -0.16934741802416653,
                -1.1755621499207294,
                0.8098556631837113,
                -0.20556935784854602,
                -0.12877702635898913,
                -0.46801868473923136,
                -0.14085108577834146,
                -0.057323415014333134,
                0.08401796374816062,
                0.23144325923880749,
                0.3394005380973465,
                0.4826305784843018,
                0.5949103665376774,
                0.7291822290779757,
                0.8478396937421239,
                0.9768791949437982,
            ],
        ),
        (
            "openai_privacy_filter",
            "",
            [
                -0.16934742033481598,
                -1.175562183558941,
                0.8098556965589523,
                -0.2055693626403809,
                -0.12877702564001084,
                -0.46801867634058003,
                -0.14085108004510405,
                -0.0573234133422375,
                0.08401796184480188,
                0.23144326508045193,
                0.33940054392442104,
                0.48263058457523583,
                0.5949103428632952,
                0.7291822050698101,
                0.8478396699531003,
                0.9768791710492224,
            ],
        ),
        // RoFormer's sinusoidal table and apply_rotary_position_embeddings (no rope keys).
        (
            "roformer",
            "",
            [
                -0.16934742033481598,
                -1.175562183558941,
                0.8098556891083718,
                -0.2055694326758385,
                -0.12877702564001084,
                -0.46801867634058003,
                -0.14085108041763308,
                -0.05732341110706332,
                0.08401796184480188,
                0.23144326508045193,
                0.33940054392442104,
                0.48263058457523583,
                0.5949103428632952,
                0.7291822050698101,
                0.8478396699531003,
                0.9768791710492224,
            ],
        ),
    ];
    let q = ndarray::Array4::from_shape_fn((1, 1, 1, 16), |(_, _, _, k)| k as f32 / 8.0 - 0.9);
    let pos = posenc::positions::from_offsets(&[7], 1).unwrap();
    for (model_type, extra, want) in cases {
        let text = if model_type == "roformer" {
            r#"{"model_type": "roformer", "hidden_size": 64, "num_attention_heads": 4}"#.to_string()
        } else {
            small(model_type, extra)
        };
        let got =
            posenc::cpu::rope(&spec(&text, None), q.view(), pos.view(), Layout::Blhd).unwrap();
        for (k, (&g, &w)) in got.iter().zip(&want).enumerate() {
            let g = f64::from(g);
            assert!((g - w).abs() <= FLOAT32_MODULE, "{model_type} [{k}]: {g} vs {w}");
        }
    }
}

/// NanoChat's `rotate_half` returns `(x2, -x1)`: it turns each pair by `-p * w`, a rotation
/// posenc's pairings do not express. Refused naming the model_type.
#[test]
fn nanochat_rotation_is_refused() {
    let msg = refused(&small("nanochat", ""), None, "model_type");
    assert!(msg.contains("nanochat") && msg.contains("-p"), "{msg}");
}

/// Families whose attention applies no RoPE, or one posenc's rotation of the leading rotary dims
/// cannot express, found in transformers 5.23's modeling files: refused by their `model_type`
/// (after the `text_config` swap) rather than read as a default RoPE over their head dims.
/// Configs as their config classes serialize (`to_dict()`), cut to the fields that matter.
#[test]
fn families_posenc_cannot_rotate_are_refused_by_model_type() {
    let cases = [
        // NoPE MLA: no rotary module in modeling_kimi_linear.py.
        (
            r#"{"model_type": "kimi_linear", "hidden_size": 2304, "num_attention_heads": 32,
                "head_dim": 64, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                "rope_theta": 10000.0}"#,
            "no RoPE",
        ),
        // NoPE DSA: the config class requires qk_rope_head_dim 0.
        (
            r#"{"model_type": "glm5_next", "text_config": {"model_type": "glm5_next_text",
                "hidden_size": 4096, "num_attention_heads": 64, "head_dim": 64,
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}}"#,
            "no RoPE",
        ),
        // A learned relative position bias.
        (
            r#"{"model_type": "inkling2", "text_config": {"model_type": "inkling2_text",
                "hidden_size": 6144, "num_attention_heads": 48, "head_dim": 128}}"#,
            "no RoPE",
        ),
        // The trailing slice of each head, interleaved, rope_parameters keyed main/compress.
        (
            r#"{"model_type": "deepseek_v4", "hidden_size": 4096, "num_attention_heads": 64,
                "head_dim": 512, "qk_rope_head_dim": 64, "rope_theta": 10000.0,
                "partial_rotary_factor": 0.125,
                "rope_parameters": {"main": {"rope_type": "default", "rope_theta": 10000.0,
                                             "partial_rotary_factor": 0.125},
                                    "compress": {"rope_type": "default", "rope_theta": 160000.0,
                                                 "partial_rotary_factor": 0.125}}}"#,
            "trailing",
        ),
        // The top level's head_dim and rope_parameters are the audio encoder's rotary time
        // embedding (angles scaled by timestamps); the language model is under text_config.
        (
            r#"{"model_type": "musicflamingo", "head_dim": 1280,
                "rope_parameters": {"rope_type": "default", "rope_theta": 1200.0,
                                    "partial_rotary_factor": 0.2},
                "text_config": {"model_type": "qwen2", "hidden_size": 3584,
                                "num_attention_heads": 28}}"#,
            "text_config",
        ),
    ];
    for (text, why) in cases {
        for layer_type in [None, Some("full_attention"), Some("main")] {
            let msg = refused(text, layer_type, "model_type");
            assert!(msg.contains(why), "{msg}");
        }
    }
    assert!(!reads_partial("deepseek_v4"));
}

/// `w` within 4 ulps of the float64 `reference`.
fn near(w: f64, reference: f64, what: &str) {
    assert!((w - reference).abs() <= 4.0 * f64::EPSILON * reference, "{what}: {w} vs {reference}");
}

/// ModernBERT's published configs (answerdotai/ModernBERT-base) give `global_rope_theta` and
/// `local_rope_theta` and no `rope_theta`: transformers 5.23 builds the full-attention layers'
/// RoPE over 160000 and the sliding ones' over 10000 (its defaults when absent), head 64;
/// `rope_scaling` applies to both. A layer type is required.
#[test]
fn modernbert_reads_global_and_local_rope_theta() {
    let hub = r#"{"model_type": "modernbert", "hidden_size": 768, "num_attention_heads": 12,
        "num_hidden_layers": 22, "global_attn_every_n_layers": 3, "max_position_embeddings": 8192,
        "global_rope_theta": 160000.0, "local_rope_theta": 10000.0}"#;
    for text in [hub.to_string(), hub.replace("\"modernbert\"", "\"modernbert-decoder\"")] {
        let full = spec(&text, Some("full_attention"));
        assert_eq!(full, RopeSpec::new(64).unwrap().with_base(160000.0).unwrap());
        // transformers 5.23: full_attention_inv_freq[1] = 0.687656044960022 (float32).
        near(full.frequencies(1).inv_freq()[1], 0.6876560219336321, "full");
        let sliding = spec(&text, Some("sliding_attention"));
        assert_eq!(sliding, RopeSpec::new(64).unwrap());
        near(sliding.frequencies(1).inv_freq()[1], 0.7498942093324559, "sliding");
        let msg = refused(&text, None, "layer_type");
        assert!(msg.contains("full_attention") && msg.contains("global_rope_theta"), "{msg}");
        refused(&text, Some("global"), "layer_type");
    }
    // Without them, transformers' defaults; rope_scaling scales both layer types
    // (transformers: 0.343828022480011 and 0.37494710087776184).
    let bare = hub.replace(
        r#""global_rope_theta": 160000.0, "local_rope_theta": 10000.0"#,
        r#""vocab_size": 50368"#,
    );
    assert_ne!(bare, hub);
    assert_eq!(spec(&bare, Some("full_attention")).base(), 160000.0);
    assert_eq!(spec(&bare, Some("sliding_attention")).base(), 10000.0);
    let linear = hub.replace(
        r#""local_rope_theta": 10000.0"#,
        r#""local_rope_theta": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 2.0}"#,
    );
    for (layer_type, w1) in [
        ("full_attention", 0.6876560219336321 / 2.0),
        ("sliding_attention", 0.7498942093324559 / 2.0),
    ] {
        near(spec(&linear, Some(layer_type)).frequencies(1).inv_freq()[1], w1, layer_type);
    }
    // A per-layer entry without rope_theta takes global_rope_theta / local_rope_theta
    // (transformers: full 80000, 0.7027137279510498).
    let nested = r#"{"model_type": "modernbert", "hidden_size": 768, "num_attention_heads": 12,
        "global_rope_theta": 80000.0,
        "rope_parameters": {"full_attention": {"rope_type": "default"},
                            "sliding_attention": {"rope_type": "default"}}}"#;
    assert_eq!(spec(nested, Some("full_attention")).base(), 80000.0);
    assert_eq!(spec(nested, Some("sliding_attention")).base(), 10000.0);
    // transformers ignores a top-level rope_theta here: which base was meant is a guess.
    let stray = hub.replace(r#""local_rope_theta": 10000.0"#, r#""rope_theta": 500000.0"#);
    let msg = refused(&stray, Some("full_attention"), "rope_theta");
    assert!(msg.contains("global_rope_theta"), "{msg}");
}

/// A config of `model_type` with head 128, base 1e4 (legacy form), and `extra` fields.
fn head128(model_type: &str, extra: &str) -> String {
    format!(
        r#"{{"model_type": "{model_type}", "hidden_size": 512, "num_attention_heads": 4,
            "head_dim": 128, "max_position_embeddings": 4096, "rope_theta": 10000.0{extra}}}"#
    )
}

/// The number of frequencies and the second one, as transformers' `inv_freq` gives them.
fn freqs(text: &str, layer_type: Option<&str>) -> (usize, f64) {
    let f = spec(text, layer_type).frequencies(1);
    (f.inv_freq().len(), f.inv_freq()[1])
}

/// The families whose own default RoPE reads `partial_rotary_factor` (transformers 5.23's
/// `compute_default_rope_parameters` of their rotary module), with their config class's default
/// when the config gives none: values of transformers' `inv_freq` for head 128, base 1e4.
#[test]
fn families_whose_default_rope_reads_partial_rotary_factor() {
    // (config, frequencies, inv_freq[1]); 1e4^(-2/r) for r = 64, 32, 128, 102.
    let cases = [
        (head128("phi", r#", "partial_rotary_factor": 0.5"#), 32, 0.7498942093324559),
        (head128("glm", ""), 32, 0.7498942093324559),
        (
            head128("glm", "").replace(
                r#""rope_theta": 10000.0"#,
                r#""rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}"#,
            ),
            32,
            0.7498942093324559,
        ),
        (head128("qwen3_next", ""), 16, 0.5623413251903491),
        (head128("stablelm", ""), 16, 0.5623413251903491),
        (head128("gpt_neox", ""), 16, 0.5623413251903491),
        (head128("gpt_neox_japanese", ""), 64, 0.8659643233600653),
        // The class's own rope_parameters (legacy form) hold 0.8; given ones without a
        // factor read 1.0.
        (head128("moonshine_streaming", ""), 51, 0.8347734492114156),
        (
            head128("moonshine_streaming", "").replace(
                r#""rope_theta": 10000.0"#,
                r#""rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}"#,
            ),
            64,
            0.8659643233600653,
        ),
        // A legacy rope_scaling takes the place of the class's own parameters, 0.8 with
        // them (transformers 5.24: 64 frequencies of a head of 128; posenc read 51).
        (
            head128(
                "moonshine_streaming",
                r#", "rope_scaling": {"rope_type": "linear", "factor": 2.0}"#,
            ),
            64,
            0.8659643233600653 / 2.0,
        ),
        (
            head128(
                "nemotron3_5_transcribe_asr_audio",
                r#", "rope_scaling": {"rope_type": "linear", "factor": 2.0}"#,
            ),
            64,
            0.8659643233600653 / 2.0,
        ),
        (head128("nemotron3_5_transcribe_asr_audio", ""), 32, 0.7498942093324559),
        // Bamba's config class replaces a top-level factor by 0.5; a nested one wins.
        (head128("bamba", r#", "partial_rotary_factor": 0.25"#), 32, 0.7498942093324559),
        // MiniMax-M2's rotary_dim is its factor (rotary_dim / head_dim).
        (head128("minimax_m2", r#", "rotary_dim": 64"#), 32, 0.7498942093324559),
    ];
    for model_type in ["phi", "glm", "gpt_neox", "qwen3_next", "laguna", "mimo_v2_flash"] {
        assert!(reads_partial(model_type), "{model_type}");
    }
    // Moonshine Streaming's encoder attention takes no positions (transformers 5.24).
    let e = RopeSpec::from_hf_config(&head128("moonshine_streaming_encoder", ""), None);
    assert!(e.unwrap_err().to_string().contains("not rotary"));
    for (text, n, w1) in cases {
        let (got_n, got_w1) = freqs(&text, None);
        assert_eq!(got_n, n, "{text}");
        near(got_w1, w1, &text);
    }
    // The family default goes into every rope type's parameters (phi, linear: 0.37494710).
    let linear = head128("phi", r#", "rope_scaling": {"rope_type": "linear", "factor": 2.0}"#);
    assert_eq!(freqs(&linear, None), (32, 0.7498942093324559 / 2.0));
}

/// Every other family: transformers 5.23 builds a `"default"` RoPE over the whole head whatever
/// `partial_rotary_factor` says (its own `compute_default_rope_parameters`), where 4.x's
/// generic default rotated `int(head_dim * factor)` dims. A factor other than 1 there (or an
/// unknown or missing `model_type`) is refused, naming the key and the model_type; other rope
/// types read it in every family, as both versions do.
#[test]
fn other_families_refuse_partial_rotary_factor_with_a_default_rope() {
    // (gpt-oss's legacy form is its class's own yarn RoPE: refused beside rope_theta.)
    for model_type in ["llama", "mistral", "qwen2", "qwen3", "cohere2", "someday"] {
        let text = head128(model_type, r#", "partial_rotary_factor": 0.5"#);
        let msg = refused(&text, None, "partial_rotary_factor");
        assert!(msg.contains(model_type) && msg.contains("--rotary-dim 64"), "{msg}");
        // No rotary dim posenc takes is suggested: 4.x's product here is 0 dims.
        let tiny = head128(model_type, r#", "partial_rotary_factor": 1e-300"#);
        let msg = refused(&tiny, None, "partial_rotary_factor");
        assert!(msg.contains("--rotary-dim 128 (") && !msg.contains("--rotary-dim 0"), "{msg}");
        // Nor for an odd product (4.x: 39 dims, frequencies over an odd width).
        let odd = head128(model_type, r#", "partial_rotary_factor": 0.3046875"#);
        let msg = refused(&odd, None, "partial_rotary_factor");
        assert!(msg.contains("4.x's 39 is no even") && !msg.contains("dim 38"), "{msg}");
        let nested = head128(model_type, "").replace(
            r#""rope_theta": 10000.0"#,
            r#""rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                   "partial_rotary_factor": 0.5}"#,
        );
        refused(&nested, None, "partial_rotary_factor");
        // A factor of 1 is the whole head either way (transformers: 64 frequencies).
        let one = head128(model_type, r#", "partial_rotary_factor": 1.0"#);
        assert_eq!(freqs(&one, None), (64, 0.8659643233600653));
    }
    let missing = r#"{"head_dim": 128, "partial_rotary_factor": 0.5}"#;
    let msg = refused(missing, None, "partial_rotary_factor");
    assert!(msg.contains("model_type"), "{msg}");
    // transformers 5.23, llama with linear scaling: 32 frequencies 1e4^(-2i/64) / 2.
    let linear = head128(
        "llama",
        r#", "partial_rotary_factor": 0.5, "rope_scaling": {"rope_type": "linear", "factor": 2.0}"#,
    );
    assert_eq!(freqs(&linear, None), (32, 0.7498942093324559 / 2.0));
    // GPT-NeoX's rotary_pct and GPT-J's rotary_dim belong to their families: elsewhere
    // transformers ignores them (qwen2 with rotary_pct 0.5 and llama with rotary_dim 64
    // rotate the whole head; MiniMax-M3's rotary_dim is not read either).
    refused(&head128("qwen2", r#", "rotary_pct": 0.5"#), None, "rotary_pct");
    refused(&head128("llama", r#", "rotary_dim": 64"#), None, "rotary_dim");
    refused(&head128("minimax_m3_vl_text", r#", "rotary_dim": 64"#), None, "rotary_dim");
    assert_eq!(freqs(&head128("llama", r#", "rotary_dim": 128"#), None).0, 64);
    assert_eq!(spec(&head128("gptj", r#", "rotary_dim": 64"#), None).rotary_dim(), 64);
}

/// The family table's `FullHead` rows name the `model_type`s a config carries after the
/// `text_config` swap: EmbeddingGemma 2's and T5Gemma 2's text configs, Gemma 4 unified's.
/// Their default RoPE spans the head whatever the factor (transformers 5.23: 64 frequencies
/// for head 128).
#[test]
fn full_head_families_are_named_by_their_text_model_type() {
    for model_type in
        ["embedding_gemma2_text", "t5gemma2_text", "t5gemma2_decoder", "gemma4_unified_text"]
    {
        assert!(full_head(model_type), "{model_type}");
        let text = head128(model_type, r#", "partial_rotary_factor": 0.5"#);
        // T5Gemma 2's legacy form has two RoPEs (Gemma 3's): its sliding layers' base is 1e4.
        let layer_type = model_type.starts_with("t5gemma2").then_some("sliding_attention");
        assert_eq!(freqs(&text, layer_type), (64, 0.8659643233600653), "{model_type}");
    }
    for gone in ["embedding_gemma2", "t5gemma2"] {
        assert!(!full_head(gone), "{gone}");
    }
}

/// MiMo-V2-Flash (config A of the research notes): its default RoPE reads the layer type's
/// `partial_rotary_factor`, 0.334 when absent (`int(192 * 0.334)` = 64 dims), and its config
/// class copies nothing from the top level into the layer types' parameters. transformers
/// 5.23: full_attention 32 frequencies, `inv_freq[1]` = 0.6175287365913391, sliding
/// 0.7498942017555237; a yarn full_attention layer without a factor spans the head (96).
#[test]
fn mimo_v2_flash_default_layers_rotate_a_third_of_the_head() {
    let text = r#"{"model_type": "mimo_v2_flash", "hidden_size": 4096, "num_attention_heads": 64,
        "head_dim": 192, "num_hidden_layers": 6, "max_position_embeddings": 262144,
        "layer_types": ["full_attention", "sliding_attention", "sliding_attention",
                        "sliding_attention", "sliding_attention", "full_attention"],
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 5000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}"#;
    assert_eq!(freqs(text, Some("full_attention")).0, 32);
    near(freqs(text, Some("full_attention")).1, 0.6175287581263234, "full");
    near(freqs(text, Some("sliding_attention")).1, 0.7498942093324559, "sliding");
    // A layer type's own factor is read.
    let own = text.replace(
        r#""rope_theta": 10000.0}"#,
        r#""rope_theta": 10000.0, "partial_rotary_factor": 0.5}"#,
    );
    assert_eq!(freqs(&own, Some("sliding_attention")).0, 48);
    // A yarn layer without a factor spans the head (the 0.334 is the default RoPE's).
    let yarn = text.replace(
        r#""full_attention": {"rope_type": "default", "rope_theta": 5000000.0}"#,
        r#""full_attention": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 5000000.0,
                              "original_max_position_embeddings": 131072}"#,
    );
    assert_eq!(freqs(&yarn, Some("full_attention")).0, 96);
    assert_eq!(freqs(&yarn, Some("sliding_attention")).0, 32);
    // A top-level factor reaches a default layer only when a non-default layer makes
    // transformers standardize every layer type's parameters (with yarn above: sliding 48,
    // without: 32): an accident, refused for the default layers.
    for t in [text.to_string(), yarn.clone()] {
        let top =
            t.replace(r#""head_dim": 192,"#, r#""head_dim": 192, "partial_rotary_factor": 0.5,"#);
        let msg = refused(&top, Some("sliding_attention"), "partial_rotary_factor");
        assert!(msg.contains("mimo_v2_flash"), "{msg}");
    }
    // An entry without rope_theta: transformers raises KeyError.
    let no_theta = text
        .replace(r#""rope_type": "default", "rope_theta": 5000000.0"#, r#""rope_type": "default""#);
    refused(&no_theta, Some("full_attention"), "rope_parameters.full_attention.rope_theta");
    // Without rope_parameters its config class uses its own, whatever rope_theta says.
    let legacy = r#"{"model_type": "mimo_v2_flash", "head_dim": 192, "rope_theta": 10000.0}"#;
    refused(legacy, Some("full_attention"), "rope_parameters");
}

/// Laguna, Mellum, Zaya and NeoMME build each layer type's RoPE from its own entry: their
/// config classes copy no top-level value in. transformers 5.23 (config B of the research
/// notes, Laguna, head 128): both default layers span the head whatever a top-level factor
/// says, full `inv_freq[1]` = 0.8146172165870667, sliding 0.8659643530845642 (float32); a
/// top-level factor reaches a default layer only through another layer's non-default type
/// (sorted order), so beside a default layer without its own factor it is refused.
#[test]
fn per_layer_families_without_top_level_copy() {
    let laguna = r#"{"model_type": "laguna", "head_dim": 128, "hidden_size": 2048,
        "num_attention_heads": 16, "num_hidden_layers": 4, "max_position_embeddings": 131072,
        "layer_types": ["full_attention", "sliding_attention", "sliding_attention",
                        "full_attention"],
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 500000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}"#;
    for model_type in ["laguna", "mellum"] {
        let text = laguna.replace("\"laguna\"", &format!("{model_type:?}"));
        assert_eq!(freqs(&text, Some("full_attention")).0, 64, "{model_type}");
        near(freqs(&text, Some("full_attention")).1, 0.8146172338565447, model_type);
        near(freqs(&text, Some("sliding_attention")).1, 0.8659643233600653, model_type);
        let top = text
            .replace(r#""head_dim": 128,"#, r#""head_dim": 128, "partial_rotary_factor": 0.5,"#);
        for layer_type in ["full_attention", "sliding_attention"] {
            let msg = refused(&top, Some(layer_type), "partial_rotary_factor");
            assert!(msg.contains(model_type) && msg.contains("side effect"), "{msg}");
        }
        // An entry without rope_theta: KeyError in transformers unless another layer's type
        // makes it standardize.
        let no_theta = text.replace(r#", "rope_theta": 10000.0"#, "");
        refused(
            &no_theta,
            Some("sliding_attention"),
            "rope_parameters.sliding_attention.rope_theta",
        );
    }
    // A non-default layer reads the top-level factor as every family's (transformers: sliding
    // linear, 32 frequencies 1e4^(-2i/64) / 2); the default layer beside it is refused.
    let linear = laguna
        .replace(r#""head_dim": 128,"#, r#""head_dim": 128, "partial_rotary_factor": 0.5,"#)
        .replace(
            r#""sliding_attention": {"rope_type": "default","#,
            r#""sliding_attention": {"rope_type": "linear", "factor": 2.0,"#,
        );
    assert_eq!(freqs(&linear, Some("sliding_attention")), (32, 0.7498942093324559 / 2.0));
    refused(&linear, Some("full_attention"), "partial_rotary_factor");
    // Zaya's layer types.
    let zaya = laguna
        .replace("\"laguna\"", "\"zaya\"")
        .replace("\"full_attention\"", "\"hybrid\"")
        .replace("\"sliding_attention\"", "\"hybrid_sliding\"");
    assert_eq!(freqs(&zaya, Some("hybrid")).0, 64);
    let top =
        zaya.replace(r#""head_dim": 128,"#, r#""head_dim": 128, "partial_rotary_factor": 0.5,"#);
    refused(&top, Some("hybrid_sliding"), "partial_rotary_factor");

    // NeoMME: full 0.25 / sliding 1 and bases 1e6 / 1e4 by default, or the top-level
    // rope_theta (transformers: full 8 frequencies, inv_freq[1] 0.17782793939113617 and with
    // rope_theta 5e5 0.193922758102417; sliding 32).
    let neomme = r#"{"model_type": "neomme", "hidden_size": 512, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 4,
        "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
                        "full_attention"],
        "rope_parameters": {"full_attention": {"rope_type": "default"},
                            "sliding_attention": {"rope_type": "default"}}}"#;
    let full = spec(neomme, Some("full_attention"));
    assert_eq!((full.rotary_dim(), full.base()), (16, 1e6));
    near(full.frequencies(1).inv_freq()[1], 0.1778279410038923, "neomme full");
    let sliding = spec(neomme, Some("sliding_attention"));
    assert_eq!((sliding.rotary_dim(), sliding.base()), (64, 1e4));
    let based = neomme.replace(r#""head_dim": 64,"#, r#""head_dim": 64, "rope_theta": 500000.0,"#);
    near(freqs(&based, Some("full_attention")).1, 5e5f64.powf(-2.0 / 16.0), "neomme 5e5");
    assert_eq!(spec(&based, Some("sliding_attention")).base(), 5e5);
    let top =
        neomme.replace(r#""head_dim": 64,"#, r#""head_dim": 64, "partial_rotary_factor": 0.5,"#);
    refused(&top, Some("full_attention"), "partial_rotary_factor");
}

/// A Gemma-family text config (head 256, layers 0-4 sliding, 5 full) with `extra` fields and
/// the full_attention `rope_type` given.
fn gemma_text(model_type: &str, full: &str, extra: &str) -> String {
    format!(
        r#"{{"model_type": "{model_type}", "hidden_size": 512, "num_attention_heads": 4,
            "num_key_value_heads": 1, "head_dim": 256, "num_hidden_layers": 6,
            "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
                            "sliding_attention", "sliding_attention", "full_attention"],
            "max_position_embeddings": 32768{extra},
            "rope_parameters": {{
                "sliding_attention": {{"rope_type": "default", "rope_theta": 10000.0}},
                "full_attention": {{{full}, "rope_theta": 1000000.0}}}}}}"#
    )
}

const PROPORTIONAL: &str = r#""rope_type": "proportional", "partial_rotary_factor": 0.25"#;

/// The number of frequencies, how many are not zero, and the second one.
fn counted(text: &str, layer_type: &str) -> (usize, usize, f64) {
    let f = spec(text, Some(layer_type)).frequencies(1);
    let w = f.inv_freq();
    (w.len(), w.iter().filter(|w| **w != 0.0).count(), w[1])
}

/// Gemma 4 (`gemma4_text`, `gemma4_unified_text`), EmbeddingGemma 2 and DiffusionGemma build
/// each layer type's RoPE over that type's `per_layer_config` (transformers 5.23's
/// heterogeneous configs: keys are layer indices, every layer of a type must carry the same
/// overrides), a `head_dim` there overriding the top-level one; without `per_layer_config`
/// their config classes give every full_attention layer `global_head_dim` (512 when absent).
/// Values of transformers 5.23's rotary modules built from these configs.
#[test]
fn gemma_family_head_dims_follow_per_layer_config() {
    // 1e6^(-2/d) for d = 512, 256, 128; 1e4^(-2/d) for d = 256, 128.
    let (f512, f256, f128) = (0.9474635256553754, 0.8976871324473142, 0.8058421877614819);
    let (s256, s128) = (0.930572040929699, 0.8659643233600653);
    for model_type in ["gemma4_text", "gemma4_unified_text", "diffusion_gemma_text"] {
        let bare = gemma_text(model_type, PROPORTIONAL, "");
        // transformers: 256 frequencies, 64 not zero, inv_freq[1] = 0.9474635124206543.
        near_all(counted(&bare, "full_attention"), (256, 64, f512), model_type);
        near_all(counted(&bare, "sliding_attention"), (128, 128, s256), model_type);
        // The full layer's override, keys as transformers writes them (zero-padded) or not:
        // 64 frequencies, 16 not zero (transformers: 0.8058422207832336).
        for key in ["5", "05"] {
            let text = gemma_text(
                model_type,
                PROPORTIONAL,
                &format!(r#", "per_layer_config": {{"{key}": {{"head_dim": 128}}}}"#),
            );
            near_all(counted(&text, "full_attention"), (64, 16, f128), model_type);
            near_all(counted(&text, "sliding_attention"), (128, 128, s256), model_type);
        }
        // Overrides of every sliding layer; the full layer then has none: head_dim.
        let sliding = gemma_text(
            model_type,
            PROPORTIONAL,
            r#", "per_layer_config": {"0": {"head_dim": 128}, "1": {"head_dim": 128},
                "2": {"head_dim": 128}, "3": {"head_dim": 128}, "4": {"head_dim": 128}}"#,
        );
        near_all(counted(&sliding, "sliding_attention"), (64, 64, s128), model_type);
        near_all(counted(&sliding, "full_attention"), (128, 32, f256), model_type);
        // An override of other keys only leaves head_dim.
        let kv = gemma_text(
            model_type,
            PROPORTIONAL,
            r#", "per_layer_config": {"5": {"num_key_value_heads": 2}}"#,
        );
        near_all(counted(&kv, "full_attention"), (128, 32, f256), model_type);
        // Layers of one type with different overrides: transformers raises ("not
        // homogeneous"), for every layer type it builds.
        let mixed = gemma_text(
            model_type,
            PROPORTIONAL,
            r#", "per_layer_config": {"0": {"head_dim": 128}}"#,
        );
        for layer_type in ["sliding_attention", "full_attention"] {
            let msg = refused(&mixed, Some(layer_type), "per_layer_config");
            assert!(msg.contains("sliding_attention"), "{msg}");
        }
        // A global_head_dim beside per_layer_config that disagrees with it: transformers 5.23
        // ignores global_head_dim there, earlier 5.x read it.
        let both = gemma_text(
            model_type,
            PROPORTIONAL,
            r#", "global_head_dim": 512, "per_layer_config": {"05": {"head_dim": 128}}"#,
        );
        refused(&both, Some("full_attention"), "global_head_dim");
        let agree = both.replace("512", "128");
        near_all(counted(&agree, "full_attention"), (64, 16, f128), model_type);
        // per_layer_config without layer_types (its keys are layer indices), null, an index
        // past the layers, a head_dim that is odd.
        let no_types = gemma_text(
            model_type,
            PROPORTIONAL,
            r#", "per_layer_config": {"5": {"head_dim": 128}}"#,
        )
        .replace(r#""layer_types""#, r#""other_types""#);
        refused(&no_types, Some("full_attention"), "layer_types");
        refused(
            &gemma_text(model_type, PROPORTIONAL, r#", "per_layer_config": null"#),
            Some("full_attention"),
            "per_layer_config",
        );
        refused(
            &gemma_text(model_type, PROPORTIONAL, r#", "per_layer_config": {"6": {}}"#),
            Some("full_attention"),
            "per_layer_config",
        );
        // One layer under two keys ("5" and "05"), which int() reads as one: refused, not
        // whichever comes last (round ten of the hostile probes).
        let twice = r#", "per_layer_config": {"5": {"head_dim": 128}, "05": {"head_dim": 64}}"#;
        let msg = refused(
            &gemma_text(model_type, PROPORTIONAL, twice),
            Some("full_attention"),
            "per_layer_config",
        );
        assert!(msg.contains("both layer 5"), "{msg}");
        refused(
            &gemma_text(
                model_type,
                PROPORTIONAL,
                r#", "per_layer_config": {"5": {"head_dim": 127}}"#,
            ),
            Some("full_attention"),
            "per_layer_config.5.head_dim",
        );
    }
    // EmbeddingGemma 2's full layers are default RoPEs over global_head_dim (transformers:
    // 256 frequencies, 0.9474635124206543; 384: 192; linear 2: 0.47373175621032715), and
    // DiffusionGemma's may be too: their classes are 5.23's only.
    let default = r#""rope_type": "default""#;
    for model_type in ["embedding_gemma2_text", "diffusion_gemma_text"] {
        let eg = gemma_text(model_type, default, "");
        near_all(counted(&eg, "full_attention"), (256, 256, f512), model_type);
        near_all(counted(&eg, "sliding_attention"), (128, 128, s256), model_type);
        let g384 = gemma_text(model_type, default, r#", "global_head_dim": 384"#);
        near_all(counted(&g384, "full_attention"), (192, 192, s256), model_type);
        let plc =
            gemma_text(model_type, default, r#", "per_layer_config": {"5": {"head_dim": 128}}"#);
        near_all(counted(&plc, "full_attention"), (64, 64, f128), model_type);
        let linear = gemma_text(model_type, r#""rope_type": "linear", "factor": 2.0"#, "");
        near_all(counted(&linear, "full_attention"), (256, 256, f512 / 2.0), model_type);
    }
    // The published EmbeddingGemma 2 form: its text config under text_config.
    let wrapped = format!(
        r#"{{"model_type": "embedding_gemma2", "text_config": {}}}"#,
        gemma_text("embedding_gemma2_text", default, "")
    );
    near_all(counted(&wrapped, "full_attention"), (256, 256, f512), "embedding_gemma2");
    // Gemma 4's full layers of another rope type stay refused (transformers 5.5-5.12 built them
    // over head_dim).
    refused(
        &gemma_text("gemma4_text", default, ""),
        Some("full_attention"),
        "rope_parameters.full_attention.rope_type",
    );
}

fn near_all(got: (usize, usize, f64), want: (usize, usize, f64), what: &str) {
    assert_eq!((got.0, got.1), (want.0, want.1), "{what}");
    near(got.2, want.2, what);
}

/// A per-layer-type config of `model_type` (head 128) whose entries carry no `rope_theta`,
/// with `extra` top-level fields.
fn per_layer_no_theta(model_type: &str, extra: &str) -> String {
    format!(
        r#"{{"model_type": "{model_type}", "hidden_size": 512, "num_attention_heads": 4,
            "head_dim": 128, "num_hidden_layers": 2,
            "layer_types": ["sliding_attention", "full_attention"]{extra},
            "rope_parameters": {{"sliding_attention": {{"rope_type": "default"}},
                                "full_attention": {{"rope_type": "default"}}}}}}"#
    )
}

/// Per-layer-type entries without `rope_theta` take what each config class fills in
/// (transformers 5.23's `convert_rope_params_to_dict`): Gemma 3's family gives sliding layers
/// `rope_local_base_freq` (never the top-level `rope_theta`), else 1e4, and full layers the
/// top-level `rope_theta`, else 1e6; OLMo 3 the top-level `rope_theta` to full layers, else
/// 5e5, and 5e5 to sliding ones (it pops `rope_theta` twice); LFM3 the top-level `rope_theta`,
/// else 1e6, to both. Values of transformers' rotary modules built from these configs.
#[test]
fn per_layer_entries_without_rope_theta_take_the_class_defaults() {
    // base^(-2/128) for base 1e4, 1e6, 5e5, 2e4.
    let (b1e4, b1e6, b5e5) = (0.8659643233600653, 0.8058421877614819, 0.8146172338565447);
    let b2e4 = 20000f64.powf(-1.0 / 64.0);
    for model_type in ["gemma3_text", "gemma3n_text", "t5gemma2_text", "t5gemma2_decoder"] {
        let bare = per_layer_no_theta(model_type, "");
        assert_eq!(freqs(&bare, Some("sliding_attention")), (64, b1e4), "{model_type}");
        assert_eq!(freqs(&bare, Some("full_attention")), (64, b1e6), "{model_type}");
        // transformers: sliding 0.8659643530845642 with a top-level rope_theta 5e5.
        let top = per_layer_no_theta(model_type, r#", "rope_theta": 500000.0"#);
        assert_eq!(freqs(&top, Some("sliding_attention")), (64, b1e4), "{model_type}");
        assert_eq!(freqs(&top, Some("full_attention")), (64, b5e5), "{model_type}");
        let local = per_layer_no_theta(model_type, r#", "rope_local_base_freq": 20000.0"#);
        assert_eq!(freqs(&local, Some("sliding_attention")), (64, b2e4), "{model_type}");
        assert_eq!(freqs(&local, Some("full_attention")), (64, b1e6), "{model_type}");
    }
    let olmo3 = per_layer_no_theta("olmo3", "");
    assert_eq!(freqs(&olmo3, Some("sliding_attention")), (64, b5e5));
    assert_eq!(freqs(&olmo3, Some("full_attention")), (64, b5e5));
    // A top-level rope_theta reaches the full layers only (transformers: full 1e6, sliding
    // 5e5, by popping rope_theta twice): refused beside a sliding layer without its own.
    let top = per_layer_no_theta("olmo3", r#", "rope_theta": 1000000.0"#);
    assert_eq!(freqs(&top, Some("full_attention")), (64, b1e6));
    let msg = refused(&top, Some("sliding_attention"), "rope_theta");
    assert!(msg.contains("500000") || msg.contains("5e5"), "{msg}");
    let lfm3 = per_layer_no_theta("lfm3", "");
    assert_eq!(freqs(&lfm3, Some("sliding_attention")), (64, b1e6));
    assert_eq!(freqs(&lfm3, Some("full_attention")), (64, b1e6));
    let top = per_layer_no_theta("lfm3", r#", "rope_theta": 500000.0"#);
    assert_eq!(freqs(&top, Some("sliding_attention")), (64, b5e5));
    // Without rope_parameters LFM3's class uses its own (ignoring rope_theta): refused.
    refused(&head128("lfm3", ""), None, "rope_parameters");
    // Another family's entry without rope_theta keeps the top-level one, else 10000 (gpt-oss:
    // a generic family whose class declares layer types).
    let other = per_layer_no_theta("gpt_oss", r#", "rope_theta": 500000.0"#);
    assert_eq!(freqs(&other, Some("sliding_attention")), (64, b5e5));
}

/// A transformers 4 Gemma 3 config (no `rope_parameters`) without `rope_local_base_freq` still
/// has two RoPEs: its class's local base 10000 (4.x and 5.23 alike) for the sliding layers,
/// unscaled, and `rope_theta` (1e6 when absent) with `rope_scaling` for the full ones.
#[test]
fn legacy_gemma3_without_local_base_has_two_ropes() {
    let text = r#"{"model_type": "gemma3_text", "hidden_size": 512, "num_attention_heads": 4,
        "head_dim": 128, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0}}"#;
    assert_eq!(freqs(text, Some("sliding_attention")), (64, 0.8659643233600653));
    assert_eq!(freqs(text, Some("full_attention")), (64, 0.8146172338565447 / 8.0));
    refused(text, None, "layer_type");
    let bare = r#"{"model_type": "gemma3_text", "hidden_size": 512, "num_attention_heads": 4,
        "head_dim": 128}"#;
    assert_eq!(freqs(bare, Some("full_attention")), (64, 0.8058421877614819));
    assert_eq!(freqs(bare, Some("sliding_attention")), (64, 0.8659643233600653));
}

/// A config without `rope_theta` of a family whose config class does not default it to 10000
/// (transformers 5.23: Mixtral 1e6, Llama 4 5e5, GPT-OSS 150000 with a default yarn, ...) is
/// refused naming `rope_theta` and what the class gives; with the base given it is read, and
/// a family at 10000 (Llama) still takes 10000 when it is absent.
#[test]
fn a_missing_rope_theta_is_refused_where_the_class_default_is_not_10000() {
    let bare = |model_type: &str, extra: &str| {
        format!(
            r#"{{"model_type": "{model_type}", "hidden_size": 512, "num_attention_heads": 4,
                "head_dim": 128{extra}}}"#
        )
    };
    for (model_type, given) in [
        ("mixtral", "base 1000000"),
        ("llama4_text", "base 500000"),
        ("smollm3", "base 2000000"),
        ("gpt_oss", "else yarn scaling (factor 32) over base 150000"),
    ] {
        let msg = refused(&bare(model_type, ""), None, "rope_theta");
        assert!(msg.contains(given) && msg.contains(model_type), "{msg}");
        // rope_parameters without rope_theta: the same.
        let params = r#", "rope_parameters": {"rope_type": "default"}"#;
        refused(&bare(model_type, params), None, "rope_theta");
        let with_theta = bare(model_type, r#", "rope_theta": 1000000.0"#);
        if model_type == "gpt_oss" {
            // Its class's own yarn RoPE over it, without rope_scaling (round thirteen).
            let msg = refused(&with_theta, None, "rope_scaling");
            assert!(msg.contains("yarn scaling, factor 32"), "{msg}");
        } else {
            assert_eq!(spec(&with_theta, None).base(), 1e6, "{model_type}");
        }
    }
    assert_eq!(spec(&bare("llama", ""), None).base(), 10000.0);
    assert_eq!(spec(&bare("mistral", ""), None).base(), 10000.0);
}

/// OLMo 3's legacy form (`rope_theta`, `rope_scaling`), as transformers 5.23's config class
/// reads it: full_attention layers take `rope_theta` and the scaling, sliding_attention layers
/// 500000 unscaled. Without a layer type the two must agree; a sliding layer beside another
/// `rope_theta` is refused (4.x gave it `rope_theta`).
#[test]
fn olmo3_legacy_configs_have_two_ropes_when_they_differ() {
    let olmo3 = |extra: &str| {
        format!(
            r#"{{"model_type": "olmo3", "hidden_size": 512, "num_attention_heads": 4,
                "head_dim": 128, "max_position_embeddings": 65536,
                "layer_types": ["sliding_attention", "full_attention"]{extra}}}"#
        )
    };
    let b5e5 = 500_000f64.powf(-2.0 / 128.0);
    // Plain: one RoPE for both layer types.
    let plain = olmo3(r#", "rope_theta": 500000.0"#);
    for layer_type in [None, Some("full_attention"), Some("sliding_attention")] {
        let (n, w1) = freqs(&plain, layer_type);
        assert_eq!(n, 64);
        near(w1, b5e5, "plain olmo3");
    }
    // YaRN on the full layers only (OLMo 3 32B's long-context form).
    let yarn = olmo3(
        r#", "rope_theta": 500000.0, "rope_scaling": {"rope_type": "yarn", "factor": 8.0,
            "original_max_position_embeddings": 8192, "attention_factor": 1.2079441541679836,
            "beta_fast": 32, "beta_slow": 1}"#,
    );
    let msg = refused(&yarn, None, "layer_type");
    assert!(msg.contains("500000 unscaled"), "{msg}");
    let full = spec(&yarn, Some("full_attention"));
    assert!(!matches!(full.scaling(), posenc::rope::Scaling::None), "{full:?}");
    let sliding = spec(&yarn, Some("sliding_attention"));
    assert!(matches!(sliding.scaling(), posenc::rope::Scaling::None), "{sliding:?}");
    assert_eq!(sliding.base(), 5e5);
    // Another base: the full layers take it; the sliding ones are refused.
    let other = olmo3(r#", "rope_theta": 1000000.0"#);
    assert_eq!(spec(&other, Some("full_attention")).base(), 1e6);
    refused(&other, Some("sliding_attention"), "rope_theta");
    refused(&other, None, "layer_type");
    refused(&plain, Some("chunked_attention"), "layer_type");
}

/// Llama 4 Scout's and Maverick's published text config: llama3 scaling with
/// `high_freq_factor` equal to `low_freq_factor` (1). transformers 5.23 only warns; the middle
/// band is empty, so frequencies with a wavelength under 8192 are kept and the others divided
/// by 16. Expected: transformers' `Llama4TextRotaryEmbedding.inv_freq` (float32); the pairing
/// is Llama 4's complex (adjacent) one.
#[test]
fn llama4_llama3_scaling_with_equal_freq_factors() {
    let scout = r#"{"model_type": "llama4", "text_config": {"model_type": "llama4_text",
        "attention_chunk_size": 8192, "head_dim": 128, "hidden_size": 5120,
        "max_position_embeddings": 10485760, "num_attention_heads": 40,
        "num_hidden_layers": 48, "num_key_value_heads": 8,
        "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "use_qk_norm": true}}"#;
    let got = spec(scout, None);
    assert_eq!(got.pairing(), Pairing::Gptj);
    let f = got.frequencies(1);
    let inv = f.inv_freq();
    assert_eq!(inv.len(), 64);
    // (index, transformers' inv_freq): 34 is the last wavelength under 8192 (6695), 35 the
    // first over it (8217 before scaling).
    for (i, want) in [
        (1, 0.8146172165870667),
        (34, 0.0009384738514199853),
        (35, 4.778106085723266e-05),
        (36, 3.8923277315916494e-05),
        (63, 1.5344629389346665e-07),
    ] {
        assert!(
            (inv[i] - want).abs() <= FLOAT32_MODULE * want,
            "inv_freq[{i}]: {} vs {want}",
            inv[i]
        );
    }
    // A high_freq_factor under low_freq_factor stays refused (transformers' bands overlap).
    let below = scout.replace(r#""high_freq_factor": 1.0"#, r#""high_freq_factor": 0.5"#);
    let msg = refused(&below, None, "rope_scaling.high_freq_factor");
    assert!(msg.contains(">= low_freq_factor"), "{msg}");
}

/// MiniCPM3 and HunYuan V4 (`hy_v4`) have DeepSeek's `qk_rope_head_dim` but rotate its slice with
/// plain `rotate_half` halves (no (even, odd) regrouping, no `rope_interleave` switch in
/// transformers 5.23): neox pairing, whatever `rope_interleave` says. Expected: each family's
/// rotary module and `apply_rotary_pos_emb` on `q_k = k / 8 - 0.9` (slice 16) at position 7.
#[test]
fn mla_families_with_plain_rotate_half_pair_halves() {
    let want = [
        -0.7442107200622559,
        0.2844691276550293,
        -0.7226235866546631,
        -0.6164790987968445,
        -0.44098609685897827,
        -0.29097986221313477,
        -0.1559462547302246,
        -0.027158167213201523,
        -0.5158976912498474,
        -0.7552001476287842,
        -0.15104666352272034,
        0.3481430113315582,
        0.5705535411834717,
        0.7187355160713196,
        0.848929226398468,
        0.9749423265457153,
    ];
    let q = ndarray::Array4::from_shape_fn((1, 1, 1, 16), |(_, _, _, k)| k as f32 / 8.0 - 0.9);
    let pos = posenc::positions::from_offsets(&[7], 1).unwrap();
    for model_type in ["minicpm3", "hy_v4"] {
        for interleave in ["", r#", "rope_interleave": true"#, r#", "rope_interleave": false"#] {
            let text = format!(
                r#"{{"model_type": "{model_type}", "hidden_size": 64, "num_attention_heads": 4,
                    "qk_rope_head_dim": 16, "qk_nope_head_dim": 16,
                    "rope_theta": 10000.0{interleave}}}"#
            );
            let got = spec(&text, None);
            assert_eq!(got.pairing(), Pairing::Neox, "{text}");
            let rotated = posenc::cpu::rope(&got, q.view(), pos.view(), Layout::Blhd).unwrap();
            for (k, (&g, &w)) in rotated.iter().zip(&want).enumerate() {
                let g = f64::from(g);
                assert!((g - w).abs() <= FLOAT32_MODULE, "{model_type} [{k}]: {g} vs {w}");
            }
        }
    }
}

/// Gemma 3 12B's and 4B's published text configs give no `head_dim` (4B no
/// `num_attention_heads` either): transformers 5.23 takes the config class's 256 (the same
/// default in 4.57 and since), not hidden / heads (240 for 12B). Expected: transformers'
/// `Gemma3RotaryEmbedding` `inv_freq` per layer type (linear x8 on the full layers).
#[test]
fn settled_class_default_head_dims_are_read() {
    let g12 = r#"{"model_type": "gemma3", "text_config": {"hidden_size": 3840,
        "model_type": "gemma3_text", "num_attention_heads": 16, "num_hidden_layers": 48,
        "num_key_value_heads": 8, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024}}"#;
    let g4 = r#"{"model_type": "gemma3", "text_config": {"hidden_size": 2560,
        "model_type": "gemma3_text", "num_hidden_layers": 34,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}}"#;
    for text in [g12, g4] {
        for (layer_type, want) in
            [("full_attention", 0.11221089214086533), ("sliding_attention", 0.9305720329284668)]
        {
            let got = spec(text, Some(layer_type));
            assert_eq!((got.head_dim(), got.rotary_dim()), (256, 256), "{text}");
            let (n, w1) = freqs(text, Some(layer_type));
            assert_eq!(n, 128);
            assert!((w1 - want).abs() <= FLOAT32_MODULE * want, "{layer_type}: {w1} vs {want}");
        }
    }
    for (model_type, head) in [("qwen3", 128), ("gpt_oss", 64), ("glm4", 128), ("ernie4_5", 128)] {
        let row = families::lookup(model_type).map(|f| f.head_dim);
        assert_eq!(
            row,
            Some(HeadDimDefault::Settled(u32::try_from(head).unwrap())),
            "{model_type}"
        );
        let text = format!(
            r#"{{"model_type": "{model_type}", "hidden_size": 3840, "num_attention_heads": 16,
                "rope_parameters": {{"rope_type": "default", "rope_theta": 10000.0}}}}"#
        );
        assert_eq!(u64::from(spec(&text, None).head_dim()), head, "{model_type}");
    }
}

/// A class default head dim that differs between transformers versions (absent, computed, or
/// the class new): refused naming `head_dim`, the 5.23 default and how to pass one; the head
/// dim passed stands in for it, and for a config with no head dim at all (DBRX's `d_model`,
/// `n_heads`), but never over one the config gives.
#[test]
fn unsettled_class_default_head_dims_are_refused_unless_passed() {
    let step = r#"{"model_type": "step3p5", "hidden_size": 3840, "num_attention_heads": 16,
        "rope_theta": 10000.0}"#;
    let msg = refused(step, None, "head_dim");
    assert!(msg.contains("128") && msg.contains("--head-dim"), "{msg}");
    let got = RopeSpec::from_hf_config_with_head_dim(step, None, 128).unwrap();
    assert_eq!((got.head_dim(), got.rotary_dim()), (128, 128));
    // DBRX's sizes are d_model and n_heads (read: keys_their_config_classes_keep_under_
    // another_name); without them the head dim must be passed.
    let dbrx = r#"{"model_type": "dbrx", "attn_config": {"kv_n_heads": 8}}"#;
    let msg = refused(dbrx, None, "head_dim");
    assert!(msg.contains("--head-dim"), "{msg}");
    let got = RopeSpec::from_hf_config_with_head_dim(dbrx, None, 128).unwrap();
    assert_eq!(got.head_dim(), 128);
    let given = small("llama", "");
    assert_eq!(RopeSpec::from_hf_config_with_head_dim(&given, None, 128).unwrap().head_dim(), 16);
}

/// Step 3.5's legacy form (transformers 5.23's `Step3p7TextConfig`): `rope_scaling` updates the
/// full_attention layers only, the sliding ones keep `rope_theta` unscaled; per-layer
/// `partial_rotary_factors` other than all 1 are refused rather than ignored.
#[test]
fn step3p5_legacy_scaling_applies_to_full_attention_only() {
    let step = |extra: &str| {
        format!(
            r#"{{"model_type": "step3p5", "hidden_size": 512, "num_attention_heads": 4,
                "head_dim": 128, "max_position_embeddings": 65536, "rope_theta": 5000000.0,
                "layer_types": ["full_attention", "sliding_attention"]{extra}}}"#
        )
    };
    let yarn = step(
        r#", "rope_scaling": {"rope_type": "yarn", "factor": 2.0,
            "original_max_position_embeddings": 32768}"#,
    );
    refused(&yarn, None, "layer_type");
    let full = spec(&yarn, Some("full_attention"));
    assert!(!matches!(full.scaling(), posenc::rope::Scaling::None), "{full:?}");
    let sliding = spec(&yarn, Some("sliding_attention"));
    assert!(matches!(sliding.scaling(), posenc::rope::Scaling::None), "{sliding:?}");
    assert_eq!(sliding.base(), 5e6);
    // Without scaling, one RoPE.
    assert_eq!(spec(&step(""), None).base(), 5e6);
    let factors = step(r#", "partial_rotary_factors": [0.5, 1.0]"#);
    refused(&factors, Some("full_attention"), "partial_rotary_factors");
    spec(&step(r#", "partial_rotary_factors": [1.0, 1.0]"#), Some("sliding_attention"));
}

/// DBRX keeps its base in `attn_config.rope_theta`, which transformers 4.x read and 5.23
/// ignores (base 10000): a value other than 10000 there is refused by name.
#[test]
fn dbrx_attn_config_base_is_refused_where_versions_differ() {
    let dbrx = |attn: &str, extra: &str| {
        format!(
            r#"{{"model_type": "dbrx", "hidden_size": 6144, "num_attention_heads": 48,
                "head_dim": 128, "attn_config": {{{attn}}}{extra}}}"#
        )
    };
    let msg = refused(&dbrx(r#""rope_theta": 500000"#, ""), None, "attn_config.rope_theta");
    assert!(msg.contains("500000"), "{msg}");
    assert_eq!(spec(&dbrx(r#""rope_theta": 10000"#, ""), None).base(), 1e4);
    let top = dbrx(r#""rope_theta": 500000"#, r#", "rope_theta": 500000.0"#);
    assert_eq!(spec(&top, None).base(), 5e5);
}

/// What a stranger found building every rotary module of transformers 5.24 beside posenc's
/// cache (2026-12-02): rows that read a family otherwise than its modeling code, and families
/// without a row whose generic reading was a silent wrong answer.
#[test]
fn transformers_5_24_families_read_as_their_modeling_code() {
    // Perception Encoder's audio and video encoders turn adjacent pairs (a 2 x 2 matrix on
    // q.reshape(..., -1, 1, 2)); their module returns halves, of which the first is used.
    for model_type in ["pe_audio_encoder", "pe_video_encoder", "pe_audio_video_encoder"] {
        assert_eq!(spec(&small(model_type, ""), None).pairing(), Pairing::Gptj, "{model_type}");
        let (_, family) = families::of_hf_config(&small(model_type, "")).unwrap();
        assert_eq!(family.module, families::ModuleLayout::Halves, "{model_type}");
    }
    // GLM-4V's and GLM-OCR's modules repeat each frequency per pair (repeat_interleave(2)).
    for model_type in ["glm4v_text", "glm_ocr_text"] {
        let (_, family) = families::of_hf_config(&small(model_type, "")).unwrap();
        assert_eq!(family.module, families::ModuleLayout::Pairs, "{model_type}");
    }
    // No RoPE at all, or not one rotation by one position per token.
    for (model_type, why) in [
        ("nemotron_h", "never called"),
        ("jamba", "never called"),
        ("moshi_depth", "use_rope=False"),
        ("inkling_text", "relative position bias"),
        ("inkling2_loop_text", "relative position bias"),
        ("clvp_encoder", "values"),
        ("wav2vec2-conformer", "rotary_embedding_base"),
        ("lightglue", "keypoint"),
        ("dinov3_vit", "2-D"),
    ] {
        let msg = refused(&small(model_type, ""), None, "model_type");
        assert!(msg.contains(why), "{model_type}: {msg}");
    }
    // Nemotron-H's speech and omni models read their text_config as nemotron_h.
    let speech = r#"{"model_type": "nemo_speechlm", "text_config": {"hidden_size": 64,
        "num_attention_heads": 4, "head_dim": 16}}"#;
    assert!(refused(speech, None, "model_type").contains("never called"));
    // Learned or relative positions: not rotary, before any head dim is read.
    // BridgeTower's and GIT's head counts at their top level, beside their sub-configs.
    for model_type in [
        "clip_text_model",
        "siglip_text_model",
        "umt5",
        "longt5",
        "clvp_decoder",
        "bridgetower",
        "git",
    ] {
        let e = RopeSpec::from_hf_config(&small(model_type, ""), None).unwrap_err();
        assert!(matches!(e, posenc::Error::ModelFamily { .. }), "{model_type}: {e}");
    }
    // Class head dims new in 5.24: refused when absent, not computed from hidden / heads.
    for (model_type, dim) in [("sarvam_moe", "64"), ("lara_mini", "128")] {
        let text = format!(
            r#"{{"model_type": "{model_type}", "hidden_size": 4096, "num_attention_heads": 32}}"#
        );
        let msg = refused(&text, None, "head_dim");
        assert!(msg.contains(dim), "{model_type}: {msg}");
    }
    // Dory and UltraBERT fill a RoPE per layer type (full_attention at 1e7 and 2.56e6) when
    // a config has none: a layer type is refused there, read where the config has them.
    for model_type in ["dory", "ultrabert"] {
        let bare = format!(
            r#"{{"model_type": "{model_type}", "hidden_size": 64, "num_attention_heads": 4,
                "head_dim": 16, "layer_types": ["sliding_attention", "full_attention"]}}"#
        );
        assert!(RopeSpec::from_hf_config(&bare, Some("full_attention")).is_err(), "{model_type}");
        let given = bare.replace(
            r#""head_dim": 16,"#,
            r#""head_dim": 16, "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": 10000000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},"#,
        );
        assert_eq!(spec(&given, Some("full_attention")).base(), 1e7, "{model_type}");
        assert_eq!(spec(&given, Some("sliding_attention")).base(), 1e4, "{model_type}");
    }
    // Falcon with ALiBi, and a speech encoder with relative positions, build no rotary module
    // whatever their family.
    let falcon = small("falcon", r#", "alibi": true"#);
    assert!(refused(&falcon, None, "alibi").contains("posenc alibi"));
    assert_eq!(spec(&small("falcon", r#", "alibi": false"#), None).rotary_dim(), 16);
    let relative = small("llama", r#", "position_embeddings_type": "relative""#);
    assert!(refused(&relative, None, "position_embeddings_type").contains("rotary"));
    for name in ["rope", "rotary"] {
        let text = small("llama", &format!(r#", "position_embeddings_type": "{name}""#));
        assert_eq!(spec(&text, None).rotary_dim(), 16);
    }
    // Gemma 4's assistant, whose class does not build with its defaults, names gemma4_text.
    assert_eq!(families::text_model_type("gemma4_assistant"), Some("gemma4_text"));
}

/// Round twelve: a family whose layers each read their own `rope_parameters` entry refused
/// an absent object, but read an empty or single one as every layer's RoPE (Gemma 3's class
/// fills its per-layer defaults beside it, OLMo 3's too, ModernBERT's refuses it, MiMo-V2-Flash's
/// layers fail on it). LFM3's class fills its base (1e6) into a single object too.
#[test]
fn per_layer_families_refuse_one_object_for_every_layer() {
    for (model_type, extra) in [
        ("gemma3_text", ""),
        ("gemma3n_text", ""),
        ("t5gemma2_text", ""),
        ("olmo3", ""),
        ("modernbert", ""),
        ("neomme", ""),
        ("mimo_v2_flash", ""),
        ("mellum", ""),
        ("laguna", ""),
        ("zaya", ""),
        ("step3p5", ""),
        ("gemma4_text", r#", "global_head_dim": 16"#),
    ] {
        for params in ["{}", r#"{"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}"#] {
            let text = format!(
                r#"{{"model_type": "{model_type}", "head_dim": 16, "hidden_size": 64,
                    "num_attention_heads": 4{extra}, "rope_parameters": {params}}}"#
            );
            for layer_type in [None, Some("full_attention")] {
                let msg = refused(&text, layer_type, "rope_parameters");
                assert!(msg.contains("one object per layer type"), "{msg}");
            }
        }
    }
    // LFM3: one object, its base 1e6 when absent, as its class fills it.
    let lfm3 = |params: &str| {
        spec(
            &format!(r#"{{"model_type": "lfm3", "head_dim": 16, "rope_parameters": {params}}}"#),
            None,
        )
    };
    assert_eq!(lfm3("{}").base(), 1e6);
    assert_eq!(lfm3(r#"{"rope_type": "default"}"#).base(), 1e6);
    assert_eq!(lfm3(r#"{"rope_type": "default", "rope_theta": 5e5}"#).base(), 5e5);
}

/// Round twelve: a composite whose language model is its text_config was read from its top
/// level when that had a head key (a vision tower's, or a hand-edited config's).
#[test]
fn composites_read_their_text_config_beside_top_level_head_keys() {
    for top in [r#""num_attention_heads": 16, "hidden_size": 1024"#, r#""head_dim": 32"#] {
        let llava = format!(
            r#"{{"model_type": "llava", {top}, "text_config": {{"model_type": "llama",
                "hidden_size": 64, "num_attention_heads": 4, "rope_theta": 500000}}}}"#
        );
        let s = spec(&llava, None);
        assert_eq!((s.head_dim(), s.base()), (16, 500000.0), "{llava}");
    }
    // Gemma 3's composite: its text model's two RoPEs, so a layer type is asked for.
    let gemma3 = r#"{"model_type": "gemma3", "num_attention_heads": 16, "hidden_size": 1024,
        "text_config": {"model_type": "gemma3_text", "head_dim": 16, "hidden_size": 64,
                        "num_attention_heads": 4}}"#;
    refused(gemma3, None, "layer_type");
    assert_eq!(spec(gemma3, Some("full_attention")).base(), 1e6);
    // A model_type that is no composite keeps its top level.
    let llama = r#"{"model_type": "llama", "head_dim": 32, "text_config": {"head_dim": 8}}"#;
    assert_eq!(spec(llama, None).head_dim(), 32);
}

/// Families whose config class builds one RoPE per layer type from its own defaults when a
/// config has none (transformers 5.24: Dory's full layers 1e7 and sliding 1e4 whatever
/// `rope_theta` says, Beam's sliding 1e4 and full layers without RoPE, dots.llm3's sliding
/// 50000, UltraBERT's list of bases): the legacy form was read as one RoPE at `rope_theta`.
#[test]
fn families_with_their_own_per_layer_defaults_need_rope_parameters() {
    for model_type in ["beam", "dory", "dots3_note_text", "ultrabert"] {
        let legacy = format!(
            r#"{{"model_type": "{model_type}", "head_dim": 16, "hidden_size": 64,
                "num_attention_heads": 4, "rope_theta": 123456}}"#
        );
        for layer_type in [None, Some("full_attention"), Some("sliding_attention")] {
            let msg = refused(&legacy, layer_type, "rope_parameters");
            assert!(msg.contains("uses its own"), "{msg}");
        }
        // With them, each layer type's entry is read, its rope_theta required.
        let given = format!(
            r#"{{"model_type": "{model_type}", "head_dim": 16, "rope_parameters": {{
                "full_attention": {{"rope_type": "default", "rope_theta": 1e7}},
                "sliding_attention": {{"rope_type": "default"}}}}}}"#
        );
        assert_eq!(spec(&given, Some("full_attention")).base(), 1e7, "{model_type}");
        let msg = refused(
            &given,
            Some("sliding_attention"),
            "rope_parameters.sliding_attention.rope_theta",
        );
        assert!(msg.contains("its own default base"), "{msg}");
    }
    // dots.llm3's class copies one object (with its rope_theta) into every layer type;
    // the others' layers fail on one. An empty one takes the class's defaults: refused.
    let one = |model_type: &str, params: &str| {
        format!(r#"{{"model_type": "{model_type}", "head_dim": 16, "rope_parameters": {params}}}"#)
    };
    let plain = r#"{"rope_type": "default", "rope_theta": 50000}"#;
    assert_eq!(spec(&one("dots3_note_text", plain), None).base(), 50000.0);
    refused(&one("dory", plain), None, "rope_parameters");
    refused(&one("dots3_note_text", "{}"), None, "rope_parameters");
    refused(
        &one("dots3_note_text", r#"{"rope_type": "default"}"#),
        None,
        "rope_parameters.rope_theta",
    );
}

/// Round thirteen: families whose config class builds its own RoPE for a config with neither
/// `rope_parameters` nor `rope_scaling` were read as a default RoPE over `rope_theta`
/// (Apertus: llama3 x8 over 12e6 in transformers 5.24, whatever `rope_theta` says; Cosmos 3
/// Edge: 1e8). A class's scaled RoPE is refused beside `rope_theta`; a class's own base is
/// read, and a `rope_theta` of another value refused.
#[test]
fn legacy_forms_of_classes_with_a_rope_of_their_own() {
    let legacy = |model_type: &str, extra: &str| {
        format!(
            r#"{{"model_type": "{model_type}", "hidden_size": 4096, "num_attention_heads": 32,
                "head_dim": 128{extra}}}"#
        )
    };
    for model_type in ["apertus", "cwm", "ministral3", "higgs_audio_v2", "gpt_oss"] {
        for extra in [r#", "rope_theta": 500000.0"#, r#", "rope_theta": 5e5, "rope_scaling": null"#]
        {
            let msg = refused(&legacy(model_type, extra), None, "rope_scaling");
            assert!(msg.contains("builds its own RoPE") && msg.contains(model_type), "{msg}");
        }
        // Beside a scaling object, rope_theta is read (transformers takes both).
        let given = legacy(
            model_type,
            r#", "rope_theta": 500000.0, "rope_scaling": {"rope_type": "linear", "factor": 2.0}"#,
        );
        assert_eq!(spec(&given, None).base(), 5e5, "{model_type}");
    }
    for (model_type, own) in [("cosmos3_edge_text", 1e8), ("muse_spark_text", 5e5)] {
        assert_eq!(spec(&legacy(model_type, ""), None).base(), own, "{model_type}");
        let same = format!(r#", "rope_theta": {own:?}"#);
        assert_eq!(spec(&legacy(model_type, &same), None).base(), own, "{model_type}");
        let msg = refused(&legacy(model_type, r#", "rope_theta": 3000000.0"#), None, "rope_theta");
        assert!(msg.contains("its own base"), "{msg}");
        // With rope_parameters, their rope_theta is read.
        let params = r#", "rope_parameters": {"rope_type": "default", "rope_theta": 3000000.0}"#;
        assert_eq!(spec(&legacy(model_type, params), None).base(), 3e6, "{model_type}");
    }
}

/// GPT-NeoX's config classes read `rotary_emb_base` (10000 when absent) and ignore a
/// top-level `rope_theta` (transformers 5.24): one that disagrees was read in its place.
#[test]
fn gpt_neox_reads_rotary_emb_base_and_refuses_another_rope_theta() {
    for model_type in ["gpt_neox", "gpt_neox_japanese"] {
        let config = |extra: &str| {
            format!(
                r#"{{"model_type": "{model_type}", "hidden_size": 512, "num_attention_heads": 4,
                    "rotary_pct": 1.0{extra}}}"#
            )
        };
        assert_eq!(spec(&config(r#", "rotary_emb_base": 5e5"#), None).base(), 5e5);
        assert_eq!(spec(&config(""), None).base(), 1e4);
        let same = r#", "rope_theta": 5e5, "rotary_emb_base": 5e5"#;
        assert_eq!(spec(&config(same), None).base(), 5e5);
        assert_eq!(spec(&config(r#", "rope_theta": 10000"#), None).base(), 1e4);
        let msg = refused(&config(r#", "rope_theta": 123456"#), None, "rope_theta");
        assert!(msg.contains("reads rotary_emb_base"), "{msg}");
        refused(&config(r#", "rope_theta": 123456, "rotary_emb_base": 5e5"#), None, "rope_theta");
    }
}

/// Vision towers whose config classes default to transformers 5.24's 2-D `axial` RoPE over
/// image patches were read as a 1-D RoPE from their head counts (gemma4_vision had a row).
#[test]
fn axial_vision_towers_are_refused_by_model_type() {
    for model_type in
        ["qwen2_vl_vision", "qwen3_vl_vision", "gemma4_vision", "pixtral", "sam3_vit_model"]
    {
        let text = format!(
            r#"{{"model_type": "{model_type}", "hidden_size": 768, "num_attention_heads": 12,
                "rope_theta": 100.0}}"#
        );
        let e = RopeSpec::from_hf_config(&text, None).unwrap_err().to_string();
        assert!(e.contains(model_type) && e.contains("axial"), "{e}");
    }
}

/// A HunYuan config shaped as tencent's published ones (Hunyuan-7B, Hunyuan-A13B,
/// HunyuanOCR's text model): a `"dynamic"` object with `alpha` and the keys they ship beside
/// it. `extra` is added at the top level; `scaling` replaces the object.
fn hunyuan(model_type: &str, scaling: &str, extra: &str) -> String {
    format!(
        r#"{{"model_type": "{model_type}", "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "max_position_embeddings": 32768,
            "rope_theta": 10000.0, "rope_scaling": {scaling}{extra}}}"#
    )
}

const HUNYUAN_SCALING: &str = r#"{"alpha": 1000.0, "beta_fast": 32, "beta_slow": 1,
    "factor": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0, "type": "dynamic"}"#;

/// HunYuan's rotary modules make a `"dynamic"` RoPE with a non-zero `alpha` a fixed NTK
/// stretch of the base (transformers 5.24's `ntk_alpha`), over `head_dim` whatever
/// `partial_rotary_factor` says. Values from `HunYuanDenseV1RotaryEmbedding` (5.24): float32
/// `inv_freq[1]` 0.7760343551635742 and `inv_freq[63]` 1.1547820122359553e-07.
#[test]
fn hunyuan_ntk_alpha_is_read_as_its_modules_read_it() {
    use posenc::rope::Scaling;
    for model_type in ["hunyuan_v1_dense", "hunyuan_v1_moe"] {
        let text = hunyuan(
            model_type,
            HUNYUAN_SCALING,
            r#", "head_dim": 128, "partial_rotary_factor": 0.5"#,
        );
        let s = spec(&text, None);
        assert_eq!(s.scaling(), &Scaling::NtkAlpha { alpha: 1000.0 }, "{model_type}");
        assert_eq!((s.rotary_dim(), s.pairing()), (128, Pairing::Neox), "{model_type}");
        let f = s.frequencies(1_000_000);
        assert_eq!(f.attention_factor(), 1.0);
        // The formula at 256 bits, and the module's float32 values within their rounding.
        let base = 10000.0 * 1000f64.powf(128.0 / 126.0);
        for (i, module) in [(1, 0.7760343551635742), (63, 1.1547820122359553e-07)] {
            let w = f.inv_freq()[i];
            let formula = base.powf(-(2.0 * i as f64) / 128.0);
            assert!((w - formula).abs() <= 1e-14 * formula, "{model_type} {i}: {w} {formula}");
            assert!((w - module).abs() <= 2f64.powi(-23) * module, "{model_type} {i}: {w}");
        }
        // The legacy "type" and the transformers 5 form read alike; "ntk_alpha" as given.
        let v5 = format!(
            r#"{{"model_type": "{model_type}", "head_dim": 128, "rope_parameters":
                {{"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0,
                "factor": 1.0}}}}"#
        );
        assert_eq!(spec(&v5, None), s, "{model_type}");
        let named = hunyuan(model_type, r#"{"rope_type": "ntk_alpha", "alpha": 1000.0}"#, "");
        let named = named.replace("\"rope_theta\"", "\"head_dim\": 128, \"rope_theta\"");
        assert_eq!(spec(&named, None), s, "{model_type}");
    }
    // alpha 0 or null: the module's plain dynamic NTK, alpha unread.
    for alpha in ["0", "0.0", "null"] {
        let text = hunyuan(
            "hunyuan_v1_dense",
            &format!(r#"{{"type": "dynamic", "factor": 2.0, "alpha": {alpha}}}"#),
            r#", "head_dim": 128"#,
        );
        let s = spec(&text, None);
        assert_eq!(s.scaling(), &Scaling::Dynamic { factor: 2.0, max_position_embeddings: 32768 });
    }
}

#[test]
fn hunyuan_ntk_alpha_refusals_name_the_key() {
    let with_head = r#", "head_dim": 128"#;
    let dense = |scaling: &str, extra: &str| hunyuan("hunyuan_v1_dense", scaling, extra);
    // transformers' check of a "dynamic" RoPE requires factor, which NTK-alpha never reads.
    let msg = refused(
        &dense(r#"{"type": "dynamic", "alpha": 1000.0}"#, with_head),
        None,
        "rope_scaling.factor",
    );
    assert!(msg.contains("dynamic"), "{msg}");
    let msg = refused(
        &dense(&HUNYUAN_SCALING.replace("\"mscale\"", "\"scale\""), with_head),
        None,
        "rope_scaling.scale",
    );
    assert!(msg.contains("alpha") && msg.contains("mscale_all_dim"), "{msg}");
    for alpha in ["\"1000\"", "-1", "1e-30", "true"] {
        let bad = HUNYUAN_SCALING.replace("1000.0", alpha);
        refused(&dense(&bad, with_head), None, "rope_scaling.alpha");
    }
    // Its modules read the config's head_dim, with no fallback.
    let msg = refused(&dense(HUNYUAN_SCALING, ""), None, "head_dim");
    assert!(msg.contains("NTK-alpha"), "{msg}");
    // Elsewhere "ntk_alpha" is not a type, and alpha not a key of "dynamic".
    let llama = r#"{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
        "rope_scaling": {"rope_type": "ntk_alpha", "alpha": 1000.0}}"#;
    let msg = refused(llama, None, "rope_scaling.rope_type");
    assert!(msg.contains("HunYuan"), "{msg}");
    let llama = hunyuan("llama", HUNYUAN_SCALING, "");
    refused(&llama, None, "rope_scaling.alpha");
}

/// HunyuanOCR's config (`hunyuan_vl`, flat): XD-RoPE over four axes, `"xdrope"` read as
/// `"dynamic"` with `alpha` (transformers 5.24's `HunYuanVLTextConfig`). Each axis gathers
/// from the cache by position, which the multimodal reading gives (no three-axis layout);
/// a rotation by one position per token is refused, naming the section.
#[test]
fn hunyuan_vl_xd_rope_reads_for_the_cache_by_position() {
    use posenc::rope::Scaling;
    let xd = r#"{"alpha": 1000.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0,
        "mscale": 1.0, "mscale_all_dim": 1.0, "type": "xdrope",
        "xdrope_section": [16, 16, 16, 16]}"#;
    let ocr = |scaling: &str, heads: &str| {
        format!(
            r#"{{"model_type": "hunyuan_vl", "hidden_size": 1024, "num_attention_heads": 16,
                {heads} "max_position_embeddings": 32768, "rope_theta": 10000.0,
                "rope_scaling": {scaling}}}"#
        )
    };
    let text = ocr(xd, r#""head_dim": 128, "attention_head_dim": 128,"#);
    let (s, mrope) = RopeSpec::from_hf_config_multimodal(&text, None, None).unwrap();
    assert!(mrope.is_none());
    assert_eq!(s.scaling(), &Scaling::NtkAlpha { alpha: 1000.0 });
    assert_eq!((s.head_dim(), s.rotary_dim()), (128, 128));
    let dense = hunyuan("hunyuan_v1_dense", HUNYUAN_SCALING, r#", "head_dim": 128"#);
    assert_eq!(s.frequencies(1).inv_freq(), spec(&dense, None).frequencies(1).inv_freq());
    // transformers 5.24's own form, as its config class writes it.
    let saved = ocr(
        r#"{"rope_type": "dynamic", "type": "dynamic", "alpha": 1000.0, "factor": 1.0,
            "mrope_section": [16, 16, 16, 16]}"#,
        r#""head_dim": 128,"#,
    );
    assert_eq!(RopeSpec::from_hf_config_multimodal(&saved, None, None).unwrap().0, s);
    // attention_head_dim is the head dim (its class maps it over head_dim).
    let alias = ocr(&xd.replace("16, 16, 16, 16", "8, 8, 8, 8"), r#""attention_head_dim": 64,"#);
    let (a, _) = RopeSpec::from_hf_config_multimodal(&alias, None, None).unwrap();
    assert_eq!(a.rotary_dim(), 64);

    let refused_mm =
        |text: &str, field: &str| match RopeSpec::from_hf_config_multimodal(text, None, None)
            .unwrap_err()
        {
            posenc::Error::RopeConfig { field: f, value, .. } => {
                assert_eq!(f, field, "{value}");
            }
            other => panic!("{other:?}"),
        };
    // A rotation by one position per token: the axes differ per value of a pair.
    let msg = refused(&text, None, "rope_scaling.xdrope_section");
    assert!(msg.contains("XD-RoPE") && msg.contains("rope-cache"), "{msg}");
    refused_mm(
        &ocr(&xd.replace("16, 16, 16, 16", "16, 16, 16, 8"), r#""head_dim": 128,"#),
        "rope_scaling.xdrope_section",
    );
    refused_mm(
        &ocr(&xd.replace("16, 16, 16, 16", "16, 16, 16, 16.5"), r#""head_dim": 128,"#),
        "rope_scaling.xdrope_section",
    );
    let two = xd.replace("\"type\"", "\"mrope_section\": [32, 0, 32, 0], \"type\"");
    refused_mm(&ocr(&two, r#""head_dim": 128,"#), "rope_scaling.xdrope_section");
    refused_mm(
        &ocr(r#"{"type": "dynamic", "alpha": 1000.0, "factor": 1.0}"#, r#""head_dim": 128,"#),
        "rope_scaling.xdrope_section",
    );
    refused_mm(&ocr(xd, r#""head_dim": 128, "attention_head_dim": 64,"#), "head_dim");
}

/// Keys a family's config class keeps under another name (its `attribute_map`, transformers
/// 5.24): JetMoE's head dim is `kv_channels`, Zamba 2's `attention_head_dim`, Moonshine's
/// heads `decoder_num_attention_heads` (moonshine-tiny gives no `num_attention_heads`),
/// DBRX's sizes `d_model` and `n_heads`. Values checked against each family's own rotary
/// module (5.24); two different values for one attribute are refused.
#[test]
fn keys_their_config_classes_keep_under_another_name() {
    for (text, head, rotary) in [
        (
            r#"{"model_type": "jetmoe", "hidden_size": 2048, "num_attention_heads": 32,
                "kv_channels": 128}"#,
            128,
            128,
        ),
        (
            r#"{"model_type": "zamba2", "hidden_size": 2560, "num_attention_heads": 32,
                "attention_head_dim": 160, "use_mem_rope": true}"#,
            160,
            160,
        ),
        (
            r#"{"model_type": "moonshine", "hidden_size": 288, "encoder_num_attention_heads": 8,
                "decoder_num_attention_heads": 8, "partial_rotary_factor": 0.9}"#,
            36,
            32,
        ),
        (
            r#"{"model_type": "dbrx", "d_model": 6144, "n_heads": 48, "max_seq_len": 32768,
                "rope_theta": 500000, "attn_config": {"rope_theta": 500000}}"#,
            128,
            128,
        ),
    ] {
        let s = spec(text, None);
        assert_eq!((s.head_dim(), s.rotary_dim()), (head, rotary), "{text}");
    }
    let both = r#"{"model_type": "moonshine", "hidden_size": 288, "num_attention_heads": 6,
        "decoder_num_attention_heads": 8}"#;
    let msg = refused(both, None, "num_attention_heads");
    assert!(msg.contains("decoder_num_attention_heads"), "{msg}");
    let same = r#"{"model_type": "jetmoe", "hidden_size": 2048, "num_attention_heads": 32,
        "kv_channels": 128, "head_dim": 128}"#;
    assert_eq!(spec(same, None).head_dim(), 128);
    refused(&same.replace("\"head_dim\": 128", "\"head_dim\": 64"), None, "head_dim");
    // The length dynamic NTK reads, under Bailing Hybrid's name for it.
    let bailing = r#"{"model_type": "bailing_hybrid", "head_dim": 64, "rope_theta": 6e6,
        "model_max_length": 8192, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}"#;
    let s = spec(bailing, None);
    assert_eq!(
        s.scaling(),
        &posenc::rope::Scaling::Dynamic { factor: 2.0, max_position_embeddings: 8192 }
    );
}

/// A text config that leaves out the sizes its class defaults (llava-hf/llava-1.5-7b-hf's
/// `text_config`: `llama` with `vocab_size` and `max_position_embeddings` only) takes the
/// class's (`LlamaConfig`, 5.24: head dim 128 = 4096 / 32), as transformers builds it; only
/// the classes whose defaults never changed do.
#[test]
fn text_configs_without_their_sizes_take_the_class_defaults() {
    let llava = r#"{"model_type": "llava", "text_config": {"model_type": "llama",
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "vocab_size": 32064},
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024,
        "num_attention_heads": 16}}"#;
    let s = spec(llava, None);
    assert_eq!((s.head_dim(), s.rotary_dim(), s.base()), (128, 128, 10000.0));
    for model_type in ["mistral", "qwen2"] {
        let text = format!(r#"{{"model_type": "{model_type}", "vocab_size": 32000}}"#);
        assert_eq!(spec(&text, None).head_dim(), 128, "{model_type}");
    }
    // One of the two given: the other is the class's.
    let half = r#"{"model_type": "llama", "hidden_size": 5120}"#;
    assert_eq!(spec(half, None).head_dim(), 160);
    // A class whose defaults posenc does not keep: refused as before.
    refused(r#"{"model_type": "olmo2", "vocab_size": 100352}"#, None, "head_dim");
}

/// ColQwen2 and ColPali build one vision-language model from `vlm_config` (its class
/// default's type when it names none): read from there.
#[test]
fn retrievers_read_the_model_they_wrap() {
    let colpali = r#"{"model_type": "colpali", "embedding_dim": 128, "vlm_config": {
        "model_type": "paligemma", "text_config": {"model_type": "gemma", "hidden_size": 2048,
        "num_attention_heads": 8, "head_dim": 256, "num_key_value_heads": 1}}}"#;
    assert_eq!(spec(colpali, None).head_dim(), 256);
    let untyped = colpali.replace(r#""model_type": "paligemma", "#, "");
    assert_eq!(spec(&untyped, None).head_dim(), 256);
    let colqwen2 = r#"{"model_type": "colqwen2", "vlm_config": {"model_type": "qwen2_vl",
        "hidden_size": 1536, "num_attention_heads": 12, "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}}"#;
    let (s, mrope) = RopeSpec::from_hf_config_multimodal(colqwen2, None, None).unwrap();
    assert_eq!((s.head_dim(), s.base()), (128, 1e6));
    assert_eq!(mrope.unwrap().section(), [16, 24, 24]);
    let msg = refused(r#"{"model_type": "colqwen2"}"#, None, "vlm_config");
    assert!(msg.contains("qwen2_vl"), "{msg}");
}

/// The review of round nineteen's reading (2026-12-03): each case was read otherwise than
/// transformers 5.24 builds it.
#[test]
fn round_nineteen_review_cases() {
    // Zamba applies no RoPE; Zamba 2 only with use_mem_rope.
    let zamba = r#"{"model_type": "zamba", "hidden_size": 3712, "num_attention_heads": 16,
        "attention_head_dim": 464}"#;
    let msg = refused(zamba, None, "model_type");
    assert!(msg.contains("applies no RoPE"), "{msg}");
    let zamba2 = r#"{"model_type": "zamba2", "hidden_size": 2560, "num_attention_heads": 32,
        "attention_head_dim": 160}"#;
    refused(zamba2, None, "use_mem_rope");
    refused(&zamba2.replace("160}", r#"160, "use_mem_rope": false}"#), None, "use_mem_rope");
    // HunyuanOCR's flat config lifts its text class's keys only: a top-level
    // partial_rotary_factor stays on the composite.
    let ocr = r#"{"model_type": "hunyuan_vl", "hidden_size": 1024, "num_attention_heads": 16,
        "head_dim": 128, "partial_rotary_factor": 0.5, "original_max_position_embeddings": 8,
        "rope_scaling": {"type": "linear", "factor": 2.0, "xdrope_section": [16, 16, 16, 16]}}"#;
    let (s, _) = RopeSpec::from_hf_config_multimodal(ocr, None, None).unwrap();
    assert_eq!(s.rotary_dim(), 128);
    // A non-finite number where a sub-config belongs is not one.
    for key in ["text_config", "vlm_config", "rope_scaling"] {
        let text = format!(r#"{{"model_type": "llava", "head_dim": 8, "{key}": NaN}}"#);
        refused(&text, None, key);
    }
    // Llama's class has no n_embd: transformers leaves it unread.
    assert_eq!(spec(r#"{"model_type": "llama", "n_embd": 2048}"#, None).head_dim(), 128);
    // "ntk_alpha" given by name reads past the keys HunYuan ships beside alpha.
    let named = hunyuan(
        "hunyuan_v1_dense",
        r#"{"rope_type": "ntk_alpha", "alpha": 1000.0, "factor": 1.0, "beta_fast": 32}"#,
        r#", "head_dim": 128"#,
    );
    assert_eq!(spec(&named, None).scaling(), &posenc::rope::Scaling::NtkAlpha { alpha: 1000.0 });
    // HunYuan's attention needs head_dim whatever the RoPE.
    let plain = r#"{"model_type": "hunyuan_v1_dense", "hidden_size": 4096,
        "num_attention_heads": 32}"#;
    refused(plain, None, "head_dim");
    // A retriever wrapping a retriever.
    let nested = r#"{"model_type": "colpali", "vlm_config": {"model_type": "colqwen2",
        "vlm_config": {"model_type": "qwen2", "hidden_size": 1536,
        "num_attention_heads": 12}}}"#;
    assert_eq!(spec(nested, None).head_dim(), 128);
    // A scaling object on its own names ntk_alpha for HunYuan's alpha.
    let e = posenc::rope::Scaling::from_hf_json(r#"{"type": "dynamic", "factor": 1, "alpha": 9}"#)
        .unwrap_err();
    assert!(e.to_string().contains("ntk_alpha"), "{e}");
}
