//! The binary under the limits a container or a shell sets: a process limit (RLIMIT_NPROC,
//! which stops threads from starting) and an address-space limit (`ulimit -v`). Every run
//! either succeeds, saying once what it did differently, or fails with one line and exit
//! status 1; none panics (exit 101) or aborts (exit 134). From the issue "Hold up, round
//! three", where every command that computes on the CPU panicked in rayon when its worker
//! threads could not start, `bench` aborted allocating its table, and small allocations
//! could abort a run near the limit. Everything runs on the CPU but one `--device auto`.
#![cfg(unix)]

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};

use ndarray::{Array2, Array4};

use crate::support::cli::{
    AUTO_ENV, Dir, WATCHDOG, assert_ok, assert_rejected, posenc_lines, stderr, wait_or_kill,
};

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
        crate::support::skip("a way to run the binary as a limited user", e);
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

/// `RAYON_NUM_THREADS=20000` (a stranger's) ran the system out of memory mappings while the
/// threads were counted, an abort of every command (and a hang of Python's import) after
/// tens of seconds of starting threads. posenc starts at most four per core (64 at least),
/// says so in one note, and gives the same bytes.
#[test]
fn a_huge_rayon_num_threads_is_capped_with_a_note() {
    let dir = Dir::new();
    let o = dir.out("o.npy");
    let args = ["table", "--device", "cpu", "--dim", "64", "--len", "300", "-o", &o];
    let want = Command::new(BIN).args(args).env_remove("RAYON_NUM_THREADS").output().unwrap();
    let want_bytes = std::fs::read(&o).unwrap();
    assert!(want.status.success(), "{}", stderr(&want));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cap = posenc::cpu::threads::max_threads(cores);
    let mut command = Command::new(BIN);
    command.args(args).env("RAYON_NUM_THREADS", "20000").stderr(Stdio::piped());
    let got = wait_or_kill(command.spawn().unwrap(), WATCHDOG, "RAYON_NUM_THREADS=20000");
    assert_eq!(got.status.code(), Some(0), "{}", stderr(&got));
    assert_eq!(std::fs::read(&o).unwrap(), want_bytes);
    let note = format!("only {cap} of 20000 worker threads could start (posenc starts at most");
    assert_eq!(
        posenc_lines(&got),
        [format!(
            "{note} {cap} on {cores} cores): the CPU path \
        runs on fewer threads"
        )]
        .map(|l| format!("posenc: note: {l}"))
    );
}

