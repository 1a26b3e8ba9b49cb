//! The decode-loop timing behind `posenc bench --decode`: steps of an [`EncodePass`]
//! recorded back to back, one command buffer each, submitted without waiting between
//! steps, against the same number of trivial dispatches recorded and submitted the same way.

// Without the `timing` feature the helpers the public timing calls are built on go unused.
#![cfg_attr(not(feature = "timing"), allow(dead_code, unused_imports))]

use std::time::Instant;

use super::pass::EncodePass;
use crate::error::{Error, Result};
use crate::gpu::Context;
use crate::gpu::pass::Positions;
use crate::gpu::timing::CopyParams;

/// Wall-clock seconds per step of a decode loop and of its dispatch floor, one figure per
/// repeat: see [`Context::time_decode`].
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeTiming {
    /// Seconds per step of the pass.
    pub step: Vec<f64>,
    /// Seconds per step of the trivial dispatches.
    pub floor: Vec<f64>,
    /// Dispatches per step (the same in both).
    pub dispatches: usize,
}

/// The decode loop's stand-in for a sampler: each sequence's next id from its last (a
/// linear congruential step, below the vocabulary) and its position advanced by one.
const SAMPLER_WGSL: &str = r"
@group(0) @binding(0) var<uniform> shape: vec4<u32>;
@group(0) @binding(1) var<storage, read_write> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> starts: array<u32>;

@compute @workgroup_size(64)
fn advance(@builtin(global_invocation_id) g: vec3<u32>) {
    let b = g.x;
    if b < shape.x {
        ids[b] = (ids[b] * 1664525u + 1013904223u) % shape.y;
        starts[b] = starts[b] + 1u;
    }
}
";

/// The least time the untimed warm-up loops of [`Context::time_decode`] take.
const WARM_UP: std::time::Duration = std::time::Duration::from_millis(300);

