//! What posenc knows of each Hugging Face `model_type`, one row per family: how its attention
//! pairs dimensions, what its config class fills in when a config leaves a RoPE field out (and
//! whether transformers versions agree on it), how its default RoPE reads
//! `partial_rotary_factor`, its per-layer-type rule, and why posenc refuses it, if it does.
//!
//! [`RopeSpec::from_hf_config`](super::RopeSpec::from_hf_config) reads every config through
//! [`lookup`]; a `model_type` without a row (or a config without one) reads as transformers'
//! generic RoPE ([`Family::GENERIC`]). The rows were found by reading transformers 5.23's
//! configuration and modeling files and by building each family's rotary module (and 5.24's,
//! 2026-12-02; the `not_rotary` rows of classes with head counts but no rotary code in their
//! modeling files come from `scripts/families.py`'s candidates); the columns
//! a script can re-derive from an installed transformers (class defaults) are re-derived by
//! `scripts/families.py` (see the README's "The family table").
//!
//! `model_type` is the one a config carries after any `text_config` swap (a multimodal
//! config's language model), except for [`Refusal::NotRotary`], which is read before it too.

use std::fmt;

use super::Pairing;

/// One `model_type`'s row.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Family {
    /// The `model_type`, as transformers spells it.
    pub model_type: &'static str,
    /// How the family's attention pairs the rotated dimensions.
    pub pairing: PairingRule,
    /// The base when the config has no `rope_theta`.
    pub base: BaseDefault,
    /// The head dim when the config has no `head_dim`.
    pub head_dim: HeadDimDefault,
    /// How a `"default"` RoPE reads `partial_rotary_factor`, and the factor when absent.
    pub partial: PartialDefault,
    /// A family-specific key for the rotary width (GPT-NeoX's `rotary_pct`, GPT-J's
    /// `rotary_dim`), read in this family only.
    pub rotary_key: Option<RotaryKey>,
    /// How per-layer-type RoPEs and their bases are filled in.
    pub layers: LayerRule,
    /// Keys the family's RoPE parameters carry for its attention, not its rotation, which
    /// its config class exempts from transformers' check of those parameters
    /// (`ignore_keys_at_rope_validation`): read past, where any other key a rope type does
    /// not use is refused. Ministral 3's and Mistral 4's `llama_4_scaling_beta` scales the
    /// queries by position after the rotation; their `max_position_embeddings` there is
    /// unread (transformers reads the config's own).
    pub attention_keys: &'static [&'static str],
    /// A config key and the value it must have for the family's attention to apply RoPE at
    /// all (Granite 4.0 Hybrid's `position_embedding_type`, `"rope"`: absent or anything
    /// else, transformers builds no rotary module, as for Granite 4.0-H's `"nope"`); a
    /// config without it is refused; `"true"` stands for a JSON `true` (Zamba 2's
    /// `use_mem_rope`). In every family a `position_embedding_type` other than `rope` or
    /// `rotary` is refused.
    pub rope_when: Option<(&'static str, &'static str)>,
    /// What the family's own rotary module returns, which a cache standing in for it must
    /// match (`posenc rope-cache --config`, Python's `rope_cache`): not always the layout of
    /// the pairing its attention rotates.
    pub module: ModuleLayout,
    /// A multimodal RoPE (M-RoPE): how the family's rotary module gives each frequency the
    /// position of one of three axes (time, height, width), and the `mrope_section` it
    /// uses when the config has none. `None`: one position per token.
    pub mrope: Option<(Mrope, [u32; 3])>,
    /// The base of the default RoPE the config class builds for a config with neither
    /// `rope_parameters` nor `rope_scaling`, whatever its `rope_theta` says (transformers
    /// 5.24: Moonshine Streaming's 1e4, Cosmos 3 Edge's 1e8, ...): read so, a `rope_theta`
    /// of another value refused. (A row with a [`LegacyRope`] refuses that form beside a
    /// `rope_theta`: its class builds a scaled RoPE of its own.)
    pub own_base: Option<f64>,
    /// Phi-3's config class (Phi-3, Phi-4 multimodal; transformers 4.x and 5): a scaled
    /// RoPE is longrope (`su` and `yarn` read as longrope, any type but `default` and
    /// `longrope` refused), and its original length is the config's top-level
    /// `original_max_position_embeddings`, else this class default, whatever the scaling
    /// object says.
    pub longrope_only: Option<u64>,
    /// Why posenc refuses the family, if it does.
    pub refusal: Option<Refusal>,
}

/// What a family's rotary module returns (transformers 5.23 and 5.24, read in each module's
/// `forward` and checked by serving every causal LM family that builds small through
/// `posenc.hf`, whose cache takes this layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleLayout {
    /// cos and sin of shape `[positions, rotary_dim]` as `cat(freqs, freqs)`, the layout of
    /// [`Pairing::Neox`]: Llama, Qwen, Mistral, and most families whose attention rotates
    /// `(2i, 2i + 1)` pairs (GLM, GLM-4, ERNIE 4.5, Helium, DeepSeek-V3), whose apply
    /// function takes the first half and repeats it per pair, or regroups the query.
    Halves,
    /// cos and sin of shape `[positions, rotary_dim]` with each frequency repeated per pair
    /// (`repeat_interleave(2)`), the layout of [`Pairing::Gptj`]: Cohere, Cohere 2, BLT.
    Pairs,
    /// Something else than cos and sin of shape `[positions, rotary_dim]`, or no module:
    /// what, for the error.
    Other(&'static str),
}

impl ModuleLayout {
    /// The pairing whose cache has this layout, or for [`ModuleLayout::Other`] what the
    /// module returns instead.
    pub fn pairing(self) -> Result<Pairing, &'static str> {
        match self {
            ModuleLayout::Halves => Ok(Pairing::Neox),
            ModuleLayout::Pairs => Ok(Pairing::Gptj),
            ModuleLayout::Other(what) => Err(what),
        }
    }
}

/// How a family's attention pairs the rotated dimensions, in transformers 5.23 (found by
/// rotating a query with every model's own rotary module and apply function).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairingRule {
    /// As the config says: [`Pairing::Gptj`] when `rope_interleave` is true (its default is
    /// true beside DeepSeek's `qk_rope_head_dim`: DeepSeek V3, GLM-4.7-Flash, Mistral 4, ...),
    /// [`Pairing::Neox`] otherwise.
    Config,
    /// This pairing whatever `rope_interleave` says: `Gptj` for the families whose attention
    /// rotates adjacent pairs (`rotate_half` over `x[..., 0::2]`/`x[..., 1::2]` with cos/sin
    /// repeated per pair, GPT-J's `rotate_every_two`, Llama 4's and DeepSeek V2's
    /// `view_as_complex`, RoFormer's stacked sinusoids, MLA families without a switch);
    /// `Neox` for the MLA families that rotate their `qk_rope_head_dim` slice by plain
    /// `rotate_half` halves (MiniCPM3, HunYuan V4).
    Always(Pairing),
}

/// The base when a config has no `rope_theta`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BaseDefault {
    /// 10000, the default of transformers' generic RoPE.
    Generic,
    /// The config class gives another (found by instantiating each 5.23 class without it,
    /// with and without `rope_parameters`). A config without `rope_theta` is refused: a saved
    /// config always carries it, class defaults have changed between versions, and reading
    /// 10000 would be a silent wrong answer.
    Class(ClassBase),
    /// DBRX: the base sits in `attn_config.rope_theta`, which transformers 4.x read and 5.23
    /// ignores (10000): a value other than 10000 there is refused unless a top-level
    /// `rope_theta` says which base the model runs with.
    AttnConfig,
}

/// What a config class gives a config without `rope_theta`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClassBase {
    /// The base, beside given `rope_parameters` (and in the legacy form when `legacy` is
    /// `None`).
    pub base: f64,
    /// The RoPE the class builds in the legacy form (no `rope_parameters`), where it is not
    /// a default one over `base`.
    pub legacy: Option<LegacyRope>,
}

/// A scaled RoPE a config class builds for a config without `rope_parameters`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LegacyRope {
    /// Its `rope_type` (a [`ROPE_TYPES`](super::ROPE_TYPES) value).
    pub rope_type: &'static str,
    /// Its `factor`.
    pub factor: f64,
    /// Its base.
    pub base: f64,
}

