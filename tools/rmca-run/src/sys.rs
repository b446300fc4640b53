//! The launcher's few system calls that std does not wrap: the only module with `unsafe`.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use crate::monitor::Exit;

/// Put the child in its own process group (so teardown reaches everything it forks), make it
/// get `death_signal` if the launcher dies, and let it inherit `keep_fd` (its end of the PMI
/// socketpair), bound to `cpu` if given. The death signal is not SIGKILL so that the rank's runtime can remove the files
/// it created before dying of it (`rmca_rte::lifeline`); its default action, restored here in
/// case the launcher inherited it ignored, terminates any process that does not handle it.
pub fn configure_child(
    cmd: &mut Command,
    launcher_pid: u32,
    death_signal: i32,
    keep_fd: Option<RawFd>,
    cpu: Option<usize>,
) {
    cmd.process_group(0);
    // SAFETY: the closure runs in the forked child before exec and only calls
    // async-signal-safe functions (signal, sigprocmask, prctl, getppid, fcntl,
    // sched_setaffinity, _exit) on plain data of its own stack; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            // Dispositions set to "ignore" and the signal mask survive exec: undo both.
            libc::signal(death_signal, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, death_signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                death_signal as libc::c_ulong,
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
            // Before exec, so that every thread the rank starts inherits the binding.
            if let Some(cpu) = cpu {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// The CPUs this process may run on, in increasing order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data, zero is its empty value; the kernel writes at most
    // `size_of::<cpu_set_t>()` bytes into it, and CPU_ISSET reads within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// Wait until any child has exited, WITHOUT reaping it: while the zombie exists its
/// process-group id cannot be reused, so the caller can still safely kill the group (leftover
/// grandchildren) before reaping with [`reap`]. `None` once the launcher has no child left.
pub fn wait_any_exit_nowait() -> io::Result<Option<(u32, Exit)>> {
    loop {
        // SAFETY: siginfo_t is plain data; zeroed is a valid value for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid, writable siginfo_t; P_ALL waits for any child of ours.
        let rc = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => return Ok(None),
                _ => return Err(e),
            }
        }
        // SAFETY: waitid succeeded for a child state change, so si_pid/si_status are set.
        let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
        let exit = match info.si_code {
            libc::CLD_EXITED => Exit::Code(status),
            _ => Exit::Signal(status),
        };
        return Ok(Some((pid as u32, exit)));
    }
}

/// Reap the exited child `pid` (after [`wait_any_exit_nowait`] reported it).
pub fn reap(pid: u32) {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer; pid is our own exited child.
        let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        if rc >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// Which of `fds` are readable (or closed/in error), waiting at most `timeout` (`None`:
/// forever). An interrupted wait returns all `false`.
pub fn poll_readable(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as libc::c_int);
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structures that poll may write.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            return Ok(vec![false; fds.len()]);
        }
        return Err(e);
    }
    Ok(pfds.iter().map(|p| p.revents != 0).collect())
}

/// The soft limits on open files and on processes (`None`: unlimited, or not enforced because
/// the launcher runs as root).
pub fn fd_and_process_limits() -> (Option<u64>, Option<u64>) {
    let get = |res| {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `l` is a valid, writable rlimit.
        let rc = unsafe { libc::getrlimit(res, &mut l) };
        (rc == 0 && l.rlim_cur != libc::RLIM_INFINITY).then_some(l.rlim_cur)
    };
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let nproc = if root { None } else { get(libc::RLIMIT_NPROC) };
    (get(libc::RLIMIT_NOFILE), nproc)
}

/// Raise the soft open-files limit to the hard one (as shells allow `ulimit -n` to), returning
/// the new soft limit.
pub fn raise_fd_limit() -> Option<u64> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `l` is a valid, writable rlimit; setrlimit only reads it.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return None;
        }
        l.rlim_cur = l.rlim_max;
        // A refusal leaves the old limit, which the second getrlimit reports.
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return None;
        }
    }
    (l.rlim_cur != libc::RLIM_INFINITY).then_some(l.rlim_cur)
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

/// Write end of the self-pipe the signal handler reports through (-1: not set up).
static SIGNAL_PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_PIPE_WRITE.load(Ordering::SeqCst);
    if fd < 0 {
        return;
    }
    let byte = sig as u8;
    // SAFETY: errno is thread-local and valid for the whole life of the thread; write(2) is
    // async-signal-safe and reads one byte from a live local. The pipe is non-blocking, so a
    // full pipe (signals nobody read yet) drops the byte instead of blocking the handler.
    unsafe {
        let errno = libc::__errno_location();
        let saved = *errno;
        libc::write(fd, (&byte as *const u8).cast(), 1);
        *errno = saved;
    }
}

/// Report SIGINT, SIGTERM and SIGHUP through a pipe instead of dying, so that the launcher
/// tears the job down (and removes shared memory) first: each signal arrives as one byte, its
/// number, on the returned read end, which a thread can block on (no polling for a flag).
pub fn catch_termination_signals() -> io::Result<std::fs::File> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just created both descriptors and nothing else owns them.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // The reader blocks; only the handler's end must never block.
    // SAFETY: clearing O_NONBLOCK on a descriptor we own.
    unsafe { libc::fcntl(read.as_raw_fd(), libc::F_SETFL, 0) };
    // The handler writes to this end for the rest of the process's life: never closed.
    SIGNAL_PIPE_WRITE.store(write.into_raw_fd(), Ordering::SeqCst);
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installing a handler that only does async-signal-safe work.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
    Ok(std::fs::File::from(read))
}
