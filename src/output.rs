//! Where results go: atomic replacement of files, direct writes to devices, FIFOs and open
//! descriptors, cleanup of temporary files on a signal, and (re-exported from
//! [`crate::alloc`]) fallible allocation of output buffers.
//!
//! A table can take a while to compute and write; a reader must never see half of it, and
//! a failed run must not clobber the previous good file. So a result bound for a regular file
//! (or a path where nothing is yet) goes to a temporary file in the target's directory (the
//! same file system, so the final rename is atomic), which replaces the target only once
//! everything has been written and synced. Renaming over anything else would destroy it: a
//! character device (`/dev/null`), a FIFO whose reader is waiting, the link `/dev/stdout`.
//! Those are written in place, as a shell's `>` would. [`Target::resolve`] decides which,
//! from what is at the path, before any work starts; [`Target::open`] opens it once the
//! result is ready.
//!
//! | what is at the path | what happens |
//! | --- | --- |
//! | nothing, or a regular file | temporary file in its directory, renamed over it |
//! | a symbolic link | followed; the file it leads to is treated as above (the link stays) |
//! | a character device, a FIFO | opened for writing and written directly |
//! | `/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N` | descriptor N duplicated and written |
//! | a directory, a socket, a block device | refused with [`Error::OutputPath`] |
//!
//! A descriptor is an output only if the process was given it, open for writing: one it
//! opened itself (a signal handler's socket, a driver's file, which take the lowest free
//! numbers, so `/dev/fd/4` names one when the caller closed 3 and 4) would swallow the
//! result. [`note_inherited_descriptors`] records which those are.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tempfile::NamedTempFile;

use crate::error::{Error, Result};

// At their old path too: they live in `alloc`, which the library has without the `cli` feature.
pub use crate::alloc::{check_allocation, try_zeroed_vec, try_zeros};

/// Symbolic links followed from an output path before giving up: Linux's own limit (ELOOP).
const MAX_LINKS: usize = 40;

/// What an output path may name, for [`Error::OutputPath`].
const ALLOWED: &str = "an output goes to a regular file or a new path in an existing \
directory (replaced atomically), a character device, a FIFO, a descriptor posenc was given \
open for writing (/dev/stdout, /dev/fd/N) or standard output (-o -)";

/// Where an output goes, decided from what is at its path before any work is done.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target {
    /// A regular file or a path where nothing is: written to a temporary file in the same
    /// directory, then renamed over `path` ([`AtomicFile`]).
    Replace {
        /// The path as given, for messages.
        given: PathBuf,
        /// Where the given path's symbolic links lead: the file that is replaced.
        path: PathBuf,
    },
    /// A character device or a FIFO: opened for writing (not truncated, not created) and
    /// written directly. A FIFO's open waits for a reader, as a shell's `>` does.
    Stream {
        /// The device or FIFO, symbolic links followed.
        path: PathBuf,
    },
    /// A descriptor this process holds, named as `/dev/stdout`, `/dev/fd/N` or
    /// `/proc/self/fd/N` (or through a link to one): duplicated and written directly, so
    /// a pipe, a terminal or a file opened by the shell (`3>>log`, in append mode) gets the
    /// bytes as it would from the program's own descriptor.
    Descriptor {
        /// The path as given, for messages.
        given: PathBuf,
        /// The descriptor's number.
        fd: i32,
    },
    /// The process's standard output (what the CLI's `-o -` means).
    Stdout,
}