/// The head dim when a config has no `head_dim` (nor DeepSeek's `qk_rope_head_dim`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadDimDefault {
    /// `hidden_size / num_attention_heads` (GPT-J's `n_embd / n_head`), refused unless whole.
    Computed,
    /// The config class's own default, the same in transformers 4.57, 5.0, 5.12 and 5.23
    /// wherever the class exists (Gemma 3's published text configs give none: 256).
    Settled(u32),
    /// The config class's default in 5.23, which differs in the other versions compared
    /// (absent, computed, or the class new in 5.23): refused, naming it, unless the caller
    /// passes the head dim.
    Unsettled(u32),
    /// As `Unsettled`, with 5.23's default `2 * hidden_size / num_attention_heads` (Zamba).
    UnsettledDoubled,
}

/// How a family's `"default"` RoPE reads `partial_rotary_factor` (transformers 5 gives each
/// family its own `compute_default_rope_parameters`; 4.x had one generic one that read it).
/// Other rope types read the factor in every family.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PartialDefault {
    /// Transformers 5 builds the default RoPE over the whole head, 4.x's generic default over
    /// `int(head_dim * factor)` dims: a factor other than 1 is refused.
    Generic,
    /// The family's own default reads the factor (found in each modeling file, and checked
    /// by building the module with factors 1 and 0.5) and rotates `int(head_dim * factor)`
    /// dims; when the config has none, its config class's: `legacy` in the legacy form (no
    /// `rope_parameters`) without `rope_scaling`, `given` beside given `rope_parameters` or a
    /// `rope_scaling` (transformers 5.24 puts it in the place of the parameters a class fills
    /// in). Every rope type of the family reads that default.
    Reads {
        /// The class default in the legacy form without `rope_scaling`.
        legacy: f64,
        /// The class default beside given `rope_parameters` or `rope_scaling`.
        given: f64,
        /// Whether a top-level factor is read (Bamba's class replaces it by its default).
        top_level: bool,
    },
    /// The family's default RoPE spans the whole head: the factor, top-level or per layer
    /// type, is ignored there.
    FullHead,
}

/// A family-specific key for the rotary width, read when no `partial_rotary_factor` is
/// given; elsewhere transformers ignores it, and a value other than the whole head is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RotaryKey {
    /// GPT-NeoX's `rotary_pct`, a factor.
    RotaryPct,
    /// GPT-J's, CodeGen's and MiniMax-M2's `rotary_dim`, a count of dims.
    RotaryDim,
}

/// How a family fills in per-layer-type RoPEs and their bases (transformers 5.23's
/// `convert_rope_params_to_dict` and the legacy forms' readers).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LayerRule {
    /// A per-layer-type entry without `rope_theta` takes the top-level one (10000 when
    /// absent, refused where the class defaults it otherwise, as for a single RoPE).
    Generic,
    /// Gemma 3's family: `sliding_attention` takes `rope_local_base_freq`, else 1e4 (never
    /// the top-level `rope_theta`), `full_attention` the top-level `rope_theta`, else 1e6; a
    /// legacy config has two RoPEs too (sliding 1e4, unscaled), so a layer type is required.
    Gemma3,
    /// OLMo 3: `full_attention` the top-level `rope_theta`, else 5e5, and `rope_scaling`;
    /// `sliding_attention` 5e5, unscaled (its class pops `rope_theta` twice; 4.x gave both
    /// `rope_theta`, so another top-level value is refused beside such a layer).
    Olmo3,
    /// LFM3: the top-level `rope_theta`, else 1e6; the legacy form (where its class uses its
    /// own parameters and ignores `rope_theta`) is refused.
    Lfm3,
    /// ModernBERT: `global_rope_theta` (full_attention, 160000 when absent) and
    /// `local_rope_theta` (sliding_attention, 10000); a layer type is required, and
    /// `rope_scaling` applies to both; a top-level `rope_theta` (ignored by transformers) is
    /// refused.
    ModernBert,
    /// The config class copies no top-level `rope_theta` or `partial_rotary_factor` into the
    /// layer types' parameters, which are required, each with its `rope_theta`; a default
    /// layer rotates `int(head_dim * factor)` dims with its entry's factor, else this one
    /// (MiMo-V2-Flash 0.334, Laguna, Mellum, Zaya 1).
    NoCopy(f64),
    /// NeoMME: as [`LayerRule::NoCopy`], but its class fills 0.25 (full_attention) and 1
    /// (sliding_attention) into every layer type whatever its rope type, and a missing
    /// `rope_theta` from the top-level one, else 1e6 / 1e4.
    NeoMme,
    /// The config class builds one RoPE per layer type from its own defaults when a config
    /// has no `rope_parameters`, ignoring a top-level `rope_theta` for some or all of them
    /// (transformers 5.24: Beam, Dory, dots.llm3's text model, UltraBERT): that form is
    /// refused, and so is a layer type's entry without its `rope_theta`. With `one_object`
    /// the class copies one object with its `rope_theta` into every layer type
    /// (dots.llm3), which is read so; otherwise such an object is refused (the layers
    /// fail on it).
    OwnDefaults {
        /// One object is every layer type's.
        one_object: bool,
    },
    /// Step 3.5's legacy form: every layer type is a default RoPE over `rope_theta`, and
    /// `rope_scaling` applies to the full_attention layers only; per-layer lists are not
    /// read (a `rope_theta` list, and `partial_rotary_factors` other than all 1, are refused).
    Step3p5,
    /// A layer type's head dim is its layers' `head_dim` override in transformers 5.23's
    /// `per_layer_config`, else `head_dim`; without `per_layer_config`, full_attention takes
    /// `global_head_dim` (512 when absent). With `gemma4`, a full_attention layer's
    /// `rope_type` must be `"proportional"` (transformers 5.5-5.12 built other types over
    /// `head_dim`, 5.23 over the layer's).
    PerLayerHead {
        /// Gemma 4's full_attention rule.
        gemma4: bool,
    },
}

/// How a multimodal RoPE's rotary module (Qwen2-VL's, Qwen3-VL's, GLM-4V's, ...) gives
/// each of its `rotary_dim / 2` frequencies the position of one axis (0 time, 1 height,
/// 2 width), from its three `mrope_section` counts `[s0, s1, s2]` (transformers 5.24, each
/// module's `recomposition_frequencies`). Every axis's cos and sin come from the one
/// inverse frequency per pair, so a 1-D cache by position holds what each axis gathers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mrope {
    /// Qwen2-VL's: frequencies in three runs, the first `s0` from axis 0, the next `s1`
    /// from axis 1, the last `s2` from axis 2; the module splits its frequencies by the
    /// section, so `s0 + s1 + s2` must be all of them.
    Sections,
    /// Qwen3-VL's: frequency `i` takes axis 1 when `i % 3 == 1` and `i < 3 s1`, axis 2
    /// when `i % 3 == 2` and `i < 3 s2`, axis 0 otherwise (`s0` is not read); any section
    /// assigns every frequency.
    Interleaved,
    /// ERNIE 4.5 VL's: the first `s0 + s1` frequencies alternate between axis 1 (even `i`)
    /// and axis 2 (odd `i`), the rest take axis 0. Its module stores the height and width
    /// frequencies reordered and interleaves them back, so each frequency keeps its own
    /// inverse frequency; it stacks the two runs and splits the frequencies by the section,
    /// so `s0` must equal `s1`, `s2` must be at least 1 and `s0 + s1 + s2` must be all of
    /// them.
    Alternating,
}

impl Mrope {
    /// The axis (0, 1 or 2) whose position frequency `i` takes, for `section`.
    pub fn axis(self, section: [u32; 3], i: u32) -> u8 {
        match self {
            Mrope::Sections => {
                if i < section[0] {
                    0
                } else if i - section[0] < section[1] {
                    1
                } else {
                    2
                }
            }
            Mrope::Interleaved => {
                let below = |n: u32| u64::from(i) < 3 * u64::from(n);
                match i % 3 {
                    1 if below(section[1]) => 1,
                    2 if below(section[2]) => 2,
                    _ => 0,
                }
            }
            Mrope::Alternating => {
                if u64::from(i) < u64::from(section[0]) + u64::from(section[1]) {
                    1 + (i % 2) as u8
                } else {
                    0
                }
            }
        }
    }

    /// Its name in errors, docs and metadata: `sections`, `interleaved` or `alternating`.
    pub fn name(self) -> &'static str {
        match self {
            Mrope::Sections => "sections",
            Mrope::Interleaved => "interleaved",
            Mrope::Alternating => "alternating",
        }
    }
}

