//! `posenc rope` as a user meets it: tensors of every dtype and layout from .npy, positions
//! from .npy or an offset, scaling JSON inline or from a file, outputs bit-identical to the
//! library, and every bad input refused with exit status 2, one line on stderr and no
//! output file touched.

use std::fs;

use crate::support::cli::{
    Dir, assert_ok, assert_rejected, gpu_available, posenc, posenc_env, posenc_lines, s, stderr,
};
use crate::support::rope::tensor;
use crate::support::{le_bytes, npy_bytes, raw_npy, safetensors_of};
use half::{bf16, f16};
use ndarray::{Array2, Array4, array};
use posenc::rope::{Element, Layout, Pairing, RopeSpec, Scaling};
use posenc::{cpu, npy, positions};
use safetensors::Dtype as StDtype;

const LLAMA3: &str = concat!(
    r#"{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "#,
    r#""original_max_position_embeddings": 8192}"#
);

fn layout_arg(layout: Layout) -> &'static str {
    match layout {
        Layout::Blhd => "blhd",
        Layout::Bhld => "bhld",
    }
}

/// Runs `posenc rope` on `x` and checks the output file against the CPU library call.
#[allow(clippy::too_many_arguments)]
fn check_cpu<T: Element + npy::Element>(
    dir: &Dir,
    name: &str,
    x: &Array4<T>,
    layout: Layout,
    spec: &RopeSpec,
    positions: &Array2<u32>,
    extra: &[&str],
) {
    let input = dir.npy(&format!("{name}.in.npy"), x);
    let out = dir.out(&format!("{name}.out.npy"));
    let args = ["rope", "--input", &input, "--layout", layout_arg(layout), "--device", "cpu"];
    let run = posenc(&[&args[..], extra, &["-o", &out]].concat());
    assert_ok(&run, name);
    assert!(run.stderr.is_empty(), "{name}: {}", stderr(&run));
    let want = cpu::rope(spec, x.view(), positions.view(), layout).unwrap();
    assert_eq!(fs::read(&out).unwrap(), npy_bytes(&want), "{name}");
}

#[test]
fn every_dtype_and_layout_matches_the_library_bit_for_bit() {
    let dir = Dir::new();
    let scaling = Scaling::from_hf_json(LLAMA3).unwrap();
    let spec =
        RopeSpec::new(16).unwrap().with_base(500000.0).unwrap().with_scaling(scaling).unwrap();
    let p = positions::contiguous_batch(2, 3).unwrap();
    let extra = ["--base", "500000", "--scaling", LLAMA3];
    for layout in [Layout::Blhd, Layout::Bhld] {
        let shape = match layout {
            Layout::Blhd => [2, 3, 4, 16],
            Layout::Bhld => [2, 4, 3, 16],
        };
        let l = layout_arg(layout);
        check_cpu(&dir, &format!("f32-{l}"), &tensor::<f32>(shape, 1), layout, &spec, &p, &extra);
        check_cpu(&dir, &format!("f16-{l}"), &tensor::<f16>(shape, 2), layout, &spec, &p, &extra);
        // bf16 travels as '<u2' raw bits both ways.
        check_cpu(&dir, &format!("bf16-{l}"), &tensor::<bf16>(shape, 3), layout, &spec, &p, &extra);
    }
    let bits = fs::read(dir.path("bf16-blhd.out.npy")).unwrap();
    assert!(String::from_utf8_lossy(&bits[..80]).contains("'descr': '<u2'"));
}

#[test]
fn pairing_rotary_dim_positions_offsets_and_scaling_files() {
    let dir = Dir::new();
    let x = tensor::<f32>([2, 3, 2, 10], 4);
    let yarn = r#"{"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}"#;
    let spec = RopeSpec::partial(10, 6)
        .unwrap()
        .with_pairing(Pairing::Gptj)
        .with_scaling(Scaling::from_hf_json(yarn).unwrap())
        .unwrap();
    let scaling_file = dir.bytes("yarn.json", yarn.as_bytes());
    let at_file = format!("@{scaling_file}");
    let base = ["--pairing", "gptj", "--rotary-dim", "6"];

    // --offset: every sequence counts from N.
    let p = positions::from_offsets(&[4_000_000_000, 4_000_000_000], 3).unwrap();
    let args = [&base[..], &["--offset", "4000000000", "--scaling", yarn]].concat();
    check_cpu(&dir, "offset", &x, Layout::Blhd, &spec, &p, &args);
    // The default is --offset 0; the scaling may come from a file.
    let p0 = positions::contiguous_batch(2, 3).unwrap();
    let args = [&base[..], &["--scaling", &at_file]].concat();
    check_cpu(&dir, "default", &x, Layout::Blhd, &spec, &p0, &args);
    // --positions as uint32, int32 and int64.
    let p = array![[7u32, 1 << 24, (1 << 31) + 5], [u32::MAX, 0, 3]];
    let u = dir.npy("p_u32.npy", &p);
    check_cpu(
        &dir,
        "p_u32",
        &x,
        Layout::Blhd,
        &spec,
        &p,
        &[&base[..], &["--scaling", yarn, "--positions", &u]].concat(),
    );
    let small = array![[7u32, 100, 5], [9, 0, 3]];
    let i = dir.npy("p_i32.npy", &small.mapv(|v| v as i32));
    check_cpu(
        &dir,
        "p_i32",
        &x,
        Layout::Blhd,
        &spec,
        &small,
        &[&base[..], &["--scaling", yarn, "--positions", &i]].concat(),
    );
    let l = dir.npy("p_i64.npy", &p.mapv(i64::from));
    check_cpu(
        &dir,
        "p_i64",
        &x,
        Layout::Blhd,
        &spec,
        &p,
        &[&base[..], &["--scaling", yarn, "--positions", &l]].concat(),
    );
}

