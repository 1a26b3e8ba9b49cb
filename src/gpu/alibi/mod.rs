//! Host wrapper of `shaders/alibi.wgsl`: the ALiBi bias tensor on the GPU, bit-identical to
//! [`crate::alibi::bias_cpu`].

mod pass;
pub use pass::AlibiPass;

use bytemuck::{Pod, Zeroable};
use ndarray::Array3;

use super::runner::{ALIBI, Output, Sink};
use super::{Context, fold_dispatch, wait};
use crate::alibi::{AlibiSpec, Form, MAX_VALUES};
use crate::error::{Error, Result};
use crate::shaders::{ALIBI_X4_ROWS, ALIBI_X4_WORKGROUP, WORKGROUP_SIZE};

/// Mirror of `Params` in `shaders/alibi.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct AlibiParams {
    /// Rows (head, query) in this dispatch.
    pub n_rows: u32,
    /// Global index `head * len + query` of the dispatch's first row.
    pub row0: u32,
    /// Keys per row in this dispatch.
    pub n_cols: u32,
    /// Position of the dispatch's first key.
    pub col0: u32,
    /// Queries per head.
    pub len: u32,
    /// Position of query 0.
    pub offset: u32,
    /// 1 for [`Form::Causal`], 0 for [`Form::Symmetric`].
    pub causal: u32,
    /// The head whose slope is bound first.
    pub head0: u32,
    /// Workgroups along x: the stride of the kernel's loop over keys.
    pub groups_x: u32,
    /// Workgroups along y of rows folded into y and z.
    pub groups_y: u32,
    /// Index in the bound output of the dispatch's first value.
    pub out_base: u32,
    /// Rows each workgroup serves: 1 on GPUs, more on adapters that run shaders on CPU cores.
    pub rows_per_group: u32,
}

/// Most workgroups along x. A longer chunk row is covered by the kernel's loop, so a long
/// decoding row keeps each thread busy with several keys instead of launching millions of
/// workgroups.
pub(super) const MAX_GROUPS_X: u32 = 1024;

/// How a dispatch of `rows` rows of `cols` keys is cut. Where the keys are whole vec4s
/// (`aligned`: the keys, the first key and the first value's index all multiples of 4),
/// four keys per thread with one 16-byte store: on GPUs `alibi_flat`, the dispatch's vec4s
/// laid end to end, one per thread, in full workgroups of [`WORKGROUP_SIZE`] (the shape of
/// the fastest copy); on adapters that run shaders on CPU cores `alibi_x4`, blocks of
/// [`ALIBI_X4_ROWS`] rows and up to [`CPU_KEYS_PER_THREAD`] such vec4s per thread and row
/// (fewer workgroups, each a task of their thread pool).
///
/// On GPUs, BLOOM's 32 x 512 x 512 bias in steps: the one-value form 29.3 us on an H100
/// (0.27 of a copy; 32768 workgroups, each thread one 4-byte store after a dependent load of
/// its row's slope), `alibi_x4` 20.1 us there (0.40; docs/measurements/h100-2026-11-27-
/// evening) and 17.7 us on an H200, `alibi_flat` 11.2 us on that H200 (0.60 - 0.61;
/// torch.compile 9.2 - 11.5 us in the same runs; docs/measurements/h200-2026-11-28). The decode
/// step's 32 x 2048 took 2.43 - 2.44 us in the flat form and 2.44 - 2.45 in the one-value
/// form there, where `alibi_x4`'s 8 blocks of 4 rows had taken 3.8 - 3.9 us on the H100:
/// so GPUs take the flat form at every row count.
///
/// Otherwise, on GPUs, one row per workgroup row and a thread per key (the most
/// workgroups); on adapters that run shaders on CPU cores, where each workgroup costs a
/// task of their thread pool, blocks of
/// [`CPU_ROWS_PER_GROUP`] rows and up to [`CPU_KEYS_PER_THREAD`] keys per thread. On
/// lavapipe (2026-11-26) bloom-7b1's 32 x 512 x 512 bias took 45.6 ms with a thread per key
/// and a workgroup per row, 27.8 ms with 4 keys per thread, 25.1 ms with blocks of 16 rows
/// as well; its decode step's 32 x 2048, 0.40 and 0.18 ms a step. (A loop of the short
/// product route alone over the keys within 2^24 of the query, beside loops of the full
/// route, measured slower there: 62 against 45.6 ms.) `alibi_x4` took that bias in steps
/// from 0.15 - 0.19 to 0.26 of the same run's copy there, and the decode step's 32 x 2048
/// from 0.42 to 0.50 - 0.65 (with one vec4 per thread: 0.19, and 0.39 - 0.44 for the
/// decode, a loss; 2026-11-27, docs/measurements/lavapipe-2026-11-27-suite).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct AlibiShape {
    pub(super) groups_x: u32,
    pub(super) rows_per_group: u32,
    pub(super) form: AlibiForm,
}

