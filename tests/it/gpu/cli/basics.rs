//! The `posenc` binary as a user meets it: outputs, formats, exit statuses, one-line
//! errors, and that a failed run never leaves or clobbers a file.

use crate::support::bits;
use crate::support::cli::{
    assert_ok, assert_rejected, files_in, gpu_available, posenc, posenc_env, posenc_lines, stderr,
    stdout,
};
use std::fs;
use std::process::{Command, Stdio};

use posenc::{Frequencies, PeSpec, Variant, cpu, reference};

/// Three decimals, as the seed values are written in the issue.
const SEED_TOLERANCE: f32 = 5e-4;

fn parse_csv(text: &str) -> Vec<Vec<f32>> {
    text.lines()
        .map(|line| {
            line.split(',').map(|v| v.parse().unwrap_or_else(|e| panic!("{v:?}: {e}"))).collect()
        })
        .collect()
}

fn csv_bits(text: &str) -> Vec<u32> {
    bits(parse_csv(text).into_iter().flatten())
}

/// A parsed `.npy` file: its header dict and its float32 data.
struct Npy {
    dict: String,
    data: Vec<f32>,
}

fn parse_npy(bytes: &[u8]) -> Npy {
    assert_eq!(&bytes[..6], b"\x93NUMPY", "magic");
    assert_eq!(&bytes[6..8], &[1, 0], "version 1.0");
    let header_len = usize::from(u16::from_le_bytes([bytes[8], bytes[9]]));
    let data_start = 10 + header_len;
    assert_eq!(data_start % 64, 0, "header length {header_len} leaves the data unaligned");
    let dict = std::str::from_utf8(&bytes[10..data_start]).unwrap().to_string();
    assert!(dict.ends_with('\n'), "{dict:?}");
    let raw = &bytes[data_start..];
    assert_eq!(raw.len() % 4, 0);
    let data = raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    Npy { dict, data }
}

#[test]
fn csv_defaults_to_8_positions_of_dim_512_bit_identical_to_cpu() {
    let out = posenc(&["table", "--device", "cpu"]);
    assert_ok(&out, "default table");
    let text = stdout(&out);
    let rows = parse_csv(&text);
    assert_eq!(rows.len(), 8);
    assert!(rows.iter().all(|r| r.len() == 512));
    let expected = cpu::table(&PeSpec::new(512).unwrap(), &(0..8).collect::<Vec<_>>());
    // Display prints the shortest decimal that reads back to the same f32.
    assert_eq!(csv_bits(&text), bits(expected.iter().copied()));
}

#[test]
fn csv_seed_rows_for_dim_8() {
    let out = posenc(&["table", "--dim", "8", "--len", "4", "--device", "cpu"]);
    assert_ok(&out, "d=8 table");
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
    let rows = parse_csv(&stdout(&out));
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[0], [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]);
    let seed = [0.841, 0.540, 0.100, 0.995, 0.010, 1.000, 0.001, 1.000];
    for (k, (got, want)) in rows[1].iter().zip(seed).enumerate() {
        assert!((got - want).abs() <= SEED_TOLERANCE, "column {k}: {got} vs {want}");
    }
}

#[test]
fn positions_spec_and_base_reach_the_table() {
    let out = posenc(&[
        "table",
        "--dim",
        "16",
        "--base",
        "500",
        "--positions",
        "0..4,1000000,4294967295",
        "--device",
        "cpu",
    ]);
    assert_ok(&out, "spec table");
    let spec = PeSpec::new(16).unwrap().with_base(500.0).unwrap();
    let expected = cpu::table(&spec, &[0, 1, 2, 3, 1_000_000, u32::MAX]);
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 6);
    assert_eq!(csv_bits(&text), bits(expected.iter().copied()));
}

