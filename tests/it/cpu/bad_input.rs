//! Malformed inputs give typed errors: never a panic, and never an allocation sized by an
//! untrusted header before that size is checked against the bytes actually there.
//!
//! Every file of the committed corpus (`tests/corpus/`, written by `generate.py`, listed
//! with its expected error in `MANIFEST.tsv`) goes through the library's parser for its role
//! (for the CLI's inputs, the same `posenc::inputs` functions the CLI calls) and through the
//! `posenc` binary; proptest cases then damage valid files at random, and feed arbitrary
//! headers of under 1 KiB through every up-front path of the CLI under an allocator that
//! records the largest request. The cargo-fuzz targets in `fuzz/` run the same parsers for
//! longer, outside CI.

use std::path::{Path, PathBuf};

use crate::support::cli::{posenc, stderr};
use crate::support::npy_bytes;
use crate::support::recording::{Recording, largest_allocation};
use posenc::Error;
use posenc::encode::ids_to_u32;
use posenc::inputs::{self, EncodePositions, Source};
use posenc::npy;
use posenc::{positions, weights};
use proptest::prelude::*;

// The test crate's allocator records the largest allocation of each thread.
#[global_allocator]
static ALLOCATOR: Recording = Recording;

/// The vocabulary the `ids` role checks against.
const VOCAB: usize = 16;
/// The width of the table the encode roles use (the CLI test's weights are `[VOCAB, DIM]`).
const DIM: usize = 8;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

struct Case {
    file: String,
    role: String,
    kind: String,
    why: String,
}

fn manifest() -> Vec<Case> {
    let text = std::fs::read_to_string(corpus_dir().join("MANIFEST.tsv")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 4, "MANIFEST.tsv: {l:?}");
            Case { file: f[0].into(), role: f[1].into(), kind: f[2].into(), why: f[3].into() }
        })
        .collect()
}

/// The variant's name, for comparison with the manifest.
fn kind(e: &Error) -> &'static str {
    match e {
        Error::Format { .. } => "Format",
        Error::Dtype { .. } => "Dtype",
        Error::Rank { .. } => "Rank",
        Error::TokenId { .. } => "TokenId",
        Error::NonFinite { .. } => "NonFinite",
        Error::Tensor { .. } => "Tensor",
        Error::PositionSpec { .. } => "PositionSpec",
        Error::InvalidParameter { .. } => "InvalidParameter",
        Error::Io { .. } => "Io",
        Error::TooLarge { .. } => "TooLarge",
        _ => "other",
    }
}

/// Token ids through encode's up-front path, as the CLI runs it: read and checked for a
/// `[VOCAB, DIM]` table, then their positions built as `how` says.
fn encode_plan(
    source: Source<'_>,
    pad_id: Option<u32>,
    how: EncodePositions<'_>,
) -> posenc::Result<ndarray::Array2<u32>> {
    let ids = inputs::read_ids(source, (VOCAB, DIM), pad_id)?;
    inputs::encode_positions(&ids, how)
}

/// A rope input through rope's up-front path, as the CLI runs it (`--layout blhd`, an
/// offset): positions are built only for a tensor that holds data.
fn rope_plan(source: Source<'_>, offset: Option<u32>) -> posenc::Result<()> {
    let tensor = inputs::read_rope_input(source)?;
    let [batch, len, _, _] = tensor.shape();
    inputs::rope_positions(None, offset, batch, len)?.for_tensor(&tensor)?;
    Ok(())
}

