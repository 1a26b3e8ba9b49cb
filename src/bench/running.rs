//! Running `posenc bench`: the inputs built once per run, every item and its ceiling timed
//! in each round ([`run`], [`run_suite`], [`run_op`]), the checkpoint load, the streamed
//! encode.

use std::borrow::Cow;
use std::path::Path;
use std::time::Instant;

use half::{bf16, f16};
use ndarray::{Array2, Array3, ArrayView2};
use rayon::prelude::*;

use crate::encode::{Dtype, Embeddings, EncodeOptions};
use crate::error::{Error, Result};
use crate::spec::PeSpec;
use crate::{cpu, gpu, positions, weights};

use super::{
    AdapterInfo, Config, Devices, Item, Report, STREAM_BATCH_BYTES, STREAM_IN_FLIGHT, Sizes, Suite,
    dtype_name, ops, steps,
};

/// The name of the tensor in a bench checkpoint.
const CHECKPOINT_TENSOR: &str = "embed_tokens.weight";

pub(super) fn timed(f: impl FnOnce() -> Result<()>) -> Result<f64> {
    timed_value(f).map(|(s, ())| s)
}

/// Times `f` and returns its value too, so that dropping a large result stays out of the
/// timing.
fn timed_value<T>(f: impl FnOnce() -> Result<T>) -> Result<(f64, T)> {
    let start = Instant::now();
    let value = f()?;
    Ok((start.elapsed().as_secs_f64(), value))
}

/// A deterministic table of `dtype` with values in [-1, 1), built in parallel (a Llama
/// table has half a billion values).
pub(super) fn make_table(config: &Config) -> TableData {
    fn build<T: Copy + Send + Sync>(
        (vocab, dim): (usize, usize),
        zero: T,
        convert: impl Fn(f32) -> T + Sync,
    ) -> Array2<T> {
        let mut values = vec![zero; vocab * dim];
        values.par_chunks_mut(dim).enumerate().for_each(|(i, row)| {
            for (j, v) in row.iter_mut().enumerate() {
                let k = (i.wrapping_mul(7919) ^ j.wrapping_mul(104_729)) % 2000;
                *v = convert(k as f32 / 1000.0 - 1.0);
            }
        });
        Array2::from_shape_vec((vocab, dim), values).expect("vocab x dim values")
    }
    let shape = (config.vocab, config.dim);
    match config.dtype {
        Dtype::F32 => TableData::F32(build(shape, 0.0, |v| v)),
        Dtype::F16 => TableData::F16(build(shape, f16::ZERO, f16::from_f32)),
        Dtype::Bf16 => TableData::Bf16(build(shape, bf16::ZERO, bf16::from_f32)),
    }
}

pub(super) enum TableData {
    F32(Array2<f32>),
    F16(Array2<f16>),
    Bf16(Array2<bf16>),
}

impl TableData {
    pub(super) fn view(&self) -> Embeddings<'_> {
        match self {
            TableData::F32(a) => Embeddings::F32(a.view()),
            TableData::F16(a) => Embeddings::F16(a.view()),
            TableData::Bf16(a) => Embeddings::Bf16(a.view()),
        }
    }

    /// The values as `.safetensors` stores them: little-endian, row-major.
    fn le_bytes(&self) -> Cow<'_, [u8]> {
        fn bytes<T: bytemuck::Pod>(a: &Array2<T>, le: impl Fn(&T) -> Vec<u8>) -> Cow<'_, [u8]> {
            match a.as_slice() {
                Some(s) if cfg!(target_endian = "little") => Cow::Borrowed(bytemuck::cast_slice(s)),
                _ => Cow::Owned(a.iter().flat_map(le).collect()),
            }
        }
        match self {
            TableData::F32(a) => bytes(a, |v| v.to_le_bytes().to_vec()),
            TableData::F16(a) => bytes(a, |v| v.to_le_bytes().to_vec()),
            TableData::Bf16(a) => bytes(a, |v| v.to_le_bytes().to_vec()),
        }
    }

    /// Whether `loaded` holds exactly these values.
    fn same_as(&self, loaded: &weights::Table) -> bool {
        fn same<T: bytemuck::Pod + PartialEq>(a: &Array2<T>, b: &Array2<T>) -> bool {
            match (a.as_slice(), b.as_slice()) {
                (Some(x), Some(y)) => {
                    bytemuck::cast_slice::<T, u8>(x) == bytemuck::cast_slice::<T, u8>(y)
                }
                _ => a.dim() == b.dim() && a.iter().zip(b).all(|(x, y)| x == y),
            }
        }
        match (self, loaded) {
            (TableData::F32(a), weights::Table::F32(b)) => same(a, b),
            (TableData::F16(a), weights::Table::F16(b)) => same(a, b),
            (TableData::Bf16(a), weights::Table::Bf16(b)) => same(a, b),
            _ => false,
        }
    }

    /// Writes the table as the one tensor of a `.safetensors` file.
    fn write_checkpoint(&self, path: &Path) -> Result<()> {
        use safetensors::tensor::{Dtype as St, TensorView};
        let (vocab, dim, dtype) = match self {
            TableData::F32(a) => (a.nrows(), a.ncols(), St::F32),
            TableData::F16(a) => (a.nrows(), a.ncols(), St::F16),
            TableData::Bf16(a) => (a.nrows(), a.ncols(), St::BF16),
        };
        let io = |e: safetensors::SafeTensorError| Error::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        };
        let bytes = self.le_bytes();
        let view = TensorView::new(dtype, vec![vocab, dim], &bytes).map_err(io)?;
        safetensors::tensor::serialize_to_file([(CHECKPOINT_TENSOR, view)], None, path).map_err(io)
    }
}

