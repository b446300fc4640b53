//! The ob1 protocol engine: requests, matching, eager/rendezvous protocols, scheduling.
//!
//! [`Core`] holds all protocol state and never calls a BTL from inside an event: BTL events
//! (fragments, RDMA completions, failures) only update state and queue work (control headers,
//! gets, fragment streams). The queued work is executed against the [`Bml`] right after the BTL
//! progress returns ([`Core::run`]), and sends are attempted directly from `isend` so that the
//! eager path is one header encode plus one BTL call.
//!
//! A request is one flat [`Req`]: the fields every message needs sit in it, and what only
//! rendezvous and RDMA use (fragment schedules, registrations, get state) hangs off one
//! optional box, so that posting, completing and releasing an eager receive touch one small
//! struct and free nothing.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use rmca_framework::bml::{Bml, BmlEvents, BtlIndex, PeerRoutes, Route};
use rmca_framework::btl::{
    tags, BtlAttributes, BtlFlags, BtlTag, CommPattern, CompletionToken, MemAccess, Placement,
    Registration, RemoteSegment, SendError, SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::matching::{Arrival, Envelope, Matcher, Posted, Seq};
use rmca_framework::memory::MemoryCounter;
use rmca_framework::pml::{
    spin_until_done, ContextId, Pml, PmlError, RecvArgs, RequestId, SendArgs, SendMode, SendStart,
    Source, Status, StatusError, Tag, TagSel,
};
use rmca_framework::progress::Backoff;
use rmca_framework::rank::Rank;

use crate::bulk::{Bulk, BulkChooser};
use crate::hdr::{self, MatchRepr, Packet, Repr, RgetKey, RndvRepr};
use crate::sched::{self, Scheduling, Segment};
use crate::Ob1Config;

/// The BTL tag every ob1 header travels with (the header's first byte says which one it is).
pub const TAG: BtlTag = tags::PML_OB1_BASE;

/// Size classes of the traffic counters.
const CLASSES: [(&str, usize); 5] = [
    ("le64", 64),
    ("le1k", 1024),
    ("le16k", 16 * 1024),
    ("le256k", 256 * 1024),
    ("gt256k", usize::MAX),
];

/// Recycled unexpected-message buffers kept at most.
const SPARE_BUFFERS: usize = 256;
/// Larger buffers are freed rather than kept.
const SPARE_MAX_CAPACITY: usize = 64 * 1024;

#[inline]
fn class(len: usize) -> usize {
    // Unrolled CLASSES lookup (it runs for every message).
    if len <= CLASSES[0].1 {
        0
    } else if len <= CLASSES[1].1 {
        1
    } else if len <= CLASSES[2].1 {
        2
    } else if len <= CLASSES[3].1 {
        3
    } else {
        4
    }
}

#[derive(Debug, Default, Clone)]
struct Stats {
    sent_msgs: [u64; 5],
    sent_bytes: [u64; 5],
    recv_msgs: [u64; 5],
    recv_bytes: [u64; 5],
    eager: u64,
    rndv: u64,
    rget: u64,
    frags_sent: u64,
    frags_recv: u64,
    /// Fragments a BTL wrote in place as they arrived (`recv_begin`).
    placed: u64,
    gets: u64,
    /// Offered reads the receiver took, and declined for the copy pipeline ([`BulkChooser`]).
    bulk_get: u64,
    bulk_copy: u64,
    get_failures: u64,
    would_block: u64,
    dropped_foreign: u64,
    dropped_malformed: u64,
    dropped_stray: u64,
    route_failures: u64,
    peers_failed: u64,
}

impl Stats {
    #[inline]
    fn count_sent(&mut self, len: usize) {
        let c = class(len);
        self.sent_msgs[c] += 1;
        self.sent_bytes[c] += len as u64;
    }

    #[inline]
    fn count_received(&mut self, len: usize) {
        let c = class(len);
        self.recv_msgs[c] += 1;
        self.recv_bytes[c] += len as u64;
    }
}

/// What the matching engine keeps for a message nobody has asked for yet.
#[derive(Debug)]
pub(crate) enum Unexp {
    Eager(Vec<u8>),
    Rndv {
        info: RndvRepr,
        data: Vec<u8>,
        rget: Option<(u64, Vec<RgetKey>)>,
    },
}

impl Unexp {
    /// Bytes this entry buffers (for the memory profile).
    fn held_bytes(&self) -> usize {
        match self {
            Unexp::Eager(v) => v.len(),
            Unexp::Rndv { data, .. } => data.len(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Unexp::Eager(v) => v.len(),
            Unexp::Rndv { info, .. } => usize::try_from(info.msg_len).unwrap_or(usize::MAX),
        }
    }
}

/// Where a request stands. The data of each phase is in [`Req`] (`count`, `wanted`) or, for
/// the rendezvous phases, in its [`Cold`] part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
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
    /// The slab slot is free (the request was released).
    Free,
}

/// One send or receive request.
#[derive(Debug)]
struct Req {
    buf: UserBuf,
    /// Send: the destination. Receive: the sender once matched (the source selector before,
    /// 0 for any). Done: the status's source.
    peer: Rank,
    /// Send: the tag. Receive: the message's tag once matched (the selector before, 0 for
    /// any). Done: the status's tag.
    tag: Tag,
    context: ContextId,
    /// Send: the MPI sequence number.
    seq: Seq,
    /// Receive: length of the matched message.
    msg_len: usize,
    /// SendWaitAck: bytes sent with the rendezvous. RecvFrags: bytes arrived. Done: the
    /// status's length.
    count: usize,
    /// RecvFrags: bytes to arrive in all.
    wanted: usize,
    phase: Phase,
    mode: SendMode,
    pattern: CommPattern,
    /// Queued in `Core::active`.
    active: bool,
    /// RecvFrags: fragments a BTL is still writing into `buf` (see [`Core::begin_match`]);
    /// the request completes only once there are none.
    placing: u8,
    /// Set when the request completed unsuccessfully; in RecvFrags with `placing > 0`, the
    /// error it will complete with once the BTLs stop writing into `buf`.
    error: Option<Box<StatusError>>,
    /// Rendezvous and RDMA state (boxed: eager messages never need it).
    cold: Option<Box<Cold>>,
}

/// The parts of a request only rendezvous transfers use.
#[derive(Debug, Default)]
struct Cold {
    /// The send buffer's RDMA registrations (RGET).
    regs: Vec<(BtlIndex, Registration)>,
    /// SendStream: the receive request the FRAGs are for.
    dst_req: u64,
    /// SendStream: the shares of the message per BTL.
    segs: Vec<Segment>,
    /// RecvGet: the reads of the sender's buffer.
    get: Option<GetState>,
    /// A receive whose sender offered a read: how its bulk travels and when it was matched
    /// (a sample for [`BulkChooser`] at completion).
    bulk: Option<(Bulk, Instant, usize)>,
}

#[derive(Debug)]
struct GetState {
    src_req: u64,
    addr: u64,
    keys: Vec<Vec<u8>>,
    segs: Vec<Segment>,
    wanted: usize,
    outstanding: usize,
    failed: bool,
}

impl Req {
    /// A send request for `args` that has MPI sequence number `seq` and has not started.
    #[inline]
    fn new_send(args: &SendArgs, seq: Seq) -> Self {
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
    fn new_recv(args: &RecvArgs) -> Self {
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

    fn is_send(&self) -> bool {
        matches!(
            self.phase,
            Phase::SendStart | Phase::SendWaitAck | Phase::SendStream
        )
    }

    /// A released slot's value: it owns no heap memory.
    fn is_released(&self) -> bool {
        self.phase == Phase::Free && self.error.is_none() && self.cold.is_none()
    }

    /// This receive matched a message of `msg_len` bytes from `peer` with `tag`, whose first
    /// bytes are `head`: note the envelope and copy them (as far as the buffer goes). Returns
    /// the bytes to receive in all (message and buffer permitting) and the bytes copied.
    fn take_first(&mut self, peer: Rank, tag: Tag, msg_len: usize, head: &[u8]) -> (usize, usize) {
        let wanted = msg_len.min(self.buf.len());
        let first = head.len().min(wanted);
        self.buf.write_at(0, &head[..first]);
        self.peer = peer;
        self.tag = tag;
        self.msg_len = msg_len;
        (wanted, first)
    }

    fn cold(&mut self) -> &mut Cold {
        self.cold.get_or_insert_with(Default::default)
    }
}

/// What [`Slab::settle`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settle {
    /// Still in progress.
    Pending,
    /// Completed successfully, and released.
    Released,
    /// Completed with an error; still held (its status is to be taken).
    Failed,
    /// Not an outstanding request.
    Unknown,
}

/// Requests in a slab: ids are index + generation, so a stale id (or a forged one in a
/// packet) never reaches a reused slot. A released slot keeps its [`Req`] with
/// [`Phase::Free`] and nothing on the heap, so releasing and reusing one frees and drops
/// nothing.
#[derive(Debug, Default)]
struct Slab {
    slots: Vec<(u32, Req)>,
    free: Vec<u32>,
}

#[inline]
fn split_id(id: RequestId) -> (u32, usize) {
    ((id.0 >> 32) as u32, id.0 as u32 as usize)
}

impl Slab {
    #[inline(always)]
    fn insert(&mut self, req: Req) -> RequestId {
        let i = match self.free.pop() {
            Some(i) => {
                let slot = &mut self.slots[i as usize];
                debug_assert!(slot.1.is_released());
                // The old value owns nothing (see `take_done`): skip its drop glue.
                std::mem::forget(std::mem::replace(&mut slot.1, req));
                i
            }
            None => {
                self.slots.push((1, req));
                (self.slots.len() - 1) as u32
            }
        };
        RequestId((u64::from(self.slots[i as usize].0) << 32) | u64::from(i))
    }

    #[inline]
    fn get_mut(&mut self, id: RequestId) -> Option<&mut Req> {
        let (gen, i) = split_id(id);
        match self.slots.get_mut(i) {
            Some((g, r)) if *g == gen && r.phase != Phase::Free => Some(r),
            _ => None,
        }
    }

    /// If `id` completed, release it and return its status.
    #[inline]
    fn take_done(&mut self, id: RequestId) -> Result<Option<Status>, ()> {
        let (gen, i) = split_id(id);
        let Some((g, req)) = self.slots.get_mut(i) else {
            return Err(());
        };
        if *g != gen || req.phase == Phase::Free {
            return Err(());
        }
        if req.phase != Phase::Done {
            return Ok(None);
        }
        let status = Status {
            source: req.peer,
            tag: req.tag,
            len: req.count,
            error: req.error.take(),
        };
        req.cold = None;
        req.phase = Phase::Free;
        *g = g.wrapping_add(1).max(1);
        self.free.push(i as u32);
        Ok(Some(status))
    }

    /// Where request `id` stands for `wait_all`, releasing it if it completed successfully:
    /// [`Slab::take_done`] without building a status for a success (a status returned through
    /// memory for every message would cost more than the check). A failed request is left for
    /// [`Slab::take_done`] to return its status.
    #[inline]
    fn settle(&mut self, id: RequestId) -> Settle {
        let (gen, i) = split_id(id);
        let Some((g, req)) = self.slots.get_mut(i) else {
            return Settle::Unknown;
        };
        if *g != gen {
            return Settle::Unknown;
        }
        match req.phase {
            Phase::Done if req.error.is_none() => {
                if req.cold.is_some() {
                    req.cold = None;
                }
                req.phase = Phase::Free;
                *g = g.wrapping_add(1).max(1);
                self.free.push(i as u32);
                Settle::Released
            }
            Phase::Done => Settle::Failed,
            Phase::Free => Settle::Unknown,
            _ => Settle::Pending,
        }
    }

    fn ids(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.1.phase != Phase::Free)
            .map(|(i, s)| RequestId((u64::from(s.0) << 32) | i as u64))
    }

    fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Requests not completed yet.
    fn outstanding(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| !matches!(s.1.phase, Phase::Done | Phase::Free))
            .count()
    }
}

