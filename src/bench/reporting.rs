//! Reporting `posenc bench`: the items against their ceilings ([`Item`]), one run's report
//! and a suite's ([`Report`], [`Suite`]) as JSON or a readable table, and the chart
//! ([`chart`]).

use serde::Serialize;

use crate::error::Result;
use crate::{gpu, plot};

use super::{ops, steps};

/// The adapter a report was measured on.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct AdapterInfo {
    /// Adapter name.
    pub name: String,
    /// Backend.
    pub backend: String,
    /// Device type.
    pub device_type: String,
    /// How the GPU items timed on the device (copy ceiling, encodes, table) were timed.
    pub timing: gpu::TimingSource,
    /// The vec4 encode kernel's access pattern (`coalesced` or `adjacent`; see
    /// [`gpu::AccessPattern`], chosen by the adapter's type or `POSENC_GPU_ACCESS`).
    pub access: String,
    /// Units per invocation of the encode and recorded RoPE kernels, when
    /// `POSENC_GPU_UNITS` chose them and the access pattern is the coalesced one, the only
    /// one they apply to (else posenc's choice; see [`gpu::Options::units`]).
    pub units: Option<u32>,
    /// Heads per invocation of the recorded RoPE step's head-group form, when
    /// `POSENC_GPU_ROPE_HEADS` chose it (else posenc's choice; see
    /// [`gpu::Options::rope_heads`]).
    pub rope_heads: Option<u32>,
    /// Whether wgpu bounded the loops of every kernel (`POSENC_GPU_LOOP_BOUNDS=all`, see
    /// [`gpu::Options::bound_all_loops`]), rather than of all but those read to end.
    pub all_loops_bounded: bool,
    /// How long, in microseconds, a blocking wait polled the device before sleeping
    /// ([`gpu::Options::spin_wait`], `POSENC_GPU_SPIN_US`): it bears on every wall-clock
    /// item of a call (`gpu_encode_call`, `_host`, `_mapped`, `_stream`, `gpu_readback`
    /// and their ceilings), not on times the device measured.
    pub spin_wait_us: u64,
    /// The diagnostics this run asked for, by name (`POSENC_DIAG` in a build with the
    /// `diagnostics` feature, see [`crate::shaders::diagnostics`]): each rewrites the
    /// kernels it names, and only those; empty: posenc's own kernels. Diagnostics give
    /// wrong results.
    pub diagnostics: Vec<String>,
}

impl AdapterInfo {
    /// `name (backend, device type, access pattern access)`, as the tables print it, with
    /// the units, RoPE's head groups, the loops' bounds, the wait's polling and diagnostic
    /// kernels where they are not posenc's defaults.
    pub fn describe(&self) -> String {
        let units = self.units.map_or(String::new(), |n| match n {
            1 => ", 1 unit".to_string(),
            n => format!(", {n} units"),
        });
        let rope_heads = self.rope_heads.map_or(String::new(), |n| match n {
            1 => ", RoPE 1 head per invocation".to_string(),
            n => format!(", RoPE {n} heads per invocation"),
        });
        let loops = if self.all_loops_bounded { ", every loop bounded" } else { "" };
        let spin = if self.spin_wait_us == gpu::SPIN_WAIT.as_micros() as u64 {
            String::new()
        } else {
            format!(", waits poll {} us", self.spin_wait_us)
        };
        let diagnostics = if self.diagnostics.is_empty() {
            String::new()
        } else {
            format!(", DIAGNOSTIC kernels: {}", self.diagnostics.join(", "))
        };
        let (name, backend, kind, access) =
            (&self.name, &self.backend, &self.device_type, &self.access);
        let choices = format!("{units}{rope_heads}{loops}{spin}{diagnostics}");
        format!("{name} ({backend}, {kind}, {access} access{choices})")
    }
}

