//! Host results still on their way back: the readback a submission leaves in flight
//! ([`Readback`]) and the encode handle built on it ([`PendingEncode`]), so that a caller
//! can submit the next batch, or write the previous one out, while the device works.
//!
//! A readback owns the staging buffer its last chunk was copied to, which has a
//! `map_async` outstanding; the buffer stays on loan from the context's pool, and so
//! counted against its memory, until the result is taken or the handle dropped. The other
//! scratch buffers of the call go back to the pool at submission: WebGPU runs a queue's
//! work in order, so a later call that reuses them writes them only after this one's
//! commands have read them.

use std::sync::{Arc, Mutex, MutexGuard};

use half::{bf16, f16};
use ndarray::Array3;

use super::{Context, PooledBuffer};
use crate::encode::{Dtype, Encoded};
use crate::error::{Error, Result};

/// What a buffer's `map_async` callback reported, once it has run.
type MapSlot = Arc<Mutex<Option<std::result::Result<(), wgpu::BufferAsyncError>>>>;

fn lock(slot: &MapSlot) -> MutexGuard<'_, Option<std::result::Result<(), wgpu::BufferAsyncError>>> {
    slot.lock().unwrap_or_else(|e| e.into_inner())
}

/// The last chunk of a host result: submitted, its staging buffer being mapped.
pub(crate) struct Readback {
    staging: Option<PooledBuffer>,
    index: wgpu::SubmissionIndex,
    /// Where the chunk's bytes go in the host result, and how many there are.
    at: usize,
    bytes: usize,
    /// The chunk's bytes rounded up to whole words: what was copied and mapped.
    padded: u64,
    mapped: MapSlot,
}

impl Readback {
    /// Submits `encoder` (whose last command copies the chunk into `staging`) and starts
    /// mapping the chunk's `bytes` bytes, bound for `at..at + bytes` of the host result.
    pub(crate) fn start(
        ctx: &Context,
        encoder: wgpu::CommandEncoder,
        staging: PooledBuffer,
        at: usize,
        bytes: usize,
    ) -> Self {
        let index = ctx.queue.submit([encoder.finish()]);
        let padded = (bytes as u64).next_multiple_of(4);
        let mapped: MapSlot = Arc::default();
        let slot = Arc::clone(&mapped);
        staging.slice(..padded).map_async(wgpu::MapMode::Read, move |r| {
            *lock(&slot) = Some(r);
        });
        Self { staging: Some(staging), index, at, bytes, padded, mapped }
    }

    /// Whether the mapping has completed (or failed): polls the device without blocking.
    fn is_ready(&self, ctx: &Context) -> bool {
        if lock(&self.mapped).is_none() {
            // A failed poll means a lost device, which the wait reports.
            let _ = ctx.device.poll(wgpu::PollType::Poll);
        }
        lock(&self.mapped).is_some()
    }

    /// Waits for the chunk (at most [`super::SUBMISSION_TIMEOUT`]) and copies it into
    /// `host`, then hands the staging buffer back to the pool.
    fn finish(self, ctx: &Context, op: &'static str, host: &mut [u8]) -> Result<()> {
        let dst = &mut host[self.at..self.at + self.bytes];
        self.finish_with(ctx, op, |view| super::copy_out(dst, view))
    }

    /// Waits for the chunk as [`Readback::finish`] does and hands its bytes, mapped, to
    /// `read`, then hands the staging buffer back to the pool; `read` is not called if the
    /// readback fails.
    fn finish_with(
        mut self,
        ctx: &Context,
        op: &'static str,
        read: impl FnOnce(&[u8]),
    ) -> Result<()> {
        self.mapped(ctx, op)?;
        let staging = self.staging.take().expect("present until finished or dropped");
        {
            let slice = staging.slice(..self.padded);
            let view =
                slice.get_mapped_range().map_err(|e| Error::Gpu { op, message: e.to_string() })?;
            read(&view[..self.bytes]);
        }
        staging.unmap();
        Ok(())
    }

    /// Waits until the chunk's staging buffer is mapped (at most
    /// [`super::SUBMISSION_TIMEOUT`]).
    fn mapped(&self, ctx: &Context, op: &'static str) -> Result<()> {
        // Polls first on this chunk's own map callback, which comes with its submission,
        // not with later ones (several encodes may be in flight).
        ctx.wait_until(op, self.index.clone(), || lock(&self.mapped).is_some())?;
        // The submission is done, but when another thread's poll collected the mapping's
        // callback it may not have run it yet: give it until the submission timeout.
        let deadline = std::time::Instant::now() + super::SUBMISSION_TIMEOUT;
        let mapped = loop {
            if let Some(m) = lock(&self.mapped).take() {
                break Some(m);
            }
            if std::time::Instant::now() > deadline {
                break None;
            }
            let _ = ctx.device.poll(wgpu::PollType::Poll);
            std::thread::sleep(std::time::Duration::from_micros(50));
        };
        match mapped {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(Error::Gpu { op, message: e.to_string() }),
            None => Err(Error::Gpu { op, message: "readback never completed".into() }),
        }
    }
}