impl Target {
    /// Decides where an output for `path` goes, from what is there now (see the
    /// [module documentation](self)), and checks what can be checked before the work: that
    /// a file can be created in the directory of a file to replace (one is created and
    /// removed at once), that a device or FIFO may be opened for writing (a character device
    /// is opened and closed at once; a FIFO, whose open waits for a reader, is not), that a
    /// descriptor was given to the process open for writing.
    ///
    /// ```
    /// use posenc::output::Target;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let new = dir.path().join("out.csv");
    /// assert!(matches!(Target::resolve(&new)?, Target::Replace { .. }));
    /// # #[cfg(unix)]
    /// assert_eq!(
    ///     Target::resolve("/dev/null")?,
    ///     Target::Stream { path: "/dev/null".into() }
    /// );
    /// assert!(Target::resolve(dir.path()).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutputPath`] for a directory, a socket, a block device, an empty path, a
    /// descriptor the process was not given or may not write (see
    /// [`note_inherited_descriptors`]), a name in a descriptor directory that is no
    /// descriptor number, or more than 40 symbolic links in a row;
    /// [`Error::Io`] naming the path when it cannot be examined, when nothing is there and
    /// its directory does not exist, when no file can be created in its directory (`cannot
    /// create a file in DIR`), or when a device or FIFO may not be written.
    pub fn resolve(path: impl AsRef<Path>) -> Result<Self> {
        let given = path.as_ref().to_path_buf();
        let refuse =
            |what: String| Error::OutputPath { path: given.clone(), what, allowed: ALLOWED };
        if given.as_os_str().is_empty() {
            return Err(refuse("an empty path".into()));
        }
        let io_error = |source| Error::Io { path: given.clone(), source };
        let mut path = given.clone();
        for _ in 0..=MAX_LINKS {
            match descriptor(&path) {
                Some(Descriptor::Number(fd)) => {
                    writable_descriptor(fd).map_err(refuse)?;
                    return Ok(Self::Descriptor { given, fd });
                }
                Some(Descriptor::Unheld(digits)) => {
                    return Err(refuse(format!("descriptor {digits}, {NOT_GIVEN}")));
                }
                Some(Descriptor::NotANumber) => {
                    return Err(refuse(
                        "a name in a descriptor directory that is not a descriptor number".into(),
                    ));
                }
                None => {}
            }
            let meta = match fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    check_directory(&path).map_err(io_error)?;
                    AtomicFile::create_at(&given, &path)?;
                    return Ok(Self::Replace { given, path });
                }
                Err(e) => return Err(io_error(e)),
            };
            let kind = meta.file_type();
            if kind.is_symlink() {
                // A relative link is relative to the directory holding it; `join` keeps an
                // absolute one as it is.
                let link = fs::read_link(&path).map_err(io_error)?;
                path = directory_of(&path).join(link);
                continue;
            }
            if kind.is_file() {
                // Made and removed at once: a directory nothing can be created in is found
                // now, not once the result is ready.
                AtomicFile::create_at(&given, &path)?;
                check_replaceable(&path).map_err(io_error)?;
                return Ok(Self::Replace { given, path });
            }
            return match special_kind(&meta) {
                Special::Stream => {
                    check_write_access(&path).map_err(io_error)?;
                    check_device_opens(&path, &meta).map_err(io_error)?;
                    Ok(Self::Stream { path })
                }
                Special::Refused(what) => Err(refuse(what.into())),
            };
        }
        Err(refuse(format!("a chain of more than {MAX_LINKS} symbolic links")))
    }

    /// Standard output as the target, once it is known to be writable: a descriptor 1 open
    /// only for reading (`posenc ... 1<file`) would drop every byte without an error.
    ///
    /// # Errors
    /// [`Error::OutputPath`] naming `<stdout>` if descriptor 1 is open only for reading, or
    /// was closed when the program started ([`note_closed_standard_descriptors`]).
    pub fn stdout() -> Result<Self> {
        let refuse = |what: &str| Error::OutputPath {
            path: PathBuf::from("<stdout>"),
            what: format!("standard output, {what}"),
            allowed: ALLOWED,
        };
        if closed_at_start(1) {
            return Err(refuse(NOT_GIVEN));
        }
        #[cfg(unix)]
        if let Some(mode) = access_mode(1) {
            writable_mode(mode).map_err(refuse)?;
        }
        Ok(Self::Stdout)
    }

    /// Whether the output goes to standard output.
    pub fn is_stdout(&self) -> bool {
        matches!(self, Self::Stdout)
    }

    /// Whether the output goes to a terminal: standard output on one, a descriptor that is
    /// one (`-o /dev/stdout`), or a terminal device named by its path (`-o /dev/tty`;
    /// opened for the check without blocking or becoming the controlling terminal, and
    /// closed). A serial line is a terminal too.
    pub fn is_terminal(&self) -> bool {
        use std::io::IsTerminal;
        match self {
            Self::Stdout => io::stdout().is_terminal(),
            Self::Replace { .. } => false,
            Self::Stream { path } => terminal_device(path),
            Self::Descriptor { fd, .. } => descriptor_is_terminal(*fd),
        }
    }

    /// The path an output goes to, as given (`-` for standard output), for messages.
    pub fn shown(&self) -> String {
        match self {
            Self::Replace { given, .. } | Self::Descriptor { given, .. } => {
                given.display().to_string()
            }
            Self::Stream { path } => path.display().to_string(),
            Self::Stdout => "-".into(),
        }
    }

    /// Opens the output: creates the temporary file of a [`Target::Replace`], opens a
    /// device or FIFO, duplicates a descriptor, or locks standard output. Call it once the
    /// result is computed, so that a failed computation leaves no temporary file.
    ///
    /// # Errors
    /// [`Error::Io`] naming the path if it cannot be opened.
    pub fn open(&self) -> Result<Output> {
        let sink = match self {
            Self::Replace { given, path } => Sink::Replace(AtomicFile::create_at(given, path)?),
            Self::Stream { path } => {
                let mut options = OpenOptions::new();
                options.write(true);
                // A terminal written to never becomes the process's controlling one.
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NOCTTY);
                let file = options
                    .open(path)
                    .map_err(|source| Error::Io { path: path.clone(), source })?;
                Sink::Stream { path: path.clone(), writer: BufWriter::new(file) }
            }
            Self::Descriptor { given, fd } => {
                let file =
                    duplicate(*fd).map_err(|source| Error::Io { path: given.clone(), source })?;
                Sink::Stream { path: given.clone(), writer: BufWriter::new(file) }
            }
            Self::Stdout => Sink::Stdout(BufWriter::new(io::stdout().lock())),
        };
        Ok(Output { sink })
    }
}

/// An output being written: a temporary file to commit, or a stream written directly. Write
/// through [`Output::writer`], then [`Output::commit`].
#[derive(Debug)]
pub struct Output {
    sink: Sink,
}

