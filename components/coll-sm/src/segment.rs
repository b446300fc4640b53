//! A communicator's shared segment: one POSIX shared-memory object mapped by every member,
//! and the only place coll-sm touches raw memory or makes system calls.
//!
//! The object is made by [`rmca_common_shm::Mapping::create_with`]: rank 0 creates it under
//! a fresh name and broadcasts the name by messages
//! ([`DirectEnv::bcast`]); the others open and map it and store their pid in it; once every
//! member says it mapped it ([`DirectEnv::all`]) rank 0 unlinks the name, so nothing is left in `/dev/shm` however
//! the job ends (the kernel frees the memory when the last member unmaps it or dies).
//!
//! Other processes write the mapping at any time: control words are reached as atomics
//! only, and data bytes are copied while the protocol says no other process writes them.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rmca_common_shm::{futex, Agreement, CreateError, Mapping, NAME_LEN};
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
    /// Posts are full fences (some member may sleep on a word: see [`Segment::fence_posts`]).
    fenced: Cell<bool>,
}

impl Segment {
    /// Map a fresh, zeroed segment of `len` (> 0) bytes on every member: collective over
    /// `env`; `me` is this member's rank, rank 0 creates it. This process's id is stored in
    /// the word at `pid_at` before the creation's final agreement, so every member's pid is
    /// visible to every member once this returns (no round of its own). Fails on every
    /// member if any member could not map it ([`SetupError::Os`]), or where the set-up's
    /// messages failed.
    ///
    /// # Panics
    /// If `pid_at` is outside the segment or misaligned (the layout places it inside).
    pub fn create(
        env: &mut dyn DirectEnv,
        me: usize,
        len: usize,
        pid_at: usize,
    ) -> Result<Self, SetupError> {
        let mut agree = CollAgreement(env);
        let publish_pid = |map: &Mapping| {
            // SeqCst as every store of a control word (see `Mem::store` below); the
            // agreement's messages that follow order it before any member's reads.
            word_in(map, pid_at).store(std::process::id(), Ordering::SeqCst);
        };
        Mapping::create_with(&mut agree, me, len, "coll-sm", "communicator", publish_pid)
            .map(|map| Self {
                map,
                fenced: Cell::new(true),
            })
            .map_err(|e| match e {
                CreateError::Agreement(e) => SetupError::Messages(e),
                CreateError::Os(m) => SetupError::Os(m),
            })
    }

    /// Whether this rank's posts ([`Mem::store`]) are sequentially consistent (`true`, the
    /// default): needed only while a member may sleep on a word, whose waker must read the
    /// sleeper count after its store (the Dekker pattern in `lib.rs`). When no wait sleeps
    /// (the spin and yield wait modes), a release store suffices, and on x86 it lets this
    /// rank go on to read the others' words while its own line is still being handed over,
    /// instead of stalling on the fence until it is (two such stalls per collective: the
    /// post and `freed`). A member that sleeps all the same is woken late, by its sleep's
    /// timeout, never lost.
    pub fn fence_posts(&self, fenced: bool) {
        self.fenced.set(fenced);
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
        check(&self.map, off, len, align);
    }

    /// The control word at `off` as an atomic.
    ///
    /// # Panics
    /// Outside the mapping or misaligned (the layout places every word inside, aligned).
    #[inline]
    pub fn word(&self, off: usize) -> &AtomicU32 {
        word_in(&self.map, off)
    }

    /// Sleep until the word at `off` no longer holds `seen`, a wake-up, or `timeout`.
    pub fn sleep(&self, off: usize, seen: u32, timeout: Duration) {
        futex::wait(self.word(off), seen, timeout);
    }

    /// Wake every process sleeping on the word at `off`.
    pub fn wake(&self, off: usize) {
        futex::wake(self.word(off), u32::MAX);
    }
}

/// Panics unless `len` bytes at `off` lie inside `map` and start `align`-byte aligned.
#[inline]
fn check(map: &Mapping, off: usize, len: usize, align: usize) {
    assert!(
        off.checked_add(len).is_some_and(|e| e <= map.len()),
        "coll-sm: bytes {off}+{len} outside the {}-byte segment",
        map.len()
    );
    assert!(
        (map.base() as usize + off).is_multiple_of(align),
        "coll-sm: offset {off} is not {align}-byte aligned"
    );
}

/// The control word at `off` of `map` as an atomic (panics outside or misaligned).
#[inline]
fn word_in(map: &Mapping, off: usize) -> &AtomicU32 {
    check(map, off, 4, 4);
    // SAFETY: inside the mapping and aligned (checked); every process reaches control words
    // through atomics only, and the reference borrows the mapping, so it cannot outlive it.
    unsafe { AtomicU32::from_ptr(map.base().add(off).cast()) }
}

impl Mem for Segment {
    #[inline]
    fn load(&self, off: usize) -> u32 {
        self.word(off).load(Ordering::Acquire)
    }

    #[inline]
    fn store(&self, off: usize, v: u32) {
        // Sequentially consistent where members may sleep: a poster then reads the sleeper
        // count (lib.rs), and a sleeper announces itself then re-reads this word; neither
        // may miss the other. Release otherwise (see `fence_posts`).
        let order = if self.fenced.get() {
            Ordering::SeqCst
        } else {
            Ordering::Release
        };
        self.word(off).store(v, order);
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
