//! Requests: one flat [`Req`] per send or receive, the part only rendezvous transfers use
//! ([`Cold`]), and the [`Requests`] that holds them under generational ids.

use std::time::Instant;

use rmca_framework::bml::BtlIndex;
use rmca_framework::btl::{CommPattern, Registration};
use rmca_framework::buffer::UserBuf;
use rmca_framework::matching::Seq;
use rmca_framework::pml::{
    ContextId, RecvArgs, RequestId, SendArgs, SendMode, Source, Status, StatusError, Tag, TagSel,
};
use rmca_framework::rank::Rank;
use rmca_framework::slab::Slab;

use crate::bulk::Bulk;
use crate::sched::Segment;

/// Where a request stands. The data of each phase is in [`Req`] (`count`, `wanted`) or, for
/// the rendezvous phases, in its [`Cold`] part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Send: the first fragment (MATCH, RNDV or RGET) was not accepted by a BTL yet.
    SendStart,
    /// Send: the rendezvous left with `count` bytes; waiting for ACK (or FIN after an RGET).
    SendWaitAck,
    /// Send: pushing FRAGs (`Cold::segs`).
    SendStream,
    /// Receive: posted, not matched yet.
    RecvPosted,
    /// Receive: copy pipeline, `count` of `wanted` bytes arrived.
    RecvFrags,
    /// Receive: reading the sender's buffer (`Cold::get`).
    RecvGet,
    /// Completed: `peer`, `tag`, `count` and `error` are the status.
    Done,
}

/// One send or receive request.
#[derive(Debug)]
pub(super) struct Req {
    pub(super) buf: UserBuf,
    /// Send: the destination. Receive: the sender once matched (the source selector before,
    /// 0 for any). Done: the status's source.
    pub(super) peer: Rank,
    /// Send: the tag. Receive: the message's tag once matched (the selector before, 0 for
    /// any). Done: the status's tag.
    pub(super) tag: Tag,
    pub(super) context: ContextId,
    /// Send: the MPI sequence number.
    pub(super) seq: Seq,
    /// Receive: length of the matched message.
    pub(super) msg_len: usize,
    /// SendWaitAck: bytes sent with the rendezvous. RecvFrags: bytes arrived. Done: the
    /// status's length.
    pub(super) count: usize,
    /// RecvFrags: bytes to arrive in all.
    pub(super) wanted: usize,
    pub(super) phase: Phase,
    pub(super) mode: SendMode,
    pub(super) pattern: CommPattern,
    /// Queued in `Core::active`.
    pub(super) active: bool,
    /// RecvFrags: fragments a BTL is still writing into `buf` (see [`Core::begin_match`](super::Core::begin_match));
    /// the request completes only once there are none.
    pub(super) placing: u8,
    /// Set when the request completed unsuccessfully; in RecvFrags with `placing > 0`, the
    /// error it will complete with once the BTLs stop writing into `buf`.
    pub(super) error: Option<Box<StatusError>>,
    /// Rendezvous and RDMA state (boxed: eager messages never need it).
    pub(super) cold: Option<Box<Cold>>,
}

/// The parts of a request only rendezvous transfers use.
#[derive(Debug, Default)]
pub(super) struct Cold {
    /// The send buffer's RDMA registrations (RGET).
    pub(super) regs: Vec<(BtlIndex, Registration)>,
    /// SendStream: the receive request the FRAGs are for.
    pub(super) dst_req: u64,
    /// SendStream: the shares of the message per BTL.
    pub(super) segs: Vec<Segment>,
    /// RecvGet: the reads of the sender's buffer.
    pub(super) get: Option<GetState>,
    /// A receive whose sender offered a read: how its bulk travels and when it was matched
    /// (a sample for [`BulkChooser`](crate::bulk::BulkChooser) at completion).
    /// The last field is the index of the BTL that would read.
    pub(super) bulk: Option<(Bulk, Instant, usize, usize)>,
}

#[derive(Debug)]
pub(super) struct GetState {
    pub(super) src_req: u64,
    pub(super) addr: u64,
    pub(super) keys: Vec<Vec<u8>>,
    pub(super) segs: Vec<Segment>,
    pub(super) wanted: usize,
    pub(super) outstanding: usize,
    pub(super) failed: bool,
}

impl Req {
    /// A send request for `args` that has MPI sequence number `seq` and has not started.
    #[inline]
    pub(super) fn new_send(args: &SendArgs, seq: Seq) -> Self {
        Req {
            buf: args.buf,
            peer: args.dest,
            tag: args.tag,
            context: args.context,
            seq,
            msg_len: 0,
            count: 0,
            wanted: 0,
            phase: Phase::SendStart,
            mode: args.mode,
            pattern: args.pattern,
            active: false,
            placing: 0,
            error: None,
            cold: None,
        }
    }