/// The sizes of a report.
#[derive(Clone, Debug, Serialize)]
pub struct Sizes {
    /// Sequences per batch.
    pub batch: usize,
    /// Tokens per sequence.
    pub len: usize,
    /// Model dimension.
    pub dim: usize,
    /// Vocabulary rows.
    pub vocab: usize,
    /// Embedding storage type.
    pub dtype: String,
    /// Encode output type.
    pub out_dtype: String,
    /// Timed runs per item.
    pub repeats: usize,
    /// Bytes one encode reads and writes: ids and positions, gathered rows, each distinct
    /// position's f32 PE row once, output.
    pub encode_bytes: u64,
    /// Bytes one table generation reads and writes: positions, f32 table.
    pub table_bytes: u64,
    /// Size of the `.safetensors` checkpoint whose load was timed, if one was.
    pub checkpoint_bytes: Option<u64>,
}

/// One measured item, and the ceiling measured in the same rounds that its `ratio` is
/// against ([`Item::ceiling`] names it):
///
/// | item | ceiling |
/// | --- | --- |
/// | `cpu_encode`, `cpu_encode_cold`, `cpu_table` | `cpu_copy_ceiling` (memcpy) |
/// | `gpu_encode`, `gpu_encode_cold`, `gpu_table`, `gpu_readback` | `gpu_copy_ceiling` |
/// | `gpu_encode_call`, `gpu_encode_host`, `gpu_encode_stream` | `gpu_copy_ceiling_call` (wall) |
/// | `cpu_load` | `cpu_read_ceiling` (`std::fs::read`) |
///
/// A ceiling is its own ceiling (ratio 1).
#[derive(Clone, Debug, Serialize)]
pub struct Item {
    /// `cpu_encode`, `cpu_encode_cold`, `cpu_table`, `gpu_encode`, `gpu_encode_cold`,
    /// `gpu_encode_call`, `gpu_encode_host`, `gpu_encode_stream`, `gpu_table`,
    /// `gpu_readback`, `cpu_load`, or a ceiling: `cpu_copy_ceiling`, `gpu_copy_ceiling`,
    /// `gpu_copy_ceiling_call`, `cpu_read_ceiling`.
    ///
    /// `gpu_encode` is the device time of an encode (see [`gpu::TimingSource`]); `gpu_encode_call`
    /// the wall time of a whole `encode_into_buffer` call followed by waiting for the device, as a
    /// caller sees it; `gpu_encode_host` the wall time of one blocking `Context::encode` (result in
    /// host memory); `gpu_encode_stream` the wall time of the same tokens encoded into host memory
    /// as `posenc encode` streams them, in batches of
    /// [`STREAM_BATCH_BYTES`](super::STREAM_BATCH_BYTES) of output through
    /// `Context::encode_submit`, [`STREAM_IN_FLIGHT`](super::STREAM_IN_FLIGHT) in flight, each
    /// copied into one host array as it arrives; `gpu_readback` the wall time of reading the output
    /// back. `gpu_table` is left out when the table of `len` rows does not fit one storage binding.
    /// `cpu_load` is `weights::load` of a one-tensor `.safetensors` file holding the table, from a
    /// warm page cache.
    pub name: String,
    /// The ceiling this item is measured against, by name (see the [module](super) docs);
    /// a ceiling names itself.
    pub ceiling: String,
    /// Median seconds per run.
    pub median_s: f64,
    /// Fastest run.
    pub min_s: f64,
    /// Slowest run.
    pub max_s: f64,
    /// Bytes read plus written per run over the median time, in GB/s (1e9 bytes); not a
    /// number (`null` in JSON) for an item that moves no bytes in its time
    /// (`gpu_encode_submit`).
    pub gbps: f64,
    /// The ceiling's GB/s.
    pub ceiling_gbps: f64,
    /// `gbps / ceiling_gbps`: for an item and its ceiling over the same bytes, the ceiling's
    /// time over the item's.
    pub ratio: f64,
    /// Steps recorded into one command buffer (steps mode): the times are per step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<usize>,
    /// The median over the same run's `gpu_dispatch_floor` (steps mode): how many trivial
    /// dispatches a step costs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_floor: Option<f64>,
}

