//! The family table (`posenc::rope::families`) checked against itself: sorted and found by
//! its lookup, no row whose columns contradict each other or can never be read, and the
//! families the reader's messages name the ones the table says.

use posenc::rope::families::{
    self, BaseDefault, Family, HeadDimDefault, LayerRule, ModuleLayout, PairingRule,
    PartialDefault, Refusal, RotaryKey,
};
use posenc::rope::{MAX_HEAD_DIM, ROPE_TYPES, RopeSpec};
use posenc::{Error, model_config};

/// A row's defaults and rules: every column but its name and its refusal.
type Columns = (
    PairingRule,
    BaseDefault,
    HeadDimDefault,
    PartialDefault,
    Option<RotaryKey>,
    LayerRule,
    &'static [&'static str],
    Option<(&'static str, &'static str)>,
);

fn columns(f: &Family) -> Columns {
    let keys = (f.attention_keys, f.rope_when);
    (f.pairing, f.base, f.head_dim, f.partial, f.rotary_key, f.layers, keys.0, keys.1)
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
        let generic = (columns(f), f.refusal, f.module, f.mrope, f.own_base)
            == (columns(&Family::GENERIC), None, Family::GENERIC.module, None, None);
        assert!(!generic, "{}", f.model_type);
    }
    for unknown in ["", "llama", "LLAMA", "glm4 ", "zzz"] {
        assert_eq!(families::lookup(unknown), None, "{unknown:?}");
    }
}

#[test]
fn composite_text_types_are_sorted_and_found() {
    let composites: Vec<_> = families::text_configs().iter().map(|(c, _)| *c).collect();
    assert!(composites.windows(2).all(|w| w[0] < w[1]), "out of order or repeated");
    for &(composite, text) in families::text_configs() {
        assert_ne!(composite, text);
        assert_eq!(families::text_model_type(composite), Some(text));
    }
    assert_eq!(families::text_model_type("llama"), None);
}

