//! The CLI under faults: a GPU device lost for real (`POSENC_FAULT_INJECT=device-lost`), a
//! memory budget too small for the table, and a SIGKILL in the middle of writing a large
//! output. `--device auto` finishes on the CPU with one note; `--device gpu` fails with one
//! line and exit status 1; an output is complete or absent, never partial.

use std::fs;
use std::path::{Path, PathBuf};

use crate::support::cli::{assert_ok, gpu_available, posenc_env, posenc_lines, stderr};
use ndarray::{Array2, array};
use posenc::npy;

struct Inputs {
    dir: tempfile::TempDir,
    weights: String,
    ids: String,
}

impl Inputs {
    fn new(vocab: usize, dim: usize, ids: Array2<u32>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let table =
            Array2::from_shape_fn((vocab, dim), |(r, c)| ((r * 31 + c * 7) % 97) as f32 / 8.0);
        let weights = write_npy(dir.path(), "w.npy", &table);
        let ids = write_npy(dir.path(), "ids.npy", &ids);
        Self { dir, weights, ids }
    }

    fn out(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn encode(
        &self,
        device: &str,
        out: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> std::process::Output {
        let o = self.out(out);
        let args =
            [
                &[
                    "encode",
                    "--device",
                    device,
                    "--weights",
                    &self.weights,
                    "--ids",
                    &self.ids,
                    "-o",
                ][..],
                &[o.to_str().unwrap()],
                extra,
            ]
            .concat();
        posenc_env(&args, env)
    }
}

fn write_npy<T: npy::Element>(dir: &Path, name: &str, a: &Array2<T>) -> String {
    let path = dir.join(name);
    npy::write(&mut fs::File::create(&path).unwrap(), a.view()).unwrap();
    path.to_str().unwrap().to_string()
}

const LOST: [(&str, &str); 1] = [("POSENC_FAULT_INJECT", "device-lost")];

#[test]
fn auto_retries_on_the_cpu_after_a_device_loss_and_says_so_once() {
    if !gpu_available("device loss") {
        return;
    }
    let inputs = Inputs::new(20, 16, array![[1u32, 2, 3], [4, 5, 19]]);
    assert_ok(&inputs.encode("cpu", "cpu.npy", &[], &[]), "cpu");
    let auto = inputs.encode("auto", "auto.npy", &[], &LOST);
    assert_ok(&auto, "auto after a device loss");
    let lines = posenc_lines(&auto);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("posenc: note: the GPU failed, computing on the CPU instead: ")
            && lines[0].contains("the GPU device was lost"),
        "{lines:?}"
    );
    assert_eq!(fs::read(inputs.out("auto.npy")).unwrap(), fs::read(inputs.out("cpu.npy")).unwrap());

    let gpu = inputs.encode("gpu", "gpu.npy", &[], &LOST);
    assert_eq!(gpu.status.code(), Some(1), "{}", stderr(&gpu));
    let lines = posenc_lines(&gpu);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("the GPU device was lost: the device was destroyed"), "{lines:?}");
    assert!(!inputs.out("gpu.npy").exists());

    // The table command takes the same path.
    let table = |device: &str, env: &[(&str, &str)]| {
        posenc_env(&["table", "--dim", "8", "--len", "3", "--device", device], env)
    };
    let want = table("cpu", &[]);
    let auto = table("auto", &LOST);
    assert_ok(&auto, "table --device auto after a device loss");
    assert_eq!(auto.stdout, want.stdout);
    assert_eq!(posenc_lines(&auto).len(), 1, "{}", stderr(&auto));
    assert_eq!(table("gpu", &LOST).status.code(), Some(1));