/// `len` bytes of `fill` that start on a 4 KiB page (in a buffer a page longer): the copy
/// ceiling's source and destination, so that their offset in a page is the same. A
/// destination 1 - 31 bytes past its source in the page is where glibc's memcpy ran at 5 -
/// 6 GB/s for 4 KiB - 256 KiB on the development machine's AMD EPYC (2026-12-05,
/// `gpu::copy_bytes`), and the ceiling's two buffers, allocated one after the other, were
/// 16 bytes apart: the ceiling of a decode step's encode ran at 6 GB/s.
struct PageBytes {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl PageBytes {
    fn new(len: usize, fill: u8) -> Self {
        const PAGE: usize = 4096;
        let buf = vec![fill; len + PAGE];
        let start = buf.as_ptr().align_offset(PAGE).min(PAGE);
        Self { buf, start, len }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// `cpu_copy_ceiling`: a copy of `len` bytes between two [`PageBytes`] by the fastest
/// [`CpuCopy`] form for them, chosen when it is made (before the timed rounds, which then
/// time it where a copy was always timed).
pub(super) struct CopyCeiling {
    src: PageBytes,
    dst: PageBytes,
    form: CpuCopy,
}

impl CopyCeiling {
    pub(super) fn new(len: usize) -> Self {
        let (src, mut dst) = (PageBytes::new(len, 1), PageBytes::new(len, 0));
        let form = CpuCopy::fastest(dst.bytes_mut(), src.bytes());
        Self { src, dst, form }
    }

    /// The form chosen, for the report.
    pub(super) fn form(&self) -> CpuCopy {
        self.form
    }

    /// One copy by the chosen form, timed.
    pub(super) fn time(&mut self) -> Result<f64> {
        let Self { src, dst, form } = self;
        timed(|| {
            form.run(dst.bytes_mut(), src.bytes());
            Ok(())
        })
    }
}

/// A form of the CPU's copy ceiling, a memcpy of `src` into `dst` (each a [`PageBytes`]).
/// The ceiling is the fastest form for its bytes ([`CpuCopy::fastest`]): a copy across the
/// pool's threads wins large copies, but waking the pool costs microseconds that a copy of
/// a decode step's bytes on the calling thread does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CpuCopy {
    /// `copy_from_slice` on the calling thread.
    Serial,
    /// 1 MiB chunks across rayon's pool.
    Chunks,
    /// One chunk per thread of rayon's pool (whole 4 KiB pages).
    Split,
}

impl CpuCopy {
    const ALL: [Self; 3] = [Self::Serial, Self::Chunks, Self::Split];

    /// The form's name in reports.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Serial => "serial",
            Self::Chunks => "1MiB-chunks",
            Self::Split => "split",
        }
    }

    /// Copies `src` into `dst` (the same length).
    fn run(self, dst: &mut [u8], src: &[u8]) {
        let chunk = match self {
            Self::Serial => {
                dst.copy_from_slice(src);
                return;
            }
            Self::Chunks => 1 << 20,
            Self::Split => src.len().div_ceil(rayon::current_num_threads()).next_multiple_of(4096),
        };
        let chunk = chunk.max(1);
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s));
    }

    /// The fastest form for copying `src` into `dst`: the lowest of `TRIES` copies by each
    /// form, the forms interleaved, after one copy each to warm up. Chosen before the timed
    /// rounds, which then time this form alone where a copy was always timed, so that the
    /// items after it run as they did (timing every form in every round took the CPU
    /// encode at a decode step from 3.8 to 4.4 - 7 us: the state the copies leave behind).
    fn fastest(dst: &mut [u8], src: &[u8]) -> Self {
        const TRIES: usize = 15;
        let mut best = [f64::INFINITY; 3];
        for form in Self::ALL {
            form.run(dst, src);
        }
        for _ in 0..TRIES {
            for (form, b) in Self::ALL.iter().zip(&mut best) {
                let start = Instant::now();
                form.run(dst, src);
                *b = b.min(start.elapsed().as_secs_f64());
            }
        }
        let fastest = (0..best.len()).min_by(|&a, &b| best[a].total_cmp(&best[b]));
        Self::ALL[fastest.unwrap_or(0)]
    }
}

/// The CPU encode's result, kept for the agreement check: one preallocated array of the
/// output type, written by `encode_into` each run.
enum CpuOut {
    F32(Array3<f32>),
    F16(Array3<f16>),
    Bf16(Array3<bf16>),
}

impl CpuOut {
    fn new(config: &Config) -> Self {
        let shape = (config.batch, config.len, config.dim);
        match config.out_dtype {
            Dtype::F32 => CpuOut::F32(Array3::zeros(shape)),
            Dtype::F16 => CpuOut::F16(Array3::from_elem(shape, f16::ZERO)),
            Dtype::Bf16 => CpuOut::Bf16(Array3::from_elem(shape, bf16::ZERO)),
        }
    }