    /// A posted receive for `args`.
    #[inline]
    pub(super) fn new_recv(args: &RecvArgs) -> Self {
        Req {
            buf: args.buf,
            // Until matched: the selectors (for a cancelled receive's status).
            peer: match args.source {
                Source::Rank(r) => r,
                Source::Any => 0,
            },
            tag: match args.tag {
                TagSel::Tag(t) => t,
                TagSel::Any => 0,
            },
            context: args.context,
            seq: 0,
            msg_len: 0,
            count: 0,
            wanted: 0,
            phase: Phase::RecvPosted,
            mode: SendMode::Standard,
            pattern: args.pattern,
            active: false,
            placing: 0,
            error: None,
            cold: None,
        }
    }

    pub(super) fn is_send(&self) -> bool {
        matches!(
            self.phase,
            Phase::SendStart | Phase::SendWaitAck | Phase::SendStream
        )
    }

    /// This receive matched a message of `msg_len` bytes from `peer` with `tag`, whose first
    /// bytes are `head`: note the envelope and copy them (as far as the buffer goes). Returns
    /// the bytes to receive in all (message and buffer permitting) and the bytes copied.
    pub(super) fn take_first(
        &mut self,
        peer: Rank,
        tag: Tag,
        msg_len: usize,
        head: &[u8],
    ) -> (usize, usize) {
        let wanted = msg_len.min(self.buf.len());
        let first = head.len().min(wanted);
        self.buf.write_at(0, &head[..first]);
        self.peer = peer;
        self.tag = tag;
        self.msg_len = msg_len;
        (wanted, first)
    }

    pub(super) fn cold(&mut self) -> &mut Cold {
        self.cold.get_or_insert_with(Default::default)
    }
}

/// What [`Requests::settle`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Settle {
    /// Still in progress.
    Pending,
    /// Completed successfully, and released.
    Released,
    /// Completed with an error; still held (its status is to be taken).
    Failed,
    /// Not an outstanding request.
    Unknown,
}

/// The requests of one ob1 instance, in the framework's request table: a stale id (or a forged
/// one in a packet) never reaches a reused slot.
#[derive(Debug, Default)]
pub(super) struct Requests {
    slab: Slab<Req>,
}

impl Requests {
    #[inline(always)]
    pub(super) fn insert(&mut self, req: Req) -> RequestId {
        self.slab.insert(req)
    }

    #[inline]
    pub(super) fn get_mut(&mut self, id: RequestId) -> Option<&mut Req> {
        self.slab.get_mut(id)
    }

    /// If `id` completed, release it and return its status.
    #[inline]
    pub(super) fn take_done(&mut self, id: RequestId) -> Result<Option<Status>, ()> {
        let mut e = self.slab.entry(id).ok_or(())?;
        let req = e.get_mut();
        if req.phase != Phase::Done {
            return Ok(None);
        }
        if req.cold.is_some() {
            return self.take_done_cold(id);
        }
        let status = Status {
            source: req.peer,
            tag: req.tag,
            len: req.count,
            error: req.error.take(),
        };
        // An eager request owns nothing once its error is taken: vacated without the drop
        // glue, whose call in line made this (every MPI_Test's) path save and restore six
        // registers (callgrind, bench/osu-instructions.sh).
        e.forget();
        Ok(Some(status))
    }

    /// [`Requests::take_done`] for a completed request with a cold part (a rendezvous, a
    /// bulk transfer): out of line, so that the eager path makes no call.
    #[cold]
    #[inline(never)]
    fn take_done_cold(&mut self, id: RequestId) -> Result<Option<Status>, ()> {
        let mut e = self.slab.entry(id).ok_or(())?;
        let req = e.get_mut();
        let status = Status {
            source: req.peer,
            tag: req.tag,
            len: req.count,
            error: req.error.take(),
        };
        e.delete();
        Ok(Some(status))
    }

    /// Where request `id` stands for `wait_all`, releasing it if it completed successfully:
    /// [`Requests::take_done`] without building a status for a success (a status returned
    /// through memory for every message would cost more than the check). A failed request is
    /// left for [`Requests::take_done`] to return its status.
    #[inline]
    pub(super) fn settle(&mut self, id: RequestId) -> Settle {
        let Some(mut e) = self.slab.entry(id) else {
            return Settle::Unknown;
        };
        let req = e.get_mut();
        match req.phase {
            Phase::Done if req.error.is_none() => {
                // An eager request has no cold part, and the error was checked empty: with
                // the cold part dropped here (rarely any), nothing is left to free, so the
                // slot is vacated without the request's out-of-line drop glue.
                if let Some(cold) = req.cold.take() {
                    drop(cold);
                }
                e.forget();
                Settle::Released
            }
            Phase::Done => Settle::Failed,
            _ => Settle::Pending,
        }
    }

    pub(super) fn ids(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.slab.ids()
    }

    pub(super) fn live(&self) -> usize {
        self.slab.len()
    }

    /// Requests not completed yet.
    pub(super) fn outstanding(&self) -> usize {
        self.slab
            .iter()
            .filter(|(_, r)| r.phase != Phase::Done)
            .count()
    }
}
