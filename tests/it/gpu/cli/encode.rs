//! `posenc encode` as a user meets it: tables from .safetensors and .npy, ids, positions and
//! offsets from .npy, outputs bit-identical to the library, and every bad input refused
//! with exit status 2, one line on stderr and no output file touched.

use crate::support::cli::{
    Dir, assert_ok, gpu_available, posenc, posenc_env, posenc_lines, s, stderr,
};
use std::fs;

use half::{bf16, f16};
use ndarray::{Array, Array1, Array2, ArrayView2, array};
use posenc::encode::{Dtype, Embeddings, EncodeOptions, Encoded, Scale};
use posenc::{PeSpec, cpu, positions};
use safetensors::tensor::{Dtype as StDtype, TensorView};

/// A deterministic table value in [-2, 2) with a fractional part, so rounding shows.
fn value(v: usize, d: usize) -> f32 {
    ((v * 7919 + d * 104_729) % 4001) as f32 / 1000.25 - 2.0
}

fn table_f32(vocab: usize, dim: usize) -> Array2<f32> {
    Array2::from_shape_fn((vocab, dim), |(v, d)| value(v, d))
}

/// An embedding table in one storage type, as the test knows it.
enum Table {
    F32(Array2<f32>),
    F16(Array2<f16>),
    Bf16(Array2<bf16>),
}

impl Table {
    fn new(dtype: Dtype, vocab: usize, dim: usize) -> Self {
        let t = table_f32(vocab, dim);
        match dtype {
            Dtype::F32 => Table::F32(t),
            Dtype::F16 => Table::F16(t.mapv(f16::from_f32)),
            Dtype::Bf16 => Table::Bf16(t.mapv(bf16::from_f32)),
        }
    }

    fn embeddings(&self) -> Embeddings<'_> {
        match self {
            Table::F32(a) => Embeddings::F32(a.view()),
            Table::F16(a) => Embeddings::F16(a.view()),
            Table::Bf16(a) => Embeddings::Bf16(a.view()),
        }
    }

    /// The table as one `.safetensors` tensor: dtype, shape and little-endian bytes.
    fn safetensors_parts(&self) -> (StDtype, Vec<usize>, Vec<u8>) {
        fn le<T: bytemuck::Pod>(a: &Array2<T>) -> Vec<u8> {
            a.iter().flat_map(|v| bytemuck::bytes_of(v).to_vec()).collect()
        }
        match self {
            Table::F32(a) => (StDtype::F32, a.shape().to_vec(), le(a)),
            Table::F16(a) => (StDtype::F16, a.shape().to_vec(), le(a)),
            Table::Bf16(a) => (StDtype::BF16, a.shape().to_vec(), le(a)),
        }
    }
}

/// The `.safetensors` inputs of the encode tests.
trait SafetensorsFiles {
    fn safetensors(&self, name: &str, tensors: &[(&str, StDtype, Vec<usize>, Vec<u8>)]) -> String;
    fn table(&self, name: &str, table: &Table) -> String;
}

impl SafetensorsFiles for Dir {
    /// A `.safetensors` file of the named tensors.
    fn safetensors(&self, name: &str, tensors: &[(&str, StDtype, Vec<usize>, Vec<u8>)]) -> String {
        let views: Vec<(&str, TensorView<'_>)> = tensors
            .iter()
            .map(|(n, dtype, shape, data)| {
                (*n, TensorView::new(*dtype, shape.clone(), data).unwrap())
            })
            .collect();
        self.bytes(name, &safetensors::serialize(views, None).unwrap())
    }

    fn table(&self, name: &str, table: &Table) -> String {
        let (dtype, shape, data) = table.safetensors_parts();
        self.safetensors(name, &[("embed", dtype, shape, data)])
    }
}

/// An output file: its header dict and its elements' bits, widened to u32.
struct Out {
    dict: String,
    bits: Vec<u32>,
}

fn read_out(path: &str) -> Out {
    let bytes = fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00", "magic and version 1.0");
    let header_len = usize::from(u16::from_le_bytes([bytes[8], bytes[9]]));
    let data_start = 10 + header_len;
    assert_eq!(data_start % 64, 0, "the data is 64-byte aligned");
    let dict = std::str::from_utf8(&bytes[10..data_start]).unwrap().trim_end().to_string();
    let data = &bytes[data_start..];
    let bits = if dict.contains("'<f4'") {
        data.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
    } else {
        data.chunks_exact(2).map(|c| u32::from(u16::from_le_bytes([c[0], c[1]]))).collect()
    };
    Out { dict, bits }
}

fn dict(descr: &str, shape: &str) -> String {
    format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}")
}

fn descr(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F32 => "<f4",
        Dtype::F16 => "<f2",
        Dtype::Bf16 => "<u2",
    }
}

fn dtype_arg(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F32 => "f32",
        Dtype::F16 => "f16",
        Dtype::Bf16 => "bf16",
    }
}

fn expected(
    dim: usize,
    table: &Table,
    ids: ArrayView2<'_, u32>,
    positions: ArrayView2<'_, u32>,
    options: EncodeOptions,
) -> Encoded {
    let spec = PeSpec::new(dim as u32).unwrap();
    cpu::encode(&spec, table.embeddings(), ids, positions, &options).unwrap()
}

const DIM: usize = 8;
const VOCAB: usize = 11;

