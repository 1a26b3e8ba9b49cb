//! Running the `posenc` binary from the CLI tests.

use std::process::{Command, Output};

pub fn posenc(args: &[&str]) -> Output {
    posenc_env(args, &[])
}

pub fn posenc_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_posenc"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the posenc binary runs")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// posenc's own stderr lines. Drivers may add theirs (Mesa's WSI complains about
/// XDG_RUNTIME_DIR), so runs that may open a GPU are judged on these alone.
pub fn posenc_lines(out: &Output) -> Vec<String> {
    stderr(out).lines().filter(|l| l.starts_with("posenc:")).map(String::from).collect()
}

pub fn assert_ok(out: &Output, what: &str) {
    assert!(out.status.success(), "{what}: {:?}\nstderr:\n{}", out.status, stderr(out));
}

/// Whether GPU tests can run here. Without an adapter they are skipped with a visible
/// line, except under CI=true, where a missing adapter is a failure.
pub fn gpu_available(test: &str) -> bool {
    match posenc::gpu::Context::new() {
        Ok(_) => true,
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("{test}: CI=true requires a GPU adapter (lavapipe will do): {e}")
        }
        Err(e) => {
            eprintln!("SKIP {test}: no GPU adapter: {e}");
            false
        }
    }
}
