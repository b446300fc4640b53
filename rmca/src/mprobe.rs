//! Matched probes (`MPI_Mprobe`, `MPI_Improbe`, `MPI_Mrecv`, `MPI_Imrecv`).
//!
//! [`Communicator::iprobe`] says a message is there, but the receive that follows matches
//! anew: another receive (of another thread, or a wildcard one posted meanwhile) may take the
//! message first. A matched probe removes the message from matching and hands it out as a
//! [`Message`], which only [`Message::recv`] (or [`crate::raw::imrecv`]) receives: the way to
//! receive a message whose size is learnt first (mpi4py's `comm.recv` of Python objects). A
//! rendezvous message's data moves only when it is received.

use rmca_framework::btl::CommPattern;
use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{MessageId, Source, TagSel};

use crate::{Communicator, Error, Result, Src, Status, ANY_TAG};

/// A message taken out of matching by [`Communicator::mprobe`] or
/// [`Communicator::improbe`] (MPI's `MPI_Message`): receive it with [`Message::recv`]. A
/// message is received once; one never received stays in the runtime until finalize (MPI
/// requires every matched message to be received).
#[derive(Debug)]
#[must_use = "a matched message must be received"]
pub struct Message {
    /// `None` for the message of a probe of [`crate::PROC_NULL`] (`MPI_MESSAGE_NO_PROC`).
    id: Option<MessageId>,
    comm: Communicator,
    status: Status,
}

impl Communicator {
    /// A matched probe that does not block: the earliest arrived message from `source` with
    /// `tag` ([`crate::ANY_SOURCE`], [`crate::ANY_TAG`] allowed), removed from matching, or
    /// `None` if there is none yet. A probe of [`crate::PROC_NULL`] finds at once a message
    /// of no process ([`Message::is_no_proc`]), whose receive receives nothing.
    pub fn improbe(&self, source: impl Into<Src>, tag: i32) -> Result<Option<Message>> {
        let tag = match tag {
            ANY_TAG => TagSel::Any,
            t if t < 0 => return Err(Error::BadTag(t)),
            t => TagSel::Tag(t),
        };
        let source = match source.into() {
            Src::Any => Source::Any,
            Src::Rank(r) => Source::Rank(self.world_rank(r)?),
            Src::Null => {
                return Ok(Some(Message {
                    id: None,
                    comm: self.clone(),
                    status: Status::PROC_NULL,
                }))
            }
            Src::Negative(r) => return Err(Error::NegativeRank(r)),
        };
        let ctx = crate::raw::p2p_context(self);
        let found = self.shared().with(|rt| {
            if let Some(found) = rt.pml.improbe(ctx, source, tag)? {
                return Ok(Some(found));
            }
            rt.progress();
            Ok(rt.pml.improbe(ctx, source, tag)?)
        })?;
        let Some((id, st)) = found else {
            // A probing loop progresses non-blocking collectives too.
            self.shared().step_collectives();
            return Ok(None);
        };
        Ok(Some(Message {
            id: Some(id),
            comm: self.clone(),
            status: self.finish(st)?,
        }))
    }

    /// A matched probe that waits for a message (see [`Communicator::improbe`]).
    pub fn mprobe(&self, source: impl Into<Src>, tag: i32) -> Result<Message> {
        let source = source.into();
        let mut backoff = rmca_framework::progress::ReleasingBackoff::default();
        loop {
            if let Some(m) = self.improbe(source, tag)? {
                return Ok(m);
            }
            // The pass made progress inside test/iprobe; its event count is not known here.
            backoff.pass(0);
        }
    }
}

impl Message {
    /// The message's source, tag and length in bytes (as a probe reports them).
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// Whether this is the message of a probe of [`crate::PROC_NULL`]: receiving it receives
    /// nothing and reports [`Status::PROC_NULL`].
    pub fn is_no_proc(&self) -> bool {
        self.id.is_none()
    }

    /// The communicator the message was probed on.
    pub fn communicator(&self) -> &Communicator {
        &self.comm
    }

