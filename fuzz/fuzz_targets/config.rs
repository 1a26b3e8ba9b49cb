//! Text through the JSON config readers as the command line reads them (`inputs`:
//! `read_rope_config`, `read_model_config`, `read_rope_scaling`), from memory and from a
//! FIFO a writer thread fills, as `--config <(...)` or a named pipe gives it: both must give
//! the same result, the FIFO read (a first read that does not wait, then the rest) must
//! never block once the writer is done, and every error message must be of bounded length
//! with no control character. libFuzzer's `-malloc_limit_mb` bounds each allocation.
#![no_main]

use std::ffi::CString;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use posenc::inputs::{self, Source};

/// A FIFO of this process's, made once.
fn fifo() -> &'static Path {
    static FIFO: OnceLock<PathBuf> = OnceLock::new();
    FIFO.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("posenc-fuzz-config-{}", std::process::id()));
        let _ = std::fs::create_dir(&dir);
        let path = dir.join("fifo");
        let _ = std::fs::remove_file(&path);
        let c_path = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path, which outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
        path
    })
}

/// A result, for comparison: the value's debug form, or the error's message.
fn outcome<T: std::fmt::Debug>(result: posenc::Result<T>, name: &str) -> String {
    match result {
        Ok(value) => format!("{value:?}"),
        Err(e) => {
            let text = e.to_string();
            assert!(text.chars().count() < 4096, "{} characters", text.len());
            assert!(!text.chars().any(char::is_control), "{text:?}");
            // Errors name the input, which differs between the two sources.
            text.replace(name, "INPUT")
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // A name no message says otherwise, replaced in each for the comparison.
    let name = "fuzz-input";
    let bytes = Source::Bytes { name: Path::new(name), bytes: data };
    let from_bytes = [
        outcome(inputs::read_rope_config(bytes, None), name),
        outcome(inputs::read_model_config(bytes), name),
        outcome(inputs::read_rope_scaling(bytes), name),
    ];
    // One reader through the FIFO per input: the rope config's. The writer's end is opened
    // first, read and write (which on Linux never waits for a reader), so the reader always
    // finds a writer. A thread writes the text (a pipe holds 64 KiB) and closes the end once
    // the reader has taken every byte: closed earlier, with no reader yet, the pipe and its
    // bytes would be gone before the reader came.
    let fifo = fifo();
    let end = std::fs::OpenOptions::new().read(true).write(true).open(fifo).unwrap();
    let text = data.to_vec();
    let writer = std::thread::spawn(move || {
        let mut end = end;
        end.write_all(&text).unwrap();
        loop {
            let mut unread: libc::c_int = 0;
            // SAFETY: FIONREAD writes the pipe's unread byte count into `unread`.
            let rc = unsafe { libc::ioctl(end.as_raw_fd(), libc::FIONREAD, &mut unread) };
            if rc != 0 || unread == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    });
    let shown = fifo.display().to_string();
    let from_fifo = outcome(inputs::read_rope_config(Source::File(fifo), None), &shown);
    writer.join().unwrap();
    // An empty FIFO whose writer has closed reads as one with no writer: refused as that.
    if !(data.is_empty() && from_fifo.contains("no process has open")) {
        assert_eq!(from_fifo, from_bytes[0]);
    }
});