/// A control header waiting for a BTL.
#[derive(Debug)]
struct Ctrl {
    peer: Rank,
    buf: [u8; hdr::MAX_CTRL_LEN],
    len: usize,
}

/// The eager fast path to one peer, derived from its routes: a standard send of at most
/// `max_payload` bytes goes to `btl` in one MATCH fragment with no request (see
/// [`Ob1::start_send`]). `max_payload` is negative when there is no such path (no route, a
/// failed peer, an eager limit below the header).
#[derive(Clone, Copy, Debug)]
struct EagerPath {
    btl: BtlIndex,
    max_payload: isize,
    /// Several eager routes: round-robin scheduling rotates over them (slow path).
    several: bool,
}

impl EagerPath {
    const NONE: EagerPath = EagerPath {
        btl: 0,
        max_payload: -1,
        several: false,
    };
}

/// The protocol state of one ob1 instance (everything but the BTLs).
pub(crate) struct Core {
    me: Rank,
    cfg: Ob1Config,
    attrs: Vec<BtlAttributes>,
    names: Vec<String>,
    routes: Vec<PeerRoutes>,
    eager_paths: Vec<EagerPath>,
    cursor: Vec<usize>,
    dead: Vec<bool>,
    matcher: Matcher<RequestId, Unexp>,
    reqs: Slab,
    ctrl: VecDeque<Ctrl>,
    active: VecDeque<RequestId>,
    failures: Vec<(BtlIndex, Rank, String)>,
    dereg: Vec<(BtlIndex, Registration)>,
    stats: Stats,
    /// Recycled buffers for unexpected eager messages, so the unexpected path does not
    /// allocate in the steady state either.
    spare: Vec<Vec<u8>>,
    /// Per peer, sends whose first fragment a BTL refused, in send order: they are retried
    /// in order and later sends to that peer queue behind them, so back-pressure does not
    /// make later messages overtake (which would fill the receiver's holding area).
    starts: Vec<VecDeque<RequestId>>,
    starts_pending: usize,
    /// Bytes of unexpected messages held (the profile's `pml.ob1` memory; one allocation per
    /// message buffered).
    memory: Option<Arc<MemoryCounter>>,
    /// Count messages and bytes by size class, and eager sends (the profile's traffic
    /// counters: only with `--mca profile 1`, since they cost on every message).
    traffic: bool,
    /// The request [`Ob1::wait`] is blocked on, and whether it completed during the current
    /// progress pass: the BTLs are then told to stop delivering (see
    /// [`rmca_framework::btl::BtlEvents::wants_more`]).
    awaited: Option<RequestId>,
    awaited_done: bool,
    /// Reads against the copy pipeline, measured (`pml_ob1_adaptive_bulk`).
    bulk: BulkChooser,
    /// When the last measured bulk transfer completed: a transfer's service starts no earlier.
    bulk_free_at: Option<Instant>,
}

/// Granule of the message offsets where the fragments of a copied message start.
const FRAG_ALIGN: usize = 64;

/// Payload bytes for a fragment with room for `room`: whole multiples of [`FRAG_ALIGN`] when
/// there is room for two, so that every fragment starts at the same offset within a cache line
/// in the send and the receive buffer; a copy between buffers that differ in that offset runs
/// markedly slower (glibc's `memcpy` of 16 KiB in cache here: 1.2-1.45x the time).
fn frag_payload(room: usize) -> usize {
    if room >= 2 * FRAG_ALIGN {
        room & !(FRAG_ALIGN - 1)
    } else {
        room.max(1)
    }
}

/// Why a FRAG is dropped.
enum FragReject {
    /// No receive is waiting for FRAGs under that id (late, or for a finished request).
    Stray,
    /// From the wrong peer, or outside the bytes the receive asked for.
    Malformed,
}

/// The receive a FRAG of `len` payload bytes at `offset` from `peer` is for, and where its
/// bytes go: the one check of a FRAG, whether it arrives whole ([`Core::on_frag`]) or is
/// placed as it arrives ([`Core::begin_frag`]).
fn frag_target(
    reqs: &mut Slab,
    peer: Rank,
    dst_req: u64,
    offset: u64,
    len: usize,
) -> Result<(&mut Req, usize), FragReject> {
    let r = reqs
        .get_mut(RequestId(dst_req))
        .filter(|r| r.phase == Phase::RecvFrags)
        .ok_or(FragReject::Stray)?;
    let at = usize::try_from(offset)
        .ok()
        .filter(|&o| r.peer == peer && o.checked_add(len).is_some_and(|end| end <= r.wanted))
        .ok_or(FragReject::Malformed)?;
    Ok((r, at))
}

fn peer_failed(peer: Rank, reason: &str) -> StatusError {
    StatusError::PeerFailed {
        peer,
        reason: reason.to_owned(),
    }
}

