//! Where an input's bytes come from ([`Source`]; a regular file opened with its size) and
//! the bound every shape a request derives is checked against before anything of that size
//! exists ([`check_shape`]): shared by the parsers (`npy`, `weights`), the encodings and the
//! command line's readers (`inputs`), below all of them.

use std::fs::File;
use std::io;
use std::path::Path;

use crate::error::{Error, Result};

/// The most values an output of `posenc table`, `encode` or `rope` may have, its zero axes
/// set aside: 8 GiB of float32, already more than a command-line tool should hold.
pub const MAX_OUTPUT_VALUES: u64 = 1 << 31;

/// Where an input's bytes come from.
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// A file, which must be a regular file: its size is checked against its header
    /// before it is read, and a pipe or a directory has none.
    File(&'a Path),
    /// Bytes in memory (a test's, a fuzzer's); `name` stands for the file in errors.
    Bytes {
        /// The name errors give the input.
        name: &'a Path,
        /// The input's bytes.
        bytes: &'a [u8],
    },
}

impl Source<'_> {
    /// The name errors give the input.
    pub fn name(&self) -> &Path {
        match self {
            Source::File(path) => path,
            Source::Bytes { name, .. } => name,
        }
    }
}

/// Opens `path` for reading and returns it with its size, refusing anything but a regular
/// file: a directory reads as an error deep inside a parser, a pipe has no size to check
/// a header against, and opening a FIFO with no writer would block for ever. The type is
/// looked at before opening (so no FIFO is opened) and again on the open file (in case the
/// path was swapped in between).
///
/// # Errors
/// [`Error::Io`] naming the file: it cannot be opened, is a directory (`is a directory`), or
/// is not a regular file (`must be a regular file`).
pub(crate) fn open_file(path: &Path) -> Result<(File, u64)> {
    let io_error = |source| Error::Io { path: path.to_path_buf(), source };
    let regular = |metadata: std::fs::Metadata| -> Result<u64> {
        if metadata.is_dir() {
            return Err(io_error(is_a_directory()));
        }
        if !metadata.is_file() {
            return Err(io_error(io::Error::new(
                io::ErrorKind::InvalidInput,
                "must be a regular file (not a pipe, socket or device): its size is checked \
                 against its header before it is read",
            )));
        }
        Ok(metadata.len())
    };
    regular(std::fs::metadata(path).map_err(io_error)?)?;
    let file = File::open(path).map_err(io_error)?;
    let len = regular(file.metadata().map_err(io_error)?)?;
    Ok((file, len))
}

/// The refusal of a directory where a file is read, in the words every reader uses.
pub(crate) fn is_a_directory() -> io::Error {
    io::Error::new(io::ErrorKind::IsADirectory, "is a directory")
}

/// Refuses an array of `shape` whose values, its zero axes set aside, number more than
/// `limit`. Setting the zero axes aside means an empty array is held to the same bound as
/// the array its other axes describe: it must be possible to index it, write it and loop
/// over its rows, whatever a header claimed.
///
/// ```
/// use posenc::source::{MAX_OUTPUT_VALUES, check_shape};
/// assert!(check_shape("encode", "the output", &[2, 3, 8], MAX_OUTPUT_VALUES, "MAX").is_ok());
/// assert!(check_shape("encode", "the output", &[0, 1 << 62, 8], 1 << 31, "MAX").is_err());
/// assert!(check_shape("encode", "the output", &[usize::MAX, 0], 1 << 31, "MAX").is_err());
/// ```
///
/// # Errors
/// [`Error::TooLarge`] naming `op`, `what`, the shape and the limit.
pub fn check_shape(
    op: &'static str,
    what: &'static str,
    shape: &[usize],
    limit: u64,
    limit_name: &'static str,
) -> Result<()> {
    let values = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1u64, |n, &d| n.checked_mul(u64::try_from(d).ok()?));
    if values.is_none_or(|n| n > limit) {
        return Err(Error::TooLarge { op, what, shape: shape.to_vec(), limit_name, limit });
    }
    Ok(())
}
