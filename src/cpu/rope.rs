//! CPU twin of `shaders/rope_cs.wgsl` and `shaders/rope.wgsl`: rotary position embedding
//! with the exact-phase cos and sin, multi-threaded. Same integer cos/sin, same f32
//! operations in the same order as the shaders, so the two paths agree bit for bit (the
//! shaders round each product before a sum takes it, so no GPU compiler contracts
//! `x * c - y * s` into a fused multiply-add).

use ndarray::{
    Array3, Array4, ArrayView2, ArrayView3, ArrayView4, ArrayViewMut1, ArrayViewMut3,
    ArrayViewMut4, Axis,
};
use rayon::prelude::*;

use super::sincos::{phase_turns, sincos_bits_as};
use crate::error::Result;
use crate::rope::{
    Element, Frequencies, Geometry, Layout, MultimodalRope, Pairing, RopeCache, RopeSpec,
    TokenPositions,
};
use crate::simd::{Set, Simd};

/// Tokens per rayon task: their cos/sin row is computed once and used by every head.
const TOKENS_PER_TASK: usize = 64;

/// Elements of `x` up to which a rotation runs on the calling thread, about 30 us of one
/// core. Handing work to rayon from outside the pool wakes a worker and waits for it, which
/// costs more than that (see `super::encode`). Measured on 2 cores (2026-12-02, bf16, 40
/// heads of 128, medians of 60 calls), one thread against the pool, with calls back to
/// back and with 3 ms between them (the pool asleep): 163840 elements 37 against 46 us and
/// 43 against 153 us; a decode step's q and k (40960) 8 against 14 and 17 against 109.
const SERIAL_MAX_ELEMENTS: usize = 1 << 17;

/// cos/sin values up to which [`rope_cos_sin`] runs on the calling thread, as
/// [`SERIAL_MAX_ELEMENTS`], measured the same way: 32768 values 39 against 84 us and 41
/// against 144; a decode step's 8 positions of 64 frequencies (1024) 1.2 against 33 and 6
/// against 75.
const SERIAL_MAX_COS_SIN: usize = 1 << 15;

/// `(cos, sin)` of every frequency at position `p`, each times the attention factor in f32
/// (when it is not 1): the twin of one row of `shaders/rope_cs.wgsl`.
#[inline]
pub fn cos_sin_row(freqs: &Frequencies, p: u32, out: &mut [(f32, f32)]) {
    cos_sin_row_inline::<false>(freqs, [p; 3], None, out);
}

/// [`cos_sin_row`], inlined into the loops compiled for each instruction set; with `axes`
/// (a multimodal RoPE), frequency `i` takes the position of its axis `axes.axis(i)` of
/// `ps`, else every frequency takes `ps[0]`. With `CVT`, the float32 assembly by the
/// hardware's conversion (the same bits in the SSE mode's default only: `sincos_bits_as`).
#[inline(always)]
fn cos_sin_row_inline<const CVT: bool>(
    freqs: &Frequencies,
    ps: [u32; 3],
    axes: Axes<'_>,
    out: Row<'_>,
) {
    let af = freqs.attention_factor();
    match axes {
        None => {
            for (slot, &step) in out.iter_mut().zip(freqs.steps()) {
                *slot = cos_sin_at::<CVT>(ps[0], step, af);
            }
        }
        Some(axes) => {
            // Each run of frequencies' positions first, then the loop above over them: a
            // loop whose every lane finds its axis as it goes does not vectorise (2.5x the
            // 1-D loop's time per byte at Qwen2.5-VL-7B's prefill, 2026-12-03).
            const RUN: usize = 64;
            let mut at = [0u32; RUN];
            let runs = out.chunks_mut(RUN).zip(freqs.steps().chunks(RUN));
            for (k, (slots, steps)) in runs.enumerate() {
                for (j, p) in at.iter_mut().enumerate().take(slots.len()) {
                    *p = ps[usize::from(axes.axis((k * RUN + j) as u32))];
                }
                for ((slot, &step), &p) in slots.iter_mut().zip(steps).zip(&at) {
                    *slot = cos_sin_at::<CVT>(p, step, af);
                }
            }
        }
    }
}

/// `(cos, sin)` of one frequency (its turn step `[lo, hi]`) at position `p`, times the
/// attention factor `af` when it is not 1. Always inlined: as a call (a closure both loops
/// of [`cos_sin_row_inline`] shared was one) the rows no longer vectorised, and a decode
/// step's CPU RoPE took 1.4 - 2x as long (lavapipe machine, 2026-12-03).
#[inline(always)]
fn cos_sin_at<const CVT: bool>(p: u32, [lo, hi]: [u32; 2], af: f32) -> (f32, f32) {
    let (s, c) = sincos_bits_as::<CVT>(phase_turns(p, lo, hi));
    let (c, s) = (f32::from_bits(c), f32::from_bits(s));
    if af == 1.0 { (c, s) } else { (c * af, s * af) }
}

/// The cos/sin table `[positions.len(), r / 2, 2]` (cos at `[.., .., 0]`, sin at
/// `[.., .., 1]`) the rotation uses, attention factor included; bit-identical to
/// [`crate::gpu::Context::rope_cos_sin`]. Its result is allocated as `ndarray` allocates (a
/// refusal aborts the process, as `Vec`'s does, and a size past a 32-bit target's address
/// space panics); for a count of positions that comes from untrusted input,
/// [`rope_cache`] allocates fallibly.
pub fn rope_cos_sin(freqs: &Frequencies, positions: &[u32]) -> Array3<f32> {
    let mut out = Array3::<f32>::zeros((positions.len(), freqs.len(), 2));
    fill_cos_sin(freqs, positions, out.as_slice_mut().expect("a new array is contiguous"));
    out
}

/// [`rope_cos_sin`] into `flat`, a fresh `[positions.len(), r / 2, 2]` table.
fn fill_cos_sin(freqs: &Frequencies, positions: &[u32], flat: &mut [f32]) {
    let n = freqs.len();
    if n == 0 {
        return;
    }
    crate::alloc::advise_huge_pages(flat);
    let simd = Simd::detect();
    let row = |pairs: &mut Vec<(f32, f32)>, (row, &p): (&mut [f32], &u32)| {
        cos_sin_row_as(simd, freqs, [p; 3], None, pairs);
        for (dst, &(c, s)) in row.chunks_exact_mut(2).zip(pairs.iter()) {
            dst[0] = c;
            dst[1] = s;
        }
    };
    let pairs = || vec![(0.0, 0.0); n];
    if flat.len() <= SERIAL_MAX_COS_SIN {
        let mut pairs = pairs();
        flat.chunks_mut(2 * n).zip(positions).for_each(|task| row(&mut pairs, task));
    } else {
        flat.par_chunks_mut(2 * n).zip(positions.par_iter()).for_each_init(pairs, row);
    }
}

/// The cos/sin cache of `spec` at `positions` in Hugging Face's layout (see
/// [`RopeCache`]); bit-identical to [`crate::gpu::Context::rope_cache`]. Its frequencies
/// are those of a rotation at the same positions ([`RopeSpec::frequencies_for`]).
///
/// # Errors
/// [`crate::Error::TooLarge`] if the two tables would hold more than
/// [`crate::source::MAX_OUTPUT_VALUES`] values, before anything is computed;
/// [`crate::Error::Alloc`] if their memory cannot be had.
pub fn rope_cache(spec: &RopeSpec, positions: &[u32]) -> Result<RopeCache> {
    crate::rope::check_cache_size(spec, positions.len())?;
    let freqs = crate::rope::cache_frequencies(spec, positions);
    let shape = (positions.len(), freqs.len(), 2);
    // Advised by the fill, as `rope_cos_sin`'s table is.
    let mut cs = crate::alloc::try_zeros_unadvised::<f32, _>("the cos/sin table", shape)?;
    fill_cos_sin(&freqs, positions, cs.as_slice_mut().expect("a new array is contiguous"));
    RopeCache::from_cos_sin(spec, &freqs, cs.view())
}

