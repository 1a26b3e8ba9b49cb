//! How the bench measures GPU work the way engines run it, and the ceilings it is measured
//! against on the same device:
//!
//! - the copy ceiling is the fastest of every copy posenc can record ([`CopyMethod::all`]:
//!   WGSL forms of 1 - 8 vec4s per invocation, 64 or 256 threads, coalesced or adjacent,
//!   grid-stride, and the driver's `copy_buffer_to_buffer`), searched per shape;
//! - steps mode records K steps of an operation into one command buffer, all in one compute
//!   pass, and submits it once: the time per step against K copies of the same bytes recorded
//!   the same way (`gpu_copy_steps`) and against K one-workgroup dispatches in one pass
//!   (`gpu_dispatch_floor`, the least a step can cost);
//! - [`DeviceReport`]: the adapter's large-copy bandwidth (256 MiB) and what a dispatch
//!   costs inside a pass and in a pass of its own.

use serde::Serialize;

use super::{Item, median};
use crate::error::Result;
use crate::gpu::{self, CopyMethod};
use crate::shaders::CopyForm;

/// Bytes one steps-mode measurement aims to move: K steps of an operation move about this
/// much (between [`MIN_STEPS`] and [`MAX_STEPS`] steps), enough to keep a large GPU busy
/// for about half a millisecond per submission and for the timestamps' resolution not to
/// matter.
pub const STEPS_BYTES: u64 = 1 << 30;
/// Fewest steps a steps-mode measurement records.
pub const MIN_STEPS: usize = 8;
/// Most steps a steps-mode measurement records (the decode loops recorded 200).
pub const MAX_STEPS: usize = 200;
/// Bytes of the large copy in [`DeviceReport`].
pub const LARGE_COPY_BYTES: u64 = 256 << 20;
/// Timed runs of each copy method while searching for the fastest.
pub const SEARCH_REPEATS: usize = 3;

/// Steps per steps-mode measurement of an operation moving `bytes` a step: about
/// [`STEPS_BYTES`] in all, within [`MIN_STEPS`]..=[`MAX_STEPS`], unless `wanted` says.
pub fn steps_for(bytes: u64, wanted: Option<usize>) -> usize {
    wanted.unwrap_or_else(|| {
        (STEPS_BYTES / bytes.max(1)).clamp(MIN_STEPS as u64, MAX_STEPS as u64) as usize
    })
}

/// Refuses a steps count outside `1..=`[`MAX_REPEATS`](super::MAX_REPEATS); `None` (the
/// default count) passes.
///
/// # Errors
/// [`crate::Error::InvalidParameter`] (field `steps`).
pub(super) fn check_steps(steps: Option<usize>) -> Result<()> {
    match steps {
        Some(steps) if steps == 0 || steps > super::MAX_REPEATS => {
            Err(crate::Error::InvalidParameter {
                field: "steps",
                value: steps.to_string(),
                allowed: "1..=10000",
            })
        }
        _ => Ok(()),
    }
}

/// One copy method's figure in a search.
#[derive(Clone, Debug, Serialize)]
pub struct CopyFigure {
    /// [`CopyMethod::name`]: a WGSL form (`v4x256c`: 4 vec4s per invocation, 256 threads,
    /// coalesced; `a` adjacent; `g` grid-stride) or `driver`.
    pub method: String,
    /// Median seconds per copy.
    pub median_s: f64,
    /// Bytes read plus written over the median, GB/s.
    pub gbps: f64,
}

/// The copy methods' figures over `bytes` (rounded down to 16), fastest first.
///
/// # Errors
/// GPU errors, or a copy that left a marked vec4 wrong.
pub fn search_copy(
    ctx: &gpu::Context,
    bytes: u64,
    repeats: usize,
) -> Result<Vec<(CopyMethod, CopyFigure)>> {
    let bytes = (bytes & !15).max(16);
    let mut figures = Vec::new();
    for method in CopyMethod::all() {
        if matches!(method, CopyMethod::Shader(_)) && bytes > ctx.max_binding_size() {
            continue;
        }
        let times = ctx.time_copy_method(method, bytes, repeats)?;
        let median_s = median(&times);
        let gbps = 2.0 * bytes as f64 / median_s / 1e9;
        figures.push((method, CopyFigure { method: method.name(), median_s, gbps }));
    }
    figures.sort_by(|a, b| a.1.median_s.total_cmp(&b.1.median_s));
    Ok(figures)
}

