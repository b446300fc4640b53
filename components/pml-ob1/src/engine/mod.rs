//! The ob1 protocol engine: requests, matching, eager/rendezvous protocols, scheduling.
//!
//! `Core` holds all protocol state and never calls a BTL from inside an event: BTL events
//! (fragments, RDMA completions, failures) only update state and queue work (control headers,
//! gets, fragment streams). The queued work is executed against the [`Bml`] right after the BTL
//! progress returns (`Core::run`), and sends are attempted directly from `isend` so that the
//! eager path is one header encode plus one BTL call.
//!
//! A request is one flat `Req`: the fields every message needs sit in it, and what only
//! rendezvous and RDMA use (fragment schedules, registrations, get state) hangs off one
//! optional box, so that posting, completing and releasing an eager receive touch one small
//! struct and free nothing.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use rmca_framework::bml::{Bml, BtlIndex, PeerRoutes};
use rmca_framework::btl::{
    tags, BtlAttributes, BtlTag, CommPattern, Registration, SendError, SendHint,
};
use rmca_framework::matching::{Envelope, Matcher};
use rmca_framework::memory::MemoryCounter;
use rmca_framework::pml::{RequestId, SendMode, StatusError, Tag};
use rmca_framework::rank::Rank;

use crate::bulk::BulkChooser;
use crate::hdr::{self, MatchRepr, Repr, RgetKey, RndvRepr};
use crate::sched::Scheduling;
use crate::Ob1Config;

mod osc;
mod pml;
mod recv;
mod rendezvous;
mod requests;

pub use pml::Ob1;
use requests::{Phase, Req, Requests};

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

/// A control header waiting for a BTL.
#[derive(Debug)]
struct Ctrl {
    peer: Rank,
    buf: [u8; hdr::MAX_CTRL_LEN],
    len: usize,
}

/// The eager fast path to one peer, derived from its routes: a standard send of at most
/// `max_payload` bytes goes to `btl` in one MATCH fragment with no request (see
/// [`Ob1::start_send`](Ob1#method.start_send)). `max_payload` is negative when there is no such path (no route, a
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
    reqs: Requests,
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
    /// The request [`Ob1::wait`](Ob1#method.wait) is blocked on, and whether it completed during the current
    /// progress pass: the BTLs are then told to stop delivering (see
    /// [`rmca_framework::btl::BtlEvents::wants_more`]).
    awaited: Option<RequestId>,
    awaited_done: bool,
    /// Reads against the copy pipeline, measured (`pml_ob1_adaptive_bulk`), one chooser per
    /// BTL that would serve the read (by BTL index): a CMA read on the node and an RDMA read
    /// across nodes are different machines.
    bulk: Vec<BulkState>,
    /// Messages taken out of matching by a matched probe (`MPI_Mprobe`), by message id,
    /// until `MPI_Mrecv` receives them; and the next id.
    matched: std::collections::HashMap<u64, (Envelope, Unexp)>,
    next_message: u64,
    /// One-sided RDMA for osc-rdma (its own module: `osc`).
    osc: osc::OscRdma,
}

/// The measured choice of one reading BTL.
#[derive(Debug, Default)]
pub(super) struct BulkState {
    pub(super) chooser: BulkChooser,
    /// When its last measured bulk transfer completed: a transfer's service starts no earlier.
    pub(super) free_at: Option<Instant>,
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
    reqs: &mut Requests,
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
            matched: Default::default(),
            next_message: 0,
            osc: osc::OscRdma::default(),
            reqs: Requests::default(),
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
            bulk: Vec::new(),
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

    // ---------------------------------------------------------------- send side

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
        let btl_name = self.names.get(btl).map(String::as_str).unwrap_or("?");
        if rmca_framework::job::closing() {
            // A peer that left the closing fence first has torn its connections down.
            tracing::debug!(
                peer,
                btl = btl_name,
                reason,
                "ob1: route closed at finalize"
            );
        } else {
            tracing::warn!(peer, btl = btl_name, reason, "ob1: route failed");
        }
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
                Phase::RecvPosted | Phase::Done => {}
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
            let (blocked_before, sent_before) = (self.stats.would_block, self.stats.frags_sent);
            let more = self.step(id, bml);
            if more {
                self.active.push_back(id);
            } else if let Some(r) = self.reqs.get_mut(id) {
                r.active = false;
            }
            let blocked = self.stats.would_block != blocked_before;
            // A step that only met a full BTL did nothing: counting it would keep the wait
            // loop spinning (never backing off or yielding) while the peer that must drain
            // the BTL waits for the core.
            if !blocked || !more || self.stats.frags_sent != sent_before {
                n += 1;
            }
            // A BTL is out of resources: retrying every other queued request in this pass
            // would mostly fail again, and with 10^5 queued sends that is quadratic. The queue
            // rotated, so the next pass starts after this request.
            if blocked {
                break;
            }
        }
        n
    }
}