/// A token's cos/sin row, interleaved as [`cos_sin_row`] fills it (GPT-J's adjacent pairs'
/// loops and the compiler's f32 loops read it so), and, for the 16-bit types' NeoX loops, its
/// copy apart: eight cos and eight sin in two loads (a split per token, shared by all its
/// heads, took about 20 % off those loops on AVX2, where each head's loop had de-interleaved
/// every eight pairs; 2026-12-05, Zen 3).
#[derive(Clone, Debug, Default)]
struct CosSinRow {
    pairs: Vec<(f32, f32)>,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl CosSinRow {
    /// A row of `n` frequencies.
    fn new(n: usize) -> Self {
        Self { pairs: vec![(0.0, 0.0); n], cos: Vec::new(), sin: Vec::new() }
    }

    /// A row holding `pairs`, split.
    #[cfg(test)]
    fn from_pairs(pairs: &[(f32, f32)]) -> Self {
        let mut row = Self::new(pairs.len());
        row.pairs.copy_from_slice(pairs);
        row.split();
        row
    }

    /// Copies `pairs`, just filled, apart into `cos` and `sin`.
    fn split(&mut self) {
        self.cos.clear();
        self.sin.clear();
        self.cos.extend(self.pairs.iter().map(|&(c, _)| c));
        self.sin.extend(self.pairs.iter().map(|&(_, s)| s));
    }
}

/// Rotates one head row: pairs `(a, b)` of frequency `i` become
/// `(x_a c - x_b s, x_b c + x_a s)` in f32, each product and the sum rounded separately
/// (Rust never contracts them); dimensions from `r` on are left as they are.
#[inline(always)]
fn rotate_row<T: Element>(row: &mut [T], cs: &CosSinRow, pairing: Pairing) {
    match pairing {
        Pairing::Neox => {
            // Zipped slices rather than indices, so that the loop vectorises (no bounds
            // checks, no aliasing between the halves).
            let n = cs.pairs.len();
            let (xs, rest) = row.split_at_mut(n);
            for ((x, y), &(c, s)) in xs.iter_mut().zip(&mut rest[..n]).zip(&cs.pairs) {
                let (xv, yv) = (x.to_f32(), y.to_f32());
                *x = T::from_f32(xv * c - yv * s);
                *y = T::from_f32(yv * c + xv * s);
            }
        }
        Pairing::Gptj => {
            for (i, &(c, s)) in cs.pairs.iter().enumerate() {
                let (x, y) = (row[2 * i].to_f32(), row[2 * i + 1].to_f32());
                row[2 * i] = T::from_f32(x * c - y * s);
                row[2 * i + 1] = T::from_f32(y * c + x * s);
            }
        }
    }
}

/// Rotates one head row; a strided row through `scratch`, a row buffer its caller keeps.
fn rotate_lane<T: Element>(
    simd: Simd,
    mut lane: ArrayViewMut1<'_, T>,
    cs: &CosSinRow,
    pairing: Pairing,
    scratch: &mut Vec<T>,
) {
    match lane.as_slice_mut() {
        Some(row) => rotate_row_as(simd, row, cs, pairing),
        None => {
            scratch.clear();
            scratch.extend(lane.iter().copied());
            rotate_row_as(simd, scratch, cs, pairing);
            lane.assign(&ndarray::ArrayView1::from(&scratch[..]));
        }
    }
}

/// Applies RoPE to `x` in place. `x` is `[B, L, H, Dh]` or `[B, H, L, Dh]` as `layout`
/// says, `positions` is `[B, L]` (one position per token, shared by its heads; see
/// [`crate::positions`]). The frequencies are [`RopeSpec::frequencies_for`] the positions.
///
/// # Errors
/// [`crate::Error::Shape`] if the last axis is not the spec's head dim or `positions` is
/// not `[B, L]`; [`crate::Error::TooLarge`] if `x` (a broadcast view, say) has more
/// elements than `isize::MAX` bytes of 4-byte ones and no zero axis.
pub fn rope_in_place<T: Element>(
    spec: &RopeSpec,
    x: ArrayViewMut4<'_, T>,
    positions: ArrayView2<'_, u32>,
    layout: Layout,
) -> Result<()> {
    rotate_in_place("rope_in_place", spec, x, TokenPositions::One(positions), layout)
}

/// [`rope_in_place`] on a copy: returns the rotated tensor in standard layout.
///
/// # Errors
/// As [`rope_in_place`], before the copy is allocated; [`crate::Error::Alloc`] if it
/// cannot be had.
pub fn rope<T: Element>(
    spec: &RopeSpec,
    x: ArrayView4<'_, T>,
    positions: ArrayView2<'_, u32>,
    layout: Layout,
) -> Result<Array4<T>> {
    rotate("rope", spec, x, TokenPositions::One(positions), layout)
}

/// [`rope`] into an array the caller has: `out` (of `x`'s shape, any strides) receives `x`
/// rotated; `x` is left as it is. Each of the pool's tasks copies its own tokens just before
/// it rotates them, as [`rope`] does, so nothing is allocated but a row of cos/sin per task
/// (and a head row's copy, for rows not contiguous in memory).
/// (Rust's borrows keep `out` from overlapping `x`; [`rope_in_place`] rotates an array
/// where it is.)
///
/// # Errors
/// As [`rope_in_place`], and [`crate::Error::Shape`] if `out`'s shape is not `x`'s; `out`
/// is not written then.
pub fn rope_into<T: Element>(
    spec: &RopeSpec,
    x: ArrayView4<'_, T>,
    out: ArrayViewMut4<'_, T>,
    positions: ArrayView2<'_, u32>,
    layout: Layout,
) -> Result<()> {
    rotate_into("rope_into", spec, x, out, TokenPositions::One(positions), layout)
}

/// Applies a multimodal RoPE (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V, ...) to `x`
/// in place: as [`rope_in_place`], but each token has a position per axis, `positions`
/// `[3, B, L]` (time, height, width), and frequency `i` turns by the position of axis
/// `mrope.axes()[i]`. A token whose three positions are equal (text) rotates as
/// [`rope_in_place`] rotates it at that position, bit for bit. The frequencies are those of
/// the largest position of any axis plus one (or [`RopeSpec::with_seq_len`]'s), as
/// transformers' dynamic update takes them.
///
/// ```
/// use posenc::rope::{Layout, MultimodalRope, RopeSpec};
///
/// let json = r#"{"model_type": "qwen2_vl", "hidden_size": 256, "num_attention_heads": 2,
///     "rope_theta": 1000000.0,
///     "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}"#;
/// let (spec, mrope) = RopeSpec::from_hf_config_multimodal(json, None, None)?;
/// let mrope = mrope.expect("Qwen2-VL's RoPE is multimodal");
/// let q = ndarray::Array4::<f32>::ones((1, 4, 2, 128)); // [B, L, H, Dh]
/// // An image patch's (time, height, width) at tokens 0..2, text at 3 (axes equal).
/// let positions = ndarray::array![[[0u32, 0, 0, 3]], [[0, 0, 1, 3]], [[0, 1, 0, 3]]];
/// let (p, layout) = (positions.view(), Layout::Blhd);
/// let rotated = posenc::cpu::rope_multimodal(&spec, &mrope, q.view(), p, layout)?;
/// let text = ndarray::array![[0u32, 0, 0, 3]];
/// let one = posenc::cpu::rope(&spec, q.view(), text.view(), Layout::Blhd)?;
/// assert_eq!(rotated.slice(ndarray::s![.., 3, .., ..]), one.slice(ndarray::s![.., 3, .., ..]));
/// assert_ne!(rotated.slice(ndarray::s![.., 1, .., ..]), one.slice(ndarray::s![.., 1, .., ..]));
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// # Errors
/// [`crate::Error::InvalidParameter`] naming `mrope` if it assigns another number of
/// frequencies than the spec's `rotary_dim / 2`; [`crate::Error::Shape`] if `positions` is
/// not `[3, B, L]` of the tensor's `B` and `L`; otherwise as [`rope_in_place`].
pub fn rope_multimodal_in_place<T: Element>(
    spec: &RopeSpec,
    mrope: &MultimodalRope,
    x: ArrayViewMut4<'_, T>,
    positions: ArrayView3<'_, u32>,
    layout: Layout,
) -> Result<()> {
    let op = "rope_multimodal_in_place";
    rotate_in_place(op, spec, x, TokenPositions::axes(op, spec, mrope, positions)?, layout)
}

/// [`rope_multimodal_in_place`] on a copy: returns the rotated tensor in standard layout.
///
/// # Errors
/// As [`rope_multimodal_in_place`], before the copy is allocated; [`crate::Error::Alloc`]
/// if it cannot be had.
pub fn rope_multimodal<T: Element>(
    spec: &RopeSpec,
    mrope: &MultimodalRope,
    x: ArrayView4<'_, T>,
    positions: ArrayView3<'_, u32>,
    layout: Layout,
) -> Result<Array4<T>> {
    let op = "rope_multimodal";
    rotate(op, spec, x, TokenPositions::axes(op, spec, mrope, positions)?, layout)
}

/// [`rope_multimodal`] into an array the caller has, as [`rope_into`].
///
/// # Errors
/// As [`rope_multimodal_in_place`], and [`crate::Error::Shape`] if `out`'s shape is not
/// `x`'s; `out` is not written then.
pub fn rope_multimodal_into<T: Element>(
    spec: &RopeSpec,
    mrope: &MultimodalRope,
    x: ArrayView4<'_, T>,
    out: ArrayViewMut4<'_, T>,
    positions: ArrayView3<'_, u32>,
    layout: Layout,
) -> Result<()> {
    let op = "rope_multimodal_into";
    let positions = TokenPositions::axes(op, spec, mrope, positions)?;
    rotate_into(op, spec, x, out, positions, layout)
}

/// [`rope_in_place`] and [`rope_multimodal_in_place`] as `op`.
fn rotate_in_place<T: Element>(
    op: &'static str,
    spec: &RopeSpec,
    x: ArrayViewMut4<'_, T>,
    positions: TokenPositions<'_>,
    layout: Layout,
) -> Result<()> {
    let shape = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    let geometry = Geometry::check(op, spec, shape, layout, positions.dim())?;
    if geometry.elements() == 0 {
        return Ok(());
    }
    let freqs = positions.frequencies(spec);
    apply(&freqs, spec.pairing(), None, x, positions, layout);
    Ok(())
}

/// [`rope`] and [`rope_multimodal`] as `op`.
fn rotate<T: Element>(
    op: &'static str,
    spec: &RopeSpec,
    x: ArrayView4<'_, T>,
    positions: TokenPositions<'_>,
    layout: Layout,
) -> Result<Array4<T>> {
    let shape = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    Geometry::check(op, spec, shape, layout, positions.dim())?;
    let mut out = crate::alloc::try_zeros::<T, _>("the RoPE output", x.raw_dim())?;
    if !out.is_empty() {
        let freqs = positions.frequencies(spec);
        apply(&freqs, spec.pairing(), Some(x), out.view_mut(), positions, layout);
    }
    Ok(out)
}

/// [`rope_into`] and [`rope_multimodal_into`] as `op`.
fn rotate_into<T: Element>(
    op: &'static str,
    spec: &RopeSpec,
    x: ArrayView4<'_, T>,
    out: ArrayViewMut4<'_, T>,
    positions: TokenPositions<'_>,
    layout: Layout,
) -> Result<()> {
    let geometry = Geometry::check_into(op, spec, x.shape(), out.shape(), layout, positions.dim())?;
    if geometry.elements() == 0 {
        return Ok(());
    }
    let freqs = positions.frequencies(spec);
    apply(&freqs, spec.pairing(), Some(x), out, positions, layout);
    Ok(())
}

/// Rotates `x` with given frequencies (shapes already checked), in place, or, given `from`
/// (of `x`'s shape), into `x` from `from`: each task copies its tokens just before it
/// rotates them, so the copy is parallel and the rotation finds them in cache, where a whole
/// copy first would cross the memory twice, the first time on one thread.
fn apply<T: Element>(
    freqs: &Frequencies,
    pairing: Pairing,
    from: Option<ArrayView4<'_, T>>,
    mut x: ArrayViewMut4<'_, T>,
    positions: TokenPositions<'_>,
    layout: Layout,
) {
    let elements = x.len();
    let axes = positions.mrope();
    // Token-major views [B, L, H, Dh] whatever the layout.
    let (tokens, from) = match layout {
        Layout::Blhd => (x.view_mut(), from),
        Layout::Bhld => {
            (x.view_mut().permuted_axes([0, 2, 1, 3]), from.map(|f| f.permuted_axes([0, 2, 1, 3])))
        }
    };
    let mut tasks = Vec::new();
    for (b, seq) in tokens.into_outer_iter_mut().enumerate() {
        for (k, block) in seq.into_axis_chunks_iter_mut(Axis(0), TOKENS_PER_TASK).enumerate() {
            let l0 = k * TOKENS_PER_TASK;
            let span = ndarray::Slice::from(l0..l0 + block.len_of(Axis(0)));
            let source = from.map(|f| f.index_axis_move(Axis(0), b).slice_axis_move(Axis(0), span));
            tasks.push((b, l0, block, source));
        }
    }
    let simd = Simd::detect();
    let n = freqs.len();
    let task = |(cs, row): &mut Buffers<T>, (b, l0, block, source): Task<'_, '_, T>| {
        // f16 rows take F16C in the SSE mode's default only: read on the thread that runs
        // the task (its mode is its own); other types' loops do not depend on it.
        let simd =
            if T::DTYPE == crate::dtype::Dtype::F16 { simd.unless_nondefault_mode() } else { simd };
        for (dl, mut token) in block.into_outer_iter_mut().enumerate() {
            if let Some(source) = &source {
                token.assign(&source.index_axis(Axis(0), dl));
            }
            cos_sin_row_as(simd, freqs, positions.at(b, l0 + dl), axes, &mut cs.pairs);
            // The 16-bit types' NeoX loops read the row apart (see `CosSinRow`).
            if pairing == Pairing::Neox && T::DTYPE != crate::dtype::Dtype::F32 {
                cs.split();
            }
            for lane in token.into_outer_iter_mut() {
                rotate_lane(simd, lane, cs, pairing, row);
            }
        }
    };
    let cs = || (CosSinRow::new(n), Vec::new());
    if elements <= SERIAL_MAX_ELEMENTS {
        let mut cs = cs();
        tasks.into_iter().for_each(|t| task(&mut cs, t));
    } else {
        tasks.into_par_iter().for_each_init(cs, task);
    }
}

/// What each task of [`apply`] keeps between its tokens: a token's cos/sin row and a head
/// row's copy (for rows not contiguous in memory).
type Buffers<T> = (CosSinRow, Vec<T>);

/// One task of [`apply`]: its sequence, its first token, its tokens `[tokens, H, Dh]` and
/// what to copy into them first.
type Task<'x, 'f, T> = (usize, usize, ArrayViewMut3<'x, T>, Option<ndarray::ArrayView3<'f, T>>);

// The two loops, compiled once per instruction set (`Simd`). Each is a function of its own,
// called per row: inlined into the loop over heads, the rotation lost its vectorisation
// (LLVM no longer saw its two halves apart), and took 1.5x as long (2026-11-28).

/// [`cos_sin_row`] with the widest instructions `simd` names.
#[inline]
fn cos_sin_row_as(simd: Simd, freqs: &Frequencies, ps: [u32; 3], axes: Axes<'_>, out: Row<'_>) {
    match simd.set() {
        Set::Portable => cos_sin_row_inline::<false>(freqs, ps, axes, out),
        // SAFETY: a `Simd` names a set this CPU runs (see its type). The conversion form
        // in the SSE mode's default only, read on the thread that computes the row.
        #[cfg(target_arch = "x86_64")]
        Set::Avx2 if simd.unless_nondefault_mode() == simd => unsafe {
            cos_sin_row_avx2_cvt(freqs, ps, axes, out)
        },
        #[cfg(target_arch = "x86_64")]
        Set::Avx2 => unsafe { cos_sin_row_avx2(freqs, ps, axes, out) },
        #[cfg(target_arch = "x86_64")]
        Set::Avx512 if simd.unless_nondefault_mode() == simd => unsafe {
            cos_sin_row_avx512_cvt(freqs, ps, axes, out)
        },
        #[cfg(target_arch = "x86_64")]
        Set::Avx512 => unsafe { cos_sin_row_avx512(freqs, ps, axes, out) },
    }
}

/// The axes of positions per axis ([`cos_sin_row_inline`]).
type Axes<'a> = Option<&'a MultimodalRope>;

/// A cos/sin row being filled.
type Row<'a> = &'a mut [(f32, f32)];

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline(never)]
fn cos_sin_row_avx2(freqs: &Frequencies, ps: [u32; 3], axes: Axes<'_>, out: Row<'_>) {
    cos_sin_row_inline::<false>(freqs, ps, axes, out);
}

