//! Non-blocking encodes (`Context::encode_submit`, with a spec or a learned table): several in
//! flight at once give the bits of the blocking call and of the CPU, in every storage type,
//! through chunked tables and chunked outputs; an unwaited handle can be dropped; bad
//! requests are refused before anything is submitted; faults come back typed.

use std::time::{Duration, Instant};

use crate::support::{Rng, fresh_gpu, gpu, random_ids, within};
use half::{bf16, f16};
use ndarray::Array2;
use posenc::encode::{Dtype, Embeddings, EncodeOptions, Scale};
use posenc::gpu::{Context, Options, PendingEncode};
use posenc::{Error, PeSpec, cpu, positions};

const DTYPES: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::Bf16];

/// Longer than anything here takes on lavapipe, far shorter than a CI job's timeout.
const WATCHDOG: Duration = Duration::from_secs(120);

/// A random table of values in [-2, 2), in every storage type.
struct Table {
    f32: Array2<f32>,
    f16: Array2<f16>,
    bf16: Array2<bf16>,
}

impl Table {
    fn new(rng: &mut Rng, vocab: usize, dim: usize) -> Self {
        let f32 =
            Array2::from_shape_fn((vocab, dim), |_| (rng.next_u32() as f32 / 2f32.powi(30)) - 2.0);
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

/// One batch of a stream: ids and positions.
type Batch = (Array2<u32>, Array2<u32>);

/// Three batches of different shapes: a prefill from 0, one at offsets past the PE cache,
/// one with a pad id and random positions.
fn batches(rng: &mut Rng, vocab: usize) -> Vec<Batch> {
    let a = (random_ids(rng, 4, 37, vocab), positions::contiguous_batch(4, 37).unwrap());
    let b = (
        random_ids(rng, 3, 11, vocab),
        positions::from_offsets(&[1 << 20, 5, u32::MAX - 20], 11).unwrap(),
    );
    let mut c = (random_ids(rng, 2, 50, vocab), Array2::from_shape_fn((2, 50), |_| rng.next_u32()));
    c.0[[1, 4]] = 3;
    vec![a, b, c]
}

#[test]
fn encodes_in_flight_at_once_give_the_blocking_and_cpu_bits() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(71);
    // dim 64: the vec4 kernel; 30: the general one; 15: odd, 16-bit output through the
    // narrowing pass.
    for (dim, vocab) in [(64usize, 211usize), (30, 97), (15, 40)] {
        let spec = PeSpec::for_variant(posenc::Variant::DistilBert, dim as u32).unwrap();
        let table = Table::new(&mut rng, vocab, dim);
        let work = batches(&mut rng, vocab);
        for in_dtype in DTYPES {
            // The whole table in one binding; 3 rows per binding (many table chunks, and
            // outputs of several chunks, of which only the last is left in flight).
            let row = (dim * 4) as u64;
            for c in [ctx.clone(), ctx.with_max_binding_size(3 * row)] {
                let uploaded = c.upload_table(table.view(in_dtype)).unwrap();
                for out_dtype in DTYPES {
                    let options =
                        EncodeOptions { out_dtype, pad_id: Some(3), ..Default::default() };
                    let what =
                        format!("D={dim} {in_dtype:?}->{out_dtype:?} cap={}", c.max_binding_size());
                    let pending: Vec<PendingEncode> = work
                        .iter()
                        .map(|(ids, pos)| {
                            c.encode_submit(&spec, &uploaded, ids.view(), pos.view(), &options)
                                .unwrap()
                        })
                        .collect();
                    // Waited for out of order: the last first.
                    let mut results: Vec<_> = pending
                        .into_iter()
                        .rev()
                        .map(|p| {
                            let shape = p.dim();
                            let out = p.wait().unwrap();
                            assert_eq!(out.dim(), shape, "{what}");
                            out
                        })
                        .collect();
                    results.reverse();
                    for (k, ((ids, pos), got)) in work.iter().zip(&results).enumerate() {
                        let blocking =
                            c.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
                        let want = cpu::encode(
                            &spec,
                            table.view(in_dtype),
                            ids.view(),
                            pos.view(),
                            &options,
                        )
                        .unwrap();
                        assert_eq!(got.bits(), blocking.bits(), "{what}, batch {k}: blocking");
                        assert_eq!(got.bits(), want.bits(), "{what}, batch {k}: cpu");
                    }
                }
            }
        }
    }
}

#[test]
fn learned_position_tables_submit_too() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(72);
    let (vocab, dim, max_pos) = (50, 24, 64);
    let table = Table::new(&mut rng, vocab, dim);
    let learned = Table::new(&mut rng, max_pos, dim);
    let uploaded = ctx.upload_table(table.view(Dtype::Bf16)).unwrap();
    let p = ctx.upload_position_table(learned.view(Dtype::F32)).unwrap();
    let ids = random_ids(&mut rng, 3, 20, vocab);
    let pos = positions::from_offsets(&[0, 10, 44], 20).unwrap();
    let options = EncodeOptions { scale: Scale::None, ..Default::default() };
    let pending: Vec<_> = (0..3)
        .map(|_| ctx.encode_submit(&p, &uploaded, ids.view(), pos.view(), &options).unwrap())
        .collect();
    let want = cpu::encode_learned(
        learned.view(Dtype::F32),
        table.view(Dtype::Bf16),
        ids.view(),
        pos.view(),
        &options,
    )
    .unwrap();
    for p in pending {
        assert_eq!(p.wait().unwrap().bits(), want.bits());
    }
    let beyond = positions::from_offsets(&[0, 10, 45], 20).unwrap();
    assert!(matches!(
        ctx.encode_submit(&p, &uploaded, ids.view(), beyond.view(), &options),
        Err(Error::Position { .. })
    ));
}

