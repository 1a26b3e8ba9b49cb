//! The CPU encode's fast paths against a reference loop of one element at a time, bit for
//! bit: a call small enough to run on the calling thread (decode steps of 1 and 16
//! tokens), a call split into rayon tasks of whole rows, table rows prefetched ahead, and
//! the widest vector instructions this CPU has, for every table and output type, with and
//! without a scale and a pad id.

use crate::support::{Rng, random_ids};
use half::{bf16, f16};
use ndarray::{Array2, Array3};
use posenc::convert::{bf16_to_f32_bits, f16_to_f32_bits, f32_to_bf16_bits, f32_to_f16_bits};
use posenc::encode::{Dtype, Embeddings, EncodeOptions, Scale};
use posenc::{PeSpec, cpu, positions};

/// A table of one storage type, kept as its raw words for the reference.
struct Table {
    dtype: Dtype,
    words: Array2<u32>,
    f32s: Array2<f32>,
    f16s: Array2<f16>,
    bf16s: Array2<bf16>,
}

impl Table {
    /// Random finite values, and in every fourth row some of the values a fast path must
    /// not take the short way with: zeros of both signs, subnormals, infinities and NaNs
    /// (quiet and signalling).
    fn new(dtype: Dtype, vocab: usize, dim: usize, rng: &mut Rng) -> Self {
        let (specials, finite): (&[u32], u32) = match dtype {
            Dtype::F32 => (
                &[
                    0,
                    0x8000_0000,
                    1,
                    0x807f_ffff,
                    0x7f80_0000,
                    0xff80_0000,
                    0x7fc0_0001,
                    0x7f80_0001,
                ],
                0xbfff_ffff,
            ),
            Dtype::F16 => (&[0, 0x8000, 1, 0x83ff, 0x7c00, 0xfc00, 0x7e00, 0x7c01], 0xbfff),
            Dtype::Bf16 => (&[0, 0x8000, 1, 0x807f, 0x7f80, 0xff80, 0x7fc1, 0x7f81], 0xbfff),
        };
        let words = Array2::from_shape_fn((vocab, dim), |(row, _)| {
            if row % 4 == 1 && rng.below(8) == 0 {
                specials[rng.below(specials.len() as u64) as usize]
            } else {
                // Clearing the exponent's top bit keeps every value finite (and mostly
                // below 2, so sums stay in f16 range as often as not).
                rng.next_u32() & finite
            }
        });
        Self {
            dtype,
            f32s: words.mapv(f32::from_bits),
            f16s: words.mapv(|w| f16::from_bits(w as u16)),
            bf16s: words.mapv(|w| bf16::from_bits(w as u16)),
            words,
        }
    }

    fn embeddings(&self) -> Embeddings<'_> {
        match self.dtype {
            Dtype::F32 => Embeddings::F32(self.f32s.view()),
            Dtype::F16 => Embeddings::F16(self.f16s.view()),
            Dtype::Bf16 => Embeddings::Bf16(self.bf16s.view()),
        }
    }

    /// Element `(id, col)` as f32 bits, decoded by the shared integer code.
    fn f32_bits(&self, id: u32, col: usize) -> u32 {
        let w = self.words[[id as usize, col]];
        match self.dtype {
            Dtype::F32 => w,
            Dtype::F16 => f16_to_f32_bits(w),
            Dtype::Bf16 => bf16_to_f32_bits(w),
        }
    }
}

/// One element at a time: `scale * E[id] + PE(position)`, rounded to `out`, as raw words;
/// zeros for pad tokens.
fn reference(
    spec: &PeSpec,
    table: &Table,
    ids: &Array2<u32>,
    positions: &Array2<u32>,
    options: &EncodeOptions,
) -> Vec<u32> {
    let dim = spec.dim() as usize;
    let scale = options.scale.factor(dim).unwrap();
    let flat: Vec<u32> = positions.iter().copied().collect();
    let pe = cpu::table(spec, &flat);
    let mut out = Vec::with_capacity(flat.len() * dim);
    for (token, &id) in ids.iter().enumerate() {
        for col in 0..dim {
            if options.pad_id == Some(id) {
                out.push(0);
                continue;
            }
            let e = f32::from_bits(table.f32_bits(id, col));
            let p = pe[[token, col]];
            let v = match scale {
                None => e + p,
                Some(s) => e * s + p,
            };
            out.push(match options.out_dtype {
                Dtype::F32 => v.to_bits(),
                Dtype::F16 => f32_to_f16_bits(v.to_bits()),
                Dtype::Bf16 => f32_to_bf16_bits(v.to_bits()),
            });
        }
    }
    out
}

