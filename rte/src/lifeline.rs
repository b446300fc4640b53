//! What a rank does when its launcher dies: remove the files it created, then die.
//!
//! `rmca-run` makes [`launcher_death_signal`] each rank's parent-death signal
//! (`PR_SET_PDEATHSIG`) and names it in [`ENV_LAUNCHER_DEATH_SIGNAL`](crate::ENV_LAUNCHER_DEATH_SIGNAL).
//! [`Rte::init`](crate::Rte::init) then calls [`expect_launcher_death_signal`], which installs a
//! handler for that signal: it unlinks every path registered with [`remove_on_launcher_death`]
//! and re-raises the signal with its default action, so the rank still dies of it.
//!
//! Why a signal rather than `SIGKILL` plus something else: nothing else survives the launcher to
//! clean up, and a process killed by `SIGKILL` runs no code. A signal interrupts whatever the
//! rank does, so a rank blocked in a long computation dies as promptly as with `SIGKILL`. The
//! signal's default action is to terminate, so a process that has not installed the handler yet
//! (a wrapper script, a rank before `Rte::init`) dies as before, having created nothing. A thread
//! of ours keeps the signal unblocked, so a program that blocks it in all of its own threads
//! still gets it.
//!
//! Register a path *before* creating the file: the file then never exists unregistered.
//!
//! Limits: the signal belongs to rmca-run; a program that installs its own handler for it after
//! `Rte::init` loses the cleanup. A launcher that kills its ranks with `SIGKILL` itself (Hydra's
//! proxy does when `mpiexec` dies) leaves no chance to clean up; a launch agent that forks the
//! rank (ssh) passes the signal to the agent only.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};

use crate::RteError;

/// How many paths may be registered at once (a rank creates a handful).
pub const MAX_PATHS: usize = 64;

/// Registered paths as NUL-terminated strings owned by the table (null: free slot). The handler
/// reads them without locks, so a slot's string is only freed when no handler can be reading it.
static PATHS: [AtomicPtr<c_char>; MAX_PATHS] =
    [const { AtomicPtr::new(ptr::null_mut()) }; MAX_PATHS];
/// Set by the handler before it reads [`PATHS`]: from then on strings are leaked, not freed.
static IN_HANDLER: AtomicBool = AtomicBool::new(false);
/// The signal the handler is installed for (0: none).
static ARMED: AtomicI32 = AtomicI32::new(0);

/// The signal `rmca-run` sends its ranks when it dies: the last real-time signal, which no
/// common library uses and whose default action terminates the process.
pub fn launcher_death_signal() -> i32 {
    libc::SIGRTMAX()
}

/// The signals [`expect_launcher_death_signal`] accepts (the real-time ones), for messages.
fn valid_range() -> std::ops::RangeInclusive<i32> {
    libc::SIGRTMIN()..=libc::SIGRTMAX()
}

/// A path removed if this process gets the launcher-death signal, until this value is dropped.
#[derive(Debug)]
#[must_use = "dropping it unregisters the path at once"]
pub struct RemoveOnDeath {
    slot: usize,
}

