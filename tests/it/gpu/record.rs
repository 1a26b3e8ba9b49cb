//! Recorded passes ([`posenc::gpu::EncodePass`], `RopePass`, `AlibiPass`) against the CPU
//! path, bit for bit: ids and positions in device buffers, the caller's encoder, offsets,
//! chunked tables, ids outside the vocabulary, and a device the caller opened.

use half::{bf16, f16};
use ndarray::{Array2, ArrayView2};
use posenc::encode::{Dtype, Embeddings, EncodeOptions, Encoded};
use posenc::gpu::{Context, EncodePass, EncodePassDescriptor, Positions};
use posenc::{Error, PeSpec, Variant, cpu};
use wgpu::util::DeviceExt;

use crate::support::{Rng, downlevel_gpu, gpu, random_table};

const DTYPES: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::Bf16];

/// A table in every storage type.
struct Tables {
    f32: Array2<f32>,
    f16: Array2<f16>,
    bf16: Array2<bf16>,
}

impl Tables {
    fn new(rng: &mut Rng, vocab: usize, dim: usize) -> Self {
        let f32 = random_table(rng, vocab, dim);
        Self { f16: f32.mapv(f16::from_f32), bf16: f32.mapv(bf16::from_f32), f32 }
    }
    fn view(&self, dtype: Dtype) -> Embeddings<'_> {
        match dtype {
            Dtype::F32 => Embeddings::F32(self.f32.view()),
            Dtype::F16 => Embeddings::F16(self.f16.view()),
            Dtype::Bf16 => Embeddings::Bf16(self.bf16.view()),
        }
    }
}

/// A storage buffer holding `words` after `pad` zero words.
fn words_buffer(ctx: &Context, pad: usize, words: &[u32]) -> wgpu::Buffer {
    let mut all = vec![0u32; pad];
    all.extend_from_slice(words);
    all.push(0);
    ctx.device().create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("test.words"),
        contents: bytemuck::cast_slice(&all),
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
    })
}

/// An output buffer of `bytes` filled with 0xAB, so untouched bytes show.
fn out_buffer(ctx: &Context, bytes: u64) -> wgpu::Buffer {
    ctx.device().create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("test.out"),
        contents: &vec![0xABu8; bytes as usize],
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
    })
}

/// The CPU result's bytes as the GPU lays them out.
fn cpu_bytes(e: &Encoded) -> Vec<u8> {
    match e {
        Encoded::F32(a) => a.iter().flat_map(|v| v.to_le_bytes()).collect(),
        Encoded::F16(a) => a.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect(),
        Encoded::Bf16(a) => a.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect(),
    }
}

/// The positions of every token, from per-sequence starts.
fn expand(starts: &[u32], len: usize) -> Array2<u32> {
    Array2::from_shape_fn((starts.len(), len), |(b, t)| starts[b].wrapping_add(t as u32))
}

/// Records one step of `pass` at the given word offsets, submits it and returns the output
/// bytes of the step, checking that the bytes around them are untouched.
fn run_step(
    ctx: &Context,
    pass: &EncodePass,
    ids: &[u32],
    positions: &[u32],
    offsets: [usize; 3],
) -> Vec<u8> {
    let ids_buf = words_buffer(ctx, offsets[0], ids);
    let pos_buf = words_buffer(ctx, offsets[1], positions);
    let out_at = offsets[2] as u64 * 4;
    let out_bytes = pass.output_bytes().next_multiple_of(4);
    let out = out_buffer(ctx, out_at + out_bytes + 8);
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    pass.record(
        &mut encoder,
        ids_buf.slice(offsets[0] as u64 * 4..),
        pos_buf.slice(offsets[1] as u64 * 4..),
        out.slice(out_at..),
    )
    .unwrap();
    ctx.queue().submit([encoder.finish()]);
    let all = ctx.read_buffer(&out).unwrap();
    assert!(all[..out_at as usize].iter().all(|&b| b == 0xAB), "bytes before the output");
    assert!(all[(out_at + out_bytes) as usize..].iter().all(|&b| b == 0xAB), "bytes after");
    all[out_at as usize..(out_at + pass.output_bytes()) as usize].to_vec()
}

fn assert_same(what: &str, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "{what}: sizes");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!("{what}: first differing byte {i}: gpu {:#x}, cpu {:#x}", got[i], want[i]);
    }
}

/// The context in both access patterns: the coalesced one records the unit kernel whole,
/// the adjacent one (a CPU adapter's default) splits it into a scan, the cached tokens and
/// an indirect dispatch for the rest (see `shaders/encode_pass_x4.wgsl`).
fn both_patterns(ctx: &Context) -> [Context; 2] {
    use posenc::gpu::AccessPattern;
    [
        ctx.with_access_pattern(AccessPattern::Coalesced),
        ctx.with_access_pattern(AccessPattern::Adjacent),
    ]
}

#[test]
fn recorded_encode_equals_cpu_bit_for_bit() {
    let Some(base) = gpu() else { return };
    recorded_encodes_equal_the_cpu(base, 71, 48);
}

/// `cases` random recorded encodes on `base` in both access patterns against the CPU, bit
/// for bit: variants, dims on and off whole units, every table and output type, per-token
/// and per-sequence positions near 0, past the cache and at the top of u32, pad ids, three
/// cache sizes and random offsets.
fn recorded_encodes_equal_the_cpu(base: &Context, seed: u64, cases: usize) {
    let contexts = both_patterns(base);
    let mut rng = Rng::new(seed);
    let variants = [Variant::Vaswani, Variant::DistilBert, Variant::Marian, Variant::Fairseq];
    for case in 0..cases {
        let ctx = &contexts[(case / 2) % 2];
        let variant = variants[case % variants.len()];
        let mut dim = 1 + rng.below(40) as u32;
        if matches!(variant, Variant::Vaswani) {
            dim += dim % 2;
        }
        if matches!(variant, Variant::Fairseq) {
            dim = dim.max(4);
        }
        // Half the cases have rows of whole units of four (the unit kernel).
        if (case / 4) % 2 == 0 {
            dim = dim.next_multiple_of(4);
        }
        let spec = PeSpec::for_variant(variant, dim).unwrap();
        let vocab = 1 + rng.below(200) as usize;
        let tables = Tables::new(&mut rng, vocab, dim as usize);
        let in_dtype = DTYPES[case % 3];
        let out_dtype = DTYPES[(case / 3) % 3];
        let per_sequence = case % 2 == 1;
        let batch = 1 + rng.below(4) as usize;
        let mut len = [1, 2, 7, 33][rng.below(4) as usize];
        // 16-bit output needs an even number of elements per step.
        if out_dtype != Dtype::F32 && (batch * len * dim as usize) % 2 == 1 {
            len += 1;
        }
        let pad_id = (case % 4 == 0).then_some(vocab as u32 + 5);
        let ids = Array2::from_shape_fn((batch, len), |_| {
            let id = rng.below(vocab as u64 + 1) as u32;
            if id == vocab as u32 { pad_id.unwrap_or(0) } else { id }
        });
        // Starts near 0 (cached rows), past the cache, and at the top of u32.
        let starts: Vec<u32> = (0..batch)
            .map(|b| match (case + b) % 3 {
                0 => rng.below(100) as u32,
                1 => 100_000 + rng.below(1 << 30) as u32,
                _ => u32::MAX - (len as u32 - 1) - rng.below(3) as u32,
            })
            .collect();
        let positions = if per_sequence {
            expand(&starts, len)
        } else {
            Array2::from_shape_fn((batch, len), |_| match rng.below(3) {
                0 => rng.below(64) as u32,
                1 => rng.next_u32(),
                _ => u32::MAX - rng.below(4) as u32,
            })
        };
        let options = EncodeOptions { pad_id, out_dtype, ..Default::default() };
        let table = ctx.upload_table(tables.view(in_dtype)).unwrap();
        let cached_positions = [0, 64, 4096][case % 3];
        let desc = EncodePassDescriptor {
            batch,
            len,
            positions: if per_sequence { Positions::PerSequence } else { Positions::PerToken },
            options,
            cached_positions,
            max_positions: None,
        };
        let pass = ctx.encode_pass(&spec, &table, &desc).unwrap();
        let pos_words: Vec<u32> =
            if per_sequence { starts.clone() } else { positions.iter().copied().collect() };
        let ids_words: Vec<u32> = ids.iter().copied().collect();
        let offsets = [rng.below(70) as usize, rng.below(70) as usize, rng.below(70) as usize];
        let got = run_step(ctx, &pass, &ids_words, &pos_words, offsets);
        let want =
            cpu::encode(&spec, tables.view(in_dtype), ids.view(), positions.view(), &options)
                .unwrap();
        let what = format!(
            "case {case}: {variant:?} d={dim} {in_dtype:?}->{out_dtype:?} [{batch}, {len}] \
             per_sequence={per_sequence} cached={cached_positions} offsets={offsets:?} \
             {:?}",
            ctx.access_pattern()
        );
        assert_same(&what, &got, &cpu_bytes(&want));
        assert_eq!(pass.read_faults().unwrap().bad_ids, 0, "{what}");
    }
}

