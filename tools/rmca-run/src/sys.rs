//! The launcher's few system calls that std does not wrap: the only module with `unsafe`.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::monitor::Exit;

/// Put the child in its own process group (so teardown reaches everything it forks), make it
/// die if the launcher dies, and let it inherit `keep_fd` (its end of the PMI socketpair).
pub fn configure_child(cmd: &mut Command, launcher_pid: u32, keep_fd: Option<RawFd>) {
    cmd.process_group(0);
    // SAFETY: the closure runs in the forked child before exec and only calls
    // async-signal-safe functions (prctl, getppid, fcntl, _exit); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The launcher may have died between fork and prctl: then nobody would kill us.
            if libc::getppid() as u32 != launcher_pid {
                libc::_exit(1);
            }
            if let Some(fd) = keep_fd {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Block until process `pid` (our child) has exited, WITHOUT reaping it: while the zombie
/// exists its process-group id cannot be reused, so the caller can still safely kill the group
/// (leftover grandchildren) before reaping with `Child::wait`.
pub fn wait_exit_nowait(pid: u32) -> io::Result<Exit> {
    loop {
        // SAFETY: siginfo_t is plain data; zeroed is a valid value for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid, writable siginfo_t; P_PID with our own child's pid.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: waitid succeeded for a child state change, so si_status is initialised.
        let status = unsafe { info.si_status() };
        return Ok(match info.si_code {
            libc::CLD_EXITED => Exit::Code(status),
            _ => Exit::Signal(status),
        });
    }
}

/// Send `sig` to process group `pgid`; a group that no longer exists is not an error.
pub fn kill_group(pgid: u32, sig: i32) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: killpg has no memory-safety preconditions; pgid > 1 never targets init or
    // our own group by accident (children have their own groups).
    unsafe {
        libc::killpg(pgid as libc::pid_t, sig);
    }
}

static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    PENDING_SIGNAL.store(sig, Ordering::SeqCst);
}

/// Record SIGINT, SIGTERM and SIGHUP instead of dying, so the launcher tears the job down
/// (and removes shared memory) first. Poll with [`take_signal`].
pub fn catch_termination_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installing a handler that only stores to an atomic.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// The last termination signal received, if any (clears it).
pub fn take_signal() -> Option<i32> {
    match PENDING_SIGNAL.swap(0, Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}
