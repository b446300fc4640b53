//! [`UserBuf`]: application memory handed to the PML and BTLs for the life of a request.
//!
//! Non-blocking MPI operations let the library read or write the user's buffer after the call
//! returns, so a `UserBuf` carries no lifetime: it is a capability, like a raw pointer, that
//! the PMLs and BTLs copy into their request tables. Every constructor is therefore `unsafe`:
//! whoever lends memory promises it stays valid until the request carrying it completes (the
//! `rmca` facade keeps that promise with blocking calls and request scopes). In return, a PML
//! or BTL must not touch a `UserBuf` after completing the request that carried it. This module
//! is the only place where that raw memory is read or written.
#![allow(unsafe_code)]

use std::fmt;

/// A region of application memory that stays valid (and is not otherwise accessed) until the
/// request that owns it completes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UserBuf {
    ptr: *mut u8,
    len: usize,
    writable: bool,
}

// SAFETY: a UserBuf is a capability to access memory whose owner (the request) guarantees
// validity; moving that capability to a progress thread is no different from moving a pointer.
unsafe impl Send for UserBuf {}

impl fmt::Debug for UserBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "UserBuf({:p}, {} B{})",
            self.ptr,
            self.len,
            if self.writable { ", rw" } else { "" }
        )
    }
}

impl UserBuf {
    /// An empty buffer.
    pub const fn empty() -> Self {
        Self {
            ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
            len: 0,
            writable: true,
        }
    }

    /// A read-only view of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads until every user of this `UserBuf` (and its copies)
    /// is done with it, and must not be written by anyone else meanwhile.
    pub unsafe fn from_raw_parts(ptr: *const u8, len: usize) -> Self {
        Self {
            ptr: ptr as *mut u8,
            len,
            writable: false,
        }
    }

    /// A writable view of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes until every user of this `UserBuf` (and
    /// its copies) is done with it, and must not be accessed by anyone else meanwhile.
    pub unsafe fn from_raw_parts_mut(ptr: *mut u8, len: usize) -> Self {
        Self {
            ptr,
            len,
            writable: true,
        }
    }

    /// Lend a slice as a read-only `UserBuf`. The borrow is not carried by the result, which
    /// is why safe code cannot call it:
    ///
    /// ```compile_fail,E0133
    /// let v = vec![0u8; 4];
    /// let lent = rmca_framework::buffer::UserBuf::from_slice(&v);
    /// ```
    ///
    /// # Safety
    /// The slice must stay valid and unwritten until every user of this `UserBuf` (and its
    /// copies) is done with it: typically until the request it is given to has completed, even
    /// if the borrow of `slice` ends earlier in the caller's code.
    pub unsafe fn from_slice(slice: &[u8]) -> Self {
        Self {
            ptr: slice.as_ptr() as *mut u8,
            len: slice.len(),
            writable: false,
        }
    }

    /// Lend a mutable slice as a writable `UserBuf`. The borrow is not carried by the result,
    /// which is why safe code cannot call it:
    ///
    /// ```compile_fail,E0133
    /// let mut v = vec![0u8; 4];
    /// let lent = rmca_framework::buffer::UserBuf::from_mut_slice(&mut v);
    /// ```
    ///
    /// # Safety
    /// The slice must stay valid and otherwise unaccessed until every user of this `UserBuf`
    /// (and its copies) is done with it: typically until the request it is given to has
    /// completed, even if the borrow of `slice` ends earlier in the caller's code.
    pub unsafe fn from_mut_slice(slice: &mut [u8]) -> Self {
        Self {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
            writable: true,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when the buffer may be written.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The start address (for RDMA descriptors and `process_vm_readv`).
    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// The start pointer, for FFI that needs it (verbs, CMA). Reading or writing through it is
    /// subject to the same contract as the constructor's.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The sub-range `offset..offset+len`. Panics if out of bounds (a PML bug, not user input).
    pub fn slice(&self, offset: usize, len: usize) -> Self {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "UserBuf::slice out of bounds"
        );
        // SAFETY: in bounds per the assertion, so the pointer stays inside the original region.
        Self {
            ptr: unsafe { self.ptr.add(offset) },
            len,
            writable: self.writable,
        }
    }

    /// Read the bytes. The returned slice must not outlive the request.
    pub fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the constructor's contract guarantees the region is valid for reads and not
        // written concurrently for as long as this UserBuf is in use.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Copy `src` into the buffer at `offset`. Panics if the buffer is read-only or too small.
    #[inline]
    pub fn write_at(&self, offset: usize, src: &[u8]) {
        assert!(self.writable, "write into a read-only UserBuf");
        assert!(
            offset
                .checked_add(src.len())
                .is_some_and(|end| end <= self.len),
            "UserBuf::write_at out of bounds"
        );
        // SAFETY: bounds checked above; the constructor's contract grants exclusive write
        // access; src is a distinct Rust slice so the regions cannot overlap.
        unsafe { copy_to_raw(src, self.ptr.add(offset)) }
    }
}

impl UserBuf {
    /// Run `f` on bytes `offset..offset + len` in place (an accumulate combines the target's
    /// memory where it is, without a copy out and back). Panics if the buffer is read-only
    /// or too small.
    pub fn with_mut_at<R>(&self, offset: usize, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        assert!(self.writable, "write into a read-only UserBuf");
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "UserBuf::with_mut_at out of bounds"
        );
        if len == 0 {
            return f(&mut []);
        }
        // SAFETY: bounds checked above; the constructor's contract grants exclusive write
        // access to the region while this UserBuf is in use, and the slice does not outlive
        // `f`.
        f(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), len) })
    }
}