/// The AVX2 row with its float32 assembly by VCVTDQ2PS (`sincos_bits_as`), where the
/// integer form's leading-zero count has no AVX2 instruction: for threads in the SSE mode's
/// default ([`cos_sin_row_as`] checks).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
#[inline(never)]
fn cos_sin_row_avx2_cvt(freqs: &Frequencies, ps: [u32; 3], axes: Axes<'_>, out: Row<'_>) {
    cos_sin_row_inline::<true>(freqs, ps, axes, out);
}

/// The AVX-512 row with its float32 assembly by VPLZCNTD: for threads in another SSE mode
/// than the default.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512cd,avx512vl,avx512bw")]
#[inline(never)]
fn cos_sin_row_avx512(freqs: &Frequencies, ps: [u32; 3], axes: Axes<'_>, out: Row<'_>) {
    cos_sin_row_inline::<false>(freqs, ps, axes, out);
}

/// The AVX-512 row with its float32 assembly by VCVTDQ2PS, as [`cos_sin_row_avx2_cvt`]:
/// faster than VPLZCNTD's integer form on AVX-512 too (2026-12-05), for threads in the SSE
/// mode's default ([`cos_sin_row_as`] checks).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512cd,avx512vl,avx512bw")]
#[inline(never)]
fn cos_sin_row_avx512_cvt(freqs: &Frequencies, ps: [u32; 3], axes: Axes<'_>, out: Row<'_>) {
    cos_sin_row_inline::<true>(freqs, ps, axes, out);
}

/// [`rotate_row`] with the widest instructions `simd` names.
#[inline]
fn rotate_row_as<T: Element>(simd: Simd, row: &mut [T], cs: &CosSinRow, pairing: Pairing) {
    match simd.set() {
        Set::Portable => rotate_row_portable(row, cs, pairing),
        // SAFETY: a `Simd` names a set this CPU runs (see its type).
        #[cfg(target_arch = "x86_64")]
        Set::Avx2 => unsafe { rotate_row_avx2(row, cs, pairing) },
        #[cfg(target_arch = "x86_64")]
        Set::Avx512 => unsafe { rotate_row_avx512(row, cs, pairing) },
    }
}