#[derive(Debug)]
enum Sink {
    Replace(AtomicFile),
    Stream { path: PathBuf, writer: BufWriter<File> },
    Stdout(BufWriter<io::StdoutLock<'static>>),
}

impl Output {
    /// Where the contents go. Writes are buffered; [`Output::commit`] flushes them.
    pub fn writer(&mut self) -> &mut dyn Write {
        match &mut self.sink {
            Sink::Replace(file) => file.writer(),
            Sink::Stream { writer, .. } => writer,
            Sink::Stdout(writer) => writer,
        }
    }

    /// Whether the bytes go straight to their reader (a device, FIFO, descriptor or standard
    /// output) rather than to a file that appears only on commit. A stream's reader can stop
    /// reading early, which shows as [`io::ErrorKind::BrokenPipe`].
    pub fn is_stream(&self) -> bool {
        !matches!(self.sink, Sink::Replace(_))
    }

    /// An [`Error::Io`] naming the output, for errors met while writing.
    pub fn io_error(&self, source: io::Error) -> Error {
        let path = match &self.sink {
            Sink::Replace(file) => file.given.clone(),
            Sink::Stream { path, .. } => path.clone(),
            Sink::Stdout(_) => PathBuf::from("<stdout>"),
        };
        Error::Io { path, source: without_temporary_name(source) }
    }

    /// Finishes the output: commits a temporary file ([`AtomicFile::commit`]), flushes a
    /// stream.
    ///
    /// # Errors
    /// [`Error::Io`] naming the output if flushing, syncing or renaming fails.
    pub fn commit(mut self) -> Result<()> {
        let flushed = match &mut self.sink {
            Sink::Replace(_) => Ok(()),
            Sink::Stream { writer, .. } => writer.flush(),
            Sink::Stdout(writer) => writer.flush(),
        };
        flushed.map_err(|e| self.io_error(e))?;
        match self.sink {
            Sink::Replace(file) => file.commit(),
            Sink::Stream { .. } | Sink::Stdout(_) => Ok(()),
        }
    }
}

/// An output file under construction. Write through [`AtomicFile::writer`], then
/// [`AtomicFile::commit`]; dropping it uncommitted removes the temporary file and leaves
/// the target as it was. While it lives, the temporary file is listed for
/// [`remove_temporaries_on_signals`].
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
    /// The path as given, for messages.
    given: PathBuf,
    /// The file replaced on commit: the given path with its symbolic links followed.
    target: PathBuf,
    // Declared before `live` so that the temporary file is removed before it leaves the
    // registry: a signal in between then finds nothing to remove rather than a file it
    // cannot see.
    writer: BufWriter<NamedTempFile>,
    live: Live,
}

impl AtomicFile {
    /// Starts a file that will replace `path` on commit. Nothing appears at `path` yet.
    ///
    /// On Unix a new file gets the usual mode (`0o666` less the umask), and a replaced file
    /// keeps the permissions it had, as if it had been overwritten in place. If `path` is a
    /// symbolic link it is followed: the file it leads to is replaced (the temporary file
    /// is made in that file's directory) and the link stays a link.
    ///
    /// # Errors
    /// [`Error::OutputPath`] if `path` leads to something other than a regular file or
    /// nothing (a device, FIFO or descriptor, which [`Target::open`] writes in place; a
    /// directory); [`Error::Io`] naming `path` if the temporary file cannot be created next
    /// to its target (the directory is missing or not writable).
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        match Target::resolve(path.as_ref())? {
            Target::Replace { given, path } => Self::create_at(&given, &path),
            _ => Err(Error::OutputPath {
                path: path.as_ref().to_path_buf(),
                what: "something other than a regular file".into(),
                allowed: "AtomicFile replaces regular files and creates new ones; \
                          Target::open writes to devices, FIFOs and descriptors in place",
            }),
        }
    }

    /// Starts a file that will replace `target`, a regular file or a new path whose
    /// symbolic links have been followed; errors name `given`.
    fn create_at(given: &Path, target: &Path) -> Result<Self> {
        let io_error = |source| Error::Io { path: given.to_path_buf(), source };
        let dir = directory_of(target);
        let mut builder = tempfile::Builder::new();
        builder.prefix(".posenc-").suffix(".tmp");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // NamedTempFile defaults to 0o600, which would make outputs private by surprise;
            // 0o666 less the umask is what File::create gives.
            builder.permissions(fs::Permissions::from_mode(0o666));
        }
        // Created and listed under one lock, so a signal's cleanup never finds the file
        // made but not yet listed.
        let (temp, live) = {
            let mut registry = live_files();
            let temp = builder.tempfile_in(dir).map_err(|e| io_error(cannot_create_in(dir, e)))?;
            let live = Live::new(temp.path(), &mut registry);
            (temp, live)
        };
        #[cfg(unix)]
        if let Some(old) = fs::metadata(target).ok().filter(fs::Metadata::is_file) {
            temp.as_file().set_permissions(old.permissions()).map_err(io_error)?;
        }
        Ok(Self {
            given: given.to_path_buf(),
            target: target.to_path_buf(),
            writer: BufWriter::new(temp),
            live,
        })
    }

    /// The path the file will have once committed: the given path with its symbolic links
    /// followed.
    pub fn path(&self) -> &Path {
        &self.target
    }

    /// Where the contents go. Writes are buffered; [`AtomicFile::commit`] flushes them.
    pub fn writer(&mut self) -> &mut BufWriter<NamedTempFile> {
        &mut self.writer
    }

    /// An [`Error::Io`] naming this file's path as given, for errors met while writing.
    pub fn io_error(&self, source: io::Error) -> Error {
        Error::Io { path: self.given.clone(), source: without_temporary_name(source) }
    }

    /// Flushes, syncs and moves the file into place, replacing whatever was at the path.
    ///
    /// # Errors
    /// [`Error::Io`] naming the path if flushing, syncing or renaming fails; the temporary
    /// file is removed and the target left untouched then.
    pub fn commit(self) -> Result<()> {
        let Self { given, target, writer, live } = self;
        let io_error =
            |source| Error::Io { path: given.clone(), source: without_temporary_name(source) };
        let temp = writer.into_inner().map_err(|e| io_error(e.into_error()))?;
        // Without the sync, a crash soon after the rename could leave an empty file behind.
        temp.as_file().sync_all().map_err(io_error)?;
        // The registry stays locked across the rename, so a signal's cleanup runs either
        // before it (and removes the temporary file, the target untouched) or after it (and
        // finds nothing of this file to remove), never in between.
        let mut registry = live_files();
        // A failed rename hands the temporary file back; dropping it removes the file.
        let renamed = temp.persist(&target).map(drop).map_err(|e| io_error(e.error));
        live.release(&mut registry);
        renamed
    }
}

