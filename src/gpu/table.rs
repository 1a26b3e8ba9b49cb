//! Host wrapper of `shaders/table.wgsl`.

use bytemuck::{Pod, Zeroable};
use ndarray::Array2;

use super::memory::DeviceBuffer;
use super::runner::{Output, Sink, TABLE};
use super::{Context, fold_dispatch};
use crate::error::{Error, Result};
use crate::exact;
use crate::shaders::{FLAG_F32, FLAG_PADDING, FLAG_ZERO_COL, WORKGROUP_SIZE};
use crate::spec::{Frequencies, PeSpec};

/// Mirror of `Params` in `shaders/table.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct TableParams {
    /// Rows times frequencies in this dispatch.
    pub n_pairs: u32,
    /// Frequencies per row.
    pub n_freqs: u32,
    /// Workgroups along x of a dispatch folded into 2-D.
    pub groups_x: u32,
    /// Values per row.
    pub dim: u32,
    /// Frequencies that have a cos column.
    pub n_cos: u32,
    /// Column step between frequencies (2 interleaved, 1 split).
    pub stride: u32,
    /// Column of the first cos.
    pub cos_offset: u32,
    /// The always-zero column (with [`FLAG_ZERO_COL`]).
    pub zero_col: u32,
    /// Added to every position.
    pub start: u32,
    /// The position whose row is all zeros (with [`FLAG_PADDING`]).
    pub padding_idx: u32,
    /// Any of [`FLAG_F32`], [`FLAG_PADDING`], [`FLAG_ZERO_COL`].
    pub flags: u32,
    /// Padding to a multiple of 16 bytes.
    pub _pad: u32,
}

impl TableParams {
    /// The parameters of `spec` for a dispatch of `n_pairs` pairs over `groups_x` columns of
    /// workgroups.
    fn new(spec: &PeSpec, n_pairs: u32, groups_x: u32) -> Self {
        let c = spec.columns();
        let mut flags = 0;
        if spec.frequencies() == Frequencies::F32 {
            flags |= FLAG_F32;
        }
        if spec.padding_idx().is_some() {
            flags |= FLAG_PADDING;
        }
        if c.zero_col.is_some() {
            flags |= FLAG_ZERO_COL;
        }
        Self {
            n_pairs,
            n_freqs: c.n_freqs,
            groups_x,
            dim: spec.dim(),
            n_cos: c.n_cos,
            stride: c.stride,
            cos_offset: c.cos_offset,
            zero_col: c.zero_col.unwrap_or(0),
            start: spec.start_index(),
            padding_idx: spec.padding_idx().unwrap_or(0),
            flags,
            _pad: 0,
        }
    }
}

#[derive(Clone)]
pub(super) struct TableKernel {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
}

impl TableKernel {
    pub(super) fn new(device: &wgpu::Device) -> Self {
        let (layout, pipeline) = super::build_kernel(device, "table");
        Self { layout, pipeline }
    }
}

impl Context {
    /// The positional-encoding table for `positions`, shape `[positions.len(), dim]`,
    /// bit-identical to [`crate::cpu::table()`]. Tables larger than one binding are computed
    /// in row chunks.
    ///
    /// # Errors
    /// [`Error::Limit`] if one row does not fit the binding cap; [`Error::Gpu`] if wgpu
    /// reports an error; on the web [`Error::Blocking`] (use [`Context::table_async`]).
    pub fn table(&self, spec: &PeSpec, positions: &[u32]) -> Result<Array2<f32>> {
        super::wait::blocking("table", "table_async", self.table_async(spec, positions))
    }

