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
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
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

/// Copies `src` to the raw address `dst` as an HCA lands an RDMA WRITE: every byte but the
/// last (up to) eight first, then those with release stores. A reader that polls the end of
/// the range ([`read_polled`]: an eager RDMA slot's footer) and finds it written therefore
/// reads the whole write. Real HCAs land a write in address order in practice and footer-polling
/// protocols rely on it (btl-rc's eager RDMA, Open MPI's openib); a plain memcpy promises no
/// order (glibc stores a short copy's tail with its head, and `rep movsb` may reorder stores).
///
/// # Safety
/// As [`copy_to_raw`].
pub(crate) unsafe fn land_write(dst: usize, src: &[u8]) {
    let tail = src.len().min(8);
    let (head, last) = src.split_at(src.len() - tail);
    // SAFETY: guaranteed by the caller: the head is the start of the range.
    unsafe { copy_to_raw(dst, head) };
    let at = dst + head.len();
    if tail == 8 && at.is_multiple_of(8) {
        let word = u64::from_ne_bytes(last.try_into().expect("eight bytes"));
        // SAFETY: `at` is 8-aligned and its eight bytes lie inside the caller's range; other
        // accesses to these bytes while a write may land are atomic ([`read_polled`]).
        unsafe { AtomicU64::from_ptr(at as *mut u64) }.store(word, Ordering::Release);
    } else {
        for (i, &b) in last.iter().enumerate() {
            // SAFETY: inside the caller's range; any alignment suits a byte.
            unsafe { AtomicU8::from_ptr((at + i) as *mut u8) }.store(b, Ordering::Release);
        }
    }
}

/// Reads bytes a remote write may be landing in now (a polled footer, at most eight bytes)
/// with acquire loads: once they show the write's last bytes, the whole write ([`land_write`],
/// or an HCA's DMA) is visible to this thread. The same access pattern as `land_write` for a
/// range ending at the same address: one 8-byte load when eight aligned bytes, else bytes.
///
/// # Safety
/// As [`copy_from_raw`]; `dst.len() <= 8`.
pub(crate) unsafe fn read_polled(dst: &mut [u8], src: usize) {
    debug_assert!(dst.len() <= 8, "a polled read is at most one word");
    if dst.len() == 8 && src.is_multiple_of(8) {
        // SAFETY: 8-aligned, inside the caller's range.
        let word = unsafe { AtomicU64::from_ptr(src as *mut u64) }.load(Ordering::Acquire);
        dst.copy_from_slice(&word.to_ne_bytes());
    } else {
        for (i, b) in dst.iter_mut().enumerate() {
            // SAFETY: inside the caller's range.
            *b = unsafe { AtomicU8::from_ptr((src + i) as *mut u8) }.load(Ordering::Acquire);
        }
    }
}