/// Why posenc refuses a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its positions are not rotary (absolute sinusoids, learned position tables, relative
    /// biases, ALiBi): reading a default RoPE out of its head dims would be a silent wrong
    /// answer ([`Error::ModelFamily`](crate::Error::ModelFamily)).
    NotRotary,
    /// Its attention applies no RoPE, or a rotation posenc does not compute (found by reading
    /// every `rotate_half`-like function, apply function and text attention without a rotary
    /// module in transformers 5.23's modeling files), with the reason
    /// ([`Error::RopeConfig`](crate::Error::RopeConfig) naming `model_type`).
    Rotation(&'static str),
}

impl Family {
    /// The row of a `model_type` posenc knows nothing particular of: transformers' generic
    /// RoPE.
    pub const GENERIC: Family = row("");
}

/// Every row, sorted by `model_type`.
pub fn all() -> &'static [Family] {
    FAMILIES
}

/// The row of `model_type`, if posenc has one.
///
/// ```
/// use posenc::rope::Pairing;
/// use posenc::rope::families::{self, PairingRule};
///
/// assert_eq!(families::lookup("glm4").unwrap().pairing, PairingRule::Always(Pairing::Gptj));
/// assert!(families::lookup("llama").is_none()); // the generic RoPE
/// ```
pub fn lookup(model_type: &str) -> Option<&'static Family> {
    FAMILIES.binary_search_by(|f| f.model_type.cmp(model_type)).ok().map(|i| &FAMILIES[i])
}

/// The `model_type` a config is read as by
/// [`RopeSpec::from_hf_config`](super::RopeSpec::from_hf_config) (the language model's, after
/// any `text_config` swap; empty without one) and its row, or [`Family::GENERIC`].
///
/// ```
/// use posenc::rope::families::{self, ModuleLayout};
///
/// let (model_type, family) = families::of_hf_config(r#"{"model_type": "cohere2"}"#)?;
/// assert_eq!((model_type.as_str(), family.module), ("cohere2", ModuleLayout::Pairs));
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// # Errors
/// As [`RopeSpec::from_hf_config`](super::RopeSpec::from_hf_config) for text that is not a
/// config object ([`Error::RopeConfig`](crate::Error::RopeConfig)) or a family whose positions
/// are not rotary ([`Error::ModelFamily`](crate::Error::ModelFamily)).
pub fn of_hf_config(json: &str) -> crate::Result<(String, &'static Family)> {
    super::config::config_family(json)
}

/// The row of `model_type`, or [`Family::GENERIC`].
pub(crate) fn of(model_type: &str) -> &'static Family {
    lookup(model_type).unwrap_or(&Family::GENERIC)
}

impl fmt::Display for ClassBase {
    /// As the errors name it: `base 500000`, or `base 10000 beside rope_parameters, else yarn
    /// scaling (factor 16) over base 1000000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "base {}", self.base)?;
        if let Some(l) = self.legacy {
            write!(
                f,
                " beside rope_parameters, else {} scaling (factor {}) over base {}",
                l.rope_type, l.factor, l.base
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for HeadDimDefault {
    /// The default as the errors name it: `128`, `2 * hidden_size / num_attention_heads`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeadDimDefault::Computed => f.write_str("hidden_size / num_attention_heads"),
            HeadDimDefault::Settled(d) | HeadDimDefault::Unsettled(d) => write!(f, "{d}"),
            HeadDimDefault::UnsettledDoubled => {
                f.write_str("2 * hidden_size / num_attention_heads")
            }
        }
    }
}

// The rows are written with these builders, one line each.

const fn row(model_type: &'static str) -> Family {
    Family {
        model_type,
        pairing: PairingRule::Config,
        base: BaseDefault::Generic,
        head_dim: HeadDimDefault::Computed,
        partial: PartialDefault::Generic,
        rotary_key: None,
        layers: LayerRule::Generic,
        attention_keys: &[],
        rope_when: None,
        module: ModuleLayout::Halves,
        mrope: None,
        own_base: None,
        longrope_only: None,
        refusal: None,
    }
}

impl Family {
    const fn gptj(self) -> Self {
        Family { pairing: PairingRule::Always(Pairing::Gptj), ..self }
    }
    const fn neox(self) -> Self {
        Family { pairing: PairingRule::Always(Pairing::Neox), ..self }
    }
    const fn base(self, base: f64) -> Self {
        Family { base: BaseDefault::Class(ClassBase { base, legacy: None }), ..self }
    }
    const fn base_legacy(self, base: f64, rope_type: &'static str, factor: f64, of: f64) -> Self {
        let legacy = Some(LegacyRope { rope_type, factor, base: of });
        Family { base: BaseDefault::Class(ClassBase { base, legacy }), ..self }
    }
    const fn attn_config_base(self) -> Self {
        Family { base: BaseDefault::AttnConfig, ..self }
    }
    const fn head(self, dim: u32) -> Self {
        Family { head_dim: HeadDimDefault::Settled(dim), ..self }
    }
    const fn unsettled(self, dim: u32) -> Self {
        Family { head_dim: HeadDimDefault::Unsettled(dim), ..self }
    }
    const fn unsettled_doubled(self) -> Self {
        Family { head_dim: HeadDimDefault::UnsettledDoubled, ..self }
    }
    const fn partial(self, legacy: f64, given: f64) -> Self {
        Family { partial: PartialDefault::Reads { legacy, given, top_level: true }, ..self }
    }
    const fn no_top_level_factor(self) -> Self {
        let partial = match self.partial {
            PartialDefault::Reads { legacy, given, .. } => {
                PartialDefault::Reads { legacy, given, top_level: false }
            }
            _ => panic!("no_top_level_factor without a partial default"),
        };
        Family { partial, ..self }
    }
    const fn full_head(self) -> Self {
        Family { partial: PartialDefault::FullHead, ..self }
    }
    const fn reads(self, key: RotaryKey) -> Self {
        Family { rotary_key: Some(key), ..self }
    }
    const fn layers(self, layers: LayerRule) -> Self {
        Family { layers, ..self }
    }
    const fn attention_keys(self, keys: &'static [&'static str]) -> Self {
        Family { attention_keys: keys, ..self }
    }
    const fn rope_when(self, key: &'static str, value: &'static str) -> Self {
        Family { rope_when: Some((key, value)), ..self }
    }
    const fn module_pairs(self) -> Self {
        Family { module: ModuleLayout::Pairs, ..self }
    }
    const fn module_other(self, what: &'static str) -> Self {
        Family { module: ModuleLayout::Other(what), ..self }
    }
    const fn axes(self, mrope: Mrope, section: [u32; 3]) -> Self {
        Family { mrope: Some((mrope, section)), ..self }
    }
    const fn own_base(self, base: f64) -> Self {
        Family { own_base: Some(base), ..self }
    }
    const fn longrope_only(self, original: u64) -> Self {
        Family { longrope_only: Some(original), ..self }
    }
    const fn not_rotary(self) -> Self {
        Family { refusal: Some(Refusal::NotRotary), ..self }
    }
    const fn refused(self, why: &'static str) -> Self {
        Family { refusal: Some(Refusal::Rotation(why)), ..self }
    }
}

// The query scale of the Mistral families since Ministral 3: `1 + beta * ln(1 + floor(p /
// original_max_position_embeddings))`, applied to the rotated queries by their attention.
const LLAMA_4_SCALING: &[&str] = &["llama_4_scaling_beta", "max_position_embeddings"];

// What the modules without a cos/sin cache's shape return, as the errors say.

const FREQS_CIS: &str = "its rotary module returns complex freqs_cis";
const HALF_WIDTH: &str = "its rotary module returns cos and sin of half the rotary width";
const SIN_COS_TABLE: &str =
    "its rotary module returns sin then cos (in that order) of half the rotary width";
const ROFORMER_TABLE: &str = "its position module returns one table of sines then cosines, \
    [positions, head_dim]";

// Why each family is refused for its rotation (`Refusal::Rotation`), as the errors say.

const NANOCHAT: &str = "NanoChat's rotate_half returns (x2, -x1): each pair turns by -p * w, which \
    neither pairing (neox, gptj) computes";

const ZAMBA: &str = "Zamba applies no RoPE: its shared attention blocks build no rotary \
                     module (transformers 5.24), and its other layers are Mamba";
