//! A RoPE configuration read from a Hugging Face model's `config.json`, as transformers
//! builds its rotary module from it (`modeling_rope_utils`), legacy (`rope_theta`,
//! `rope_scaling`) and transformers 5 (`rope_parameters`) forms alike.

use serde_json::{Map, Value};

use super::families::{
    self, BaseDefault, ClassBase, Family, HeadDimDefault, LayerRule, PairingRule,
};
use super::families::{Mrope, PartialDefault, Refusal, RotaryKey};
use super::scaling::{excerpt, invalid, is_non_finite, parse_json, whole_number};
use super::{DEFAULT_BASE, Pairing, RopeSpec, Scaling};
use crate::error::{Error, Result, float, json_number};

/// Whether a family's config class copies no top-level value into the layer types'
/// parameters ([`LayerRule::NoCopy`], [`LayerRule::NeoMme`]).
fn copies_nothing(family: &Family) -> bool {
    matches!(family.layers, LayerRule::NoCopy(_) | LayerRule::NeoMme)
}

/// The factor a layer of a family whose config class copies nothing into the layer types
/// reads when its entry has none: the row's ([`LayerRule::NoCopy`]: MiMo-V2-Flash's
/// modeling code defaults it to 0.334), or NeoMME's, whose config class fills 0.25
/// (full_attention) and 1 (sliding_attention) in; its other layer types get none
/// (transformers fails on them).
fn no_copy_default_factor(family: &Family, layer_type: Option<&str>) -> Result<f64> {
    Ok(match (family.layers, layer_type) {
        (LayerRule::NoCopy(f), _) => f,
        (LayerRule::NeoMme, Some("full_attention")) => 0.25,
        (LayerRule::NeoMme, Some("sliding_attention")) => 1.0,
        (LayerRule::NeoMme, other) => {
            return Err(invalid(
                "layer_type",
                other.map_or_else(|| "missing".to_string(), |t| format!("{t:?}")),
                "full_attention or sliding_attention (NeoMME's config class has no default \
                 partial_rotary_factor for another)",
            ));
        }
        _ => 1.0,
    })
}

/// NeoMME's base for a layer type whose entry has none: the top-level `rope_theta`, else 1e6
/// (full_attention) or 1e4 (sliding_attention), as its config class fills them in.
fn neomme_theta(config: &Object, layer_type: Option<&str>, key: &str) -> Result<f64> {
    if let Some(top) = number(config, "rope_theta")? {
        return Ok(top);
    }
    match layer_type {
        Some("full_attention") => Ok(1e6),
        Some("sliding_attention") => Ok(1e4),
        _ => Err(invalid(
            format!("{key}.rope_theta"),
            "missing",
            "a number (NeoMME's config class has a default base for full_attention and \
             sliding_attention only)",
        )),
    }
}

/// `global_head_dim` when the config omits it (these families' class default).
const GLOBAL_HEAD_DIM: u64 = 512;

/// The head dim a [`LayerRule::PerLayerHead`] layer of `layer_type` has: its overrides'
/// `head_dim` in `per_layer_config`, else `head_dim`; without `per_layer_config`,
/// `global_head_dim` (512) for full_attention and `head_dim` otherwise. What transformers
/// fails on (an index past the layers, layers of one type with different overrides, no
/// `layer_types` to place the indices) and what versions read differently (a
/// `global_head_dim` beside `per_layer_config` that disagrees with it; `per_layer_config`
/// null, which 5.23 reads as no overrides, not as absent) is refused.
fn per_layer_head_dim(config: &Object, layer_type: &str, head_dim: u64) -> Result<u64> {
    let global = whole(config, "global_head_dim")?;
    let (dim, key) = match config.get("per_layer_config") {
        None => match layer_type {
            "full_attention" => (global.unwrap_or(GLOBAL_HEAD_DIM), "global_head_dim".to_string()),
            _ => return Ok(head_dim),
        },
        Some(Value::Object(overrides)) => {
            let dim = layer_override_head_dim(config, overrides, layer_type)?;
            let given = dim.as_ref().map_or(head_dim, |(d, _)| *d);
            if layer_type == "full_attention"
                && let Some(g) = global
                && g != given
            {
                return Err(invalid(
                    "global_head_dim",
                    format!("{g} (per_layer_config gives full_attention {given})"),
                    "absent beside per_layer_config, or the same: transformers 5.23 ignores it \
                     there, earlier 5.x read it",
                ));
            }
            match dim {
                Some((d, key)) => (d, key),
                None => return Ok(head_dim),
            }
        }
        Some(other) => {
            return Err(invalid(
                "per_layer_config",
                excerpt(other),
                "a JSON object of layer indices, or absent (transformers 5.23 reads null as no \
                 overrides, so the full layers would drop global_head_dim)",
            ));
        }
    };
    if !(2..=u64::from(super::MAX_HEAD_DIM)).contains(&dim) || dim % 2 != 0 {
        return Err(invalid(
            key,
            dim.to_string(),
            format!(
                "an even number in 2..={} (the head dim of the {layer_type} layers)",
                super::MAX_HEAD_DIM
            ),
        ));
    }
    Ok(dim)
}

/// The `head_dim` `per_layer_config` gives the layers of `layer_type`, with the key it was
/// read under, if it gives one.
fn layer_override_head_dim(
    config: &Object,
    overrides: &Object,
    layer_type: &str,
) -> Result<Option<(u64, String)>> {
    let types = match get(config, "layer_types") {
        Some(Value::Array(types)) if types.iter().all(Value::is_string) => types,
        other => {
            return Err(invalid(
                "layer_types",
                other.map_or_else(|| "missing".to_string(), excerpt),
                "a list of layer types: per_layer_config's keys are layer indices",
            ));
        }
    };
    let mut by_layer = vec![None; types.len()];
    for (key, value) in overrides {
        let index = key
            .parse::<usize>()
            .ok()
            .filter(|&i| i < types.len() && key.bytes().all(|b| b.is_ascii_digit()));
        let (Some(i), Value::Object(o)) = (index, value) else {
            return Err(invalid(
                "per_layer_config",
                format!("{key:?}: {}", excerpt(value)),
                format!("layer indices in 0..{} mapped to JSON objects", types.len()),
            ));
        };
        if let Some(k) = ["rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor"]
            .iter()
            .find(|k| o.contains_key(**k))
        {
            return Err(invalid(
                format!("per_layer_config.{key}.{k}"),
                excerpt(&o[*k]),
                "absent: posenc reads RoPE parameters per layer type, not per layer",
            ));
        }
        if let Some((earlier, _)) = by_layer[i] {
            // "0" and "00": one layer twice, whichever transformers' int() keeps.
            return Err(invalid(
                "per_layer_config",
                format!("{earlier:?} and {key:?}, both layer {i}"),
                "one key per layer index",
            ));
        }
        by_layer[i] = Some((key.as_str(), o));
    }
    // transformers builds every layer type's RoPE at once and raises when the layers of a
    // type carry different overrides.
    let empty = Object::new();
    let mut wanted = None;
    for (i, t) in types.iter().enumerate() {
        let t = t.as_str().unwrap_or_default();
        let first = types.iter().position(|u| u.as_str() == Some(t)).unwrap_or(i);
        let of = |j: usize| by_layer[j].map_or(&empty, |(_, o)| o);
        if of(i) != of(first) {
            return Err(invalid(
                "per_layer_config",
                format!("layer {i} ({t}) differs from layer {first}"),
                format!("the same overrides for every {t} layer (transformers raises otherwise)"),
            ));
        }
        if t == layer_type && wanted.is_none() {
            wanted = Some(i);
        }
    }
    let Some(i) = wanted else {
        return Err(invalid(
            "layer_type",
            format!("{layer_type:?}"),
            "a type in layer_types (per_layer_config is read by layer index)",
        ));
    };
    let Some((key, o)) = by_layer[i] else { return Ok(None) };
    let field = format!("per_layer_config.{key}");
    Ok(whole(o, "head_dim").map_err(under(&field))?.map(|d| (d, format!("{field}.head_dim"))))
}

/// Scaling types that read the model's `max_position_embeddings` (llama3 in place of a
/// missing `original_max_position_embeddings`).
const READS_MAX: [&str; 4] = ["dynamic", "yarn", "longrope", "llama3"];

type Object = Map<String, Value>;

fn get<'a>(map: &'a Object, key: &str) -> Option<&'a Value> {
    map.get(key).filter(|v| !v.is_null())
}

fn number(map: &Object, key: &str) -> Result<Option<f64>> {
    match get(map, key) {
        None => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(v) if v.is_finite() => Ok(Some(v)),
            _ => Err(invalid(key, json_number(n), "a finite number")),
        },
        Some(other) => Err(invalid(key, excerpt(other), "a finite number")),
    }
}

/// What [`whole`] reads: an integer of u64, or a float with no fraction up to 2^53 (where
/// float64 stops holding every whole number).
const WHOLE_U64: &str =
    "a whole number in 1..=18446744073709551615 (written with a fraction or exponent: 1..=2^53)";

fn whole(map: &Object, key: &str) -> Result<Option<u64>> {
    match get(map, key) {
        None => Ok(None),
        // A whole number written as a float (128.0) is one, as Python takes it and as the
        // scaling's whole-number fields read it.
        Some(Value::Number(n)) => match n.as_u64().or_else(|| n.as_f64().and_then(whole_number)) {
            Some(v) if v >= 1 => Ok(Some(v)),
            _ => Err(invalid(key, json_number(n), WHOLE_U64)),
        },
        Some(other) => Err(invalid(key, excerpt(other), WHOLE_U64)),
    }
}

/// Prefixes the field of a scaling error with the key it was read under.
fn under(prefix: &str) -> impl Fn(Error) -> Error + '_ {
    move |e| match e {
        Error::RopeScaling { field, value, allowed } => {
            Error::RopeScaling { field: format!("{prefix}.{field}"), value, allowed }
        }
        other => other,
    }
}

/// Where the frequency base and scaling come from: one `rope_parameters` object, or the
/// legacy top-level fields.
struct Rope {
    theta: Option<f64>,
    /// The scaling object and the key it was read under.
    scaling: Option<(Object, String)>,
    partial_rotary_factor: Option<f64>,
    /// Read from one of per-layer-type `rope_parameters`.
    per_layer: bool,
    /// No `rope_parameters`: a config class fills in its own defaults.
    legacy: bool,
}

fn layer_types(per_layer: &Object) -> String {
    per_layer.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
}

/// Reads `rope_parameters` (transformers 5) or the legacy fields.
fn rope(
    config: &Object,
    layer_type: Option<&str>,
    model_type: &str,
    family: &Family,
) -> Result<Rope> {
    let modernbert = family.layers == LayerRule::ModernBert;
    if modernbert && let Some(top) = get(config, "rope_theta") {
        return Err(invalid(
            "rope_theta",
            excerpt(top),
            "absent for ModernBERT: its layers read global_rope_theta (full_attention) and \
             local_rope_theta (sliding_attention); transformers ignores rope_theta, so which base \
             was meant is a guess",
        ));
    }
    let own_defaults = matches!(family.layers, LayerRule::OwnDefaults { .. });
    if (copies_nothing(family) || family.layers == LayerRule::Lfm3 || own_defaults)
        && get(config, "rope_parameters").is_none()
    {
        return Err(invalid(
            "rope_parameters",
            "missing",
            format!(
                "one object per layer type: without them {model_type}'s config class uses its own \
                 (ignoring a top-level rope_theta or rope_scaling)"
            ),
        ));
    }
    let Some(params) = get(config, "rope_parameters") else {
        return if modernbert {
            modernbert_legacy(config, layer_type)
        } else {
            legacy(config, layer_type, family)
        };
    };
    let Value::Object(params) = params else {
        return Err(invalid("rope_parameters", excerpt(params), "a JSON object"));
    };
    if let Some(legacy) = get(config, "rope_scaling") {
        return Err(invalid(
            "rope_scaling",
            excerpt(legacy),
            "absent when rope_parameters is given (which of the two holds would be a guess)",
        ));
    }
    let is_params_key = |k: &String| matches!(k.as_str(), "rope_type" | "type" | "rope_theta");
    // One object per layer type; a null entry is one of them, refused by name if chosen.
    let per_layer = !params.is_empty()
        && !params.keys().any(is_params_key)
        && params.values().all(|v| v.is_object() || v.is_null())
        && params.values().any(Value::is_object);
    // These families' layers each read their own entry: their config classes fill in their
    // per-layer defaults beside an object of another shape (Gemma 3, OLMo 3), refuse it
    // (ModernBERT, NeoMME), replace it (Step 3.5) or keep it for the layers to fail on
    // (KeyError: MiMo-V2-Flash, Mellum, Laguna, Gemma 4). Read as every layer's RoPE it was
    // a silent wrong answer (round twelve).
    let one_object = matches!(
        family.layers,
        LayerRule::Generic | LayerRule::Lfm3 | LayerRule::OwnDefaults { one_object: true }
    );
    if !per_layer && (!one_object || (own_defaults && params.is_empty())) {
        return Err(invalid(
            "rope_parameters",
            excerpt(&Value::Object(params.clone())),
            format!(
                "one object per layer type (full_attention, sliding_attention, ...): \
                 {model_type}'s layers each read their own, and its config class does not read \
                 one object as every layer's"
            ),
        ));
    }
    // transformers 5.24 reads entries per layer type only where their keys are among the
    // layer types of a class that declares them (the config's `layer_types`, else the
    // class's own); otherwise they are one RoPE's unknown keys (a default RoPE over
    // rope_theta for Llama's, Mistral's, ... class), so a layer type's entry read here was a
    // silent wrong answer. A model type transformers does not know declares none.
    let declared = declared_layer_types(config, model_type);
    if per_layer
        && (family.layers == LayerRule::Generic || !class_layer_types(model_type).is_empty())
        && !params.keys().any(|k| declared.contains(&k.as_str()))
    {
        let declared = match declared.as_slice() {
            [] => "none".to_string(),
            some => {
                let mut unique = some.to_vec();
                unique.sort_unstable();
                unique.dedup();
                unique.join(", ")
            }
        };
        return Err(invalid(
            "rope_parameters",
            excerpt(&Value::Object(params.clone())),
            format!(
                "one object (rope_type, rope_theta, ...), or one per layer type the config \
                 declares ({declared}): transformers 5.24 reads entries per layer type \
                 only under those names, and these ({}) as one RoPE's unknown keys",
                layer_types(params)
            ),
        ));
    }
    let (params, key) = if per_layer {
        let known = layer_types(params);
        let Some(t) = layer_type else {
            return Err(invalid(
                "layer_type",
                "missing",
                format!("one of {known} (rope_parameters holds one object per layer type)"),
            ));
        };
        match params.get(t) {
            Some(Value::Object(p)) => (p, format!("rope_parameters.{t}")),
            Some(other) => {
                return Err(invalid(
                    format!("rope_parameters.{t}"),
                    excerpt(other),
                    "a JSON object (this layer type's RoPE)",
                ));
            }
            None => {
                // A layer type the config (or its class) has, without an entry: its class
                // fills one in from defaults of its own (Gemma 3's from
                // rope_local_base_freq), which posenc does not read.
                if declared.contains(&t) {
                    return Err(invalid(
                        format!("rope_parameters.{t}"),
                        "missing",
                        format!(
                            "an object beside {known}: {t} is one of the config's layer types, \
                             and without its entry {model_type}'s config class fills one in \
                             from defaults of its own, which posenc does not read"
                        ),
                    ));
                }
                return Err(invalid("layer_type", format!("{t:?}"), format!("one of {known}")));
            }
        }
    } else {
        if let Some(t) = layer_type {
            return Err(invalid(
                "layer_type",
                format!("{t:?}"),
                "absent: this config's rope_parameters is one object for every layer",
            ));
        }
        (params, "rope_parameters".to_string())
    };
    let no_copy = per_layer && copies_nothing(family);
    let theta = match number(params, "rope_theta").map_err(under(&key))? {
        Some(nested) => {
            // Two different bases: which one the model uses is a guess.
            if let Some(top) = number(config, "rope_theta")?
                && top != nested
            {
                return Err(invalid(
                    "rope_theta",
                    format!("{top} (and {nested} in {key})"),
                    format!("given once, or the same in {key}"),
                ));
            }
            Some(nested)
        }
        None if modernbert && per_layer => Some(modernbert_theta(config, layer_type)?),
        None if no_copy && family.layers == LayerRule::NeoMme => {
            Some(neomme_theta(config, layer_type, &key)?)
        }
        None if no_copy || own_defaults => {
            return Err(invalid(
                format!("{key}.rope_theta"),
                "missing",
                if no_copy {
                    format!(
                        "a number: {model_type}'s config class copies no top-level rope_theta \
                         into a layer type's parameters (transformers raises KeyError)"
                    )
                } else {
                    format!(
                        "a number: {model_type}'s config class gives a layer type its own \
                         default base, which posenc does not read"
                    )
                },
            ));
        }
        // LFM3's class fills its default base (1e6) into a single object too.
        None if per_layer || family.layers == LayerRule::Lfm3 => {
            layer_default_theta(config, family, layer_type)?
        }
        None => number(config, "rope_theta")?,
    };
    let partial_rotary_factor = number(params, "partial_rotary_factor").map_err(under(&key))?;
    // transformers 5.17+ fills a missing nested value from the top level (setdefault), so the
    // nested one wins; earlier 5.x wrote the top-level one over it. Two different values
    // read differently across versions: which was meant is a guess.
    if let (Some(nested), Some(top)) =
        (partial_rotary_factor, number(config, "partial_rotary_factor")?)
        && nested != top
    {
        return Err(invalid(
            "partial_rotary_factor",
            format!("{top} (and {nested} in {key})"),
            format!("given once, or the same in {key}"),
        ));
    }
    let mut scaling = params.clone();
    scaling.remove("rope_theta");
    scaling.remove("partial_rotary_factor");
    if get(&scaling, "rope_type").is_none() && get(&scaling, "type").is_none() {
        scaling.insert("rope_type".into(), "default".into());
    }
    Ok(Rope {
        theta,
        scaling: Some((scaling, key)),
        partial_rotary_factor,
        per_layer,
        legacy: false,
    })
}