    fn encode(
        &mut self,
        encoder: &cpu::Encoder,
        inputs: &Inputs,
        options: &EncodeOptions,
    ) -> Result<()> {
        let (table, ids, pos) = (inputs.table.view(), inputs.ids.view(), inputs.pos.view());
        match self {
            CpuOut::F32(out) => encoder.encode_into(table, ids, pos, options, out.view_mut()),
            CpuOut::F16(out) => encoder.encode_into(table, ids, pos, options, out.view_mut()),
            CpuOut::Bf16(out) => encoder.encode_into(table, ids, pos, options, out.view_mut()),
        }
    }

    /// Whether `gpu`, the GPU's output buffer (16-bit elements two to a word, low half
    /// first, padded to whole words), holds the same bits.
    fn agrees(&self, gpu: &[u8]) -> bool {
        let words = gpu.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let halves = || gpu.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        let fits = |n: usize, size: usize| n.checked_mul(size).is_some_and(|b| b <= gpu.len());
        match self {
            CpuOut::F32(a) => fits(a.len(), 4) && words.zip(a).all(|(g, c)| g == c.to_bits()),
            CpuOut::F16(a) => fits(a.len(), 2) && halves().zip(a).all(|(g, c)| g == c.to_bits()),
            CpuOut::Bf16(a) => fits(a.len(), 2) && halves().zip(a).all(|(g, c)| g == c.to_bits()),
        }
    }
}

/// The arrays every path encodes.
struct Inputs {
    table: TableData,
    ids: Array2<u32>,
    pos: Array2<u32>,
}

/// Opens the GPU unless only the CPU is wanted.
fn open_gpu(devices: Devices, progress: &mut impl FnMut(&str)) -> Result<Option<gpu::Context>> {
    if devices == Devices::Cpu {
        return Ok(None);
    }
    progress("opening the GPU");
    gpu::Options::from_env().and_then(|o| gpu::Context::new(&o)).map(Some)
}

/// Runs the bench. `progress` hears the name of each step before it starts.
///
/// # Errors
/// Before anything is allocated, what [`Config::check`] refuses; [`Error::NoAdapter`] when
/// the GPU is asked for and none opens; GPU errors; [`Error::Io`] if the checkpoint cannot
/// be written or read; [`Error::Format`] if it loads as another table than was written.
pub fn run(config: &Config, mut progress: impl FnMut(&str)) -> Result<Report> {
    let spec = config.check()?;
    let ctx = open_gpu(config.devices, &mut progress)?;
    run_on(config, &spec, ctx.as_ref(), &mut progress)
}

/// Runs each configuration in turn (usually [`PRESETS`](super::PRESETS) through
/// [`Preset::config`](super::Preset::config)), all on one GPU context. Every configuration is
/// checked before any runs. `progress` hears each step, prefixed with the model's name.
///
/// # Errors
/// As [`run`], for the first configuration that fails.
pub fn run_suite(
    configs: &[Config],
    op_presets: &[ops::OpPreset],
    mut progress: impl FnMut(&str),
) -> Result<Suite> {
    let specs = configs.iter().map(Config::check).collect::<Result<Vec<_>>>()?;
    let first = configs.first().copied().unwrap_or_default();
    steps::check_steps(first.steps)?;
    let wants_gpu = configs.iter().find(|c| c.devices != Devices::Cpu);
    let ctx = match wants_gpu {
        Some(c) => open_gpu(c.devices, &mut progress)?,
        None => None,
    };
    let mut suite = Vec::with_capacity(configs.len());
    for (config, spec) in configs.iter().zip(&specs) {
        let name = config.model.map_or_else(|| config.shape(), str::to_string);
        let ctx = ctx.as_ref().filter(|_| config.devices != Devices::Cpu);
        suite.push(run_on(config, spec, ctx, &mut |step: &str| {
            progress(&format!("{name}: {step}"))
        })?);
        if let Some(ctx) = ctx {
            // The next preset has another dim; its cold figure must not find these rows.
            ctx.clear_pe_cache();
        }
    }
    // The operation presets keep their checkpoints' types: a suite's --dtype is the
    // encode presets' table type.
    let op_config = ops::OpConfig {
        devices: first.devices,
        repeats: first.repeats,
        steps: first.steps,
        dtype: None,
    };
    let mut op_reports = Vec::with_capacity(op_presets.len());
    for &preset in op_presets {
        let name = preset.name();
        op_reports.push(ops::run_op(preset, &op_config, ctx.as_ref(), &mut |step: &str| {
            progress(&format!("{name}: {step}"))
        })?);
        if let Some(ctx) = &ctx {
            ctx.clear_pe_cache();
        }
    }
    let device = match &ctx {
        Some(ctx) if first.devices != Devices::Cpu => {
            progress("the device's copies and dispatches");
            Some(steps::device_report(ctx, first.repeats)?)
        }
        _ => None,
    };
    Ok(Suite { suite, ops: op_reports, device })
}