/// Runs the library parser of `role` over `bytes`; `Ok` means the input was accepted.
fn parse(role: &str, bytes: &[u8], path: &Path) -> posenc::Result<()> {
    let source = Source::Bytes { name: path, bytes };
    // Ids [2, 3], whose positions the `positions` role reads.
    let ids23 = npy_bytes(&ndarray::array![[1u32, 2, 3], [4, 5, 6]]);
    let ids23 = Source::Bytes { name: Path::new("ids.npy"), bytes: &ids23 };
    match role.split_once(':') {
        Some(("weights", tensor)) => weights::from_bytes(bytes, Some(tensor)).map(drop),
        _ => match role {
            "weights" => weights::from_bytes(bytes, None).map(drop),
            "position_table" => inputs::read_position_table(source, None).map(drop),
            "ids" | "encode" => encode_plan(source, None, EncodePositions::Contiguous).map(drop),
            "encode:pad" => {
                encode_plan(source, Some(0), EncodePositions::LeftPadded { pad_id: 0 }).map(drop)
            }
            "encode:fairseq" => {
                encode_plan(source, None, EncodePositions::Fairseq { padding_idx: 1 }).map(drop)
            }
            "positions" => encode_plan(ids23, None, EncodePositions::File(source)).map(drop),
            "rope" => rope_plan(source, None),
            "spec" => {
                let text = std::str::from_utf8(bytes).expect("spec corpus files are UTF-8");
                positions::parse_spec(text).map(drop)
            }
            other => panic!("MANIFEST.tsv: unknown role {other:?}"),
        },
    }
}

#[test]
fn the_manifest_lists_every_corpus_file_once() {
    let mut listed: Vec<String> = manifest().into_iter().map(|c| c.file).collect();
    listed.sort();
    let before = listed.len();
    listed.dedup();
    assert_eq!(before, listed.len(), "a file is listed twice");
    let mut found = Vec::new();
    for dir in ["npy", "safetensors", "positions"] {
        for entry in std::fs::read_dir(corpus_dir().join(dir)).unwrap() {
            found.push(format!("{dir}/{}", entry.unwrap().file_name().to_string_lossy()));
        }
    }
    found.sort();
    assert_eq!(found, listed);
}

#[test]
fn every_corpus_file_gives_its_typed_error_without_large_allocations() {
    let cases = manifest();
    assert!(cases.len() >= 60, "the corpus shrank to {}", cases.len());
    for case in &cases {
        let path = corpus_dir().join(&case.file);
        let bytes = std::fs::read(&path).unwrap();
        let (result, largest) = largest_allocation(|| {
            std::panic::catch_unwind(|| parse(&case.role, &bytes, &path))
                .unwrap_or_else(|_| panic!("{} ({}) panicked", case.file, case.why))
        });
        match result {
            Ok(()) => panic!("{} ({}) was accepted", case.file, case.why),
            Err(e) => {
                assert_eq!(kind(&e), case.kind, "{} ({}): {e}", case.file, case.why);
                let message = e.to_string();
                assert!(
                    !message.is_empty() && !message.contains('\n'),
                    "{}: {message:?}",
                    case.file
                );
            }
        }
        // The files are at most a few hundred bytes; whatever their headers claim, parsing
        // them needs buffers of about their size, not of the claimed size.
        assert!(largest < 64 << 10, "{}: an allocation of {largest} bytes", case.file);
    }
}