impl Drop for Readback {
    /// A readback dropped before it finished takes its staging buffer out of the pool for
    /// good: a buffer with a mapping outstanding must not be lent to another call. wgpu
    /// frees it once the device is done with it; posenc's accounting releases it now.
    fn drop(&mut self) {
        if let Some(mut staging) = self.staging.take() {
            staging.buffer.take();
        }
    }
}

/// An encode submitted by [`Context::encode_submit`] whose result is still being computed or read
/// back. [`PendingEncode::wait`] gives the [`Encoded`] result, the same bits
/// [`Context::encode`] gives; [`PendingEncode::is_ready`] says, without blocking, whether
/// `wait` would return at once.
///
/// Several may be in flight at once, on one context or on clones of it; each holds its
/// own staging buffer (counted against the context's memory budget) until it is waited
/// for or dropped. Dropping one without waiting is safe: the device finishes the work and
/// the result is discarded.
#[must_use = "an encode's result is only had by waiting for it"]
pub struct PendingEncode {
    ctx: Context,
    op: &'static str,
    /// The host result: chunks before the last already read back, the last still in
    /// `readback`.
    host: HostResult,
    shape: (usize, usize, usize),
    readback: Option<Readback>,
}

/// A host result in its element type, written through its bytes: the values land where
/// the array will hold them, with no copy once read back. A deferred result starts
/// unallocated and gets its memory only when a chunk is copied into it, so a result handed
/// over mapped ([`PendingEncode::wait_mapped`]) never allocates or zeroes host memory: a
/// zeroed allocation below glibc's largest mmap threshold (32 MiB) reuses heap memory and
/// clears it, which took 1.2 ms of a 1.6 ms mapped bert-base encode on an H100 host
/// (2026-11-27).
pub(crate) enum HostResult {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    /// `n` elements of `dtype`, not yet allocated.
    Unallocated(Dtype, usize),
}

impl HostResult {
    /// The element type.
    fn dtype(&self) -> Dtype {
        match self {
            Self::F32(_) => Dtype::F32,
            Self::F16(_) => Dtype::F16,
            Self::Bf16(_) => Dtype::Bf16,
            Self::Unallocated(dtype, _) => *dtype,
        }
    }

    /// `n` zeros of `dtype`, allocated fallibly.
    ///
    /// # Errors
    /// [`Error::Alloc`] if the memory cannot be had.
    pub(crate) fn zeros(dtype: Dtype, n: usize) -> Result<Self> {
        const WHAT: &str = "an encode's host result";
        Ok(match dtype {
            Dtype::F32 => Self::F32(crate::alloc::try_zeroed_vec(WHAT, n)?),
            Dtype::F16 => Self::F16(crate::alloc::try_zeroed_vec(WHAT, n)?),
            Dtype::Bf16 => Self::Bf16(crate::alloc::try_zeroed_vec(WHAT, n)?),
        })
    }

    /// `n` elements of `dtype` whose bytes `fill` writes, every one of them, into memory
    /// that is neither zeroed nor touched first: one pass over the result's pages, where a
    /// zeroed allocation and a copy are two (the first single-threaded when the allocator
    /// reuses memory).
    ///
    /// # Errors
    /// [`Error::Alloc`] if the memory cannot be had; what `fill` returns.
    fn filled(
        dtype: Dtype,
        n: usize,
        fill: impl FnOnce(&mut [std::mem::MaybeUninit<u8>]) -> Result<()>,
    ) -> Result<Self> {
        fn filled_vec<T: bytemuck::Pod>(
            n: usize,
            fill: impl FnOnce(&mut [std::mem::MaybeUninit<u8>]) -> Result<()>,
        ) -> Result<Vec<T>> {
            let bytes = n.checked_mul(size_of::<T>());
            let mut v: Vec<T> = Vec::new();
            if bytes.is_none() || v.try_reserve_exact(n).is_err() {
                let bytes = bytes.map_or(u64::MAX, |b| b as u64);
                return Err(Error::Alloc { what: "an encode's host result", bytes });
            }
            let spare = v.spare_capacity_mut();
            crate::alloc::advise_huge_pages(spare);
            let len = size_of_val(spare).min(n * size_of::<T>());
            // SAFETY: the spare capacity holds at least n elements of T, so len bytes from
            // its start are allocated, and MaybeUninit<u8> has no validity requirement.
            let raw = unsafe {
                std::slice::from_raw_parts_mut(
                    spare.as_mut_ptr().cast::<std::mem::MaybeUninit<u8>>(),
                    len,
                )
            };
            fill(raw)?;
            // SAFETY: `fill` succeeded, having written all n * size_of::<T>() bytes, and
            // every bit pattern is a valid T (Pod).
            unsafe { v.set_len(n) };
            Ok(v)
        }
        Ok(match dtype {
            Dtype::F32 => Self::F32(filled_vec(n, fill)?),
            Dtype::F16 => Self::F16(filled_vec(n, fill)?),
            Dtype::Bf16 => Self::Bf16(filled_vec(n, fill)?),
        })
    }

