//! Where a result wanted in host memory is computed fastest: the cost model behind
//! `--device auto` (the CLI) and `device="auto"` (the Python module).
//!
//! A result the caller wants in host memory (a file, a NumPy array) costs the GPU path more
//! than its kernel: opening a device, a submission and its wait, and the transfers through
//! a mapped staging buffer, whose copy out runs at host memory speed. The CPU path writes
//! the same bytes once. Measured on an H100 machine with 16 host cores (2026-11-26,
//! docs/performance.md), the CPU path was 4 - 10x faster for every host result of the
//! bench's presets; on the development machine's 2 cores with lavapipe, 4 - 6x. The GPU can
//! still win a host result when the CPU's work per value is heavy (the exact sin and cos
//! of a table) and the host has few threads: [`HostJob::prefers_gpu`] weighs the two.
//!
//! The model's figures are per CPU thread and were measured with `posenc bench` on the
//! development machine (AMD EPYC Zen 5, 2026-11-26), for the instruction set the CPU's
//! loops run compiled for there (the table's and RoPE's faster with AVX-512, 2026-11-28);
//! the transfer rate is the H100
//! machine's (a 64 MiB map at 45 GB/s, the copy out of the mapped range at 10.8 GB/s). The
//! GPU's kernel time is left out: at a GPU's bandwidth it is a small part of the
//! transfers, so the model leans towards the GPU, never away from it.

use crate::Result;
use crate::simd::{Set, Simd};

/// The environment variable that sets [`AutoPolicy`]: `cost` (the default) or `gpu`.
pub const AUTO_ENV: &str = "POSENC_AUTO";

/// What `auto` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoPolicy {
    /// The faster of CPU and GPU for a host result, by [`HostJob::prefers_gpu`]; the GPU
    /// only when the adapter that opens is a hardware one.
    Cost,
    /// The GPU whenever one opens (posenc 0.x's `auto`), the CPU after a device fault.
    Gpu,
}

impl AutoPolicy {
    /// The policy [`AUTO_ENV`] names, [`AutoPolicy::Cost`] when unset.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) for any other value, one
    /// that is not UTF-8 included.
    pub fn from_env() -> Result<Self> {
        let choices = [("cost", Self::Cost), ("gpu", Self::Gpu)];
        crate::error::env_choice(AUTO_ENV, "cost or gpu", Self::Cost, &choices)
    }
}

/// The threads the CPU path computes on (rayon's pool of this process).
pub fn cpu_threads() -> usize {
    rayon::current_num_threads()
}

