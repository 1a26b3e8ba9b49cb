//! The chunked-dispatch runner every GPU operation shares (encode, RoPE, ALiBi): where an
//! operation's result goes (host memory or a device buffer at an offset), the buffer its
//! kernels write, and how each chunk's work is submitted and delivered.
//!
//! An operation too large for one binding runs in chunks. Each chunk is recorded into one
//! command encoder from [`Output::encoder`] and handed to [`Output::deliver`], which copies
//! the chunk's bytes to where they belong and submits: one submission per chunk, so a call
//! that fits one chunk is one submission. A host result is read back at once (the one
//! blocking round trip a host result needs), unless the sink defers it
//! ([`Sink::HostDeferred`]): then the last chunk's readback is left in flight for the caller
//! to wait on ([`Output::into_readback`]); a device result is only submitted. WebGPU
//! orders a queue's operations, so the next chunk's uploads, a later read of the result
//! and a caller's own submissions all see the chunk complete without posenc waiting for it.

use super::pending::{HostResult, Readback};
use super::timing::SpanTimer;
use super::{Context, PooledBuffer};
use crate::error::Result;

/// Where an operation's result goes.
pub(crate) enum Sink<'a> {
    /// Host memory: exactly the result's bytes.
    Host(&'a mut [u8]),
    /// Host memory, as [`Sink::Host`], except that the last chunk's readback is only
    /// started: [`Output::into_readback`] hands it over, to be waited on later. Every
    /// chunk before the last is read back at once.
    /// The result starts unallocated ([`HostResult::deferred`]) and is allocated only when
    /// a chunk before the last is copied into it.
    HostDeferred(&'a mut HostResult),
    /// A device buffer, from byte `offset` (a multiple of 4) on, the result rounded up to
    /// whole words.
    Device { buffer: &'a wgpu::Buffer, offset: u64 },
}

/// The buffer kernels write: the sink itself, or a scratch buffer each chunk is copied out
/// of.
enum Target {
    Direct { buffer: wgpu::Buffer, offset: u64, size: u64 },
    Scratch(PooledBuffer),
}

/// One operation's result, produced chunk by chunk.
pub(crate) struct Output<'a> {
    ctx: &'a Context,
    op: &'static Op,
    sink: Sink<'a>,
    /// Bytes of the whole result.
    total: u64,
    target: Target,
    staging: Option<PooledBuffer>,
    /// Bytes delivered so far.
    done: u64,
    timer: Option<&'a SpanTimer>,
    /// The last chunk's readback, for a [`Sink::HostDeferred`] once it is delivered.
    readback: Option<Readback>,
}

impl<'a> Output<'a> {
    /// A result of `total` bytes, made in chunks of at most `chunk_bytes` (each but the last
    /// a whole number of words). A device sink that one chunk fills is written directly
    /// when it may be bound (`STORAGE` usage, an aligned offset, within the binding cap);
    /// otherwise chunks go through a pooled scratch buffer (`STORAGE | COPY_SRC |
    /// COPY_DST`, so an operation may also upload its input there) and are copied into
    /// the sink, which then needs `COPY_DST`. `timer`, if any, brackets every submission.
    ///
    /// # Errors
    /// [`crate::Error::InvalidParameter`] (field `buffer usage`) for a device sink that
    /// cannot be written in place and lacks `COPY_DST`; [`crate::Error::Limit`] if the
    /// memory budget cannot hold the scratch or staging buffer.
    pub(crate) fn new(
        ctx: &'a Context,
        op: &'static Op,
        sink: Sink<'a>,
        total: u64,
        chunk_bytes: u64,
        timer: Option<&'a SpanTimer>,
    ) -> Result<Self> {
        use wgpu::BufferUsages as U;
        let scratch_bytes = chunk_bytes.min(total).next_multiple_of(4).max(4);
        let whole = total.next_multiple_of(4).max(4);
        let align = u64::from(ctx.device.limits().min_storage_buffer_offset_alignment);
        let target = match &sink {
            Sink::Device { buffer, offset }
                if total <= chunk_bytes
                    && buffer.usage().contains(U::STORAGE)
                    && offset % align == 0
                    && whole <= ctx.max_binding =>
            {
                Target::Direct { buffer: (*buffer).clone(), offset: *offset, size: whole }
            }
            Sink::Device { buffer, .. } if !buffer.usage().contains(U::COPY_DST) => {
                return Err(crate::Error::InvalidParameter {
                    field: "buffer usage",
                    value: format!("{:?}", buffer.usage()),
                    allowed: "COPY_DST, or STORAGE for a result written in place (one that \
                              fits one binding and the memory budget, at an aligned offset)",
                });
            }
            _ => Target::Scratch(ctx.pooled(
                op.out,
                scratch_bytes,
                U::STORAGE | U::COPY_SRC | U::COPY_DST,
            )?),
        };
        let staging = match sink {
            Sink::Host(_) | Sink::HostDeferred(_) => {
                Some(ctx.pooled(op.staging, scratch_bytes, U::MAP_READ | U::COPY_DST)?)
            }
            Sink::Device { .. } => None,
        };
        Ok(Self { ctx, op, sink, total, target, staging, done: 0, timer, readback: None })
    }

    /// The buffer the kernels write and the byte offset of the current chunk in it.
    pub(crate) fn buffer(&self) -> (&wgpu::Buffer, u64) {
        match &self.target {
            Target::Direct { buffer, offset, .. } => (buffer, *offset),
            Target::Scratch(scratch) => (scratch, 0),
        }
    }

    /// Whether the kernels write the sink itself (a device result one chunk fills).
    pub(crate) fn is_direct(&self) -> bool {
        matches!(self.target, Target::Direct { .. })
    }

    /// The binding of the buffer the kernels write.
    pub(crate) fn binding(&self) -> wgpu::BindingResource<'_> {
        match &self.target {
            Target::Direct { buffer, offset, size } => {
                wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer,
                    offset: *offset,
                    size: wgpu::BufferSize::new(*size),
                })
            }
            Target::Scratch(scratch) => scratch.as_entire_binding(),
        }
    }

    /// A command encoder for the next chunk, its first command the timer's start if this is
    /// the first submission timed.
    pub(crate) fn encoder(&self) -> wgpu::CommandEncoder {
        let mut encoder = self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some(self.op.encoder),
        });
        if let Some(timer) = self.timer {
            timer.start(&mut encoder);
        }
        encoder
    }

    /// Finishes the chunk `encoder` recorded, whose `bytes` bytes are at the start of the
    /// written buffer (see [`Output::buffer`]): copies them to the sink and submits, reading
    /// them back for a host sink (the last chunk of a [`Sink::HostDeferred`] is only
    /// submitted, its readback started).
    ///
    /// # Errors
    /// [`crate::Error::DeviceLost`] if a readback outlives the submission timeout;
    /// [`crate::Error::Gpu`] if mapping fails.
    pub(crate) async fn deliver(
        &mut self,
        mut encoder: wgpu::CommandEncoder,
        bytes: u64,
    ) -> Result<()> {
        let padded = bytes.next_multiple_of(4);
        let at = self.done;
        self.done += bytes;
        if let Some(timer) = self.timer.filter(|_| self.done >= self.total) {
            timer.stop(&mut encoder);
        }
        let (written, written_at) = match &self.target {
            Target::Direct { buffer, offset, .. } => (buffer, *offset),
            Target::Scratch(scratch) => (&**scratch, 0),
        };
        if self.done >= self.total
            && matches!(self.sink, Sink::HostDeferred(_))
            && let Some(staging) = self.staging.take()
        {
            encoder.copy_buffer_to_buffer(written, written_at, &staging, 0, padded);
            let readback = Readback::start(self.ctx, encoder, staging, at as usize, bytes as usize);
            self.readback = Some(readback);
            return Ok(());
        }
        match (&mut self.sink, &self.staging) {
            (sink @ (Sink::Host(_) | Sink::HostDeferred(_)), Some(staging)) => {
                encoder.copy_buffer_to_buffer(written, written_at, staging, 0, padded);
                let dst = match sink {
                    Sink::Host(dst) => &mut **dst,
                    Sink::HostDeferred(host) => host.bytes_mut()?,
                    Sink::Device { .. } => unreachable!("a host sink"),
                };
                let dst = &mut dst[at as usize..(at + bytes) as usize];
                if padded == bytes {
                    self.ctx.finish_and_read(self.op.name, encoder, staging, dst).await?;
                } else {
                    let mut words = vec![0u8; padded as usize];
                    self.ctx.finish_and_read(self.op.name, encoder, staging, &mut words).await?;
                    dst.copy_from_slice(&words[..bytes as usize]);
                }
            }
            (Sink::Device { buffer, offset }, _) => {
                if let Target::Scratch(_) = self.target {
                    encoder.copy_buffer_to_buffer(written, 0, buffer, *offset + at, padded);
                }
                self.ctx.queue.submit([encoder.finish()]);
            }
            (Sink::Host(_) | Sink::HostDeferred(_), None) => {
                unreachable!("host sinks get a staging buffer until their last chunk")
            }
        }
        Ok(())
    }

    /// The last chunk's readback of a [`Sink::HostDeferred`], once every chunk has been
    /// delivered; `None` for other sinks.
    pub(crate) fn into_readback(self) -> Option<Readback> {
        self.readback
    }
}

/// An operation's name (in errors) and the labels `posenc.<op>.<role>` of the runner's
/// objects.
pub(crate) struct Op {
    pub(crate) name: &'static str,
    out: &'static str,
    staging: &'static str,
    encoder: &'static str,
}

/// The fused gather + positional-encoding add.
pub(crate) const ENCODE: Op = Op {
    name: "encode",
    out: "posenc.encode.out",
    staging: "posenc.encode.staging",
    encoder: "posenc.encode.encoder",
};

/// Sinusoid tables.
pub(crate) const TABLE: Op = Op {
    name: "table",
    out: "posenc.table.out",
    staging: "posenc.table.staging",
    encoder: "posenc.table.encoder",
};

/// Rotary embeddings.
pub(crate) const ROPE: Op = Op {
    name: "rope",
    out: "posenc.rope.out",
    staging: "posenc.rope.staging",
    encoder: "posenc.rope.encoder",
};

/// ALiBi bias tensors.
pub(crate) const ALIBI: Op = Op {
    name: "alibi",
    out: "posenc.alibi.out",
    staging: "posenc.alibi.staging",
    encoder: "posenc.alibi.encoder",
};
