//! Multimodal RoPE (M-RoPE) configs: `RopeSpec::from_hf_config_multimodal` and
//! `posenc rope-cache` give the 1-D cache by position that each of the three axes gathers
//! from, with each frequency's axis; `posenc rope` and `cpu::rope_multimodal` rotate with a
//! position per axis, and the one-axis reading (`RopeSpec::from_hf_config`) refuses them.
//! The axes were read from transformers 5.24's `recomposition_frequencies` of each family,
//! and python/tests/test_hf.py checks them against those modules.

use posenc::Error;
use posenc::rope::families::{self, Mrope};
use posenc::rope::{Layout, MultimodalRope, Pairing, RopeSpec};
use safetensors::SafeTensors;

use super::rope_config::refused;
use crate::support::cli::{Dir, posenc};

/// A hub Qwen2.5-VL config: flat (its language model's keys at the top level), with the
/// legacy `type: "mrope"`.
const QWEN25_VL: &str = r#"{"architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl", "hidden_size": 3584, "num_attention_heads": 28,
    "num_key_value_heads": 4, "max_position_embeddings": 128000, "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_config": {"depth": 32}}"#;

/// A hub Qwen3-VL config: the language model under `text_config`, with the
/// `mrope_interleaved` its config class exempts.
const QWEN3_VL: &str = r#"{"model_type": "qwen3_vl", "text_config": {
    "model_type": "qwen3_vl_text", "head_dim": 128, "hidden_size": 4096,
    "num_attention_heads": 32, "rope_theta": 5000000,
    "rope_scaling": {"mrope_interleaved": true, "mrope_section": [24, 20, 20],
                     "rope_type": "default"}}}"#;

/// A GLM-4.1V-style text config: half the head rotates, per pair in the module.
const GLM4V: &str = r#"{"model_type": "glm4v_text", "hidden_size": 4096,
    "num_attention_heads": 32, "partial_rotary_factor": 0.5,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                        "mrope_section": [8, 12, 12]}}"#;

fn multimodal(text: &str) -> (RopeSpec, MultimodalRope) {
    let (spec, mrope) = RopeSpec::from_hf_config_multimodal(text, None, None)
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    (spec, mrope.expect("a multimodal RoPE"))
}

fn axes_text(m: &MultimodalRope) -> String {
    m.axes().iter().map(|a| char::from(b'0' + a)).collect()
}

#[test]
fn sections_take_runs_of_frequencies() {
    let (spec, m) = multimodal(QWEN25_VL);
    // The flat config reads as qwen2_5_vl_text, its "mrope" type as default.
    assert_eq!((spec.head_dim(), spec.rotary_dim(), spec.base()), (128, 128, 1e6));
    assert_eq!(spec.scaling().rope_type(), "default");
    assert_eq!((m.layout().name(), m.section()), ("sections", [16, 24, 24]));
    assert_eq!(axes_text(&m), format!("{}{}{}", "0".repeat(16), "1".repeat(24), "2".repeat(24)));
    // The cache is the 1-D RoPE's: the same spec as a plain Qwen2 config's.
    let plain = RopeSpec::from_hf_config(
        r#"{"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
            "rope_theta": 1000000.0}"#,
        None,
    )
    .unwrap();
    assert_eq!(spec, plain);
}

#[test]
fn interleaved_axes_cycle_within_their_sections() {
    let (spec, m) = multimodal(QWEN3_VL);
    assert_eq!((spec.head_dim(), spec.rotary_dim(), spec.base()), (128, 128, 5e6));
    assert_eq!((m.layout().name(), m.section()), ("interleaved", [24, 20, 20]));
    // Frequencies 0..60 cycle time, height, width (H and W run to 3 * 20); 60..64 are time.
    assert_eq!(axes_text(&m), format!("{}0000", "012".repeat(20)));
    // Unequal sections: H ends at 3 * 2, W at 3 * 3; the rest is time.
    let short = QWEN3_VL.replace("[24, 20, 20]", "[59, 2, 3]");
    let (_, m) = multimodal(&short);
    assert_eq!(axes_text(&m), format!("012012002{}", "0".repeat(55)));
}

#[test]
fn partial_rotary_multimodal_ropes_count_their_rotated_frequencies() {
    let (spec, m) = multimodal(GLM4V);
    assert_eq!((spec.head_dim(), spec.rotary_dim(), spec.pairing()), (128, 64, Pairing::Gptj));
    assert_eq!(m.axes().len(), 32);
    // GLM-4V's module returns each frequency per pair: a cache for it is gptj.
    assert_eq!(RopeSpec::module_pairing(GLM4V).unwrap(), Pairing::Gptj);
    // Qwen3.5: a quarter of 256 rotates, its default section [11, 11, 10].
    let qwen35 = r#"{"model_type": "qwen3_5_text", "head_dim": 256, "hidden_size": 4096,
        "num_attention_heads": 16, "rope_parameters": {"rope_type": "default",
        "rope_theta": 10000000, "partial_rotary_factor": 0.25, "mrope_interleaved": true}}"#;
    let (spec, m) = multimodal(qwen35);
    assert_eq!((spec.rotary_dim(), m.section()), (64, [11, 11, 10]));
    assert_eq!(axes_text(&m), format!("{}01", "012".repeat(10)));
}