/// The fastest WGSL form of a search: the ceiling every GPU item is measured against (the
/// driver's copy is reported beside it, as `gpu_copy_driver`, where a WGSL kernel cannot
/// follow it: on a software adapter it is the CPU's own memcpy).
pub fn best_shader(figures: &[(CopyMethod, CopyFigure)]) -> CopyMethod {
    figures
        .iter()
        .find(|f| matches!(f.0, CopyMethod::Shader(_)))
        .map_or(CopyMethod::Shader(CopyForm::ONE), |f| f.0)
}

/// Recording `steps` steps of a part into a compute pass.
pub type RecordStep<'a> = dyn FnMut(&mut wgpu::ComputePass<'_>) -> Result<()> + 'a;

/// A part of an operation's step timed alone beside it: its item's name, the bytes it reads
/// and writes a step, and how to record one step of it.
pub struct Part<'a> {
    /// The item's name.
    pub name: &'a str,
    /// Bytes the part reads plus writes a step.
    pub bytes: u64,
    /// Records one step of the part.
    pub record: &'a mut RecordStep<'a>,
}

/// The steps-mode items of one operation: `name` (K steps of `record`, one step's
/// dispatches each, in one compute pass) against `gpu_copy_steps` (K copies of
/// `copy_bytes` by `method`, recorded the same way) and `gpu_dispatch_floor`, one round
/// of each at a time; before the copy, each of `parts` timed alone the same way, in the same
/// rounds, against the same copy and floor (a decode step's encode and RoPE: which of them
/// costs the floors a step pays over its copy). `op_bytes` is what a step reads and
/// writes; the copy moves twice `copy_bytes`.
///
/// # Errors
/// What `record` returns, and GPU errors.
#[allow(clippy::too_many_arguments)]
pub fn steps_items(
    ctx: &gpu::Context,
    name: &str,
    op_bytes: u64,
    copy_bytes: u64,
    method: CopyMethod,
    steps: usize,
    repeats: usize,
    record: &mut RecordStep<'_>,
    parts: &mut [Part<'_>],
) -> Result<Vec<Item>> {
    let time_steps = |record: &mut RecordStep<'_>| -> Result<Vec<f64>> {
        let t = ctx.time_recorded(1, |encoder| {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("posenc.bench.steps"),
                timestamp_writes: None,
            });
            for _ in 0..steps {
                record(&mut pass)?;
            }
            Ok(())
        })?;
        Ok(t.into_iter().map(|t| t / steps as f64).collect())
    };
    let (mut op, mut copy, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    let mut part_times = vec![Vec::new(); parts.len()];
    for _ in 0..repeats {
        warm(ctx)?;
        op.extend(time_steps(record)?);
        for (part, times) in parts.iter_mut().zip(&mut part_times) {
            times.extend(time_steps(part.record)?);
        }
        copy.extend(ctx.time_copy_steps(method, copy_bytes, steps, 1)?);
        floor.extend(ctx.time_dispatch_floor(steps, 1, false)?);
    }
    let copy = Item::new("gpu_copy_steps", copy, 2 * copy_bytes).with_steps(steps);
    // The trivial dispatch copies one vec4: 32 bytes read and written.
    let floor = Item::new("gpu_dispatch_floor", floor, 32).with_steps(steps);
    let item = |name: &str, times, bytes| {
        Item::new(name, times, bytes).against(&copy).with_steps(steps).over_floor(&floor)
    };
    let mut items = vec![item(name, op, op_bytes)];
    items.extend(parts.iter().zip(part_times).map(|(p, times)| item(p.name, times, p.bytes)));
    let copy = copy.over_floor(&floor);
    items.extend([copy, floor]);
    Ok(items)
}