/// The median of `times` as every table of the bench reports it: the middle run, or for an
/// even count the mean of the two middle runs; NaN for no runs.
pub(crate) fn median(times: &[f64]) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n.is_multiple_of(2) => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        _ => sorted[n / 2],
    }
}

impl Item {
    /// Statistics of `times` over `bytes` per run, as its own ceiling.
    pub(super) fn new(name: &str, mut times: Vec<f64>, bytes: u64) -> Self {
        times.sort_by(f64::total_cmp);
        let at = |i: usize| times.get(i).copied().unwrap_or(f64::NAN);
        let median_s = median(&times);
        let gbps = bytes as f64 / median_s / 1e9;
        Item {
            name: name.to_string(),
            ceiling: name.to_string(),
            median_s,
            min_s: at(0),
            max_s: at(times.len().wrapping_sub(1)),
            gbps,
            ceiling_gbps: gbps,
            ratio: 1.0,
            steps: None,
            per_floor: None,
        }
    }

    /// An item that moves none of the bytes in the time it measures (`gpu_encode_submit`,
    /// the host's part of a call, which returns before the work runs): a time alone, its
    /// GB/s and ratio not numbers (printed `-`, `null` in JSON), whatever ceiling it is
    /// shown beside.
    pub(super) fn time_only(name: &str, times: Vec<f64>) -> Self {
        Item {
            gbps: f64::NAN,
            ceiling_gbps: f64::NAN,
            ratio: f64::NAN,
            ..Item::new(name, times, 0)
        }
    }

    /// The item, timed as `steps` steps recorded into one command buffer.
    pub(super) fn with_steps(self, steps: usize) -> Self {
        Item { steps: Some(steps), ..self }
    }

    /// The item with its median over `floor`'s.
    pub(super) fn over_floor(self, floor: &Item) -> Self {
        Item { per_floor: Some(self.median_s / floor.median_s), ..self }
    }

    /// The item measured against `ceiling`.
    pub(super) fn against(self, ceiling: &Item) -> Self {
        if self.gbps.is_nan() {
            return Item { ceiling: ceiling.name.clone(), ..self };
        }
        Item {
            ceiling: ceiling.name.clone(),
            ceiling_gbps: ceiling.gbps,
            ratio: self.gbps / ceiling.gbps,
            ..self
        }
    }
}

/// A whole bench run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The preset measured, if the shape came from one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The GPU adapter, if one was used.
    pub adapter: Option<AdapterInfo>,
    /// The sizes.
    pub sizes: Sizes,
    /// Whether the CPU and GPU encodes (host-array and recorded) agree bit for bit in the
    /// output type (`None` without a GPU).
    pub agree: Option<bool>,
    /// The copy method of `gpu_copy_ceiling`, `gpu_copy_ceiling_call` and
    /// `gpu_copy_steps`: the fastest in [`Report::copy_methods`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceiling_method: Option<String>,
    /// Every copy method over the ceiling's bytes, fastest first (empty without a GPU).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub copy_methods: Vec<steps::CopyFigure>,
    /// The form of `cpu_copy_ceiling`: the fastest for its bytes of a copy on the calling
    /// thread (`serial`), one in 1 MiB chunks (`1MiB-chunks`) and one chunk per thread
    /// (`split`) across rayon's pool (`None` without the CPU's items).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ceiling_method: Option<String>,
    /// The items, in a fixed order.
    pub results: Vec<Item>,
}

/// Several runs, one per preset: what `posenc bench --suite --json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Suite {
    /// One report per encode preset, in the order run.
    pub suite: Vec<Report>,
    /// One report per operation preset (RoPE, ALiBi, decode steps), in the order run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ops: Vec<ops::OpReport>,
    /// The device's large copy and dispatch costs, when a GPU ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<steps::DeviceReport>,
}