#[test]
fn float32_and_given_frequencies_and_start_index_are_recorded_exactly() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(5);
    let given: Vec<f64> = (0..8).map(|i| 0.9f64.powi(3 * i) / 3.0).collect();
    let specs = [
        PeSpec::new(32).unwrap().with_frequencies(posenc::Frequencies::F32),
        PeSpec::for_variant(Variant::Fairseq, 33).unwrap(),
        PeSpec::for_variant(Variant::Tensor2Tensor, 31).unwrap(),
        PeSpec::for_variant(Variant::Whisper, 24).unwrap(),
        PeSpec::new(16).unwrap().with_start_index(u32::MAX - 3),
        // A model's own frequencies, as given (float64, none a float32) and in float32.
        PeSpec::new(16).unwrap().with_inv_freq(&given).unwrap(),
        PeSpec::for_variant(Variant::Marian, 15)
            .unwrap()
            .with_inv_freq(&given)
            .unwrap()
            .with_frequencies(posenc::Frequencies::F32),
    ];
    for spec in specs {
        let dim = spec.dim() as usize;
        let tables = Tables::new(&mut rng, 50, dim);
        let table = ctx.upload_table(tables.view(Dtype::F32)).unwrap();
        let ids = Array2::from_shape_fn((2, 6), |_| rng.below(50) as u32);
        let positions = Array2::from_shape_fn((2, 6), |(_, t)| match t {
            0 => 0,
            1 => 1,
            2 => 2,
            3 => rng.next_u32(),
            4 => u32::MAX,
            _ => 4097,
        });
        for cached_positions in [0, 8] {
            let desc =
                EncodePassDescriptor { batch: 2, len: 6, cached_positions, ..Default::default() };
            let pass = ctx.encode_pass(&spec, &table, &desc).unwrap();
            let ids_words: Vec<u32> = ids.iter().copied().collect();
            let pos_words: Vec<u32> = positions.iter().copied().collect();
            let got = run_step(ctx, &pass, &ids_words, &pos_words, [0, 0, 0]);
            let want = cpu::encode(
                &spec,
                tables.view(Dtype::F32),
                ids.view(),
                positions.view(),
                &EncodeOptions::default(),
            )
            .unwrap();
            assert_same(&format!("{spec:?} cached={cached_positions}"), &got, &cpu_bytes(&want));
        }
    }
}

#[test]
fn chunked_tables_take_one_dispatch_per_window_and_the_same_bits() {
    let Some(base) = gpu() else { return };
    chunked_tables_keep_the_bits(base, false);
}

/// A table in 10-row chunks, recorded by a pass of the same capped context (so its output
/// goes in parts too), or with `uncapped_pass` of the uncapped one (for a device whose
/// storage alignment leaves no room for an output row in so small a binding).
fn chunked_tables_keep_the_bits(base: &Context, uncapped_pass: bool) {
    let mut rng = Rng::new(9);
    let (vocab, dim) = (997usize, 24usize);
    let tables = Tables::new(&mut rng, vocab, dim);
    for (dtype, patterned) in DTYPES.into_iter().flat_map(|d| both_patterns(base).map(|c| (d, c))) {
        // 10 rows per chunk: 100 chunks, far more than one dispatch binds.
        let ctx = patterned.with_max_binding_size((10 * dim * dtype.size()) as u64);
        let table = ctx.upload_table(tables.view(dtype)).unwrap();
        assert_eq!(table.n_chunks(), 100);
        let (batch, len) = (3usize, 2usize);
        let ids = Array2::from_shape_fn((batch, len), |_| rng.below(vocab as u64) as u32);
        let starts = [0u32, 5000, u32::MAX - 1];
        let options = EncodeOptions { out_dtype: dtype, ..Default::default() };
        let desc = EncodePassDescriptor {
            batch,
            len,
            positions: Positions::PerSequence,
            options,
            ..Default::default()
        };
        let spec = PeSpec::new(dim as u32).unwrap();
        let ctx = if uncapped_pass { patterned } else { ctx };
        let pass = ctx.encode_pass(&spec, &table, &desc).unwrap();
        assert!(pass.dispatches() > 1, "{dtype:?}: {} dispatches", pass.dispatches());
        let ids_words: Vec<u32> = ids.iter().copied().collect();
        let positions = expand(&starts, len);
        let want =
            cpu::encode(&spec, tables.view(dtype), ids.view(), positions.view(), &options).unwrap();
        // The output at a whole unit's offset (the unit kernel) and at a word's (the general).
        for offsets in [[1, 2, 4], [1, 2, 3]] {
            let got = run_step(&ctx, &pass, &ids_words, &starts, offsets);
            let what = format!("{dtype:?} {:?} {offsets:?}", ctx.access_pattern());
            assert_same(&what, &got, &cpu_bytes(&want));
        }
    }
}

/// With a scale, `s * e + pe` is two roundings on the CPU; WGSL would let a backend fuse
/// it into one fma (the H100's Vulkan driver did, in this kernel, before the product was
/// rounded first: shaders/shared/rounded.wgsl), so this holds the recorded kernels to the
/// CPU's bits. Both access patterns, cached and computed positions.
#[test]
fn recorded_encode_with_a_scale_equals_the_cpu_bit_for_bit() {
    use posenc::encode::Scale;
    let Some(base) = gpu() else { return };
    let mut rng = Rng::new(17);
    let (vocab, dim, batch) = (53usize, 40usize, 4usize);
    let tables = Tables::new(&mut rng, vocab, dim);
    let spec = PeSpec::new(dim as u32).unwrap();
    let ids: Vec<u32> = (0..batch).map(|_| rng.below(vocab as u64) as u32).collect();
    let starts = [3u32, 9000, 4095, u32::MAX];
    let id_arr = Array2::from_shape_vec((batch, 1), ids.clone()).unwrap();
    let pos_arr = expand(&starts, 1);
    for ctx in &both_patterns(base) {
        let table = ctx.upload_table(tables.view(Dtype::F32)).unwrap();
        for scale in [Scale::SqrtDim, Scale::Value(-3.7)] {
            let options = EncodeOptions { scale, ..Default::default() };
            let desc = EncodePassDescriptor {
                batch,
                positions: Positions::PerSequence,
                options,
                ..Default::default()
            };
            let pass = ctx.encode_pass(&spec, &table, &desc).unwrap();
            let got = run_step(ctx, &pass, &ids, &starts, [0, 0, 0]);
            let want = cpu::encode(
                &spec,
                tables.view(Dtype::F32),
                id_arr.view(),
                pos_arr.view(),
                &options,
            )
            .unwrap();
            let what = format!("{scale:?} {:?}", ctx.access_pattern());
            assert_same(&what, &got, &cpu_bytes(&want));
        }
    }
}

#[test]
fn ids_outside_the_vocabulary_give_zero_rows_and_count_as_faults() {
    let Some(base) = gpu() else { return };
    for ctx in &both_patterns(base) {
        ids_outside_the_vocabulary(ctx);
    }
}

fn ids_outside_the_vocabulary(ctx: &Context) {
    let mut rng = Rng::new(3);
    let (vocab, dim) = (40usize, 8usize);
    let tables = Tables::new(&mut rng, vocab, dim);
    let table = ctx.upload_table(tables.view(Dtype::F32)).unwrap();
    let spec = PeSpec::new(dim as u32).unwrap();
    let desc = EncodePassDescriptor { batch: 1, len: 6, ..Default::default() };
    let pass = ctx.encode_pass(&spec, &table, &desc).unwrap();
    let indirect = ctx
        .adapter()
        .get_downlevel_capabilities()
        .flags
        .contains(wgpu::DownlevelFlags::INDIRECT_EXECUTION);
    let split = indirect && ctx.access_pattern() == posenc::gpu::AccessPattern::Adjacent;
    assert_eq!(pass.dispatches(), if split { 3 } else { 1 }, "{:?}", ctx.access_pattern());
    let ids = [3u32, 40, 7, u32::MAX, 41, 9];
    // Cached positions and computed ones (the split's late stage), bad ids at both.
    let positions = [0u32, 9000, 2, 100_000, 4, 70_000];
    let got = run_step(ctx, &pass, &ids, &positions, [0, 0, 0]);
    let got: Vec<f32> = bytemuck::pod_collect_to_vec(&got);
    for (t, &id) in ids.iter().enumerate() {
        let row = &got[t * dim..(t + 1) * dim];
        if id as usize >= vocab {
            assert!(row.iter().all(|v| v.to_bits() == 0), "token {t} (id {id}): {row:?}");
        } else {
            let want = cpu::encode(
                &spec,
                tables.view(Dtype::F32),
                ArrayView2::from_shape((1, 1), &ids[t..t + 1]).unwrap(),
                ArrayView2::from_shape((1, 1), &positions[t..t + 1]).unwrap(),
                &EncodeOptions::default(),
            )
            .unwrap()
            .into_f32()
            .unwrap();
            assert_eq!(row, want.as_slice().unwrap(), "token {t}");
        }
    }
    let faults = pass.read_faults().unwrap();
    assert_eq!(faults.bad_ids, 3);
    assert_eq!(faults.largest_bad_id, Some(u32::MAX));
    // They accumulate until reset.
    run_step(ctx, &pass, &ids, &positions, [0, 0, 0]);
    assert_eq!(pass.read_faults().unwrap().bad_ids, 6);
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    pass.record_reset_faults(&mut encoder);
    ctx.queue().submit([encoder.finish()]);
    assert_eq!(pass.read_faults().unwrap(), posenc::gpu::Faults::default());
}

#[test]
fn several_steps_in_one_encoder_each_use_their_own_buffers() {
    // Parameters written through the queue would land before the whole submission and the
    // last step's would win; the pass's are fixed per set of buffers.
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(12);
    let (vocab, dim) = (64usize, 16usize);
    let tables = Tables::new(&mut rng, vocab, dim);
    let table = ctx.upload_table(tables.view(Dtype::Bf16)).unwrap();
    let spec = PeSpec::new(dim as u32).unwrap();
    let options = EncodeOptions { out_dtype: Dtype::Bf16, ..Default::default() };
    let desc = EncodePassDescriptor {
        batch: 2,
        len: 1,
        positions: Positions::PerSequence,
        options,
        ..Default::default()
    };
    let pass = ctx.encode_pass(&spec, &table, &desc).unwrap();
    let steps = 6usize;
    let ids: Vec<u32> = (0..2 * steps).map(|_| rng.below(vocab as u64) as u32).collect();
    let ids_buf = words_buffer(ctx, 0, &ids);
    let starts: Vec<u32> = (0..2 * steps as u32).map(|k| 1000 * k).collect();
    let pos_buf = words_buffer(ctx, 0, &starts);
    let step_bytes = pass.output_bytes();
    let out = out_buffer(ctx, step_bytes * steps as u64);
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    for s in 0..steps as u64 {
        pass.record(
            &mut encoder,
            ids_buf.slice(8 * s..),
            pos_buf.slice(8 * s..),
            out.slice(step_bytes * s..),
        )
        .unwrap();
    }
    ctx.queue().submit([encoder.finish()]);
    let got = ctx.read_buffer(&out).unwrap();
    let ids = Array2::from_shape_vec((2 * steps, 1), ids).unwrap();
    let positions = Array2::from_shape_vec((2 * steps, 1), starts).unwrap();
    let want = cpu::encode(&spec, tables.view(Dtype::Bf16), ids.view(), positions.view(), &options)
        .unwrap();
    assert_same("six steps", &got, &cpu_bytes(&want));
}