/// The base of a per-layer-type entry without `rope_theta`, as the family's config class fills
/// it in (transformers 5.23's `convert_rope_params_to_dict`): Gemma 3's family gives
/// sliding_attention `rope_local_base_freq`, else 1e4, and full_attention the top-level
/// `rope_theta`, else 1e6; OLMo 3 gives full_attention the top-level `rope_theta`, else 5e5,
/// and sliding_attention 5e5 (it pops `rope_theta` twice: a top-level one of another value is
/// refused beside such a layer); LFM3 the top-level `rope_theta`, else 1e6; other families the
/// top-level `rope_theta` (10000 when absent, as before).
fn layer_default_theta(
    config: &Object,
    family: &Family,
    layer_type: Option<&str>,
) -> Result<Option<f64>> {
    let top = number(config, "rope_theta")?;
    Ok(match (family.layers, layer_type) {
        (LayerRule::Gemma3, Some("sliding_attention")) => {
            Some(number(config, "rope_local_base_freq")?.unwrap_or(1e4))
        }
        (LayerRule::Gemma3, Some("full_attention")) => Some(top.unwrap_or(1e6)),
        (LayerRule::Olmo3, Some("sliding_attention")) => match top {
            Some(t) if t != 5e5 => {
                return Err(invalid(
                    "rope_theta",
                    format!("{} (top level, model_type \"olmo3\")", float(t)),
                    "absent or 500000 beside a sliding_attention layer without its own: OLMo 3's \
                     config class gives it to full_attention and 500000 to sliding_attention \
                     (transformers 5.23 pops rope_theta twice), 4.x gave both rope_theta",
                ));
            }
            _ => Some(5e5),
        },
        (LayerRule::Olmo3, _) => Some(top.unwrap_or(5e5)),
        (LayerRule::Lfm3, _) => Some(top.unwrap_or(1e6)),
        _ => top,
    })
}

/// The families whose config class takes its base from `rotary_emb_base` alone.
const ROTARY_EMB_BASE: &[&str] = &["gpt_neox", "gpt_neox_japanese"];

/// The legacy form: `rope_theta` (or `rotary_emb_base`) and `rope_scaling`; Gemma 3's
/// `rope_local_base_freq` (1e4 when absent in Gemma 3's family) for its sliding-window layers,
/// and its full layers' `rope_theta` 1e6 when absent.
fn legacy(config: &Object, layer_type: Option<&str>, family: &Family) -> Result<Rope> {
    let gemma3 = family.layers == LayerRule::Gemma3;
    let model_type = get(config, "model_type").and_then(Value::as_str).unwrap_or("");
    let theta = match number(config, "rope_theta")? {
        // GPT-NeoX's classes read rotary_emb_base (10000 when absent) and ignore rope_theta
        // (transformers 5.24; some 4.x read it): one that disagrees is a guess.
        Some(t) if ROTARY_EMB_BASE.contains(&model_type) => {
            let base = number(config, "rotary_emb_base")?.unwrap_or(DEFAULT_BASE);
            if t != base {
                return Err(invalid(
                    "rope_theta",
                    float(t),
                    format!(
                        "absent, or rotary_emb_base's {}: {model_type}'s config class reads \
                         rotary_emb_base (10000 when absent) and ignores rope_theta",
                        float(base)
                    ),
                ));
            }
            Some(t)
        }
        Some(t) => Some(t),
        None if gemma3 => Some(1e6),
        None => number(config, "rotary_emb_base")?,
    };
    let scaling = match get(config, "rope_scaling") {
        None => None,
        Some(Value::Object(s)) => {
            let mut s = s.clone();
            // transformers 5 reads rope_scaling as rope_parameters, its rope_theta too (4.x
            // ignored it): one equal to the top-level rope_theta is read by both.
            if let Some(inner) = number(&s, "rope_theta").map_err(under("rope_scaling"))? {
                if theta != Some(inner) {
                    return Err(invalid(
                        "rope_scaling.rope_theta",
                        float(inner),
                        match theta {
                            Some(t) => format!(
                                "absent, or {} {}: transformers 5 reads it in rope_theta's \
                                 place, 4.x ignores it",
                                if get(config, "rope_theta").is_some() {
                                    "the top-level rope_theta's"
                                } else if get(config, "rotary_emb_base").is_some() {
                                    "rotary_emb_base's"
                                } else {
                                    "the class's base"
                                },
                                float(t)
                            ),
                            None => "absent, or beside a top-level rope_theta of the same value: \
                                     transformers 5 reads it, 4.x takes the class's base"
                                .to_string(),
                        },
                    ));
                }
                s.remove("rope_theta");
            }
            // transformers 5 reads rope_scaling as rope_parameters, this factor too; 4.x
            // ignored it there (an unknown key) and read the top-level one alone: the two
            // agree where the top-level one is the same and the family reads it (it is
            // then taken out, the top-level one read). (proportional, a type 4.x did not
            // have, takes it as a parameter of its own.)
            if let Some(inner) = s.get("partial_rotary_factor")
                && type_of(&s) != Some("proportional")
            {
                let reads_top =
                    !matches!(family.partial, PartialDefault::Reads { top_level: false, .. });
                let top = config.get("partial_rotary_factor").and_then(Value::as_f64);
                if !(reads_top && top.is_some() && top == inner.as_f64()) {
                    return Err(invalid(
                        "rope_scaling.partial_rotary_factor",
                        excerpt(inner),
                        if reads_top {
                            "absent, or the top-level partial_rotary_factor's value: put it at \
                             the config's top level, or in rope_parameters (transformers 5 \
                             reads it inside rope_scaling, 4.x ignores it there)"
                        } else {
                            "absent: put it in rope_parameters, where this family's config \
                             class reads it (its class ignores a top-level factor; transformers \
                             5 reads it inside rope_scaling, 4.x ignores it there)"
                        },
                    ));
                }
                s.remove("partial_rotary_factor");
            }
            Some((s, "rope_scaling".to_string()))
        }
        Some(other) => {
            return Err(invalid("rope_scaling", excerpt(other), "a JSON object or null"));
        }
    };
    // transformers 5.24 builds these families' own RoPE when a config has neither
    // rope_parameters nor rope_scaling, ignoring rope_theta: read as a default RoPE over
    // rope_theta it was a silent wrong answer (Apertus' llama3 x8 over 12e6, Cosmos 3
    // Edge's 1e8; round thirteen).
    let mut theta = theta;
    if scaling.is_none() {
        let legacy_rope = match family.base {
            BaseDefault::Class(ClassBase { legacy: Some(l), .. }) => Some(l),
            _ => None,
        };
        match (theta, legacy_rope, family.own_base) {
            // Without rope_theta the base's own refusal names the class's RoPE.
            (Some(t), Some(l), _) => {
                return Err(invalid(
                    "rope_scaling",
                    format!("missing (beside rope_theta {}, no rope_parameters)", float(t)),
                    format!(
                        "an object, or rope_parameters: without them {model_type}'s config class \
                         builds its own RoPE ({} scaling, factor {}, base {}), not a default \
                         one over rope_theta",
                        l.rope_type,
                        l.factor,
                        float(l.base)
                    ),
                ));
            }
            (Some(t), None, Some(own)) if t != own => {
                return Err(invalid(
                    "rope_theta",
                    float(t),
                    format!(
                        "{} or absent: without rope_parameters or rope_scaling {model_type}'s \
                         config class builds a default RoPE over its own base, whatever \
                         rope_theta says (give rope_parameters for another)",
                        float(own)
                    ),
                ));
            }
            (_, None, Some(own)) => theta = Some(own),
            _ => {}
        }
    }
    match family.layers {
        LayerRule::Olmo3 => return olmo3_legacy(config, layer_type, theta, scaling),
        LayerRule::Step3p5 => return step3p5_legacy(config, layer_type, theta, scaling),
        _ => {}
    }
    let local = match number(config, "rope_local_base_freq")? {
        None if gemma3 => Some(1e4),
        local => local,
    };
    let rope = Rope { theta, scaling, partial_rotary_factor: None, per_layer: false, legacy: true };
    match (layer_type, local) {
        (None, None) | (Some("full_attention"), Some(_)) => Ok(rope),
        // Two RoPEs, as in the per-layer-type form: which one is the caller's to say.
        (None, Some(_)) => Err(invalid(
            "layer_type",
            "missing".to_string(),
            "full_attention or sliding_attention: this config has two RoPEs \
             (rope_local_base_freq, or Gemma 3's family)",
        )),
        // Gemma 3 (transformers 4): sliding-window layers use the local base, unscaled.
        (Some("sliding_attention"), Some(local)) => {
            Ok(Rope { theta: Some(local), scaling: None, ..rope })
        }
        (Some(t), Some(_)) => Err(invalid(
            "layer_type",
            format!("{t:?}"),
            "full_attention or sliding_attention (rope_local_base_freq)",
        )),
        (Some(t), None) => Err(invalid(
            "layer_type",
            format!("{t:?}"),
            "absent: this config has one RoPE for every layer (no per-layer-type \
             rope_parameters, no rope_local_base_freq)",
        )),
    }
}

/// A legacy config (`rope_theta`, `rope_scaling`) whose full_attention layers take `theta`
/// and the scaling and whose sliding_attention layers take `sliding`, unscaled (OLMo 3, Step
/// 3.5). Without a layer type the two must be one RoPE; `family` names the model in the
/// errors, `two` says what differs.
fn full_and_sliding(
    layer_type: Option<&str>,
    theta: f64,
    scaling: Option<(Object, String)>,
    sliding: f64,
    family: &str,
    two: &str,
) -> Result<Rope> {
    let rope = |theta, scaling| Rope {
        theta: Some(theta),
        scaling,
        partial_rotary_factor: None,
        per_layer: false,
        legacy: true,
    };
    match layer_type {
        Some("full_attention") => Ok(rope(theta, scaling)),
        None if scaling.is_none() && theta == sliding => Ok(rope(theta, None)),
        Some("sliding_attention") => Ok(rope(sliding, None)),
        None => Err(invalid(
            "layer_type",
            "missing",
            format!(
                "full_attention or sliding_attention: this {family} config has two RoPEs ({two})"
            ),
        )),
        Some(t) => Err(invalid(
            "layer_type",
            format!("{t:?}"),
            format!("full_attention or sliding_attention ({family})"),
        )),
    }
}

