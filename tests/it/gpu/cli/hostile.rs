//! Hostile inputs through the binary, each from the issue "Hold up, round two": a 128-byte
//! header that used to panic, abort after asking for terabytes, or loop for ever, and
//! arguments whose messages were wrong. Each must give one line on stderr and exit status 2,
//! and create no output file.
//!
//! Every refusal here comes before any device is opened, so `--device gpu` cases need no
//! adapter.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use crate::support::cli::{Dir, WATCHDOG, posenc, posenc_env, spawn, stderr, wait_or_kill};
use posenc::npy;

/// A valid `.npy` header of `T` declaring `shape`, and no data: 128 bytes.
fn header_only<T: npy::Element>(dir: &Dir, name: &str, shape: &[usize]) -> String {
    let bytes = npy::header::<T>(shape).unwrap();
    assert_eq!(bytes.len(), 128);
    dir.bytes(name, &bytes)
}

/// A `[16, 8]` float32 embedding table.
fn weights(dir: &Dir) -> String {
    let table = ndarray::Array2::<f32>::from_shape_fn((16, 8), |(r, c)| (r * 8 + c) as f32);
    dir.npy("w.npy", &table)
}

/// Exit status 2, exactly one line on stderr (`posenc: ...`, holding every needle), and no
/// file in `dir` beyond `inputs`.
fn assert_refused(out: &Output, dir: &Dir, inputs: &[&str], needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.starts_with("posenc: ") && !err.contains("panicked"), "{err}");
    for needle in needles {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
    let mut expected: Vec<String> = inputs.iter().map(|s| s.to_string()).collect();
    expected.sort();
    assert_eq!(dir.files(), expected, "{err}");
}

#[test]
fn empty_ids_with_an_axis_no_output_could_have_are_refused_on_cpu_and_gpu() {
    for (len, device) in [((1 << 62) - 1, "cpu"), ((1 << 62) - 1, "gpu"), ((1 << 60) - 1, "cpu")] {
        let dir = Dir::new();
        let w = weights(&dir);
        let ids = header_only::<i64>(&dir, "ids.npy", &[0, len]);
        let out = posenc(&[
            "encode",
            "--device",
            device,
            "--weights",
            &w,
            "--ids",
            &ids,
            "-o",
            &dir.out("out.npy"),
        ]);
        let shape = format!("(0, {len}, 8)");
        assert_refused(&out, &dir, &["ids.npy", "w.npy"], &["encode: the output", &shape]);
    }
}

#[test]
fn empty_rope_inputs_are_refused_before_their_positions_are_built() {
    for side in [1 << 20, 1 << 16] {
        let dir = Dir::new();
        let x = header_only::<f32>(&dir, "x.npy", &[side, side, 0, 8]);
        let out = posenc(&[
            "rope",
            "--device",
            "cpu",
            "--input",
            &x,
            "--layout",
            "blhd",
            "-o",
            &dir.out("out.npy"),
        ]);
        let shape = format!("({side}, {side}, 0, 8)");
        assert_refused(&out, &dir, &["x.npy"], &["rope: the output", &shape, "MAX_OUTPUT_VALUES"]);
    }
}

/// An empty tensor within the limit is its own rotation: written back with its shape,
/// without building positions for its 2^29 tokens (2 GiB).
#[test]
fn an_empty_rope_input_within_the_limit_comes_back_as_it_was() {
    let dir = Dir::new();
    let x = header_only::<f32>(&dir, "x.npy", &[1 << 14, 1 << 15, 0, 4]);
    let out = dir.out("out.npy");
    let run = posenc(&[
        "rope", "--device", "cpu", "--input", &x, "--layout", "blhd", "--offset", "7", "-o", &out,
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&x).unwrap());
}

#[test]
fn billions_of_empty_rows_are_refused_not_looped_over() {
    for extra in [["--pad-id", "0"], ["--variant", "fairseq"]] {
        let dir = Dir::new();
        let w = weights(&dir);
        let ids = header_only::<i64>(&dir, "ids.npy", &[i64::MAX as usize, 0]);
        let out = dir.out("out.npy");
        let mut args = vec!["encode", "--device", "cpu", "--weights", &w, "--ids", &ids];
        args.extend(extra);
        args.extend(["-o", &out]);
        let run = wait_or_kill(spawn(&args), WATCHDOG, &format!("encode {extra:?}"));
        assert_refused(&run, &dir, &["ids.npy", "w.npy"], &["(9223372036854775807, 0, 8)"]);
    }
}

