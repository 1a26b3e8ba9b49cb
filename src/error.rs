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
    #[error("invalid {field}: {value} (allowed: {allowed})")]
    InvalidParameter {
        /// Name of the parameter, as the CLI spells it (`dim`, `base`, ...).
        field: &'static str,
        /// The offending value, formatted.
        value: String,
        /// The allowed range or set, in words.
        allowed: &'static str,
    },
    /// A position list (`--positions SPEC`) could not be parsed.
    #[error("invalid position spec {spec:?} at item {item}: {reason}")]
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
    #[error(
        "token id {id} at row {row}, column {col} is out of range: the vocabulary has {vocab} rows"
    )]
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
        path.display()
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
        "position {position} at row {row}, column {col} is out of range: the position table has {max_positions} rows"
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
        "{op}: {what} would have shape {}, more than {limit} values with its zero axes set aside (the limit {limit_name})",
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
    #[error("no GPU adapter found{detail}; {hint}")]
    NoAdapter {
        /// What was asked for (backend, name), possibly empty.
        detail: String,
        /// How to get one.
        hint: &'static str,
    },
    /// The adapter refused to create a device.
    #[error("the adapter {adapter:?} could not open a device: {source}")]
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
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// An output path names something posenc does not write to (a directory, a socket, a
    /// block device, a descriptor that is not open), checked before any work.
    #[error("{}: cannot write the output to {what}; {allowed}", path.display())]
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
    #[error("{}: not a valid {format} file: {reason}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// The format it was read as (`.npy`, `.safetensors`).
        format: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// An input array's element type is not one the operation accepts.
    #[error("{}: {what} has dtype {dtype}; allowed: {allowed}", path.display())]
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
        path.display(),
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
    #[error("rope_scaling: invalid {field}: {value} (allowed: {allowed})")]
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
    #[error("{}: invalid {field}: {value} (allowed: {allowed})", config_name(path))]
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
    #[error("{}: invalid {field}: {value} (allowed: {allowed})", config_name(path))]
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
    #[error("{}: model_type {model_type:?}: {reason}", config_name(path))]
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
        "{}: {problem}; {rank}-D tensors in the file: {}",
        path.display(),
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
    #[error("{}: {what} holds {actual} values, but {expected} are needed ({reason})", path.display())]
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
    /// `config.json`; this names `path` instead. Other errors are returned as they are.
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
        match self {
            Error::RopeConfig { field, value, allowed, .. } => {
                Error::RopeConfig { path: Some(path.into()), field, value, allowed }
            }
            Error::PeConfig { field, value, allowed, .. } => {
                Error::PeConfig { path: Some(path.into()), field, value, allowed }
            }
            Error::ModelFamily { model_type, reason, .. } => {
                Error::ModelFamily { path: Some(path.into()), model_type, reason }
            }
            other => other,
        }
    }
}

/// How a config error names its file: the path, else `config.json`.
fn config_name(path: &Option<PathBuf>) -> std::path::Display<'_> {
    path.as_deref().unwrap_or(std::path::Path::new("config.json")).display()
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

fn names_or_none(names: &[String]) -> String {
    if names.is_empty() {
        return "none".into();
    }
    names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
}

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
