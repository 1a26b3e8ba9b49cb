//! `posenc encode` streaming on the GPU: outputs larger than one batch go through in
//! batches (forced small here with `--stream-batch`), and the file is byte for byte the
//! one-shot GPU result and the CPU's; a streamed run that fails or is stopped leaves no
//! output and no temporary file behind.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::cli::{Dir, assert_ok, gpu_available, posenc_env, posenc_lines, s, stderr};
use crate::support::{Rng, random_ids, random_table};
use half::f16;
use ndarray::{Array1, Array2};

/// Runs `posenc encode` with `args` and `env`, and returns the output file's bytes.
fn encode(args: &[&str], env: &[(&str, &str)], out: &str, what: &str) -> Vec<u8> {
    let run = posenc_env(&[&["encode"][..], args, &["-o", out]].concat(), env);
    assert_ok(&run, what);
    assert!(posenc_lines(&run).is_empty(), "{what}: {:?}", posenc_lines(&run));
    fs::read(out).unwrap()
}

#[test]
fn a_streamed_encode_equals_the_one_shot_and_the_cpu_byte_for_byte() {
    if !gpu_available("a_streamed_encode_equals_the_one_shot_and_the_cpu_byte_for_byte") {
        return;
    }
    let dir = Dir::new();
    let mut rng = Rng::new(91);
    let (vocab, dim) = (300, 24);
    let table = random_table(&mut rng, vocab, dim);
    let w32 = dir.npy("w32.npy", &table);
    let w16 = dir.npy("w16.npy", &table.mapv(f16::from_f32));
    let learned = dir.npy("p.npy", &random_table(&mut rng, 4096, dim));
    let mut ids = random_ids(&mut rng, 5, 97, vocab);
    ids[[2, 0]] = 7;
    ids[[4, 50]] = 7;
    let ids = dir.npy("ids.npy", &ids);
    let one = dir.npy("one.npy", &Array1::from_shape_fn(301, |i| (i * 13 % vocab) as u32));
    let offsets = dir.npy("off.npy", &ndarray::array![0u32, 1 << 24, 3, u32::MAX - 200, 9]);
    let small_offsets = dir.npy("soff.npy", &ndarray::array![0u32, 1000, 3, 7, 3900]);
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("f32 table", vec!["--weights", &w32, "--ids", &ids]),
        ("f16 table, pad id", vec!["--weights", &w16, "--ids", &ids, "--pad-id", "7"]),
        (
            "offsets past the PE cache",
            vec!["--weights", &w32, "--ids", &ids, "--offsets", &offsets],
        ),
        ("one sequence", vec!["--weights", &w32, "--ids", &one]),
        (
            "learned positions",
            vec![
                "--weights",
                &w16,
                "--ids",
                &ids,
                "--offsets",
                &small_offsets,
                "--position-table",
                &learned,
            ],
        ),
    ];
    for (name, args) in &cases {
        for out_dtype in ["f32", "f16", "bf16"] {
            let what = format!("{name}, {out_dtype}");
            let args = [&args[..], &["--out-dtype", out_dtype]].concat();
            let cpu = encode(
                &[&args[..], &["--device", "cpu"]].concat(),
                &[],
                &dir.out("cpu.npy"),
                &what,
            );
            let gpu = [&args[..], &["--device", "gpu"]].concat();
            let one_shot = encode(&gpu, &[], &dir.out("gpu.npy"), &what);
            assert_eq!(one_shot, cpu, "{what}: one shot");
            // Batches of 1 token, of 7 (splitting sequences), of 97 (whole sequences); and
            // through 256-byte bindings (many table chunks) and a memory budget.
            for (batch, env) in [
                ("1", vec![]),
                ("7", vec![]),
                ("97", vec![]),
                ("7", vec![("POSENC_MAX_BINDING_SIZE", "256")]),
                ("64", vec![("POSENC_GPU_MEMORY_BUDGET", "1000000")]),
            ] {
                // A learned table must fit one binding: 256 bytes hold none.
                if name.starts_with("learned") && batch == "7" && !env.is_empty() {
                    continue;
                }
                let streamed = [&gpu[..], &["--stream-batch", batch]].concat();
                let got = encode(&streamed, &env, &dir.out("streamed.npy"), &what);
                assert_eq!(got, cpu, "{what}: streamed in batches of {batch}, {env:?}");
            }
        }
    }
    // To standard output, too.
    let args = [
        "encode",
        "--device",
        "gpu",
        "--weights",
        &w32,
        "--ids",
        &ids,
        "--stream-batch",
        "5",
        "-o",
        "-",
    ];
    let run = posenc_env(&args, &[]);
    assert_ok(&run, "to stdout");
    let cpu = encode(
        &["--device", "cpu", "--weights", &w32, "--ids", &ids],
        &[],
        &dir.out("c.npy"),
        "cpu",
    );
    assert_eq!(run.stdout, cpu, "streamed to stdout");
    assert_eq!(dir.files().iter().filter(|f| f.starts_with(".posenc-")).count(), 0);
}

