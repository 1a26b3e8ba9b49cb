//! The binary under the limits a container or a shell sets: a process limit (RLIMIT_NPROC,
//! which stops threads from starting). Every run succeeds, saying once what it did
//! differently; none panics (exit 101). From the issue "Hold up, round three", where every
//! command that computes on the CPU panicked in rayon when its worker threads could not
//! start. Everything runs on the CPU but one `--device auto`.
#![cfg(unix)]

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};

use ndarray::{Array2, Array4};

use crate::support::cli::{Dir, WATCHDOG, stderr, wait_or_kill};

const BIN: &str = env!("CARGO_BIN_EXE_posenc");

/// `nobody`, whom root's tests run the limited commands as: root is exempt from RLIMIT_NPROC.
const NOBODY: libc::uid_t = 65534;

/// `posenc ARGS` with at most `nproc` processes and threads for its user: as `nobody` when
/// the tests run as root, else as the tests' own user (who has more than that already, so
/// then no thread at all can start). Inputs must be readable by `nobody`.
fn under_nproc(nproc: libc::rlim_t, args: &[&str]) -> io::Result<Output> {
    // SAFETY: geteuid reads the effective user id; no memory is involved.
    let root = unsafe { libc::geteuid() } == 0;
    let mut command = Command::new(BIN);
    command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // SAFETY: between fork and exec the closure only makes async-signal-safe system calls
    // (setgroups, setgid, setuid, setrlimit) on values it owns, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            let check =
                |rc: libc::c_int| if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) };
            if root {
                // The user first: the limit, set after, is then checked against nobody's
                // processes, which are this one.
                check(libc::setgroups(0, std::ptr::null()))?;
                check(libc::setgid(NOBODY))?;
                check(libc::setuid(NOBODY))?;
            }
            let limit = libc::rlimit { rlim_cur: nproc, rlim_max: nproc };
            check(libc::setrlimit(libc::RLIMIT_NPROC, &limit))
        });
    }
    let child = command.spawn()?;
    Ok(wait_or_kill(child, WATCHDOG, &format!("{args:?} under nproc={nproc}")))
}

/// The commands that compute on the CPU (on rayon's pool), each writing to stdout, over
/// inputs in `dir` large enough that every one of them hands work to the pool.
fn computing_commands(dir: &Dir) -> Vec<Vec<String>> {
    let w = dir.npy("w.npy", &Array2::from_shape_fn((64, 256), |(r, c)| (r * 256 + c) as f32));
    let ids = dir.npy("ids.npy", &Array2::from_shape_fn((8, 512), |(b, t)| ((b + t) % 64) as u32));
    let x = dir
        .npy("x.npy", &Array4::from_shape_fn((1, 512, 4, 64), |(_, l, h, d)| (l + h + d) as f32));
    let cases: [&[&str]; 9] = [
        &["table", "--device", "cpu", "--dim", "64", "--len", "2000"],
        &["table", "--device", "auto", "--dim", "64", "--len", "2000"],
        &["encode", "--device", "cpu", "--weights", &w, "--ids", &ids, "-o", "-"],
        &["rope", "--device", "cpu", "--input", &x, "--layout", "blhd", "-o", "-"],
        &["rope-cache", "--head-dim", "64", "--len", "4096", "-o", "-"],
        &["alibi", "--device", "cpu", "--heads", "8", "--len", "256", "-o", "-"],
        &["plot", "error", "--dim", "64", "-o", "-"],
        &["plot", "similarity", "--dim", "64", "--len", "256", "-o", "-"],
        &["accuracy", "--device", "cpu", "--dim", "64"],
    ];
    cases.iter().map(|args| args.iter().map(|a| a.to_string()).collect()).collect()
}

/// Under a process limit, rayon could not start its worker threads and every command that
/// computes on the CPU panicked ("The global thread pool has not been initialized", exit
/// 101). Now the pool starts with as many threads as can start, down to none (the main
/// thread then does the work), says so in one note, and the output is the same bytes.
#[test]
fn worker_threads_that_cannot_start_are_fewer_or_none_and_said_once() {
    let dir = Dir::new();
    std::fs::set_permissions(dir.path(""), std::fs::Permissions::from_mode(0o755)).unwrap();
    // SAFETY: geteuid reads the effective user id; no memory is involved.
    let root = unsafe { libc::geteuid() } == 0;
    if let Err(e) = under_nproc(64, &["--version"]) {
        eprintln!("SKIP: the binary cannot be run as a limited user here: {e}");
        return;
    }
    // 1: not one thread besides the main one. 3 (as nobody only): the signal thread and one
    // worker of the two a two-core machine asks for.
    let limits: &[libc::rlim_t] = if root { &[1, 3] } else { &[1] };
    for args in computing_commands(&dir) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let want = Command::new(BIN).args(&args).output().unwrap();
        assert!(want.status.success(), "{args:?}: {}", stderr(&want));
        for &nproc in limits {
            let got = under_nproc(nproc, &args).unwrap();
            let case = format!("{args:?} under nproc={nproc}");
            assert_eq!(got.status.code(), Some(0), "{case}: {:?} {}", got.status, stderr(&got));
            assert!(got.stdout == want.stdout, "{case}: other bytes on stdout");
            let err = stderr(&got);
            assert!(err.lines().all(|l| l.starts_with("posenc: note: ")), "{case}: {err}");
            let threads = err.lines().filter(|l| l.contains("worker thread")).count();
            let wanted = std::thread::available_parallelism().map_or(1, |n| n.get());
            if nproc == 1 || wanted > 1 {
                assert_eq!(threads, 1, "{case}: one note about the threads: {err}");
            }
        }
    }
}