#[test]
fn json_has_dim_positions_and_values() {
    let out = posenc(&[
        "table",
        "--dim",
        "8",
        "--positions",
        "0..3,4294967295",
        "--format",
        "json",
        "--device",
        "cpu",
    ]);
    assert_ok(&out, "json table");
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let obj = v.as_object().unwrap();
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["dim", "positions", "values"]);
    assert_eq!(obj["dim"], 8);
    assert_eq!(obj["positions"], serde_json::json!([0, 1, 2, 4294967295u32]));
    let values = obj["values"].as_array().unwrap();
    assert_eq!(values.len(), 4);
    let flat: Vec<f32> = values
        .iter()
        .flat_map(|row| {
            let row = row.as_array().unwrap();
            assert_eq!(row.len(), 8);
            row.iter().map(|x| x.as_f64().unwrap() as f32).collect::<Vec<_>>()
        })
        .collect();
    let expected = cpu::table(&PeSpec::new(8).unwrap(), &[0, 1, 2, u32::MAX]);
    assert_eq!(bits(flat), bits(expected.iter().copied()));
}

#[test]
fn npy_file_has_an_aligned_v1_header_and_cpu_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.npy");
    let out = posenc(&[
        "table",
        "--dim",
        "8",
        "--positions",
        "0..3,4294967295",
        "--format",
        "npy",
        "--device",
        "cpu",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert_ok(&out, "npy table");
    assert!(out.stdout.is_empty());
    assert_eq!(files_in(dir.path()), ["t.npy"], "no temporary file is left behind");
    let bytes = fs::read(&path).unwrap();
    let npy = parse_npy(&bytes);
    assert!(
        npy.dict.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 8), }"),
        "{:?}",
        npy.dict
    );
    assert_eq!(npy.data.len(), 4 * 8);
    let expected = cpu::table(&PeSpec::new(8).unwrap(), &[0, 1, 2, u32::MAX]);
    assert_eq!(bits(npy.data), bits(expected.iter().copied()));

    // A redirected stdout takes the same bytes.
    let piped = posenc(&[
        "table",
        "--dim",
        "8",
        "--positions",
        "0..3,4294967295",
        "--format",
        "npy",
        "--device",
        "cpu",
    ]);
    assert_ok(&piped, "npy on stdout");
    assert_eq!(piped.stdout, bytes);
}

#[test]
fn an_output_file_replaces_an_existing_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    fs::write(&path, "old contents\n").unwrap();
    let out = posenc(&[
        "table",
        "--dim",
        "4",
        "--len",
        "2",
        "--device",
        "cpu",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert_ok(&out, "csv to a file");
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "0,1,0,1\n0.84147096,0.5403023,0.009999832,0.99995\n"
    );
    assert_eq!(files_in(dir.path()), ["t.csv"]);
}

#[test]
fn empty_position_lists_give_empty_tables() {
    let out = posenc(&[
        "table",
        "--dim",
        "8",
        "--positions",
        "5..5",
        "--format",
        "npy",
        "--device",
        "cpu",
    ]);
    assert_ok(&out, "empty npy");
    let npy = parse_npy(&out.stdout);
    assert!(npy.dict.contains("'shape': (0, 8)"), "{:?}", npy.dict);
    assert!(npy.data.is_empty());
    let out = posenc(&["table", "--len", "0", "--device", "cpu"]);
    assert_ok(&out, "empty csv");
    assert!(out.stdout.is_empty());
}

#[test]
fn reference_device_gives_the_rounded_reference() {
    let out =
        posenc(&["table", "--dim", "8", "--positions", "0..3,4294967295", "--device", "reference"]);
    assert_ok(&out, "reference table");
    let expected = reference::table_f32(&PeSpec::new(8).unwrap(), &[0, 1, 2, u32::MAX]);
    assert_eq!(csv_bits(&stdout(&out)), bits(expected.iter().copied()));
}