#[test]
fn stream_batch_must_be_a_positive_count() {
    let dir = Dir::new();
    let w = dir.npy("w.npy", &Array2::<f32>::zeros((4, 8)));
    let ids = dir.npy("ids.npy", &ndarray::array![[1u32, 2]]);
    for bad in ["0", "-3", "many"] {
        let args = [
            "encode",
            "--weights",
            &w,
            "--ids",
            &ids,
            "--stream-batch",
            bad,
            "-o",
            &dir.out("o.npy"),
        ];
        let run = posenc_env(&args, &[]);
        assert_eq!(run.status.code(), Some(2), "{bad}: {}", stderr(&run));
        assert!(stderr(&run).contains("--stream-batch"), "{bad}: {}", stderr(&run));
    }
    assert!(!dir.path("o.npy").exists());
}

/// The hidden temporary files of `dir`.
fn temporaries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".posenc-"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_lost_device_leaves_no_file_and_auto_starts_again_on_the_cpu() {
    if !gpu_available("a_lost_device_leaves_no_file_and_auto_starts_again_on_the_cpu") {
        return;
    }
    let dir = Dir::new();
    let mut rng = Rng::new(92);
    let w = dir.npy("w.npy", &random_table(&mut rng, 50, 16));
    let ids = dir.npy("ids.npy", &random_ids(&mut rng, 4, 40, 50));
    let lost = [("POSENC_FAULT_INJECT", "device-lost")];
    let base = ["--weights", &w, "--ids", &ids, "--stream-batch", "16"];
    let run = |device: &str, name: &str| {
        let out = dir.out(name);
        let args = [&["encode"][..], &base, &["--device", device, "-o", &out]].concat();
        posenc_env(&args, &lost)
    };
    let run = run("gpu", "gpu.npy");
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert_eq!(posenc_lines(&run).len(), 1, "{}", stderr(&run));
    assert!(posenc_lines(&run)[0].contains("lost"), "{}", stderr(&run));
    assert!(!dir.path("gpu.npy").exists());
    assert_eq!(temporaries(&dir.path("")), Vec::<String>::new());
    let out = dir.out("auto.npy");
    let args = [&["encode"][..], &base, &["--device", "auto", "-o", &out]].concat();
    let auto = posenc_env(&args, &lost);
    assert_ok(&auto, "auto");
    let lines = posenc_lines(&auto);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("posenc: note: the GPU failed"), "{lines:?}");
    // The CPU takes no --stream-batch: it computes the whole output at once.
    let cpu_args = ["--weights", &w, "--ids", &ids, "--device", "cpu"];
    let cpu = encode(&cpu_args, &[], &dir.out("cpu.npy"), "cpu");
    assert_eq!(fs::read(dir.path("auto.npy")).unwrap(), cpu);
}

/// Whether a temporary output in `dir` holds bytes: a streamed encode is writing it.
fn writing(dir: &Path) -> bool {
    fs::read_dir(dir).unwrap().filter_map(Result::ok).any(|e| {
        e.file_name().to_string_lossy().starts_with(".posenc-")
            && e.metadata().is_ok_and(|m| m.len() > 0)
    })
}

#[test]
fn a_streamed_encode_stopped_mid_write_leaves_the_old_file_and_no_temporary() {
    if !gpu_available("a_streamed_encode_stopped_mid_write_leaves_the_old_file_and_no_temporary") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(93);
    let d = Dir::new();
    // 64 x 2048 tokens of D = 256, f32: 128 MiB of output in 256 batches of 0.5 MiB.
    let w = d.npy("w.npy", &random_table(&mut rng, 1000, 256));
    let ids = d.npy("ids.npy", &random_ids(&mut rng, 64, 2048, 1000));
    let out = dir.path().join("big.npy");
    let old = b"the previous, complete output\n";
    fs::write(&out, old).unwrap();
    let mut stopped = None;
    for _ in 0..3 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_posenc"))
            .args(["encode", "--device", "gpu", "--weights", &w, "--ids", &ids])
            .args(["--stream-batch", "512", "-o", &s(&out)])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut finished = false;
        while !writing(dir.path()) {
            if child.try_wait().unwrap().is_some() {
                finished = true;
                break;
            }
            assert!(Instant::now() < deadline, "no temporary file appeared in 120 s");
            std::thread::sleep(Duration::from_millis(1));
        }
        if finished {
            // The run won the race: put the old file back and try again.
            fs::write(&out, old).unwrap();
            continue;
        }
        let pid = i32::try_from(child.id()).unwrap();
        // SAFETY: kill(2) on our own child, not yet waited for; no memory is involved.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "kill");
        stopped = Some(child.wait().unwrap());
        break;
    }
    let status = stopped.expect("the encode always finished before it could be stopped");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    assert_eq!(temporaries(dir.path()), Vec::<String>::new());
    assert_eq!(fs::read(&out).unwrap(), old, "the old file is intact");
}