impl Context {
    /// Times `steps` decode steps of `pass` (prepared with [`Positions::PerSequence`]): the
    /// ids of every step already on the device (random, below the vocabulary), each
    /// sequence's position advancing by one per step, each step recorded into its own
    /// command encoder and submitted without waiting; the clock stops when the last step
    /// has completed. As in an engine whose sampler writes the next ids in place, the pass
    /// reads the same two buffers every step, and each step first runs a one-workgroup
    /// stand-in for the sampler that draws each sequence's next id (a linear congruential
    /// step of the last one, below the vocabulary) and advances its position, on the
    /// device. Sequence `b` starts at position `64 b` in every loop (below the 4096 PE rows
    /// a pass caches by default, for B <= 32 and up to 2000 steps). Then the floor: the same
    /// stand-in, then as many one-workgroup dispatches of a 16-byte copy as the pass
    /// records, recorded and submitted the same way. Untimed warm-up loops of each (at least
    /// one, for at least 0.3 s)
    /// first; `repeats` timed loops of each, interleaved.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if the pass does not take per-sequence positions or has
    /// `len` other than 1, or `steps` is 0; errors of recording and waiting.
    #[cfg(feature = "timing")]
    pub fn time_decode(
        &self,
        pass: &EncodePass,
        vocab: u32,
        steps: usize,
        repeats: usize,
    ) -> Result<DecodeTiming> {
        let desc = pass.descriptor();
        if desc.positions != Positions::PerSequence || desc.len != 1 || steps == 0 {
            return Err(Error::InvalidParameter {
                field: "decode pass",
                value: format!("{:?} positions, len {}, {steps} steps", desc.positions, desc.len),
                allowed: "per-sequence positions, len 1, at least one step",
            });
        }
        use wgpu::util::DeviceExt;
        let batch = desc.batch;
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let ids: Vec<u32> = (0..batch)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed % u64::from(vocab.max(1))) as u32
            })
            .collect();
        // Sequence b starts at 64 b: below the 4096 cached PE rows for every step of a
        // loop up to B = 32 and 2000 steps; each loop starts from here again.
        let first_starts: Vec<u32> = (0..batch).map(|b| 64 * b as u32).collect();
        let first_ids = ids;
        let init = |label, words: &[u32], usage| {
            self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytemuck::cast_slice(words),
                usage,
            })
        };
        use wgpu::BufferUsages as U;
        let ids = init("posenc.decode.ids", &first_ids, U::STORAGE | U::COPY_DST);
        let starts = init("posenc.decode.starts", &first_starts, U::STORAGE | U::COPY_DST);
        let sampler_params =
            init("posenc.decode.sampler_params", &[batch as u32, vocab, 0, 0], U::UNIFORM);
        let (sampler_layout, sampler) = crate::gpu::build_pipeline(
            &self.device,
            "advance",
            SAMPLER_WGSL,
            &[
                wgpu::BufferBindingType::Uniform,
                wgpu::BufferBindingType::Storage { read_only: false },
                wgpu::BufferBindingType::Storage { read_only: false },
            ],
        );
        let sampler_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("posenc.decode.sampler"),
            layout: &sampler_layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: sampler_params.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: ids.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: starts.as_entire_binding() },
            ],
        });
        let sampler_groups = (batch as u32).div_ceil(64);
        let out = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("posenc.decode.out"),
            size: pass.output_bytes().next_multiple_of(4).max(4),
            usage: U::STORAGE,
            mapped_at_creation: false,
        });
        let dispatches = pass.dispatches();
        // The floor's trivial dispatch: a one-workgroup copy of one vec4.
        let params = CopyParams { n_vecs: 1, groups_x: 1, n_groups: 1, _pad: 0 };
        let floor_kernel = self.copy_kernel(crate::shaders::CopyForm::ONE);
        let params = init(
            "posenc.decode.floor_params",
            bytemuck::cast_slice(bytemuck::bytes_of(&params)),
            U::UNIFORM,
        );
        let src = init("posenc.decode.floor_src", &[1, 2, 3, 4], U::STORAGE);
        let dst = init("posenc.decode.floor_dst", &[0; 4], U::STORAGE);
        let floor_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("posenc.decode.floor"),
            layout: &floor_kernel.layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: src.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: dst.as_entire_binding() },
            ],
        });
        let run_steps = |floor: bool| -> Result<f64> {
            // Every loop covers the same ids and positions.
            self.queue.write_buffer(&ids, 0, bytemuck::cast_slice(&first_ids));
            self.queue.write_buffer(&starts, 0, bytemuck::cast_slice(&first_starts));
            let index = self.queue.submit([]);
            self.wait("time_decode", index)?;
            let start = Instant::now();
            for _ in 0..steps {
                let mut encoder = self.device.create_command_encoder(&Default::default());
                {
                    let mut cpass = encoder.begin_compute_pass(&Default::default());
                    cpass.set_pipeline(&sampler);
                    cpass.set_bind_group(0, &sampler_group, &[]);
                    cpass.dispatch_workgroups(sampler_groups, 1, 1);
                }
                if floor {
                    let mut cpass = encoder.begin_compute_pass(&Default::default());
                    cpass.set_pipeline(&floor_kernel.pipeline);
                    cpass.set_bind_group(0, &floor_group, &[]);
                    for _ in 0..dispatches {
                        cpass.dispatch_workgroups(1, 1, 1);
                    }
                } else {
                    pass.record(&mut encoder, ids.slice(..), starts.slice(..), out.slice(..))?;
                }
                self.queue.submit([encoder.finish()]);
            }
            let index = self.queue.submit([]);
            self.wait("time_decode", index)?;
            Ok(start.elapsed().as_secs_f64() / steps as f64)
        };
        self.scoped("time_decode", || {
            // Untimed warm-up for at least WARM_UP: a GPU raises its clocks over tens of
            // milliseconds, longer than one loop of a thousand 30 µs steps.
            let warm = Instant::now();
            loop {
                run_steps(false)?;
                run_steps(true)?;
                if warm.elapsed() >= WARM_UP {
                    break;
                }
            }
            let (mut step, mut floor) = (Vec::new(), Vec::new());
            for _ in 0..repeats {
                step.push(run_steps(false)?);
                floor.push(run_steps(true)?);
            }
            Ok(DecodeTiming { step, floor, dispatches })
        })
    }
}