/// The temporary files of live [`AtomicFile`]s, for the signal cleanup. A plain mutex is
/// enough because the cleanup runs on signal-hook's thread, not inside a signal handler.
static LIVE_FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The registry, even if a thread panicked while holding it: the list stays consistent
/// (every change is one push or one removal).
fn live_files() -> MutexGuard<'static, Vec<PathBuf>> {
    LIVE_FILES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One temporary file's place in [`LIVE_FILES`], removed when dropped or released.
#[derive(Debug)]
struct Live {
    path: Option<PathBuf>,
}

impl Live {
    /// Joins the registry through a lock the caller holds.
    fn new(path: &Path, registry: &mut Vec<PathBuf>) -> Self {
        registry.push(path.to_path_buf());
        Self { path: Some(path.to_path_buf()) }
    }

    /// Leaves the registry through a lock the caller holds.
    fn release(mut self, registry: &mut Vec<PathBuf>) {
        if let Some(path) = self.path.take() {
            registry.retain(|p| *p != path);
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            live_files().retain(|p| *p != path);
        }
    }
}

/// A directory for scratch files (the bench's temporary checkpoint), under the system's
/// temporary directory: removed with everything in it when dropped, and by the signal
/// cleanup ([`remove_temporaries_on_signals`]) while it lives. It is made and listed for the
/// cleanup under one lock, so a signal never finds it made but not listed (a checkpoint's
/// directory used to be left behind, empty, by Ctrl-C). Its hidden name (`.posenc-...`)
/// says what it is, should SIGKILL leave it.
#[derive(Debug)]
pub struct ScratchDir {
    // Declared before `live`, so that the directory is removed before it leaves the list.
    dir: tempfile::TempDir,
    _live: Live,
}

impl ScratchDir {
    /// A fresh directory (mode 0700) in [`std::env::temp_dir`].
    ///
    /// # Errors
    /// [`Error::Io`] naming the temporary directory if nothing can be made there.
    pub fn new() -> Result<Self> {
        let parent = std::env::temp_dir();
        let mut registry = live_files();
        let dir = tempfile::Builder::new().prefix(".posenc-").tempdir_in(&parent).map_err(|e| {
            Error::Io { path: parent.clone(), source: cannot_create_in(&parent, e) }
        })?;
        let live = Live::new(dir.path(), &mut registry);
        Ok(Self { dir, _live: live })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// The temporary files this process is writing now.
#[cfg(test)]
fn live_temporaries() -> Vec<PathBuf> {
    live_files().clone()
}

/// On SIGINT, SIGTERM, SIGHUP or any other signal of [`CLEANUP_SIGNALS`], removes the
/// temporary files of every live [`AtomicFile`] and every live [`ScratchDir`], then dies of
/// the same signal as if it were not handled (a shell reports 130, 143, 129, ...). SIGXFSZ
/// is ignored instead, so a write past a file-size limit fails with an error (EFBIG) that
/// the writer reports, its temporary file removed as after any failed write. For programs:
/// it installs process-wide handlers, once (later calls do nothing). SIGKILL cannot be
/// caught: its temporary file stays behind under its hidden name.
///
/// The handlers only wake a thread (signal-hook's iterator); the files are removed there,
/// outside signal context, so the registry can be an ordinary mutex. A commit holds the
/// same lock across its rename: a signal either removes the temporary file before the
/// rename (the target untouched) or comes after it. Does nothing on non-Unix systems.
///
/// # Errors
/// What the system reports if the handlers cannot be installed or the thread cannot start.
pub fn remove_temporaries_on_signals() -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::sync::atomic::{AtomicBool, Ordering};
        static INSTALLED: AtomicBool = AtomicBool::new(false);
        if INSTALLED.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let installed = install_signal_thread();
        if installed.is_err() {
            INSTALLED.store(false, Ordering::SeqCst);
        }
        installed
    }
    #[cfg(not(unix))]
    Ok(())
}

