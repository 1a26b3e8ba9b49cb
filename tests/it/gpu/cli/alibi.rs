//! `posenc alibi` as a user meets it: slopes on stdout, bias tensors as .npy bit-identical to
//! the library on every device, and every bad request refused with exit status 2, one line
//! on stderr and no output file touched.

use crate::support::cli::{
    assert_ok, assert_rejected, gpu_available, posenc, posenc_lines, s, stderr, stdout,
};
use std::fs;
use std::path::Path;

use posenc::alibi::{self, AlibiSpec, Form};
use posenc::npy::{self, Expected, NpyArray, NpyDtype};

/// The `.npy` at `path`: its shape and float32 bits, after checking the header says '<f4'.
fn read_bias(path: &Path) -> (Vec<usize>, Vec<u32>) {
    let bytes = fs::read(path).unwrap();
    let header_len = usize::from(u16::from_le_bytes([bytes[8], bytes[9]]));
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
    assert!(header.contains("'descr': '<f4'") && header.contains("'fortran_order': False"));
    let expected = Expected { what: "bias", dtypes: &[NpyDtype::F32], ranks: &[3] };
    match npy::read(path, &expected).unwrap() {
        NpyArray::F32(a) => (a.shape().to_vec(), a.iter().map(|v| v.to_bits()).collect()),
        other => panic!("{:?}", other.dtype()),
    }
}

fn library_bits(spec: &AlibiSpec) -> Vec<u32> {
    alibi::bias_cpu(spec).unwrap().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn slopes_print_one_per_line_as_shortest_decimals() {
    let out = posenc(&["alibi", "--heads", "8", "--slopes"]);
    assert_ok(&out, "8 slopes");
    assert_eq!(
        stdout(&out),
        "0.5\n0.25\n0.125\n0.0625\n0.03125\n0.015625\n0.0078125\n0.00390625\n"
    );
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
    // `--device cpu` and `auto` are taken (round twenty-five: a script passing `--device
    // cpu` everywhere was refused here), with the same output and no note.
    for device in ["cpu", "auto"] {
        let again = posenc(&["alibi", "--heads", "8", "--slopes", "--device", device]);
        assert_ok(&again, device);
        assert_eq!(again.stdout, out.stdout, "{device}");
        assert!(again.stderr.is_empty(), "{}", stderr(&again));
    }

    for heads in [12u32, 1000] {
        let out = posenc(&["alibi", "--heads", &heads.to_string(), "--slopes"]);
        assert_ok(&out, "slopes");
        let printed: Vec<u32> =
            stdout(&out).lines().map(|l| l.parse::<f32>().unwrap().to_bits()).collect();
        let want: Vec<u32> = alibi::slopes(heads).unwrap().iter().map(|v| v.to_bits()).collect();
        assert_eq!(printed, want, "{heads} heads");
    }
}

#[test]
fn npy_output_has_the_shape_and_the_library_bits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bias.npy");
    let out = posenc(&["alibi", "--heads", "12", "--len", "6", "--device", "cpu", "-o", &s(&path)]);
    assert_ok(&out, "default form");
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
    let (shape, bits) = read_bias(&path);
    assert_eq!(shape, [12, 6, 6]);
    assert_eq!(bits, library_bits(&AlibiSpec::new(12, 6).unwrap()));

    let out = posenc(&[
        "alibi",
        "--heads",
        "5",
        "--len",
        "3",
        "--kv-len",
        "20",
        "--form",
        "causal",
        "--offset",
        "4294967290",
        "--device",
        "cpu",
        "-o",
        &s(&path),
    ]);
    assert_ok(&out, "causal with offset");
    let spec = AlibiSpec::new(5, 3)
        .unwrap()
        .with_offset(4_294_967_290)
        .unwrap()
        .with_kv_len(20)
        .unwrap()
        .with_form(Form::Causal);
    let (shape, bits) = read_bias(&path);
    assert_eq!(shape, [5, 3, 20]);
    assert_eq!(bits, library_bits(&spec));
    // Head 0 of 5 (slope 1/4), query 0 at 4294967290, key 0: -1073741822.5, rounded to the
    // float32 grid of spacing 128 there.
    assert_eq!(f32::from_bits(bits[0]), -1_073_741_824.0);

    // A decoding step: kv_len defaults to offset + len.
    let out = posenc(&[
        "alibi",
        "--heads",
        "3",
        "--len",
        "1",
        "--offset",
        "9",
        "--device",
        "cpu",
        "-o",
        &s(&path),
    ]);
    assert_ok(&out, "decoding step");
    assert_eq!(read_bias(&path).0, [3, 1, 10]);
}