#[test]
fn a_rotation_refuses_the_sections_and_names_rope_cache() {
    for text in [QWEN25_VL, QWEN3_VL, GLM4V] {
        let msg = match RopeSpec::from_hf_config(text, None).unwrap_err() {
            e @ Error::RopeConfig { .. } => e.to_string(),
            other => panic!("{other:?}"),
        };
        assert!(msg.contains("mrope_section") && msg.contains("rope-cache"), "{msg}");
    }
    // Without mrope_section a rotation of text positions (all axes equal) is the 1-D one,
    // served as before.
    let text_only = QWEN3_VL.replace(r#""mrope_section": [24, 20, 20],"#, "");
    let spec = RopeSpec::from_hf_config(&text_only, None).unwrap();
    assert_eq!(spec, multimodal(QWEN3_VL).0);
    // And the cache reads the family's default section.
    assert_eq!(multimodal(&text_only).1.section(), [24, 20, 20]);
}

#[test]
fn bad_sections_are_refused_naming_the_key() {
    let refuse = |text: &str, want: &str| {
        let e = RopeSpec::from_hf_config_multimodal(text, None, None).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::RopeConfig { .. }), "{e:?}");
        assert!(msg.contains("mrope_section") && msg.contains(want), "{msg}");
    };
    for bad in ["[16, 24]", "[16, 24, 24, 0]", "[16.5, 23.5, 24]", "[-16, 56, 24]"] {
        refuse(&QWEN25_VL.replace("[16, 24, 24]", bad), "three whole numbers");
    }
    refuse(&QWEN25_VL.replace("[16, 24, 24]", "\"16,24,24\""), "three whole numbers");
    refuse(&QWEN25_VL.replace("[16, 24, 24]", "[16, 24, 4294967312]"), "three whole numbers");
    refuse(&QWEN25_VL.replace("[16, 24, 24]", "[16, 24, 25]"), "(sum 65) for rotary_dim 128");
    // A count of 0 is an axis without frequencies, as transformers' split takes it.
    let (_, m) = multimodal(&QWEN25_VL.replace("[16, 24, 24]", "[0, 40, 24]"));
    assert_eq!(axes_text(&m), format!("{}{}", "1".repeat(40), "2".repeat(24)));
    // A class default that does not fit the head (transformers' own split fails on it).
    let default_glm = r#"{"model_type": "glm4v_text", "hidden_size": 4096,
        "num_attention_heads": 32, "rope_parameters": {"rope_type": "default"}}"#;
    refuse(default_glm, "class default [8, 12, 12]");
    // A family without M-RoPE refuses the key, for a cache too.
    let llama = r#"{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
        "rope_scaling": {"rope_type": "default", "mrope_section": [16, 24, 24]}}"#;
    refuse(llama, "not a rotation posenc computes");
    refused(llama, None, "rope_scaling.mrope_section");
    // mrope_interleaved is read past only where the module interleaves.
    let e = RopeSpec::from_hf_config_multimodal(
        &QWEN25_VL.replace(r#""type": "mrope","#, r#""type": "mrope", "mrope_interleaved": true,"#),
        None,
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("mrope_interleaved"), "{e}");
    // The legacy "mrope" type is Qwen2-VL's and Qwen2.5-VL's alone.
    let qwen3 = QWEN3_VL.replace(r#""rope_type": "default""#, r#""rope_type": "mrope""#);
    assert!(RopeSpec::from_hf_config_multimodal(&qwen3, None, None).is_err());
}

#[test]
fn families_without_multimodal_ropes_give_no_axes() {
    let llama = r#"{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32}"#;
    let (spec, mrope) = RopeSpec::from_hf_config_multimodal(llama, None, None).unwrap();
    assert_eq!((spec, mrope), (RopeSpec::from_hf_config(llama, None).unwrap(), None));
    // A flat composite whose class does not move its keys builds its language model from
    // its defaults: refused (round sixteen), where its text_config reads.
    let flat = r#"{"model_type": "llava", "hidden_size": 4096, "num_attention_heads": 32}"#;
    let e = RopeSpec::from_hf_config_multimodal(flat, None, None).unwrap_err();
    assert!(e.to_string().contains("text_config"), "{e}");
    let nested = r#"{"model_type": "llava", "text_config": {"model_type": "llama",
        "hidden_size": 4096, "num_attention_heads": 32}}"#;
    assert_eq!(RopeSpec::from_hf_config_multimodal(nested, None, None).unwrap().1, None);
}

#[test]
fn every_multimodal_family_default_section_has_three_axes() {
    let rows: Vec<_> =
        families::all().iter().filter_map(|f| Some((f.model_type, f.mrope?))).collect();
    assert!(rows.len() >= 17, "{rows:?}");
    for (model_type, (m, section)) in rows {
        assert!(section.iter().all(|&n| n > 0), "{model_type}");
        let r = 2 * section.iter().sum::<u32>();
        // Each axis takes at least one frequency, and every frequency one axis.
        let axes: Vec<u8> = (0..r / 2).map(|i| m.axis(section, i)).collect();
        for axis in 0..3 {
            assert!(axes.contains(&axis), "{model_type}: {axes:?}");
        }
        if m == Mrope::Sections {
            assert!(axes.windows(2).all(|w| w[0] <= w[1]), "{model_type}: {axes:?}");
        }
    }
}