/// Invalid requests: each with a word its error line must contain.
const BAD_TABLE_ARGS: &[(&[&str], &str)] = &[
    (&["--dim", "3"], "invalid dim: 3"),
    (&["--dim", "0"], "invalid dim: 0"),
    (&["--dim", "65538"], "invalid dim: 65538"),
    (&["--dim", "abc"], "--dim"),
    (&["--dim", "-2"], "--dim"),
    (&["--base", "1"], "invalid base: 1"),
    (&["--base", "0.5"], "invalid base"),
    (&["--base", "-5"], "invalid base: -5"),
    (&["--base", "nan"], "invalid base"),
    (&["--base", "1e8"], "invalid base"),
    // Past float64's range: named as written, not as the infinity it would read as.
    (&["--base", "1e309"], "1e309 is beyond float64's range"),
    (&["--base", "-1e309"], "-1e309 is beyond float64's range"),
    (&["--base", "inf"], "invalid base: inf"),
    (&["--base", "ten"], "expected a number"),
    (&["--base", "1e-400"], "1e-400 is below float64's smallest"),
    (&["--base", "0e5"], "invalid base: 0"),
    (&["--variant", "tensor2tensor", "--min-timescale", "1e400"], "1e400 is beyond"),
    (&["--variant", "bert"], "bert"),
    (&["--variant", "whisper", "--dim", "6", "--padding-idx", "1"], "fairseq for --padding-idx"),
    (&["--variant", "fairseq", "--dim", "3"], "variant fairseq"),
    (&["--variant", "fairseq", "--dim", "6", "--padding-idx", "x"], "none or an integer"),
    (&["--min-timescale", "2"], "tensor2tensor for timescales"),
    (&["--variant", "tensor2tensor", "--min-timescale", "0"], "invalid min_timescale: 0"),
    (&["--variant", "tensor2tensor", "--max-timescale", "0.5"], "invalid max_timescale: 0.5"),
    (&["--variant", "tensor2tensor", "--base", "5", "--max-timescale", "6"], "cannot be used"),
    (&["--frequencies", "f64"], "f64"),
    (&["--start-index", "-1"], "--start-index"),
    (&["--positions", "1,,2"], "item 2"),
    (&["--positions", "0..x"], "not a whole number"),
    (&["--positions", "5..2"], "backwards"),
    (&["--positions", "4294967296"], "above 4294967295"),
    (&["--positions", "0..4294967297"], "above 4294967296"),
    (&["--positions", ""], "empty"),
    (&["--len", "4294967297"], "MAX_OUTPUT_VALUES"),
    (&["--len", "-1"], "--len"),
    (&["--dim", "65536", "--len", "40000"], "MAX_OUTPUT_VALUES"),
    (&["--dim", "65536", "--positions", "0..32769"], "MAX_OUTPUT_VALUES"),
    (&["--len", "3", "--positions", "1"], "cannot be used with"),
    (&["--foo"], "--foo"),
    (&["--device", "tpu"], "tpu"),
    (&["--format", "xml"], "xml"),
    (&["--len"], "--len"),
    (&["stray"], "stray"),
];

#[test]
fn invalid_table_requests_exit_2_with_one_line_and_create_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("fresh.csv");
    for &(case, needle) in BAD_TABLE_ARGS {
        let mut args = vec!["table", "-o", fresh.to_str().unwrap()];
        args.extend_from_slice(case);
        assert_rejected(&posenc(&args), case, needle);
        assert!(files_in(dir.path()).is_empty(), "{case:?}: {:?}", files_in(dir.path()));
    }
}

#[test]
fn invalid_table_requests_leave_an_existing_file_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("keep.csv");
    fs::write(&existing, "keep me\n").unwrap();
    for &(case, needle) in BAD_TABLE_ARGS {
        let mut args = vec!["table", "-o", existing.to_str().unwrap()];
        args.extend_from_slice(case);
        assert_rejected(&posenc(&args), case, needle);
        assert_eq!(fs::read_to_string(&existing).unwrap(), "keep me\n", "{case:?}");
        assert_eq!(files_in(dir.path()), ["keep.csv"], "{case:?}");
    }
}

#[test]
fn other_subcommands_reject_bad_arguments_the_same_way() {
    for (case, needle) in [
        (&["accuracy", "--device", "reference"][..], "reference"),
        (&["accuracy", "--dim", "7"], "invalid dim: 7"),
        (&["accuracy", "--base", "0"], "invalid base: 0"),
        (&["devices", "--csv"], "--csv"),
        (&["frobnicate"], "frobnicate"),
    ] {
        assert_rejected(&posenc(case), case, needle);
    }
}