#[test]
fn gpu_and_auto_devices_write_what_the_library_computes() {
    if !gpu_available("gpu_and_auto_devices_write_what_the_library_computes") {
        return;
    }
    let dir = Dir::new();
    let x = tensor::<bf16>([1, 5, 3, 8], 5);
    let input = dir.npy("x.npy", &x);
    let spec = RopeSpec::new(8).unwrap();
    let p = positions::from_offsets(&[12345], 5).unwrap();
    let ctx = posenc::gpu::Options::from_env().and_then(|o| posenc::gpu::Context::new(&o)).unwrap();
    let want = npy_bytes(&ctx.rope(&spec, x.view(), p.view(), Layout::Blhd).unwrap());
    for device in ["gpu", "auto"] {
        let out = dir.out(&format!("{device}.npy"));
        let run = posenc(&[
            "rope", "--input", &input, "--layout", "blhd", "--offset", "12345", "--device", device,
            "-o", &out,
        ]);
        assert_ok(&run, device);
        assert!(posenc_lines(&run).is_empty(), "{device}: {}", stderr(&run));
        assert_eq!(fs::read(&out).unwrap(), want, "{device}");
    }
}

#[test]
fn bad_input_exits_2_with_one_line_and_touches_no_output() {
    let dir = Dir::new();
    let x = dir.npy("x.npy", &tensor::<f32>([1, 2, 3, 8], 6));
    let odd = dir.npy("odd.npy", &tensor::<f32>([1, 2, 3, 5], 6));
    let f64_input = dir.bytes("f64.npy", &raw_npy("<f8", "(1, 1, 1, 2)", &[0; 16]));
    let rank3 = dir.npy("rank3.npy", &ndarray::Array3::<f32>::zeros((2, 3, 8)));
    let garbage = dir.bytes("garbage.npy", b"not an npy file at all");
    let p_shape = dir.npy("p_shape.npy", &Array2::<u32>::zeros((1, 3)));
    let p_negative = dir.npy("p_neg.npy", &array![[0i64, -3]]);
    let p_huge = dir.npy("p_huge.npy", &array![[0i64, 1 << 32]]);
    let p_float = dir.npy("p_float.npy", &Array2::<f32>::zeros((1, 2)));
    let bad_json = dir.bytes("bad.json", b"{\"rope_type\": \"linear\", \"factor\": ");
    let long = concat!(
        r#"{"rope_type": "longrope", "short_factor": [1, 1, 1], "long_factor": [1, 1, 1], "#,
        r#""factor": 4, "original_max_position_embeddings": 64}"#
    );
    let missing = s(&dir.path("missing.npy"));
    let at_missing = format!("@{}", s(&dir.path("missing.json")));
    let at_bad = format!("@{bad_json}");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--input", &x, "--scaling", "{\"rope_type\": \"linear\""], "invalid (json)"),
        (
            vec!["--input", &x, "--scaling", r#"{"rope_type": "ntk"}"#],
            "one of default, linear, dynamic, yarn, longrope, llama3",
        ),
        (
            vec!["--input", &x, "--scaling", r#"{"type": "linear", "factor": -2}"#],
            "invalid factor: -2",
        ),
        (
            vec!["--input", &x, "--scaling", r#"{"rope_type": "linear", "factor": 1e999}"#],
            "invalid (json)",
        ),
        (
            vec!["--input", &x, "--scaling", r#"{"rope_type": "llama3", "factor": 8}"#],
            "invalid low_freq_factor: missing",
        ),
        (
            vec![
                "--input",
                &x,
                "--scaling",
                r#"{"rope_type": "linear", "factor": 2, "rope_theta": 5}"#,
            ],
            "invalid rope_theta",
        ),
        (
            vec!["--input", &x, "--scaling", long],
            "invalid short_factor: 3 numbers (allowed: 4 numbers",
        ),
        (vec!["--input", &x, "--scaling", &at_missing], "missing.json"),
        (vec!["--input", &x, "--scaling", &at_bad], "invalid (json)"),
        (vec!["--input", &missing], "missing.npy"),
        (vec!["--input", &garbage], "not a valid .npy file"),
        (vec!["--input", &f64_input], "input has dtype '<f8'; allowed: '<f4', '<f2' or '<u2'"),
        (vec!["--input", &rank3], "input must have rank 4, got shape (2, 3, 8)"),
        (vec!["--input", &odd], "invalid head_dim: 5 (the last axis of"),
        (vec!["--input", &x, "--rotary-dim", "10"], "invalid rotary_dim: 10 (head_dim 8"),
        (vec!["--input", &x, "--rotary-dim", "3"], "invalid rotary_dim: 3"),
        (vec!["--input", &x, "--base", "1"], "invalid base: 1"),
        (vec!["--input", &x, "--base", "nan"], "invalid base: NaN"),
        (vec!["--input", &x, "--base", "1e309"], "1e309 is beyond float64's range"),
        (
            vec!["--input", &x, "--positions", &p_shape],
            "positions ([batch, len] of the input): expected [1, 2], got [1, 3]",
        ),
        (vec!["--input", &x, "--positions", &p_negative], "invalid positions: -3 at [0, 1]"),
        (vec!["--input", &x, "--positions", &p_huge], "invalid positions: 4294967296 at [0, 1]"),
        (vec!["--input", &x, "--positions", &p_float], "positions has dtype '<f4'"),
        (vec!["--input", &x, "--offset", "4294967295"], "invalid offset: 4294967295 with 2 tokens"),
        (vec!["--input", &x, "--offset", "-1"], "invalid value '-1' for '--offset <N>'"),
        (vec!["--input", &x, "--offset", "1", "--positions", &p_shape], "cannot be used with"),
        (vec!["--input", &x, "--pairing", "rotate"], "invalid value 'rotate'"),
    ];
    let out = dir.out("out.npy");
    fs::write(&out, b"previous").unwrap();
    let before = dir.files();
    for (args, needle) in cases {
        let run = posenc(
            &[&["rope", "--layout", "blhd", "--device", "cpu"][..], &args, &["-o", &out]].concat(),
        );
        let what = format!("{args:?}");
        assert_eq!(run.status.code(), Some(2), "{what}: {}", stderr(&run));
        let err = stderr(&run);
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
        assert!(err.starts_with("posenc: "), "{what}: {err}");
        assert!(err.contains(needle), "{what}: {err}");
        assert_eq!(fs::read(&out).unwrap(), b"previous", "{what}: output touched");
        assert_eq!(dir.files(), before, "{what}: files created");
    }
    // A missing --layout is clap's to report, also with status 2.
    let run = posenc(&["rope", "--input", &x, "-o", &out]);
    assert_eq!(run.status.code(), Some(2));
    assert!(stderr(&run).contains("--layout"), "{}", stderr(&run));
}

#[test]
fn runtime_failures_exit_1_and_leave_no_file() {
    let dir = Dir::new();
    let x = dir.npy("x.npy", &tensor::<f16>([1, 2, 1, 4], 7));
    let nowhere = s(&dir.path("no/such/dir/out.npy"));
    let run =
        posenc(&["rope", "--input", &x, "--layout", "bhld", "--device", "cpu", "-o", &nowhere]);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert!(stderr(&run).contains("no/such/dir"), "{}", stderr(&run));
    // No adapter matches: --device gpu fails while running, --device auto falls back.
    let env = [("WGPU_ADAPTER_NAME", "no adapter has this name")];
    let out = dir.out("out.npy");
    let run = posenc_env(
        &["rope", "--input", &x, "--layout", "bhld", "--device", "gpu", "-o", &out],
        &env,
    );
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert!(posenc_lines(&run)[0].contains("no GPU adapter"), "{}", stderr(&run));
    assert!(!dir.path("out.npy").exists());
    let run = posenc_env(
        &["rope", "--input", &x, "--layout", "bhld", "--device", "auto", "-o", &out],
        &env,
    );
    assert_ok(&run, "auto without an adapter");
    assert!(
        posenc_lines(&run)[0].starts_with("posenc: note: computing on the CPU"),
        "{}",
        stderr(&run)
    );
    let spec = RopeSpec::new(4).unwrap();
    let want = cpu::rope(
        &spec,
        tensor::<f16>([1, 2, 1, 4], 7).view(),
        positions::contiguous_batch(1, 1).unwrap().view(),
        Layout::Bhld,
    )
    .unwrap();
    assert_eq!(fs::read(&out).unwrap(), npy_bytes(&want));
}

#[test]
fn seq_len_fixes_the_length_dynamic_scaling_sees() {
    let dir = Dir::new();
    let x = tensor::<f32>([1, 5, 2, 16], 12);
    let dynamic = r#"{"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": 100}"#;
    let spec = RopeSpec::new(16).unwrap().with_scaling(Scaling::from_hf_json(dynamic).unwrap());
    let spec = spec.unwrap();
    let p = positions::contiguous_batch(1, 5).unwrap();
    // Without --seq-len: this call's largest position plus one; with it: the fixed length.
    check_cpu(&dir, "per_call", &x, Layout::Blhd, &spec, &p, &["--scaling", dynamic]);
    let kept = spec.clone().with_seq_len(400).unwrap();
    let args = ["--scaling", dynamic, "--seq-len", "400"];
    check_cpu(&dir, "kept", &x, Layout::Blhd, &kept, &p, &args);
    assert_ne!(
        fs::read(dir.out("per_call.out.npy")).unwrap(),
        fs::read(dir.out("kept.out.npy")).unwrap()
    );
    let input = dir.npy("x.npy", &x);
    let out = dir.out("bad.npy");
    for (value, needle) in
        [("0", "invalid seq_len: 0"), ("4294967297", "invalid seq_len: 4294967297"), ("-5", "-5")]
    {
        let run = posenc(&[
            "rope",
            "--input",
            &input,
            "--layout",
            "blhd",
            "--device",
            "cpu",
            "--seq-len",
            value,
            "-o",
            &out,
        ]);
        assert_eq!(run.status.code(), Some(2), "{value}: {}", stderr(&run));
        let err = stderr(&run);
        assert!(err.lines().count() == 1 && err.contains(needle), "{value}: {err}");
        assert!(!dir.path("bad.npy").exists());
    }
}

/// `--seq-len` changes only what `dynamic` and `longrope` compute: beside any other scheme
/// (none, linear, llama3, yarn, a config's) it would be silently unused, so `rope` and
/// `rope-cache` refuse it in one line naming the scheme, as `--inv-freq` refuses it.
#[test]
fn seq_len_beside_a_scheme_that_ignores_it_is_refused() {
    let dir = Dir::new();
    let input = dir.npy("x.npy", &tensor::<f32>([1, 5, 2, 16], 12));
    let linear = r#"{"rope_type": "linear", "factor": 2.0}"#;
    let llama3 = r#"{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}"#;
    for (scaling, rope_type) in
        [(None, "default"), (Some(linear), "linear"), (Some(llama3), "llama3")]
    {
        let scaling: Vec<&str> = scaling.map(|s| vec!["--scaling", s]).unwrap_or_default();
        let rope = [&["rope", "--input", &input, "--layout", "blhd", "--device", "cpu"][..]];
        let cache = [&["rope-cache", "--head-dim", "16", "--len", "5", "--device", "cpu"][..]];
        for (command, out) in [(rope, dir.out("r.npy")), (cache, dir.out("c.safetensors"))] {
            let args = [command[0], &scaling, &["--seq-len", "400", "-o", &out]].concat();
            let run = posenc(&args);
            let err = stderr(&run);
            assert_eq!(run.status.code(), Some(2), "{args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            for needle in ["invalid seq_len: 400", rope_type, "dynamic or longrope"] {
                assert!(err.contains(needle), "{args:?}: {needle} not in {err}");
            }
            assert_eq!(dir.files(), ["x.npy"], "{args:?}: nothing written");
        }
    }
}

/// `posenc rope-cache`: safetensors with cos, sin and inv_freq as the library computes them
/// (in every dtype, converted round-to-nearest-even from f32), the same bytes on the CPU and
/// the GPU, `.npy` as [2, positions, rotary_dim], and bad requests refused with one line.
#[test]
fn rope_cache_writes_the_librarys_cache_in_every_format() {
    use safetensors::SafeTensors;
    use safetensors::tensor::Dtype as St;
    let dir = Dir::new();
    let llama3 = Scaling::from_hf_json(LLAMA3).unwrap();
    let spec = RopeSpec::partial(64, 32)
        .unwrap()
        .with_base(500000.0)
        .unwrap()
        .with_pairing(Pairing::Gptj)
        .with_scaling(llama3)
        .unwrap();
    let positions: Vec<u32> = (0..40).chain([1 << 20, u32::MAX]).collect();
    let want = cpu::rope_cache(&spec, &positions).unwrap();
    let base = [
        "rope-cache",
        "--head-dim",
        "64",
        "--rotary-dim",
        "32",
        "--base",
        "500000",
        "--pairing",
        "gptj",
        "--scaling",
        LLAMA3,
        "--positions",
        "0..40,1048576,4294967295",
    ];
    let le_f32 =
        |a: &ndarray::Array2<f32>| -> Vec<u8> { a.iter().flat_map(|v| v.to_le_bytes()).collect() };
    for (dtype, st) in [("f32", St::F32), ("f16", St::F16), ("bf16", St::BF16)] {
        let out = dir.out(&format!("cache_{dtype}.safetensors"));
        let run = posenc(&[&base[..], &["--dtype", dtype, "--device", "cpu", "-o", &out]].concat());
        assert_ok(&run, dtype);
        let bytes = fs::read(&out).unwrap();
        let file = SafeTensors::deserialize(&bytes).unwrap();
        let expect = |a: &ndarray::Array2<f32>| -> Vec<u8> {
            match dtype {
                "f32" => le_f32(a),
                "f16" => a.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect(),
                _ => a.iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect(),
            }
        };
        for (name, table) in [("cos", &want.cos), ("sin", &want.sin)] {
            let t = file.tensor(name).unwrap();
            assert_eq!((t.dtype(), t.shape()), (st, &[positions.len(), 32][..]), "{dtype} {name}");
            assert_eq!(t.data(), &expect(table)[..], "{dtype} {name}");
        }
        let inv = file.tensor("inv_freq").unwrap();
        assert_eq!((inv.dtype(), inv.shape()), (St::F32, &[16][..]));
        let inv_want: Vec<u8> = want.inv_freq.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(inv.data(), &inv_want[..]);
        let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
        let meta = meta.metadata().as_ref().unwrap();
        assert_eq!(meta["attention_factor"], want.attention_factor.to_string());
        assert_eq!(meta["pairing"], "gptj");
        // The GPU writes the same bytes (or, without an adapter, auto falls back to the CPU).
        if dtype == "f32" && gpu_available("rope-cache on the GPU") {
            let gpu_out = dir.out("cache_gpu.safetensors");
            let run = posenc(&[&base[..], &["--device", "gpu", "-o", &gpu_out]].concat());
            assert_ok(&run, "gpu");
            assert_eq!(fs::read(&gpu_out).unwrap(), bytes, "gpu bytes");
        }
    }
    // npy: [2, positions, rotary_dim], cos then sin.
    let out = dir.out("cache.npy");
    assert_ok(
        &posenc(&[&base[..], &["--format", "npy", "--device", "cpu", "-o", &out]].concat()),
        "npy",
    );
    let stacked = ndarray::stack(ndarray::Axis(0), &[want.cos.view(), want.sin.view()]).unwrap();
    assert_eq!(fs::read(&out).unwrap(), npy_bytes(&stacked));

    // Refused before any work: one line, exit 2, no file.
    let bad = dir.out("bad.safetensors");
    for (args, needle) in [
        (
            vec!["--head-dim", "7", "--len", "4"],
            "invalid head_dim: 7 (--head-dim) (allowed: an even",
        ),
        (
            vec!["--head-dim", "7", "--rotary-dim", "5", "--len", "4"],
            "invalid rotary_dim: 5 (head_dim 7",
        ),
        (vec!["--head-dim", "0", "--len", "4"], "invalid head_dim: 0 (--head-dim)"),
        (vec!["--head-dim", "8"], "--len <N>|--positions <SPEC>"),
        (vec!["--head-dim", "8", "--len", "4", "--positions", "1"], "cannot be used with"),
        (vec!["--head-dim", "4096", "--len", "1000000"], "more than 2147483648 values"),
        (vec!["--head-dim", "8", "--positions", "5..2"], "runs backwards"),
        (vec!["--head-dim", "8", "--len", "4", "--seq-len", "0"], "invalid seq_len: 0"),
        (vec!["--head-dim", "8", "--len", "4", "--dtype", "f64"], "invalid value 'f64'"),
    ] {
        let run = posenc(&[&["rope-cache"][..], &args, &["-o", &bad]].concat());
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.lines().count() == 1 && err.contains(needle), "{args:?}: {err}");
        assert!(!dir.path("bad.safetensors").exists(), "{args:?}");
    }
}

fn config(name: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/configs");
    s(&dir.join(name))
}

/// The explicit flags that say what each published config (tests/corpus/configs/) says.
fn config_cases(dir: &Dir) -> Vec<(&'static str, Option<&'static str>, usize, Vec<String>)> {
    let text = fs::read_to_string(config("phi-3-mini-128k-instruct.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let phi3 = serde_json::json!({
        "rope_type": "longrope",
        "short_factor": v["rope_scaling"]["short_factor"],
        "long_factor": v["rope_scaling"]["long_factor"],
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
    });
    let phi3 = format!("@{}", dir.bytes("phi3-scaling.json", phi3.to_string().as_bytes()));
    let llama3 = ["--base", "500000", "--scaling", LLAMA3].map(String::from).to_vec();
    let strings = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let linear8 = r#"{"rope_type": "linear", "factor": 8.0}"#;
    let yarn4 = r#"{"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}"#;
    let deepseek = concat!(
        r#"{"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "#,
        r#""mscale": 1.0, "mscale_all_dim": 1.0}"#
    );
    vec![
        ("llama-3.1-8b.json", None, 128, llama3.clone()),
        ("llama-3.1-8b.transformers5.json", None, 128, llama3),
        ("qwen2.5-7b-instruct.json", None, 128, strings(&["--base", "1000000"])),
        (
            "qwen2.5-7b-instruct.yarn.json",
            None,
            128,
            strings(&["--base", "1000000", "--scaling", yarn4]),
        ),
        ("phi-3-mini-128k-instruct.json", None, 96, vec!["--scaling".into(), phi3]),
        ("deepseek-v3.json", None, 64, strings(&["--pairing", "gptj", "--scaling", deepseek])),
        ("gpt-neox-20b.json", None, 96, strings(&["--rotary-dim", "24"])),
        ("phi-2.json", None, 80, strings(&["--rotary-dim", "32"])),
        ("gpt-j-6b.json", None, 256, strings(&["--rotary-dim", "64", "--pairing", "gptj"])),
        (
            "gemma-3-4b-it.transformers5.json",
            Some("full_attention"),
            256,
            strings(&["--base", "1000000", "--scaling", linear8]),
        ),
        ("gemma-3-4b-it.transformers5.json", Some("sliding_attention"), 256, vec![]),
        (
            "gemma-3-4b-it.json",
            Some("full_attention"),
            256,
            strings(&["--base", "1000000", "--scaling", linear8]),
        ),
        ("gemma-3-4b-it.json", Some("sliding_attention"), 256, vec![]),
        (
            "gemma-4-e2b-it.json",
            Some("full_attention"),
            512,
            strings(&[
                "--base",
                "1000000",
                "--scaling",
                r#"{"rope_type": "proportional", "partial_rotary_factor": 0.25}"#,
            ]),
        ),
        ("gemma-4-e2b-it.json", Some("sliding_attention"), 256, vec![]),
    ]
}

/// `--config` gives, byte for byte, what the explicit flags give: for `rope` (at positions
/// past Phi-3's original length, so longrope's long factors are used) and for `rope-cache`
/// (the head dim from the config).
#[test]
fn config_files_equal_their_explicit_flags_byte_for_byte() {
    let dir = Dir::new();
    for (k, (name, layer_type, head_dim, flags)) in config_cases(&dir).into_iter().enumerate() {
        let what = format!("{name} {layer_type:?}");
        let x = dir.npy(&format!("x{k}.npy"), &tensor::<f32>([2, 3, 2, head_dim], k as u64));
        let mut from_config = vec!["--config".to_string(), config(name)];
        if let Some(t) = layer_type {
            from_config.extend(["--layer-type".to_string(), t.to_string()]);
        }
        let common = ["--input", &x, "--layout", "blhd", "--offset", "4095", "--device", "cpu"];
        let mut outs = vec![];
        for (tag, extra) in [("config", &from_config), ("flags", &flags)] {
            let out = dir.out(&format!("{k}.{tag}.npy"));
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            let run = posenc(&[&["rope"][..], &common, &extra, &["-o", &out]].concat());
            assert_ok(&run, &format!("{what} {tag}"));
            outs.push(fs::read(&out).unwrap());
        }
        assert_eq!(outs[0], outs[1], "{what}: rope");

        let hd = head_dim.to_string();
        let mut caches = vec![];
        for (tag, extra) in [("config", &from_config), ("flags", &flags)] {
            let out = dir.out(&format!("{k}.{tag}.safetensors"));
            let mut extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            if tag == "flags" {
                extra.extend(["--head-dim", &hd]);
            }
            // The cache takes the layout of the family's rotary module: DeepSeek-V3's
            // returns cat(freqs, freqs) where its attention pairs (2i, 2i + 1); GPT-J has
            // none, so the pairing is given (rope_cache_takes_the_modules_layout).
            match (name, tag) {
                ("deepseek-v3.json", "flags") => {
                    let at = extra.iter().position(|a| *a == "gptj").unwrap();
                    extra[at] = "neox";
                }
                ("gpt-j-6b.json", "config") => extra.extend(["--pairing", "gptj"]),
                _ => {}
            }
            let common = ["rope-cache", "--positions", "0..3,5000", "--device", "cpu"];
            let run = posenc(&[&common[..], &extra, &["-o", &out]].concat());
            assert_ok(&run, &format!("{what} rope-cache {tag}"));
            caches.push(fs::read(&out).unwrap());
        }
        assert_eq!(caches[0], caches[1], "{what}: rope-cache");
    }
}

/// `rope-cache --config` writes the layout the family's own rotary module returns, not the
/// pairing its attention rotates (GLM-4: neox columns for a gptj attention; Cohere: gptj),
/// `--pairing` overrides it, and a family whose module returns another shape is refused in
/// one line naming it, unless `--pairing` is given.
#[test]
fn rope_cache_takes_the_modules_layout() {
    let dir = Dir::new();
    let glm4 = dir.bytes(
        "glm4.json",
        br#"{"model_type": "glm4", "head_dim": 16, "partial_rotary_factor": 0.5,
             "rope_theta": 10000.0}"#,
    );
    let cohere = dir.bytes(
        "cohere.json",
        br#"{"model_type": "cohere", "hidden_size": 64, "num_attention_heads": 4,
             "rope_theta": 10000.0}"#,
    );
    let llama4 = dir.bytes(
        "llama4.json",
        br#"{"model_type": "llama4", "text_config": {"model_type": "llama4_text",
             "head_dim": 16, "rope_theta": 500000.0}}"#,
    );
    let cache = |config: &str, pairing: Option<&str>, tag: &str| {
        let out = dir.out(&format!("{tag}.npy"));
        let mut args = vec!["rope-cache", "--config", config, "--len", "3", "--format", "npy"];
        args.extend(pairing.map(|p| ["--pairing", p]).into_iter().flatten());
        let run = posenc(&[&args[..], &["--device", "cpu", "-o", &out]].concat());
        (run, out)
    };
    let explicit = |pairing: &str, head_dim: &str, rotary_dim: &str, tag: &str| {
        let out = dir.out(&format!("{tag}.npy"));
        let args = [
            "rope-cache",
            "--head-dim",
            head_dim,
            "--rotary-dim",
            rotary_dim,
            "--len",
            "3",
            "--format",
            "npy",
            "--pairing",
            pairing,
            "--device",
            "cpu",
            "-o",
            &out,
        ];
        assert_ok(&posenc(&args), tag);
        fs::read(&out).unwrap()
    };
    for (config, module, other, head_dim, rotary_dim) in
        [(&glm4, "neox", "gptj", "16", "8"), (&cohere, "gptj", "neox", "16", "16")]
    {
        let (run, out) = cache(config, None, &format!("{module}-default"));
        assert_ok(&run, config);
        let want = explicit(module, head_dim, rotary_dim, &format!("{module}-want"));
        assert_eq!(fs::read(&out).unwrap(), want, "{config}: the module's layout");
        let (run, out) = cache(config, Some(other), &format!("{module}-over"));
        assert_ok(&run, config);
        let want = explicit(other, head_dim, rotary_dim, &format!("{module}-other"));
        assert_eq!(fs::read(&out).unwrap(), want, "{config}: --pairing {other}");
    }
    let (run, out) = cache(&llama4, None, "llama4");
    let needle = "model_type \"llama4_text\": its rotary module returns complex freqs_cis";
    assert_rejected(&run, &["llama4"], needle);
    assert!(stderr(&run).contains(&llama4) && stderr(&run).contains("give the pairing"));
    assert!(!std::path::Path::new(&out).exists());
    let (run, _) = cache(&llama4, Some("gptj"), "llama4-gptj");
    assert_ok(&run, "llama4 --pairing gptj");
    // A text_config without its own model_type is the one transformers gives it, Llama 4's
    // text model (a reviewer's case: it read as the generic family, a neox cache with exit 0).
    let bare = dir.bytes(
        "llama4-bare.json",
        br#"{"model_type": "llama4", "text_config": {"head_dim": 16, "rope_theta": 500000.0}}"#,
    );
    let (run, _) = cache(&bare, None, "llama4-bare");
    assert_rejected(
        &run,
        &["llama4 bare"],
        "model_type \"llama4_text\": its rotary module returns",
    );
}

