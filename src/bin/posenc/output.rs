//! Where the commands' results go: `-o PATH` is resolved before any work (a directory, a
//! socket or a block device is refused then, exit 2) and opened only once the result is in
//! memory, so a run that fails or is refused memory leaves no temporary file (a streamed
//! GPU encode opens it first and writes as it goes; its failure removes the file); `-o -` is
//! standard output. Also reports on standard output, and the fallible allocation of the
//! outputs the CLI sizes.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use ndarray::Array2;
use posenc::alloc::{check_allocation, try_zeros};
use posenc::output::Target;
use posenc::{Error, PeSpec, cpu};

use crate::failure::Failure;

/// The long help of every `-o`: what the command writes (`$what`), then how the path is
/// treated, written once here.
macro_rules! output_help {
    ($what:literal) => {
        concat!(
            $what,
            "\n\nWith -, stdout. A regular file or a new path appears complete or not at all (a \
             temporary file in its directory, renamed over it; on any error an existing file is \
             left untouched); a symbolic link is followed, the file it leads to replaced and \
             the link kept. A character device (/dev/null), a FIFO or a descriptor \
             (/dev/stdout, /dev/fd/N) is written directly (a character device is also opened \
             and closed once before the work, to find one that cannot be written). A \
             directory, a socket or a block device is refused (exit 2)."
        )
    };
}
pub(crate) use output_help;

/// Where `-o PATH` sends the result: `-`, and no `-o` at all where standard output is the
/// default, mean standard output.
pub(crate) fn target(path: Option<&Path>) -> Result<Target, Failure> {
    match path {
        None => Ok(Target::stdout()?),
        Some(p) if p.as_os_str() == "-" => Ok(Target::stdout()?),
        Some(p) => Ok(Target::resolve(p)?),
    }
}

/// Extensions of data formats some command writes or a user may expect: one a command does
/// not write gets a note ([`output_format`], [`note_foreign_extension`]).
const DATA_EXTENSIONS: &[&str] = &["csv", "json", "npy", "npz", "safetensors", "pt", "bin", "png"];

/// The formats [`note_foreign_extension`] is asked about that are not text.
const BINARY_FORMATS: &[&str] = &["npy", "png", "safetensors"];

/// For a command that writes one format (`encode`, `rope` and `alibi` .npy, `plot` and
/// `bench --plot` PNG): a note where `path`'s extension names another data format
/// (`encode -o out.csv` wrote .npy bytes silently; round fourteen). `flag` says how to get
/// another format, where there is a way. A binary format written to a `.txt` name is
/// noted too (`plot similarity -o s.txt` wrote a PNG silently; round twenty-two), text
/// formats not (CSV in a `.txt` is common).
pub(crate) fn note_foreign_extension(path: Option<&Path>, writes: &str, flag: &str) {
    let Some(ext) = path.and_then(|p| p.extension()).and_then(|e| e.to_str()) else {
        return;
    };
    if ext.eq_ignore_ascii_case(writes) {
        return;
    }
    if DATA_EXTENSIONS.iter().any(|d| d.eq_ignore_ascii_case(ext)) {
        crate::failure::note(&format!(
            "writing {writes} to a file named .{ext}, a format this command does not write{flag}"
        ));
    } else if ext.eq_ignore_ascii_case("txt") && BINARY_FORMATS.contains(&writes) {
        crate::failure::note(&format!(
            "writing {writes}, which is not text, to a file named .{ext}{flag}"
        ));
    }
}

/// The output format: `given` (`--format`), else the one `path`'s extension names among
/// `known` (`(extension, format)`, compared without case), else `default`. A given format
/// that another known extension contradicts is kept, with a note: `-o table.npy` holding
/// CSV was written silently (round twelve).
pub(crate) fn output_format<F: Copy + PartialEq>(
    given: Option<F>,
    path: Option<&Path>,
    known: &[(&str, F)],
    default: F,
) -> F {
    let name_of = |f: F| known.iter().find(|(_, k)| *k == f).map_or("another", |(e, _)| *e);
    let named = path
        .and_then(|p| p.extension())
        .and_then(|e| e.to_str())
        .and_then(|e| known.iter().find(|(ext, _)| ext.eq_ignore_ascii_case(e)));
    match (given, named) {
        // No known extension: the format given or the default, and a note where the
        // extension names another data format (`table -o t.safetensors`, `rope-cache -o
        // c.csv`).
        (_, None) => {
            let f = given.unwrap_or(default);
            let writes: Vec<&str> = known.iter().map(|(e, _)| *e).collect();
            let flag = format!(" (--format: {})", writes.join(", "));
            note_foreign_extension(path, name_of(f), &flag);
            f
        }
        (Some(f), Some(&(ext, by_name))) if by_name != f => {
            crate::failure::note(&format!(
                "writing {} to a file named .{ext}, as --format says",
                name_of(f)
            ));
            f
        }
        (Some(f), _) => f,
        (None, Some(&(_, by_name))) => by_name,
    }
}