    /// [`Context::table`] without blocking the calling thread: the form a web page uses.
    ///
    /// # Errors
    /// As [`Context::table`], less [`Error::Blocking`].
    pub async fn table_async(&self, spec: &PeSpec, positions: &[u32]) -> Result<Array2<f32>> {
        let dim = spec.dim() as usize;
        let shape = [positions.len(), dim];
        let limit = crate::source::MAX_OUTPUT_VALUES;
        crate::source::check_shape("table", "the table", &shape, limit, "MAX_OUTPUT_VALUES")?;
        let row_bytes = dim as u64 * 4;
        if row_bytes > self.max_binding && !positions.is_empty() {
            return Err(Error::Limit {
                op: "table",
                what: "one output row",
                requested: row_bytes,
                limit_name: "max storage binding size (bytes)",
                limit: self.max_binding,
            });
        }
        let values = crate::alloc::try_zeroed_vec("the table", positions.len() * dim)?;
        let mut out = Array2::from_shape_vec((positions.len(), dim), values)
            .expect("the values fill the shape");
        if positions.is_empty() {
            return Ok(out);
        }
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension;
        // Rows per chunk: what one binding holds, and few enough pairs that the 2-D grid
        // and the shader's u32 index never overflow.
        let pair_cap = u64::from(max_groups) * u64::from(max_groups) * u64::from(WORKGROUP_SIZE);
        let pair_cap = pair_cap.min(1 << 31);
        let mut rows_per_chunk = (self.max_binding / row_bytes)
            .min(pair_cap / u64::from(spec.n_freqs()))
            .min(positions.len() as u64) as usize;
        let steps = flat_steps(spec);
        let _exclusive = self.memory.exclusive();
        if let Some(left) = self.budget_left() {
            // Output and staging rows plus a position each, after the params and steps.
            let fixed = size_of::<TableParams>() as u64 + steps.len() as u64 * 4;
            let fit = left.saturating_sub(fixed) / (2 * row_bytes + 4);
            if fit == 0 {
                return Err(Error::Limit {
                    op: "table",
                    what: "one row's buffer space",
                    requested: fixed + 2 * row_bytes + 4,
                    limit_name: "GPU memory budget left (bytes)",
                    limit: left,
                });
            }
            rows_per_chunk = rows_per_chunk.min(usize::try_from(fit).unwrap_or(usize::MAX));
        }
        let flat = out.as_slice_mut().expect("a new array is contiguous");
        self.scoped_async("table", async || {
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(flat);
            let total = bytes.len() as u64;
            let chunk_bytes = rows_per_chunk as u64 * row_bytes;
            let mut output =
                Output::new(self, &TABLE, Sink::Host(bytes), total, chunk_bytes, None)?;
            let buffers = TableBuffers::writing(self, rows_per_chunk, &steps, output.binding())?;
            for ps in positions.chunks(rows_per_chunk) {
                let mut encoder = output.encoder();
                self.record_table(spec, &buffers, ps, &mut encoder);
                output.deliver(encoder, ps.len() as u64 * row_bytes).await?;
            }
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// Uploads `positions` and records the table pass that fills `buffers.out` with their
    /// rows. The uploads land before the encoder's submission runs.
    pub(super) fn record_table(
        &self,
        spec: &PeSpec,
        buffers: &TableBuffers,
        positions: &[u32],
        encoder: &mut wgpu::CommandEncoder,
    ) {
        let n_pairs = positions.len() as u32 * spec.n_freqs();
        let groups = n_pairs.div_ceil(WORKGROUP_SIZE);
        let (gx, gy) =
            fold_dispatch(groups, self.device.limits().max_compute_workgroups_per_dimension);
        let params = TableParams::new(spec, n_pairs, gx);
        self.queue.write_buffer(&buffers.params, 0, bytemuck::bytes_of(&params));
        self.queue.write_buffer(&buffers.positions, 0, bytemuck::cast_slice(positions));
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("posenc.table.pass"),
            timestamp_writes: None,
        });
        pass.set_pipeline(&self.table.pipeline);
        pass.set_bind_group(0, &buffers.bind_group, &[]);
        pass.dispatch_workgroups(gx, gy, 1);
    }
}

/// The frequency words of `spec` the kernel reads (see [`exact::kernel_words`]).
pub(super) fn flat_steps(spec: &PeSpec) -> Vec<u32> {
    exact::kernel_words(spec).to_vec()
}

/// Buffers for one table call, sized for its largest chunk and reused by every chunk: the
/// kernel's inputs, and the rows it writes (`out`) unless they go to a buffer the caller
/// binds ([`TableBuffers::writing`]).
pub(super) struct TableBuffers {
    params: DeviceBuffer,
    positions: DeviceBuffer,
    out: Option<DeviceBuffer>,
    bind_group: wgpu::BindGroup,
    /// Bound in `bind_group`; kept so its bytes stay counted while it is.
    _steps: DeviceBuffer,
}

impl TableBuffers {
    /// Buffers for chunks of `rows` rows of `dim` floats, written into an `out` buffer of
    /// their own (the PE rows an encode reads).
    pub(super) fn new(ctx: &Context, rows: usize, dim: usize, steps: &[u32]) -> Result<Self> {
        use wgpu::BufferUsages as U;
        let out_bytes = (rows * dim * 4) as u64;
        let out = ctx.create_buffer("posenc.table.out", out_bytes, U::STORAGE | U::COPY_SRC)?;
        let mut buffers = Self::writing(ctx, rows, steps, out.as_entire_binding())?;
        buffers.out = Some(out);
        Ok(buffers)
    }

    /// Buffers for chunks of `rows` rows, written to `out` (the runner's output).
    pub(super) fn writing(
        ctx: &Context,
        rows: usize,
        steps: &[u32],
        out: wgpu::BindingResource<'_>,
    ) -> Result<Self> {
        let buffer = |label, size: u64, usage| ctx.create_buffer(label, size, usage);
        use wgpu::BufferUsages as U;
        let params = buffer(
            "posenc.table.params",
            size_of::<TableParams>() as u64,
            U::UNIFORM | U::COPY_DST,
        )?;
        let positions =
            buffer("posenc.table.positions", rows as u64 * 4, U::STORAGE | U::COPY_DST)?;
        let steps_buf =
            buffer("posenc.table.steps", steps.len() as u64 * 4, U::STORAGE | U::COPY_DST)?;
        ctx.queue.write_buffer(&steps_buf, 0, bytemuck::cast_slice(steps));
        let bind_group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("posenc.table.bind_group"),
            layout: &ctx.table.layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: positions.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: steps_buf.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: out },
            ],
        });
        Ok(Self { params, positions, out: None, bind_group, _steps: steps_buf })
    }

    /// The rows' own buffer (made by [`TableBuffers::new`]).
    pub(super) fn out(&self) -> &DeviceBuffer {
        self.out.as_ref().expect("table buffers made with their own output")
    }
}