#[inline(never)]
fn rotate_row_portable<T: Element>(row: &mut [T], cs: &CosSinRow, pairing: Pairing) {
    rotate_row(row, cs, pairing);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
#[inline(never)]
fn rotate_row_avx2<T: Element>(row: &mut [T], cs: &CosSinRow, pairing: Pairing) {
    if let Some(bits) = halves(row, crate::dtype::Dtype::F16) {
        return f16c::rotate_row(bits, cs, pairing);
    }
    if let Some(bits) = halves(row, crate::dtype::Dtype::Bf16) {
        return bf16x8::rotate_row(bits, cs, pairing);
    }
    rotate_row(row, cs, pairing);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512cd,avx512vl,avx512bw,avx2,f16c")]
#[inline(never)]
fn rotate_row_avx512<T: Element>(row: &mut [T], cs: &CosSinRow, pairing: Pairing) {
    if let Some(bits) = halves(row, crate::dtype::Dtype::F16) {
        return f16c::rotate_row_avx512(bits, cs, pairing);
    }
    if let Some(bits) = halves(row, crate::dtype::Dtype::Bf16) {
        return bf16x8::rotate_row_avx512(bits, cs, pairing);
    }
    rotate_row(row, cs, pairing);
}

/// A row of `dtype` (f16 or bf16) as its bits, for the 16-bit loops; `None` for other
/// types.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn halves<T: Element>(row: &mut [T], dtype: crate::dtype::Dtype) -> Option<&mut [u16]> {
    if T::DTYPE != dtype {
        return None;
    }
    bytemuck::try_cast_slice_mut(row).ok()
}

/// RoPE of f16 rows with F16C's conversions, eight pairs at a time, for the AVX2 and
/// AVX-512 sets (AVX-512's NeoX loop sixteen at a time first; each set includes F16C:
/// [`Simd::detect`]; a thread whose SSE mode is not the default runs the baseline instead:
/// [`Simd::unless_nondefault_mode`]). VCVTPH2PS widens each half exactly, as
/// `f16_to_f32_bits_branchless` does (but for a signalling NaN, which it quiets: groups
/// holding a NaN take the scalar loop); the products and sums are the scalar
/// loop's, in its order and unfused; VCVTPS2PH rounds each result to nearest even,
/// overflowing to infinity, as `f32_to_f16_bits_branchless` does for every f32 (an
/// exhaustive test checks both conversions), so the rows get the scalar loop's bits. The
/// software conversions cost about 25 integer operations per element; these one
/// instruction per eight.
#[cfg(target_arch = "x86_64")]
mod f16c {
    use crate::simd::{unfolded128, unfolded256};
    use std::arch::x86_64::{
        __m128i, __m256, __m256i, __m512, _mm_and_si128, _mm_cmpgt_epi16, _mm_loadu_si128,
        _mm_or_si128, _mm_set1_epi16, _mm_storeu_si128, _mm_testz_si128, _mm256_add_ps,
        _mm256_addsub_ps, _mm256_and_si256, _mm256_cmpgt_epi16_mask, _mm256_cvtph_ps,
        _mm256_cvtps_ph, _mm256_loadu_ps, _mm256_loadu_si256, _mm256_movehdup_ps,
        _mm256_moveldup_ps, _mm256_mul_ps, _mm256_or_si256, _mm256_permute_ps, _mm256_set1_epi16,
        _mm256_storeu_si256, _mm256_sub_ps, _mm512_add_ps, _mm512_cvtph_ps, _mm512_cvtps_ph,
        _mm512_loadu_ps, _mm512_mul_ps, _mm512_sub_ps,
    };

    use half::f16;

    use super::CosSinRow;
    use crate::rope::{Element, Pairing};

    // The loops read a row of `(cos, sin)` as interleaved floats, which Rust's layout of a
    // tuple does not promise: checked where it is compiled.
    const _: () = assert!(
        size_of::<(f32, f32)>() == 8
            && std::mem::offset_of!((f32, f32), 0) == 0
            && std::mem::offset_of!((f32, f32), 1) == 4
    );

    /// Whether any of the eight halves in `h` is a NaN (all exponent bits set and a
    /// nonzero fraction), which VCVTPH2PS would quiet.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn any_nan(h: __m128i) -> bool {
        let magnitude = _mm_and_si128(h, _mm_set1_epi16(0x7fff));
        // As signed 16-bit lanes the magnitudes are non-negative, so the signed compare
        // orders them.
        let nan = _mm_cmpgt_epi16(magnitude, _mm_set1_epi16(0x7c00));
        _mm_testz_si128(nan, nan) == 0
    }

    /// The scalar loop's rotation of one pair of halves.
    #[inline(always)]
    fn pair(x: &mut u16, y: &mut u16, (c, s): (f32, f32)) {
        let widen = |h: u16| <f16 as Element>::to_f32(f16::from_bits(h));
        let (xv, yv) = (widen(*x), widen(*y));
        *x = <f16 as Element>::from_f32(xv * c - yv * s).to_bits();
        *y = <f16 as Element>::from_f32(yv * c + xv * s).to_bits();
    }

    /// Eight floats, the slice's (`_mm256_loadu_ps` of a slice of exactly eight).
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    pub(super) fn load8(v: &[f32]) -> __m256 {
        assert!(v.len() == 8);
        // SAFETY: eight floats (asserted, a check the compiler folds where the callers
        // slice eight).
        unsafe { _mm256_loadu_ps(v.as_ptr()) }
    }

    /// NeoX's sums of sixteen pairs, widened, by the sixteen cos and sin of `c` and `s`: the
    /// scalar loop's (x c - y s, y c + x s), each product rounded before its sum. For the f16
    /// and bf16 loops alike.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) fn neox_sums16(x: __m512, y: __m512, c: &[f32], s: &[f32]) -> (__m512, __m512) {
        assert!(c.len() == 16 && s.len() == 16);
        // SAFETY: sixteen floats each (asserted, a check the compiler folds where the
        // callers slice sixteen).
        let (c, s) = unsafe { (_mm512_loadu_ps(c.as_ptr()), _mm512_loadu_ps(s.as_ptr())) };
        let xo = _mm512_sub_ps(_mm512_mul_ps(x, c), _mm512_mul_ps(y, s));
        let yo = _mm512_add_ps(_mm512_mul_ps(y, c), _mm512_mul_ps(x, s));
        (xo, yo)
    }

    /// GPT-J's sums of the eight pairs (x, y) interleaved in `v`, widened, by `pairs`'
    /// (cos, sin): AVX-512 has no ADDSUBPS, so the sums are added in every lane, then
    /// subtracted under a mask in the even ones, (x c - y s, y c + x s) as AVX2's loops
    /// make them. For the f16 and bf16 loops alike.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) fn gptj_sums16(v: __m512, pairs: &[(f32, f32)]) -> __m512 {
        use std::arch::x86_64::{
            _mm512_mask_sub_ps, _mm512_movehdup_ps, _mm512_moveldup_ps, _mm512_permute_ps,
        };
        assert!(pairs.len() == 8);
        let swapped = _mm512_permute_ps::<0xb1>(v);
        // SAFETY: eight pairs, sixteen floats interleaved (asserted; the layout is checked
        // where this module is compiled).
        let interleaved = unsafe { _mm512_loadu_ps(pairs.as_ptr().cast::<f32>()) };
        let (c, s) = (_mm512_moveldup_ps(interleaved), _mm512_movehdup_ps(interleaved));
        let (a, b) = (_mm512_mul_ps(v, c), _mm512_mul_ps(swapped, s));
        _mm512_mask_sub_ps(_mm512_add_ps(a, b), 0x5555, a, b)
    }

    /// Rotates the f16 row `row` (its bits) by `cs` as [`super::rotate_row`] does
    /// (`cs` split for NeoX).
    #[target_feature(enable = "avx2,f16c")]
    pub(super) fn rotate_row(row: &mut [u16], cs: &CosSinRow, pairing: Pairing) {
        match pairing {
            // Sliced to the row's length: a row not split would panic here rather than
            // rotate nothing.
            Pairing::Neox => neox(row, &cs.cos[..cs.pairs.len()], &cs.sin[..cs.pairs.len()]),
            Pairing::Gptj => gptj(row, &cs.pairs),
        }
    }

    /// Pair i is (i, i + n) for n = cos.len() (as sin's).
    #[target_feature(enable = "avx2,f16c")]
    fn neox(row: &mut [u16], cos: &[f32], sin: &[f32]) {
        let n = cos.len();
        let (xs, rest) = row.split_at_mut(n);
        neox_from(xs, &mut rest[..n], cos, &sin[..n], 0);
    }

    /// NeoX's pairs (xs[i], ys[i]) from `j` on, eight at a time, then one by one.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn neox_from(xs: &mut [u16], ys: &mut [u16], cos: &[f32], sin: &[f32], mut j: usize) {
        let n = cos.len();
        while j + 8 <= n {
            let (px, py) = (xs[j..j + 8].as_mut_ptr(), ys[j..j + 8].as_mut_ptr());
            // SAFETY: px and py point at eight halves each (16 bytes), as c and s at eight floats.
            unsafe {
                let (hx, hy) = (_mm_loadu_si128(px.cast()), _mm_loadu_si128(py.cast()));
                if any_nan(_mm_or_si128(hx, hy)) {
                    for k in j..j + 8 {
                        pair(&mut xs[k], &mut ys[k], (cos[k], sin[k]));
                    }
                } else {
                    let (x, y) = (_mm256_cvtph_ps(hx), _mm256_cvtph_ps(hy));
                    let (c, s) = (load8(&cos[j..j + 8]), load8(&sin[j..j + 8]));
                    let xo = _mm256_sub_ps(_mm256_mul_ps(x, c), _mm256_mul_ps(y, s));
                    let yo = _mm256_add_ps(_mm256_mul_ps(y, c), _mm256_mul_ps(x, s));
                    _mm_storeu_si128(px.cast(), unfolded128(_mm256_cvtps_ph::<0>(xo)));
                    _mm_storeu_si128(py.cast(), unfolded128(_mm256_cvtps_ph::<0>(yo)));
                }
            }
            j += 8;
        }
        for k in j..n {
            pair(&mut xs[k], &mut ys[k], (cos[k], sin[k]));
        }
    }

    /// Whether any of the sixteen halves in `h` is a NaN ([`any_nan`]'s test, by a mask).
    #[target_feature(enable = "avx512f,avx512vl,avx512bw")]
    #[inline]
    fn any_nan16(h: __m256i) -> bool {
        let magnitude = _mm256_and_si256(h, _mm256_set1_epi16(0x7fff));
        _mm256_cmpgt_epi16_mask(magnitude, _mm256_set1_epi16(0x7c00)) != 0
    }

    /// [`rotate_row`] for AVX-512: sixteen lanes a step (VCVTPH2PS and VCVTPS2PH of sixteen
    /// lanes, the same conversions), then AVX2's eight.
    #[target_feature(enable = "avx512f,avx512cd,avx512vl,avx512bw,avx2,f16c")]
    pub(super) fn rotate_row_avx512(row: &mut [u16], cs: &CosSinRow, pairing: Pairing) {
        match pairing {
            Pairing::Neox => neox16(row, &cs.cos[..cs.pairs.len()], &cs.sin[..cs.pairs.len()]),
            Pairing::Gptj => gptj16(row, &cs.pairs),
        }
    }

    /// [`gptj`] eight pairs (sixteen halves) at a time.
    #[target_feature(enable = "avx512f,avx512cd,avx512vl,avx512bw,avx2,f16c")]
    fn gptj16(row: &mut [u16], cs: &[(f32, f32)]) {
        let n = cs.len();
        let mut i = 0;
        while i + 8 <= n {
            let p = row[2 * i..2 * i + 16].as_mut_ptr();
            let pairs = &cs[i..i + 8];
            // SAFETY: p points at sixteen halves (32 bytes), pairs at eight pairs (16 floats,
            // interleaved: the layout is checked above).
            unsafe {
                let h = _mm256_loadu_si256(p.cast());
                if any_nan16(h) {
                    for k in i..i + 8 {
                        let (a, b) = row[2 * k..2 * k + 2].split_at_mut(1);
                        pair(&mut a[0], &mut b[0], cs[k]);
                    }
                } else {
                    let out = gptj_sums16(_mm512_cvtph_ps(h), pairs);
                    _mm256_storeu_si256(p.cast(), unfolded256(_mm512_cvtps_ph::<0>(out)));
                }
            }
            i += 8;
        }
        gptj_from(row, cs, i);
    }

    /// [`neox`] sixteen pairs at a time.
    #[target_feature(enable = "avx512f,avx512cd,avx512vl,avx512bw,avx2,f16c")]
    fn neox16(row: &mut [u16], cos: &[f32], sin: &[f32]) {
        let n = cos.len();
        let sin = &sin[..n];
        let (xs, rest) = row.split_at_mut(n);
        let ys = &mut rest[..n];
        let mut j = 0;
        while j + 16 <= n {
            let (px, py) = (xs[j..j + 16].as_mut_ptr(), ys[j..j + 16].as_mut_ptr());
            let (cj, sj) = (&cos[j..j + 16], &sin[j..j + 16]);
            // SAFETY: px and py point at sixteen halves each (32 bytes), cj and sj at
            // sixteen floats.
            unsafe {
                let (hx, hy) = (_mm256_loadu_si256(px.cast()), _mm256_loadu_si256(py.cast()));
                if any_nan16(_mm256_or_si256(hx, hy)) {
                    for k in j..j + 16 {
                        pair(&mut xs[k], &mut ys[k], (cos[k], sin[k]));
                    }
                } else {
                    let (x, y) = (_mm512_cvtph_ps(hx), _mm512_cvtph_ps(hy));
                    let (xo, yo) = neox_sums16(x, y, cj, sj);
                    _mm256_storeu_si256(px.cast(), unfolded256(_mm512_cvtps_ph::<0>(xo)));
                    _mm256_storeu_si256(py.cast(), unfolded256(_mm512_cvtps_ph::<0>(yo)));
                }
            }
            j += 16;
        }
        neox_from(xs, ys, cos, sin, j);
    }

    /// Pair i is (2i, 2i + 1): four pairs per eight halves. ADDSUBPS subtracts in the even
    /// lanes and adds in the odd ones: (x c - y s, y c + x s), the scalar loop's sums of
    /// its rounded products.
    #[target_feature(enable = "avx2,f16c")]
    fn gptj(row: &mut [u16], cs: &[(f32, f32)]) {
        gptj_from(row, cs, 0);
    }

    /// [`gptj`]'s pairs from `i` on, four at a time, then one by one.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn gptj_from(row: &mut [u16], cs: &[(f32, f32)], mut i: usize) {
        let n = cs.len();
        while i + 4 <= n {
            let p = row[2 * i..2 * i + 8].as_mut_ptr();
            // SAFETY: p points at eight halves (16 bytes), cs[i..] at four pairs (8 floats).
            unsafe {
                let h = _mm_loadu_si128(p.cast());
                if any_nan(h) {
                    for k in i..i + 4 {
                        let (a, b) = row[2 * k..2 * k + 2].split_at_mut(1);
                        pair(&mut a[0], &mut b[0], cs[k]);
                    }
                } else {
                    // (x0, y0, x1, y1, ...), its pairs swapped, and (c, c, ...), (s, s, ...).
                    let v = _mm256_cvtph_ps(h);
                    let swapped = _mm256_permute_ps::<0xb1>(v);
                    let interleaved = _mm256_loadu_ps(cs[i..].as_ptr().cast::<f32>());
                    let c = _mm256_moveldup_ps(interleaved);
                    let s = _mm256_movehdup_ps(interleaved);
                    let out = _mm256_addsub_ps(_mm256_mul_ps(v, c), _mm256_mul_ps(swapped, s));
                    _mm_storeu_si128(p.cast(), unfolded128(_mm256_cvtps_ph::<0>(out)));
                }
            }
            i += 4;
        }
        for k in i..n {
            let (a, b) = row[2 * k..2 * k + 2].split_at_mut(1);
            pair(&mut a[0], &mut b[0], cs[k]);
        }
    }

    #[cfg(test)]
    mod tests {
        use std::arch::x86_64::{
            __m128i, __m256i, _mm_loadu_si128, _mm_set1_epi16, _mm_storeu_si128,
            _mm256_castsi256_ps, _mm256_cvtph_ps, _mm256_cvtps_ph, _mm256_loadu_si256,
            _mm256_storeu_ps, _mm256_storeu_si256, _mm512_castsi512_ps, _mm512_cvtph_ps,
            _mm512_cvtps_ph, _mm512_loadu_si512, _mm512_storeu_ps,
        };

        use rayon::prelude::*;

        use half::f16;

        use super::super::CosSinRow;
        use super::any_nan;
        use crate::convert::{f16_to_f32_bits_branchless, f32_to_f16_bits_branchless};
        use crate::simd::{Set, Simd};

        /// VCVTPS2PH (round to nearest even) of eight f32 bit patterns.
        fn narrow8(bits: &[u32; 8]) -> [u16; 8] {
            let mut out = [0u16; 8];
            // SAFETY: the CPU has F16C (the callers' check); eight words in, eight halves out.
            unsafe {
                let v = _mm256_castsi256_ps(_mm256_loadu_si256(bits.as_ptr().cast()));
                let h = _mm256_cvtps_ph::<0>(v);
                _mm_storeu_si128(out.as_mut_ptr().cast::<__m128i>(), h);
            }
            out
        }

        /// VCVTPS2PH (round to nearest even) of sixteen f32 bit patterns.
        fn narrow16(bits: &[u32; 16]) -> [u16; 16] {
            let mut out = [0u16; 16];
            // SAFETY: the CPU has AVX-512 (the callers' check); sixteen words in, sixteen
            // halves out.
            unsafe {
                let v = _mm512_castsi512_ps(_mm512_loadu_si512(bits.as_ptr().cast()));
                let h = _mm512_cvtps_ph::<0>(v);
                _mm256_storeu_si256(out.as_mut_ptr().cast::<__m256i>(), h);
            }
            out
        }

        #[test]
        fn vcvtps2ph_rounds_every_f32_as_the_software_conversion() {
            if !Simd::avx2_here()
                || Simd::widest_here().unless_nondefault_mode().set() == Set::Portable
            {
                return;
            }
            // Every one of the 2^32 patterns in an optimised build (about 2 s a core); in a
            // debug build every 4099th (a prime stride, so every exponent and many
            // fractions).
            // Sixteen a group: VCVTPS2PH of eight lanes twice, and of sixteen where the CPU
            // has AVX-512.
            let wide = Simd::avx512_here();
            let step: u64 = if cfg!(debug_assertions) { 4099 * 16 } else { 16 };
            let groups = (1u64 << 32) / step;
            let bad = (0..groups).into_par_iter().find_map_any(|g| {
                let first = (g * step) as u32;
                let bits: [u32; 16] = std::array::from_fn(|k| first.wrapping_add(k as u32));
                let (lo, hi) = bits.split_at(8);
                let got = [narrow8(lo.try_into().unwrap()), narrow8(hi.try_into().unwrap())];
                let got16 = if wide { narrow16(&bits) } else { [0u16; 16] };
                (0..16).find_map(|k| {
                    let want = f32_to_f16_bits_branchless(bits[k]) as u16;
                    let wrong = got[k / 8][k % 8] != want || (wide && got16[k] != want);
                    wrong.then_some((bits[k], got[k / 8][k % 8], got16[k], want))
                })
            });
            assert_eq!(bad, None, "(f32 bits, VCVTPS2PH of 8, of 16, software)");
        }

        /// Rows of every pair count up to 40 (the tails of eight and of four pairs), with
        /// one to three pass-through dims after them, holding signalling and quiet NaNs of
        /// other payloads, in x, in y and in both, besides the awkward values: the F16C
        /// loops give the scalar loop's bits.
        #[test]
        fn tails_and_nan_payloads_rotate_as_the_scalar_loop() {
            if !Simd::avx2_here() {
                return;
            }
            let specials: [u16; 12] = [
                0x7c01, 0xfd55, 0x7e00, 0x7fff, 0x7c00, 0xfc00, 0x0001, 0x83ff, 0x7bff, 0, 0x8000,
                0x3c00,
            ];
            // SAFETY: the CPU has AVX2 and F16C (checked above).
            let simd_loop = |row: &mut [u16], cs: &CosSinRow, pairing| unsafe {
                super::rotate_row(row, cs, pairing)
            };
            super::super::tests::assert_tails_rotate_as_scalar::<f16>(&specials, 0x7bff, simd_loop);
            if Simd::avx512_here() {
                // SAFETY: the CPU has AVX-512 (checked).
                let simd_loop = |row: &mut [u16], cs: &CosSinRow, pairing| unsafe {
                    super::rotate_row_avx512(row, cs, pairing)
                };
                let specials = &specials;
                super::super::tests::assert_tails_rotate_as_scalar::<f16>(
                    specials, 0x7bff, simd_loop,
                );
            }
        }

        /// A thread whose SSE mode is not the default one (FTZ, DAZ, another rounding, an
        /// unmasked exception) runs the baseline; the default mode keeps its set.
        #[test]
        #[allow(deprecated)]
        fn a_thread_in_another_sse_mode_runs_the_baseline() {
            use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
            let widest = Simd::widest_here();
            std::thread::spawn(move || {
                // SAFETY: reading and writing this thread's MXCSR (restored before it ends).
                let default = unsafe { _mm_getcsr() };
                assert_eq!(widest.unless_nondefault_mode(), widest);
                for bits in [1u32 << 15, 1 << 6, 1 << 13, 3 << 13, 1 << 10] {
                    // FTZ, DAZ, round down, toward zero; bit 10 (overflow's mask) cleared.
                    let mode = if bits == 1 << 10 { default & !bits } else { default | bits };
                    // SAFETY: as above.
                    unsafe { _mm_setcsr(mode) };
                    let got = widest.unless_nondefault_mode();
                    // SAFETY: as above.
                    unsafe { _mm_setcsr(default) };
                    assert_eq!(got, Simd::PORTABLE, "MXCSR {mode:#06x}");
                }
            })
            .join()
            .unwrap();
        }

        #[test]
        fn vcvtph2ps_widens_every_half_but_nans_as_the_software_conversion() {
            if !Simd::avx2_here()
                || Simd::widest_here().unless_nondefault_mode().set() == Set::Portable
            {
                return;
            }
            let wide = Simd::avx512_here();
            for first in (0..=u16::MAX).step_by(8) {
                let halves: [u16; 8] = std::array::from_fn(|k| first + k as u16);
                let mut got = [0f32; 8];
                // SAFETY: the CPU has F16C; eight halves in, eight floats out.
                let nan = unsafe {
                    let h = _mm_loadu_si128(halves.as_ptr().cast::<__m128i>());
                    _mm256_storeu_ps(got.as_mut_ptr(), _mm256_cvtph_ps(h));
                    any_nan(h)
                };
                let nans = halves.iter().any(|&h| (h & 0x7fff) > 0x7c00);
                assert_eq!(nan, nans, "{first:#06x}");
                for (&h, g) in halves.iter().zip(got) {
                    if (h & 0x7fff) <= 0x7c00 {
                        let want = f16_to_f32_bits_branchless(u32::from(h));
                        assert_eq!(g.to_bits(), want, "{h:#06x}");
                    }
                }
            }
            // Sixteen lanes, and their NaN test, where the CPU has AVX-512: each group of
            // sixteen holds at most one NaN, placed in every lane in turn, or none.
            for first in (0..=u16::MAX).step_by(16).filter(|_| wide) {
                let halves: [u16; 16] = std::array::from_fn(|k| first + k as u16);
                for lane in 0..=16 {
                    let mut halves = halves.map(|h| if (h & 0x7fff) > 0x7c00 { 0x3c00 } else { h });
                    if lane < 16 {
                        halves[lane] = 0x7c00 | (first % 0x3ff).max(1) | (first & 0x8000);
                    }
                    let mut got = [0f32; 16];
                    // SAFETY: the CPU has AVX-512 (checked); sixteen halves in, sixteen
                    // floats out.
                    let nan = unsafe {
                        let h = _mm256_loadu_si256(halves.as_ptr().cast::<__m256i>());
                        _mm512_storeu_ps(got.as_mut_ptr(), _mm512_cvtph_ps(h));
                        super::any_nan16(h)
                    };
                    assert_eq!(nan, lane < 16, "{first:#06x}, lane {lane}");
                    for (&h, g) in halves.iter().zip(got) {
                        if (h & 0x7fff) <= 0x7c00 {
                            let want = f16_to_f32_bits_branchless(u32::from(h));
                            assert_eq!(g.to_bits(), want, "{h:#06x}");
                        }
                    }
                }
            }
            // SAFETY: the CPU has F16C.
            assert!(!unsafe { any_nan(_mm_set1_epi16(0x7c00)) }, "infinity is no NaN");
        }
    }
}

