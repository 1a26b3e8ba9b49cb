//! `posenc bench` as a user meets it: presets and their overrides, the suite's JSON and
//! table, the checkpoint load, the copy-call ceiling, agreement in every output type, the
//! chart, and sizes refused in one line before anything is allocated. Shapes are shrunk
//! (`--batch`, `--len`, `--vocab` override every preset's) and runs are one round, so each
//! command takes a second or two; no timing is asserted.

use crate::support::Png;
use crate::support::cli::{Dir, assert_ok, gpu_available, posenc, posenc_env, posenc_lines};
use posenc::bench::PRESETS;
use serde_json::Value;

/// Arguments that shrink every preset to a few tokens and a 64-row vocabulary, one round.
const TINY: [&str; 8] = ["--batch", "2", "--len", "3", "--vocab", "64", "--repeats", "1"];

fn json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

fn names(report: &Value) -> Vec<String> {
    let results = report["results"].as_array().unwrap();
    results.iter().map(|r| r["name"].as_str().unwrap().to_string()).collect()
}

/// The item `name` of `report`.
fn item<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {report}"))
}

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

/// Every item's ceiling is the one the docs name for it, and every ceiling names itself.
fn check_ceilings(report: &Value) {
    for r in report["results"].as_array().unwrap() {
        let name = r["name"].as_str().unwrap();
        let want = match name {
            "cpu_encode" | "cpu_encode_cold" | "cpu_table" => "cpu_copy_ceiling",
            "gpu_encode" | "gpu_encode_cold" | "gpu_table" | "gpu_readback" => "gpu_copy_ceiling",
            "gpu_encode_call" | "gpu_encode_host" | "gpu_encode_stream" | "gpu_encode_submit"
            | "gpu_encode_mapped" => "gpu_copy_ceiling_call",
            "gpu_copy_driver" | "gpu_rope" | "gpu_alibi" | "gpu_decode_step" => "gpu_copy_ceiling",
            "gpu_encode_steps"
            | "gpu_encode_bounded_steps"
            | "gpu_rope_steps"
            | "gpu_alibi_steps"
            | "gpu_decode_step_steps"
            | "gpu_step_encode_steps"
            | "gpu_step_rope_steps"
            | "gpu_step_encode_bounded_steps"
            | "gpu_decode_step_bounded_steps" => "gpu_copy_steps",
            "cpu_rope" | "cpu_alibi" => "cpu_copy_ceiling",
            "cpu_load" => "cpu_read_ceiling",
            ceiling => ceiling,
        };
        assert_eq!(r["ceiling"], want, "{r}");
        assert!(r["median_s"].as_f64().unwrap() > 0.0, "{r}");
        // The host's part of a call moves no bytes in its time: a time alone.
        if name == "gpu_encode_submit" {
            assert!(r["gbps"].is_null() && r["ratio"].is_null(), "{r}");
            assert!(r["ceiling_gbps"].is_null(), "{r}");
            continue;
        }
        let ceiling = item(report, want);
        assert_eq!(r["ceiling_gbps"], ceiling["gbps"], "{r}");
        for key in ["gbps", "ceiling_gbps", "ratio"] {
            assert!(r[key].as_f64().unwrap() > 0.0, "{r}");
        }
        // Steps-mode items say how many steps, and how many floors a step costs.
        if name.ends_with("_steps") || name == "gpu_dispatch_floor" {
            assert!(r["steps"].as_u64().unwrap() >= 1, "{r}");
        }
        if name.ends_with("_steps") {
            assert!(r["per_floor"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
}

#[test]
fn a_preset_sets_the_shape_and_types_and_flags_override_it() {
    let dir = Dir::new();
    let tmp = dir.out("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let args = ["bench", "--model", "llama3-8b", "--device", "cpu", "--json"];
    let out = posenc_env(&[&args[..], &TINY].concat(), &[("TMPDIR", &tmp)]);
    assert_ok(&out, "bench --model");
    let report = json(&out);
    assert_eq!(report["model"], "llama3-8b");
    let sizes = &report["sizes"];
    assert_eq!(
        (&sizes["batch"], &sizes["len"], &sizes["vocab"]),
        (&2.into(), &3.into(), &64.into())
    );
    assert_eq!(sizes["dim"], 4096, "the preset's, not overridden");
    assert_eq!((&sizes["dtype"], &sizes["out_dtype"]), (&"bf16".into(), &"f32".into()));
    // The checkpoint load is on with a preset, and its file is gone afterwards.
    let items = names(&report);
    assert!(items.contains(&"cpu_load".to_string()), "{items:?}");
    assert!(sizes["checkpoint_bytes"].as_u64().unwrap() > 64 * 4096 * 2, "{sizes}");
    assert_eq!(crate::support::cli::files_in(std::path::Path::new(&tmp)), Vec::<String>::new());
    check_ceilings(&report);

    let args = ["bench", "--model", "llama3-8b", "--out-dtype", "bf16", "--load=false"];
    let out = posenc(&[&args[..], &TINY, &["--device", "cpu", "--json"]].concat());
    assert_ok(&out, "bench --model --out-dtype --load=false");
    let report = json(&out);
    assert_eq!(
        (&report["sizes"]["dtype"], &report["sizes"]["out_dtype"]),
        (&"bf16".into(), &"bf16".into())
    );
    assert!(report.get("model").is_some());
    assert!(report["sizes"]["checkpoint_bytes"].is_null());
    assert!(!names(&report).contains(&"cpu_load".to_string()));
}

#[test]
fn explicit_shapes_load_only_when_asked_and_carry_no_model() {
    let base = ["bench", "--device", "cpu", "--dim", "16", "--json"];
    let out = posenc(&[&base[..], &TINY].concat());
    assert_ok(&out, "bench");
    let report = json(&out);
    assert!(report.get("model").is_none(), "{report}");
    assert_eq!(report["sizes"]["out_dtype"], "f32");
    assert!(!names(&report).contains(&"cpu_load".to_string()));

    let out =
        posenc(&[&base[..], &TINY, &["--load", "--dtype", "f16", "--out-dtype", "bf16"]].concat());
    assert_ok(&out, "bench --load");
    let report = json(&out);
    assert_eq!(
        (&report["sizes"]["dtype"], &report["sizes"]["out_dtype"]),
        (&"f16".into(), &"bf16".into())
    );
    assert_eq!(item(&report, "cpu_load")["ceiling"], "cpu_read_ceiling");
    check_ceilings(&report);
}

/// An operation preset's shape is fixed, but its tensors' type may be set: RoPE and decode
/// steps take --dtype (ALiBi, an f32 bias, only f32); a 16-bit ALiBi and every shape flag
/// are refused in one line. On a GPU a step in another type agrees with the CPU, and its
/// encode and RoPE are timed alone beside it.
#[test]
fn an_operation_preset_takes_a_type_and_refuses_shape_flags() {
    let typed = [
        ("llama2-13b-step", "bf16"),
        ("llama3-8b-rope-decode", "f32"),
        ("qwen2.5-vl-7b-rope", "f16"),
        ("bloom-7b1-alibi", "f32"),
    ];
    for (model, dtype) in typed {
        let args = ["bench", "--model", model, "--dtype", dtype, "--device", "cpu", "--json"];
        let out = posenc(&[&args[..], &["--repeats", "1"]].concat());
        assert_ok(&out, model);
        let report = json(&out);
        let shape = report["shape"].as_str().unwrap();
        assert!(shape.ends_with(dtype), "{model}: {shape}");
        check_ceilings(&report);
        // A decode step has no CPU item: the run says so rather than print an empty table.
        let notes = posenc_lines(&out);
        let step = model.ends_with("-step");
        assert_eq!(notes.iter().any(|l| l.contains("times nothing")), step, "{model}: {notes:?}");
    }
    if gpu_available("an_operation_preset_takes_a_type_and_refuses_shape_flags") {
        let args = ["bench", "--model", "llama2-13b-step", "--dtype", "bf16", "--device", "gpu"];
        let out = posenc(&[&args[..], &["--repeats", "1", "--steps", "2", "--json"]].concat());
        assert_ok(&out, "a bf16 llama2-13b-step");
        let report = json(&out);
        assert_eq!(report["agree"], true, "{report}");
        for part in [
            "gpu_step_encode_steps",
            "gpu_step_rope_steps",
            "gpu_step_encode_bounded_steps",
            "gpu_decode_step_bounded_steps",
        ] {
            assert_eq!(item(&report, part)["steps"], 2, "{report}");
        }
        check_ceilings(&report);
    }
    let cases: [(&[&str], &[&str]); 3] = [
        (&["--model", "bloom-7b1-alibi", "--dtype", "f16"], &["bloom-7b1-alibi", "f16", "f32"]),
        (&["--model", "llama3-8b-step", "--dim", "64"], &["llama3-8b-step", "--dim"]),
        (&["--model", "phi-2-rope", "--out-dtype", "f16"], &["phi-2-rope", "--out-dtype"]),
    ];
    for (args, words) in cases {
        let out = posenc(&[&["bench"][..], args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let lines = posenc_lines(&out);
        assert_eq!(lines.len(), 1, "{args:?}: {lines:?}");
        for word in words {
            assert!(lines[0].contains(word), "{args:?}: {word} not in {}", lines[0]);
        }
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// A report with CPU items names the form of its copy ceiling, one of the three tried.
fn assert_copy_form(report: &serde_json::Value) {
    let form = report["cpu_ceiling_method"].as_str().unwrap_or_else(|| panic!("{report}"));
    assert!(["serial", "1MiB-chunks", "split"].contains(&form), "{form}");
}

#[test]
fn the_suite_prints_one_bench_object_per_preset() {
    let out = posenc(&[&["bench", "--suite", "--device", "cpu", "--json"][..], &TINY].concat());
    assert_ok(&out, "bench --suite --json");
    let suite = json(&out);
    // Without a GPU: the encode presets and the operations' CPU items, no device report.
    assert_eq!(keys(&suite), ["ops", "suite"]);
    for op in suite["ops"].as_array().unwrap() {
        assert!(op["adapter"].is_null(), "{op}");
        check_ceilings(op);
        if op["op"] != "decode_step" {
            let cpu = format!("cpu_{}", op["op"].as_str().unwrap());
            assert_eq!(item(op, &cpu)["ceiling"], "cpu_copy_ceiling");
            assert_copy_form(op);
        }
    }
    let reports = suite["suite"].as_array().unwrap();
    assert_eq!(reports.len(), PRESETS.len());
    for report in reports {
        assert_copy_form(report);
    }
    // Exactly the single bench's object plus the model's name.
    let single = posenc(&[&["bench", "--device", "cpu", "--load", "--json"][..], &TINY].concat());
    assert_ok(&single, "bench --json");
    let mut single_keys = keys(&json(&single));
    single_keys.push("model".into());
    single_keys.sort();
    for (report, preset) in reports.iter().zip(PRESETS) {
        assert_eq!(keys(report), single_keys);
        assert_eq!(report["model"], preset.name);
        assert_eq!(report["sizes"]["dim"], preset.dim);
        assert_eq!(report["sizes"]["repeats"], 1);
        assert_eq!(names(report), names(&json(&single)), "{}", preset.name);
        check_ceilings(report);
    }

    let out =
        posenc(&[&["bench", "--suite", "--device", "cpu", "--load=false"][..], &TINY].concat());
    assert_ok(&out, "bench --suite");
    let table = String::from_utf8(out.stdout).unwrap();
    for line in table.lines() {
        assert!(line.len() <= 120, "{} columns: {line}", line.len());
    }
    for preset in PRESETS {
        let row =
            table.lines().find(|l| l.starts_with(preset.name)).unwrap_or_else(|| panic!("{table}"));
        assert!(row.contains(&format!("x{} ", preset.dim)), "{row}");
    }
}

#[test]
fn on_a_gpu_every_preset_agrees_and_the_call_is_measured_against_the_copy_call() {
    if !gpu_available("on_a_gpu_every_preset_agrees_and_the_call_is_measured_against_the_copy_call")
    {
        return;
    }
    let args = ["bench", "--suite", "--load=false", "--json", "--steps", "2"];
    let out = posenc(&[&args[..], &TINY].concat());
    assert_ok(&out, "bench --suite on the GPU");
    let suite = json(&out);
    assert_eq!(keys(&suite), ["device", "ops", "suite"]);
    for report in suite["suite"].as_array().unwrap() {
        assert_eq!(report["agree"], true, "{}", report["model"]);
        assert_eq!(item(report, "gpu_encode_call")["ceiling"], "gpu_copy_ceiling_call");
        assert_eq!(item(report, "gpu_encode_stream")["ceiling"], "gpu_copy_ceiling_call");
        assert_eq!(item(report, "gpu_encode")["ceiling"], "gpu_copy_ceiling");
        assert_eq!(item(report, "gpu_encode_steps")["steps"], 2);
        check_ceilings(report);
    }
    // RoPE, ALiBi and decode steps: checked against the CPU, bit for bit on every adapter
    // (the kernels round RoPE's products before their sums), then timed.
    let ops = suite["ops"].as_array().unwrap();
    assert_eq!(ops.len(), posenc::bench::ops::OpPreset::all().len());
    for op in ops {
        let name = op["op"].as_str().unwrap();
        assert_eq!(op["agree"], true, "{op}");
        for item_name in [format!("gpu_{name}"), format!("gpu_{name}_steps")] {
            assert!(item(op, &item_name)["median_s"].as_f64().unwrap() > 0.0, "{op}");
        }
        check_ceilings(op);
    }
    let device = &suite["device"];
    assert!(device["dispatch_in_pass_s"].as_f64().unwrap() > 0.0, "{device}");
    assert!(device["large_copy"].as_array().unwrap().iter().any(|c| c["method"] == "driver"));
    // A 16-bit output of an f32 table, and an odd number of 16-bit values.
    for out_dtype in ["f16", "bf16"] {
        let args = ["bench", "--dim", "6", "--out-dtype", out_dtype, "--json"];
        let out = posenc(&[&args[..], &TINY].concat());
        assert_ok(&out, out_dtype);
        assert_eq!(json(&out)["agree"], true, "{out_dtype}");
    }
}

#[test]
fn plot_writes_a_png_chart() {
    let dir = Dir::new();
    let path = dir.out("bench.png");
    let args = ["bench", "--suite", "--device", "cpu", "--load=false", "--plot", &path];
    let out = posenc(&[&args[..], &TINY].concat());
    assert_ok(&out, "bench --suite --plot");
    let png = Png::decode(&std::fs::read(&path).unwrap());
    assert!(png.width >= 720 && png.height >= 400, "{} x {}", png.width, png.height);
    assert_eq!(dir.files(), ["bench.png"], "no temporary file is left");
}

#[test]
fn sizes_and_repeats_past_the_caps_are_one_line_and_exit_2() {
    let cases: [(&[&str], &[&str]); 8] = [
        (
            &["--vocab", "16777216", "--dim", "65536"],
            &["4398046511104", "MAX_TABLE_BYTES", "4294967296"],
        ),
        (&["--len", "4294967295"], &["34359738360", "MAX_TOKENS", "16777216"]),
        (
            &["--batch", "4096", "--len", "4096", "--dim", "65536", "--vocab", "8"],
            &["MAX_OUTPUT_BYTES", "1073741824"],
        ),
        (&["--repeats", "18446744073709551615"], &["repeats", "18446744073709551615", "10000"]),
        (&["--model", "gpt-5"], &["gpt-5", "bert-base", "whisper-small"]),
        (&["--suite", "--vocab", "4294967296"], &["vocab", "4294967296"]),
        // The plain encode's steps too, not only the suite's and the operations'.
        (&["--steps", "0"], &["steps", "0", "1..=10000"]),
        (&["--steps", "10001"], &["steps", "10001", "1..=10000"]),
    ];
    for (args, words) in cases {
        let start = std::time::Instant::now();
        let out = posenc(&[&["bench", "--plot", "/nonexistent/dir/x.png"][..], args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let lines = posenc_lines(&out);
        assert_eq!(lines.len(), 1, "{args:?}: {lines:?}");
        for word in words {
            assert!(lines[0].contains(word), "{args:?}: {word} not in {}", lines[0]);
        }
        // Refused before anything was allocated or run.
        assert!(start.elapsed().as_secs_f64() < 5.0, "{args:?}");
    }
}

/// `--decode` builds its table in float32 on the host before uploading it: a table past
/// `bench::MAX_TABLE_BYTES` there is refused in one line before anything is allocated,
/// not an abort on a 256 GiB request (the run is held to 8 GB of address space, so a
/// regression fails here rather than paging the machine out).
#[test]
fn a_decode_table_past_the_cap_is_one_line_and_exit_2() {
    let cases: [(&[&str], &str); 2] = [
        (&["--vocab", "1048576", "--dim", "65536"], "274877906944"),
        (&["--vocab", "1048576", "--dim", "2048", "--dtype", "bf16"], "8589934592"),
    ];
    for (args, bytes) in cases {
        let start = std::time::Instant::now();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"ulimit -v 8000000 && exec "$0" "$@""#)
            .arg(env!("CARGO_BIN_EXE_posenc"))
            .args([&["bench", "--decode", "1", "--repeats", "1"][..], args].concat())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {:?} {stderr}", out.status);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
        for word in [bytes, "MAX_TABLE_BYTES", "4294967296"] {
            assert!(lines[0].contains(word), "{args:?}: {word} not in {}", lines[0]);
        }
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(start.elapsed().as_secs_f64() < 5.0, "{args:?}");
    }
}

/// `--decode STEPS` runs STEPS x (repeats + 1) steps of each of its two loops (the timed
/// loops and one warm-up): past `bench::decode::MAX_DECODE_TOTAL_STEPS` (2^18) it is
/// refused in one line naming that count and the limit, exit 2, before a GPU opens, rather
/// than running for hours (100000 steps x 10000 repeats would take weeks on lavapipe).
#[test]
fn decode_steps_past_the_cap_are_one_line_and_exit_2() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    let cases: [(&[&str], &str); 4] = [
        (&["--decode", "100000", "--repeats", "10000"], "1000100000"),
        (&["--decode", "100000", "--repeats", "2"], "300000"),
        (&["--decode", "65537", "--repeats", "3"], "262148"),
        // The default 5 repeats count too.
        (&["--decode", "50000"], "300000"),
    ];
    for (args, steps) in cases {
        let mut child = Command::new(env!("CARGO_BIN_EXE_posenc"))
            .arg("bench")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Refused at once; a run that started anyway is stopped, not left to go on.
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(10) {
                child.kill().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {:?}", out.status);
        let lines = posenc_lines(&out);
        assert_eq!(lines.len(), 1, "{args:?}: {lines:?}");
        for word in [steps, "bench::decode::MAX_DECODE_TOTAL_STEPS", "262144"] {
            assert!(lines[0].contains(word), "{args:?}: {word} not in {}", lines[0]);
        }
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// The decode loop's JSON reports the median of the runs it lists, by the definition the
/// other items use (the mean of the middle two for an even count, docs/performance.md),
/// and its ratio is the two medians' quotient. With an even `--repeats` the upper middle
/// run had been reported instead: a `gpu_decode_step` that is not the median of its own
/// `decode_runs`.
#[test]
fn decode_json_reports_the_median_of_its_own_runs() {
    if !gpu_available("decode_json_reports_the_median_of_its_own_runs") {
        return;
    }
    let median = |runs: &Value| {
        let mut v: Vec<f64> =
            runs.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n.is_multiple_of(2) { (v[n / 2 - 1] + v[n / 2]) / 2.0 } else { v[n / 2] }
    };
    for repeats in ["2", "3", "4"] {
        let shape = ["--dim", "64", "--vocab", "16", "--batch", "1", "--dtype", "f32"];
        let args = [&["bench", "--decode", "3", "--repeats", repeats, "--json"][..], &shape];
        let out = posenc(&args.concat());
        assert_ok(&out, "bench --decode --json");
        let report = json(&out);
        let (step, floor) = (&report["gpu_decode_step"], &report["gpu_dispatch_floor"]);
        let (step, floor) = (step.as_f64().unwrap(), floor.as_f64().unwrap());
        assert_eq!(report["decode_runs"].as_array().unwrap().len().to_string(), repeats);
        assert_eq!(step, median(&report["decode_runs"]), "--repeats {repeats}: {report}");
        assert_eq!(floor, median(&report["floor_runs"]), "--repeats {repeats}: {report}");
        assert_eq!(report["ratio_to_floor"].as_f64().unwrap(), step / floor, "{report}");
    }
}

/// Without an adapter the GPU's benches fail with one line that says what to do: an encode
/// or an operation with a CPU item points to `--device cpu`, a decode step (no CPU item:
/// `--device cpu` times nothing there, round twenty-five) to a GPU alone; a hint fitted to
/// `WGPU_BACKEND` is kept. The drivers are hidden as on a machine without them.
#[test]
fn without_an_adapter_the_hint_fits_the_preset() {
    let hidden = [
        ("VK_ICD_FILENAMES", "/nonexistent-posenc-test.json"),
        ("VK_DRIVER_FILES", "/nonexistent-posenc-test.json"),
        ("__EGL_VENDOR_LIBRARY_FILENAMES", "/nonexistent-posenc-test.json"),
    ];
    // WGPU_BACKEND always set: CI runs these tests under WGPU_BACKEND=gl too.
    for (model, backend, hint) in [
        ("bert-base", "vulkan,gl", "`posenc bench --device cpu` measures the CPU alone"),
        ("llama3-8b-rope", "vulkan", "`posenc bench --device cpu` measures the CPU alone"),
        ("llama3-8b-step", "vulkan", "a decode step is a recorded GPU pass, timed on a GPU alone"),
        ("bert-base", "gl", "Mesa's EGL and software GL drivers"),
        ("llama3-8b-step", "gl", "Mesa's EGL and software GL drivers"),
    ] {
        let mut env = hidden.to_vec();
        env.push(("WGPU_BACKEND", backend));
        let out = posenc_env(&["bench", "--model", model, "--device", "gpu"], &env);
        assert_eq!(out.status.code(), Some(1), "{model}");
        let lines = posenc_lines(&out);
        assert_eq!(lines.len(), 1, "{model}: {lines:?}");
        assert!(lines[0].starts_with("posenc: no GPU adapter found"), "{}", lines[0]);
        assert!(lines[0].contains(hint), "{model}: {}", lines[0]);
        assert!(out.stdout.is_empty(), "{model}");
    }
}