/// Runs the operation preset `preset` (RoPE, ALiBi or a decode step) as `config` says
/// (its shape is the preset's).
///
/// # Errors
/// As [`run`]; what [`ops::check`] refuses, before a GPU is opened.
pub fn run_op(
    preset: ops::OpPreset,
    config: &ops::OpConfig,
    mut progress: impl FnMut(&str),
) -> Result<ops::OpReport> {
    ops::check(preset, config)?;
    let ctx = open_gpu(config.devices, &mut progress)?;
    ops::run_op(preset, config, ctx.as_ref(), &mut progress)
}

/// [`run`] of a checked configuration, on `ctx` if given.
fn run_on(
    config: &Config,
    spec: &PeSpec,
    ctx: Option<&gpu::Context>,
    progress: &mut dyn FnMut(&str),
) -> Result<Report> {
    let mut bench = Bench::new(config, spec, progress)?;
    let mut results = Vec::new();
    let mut cpu_ceiling_method = None;
    if config.devices != Devices::Gpu {
        let (items, form) = bench.cpu_items(progress)?;
        results.extend(items);
        cpu_ceiling_method = Some(form.name().to_string());
    }
    // Before the GPU's copy of the table exists, so the run never holds everything at once.
    let (load_items, checkpoint_bytes) = if config.load {
        let (items, bytes) = time_load(&bench.inputs.table, config.repeats, progress)?;
        (items, Some(bytes))
    } else {
        (Vec::new(), None)
    };
    let (adapter, agree, ceiling_method, copy_methods) = match ctx {
        Some(ctx) => {
            let found = bench.gpu_findings(ctx, progress)?;
            results.extend(found.items);
            (Some(found.adapter), Some(found.agree), Some(found.ceiling_method), found.copy_methods)
        }
        None => (None, None, None, Vec::new()),
    };
    results.extend(load_items);
    Ok(Report {
        model: config.model.map(str::to_string),
        adapter,
        sizes: Sizes {
            batch: config.batch,
            len: config.len,
            dim: config.dim,
            vocab: config.vocab,
            dtype: dtype_name(config.dtype).to_string(),
            out_dtype: dtype_name(config.out_dtype).to_string(),
            repeats: config.repeats,
            encode_bytes: bench.encode_bytes,
            table_bytes: bench.table_bytes,
            checkpoint_bytes,
        },
        agree,
        ceiling_method,
        copy_methods,
        cpu_ceiling_method,
        results,
    })
}

/// Bytes of the PE rows an encode of `pos` reads from the PE cache: one f32 row of `dim`
/// per distinct position. Each is read once per token that takes it, but a step's repeats
/// come from the GPU's caches, so the bytes that must come from memory are the distinct
/// rows' (at llama3-8b, 2048 rows of 16 KiB: 33.5 MB, more than the table rows it gathers).
fn pe_row_bytes(pos: &Array2<u32>, dim: usize) -> u64 {
    let mut distinct: Vec<u32> = pos.iter().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    distinct.len() as u64 * dim as u64 * 4
}

/// One configuration's run: its inputs, built once, the CPU's result every GPU encode is
/// checked against, and the bytes its items are credited with.
struct Bench<'a> {
    config: &'a Config,
    spec: &'a PeSpec,
    inputs: Inputs,
    options: EncodeOptions,
    encoder: cpu::Encoder,
    /// The CPU's encode, computed whatever the devices, for the agreement check.
    cpu_out: CpuOut,
    /// The positions of the tables timed: `0..len`.
    table_positions: Vec<u32>,
    /// Bytes of the encode's output.
    out_bytes: u64,
    /// Bytes an encode reads and writes: its ids and positions, the table's rows, each
    /// distinct position's PE row once (f32, from the PE cache), and the output.
    encode_bytes: u64,
    /// Bytes a table reads and writes: its positions and its float32 values.
    table_bytes: u64,
}

impl<'a> Bench<'a> {
    /// Builds the inputs and the CPU's encode of them, once the host is known to have the
    /// memory of the whole run.
    fn new(config: &'a Config, spec: &'a PeSpec, progress: &mut dyn FnMut(&str)) -> Result<Self> {
        let (batch, len, dim) = (config.batch, config.len, config.dim);
        let tokens = (batch * len) as u64;
        let values = tokens * dim as u64;
        let out_bytes = values * config.out_dtype.size() as u64;
        let table_positions: Vec<u32> = (0..len as u32).collect();
        let table_bytes = len as u64 * 4 + len as u64 * dim as u64 * 4;
        // Where the memory is not there, one error rather than an abort while building.
        crate::alloc::check_allocation("the bench's host arrays", config.host_bytes())?;

        progress("building inputs");
        let inputs = Inputs {
            table: make_table(config),
            ids: Array2::from_shape_fn((batch, len), |(b, t)| {
                ((b * 7919 + t * 104_729) % config.vocab) as u32
            }),
            pos: positions::contiguous_batch(batch, len)?,
        };
        let encode_bytes = tokens * 8
            + values * config.dtype.size() as u64
            + pe_row_bytes(&inputs.pos, dim)
            + out_bytes;
        let options = EncodeOptions { out_dtype: config.out_dtype, ..EncodeOptions::default() };
        let encoder = cpu::Encoder::new(spec.clone());
        let mut cpu_out = CpuOut::new(config);
        cpu_out.encode(&encoder, &inputs, &options)?;
        Ok(Bench {
            config,
            spec,
            inputs,
            options,
            encoder,
            cpu_out,
            table_positions,
            out_bytes,
            encode_bytes,
            table_bytes,
        })
    }