/// Every corpus file through the binary: exit status 2, one line on stderr, no panic, no
/// output file.
#[test]
fn the_cli_refuses_every_corpus_file_with_one_line_and_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let weights_path = dir.path().join("w.npy");
    let table = ndarray::Array2::<f32>::from_shape_fn((VOCAB, DIM), |(r, c)| (r * DIM + c) as f32);
    npy::write(&mut std::fs::File::create(&weights_path).unwrap(), table.view()).unwrap();
    let ids_path = dir.path().join("ids.npy");
    npy::write(
        &mut std::fs::File::create(&ids_path).unwrap(),
        ndarray::array![[1u32, 2, 3], [4, 5, 6]].view(),
    )
    .unwrap();
    let out = dir.path().join("out.npy");
    let (w, ids, o) =
        (weights_path.to_str().unwrap(), ids_path.to_str().unwrap(), out.to_str().unwrap());
    for case in manifest() {
        let path = corpus_dir().join(&case.file);
        let file = path.to_str().unwrap();
        let spec;
        let args: Vec<&str> = match case.role.split_once(':') {
            Some((_, tensor)) => {
                vec![
                    "encode",
                    "--device",
                    "cpu",
                    "--weights",
                    file,
                    "--tensor",
                    tensor,
                    "--ids",
                    ids,
                    "-o",
                    o,
                ]
            }
            None => match case.role.as_str() {
                "weights" => {
                    vec!["encode", "--device", "cpu", "--weights", file, "--ids", ids, "-o", o]
                }
                "ids" | "encode" => {
                    vec!["encode", "--device", "cpu", "--weights", w, "--ids", file, "-o", o]
                }
                "encode:pad" => vec![
                    "encode",
                    "--device",
                    "cpu",
                    "--weights",
                    w,
                    "--ids",
                    file,
                    "--pad-id",
                    "0",
                    "-o",
                    o,
                ],
                "encode:fairseq" => vec![
                    "encode",
                    "--device",
                    "cpu",
                    "--weights",
                    w,
                    "--ids",
                    file,
                    "--variant",
                    "fairseq",
                    "-o",
                    o,
                ],
                "position_table" => vec![
                    "encode",
                    "--device",
                    "cpu",
                    "--weights",
                    w,
                    "--ids",
                    ids,
                    "--position-table",
                    file,
                    "-o",
                    o,
                ],
                "rope" => {
                    vec!["rope", "--device", "cpu", "--input", file, "--layout", "blhd", "-o", o]
                }
                "positions" => {
                    vec![
                        "encode",
                        "--device",
                        "cpu",
                        "--weights",
                        w,
                        "--ids",
                        ids,
                        "--positions",
                        file,
                        "-o",
                        o,
                    ]
                }
                "spec" => {
                    spec = std::fs::read_to_string(&path).unwrap();
                    if spec.contains('\0') {
                        // No operating system passes a NUL inside an argument.
                        continue;
                    }
                    vec!["table", "--device", "cpu", "--dim", "8", "--positions", &spec, "-o", o]
                }
                other => panic!("unknown role {other}"),
            },
        };
        let run = posenc(&args);
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{} ({}): {err}", case.file, case.why);
        assert_eq!(err.lines().count(), 1, "{}: {err:?}", case.file);
        assert!(err.starts_with("posenc: ") && !err.contains("panicked"), "{}: {err}", case.file);
        assert!(!out.exists(), "{} created the output", case.file);
    }
}

/// A valid two-tensor `.safetensors` file: a `[4, 6]` F32 table and a `[3]` BF16 vector.
fn good_safetensors() -> Vec<u8> {
    use safetensors::tensor::{Dtype, TensorView};
    let table: Vec<u8> = (0..24).flat_map(|k| (k as f32 * 0.5).to_le_bytes()).collect();
    let vector = vec![0x80u8, 0x3f, 0, 0x40, 0x40, 0x40];
    let views = [
        ("embed", TensorView::new(Dtype::F32, vec![4, 6], &table).unwrap()),
        ("norm", TensorView::new(Dtype::BF16, vec![3], &vector).unwrap()),
    ];
    safetensors::serialize(views, None).unwrap()
}

/// A model's `inv_freq` whose file holds far more values than the frequencies asked for
/// (a checkpoint's tensor of the wrong layer, a table) is refused from its header: nothing of
/// the file's size is allocated.
#[test]
fn inv_freq_of_the_wrong_length_is_refused_before_its_data_is_read() {
    let n = 1 << 20;
    let npy = npy_bytes(&ndarray::Array1::<f64>::zeros(n));
    let view_bytes = vec![0u8; 4 * n];
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![n], &view_bytes)
        .unwrap();
    let st = safetensors::serialize([("inv_freq", view)], None).unwrap();
    for bytes in [&npy, &st] {
        let source = Source::Bytes { name: Path::new("inv_freq"), bytes };
        let (result, largest) = largest_allocation(|| inputs::read_inv_freq(source, None, 64));
        match result {
            Err(Error::Count { expected: 64, actual, .. }) => assert_eq!(actual, n),
            other => panic!("{other:?}"),
        }
        assert!(largest < 64 << 10, "an allocation of {largest} bytes");
    }
}

