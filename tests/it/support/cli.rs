//! Running the `posenc` binary from the CLI tests.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ndarray::{Array, Dimension};
use posenc::npy;
pub use posenc::placement::AUTO_ENV;

pub fn posenc(args: &[&str]) -> Output {
    posenc_env(args, &[])
}

/// Runs `posenc ARGS` under `env`. Unless `env` sets `POSENC_AUTO`, `--device auto` runs
/// in its GPU-first form (`POSENC_AUTO=gpu`): the CLI tests of `auto` test its fallbacks
/// from a GPU to the CPU, which the default cost model would skip by choosing the CPU for
/// their small results; `gpu/cli/auto.rs` tests the cost model.
pub fn posenc_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_posenc"));
    cmd.args(args);
    cmd.env(AUTO_ENV, "gpu");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the posenc binary runs")
}

/// A watchdog for runs that must end: hundreds of times what they take, not a speed
/// requirement.
pub const WATCHDOG: Duration = Duration::from_secs(120);

/// Starts `posenc ARGS` with stdin from /dev/null and stdout and stderr captured.
pub fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_posenc"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Starts `posenc ARGS` through `sh -c SCRIPT` (`$0` is the binary, `"$@"` the arguments),
/// so that the script can set descriptors and limits first and `exec "$0" "$@"`; stdin from
/// /dev/null, stdout and stderr captured.
pub fn spawn_in_shell(script: &str, args: &[&str]) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_posenc"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child`, killing it if it runs past `limit`: how a hang fails here. Its piped
/// stdout and stderr are read as it runs, so a full pipe never stalls it.
pub fn wait_or_kill(mut child: Child, limit: Duration, what: &str) -> Output {
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                pipe.read_to_end(&mut bytes).unwrap();
            }
            bytes
        })
    }
    let (stdout, stderr) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{what} was still running after {limit:?}: a hang");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() }
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}

/// posenc's own stderr lines. Drivers may add theirs (Mesa's WSI complains about
/// XDG_RUNTIME_DIR), so runs that may open a GPU are judged on these alone.
pub fn posenc_lines(out: &Output) -> Vec<String> {
    stderr(out).lines().filter(|l| l.starts_with("posenc:")).map(String::from).collect()
}

pub fn assert_ok(out: &Output, what: &str) {
    assert!(out.status.success(), "{what}: {:?}\nstderr:\n{}", out.status, stderr(out));
}

/// A refused request: exit status 2, exactly one line on stderr, `posenc: ...` holding
/// `needle`, and nothing on stdout.
pub fn assert_rejected(out: &Output, case: &[&str], needle: &str) {
    assert_eq!(out.status.code(), Some(2), "{case:?}: {}", stderr(out));
    let err = stderr(out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{case:?}: exactly one stderr line, got:\n{err}");
    assert!(lines[0].starts_with("posenc: "), "{case:?}: {err}");
    assert!(lines[0].contains(needle), "{case:?}: {needle:?} not in {err}");
    assert!(
        out.stdout.is_empty(),
        "{case:?}: {} bytes on stdout: {:?}",
        out.stdout.len(),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Whether GPU tests can run here. Without an adapter they are skipped and counted
/// ([`super::skip`]), except under CI=true, where a missing adapter is a failure.
pub fn gpu_available(test: &str) -> bool {
    match posenc::gpu::Options::from_env().and_then(|o| posenc::gpu::Context::new(&o)) {
        Ok(_) => true,
        Err(e) if super::in_ci() => {
            panic!("{test}: CI=true requires a GPU adapter (lavapipe will do): {e}")
        }
        Err(e) => {
            super::skip("a GPU adapter", e);
            false
        }
    }
}

/// The names of the files in `dir`, sorted.
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A path as a command-line argument.
pub fn s(path: &Path) -> String {
    path.to_str().unwrap().to_string()
}

/// A scratch directory and the files a test writes into it; paths come back as arguments.
pub struct Dir {
    dir: tempfile::TempDir,
}

impl Dir {
    pub fn new() -> Self {
        Self { dir: tempfile::tempdir().unwrap() }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The path of a file the command is to write.
    pub fn out(&self, name: &str) -> String {
        s(&self.path(name))
    }

    pub fn npy<T: npy::Element, D: Dimension>(&self, name: &str, a: &Array<T, D>) -> String {
        self.bytes(name, &super::npy_bytes(a))
    }

    pub fn bytes(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.path(name);
        fs::write(&path, bytes).unwrap();
        s(&path)
    }

    /// The names of the files in the directory, sorted.
    pub fn files(&self) -> Vec<String> {
        files_in(self.dir.path())
    }
}
