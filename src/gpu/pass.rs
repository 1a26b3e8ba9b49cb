//! What the recorded passes share (each operation's pass lives beside its host-array path:
//! `encode/pass.rs`, `rope/pass.rs`, `alibi/pass.rs`): prepared passes
//! ([`EncodePass`](super::EncodePass), [`RopePass`](super::RopePass),
//! [`AlibiPass`](super::AlibiPass)) built once per shape, then recorded each step with the step's
//! buffers into the caller's command encoders or compute passes. Recording checks what the host can
//! know (sizes, usages, alignment) and records commands; it never submits, waits or reads the
//! device.
//!
//! A pass binds the caller's buffers as they are. Their offsets need only be multiples of
//! 4: the binding starts at the offset rounded down to the device's storage alignment and
//! the kernel skips the difference. Uniform parameters are fixed per set of buffers and
//! offsets, written into buffers created with their contents (never through the queue,
//! whose writes land at the next submission and would race with other recordings), and
//! kept with their bind groups for the next step that uses the same buffers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::Context;
use crate::error::{Error, Result};

/// Where a recorded pass finds each token's position.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Positions {
    /// One u32 per token, `[batch, len]` row-major, like the token ids.
    #[default]
    PerToken,
    /// One u32 per sequence, `[batch]`: token `t` of sequence `b` is at `starts[b] + t`
    /// (wrapping past `u32::MAX`), as in a decode step or a prefill after a cached prefix.
    PerSequence,
}

impl Positions {
    /// u32 values a batch of `batch` sequences of `len` tokens reads: none when it has no
    /// tokens (a record of such a step adds nothing, so it reads no sequence's start).
    pub(crate) fn values(self, batch: usize, len: usize) -> usize {
        match self {
            Positions::PerToken => batch * len,
            Positions::PerSequence if len == 0 => 0,
            Positions::PerSequence => batch,
        }
    }
}

/// The greatest common divisor of `a` and `b`.
fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// What one part of a pass whose output exceeds one storage binding holds: rows of
/// `row_bytes` bytes, in a multiple of `multiple` rows (the kernel's row groups, the row
/// slots' alignment), at most `max_rows` of them (an element-count limit).
pub(super) struct PartShape {
    pub(super) row_bytes: u64,
    pub(super) multiple: u64,
    pub(super) max_rows: u64,
    /// What an [`Error::Limit`] names when not even one multiple fits.
    pub(super) what: &'static str,
}

impl Context {
    /// Bytes a storage binding's offset must be a multiple of (at least 4).
    pub(super) fn storage_align(&self) -> u64 {
        u64::from(self.device.limits().min_storage_buffer_offset_alignment).max(4)
    }

    /// Whether `bytes` fit one storage binding from any 4-byte-aligned offset: the binding
    /// starts at the offset rounded down to the storage alignment, up to `align - 4` bytes
    /// before the data.
    pub(super) fn fits_one_binding(&self, bytes: u64) -> bool {
        let align = self.storage_align();
        bytes.next_multiple_of(4) + (align - 4) <= self.max_binding
    }

    /// Rows per part of an output larger than one storage binding: the most that fit one
    /// binding from any offset, in a multiple that keeps every part a whole number of
    /// storage-alignment units from the first (so each sits at the first part's offset
    /// within its binding, and 16-bit parts stay whole words) and of `shape.multiple`.
    ///
    /// # Errors
    /// [`Error::Limit`] naming `shape.what` when not even one such multiple fits.
    pub(super) fn part_rows(&self, op: &'static str, shape: &PartShape) -> Result<u64> {
        let align = self.storage_align();
        let lcm = |a: u64, b: u64| a / gcd(a, b) * b;
        let step = lcm(align / gcd(align, shape.row_bytes), shape.multiple.max(1));
        let fit = (self.max_binding.saturating_sub(align) / shape.row_bytes).min(shape.max_rows);
        let part = fit / step * step;
        if part == 0 {
            return Err(Error::Limit {
                op,
                what: shape.what,
                requested: step * shape.row_bytes + align,
                limit_name: "max storage binding size (bytes)",
                limit: self.max_binding,
            });
        }
        Ok(part)
    }
}

