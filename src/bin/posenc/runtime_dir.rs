//! A runtime directory setting for the GPU driver stack, so that a successful run prints
//! nothing but its own notes.
//!
//! While wgpu enumerates adapters, Mesa's Vulkan device-select layer (an implicit layer,
//! loaded with lavapipe and every Mesa driver) connects to a Wayland display to learn which
//! GPU drives it. With `XDG_RUNTIME_DIR` unset or not an absolute path, libwayland cannot
//! look for one and prints `error: XDG_RUNTIME_DIR is invalid or not set in the
//! environment.` to stderr, once per enumeration, although posenc needs no display and the
//! run succeeds. Any absolute path makes the connection fail quietly where no socket is, as
//! it does on any machine without a compositor; every adapter is still enumerated.
//!
//! posenc points the variable at a path under `/dev/null`, which no one can create (a
//! character device has no entries), rather than at a directory of its own: nothing is
//! made, so nothing can fail to be made (TMPDIR missing or a file used to bring the noise
//! back) or be left behind by a signal, and no other process can put a socket there.

/// The variable libwayland reads.
#[cfg(all(unix, not(target_vendor = "apple")))]
const VAR: &str = "XDG_RUNTIME_DIR";

/// Where the variable points when the caller gave no usable value: a path that cannot exist.
#[cfg(all(unix, not(target_vendor = "apple")))]
const NOWHERE: &str = "/dev/null/posenc-no-runtime-dir";

/// Points `XDG_RUNTIME_DIR` at a path that cannot exist when it is unset or not absolute;
/// leaves a usable one alone.
///
/// Must be called before any other thread exists (first thing in `main`): changing the
/// environment is sound only while no other thread may read it.
pub(crate) fn quiet_the_drivers() {
    // Apple's platforms and Windows have no Wayland; nothing there reads the variable.
    #[cfg(all(unix, not(target_vendor = "apple")))]
    {
        let usable = std::env::var_os(VAR).is_some_and(|v| std::path::Path::new(&v).is_absolute());
        if !usable {
            // SAFETY: `main` calls this before it starts any thread, and posenc's libraries
            // start none before they are used, so nothing reads the environment concurrently.
            unsafe { std::env::set_var(VAR, NOWHERE) };
        }
    }
}