/// The interleaved modules assign each frequency by its index, whatever the section sums
/// to (review of c873d21: a small Qwen3-VL config, head 16, was refused for its class
/// default's sum); Qwen3-Omni's configs carry an `interleaved` flag their class exempts.
#[test]
fn interleaved_sections_need_not_sum_to_the_frequencies() {
    let small = r#"{"model_type": "qwen3_vl_text", "head_dim": 16, "hidden_size": 32,
        "num_attention_heads": 2, "rope_theta": 1e6}"#;
    let (spec, m) = multimodal(small);
    assert_eq!((spec.rotary_dim(), m.section()), (16, [24, 20, 20]));
    assert_eq!(axes_text(&m), "01201201");
    let omni = r#"{"model_type": "qwen3_omni_moe_text", "head_dim": 128, "hidden_size": 2048,
        "num_attention_heads": 32, "rope_theta": 1000000, "rope_scaling": {"interleaved": true,
        "mrope_interleaved": true, "mrope_section": [24, 20, 20], "rope_type": "default",
        "type": "default"}}"#;
    assert_eq!(multimodal(omni).1.layout(), Mrope::Interleaved);
    let talker = r#"{"model_type": "qwen3_omni_moe_talker_text", "hidden_size": 1024,
        "num_attention_heads": 16, "rope_parameters": {"rope_type": "default",
        "rope_theta": 1000000, "mrope_section": [16, 8, 8], "interleaved": true}}"#;
    let (spec, m) = multimodal(talker);
    assert_eq!((spec.rotary_dim(), m.section()), (64, [16, 8, 8]));
    // The flag is Qwen3-Omni's alone.
    let other = QWEN3_VL.replace("\"mrope_interleaved\"", "\"interleaved\"");
    assert!(RopeSpec::from_hf_config_multimodal(&other, None, None).is_err());
}

#[test]
fn rope_cache_records_the_axes_and_rope_takes_them() {
    let dir = Dir::new();
    let config = dir.bytes("config.json", QWEN3_VL.as_bytes());
    let out = dir.out("cache.safetensors");
    // On the CPU: the tests' GPU-first `auto` adds a note where no adapter opens.
    let args = ["rope-cache", "--config", &config, "--len", "8", "-o", &out, "--device", "cpu"];
    let run = posenc(&args);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.starts_with("posenc: note: ") && stderr.contains("M-RoPE"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let bytes = std::fs::read(&out).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let meta = meta.metadata().clone().unwrap();
    assert_eq!(meta["mrope_axes"], format!("{}0000", "012".repeat(20)));
    assert_eq!(
        (meta["mrope_layout"].as_str(), meta["mrope_section"].as_str()),
        ("interleaved", "24,20,20")
    );
    // The values are the 1-D RoPE's: the same bytes as the config without its sections'
    // metadata, written from the head dim and base alone.
    let plain = dir.out("plain.safetensors");
    let run = posenc(&[
        "rope-cache",
        "--head-dim",
        "128",
        "--base",
        "5000000",
        "--len",
        "8",
        "-o",
        &plain,
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let plain = std::fs::read(&plain).unwrap();
    let (a, b) =
        (SafeTensors::deserialize(&bytes).unwrap(), SafeTensors::deserialize(&plain).unwrap());
    for name in ["cos", "sin", "inv_freq"] {
        assert_eq!(a.tensor(name).unwrap().data(), b.tensor(name).unwrap().data(), "{name}");
    }
    // A --rotary-dim the sections do not fit is refused (exit 2), naming the option, and
    // writes nothing.
    let config = dir.bytes("qwen25.json", QWEN25_VL.as_bytes());
    let narrow = dir.out("narrow.safetensors");
    let run = posenc(&[
        "rope-cache",
        "--config",
        &config,
        "--rotary-dim",
        "64",
        "--len",
        "8",
        "-o",
        &narrow,
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("mrope_section") && stderr.contains("--rotary-dim"), "{stderr}");
    assert!(!dir.path("narrow.safetensors").exists());
    // rope takes the config: text positions (an offset) rotate as the 1-D RoPE of its base.
    let q = ndarray::Array4::from_shape_fn((1, 4, 2, 128), |(_, l, h, d)| (l + h + d) as f32);
    let q_path = dir.npy("q.npy", &q);
    let r = dir.out("r.npy");
    let args = ["rope", "--config", &config, "--input", &q_path, "--layout", "blhd", "-o", &r];
    let run = posenc(&args);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let spec = RopeSpec::new(128).unwrap().with_base(1e6).unwrap();
    let positions = posenc::positions::contiguous_batch(1, 4).unwrap();
    let want = posenc::cpu::rope(&spec, q.view(), positions.view(), Layout::Blhd).unwrap();
    assert!(std::fs::read(dir.path("r.npy")).unwrap() == crate::support::npy_bytes(&want));
    // The library's one-axis reading refuses it, naming the multimodal one.
    let e = RopeSpec::from_hf_config(QWEN25_VL, None).unwrap_err().to_string();
    assert!(e.contains("mrope_section") && e.contains("from_hf_config_multimodal"), "{e}");
}

/// A Qwen Omni config holds two language models: refused naming them (review of c873d21: it
/// asked for a head dim), while either one's own config reads.
#[test]
fn qwen_omni_top_level_configs_name_their_two_language_models() {
    let thinker_text = r#"{"model_type": "qwen2_5_omni_text", "hidden_size": 3584,
        "num_attention_heads": 28, "rope_theta": 1000000.0,
        "rope_scaling": {"type": "default", "mrope_section": [16, 24, 24]}}"#;
    let omni = format!(
        r#"{{"model_type": "qwen2_5_omni", "thinker_config": {{
            "model_type": "qwen2_5_omni_thinker", "text_config": {thinker_text}}},
            "talker_config": {{"model_type": "qwen2_5_omni_talker", "hidden_size": 896,
            "num_attention_heads": 14, "head_dim": 128, "rope_theta": 1000000.0}}}}"#
    );
    let e = RopeSpec::from_hf_config_multimodal(&omni, None, None).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("thinker_config") && msg.contains("talker_config"), "{msg}");
    // The thinker's own config (its text_config inside) reads.
    let thinker =
        format!(r#"{{"model_type": "qwen2_5_omni_thinker", "text_config": {thinker_text}}}"#);
    let (spec, m) = multimodal(&thinker);
    assert_eq!((spec.head_dim(), m.layout()), (128, Mrope::Sections));
}