/// The ALiBi kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AlibiForm {
    /// `alibi`: a value per invocation.
    One = 0,
    /// `alibi_x4`: four keys of each row of a block per invocation.
    X4 = 1,
    /// `alibi_flat`: four keys per invocation, the vec4s laid end to end (GPUs).
    Flat = 2,
}

impl AlibiForm {
    fn name(self) -> &'static str {
        match self {
            AlibiForm::One => "alibi",
            AlibiForm::X4 => "alibi_x4",
            AlibiForm::Flat => "alibi_flat",
        }
    }
}

/// Rows per workgroup on adapters that run shaders on CPU cores.
const CPU_ROWS_PER_GROUP: u32 = 16;

/// Keys per thread on adapters that run shaders on CPU cores.
const CPU_KEYS_PER_THREAD: u64 = 4;

impl AlibiShape {
    pub(super) fn new(cols: u64, coalesced: bool, aligned: bool, max_groups: u32) -> Self {
        let max_x = MAX_GROUPS_X.min(max_groups);
        match (aligned, coalesced) {
            // The grid is all along y and z, set by `fold`.
            (true, true) => Self { groups_x: 1, rows_per_group: 0, form: AlibiForm::Flat },
            (true, false) => {
                let per_group = u64::from(ALIBI_X4_WORKGROUP) * CPU_KEYS_PER_THREAD;
                let groups_x = ((cols / 4).div_ceil(per_group) as u32).clamp(1, max_x);
                Self { groups_x, rows_per_group: ALIBI_X4_ROWS, form: AlibiForm::X4 }
            }
            (false, _) => {
                let keys = if coalesced { 1 } else { CPU_KEYS_PER_THREAD };
                let groups_x =
                    (cols.div_ceil(u64::from(WORKGROUP_SIZE) * keys) as u32).clamp(1, max_x);
                let rows_per_group = if coalesced { 1 } else { CPU_ROWS_PER_GROUP };
                Self { groups_x, rows_per_group, form: AlibiForm::One }
            }
        }
    }

    /// Workgroups along y and z for `rows` rows of `cols` keys.
    pub(super) fn fold(&self, rows: u32, cols: u32, max_groups: u32) -> (u32, u32) {
        if self.form == AlibiForm::Flat {
            // rows * cols < 2^31.
            return fold_dispatch((rows * (cols / 4)).div_ceil(WORKGROUP_SIZE), max_groups);
        }
        fold_dispatch(rows.div_ceil(self.rows_per_group), max_groups)
    }
}

#[derive(Clone)]
pub(super) struct AlibiKernel {
    pub(super) layout: wgpu::BindGroupLayout,
    pub(super) pipeline: wgpu::ComputePipeline,
}

impl AlibiKernel {
    pub(super) fn new(device: &wgpu::Device, form: AlibiForm) -> Self {
        let (layout, pipeline) = super::build_kernel(device, form.name());
        Self { layout, pipeline }
    }
}

impl Context {
    /// The ALiBi kernel of one form, compiled on first use.
    pub(super) fn alibi_kernel(&self, form: AlibiForm) -> &AlibiKernel {
        self.alibi[form as usize].get_or_init(|| AlibiKernel::new(&self.device, form))
    }
}

/// A rectangle of the `[heads * len, kv_len]` bias matrix that one dispatch computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Chunk {
    row0: u64,
    n_rows: u64,
    col0: u64,
    n_cols: u64,
}

/// How the matrix is cut into chunks whose output fits one binding: whole rows when a row
/// fits, else each row in pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    rows: u64,
    cols: u64,
    rows_per: u64,
    cols_per: u64,
}

