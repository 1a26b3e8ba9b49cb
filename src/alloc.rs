//! Fallible allocation of the buffers a request sizes (outputs, input arrays): where the
//! allocator refuses (an address-space limit such as `ulimit -v`, or no memory left),
//! [`Error::Alloc`] naming the buffer and its bytes instead of the abort an infallible
//! allocation would be.
//!
//! A program may also make every other refusal end it cleanly, with a global allocator that
//! exits when the system allocator returns null (the `posenc` binary's does, in one line);
//! such an allocator must let the refusals of this module's functions through, which
//! [`in_fallible_allocation`] tells it.

use std::cell::Cell;

use ndarray::{Array, Dimension, IntoDimension};

use crate::error::{Error, Result};

thread_local! {
    /// Set while one of this module's allocations runs: its refusal is an error to return.
    static FALLIBLE: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is inside one of this module's fallible allocations, whose
/// refusal must reach the caller as [`Error::Alloc`]: for a program's global allocator that
/// ends the process on any other refusal.
///
/// ```
/// assert!(!posenc::alloc::in_fallible_allocation());
/// ```
pub fn in_fallible_allocation() -> bool {
    FALLIBLE.try_with(Cell::get).unwrap_or(false)
}

/// Runs `allocate` marked as fallible ([`in_fallible_allocation`]).
fn fallibly<T>(allocate: impl FnOnce() -> T) -> T {
    let outer = FALLIBLE.replace(true);
    let result = allocate();
    FALLIBLE.set(outer);
    result
}

/// A vector of `len` zeroed values, or [`Error::Alloc`] naming `what` and the bytes if the
/// allocator refuses (an address-space limit such as `ulimit -v`, or no memory left), where
/// `vec![0; len]` would abort the process.
///
/// ```
/// let v: Vec<f32> = posenc::alloc::try_zeroed_vec("a buffer", 4)?;
/// assert_eq!(v, [0.0; 4]);
/// let huge = posenc::alloc::try_zeroed_vec::<f32>("an impossible buffer", usize::MAX / 4);
/// assert!(matches!(huge, Err(posenc::Error::Alloc { .. })));
/// # Ok::<(), posenc::Error>(())
/// ```
///
/// # Errors
/// [`Error::Alloc`] if the memory cannot be had.
pub fn try_zeroed_vec<T: bytemuck::Zeroable + Clone>(
    what: &'static str,
    len: usize,
) -> Result<Vec<T>> {
    let mut v = try_zeroed_vec_unadvised(what, len)?;
    advise_huge_pages(&mut v);
    Ok(v)
}

/// [`try_zeroed_vec`] without the huge-page advice.
fn try_zeroed_vec_unadvised<T: bytemuck::Zeroable + Clone>(
    what: &'static str,
    len: usize,
) -> Result<Vec<T>> {
    let bytes = (len as u64).saturating_mul(size_of::<T>() as u64);
    // Where the system overcommits, the allocation below succeeds past the memory there is,
    // and the OOM killer ends the process once the caller writes it (round eighteen: a
    // sparse file read whole).
    if past_host_memory(bytes).is_some() {
        return Err(Error::Alloc { what, bytes });
    }
    // A zeroed allocation: the kernel maps its pages lazily, where a reserve and a fill
    // would write every page once before the caller does.
    fallibly(|| bytemuck::allocation::try_zeroed_vec(len))
        .map_err(|()| Error::Alloc { what, bytes })
}

/// Whether [`advise_huge_pages`] gives its advice (by default it does).
static HUGE_PAGES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether [`advise_huge_pages`] gives its advice: yes unless [`set_huge_pages`] said no.
///
/// ```
/// posenc::alloc::set_huge_pages(false);
/// assert!(!posenc::alloc::huge_pages());
/// posenc::alloc::set_huge_pages(true);
/// assert!(posenc::alloc::huge_pages());
/// ```
pub fn huge_pages() -> bool {
    HUGE_PAGES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Turns [`advise_huge_pages`]'s advice on or off for the whole process (as NumPy's
/// `_set_madvise_hugepage` does for its arrays): for a program whose latency cannot take the
/// kernel's occasional compaction of memory to find a huge page. Memory already advised keeps
/// its advice. Setting the kernel's THP mode to `never` turns it off for every program.
pub fn set_huge_pages(on: bool) {
    HUGE_PAGES.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Bytes from which a fresh buffer is advised to be backed by huge pages
/// ([`advise_huge_pages`]): NumPy's threshold for the same advice, 4 MiB.
pub const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

/// Asks Linux to back `memory` with transparent huge pages when it spans at least
/// [`HUGE_PAGE_MIN_BYTES`] (`madvise(MADV_HUGEPAGE)` over the 2 MiB blocks inside it), before
/// anything is written to it; elsewhere, and for smaller buffers, it does nothing. NumPy
/// gives every array of 4 MiB or more the same advice.
///
/// A fresh output of that size is mapped by the allocator without being touched, and its
/// first writes fault it in: one fault per 4 KiB page, each a trip into the kernel and a
/// page cleared, where one fault per 2 MiB clears the same bytes in one go. Writing a 32 MiB
/// table into a fresh array took 2.6 - 3.0x as long as writing it into one already faulted
/// in, and about 1.5x with this advice in most runs (`examples/fresh_output_probe.rs`;
/// docs/performance.md, Fresh outputs). Where the kernel's THP setting is `never`, or the
/// huge pages cannot be had, the advice changes nothing; memory already touched keeps its
/// pages. The advice belongs to the address range, not to the buffer: where the allocator
/// hands the range out again after the buffer is freed (glibc serves requests of 4 - 32 MiB
/// from its heap once it has freed a mapping of that size), what it holds next is advised
/// too, as it is after NumPy's advice.
///
/// ```
/// let mut v: Vec<f32> = posenc::alloc::try_zeroed_vec("a buffer", 1 << 21)?; // advised
/// posenc::alloc::advise_huge_pages(&mut v); // advice given twice does no harm
/// v.fill(1.0);
/// assert!(v.iter().all(|&x| x == 1.0));
/// # Ok::<(), posenc::Error>(())
/// ```
pub fn advise_huge_pages<T>(memory: &mut [T]) {
    #[cfg(target_os = "linux")]
    {
        let bytes = size_of_val(memory);
        if bytes < HUGE_PAGE_MIN_BYTES || !huge_pages() {
            return;
        }
        // The 2 MiB blocks inside the buffer, which are what a huge page backs: the advice
        // must not reach memory the buffer does not own, and 2 MiB is a multiple of every
        // base page size, as madvise requires of the start.
        const BLOCK: usize = 2 << 20;
        let start = memory.as_mut_ptr() as usize;
        let (first, end) = (start.next_multiple_of(BLOCK), (start + bytes) & !(BLOCK - 1));
        if end > first {
            // SAFETY: [first, end) lies inside `memory`, which this function borrows
            // mutably; MADV_HUGEPAGE changes how its pages are backed, never their contents,
            // and its failure (a kernel without THP) is harmless.
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = memory;
}

/// An array of `shape` filled with zeros, allocated as [`try_zeroed_vec`] does.
///
/// # Errors
/// [`Error::Alloc`] if the memory cannot be had or the element count overflows `usize`.
pub fn try_zeros<T: bytemuck::Zeroable + Clone, D: Dimension>(
    what: &'static str,
    shape: impl IntoDimension<Dim = D>,
) -> Result<Array<T, D>> {
    let mut out = try_zeros_unadvised(what, shape)?;
    advise_huge_pages(out.as_slice_mut().expect("a new array is contiguous"));
    Ok(out)
}

/// [`try_zeros`] without the huge-page advice: for a result its filling advises (the CPU's
/// cos/sin table), or one that did without it when it was allocated infallibly (the RoPE
/// cache's cos and sin), so that making it fallible changes nothing else. On the
/// development VM, whose host reclaims free memory, advising those two made `posenc
/// rope-cache` of 300000 positions at head dim 128 take 0.82 - 1.20 s against 0.56 - 0.58
/// s (2026-12-02; docs/performance.md, Fresh outputs, says why such faults vary there).
///
/// # Errors
/// As [`try_zeros`].
pub(crate) fn try_zeros_unadvised<T: bytemuck::Zeroable + Clone, D: Dimension>(
    what: &'static str,
    shape: impl IntoDimension<Dim = D>,
) -> Result<Array<T, D>> {
    let shape = shape.into_dimension();
    let len = shape.size_checked().ok_or(Error::Alloc { what, bytes: u64::MAX })?;
    let data = try_zeroed_vec_unadvised(what, len)?;
    Array::from_shape_vec(shape, data).map_err(|e| Error::Shape {
        op: "allocate",
        what,
        expected: format!("{len} elements"),
        actual: e.to_string(),
    })
}

/// Checks that `bytes` could be allocated now, by reserving and releasing them, for a
/// result that a function allocates itself (the GPU paths' host copies). Under an
/// address-space limit the function's own allocation then succeeds as the check did, and a
/// request too large fails here with an error rather than aborting there. Where the system
/// overcommits, a reservation always succeeds: a request of 64 MiB or more is also weighed
/// against the host memory available (Linux's `MemAvailable` and free swap, or less where
/// the process's memory cgroup leaves less), past which the OOM killer, not an error,
/// would end it. [`try_zeroed_vec`] and [`try_zeros`] weigh theirs too.
///
/// # Errors
/// [`Error::Alloc`] naming `what` and `bytes` if the memory cannot be had.
pub fn check_allocation(what: &'static str, bytes: u64) -> Result<()> {
    let len = usize::try_from(bytes).map_err(|_| Error::Alloc { what, bytes })?;
    if past_host_memory(bytes).is_some() {
        return Err(Error::Alloc { what, bytes });
    }
    fallibly(|| Vec::<u8>::new().try_reserve_exact(len)).map_err(|_| Error::Alloc { what, bytes })
}

/// Requests below this are not weighed against the host memory available: reading it costs
/// tens of microseconds, and no host is short of so little.
const WEIGHED: u64 = 64 << 20;

/// The host memory available ([`host_available`]) when `bytes` (at least 64 MiB) is more
/// than it, else `None`.
pub(crate) fn past_host_memory(bytes: u64) -> Option<u64> {
    if bytes < WEIGHED {
        return None;
    }
    host_available().filter(|&available| bytes > available)
}

/// Bytes of host memory available to new allocations: Linux's `MemAvailable` and free
/// swap, or less where the process's memory cgroup (a container's limit, v1 or
/// v2, its own or one above it) leaves less; `None` where the system does not say. A CPU
/// adapter's (lavapipe's, llvmpipe's) device memory is host memory: a buffer larger than
/// this would end the process (the OOM killer), not fail with an error.
pub(crate) fn host_available() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
        let available = meminfo.as_deref().and_then(mem_available);
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok();
        let left =
            cgroups.as_deref().and_then(|c| cgroup_left(c, |p| std::fs::read_to_string(p).ok()));
        match (available, left) {
            (Some(a), Some(l)) => Some(a.min(l)),
            (a, l) => a.or(l),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// `MemAvailable` plus `SwapFree` (the OOM killer strikes once both are spent) of
/// `/proc/meminfo`'s text, in bytes.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn mem_available(meminfo: &str) -> Option<u64> {
    let kib = |key: &str| {
        let line = meminfo.lines().find_map(|l| l.strip_prefix(key))?;
        line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
    };
    let kib = kib("MemAvailable:")?.checked_add(kib("SwapFree:").unwrap_or(0))?;
    kib.checked_mul(1024)
}

/// The least a memory cgroup of the process leaves (its limit less its usage, less the
/// inactive file pages the kernel reclaims first), over the
/// cgroups `/proc/self/cgroup`'s text names and those above them: cgroup v2's `memory.max`
/// and `memory.current` under `/sys/fs/cgroup`, v1's `memory.limit_in_bytes` and
/// `memory.usage_in_bytes` under `/sys/fs/cgroup/memory`. `read` reads a file's text.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn cgroup_left(cgroups: &str, read: impl Fn(&std::path::Path) -> Option<String>) -> Option<u64> {
    let mut least: Option<u64> = None;
    for line in cgroups.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (root, limit, usage) = if controllers.is_empty() {
            ("/sys/fs/cgroup", "memory.max", "memory.current")
        } else if controllers.split(',').any(|c| c == "memory") {
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes")
        } else {
            continue;
        };
        // The page cache a cgroup's usage counts and the kernel reclaims before it kills:
        // its inactive file pages (the working set a container's OOM killer weighs).
        let cache_key =
            if controllers.is_empty() { "inactive_file " } else { "total_inactive_file " };
        let root = std::path::Path::new(root);
        let mut dir = root.join(path.trim_start_matches('/'));
        loop {
            // v2's "max" (no limit) is not a number: no bound.
            let number = |file| read(&dir.join(file))?.trim().parse::<u64>().ok();
            if let (Some(limit), Some(usage)) = (number(limit), number(usage)) {
                let stat = read(&dir.join("memory.stat")).unwrap_or_default();
                let cache = stat
                    .lines()
                    .find_map(|l| l.strip_prefix(cache_key))
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .unwrap_or(0);
                let left = limit.saturating_sub(usage.saturating_sub(cache));
                least = Some(least.map_or(left, |l| l.min(left)));
            }
            if dir == root || !dir.pop() {
                break;
            }
        }
    }
    least
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_requests_are_weighed_against_the_host_memory() {
        assert_eq!(past_host_memory(1 << 20), None, "small requests are not weighed");
        #[cfg(target_os = "linux")]
        {
            // Margins wide enough for the memory other processes take or free meanwhile (a
            // host with little memory left has nothing to weigh here).
            let available = host_available().unwrap();
            if available >= 4 * WEIGHED {
                assert_eq!(past_host_memory(available / 4), None);
                assert!(past_host_memory(available.saturating_mul(4)).is_some());
            }
        }
    }

    /// Round eighteen: an overcommitting kernel may grant a zeroed allocation past the
    /// memory there is, and the OOM killer ends the process once it is written; refused
    /// whether or not the kernel would have granted it (its heuristic varies with the
    /// machine's memory and swap).
    #[cfg(target_os = "linux")]
    #[test]
    fn allocations_past_the_host_memory_are_refused_before_the_kernel_grants_them() {
        let available = host_available().unwrap();
        if available < 4 * WEIGHED {
            return; // nothing here to weigh
        }
        let past = available + available / 4;
        match try_zeroed_vec::<u8>("a buffer past the host memory", past as usize) {
            Err(Error::Alloc { bytes, .. }) => assert_eq!(bytes, past),
            other => panic!("{:?}", other.map(|v| v.len())),
        }
    }

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(mem_available(text), Some(20_000_000 * 1024));
        let swap = format!("{text}SwapTotal: 8000 kB\nSwapFree:       4000 kB\n");
        assert_eq!(mem_available(&swap), Some(20_004_000 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: lots\n"), None);
        #[cfg(target_os = "linux")]
        assert!(host_available().is_some_and(|b| b > 0));
    }

    #[test]
    fn a_memory_cgroup_bounds_what_is_available() {
        use std::collections::HashMap;
        use std::path::Path;
        let files: HashMap<&str, &str> = [
            // v2: the container's own cgroup has no limit, the one above it 8 GiB.
            ("/sys/fs/cgroup/pod/app/memory.max", "max\n"),
            ("/sys/fs/cgroup/pod/app/memory.current", "100\n"),
            ("/sys/fs/cgroup/pod/memory.max", "8589934592\n"),
            ("/sys/fs/cgroup/pod/memory.current", "2147483648\n"),
            // Half of its usage is page cache the kernel reclaims first.
            ("/sys/fs/cgroup/pod/memory.stat", "anon 1073741824\ninactive_file 1073741824\n"),
            // v1: unlimited (its largest page-aligned value).
            ("/sys/fs/cgroup/memory/job/memory.limit_in_bytes", "9223372036854771712"),
            ("/sys/fs/cgroup/memory/job/memory.usage_in_bytes", "4096"),
        ]
        .into();
        let read = |p: &Path| files.get(p.to_str().unwrap()).map(|s| s.to_string());
        assert_eq!(cgroup_left("0::/pod/app\n", read), Some(7 << 30));
        assert_eq!(cgroup_left("4:memory:/job\n1:cpu:/\n", read), Some(9223372036854767616));
        assert_eq!(cgroup_left("0::/pod/app\n4:memory:/job\n", read), Some(7 << 30));
        assert_eq!(cgroup_left("1:cpu:/\n", read), None);
        assert_eq!(cgroup_left("garbage\n0::/elsewhere\n", read), None);
    }

    /// The `VmFlags` of the mapping of /proc/self/smaps that holds `address`.
    #[cfg(target_os = "linux")]
    fn vm_flags_at(address: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().and_then(|r| r.split_once('-'));
            if let Some((lo, hi)) = range
                && let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&address);
            } else if inside && let Some(flags) = line.strip_prefix("VmFlags:") {
                return flags.trim().to_string();
            }
        }
        panic!("no mapping holds {address:#x}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn large_fresh_buffers_are_advised_to_take_huge_pages_and_small_ones_not() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            return; // a kernel built without THP refuses the advice
        }
        // `hg` in a mapping's VmFlags is MADV_HUGEPAGE's mark. The advice covers the 2 MiB
        // blocks inside the buffer, so the middle of a 16 MiB one is always advised.
        let big: Vec<f32> = try_zeroed_vec("a large output", 4 << 20).unwrap();
        let middle = big.as_ptr() as usize + (8 << 20);
        assert!(vm_flags_at(middle).split(' ').any(|f| f == "hg"), "{}", vm_flags_at(middle));
        assert!(big.iter().all(|&v| v == 0.0));
        // Below the threshold nothing is advised, at or above it the blocks inside. A fresh
        // mapping of its own, where no earlier advice can be.
        let len = 16 << 20;
        // SAFETY: an anonymous private mapping, unmapped below and used only in between.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let at = (base as usize).next_multiple_of(2 << 20);
        // SAFETY: [at, at + 8 MiB) lies inside the 16 MiB mapping.
        let memory = unsafe { std::slice::from_raw_parts_mut(at as *mut u8, 8 << 20) };
        advise_huge_pages(&mut memory[..HUGE_PAGE_MIN_BYTES - 1]);
        assert!(!vm_flags_at(at).split(' ').any(|f| f == "hg"), "{}", vm_flags_at(at));
        advise_huge_pages(&mut memory[..HUGE_PAGE_MIN_BYTES]);
        assert!(vm_flags_at(at).split(' ').any(|f| f == "hg"), "{}", vm_flags_at(at));
        // Only whole 2 MiB blocks: the one past the advised 4 MiB is not.
        let past = at + HUGE_PAGE_MIN_BYTES;
        assert!(!vm_flags_at(past).split(' ').any(|f| f == "hg"), "{}", vm_flags_at(past));
        // SAFETY: the mapping made above, no longer borrowed.
        assert_eq!(unsafe { libc::munmap(base, len) }, 0);
    }

    #[test]
    fn an_allocation_too_large_is_an_error_naming_the_bytes() {
        match try_zeroed_vec::<f32>("the test buffer", usize::MAX / 8) {
            Err(Error::Alloc { what, bytes }) => {
                assert_eq!(what, "the test buffer");
                assert_eq!(bytes, (usize::MAX / 8) as u64 * 4);
            }
            other => panic!("{:?}", other.map(|v| v.len())),
        }
        assert!(matches!(check_allocation("probe", u64::MAX), Err(Error::Alloc { .. })));
        assert!(check_allocation("probe", 1 << 20).is_ok());
        let a = try_zeros::<u16, _>("an array", (2, 3, 4)).unwrap();
        assert_eq!(a.shape(), [2, 3, 4]);
        assert!(a.iter().all(|&v| v == 0));
        match try_zeros::<f32, _>("overflowing", (usize::MAX, 2)) {
            Err(Error::Alloc { what: "overflowing", .. }) => {}
            other => panic!("{:?}", other.map(|a| a.len())),
        }
    }
}