/// Round thirteen: transformers 5.24 keeps a hub config's `type: "mrope"` and writes
/// `rope_type: "default"` beside it, so every Qwen2-VL config it saved was refused
/// ("type ... the same as rope_type").
#[test]
fn saved_qwen2_vl_configs_with_both_type_keys_read() {
    let saved = r#"{"model_type": "qwen2_vl", "text_config": {"model_type": "qwen2_vl_text",
        "hidden_size": 3584, "num_attention_heads": 28, "rope_parameters": {
        "mrope_section": [16, 24, 24], "rope_theta": 1000000.0, "rope_type": "default",
        "type": "mrope"}}}"#;
    let (spec, m) = multimodal(saved);
    assert_eq!((spec.base(), m.section()), (1e6, [16, 24, 24]));
    assert_eq!(spec.scaling().rope_type(), "default");
}

/// Round thirteen: `for_rotary_dim` took any u32, and `axes()` then sized its allocation
/// by it (2 GiB for u32::MAX).
#[test]
fn for_rotary_dim_refuses_what_no_rope_has() {
    let (_, m) = multimodal(QWEN3_VL);
    for bad in [0, 1, 7, 65538, u32::MAX] {
        match m.for_rotary_dim(bad) {
            Err(Error::InvalidParameter { field: "rotary_dim", .. }) => {}
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert_eq!(m.for_rotary_dim(65536).unwrap().axes().len(), 32768);
}

#[test]
fn flat_composites_read_only_the_keys_their_text_class_takes() {
    // transformers 5.24's Qwen2-VL and Qwen2.5-VL text configs take no head_dim and no
    // top-level partial_rotary_factor: a flat config's stay on the composite, and the
    // language model rotates hidden_size / heads = 128 dims (its module's inv_freq has 64
    // entries). Read from the top level, posenc rotated 64 dims.
    for top in ["qwen2_vl", "qwen2_5_vl"] {
        let flat = QWEN25_VL.replace("\"qwen2_5_vl\"", &format!("{top:?}")).replace(
            "\"hidden_size\"",
            "\"head_dim\": 64, \"partial_rotary_factor\": 0.5, \"hidden_size\"",
        );
        let (spec, m) = multimodal(&flat);
        assert_eq!((spec.head_dim(), spec.rotary_dim()), (128, 128), "{top}");
        assert_eq!(m.section(), [16, 24, 24]);
    }
    // A null text_config is none: transformers builds it from the top level (posenc read
    // the flat keys as they stand, head_dim and all).
    let null = QWEN25_VL
        .replace("\"hidden_size\"", "\"text_config\": null, \"head_dim\": 64, \"hidden_size\"");
    assert_eq!(multimodal(&null).0.head_dim(), 128);
    let fuyu = r#"{"model_type": "fuyu", "text_config": null, "hidden_size": 4096,
        "num_attention_heads": 64, "partial_rotary_factor": 0.5, "rope_theta": 25000.0}"#;
    assert_eq!(RopeSpec::from_hf_config(fuyu, None).unwrap().rotary_dim(), 32);
    // PaddleOCR-VL's text config takes head_dim.
    let paddle = r#"{"model_type": "paddleocr_vl", "hidden_size": 1024,
        "num_attention_heads": 16, "head_dim": 128, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "default", "mrope_section": [16, 24, 24]}}"#;
    assert_eq!(multimodal(paddle).0.head_dim(), 128);
}

