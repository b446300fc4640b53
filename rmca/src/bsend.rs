//! Buffered sends (`MPI_Bsend` with `MPI_Buffer_attach` / `MPI_Buffer_detach`, and the
//! per-communicator buffers of MPI 4.1, `MPI_Comm_attach_buffer`).
//!
//! The application attaches a buffer it owns ([`crate::Universe::buffer_attach`], or
//! [`crate::Communicator::attach_buffer`] for one communicator, which its buffered sends then
//! use instead of the universe's); each
//! [`crate::Communicator::bsend`] copies its message into a free part of it and starts a
//! standard send from there, so it returns at once whatever the protocol (a rendezvous send
//! continues while the application computes). A message takes exactly its length in the
//! buffer (the bookkeeping lives outside it: no `MPI_BSEND_OVERHEAD`). When the buffer has no
//! room left, after reclaiming the parts of completed sends, the bsend fails with
//! [`crate::Error::BsendBufferFull`] and sends nothing. Detaching, and finalizing, wait for
//! every buffered send to complete first, so the PML never reads a buffer given back.

use std::collections::HashMap;

use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{ContextId, RequestId, SendStart};
use rmca_runtime::Runtime;

use crate::comm::CommInner;
use crate::{Communicator, Error, Result, Shared, Universe};

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

/// The buffers attached to communicators ([`Communicator::attach_buffer`]), by the address
/// of the communicator's shared block: a communicator and its clones share one buffer, and
/// the entry goes when the last of them does (see the `Drop` of `CommInner` below), so an
/// address reused later never finds a stale entry.
#[derive(Debug, Default)]
pub(crate) struct CommPools(HashMap<usize, BsendPool>);

