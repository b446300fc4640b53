//! A communicator's shared segment: one POSIX shared-memory object mapped by every member,
//! and the only place coll-sm touches raw memory or makes system calls.
//!
//! The object is made by [`rmca_common_shm::Mapping::create`]: rank 0 creates it under a
//! fresh name and broadcasts the name by messages
//! ([`DirectEnv::bcast`]); the others open and map it; once every member says it mapped it
//! ([`DirectEnv::all`]) rank 0 unlinks the name, so nothing is left in `/dev/shm` however
//! the job ends (the kernel frees the memory when the last member unmaps it or dies).
//!
//! Other processes write the mapping at any time: control words are reached as atomics
//! only, and data bytes are copied while the protocol says no other process writes them.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rmca_common_shm::{Agreement, CreateError, Mapping, NAME_LEN};
use rmca_framework::coll::{DirectEnv, DirectError};

use crate::protocol::Mem;

/// The communicator's set-up collectives (by messages) as the segment's agreement.
struct CollAgreement<'a>(&'a mut dyn DirectEnv);

impl Agreement for CollAgreement<'_> {
    type Error = DirectError;
    fn bcast_name(&mut self, name: &mut [u8; NAME_LEN]) -> Result<(), DirectError> {
        self.0.bcast(0, name)
    }
    fn all(&mut self, ok: bool) -> Result<bool, DirectError> {
        self.0.all(ok)
    }
}

/// Why a communicator's segment could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A system call failed on some member (every member gets this answer): coll-sm falls
    /// through to the next component on this communicator.
    #[error("{0}")]
    Os(String),
    /// The set-up's collectives by messages failed here (the communicator's transport).
    #[error(transparent)]
    Messages(#[from] DirectError),
}

/// Whether the process `pid` is gone (exited, a zombie included). A pidfd where the kernel
/// has them (Linux 5.3+) sees a zombie as exited; else `kill(pid, 0)`, which sees it once
/// reaped. No descriptor is kept: this runs only while a wait lasts long.
pub fn process_gone(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: pidfd_open takes two integers and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd >= 0 {
        let mut p = libc::pollfd {
            fd: fd as i32,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout; then the descriptor just opened is closed.
        let exited = unsafe {
            let n = libc::poll(&mut p, 1, 0);
            libc::close(fd as i32);
            n > 0 && p.revents & libc::POLLIN != 0
        };
        return exited;
    }
    let errno = std::io::Error::last_os_error().raw_os_error();
    if errno == Some(libc::ESRCH) {
        return true;
    }
    // No pidfd_open here (ENOSYS) or not allowed: existence by signal 0.
    // SAFETY: signal 0 checks existence and permission only.
    let r = unsafe { libc::kill(pid, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// One member's mapping of a communicator's segment.
#[derive(Debug)]
pub struct Segment {
    map: Mapping,
}

impl Segment {
    /// Map a fresh, zeroed segment of `len` (> 0) bytes on every member: collective over
    /// `env`; `me` is this member's rank, rank 0 creates it. Fails on every member if any
    /// member could not map it ([`SetupError::Os`]), or where the set-up's messages failed.
    pub fn create(env: &mut dyn DirectEnv, me: usize, len: usize) -> Result<Self, SetupError> {
        let mut agree = CollAgreement(env);
        Mapping::create(&mut agree, me, len, "coll-sm", "communicator")
            .map(|map| Self { map })
            .map_err(|e| match e {
                CreateError::Agreement(e) => SetupError::Messages(e),
                CreateError::Os(m) => SetupError::Os(m),
            })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Nothing mapped.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    fn check(&self, off: usize, len: usize, align: usize) {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.map.len()),
            "coll-sm: bytes {off}+{len} outside the {}-byte segment",
            self.map.len()
        );
        assert!(
            (self.map.base() as usize + off).is_multiple_of(align),
            "coll-sm: offset {off} is not {align}-byte aligned"
        );
    }

    /// The control word at `off` as an atomic.
    ///
    /// # Panics
    /// Outside the mapping or misaligned (the layout places every word inside, aligned).
    pub fn word(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4, 4);
        // SAFETY: inside the mapping and aligned (checked); every process reaches control
        // words through atomics only, and the reference lives no longer than the mapping.
        unsafe { AtomicU32::from_ptr(self.map.base().add(off).cast()) }
    }

    /// Sleep until the word at `off` no longer holds `seen`, a wake-up, or `timeout`.
    pub fn sleep(&self, off: usize, seen: u32, timeout: Duration) {
        let word = self.word(off);
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: FUTEX_WAIT on a live, aligned 4-byte word of a shared mapping (not
        // FUTEX_PRIVATE: the wakers are other processes); it returns at once if the word
        // changed, and every outcome (woken, timed out, interrupted) just re-checks.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                seen,
                &ts as *const libc::timespec,
            )
        };
    }

    /// Wake every process sleeping on the word at `off`.
    pub fn wake(&self, off: usize) {
        let word = self.word(off);
        // SAFETY: FUTEX_WAKE on a live, aligned word of the mapping; wakes at most i32::MAX
        // sleepers and touches no memory.
        unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
    }
}

impl Mem for Segment {
    #[inline]
    fn load(&self, off: usize) -> u32 {
        self.word(off).load(Ordering::Acquire)
    }

    #[inline]
    fn store(&self, off: usize, v: u32) {
        // Sequentially consistent: a poster then reads the sleeper count (lib.rs), and a
        // sleeper announces itself then re-reads this word; neither may miss the other.
        self.word(off).store(v, Ordering::SeqCst);
    }

    #[inline]
    fn mark(&self, off: usize, v: u32) {
        self.word(off).store(v, Ordering::Release);
    }

    #[inline]
    fn add(&self, off: usize, v: u32) -> u32 {
        // Sequentially consistent, as `store`.
        self.word(off)
            .fetch_add(v, Ordering::SeqCst)
            .wrapping_add(v)
    }

    fn write(&self, off: usize, data: &[u8]) {
        self.check(off, data.len(), 1);
        if data.is_empty() {
            return;
        }
        // SAFETY: inside the mapping (checked); `data` is this process's memory (the
        // caller's buffers are never inside the segment); the protocol guarantees that no
        // other process reads these bytes until this rank posts them.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.map.base().add(off), data.len())
        };
    }

    fn view(&self, off: usize, len: usize, f: &mut dyn FnMut(&[u8])) {
        self.check(off, len, 1);
        if len == 0 {
            return f(&[]);
        }
        // SAFETY: inside the mapping (checked), which outlives the call; the protocol
        // guarantees that the rank owning these bytes does not write them until this rank
        // stores its `freed` word, after `f` returned.
        f(unsafe { std::slice::from_raw_parts(self.map.base().add(off), len) })
    }
}

#[cfg(test)]
mod tests {
    use super::process_gone;

    #[test]
    fn a_live_process_is_not_gone_and_an_exited_one_is() {
        assert!(!process_gone(std::process::id()));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        assert!(!process_gone(pid));
        child.kill().expect("kill");
        // Killed but not yet reaped (a zombie) counts as gone where pidfds exist; reaped,
        // it is gone everywhere.
        let _ = child.wait();
        assert!(process_gone(pid));
    }
}