/// Every table type, output type, scale and pad id at one shape, through a fresh
/// `cpu::encode`, a reused `Encoder` (its cached PE rows) and, for f32, `encode_into`.
fn check_shape(what: &str, dim: u32, vocab: usize, ids: Array2<u32>, positions: Array2<u32>) {
    let spec = PeSpec::new(dim).unwrap();
    let encoder = cpu::Encoder::new(spec.clone());
    let mut rng = Rng::new(u64::from(dim) * 31 + ids.len() as u64);
    let (batch, len) = ids.dim();
    for table_dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
        let table = Table::new(table_dtype, vocab, dim as usize, &mut rng);
        for out_dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
            for scale in [Scale::None, Scale::SqrtDim, Scale::Value(-0.3)] {
                // No pad id; one the ids use (their rows become zeros); one past the table.
                for pad_id in [None, ids.iter().next().copied(), Some(vocab as u32 + 5)] {
                    let options = EncodeOptions { scale, pad_id, out_dtype };
                    let case = format!(
                        "{what}: {table_dtype:?} table -> {out_dtype:?}, {scale:?}, pad {pad_id:?}"
                    );
                    let want = reference(&spec, &table, &ids, &positions, &options);
                    let embeddings = table.embeddings();
                    let fresh =
                        cpu::encode(&spec, embeddings, ids.view(), positions.view(), &options)
                            .unwrap();
                    assert_words_eq(&case, &fresh.bits(), &want, dim as usize);
                    let warm = encoder.encode(embeddings, ids.view(), positions.view(), &options);
                    assert_words_eq(
                        &format!("{case} (Encoder)"),
                        &warm.unwrap().bits(),
                        &want,
                        dim as usize,
                    );
                    if out_dtype == Dtype::F32 {
                        let mut out = Array3::<f32>::from_elem((batch, len, dim as usize), 7.0);
                        encoder
                            .encode_into(
                                embeddings,
                                ids.view(),
                                positions.view(),
                                &options,
                                out.view_mut(),
                            )
                            .unwrap();
                        let got: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
                        assert_words_eq(
                            &format!("{case} (encode_into)"),
                            &got,
                            &want,
                            dim as usize,
                        );
                    }
                }
            }
        }
    }
}

/// Asserts two word slices are identical, naming the first difference.
fn assert_words_eq(what: &str, got: &[u32], want: &[u32], dim: usize) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!(
            "{what}: first difference at token {}, column {}: got {:#010x}, want {:#010x}",
            i / dim,
            i % dim,
            got[i],
            want[i]
        );
    }
}

#[test]
fn one_token_decode_steps_give_the_reference_bits() {
    let mut rng = Rng::new(1);
    // Mistral-7B's shape at a late position, and a small dim with a vector tail.
    check_shape(
        "1 token, dim 4096",
        4096,
        300,
        random_ids(&mut rng, 1, 1, 300),
        ndarray::array![[1234]],
    );
    check_shape("1 token, dim 18", 18, 50, random_ids(&mut rng, 1, 1, 50), ndarray::array![[0]]);
}

#[test]
fn sixteen_token_decode_steps_give_the_reference_bits() {
    let mut rng = Rng::new(2);
    // Sixteen sequences, each at its own position, as a batched decode step is.
    let ids = random_ids(&mut rng, 16, 1, 400);
    let positions = Array2::from_shape_fn((16, 1), |(b, _)| 17 * b as u32 + 3);
    check_shape("16 tokens, dim 2560", 2560, 400, ids, positions);
    let ids = random_ids(&mut rng, 1, 16, 400);
    check_shape(
        "1 x 16 tokens, dim 1000",
        1000,
        400,
        ids,
        positions::contiguous_batch(1, 16).unwrap(),
    );
}

