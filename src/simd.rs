//! Which vector instructions the CPU loops are compiled for besides the target's baseline
//! (SSE2 on x86_64): the same Rust, compiled again inside functions that enable wider
//! instruction sets, chosen at run time. Only the instruction selection differs, never an
//! operation (Rust does not contract multiplies and adds), so every set gives the same bits.
//! Two loops are written for a set by hand: RoPE's f16 rows through F16C (`cpu::rope`'s
//! `f16c`) and the encode's rows with f16 on either side (`cpu::encode`'s `add_row_f16c`:
//! f16 tables widened by VCVTPH2PS, f16 output rounded by VCVTPS2PH), whose conversions
//! exhaustive tests hold to the software forms' bits, in the SSE mode's default
//! ([`Simd::unless_nondefault_mode`]).

/// An instruction set the loops are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Set {
    /// The target's baseline.
    Portable,
    /// AVX2 with F16C: eight 32-bit lanes, and f16 conversions in one instruction (RoPE's
    /// f16 rows, the encode's f16 output and tables). Every AVX2 CPU has F16C (Intel's
    /// since Haswell, AMD's since Excavator); one that hides it runs the baseline.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-512 F, CD, VL and BW, with AVX2 and F16C: sixteen 32-bit lanes, leading zeros in
    /// one instruction (`vplzcntd`, which the exact sin/cos's integer float assembly takes
    /// where a thread's SSE mode is not the default), and the f16 conversions
    /// (`vcvtph2ps`, `vcvtps2ph`) on sixteen lanes. Every AVX-512 CPU has CD, AVX2 and F16C.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// A [`Set`] this CPU runs: made only by [`Simd::detect`] and [`Simd::PORTABLE`] (and in
/// tests by `Simd::all_here`), which is what makes calling the loops compiled for it sound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Simd(Set);

impl Simd {
    /// The baseline, which every CPU of the target runs.
    pub(crate) const PORTABLE: Simd = Simd(Set::Portable);

    /// The widest set this CPU runs (the standard library caches what the CPU reports), at
    /// most the one [`crate::cpu::SIMD_ENV`] names.
    #[inline]
    pub(crate) fn detect() -> Self {
        capped(Self::widest_here(), cap())
    }

    /// The widest set this CPU runs, whatever [`crate::cpu::SIMD_ENV`] says.
    #[inline]
    pub(crate) fn widest_here() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx512 = has!("avx512f") && has!("avx512cd") && has!("avx512vl");
            let avx2 = has!("avx2") && has!("f16c");
            if avx512 && has!("avx512bw") && avx2 {
                return Simd(Set::Avx512);
            }
            if avx2 {
                return Simd(Set::Avx2);
            }
        }
        Self::PORTABLE
    }

    /// This set, or the baseline on a thread whose SSE mode is not the default one: every
    /// exception masked, rounding to nearest, no flush of subnormal inputs (DAZ) or results
    /// (FTZ). A library built with fast math sets FTZ and DAZ for its whole process; a
    /// caller may change the rounding or unmask exceptions (`fesetround`, `feenableexcept`).
    /// The loops that convert f16 by F16C give the software conversions' bits in the
    /// default mode only: VCVTPS2PH rounds to nearest whatever the mode says, where the
    /// software forms' float steps follow it, and it raises overflow and underflow, which
    /// the integer forms never do (an unmasked one is a SIGFPE). To be called on the thread
    /// that runs the loops (each thread has its own mode).
    #[inline]
    pub(crate) fn unless_nondefault_mode(self) -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: reading MXCSR has no precondition (SSE is x86_64's baseline).
            #[allow(deprecated)]
            let csr = unsafe { std::arch::x86_64::_mm_getcsr() };
            if csr & MXCSR_MODE != MXCSR_DEFAULT {
                return Self::PORTABLE;
            }
        }
        self
    }

    /// Its set.
    #[inline]
    pub(crate) fn set(self) -> Set {
        self.0
    }

    /// Every set this CPU runs, the baseline first: for tests that hold each to the
    /// baseline's bits.
    #[cfg(test)]
    pub(crate) fn all_here() -> Vec<Self> {
        let widest = Self::widest_here();
        #[cfg(target_arch = "x86_64")]
        if widest.0 == Set::Avx512 {
            return vec![Self::PORTABLE, Simd(Set::Avx2), widest];
        }
        if widest == Self::PORTABLE { vec![widest] } else { vec![Self::PORTABLE, widest] }
    }

    /// Whether this CPU runs the AVX2 (and F16C) loops; a note that the calling test skips
    /// if not.
    #[cfg(test)]
    pub(crate) fn avx2_here() -> bool {
        let here = Self::widest_here() != Self::PORTABLE;
        if !here {
            eprintln!("SKIP: no AVX2 and F16C here");
        }
        here
    }

    /// Whether this CPU runs the AVX-512 loops (and so AVX2's); a note that the calling
    /// test's AVX-512 part skips if not.
    #[cfg(test)]
    pub(crate) fn avx512_here() -> bool {
        #[cfg(target_arch = "x86_64")]
        if Self::widest_here().0 == Set::Avx512 {
            return true;
        }
        eprintln!("SKIP: no AVX-512 here");
        false
    }
}