#[test]
fn bad_arguments_are_refused_before_anything_is_recorded() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(4);
    let tables = Tables::new(&mut rng, 10, 7);
    let table = ctx.upload_table(tables.view(Dtype::F32)).unwrap();
    let spec7 = PeSpec::for_variant(Variant::DistilBert, 7).unwrap();
    let spec8 = PeSpec::new(8).unwrap();
    let desc = |batch, len, out_dtype| EncodePassDescriptor {
        batch,
        len,
        options: EncodeOptions { out_dtype, ..Default::default() },
        ..Default::default()
    };
    let e = ctx.encode_pass(&spec8, &table, &desc(1, 1, Dtype::F32)).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    // 7 bf16 elements: the last word would be half the caller's.
    let e = ctx.encode_pass(&spec7, &table, &desc(1, 1, Dtype::Bf16)).unwrap_err();
    assert!(matches!(e, Error::Shape { op: "encode_pass", .. }), "{e}");
    // It says what is needed and what was given (round fourteen: "needs 7 but the limit an
    // even number is 6").
    let text = e.to_string();
    assert!(text.contains("an even count") && text.contains("got 7 (1 x 1 x 7)"), "{e}");
    assert!(ctx.encode_pass(&spec7, &table, &desc(2, 1, Dtype::Bf16)).is_ok());
    let huge = ctx.encode_pass(&spec7, &table, &desc(1 << 40, 1, Dtype::F32)).unwrap_err();
    assert!(matches!(huge, Error::Limit { .. }), "{huge}");
    // A step's ids are bound whole (outputs go in parts): 132 ids past a 512-byte binding
    // are refused here, not at every record.
    let small = ctx.with_max_binding_size(512);
    let small_table = small.upload_table(tables.view(Dtype::F32)).unwrap();
    let e = small.encode_pass(&spec7, &small_table, &desc(4, 33, Dtype::F32)).unwrap_err();
    assert!(matches!(e, Error::Limit { what: "ids", requested: 528, limit: 512, .. }), "{e}");
    let per_sequence =
        EncodePassDescriptor { positions: Positions::PerSequence, ..desc(4, 32, Dtype::F32) };
    small.encode_pass(&spec7, &small_table, &per_sequence).unwrap();
    // A step of no tokens records nothing and reads no positions, per sequence too: it
    // asked for a start per sequence (20 bytes here; round twenty-one of the hostile
    // probes).
    let no_tokens = EncodePassDescriptor { len: 0, ..per_sequence };
    let empty = EncodePassDescriptor { batch: 5, ..no_tokens };
    let empty = ctx.encode_pass(&spec7, &table, &empty).unwrap();
    assert_eq!((empty.ids_bytes(), empty.positions_bytes(), empty.output_bytes()), (0, 0, 0));
    // And says so: no parts, no dispatches (round twenty-six: 1 and 3, where an engine may
    // size its timestamp queries by them).
    assert_eq!((empty.parts(), empty.dispatches()), (0, 0));
    let (word, word_out) = (words_buffer(ctx, 0, &[7]), out_buffer(ctx, 4));
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    empty.record(&mut encoder, word.slice(..4), word.slice(..4), word_out.slice(..)).unwrap();
    // Sizes whose product overflows, and sequences past u32 in an empty step.
    for (batch, len, what) in [
        (usize::MAX, 2, "sequences per step"),
        (2, usize::MAX, "tokens per step"),
        (usize::MAX, 0, "sequences per step"),
    ] {
        let sequences = EncodePassDescriptor {
            positions: Positions::PerSequence,
            ..desc(batch, len, Dtype::F32)
        };
        let e = ctx.encode_pass(&spec7, &table, &sequences).unwrap_err();
        assert!(matches!(e, Error::Limit { what: w, .. } if w == what), "{batch} x {len}: {e}");
    }

    let pass = ctx.encode_pass(&spec7, &table, &desc(2, 3, Dtype::F32)).unwrap();
    let good = words_buffer(ctx, 0, &[0; 6]);
    let out = out_buffer(ctx, pass.output_bytes());
    let uniform = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 256,
        usage: wgpu::BufferUsages::UNIFORM,
        mapped_at_creation: false,
    });
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    let e =
        pass.record(&mut encoder, uniform.slice(..), good.slice(..), out.slice(..)).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { field: "ids", .. }), "{e}");
    let e = pass.record(&mut encoder, good.slice(2..), good.slice(..), out.slice(..)).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { field: "ids", .. }), "{e}");
    assert!(e.to_string().contains("offset 2"), "{e}");
    let e = pass.record(&mut encoder, good.slice(8..), good.slice(..), out.slice(..)).unwrap_err();
    assert!(matches!(e, Error::Shape { what: "ids", .. }), "{e}");
    let e = pass.record(&mut encoder, good.slice(..), good.slice(..), out.slice(4..)).unwrap_err();
    assert!(matches!(e, Error::Shape { what: "out", .. }), "{e}");
    // ids or positions in the output's buffer are copied first, which takes COPY_SRC.
    let arena = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 256 + pass.output_bytes().next_multiple_of(4),
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    for (ids, positions, field) in [
        (arena.slice(..24), good.slice(..), "ids"),
        (good.slice(..), arena.slice(..24), "positions"),
    ] {
        let e = pass.record(&mut encoder, ids, positions, arena.slice(256..)).unwrap_err();
        assert!(matches!(e, Error::InvalidParameter { field: f, .. } if f == field), "{e}");
        assert!(e.to_string().contains("COPY_SRC"), "{e}");
    }
    // The pass's own faults buffer, bound read-write by its dispatches, is no step's
    // input or output: as ids it made wgpu panic at the finish, as out it overwrote the
    // counters and the spec's words (round five of the hostile probes).
    let faults = pass.faults_buffer().clone();
    for (ids, positions, out, field) in [
        (faults.slice(..4), good.slice(..), out.slice(..), "ids"),
        (good.slice(..), faults.slice(..4), out.slice(..), "positions"),
        (good.slice(..), good.slice(..), faults.slice(..), "out"),
    ] {
        let e = pass.record(&mut encoder, ids, positions, out).unwrap_err();
        assert!(matches!(e, Error::InvalidParameter { field: f, .. } if f == field), "{e}");
        assert!(e.to_string().contains("faults buffer"), "{e}");
    }
    // Nothing was recorded: the encoder still finishes cleanly.
    ctx.queue().submit([encoder.finish()]);
    ctx.wait_idle().unwrap();
}

/// Rotates `x` with a recorded [`posenc::gpu::RopePass`] (data at `data_at`, a multiple of
/// 256 bytes, in a larger buffer) and checks it against the host-array GPU path bit for bit
/// and against the CPU, bit for bit too; bytes around the tensor stay.
#[allow(clippy::too_many_arguments)]
fn check_rope_pass<T: posenc::rope::Element>(
    ctx: &Context,
    what: &str,
    spec: &posenc::rope::RopeSpec,
    layout: posenc::rope::Layout,
    shape: [usize; 4],
    starts: &[u32],
    per_sequence: bool,
    seed: u64,
) {
    use crate::support::rope::{assert_rope_same, tensor};
    let x = tensor::<T>(shape, seed);
    let (batch, len, ..) = layout.dims(shape);
    let positions = if per_sequence {
        expand(starts, len)
    } else {
        Array2::from_shape_fn((batch, len), |(b, l)| starts[(b * len + l) % starts.len()])
    };
    let desc = posenc::gpu::RopePassDescriptor {
        shape,
        layout,
        dtype: T::DTYPE,
        positions: if per_sequence { Positions::PerSequence } else { Positions::PerToken },
        k_heads: 0,
    };
    let pass = ctx.rope_pass(spec, &desc).unwrap();
    // At the storage alignment, and 3 units of the pass's data alignment past it (16 bytes
    // for the vec4 kernel, 4 for the general one): the kernel skips the difference.
    for data_at in [512u64, 512 + 3 * pass.data_alignment()] {
        let what = format!("{what} data at {data_at}");
        let bytes: &[u8] = bytemuck::cast_slice(x.as_slice().unwrap());
        let mut contents = vec![0xCDu8; data_at as usize];
        contents.extend_from_slice(bytes);
        contents.resize(contents.len().next_multiple_of(4) + 12, 0xCD);
        let data = ctx.device().create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("test.qk"),
            contents: &contents,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        });
        let pos_words: Vec<u32> =
            if per_sequence { starts.to_vec() } else { positions.iter().copied().collect() };
        let pos_buf = words_buffer(ctx, 3, &pos_words);
        let mut encoder = ctx.device().create_command_encoder(&Default::default());
        pass.record(&mut encoder, data.slice(data_at..), pos_buf.slice(12..)).unwrap();
        ctx.queue().submit([encoder.finish()]);
        let all = ctx.read_buffer(&data).unwrap();
        let end = data_at as usize + bytes.len();
        assert!(all[..data_at as usize].iter().all(|&b| b == 0xCD), "{what}: bytes before");
        assert!(all[end.next_multiple_of(4)..].iter().all(|&b| b == 0xCD), "{what}: bytes after");
        let got: Vec<T> = bytemuck::pod_collect_to_vec(&all[data_at as usize..end]);
        let got = ndarray::Array4::from_shape_vec(x.raw_dim(), got).unwrap();
        let host = ctx.rope(spec, x.view(), positions.view(), layout).unwrap();
        assert!(
            got.iter()
                .zip(host.iter())
                .all(|(a, b)| bytemuck::bytes_of(a) == bytemuck::bytes_of(b)),
            "{what}: the recorded pass differs from Context::rope"
        );
        let c = cpu::rope(spec, x.view(), positions.view(), layout).unwrap();
        assert_rope_same(&what, positions.view(), layout, got.view(), c.view());
    }
}