/// Copy `src` to `dst`. Up to 64 bytes (the fragments and payloads of small messages) the
/// copy is a few possibly overlapping word moves inline, instead of a call into `memcpy`;
/// longer copies call it.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes and must not overlap `src`.
#[inline(always)]
pub unsafe fn copy_to_raw(src: &[u8], dst: *mut u8) {
    let (n, s) = (src.len(), src.as_ptr());
    // SAFETY (every branch): each access is inside 0..n of `src` and `dst` (the caller's
    // contract for `dst`), and the regions do not overlap.
    unsafe {
        if n > 64 {
            std::ptr::copy_nonoverlapping(s, dst, n);
        } else if n >= 16 {
            // Unrolled (a loop here is turned back into a memcpy call): chunks at 0, 16 and
            // 32 as far as they fit, then the last 16 bytes.
            std::ptr::copy_nonoverlapping(s, dst, 16);
            if n > 32 {
                std::ptr::copy_nonoverlapping(s.add(16), dst.add(16), 16);
                if n > 48 {
                    std::ptr::copy_nonoverlapping(s.add(32), dst.add(32), 16);
                }
            }
            std::ptr::copy_nonoverlapping(s.add(n - 16), dst.add(n - 16), 16);
        } else if n >= 8 {
            std::ptr::copy_nonoverlapping(s, dst, 8);
            std::ptr::copy_nonoverlapping(s.add(n - 8), dst.add(n - 8), 8);
        } else if n >= 4 {
            std::ptr::copy_nonoverlapping(s, dst, 4);
            std::ptr::copy_nonoverlapping(s.add(n - 4), dst.add(n - 4), 4);
        } else if n >= 2 {
            std::ptr::copy_nonoverlapping(s, dst, 2);
            std::ptr::copy_nonoverlapping(s.add(n - 2), dst.add(n - 2), 2);
        } else if n == 1 {
            // Not a loop over 0..n: LLVM turns that back into a call to memcpy (a 1 B
            // payload paid the call: callgrind, bench/osu-instructions.sh 1).
            *dst = *s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SAFETY (both helpers): every test uses the UserBuf only while the slice is borrowed.
    fn lend(v: &[u8]) -> UserBuf {
        unsafe { UserBuf::from_slice(v) }
    }
    fn lend_mut(v: &mut [u8]) -> UserBuf {
        unsafe { UserBuf::from_mut_slice(v) }
    }

    #[test]
    fn every_short_write_lands_exactly() {
        // Short writes use overlapping word moves: each length at each offset writes its
        // bytes and nothing around them.
        for n in 0..=80usize {
            for offset in 0..8usize {
                let mut mem = vec![0xAAu8; 96];
                let src: Vec<u8> = (0..n as u8).map(|b| b + 1).collect();
                lend_mut(&mut mem).write_at(offset, &src);
                assert!(mem[..offset].iter().all(|&b| b == 0xAA), "before, n {n}");
                assert_eq!(&mem[offset..offset + n], &src[..], "n {n} at {offset}");
                assert!(mem[offset + n..].iter().all(|&b| b == 0xAA), "after, n {n}");
            }
        }
    }

    #[test]
    fn slice_write_and_read_back() {
        let mut v = vec![0u8; 8];
        let b = lend_mut(&mut v);
        b.slice(2, 4).write_at(1, &[7, 8]);
        assert_eq!(b.as_slice(), &[0, 0, 0, 7, 8, 0, 0, 0]);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn slice_out_of_bounds_panics() {
        let v = vec![0u8; 4];
        lend(&v).slice(3, 2);
    }

    #[test]
    #[should_panic(expected = "read-only")]
    fn write_to_read_only_panics() {
        let v = vec![0u8; 4];
        lend(&v).write_at(0, &[1]);
    }
}
