//! Waiting for the device. Natively a call blocks its thread until the GPU is done; on the
//! web (wasm32) a page's thread must never block, so every wait is an `.await` the browser
//! resumes. Each operation that waits is written once, as an `async fn`: its blocking
//! form drives that future on the calling thread ([`blocking`]), and on the web the
//! blocking form is [`Error::Blocking`] before anything is submitted.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context as TaskContext, Poll, Waker};

#[cfg(target_arch = "wasm32")]
use crate::error::Error;
use crate::error::Result;

/// Runs `future`, the async form of `op`, to completion on the calling thread.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn blocking<T>(
    _op: &'static str,
    _instead: &'static str,
    future: impl Future<Output = Result<T>>,
) -> Result<T> {
    pollster::block_on(future)
}

/// On the web nothing may block: [`Error::Blocking`] naming `instead`, the async form of
/// `op`. `future` is dropped unpolled, so nothing was started.
#[cfg(target_arch = "wasm32")]
pub(crate) fn blocking<T>(
    op: &'static str,
    instead: &'static str,
    future: impl Future<Output = Result<T>>,
) -> Result<T> {
    drop(future);
    Err(Error::Blocking { op, instead })
}

/// Whether this target may block a thread on the device (everywhere but the web).
pub(crate) const CAN_BLOCK: bool = cfg!(not(target_arch = "wasm32"));

/// A lock a future waits for by `.await`: on the web it keeps a device's error scopes in
/// the order WebGPU needs (popped in reverse order of their pushes), which two operations
/// in flight at once on the page's one thread would otherwise interleave (wgpu panics on a
/// pop out of order). Whoever unlocks wakes every waiter, each of which tries again, so a
/// waiter whose future was dropped holds up no one.
pub(crate) struct AsyncLock {
    state: Mutex<(bool, Vec<Waker>)>,
}

/// The page's one lock for posenc's error scopes: one, not one per context, since a page's
/// contexts may share a device (two made by `Context::from_device` on the page's device).
pub(crate) static SCOPES: AsyncLock = AsyncLock { state: Mutex::new((false, Vec::new())) };

/// Held while an operation's error scopes are pushed: see [`AsyncLock`].
pub(crate) struct AsyncGuard<'a>(&'a AsyncLock);

impl AsyncLock {
    /// Waits for the lock.
    pub(crate) fn lock(&self) -> impl Future<Output = AsyncGuard<'_>> {
        std::future::poll_fn(move |cx| {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.0 {
                state.1.push(cx.waker().clone());
                Poll::Pending
            } else {
                state.0 = true;
                Poll::Ready(AsyncGuard(self))
            }
        })
    }
}

impl Drop for AsyncGuard<'_> {
    fn drop(&mut self) {
        let waiters = {
            let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.0 = false;
            std::mem::take(&mut state.1)
        };
        for waker in waiters {
            waker.wake();
        }
    }
}

/// Unmaps a staging buffer when dropped, unless [`UnmapOnDrop::now`] already did: what a
/// readback leaves behind when its future is dropped with a map pending or done.
pub(crate) struct UnmapOnDrop<'a> {
    buffer: Option<&'a wgpu::Buffer>,
}

impl<'a> UnmapOnDrop<'a> {
    pub(crate) fn new(buffer: &'a wgpu::Buffer) -> Self {
        Self { buffer: Some(buffer) }
    }

    /// Unmaps the buffer now, once the mapping has been read.
    pub(crate) fn now(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            buffer.unmap();
        }
    }
}

impl Drop for UnmapOnDrop<'_> {
    fn drop(&mut self) {
        self.now();
    }
}

struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
    /// The sender is gone: a value was sent or never will be.
    closed: bool,
}

/// The sending half of a [`oneshot`]: for a wgpu callback (`map_async`,
/// `on_submitted_work_done`), which may run on another thread.
pub(crate) struct Sender<T>(Arc<Mutex<Slot<T>>>);

/// The receiving half of a [`oneshot`]: a future of the value, `None` if the sender was
/// dropped without sending (wgpu dropped the callback).
pub(crate) struct Receiver<T>(Arc<Mutex<Slot<T>>>);

/// A channel for one value from a callback to a future, with no executor behind it.
pub(crate) fn oneshot<T>() -> (Sender<T>, Receiver<T>) {
    let slot = Arc::new(Mutex::new(Slot { value: None, waker: None, closed: false }));
    (Sender(Arc::clone(&slot)), Receiver(slot))
}

impl<T> Sender<T> {
    pub(crate) fn send(self, value: T) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).value = Some(value);
        // Drop closes the slot and wakes the receiver.
    }
}

impl<T> Receiver<T> {
    /// Whether a value has been sent and not yet received: what a caller polling the
    /// device (rather than awaiting) checks.
    pub(crate) fn has_value(&self) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).value.is_some()
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            slot.closed = true;
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> Future for Receiver<T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<T>> {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(value) = slot.value.take() {
            return Poll::Ready(Some(value));
        }
        if slot.closed {
            return Poll::Ready(None);
        }
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_sent_from_another_thread_arrives_and_a_dropped_sender_ends_the_wait() {
        let (tx, rx) = oneshot();
        let t = std::thread::spawn(move || tx.send(7u32));
        assert_eq!(pollster::block_on(rx), Some(7));
        t.join().unwrap();
        let (tx, rx) = oneshot::<u32>();
        drop(tx);
        assert!(!rx.has_value(), "a dropped sender sent nothing");
        assert_eq!(pollster::block_on(rx), None);
        let (tx, rx) = oneshot();
        assert!(!rx.has_value());
        tx.send(3u8);
        assert!(rx.has_value());
        assert_eq!(pollster::block_on(rx), Some(3));
    }
}