#[test]
fn recorded_rope_equals_the_other_paths() {
    use posenc::rope::{Layout, Llama3, Pairing, RopeSpec, Scaling};
    let Some(ctx) = gpu() else { return };
    let llama3 = RopeSpec::new(64)
        .unwrap()
        .with_scaling(Scaling::Llama3(Llama3::new(8.0, 1.0, 4.0, 8192)))
        .unwrap();
    let specs = [
        ("llama3 64 (vec4 kernel)", llama3),
        ("gptj 32", RopeSpec::new(32).unwrap().with_pairing(Pairing::Gptj)),
        ("partial 10/6 (general kernel)", RopeSpec::partial(10, 6).unwrap()),
        ("odd 9/8", RopeSpec::partial(9, 8).unwrap()),
    ];
    let starts = [0u32, 17, 70_000, u32::MAX - 4];
    for (k, (what, spec)) in specs.iter().enumerate() {
        let dh = spec.head_dim() as usize;
        for (j, layout) in [Layout::Blhd, Layout::Bhld].into_iter().enumerate() {
            let per_sequence = (k + j) % 2 == 0;
            let shape = match layout {
                Layout::Blhd => [4, 5, 3, dh],
                Layout::Bhld => [4, 3, 5, dh],
            };
            let seed = (10 * k + j) as u64;
            let what = format!("{what} {layout:?} per_sequence={per_sequence}");
            check_rope_pass::<f32>(ctx, &what, spec, layout, shape, &starts, per_sequence, seed);
            check_rope_pass::<bf16>(ctx, &what, spec, layout, shape, &starts, per_sequence, seed);
            check_rope_pass::<f16>(ctx, &what, spec, layout, shape, &starts, per_sequence, seed);
        }
    }
}

/// A tensor larger than one storage binding is rotated in parts, each bound at its own
/// range: the vec4 kernel, the general one and the general one's two-row groups (16-bit
/// rows of odd length), both layouts, with a cap of a third of the tensor.
#[test]
fn recorded_rope_larger_than_a_binding_is_rotated_in_parts() {
    use posenc::rope::{Layout, RopeSpec};
    let Some(ctx) = gpu() else { return };
    let specs = [
        ("vec4 64", RopeSpec::new(64).unwrap()),
        ("general 10/6", RopeSpec::partial(10, 6).unwrap()),
        ("odd 9/8", RopeSpec::partial(9, 8).unwrap()),
    ];
    let starts = [70_000u32, u32::MAX - 2];
    for (k, (what, spec)) in specs.iter().enumerate() {
        let dh = spec.head_dim() as usize;
        for (j, layout) in [Layout::Blhd, Layout::Bhld].into_iter().enumerate() {
            let shape = match layout {
                Layout::Blhd => [2, 4, 64, dh],
                Layout::Bhld => [2, 64, 4, dh],
            };
            for (size, dtype) in [(4, Dtype::F32), (2, Dtype::F16), (2, Dtype::Bf16)] {
                let total = (512 * dh * size) as u64;
                let capped = ctx.with_max_binding_size(total / 3 + 256);
                let desc = posenc::gpu::RopePassDescriptor {
                    shape,
                    layout,
                    dtype,
                    positions: Positions::PerSequence,
                    k_heads: 0,
                };
                let pass = capped.rope_pass(spec, &desc).unwrap();
                // 4 at a 256-byte storage alignment; more where it is finer.
                assert!(pass.parts() >= 3, "{what} {layout:?} {dtype:?}: {}", pass.parts());
                assert_eq!(pass.dispatches(), 1 + pass.parts());
                let what = format!("{what} {layout:?} in parts");
                let seed = (10 * k + j) as u64;
                match dtype {
                    Dtype::F32 => check_rope_pass::<f32>(
                        &capped, &what, spec, layout, shape, &starts, true, seed,
                    ),
                    Dtype::F16 => check_rope_pass::<f16>(
                        &capped, &what, spec, layout, shape, &starts, true, seed,
                    ),
                    _ => check_rope_pass::<bf16>(
                        &capped, &what, spec, layout, shape, &starts, true, seed,
                    ),
                }
            }
        }
    }
    // 16-bit rows of odd length in an odd count (one part ends in a pad half; a single
    // row is a group of one), and a tensor exactly one binding large at offsets off the
    // storage alignment (its binding would start before it: it goes in parts).
    let odd = RopeSpec::partial(9, 8).unwrap();
    for shape in [[1, 1, 3, 9], [1, 1, 1, 9], [3, 1, 1, 9]] {
        let what = format!("odd rows {shape:?}");
        check_rope_pass::<f16>(ctx, &what, &odd, Layout::Blhd, shape, &starts[..1], false, 7);
        check_rope_pass::<bf16>(ctx, &what, &odd, Layout::Blhd, shape, &starts[..1], false, 7);
    }
    let spec = RopeSpec::new(64).unwrap();
    let exact = ctx.with_max_binding_size(4 * 8 * 64 * 4);
    let shape = [1, 4, 8, 64];
    check_rope_pass::<f32>(
        &exact,
        "one binding exactly",
        &spec,
        Layout::Blhd,
        shape,
        &starts[..1],
        true,
        8,
    );
    // The cos/sin rows of all tokens must still fit one binding.
    let spec = RopeSpec::new(64).unwrap();
    let desc = posenc::gpu::RopePassDescriptor {
        shape: [1, 64, 1, 64],
        layout: Layout::Blhd,
        dtype: Dtype::F32,
        positions: Positions::PerToken,
        k_heads: 0,
    };
    let e = ctx.with_max_binding_size(64 * 32 * 8 - 4).rope_pass(&spec, &desc).unwrap_err();
    assert!(matches!(e, Error::Limit { what, .. } if what.contains("cos/sin")), "{e}");
}

#[test]
fn rope_passes_refuse_what_they_cannot_record() {
    use posenc::rope::{Layout, RopeSpec, Scaling};
    let Some(ctx) = gpu() else { return };
    let dynamic = RopeSpec::new(16)
        .unwrap()
        .with_scaling(Scaling::Dynamic { factor: 2.0, max_position_embeddings: 64 })
        .unwrap();
    let desc = posenc::gpu::RopePassDescriptor {
        shape: [1, 1, 2, 16],
        layout: Layout::Blhd,
        dtype: Dtype::F32,
        positions: Positions::PerToken,
        k_heads: 0,
    };
    let e = ctx.rope_pass(&dynamic, &desc).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { field: "rope spec", .. }), "{e}");
    assert!(ctx.rope_pass(&dynamic.clone().with_seq_len(100).unwrap(), &desc).is_ok());
    let wrong = posenc::gpu::RopePassDescriptor { shape: [1, 1, 2, 8], ..desc.clone() };
    assert!(matches!(ctx.rope_pass(&RopeSpec::new(16).unwrap(), &wrong), Err(Error::Shape { .. })));
    // An empty tensor is named as such (it was a limit of "one head row" before).
    for shape in [[0, 1, 2, 16], [1, 0, 2, 16], [1, 1, 0, 16]] {
        let empty = posenc::gpu::RopePassDescriptor { shape, ..desc.clone() };
        let e = ctx.rope_pass(&RopeSpec::new(16).unwrap(), &empty).unwrap_err();
        assert!(matches!(&e, Error::Shape { what: "q/k tensor", .. }), "{shape:?}: {e}");
        assert!(e.to_string().contains("at least 1"), "{e}");
    }
    let pass = ctx.rope_pass(&RopeSpec::new(16).unwrap(), &desc).unwrap();
    let data = words_buffer(ctx, 0, &[0; 200]);
    let pos = words_buffer(ctx, 0, &[0]);
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    // The vec4 kernel's tensor starts at a whole vec4.
    assert_eq!(pass.data_alignment(), 16);
    let e = pass.record(&mut encoder, data.slice(4..), pos.slice(..)).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { field: "data", .. }), "{e}");
    assert!(e.to_string().contains("16 bytes"), "{e}");
    let e = pass.record(&mut encoder, data.slice(2..), pos.slice(..)).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { field: "data", .. }), "{e}");
    let e = pass.record(&mut encoder, data.slice(..64), pos.slice(..)).unwrap_err();
    assert!(matches!(e, Error::Shape { what: "data", .. }), "{e}");
    ctx.queue().submit([encoder.finish()]);
}

