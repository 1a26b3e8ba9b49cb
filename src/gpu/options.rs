//! How a [`Context`](super::Context) is opened: the memory budget, the binding-size cap and
//! the optional device features it may use, from code or from the environment.

use super::faults::{Fault, fault_from_env};
use crate::error::{Result, env_choice, env_text, invalid_env};

/// Environment variable setting the device-memory budget of a context, in bytes.
pub const MEMORY_BUDGET_ENV: &str = "POSENC_GPU_MEMORY_BUDGET";

/// Environment variable turning GPU timestamp queries off (`off`) or on (`on`, the default).
pub const TIMESTAMPS_ENV: &str = "POSENC_GPU_TIMESTAMPS";

/// Environment variable choosing the access pattern of the kernels (see [`AccessPattern`]):
/// `auto`, `coalesced` or `adjacent`, for measuring one against the other with `posenc
/// bench` on a given adapter.
pub const ACCESS_PATTERN_ENV: &str = "POSENC_GPU_ACCESS";

/// Environment variable setting the units each invocation of the encode kernels and of the
/// recorded RoPE kernel moves per token in the coalesced access pattern (GPUs): 1, 2, 4 or
/// 8 (see [`Options::units`]), for measuring one against another with `posenc bench`.
pub const UNITS_ENV: &str = "POSENC_GPU_UNITS";

/// Environment variable choosing the recorded RoPE step's head-group form (see
/// [`Options::rope_heads`]): the heads each invocation rotates, 1 to
/// [`MAX_ROPE_HEAD_GROUP`], for measuring it against posenc's choice with `posenc bench`.
pub const ROPE_HEADS_ENV: &str = "POSENC_GPU_ROPE_HEADS";

/// Environment variable choosing which kernels wgpu bounds the loops of: `reviewed` (the
/// default: all but posenc's kernels whose loops were read to end, see
/// [`Options::bound_all_loops`]) or `all`, for measuring the difference with `posenc bench`.
pub const LOOP_BOUNDS_ENV: &str = "POSENC_GPU_LOOP_BOUNDS";

/// The most heads one invocation of the recorded RoPE step's head-group form rotates
/// ([`Options::rope_heads`]): each holds its group's words in registers.
pub const MAX_ROPE_HEAD_GROUP: u32 = 16;

/// Environment variable setting the most bytes of PE rows a context caches on the device
/// (see [`Options::pe_cache_budget`]): a whole number of bytes, 0 for no cache.
pub const PE_CACHE_ENV: &str = "POSENC_GPU_PE_CACHE";

/// Environment variable setting how long a blocking wait for the device polls before it
/// sleeps (see [`Options::spin_wait`]): whole microseconds, at most 1000000; 0 never polls.
pub const SPIN_WAIT_ENV: &str = "POSENC_GPU_SPIN_US";

/// How long a blocking wait for the device polls it before it sleeps, unless
/// [`Options::spin_wait`] says otherwise.
pub const SPIN_WAIT: std::time::Duration = std::time::Duration::from_micros(300);

/// The longest [`Options::spin_wait`] kept: a second.
const MAX_SPIN_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Options of a [`Context`](super::Context), which every constructor takes
/// ([`Options::from_env`] reads posenc's environment variables). The default uses
/// every optional feature the adapter offers, no budget and no binding cap.
///
/// ```
/// let options = posenc::gpu::Options::default().memory_budget(Some(64 << 20)).timestamps(false);
/// assert_eq!(options.budget(), Some(64 << 20));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    memory_budget: Option<u64>,
    max_binding_size: Option<u64>,
    timestamps: bool,
    limits: Option<wgpu::Limits>,
    access: AccessPattern,
    units: Option<u32>,
    rope_heads: Option<u32>,
    pe_cache_budget: u64,
    spin_wait: std::time::Duration,
    bound_all_loops: bool,
    /// Set from the environment only: a testing knob, not an option of the API.
    fault: Option<Fault>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            memory_budget: None,
            max_binding_size: None,
            timestamps: true,
            limits: None,
            access: AccessPattern::Auto,
            units: None,
            rope_heads: None,
            pe_cache_budget: super::PE_CACHE_BUDGET,
            spin_wait: SPIN_WAIT,
            bound_all_loops: false,
            fault: None,
        }
    }
}

