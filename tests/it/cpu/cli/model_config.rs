//! `posenc table --config` and `posenc encode --config` on the CPU: a published config
//! gives, byte for byte, what the explicit flags it stands for give; flags override it,
//! save a `--variant` that contradicts it; families and uses posenc does not serve are
//! refused with one line naming `model_type`.

use std::fs;

use ndarray::{Array1, Array2, Array4, array};

use crate::cpu::rope_config::config_path;
use crate::support::cli::{Dir, assert_ok, assert_rejected, posenc, s};

fn config(name: &str) -> String {
    s(&config_path(name))
}

/// The `table` output (npy) of `args` plus small common arguments.
fn table(dir: &Dir, name: &str, args: &[&str]) -> Vec<u8> {
    let out = dir.path(name);
    let common = [
        "table",
        "--device",
        "cpu",
        "--positions",
        "0..4,511,1025,65535",
        "--format",
        "npy",
        "-o",
        &s(&out),
    ];
    let run = posenc(&[&common[..], args].concat());
    assert_ok(&run, &format!("table {args:?}"));
    fs::read(out).unwrap()
}

#[test]
fn table_config_equals_its_explicit_flags() {
    let dir = Dir::new();
    let cases: [(&str, &[&str]); 3] = [
        ("opus-mt-en-de.json", &["--variant", "marian", "--dim", "512"]),
        (
            "nllb-200-distilled-600m.json",
            &["--variant", "fairseq", "--dim", "1024", "--padding-idx", "1"],
        ),
        ("whisper-tiny.json", &["--variant", "whisper", "--dim", "384"]),
    ];
    for (k, (name, flags)) in cases.into_iter().enumerate() {
        let from_config = table(&dir, &format!("{k}c.npy"), &["--config", &config(name)]);
        let from_flags = table(&dir, &format!("{k}f.npy"), flags);
        assert!(from_config == from_flags, "{name}");
    }
}

#[test]
fn table_flags_override_the_config() {
    let dir = Dir::new();
    let nllb = config("nllb-200-distilled-600m.json");
    let cases: [(&[&str], &[&str]); 3] = [
        (
            &["--dim", "16", "--padding-idx", "none"],
            &["--variant", "fairseq", "--dim", "16", "--padding-idx", "none"],
        ),
        (
            &["--base", "500", "--dim", "8"],
            &["--variant", "fairseq", "--base", "500", "--dim", "8"],
        ),
        (
            &["--frequencies", "f32"],
            &["--variant", "fairseq", "--dim", "1024", "--frequencies", "f32"],
        ),
    ];
    for (k, (over, flags)) in cases.into_iter().enumerate() {
        let a =
            table(&dir, &format!("{k}a.npy"), &[&["--config", nllb.as_str()][..], over].concat());
        let b = table(&dir, &format!("{k}b.npy"), flags);
        assert!(a == b, "{over:?}");
    }
}

/// A `--variant` other than the config's would mix two conventions (NLLB's padding index,
/// pad id and scale with Marian's columns and position numbering, which matches no model),
/// so it is refused, naming the file, `model_type` and both variants, before any output;
/// the config's own variant given again changes nothing.
#[test]
fn a_variant_contradicting_the_config_is_refused_naming_both() {
    let dir = Dir::new();
    let w = weights(&dir, 12, 1024);
    let ids = dir.npy("ids.npy", &array![[1u32, 1, 5, 7, 2]]);
    let out = dir.out("o.npy");
    let (nllb, opus) = (config("nllb-200-distilled-600m.json"), config("opus-mt-en-de.json"));
    let whisper = config("whisper-tiny.json");
    let encode_args = ["encode", "--weights", &w, "--ids", &ids, "-o", &out];
    let cases: [(Vec<&str>, &str, &str, &str, &str); 4] = [
        (vec!["table", "-o", &out], &nllb, "m2m_100", "fairseq", "marian"),
        (encode_args.to_vec(), &nllb, "m2m_100", "fairseq", "marian"),
        (encode_args.to_vec(), &opus, "marian", "marian", "fairseq"),
        (vec!["table", "-o", &out], &whisper, "whisper", "whisper", "vaswani"),
    ];
    for (command, file, model_type, own, given) in cases {
        let args =
            [&command[..], &["--config", file, "--variant", given, "--device", "cpu"]].concat();
        let want = format!(
            "posenc: {file}: model_type \"{model_type}\": its positions are variant {own}; \
             --variant {given} contradicts it: leave out --variant, or --config"
        );
        let run = posenc(&args);
        assert_rejected(&run, &args, &want);
        assert_eq!(String::from_utf8_lossy(&run.stderr).trim_end(), want, "{args:?}");
    }
    assert!(dir.files().iter().all(|f| f != "o.npy"), "no output for a refused request");

    let alone = encode(&dir, "a.npy", &["--weights", &w, "--ids", &ids, "--config", &nllb]);
    let again = encode(
        &dir,
        "b.npy",
        &["--weights", &w, "--ids", &ids, "--config", &nllb, "--variant", "fairseq"],
    );
    assert!(alone == again, "--variant fairseq beside NLLB's config");
    let alone = table(&dir, "c.npy", &["--config", &whisper]);
    let again = table(&dir, "d.npy", &["--config", &whisper, "--variant", "whisper"]);
    assert!(alone == again, "--variant whisper beside Whisper's config");
}

