//! The options of posenc's commands, resolved into specs as the command line resolves them.
//!
//! `posenc table`, `encode`, `rope` and `rope-cache` take a model's convention as options: a
//! `config.json`, a variant, a base, a `rope_scaling` object, a model's own frequencies, and
//! more, each with a default from the config and rules for which may go together. This
//! module is that reading, written once: the `posenc` binary fills [`PeOptions`] and
//! [`RopeOptions`] from its flags and the Python package from its keyword arguments, so the
//! same options give the same spec in both, and the same mistakes the same message. The
//! messages name the options as the command line spells them (`--seq-len`); the Python
//! package's keywords are the flags' names.
//!
//! A program that builds its spec in code does not need this module: [`PeSpec`] and
//! [`RopeSpec`] take the same settings one by one, and [`RopeSpec::from_hf_config`] reads a
//! config. Not built for wasm32, where a config or a model's frequencies cannot be a path.
//!
//! ```
//! use posenc::commands::{ConfigSource, RopeOptions};
//!
//! let config = r#"{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
//!     "rope_theta": 500000.0}"#;
//! let options = RopeOptions { config: Some(ConfigSource::Text(config)), ..Default::default() };
//! let (spec, mrope) = options.cache_spec(None)?;
//! assert_eq!((spec.head_dim(), spec.base(), mrope), (128, 500000.0, None));
//!
//! // The command line's rule: a sequence length only where the scaling reads one.
//! let options = RopeOptions { seq_len: Some(8192), ..options };
//! assert!(options.cache_spec(None).unwrap_err().to_string().contains("--seq-len only with"));
//! # Ok::<(), posenc::Error>(())
//! ```

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use crate::inputs::{self, Source};
use crate::model_config::{ModelConfig, ModelPositions};
use crate::rope::{self, MultimodalRope, Pairing, RopeSpec, Scaling};
use crate::{DEFAULT_BASE, Error, Frequencies, PeSpec, Result, Variant};

/// A Hugging Face `config.json`: a file, or its text.
#[derive(Clone, Copy, Debug)]
pub enum ConfigSource<'a> {
    /// A file, read as `--config PATH` reads it.
    File(&'a Path),
    /// The JSON text itself; errors call it `config.json`.
    Text(&'a str),
}

impl ConfigSource<'_> {
    /// The file errors name; `None` for text.
    pub fn path(&self) -> Option<PathBuf> {
        match self {
            Self::File(p) => Some(p.to_path_buf()),
            Self::Text(_) => None,
        }
    }
}

/// A model's own frequencies (its `inv_freq` buffer): values, or a file as `--inv-freq`
/// reads it.
#[derive(Clone, Debug)]
pub enum InvFreq<'a> {
    /// The values themselves, taken exactly.
    Values(Vec<f64>),
    /// A 1-D `.npy`, or a `.safetensors` file and the tensor to read (`--inv-freq-tensor`;
    /// `None`: its only 1-D tensor).
    File(&'a Path, Option<&'a str>),
}

impl InvFreq<'_> {
    /// The `count` frequencies; a file must hold exactly that many
    /// ([`inputs::read_inv_freq`]). A tensor named for a `.npy` file is refused in the
    /// flags' words.
    pub fn read(&self, count: usize) -> Result<Vec<f64>> {
        match self {
            Self::Values(v) => Ok(v.clone()),
            Self::File(path, tensor) => inputs::read_inv_freq(Source::File(path), *tensor, count)
                .map_err(|e| match e {
                    Error::InvalidParameter { field: "inv_freq_tensor", value, .. } => {
                        Error::InvalidParameter {
                            field: "inv_freq_tensor",
                            value,
                            allowed: "--inv-freq-tensor only with a .safetensors --inv-freq (a \
                                      .npy holds one array)",
                        }
                    }
                    other => other,
                }),
        }
    }

    /// `e`, a refusal of these frequencies' values met after they were read, naming the
    /// file they came from: the checks that find it (a table's, a RoPE's) know only the
    /// values.
    fn named(&self, e: Error) -> Error {
        let Self::File(path, _) = self else { return e };
        let path = Some(path.to_path_buf());
        match e {
            Error::InvalidParameter { field: "inv_freq", value, allowed } => {
                Error::PeConfig { path, field: "inv_freq".into(), value, allowed: allowed.into() }
            }
            other => other,
        }
    }
}

