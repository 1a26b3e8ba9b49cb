//! The CLI under faults: a GPU device lost for real (`POSENC_FAULT_INJECT=device-lost`), a
//! memory budget too small for the table, and a SIGKILL in the middle of writing a large
//! output. `--device auto` finishes on the CPU with one note; `--device gpu` fails with one
//! line and exit status 1; an output is complete or absent, never partial.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::cli::{assert_ok, gpu_available, posenc_env, posenc_lines, stderr};
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
    ] {
        let bad = inputs.encode("auto", "x.npy", &[], &[(var, value)]);
        assert_eq!(bad.status.code(), Some(2), "{var}: {}", stderr(&bad));
        let lines = posenc_lines(&bad);
        assert!(lines.len() == 1 && lines[0].contains(var), "{lines:?}");
        assert!(!inputs.out("x.npy").exists());
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
            && lines[0].contains("GPU memory budget is 16384"),
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
