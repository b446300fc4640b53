//! The asynchronous progress thread (`mpi_async_progress`, off by default as in Open MPI and
//! MPICH): started by `MPI_Init`/`MPI_Init_thread`, it drives the PML, the BTLs, the
//! registered progress functions and the non-blocking collectives while the program computes
//! outside MPI, so that a rendezvous transfer or an `MPI_Iallreduce` completes without the
//! program calling MPI again.
//!
//! # How it shares the library
//!
//! The library's state is confined to one thread at a time (see [`crate::state`]). With the
//! thread on, every MPI call holds the process lock (the FIFO ticket lock of
//! `MPI_THREAD_MULTIPLE`) whatever level the program asked for, and the thread runs its passes
//! under the same lock (`state::progress_pass`). It only ever *tries* the lock: when a
//! call of the program holds it (or waits for it) the thread does not queue, since a call in
//! MPI progresses by itself and a queued thread would make a blocking wait hand the lock over
//! on every pass. The level stays the one asked for: below `MPI_THREAD_SERIALIZED` only the
//! main thread may call, and any other is refused with the error naming the level (the state
//! compares it with the main thread's id, since between calls nobody owns the library).
//!
//! # When it runs
//!
//! [`AsyncPacer`] decides (sans IO, unit-tested in the framework): another pass at once while
//! passes handle events (a transfer is moving), a few idle passes, then sleeps of 10 us
//! doubling to 200 us while operations are outstanding; with nothing outstanding it sleeps on
//! a futex word until an MPI call ends (the call may have started an operation: `call_ended`,
//! one relaxed load per call otherwise) or 100 ms pass. While the program is inside MPI it
//! backs off from 50 us to 1 ms. No core is burnt when idle.
//!
//! # Placement
//!
//! The thread inherits the rank's CPU binding (`rmca-run --bind-to core`: the rank's core).
//! On a node with as many ranks as cores (2 ranks on 2 cores) every other core runs another
//! rank; sharing the rank's own core costs the computation only the thread's short passes,
//! since it sleeps whenever nothing moves, while a thread on another rank's core would take
//! time from that rank. `mpi_async_progress_cpu` binds it to one CPU instead (a spare core or
//! hyperthread on larger nodes).
//!
//! It is stopped and joined by `MPI_Finalize` (before the state is taken down) and by
//! `MPI_Abort`; a process that exits otherwise ends it with the process.

// A futex and the CPU affinity call: the two system calls of the thread.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;

use rmca::framework::progress::{AsyncAction, AsyncPacer};

use crate::state::{futex_wait, futex_wake};

/// The thread's name (`/proc/<pid>/task/<tid>/comm`, 15 bytes at most).
pub const THREAD_NAME: &str = "rmca-progress";

/// Set to end the thread.
static STOP: AtomicBool = AtomicBool::new(false);
/// Set (under the library lock) when the thread is about to sleep for want of work: the next
/// call that ends wakes it.
static ASLEEP: AtomicBool = AtomicBool::new(false);
/// The word the thread sleeps on: bumped to wake it.
static EPOCH: AtomicU32 = AtomicU32::new(0);
/// The thread's id (`state::this_thread`), 0 while none runs.
static TID: AtomicUsize = AtomicUsize::new(0);
/// The running thread.
static THREAD: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);

/// Start the thread (bound to `cpu` if given; else it inherits this thread's binding). Does
/// nothing if it runs already.
pub(crate) fn start(cpu: Option<u32>) -> std::io::Result<()> {
    let mut slot = THREAD.lock().unwrap_or_else(|p| p.into_inner());
    if slot.is_some() {
        return Ok(());
    }
    STOP.store(false, Ordering::SeqCst);
    ASLEEP.store(false, Ordering::SeqCst);
    let handle = std::thread::Builder::new()
        .name(THREAD_NAME.into())
        .spawn(move || run(cpu))?;
    *slot = Some(handle);
    tracing::debug!(?cpu, "mpi_async_progress: progress thread started");
    Ok(())
}

/// Stop the thread and join it (nothing if none runs). Called with the library lock held
/// (`MPI_Finalize`, `MPI_Abort`): the thread only tries the lock, so it never waits for it.
pub fn stop() {
    let Some(handle) = THREAD.lock().unwrap_or_else(|p| p.into_inner()).take() else {
        return;
    };
    STOP.store(true, Ordering::SeqCst);
    wake();
    if TID.load(Ordering::Relaxed) == crate::state::this_thread() {
        // Reached from the thread itself (a user reduction it ran called MPI_Finalize or
        // MPI_Abort): it ends when that returns; it cannot join itself.
        return;
    }
    if handle.join().is_err() {
        tracing::error!("mpi_async_progress: the progress thread panicked");
    }
    tracing::debug!("mpi_async_progress: progress thread joined");
}

/// Whether the progress thread runs.
pub fn running() -> bool {
    THREAD.lock().unwrap_or_else(|p| p.into_inner()).is_some()
}

/// `mpi_async_progress` set for a runtime that `MPI_Session_init` started (the sessions
/// model, no `MPI_Init` yet): no thread is started, and the program is told why rather than
/// left to find its non-blocking operations progressing only inside its calls.
pub(crate) fn not_for_sessions() {
    tracing::warn!(
        "mpi_async_progress: no progress thread for this process: MPI_Session_init started its runtime, and the thread serves a runtime started by MPI_Init/MPI_Init_thread only (they start it, MPI_Finalize stops it, and only they make every call take the lock the thread shares; an MPI_Init after the session joins this runtime without one). Non-blocking operations progress inside MPI calls only"
    );
}