    /// The CPU's items: the encode (`cpu_encode`, and `cpu_encode_cold` with the encoder's
    /// cache cleared first) and the table (`cpu_table`), against `cpu_copy_ceiling`, the
    /// fastest form of a memcpy of the output's bytes ([`CopyCeiling`], the form returned
    /// with the items), timed in the same rounds.
    fn cpu_items(&mut self, progress: &mut dyn FnMut(&str)) -> Result<(Vec<Item>, CpuCopy)> {
        let (spec, repeats) = (self.spec, self.config.repeats);
        let mut t = [(); 4].map(|()| Vec::with_capacity(repeats));
        // Tables are written into one preallocated array, as the GPU writes one buffer.
        let mut pe_table = Array2::<f32>::zeros((self.config.len, self.config.dim));
        // Warm-up (the encode was warmed by the agreement run in `Bench::new`), and the
        // fastest copy of these bytes.
        progress("cpu warm-up");
        let mut copy = CopyCeiling::new(self.out_bytes as usize);
        cpu::table_into(spec, &self.table_positions, pe_table.view_mut())?;
        for round in 0..repeats {
            progress(&format!("cpu round {}/{repeats}", round + 1));
            t[0].push(copy.time()?);
            t[1].push(timed(|| self.cpu_out.encode(&self.encoder, &self.inputs, &self.options))?);
            self.encoder.clear_cache();
            t[2].push(timed(|| self.cpu_out.encode(&self.encoder, &self.inputs, &self.options))?);
            t[3].push(timed(|| cpu::table_into(spec, &self.table_positions, pe_table.view_mut()))?);
        }
        let [copies, warm, cold, tables] = t;
        // Ceilings are GB/s of a copy moving (read + write) the bytes in question.
        let ceiling = Item::new("cpu_copy_ceiling", copies, 2 * self.out_bytes);
        let items = vec![
            Item::new("cpu_encode", warm, self.encode_bytes).against(&ceiling),
            Item::new("cpu_encode_cold", cold, self.encode_bytes).against(&ceiling),
            Item::new("cpu_table", tables, self.table_bytes).against(&ceiling),
            ceiling,
        ];
        Ok((items, copy.form()))
    }

    /// The GPU's part of the run on `ctx`: the first encodes checked against the CPU's bits,
    /// the search for the fastest copy, the timed rounds, then the recorded pass, whose
    /// result is checked too.
    fn gpu_findings(
        &self,
        ctx: &gpu::Context,
        progress: &mut dyn FnMut(&str),
    ) -> Result<GpuFindings> {
        let adapter = ops::adapter_of(ctx);
        let on_gpu = OnGpu::new(self, ctx, progress)?;
        let (agree, mut streamed) = on_gpu.first_encodes(progress)?;
        progress("warming the GPU up");
        ctx.warm_up(steps::WARM_UP)?;
        progress("searching for the fastest copy");
        // The copy ceilings move the encode's bytes (half read, half written), as much as
        // fits one binding.
        let copy_bytes = ((self.encode_bytes / 2).min(ctx.max_binding_size()) & !15).max(16);
        let search = steps::search_copy(ctx, copy_bytes, steps::SEARCH_REPEATS)?;
        let best = steps::best_shader(&search);
        let mut items = on_gpu.round_items(best, copy_bytes, &mut streamed, progress)?;
        let (recorded_items, bounded_out) = on_gpu.recorded_items(best, copy_bytes, progress)?;
        items.extend(recorded_items);
        let mut agree = agree;
        for out in std::iter::once(&on_gpu.out).chain(&bounded_out) {
            let recorded = ctx.read_buffer(out)?;
            agree = agree && self.cpu_out.agrees(&recorded[..self.out_bytes as usize]);
        }
        Ok(GpuFindings {
            adapter,
            agree,
            ceiling_method: best.name(),
            copy_methods: search.into_iter().map(|(_, f)| f).collect(),
            items,
        })
    }
}

/// What the GPU adds to a [`Report`].
struct GpuFindings {
    adapter: AdapterInfo,
    /// Whether every GPU encode had the CPU's bits.
    agree: bool,
    /// The fastest copy method: the ceilings'.
    ceiling_method: String,
    /// Every copy method, fastest first.
    copy_methods: Vec<steps::CopyFigure>,
    items: Vec<Item>,
}

/// A configuration on the GPU: its table, uploaded once, and the buffer the encodes into a
/// buffer write.
struct OnGpu<'a> {
    bench: &'a Bench<'a>,
    ctx: &'a gpu::Context,
    table: gpu::GpuTable,
    out: wgpu::Buffer,
    ids: ArrayView2<'a, u32>,
    pos: ArrayView2<'a, u32>,
    /// Tokens per batch of the streamed encode.
    stream_batch: usize,
}

