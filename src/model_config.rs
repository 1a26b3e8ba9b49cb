//! A model's absolute positions read from its Hugging Face `config.json`, as transformers
//! builds them: which sinusoid (or learned table), its width, its padding row and the
//! embedding scale, for `posenc table --config` and `posenc encode --config`.
//!
//! The families and what each reads (transformers' `modeling_<family>.py`):
//!
//! - `marian`, `pegasus`: `MarianSinusoidalPositionalEmbedding` (Pegasus copies it), `[sin |
//!   cos]` at `10000^(-2i/d)`, built in float64, positions from 0; [`Variant::Marian`].
//! - `m2m_100` (NLLB), `nllb-moe`, `fsmt`, `speech_to_text`: fairseq's sinusoid, `padding_idx =
//!   pad_token_id`, positions by fairseq's `make_positions`; [`Variant::Fairseq`].
//! - `whisper`: the encoder's `sinusoids` (added to audio features; the decoder's positions are
//!   learned); [`Variant::Whisper`], table only.
//! - `bart`, `mbart`: a learned table looked up at position + 2; [`ModelPositions::Learned`].
//!
//! The width is `d_model`; the embedding scale is `sqrt(d_model)` when `scale_embedding`
//! is true, and unknown when the config does not state it (only `encode` needs it:
//! [`ModelConfig::required_scale`]). Any other `model_type` is refused, naming it.

use serde_json::{Map, Value};

use crate::encode::Scale;
use crate::error::{Error, Result, json_number};
use crate::rope::{excerpt, parse_json};
use crate::spec::{PeSpec, Variant};

/// The `model_type`s whose positions are a sinusoid posenc computes from the config.
pub const SINUSOID_MODEL_TYPES: &[&str] =
    &["marian", "pegasus", "m2m_100", "nllb-moe", "fsmt", "speech_to_text", "whisper"];

/// The `model_type`s whose positions are a learned table read at position + 2 (BART's
/// `LearnedPositionalEmbedding` offset): posenc serves them with the checkpoint's table.
pub const LEARNED_OFFSET_MODEL_TYPES: &[&str] = &["bart", "mbart"];

/// BART's offset: its learned table's row of position `p` is `p + 2`.
const BART_OFFSET: u32 = 2;

/// Where a model's position rows come from.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ModelPositions {
    /// A sinusoid posenc computes.
    Sinusoid(PeSpec),
    /// A learned table (the checkpoint's), whose row of position `p` is `p + offset`.
    Learned {
        /// Added to every position before the lookup.
        offset: u32,
    },
}

/// What a model's `config.json` says about its absolute positions and its embedding scale
/// ([`ModelConfig::from_hf_config`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    model_type: String,
    dim: u32,
    positions: ModelPositions,
    scale: Option<Scale>,
    /// `scale_embedding` was given as null (which transformers' modules read as false):
    /// refused by [`ModelConfig::required_scale`] as null, not as missing.
    scale_null: bool,
    pad_id: Option<u32>,
    token_inputs: bool,
}

type Object = Map<String, Value>;

fn invalid(field: &str, value: impl Into<String>, allowed: impl Into<String>) -> Error {
    Error::PeConfig {
        path: None,
        field: field.to_string(),
        value: value.into(),
        allowed: allowed.into(),
    }
}

fn get<'a>(config: &'a Object, key: &str) -> Option<&'a Value> {
    config.get(key).filter(|v| !v.is_null())
}

/// A required whole number that fits a u32 and is at least `min`.
fn whole(config: &Object, key: &str, min: u32) -> Result<u32> {
    whole_in(config, key, min, &format!("a whole number in {min}..=4294967295"))
}

/// [`whole`], naming `allowed` (a range within `min..=u32::MAX`) when it refuses.
fn whole_in(config: &Object, key: &str, min: u32, allowed: &str) -> Result<u32> {
    let allowed = || allowed.to_string();
    match get(config, key) {
        None => Err(invalid(key, "missing", allowed())),
        Some(Value::Number(n)) => match n.as_u64().and_then(|v| u32::try_from(v).ok()) {
            Some(v) if v >= min => Ok(v),
            // 64.0 is in the range but a float, which the model's own code would take as a
            // size or an index and fail on: say so, not only the range (round twenty-two).
            None if n.as_f64().is_some_and(|v| {
                n.is_f64()
                    && v.fract() == 0.0
                    && (f64::from(min)..=f64::from(u32::MAX)).contains(&v)
            }) =>
            {
                Err(invalid(
                    key,
                    json_number(n),
                    format!("{}, written as an integer (without a fraction)", allowed()),
                ))
            }
            _ => Err(invalid(key, json_number(n), allowed())),
        },
        Some(other) => Err(invalid(key, excerpt(other), allowed())),
    }
}