const KIMI_LINEAR: &str = "Kimi Linear applies no RoPE: its MLA layers build no rotary module \
    (NoPE; qk_rope_head_dim only sizes the shared key slice) and its other layers are linear \
    attention";

const GLM5_NEXT_TEXT: &str = "GLM-5 Next's DSA attention applies no RoPE (NoPE: its config class \
    requires qk_rope_head_dim 0)";

const INKLING_TEXT: &str = "Inkling's text attention (Inkling 2's and its loop model's too) \
    applies no RoPE: positions enter as a learned relative position bias";

const NEVER_CALLED: &str = "its attention applies no RoPE: it builds no rotary module, and the \
    apply_rotary_pos_emb of its modeling file is never called";

const MOSHI_DEPTH: &str = "Moshi's depth decoder builds its layers with use_rope=False: it \
    applies no RoPE";

const CLVP_ENCODER: &str = "CLVP's encoder rotates the values as well as the queries and keys, \
    over max(projection_dim // (2 * heads), 32) dims at base 10000";

const SPEECH_ROTARY: &str = "its speech encoder applies RoPE only where position_embeddings_type \
    is rotary (relative by default), takes its base from rotary_embedding_base, and returns cos \
    and sin stacked in one tensor";

const LIGHTGLUE: &str = "LightGlue's cos and sin come from a learned projection of keypoint \
    coordinates, not from token positions";

const PATCHES_2D: &str = "its RoPE is a 2-D one over image patches (base 100, the prefix tokens \
    not rotated), not a rotation by one position per token";

const AXIAL: &str = "its RoPE is a 2-D (axial) one over image patches (rope_type axial in \
    transformers 5.24), not a rotation by one position per token";

const DEEPSEEK_V4: &str = "DeepSeek V4 rotates the trailing slice of each head (interleaved), with \
    rope_parameters keyed main/compress rather than by layer type, and turns the attention output \
    back by -p; posenc rotates the leading rotary dims";

const MUSICFLAMINGO: &str = "MusicFlamingo's top-level head_dim and rope_parameters are its audio \
    encoder's rotary time embedding (angles scaled by timestamps); its language model's RoPE is \
    the text_config's, to be read on its own";

use LayerRule::{
    Gemma3, Lfm3, ModernBert, NeoMme, NoCopy, Olmo3, OwnDefaults, PerLayerHead, Step3p5,
};
use Mrope::{Alternating, Interleaved, Sections};
use RotaryKey::{RotaryDim, RotaryPct};

