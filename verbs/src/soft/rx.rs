//! Batched UD receive: one `recvmmsg` call fills up to [`RxBatch::capacity`] MTU-sized slots.
//!
//! Each slot receives one datagram, whole or truncated (a datagram longer than a slot is cut
//! by the kernel and flagged `MSG_TRUNC`: the caller drops it as above the MTU, as a HCA drops
//! a packet above its MTU), so datagram boundaries, and with them the rule "one send WR = one
//! datagram <= MTU", are kept.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

/// Bytes of slots a batch aims at: 32 slots of a 2 KiB MTU, 4 of the 65000-byte loopback MTU.
const BATCH_BYTES: usize = 256 * 1024;
/// Most datagrams per call.
pub(crate) const MAX_BATCH: usize = 32;

/// The slots of one receive batch and what the last call put in them.
#[derive(Debug)]
pub(crate) struct RxBatch {
    buf: Vec<u8>,
    slot: usize,
    /// Length received in each slot (at most `slot`) and whether the datagram was longer.
    got: Vec<(usize, bool)>,
}

impl RxBatch {
    /// Slots of `slot` bytes (the UD header plus the MTU), as many as fit [`BATCH_BYTES`]
    /// (1 ..= [`MAX_BATCH`]).
    pub(crate) fn for_mtu(slot: usize) -> Self {
        let n = (BATCH_BYTES / slot.max(1)).clamp(1, MAX_BATCH);
        Self::new(slot, n)
    }

    pub(crate) fn new(slot: usize, n: usize) -> Self {
        let n = n.clamp(1, MAX_BATCH);
        Self {
            buf: vec![0; slot * n],
            slot,
            got: Vec::with_capacity(n),
        }
    }