/// How the vec4 encode kernel (widths that are a multiple of 4) walks memory, and with it
/// which forms the other kernels take: the recorded encode's units per invocation, the
/// recorded RoPE's form, and the f16 widening of the encode and RoPE kernels (the adjacent
/// pattern's by the general form alone: `shaders/shared/convert4.wgsl`). Both patterns
/// give the same bits; they differ in speed, and which is faster depends on the adapter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AccessPattern {
    /// [`AccessPattern::Adjacent`] on adapters that run shaders on CPU cores (wgpu's
    /// `DeviceType::Cpu`: lavapipe, llvmpipe, WARP, SwiftShader), else
    /// [`AccessPattern::Coalesced`].
    #[default]
    Auto,
    /// For GPUs: the invocations of a workgroup move consecutive units of a row, so each
    /// load and store of a warp touches one contiguous span.
    Coalesced,
    /// For adapters that emulate a GPU on CPU cores, whose cost is per buffer access: each
    /// invocation moves four adjacent units (one token record load per four units), and the
    /// rows of the group two ahead are prefetched.
    Adjacent,
}

impl AccessPattern {
    /// The pattern for an adapter of type `device_type`: never [`AccessPattern::Auto`].
    pub fn resolve(self, device_type: wgpu::DeviceType) -> Self {
        match self {
            AccessPattern::Auto if device_type == wgpu::DeviceType::Cpu => AccessPattern::Adjacent,
            AccessPattern::Auto => AccessPattern::Coalesced,
            chosen => chosen,
        }
    }
}

impl Options {
    /// The defaults, changed by `POSENC_MAX_BINDING_SIZE` and `POSENC_GPU_MEMORY_BUDGET`
    /// (whole numbers of bytes), `POSENC_GPU_TIMESTAMPS` (`on` or `off`) and
    /// `POSENC_GPU_ACCESS` (`auto`, `coalesced` or `adjacent`), `POSENC_GPU_UNITS` (1, 2,
    /// 4 or 8), `POSENC_GPU_ROPE_HEADS` (1 to 16), `POSENC_GPU_LOOP_BOUNDS` (`reviewed` or
    /// `all`), `POSENC_GPU_PE_CACHE` (a whole number of bytes, 0 for none) and
    /// `POSENC_GPU_SPIN_US` (whole microseconds, at most 1000000) when set;
    /// `POSENC_FAULT_INJECT=device-lost` makes the context lose its device as soon as it
    /// opens (see [`FAULT_INJECT_ENV`](super::FAULT_INJECT_ENV)).
    ///
    /// wgpu's own `WGPU_BACKEND` and `WGPU_POWER_PREF` are checked too
    /// ([`check_wgpu_env`](super::check_wgpu_env)).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) naming the variable if
    /// its value is malformed.
    pub fn from_env() -> Result<Self> {
        super::check_wgpu_env()?;
        crate::shaders::diagnostics::check_env()?;
        // Each value is checked whole: one that is not UTF-8 is refused like any other
        // malformed one, never taken for unset.
        let timestamps =
            env_choice(TIMESTAMPS_ENV, "on or off", true, &[("on", true), ("off", false)])?;
        let access = env_choice(
            ACCESS_PATTERN_ENV,
            "auto, coalesced or adjacent",
            AccessPattern::Auto,
            &[
                ("auto", AccessPattern::Auto),
                ("coalesced", AccessPattern::Coalesced),
                ("adjacent", AccessPattern::Adjacent),
            ],
        )?;
        let units = {
            const ALLOWED: &str = "1, 2, 4 or 8";
            match env_text(UNITS_ENV, ALLOWED)? {
                None => None,
                Some(text) => match text.trim().parse::<u32>() {
                    Ok(n @ (1 | 2 | 4 | 8)) => Some(n),
                    _ => return Err(invalid_env(UNITS_ENV, &text, ALLOWED)),
                },
            }
        };
        let rope_heads = whole_from_env(
            ROPE_HEADS_ENV,
            1..=u64::from(MAX_ROPE_HEAD_GROUP),
            "a whole number of heads from 1 to 16",
        )?
        .map(|n| n as u32);
        let bound_all_loops = env_choice(
            LOOP_BOUNDS_ENV,
            "reviewed or all",
            false,
            &[("reviewed", false), ("all", true)],
        )?;
        let spin_wait = whole_from_env(
            SPIN_WAIT_ENV,
            0..=MAX_SPIN_WAIT.as_micros() as u64,
            "whole microseconds from 0 to 1000000; 0: no polling",
        )?
        .map_or(SPIN_WAIT, std::time::Duration::from_micros);
        Ok(Self {
            memory_budget: bytes_from_env(
                MEMORY_BUDGET_ENV,
                1,
                "a whole number of bytes, at least 1",
            )?,
            access,
            units,
            rope_heads,
            pe_cache_budget: bytes_from_env(
                PE_CACHE_ENV,
                0,
                "a whole number of bytes (0 for none)",
            )?
            .unwrap_or(super::PE_CACHE_BUDGET),
            spin_wait,
            bound_all_loops,
            max_binding_size: super::binding_cap_from_env()?,
            timestamps,
            fault: fault_from_env()?,
            ..Self::default()
        })
    }