    // Malformed settings are the caller's to fix: exit 2, one line naming the variable.
    for (var, value) in [
        ("POSENC_FAULT_INJECT", "meteor"),
        ("POSENC_GPU_MEMORY_BUDGET", "lots"),
        ("POSENC_GPU_TIMESTAMPS", "maybe"),
        ("POSENC_GPU_ACCESS", "sideways"),
        ("POSENC_GPU_PE_CACHE", "lots"),
        ("POSENC_GPU_PE_CACHE", "-1"),
        ("POSENC_GPU_SPIN_US", "soon"),
        ("POSENC_GPU_SPIN_US", "1000001"),
        ("POSENC_GPU_SPIN_US", ""),
        ("POSENC_GPU_UNITS", " "),
        ("POSENC_GPU_ROPE_HEADS", "0"),
        ("POSENC_GPU_ROPE_HEADS", "17"),
        ("POSENC_GPU_ROPE_HEADS", "four"),
        ("POSENC_GPU_LOOP_BOUNDS", "none"),
        // A name that is no diagnostic's (and a diagnostic's, below).
        ("POSENC_DIAG", "rope_copy"),
    ]
    .into_iter()
    // A diagnostic's name: only a build with the `diagnostics` feature honours it.
    .chain((!cfg!(feature = "diagnostics")).then_some(("POSENC_DIAG", "rope-copy")))
    {
        let bad = inputs.encode("auto", "x.npy", &[], &[(var, value)]);
        assert_eq!(bad.status.code(), Some(2), "{var}: {}", stderr(&bad));
        let lines = posenc_lines(&bad);
        // The value is quoted, so an empty or blank one is visible too.
        let named = format!("{var}: {value:?} (allowed: ");
        assert!(lines.len() == 1 && lines[0].contains(&named), "{lines:?}");
        assert!(!inputs.out("x.npy").exists());
    }
    // White space around a word is trimmed, as around a number (`" 300 "` is 300 us).
    for (var, value) in [
        ("POSENC_GPU_TIMESTAMPS", " off "),
        ("POSENC_GPU_ACCESS", "coalesced\n"),
        ("POSENC_AUTO", "gpu "),
        ("POSENC_GPU_SPIN_US", " 300 "),
        ("POSENC_GPU_LOOP_BOUNDS", " all "),
        // No name: no diagnostic, which any build takes.
        ("POSENC_DIAG", " "),
    ] {
        let padded = inputs.encode("auto", "padded.npy", &[], &[(var, value)]);
        assert_ok(&padded, &format!("{var}={value:?}"));
        assert_eq!(
            fs::read(inputs.out("padded.npy")).unwrap(),
            fs::read(inputs.out("cpu.npy")).unwrap()
        );
    }
}

#[test]
fn a_memory_budget_streams_the_encode_or_sends_auto_to_the_cpu() {
    if !gpu_available("memory budget") {
        return;
    }
    let ids = Array2::from_shape_fn((8, 500), |(b, t)| ((b * 500 + t) % 64) as u32);
    let inputs = Inputs::new(64, 128, ids);
    assert_ok(&inputs.encode("cpu", "cpu.npy", &[], &[]), "cpu");
    let want = fs::read(inputs.out("cpu.npy")).unwrap();
    // The output is 2 MB: a 256 KiB budget streams it in chunks.
    let budget = ["--gpu-memory-budget", "262144"];
    assert_ok(&inputs.encode("gpu", "gpu.npy", &budget, &[]), "gpu under a budget");
    assert_eq!(fs::read(inputs.out("gpu.npy")).unwrap(), want);
    let env = [("POSENC_GPU_MEMORY_BUDGET", "262144")];
    assert_ok(&inputs.encode("gpu", "env.npy", &[], &env), "gpu under POSENC_GPU_MEMORY_BUDGET");
    assert_eq!(fs::read(inputs.out("env.npy")).unwrap(), want);

    // The 32 KiB table does not fit 16 KiB: gpu refuses naming both, auto uses the CPU.
    let tiny = ["--gpu-memory-budget", "16384"];
    let gpu = inputs.encode("gpu", "tiny.npy", &tiny, &[]);
    assert_eq!(gpu.status.code(), Some(1), "{}", stderr(&gpu));
    let lines = posenc_lines(&gpu);
    assert!(
        lines.len() == 1
            && lines[0].contains("the embedding table needs 32768")
            && lines[0].contains("GPU memory budget (bytes) is 16384"),
        "{lines:?}"
    );
    let auto = inputs.encode("auto", "tiny.npy", &tiny, &[]);
    assert_ok(&auto, "auto with a budget too small for the table");
    assert_eq!(posenc_lines(&auto).len(), 1, "{}", stderr(&auto));
    assert_eq!(fs::read(inputs.out("tiny.npy")).unwrap(), want);
}

/// Files in `dir` other than `keep`.
fn others(dir: &Path, keep: &[&str]) -> Vec<(String, u64)> {
    let mut found: Vec<(String, u64)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len()))
        .filter(|(n, _)| !keep.contains(&n.as_str()))
        .collect();
    found.sort();
    found
}