/// An embedding table of `vocab` rows of `dim`, distinct values.
fn weights(dir: &Dir, vocab: usize, dim: usize) -> String {
    dir.npy(
        "w.npy",
        &Array2::from_shape_fn((vocab, dim), |(r, c)| ((r * 31 + c * 7) % 97) as f32 / 97.0 - 0.5),
    )
}

fn encode(dir: &Dir, name: &str, args: &[&str]) -> Vec<u8> {
    let out = dir.path(name);
    let run = posenc(&[&["encode", "--device", "cpu", "-o", &s(&out)][..], args].concat());
    assert_ok(&run, &format!("encode {args:?}"));
    fs::read(out).unwrap()
}

#[test]
fn encode_config_equals_its_explicit_flags() {
    let dir = Dir::new();
    // NLLB: fairseq positions counting from padding_idx + 1, pad tokens (id 1) zero, scaled.
    let w = weights(&dir, 12, 1024);
    let ids = dir.npy("ids.npy", &array![[1u32, 1, 5, 7, 2], [4, 5, 6, 7, 1]]);
    let nllb = config("nllb-200-distilled-600m.json");
    let a = encode(&dir, "a.npy", &["--weights", &w, "--ids", &ids, "--config", &nllb]);
    let flags = [
        "--weights",
        &w,
        "--ids",
        &ids,
        "--variant",
        "fairseq",
        "--padding-idx",
        "1",
        "--pad-id",
        "1",
        "--scale",
        "sqrt",
    ];
    let b = encode(&dir, "b.npy", &flags);
    assert!(a == b, "nllb");
    // Marian: positions from 0 for every token, the pad token (58100) looked up like others.
    let w =
        dir.npy("wm.npy", &Array2::from_shape_fn((4, 512), |(r, c)| (r as f32) - (c % 5) as f32));
    let ids = dir.npy("idsm.npy", &array![[3u32, 2, 0]]);
    let opus = config("opus-mt-en-de.json");
    let a = encode(&dir, "c.npy", &["--weights", &w, "--ids", &ids, "--config", &opus]);
    let b = encode(
        &dir,
        "d.npy",
        &["--weights", &w, "--ids", &ids, "--variant", "marian", "--scale", "sqrt"],
    );
    assert!(a == b, "marian");
    // Flags override: no scale.
    let a = encode(
        &dir,
        "e.npy",
        &["--weights", &w, "--ids", &ids, "--config", &opus, "--scale", "none"],
    );
    let b = encode(&dir, "f.npy", &["--weights", &w, "--ids", &ids, "--variant", "marian"]);
    assert!(a == b, "marian, --scale none");
}

#[test]
fn encode_bart_reads_its_learned_table_two_rows_on() {
    let dir = Dir::new();
    let w = weights(&dir, 10, 768);
    let p = dir.npy("p.npy", &Array2::from_shape_fn((12, 768), |(r, c)| (r * 1000 + c) as f32));
    let ids = dir.npy("ids.npy", &array![[0u32, 4, 9, 1], [2, 2, 3, 1]]);
    let bart = config("bart-base.json");
    let args = ["--weights", &w, "--ids", &ids, "--position-table", &p];
    let a = encode(&dir, "a.npy", &[&args[..], &["--config", &bart]].concat());
    let offsets = dir.npy("o.npy", &Array1::from_vec(vec![2u32, 2]));
    let b = encode(&dir, "b.npy", &[&args[..], &["--offsets", &offsets]].concat());
    assert!(a == b, "bart: rows at position + 2");
    // With explicit offsets (a KV cache at 3), the config's 2 is added to them.
    let at3 = dir.npy("o3.npy", &Array1::from_vec(vec![3u32, 0]));
    let at5 = dir.npy("o5.npy", &Array1::from_vec(vec![5u32, 2]));
    let a = encode(&dir, "c.npy", &[&args[..], &["--config", &bart, "--offsets", &at3]].concat());
    let b = encode(&dir, "d.npy", &[&args[..], &["--offsets", &at5]].concat());
    assert!(a == b, "bart with --offsets");
    // Position 8 + 2 = 10, row 12, is the first past the table's 12 rows: refused, as HF's
    // lookup fails, naming the position as given and its row (round twenty: it named the
    // row as the position).
    let past = dir.npy("o9.npy", &Array1::from_vec(vec![3u32, 8]));
    let out = dir.out("x.npy");
    let over = [
        &["encode", "--device", "cpu", "-o", &out][..],
        &args,
        &["--config", &bart, "--offsets", &past],
    ]
    .concat();
    assert_rejected(
        &posenc(&over),
        &over,
        "invalid positions: 10 at row 1, column 2: row 12 of a position table of 12 rows \
         (bart's row is position + 2)",
    );
}