impl Core {
    fn new(bml: &Bml, cfg: Ob1Config) -> Self {
        let n = bml.peer_count();
        let mut core = Self {
            me: bml.my_rank(),
            cfg,
            attrs: (0..bml.btl_count())
                .map(|i| bml.btl_ref(i).attributes().clone())
                .collect(),
            names: (0..bml.btl_count())
                .map(|i| bml.btl_ref(i).component_name().to_owned())
                .collect(),
            routes: (0..n).map(|p| bml.routes(p as Rank).clone()).collect(),
            eager_paths: vec![EagerPath::NONE; n],
            cursor: vec![0; n],
            dead: vec![false; n],
            matcher: Matcher::new(n),
            reqs: Slab::default(),
            ctrl: VecDeque::new(),
            active: VecDeque::new(),
            failures: Vec::new(),
            dereg: Vec::new(),
            stats: Stats::default(),
            spare: Vec::new(),
            starts: vec![VecDeque::new(); n],
            starts_pending: 0,
            memory: None,
            traffic: false,
            awaited: None,
            awaited_done: false,
            bulk: BulkChooser::new(),
            bulk_free_at: None,
        };
        for peer in 0..n {
            core.update_eager_path(peer as Rank);
        }
        core
    }

    /// Recompute the eager fast path to `peer` after its routes or liveness changed.
    fn update_eager_path(&mut self, peer: Rank) {
        let p = peer as usize;
        self.eager_paths[p] = match self.routes[p].eager.as_slice() {
            [first, rest @ ..] if !self.dead[p] => {
                let a = &self.attrs[first.btl];
                let limit = a.eager_limit.min(a.max_send_size);
                EagerPath {
                    btl: first.btl,
                    max_payload: isize::try_from(limit).unwrap_or(isize::MAX)
                        - hdr::MATCH_LEN as isize,
                    several: !rest.is_empty(),
                }
            }
            _ => EagerPath::NONE,
        };
    }

    /// Complete request `id` with this status; what the transfer held is released (its
    /// registrations are queued for deregistration).
    fn finish(
        &mut self,
        id: RequestId,
        source: Rank,
        tag: Tag,
        len: usize,
        error: Option<StatusError>,
    ) {
        let Some(r) = self.reqs.get_mut(id) else {
            return;
        };
        if let Some(mut cold) = r.cold.take() {
            self.dereg.append(&mut cold.regs);
        }
        if self.traffic && (error.is_none() || matches!(error, Some(StatusError::Truncated { .. })))
        {
            if r.is_send() {
                self.stats.count_sent(len);
            } else {
                self.stats.count_received(len);
            }
        }
        r.peer = source;
        r.tag = tag;
        r.count = len;
        r.error = error.map(Box::new);
        r.phase = Phase::Done;
        self.awaited_done |= self.awaited == Some(id);
    }

    /// Complete send `id` (successfully when `error` is `None`).
    fn finish_send(&mut self, id: RequestId, error: Option<StatusError>) {
        if let Some(r) = self.reqs.get_mut(id) {
            let (dest, tag, len) = (r.peer, r.tag, r.buf.len());
            self.finish(id, dest, tag, len, error);
        }
    }

    fn activate(&mut self, id: RequestId) {
        if let Some(r) = self.reqs.get_mut(id) {
            if !r.active {
                r.active = true;
                self.active.push_back(id);
            }
        }
    }

    fn queue_ctrl(&mut self, peer: Rank, repr: Repr) {
        let mut buf = [0u8; hdr::MAX_CTRL_LEN];
        match repr.emit(&mut buf) {
            Ok(len) => self.ctrl.push_back(Ctrl { peer, buf, len }),
            Err(e) => tracing::error!(?e, "ob1 control header does not fit"),
        }
    }

    // ---------------------------------------------------------------- receive side

    /// An eager message matched receive `id`: copy it and complete the receive, touching the
    /// request once (the receive hot path; [`Core::finish`] does the same for any request).
    #[inline]
    fn deliver_eager(&mut self, id: RequestId, env: Envelope, data: &[u8]) {
        let Core {
            reqs,
            stats,
            traffic,
            awaited,
            awaited_done,
            ..
        } = self;
        let Some(r) = reqs.get_mut(id) else {
            return;
        };
        let n = data.len().min(r.buf.len());
        r.buf.write_at(0, &data[..n]);
        if data.len() > n {
            r.error = Some(Box::new(StatusError::Truncated {
                message_len: data.len(),
                received: n,
            }));
        }
        // Counted like finish() does: delivered bytes, truncated or not.
        if *traffic {
            stats.count_received(n);
        }
        r.peer = env.source;
        r.tag = env.tag;
        r.count = n;
        r.phase = Phase::Done;
        *awaited_done |= *awaited == Some(id);
    }

    fn deliver_unexp(&mut self, id: RequestId, env: Envelope, u: Unexp) {
        if let Some(m) = &self.memory {
            m.free(u.held_bytes());
        }
        match u {
            Unexp::Eager(v) => {
                self.deliver_eager(id, env, &v);
                if self.spare.len() < SPARE_BUFFERS && v.capacity() <= SPARE_MAX_CAPACITY {
                    self.spare.push(v);
                }
            }
            Unexp::Rndv { info, data, rget } => self.start_rndv(id, env, info, &data, rget),
        }
    }

    #[inline]
    fn drain_released(&mut self) {
        while let Some(r) = self.matcher.poll_released() {
            self.deliver_unexp(r.recv, r.envelope, r.payload);
        }
    }

    /// A rendezvous matched receive `id`: take the first bytes, then read the rest (RGET) or
    /// ask for it (ACK).
    fn start_rndv(
        &mut self,
        id: RequestId,
        env: Envelope,
        info: RndvRepr,
        data: &[u8],
        rget: Option<(u64, Vec<RgetKey>)>,
    ) {
        let peer = env.source;
        let msg_len = usize::try_from(info.msg_len).unwrap_or(usize::MAX);
        let Some(r) = self.reqs.get_mut(id) else {
            return;
        };
        let (wanted, first) = r.take_first(peer, env.tag, msg_len, data);
        let pattern = r.pattern;
        if first == wanted {
            let ctrl = match rget {
                Some(_) => Repr::Fin {
                    src_req: info.src_req,
                    failed: false,
                },
                None => Repr::Ack {
                    src_req: info.src_req,
                    dst_req: id.0,
                    wanted: first as u64,
                },
            };
            self.queue_ctrl(peer, ctrl);
            self.finish_recv(id);
            return;
        }
        // Offered a read: measure it against the copy pipeline and take the faster.
        let offered = rget.is_some() && self.cfg.use_rget;
        let bulk_len = wanted - first;
        let how = if offered && self.cfg.adaptive_bulk {
            Some(self.bulk.choose(bulk_len))
        } else {
            None
        };
        let started = how.map(|h| (h, Instant::now(), bulk_len));
        match how {
            Some(Bulk::Get) => self.stats.bulk_get += 1,
            Some(Bulk::Copy) => self.stats.bulk_copy += 1,
            None => {}
        }
        if let Some((addr, keys)) = rget.filter(|_| offered && how != Some(Bulk::Copy)) {
            // Pair each of our GET routes to the peer with an unused key of the same BTL component.
            let mut used = vec![false; keys.len()];
            let mut usable: Vec<(Route, Vec<u8>)> = Vec::new();
            for route in &self.routes[peer as usize].rdma {
                if !self.attrs[route.btl].flags.contains(BtlFlags::GET) {
                    continue;
                }
                let name = &self.names[route.btl];
                if let Some(k) = (0..keys.len()).find(|&k| !used[k] && &keys[k].btl == name) {
                    used[k] = true;
                    usable.push((*route, keys[k].key.clone()));
                }
            }
            if !usable.is_empty() {
                let list: Vec<Route> = usable.iter().map(|u| u.0).collect();
                let policy = self.cfg.scheduling.for_pattern(pattern);
                let chosen = sched::choose(
                    policy,
                    &list,
                    wanted,
                    self.cfg.stripe_threshold,
                    self.cfg.max_rdma_per_request,
                    &mut self.cursor[peer as usize],
                );
                let keys: Vec<Vec<u8>> = chosen
                    .iter()
                    .map(|c| {
                        usable
                            .iter()
                            .find(|u| u.0.btl == c.btl)
                            .map(|u| u.1.clone())
                            .unwrap_or_default()
                    })
                    .collect();
                let segs = sched::split(&chosen, first, wanted);
                if let Some(r) = self.reqs.get_mut(id) {
                    r.phase = Phase::RecvGet;
                    r.cold().bulk = started;
                    r.cold().get = Some(GetState {
                        src_req: info.src_req,
                        addr,
                        keys,
                        segs,
                        wanted,
                        outstanding: 0,
                        failed: false,
                    });
                }
                self.activate(id);
                return;
            }
        }
        if let Some(r) = self.reqs.get_mut(id) {
            r.phase = Phase::RecvFrags;
            r.count = first;
            r.wanted = wanted;
            // A sample of the copy pipeline only if it was chosen over an offered read.
            if let Some(b @ (Bulk::Copy, _, _)) = started {
                r.cold().bulk = Some(b);
            }
        }
        self.queue_ctrl(
            peer,
            Repr::Ack {
                src_req: info.src_req,
                dst_req: id.0,
                wanted: wanted as u64,
            },
        );
    }