#[test]
fn recorded_alibi_equals_the_cpu_bit_for_bit() {
    use posenc::alibi::{AlibiSpec, Form, bias_cpu};
    let Some(ctx) = gpu() else { return };
    let specs = [
        AlibiSpec::new(8, 5).unwrap(),
        AlibiSpec::new(12, 1).unwrap().with_kv_len(300).unwrap().with_offset(299).unwrap(),
        AlibiSpec::new(5, 7)
            .unwrap()
            .with_form(Form::Symmetric)
            .with_offset(u32::MAX - 7)
            .unwrap()
            .with_kv_len(40)
            .unwrap(),
    ];
    // An empty bias records nothing, and counts no part for it (round twenty-six: 1).
    for spec in
        [AlibiSpec::new(4, 0).unwrap(), AlibiSpec::new(4, 2).unwrap().with_kv_len(0).unwrap()]
    {
        let pass = ctx.alibi_pass(&spec).unwrap();
        assert_eq!((pass.output_bytes(), pass.parts()), (0, 0), "{spec:?}");
        let out = out_buffer(ctx, 16);
        let mut encoder = ctx.device().create_command_encoder(&Default::default());
        pass.record(&mut encoder, out.slice(..)).unwrap();
    }
    // Both access patterns: rows of whole vec4s at a 16-byte offset take the pattern's
    // four-key kernel, the rest its one-value kernel.
    for ctx in &both_patterns(ctx) {
        for (k, spec) in specs.iter().enumerate() {
            let pass = ctx.alibi_pass(spec).unwrap();
            for at in [4 * (k as u64 * 7 + 1), 16 * (k as u64 + 1)] {
                let out = out_buffer(ctx, at + pass.output_bytes() + 8);
                let mut encoder = ctx.device().create_command_encoder(&Default::default());
                pass.record(&mut encoder, out.slice(at..)).unwrap();
                ctx.queue().submit([encoder.finish()]);
                let all = ctx.read_buffer(&out).unwrap();
                let end = (at + pass.output_bytes()) as usize;
                let what = format!("{spec:?} at {at} {:?}", ctx.access_pattern());
                let outside = all[..at as usize].iter().chain(&all[end..]);
                assert!(outside.into_iter().all(|&b| b == 0xAB), "{what}");
                let want: Vec<u8> = bias_cpu(spec)
                    .unwrap()
                    .iter()
                    .flat_map(|v| v.to_bits().to_le_bytes())
                    .collect();
                assert_same(&what, &all[at as usize..end], &want);
            }
        }
    }
}

/// An ALiBi output larger than one storage binding is written in parts of whole rows, each
/// bound at its own range of the caller's buffer, at offsets on and off the storage
/// alignment; a cap below one part's rows is refused before anything is recorded.
#[test]
fn recorded_alibi_larger_than_a_binding_is_written_in_parts() {
    use posenc::alibi::{AlibiSpec, Form, bias_cpu};
    let Some(ctx) = gpu() else { return };
    let specs = [
        AlibiSpec::new(5, 40).unwrap().with_kv_len(37).unwrap().with_offset(3).unwrap(),
        AlibiSpec::new(4, 64).unwrap().with_form(Form::Symmetric).with_kv_len(64).unwrap(),
    ];
    for (spec, ctx) in specs.iter().flat_map(|s| both_patterns(ctx).map(|c| (s, c))) {
        let total = 4 * spec.n_values() as u64;
        let capped = ctx.with_max_binding_size(total / 3 + 256);
        let pass = capped.alibi_pass(spec).unwrap();
        assert!(pass.parts() >= 3, "{spec:?}: {} parts", pass.parts());
        let want: Vec<u8> =
            bias_cpu(spec).unwrap().iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
        for at in [256u64, 256 + 12] {
            let out = out_buffer(&capped, at + pass.output_bytes() + 8);
            let mut encoder = capped.device().create_command_encoder(&Default::default());
            pass.record(&mut encoder, out.slice(at..)).unwrap();
            capped.queue().submit([encoder.finish()]);
            let all = capped.read_buffer(&out).unwrap();
            let end = (at + pass.output_bytes()) as usize;
            let what = format!("{spec:?} at {at}");
            assert!(all[..at as usize].iter().chain(&all[end..]).all(|&b| b == 0xAB), "{what}");
            assert_same(&what, &all[at as usize..end], &want);
        }
    }
    // A bias of exactly one binding, at an offset off the storage alignment.
    let spec = AlibiSpec::new(8, 16).unwrap();
    let exact = ctx.with_max_binding_size(4 * spec.n_values() as u64);
    let pass = exact.alibi_pass(&spec).unwrap();
    let out = out_buffer(&exact, 4 + pass.output_bytes() + 8);
    let mut encoder = exact.device().create_command_encoder(&Default::default());
    pass.record(&mut encoder, out.slice(4..)).unwrap();
    exact.queue().submit([encoder.finish()]);
    let all = exact.read_buffer(&out).unwrap();
    let want: Vec<u8> =
        bias_cpu(&spec).unwrap().iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
    assert_same("one binding exactly", &all[4..4 + want.len()], &want);
    let e = ctx.with_max_binding_size(64).alibi_pass(&specs[0]).unwrap_err();
    assert!(matches!(e, Error::Limit { .. }), "{e}");
    // A step's bias larger than any buffer, up to 2^32 x 2^32 values whose byte count
    // overflowed a u64 (a panic with overflow checks; round five of the hostile probes).
    // Both ask for 2^64 bytes or more.
    for (heads, len, kv_len) in [(1u32, 1u64 << 31, 1u64 << 31), (2, 1 << 30, u64::from(u32::MAX))]
    {
        let spec = AlibiSpec::new(heads, len).unwrap().with_kv_len(kv_len).unwrap();
        let e = ctx.alibi_pass(&spec).unwrap_err();
        assert!(
            matches!(e, Error::Limit { limit_name: "the device's max_buffer_size", .. }),
            "{heads} x {len} x {kv_len}: {e}"
        );
    }
    // Past u32 indices the refusal names the count that is past them, with that count:
    // keys per row when both are (round 24 found the rows' 2^48 named as keys per row).
    for (heads, len, kv_len, what, requested) in [
        (65536u32, 1u64 << 32, 1u64 << 32, "keys per row of one recorded pass", 1u64 << 32),
        (65536, 1 << 17, 8, "rows (head, query) of one recorded pass", 1 << 33),
        (1, 8, 1 << 32, "keys per row of one recorded pass", 1 << 32),
    ] {
        let spec = AlibiSpec::new(heads, len).unwrap().with_kv_len(kv_len).unwrap();
        let e = ctx.alibi_pass(&spec).unwrap_err();
        assert!(
            matches!(e, Error::Limit { what: w, requested: r, .. } if w == what && r == requested),
            "{heads} x {len} x {kv_len}: {e}"
        );
    }
}

/// A device the test opens itself, as an engine would.
fn callers_device() -> Option<(wgpu::Adapter, wgpu::Device, wgpu::Queue)> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default())).ok()?;
    // No optional feature at all: in particular no timestamp queries.
    let desc = wgpu::DeviceDescriptor { required_limits: adapter.limits(), ..Default::default() };
    let (device, queue) = pollster::block_on(adapter.request_device(&desc)).ok()?;
    Some((adapter, device, queue))
}

#[test]
fn a_callers_device_keeps_its_callbacks_and_hosts_two_contexts() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    if gpu().is_none() {
        return;
    }
    let (adapter, device, queue) = callers_device().expect("an adapter was found above");
    let errors = Arc::new(AtomicUsize::new(0));
    let lost = Arc::new(AtomicUsize::new(0));
    {
        let errors = Arc::clone(&errors);
        device.on_uncaptured_error(Arc::new(move |_| {
            errors.fetch_add(1, Ordering::SeqCst);
        }));
        let lost = Arc::clone(&lost);
        device.set_device_lost_callback(move |_, _| {
            lost.fetch_add(1, Ordering::SeqCst);
        });
    }
    let opts = posenc::gpu::Options::default();
    let a = Context::from_device(adapter.clone(), device.clone(), queue.clone(), &opts).unwrap();
    let b = Context::from_device(adapter, device.clone(), queue.clone(), &opts).unwrap();
    assert_eq!(a.timing_source(), posenc::gpu::TimingSource::WallClock);

    // Both contexts work side by side on the one device, each with its own table.
    let mut rng = Rng::new(8);
    let tables = Tables::new(&mut rng, 30, 8);
    let spec = PeSpec::new(8).unwrap();
    let ids = Array2::from_shape_fn((2, 3), |_| rng.below(30) as u32);
    let positions = Array2::from_shape_fn((2, 3), |(b, t)| (100 * b + t) as u32);
    let want = cpu::encode(
        &spec,
        tables.view(Dtype::F32),
        ids.view(),
        positions.view(),
        &Default::default(),
    )
    .unwrap();
    for ctx in [&a, &b] {
        let table = ctx.upload_table(tables.view(Dtype::F32)).unwrap();
        let got =
            ctx.encode(&spec, &table, ids.view(), positions.view(), &Default::default()).unwrap();
        assert_eq!(got.bits(), want.bits());
        let desc = EncodePassDescriptor { batch: 2, len: 3, ..Default::default() };
        let pass = ctx.encode_pass(&spec, &table, &desc).unwrap();
        let ids_words: Vec<u32> = ids.iter().copied().collect();
        let pos_words: Vec<u32> = positions.iter().copied().collect();
        let got = run_step(ctx, &pass, &ids_words, &pos_words, [0, 0, 0]);
        assert_same("from_device", &got, &cpu_bytes(&want));
    }
    // A table of one is refused by the other, with an error rather than a wrong read.
    let table_a = a.upload_table(tables.view(Dtype::F32)).unwrap();
    let e =
        b.encode(&spec, &table_a, ids.view(), positions.view(), &Default::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { field: "table", .. }), "{e}");
    // The same device opened again: the message says another context, not only another
    // device (round seven of the hostile probes).
    assert!(e.to_string().contains("another context"), "{e}");

    // posenc's own errors stay posenc's; the caller's handler sees only the caller's.
    assert_eq!(errors.load(Ordering::SeqCst), 0);
    let _bad = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("the caller's mistake"),
        size: 4,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::MAP_WRITE,
        mapped_at_creation: false,
    });
    assert_eq!(errors.load(Ordering::SeqCst), 1, "the caller's handler was replaced");

    // A loss reaches the caller's callback, and posenc reports it as DeviceLost, a record
    // of a new set of buffers included (it was Error::Gpu naming an invalid buffer; round
    // five of the hostile probes).
    let desc = EncodePassDescriptor { batch: 2, len: 3, ..Default::default() };
    let pass_a = a.encode_pass(&spec, &table_a, &desc).unwrap();
    let storage = |size| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    };
    // A set of buffers recorded before the loss, whose bind groups the pass keeps: a record
    // of them after it is DeviceLost too (it was Ok, making nothing that would find the
    // loss; round seven).
    let (kept_ids, kept_pos, kept_out) = (storage(256), storage(256), storage(4096));
    let mut encoder = device.create_command_encoder(&Default::default());
    pass_a
        .record(&mut encoder, kept_ids.slice(..24), kept_pos.slice(..24), kept_out.slice(..))
        .unwrap();
    drop(encoder);
    device.destroy();
    let (ids_buf, pos_buf, out_buf) = (storage(256), storage(256), storage(4096));
    let mut encoder = device.create_command_encoder(&Default::default());
    let e = pass_a
        .record(&mut encoder, ids_buf.slice(..24), pos_buf.slice(..24), out_buf.slice(..))
        .unwrap_err();
    assert!(matches!(e, Error::DeviceLost { op: "encode_pass.record", .. }), "{e:?}");
    let e = pass_a
        .record(&mut encoder, kept_ids.slice(..24), kept_pos.slice(..24), kept_out.slice(..))
        .unwrap_err();
    assert!(matches!(e, Error::DeviceLost { op: "encode_pass.record", .. }), "{e:?}");
    let e =
        a.encode(&spec, &table_a, ids.view(), positions.view(), &Default::default()).unwrap_err();
    assert!(matches!(e, Error::DeviceLost { .. }), "{e}");
    // The pass's fault counters, named as called (round twenty-six: "read_buffer").
    let e = pass_a.read_faults().unwrap_err();
    assert!(matches!(e, Error::DeviceLost { op: "read_faults", .. }), "{e:?}");
    let _ = device.poll(wgpu::PollType::wait_indefinitely());
    assert_eq!(lost.load(Ordering::SeqCst), 1, "the caller's device-lost callback");
}