/// A `text_config` without a `model_type` reads as its composite's default language model,
/// as transformers builds it: Aya Vision's is Cohere 2 (interleaved pairs, a per-pair
/// module), BLIP-2's OPT (learned positions), Llama 4's its text model.
#[test]
fn a_text_config_without_model_type_is_its_composites_default() {
    let text = r#"{"head_dim": 128, "num_attention_heads": 32, "hidden_size": 4096}"#;
    let composite = |t: &str| format!(r#"{{"model_type": "{t}", "text_config": {text}}}"#);
    let aya = composite("aya_vision");
    let (model_type, family) = families::of_hf_config(&aya).unwrap();
    assert_eq!((model_type.as_str(), family.module), ("cohere2", ModuleLayout::Pairs));
    let spec = RopeSpec::from_hf_config(&aya, None).unwrap();
    assert_eq!(spec.pairing(), posenc::rope::Pairing::Gptj);
    let llava = RopeSpec::from_hf_config(&composite("llava"), None).unwrap();
    assert_eq!(llava.pairing(), posenc::rope::Pairing::Neox);
    let blip2 = RopeSpec::from_hf_config(&composite("blip-2"), None).unwrap_err();
    assert!(matches!(&blip2, Error::ModelFamily { .. }), "{blip2}");
    assert!(blip2.to_string().contains("opt"), "{blip2}");
    // Llama 4's text model's base is 500000 where the config has none (the generic 10000),
    // which posenc refuses to guess, as for a text_config that names it.
    let llama4 = RopeSpec::from_hf_config(&composite("llama4"), None).unwrap_err();
    assert!(llama4.to_string().contains("\"llama4_text\" is not at 10000"), "{llama4}");
    // A composite posenc has no default for keeps its own type (as before).
    let (model_type, _) = families::of_hf_config(&composite("glm4")).unwrap();
    assert_eq!(model_type, "glm4");
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

// The docs: docs/families.md is the table, rendered; docs/rope.md's lists of families are
// rendered into its marked regions, and it states no count of its own.

const BLESS: &str = "POSENC_BLESS";

fn doc_path(page: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs").join(page)
}

/// Compares a page with what the table renders, or rewrites it under `POSENC_BLESS=1`.
fn check_page(page: &str, want: &str) {
    let path = doc_path(page);
    let got = std::fs::read_to_string(&path).unwrap_or_default();
    if got == want {
        return;
    }
    if std::env::var(BLESS).is_ok_and(|v| v == "1") {
        std::fs::write(&path, want).unwrap();
        return;
    }
    let line = got.lines().zip(want.lines()).position(|(g, w)| g != w);
    panic!(
        "docs/{page} is not what the family table renders (first differing line {}); after \
         changing the table run `{BLESS}=1 cargo test --test it -- rope_family_table` and \
         commit the page",
        line.map_or_else(|| "past the end".to_string(), |l| (l + 1).to_string())
    );
}

fn number(v: f64) -> String {
    format!("{v}")
}

fn pairing_cell(f: &Family) -> String {
    match f.pairing {
        PairingRule::Config => String::new(),
        PairingRule::Always(posenc::rope::Pairing::Gptj) => "`gptj`".into(),
        PairingRule::Always(posenc::rope::Pairing::Neox) => "`neox` (MLA halves)".into(),
    }
}

fn base_cell(f: &Family) -> String {
    let cell = base_default_cell(f);
    match f.own_base {
        None => cell,
        Some(own) if cell.is_empty() => {
            format!("legacy form: {} whatever `rope_theta`", number(own))
        }
        Some(own) => format!("{cell}; legacy form: {} whatever `rope_theta`", number(own)),
    }
}

fn base_default_cell(f: &Family) -> String {
    match f.base {
        BaseDefault::Generic => String::new(),
        BaseDefault::Class(c) => match c.legacy {
            None => number(c.base),
            Some(l) => format!(
                "{}; legacy form: {} (factor {}) over {}",
                number(c.base),
                l.rope_type,
                number(l.factor),
                number(l.base)
            ),
        },
        BaseDefault::AttnConfig => "10000; `attn_config.rope_theta` (4.x) only if 10000".into(),
    }
}

fn head_cell(f: &Family) -> String {
    match f.head_dim {
        HeadDimDefault::Computed => String::new(),
        HeadDimDefault::Settled(d) => d.to_string(),
        HeadDimDefault::Unsettled(d) => format!("unsettled ({d} in 5.23)"),
        HeadDimDefault::UnsettledDoubled => "unsettled (2 × hidden / heads in 5.23)".into(),
    }
}

fn partial_cell(f: &Family) -> String {
    let mut cell = match f.partial {
        PartialDefault::Generic => String::new(),
        PartialDefault::FullHead => "ignored (whole head)".into(),
        PartialDefault::Reads { legacy, given, top_level } => {
            let mut c = if legacy == given {
                format!("read, else {}", number(legacy))
            } else {
                format!("read, else {} (legacy form) or {}", number(legacy), number(given))
            };
            if !top_level {
                c.push_str("; top-level ignored");
            }
            c
        }
    };
    if let Some(key) = f.rotary_key {
        let key = match key {
            RotaryKey::RotaryPct => "`rotary_pct`",
            RotaryKey::RotaryDim => "`rotary_dim`",
        };
        cell = if cell.is_empty() { key.to_string() } else { format!("{cell}; {key}") };
    }
    cell
}

fn layers_cell(f: &Family) -> String {
    match f.layers {
        LayerRule::Generic => String::new(),
        LayerRule::Gemma3 => "Gemma 3: sliding `rope_local_base_freq` (1e4), full 1e6".into(),
        LayerRule::Olmo3 => "OLMo 3: full 5e5 + scaling, sliding 5e5".into(),
        LayerRule::Lfm3 => "LFM3: 1e6; `rope_parameters` required".into(),
        LayerRule::ModernBert => "ModernBERT: `global_rope_theta`, `local_rope_theta`".into(),
        LayerRule::NoCopy(f) => {
            format!("nothing copied in; default layers' factor {}", number(f))
        }
        LayerRule::NeoMme => "nothing copied in; factor 0.25 full, 1 sliding".into(),
        LayerRule::OwnDefaults { one_object } => format!(
            "its class's own bases per layer type; `rope_parameters` required, each with \
             `rope_theta`{}",
            if one_object { " (one object: every layer's)" } else { "" }
        ),
        LayerRule::Step3p5 => "Step 3.5: scaling on full layers only".into(),
        LayerRule::PerLayerHead { gemma4: false } => "head dim per layer type".into(),
        LayerRule::PerLayerHead { gemma4: true } => {
            "head dim per layer type; full layers `proportional`".into()
        }
    }
}

fn scaling_cell(f: &Family) -> String {
    match f.longrope_only {
        None => String::new(),
        Some(original) => format!(
            "longrope only (`su`, `yarn` read as it); original length top-level, else {original}"
        ),
    }
}

fn attention_keys_cell(f: &Family) -> String {
    f.attention_keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
}

fn refusal_cell(f: &Family) -> String {
    match f.refusal {
        None => match f.rope_when {
            Some((key, value)) => format!("unless `{key}` is `{value}`"),
            None => String::new(),
        },
        Some(Refusal::NotRotary) => "not rotary".into(),
        Some(Refusal::Rotation(why)) => why.to_string(),
    }
}

/// The rotary module's layout, where it is not `cat(freqs, freqs)` (a `neox` cache), and a
/// multimodal RoPE's axes.
fn module_cell(f: &Family) -> String {
    let layout = match f.module {
        ModuleLayout::Halves => String::new(),
        ModuleLayout::Pairs => "per pair (`gptj` cache)".into(),
        ModuleLayout::Other(what) => format!("no drop-in: {what}"),
    };
    let Some((m, [t, h, w])) = f.mrope else { return layout };
    let mrope = format!("M-RoPE ({}, default section [{t}, {h}, {w}])", m.name());
    if layout.is_empty() { mrope } else { format!("{layout}; {mrope}") }
}

fn count(keep: impl Fn(&Family) -> bool) -> usize {
    families::all().iter().filter(|f| keep(f)).count()
}

/// docs/families.md: the counts and one table row per family.
fn families_page() -> String {
    use posenc::rope::Pairing::{Gptj, Neox};
    let words = |text: &str| text.split(' ').map(String::from).collect::<Vec<_>>();
    let mut page = String::from(
        "# Model families\n\n[posenc](../README.md) › [RoPE](rope.md) › Model families\n\n",
    );
    page.push_str(&wrap(
        "",
        "",
        &words(
            "<!-- Generated from posenc::rope::families by tests/it/cpu/rope_family_table.rs: \
             after changing the table, run POSENC_BLESS=1 cargo test --test it -- \
             rope_family_table. -->",
        ),
        92,
    ));
    page.push('\n');
    let intro = "What `RopeSpec::from_hf_config` knows of each Hugging Face `model_type` (the one \
        a \
         config carries after any `text_config` swap), one row per family, as transformers \
         5.23 builds it (`posenc::rope::families`; [RoPE, family by \
         family](rope.md#family-by-family) says what each column means). A `model_type` not \
         listed, and an empty cell, read as transformers' generic RoPE: `neox` pairing unless \
         `rope_interleave` says `gptj`, base 10000 when `rope_theta` is absent, head dim \
         `hidden_size / num_attention_heads`, and a `partial_rotary_factor` other than 1 \
         refused beside a `default` RoPE. `scripts/families.py` re-derives the class \
         defaults from an installed transformers (see the README's \"The family table\").";
    page.push_str(&wrap("", "", &words(intro), 92));
    page.push('\n');
    let lines = [
        format!("{} rows.", families::all().len()),
        format!(
            "Pairing: {} always `gptj`, {} always `neox`.",
            count(|f| f.pairing == PairingRule::Always(Gptj)),
            count(|f| f.pairing == PairingRule::Always(Neox))
        ),
        format!(
            "Base: {} families whose config class defaults it otherwise (refused when \
             absent), {} read from `attn_config`.",
            count(|f| matches!(f.base, BaseDefault::Class(_))),
            count(|f| f.base == BaseDefault::AttnConfig)
        ),
        format!(
            "Head dim: {} class defaults the same in transformers 4.57 to 5.23, {} that \
             differ between them (refused unless the head dim is passed).",
            count(|f| matches!(f.head_dim, HeadDimDefault::Settled(_))),
            count(|f| {
                matches!(
                    f.head_dim,
                    HeadDimDefault::Unsettled(_) | HeadDimDefault::UnsettledDoubled
                )
            })
        ),
        format!(
            "`partial_rotary_factor` and a `default` RoPE: {} families whose default reads \
             it, {} whose default spans the whole head; {} with a width key of their own.",
            count(|f| matches!(f.partial, PartialDefault::Reads { .. })),
            count(|f| f.partial == PartialDefault::FullHead),
            count(|f| f.rotary_key.is_some())
        ),
        format!(
            "Layer types: {} families with a rule of their own.",
            count(|f| f.layers != LayerRule::Generic)
        ),
        format!(
            "Scaling: {} families whose config class takes longrope alone and fills in its \
             original length (Phi-3's).",
            count(|f| f.longrope_only.is_some())
        ),
        format!(
            "Attention keys: {} families whose RoPE parameters carry keys of their attention, \
             read past.",
            count(|f| !f.attention_keys.is_empty())
        ),
        format!(
            "Rotary module: {} whose module returns each frequency repeated per pair (a \
             `gptj` cache stands in for it), {} whose module returns another shape (no \
             drop-in cache); {} multimodal RoPEs (M-RoPE: `rope-cache` gives the cache by \
             position and each frequency's axis, `rope` rotates with a position per axis).",
            count(|f| f.module == ModuleLayout::Pairs),
            count(|f| matches!(f.module, ModuleLayout::Other(_))),
            count(|f| f.mrope.is_some())
        ),
        format!(
            "Refused: {} whose positions are not rotary, {} whose rotation posenc does not \
             compute.",
            count(|f| f.refusal == Some(Refusal::NotRotary)),
            count(|f| matches!(f.refusal, Some(Refusal::Rotation(_))))
        ),
    ];
    for line in lines {
        page.push_str(&wrap("- ", "  ", &words(&line), 92));
    }
    page.push_str(
        "\n| `model_type` | pairing | base when absent | head dim when absent | \
         `partial_rotary_factor` | layer types | scaling | attention keys | rotary module | \
         refused |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for f in families::all() {
        let cells = [
            format!("`{}`", f.model_type),
            pairing_cell(f),
            base_cell(f),
            head_cell(f),
            partial_cell(f),
            layers_cell(f),
            scaling_cell(f),
            attention_keys_cell(f),
            module_cell(f),
            refusal_cell(f),
        ];
        page.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    page.push_str(
        "\n## Composite configs\n\nA multimodal config's `text_config` without a \
         `model_type` of its own is read as the one transformers gives it, its class's default \
         language model (`posenc::rope::families::text_model_type`, transformers 5.24); any \
         other composite's, as its own `model_type`, except where the class builds its own \
         text class whatever the `text_config` names (`families::text_class_is_fixed`): \
         there it is read as that class.\n\n| composite `model_type` | its `text_config`'s | \
         whatever its `model_type` |\n|---|---|---|\n",
    );
    for (composite, text) in families::text_configs() {
        let fixed = if families::text_class_is_fixed(composite) { "yes" } else { "" };
        page.push_str(&format!("| `{composite}` | `{text}` | {fixed} |\n"));
    }
    page
}

#[test]
fn docs_families_page_is_the_table() {
    check_page("families.md", &families_page());
}

/// `words` joined by spaces into lines of at most `width` characters, the first starting with
/// `first`, the others with `rest`.
fn wrap(first: &str, rest: &str, words: &[String], width: usize) -> String {
    let mut out = String::new();
    let mut line = first.to_string();
    let mut empty = true;
    for w in words {
        if !empty && line.len() + 1 + w.len() > width {
            out.push_str(&line);
            out.push('\n');
            line = rest.to_string();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(w);
        empty = false;
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// `names` as a sentence's list: "`a`, `b` and `c`".
fn listed(names: &[&str]) -> Vec<String> {
    let mut words: Vec<String> = names.iter().map(|n| format!("`{n}`,")).collect();
    if let Some(last) = words.last_mut() {
        last.pop();
    }
    if words.len() > 1 {
        let n = words.len();
        words[n - 2].pop();
        words.insert(n - 1, "and".into());
    }
    words
}

/// The body of docs/rope.md's region `name`, rendered from the table.
fn rope_region(name: &str) -> String {
    const WIDTH: usize = 92;
    match name {
        "partial-reads" => {
            // (legacy, given, top_level) and the families with those defaults.
            type Group = ((f64, f64, bool), Vec<&'static str>);
            let mut groups: Vec<Group> = Vec::new();
            for f in families::all() {
                if let PartialDefault::Reads { legacy, given, top_level } = f.partial {
                    let key = (legacy, given, top_level);
                    match groups.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, names)) => names.push(f.model_type),
                        None => groups.push((key, vec![f.model_type])),
                    }
                }
            }
            groups.sort_by(|a, b| {
                (a.0.0, a.0.1, !a.0.2).partial_cmp(&(b.0.0, b.0.1, !b.0.2)).unwrap()
            });
            let mut out = String::new();
            for ((legacy, given, top_level), names) in groups {
                let mut label = if legacy == given {
                    number(legacy)
                } else {
                    format!(
                        "{} in the legacy form without `rope_scaling` (the class's own \
                            `rope_parameters`), {} beside given ones or a `rope_scaling`, which \
                            takes their place",
                        number(legacy),
                        number(given)
                    )
                };
                if !top_level {
                    label.push_str(", a top-level factor ignored");
                }
                let mut words: Vec<String> = label.split(' ').map(String::from).collect();
                if let Some(last) = words.last_mut() {
                    last.push(':');
                }
                words.extend(listed(&names));
                out.push_str(&wrap("    - ", "      ", &words, WIDTH));
            }
            out
        }
        "full-head" => {
            let names = rows_where(|f| f.partial == PartialDefault::FullHead);
            let mut words = listed(&names);
            if let Some(last) = words.last_mut() {
                last.push('.');
            }
            wrap("    ", "    ", &words, WIDTH)
        }
        other => panic!("docs/rope.md names a region {other:?} the test does not render"),
    }
}

/// docs/rope.md with each `<!-- families:NAME -->` ... `<!-- /families -->` region rendered.
fn rope_page(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        out.push_str(line);
        out.push('\n');
        let Some(name) = line.trim().strip_prefix("<!-- families:") else { continue };
        let name = name.strip_suffix(" -->").expect("a region marker ends with ' -->'");
        out.push_str(&rope_region(name));
        let end = lines.by_ref().find(|l| l.trim() == "<!-- /families -->");
        let end = end.unwrap_or_else(|| panic!("region {name} has no end marker"));
        out.push_str(end);
        out.push('\n');
    }
    out
}

#[test]
fn docs_rope_lists_are_rendered_from_the_table() {
    let text = std::fs::read_to_string(doc_path("rope.md")).unwrap();
    let rendered = rope_page(&text);
    assert!(rendered.contains("<!-- families:partial-reads -->"));
    check_page("rope.md", &rendered);
}

/// docs/rope.md states no count of families of its own (docs/families.md has them), and its
/// list of the families refused by `model_type` is the table's.
#[test]
fn docs_rope_counts_nothing_and_names_the_refused_families() {
    let text = std::fs::read_to_string(doc_path("rope.md")).unwrap();
    let words: Vec<&str> = text.split_whitespace().collect();
    for w in words.windows(2) {
        let counted = ["families", "`model_type`s", "families,", "model_types"];
        assert!(
            !(w[0].bytes().all(|b| b.is_ascii_digit()) && counted.contains(&w[1])),
            "docs/rope.md counts \"{} {}\" by hand: say it in docs/families.md's counts",
            w[0],
            w[1]
        );
    }
    let start = text.find("- **Refused by `model_type`**").expect("the refused families' bullet");
    let end = start + text[start..].find("\n- ").unwrap();
    let named: std::collections::BTreeSet<&str> = text[start..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| families::lookup(t).is_some())
        .collect();
    let refused: std::collections::BTreeSet<&str> =
        rows_where(|f| matches!(f.refusal, Some(Refusal::Rotation(_)))).into_iter().collect();
    assert_eq!(named, refused);
}