/// Polls `is_ready` until it says yes: it must, once the device has finished.
fn ready_soon(p: &PendingEncode) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if p.is_ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

#[test]
fn unwaited_encodes_can_be_dropped_and_their_memory_comes_back() {
    let Some(ctx) = gpu() else { return };
    // A budget of its own, so that the accounting is this test's alone.
    let ctx = ctx.with_memory_budget(64 << 20);
    let mut rng = Rng::new(73);
    let (vocab, dim) = (100, 64);
    let spec = PeSpec::new(dim as u32).unwrap();
    let table = Table::new(&mut rng, vocab, dim);
    let uploaded = ctx.upload_table(table.view(Dtype::F32)).unwrap();
    let options = EncodeOptions::default();
    let (ids, pos) =
        (random_ids(&mut rng, 8, 64, vocab), positions::contiguous_batch(8, 64).unwrap());
    let want = cpu::encode(&spec, table.view(Dtype::F32), ids.view(), pos.view(), &options)
        .unwrap()
        .bits();
    let submit = || ctx.encode_submit(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
    // Warm the pool and the PE cache, so that what stays allocated is the handles' own.
    submit().wait().unwrap();
    let base = ctx.allocated_bytes();
    let staging = (8 * 64 * dim * 4) as u64;
    let held: Vec<_> = (0..3).map(|_| submit()).collect();
    // Each handle holds a staging buffer of its own (one may have come from the pool).
    assert!(ctx.allocated_bytes() >= base + 2 * staging, "{} {base}", ctx.allocated_bytes());
    // Dropped while in flight, after completing, and never polled.
    let mut held = held.into_iter();
    drop(held.next());
    let done = held.next().unwrap();
    assert!(ready_soon(&done), "a finished encode reports ready");
    drop(done);
    drop(held);
    // The staging buffers of dropped handles leave the accounting (and the pool) at once.
    assert!(ctx.allocated_bytes() <= base, "{} > {base}", ctx.allocated_bytes());
    // The context carries on: the next encodes, in flight together, give the CPU's bits.
    let again: Vec<_> = (0..3).map(|_| submit()).collect();
    for p in again {
        assert_eq!(p.wait().unwrap().bits(), want);
    }
    ctx.wait_idle().unwrap();
}

#[test]
fn a_budget_bounds_the_encodes_in_flight() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(74);
    let (vocab, dim) = (10, 256);
    let spec = PeSpec::new(dim as u32).unwrap();
    let table = Table::new(&mut rng, vocab, dim);
    // Room for the table, the PE cache and a few batches' scratch, not for many stagings.
    let out_bytes = 16 * 16 * dim as u64 * 4;
    let ctx = ctx.with_memory_budget(10 * out_bytes);
    let uploaded = ctx.upload_table(table.view(Dtype::F32)).unwrap();
    let (ids, pos) =
        (random_ids(&mut rng, 16, 16, vocab), positions::contiguous_batch(16, 16).unwrap());
    let options = EncodeOptions::default();
    let want = cpu::encode(&spec, table.view(Dtype::F32), ids.view(), pos.view(), &options)
        .unwrap()
        .bits();
    let mut held = Vec::new();
    let refused = loop {
        match ctx.encode_submit(&spec, &uploaded, ids.view(), pos.view(), &options) {
            Ok(p) => held.push(p),
            Err(e) => break e,
        }
        assert!(held.len() < 20, "20 outputs of a tenth of the budget each were all held");
    };
    assert!(matches!(refused, Error::Limit { .. }), "{refused}");
    assert!(ctx.peak_allocated_bytes() <= 10 * out_bytes);
    assert!(!held.is_empty());
    for p in held {
        assert_eq!(p.wait().unwrap().bits(), want);
    }
    // Once waited for, the room is back.
    let p = ctx.encode_submit(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
    assert_eq!(p.wait().unwrap().bits(), want);
}

#[test]
fn bad_requests_are_refused_before_anything_is_submitted() {
    let Some(ctx) = fresh_gpu(&Options::default()) else { return };
    within("refusals on a destroyed device", WATCHDOG, move || {
        let spec = PeSpec::new(4).unwrap();
        let table = Array2::<f32>::zeros((10, 4));
        let uploaded = ctx.upload_table(Embeddings::F32(table.view())).unwrap();
        let other = gpu().unwrap().upload_table(Embeddings::F32(table.view())).unwrap();
        // With the device gone, any request that reached the device would be DeviceLost:
        // these must be refused by the checks first.
        ctx.device().destroy();
        let ids = ndarray::array![[1u32, 2, 3], [4, 10, 5]];
        let pos = positions::contiguous_batch(2, 3).unwrap();
        let ok_ids = ndarray::array![[1u32, 2, 3], [4, 9, 5]];
        let options = EncodeOptions::default();
        let submit = |spec: &PeSpec,
                      t: &posenc::gpu::GpuTable,
                      ids: &Array2<u32>,
                      pos: &Array2<u32>,
                      o: &EncodeOptions| {
            ctx.encode_submit(spec, t, ids.view(), pos.view(), o).map(drop)
        };
        match submit(&spec, &uploaded, &ids, &pos, &options) {
            Err(Error::TokenId { row: 1, col: 1, ref id, vocab: 10 }) if id == "10" => {}
            other => panic!("{other:?}"),
        }
        let short = positions::contiguous_batch(2, 2).unwrap();
        let r = submit(&spec, &uploaded, &ok_ids, &short, &options);
        assert!(matches!(r, Err(Error::Shape { .. })), "{r:?}");
        let nan = EncodeOptions { scale: Scale::Value(f32::NAN), ..Default::default() };
        let r = submit(&spec, &uploaded, &ok_ids, &pos, &nan);
        assert!(matches!(r, Err(Error::InvalidParameter { field: "scale", .. })), "{r:?}");
        let r = submit(&PeSpec::new(6).unwrap(), &uploaded, &ok_ids, &pos, &options);
        assert!(matches!(r, Err(Error::Shape { .. })), "{r:?}");
        let r = submit(&spec, &other, &ok_ids, &pos, &options);
        assert!(matches!(r, Err(Error::InvalidParameter { field: "table", .. })), "{r:?}");
        // A valid request reaches the device and meets its loss, at submission or wait.
        let r = ctx
            .encode_submit(&spec, &uploaded, ok_ids.view(), pos.view(), &options)
            .and_then(PendingEncode::wait);
        assert!(matches!(r, Err(Error::DeviceLost { .. })), "{r:?}");
    });
}

#[test]
fn a_device_lost_while_encodes_are_in_flight_gives_device_lost_or_the_bits() {
    let Some(ctx) = fresh_gpu(&Options::default()) else { return };
    within("waits across a device loss", WATCHDOG, move || {
        let mut rng = Rng::new(75);
        let (vocab, dim) = (300, 128);
        let spec = PeSpec::new(dim as u32).unwrap();
        let table = Table::new(&mut rng, vocab, dim);
        let uploaded = ctx.upload_table(table.view(Dtype::F32)).unwrap();
        let options = EncodeOptions::default();
        let (ids, pos) =
            (random_ids(&mut rng, 8, 256, vocab), positions::contiguous_batch(8, 256).unwrap());
        let want = cpu::encode(&spec, table.view(Dtype::F32), ids.view(), pos.view(), &options)
            .unwrap()
            .bits();
        let pending: Vec<_> = (0..4)
            .map(|_| ctx.encode_submit(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap())
            .collect();
        ctx.device().destroy();
        let mut lost = 0;
        for p in pending {
            match p.wait() {
                // Finished before the loss: the whole result, right.
                Ok(out) => assert_eq!(out.bits(), want),
                Err(Error::DeviceLost { .. }) => lost += 1,
                Err(other) => panic!("{other}"),
            }
        }
        // From now on every call answers DeviceLost at once.
        let r = ctx.encode_submit(&spec, &uploaded, ids.view(), pos.view(), &options);
        assert!(matches!(r, Err(Error::DeviceLost { .. })), "{r:?} after {lost} lost waits");
    });
}

/// An empty batch is ready at once and waits for nothing.
#[test]
fn empty_batches_are_ready_at_once() {
    let Some(ctx): Option<&Context> = gpu() else { return };
    let spec = PeSpec::new(8).unwrap();
    let table = Array2::<f32>::zeros((4, 8));
    let uploaded = ctx.upload_table(Embeddings::F32(table.view())).unwrap();
    let empty = Array2::<u32>::zeros((0, 5));
    let p = ctx
        .encode_submit(&spec, &uploaded, empty.view(), empty.view(), &EncodeOptions::default())
        .unwrap();
    assert!(p.is_ready());
    assert_eq!(p.wait().unwrap().dim(), (0, 5, 8));
}

/// `wait_mapped` hands the result over in the mapped staging memory when it came back in
/// one readback, and as a copy when it came back in several; either way its bytes are the
/// blocking call's, and dropping it gives the staging buffer back (a later call reuses it).
#[test]
fn a_mapped_result_has_the_blocking_calls_bits() {
    let Some(base) = gpu() else { return };
    let mut rng = Rng::new(12);
    let (vocab, dim) = (40, 12);
    let table = Table::new(&mut rng, vocab, dim);
    let spec = PeSpec::new(dim as u32).unwrap();
    let ids = random_ids(&mut rng, 3, 50, vocab);
    let pos = positions::contiguous_batch(3, 50).unwrap();
    // The whole output, then a cap of a third of it: several readbacks.
    let whole = 3 * 50 * dim as u64 * 4;
    for (ctx, mapped) in [(base.clone(), true), (base.with_max_binding_size(whole / 3), false)] {
        for dtype in DTYPES {
            let uploaded = ctx.upload_table(table.view(dtype)).unwrap();
            let options = EncodeOptions { out_dtype: dtype, ..Default::default() };
            let want = ctx.encode(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap();
            for _ in 0..2 {
                let pending = ctx.encode_submit(&spec, &uploaded, ids.view(), pos.view(), &options);
                let got = pending.unwrap().wait_mapped().unwrap();
                assert_eq!(got.is_mapped(), mapped, "{dtype:?}");
                assert_eq!((got.dim(), got.dtype()), ((3, 50, dim), dtype));
                let bits: Vec<u8> = want
                    .bits()
                    .iter()
                    .flat_map(|b| b.to_le_bytes()[..dtype.size()].to_vec())
                    .collect();
                assert_eq!(got.bytes(), &bits[..], "{dtype:?} mapped={mapped}");
                assert_eq!(got.to_encoded().unwrap().bits(), want.bits());
            }
        }
    }
}

/// A wait that polls before it sleeps ([`Options::spin_wait`]) polls on its own encode's
/// readback, not on the queue's newest work: with a longer encode submitted behind it, the
/// first encode's `wait` returns while the second still runs, though it may poll for a
/// second. (A wait that polled for the whole queue would return only once the second was
/// done.)
#[test]
fn a_polling_wait_returns_with_its_own_encode_not_with_later_ones() {
    let options = Options::default().spin_wait(Duration::from_secs(1)).pe_cache_budget(0);
    let Some(ctx) = fresh_gpu(&options) else { return };
    let mut rng = Rng::new(91);
    let (vocab, dim) = (64, 1024);
    let spec = PeSpec::new(dim as u32).unwrap();
    let table = Table::new(&mut rng, vocab, dim);
    let uploaded = ctx.upload_table(table.view(Dtype::F32)).unwrap();
    let small = (random_ids(&mut rng, 1, 4, vocab), positions::contiguous_batch(1, 4).unwrap());
    let want = cpu::encode(
        &spec,
        table.view(Dtype::F32),
        small.0.view(),
        small.1.view(),
        &EncodeOptions::default(),
    )
    .unwrap()
    .bits();
    // 8192 tokens at random positions, whose PE rows (no cache) are computed per call.
    let long = (
        random_ids(&mut rng, 4, 2048, vocab),
        Array2::from_shape_fn((4, 2048), |_| rng.next_u32()),
    );
    within("a polling wait behind a longer encode", WATCHDOG, move || {
        let options = EncodeOptions::default();
        let submit = |(ids, pos): &Batch| {
            ctx.encode_submit(&spec, &uploaded, ids.view(), pos.view(), &options).unwrap()
        };
        let t = Instant::now();
        submit(&long).wait().unwrap();
        let alone = t.elapsed();
        if alone < Duration::from_millis(20) {
            eprintln!("skipped: the long encode took {alone:?}, too short to see it running");
            return;
        }
        let first = submit(&small);
        let second = submit(&long);
        if second.is_ready() {
            // GL runs a submission's commands as they are submitted; llvmpipe finishes
            // them there.
            eprintln!("skipped: the long encode was done when its submission returned");
            assert_eq!(first.wait().unwrap().bits(), want);
            return;
        }
        assert_eq!(first.wait().unwrap().bits(), want);
        assert!(!second.is_ready(), "the first wait outlasted the second encode ({alone:?})");
        second.wait().unwrap();
    });
}