/// The target of a command whose output is one `.npy` (`encode`, `rope`, `alibi`): `path`
/// resolved, a terminal refused. Its extension is noted by [`note_npy_extension`] once the
/// request is found valid.
pub(crate) fn npy_target(path: &Path) -> Result<Target, Failure> {
    let out = target(Some(path))?;
    refuse_binary_on_terminal(
        &out,
        "output",
        "-",
        "a .npy needs a file (-o PATH) or a redirected stdout, not a terminal",
    )?;
    Ok(out)
}

/// A note where an `.npy` command's `path` names another format: called once the request
/// is valid, so that a refused one prints its one line alone (a note announcing a write
/// that never came preceded the error; round twenty-two).
pub(crate) fn note_npy_extension(path: &Path) {
    note_foreign_extension(Some(path), "npy", "");
}

/// Refuses to pour binary output (`format`) into a terminal: standard output on one, or a
/// path that names one (`-o /dev/tty`, `-o /dev/stdout`), which is named in the message.
pub(crate) fn refuse_binary_on_terminal(
    target: &Target,
    field: &'static str,
    value: &str,
    allowed: &'static str,
) -> Result<(), Failure> {
    if target.is_terminal() {
        let value = match (target.is_stdout(), field) {
            (true, _) => value.to_string(),
            (false, "output") => format!("{} (a terminal)", target.shown()),
            (false, _) => format!("{value} (-o {}, a terminal)", target.shown()),
        };
        return Err(Failure::usage(Error::InvalidParameter { field, value, allowed }));
    }
    Ok(())
}

/// Opens `target`, writes the result and commits it. A stream whose reader stopped
/// reading (`posenc table | head`, a FIFO's reader gone) ends the run quietly and
/// successfully, as it does for other filters.
pub(crate) fn emit(
    target: &Target,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), Failure> {
    let mut out = target.open()?;
    let stream = out.is_stream();
    match write(out.writer()) {
        Err(e) if stream && e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        // Dropping `out` removes a temporary file.
        Err(e) => return Err(out.io_error(e).into()),
        Ok(()) => {}
    }
    match out.commit() {
        Err(Error::Io { source, .. }) if stream && source.kind() == io::ErrorKind::BrokenPipe => {
            Ok(())
        }
        other => Ok(other?),
    }
}

/// Refuses, before any work, a report bound for standard output that could not reach it:
/// descriptor 1 closed when posenc started (Rust's runtime put /dev/null in its place) or
/// open only for reading.
pub(crate) fn check_report_stdout() -> Result<(), Failure> {
    Ok(Target::stdout().map(drop)?)
}

/// Writes to stdout through a buffer. A closed pipe (`posenc table | head`) ends the run
/// quietly and successfully, as it does for other filters.
pub(crate) fn to_stdout(
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), Failure> {
    let mut out = BufWriter::new(io::stdout().lock());
    match write(&mut out).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(Error::Io { path: PathBuf::from("<stdout>"), source: e }.into())
        }
        _ => Ok(()),
    }
}

/// The table on the CPU, in a buffer allocated fallibly: near the size cap the allocator's
/// refusal is an error (exit 1), not an abort.
pub(crate) fn cpu_table(spec: &PeSpec, positions: &[u32]) -> Result<Array2<f32>, Failure> {
    let mut table = try_zeros("the table", (positions.len(), spec.dim() as usize))?;
    cpu::table_into(spec, positions, table.view_mut())?;
    Ok(table)
}

/// Checks that the table's memory can be had before a path that allocates it itself (the
/// GPU's host copy, the reference).
pub(crate) fn reserve_table(spec: &PeSpec, positions: &[u32]) -> Result<(), Failure> {
    let bytes = (positions.len() as u64).saturating_mul(u64::from(spec.dim())).saturating_mul(4);
    Ok(check_allocation("the table", bytes)?)
}