/// Starts `posenc encode` on a 128 MiB output and SIGKILLs it once its temporary file holds
/// at least `bytes`, before the rename. Returns `false` if the run finished first.
#[cfg(unix)]
fn kill_mid_write(inputs: &Inputs, out: &Path, bytes: u64) -> bool {
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_posenc"))
        .args(["encode", "--device", "cpu", "--weights", &inputs.weights, "--ids", &inputs.ids])
        .arg("-o")
        .arg(out)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let dir = out.parent().unwrap();
    loop {
        let writing = fs::read_dir(dir).unwrap().filter_map(Result::ok).any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(".posenc-") && e.metadata().is_ok_and(|m| m.len() >= bytes)
        });
        if writing {
            break;
        }
        if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    child.kill().unwrap(); // SIGKILL on Unix
    let status = child.wait().unwrap();
    // Had it exited on its own just before the kill, the output would be complete.
    status.signal() == Some(SIGKILL)
}

#[cfg(unix)]
const SIGKILL: i32 = 9;

#[cfg(unix)]
#[test]
fn sigkill_mid_write_leaves_the_old_file_or_none_never_a_partial_one() {
    // 4 x 8192 tokens x 1024 f32 values: a 128 MiB output.
    let ids = Array2::from_shape_fn((4, 8192), |(b, t)| ((b + t) % 64) as u32);
    let inputs = Inputs::new(64, 1024, ids);
    let out = inputs.out("out.npy");
    let inputs_only = ["w.npy", "ids.npy", "out.npy"];
    let old = b"the previous, complete output".to_vec();
    fs::write(&out, &old).unwrap();
    let full: u64 = 128 + 4 * 8192 * 1024 * 4;

    // Early in the write and half-way through, over an old file and over none.
    for (existing, bytes) in [(true, 1), (true, full / 2), (false, 1), (false, full / 2)] {
        if !existing && out.exists() {
            fs::remove_file(&out).unwrap();
        }
        let killed = (0..5).any(|_| {
            if kill_mid_write(&inputs, &out, bytes) {
                return true;
            }
            // The run won the race: put the old state back and try again.
            match existing {
                true => fs::write(&out, &old).unwrap(),
                false => fs::remove_file(&out).unwrap(),
            }
            false
        });
        assert!(killed, "the encode always finished before it could be killed");
        if existing {
            assert_eq!(fs::read(&out).unwrap(), old, "the old file is intact");
        } else {
            assert!(!out.exists(), "no output appeared");
        }
        // What the killed run left is its hidden temporary file, partial or whole but never
        // at the output's name.
        for (name, len) in others(inputs.dir.path(), &inputs_only) {
            eprintln!("killed with {len} of {full} bytes in {name}");
            assert!(name.starts_with(".posenc-") && name.ends_with(".tmp"), "{name}");
            // Whole when the kill came between the last write and the rename.
            assert!(len <= full, "{name}: {len}");
            fs::remove_file(inputs.dir.path().join(&name)).unwrap();
        }
    }

    // Left alone, the same run replaces the target whole.
    let run = inputs.encode("cpu", "out.npy", &[], &[]);
    assert_ok(&run, "the run that is not killed");
    assert_eq!(fs::metadata(&out).unwrap().len(), full);
    assert!(others(inputs.dir.path(), &inputs_only).is_empty());
}

/// A command that computes, as the fallback tests run it: its arguments but `--device`, and
/// the file it writes with `-o` (`None`: it writes to stdout).
struct Computing {
    name: &'static str,
    args: Vec<String>,
    output: Option<PathBuf>,
}

impl Computing {
    /// Runs it on `device` under `env`; returns the run and what it wrote (the file, or
    /// stdout), `None` when it wrote no file.
    fn run(&self, device: &str, env: &[(&str, &str)]) -> (std::process::Output, Option<Vec<u8>>) {
        let mut args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        args.extend(["--device", device]);
        if let Some(path) = &self.output {
            if path.exists() {
                fs::remove_file(path).unwrap();
            }
            args.extend(["-o", path.to_str().unwrap()]);
        }
        let out = posenc_env(&args, env);
        let written = match &self.output {
            Some(path) => fs::read(path).ok(),
            None => Some(out.stdout.clone()),
        };
        (out, written)
    }

