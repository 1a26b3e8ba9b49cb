//! The cos/sin cache of a RoPE configuration in the layout Hugging Face's rotary modules
//! return, for loading into a framework's model in place of its own float32 cache.

use ndarray::{Array2, ArrayView3};

use super::{Frequencies, Pairing, RopeSpec};

/// The cos and sin tables of a RoPE configuration at a list of positions, laid out as
/// Hugging Face's rotary modules return them: `[positions, rotary_dim]`, the attention
/// factor applied, each frequency's value repeated as the pairing needs it (neox:
/// `cat(f, f)`, column `i` holding frequency `i mod r/2`; gptj: interleaved, columns `2i`
/// and `2i + 1` holding frequency `i`). The values are posenc's exact-phase cos and sin, so
/// the cache is the same on the CPU and the GPU, bit for bit.
///
/// ```
/// use posenc::rope::{Pairing, RopeSpec};
///
/// let spec = RopeSpec::new(8)?.with_base(10000.0)?.with_pairing(Pairing::Neox);
/// let cache = posenc::cpu::rope_cache(&spec, &[0, 1, 4_294_967_295])?;
/// assert_eq!(cache.cos.dim(), (3, 8));
/// assert_eq!(cache.cos.row(0).to_vec(), vec![1.0; 8]); // position 0: cos 0 = 1
/// assert_eq!(cache.cos[[1, 0]], cache.cos[[1, 4]]); // neox: cat(f, f)
/// assert_eq!(cache.inv_freq, [1.0, 0.1, 0.01, 0.001]);
/// # Ok::<(), posenc::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct RopeCache {
    /// `cos(p w_i)` times the attention factor, `[positions, rotary_dim]`.
    pub cos: Array2<f32>,
    /// `sin(p w_i)` times the attention factor, `[positions, rotary_dim]`.
    pub sin: Array2<f32>,
    /// The frequencies `w_i` in radians per position, `[rotary_dim / 2]`: the float32
    /// nearest to posenc's float64 value of each (Hugging Face's `inv_freq` buffer is
    /// float32). The cache itself is computed from the exact frequencies, not these.
    pub inv_freq: Vec<f32>,
    /// The factor cos and sin are multiplied by (Hugging Face's `attention_scaling`).
    pub attention_factor: f32,
}

impl RopeCache {
    /// The cache from the `[positions, r / 2, 2]` table of [`crate::cpu::rope_cos_sin`] or
    /// [`crate::gpu::Context::rope_cos_sin`] for `freqs` of `spec`.
    pub(crate) fn from_cos_sin(
        spec: &RopeSpec,
        freqs: &Frequencies,
        cs: ArrayView3<'_, f32>,
    ) -> crate::Result<Self> {
        let (rows, n, _) = cs.dim();
        let r = 2 * n;
        let column = |c: usize| match spec.pairing() {
            Pairing::Neox => c % n.max(1),
            Pairing::Gptj => c / 2,
        };
        // The caller's position count sets the size: a refusal from the allocator (or a
        // size past a 32-bit target's address space) is an error, not an abort or a panic.
        let lay = |what, k: usize| -> crate::Result<Array2<f32>> {
            let mut out = crate::alloc::try_zeros_unadvised::<f32, _>(what, (rows, r))?;
            let flat = out.as_slice_mut().expect("a new array is contiguous");
            for (p, row) in flat.chunks_exact_mut(r.max(1)).enumerate() {
                let pairs = cs.index_axis(ndarray::Axis(0), p);
                match pairs.as_slice() {
                    Some(pairs) => {
                        for (c, v) in row.iter_mut().enumerate() {
                            *v = pairs[2 * column(c) + k];
                        }
                    }
                    None => {
                        row.iter_mut().enumerate().for_each(|(c, v)| *v = pairs[[column(c), k]])
                    }
                }
            }
            Ok(out)
        };
        Ok(Self {
            cos: lay("the cos cache", 0)?,
            sin: lay("the sin cache", 1)?,
            inv_freq: freqs.inv_freq().iter().map(|&w| w as f32).collect(),
            attention_factor: freqs.attention_factor(),
        })
    }
}

/// The frequencies a cache at `positions` uses: the spec's fixed sequence length if it has
/// one, else the largest position plus one, as for a rotation at those positions.
pub(crate) fn cache_frequencies(spec: &RopeSpec, positions: &[u32]) -> Frequencies {
    let view = ndarray::ArrayView2::from_shape((1, positions.len()), positions)
        .expect("one row of the positions' length");
    spec.frequencies_for(view)
}

/// Refuses a cache of `spec` at `positions` positions that would hold more than
/// [`MAX_OUTPUT_VALUES`](crate::source::MAX_OUTPUT_VALUES) values, before anything is
/// computed: the check [`crate::cpu::rope_cache`] and `gpu::Context::rope_cache` make,
/// for a caller that must make it before it converts or allocates the positions.
///
/// # Errors
/// [`crate::Error::TooLarge`] naming the caches' shape and the limit.
pub fn check_cache_size(spec: &RopeSpec, positions: usize) -> crate::Result<()> {
    crate::source::check_shape(
        "rope_cache",
        "the cos and sin caches",
        &[2, positions, spec.rotary_dim() as usize],
        crate::source::MAX_OUTPUT_VALUES,
        "MAX_OUTPUT_VALUES",
    )
}