    /// Complete a receive whose bytes all arrived.
    fn finish_recv(&mut self, id: RequestId) {
        let Some(r) = self.reqs.get_mut(id) else {
            return;
        };
        if let Some((how, start, len)) = r.cold.as_mut().and_then(|c| c.bulk.take()) {
            let now = Instant::now();
            let from = self.bulk_free_at.map_or(start, |f| f.max(start));
            let ns = u64::try_from(now.duration_since(from).as_nanos()).unwrap_or(u64::MAX);
            self.bulk.record(len, how, ns);
            self.bulk_free_at = Some(now);
        }
        let received = r.msg_len.min(r.buf.len());
        let error = (r.msg_len > received).then_some(StatusError::Truncated {
            message_len: r.msg_len,
            received,
        });
        let (peer, tag) = (r.peer, r.tag);
        self.finish(id, peer, tag, received, error);
    }

    fn on_frag(&mut self, peer: Rank, dst_req: u64, offset: u64, data: &[u8]) {
        let (r, at) = match frag_target(&mut self.reqs, peer, dst_req, offset, data.len()) {
            Ok(t) => t,
            Err(FragReject::Stray) => {
                self.stats.dropped_stray += 1;
                return;
            }
            Err(FragReject::Malformed) => {
                self.stats.dropped_malformed += 1;
                return;
            }
        };
        r.buf.write_at(at, data);
        r.count += data.len();
        self.stats.frags_recv += 1;
        // (A duplicate FRAG from a broken peer must not complete a buffer a BTL is still
        // writing into.)
        if r.count >= r.wanted && r.placing == 0 {
            self.finish_recv(RequestId(dst_req));
        }
    }

    fn on_rdma_complete(&mut self, token: CompletionToken, result: Result<(), SendError>) {
        let id = RequestId(token.0);
        let Some(r) = self.reqs.get_mut(id) else {
            self.stats.dropped_stray += 1;
            return;
        };
        if r.phase != Phase::RecvGet {
            return;
        }
        let Some(g) = r.cold.as_mut().and_then(|c| c.get.as_mut()) else {
            return;
        };
        g.outstanding = g.outstanding.saturating_sub(1);
        if let Err(e) = result {
            tracing::debug!(
                ?e,
                "ob1: RDMA get failed, falling back to the copy pipeline"
            );
            g.failed = true;
            self.stats.get_failures += 1;
        }
        let all_issued = g.segs.iter().all(|s| s.next >= s.end);
        if g.outstanding == 0 && (all_issued || g.failed) {
            self.finish_get(id);
        }
    }

    /// Every get of receive `id` completed (or one failed): FIN, or fall back to ACK + FRAGs.
    fn finish_get(&mut self, id: RequestId) {
        let Some(r) = self.reqs.get_mut(id).filter(|r| r.phase == Phase::RecvGet) else {
            return;
        };
        let Some(g) = r.cold.as_mut().and_then(|c| c.get.take()) else {
            return;
        };
        let peer = r.peer;
        if g.failed {
            // Not a measure of either way.
            if let Some(c) = r.cold.as_mut() {
                c.bulk = None;
            }
            // The sender streams everything again from its start; FRAGs overwrite what the
            // gets may have written with the same bytes.
            r.phase = Phase::RecvFrags;
            r.count = 0;
            r.wanted = g.wanted;
            self.queue_ctrl(
                peer,
                Repr::Ack {
                    src_req: g.src_req,
                    dst_req: id.0,
                    wanted: g.wanted as u64,
                },
            );
        } else {
            self.queue_ctrl(
                peer,
                Repr::Fin {
                    src_req: g.src_req,
                    failed: false,
                },
            );
            self.finish_recv(id);
        }
    }

    // ---------------------------------------------------------------- send side

    fn on_ack(&mut self, peer: Rank, src_req: u64, dst_req: u64, wanted: u64) {
        let id = RequestId(src_req);
        let Some(s) = self
            .reqs
            .get_mut(id)
            .filter(|s| s.phase == Phase::SendWaitAck)
        else {
            self.stats.dropped_stray += 1;
            return;
        };
        if s.peer != peer {
            self.stats.dropped_malformed += 1;
            return;
        }
        // Registrations (an RGET the receiver could not read) are no longer needed.
        if let Some(cold) = s.cold.as_mut() {
            self.dereg.append(&mut cold.regs);
        }
        let sent = s.count;
        let wanted = usize::try_from(wanted)
            .unwrap_or(usize::MAX)
            .min(s.buf.len());
        if wanted <= sent {
            self.finish_send(id, None);
            return;
        }
        let policy = self.cfg.scheduling.for_pattern(s.pattern);
        let chosen = sched::choose(
            policy,
            &self.routes[peer as usize].send,
            wanted,
            self.cfg.stripe_threshold,
            self.cfg.max_rdma_per_request,
            &mut self.cursor[peer as usize],
        );
        s.phase = Phase::SendStream;
        let cold = s.cold();
        cold.dst_req = dst_req;
        cold.segs = sched::split(&chosen, sent, wanted);
        self.activate(id);
    }

    fn on_fin(&mut self, peer: Rank, src_req: u64) {
        let id = RequestId(src_req);
        let waiting = self
            .reqs
            .get_mut(id)
            .is_some_and(|s| s.phase == Phase::SendWaitAck && s.peer == peer);
        if !waiting {
            self.stats.dropped_stray += 1;
            return;
        }
        self.finish_send(id, None);
    }

    /// The eager route for a message: rotates under round robin, else the lowest latency.
    fn eager_route(&mut self, peer: Rank, pattern: CommPattern) -> Option<BtlIndex> {
        let eager = &self.routes[peer as usize].eager;
        if eager.is_empty() {
            return None;
        }
        if self.cfg.scheduling.for_pattern(pattern) == Scheduling::RoundRobin && eager.len() > 1 {
            let c = &mut self.cursor[peer as usize];
            let b = eager[*c % eager.len()].btl;
            *c = c.wrapping_add(1);
            return Some(b);
        }
        Some(eager[0].btl)
    }

    /// Try to get the first fragment of send `id` accepted. Returns true if it must be retried.
    fn start_send(&mut self, id: RequestId, bml: &mut Bml) -> bool {
        let Some(s) = self
            .reqs
            .get_mut(id)
            .filter(|s| s.phase == Phase::SendStart)
        else {
            return false;
        };
        let (dest, buf, mode, pattern) = (s.peer, s.buf, s.mode, s.pattern);
        let hdr = MatchRepr {
            ctx: s.context,
            tag: s.tag,
            seq: s.seq,
        };
        let Some(b) = self.eager_route(dest, pattern) else {
            self.finish_send(id, Some(peer_failed(dest, "no BTL route left")));
            return false;
        };
        let len = buf.len();
        let hint = SendHint {
            pattern,
            message_len: len,
        };
        let a = &self.attrs[b];
        if mode == SendMode::Standard && hdr::MATCH_LEN + len <= a.eager_limit.min(a.max_send_size)
        {
            let h = hdr::emit_match(&hdr);
            return match bml.btl(b).send(dest, TAG, &h, buf.as_slice(), hint) {
                Ok(()) => {
                    if self.traffic {
                        self.stats.eager += 1;
                    }
                    self.finish_send(id, None);
                    false
                }
                Err(e) => self.send_refused(bml, id, dest, b, e),
            };
        }
        let rndv = RndvRepr {
            hdr,
            msg_len: len as u64,
            src_req: id.0,
            sync: mode == SendMode::Synchronous,
        };
        // Large messages: offer the buffer for the receiver to read when a GET route exists.
        if self.cfg.use_rget && len + hdr::RNDV_LEN > a.eager_limit {
            if let Some(h) = self.rget_header(id, bml, rndv) {
                if h.len() <= self.attrs[b].max_send_size {
                    return match bml.btl(b).send(dest, TAG, &h, &[], hint) {
                        Ok(()) => {
                            self.stats.rget += 1;
                            self.wait_ack(id, 0);
                            false
                        }
                        Err(e) => self.send_refused(bml, id, dest, b, e),
                    };
                }
            }
        }
        let a = &self.attrs[b];
        let cap = if len + hdr::RNDV_LEN <= a.eager_limit {
            len
        } else {
            frag_payload(a.rndv_eager_limit.saturating_sub(hdr::RNDV_LEN))
        };
        let first = len
            .min(cap)
            .min(frag_payload(a.max_send_size.saturating_sub(hdr::RNDV_LEN)));
        let mut h = [0u8; hdr::RNDV_LEN];
        let _ = Repr::Rndv(rndv).emit(&mut h);
        match bml
            .btl(b)
            .send(dest, TAG, &h, &buf.as_slice()[..first], hint)
        {
            Ok(()) => {
                self.stats.rndv += 1;
                self.wait_ack(id, first);
                false
            }
            Err(e) => self.send_refused(bml, id, dest, b, e),
        }
    }