/// OLMo 3's legacy form (`rope_theta`, `rope_scaling`): its config class gives the
/// full_attention layers `rope_theta` (5e5 when absent) and `rope_scaling`, and the
/// sliding_attention layers 5e5, unscaled (transformers 5.23 pops `rope_theta` twice; 4.x gave
/// them `rope_theta`, unscaled, so another value is refused for them). Without a layer type
/// the two must be the same RoPE.
fn olmo3_legacy(
    config: &Object,
    layer_type: Option<&str>,
    theta: Option<f64>,
    scaling: Option<(Object, String)>,
) -> Result<Rope> {
    const SLIDING: f64 = 5e5;
    if layer_type == Some("sliding_attention")
        && let Some(t) = number(config, "rope_theta")?
        && t != SLIDING
    {
        return Err(invalid(
            "rope_theta",
            format!("{} (model_type \"olmo3\", layer_type sliding_attention)", float(t)),
            "absent or 500000 for OLMo 3's sliding_attention layers: transformers 5.23 gives \
             them 500000, 4.x gave them rope_theta",
        ));
    }
    full_and_sliding(
        layer_type,
        theta.unwrap_or(SLIDING),
        scaling,
        SLIDING,
        "OLMo 3",
        "rope_theta and rope_scaling for full_attention, 500000 unscaled for sliding_attention",
    )
}

/// Step 3.5's legacy form (`Step3p7TextConfig`, `model_type` `step3p5`, transformers 5.23):
/// every layer type's RoPE is a default one over `rope_theta` (10000 when absent), and
/// `rope_scaling` updates the full_attention layers' only. Per-layer lists (`rope_theta` as a
/// list, `partial_rotary_factors`) are not read: a `rope_theta` list is refused as not a
/// number, and `partial_rotary_factors` other than all 1 are refused. Without a layer type
/// the layer types must share one RoPE.
fn step3p5_legacy(
    config: &Object,
    layer_type: Option<&str>,
    theta: Option<f64>,
    scaling: Option<(Object, String)>,
) -> Result<Rope> {
    if let Some(factors) = get(config, "partial_rotary_factors") {
        let all_one =
            matches!(factors, Value::Array(a) if a.iter().all(|v| v.as_f64() == Some(1.0)));
        if !all_one {
            return Err(invalid(
                "partial_rotary_factors",
                excerpt(factors),
                "absent or all 1: Step 3.5's per-layer factors are not read by posenc (give the \
                 layer's rotary dim and base instead: --rotary-dim and --base, or \
                 RopeSpec::partial and with_base in code)",
            ));
        }
    }
    let theta = theta.unwrap_or(DEFAULT_BASE);
    full_and_sliding(
        layer_type,
        theta,
        scaling,
        theta,
        "Step 3.5",
        "rope_scaling applies to full_attention only",
    )
}

/// ModernBERT's base for a layer type: `global_rope_theta` (full_attention, 160000 when
/// absent) or `local_rope_theta` (sliding_attention, 10000), as transformers 5.23's
/// `convert_rope_params_to_dict` fills a layer type's `rope_theta`.
fn modernbert_theta(config: &Object, layer_type: Option<&str>) -> Result<f64> {
    let (key, default) = match layer_type {
        Some("full_attention") => ("global_rope_theta", 160_000.0),
        Some("sliding_attention") => ("local_rope_theta", 10_000.0),
        other => {
            return Err(invalid(
                "layer_type",
                other.map_or_else(|| "missing".to_string(), |t| format!("{t:?}")),
                "full_attention or sliding_attention: ModernBERT has two RoPEs \
                 (global_rope_theta, local_rope_theta)",
            ));
        }
    };
    Ok(number(config, key)?.unwrap_or(default))
}

/// ModernBERT's published form: no `rope_parameters`, `global_rope_theta` and
/// `local_rope_theta` (or their defaults) for the two layer types, and `rope_scaling`, when
/// given, applied to both (transformers 5.23 updates both layer types' parameters with it).
fn modernbert_legacy(config: &Object, layer_type: Option<&str>) -> Result<Rope> {
    let theta = modernbert_theta(config, layer_type)?;
    if let Some(Value::Object(s)) = get(config, "rope_scaling")
        && let Some(inner) = get(s, "rope_theta")
    {
        return Err(invalid(
            "rope_scaling.rope_theta",
            excerpt(inner),
            "absent for ModernBERT: its layers read global_rope_theta (full_attention) and \
             local_rope_theta (sliding_attention); transformers 5 would give this one to both, \
             4.x ignores it",
        ));
    }
    let scaling = match get(config, "rope_scaling") {
        None => None,
        Some(Value::Object(s)) => Some((s.clone(), "rope_scaling".to_string())),
        Some(other) => {
            return Err(invalid("rope_scaling", excerpt(other), "a JSON object or null"));
        }
    };
    Ok(Rope {
        theta: Some(theta),
        scaling,
        partial_rotary_factor: None,
        per_layer: true,
        legacy: true,
    })
}

/// Refuses a config of a family whose positions are absolute (sinusoids, learned tables) or a
/// bias ([`Refusal::NotRotary`]): reading a default RoPE out of its head dims would be a
/// silent wrong answer.
fn not_rotary(config: &Object) -> Result<()> {
    match config.get("model_type") {
        Some(Value::String(model_type))
            if families::of(model_type).refusal == Some(Refusal::NotRotary) =>
        {
            Err(Error::ModelFamily {
                path: None,
                model_type: model_type.chars().take(64).collect(),
                reason: "its positions are not rotary (RoPE): absolute sinusoids and learned \
                         tables take `posenc table/encode --config`, ALiBi `posenc alibi`"
                    .into(),
            })
        }
        _ => Ok(()),
    }
}

/// The scaling object with the model-level fields merged in where transformers reads
/// them from the config, and the family's attention keys dropped, then read.
fn scaling(
    config: &Object,
    mut map: Object,
    key: &str,
    per_layer: bool,
    family: &Family,
) -> Result<Scaling> {
    for attention_key in family.attention_keys {
        map.remove(*attention_key);
    }
    let type_key = if get(&map, "rope_type").is_some() { "rope_type" } else { "type" };
    // Phi-3's first configs call longrope "su"; transformers reads it as longrope, and
    // Phi-3's config class reads "yarn" so too.
    let given_type = get(&map, type_key).and_then(Value::as_str);
    if given_type == Some("su") || (family.longrope_only.is_some() && given_type == Some("yarn")) {
        map.insert(type_key.into(), "longrope".into());
    }
    let rope_type = get(&map, type_key).and_then(Value::as_str).unwrap_or("").to_string();
    if family.longrope_only.is_some() && !["", "default", "longrope"].contains(&rope_type.as_str())
    {
        return Err(invalid(
            format!("{key}.{type_key}"),
            format!("{rope_type:?} (model_type {:?})", family.model_type),
            "longrope (or su, yarn, which its config class reads as longrope) or default: \
             Phi-3's config class refuses any other",
        ));
    }
    // transformers' dynamic, yarn and longrope read the config's max_position_embeddings
    // (llama3 where it has no original length), never the object's (a key they do not
    // know): the config's wins where it has one;
    // without it transformers reads the config class's default, which posenc does not
    // know, so the object's alone is refused rather than read in its place.
    if READS_MAX.contains(&rope_type.as_str()) {
        match whole(config, "max_position_embeddings")? {
            Some(m) => {
                map.insert("max_position_embeddings".into(), m.into());
            }
            None if map.contains_key("max_position_embeddings") => {
                return Err(invalid(
                    format!("{key}.max_position_embeddings"),
                    excerpt(&map["max_position_embeddings"]),
                    "at the config's top level: transformers reads the config's own \
                     max_position_embeddings (absent here, so its config class's default), \
                     never one inside the RoPE parameters",
                ));
            }
            None => {}
        }
    }
    // transformers 5.24's YaRN reads `truncate` from the top level of the config's
    // rope_parameters alone, which holds one entry per layer type where the layers each have
    // their RoPE (given so, or built so by the family's class from a legacy form): there it
    // truncates whatever a layer's entry says. A `false` (or a null, which a single RoPE
    // reads as false) it ignores is refused, not followed.
    let layered = per_layer || !matches!(family.layers, LayerRule::Generic | LayerRule::Lfm3);
    if layered
        && rope_type == "yarn"
        && let Some(value @ (Value::Bool(false) | Value::Null)) = map.get("truncate")
    {
        return Err(invalid(
            format!("{key}.truncate"),
            excerpt(value),
            "true or absent for a RoPE per layer type: transformers 5.24 reads truncate only \
             from the top level of rope_parameters (which holds the layer types here), so this \
             layer's YaRN truncates whatever its entry says",
        ));
    }
    // Phi-3 keeps its pretrained length at the top level; transformers 5 gives it priority
    // over the object's for llama3, yarn and longrope (one RoPE for every layer), and a
    // longrope without factor takes max_position_embeddings / it as the factor. Phi-3's
    // class defaults it (4096) where a config has none, so the object's is never read
    // there; a null one is taken as the original length, which transformers cannot use.
    if !per_layer && ["llama3", "yarn", "longrope"].contains(&rope_type.as_str()) {
        const ORIGINAL: &str = "original_max_position_embeddings";
        if config.get(ORIGINAL) == Some(&Value::Null) {
            return Err(invalid(
                ORIGINAL,
                "null (top level)",
                format!(
                    "{WHOLE_U64}, or absent: transformers takes a top-level value as the \
                     {rope_type} RoPE's original length over the object's, and fails on null"
                ),
            ));
        }
        if let Some(original) = whole(config, ORIGINAL)?.or(family.longrope_only) {
            map.insert(ORIGINAL.into(), original.into());
        }
    }
    Scaling::from_hf_value(&Value::Object(map)).map_err(under(key))
}

/// The `rope_type` (or legacy `type`) of a scaling object, if it is a string.
fn type_of(map: &Object) -> Option<&str> {
    get(map, "rope_type").or_else(|| get(map, "type")).and_then(Value::as_str)
}

/// Proportional RoPE's `partial_rotary_factor` goes into its scaling (it sets how many
/// frequencies are not zero) instead of narrowing the rotary dim: Hugging Face's
/// proportional rotary module covers the whole head. A top-level value counts as in
/// [`rope`]; two different values are refused.
fn proportional_factor(
    config: &Object,
    map: &mut Object,
    key: &str,
    nested: Option<f64>,
) -> Result<()> {
    let top = number(config, "partial_rotary_factor")?;
    let inner = number(map, "partial_rotary_factor").map_err(under(key))?;
    let given = [nested, inner, top].into_iter().flatten().collect::<Vec<_>>();
    if let Some(&first) = given.first() {
        if let Some(&other) = given.iter().find(|&&v| v != first) {
            return Err(invalid(
                "partial_rotary_factor",
                format!("{} (and {} in {key})", float(other), float(first)),
                format!("given once, or the same in {key}"),
            ));
        }
        map.insert("partial_rotary_factor".into(), Value::from(first));
    }
    Ok(())
}

/// The head dimension the rotary module sees, and whether it comes from DeepSeek's
/// `qk_rope_head_dim`: that key, else `head_dim`, else the class default of `model_type`
/// ([`HeadDimDefault::Settled`]), else `hidden_size / num_attention_heads`; `stand_in` (the
/// caller's head dim) where none of them is given, and for a class default that differs
/// between versions ([`HeadDimDefault::Unsettled`], refused without it).
fn head_dim(
    config: &Object,
    model_type: &str,
    family: &Family,
    stand_in: Option<u64>,
) -> Result<(u64, bool)> {
    if let Some(d) = whole(config, "qk_rope_head_dim")? {
        return Ok((d, true));
    }
    if let Some(d) = whole(config, "head_dim")? {
        return Ok((d, false));
    }
    let d = family.head_dim;
    if let HeadDimDefault::Settled(d) = d {
        return Ok((u64::from(d), false));
    }
    if matches!(d, HeadDimDefault::Unsettled(_) | HeadDimDefault::UnsettledDoubled) {
        if let Some(d) = stand_in {
            return Ok((d, false));
        }
        return Err(invalid(
            "head_dim",
            "missing",
            format!(
                "given: model_type \"{model_type}\" is not at hidden_size / \
                 num_attention_heads when it is absent (transformers 5.23's config class: \
                 {d}; class defaults differ between versions); or the head dim passed \
                 (--head-dim D, or RopeSpec::from_hf_config_with_head_dim)"
            ),
        ));
    }
    // GPT-J and GPT-2 style configs spell them n_embd and n_head; a few classes' defaults
    // stand in for a missing one (CLASS_SIZES).
    // (Those classes have no n_embd or n_head: transformers leaves them unread there.)
    let class = CLASS_SIZES.iter().find(|(t, _, _)| *t == model_type);
    let hidden = match (whole(config, "hidden_size")?, class) {
        (Some(h), _) => Some(h),
        (None, Some(c)) => Some(c.1),
        (None, None) => whole(config, "n_embd")?,
    };
    let heads = match (whole(config, "num_attention_heads")?, class) {
        (Some(n), _) => Some(n),
        (None, Some(c)) => Some(c.2),
        (None, None) => whole(config, "n_head")?,
    };
    match (hidden, heads) {
        (Some(h), Some(n)) if h % n == 0 => Ok((h / n, false)),
        (Some(h), Some(n)) => Err(invalid(
            "hidden_size",
            format!("{h} (num_attention_heads {n})"),
            "a multiple of num_attention_heads (or a head_dim key)",
        )),
        _ => stand_in.map(|d| (d, false)).ok_or_else(|| {
            invalid(
                "head_dim",
                "missing",
                "a whole number, or hidden_size and num_attention_heads (no class default is \
                 read for this model_type), or the head dim passed (--head-dim D, or \
                 RopeSpec::from_hf_config_with_head_dim)",
            )
        }),
    }
}