/// Environment variable capping the instruction set of the CPU loops, for measuring one set
/// against another with `posenc bench --device cpu` (and the cost model behind `--device
/// auto`, which reads the set too): `portable` (the target's baseline), `avx2` (with F16C),
/// `avx512` or `widest` (the default, as unset: the widest the CPU runs). A set the CPU
/// lacks caps nothing; on other architectures than x86_64 every set is the baseline.
/// Every set gives the same bits. Read once per process. The command line refuses a value
/// that names no set ([`crate::cpu::check_simd_env`]); the library ignores one.
pub const SIMD_ENV: &str = "POSENC_CPU_SIMD";

/// `widest` (a set this CPU runs), or `cap` where it is narrower: a set this CPU runs too
/// (the widest's detection includes every narrower set's features); never wider.
fn capped(widest: Simd, cap: Option<Set>) -> Simd {
    match cap {
        Some(set) if rank(set) < rank(widest.0) => Simd(set),
        _ => widest,
    }
}

/// A set's place in the order the sets widen in.
fn rank(set: Set) -> u8 {
    match set {
        Set::Portable => 0,
        #[cfg(target_arch = "x86_64")]
        Set::Avx2 => 1,
        #[cfg(target_arch = "x86_64")]
        Set::Avx512 => 2,
    }
}

/// The names [`crate::cpu::SIMD_ENV`] takes, as its refusal lists them.
pub(crate) const CAP_NAMES: &str = "portable, avx2, avx512 (the widest set the loops may \
                                    take) or widest (the default: the widest the CPU runs)";

/// The set `text` names for [`crate::cpu::SIMD_ENV`] (`None`: no cap; `Err`: no set's
/// name). A set of another architecture caps at the baseline there.
pub(crate) fn parse_cap(text: &str) -> Result<Option<Set>, ()> {
    Ok(match text.trim().to_ascii_lowercase().as_str() {
        "widest" => None,
        "portable" => Some(Set::Portable),
        #[cfg(target_arch = "x86_64")]
        "avx2" => Some(Set::Avx2),
        #[cfg(target_arch = "x86_64")]
        "avx512" => Some(Set::Avx512),
        #[cfg(not(target_arch = "x86_64"))]
        "avx2" | "avx512" => Some(Set::Portable),
        _ => return Err(()),
    })
}

/// The cap [`crate::cpu::SIMD_ENV`] sets now (`None`: unset or `widest`), or its value as
/// set where it names no set (lossily, if not Unicode), for the refusal.
pub(crate) fn cap_from_env() -> Result<Option<Set>, String> {
    match std::env::var(SIMD_ENV) {
        Ok(value) => parse_cap(&value).map_err(|()| value),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(value)) => Err(value.to_string_lossy().into_owned()),
    }
}

/// The cap [`crate::cpu::SIMD_ENV`] sets, read once per process; a value that names no set
/// caps nothing (the command line refuses it first: [`crate::cpu::check_simd_env`]).
fn cap() -> Option<Set> {
    static CAP: std::sync::OnceLock<Option<Set>> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| cap_from_env().ok().flatten())
}

/// MXCSR's mode bits (all but the six sticky exception flags): FTZ (15), the rounding
/// control (13 - 14), the six exception masks (7 - 12) and DAZ (6).
#[cfg(target_arch = "x86_64")]
const MXCSR_MODE: u32 = 0xffc0;

/// Their default: every exception masked, round to nearest, no FTZ or DAZ.
#[cfg(target_arch = "x86_64")]
const MXCSR_DEFAULT: u32 = 0x1f80;

