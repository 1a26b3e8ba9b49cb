//! The one error type of posenc: every variant carries the values that explain it.

use std::path::PathBuf;

/// Everything that can go wrong in posenc, as a value.
///
/// Errors are raised before any GPU work starts whenever the cause is in the input, so a
/// failed call leaves nothing half-written behind.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A parameter is outside the range posenc supports.
    #[error("invalid {field}: {} (allowed: {allowed})", shown(value))]
    InvalidParameter {
        /// Name of the parameter, as the CLI spells it (`dim`, `base`, ...).
        field: &'static str,
        /// The offending value, formatted.
        value: String,
        /// The allowed range or set, in words.
        allowed: &'static str,
    },
    /// A position list (`--positions SPEC`) could not be parsed.
    #[error("invalid position spec {} at item {item}: {}", quoted(spec), prose(reason))]
    PositionSpec {
        /// The whole spec as given.
        spec: String,
        /// The offending comma-separated item, 1-based.
        item: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// Two shapes that must agree do not.
    #[error("{op}: shape mismatch for {what}: expected {expected}, got {actual}")]
    Shape {
        /// The operation that checked the shapes.
        op: &'static str,
        /// Which operand.
        what: &'static str,
        /// The expected shape, formatted.
        expected: String,
        /// The shape that was given, formatted.
        actual: String,
    },
    /// A token id is negative or not below the vocabulary size.
    #[error("token id {id} at row {row}, column {col} is out of range: {}", vocab_range(*vocab))]
    TokenId {
        /// Batch row of the first offender.
        row: usize,
        /// Column (token index) of the first offender.
        col: usize,
        /// The id as given.
        id: String,
        /// The vocabulary size.
        vocab: usize,
    },
    /// A loaded weight is NaN or infinite. Tables from files are refused whole: one
    /// non-finite row would turn every output that gathers it into NaN.
    #[error(
        "{}: {what} holds the non-finite value {value} at row {row}, column {col}",
        shown_path(path)
    )]
    NonFinite {
        /// The file.
        path: PathBuf,
        /// The array's role (`weights`).
        what: &'static str,
        /// Row of the first offender (row-major order).
        row: usize,
        /// Column of the first offender.
        col: usize,
        /// The value, formatted (`NaN`, `inf`, `-inf`).
        value: String,
    },
    /// A position has no row in a learned position table.
    #[error(
        "position {position} at row {row}, column {col} is out of range: the position table has \
            {max_positions} rows"
    )]
    Position {
        /// Batch row of the first offender.
        row: usize,
        /// Column (token index) of the first offender.
        col: usize,
        /// The position.
        position: u32,
        /// Rows of the position table.
        max_positions: usize,
    },
    /// A request is larger than a limit of the adapter or of posenc.
    #[error("{op}: {what} needs {requested} but the limit {limit_name} is {limit}")]
    Limit {
        /// The operation that hit the limit.
        op: &'static str,
        /// What was being sized.
        what: &'static str,
        /// The size requested.
        requested: u64,
        /// The limit's name.
        limit_name: &'static str,
        /// The limit's value.
        limit: u64,
    },
    /// An array whose shape is derived from the input (an output, or the positions built
    /// for one) would be larger than a limit. Its axes are multiplied with the zero ones set
    /// aside: an empty array with a 2^62-long axis holds no values, but it could not be
    /// indexed in memory nor loaded back from the `.npy` it would be written to, and the
    /// work sized by its other axes (a loop over 2^63 empty rows) would never end.
    #[error(
        "{op}: {what} would have shape {}, more than {limit} values with its zero axes set aside \
            (the limit {limit_name})",
        shape_tuple(shape)
    )]
    TooLarge {
        /// The operation that sized the array.
        op: &'static str,
        /// Which array.
        what: &'static str,
        /// Its shape, as it would have been.
        shape: Vec<usize>,
        /// The limit's name.
        limit_name: &'static str,
        /// The most values the array may have, its zero axes set aside.
        limit: u64,
    },
    /// No GPU adapter matched the request.
    #[error("no GPU adapter found{}; {hint}", prose(detail))]
    NoAdapter {
        /// What was asked for (backend, name), possibly empty.
        detail: String,
        /// How to get one.
        hint: &'static str,
    },
    /// The adapter refused to create a device.
    #[error("the adapter {} could not open a device: {source}", quoted(adapter))]
    RequestDevice {
        /// The adapter's name.
        adapter: String,
        /// wgpu's reason.
        #[source]
        source: wgpu::RequestDeviceError,
    },
    /// wgpu reported an error while posenc was running an operation.
    #[error("{op}: GPU error: {message}")]
    Gpu {
        /// The operation that was running.
        op: &'static str,
        /// wgpu's message.
        message: String,
    },
    /// A call that waits for the GPU was made where the calling thread must not block: a
    /// web page's thread (wasm32), where every wait is an `.await`. Nothing was submitted;
    /// the call's `_async` twin (named here) does the same work.
    #[error("{op}: waits for the GPU, which a browser's thread cannot do (use {instead})")]
    Blocking {
        /// The operation called.
        op: &'static str,
        /// What does the work without blocking: its `_async` twin, awaited.
        instead: &'static str,
    },
    /// The GPU device was lost (driver reset, removal, `Device::destroy`, or an
    /// out-of-memory condition the driver could not recover from). The context is unusable
    /// from then on: every later call returns this error at once. Open a new context, or
    /// compute on the CPU.
    #[error("{op}: the GPU device was lost: {reason}")]
    DeviceLost {
        /// The operation that found the device lost.
        op: &'static str,
        /// wgpu's reason and message.
        reason: String,
    },
    /// The GPU ran out of memory while posenc was allocating.
    #[error(
        "{op}: the GPU ran out of memory allocating {requested} bytes (posenc held {held} bytes \
         on the device): {message}"
    )]
    OutOfMemory {
        /// The operation that was allocating.
        op: &'static str,
        /// Bytes of device buffers the operation had asked for when the error struck.
        requested: u64,
        /// Bytes of device buffers the context held in all at that point.
        held: u64,
        /// wgpu's message.
        message: String,
    },
    /// Reading or writing a file failed.
    #[error("{}: {}", shown_path(path), prose(&source.to_string()))]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// An output path names something posenc does not write to (a directory, a socket, a
    /// block device, a descriptor that is not open), checked before any work.
    #[error("{}: cannot write the output to {}; {allowed}", shown_path(path), prose(what))]
    OutputPath {
        /// The path as given.
        path: PathBuf,
        /// What is there, in words (`a directory`).
        what: String,
        /// Where outputs can go, in words.
        allowed: &'static str,
    },
    /// Memory for an output buffer could not be allocated: the allocator refused (an
    /// address-space limit such as `ulimit -v`, or no memory left). Raised where an
    /// infallible allocation would abort the process.
    #[error("could not allocate {bytes} bytes for {what}: out of memory")]
    Alloc {
        /// The buffer (`the table`, `the encode output`).
        what: &'static str,
        /// The bytes asked for (`u64::MAX` when the size itself overflows).
        bytes: u64,
    },
    /// An input file is not a well-formed file of its format.
    #[error("{}: not a valid {format} file: {}", shown_path(path), prose(reason))]
    Format {
        /// The file.
        path: PathBuf,
        /// The format it was read as (`.npy`, `.safetensors`).
        format: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// An input array's element type is not one the operation accepts.
    #[error("{}: {what} has dtype {}; allowed: {}", shown_path(path), shown(dtype), prose(allowed))]
    Dtype {
        /// The file.
        path: PathBuf,
        /// The array's role (`ids`, `positions`, `weights`, ...).
        what: &'static str,
        /// The dtype as the file spells it.
        dtype: String,
        /// The accepted dtypes, in words.
        allowed: String,
    },
    /// An input array's rank is not one the operation accepts.
    #[error(
        "{}: {what} must have rank {}, got shape {}",
        shown_path(path),
        or_list(expected),
        shape_tuple(actual)
    )]
    Rank {
        /// The file.
        path: PathBuf,
        /// The array's role (`ids`, `positions`, `weights`, ...).
        what: &'static str,
        /// The accepted ranks.
        expected: Vec<usize>,
        /// The array's shape.
        actual: Vec<usize>,
    },
    /// A RoPE scaling (a Hugging Face `rope_scaling` object) is malformed or out of range.
    #[error(
        "rope_scaling: invalid {}: {} (allowed: {})",
        shown(field),
        shown(value),
        prose(allowed)
    )]
    RopeScaling {
        /// The offending key as the JSON spells it (`factor`, `long_factor[3]`, ...), or
        /// `(json)` when the text is not JSON at all.
        field: String,
        /// The offending value, shortened, or `missing`.
        value: String,
        /// What is allowed, in words.
        allowed: String,
    },
    /// A model's `config.json` ([`crate::rope::RopeSpec::from_hf_config`]) cannot be read
    /// as a RoPE posenc computes exactly.
    #[error(
        "{}: invalid {}: {} (allowed: {})",
        config_name(path),
        shown(field),
        shown(value),
        prose(allowed)
    )]
    RopeConfig {
        /// The file the config was read from; `None` for text parsed without one, which the
        /// message calls `config.json` ([`Error::in_config_file`] names the file).
        path: Option<PathBuf>,
        /// The offending key as the config spells it (`head_dim`, `layer_type`,
        /// `rope_scaling.factor`, ...), or `(json)` when the text is not a JSON object.
        field: String,
        /// The offending value, shortened, or `missing`.
        value: String,
        /// What is allowed, in words.
        allowed: String,
    },
    /// A model's `config.json` ([`crate::model_config::ModelConfig::from_hf_config`]) has a
    /// key posenc cannot read as that model's absolute positions.
    #[error(
        "{}: invalid {}: {} (allowed: {})",
        config_name(path),
        shown(field),
        shown(value),
        prose(allowed)
    )]
    PeConfig {
        /// The file the config was read from; `None` for text parsed without one, which the
        /// message calls `config.json` ([`Error::in_config_file`] names the file).
        path: Option<PathBuf>,
        /// The offending key as the config spells it (`d_model`, `pad_token_id`, ...), or
        /// `(json)` when the text is not a JSON object.
        field: String,
        /// The offending value, shortened, or `missing`.
        value: String,
        /// What is allowed, in words.
        allowed: String,
    },
    /// A model's `config.json` names a family (`model_type`) whose absolute positions posenc
    /// does not compute from a config, or not for this command.
    #[error("{}: model_type {}: {}", config_name(path), quoted(model_type), prose(reason))]
    ModelFamily {
        /// The file the config was read from; `None` for text parsed without one, which the
        /// message calls `config.json` ([`Error::in_config_file`] names the file).
        path: Option<PathBuf>,
        /// The config's `model_type`.
        model_type: String,
        /// Why it is refused, and what to use instead.
        reason: String,
    },
    /// No tensor of a multi-tensor file could be chosen: the one named is missing, or none
    /// was named and the choice is not unique.
    #[error(
        "{}: {}; {rank}-D tensors in the file: {}",
        shown_path(path),
        prose(problem),
        names_or_none(available)
    )]
    Tensor {
        /// The file.
        path: PathBuf,
        /// Why no tensor was chosen.
        problem: String,
        /// The rank of the tensors the operation reads (2 for tables, 1 for frequencies).
        rank: usize,
        /// The names of the file's tensors of that rank, sorted.
        available: Vec<String>,
    },
    /// An input array holds another number of values than the operation needs (a model's
    /// `inv_freq`: one per frequency). Refused from the file's header, before its data is
    /// read.
    #[error(
        "{}: {what} holds {actual} values, but {expected} are needed ({reason})",
        shown_path(path)
    )]
    Count {
        /// The file.
        path: PathBuf,
        /// The array's role (`inv_freq`).
        what: &'static str,
        /// The number of values needed.
        expected: usize,
        /// The number the file holds.
        actual: usize,
        /// Why that many, in words.
        reason: &'static str,
    },
}