/// A caller's buffer range as a pass binds it: from its offset rounded down to the
/// device's storage-offset alignment, with `base` the range's first 32-bit word within the
/// binding.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Span {
    pub(super) buffer: wgpu::Buffer,
    /// The binding's offset in the buffer.
    pub(super) offset: u64,
    /// The binding's size.
    pub(super) size: u64,
    /// The caller's offset, in words from the binding's start.
    pub(super) base: u32,
}

impl Span {
    /// The caller's offset in the buffer, in bytes.
    pub(super) fn start(&self) -> u64 {
        self.offset + u64::from(self.base) * 4
    }

    pub(super) fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: std::num::NonZeroU64::new(self.size),
        })
    }
}

/// What a pass needs of one buffer argument.
pub(super) struct Need {
    /// The argument's name, as errors give it (`ids`, `positions`, `out`).
    pub(super) name: &'static str,
    /// Bytes the step reads or writes from the slice's start.
    pub(super) bytes: u64,
    /// Usages the buffer must have.
    pub(super) usage: wgpu::BufferUsages,
    /// What the error names as allowed usages.
    pub(super) usage_text: &'static str,
}

impl Context {
    /// Checks `slice` against `need` and returns the range to bind: [`Error::DeviceLost`] once
    /// the device is lost (a record whose bind groups are cached makes none, which would
    /// find it), [`Error::InvalidParameter`] for a missing usage or an offset that is not a
    /// multiple of 4, [`Error::Shape`] for a slice too small, [`Error::Limit`] for a range
    /// larger than one storage binding.
    pub(super) fn span(
        &self,
        op: &'static str,
        slice: wgpu::BufferSlice<'_>,
        need: &Need,
    ) -> Result<Span> {
        if let Some(reason) = self.health.lost() {
            return Err(Error::DeviceLost { op, reason });
        }
        let buffer = slice.buffer();
        if !buffer.usage().contains(need.usage) {
            return Err(Error::InvalidParameter {
                field: need.name,
                value: format!("a buffer with usage {:?}", buffer.usage()),
                allowed: need.usage_text,
            });
        }
        let offset = slice.offset();
        if !offset.is_multiple_of(4) {
            return Err(Error::InvalidParameter {
                field: need.name,
                value: format!("a slice at byte offset {offset}"),
                allowed: "slices starting at a multiple of 4 bytes",
            });
        }
        if slice.size() < need.bytes {
            return Err(Error::Shape {
                op,
                what: need.name,
                expected: format!("a slice of at least {} bytes", need.bytes),
                actual: format!("{} bytes", slice.size()),
            });
        }
        let align = self.storage_align();
        let start = offset - offset % align;
        let size = (offset - start + need.bytes).next_multiple_of(4).max(4);
        if size > self.max_binding {
            return Err(Error::Limit {
                op,
                what: need.name,
                requested: size,
                limit_name: "max storage binding size (bytes)",
                limit: self.max_binding,
            });
        }
        Ok(Span {
            buffer: buffer.clone(),
            offset: start,
            size,
            base: ((offset - start) / 4) as u32,
        })
    }

    /// The ranges to bind of an output of `need.bytes` in `slice`, in parts of at most
    /// `part_bytes` each: [`Error::Shape`] for a slice too small, and each part checked as
    /// [`Context::span`] checks a range (usage, alignment, one binding).
    pub(super) fn part_spans(
        &self,
        op: &'static str,
        slice: wgpu::BufferSlice<'_>,
        need: &Need,
        part_bytes: u64,
    ) -> Result<Vec<Span>> {
        let total = need.bytes;
        if slice.size() < total {
            return Err(Error::Shape {
                op,
                what: need.name,
                expected: format!("a slice of at least {total} bytes"),
                actual: format!("{} bytes", slice.size()),
            });
        }
        let mut spans = Vec::with_capacity(total.div_ceil(part_bytes.max(1)) as usize);
        let mut at = 0;
        while at < total {
            let bytes = part_bytes.min(total - at);
            let start = slice.offset() + at;
            let part = slice.buffer().slice(start..start + bytes);
            spans.push(self.span(op, part, &Need { bytes, ..*need })?);
            at += bytes;
        }
        Ok(spans)
    }

