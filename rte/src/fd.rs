//! Adopting the inherited `PMI_FD` descriptor: the only place this crate needs `unsafe`.
#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use crate::RteError;

/// Take ownership of the stream socket numbered `fd` (from `PMI_FD`).
///
/// Checked first with `fcntl(F_GETFD)` and `getsockopt(SO_TYPE)`, so a stale or wrong number
/// in the environment is an error rather than undefined behaviour on someone else's descriptor.
pub(crate) fn adopt_pmi_fd(fd: RawFd) -> Result<UnixStream, RteError> {
    let bad = |why: &str| RteError::Env {
        var: "PMI_FD".into(),
        value: fd.to_string(),
        why: why.into(),
    };
    if fd < 0 {
        return Err(bad("negative descriptor"));
    }
    // SAFETY: fcntl(F_GETFD) only queries flags; it is defined for any integer and fails with
    // EBADF for a descriptor that is not open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(bad("descriptor is not open"));
    }
    let mut ty: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `ty` and `len` are valid for writes of the sizes passed; getsockopt fails with
    // ENOTSOCK if fd is not a socket.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut ty as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 || ty != libc::SOCK_STREAM {
        return Err(bad("descriptor is not a stream socket"));
    }
    // SAFETY: the launcher handed this open descriptor to us for exclusive use by the PMI
    // client (the PMI_FD convention); nothing else in the process owns it, and it was just
    // checked to be an open stream socket. Stream reads and writes through UnixStream are
    // plain read(2)/write(2), valid on TCP sockets too.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // Do not leak the PMI channel into programs this rank may exec.
    // SAFETY: setting FD_CLOEXEC on a descriptor we now own.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(UnixStream::from(owned))
}