#[test]
fn uses_posenc_does_not_serve_are_refused_naming_the_family() {
    let dir = Dir::new();
    let w = weights(&dir, 4, 384);
    let ids = dir.npy("ids.npy", &array![[0u32, 1]]);
    let p = dir.npy("p.npy", &Array2::<f32>::zeros((4, 384)));
    let out = dir.out("o.npy");
    let llama = config("llama-3.1-8b.json");
    let whisper = config("whisper-tiny.json");
    let bart = config("bart-base.json");
    let opus = config("opus-mt-en-de.json");
    let bad = dir.bytes(
        "bad.json",
        br#"{"model_type": "m2m_100", "d_model": 1024, "scale_embedding": true}"#,
    );
    // `posenc encode` of the weights and ids into `out`, before each case's own arguments.
    let enc = ["encode", "--weights", &w, "--ids", &ids, "-o", &out];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["table", "--config", &llama], "model_type \"llama\""),
        (vec!["table", "--config", &bart], "model_type \"bart\""),
        (vec!["table", "--config", &bad], "pad_token_id"),
        ([&enc[..], &["--config", &whisper]].concat(), "model_type \"whisper\""),
        ([&enc[..], &["--config", &bart]].concat(), "model_type \"bart\""),
        (
            [&enc[..], &["--config", &opus, "--position-table", &p]].concat(),
            "model_type \"marian\"",
        ),
        ([&enc[..], &["--config", &opus]].concat(), "d_model"),
        // Marian and BART number pad tokens like any other: a pad id would restart them
        // (round twenty of the hostile probes).
        (
            [&enc[..], &["--config", &opus, "--pad-id", "58100"]].concat(),
            "invalid pad_id: 58100, beside a config of model_type \"marian\"",
        ),
        (
            [&enc[..], &["--config", &bart, "--position-table", &p, "--pad-id", "1"]].concat(),
            "invalid pad_id: 1, beside a config of model_type \"bart\"",
        ),
        ([&enc[..], &["--config", &llama]].concat(), "model_type \"llama\""),
    ];
    for (args, needle) in &cases {
        let mut args = args.clone();
        args.extend(["--device", "cpu"]);
        assert_rejected(&posenc(&args), &args, needle);
    }
    assert!(dir.files().iter().all(|f| f != "o.npy"), "no output for a refused request");
}

/// A refused `--config` names the file as the user gave it, whatever its name, for the
/// errors the library finds in the text and those the command finds in what it read.
#[test]
fn config_errors_name_the_path_given() {
    let dir = Dir::new();
    fs::create_dir(dir.path("my")).unwrap();
    let no_pad = dir.bytes(
        "my/cfg.json",
        br#"{"model_type": "m2m_100", "d_model": 1024, "scale_embedding": true}"#,
    );
    let bad_rope = dir.bytes(
        "my/rope.json",
        br#"{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
             "rope_scaling": {"rope_type": "linear", "factor": -1}}"#,
    );
    let top_pad = dir.bytes(
        "my/pad.json",
        br#"{"model_type": "m2m_100", "d_model": 384, "scale_embedding": true,
             "pad_token_id": 4294967295}"#,
    );
    let w = weights(&dir, 4, 384);
    let ids = dir.npy("ids.npy", &array![[0u32, 1]]);
    let x = dir.npy("x.npy", &Array4::<f32>::zeros((1, 2, 1, 16)));
    let out = dir.out("o.npy");
    let (bart, whisper) = (config("bart-base.json"), config("whisper-tiny.json"));
    let opus = config("opus-mt-en-de.json");
    let cases: Vec<(Vec<&str>, String)> = vec![
        // d_model 512 beside a table 384 wide: the config's key, and the table's width.
        (
            vec!["encode", "--weights", &w, "--ids", &ids, "-o", &out, "--config", &opus],
            format!("{opus}: invalid d_model: 512 (allowed: 384, the width of the table in {w}"),
        ),
        (vec!["table", "--config", &no_pad], format!("{no_pad}: invalid pad_token_id: missing")),
        // fairseq positions from a pad_token_id past u32 - len: the config's key, not the
        // library's padding_idx.
        (
            vec!["encode", "--weights", &w, "--ids", &ids, "-o", &out, "--config", &top_pad],
            format!("{top_pad}: invalid pad_token_id: 4294967295 with 2 tokens per row"),
        ),
        (vec!["table", "--config", &bart], format!("{bart}: model_type \"bart\": learned")),
        (
            vec!["encode", "--weights", &w, "--ids", &ids, "-o", &out, "--config", &whisper],
            format!("{whisper}: model_type \"whisper\""),
        ),
        (
            vec!["rope", "--input", &x, "--layout", "blhd", "-o", &out, "--config", &bad_rope],
            format!("{bad_rope}: invalid rope_scaling.factor: -1"),
        ),
        (
            vec!["rope-cache", "--len", "4", "-o", &out, "--config", &no_pad],
            format!("{no_pad}: model_type \"m2m_100\""),
        ),
    ];
    for (args, start) in &cases {
        let mut args = args.clone();
        args.extend(["--device", "cpu"]);
        let run = posenc(&args);
        assert_rejected(&run, &args, start);
        let line = String::from_utf8_lossy(&run.stderr);
        assert!(line.starts_with(&format!("posenc: {start}")), "{args:?}: {line}");
    }
}