/// The signals after which [`remove_temporaries_on_signals`] cleans up: every one whose
/// default action ends the process and that a handler may catch, except SIGPIPE (ignored by
/// Rust's runtime: a closed reader is a write error) and the faults a program raises itself
/// (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS, SIGABRT).
#[cfg(unix)]
pub const CLEANUP_SIGNALS: [i32; 10] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGXCPU,
];

#[cfg(unix)]
fn install_signal_thread() -> io::Result<()> {
    use signal_hook::iterator::Signals;
    // A write past a file-size limit (`ulimit -f`) then fails with EFBIG, which the writer
    // reports and cleans up after, rather than killing the process mid-file.
    // SAFETY: setting a signal's disposition to SIG_IGN touches no memory of the process.
    if unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    let mut signals = Signals::new(CLEANUP_SIGNALS)?;
    std::thread::Builder::new().name("posenc-signals".into()).spawn(move || {
        if let Some(signal) = signals.forever().next() {
            // Held until the process is gone, so no commit can start after the cleanup.
            let registry = live_files();
            remove_listed(&registry);
            // Resets the default action and raises the signal again: the parent sees the
            // process die of it, as it would have without posenc's handler.
            let _ = signal_hook::low_level::emulate_default_handler(signal);
            // Reached only if the signal did not end the process; exit as a shell reports.
            std::process::exit(128 + signal);
        }
    })?;
    Ok(())
}

/// Removes the listed temporary files and scratch directories.
fn remove_listed(registry: &[PathBuf]) {
    for path in registry {
        // Already gone is fine: the file was being dropped as the signal came.
        if fs::remove_file(path).is_err() {
            remove_scratch_dir(path);
        }
    }
}

/// Removes a scratch directory with what is in it. The program keeps running while the
/// signal thread does this, and may create a file in the directory between
/// `remove_dir_all`'s listing and its final `rmdir` (the bench's checkpoint, created as the
/// signal came: the directory was left behind, once in a loaded test run); so it tries
/// again while the directory is still there, a bounded number of times.
fn remove_scratch_dir(path: &Path) {
    for _ in 0..100 {
        match fs::remove_dir_all(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound && path.exists() => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            _ => return,
        }
    }
}

/// Removes the temporary files of every live [`AtomicFile`] and every live [`ScratchDir`]
/// now, for a program about to end without unwinding (the `posenc` binary's allocator, when
/// memory runs out). The list stays locked for good afterwards, so no commit starts after
/// it. Does nothing while the list is locked (a commit or a creation in progress, on this
/// thread or another).
pub fn remove_temporaries_now() {
    let registry = match LIVE_FILES.try_lock() {
        Ok(registry) => registry,
        Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    remove_listed(&registry);
    std::mem::forget(registry);
}

/// The directory holding `path`: its parent, or `.` for a bare name.
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Fails unless the directory that would hold a new file at `path` exists.
fn check_directory(path: &Path) -> io::Result<()> {
    let dir = directory_of(path);
    if fs::metadata(dir)?.is_dir() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is not a directory", dir.display()),
        ))
    }
}

/// The error of creating a temporary file in `dir`, naming the directory: tempfile's own
/// ends in ` at path "..."`, the random name it tried, which the user never gave.
fn cannot_create_in(dir: &Path, e: io::Error) -> io::Error {
    let reason = without_temporary_name(e);
    io::Error::new(reason.kind(), format!("cannot create a file in {}: {reason}", dir.display()))
}

/// `e` without the ` at path "..."` that tempfile appends to the errors of its files: the
/// temporary file's random name, which the user never gave (a write past a file-size limit
/// read `File too large (os error 27) at path "./.posenc-rAyUrm.tmp"`).
fn without_temporary_name(e: io::Error) -> io::Error {
    if e.get_ref().is_none() {
        return e;
    }
    let text = e.to_string();
    match text.split_once(" at path ") {
        Some((reason, _)) => io::Error::new(e.kind(), reason.to_string()),
        None => e,
    }
}

/// Fails unless this process may open `path` for writing, by its effective ids (what the
/// open will be judged by).
#[cfg(unix)]
fn check_write_access(path: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call; faccessat
    // only reads it.
    let rc =
        unsafe { libc::faccessat(libc::AT_FDCWD, c_path.as_ptr(), libc::W_OK, libc::AT_EACCESS) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(not(unix))]
fn check_write_access(_: &Path) -> io::Result<()> {
    Ok(())
}

/// A character device is opened for writing and closed at once: one with no driver behind
/// it (`ENXIO`), or `/dev/tty` without a controlling terminal, would otherwise fail only once
/// the result is computed. Without blocking, and without becoming the process's terminal.
/// So such a device is opened twice, this probe and the write (three times for a command's
/// binary output, which [`Target::is_terminal`] opens once more to ask whether it is a
/// terminal): a device whose open or close acts (a serial port's close drops DTR, a watchdog
/// starts) acts as often. A FIFO is not
/// opened: its open waits for a reader, as a shell's `>` does, when the result is ready.
#[cfg(unix)]
fn check_device_opens(path: &Path, meta: &fs::Metadata) -> io::Result<()> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    if !meta.file_type().is_char_device() {
        return Ok(());
    }
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(path)
        .map(drop)
}