/// `scale_embedding`, if the config states it. Its absence is no error here: only the
/// scale's users need it ([`ModelConfig::required_scale`]).
fn scale(config: &Object) -> Result<Option<Scale>> {
    match get(config, "scale_embedding") {
        Some(Value::Bool(true)) => Ok(Some(Scale::SqrtDim)),
        Some(Value::Bool(false)) => Ok(Some(Scale::None)),
        None => Ok(None),
        Some(other) => Err(invalid("scale_embedding", excerpt(other), "true or false")),
    }
}

/// Why a `model_type` outside the served families is refused.
fn unserved(config: &Object, model_type: &str) -> Error {
    // Keys only rotary configs carry, at the top level or under a multimodal model's
    // `text_config` (Gemma 3).
    const ROTARY_KEYS: [&str; 7] = [
        "rope_theta",
        "rope_scaling",
        "rope_parameters",
        "rotary_emb_base",
        "rotary_dim",
        "rotary_pct",
        "partial_rotary_factor",
    ];
    let has_rotary = |c: &Object| ROTARY_KEYS.iter().any(|k| get(c, k).is_some());
    let rotary = has_rotary(config)
        || matches!(config.get("text_config"), Some(Value::Object(text)) if has_rotary(text));
    // The ALiBi families (their attention biases are posenc alibi's, from the head count).
    const ALIBI_MODEL_TYPES: [&str; 2] = ["bloom", "mpt"];
    let reason = if rotary {
        "rotary positions (RoPE): `posenc rope --config` reads this config".to_string()
    } else if ALIBI_MODEL_TYPES.contains(&model_type) {
        "ALiBi: its attention takes linear biases, not positions added to the embeddings; \
         `posenc alibi --heads N` computes them (give the config's head count)"
            .to_string()
    } else {
        format!(
            "not a family whose absolute positions posenc computes from a config; served: {} \
             (sinusoids), {} (learned, with --position-table)",
            SINUSOID_MODEL_TYPES.join(", "),
            LEARNED_OFFSET_MODEL_TYPES.join(", ")
        )
    };
    // A hostile model_type is not echoed whole.
    let mut shown: String = model_type.chars().take(64).collect();
    if shown.len() < model_type.len() {
        shown.push_str("...");
    }
    Error::ModelFamily { path: None, model_type: shown, reason }
}

