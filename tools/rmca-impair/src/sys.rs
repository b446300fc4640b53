//! The edge to the kernel: entering a network namespace, attaching to a TUN device, waiting on
//! several descriptors with a nanosecond timeout, and catching the signals that stop or dump
//! the emulator. The only module with `unsafe`.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Set by SIGTERM or SIGINT: stop, print the counters and exit.
pub static STOP: AtomicBool = AtomicBool::new(false);
/// Set by SIGUSR1: write the counters now and go on.
pub static DUMP: AtomicBool = AtomicBool::new(false);
/// Set by SIGUSR2: switch every direction to the `--then` impairment.
pub static CHANGE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

extern "C" fn on_dump(_: libc::c_int) {
    DUMP.store(true, Ordering::Relaxed);
}

extern "C" fn on_change(_: libc::c_int) {
    CHANGE.store(true, Ordering::Relaxed);
}

/// Installs the handlers of SIGTERM, SIGINT (stop), SIGUSR1 (dump the counters) and SIGUSR2
/// (change the impairment).
pub fn install_signal_handlers() -> io::Result<()> {
    for (sig, handler) in [
        (libc::SIGTERM, on_stop as extern "C" fn(libc::c_int)),
        (libc::SIGINT, on_stop),
        (libc::SIGUSR1, on_dump),
        (libc::SIGUSR2, on_change),
    ] {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handlers only
        // store to atomics, which is async-signal-safe; no SA_RESTART, so a blocked ppoll
        // returns EINTR and the loop sees the flag at once.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// While alive, the calling thread is in another network namespace; dropping it returns.
pub struct InNetns {
    home: OwnedFd,
}

impl InNetns {
    /// Enters the named namespace (`ip netns add NAME`, i.e. /run/netns/NAME).
    pub fn enter(name: &str) -> io::Result<Self> {
        if name.is_empty() || name.contains('/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("'{name}' is not a namespace name"),
            ));
        }
        let home: OwnedFd = File::open("/proc/thread-self/ns/net")?.into();
        let target = File::open(format!("/run/netns/{name}")).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("network namespace '{name}' (/run/netns/{name}): {e}"),
            )
        })?;
        setns(target.as_raw_fd())?;
        Ok(Self { home })
    }
}

impl Drop for InNetns {
    fn drop(&mut self) {
        // Failing to return would leave later devices in the wrong namespace: not recoverable.
        setns(self.home.as_raw_fd()).expect("return to the original network namespace");
    }
}

fn setns(fd: libc::c_int) -> io::Result<()> {
    // SAFETY: fd is an open namespace descriptor owned by the caller for the whole call;
    // setns only reads it.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags (the union's first member).
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// Attaches to the TUN device `ifname` of the current network namespace (made persistent by
/// `ip tuntap add mode tun`, or created here), non-blocking, IP packets without a prefix.
pub fn attach_tun(ifname: &str) -> io::Result<File> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ || ifname.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{ifname}' is not an interface name (1 to 15 bytes)"),
        ));
    }
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("/dev/net/tun")?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    for (d, s) in req.name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: req is a properly laid out, initialised ifreq living across the call, and
    // TUNSETIFF reads and writes only within it; f is an open /dev/net/tun descriptor.
    if unsafe { libc::ioctl(f.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("attaching to TUN device '{ifname}': {e}"),
        ));
    }
    Ok(f)
}

/// Waits until one of `files` is readable or `timeout` passes (or a signal arrives); returns
/// which are readable.
pub fn wait_readable(files: &[File], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut fds: Vec<libc::pollfd> = files
        .iter()
        .map(|f| libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: fds points to fds.len() initialised pollfds that live across the call; ts is a
    // valid timespec; a null sigmask keeps the current one.
    let rc = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; files.len()]);
        }
        return Err(e);
    }
    Ok(fds
        .iter()
        .map(|p| p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0)
        .collect())
}
