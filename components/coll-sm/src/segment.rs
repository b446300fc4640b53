//! A communicator's shared segment: one POSIX shared-memory object mapped by every member,
//! and the only place coll-sm touches raw memory or makes system calls.
//!
//! Rank 0 creates the object under a fresh name and broadcasts the name by messages
//! ([`DirectEnv::bcast`]); the others open and map it; once every member says it mapped it
//! ([`DirectEnv::all`]) rank 0 unlinks the name, so nothing is left in `/dev/shm` however
//! the job ends (the kernel frees the memory when the last member unmaps it or dies).
//!
//! Other processes write the mapping at any time: control words are reached as atomics
//! only, and data bytes are copied while the protocol says no other process writes them.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use rmca_framework::coll::{DirectEnv, DirectError};

use crate::protocol::Mem;

/// Bytes of a segment name buffer (NUL-terminated).
const NAME: usize = 64;

/// One member's mapping of a communicator's segment.
#[derive(Debug)]
pub struct Segment {
    base: *mut u8,
    len: usize,
}

impl Segment {
    /// Map a fresh, zeroed segment of `len` (> 0) bytes on every member: collective over
    /// `env`; `me` is this member's rank, rank 0 creates it. Fails on every member if any
    /// member could not map it.
    pub fn create(env: &mut dyn DirectEnv, me: usize, len: usize) -> Result<Self, DirectError> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let mut name = [0u8; NAME];
        let mut fd = -1;
        let mut err = None;
        if me == 0 {
            let n = format!(
                "/rmca-coll-sm-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            );
            name[..n.len()].copy_from_slice(n.as_bytes());
            // SAFETY: `name` is NUL-terminated (64 bytes, the name is shorter).
            fd = unsafe {
                libc::shm_open(
                    name.as_ptr().cast(),
                    libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                    0o600,
                )
            };
            let sized = fd >= 0
                && libc::off_t::try_from(len)
                    // SAFETY: `fd` is the object just created.
                    .is_ok_and(|l| unsafe { libc::ftruncate(fd, l) } == 0);
            if !sized {
                err = Some(os_error("creating", len));
            }
        }
        match env.all(me != 0 || err.is_none()) {
            Ok(true) => {}
            Ok(false) => {
                unlink_and_close(me, &name, fd);
                return Err(err.unwrap_or_else(|| {
                    DirectError("coll-sm: rank 0 could not create the segment".into())
                }));
            }
            Err(e) => {
                unlink_and_close(me, &name, fd);
                return Err(e);
            }
        }
        if let Err(e) = env.bcast(0, &mut name) {
            unlink_and_close(me, &name, fd);
            return Err(e);
        }
        if me != 0 {
            // SAFETY: a NUL-terminated name (rank 0 wrote fewer than 64 bytes into zeros).
            fd = unsafe { libc::shm_open(name.as_ptr().cast(), libc::O_RDWR, 0) };
        }
        let base = if fd >= 0 {
            // SAFETY: maps `len` bytes of the object (its size, set by rank 0), shared; the
            // result is checked against MAP_FAILED below.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            }
        } else {
            libc::MAP_FAILED
        };
        let mapped = base != libc::MAP_FAILED;
        if !mapped {
            err = Some(os_error("mapping", len));
        }
        if fd >= 0 {
            // SAFETY: the descriptor opened above; the mapping stays without it.
            unsafe { libc::close(fd) };
        }
        let seg = Self {
            base: if mapped {
                base.cast()
            } else {
                std::ptr::null_mut()
            },
            len: if mapped { len } else { 0 },
        };
        // Every member must have mapped it before the name goes, and it goes whatever happens.
        let everyone = env.all(mapped);
        unlink_and_close(me, &name, -1);
        if !everyone? {
            return Err(err.unwrap_or_else(|| {
                DirectError("coll-sm: a member could not map the segment".into())
            }));
        }
        Ok(seg)
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Nothing mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, off: usize, len: usize, align: usize) {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.len),
            "coll-sm: bytes {off}+{len} outside the {}-byte segment",
            self.len
        );
        assert!(
            (self.base as usize + off).is_multiple_of(align),
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
        unsafe { AtomicU32::from_ptr(self.base.add(off).cast()) }
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
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.add(off), data.len()) };
    }

    fn view(&self, off: usize, len: usize, f: &mut dyn FnMut(&[u8])) {
        self.check(off, len, 1);
        if len == 0 {
            return f(&[]);
        }
        // SAFETY: inside the mapping (checked), which outlives the call; the protocol
        // guarantees that the rank owning these bytes does not write them until this rank
        // stores its `freed` word, after `f` returned.
        f(unsafe { std::slice::from_raw_parts(self.base.add(off), len) })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping made in `create`, unmapped once; every reference into it
            // borrowed `self`, so none outlives it.
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }
}

fn os_error(what: &str, len: usize) -> DirectError {
    DirectError(format!(
        "coll-sm: {what} the communicator's {len}-byte shared segment in /dev/shm: {}",
        std::io::Error::last_os_error()
    ))
}

/// Rank 0 removes the name (a no-op on the others); `fd`, if open, is closed.
fn unlink_and_close(me: usize, name: &[u8; NAME], fd: i32) {
    if me == 0 && name[0] != 0 {
        // SAFETY: a NUL-terminated name this process created.
        unsafe { libc::shm_unlink(name.as_ptr().cast()) };
    }
    if fd >= 0 {
        // SAFETY: a descriptor this process opened and has not closed.
        unsafe { libc::close(fd) };
    }
}