#[cfg(not(unix))]
fn check_device_opens(_: &Path, _: &fs::Metadata) -> io::Result<()> {
    Ok(())
}

/// Whether the character device at `path` is a terminal (a FIFO is not opened: its open
/// waits for a reader).
#[cfg(unix)]
fn terminal_device(path: &Path) -> bool {
    use std::io::IsTerminal;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let is_char = fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device());
    is_char
        && OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
            .open(path)
            .is_ok_and(|f| f.is_terminal())
}

#[cfg(not(unix))]
fn terminal_device(_: &Path) -> bool {
    false
}

#[cfg(unix)]
fn descriptor_is_terminal(fd: i32) -> bool {
    // SAFETY: isatty only reads the descriptor's state; an invalid one gives 0.
    unsafe { libc::isatty(fd) == 1 }
}

#[cfg(not(unix))]
fn descriptor_is_terminal(_: i32) -> bool {
    false
}

/// A file marked immutable or append-only (`chattr +i`, `+a`) cannot be renamed over, which
/// is how a result replaces it: found now from its flags, not at the rename once the result
/// is computed (round ten of the hostile probes: 20 s of work first), and refused with the
/// error the rename would give. A file whose flags cannot be read (no read permission, a
/// file system without them) is left to the rename.
#[cfg(target_os = "linux")]
fn check_replaceable(path: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // The inode flags of linux/fs.h.
    const FS_IMMUTABLE_FL: libc::c_int = 0x10;
    const FS_APPEND_FL: libc::c_int = 0x20;
    let Ok(file) =
        OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path)
    else {
        return Ok(());
    };
    // The kernel copies an int, whatever the request's encoded size says (its long).
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes the file's flags, an int, into `flags`, which lives
    // across the call; the descriptor is open.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) };
    if rc == 0 && flags & (FS_IMMUTABLE_FL | FS_APPEND_FL) != 0 {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    Ok(())
}

/// [`check_replaceable`] on macOS: the immutable and append-only flags (`chflags uchg`,
/// `uappnd` and their system forms), which make the rename fail with EPERM.
#[cfg(target_os = "macos")]
fn check_replaceable(path: &Path) -> io::Result<()> {
    use std::os::macos::fs::MetadataExt;
    // sys/stat.h's UF_IMMUTABLE, UF_APPEND, SF_IMMUTABLE and SF_APPEND.
    const LOCKED: u32 = 0x2 | 0x4 | 0x2_0000 | 0x4_0000;
    match fs::metadata(path) {
        Ok(meta) if meta.st_flags() & LOCKED != 0 => Err(io::Error::from_raw_os_error(libc::EPERM)),
        _ => Ok(()),
    }
}

/// [`check_replaceable`] on Windows: the rename that commits an output (`MoveFileExW`)
/// fails on a read-only target, which Unix renames over.
#[cfg(windows)]
fn check_replaceable(path: &Path) -> io::Result<()> {
    match fs::metadata(path) {
        Ok(meta) if meta.permissions().readonly() => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "a read-only file, which Windows does not replace",
        )),
        _ => Ok(()),
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos", windows)))]
fn check_replaceable(_: &Path) -> io::Result<()> {
    Ok(())
}