/// A Hugging Face `rope_scaling` object: JSON text, or a file holding it (`--scaling @FILE`).
#[derive(Clone, Copy, Debug)]
pub enum ScalingSource<'a> {
    /// The JSON text.
    Json(&'a str),
    /// A file; a bad field is named with the file, as a config's is.
    File(&'a Path),
}

impl ScalingSource<'_> {
    /// The scaling, read and checked.
    pub fn read(&self) -> Result<Scaling> {
        match self {
            Self::Json(text) => Scaling::from_hf_json(text),
            Self::File(path) => {
                inputs::read_rope_scaling(Source::File(path)).map_err(|e| match e {
                    Error::RopeScaling { field, value, allowed } => Error::RopeConfig {
                        path: Some(path.to_path_buf()),
                        // `(json)` names the text as a whole.
                        field: if field.starts_with('(') {
                            field
                        } else {
                            format!("rope_scaling.{field}")
                        },
                        value,
                        allowed,
                    },
                    other => other,
                })
            }
        }
    }
}

/// Refuses an option `flag`, given, without the option `needed`, which it only qualifies
/// (`--attention-factor` without `--inv-freq`): it would go unused without a word. `field`
/// and the flags are named as the other usage errors name them.
pub fn refuse_without(
    given: bool,
    field: &'static str,
    flag: &str,
    needs: bool,
    needed: &str,
) -> Result<()> {
    if given && !needs {
        return Err(Error::InvalidParameter {
            field,
            value: format!("{flag} given without {needed}"),
            allowed: "only with that flag",
        });
    }
    Ok(())
}

/// The sinusoid's options of `table` and `encode`: each `None` takes the config's value,
/// else the default.
#[derive(Clone, Debug, Default)]
pub struct PeOptions<'a> {
    /// The published convention (`--variant`) [default: the config's, else vaswani].
    pub variant: Option<Variant>,
    /// Exact frequencies, or float32 ones as the frameworks compute them (`--frequencies`).
    pub frequencies: Frequencies,
    /// A model's own frequencies in place of the variant's formula (`--inv-freq`).
    pub inv_freq: Option<InvFreq<'a>>,
    /// The frequency base (`--base`); tensor2tensor's maximum timescale when that is not
    /// given.
    pub base: Option<f64>,
    /// tensor2tensor's timescales (`--min-timescale`, `--max-timescale`).
    pub min_timescale: Option<f64>,
    /// See `min_timescale`.
    pub max_timescale: Option<f64>,
    /// The first position's number (`--start-index`) [default: 0].
    pub start_index: Option<u32>,
    /// fairseq's padding index (`--padding-idx`): `Some(None)` is `none`, no zero row.
    pub padding_idx: Option<Option<u32>>,
}