impl Report {
    /// The item named `name`, if measured.
    pub fn item(&self, name: &str) -> Option<&Item> {
        self.results.iter().find(|i| i.name == name)
    }

    /// `BxLxD`, the vocabulary and the types.
    fn shape(&self) -> String {
        let s = &self.sizes;
        let types = if s.dtype == s.out_dtype {
            s.dtype.clone()
        } else {
            format!("{}->{}", s.dtype, s.out_dtype)
        };
        format!("{}x{}x{} V{} {types}", s.batch, s.len, s.dim, s.vocab)
    }

    /// A readable table: one line per item with the ceiling it is measured against, then
    /// the GPU/CPU ratios and the agreement.
    pub fn to_table(&self) -> String {
        let s = &self.sizes;
        let model = self.model.as_ref().map_or_else(String::new, |m| format!("{m}, "));
        let mut out = format!(
            "posenc bench: {model}B={} L={} D={} V={} {} -> {}, {} runs each; encode moves {}, \
                table {}\n",
            s.batch,
            s.len,
            s.dim,
            s.vocab,
            s.dtype,
            s.out_dtype,
            s.repeats,
            size(s.encode_bytes),
            size(s.table_bytes)
        );
        if let Some(bytes) = s.checkpoint_bytes {
            out += &format!("checkpoint: one-tensor .safetensors of {}\n", size(bytes));
        }
        if let Some(a) = &self.adapter {
            out += &format!(
                "GPU: {}; GPU items timed by {} (gpu_encode_call, gpu_encode_host, \
                 gpu_encode_stream, gpu_readback, \
                 gpu_copy_ceiling_call: the wall clock)\n",
                a.describe(),
                timing_name(a.timing)
            );
        }
        out += &items_table(
            &self.results,
            self.ceiling_method.as_deref(),
            self.cpu_ceiling_method.as_deref(),
        );
        for (what, g, c) in
            [("encode", "gpu_encode", "cpu_encode"), ("table", "gpu_table", "cpu_table")]
        {
            if let (Some(g), Some(c)) = (self.item(g), self.item(c)) {
                out +=
                    &format!("GPU/CPU speed, {what}: {}x\n", significant(c.median_s / g.median_s));
            }
        }
        if let Some(t) = self.item("cpu_table") {
            let values = (s.len * s.dim) as f64;
            out += &format!("CPU table: {} G values/s\n", significant(values / t.median_s / 1e9));
        }
        match self.agree {
            Some(true) => {
                out += &format!("CPU and GPU encodes agree bit for bit ({}).\n", s.out_dtype)
            }
            Some(false) => out += &format!("CPU and GPU encodes DIFFER ({}).\n", s.out_dtype),
            None => {}
        }
        out
    }

    /// The report's bars in [`chart`].
    fn bars(&self) -> plot::BenchGroup {
        let gbps = |name| self.item(name).map(|i| i.gbps);
        let s = &self.sizes;
        let shape = format!("{}x{}x{}", s.batch, s.len, s.dim);
        let types = if s.dtype == s.out_dtype {
            s.dtype.clone()
        } else {
            format!("{}->{}", s.dtype, s.out_dtype)
        };
        let (label, detail) = match &self.model {
            Some(model) => (model.clone(), format!("{shape} {types}")),
            None => (shape, format!("V{} {types}", s.vocab)),
        };
        plot::BenchGroup {
            label,
            detail,
            values: [
                gbps("cpu_encode"),
                gbps("cpu_copy_ceiling"),
                gbps("gpu_encode"),
                gbps("gpu_copy_ceiling"),
            ],
        }
    }
}

