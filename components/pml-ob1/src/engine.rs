//! The ob1 protocol engine: requests, matching, eager/rendezvous protocols, scheduling.
//!
//! [`Core`] holds all protocol state and never calls a BTL from inside an event: BTL events
//! (fragments, RDMA completions, failures) only update state and queue work (control headers,
//! gets, fragment streams). The queued work is executed against the [`Bml`] right after the BTL
//! progress returns ([`Core::run`]), and sends are attempted directly from `isend` so that the
//! eager path is one header encode plus one BTL call.

use std::collections::VecDeque;
use std::sync::Arc;

use rmca_framework::bml::{Bml, BmlEvents, BtlIndex, PeerRoutes, Route};
use rmca_framework::btl::{
    tags, BtlAttributes, BtlFlags, BtlTag, CommPattern, CompletionToken, MemAccess, Registration,
    RemoteSegment, SendError, SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::matching::{Arrival, Envelope, Matcher, Posted, Seq};
use rmca_framework::memory::MemoryCounter;
use rmca_framework::pml::{
    ContextId, Pml, PmlError, RecvArgs, RequestId, SendArgs, SendMode, SendStart, Source, Status,
    StatusError, Tag, TagSel,
};
use rmca_framework::rank::Rank;

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
    gets: u64,
    get_failures: u64,
    would_block: u64,
    dropped_foreign: u64,
    dropped_malformed: u64,
    dropped_stray: u64,
    route_failures: u64,
    peers_failed: u64,
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

#[derive(Debug)]
enum SendState {
    /// The first fragment (MATCH, RNDV or RGET) was not accepted by a BTL yet.
    Start,
    /// Rendezvous sent with `sent` bytes; waiting for ACK (or FIN after an RGET).
    WaitAck {
        sent: usize,
    },
    /// Pushing FRAGs (boxed to keep requests small on the eager path).
    Stream(Box<StreamState>),
    Done,
}

#[derive(Debug)]
struct StreamState {
    /// The receive request the FRAGs are for.
    dst_req: u64,
    segs: Vec<Segment>,
}

/// A send buffer's RDMA registrations (boxed: only RGET sends have any).
// A boxed Vec is one word in every request instead of three; only RGET sends allocate it.
#[allow(clippy::box_collection)]
#[derive(Debug, Default)]
struct Regs(Option<Box<Vec<(BtlIndex, Registration)>>>);

impl Regs {
    fn is_empty(&self) -> bool {
        self.0.as_ref().is_none() || self.0.as_ref().is_some_and(|v| v.is_empty())
    }
    fn push(&mut self, r: (BtlIndex, Registration)) {
        self.0.get_or_insert_with(Default::default).push(r);
    }
    fn iter(&self) -> impl Iterator<Item = &(BtlIndex, Registration)> {
        self.0.iter().flat_map(|v| v.iter())
    }
    fn drain_into(&mut self, out: &mut Vec<(BtlIndex, Registration)>) {
        if let Some(v) = self.0.as_mut() {
            out.append(v);
        }
    }
}

/// A completed request's status, compact (the error is rare, so it is boxed).
#[derive(Debug)]
struct Done {
    source: Rank,
    tag: Tag,
    len: usize,
    error: Option<Box<StatusError>>,
}

impl From<Status> for Done {
    fn from(s: Status) -> Self {
        Done {
            source: s.source,
            tag: s.tag,
            len: s.len,
            error: s.error.map(Box::new),
        }
    }
}

impl From<Done> for Status {
    fn from(d: Done) -> Self {
        Status {
            source: d.source,
            tag: d.tag,
            len: d.len,
            error: d.error.map(|e| *e),
        }
    }
}

#[derive(Debug)]
struct SendReq {
    buf: UserBuf,
    dest: Rank,
    tag: Tag,
    context: ContextId,
    mode: SendMode,
    pattern: CommPattern,
    seq: Seq,
    state: SendState,
    regs: Regs,
}

#[derive(Debug)]
enum RecvState {
    Posted,
    /// Copy pipeline: FRAGs fill the buffer up to `wanted`.
    Frags {
        received: usize,
        wanted: usize,
    },
    /// Reading the sender's buffer (boxed: rare, and it would double every request's size).
    Get(Box<GetState>),
    Done,
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

#[derive(Debug)]
struct RecvReq {
    buf: UserBuf,
    context: ContextId,
    pattern: CommPattern,
    state: RecvState,
    peer: Rank,
    msg_tag: Tag,
    msg_len: usize,
}

#[derive(Debug)]
enum Kind {
    Send(SendReq),
    Recv(RecvReq),
}

#[derive(Debug)]
struct Req {
    kind: Kind,
    /// Queued in `Core::active`.
    active: bool,
    done: Option<Done>,
}

impl Req {
    /// A send request for `args` that has MPI sequence number `seq` and has not started.
    fn new_send(args: &SendArgs, seq: Seq) -> Self {
        Req {
            kind: Kind::Send(SendReq {
                buf: args.buf,
                dest: args.dest,
                tag: args.tag,
                context: args.context,
                mode: args.mode,
                pattern: args.pattern,
                seq,
                state: SendState::Start,
                regs: Regs::default(),
            }),
            active: false,
            done: None,
        }
    }
}

/// Requests in a slab: ids are index + generation, so a stale id (or a forged one in a
/// packet) never reaches a reused slot.
#[derive(Debug, Default)]
struct Slab {
    slots: Vec<(u32, Option<Req>)>,
    free: Vec<u32>,
}

impl Slab {
    #[inline]
    fn insert(&mut self, req: Req) -> RequestId {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push((1, None));
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[i as usize];
        slot.1 = Some(req);
        RequestId((u64::from(slot.0) << 32) | u64::from(i))
    }
    fn get_mut(&mut self, id: RequestId) -> Option<&mut Req> {
        let (gen, i) = ((id.0 >> 32) as u32, id.0 as u32);
        match self.slots.get_mut(i as usize) {
            Some((g, Some(r))) if *g == gen => Some(r),
            _ => None,
        }
    }
    /// Is `id` a live request that has not completed?
    #[inline]
    fn is_pending(&self, id: RequestId) -> bool {
        let (gen, i) = ((id.0 >> 32) as u32, id.0 as u32);
        matches!(self.slots.get(i as usize), Some((g, Some(r))) if *g == gen && r.done.is_none())
    }

    /// If `id` completed, release it and return its status, without moving the request.
    #[inline]
    fn take_done(&mut self, id: RequestId) -> Result<Option<Status>, ()> {
        let (gen, i) = ((id.0 >> 32) as u32, id.0 as u32);
        match self.slots.get_mut(i as usize) {
            Some((g, slot @ Some(_))) if *g == gen => {
                let Some(req) = slot.as_mut() else {
                    return Err(());
                };
                let Some(status) = req.done.take() else {
                    return Ok(None);
                };
                *slot = None;
                *g = g.wrapping_add(1).max(1);
                self.free.push(i);
                Ok(Some(status.into()))
            }
            _ => Err(()),
        }
    }

    fn ids(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.1.is_some())
            .map(|(i, s)| RequestId((u64::from(s.0) << 32) | i as u64))
    }
    fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

/// A control header waiting for a BTL.
#[derive(Debug)]
struct Ctrl {
    peer: Rank,
    buf: [u8; hdr::MAX_CTRL_LEN],
    len: usize,
}

/// The protocol state of one ob1 instance (everything but the BTLs).
pub(crate) struct Core {
    me: Rank,
    cfg: Ob1Config,
    attrs: Vec<BtlAttributes>,
    names: Vec<String>,
    routes: Vec<PeerRoutes>,
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
}

fn send_status(s: &SendReq, error: Option<StatusError>) -> Status {
    Status {
        source: s.dest,
        tag: s.tag,
        len: s.buf.len(),
        error,
    }
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
        Self {
            me: bml.my_rank(),
            cfg,
            attrs: (0..bml.btl_count())
                .map(|i| bml.btl_ref(i).attributes().clone())
                .collect(),
            names: (0..bml.btl_count())
                .map(|i| bml.btl_ref(i).component_name().to_owned())
                .collect(),
            routes: (0..n).map(|p| bml.routes(p as Rank).clone()).collect(),
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
        }
    }

    fn complete(&mut self, id: RequestId, status: Status) {
        if let Some(r) = self.reqs.get_mut(id) {
            match &mut r.kind {
                Kind::Send(s) => {
                    s.state = SendState::Done;
                    s.regs.drain_into(&mut self.dereg);
                }
                Kind::Recv(rv) => rv.state = RecvState::Done,
            }
            if status.error.is_none() || matches!(status.error, Some(StatusError::Truncated { .. }))
            {
                let c = class(status.len);
                match r.kind {
                    Kind::Send(_) => {
                        self.stats.sent_msgs[c] += 1;
                        self.stats.sent_bytes[c] += status.len as u64;
                    }
                    Kind::Recv(_) => {
                        self.stats.recv_msgs[c] += 1;
                        self.stats.recv_bytes[c] += status.len as u64;
                    }
                }
            }
            r.done = Some(status.into());
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
    /// request once (the receive hot path; [`Core::complete`] does the same for any request).
    #[inline]
    fn deliver_eager(&mut self, id: RequestId, env: Envelope, data: &[u8]) {
        let Core { reqs, stats, .. } = self;
        let Some(req) = reqs.get_mut(id) else {
            return;
        };
        let Kind::Recv(r) = &mut req.kind else {
            return;
        };
        let n = data.len().min(r.buf.len());
        r.buf.write_at(0, &data[..n]);
        r.state = RecvState::Done;
        let error = (data.len() > n).then(|| {
            Box::new(StatusError::Truncated {
                message_len: data.len(),
                received: n,
            })
        });
        // Counted like complete() does: delivered bytes, truncated or not.
        let c = class(n);
        stats.recv_msgs[c] += 1;
        stats.recv_bytes[c] += n as u64;
        req.done = Some(Done {
            source: env.source,
            tag: env.tag,
            len: n,
            error,
        });
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
        let Some(Req {
            kind: Kind::Recv(r),
            ..
        }) = self.reqs.get_mut(id)
        else {
            return;
        };
        let wanted = msg_len.min(r.buf.len());
        let first = data.len().min(wanted);
        r.buf.write_at(0, &data[..first]);
        r.peer = peer;
        r.msg_tag = env.tag;
        r.msg_len = msg_len;
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
        if let Some((addr, keys)) = rget.filter(|_| self.cfg.use_rget) {
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
                if let Some(Req {
                    kind: Kind::Recv(r),
                    ..
                }) = self.reqs.get_mut(id)
                {
                    r.state = RecvState::Get(Box::new(GetState {
                        src_req: info.src_req,
                        addr,
                        keys,
                        segs,
                        wanted,
                        outstanding: 0,
                        failed: false,
                    }));
                }
                self.activate(id);
                return;
            }
        }
        if let Some(Req {
            kind: Kind::Recv(r),
            ..
        }) = self.reqs.get_mut(id)
        {
            r.state = RecvState::Frags {
                received: first,
                wanted,
            };
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
        let Some(Req {
            kind: Kind::Recv(r),
            ..
        }) = self.reqs.get_mut(id)
        else {
            return;
        };
        let received = r.msg_len.min(r.buf.len());
        let error = (r.msg_len > received).then_some(StatusError::Truncated {
            message_len: r.msg_len,
            received,
        });
        let status = Status {
            source: r.peer,
            tag: r.msg_tag,
            len: received,
            error,
        };
        self.complete(id, status);
    }

    fn on_frag(&mut self, peer: Rank, dst_req: u64, offset: u64, data: &[u8]) {
        let id = RequestId(dst_req);
        let Some(Req {
            kind: Kind::Recv(r),
            ..
        }) = self.reqs.get_mut(id)
        else {
            self.stats.dropped_stray += 1;
            return;
        };
        let RecvState::Frags {
            received, wanted, ..
        } = &mut r.state
        else {
            self.stats.dropped_stray += 1;
            return;
        };
        let end = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(data.len()));
        match end {
            Some(end) if r.peer == peer && end <= *wanted => {
                r.buf.write_at(end - data.len(), data);
                *received += data.len();
                self.stats.frags_recv += 1;
                if *received >= *wanted {
                    self.finish_recv(id);
                }
            }
            _ => self.stats.dropped_malformed += 1,
        }
    }

    fn on_rdma_complete(&mut self, token: CompletionToken, result: Result<(), SendError>) {
        let id = RequestId(token.0);
        let Some(Req {
            kind: Kind::Recv(r),
            ..
        }) = self.reqs.get_mut(id)
        else {
            self.stats.dropped_stray += 1;
            return;
        };
        let RecvState::Get(g) = &mut r.state else {
            return;
        };
        let GetState {
            outstanding,
            failed,
            segs,
            ..
        } = &mut **g;
        *outstanding = outstanding.saturating_sub(1);
        if let Err(e) = result {
            tracing::debug!(
                ?e,
                "ob1: RDMA get failed, falling back to the copy pipeline"
            );
            *failed = true;
            self.stats.get_failures += 1;
        }
        let all_issued = segs.iter().all(|s| s.next >= s.end);
        if *outstanding == 0 && (all_issued || *failed) {
            self.finish_get(id);
        }
    }

    /// Every get of receive `id` completed (or one failed): FIN, or fall back to ACK + FRAGs.
    fn finish_get(&mut self, id: RequestId) {
        let Some(Req {
            kind: Kind::Recv(r),
            ..
        }) = self.reqs.get_mut(id)
        else {
            return;
        };
        let RecvState::Get(g) = &r.state else {
            return;
        };
        let (src_req, wanted, failed) = (g.src_req, g.wanted, g.failed);
        let peer = r.peer;
        if failed {
            // The sender streams everything again from its start; FRAGs overwrite what the
            // gets may have written with the same bytes.
            r.state = RecvState::Frags {
                received: 0,
                wanted,
            };
            self.queue_ctrl(
                peer,
                Repr::Ack {
                    src_req,
                    dst_req: id.0,
                    wanted: wanted as u64,
                },
            );
        } else {
            self.queue_ctrl(
                peer,
                Repr::Fin {
                    src_req,
                    failed: false,
                },
            );
            self.finish_recv(id);
        }
    }

    // ---------------------------------------------------------------- send side

    fn on_ack(&mut self, peer: Rank, src_req: u64, dst_req: u64, wanted: u64) {
        let id = RequestId(src_req);
        let Some(Req {
            kind: Kind::Send(s),
            ..
        }) = self.reqs.get_mut(id)
        else {
            self.stats.dropped_stray += 1;
            return;
        };
        let SendState::WaitAck { sent } = s.state else {
            self.stats.dropped_stray += 1;
            return;
        };
        if s.dest != peer {
            self.stats.dropped_malformed += 1;
            return;
        }
        // Registrations (an RGET the receiver could not read) are no longer needed.
        s.regs.drain_into(&mut self.dereg);
        let wanted = usize::try_from(wanted)
            .unwrap_or(usize::MAX)
            .min(s.buf.len());
        if wanted <= sent {
            let status = send_status(s, None);
            self.complete(id, status);
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
        s.state = SendState::Stream(Box::new(StreamState {
            dst_req,
            segs: sched::split(&chosen, sent, wanted),
        }));
        self.activate(id);
    }

    fn on_fin(&mut self, peer: Rank, src_req: u64) {
        let id = RequestId(src_req);
        let Some(Req {
            kind: Kind::Send(s),
            ..
        }) = self.reqs.get_mut(id)
        else {
            self.stats.dropped_stray += 1;
            return;
        };
        if s.dest != peer || !matches!(s.state, SendState::WaitAck { .. }) {
            self.stats.dropped_stray += 1;
            return;
        }
        let status = send_status(s, None);
        self.complete(id, status);
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
        let Some(Req {
            kind: Kind::Send(s),
            ..
        }) = self.reqs.get_mut(id)
        else {
            return false;
        };
        let (dest, buf, mode, pattern) = (s.dest, s.buf, s.mode, s.pattern);
        let hdr = MatchRepr {
            ctx: s.context,
            src: self.me,
            tag: s.tag,
            seq: s.seq,
        };
        let Some(b) = self.eager_route(dest, pattern) else {
            self.fail_send(id, dest, "no BTL route left");
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
                    self.stats.eager += 1;
                    if let Some(Req {
                        kind: Kind::Send(s),
                        ..
                    }) = self.reqs.get_mut(id)
                    {
                        let st = send_status(s, None);
                        self.complete(id, st);
                    }
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
                            self.set_send_state(id, SendState::WaitAck { sent: 0 });
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
            a.rndv_eager_limit.saturating_sub(hdr::RNDV_LEN)
        };
        let first = len
            .min(cap)
            .min(a.max_send_size.saturating_sub(hdr::RNDV_LEN));
        let mut h = [0u8; hdr::RNDV_LEN];
        let _ = Repr::Rndv(rndv).emit(&mut h);
        match bml
            .btl(b)
            .send(dest, TAG, &h, &buf.as_slice()[..first], hint)
        {
            Ok(()) => {
                self.stats.rndv += 1;
                self.set_send_state(id, SendState::WaitAck { sent: first });
                false
            }
            Err(e) => self.send_refused(bml, id, dest, b, e),
        }
    }

    fn set_send_state(&mut self, id: RequestId, state: SendState) {
        if let Some(Req {
            kind: Kind::Send(s),
            ..
        }) = self.reqs.get_mut(id)
        {
            s.state = state;
        }
    }

    /// Register the send buffer with the GET routes to the peer (once) and build the RGET header.
    fn rget_header(&mut self, id: RequestId, bml: &mut Bml, rndv: RndvRepr) -> Option<Vec<u8>> {
        let Some(Req {
            kind: Kind::Send(s),
            ..
        }) = self.reqs.get_mut(id)
        else {
            return None;
        };
        let dest = s.dest;
        if s.regs.is_empty() {
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
                    || s.buf.len() < self.attrs[route.btl].min_rdma_pipeline_size
                {
                    continue;
                }
                match bml.btl(route.btl).register_mem(s.buf, access) {
                    Ok(reg) => s.regs.push((route.btl, reg)),
                    Err(e) => {
                        tracing::debug!(%e, btl = route.btl, "ob1: registration failed, not offering this BTL")
                    }
                }
            }
        }
        if s.regs.is_empty() {
            return None;
        }
        let keys = s
            .regs
            .iter()
            .map(|(b, reg)| RgetKey {
                btl: self.names[*b].clone(),
                key: reg.remote_key.clone(),
            })
            .collect();
        let repr = Repr::Rget {
            rndv,
            addr: s.buf.addr() as u64,
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
                s.regs.drain_into(&mut self.dereg);
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
                self.reqs.get_mut(id).is_some_and(|r| r.done.is_none())
            }
        }
    }

    fn fail_send(&mut self, id: RequestId, peer: Rank, reason: &str) {
        if let Some(Req {
            kind: Kind::Send(s),
            ..
        }) = self.reqs.get_mut(id)
        {
            let st = send_status(s, Some(peer_failed(peer, reason)));
            self.complete(id, st);
        }
    }

    /// Push FRAGs of a streaming send. Returns true if more remain.
    fn stream(&mut self, id: RequestId, bml: &mut Bml) -> bool {
        let mut budget = self.cfg.send_pipeline_depth;
        loop {
            let Some(Req {
                kind: Kind::Send(s),
                ..
            }) = self.reqs.get_mut(id)
            else {
                return false;
            };
            let SendState::Stream(st) = &mut s.state else {
                return false;
            };
            let StreamState { dst_req, segs } = &mut **st;
            // The share with the most left goes next, so the BTLs of a stripe advance together.
            let Some(seg) = segs
                .iter_mut()
                .filter(|g| g.next < g.end)
                .max_by_key(|g| g.end - g.next)
            else {
                let st = send_status(s, None);
                self.complete(id, st);
                return false;
            };
            if budget == 0 {
                return true;
            }
            let a = &self.attrs[seg.btl];
            let chunk =
                (seg.end - seg.next).min(a.max_send_size.saturating_sub(hdr::FRAG_LEN).max(1));
            let mut h = [0u8; hdr::FRAG_LEN];
            let _ = Repr::Frag {
                dst_req: *dst_req,
                offset: seg.next as u64,
            }
            .emit(&mut h);
            let hint = SendHint {
                pattern: s.pattern,
                message_len: s.buf.len(),
            };
            let (dest, btl) = (s.dest, seg.btl);
            match bml.btl(btl).send(
                dest,
                TAG,
                &h,
                &s.buf.as_slice()[seg.next..seg.next + chunk],
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
            let Some(Req {
                kind: Kind::Recv(r),
                ..
            }) = self.reqs.get_mut(id)
            else {
                return false;
            };
            let peer = r.peer;
            let buf = r.buf;
            let RecvState::Get(g) = &mut r.state else {
                return false;
            };
            let GetState {
                addr,
                keys,
                segs,
                outstanding,
                failed,
                ..
            } = &mut **g;
            if *failed {
                return false;
            }
            let Some(seg) = segs
                .iter_mut()
                .filter(|g| g.next < g.end)
                .max_by_key(|g| g.end - g.next)
            else {
                return false;
            };
            if *outstanding >= depth {
                return true;
            }
            let frag = self.attrs[seg.btl].rdma_pipeline_frag_size.max(1);
            let chunk = (seg.end - seg.next).min(frag);
            let remote = RemoteSegment {
                addr: addr.wrapping_add(seg.next as u64),
                len: chunk,
                remote_key: keys[seg.route].clone(),
            };
            let local = buf.slice(seg.next, chunk);
            match bml
                .btl(seg.btl)
                .get(peer, local, &remote, CompletionToken(id.0))
            {
                Ok(()) => {
                    seg.next += chunk;
                    *outstanding += 1;
                    self.stats.gets += 1;
                }
                Err(SendError::WouldBlock) => {
                    self.stats.would_block += 1;
                    return true;
                }
                Err(e) => {
                    tracing::debug!(%e, "ob1: get refused, falling back to the copy pipeline");
                    *failed = true;
                    self.stats.get_failures += 1;
                    if *outstanding == 0 {
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
        if r.done.is_some() {
            return false;
        }
        match &r.kind {
            Kind::Send(s) => match s.state {
                SendState::Start => self.start_send(id, bml),
                SendState::Stream(_) => self.stream(id, bml),
                _ => false,
            },
            Kind::Recv(rv) => match rv.state {
                RecvState::Get(_) => self.issue_gets(id, bml),
                _ => false,
            },
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
        // Streams assigned to the dead BTL move to the best remaining send route.
        if let Some(alt) = self.routes[peer as usize].send.first().map(|r| r.btl) {
            for id in self.reqs.ids().collect::<Vec<_>>() {
                if let Some(Req {
                    kind: Kind::Send(s),
                    ..
                }) = self.reqs.get_mut(id)
                {
                    if let SendState::Stream(st) = &mut s.state {
                        let segs = &mut st.segs;
                        segs.iter_mut()
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
        self.stats.peers_failed += 1;
        let err = peer_failed(peer, reason);
        for id in self.reqs.ids().collect::<Vec<_>>() {
            let Some(r) = self.reqs.get_mut(id) else {
                continue;
            };
            if r.done.is_some() {
                continue;
            }
            let status = match &r.kind {
                Kind::Send(s) if s.dest == peer => send_status(s, Some(err.clone())),
                Kind::Recv(rv) if rv.peer == peer && !matches!(rv.state, RecvState::Posted) => {
                    Status {
                        source: peer,
                        tag: rv.msg_tag,
                        len: 0,
                        error: Some(err.clone()),
                    }
                }
                _ => continue,
            };
            self.complete(id, status);
        }
        for id in self.matcher.take_posted_from(peer) {
            self.complete(
                id,
                Status {
                    source: peer,
                    tag: 0,
                    len: 0,
                    error: Some(err.clone()),
                },
            );
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
                    let waiting = self.reqs.get_mut(id).is_some_and(|r| {
                        r.done.is_none()
                            && matches!(&r.kind, Kind::Send(s) if matches!(s.state, SendState::Start))
                    });
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
    fn recv(&mut self, _btl: BtlIndex, peer: Rank, tag: BtlTag, data: &[u8]) {
        if tag != TAG {
            self.stats.dropped_foreign += 1;
            return;
        }
        if let Some((m, payload)) = hdr::parse_match(data) {
            self.on_match(peer, m, payload);
            return;
        }
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
}

impl Core {
    #[inline]
    fn on_match(&mut self, peer: Rank, m: MatchRepr, payload: &[u8]) {
        if m.src != peer || m.tag < 0 {
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
        if info.hdr.src != peer || info.hdr.tag < 0 {
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

    /// Requests currently held (outstanding or completed but not yet tested).
    pub fn live_requests(&self) -> usize {
        self.core.reqs.live()
    }

    #[inline(never)]
    fn take_done(&mut self, request: RequestId) -> Result<Option<Status>, PmlError> {
        self.core
            .reqs
            .take_done(request)
            .map_err(|()| PmlError::UnknownRequest(request))
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
            core.fail_send(id, args.dest, "peer failed earlier");
        } else if !core.starts[args.dest as usize].is_empty() || core.start_send(id, &mut self.bml)
        {
            core.starts[args.dest as usize].push_back(id);
            core.starts_pending += 1;
        }
        Ok(id)
    }

    fn start_send(&mut self, args: SendArgs) -> Result<SendStart, PmlError> {
        self.check_rank(args.dest)?;
        if args.tag < 0 {
            return Err(PmlError::BadTag(args.tag));
        }
        let core = &mut self.core;
        let dest = args.dest as usize;
        // The eager fast path: nothing queued before it to this peer, one obvious eager BTL,
        // the whole message in one fragment. No request is created unless the BTL refuses.
        let eager = &core.routes[dest].eager;
        let btl = match eager.as_slice() {
            [only] => Some(only.btl),
            [first, ..]
                if core.cfg.scheduling.for_pattern(args.pattern) != Scheduling::RoundRobin =>
            {
                Some(first.btl)
            }
            _ => None,
        };
        let fast = args.mode == SendMode::Standard
            && !core.dead[dest]
            && core.starts[dest].is_empty()
            && btl.is_some_and(|b| {
                let a = &core.attrs[b];
                hdr::MATCH_LEN + args.buf.len() <= a.eager_limit.min(a.max_send_size)
            });
        let Some(b) = btl.filter(|_| fast) else {
            return self.isend(args).map(SendStart::Pending);
        };
        let seq = core.matcher.next_send_seq(args.context, args.dest);
        let h = hdr::emit_match(&MatchRepr {
            ctx: args.context,
            src: core.me,
            tag: args.tag,
            seq,
        });
        let len = args.buf.len();
        let hint = SendHint {
            pattern: args.pattern,
            message_len: len,
        };
        match self
            .bml
            .btl(b)
            .send(args.dest, TAG, &h, args.buf.as_slice(), hint)
        {
            Ok(()) => {
                core.stats.eager += 1;
                let c = class(len);
                core.stats.sent_msgs[c] += 1;
                core.stats.sent_bytes[c] += len as u64;
                Ok(SendStart::Done(Status {
                    source: args.dest,
                    tag: args.tag,
                    len,
                    error: None,
                }))
            }
            Err(e) => {
                // Refused: keep it as a request with the sequence number it already has, and
                // handle the refusal as isend does (retry in order, or fail over).
                let id = core.reqs.insert(Req::new_send(&args, seq));
                if core.send_refused(&mut self.bml, id, args.dest, b, e) {
                    core.starts[dest].push_back(id);
                    core.starts_pending += 1;
                }
                Ok(SendStart::Pending(id))
            }
        }
    }

    fn irecv(&mut self, args: RecvArgs) -> Result<RequestId, PmlError> {
        if let Source::Rank(r) = args.source {
            self.check_rank(r)?;
        }
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
        let id = core.reqs.insert(Req {
            kind: Kind::Recv(RecvReq {
                buf: args.buf,
                context: args.context,
                pattern: args.pattern,
                state: RecvState::Posted,
                // Until matched: the selectors (for a cancelled receive's status).
                peer: match args.source {
                    Source::Rank(r) => r,
                    Source::Any => 0,
                },
                msg_tag: match args.tag {
                    TagSel::Tag(t) => t,
                    TagSel::Any => 0,
                },
                msg_len: 0,
            }),
            active: false,
            done: None,
        });
        match core.matcher.post(args.context, args.source, args.tag, id) {
            Posted::Matched(env, u) => {
                let rndv = matches!(u, Unexp::Rndv { .. });
                core.deliver_unexp(id, env, u);
                if rndv {
                    core.run(&mut self.bml);
                }
            }
            Posted::Queued => {
                if let Source::Rank(r) = args.source {
                    if core.dead[r as usize] {
                        core.matcher.cancel(args.context, &id);
                        core.complete(
                            id,
                            Status {
                                source: r,
                                tag: 0,
                                len: 0,
                                error: Some(peer_failed(r, "peer failed earlier")),
                            },
                        );
                    }
                }
            }
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
            .map(|(e, u)| Status {
                source: e.source,
                tag: e.tag,
                len: u.len(),
                error: None,
            }))
    }

    #[inline]
    fn test(&mut self, request: RequestId) -> Result<Option<Status>, PmlError> {
        // Wait loops test far more often than requests complete: answer "not yet" cheaply.
        if self.core.reqs.is_pending(request) {
            return Ok(None);
        }
        self.take_done(request)
    }

    fn cancel(&mut self, request: RequestId) -> Result<bool, PmlError> {
        let core = &mut self.core;
        let Some(r) = core.reqs.get_mut(request) else {
            return Err(PmlError::UnknownRequest(request));
        };
        let Kind::Recv(rv) = &r.kind else {
            return Ok(false);
        };
        if !matches!(rv.state, RecvState::Posted) || r.done.is_some() {
            return Ok(false);
        }
        let (context, src, tag) = (rv.context, rv.peer, rv.msg_tag);
        if !core.matcher.cancel(context, &request) {
            return Ok(false);
        }
        core.complete(
            request,
            Status {
                source: src,
                tag,
                len: 0,
                error: Some(StatusError::Cancelled),
            },
        );
        Ok(true)
    }

    fn progress(&mut self) -> usize {
        let n = self.bml.progress(&mut self.core);
        // An idle pass stops here: most passes of a wait loop find nothing queued.
        if !self.core.has_work() {
            return n;
        }
        n + self.core.run(&mut self.bml)
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
            ("gets", s.gets),
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
        let pending = self
            .core
            .reqs
            .ids()
            .filter(|id| {
                self.core.reqs.slots[(id.0 as u32) as usize]
                    .1
                    .as_ref()
                    .is_some_and(|r| r.done.is_none())
            })
            .count();
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