/// What kind of failure an [`Error`] is, by who can act on it: [`Error::kind`].
///
/// ```
/// use posenc::{ErrorKind, PeSpec};
///
/// let err = PeSpec::new(3).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Usage);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request is invalid: a parameter out of range or malformed (a position spec, a
    /// `rope_scaling` object), an output path posenc does not write to, or an array derived
    /// from the input too large to make. The arguments need changing.
    Usage,
    /// An input file or array is not what the operation reads: its format, dtype, rank or
    /// tensor, a non-finite weight, a token id or a position with no row. The input needs
    /// changing.
    Input,
    /// Two arrays handed to one call disagree in shape: the calling program's mistake
    /// rather than its user's.
    Shape,
    /// The request is larger than a limit of the adapter or of posenc (one storage binding,
    /// the memory budget, a count); a smaller request, or another device, may fit.
    Limit,
    /// The GPU could not be had or failed: no adapter, no device, a wgpu error, a lost
    /// device, device memory exhausted.
    Device,
    /// The system refused: a file could not be read or written, or host memory could not be
    /// allocated.
    System,
}

impl Error {
    /// The kind of this error, for callers that act on classes of failure (the CLI's exit
    /// status, a retry on another device) rather than on each variant.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidParameter { .. }
            | Error::PositionSpec { .. }
            | Error::RopeScaling { .. }
            | Error::RopeConfig { .. }
            | Error::PeConfig { .. }
            | Error::ModelFamily { .. }
            | Error::OutputPath { .. }
            | Error::Blocking { .. }
            | Error::TooLarge { .. } => ErrorKind::Usage,
            Error::TokenId { .. }
            | Error::NonFinite { .. }
            | Error::Position { .. }
            | Error::Format { .. }
            | Error::Dtype { .. }
            | Error::Rank { .. }
            | Error::Tensor { .. }
            | Error::Count { .. } => ErrorKind::Input,
            Error::Shape { .. } => ErrorKind::Shape,
            Error::Limit { .. } => ErrorKind::Limit,
            Error::NoAdapter { .. }
            | Error::RequestDevice { .. }
            | Error::Gpu { .. }
            | Error::DeviceLost { .. }
            | Error::OutOfMemory { .. } => ErrorKind::Device,
            Error::Io { .. } | Error::Alloc { .. } => ErrorKind::System,
        }
    }

    /// This error as met in the config file `path`. A config error ([`Error::RopeConfig`],
    /// [`Error::PeConfig`], [`Error::ModelFamily`]) made from the text alone
    /// ([`crate::rope::RopeSpec::from_hf_config`],
    /// [`crate::model_config::ModelConfig::from_hf_config`]) cannot know the file and says
    /// `config.json`; this names `path` instead. Other errors, and config errors that name
    /// a file already (a scaling object's, an `inv_freq` file's), are returned as they are.
    /// ([`crate::inputs::read_rope_config`] and [`crate::inputs::read_model_config`] name
    /// their source themselves.)
    ///
    /// ```
    /// use posenc::model_config::ModelConfig;
    ///
    /// let err = ModelConfig::from_hf_config(r#"{"d_model": 512}"#).unwrap_err();
    /// assert!(err.to_string().starts_with("config.json: invalid model_type: missing"));
    /// let err = err.in_config_file("opus-mt/cfg.json");
    /// assert!(err.to_string().starts_with("opus-mt/cfg.json: invalid model_type: missing"));
    /// ```
    pub fn in_config_file(self, path: impl Into<PathBuf>) -> Error {
        // An error that names its file already (a scaling object's or an inv_freq file's,
        // met while a config's options were applied) keeps it.
        match self {
            Error::RopeConfig { path: None, field, value, allowed } => {
                Error::RopeConfig { path: Some(path.into()), field, value, allowed }
            }
            Error::PeConfig { path: None, field, value, allowed } => {
                Error::PeConfig { path: Some(path.into()), field, value, allowed }
            }
            Error::ModelFamily { path: None, model_type, reason } => {
                Error::ModelFamily { path: Some(path.into()), model_type, reason }
            }
            other => other,
        }
    }
}

