//! The worker threads of the CPU path: rayon's global pool, started with as many threads as
//! the system lets start.
//!
//! rayon starts its global pool on first use, and if a worker thread cannot start (a process
//! limit such as `ulimit -u` or a container's pids limit, an address-space limit too small
//! for another stack) it panics ("The global thread pool has not been initialized"). Nor
//! can the pool be asked for again with fewer threads: rayon gives it one attempt. So a
//! program that must run under such limits calls [`start_threads`] first, which counts how
//! many threads can start before it asks, and when not even one can, makes the calling
//! thread the only thread of a pool of its own, which every parallel call from that thread
//! then uses.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// How [`start_threads`] left the CPU path's threads.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Threads {
    /// rayon's global pool has every worker thread asked for.
    All {
        /// How many.
        threads: usize,
    },
    /// rayon's global pool has fewer worker threads than were asked for: as many as could
    /// start.
    Fewer {
        /// How many it has.
        started: usize,
        /// How many were asked for (`RAYON_NUM_THREADS`, else the available parallelism).
        wanted: usize,
        /// Why more could not start: the system's reason.
        reason: String,
    },
    /// No worker thread could start: the thread that called [`start_threads`] is the only
    /// thread of a pool of its own and runs every parallel task it starts itself. Parallel
    /// calls from other threads would go to rayon's global pool, which has no threads: a
    /// program left in this state makes its CPU calls from that thread (the `posenc` binary
    /// makes them all from its main thread).
    CallingThreadOnly {
        /// How many were asked for.
        wanted: usize,
        /// Why none could start: the system's reason.
        reason: String,
    },
    /// The threads had been started before (by an earlier call, by the program, or by a
    /// parallel call that started rayon's global pool): left as they were.
    AlreadyStarted,
}

impl Threads {
    /// One line for the user when fewer threads run than were asked for; `None` otherwise.
    ///
    /// ```
    /// use posenc::cpu::threads::Threads;
    ///
    /// assert_eq!(Threads::All { threads: 8 }.note(), None);
    /// let fewer = Threads::Fewer { started: 2, wanted: 8, reason: "no more".into() };
    /// assert!(fewer.note().unwrap().starts_with("only 2 of 8 worker threads could start"));
    /// ```
    pub fn note(&self) -> Option<String> {
        match self {
            Threads::All { .. } | Threads::AlreadyStarted => None,
            Threads::Fewer { started, wanted, reason } => Some(format!(
                "only {started} of {wanted} worker threads could start ({reason}): the CPU path \
                 runs on fewer threads"
            )),
            Threads::CallingThreadOnly { wanted, reason } => Some(format!(
                "none of {wanted} worker threads could start ({reason}): the CPU path runs on \
                 the main thread alone"
            )),
        }
    }
}

/// The calling thread's own pool, when no worker thread could start: kept for the life of
/// the process, since the thread stays registered as its only thread.
static CALLING_THREAD_POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();

/// Starts the CPU path's threads: rayon's global pool with the number of worker threads
/// rayon would choose (`RAYON_NUM_THREADS`, else the available parallelism; at most
/// [`max_threads`], with a note past it), or as many of
/// them as can start, counted first by starting and stopping that many threads; with none,
/// the calling thread as the only thread of a pool of its own
/// ([`Threads::CallingThreadOnly`]). Call it once, before any CPU work, from the thread
/// that will make the CPU calls. Never fails: with no thread to spare the calling thread
/// does the work.
///
/// ```
/// use posenc::cpu::threads::{Threads, start_threads};
///
/// if let Some(note) = start_threads().note() {
///     eprintln!("note: {note}");
/// }
/// // Once started, the threads stay as they are.
/// assert_eq!(start_threads(), Threads::AlreadyStarted);
/// ```
pub fn start_threads() -> Threads {
    static CALLED: AtomicBool = AtomicBool::new(false);
    if CALLED.swap(true, Ordering::SeqCst) {
        return Threads::AlreadyStarted;
    }
    let (wanted, cores) = wanted_threads();
    let capped = wanted.min(max_threads(cores));
    let (started, mut reason) = startable_threads(capped);
    if started < wanted && started == capped {
        reason = format!("posenc starts at most {capped} on {cores} cores");
    }
    if started > 0 {
        let global = rayon::ThreadPoolBuilder::new()
            .num_threads(started)
            .thread_name(|i| format!("posenc-cpu-{i}"))
            .build_global();
        match global {
            Ok(()) if started == wanted => return Threads::All { threads: started },
            Ok(()) => return Threads::Fewer { started, wanted, reason },
            // A limit reached between the count and the start (another process of the same
            // user): the global pool is gone, the calling thread serves.
            Err(e) if std::error::Error::source(&e).is_some() => reason = e.to_string(),
            Err(_) => return Threads::AlreadyStarted,
        }
    }
    let alone = rayon::ThreadPoolBuilder::new().num_threads(1).use_current_thread().build();
    match alone {
        Ok(pool) => {
            let _ = CALLING_THREAD_POOL.set(pool);
            Threads::CallingThreadOnly { wanted, reason }
        }
        // The calling thread is already a thread of a pool, which serves it.
        Err(_) => Threads::AlreadyStarted,
    }
}

