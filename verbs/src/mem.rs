//! Registered memory: owned page-aligned buffers and the soft provider's key table, which
//! copies in and out of registered memory on behalf of local and remote work requests.
//!
//! This is one of the two modules allowed `unsafe`: memory regions are raw address ranges
//! written by "the HCA" (another thread, or the kernel for the rdma provider) concurrently with
//! the application, exactly as with real verbs.
#![allow(unsafe_code)]

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::RwLock;

use crate::types::{AccessFlags, Sge, WcStatus};

const ALIGN: usize = 4096;

/// A zeroed, page-aligned heap buffer that does not move (its address is registered).
#[derive(Debug)]
pub struct OwnedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: OwnedBuf is a plain heap allocation with no thread affinity; concurrent access to
// its bytes goes through raw-pointer copies whose discipline is the verbs contract.
unsafe impl Send for OwnedBuf {}
// SAFETY: as above; &OwnedBuf exposes no references into the bytes.
unsafe impl Sync for OwnedBuf {}

impl OwnedBuf {
    /// Allocates `len` zeroed bytes (at least one byte is allocated).
    pub fn new(len: usize) -> Self {
        let layout = Layout::from_size_align(len.max(1), ALIGN).expect("valid layout");
        // SAFETY: layout has non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Self { ptr, len }
    }
    /// Start address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    /// Length.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for OwnedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len.max(1), ALIGN).expect("valid layout");
        // SAFETY: allocated in `new` with this same layout.
        unsafe { dealloc(self.ptr.as_ptr(), layout) }
    }
}

/// Copies `src` to the raw address `dst`.
///
/// # Safety
/// `dst..dst+src.len()` must be valid for writes (a live registered range).
pub(crate) unsafe fn copy_to_raw(dst: usize, src: &[u8]) {
    // SAFETY: guaranteed by the caller; regions never overlap Rust-owned temporaries.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) }
}

/// Copies from the raw address `src` into `dst`.
///
/// # Safety
/// `src..src+dst.len()` must be valid for reads (a live registered range).
pub(crate) unsafe fn copy_from_raw(dst: &mut [u8], src: usize) {
    // SAFETY: guaranteed by the caller.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) }
}

/// One registered range.
#[derive(Debug, Clone, Copy)]
struct Entry {
    addr: usize,
    len: usize,
    access: AccessFlags,
    pd: u32,
}

impl Entry {
    fn contains(&self, addr: u64, len: usize) -> bool {
        let a = addr as usize;
        a >= self.addr
            && a.checked_add(len)
                .is_some_and(|end| end <= self.addr + self.len)
    }
}

/// Key table of one soft context. A range stays valid while its key is in the table: the
/// memory region handle removes the key (under the write lock) before its memory is freed, and
/// every copy runs under the read lock.
#[derive(Debug, Default)]
pub(crate) struct MrTable {
    // Looked up for every datagram a UD QP sends or receives; the keys are handed out already
    // spread (see `register`), and the hasher spreads a peer's guessed ones.
    map: RwLock<HashMap<u32, Entry, rmca_framework::hash::BuildIntHasher>>,
    next: AtomicU32,
}