#[test]
fn every_table_and_output_dtype_matches_the_library_bit_for_bit() {
    let dir = Dir::new();
    let ids = array![[0i32, 3, 10, 5], [7, 7, 1, 2]];
    let ids_path = dir.npy("ids.npy", &ids);
    let ids_u32 = ids.mapv(|v| v as u32);
    let positions = positions::contiguous_batch(2, 4).unwrap();
    for table_dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
        let table = Table::new(table_dtype, VOCAB, DIM);
        let weights = dir.table(&format!("{table_dtype:?}.safetensors"), &table);
        for out_dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
            let what = format!("{table_dtype:?} table, {out_dtype:?} output");
            let out = s(&dir.path(&format!("{table_dtype:?}-{out_dtype:?}.npy")));
            let args = ["encode", "--device", "cpu", "--weights", &weights, "--ids", &ids_path];
            let run =
                posenc(&[&args[..], &["--out-dtype", dtype_arg(out_dtype), "-o", &out]].concat());
            assert_ok(&run, &what);
            assert!(run.stderr.is_empty(), "{what}: {}", stderr(&run));
            let got = read_out(&out);
            assert_eq!(got.dict, dict(descr(out_dtype), "(2, 4, 8)"), "{what}");
            let options = EncodeOptions { out_dtype, ..EncodeOptions::default() };
            let want = expected(DIM, &table, ids_u32.view(), positions.view(), options);
            assert_eq!(got.bits, want.bits(), "{what}");
        }
    }
}

#[test]
fn one_dimensional_ids_of_every_type_give_an_l_by_d_output() {
    let dir = Dir::new();
    let table = Table::new(Dtype::F32, VOCAB, DIM);
    let weights = dir.table("w.safetensors", &table);
    let ids = [3u32, 0, 9, 9, 4];
    let files = [
        dir.npy("i32.npy", &Array1::from_iter(ids.iter().map(|&v| v as i32))),
        dir.npy("i64.npy", &Array1::from_iter(ids.iter().map(|&v| i64::from(v)))),
        dir.npy("u32.npy", &Array1::from_iter(ids)),
    ];
    let batch = Array2::from_shape_vec((1, 5), ids.to_vec()).unwrap();
    let want = expected(
        DIM,
        &table,
        batch.view(),
        positions::contiguous_batch(1, 5).unwrap().view(),
        EncodeOptions::default(),
    );
    for ids_path in &files {
        let out = s(&dir.path("out.npy"));
        let run = posenc(&[
            "encode",
            "--device",
            "cpu",
            "--weights",
            &weights,
            "--ids",
            ids_path,
            "-o",
            &out,
        ]);
        assert_ok(&run, ids_path);
        let got = read_out(&out);
        assert_eq!(got.dict, dict("<f4", "(5, 8)"), "{ids_path}");
        assert_eq!(got.bits, want.bits(), "{ids_path}");
    }
}

#[test]
fn positions_and_offsets_files_reach_the_encoding() {
    let dir = Dir::new();
    let table = Table::new(Dtype::F16, VOCAB, DIM);
    let weights = dir.table("w.safetensors", &table);
    let ids = array![[1u32, 2, 3], [4, 5, 6]];
    let ids_path = dir.npy("ids.npy", &ids);
    let out = s(&dir.path("out.npy"));
    let run = |extra: &[&str]| {
        let args =
            ["encode", "--device", "cpu", "--weights", &weights, "--ids", &ids_path, "-o", &out];
        let run = posenc(&[&args[..], extra].concat());
        assert_ok(&run, &format!("{extra:?}"));
        read_out(&out)
    };

    let given = array![[0u32, 1_000_000, u32::MAX], [16_777_216, 7, 7]];
    let got = run(&["--positions", &dir.npy("pos.npy", &given)]);
    let want = expected(DIM, &table, ids.view(), given.view(), EncodeOptions::default());
    assert_eq!(got.bits, want.bits(), "--positions");

    let from = positions::from_offsets(&[100, u32::MAX - 2], 3).unwrap();
    let want = expected(DIM, &table, ids.view(), from.view(), EncodeOptions::default());
    let offsets_u32 = dir.npy("off_u32.npy", &array![100u32, u32::MAX - 2]);
    assert_eq!(run(&["--offsets", &offsets_u32]).bits, want.bits(), "--offsets uint32");
    let offsets_i64 = dir.npy("off_i64.npy", &array![100i64, i64::from(u32::MAX - 2)]);
    assert_eq!(run(&["--offsets", &offsets_i64]).bits, want.bits(), "--offsets int64");
}

#[test]
fn pad_id_gives_zero_rows_and_left_padded_positions() {
    let dir = Dir::new();
    let table = Table::new(Dtype::F32, VOCAB, DIM);
    let weights = dir.table("w.safetensors", &table);
    // The pad id need not be a row of the table.
    let pad = 50_000u32;
    let ids = array![[pad, pad, 4, 5], [6, 7, 8, 9]];
    let ids_path = dir.npy("ids.npy", &ids.mapv(i64::from));
    let out = s(&dir.path("out.npy"));
    let args = ["encode", "--device", "cpu", "--weights", &weights, "--ids", &ids_path];
    let run = posenc(&[&args[..], &["--pad-id", "50000", "-o", &out]].concat());
    assert_ok(&run, "--pad-id");
    let got = read_out(&out);
    assert!(got.bits[..2 * DIM].iter().all(|&b| b == 0), "pad rows are +0.0");
    let left = positions::left_padded(ids.view(), pad).unwrap();
    assert_eq!(left.row(0).to_vec(), [0, 0, 0, 1]);
    let options = EncodeOptions { pad_id: Some(pad), ..EncodeOptions::default() };
    assert_eq!(got.bits, expected(DIM, &table, ids.view(), left.view(), options).bits());

    // With explicit positions the pad rows are still zeros, and the positions are as given.
    let given = array![[9u32, 9, 9, 9], [0, 1, 2, 3]];
    let pos = dir.npy("pos.npy", &given);
    let run =
        posenc(&[&args[..], &["--pad-id", "50000", "--positions", &pos, "-o", &out]].concat());
    assert_ok(&run, "--pad-id --positions");
    assert_eq!(
        read_out(&out).bits,
        expected(DIM, &table, ids.view(), given.view(), options).bits()
    );
}

