//! Buffered sends (`MPI_Bsend` with `MPI_Buffer_attach` / `MPI_Buffer_detach`).
//!
//! The application attaches a buffer it owns ([`crate::Universe::buffer_attach`]); each
//! [`crate::Communicator::bsend`] copies its message into a free part of it and starts a
//! standard send from there, so it returns at once whatever the protocol (a rendezvous send
//! continues while the application computes). A message takes exactly its length in the
//! buffer (the bookkeeping lives outside it: no `MPI_BSEND_OVERHEAD`). When the buffer has no
//! room left, after reclaiming the parts of completed sends, the bsend fails with
//! [`crate::Error::BsendBufferFull`] and sends nothing. Detaching, and finalizing, wait for
//! every buffered send to complete first, so the PML never reads a buffer given back.

use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{RequestId, SendStart};
use rmca_runtime::Runtime;

use crate::{Error, Result};

/// A message of the attached buffer still being sent.
#[derive(Debug)]
struct InFlight {
    offset: usize,
    len: usize,
    request: RequestId,
}

/// The attached buffer and the messages being sent from it.
#[derive(Debug)]
pub(crate) struct BsendPool {
    /// Written only through its raw pointer (`as_mut_ptr`): the PML holds pointers into
    /// parts that are in flight, which a reference to the whole buffer would invalidate.
    buf: Vec<u8>,
    /// In flight, sorted by offset (first fit between them).
    in_flight: Vec<InFlight>,
}

impl BsendPool {
    pub(crate) fn new(buf: Vec<u8>) -> Self {
        Self {
            buf,
            in_flight: Vec::new(),
        }
    }

    /// Bytes attached.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Forget the sends the PML completed (a failed one is logged: like `MPI_Bsend`, the
    /// caller returned long ago and has no request to learn it from).
    fn reclaim(&mut self, rt: &mut Runtime) {
        self.in_flight.retain(|m| match rt.pml.test(m.request) {
            Ok(None) => true,
            Ok(Some(st)) => {
                if let Some(e) = st.error() {
                    tracing::warn!("buffered send to world rank {} failed: {e}", st.source);
                }
                false
            }
            Err(e) => {
                tracing::warn!("buffered send lost track of its request: {e}");
                false
            }
        });
    }

    /// The offset of a free part of `len` bytes (first fit), and where its entry goes in
    /// `in_flight`.
    fn find_room(&self, len: usize) -> Option<(usize, usize)> {
        let mut start = 0;
        for (i, m) in self.in_flight.iter().enumerate() {
            if m.offset - start >= len {
                return Some((start, i));
            }
            start = m.offset + m.len;
        }
        (self.buf.len() - start >= len).then_some((start, self.in_flight.len()))
    }

    /// Copy `msg` into the buffer and start its send with `start` (given the copy).
    #[allow(unsafe_code)]
    pub(crate) fn send(
        &mut self,
        rt: &mut Runtime,
        msg: &[u8],
        start: impl FnOnce(&mut Runtime, UserBuf) -> Result<SendStart>,
    ) -> Result<()> {
        let mut room = self.find_room(msg.len());
        if room.is_none() {
            rt.progress();
            self.reclaim(rt);
            room = self.find_room(msg.len());
        }
        let Some((offset, at)) = room else {
            return Err(Error::BsendBufferFull {
                needed: msg.len(),
                attached: self.buf.len(),
                in_use: self.in_flight.iter().map(|m| m.len).sum(),
            });
        };
        // SAFETY: `offset + msg.len()` is within `buf` (find_room), and no send in flight
        // reads that part (parts in flight do not overlap the free gap found). The pointer
        // comes from `as_mut_ptr`, which leaves the PML's pointers into other parts valid.
        let copy = unsafe {
            let dst = self.buf.as_mut_ptr().add(offset);
            std::ptr::copy_nonoverlapping(msg.as_ptr(), dst, msg.len());
            // The buffer is not moved, resized or freed until this send completed: detach
            // and finalize wait for every send in flight first.
            UserBuf::from_raw_parts(dst, msg.len())
        };
        match start(rt, copy)? {
            SendStart::Done => {}
            SendStart::Pending(request) => self.in_flight.insert(
                at,
                InFlight {
                    offset,
                    len: msg.len(),
                    request,
                },
            ),
        }
        Ok(())
    }

    /// Wait for every send in flight (detach, finalize); the buffer is then free to give back.
    /// A wait the PML refuses (an unknown request: it holds nothing of it) is reported after
    /// the others were waited.
    pub(crate) fn drain(&mut self, rt: &mut Runtime) -> Result<()> {
        let mut first_err = None;
        for m in std::mem::take(&mut self.in_flight) {
            match rt.wait(m.request) {
                Ok(st) => {
                    if let Some(e) = st.error() {
                        tracing::warn!("buffered send to world rank {} failed: {e}", st.source);
                    }
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), |e| Err(e.into()))
    }

    /// The buffer, once drained.
    pub(crate) fn into_buffer(self) -> Vec<u8> {
        debug_assert!(self.in_flight.is_empty(), "drained before it is given back");
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(len: usize, in_flight: &[(usize, usize)]) -> BsendPool {
        BsendPool {
            buf: vec![0; len],
            in_flight: in_flight
                .iter()
                .enumerate()
                .map(|(i, &(offset, len))| InFlight {
                    offset,
                    len,
                    request: RequestId(i as u64),
                })
                .collect(),
        }
    }

    #[test]
    fn first_fit_between_messages_in_flight() {
        let p = pool(100, &[(10, 20), (40, 10)]);
        assert_eq!(p.find_room(10), Some((0, 0)));
        assert_eq!(
            p.find_room(11),
            Some((50, 2)),
            "the gap 30..40 is too small"
        );
        assert_eq!(p.find_room(50), Some((50, 2)));
        assert_eq!(p.find_room(51), None);
        let p = pool(100, &[(0, 30), (40, 10)]);
        assert_eq!(p.find_room(10), Some((30, 1)));
        assert_eq!(p.find_room(0), Some((0, 0)), "empty messages need no room");
        assert_eq!(pool(0, &[]).find_room(0), Some((0, 0)));
        assert_eq!(pool(8, &[(0, 8)]).find_room(1), None);
    }
}