/// `sh -c 'ulimit -v KB; exec posenc ARGS'`.
fn under_address_space(kb: u64, args: &[&str]) -> Output {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!(r#"ulimit -v {kb} && exec "$0" "$@""#))
        .arg(BIN)
        .args(args)
        // `auto` in its GPU-first form: the limit must stop the drivers (the cost model
        // would not open them for these small results).
        .env(AUTO_ENV, "gpu")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    wait_or_kill(command.spawn().unwrap(), WATCHDOG, &format!("{args:?} under ulimit -v {kb}"))
}

/// Each command at a ladder of address-space limits, from one the binary barely starts in
/// to one where the work fits: it either succeeds or fails with one line (exit 1), its
/// notes aside, and leaves no temporary file; never a panic or an abort. A refused
/// allocation the command sized goes through the fallible allocators (`could not allocate N
/// bytes for ...`); any other one still ends the run in one line (`out of memory`).
#[test]
fn no_run_panics_or_aborts_under_an_address_space_limit() {
    let dir = Dir::new();
    // 64 MiB of float32, as in the issue's `rope` that aborted allocating 512 bytes.
    let x = dir.npy("x.npy", &Array4::<f32>::zeros((1, 4096, 32, 128)));
    let w = dir.npy("w.npy", &Array2::from_shape_fn((4096, 1024), |(r, c)| (r ^ c) as f32));
    let ids =
        dir.npy("ids.npy", &Array2::from_shape_fn((16, 1024), |(b, t)| (b * t % 4096) as u32));
    let o = dir.out("o.npy");
    let cases: [&[&str]; 8] = [
        &[
            "table", "--device", "cpu", "--dim", "1024", "--len", "20000", "--format", "npy", "-o",
            &o,
        ],
        &["encode", "--device", "cpu", "--weights", &w, "--ids", &ids, "-o", &o],
        &["rope", "--device", "cpu", "--input", &x, "--layout", "blhd", "-o", &o],
        &["rope-cache", "--device", "cpu", "--head-dim", "128", "--len", "65536", "-o", &o],
        &["alibi", "--device", "cpu", "--heads", "8", "--len", "1024", "-o", &o],
        &["plot", "error", "--dim", "1024", "-o", &o],
        &["plot", "similarity", "--dim", "1024", "--len", "2048", "-o", &o],
        &["accuracy", "--device", "cpu", "--dim", "256"],
    ];
    // A request of a few bytes succeeds wherever the binary starts: glibc gave each thread
    // an arena of its own, whose 64 MiB reservations failed small allocations at every
    // command's start under limits around 150 MB (where 80 MB worked).
    for kb in (20_000..=300_000).step_by(10_000) {
        let small = ["table", "--device", "cpu", "--dim", "8", "--len", "2", "-o", &o];
        let got = under_address_space(kb, &small);
        assert_eq!(got.status.code(), Some(0), "under ulimit -v {kb}: {}", stderr(&got));
    }
    for args in cases {
        for kb in [20_000, 40_000, 80_000, 150_000, 300_000, 600_000] {
            let got = under_address_space(kb, args);
            let case = format!("{:?} under ulimit -v {kb}", &args[..2]);
            let err = stderr(&got);
            assert!(matches!(got.status.code(), Some(0 | 1)), "{case}: {:?} {err}", got.status);
            assert!(
                !err.contains("panicked") && !err.contains("memory allocation of"),
                "{case}: {err}"
            );
            let lines = posenc_lines(&got);
            assert_eq!(lines.len(), err.lines().count(), "{case}: lines not posenc's: {err}");
            let failures: Vec<&String> =
                lines.iter().filter(|l| !l.starts_with("posenc: note: ")).collect();
            let want = usize::from(got.status.code() == Some(1));
            assert_eq!(failures.len(), want, "{case}: {err}");
            let temporaries: Vec<String> =
                dir.files().into_iter().filter(|f| f.starts_with(".posenc-")).collect();
            assert_eq!(temporaries, Vec::<String>::new(), "{case}");
        }
    }
}

/// GPU drivers crashed while starting under an address-space limit of about 250 - 330 MB
/// (Mesa's llvmpipe in EGL set-up, wgpu's Vulkan backend in an `unwrap`): posenc does not
/// start them below 1 GiB. `--device gpu` and `devices` then fail with one line naming
/// the limit, `--device auto` computes on the CPU and says why.
#[test]
fn gpu_drivers_are_not_started_under_a_tight_address_space_limit() {
    let dir = Dir::new();
    let o = dir.out("o.npy");
    for kb in [250_000, 300_000, 330_000, 600_000] {
        let table = |device| ["table", "--device", device, "--dim", "8", "--len", "2", "-o", &o];
        let got = under_address_space(kb, &table("gpu"));
        let err = stderr(&got);
        assert_eq!(got.status.code(), Some(1), "gpu under ulimit -v {kb}: {err}");
        assert!(err.contains("RLIMIT_AS") && err.lines().count() == 1, "{err}");
        let got = under_address_space(kb, &table("auto"));
        let err = stderr(&got);
        assert_eq!(got.status.code(), Some(0), "auto under ulimit -v {kb}: {err}");
        assert!(err.starts_with("posenc: note: ") && err.contains("RLIMIT_AS"), "{err}");
        let got = under_address_space(kb, &["devices"]);
        assert_eq!(got.status.code(), Some(1), "devices under ulimit -v {kb}");
    }
}

/// `bench` built its table with an infallible allocation: under `ulimit -v 2000000` a 4 GB
/// table (within its own limits) aborted the run (exit 134, a backtrace). It now reserves
/// what a run holds before building anything, and a refusal is one line, exit 1.
#[test]
fn bench_refuses_memory_it_cannot_have_in_one_line() {
    let args = [
        "bench",
        "--device",
        "cpu",
        "--batch",
        "1",
        "--len",
        "1",
        "--dim",
        "1024",
        "--vocab",
        "1000000",
        "--repeats",
        "1",
    ];
    let got = under_address_space(2_000_000, &args);
    let err = stderr(&got);
    assert_eq!(got.status.code(), Some(1), "{:?} {err}", got.status);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("posenc: could not allocate ") && err.contains("bench"), "{err}");
}

/// `POSENC_CPU_SIMD` caps the CPU loops' instruction set: every set gives the same bits (a
/// table and a RoPE cache, computed by the exact sin/cos, whose float assembly differs per
/// set), and a value naming no set is refused with one line (a typo would otherwise measure
/// the widest set under another's name).
#[test]
fn a_simd_cap_keeps_the_bits_and_one_naming_no_set_is_refused() {
    use crate::support::cli::posenc_env;
    let dir = Dir::new();
    let run = |set: &str| -> Vec<Vec<u8>> {
        let (table, cache) = (dir.out(&format!("t-{set}.npy")), dir.out(&format!("c-{set}.npy")));
        let commands: [&[&str]; 2] = [
            &["table", "--dim", "96", "--len", "300", "--device", "cpu", "-o", &table],
            &["rope-cache", "--head-dim", "64", "--len", "40", "--device", "cpu", "-o", &cache],
        ];
        for args in commands {
            assert_ok(&posenc_env(args, &[("POSENC_CPU_SIMD", set)]), set);
        }
        [table, cache].iter().map(|f| std::fs::read(f).unwrap()).collect()
    };
    let widest = run("widest");
    for set in ["portable", "avx2", "AVX512 "] {
        assert!(run(set) == widest, "under {set:?} the files differ from the widest set's");
    }
    for bad in ["avx-2", "", "sse4"] {
        let args = ["table", "--dim", "8", "--len", "2", "--device", "cpu"];
        let out = posenc_env(&args, &[("POSENC_CPU_SIMD", bad)]);
        assert_rejected(&out, &[bad], &format!("invalid POSENC_CPU_SIMD: {bad:?}"));
    }
}
