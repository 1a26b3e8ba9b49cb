//! Which vector instructions the CPU loops are compiled for besides the target's baseline
//! (SSE2 on x86_64): the same Rust, compiled again inside functions that enable wider
//! instruction sets, chosen at run time. Only the instruction selection differs, never an
//! operation (Rust does not contract multiplies and adds), so every set gives the same bits.

/// The widest instruction set a loop is compiled for that this CPU runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Simd {
    /// The target's baseline.
    Portable,
    /// AVX2: eight 32-bit lanes.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-512 F, CD, VL and BW: sixteen 32-bit lanes, and leading zeros in one
    /// instruction (`vplzcntd`), which the exact sin/cos's float assembly needs.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Simd {
    /// The widest this CPU runs (the standard library caches what the CPU reports).
    #[inline]
    pub(crate) fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512cd") && has!("avx512vl") && has!("avx512bw") {
                return Simd::Avx512;
            }
            if has!("avx2") {
                return Simd::Avx2;
            }
        }
        Simd::Portable
    }

    /// Every set this CPU runs, the baseline first: for tests that hold each to the
    /// baseline's bits.
    #[cfg(test)]
    pub(crate) fn all_here() -> Vec<Self> {
        let mut all = vec![Simd::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                all.push(Simd::Avx2);
            }
            if Simd::detect() == Simd::Avx512 {
                all.push(Simd::Avx512);
            }
        }
        all
    }
}