impl PeOptions<'_> {
    /// The config, read and checked. A variant other than the config's sinusoid is refused,
    /// naming both: the config's padding index, pad id and scale belong to its own
    /// convention, and another variant's columns and position numbering beside them would
    /// match no model.
    pub fn config(&self, source: ConfigSource<'_>) -> Result<ModelConfig> {
        let config = match source {
            ConfigSource::File(path) => inputs::read_model_config(Source::File(path))?,
            ConfigSource::Text(text) => ModelConfig::from_hf_config(text)?,
        };
        let own = config.spec().map(|spec| spec.variant());
        if let (Some(given), Some(own)) = (self.variant, own)
            && given != own
        {
            return Err(Error::ModelFamily {
                path: source.path(),
                model_type: config.model_type().to_string(),
                reason: format!(
                    "its positions are variant {own}; --variant {given} contradicts it: leave \
                     out --variant, or --config"
                ),
            });
        }
        Ok(config)
    }

    /// The variant: the option's, else the config's sinusoid's, else vaswani.
    pub fn variant(&self, config: Option<&PeSpec>) -> Variant {
        self.variant.or(config.map(PeSpec::variant)).unwrap_or_default()
    }

    /// The spec at dimension `dim`, over `config`'s sinusoid (its variant, and its padding
    /// index while the variant is its own) where an option is absent. A model's frequencies
    /// from a file are read once the count is known.
    pub fn spec(&self, dim: u32, config: Option<&PeSpec>) -> Result<PeSpec> {
        // What the command line's flags refuse together (clap's conflicts), refused here
        // for the callers without clap: one of each pair would go unused without a word.
        let timescales = self.min_timescale.is_some() || self.max_timescale.is_some();
        if self.inv_freq.is_some() && (self.base.is_some() || timescales) {
            return Err(Error::InvalidParameter {
                field: "inv_freq",
                value: "given beside base, min_timescale or max_timescale".into(),
                allowed: "inv_freq alone: a model's own frequencies replace the base and the \
                          timescales",
            });
        }
        if self.base.is_some() && self.max_timescale.is_some() {
            return Err(Error::InvalidParameter {
                field: "max_timescale",
                value: "given beside base".into(),
                allowed: "one of them: tensor2tensor's max_timescale is its base",
            });
        }
        let variant = self.variant(config);
        let mut spec = PeSpec::for_variant(variant, dim)?;
        if let Some(c) = config.filter(|c| c.variant() == variant) {
            spec = spec.with_padding_idx(c.padding_idx());
        }
        let t2t = variant == Variant::Tensor2Tensor;
        if !t2t && (self.min_timescale.is_some() || self.max_timescale.is_some()) {
            return Err(Error::InvalidParameter {
                field: "variant",
                value: format!("{variant} (with --min-timescale or --max-timescale)"),
                allowed: "tensor2tensor for timescales; --base sets the others' base",
            });
        }
        if t2t {
            let given_max = self.max_timescale.or(self.base);
            let max = given_max.unwrap_or(DEFAULT_BASE);
            let min = self.min_timescale.unwrap_or(1.0);
            spec = spec.with_timescales(min, max).map_err(|e| match e {
                // The default max below a good min: the min is what was given wrong.
                Error::InvalidParameter { field: "max_timescale", .. } if given_max.is_none() => {
                    Error::InvalidParameter {
                        field: "min_timescale",
                        value: format!("{min} (above max_timescale, {max} by default)"),
                        allowed: "at most max_timescale (give --max-timescale to raise it)",
                    }
                }
                e => e,
            })?;
        } else if let Some(base) = self.base {
            spec = spec.with_base(base)?;
        }
        if let Some(padding_idx) = self.padding_idx {
            if variant != Variant::Fairseq {
                return Err(Error::InvalidParameter {
                    field: "variant",
                    value: format!("{variant} (with --padding-idx)"),
                    allowed: "fairseq for --padding-idx",
                });
            }
            spec = spec.with_padding_idx(padding_idx);
        }
        if let Some(inv_freq) = &self.inv_freq {
            let count = spec.n_freqs() as usize;
            spec = spec.with_inv_freq(&inv_freq.read(count)?).map_err(|e| inv_freq.named(e))?;
        }
        Ok(spec.with_frequencies(self.frequencies).with_start_index(self.start_index.unwrap_or(0)))
    }
}

/// The sinusoid of `config` for `table`: a family whose positions are learned has none to
/// compute, and is refused naming its `model_type` (and `path`, the config's file).
pub fn table_spec(config: &ModelConfig, path: Option<PathBuf>) -> Result<PeSpec> {
    config.spec().ok_or_else(|| Error::ModelFamily {
        path,
        model_type: config.model_type().to_string(),
        reason: "learned positions: not a table posenc computes (encode adds the checkpoint's \
                 with --config and --position-table)"
            .into(),
    })
}