/// The items' lines, under a header: times, GB/s and % of the ceiling, and for steps-mode
/// items the steps and the multiple of the dispatch floor; then the copy method of the GPU
/// ceilings and of the CPU's, if any.
pub(super) fn items_table(
    items: &[Item],
    ceiling_method: Option<&str>,
    cpu_ceiling_method: Option<&str>,
) -> String {
    // As wide as the longest name (the decode step's bounded parts run past 22).
    let w = items.iter().map(|i| i.name.len()).max().unwrap_or(0).max(22);
    let mut out = format!(
        "{:<w$} {:>10} {:>10} {:>10} {:>9} {:>9} {:>8}  {}\n",
        "item", "median ms", "min ms", "max ms", "GB/s", "% ceiling", "x floor", "ceiling"
    );
    for i in items {
        let ceiling = if i.ceiling == i.name { "" } else { &i.ceiling };
        let floor = i.per_floor.map_or(String::new(), |f| format!("{f:.2}"));
        let steps = i.steps.map_or(String::new(), |k| format!(" ({k} steps in one pass)"));
        let (gbps, ratio) = if i.gbps.is_nan() {
            ("-".to_string(), "-".to_string())
        } else {
            (format!("{:.2}", i.gbps), format!("{:.1}%", 100.0 * i.ratio))
        };
        let line = format!(
            "{:<w$} {:>10} {:>10} {:>10} {gbps:>9} {ratio:>9} {:>8}  {ceiling}{steps}",
            i.name,
            millis(i.median_s),
            millis(i.min_s),
            millis(i.max_s),
            floor
        );
        out += line.trim_end();
        out += "\n";
    }
    if let Some(method) = ceiling_method {
        out += &format!(
            "GPU copy ceilings: {method}, the fastest WGSL copy of every form tried \
             (gpu_copy_driver: the driver's copy_buffer_to_buffer of the same bytes)\n"
        );
    }
    if let Some(method) = cpu_ceiling_method {
        out += &format!(
            "CPU copy ceiling: {method}, the fastest of a memcpy on the calling thread \
             (serial) and across {} threads (1MiB-chunks, split)\n",
            rayon::current_num_threads()
        );
    }
    out
}

/// `x` with three significant digits (at least two decimals), so that small ratios such as
/// a decode step's do not print as 0.00.
pub(super) fn significant(x: f64) -> String {
    with_decimals(x, 2, 12)
}

/// `x` with enough decimals for three significant digits, between `min` and `max` of them
/// (`min` for zero, negatives and non-finite values).
fn with_decimals(x: f64, min: i64, max: i64) -> String {
    let decimals =
        if x > 0.0 && x.is_finite() { (2 - x.log10().floor() as i64).clamp(min, max) } else { min };
    format!("{x:.*}", decimals as usize)
}

pub(super) fn timing_name(timing: gpu::TimingSource) -> &'static str {
    match timing {
        gpu::TimingSource::DeviceTimestamps => "device timestamps",
        gpu::TimingSource::WallClock => "the wall clock",
    }
}

/// `seconds` in milliseconds with at least three significant digits (a decode step's
/// 0.00183 ms rather than 0.002), between three and six decimals.
fn millis(seconds: f64) -> String {
    with_decimals(seconds * 1e3, 3, 6)
}

/// A byte count in kB, MB or GB (decimal), one decimal.
pub(super) fn size(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..1_000_000 => format!("{:.1} kB", b / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", b / 1e6),
        _ => format!("{:.1} GB", b / 1e9),
    }
}

/// The items of the suite table, each with the ceiling its % is of.
const SUITE_COLUMNS: [&str; 4] = ["cpu_encode", "gpu_encode", "gpu_encode_call", "cpu_load"];

