//! Device faults and resource limits: a lost device gives typed errors, never a hang or a
//! panic; allocations the adapter cannot hold are refused up front, naming size and limit;
//! a memory budget bounds the peak device memory of a streamed encode.

use std::sync::Arc;
use std::time::Duration;

use crate::support::{Rng, fresh_gpu, gpu, random_ids, random_table, within};
use ndarray::Array2;
use posenc::encode::{Dtype, Embeddings, EncodeOptions, Encoded};
use posenc::gpu::{Context, Options};
use posenc::{Error, PeSpec, cpu, positions};

/// Longer than any call here takes on lavapipe, far shorter than a CI job's timeout.
const WATCHDOG: Duration = Duration::from_secs(60);

fn cpu_bits(
    spec: &PeSpec,
    table: &Array2<f32>,
    ids: &Array2<u32>,
    pos: &Array2<u32>,
    options: &EncodeOptions,
) -> Vec<u32> {
    cpu::encode(spec, Embeddings::F32(table.view()), ids.view(), pos.view(), options)
        .unwrap()
        .bits()
}

fn is_lost(result: &Result<impl std::fmt::Debug, Error>) -> bool {
    matches!(result, Err(Error::DeviceLost { .. }))
}

#[test]
fn a_destroyed_device_gives_device_lost_from_every_call_without_hanging() {
    let Some(ctx) = fresh_gpu(&Options::default()) else { return };
    within("calls on a destroyed device", WATCHDOG, move || {
        let mut rng = Rng::new(5);
        let spec = PeSpec::new(16).unwrap();
        let t = random_table(&mut rng, 50, 16);
        let uploaded = ctx.upload_table(Embeddings::F32(t.view())).unwrap();
        let ids = Array2::from_shape_fn((2, 9), |(b, i)| (b * 9 + i) as u32);
        let pos = positions::contiguous_batch(2, 9).unwrap();
        let options = EncodeOptions::default();
        let good = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
        assert_eq!(good.bits(), cpu_bits(&spec, &t, &ids, &pos, &options));
        assert_eq!(ctx.lost_reason(), None);

        ctx.device().destroy();
        let first = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options);
        assert!(is_lost(&first), "{first:?}");
        let reason = ctx.lost_reason().expect("the loss is recorded");
        assert!(reason.contains("destroyed"), "{reason}");
        let message = first.unwrap_err().to_string();
        assert!(message.starts_with("encode: the GPU device was lost: "), "{message}");

        // Every entry point answers at once, with the same typed error.
        let encode = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options);
        assert!(is_lost(&encode), "{encode:?}");
        let to_buffer = ctx.encode_to_buffer(&spec, &uploaded, ids.view(), pos.view(), &options);
        assert!(is_lost(&to_buffer), "{to_buffer:?}");
        let upload = ctx.upload_table(Embeddings::F32(t.view()));
        assert!(is_lost(&upload), "{upload:?}");
        let table = ctx.table(&spec, &[0, 1, 2]);
        assert!(is_lost(&table), "{table:?}");
        let copy = ctx.time_copy(1 << 16, 1);
        assert!(is_lost(&copy), "{copy:?}");
        let wait = ctx.wait_idle();
        assert!(is_lost(&wait), "{wait:?}");
    });
}

