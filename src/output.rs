//! Atomic output files: a result appears at its path complete, or not at all.
//!
//! A table can take a while to compute and write; a reader must never see half of it, and
//! a failed run must not clobber the previous good file. So the bytes go to a temporary
//! file in the target's directory (the same file system, so the final rename is atomic),
//! which replaces the target only once everything has been written and synced.

use std::fs;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};

use tempfile::NamedTempFile;

use crate::error::{Error, Result};

/// An output file under construction. Write through [`AtomicFile::writer`], then
/// [`AtomicFile::commit`]; dropping it uncommitted removes the temporary file and leaves
/// the target as it was.
///
/// ```
/// use std::io::Write;
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("out.csv");
/// let mut file = posenc::output::AtomicFile::create(&path)?;
/// writeln!(file.writer(), "1,2").map_err(|e| file.io_error(e))?;
/// assert!(!path.exists());
/// file.commit()?;
/// assert_eq!(std::fs::read_to_string(&path)?, "1,2\n");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AtomicFile {
    path: PathBuf,
    writer: BufWriter<NamedTempFile>,
}

impl AtomicFile {
    /// Starts a file that will replace `path` on commit. Nothing appears at `path` yet.
    ///
    /// On Unix a new file gets the usual mode (`0o666` less the umask), and a replaced file
    /// keeps the permissions it had, as if it had been overwritten in place. If `path` is a
    /// symbolic link, the link itself is replaced.
    ///
    /// # Errors
    /// [`Error::Io`] naming `path` if the temporary file cannot be created next to it (the
    /// directory is missing or not writable).
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut builder = tempfile::Builder::new();
        builder.prefix(".posenc-").suffix(".tmp");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // NamedTempFile defaults to 0o600, which would make outputs private by surprise;
            // 0o666 less the umask is what File::create gives.
            builder.permissions(fs::Permissions::from_mode(0o666));
        }
        let io_error = |source| Error::Io { path: path.clone(), source };
        let temp = builder.tempfile_in(dir).map_err(io_error)?;
        #[cfg(unix)]
        if let Some(old) = fs::metadata(&path).ok().filter(fs::Metadata::is_file) {
            temp.as_file().set_permissions(old.permissions()).map_err(io_error)?;
        }
        Ok(Self { path, writer: BufWriter::new(temp) })
    }

    /// The path the file will have once committed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the contents go. Writes are buffered; [`AtomicFile::commit`] flushes them.
    pub fn writer(&mut self) -> &mut BufWriter<NamedTempFile> {
        &mut self.writer
    }

    /// An [`Error::Io`] naming this file's target path, for errors met while writing.
    pub fn io_error(&self, source: io::Error) -> Error {
        Error::Io { path: self.path.clone(), source }
    }

    /// Flushes, syncs and moves the file into place, replacing whatever was at the path.
    ///
    /// # Errors
    /// [`Error::Io`] naming the path if flushing, syncing or renaming fails; the temporary
    /// file is removed and the target left untouched then.
    pub fn commit(self) -> Result<()> {
        let Self { path, writer } = self;
        let io_error = |source| Error::Io { path: path.clone(), source };
        let temp = writer.into_inner().map_err(|e| io_error(e.into_error()))?;
        // Without the sync, a crash soon after the rename could leave an empty file behind.
        temp.as_file().sync_all().map_err(io_error)?;
        temp.persist(&path).map_err(|e| io_error(e.error))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn nothing_appears_until_commit_and_drop_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        let mut f = AtomicFile::create(&path).unwrap();
        f.writer().write_all(b"abc").unwrap();
        assert!(!path.exists());
        drop(f);
        assert!(!path.exists());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "the temporary file is gone");
    }

    #[test]
    fn commit_replaces_an_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.txt");
        fs::write(&path, "old").unwrap();
        let mut f = AtomicFile::create(&path).unwrap();
        f.writer().write_all(b"new").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "old");
        f.commit().unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn permissions_are_not_narrowed_to_the_tempfile_default() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("fresh");
        AtomicFile::create(&fresh).unwrap().commit().unwrap();
        let plain = dir.path().join("plain");
        fs::File::create(&plain).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&fresh), mode(&plain));

        let kept = dir.path().join("kept");
        fs::write(&kept, "x").unwrap();
        fs::set_permissions(&kept, fs::Permissions::from_mode(0o640)).unwrap();
        AtomicFile::create(&kept).unwrap().commit().unwrap();
        assert_eq!(mode(&kept), 0o640);
    }

    #[test]
    fn a_missing_directory_is_an_io_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/dir/out.csv");
        match AtomicFile::create(&path) {
            Err(Error::Io { path: p, .. }) => assert_eq!(p, path),
            other => panic!("{other:?}"),
        }
    }
}