#[test]
fn an_unwritable_output_exits_1_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing").join("t.csv");
    let out = posenc(&["table", "--dim", "8", "--device", "cpu", "-o", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("posenc: ") && err.contains("t.csv"), "{err}");
    assert!(files_in(dir.path()).is_empty());
}

#[test]
fn help_and_version_succeed_on_stdout() {
    for args in [&["--help"][..], &["--version"], &["table", "--help"], &["help", "accuracy"]] {
        let out = posenc(args);
        assert_ok(&out, &format!("{args:?}"));
        assert!(!out.stdout.is_empty() && out.stderr.is_empty(), "{args:?}");
    }
    let help = stdout(&posenc(&["table", "--help"]));
    for needle in [
        "[default: 512]",
        "[default: 8 when --positions is not given]",
        "[default: auto]",
        "Exit status",
    ] {
        assert!(help.contains(needle), "{needle:?} missing from table --help");
    }
}

#[test]
fn a_closed_pipe_ends_the_run_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_posenc"))
        .args(["table", "--dim", "64", "--len", "200000", "--device", "cpu"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert!(posenc_lines(&out).is_empty(), "{}", stderr(&out));
}

#[test]
fn devices_lists_adapters_or_says_there_are_none() {
    let out = posenc(&["devices"]);
    assert_ok(&out, "devices");
    let text = stdout(&out);
    let none_noted = stderr(&out).starts_with("posenc: note: no GPU adapters found");
    assert!(text.contains("SHADER_F16") || (text.is_empty() && none_noted), "{text}");
    // None: an empty list on stdout (text and JSON alike), one note on stderr, exit 0.
    let none = [("WGPU_BACKEND", "noop")];
    for args in [&["devices"][..], &["devices", "--json"]] {
        let out = posenc_env(args, &none);
        assert_ok(&out, "devices with no adapter");
        let want = if args.len() == 2 { "[]\n" } else { "" };
        assert_eq!(stdout(&out), want, "{args:?}");
        let notes = posenc_lines(&out);
        assert_eq!(notes.len(), 1, "{}", stderr(&out));
        assert!(notes[0].starts_with("posenc: note: no GPU adapters found"), "{}", notes[0]);
    }

    let out = posenc(&["devices", "--json"]);
    assert_ok(&out, "devices --json");
    let list: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    for adapter in list.as_array().unwrap() {
        for key in [
            "name",
            "backend",
            "device_type",
            "driver",
            "max_storage_binding",
            "max_buffer_size",
            "shader_f16",
            "timestamp_query",
        ] {
            assert!(adapter.get(key).is_some(), "{key} missing from {adapter}");
        }
    }
}

/// The accuracy report's rows: label, naive error, posenc error.
fn accuracy_rows(text: &str) -> Vec<(String, f64, f64)> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with('|'));
    assert_eq!(lines.next(), Some("| positions near | naive f32 | posenc |"), "{text}");
    assert_eq!(lines.next(), Some("|---|---:|---:|"));
    lines
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 3, "{l}");
            (cells[0].to_string(), cells[1].parse().unwrap(), cells[2].parse().unwrap())
        })
        .collect()
}

fn check_accuracy_report(text: &str) {
    let rows = accuracy_rows(text);
    let labels: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(labels, ["2^16", "2^20", "2^24", "2^28", "2^31", "2^32-1"]);
    for (label, naive, fast) in &rows {
        assert!(*fast <= posenc::ACCURACY_BOUND, "{label}: posenc {fast}");
        assert!(naive > fast, "{label}: naive {naive} vs posenc {fast}");
    }
    // Once positions no longer fit float32's mantissa, the naive phase is noise.
    assert!(rows[5].1 > 0.5, "naive at 2^32-1: {}", rows[5].1);
}

#[test]
fn accuracy_report_on_cpu() {
    let out = posenc(&["accuracy", "--device", "cpu"]);
    assert_ok(&out, "accuracy");
    let text = stdout(&out);
    assert!(text.contains("d = 512") && text.contains("posenc on cpu"), "{text}");
    check_accuracy_report(&text);
}