#[test]
fn calls_split_into_many_tasks_give_the_reference_bits() {
    let mut rng = Rng::new(3);
    // 4 x 600 x 256 = 614400 values, past the 2^19 a call runs on the calling thread:
    // about ten 256 KiB tasks of f32 rows, five of f16.
    let ids = random_ids(&mut rng, 4, 600, 1000);
    check_shape(
        "4 x 600 tokens, dim 256",
        256,
        1000,
        ids,
        positions::contiguous_batch(4, 600).unwrap(),
    );
}

#[test]
fn positions_past_the_pe_cache_give_the_reference_bits() {
    let mut rng = Rng::new(4);
    // Past what the cache of rows 0..n may hold: fresh rows per distinct position.
    let ids = random_ids(&mut rng, 2, 3, 100);
    let positions = ndarray::array![[70_000, 5, 70_000], [u32::MAX, 4_000_000_000, 5]];
    check_shape("large positions, dim 256", 256, 100, ids, positions);
}

/// `Encoder::encode_into` writes every output type into the caller's array, with the bits
/// of `Encoder::encode`, and refuses an `out_dtype` that is not the array's.
#[test]
fn encode_into_writes_every_output_type() {
    use half::{bf16, f16};
    use ndarray::{Array2, Array3};
    use posenc::encode::{Dtype, Embeddings, EncodeOptions};
    let spec = posenc::PeSpec::new(12).unwrap();
    let encoder = posenc::cpu::Encoder::new(spec);
    let table = Array2::from_shape_fn((9, 12), |(i, j)| bf16::from_f32((i * 12 + j) as f32 / 7.0));
    let ids = Array2::from_shape_fn((2, 5), |(b, t)| ((b * 5 + t) % 9) as u32);
    let pos = posenc::positions::contiguous_batch(2, 5).unwrap();
    let t = Embeddings::Bf16(table.view());
    let options = |out_dtype| EncodeOptions { out_dtype, pad_id: Some(4), ..Default::default() };
    let mut f = Array3::<f32>::zeros((2, 5, 12));
    let mut h = Array3::from_elem((2, 5, 12), f16::ZERO);
    let mut b = Array3::from_elem((2, 5, 12), bf16::ZERO);
    encoder.encode_into(t, ids.view(), pos.view(), &options(Dtype::F32), f.view_mut()).unwrap();
    encoder.encode_into(t, ids.view(), pos.view(), &options(Dtype::F16), h.view_mut()).unwrap();
    encoder.encode_into(t, ids.view(), pos.view(), &options(Dtype::Bf16), b.view_mut()).unwrap();
    let want = |d| encoder.encode(t, ids.view(), pos.view(), &options(d)).unwrap().bits();
    assert_eq!(f.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want(Dtype::F32));
    assert_eq!(h.iter().map(|v| u32::from(v.to_bits())).collect::<Vec<_>>(), want(Dtype::F16));
    assert_eq!(b.iter().map(|v| u32::from(v.to_bits())).collect::<Vec<_>>(), want(Dtype::Bf16));
    let err = encoder
        .encode_into(t, ids.view(), pos.view(), &options(Dtype::F16), b.view_mut())
        .unwrap_err();
    assert!(matches!(err, posenc::Error::InvalidParameter { field: "out_dtype", .. }), "{err}");
    // The right shape in another layout says so (round twelve: "expected (2, 5, 12), got
    // (2, 5, 12)").
    let mut wide = Array3::<f32>::zeros((2, 5, 24));
    let strided = wide.slice_mut(ndarray::s![.., .., ..;2]);
    let err = encoder
        .encode_into(t, ids.view(), pos.view(), &options(Dtype::F32), strided)
        .unwrap_err()
        .to_string();
    assert!(err.contains("(2, 5, 12) with strides [120, 24, 2], not standard layout"), "{err}");
}