/// What to do with a path that is neither a regular file, a directory nor a link.
enum Special {
    /// A character device or a pipe, written as a stream (Unix; elsewhere every such path
    /// is refused).
    #[cfg_attr(not(unix), allow(dead_code))]
    Stream,
    Refused(&'static str),
}

#[cfg(unix)]
fn special_kind(meta: &fs::Metadata) -> Special {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_char_device() || kind.is_fifo() {
        Special::Stream
    } else if kind.is_dir() {
        Special::Refused("a directory")
    } else if kind.is_socket() {
        Special::Refused("a socket")
    } else if kind.is_block_device() {
        // Rewriting a disk from the start is never what a table output means.
        Special::Refused("a block device")
    } else {
        Special::Refused("a file of an unknown kind")
    }
}

#[cfg(not(unix))]
fn special_kind(meta: &fs::Metadata) -> Special {
    if meta.is_dir() {
        Special::Refused("a directory")
    } else {
        Special::Refused("a file of an unknown kind")
    }
}

/// What a path in one of this process's descriptor directories names.
#[cfg_attr(not(unix), allow(dead_code))]
enum Descriptor {
    /// Descriptor N.
    Number(i32),
    /// Digits past any descriptor number (2^31 and more): no process holds such a
    /// descriptor.
    Unheld(String),
    /// Something other than digits.
    NotANumber,
}

/// How a refused descriptor is described: one the process was not given.
const NOT_GIVEN: &str = "which was not open when posenc started";

/// What `path` names if it is in this process's descriptor directory (`/proc/self/fd`,
/// `/proc/<pid>/fd`, `/proc/thread-self/fd`, `/dev/fd`); `None` for any other path.
#[cfg(unix)]
fn descriptor(path: &Path) -> Option<Descriptor> {
    let name = path.file_name()?;
    // On Linux /dev/fd and /proc/self lead to /proc/<pid>; on the BSDs and macOS /dev/fd is
    // a directory of its own.
    let dir = fs::canonicalize(directory_of(path)).ok()?;
    let pid = std::process::id().to_string();
    let parts: Vec<&str> = dir.iter().filter_map(|c| c.to_str()).collect();
    let ours = match parts.as_slice() {
        ["/", "dev", "fd"] => true,
        ["/", "proc", p, "fd"] | ["/", "proc", p, "task", _, "fd"] => *p == pid,
        _ => false,
    };
    if !ours {
        return None;
    }
    let digits = name.to_str().filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    Some(match digits {
        None => Descriptor::NotANumber,
        Some(digits) => match digits.parse() {
            Ok(fd) => Descriptor::Number(fd),
            Err(_) => Descriptor::Unheld(digits.trim_start_matches('0').to_string()),
        },
    })
}

#[cfg(not(unix))]
fn descriptor(_: &Path) -> Option<Descriptor> {
    None
}

/// The descriptors open when [`note_inherited_descriptors`] was called, sorted.
#[cfg(unix)]
static INHERITED: std::sync::OnceLock<Vec<i32>> = std::sync::OnceLock::new();

/// The standard descriptors closed when the process started, one bit per descriptor
/// ([`note_closed_standard_descriptors`]).
static CLOSED_AT_START: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Records that the standard descriptors `fds` (0, 1 or 2; others are ignored) were closed
/// when the process started. Rust's runtime opens `/dev/null` in place of a closed standard
/// descriptor before `main` runs, so by then the descriptor looks given, and an output sent to
/// it (`-o /dev/fd/1`, `-o /dev/stdout`, standard output itself) would vanish without an
/// error. Once recorded, [`Target::resolve`] and [`Target::stdout`] refuse such a descriptor
/// as one that was not open when the program started. A program learns which were closed
/// from code that runs before the runtime starts: the `posenc` binary records them from an
/// ELF constructor (Linux).
pub fn note_closed_standard_descriptors(fds: &[i32]) {
    for &fd in fds.iter().filter(|fd| (0..3).contains(*fd)) {
        CLOSED_AT_START.fetch_or(1 << fd, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether [`note_closed_standard_descriptors`] recorded `fd` as closed at the start.
fn closed_at_start(fd: i32) -> bool {
    (0..3).contains(&fd)
        && CLOSED_AT_START.load(std::sync::atomic::Ordering::Relaxed) & (1 << fd) != 0
}

/// Records the descriptors open now as the ones the process was given, so that
/// [`Target::resolve`] accepts `/dev/fd/N` for those only. A program calls it first thing in
/// `main`, before anything opens a file (the `posenc` binary does).
///
/// Without the record a descriptor counts as given when it is open without close-on-exec:
/// descriptors that survive an `exec` have none, while those Rust, signal-hook and the GPU
/// drivers open carry it. The record is exact where a library opens one without it. Where
/// the open descriptors cannot be listed (no `/proc/self/fd` or `/dev/fd`) nothing is
/// recorded. Does nothing on non-Unix systems, or when called a second time.
pub fn note_inherited_descriptors() {
    #[cfg(unix)]
    if let Some(open) = open_descriptors() {
        let _ = INHERITED.set(open);
    }
}

/// The descriptors open now, sorted, or `None` if they cannot be listed.
#[cfg(unix)]
fn open_descriptors() -> Option<Vec<i32>> {
    let listed: Vec<i32> = ["/proc/self/fd", "/dev/fd"].iter().find_map(|dir| {
        let entries = fs::read_dir(dir).ok()?;
        Some(entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
    })?;
    // The listing held a descriptor of its own while it was read: closed now, it drops out.
    let mut open: Vec<i32> =
        listed.into_iter().filter(|&fd| descriptor_flags(fd).is_some()).collect();
    open.sort_unstable();
    Some(open)
}

/// Whether the process was given descriptor `fd` and may write to it; otherwise what the
/// descriptor is, for [`Error::OutputPath`].
#[cfg(unix)]
fn writable_descriptor(fd: i32) -> std::result::Result<(), String> {
    let given = !closed_at_start(fd)
        && match (INHERITED.get(), descriptor_flags(fd)) {
            (_, None) => false,
            (Some(inherited), Some(_)) => inherited.binary_search(&fd).is_ok(),
            (None, Some(flags)) => flags & libc::FD_CLOEXEC == 0,
        };
    if !given {
        return Err(format!("descriptor {fd}, {NOT_GIVEN}"));
    }
    match access_mode(fd) {
        Some(mode) => writable_mode(mode).map_err(|what| format!("descriptor {fd}, {what}")),
        None => Err(format!("descriptor {fd}, {NOT_GIVEN}")),
    }
}

#[cfg(not(unix))]
fn writable_descriptor(fd: i32) -> std::result::Result<(), String> {
    Err(format!("descriptor {fd}, {NOT_GIVEN}"))
}

/// Refuses an access mode (`O_ACCMODE` of the status flags) that cannot write.
#[cfg(unix)]
fn writable_mode(mode: libc::c_int) -> std::result::Result<(), &'static str> {
    if mode == libc::O_WRONLY || mode == libc::O_RDWR {
        Ok(())
    } else {
        Err("which is open only for reading")
    }
}

/// The descriptor flags of `fd` (`FD_CLOEXEC`), or `None` if it is not open.
#[cfg(unix)]
fn descriptor_flags(fd: i32) -> Option<libc::c_int> {
    // SAFETY: F_GETFD reads the descriptor's flags and touches no memory; a descriptor that
    // is not open gives -1 (EBADF).
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    (flags != -1).then_some(flags)
}

/// The access mode of `fd` (`O_RDONLY`, `O_WRONLY`, `O_RDWR`), or `None` if it is not open.
#[cfg(unix)]
fn access_mode(fd: i32) -> Option<libc::c_int> {
    // SAFETY: F_GETFL reads the open file's status flags and touches no memory; a descriptor
    // that is not open gives -1 (EBADF).
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    (flags != -1).then_some(flags & libc::O_ACCMODE)
}

/// A new descriptor (close-on-exec) for the open file `fd` refers to, as a `File`.
#[cfg(unix)]
fn duplicate(fd: i32) -> io::Result<File> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: F_DUPFD_CLOEXEC touches no memory; it fails with EBADF if `fd` is not open.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` was just returned by fcntl, is open, and nothing else owns it.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(new) }))
}

#[cfg(not(unix))]
fn duplicate(_: i32) -> io::Result<File> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
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

    #[test]
    fn live_temporaries_are_listed_until_committed_or_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let listed = |f: &AtomicFile| {
            let temps = live_temporaries();
            temps.iter().any(|p| p.parent() == f.path().parent() && p.exists())
        };
        let committed = AtomicFile::create(dir.path().join("a")).unwrap();
        assert!(listed(&committed));
        let dropped = AtomicFile::create(dir.path().join("b")).unwrap();
        committed.commit().unwrap();
        drop(dropped);
        let ours: Vec<PathBuf> =
            live_temporaries().into_iter().filter(|p| p.starts_with(dir.path())).collect();
        assert!(ours.is_empty(), "{ours:?}");
    }

    #[test]
    fn a_scratch_directory_is_listed_while_it_lives_and_removed_with_its_files() {
        let dir = ScratchDir::new().unwrap();
        let path = dir.path().to_path_buf();
        fs::write(path.join("checkpoint"), b"x").unwrap();
        assert!(live_temporaries().contains(&path));
        drop(dir);
        assert!(!path.exists());
        assert!(!live_temporaries().contains(&path));
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_is_followed_and_stays_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        fs::create_dir(&sub).unwrap();
        let real = sub.join("real.txt");
        fs::write(&real, "old").unwrap();
        let link = dir.path().join("link.txt");
        std::os::unix::fs::symlink("sub/real.txt", &link).unwrap();
        let mut f = AtomicFile::create(&link).unwrap();
        assert_eq!(f.path(), dir.path().join("sub/real.txt"));
        f.writer().write_all(b"new").unwrap();
        f.commit().unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read_to_string(&real).unwrap(), "new");
        // A link to where nothing is yet creates the file there.
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink("sub/fresh.txt", &dangling).unwrap();
        AtomicFile::create(&dangling).unwrap().commit().unwrap();
        assert!(sub.join("fresh.txt").is_file());
        assert!(fs::symlink_metadata(&dangling).unwrap().file_type().is_symlink());
    }

    #[cfg(unix)]
    #[test]
    fn targets_by_kind() {
        use std::os::unix::net::UnixListener;
        let dir = tempfile::tempdir().unwrap();
        let refused = |p: &Path, what: &str| match Target::resolve(p) {
            Err(Error::OutputPath { what: w, .. }) => assert_eq!(w, what, "{}", p.display()),
            other => panic!("{}: {other:?}", p.display()),
        };
        refused(dir.path(), "a directory");
        let socket = dir.path().join("socket");
        let _listener = UnixListener::bind(&socket).unwrap();
        refused(&socket, "a socket");
        refused(Path::new(""), "an empty path");
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::os::unix::fs::symlink(&b, &a).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        refused(&a, "a chain of more than 40 symbolic links");
        refused(
            Path::new("/dev/fd/987654"),
            "descriptor 987654, which was not open when posenc started",
        );
        refused(
            Path::new("/dev/fd/2147483648"),
            "descriptor 2147483648, which was not open when posenc started",
        );
        refused(
            Path::new("/proc/self/fd/x"),
            "a name in a descriptor directory that is not a descriptor number",
        );
        // A descriptor this process opened itself (close-on-exec, as Rust opens every file).
        let own = fs::File::open("/dev/null").unwrap();
        let own = std::os::fd::AsRawFd::as_raw_fd(&own);
        refused(
            Path::new(&format!("/dev/fd/{own}")),
            &format!("descriptor {own}, which was not open when posenc started"),
        );

        assert_eq!(
            Target::resolve("/dev/null").unwrap(),
            Target::Stream { path: "/dev/null".into() }
        );
        for (path, fd) in [("/dev/stdout", 1), ("/dev/stderr", 2), ("/proc/self/fd/2", 2)] {
            assert_eq!(
                Target::resolve(path).unwrap(),
                Target::Descriptor { given: path.into(), fd },
                "{path}"
            );
        }
        match Target::resolve(dir.path().join("missing/out.csv")) {
            Err(Error::Io { source, .. }) => assert_eq!(source.kind(), io::ErrorKind::NotFound),
            other => panic!("{other:?}"),
        }
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