/// How a config error names its file: the path, else `config.json`.
fn config_name(path: &Option<PathBuf>) -> String {
    shown_path(path.as_deref().unwrap_or(std::path::Path::new("config.json")))
}

/// The most characters of one value from the user that an error message shows (a key, a
/// value, a name, a type, a path): a longer one is cut in the middle, keeping its start and
/// its end.
pub const MAX_SHOWN_CHARS: usize = 256;

/// The most characters of one explanation an error message shows (what is allowed, why
/// something is refused, the system's reason), which may quote values from the user.
pub const MAX_PROSE_CHARS: usize = 1024;

/// `text` as an error message shows it: control characters and invisible formatting
/// characters (bidirectional overrides, zero-width ones) escaped as Rust writes them (`\\r`,
/// `\\u{1b}`), so that nothing from the user can move the terminal's cursor, recolour it or
/// reorder the line; then, if longer than `max_chars` characters, cut in the middle to that
/// many, a count of the characters left out in their place (keeping the start and the end,
/// a path's file name). Every user string in an [`Error`]'s message goes through it.
///
/// ```
/// assert_eq!(posenc::message_text("x\ry\u{1b}[31mRED", 80), "x\\ry\\u{1b}[31mRED");
/// let long = "k".repeat(1000);
/// let shown = posenc::message_text(&long, 40);
/// assert_eq!(shown, "kkkkkkkk[... 985 characters ...]kkkkkkk");
/// assert!(shown.chars().count() <= 40);
/// ```
pub fn message_text(text: &str, max_chars: usize) -> String {
    cut(&escape(text), max_chars).into_owned()
}