#[test]
fn numbers_print_short_and_negative_ones_reach_their_range_check() {
    for (args, needle) in [
        (&["--base", "1e308"][..], "invalid base: 1e308 (allowed"),
        (&["--base", "-inf"], "invalid base: -inf (allowed"),
        (&["--base", "-2"], "invalid base: -2 (allowed"),
        (&["--variant", "tensor2tensor", "--min-timescale", "-inf"], "invalid min_timescale: -inf"),
        (&["--variant", "tensor2tensor", "--max-timescale", "1e300"], "max_timescale: 1e300"),
        (&["--gpu-memory-budget", "-1"], "'-1' for '--gpu-memory-budget <BYTES>'"),
        (&["--gpu-memory-budget", "0"], "at least 1"),
    ] {
        let dir = Dir::new();
        let mut full = vec!["table", "--dim", "8", "-o"];
        let out = dir.out("t.csv");
        full.push(&out);
        full.extend(args);
        assert_refused(&posenc(&full), &dir, &[], &[needle]);
    }
    let dir = Dir::new();
    let x = dir.npy("x.npy", &ndarray::Array4::<f32>::zeros((1, 2, 1, 4)));
    let out = posenc(&[
        "rope",
        "--input",
        &x,
        "--layout",
        "blhd",
        "--base",
        "-inf",
        "-o",
        &dir.out("o.npy"),
    ]);
    assert_refused(&out, &dir, &["x.npy"], &["invalid base: -inf (allowed"]);
    let out = posenc(&["encode", "--weights", "w", "--ids", "i", "-o", "o", "--base", "-1e-300"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!stderr(&out).contains("unexpected argument"), "{}", stderr(&out));
}

/// Every integer option refuses a negative, non-numeric or too large value naming its own
/// range, as the float options do, not its type's (`-5 is not in 0..=4294967295` for a dim
/// of 2..=65536) or none (`invalid digit found in string`). Refused while parsing, so the
/// files named need not exist.
#[test]
fn integer_options_name_their_own_range_for_any_value_that_is_not_one() {
    const POSITIONS: &str = "0..=4294967296 (positions are u32)";
    let dir = Dir::new();
    let o = dir.out("o.npy");
    let table = |flag: &'static str| vec!["table", "--dim", "8", flag];
    let encode = |flag| vec!["encode", "--weights", "w", "--ids", "i", "-o", &o, flag];
    let alibi = |flag| vec!["alibi", "--heads", "2", "--len", "3", "-o", &o, flag];
    let rope = |flag| vec!["rope", "--input", "x", "--layout", "blhd", "-o", &o, flag];
    let cache = |flag| vec!["rope-cache", "--head-dim", "8", "--len", "3", "-o", &o, flag];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["table", "--dim"],
            "in 1..=65536 as the variant allows (vaswani: an even number in 2..=65536)",
        ),
        (table("--len"), POSITIONS),
        (table("--start-index"), "in 0..=4294967295"),
        (encode("--start-index"), "in 0..=4294967295"),
        (encode("--pad-id"), "in 0..=4294967295 (token ids are u32)"),
        (encode("--stream-batch"), "a whole number of tokens in 1..=18446744073709551615"),
        (vec!["accuracy", "--dim"], "an even number in 2..=65536"),
        (vec!["alibi", "--len", "3", "-o", &o, "--heads"], "in 1..=65536"),
        (vec!["alibi", "--heads", "2", "-o", &o, "--len"], POSITIONS),
        (alibi("--kv-len"), POSITIONS),
        (alibi("--offset"), "in 0..=4294967295 (offset + len <= 4294967296)"),
        (vec!["bench", "--batch"], "a whole number, at least 1"),
        (vec!["bench", "--len"], "a whole number, at least 1"),
        (vec!["bench", "--dim"], "an even number in 2..=65536"),
        (vec!["bench", "--vocab"], "in 1..=4294967295 (token ids are u32)"),
        (vec!["bench", "--repeats"], "in 1..=10000"),
        (vec!["bench", "--decode"], "in 1..=100000 steps"),
        (vec!["plot", "heatmap", "--dim"], "in 1..=4096 (plot::MAX_CELLS)"),
        (vec!["plot", "heatmap", "--len"], "in 1..=4096"),
        (vec!["plot", "similarity", "--dim"], "an even number in 2..=65536"),
        (vec!["plot", "similarity", "--len"], "in 1..=4096"),
        (vec!["plot", "error", "--dim"], "an even number in 2..=65536"),
        (rope("--offset"), "in 0..=4294967295 (offset + len - 1 <= 4294967295)"),
        (rope("--rotary-dim"), "an even number in 2..=head_dim"),
        (rope("--seq-len"), "in 1..=4294967296"),
        (vec!["rope-cache", "--len", "3", "-o", &o, "--head-dim"], "in 2..=65536"),
        (vec!["rope-cache", "--head-dim", "8", "-o", &o, "--len"], POSITIONS),
        (cache("--rotary-dim"), "an even number in 2..=head_dim"),
        (cache("--seq-len"), "in 1..=4294967296"),
    ];
    for (args, range) in cases {
        let flag = *args.last().unwrap();
        for value in ["-5", "x", "99999999999999999999999"] {
            let mut full = args.clone();
            full.push(value);
            let needle = format!("'{value}' for '{flag} <");
            assert_refused(&posenc(&full), &dir, &[], &[&needle, "expected ", range]);
        }
    }
}

