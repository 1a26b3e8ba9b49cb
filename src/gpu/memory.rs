//! Accounting of the device memory posenc allocates. Every buffer posenc creates is a
//! [`DeviceBuffer`]: its bytes count as held while any clone of it lives, the peak is
//! recorded, and with a budget an allocation that would pass it is refused (after the
//! context's pool of spare buffers has been emptied to make room).
//!
//! What is counted: the buffers posenc creates (tables, cached PE rows, scratch, staging,
//! outputs it allocates), by the size requested. Not counted: wgpu's own transient staging
//! for `Queue::write_buffer` (at most one upload's size at a time), pipelines, and the
//! driver's rounding of sizes.

use std::cell::Cell;
use std::sync::{Arc, Mutex, MutexGuard};

/// The byte counts of one context.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    state: Mutex<State>,
    budget: Option<u64>,
    /// Held for the whole of a budgeted operation, so that two threads never plan their
    /// chunks against the same free bytes.
    exclusive: Mutex<()>,
}

#[derive(Debug, Default)]
struct State {
    held: u64,
    peak: u64,
}

thread_local! {
    /// Bytes this thread has asked for since the last [`Memory::start_scope`]: what an
    /// out-of-memory error reports as requested.
    static SCOPE_BYTES: Cell<u64> = const { Cell::new(0) };
}

impl Memory {
    pub(crate) fn new(budget: Option<u64>) -> Self {
        Self { budget, ..Self::default() }
    }

    pub(crate) fn budget(&self) -> Option<u64> {
        self.budget
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The counters stay consistent even if a thread panicked while holding the lock.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes held now.
    pub(crate) fn held(&self) -> u64 {
        self.state().held
    }

    /// The most bytes held at once since creation or the last [`Memory::reset_peak`].
    pub(crate) fn peak(&self) -> u64 {
        self.state().peak
    }

    pub(crate) fn reset_peak(&self) {
        let mut s = self.state();
        s.peak = s.held;
    }

    /// Counts `size` more bytes if the budget allows; `false` (and nothing counted) if not.
    fn try_hold(&self, size: u64) -> bool {
        let mut s = self.state();
        let held = s.held.saturating_add(size);
        if self.budget.is_some_and(|b| held > b) {
            return false;
        }
        s.held = held;
        s.peak = s.peak.max(held);
        SCOPE_BYTES.with(|b| b.set(b.get().saturating_add(size)));
        true
    }

    fn release(&self, size: u64) {
        let mut s = self.state();
        s.held = s.held.saturating_sub(size);
    }

    /// A lock a budgeted operation holds from planning to its last allocation; `None`
    /// without a budget, where operations need not wait for each other.
    ///
    /// On the web there is none: the page's one thread runs every operation, which hold
    /// this across their `.await`s, so a second one would find it taken and could not wait
    /// for it (the single-threaded mutex panics). Two budgeted operations in flight at once
    /// there plan against the same bytes left; each allocation is still checked against the
    /// budget, so the later one may get [`crate::Error::Limit`] where natively it would have
    /// waited.
    pub(crate) fn exclusive(&self) -> Option<MutexGuard<'_, ()>> {
        self.budget?;
        if cfg!(target_arch = "wasm32") {
            return None;
        }
        Some(self.exclusive.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Starts counting a scope's bytes from 0, returning the enclosing scope's count so far
    /// for [`Memory::end_scope`] (scopes nest: a blocking pass preparation scopes calls that
    /// scope their own buffers).
    pub(crate) fn start_scope() -> u64 {
        SCOPE_BYTES.with(|b| b.replace(0))
    }

    /// Ends a scope begun by [`Memory::start_scope`]: the enclosing scope's count, `outer`,
    /// grows by this one's.
    pub(crate) fn end_scope(outer: u64) {
        SCOPE_BYTES.with(|b| b.set(b.get().saturating_add(outer)));
    }

    pub(crate) fn scope_bytes() -> u64 {
        SCOPE_BYTES.with(Cell::get)
    }
}

/// A wgpu buffer whose bytes count against its context's [`Memory`] while any clone lives.
#[derive(Clone, Debug)]
pub(crate) struct DeviceBuffer {
    buffer: wgpu::Buffer,
    _hold: Arc<Hold>,
}

#[derive(Debug)]
struct Hold {
    memory: Arc<Memory>,
    size: u64,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.memory.release(self.size);
    }
}

impl std::ops::Deref for DeviceBuffer {
    type Target = wgpu::Buffer;
    fn deref(&self) -> &wgpu::Buffer {
        &self.buffer
    }
}

impl DeviceBuffer {
    /// Creates a buffer of `size` bytes if `memory`'s budget allows, calling `make_room`
    /// (which frees spare buffers, returning `false` when it has none left) until it does.
    /// `None` if the budget cannot hold it.
    pub(crate) fn create(
        device: &wgpu::Device,
        memory: &Arc<Memory>,
        label: &'static str,
        size: u64,
        usage: wgpu::BufferUsages,
        mut make_room: impl FnMut() -> bool,
    ) -> Option<Self> {
        while !memory.try_hold(size) {
            if !make_room() {
                return None;
            }
        }
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: false,
        });
        Some(Self { buffer, _hold: Arc::new(Hold { memory: Arc::clone(memory), size }) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_peaks_and_budgets_add_up() {
        let m = Arc::new(Memory::new(Some(100)));
        assert!(m.try_hold(60));
        assert!(!m.try_hold(41), "60 + 41 passes the budget");
        assert!(m.try_hold(40));
        assert_eq!((m.held(), m.peak()), (100, 100));
        m.release(60);
        assert_eq!((m.held(), m.peak()), (40, 100));
        m.reset_peak();
        assert_eq!(m.peak(), 40);
        let unbounded = Memory::new(None);
        assert!(unbounded.try_hold(u64::MAX));
        assert!(unbounded.exclusive().is_none());
        assert!(m.exclusive().is_some());
    }
}