/// A value from the user, quoted and escaped as Rust's `Debug` writes a string, cut to
/// [`MAX_SHOWN_CHARS`].
fn quoted(text: &str) -> String {
    cut(&format!("{text:?}"), MAX_SHOWN_CHARS).into_owned()
}

/// `text` cut in the middle to at most `max_chars` characters, as [`message_text`] cuts.
fn cut(text: &str, max_chars: usize) -> std::borrow::Cow<'_, str> {
    let count = text.chars().count();
    if count <= max_chars {
        return text.into();
    }
    // The count left out has at most as many digits as the whole.
    let marker = "[...  characters ...]".len() + count.to_string().len();
    let keep = max_chars.saturating_sub(marker);
    let (head, tail) = (keep.div_ceil(2), keep / 2);
    let start: String = text.chars().take(head).collect();
    let end_at = text.char_indices().nth(count - tail).map_or(text.len(), |(i, _)| i);
    format!("{start}[... {} characters ...]{}", count - head - tail, &text[end_at..]).into()
}

/// `text` with control and invisible formatting characters escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || invisible(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// Formatting characters that change how a line reads without showing themselves: the
/// Arabic letter mark, zero-width characters and marks, the line and paragraph separators,
/// bidirectional embeddings, overrides and isolates, invisible operators, the byte order
/// mark, interlinear annotation.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{061c}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
    )
}