#[test]
fn a_rope_theta_inside_rope_scaling_is_read_where_both_versions_agree() {
    // transformers 5 reads rope_scaling as rope_parameters, rope_theta and all; 4.x ignored
    // the inner one. Equal to the top-level one, both read it.
    let saved = QWEN25_VL.replace(
        r#""type": "mrope","#,
        r#""type": "mrope", "rope_type": "default", "rope_theta": 1000000.0,"#,
    );
    assert_eq!(multimodal(&saved).0.base(), 1e6);
    let llama = r#"{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
        "rope_theta": 500000, "rope_scaling": {"rope_type": "default", "rope_theta": 500000}}"#;
    assert_eq!(RopeSpec::from_hf_config(llama, None).unwrap().base(), 5e5);
    let other = llama.replace("\"rope_theta\": 500000}", "\"rope_theta\": 400000}");
    let msg = super::rope_config::refused(&other, None, "rope_scaling.rope_theta");
    assert!(msg.contains("400000") && msg.contains("500000"), "{msg}");
    let alone = llama.replace("\"rope_theta\": 500000, ", "");
    let msg = super::rope_config::refused(&alone, None, "rope_scaling.rope_theta");
    assert!(msg.contains("4.x takes the class's base"), "{msg}");
    // The base compared is named where it came from.
    let neox = r#"{"model_type": "gpt_neox", "hidden_size": 512, "num_attention_heads": 4,
        "rotary_emb_base": 20000, "rope_scaling": {"rope_type": "linear", "factor": 2.0,
        "rope_theta": 10000}}"#;
    let msg = super::rope_config::refused(neox, None, "rope_scaling.rope_theta");
    assert!(msg.contains("rotary_emb_base's 20000"), "{msg}");
    let gemma3 = r#"{"model_type": "gemma3_text", "hidden_size": 512, "num_attention_heads": 4,
        "head_dim": 128, "rope_scaling": {"rope_type": "linear", "factor": 8.0,
        "rope_theta": 10000}}"#;
    let msg =
        super::rope_config::refused(gemma3, Some("full_attention"), "rope_scaling.rope_theta");
    assert!(msg.contains("the class's base 1000000"), "{msg}");
    // ModernBERT's layers read bases of their own.
    let modernbert = r#"{"model_type": "modernbert", "hidden_size": 768,
        "num_attention_heads": 12, "rope_scaling": {"rope_type": "linear", "factor": 2.0,
        "rope_theta": 160000}}"#;
    let msg =
        super::rope_config::refused(modernbert, Some("full_attention"), "rope_scaling.rope_theta");
    assert!(msg.contains("global_rope_theta"), "{msg}");
}

