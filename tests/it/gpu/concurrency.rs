//! One GPU context and one uploaded table shared by many threads give the same results as
//! serial calls.

use crate::support::{Rng, gpu, random_ids, random_table};
use ndarray::Array2;
use posenc::encode::{Embeddings, EncodeOptions};
use posenc::{PeSpec, cpu, positions};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn contexts_tables_and_encoders_are_send_and_sync() {
    assert_send_sync::<posenc::gpu::Context>();
    assert_send_sync::<posenc::gpu::GpuTable>();
    assert_send_sync::<cpu::Encoder>();
}

#[test]
fn eight_threads_times_100_calls_match_serial_results() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(71);
    let (vocab, dim) = (200, 32);
    let spec = PeSpec::new(dim as u32).unwrap();
    let table = random_table(&mut rng, vocab, dim);
    let uploaded = ctx.upload_table(Embeddings::F32(table.view())).unwrap();
    // Each call has its own ids, length and offset (some within the PE cache, some not).
    let calls: Vec<(Array2<u32>, Array2<u32>)> = (0..800)
        .map(|k| {
            let len = 1 + (k % 7);
            let ids = random_ids(&mut rng, 2, len, vocab);
            let offset = if k % 3 == 0 { rng.next_u32() >> 1 } else { (k % 50) as u32 };
            (ids, positions::from_offsets(&[offset, offset + 1], len).unwrap())
        })
        .collect();
    let options = EncodeOptions::default();
    let serial: Vec<Vec<u32>> = calls
        .iter()
        .map(|(ids, pos)| {
            cpu::encode(&spec, Embeddings::F32(table.view()), ids.view(), pos.view(), &options)
                .unwrap()
                .bits()
        })
        .collect();
    std::thread::scope(|scope| {
        for t in 0..8 {
            let (calls, serial, uploaded, spec) = (&calls, &serial, &uploaded, &spec);
            scope.spawn(move || {
                for k in (t * 100)..(t * 100 + 100) {
                    let (ids, pos) = &calls[k];
                    let got = ctx.encode(spec, uploaded, ids.view(), pos.view(), &options).unwrap();
                    assert_eq!(got.bits(), serial[k], "thread {t}, call {k}");
                }
            });
        }
    });
}
