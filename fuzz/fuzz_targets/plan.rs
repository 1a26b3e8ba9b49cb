//! Arbitrary `.npy` headers (any shape, a few bytes of data) through the up-front checks
//! the CLI runs before any work: `encode`'s ids, output size and positions, `rope`'s input
//! and positions, the weights loaders; and arbitrary `alibi` sizes through
//! `AlibiSpec::check_size`. Nothing may panic, whatever is accepted must be within the size
//! limits, and no single allocation may pass 64 KiB: the data is at most 512 bytes, so
//! anything larger was sized by the header alone.
#![no_main]

use std::path::Path;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use posenc::alibi::{AlibiSpec, MAX_VALUES};
use posenc::inputs::{self, MAX_OUTPUT_VALUES, Source};
use posenc::rope::Layout as RopeLayout;

#[path = "common.rs"]
mod common;

// The test crate's recording allocator (the readers run on this thread; only the
// finiteness scan of a table uses rayon, over data the file holds).
#[path = "../../tests/it/support/recording.rs"]
mod recording;
use recording::{Recording, largest_allocation};

#[global_allocator]
static ALLOCATOR: Recording = Recording;

const DESCRS: [&str; 9] = ["<i4", "<i8", "<u4", "<f4", "<f2", "<u2", "<f8", ">i4", "|u1"];

/// Axis lengths near the edges most of the time, anything some of the time.
#[derive(Arbitrary, Debug)]
enum Axis {
    Small(u8),
    PowerOfTwo(u8),
    AroundPowerOfTwo(u8, i8),
    Any(u64),
}

impl Axis {
    fn get(&self) -> u64 {
        match *self {
            Axis::Small(n) => u64::from(n % 8),
            Axis::PowerOfTwo(k) => 1u64 << (k % 64),
            Axis::AroundPowerOfTwo(k, d) => (1u64 << (k % 64)).wrapping_add_signed(i64::from(d)),
            Axis::Any(n) => n,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Plan {
    descr: u8,
    shape: Vec<Axis>,
    fortran: bool,
    data: Vec<u8>,
    vocab: u16,
    dim: Axis,
    pad_id: Option<u32>,
    padding_idx: u32,
    offset: Option<u32>,
    heads: u8,
    len: Axis,
    kv_len: Option<Axis>,
    query_offset: u32,
}

/// A version 1.0 `.npy` file: the header dict as NumPy writes it, then `data`.
fn npy(descr: &str, shape: &[u64], fortran: bool, data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let tuple = match dims.as_slice() {
        [one] => format!("({one},)"),
        _ => format!("({})", dims.join(", ")),
    };
    let fortran = if fortran { "True" } else { "False" };
    let mut dict =
        format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {tuple}, }}");
    let unpadded = 10 + dict.len() + 1;
    dict.extend(std::iter::repeat_n(' ', unpadded.next_multiple_of(64) - unpadded));
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend_from_slice(data);
    out
}

/// The values of `shape` with its zero axes set aside, saturating.
fn nonzero_values(shape: &[usize]) -> u64 {
    shape.iter().filter(|&&d| d != 0).fold(1u64, |n, &d| n.saturating_mul(d as u64))
}

/// The encode and rope checks on `bytes`, as the CLI runs them.
fn plan_inputs(plan: &Plan, bytes: &[u8]) {
    let source = Source::Bytes { name: Path::new("fuzz.npy"), bytes };
    let dim = usize::try_from(plan.dim.get()).unwrap_or(usize::MAX);
    let table = (usize::from(plan.vocab), dim);
    if let Ok(ids) = inputs::read_ids(source, table, plan.pad_id) {
        let (batch, len) = ids.ids.dim();
        assert!(nonzero_values(&[batch, len, dim]) <= MAX_OUTPUT_VALUES);
        common::check_position_builders(&ids, source, plan.pad_id.unwrap_or(0), plan.padding_idx);
    }
    if let Ok(tensor) = inputs::read_rope_input(source) {
        let shape = tensor.shape();
        assert!(nonzero_values(&shape) <= MAX_OUTPUT_VALUES);
        for layout in [RopeLayout::Blhd, RopeLayout::Bhld] {
            let (batch, len, _, _) = layout.dims(shape);
            for file in [None, Some(source)] {
                let Ok(p) = inputs::rope_positions(file, plan.offset, batch, len) else {
                    continue;
                };
                assert_eq!(p.dim(), (batch, len));
                if let Some(built) = p.for_tensor(&tensor) {
                    assert_eq!(built.dim(), (batch, len));
                }
            }
        }
    }
    for tensor in [None, Some("embed")] {
        let _ = inputs::read_table(source, tensor);
        let _ = inputs::read_position_table(source, tensor);
    }
}

fuzz_target!(|plan: Plan| {
    let shape: Vec<u64> = plan.shape.iter().take(5).map(Axis::get).collect();
    let data = &plan.data[..plan.data.len().min(512)];
    let descr = DESCRS[usize::from(plan.descr) % DESCRS.len()];
    let bytes = npy(descr, &shape, plan.fortran, data);

    let ((), largest) = largest_allocation(|| plan_inputs(&plan, &bytes));
    assert!(largest < 64 << 10, "an allocation of {largest} bytes for {shape:?} ({descr})");

    // Few heads keep the slopes (big-float exponentials) cheap; the sizes are what is being
    // checked, and the unit tests take the head count to its limit.
    let heads = u32::from(plan.heads % 8) + 1;
    let spec = AlibiSpec::new(heads, plan.len.get())
        .and_then(|s| s.with_offset(plan.query_offset))
        .and_then(|s| match &plan.kv_len {
            Some(kv) => s.with_kv_len(kv.get()),
            None => Ok(s),
        });
    if let Ok(spec) = spec {
        if spec.check_size().is_ok() {
            let (h, l, k) = spec.shape();
            assert!(nonzero_values(&[h, l, k]) <= MAX_VALUES);
            assert!(spec.n_values() <= u128::from(MAX_VALUES));
        }
    }
});