/// Round sixteen's silent wrong answers, each now refused naming the key: a layer type's
/// YaRN `truncate: false` (transformers 5.24 reads truncate from the top level of
/// rope_parameters only, so such a layer truncates); a composite without `text_config` whose
/// class builds its language model from its own defaults (not the top-level keys); and a
/// family whose module is always M-RoPE, with a class default section where none is given.
#[test]
fn round_sixteen_configs_are_refused_naming_the_key() {
    let gemma3 = r#"{"model_type": "gemma3_text", "hidden_size": 256, "num_attention_heads": 2,
        "head_dim": 64, "layer_types": ["sliding_attention", "full_attention"],
        "max_position_embeddings": 8192, "rope_parameters": {
        "full_attention": {"rope_type": "yarn", "factor": 8.0, "rope_theta": 1e6,
            "original_max_position_embeddings": 1024, "truncate": false},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}"#;
    let msg = refused(gemma3, Some("full_attention"), "rope_parameters.full_attention.truncate");
    assert!(msg.contains("top level of rope_parameters"), "{msg}");
    // A null, which one RoPE for every layer reads as false (Python's None), likewise.
    let null = gemma3.replace(r#""truncate": false"#, r#""truncate": null"#);
    let msg = refused(&null, Some("full_attention"), "rope_parameters.full_attention.truncate");
    assert!(msg.contains("null") && msg.contains("top level of rope_parameters"), "{msg}");
    // true (what the model does) reads; so does false for one RoPE of every layer.
    let truncating = gemma3.replace(r#""truncate": false"#, r#""truncate": true"#);
    assert!(RopeSpec::from_hf_config(&truncating, Some("full_attention")).is_ok());
    let llama = r#"{"model_type": "llama", "hidden_size": 256, "num_attention_heads": 2,
        "max_position_embeddings": 8192, "rope_parameters": {"rope_type": "yarn",
        "factor": 8.0, "rope_theta": 1e6, "original_max_position_embeddings": 1024,
        "truncate": false}}"#;
    assert!(RopeSpec::from_hf_config(llama, None).is_ok());
    // ModernBERT's legacy rope_scaling, which its class gives both layer types.
    let modernbert = r#"{"model_type": "modernbert", "hidden_size": 256,
        "num_attention_heads": 4, "max_position_embeddings": 8192, "rope_scaling":
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048,
        "truncate": false}}"#;
    refused(modernbert, Some("sliding_attention"), "rope_scaling.truncate");

    for top in ["qwen3_vl_moe", "qwen3_5", "glm_ocr", "cosmos3_edge"] {
        let flat = format!(
            r#"{{"model_type": "{top}", "hidden_size": 256, "num_attention_heads": 2,
                "head_dim": 128, "rope_theta": 10000.0}}"#
        );
        let msg = refused(&flat, None, "text_config");
        assert!(msg.contains("own defaults"), "{msg}");
        let null = flat.replace(r#""head_dim""#, r#""text_config": null, "head_dim""#);
        refused(&null, None, "text_config");
    }
    // The flat composites whose classes lift the top level still read.
    assert!(RopeSpec::from_hf_config_multimodal(QWEN25_VL, None, None).is_ok());

    // A per-layer-type rope_parameters is read only under the config's layer types (its
    // `layer_types`, else its class's): elsewhere transformers 5.24 reads the entries as one
    // RoPE's unknown keys (Llama's class rotates every layer with a default RoPE over
    // rope_theta), and posenc refuses them.
    let per_layer = |model_type: &str, keys: [&str; 2], extra: &str| {
        format!(
            r#"{{"model_type": "{model_type}", "hidden_size": 256, "num_attention_heads": 2{extra},
                "rope_parameters": {{
                "{}": {{"rope_type": "default", "rope_theta": 10000.0}},
                "{}": {{"rope_type": "default", "rope_theta": 500000.0}}}}}}"#,
            keys[0], keys[1]
        )
    };
    let usual = ["full_attention", "sliding_attention"];
    for model_type in ["llama", "mistral", "glm4_moe", "jetmoe", "deepseek_v32", "someday"] {
        let config = per_layer(model_type, usual, "");
        let msg = refused(&config, Some("sliding_attention"), "rope_parameters");
        assert!(msg.contains("unknown keys"), "{msg}");
    }
    let declared = r#", "layer_types": ["sliding_attention", "full_attention"]"#;
    // Llama's class has no layer types: a config's `layer_types` changes nothing there.
    for model_type in ["llama", "someday"] {
        refused(
            &per_layer(model_type, usual, declared),
            Some("sliding_attention"),
            "rope_parameters",
        );
    }
    for (model_type, keys, extra) in [
        ("gpt_oss", usual, ""),
        ("qwen2", usual, ""),
        ("gpt_oss", usual, declared),
        ("deepseek_v32", ["indexed_attention", "sliding_attention"], ""),
    ] {
        let config = per_layer(model_type, keys, extra);
        let spec = RopeSpec::from_hf_config(&config, Some(keys[1]));
        assert_eq!(spec.unwrap().base(), 500000.0, "{model_type}");
    }

    // A layer type the config has without its entry (its class fills one in) is named as
    // the missing entry; one it does not have is named as the layer type.
    let gemma3 = r#"{"model_type": "gemma3_text", "hidden_size": 256, "num_attention_heads": 2,
        "head_dim": 64, "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6}}}"#;
    let msg = refused(gemma3, Some("sliding_attention"), "rope_parameters.sliding_attention");
    assert!(msg.contains("fills one in"), "{msg}");
    refused(gemma3, Some("chunked_attention"), "layer_type");

    // Flat configs whose classes pass every key on read as their language model.
    let dots = r#"{"model_type": "dots3_note", "hidden_size": 256, "num_attention_heads": 2,
        "head_dim": 64, "layer_types": ["sliding_attention"], "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 50000.0,
        "partial_rotary_factor": 0.25}}}"#;
    let nested = format!(
        r#"{{"model_type": "dots3_note", "text_config": {}}}"#,
        dots.replace(r#""dots3_note""#, r#""dots3_note_text""#)
    );
    let flat = RopeSpec::from_hf_config(dots, Some("sliding_attention")).unwrap();
    assert_eq!(flat, RopeSpec::from_hf_config(&nested, Some("sliding_attention")).unwrap());
    assert_eq!((flat.rotary_dim(), flat.base()), (16, 50000.0));
    // GLM-5 Next's language model applies no RoPE.
    let glm5 = r#"{"model_type": "glm5_next", "hidden_size": 256, "num_attention_heads": 2}"#;
    assert!(RopeSpec::from_hf_config(glm5, None).unwrap_err().to_string().contains("NoPE"));

    // Cosmos 3 Edge's class refuses another rope_type and a section not summing to
    // head_dim / 2.
    let cosmos = |scaling: &str| {
        format!(
            r#"{{"model_type": "cosmos3_edge_text", "hidden_size": 256,
                "num_attention_heads": 2, "head_dim": 128, "rope_parameters": {scaling}}}"#
        )
    };
    let ok =
        cosmos(r#"{"rope_type": "default", "rope_theta": 1e8, "mrope_section": [24, 20, 20]}"#);
    assert!(RopeSpec::from_hf_config_multimodal(&ok, None, None).is_ok());
    let linear = cosmos(
        r#"{"rope_type": "linear", "factor": 2.0, "rope_theta": 1e8,
            "mrope_section": [24, 20, 20]}"#,
    );
    let e = RopeSpec::from_hf_config_multimodal(&linear, None, None).unwrap_err().to_string();
    assert!(e.contains("rope_parameters.rope_type") && e.contains("Cosmos 3 Edge"), "{e}");
    let short =
        cosmos(r#"{"rope_type": "default", "rope_theta": 1e8, "mrope_section": [10, 10, 10]}"#);
    let e = RopeSpec::from_hf_config_multimodal(&short, None, None).unwrap_err().to_string();
    assert!(e.contains("mrope_section") && e.contains("head_dim 128"), "{e}");

    // A scaling object's mrope_section is refused saying where the axes come from.
    let e = posenc::rope::Scaling::from_hf_json(
        r#"{"rope_type": "default", "mrope_section": [16, 24, 24]}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("--config"), "{e}");

    for (model_type, section) in
        [("cohere_compass_text", "[24, 20, 20]"), ("hy_v4_vl_text", "[12, 10, 10]")]
    {
        let config = format!(
            r#"{{"model_type": "{model_type}", "hidden_size": 256, "num_attention_heads": 2,
                "rope_parameters": {{"rope_type": "default", "rope_theta": 10000.0}}}}"#
        );
        let e = RopeSpec::from_hf_config_multimodal(&config, None, None).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("mrope_section") && msg.contains(section), "{msg}");
    }
}