/// Explicit flags override the config: --base, --scaling, --rotary-dim, --pairing, and
/// rope-cache's --head-dim.
#[test]
fn flags_override_the_config() {
    let dir = Dir::new();
    let x = dir.npy("x.npy", &tensor::<f32>([1, 3, 2, 128], 9));
    let run_rope = |name: &str, extra: &[&str]| {
        let out = dir.out(name);
        let args = ["rope", "--input", &x, "--layout", "blhd", "--device", "cpu"];
        let run = posenc(&[&args[..], extra, &["-o", &out]].concat());
        assert_ok(&run, name);
        fs::read(&out).unwrap()
    };
    let llama = config("llama-3.1-8b.json");
    let linear = r#"{"type": "linear", "factor": 2}"#;
    let overrides = [
        (vec!["--base", "10000"], vec!["--scaling", LLAMA3]),
        (vec!["--scaling", linear], vec!["--base", "500000", "--scaling", linear]),
        (
            vec!["--rotary-dim", "64", "--pairing", "gptj", "--scaling", linear],
            vec![
                "--base",
                "500000",
                "--rotary-dim",
                "64",
                "--pairing",
                "gptj",
                "--scaling",
                linear,
            ],
        ),
    ];
    for (k, (over, explicit)) in overrides.iter().enumerate() {
        let a = run_rope(&format!("{k}a.npy"), &[&["--config", &llama][..], over].concat());
        let b = run_rope(&format!("{k}b.npy"), explicit);
        assert_eq!(a, b, "{over:?}");
    }
    // rope-cache: --head-dim over the config's, the config's partial rotary dim kept.
    let cache = |name: &str, extra: &[&str]| {
        let out = dir.out(name);
        let run = posenc(
            &[&["rope-cache", "--len", "4", "--device", "cpu"][..], extra, &["-o", &out]].concat(),
        );
        assert_ok(&run, name);
        fs::read(&out).unwrap()
    };
    let neox = config("gpt-neox-20b.json");
    let a = cache("a.safetensors", &["--config", &neox, "--head-dim", "128"]);
    let b = cache("b.safetensors", &["--head-dim", "128", "--rotary-dim", "24"]);
    assert_eq!(a, b);
}