/// Writes bytes a remote write polls or lands in (clearing a polled footer) with release
/// stores, in [`read_polled`]'s pattern, so that they never race with a landing write.
///
/// # Safety
/// As [`copy_to_raw`]; `src.len() <= 8`.
pub(crate) unsafe fn write_polled(dst: usize, src: &[u8]) {
    debug_assert!(src.len() <= 8, "a polled write is at most one word");
    if src.len() == 8 && dst.is_multiple_of(8) {
        let word = u64::from_ne_bytes(src.try_into().expect("eight bytes"));
        // SAFETY: 8-aligned, inside the caller's range.
        unsafe { AtomicU64::from_ptr(dst as *mut u64) }.store(word, Ordering::Release);
    } else {
        for (i, &b) in src.iter().enumerate() {
            // SAFETY: inside the caller's range.
            unsafe { AtomicU8::from_ptr((dst + i) as *mut u8) }.store(b, Ordering::Release);
        }
    }
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
                unsafe { land_write(addr as usize, data) };
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

/// [`read_polled`] for [`crate::Mr::read_polled`]: bounds are checked by the caller.
pub(crate) fn read_polled_bytes(base: *mut u8, offset: usize, out: &mut [u8]) {
    // SAFETY: the caller (Mr::read_polled) checked bounds and length; the region is alive.
    unsafe { read_polled(out, base as usize + offset) }
}

/// [`write_polled`] for [`crate::Mr::write_polled`]: bounds are checked by the caller.
pub(crate) fn write_polled_bytes(base: *mut u8, offset: usize, data: &[u8]) {
    // SAFETY: the caller (Mr::write_polled) checked bounds and length; the region is alive.
    unsafe { write_polled(base as usize + offset, data) }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_landed_write_holds_every_byte_at_any_length_and_alignment() {
        let buf = OwnedBuf::new(128);
        for start in 0..9 {
            for len in 0..40 {
                let src: Vec<u8> = (0..len).map(|i| (i * 7 + start + 1) as u8).collect();
                // SAFETY: start + len <= 48 < 128: inside the live buffer.
                unsafe { land_write(buf.as_ptr() as usize + start, &src) };
                let mut back = vec![0u8; len];
                // SAFETY: as above.
                unsafe { copy_from_raw(&mut back, buf.as_ptr() as usize + start) };
                assert_eq!(back, src, "start {start} len {len}");
            }
        }
    }

    #[test]
    fn polled_reads_and_writes_agree_at_any_alignment() {
        let buf = OwnedBuf::new(64);
        for at in 0..9 {
            for len in 1..=8 {
                let src: Vec<u8> = (0..len).map(|i| (i + at + 3) as u8).collect();
                // SAFETY: at + len <= 16 < 64.
                unsafe { write_polled(buf.as_ptr() as usize + at, &src) };
                let mut back = vec![0u8; len];
                // SAFETY: as above.
                unsafe { read_polled(&mut back, buf.as_ptr() as usize + at) };
                assert_eq!(back, src, "at {at} len {len}");
            }
        }
    }

    /// An eager RDMA slot between "the HCA" (a thread landing writes) and a poller: whenever
    /// the poller sees a footer, the payload before it is that write's, whole. Under Miri
    /// (scripts/miri.sh) a landing by plain copy is a data race with the poll and fails.
    #[test]
    fn a_poller_that_sees_the_footer_sees_the_whole_write() {
        const SLOT: usize = 64;
        const WRITES: u64 = if cfg!(miri) { 20 } else { 20_000 };
        let buf = std::sync::Arc::new(OwnedBuf::new(SLOT));
        let base = buf.as_ptr() as usize;
        let footer_at = base + SLOT - 8;
        let footer = move || {
            let mut f = [0u8; 8];
            // SAFETY: the slot's last word, inside the live buffer (held by `buf`).
            unsafe { read_polled(&mut f, footer_at) };
            u64::from_ne_bytes(f)
        };
        let hca = {
            let buf = buf.clone();
            std::thread::spawn(move || {
                for seq in 1..=WRITES {
                    // The slot is free once the poller cleared its footer (the credit).
                    while footer() != 0 {
                        std::thread::yield_now();
                    }
                    let mut write = vec![seq as u8; SLOT];
                    write[SLOT - 8..].copy_from_slice(&seq.to_ne_bytes());
                    // SAFETY: the whole slot, inside the live buffer.
                    unsafe { land_write(buf.as_ptr() as usize, &write) };
                }
            })
        };
        let mut seen = 0;
        while seen < WRITES {
            let f = footer();
            if f == 0 {
                std::thread::yield_now();
                continue;
            }
            seen += 1;
            assert_eq!(f, seen, "writes land in order");
            let mut payload = [0u8; SLOT - 8];
            // SAFETY: the slot's payload, inside the live buffer; the writer does not touch it
            // again before the footer is cleared below.
            unsafe { copy_from_raw(&mut payload, base) };
            assert!(
                payload.iter().all(|&b| b == seen as u8),
                "write {seen} torn: {payload:?}"
            );
            // SAFETY: the footer, as above.
            unsafe { write_polled(footer_at, &[0; 8]) };
        }
        hca.join().expect("the writer ends");
    }
}