#[test]
fn scales_and_bases_match_the_library() {
    let dir = Dir::new();
    let table = Table::new(Dtype::Bf16, VOCAB, 16);
    let weights = dir.table("w.safetensors", &table);
    let ids = array![[1u32, 2, 3, 10]];
    let ids_path = dir.npy("ids.npy", &ids);
    let out = s(&dir.path("out.npy"));
    let positions = positions::contiguous_batch(1, 4).unwrap();
    for (arg, scale) in
        [("sqrt", Scale::SqrtDim), ("0.125", Scale::Value(0.125)), ("-3", Scale::Value(-3.0))]
    {
        let args = ["encode", "--device", "cpu", "--weights", &weights, "--ids", &ids_path];
        let run = posenc(&[&args[..], &["--scale", arg, "-o", &out]].concat());
        assert_ok(&run, arg);
        let options = EncodeOptions { scale, ..EncodeOptions::default() };
        assert_eq!(
            read_out(&out).bits,
            expected(16, &table, ids.view(), positions.view(), options).bits(),
            "{arg}"
        );
    }
    let args = ["encode", "--device", "cpu", "--weights", &weights, "--ids", &ids_path];
    let run = posenc(&[&args[..], &["--base", "500", "-o", &out]].concat());
    assert_ok(&run, "--base");
    let spec = PeSpec::new(16).unwrap().with_base(500.0).unwrap();
    let want = cpu::encode(
        &spec,
        table.embeddings(),
        ids.view(),
        positions.view(),
        &EncodeOptions::default(),
    )
    .unwrap();
    assert_eq!(read_out(&out).bits, want.bits());
}

#[test]
fn npy_weights_in_f32_and_f16_are_accepted() {
    let dir = Dir::new();
    let ids = array![[2u32, 4]];
    let ids_path = dir.npy("ids.npy", &ids);
    let positions = positions::contiguous_batch(1, 2).unwrap();
    let f32_table = table_f32(VOCAB, DIM);
    let f16_table = f32_table.mapv(f16::from_f32);
    for (weights, table) in [
        (dir.npy("w32.npy", &f32_table), Table::F32(f32_table.clone())),
        (dir.npy("w16.npy", &f16_table), Table::F16(f16_table.clone())),
    ] {
        let out = s(&dir.path("out.npy"));
        let run = posenc(&[
            "encode",
            "--device",
            "cpu",
            "--weights",
            &weights,
            "--ids",
            &ids_path,
            "-o",
            &out,
        ]);
        assert_ok(&run, &weights);
        let want = expected(DIM, &table, ids.view(), positions.view(), EncodeOptions::default());
        assert_eq!(read_out(&out).bits, want.bits(), "{weights}");
    }
}

#[test]
fn a_named_tensor_is_chosen_among_several() {
    let dir = Dir::new();
    let embed = Table::new(Dtype::F32, VOCAB, DIM);
    let (dtype, shape, data) = embed.safetensors_parts();
    let other = table_f32(3, 4).iter().flat_map(|v| v.to_le_bytes()).collect();
    let bias = vec![0u8; 16];
    let weights = dir.safetensors(
        "model.safetensors",
        &[
            ("lm_head", StDtype::F32, vec![3, 4], other),
            ("model.embed_tokens.weight", dtype, shape, data),
            ("bias", StDtype::F32, vec![4], bias),
        ],
    );
    let ids = array![[1u32, 2, 3]];
    let ids_path = dir.npy("ids.npy", &ids);
    let out = s(&dir.path("out.npy"));
    let args = ["encode", "--device", "cpu", "--weights", &weights, "--ids", &ids_path, "-o", &out];
    let run = posenc(&[&args[..], &["--tensor", "model.embed_tokens.weight"]].concat());
    assert_ok(&run, "--tensor");
    let want = expected(
        DIM,
        &embed,
        ids.view(),
        positions::contiguous_batch(1, 3).unwrap().view(),
        EncodeOptions::default(),
    );
    assert_eq!(read_out(&out).bits, want.bits());
}