impl Plan {
    /// `rows` and `cols` are positive; `cap` values fit one binding; a dispatch covers at most
    /// `max_rows` rows.
    fn new(rows: u64, cols: u64, cap: u64, max_rows: u64) -> Self {
        if cols <= cap {
            Self { rows, cols, rows_per: (cap / cols).min(max_rows).min(rows), cols_per: cols }
        } else {
            Self { rows, cols, rows_per: 1, cols_per: cap }
        }
    }

    /// Values in the largest chunk.
    fn max_values(&self) -> u64 {
        self.rows_per * self.cols_per
    }

    /// The chunks in row-major order; each is contiguous in the row-major matrix.
    fn chunks(self) -> impl Iterator<Item = Chunk> {
        let pieces = self.cols.div_ceil(self.cols_per);
        let groups = self.rows.div_ceil(self.rows_per);
        (0..groups * pieces).map(move |k| {
            let (row0, col0) = ((k / pieces) * self.rows_per, (k % pieces) * self.cols_per);
            Chunk {
                row0,
                n_rows: self.rows_per.min(self.rows - row0),
                col0,
                n_cols: self.cols_per.min(self.cols - col0),
            }
        })
    }
}

impl Context {
    /// The ALiBi bias tensor `[heads, len, kv_len]` of `spec`, bit-identical to
    /// [`crate::alibi::bias_cpu`]. Tensors larger than one binding are computed in chunks of
    /// rows, or of pieces of a row.
    ///
    /// ```no_run
    /// let gpu = posenc::gpu::Options::from_env().and_then(|o| posenc::gpu::Context::new(&o))?;
    /// let spec = posenc::alibi::AlibiSpec::new(12, 1024)?;
    /// let bias = gpu.alibi_bias(&spec)?;
    /// assert_eq!(bias.dim(), (12, 1024, 1024));
    /// # Ok::<(), posenc::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Limit`] if the tensor has more than [`MAX_VALUES`] values (before any GPU
    /// work); [`Error::Alloc`] if its host memory cannot be had; [`Error::Gpu`] if wgpu
    /// reports an error; on the web [`Error::Blocking`] (use [`Context::alibi_bias_async`]).
    pub fn alibi_bias(&self, spec: &AlibiSpec) -> Result<Array3<f32>> {
        wait::blocking("alibi_bias", "alibi_bias_async", self.alibi_bias_async(spec))
    }

    /// [`Context::alibi_bias`] without blocking the calling thread.
    ///
    /// # Errors
    /// As [`Context::alibi_bias`], less [`Error::Blocking`].
    pub async fn alibi_bias_async(&self, spec: &AlibiSpec) -> Result<Array3<f32>> {
        spec.check_size()?;
        // Up to 8 GiB within MAX_VALUES (more than a 32-bit target can address): a refusal
        // from the allocator is an error, as in `bias_cpu`, not an abort or a panic.
        let mut out = crate::alloc::try_zeros::<f32, _>("the ALiBi bias", spec.shape())?;
        if !out.is_empty() {
            let flat = out.as_slice_mut().expect("a new array is contiguous");
            crate::alloc::advise_huge_pages(flat);
            self.run_alibi(spec, Sink::Host(bytemuck::cast_slice_mut(flat)), true).await?;
        }
        Ok(out)
    }

    /// Like [`Context::alibi_bias`], but the result stays on the device: a storage buffer of
    /// `heads * len * kv_len` float32 values, row-major (4 bytes for an empty tensor), ready
    /// to bind in a downstream pipeline. Usages: `STORAGE | COPY_SRC | COPY_DST`. The work is
    /// submitted, not waited for (see [`Context::encode_to_buffer`]).
    ///
    /// # Errors
    /// As [`Context::alibi_bias`]; [`Error::Limit`] if the tensor exceeds the device's
    /// largest buffer; on the web [`Error::Blocking`] (use
    /// [`Context::alibi_bias_to_buffer_async`]).
    pub fn alibi_bias_to_buffer(&self, spec: &AlibiSpec) -> Result<wgpu::Buffer> {
        let run = self.alibi_bias_to_buffer_async(spec);
        wait::blocking("alibi_bias_to_buffer", "alibi_bias_to_buffer_async", run)
    }