/// What the device itself does, measured once per run: the large copy of every method, and
/// a trivial dispatch inside a pass and in a pass of its own.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceReport {
    /// Bytes of the large copy (the WGSL forms' at most one binding: see `shader_bytes`).
    pub large_copy_bytes: u64,
    /// Bytes the WGSL forms copied: [`LARGE_COPY_BYTES`], or the largest binding if smaller.
    pub shader_bytes: u64,
    /// Every method, fastest first.
    pub large_copy: Vec<CopyFigure>,
    /// Seconds per one-workgroup dispatch, [`MAX_STEPS`] of them in one compute pass.
    pub dispatch_in_pass_s: f64,
    /// Seconds per one-workgroup dispatch, each in a compute pass of its own.
    pub dispatch_own_pass_s: f64,
}

/// Measures the [`DeviceReport`] of `ctx`.
///
/// # Errors
/// GPU errors.
pub fn device_report(ctx: &gpu::Context, repeats: usize) -> Result<DeviceReport> {
    let shader_bytes = LARGE_COPY_BYTES.min(ctx.max_binding_size()) & !15;
    let mut large = Vec::new();
    for method in CopyMethod::all() {
        let bytes = match method {
            CopyMethod::Driver => LARGE_COPY_BYTES,
            CopyMethod::Shader(_) => shader_bytes,
        };
        let times = ctx.time_copy_method(method, bytes, repeats)?;
        let median_s = median(&times);
        let gbps = 2.0 * bytes as f64 / median_s / 1e9;
        large.push(CopyFigure { method: method.name(), median_s, gbps });
    }
    large.sort_by(|a, b| b.gbps.total_cmp(&a.gbps));
    let in_pass = median(&ctx.time_dispatch_floor(MAX_STEPS, repeats, false)?);
    let own_pass = median(&ctx.time_dispatch_floor(MAX_STEPS, repeats, true)?);
    Ok(DeviceReport {
        large_copy_bytes: LARGE_COPY_BYTES,
        shader_bytes,
        large_copy: large,
        dispatch_in_pass_s: in_pass,
        dispatch_own_pass_s: own_pass,
    })
}

impl DeviceReport {
    /// A few lines: the large copy's best methods and the dispatch costs.
    pub fn to_table(&self) -> String {
        let mut out = format!(
            "device: a one-workgroup dispatch costs {} us inside a pass, {} us in a pass of its \
                own\n",
            super::significant(self.dispatch_in_pass_s * 1e6),
            super::significant(self.dispatch_own_pass_s * 1e6)
        );
        out += &format!(
            "device: large copy ({} MiB; WGSL forms {} MiB, one binding), GB/s read + written:",
            self.large_copy_bytes >> 20,
            self.shader_bytes >> 20
        );
        for f in self.large_copy.iter().take(6) {
            out += &format!(" {} {:.1};", f.method, f.gbps);
        }
        out.pop();
        out += "\n";
        out
    }
}

/// How long the bench keeps a GPU busy before its first timed item.
pub const WARM_UP: std::time::Duration = std::time::Duration::from_millis(200);

/// How long the bench keeps a GPU busy before each round of timed items.
pub const ROUND_WARM_UP: std::time::Duration = std::time::Duration::from_millis(20);

/// Keeps a GPU (not an adapter that runs shaders on CPU cores, whose clocks do not depend
/// on it) busy for [`ROUND_WARM_UP`] before a round of timed items. Between rounds the
/// bench does host work (host results, readbacks, the CPU items) for up to tens of
/// milliseconds, long enough for a GPU to lower its clocks: on an H100 (2026-11-26) the
/// dispatch floor measured 7.9 us after such a pause and 2.1 us warm, and a 67 MB copy 49
/// against 26 us. Every item of a round, its ceiling included, then runs warm.
///
/// # Errors
/// GPU errors.
pub fn warm(ctx: &gpu::Context) -> Result<()> {
    if ctx.adapter_info().device_type == wgpu::DeviceType::Cpu {
        return Ok(());
    }
    ctx.warm_up(ROUND_WARM_UP)
}
