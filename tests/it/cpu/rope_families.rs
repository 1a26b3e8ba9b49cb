//! `RopeSpec::from_hf_config` family by family, against transformers 5.23's own rotary modules:
//! each expected value was computed by building that model's rotary module from the config
//! shown (transformers 5.23.0, torch on the CPU) and, for the pairing, by rotating a query
//! vector with the model's own `apply_rotary_pos_emb` (or Llama 4's complex
//! `apply_rotary_emb`). Configs transformers reads differently across versions, or only by
//! accident, must be refused naming the key.

use posenc::Error;
use posenc::rope::{Layout, Pairing, RopeSpec};

/// transformers computes `inv_freq`, the angle and cos/sin in float32: its rotated values are
/// within a few float32 ulps of the exact ones posenc computes.
const FLOAT32_MODULE: f64 = 2e-6;

fn spec(text: &str, layer_type: Option<&str>) -> RopeSpec {
    RopeSpec::from_hf_config(text, layer_type).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The error, which must be a typed `RopeConfig` naming `field`, on one line.
fn refused(text: &str, layer_type: Option<&str>, field: &str) -> String {
    let e = RopeSpec::from_hf_config(text, layer_type).unwrap_err();
    match &e {
        Error::RopeConfig { field: f, .. } => assert_eq!(f, field, "{e}"),
        other => panic!("{other:?}"),
    }
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "{msg}");
    msg
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
        "llama4",
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
        assert!(posenc::rope::INTERLEAVED_MODEL_TYPES.contains(&model_type), "{model_type}");
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
    for model_type in ["llama", "qwen2", "glm4v_moe_text", "glm_image_text", "gpt_oss", "neomme"] {
        assert_eq!(spec(&small(model_type, ""), None).pairing(), Pairing::Neox, "{model_type}");
    }
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