/// The table, sorted by `model_type` (a test checks it, and the rows against each other).
static FAMILIES: &[Family] = &[
    row("afmoe").head(128),
    row("aimv2_text_model").not_rotary(),
    row("aimv2_vision_model").not_rotary(),
    row("albert").not_rotary(),
    row("align_text_model").not_rotary(),
    row("altclip_text_model").not_rotary(),
    row("altclip_vision_model").not_rotary(),
    row("apertus").base_legacy(12e6, "llama3", 8.0, 12e6),
    // New in transformers 5.24 (its class bases; 2026-12-02), as are exaone and sarvam_moe.
    row("apertus1p5_text").base_legacy(12e6, "llama3", 8.0, 12e6),
    row("audio-spectrogram-transformer").not_rotary(),
    row("audioflamingo3_encoder").not_rotary(),
    row("autoformer").not_rotary(),
    row("axk1").unsettled(64),
    row("axk2").gptj().unsettled(32),
    row("bailing_hybrid").gptj().base(6e6).unsettled(64),
    row("bamba").partial(0.5, 0.5).no_top_level_factor(),
    row("bart").not_rotary(),
    row("beam").unsettled(128).layers(OwnDefaults { one_object: false }),
    row("beit").not_rotary(),
    row("bert").not_rotary(),
    row("bert-generation").not_rotary(),
    row("big_bird").not_rotary(),
    row("bigbird_pegasus").not_rotary(),
    row("biogpt").not_rotary(),
    row("bitnet").base(5e5),
    row("blenderbot").not_rotary(),
    row("blenderbot-small").not_rotary(),
    row("blip_2_qformer").not_rotary(),
    row("blip_2_vision_model").not_rotary(),
    row("blip_text_model").not_rotary(),
    row("blip_vision_model").not_rotary(),
    row("bloom").not_rotary(),
    row("blt").base(5e5).module_pairs(),
    row("blt_global_transformer").gptj().base(5e5).module_pairs(),
    row("blt_local_decoder").gptj().base(5e5).module_pairs(),
    row("blt_local_encoder").gptj().base(5e5).module_pairs(),
    row("blt_patcher").gptj().module_pairs(),
    row("bridgetower").not_rotary(),
    row("bridgetower_text_model").not_rotary(),
    row("bros").not_rotary(),
    row("camembert").not_rotary(),
    row("canary_decoder").unsettled(128),
    row("canine").not_rotary(),
    row("chinese_clip_text_model").not_rotary(),
    row("chinese_clip_vision_model").not_rotary(),
    row("clap_audio_model").not_rotary(),
    row("clap_text_model").not_rotary(),
    row("clip_text_model").not_rotary(),
    row("clip_vision_model").not_rotary(),
    row("clipseg_text_model").not_rotary(),
    row("clipseg_vision_model").not_rotary(),
    row("clvp_decoder").not_rotary(),
    row("clvp_encoder").refused(CLVP_ENCODER),
    row("coarse_acoustics").not_rotary(),
    row("codegen").gptj().reads(RotaryDim).module_other(SIN_COS_TABLE),
    row("cohere").gptj().base(5e5).module_pairs(),
    row("cohere2").gptj().module_pairs(),
    row("cohere2_moe").gptj().head(128).module_pairs(),
    row("cohere_compass_vision").refused(AXIAL),
    row("conditional_detr").not_rotary(),
    row("convbert").not_rotary(),
    row("cosmos3_edge_text").base(1e8).unsettled(128).axes(Interleaved, [24, 20, 20]).own_base(1e8),
    row("cpmant").not_rotary(),
    row("csm").base(5e5),
    row("csm_depth_decoder_model").base(5e5),
    row("ctrl").not_rotary(),
    row("cvt").not_rotary(),
    row("cwm").base_legacy(1e6, "llama3", 16.0, 1e6).head(128),
    row("d_fine").not_rotary(),
    row("dab-detr").not_rotary(),
    row("data2vec-audio").not_rotary(),
    row("data2vec-text").not_rotary(),
    row("data2vec-vision").not_rotary(),
    row("dbrx").attn_config_base(),
    row("deberta").not_rotary(),
    row("deberta-v2").not_rotary(),
    row("decision_transformer").not_rotary(),
    row("deepseek_v2").gptj().unsettled(64).module_other(FREQS_CIS),
    row("deepseek_v3").unsettled(64),
    row("deepseek_v32").gptj().head(64),
    row("deepseek_v4").refused(DEEPSEEK_V4),
    row("deformable_detr").not_rotary(),
    row("deimv2").not_rotary(),
    row("deit").not_rotary(),
    row("detr").not_rotary(),
    row("dia_decoder").head(128),
    row("dia_encoder").head(128),
    row("diffusion_gemma_text").partial(1.0, 1.0).layers(PerLayerHead { gemma4: false }),
    row("dinat").not_rotary(),
    row("dinov2").not_rotary(),
    row("dinov2_with_registers").not_rotary(),
    row("dinov3_vit").refused(PATCHES_2D),
    row("distilbert").not_rotary(),
    row("donut-swin").not_rotary(),
    row("dory").unsettled(256).layers(OwnDefaults { one_object: false }),
    row("dots3_note_audio_encoder").partial(1.0, 1.0),
    row("dots3_note_text").gptj().partial(0.25, 0.25).layers(OwnDefaults { one_object: true }),
    row("dots3_note_vision_encoder").refused(AXIAL),
    row("dpr").not_rotary(),
    row("dpt").not_rotary(),
    row("edgetam_mask_decoder").not_rotary(),
    row("edgetam_video").refused(AXIAL),
    row("efficientloftr").partial(1.0, 1.0),
    row("electra").not_rotary(),
    row("embedding_gemma2_text").full_head().layers(PerLayerHead { gemma4: false }),
    row("emu3_text_model").base(1e6),
    row("eomt").not_rotary(),
    row("eomt_dinov3").base(100.0),
    row("ernie").not_rotary(),
    row("ernie4_5").gptj().base(5e5).head(128),
    row("ernie4_5_moe").gptj().base(5e5),
    row("ernie4_5_vl_moe_text")
        .gptj()
        .base(5e5)
        .full_head()
        .module_pairs()
        .axes(Alternating, [22, 22, 20]),
    // ESM's rotary embedding only with position_embedding_type "rotary" (ESM-2's); its
    // class default is "absolute".
    row("ernie4_5_vl_moe_vision").refused(AXIAL),
    row("esm").rope_when("position_embedding_type", "rotary"),
    row("evolla").base(5e5),
    row("exaone").base(5e5),
    row("exaone4_5_vision").refused(AXIAL),
    row("fastspeech2_conformer").not_rotary(),
    row("fine_acoustics").not_rotary(),
    row("flaubert").not_rotary(),
    row("flava_image_model").not_rotary(),
    row("flava_multimodal_model").not_rotary(),
    row("flava_text_model").not_rotary(),
    row("flex_olmo").base(5e5),
    row("flint").unsettled(128),
    row("florence_vision").not_rotary(),
    row("fsmt").not_rotary(),
    row("fun_asr_nano_encoder").not_rotary(),
    row("funnel").not_rotary(),
    row("gemma").head(256),
    row("gemma2").head(256),
    row("gemma3_text").head(256).full_head().layers(Gemma3),
    row("gemma3n_text").head(256).full_head().layers(Gemma3),
    row("gemma4_text").full_head().layers(PerLayerHead { gemma4: true }),
    row("gemma4_unified_text").full_head().layers(PerLayerHead { gemma4: true }),
    row("gemma4_vision").refused(AXIAL),
    row("git").not_rotary(),
    row("git_vision_model").not_rotary(),
    row("glm").gptj().head(128).partial(0.5, 0.5),
    row("glm4").gptj().head(128).partial(0.5, 0.5),
    row("glm4_moe").partial(0.5, 0.5),
    row("glm4_moe_lite").unsettled(64).partial(1.0, 1.0),
    row("glm4v_moe_text").partial(0.5, 0.5).axes(Sections, [8, 12, 12]),
    row("glm4v_moe_vision").refused(AXIAL),
    row("glm4v_text").gptj().partial(1.0, 1.0).module_pairs().axes(Sections, [8, 12, 12]),
    row("glm4v_vision").refused(AXIAL),
    row("glm5_next_text").refused(GLM5_NEXT_TEXT),
    row("glm5_next_vision").refused(AXIAL),
    row("glm_image_text").partial(1.0, 1.0).axes(Sections, [8, 12, 12]),
    row("glm_moe_dsa").gptj().head(64),
    row("glm_ocr_text").gptj().partial(1.0, 1.0).module_pairs().axes(Sections, [8, 12, 12]),
    row("glm_ocr_vision").refused(AXIAL),
    row("glmasr_encoder").partial(0.5, 0.5),
    row("glpn").not_rotary(),
    row("got_ocr2_vision").not_rotary(),
    row("gpt2").not_rotary(),
    row("gpt_bigcode").not_rotary(),
    row("gpt_neo").not_rotary(),
    row("gpt_neox").partial(0.25, 0.25).no_top_level_factor().reads(RotaryPct),
    row("gpt_neox_japanese").partial(1.0, 1.0).no_top_level_factor().reads(RotaryPct),
    row("gpt_oss").base_legacy(15e4, "yarn", 32.0, 15e4).head(64).module_other(HALF_WIDTH),
    row("gptj").gptj().reads(RotaryDim).module_other(SIN_COS_TABLE),
    row("granite_speech5_encoder").not_rotary(),
    row("granite_speech_encoder").not_rotary(),
    row("granite_speech_plus_encoder").not_rotary(),
    // Granite 4.0 Hybrid builds a rotary module only for "rope" (Granite 4.0-H: "nope").
    row("granitemoehybrid").rope_when("position_embedding_type", "rope"),
    row("grounding-dino").not_rotary(),
    row("groupvit_text_model").not_rotary(),
    row("groupvit_vision_model").not_rotary(),
    row("gte").base(16e4),
    row("helium").gptj().base(1e5).head(128),
    row("hiera").not_rotary(),
    row("higgs_audio_v2").base_legacy(1e4, "llama3", 32.0, 5e5).head(128),
    row("hrm_text").head(128),
    row("hubert").not_rotary(),
    // HunYuan's rotary modules span head_dim whatever partial_rotary_factor says, in their
    // default RoPE and their NTK-alpha (a "dynamic" RoPE with alpha).
    row("hunyuan_v1_dense").full_head(),
    row("hunyuan_v1_moe").full_head(),
    row("hunyuan_vl_text").full_head(),
    row("hy_v3").base(11_158_840.0).head(128),
    row("hy_v4").neox().unsettled(64),
    row("ibert").not_rotary(),
    row("idefics2_vision").not_rotary(),
    row("idefics3_vision").not_rotary(),
    row("ijepa").not_rotary(),
    row("imagegpt").not_rotary(),
    row("informer").not_rotary(),
    row("inkling2_loop_text").refused(INKLING_TEXT),
    row("inkling2_text").refused(INKLING_TEXT),
    row("inkling2_vision").refused(AXIAL),
    row("inkling_text").refused(INKLING_TEXT),
    row("inkling_vision").not_rotary(),
    row("instructblip_qformer").not_rotary(),
    row("instructblip_vision_model").not_rotary(),
    row("instructblipvideo_qformer").not_rotary(),
    row("instructblipvideo_vision_model").not_rotary(),
    row("internlm3").unsettled(128),
    row("internvl_vision").not_rotary(),
    row("iquestcoder").unsettled(128),
    row("jamba").refused(NEVER_CALLED),
    row("janus_vision_model").not_rotary(),
    row("jetmoe").unsettled(128),
    row("jina_embeddings_v3").base(2e4),
    row("kimi_k25_vision").refused(AXIAL),
    row("kimi_linear").refused(KIMI_LINEAR),
    row("kolibri1").unsettled(128),
    row("kosmos_2_5_text_model").not_rotary(),
    row("kosmos_2_5_vision_model").not_rotary(),
    row("kosmos_2_text_model").not_rotary(),
    row("kosmos_2_vision_model").not_rotary(),
    row("laguna").head(128).partial(1.0, 1.0).layers(NoCopy(1.0)),
    row("lara_mini").unsettled(128),
    row("layoutlm").not_rotary(),
    row("layoutlmv2").not_rotary(),
    row("layoutlmv3").not_rotary(),
    row("led").not_rotary(),
    row("levit").not_rotary(),
    row("lfm2").base(1e6),
    row("lfm2_moe").base(1e6),
    row("lfm3").unsettled(128).full_head().layers(Lfm3),
    row("lfm3_vl_vision").refused(AXIAL),
    row("lightglue").refused(LIGHTGLUE),
    row("lilt").not_rotary(),
    row("llama4").gptj().module_other(FREQS_CIS),
    row("llama4_text").gptj().base(5e5).head(128).module_other(FREQS_CIS),
    row("longcat_flash").gptj().base(1e7).head(64),
    row("longformer").not_rotary(),
    row("longt5").not_rotary(),
    row("luke").not_rotary(),
    row("lw_detr_vit").not_rotary(),
    row("lxmert").not_rotary(),
    row("m2m_100").not_rotary(),
    row("mamba2").not_rotary(),
    row("marian").not_rotary(),
    row("markuplm").not_rotary(),
    row("mask2former").not_rotary(),
    row("maskformer").not_rotary(),
    row("maskformer-swin").not_rotary(),
    row("mbart").not_rotary(),
    row("megatron-bert").not_rotary(),
    row("mellum").head(128).partial(1.0, 1.0).layers(NoCopy(1.0)),
    row("metaclip_2_text_model").not_rotary(),
    row("metaclip_2_vision_model").not_rotary(),
    row("mgp-str").not_rotary(),
    row("mimo_v2_flash").unsettled(192).partial(1.0, 1.0).layers(NoCopy(0.334)),
    row("minicpm3").neox().unsettled(32),
    row("minicpm_ocr_vision").not_rotary(),
    row("minicpmv4_6_vision").not_rotary(),
    row("minimax").base(1e6),
    row("minimax_m2").base(5e6).head(128).partial(1.0, 1.0).reads(RotaryDim),
    row("minimax_m3_vl_text").base(5e6).head(128).partial(1.0, 1.0),
    row("minimax_m3_vl_vision").refused(AXIAL),
    row("ministral3").base_legacy(1e4, "yarn", 16.0, 1e6).head(128).attention_keys(LLAMA_4_SCALING),
    row("mistral4")
        .base_legacy(1e4, "yarn", 128.0, 1e4)
        .unsettled(128)
        .attention_keys(LLAMA_4_SCALING),
    row("mistral_large4_text").gptj().base_legacy(1e4, "yarn", 2048.0, 1e4).unsettled(64),
    row("mixtral").base(1e6),
    row("mlcd_vision_model").refused(AXIAL),
    row("mllama_text_model").base(5e5),
    row("mm-grounding-dino").not_rotary(),
    row("mobilebert").not_rotary(),
    row("mobilevit").not_rotary(),
    row("modernbert").full_head().layers(ModernBert),
    row("modernbert-decoder").full_head().layers(ModernBert),
    row("molmo2_adapter").unsettled(72),
    row("molmo2_text").unsettled(128),
    row("molmo2_vision").unsettled(72),
    row("moonshine").gptj().partial(0.9, 0.9),
    row("moonshine_streaming").gptj().partial(0.8, 1.0).own_base(1e4),
    // Its attention takes no positions in transformers 5.24 (the decoder's module has the RoPE).
    row("moonshine_streaming_encoder").not_rotary(),
    row("moshi_depth").refused(MOSHI_DEPTH),
    row("moss_transcribe_diarize_audio").not_rotary(),
    row("mpnet").not_rotary(),
    row("mpt").not_rotary(),
    row("mra").not_rotary(),
    row("mt5").not_rotary(),
    row("muse_glimmer_assistant").base(5e5).unsettled(128),
    row("muse_glimmer_text").unsettled(128),
    row("muse_glimmer_vision").refused(AXIAL),
    row("muse_spark_text").unsettled(64).own_base(5e5),
    row("muse_spark_vision").refused(AXIAL),
    row("musicflamingo").refused(MUSICFLAMINGO),
    row("musicgen_decoder").not_rotary(),
    row("musicgen_melody_decoder").not_rotary(),
    row("mvp").not_rotary(),
    row("nanochat").refused(NANOCHAT),
    row("nemotron").partial(0.5, 0.5),
    row("nemotron3_5_transcribe_asr_audio").partial(0.5, 1.0).own_base(1e4),
    row("nemotron3_5_transcribe_audio").partial(1.0, 1.0),
    row("nemotron3_5_transcribe_word_timestamp").partial(0.5, 1.0).own_base(1e4),
    row("nemotron3_diarization").partial(1.0, 1.0),
    row("nemotron3_diarization_audio").partial(1.0, 1.0),
    row("nemotron_asr_streaming_encoder").not_rotary(),
    row("nemotron_h").refused(NEVER_CALLED),
    row("neomme").unsettled(64).partial(1.0, 1.0).layers(NeoMme),
    row("neucodec").unsettled(64),
    row("nllb-moe").not_rotary(),
    row("nomic_bert").base(1000.0),
    row("nystromformer").not_rotary(),
    row("olmo3").full_head().layers(Olmo3),
    row("omdet-turbo").not_rotary(),
    row("omniasr_audio").not_rotary(),
    row("oneformer").not_rotary(),
    row("openai-gpt").not_rotary(),
    row("openai_privacy_filter")
        .gptj()
        .base_legacy(15e4, "yarn", 32.0, 15e4)
        .head(64)
        .module_other(HALF_WIDTH),
    row("opt").not_rotary(),
    row("ovis2_vision").not_rotary(),
    row("owlv2_text_model").not_rotary(),
    row("owlv2_vision_model").not_rotary(),
    row("owlvit_text_model").not_rotary(),
    row("owlvit_vision_model").not_rotary(),
    row("paddleocr_vl_text").base(5e5).head(128).axes(Sections, [16, 24, 24]),
    row("paddleocr_vl_vision").refused(AXIAL),
    row("parakeet_encoder").not_rotary(),
    row("patchtst").not_rotary(),
    row("pe_audio_encoder").gptj().base(2e4).head(128),
    row("pe_audio_video_encoder").gptj().base(2e4).head(128),
    row("pe_video_encoder").gptj().base(2e4).head(128),
    row("pegasus").not_rotary(),
    row("pegasus_x").not_rotary(),
    row("persimmon").partial(0.5, 0.5),
    row("phi").partial(0.5, 0.5),
    row("phi3").partial(1.0, 1.0).longrope_only(4096),
    row("phi4_multimodal").partial(1.0, 1.0).longrope_only(4096),
    row("phimoe").base(1e6),
    row("pix2struct_text_model").not_rotary(),
    row("pix2struct_vision_model").not_rotary(),
    row("pixio").not_rotary(),
    row("pixtral").refused(AXIAL),
    row("plbart").not_rotary(),
    row("pop2piano").not_rotary(),
    row("pp_doclayout_v3").not_rotary(),
    row("pp_doclayout_v4").not_rotary(),
    row("pp_formulanet_text").not_rotary(),
    row("pp_formulanet_vision").not_rotary(),
    row("pp_ocrv5_mobile_rec").not_rotary(),
    row("pp_ocrv5_server_rec").not_rotary(),
    row("pp_ocrv6_small_rec").not_rotary(),
    row("prophetnet").not_rotary(),
    row("pvt").not_rotary(),
    row("pvt_v2").not_rotary(),
    row("qianfan_ocr_vision").not_rotary(),
    row("qwen2_5_omni_dit").head(64),
    row("qwen2_5_omni_talker").base(1e6).head(128).axes(Sections, [16, 24, 24]),
    row("qwen2_5_omni_text").base(1e6).axes(Sections, [16, 24, 24]),
    row("qwen2_5_omni_vision_encoder").refused(AXIAL),
    row("qwen2_5_vl_text").base(1e6).axes(Sections, [16, 24, 24]),
    row("qwen2_5_vl_vision").refused(AXIAL),
    row("qwen2_audio_encoder").not_rotary(),
    row("qwen2_vl_text").base(1e6).axes(Sections, [16, 24, 24]),
    row("qwen2_vl_vision").refused(AXIAL),
    row("qwen3").head(128),
    row("qwen3_5_moe_text").head(256).partial(0.25, 0.25).axes(Interleaved, [11, 11, 10]),
    row("qwen3_5_moe_vision").refused(AXIAL),
    row("qwen3_5_text").head(256).partial(0.25, 0.25).axes(Interleaved, [11, 11, 10]),
    row("qwen3_5_vision").refused(AXIAL),
    row("qwen3_asr_encoder").not_rotary(),
    row("qwen3_next").head(256).partial(0.25, 0.25),
    row("qwen3_omni_moe_talker_code_predictor").head(128),
    row("qwen3_omni_moe_talker_text").axes(Interleaved, [24, 20, 20]),
    row("qwen3_omni_moe_text").base(1e6).axes(Interleaved, [24, 20, 20]),
    row("qwen3_omni_moe_vision_encoder").refused(AXIAL),
    row("qwen3_vl_moe_text").base(5e5).axes(Interleaved, [24, 20, 20]),
    row("qwen3_vl_moe_vision").refused(AXIAL),
    row("qwen3_vl_text").base(5e5).head(128).axes(Interleaved, [24, 20, 20]),
    row("qwen3_vl_vision").refused(AXIAL),
    row("qwen4_exp_text").unsettled(256).partial(1.0, 1.0).axes(Interleaved, [11, 11, 10]),
    row("qwen4_exp_vision").refused(AXIAL),
    row("radio").not_rotary(),
    row("recurrent_gemma").partial(0.5, 0.5),
    row("reformer").not_rotary(),
    row("rembert").not_rotary(),
    row("rf_detr_dinov2").not_rotary(),
    row("roberta").not_rotary(),
    row("roberta-prelayernorm").not_rotary(),
    row("roc_bert").not_rotary(),
    row("roformer").gptj().module_other(ROFORMER_TABLE),
    row("rt_detr").not_rotary(),
    row("rt_detr_v2").not_rotary(),
    row("sam2_hiera_det_model").not_rotary(),
    row("sam2_mask_decoder").not_rotary(),
    row("sam2_video").refused(AXIAL),
    row("sam3_lite_text_detr_decoder").not_rotary(),
    row("sam3_lite_text_detr_encoder").not_rotary(),
    row("sam3_lite_text_geometry_encoder").not_rotary(),
    row("sam3_lite_text_mask_decoder").not_rotary(),
    row("sam3_lite_text_text_model").not_rotary(),
    row("sam3_tracker_mask_decoder").not_rotary(),
    row("sam3_tracker_video").refused(AXIAL),
    row("sam3_vit_model").refused(AXIAL),
    row("sam_hq_mask_decoder").not_rotary(),
    row("sam_hq_vision_model").not_rotary(),
    row("sam_mask_decoder").not_rotary(),
    row("sam_vision_model").not_rotary(),
    row("sapiens2").refused(PATCHES_2D),
    // Glm4MoeForCausalLM's attention, whose default RoPE reads the factor (1 by the class).
    row("sarvam_moe").base(8e6).unsettled(64).partial(1.0, 1.0),
    row("seamless_m4t").refused(SPEECH_ROTARY),
    row("seamless_m4t_v2").not_rotary(),
    row("seed_oss").head(128),
    row("segformer").not_rotary(),
    row("seggpt").not_rotary(),
    row("semantic").not_rotary(),
    row("sew").not_rotary(),
    row("sew-d").not_rotary(),
    row("siglip2_text_model").not_rotary(),
    row("siglip2_vision_model").not_rotary(),
    row("siglip_text_model").not_rotary(),
    row("siglip_vision_model").not_rotary(),
    row("slanext_vision").not_rotary(),
    row("smollm3").base(2e6),
    row("smolvlm_vision").not_rotary(),
    row("solar_open").base(1e6).head(128).partial(1.0, 1.0),
    row("speech_to_text").not_rotary(),
    row("speecht5").not_rotary(),
    row("splinter").not_rotary(),
    row("squeezebert").not_rotary(),
    row("stablelm").partial(0.25, 0.25),
    row("step3p5").unsettled(128).partial(1.0, 1.0).layers(Step3p5),
    row("step3p5_vision").refused(AXIAL),
    row("superglue").not_rotary(),
    row("swin").not_rotary(),
    row("swin2sr").not_rotary(),
    row("swinv2").not_rotary(),
    row("switch_transformers").not_rotary(),
    row("t5").not_rotary(),
    row("t5_gemma_module").head(256),
    row("t5gemma2_decoder").head(256).full_head().layers(Gemma3),
    row("t5gemma2_text").head(256).full_head().layers(Gemma3),
    row("table-transformer").not_rotary(),
    row("tapas").not_rotary(),
    row("time_series_transformer").not_rotary(),
    // TimesFM 1 and 2: an optional absolute sinusoid, no rotary module (2.5 has one).
    row("timesfm").not_rotary(),
    row("timesfm2_5").head(80),
    row("timesformer").not_rotary(),
    row("tipsv2_text_model").not_rotary(),
    row("tipsv2_vision_model").not_rotary(),
    row("trocr").not_rotary(),
    row("tvp").not_rotary(),
    row("udop").not_rotary(),
    row("ultrabert").layers(OwnDefaults { one_object: false }),
    row("umt5").not_rotary(),
    row("unispeech").not_rotary(),
    row("unispeech-sat").not_rotary(),
    row("vaultgemma").head(256),
    row("video_llama_3_vision").refused(AXIAL),
    row("videomae").not_rotary(),
    row("videomt").not_rotary(),
    row("videoprism_text_model").not_rotary(),
    row("videoprism_vision_model").not_rotary(),
    row("vilt").not_rotary(),
    row("visual_bert").not_rotary(),
    row("vit").not_rotary(),
    row("vit_mae").not_rotary(),
    row("vit_msn").not_rotary(),
    row("vitdet").not_rotary(),
    row("vitpose_backbone").not_rotary(),
    row("vits").not_rotary(),
    row("vivit").not_rotary(),
    row("voxtral_encoder").not_rotary(),
    row("voxtral_realtime_encoder").head(64),
    row("wav2vec2").not_rotary(),
    row("wav2vec2-bert").refused(SPEECH_ROTARY),
    row("wav2vec2-conformer").refused(SPEECH_ROTARY),
    row("wavlm").not_rotary(),
    row("whisper").not_rotary(),
    row("xclip_text_model").not_rotary(),
    row("xclip_vision_model").not_rotary(),
    row("xcodec2").unsettled(64),
    row("xglm").not_rotary(),
    row("xlm").not_rotary(),
    row("xlm-roberta").not_rotary(),
    row("xlm-roberta-xl").not_rotary(),
    row("xlnet").not_rotary(),
    row("xlstm").not_rotary(),
    row("xmod").not_rotary(),
    row("yolos").not_rotary(),
    row("yoso").not_rotary(),
    row("youtu").unsettled(64),
    // Zamba's attention applies no RoPE; Zamba 2's only with use_mem_rope (transformers 5.24).
    row("zamba").refused(ZAMBA),
    row("zamba2").unsettled_doubled().rope_when("use_mem_rope", "true"),
    row("zaya").unsettled(128).partial(1.0, 1.0).layers(NoCopy(1.0)),
];