/// Nanoseconds one CPU thread takes per value of a sinusoid table or cos/sin cache: an
/// exact sin or cos each (`cpu_table`, 2048 x 4096: 6.9 ms on 2 threads, the loops compiled
/// for AVX2).
#[cfg(target_arch = "x86_64")]
const TABLE_NS: f64 = 1.65;
/// [`TABLE_NS`] with the target's baseline instructions (the `portable` set; every AArch64
/// CPU, whose loop LLVM leaves scalar): 46.0 ms for the 2048 x 4096 table on one thread of
/// an AMD EPYC with `POSENC_CPU_SIMD=portable`, against 9.2 ms with AVX2's loops and 7.3
/// with AVX-512's (2026-12-06, two runs each): 5.5 ns. Until then the baseline took
/// [`TABLE_NS`], under a third of its time, and leaned `auto` towards the CPU.
const TABLE_NS_PORTABLE: f64 = 5.5;
/// [`TABLE_NS`] where the loops run compiled for AVX-512: they took 0.40 - 0.52 of the AVX2
/// loops' time in interleaved runs (2026-11-28), so about half, rounded up.
#[cfg(target_arch = "x86_64")]
const TABLE_NS_AVX512: f64 = 0.85;
/// Per output value of the fused encode, its PE rows cached (`cpu_encode`, llama3-8b: 2.65
/// ms on 2 threads for 8.4 M values).
const ENCODE_NS: f64 = 0.63;
/// Per element of RoPE, cos and sin included (`cpu_rope`, llama3-8b-rope: 10.4 ms on 2
/// threads for its 10.5 M elements, the target's baseline instructions, 2026-11-26; until
/// 2026-12-05 this figure was half that, from a count of 21 M, the preset's bytes).
const ROPE_NS: f64 = 2.0;
/// [`ROPE_NS`] with the AVX2 and AVX-512 sets' loops: on one thread of an AMD EPYC Zen 3
/// (2026-12-05, `RAYON_NUM_THREADS=1 posenc bench --model llama3-8b-rope --dtype D`, after
/// the hand-written 16-bit loops), 3.7 - 5.0 ms in bf16, 3.6 - 4.1 in f16 and 4.7 - 5.3 in f32
/// (the last at the same run's copy of its bytes) for 10.5 M elements: 0.35 - 0.50 ns.
/// AVX-512 hosts run their 16-bit loops sixteen pairs a step and f32's at the copy's pace
/// too; the same figure (an AMD EPYC with AVX-512, 2026-12-05: Llama-3-8B's bf16 prefill
/// RoPE 1.2 - 1.3 ms on 2 threads, about 0.24 ns an element a thread, bound by memory).
#[cfg(target_arch = "x86_64")]
const ROPE_NS_AVX2: f64 = 0.5;
#[cfg(target_arch = "x86_64")]
const ROPE_NS_AVX512: f64 = 0.5;
/// Per value of an ALiBi bias (`cpu_alibi`, 32 x 512 x 512: 1.1 ms on 2 threads).
const ALIBI_NS: f64 = 0.26;
/// Nanoseconds per byte brought to or from the GPU through a mapped buffer (8 GB/s: the
/// H100 machine's map and copy out, above).
const TRANSFER_NS_PER_BYTE: f64 = 0.125;
/// A submission and its wait (the H100's whole encode call: 146 - 490 us).
const CALL_NS: f64 = 200e3;
/// Opening a device (adapter, device and queue) and its first pipelines: an NVIDIA H100's
/// Vulkan driver, 2026-11-27, by whole `posenc table` processes at 2048 x 768: 238 - 250 ms
/// on the GPU against 7 - 8 ms on the CPU (lavapipe's open on the development machine: 70
/// ms).
const OPEN_NS: f64 = 230e6;

/// A job whose result is wanted in host memory, by the work it does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum HostJob {
    /// A sinusoid table or RoPE cos/sin cache of `values` values (4 bytes each).
    Table {
        /// Values computed.
        values: u64,
    },
    /// The fused encode: `out_values` values of `out_bytes` bytes in all, and `pe_values`
    /// PE values computed for the rows of its distinct positions.
    Encode {
        /// Output values.
        out_values: u64,
        /// PE values computed (distinct positions times the width, at most).
        pe_values: u64,
        /// Output bytes.
        out_bytes: u64,
    },
    /// RoPE of `elements` elements, `bytes` bytes, sent to the GPU and brought back.
    Rope {
        /// Elements rotated.
        elements: u64,
        /// Bytes of the tensors.
        bytes: u64,
    },
    /// An ALiBi bias of `values` f32 values.
    Alibi {
        /// Values written.
        values: u64,
    },
}