/// A .safetensors file of tensors `t0`, `t1`, ... with the given header entries, then
/// `data` bytes.
fn safetensors_with_entries(entries: &[String], data: usize) -> Vec<u8> {
    let body: Vec<String> =
        entries.iter().enumerate().map(|(k, e)| format!(r#""t{k}":{e}"#)).collect();
    let header = format!("{{{}}}", body.join(","));
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend(std::iter::repeat_n(0x3c, data));
    bytes
}

/// A header entry whose fields are drawn from values near the edges.
fn header_entry() -> impl Strategy<Value = String> {
    let dtype = prop::sample::select(vec!["F32", "F16", "BF16", "I64", "F64", "U8", "Q4", ""]);
    let dim = prop_oneof![0u64..8, Just(1 << 32), Just(1 << 62), Just(u64::MAX)];
    let shape = prop::collection::vec(dim, 0..4);
    let offset = prop_oneof![0u64..200, Just(u64::MAX), Just(1 << 40)];
    (dtype, shape, offset.clone(), offset).prop_map(|(d, s, a, b)| {
        format!(r#"{{"dtype":"{d}","shape":{s:?},"data_offsets":[{a},{b}]}}"#)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A valid `.safetensors` file with bytes overwritten and its end cut off loads or
    /// fails with a typed error; what loads is the size the file holds.
    #[test]
    fn damaged_safetensors_never_panic(
        edits in prop::collection::vec((0usize..400, any::<u8>()), 0..6),
        cut in 0usize..400,
        tensor in prop::option::of(prop::sample::select(vec!["embed", "norm", "x"])),
    ) {
        let mut bytes = good_safetensors();
        for (at, byte) in edits {
            if let Some(b) = bytes.get_mut(at) {
                *b = byte;
            }
        }
        bytes.truncate(cut);
        let (result, largest) = largest_allocation(|| weights::from_bytes(&bytes, tensor));
        if let Ok(table) = result {
            let (v, d) = table.dim();
            prop_assert!(v * d * 2 <= bytes.len());
        }
        prop_assert!(largest < 64 << 10, "an allocation of {} bytes", largest);
    }

    /// Headers of random tensors with edge-case shapes and offsets, over a little data, read
    /// as a model's `inv_freq`: a typed error or exactly the count asked for, and never an
    /// allocation of the claimed size.
    #[test]
    fn random_inv_freq_headers_never_panic(
        entries in prop::collection::vec(header_entry(), 0..3),
        data in 0usize..128,
        tensor in prop::option::of(Just("t0")),
        count in 1usize..8,
    ) {
        let bytes = safetensors_with_entries(&entries, data);
        let source = Source::Bytes { name: Path::new("inv_freq.safetensors"), bytes: &bytes };
        let (result, largest) = largest_allocation(|| inputs::read_inv_freq(source, tensor, count));
        if let Ok(values) = result {
            prop_assert_eq!(values.len(), count);
        }
        prop_assert!(largest < 64 << 10, "an allocation of {} bytes", largest);
    }

    /// A valid `.npy` or `.safetensors` file of frequencies, damaged and cut: a typed error
    /// or the count asked for, with small allocations.
    #[test]
    fn damaged_inv_freq_files_never_panic(
        edits in prop::collection::vec((0usize..300, any::<u8>()), 0..6),
        cut in 0usize..300,
        safetensors in any::<bool>(),
    ) {
        let values = [1.0f64, 0.1, 0.01, 0.001];
        let mut bytes = if safetensors {
            let le: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F64, vec![4], &le)
                .unwrap();
            safetensors::serialize([("inv_freq", view)], None).unwrap()
        } else {
            npy_bytes(&ndarray::Array1::from(values.to_vec()))
        };
        for (at, byte) in edits {
            if let Some(b) = bytes.get_mut(at) {
                *b = byte;
            }
        }
        bytes.truncate(cut);
        let source = Source::Bytes { name: Path::new("inv_freq"), bytes: &bytes };
        let (result, largest) = largest_allocation(|| inputs::read_inv_freq(source, None, 4));
        if let Ok(read) = result {
            prop_assert_eq!(read.len(), 4);
        }
        prop_assert!(largest < 64 << 10, "an allocation of {} bytes", largest);
    }

    /// Headers of random tensors with edge-case shapes and offsets, over a little data.
    #[test]
    fn random_safetensors_headers_never_panic(
        entries in prop::collection::vec(header_entry(), 0..3),
        data in 0usize..128,
        tensor in prop::option::of(Just("t0")),
    ) {
        let bytes = safetensors_with_entries(&entries, data);
        let (result, largest) = largest_allocation(|| weights::from_bytes(&bytes, tensor));
        if let Ok(table) = result {
            let (v, d) = table.dim();
            prop_assert!(v * d * 2 <= data);
        }
        prop_assert!(largest < 64 << 10, "an allocation of {} bytes", largest);
    }

    /// Position specs built from the characters that matter: a list or a typed error.
    #[test]
    fn position_specs_parse_or_fail_cleanly(
        spec in concat!("[0-9.,x \\-+]{0,40}", "|[0-9]{1,12}\\.\\.[0-9]{1,12}")
    ) {
        match positions::parse_spec(&spec) {
            Ok(list) => prop_assert!(list.len() as u64 <= positions::MAX_SPEC_POSITIONS),
            Err(e) => prop_assert!(matches!(e, Error::PositionSpec { .. }), "{e}"),
        }
    }

    /// Arbitrary Unicode never panics the spec parser.
    #[test]
    fn arbitrary_text_never_panics_the_spec_parser(spec in any::<String>()) {
        if let Err(e) = positions::parse_spec(&spec) {
            prop_assert!(matches!(e, Error::PositionSpec { .. }), "{e}");
        }
    }

    /// int64 ids: accepted exactly when in 0..vocab, else the first offender is named.
    #[test]
    fn int64_ids_are_checked_against_the_vocabulary(
        ids in prop::collection::vec(prop_oneof![-3i64..20, Just(i64::MIN), Just(1 << 40)], 1..12),
    ) {
        let n = ids.len();
        let a = ndarray::Array2::from_shape_vec((1, n), ids.clone()).unwrap();
        match ids_to_u32(a.view(), VOCAB, None) {
            Ok(out) => prop_assert!(ids.iter().zip(out.iter()).all(|(&i, &o)| i == i64::from(o))),
            Err(Error::TokenId { row, col, id, vocab }) => {
                let first = ids.iter().position(|&i| !(0..VOCAB as i64).contains(&i)).unwrap();
                prop_assert_eq!((row, col, vocab), (0, first, VOCAB));
                prop_assert_eq!(id, ids[first].to_string());
            }
            Err(e) => prop_assert!(false, "{e}"),
        }
    }
}

#[test]
fn non_finite_weights_name_the_first_offender() {
    let path = corpus_dir().join("npy/weights_nan_f16_fortran.npy");
    match weights::from_bytes(&std::fs::read(path).unwrap(), None) {
        Err(Error::NonFinite { row, col, value, .. }) => {
            // Fortran order stores the column [1, NaN] first; in C order NaN is at (0, 1).
            assert_eq!((row, col, value.as_str()), (0, 1, "NaN"));
        }
        other => panic!("{other:?}"),
    }
    let path = corpus_dir().join("safetensors/nan_bf16.safetensors");
    let err = weights::load(&path, None).unwrap_err();
    assert!(
        err.to_string().ends_with("weights holds the non-finite value NaN at row 1, column 1"),
        "{err}"
    );
}

#[test]
fn a_non_finite_position_table_is_named_as_such() {
    let path = corpus_dir().join("npy/position_table_nan.npy");
    let err = inputs::read_position_table(Source::File(&path), None).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("position table holds the non-finite value NaN at row 1, column 5"),
        "{err}"
    );
}

/// A version 1.0 `.npy` file declaring `shape` (any numbers at all) over `data`.
fn header_file(descr: &str, shape: &[u64], fortran: bool, data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let tuple = match dims.as_slice() {
        [one] => format!("({one},)"),
        _ => format!("({})", dims.join(", ")),
    };
    let order = if fortran { "True" } else { "False" };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {tuple}, }}");
    let unpadded = 10 + dict.len() + 1;
    dict.extend(std::iter::repeat_n(' ', unpadded.next_multiple_of(64) - unpadded));
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Every up-front path of the CLI over one input file, results ignored: as ids (plain, with
/// `--pad-id`, with `--variant fairseq`, with a vocabulary of 1 and a width of 65536), as the
/// positions and offsets of `[2, 3]` ids, as a rope input (with offsets 0 and 2^32 - 3) and
/// as rope positions, as weights and as a position table.
fn every_up_front_path(bytes: &[u8]) {
    let source = Source::Bytes { name: Path::new("hostile.npy"), bytes };
    let ids23 = npy_bytes(&ndarray::array![[1u32, 2, 3], [4, 5, 6]]);
    let ids23 = Source::Bytes { name: Path::new("ids.npy"), bytes: &ids23 };
    let _ = encode_plan(source, None, EncodePositions::Contiguous);
    let _ = encode_plan(source, Some(0), EncodePositions::LeftPadded { pad_id: 0 });
    let _ = encode_plan(source, None, EncodePositions::Fairseq { padding_idx: 1 });
    if let Ok(ids) = inputs::read_ids(source, (1, 65536), Some(3)) {
        let _ = inputs::encode_positions(&ids, EncodePositions::LeftPadded { pad_id: 3 });
    }
    let _ = encode_plan(ids23, None, EncodePositions::File(source));
    let _ = encode_plan(ids23, None, EncodePositions::Offsets(source));
    let _ = rope_plan(source, None);
    let _ = rope_plan(source, Some(u32::MAX - 2));
    let _ = inputs::rope_positions(Some(source), None, 2, 3);
    let _ = inputs::read_table(source, None);
    let _ = inputs::read_position_table(source, None);
}

/// The most any up-front path may allocate at once for an input of under 1 KiB: the
/// buffers of its own size, and none sized by what its header claims.
const UP_FRONT_LIMIT: usize = 64 << 10;

/// The issue's reproductions and their neighbours, each a header with no data (or a few
/// bytes), and shapes that are accepted (empty, within the limit) yet whose positions a
/// careless path would build for billions of tokens.
#[test]
fn hostile_headers_allocate_little_before_their_size_is_checked() {
    let cases: &[(&str, &[u64])] = &[
        ("<i8", &[0, (1 << 62) - 1]),
        ("<i8", &[0, (1 << 60) - 1]),
        ("<i8", &[(1 << 63) - 1, 0]),
        ("<i4", &[1 << 31, 0]),
        ("<u4", &[0, 1 << 28]),
        ("<f4", &[1 << 20, 1 << 20, 0, 8]),
        ("<f4", &[1 << 16, 1 << 16, 0, 8]),
        // Accepted: 2^31 values once the zero axis is set aside, 2^29 tokens of no data.
        ("<f4", &[1 << 14, 1 << 15, 0, 4]),
        ("<f2", &[1 << 29, 1, 0, 4]),
        ("<u2", &[0, 1 << 20, 1, 2048]),
        ("<u4", &[0]),
        ("<f4", &[0, 1 << 40]),
    ];
    for &(descr, shape) in cases {
        let bytes = header_file(descr, shape, false, &[]);
        assert!(bytes.len() < 1024);
        let ((), largest) = largest_allocation(|| every_up_front_path(&bytes));
        assert!(largest < UP_FRONT_LIMIT, "{descr} {shape:?}: an allocation of {largest} bytes");
    }
}

/// Axis lengths from the edges (0, 1, powers of two near the limits and past them) and
/// anywhere.
fn axis() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..4,
        1 => Just(1 << 31),
        1 => Just((1 << 31) + 1),
        1 => Just(1 << 32),
        1 => Just(1 << 40),
        1 => Just((1 << 62) - 1),
        1 => Just(1 << 62),
        1 => Just((1 << 63) - 1),
        1 => Just(1 << 63),
        1 => Just(u64::MAX),
        2 => any::<u64>(),
        2 => (0u32..64).prop_map(|k| 1u64 << k),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// No header of under 1 KiB makes any command's up-front path (reading, the derived
    /// size checks, positions) allocate more than 64 KiB at once: whatever it accepts is
    /// sized by the bytes the file holds, or is empty and never built.
    #[test]
    fn headers_under_1_kib_allocate_at_most_64_kib_up_front(
        descr in prop::sample::select(vec!["<i4", "<i8", "<u4", "<f4", "<f2", "<u2", "<f8"]),
        shape in prop::collection::vec(axis(), 0..=5),
        fortran in any::<bool>(),
        data in prop_oneof![Just(Vec::new()), prop::collection::vec(any::<u8>(), 0..64)],
    ) {
        let bytes = header_file(descr, &shape, fortran, &data);
        prop_assert!(bytes.len() < 1024);
        let ((), largest) = largest_allocation(|| every_up_front_path(&bytes));
        prop_assert!(largest < UP_FRONT_LIMIT, "{:?}: an allocation of {} bytes", shape, largest);
    }
}