#[test]
fn losing_the_device_under_eight_busy_threads_gives_results_or_device_lost() {
    let Some(ctx) = fresh_gpu(&Options::default()) else { return };
    let ctx = Arc::new(ctx);
    let mut rng = Rng::new(8);
    let spec = PeSpec::new(32).unwrap();
    let t = Arc::new(random_table(&mut rng, 100, 32));
    let uploaded = Arc::new(ctx.upload_table(Embeddings::F32(t.view())).unwrap());
    let handle = Arc::clone(&ctx);
    within("8 threads meeting a device loss", WATCHDOG, move || {
        let workers: Vec<_> = (0..8)
            .map(|k| {
                let (ctx, t, uploaded) = (Arc::clone(&ctx), Arc::clone(&t), Arc::clone(&uploaded));
                let spec = spec.clone();
                std::thread::spawn(move || {
                    let options = EncodeOptions::default();
                    let mut rng = Rng::new(100 + k);
                    let mut finished = 0;
                    loop {
                        let ids = Array2::from_shape_fn((2, 33), |_| rng.below(100) as u32);
                        let pos = positions::from_offsets(&[k as u32 * 1000, 7], 33).unwrap();
                        match ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options) {
                            Ok(out) => {
                                assert_eq!(out.bits(), cpu_bits(&spec, &t, &ids, &pos, &options));
                                finished += 1;
                            }
                            Err(Error::DeviceLost { .. }) => return finished,
                            Err(other) => panic!("thread {k}: {other}"),
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        handle.device().destroy();
        for w in workers {
            w.join().expect("no worker panics");
        }
    });
}

#[test]
fn outputs_larger_than_the_largest_buffer_are_refused_before_any_work() {
    // A context of its own: other tests allocate through the shared one while this runs.
    let Some(ctx) = fresh_gpu(&Options::default()) else { return };
    let max = ctx.device().limits().max_buffer_size;
    let dim = 1024usize;
    // Enough tokens that the f32 output passes the adapter's largest buffer.
    let tokens = (max / (dim as u64 * 4) + 1) as usize;
    let spec = PeSpec::new(dim as u32).unwrap();
    let t = Array2::<f32>::zeros((2, dim));
    let uploaded = ctx.upload_table(Embeddings::F32(t.view())).unwrap();
    let ids = Array2::<u32>::zeros((1, tokens));
    let pos = Array2::<u32>::zeros((1, tokens));
    let before = ctx.allocated_bytes();
    match ctx.encode_to_buffer(&spec, &uploaded, ids.view(), pos.view(), &Default::default()) {
        Err(Error::Limit { requested, limit, limit_name, .. }) => {
            assert_eq!(requested, tokens as u64 * dim as u64 * 4);
            assert_eq!((limit, limit_name), (max, "max buffer size (bytes)"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(ctx.allocated_bytes(), before, "nothing was allocated");
}

#[test]
fn a_table_over_the_budget_is_refused_naming_both_sizes() {
    let Some(base) = gpu() else { return };
    let ctx = base.with_memory_budget(100_000);
    let t = Array2::<f32>::zeros((1000, 32));
    match ctx.upload_table(Embeddings::F32(t.view())) {
        Err(e @ Error::Limit { requested: 128_000, limit: 100_000, .. }) => {
            let message = e.to_string();
            assert!(message.contains("the embedding table needs 128000"), "{message}");
            assert!(message.contains("GPU memory budget (bytes) is 100000"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(ctx.peak_allocated_bytes(), 0, "refused before any allocation");
}

/// Round seventeen: a CPU adapter's device memory is the host's, and a table larger than the
/// host holds (a 4-byte broadcast array standing for 1 TiB, or a sparse file) was uploaded
/// until the OOM killer ended the process. Refused before any allocation, naming both sizes.
#[test]
fn a_table_past_the_host_memory_of_a_cpu_adapter_is_refused() {
    let Some(base) = gpu() else { return };
    if !base.is_software() || !cfg!(target_os = "linux") {
        return;
    }
    // Its own accounting (a budget of all memory): the shared context's peak is the others'.
    let ctx = base.with_memory_budget(u64::MAX);
    let one = ndarray::arr1(&[1.0f32]);
    let rows = u32::MAX as usize;
    let huge = one.broadcast((rows, 64)).unwrap();
    let start = std::time::Instant::now();
    match ctx.upload_table(Embeddings::F32(huge)) {
        Err(e @ Error::Limit { limit_name, .. }) => {
            let message = e.to_string();
            assert!(limit_name.contains("host memory available"), "{message}");
            assert!(message.contains(&format!("{}", rows as u64 * 256)), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(10), "refused before any work");
    assert_eq!(ctx.peak_allocated_bytes(), 0, "refused before any allocation");
}

/// Encodes a batch whose output is `ratio` times the budget through a budgeted context and
/// checks the bits against the CPU and the peak against the budget.
fn streamed_encode_stays_under_budget(
    ctx: &Context,
    budget: u64,
    spec: PeSpec,
    out_dtype: Dtype,
    offset: u32,
    on_device: bool,
) {
    let ctx = ctx.with_memory_budget(budget);
    let dim = spec.dim() as usize;
    let mut rng = Rng::new(u64::from(offset) + dim as u64);
    let vocab = 500;
    let t = random_table(&mut rng, vocab, dim);
    let uploaded = ctx.upload_table(Embeddings::F32(t.view())).unwrap();
    let out_row = (dim * out_dtype.size()) as u64;
    let (batch, len) = (8, (10 * budget / out_row).div_ceil(8) as usize + 3);
    let ids = random_ids(&mut rng, batch, len, vocab);
    let pos = positions::from_offsets(&[offset; 8], len).unwrap();
    let options = EncodeOptions { out_dtype, ..Default::default() };
    let want = cpu::encode(&spec, Embeddings::F32(t.view()), ids.view(), pos.view(), &options)
        .unwrap()
        .bits();
    let out_bytes = ((batch * len) as u64 * out_row).next_multiple_of(4);
    assert!(out_bytes >= 10 * budget, "the output is ten budgets");
    ctx.reset_peak_allocated_bytes();
    let got = if on_device {
        // The output itself must fit the budget, so read a device sink back in slices.
        let sink = ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("test.sink"),
            size: out_bytes,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        ctx.encode_into_buffer(&spec, &uploaded, ids.view(), pos.view(), &options, &sink).unwrap();
        let peak = ctx.peak_allocated_bytes();
        let bytes = gpu().unwrap().read_buffer(&sink).unwrap();
        assert!(peak <= budget, "peak {peak} over the budget {budget}");
        match out_dtype {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            _ => {
                bytes.chunks_exact(2).map(|b| u32::from(u16::from_le_bytes([b[0], b[1]]))).collect()
            }
        }
    } else {
        let out: Encoded = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
        out.bits()
    };
    let peak = ctx.peak_allocated_bytes();
    assert!(peak <= budget, "peak {peak} over the budget {budget}");
    assert!(peak >= uploaded.device_bytes(), "the table counts");
    let got = &got[..want.len()];
    assert_eq!(got, want, "{spec:?}, {out_dtype:?}, offset {offset}");
}

#[test]
fn an_encode_of_ten_budgets_streams_under_the_budget_bit_for_bit() {
    let Some(ctx) = gpu() else { return };
    let spec = |dim| PeSpec::new(dim).unwrap();
    // Positions inside the PE cache, and far beyond it (rows computed per chunk).
    streamed_encode_stays_under_budget(ctx, 1 << 20, spec(64), Dtype::F32, 0, false);
    streamed_encode_stays_under_budget(ctx, 1 << 20, spec(64), Dtype::F32, 3_000_000_000, false);
    streamed_encode_stays_under_budget(ctx, 512 << 10, spec(96), Dtype::Bf16, 17, false);
    streamed_encode_stays_under_budget(ctx, 512 << 10, spec(96), Dtype::F16, 0, true);
    // An odd dim with 16-bit output (rows packed across words) and float32 frequencies
    // (a larger table of phase steps), far beyond the cache.
    let odd = PeSpec::for_variant(posenc::Variant::Tensor2Tensor, 33)
        .unwrap()
        .with_frequencies(posenc::Frequencies::F32);
    streamed_encode_stays_under_budget(ctx, 256 << 10, odd, Dtype::F16, 2_000_000_000, false);
}

#[test]
fn a_budget_too_small_for_one_token_is_a_limit_error() {
    let Some(base) = gpu() else { return };
    let ctx = base.with_memory_budget(26_000);
    let t = Array2::<f32>::zeros((100, 64));
    let uploaded = ctx.upload_table(Embeddings::F32(t.view())).unwrap();
    let spec = PeSpec::new(64).unwrap();
    let ids = Array2::<u32>::zeros((1, 4));
    let pos = Array2::<u32>::zeros((1, 4));
    // The table takes 25600 of 26000 bytes: no room for the PE cache nor for one token.
    let result = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &Default::default());
    assert!(matches!(result, Err(Error::Limit { .. })), "{result:?}");
    assert!(ctx.peak_allocated_bytes() <= 26_000);
}

#[test]
fn tables_stream_under_a_budget() {
    let Some(base) = gpu() else { return };
    let budget = 256 << 10;
    let ctx = base.with_memory_budget(budget);
    let spec = PeSpec::new(128).unwrap();
    let positions: Vec<u32> = (0..5000).map(|k| k * 7919).collect();
    let got = ctx.table(&spec, &positions).unwrap();
    assert!(ctx.peak_allocated_bytes() <= budget, "{}", ctx.peak_allocated_bytes());
    let want = cpu::table(&spec, &positions);
    assert!(got.iter().zip(want.iter()).all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn a_learned_position_table_streams_under_the_budget_too() {
    let Some(base) = gpu() else { return };
    let budget = 256 << 10;
    let ctx = base.with_memory_budget(budget);
    let mut rng = Rng::new(12);
    let (vocab, max_positions, dim) = (500, 512, 32);
    let t = random_table(&mut rng, vocab, dim);
    let p = random_table(&mut rng, max_positions, dim);
    let uploaded = ctx.upload_table(Embeddings::F32(t.view())).unwrap();
    let learned = ctx.upload_position_table(Embeddings::F32(p.view())).unwrap();
    // 8 x 2100 tokens of 128 bytes: 8.2 times the budget, the tables taking half of it.
    let ids = random_ids(&mut rng, 8, 2100, vocab);
    let pos = Array2::from_shape_fn((8, 2100), |_| rng.below(max_positions as u64) as u32);
    let options = EncodeOptions::default();
    ctx.reset_peak_allocated_bytes();
    let got = ctx.encode(&learned, &uploaded, ids.view(), pos.view(), &options).unwrap();
    let peak = ctx.peak_allocated_bytes();
    assert!(peak <= budget, "peak {peak} over the budget {budget}");
    let want = cpu::encode_learned(
        Embeddings::F32(p.view()),
        Embeddings::F32(t.view()),
        ids.view(),
        pos.view(),
        &options,
    )
    .unwrap();
    assert_eq!(got.bits(), want.bits());
}

/// RoPE and ALiBi plan their chunks by the memory budget too: a tensor several times the
/// budget streams through in more, smaller chunks, with the bits of an unbudgeted run and
/// a peak within the budget; the ALiBi result kept on the device counts against it.
#[test]
fn rope_and_alibi_stream_under_a_budget() {
    let Some(base) = gpu() else { return };
    use posenc::rope::{Layout, RopeSpec};
    let budget = 256 << 10;
    let ctx = base.with_memory_budget(budget);
    let mut rng = Rng::new(13);
    let spec = RopeSpec::new(64).unwrap();
    // 4 x 512 tokens x 4 heads x 64 f32 = 2 MiB: eight budgets.
    let x = ndarray::Array4::from_shape_fn((4, 512, 4, 64), |_| rng.below(4096) as f32 / 512.0);
    let pos = positions::contiguous_batch(4, 512).unwrap();
    let want = base.rope(&spec, x.view(), pos.view(), Layout::Blhd).unwrap();
    ctx.reset_peak_allocated_bytes();
    let got = ctx.rope(&spec, x.view(), pos.view(), Layout::Blhd).unwrap();
    assert!(ctx.peak_allocated_bytes() <= budget, "rope peak {}", ctx.peak_allocated_bytes());
    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "rope bits");

    // The cos/sin cache (a stranger's, round twenty-three: it asked for all 2 MiB at once
    // and was refused naming a buffer's label), and a budget too small for one position's
    // row, refused naming what it needs.
    let (long, positions) = (RopeSpec::new(128).unwrap(), (0..2048).collect::<Vec<u32>>());
    let want = base.rope_cache(&long, &positions).unwrap();
    ctx.reset_peak_allocated_bytes();
    let got = ctx.rope_cache(&long, &positions).unwrap();
    assert!(ctx.peak_allocated_bytes() <= budget, "cache peak {}", ctx.peak_allocated_bytes());
    assert_eq!(got, cpu::rope_cache(&long, &positions).unwrap());
    assert_eq!(got, want);
    let tiny = base.with_memory_budget(1024);
    let err = tiny.rope_cache(&long, &positions).unwrap_err();
    let Error::Limit { what, requested, limit_name, .. } = &err else { panic!("{err}") };
    assert_eq!(
        (*what, *requested, *limit_name),
        (
            "the scratch of one position's cos/sin row",
            512 + 48 + 1028,
            "GPU memory budget left (bytes)"
        ),
        "{err}"
    );

    let alibi = posenc::alibi::AlibiSpec::new(8, 300).unwrap();
    let want = base.alibi_bias(&alibi).unwrap();
    ctx.reset_peak_allocated_bytes();
    let got = ctx.alibi_bias(&alibi).unwrap();
    assert!(ctx.peak_allocated_bytes() <= budget, "alibi peak {}", ctx.peak_allocated_bytes());
    assert_eq!(got, want);
    // 8 x 300 x 300 f32 = 2.9 MB kept on the device: more than the budget, refused first.
    let err = ctx.alibi_bias_to_buffer(&alibi).unwrap_err();
    assert!(matches!(err, Error::Limit { limit_name: "GPU memory budget (bytes)", .. }), "{err}");
    let small = posenc::alibi::AlibiSpec::new(2, 100).unwrap();
    ctx.reset_peak_allocated_bytes();
    let buffer = ctx.alibi_bias_to_buffer(&small).unwrap();
    assert!(ctx.peak_allocated_bytes() >= 2 * 100 * 100 * 4, "the result was counted");
    assert!(ctx.peak_allocated_bytes() <= budget);
    let bytes = ctx.read_buffer(&buffer).unwrap();
    let want = base.alibi_bias(&small).unwrap();
    let got: Vec<f32> =
        bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    assert_eq!(got, want.as_slice().unwrap());
}

/// A stranger's: with every context on an instance of its own, a buffer of a second context
/// given to `encode_into_buffer` or `rope_in_place` was looked up by its number in the
/// first's instance, another buffer there: `Ok`, the output written into the caller's other
/// buffer. Contexts share one instance now, and wgpu refuses the other device's buffer;
/// not on GL, whose contexts keep an instance each (wgpu 30's GL devices of one instance
/// share an EGL context that two threads cannot both make current): there the mistake
/// stays, as docs/library.md says.
#[test]
fn a_buffer_of_another_context_is_refused_not_mistaken_for_one_of_ours() {
    let Some(ours) = fresh_gpu(&Options::default()) else { return };
    let Some(theirs) = fresh_gpu(&Options::default()) else { return };
    if ours.adapter_info().backend == wgpu::Backend::Gl {
        return;
    }
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let zeros = |ctx: &Context| {
        ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 256,
            usage,
            mapped_at_creation: false,
        })
    };
    // Ours first: in separate instances the foreign buffer's number was this one's.
    let mine = zeros(&ours);
    let foreign = zeros(&theirs);
    let spec = PeSpec::new(8).unwrap();
    let t = Array2::from_shape_fn((4, 8), |(r, c)| (r * 8 + c) as f32 + 1.0);
    let table = ours.upload_table(Embeddings::F32(t.view())).unwrap();
    let ids = Array2::from_shape_fn((1, 2), |(_, i)| i as u32);
    let pos = positions::contiguous_batch(1, 2).unwrap();
    let options = EncodeOptions::default();
    let e = ours.encode_into_buffer(&spec, &table, ids.view(), pos.view(), &options, &foreign);
    assert!(e.is_err(), "{e:?}");
    let rope = posenc::rope::RopeSpec::new(8).unwrap();
    let e = ours.rope_in_place(
        &rope,
        &foreign,
        [1, 2, 1, 8],
        posenc::rope::Layout::Blhd,
        Dtype::F32,
        pos.view(),
    );
    assert!(e.is_err(), "{e:?}");
    // Neither our buffer nor theirs was written.
    assert!(ours.read_buffer(&mine).unwrap().iter().all(|&b| b == 0));
    assert!(theirs.read_buffer(&foreign).unwrap().iter().all(|&b| b == 0));
}

#[test]
fn a_table_from_another_devices_context_is_refused_by_every_encode() {
    let Some(ours) = gpu() else { return };
    let Some(theirs) = fresh_gpu(&Options::default()) else { return };
    let mut rng = Rng::new(11);
    let spec = PeSpec::new(16).unwrap();
    let t = random_table(&mut rng, 20, 16);
    let foreign = theirs.upload_table(Embeddings::F32(t.view())).unwrap();
    let foreign_positions = theirs.upload_position_table(Embeddings::F32(t.view())).unwrap();
    let local = ours.upload_table(Embeddings::F32(t.view())).unwrap();
    let ids = Array2::from_shape_fn((1, 5), |(_, i)| i as u32);
    let pos = positions::contiguous_batch(1, 5).unwrap();
    let options = EncodeOptions::default();
    let refused = |result: Result<(), Error>, field: &str| match result {
        Err(e @ Error::InvalidParameter { .. }) => {
            let message = e.to_string();
            assert!(message.contains(field) && message.contains("another device"), "{message}");
        }
        other => panic!("{field}: {other:?}"),
    };
    refused(ours.encode(&spec, &foreign, ids.view(), pos.view(), &options).map(drop), "table");
    refused(
        ours.encode_to_buffer(&spec, &foreign, ids.view(), pos.view(), &options).map(drop),
        "table",
    );
    refused(
        ours.encode(&foreign_positions, &local, ids.view(), pos.view(), &options).map(drop),
        "position_table",
    );
    // A context derived from `ours` is on the same device: its tables are accepted.
    let derived = ours.with_memory_budget(1 << 30);
    let good = derived.encode(&spec, &local, ids.view(), pos.view(), &options).unwrap();
    assert_eq!(good.bits(), cpu_bits(&spec, &t, &ids, &pos, &options));
}