    /// [`Context::alibi_bias_to_buffer`] without blocking the calling thread (it waits only
    /// for the device's answer to its error scopes, never for the work).
    ///
    /// # Errors
    /// As [`Context::alibi_bias_to_buffer`], less [`Error::Blocking`].
    pub async fn alibi_bias_to_buffer_async(&self, spec: &AlibiSpec) -> Result<wgpu::Buffer> {
        spec.check_size()?;
        let bytes = spec.n_values() as u64 * 4;
        let out = self.result_buffer("alibi_bias_to_buffer", "posenc.alibi.result", bytes)?;
        if bytes > 0 {
            self.run_alibi(spec, Sink::Device { buffer: &out, offset: 0 }, false).await?;
        }
        // The caller's from here: it leaves posenc's accounting when this handle drops.
        Ok(wgpu::Buffer::clone(&out))
    }

    /// `host`: the sink is host memory (a staging buffer per chunk).
    async fn run_alibi(&self, spec: &AlibiSpec, sink: Sink<'_>, host: bool) -> Result<()> {
        let (heads, len, kv_len) = (u64::from(spec.heads()), spec.len(), spec.kv_len());
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension;
        let _exclusive = self.memory.exclusive();
        // Chunk values stay below 2^31, so the kernel's u32 indices never overflow. Under a
        // memory budget each value takes 4 bytes of output scratch (and 4 of staging for a
        // host result), each row at most one slope; the parameters are fixed.
        let mut cap = (self.max_binding / 4).min(MAX_VALUES);
        if let Some(left) = self.budget_left() {
            let per_value = 4 + if host { 4 } else { 0 };
            let fixed = size_of::<AlibiParams>() as u64 + 4 * heads.min(len * heads);
            let fit = left.saturating_sub(fixed) / (per_value + 4);
            if fit == 0 {
                return Err(Error::Limit {
                    op: "alibi",
                    what: "the scratch of one bias value",
                    requested: fixed + per_value + 4,
                    limit_name: "GPU memory budget left (bytes)",
                    limit: left,
                });
            }
            cap = cap.min(fit);
        }
        let plan = Plan::new(heads * len, kv_len, cap, u64::from(max_groups).pow(2));
        let slope_bits: Vec<u32> = spec.slopes().iter().map(|s| s.to_bits()).collect();
        self.scoped_async("alibi", async || {
            use wgpu::BufferUsages as U;
            let take = |label, size: u64, usage| self.pooled(label, size, usage);
            let params_buf = take(
                "posenc.alibi.params",
                size_of::<AlibiParams>() as u64,
                U::UNIFORM | U::COPY_DST,
            )?;
            // A chunk of n rows spans at most n heads: its slopes fit wherever its values do.
            let slopes_buf = take(
                "posenc.alibi.slopes",
                plan.rows_per.min(heads) * 4,
                U::STORAGE | U::COPY_DST,
            )?;
            // The kernels compile before the output's buffers are made: a software adapter
            // compiles in host memory, and llvmpipe (GL) died of SIGSEGV on a failed
            // allocation in its compiler when the buffers had taken the address space
            // under a limit first (round twenty-two of the hostile probes).
            // The output binding starts at a chunk's first value.
            let shape_of = |n_cols: u64, col0: u64| {
                let aligned = n_cols.is_multiple_of(4) && col0.is_multiple_of(4);
                AlibiShape::new(n_cols, self.coalesced, aligned, max_groups)
            };
            for chunk in plan.chunks() {
                self.alibi_kernel(shape_of(chunk.n_cols, chunk.col0).form);
            }
            let total = plan.rows * plan.cols * 4;
            let mut output = Output::new(self, &ALIBI, sink, total, plan.max_values() * 4, None)?;
            // Each form's kernel and bind group, made when a chunk first takes it.
            let mut bound: [Option<(&AlibiKernel, wgpu::BindGroup)>; 3] = [None, None, None];
            // Chunks are row-major runs of the result, in order: each lands where the last
            // ended.
            for chunk in plan.chunks() {
                // Every quantity below is under 2^32: rows * kv_len <= MAX_VALUES, positions
                // and lengths were validated against 2^32 by the spec.
                let head0 = chunk.row0 / len;
                let head_end = (chunk.row0 + chunk.n_rows - 1) / len + 1;
                self.queue.write_buffer(
                    &slopes_buf,
                    0,
                    bytemuck::cast_slice(&slope_bits[head0 as usize..head_end as usize]),
                );
                let shape = shape_of(chunk.n_cols, chunk.col0);
                let (groups_x, rows_per_group) = (shape.groups_x, shape.rows_per_group);
                let (kernel, bind_group) = bound[shape.form as usize].get_or_insert_with(|| {
                    let kernel = self.alibi_kernel(shape.form);
                    let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some("posenc.alibi.bind_group"),
                        layout: &kernel.layout,
                        entries: &[
                            wgpu::BindGroupEntry {
                                binding: 0,
                                resource: params_buf.as_entire_binding(),
                            },
                            wgpu::BindGroupEntry {
                                binding: 1,
                                resource: slopes_buf.as_entire_binding(),
                            },
                            wgpu::BindGroupEntry { binding: 2, resource: output.binding() },
                        ],
                    });
                    (kernel, group)
                });
                let (groups_y, groups_z) =
                    shape.fold(chunk.n_rows as u32, chunk.n_cols as u32, max_groups);
                let params = AlibiParams {
                    n_rows: chunk.n_rows as u32,
                    row0: chunk.row0 as u32,
                    n_cols: chunk.n_cols as u32,
                    col0: chunk.col0 as u32,
                    len: len as u32,
                    offset: spec.offset(),
                    causal: u32::from(spec.form() == Form::Causal),
                    head0: head0 as u32,
                    groups_x,
                    groups_y,
                    rows_per_group,
                    ..AlibiParams::default()
                };
                self.queue.write_buffer(&params_buf, 0, bytemuck::bytes_of(&params));
                let mut encoder = output.encoder();
                {
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some("posenc.alibi.pass"),
                        timestamp_writes: None,
                    });
                    pass.set_pipeline(&kernel.pipeline);
                    pass.set_bind_group(0, &*bind_group, &[]);
                    pass.dispatch_workgroups(groups_x, groups_y, groups_z);
                }
                output.deliver(encoder, chunk.n_rows * chunk.n_cols * 4).await?;
            }
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value of the matrix is in exactly one chunk, chunks are contiguous row-major
    /// runs in order, and none exceeds the cap.
    fn check_plan(rows: u64, cols: u64, cap: u64, max_rows: u64) {
        let plan = Plan::new(rows, cols, cap, max_rows);
        assert!(plan.max_values() <= cap, "{plan:?}");
        let mut next = 0;
        for c in plan.chunks() {
            assert!(c.n_rows * c.n_cols <= cap && c.n_rows <= max_rows, "{c:?}");
            assert!(c.n_rows == 1 || (c.col0 == 0 && c.n_cols == cols), "{c:?}");
            assert_eq!(c.row0 * cols + c.col0, next, "{c:?}");
            next += c.n_rows * c.n_cols;
        }
        assert_eq!(next, rows * cols);
    }

    #[test]
    fn plans_cover_the_matrix_once_within_the_cap() {
        check_plan(1, 1, 1, 1);
        check_plan(96, 1024, 1 << 20, 65535 * 65535);
        check_plan(7, 100, 256, 65535);
        check_plan(70_000, 1, 1 << 29, 65535);
        check_plan(3, 1000, 64, 65535);
        check_plan(5, 256, 256, 2);
        assert_eq!(Plan::new(3, 1000, 64, 10).chunks().count(), 3 * 16);
    }

    /// The GPU form's grid covers every vec4 of a dispatch, folding past the limit along y
    /// (a bias that large is beyond the test adapters' bindings, so it is checked here).
    #[test]
    fn the_flat_grid_covers_every_vec4() {
        for (rows, cols, max) in
            [(1, 4, 65535), (1023, 64, 65535), (1 << 20, 2048, 65535), (77, 12, 5)]
        {
            let shape = AlibiShape::new(cols.into(), true, true, max);
            assert_eq!(shape.form, AlibiForm::Flat);
            let (y, z) = shape.fold(rows, cols, max);
            let vec4s = u64::from(rows) * u64::from(cols / 4);
            let groups = u64::from(y) * u64::from(z);
            assert!(y <= max && z <= max, "{rows} x {cols}: {y} x {z}");
            assert!(groups * u64::from(WORKGROUP_SIZE) >= vec4s, "{rows} x {cols}: {y} x {z}");
            assert!((groups - u64::from(y)) * u64::from(WORKGROUP_SIZE) < vec4s, "{rows} x {cols}");
        }
        assert_eq!(AlibiShape::new(64, false, true, 65535).form, AlibiForm::X4);
        assert_eq!(AlibiShape::new(63, true, false, 65535).form, AlibiForm::One);
    }
}
