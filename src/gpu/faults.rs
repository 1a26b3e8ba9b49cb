//! Device faults as typed errors. wgpu's device-lost callback records a loss (a driver
//! reset, `Device::destroy`, an unrecoverable out-of-memory); a submission that does not
//! complete within [`SUBMISSION_TIMEOUT`] counts as a loss too, so a hung GPU cannot hang a
//! caller. Once lost, a context answers every call with [`Error::DeviceLost`] at once.
//! Out-of-memory errors caught by an operation's error scope become
//! [`Error::OutOfMemory`], and nothing wgpu reports ever reaches its default handler,
//! which would panic.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::error::Error;

/// The longest posenc waits for one submission before it declares the device lost. Every
/// submission is one chunk of at most one storage binding, which even a software adapter
/// finishes in well under a second.
pub const SUBMISSION_TIMEOUT: Duration = Duration::from_secs(120);

/// Environment variable making posenc's GPU fail on purpose, so that what callers do about
/// a device fault can be tested end to end: `device-lost` destroys the device as soon as
/// [`Context::new`](super::Context::new) has opened it (the loss is real, through wgpu).
/// It only ever makes the GPU fail; it never changes a result.
pub const FAULT_INJECT_ENV: &str = "POSENC_FAULT_INJECT";

/// A fault [`FAULT_INJECT_ENV`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The device is destroyed once open.
    DeviceLost,
}

/// The fault [`FAULT_INJECT_ENV`] names, if it is set.
///
/// # Errors
/// [`Error::InvalidParameter`] naming the variable for any other value: a misspelt knob
/// must not pass for a run without faults.
pub(crate) fn fault_from_env() -> Result<Option<Fault>, Error> {
    let choices = [("device-lost", Some(Fault::DeviceLost))];
    crate::error::env_choice(FAULT_INJECT_ENV, "device-lost", None, &choices)
}

/// What went wrong with a device, as its callbacks reported it.
#[derive(Debug, Default)]
pub(crate) struct Health {
    lost: Mutex<Option<String>>,
    uncaptured: Mutex<Option<String>>,
}

fn lock(slot: &Mutex<Option<String>>) -> MutexGuard<'_, Option<String>> {
    slot.lock().unwrap_or_else(|e| e.into_inner())
}

impl Health {
    /// Installs the device-lost callback and an uncaptured-error handler that records
    /// instead of panicking.
    pub(crate) fn watch(device: &wgpu::Device) -> Arc<Self> {
        let health = Arc::new(Self::default());
        let on_lost = Arc::clone(&health);
        device.set_device_lost_callback(move |reason, message| {
            let reason = match reason {
                wgpu::DeviceLostReason::Destroyed => "the device was destroyed".to_string(),
                wgpu::DeviceLostReason::Unknown => "the driver reported a loss".to_string(),
            };
            let text = if message.is_empty() { reason } else { format!("{reason}: {message}") };
            on_lost.mark_lost(text);
        });
        let on_error = Arc::clone(&health);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            lock(&on_error.uncaptured).get_or_insert_with(|| e.to_string());
        }));
        health
    }

    /// Why the device was lost, if it was.
    pub(crate) fn lost(&self) -> Option<String> {
        lock(&self.lost).clone()
    }

    /// Records a loss; the first reason recorded is kept.
    pub(crate) fn mark_lost(&self, reason: String) {
        lock(&self.lost).get_or_insert(reason);
    }

    /// The first error no scope caught since the last call, if any.
    pub(crate) fn take_uncaptured(&self) -> Option<String> {
        lock(&self.uncaptured).take()
    }
}

/// Whether `device` is lost, asked of the device itself rather than of the callback (which
/// another thread may be about to run): WebGPU reports no validation errors from a lost
/// device, so a request that is invalid on purpose (a buffer with no usage) and draws no
/// error means the device is gone. Then waits, briefly, for the callback's reason, and
/// records a loss of its own if none arrives.
pub(crate) fn confirm_loss(device: &wgpu::Device, health: &Health) -> Option<String> {
    if let Some(reason) = health.lost() {
        return Some(reason);
    }
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let _probe = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("posenc.probe"),
        size: 4,
        usage: wgpu::BufferUsages::empty(),
        mapped_at_creation: false,
    });
    if pollster::block_on(scope.pop()).is_some() {
        return None;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        if let Some(reason) = health.lost() {
            return Some(reason);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    health.mark_lost("the device stopped working".into());
    health.lost()
}

/// posenc's error for what an operation's error scope caught. `requested` is what the
/// operation had allocated so far, `held` what the context held in all.
pub(crate) fn classify(op: &'static str, caught: wgpu::Error, requested: u64, held: u64) -> Error {
    match caught {
        wgpu::Error::OutOfMemory { source } => {
            Error::OutOfMemory { op, requested, held, message: source.to_string() }
        }
        other => Error::Gpu { op, message: other.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_names_the_sizes() {
        let source = Box::new(std::io::Error::other("no room"));
        let e = classify("encode", wgpu::Error::OutOfMemory { source }, 4096, 1 << 20);
        assert!(
            matches!(&e, Error::OutOfMemory { op: "encode", requested: 4096, held: 1048576, .. }),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "encode: the GPU ran out of memory allocating 4096 bytes (posenc held 1048576 bytes \
             on the device): no room"
        );
        let source = Box::new(std::io::Error::other("bad"));
        let v =
            classify("table", wgpu::Error::Validation { source, description: "bad".into() }, 0, 0);
        assert!(matches!(v, Error::Gpu { op: "table", .. }));
    }

    #[test]
    fn the_first_loss_is_kept() {
        let h = Health::default();
        assert_eq!(h.lost(), None);
        h.mark_lost("first".into());
        h.mark_lost("second".into());
        assert_eq!(h.lost().as_deref(), Some("first"));
    }
}