impl CommPools {
    /// Wait for the sends in flight from every communicator's buffer (finalize). The buffers
    /// stay attached.
    pub(crate) fn drain_all(&mut self, rt: &mut Runtime) -> Result<()> {
        let mut first_err = None;
        for pool in self.0.values_mut() {
            if let Err(e) = pool.drain(rt) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Communicator {
    /// The key of this communicator (and its clones) in [`CommPools`].
    fn pool_key(&self) -> usize {
        std::rc::Rc::as_ptr(&self.inner) as usize
    }

    /// This communicator's context id: the matching space of its point-to-point traffic.
    /// A process never gives one to two communicators it creates (the world's copies all have
    /// 0), so a binding may key per-communicator state by it.
    pub fn context_id(&self) -> ContextId {
        self.inner.context
    }

    /// Attach `buffer` to this communicator for its buffered sends
    /// ([`Communicator::bsend`]; `MPI_Comm_attach_buffer`): they use it instead of the
    /// universe's ([`Universe::buffer_attach`]), each message in flight taking its length in
    /// it. Clones of the communicator share it; communicators made from this one do not. One
    /// buffer at a time: an error if one is attached already. A communicator dropped with a
    /// buffer attached waits for the sends in flight from it (the buffer then goes).
    pub fn attach_buffer(&self, buffer: Vec<u8>) -> Result<()> {
        let mut pools = self.shared().comm_bsend.borrow_mut();
        if let Some(pool) = pools.0.get(&self.pool_key()) {
            return Err(Error::InvalidArgument(format!(
                "attach_buffer: a buffer of {} bytes is attached to this communicator already (detach it first)",
                pool.capacity()
            )));
        }
        pools.0.insert(self.pool_key(), BsendPool::new(buffer));
        Ok(())
    }

    /// Wait until every buffered send from this communicator's buffer has completed and give
    /// the buffer back (`MPI_Comm_detach_buffer`). An error if none is attached.
    pub fn detach_buffer(&self) -> Result<Vec<u8>> {
        let shared = self.shared();
        let mut pools = shared.comm_bsend.borrow_mut();
        let Some(pool) = pools.0.get_mut(&self.pool_key()) else {
            return Err(Error::InvalidArgument(
                "detach_buffer: no buffer is attached to this communicator".into(),
            ));
        };
        shared.with(|rt| pool.drain(rt))?;
        let pool = pools.0.remove(&self.pool_key()).expect("checked above");
        Ok(pool.into_buffer())
    }

    /// Wait until every buffered send from this communicator's buffer has completed; the
    /// buffer stays attached (`MPI_Comm_flush_buffer`). An error if none is attached.
    pub fn flush_buffer(&self) -> Result<()> {
        let shared = self.shared();
        let mut pools = shared.comm_bsend.borrow_mut();
        let Some(pool) = pools.0.get_mut(&self.pool_key()) else {
            return Err(Error::InvalidArgument(
                "flush_buffer: no buffer is attached to this communicator".into(),
            ));
        };
        shared.with(|rt| pool.drain(rt))
    }

    /// Copy `msg` into this communicator's buffer if one is attached, else the universe's,
    /// and start its send with `start` (given the copy).
    pub(crate) fn bsend_copy(
        &self,
        msg: &[u8],
        start: impl FnOnce(&mut Runtime, UserBuf) -> Result<SendStart>,
    ) -> Result<()> {
        let shared = self.shared();
        {
            let mut pools = shared.comm_bsend.borrow_mut();
            if let Some(pool) = pools.0.get_mut(&self.pool_key()) {
                return shared.with(|rt| pool.send(rt, msg, start));
            }
        }
        shared.bsend(msg, start)
    }
}

impl Universe {
    /// Wait until every buffered send from the universe's buffer has completed; the buffer
    /// stays attached (`MPI_Buffer_flush`). An error if none is attached.
    pub fn buffer_flush(&self) -> Result<()> {
        let mut slot = self.shared.bsend.borrow_mut();
        let Some(pool) = slot.as_mut() else {
            return Err(Error::InvalidArgument(
                "buffer_flush: no buffer is attached".into(),
            ));
        };
        self.shared.with(|rt| pool.drain(rt))
    }
}

impl Shared {
    /// The last handle of the communicator whose block is at `key` went: its buffer (if
    /// any) is detached once its sends completed. Memory the PML may still read (a drop
    /// inside a runtime call, or a failed wait) is leaked rather than freed under it.
    fn drop_comm_pool(&self, key: usize) {
        let Ok(mut pools) = self.comm_bsend.try_borrow_mut() else {
            tracing::warn!("a communicator dropped inside a buffered send: its buffer is leaked");
            return;
        };
        let Some(mut pool) = pools.0.remove(&key) else {
            return;
        };
        drop(pools);
        let drained = match self.rt.try_borrow_mut() {
            // Finalized: no PML is left to read the buffer.
            Ok(mut rt) => rt.as_mut().map_or(Ok(()), |rt| pool.drain(rt)),
            Err(_) => Err(Error::InvalidArgument(
                "the runtime is busy (dropped inside a runtime call)".into(),
            )),
        };
        match drained {
            Ok(()) => drop(pool.into_buffer()),
            Err(e) => {
                tracing::warn!("a communicator's buffered sends could not be completed as it was dropped ({e}): its buffer is leaked");
                std::mem::forget(pool);
            }
        }
    }
}

impl Drop for CommInner {
    fn drop(&mut self) {
        // Cheap for the communicators that never had a buffer: one borrow, one lookup in a
        // map that is nearly always empty.
        let key = self as *const CommInner as usize;
        let attached = self
            .shared
            .comm_bsend
            .try_borrow()
            .map_or(true, |p| p.0.contains_key(&key));
        if attached {
            self.shared.drop_comm_pool(key);
        }
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

    /// A singleton messaging itself: a communicator's buffer takes its buffered sends (and
    /// its clones'), the universe's too small one the others'; detach gives it back once the
    /// sends completed; a buffer dropped with its communicator goes after its sends.
    #[test]
    fn a_communicators_buffer_comes_before_the_universes() {
        let universe = crate::init().expect("a singleton job");
        let world = universe.world();
        let me = world.rank();
        universe.buffer_attach(vec![0; 2]).unwrap();
        let comm = world.dup().unwrap();
        let big: Vec<u8> = (0..100_000).map(|i| (i % 253) as u8).collect();
        assert!(matches!(
            comm.bsend(&big, me, 1),
            Err(Error::BsendBufferFull { attached: 2, .. })
        ));
        comm.attach_buffer(vec![0; 2 * big.len()]).unwrap();
        comm.bsend(&big, me, 1).unwrap();
        comm.clone().bsend(&big, me, 2).unwrap();
        assert!(matches!(
            comm.bsend(&[1u8], me, 3),
            Err(Error::BsendBufferFull { .. })
        ));
        assert!(matches!(
            world.bsend(&big, me, 3),
            Err(Error::BsendBufferFull { attached: 2, .. })
        ));
        let mut got = vec![0u8; big.len()];
        for tag in [1, 2] {
            comm.recv(&mut got, me, tag).unwrap();
            assert_eq!(got, big);
        }
        comm.flush_buffer().unwrap();
        assert_eq!(comm.detach_buffer().unwrap().len(), 2 * big.len());
        assert!(comm.detach_buffer().is_err());
        comm.attach_buffer(vec![0; big.len()]).unwrap();
        comm.bsend(&big, me, 4).unwrap();
        let other = world.dup().unwrap();
        assert!(matches!(
            other.bsend(&big, me, 5),
            Err(Error::BsendBufferFull { attached: 2, .. })
        ));
        comm.recv(&mut got, me, 4).unwrap();
        drop(comm);
        assert!(universe.shared.comm_bsend.borrow().0.is_empty());
        universe.buffer_flush().unwrap();
        assert_eq!(universe.buffer_detach().unwrap().len(), 2);
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
