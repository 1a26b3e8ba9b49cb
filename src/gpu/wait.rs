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

/// A lock a future waits for by `.await`: on the web it runs posenc's operations one at a
/// time, each from its first error scope to its last answer, as they ran before an
/// operation's scopes were popped across its waits ([`Scopes`], which would keep them in
/// order without it). Whoever unlocks wakes every waiter, each of which tries again, so a
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

/// A popped scope's answer, awaited at the operation's end.
type Answer = Pin<Box<dyn Future<Output = Option<wgpu::Error>>>>;

/// One operation's error scopes ([`Scopes`]) as this thread holds them.
struct ScopeState {
    id: u64,
    device: wgpu::Device,
    /// Out-of-memory, then validation (popped in the reverse order) while the operation's
    /// own code runs; `None` while it waits for the GPU on the web.
    pushed: Option<(wgpu::ErrorScopeGuard, wgpu::ErrorScopeGuard)>,
    /// What earlier pairs caught: (out-of-memory, validation).
    answers: Vec<(Answer, Answer)>,
}

impl ScopeState {
    fn push(device: &wgpu::Device) -> (wgpu::ErrorScopeGuard, wgpu::ErrorScopeGuard) {
        let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        (oom, device.push_error_scope(wgpu::ErrorFilter::Validation))
    }

    /// Pops the pushed pair, if any, keeping its answers.
    fn pop(&mut self) -> bool {
        let Some((oom, validation)) = self.pushed.take() else { return false };
        let validation: Answer = Box::pin(validation.pop());
        let oom: Answer = Box::pin(oom.pop());
        self.answers.push((oom, validation));
        true
    }
}

std::thread_local! {
    /// The error scopes of the operations this thread runs, innermost last.
    static SCOPE_STACK: std::cell::RefCell<Vec<ScopeState>> =
        const { std::cell::RefCell::new(Vec::new()) };
    static NEXT_SCOPES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// An operation's two error scopes, out-of-memory under validation
/// ([`crate::gpu::Context::scoped_async`]). They are pushed while the operation's own code
/// runs; on the web a wait for the GPU (a [`Receiver`] not yet ready) pops them, and they
/// are pushed again when it resumes, so a page's own scope, pushed or popped while posenc
/// waits (its recorded step, between posenc's awaits), never meets posenc's on the stack,
/// which WebGPU pops in reverse order of the pushes (wgpu panics on a pop out of order).
/// Every pair's answer is awaited at the end ([`Scopes::finish`]); WebGPU gives an error to
/// the scope that was innermost when its call was made, however late it is found.
pub(crate) struct Scopes {
    id: u64,
}

impl Scopes {
    /// Pushes the scopes on `device` for the operation about to run.
    pub(crate) fn enter(device: &wgpu::Device) -> Self {
        let id = NEXT_SCOPES.with(|n| {
            let id = n.get();
            n.set(id.wrapping_add(1));
            id
        });
        let pushed = Some(ScopeState::push(device));
        let state = ScopeState { id, device: device.clone(), pushed, answers: Vec::new() };
        SCOPE_STACK.with(|s| s.borrow_mut().push(state));
        Self { id }
    }

    /// Pops the scopes and waits for what they caught: the first validation error and the
    /// first out-of-memory error, if any.
    pub(crate) async fn finish(self) -> (Option<wgpu::Error>, Option<wgpu::Error>) {
        let answers = match self.take() {
            Some(mut state) => {
                state.pop();
                std::mem::take(&mut state.answers)
            }
            None => Vec::new(),
        };
        let (mut validation, mut oom) = (None, None);
        for (o, v) in answers {
            let (o, v) = (o.await, v.await);
            validation = validation.or(v);
            oom = oom.or(o);
        }
        (validation, oom)
    }

    /// This operation's state, out of the thread's stack.
    fn take(&self) -> Option<ScopeState> {
        SCOPE_STACK.with(|s| {
            let mut stack = s.borrow_mut();
            let at = stack.iter().rposition(|state| state.id == self.id)?;
            Some(stack.remove(at))
        })
    }
}

impl Drop for Scopes {
    /// An operation's future dropped before it finished: its scopes are popped (if pushed)
    /// and their answers dropped.
    fn drop(&mut self) {
        if let Some(mut state) = self.take() {
            state.pop();
        }
    }
}

/// On the web, pops the scopes of the operation whose code is running (the one with
/// scopes pushed), as it starts waiting for the GPU; returns its id for [`resume_scopes`].
fn suspend_scopes() -> Option<u64> {
    if CAN_BLOCK {
        return None;
    }
    SCOPE_STACK.with(|s| {
        let mut stack = s.borrow_mut();
        let state = stack.iter_mut().rev().find(|state| state.pushed.is_some())?;
        state.pop().then_some(state.id)
    })
}

/// Pushes the scopes of operation `id` again, as it resumes after a wait.
fn resume_scopes(id: u64) {
    SCOPE_STACK.with(|s| {
        let mut stack = s.borrow_mut();
        if let Some(state) = stack.iter_mut().find(|state| state.id == id)
            && state.pushed.is_none()
        {
            state.pushed = Some(ScopeState::push(&state.device));
        }
    });
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
/// dropped without sending (wgpu dropped the callback). Every wait of posenc's for the GPU
/// is one: on the web, while it is pending, the waiting operation's error scopes are popped
/// ([`Scopes`]).
pub(crate) struct Receiver<T> {
    slot: Arc<Mutex<Slot<T>>>,
    /// The operation whose scopes this wait popped.
    suspended: Option<u64>,
}

/// A channel for one value from a callback to a future, with no executor behind it.
pub(crate) fn oneshot<T>() -> (Sender<T>, Receiver<T>) {
    let slot = Arc::new(Mutex::new(Slot { value: None, waker: None, closed: false }));
    (Sender(Arc::clone(&slot)), Receiver { slot, suspended: None })
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
        self.slot.lock().unwrap_or_else(PoisonError::into_inner).value.is_some()
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
        let this = self.get_mut();
        let ready = {
            let mut slot = this.slot.lock().unwrap_or_else(PoisonError::into_inner);
            match slot.value.take() {
                Some(value) => Some(Some(value)),
                None if slot.closed => Some(None),
                None => {
                    slot.waker = Some(cx.waker().clone());
                    None
                }
            }
        };
        match ready {
            Some(value) => {
                if let Some(id) = this.suspended.take() {
                    resume_scopes(id);
                }
                Poll::Ready(value)
            }
            None => {
                if this.suspended.is_none() {
                    this.suspended = suspend_scopes();
                }
                Poll::Pending
            }
        }
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