    /// Runs `f`, which creates bind groups and buffers from the caller's handles, inside a
    /// validation scope: a handle wgpu refuses (a destroyed buffer, one of another device)
    /// is [`Error::Gpu`] here rather than an error for the caller's uncaptured-error handler.
    /// Popping the scope does not wait for the device.
    pub(super) fn validated<T>(&self, op: &'static str, f: impl FnOnce() -> T) -> Result<T> {
        if let Some(reason) = self.health.lost() {
            return Err(Error::DeviceLost { op, reason });
        }
        if !super::wait::CAN_BLOCK {
            // On the web a scope's answer needs an `.await`: what the browser refuses goes
            // to the device's uncaptured-error handler, as for the caller's own passes.
            return Ok(f());
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let value = f();
        match pollster::block_on(scope.pop()) {
            None => Ok(value),
            Some(e) => Err(self.lost_or(op, e.to_string())),
        }
    }

    /// What a failure of `op` with `message` is: [`Error::DeviceLost`] if the device turns
    /// out to be lost (a caller's `Device::destroy` makes every later buffer invalid, which
    /// wgpu reports as a validation error of its own), else [`Error::Gpu`].
    pub(super) fn lost_or(&self, op: &'static str, message: String) -> Error {
        let lost = if super::wait::CAN_BLOCK {
            super::faults::confirm_loss(&self.device, &self.health)
        } else {
            self.health.lost()
        };
        match lost {
            Some(reason) => Error::DeviceLost { op, reason },
            None => Error::Gpu { op, message },
        }
    }
}

/// A compute pass of a record's own in `encoder`, labelled `label`.
pub(super) fn begin<'e>(
    encoder: &'e mut wgpu::CommandEncoder,
    label: &'static str,
) -> wgpu::ComputePass<'e> {
    encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some(label),
        timestamp_writes: None,
    })
}

/// The bind groups (and their uniform buffers) a pass made for recent sets of buffers, so
/// a decode loop that records into the same buffers every step makes them once. Holding
/// them keeps the caller's buffers alive until the entry is evicted or the pass dropped.
pub(super) struct BindCache<T> {
    entries: Mutex<VecDeque<(Vec<Span>, Arc<T>)>>,
}

impl<T> Default for BindCache<T> {
    fn default() -> Self {
        Self { entries: Mutex::default() }
    }
}

impl<T> BindCache<T> {
    /// Sets of buffers kept.
    const KEEP: usize = 8;

    /// The entry for `key`, made by `make(&key)` when there is none.
    pub(super) fn get_or_make(
        &self,
        key: Vec<Span>,
        make: impl FnOnce(&[Span]) -> Result<T>,
    ) -> Result<Arc<T>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, value)) = entries.iter().find(|(k, _)| *k == key) {
            return Ok(Arc::clone(value));
        }
        let value = Arc::new(make(&key)?);
        if entries.len() == Self::KEEP {
            entries.pop_front();
        }
        entries.push_back((key, Arc::clone(&value)));
        Ok(value)
    }
}

/// A uniform buffer holding `blocks`, each at a multiple of the device's uniform-offset
/// alignment, with its contents set at creation; and that stride.
pub(super) fn uniform_blocks(
    ctx: &Context,
    op: &'static str,
    label: &'static str,
    blocks: &[&[u8]],
) -> Result<(wgpu::Buffer, u64)> {
    let align = u64::from(ctx.device.limits().min_uniform_buffer_offset_alignment).max(16);
    let stride = blocks.iter().map(|b| b.len() as u64).max().unwrap_or(16).next_multiple_of(align);
    let mut bytes = vec![0u8; (stride * blocks.len().max(1) as u64) as usize];
    for (k, block) in blocks.iter().enumerate() {
        let at = k * stride as usize;
        bytes[at..at + block.len()].copy_from_slice(block);
    }
    let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: bytes.len() as u64,
        usage: wgpu::BufferUsages::UNIFORM,
        mapped_at_creation: true,
    });
    buffer
        .get_mapped_range_mut(..)
        .map_err(|e| ctx.lost_or(op, e.to_string()))?
        .copy_from_slice(&bytes);
    buffer.unmap();
    Ok((buffer, stride))
}