/// An ERNIE 4.5 VL text config (transformers 5.24's `Ernie4_5_VLMoeTextConfig`): its module
/// alternates the height and width axes over the first `s0 + s1` frequencies, then time.
const ERNIE45_VL: &str = r#"{"model_type": "ernie4_5_vl_moe", "text_config": {
    "model_type": "ernie4_5_vl_moe_text", "hidden_size": 2560, "num_attention_heads": 20,
    "rope_parameters": {"mrope_section": [22, 22, 20], "rope_type": "default",
                        "rope_theta": 500000.0}}}"#;

#[test]
fn alternating_axes_pair_height_and_width_then_time() {
    let (spec, m) = multimodal(ERNIE45_VL);
    assert_eq!((spec.head_dim(), spec.rotary_dim(), spec.base()), (128, 128, 5e5));
    assert_eq!(
        (spec.pairing(), m.layout().name(), m.section()),
        (Pairing::Gptj, "alternating", [22, 22, 20])
    );
    assert_eq!(axes_text(&m), format!("{}{}", "12".repeat(22), "0".repeat(20)));
    // Its module returns each frequency per pair.
    assert_eq!(RopeSpec::module_pairing(ERNIE45_VL).unwrap(), Pairing::Gptj);
    // Text positions rotate as the 1-D interleaved RoPE of the base; the class default
    // section is the published one.
    let text_only = ERNIE45_VL.replace(r#""mrope_section": [22, 22, 20], "#, "");
    let spec_1d = RopeSpec::from_hf_config(&text_only, None).unwrap();
    assert_eq!(spec_1d, spec);
    assert_eq!(multimodal(&text_only).1.section(), [22, 22, 20]);
    // All time is a section too ([0, 0, 64] builds in transformers).
    let (_, m) = multimodal(&ERNIE45_VL.replace("[22, 22, 20]", "[0, 0, 64]"));
    assert_eq!(axes_text(&m), "0".repeat(64));
}

/// Sections ERNIE 4.5 VL's module fails to build with (it stacks the height and width runs,
/// splits by the sum and slices the time run with `[:-t]`), and any rope type but
/// `default`, which it raises on: refused naming the key, for the one-axis reading too.
#[test]
fn alternating_sections_the_module_cannot_build_are_refused() {
    for (bad, want) in [
        ("[20, 22, 22]", "[n, n, m]"),
        ("[32, 32, 0]", "[n, n, m]"),
        ("[10, 10, 10]", "(sum 30) for rotary_dim 128"),
    ] {
        let text = ERNIE45_VL.replace("[22, 22, 20]", bad);
        let e = RopeSpec::from_hf_config_multimodal(&text, None, None).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::RopeConfig { .. }), "{e:?}");
        assert!(msg.contains("rope_parameters.mrope_section") && msg.contains(want), "{msg}");
    }
    // The class default does not fit a head of 64: refused, for text positions as well.
    let narrow = r#"{"model_type": "ernie4_5_vl_moe_text", "hidden_size": 1024,
        "num_attention_heads": 16, "rope_parameters": {"rope_type": "default",
        "rope_theta": 500000.0}}"#;
    let e = RopeSpec::from_hf_config(narrow, None).unwrap_err().to_string();
    assert!(e.contains("mrope_section") && e.contains("class default [22, 22, 20]"), "{e}");
    let linear =
        ERNIE45_VL.replace(r#""rope_type": "default""#, r#""rope_type": "linear", "factor": 2.0"#);
    let e = RopeSpec::from_hf_config_multimodal(&linear, None, None).unwrap_err().to_string();
    assert!(e.contains("rope_parameters.rope_type") && e.contains("ERNIE 4.5 VL"), "{e}");
    // Named before the type's own keys, whose absence transformers never reaches (review).
    let yarn = ERNIE45_VL.replace(r#""rope_type": "default""#, r#""rope_type": "yarn""#);
    let e = RopeSpec::from_hf_config_multimodal(&yarn, None, None).unwrap_err().to_string();
    assert!(e.contains("rope_parameters.rope_type") && e.contains("\"yarn\""), "{e}");
    // Without a rope_type it is the default, as the config class makes it.
    let untyped = ERNIE45_VL.replace(r#""rope_type": "default", "#, "");
    assert_eq!(multimodal(&untyped).1.section(), [22, 22, 20]);
}

/// Round eighteen: a composite whose config class builds its own text class whatever the
/// `text_config`'s `model_type` says (ERNIE 4.5 VL, Gemma 3, Qwen2-VL, ...) was read as the
/// family that `model_type` named; it is read as the class transformers builds, while a
/// composite that builds the one named (LLaVA, through `AutoConfig`) still reads it.
#[test]
fn a_fixed_text_class_is_read_whatever_the_text_config_names() {
    let as_llama =
        ERNIE45_VL.replace(r#""model_type": "ernie4_5_vl_moe_text""#, r#""model_type": "llama""#);
    assert_ne!(as_llama, ERNIE45_VL);
    assert_eq!(multimodal(&as_llama), multimodal(ERNIE45_VL));
    let gemma = |inner: &str| {
        format!(
            r#"{{"model_type": "gemma3", "text_config": {{"model_type": "{inner}",
            "hidden_size": 512, "num_attention_heads": 4, "rope_theta": 10000}}}}"#
        )
    };
    for layer in ["full_attention", "sliding_attention"] {
        let own = RopeSpec::from_hf_config(&gemma("gemma3_text"), Some(layer)).unwrap();
        assert_eq!(RopeSpec::from_hf_config(&gemma("llama"), Some(layer)).unwrap(), own);
        assert_eq!(own.head_dim(), 256, "Gemma 3's class default, not 512 / 4");
    }
    // LLaVA builds the language model its text_config names: Cohere 2's pairs (gptj).
    let llava = |inner: &str| {
        format!(
            r#"{{"model_type": "llava", "text_config": {{"model_type": "{inner}",
            "hidden_size": 512, "num_attention_heads": 4, "rope_theta": 10000}}}}"#
        )
    };
    assert_eq!(RopeSpec::from_hf_config(&llava("cohere2"), None).unwrap().pairing(), Pairing::Gptj);
    assert_eq!(RopeSpec::from_hf_config(&llava("llama"), None).unwrap().pairing(), Pairing::Neox);
}

