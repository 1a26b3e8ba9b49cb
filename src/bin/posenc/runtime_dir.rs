//! A private runtime directory for the GPU driver stack, so that a successful run prints
//! nothing but its own notes.
//!
//! While wgpu enumerates adapters, Mesa's Vulkan device-select layer (an implicit layer,
//! loaded with lavapipe and every Mesa driver) connects to a Wayland display to learn which
//! GPU drives it. With `XDG_RUNTIME_DIR` unset or not an absolute path, libwayland cannot
//! look for one and prints `error: XDG_RUNTIME_DIR is invalid or not set in the
//! environment.` to stderr, once per enumeration, although posenc needs no display and the
//! run succeeds. Pointing the variable at an empty directory of our own makes the
//! connection fail quietly (no socket there), as it does on any machine without a
//! compositor. Every adapter is still enumerated: nothing is disabled.

/// Holds the directory, if one was made, until the run ends; dropping it removes the
/// directory.
pub(crate) struct RuntimeDir {
    _dir: Option<tempfile::TempDir>,
}

/// The variable libwayland reads.
#[cfg(all(unix, not(target_vendor = "apple")))]
const VAR: &str = "XDG_RUNTIME_DIR";

impl RuntimeDir {
    /// Points `XDG_RUNTIME_DIR` at a fresh directory (mode 0700, as the XDG specification
    /// asks, under the system's temporary directory) when it is unset or not absolute;
    /// leaves a usable one alone.
    ///
    /// Must be called before any other thread exists (first thing in `main`): changing the
    /// environment is sound only while no other thread may read it.
    pub(crate) fn ensure() -> Self {
        // Apple's platforms and Windows have no Wayland; nothing there reads the variable.
        #[cfg(all(unix, not(target_vendor = "apple")))]
        {
            use std::os::unix::fs::PermissionsExt;
            let usable =
                std::env::var_os(VAR).is_some_and(|v| std::path::Path::new(&v).is_absolute());
            if !usable {
                let private = std::fs::Permissions::from_mode(0o700);
                // Without a directory the run still works, only with the drivers' noise:
                // no reason to fail it.
                if let Ok(dir) = tempfile::Builder::new()
                    .prefix("posenc-runtime-")
                    .permissions(private)
                    .tempdir()
                {
                    // SAFETY: `main` calls this before it starts any thread, and posenc's
                    // libraries start none before they are used, so nothing reads the
                    // environment concurrently.
                    unsafe { std::env::set_var(VAR, dir.path()) };
                    return Self { _dir: Some(dir) };
                }
            }
        }
        Self { _dir: None }
    }
}