#[test]
fn gpu_output_is_bit_identical_to_cpu() {
    if !gpu_available("gpu_output_is_bit_identical_to_cpu") {
        return;
    }
    let dir = Dir::new();
    let ids = array![[0i64, 3, 10, 5, 5], [7, 7, 1, 2, 99], [99, 99, 99, 4, 6]];
    let ids_path = dir.npy("ids.npy", &ids);
    let offsets = dir.npy("off.npy", &array![0u32, 1 << 24, u32::MAX - 4]);
    for table_dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
        let weights = dir
            .table(&format!("{table_dtype:?}.safetensors"), &Table::new(table_dtype, VOCAB, DIM));
        for out_dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
            for positions in [vec![], vec!["--offsets", offsets.as_str()]] {
                let what = format!("{table_dtype:?} table, {out_dtype:?} output, {positions:?}");
                let run = |device: &str, env: &[(&str, &str)]| {
                    let out = s(&dir.path(&format!("{device}.npy")));
                    let args = [
                        "encode",
                        "--device",
                        device,
                        "--weights",
                        &weights,
                        "--ids",
                        &ids_path,
                        "--pad-id",
                        "99",
                        "--out-dtype",
                        dtype_arg(out_dtype),
                        "-o",
                        &out,
                    ];
                    let run = posenc_env(&[&args[..], &positions[..]].concat(), env);
                    assert_ok(&run, &format!("{what} on {device}"));
                    assert!(posenc_lines(&run).is_empty(), "{what}: {:?}", posenc_lines(&run));
                    read_out(&out)
                };
                let cpu = run("cpu", &[]);
                let gpu = run("gpu", &[]);
                assert_eq!(gpu.dict, cpu.dict, "{what}");
                assert_eq!(gpu.bits, cpu.bits, "{what}");
                // A binding of 256 bytes splits the table and the output into many chunks.
                let chunked = run("gpu", &[("POSENC_MAX_BINDING_SIZE", "256")]);
                assert_eq!(chunked.bits, cpu.bits, "{what}, chunked");
            }
        }
    }
}

#[test]
fn auto_gives_the_cpu_bits_and_falls_back_with_one_note() {
    let dir = Dir::new();
    let weights = dir.table("w.safetensors", &Table::new(Dtype::F32, VOCAB, DIM));
    let ids_path = dir.npy("ids.npy", &array![[1u32, 2], [3, 4]]);
    let out = |name: &str| s(&dir.path(name));
    let run = |device: &str, name: &str, env: &[(&str, &str)]| {
        let args = [
            "encode",
            "--device",
            device,
            "--weights",
            &weights,
            "--ids",
            &ids_path,
            "-o",
            &out(name),
        ];
        posenc_env(&args, env)
    };
    assert_ok(&run("cpu", "cpu.npy", &[]), "cpu");
    let auto = run("auto", "auto.npy", &[]);
    assert_ok(&auto, "auto");
    assert_eq!(read_out(&out("auto.npy")).bits, read_out(&out("cpu.npy")).bits);

    let none = [("WGPU_ADAPTER_NAME", "no-such-adapter-posenc-test")];
    let fallback = run("auto", "fallback.npy", &none);
    assert_ok(&fallback, "auto without an adapter");
    let lines = posenc_lines(&fallback);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("posenc: note: computing on the CPU"), "{lines:?}");
    assert_eq!(read_out(&out("fallback.npy")).bits, read_out(&out("cpu.npy")).bits);

    let gpu = run("gpu", "gpu.npy", &none);
    assert_eq!(gpu.status.code(), Some(1), "{}", stderr(&gpu));
    assert_eq!(posenc_lines(&gpu).len(), 1, "{}", stderr(&gpu));
    assert!(!dir.path("gpu.npy").exists());
}

#[test]
fn empty_batches_give_empty_outputs() {
    let dir = Dir::new();
    let weights = dir.table("w.safetensors", &Table::new(Dtype::F32, VOCAB, DIM));
    for (ids, shape) in [
        (dir.npy("l0.npy", &Array1::<u32>::zeros(0)), "(0, 8)"),
        (dir.npy("b0.npy", &Array2::<i64>::zeros((0, 5))), "(0, 5, 8)"),
    ] {
        let out = s(&dir.path("out.npy"));
        let run = posenc(&[
            "encode",
            "--device",
            "cpu",
            "--weights",
            &weights,
            "--ids",
            &ids,
            "-o",
            &out,
        ]);
        assert_ok(&run, shape);
        let got = read_out(&out);
        assert_eq!(got.dict, dict("<f4", shape));
        assert!(got.bits.is_empty());
    }
}