/// Review of round eighteen: Voxtral's and Voxtral Realtime's config classes lay their own
/// text defaults under the `text_config`'s keys (head_dim 128, their bases), whatever its
/// `model_type`; posenc read a Llama's hidden / heads and base 10000.
#[test]
fn merged_text_defaults_are_read_under_the_given_keys() {
    let voxtral = |top: &str, inner: &str| {
        format!(
            r#"{{"model_type": "{top}", "text_config": {{{inner}"hidden_size": 512,
            "num_attention_heads": 8}}}}"#
        )
    };
    for (top, base) in [("voxtral", 1e8), ("voxtral_realtime", 1e6)] {
        for inner in ["", r#""model_type": "llama", "#] {
            let spec = RopeSpec::from_hf_config(&voxtral(top, inner), None).unwrap();
            assert_eq!((spec.head_dim(), spec.base()), (128, base), "{top} {inner}");
        }
    }
    // The text_config's own keys win.
    let own = r#"{"model_type": "voxtral", "text_config": {"model_type": "llama",
        "hidden_size": 512, "num_attention_heads": 8, "head_dim": 64, "rope_theta": 5e5}}"#;
    let spec = RopeSpec::from_hf_config(own, None).unwrap();
    assert_eq!((spec.head_dim(), spec.base()), (64, 5e5));
}

/// Each frequency of a multimodal rotation is the 1-D rotation at its axis's position, bit
/// for bit: every layout, both pairings, a partial rotary dim, and more frequencies than
/// the CPU loop takes in one run of positions (64), so that runs and a part run meet.
#[test]
fn each_frequency_turns_as_the_one_axis_rotation_at_its_axis() {
    use ndarray::{Array2, Array3, Array4, Axis};
    let (batch, len, heads) = (2, 5, 3);
    let cases = [
        (Mrope::Sections, [48, 56, 56], 320, 330),
        (Mrope::Interleaved, [54, 53, 53], 320, 320),
        (Mrope::Alternating, [56, 56, 48], 320, 336),
        (Mrope::Sections, [16, 24, 24], 128, 128),
    ];
    for (layout_m, section, rotary, head) in cases {
        for pairing in [Pairing::Neox, Pairing::Gptj] {
            let spec = RopeSpec::partial(head, rotary)
                .unwrap()
                .with_base(1e6)
                .unwrap()
                .with_pairing(pairing);
            let mrope = MultimodalRope::new(layout_m, section, rotary).unwrap();
            let positions = Array3::from_shape_fn((3, batch, len), |(a, b, l)| {
                [7 * l as u32 + b as u32, 1000 + 3 * l as u32, 123_456_789 + l as u32][a]
            });
            let x = Array4::from_shape_fn((batch, len, heads, head as usize), |(b, l, h, d)| {
                ((b * 7 + l * 5 + h * 3 + d) % 17) as f32 - 8.0
            });
            let got = posenc::cpu::rope_multimodal(
                &spec,
                &mrope,
                x.view(),
                positions.view(),
                Layout::Blhd,
            )
            .unwrap();
            let along: Vec<Array4<f32>> = (0..3)
                .map(|a| {
                    let p: Array2<u32> = positions.index_axis(Axis(0), a).to_owned();
                    posenc::cpu::rope(&spec, x.view(), p.view(), Layout::Blhd).unwrap()
                })
                .collect();
            let half = rotary as usize / 2;
            for i in 0..half {
                let axis = usize::from(mrope.axis(i as u32));
                let dims = match pairing {
                    Pairing::Neox => [i, i + half],
                    Pairing::Gptj => [2 * i, 2 * i + 1],
                };
                for d in dims {
                    let (g, w) = (got.index_axis(Axis(3), d), along[axis].index_axis(Axis(3), d));
                    let same = g.iter().zip(w.iter()).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{layout_m:?} {pairing:?} r {rotary}: frequency {i} (axis {axis})"
                    );
                }
            }
            // Pass-through dims are the input's.
            for d in rotary as usize..head as usize {
                assert_eq!(got.index_axis(Axis(3), d), x.index_axis(Axis(3), d));
            }
        }
    }
}