/// The `model_type` transformers gives a composite (multimodal) config's `text_config` when
/// the config's own has none: the default language model of `composite`'s config class
/// (`aya_vision`'s is `cohere2`, `llava`'s `llama`, `blip-2`'s `opt`), or `None` where the
/// class has no `text_config` or its default is `composite` itself.
///
/// ```
/// use posenc::rope::families;
///
/// assert_eq!(families::text_model_type("aya_vision"), Some("cohere2"));
/// assert_eq!(families::text_model_type("llama"), None);
/// ```
pub fn text_model_type(composite: &str) -> Option<&'static str> {
    TEXT_CONFIGS.binary_search_by(|(c, _)| c.cmp(&composite)).ok().map(|i| TEXT_CONFIGS[i].1)
}

/// Every composite config class's default `text_config` type, sorted by the composite's
/// (transformers 5.24, read off each class built with its defaults by `scripts/families.py
/// snapshot`; a test checks the order, the rendered page the rest).
pub fn text_configs() -> &'static [(&'static str, &'static str)] {
    TEXT_CONFIGS
}

/// Whether `composite`'s config class builds its `text_config` as its own text config class
/// ([`text_model_type`]) whatever `model_type` the `text_config` gives (transformers 5.24:
/// the class's `sub_configs` names a class, not `AutoConfig`), where the others build the
/// one it names. A Gemma 3 or ERNIE 4.5 VL config whose `text_config` says `llama` runs as
/// Gemma 3's or ERNIE 4.5 VL's language model, and is read so.
///
/// ```
/// use posenc::rope::families;
///
/// assert!(families::text_class_is_fixed("gemma3"));
/// assert!(!families::text_class_is_fixed("llava"));
/// ```
pub fn text_class_is_fixed(composite: &str) -> bool {
    FIXED_TEXT_CLASSES.binary_search(&composite).is_ok()
}