impl<'a> OnGpu<'a> {
    fn new(
        bench: &'a Bench<'a>,
        ctx: &'a gpu::Context,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Self> {
        progress("uploading the table");
        let table = ctx.upload_table(bench.inputs.table.view())?;
        let out = ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("posenc.bench.out"),
            size: bench.out_bytes.next_multiple_of(4).max(4),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let (ids, pos) = (bench.inputs.ids.view(), bench.inputs.pos.view());
        let row_bytes = (bench.config.dim * bench.config.out_dtype.size()) as u64;
        let stream_batch = (STREAM_BATCH_BYTES / row_bytes).max(1) as usize;
        Ok(OnGpu { bench, ctx, table, out, ids, pos, stream_batch })
    }

    /// The host's part of the call alone: it returns once the work is submitted.
    fn submit(&self) -> Result<()> {
        let (bench, table, out) = (self.bench, &self.table, &self.out);
        self.ctx.encode_into_buffer(bench.spec, table, self.ids, self.pos, &bench.options, out)
    }

    /// The whole call as a caller sees it: checks, sorting, submission, and the wait for the
    /// device, which the call itself need not do before returning.
    fn call(&self) -> Result<()> {
        self.submit()?;
        wait_for_device(self.ctx)
    }

    /// The encode into `out` timed on the device, `cold` with the PE cache cleared first.
    fn time_encode(&self, cold: bool) -> Result<f64> {
        let (bench, table, out) = (self.bench, &self.table, &self.out);
        self.ctx.time_encode(bench.spec, table, self.ids, self.pos, &bench.options, out, cold)
    }

    /// The encode into a host array.
    fn host_call(&self) -> Result<crate::encode::Encoded> {
        self.ctx.encode(self.bench.spec, &self.table, self.ids, self.pos, &self.bench.options)
    }

    /// The result left mapped, as burn hands it over: a few values read in place.
    fn mapped(&self) -> Result<u32> {
        let (bench, table) = (self.bench, &self.table);
        let pending = self.ctx.encode_submit(bench.spec, table, self.ids, self.pos, &bench.options);
        let mapped = pending?.wait_mapped()?;
        let bytes = mapped.bytes();
        Ok(u32::from(bytes[0]) + u32::from(bytes[bytes.len() - 1]))
    }

    /// The encode as `posenc encode` streams it: batches of `stream_batch` tokens through
    /// [`gpu::Context::encode_submit`], [`STREAM_IN_FLIGHT`] in flight, each result copied
    /// into `host`, in order, as it comes back.
    fn stream(&self, host: &mut [u8]) -> Result<()> {
        let (bench, table) = (self.bench, &self.table);
        let (ids, pos) = (bench.inputs.ids.as_slice(), bench.inputs.pos.as_slice());
        let (ids, pos) = (ids.expect("a new array"), pos.expect("a new array"));
        let mut in_flight = std::collections::VecDeque::with_capacity(STREAM_IN_FLIGHT);
        let (mut next, mut at) = (0, 0);
        loop {
            while in_flight.len() < STREAM_IN_FLIGHT && next < ids.len() {
                let end = (next + self.stream_batch).min(ids.len());
                let row = |v| ArrayView2::from_shape((1, end - next), v).expect("one row");
                let (ids, pos) = (row(&ids[next..end]), row(&pos[next..end]));
                let submitted = self.ctx.encode_submit(bench.spec, table, ids, pos, &bench.options);
                in_flight.push_back(submitted?);
                next = end;
            }
            let Some(pending) = in_flight.pop_front() else { return Ok(()) };
            let mut rest = &mut host[at..];
            let room = rest.len();
            write_encoded(&mut rest, &pending.wait()?);
            at += room - rest.len();
        }
    }

    /// The first encodes, untimed: the call (the warm-up), the streamed encode and the
    /// encode into a host array, each compared with the CPU's bits while all before it
    /// agree. Returns whether they all do, and the host array the streamed encode wrote.
    fn first_encodes(&self, progress: &mut dyn FnMut(&str)) -> Result<(bool, Vec<u8>)> {
        let cpu_out = &self.bench.cpu_out;
        progress("gpu warm-up");
        self.call()?;
        let agree = cpu_out.agrees(&self.ctx.read_buffer(&self.out)?);
        let mut streamed = vec![0u8; self.bench.out_bytes as usize];
        self.stream(&mut streamed)?;
        let agree = agree
            && cpu_out.agrees(&streamed)
            && self.host_call().is_ok_and(|e| {
                let mut bytes = Vec::new();
                write_encoded(&mut bytes, &e);
                cpu_out.agrees(&bytes)
            });
        Ok((agree, streamed))
    }