    /// `n` elements of `dtype`, allocated by the first [`HostResult::bytes_mut`].
    pub(crate) fn deferred(dtype: Dtype, n: usize) -> Self {
        Self::Unallocated(dtype, n)
    }

    /// Bytes the result holds, allocated or not.
    pub(crate) fn byte_len(&self) -> usize {
        match self {
            Self::F32(v) => 4 * v.len(),
            Self::F16(v) => 2 * v.len(),
            Self::Bf16(v) => 2 * v.len(),
            Self::Unallocated(dtype, n) => dtype.size() * n,
        }
    }

    /// The elements' bytes, which the device's little-endian words are copied into; a
    /// deferred result is allocated (zeroed) first.
    ///
    /// # Errors
    /// [`Error::Alloc`] if a deferred result's memory cannot be had.
    pub(crate) fn bytes_mut(&mut self) -> Result<&mut [u8]> {
        if let Self::Unallocated(dtype, n) = *self {
            *self = Self::zeros(dtype, n)?;
        }
        Ok(match self {
            Self::F32(v) => bytemuck::cast_slice_mut(v),
            Self::F16(v) => bytemuck::cast_slice_mut(v),
            Self::Bf16(v) => bytemuck::cast_slice_mut(v),
            Self::Unallocated(..) => unreachable!("allocated above"),
        })
    }

    /// The array of `shape`, once every byte is in.
    pub(crate) fn into_encoded(self, shape: (usize, usize, usize)) -> Encoded {
        fn shaped<T>(shape: (usize, usize, usize), mut v: Vec<T>, swap: fn(T) -> T) -> Array3<T> {
            // The device wrote little-endian values.
            if cfg!(target_endian = "big") {
                v = v.into_iter().map(swap).collect();
            }
            Array3::from_shape_vec(shape, v).expect("the shape matches")
        }
        match self {
            Self::Unallocated(..) => unreachable!("a wait allocates a result before reading it"),
            Self::F32(v) => {
                Encoded::F32(shaped(shape, v, |x| f32::from_bits(x.to_bits().swap_bytes())))
            }
            Self::F16(v) => {
                Encoded::F16(shaped(shape, v, |x| f16::from_bits(x.to_bits().swap_bytes())))
            }
            Self::Bf16(v) => {
                Encoded::Bf16(shaped(shape, v, |x| bf16::from_bits(x.to_bits().swap_bytes())))
            }
        }
    }
}

impl std::fmt::Debug for PendingEncode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingEncode")
            .field("shape", &self.shape)
            .field("in_flight", &self.readback.is_some())
            .finish()
    }
}

impl PendingEncode {
    /// A handle for the result `host` of `shape`, of which `readback` (if any) is still to
    /// come.
    pub(crate) fn new(
        ctx: &Context,
        op: &'static str,
        host: HostResult,
        shape: (usize, usize, usize),
        readback: Option<Readback>,
    ) -> Self {
        Self { ctx: ctx.clone(), op, host, shape, readback }
    }

    /// `(batch, len, dim)` of the result.
    pub fn dim(&self) -> (usize, usize, usize) {
        self.shape
    }

    /// Whether the result is on the host side already, so that [`PendingEncode::wait`]
    /// would not block. Polls the device without waiting; a failed encode counts as ready
    /// (its `wait` returns the error).
    pub fn is_ready(&self) -> bool {
        self.readback.as_ref().is_none_or(|r| r.is_ready(&self.ctx))
    }