impl HostJob {
    /// The fused encode of tokens at `positions` (one each), `width` values per token and
    /// `out_bytes` of output in all; `sinusoid`: their PE rows are computed (else a learned
    /// table's are read). The PE rows counted are the span of the positions, at most one per
    /// token.
    pub fn encode<'a>(
        positions: impl IntoIterator<Item = &'a u32>,
        width: u64,
        out_bytes: u64,
        sinusoid: bool,
    ) -> Self {
        let (mut lo, mut hi, mut tokens) = (u32::MAX, 0, 0u64);
        for &p in positions {
            (lo, hi, tokens) = (lo.min(p), hi.max(p), tokens + 1);
        }
        let span = if tokens == 0 { 0 } else { u64::from(hi - lo) + 1 };
        let pe_rows = if sinusoid { span.min(tokens) } else { 0 };
        Self::Encode {
            out_values: tokens.saturating_mul(width),
            pe_values: pe_rows.saturating_mul(width),
            out_bytes,
        }
    }

    /// The model's estimate of the CPU path on `threads` threads of this CPU, in
    /// nanoseconds.
    pub fn cpu_ns(&self, threads: usize) -> f64 {
        self.cpu_ns_with(threads, Simd::detect().set())
    }

    /// [`HostJob::cpu_ns`] with the loops compiled for `set`.
    fn cpu_ns_with(&self, threads: usize, set: Set) -> f64 {
        let (table_ns, rope_ns) = match set {
            Set::Portable => (TABLE_NS_PORTABLE, ROPE_NS),
            #[cfg(target_arch = "x86_64")]
            Set::Avx2 => (TABLE_NS, ROPE_NS_AVX2),
            #[cfg(target_arch = "x86_64")]
            Set::Avx512 => (TABLE_NS_AVX512, ROPE_NS_AVX512),
        };
        let one_thread = match *self {
            Self::Table { values } => values as f64 * table_ns,
            Self::Encode { out_values, pe_values, .. } => {
                out_values as f64 * ENCODE_NS + pe_values as f64 * table_ns
            }
            Self::Rope { elements, .. } => elements as f64 * rope_ns,
            Self::Alibi { values } => values as f64 * ALIBI_NS,
        };
        one_thread / threads.max(1) as f64
    }

    /// The model's estimate of the GPU path, in nanoseconds: the transfers and one call,
    /// and opening the device unless `open` says one is already open.
    pub fn gpu_ns(&self, open: bool) -> f64 {
        let bytes = match *self {
            Self::Table { values } | Self::Alibi { values } => values * 4,
            Self::Encode { out_bytes, .. } => out_bytes,
            Self::Rope { bytes, .. } => bytes.saturating_mul(2),
        };
        bytes as f64 * TRANSFER_NS_PER_BYTE + CALL_NS + if open { 0.0 } else { OPEN_NS }
    }

    /// Whether the GPU path is expected to deliver this host result sooner than the CPU
    /// path on `threads` threads; `open`: a device is already open (the Python module
    /// keeps one).
    pub fn prefers_gpu(&self, threads: usize, open: bool) -> bool {
        self.prefers_gpu_with(threads, open, Simd::detect().set())
    }

    /// [`HostJob::prefers_gpu`] with the CPU's loops compiled for `set`.
    fn prefers_gpu_with(&self, threads: usize, open: bool, set: Set) -> bool {
        self.cpu_ns_with(threads, set) > self.gpu_ns(open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bert-base's and llama3-8b's encodes (every position's PE row computed), llama3-8b's
    /// RoPE, bloom's ALiBi and a 2048 x 4096 table.
    fn presets() -> [HostJob; 5] {
        [
            HostJob::Encode { out_values: 3_145_728, pe_values: 98_304, out_bytes: 12_582_912 },
            HostJob::Encode { out_values: 8_388_608, pe_values: 8_388_608, out_bytes: 33_554_432 },
            HostJob::Rope { elements: 20_971_520, bytes: 41_943_040 },
            HostJob::Alibi { values: 8_388_608 },
            HostJob::Table { values: 8_388_608 },
        ]
    }

    #[test]
    fn the_cpu_takes_the_presets_host_results_on_16_threads_and_on_2_without_a_device() {
        for simd in sets() {
            for job in presets() {
                for open in [false, true] {
                    let gpu = job.prefers_gpu_with(16, open, simd);
                    assert!(!gpu, "{job:?} 16 threads, open {open}, {simd:?}");
                }
                assert!(!job.prefers_gpu_with(2, false, simd), "{job:?} 2 threads, {simd:?}");
            }
        }
        // With a device open, 2 threads of the baseline loops lose llama3-8b's encode (25.7
        // ms with its PE rows, against 4.4 ms of readback; lavapipe's own measurement: 22 ms
        // cold on the CPU),
        // this RoPE of 21 M elements (21 ms against 10.7 ms of transfers) and the table (23
        // ms).
        let on = |simd| -> Vec<bool> {
            presets().iter().map(|job| job.prefers_gpu_with(2, true, simd)).collect()
        };
        assert_eq!(on(Set::Portable), [false, true, true, false, true]);
        // AVX2's keep the RoPE (5.2 ms).
        #[cfg(target_arch = "x86_64")]
        assert_eq!(on(Set::Avx2), [false, true, false, false, true]);
        // AVX-512's loops keep the table (3.6 ms), not the encode (6.2 ms).
        #[cfg(target_arch = "x86_64")]
        assert_eq!(on(Set::Avx512), [false, true, false, false, false]);
    }

    #[test]
    fn a_large_table_on_one_thread_goes_to_the_gpu_unless_avx512_computes_it() {
        // 2^28 values: 1476 ms of the baseline's loops on one thread against 134 ms of
        // transfers and 230 ms to open.
        let job = HostJob::Table { values: 1 << 28 };
        assert!(job.prefers_gpu_with(1, false, Set::Portable));
        // With AVX-512's loops 228 ms: the CPU.
        #[cfg(target_arch = "x86_64")]
        assert!(!job.prefers_gpu_with(1, false, Set::Avx512));
        // A small one does not pay for the open, but does once a device is open.
        let small = HostJob::Table { values: 1 << 22 };
        for simd in sets() {
            assert!(!job.prefers_gpu_with(16, false, simd));
            assert!(!small.prefers_gpu_with(1, false, simd));
            assert!(small.prefers_gpu_with(1, true, simd));
        }
    }

    #[test]
    fn the_baselines_table_is_weighed_at_its_own_rate() {
        // 2^25 values on 8 threads with a device open: 23 ms of the baseline's loops (every
        // AArch64 CPU's) against 16.8 ms of transfers; AVX2's 6.9 ms stay on the CPU.
        let job = HostJob::Table { values: 1 << 25 };
        assert!(job.prefers_gpu_with(8, true, Set::Portable));
        #[cfg(target_arch = "x86_64")]
        assert!(!job.prefers_gpu_with(8, true, Set::Avx2));
        assert!(!job.prefers_gpu_with(8, false, Set::Portable), "the open outweighs it");
    }

    /// Every instruction set the model has figures for.
    fn sets() -> Vec<Set> {
        #[cfg(target_arch = "x86_64")]
        return vec![Set::Portable, Set::Avx2, Set::Avx512];
        #[cfg(not(target_arch = "x86_64"))]
        vec![Set::Portable]
    }

    #[test]
    fn the_policy_comes_from_the_environment_and_refuses_other_values() {
        // Only this test sets the variable.
        // SAFETY: no other thread of this test binary reads or writes POSENC_AUTO.
        unsafe { std::env::set_var(AUTO_ENV, "gpu") };
        assert_eq!(AutoPolicy::from_env().unwrap(), AutoPolicy::Gpu);
        // Case aside, as wgpu's variables.
        unsafe { std::env::set_var(AUTO_ENV, " GPU") };
        assert_eq!(AutoPolicy::from_env().unwrap(), AutoPolicy::Gpu);
        unsafe { std::env::set_var(AUTO_ENV, "Cost") };
        assert_eq!(AutoPolicy::from_env().unwrap(), AutoPolicy::Cost);
        unsafe { std::env::set_var(AUTO_ENV, "cpu") };
        let err = AutoPolicy::from_env().unwrap_err().to_string();
        assert!(err.contains("POSENC_AUTO") && err.contains("cost or gpu"), "{err}");
        // Not UTF-8: refused too, not read as unset.
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let raw = std::ffi::OsStr::from_bytes(b"g\xffpu");
            unsafe { std::env::set_var(AUTO_ENV, raw) };
            let err = AutoPolicy::from_env().unwrap_err().to_string();
            assert!(err.contains("POSENC_AUTO") && err.contains("cost or gpu"), "{err}");
        }
        unsafe { std::env::remove_var(AUTO_ENV) };
        assert_eq!(AutoPolicy::from_env().unwrap(), AutoPolicy::Cost);
    }
}
