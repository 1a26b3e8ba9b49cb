//! The family table (`posenc::rope::families`) checked against itself: sorted and found by
//! its lookup, no row whose columns contradict each other or can never be read, and the
//! families the reader's messages name the ones the table says.

use posenc::rope::families::{
    self, BaseDefault, Family, HeadDimDefault, LayerRule, PairingRule, PartialDefault, Refusal,
    RotaryKey,
};
use posenc::rope::{MAX_HEAD_DIM, ROPE_TYPES, RopeSpec};
use posenc::{Error, model_config};

/// A row's defaults and rules: every column but its name and its refusal.
type Columns =
    (PairingRule, BaseDefault, HeadDimDefault, PartialDefault, Option<RotaryKey>, LayerRule);

fn columns(f: &Family) -> Columns {
    (f.pairing, f.base, f.head_dim, f.partial, f.rotary_key, f.layers)
}

fn rows_where(keep: impl Fn(&Family) -> bool) -> Vec<&'static str> {
    families::all().iter().filter(|f| keep(f)).map(|f| f.model_type).collect()
}

#[test]
fn rows_are_sorted_unique_and_found_by_lookup() {
    let names: Vec<_> = families::all().iter().map(|f| f.model_type).collect();
    assert!(names.windows(2).all(|w| w[0] < w[1]), "rows out of order or repeated");
    for f in families::all() {
        assert!(
            !f.model_type.is_empty()
                && f.model_type
                    .bytes()
                    .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-')),
            "{:?}",
            f.model_type
        );
        assert_eq!(families::lookup(f.model_type), Some(f));
        // A row that says nothing the generic one does not would be dead weight.
        let generic = (columns(f), f.refusal) == (columns(&Family::GENERIC), None);
        assert!(!generic, "{}", f.model_type);
    }
    for unknown in ["", "llama", "LLAMA", "glm4 ", "zzz"] {
        assert_eq!(families::lookup(unknown), None, "{unknown:?}");
    }
}

/// A refused family is refused before any other column is read: a default there could never
/// be reached (the issue found `deepseek_v4` with a head dim and `inkling2_text`, `kimi_linear`,
/// `musicflamingo` with unsettled ones).
#[test]
fn refused_families_carry_nothing_else() {
    for f in families::all().iter().filter(|f| f.refusal.is_some()) {
        assert_eq!(
            columns(f),
            columns(&Family::GENERIC),
            "{} is refused, yet carries",
            f.model_type
        );
        if let Some(Refusal::Rotation(why)) = f.refusal {
            assert!(!why.is_empty() && !why.contains('\n'), "{}", f.model_type);
        }
    }
}

#[test]
fn defaults_are_in_range() {
    for f in families::all() {
        let m = f.model_type;
        match f.head_dim {
            HeadDimDefault::Settled(d) | HeadDimDefault::Unsettled(d) => {
                assert!((2..=MAX_HEAD_DIM).contains(&d) && d % 2 == 0, "{m}: head dim {d}");
            }
            HeadDimDefault::Computed | HeadDimDefault::UnsettledDoubled => {}
        }
        if let BaseDefault::Class(c) = f.base {
            assert!(c.base.is_finite() && c.base > 1.0, "{m}: base {}", c.base);
            match c.legacy {
                // A class default of 10000 is the generic one, which needs no row.
                None => assert_ne!(c.base, 10000.0, "{m}"),
                Some(l) => {
                    assert!(
                        ROPE_TYPES.contains(&l.rope_type) && l.rope_type != "default",
                        "{m}: {}",
                        l.rope_type
                    );
                    assert!(l.factor >= 1.0 && l.base.is_finite() && l.base > 1.0, "{m}: {l:?}");
                }
            }
        }
        let factor = |f: f64| f > 0.0 && f <= 1.0;
        if let PartialDefault::Reads { legacy, given, .. } = f.partial {
            assert!(factor(legacy) && factor(given), "{m}: {legacy}, {given}");
        }
        if let LayerRule::NoCopy(f) = f.layers {
            assert!(factor(f), "{m}: {f}");
        }
    }
}

/// Columns that only mean something together.
#[test]
fn dependent_columns_agree() {
    for f in families::all() {
        let m = f.model_type;
        // A family whose default layers read their own entry's factor is one whose default
        // RoPE reads the factor.
        if matches!(f.layers, LayerRule::NoCopy(_) | LayerRule::NeoMme) {
            assert!(matches!(f.partial, PartialDefault::Reads { .. }), "{m}");
        }
        // Only a family whose default reads the factor can ignore a top-level one.
        if let PartialDefault::Reads { top_level: false, legacy, given } = f.partial {
            assert_eq!(legacy, given, "{m}: the class's factor replaces the top-level one");
        }
        // A family-specific width key and a default over the whole head would contradict.
        if f.rotary_key.is_some() {
            assert_ne!(f.partial, PartialDefault::FullHead, "{m}");
        }
    }
}

/// The reader's messages name the families that read `rotary_pct` and `rotary_dim`; the table
/// must say the same.
#[test]
fn the_families_the_messages_name_are_the_tables() {
    let by_key = |k| rows_where(|f| f.rotary_key == Some(k));
    assert_eq!(by_key(RotaryKey::RotaryPct), ["gpt_neox", "gpt_neox_japanese"]);
    assert_eq!(by_key(RotaryKey::RotaryDim), ["codegen", "gptj", "minimax_m2"]);
    assert_eq!(rows_where(|f| f.base == BaseDefault::AttnConfig), ["dbrx"]);
    assert_eq!(
        rows_where(|f| matches!(f.layers, LayerRule::PerLayerHead { gemma4: true })),
        ["gemma4_text", "gemma4_unified_text"]
    );
    assert_eq!(
        rows_where(|f| f.pairing == PairingRule::Always(posenc::rope::Pairing::Neox)),
        ["hy_v4", "minicpm3"]
    );
}

/// The absolute-position families `table`/`encode --config` serve are refused as RoPE.
#[test]
fn absolute_position_families_are_not_rotary() {
    let absolute =
        model_config::SINUSOID_MODEL_TYPES.iter().chain(model_config::LEARNED_OFFSET_MODEL_TYPES);
    for m in absolute {
        let row = families::lookup(m).map(|f| f.refusal);
        assert_eq!(row, Some(Some(Refusal::NotRotary)), "{m}");
    }
}

/// A multimodal config whose language model has no RoPE (BLIP-2 with OPT, whose positions are a
/// learned table) is refused by the language model's `model_type`, not read as a default RoPE
/// over its head dims.
#[test]
fn a_language_model_without_rope_under_text_config_is_refused() {
    let blip2 = r#"{"model_type": "blip-2", "num_query_tokens": 32,
        "text_config": {"model_type": "opt", "hidden_size": 2560, "num_attention_heads": 32}}"#;
    match RopeSpec::from_hf_config(blip2, None) {
        Err(Error::ModelFamily { model_type, .. }) => assert_eq!(model_type, "opt"),
        other => panic!("{other:?}"),
    }
}