/// A config whose head dim posenc cannot read (DBRX's without its d_model and n_heads; a
/// class default that differs between transformers versions) is refused naming head_dim and
/// --head-dim;
/// rope-cache's --head-dim and rope's tensor head stand in for it, the rest read from the
/// config as before.
#[test]
fn head_dim_flag_gets_past_a_config_without_one() {
    let dir = Dir::new();
    let dbrx =
        dir.bytes("dbrx.json", br#"{"model_type": "dbrx", "attn_config": {"kv_n_heads": 8}}"#);
    let step = dir.bytes(
        "step.json",
        br#"{"model_type": "step3p5", "hidden_size": 4096, "num_attention_heads": 64,
            "rope_theta": 500000.0}"#,
    );
    let cache = |name: &str, extra: &[&str]| {
        let out = dir.out(name);
        let run = posenc(
            &[&["rope-cache", "--len", "4", "--device", "cpu"][..], extra, &["-o", &out]].concat(),
        );
        (run, out)
    };
    for config in [&dbrx, &step] {
        let (run, _) = cache("refused.safetensors", &["--config", config]);
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{err}");
        assert!(err.contains("head_dim") && err.contains("--head-dim"), "{err}");
    }
    // (DBRX's attn_config.rope_theta, read by transformers 4.x and not 5.23, is refused
    // apart: cpu::rope_families.)
    let config = &step;
    let (run, a) = cache("a.safetensors", &["--config", config, "--head-dim", "128"]);
    assert_ok(&run, "with --head-dim");
    let (run, b) = cache("b.safetensors", &["--head-dim", "128", "--base", "500000"]);
    assert_ok(&run, "explicit");
    assert_eq!(fs::read(a).unwrap(), fs::read(b).unwrap());
    let x = dir.npy("x.npy", &tensor::<f32>([1, 3, 2, 128], 9));
    let rope = |name: &str, extra: &[&str]| {
        let out = dir.out(name);
        let args = ["rope", "--input", &x, "--layout", "blhd", "--device", "cpu"];
        assert_ok(&posenc(&[&args[..], extra, &["-o", &out]].concat()), name);
        fs::read(&out).unwrap()
    };
    assert_eq!(rope("c.npy", &["--config", &step]), rope("d.npy", &["--base", "500000"]));
}