    /// Waits for the result, at most [`SUBMISSION_TIMEOUT`](super::SUBMISSION_TIMEOUT).
    ///
    /// # Errors
    /// [`Error::DeviceLost`] if the device was lost (before or while the work ran) or the
    /// work outlives the timeout; [`Error::Gpu`] if the readback fails otherwise.
    pub fn wait(self) -> Result<Encoded> {
        let Self { ctx, op, host, shape, readback } = self;
        match (readback, host) {
            // The whole result in one readback: copied straight into fresh memory.
            (Some(readback), HostResult::Unallocated(dtype, n))
                if readback.at == 0 && readback.bytes == dtype.size() * n =>
            {
                let host = HostResult::filled(dtype, n, |dst| {
                    ctx.scoped(op, || {
                        readback.finish_with(&ctx, op, |view| super::copy_out_uninit(dst, view))
                    })
                })?;
                Ok(host.into_encoded(shape))
            }
            (readback, mut host) => {
                // Allocated even with nothing to read back (an empty result).
                let bytes = host.bytes_mut()?;
                if let Some(readback) = readback {
                    ctx.scoped(op, || readback.finish(&ctx, op, bytes))?;
                }
                Ok(host.into_encoded(shape))
            }
        }
    }

    /// Waits for the result as [`PendingEncode::wait`] does, but hands it over where the
    /// readback left it: the mapped staging memory, read in place, with no copy into host
    /// memory (what a caller that writes the bytes on, or reads a few of them, needs; on an
    /// H100 host one core copies out of a mapping at about 10 GB/s). That holds when the
    /// result came back in one readback, the usual case (a result larger than one binding
    /// or the memory budget comes back in several); otherwise the chunks are copied into
    /// host memory first and [`MappedEncode::is_mapped`] says so. The staging buffer stays
    /// on loan from the context's pool, counted against its memory, until the
    /// [`MappedEncode`] is dropped.
    ///
    /// # Errors
    /// As [`PendingEncode::wait`].
    pub fn wait_mapped(self) -> Result<MappedEncode> {
        let Self { ctx, op, mut host, shape, readback } = self;
        let dtype = host.dtype();
        let total = host.byte_len();
        let whole = readback.as_ref().is_some_and(|r| r.at == 0 && r.bytes == total);
        match readback {
            Some(mut readback) if whole => {
                ctx.scoped(op, || readback.mapped(&ctx, op))?;
                let staging = readback.staging.take().expect("present until finished or dropped");
                let view = staging
                    .slice(..readback.padded)
                    .get_mapped_range()
                    .map_err(|e| Error::Gpu { op, message: e.to_string() })?;
                Ok(MappedEncode {
                    view: Some(view),
                    staging: Some(staging),
                    owned: Vec::new(),
                    bytes: total,
                    shape,
                    dtype,
                })
            }
            readback => {
                let bytes = host.bytes_mut()?;
                if let Some(readback) = readback {
                    ctx.scoped(op, || readback.finish(&ctx, op, &mut *bytes))?;
                }
                let mut owned = crate::alloc::try_zeroed_vec("an encode's host result", total)?;
                owned.copy_from_slice(bytes);
                Ok(MappedEncode { view: None, staging: None, owned, bytes: total, shape, dtype })
            }
        }
    }
}

/// An encode's host result where the readback left it: see [`PendingEncode::wait_mapped`].
pub struct MappedEncode {
    view: Option<wgpu::BufferView>,
    staging: Option<PooledBuffer>,
    /// The result's bytes when it came back in several chunks.
    owned: Vec<u8>,
    bytes: usize,
    shape: (usize, usize, usize),
    dtype: Dtype,
}

impl std::fmt::Debug for MappedEncode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedEncode")
            .field("shape", &self.shape)
            .field("dtype", &self.dtype)
            .field("mapped", &self.is_mapped())
            .finish()
    }
}

impl MappedEncode {
    /// The values, `[batch, len, dim]` in C order, as little-endian bytes of
    /// [`MappedEncode::dtype`]: the bits [`PendingEncode::wait`] gives.
    pub fn bytes(&self) -> &[u8] {
        match &self.view {
            Some(view) => &view[..self.bytes],
            None => &self.owned,
        }
    }

    /// `(batch, len, dim)`.
    pub fn dim(&self) -> (usize, usize, usize) {
        self.shape
    }

    /// The output type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Whether [`MappedEncode::bytes`] are the device's mapped staging memory (one
    /// readback) rather than a copy in host memory (several).
    pub fn is_mapped(&self) -> bool {
        self.view.is_some()
    }

    /// The values as an array, copied out.
    ///
    /// # Errors
    /// [`Error::Alloc`] if the array's memory cannot be had.
    pub fn to_encoded(&self) -> Result<Encoded> {
        let n = self.shape.0 * self.shape.1 * self.shape.2;
        let host = HostResult::filled(self.dtype, n, |dst| {
            super::copy_out_uninit(dst, self.bytes());
            Ok(())
        })?;
        Ok(host.into_encoded(self.shape))
    }
}

impl Drop for MappedEncode {
    /// Unmaps the staging buffer and hands it back to the context's pool.
    fn drop(&mut self) {
        drop(self.view.take());
        if let Some(staging) = self.staging.take() {
            staging.unmap();
        }
    }
}