impl Suite {
    /// One line per preset (its shape, then each of `cpu_encode`, `gpu_encode`,
    /// `gpu_encode_call` and `cpu_load` as median ms and % of its ceiling, then the
    /// agreement), under 120 columns; `-` for what was not measured.
    pub fn to_table(&self) -> String {
        let repeats = self.suite.first().map_or(0, |r| r.sizes.repeats);
        let mut out = format!(
            "posenc bench --suite, {repeats} runs each: median ms and % of the ceiling measured in \
                the same rounds\n\
             (cpu_encode: cpu_copy_ceiling; gpu_encode: gpu_copy_ceiling; gpu_encode_call, a whole \
             call and the\n\
             wait by the wall clock: gpu_copy_ceiling_call; cpu_load, from a warm page cache: \
             cpu_read_ceiling)\n"
        );
        if let Some(a) = self.suite.iter().find_map(|r| r.adapter.as_ref()) {
            out +=
                &format!("GPU: {}; gpu_encode timed by {}\n", a.describe(), timing_name(a.timing));
        }
        let shape_width = self.suite.iter().map(|r| r.shape().len()).max().unwrap_or(0).max(26);
        out += &format!("{:<17} {:<shape_width$}", "model", "shape");
        for name in SUITE_COLUMNS {
            out += &format!("  {name:>15}");
        }
        out += "  agree\n";
        out += &format!("{:<w$}", "", w = 18 + shape_width);
        for _ in SUITE_COLUMNS {
            out += &format!("  {:>8} {:>6}", "ms", "%");
        }
        out += "\n";
        for r in &self.suite {
            let model = r.model.as_deref().unwrap_or("-");
            out += &format!("{model:<17} {:<shape_width$}", r.shape());
            for name in SUITE_COLUMNS {
                out += &match r.item(name) {
                    Some(i) => format!("  {:>8} {:>5.1}%", millis(i.median_s), 100.0 * i.ratio),
                    None => format!("  {:>8} {:>6}", "-", "-"),
                };
            }
            out += match r.agree {
                Some(true) => "  yes\n",
                Some(false) => "  NO\n",
                None => "  -\n",
            };
        }
        out += &self.steps_table();
        out
    }

    /// The steps-mode lines: each encode preset's recorded encode and each operation
    /// preset's step, as median µs per step, % of the same run's copies recorded the same
    /// way and the multiple of the dispatch floor; one-submission figures beside them.
    fn steps_table(&self) -> String {
        let mut out = String::new();
        // Per row: model, operation, then its steps, one-submission and CPU items.
        type Row<'a> = (String, String, Option<&'a Item>, Option<&'a Item>, Option<&'a Item>);
        let mut rows: Vec<Row<'_>> = Vec::new();
        for r in &self.suite {
            let model = r.model.clone().unwrap_or_else(|| r.shape());
            rows.push((
                model,
                "encode".into(),
                r.item("gpu_encode_steps"),
                r.item("gpu_encode"),
                r.item("cpu_encode"),
            ));
        }
        for o in &self.ops {
            let (steps, one, cpu) =
                (format!("gpu_{}_steps", o.op), format!("gpu_{}", o.op), format!("cpu_{}", o.op));
            rows.push((
                o.model.to_string(),
                o.op.to_string(),
                o.item(&steps),
                o.item(&one),
                o.item(&cpu),
            ));
        }
        if rows.iter().all(|r| r.2.is_none() && r.4.is_none()) {
            return out;
        }
        out += "\nsteps mode: K steps recorded into one compute pass, submitted once; us per step, \
            % of as many \n\
                copies of the same bytes recorded the same way, and x the one-workgroup dispatch \
                floor; \n\
                one submission (gpu) and the CPU beside it, % of their own ceilings\n";
        out += &format!(
            "{:<24} {:<12} {:>10} {:>7} {:>8} {:>5}  {:>10} {:>7}  {:>10} {:>7}\n",
            "model", "op", "step us", "%", "x floor", "K", "gpu us", "%", "cpu us", "%"
        );
        let us = |i: Option<&Item>| i.map_or("-".to_string(), |i| significant(i.median_s * 1e6));
        let pct =
            |i: Option<&Item>| i.map_or("-".to_string(), |i| format!("{:.1}%", 100.0 * i.ratio));
        for (model, op, step, one, cpu) in rows {
            let floor =
                step.and_then(|i| i.per_floor).map_or("-".to_string(), |f| format!("{f:.2}"));
            let k = step.and_then(|i| i.steps).map_or("-".to_string(), |k| k.to_string());
            out += &format!(
                "{model:<24} {op:<12} {:>10} {:>7} {floor:>8} {k:>5}  {:>10} {:>7}  {:>10} {:>7}\n",
                us(step),
                pct(step),
                us(one),
                pct(one),
                us(cpu),
                pct(cpu)
            );
        }
        if let Some(d) = &self.device {
            out += &d.to_table();
        }
        out
    }
}