/// How many of `wanted` threads can start now, and the system's reason if not all: each is
/// started and left waiting until all are, then stopped and joined, and their exits are
/// waited for, since a thread counts against a process limit until the system has let it go.
fn startable_threads(wanted: usize) -> (usize, String) {
    let before = live_threads();
    let mut waiting = Vec::new();
    let mut reason = String::new();
    for _ in 0..wanted {
        let (release, wait) = mpsc::channel::<()>();
        let (ready, started) = mpsc::channel::<bool>();
        match std::thread::Builder::new().spawn(move || {
            // Each thread holds some memory of its own until all have started, so that the
            // count leaves room for what the pool's threads and their queues take beside
            // their stacks: counted at the edge of an address-space limit, a worker of the
            // pool could not map its signal stack, which the standard library aborts on.
            // (Through posenc's fallible allocation, whose refusal a program's allocator
            // lets through: see crate::alloc.)
            let headroom = crate::alloc::try_zeroed_vec::<u8>("a thread's headroom", HEADROOM);
            let _ = ready.send(headroom.is_ok());
            let _ = wait.recv();
            drop(headroom);
        }) {
            Ok(handle) if started.recv().unwrap_or(false) => waiting.push((release, handle)),
            Ok(handle) => {
                // Its stack fitted but not its share of the margin: not counted.
                drop(release);
                let _ = handle.join();
                reason = "no memory left for another thread".into();
                break;
            }
            Err(e) => {
                reason = e.to_string();
                break;
            }
        }
    }
    let started = waiting.len();
    for (release, handle) in waiting {
        drop(release);
        let _ = handle.join();
    }
    // A joined thread may still be counted for a moment; a second at most is waited for.
    if let Some(before) = before {
        for _ in 0..1000 {
            if live_threads().is_none_or(|now| now <= before) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    (started, reason)
}

/// The threads of this process the system counts (`Threads:` of `/proc/self/status`), where
/// that file exists.
fn live_threads() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Threads:"))?;
    line.trim().parse().ok()
}

/// The memory each counted thread must find beside its stack (see [`startable_threads`]).
const HEADROOM: usize = 256 << 10;

/// The number of worker threads rayon's global pool would have (`RAYON_NUM_THREADS` when it
/// is a positive number, else the available parallelism), and the available parallelism.
fn wanted_threads() -> (usize, usize) {
    let given = std::env::var("RAYON_NUM_THREADS").ok().and_then(|v| v.trim().parse().ok());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match given {
        Some(n) if n > 0 => (n, cores),
        _ => (cores, cores),
    }
}

/// How many worker threads [`start_threads`] asks for: `RAYON_NUM_THREADS` when it is a
/// positive number, else the available parallelism, at most [`max_threads`]. For a pool a
/// program builds itself where rayon's global one cannot serve (a forked child's).
pub fn pool_size() -> usize {
    let (wanted, cores) = wanted_threads();
    wanted.min(max_threads(cores))
}

/// The most worker threads posenc starts on `cores` cores: four per core, and at least 64.
/// Each thread takes a stack and a few memory mappings; `RAYON_NUM_THREADS=20000` ran the
/// system out of mappings (an abort, where the count expects an error) and spent tens of
/// seconds starting threads that a computation on `cores` cores cannot use.
pub fn max_threads(cores: usize) -> usize {
    cores.saturating_mul(4).max(64)
}

/// Runs `task` on each `size`-long chunk of `values`, with the chunk's index: on the
/// calling thread when `serial` (a small call, where waking the pool costs more than the
/// work: see each caller's threshold), else in rayon's tasks.
pub(crate) fn for_each_chunk<T: Send>(
    values: &mut [T],
    size: usize,
    serial: bool,
    task: impl Fn((usize, &mut [T])) + Sync + Send,
) {
    use rayon::prelude::*;
    if serial {
        values.chunks_mut(size).enumerate().for_each(task);
    } else {
        values.par_chunks_mut(size).enumerate().for_each(task);
    }
}