/// The composites of [`text_class_is_fixed`], sorted (read off each 5.24 class's
/// `sub_configs`).
static FIXED_TEXT_CLASSES: &[&str] = &[
    "aimv2",
    "align",
    "altclip",
    "apertus1p5",
    "aria",
    "blip",
    "bridgetower",
    "chinese_clip",
    "clap",
    "clip",
    "clipseg",
    "clvp",
    "cohere_compass",
    "cosmos3_edge",
    "deepseek_ocr2",
    "diffusion_gemma",
    "dots3_note",
    "embedding_gemma2",
    "emu3",
    "ernie4_5_vl_moe",
    "flava",
    "gemma3",
    "gemma3n",
    "gemma4",
    "gemma4_unified",
    "glm4v",
    "glm4v_moe",
    "glm5_next",
    "glm_image",
    "glm_ocr",
    "granite4_vision",
    "granite_docling",
    "groupvit",
    "hunyuan_vl",
    "hy_v4_vl",
    "inkling2",
    "inkling2_loop",
    "inkling_mm_model",
    "kosmos-2",
    "kosmos-2.5",
    "llama4",
    "metaclip_2",
    "minimax_m3_vl",
    "mistral_large4",
    "mllama",
    "molmo2",
    "muse_glimmer",
    "muse_spark",
    "owlv2",
    "owlvit",
    "paddleocr_vl",
    "pix2struct",
    "pp_formulanet",
    "qwen2_5_omni_thinker",
    "qwen2_5_vl",
    "qwen2_vl",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_omni_moe_thinker",
    "qwen3_vl",
    "qwen3_vl_moe",
    "qwen4_exp",
    "sam3_lite_text",
    "siglip",
    "siglip2",
    "step3p7",
    "t5gemma2_encoder",
    "tipsv2",
    "unlimited_ocr",
    "videoprism",
    "xclip",
];

