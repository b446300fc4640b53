//! The shared segment of a window: one POSIX shared-memory object, mapped by every member,
//! and the only place osc-sm touches raw memory.
//!
//! The object is made by [`rmca_common_shm::Mapping::create`]: rank 0 of the window creates
//! it under a fresh name, the others open it by the name it broadcasts ([`OscSetup::bcast`]),
//! and rank 0 unlinks the name as soon as every member mapped it ([`OscSetup::all`]), so
//! nothing is left in `/dev/shm` however the job ends: the kernel frees the memory when the
//! last member unmaps it or dies.
//!
//! Other processes read and write the mapping at any time; MPI's synchronization rules say
//! when their accesses may touch the same bytes as ours, so plain copies serve put and get,
//! and every word more than one process updates at once is reached as an atomic.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64};

use rmca_common_shm::{Agreement, CreateError, Mapping, NAME_LEN};
use rmca_framework::buffer::UserBuf;
use rmca_framework::osc::{OscError, OscSetup};

/// The window's set-up collectives as the segment's agreement.
struct OscAgreement<'a>(&'a mut dyn OscSetup);

impl Agreement for OscAgreement<'_> {
    type Error = OscError;
    fn bcast_name(&mut self, name: &mut [u8; NAME_LEN]) -> Result<(), OscError> {
        self.0.bcast(0, name)
    }
    fn all(&mut self, ok: bool) -> Result<bool, OscError> {
        self.0.all(ok)
    }
}

/// Do the `a_len` bytes at address `a` and the `b_len` bytes at `b` share a byte? Two
/// wrapping differences and no branch: the check runs on every small accumulate.
#[inline(always)]
fn spans_overlap(a: usize, a_len: usize, b: usize, b_len: usize) -> bool {
    (a_len != 0) & (b_len != 0) & ((b.wrapping_sub(a) < a_len) | (a.wrapping_sub(b) < b_len))
}

/// One mapping of a window's shared object.
#[derive(Debug)]
pub struct Segment {
    map: Mapping,
}

impl Segment {
    /// Map a fresh, zeroed segment of `len` bytes on every member (collective over `setup`;
    /// `me` is this member's rank, rank 0 creates it). A segment of 0 bytes maps nothing.
    pub fn create(setup: &mut dyn OscSetup, me: usize, len: usize) -> Result<Self, OscError> {
        if len == 0 {
            return Ok(Self {
                map: Mapping::empty(),
            });
        }
        let mut agree = OscAgreement(setup);
        Mapping::create(&mut agree, me, len, "osc-sm", "window")
            .map(|map| Self { map })
            .map_err(|e| match e {
                CreateError::Agreement(e) => e,
                CreateError::Os(m) => OscError::Transport(m),
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
        unsafe { UserBuf::from_raw_parts_mut(self.map.base().add(off), len) }
    }

    /// The address of byte `off` (for `MPI_Win_shared_query` of a part of 0 bytes).
    pub fn addr(&self, off: usize) -> usize {
        self.map.base() as usize + off
    }

    // Inlined everywhere: `len` and `align` are constants at most callers (an atomic word,
    // one element), so the alignment test is a mask, not a division.
    #[inline(always)]
    fn check(&self, off: usize, len: usize, align: usize) {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.map.len()),
            "osc-sm: bytes {off}+{len} outside the {}-byte segment",
            self.map.len()
        );
        assert!(
            (self.map.base() as usize + off).is_multiple_of(align),
            "osc-sm: offset {off} is not {align}-byte aligned"
        );
    }

    /// Copy `data` to `off`. `data` may lie in the segment itself (a put from a shared
    /// window's memory): the copy is a memmove.
    #[inline]
    pub fn write(&self, off: usize, data: &[u8]) {
        self.check(off, data.len(), 1);
        if data.is_empty() {
            return;
        }
        // SAFETY: inside the mapping (checked); `data` is readable memory of this process,
        // possibly the segment, which `copy` allows to overlap the destination.
        unsafe { std::ptr::copy(data.as_ptr(), self.map.base().add(off), data.len()) };
    }

    /// Copy the bytes at `off` into `out` (which may lie in the segment: a memmove).
    #[inline]
    pub fn read(&self, off: usize, out: &mut [u8]) {
        self.check(off, out.len(), 1);
        if out.is_empty() {
            return;
        }
        // SAFETY: inside the mapping (checked); `out` is writable memory of this process,
        // possibly the segment, which `copy` allows to overlap the source.
        unsafe { std::ptr::copy(self.map.base().add(off), out.as_mut_ptr(), out.len()) };
    }

    /// Do the `len` bytes at `off` share a byte with `other` (a buffer of the program that
    /// may lie in the segment)?
    #[inline]
    pub fn overlaps(&self, off: usize, len: usize, other: &[u8]) -> bool {
        let start = (self.map.base() as usize).wrapping_add(off);
        spans_overlap(start, len, other.as_ptr() as usize, other.len())
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
    #[inline]
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
        let start = unsafe { self.map.base().add(off) } as usize;
        let overlaps = spans_overlap(start, len, origin.as_ptr() as usize, origin.len());
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

    /// Compare-and-swap of the `T` at `off` as plain loads and stores (any alignment): `value`
    /// written if the element equals `compare`; the element as it was. Not atomic by itself:
    /// the caller holds the target's accumulate lock, which every other compare-and-swap and
    /// accumulate on these bytes takes too (MPI's rules keep puts and gets off them). No
    /// slice, no closure: a compare-and-swap is the latency OSU's `cas_latency` measures.
    ///
    /// # Panics
    /// Outside the mapping.
    #[inline(always)]
    pub fn swap_if<T: Copy + PartialEq>(&self, off: usize, compare: T, value: T) -> T {
        self.check(off, std::mem::size_of::<T>(), 1);
        // SAFETY: `size_of::<T>()` bytes inside the mapping (checked), read and written
        // unaligned; `T` is one of the plain integers the kernel instantiates it with (every
        // bit pattern valid); the caller's lock keeps other accesses off the bytes meanwhile.
        unsafe {
            let p = self.map.base().add(off).cast::<T>();
            let was = p.read_unaligned();
            if was == compare {
                p.write_unaligned(value);
            }
            was
        }
    }

    /// The 4-byte word at `off` as an atomic.
    ///
    /// # Panics
    /// Outside the mapping or misaligned.
    #[inline]
    pub fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4, 4);
        // SAFETY: inside the mapping and aligned (checked); every process reaches this word
        // through atomics only while several may (MPI's rules for accumulates, the control
        // words always), and the reference lives no longer than the mapping (`&self`).
        unsafe { AtomicU32::from_ptr(self.map.base().add(off).cast()) }
    }

    /// The 8-byte word at `off` as an atomic.
    ///
    /// # Panics
    /// Outside the mapping or misaligned.
    #[inline]
    pub fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.check(off, 8, 8);
        // SAFETY: as in `u32_at`.
        unsafe { AtomicU64::from_ptr(self.map.base().add(off).cast()) }
    }
}