/// A bar chart of `reports`: per report (one group, labelled with its model or shape),
/// CPU and GPU encode throughput next to their same-run copy ceilings, in GB/s; what a
/// report did not measure has no bar.
///
/// # Errors
/// As [`plot::bench_chart`]: [`Error::Shape`](crate::Error::Shape) for no reports,
/// [`Error::Limit`](crate::Error::Limit) for more than [`plot::MAX_BENCH_GROUPS`].
pub fn chart(reports: &[Report]) -> Result<plot::Image> {
    let groups: Vec<plot::BenchGroup> = reports.iter().map(Report::bars).collect();
    let mut title = "posenc bench: encode throughput and copy ceilings".to_string();
    if let Some(a) = reports.iter().find_map(|r| r.adapter.as_ref()) {
        title += &format!(", GPU {} ({})", a.name, a.backend);
    }
    plot::bench_chart(&groups, &title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(Item::new("x", vec![4.0, 1.0], 8).median_s, 2.5);
        assert_eq!(Item::new("x", vec![3.0, 1.0, 2.0], 8).median_s, 2.0);
        assert_eq!(Item::new("x", vec![4.0, 1.0, 3.0, 2.0], 8).median_s, 2.5);
        assert!(Item::new("x", vec![], 8).median_s.is_nan());
    }

    #[test]
    fn small_times_keep_three_significant_digits() {
        assert_eq!(millis(0.000_001_83), "0.00183");
        assert_eq!(millis(0.000_164), "0.164");
        assert_eq!(millis(0.012_345), "12.345");
        assert_eq!(millis(0.0), "0.000");
        assert_eq!(millis(1e-12), "0.000000");
        assert_eq!(size(163_840), "163.8 kB");
        assert_eq!(size(1_050_700_000), "1.1 GB");
    }

    #[test]
    fn an_item_against_its_ceiling() {
        let ceiling = Item::new("c", vec![2.0, 1.0, 3.0], 4_000_000_000);
        assert_eq!((ceiling.median_s, ceiling.min_s, ceiling.max_s), (2.0, 1.0, 3.0));
        assert_eq!((ceiling.gbps, ceiling.ratio, ceiling.ceiling.as_str()), (2.0, 1.0, "c"));
        let item = Item::new("i", vec![4.0], 4_000_000_000).against(&ceiling);
        assert_eq!((item.gbps, item.ceiling_gbps, item.ratio), (1.0, 2.0, 0.5));
        assert_eq!(item.ceiling, "c");
        // No times: no panic, no figure.
        assert!(Item::new("e", Vec::new(), 1).median_s.is_nan());
    }

    /// An item that moves no bytes in its time prints no GB/s or ratio (it read 8179 % of
    /// its ceiling; round twenty-two) and gives `null` for them in JSON.
    #[test]
    fn a_time_only_item_has_no_bandwidth() {
        let ceiling = Item::new("c", vec![2.0], 4_000_000_000);
        let item = Item::time_only("s", vec![0.5]).against(&ceiling);
        assert_eq!((item.median_s, item.ceiling.as_str()), (0.5, "c"));
        let line = items_table(std::slice::from_ref(&item), None, None)
            .lines()
            .nth(1)
            .unwrap()
            .to_string();
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells, ["s", "500.000", "500.000", "500.000", "-", "-", "c"], "{line}");
        let json = serde_json::to_value(&item).unwrap();
        assert!(json["gbps"].is_null() && json["ratio"].is_null(), "{json}");
    }
}