/// The value of environment variable `var`, `None` when unset; a value that is not UTF-8
/// is refused naming what is `allowed`, as a malformed one is. Every posenc variable
/// (`POSENC_AUTO`, `POSENC_GPU_*`, ...) is read through it.
pub(crate) fn env_text(var: &'static str, allowed: &'static str) -> Result<Option<String>> {
    match std::env::var_os(var) {
        None => Ok(None),
        Some(value) => value
            .into_string()
            .map(Some)
            .map_err(|value| invalid_env(var, &value.to_string_lossy(), allowed)),
    }
}

/// The value of environment variable `var` among `choices` (words, compared after
/// trimming white space, as the numeric variables' values are trimmed), `unset` when it is
/// not set.
///
/// # Errors
/// [`Error::InvalidParameter`] naming `var` and its value as set, for any other value, one
/// that is not UTF-8 included.
pub(crate) fn env_choice<T: Copy>(
    var: &'static str,
    allowed: &'static str,
    unset: T,
    choices: &[(&str, T)],
) -> Result<T> {
    let Some(text) = env_text(var, allowed)? else { return Ok(unset) };
    // Case aside, as wgpu reads its own (`WGPU_BACKEND=Vulkan`): `POSENC_AUTO=GPU` was
    // refused (round twenty-five).
    let word = text.trim();
    match choices.iter().find(|(name, _)| name.eq_ignore_ascii_case(word)) {
        Some(&(_, value)) => Ok(value),
        None => Err(invalid_env(var, &text, allowed)),
    }
}