#[test]
fn auto_falls_back_to_the_cpu_with_one_note_and_gpu_fails_with_exit_1() {
    let none = [("WGPU_ADAPTER_NAME", "no-such-adapter-posenc-test")];
    let out = posenc_env(&["table", "--dim", "8", "--len", "4"], &none);
    assert_ok(&out, "auto without an adapter");
    let notes = posenc_lines(&out);
    assert_eq!(notes.len(), 1, "{}", stderr(&out));
    assert!(
        notes[0].starts_with("posenc: note: computing on the CPU: no GPU adapter found"),
        "{}",
        notes[0]
    );
    let expected = cpu::table(&PeSpec::new(8).unwrap(), &[0, 1, 2, 3]);
    assert_eq!(csv_bits(&stdout(&out)), bits(expected.iter().copied()));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    let out = posenc_env(&["table", "--device", "gpu", "-o", path.to_str().unwrap()], &none);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let lines = posenc_lines(&out);
    assert_eq!(lines.len(), 1, "{}", stderr(&out));
    assert!(lines[0].starts_with("posenc: no GPU adapter found"), "{}", lines[0]);
    assert!(files_in(dir.path()).is_empty());
}

#[test]
fn gpu_table_is_bit_identical_to_cpu() {
    if !gpu_available("gpu_table_is_bit_identical_to_cpu") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpu.npy");
    let spec_text = "0..100,65535..65600,16777215..16777300,4294967200..4294967296";
    let out = posenc(&[
        "table",
        "--dim",
        "64",
        "--positions",
        spec_text,
        "--device",
        "gpu",
        "--format",
        "npy",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert_ok(&out, "gpu table");
    assert!(posenc_lines(&out).is_empty(), "{}", stderr(&out));
    let positions = posenc::positions::parse_spec(spec_text).unwrap();
    let npy = parse_npy(&fs::read(&path).unwrap());
    assert!(npy.dict.contains(&format!("'shape': ({}, 64)", positions.len())), "{:?}", npy.dict);
    let expected = cpu::table(&PeSpec::new(64).unwrap(), &positions);
    assert_eq!(bits(npy.data), bits(expected.iter().copied()));
}

#[test]
fn auto_uses_the_gpu_without_a_note_when_there_is_one() {
    if !gpu_available("auto_uses_the_gpu_without_a_note_when_there_is_one") {
        return;
    }
    let out = posenc(&["table", "--dim", "8", "--len", "4"]);
    assert_ok(&out, "auto table");
    assert!(posenc_lines(&out).is_empty(), "{}", stderr(&out));
    let expected = cpu::table(&PeSpec::new(8).unwrap(), &[0, 1, 2, 3]);
    assert_eq!(csv_bits(&stdout(&out)), bits(expected.iter().copied()));
}

#[test]
fn accuracy_report_on_gpu() {
    if !gpu_available("accuracy_report_on_gpu") {
        return;
    }
    let out = posenc(&["accuracy", "--device", "gpu"]);
    assert_ok(&out, "accuracy on gpu");
    let text = stdout(&out);
    assert!(text.contains("posenc on gpu: "), "{text}");
    check_accuracy_report(&text);
}

#[test]
fn bench_prints_json_with_every_item_and_agreement() {
    if !gpu_available("bench_prints_json_with_every_item_and_agreement") {
        return;
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_posenc"))
        .args([
            "bench",
            "--batch",
            "2",
            "--len",
            "8",
            "--dim",
            "16",
            "--vocab",
            "50",
            "--repeats",
            "2",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> =
        report["results"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    for name in ["cpu_encode", "cpu_table", "cpu_copy_ceiling"] {
        assert!(names.contains(&name), "{names:?}");
    }
    for r in report["results"].as_array().unwrap() {
        assert!(r["median_s"].as_f64().unwrap() > 0.0, "{r}");
        // The host's part of a call moves no bytes in its time: no bandwidth.
        if r["name"] == "gpu_encode_submit" {
            assert!(r["gbps"].is_null() && r["ratio"].is_null(), "{r}");
            continue;
        }
        for key in ["gbps", "ceiling_gbps", "ratio"] {
            assert!(r[key].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    assert_eq!(report["sizes"]["dim"], 16);
    // With a GPU the two encodes are compared bit for bit and must agree.
    if names.contains(&"gpu_encode") {
        assert_eq!(report["agree"], true);
        assert!(report["adapter"]["name"].is_string());
    }
}

#[test]
fn bench_rejects_bad_sizes_with_one_line() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_posenc"))
        .args(["bench", "--dim", "7", "--device", "cpu"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("posenc:")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("dim"), "{stderr}");
}

#[test]
fn variants_and_their_options_reach_the_table() {
    let t2t = PeSpec::for_variant(Variant::Tensor2Tensor, 9).unwrap();
    let fairseq = PeSpec::for_variant(Variant::Fairseq, 7).unwrap();
    let cases: Vec<(Vec<&str>, PeSpec)> = vec![
        (vec!["--variant", "vaswani", "--dim", "8"], PeSpec::new(8).unwrap()),
        (
            vec!["--variant", "distilbert", "--dim", "7", "--base", "500"],
            PeSpec::for_variant(Variant::DistilBert, 7).unwrap().with_base(500.0).unwrap(),
        ),
        (
            vec!["--variant", "marian", "--dim", "5"],
            PeSpec::for_variant(Variant::Marian, 5).unwrap(),
        ),
        (
            vec![
                "--variant",
                "tensor2tensor",
                "--dim",
                "9",
                "--min-timescale",
                "2",
                "--max-timescale",
                "5e4",
                "--start-index",
                "4294967290",
            ],
            t2t.clone().with_timescales(2.0, 5e4).unwrap().with_start_index(u32::MAX - 5),
        ),
        (
            vec!["--variant", "tensor2tensor", "--dim", "9", "--base", "300"],
            t2t.with_base(300.0).unwrap(),
        ),
        (vec!["--variant", "fairseq", "--dim", "7"], fairseq.clone()),
        (
            vec!["--variant", "fairseq", "--dim", "7", "--padding-idx", "none"],
            fairseq.clone().with_padding_idx(None),
        ),
        (
            vec!["--variant", "fairseq", "--dim", "7", "--padding-idx", "3"],
            fairseq.with_padding_idx(Some(3)),
        ),
        (
            vec!["--variant", "whisper", "--dim", "6"],
            PeSpec::for_variant(Variant::Whisper, 6).unwrap(),
        ),
        (
            vec!["--variant", "whisper", "--dim", "6", "--frequencies", "f32"],
            PeSpec::for_variant(Variant::Whisper, 6).unwrap().with_frequencies(Frequencies::F32),
        ),
    ];
    let positions = [0u32, 1, 2, 3, 1 << 24, u32::MAX];
    for (args, spec) in cases {
        let mut full = vec!["table", "--device", "cpu", "--positions", "0..4,16777216,4294967295"];
        full.extend_from_slice(&args);
        let out = posenc(&full);
        assert_ok(&out, &format!("{args:?}"));
        let expected = cpu::table(&spec, &positions);
        assert_eq!(csv_bits(&stdout(&out)), bits(expected.iter().copied()), "{args:?}");
    }
}

/// `table --inv-freq`: a model's own frequencies from a .npy (float32, as torch holds them)
/// or a .safetensors tensor (float64, named), in each variant's columns and both frequency
/// modes, give the library's table on the CPU, the GPU (the same bits) and the reference
/// path; files of the wrong length or range, and --base beside them, are refused with one
/// line.
#[test]
fn inv_freq_reaches_the_table_on_every_device() {
    use crate::support::{le_bytes, npy_bytes, safetensors_of};
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_string()
    };
    // torch's float32 inv_freq for d = 8: 1 / 10000 ** (arange(0, 8, 2) / 8).
    let torch: Vec<f32> = (0..4).map(|i| 1.0 / 10000f32.powf((2 * i) as f32 / 8.0)).collect();
    let wide: Vec<f64> = vec![1.0 / 3.0, 0.01 + 1e-15, 2e-4, 7e-7];
    let npy = write("inv.npy", &npy_bytes(&ndarray::Array1::from(torch.clone())));
    let st = write(
        "model.safetensors",
        &safetensors_of(&[
            ("a.inv_freq", safetensors::Dtype::F64, vec![4], le_bytes(&wide)),
            ("b.inv_freq", safetensors::Dtype::F32, vec![4], le_bytes(&torch)),
        ]),
    );
    let torch64: Vec<f64> = torch.iter().map(|&v| f64::from(v)).collect();
    let cases: Vec<(Vec<&str>, PeSpec)> = vec![
        (
            vec!["--dim", "8", "--inv-freq", &npy],
            PeSpec::new(8).unwrap().with_inv_freq(&torch64).unwrap(),
        ),
        (
            vec![
                "--variant",
                "fairseq",
                "--dim",
                "9",
                "--inv-freq",
                &st,
                "--inv-freq-tensor",
                "a.inv_freq",
            ],
            PeSpec::for_variant(Variant::Fairseq, 9).unwrap().with_inv_freq(&wide).unwrap(),
        ),
        (
            vec![
                "--variant",
                "marian",
                "--dim",
                "7",
                "--inv-freq",
                &st,
                "--inv-freq-tensor",
                "b.inv_freq",
                "--frequencies",
                "f32",
                "--start-index",
                "4294967290",
            ],
            PeSpec::for_variant(Variant::Marian, 7)
                .unwrap()
                .with_inv_freq(&torch64)
                .unwrap()
                .with_frequencies(Frequencies::F32)
                .with_start_index(u32::MAX - 5),
        ),
    ];
    let positions = [0u32, 1, 2, 3, 1 << 24, u32::MAX];
    let gpu = gpu_available("inv_freq_reaches_the_table_on_every_device");
    for (args, spec) in &cases {
        let want = cpu::table(spec, &positions);
        let reference = reference::table_f32(spec, &positions);
        for device in ["cpu", "gpu", "reference"] {
            if device == "gpu" && !gpu {
                continue;
            }
            let out = dir.path().join(format!("{device}.npy")).to_str().unwrap().to_string();
            let mut full =
                vec!["table", "--device", device, "--positions", "0..4,16777216,4294967295"];
            full.extend_from_slice(args);
            full.extend(["--format", "npy", "-o", &out]);
            let run = posenc(&full);
            assert_ok(&run, &format!("{args:?} on {device}"));
            let expected = if device == "reference" { &reference } else { &want };
            assert_eq!(fs::read(&out).unwrap(), npy_bytes(expected), "{args:?} on {device}");
        }
    }
    let short = write("short.npy", &npy_bytes(&ndarray::Array1::from(vec![1.0f32; 3])));
    let zero = write("zero.npy", &npy_bytes(&ndarray::Array1::from(vec![1.0f64, 0.0, 0.5, 0.25])));
    for (args, needle) in [
        (vec!["--dim", "8", "--inv-freq", &short], "inv_freq holds 3 values, but 4 are needed"),
        (vec!["--dim", "8", "--inv-freq", &zero], "invalid inv_freq: 0 at index 1"),
        (vec!["--dim", "8", "--inv-freq", &st], "2 1-D tensors and none named"),
        (vec!["--dim", "8", "--inv-freq", &npy, "--base", "500"], "cannot be used with"),
        (vec!["--dim", "8", "--inv-freq-tensor", "x"], "--inv-freq"),
        (
            vec!["--dim", "8", "--inv-freq", &npy, "--inv-freq-tensor", "x"],
            "invalid inv_freq_tensor: x (allowed: --inv-freq-tensor only with a .safetensors \
             --inv-freq (a .npy holds one array))",
        ),
    ] {
        let run = posenc(&[&["table", "--device", "cpu"][..], &args].concat());
        assert_rejected(&run, &args, needle);
    }
}