/// `f`'s result, with this thread's SSE mode (MXCSR's rounding, FTZ, DAZ and exception
/// masks) set to the default while `f` runs and put back after it, panic or not (the
/// sticky exception flags `f` raised are kept). For the host's own float steps, whose
/// results are kept or cached beyond one call: a spec's attention factor (`ln` in float64),
/// the numbers of a JSON text. Run in the caller's mode, one call made with another rounding
/// left its attention factor in the spec cache for every later call (a stranger's, round
/// twenty-seven), and `1.1` in a scaling read as 1.0999999999999999. Rust assumes the
/// default mode throughout, so this is also the mode the compiler's constant folding
/// assumed. Elsewhere than x86_64, `f` as it is.
pub(crate) fn in_default_mode<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[allow(deprecated)]
        use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
        /// Puts the caller's mode bits back when dropped, keeping the flags raised since.
        struct Restore(u32);
        impl Drop for Restore {
            fn drop(&mut self) {
                // SAFETY: reading and writing this thread's MXCSR, back to the caller's mode.
                #[allow(deprecated)]
                unsafe {
                    _mm_setcsr((_mm_getcsr() & !MXCSR_MODE) | (self.0 & MXCSR_MODE));
                }
            }
        }
        // SAFETY: reading this thread's MXCSR has no precondition.
        #[allow(deprecated)]
        let csr = unsafe { _mm_getcsr() };
        if csr & MXCSR_MODE != MXCSR_DEFAULT {
            let _restore = Restore(csr);
            // SAFETY: the default mode, the one Rust's code generation assumes.
            #[allow(deprecated)]
            unsafe {
                _mm_setcsr((csr & !MXCSR_MODE) | MXCSR_DEFAULT);
            }
            return f();
        }
    }
    f()
}

/// `v` as it is, through an empty `asm!` that names its register: the compiler can no longer
/// fold the instruction that made `v` into the store that takes it. AMD's Zen 4 runs
/// VCVTPS2PH and VPMOVDW with a memory operand far slower than the register form and a
/// store, and LLVM folds the pair into the memory form wherever it can (2026-12-05, an AMD
/// EPYC with AVX-512: a Llama-3-8B decode step's f16 RoPE 8.9 - 9.0 -> 8.4 us on the
/// AVX-512 loops, 12.5 - 12.7 -> 11.1 us on AVX2's; its bf16 RoPE 8.0 -> 7.9 us).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
pub(crate) fn unfolded256(mut v: std::arch::x86_64::__m256i) -> std::arch::x86_64::__m256i {
    // SAFETY: no instruction at all; the asm only names the register that holds `v`.
    unsafe {
        std::arch::asm!(
            "/* {0} */",
            inout(ymm_reg) v,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    v
}

/// [`unfolded256`] of a 128-bit value.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn unfolded128(mut v: std::arch::x86_64::__m128i) -> std::arch::x86_64::__m128i {
    // SAFETY: no instruction at all; the asm only names the register that holds `v`.
    unsafe {
        std::arch::asm!(
            "/* {0} */",
            inout(xmm_reg) v,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    v
}

/// Runs `body` on a thread of its own once in each of four SSE modes other than the default
/// (rounding toward zero, down and up; FTZ with DAZ), with MXCSR's mode bits (`bits`, the
/// rounding control replaced) set on that thread, for tests of loops that must keep their
/// bits there.
#[cfg(all(test, target_arch = "x86_64"))]
#[allow(deprecated)]
pub(crate) fn in_other_sse_modes(body: impl Fn(u32) + Sync) {
    use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
    std::thread::scope(|scope| {
        scope.spawn(|| {
            // SAFETY: reading and writing this thread's MXCSR (restored before it ends).
            let default = unsafe { _mm_getcsr() };
            for bits in [3u32 << 13, 1 << 13, 2 << 13, (1 << 15) | (1 << 6)] {
                // SAFETY: as above.
                unsafe { _mm_setcsr((default & !(3 << 13)) | bits) };
                body(bits);
                // SAFETY: as above.
                unsafe { _mm_setcsr(default) };
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_parsed_and_only_narrow() {
        assert_eq!(parse_cap(" Widest "), Ok(None));
        // Set but blank is refused, as every posenc variable's (never taken for unset).
        assert!(parse_cap("").is_err() && parse_cap(" ").is_err());
        assert_eq!(parse_cap("Portable"), Ok(Some(Set::Portable)));
        assert!(parse_cap("avx-2").is_err() && parse_cap("sse").is_err());
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(parse_cap("avx2"), Ok(Some(Set::Avx2)));
            assert_eq!(parse_cap(" AVX512 "), Ok(Some(Set::Avx512)));
        }
        // A cap narrows to itself, never widens past the CPU's set, and none keeps it.
        for here in Simd::all_here() {
            assert_eq!(capped(here, None), here);
            assert_eq!(capped(here, Some(Set::Portable)), Simd::PORTABLE);
        }
        #[cfg(target_arch = "x86_64")]
        {
            let (avx2, avx512) = (Simd(Set::Avx2), Simd(Set::Avx512));
            assert_eq!(capped(avx512, Some(Set::Avx2)), avx2);
            assert_eq!(capped(avx2, Some(Set::Avx512)), avx2);
            assert_eq!(capped(Simd::PORTABLE, Some(Set::Avx512)), Simd::PORTABLE);
        }
    }
}