    /// Datagrams one call can return.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.len() / self.slot.max(1)
    }

    /// Records what the kernel reported for slot `i` (in order: slot `i` is the `i`-th datagram
    /// received): `len` bytes copied, `flags` its `msg_flags`.
    fn record(&mut self, len: usize, flags: i32) {
        let trunc = flags & libc::MSG_TRUNC != 0 || len > self.slot;
        self.got.push((len.min(self.slot), trunc));
    }

    /// Datagram `i` of the last batch and whether it was truncated (longer than a slot).
    pub(crate) fn datagram(&mut self, i: usize) -> (&mut [u8], bool) {
        let (len, trunc) = self.got[i];
        let at = i * self.slot;
        (&mut self.buf[at..at + len], trunc)
    }

    /// Receives one datagram into slot 0 without blocking (`recv`, not `recvmmsg`: a call that
    /// finds nothing skips the message-header and iovec import, the larger part of an idle
    /// poll's cost). `WouldBlock` when nothing is queued; `Ok(1)` otherwise, the datagram then
    /// being [`RxBatch::datagram`] 0 (flagged truncated when longer than a slot).
    #[allow(unsafe_code)]
    pub(crate) fn recv_one(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        self.got.clear();
        let slot = self.slot.min(self.buf.len());
        // SAFETY: the fd is the live socket of `sock`; the buffer names `slot` writable bytes
        // of `self.buf` (slot <= buf.len()), which outlive the call. MSG_TRUNC makes the call
        // return the datagram's real length, so a datagram longer than the slot is detected.
        let r = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                self.buf.as_mut_ptr().cast(),
                slot,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let len = r as usize;
        self.got.push((len.min(self.slot), len > self.slot));
        Ok(1)
    }

    /// Receives what is queued on `sock`, up to [`RxBatch::capacity`] datagrams, without
    /// blocking. `WouldBlock` when nothing is queued.
    #[allow(unsafe_code)]
    pub(crate) fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        let n = self.capacity();
        let slot = self.slot;
        self.got.clear();
        let base = self.buf.as_mut_ptr();
        // Only the `n` entries the call uses are written: this runs on every poll of an idle
        // socket, and at the loopback MTU n is 4 of 32.
        let mut iov = [const { std::mem::MaybeUninit::<libc::iovec>::uninit() }; MAX_BATCH];
        let mut hdrs = [const { std::mem::MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_BATCH];
        for i in 0..n {
            // SAFETY: i * slot + slot <= buf.len() (capacity() slots fit the buffer), so the
            // pointer stays inside the allocation.
            let io = iov[i].write(libc::iovec {
                iov_base: unsafe { base.add(i * slot) }.cast(),
                iov_len: slot,
            });
            // SAFETY: mmsghdr is plain data for which all-zero is a valid value (null pointers,
            // zero lengths); the iovec it then points at lives until the end of this call.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = io;
            h.msg_hdr.msg_iovlen = 1;
            hdrs[i].write(h);
        }
        // SAFETY: the fd is the live socket of `sock`; `hdrs[..n]` are initialized above and
        // point at `iov[..n]`, each naming `slot` writable bytes of `self.buf`, all of which
        // outlive the call; no address or control buffers are asked for (null, zero length).
        let r = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let r = (r as usize).min(n);
        for h in &hdrs[..r] {
            // SAFETY: the first n entries were initialized above and r <= n.
            let h = unsafe { h.assume_init_ref() };
            self.record(h.msg_len as usize, h.msg_hdr.msg_flags);
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        (a, b)
    }

    #[test]
    fn batch_size_follows_the_mtu() {
        assert_eq!(RxBatch::for_mtu(28 + 2048).capacity(), 32);
        assert_eq!(RxBatch::for_mtu(28 + 65000).capacity(), 4);
        assert_eq!(RxBatch::for_mtu(1 << 20).capacity(), 1);
        assert_eq!(RxBatch::new(100, 0).capacity(), 1);
    }

    #[test]
    fn nothing_queued_would_block() {
        let (_a, b) = pair();
        let mut rx = RxBatch::new(64, 4);
        let e = rx.recv(&b).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn one_call_returns_what_is_queued_in_order_and_keeps_boundaries() {
        let (a, b) = pair();
        for i in 0..6u8 {
            a.send(&vec![i; 10 + i as usize]).unwrap();
        }
        let mut rx = RxBatch::new(64, 4);
        // A full batch, then the rest in a short one.
        assert_eq!(rx.recv(&b).unwrap(), 4);
        for i in 0..4u8 {
            let (d, t) = rx.datagram(i as usize);
            assert!(!t);
            assert_eq!(d, &vec![i; 10 + i as usize][..]);
        }
        assert_eq!(rx.recv(&b).unwrap(), 2);
        assert_eq!(rx.datagram(1).0, &[5u8; 15][..]);
        assert_eq!(rx.recv(&b).unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn a_datagram_longer_than_its_slot_is_flagged_truncated_and_its_neighbours_are_whole() {
        let (a, b) = pair();
        a.send(&[1; 32]).unwrap();
        a.send(&[2; 100]).unwrap();
        a.send(&[3; 64]).unwrap();
        let mut rx = RxBatch::new(64, 8);
        assert_eq!(rx.recv(&b).unwrap(), 3);
        assert_eq!(rx.datagram(0), (&mut [1u8; 32][..], false));
        let (d, t) = rx.datagram(1);
        assert!(t, "100 bytes into a 64-byte slot");
        assert_eq!(d.len(), 64);
        assert_eq!(rx.datagram(2), (&mut [3u8; 64][..], false));
    }

    #[test]
    fn recv_one_takes_one_datagram_and_flags_a_long_one() {
        let (a, b) = pair();
        let mut rx = RxBatch::new(64, 4);
        assert_eq!(
            rx.recv_one(&b).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        a.send(&[7; 10]).unwrap();
        a.send(&[8; 100]).unwrap();
        a.send(&[]).unwrap();
        assert_eq!(rx.recv_one(&b).unwrap(), 1);
        assert_eq!(rx.datagram(0), (&mut [7u8; 10][..], false));
        assert_eq!(rx.recv_one(&b).unwrap(), 1);
        let (d, t) = rx.datagram(0);
        assert!(t, "100 bytes into a 64-byte slot");
        assert_eq!(d, &[8u8; 64][..]);
        assert_eq!(rx.recv_one(&b).unwrap(), 1);
        assert_eq!(rx.datagram(0), (&mut [][..], false));
        assert_eq!(
            rx.recv_one(&b).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }

    #[test]
    fn an_empty_datagram_is_a_datagram() {
        let (a, b) = pair();
        a.send(&[]).unwrap();
        let mut rx = RxBatch::new(64, 2);
        assert_eq!(rx.recv(&b).unwrap(), 1);
        assert_eq!(rx.datagram(0), (&mut [][..], false));
    }
}
