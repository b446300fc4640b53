//! The shared segment of a window: one POSIX shared-memory object, mapped by every member,
//! and the only place osc-sm touches raw memory.
//!
//! Rank 0 of the window creates the object under a fresh name, the others open it by the
//! name it broadcasts ([`OscSetup::bcast`]), and rank 0 unlinks the name as soon as every
//! member mapped it ([`OscSetup::all`]), so nothing is left in `/dev/shm` however the job
//! ends: the kernel frees the memory when the last member unmaps it or dies.
//!
//! Other processes read and write the mapping at any time; MPI's synchronization rules say
//! when their accesses may touch the same bytes as ours, so plain copies serve put and get,
//! and every word more than one process updates at once is reached as an atomic.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rmca_framework::buffer::UserBuf;
use rmca_framework::osc::{OscError, OscSetup};

/// One mapping of a window's shared object.
#[derive(Debug)]
pub struct Segment {
    base: *mut u8,
    len: usize,
}

impl Segment {
    /// Map a fresh, zeroed segment of `len` bytes on every member (collective over `setup`;
    /// `me` is this member's rank, rank 0 creates it). A segment of 0 bytes maps nothing.
    pub fn create(setup: &mut dyn OscSetup, me: usize, len: usize) -> Result<Self, OscError> {
        if len == 0 {
            return Ok(Self {
                base: std::ptr::null_mut(),
                len: 0,
            });
        }
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let mut name = [0u8; 64];
        let mut fd = -1;
        let mut err = None;
        if me == 0 {
            let n = format!(
                "/rmca-osc-sm-{}-{}",
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
        let created = setup.all(me != 0 || err.is_none());
        let created = match created {
            Ok(c) => c,
            Err(e) => {
                unlink_and_close(me, &name, fd);
                return Err(e);
            }
        };
        if !created {
            unlink_and_close(me, &name, fd);
            return Err(err.unwrap_or_else(|| {
                OscError::Transport("osc-sm: rank 0 could not create the window's segment".into())
            }));
        }
        setup.bcast(0, &mut name)?;
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
        let everyone = setup.all(mapped);
        unlink_and_close(me, &name, -1);
        if !everyone? {
            return Err(err.unwrap_or_else(|| {
                OscError::Transport("osc-sm: a member could not map the window's segment".into())
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

    /// `len` bytes at `off` as a buffer (the memory of a member, handed to the program).
    ///
    /// # Panics
    /// Outside the mapping (callers place parts inside it).
    pub fn user_buf(&self, off: usize, len: usize) -> UserBuf {
        self.check(off, len, 1);
        if len == 0 {
            return UserBuf::empty();
        }
        // SAFETY: inside the mapping (checked), which lives as long as `self`; the buffer is
        // the window's memory, valid until the window is freed (its module owns `self`).
        unsafe { UserBuf::from_raw_parts_mut(self.base.add(off), len) }
    }

    /// The address of byte `off` (for `MPI_Win_shared_query` of a part of 0 bytes).
    pub fn addr(&self, off: usize) -> usize {
        self.base as usize + off
    }

    fn check(&self, off: usize, len: usize, align: usize) {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.len),
            "osc-sm: bytes {off}+{len} outside the {}-byte segment",
            self.len
        );
        assert!(
            (self.base as usize + off).is_multiple_of(align),
            "osc-sm: offset {off} is not {align}-byte aligned"
        );
    }

    /// Copy `data` to `off`. `data` may lie in the segment itself (a put from a shared
    /// window's memory): the copy is a memmove.
    pub fn write(&self, off: usize, data: &[u8]) {
        self.check(off, data.len(), 1);
        if data.is_empty() {
            return;
        }
        // SAFETY: inside the mapping (checked); `data` is readable memory of this process,
        // possibly the segment, which `copy` allows to overlap the destination.
        unsafe { std::ptr::copy(data.as_ptr(), self.base.add(off), data.len()) };
    }

    /// Copy the bytes at `off` into `out` (which may lie in the segment: a memmove).
    pub fn read(&self, off: usize, out: &mut [u8]) {
        self.check(off, out.len(), 1);
        if out.is_empty() {
            return;
        }
        // SAFETY: inside the mapping (checked); `out` is writable memory of this process,
        // possibly the segment, which `copy` allows to overlap the source.
        unsafe { std::ptr::copy(self.base.add(off), out.as_mut_ptr(), out.len()) };
    }

    /// Run `f` on the `len` bytes at `off` as a slice (the target of an accumulate, updated in
    /// place) and `origin`. An `origin` that overlaps those bytes (an accumulate from the
    /// window's own memory, which MPI forbids but a program may still do) is copied first,
    /// so the two slices never alias.
    ///
    /// The caller holds whatever keeps the other processes' accumulates off these bytes
    /// (the target's accumulate lock); MPI's rules keep their puts and gets off them.
    ///
    /// # Panics
    /// Outside the mapping.
    pub fn combine<R>(
        &self,
        off: usize,
        len: usize,
        origin: &[u8],
        f: impl FnOnce(&mut [u8], &[u8]) -> R,
    ) -> R {
        self.check(off, len, 1);
        if len == 0 {
            return f(&mut [], origin);
        }
        // SAFETY: base + off is inside the mapping (checked): computing the address is sound.
        let start = unsafe { self.base.add(off) } as usize;
        let (o, olen) = (origin.as_ptr() as usize, origin.len());
        let overlaps = olen > 0 && o < start + len && start < o + olen;
        let copy;
        let origin = if overlaps {
            copy = origin.to_vec();
            &copy[..]
        } else {
            origin
        };
        // SAFETY: inside the mapping (checked), valid for `&self`'s life; no other reference
        // of this process covers these bytes while `f` runs (`origin` was copied if it did,
        // and the module hands out no slices of the segment), and the other processes keep
        // off them (the caller's lock, MPI's rules for conflicting accesses).
        let target = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) };
        f(target, origin)
    }

    /// The 4-byte word at `off` as an atomic.
    ///
    /// # Panics
    /// Outside the mapping or misaligned.
    pub fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4, 4);
        // SAFETY: inside the mapping and aligned (checked); every process reaches this word
        // through atomics only while several may (MPI's rules for accumulates, the control
        // words always), and the reference lives no longer than the mapping (`&self`).
        unsafe { AtomicU32::from_ptr(self.base.add(off).cast()) }
    }

    /// The 8-byte word at `off` as an atomic.
    ///
    /// # Panics
    /// Outside the mapping or misaligned.
    pub fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.check(off, 8, 8);
        // SAFETY: as in `u32_at`.
        unsafe { AtomicU64::from_ptr(self.base.add(off).cast()) }
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

fn os_error(what: &str, len: usize) -> OscError {
    OscError::Transport(format!(
        "osc-sm: {what} the window's {len}-byte shared segment in /dev/shm: {}",
        std::io::Error::last_os_error()
    ))
}

/// Rank 0 removes the name (a no-op on the others); `fd`, if open, is closed.
fn unlink_and_close(me: usize, name: &[u8; 64], fd: i32) {
    if me == 0 && name[0] != 0 {
        // SAFETY: a NUL-terminated name this process created.
        unsafe { libc::shm_unlink(name.as_ptr().cast()) };
    }
    if fd >= 0 {
        // SAFETY: a descriptor this process opened and has not closed.
        unsafe { libc::close(fd) };
    }
}