/// The rotated dimensions of a RoPE that is not spread over the whole head by its type
/// (proportional, DeepSeek's slice) or its family ([`PartialDefault::FullHead`]):
/// `int(head_dim * factor)` as transformers computes it, the factor read as transformers 5.23
/// reads it for the family.
///
/// - the layer type's or `rope_parameters`' own `partial_rotary_factor`, else the top-level
///   one (Bamba's config class replaces that by 0.5), else GPT-NeoX's `rotary_pct`, else
///   GPT-J's (or MiniMax-M2's) `rotary_dim` ([`RotaryKey`]), else the family's class default
///   ([`PartialDefault::Reads`]; 1 elsewhere).
/// - a `"default"` RoPE (`default_type`) of a family whose default does not read the factor
///   spans the whole head in transformers 5, but `int(head_dim * factor)` dims in 4.x's
///   generic default: a factor other than 1 is refused there.
/// - `rotary_pct` outside GPT-NeoX and `rotary_dim` outside GPT-J, CodeGen and MiniMax-M2
///   are not read by transformers: refused unless they say the whole head.
fn rotary_dim(
    config: &Object,
    head_dim: u64,
    (model_type, family): (&str, &Family),
    layer_type: Option<&str>,
    rope: &Rope,
    default_type: bool,
) -> Result<u64> {
    let reads = match family.partial {
        PartialDefault::Reads { legacy, given, .. } => Some((legacy, given)),
        _ => None,
    };
    let top = match family.partial {
        PartialDefault::Reads { top_level: false, .. } => None,
        _ => number(config, "partial_rotary_factor")?,
    };
    let neox = family.rotary_key == Some(RotaryKey::RotaryPct);
    let no_copy = rope.per_layer && copies_nothing(family);
    // NeoMME's config class fills its default factor into every layer type's parameters
    // before transformers standardizes them: a top-level one never reaches any layer there.
    let every_layer = family.layers == LayerRule::NeoMme;
    if no_copy && (default_type || every_layer) && rope.partial_rotary_factor.is_none() {
        if let Some(f) = top {
            return Err(invalid(
                "partial_rotary_factor",
                format!("{} (top level, model_type {model_type:?})", float(f)),
                "absent, or in each default layer type's rope_parameters: this family's config \
                 class copies no top-level factor into them, and transformers applies it to a \
                 default layer only as a side effect of another layer's non-default type",
            ));
        }
        let f = no_copy_default_factor(family, layer_type)?;
        let rotary = (head_dim as f64 * f).trunc() as u64;
        if rotary < 2 || !rotary.is_multiple_of(2) {
            return Err(invalid(
                "head_dim",
                format!("{head_dim} ({model_type}'s default factor {f}: rotary dim {rotary})"),
                "a head whose default rotary dim is even and at least 2",
            ));
        }
        return Ok(rotary);
    }
    let pct = number(config, "rotary_pct")?;
    let factor = match (rope.partial_rotary_factor, top) {
        (Some(f), _) | (None, Some(f)) => Some(("partial_rotary_factor", f)),
        (None, None) => pct.filter(|_| neox).map(|f| ("rotary_pct", f)),
    };
    let named = |m: &str| if m.is_empty() { "missing".to_string() } else { format!("{m:?}") };
    if !neox
        && let Some(f) = pct
        && f != 1.0
    {
        return Err(invalid(
            "rotary_pct",
            format!("{} (model_type {})", float(f), named(model_type)),
            "1 or absent: only GPT-NeoX's configs read rotary_pct (transformers rotates the \
             whole head elsewhere); choose the rotary dim yourself (--rotary-dim, or \
             RopeSpec::partial in code)",
        ));
    }
    let (key, rotary) = match factor {
        Some((key, f)) => {
            if !(f > 0.0 && f <= 1.0) {
                return Err(invalid(key, float(f), "a number in (0, 1]"));
            }
            if default_type && reads.is_none() && f != 1.0 {
                let whole = head_dim;
                let part = (head_dim as f64 * f).trunc() as u64;
                // 4.x's product, if it is a rotary dim posenc takes (even, at least 2): an
                // odd one built its frequencies over an odd width, which no even rotary dim
                // reproduces.
                let choose = match part {
                    p if p >= 2 && p % 2 == 0 => {
                        format!("--rotary-dim {whole} or --rotary-dim {p}")
                    }
                    _ => format!("--rotary-dim {whole} (4.x's {part} is no even rotary dim)"),
                };
                return Err(invalid(
                    key,
                    format!("{} (model_type {}, a default RoPE)", float(f), named(model_type)),
                    format!(
                        "1 or absent: transformers 5 builds this family's default RoPE over the \
                         whole head ({whole} dims), 4.x's generic default over {part}; choose \
                         with {choose} (RopeSpec::partial in code)"
                    ),
                ));
            }
            // Python's int() of the float64 product: truncated.
            (key, (head_dim as f64 * f).trunc() as u64)
        }
        None => match whole(config, "rotary_dim")? {
            Some(r) if family.rotary_key == Some(RotaryKey::RotaryDim) => ("rotary_dim", r),
            Some(r) if r != head_dim => {
                return Err(invalid(
                    "rotary_dim",
                    format!("{r} (model_type {})", named(model_type)),
                    format!(
                        "{head_dim} (the head) or absent: only GPT-J, CodeGen and MiniMax-M2 read \
                         rotary_dim (transformers rotates the whole head elsewhere); choose \
                         the rotary dim yourself (--rotary-dim, or RopeSpec::partial in code)"
                    ),
                ));
            }
            _ => match reads {
                Some((legacy, given)) => {
                    // A legacy rope_scaling takes the place of the dict a class fills in
                    // (Moonshine Streaming's 0.8): transformers 5.24 reads it as given
                    // rope_parameters.
                    let f = if rope.legacy && rope.scaling.is_none() { legacy } else { given };
                    ("partial_rotary_factor", (head_dim as f64 * f).trunc() as u64)
                }
                None => return Ok(head_dim),
            },
        },
    };
    if rotary < 2 || rotary % 2 != 0 || rotary > head_dim {
        let value = match key {
            "rotary_dim" => rotary.to_string(),
            _ => format!(
                "{} (rotary dim {rotary} of head_dim {head_dim})",
                factor.map_or_else(String::new, |(_, f)| float(f))
            ),
        };
        return Err(invalid(key, value, "a rotary dim that is even and in 2..=head_dim"));
    }
    Ok(rotary)
}

/// Refuses a `model_type` (under `field`'s name) that is neither a string nor null.
fn model_type_is_text(config: &Object, field: &str) -> Result<()> {
    match config.get("model_type") {
        None | Some(Value::Null | Value::String(_)) => Ok(()),
        Some(other) => Err(invalid(field, excerpt(other), "a string (a Hugging Face model_type)")),
    }
}

/// The config object of the language model: the top level, or its `text_config` where the
/// top level has no head dimension (a multimodal config), with the `model_type` transformers
/// gives it where it has none. JSON that is not an object and a family whose positions are
/// not rotary ([`not_rotary`], at either level) are refused.
fn language_model(json: &str) -> Result<Object> {
    let value = parse_json(json)?;
    let Value::Object(mut config) = value else {
        return Err(invalid("(json)", excerpt(&value), "a JSON object (a config.json)"));
    };
    // A model_type that is no string names no family: read as none, it gave the generic
    // RoPE where the family's own was asked for (round twenty-two).
    model_type_is_text(&config, "model_type")?;
    for key in ["text_config", "vlm_config"] {
        if let Some(Value::Object(sub)) = config.get(key) {
            model_type_is_text(sub, &format!("{key}.model_type"))?;
        }
    }
    // A retriever that wraps one vision-language model (ColPali, ColQwen2): its config class
    // builds that model from `vlm_config` (its class default's when it names none), which is
    // read as a config of its own.
    let wrapped = |c: &Object| {
        let t = get(c, "model_type").and_then(Value::as_str)?;
        VLM_WRAPPERS.iter().find(|(w, _)| *w == t).map(|(_, default)| *default)
    };
    // A non-finite number where a sub-config or RoPE object belongs (read as transformers 5
    // writes one, an object) is not that object.
    for key in ["text_config", "vlm_config", "rope_scaling", "rope_parameters"] {
        if let Some(v) = config.get(key).filter(|v| is_non_finite(v)) {
            return Err(invalid(key, excerpt(v), "an object, or null"));
        }
    }
    while let Some(default) = wrapped(&config) {
        match config.get("vlm_config") {
            Some(Value::Object(vlm)) => {
                let mut vlm = vlm.clone();
                if get(&vlm, "model_type").is_none() {
                    vlm.insert("model_type".into(), default.into());
                }
                config = vlm;
            }
            other => {
                return Err(invalid(
                    "vlm_config",
                    other.map_or_else(|| "missing".to_string(), excerpt),
                    format!(
                        "an object: the vision-language model this retriever wraps ({default} \
                         by default), whose language model's RoPE posenc reads"
                    ),
                ));
            }
        }
    }
    not_rotary(&config)?;
    let top_type = get(&config, "model_type").and_then(Value::as_str).unwrap_or("").to_owned();
    let has_head = ["head_dim", "num_attention_heads", "n_head", "qk_rope_head_dim"]
        .iter()
        .any(|k| get(&config, k).is_some());
    // A composite whose language model transformers builds from its text_config is read from
    // there even beside head keys at the top level (a vision tower's, or a hand-edited
    // config's; read from the top level they were a silent wrong answer), unless the
    // composite itself is refused (MusicFlamingo's top level is its audio encoder's RoPE).
    let composite =
        families::text_model_type(&top_type).is_some() && families::of(&top_type).refusal.is_none();
    if (!has_head || composite)
        && let Some(Value::Object(text)) = config.get("text_config")
    {
        config = text.clone();
        // A text_config without its own model_type is the one transformers gives it: the
        // composite class's default language model (Aya Vision's cohere2, which pairs and
        // returns its frequencies otherwise than the generic RoPE), else the model's own
        // (Llama 4's, whose module is refused, must not read as the generic family's). So
        // is one of a class that builds its own text class whatever the model_type says
        // (round eighteen: Gemma 3's or ERNIE 4.5 VL's saying llama was read as Llama).
        let fixed = families::text_class_is_fixed(&top_type);
        if (fixed || get(&config, "model_type").is_none()) && !top_type.is_empty() {
            let text_type = families::text_model_type(&top_type).unwrap_or(&top_type);
            config.insert("model_type".into(), text_type.into());
        }
        // Classes that lay their own defaults under the text_config's keys, whatever its
        // model_type (review of round eighteen: Voxtral's head_dim 128 and base 1e8 were
        // read as a Llama's hidden / heads and 10000).
        if let Some((_, defaults)) = MERGED_TEXT_DEFAULTS.iter().find(|(t, _)| *t == top_type)
            && let Ok(Value::Object(defaults)) = serde_json::from_str::<Value>(defaults)
        {
            for (key, value) in defaults {
                config.entry(key).or_insert(value);
            }
        }
        // A multimodal model's language model may be one without RoPE (BLIP-2's OPT).
        not_rotary(&config)?;
    } else if !has_head && get(&config, "text_config").is_none() {
        // Qwen Omni: a thinker and a talker, each with its language model; which one is meant
        // is the caller's to say (posenc read neither and asked for a head dim).
        if let Some(thinker) = get(&config, "thinker_config") {
            return Err(invalid(
                "thinker_config",
                excerpt(thinker),
                "a config of one language model: this one holds two (thinker_config.text_config \
                 and talker_config), so give the one to read",
            ));
        }
    } else if composite
        && get(&config, "text_config").is_none()
        && !FLAT_COMPOSITES.iter().any(|f| f.model_type == top_type)
    {
        let text_type = families::text_model_type(&top_type).unwrap_or("");
        // Its class builds its language model from every top-level key: read as that
        // model (dots.llm3 Note's published checkpoints are flat).
        if LIFTS_EVERY_KEY.contains(&top_type.as_str()) {
            config.insert("model_type".into(), text_type.into());
            return Ok(config);
        }
        // Its class builds its language model from its own defaults, whatever the top level
        // says (transformers 5.24): read from there it was a silent wrong answer (round
        // sixteen: Qwen3-VL-MoE, Qwen3.5, GLM-OCR, ...).
        return Err(invalid(
            "text_config",
            "missing",
            format!(
                "an object: {top_type}'s config class builds its language model ({text_type}) \
                 from its own defaults without one, not from the top-level keys (transformers \
                 5.24)"
            ),
        ));
    } else if has_head
        && get(&config, "text_config").is_none()
        && let Some(flat) = FLAT_COMPOSITES.iter().find(|f| f.model_type == top_type)
        && let Some(text_type) = families::text_model_type(&top_type)
    {
        // Fuyu's class gives its language model partial_rotary_factor 0.5 whatever the
        // top level says (transformers 5.24); 4.x passed the top-level one on.
        if flat.partial_rotary_factor.is_some()
            && let Some(p) = number(&config, "partial_rotary_factor")?
            && Some(p) != flat.partial_rotary_factor
        {
            return Err(invalid(
                "partial_rotary_factor",
                float(p),
                format!(
                    "absent or 0.5: {top_type}'s config class gives its language model 0.5 \
                     whatever the top level says (transformers 5.24), where 4.x took this one"
                ),
            ));
        }
        // The text config takes the keys its class names and the RoPE's, and nothing else:
        // a `head_dim` or `partial_rotary_factor` beside them stays on the composite, where
        // the language model never reads it.
        config.retain(|k, _| {
            flat.text_keys.contains(&k.as_str()) || flat.rope_keys.contains(&k.as_str())
        });
        config.insert("model_type".into(), text_type.into());
    }
    Ok(config)
}

/// Retrievers whose config class builds one vision-language model from `vlm_config`, and the
/// `model_type` it builds where `vlm_config` names none (transformers 5.24).
const VLM_WRAPPERS: &[(&str, &str)] =
    &[("colmodernvbert", "modernvbert"), ("colpali", "paligemma"), ("colqwen2", "qwen2_vl")];

/// Composites whose config class builds its `text_config` from every top-level key of a
/// config without one (transformers 5.24): read as their language model.
const LIFTS_EVERY_KEY: &[&str] = &["dots3_note", "glm5_next"];

/// A composite model whose config class builds its `text_config` from a flat config's
/// top-level keys (the hub's Qwen2-VL, Qwen2.5-VL, PaddleOCR-VL and Fuyu configs are flat):
/// read as its language model's family, as transformers 5.24 reads it, from the keys its
/// class passes on.
struct FlatComposite {
    model_type: &'static str,
    /// The keys of the language model's config the class passes on (those of the text
    /// config class's `__init__`, or Fuyu's defaults, that bear on attention).
    text_keys: &'static [&'static str],
    /// The RoPE keys it passes on (Fuyu's class passes no `rope_parameters`).
    rope_keys: &'static [&'static str],
    /// The `partial_rotary_factor` the class gives its language model, whatever the top
    /// level says.
    partial_rotary_factor: Option<f64>,
}

const ROPE_KEYS: &[&str] = &["rope_parameters", "rope_scaling", "rope_theta"];