/// Refuses a config whose positions `encode` cannot add as asked: Whisper's (they meet
/// audio features), a learned family's without its position table (`learned`), a sinusoid
/// family's with one.
pub fn check_encode_config(config: &ModelConfig, path: Option<&Path>, learned: bool) -> Result<()> {
    let refuse = |reason: &str| {
        Err(Error::ModelFamily {
            path: path.map(Path::to_path_buf),
            model_type: config.model_type().to_string(),
            reason: reason.to_string(),
        })
    };
    if !config.token_inputs() {
        return refuse(
            "its sinusoid is added to the audio encoder's features, not to token embeddings, \
             and its decoder's positions are learned (give that table with --position-table, \
             without --config)",
        );
    }
    match (config.positions(), learned) {
        (ModelPositions::Learned { offset }, false) => refuse(&format!(
            "learned positions, looked up at position + {offset}: give the checkpoint's table \
             with --position-table"
        )),
        (ModelPositions::Sinusoid(_), true) => refuse(
            "sinusoidal positions, which posenc computes: leave out --position-table, or \
             --config",
        ),
        _ => Ok(()),
    }
}

/// A learned family's positions as rows of its table: each plus the config's `offset`
/// (BART's row of position `p` is `p + 2`), checked against the table's `rows` (when
/// given). A position past the table is named as given, with its row.
///
/// # Errors
/// [`Error::InvalidParameter`] naming `positions`: one past u32 once offset, or past the
/// table ([`Error::Position`] when `offset` is 0).
pub fn learned_rows(
    positions: &mut ndarray::Array2<u32>,
    offset: u32,
    model_type: &str,
    rows: Option<usize>,
) -> Result<()> {
    for p in positions.iter_mut() {
        *p = p.checked_add(offset).ok_or_else(|| Error::InvalidParameter {
            field: "positions",
            value: format!("{p} + {offset} (model_type {model_type})"),
            allowed: "positions that stay at most 4294967295 after the config's offset",
        })?;
    }
    let Some(rows) = rows else { return Ok(()) };
    match crate::encode::check_positions(positions.view(), rows) {
        Err(Error::Position { row, col, position, max_positions }) if offset > 0 => {
            Err(Error::InvalidParameter {
                field: "positions",
                value: format!(
                    "{} at row {row}, column {col}: row {position} of a position table of \
                     {max_positions} rows ({model_type}'s row is position + {offset})",
                    position - offset
                ),
                allowed: "positions whose row (position + the config's offset) is in the \
                          position table",
            })
        }
        other => other,
    }
}

/// Refuses a pad id given beside the config of a family that adds positions to pad tokens
/// like any other (Marian, Pegasus, BART, mBART: transformers numbers every token `0..L`):
/// with one, `encode` would restart positions after left padding and zero the pad rows, a
/// convention the model never saw. `given` is the pad id the caller gave, if any
/// (`--pad-id`, Python's `pad_id`).
///
/// # Errors
/// [`Error::InvalidParameter`] naming `pad_id` and the config's `model_type`.
pub fn check_encode_pad_id(config: &ModelConfig, given: Option<u32>) -> Result<()> {
    match given {
        Some(id) if config.token_inputs() && config.pad_id().is_none() => {
            Err(Error::InvalidParameter {
                field: "pad_id",
                value: format!("{id}, beside a config of model_type {:?}", config.model_type()),
                allowed: "absent: that family adds positions to pad tokens like any other \
                          (transformers numbers every token from 0), so a pad id, which \
                          restarts positions after left padding and zeroes pad rows, would \
                          give what the model never saw; positions of your own go in \
                          positions or offsets (--positions, --offsets)",
            })
        }
        _ => Ok(()),
    }
}

/// The RoPE options of `rope` and `rope-cache`: each `None` takes the config's value, else
/// the default.
#[derive(Clone, Debug, Default)]
pub struct RopeOptions<'a> {
    /// A Hugging Face model's `config.json` (`--config`): base, scaling, rotary dim, pairing
    /// and head dim as transformers reads them.
    pub config: Option<ConfigSource<'a>>,
    /// Which of a config's per-layer-type `rope_parameters` (`--layer-type`).
    pub layer_type: Option<&'a str>,
    /// Which dimensions rotate together (`--pairing`) [default: the config's, else neox].
    pub pairing: Option<Pairing>,
    /// Rotated dimensions per head (`--rotary-dim`) [default: the config's, else the head].
    pub rotary_dim: Option<u32>,
    /// The frequency base, `rope_theta` (`--base`) [default: the config's, else 10000].
    pub base: Option<f64>,
    /// A `rope_scaling` object (`--scaling`) [default: the config's, else none].
    pub scaling: Option<ScalingSource<'a>>,
    /// A model's own frequencies (`--inv-freq`), in place of the base, the scaling and the
    /// sequence length.
    pub inv_freq: Option<InvFreq<'a>>,
    /// With `inv_freq`: the factor cos and sin are multiplied by (`--attention-factor`)
    /// [default: the config's scaling's, else 1].
    pub attention_factor: Option<f64>,
    /// The sequence length dynamic and longrope scaling see (`--seq-len`).
    pub seq_len: Option<u64>,
}