/// What a token id must be below, as [`Error::TokenId`] says it: the vocabulary's rows, or
/// for a table of more than 2^32 rows (a broadcast view), u32's range, which ids are read in.
fn vocab_range(vocab: usize) -> String {
    if vocab as u64 > 1 << 32 {
        format!("token ids are u32, at most 4294967295 (the table has {vocab} rows)")
    } else {
        format!("the vocabulary has {vocab} rows")
    }
}

/// The refusal of `value` of environment variable `var`, the value quoted: an empty or
/// blank setting reads `""` or `" "` rather than nothing before the parenthesis.
pub(crate) fn invalid_env(var: &'static str, value: &str, allowed: &'static str) -> Error {
    Error::InvalidParameter { field: var, value: format!("{value:?}"), allowed }
}

/// A value from the user, for a message: [`message_text`] at [`MAX_SHOWN_CHARS`].
fn shown(text: &str) -> String {
    message_text(text, MAX_SHOWN_CHARS)
}

/// An explanation, for a message: [`message_text`] at [`MAX_PROSE_CHARS`].
fn prose(text: &str) -> String {
    message_text(text, MAX_PROSE_CHARS)
}

/// A path, for a message: [`message_text`] at [`MAX_SHOWN_CHARS`] (a cut keeps the file's
/// name, at the end).
fn shown_path(path: &std::path::Path) -> String {
    let text = path.to_string_lossy();
    if text.is_empty() || text.trim() != text {
        // An empty path (`--config ""`), or one of spaces or with spaces at an end, would
        // read as nothing or another name before the colon: quoted.
        return quoted(&text);
    }
    shown(&text)
}

/// `1`, `1 or 2`, `1, 2 or 3`.
fn or_list(items: &[usize]) -> String {
    match items {
        [] => "(none)".into(),
        [one] => one.to_string(),
        [rest @ .., last] => {
            let rest: Vec<String> = rest.iter().map(usize::to_string).collect();
            format!("{} or {last}", rest.join(", "))
        }
    }
}

/// A float for a message: as Rust prints it when that is short, else in scientific form
/// with the shortest digits that read back (`1e308`, where `Display` writes 309 digits).
pub(crate) fn float(v: f64) -> String {
    let plain = v.to_string();
    if plain.len() <= 20 { plain } else { format!("{v:e}") }
}

/// A JSON number for a message, as it was most likely written: an integer as itself, a
/// float in the shortest form that reads back, whole ones with their `.0` (`512.0`, which a
/// whole-number key may refuse, is not `512`) and scientific from 1e16 on (`1e23`, which
/// serde_json's own `Display` writes `1e+23`).
pub(crate) fn json_number(n: &serde_json::Number) -> String {
    match n.as_f64() {
        Some(v) if n.is_f64() => format!("{v:?}"),
        _ => n.to_string(),
    }
}

/// A shape as Python prints a tuple: `(3, 4)`, `(5,)`, `()`.
pub(crate) fn shape_tuple(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => {
            let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
            format!("({})", dims.join(", "))
        }
    }
}

/// The names of a file's tensors, quoted: at most [`MAX_NAMES`], each cut to
/// [`MAX_SHOWN_CHARS`].
fn names_or_none(names: &[String]) -> String {
    if names.is_empty() {
        return "none".into();
    }
    let mut shown: Vec<String> = names.iter().take(MAX_NAMES).map(|n| quoted(n)).collect();
    if names.len() > MAX_NAMES {
        shown.push(format!("and {} more", names.len() - MAX_NAMES));
    }
    shown.join(", ")
}

/// The most tensor names an [`Error::Tensor`] lists.
const MAX_NAMES: usize = 16;