/// An MPI call released the library lock: wake the thread if it sleeps for want of work.
#[inline(always)]
pub(crate) fn call_ended() {
    if ASLEEP.load(Ordering::Relaxed) {
        wake();
    }
}

#[cold]
#[inline(never)]
fn wake() {
    ASLEEP.store(false, Ordering::Relaxed);
    EPOCH.fetch_add(1, Ordering::SeqCst);
    futex_wake(&EPOCH, 1);
}

/// The thread's loop.
fn run(cpu: Option<u32>) {
    TID.store(crate::state::this_thread(), Ordering::Relaxed);
    if let Some(cpu) = cpu {
        bind_to(cpu);
    }
    let mut pacer = AsyncPacer::default();
    let mut seen = 0;
    while !STOP.load(Ordering::Acquire) {
        let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::state::progress_pass(|| {
                // Under the lock: a call that takes it after this sees ASLEEP and wakes us;
                // one that ended before was seen by this pass.
                seen = EPOCH.load(Ordering::SeqCst);
                ASLEEP.store(true, Ordering::SeqCst);
            })
        }));
        let pass = match attempt {
            Ok(p) => p,
            Err(_) => {
                // The pass released the lock as it unwound; the program's own calls still
                // progress, only without the thread.
                tracing::error!("mpi_async_progress: a progress pass panicked; the thread stops");
                break;
            }
        };
        match pacer.next(pass) {
            AsyncAction::Again => {}
            AsyncAction::Sleep(d) => std::thread::sleep(d),
            AsyncAction::AwaitWork(d) => {
                if !STOP.load(Ordering::Acquire) {
                    futex_wait(&EPOCH, seen, d);
                }
                ASLEEP.store(false, Ordering::Relaxed);
            }
        }
    }
    ASLEEP.store(false, Ordering::Relaxed);
    TID.store(0, Ordering::Relaxed);
}

/// Bind the calling thread to `cpu`; a failure (a CPU outside the allowed set) is logged and
/// the thread keeps its inherited binding.
fn bind_to(cpu: u32) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it for an index below
    // CPU_SETSIZE (checked); sched_setaffinity(0, ..) reads the set for the calling thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu as usize >= libc::CPU_SETSIZE as usize {
            -1
        } else {
            libc::CPU_SET(cpu as usize, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
        }
    };
    if rc != 0 {
        tracing::warn!(
            cpu,
            error = %std::io::Error::last_os_error(),
            "mpi_async_progress_cpu: cannot bind the progress thread there; it keeps the rank's binding"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::time::{Duration, Instant};

    /// The `.rs` files under `dir`, recursively.
    fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).expect("a source directory") {
            let p = e.expect("an entry").path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// With the thread on below `MPI_THREAD_SERIALIZED`, a call from another thread than the
    /// main one is refused by `state::entered`, reached from the entry points that `#[export]`
    /// makes (their slow path, taken whenever the thread runs). A C entry point exported any
    /// other way (`#[no_mangle]`, `#[export_name]`) would skip it and run beside the thread's
    /// passes: none may exist in the C library's crates.
    #[test]
    fn every_mpi_entry_point_is_made_by_the_export_attribute() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        sources(&root.join("src"), &mut files);
        sources(&root.join("libmpi/src"), &mut files);
        let mut entries = 0;
        for f in &files {
            let text = std::fs::read_to_string(f).expect("a source file");
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            for (i, line) in lines.iter().enumerate() {
                if line.starts_with("//") {
                    continue;
                }
                // `#[no_mangle]`, `#[unsafe(no_mangle)]`, `#[export_name = ..]`.
                assert!(
                    !(line.starts_with("#[")
                        && (line.contains("no_mangle") || line.contains("export_name"))),
                    "{}:{}: a symbol exported around #[export]: {line}",
                    f.display(),
                    i + 1
                );
                let Some(at) = line.find("extern \"C\" fn ") else {
                    continue;
                };
                let name = &line[at + 14..];
                if !(name.starts_with("MPI_")
                    || name.starts_with("PMPI_")
                    || name.starts_with("MPIX_"))
                {
                    continue;
                }
                // The attributes and doc comments above the function.
                let exported = lines[..i]
                    .iter()
                    .rev()
                    .take_while(|l| l.starts_with("#[") || l.starts_with("///"))
                    .any(|l| l.starts_with("#[export]") || l.contains("export::export]"));
                assert!(
                    exported,
                    "{}:{}: {name} is not made by #[export], so it skips the thread check",
                    f.display(),
                    i + 1
                );
                entries += 1;
            }
        }
        assert!(
            entries > 300,
            "only {entries} entry points found: the scan is broken"
        );
    }

    #[test]
    fn a_futex_sleep_ends_on_a_wake_or_at_its_timeout() {
        static W: AtomicU32 = AtomicU32::new(0);
        let t = Instant::now();
        futex_wait(&W, 0, Duration::from_millis(20));
        assert!(
            t.elapsed() >= Duration::from_millis(15),
            "slept to the timeout"
        );
        // A changed word returns at once.
        W.store(1, Ordering::SeqCst);
        let t = Instant::now();
        futex_wait(&W, 0, Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(1));
        // A wake ends a long sleep early.
        let sleeper = std::thread::spawn(|| {
            let t = Instant::now();
            futex_wait(&W, 1, Duration::from_secs(5));
            t.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        W.store(2, Ordering::SeqCst);
        futex_wake(&W, 1);
        assert!(sleeper.join().unwrap() < Duration::from_secs(4));
    }
}
