//! The GPU table against its CPU twin: bit for bit, on whatever adapter wgpu picks
//! (CI runs this file on lavapipe and on llvmpipe).

use crate::support::{Rng, assert_bits_eq, gpu, hard_positions};
use posenc::{PeSpec, cpu, reference};

#[test]
fn gpu_equals_cpu_bit_for_bit_for_odd_sizes() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(11);
    // Position counts that are odd or not multiples of the workgroup (256 pairs), and dims
    // whose half is not a multiple of anything convenient.
    for (n, d) in
        [(1, 2), (3, 8), (5, 6), (255, 64), (257, 510), (1000, 514), (33, 4096), (7, 65536)]
    {
        let spec = PeSpec::new(d).unwrap();
        let mut positions = hard_positions(&mut rng, 0);
        positions.truncate(n);
        while positions.len() < n {
            positions.push(rng.next_u32());
        }
        let g = ctx.table(&spec, &positions).unwrap();
        let c = cpu::table(&spec, &positions);
        assert_eq!(g.dim(), (n, d as usize));
        assert_bits_eq(
            &format!("n={n} d={d}"),
            g.as_slice().unwrap(),
            c.as_slice().unwrap(),
            d as usize,
        );
    }
}

#[test]
fn gpu_equals_cpu_for_many_bases_and_random_positions() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(12);
    for base in [1.0001, 2.0, 10000.0, 500000.0, 1e7] {
        let d = 2 * (1 + rng.below(300) as u32);
        let spec = PeSpec::new(d).unwrap().with_base(base).unwrap();
        let positions: Vec<u32> = (0..(1 + rng.below(700))).map(|_| rng.next_u32()).collect();
        let g = ctx.table(&spec, &positions).unwrap();
        let c = cpu::table(&spec, &positions);
        assert_bits_eq(
            &format!("base={base} d={d}"),
            g.as_slice().unwrap(),
            c.as_slice().unwrap(),
            d as usize,
        );
    }
}

#[test]
fn gpu_is_within_6e_8_of_the_reference() {
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(13);
    let spec = PeSpec::new(512).unwrap();
    let positions = hard_positions(&mut rng, 32);
    let g = ctx.table(&spec, &positions).unwrap();
    let r = reference::table(&spec, &positions);
    let (worst, at) =
        crate::support::max_abs_diff(g.iter().map(|&v| f64::from(v)), r.iter().copied());
    assert!(
        worst <= posenc::ACCURACY_BOUND,
        "error {worst:e} at row {} column {}",
        at / 512,
        at % 512
    );
}

#[test]
fn gpu_empty_positions_give_an_empty_table() {
    let Some(ctx) = gpu() else { return };
    let t = ctx.table(&PeSpec::new(8).unwrap(), &[]).unwrap();
    assert_eq!(t.dim(), (0, 8));
}

#[test]
fn gpu_chunks_tables_larger_than_the_binding_cap() {
    let Some(ctx) = gpu() else { return };
    // 4 KiB bindings hold 2 rows of d = 512: 301 positions take 151 chunks.
    let capped = ctx.with_max_binding_size(4096);
    assert_eq!(capped.max_binding_size(), 4096);
    let spec = PeSpec::new(512).unwrap();
    let mut rng = Rng::new(14);
    let positions: Vec<u32> = (0..301).map(|_| rng.next_u32()).collect();
    let g = capped.table(&spec, &positions).unwrap();
    let c = cpu::table(&spec, &positions);
    assert_bits_eq("chunked", g.as_slice().unwrap(), c.as_slice().unwrap(), 512);
    // A row that does not fit one binding is refused with the limit named.
    let err = ctx.with_max_binding_size(1024).table(&spec, &[0]).unwrap_err();
    assert!(matches!(err, posenc::Error::Limit { requested: 2048, limit: 1024, .. }), "{err}");
}

#[test]
fn every_variant_and_frequency_mode_is_bit_identical_to_the_cpu() {
    use posenc::{Frequencies, Variant};
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(13);
    let mut positions = hard_positions(&mut rng, 200);
    positions.push(1);
    for variant in Variant::ALL {
        for d in [1, 2, 3, 5, 8, 33, 64, 515] {
            let Ok(spec) = PeSpec::for_variant(variant, d) else { continue };
            let specs = [
                spec.clone(),
                spec.clone().with_frequencies(Frequencies::F32),
                spec.clone().with_start_index(u32::MAX - 7).with_padding_idx(Some(3)),
                spec.with_start_index(12).with_frequencies(Frequencies::F32),
            ];
            for spec in specs {
                let g = ctx.table(&spec, &positions).unwrap();
                let c = cpu::table(&spec, &positions);
                assert_bits_eq(
                    &format!("{spec:?}"),
                    g.as_slice().unwrap(),
                    c.as_slice().unwrap(),
                    d as usize,
                );
            }
        }
    }
}

/// A model's own frequencies (`PeSpec::with_inv_freq`) in every variant's columns, both
/// frequency modes, a start index past u32 and the range's edges: the CPU's bits.
#[test]
fn given_frequencies_are_bit_identical_to_the_cpu() {
    use posenc::{Frequencies, MAX_INV_FREQ, MIN_INV_FREQ, Variant};
    let Some(ctx) = gpu() else { return };
    let mut rng = Rng::new(14);
    let positions = hard_positions(&mut rng, 200);
    for variant in Variant::ALL {
        for d in [1, 5, 8, 33, 515] {
            let Ok(spec) = PeSpec::for_variant(variant, d) else { continue };
            let n = spec.n_freqs() as usize;
            // float64 values across the range, edges included, in no particular order.
            let w: Vec<f64> = (0..n)
                .map(|i| match i % 5 {
                    0 => MAX_INV_FREQ,
                    1 => MIN_INV_FREQ,
                    _ => (rng.next_u64() >> 11) as f64 * 2f64.powi(-40 - (i % 3) as i32 * 7),
                })
                .map(|v| v.clamp(MIN_INV_FREQ, MAX_INV_FREQ))
                .collect();
            let given = spec.with_inv_freq(&w).unwrap();
            for spec in [
                given.clone(),
                given.clone().with_frequencies(Frequencies::F32),
                given.clone().with_start_index(u32::MAX - 7),
                given.with_start_index(12).with_frequencies(Frequencies::F32),
            ] {
                let g = ctx.table(&spec, &positions).unwrap();
                let c = cpu::table(&spec, &positions);
                assert_bits_eq(
                    &format!("{variant} d={d} {:?}", spec.frequencies()),
                    g.as_slice().unwrap(),
                    c.as_slice().unwrap(),
                    d as usize,
                );
            }
        }
    }
}