/// A flag for the GPU beside a `--device` that opens none was silently unused: refused
/// instead, in one line naming the device and the flag, before any input is read.
#[test]
fn gpu_only_flags_are_refused_beside_a_device_that_opens_no_gpu() {
    let dir = Dir::new();
    let w = weights(&dir);
    let ids = dir.npy("ids.npy", &ndarray::array![[1u32, 2]]);
    let inputs = ["ids.npy", "w.npy"];
    for device in ["cpu", "reference"] {
        let out = dir.out("t.csv");
        let args = ["table", "--dim", "8", "--device", device, "--gpu-memory-budget", "4096"];
        let run = posenc(&[&args[..], &["-o", &out]].concat());
        assert_refused(
            &run,
            &dir,
            &inputs,
            &[&format!("invalid device: {device} (with --gpu-memory-budget)"), "gpu or auto"],
        );
    }
    for flag in [["--gpu-memory-budget", "4096"], ["--stream-batch", "1"]] {
        let out = dir.out("out.npy");
        let args = ["encode", "--device", "cpu", "--weights", &w, "--ids", &ids, "-o", &out];
        let run = posenc(&[&args[..], &flag].concat());
        assert_refused(
            &run,
            &dir,
            &inputs,
            &[&format!("invalid device: cpu (with {})", flag[0]), "gpu or auto"],
        );
        // Not even a missing input is looked at first.
        let args = ["encode", "--device", "cpu", "--weights", "none", "--ids", "none", "-o", &out];
        let run = posenc(&[&args[..], &flag].concat());
        assert_refused(&run, &dir, &inputs, &[&format!("invalid device: cpu (with {})", flag[0])]);
    }
    // auto may open a GPU: the budget is taken (and the CPU, without one, gives the table).
    let out = dir.out("t.csv");
    let run = posenc(&["table", "--dim", "8", "--gpu-memory-budget", "1048576", "-o", &out]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
}

/// Zero means the same on the command line as in POSENC_GPU_MEMORY_BUDGET: refused.
#[test]
fn a_zero_memory_budget_is_refused_wherever_it_is_given() {
    let dir = Dir::new();
    let w = weights(&dir);
    let ids = dir.npy("ids.npy", &ndarray::array![[1u32, 2]]);
    let encode = |extra: &[&str], env: &[(&str, &str)]| {
        let out = dir.out("out.npy");
        let mut args = vec!["encode", "--device", "gpu", "--weights", &w, "--ids", &ids, "-o"];
        args.push(&out);
        args.extend(extra);
        posenc_env(&args, env)
    };
    let flag = encode(&["--gpu-memory-budget", "0"], &[]);
    assert_refused(&flag, &dir, &["ids.npy", "w.npy"], &["--gpu-memory-budget", "at least 1"]);
    let env = encode(&[], &[("POSENC_GPU_MEMORY_BUDGET", "0")]);
    // The variable is read when the device opens: without an adapter the run fails first.
    if env.status.code() == Some(2) {
        let lines = crate::support::cli::posenc_lines(&env);
        assert!(lines.len() == 1 && lines[0].contains("POSENC_GPU_MEMORY_BUDGET"), "{lines:?}");
    }
    assert!(dir.files().iter().all(|f| f != "out.npy"));
}

#[test]
fn directories_and_pipes_as_inputs_are_named_for_what_they_are() {
    let dir = Dir::new();
    let w = weights(&dir);
    let ids = dir.npy("ids.npy", &ndarray::array![[1u32, 2]]);
    std::fs::create_dir(dir.path("sub")).unwrap();
    let sub = dir.out("sub");
    let out = dir.out("out.npy");
    for (weights, ids) in [(sub.as_str(), ids.as_str()), (w.as_str(), sub.as_str())] {
        let run =
            posenc(&["encode", "--device", "cpu", "--weights", weights, "--ids", ids, "-o", &out]);
        assert_refused(&run, &dir, &["ids.npy", "sub", "w.npy"], &["sub: is a directory"]);
    }
    let run = posenc(&["rope", "--input", &sub, "--layout", "blhd", "-o", &out]);
    assert_refused(&run, &dir, &["ids.npy", "sub", "w.npy"], &["sub: is a directory"]);

    // A pipe with a writer: /dev/stdin.
    for flag in ["--ids", "--weights"] {
        let mut args =
            vec!["encode", "--device", "cpu", "--weights", &w, "--ids", &ids, "-o", &out];
        let at = args.iter().position(|a| *a == flag).unwrap();
        args[at + 1] = "/dev/stdin";
        let mut child = Command::new(env!("CARGO_BIN_EXE_posenc"))
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let bytes = std::fs::read(if flag == "--ids" { &ids } else { &w }).unwrap();
        // posenc may refuse before reading: a closed pipe is fine then.
        let _ = child.stdin.take().unwrap().write_all(&bytes);
        let run = wait_or_kill(child, WATCHDOG, "a pipe as input");
        assert_refused(&run, &dir, &["ids.npy", "sub", "w.npy"], &["must be a regular file"]);
    }
}

/// A FIFO nobody writes to: opening it to read would block for ever, so its type is looked
/// at first.
#[cfg(unix)]
#[test]
fn a_fifo_without_a_writer_is_refused_not_waited_on() {
    let dir = Dir::new();
    let w = weights(&dir);
    let fifo = dir.out("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        crate::support::skip("mkfifo", "not available");
        return;
    }
    let out = dir.out("out.npy");
    let run = wait_or_kill(
        spawn(&["encode", "--device", "cpu", "--weights", &w, "--ids", &fifo, "-o", &out]),
        WATCHDOG,
        "a FIFO as input",
    );
    assert_refused(&run, &dir, &["fifo", "w.npy"], &["fifo: must be a regular file"]);
}

#[test]
fn a_nan_in_a_position_table_is_reported_as_the_position_table() {
    let dir = Dir::new();
    let w = weights(&dir);
    let ids = dir.npy("ids.npy", &ndarray::array![[1u32, 2]]);
    let mut table = ndarray::Array2::<f32>::zeros((4, 8));
    table[[2, 3]] = f32::NAN;
    let p = dir.npy("p.npy", &table);
    let run = posenc(&[
        "encode",
        "--device",
        "cpu",
        "--weights",
        &w,
        "--ids",
        &ids,
        "--position-table",
        &p,
        "-o",
        &dir.out("out.npy"),
    ]);
    assert_refused(
        &run,
        &dir,
        &["ids.npy", "p.npy", "w.npy"],
        &["p.npy: position table holds the non-finite value NaN at row 2, column 3"],
    );
}

#[test]
fn alibi_sizes_are_reported_unwrapped() {
    for (args, needle) in [
        (
            &["--len", "4294967296"][..],
            "one key's column of the bias (len values, one per query) needs 4294967296",
        ),
        (
            &["--len", "0", "--kv-len", "4294967296"],
            "one query's row of the bias (kv_len values, one per key)",
        ),
        (&["--len", "65536", "--kv-len", "65536"], "one head's bias"),
    ] {
        let dir = Dir::new();
        let out = dir.out("a.npy");
        let mut full = vec!["alibi", "--heads", "1", "--device", "cpu", "-o", &out];
        full.extend(args);
        assert_refused(&posenc(&full), &dir, &[], &[needle, "posenc::alibi::MAX_VALUES"]);
    }
}

#[test]
fn rope_scaling_with_a_key_twice_or_contradicting_types_is_refused() {
    let dir = Dir::new();
    let x = dir.npy("x.npy", &ndarray::Array4::<f32>::zeros((1, 2, 1, 4)));
    for (json, needle) in [
        (r#"{"rope_type":"linear","factor":2,"factor":8}"#, "invalid factor: given twice"),
        (r#"{"rope_type":"linear","type":"yarn","factor":2}"#, "invalid type: \"yarn\""),
    ] {
        let run = posenc(&[
            "rope",
            "--device",
            "cpu",
            "--input",
            &x,
            "--layout",
            "blhd",
            "--scaling",
            json,
            "-o",
            &dir.out("o.npy"),
        ]);
        assert_refused(&run, &dir, &["x.npy"], &[needle]);
    }
}

/// A FIFO given where JSON is read (`--config`, `--scaling @FILE`) with no process holding
/// it open for writing: nothing would ever come, and opening it to read used to block for
/// ever. Refused at once, one line; with a writer, its text is read as a file's would be.
#[cfg(unix)]
#[test]
fn a_fifo_without_a_writer_as_json_is_refused_and_one_with_a_writer_is_read() {
    let dir = Dir::new();
    let fifo = dir.out("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        crate::support::skip("mkfifo", "not available");
        return;
    }
    let x = dir.npy("x.npy", &ndarray::Array4::<f32>::zeros((1, 2, 1, 8)));
    let w = weights(&dir);
    let ids = dir.npy("ids.npy", &ndarray::array![[1u32, 2]]);
    let o = dir.out("o.npy");
    let scaling = format!("@{fifo}");
    let cases: [&[&str]; 5] = [
        &["rope", "--device", "cpu", "--input", &x, "--layout", "blhd", "--scaling", &scaling],
        &["rope", "--device", "cpu", "--input", &x, "--layout", "blhd", "--config", &fifo],
        &["rope-cache", "--len", "3", "--config", &fifo],
        &["table", "--device", "cpu", "--len", "3", "--config", &fifo],
        &["encode", "--device", "cpu", "--weights", &w, "--ids", &ids, "--config", &fifo],
    ];
    let inputs = ["fifo", "ids.npy", "w.npy", "x.npy"];
    for args in cases {
        let all = [args, &["-o", &o]].concat();
        let run = wait_or_kill(spawn(&all), WATCHDOG, &all.join(" "));
        assert_refused(&run, &dir, &inputs, &["fifo: a FIFO that no process has open for writing"]);
    }
    // A writer that opens the FIFO (waiting for a reader, as `echo > fifo` does) and writes;
    // again if a refused run's open and close broke its pipe.
    let json = r#"{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}"#;
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            while let Err(e) = std::fs::write(&fifo, json) {
                assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
            }
        })
    };
    let from_fifo = ["rope-cache", "--len", "3", "--config", &fifo, "-o", &o];
    let run = loop {
        let run = wait_or_kill(spawn(&from_fifo), WATCHDOG, "a FIFO with a writer");
        // Until the writer's thread has reached its open.
        if !stderr(&run).contains("no process has open") {
            break run;
        }
    };
    writer.join().unwrap();
    assert!(run.status.success(), "{}", stderr(&run));
    let config = dir.bytes("config.json", json.as_bytes());
    let want = dir.out("want.npy");
    let run = posenc(&["rope-cache", "--len", "3", "--config", &config, "-o", &want]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(std::fs::read(&o).unwrap(), std::fs::read(&want).unwrap());
}

/// The bounds on a failure's line: a value from the user (a key, a value, a name, a path, a spec)
/// is cut in the middle to at most 256 characters, the prose that quotes one to 1024, and the
/// message after `posenc: ` to 4096; control characters are escaped. A JSON key with CR and ESC in
/// it reached the terminal raw, and a 1.5 MB key, a 2 MB rope_type, 20,000 layer types or a 10 MB
/// tensor name came back whole.
#[test]
fn user_strings_in_an_error_line_are_cut_and_escaped() {
    const MAX_LINE: usize = 4096;
    let dir = Dir::new();
    let x = dir.npy("x.npy", &ndarray::Array4::<f32>::zeros((1, 2, 1, 8)));
    let ids = dir.npy("ids.npy", &ndarray::array![[1u32, 2]]);
    let key = "k".repeat(1_500_000);
    let dup = dir.bytes(
        "dup.json",
        format!(r#"{{"rope_type":"linear","factor":2,"{key}":1,"{key}":2}}"#).as_bytes(),
    );
    let long_type = format!(r#"{{"rope_type":"{}","factor":2}}"#, "r".repeat(2_000_000));
    let rope_type = dir.bytes("rope_type.json", long_type.as_bytes());
    let escape = dir.bytes(
        "escape.json",
        br#"{"rope_type":"linear","factor":2,"x\ry\u001b[31mRED":1,"x\ry\u001b[31mRED":2}"#,
    );
    let per_type: Vec<String> =
        (0..20_000).map(|i| format!(r#""type{i}": {{"rope_type": "default"}}"#)).collect();
    let layer_types = dir.bytes(
        "layer_types.json",
        format!(
            r#"{{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                "rope_parameters": {{{}}}}}"#,
            per_type.join(", ")
        )
        .as_bytes(),
    );
    let name = "n".repeat(10_000_000);
    let header = format!(r#"{{"{name}":{{"dtype":"F32","shape":[16,8],"data_offsets":[0,512]}}}}"#);
    let mut st = (header.len() as u64).to_le_bytes().to_vec();
    st.extend(header.as_bytes());
    st.extend([0u8; 512]);
    let named = dir.bytes("named.safetensors", &st);
    let long_path = format!("{}/{}", dir.out(""), "p".repeat(100_000));
    let spec = format!("0,1,\x1b[31m{}", "9".repeat(100_000));
    let flag = format!("\x1b[31m{}", "1".repeat(100_000));
    // Escape sequences clap's rendering used to strip from the value it quotes, and
    // newlines that broke its message into lines.
    let (osc, unknown, lines) = ("\x1b]0;title\x07", "--\x1b[2Jdim", "x\n\ny");
    let rope = ["rope", "--device", "cpu", "--input", &x, "--layout", "blhd", "-o"];
    let o = dir.out("o.npy");
    let (dup, rope_type, escape) =
        (format!("@{dup}"), format!("@{rope_type}"), format!("@{escape}"));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        ([&rope[..], &[&o, "--scaling", &dup]].concat(), "given twice"),
        ([&rope[..], &[&o, "--scaling", &rope_type]].concat(), "rope_type"),
        ([&rope[..], &[&o, "--scaling", &escape]].concat(), "x\\ry\\u{1b}[31mRED"),
        ([&rope[..], &[&o, "--config", &layer_types]].concat(), "layer_type"),
        (
            vec![
                "encode",
                "--device",
                "cpu",
                "--weights",
                &named,
                "--ids",
                &ids,
                "--tensor",
                "t",
                "-o",
                &o,
            ],
            "no tensor named",
        ),
        (vec!["table", "--device", "cpu", "--dim", "8", "--len", "3", "-o", &long_path], "ppp"),
        (vec!["table", "--device", "cpu", "--dim", "8", "--positions", &spec], "position spec"),
        (vec!["table", "--device", "cpu", "--dim", &flag], "'\\u{1b}[31m111"),
        (vec!["table", "--device", "cpu", "--dim", &osc], "'\\u{1b}]0;title\\u{7}'"),
        (vec!["table", "--device", "cpu", &unknown], "'--\\u{1b}[2Jdim'"),
        (vec!["table", "--device", "cpu", "--dim", lines], "'x\\n\\ny' for '--dim <D>'"),
        (vec!["table", "--device", lines], "'x\\n\\ny' for '--device <DEVICE>'"),
    ];
    for (args, needle) in cases {
        let run = posenc(&args);
        let case = &args[..args.len().min(4)];
        let err = &run.stderr;
        assert!(matches!(run.status.code(), Some(1 | 2)), "{case:?}: {:?}", run.status);
        let text = String::from_utf8_lossy(err);
        let message = text.trim_end().strip_prefix("posenc: ").unwrap_or_default();
        let chars = message.chars().count();
        assert!(chars <= MAX_LINE, "{case:?}: a message of {chars} characters");
        assert_eq!(text.lines().count(), 1, "{case:?}: {text}");
        assert!(text.starts_with("posenc: ") && text.ends_with('\n'), "{case:?}: {text}");
        let raw = text.trim_end().chars().find(|c| c.is_control());
        assert_eq!(raw, None, "{case:?}: a raw control character in {text:?}");
        assert!(text.contains(needle), "{case:?}: {needle:?} not in {text}");
    }
    // An argument that is not UTF-8 is named, with the option it follows (clap said only
    // "invalid UTF-8 was detected in one or more arguments").
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let bad = std::ffi::OsStr::from_bytes(b"1,\xff");
        let run = std::process::Command::new(env!("CARGO_BIN_EXE_posenc"))
            .args(["table", "--device", "cpu", "--positions"])
            .arg(bad)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{text}");
        assert_eq!(text.lines().count(), 1, "{text}");
        let want = "argument 5 is not valid UTF-8: '1,\u{fffd}', after '--positions'";
        assert!(text.contains(want), "{text}");
    }
    // A value clap quotes is cut as every user string is, not only with the whole line.
    let run = posenc(&["table", "--device", "cpu", "--dim", &flag]);
    let text = String::from_utf8_lossy(&run.stderr);
    let chars = text.trim_end().chars().count();
    assert!(chars < posenc::MAX_SHOWN_CHARS + 200, "a line of {chars} characters: {text}");
    assert!(text.contains(" characters ...]"), "{text}");
}

// Round four: a stranger's probes of the binary (2026-11-28).

/// A table of no rows is refused naming its file, exit 2, whatever the ids: with none that
/// needs a row (an empty batch, every id a pad) it used to reach the library and fail there
/// as a shape mismatch, exit 1, the file unnamed.
#[test]
fn a_table_of_no_rows_is_refused_naming_its_file_whatever_the_ids() {
    for device in ["cpu", "gpu"] {
        let dir = Dir::new();
        let w0 = dir.npy("w0.npy", &ndarray::Array2::<f32>::zeros((0, 8)));
        let empty = dir.npy("empty.npy", &ndarray::Array2::<i32>::zeros((2, 0)));
        let pads = dir.npy("pads.npy", &ndarray::Array2::<i32>::from_elem((2, 3), 7));
        let inputs = ["w0.npy", "empty.npy", "pads.npy"];
        for extra in [&["--ids", &empty][..], &["--ids", &pads, "--pad-id", "7"]] {
            let out = dir.out("out.npy");
            let base = ["encode", "--device", device, "--weights", &w0, "-o", &out];
            let got = posenc(&[&base[..], extra].concat());
            let needles = ["embedding table rows", "0 (the table in", "w0.npy", "at least 1 row"];
            assert_refused(&got, &dir, &inputs, &needles);
        }
    }
}

/// wgpu skips a `WGPU_BACKEND` name it does not know (a value of only such names opens no
/// adapter) and ignores a bad `WGPU_POWER_PREF`: `devices` printed "no GPU adapters found",
/// exit 0, and `vulkan,bogus` or `WGPU_POWER_PREF=bogus` passed in silence. Refused now as
/// posenc's own variables are: one line naming the variable and value, exit 2.
#[test]
fn wgpu_variables_wgpu_would_misread_are_refused() {
    let table = ["table", "--dim", "4", "--len", "1", "--device", "gpu"];
    let cases: [(&[&str], &str, &str); 5] = [
        (&["devices"], "WGPU_BACKEND", "bogus"),
        (&["devices", "--json"], "WGPU_BACKEND", "vulkan,bogus"),
        (&table, "WGPU_BACKEND", "vulkan,bogus"),
        (&table, "WGPU_BACKEND", ""),
        (&table, "WGPU_POWER_PREF", "fastest"),
    ];
    for (args, var, value) in cases {
        let dir = Dir::new();
        let got = posenc_env(args, &[(var, value)]);
        let quoted = format!("{value:?}");
        assert_refused(&got, &dir, &[], &[var, &quoted, "allowed"]);
        assert!(got.stdout.is_empty(), "{args:?} {var}={value}");
    }
    // wgpu's own spellings pass: case, spaces, aliases.
    for (var, value) in [("WGPU_BACKEND", " VK , Gl"), ("WGPU_POWER_PREF", "HIGH")] {
        let got = posenc_env(&["devices", "--json"], &[(var, value)]);
        assert_eq!(got.status.code(), Some(0), "{var}={value}: {}", stderr(&got));
    }
}

/// A config integer past u64 was refused with "allowed: a whole number >= 1", which it is.
#[test]
fn a_config_integer_past_u64_is_refused_with_the_real_limit() {
    for key in ["max_position_embeddings", "hidden_size"] {
        let dir = Dir::new();
        // Dynamic scaling reads max_position_embeddings.
        let mut config = serde_json::json!({
            "model_type": "llama", "hidden_size": 64, "num_attention_heads": 8,
            "max_position_embeddings": 2048,
            "rope_scaling": {"rope_type": "dynamic", "factor": 2},
        })
        .to_string();
        config = config.replace(
            &format!("\"{key}\":{}", if key == "hidden_size" { 64 } else { 2048 }),
            &format!("\"{key}\":18446744073709551616"),
        );
        assert!(config.contains("18446744073709551616"), "{config}");
        let path = dir.bytes("config.json", config.as_bytes());
        let got = posenc(&["rope-cache", "--config", &path, "--len", "4", "-o", &dir.out("x.st")]);
        assert_refused(&got, &dir, &["config.json"], &[key, "1..=18446744073709551615"]);
    }
}

/// A bad value in an `--inv-freq` file was blamed on `rope_scaling` (none was given) or on
/// no file at all; and a safetensors tensor whose byte range disagrees with its shape was
/// "invalid shape, data type, or offset for tensor", no tensor named.
#[test]
fn a_bad_value_names_its_file_and_a_bad_tensor_its_name() {
    let dir = Dir::new();
    let inv_freq = dir.npy("if_neg.npy", &ndarray::array![1.0f64, 0.1, 0.01, -1e-3]);
    let got = posenc(&[
        "rope-cache",
        "--head-dim",
        "8",
        "--len",
        "2",
        "--inv-freq",
        &inv_freq,
        "-o",
        &dir.out("x.st"),
    ]);
    assert_refused(
        &got,
        &dir,
        &["if_neg.npy"],
        &["if_neg.npy: invalid inv_freq: -0.001 at index 3"],
    );
    assert!(!stderr(&got).contains("rope_scaling"), "{}", stderr(&got));
    let got = posenc(&["table", "--dim", "8", "--len", "2", "--inv-freq", &inv_freq]);
    assert_refused(&got, &dir, &["if_neg.npy"], &["if_neg.npy: invalid inv_freq", "at index 3"]);

    let header = br#"{"e":{"dtype":"F32","shape":[16,8],"data_offsets":[0,256]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    file.extend_from_slice(&[0; 256]);
    let st = dir.bytes("short.safetensors", &file);
    let ids = dir.npy("ids.npy", &ndarray::array![[1i32, 2, 3]]);
    let out = dir.out("out.npy");
    let got = posenc(&["encode", "--device", "cpu", "--weights", &st, "--ids", &ids, "-o", &out]);
    let needles = ["short.safetensors", "tensor \"e\"", "needs 512 bytes", "[0, 256] span 256"];
    assert_refused(&got, &dir, &["if_neg.npy", "short.safetensors", "ids.npy"], &needles);
}

/// A value that starts with one dash after an option of one value is that option's, and
/// its own check refuses it naming the option (clap read `-inf` as the flags `-i -n -f`
/// and named none); a value left out still says so. A refused `.npy` command prints its
/// error alone: the note on a foreign extension waits until the request is valid (round
/// twenty-two of the hostile probes).
#[test]
fn dash_values_belong_to_their_option_and_refusals_come_alone() {
    let dir = Dir::new();
    let w = weights(&dir);
    let ids = dir.npy("ids.npy", &ndarray::Array2::<f32>::zeros((1, 2)));
    let (a_npy, a_csv, e_json) = (dir.out("a.npy"), dir.out("a.csv"), dir.out("e.json"));
    let cases: &[(&[&str], &str)] = &[
        (&["table", "--dim", "-inf"], "invalid value '-inf' for '--dim <D>'"),
        (&["table", "--dim", "-x"], "invalid value '-x' for '--dim <D>'"),
        (&["table", "--len", "-nan"], "invalid value '-nan' for '--len <N>'"),
        (&["table", "--positions", "-1..3"], "invalid position spec \"-1..3\""),
        (&["alibi", "--heads", "-e5", "--len", "3", "-o", &a_npy], "'-e5' for '--heads <H>'"),
        (&["table", "--dim", "--len", "5"], "a value is required for '--dim <D>'"),
        // An empty value is named as one (round twenty-three: "none was supplied").
        (
            &["table", "--dim", "4", "--len", "2", "-o", ""],
            "invalid value '' for '--output <PATH>': it is empty",
        ),
        (
            &["table", "--dim", "4", "--len", "2", "--output="],
            "invalid value '' for '--output <PATH>': it is empty",
        ),
        (
            &["rope-cache", "--config", "", "--len", "2"],
            "invalid value '' for '--config <CONFIG.json>': it is empty (a value is required)\n",
        ),
        (&["table", "--dim", "4", "--len", "2", "-o="], "for '--output <PATH>': it is empty"),
        (
            &["table", "--frequencies", "", "--dim", "4"],
            "it is empty (a value is required) [possible values: exact, f32]",
        ),
        // Another option's empty value does not make a missing one empty.
        (
            &["table", "--dim", "4", "--len", "2", "--positions", "", "-o"],
            "a value is required for '--output <PATH>' but none was supplied",
        ),
        (&["table", "--len", "2", "-o", "-x.npy", "--dim", "-3"], "'-3' for '--dim <D>'"),
        (&["alibi", "--heads", "0", "--len", "3", "-o", &a_csv], "invalid heads: 0"),
        (&["encode", "--weights", &w, "--ids", &ids, "-o", &e_json], "ids has dtype '<f4'"),
    ];
    for (args, needle) in cases {
        let out = posenc(args);
        assert_refused(&out, &dir, &["ids.npy", "w.npy"], &[needle]);
    }
    // A short option's dash value is its own too, and a path passes on byte for byte.
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let name = std::ffi::OsStr::from_bytes(b"-\xff.csv");
        let run = Command::new(env!("CARGO_BIN_EXE_posenc"))
            .current_dir(dir.path(""))
            .args(["table", "--dim", "4", "--len", "2", "-o"])
            .arg(name)
            .output()
            .unwrap();
        assert!(run.status.success(), "{}", stderr(&run));
        assert!(dir.path("").join(name).exists(), "{:?}", dir.files());
    }
}