/// RoPE of bf16 rows eight pairs at a time, for the AVX2 and AVX-512 sets (AVX-512's NeoX
/// loop sixteen at a time first, narrowed by VPMOVDW). Widening is a
/// shift, exact for every value; the products and sums are the scalar loop's, in its order
/// and unfused; each result rounds to nearest even by `f32_to_bf16_bits`'s integer steps for
/// numbers, eight lanes at once, with no test for NaN. None is needed: every NaN these sums
/// can be has its low 16 bits zero and its quiet bit set (an x86 operation returns a NaN
/// operand quieted, or the default NaN 0xffc00000, and a widened bf16 has a zero low half),
/// and on such a NaN the integer steps give `f32_to_bf16_bits`'s `(x >> 16) | 0x40`: adding
/// at most 0x8000 to a zero low half carries nothing. The compiler's vectorisation of the
/// scalar loop tested and blended every lane for NaN; without that, and with the cos and sin
/// apart, these loops take a third off its time per row (2026-12-05, Zen 3).
#[cfg(target_arch = "x86_64")]
mod bf16x8 {
    use crate::simd::unfolded256;
    use std::arch::x86_64::{
        __m128i, __m256, __m256i, __m512, __m512i, _mm_loadu_si128, _mm_storeu_si128,
        _mm256_add_epi32, _mm256_add_ps, _mm256_addsub_ps, _mm256_and_si256, _mm256_castps_si256,
        _mm256_castsi256_ps, _mm256_castsi256_si128, _mm256_cvtepu16_epi32,
        _mm256_extracti128_si256, _mm256_loadu_ps, _mm256_loadu_si256, _mm256_movehdup_ps,
        _mm256_moveldup_ps, _mm256_mul_ps, _mm256_packus_epi32, _mm256_permute_ps,
        _mm256_permute4x64_epi64, _mm256_set1_epi32, _mm256_slli_epi32, _mm256_srli_epi32,
        _mm256_storeu_si256, _mm256_sub_ps, _mm512_add_epi32, _mm512_and_si512,
        _mm512_castps_si512, _mm512_castsi512_ps, _mm512_cvtepi32_epi16, _mm512_cvtepu16_epi32,
        _mm512_set1_epi32, _mm512_slli_epi32, _mm512_srli_epi32,
    };

    use half::bf16;

    use super::CosSinRow;
    use super::f16c::{gptj_sums16, load8, neox_sums16};
    use crate::rope::{Element, Pairing};