    /// The rendezvous of send `id` left carrying `sent` bytes.
    fn wait_ack(&mut self, id: RequestId, sent: usize) {
        if let Some(s) = self.reqs.get_mut(id) {
            s.phase = Phase::SendWaitAck;
            s.count = sent;
        }
    }

    /// Register the send buffer with the GET routes to the peer (once) and build the RGET header.
    fn rget_header(&mut self, id: RequestId, bml: &mut Bml, rndv: RndvRepr) -> Option<Vec<u8>> {
        let s = self.reqs.get_mut(id)?;
        let (dest, buf) = (s.peer, s.buf);
        let cold = s.cold();
        if cold.regs.is_empty() {
            let access = MemAccess {
                remote_read: true,
                remote_write: false,
            };
            for route in self.routes[dest as usize]
                .rdma
                .iter()
                .take(self.cfg.max_rdma_per_request)
            {
                if !self.attrs[route.btl].flags.contains(BtlFlags::GET)
                    || buf.len() < self.attrs[route.btl].min_rdma_pipeline_size
                {
                    continue;
                }
                match bml.btl(route.btl).register_mem(buf, access) {
                    Ok(reg) => cold.regs.push((route.btl, reg)),
                    Err(e) => {
                        tracing::debug!(%e, btl = route.btl, "ob1: registration failed, not offering this BTL")
                    }
                }
            }
        }
        if cold.regs.is_empty() {
            return None;
        }
        let keys = cold
            .regs
            .iter()
            .map(|(b, reg)| RgetKey {
                btl: self.names[*b].clone(),
                key: reg.remote_key.clone(),
            })
            .collect();
        let repr = Repr::Rget {
            rndv,
            addr: buf.addr() as u64,
            keys,
        };
        let mut h = vec![0u8; repr.header_len()];
        match repr.emit(&mut h) {
            Ok(_) => Some(h),
            Err(e) => {
                tracing::debug!(
                    ?e,
                    "ob1: RGET header not encodable, using the copy pipeline"
                );
                self.dereg.append(&mut cold.regs);
                None
            }
        }
    }

    /// A BTL refused a fragment of request `id`: retry later, or fail over.
    fn send_refused(
        &mut self,
        bml: &mut Bml,
        id: RequestId,
        peer: Rank,
        btl: BtlIndex,
        e: SendError,
    ) -> bool {
        match e {
            SendError::WouldBlock => {
                self.stats.would_block += 1;
                true
            }
            other => {
                self.route_failed(bml, peer, btl, &other.to_string());
                // Retry on what is left (the request was failed if nothing is).
                self.reqs
                    .get_mut(id)
                    .is_some_and(|r| r.phase != Phase::Done)
            }
        }
    }

    /// Push FRAGs of a streaming send. Returns true if more remain.
    fn stream(&mut self, id: RequestId, bml: &mut Bml) -> bool {
        let mut budget = self.cfg.send_pipeline_depth;
        loop {
            let Some(s) = self
                .reqs
                .get_mut(id)
                .filter(|s| s.phase == Phase::SendStream)
            else {
                return false;
            };
            let (dest, buf, pattern) = (s.peer, s.buf, s.pattern);
            let cold = s.cold();
            // The share with the most left goes next, so the BTLs of a stripe advance together.
            let Some(seg) = cold
                .segs
                .iter_mut()
                .filter(|g| g.next < g.end)
                .max_by_key(|g| g.end - g.next)
            else {
                self.finish_send(id, None);
                return false;
            };
            if budget == 0 {
                return true;
            }
            let a = &self.attrs[seg.btl];
            let room = a.max_send_size.min(a.pipeline_frag_size);
            let chunk = (seg.end - seg.next).min(frag_payload(room.saturating_sub(hdr::FRAG_LEN)));
            let mut h = [0u8; hdr::FRAG_LEN];
            let _ = Repr::Frag {
                dst_req: cold.dst_req,
                offset: seg.next as u64,
            }
            .emit(&mut h);
            let hint = SendHint {
                pattern,
                message_len: buf.len(),
            };
            let btl = seg.btl;
            match bml.btl(btl).send(
                dest,
                TAG,
                &h,
                &buf.as_slice()[seg.next..seg.next + chunk],
                hint,
            ) {
                Ok(()) => {
                    seg.next += chunk;
                    budget -= 1;
                    self.stats.frags_sent += 1;
                }
                Err(e) => return self.send_refused(bml, id, dest, btl, e),
            }
        }
    }

    /// Issue gets of a receive. Returns true if more remain to issue.
    fn issue_gets(&mut self, id: RequestId, bml: &mut Bml) -> bool {
        let depth = self.cfg.recv_pipeline_depth;
        loop {
            let Some(r) = self.reqs.get_mut(id).filter(|r| r.phase == Phase::RecvGet) else {
                return false;
            };
            let (peer, buf) = (r.peer, r.buf);
            let Some(g) = r.cold.as_mut().and_then(|c| c.get.as_mut()) else {
                return false;
            };
            if g.failed {
                return false;
            }
            let Some(seg) = g
                .segs
                .iter_mut()
                .filter(|s| s.next < s.end)
                .max_by_key(|s| s.end - s.next)
            else {
                return false;
            };
            if g.outstanding >= depth {
                return true;
            }
            let frag = self.attrs[seg.btl].rdma_pipeline_frag_size.max(1);
            let chunk = (seg.end - seg.next).min(frag);
            let remote = RemoteSegment {
                addr: g.addr.wrapping_add(seg.next as u64),
                len: chunk,
                remote_key: g.keys[seg.route].clone(),
            };
            let local = buf.slice(seg.next, chunk);
            match bml
                .btl(seg.btl)
                .get(peer, local, &remote, CompletionToken(id.0))
            {
                Ok(()) => {
                    seg.next += chunk;
                    g.outstanding += 1;
                    self.stats.gets += 1;
                }
                Err(SendError::WouldBlock) => {
                    self.stats.would_block += 1;
                    return true;
                }
                Err(e) => {
                    tracing::debug!(%e, "ob1: get refused, falling back to the copy pipeline");
                    g.failed = true;
                    self.stats.get_failures += 1;
                    if g.outstanding == 0 {
                        self.finish_get(id);
                    }
                    return false;
                }
            }
        }
    }

    /// Advance request `id`. Returns true if it needs another turn.
    fn step(&mut self, id: RequestId, bml: &mut Bml) -> bool {
        let Some(r) = self.reqs.get_mut(id) else {
            return false;
        };
        match r.phase {
            Phase::SendStart => self.start_send(id, bml),
            Phase::SendStream => self.stream(id, bml),
            Phase::RecvGet => self.issue_gets(id, bml),
            _ => false,
        }
    }

    // ---------------------------------------------------------------- failures