const FLAT_COMPOSITES: &[FlatComposite] = &[
    FlatComposite {
        model_type: "qwen2_vl",
        text_keys: QWEN2_VL_TEXT_KEYS,
        rope_keys: ROPE_KEYS,
        partial_rotary_factor: None,
    },
    FlatComposite {
        model_type: "qwen2_5_vl",
        text_keys: QWEN2_VL_TEXT_KEYS,
        rope_keys: ROPE_KEYS,
        partial_rotary_factor: None,
    },
    FlatComposite {
        model_type: "paddleocr_vl",
        text_keys: &[
            "head_dim",
            "hidden_size",
            "max_position_embeddings",
            "num_attention_heads",
            "num_hidden_layers",
            "num_key_value_heads",
            "vocab_size",
        ],
        rope_keys: ROPE_KEYS,
        partial_rotary_factor: None,
    },
    // HunyuanOCR's flat config: its class lifts its text class's fields and their other
    // names, rope_scaling and rope_theta (transformers 5.24), so a top-level
    // partial_rotary_factor or original_max_position_embeddings stays on the composite.
    FlatComposite {
        model_type: "hunyuan_vl",
        text_keys: &[
            "attention_head_dim",
            "head_dim",
            "hidden_size",
            "max_position_embeddings",
            "num_attention_heads",
            "num_hidden_layers",
            "num_key_value_heads",
            "vocab_size",
        ],
        rope_keys: ROPE_KEYS,
        partial_rotary_factor: None,
    },
    FlatComposite {
        model_type: "fuyu",
        text_keys: &[
            "hidden_size",
            "max_position_embeddings",
            "num_attention_heads",
            "num_hidden_layers",
            "vocab_size",
        ],
        rope_keys: &["rope_scaling", "rope_theta"],
        partial_rotary_factor: Some(0.5),
    },
];

const QWEN2_VL_TEXT_KEYS: &[&str] = &[
    "hidden_size",
    "layer_types",
    "max_position_embeddings",
    "max_window_layers",
    "num_attention_heads",
    "num_hidden_layers",
    "num_key_value_heads",
    "sliding_window",
    "use_sliding_window",
    "vocab_size",
];

/// A multimodal RoPE (M-RoPE) as a config gives it: its family's layout ([`Mrope`]) and
/// the three `mrope_section` counts (the config's, else the family's default; for the
/// `sections` layout they sum to the rotary dim's frequencies). Its cos and sin by position
/// are a 1-D RoPE's ([`RopeSpec::from_hf_config_multimodal`]); frequency `i` of a token
/// takes the position of its axis [`MultimodalRope::axes`]`[i]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MultimodalRope {
    layout: Mrope,
    section: [u32; 3],
    /// `rotary_dim / 2`.
    freqs: u32,
}

impl MultimodalRope {
    /// The axes of a rotation of `rotary_dim` dimensions: `layout` and its three
    /// `mrope_section` counts (time, height, width), as a config gives them. A config's are
    /// read by [`RopeSpec::from_hf_config_multimodal`]; this builds them for
    /// [`crate::cpu::rope_multimodal`] and [`crate::gpu::Context::rope_multimodal`] without
    /// one.
    ///
    /// ```
    /// use posenc::rope::{Mrope, MultimodalRope};
    /// // Qwen2-VL's: 16 time, 24 height and 24 width frequencies of a head of 128.
    /// let m = MultimodalRope::new(Mrope::Sections, [16, 24, 24], 128)?;
    /// assert_eq!(&m.axes()[14..18], &[0, 0, 1, 1]);
    /// assert!(MultimodalRope::new(Mrope::Sections, [16, 24, 24], 64).is_err());
    /// # Ok::<(), posenc::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `mrope_section` if a count passes 32768, and as
    /// [`MultimodalRope::for_rotary_dim`].
    pub fn new(layout: Mrope, section: [u32; 3], rotary_dim: u32) -> Result<Self> {
        if let Some(&n) = section.iter().find(|&&n| n > MAX_SECTION) {
            return Err(Error::InvalidParameter {
                field: "mrope_section",
                value: format!("{section:?} (count {n})"),
                allowed: "three counts in 0..=32768 (time, height and width frequencies)",
            });
        }
        MultimodalRope { layout, section, freqs: 0 }.for_rotary_dim(rotary_dim)
    }

    /// The number of frequencies it assigns, `rotary_dim / 2`.
    pub fn n_freqs(&self) -> u32 {
        self.freqs
    }

    /// Frequency `i`'s axis (0 time, 1 height, 2 width): [`MultimodalRope::axes`]`[i]`.
    #[inline]
    pub fn axis(&self, i: u32) -> u8 {
        self.layout.axis(self.section, i)
    }

    /// The family's layout.
    pub fn layout(&self) -> Mrope {
        self.layout
    }

    /// The `mrope_section` counts: frequencies of the time, height and width axes.
    pub fn section(&self) -> [u32; 3] {
        self.section
    }

    /// Frequency `i`'s axis (0 time, 1 height, 2 width), for each of the `rotary_dim / 2`
    /// frequencies. Column `c` of a `neox` cache holds frequency `c % (rotary_dim / 2)`,
    /// of a `gptj` one frequency `c / 2`.
    pub fn axes(&self) -> Vec<u8> {
        (0..self.freqs).map(|i| self.axis(i)).collect()
    }

    /// The same for `rotary_dim` (a caller's override of the config's).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `rotary_dim` unless it is even and in `2..=65536`,
    /// and naming `mrope_section` for the `sections` and `alternating` layouts unless its
    /// counts sum to `rotary_dim / 2` (their modules split the frequencies by them; the
    /// `interleaved` layout assigns every frequency whatever the counts), and for the
    /// `alternating` layout unless `s0 == s1` and `s2 >= 1`.
    pub fn for_rotary_dim(self, rotary_dim: u32) -> Result<Self> {
        if !(2..=super::MAX_HEAD_DIM).contains(&rotary_dim) || !rotary_dim.is_multiple_of(2) {
            return Err(Error::InvalidParameter {
                field: "rotary_dim",
                value: rotary_dim.to_string(),
                allowed: "an even number in 2..=65536",
            });
        }
        let sum: u64 = self.section.iter().map(|&n| u64::from(n)).sum();
        let value = || format!("{:?} (sum {sum}) for rotary_dim {rotary_dim}", self.section);
        if self.layout != Mrope::Interleaved && sum != u64::from(rotary_dim / 2) {
            return Err(Error::InvalidParameter {
                field: "mrope_section",
                value: value(),
                allowed: "three counts summing to rotary_dim / 2: the sections and alternating \
                          layouts split the frequencies by them (transformers' module fails \
                          otherwise)",
            });
        }
        let [hs, ws, ts] = self.section;
        if self.layout == Mrope::Alternating && (hs != ws || ts == 0) {
            return Err(Error::InvalidParameter {
                field: "mrope_section",
                value: value(),
                allowed: "[n, n, m] with m at least 1: the alternating layout (ERNIE 4.5 VL's) \
                          pairs each height frequency with a width one and keeps a time run \
                          (transformers' module fails otherwise)",
            });
        }
        Ok(MultimodalRope { freqs: rotary_dim / 2, ..self })
    }
}

/// The largest `mrope_section` count read: half the largest rotary dim.
const MAX_SECTION: u32 = super::MAX_HEAD_DIM / 2;

/// The layer types transformers 5.24 nests `rope_parameters` under for `config` of
/// `model_type`: the config's `layer_types` where the class declares any, else the class's
/// own; a class that declares none ignores a config's, and one with labels of its own
/// (`_rope_type_labels`: DeepSeek-V4, LFM3) reads those.
fn declared_layer_types<'a>(config: &'a Object, model_type: &str) -> Vec<&'a str> {
    let class = class_layer_types(model_type);
    let own_labels = ["deepseek_v4", "lfm3"].contains(&model_type);
    match config.get("layer_types") {
        Some(Value::Array(types)) if !class.is_empty() && !own_labels => {
            types.iter().filter_map(Value::as_str).collect()
        }
        _ => class.to_vec(),
    }
}

/// `model_type`'s class's own layer types ([`CLASS_LAYER_TYPES`]), none for a class that
/// declares none.
fn class_layer_types(model_type: &str) -> &'static [&'static str] {
    CLASS_LAYER_TYPES
        .binary_search_by(|(t, _)| (*t).cmp(model_type))
        .map_or(&[], |i| CLASS_LAYER_TYPES[i].1)
}

/// Each transformers 5.24 config class's own layer types (its default `layer_types`, or
/// DeepSeek-V4's and LFM3's `_rope_type_labels`), sorted by model type; a class absent here
/// declares none when it reads its RoPE (Qwen2-VL's text class sets them after). transformers
/// reads `rope_parameters` as one entry per layer type only where its keys are among the
/// config's layer types (`nested_rope_parameter_keys`): the config's own `layer_types`, else
/// these, and none in a class absent here, whatever the config says.
static CLASS_LAYER_TYPES: &[(&str, &[&str])] = &[
    ("afmoe", &["full_attention", "sliding_attention"]),
    ("axk2", &["indexed_attention"]),
    ("bailing_hybrid", &["full_attention", "linear_attention"]),
    ("bamba", &["linear_attention"]),
    ("beam", &["full_attention", "sliding_attention"]),
    ("bit", &["bottleneck", "preactivation"]),
    ("cohere2", &["full_attention", "sliding_attention"]),
    ("cohere2_moe", &["full_attention", "sliding_attention"]),
    ("cohere_compass_text", &["full_attention"]),
    ("cwm", &["full_attention", "sliding_attention"]),
    ("d_fine", &["basic", "bottleneck"]),
    ("deepseek_ocr2_encoder", &["full_attention"]),
    ("deepseek_v32", &["indexed_attention"]),
    ("deepseek_v4", &["compress", "main"]),
    ("deimv2", &["basic", "bottleneck"]),
    ("diffusion_gemma_text", &["full_attention", "sliding_attention"]),
    ("dory", &["full_attention", "sliding_attention"]),
    ("dots1", &["full_attention"]),
    ("dots3_note_text", &["indexed_attention", "sliding_attention"]),
    ("embedding_gemma2_text", &["full_attention", "sliding_attention"]),
    ("exaone4", &["full_attention", "sliding_attention"]),
    ("exaone_moe", &["full_attention", "sliding_attention"]),
    ("falcon_h1", &["hybrid"]),
    ("falcon_mamba", &["linear_attention"]),
    ("flint", &["full_attention", "sliding_attention"]),
    ("gemma2", &["full_attention", "sliding_attention"]),
    ("gemma3_text", &["full_attention", "sliding_attention"]),
    ("gemma3n_text", &["full_attention", "sliding_attention"]),
    ("gemma4_text", &["full_attention", "sliding_attention"]),
    ("gemma4_unified_text", &["full_attention", "sliding_attention"]),
    ("glm5_next_text", &["indexed_attention", "linear_attention"]),
    ("glm_moe_dsa", &["indexed_attention"]),
    ("gpt_oss", &["full_attention", "sliding_attention"]),
    ("granite_swa", &["full_attention", "sliding_attention"]),
    ("granitemoe_swa", &["full_attention", "sliding_attention"]),
    ("granitemoehybrid", &["linear_attention"]),
    ("hy_v4", &["indexed_attention"]),
    ("hy_v4_vl_text", &["indexed_attention"]),
    ("inkling2_loop_text", &["hybrid", "hybrid_sliding"]),
    ("inkling2_text", &["hybrid", "hybrid_sliding"]),
    ("inkling_text", &["hybrid", "hybrid_sliding"]),
    ("jamba", &["full_attention", "linear_attention"]),
    ("kimi_linear", &["full_attention", "linear_attention"]),
    ("kolibri1", &["full_attention", "sliding_attention"]),
    ("laguna", &["full_attention"]),
    ("lara_mini", &["full_attention", "linear_attention", "sliding_attention"]),
    ("lfm2", &["full_attention"]),
    ("lfm3", &["full_attention", "sliding_attention"]),
    ("lfm3_vl_vision", &["conv", "full_attention"]),
    ("llama4_text", &["chunked_attention", "full_attention"]),
    ("mamba", &["linear_attention"]),
    ("mamba2", &["linear_attention"]),
    ("mellum", &["full_attention"]),
    ("mimo_v2_flash", &["full_attention", "sliding_attention"]),
    ("minimax", &["full_attention", "linear_attention"]),
    ("ministral", &["sliding_attention"]),
    ("mistral_large4_text", &["indexed_attention"]),
    ("modernbert", &["full_attention", "sliding_attention"]),
    ("modernbert-decoder", &["full_attention", "sliding_attention"]),
    ("muse_glimmer_assistant", &["sliding_attention"]),
    ("muse_glimmer_text", &["full_attention", "sliding_attention"]),
    ("muse_glimmer_vision", &["full_attention", "window_attention"]),
    ("muse_spark_text", &["full_attention", "sliding_attention"]),
    ("muse_spark_vision", &["full_attention", "window_attention"]),
    ("nemotron_h", &["full_attention", "linear_attention", "mlp", "moe"]),
    ("neomme", &["full_attention", "sliding_attention"]),
    ("olmo3", &["full_attention", "sliding_attention"]),
    ("olmo_hybrid", &["full_attention", "linear_attention"]),
    ("pp_doclayout_v2", &["basic", "bottleneck"]),
    ("pp_doclayout_v3", &["basic", "bottleneck"]),
    ("qwen2", &["full_attention"]),
    ("qwen2_5_omni_talker", &["full_attention"]),
    ("qwen2_5_omni_text", &["full_attention"]),
    ("qwen2_moe", &["full_attention"]),
    ("qwen3", &["full_attention"]),
    ("qwen3_5_moe_text", &["full_attention", "linear_attention"]),
    ("qwen3_5_text", &["full_attention", "linear_attention"]),
    ("qwen3_next", &["full_attention", "linear_attention"]),
    ("qwen3_omni_moe_talker_code_predictor", &["full_attention"]),
    ("qwen4_exp_text", &["indexed_attention", "linear_attention"]),
    ("recurrent_gemma", &["linear_attention", "sliding_attention"]),
    ("regnet", &["x", "y"]),
    ("resnet", &["basic", "bottleneck"]),
    ("rt_detr", &["basic", "bottleneck"]),
    ("rt_detr_resnet", &["basic", "bottleneck"]),
    ("rt_detr_v2", &["basic", "bottleneck"]),
    ("smollm3", &["full_attention"]),
    ("step3p5", &["full_attention"]),
    ("t5_gemma_module", &["full_attention", "sliding_attention"]),
    ("t5gemma2_decoder", &["full_attention", "sliding_attention"]),
    ("t5gemma2_text", &["full_attention", "sliding_attention"]),
    ("ultrabert", &["full_attention", "sliding_attention"]),
    ("unlimited_ocr_text", &["reference_sliding_attention"]),
    ("vaultgemma", &["full_attention", "sliding_attention"]),
    ("zamba", &["hybrid", "linear_attention"]),
    ("zamba2", &["hybrid", "linear_attention"]),
    ("zaya", &["hybrid"]),
];

