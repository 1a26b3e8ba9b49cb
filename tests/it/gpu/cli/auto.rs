//! `--device auto`'s cost model (`posenc::placement`): every command's result goes to the
//! host, where the CPU path was faster on every machine measured, so small results are
//! computed on the CPU without opening a GPU; `POSENC_AUTO=gpu` restores the GPU-first form
//! whose fallbacks the other CLI tests exercise.

use std::process::{Command, Stdio};

use crate::support::cli::{AUTO_ENV, WATCHDOG, assert_ok, gpu_available, stderr, wait_or_kill};

const BIN: &str = env!("CARGO_BIN_EXE_posenc");

/// `posenc ARGS` with `POSENC_AUTO` as given (unset for `None`).
fn run(args: &[&str], auto: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env_remove(AUTO_ENV);
    if let Some(value) = auto {
        cmd.env(AUTO_ENV, value);
    }
    cmd.output().expect("the posenc binary runs")
}

#[test]
fn auto_computes_a_small_host_result_on_the_cpu_and_gpu_first_on_the_gpu() {
    let args = ["accuracy", "--device", "auto"];
    let out = run(&args, None);
    assert_ok(&out, "accuracy --device auto");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("posenc on cpu."), "{text}");
    assert_eq!(stderr(&out), "");
    if !gpu_available("auto's GPU-first form") {
        return;
    }
    let out = run(&args, Some("gpu"));
    assert_ok(&out, "accuracy --device auto, POSENC_AUTO=gpu");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("posenc on gpu: "), "{text}");
}

/// The cost model decides before any driver starts: under an address-space limit that
/// stops posenc from starting GPU drivers, a small `auto` table is computed with no note,
/// where the GPU-first form says it could not open one.
#[test]
fn auto_opens_no_gpu_for_a_small_result() {
    let table = ["table", "--device", "auto", "--dim", "8", "--len", "2"];
    for (auto, note) in [(None, false), (Some("gpu"), true)] {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(r#"ulimit -v 300000 && exec "$0" "$@""#)
            .arg(BIN)
            .args(table)
            .env_remove(AUTO_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(value) = auto {
            command.env(AUTO_ENV, value);
        }
        let got = wait_or_kill(command.spawn().unwrap(), WATCHDOG, "auto under ulimit -v");
        let err = stderr(&got);
        assert_eq!(got.status.code(), Some(0), "{auto:?}: {err}");
        assert_eq!(err.contains("RLIMIT_AS"), note, "{auto:?}: {err}");
    }
}

#[test]
fn a_malformed_posenc_auto_is_refused_in_one_line() {
    let out = run(&["table", "--dim", "8"], Some("fastest"));
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("POSENC_AUTO") && err.contains("fastest"), "{err}");
    assert!(err.contains("cost or gpu"), "{err}");
    // `cpu` and `gpu` do not read it.
    let out = run(&["table", "--dim", "8", "--device", "cpu"], Some("fastest"));
    assert_ok(&out, "--device cpu beside a malformed POSENC_AUTO");
    // Bytes that are not UTF-8 are refused too, not read as unset.
    use std::os::unix::ffi::OsStrExt;
    let raw = std::ffi::OsStr::from_bytes(b"g\xffpu");
    let out = Command::new(BIN).args(["table", "--dim", "8"]).env(AUTO_ENV, raw).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("POSENC_AUTO"), "{}", stderr(&out));
}

/// Every posenc variable refuses a value that is not UTF-8, in one line naming it, rather
/// than reading it as unset.
#[test]
fn every_variable_refuses_a_value_that_is_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let raw = std::ffi::OsStr::from_bytes(b"1\xff");
    for var in [
        "POSENC_GPU_PE_CACHE",
        "POSENC_GPU_MEMORY_BUDGET",
        "POSENC_GPU_UNITS",
        "POSENC_GPU_ACCESS",
        "POSENC_GPU_TIMESTAMPS",
        "POSENC_GPU_SPIN_US",
        "POSENC_MAX_BINDING_SIZE",
        "POSENC_FAULT_INJECT",
    ] {
        let out = Command::new(BIN)
            .args(["table", "--dim", "8", "--len", "2", "--device", "gpu"])
            .env(var, raw)
            .output()
            .unwrap();
        assert_refused_naming(&out, var);
    }
}

/// `out` exited 2 with one line naming variable `var`.
fn assert_refused_naming(out: &std::process::Output, var: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{var}: {err}");
    assert!(err.contains(var) && err.lines().count() == 1, "{var}: {err}");
}

/// posenc's GPU variables are checked under `auto` whichever device the model picks, so a
/// malformed one is refused at every job size, not only when a GPU opens.
#[test]
fn auto_checks_the_gpu_variables_even_when_it_computes_on_the_cpu() {
    for (var, value) in [("POSENC_GPU_ACCESS", "bogus"), ("POSENC_FAULT_INJECT", "meteor")] {
        let out = Command::new(BIN)
            .args(["table", "--dim", "8", "--len", "2"])
            .env_remove(AUTO_ENV)
            .env(var, value)
            .output()
            .unwrap();
        assert_refused_naming(&out, var);
    }
}