impl MrTable {
    /// Registers `addr..addr+len`; returns the key (lkey == rkey).
    pub fn register(&self, addr: usize, len: usize, access: AccessFlags, pd: u32) -> u32 {
        // Keys start at a non-trivial value so that 0 and small integers are never valid.
        let key = self
            .next
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9)
            .wrapping_add(0x1000);
        let mut m = self.map.write().expect("mr table poisoned");
        m.insert(
            key,
            Entry {
                addr,
                len,
                access,
                pd,
            },
        );
        key
    }

    /// Removes a key.
    pub fn deregister(&self, key: u32) {
        self.map.write().expect("mr table poisoned").remove(&key);
    }

    /// Appends the bytes of `sges` to `out` (send gather).
    pub fn gather(&self, pd: u32, sges: &[Sge], out: &mut Vec<u8>) -> Result<(), WcStatus> {
        let m = self.map.read().expect("mr table poisoned");
        for s in sges {
            let e = m.get(&s.lkey).ok_or(WcStatus::LocalProtectionError)?;
            if e.pd != pd || !e.contains(s.addr, s.length as usize) {
                return Err(WcStatus::LocalProtectionError);
            }
            let start = out.len();
            out.resize(start + s.length as usize, 0);
            // SAFETY: the range is inside a registered region (checked above) that stays
            // allocated while we hold the read lock.
            unsafe { copy_from_raw(&mut out[start..], s.addr as usize) };
        }
        Ok(())
    }

    /// Scatters `data` into `sges` starting `skip` bytes in (receive, read response).
    pub fn scatter(&self, pd: u32, sges: &[Sge], skip: usize, data: &[u8]) -> Result<(), WcStatus> {
        let total: usize = sges.iter().map(|s| s.length as usize).sum();
        if data.len() + skip > total {
            return Err(WcStatus::LocalLengthError);
        }
        let m = self.map.read().expect("mr table poisoned");
        let mut skip = skip;
        let mut rest = data;
        for s in sges {
            let e = m.get(&s.lkey).ok_or(WcStatus::LocalProtectionError)?;
            if e.pd != pd
                || !e.contains(s.addr, s.length as usize)
                || !e.access.contains(AccessFlags::LOCAL_WRITE)
            {
                return Err(WcStatus::LocalProtectionError);
            }
            let mut len = s.length as usize;
            let mut addr = s.addr as usize;
            let k = skip.min(len);
            skip -= k;
            len -= k;
            addr += k;
            let n = len.min(rest.len());
            // SAFETY: inside a registered, writable region (checked), alive under the lock.
            unsafe { copy_to_raw(addr, &rest[..n]) };
            rest = &rest[n..];
            if rest.is_empty() && skip == 0 {
                break;
            }
        }
        Ok(())
    }

    /// RDMA WRITE at the target: checks rkey, PD, bounds and REMOTE_WRITE.
    pub fn remote_write(&self, pd: u32, rkey: u32, addr: u64, data: &[u8]) -> bool {
        let m = self.map.read().expect("mr table poisoned");
        match m.get(&rkey) {
            Some(e)
                if e.pd == pd
                    && e.access.contains(AccessFlags::REMOTE_WRITE)
                    && e.contains(addr, data.len()) =>
            {
                // SAFETY: checked inside a live registered region with remote write rights.
                unsafe { copy_to_raw(addr as usize, data) };
                true
            }
            _ => false,
        }
    }

    /// RDMA READ at the target: appends `len` bytes at `addr` to `out` if allowed.
    pub fn remote_read(
        &self,
        pd: u32,
        rkey: u32,
        addr: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> bool {
        let m = self.map.read().expect("mr table poisoned");
        match m.get(&rkey) {
            Some(e)
                if e.pd == pd
                    && e.access.contains(AccessFlags::REMOTE_READ)
                    && e.contains(addr, len) =>
            {
                let start = out.len();
                out.resize(start + len, 0);
                // SAFETY: checked inside a live registered region with remote read rights.
                unsafe { copy_from_raw(&mut out[start..], addr as usize) };
                true
            }
            _ => false,
        }
    }
}

/// Safe accessors used by [`crate::Mr`]: bounds are checked by the caller.
pub(crate) fn write_bytes(base: *mut u8, offset: usize, data: &[u8]) {
    // SAFETY: the caller (Mr::write_at) checked offset + len <= region length, and the region
    // is alive while the Mr exists.
    unsafe { copy_to_raw(base as usize + offset, data) }
}

/// See [`write_bytes`].
pub(crate) fn read_bytes(base: *mut u8, offset: usize, out: &mut [u8]) {
    // SAFETY: the caller (Mr::read_at) checked bounds; the region is alive.
    unsafe { copy_from_raw(out, base as usize + offset) }
}

/// Views a live region as a slice.
///
/// # Safety
/// `base..base+len` must be alive for `'a` and not written concurrently while the slice lives.
pub(crate) unsafe fn slice<'a>(base: *mut u8, len: usize) -> &'a [u8] {
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(base, len) }
}

/// Views a live region as a mutable slice.
///
/// # Safety
/// As [`slice`], and no other reference to the bytes may exist while it lives.
pub(crate) unsafe fn slice_mut<'a>(base: *mut u8, len: usize) -> &'a mut [u8] {
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts_mut(base, len) }
}