#[test]
fn threads_record_one_pass_into_their_own_encoders() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(77);
    let (vocab, dim) = (500usize, 32usize);
    let tables = Tables::new(&mut rng, vocab, dim);
    let table = ctx.upload_table(tables.view(Dtype::F16)).unwrap();
    let spec = PeSpec::new(dim as u32).unwrap();
    let options = EncodeOptions { out_dtype: Dtype::F16, ..Default::default() };
    let desc = EncodePassDescriptor {
        batch: 4,
        len: 1,
        positions: Positions::PerSequence,
        options,
        ..Default::default()
    };
    let pass = ctx.encode_pass(&spec, &table, &desc).unwrap();
    std::thread::scope(|s| {
        for worker in 0..4u64 {
            let (pass, tables, options, spec) = (&pass, &tables, &options, &spec);
            s.spawn(move || {
                let mut rng = Rng::new(100 + worker);
                for step in 0..5 {
                    let ids: Vec<u32> = (0..4).map(|_| rng.below(vocab as u64) as u32).collect();
                    let starts: Vec<u32> = (0..4).map(|_| rng.next_u32()).collect();
                    let got = run_step(ctx, pass, &ids, &starts, [worker as usize, step, 0]);
                    let ids = Array2::from_shape_vec((4, 1), ids).unwrap();
                    let positions = Array2::from_shape_vec((4, 1), starts).unwrap();
                    let want = cpu::encode(
                        spec,
                        tables.view(Dtype::F16),
                        ids.view(),
                        positions.view(),
                        options,
                    )
                    .unwrap();
                    assert_same(&format!("worker {worker} step {step}"), &got, &cpu_bytes(&want));
                }
            });
        }
    });
}

/// The learned-table pass (`encode_pass` over a learned table) against `cpu::encode_learned`, bit
/// for bit: every table, position-table and output type, both access patterns, dims with and
/// without whole units, output offsets that take either kernel, a chunked table.
#[test]
fn recorded_learned_encode_equals_cpu_bit_for_bit() {
    let Some(base) = gpu() else { return };
    recorded_learned_encodes_equal_the_cpu(base, 24, false);
}

/// As [`chunked_tables_keep_the_bits`], `uncapped_pass` records a chunked table with a
/// pass of the uncapped context.
fn recorded_learned_encodes_equal_the_cpu(base: &Context, cases: usize, uncapped_pass: bool) {
    let mut rng = Rng::new(29);
    for case in 0..cases {
        let patterned = &both_patterns(base)[case % 2];
        let dim = [8usize, 12, 7, 20][(case / 2) % 4];
        let vocab = 60usize;
        // Every third case holds the table in 10-row chunks: several windows.
        let ctx = if case % 3 == 0 {
            patterned.with_max_binding_size((10 * dim * 4) as u64)
        } else {
            patterned.clone()
        };
        let max_positions = 33usize;
        let tables = Tables::new(&mut rng, vocab, dim);
        let positions_table = Tables::new(&mut rng, max_positions, dim);
        let (in_dtype, pe_dtype, out_dtype) =
            (DTYPES[case % 3], DTYPES[(case / 3) % 3], DTYPES[(case / 9) % 3]);
        let (batch, mut len) = (3usize, [1usize, 4, 5][case % 3]);
        if out_dtype != Dtype::F32 && (batch * len * dim) % 2 == 1 {
            len += 1;
        }
        let per_sequence = case % 4 < 2;
        let ids = Array2::from_shape_fn((batch, len), |_| rng.below(vocab as u64) as u32);
        let starts: Vec<u32> =
            (0..batch).map(|_| rng.below((max_positions - len) as u64) as u32).collect();
        let positions = if per_sequence {
            expand(&starts, len)
        } else {
            Array2::from_shape_fn((batch, len), |_| rng.below(max_positions as u64) as u32)
        };
        let options = EncodeOptions { out_dtype, ..Default::default() };
        let table = ctx.upload_table(tables.view(in_dtype)).unwrap();
        // The position table fits one binding of the uncapped context (same device).
        let position_table =
            patterned.upload_position_table(positions_table.view(pe_dtype)).unwrap();
        let desc = EncodePassDescriptor {
            batch,
            len,
            positions: if per_sequence { Positions::PerSequence } else { Positions::PerToken },
            options,
            ..Default::default()
        };
        let ctx = if uncapped_pass { patterned } else { &ctx };
        let pass = ctx.encode_pass(&position_table, &table, &desc).unwrap();
        let pos_words: Vec<u32> =
            if per_sequence { starts.clone() } else { positions.iter().copied().collect() };
        let ids_words: Vec<u32> = ids.iter().copied().collect();
        let want = cpu::encode_learned(
            positions_table.view(pe_dtype),
            tables.view(in_dtype),
            ids.view(),
            positions.view(),
            &options,
        )
        .unwrap();
        for offsets in [[0, 1, 4], [3, 0, 3]] {
            let got = run_step(ctx, &pass, &ids_words, &pos_words, offsets);
            let what = format!(
                "case {case}: d={dim} {in_dtype:?}+{pe_dtype:?}->{out_dtype:?} [{batch}, {len}] \
                 per_sequence={per_sequence} chunks={} {:?} offsets={offsets:?}",
                table.n_chunks(),
                ctx.access_pattern()
            );
            assert_same(&what, &got, &cpu_bytes(&want));
        }
        assert_eq!(pass.read_faults().unwrap(), posenc::gpu::Faults::default(), "case {case}");
    }
}

/// Positions without a row in the learned table give zero rows and count, once per token,
/// whichever table chunk holds the token's row; pad tokens and bad ids count as what they
/// are first.
#[test]
fn learned_positions_without_a_row_give_zero_rows_and_count_as_faults() {
    let Some(base) = gpu() else { return };
    let mut rng = Rng::new(5);
    let (vocab, dim, max_positions) = (40usize, 8usize, 10usize);
    let tables = Tables::new(&mut rng, vocab, dim);
    let positions_table = Tables::new(&mut rng, max_positions, dim);
    for patterned in &both_patterns(base) {
        // 10 rows per chunk: ids 3 and 35 lie in different windows' chunks when the
        // device binds few slots, and in different chunks always.
        for ctx in [patterned.clone(), patterned.with_max_binding_size((10 * dim * 4) as u64)] {
            let table = ctx.upload_table(tables.view(Dtype::F32)).unwrap();
            let position_table =
                patterned.upload_position_table(positions_table.view(Dtype::F32)).unwrap();
            let options = EncodeOptions { pad_id: Some(7), ..Default::default() };
            let desc = EncodePassDescriptor { batch: 1, len: 6, options, ..Default::default() };
            let pass = ctx.encode_pass(&position_table, &table, &desc).unwrap();
            let ids = [3u32, 35, 7, 99, 12, 35];
            let positions = [2u32, 10, 50, 60, u32::MAX, 9];
            let got = run_step(&ctx, &pass, &ids, &positions, [0, 0, 0]);
            let got: Vec<f32> = bytemuck::pod_collect_to_vec(&got);
            for (t, (&id, &p)) in ids.iter().zip(&positions).enumerate() {
                let row = &got[t * dim..(t + 1) * dim];
                if id == 7 || id as usize >= vocab || p as usize >= max_positions {
                    assert!(row.iter().all(|v| v.to_bits() == 0), "token {t}: {row:?}");
                } else {
                    let want = cpu::encode_learned(
                        positions_table.view(Dtype::F32),
                        tables.view(Dtype::F32),
                        ArrayView2::from_shape((1, 1), &ids[t..t + 1]).unwrap(),
                        ArrayView2::from_shape((1, 1), &positions[t..t + 1]).unwrap(),
                        &EncodeOptions::default(),
                    )
                    .unwrap()
                    .into_f32()
                    .unwrap();
                    assert_eq!(row, want.as_slice().unwrap(), "token {t}");
                }
            }
            // Token 2 is padding (not counted), token 3 a bad id (counted as one), tokens 1
            // and 4 bad positions.
            let faults = pass.read_faults().unwrap();
            let what = format!("{:?} chunks={}", ctx.access_pattern(), table.n_chunks());
            assert_eq!(faults.bad_ids, 1, "{what}");
            assert_eq!(faults.largest_bad_id, Some(99), "{what}");
            assert_eq!(faults.bad_positions, 2, "{what}");
            assert_eq!(faults.largest_bad_position, Some(u32::MAX), "{what}");
        }
    }
}