/// Composites whose config class lays its text config's defaults under a `text_config`
/// dict, whatever `model_type` it gives (transformers 5.24's `__post_init__`: `{**defaults,
/// **text_config}`): their keys a RoPE reads, each taken where the dict has none.
const MERGED_TEXT_DEFAULTS: &[(&str, &str)] = &[
    (
        "glmasr",
        r#"{"hidden_size": 2048, "num_attention_heads": 16, "max_position_embeddings": 8192,
            "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}"#,
    ),
    ("pe_audio", r#"{"hidden_size": 1024, "num_attention_heads": 16}"#),
    ("pe_audio_video", r#"{"hidden_size": 1024, "num_attention_heads": 16}"#),
    ("pe_video", r#"{"hidden_size": 1024, "num_attention_heads": 16}"#),
    (
        "voxtral",
        r#"{"hidden_size": 3072, "head_dim": 128, "rope_theta": 100000000.0,
            "max_position_embeddings": 131072}"#,
    ),
    (
        "voxtral_realtime",
        r#"{"hidden_size": 3072, "num_attention_heads": 32, "head_dim": 128,
            "rope_theta": 1000000.0, "max_position_embeddings": 131072}"#,
    ),
];

/// Model types whose rotary module is always a multimodal RoPE, with a default section
/// where the config gives none (transformers 5.24), which posenc does not compute: refused
/// with or without `mrope_section` (a missing one was read as a 1-D RoPE, round sixteen).
const CLASS_DEFAULT_MROPE: &[(&str, [u32; 3])] =
    &[("cohere_compass_text", [24, 20, 20]), ("hy_v4_vl_text", [12, 10, 10])];

/// The legacy `rope_scaling.type` Qwen2-VL's and Qwen2.5-VL's config classes read as
/// `default`.
const MROPE_TYPE_FAMILIES: &[&str] = &["qwen2_vl_text", "qwen2_5_vl_text"];

/// A multimodal RoPE's keys, taken out of its scaling object: the rotation then read is the
/// 1-D one each axis gathers from. Qwen2-VL's legacy `type: "mrope"` becomes `default`, as
/// its config class makes it; the `mrope_interleaved` of Qwen3-VL's families (which their
/// config classes exempt from validation and their modules never read) is read past;
/// `mrope_section` is taken (else the family's default, `false` beside it), and checked by
/// the caller once the rotary dim is known.
/// `mrope_section` is refused outside the [`Family::mrope`] families, and where
/// `cache` is false ([`RopeSpec::from_hf_config`], one position per token): the axes are
/// then [`RopeSpec::from_hf_config_multimodal`]'s to read.
fn multimodal_keys(
    rope: &mut Rope,
    model_type: &str,
    family: &Family,
    cache: bool,
) -> Result<Option<(Mrope, [u32; 3], bool)>> {
    if family.mrope.is_none()
        && let Some((_, default)) = CLASS_DEFAULT_MROPE.iter().find(|(t, _)| *t == model_type)
    {
        let (key, given) = match &rope.scaling {
            Some((map, key)) => (format!("{key}.mrope_section"), get(map, "mrope_section")),
            None => ("rope_parameters.mrope_section".to_string(), None),
        };
        return Err(invalid(
            key,
            given.map_or_else(|| "missing".to_string(), excerpt),
            format!(
                "a model type whose RoPE posenc computes: {model_type}'s module turns each \
                 frequency by the position of one of three axes (M-RoPE, with its class's \
                 default section {default:?} where none is given), which posenc does not \
                 compute for it"
            ),
        ));
    }
    let Some((map, key)) = rope.scaling.as_mut() else {
        return Ok(family.mrope.map(|(m, section)| (m, section, false)));
    };
    // Whichever key holds it: transformers 5.24 keeps a hub config's `type: "mrope"` and
    // writes `rope_type: "default"` beside it, so a config it saved holds both.
    if MROPE_TYPE_FAMILIES.contains(&model_type) {
        for type_key in ["rope_type", "type"] {
            if get(map, type_key).and_then(Value::as_str) == Some("mrope") {
                map.insert(type_key.into(), "default".into());
            }
        }
    }
    let Some((layout, default_section)) = family.mrope else {
        if let Some(section) = map.get("mrope_section") {
            return Err(invalid(
                format!("{key}.mrope_section"),
                excerpt(section),
                "absent: multimodal RoPE (mrope) is not a rotation posenc computes for this \
                 model_type",
            ));
        }
        return Ok(None);
    };
    // The flags their config classes exempt from validation (Qwen3-Omni's also carries
    // `interleaved`), which their modules never read.
    let flags: &[&str] = match layout {
        Mrope::Interleaved if model_type.starts_with("qwen3_omni_moe") => {
            &["mrope_interleaved", "interleaved"]
        }
        Mrope::Interleaved => &["mrope_interleaved"],
        Mrope::Sections | Mrope::Alternating => &[],
    };
    for flag in flags {
        if let Some(Value::Bool(_)) = map.get(*flag) {
            map.remove(*flag);
        }
    }
    let Some(section) = map.remove("mrope_section") else {
        return Ok(Some((layout, default_section, false)));
    };
    if !cache {
        return Err(invalid(
            format!("{key}.mrope_section"),
            excerpt(&section),
            format!(
                "absent for a one-axis reading: {model_type}'s multimodal RoPE (M-RoPE, {}) \
                 turns each frequency by the position of one of three axes; \
                 RopeSpec::from_hf_config_multimodal reads them, for rope_multimodal and \
                 rope-cache",
                layout.name()
            ),
        ));
    }
    let counts = match &section {
        Value::Array(items) if items.len() == 3 => items
            .iter()
            .map(|v| v.as_u64().filter(|&n| n <= u64::from(MAX_SECTION)).map(|n| n as u32))
            .collect::<Option<Vec<u32>>>(),
        _ => None,
    };
    let Some([t, h, w]) = counts.as_deref().map(|c| [c[0], c[1], c[2]]) else {
        return Err(invalid(
            format!("{key}.mrope_section"),
            excerpt(&section),
            "three whole numbers in 0..=32768 (time, height and width frequencies)",
        ));
    };
    Ok(Some((layout, [t, h, w], true)))
}

/// Config classes whose `hidden_size` and `num_attention_heads` defaults posenc reads where a
/// config leaves them out: `(model_type, hidden_size, num_attention_heads)`, each the same in
/// every transformers version since the family was added (Llama's 4096 and 32 since 4.28,
/// Mistral's since 4.34, Qwen2's since 4.37; 5.24 gives head dim 128). The text configs of
/// LLaVA 1.5, Video-LLaVA, InstructBLIP-Vicuna, LLaVA-NeXT-Mistral, Idefics2 and Qwen2-Audio
/// leave them out, as a 7B model's are the defaults.
const CLASS_SIZES: &[(&str, u64, u64)] =
    &[("llama", 4096, 32), ("mistral", 4096, 32), ("qwen2", 4096, 32)];

/// The keys a family's config class stores under another name (its `attribute_map`,
/// transformers 5.24), for the keys the RoPE's reading takes: `(model_type, key read,
/// the name the class keeps it under)`. A config may give either; both keys set one
/// attribute, so two different values are refused.
const ATTRIBUTE_ALIASES: &[(&str, &str, &str)] = &[
    ("bailing_hybrid", "max_position_embeddings", "model_max_length"),
    ("codegen", "max_position_embeddings", "n_positions"),
    ("dbrx", "hidden_size", "d_model"),
    ("dbrx", "max_position_embeddings", "max_seq_len"),
    ("dbrx", "num_attention_heads", "n_heads"),
    ("gptj", "max_position_embeddings", "n_positions"),
    ("hunyuan_vl_text", "head_dim", "attention_head_dim"),
    ("inkling2_loop_text", "max_position_embeddings", "model_max_length"),
    ("inkling2_text", "max_position_embeddings", "model_max_length"),
    ("inkling_text", "max_position_embeddings", "model_max_length"),
    ("jetmoe", "head_dim", "kv_channels"),
    ("moonshine", "num_attention_heads", "decoder_num_attention_heads"),
    ("zamba2", "head_dim", "attention_head_dim"),
];

/// Gives the key the reading takes the value of its family's other name for it
/// ([`ATTRIBUTE_ALIASES`]: JetMoE's `kv_channels` is its head dim, Moonshine's
/// `decoder_num_attention_heads` its heads), refusing two different values.
fn attribute_aliases(config: &mut Object) -> Result<()> {
    let model_type = get(config, "model_type").and_then(Value::as_str).unwrap_or("").to_owned();
    for (_, key, alias) in ATTRIBUTE_ALIASES.iter().filter(|(t, _, _)| *t == model_type) {
        let Some(value) = get(config, alias).cloned() else { continue };
        match get(config, key) {
            Some(given) if given != &value => {
                return Err(invalid(
                    *key,
                    format!("{} ({alias} {})", excerpt(given), excerpt(&value)),
                    format!(
                        "absent, or {alias}'s value: {model_type}'s config class keeps both as \
                         one attribute, {alias} (transformers 5.24)"
                    ),
                ));
            }
            _ => {
                config.insert((*key).into(), value);
            }
        }
    }
    Ok(())
}

/// HunYuan-VL's XD-RoPE (transformers 5.24's `hunyuan_vl_text`): its `mrope_section` (or the
/// hub's `xdrope_section`, which its config class renames) gives axis `k` a run of
/// `2 section[k]` values over the head, whose two halves repeat the frequencies, so the two
/// values of a pair may take the positions of two axes: not a rotation per pair, which posenc
/// does not compute. Where the
/// axes are equal (text) it is the 1-D rotation, and each axis gathers from the 1-D cache by
/// position: read for a cache (`cache`) with the section checked as its class checks it
/// (whole numbers summing to head_dim / 2), and the type `"xdrope"` read as `"dynamic"`, as
/// its config class reads it; refused for a rotation (one position per token or three).
fn xd_rope(rope: &mut Rope, head_dim: u64, cache: bool) -> Result<()> {
    let Some((map, key)) = rope.scaling.as_mut() else {
        return Err(invalid(
            "rope_scaling.xdrope_section",
            "missing",
            "four whole numbers: HunYuan-VL's rotary module reads its axes from \
             rope_scaling (transformers 5.24 fails without them)",
        ));
    };
    for type_key in ["rope_type", "type"] {
        if get(map, type_key).and_then(Value::as_str) == Some("xdrope") {
            map.insert(type_key.into(), "dynamic".into());
        }
    }
    let legacy = map.remove("xdrope_section").filter(|v| !v.is_null());
    let given = map.remove("mrope_section").filter(|v| !v.is_null());
    let numbers = |v: &Value| match v {
        Value::Array(items) => items.iter().map(Value::as_f64).collect::<Option<Vec<f64>>>(),
        _ => None,
    };
    let (field, section) = match (given, legacy) {
        (Some(g), Some(l)) if numbers(&g).is_none() || numbers(&g) != numbers(&l) => {
            return Err(invalid(
                format!("{key}.xdrope_section"),
                excerpt(&l),
                format!(
                    "absent, or mrope_section's values ({}): HunYuan-VL's config class \
                     refuses two different sections",
                    excerpt(&g)
                ),
            ));
        }
        (Some(g), _) => ("mrope_section", g),
        (None, Some(l)) => ("xdrope_section", l),
        (None, None) => {
            return Err(invalid(
                format!("{key}.xdrope_section"),
                "missing",
                "four whole numbers: HunYuan-VL's rotary module reads its axes from them \
                 (transformers 5.24 fails without them)",
            ));
        }
    };
    let half = head_dim / 2;
    let whole = numbers(&section).filter(|n| {
        n.iter().all(|v| v.fract() == 0.0 && *v >= 0.0) && n.iter().sum::<f64>() == half as f64
    });
    if whole.is_none() {
        return Err(invalid(
            format!("{key}.{field}"),
            excerpt(&section),
            format!(
                "whole numbers summing to head_dim / 2 = {half}: HunYuan-VL's config class \
                 refuses others (transformers 5.24)"
            ),
        ));
    }
    if !cache {
        return Err(invalid(
            format!("{key}.{field}"),
            excerpt(&section),
            "a model type whose RoPE posenc computes: HunYuan-VL's XD-RoPE turns the two \
             values of a pair by the positions of up to two of its axes (axis k takes a run of \
             2 section[k] values over the head, whose halves repeat the frequencies), not a \
             rotation posenc computes; posenc reads its config for the cos/sin cache by \
             position (rope-cache, rope_cache, one position per token), from which each of \
             its axes gathers",
        ));
    }
    Ok(())
}

/// The families whose rotary modules read a `"dynamic"` RoPE with a non-zero `alpha` as
/// HunYuan's NTK-alpha ([`Scaling::NtkAlpha`], transformers 5.24's `ntk_alpha`), and take
/// `"ntk_alpha"` as given.
const NTK_ALPHA_FAMILIES: &[&str] = &["hunyuan_v1_dense", "hunyuan_v1_moe", "hunyuan_vl_text"];

/// The keys HunYuan's published `"dynamic"` objects carry beside `alpha`, which its NTK-alpha
/// reads past (`factor` is one: transformers' check of a `"dynamic"` RoPE requires it).
const NTK_ALPHA_UNREAD: &[&str] = &[
    "factor",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "max_position_embeddings",
    "original_max_position_embeddings",
];

/// HunYuan's NTK-alpha, as its families' rotary modules make it of a `"dynamic"` scaling
/// object with a non-zero `alpha` (HunYuan-7B, Hunyuan-A13B, HunyuanOCR): the object becomes
/// `{"rope_type": "ntk_alpha", "alpha": ...}`, the keys those modules read past dropped; a
/// `"dynamic"` one with `alpha` 0 or null is read as plain dynamic NTK, without it. Those
/// modules read the config's `head_dim` (HunYuan-VL's `attention_head_dim` first), with no
/// fallback: a config without one is refused. Elsewhere `"ntk_alpha"` is refused.
fn ntk_alpha(config: &Object, rope: &mut Rope, model_type: &str) -> Result<()> {
    let hunyuan = NTK_ALPHA_FAMILIES.contains(&model_type);
    // HunYuan's attention takes the config's head_dim, with no fallback (transformers 5.24
    // fails to build it without one), whatever the RoPE.
    if hunyuan && get(config, "head_dim").is_none() {
        return Err(invalid(
            "head_dim",
            "missing",
            format!(
                "given: {model_type}'s attention and NTK-alpha read the config's head_dim, with \
                 no fallback to hidden_size / num_attention_heads (transformers 5.24 fails \
                 without one)"
            ),
        ));
    }
    let Some((map, key)) = rope.scaling.as_mut() else { return Ok(()) };
    let rope_type = type_of(map).unwrap_or("").to_string();
    let type_key = if get(map, "rope_type").is_some() { "rope_type" } else { "type" };
    if !hunyuan {
        if rope_type == "ntk_alpha" {
            return Err(invalid(
                format!("{key}.{type_key}"),
                "\"ntk_alpha\"",
                format!(
                    "another: ntk_alpha is HunYuan's (hunyuan_v1_dense, hunyuan_v1_moe, \
                     hunyuan_vl); {model_type:?}'s rotary module has no such type \
                     (transformers 5.24)"
                ),
            ));
        }
        return Ok(());
    }
    match rope_type.as_str() {
        "ntk_alpha" => {
            // Given by name, no check of transformers reads its keys: those its published
            // "dynamic" objects carry are read past here too.
            for k in NTK_ALPHA_UNREAD {
                map.remove(*k);
            }
        }
        "dynamic" => {
            let Some(alpha) = number(map, "alpha").map_err(under(key))?.filter(|&a| a != 0.0)
            else {
                // HF: `rope_parameters.get("alpha")` falsy: plain dynamic NTK, alpha unread.
                map.remove("alpha");
                return Ok(());
            };
            if let Some(k) = map.keys().find(|k| {
                !["rope_type", "type", "alpha"].contains(&k.as_str())
                    && !NTK_ALPHA_UNREAD.contains(&k.as_str())
            }) {
                return Err(invalid(
                    format!("{key}.{k}"),
                    excerpt(&map[k]),
                    format!(
                        "no such key for HunYuan's NTK-alpha (a \"dynamic\" RoPE with alpha); \
                         its keys are rope_type, alpha and, read past, {}",
                        NTK_ALPHA_UNREAD.join(", ")
                    ),
                ));
            }
            if number(map, "factor").map_err(under(key))?.is_none() {
                return Err(invalid(
                    format!("{key}.factor"),
                    "missing",
                    "a number: transformers' check of a \"dynamic\" RoPE requires it \
                     (HunYuan's NTK-alpha, which a non-zero alpha makes of it, does not read it)",
                ));
            }
            let mut ntk = Object::new();
            ntk.insert("rope_type".into(), "ntk_alpha".into());
            ntk.insert("alpha".into(), alpha.into());
            *map = ntk;
        }
        _ => {}
    }
    Ok(())
}

/// A config's errors, which the readers shared with `rope_scaling` objects give as
/// [`Error::RopeScaling`], as the config's own.
fn as_config_error(e: Error) -> Error {
    match e {
        Error::RopeScaling { field, value, allowed } => {
            Error::RopeConfig { path: None, field, value, allowed }
        }
        other => other,
    }
}

/// The `model_type` a config is read as (after any `text_config` swap; empty without one)
/// and its row ([`families::of_hf_config`]).
pub(super) fn config_family(json: &str) -> Result<(String, &'static Family)> {
    let config = language_model(json).map_err(as_config_error)?;
    let model_type = get(&config, "model_type").and_then(Value::as_str).unwrap_or("").to_owned();
    let family = families::of(&model_type);
    Ok((model_type, family))
}

/// Refuses a config of a family whose rotation is not one posenc computes
/// ([`Refusal::Rotation`]), naming `model_type`.
fn other_rotation(config: &Object) -> Result<()> {
    if let Some(Value::String(model_type)) = config.get("model_type")
        && let Some(Refusal::Rotation(why)) = families::of(model_type).refusal
    {
        return Err(invalid(
            "model_type",
            format!("{model_type:?}"),
            format!("another family: {why}"),
        ));
    }
    Ok(())
}

/// Refuses a config whose attention applies no RoPE by its own switch: a
/// `position_embedding_type` (or wav2vec2-conformer's plural `position_embeddings_type`,
/// relative by default) other than `rope` or `rotary` in any family (Granite 4.0-H's
/// `"nope"`, ESM's `"absolute"`), `alibi` other than false (Falcon's ALiBi), and in a family
/// that applies RoPE only on its switch ([`Family::rope_when`]) a config without it. Reading
/// a default RoPE there would be a silent wrong answer: transformers builds no rotary module.
fn no_rope_switch(config: &Object, model_type: &str, family: &Family) -> Result<()> {
    for key in ["position_embedding_type", "position_embeddings_type"] {
        if let Some(value) = get(config, key)
            && !matches!(value.as_str(), Some("rope" | "rotary"))
        {
            return Err(invalid(
                key,
                excerpt(value),
                "rope or rotary: with another, the model's attention applies no RoPE \
                 (transformers builds no rotary module)",
            ));
        }
    }
    // Falcon's (and any family's) ALiBi in place of RoPE.
    if let Some(value) = get(config, "alibi")
        && value != &Value::Bool(false)
        && !value.is_null()
    {
        return Err(invalid(
            "alibi",
            excerpt(value),
            "false or absent: with ALiBi the model's attention applies no RoPE (its biases \
             are `posenc alibi`'s)",
        ));
    }
    if let Some((key, want)) = family.rope_when {
        let given = get(config, key);
        let on = match given {
            Some(Value::String(s)) => s == want,
            Some(Value::Bool(b)) => want == if *b { "true" } else { "false" },
            _ => false,
        };
        if !on {
            return Err(invalid(
                key,
                given.map_or_else(|| "missing".to_string(), excerpt),
                format!(
                    "{}: model_type {model_type:?} applies RoPE only then (transformers \
                     builds no rotary module otherwise)",
                    if want == "true" { want.to_string() } else { format!("{want:?}") }
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses a base other than 10000 in `attn_config.rope_theta`, where DBRX keeps it
/// ([`BaseDefault::AttnConfig`]), unless a top-level `rope_theta` is given: transformers 4.x
/// read it, 5.23 builds base 10000 whatever it says, so such a base is a guess.
fn nested_base(config: &Object, family: &Family) -> Result<()> {
    if family.base == BaseDefault::AttnConfig
        && get(config, "rope_theta").is_none()
        && let Some(Value::Object(attn)) = config.get("attn_config")
        && let Some(nested) = number(attn, "rope_theta")?
        && nested != DEFAULT_BASE
    {
        return Err(invalid(
            "attn_config.rope_theta",
            float(nested),
            "10000, or a top-level rope_theta: transformers 4.x used this base, 5.23 \
             ignores it (base 10000); give the one your model runs with as a top-level \
             rope_theta in the config (a flag or RopeSpec::with_base cannot: the config is \
             refused as read)",
        ));
    }
    Ok(())
}

/// The refusal of a Gemma 4 `full_attention` layer whose `rope_type` is not proportional,
/// naming the type's key (`rope_type`, else `type`) under the scaling object's, or
/// `rope_scaling` where there is none.
fn gemma4_full_not_proportional(rope: &Rope) -> Error {
    let (field, value) = match &rope.scaling {
        Some((map, key)) => {
            let type_key = if get(map, "rope_type").is_some() { "rope_type" } else { "type" };
            (
                format!("{key}.{type_key}"),
                get(map, type_key).map_or_else(|| "missing".into(), excerpt),
            )
        }
        None => ("rope_scaling".to_string(), "missing".to_string()),
    };
    invalid(
        field,
        value,
        "\"proportional\" for Gemma 4's full_attention layers (the head dim other \
         types are built over differs between transformers versions: head_dim in \
         5.5-5.12, global_head_dim in 5.23)",
    )
}

/// How the rotated dimensions pair: as the family always does ([`PairingRule::Always`]),
/// else gptj where `rope_interleave` is true (when absent, for DeepSeek's
/// `qk_rope_head_dim` only), neox otherwise. `rope_interleave` is checked in every family.
fn pairing(config: &Object, family: &Family, deepseek: bool) -> Result<Pairing> {
    let interleave = match get(config, "rope_interleave") {
        Some(Value::Bool(b)) => *b,
        None => deepseek,
        Some(other) => return Err(invalid("rope_interleave", excerpt(other), "true or false")),
    };
    Ok(match family.pairing {
        PairingRule::Always(pairing) => pairing,
        PairingRule::Config if interleave => Pairing::Gptj,
        PairingRule::Config => Pairing::Neox,
    })
}

/// The frequency base (`theta`, the [`Rope`]'s, where given), and the key a base out of
/// range is named by: the one it was read from (`rope_theta`, or GPT-NeoX's
/// `rotary_emb_base`). Without one, 10000, unless the family's config class has another
/// default ([`BaseDefault::Class`]): refused, as class defaults differ between versions.
fn base(
    config: &Object,
    theta: Option<f64>,
    model_type: &str,
    family: &Family,
) -> Result<(f64, &'static str)> {
    let value = match theta {
        Some(t) => t,
        None => match family.base {
            BaseDefault::Class(given) => {
                return Err(invalid(
                    "rope_theta",
                    "missing",
                    format!(
                        "given: model_type \"{model_type}\" is not at 10000 when it is absent \
                         (transformers' config class: {given}, as of 5.23, or 5.24 for the \
                         families new there; class defaults differ between versions)"
                    ),
                ));
            }
            BaseDefault::Generic | BaseDefault::AttnConfig => DEFAULT_BASE,
        },
    };
    let neox_base = theta.is_some()
        && number(config, "rope_theta")?.is_none()
        && get(config, "rotary_emb_base").is_some();
    Ok((value, if neox_base { "rotary_emb_base" } else { "rope_theta" }))
}

impl RopeSpec {
    /// The RoPE a Hugging Face model's `config.json` defines, as transformers builds its
    /// rotary module from it.
    ///
    /// - base: `rope_theta` (or GPT-NeoX's `rotary_emb_base`), 10000 when absent; absent in a
    ///   family whose config class defaults it otherwise ([`BaseDefault::Class`]: Mixtral,
    ///   Llama 4, GPT-OSS, ...), it is refused.
    /// - scaling: the legacy `rope_scaling` object (`type` read for `rope_type`; Phi-3's
    ///   `"su"` is longrope), or transformers 5's `rope_parameters`, which also holds
    ///   `rope_theta` and may hold `partial_rotary_factor`. Per-layer-type
    ///   `rope_parameters` (`{"full_attention": {...}, "sliding_attention": {...}}`, Gemma
    ///   3) need `layer_type`; a legacy Gemma 3 config's `rope_local_base_freq` is the
    ///   unscaled base of `layer_type` `"sliding_attention"`.
    /// - ModernBERT (`modernbert`, `modernbert-decoder`): two RoPEs, so `layer_type` is
    ///   required; `full_attention` reads `global_rope_theta` (160000 when absent) and
    ///   `sliding_attention` `local_rope_theta` (10000), in the published form and for a
    ///   per-layer-type entry without `rope_theta`; `rope_scaling` applies to both; a
    ///   top-level `rope_theta` (which transformers ignores there) is refused.
    /// - a per-layer-type entry without `rope_theta`: Gemma 3's family (`gemma3_text`,
    ///   `gemma3n_text`, `t5gemma2_text`, `t5gemma2_decoder`) gives sliding_attention
    ///   `rope_local_base_freq` (1e4 when absent; also in the legacy form, which then needs
    ///   `layer_type`) and full_attention `rope_theta` (1e6); OLMo 3 full_attention
    ///   `rope_theta` (5e5) and sliding_attention 5e5 (another top-level value is refused
    ///   there); LFM3 `rope_theta` (1e6), its legacy form refused; other families the
    ///   top-level `rope_theta`.
    /// - `max_position_embeddings` is passed to dynamic, yarn and longrope; a top-level
    ///   `original_max_position_embeddings` (Phi-3) is the original length of llama3, yarn
    ///   and longrope, over the scaling object's, as transformers 5 reads it (not for
    ///   per-layer-type parameters); a longrope or yarn without `factor` takes
    ///   `max_position_embeddings / original`.
    /// - head dim: `head_dim`, else the config class's default where transformers 4.57 to
    ///   5.23 agree on one other than hidden / heads ([`HeadDimDefault::Settled`]: Gemma 3's
    ///   256, Qwen3's 128, ...; refused where they differ, [`HeadDimDefault::Unsettled`]), else
    ///   `hidden_size / num_attention_heads` (GPT-J's `n_embd / n_head`); DeepSeek's
    ///   `qk_rope_head_dim` (the rotated part of each query and key head) when given.
    /// - rotary dim: `int(head_dim * partial_rotary_factor)`, as transformers 5.23 reads the
    ///   factor for the family (`model_type`, after any `text_config` swap). A layer type's
    ///   (or `rope_parameters`') own factor wins over the top-level one, which fills it when
    ///   absent (two different values are refused). GPT-NeoX's `rotary_pct` and GPT-J's,
    ///   CodeGen's and MiniMax-M2's `rotary_dim` are read in those families only; elsewhere
    ///   transformers ignores them, and a value other than the whole head is refused.
    ///   By family, for a `"default"` RoPE:
    ///   - [`PartialDefault::Reads`] (Phi, GLM, GPT-NeoX, StableLM, Qwen3-Next, ...):
    ///     their own default reads the factor; without one, their config class's default
    ///     (GLM and Phi 0.5, GPT-NeoX and Qwen3-Next 0.25, Moonshine 0.9, ...), which every
    ///     rope type of theirs reads too. Bamba's class replaces a top-level factor by 0.5.
    ///   - [`PartialDefault::FullHead`] (Gemma 3, Gemma 4, OLMo 3, ...): the whole head.
    ///   - every other family, unknown or missing `model_type` included: transformers 5's
    ///     default spans the whole head, 4.x's generic one `int(head_dim * factor)` dims, so
    ///     a factor other than 1 is refused, naming the key and the `model_type` (the CLI's
    ///     `--rotary-dim` chooses either).
    ///
    ///   Other rope types read the factor in every family.
    /// - MiMo-V2-Flash, Laguna, Mellum, Zaya, NeoMME (`mimo_v2_flash`, `laguna`, `mellum`,
    ///   `zaya`, `neomme`): their config classes copy no top-level value into the layer types'
    ///   parameters. Per-layer-type `rope_parameters` are required, each with its `rope_theta`
    ///   (NeoMME: else the top-level one, else 1e6 full / 1e4 sliding); a default layer (any
    ///   layer for NeoMME) rotates `int(head_dim * factor)` dims with its entry's factor, else
    ///   the family's: MiMo 0.334, NeoMME 0.25 full / 1 sliding, 1 otherwise. A top-level
    ///   factor beside such a layer without one is refused: transformers applies it only as a
    ///   side effect of another layer's non-default type (in sorted order), or never.
    /// - `rope_type` `"proportional"` (Gemma 4's full-attention layers): the rotary dim is
    ///   the whole head, and `partial_rotary_factor` sets how many of its frequencies are
    ///   not zero ([`Scaling::Proportional`]).
    /// - Gemma-family head dims (`gemma4_text`,
    ///   `gemma4_unified_text`, `embedding_gemma2_text`, `diffusion_gemma_text`): a layer
    ///   type's head dim is its layers' `head_dim` override in `per_layer_config` (layer
    ///   indices into `layer_types`; the layers of a type must agree), else `head_dim`;
    ///   without `per_layer_config`, `full_attention` takes `global_head_dim` (512 when
    ///   absent). A `global_head_dim` beside `per_layer_config` that disagrees with it, and a
    ///   null one, are refused. Gemma 4's `full_attention` `rope_type` must be
    ///   `"proportional"` (transformers versions disagree on other types' width).
    /// - pairing: gptj (interleaved) for the families of [`PairingRule::Always`] `Gptj`
    ///   (every family whose attention rotates adjacent pairs in transformers 5.23: GPT-J,
    ///   Cohere, GLM, Llama 4, ERNIE 4.5, Helium, ...) and for DeepSeek (`qk_rope_head_dim`,
    ///   unless `rope_interleave` is false); neox otherwise, and for MiniCPM3 and HunYuan V4
    ///   ([`PairingRule::Always`] `Neox`: `qk_rope_head_dim` rotated by halves,
    ///   `rope_interleave` not read). NanoChat, whose `rotate_half` turns pairs by `-p * w`,
    ///   is refused (`model_type`). (transformers' `DeepseekV3` regroups each head as (even,
    ///   odd) dimensions before a neox rotation: its output is the gptj one in that order.)
    /// - refused by `model_type` (after the `text_config` swap), as applying no RoPE or one
    ///   posenc does not compute: `kimi_linear`, `glm5_next_text` (NoPE), `inkling2_text` (a
    ///   relative position bias), `deepseek_v4` (the trailing slice of each head),
    ///   `musicflamingo` (an audio rotary time embedding at the top level), `nanochat`.
    /// - a multimodal RoPE (M-RoPE: Qwen2-VL, Qwen3-VL, GLM-4V, ERNIE 4.5 VL, ...) reads as
    ///   the 1-D RoPE of text positions where the config gives no `mrope_section`, and is
    ///   refused naming it where it does: [`RopeSpec::from_hf_config_multimodal`] reads the
    ///   axes.
    ///
    /// A multimodal config whose language model sits under `text_config` is read from
    /// there when the top level has no head dimension.
    ///
    /// # Errors
    /// [`Error::RopeConfig`] naming the key (`rope_scaling.factor`, `layer_type`,
    /// `hidden_size`, ...), its value and what is allowed: malformed JSON, a value that is
    /// not a config object, a missing or unknown layer type (listing the known ones), an
    /// unknown `rope_type` or a field it does not use, mrope, a non-integral head dim, a
    /// partial rotary factor giving an odd rotary dim, a head dim out of range, a base out
    /// of range (named as `rope_theta` or `rotary_emb_base`), a Gemma 4 `full_attention`
    /// layer whose `rope_type` is not `"proportional"` (naming
    /// `rope_parameters.full_attention.rope_type`).
    pub fn from_hf_config(json: &str, layer_type: Option<&str>) -> Result<RopeSpec> {
        Self::read_hf_config(json, layer_type, None)
    }

    /// [`RopeSpec::from_hf_config`], with `head_dim` standing in for the config's head dim
    /// where posenc cannot read one: absent with no `hidden_size` and `num_attention_heads`,
    /// or a class default that differs between transformers versions
    /// ([`HeadDimDefault::Unsettled`]). A head dim the config gives (or its family's settled class
    /// default) is read as before; the rotary dim follows from the head dim used.
    ///
    /// # Errors
    /// As [`RopeSpec::from_hf_config`], less the missing head dim.
    pub fn from_hf_config_with_head_dim(
        json: &str,
        layer_type: Option<&str>,
        head_dim: u32,
    ) -> Result<RopeSpec> {
        Self::read_hf_config(json, layer_type, Some(head_dim))
    }

    /// The pairing whose cos/sin cache has the layout the rotary module of `json`'s family
    /// returns ([`Family::module`]; the family as [`RopeSpec::from_hf_config`] reads it, after
    /// any `text_config` swap): what a cache standing in for that module needs, which is not
    /// always the pairing its attention rotates. GLM-4 rotates `(2i, 2i + 1)` pairs, and its
    /// module returns `cat(freqs, freqs)`: a cache in the attention's layout there gives wrong
    /// rotations without any shape error.
    ///
    /// ```
    /// use posenc::rope::{Pairing, RopeSpec};
    ///
    /// let glm4 = r#"{"model_type": "glm4", "head_dim": 128, "rope_theta": 10000.0}"#;
    /// assert_eq!(RopeSpec::from_hf_config(glm4, None)?.pairing(), Pairing::Gptj);
    /// assert_eq!(RopeSpec::module_pairing(glm4)?, Pairing::Neox);
    /// # Ok::<(), posenc::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ModelFamily`] naming `model_type` when its module returns something else than
    /// cos and sin of shape `[positions, rotary_dim]` (Llama 4's and DeepSeek-V2's complex
    /// `freqs_cis`, gpt-oss's half-width tables, GPT-J's and CodeGen's half-width sin then
    /// cos, RoFormer's one table); [`Error::RopeConfig`] for text that is not a
    /// config object, and [`Error::ModelFamily`] for a family whose positions are not rotary,
    /// as [`RopeSpec::from_hf_config`].
    pub fn module_pairing(json: &str) -> Result<Pairing> {
        let (model_type, family) = families::of_hf_config(json)?;
        family.module.pairing().map_err(|what| Error::ModelFamily {
            path: None,
            model_type,
            reason: format!(
                "{what}, not cos and sin of shape [positions, rotary_dim]; give the pairing \
                 (neox or gptj) for a cache in either layout"
            ),
        })
    }

    /// [`RopeSpec::from_hf_config`] (with `head_dim` as
    /// [`RopeSpec::from_hf_config_with_head_dim`] takes it) for a cache by position, which
    /// also reads a multimodal RoPE (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5,
    /// GLM-4V, PaddleOCR-VL, ...; [`Family::mrope`](families::Family::mrope)): its
    /// `mrope_section` (else the family's default) comes back as a [`MultimodalRope`], and
    /// the spec is the 1-D RoPE whose cos and sin each of its axes gathers. A family without
    /// M-RoPE gives `None`.
    ///
    /// ```
    /// use posenc::rope::RopeSpec;
    ///
    /// let qwen25_vl = r#"{"model_type": "qwen2_5_vl", "hidden_size": 3584,
    ///     "num_attention_heads": 28, "rope_theta": 1000000.0,
    ///     "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}"#;
    /// let (spec, mrope) = RopeSpec::from_hf_config_multimodal(qwen25_vl, None, None)?;
    /// assert_eq!((spec.head_dim(), spec.base()), (128, 1e6));
    /// let mrope = mrope.unwrap();
    /// assert_eq!(mrope.section(), [16, 24, 24]);
    /// // Frequencies 0..16 take the time axis, 16..40 the height, 40..64 the width.
    /// assert_eq!(&mrope.axes()[14..18], &[0, 0, 1, 1]);
    /// // A rotation needs a position per axis: RopeSpec::from_hf_config refuses it.
    /// assert!(RopeSpec::from_hf_config(qwen25_vl, None).is_err());
    /// # Ok::<(), posenc::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`RopeSpec::from_hf_config`]; [`Error::RopeConfig`] naming `mrope_section` unless
    /// it is three whole numbers that fit its layout and the rotary dim
    /// ([`MultimodalRope::for_rotary_dim`]; also the family's default, where the config has
    /// none), and for `mrope_section` in a family without M-RoPE.
    pub fn from_hf_config_multimodal(
        json: &str,
        layer_type: Option<&str>,
        head_dim: Option<u32>,
    ) -> Result<(RopeSpec, Option<MultimodalRope>)> {
        Self::read(json, layer_type, head_dim, true).map_err(as_config_error)
    }

    fn read_hf_config(
        json: &str,
        layer_type: Option<&str>,
        stand_in: Option<u32>,
    ) -> Result<RopeSpec> {
        Ok(Self::read(json, layer_type, stand_in, false).map_err(as_config_error)?.0)
    }

    /// [`RopeSpec::read_hf_config`] before its errors are named as the config's; `cache`:
    /// [`RopeSpec::from_hf_config_multimodal`]'s reading.
    fn read(
        json: &str,
        layer_type: Option<&str>,
        stand_in: Option<u32>,
        cache: bool,
    ) -> Result<(RopeSpec, Option<MultimodalRope>)> {
        let mut config = language_model(json)?;
        // transformers 5 takes `rope_scaling or rope_parameters`: an empty rope_scaling is
        // none (4.x failed on it, reading a rope type of None).
        if matches!(config.get("rope_scaling"), Some(Value::Object(m)) if m.is_empty()) {
            config.remove("rope_scaling");
        }
        attribute_aliases(&mut config)?;
        other_rotation(&config)?;
        let model_type = get(&config, "model_type").and_then(Value::as_str).unwrap_or("");
        let family = families::of(model_type);
        no_rope_switch(&config, model_type, family)?;
        nested_base(&config, family)?;
        let mut rope = rope(&config, layer_type, model_type, family)?;
        if model_type == "hunyuan_vl_text" {
            let (d, _) = head_dim(&config, model_type, family, stand_in.map(u64::from))?;
            xd_rope(&mut rope, d, cache)?;
        }
        let mrope = multimodal_keys(&mut rope, model_type, family, cache)?;
        ntk_alpha(&config, &mut rope, model_type)?;
        // No scaling object (the legacy form without rope_scaling) is a default RoPE.
        let rope_type = match &rope.scaling {
            Some((map, _)) => type_of(map),
            None => Some("default"),
        };
        let proportional = rope_type == Some("proportional");
        // Cosmos 3 Edge's config class (its `validate_architecture`) raises on any other
        // rope type, as ERNIE 4.5 VL's rotary module does.
        let cosmos3_edge = model_type == "cosmos3_edge_text";
        let default_only = match model_type {
            "cosmos3_edge_text" => Some("Cosmos 3 Edge's config class"),
            "ernie4_5_vl_moe_text" => Some("ERNIE 4.5 VL's rotary module"),
            _ => None,
        };
        // Before the type's own keys are read, whose absence transformers never reaches.
        if let Some(who) = default_only
            && rope_type != Some("default")
        {
            let key = rope.scaling.as_ref().map_or("rope_scaling", |(_, key)| key.as_str());
            return Err(invalid(
                format!("{key}.rope_type"),
                format!("{:?}", rope_type.unwrap_or("")),
                format!("default: {who} refuses any other (transformers 5.24)"),
            ));
        }
        let (mut head_dim, deepseek) =
            head_dim(&config, model_type, family, stand_in.map(u64::from))?;
        if let LayerRule::PerLayerHead { gemma4 } = family.layers
            && let Some(t) = layer_type
        {
            // Gemma 4's full layers: another type than proportional was built over head_dim
            // before transformers 5.23, over the layer's head dim since; refused.
            if gemma4 && t == "full_attention" && !proportional {
                return Err(gemma4_full_not_proportional(&rope));
            }
            head_dim = per_layer_head_dim(&config, t, head_dim)?;
        }
        // These families' own default RoPE spans the whole head.
        // (HunYuan's NTK-alpha spans the config's head_dim, as its default does.)
        let full_head_default = matches!(rope_type, Some("default" | "ntk_alpha"))
            && family.partial == PartialDefault::FullHead;
        let rotary = if deepseek || proportional || full_head_default {
            head_dim
        } else {
            rotary_dim(
                &config,
                head_dim,
                (model_type, family),
                layer_type,
                &rope,
                rope_type == Some("default"),
            )?
        };
        let (scaling, scaling_key) = match rope.scaling {
            Some((mut map, key)) => {
                if proportional {
                    proportional_factor(&config, &mut map, &key, rope.partial_rotary_factor)?;
                }
                (scaling(&config, map, &key, rope.per_layer, family)?, key)
            }
            None => (Scaling::None, "rope_scaling".to_string()),
        };
        let pairing = pairing(&config, family, deepseek)?;
        // Past u32 the builder could only see a saturated value: named here as given.
        let (Ok(head_dim), Ok(rotary)) = (u32::try_from(head_dim), u32::try_from(rotary)) else {
            let key = if deepseek { "qk_rope_head_dim" } else { "head_dim" };
            return Err(invalid(key, head_dim.to_string(), "a number in 2..=65536"));
        };
        let (theta, base_key) = base(&config, rope.theta, model_type, family)?;
        // The builders' range errors, as the config's own: typed `RopeConfig`, so a caller
        // (the CLI) can name the file.
        let as_config = |e: Error| match e {
            Error::InvalidParameter { field, value, allowed } => invalid(field, value, allowed),
            other => other,
        };
        let spec = RopeSpec::partial(head_dim, rotary)
            .map_err(as_config)?
            .with_base(theta)
            .map_err(|e| match e {
                Error::InvalidParameter { field: "base", value, allowed } => {
                    invalid(base_key, value, allowed)
                }
                other => other,
            })?
            .with_pairing(pairing)
            .with_scaling(scaling)
            .map_err(under(&scaling_key))?;
        if cosmos3_edge
            && let Some((_, section, _)) = mrope
            && section.iter().map(|&n| u64::from(n)).sum::<u64>() != u64::from(head_dim / 2)
        {
            return Err(invalid(
                format!("{scaling_key}.mrope_section"),
                format!("{section:?} for head_dim {head_dim}"),
                "three counts summing to head_dim / 2: Cosmos 3 Edge's config class refuses \
                 others (transformers 5.24)",
            ));
        }
        // Only a cache reads the axes; a rotation of text positions (one per token) is the
        // 1-D one without them, but ERNIE 4.5 VL's module fails to build for a section that
        // does not fit, whatever the positions.
        let mrope = match mrope {
            Some((layout, section, given)) if cache || layout == Mrope::Alternating => {
                let m = MultimodalRope { layout, section, freqs: 0 };
                Some(m.for_rotary_dim(rotary).map_err(|e| match e {
                    Error::InvalidParameter { value, allowed, .. } if given => {
                        invalid(format!("{scaling_key}.mrope_section"), value, allowed)
                    }
                    Error::InvalidParameter { value, allowed, .. } => invalid(
                        format!("{scaling_key}.mrope_section"),
                        format!("missing: {model_type}'s class default {value}"),
                        allowed,
                    ),
                    other => other,
                })?)
                .filter(|_| cache)
            }
            _ => None,
        };
        Ok((spec, mrope))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_searched_by_bisection_are_sorted() {
        assert!(CLASS_LAYER_TYPES.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