/// A bad request: exit status 2, exactly one line on stderr containing every needle, and
/// the output neither created nor, when it exists, touched; no temporary file left behind.
fn assert_refused(dir: &Dir, args: &[&str], needles: &[&str]) {
    let out = dir.path("out.npy");
    let _ = fs::remove_file(&out);
    let before = dir.files();
    for existing in [false, true] {
        if existing {
            fs::write(&out, "previous output").unwrap();
        }
        let run = posenc(&[&["encode"], args, &["-o", out.to_str().unwrap()]].concat());
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {err}");
        assert!(run.stdout.is_empty(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line, got {err:?}");
        assert!(err.starts_with("posenc: "), "{args:?}: {err}");
        for needle in needles {
            assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
        }
        if existing {
            assert_eq!(fs::read_to_string(&out).unwrap(), "previous output", "{args:?}");
            fs::remove_file(&out).unwrap();
        } else {
            assert!(!out.exists(), "{args:?} created the output");
        }
        assert_eq!(dir.files(), before, "{args:?} left a file behind");
    }
}

#[test]
fn bad_ids_are_refused() {
    let dir = Dir::new();
    let w = dir.table("w.safetensors", &Table::new(Dtype::F32, VOCAB, DIM));
    let base = |ids: &str| ["--device", "cpu", "--weights", &w, "--ids", ids].map(String::from);
    let check = |ids: String, needles: &[&str]| {
        let args = base(&ids);
        assert_refused(&dir, &args.iter().map(String::as_str).collect::<Vec<_>>(), needles);
    };
    check(
        dir.npy("big.npy", &array![[0u32, 1, 2], [3, 4, 11]]),
        &["token id 11 at row 1, column 2", "11 rows"],
    );
    check(dir.npy("neg.npy", &array![[0i64, -1]]), &["token id -1 at row 0, column 1"]);
    check(dir.npy("neg32.npy", &array![5i32, -7]), &["token id -7 at row 0, column 1"]);
    check(dir.npy("huge.npy", &array![1i64 << 40]), &["token id 1099511627776"]);
    check(
        dir.npy("float.npy", &array![[1.0f32]]),
        &["float.npy", "ids has dtype '<f4'", "'<i4', '<i8' or '<u4'"],
    );
    check(
        dir.npy("rank3.npy", &Array::<u32, _>::zeros((1, 2, 3))),
        &["ids must have rank 1 or 2, got shape (1, 2, 3)"],
    );
    check(dir.npy("rank0.npy", &ndarray::arr0(1u32)), &["ids must have rank 1 or 2, got shape ()"]);
    let big_endian = crate::support::raw_npy_dict(
        "{'descr': '>i4', 'fortran_order': False, 'shape': (1,), }",
        &[0, 0, 0, 1],
    );
    check(dir.bytes("be.npy", &big_endian), &["'>i4' (big-endian)"]);
    let short = crate::support::raw_npy_dict(
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }",
        &[0; 12],
    );
    check(
        dir.bytes("short.npy", &short),
        &["short.npy: not a valid .npy file", "needs 16 bytes, but 12"],
    );
    let huge = crate::support::raw_npy_dict(
        "{'descr': '<i8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
        &[0; 8],
    );
    check(dir.bytes("huge_shape.npy", &huge), &["not a valid .npy file"]);
    check(
        dir.bytes("garbage.npy", b"definitely not numpy"),
        &["garbage.npy: not a valid .npy file", "magic"],
    );
    check(dir.bytes("empty.npy", b""), &["not a valid .npy file", "ended"]);
    check(
        dir.bytes(
            "dict.npy",
            &crate::support::raw_npy_dict("{'descr': '<i4', 'shape': (1,)}", &[0; 4]),
        ),
        &["\"fortran_order\" is missing"],
    );
    check(s(&dir.path("absent.npy")), &["absent.npy"]);
}

#[test]
fn bad_positions_and_offsets_are_refused() {
    let dir = Dir::new();
    let w = dir.table("w.safetensors", &Table::new(Dtype::F32, VOCAB, DIM));
    let ids = dir.npy("ids.npy", &array![[1u32, 2, 3], [4, 5, 6]]);
    let check = |extra: [&str; 2], needles: &[&str]| {
        let args = [&["--device", "cpu", "--weights", &w, "--ids", &ids][..], &extra].concat();
        assert_refused(&dir, &args, needles);
    };
    let transposed = dir.npy("t.npy", &Array2::<u32>::zeros((3, 2)));
    check(
        ["--positions", &transposed],
        &["positions (must match ids)", "expected [2, 3], got [3, 2]"],
    );
    let flat = dir.npy("flat.npy", &Array1::<u32>::zeros(6));
    check(["--positions", &flat], &["expected [2, 3], got [6]"]);
    let signed = dir.npy("signed.npy", &Array2::<i64>::zeros((2, 3)));
    check(["--positions", &signed], &["positions has dtype '<i8'", "allowed: '<u4'"]);
    let three = dir.npy("three.npy", &array![0u32, 1, 2]);
    check(["--offsets", &three], &["offsets (one per row of ids)", "expected [2], got [3]"]);
    let negative = dir.npy("neg.npy", &array![4i64, -5]);
    check(["--offsets", &negative], &["invalid offsets: -5 at index 1"]);
    let over = dir.npy("over.npy", &array![0i64, 1 << 32]);
    check(["--offsets", &over], &["invalid offsets: 4294967296 at index 1"]);
    let runs_past = dir.npy("past.npy", &array![0u32, u32::MAX - 1]);
    check(["--offsets", &runs_past], &["invalid offsets", "4294967294 at row 1 with 3 tokens"]);
    let f32_offsets = dir.npy("f.npy", &array![0.0f32, 1.0]);
    check(["--offsets", &f32_offsets], &["offsets has dtype '<f4'"]);
    let matrix = dir.npy("m.npy", &Array2::<u32>::zeros((2, 1)));
    check(["--offsets", &matrix], &["offsets must have rank 1, got shape (2, 1)"]);
}

#[test]
fn bad_tables_are_refused() {
    let dir = Dir::new();
    let ids = dir.npy("ids.npy", &array![[1u32, 2]]);
    let check = |weights: String, extra: &[&str], needles: &[&str]| {
        let args = [&["--device", "cpu", "--ids", &ids, "--weights", &weights][..], extra].concat();
        assert_refused(&dir, &args, needles);
    };
    let f32_bytes = |n: usize| vec![0u8; 4 * n];
    let two = dir.safetensors(
        "two.safetensors",
        &[
            ("a", StDtype::F32, vec![4, 8], f32_bytes(32)),
            ("b", StDtype::F32, vec![4, 8], f32_bytes(32)),
        ],
    );
    check(two.clone(), &[], &["2 2-D tensors and none named (--tensor NAME)", "\"a\", \"b\""]);
    check(
        two.clone(),
        &["--tensor", "c"],
        &["two.safetensors: no tensor named \"c\"", "\"a\", \"b\""],
    );
    let flat = dir.safetensors("flat.safetensors", &[("v", StDtype::F32, vec![8], f32_bytes(8))]);
    check(flat.clone(), &[], &["none is 2-D", "2-D tensors in the file: none"]);
    check(flat, &["--tensor", "v"], &["weights must have rank 2, got shape (8,)"]);
    let ints =
        dir.safetensors("ints.safetensors", &[("e", StDtype::I32, vec![4, 8], f32_bytes(32))]);
    check(ints, &[], &["weights has dtype I32", "F32, F16 or BF16"]);
    let f64s =
        dir.safetensors("f64.safetensors", &[("e", StDtype::F64, vec![4, 2], f32_bytes(16))]);
    check(f64s, &[], &["weights has dtype F64"]);
    let odd = dir.safetensors("odd.safetensors", &[("e", StDtype::F32, vec![4, 3], f32_bytes(12))]);
    check(
        odd,
        &[],
        &["invalid dim: 3 (the width of the table in", "odd.safetensors, variant vaswani)", "even"],
    );
    let wide = dir.safetensors(
        "wide.safetensors",
        &[("e", StDtype::F16, vec![1, 65538], vec![0; 2 * 65538])],
    );
    check(wide, &[], &["invalid dim: 65538"]);
    check(
        dir.bytes("garbage.safetensors", b"\x10\0\0\0\0\0\0\0{not json}......"),
        &[],
        &["not a valid .safetensors file"],
    );
    check(
        dir.bytes("tiny.bin", b"abc"),
        &[],
        &["tiny.bin: not a valid .safetensors file", "nor is it a .npy file"],
    );
    let good = fs::read(dir.table("good.safetensors", &Table::new(Dtype::F32, 4, 8))).unwrap();
    check(
        dir.bytes("cut.safetensors", &good[..good.len() - 1]),
        &[],
        &["not a valid .safetensors file", "tensor data"],
    );
    let mut long = good.clone();
    long.extend_from_slice(&[0; 4]);
    check(dir.bytes("long.safetensors", &long), &[], &["not a valid .safetensors file"]);
    let mut huge_header = good.clone();
    huge_header[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    check(
        dir.bytes("hh.safetensors", &huge_header),
        &[],
        &["the header length field says 18446744073709551615 bytes, over the limit"],
    );

    // Offsets that overlap or leave a gap say so (round fourteen: "invalid offset for
    // tensor `b`" alone).
    let raw = |name: &str, header: &str, data: usize| {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.resize(bytes.len() + data, 0);
        dir.bytes(name, &bytes)
    };
    let t = |name: &str, start: usize| {
        format!(
            r#""{name}":{{"dtype":"F32","shape":[4,8],"data_offsets":[{start},{}]}}"#,
            start + 128
        )
    };
    let overlap = raw("overlap.safetensors", &format!("{{{},{}}}", t("a", 0), t("b", 64)), 192);
    check(
        overlap,
        &["--tensor", "a"],
        &[
            "tensor \"b\": its data_offsets [64, 192] overlap: tensor \"a\" ends at 128",
            "end to end",
        ],
    );
    let gap = raw("gap.safetensors", &format!("{{{}}}", t("a", 16)), 144);
    check(
        gap,
        &[],
        &["tensor \"a\": its data_offsets [16, 144] leave a gap: the data begins at 0"],
    );
    let bits = dir.npy("bf16.npy", &Array2::from_elem((4, 8), bf16::ONE));
    check(bits, &[], &["weights has dtype '<u2'", "bfloat16 tables: use .safetensors"]);
    let npy_table = dir.npy("t.npy", &table_f32(4, 8));
    check(npy_table.clone(), &["--tensor", "embed"], &["invalid tensor: embed"]);
    let npy_odd = dir.npy("odd.npy", &table_f32(4, 5));
    check(npy_odd, &[], &["invalid dim: 5"]);
    let npy_3d = dir.npy("t3.npy", &Array::<f32, _>::zeros((2, 2, 2)));
    check(npy_3d, &[], &["weights must have rank 2, got shape (2, 2, 2)"]);
    check(s(&dir.path("absent.safetensors")), &[], &["absent.safetensors"]);
}

#[test]
fn bad_arguments_are_refused() {
    let dir = Dir::new();
    let w = dir.table("w.safetensors", &Table::new(Dtype::F32, VOCAB, DIM));
    let ids = dir.npy("ids.npy", &array![[1u32, 2]]);
    let pos = dir.npy("pos.npy", &array![[1u32, 2]]);
    let off = dir.npy("off.npy", &array![1u32]);
    let base = ["--device", "cpu", "--weights", &w, "--ids", &ids];
    let check = |extra: &[&str], needles: &[&str]| {
        assert_refused(&dir, &[&base[..], extra].concat(), needles);
    };
    for scale in ["nan", "NaN", "inf", "-inf", "1e39", "sqrt2", ""] {
        check(&["--scale", scale], &["--scale"]);
    }
    check(&["--base", "1"], &["invalid base: 1"]);
    check(&["--base", "nan"], &["invalid base"]);
    check(&["--pad-id", "-1"], &["--pad-id"]);
    check(&["--out-dtype", "f64"], &["--out-dtype"]);
    assert_refused(
        &dir,
        &["--device", "reference", "--weights", &w, "--ids", &ids],
        &["invalid value 'reference' for '--device"],
    );
    check(&["--positions", &pos, "--offsets", &off], &["--offsets"]);
    assert_refused(&dir, &["--weights", &w], &["--ids"]);
    assert_refused(&dir, &["--ids", &ids], &["--weights"]);
}

#[test]
fn an_unwritable_output_exits_1_and_creates_nothing() {
    let dir = Dir::new();
    let w = dir.table("w.safetensors", &Table::new(Dtype::F32, VOCAB, DIM));
    let ids = dir.npy("ids.npy", &array![[1u32, 2]]);
    let out = dir.path("no/such/dir/out.npy");
    let run =
        posenc(&["encode", "--device", "cpu", "--weights", &w, "--ids", &ids, "-o", &s(&out)]);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert_eq!(stderr(&run).lines().count(), 1, "{}", stderr(&run));
    assert!(stderr(&run).contains("no/such/dir/out.npy"));
    assert!(!dir.path("no").exists());
}

#[test]
fn an_existing_output_is_replaced_on_success() {
    let dir = Dir::new();
    let w = dir.table("w.safetensors", &Table::new(Dtype::F32, VOCAB, DIM));
    let ids = dir.npy("ids.npy", &array![[1u32, 2]]);
    let out = dir.path("out.npy");
    fs::write(&out, "previous output").unwrap();
    let run =
        posenc(&["encode", "--device", "cpu", "--weights", &w, "--ids", &ids, "-o", &s(&out)]);
    assert_ok(&run, "replace");
    assert_eq!(read_out(&s(&out)).dict, dict("<f4", "(1, 2, 8)"));
    assert_eq!(dir.files(), ["ids.npy", "out.npy", "w.safetensors"]);
}

#[test]
fn one_sequence_takes_one_offset_or_its_own_positions() {
    let dir = Dir::new();
    let table = Table::new(Dtype::F32, VOCAB, DIM);
    let weights = dir.table("w.safetensors", &table);
    let ids = array![4u32, 5, 6];
    let ids_path = dir.npy("ids.npy", &ids);
    let batch = ids.clone().into_shape_with_order((1, 3)).unwrap();
    let out = s(&dir.path("out.npy"));
    let args = ["encode", "--device", "cpu", "--weights", &weights, "--ids", &ids_path, "-o", &out];

    let offsets = dir.npy("off.npy", &array![1000i64]);
    assert_ok(&posenc(&[&args[..], &["--offsets", &offsets]].concat()), "--offsets [1]");
    let from = positions::from_offsets(&[1000], 3).unwrap();
    let want = expected(DIM, &table, batch.view(), from.view(), EncodeOptions::default());
    let got = read_out(&out);
    assert_eq!(got.dict, dict("<f4", "(3, 8)"));
    assert_eq!(got.bits, want.bits());

    let given = array![7u32, 0, 7];
    let pos = dir.npy("pos.npy", &given);
    assert_ok(&posenc(&[&args[..], &["--positions", &pos]].concat()), "--positions [L]");
    let given = given.into_shape_with_order((1, 3)).unwrap();
    let want = expected(DIM, &table, batch.view(), given.view(), EncodeOptions::default());
    assert_eq!(read_out(&out).bits, want.bits());
}

#[test]
fn an_output_over_the_size_limit_is_refused_before_any_work() {
    let dir = Dir::new();
    let w = dir.table("w.safetensors", &Table::new(Dtype::F32, 1, 4096));
    // 2^20 tokens x 4096 values is 2^32, twice MAX_OUTPUT_VALUES.
    let ids = dir.npy("ids.npy", &Array1::<u32>::zeros(1 << 20));
    assert_refused(
        &dir,
        &["--device", "cpu", "--weights", &w, "--ids", &ids],
        &["MAX_OUTPUT_VALUES", "the output [len, dim] would have shape (1048576, 4096)"],
    );
    // 2-D ids name the 3-D output.
    let ids = dir.npy("ids2.npy", &Array2::<u32>::zeros((2, 1 << 19)));
    assert_refused(
        &dir,
        &["--device", "cpu", "--weights", &w, "--ids", &ids],
        &["the output [batch, len, dim] would have shape (2, 524288, 4096)"],
    );
}

#[test]
fn fairseq_numbers_positions_from_the_padding_idx() {
    use posenc::Variant;
    let dir = Dir::new();
    let dim = 7;
    let table = Table::new(Dtype::F32, VOCAB, dim);
    let weights = dir.table("w.safetensors", &table);
    let ids = array![[1u32, 1, 5, 6], [7, 8, 9, 1]];
    let ids_path = dir.npy("ids.npy", &ids);
    let out = s(&dir.path("out.npy"));
    let args = ["encode", "--device", "cpu", "--weights", &weights, "--ids", &ids_path, "-o", &out];
    let run = posenc(&[&args[..], &["--variant", "fairseq"]].concat());
    assert_ok(&run, "fairseq");
    let spec = PeSpec::for_variant(Variant::Fairseq, dim as u32).unwrap();
    let pos = positions::fairseq(ids.view(), 1).unwrap();
    let want = cpu::encode(&spec, table.embeddings(), ids.view(), pos.view(), &Default::default());
    assert_eq!(read_out(&out).bits, want.unwrap().bits());

    let run = posenc(&[&args[..], &["--variant", "fairseq", "--padding-idx", "none"]].concat());
    assert_ok(&run, "fairseq, no padding");
    let spec = spec.with_padding_idx(None);
    let pos = positions::contiguous_batch(2, 4).unwrap();
    let want = cpu::encode(&spec, table.embeddings(), ids.view(), pos.view(), &Default::default());
    assert_eq!(read_out(&out).bits, want.unwrap().bits());
}

#[test]
fn learned_position_tables_replace_the_sinusoid() {
    let dir = Dir::new();
    let table = Table::new(Dtype::F32, VOCAB, DIM);
    let weights = dir.table("w.safetensors", &table);
    let learned = Array2::from_shape_fn((6, DIM), |(p, d)| f16::from_f32(value(p + 3, d)));
    let (dtype, shape, data) = Table::F16(learned.clone()).safetensors_parts();
    let p_st = dir.safetensors(
        "p.safetensors",
        &[("wpe", dtype, shape, data), ("other", StDtype::F32, vec![1, 1], vec![0; 4])],
    );
    let p_npy = dir.npy("p.npy", &learned);
    let ids = array![[1u32, 2, 3], [4, 5, 6]];
    let ids_path = dir.npy("ids.npy", &ids);
    let out = s(&dir.path("out.npy"));
    let args = ["encode", "--device", "cpu", "--weights", &weights, "--ids", &ids_path, "-o", &out];
    let pos = positions::contiguous_batch(2, 3).unwrap();
    let want = cpu::encode_learned(
        Embeddings::F16(learned.view()),
        table.embeddings(),
        ids.view(),
        pos.view(),
        &Default::default(),
    )
    .unwrap();
    for extra in [
        &["--position-table", &p_npy][..],
        &["--position-table", &p_st, "--position-tensor", "wpe"],
    ] {
        let run = posenc(&[&args[..], extra].concat());
        assert_ok(&run, &format!("{extra:?}"));
        assert_eq!(read_out(&out).bits, want.bits(), "{extra:?}");
    }
    if gpu_available("learned_position_tables_replace_the_sinusoid") {
        let mut gpu_args = args.to_vec();
        gpu_args[2] = "gpu";
        let run = posenc(&[&gpu_args[..], &["--position-table", &p_npy]].concat());
        assert_ok(&run, "gpu");
        assert_eq!(read_out(&out).bits, want.bits(), "gpu");
    }

    // Positions past the table, a width mismatch and sinusoid options are refused.
    let offsets = dir.npy("off.npy", &array![0u32, 4]);
    let base = ["--device", "cpu", "--weights", &weights, "--ids", &ids_path];
    assert_refused(
        &dir,
        &[&base[..], &["--position-table", &p_npy, "--offsets", &offsets]].concat(),
        &["position 6", "row 1, column 2", "6 rows"],
    );
    let narrow = dir.npy("narrow.npy", &Array2::<f32>::zeros((6, DIM - 2)));
    assert_refused(&dir, &[&base[..], &["--position-table", &narrow]].concat(), &["width", "6"]);
    assert_refused(
        &dir,
        &[&base[..], &["--position-table", &p_npy, "--variant", "fairseq"]].concat(),
        &["cannot be used"],
    );
    assert_refused(
        &dir,
        &[&base[..], &["--position-tensor", "wpe"]].concat(),
        &["--position-table"],
    );
    // The position table's tensor is named by its own flag (round fourteen: these named
    // --tensor and the weights).
    assert_refused(
        &dir,
        &[&base[..], &["--position-table", &p_st]].concat(),
        &["2 2-D tensors and none named (--position-tensor NAME)", "\"other\", \"wpe\""],
    );
    assert_refused(
        &dir,
        &[&base[..], &["--position-table", &p_npy, "--position-tensor", "wpe"]].concat(),
        &["invalid position_tensor: wpe", "a .safetensors position table"],
    );
}

/// `encode --inv-freq`: a model's own frequencies (here float64, from a .safetensors
/// tensor) in the sinusoid's place, as the library computes them; refused beside a learned
/// position table, which has no frequencies.
#[test]
fn inv_freq_reaches_the_encoding() {
    let dir = Dir::new();
    let table = Table::new(Dtype::F32, VOCAB, 16);
    let weights = dir.table("w.safetensors", &table);
    let ids = array![[1u32, 2, 3, 10]];
    let ids_path = dir.npy("ids.npy", &ids);
    let offsets = dir.npy("offsets.npy", &array![4_000_000_000u32]);
    let w: Vec<f64> = (0..8).map(|i| 0.8f64.powi(i) / 7.0).collect();
    let le: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let inv = dir.safetensors("inv.safetensors", &[("inv_freq", StDtype::F64, vec![8], le)]);
    let out = s(&dir.path("out.npy"));
    let args = ["encode", "--device", "cpu", "--weights", &weights, "--ids", &ids_path];
    let run =
        posenc(&[&args[..], &["--inv-freq", &inv, "--offsets", &offsets, "-o", &out]].concat());
    assert_ok(&run, "--inv-freq");
    let spec = PeSpec::new(16).unwrap().with_inv_freq(&w).unwrap();
    let positions = positions::from_offsets(&[4_000_000_000], 4).unwrap();
    let options = EncodeOptions::default();
    let want =
        cpu::encode(&spec, table.embeddings(), ids.view(), positions.view(), &options).unwrap();
    assert_eq!(read_out(&out).bits, want.bits());
    let run = posenc(
        &[&args[..], &["--inv-freq", &inv, "--position-table", &weights, "-o", &out]].concat(),
    );
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    assert!(stderr(&run).contains("cannot be used with"), "{}", stderr(&run));
}