    /// At most `bytes` of device memory in posenc's buffers at once (tables, cached PE
    /// rows, scratch, staging): encodes and tables are streamed in chunks that fit, and
    /// what cannot fit is refused with [`Error::Limit`](crate::Error::Limit) naming the
    /// budget. `None`: no budget beyond the adapter's limits.
    #[must_use]
    pub fn memory_budget(mut self, bytes: Option<u64>) -> Self {
        self.memory_budget = bytes;
        self
    }

    /// Caps the storage bindings posenc uses at `bytes` (as `POSENC_MAX_BINDING_SIZE`),
    /// rounded down to whole 4-byte words, at least one.
    #[must_use]
    pub fn max_binding_size(mut self, bytes: Option<u64>) -> Self {
        self.max_binding_size = bytes;
        self
    }

    /// Whether to use GPU timestamp queries for [`Context`](super::Context)'s timings when
    /// the adapter offers them (`TIMESTAMP_QUERY` and `TIMESTAMP_QUERY_INSIDE_ENCODERS`).
    /// Without them, timings are wall-clock times from submission to completion.
    #[must_use]
    pub fn timestamps(mut self, use_them: bool) -> Self {
        self.timestamps = use_them;
        self
    }

    /// Opens the device with `limits` instead of everything the adapter offers, e.g.
    /// `wgpu::Limits::downlevel_defaults()` to run exactly as on the most limited WebGPU
    /// device; posenc then sizes its chunks by these limits. They must be within the
    /// adapter's, or opening fails with [`Error::RequestDevice`](crate::Error::RequestDevice),
    /// and at least what posenc's kernels need ([`limit_floor`](super::limit_floor)), or it
    /// fails with [`Error::Limit`](crate::Error::Limit) naming the first one short.
    #[must_use]
    pub fn limits(mut self, limits: Option<wgpu::Limits>) -> Self {
        self.limits = limits;
        self
    }

    /// How the vec4 encode kernel walks memory; [`AccessPattern::Auto`] (the default)
    /// chooses by the adapter's type. It applies to widths that are a multiple of 4 (the
    /// vec4 kernel); other widths take the general kernel, which has one pattern.
    #[must_use]
    pub fn access_pattern(mut self, access: AccessPattern) -> Self {
        self.access = access;
        self
    }

    pub(crate) fn access(&self) -> AccessPattern {
        self.access
    }