/// Register `path` (absolute) to be unlinked if the launcher dies, before creating the file.
/// Dropping the returned value unregisters it (after removing the file, or to keep it).
/// Works, and costs nothing, also when no launcher announced a death signal.
pub fn remove_on_launcher_death(path: &Path) -> Result<RemoveOnDeath, RteError> {
    let bad = |why: String| RteError::Cleanup {
        path: path.display().to_string(),
        why,
    };
    if !path.is_absolute() {
        return Err(bad(
            "must be an absolute path (the working directory may change before it is removed)"
                .into(),
        ));
    }
    let c =
        CString::new(path.as_os_str().as_bytes()).map_err(|_| bad("contains a NUL byte".into()))?;
    let raw = c.into_raw();
    for (slot, p) in PATHS.iter().enumerate() {
        if p.compare_exchange(ptr::null_mut(), raw, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
        {
            return Ok(RemoveOnDeath { slot });
        }
    }
    // SAFETY: `raw` came from `into_raw` above and was never published.
    drop(unsafe { CString::from_raw(raw) });
    Err(bad(format!(
        "{MAX_PATHS} paths are registered already (drop a registration first)"
    )))
}

impl Drop for RemoveOnDeath {
    fn drop(&mut self) {
        let p = PATHS[self.slot].swap(ptr::null_mut(), Ordering::SeqCst);
        // Both SeqCst: if the handler's flag store comes later in the total order, its loads of
        // PATHS come after our swap and cannot see `p`; otherwise we see the flag and leak `p`
        // (the process is about to die anyway).
        if !p.is_null() && !IN_HANDLER.load(Ordering::SeqCst) {
            // SAFETY: `p` came from `CString::into_raw` in remove_on_launcher_death, this slot
            // was its only owner and is cleared, and no handler is reading it (see above).
            drop(unsafe { CString::from_raw(p) });
        }
    }
}

extern "C" fn on_launcher_death(sig: c_int) {
    // Only async-signal-safe calls below: atomics, unlink, signal, raise.
    IN_HANDLER.store(true, Ordering::SeqCst);
    for p in &PATHS {
        let path = p.load(Ordering::SeqCst);
        if !path.is_null() {
            // SAFETY: a NUL-terminated string of the table, never freed once IN_HANDLER is set.
            unsafe { libc::unlink(path) };
        }
    }
    // SAFETY: restoring the default action and raising the signal again: it stays pending while
    // this handler runs (the kernel blocks it here) and terminates the process on return.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Install the handler for `sig`, the signal the launcher sends when it dies (see the module
/// documentation), and start a thread that keeps it unblocked. Idempotent for the same signal.
pub fn expect_launcher_death_signal(sig: i32) -> Result<(), RteError> {
    if !valid_range().contains(&sig) {
        return Err(RteError::Env {
            var: crate::ENV_LAUNCHER_DEATH_SIGNAL.into(),
            value: sig.to_string(),
            why: format!(
                "expected a real-time signal number, {}..={}",
                valid_range().start(),
                valid_range().end()
            ),
        });
    }
    match ARMED.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => {}
        Err(old) if old == sig => return Ok(()),
        Err(old) => {
            return Err(RteError::Env {
                var: crate::ENV_LAUNCHER_DEATH_SIGNAL.into(),
                value: sig.to_string(),
                why: format!("this process already handles signal {old} as its launcher's death"),
            })
        }
    }
    // SAFETY: sigaction is plain data (zeroed is valid); the handler only makes
    // async-signal-safe calls; `old` is a valid out-pointer.
    let previous = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_launcher_death as extern "C" fn(c_int) as libc::sighandler_t;
        // Other handlers of the program must not run in the middle of the cleanup.
        libc::sigfillset(&mut sa.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, &sa, &mut old) != 0 {
            let e = std::io::Error::last_os_error();
            ARMED.store(0, Ordering::SeqCst);
            return Err(RteError::Io {
                op: format!("install the handler of signal {sig} (launcher death)"),
                source: e,
            });
        }
        old.sa_sigaction
    };
    if previous != libc::SIG_DFL {
        tracing::warn!(
            signal = sig,
            "replaced the program's own disposition of signal {sig}: rmca-run sends it when it dies"
        );
    }
    let spawned = std::thread::Builder::new()
        .name("rmca-lifeline".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            unblock(sig);
            loop {
                std::thread::park();
            }
        });
    if let Err(e) = spawned {
        // The handler still runs on any thread of the program that does not block the signal.
        tracing::warn!(error = %e, "no thread to keep signal {sig} unblocked");
    }
    tracing::debug!(signal = sig, "launcher-death handler installed");
    Ok(())
}

/// Unblock `sig` in the calling thread.
fn unblock(sig: i32) {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use; pthread_sigmask
    // only changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_are_validated_bounded_and_released() {
        assert!(matches!(
            remove_on_launcher_death(Path::new("relative/file")),
            Err(RteError::Cleanup { .. })
        ));
        let e = remove_on_launcher_death(Path::new("/dev/shm/a\0b")).unwrap_err();
        assert!(e.to_string().contains("NUL"), "{e}");
        // Other tests of this process may hold slots: fill what is left.
        let mut held = Vec::new();
        let full = loop {
            match remove_on_launcher_death(Path::new("/nonexistent/rmca-lifeline-test")) {
                Ok(r) => held.push(r),
                Err(e) => break e,
            }
            assert!(held.len() <= MAX_PATHS, "the table is bounded");
        };
        assert!(full.to_string().contains("registered already"), "{full}");
        held.pop();
        let again = remove_on_launcher_death(Path::new("/nonexistent/rmca-lifeline-test"));
        assert!(again.is_ok(), "a dropped registration frees its slot");
    }

    #[test]
    fn only_real_time_signals_are_accepted() {
        for sig in [0, libc::SIGKILL, libc::SIGTERM, libc::SIGRTMAX() + 1] {
            let e = expect_launcher_death_signal(sig).unwrap_err().to_string();
            assert!(e.contains("real-time signal"), "{e}");
        }
    }
}