    /// What `--device cpu` writes, with no variables set.
    fn on_cpu(&self) -> Vec<u8> {
        let (out, written) = self.run("cpu", &[]);
        assert_ok(&out, &format!("{} --device cpu", self.name));
        written.unwrap()
    }

    /// `--device auto` under `env` succeeds with one note naming `cause` and writes the
    /// CPU's bytes.
    fn falls_back(&self, env: &[(&str, &str)], cause: &str) {
        let want = self.on_cpu();
        let (out, written) = self.run("auto", env);
        assert_ok(&out, &format!("{} --device auto under {env:?}", self.name));
        let lines = posenc_lines(&out);
        assert!(
            lines.len() == 1
                && lines[0]
                    .starts_with("posenc: note: the GPU failed, computing on the CPU instead: ")
                && lines[0].contains(cause),
            "{} --device auto under {env:?}: {lines:?}",
            self.name
        );
        assert!(written.as_ref() == Some(&want), "{}: auto wrote other bytes than cpu", self.name);
    }

    /// `--device gpu` under `env` fails with exit status 1 and one line naming `cause`,
    /// and writes nothing.
    fn fails_on_gpu(&self, env: &[(&str, &str)], cause: &str) {
        let (out, written) = self.run("gpu", env);
        assert_eq!(out.status.code(), Some(1), "{} --device gpu: {}", self.name, stderr(&out));
        let lines = posenc_lines(&out);
        assert!(lines.len() == 1 && lines[0].contains(cause), "{}: {lines:?}", self.name);
        assert!(out.stdout.is_empty(), "{}: stdout {:?}", self.name, out.stdout);
        if self.output.is_some() {
            assert_eq!(written, None, "{}: an output appeared", self.name);
        }
    }
}

/// Every command that computes on a device, on inputs whose rows (512 bytes and more) do
/// not fit a 256-byte binding: table, encode, rope, alibi and accuracy. (`plot` computes
/// on the CPU only and has no `--device`; `bench` has its own test.)
fn computing_commands(dir: &crate::support::cli::Dir) -> Vec<Computing> {
    let weights = Array2::from_shape_fn((20, 128), |(r, c)| ((r * 31 + c * 7) % 97) as f32 / 8.0);
    let weights = dir.npy("w.npy", &weights);
    let ids = dir.npy("ids.npy", &array![[1u32, 2, 3], [4, 5, 19]]);
    let x = ndarray::Array4::from_shape_fn((1, 3, 2, 128), |(_, l, h, d)| {
        ((l * 37 + h * 11 + d * 5) % 61) as f32 / 16.0 - 2.0
    });
    let x = dir.npy("x.npy", &x);
    let strings = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        Computing {
            name: "table",
            args: strings(&["table", "--dim", "128", "--len", "5"]),
            output: None,
        },
        Computing {
            name: "encode",
            args: strings(&["encode", "--weights", &weights, "--ids", &ids]),
            output: Some(dir.path("encoded.npy")),
        },
        Computing {
            name: "rope",
            args: strings(&["rope", "--input", &x, "--layout", "blhd", "--offset", "1000"]),
            output: Some(dir.path("rotated.npy")),
        },
        // Rows of 100 keys (400 bytes): wider than 256-byte bindings.
        Computing {
            name: "alibi",
            args: strings(&["alibi", "--heads", "3", "--len", "4", "--kv-len", "100"]),
            output: Some(dir.path("bias.npy")),
        },
        Computing { name: "accuracy", args: strings(&["accuracy"]), output: None },
    ]
}

#[test]
fn every_computing_command_falls_back_on_a_lost_device_with_auto_and_fails_with_gpu() {
    if !gpu_available("device loss, every command") {
        return;
    }
    let dir = crate::support::cli::Dir::new();
    for command in computing_commands(&dir) {
        command.falls_back(&LOST, "the GPU device was lost: the device was destroyed");
        command.fails_on_gpu(&LOST, "the GPU device was lost: the device was destroyed");
    }
}