impl ModelConfig {
    /// The absolute positions of a Hugging Face model's `config.json`, for the families in
    /// [`SINUSOID_MODEL_TYPES`] and [`LEARNED_OFFSET_MODEL_TYPES`] (module docs):
    ///
    /// - `model_type` picks the family, `d_model` is the width;
    /// - `scale_embedding`, when given, gives [`Scale::SqrtDim`] or [`Scale::None`], as
    ///   transformers' `embed_scale` (whisper's is [`Scale::None`] whatever it says: no
    ///   token embedding meets its sinusoid). It may be absent, since a table does not use
    ///   it; [`ModelConfig::required_scale`] refuses its absence where the scale is used;
    /// - for the fairseq families `pad_token_id` (required) is the padding index: the
    ///   table's zero row, the number positions count from, and the pad token, whose
    ///   output rows are zeros. Marian, Pegasus and BART add positions to pad tokens like
    ///   any other token, so their `pad_token_id` plays no part here.
    ///
    /// # Errors
    /// [`Error::ModelFamily`] naming `model_type` for any other family;
    /// [`Error::PeConfig`] naming the key for malformed JSON (`(json)`), a key given
    /// twice, a missing `model_type`, `d_model` or `pad_token_id`, a value of the wrong type
    /// (`scale_embedding` included), or a `d_model` the family's variant does not allow.
    pub fn from_hf_config(json: &str) -> Result<ModelConfig> {
        let value = parse_json(json).map_err(|e| match e {
            Error::RopeScaling { field, value, allowed } => {
                Error::PeConfig { path: None, field, value, allowed }
            }
            other => other,
        })?;
        let Value::Object(config) = value else {
            return Err(invalid("(json)", excerpt(&value), "a JSON object (a config.json)"));
        };
        let model_type = match get(&config, "model_type") {
            Some(Value::String(t)) => t.clone(),
            None => return Err(invalid("model_type", "missing", "a string")),
            Some(other) => return Err(invalid("model_type", excerpt(other), "a string")),
        };
        let t = model_type.as_str();
        let sinusoid = SINUSOID_MODEL_TYPES.contains(&t);
        if !sinusoid && !LEARNED_OFFSET_MODEL_TYPES.contains(&t) {
            return Err(unserved(&config, t));
        }
        let variant = match t {
            "marian" | "pegasus" => Some(Variant::Marian),
            // NLLB-MoE's sinusoid is M2M100's (transformers 5.24, the same module).
            "m2m_100" | "nllb-moe" | "fsmt" | "speech_to_text" => Some(Variant::Fairseq),
            "whisper" => Some(Variant::Whisper),
            _ => None,
        };
        // A sinusoid's width is refused naming the variant's own range, whatever the fault.
        let dim = match variant {
            Some(variant) => whole_in(&config, "d_model", 1, variant.allowed_dims())?,
            None => whole(&config, "d_model", 1)?,
        };
        let (positions, pad_id) = match variant {
            Some(variant) => {
                let spec = PeSpec::for_variant(variant, dim).map_err(|e| match e {
                    Error::InvalidParameter { field: "dim", allowed, .. } => {
                        invalid("d_model", format!("{dim} (model_type {t})"), allowed)
                    }
                    other => other,
                })?;
                if variant == Variant::Fairseq {
                    let pad = whole(&config, "pad_token_id", 0)?;
                    (ModelPositions::Sinusoid(spec.with_padding_idx(Some(pad))), Some(pad))
                } else {
                    (ModelPositions::Sinusoid(spec), None)
                }
            }
            None => (ModelPositions::Learned { offset: BART_OFFSET }, None),
        };
        // Whisper's sinusoid meets audio features, never token embeddings: no scale applies.
        let token_inputs = t != "whisper";
        let scale = if token_inputs { scale(&config)? } else { Some(Scale::None) };
        let scale_null = matches!(config.get("scale_embedding"), Some(Value::Null));
        Ok(ModelConfig { model_type, dim, positions, scale, scale_null, pad_id, token_inputs })
    }

    /// The config's `model_type`.
    pub fn model_type(&self) -> &str {
        &self.model_type
    }

    /// The width, `d_model`.
    pub fn dim(&self) -> u32 {
        self.dim
    }

    /// Where the position rows come from.
    pub fn positions(&self) -> ModelPositions {
        self.positions.clone()
    }

    /// The sinusoid's spec, or `None` for a learned table.
    pub fn spec(&self) -> Option<PeSpec> {
        match &self.positions {
            ModelPositions::Sinusoid(spec) => Some(spec.clone()),
            ModelPositions::Learned { .. } => None,
        }
    }

    /// The embedding scale (`scale_embedding`), or `None` when the config does not state it.
    pub fn scale(&self) -> Option<Scale> {
        self.scale
    }

    /// The embedding scale, for a use that applies it (`posenc encode`): a config that does
    /// not state `scale_embedding` is refused rather than given a default, since
    /// transformers' default differs between families.
    ///
    /// ```
    /// use posenc::encode::Scale;
    /// use posenc::model_config::ModelConfig;
    ///
    /// let marian = ModelConfig::from_hf_config(r#"{"model_type": "marian", "d_model": 512}"#)?;
    /// assert_eq!(marian.scale(), None);
    /// let err = marian.required_scale().unwrap_err();
    /// assert!(err.to_string().starts_with("config.json: invalid scale_embedding: missing"));
    /// let null = r#"{"model_type": "marian", "d_model": 512, "scale_embedding": null}"#;
    /// let err = ModelConfig::from_hf_config(null)?.required_scale().unwrap_err();
    /// assert!(err.to_string().starts_with("config.json: invalid scale_embedding: null"));
    /// # Ok::<(), posenc::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::PeConfig`] naming `scale_embedding` when the config does not state it.
    pub fn required_scale(&self) -> Result<Scale> {
        self.scale.ok_or_else(|| {
            invalid(
                "scale_embedding",
                if self.scale_null { "null" } else { "missing" },
                "true or false (the family's default is not guessed)",
            )
        })
    }

    /// The pad token whose output rows are zeros (the fairseq families' `pad_token_id`),
    /// if the family has one in that sense.
    pub fn pad_id(&self) -> Option<u32> {
        self.pad_id
    }

    /// Whether the positions are added to token embeddings (`encode`); false for Whisper,
    /// whose sinusoid is added to the audio encoder's features.
    pub fn token_inputs(&self) -> bool {
        self.token_inputs
    }
}