    /// The eight bf16 values in `h`, widened.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn widen8(h: __m128i) -> __m256 {
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }

    /// `f32_to_bf16_bits` of eight numbers, or quiet NaNs with a zero low half (see the
    /// module), each in the low half of its lane: `(b + 0x7fff + ((b >> 16) & 1)) >> 16`,
    /// which carries into the exponent as rounding to nearest even must, and from the
    /// largest finite values to infinity.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn round8(v: __m256) -> __m256i {
        let b = _mm256_castps_si256(v);
        let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(b), _mm256_set1_epi32(1));
        _mm256_srli_epi32::<16>(_mm256_add_epi32(
            _mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)),
            lsb,
        ))
    }

    /// The scalar loop's rotation of one pair.
    #[inline(always)]
    fn pair(x: &mut u16, y: &mut u16, (c, s): (f32, f32)) {
        let (xv, yv) = (bf16::from_bits(*x).to_f32(), bf16::from_bits(*y).to_f32());
        *x = <bf16 as Element>::from_f32(xv * c - yv * s).to_bits();
        *y = <bf16 as Element>::from_f32(yv * c + xv * s).to_bits();
    }

    /// Rotates the bf16 row `row` (its bits) by `cs` as [`super::rotate_row`] does
    /// (`cs` split for NeoX).
    #[target_feature(enable = "avx2,f16c")]
    pub(super) fn rotate_row(row: &mut [u16], cs: &CosSinRow, pairing: Pairing) {
        match pairing {
            // Sliced to the row's length: a row not split would panic here rather than
            // rotate nothing.
            Pairing::Neox => neox(row, &cs.cos[..cs.pairs.len()], &cs.sin[..cs.pairs.len()]),
            Pairing::Gptj => gptj(row, &cs.pairs),
        }
    }

    /// Pair i is (i, i + n) for n = cos.len() (as sin's).
    #[target_feature(enable = "avx2,f16c")]
    fn neox(row: &mut [u16], cos: &[f32], sin: &[f32]) {
        let n = cos.len();
        let sin = &sin[..n];
        let (xs, rest) = row.split_at_mut(n);
        let ys = &mut rest[..n];
        neox_from(xs, ys, cos, sin, 0);
    }

    /// [`neox`]'s pairs from `j` on, eight at a time, then one by one.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn neox_from(xs: &mut [u16], ys: &mut [u16], cos: &[f32], sin: &[f32], mut j: usize) {
        let n = cos.len();
        while j + 8 <= n {
            let (px, py) = (xs[j..j + 8].as_mut_ptr(), ys[j..j + 8].as_mut_ptr());
            // SAFETY: px and py point at eight halves each (16 bytes), as c and s at eight floats.
            unsafe {
                let (hx, hy) = (_mm_loadu_si128(px.cast()), _mm_loadu_si128(py.cast()));
                let (x, y) = (widen8(hx), widen8(hy));
                let (c, s) = (load8(&cos[j..j + 8]), load8(&sin[j..j + 8]));
                let xo = _mm256_sub_ps(_mm256_mul_ps(x, c), _mm256_mul_ps(y, s));
                let yo = _mm256_add_ps(_mm256_mul_ps(y, c), _mm256_mul_ps(x, s));
                // Packing interleaves the two by 64-bit pieces (x0-3, y0-3, x4-7, y4-7);
                // the permute puts x's four pieces first.
                let both =
                    _mm256_permute4x64_epi64::<0xd8>(_mm256_packus_epi32(round8(xo), round8(yo)));
                _mm_storeu_si128(px.cast(), _mm256_castsi256_si128(both));
                _mm_storeu_si128(py.cast(), _mm256_extracti128_si256::<1>(both));
            }
            j += 8;
        }
        for k in j..n {
            pair(&mut xs[k], &mut ys[k], (cos[k], sin[k]));
        }
    }

    /// `round8` of sixteen lanes.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn round16(v: __m512) -> __m512i {
        let b = _mm512_castps_si512(v);
        let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(1));
        _mm512_srli_epi32::<16>(_mm512_add_epi32(
            _mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)),
            lsb,
        ))
    }

    /// The sixteen bf16 values in `h`, widened.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn widen16(h: __m256i) -> __m512 {
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }

    /// [`rotate_row`] for AVX-512: sixteen lanes a step (VPMOVDW narrows the rounded lanes,
    /// where AVX2 packs and permutes), then AVX2's eight.
    #[target_feature(enable = "avx512f,avx512cd,avx512vl,avx512bw,avx2,f16c")]
    pub(super) fn rotate_row_avx512(row: &mut [u16], cs: &CosSinRow, pairing: Pairing) {
        match pairing {
            Pairing::Neox => neox16(row, &cs.cos[..cs.pairs.len()], &cs.sin[..cs.pairs.len()]),
            Pairing::Gptj => gptj16(row, &cs.pairs),
        }
    }

    /// [`gptj`] eight pairs (sixteen halves) at a time (the sums: [`super::f16c`]'s
    /// `gptj_sums16`).
    #[target_feature(enable = "avx512f,avx512cd,avx512vl,avx512bw,avx2,f16c")]
    fn gptj16(row: &mut [u16], cs: &[(f32, f32)]) {
        let n = cs.len();
        let mut i = 0;
        while i + 8 <= n {
            let p = row[2 * i..2 * i + 16].as_mut_ptr();
            let pairs = &cs[i..i + 8];
            // SAFETY: p points at sixteen halves (32 bytes), pairs at eight pairs (16 floats,
            // interleaved: the layout is checked where f16c's loops are compiled).
            unsafe {
                let out = gptj_sums16(widen16(_mm256_loadu_si256(p.cast())), pairs);
                let narrowed = unfolded256(_mm512_cvtepi32_epi16(round16(out)));
                _mm256_storeu_si256(p.cast(), narrowed);
            }
            i += 8;
        }
        gptj_from(row, cs, i);
    }

    /// [`neox`] sixteen pairs at a time.
    #[target_feature(enable = "avx512f,avx512cd,avx512vl,avx512bw,avx2,f16c")]
    fn neox16(row: &mut [u16], cos: &[f32], sin: &[f32]) {
        let n = cos.len();
        let sin = &sin[..n];
        let (xs, rest) = row.split_at_mut(n);
        let ys = &mut rest[..n];
        let mut j = 0;
        while j + 16 <= n {
            let (px, py) = (xs[j..j + 16].as_mut_ptr(), ys[j..j + 16].as_mut_ptr());
            let (cj, sj) = (&cos[j..j + 16], &sin[j..j + 16]);
            // SAFETY: px and py point at sixteen halves each (32 bytes), cj and sj at
            // sixteen floats.
            unsafe {
                let (hx, hy) = (_mm256_loadu_si256(px.cast()), _mm256_loadu_si256(py.cast()));
                let (xo, yo) = neox_sums16(widen16(hx), widen16(hy), cj, sj);
                let (nx, ny) =
                    (_mm512_cvtepi32_epi16(round16(xo)), _mm512_cvtepi32_epi16(round16(yo)));
                _mm256_storeu_si256(px.cast(), unfolded256(nx));
                _mm256_storeu_si256(py.cast(), unfolded256(ny));
            }
            j += 16;
        }
        neox_from(xs, ys, cos, sin, j);
    }

    /// Pair i is (2i, 2i + 1): four pairs per eight halves. ADDSUBPS subtracts in the even
    /// lanes and adds in the odd ones: (x c - y s, y c + x s), the scalar loop's sums of
    /// its rounded products.
    #[target_feature(enable = "avx2,f16c")]
    fn gptj(row: &mut [u16], cs: &[(f32, f32)]) {
        gptj_from(row, cs, 0);
    }

    /// [`gptj`]'s pairs from `i` on, four at a time, then one by one.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn gptj_from(row: &mut [u16], cs: &[(f32, f32)], mut i: usize) {
        let n = cs.len();
        while i + 4 <= n {
            let p = row[2 * i..2 * i + 8].as_mut_ptr();
            // SAFETY: p points at eight halves (16 bytes), cs[i..] at four pairs (8 floats).
            unsafe {
                let v = widen8(_mm_loadu_si128(p.cast()));
                let swapped = _mm256_permute_ps::<0xb1>(v);
                let interleaved = _mm256_loadu_ps(cs[i..].as_ptr().cast::<f32>());
                let c = _mm256_moveldup_ps(interleaved);
                let s = _mm256_movehdup_ps(interleaved);
                let out = _mm256_addsub_ps(_mm256_mul_ps(v, c), _mm256_mul_ps(swapped, s));
                let r = round8(out);
                let packed = _mm256_permute4x64_epi64::<0xd8>(_mm256_packus_epi32(r, r));
                _mm_storeu_si128(p.cast(), _mm256_castsi256_si128(packed));
            }
            i += 4;
        }
        for k in i..n {
            let (a, b) = row[2 * k..2 * k + 2].split_at_mut(1);
            pair(&mut a[0], &mut b[0], cs[k]);
        }
    }

    #[cfg(test)]
    mod tests {
        use std::arch::x86_64::{
            _mm256_castsi256_ps, _mm256_loadu_si256, _mm256_storeu_si256, _mm512_castsi512_ps,
            _mm512_loadu_si512, _mm512_storeu_si512,
        };

        use half::bf16;
        use rayon::prelude::*;

        use super::super::CosSinRow;
        use crate::convert::f32_to_bf16_bits;
        use crate::rope::Pairing;
        use crate::simd::Simd;

        /// The eight-lane rounding of every f32, and the sixteen-lane one where the CPU has
        /// AVX-512, is `f32_to_bf16_bits`, but for NaNs with a nonzero low half or a clear
        /// quiet bit, which no sum of the loops can be (see the module).
        #[test]
        fn the_lanes_rounding_of_every_number_is_the_scalar_one() {
            if !Simd::avx2_here() {
                return;
            }
            // Every one of the 2^32 patterns in an optimised build; in a debug build every
            // 4099th (a prime stride, so every exponent and many fractions).
            // Sixteen lanes a group: two of round8, and round16 where the CPU has AVX-512.
            let wide = Simd::avx512_here();
            let step: u64 = if cfg!(debug_assertions) { 4099 * 16 } else { 16 };
            let groups = (1u64 << 32) / step;
            let bad = (0..groups).into_par_iter().find_map_any(|g| {
                let first = (g * step) as u32;
                let bits: [u32; 16] = std::array::from_fn(|k| first.wrapping_add(k as u32));
                let (mut got, mut got16) = ([0u32; 16], [0u32; 16]);
                // SAFETY: the CPU has AVX2 (checked above), and AVX-512 where `wide`;
                // sixteen words in, sixteen out.
                unsafe {
                    for half in 0..2 {
                        let at = bits[8 * half..].as_ptr().cast();
                        let v = _mm256_castsi256_ps(_mm256_loadu_si256(at));
                        let out = got[8 * half..].as_mut_ptr().cast();
                        _mm256_storeu_si256(out, super::round8(v));
                    }
                    if wide {
                        let v = _mm512_castsi512_ps(_mm512_loadu_si512(bits.as_ptr().cast()));
                        _mm512_storeu_si512(got16.as_mut_ptr().cast(), super::round16(v));
                    }
                }
                (0..16).find_map(|k| {
                    let nan = (bits[k] & 0x7fff_ffff) > 0x7f80_0000;
                    let arises = !nan || (bits[k] & 0x0040_ffff == 0x0040_0000);
                    let want = f32_to_bf16_bits(bits[k]);
                    let wrong = got[k] != want || (wide && got16[k] != want);
                    (arises && wrong).then_some((bits[k], got[k], got16[k], want))
                })
            });
            assert_eq!(bad, None, "(f32 bits, eight lanes, sixteen lanes, want)");
        }

        /// Pairs whose both elements are special (NaNs of several payloads, infinities,
        /// zeros, subnormals), every combination, against cos and sin that are exactly 0
        /// and 1 as well as neither: the scalar loop's bits, but where both give a NaN,
        /// which may be another NaN (which payload a sum of two NaNs keeps is the operands'
        /// order, the compiler's choice in the scalar loop: see the module).
        #[test]
        fn pairs_of_specials_keep_the_scalar_loops_payloads() {
            if !Simd::avx2_here() {
                return;
            }
            let specials: [u16; 12] = [
                0x7f81, 0xffd5, 0x7fc0, 0x7fff, 0xffe8, 0x7fc7, 0x7f80, 0xff80, 0x0001, 0, 0x8000,
                0x3f80,
            ];
            let turns = [(0.0f32, 1.0f32), (1.0, 0.0), (-0.0, -1.0), (0.6, 0.8), (-0.28, 0.96)];
            // The AVX2 loop, and AVX-512's where the CPU has it.
            type Loop = unsafe fn(&mut [u16], &CosSinRow, Pairing);
            let mut loops: Vec<(&str, Loop)> = vec![("avx2", super::rotate_row)];
            if Simd::avx512_here() {
                loops.push(("avx512", super::rotate_row_avx512));
            }
            for (n, &(set, simd_loop)) in [4usize, 8, 12, 16, 20, 24, 32, 40]
                .into_iter()
                .flat_map(|n| loops.iter().map(move |l| (n, l)))
            {
                let cs: Vec<(f32, f32)> = (0..n).map(|i| turns[i % turns.len()]).collect();
                let cs = CosSinRow::from_pairs(&cs);
                for seed in 0..specials.len() * specials.len() {
                    let (a, b) = (seed % specials.len(), seed / specials.len());
                    let pick =
                        |i: usize, k: usize| specials[(k + i * (1 + 2 * k)) % specials.len()];
                    for pairing in [Pairing::Neox, Pairing::Gptj] {
                        let mut row = vec![0u16; 2 * n + 1];
                        for i in 0..n {
                            let (x, y) = match pairing {
                                Pairing::Neox => (i, i + n),
                                Pairing::Gptj => (2 * i, 2 * i + 1),
                            };
                            (row[x], row[y]) = (pick(i, a), pick(i, b));
                        }
                        let mut want: Vec<bf16> = row.iter().map(|&h| bf16::from_bits(h)).collect();
                        super::super::rotate_row(&mut want, &cs, pairing);
                        let mut got = row.clone();
                        // SAFETY: the CPU runs the loop's set (checked above).
                        unsafe { simd_loop(&mut got, &cs, pairing) };
                        let nan = |h: u16| (h & 0x7fff) > 0x7f80;
                        for (k, (&g, w)) in got.iter().zip(&want).enumerate() {
                            let w = w.to_bits();
                            let same = g == w || (nan(g) && nan(w));
                            assert!(
                                same,
                                "{set}: {n} pairs, {pairing:?}, row {row:04x?}: [{k}] {g:04x}, \
                                 {w:04x}"
                            );
                        }
                    }
                }
            }
        }

        /// Rows of every pair count up to 40 (the tails of eight and of four pairs), with
        /// one to three pass-through dims after them, holding NaNs of other payloads,
        /// infinities, subnormals and values that overflow when rotated, in x, in y and in
        /// both: the loops give the scalar loop's bits.
        #[test]
        fn tails_and_nan_payloads_rotate_as_the_scalar_loop() {
            if !Simd::avx2_here() {
                return;
            }
            let specials: [u16; 12] = [
                0x7f81, 0xffd5, 0x7fc0, 0x7fff, 0x7f80, 0xff80, 0x0001, 0x807f, 0x7f7f, 0, 0x8000,
                0x3f80,
            ];
            // SAFETY: the CPU has AVX2 (checked above).
            let simd_loop = |row: &mut [u16], cs: &CosSinRow, pairing| unsafe {
                super::rotate_row(row, cs, pairing)
            };
            super::super::tests::assert_tails_rotate_as_scalar::<bf16>(
                &specials, 0x7f7f, simd_loop,
            );
            if Simd::avx512_here() {
                // SAFETY: the CPU has AVX-512 (checked).
                let simd_loop = |row: &mut [u16], cs: &CosSinRow, pairing| unsafe {
                    super::rotate_row_avx512(row, cs, pairing)
                };
                super::super::tests::assert_tails_rotate_as_scalar::<bf16>(
                    &specials, 0x7f7f, simd_loop,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array2, Array4};

    #[test]
    fn position_zero_is_the_identity_and_passthrough_is_untouched() {
        let spec = RopeSpec::partial(7, 4).unwrap();
        let x = Array4::from_shape_fn((1, 2, 3, 7), |(_, l, h, d)| (l * 100 + h * 10 + d) as f32);
        let positions = ndarray::array![[0u32, 5]];
        let out = rope(&spec, x.view(), positions.view(), Layout::Blhd).unwrap();
        for h in 0..3 {
            for d in 0..7 {
                assert_eq!(out[[0, 0, h, d]], x[[0, 0, h, d]]);
            }
            for d in 4..7 {
                assert_eq!(out[[0, 1, h, d]], x[[0, 1, h, d]]);
            }
        }
    }

    /// Rows of every pair count up to 40 (the tails of eight and of four pairs), with one to
    /// three pass-through dims after them, of 16-bit values `T` (f16 or bf16) mixing
    /// `specials` with finite values of magnitude below `finite` (as bits), so that NaNs of
    /// other payloads, infinities and subnormals fall in x, in y and in both, and rows with
    /// no NaN or with finite values alone, whose vector steps skip the NaN path: `simd_loop`
    /// (an F16C, AVX2 or AVX-512 loop on the rows' bits) gives the scalar loop's bits, but
    /// where both elements of a pair are NaN: then both results are NaNs, whose payloads
    /// follow the order in which a compiled loop adds the two NaN terms, which the compiler
    /// chooses (the scalar loop inlined into two functions has kept x's in one and y's in
    /// the other; [guarantees](docs/guarantees.md) promises no payload).
    #[cfg(target_arch = "x86_64")]
    pub(super) fn assert_tails_rotate_as_scalar<T: Element + bytemuck::Pod>(
        specials: &[u16; 12],
        finite: usize,
        simd_loop: impl Fn(&mut [u16], &CosSinRow, Pairing),
    ) {
        let nan = |h: u16| Element::to_f32(bytemuck::cast::<u16, T>(h)).is_nan();
        // Most sixteen-element groups of a row drawn from all of `specials` hold a NaN, which
        // sends a vector step to its NaN path; rows drawn from the other specials, or from
        // finite values alone, keep the vector steps' arithmetic covered too.
        let not_nan: Vec<u16> = specials.iter().copied().filter(|&h| !nan(h)).collect();
        assert!(not_nan.len() < specials.len(), "the specials include a NaN");
        for n in 1..=40usize {
            for extra in 1..=3 {
                let cs: Vec<(f32, f32)> =
                    (0..n).map(|i| ((i as f32 * 0.37).cos(), (i as f32 * 0.37).sin())).collect();
                let row_cs = CosSinRow::from_pairs(&cs);
                for seed in 0..12usize {
                    let pool: &[u16] = match seed {
                        0..6 => specials,
                        6..9 => &not_nan,
                        _ => &[],
                    };
                    let row: Vec<u16> = (0..2 * n + extra)
                        .map(|k| {
                            let mix = k.wrapping_mul(7919).wrapping_add(seed * 104_729);
                            if mix % 3 == 0 && !pool.is_empty() {
                                pool[mix % pool.len()]
                            } else {
                                (mix % finite) as u16 | if mix % 2 == 0 { 0x8000 } else { 0 }
                            }
                        })
                        .collect();
                    for pairing in [Pairing::Neox, Pairing::Gptj] {
                        let mut want: Vec<T> = bytemuck::cast_slice(&row).to_vec();
                        rotate_row(&mut want, &row_cs, pairing);
                        let mut got = row.clone();
                        simd_loop(&mut got, &row_cs, pairing);
                        let want: &[u16] = bytemuck::cast_slice(&want);
                        let partner = |k: usize| match pairing {
                            Pairing::Neox => (k + n) % (2 * n),
                            Pairing::Gptj => k ^ 1,
                        };
                        let both_nan = |k: usize| k < 2 * n && nan(row[k]) && nan(row[partner(k)]);
                        let same = got
                            .iter()
                            .zip(want)
                            .enumerate()
                            .all(|(k, (&g, &w))| g == w || (both_nan(k) && nan(g) && nan(w)));
                        let case = format!("{n} pairs + {extra}, seed {seed}, {pairing:?}");
                        assert!(same, "{case}: {got:04x?} against {want:04x?}");
                    }
                }
            }
        }
    }

    /// Rows of awkward values: normal, subnormal, zero, infinite and NaN, in every storage
    /// type's bits.
    fn awkward<T: Element>(n: usize) -> Vec<T> {
        let specials =
            [0.0f32, -0.0, 1.0, -2.5, 1e-40, -3e-39, 6e-8, 65504.0, 1e30, f32::INFINITY, f32::NAN];
        (0..n)
            .map(|i| {
                let v = if i % 5 == 0 {
                    specials[(i / 5) % specials.len()]
                } else {
                    ((i * 7919) % 2003) as f32 / 97.0 - 10.0
                };
                T::from_f32(v)
            })
            .collect()
    }

    fn every_set_rotates_as_the_baseline<T: Element>() {
        let plain = RopeSpec::new(128).unwrap().with_base(500_000.0).unwrap();
        // YaRN's attention factor scales every cos and sin (the other branch of the row).
        let yarn = crate::rope::Scaling::from_hf_json(
            r#"{"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}"#,
        )
        .unwrap();
        let yarn = RopeSpec::new(64).unwrap().with_scaling(yarn).unwrap();
        assert_ne!(yarn.frequencies(1 << 17).attention_factor(), 1.0);
        for (freqs, p) in [plain, yarn].iter().flat_map(|spec| {
            [0u32, 1, 1000, 123_456, u32::MAX].map(|p| (spec.frequencies(1 << 17), p))
        }) {
            let n = freqs.len();
            let mut want = vec![(0.0f32, 0.0f32); n];
            cos_sin_row_as(Simd::PORTABLE, &freqs, [p; 3], None, &mut want);
            for pairing in [Pairing::Neox, Pairing::Gptj] {
                let row = awkward::<T>(2 * n + 3);
                let mut base = row.clone();
                let row_cs = CosSinRow::from_pairs(&want);
                rotate_row_as(Simd::PORTABLE, &mut base, &row_cs, pairing);
                for simd in Simd::all_here() {
                    let mut cs = vec![(9.0f32, 9.0f32); n];
                    cos_sin_row_as(simd, &freqs, [p; 3], None, &mut cs);
                    let bits = |v: &[(f32, f32)]| -> Vec<(u32, u32)> {
                        v.iter().map(|&(c, s)| (c.to_bits(), s.to_bits())).collect()
                    };
                    assert_eq!(bits(&cs), bits(&want), "{simd:?} cos/sin at {p}");
                    let mut got = row.clone();
                    rotate_row_as(simd, &mut got, &row_cs, pairing);
                    let same =
                        bytemuck::cast_slice::<T, u8>(&got) == bytemuck::cast_slice::<T, u8>(&base);
                    assert!(same, "{simd:?} {pairing:?} {:?} at {p}", T::DTYPE);
                }
            }
        }
    }

    /// The widest set's cos/sin rows (assembled by the conversion, vectorised) are
    /// the baseline's at 20000 positions of two frequency sets, where the exhaustive test of
    /// the assembly (`sincos`) runs its scalar form.
    #[test]
    fn cos_sin_rows_of_the_widest_set_are_the_baselines_at_many_positions() {
        let plain = RopeSpec::new(128).unwrap().with_base(500_000.0).unwrap();
        let short = RopeSpec::new(64).unwrap();
        let mut x = 0x2545_f491_u32;
        let mut positions: Vec<u32> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x
            })
            .collect();
        positions.extend([0, 1, 2, 3, 4095, 4096, 1 << 31, u32::MAX - 1, u32::MAX]);
        for spec in [plain, short] {
            let freqs = spec.frequencies(1 << 17);
            let n = freqs.len();
            let (mut want, mut got) = (vec![(0f32, 0f32); n], vec![(0f32, 0f32); n]);
            for &p in &positions {
                cos_sin_row_as(Simd::PORTABLE, &freqs, [p; 3], None, &mut want);
                cos_sin_row_as(Simd::widest_here(), &freqs, [p; 3], None, &mut got);
                let bits = |v: &[(f32, f32)]| -> Vec<(u32, u32)> {
                    v.iter().map(|&(c, s)| (c.to_bits(), s.to_bits())).collect()
                };
                assert_eq!(bits(&got), bits(&want), "position {p}");
            }
        }
    }

    /// The widening's float subtraction (zeros and subnormal halves) gives the same bits in
    /// every SSE mode: rounding down made +0 widen to -0 (round twenty-seven; here, where
    /// the test may use `simd`'s helper, which `convert`'s own layer may not).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn branchless_f16_unpacking_keeps_its_bits_in_another_sse_mode() {
        crate::simd::in_other_sse_modes(|bits| {
            for h in 0..=u32::from(u16::MAX) {
                let got = crate::convert::f16_to_f32_bits_branchless(std::hint::black_box(h));
                assert_eq!(
                    got,
                    crate::convert::f16_to_f32_bits(h),
                    "{h:#06x}, MXCSR bits {bits:#x}"
                );
            }
        });
    }

    /// A thread whose SSE mode rounds otherwise (or flushes) gets the baseline's cos/sin
    /// bits: the AVX2 and AVX-512 rows' conversion form is for the default mode only.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn cos_sin_rows_keep_their_bits_in_another_sse_mode() {
        let spec = RopeSpec::new(128).unwrap().with_base(500_000.0).unwrap();
        let freqs = spec.frequencies(1 << 17);
        let n = freqs.len();
        let positions = [0u32, 1, 3, 1000, 123_457, 1 << 31, u32::MAX];
        let row = |simd: Simd, p: u32| {
            let mut cs = vec![(0.0f32, 0.0f32); n];
            cos_sin_row_as(simd, &freqs, [p; 3], None, &mut cs);
            cs.iter().map(|&(c, s)| (c.to_bits(), s.to_bits())).collect::<Vec<_>>()
        };
        let want: Vec<_> = positions.iter().map(|&p| row(Simd::PORTABLE, p)).collect();
        // Every set this CPU runs: an AVX-512 host checks AVX2's arm too.
        for simd in Simd::all_here() {
            crate::simd::in_other_sse_modes(|bits| {
                let got: Vec<_> = positions.iter().map(|&p| row(simd, p)).collect();
                assert!(got == want, "{simd:?}, MXCSR bits {bits:#x}");
            });
        }
    }

    #[test]
    fn every_instruction_set_gives_the_baselines_bits() {
        every_set_rotates_as_the_baseline::<f32>();
        every_set_rotates_as_the_baseline::<half::f16>();
        every_set_rotates_as_the_baseline::<half::bf16>();
    }

    #[test]
    fn layouts_agree() {
        let spec = RopeSpec::new(8).unwrap().with_pairing(Pairing::Gptj);
        let x = Array4::from_shape_fn((2, 3, 4, 8), |(b, l, h, d)| {
            ((b * 7 + l * 5 + h * 3 + d) % 11) as f32 - 5.0
        });
        let positions = ndarray::array![[0u32, 1, 2], [100, 70000, u32::MAX]];
        let blhd = rope(&spec, x.view(), positions.view(), Layout::Blhd).unwrap();
        let bhld = x.view().permuted_axes([0, 2, 1, 3]);
        let bhld = rope(&spec, bhld, positions.view(), Layout::Bhld).unwrap();
        assert_eq!(blhd, bhld.permuted_axes([0, 2, 1, 3]));
    }

    #[test]
    fn a_rotated_copy_is_the_rotation_in_place_of_a_copy() {
        // `rope` copies each task's tokens just before rotating them; `rope_in_place` rotates
        // what is there. Both layouts, inputs in standard layout and strided views, on the
        // calling thread and (above SERIAL_MAX_ELEMENTS) on the pool, tasks of whole and
        // partial token blocks.
        let spec = RopeSpec::partial(64, 48).unwrap();
        for (batch, len, heads) in [(2, 3, 4), (2, 2 * TOKENS_PER_TASK + 5, 9)] {
            let x = Array4::from_shape_fn((batch, len, heads, 64), |(b, l, h, d)| {
                half::bf16::from_f32(((b * 7 + l * 5 + h * 3 + d) % 23) as f32 - 11.0)
            });
            let positions =
                Array2::from_shape_fn((batch, len), |(b, l)| (l as u32) * 977 + b as u32);
            // A view whose heads run backwards: not in standard layout.
            let mut strided = x.clone();
            strided.invert_axis(Axis(2));
            for layout in [Layout::Blhd, Layout::Bhld] {
                for input in [x.view(), strided.view()] {
                    let input = match layout {
                        Layout::Blhd => input,
                        Layout::Bhld => input.permuted_axes([0, 2, 1, 3]),
                    };
                    let got = rope(&spec, input, positions.view(), layout).unwrap();
                    assert!(got.is_standard_layout());
                    let mut want = input.as_standard_layout().into_owned();
                    rope_in_place(&spec, want.view_mut(), positions.view(), layout).unwrap();
                    let (got, want) = (got.as_slice().unwrap(), want.as_slice().unwrap());
                    assert!(
                        bytemuck::cast_slice::<_, u16>(got) == bytemuck::cast_slice::<_, u16>(want),
                        "{batch} x {len} x {heads}, {layout:?}"
                    );
                    // Into a caller's array: one in standard layout, and every other element
                    // of a wider one, whose elements between are left as they were.
                    let mut into = Array4::from_elem(input.raw_dim(), half::bf16::ONE);
                    rope_into(&spec, input, into.view_mut(), positions.view(), layout).unwrap();
                    assert_eq!(into.as_slice().unwrap(), want, "into, {layout:?}");
                    let [a, b, c, d] = [0, 1, 2, 3].map(|i| input.shape()[i]);
                    let mut wide = Array4::from_elem((a, b, c, 2 * d), half::bf16::NEG_ONE);
                    let every_other = wide.slice_mut(ndarray::s![.., .., .., ..;2]);
                    rope_into(&spec, input, every_other, positions.view(), layout).unwrap();
                    let got = wide.slice(ndarray::s![.., .., .., ..;2]).to_owned();
                    assert_eq!(got.as_slice().unwrap(), want, "strided into, {layout:?}");
                    let between = wide.slice(ndarray::s![.., .., .., 1..;2]);
                    assert!(between.iter().all(|v| *v == half::bf16::NEG_ONE));
                }
            }
        }
    }

    /// A multimodal rotation is the rotation of each row with cos/sin gathered per
    /// frequency from its axis's position (from the 1-D table), and a token whose axes agree
    /// rotates as the 1-D RoPE does: both layouts, both pairings, partial rotary, both
    /// M-RoPE layouts, on the calling thread and on the pool.
    #[test]
    fn multimodal_rotation_gathers_each_frequency_from_its_axis() {
        use crate::rope::{Mrope, MultimodalRope};
        for (layout_m, section, pairing) in [
            (Mrope::Sections, [4, 6, 6], Pairing::Neox),
            (Mrope::Interleaved, [8, 5, 3], Pairing::Gptj),
            (Mrope::Alternating, [5, 5, 6], Pairing::Gptj),
        ] {
            let spec = RopeSpec::partial(40, 32).unwrap().with_pairing(pairing);
            let mrope = MultimodalRope::new(layout_m, section, 32).unwrap();
            let axes = mrope.axes();
            assert!(axes.contains(&1) && axes.contains(&2), "{axes:?}");
            for (batch, len, heads) in [(2, 5, 3), (1, 2 * TOKENS_PER_TASK + 7, 40)] {
                let x = Array4::from_shape_fn((batch, len, heads, 40), |(b, l, h, d)| {
                    half::bf16::from_f32(((b * 7 + l * 5 + h * 3 + d) % 23) as f32 - 11.0)
                });
                // Tokens 0..len/2 an image's (time, row, column); the rest text, axes equal.
                let positions = ndarray::Array3::from_shape_fn((3, batch, len), |(a, b, l)| {
                    if l < len / 2 {
                        [7 + b as u32, 7 + (l / 4) as u32, 7 + (l % 4) as u32][a]
                    } else {
                        (l as u32) * 1009 + 4_000_000_000
                    }
                });
                for layout in [Layout::Blhd, Layout::Bhld] {
                    let input = match layout {
                        Layout::Blhd => x.view(),
                        Layout::Bhld => x.view().permuted_axes([0, 2, 1, 3]),
                    };
                    let got =
                        rope_multimodal(&spec, &mrope, input, positions.view(), layout).unwrap();
                    let mut in_place = input.as_standard_layout().into_owned();
                    let p = positions.view();
                    rope_multimodal_in_place(&spec, &mrope, in_place.view_mut(), p, layout)
                        .unwrap();
                    assert_eq!(got, in_place);
                    let mut into = Array4::from_elem(input.raw_dim(), half::bf16::ONE);
                    rope_multimodal_into(&spec, &mrope, input, into.view_mut(), p, layout).unwrap();
                    assert_eq!(got, into);
                    // The oracle: each token's row of (cos, sin) gathered from the table.
                    let freqs = spec.frequencies(u64::from(*positions.iter().max().unwrap()) + 1);
                    let flat: Vec<u32> = positions.iter().copied().collect();
                    let table = rope_cos_sin(&freqs, &flat);
                    let n_tok = batch * len;
                    let got_t = match layout {
                        Layout::Blhd => got.view(),
                        Layout::Bhld => got.view().permuted_axes([0, 2, 1, 3]),
                    };
                    for b in 0..batch {
                        for l in 0..len {
                            let cs: Vec<(f32, f32)> = (0..16)
                                .map(|i| {
                                    let row = axes[i] as usize * n_tok + b * len + l;
                                    (table[[row, i, 0]], table[[row, i, 1]])
                                })
                                .collect();
                            for h in 0..heads {
                                let mut want: Vec<_> = x.slice(ndarray::s![b, l, h, ..]).to_vec();
                                rotate_row(&mut want, &CosSinRow::from_pairs(&cs), pairing);
                                let row = got_t.slice(ndarray::s![b, l, h, ..]).to_vec();
                                assert_eq!(row, want, "{layout_m:?} {layout:?} token {b},{l}");
                            }
                        }
                    }
                    // Text tokens: the 1-D rotation's bits.
                    let text = positions.index_axis(Axis(0), 0).to_owned();
                    let one = rope(&spec, input, text.view(), layout).unwrap();
                    let one = match layout {
                        Layout::Blhd => one.view(),
                        Layout::Bhld => one.view().permuted_axes([0, 2, 1, 3]),
                    }
                    .to_owned();
                    let tail = ndarray::s![.., len / 2.., .., ..];
                    assert_eq!(got_t.slice(tail), one.slice(tail));
                    assert_ne!(got_t, one.view());
                }
            }
        }
    }

    #[test]
    fn multimodal_rotation_refuses_other_axes_and_positions() {
        use crate::rope::{Mrope, MultimodalRope};
        let spec = RopeSpec::new(16).unwrap();
        let x = Array4::<f32>::ones((1, 2, 1, 16));
        let good = MultimodalRope::new(Mrope::Sections, [2, 3, 3], 16).unwrap();
        let other = MultimodalRope::new(Mrope::Sections, [2, 1, 1], 8).unwrap();
        let p3 = ndarray::Array3::<u32>::zeros((3, 1, 2));
        let e = rope_multimodal(&spec, &other, x.view(), p3.view(), Layout::Blhd).unwrap_err();
        assert!(e.to_string().contains("mrope") && e.to_string().contains("rotary_dim 8"), "{e}");
        let p4 = ndarray::Array3::<u32>::zeros((4, 1, 2));
        let e = rope_multimodal(&spec, &good, x.view(), p4.view(), Layout::Blhd).unwrap_err();
        assert!(e.to_string().contains("[3, batch, len]") && e.to_string().contains("[4, 1, 2]"));
        let short = ndarray::Array3::<u32>::zeros((3, 1, 3));
        let e = rope_multimodal(&spec, &good, x.view(), short.view(), Layout::Blhd).unwrap_err();
        assert!(e.to_string().contains("[1, 2]"), "{e}");
        let mut y = x.clone();
        let e = rope_multimodal_in_place(&spec, &good, y.view_mut(), short.view(), Layout::Blhd);
        assert!(e.is_err() && y == x);
        assert!(MultimodalRope::new(Mrope::Interleaved, [40000, 0, 0], 16).is_err());
        assert!(MultimodalRope::new(Mrope::Interleaved, [40, 40, 40], 16).is_ok());
    }

    #[test]
    fn rope_into_refuses_an_out_of_another_shape_before_writing_it() {
        let spec = RopeSpec::new(8).unwrap();
        let x = Array4::<f32>::ones((1, 2, 3, 8));
        let positions = Array2::<u32>::zeros((1, 2));
        let mut out = Array4::<f32>::from_elem((1, 2, 4, 8), 7.0);
        let e = rope_into(&spec, x.view(), out.view_mut(), positions.view(), Layout::Blhd);
        let e = e.unwrap_err().to_string();
        assert!(e.contains("out (x's shape)") && e.contains("[1, 2, 3, 8]"), "{e}");
        assert!(out.iter().all(|v| *v == 7.0));
    }
}