#[test]
fn a_row_over_the_binding_cap_sends_auto_to_the_cpu_unless_the_gpu_can_split_it() {
    if !gpu_available("binding cap, every command") {
        return;
    }
    let cap = [("POSENC_MAX_BINDING_SIZE", "256")];
    let dir = crate::support::cli::Dir::new();
    for command in computing_commands(&dir) {
        if command.name == "alibi" {
            // ALiBi splits a row over several bindings: the cap is no GPU limit there, so
            // both devices compute on the GPU, silently, the CPU's bits.
            let want = command.on_cpu();
            for device in ["auto", "gpu"] {
                let (out, written) = command.run(device, &cap);
                assert_ok(&out, &format!("alibi --device {device} with a 256-byte cap"));
                assert_eq!(posenc_lines(&out), Vec::<String>::new());
                assert!(written == Some(want.clone()), "alibi --device {device}: other bytes");
            }
            continue;
        }
        command.falls_back(&cap, "max storage binding size (bytes) is 256");
        command.fails_on_gpu(&cap, "max storage binding size (bytes) is 256");
    }
}

#[test]
fn device_cpu_never_opens_a_gpu() {
    // A malformed knob is read only when a GPU opens (and then refused with exit 2), so a
    // run that succeeds under it opened none. No adapter is needed.
    let meteor = [("POSENC_FAULT_INJECT", "meteor")];
    let dir = crate::support::cli::Dir::new();
    for command in computing_commands(&dir) {
        let want = command.on_cpu();
        let (out, written) = command.run("cpu", &meteor);
        assert_ok(&out, &format!("{} --device cpu under a malformed knob", command.name));
        assert_eq!(posenc_lines(&out), Vec::<String>::new(), "{}", command.name);
        assert!(written == Some(want), "{}: other bytes", command.name);
    }
    let plot = posenc_env(&["plot", "similarity", "--format", "text", "--len", "4"], &meteor);
    assert_ok(&plot, "plot under a malformed knob");
    let bench = posenc_env(&[&["bench", "--device", "cpu"][..], &BENCH_TINY].concat(), &meteor);
    assert_ok(&bench, "bench --device cpu under a malformed knob");
}

/// A bench of a few tokens, one round: well under a second.
const BENCH_TINY: [&str; 8] = ["--batch", "2", "--len", "3", "--vocab", "64", "--repeats", "1"];

#[test]
fn bench_reports_a_lost_device_in_one_line_and_never_times_the_cpu_in_its_place() {
    if !gpu_available("bench on a lost device") {
        return;
    }
    for device in ["gpu", "both"] {
        let run = posenc_env(&[&["bench", "--device", device][..], &BENCH_TINY].concat(), &LOST);
        assert_eq!(run.status.code(), Some(1), "bench --device {device}: {}", stderr(&run));
        let lines = posenc_lines(&run);
        assert!(
            lines.len() == 1 && lines[0].contains("the GPU device was lost"),
            "bench --device {device}: {lines:?}"
        );
        assert!(run.stdout.is_empty(), "bench --device {device} printed measurements");
    }
    let cpu =
        posenc_env(&[&["bench", "--device", "cpu", "--json"][..], &BENCH_TINY].concat(), &LOST);
    assert_ok(&cpu, "bench --device cpu with a lost GPU");
    let report: serde_json::Value = serde_json::from_slice(&cpu.stdout).unwrap();
    let names: Vec<&str> =
        report["results"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert!(names.iter().all(|n| !n.starts_with("gpu")), "{names:?}");
}

/// A WGPU_BACKEND that names no backend is refused as a malformed posenc variable is: one
/// line naming it, exit status 2, before any work, for `gpu` and `auto` alike. (It used to
/// be a missing adapter: exit 1 with `gpu`, the CPU with `auto`; wgpu skips names it does
/// not know, so the value was misread rather than unmet.)
#[test]
fn a_wgpu_backend_naming_no_backend_is_refused_as_a_bad_variable() {
    let env = [("WGPU_BACKEND", "vulkann")];
    for device in ["gpu", "auto"] {
        let run = posenc_env(&["table", "--dim", "4", "--len", "1", "--device", device], &env);
        assert_eq!(run.status.code(), Some(2), "{device}: {}", stderr(&run));
        let lines = posenc_lines(&run);
        assert!(
            lines.len() == 1 && lines[0].contains(r#"invalid WGPU_BACKEND: "vulkann""#),
            "{device}: {lines:?}"
        );
        assert!(run.stdout.is_empty(), "{device}");
    }
}