static TEXT_CONFIGS: &[(&str, &str)] = &[
    ("aimv2", "aimv2_text_model"),
    ("align", "align_text_model"),
    ("altclip", "altclip_text_model"),
    ("apertus1p5", "apertus1p5_text"),
    ("aria", "aria_text"),
    ("audioflamingo3", "qwen2"),
    ("aya_vision", "cohere2"),
    ("blip", "blip_text_model"),
    ("blip-2", "opt"),
    ("bridgetower", "bridgetower_text_model"),
    ("chinese_clip", "chinese_clip_text_model"),
    ("clap", "clap_text_model"),
    ("clip", "clip_text_model"),
    ("clipseg", "clipseg_text_model"),
    ("clvp", "clvp_encoder"),
    ("cohere2_vision", "cohere2"),
    ("cohere_compass", "cohere_compass_text"),
    ("cosmos3_edge", "cosmos3_edge_text"),
    ("cosmos3_omni", "qwen3_vl_text"),
    ("deepseek_ocr2", "deepseek_ocr2_text"),
    ("deepseek_vl", "llama"),
    ("deepseek_vl_hybrid", "llama"),
    ("diffusion_gemma", "diffusion_gemma_text"),
    ("dots3_note", "dots3_note_text"),
    ("embedding_gemma2", "embedding_gemma2_text"),
    ("emu3", "emu3_text_model"),
    ("ernie4_5_vl_moe", "ernie4_5_vl_moe_text"),
    ("exaone4_5", "exaone4"),
    ("fast_vlm", "qwen2"),
    ("flava", "flava_text_model"),
    ("florence2", "bart"),
    ("fun_asr_nano", "qwen3"),
    ("fuyu", "persimmon"),
    ("gemma3", "gemma3_text"),
    ("gemma3n", "gemma3n_text"),
    ("gemma4", "gemma4_text"),
    ("gemma4_assistant", "gemma4_text"),
    ("gemma4_unified", "gemma4_unified_text"),
    ("gemma4_unified_assistant", "gemma4_unified_text"),
    ("glm46v", "glm4v_text"),
    ("glm4v", "glm4v_text"),
    ("glm4v_moe", "glm4v_moe_text"),
    ("glm5_next", "glm5_next_text"),
    ("glm_image", "glm_image_text"),
    ("glm_ocr", "glm_ocr_text"),
    ("glmasr", "llama"),
    ("glmga", "glm4v_text"),
    ("got_ocr2", "qwen2"),
    ("granite4_vision", "granite4_vision_text"),
    ("granite_docling", "granite_docling_text"),
    ("granite_speech", "granite"),
    ("granite_speech_plus", "granite"),
    ("grounding-dino", "bert"),
    ("groupvit", "groupvit_text_model"),
    ("hunyuan_vl", "hunyuan_vl_text"),
    ("hy_v4_vl", "hy_v4_vl_text"),
    ("hyperclovax_vision_v2", "hyperclovax"),
    ("idefics2", "mistral"),
    ("idefics3", "llama"),
    ("inkling2", "inkling2_text"),
    ("inkling2_loop", "inkling2_loop_text"),
    ("inkling_mm_model", "inkling_text"),
    ("instructblip", "opt"),
    ("instructblipvideo", "opt"),
    ("internvl", "qwen2"),
    ("janus", "llama"),
    ("jev", "qwen3_5_text"),
    ("kimi_k25", "deepseek_v3"),
    ("kosmos-2", "kosmos_2_text_model"),
    ("kosmos-2.5", "kosmos_2_5_text_model"),
    ("lfm2_vl", "lfm2"),
    ("lfm3_vl", "lfm3"),
    ("lighton_ocr", "qwen3"),
    ("llama4", "llama4_text"),
    ("llava", "llama"),
    ("llava_next", "llama"),
    ("llava_next_video", "llama"),
    ("llava_onevision", "qwen2"),
    ("metaclip_2", "metaclip_2_text_model"),
    ("minicpm_ocr", "qwen3_5_text"),
    ("minicpmv4_6", "qwen3_5_text"),
    ("minicpmv4_7", "qwen3_5_text"),
    ("minimax_m3_vl", "minimax_m3_vl_text"),
    ("mistral3", "mistral"),
    ("mistral_large4", "mistral_large4_text"),
    ("mllama", "mllama_text_model"),
    ("mm-grounding-dino", "bert"),
    ("modernvbert", "modernbert"),
    ("molmo2", "molmo2_text"),
    ("moss_transcribe_diarize", "qwen3"),
    ("muse_glimmer", "muse_glimmer_text"),
    ("muse_spark", "muse_spark_text"),
    ("musicflamingo", "qwen2"),
    ("nemo_speechlm", "nemotron_h"),
    ("nemotron_h_omni", "nemotron_h"),
    ("omdet-turbo", "clip_text_model"),
    ("omniasr", "llama"),
    ("ovis2", "qwen2"),
    ("owlv2", "owlv2_text_model"),
    ("owlvit", "owlvit_text_model"),
    ("paddleocr_vl", "paddleocr_vl_text"),
    ("paligemma", "gemma"),
    ("pe_audio", "modernbert"),
    ("pe_audio_video", "modernbert"),
    ("pe_video", "modernbert"),
    ("perception_lm", "llama"),
    ("pix2struct", "pix2struct_text_model"),
    ("pp_chart2table", "qwen2"),
    ("pp_formulanet", "pp_formulanet_text"),
    ("qianfan_ocr", "qwen3"),
    ("qwen2_5_omni_thinker", "qwen2_5_omni_text"),
    ("qwen2_5_vl", "qwen2_5_vl_text"),
    ("qwen2_audio", "qwen2"),
    ("qwen2_vl", "qwen2_vl_text"),
    ("qwen3_5", "qwen3_5_text"),
    ("qwen3_5_moe", "qwen3_5_moe_text"),
    ("qwen3_asr", "qwen3"),
    ("qwen3_omni_moe_thinker", "qwen3_omni_moe_text"),
    ("qwen3_vl", "qwen3_vl_text"),
    ("qwen3_vl_moe", "qwen3_vl_moe_text"),
    ("qwen4_exp", "qwen4_exp_text"),
    ("sam3", "clip_text_model"),
    ("sam3_lite_text", "sam3_lite_text_text_model"),
    ("shieldgemma2", "gemma3_text"),
    ("siglip", "siglip_text_model"),
    ("siglip2", "siglip2_text_model"),
    ("smolvlm", "llama"),
    ("step3p7", "step3p5"),
    ("t5gemma2_encoder", "t5gemma2_text"),
    ("tipsv2", "tipsv2_text_model"),
    ("ultravbert", "ultrabert"),
    ("unlimited_ocr", "unlimited_ocr_text"),
    ("vibevoice", "qwen2"),
    ("vibevoice_asr", "qwen2"),
    ("video_llama_3", "qwen2"),
    ("video_llava", "llama"),
    ("videoprism", "videoprism_text_model"),
    ("vipllava", "llama"),
    ("vision-text-dual-encoder", "bert"),
    ("voxtral", "llama"),
    ("voxtral_realtime", "voxtral_realtime_text"),
    ("xclip", "xclip_text_model"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_text_classes_are_sorted_composites() {
        assert!(FIXED_TEXT_CLASSES.windows(2).all(|w| w[0] < w[1]));
        assert!(FIXED_TEXT_CLASSES.iter().all(|c| text_model_type(c).is_some()), "composites");
    }

    /// A family's attention keys are read past before its scaling is read, so none may be a
    /// key a rope type reads (`max_position_embeddings` aside: posenc reads the config's).
    #[test]
    fn attention_keys_are_no_rope_types_keys() {
        let read_elsewhere = ["rope_type", "type", "rope_theta", "partial_rotary_factor"];
        for f in all() {
            for key in f.attention_keys {
                let read = read_elsewhere.contains(key)
                    || super::super::scaling::ROPE_TYPE_KEYS
                        .iter()
                        .any(|(_, keys)| keys.contains(key) && *key != "max_position_embeddings");
                assert!(!read, "{}: {key} is a rope type's", f.model_type);
            }
        }
    }
}
