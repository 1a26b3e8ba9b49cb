//! The binary's allocator: the system's, except that a refusal nothing asked to be fallible
//! ends the run with one line on stderr and exit status 1, its temporary files removed,
//! where Rust would abort (exit 134; with `RUST_BACKTRACE`, a backtrace).
//!
//! The buffers a request sizes are allocated fallibly (`posenc::alloc`), so a request too
//! large for the memory there is is refused naming its buffer. Near an address-space limit
//! an ordinary small allocation can be refused too (a line of text, a parser's node); no
//! code path could return an error from every one of those, so this ends the run instead.
//! Refusals inside `posenc::alloc`'s functions ([`posenc::alloc::in_fallible_allocation`])
//! go back to them as errors.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Under an address-space limit (`ulimit -v`), has glibc's allocator serve every thread
/// from one arena. By default each thread that allocates gets an arena of its own, and
/// making one maps 128 MiB of address space for a moment (a 64 MiB heap, aligned): under a
/// limit of about 150 MB that succeeded for a worker thread and then left its first small
/// allocations nothing, so every command failed at its start, where under 80 MB (too little
/// for the arena, so the shared one served) it ran. Without a limit the arenas stay: threads
/// that allocate in parallel (the big-float work) contend less with them.
pub(crate) fn share_one_arena_under_an_address_space_limit() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes the limit into `limit`, which it may; mallopt changes an
        // allocator parameter, before any other thread exists.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_AS, &mut limit) == 0
                && limit.rlim_cur != libc::RLIM_INFINITY
            {
                libc::mallopt(libc::M_ARENA_MAX, 1);
            }
        }
    }
}

/// The system allocator, ending the run on a refusal nothing is ready for.
pub(crate) struct Allocator;

// SAFETY: every method forwards to `System` with the same arguments and returns its result
// unchanged; on a null result it either returns it or never returns.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees for `alloc` are `System::alloc`'s.
        let ptr = unsafe { System.alloc(layout) };
        if ptr.is_null() {
            refused(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if ptr.is_null() {
            refused(layout.size());
        }
        ptr
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's guarantees for `realloc` are `System::realloc`'s.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if new.is_null() {
            refused(new_size);
        }
        new
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` (every allocation above does), with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// A refusal of `bytes`: returned to a fallible allocation, the end of the run otherwise.
fn refused(bytes: usize) {
    if !posenc::alloc::in_fallible_allocation() {
        out_of_memory(bytes);
    }
}

/// One line, the temporary files removed, exit status 1.
#[cold]
fn out_of_memory(bytes: usize) -> ! {
    thread_local! {
        static ENDING: Cell<bool> = const { Cell::new(false) };
    }
    static ONE_THREAD: AtomicBool = AtomicBool::new(false);
    // The cleanup may allocate; refused again on this thread, the run ends without it.
    let again = ENDING.try_with(|e| e.replace(true)).unwrap_or(true);
    if !again {
        if ONE_THREAD.swap(true, Ordering::SeqCst) {
            // Another thread is ending the run.
            loop {
                // SAFETY: pause(2) waits for a signal and touches no memory.
                unsafe { libc::pause() };
            }
        }
        posenc::output::remove_temporaries_now();
    }
    let mut line = Line { bytes: [0; 256], len: 0 };
    // Formatting integers and text into a fixed buffer allocates nothing.
    let _ = std::fmt::Write::write_fmt(
        &mut line,
        format_args!(
            "posenc: out of memory: {bytes} bytes could not be allocated (an address-space \
             limit such as ulimit -v, or no memory left)\n"
        ),
    );
    // SAFETY: write(2) reads `line.len` initialised bytes of the buffer, and _exit(2) ends
    // the process without running anything more that could allocate.
    unsafe {
        libc::write(2, line.bytes.as_ptr().cast(), line.len);
        libc::_exit(1)
    }
}

/// A line of at most 256 bytes, formatted without allocating (longer text is cut).
struct Line {
    bytes: [u8; 256],
    len: usize,
}

impl std::fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}