#[test]
fn gpu_output_is_bit_identical_to_cpu() {
    if !gpu_available("gpu_output_is_bit_identical_to_cpu") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for form in ["symmetric", "causal"] {
        let run = |device: &str| {
            let path = dir.path().join(format!("{device}.npy"));
            let args = [
                "alibi",
                "--heads",
                "20",
                "--len",
                "33",
                "--kv-len",
                "300",
                "--offset",
                "16777200",
                "--form",
                form,
                "--device",
                device,
                "-o",
                &s(&path),
            ];
            let out = posenc(&args);
            assert_ok(&out, &format!("{form} on {device}"));
            assert!(posenc_lines(&out).is_empty(), "{:?}", posenc_lines(&out));
            read_bias(&path)
        };
        assert_eq!(run("gpu"), run("cpu"), "{form}");
    }
}

/// Argument lists (after `alibi`) that must be refused, and a word the message must contain.
const BAD_ALIBI_ARGS: &[(&[&str], &str)] = &[
    (&["--heads", "0", "--len", "4"], "invalid heads: 0"),
    (&["--heads", "65537", "--len", "4"], "invalid heads: 65537"),
    (&["--heads", "-1", "--len", "4"], "--heads"),
    (&["--len", "4"], "--heads"),
    (&["--heads", "8"], "--len"),
    (&["--heads", "8", "--len", "-3"], "--len"),
    (&["--heads", "8", "--len", "4", "--form", "diagonal"], "diagonal"),
    (&["--heads", "8", "--len", "4", "--offset", "-1"], "--offset"),
    (&["--heads", "8", "--len", "4", "--offset", "4294967296"], "--offset"),
    (&["--heads", "8", "--len", "4", "--offset", "4294967293"], "invalid offset"),
    (&["--heads", "8", "--len", "4294967297"], "invalid len"),
    (&["--heads", "8", "--len", "4", "--kv-len", "4294967297"], "invalid kv_len"),
    (&["--heads", "64", "--len", "8192"], "MAX_VALUES"),
    (&["--heads", "1", "--len", "1", "--kv-len", "4294967296", "--offset", "0"], "4294967296"),
    (&["--heads", "8", "--len", "4", "--device", "reference"], "reference"),
    (&["--heads", "8", "--slopes", "--len", "4"], "cannot be used with"),
    (&["--heads", "8", "--slopes", "--kv-len", "4"], "cannot be used with"),
    (&["--heads", "8", "--slopes", "--offset", "4"], "cannot be used with"),
    (&["--heads", "8", "--slopes", "--form", "causal"], "cannot be used with"),
    // The slopes are computed on the host: a GPU asked for would be silently unused
    // (`--device cpu` and `auto` are taken).
    (&["--heads", "8", "--slopes", "--device", "gpu"], "invalid device: gpu"),
];

#[test]
fn bad_requests_exit_2_with_one_line_and_touch_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("keep.npy");
    fs::write(&existing, "keep me\n").unwrap();
    let fresh = dir.path().join("fresh.npy");
    for &(case, needle) in BAD_ALIBI_ARGS {
        for target in [&existing, &fresh] {
            let mut args = vec!["alibi"];
            args.extend_from_slice(case);
            // Without --slopes an output is needed to reach the check under test.
            if !case.contains(&"--slopes") {
                args.extend(["-o", target.to_str().unwrap()]);
            }
            assert_rejected(&posenc(&args), case, needle);
            assert_eq!(fs::read_to_string(&existing).unwrap(), "keep me\n", "{case:?}");
            assert!(!fresh.exists(), "{case:?}");
        }
    }
    let out = posenc(&["alibi", "--heads", "0", "--slopes"]);
    assert_rejected(&out, &["--heads", "0", "--slopes"], "allowed: 1..=65536");
    let out = posenc(&["alibi", "--heads", "4", "--slopes", "-o", &s(&fresh)]);
    assert_rejected(&out, &["--slopes", "-o"], "cannot be used with");
}

#[test]
fn an_unwritable_output_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing").join("b.npy");
    let out = posenc(&["alibi", "--heads", "4", "--len", "2", "--device", "cpu", "-o", &s(&path)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("posenc: ") && err.contains("b.npy"), "{err}");
}

#[test]
fn help_states_the_formulas_and_defaults() {
    let out = posenc(&["alibi", "--help"]);
    assert_ok(&out, "alibi --help");
    let help = stdout(&out);
    for needle in [
        "2^(-8k/H)",
        "2^(-8(2j-1)/(2c))",
        "-m_h |offset + i - j|",
        "[default: symmetric]",
        "[default: offset + L]",
        "[default: auto]",
        "Exit status",
    ] {
        assert!(help.contains(needle), "{needle:?} missing from alibi --help");
    }
}