/// `table --config` needs no `scale_embedding`, which only `encode` applies; `encode
/// --config` refuses a config without it, naming the key and the file, unless `--scale`
/// is given.
#[test]
fn only_encode_needs_scale_embedding() {
    let dir = Dir::new();
    let unscaled = dir.bytes("unscaled.json", br#"{"model_type": "marian", "d_model": 512}"#);
    let from_config = table(&dir, "a.npy", &["--config", &unscaled]);
    let from_flags = table(&dir, "b.npy", &["--variant", "marian", "--dim", "512"]);
    assert!(from_config == from_flags, "table --config without scale_embedding");

    let w = dir.npy("w.npy", &Array2::from_shape_fn((4, 512), |(r, c)| (r + c % 3) as f32));
    let ids = dir.npy("ids.npy", &array![[3u32, 2, 0]]);
    let out = dir.out("o.npy");
    let args = [
        "encode",
        "--device",
        "cpu",
        "--weights",
        &w,
        "--ids",
        &ids,
        "-o",
        &out,
        "--config",
        &unscaled,
    ];
    assert_rejected(
        &posenc(&args),
        &args,
        &format!("{unscaled}: invalid scale_embedding: missing"),
    );
    assert!(dir.files().iter().all(|f| f != "o.npy"), "no output for a refused request");
    // --scale states it.
    let a = encode(
        &dir,
        "c.npy",
        &["--weights", &w, "--ids", &ids, "--config", &unscaled, "--scale", "sqrt"],
    );
    let b = encode(
        &dir,
        "d.npy",
        &["--weights", &w, "--ids", &ids, "--variant", "marian", "--scale", "sqrt"],
    );
    assert!(a == b, "encode --config without scale_embedding, with --scale");
}

/// `posenc ARGS` with `input` written to its stdin (from a thread: the command may stop
/// reading before the end).
fn posenc_with_stdin(args: &[&str], input: Vec<u8>) -> std::process::Output {
    use std::io::Write;
    use std::process::{Command, Stdio};

    let mut child = Command::new(env!("CARGO_BIN_EXE_posenc"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // A broken pipe is the command having read what it wanted.
    let writer = std::thread::spawn(move || drop(stdin.write_all(&input)));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// An oversized JSON input is refused with its size when a file's metadata gives it, and as
/// `more than` the limit from a pipe, whose size is unknown.
#[test]
fn an_oversized_json_input_is_refused_with_its_real_size() {
    let limit = posenc::rope::MAX_JSON_BYTES;
    let dir = Dir::new();
    let mut text = br#"{"model_type": "marian", "d_model": 512}"#.to_vec();
    text.resize(limit + 10, b' ');
    let file = dir.bytes("big.json", &text);
    let args = ["table", "--config", &file];
    let want =
        format!("posenc: {file}: invalid (json): {} bytes (allowed: at most {limit}", limit + 10);
    let run = posenc(&args);
    assert_rejected(&run, &args, &want);
    assert!(String::from_utf8_lossy(&run.stderr).starts_with(&want));

    let more = format!("invalid (json): more than {limit} bytes (allowed: at most {limit} bytes)");
    let cases: [&[&str]; 2] = [
        &["table", "--config", "/dev/stdin"],
        &["rope-cache", "--head-dim", "8", "--len", "4", "--scaling", "@/dev/stdin", "-o", "-"],
    ];
    for args in cases {
        let run = posenc_with_stdin(args, text.clone());
        assert_rejected(&run, args, &more);
    }
    // At the limit, a pipe is read whole.
    text.truncate(limit);
    let run = posenc_with_stdin(
        &["table", "--config", "/dev/stdin", "--dim", "4", "--device", "cpu"],
        text,
    );
    assert_ok(&run, "table --config /dev/stdin at the limit");
}