    /// The timed rounds and their items: the encode as the device runs it (`gpu_encode`,
    /// and `gpu_encode_cold` with the PE cache cleared first) and the table (`gpu_table`,
    /// where it fits one binding) against `gpu_copy_ceiling`, `best`'s copy of `copy_bytes`
    /// on the device; the encode as callers see it (the call, its host part, the encode into
    /// a host array, mapped, streamed) against `gpu_copy_ceiling_call`, the same copy timed
    /// as a call; the readback and the driver's copy. `streamed` takes the streamed encode.
    fn round_items(
        &self,
        best: gpu::CopyMethod,
        copy_bytes: u64,
        streamed: &mut [u8],
        progress: &mut dyn FnMut(&str),
    ) -> Result<Vec<Item>> {
        let (ctx, bench) = (self.ctx, self.bench);
        let (len, dim, repeats) = (bench.config.len, bench.config.dim, bench.config.repeats);
        let table_fits = len as u64 * dim as u64 * 4 <= ctx.max_binding_size();
        let mut t = [(); 12].map(|()| Vec::with_capacity(repeats));
        for round in 0..repeats {
            progress(&format!("gpu round {}/{repeats}", round + 1));
            steps::warm(ctx)?;
            t[0].extend(ctx.time_copy_method(best, copy_bytes, 1)?);
            t[9].extend(ctx.time_copy_method(gpu::CopyMethod::Driver, copy_bytes, 1)?);
            t[1].extend(ctx.time_copy_call(best, copy_bytes, 1)?);
            t[2].push(self.time_encode(false)?);
            t[3].push(self.time_encode(true)?);
            t[4].push(timed(|| self.call())?);
            t[10].push(timed(|| self.submit())?);
            wait_for_device(ctx)?;
            if table_fits {
                t[5].extend(ctx.time_table(bench.spec, &bench.table_positions, 1)?);
            }
            t[6].push(timed_value(|| ctx.read_buffer(&self.out))?.0);
            t[7].push(timed_value(|| self.host_call())?.0);
            t[11].push(timed_value(|| self.mapped())?.0);
            t[8].push(timed(|| self.stream(streamed))?);
        }
        let [
            copy,
            copy_call,
            warm,
            cold,
            calls,
            tables,
            readback,
            host,
            streams,
            driver,
            submits,
            mapped,
        ] = t;
        let encode_bytes = bench.encode_bytes;
        let ceiling = Item::new("gpu_copy_ceiling", copy, 2 * copy_bytes);
        let call_ceiling = Item::new("gpu_copy_ceiling_call", copy_call, 2 * copy_bytes);
        let mut items = vec![
            Item::new("gpu_encode", warm, encode_bytes).against(&ceiling),
            Item::new("gpu_encode_cold", cold, encode_bytes).against(&ceiling),
            Item::new("gpu_encode_call", calls, encode_bytes).against(&call_ceiling),
            Item::time_only("gpu_encode_submit", submits).against(&call_ceiling),
            Item::new("gpu_encode_host", host, encode_bytes).against(&call_ceiling),
            Item::new("gpu_encode_mapped", mapped, encode_bytes).against(&call_ceiling),
            Item::new("gpu_encode_stream", streams, encode_bytes).against(&call_ceiling),
        ];
        if table_fits {
            items.push(Item::new("gpu_table", tables, bench.table_bytes).against(&ceiling));
        }
        items.push(Item::new("gpu_readback", readback, bench.out_bytes).against(&ceiling));
        items.push(Item::new("gpu_copy_driver", driver, 2 * copy_bytes).against(&ceiling));
        items.push(ceiling);
        items.push(call_ceiling);
        Ok(items)
    }

    /// The recorded pass, as an engine runs it: K steps in one compute pass
    /// (`gpu_encode_steps`), against as many of `best`'s copies of `copy_bytes`
    /// (`gpu_copy_steps`) and trivial dispatches (`gpu_dispatch_floor`) recorded the same
    /// way. Its result is left in `out`. Beside it the same pass bounded by the batch's
    /// positions (`max_positions`: every PE row from the cache, no PE code), where the
    /// cache holds them (`gpu_encode_bounded_steps`), its result left in the buffer
    /// returned.
    fn recorded_items(
        &self,
        best: gpu::CopyMethod,
        copy_bytes: u64,
        progress: &mut dyn FnMut(&str),
    ) -> Result<(Vec<Item>, Option<wgpu::Buffer>)> {
        let (ctx, bench) = (self.ctx, self.bench);
        progress("steps: the recorded encode");
        let desc = gpu::EncodePassDescriptor {
            batch: bench.config.batch,
            len: bench.config.len,
            options: bench.options,
            ..gpu::EncodePassDescriptor::default()
        };
        let pass = ctx.encode_pass(bench.spec, &self.table, &desc)?;
        let words = |label, a: &Array2<u32>| {
            use wgpu::util::DeviceExt;
            ctx.device().create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytemuck::cast_slice(a.as_slice().expect("a new array")),
                usage: wgpu::BufferUsages::STORAGE,
            })
        };
        let (ids, pos) = (&bench.inputs.ids, &bench.inputs.pos);
        let (ids_buf, pos_buf) = (words("posenc.bench.ids", ids), words("posenc.bench.pos", pos));
        // A bound the PE cache cannot hold leaves the bounded item out.
        let bound = pos.iter().max().map_or(1, |&p| p.saturating_add(1));
        let bounded_desc = gpu::EncodePassDescriptor { max_positions: Some(bound), ..desc };
        let bounded = match ctx.encode_pass(bench.spec, &self.table, &bounded_desc) {
            Ok(pass) => Some(pass),
            Err(Error::Limit { .. }) => None,
            Err(e) => return Err(e),
        };
        let bounded_out = bounded.as_ref().map(|_| {
            ctx.device().create_buffer(&wgpu::BufferDescriptor {
                label: Some("posenc.bench.bounded_out"),
                size: self.out.size(),
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            })
        });
        let mut record_bounded = |p: &mut wgpu::ComputePass<'_>| match (&bounded, &bounded_out) {
            (Some(pass), Some(out)) => {
                pass.record_in(p, ids_buf.slice(..), pos_buf.slice(..), out.slice(..))
            }
            _ => Ok(()),
        };
        let mut parts = [steps::Part {
            name: "gpu_encode_bounded_steps",
            bytes: bench.encode_bytes,
            record: &mut record_bounded,
        }];
        let k = steps::steps_for(bench.encode_bytes, bench.config.steps);
        let items = steps::steps_items(
            ctx,
            "gpu_encode_steps",
            bench.encode_bytes,
            copy_bytes,
            best,
            k,
            bench.config.repeats,
            &mut |p| pass.record_in(p, ids_buf.slice(..), pos_buf.slice(..), self.out.slice(..)),
            if bounded.is_some() { &mut parts } else { &mut [] },
        )?;
        Ok((items, bounded_out))
    }
}