    /// Units of four elements each invocation of the encode kernels (host-array and
    /// recorded) moves per token in the coalesced access pattern: 1, 2, 4 or 8; `None`
    /// keeps posenc's choice ([`crate::shaders::coalesced_units`]). More units per
    /// invocation put more loads in flight per thread and pay each token's record loads
    /// once per more units; fewer give more threads. Other values are ignored.
    ///
    /// It also sets the units (four frequencies of a head row each, eight for 16-bit neox
    /// rows) each invocation of the recorded RoPE kernel rotates in its GPU form
    /// ([`crate::gpu::RopePass`]; `None`: one). More units per invocation compute a token's
    /// cos/sin for more of its heads at once (once per workgroup) and put more loads in
    /// flight per thread.
    #[must_use]
    pub fn units(mut self, units: Option<u32>) -> Self {
        self.units = units.filter(|n| matches!(n, 1 | 2 | 4 | 8));
        self
    }

    pub(crate) fn chosen_units(&self) -> Option<u32> {
        self.units
    }

    /// The recorded RoPE step's head-group form, with `heads` heads per invocation (1 to
    /// [`MAX_ROPE_HEAD_GROUP`]; others are ignored), in place of posenc's choice (`None`):
    /// on GPUs the blocks form, one workgroup per block of a token's units sharing its
    /// cos/sin through workgroup memory; on adapters that run shaders on CPU cores one
    /// invocation per unit of a head row walking all the token's heads.
    ///
    /// In the head-group form each invocation rotates one unit (four or eight frequencies)
    /// of `heads` consecutive head rows of a token (q's heads, then k's): it loads their
    /// words, reads the unit's cos/sin once (from the pass's cache of exact values, else
    /// computed) and keeps them in registers for all of them. It has no workgroup memory
    /// and no barrier, and pays a unit's addressing once per group; more heads put more
    /// loads in flight per thread, fewer give more threads. The bits are the same in every
    /// form. Which is fastest depends on the GPU and the shape: measure it with `posenc
    /// bench` (`POSENC_GPU_ROPE_HEADS`) before choosing it.
    #[must_use]
    pub fn rope_heads(mut self, heads: Option<u32>) -> Self {
        self.rope_heads = heads.filter(|n| (1..=MAX_ROPE_HEAD_GROUP).contains(n));
        self
    }

    pub(crate) fn chosen_rope_heads(&self) -> Option<u32> {
        self.rope_heads
    }

    /// Whether wgpu bounds the loops of every kernel (`true`), or of all but posenc's
    /// kernels whose every loop was read to end (`false`, the default: the recorded RoPE
    /// forms and the vec4 encodes, [`crate::shaders::LOOPS_END_BY_CONSTRUCTION`]).
    ///
    /// On Vulkan, Metal and DX12, wgpu gives each loop a counter that breaks out after
    /// 2^64 iterations, so that a driver may not treat a loop that never ends as
    /// unreachable. It costs instructions and registers in every iteration: in RDNA 2 code,
    /// 12 % of the instructions on the hot path of Llama-3-8B's recorded RoPE
    /// (`benches/isa`). posenc builds the kernels whose loops end by construction without
    /// it; every other check, bounds checks included, stays on. `true` puts it back
    /// everywhere, for measuring the difference with `posenc bench`
    /// (`POSENC_GPU_LOOP_BOUNDS=all`) or for ruling it out when chasing a driver's
    /// miscompilation. The bits are the same either way.
    #[must_use]
    pub fn bound_all_loops(mut self, all: bool) -> Self {
        self.bound_all_loops = all;
        self
    }

    pub(crate) fn bounds_all_loops(&self) -> bool {
        self.bound_all_loops
    }