    fn route_failed(&mut self, bml: &mut Bml, peer: Rank, btl: BtlIndex, reason: &str) {
        if (peer as usize) >= self.routes.len() || self.dead[peer as usize] {
            return;
        }
        self.stats.route_failures += 1;
        tracing::warn!(
            peer,
            btl = self.names.get(btl).map(String::as_str).unwrap_or("?"),
            reason,
            "ob1: route failed"
        );
        let left = bml.remove_route(peer, btl);
        self.routes[peer as usize] = bml.routes(peer).clone();
        self.update_eager_path(peer);
        // Streams assigned to the dead BTL move to the best remaining send route.
        if let Some(alt) = self.routes[peer as usize].send.first().map(|r| r.btl) {
            for id in self.reqs.ids().collect::<Vec<_>>() {
                if let Some(s) = self
                    .reqs
                    .get_mut(id)
                    .filter(|s| s.phase == Phase::SendStream && s.peer == peer)
                {
                    if let Some(cold) = s.cold.as_mut() {
                        cold.segs
                            .iter_mut()
                            .filter(|g| g.btl == btl)
                            .for_each(|g| g.btl = alt);
                    }
                }
            }
        }
        if !left {
            self.fail_peer(peer, reason);
        }
    }

    /// No route to `peer` is left: complete everything that depends on it with an error.
    fn fail_peer(&mut self, peer: Rank, reason: &str) {
        self.dead[peer as usize] = true;
        self.update_eager_path(peer);
        self.stats.peers_failed += 1;
        let err = peer_failed(peer, reason);
        for id in self.reqs.ids().collect::<Vec<_>>() {
            let Some(r) = self.reqs.get_mut(id) else {
                continue;
            };
            if r.peer != peer {
                continue;
            }
            match r.phase {
                Phase::SendStart | Phase::SendWaitAck | Phase::SendStream => {
                    self.finish_send(id, Some(err.clone()))
                }
                Phase::RecvFrags if r.placing > 0 => {
                    // A BTL still writes into the buffer: complete when it reports the end.
                    r.error.get_or_insert_with(|| Box::new(err.clone()));
                }
                Phase::RecvFrags | Phase::RecvGet => {
                    let tag = r.tag;
                    self.finish(id, peer, tag, 0, Some(err.clone()));
                }
                Phase::RecvPosted | Phase::Done | Phase::Free => {}
            }
        }
        for id in self.matcher.take_posted_from(peer) {
            self.finish(id, peer, 0, 0, Some(err.clone()));
        }
    }

    /// Is any work queued for [`Core::run`]?
    #[inline]
    fn has_work(&self) -> bool {
        !(self.failures.is_empty()
            && self.dereg.is_empty()
            && self.starts_pending == 0
            && self.ctrl.is_empty()
            && self.active.is_empty())
    }

    /// Execute queued work against the BTLs. Returns the number of actions taken.
    fn run(&mut self, bml: &mut Bml) -> usize {
        let mut n = 0;
        for (btl, peer, reason) in std::mem::take(&mut self.failures) {
            self.route_failed(bml, peer, btl, &reason);
            n += 1;
        }
        for (btl, reg) in self.dereg.drain(..) {
            bml.btl(btl).deregister_mem(&reg);
        }
        if self.starts_pending > 0 {
            for peer in 0..self.starts.len() {
                while let Some(&id) = self.starts[peer].front() {
                    let waiting = self
                        .reqs
                        .get_mut(id)
                        .is_some_and(|r| r.phase == Phase::SendStart);
                    if waiting && self.start_send(id, bml) {
                        break;
                    }
                    self.starts[peer].pop_front();
                    self.starts_pending -= 1;
                    n += 1;
                }
            }
        }
        while let Some(c) = self.ctrl.front() {
            let peer = c.peer;
            if self.dead[peer as usize] {
                self.ctrl.pop_front();
                continue;
            }
            let Some(b) = self.routes[peer as usize].eager.first().map(|r| r.btl) else {
                self.ctrl.pop_front();
                continue;
            };
            match bml
                .btl(b)
                .send(peer, TAG, &c.buf[..c.len], &[], SendHint::default())
            {
                Ok(()) => {
                    self.ctrl.pop_front();
                    n += 1;
                }
                Err(SendError::WouldBlock) => {
                    self.stats.would_block += 1;
                    break;
                }
                Err(e) => self.route_failed(bml, peer, b, &e.to_string()),
            }
        }
        for _ in 0..self.active.len() {
            let Some(id) = self.active.pop_front() else {
                break;
            };
            let blocked_before = self.stats.would_block;
            if self.step(id, bml) {
                self.active.push_back(id);
            } else if let Some(r) = self.reqs.get_mut(id) {
                r.active = false;
            }
            n += 1;
            // A BTL is out of resources: retrying every other queued request in this pass
            // would mostly fail again, and with 10^5 queued sends that is quadratic. The queue
            // rotated, so the next pass starts after this request.
            if self.stats.would_block != blocked_before {
                break;
            }
        }
        n
    }
}

impl BmlEvents for Core {
    #[inline]
    fn recv(&mut self, _btl: BtlIndex, peer: Rank, tag: BtlTag, data: &[u8]) {
        if tag != TAG {
            self.stats.dropped_foreign += 1;
            return;
        }
        if let Some((m, payload)) = hdr::parse_match(data) {
            self.on_match(peer, m, payload);
            return;
        }
        self.recv_control(peer, data);
    }

    fn recv_begin(
        &mut self,
        _btl: BtlIndex,
        peer: Rank,
        tag: BtlTag,
        head: &[u8],
        len: usize,
    ) -> Option<Placement> {
        if tag != TAG {
            return None;
        }
        match hdr::parse_match(head) {
            Some((m, payload)) => {
                self.begin_match(peer, m, payload, len.saturating_sub(hdr::MATCH_LEN))
            }
            None => self.begin_frag(peer, head, len),
        }
    }

    fn recv_placed(
        &mut self,
        _btl: BtlIndex,
        token: CompletionToken,
        result: Result<usize, SendError>,
    ) {
        self.on_placed(token, result);
    }

    fn rdma_complete(
        &mut self,
        _btl: BtlIndex,
        token: CompletionToken,
        result: Result<(), SendError>,
    ) {
        self.on_rdma_complete(token, result);
    }

    fn peer_failed(&mut self, btl: BtlIndex, peer: Rank, reason: &str) {
        self.failures.push((btl, peer, reason.to_owned()));
    }

    #[inline]
    fn wants_more(&self) -> bool {
        !self.awaited_done
    }
}

impl Core {
    /// Every header but an eager MATCH.
    #[inline(never)]
    fn recv_control(&mut self, peer: Rank, data: &[u8]) {
        let parsed = Packet::new_checked(data)
            .and_then(|p| Repr::parse(&p).map(|r| (r, &data[p.header_len()..])));
        let (repr, payload) = match parsed {
            Ok(x) => x,
            Err(e) => {
                self.stats.dropped_malformed += 1;
                tracing::debug!(peer, %e, "ob1: malformed fragment dropped");
                return;
            }
        };
        match repr {
            Repr::Match(m) => self.on_match(peer, m, payload),
            Repr::Rndv(info) => self.on_rndv(peer, info, payload, None),
            Repr::Rget { rndv, addr, keys } => {
                self.on_rndv(peer, rndv, payload, Some((addr, keys)))
            }
            Repr::Ack {
                src_req,
                dst_req,
                wanted,
            } => self.on_ack(peer, src_req, dst_req, wanted),
            Repr::Frag { dst_req, offset } => self.on_frag(peer, dst_req, offset, payload),
            Repr::Fin { src_req, .. } => self.on_fin(peer, src_req),
        }
    }

    /// An eager message from `peer`, the rank the BTL delivered it from: headers carry no
    /// source rank, the BTL names the sender.
    #[inline]
    fn on_match(&mut self, peer: Rank, m: MatchRepr, payload: &[u8]) {
        // The receive hot path: a well-formed, in-order message for the oldest posted receive.
        if m.tag >= 0 {
            let env = Envelope {
                context: m.ctx,
                source: peer,
                tag: m.tag,
            };
            if let Some(id) = self.matcher.arrive_posted(env, m.seq) {
                self.deliver_eager(id, env, payload);
                return;
            }
        }
        // (The envelope is rebuilt there: one built here for both paths is spilled to the
        // stack before the fast path's first test.)
        self.on_match_general(peer, m, payload);
    }

    #[inline(never)]
    fn on_match_general(&mut self, peer: Rank, m: MatchRepr, payload: &[u8]) {
        if m.tag < 0 {
            self.stats.dropped_malformed += 1;
            return;
        }
        let env = Envelope {
            context: m.ctx,
            source: peer,
            tag: m.tag,
        };
        match self.matcher.arrive(env, m.seq, || {
            if let Some(mem) = &self.memory {
                mem.alloc(payload.len());
            }
            let mut v = self.spare.pop().unwrap_or_default();
            v.clear();
            v.extend_from_slice(payload);
            Unexp::Eager(v)
        }) {
            Arrival::Matched(id) => self.deliver_eager(id, env, payload),
            Arrival::Stale => self.stats.dropped_stray += 1,
            Arrival::Unexpected | Arrival::Held => {}
        }
        self.drain_released();
    }