/// Configs posenc cannot honour, and a tensor that is not the config's head: exit 2, one
/// line naming the key, no output touched.
#[test]
fn config_refusals_exit_2_with_one_line() {
    let dir = Dir::new();
    let x = dir.npy("x.npy", &tensor::<f32>([1, 2, 1, 64], 1));
    let llama = fs::read_to_string(config("llama-3.1-8b.json")).unwrap();
    let file = |name: &str, text: &str| dir.bytes(name, text.as_bytes());
    let unknown = file("unknown.json", &llama.replace("\"llama3\"", "\"xpos\""));
    let nonintegral = file("nonint.json", r#"{"hidden_size": 100, "num_attention_heads": 3}"#);
    let odd = file("odd.json", r#"{"head_dim": 90, "partial_rotary_factor": 0.1}"#);
    let malformed = file("malformed.json", &llama[..llama.len() / 2]);
    let gemma = config("gemma-3-4b-it.transformers5.json");
    let llama = config("llama-3.1-8b.json");
    let out = dir.out("out.npy");
    fs::write(&out, b"previous").unwrap();
    let cases: [(&[&str], &str); 6] = [
        (&["--config", &unknown], "rope_scaling.rope_type"),
        (&["--config", &gemma, "--layer-type", "global"], "layer_type"),
        (&["--config", &nonintegral], "hidden_size"),
        (&["--config", &odd], "partial_rotary_factor"),
        (&["--config", &malformed], "(json)"),
        (&["--config", &llama], "but 128 in"),
    ];
    for (args, needle) in cases {
        let run = posenc(
            &[
                &["rope", "--input", &x, "--layout", "blhd", "--device", "cpu"][..],
                args,
                &["-o", &out],
            ]
            .concat(),
        );
        let (what, err) = (format!("{args:?}"), stderr(&run));
        assert_eq!(run.status.code(), Some(2), "{what}: {err}");
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
        assert!(err.starts_with("posenc: ") && err.contains(needle), "{what}: {err}");
        assert_eq!(fs::read(&out).unwrap(), b"previous", "{what}: output touched");
    }
    // clap's: --layer-type needs --config; rope-cache needs --head-dim or --config.
    let run =
        posenc(&["rope-cache", "--len", "2", "--layer-type", "x", "--head-dim", "8", "-o", &out]);
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    assert!(stderr(&run).contains("--config"), "{}", stderr(&run));
    let run = posenc(&["rope-cache", "--len", "2", "-o", &out]);
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    assert!(stderr(&run).contains("--head-dim"), "{}", stderr(&run));
}

/// `--inv-freq`: a model's frequencies from a .npy of float32 or float64 or a .safetensors
/// tensor of F32 or F64, each value taken exactly, on `rope` and `rope-cache`, equal to the
/// library with `Scaling::Explicit`; refused with one line when it is malformed, of a
/// 16-bit type, of the wrong length, or combined with --scaling.
#[test]
fn inv_freq_files_give_the_librarys_explicit_frequencies() {
    let dir = Dir::new();
    let stored: Vec<f32> = (0..8).map(|i| 1.0 / 10000f32.powf((2 * i) as f32 / 16.0)).collect();
    let widened: Vec<f64> = stored.iter().map(|&v| f64::from(v)).collect();
    // float64 values no float32 holds: taken as they are, not rounded.
    let wide: Vec<f64> = (0..8).map(|i| 10000f64.powf(-(i as f64) / 8.0) * (1.0 + 1e-12)).collect();
    assert!(wide.iter().any(|&v| f64::from(v as f32) != v));
    let inv = dir.npy("inv_freq.npy", &ndarray::Array1::from(stored.clone()));
    let inv64 = dir.npy("inv_freq64.npy", &ndarray::Array1::from(wide.clone()));
    // A checkpoint-like file: a 2-D weight beside the 1-D frequencies.
    let st32 = dir.bytes(
        "rotary.safetensors",
        &safetensors_of(&[
            ("inv_freq", StDtype::F32, vec![8], le_bytes(&stored)),
            ("weight", StDtype::F32, vec![2, 2], le_bytes(&[0f32; 4])),
        ]),
    );
    let st64 = dir.bytes(
        "two.safetensors",
        &safetensors_of(&[
            ("layers.0.inv_freq", StDtype::F64, vec![8], le_bytes(&wide)),
            ("layers.1.inv_freq", StDtype::F32, vec![8], le_bytes(&stored)),
        ]),
    );
    let x = tensor::<f32>([1, 5, 2, 16], 13);
    let p = positions::from_offsets(&[1_000_000], 5).unwrap();
    let explicit = |inv_freq: &[f64]| {
        let scaling = Scaling::Explicit { inv_freq: inv_freq.to_vec(), attention_factor: 0.75 };
        RopeSpec::new(16).unwrap().with_scaling(scaling).unwrap()
    };
    let common = ["--attention-factor", "0.75", "--offset", "1000000"];
    for (name, file, tensor, values) in [
        ("npy f32", &inv, None, &widened),
        ("npy f64", &inv64, None, &wide),
        ("safetensors F32, the only 1-D tensor", &st32, None, &widened),
        ("safetensors F64, named", &st64, Some("layers.0.inv_freq"), &wide),
        ("safetensors F32, named", &st64, Some("layers.1.inv_freq"), &widened),
    ] {
        let mut args = vec!["--inv-freq", file.as_str()];
        if let Some(t) = tensor {
            args.extend(["--inv-freq-tensor", t]);
        }
        args.extend(common);
        check_cpu(&dir, name, &x, Layout::Blhd, &explicit(values), &p, &args);
    }
    // rope-cache: the same frequencies, from either format.
    let spec = explicit(&widened);
    let cache = cpu::rope_cache(&spec, &(1_000_000..1_000_005).collect::<Vec<u32>>()).unwrap();
    let stacked = ndarray::stack(ndarray::Axis(0), &[cache.cos.view(), cache.sin.view()]).unwrap();
    for file in [&inv, &st32] {
        let out = dir.out("cache.npy");
        let run = posenc(&[
            "rope-cache",
            "--head-dim",
            "16",
            "--inv-freq",
            file,
            "--attention-factor",
            "0.75",
            "--positions",
            "1000000..1000005",
            "--format",
            "npy",
            "--device",
            "cpu",
            "-o",
            &out,
        ]);
        assert_ok(&run, "rope-cache --inv-freq");
        assert_eq!(fs::read(&out).unwrap(), npy_bytes(&stacked), "{file}");
    }
    // Refusals.
    let input = dir.npy("x.npy", &x);
    let int_file = dir.npy("i64.npy", &ndarray::Array1::from(vec![1i64, 2]));
    let short = dir.npy("short.npy", &ndarray::Array1::from(vec![1.0f32, 0.5]));
    let negative = dir.npy("negative.npy", &ndarray::Array1::from(vec![-1.0f32; 8]));
    let mut past = widened.clone();
    past[3] = 1e20;
    let huge = dir.npy("huge.npy", &ndarray::Array1::from(past));
    let bf16_file = dir.bytes(
        "bf16.safetensors",
        &safetensors_of(&[("inv_freq", StDtype::BF16, vec![8], vec![0x80; 16])]),
    );
    let bad = dir.out("bad.npy");
    for (extra, needle) in [
        (vec!["--inv-freq", &int_file], "inv_freq has dtype '<i8'; allowed: '<f4' or '<f8'"),
        (vec!["--inv-freq", &short], "inv_freq holds 2 values, but 8 are needed"),
        (vec!["--inv-freq", &negative], "invalid inv_freq: -1 at index 0"),
        (vec!["--inv-freq", &huge], "invalid inv_freq: 1e20 at index 3"),
        (vec!["--inv-freq", &bf16_file], "inv_freq has dtype BF16"),
        (vec!["--inv-freq", &st64], "2 1-D tensors and none named (--inv-freq-tensor NAME)"),
        (vec!["--inv-freq", &st64, "--inv-freq-tensor", "x"], "no tensor named \"x\""),
        (
            vec!["--inv-freq", &inv, "--inv-freq-tensor", "x"],
            "invalid inv_freq_tensor: x (allowed: --inv-freq-tensor only with a .safetensors \
             --inv-freq (a .npy holds one array))",
        ),
        (vec!["--inv-freq", &inv, "--scaling", "null"], "cannot be used with"),
        // Flags the given frequencies make meaningless are refused, not ignored.
        (vec!["--inv-freq", &inv, "--base", "500000"], "cannot be used with"),
        (vec!["--inv-freq", &inv, "--seq-len", "5"], "cannot be used with"),
        (vec!["--attention-factor", "2"], "--inv-freq"),
        (vec!["--inv-freq-tensor", "x"], "--inv-freq"),
    ] {
        let run = posenc(
            &[
                &["rope", "--input", &input, "--layout", "blhd", "--device", "cpu"][..],
                &extra,
                &["-o", &bad],
            ]
            .concat(),
        );
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.lines().count() == 1 && err.contains(needle), "{extra:?}: {err}");
        assert!(!dir.path("bad.npy").exists());
    }
}

/// `rope-cache --config` with `--inv-freq`: a yarn config's attention factor still applies
/// to the given frequencies (unless `--attention-factor` says otherwise), so a model's dumped
/// frequencies with its config give its scaled cos and sin; and `--config` of a family
/// without RoPE is refused by `model_type`.
#[test]
fn inv_freq_with_a_config_keeps_the_configs_attention_factor() {
    let dir = Dir::new();
    let configs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/configs");
    let config = configs.join("qwen2.5-7b-instruct.yarn.json");
    let config = config.to_str().unwrap();
    let spec = RopeSpec::from_hf_config(&fs::read_to_string(config).unwrap(), None).unwrap();
    let af = spec.scaling().attention_factor();
    assert!(af > 1.1, "{af}");
    let freqs: Vec<f64> =
        (0..spec.n_freqs()).map(|i| 10000f64.powf(-f64::from(i) / 64.0)).collect();
    let inv = dir.npy("inv_freq.npy", &ndarray::Array1::from(freqs));
    let cache = |name: &str, extra: &[&str]| {
        let out = dir.path(name);
        let base = ["rope-cache", "--device", "cpu", "--config", config, "--inv-freq", &inv];
        let tail = ["--len", "3", "--format", "npy", "-o", &s(&out)];
        assert_ok(&posenc(&[&base[..], extra, &tail[..]].concat()), name);
        fs::read(&out).unwrap()
    };
    let implied = cache("implied.npy", &[]);
    let explicit = cache("explicit.npy", &["--attention-factor", &format!("{af:?}")]);
    let unit = cache("unit.npy", &["--attention-factor", "1"]);
    assert_eq!(implied, explicit, "the config's attention factor applies");
    assert_ne!(implied, unit);
    // A family without rotary positions.
    let marian = configs.join("opus-mt-en-de.json");
    let bad = dir.path("m.safetensors");
    let run = posenc(&[
        "rope-cache",
        "--device",
        "cpu",
        "--config",
        marian.to_str().unwrap(),
        "--len",
        "3",
        "-o",
        &s(&bad),
    ]);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(err.lines().count() == 1 && err.contains("\"marian\"") && err.contains("not rotary"));
    assert!(!bad.exists());
}

/// Flags that only mean something beside another are refused without it, even when a flag
/// that conflicts with the other is given (clap skips its own `requires` check then, and
/// `--base 500000 --attention-factor 2` used to run with the factor silently unused).
#[test]
fn flags_that_need_another_are_refused_without_it() {
    let dir = Dir::new();
    let cases: [(&[&str], &str); 5] = [
        (
            &["rope-cache", "--base", "500000", "--head-dim", "64", "--attention-factor", "2"],
            "--attention-factor given without --inv-freq",
        ),
        (
            &["rope-cache", "--scaling", LLAMA3, "--head-dim", "64", "--attention-factor", "2"],
            "--attention-factor given without --inv-freq",
        ),
        (
            &["rope-cache", "--base", "500000", "--head-dim", "64", "--inv-freq-tensor", "w"],
            "--inv-freq-tensor given without --inv-freq",
        ),
        (
            &["table", "--dim", "8", "--base", "500", "--inv-freq-tensor", "w"],
            "--inv-freq-tensor given without --inv-freq",
        ),
        (
            &["table", "--dim", "8", "--min-timescale", "2", "--inv-freq-tensor", "w"],
            "--inv-freq-tensor given without --inv-freq",
        ),
    ];
    for (k, (args, needle)) in cases.into_iter().enumerate() {
        let out = dir.out(&format!("{k}.out"));
        let extra = ["--len", "2", "--device", "cpu", "-o", &out];
        let run = posenc(&[args, &extra[..]].concat());
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.lines().count() == 1 && err.contains(needle), "{args:?}: {err}");
        assert!(!std::path::Path::new(&out).exists(), "{args:?}");
    }
}

/// A bad field of a `--scaling @FILE` is named with the file, as a `--config`'s is.
#[test]
fn scaling_file_errors_name_the_file() {
    let dir = Dir::new();
    let file = dir.bytes("my-scaling.json", br#"{"rope_type": "linear", "factor": -1}"#);
    let out = dir.out("o.safetensors");
    let scaling = format!("@{file}");
    let args = ["rope-cache", "--head-dim", "8", "--len", "2", "--scaling", &scaling, "-o", &out];
    let run = posenc(&args);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(2), "{err}");
    let want = format!("{file}: invalid rope_scaling.factor: -1");
    assert!(err.lines().count() == 1 && err.contains(&want), "{err}");
    assert!(!std::path::Path::new(&out).exists());
    // Inline JSON has no file to name.
    let inline = ["rope-cache", "--head-dim", "8", "--len", "2", "-o", &out, "--scaling"];
    let run = posenc(&[&inline[..], &[r#"{"rope_type": "linear", "factor": -1}"#]].concat());
    assert!(stderr(&run).contains("rope_scaling: invalid factor: -1"), "{}", stderr(&run));
}