impl RopeOptions<'_> {
    /// The `scaling` option, read and checked; `None` without it. (`inv_freq` is read by
    /// [`RopeOptions::spec`], which knows how many frequencies it must hold.)
    pub fn scaling(&self) -> Result<Option<Scaling>> {
        self.scaling.as_ref().map(ScalingSource::read).transpose()
    }

    /// The config's spec, read and checked; `None` without a config. `head_dim` (the
    /// caller's) stands in for a head dim the config does not give.
    pub fn config(&self, head_dim: Option<u32>) -> Result<Option<RopeSpec>> {
        Ok(self.read_config(head_dim, false, false)?.map(|(spec, _, _)| spec))
    }

    /// [`RopeOptions::config`] with a multimodal RoPE's axes (M-RoPE: Qwen2-VL, Qwen3-VL,
    /// GLM-4V, ...; [`RopeSpec::from_hf_config_multimodal`]), for a rotation that takes a
    /// position per axis; [`RopeOptions::axes_for`] checks them against the spec used.
    pub fn config_multimodal(
        &self,
        head_dim: Option<u32>,
    ) -> Result<(Option<RopeSpec>, Option<MultimodalRope>)> {
        Ok(match self.read_config(head_dim, false, true)? {
            Some((spec, _, mrope)) => (Some(spec), mrope),
            None => (None, None),
        })
    }

    /// A config's multimodal axes for `spec` (whose rotary dim an option may have changed),
    /// an error naming where the rotary dim came from: `--rotary-dim` if given, else
    /// `head_dim_from` (`--head-dim`, or the tensor), else the config.
    ///
    /// # Errors
    /// As [`MultimodalRope::for_rotary_dim`].
    pub fn axes_for(
        &self,
        mrope: Option<MultimodalRope>,
        spec: &RopeSpec,
        head_dim_from: Option<&str>,
    ) -> Result<Option<MultimodalRope>> {
        let rotary_from = match (self.rotary_dim, head_dim_from) {
            (Some(_), _) => "--rotary-dim",
            (None, Some(from)) => from,
            (None, None) => "the config",
        };
        mrope.map(|m| m.for_rotary_dim(spec.rotary_dim())).transpose().map_err(|e| match e {
            Error::InvalidParameter { field, value, allowed } => Error::InvalidParameter {
                field,
                value: format!("{value} (from {rotary_from})"),
                allowed,
            },
            other => other,
        })
    }

    /// [`RopeOptions::config`], with `module` the pairing of its family's rotary module's
    /// layout ([`RopeSpec::module_pairing`], its error kept for a caller that needs it),
    /// and with `cache` a multimodal RoPE's axes
    /// ([`RopeSpec::from_hf_config_multimodal`]): a file is read once (a FIFO's text is
    /// there once).
    #[allow(clippy::type_complexity)]
    fn read_config(
        &self,
        head_dim: Option<u32>,
        module: bool,
        cache: bool,
    ) -> Result<Option<(RopeSpec, Option<Result<Pairing>>, Option<MultimodalRope>)>> {
        if self.layer_type.is_some() && self.config.is_none() {
            return Err(Error::InvalidParameter {
                field: "layer_type",
                value: "--layer-type given without --config".into(),
                allowed: "only with that flag",
            });
        }
        let (text, path) = match self.config {
            None => return Ok(None),
            Some(ConfigSource::File(path)) => {
                (Cow::Owned(inputs::read_rope_config_text(Source::File(path))?), Some(path))
            }
            Some(ConfigSource::Text(text)) => (Cow::Borrowed(text), None),
        };
        let named = |e: Error| match path {
            Some(path) => e.in_config_file(path),
            None => e,
        };
        let (spec, mrope) = match (head_dim, cache) {
            (d, true) => RopeSpec::from_hf_config_multimodal(&text, self.layer_type, d),
            (Some(d), false) => {
                RopeSpec::from_hf_config_with_head_dim(&text, self.layer_type, d).map(|s| (s, None))
            }
            (None, false) => RopeSpec::from_hf_config(&text, self.layer_type).map(|s| (s, None)),
        }
        .map_err(named)?;
        let module = module.then(|| RopeSpec::module_pairing(&text).map_err(named));
        Ok(Some((spec, module, mrope)))
    }

    /// The spec for heads of `head_dim`: the options, else `config`'s values, else the
    /// defaults, with `inv_freq`'s frequencies or `scaling` (the option's, read by
    /// [`RopeOptions::scaling`]) over the config's. `origin` rewords an error about the head
    /// or rotary dim to say where the head dim came from ([`with_origin`]). A frequencies
    /// file is read once the rotary dim is known good, and must hold rotary_dim / 2 values.
    pub fn spec(
        &self,
        head_dim: u32,
        config: Option<&RopeSpec>,
        scaling: Option<Scaling>,
        origin: impl FnOnce(Error, u32, u32) -> Error,
    ) -> Result<RopeSpec> {
        let inv_freq = self.inv_freq.is_some();
        if inv_freq && (self.scaling.is_some() || self.base.is_some() || self.seq_len.is_some()) {
            return Err(Error::InvalidParameter {
                field: "inv_freq",
                value: "given beside scaling, base or seq_len".into(),
                allowed: "inv_freq alone: a model's own frequencies replace the scaling, the base \
                          and seq_len",
            });
        }
        let factor = self.attention_factor.is_some();
        refuse_without(factor, "attention_factor", "--attention-factor", inv_freq, "--inv-freq")?;
        // A config's partial rotary dim; a fully rotary config follows the head dim.
        let config_rotary =
            config.filter(|c| c.rotary_dim() != c.head_dim()).map(RopeSpec::rotary_dim);
        let given_rotary = self.rotary_dim.or(config_rotary);
        let rotary_dim = given_rotary.unwrap_or(head_dim);
        let pairing =
            self.pairing.unwrap_or_else(|| config.map_or(Pairing::Neox, RopeSpec::pairing));
        // Rotating whole, an odd head dim is what to fix: `RopeSpec::new` says so.
        let spec = match given_rotary {
            Some(r) => RopeSpec::partial(head_dim, r),
            None => RopeSpec::new(head_dim),
        };
        let spec = spec
            .map_err(|e| origin(e, head_dim, rotary_dim))?
            .with_base(self.base.or(config.map(RopeSpec::base)).unwrap_or(rope::DEFAULT_BASE))?
            .with_pairing(pairing);
        // The config's own scaling, where the rotary dim used is not the config's: a factor
        // per frequency fits the rotary dim it was written for.
        let moved = config.filter(|c| {
            self.inv_freq.is_none() && scaling.is_none() && c.rotary_dim() != spec.rotary_dim()
        });
        let scaling = match (&self.inv_freq, scaling) {
            (Some(inv_freq), _) => {
                let inv_freq = inv_freq.read((spec.rotary_dim() / 2) as usize)?;
                // The config's scaling's factor (yarn, longrope) unless given: frequencies
                // dumped from such a model still need it.
                let attention_factor = self
                    .attention_factor
                    .unwrap_or_else(|| config.map_or(1.0, |c| c.scaling().attention_factor()));
                Scaling::Explicit { inv_freq, attention_factor }
            }
            (None, Some(s)) => s,
            (None, None) => config.map_or(Scaling::None, |c| c.scaling().clone()),
        };
        let (head_dim, rotary_dim) = (spec.head_dim(), spec.rotary_dim());
        let spec = spec.with_scaling(scaling).map_err(|e| match (&self.inv_freq, moved, e) {
            (Some(inv_freq), _, e) => inv_freq.named(e),
            (None, Some(c), Error::RopeScaling { field, value, allowed }) => {
                // Said once, against the rotary dim used: the config's own (which its values
                // fit) is no count to give it (round twenty-eight). In the options' names,
                // not a front end's flags (the Python module words its errors the same way).
                let theirs = c.rotary_dim();
                let or_rotary = if theirs <= head_dim {
                    format!(", or the config's rotary dim {theirs}")
                } else {
                    String::new()
                };
                Error::RopeScaling {
                    field,
                    value: format!("{value}, the config's, for its rotary_dim {theirs}"),
                    allowed: format!(
                        "{allowed}, the rotary dim used; the config's fit its own: give a \
                         scaling with vectors of {}{or_rotary}",
                        rotary_dim / 2
                    ),
                }
            }
            (None, _, e) => e,
        })?;
        let Some(n) = self.seq_len else { return Ok(spec) };
        let spec = spec.with_seq_len(n)?;
        // Only these schemes read it: beside any other it would be silently unused.
        if !matches!(spec.scaling(), Scaling::Dynamic { .. } | Scaling::LongRope(_)) {
            return Err(Error::InvalidParameter {
                field: "seq_len",
                value: format!("{n} (rope_type {})", spec.scaling().rope_type()),
                allowed: "--seq-len only with dynamic or longrope scaling, whose frequencies \
                          depend on the sequence length",
            });
        }
        Ok(spec)
    }

    /// `rope-cache`'s spec: heads of `head_dim` (`--head-dim`), else the config's; one of
    /// the two must give it. Without `pairing`, a config's cache takes the layout its
    /// family's rotary module returns ([`RopeSpec::module_pairing`], refused where that is
    /// not cos and sin of shape `[positions, rotary_dim]`), which is not always the pairing
    /// its attention rotates. Errors about the head or rotary dim name the option it came
    /// from.
    ///
    /// A multimodal RoPE's config (Qwen2-VL, Qwen3-VL, GLM-4V, ...) gives its cache by
    /// position, and its axes ([`MultimodalRope`], checked against the rotary dim used).
    pub fn cache_spec(&self, head_dim: Option<u32>) -> Result<(RopeSpec, Option<MultimodalRope>)> {
        let scaling = self.scaling()?;
        // The module's layout is read only where no pairing is given.
        let read = self.read_config(head_dim, self.pairing.is_none(), true)?;
        let (config, module, mrope) = match read {
            Some((spec, module, mrope)) => (Some(spec), module, mrope),
            None => (None, None, None),
        };
        let Some(dim) = head_dim.or(config.as_ref().map(RopeSpec::head_dim)) else {
            return Err(Error::InvalidParameter {
                field: "head_dim",
                value: "missing".into(),
                allowed: "--head-dim D, or --config giving the model's head dim",
            });
        };
        let flag = if head_dim.is_some() { "--head-dim" } else { "--config" };
        let origin = |e, h, r| with_origin(e, flag, h, r);
        let spec = match module {
            Some(module) => {
                let options = RopeOptions { pairing: Some(module?), ..self.clone() };
                options.spec(dim, config.as_ref(), scaling, origin)?
            }
            None => self.spec(dim, config.as_ref(), scaling, origin)?,
        };
        // The rotary dim may be an option's rather than the config's: said so.
        let mrope = self.axes_for(mrope, &spec, head_dim.map(|_| "--head-dim"))?;
        Ok((spec, mrope))
    }
}

/// A spec error about the head dim or rotary dim, with `origin` (where the head dim came
/// from) beside the value.
pub fn with_origin(e: Error, origin: &str, head_dim: u32, rotary_dim: u32) -> Error {
    match e {
        Error::InvalidParameter { field: "rotary_dim", allowed, .. } => Error::InvalidParameter {
            field: "rotary_dim",
            value: format!("{rotary_dim} (head_dim {head_dim}, {origin})"),
            allowed,
        },
        Error::InvalidParameter { field: "head_dim", allowed, .. } => Error::InvalidParameter {
            field: "head_dim",
            value: format!("{head_dim} ({origin})"),
            allowed,
        },
        other => other,
    }
}