/// A pass bounded by `max_positions` reads every PE row from the cache: the CPU's bits
/// below the bound, in both access patterns, whole units and odd dims, f32 and 16-bit
/// outputs, per-token and per-sequence positions, over a chunked table; a position at or
/// above it a zero row counted as a fault (pad tokens aside); one dispatch per step where
/// the adjacent pattern records three; the bound's own refusals.
#[test]
fn passes_bounded_by_max_positions_read_cached_rows_and_fault_past_them() {
    let Some(base) = gpu() else { return };
    let mut rng = Rng::new(9);
    let vocab = 40usize;
    for dim in [16usize, 10] {
        let spec = PeSpec::new(dim as u32).unwrap();
        let tables = Tables::new(&mut rng, vocab, dim);
        for patterned in &both_patterns(base) {
            let chunked = patterned.with_max_binding_size((10 * dim * 4) as u64);
            // The chunked context's PE cache is one 640-byte binding too: 10 rows.
            for (ctx, out_dtype, n) in [(patterned, Dtype::F32, 100), (&chunked, Dtype::Bf16, 8)] {
                let table = ctx.upload_table(tables.view(Dtype::F32)).unwrap();
                let options = EncodeOptions { pad_id: Some(7), out_dtype, ..Default::default() };
                let bounded = |positions| EncodePassDescriptor {
                    batch: 2,
                    len: 3,
                    positions,
                    options,
                    max_positions: Some(n),
                    ..Default::default()
                };
                let what = format!("dim {dim} {:?} {out_dtype:?}", ctx.access_pattern());
                let pass = ctx.encode_pass(&spec, &table, &bounded(Positions::PerToken)).unwrap();
                if dim % 4 == 0 {
                    // One per window, where a split pass records a scan and two per window.
                    let unbounded = EncodePassDescriptor {
                        max_positions: None,
                        ..bounded(Positions::PerToken)
                    };
                    let (w, u) = (
                        pass.dispatches(),
                        ctx.encode_pass(&spec, &table, &unbounded).unwrap().dispatches(),
                    );
                    assert!(u == w || u == 1 + 2 * w, "{what}: {w} and {u} dispatches");
                }
                let ids = [3u32, 35, 7, 12, 7, 0];
                let positions = [0u32, n - 1, n, n, u32::MAX, 5];
                let got = run_step(ctx, &pass, &ids, &positions, [1, 2, 3]);
                // The CPU's bits with the faulty positions moved inside the bound, then
                // their rows zeroed.
                let inside: Vec<u32> = positions.iter().map(|&p| p.min(n - 1)).collect();
                let want = cpu::encode(
                    &spec,
                    tables.view(Dtype::F32),
                    ArrayView2::from_shape((2, 3), &ids).unwrap(),
                    ArrayView2::from_shape((2, 3), &inside).unwrap(),
                    &options,
                )
                .unwrap();
                let mut want = cpu_bytes(&want);
                let row = dim * out_dtype.size();
                for (t, &p) in positions.iter().enumerate() {
                    if p >= n {
                        want[t * row..(t + 1) * row].fill(0);
                    }
                }
                assert_same(&what, &got, &want);
                // Token 2 is a pad past the bound (not counted), 3 a fault at n.
                let faults = pass.read_faults().unwrap();
                assert_eq!((faults.bad_ids, faults.bad_positions), (0, 1), "{what}");
                assert_eq!(faults.largest_bad_position, Some(n), "{what}");

                // Per sequence: starts n - 2 and 1, so sequence 0 runs to n.
                let pass =
                    ctx.encode_pass(&spec, &table, &bounded(Positions::PerSequence)).unwrap();
                let got = run_step(ctx, &pass, &[1, 2, 3, 4, 5, 6], &[n - 2, 1], [0, 0, 0]);
                let starts = expand(&[n - 2, 1], 3).mapv(|p| p.min(n - 1));
                let ids = Array2::from_shape_vec((2, 3), vec![1u32, 2, 3, 4, 5, 6]).unwrap();
                let want = cpu::encode(
                    &spec,
                    tables.view(Dtype::F32),
                    ids.view(),
                    starts.view(),
                    &options,
                )
                .unwrap();
                let mut want = cpu_bytes(&want);
                want[2 * row..3 * row].fill(0);
                assert_same(&format!("{what} per sequence"), &got, &want);
            }
        }
    }
    let table = base.upload_table(Tables::new(&mut rng, 4, 8).view(Dtype::F32)).unwrap();
    let spec = PeSpec::new(8).unwrap();
    let desc = |n| EncodePassDescriptor { max_positions: Some(n), ..Default::default() };
    let zero = base.encode_pass(&spec, &table, &desc(0)).unwrap_err();
    assert!(matches!(zero, posenc::Error::InvalidParameter { field: "max_positions", .. }));
    // A bound is cached exactly, not rounded up to a power of two as a growing cache is:
    // 4097 rows of 32 bytes fit what a 1 MiB budget leaves beside a 768000-byte table,
    // where 8192 rows would not (they were refused, naming the cache's room).
    let budgeted = base.with_memory_budget(1 << 20);
    let big = budgeted.upload_table(Tables::new(&mut rng, 24000, 8).view(Dtype::F32)).unwrap();
    budgeted.encode_pass(&spec, &big, &desc(4097)).unwrap();
    // 2^20 rows of 32 bytes past a cache of one 1 MiB binding.
    let small = base.with_max_binding_size(1 << 20);
    let past = small.encode_pass(&spec, &table, &desc(1 << 20)).unwrap_err();
    assert!(matches!(past, posenc::Error::Limit { requested: 33_554_432, .. }), "{past}");
}

/// A step whose output is larger than one storage binding is recorded in parts, each bound
/// at its own output range: the same bits as the CPU, in both access patterns, for f32 and
/// 16-bit outputs, whole units and odd dims, at an output offset and with per-sequence
/// positions whose sequences straddle the parts; the bytes around the output untouched.
#[test]
fn outputs_larger_than_one_binding_are_recorded_in_parts() {
    let Some(base) = gpu() else { return };
    outputs_in_parts_keep_the_bits(base, 10);
}

/// Steps of 5 sequences of `len` tokens in parts of a few rows: enough tokens for more than
/// two parts at the device's storage alignment.
fn outputs_in_parts_keep_the_bits(base: &Context, len: usize) {
    let mut rng = Rng::new(41);
    let align = u64::from(base.device().limits().min_storage_buffer_offset_alignment).max(4);
    for (case, patterned) in both_patterns(base).iter().enumerate() {
        for (dim, out_dtype) in [(8usize, Dtype::F32), (12, Dtype::Bf16), (7, Dtype::F16)] {
            let (vocab, batch) = (50usize, 5usize);
            let row = (dim * out_dtype.size()) as u64;
            // Room for a few rows per binding past the alignment slack (and at least the
            // rows of one alignment unit): several parts.
            let unit = align / gcd(align, row) * row;
            let cap = align + (4 * row.max(align)).max(unit);
            let ctx = patterned.with_max_binding_size(cap.max(256));
            let tables = Tables::new(&mut rng, vocab, dim);
            // The table fits the uncapped context's binding (same device).
            let table = patterned.upload_table(tables.view(Dtype::F32)).unwrap();
            let spec = PeSpec::for_variant(Variant::DistilBert, dim as u32).unwrap();
            let options = EncodeOptions { out_dtype, ..Default::default() };
            let desc = EncodePassDescriptor {
                batch,
                len,
                positions: Positions::PerSequence,
                options,
                ..Default::default()
            };
            let pass = ctx.encode_pass(&spec, &table, &desc).unwrap();
            let what = format!("{:?} d={dim} {out_dtype:?}", ctx.access_pattern());
            assert!(pass.parts() > 2, "{what}: {} parts", pass.parts());
            let ids = Array2::from_shape_fn((batch, len), |_| rng.below(vocab as u64) as u32);
            let starts = [0u32, 7, 5000, 4090, u32::MAX - 9];
            let positions = expand(&starts, len);
            let want =
                cpu::encode(&spec, tables.view(Dtype::F32), ids.view(), positions.view(), &options)
                    .unwrap();
            let ids_words: Vec<u32> = ids.iter().copied().collect();
            let got = run_step(&ctx, &pass, &ids_words, &starts, [case, 1, 4 + case]);
            assert_same(&what, &got, &cpu_bytes(&want));
            // An output exactly one binding large, at an offset off the storage alignment:
            // its binding would start before it, so it goes in parts too.
            let exact = patterned.with_max_binding_size(pass.output_bytes().max(256));
            let pass = exact.encode_pass(&spec, &table, &desc).unwrap();
            let got = run_step(&exact, &pass, &ids_words, &starts, [case, 1, 5]);
            assert_same(&format!("{what} exactly one binding"), &got, &cpu_bytes(&want));
        }
    }
}