    fn on_rndv(
        &mut self,
        peer: Rank,
        info: RndvRepr,
        payload: &[u8],
        rget: Option<(u64, Vec<RgetKey>)>,
    ) {
        // As for MATCH, the source is the peer the BTL names; only the tag can be invalid.
        if info.hdr.tag < 0 {
            self.stats.dropped_malformed += 1;
            return;
        }
        let env = Envelope {
            context: info.hdr.ctx,
            source: peer,
            tag: info.hdr.tag,
        };
        let mut rget = Some(rget);
        let memory = self.memory.as_deref();
        let arrival = self.matcher.arrive(env, info.hdr.seq, || {
            if let Some(mem) = memory {
                mem.alloc(payload.len());
            }
            Unexp::Rndv {
                info,
                data: payload.to_vec(),
                rget: rget.take().flatten(),
            }
        });
        match arrival {
            Arrival::Matched(id) => self.start_rndv(id, env, info, payload, rget.take().flatten()),
            Arrival::Stale => self.stats.dropped_stray += 1,
            Arrival::Unexpected | Arrival::Held => {}
        }
        self.drain_released();
    }
}

impl Core {
    /// The start of an eager message whose rest a BTL can write in place as it arrives: taken
    /// only in the common case (in order, for the oldest posted receive of its source), which
    /// is then matched now. The request waits in [`Phase::RecvFrags`] for the rest.
    fn begin_match(
        &mut self,
        peer: Rank,
        m: MatchRepr,
        head: &[u8],
        msg_len: usize,
    ) -> Option<Placement> {
        if m.tag < 0 {
            return None;
        }
        let env = Envelope {
            context: m.ctx,
            source: peer,
            tag: m.tag,
        };
        let id = self.matcher.arrive_posted(env, m.seq)?;
        let r = self.reqs.get_mut(id)?;
        let (wanted, n) = r.take_first(peer, m.tag, msg_len, head);
        r.wanted = wanted;
        r.count = n;
        r.phase = Phase::RecvFrags;
        r.placing = 1;
        self.stats.placed += 1;
        Some(Placement {
            dst: r.buf.slice(n, wanted - n),
            token: CompletionToken(id.0),
        })
    }

    /// The start of a FRAG whose rest a BTL can write in place; a FRAG that [`Core::on_frag`]
    /// would drop is left to it.
    fn begin_frag(&mut self, peer: Rank, head: &[u8], len: usize) -> Option<Placement> {
        let p = Packet::new_checked(head).ok()?;
        let Ok(Repr::Frag { dst_req, offset }) = Repr::parse(&p) else {
            return None;
        };
        let payload = &head[p.header_len()..];
        let total = len
            .checked_sub(p.header_len())
            .filter(|&t| t >= payload.len())?;
        let (r, at) = frag_target(&mut self.reqs, peer, dst_req, offset, total).ok()?;
        r.placing = r.placing.checked_add(1)?;
        r.buf.write_at(at, payload);
        r.count += payload.len();
        self.stats.frags_recv += 1;
        self.stats.placed += 1;
        Some(Placement {
            dst: r.buf.slice(at + payload.len(), total - payload.len()),
            token: CompletionToken(dst_req),
        })
    }

    /// A BTL finished writing a fragment taken by `begin_match` or `begin_frag`.
    fn on_placed(&mut self, token: CompletionToken, result: Result<usize, SendError>) {
        let id = RequestId(token.0);
        let Some(r) = self
            .reqs
            .get_mut(id)
            .filter(|r| r.phase == Phase::RecvFrags && r.placing > 0)
        else {
            self.stats.dropped_stray += 1;
            return;
        };
        r.placing -= 1;
        match result {
            Ok(n) => r.count += n,
            Err(e) => {
                let peer = r.peer;
                r.error
                    .get_or_insert_with(|| Box::new(peer_failed(peer, &e.to_string())));
            }
        }
        if r.placing > 0 {
            return;
        }
        if let Some(e) = r.error.take() {
            let (peer, tag) = (r.peer, r.tag);
            self.finish(id, peer, tag, 0, Some(*e));
        } else if r.count >= r.wanted {
            self.finish_recv(id);
        }
    }
}

/// The ob1 PML: [`Core`] plus the BTLs it drives.
pub struct Ob1 {
    bml: Bml,
    core: Core,
}

impl std::fmt::Debug for Ob1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ob1")
            .field("me", &self.core.me)
            .field("requests", &self.core.reqs.live())
            .field("matcher", &self.core.matcher)
            .finish()
    }
}

impl Ob1 {
    /// An ob1 instance over `bml` with `cfg`.
    pub fn new(bml: Bml, cfg: Ob1Config) -> Self {
        let core = Core::new(&bml, cfg);
        Self { bml, core }
    }

    /// Account the bytes of buffered unexpected messages to `counter` (the profile's memory
    /// per component).
    pub fn with_memory(mut self, counter: Arc<MemoryCounter>) -> Self {
        self.core.memory = Some(counter);
        self
    }

    /// Count the traffic by size class and the eager sends (`--mca profile 1`); off, those
    /// counters stay 0 and the message paths skip them.
    pub fn with_traffic_counters(mut self, on: bool) -> Self {
        self.core.traffic = on;
        self
    }

    /// Requests currently held (outstanding or completed but not yet tested).
    pub fn live_requests(&self) -> usize {
        self.core.reqs.live()
    }

    fn check_rank(&self, rank: Rank) -> Result<(), PmlError> {
        let size = self.core.routes.len();
        if (rank as usize) < size {
            Ok(())
        } else {
            Err(PmlError::BadRank {
                rank,
                size: size as u32,
            })
        }
    }

    /// Queue send `id` behind the earlier refused sends to its peer.
    fn queue_start(&mut self, dest: Rank, id: RequestId) {
        self.core.starts[dest as usize].push_back(id);
        self.core.starts_pending += 1;
    }
}

impl Pml for Ob1 {
    fn component_name(&self) -> &str {
        "ob1"
    }

    fn isend(&mut self, args: SendArgs) -> Result<RequestId, PmlError> {
        self.check_rank(args.dest)?;
        if args.tag < 0 {
            return Err(PmlError::BadTag(args.tag));
        }
        let core = &mut self.core;
        let seq = core.matcher.next_send_seq(args.context, args.dest);
        let id = core.reqs.insert(Req::new_send(&args, seq));
        if core.dead[args.dest as usize] {
            core.finish_send(id, Some(peer_failed(args.dest, "peer failed earlier")));
        } else if !core.starts[args.dest as usize].is_empty() || core.start_send(id, &mut self.bml)
        {
            self.queue_start(args.dest, id);
        }
        Ok(id)
    }

    #[inline]
    fn start_send(&mut self, args: SendArgs) -> Result<SendStart, PmlError> {
        let core = &mut self.core;
        // The eager fast path: no send waits for a BTL (so none to this peer could be
        // overtaken), one obvious eager BTL, the whole message in one fragment. No request is
        // created unless the BTL refuses.
        let path = match core.eager_paths.get(args.dest as usize) {
            Some(p)
                if args.mode == SendMode::Standard
                    && args.tag >= 0
                    && args.buf.len() as isize <= p.max_payload
                    && core.starts_pending == 0
                    && !(p.several
                        && core.cfg.scheduling.for_pattern(args.pattern)
                            == Scheduling::RoundRobin) =>
            {
                *p
            }
            _ => return self.isend(args).map(SendStart::Pending),
        };
        let len = args.buf.len();
        let seq = core.matcher.next_send_seq(args.context, args.dest);
        let h = hdr::emit_match(&MatchRepr {
            ctx: args.context,
            tag: args.tag,
            seq,
        });
        let hint = SendHint {
            pattern: args.pattern,
            message_len: len,
        };
        match self
            .bml
            .btl(path.btl)
            .send(args.dest, TAG, &h, args.buf.as_slice(), hint)
        {
            Ok(()) => {
                if core.traffic {
                    core.stats.eager += 1;
                    core.stats.count_sent(len);
                }
                Ok(SendStart::Done)
            }
            Err(e) => Ok(SendStart::Pending(
                self.refused_eager(&args, seq, path.btl, e),
            )),
        }
    }