    /// The most bytes of PE rows of positions `0..n` the context keeps on the device for
    /// the sinusoid encodes and recorded passes (default
    /// [`PE_CACHE_BUDGET`](super::PE_CACHE_BUDGET), 256 MiB: 16384 positions at width
    /// 4096, 8192 at 8192). A call whose positions reach beyond what fits computes its rows
    /// per call, with the same bits but slower (lavapipe, 2026-11-27: a 1 x 8192 x 4096
    /// prefill 424 - 434 ms, 0.07 - 0.12 of a copy, against 99 - 100 ms, 0.49 - 0.55, from
    /// the cache); 0 keeps no cache. The cache also stays within one storage binding and,
    /// under a [memory budget](Options::memory_budget), a quarter of it. It grows in powers
    /// of two up to the largest position a call needs, and
    /// [`Context::clear_pe_cache`](super::Context::clear_pe_cache) drops it.
    ///
    /// The budget bounds each cache, not their sum: a new spec, or a cache grown for a
    /// larger position, replaces the context's cache, and each
    /// [`EncodePass`](super::EncodePass) keeps the rows it was prepared with (and reads)
    /// until it is dropped, so passes of several specs hold a cache each. All of them count
    /// against a memory budget.
    #[must_use]
    pub fn pe_cache_budget(mut self, bytes: u64) -> Self {
        self.pe_cache_budget = bytes;
        self
    }

    pub(crate) fn chosen_pe_cache_budget(&self) -> u64 {
        self.pe_cache_budget
    }

    /// How long a blocking wait for the device (a result read back, a timing, a
    /// [`PendingEncode::wait`](super::PendingEncode::wait)) asks the device whether the
    /// work is done, without sleeping, before it sleeps until it is (default [`SPIN_WAIT`],
    /// 300 us; at most a second is kept; zero: sleep at once). A wait for a result polls on
    /// that result's own readback and returns once it is done, whatever is queued behind
    /// it; polling spends up to this much of one core's time per wait to be woken sooner
    /// than the driver wakes a sleeping thread; between polls it yields the core to any
    /// thread that needs it (a software adapter's workers). On lavapipe (2026-11-27) it took
    /// Mistral-7B's one-token encode into a host array from 191 - 237 to 112 - 137 us,
    /// Llama-3-8B's eight-token one from 237 - 320 to 204 - 261 us and readbacks of 16 and
    /// 128 KiB from 83 - 114 to 42 - 68 us; bert-base's milliseconds moved within the
    /// machine's noise. On the web, where nothing blocks, it does nothing.
    #[must_use]
    pub fn spin_wait(mut self, budget: std::time::Duration) -> Self {
        self.spin_wait = budget.min(MAX_SPIN_WAIT);
        self
    }

    pub(crate) fn chosen_spin_wait(&self) -> std::time::Duration {
        self.spin_wait
    }

    pub(crate) fn required_limits(&self, adapter: &wgpu::Adapter) -> wgpu::Limits {
        self.limits.clone().unwrap_or_else(|| adapter.limits())
    }

    /// The memory budget, if any.
    pub fn budget(&self) -> Option<u64> {
        self.memory_budget
    }

    pub(crate) fn binding_cap(&self) -> Option<u64> {
        self.max_binding_size
    }

    pub(crate) fn wants_timestamps(&self) -> bool {
        self.timestamps
    }

    pub(crate) fn fault(&self) -> Option<Fault> {
        self.fault
    }
}

/// A whole number of bytes, at least `min`, from `var`; `None` when unset.
pub(crate) fn bytes_from_env(
    var: &'static str,
    min: u64,
    allowed: &'static str,
) -> Result<Option<u64>> {
    whole_from_env(var, min..=u64::MAX, allowed)
}

/// A whole number within `range` from `var`; `None` when unset.
fn whole_from_env(
    var: &'static str,
    range: std::ops::RangeInclusive<u64>,
    allowed: &'static str,
) -> Result<Option<u64>> {
    match env_text(var, allowed)? {
        None => Ok(None),
        Some(text) => match text.trim().parse::<u64>() {
            Ok(v) if range.contains(&v) => Ok(Some(v)),
            _ => Err(invalid_env(var, &text, allowed)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_spin_wait_is_kept_up_to_a_second() {
        assert_eq!(Options::default().chosen_spin_wait(), SPIN_WAIT);
        let chosen = |d| Options::default().spin_wait(d).chosen_spin_wait();
        assert_eq!(chosen(Duration::ZERO), Duration::ZERO);
        assert_eq!(chosen(Duration::from_micros(50)), Duration::from_micros(50));
        assert_eq!(chosen(Duration::from_secs(5)), MAX_SPIN_WAIT);
    }
}