    /// Receive the message into `buf` (blocking). A message longer than `buf` fills it and
    /// fails with a truncation error, as a receive does.
    pub fn recv<T: bytemuck::Pod>(self, buf: &mut [T]) -> Result<Status> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        // SAFETY: `bytes` stays borrowed until the receive completed: waited below.
        #[allow(unsafe_code)]
        let r = unsafe { crate::raw::imrecv(self, bytes.as_mut_ptr(), bytes.len())? };
        r.wait()
    }

    /// Start receiving the message into `buf`; `buf` stays borrowed until the end of
    /// `scope` (see [`crate::scope`]), and the request completes as [`Message::recv`] does.
    pub fn irecv<'s, T: bytemuck::Pod>(
        self,
        scope: &'s crate::Scope<'s, '_>,
        buf: &'s mut [T],
    ) -> Result<crate::Request<'s>> {
        let comm = self.comm.clone();
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        // SAFETY: `buf` is borrowed for the scope, which waits for the request before it
        // ends (even if the request is forgotten).
        #[allow(unsafe_code)]
        let started = unsafe { self.start(bytes.as_mut_ptr(), bytes.len())? };
        Ok(match started {
            Some(id) => scope.pending(&comm, id),
            None => crate::Request::done(Status::PROC_NULL),
        })
    }

    /// Start the receive into `len` bytes at `buf`: the PML's request, or `None` for a
    /// message of no process.
    ///
    /// # Safety
    /// As [`crate::raw::imrecv`].
    #[allow(unsafe_code)]
    pub(crate) unsafe fn start(
        self,
        buf: *mut u8,
        len: usize,
    ) -> Result<Option<rmca_framework::pml::RequestId>> {
        let Some(id) = self.id else {
            return Ok(None);
        };
        let ubuf = if len == 0 {
            UserBuf::empty()
        } else {
            // SAFETY: the caller's contract: valid for writes, unaccessed until completion.
            unsafe { UserBuf::from_raw_parts_mut(buf, len) }
        };
        let req = self
            .comm
            .shared()
            .with(|rt| Ok(rt.pml.imrecv(id, ubuf, CommPattern::NonBlocking)?))?;
        Ok(Some(req))
    }
}

#[cfg(test)]
mod tests {
    /// A rank messaging itself: a message taken by a matched probe is not matched by a
    /// later wildcard probe, matched probe or receive, and is received whole (eager and
    /// rendezvous sizes) by its own receive; a probe of `PROC_NULL` gives a message of no
    /// process. (One test: a process initializes rmca once.)
    #[test]
    fn matched_messages_are_not_stolen() {
        let universe = crate::init().expect("a singleton job");
        let world = universe.world();
        let me = world.rank();
        assert!(world
            .improbe(crate::ANY_SOURCE, crate::ANY_TAG)
            .unwrap()
            .is_none());
        for len in [5usize, 1 << 20] {
            let out: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            crate::scope(|s| {
                let send = world.isend(s, &out, me, 3).unwrap();
                let m = world.mprobe(crate::ANY_SOURCE, crate::ANY_TAG).unwrap();
                assert_eq!((m.status().source, m.status().tag), (me, 3));
                assert_eq!(m.status().bytes, len);
                assert!(!m.is_no_proc());
                // The message is taken: nothing else finds it.
                assert!(world
                    .iprobe(crate::ANY_SOURCE, crate::ANY_TAG)
                    .unwrap()
                    .is_none());
                assert!(world.improbe(me, 3).unwrap().is_none());
                let mut got = vec![0u8; len];
                let st = m.recv(&mut got).unwrap();
                assert_eq!((st.source, st.tag, st.bytes), (me, 3, len));
                assert_eq!(got, out);
                send.wait().unwrap();
            });
        }
        // A later receive does not take a matched message; truncation is reported.
        world.send(&[1u32, 2, 3], me, 9).unwrap();
        let m = world.improbe(me, 9).unwrap().expect("sent to self");
        world.send(&[7u32], me, 9).unwrap();
        let mut first = [0u32; 1];
        assert_eq!(world.recv(&mut first, me, 9).unwrap().bytes, 4);
        assert_eq!(first, [7]);
        let mut short = [0u32; 2];
        assert!(matches!(m.recv(&mut short), Err(Error::Status { .. })));
        assert_eq!(short, [1, 2]);
        // The non-blocking receive of a matched message.
        world.send(&[5u16, 6], me, 11).unwrap();
        let m = world.mprobe(crate::ANY_SOURCE, 11).unwrap();
        let mut pair = [0u16; 2];
        crate::scope(|s| {
            let r = m.irecv(s, &mut pair).unwrap();
            assert_eq!(r.wait().unwrap().bytes, 4);
        });
        assert_eq!(pair, [5, 6]);
        let m = world.improbe(crate::PROC_NULL, 0).unwrap().unwrap();
        assert!(m.is_no_proc());
        assert_eq!(m.recv::<u8>(&mut []).unwrap(), Status::PROC_NULL);
        assert!(matches!(world.improbe(me, -5), Err(Error::BadTag(-5))));
    }

    use crate::{Error, Status};
}
