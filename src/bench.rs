//! `posenc bench`: CPU vs GPU encode and table generation, each against a ceiling measured
//! in the same run over the same bytes (a multi-threaded memcpy on the CPU, a vec4 copy
//! shader on the GPU), plus a bit-for-bit agreement check of the two encodes.

use std::time::Instant;

use half::{bf16, f16};
use ndarray::{Array2, Array3};
use rayon::prelude::*;
use serde::Serialize;

use crate::encode::{Dtype, Embeddings, EncodeOptions};
use crate::error::{Error, Result};
use crate::spec::PeSpec;
use crate::{cpu, gpu, positions};

/// Which paths to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Devices {
    /// The CPU path only.
    Cpu,
    /// The GPU path only.
    Gpu,
    /// Both, with the GPU/CPU ratio.
    Both,
}

/// What to measure.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Sequences per batch.
    pub batch: usize,
    /// Tokens per sequence (positions 0..len).
    pub len: usize,
    /// Model dimension.
    pub dim: usize,
    /// Vocabulary rows.
    pub vocab: usize,
    /// Embedding storage type.
    pub dtype: Dtype,
    /// Which paths.
    pub devices: Devices,
    /// Timed rounds; each round times every item once, its ceiling included.
    pub repeats: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            batch: 8,
            len: 1024,
            dim: 1024,
            vocab: 32000,
            dtype: Dtype::F32,
            devices: Devices::Both,
            repeats: 10,
        }
    }
}

/// The adapter a report was measured on.
#[derive(Clone, Debug, Serialize)]
pub struct AdapterInfo {
    /// Adapter name.
    pub name: String,
    /// Backend.
    pub backend: String,
    /// Device type.
    pub device_type: String,
    /// How the GPU items timed on the device (copy ceiling, table) were timed.
    pub timing: gpu::TimingSource,
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
    /// Timed runs per item.
    pub repeats: usize,
    /// Bytes one encode reads and writes: ids, gathered rows, output.
    pub encode_bytes: u64,
    /// Bytes one table generation reads and writes: positions, f32 table.
    pub table_bytes: u64,
}

/// One measured item.
#[derive(Clone, Debug, Serialize)]
pub struct Item {
    /// `cpu_encode`, `gpu_encode`, `cpu_table`, `gpu_table`, `cpu_copy_ceiling`,
    /// `gpu_copy_ceiling`, `gpu_readback`, and `_cold` variants of the encodes.
    pub name: String,
    /// Median seconds per run.
    pub median_s: f64,
    /// Fastest run.
    pub min_s: f64,
    /// Slowest run.
    pub max_s: f64,
    /// Bytes read plus written per run over the median time, in GB/s (1e9 bytes).
    pub gbps: f64,
    /// The same device's copy ceiling, GB/s.
    pub ceiling_gbps: f64,
    /// `gbps / ceiling_gbps`.
    pub ratio: f64,
}

/// A whole bench run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The GPU adapter, if one was used.
    pub adapter: Option<AdapterInfo>,
    /// The sizes.
    pub sizes: Sizes,
    /// Whether the CPU and GPU encodes agree bit for bit (`None` without a GPU).
    pub agree: Option<bool>,
    /// The items, in a fixed order.
    pub results: Vec<Item>,
}

fn stats(name: &str, mut times: Vec<f64>, bytes: u64, ceiling_gbps: f64) -> Item {
    times.sort_by(f64::total_cmp);
    let median_s = times[times.len() / 2];
    let gbps = bytes as f64 / median_s / 1e9;
    let ceiling = if ceiling_gbps > 0.0 { ceiling_gbps } else { gbps };
    Item {
        name: name.to_string(),
        median_s,
        min_s: times[0],
        max_s: times[times.len() - 1],
        gbps,
        ceiling_gbps: ceiling,
        ratio: gbps / ceiling,
    }
}

fn timed(f: impl FnOnce() -> Result<()>) -> Result<f64> {
    let start = Instant::now();
    f()?;
    Ok(start.elapsed().as_secs_f64())
}

/// A deterministic table of `dtype` with values in [-1, 1).
fn make_table(config: &Config) -> TableData {
    let f = |i: usize, j: usize| {
        ((i.wrapping_mul(7919) ^ j.wrapping_mul(104_729)) % 2000) as f32 / 1000.0 - 1.0
    };
    let shape = (config.vocab, config.dim);
    match config.dtype {
        Dtype::F32 => TableData::F32(Array2::from_shape_fn(shape, |(i, j)| f(i, j))),
        Dtype::F16 => TableData::F16(Array2::from_shape_fn(shape, |(i, j)| f16::from_f32(f(i, j)))),
        Dtype::Bf16 => {
            TableData::Bf16(Array2::from_shape_fn(shape, |(i, j)| bf16::from_f32(f(i, j))))
        }
    }
}