/// posenc's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The error of a read from `path` (`len` bytes, a `format` file) that failed: an early end
/// is the file's fault (`Error::Format`), anything else the system's (`Error::Io`).
pub(crate) fn read_error(
    path: &std::path::Path,
    format: &'static str,
    len: u64,
    source: std::io::Error,
) -> Error {
    if source.kind() == std::io::ErrorKind::UnexpectedEof {
        Error::Format {
            path: path.to_path_buf(),
            format,
            reason: format!("the file ended early (it is {len} bytes)"),
        }
    } else {
        Error::Io { path: path.to_path_buf(), source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path that is empty, all spaces or has a space at an end is quoted, so that the
    /// name before the colon is visible; others are shown as they are.
    /// A table of more rows than u32 ids reach (a broadcast view) does not call an id below
    /// its rows out of range for the rows (a stranger's: "8589934591 ... the vocabulary has
    /// 8589934592 rows").
    #[test]
    fn token_ids_past_u32_are_named_as_such() {
        let e = Error::TokenId { row: 0, col: 1, id: "8589934591".into(), vocab: 1 << 33 };
        assert!(e.to_string().ends_with(
            "token ids are u32, at most 4294967295 (the table has \
             8589934592 rows)"
        ));
        let e = Error::TokenId { row: 0, col: 1, id: "9".into(), vocab: 9 };
        assert!(e.to_string().ends_with("the vocabulary has 9 rows"));
    }

    #[test]
    fn paths_that_would_not_show_are_quoted() {
        let io = |p: &str| {
            let source = std::io::Error::from(std::io::ErrorKind::NotFound);
            Error::Io { path: PathBuf::from(p), source }.to_string()
        };
        assert!(io("").starts_with("\"\": "), "{}", io(""));
        assert!(io("   ").starts_with("\"   \": "), "{}", io("   "));
        assert!(io(" a.json").starts_with("\" a.json\": "), "{}", io(" a.json"));
        assert!(io("a b.json").starts_with("a b.json: "), "{}", io("a b.json"));
    }

    #[test]
    fn every_variant_has_its_kind() {
        let text = String::new;
        let path = PathBuf::new;
        let cases = [
            (
                Error::InvalidParameter { field: "dim", value: text(), allowed: "" },
                ErrorKind::Usage,
            ),
            (Error::PositionSpec { spec: text(), item: 1, reason: text() }, ErrorKind::Usage),
            (
                Error::RopeScaling { field: text(), value: text(), allowed: text() },
                ErrorKind::Usage,
            ),
            (
                Error::RopeConfig { path: None, field: text(), value: text(), allowed: text() },
                ErrorKind::Usage,
            ),
            (
                Error::PeConfig { path: None, field: text(), value: text(), allowed: text() },
                ErrorKind::Usage,
            ),
            (
                Error::ModelFamily { path: None, model_type: text(), reason: text() },
                ErrorKind::Usage,
            ),
            (Error::OutputPath { path: path(), what: text(), allowed: "" }, ErrorKind::Usage),
            (
                Error::TooLarge { op: "", what: "", shape: vec![], limit_name: "", limit: 0 },
                ErrorKind::Usage,
            ),
            (Error::TokenId { row: 0, col: 0, id: text(), vocab: 0 }, ErrorKind::Input),
            (
                Error::NonFinite { path: path(), what: "", row: 0, col: 0, value: text() },
                ErrorKind::Input,
            ),
            (Error::Position { row: 0, col: 0, position: 0, max_positions: 0 }, ErrorKind::Input),
            (Error::Format { path: path(), format: "", reason: text() }, ErrorKind::Input),
            (
                Error::Dtype { path: path(), what: "", dtype: text(), allowed: text() },
                ErrorKind::Input,
            ),
            (
                Error::Rank { path: path(), what: "", expected: vec![], actual: vec![] },
                ErrorKind::Input,
            ),
            (
                Error::Tensor { path: path(), problem: text(), rank: 2, available: vec![] },
                ErrorKind::Input,
            ),
            (
                Error::Count { path: path(), what: "", expected: 1, actual: 0, reason: "" },
                ErrorKind::Input,
            ),
            (Error::Shape { op: "", what: "", expected: text(), actual: text() }, ErrorKind::Shape),
            (
                Error::Limit { op: "", what: "", requested: 0, limit_name: "", limit: 0 },
                ErrorKind::Limit,
            ),
            (Error::NoAdapter { detail: text(), hint: "" }, ErrorKind::Device),
            (
                Error::RequestDevice {
                    adapter: text(),
                    source: wgpu::wgc::instance::RequestDeviceError::UnsupportedFeature(
                        wgpu::Features::SHADER_F16,
                    )
                    .into(),
                },
                ErrorKind::Device,
            ),
            (Error::Gpu { op: "", message: text() }, ErrorKind::Device),
            (Error::DeviceLost { op: "", reason: text() }, ErrorKind::Device),
            (
                Error::OutOfMemory { op: "", requested: 0, held: 0, message: text() },
                ErrorKind::Device,
            ),
            (
                Error::Io { path: path(), source: std::io::ErrorKind::Other.into() },
                ErrorKind::System,
            ),
            (Error::Alloc { what: "", bytes: 0 }, ErrorKind::System),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind, "{error:?}");
        }
    }

    #[test]
    fn user_strings_are_cut_and_escaped_in_every_message() {
        let long = format!("\u{1b}[31m{}\u{202e}\r\n", "x".repeat(100_000));
        let path = || PathBuf::from(&long);
        let errors = [
            Error::InvalidParameter { field: "dim", value: long.clone(), allowed: "" },
            Error::PositionSpec { spec: long.clone(), item: 1, reason: long.clone() },
            Error::NonFinite { path: path(), what: "", row: 0, col: 0, value: "NaN".into() },
            Error::NoAdapter { detail: long.clone(), hint: "" },
            Error::Io { path: path(), source: std::io::Error::other(long.clone()) },
            Error::OutputPath { path: path(), what: long.clone(), allowed: "" },
            Error::Format { path: path(), format: "", reason: long.clone() },
            Error::Dtype { path: path(), what: "", dtype: long.clone(), allowed: long.clone() },
            Error::Rank { path: path(), what: "", expected: vec![2], actual: vec![] },
            Error::RopeScaling { field: long.clone(), value: long.clone(), allowed: long.clone() },
            Error::RopeConfig {
                path: Some(path()),
                field: long.clone(),
                value: long.clone(),
                allowed: long.clone(),
            },
            Error::PeConfig {
                path: None,
                field: long.clone(),
                value: long.clone(),
                allowed: long.clone(),
            },
            Error::ModelFamily {
                path: Some(path()),
                model_type: long.clone(),
                reason: long.clone(),
            },
            Error::Tensor {
                path: path(),
                problem: long.clone(),
                rank: 2,
                available: vec![long.clone(); 20_000],
            },
            Error::Count { path: path(), what: "", expected: 1, actual: 2, reason: "" },
        ];
        for error in errors {
            let text = error.to_string();
            assert!(text.chars().count() < 6 * MAX_PROSE_CHARS, "{} characters", text.len());
            assert!(!text.chars().any(|c| c.is_control() || invisible(c)), "{text:?}");
            assert!(text.contains("[... "), "{text}");
        }
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(message_text("a\u{2066}b\u{feff}", 40), "a\\u{2066}b\\u{feff}");
        let shown = message_text(&"é".repeat(5000), MAX_SHOWN_CHARS);
        assert_eq!(shown.chars().count(), MAX_SHOWN_CHARS);
        assert!(shown.starts_with("éé") && shown.ends_with("éé") && shown.contains("characters"));
    }

    #[test]
    fn floats_print_short() {
        assert_eq!(float(1e308), "1e308");
        assert_eq!(float(-f64::MAX), "-1.7976931348623157e308");
        assert_eq!(float(5e-324), "5e-324");
        assert_eq!(float(1e-7), "0.0000001");
        assert_eq!(float(10000.0), "10000");
        assert_eq!(float(0.30000000000000004), "0.30000000000000004");
        assert_eq!(float(f64::NEG_INFINITY), "-inf");
        assert_eq!(float(f64::NAN), "NaN");
    }
}