    fn irecv(&mut self, args: RecvArgs) -> Result<RequestId, PmlError> {
        // Whether a specific source failed earlier (the lookup checks the rank too).
        let source_dead = match args.source {
            Source::Rank(r) => match self.core.dead.get(r as usize) {
                Some(&dead) => dead,
                None => return Err(self.check_rank(r).expect_err("rank out of range")),
            },
            Source::Any => false,
        };
        if let TagSel::Tag(t) = args.tag {
            if t < 0 {
                return Err(PmlError::BadTag(t));
            }
        }
        if !args.buf.is_writable() {
            return Err(PmlError::Other(
                "receive buffer is read-only (build it with a mutable slice)".into(),
            ));
        }
        let core = &mut self.core;
        let id = core.reqs.insert(Req::new_recv(&args));
        match core.matcher.post(args.context, args.source, args.tag, id) {
            Posted::Queued => {
                if let (true, Source::Rank(r)) = (source_dead, args.source) {
                    core.matcher.cancel(args.context, &id);
                    core.finish(id, r, 0, 0, Some(peer_failed(r, "peer failed earlier")));
                }
            }
            Posted::Matched(env, u) => self.matched_on_post(id, env, u),
        }
        Ok(id)
    }

    fn iprobe(
        &mut self,
        context: ContextId,
        source: Source,
        tag: TagSel,
    ) -> Result<Option<Status>, PmlError> {
        if let Source::Rank(r) = source {
            self.check_rank(r)?;
        }
        self.progress();
        Ok(self
            .core
            .matcher
            .probe(context, source, tag)
            .map(|(e, u)| Status::ok(e.source, e.tag, u.len())))
    }

    #[inline]
    fn test(&mut self, request: RequestId) -> Result<Option<Status>, PmlError> {
        self.core
            .reqs
            .take_done(request)
            .map_err(|()| PmlError::UnknownRequest(request))
    }

    fn cancel(&mut self, request: RequestId) -> Result<bool, PmlError> {
        let core = &mut self.core;
        let Some(r) = core.reqs.get_mut(request) else {
            return Err(PmlError::UnknownRequest(request));
        };
        if r.phase != Phase::RecvPosted {
            return Ok(false);
        }
        let (context, src, tag) = (r.context, r.peer, r.tag);
        if !core.matcher.cancel(context, &request) {
            return Ok(false);
        }
        core.finish(request, src, tag, 0, Some(StatusError::Cancelled));
        Ok(true)
    }

    #[inline]
    fn progress(&mut self) -> usize {
        self.progress_pass()
    }

    fn wait(
        &mut self,
        request: RequestId,
        between: Option<&mut dyn FnMut() -> usize>,
    ) -> Result<Status, PmlError> {
        // The BTLs stop delivering as soon as this request completes.
        self.core.awaited = Some(request);
        self.core.awaited_done = false;
        let status = spin_until_done(
            self,
            request,
            &mut { between },
            Self::test,
            Self::progress_pass,
        );
        self.core.awaited = None;
        self.core.awaited_done = false;
        status
    }

    fn wait_all(
        &mut self,
        requests: &[RequestId],
        mut between: Option<&mut dyn FnMut() -> usize>,
        failed: &mut Vec<(usize, Status)>,
    ) -> Result<(), PmlError> {
        // The BTLs deliver whatever they have until the *last* request completed (then as
        // `wait` does, one record at a time): taking a window's messages in few passes rather
        // than one pass per message raised the 8 B message rate 1.2x here. Stopping at the
        // last keeps the next window's messages in the rings until receives are posted for
        // them.
        self.core.awaited = requests.last().copied();
        self.core.awaited_done = requests.last().is_some_and(|&id| {
            self.core
                .reqs
                .get_mut(id)
                .is_some_and(|r| r.phase == Phase::Done)
        });
        // One loop over the window: a request found complete costs one check; progress
        // passes run only while the next request is still in flight.
        let mut unknown = None;
        let mut backoff = Backoff::default();
        let mut i = 0;
        while let Some(&id) = requests.get(i) {
            match self.core.reqs.settle(id) {
                Settle::Released => {}
                Settle::Pending => {
                    self.wait_pass(&mut between, &mut backoff);
                    continue;
                }
                Settle::Failed => self.take_failed(i, id, failed),
                Settle::Unknown => {
                    unknown.get_or_insert(id);
                }
            }
            i += 1;
        }
        self.core.awaited = None;
        self.core.awaited_done = false;
        unknown.map_or(Ok(()), |id| Err(PmlError::UnknownRequest(id)))
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let s = &self.core.stats;
        let mut v = Vec::new();
        for (i, (name, _)) in CLASSES.iter().enumerate() {
            v.push((format!("pml.ob1.sent_msgs_{name}"), s.sent_msgs[i]));
            v.push((format!("pml.ob1.sent_bytes_{name}"), s.sent_bytes[i]));
            v.push((format!("pml.ob1.recv_msgs_{name}"), s.recv_msgs[i]));
            v.push((format!("pml.ob1.recv_bytes_{name}"), s.recv_bytes[i]));
        }
        let m = self.core.matcher.stats();
        for (k, x) in [
            ("eager", s.eager),
            ("rndv", s.rndv),
            ("rget", s.rget),
            ("frags_sent", s.frags_sent),
            ("frags_recv", s.frags_recv),
            ("placed", s.placed),
            ("gets", s.gets),
            ("bulk_get", s.bulk_get),
            ("bulk_copy", s.bulk_copy),
            ("get_failures", s.get_failures),
            ("would_block", s.would_block),
            ("dropped_foreign", s.dropped_foreign),
            ("dropped_malformed", s.dropped_malformed),
            ("dropped_stray", s.dropped_stray),
            ("route_failures", s.route_failures),
            ("peers_failed", s.peers_failed),
            ("unexpected", m.unexpected),
            ("out_of_order", m.out_of_order),
            ("matched_on_post", m.matched_on_post),
            ("matched_on_arrival", m.matched_on_arrival),
        ] {
            v.push((format!("pml.ob1.{k}"), x));
        }
        v.extend(self.bml.counters());
        v
    }

    fn finalize(&mut self) -> Result<(), PmlError> {
        let pending = self.core.reqs.outstanding();
        for (btl, reg) in self.core.dereg.drain(..) {
            self.bml.btl(btl).deregister_mem(&reg);
        }
        self.bml.finalize();
        if pending > 0 {
            tracing::warn!(pending, "ob1 finalized with requests still outstanding");
        }
        Ok(())
    }
}

impl Ob1 {
    /// One pass over the BTLs, then the work their events queued.
    #[inline(always)]
    fn progress_pass(&mut self) -> usize {
        let n = self.bml.progress(&mut self.core);
        // An idle pass stops here: most passes of a wait loop find nothing queued.
        if !self.core.has_work() {
            return n;
        }
        n + self.core.run(&mut self.bml)
    }

    /// The eager fast path's BTL refused the fragment: keep the send as a request with the
    /// sequence number it already has, and handle the refusal as isend does (retry in order,
    /// or fail over).
    #[inline(never)]
    fn refused_eager(
        &mut self,
        args: &SendArgs,
        seq: Seq,
        btl: BtlIndex,
        e: SendError,
    ) -> RequestId {
        let id = self.core.reqs.insert(Req::new_send(args, seq));
        if self.core.send_refused(&mut self.bml, id, args.dest, btl, e) {
            self.queue_start(args.dest, id);
        }
        id
    }

    /// One pass of a wait loop: progress, the runtime's functions, back-off. Out of line in
    /// `wait_all`, so that its check of completed requests keeps its values in registers.
    #[inline(never)]
    fn wait_pass(
        &mut self,
        between: &mut Option<&mut dyn FnMut() -> usize>,
        backoff: &mut Backoff,
    ) {
        let mut n = self.progress_pass();
        if let Some(f) = between.as_mut() {
            n += f();
        }
        backoff.pass(n);
    }

    /// `wait_all` found request `id` (its `i`-th) completed with an error: release it and
    /// report its status.
    #[cold]
    fn take_failed(&mut self, i: usize, id: RequestId, failed: &mut Vec<(usize, Status)>) {
        if let Ok(Some(status)) = self.core.reqs.take_done(id) {
            failed.push((i, status));
        }
    }

    /// A receive found its message already waiting.
    #[inline(never)]
    fn matched_on_post(&mut self, id: RequestId, env: Envelope, u: Unexp) {
        let rndv = matches!(u, Unexp::Rndv { .. });
        self.core.deliver_unexp(id, env, u);
        if rndv {
            self.core.run(&mut self.bml);
        }
    }
}