enum TableData {
    F32(Array2<f32>),
    F16(Array2<f16>),
    Bf16(Array2<bf16>),
}

impl TableData {
    fn view(&self) -> Embeddings<'_> {
        match self {
            TableData::F32(a) => Embeddings::F32(a.view()),
            TableData::F16(a) => Embeddings::F16(a.view()),
            TableData::Bf16(a) => Embeddings::Bf16(a.view()),
        }
    }
}

/// Multi-threaded memcpy of `src` into `dst`: the CPU ceiling.
fn parallel_copy(dst: &mut [u8], src: &[u8]) {
    const CHUNK: usize = 1 << 20;
    dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| d.copy_from_slice(s));
}

/// Runs the bench. `progress` hears the name of each item before it is measured.
///
/// # Errors
/// [`Error::InvalidParameter`] for sizes the encode refuses (zero sizes, odd dim, ...);
/// [`Error::NoAdapter`] when the GPU is asked for and none opens; GPU errors.
pub fn run(config: &Config, mut progress: impl FnMut(&str)) -> Result<Report> {
    let spec = PeSpec::new(u32::try_from(config.dim).unwrap_or(u32::MAX))?;
    for (field, value) in [
        ("batch", config.batch),
        ("len", config.len),
        ("vocab", config.vocab),
        ("repeats", config.repeats),
    ] {
        if value == 0 {
            return Err(Error::InvalidParameter {
                field,
                value: "0".into(),
                allowed: "at least 1",
            });
        }
    }
    if config.len > u32::MAX as usize || config.vocab > u32::MAX as usize {
        return Err(Error::InvalidParameter {
            field: "len/vocab",
            value: format!("{}/{}", config.len, config.vocab),
            allowed: "at most 4294967295",
        });
    }
    let (batch, len, dim, vocab) = (config.batch, config.len, config.dim, config.vocab);
    let tokens = (batch * len) as u64;
    let out_bytes = tokens * dim as u64 * 4;
    let encode_bytes = tokens * 4 + tokens * (dim * config.dtype.size()) as u64 + out_bytes;
    let table_positions: Vec<u32> = (0..len as u32).collect();
    let table_bytes = len as u64 * 4 + len as u64 * dim as u64 * 4;
    let repeats = config.repeats;
    let use_cpu = config.devices != Devices::Gpu;
    let use_gpu = config.devices != Devices::Cpu;

    progress("building inputs");
    let table = make_table(config);
    let ids =
        Array2::from_shape_fn((batch, len), |(b, t)| ((b * 7919 + t * 104_729) % vocab) as u32);
    let pos = positions::contiguous_batch(batch, len);
    let options = EncodeOptions::default();
    let mut results = Vec::new();

    // The CPU output is computed whatever the devices, for the agreement check.
    let encoder = cpu::Encoder::new(spec);
    let encode_cpu = |out: &mut Array3<f32>| {
        encoder.encode_into(table.view(), ids.view(), pos.view(), &options, out.view_mut())
    };
    let mut cpu_out = Array3::<f32>::zeros((batch, len, dim));
    encode_cpu(&mut cpu_out)?;

    if use_cpu {
        let src = vec![1u8; out_bytes as usize];
        let mut dst = vec![0u8; out_bytes as usize];
        // Every round times each item once, ceiling included, so a drift in the machine's
        // speed (other load, frequency) moves the item and its ceiling together.
        let mut t = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        // Tables are written into one preallocated array, as the GPU writes one buffer.
        let mut pe_table = Array2::<f32>::zeros((len, dim));
        // Warm-up (the encode was warmed by the agreement run above).
        progress("cpu warm-up");
        parallel_copy(&mut dst, &src);
        cpu::table_into(&spec, &table_positions, pe_table.view_mut())?;
        for round in 0..repeats {
            progress(&format!("cpu round {}/{repeats}", round + 1));
            t[0].push(timed(|| {
                parallel_copy(&mut dst, &src);
                Ok(())
            })?);
            t[1].push(timed(|| encode_cpu(&mut cpu_out))?);
            encoder.clear_cache();
            t[2].push(timed(|| encode_cpu(&mut cpu_out))?);
            t[3].push(timed(|| cpu::table_into(&spec, &table_positions, pe_table.view_mut()))?);
        }
        let [copy, warm, cold, tables] = t;
        // Ceilings are GB/s of a copy moving (read + write) the bytes in question.
        let ceiling = stats("cpu_copy_ceiling", copy, 2 * out_bytes, 0.0);
        let c = ceiling.gbps;
        results.push(stats("cpu_encode", warm, encode_bytes, c));
        results.push(stats("cpu_encode_cold", cold, encode_bytes, c));
        results.push(stats("cpu_table", tables, table_bytes, c));
        results.push(ceiling);
    }

    let mut adapter = None;
    let mut agree = None;
    if use_gpu {
        progress("opening the GPU");
        let ctx = gpu::Context::new()?;
        let info = ctx.adapter_info();
        adapter = Some(AdapterInfo {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            timing: ctx.timing_source(),
        });
        progress("uploading the table");
        let uploaded = ctx.upload_table(table.view())?;
        let out = ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("posenc.bench.out"),
            size: out_bytes,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let encode =
            || ctx.encode_into_buffer(&spec, &uploaded, ids.view(), pos.view(), &options, &out);
        progress("gpu warm-up");
        encode()?;
        let mut bytes = ctx.read_buffer(&out)?;
        let gpu_bits = bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        agree = Some(gpu_bits.eq(cpu_out.iter().map(|v| v.to_bits())));
        let time_encode =
            |cold| ctx.time_encode(&spec, &uploaded, ids.view(), pos.view(), &options, &out, cold);
        let mut t = [(); 6].map(|()| Vec::new());
        for round in 0..repeats {
            progress(&format!("gpu round {}/{repeats}", round + 1));
            t[0].extend(ctx.time_copy(out_bytes, 1)?);
            t[1].push(time_encode(false)?);
            t[2].push(time_encode(true)?);
            // The whole call as a caller sees it: checks, sorting, submission and wait.
            t[3].push(timed(encode)?);
            t[4].extend(ctx.time_table(&spec, &table_positions, 1)?);
            t[5].push(timed(|| {
                bytes = ctx.read_buffer(&out)?;
                Ok(())
            })?);
        }
        let [copy, warm, cold, call, tables, readback] = t;
        let ceiling = stats("gpu_copy_ceiling", copy, 2 * out_bytes, 0.0);
        let c = ceiling.gbps;
        results.push(stats("gpu_encode", warm, encode_bytes, c));
        results.push(stats("gpu_encode_cold", cold, encode_bytes, c));
        results.push(stats("gpu_encode_call", call, encode_bytes, c));
        results.push(stats("gpu_table", tables, table_bytes, c));
        results.push(stats("gpu_readback", readback, out_bytes, c));
        results.push(ceiling);
    }
    Ok(Report {
        adapter,
        sizes: Sizes {
            batch,
            len,
            dim,
            vocab,
            dtype: format!("{:?}", config.dtype).to_lowercase(),
            repeats,
            encode_bytes,
            table_bytes,
        },
        agree,
        results,
    })
}