/// A device of 4 storage buffers per shader stage (WebGPU's downlevel limits, where the
/// recorded encode's usual layout needs 6) takes the compact layout: each record copies the
/// step's ids and positions into the pass's state buffer, and a dispatch binds one table
/// chunk. Every path keeps the CPU's bits: random encodes, chunked tables (a dispatch per
/// chunk), learned tables, ids outside the vocabulary, outputs in parts; RoPE and ALiBi
/// passes fit the limit as they are. The caller's ids and positions need `COPY_SRC` there.
#[test]
fn a_device_of_four_storage_buffers_records_every_path_with_the_same_bits() {
    let Some(ctx) = downlevel_gpu() else { return };
    recorded_encodes_equal_the_cpu(ctx, 72, 24);
    chunked_tables_keep_the_bits(ctx, true);
    recorded_learned_encodes_equal_the_cpu(ctx, 12, true);
    for patterned in &both_patterns(ctx) {
        ids_outside_the_vocabulary(patterned);
    }
    outputs_in_parts_keep_the_bits(ctx, 56);
    let spec = posenc::rope::RopeSpec::new(32).unwrap();
    let layout = posenc::rope::Layout::Blhd;
    let starts = [0u32, 9, u32::MAX - 3];
    check_rope_pass::<bf16>(ctx, "downlevel", &spec, layout, [3, 4, 2, 32], &starts, true, 5);
    let alibi = posenc::alibi::AlibiSpec::new(6, 9).unwrap();
    let pass = ctx.alibi_pass(&alibi).unwrap();
    let out = out_buffer(ctx, pass.output_bytes());
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    pass.record(&mut encoder, out.slice(..)).unwrap();
    ctx.queue().submit([encoder.finish()]);
    let want: Vec<u8> = posenc::alibi::bias_cpu(&alibi)
        .unwrap()
        .iter()
        .flat_map(|v| v.to_bits().to_le_bytes())
        .collect();
    assert_same("downlevel alibi", &ctx.read_buffer(&out).unwrap(), &want);

    // ids and positions without COPY_SRC are refused, naming the usage, before recording.
    let table =
        ctx.upload_table(Embeddings::F32(ArrayView2::from_shape((4, 8), &[0.5; 32]).unwrap()));
    let pass = ctx
        .encode_pass(&PeSpec::new(8).unwrap(), &table.unwrap(), &EncodePassDescriptor::default())
        .unwrap();
    let storage_only = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 64,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let good = words_buffer(ctx, 0, &[1]);
    let out = out_buffer(ctx, 64);
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    for (ids, positions, field) in
        [(&storage_only, &good, "ids"), (&good, &storage_only, "positions")]
    {
        let e = pass
            .record(&mut encoder, ids.slice(..), positions.slice(..), out.slice(..))
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidParameter { field: f, allowed, .. }
                if *f == field && allowed.contains("COPY_SRC")),
            "{e}"
        );
    }
    // The compact layout copies ids and positions, so they may share the output's buffer.
    arena_steps_equal_the_cpu(ctx);
    // Nothing was recorded: the encoder still finishes cleanly, and a good step works.
    run_step(ctx, &pass, &[3], &[7], [0, 0, 0]);
    ctx.queue().submit([encoder.finish()]);
    ctx.wait_idle().unwrap();
}

/// In the compact layout the caller's ids and positions are copied, not bound: a buffer of
/// another device of the same instance is still refused as `Error::Gpu` when recorded (as
/// the full layout's bind groups refuse it), not left for the caller's encoder to fail
/// when it finishes.
#[test]
fn a_compact_pass_refuses_ids_of_another_device_when_recording() {
    let Some(base) = downlevel_gpu() else { return };
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default())).unwrap();
    let desc =
        wgpu::DeviceDescriptor { required_limits: base.device().limits(), ..Default::default() };
    let (ours, queue) = pollster::block_on(adapter.request_device(&desc)).unwrap();
    let (theirs, _their_queue) = pollster::block_on(adapter.request_device(&desc)).unwrap();
    let ctx = Context::from_device(adapter, ours, queue, &Default::default()).unwrap();
    let table = ctx
        .upload_table(Embeddings::F32(ArrayView2::from_shape((4, 8), &[0.5; 32]).unwrap()))
        .unwrap();
    let pass = ctx
        .encode_pass(&PeSpec::new(8).unwrap(), &table, &EncodePassDescriptor::default())
        .unwrap();
    let buffer = |device: &wgpu::Device| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: &[0u8; 64],
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        })
    };
    let (good, foreign) = (buffer(ctx.device()), buffer(&theirs));
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    let e = pass.record(&mut encoder, foreign.slice(..), good.slice(..), good.slice(..));
    assert!(matches!(e, Err(Error::Gpu { .. })), "{e:?}");
    let e = pass.record(&mut encoder, good.slice(..), foreign.slice(..), good.slice(..));
    assert!(matches!(e, Err(Error::Gpu { .. })), "{e:?}");
    pass.record(&mut encoder, good.slice(..), good.slice(..), good.slice(32..)).unwrap();
    ctx.queue().submit([encoder.finish()]);
    ctx.wait_idle().unwrap();
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Steps whose ids, positions and output all lie in one buffer (an engine's arena): the
/// pass copies the ids and positions into its state first (the compact layout's path),
/// since wgpu refuses a read-only and a read-write binding of one buffer in a dispatch.
/// Both access patterns, the unit and the general kernel, f32 and bf16 output, cached and
/// computed positions, per token and per sequence, a table in 10-row chunks (several slots
/// of the compact kernel per dispatch on a device that binds them); the same arena recorded
/// twice.
fn arena_steps_equal_the_cpu(base: &Context) {
    let mut rng = Rng::new(61);
    for ctx in &both_patterns(base) {
        for (dim, out_dtype, per_sequence) in
            [(8usize, Dtype::F32, false), (12, Dtype::Bf16, true), (7, Dtype::F32, true)]
        {
            let (vocab, batch, len) = (30usize, 3usize, 4usize);
            let tables = Tables::new(&mut rng, vocab, dim);
            // Uploaded in 10-row chunks for the first shape (same device: the pass may bind
            // them); whole otherwise.
            let uploader = if dim == 8 {
                ctx.with_max_binding_size((10 * dim * 4) as u64)
            } else {
                ctx.clone()
            };
            let table = uploader.upload_table(tables.view(Dtype::F32)).unwrap();
            assert_eq!(table.n_chunks(), if dim == 8 { 3 } else { 1 });
            let spec = PeSpec::for_variant(Variant::DistilBert, dim as u32).unwrap();
            let options = EncodeOptions { out_dtype, ..Default::default() };
            let positions_kind =
                if per_sequence { Positions::PerSequence } else { Positions::PerToken };
            let desc = EncodePassDescriptor {
                batch,
                len,
                positions: positions_kind,
                options,
                ..Default::default()
            };
            let pass = ctx.encode_pass(&spec, &table, &desc).unwrap();
            let ids = Array2::from_shape_fn((batch, len), |_| rng.below(vocab as u64) as u32);
            let starts = [3u32, 5000, u32::MAX - 3];
            let positions = if per_sequence {
                expand(&starts, len)
            } else {
                Array2::from_shape_fn((batch, len), |(b, t)| starts[b].wrapping_add(t as u32))
            };
            let pos_words: Vec<u32> =
                if per_sequence { starts.to_vec() } else { positions.iter().copied().collect() };
            // ids at word 1, positions at word 40, the output from byte 512 (+ 16).
            let mut words = vec![0u32; 128 + 4 + (pass.output_bytes() as usize).div_ceil(4) + 4];
            words[1..1 + batch * len].copy_from_slice(ids.as_slice().unwrap());
            words[40..40 + pos_words.len()].copy_from_slice(&pos_words);
            let arena = ctx.device().create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("test.arena"),
                contents: bytemuck::cast_slice(&words),
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            });
            let out_at = 512 + 16;
            let want =
                cpu::encode(&spec, tables.view(Dtype::F32), ids.view(), positions.view(), &options)
                    .unwrap();
            for round in 0..2 {
                let mut encoder = ctx.device().create_command_encoder(&Default::default());
                pass.record(
                    &mut encoder,
                    arena.slice(4..),
                    arena.slice(160..),
                    arena.slice(out_at..),
                )
                .unwrap();
                ctx.queue().submit([encoder.finish()]);
                let all = ctx.read_buffer(&arena).unwrap();
                let got = &all[out_at as usize..out_at as usize + pass.output_bytes() as usize];
                let what = format!(
                    "arena {:?} d={dim} {out_dtype:?} per_sequence={per_sequence} round {round}",
                    ctx.access_pattern()
                );
                assert_same(&what, got, &cpu_bytes(&want));
                // The ids and positions are untouched.
                let kept: Vec<u32> =
                    bytemuck::pod_collect_to_vec(&all[..160 + 4 * pos_words.len()]);
                assert_eq!(&kept[1..1 + batch * len], ids.as_slice().unwrap(), "{what}");
                assert_eq!(&kept[40..40 + pos_words.len()], &pos_words[..], "{what}");
            }
        }
    }
}

/// On a device of 6 or more storage buffers too, an engine's arena works: see
/// [`arena_steps_equal_the_cpu`].
#[test]
fn ids_positions_and_output_in_one_buffer_keep_the_bits() {
    let Some(ctx) = gpu() else { return };
    arena_steps_equal_the_cpu(ctx);
}

/// `read_buffer` of a buffer it cannot copy is a typed error naming the buffer, before any
/// command (round seven of the hostile probes: it was wgpu's text as `Error::Gpu`).
#[test]
fn read_buffer_refuses_what_it_cannot_copy_by_name() {
    let Some(ctx) = gpu() else { return };
    let make = |size, usage| {
        ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("test.read"),
            size,
            usage,
            mapped_at_creation: false,
        })
    };
    let storage = wgpu::BufferUsages::STORAGE;
    let e = ctx.read_buffer(&make(16, storage)).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { field: "buffer", .. }), "{e}");
    assert!(e.to_string().contains("COPY_SRC"), "{e}");
    let e = ctx.read_buffer(&make(6, storage | wgpu::BufferUsages::COPY_SRC)).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { field: "buffer", .. }), "{e}");
    assert!(e.to_string().contains("6 bytes"), "{e}");
    let good = make(16, storage | wgpu::BufferUsages::COPY_SRC);
    assert_eq!(ctx.read_buffer(&good).unwrap(), vec![0u8; 16]);
}
