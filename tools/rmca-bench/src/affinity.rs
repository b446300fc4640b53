//! Pinning the worker to one core and sizing socket buffers (the only unsafe code of
//! rmca-bench: libc calls).
#![allow(unsafe_code)]

/// Pin the calling process to `core`. Returns false if the kernel refused.
pub fn pin_to_core(core: usize) -> bool {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write within it, and
    // sched_setaffinity only reads `size_of::<cpu_set_t>()` bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// How many CPUs the calling process may run on (its affinity mask), if the kernel says.
pub fn allowed_cpus() -> Option<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most
    // `size_of::<cpu_set_t>()` bytes into it, and CPU_COUNT only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0)
            .then(|| libc::CPU_COUNT(&set) as usize)
    }
}

/// The CPUs online in the machine (not only those of this process's mask).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(1)
}

/// Ask for socket buffers of `bytes` on `sock`: `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` where
/// permitted (root), else the plain options (capped by `net.core.{r,w}mem_max`).
pub fn grow_socket_buffers(sock: &std::net::UdpSocket, bytes: usize) {
    use std::os::fd::AsRawFd;
    let val = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for opts in [
        [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF],
        [libc::SO_SNDBUFFORCE, libc::SO_SNDBUF],
    ] {
        for opt in opts {
            // SAFETY: the fd is a live socket owned by `sock`; the kernel reads one c_int of
            // the given length.
            let rc = unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&val as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
        }
    }
}