impl Report {
    /// The item named `name`, if measured.
    pub fn item(&self, name: &str) -> Option<&Item> {
        self.results.iter().find(|i| i.name == name)
    }

    /// A readable table: one line per item, then the GPU/CPU ratios.
    pub fn to_table(&self) -> String {
        let s = &self.sizes;
        let mut out = format!(
            "posenc bench: B={} L={} D={} V={} {}, {} runs each; encode moves {:.1} MB, table {:.1} MB\n",
            s.batch,
            s.len,
            s.dim,
            s.vocab,
            s.dtype,
            s.repeats,
            s.encode_bytes as f64 / 1e6,
            s.table_bytes as f64 / 1e6
        );
        if let Some(a) = &self.adapter {
            let timing = match a.timing {
                gpu::TimingSource::DeviceTimestamps => "device timestamps",
                gpu::TimingSource::WallClock => "the wall clock",
            };
            out += &format!(
                "GPU: {} ({}, {}); GPU items timed by {timing} (gpu_encode_call, gpu_readback: the wall clock)\n",
                a.name, a.backend, a.device_type
            );
        }
        out += &format!(
            "{:<18} {:>10} {:>10} {:>10} {:>9} {:>9}\n",
            "item", "median ms", "min ms", "max ms", "GB/s", "% ceiling"
        );
        for i in &self.results {
            out += &format!(
                "{:<18} {:>10.3} {:>10.3} {:>10.3} {:>9.2} {:>8.1}%\n",
                i.name,
                i.median_s * 1e3,
                i.min_s * 1e3,
                i.max_s * 1e3,
                i.gbps,
                100.0 * i.ratio
            );
        }
        for (what, g, c) in
            [("encode", "gpu_encode", "cpu_encode"), ("table", "gpu_table", "cpu_table")]
        {
            if let (Some(g), Some(c)) = (self.item(g), self.item(c)) {
                out += &format!("GPU/CPU speed, {what}: {:.2}x\n", c.median_s / g.median_s);
            }
        }
        if let Some(t) = self.item("cpu_table") {
            let values = (s.len * s.dim) as f64;
            out += &format!("CPU table: {:.2} G values/s\n", values / t.median_s / 1e9);
        }
        match self.agree {
            Some(true) => out += "CPU and GPU encodes agree bit for bit.\n",
            Some(false) => out += "CPU and GPU encodes DIFFER.\n",
            None => {}
        }
        out
    }
}
