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
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
}

/// posenc's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