/// Writes an encode's values to `w` as little-endian bytes, as the GPU's buffer holds
/// them. `w` must take them all (a `Vec`, or a slice with room: the bench sizes both).
fn write_encoded(w: &mut impl std::io::Write, encoded: &crate::encode::Encoded) {
    use crate::encode::Encoded;
    let written = match encoded {
        Encoded::F32(a) => crate::npy::write_data(w, a.as_slice().expect("C order")),
        Encoded::F16(a) => crate::npy::write_data(w, a.as_slice().expect("C order")),
        Encoded::Bf16(a) => crate::npy::write_data(w, a.as_slice().expect("C order")),
    };
    written.expect("room for every value");
}

/// Waits until the device has finished everything submitted, for at most
/// [`gpu::SUBMISSION_TIMEOUT`].
fn wait_for_device(ctx: &gpu::Context) -> Result<()> {
    let wait =
        wgpu::PollType::Wait { submission_index: None, timeout: Some(gpu::SUBMISSION_TIMEOUT) };
    match ctx.device().poll(wait) {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::Gpu { op: "bench", message: format!("waiting for the encode: {e}") }),
    }
}

/// Writes `table` as a one-tensor `.safetensors` file in a fresh temporary directory, then
/// times [`weights::load`] of it (`cpu_load`) against [`std::fs::read`] of it
/// (`cpu_read_ceiling`) in the same rounds, both from a warm page cache. Both are credited
/// with the file's bytes read and written once, so the ratio is the read's time over the
/// load's. The directory is deleted on return, whatever happens. Returns the items and
/// the file's size. While it runs, a signal the CLI catches removes the directory too.
fn time_load(
    table: &TableData,
    repeats: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<Item>, u64)> {
    progress("writing the checkpoint");
    // A Ctrl-C must not leave a checkpoint of up to a few GiB behind, nor its directory (the
    // CLI installs the cleanup).
    let dir = crate::output::ScratchDir::new()?;
    let path = dir.path().join("bench.safetensors");
    let io = |source| Error::Io { path: path.clone(), source };
    table.write_checkpoint(&path)?;
    // Warm the page cache, and check once that the load gives back the table written.
    progress("checkpoint warm-up");
    let bytes = std::fs::read(&path).map_err(io)?.len() as u64;
    if !table.same_as(&weights::load(&path, None)?) {
        return Err(Error::Format {
            path: path.clone(),
            format: ".safetensors",
            reason: "weights::load gave back another table than the bench wrote".into(),
        });
    }
    let mut t = [(); 2].map(|()| Vec::with_capacity(repeats));
    for round in 0..repeats {
        progress(&format!("load round {}/{repeats}", round + 1));
        t[0].push(timed_value(|| std::fs::read(&path).map_err(io))?.0);
        t[1].push(timed_value(|| weights::load(&path, None))?.0);
    }
    let [read, load] = t;
    let ceiling = Item::new("cpu_read_ceiling", read, 2 * bytes);
    let load = Item::new("cpu_load", load, 2 * bytes).against(&ceiling);
    Ok((vec![load, ceiling], bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_result_is_compared_in_its_own_type() {
        let a = ndarray::array![[[1.0f32, -2.0, 3.5]]];
        let mut bytes: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert!(CpuOut::F32(a.clone()).agrees(&bytes));
        bytes[4] ^= 1;
        assert!(!CpuOut::F32(a.clone()).agrees(&bytes));
        assert!(!CpuOut::F32(a.clone()).agrees(&bytes[..8]));

        let h = a.mapv(bf16::from_f32);
        // Three halves padded to two words.
        let mut bytes: Vec<u8> = h.iter().flat_map(|v| v.to_le_bytes()).collect();
        bytes.extend([0, 0]);
        let out = CpuOut::Bf16(h.clone());
        assert!(out.agrees(&bytes));
        assert!(!CpuOut::Bf16(h).agrees(&bytes[..4]));
        bytes[2] ^= 0x80;
        assert!(!out.agrees(&bytes));
    }
}
