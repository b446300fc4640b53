//! The DR PML: MPI point-to-point over the sans-IO protocol core ([`crate::proto`]), one
//! [`Connection`] per peer (created on first use), matching through the framework's shared
//! engine.
//!
//! This module is the I/O edge: it reads the clock, moves bytes between user buffers and BTLs,
//! and turns connection events into request completions.
//! - Sends never copy: fragments are read from the user buffer when (re)transmitted, which is
//!   why a send completes only when every byte is acknowledged (or, for `MPI_Ssend`, matched).
//! - Receives are placed straight into the user buffer once matched; before that (eager, or
//!   the first vfrag of a rendezvous) into a staging buffer bounded by `pml_dr_eager_limit`.
//! - The core announces messages in per-peer send order, so the per-(context, sender) sequence
//!   the matching engine wants is assigned here by counting: nothing is ever held.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use rmca_framework::bml::{Bml, BmlEvents, BtlIndex};
use rmca_framework::btl::{
    tags, BtlFlags, BtlTag, CommPattern, CompletionToken, SendError as BtlSendError, SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::matching::{Arrival as MatchArrival, Envelope, Matcher, Posted, Seq};
use rmca_framework::memory::MemoryCounter;
use rmca_framework::mpool::{FreeListPool, Mpool, PoolBuf, PoolSpec};
use rmca_framework::pml::{
    ContextId, MessageId, Pml, PmlError, RecvArgs, RequestId, SendArgs, SendMode, Source, Status,
    StatusError, TagSel,
};
use rmca_framework::rank::Rank;
use rmca_framework::slab::Slab;
use tracing::{debug, warn};

use crate::proto::e2e::{copy_checked, CopyOutcome, CopyTarget, StagedCrcs};
use crate::proto::wire::{split_bundle, ACK_LEN};
use crate::proto::{
    Arrival, Config, Connection, Counters, Csum, Event, MatchFields, MsgSeq, PathConfig, Transmit,
};

/// The BTL tag of every DR packet.
pub const DR_TAG: BtlTag = tags::PML_DR_BASE;

/// The glue's maps: their keys are small integers (message sequences, ranks and context ids)
/// chosen by this process or bounded by the connection's checks.
type FastMap<K, V> = HashMap<K, V, rmca_framework::hash::BuildIntHasher>;

/// The user's receive buffer as the target of a staged message's checked copy.
impl CopyTarget for UserBuf {
    fn write_at(&mut self, offset: usize, src: &[u8]) {
        UserBuf::write_at(self, offset, src);
    }
    fn bytes(&self) -> &[u8] {
        self.as_slice()
    }
}

#[derive(Debug)]
struct Incoming {
    env: Envelope,
    len: u64,
    rndv: bool,
    /// Bytes that arrived before the message was matched (at most the eager limit).
    staging: Vec<u8>,
    /// Their checksums, checked again after the copy into the receive buffer
    /// (`pml_dr_csum = end-to-end`).
    staged_crcs: StagedCrcs,
    /// Fragments still failing the end-to-end check after a second copy: the receive fails.
    e2e_corrupt: Option<usize>,
    /// The matched receive.
    target: Option<(RequestId, UserBuf)>,
    received: bool,
}

/// A message the connection is still sending (until every vfrag is acknowledged).
#[derive(Debug)]
struct PendingSend {
    /// The request to complete on acknowledgement; `None` once completed locally (a copied
    /// small send, see [`Config::eager_copy`]).
    req: Option<RequestId>,
    /// Where the fragments are read from: the user's buffer, or `copy`.
    buf: UserBuf,
    tag: i32,
    pattern: CommPattern,
    /// The pool buffer holding the payload of a send that completed at once (kept for
    /// retransmission, freed on acknowledgement or failure).
    copy: Option<PoolBuf>,
}

#[derive(Debug)]
struct Peer {
    conn: Connection,
    /// A packet the BTL refused with WouldBlock, retried first.
    stalled: Option<Transmit>,
    /// The ack that rode in front of data that a progress pass delivered, handled by a later
    /// pass (see [`State::defer_bundled_ack`]).
    deferred_ack: Option<(BtlIndex, [u8; ACK_LEN])>,
    sends: FastMap<MsgSeq, PendingSend>,
    recvs: FastMap<MsgSeq, Incoming>,
    dead: Option<String>,
}

#[derive(Debug)]
enum Req {
    Send {
        status: Option<Status>,
    },
    Recv {
        args: RecvArgs,
        status: Option<Status>,
        /// Queued for this specific peer (counted in `State::awaiting`).
        awaits: Option<Rank>,
    },
}

/// Per-peer state, created on first use (a send to, a receive posted for, or a packet or failure
/// report from the peer), so that init and the progress loop cost O(peers talked to), not
/// O(job size). Indexing a peer that was never created is a bug: every path reaching a peer by
/// index goes through [`Peers::ensure`] first.
#[derive(Debug)]
struct Peers {
    slots: Vec<Option<Box<Peer>>>,
    /// Created peers, in creation order (the progress loop walks these).
    active: Vec<Rank>,
    /// Each peer's BTLs in failover order, checked at init.
    paths: Vec<Vec<PathConfig>>,
    cfg: Config,
}

impl Peers {
    fn len(&self) -> usize {
        self.slots.len()
    }

    fn get(&self, p: Rank) -> Option<&Peer> {
        self.slots.get(p as usize)?.as_deref()
    }

    /// Creates the connection to `p` if it does not exist yet.
    fn ensure(&mut self, now: Instant, p: Rank) {
        let slot = &mut self.slots[p as usize];
        if slot.is_none() {
            let conn = Connection::new(now, self.cfg.clone(), &self.paths[p as usize])
                .expect("config and paths were validated at init");
            *slot = Some(Box::new(Peer {
                conn,
                stalled: None,
                deferred_ack: None,
                sends: FastMap::default(),
                recvs: FastMap::default(),
                dead: None,
            }));
            self.active.push(p);
        }
    }
}

impl std::ops::Index<usize> for Peers {
    type Output = Peer;
    fn index(&self, p: usize) -> &Peer {
        self.slots[p].as_deref().expect("peer connection created")
    }
}

impl std::ops::IndexMut<usize> for Peers {
    fn index_mut(&mut self, p: usize) -> &mut Peer {
        self.slots[p]
            .as_deref_mut()
            .expect("peer connection created")
    }
}

#[derive(Debug)]
struct State {
    me: Rank,
    cfg: Config,
    peers: Peers,
    matcher: Matcher<RequestId, (Rank, MsgSeq)>,
    /// Messages taken out of matching by a matched probe (`MPI_Mprobe`), by message id,
    /// until `MPI_Mrecv` binds a receive to them; and the next id.
    matched: HashMap<u64, (Envelope, Rank, MsgSeq)>,
    next_message: u64,
    reqs: Slab<Req>,
    /// Next matching sequence per (sender, context), assigned in announcement order.
    rx_ctx_seq: FastMap<(Rank, ContextId), Seq>,
    /// Packets dropped by the glue (wrong tag, abandoned placements).
    dropped: u64,
    /// Staged fragments whose bytes failed the end-to-end check in the receive buffer (each
    /// copied again from the verified staging buffer).
    e2e_failures: u64,
    /// Receives queued for each specific peer: while any, that peer is awaited (keepalives,
    /// death by silence) even if it has nothing in flight.
    awaiting: Vec<usize>,
    now: Instant,
    /// BTL failovers met while the BML was delivering (applied when it returns).
    route_failures: Vec<(Rank, BtlIndex)>,
    /// `now` was read during this progress pass (by the first arrival).
    clock_fresh: bool,
    /// Progress passes made (the clock is read every [`CLOCK_EVERY`]th idle one).
    passes: u32,
    /// The last pass delivered something and left the timers to this one.
    timers_deferred: bool,
    /// Buffers for the payloads of small sends that completed at once ([`COPY_POOL_MAX`] at
    /// most: past that, sends complete on acknowledgement).
    copies: FreeListPool,
}

/// An idle progress pass (nothing arrived) reads the clock for the timers only every this many
/// passes: the read was a sixth of an idle dr+shm rank's time, and every timer is at least
/// `pml_dr_ack_hold_us` (20 us by default) long, against well under a microsecond per pass.
const CLOCK_EVERY: u32 = 8;

/// Most small-send copies held at once (a few MiB at the default `pml_dr_eager_copy`).
const COPY_POOL_MAX: usize = 1024;

fn copy_pool(cfg: &Config, memory: Arc<MemoryCounter>) -> FreeListPool {
    FreeListPool::new(
        PoolSpec {
            buffer_size: cfg.eager_copy,
            initial: 0,
            grow_by: 64,
            max: COPY_POOL_MAX,
        },
        memory,
    )
}

/// A DR PML instance.
pub struct Dr {
    bml: Bml,
    st: State,
}

impl std::fmt::Debug for Dr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dr")
            .field("me", &self.st.me)
            .field("bml", &self.bml)
            .finish_non_exhaustive()
    }
}

impl Dr {
    /// A DR PML over `bml`. Each peer gets (on first use) a connection whose BTLs, in failover
    /// order, are its eager routes (lowest latency first).
    pub fn new(bml: Bml, cfg: Config) -> Result<Self, PmlError> {
        let now = Instant::now();
        let me = bml.my_rank();
        cfg.validate().map_err(|e| PmlError::Init(e.to_string()))?;
        let mut paths_of = Vec::with_capacity(bml.peer_count());
        for p in 0..bml.peer_count() as Rank {
            let paths: Vec<PathConfig> = bml
                .routes(p)
                .eager
                .iter()
                .map(|r| {
                    let a = bml.btl_ref(r.btl).attributes();
                    PathConfig {
                        btl: r.btl,
                        max_send_size: a.max_send_size,
                        need_csum: a.flags.contains(BtlFlags::NEED_CSUM),
                        need_ack: a.flags.contains(BtlFlags::NEED_ACK),
                    }
                })
                .collect();
            Connection::check_paths(&paths)
                .map_err(|e| PmlError::Init(format!("peer {p}: {e}")))?;
            paths_of.push(paths);
        }
        let nprocs = paths_of.len();
        let cfg_for_pool = cfg.clone();
        let peers = Peers {
            slots: (0..nprocs).map(|_| None).collect(),
            active: Vec::new(),
            paths: paths_of,
            cfg: cfg.clone(),
        };
        Ok(Self {
            bml,
            st: State {
                me,
                cfg,
                peers,
                matcher: Matcher::new(nprocs),
                matched: HashMap::new(),
                next_message: 0,
                reqs: Slab::new(),
                rx_ctx_seq: FastMap::default(),
                dropped: 0,
                e2e_failures: 0,
                awaiting: vec![0; nprocs],
                now,
                route_failures: Vec::new(),
                clock_fresh: false,
                passes: 0,
                timers_deferred: false,
                copies: copy_pool(&cfg_for_pool, Arc::default()),
            },
        })
    }

    /// Account the buffers of small-send copies to `memory` (the component uses `pml.dr`).
    pub fn with_memory(mut self, memory: Arc<MemoryCounter>) -> Self {
        self.st.copies = copy_pool(&self.st.cfg, memory);
        self
    }

    /// Peers that have a connection (created on first use), out of the job's size.
    pub fn connected_peers(&self) -> usize {
        self.st.peers.active.len()
    }

    /// Protocol counters of the connection to `peer` (`None`: no connection yet).
    pub fn peer_counters(&self, peer: Rank) -> Option<Counters> {
        self.st.peers.get(peer).map(|p| p.conn.counters())
    }

    fn pump_all(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.st.peers.active.len() {
            n += self.pump(self.st.peers.active[i]);
        }
        n
    }

    /// Hand the peer's pending packets to its BTLs until one refuses.
    fn pump(&mut self, p: Rank) -> usize {
        let now = self.st.now;
        let peer = &mut self.st.peers[p as usize];
        let mut n = 0;
        while let Some(t) = peer.stalled.take().or_else(|| peer.conn.poll_transmit(now)) {
            let result = match &t {
                Transmit::Ack { btl, bytes } => {
                    self.bml
                        .btl(*btl)
                        .send(p, DR_TAG, bytes, &[], SendHint::default())
                }
                Transmit::Data(d) => {
                    let Some(&PendingSend { buf, pattern, .. }) = peer.sends.get(&d.seq) else {
                        // A fragment held back by a full BTL (a probe or a retransmission) whose
                        // message the acknowledgements of the originals completed meanwhile:
                        // nothing is left to send, and nothing is left for the watchdog to wait
                        // for (a token left pending would fail a working path). An ack bundled
                        // with it still goes.
                        debug!(seq = d.seq, "held fragment of a completed message dropped");
                        peer.conn.local_complete(d.token);
                        peer.stalled = d.bundled_ack_alone();
                        continue;
                    };
                    let off = d.offset as usize;
                    let payload = &buf.as_slice()[off..off + d.len];
                    let header = d.seal(payload).expect("fragment range comes from the core");
                    let hint = SendHint {
                        pattern,
                        message_len: buf.len(),
                    };
                    self.bml.btl(d.btl).send(p, DR_TAG, &header, payload, hint)
                }
            };
            match result {
                Ok(()) => {
                    n += 1;
                    if let Transmit::Data(d) = &t {
                        peer.conn.local_complete(d.token);
                    }
                }
                Err(BtlSendError::WouldBlock) => {
                    peer.stalled = Some(t);
                    break;
                }
                Err(e) => {
                    debug!(peer = p, %e, "BTL refused a DR packet");
                    if let Transmit::Data(d) = &t {
                        peer.conn.local_failed(now, d.token);
                    }
                }
            }
        }
        n
    }

    fn new_request(&mut self, req: Req) -> RequestId {
        self.st.reqs.insert(req)
    }
}

impl State {
    fn place(&mut self, p: Rank, a: Arrival<'_>) {
        let now = self.now;
        let eager_limit = self.cfg.eager_limit;
        let peer = &mut self.peers[p as usize];
        let inc = peer.recvs.entry(a.seq).or_insert_with(|| Incoming {
            env: Envelope {
                context: a.m.ctx,
                source: p,
                tag: a.m.tag,
            },
            len: a.msg_len,
            rndv: false,
            staging: Vec::new(),
            staged_crcs: StagedCrcs::default(),
            e2e_corrupt: None,
            target: None,
            received: false,
        });
        let off = a.offset as usize;
        let end = off + a.payload.len();
        match inc.target {
            Some((_, buf)) if end <= buf.len() => {
                buf.write_at(off, a.payload);
                // Verify the bytes where they now live (DR's end-to-end check).
                let placed = &buf.as_slice()[off..end];
                let _ = peer.conn.placed(now, a.token, placed);
            }
            Some((_, buf)) => {
                // Truncated receive: verify the packet, then keep what fits.
                let payload = a.payload;
                if peer.conn.placed(now, a.token, payload).is_ok() && off < buf.len() {
                    buf.write_at(off, &payload[..buf.len() - off]);
                }
            }
            None => {
                let cap = (inc.len.min(eager_limit)) as usize;
                if end > cap {
                    // Only the RNDV vfrag precedes the match, and it fits the eager limit.
                    self.dropped += 1;
                    peer.conn.abandon(a.token);
                    return;
                }
                if inc.staging.len() < cap {
                    inc.staging.resize(cap, 0);
                }
                inc.staging[off..end].copy_from_slice(a.payload);
                let crc = a.payload_crc();
                let ok = peer
                    .conn
                    .placed(now, a.token, &inc.staging[off..end])
                    .is_ok();
                if let (true, Some(crc), Csum::EndToEnd) = (ok, crc, self.cfg.csum) {
                    inc.staged_crcs.record(off as u64, (end - off) as u32, crc);
                }
            }
        }
    }

    fn complete(&mut self, id: RequestId, status: Status) {
        match self.reqs.get_mut(id) {
            Some(Req::Send { status: s }) | Some(Req::Recv { status: s, .. }) => *s = Some(status),
            None => warn!(?id, "completion for an unknown request"),
        }
        self.unawait(id);
    }

    /// A receive queued for a specific peer left the queue (matched, failed or cancelled).
    fn unawait(&mut self, id: RequestId) {
        if let Some(Req::Recv { awaits, .. }) = self.reqs.get_mut(id) {
            if let Some(p) = awaits.take() {
                let n = &mut self.awaiting[p as usize];
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.peers[p as usize].conn.set_interest(self.now, false);
                }
            }
        }
    }

    /// The status of a received message (failed if its end-to-end check failed).
    fn received_status(inc: &Incoming, buf_len: usize) -> Status {
        let error = inc.e2e_corrupt.map(|fragments| StatusError::Corrupted {
            peer: inc.env.source,
            fragments,
        });
        Self::recv_status(&inc.env, inc.len, buf_len, error)
    }

    fn recv_status(env: &Envelope, len: u64, buf_len: usize, error: Option<StatusError>) -> Status {
        let received = (len as usize).min(buf_len);
        let error = error.or_else(|| {
            (len as usize > buf_len).then_some(StatusError::Truncated {
                message_len: len as usize,
                received,
            })
        });
        Status {
            source: env.source,
            tag: env.tag,
            len: received,
            error: error.map(Box::new),
        }
    }

    /// A posted receive `req` matched message `seq` from `p`.
    fn bind(&mut self, req: RequestId, p: Rank, seq: MsgSeq) {
        let now = self.now;
        let buf = match self.reqs.get(req) {
            Some(Req::Recv { args, .. }) => args.buf,
            _ => return,
        };
        self.unawait(req);
        let peer = &mut self.peers[p as usize];
        let Some(inc) = peer.recvs.get_mut(&seq) else {
            // The message was lost with its peer before we got to it.
            let reason = peer.dead.clone().unwrap_or_else(|| "message lost".into());
            let st = Status::failed(p, 0, 0, StatusError::PeerFailed { peer: p, reason });
            self.complete(req, st);
            return;
        };
        let mut corrupt = None;
        if !inc.staging.is_empty() {
            // End-to-end: check the bytes where the application will read them. The staging
            // buffer was verified, so a mismatch is a bad copy: those bytes are copied once more.
            let mut target = buf;
            match copy_checked(&mut target, &inc.staging, &inc.staged_crcs) {
                CopyOutcome::Clean => {}
                CopyOutcome::Recopied { fragments } => {
                    self.e2e_failures += fragments as u64;
                    warn!(
                        peer = p,
                        seq,
                        fragments,
                        "end-to-end checksum failed in the receive buffer; copied again"
                    );
                }
                CopyOutcome::Corrupt { failed, still } => {
                    self.e2e_failures += failed as u64;
                    warn!(
                        peer = p,
                        seq,
                        fragments = still,
                        "end-to-end checksum still failing in the receive buffer after a second copy"
                    );
                    corrupt = Some(still);
                }
            }
            inc.staging = Vec::new();
            inc.staged_crcs = StagedCrcs::default();
        }
        // The memory does not keep what is written to it: nothing a retransmission fixes. The
        // receive still takes the rest of the message (the sender is owed its acks), then fails.
        inc.e2e_corrupt = corrupt;
        inc.target = Some((req, buf));
        if inc.rndv {
            peer.conn.matched(now, seq);
        }
        if inc.received {
            let inc = peer.recvs.remove(&seq).expect("present");
            let st = Self::received_status(&inc, buf.len());
            self.complete(req, st);
        }
    }

    /// Turns the connection's events into matches and completions. Without the BML (while
    /// it delivers packets) a BTL failover is left in `route_failures` for the caller.
    fn handle_events(&mut self, p: Rank, mut bml: Option<&mut Bml>) -> usize {
        let mut n = 0;
        while let Some(ev) = self.peers[p as usize].conn.poll_event() {
            n += 1;
            match ev {
                Event::IncomingMessage { seq, m, len, rndv } => {
                    let env = Envelope {
                        context: m.ctx,
                        source: p,
                        tag: m.tag,
                    };
                    let peer = &mut self.peers[p as usize];
                    let inc = peer.recvs.entry(seq).or_insert_with(|| Incoming {
                        env,
                        len,
                        rndv,
                        staging: Vec::new(),
                        staged_crcs: StagedCrcs::default(),
                        e2e_corrupt: None,
                        target: None,
                        received: false,
                    });
                    inc.rndv = rndv;
                    let ctx_seq = self.rx_ctx_seq.entry((p, m.ctx)).or_insert(0);
                    let s = *ctx_seq;
                    *ctx_seq = ctx_seq.wrapping_add(1);
                    match self.matcher.arrive(env, s, || (p, seq)) {
                        MatchArrival::Matched(req) => self.bind(req, p, seq),
                        MatchArrival::Unexpected | MatchArrival::Held => {}
                        MatchArrival::Stale => warn!(peer = p, seq, "stale match sequence"),
                    }
                    while let Some(r) = self.matcher.poll_released() {
                        let (rp, rseq) = r.payload;
                        self.bind(r.recv, rp, rseq);
                    }
                }
                Event::MessageReceived { seq } => {
                    let peer = &mut self.peers[p as usize];
                    if let Some(inc) = peer.recvs.get_mut(&seq) {
                        inc.received = true;
                        if let Some((req, buf)) = inc.target {
                            let inc = peer.recvs.remove(&seq).expect("present");
                            let st = Self::received_status(&inc, buf.len());
                            self.complete(req, st);
                        }
                    }
                }
                Event::SendComplete { seq } => {
                    if let Some(sent) = self.peers[p as usize].sends.remove(&seq) {
                        if let Some(c) = sent.copy {
                            self.copies.free(c);
                        }
                        if let Some(req) = sent.req {
                            let status = Status {
                                source: p,
                                tag: sent.tag,
                                len: sent.buf.len(),
                                error: None,
                            };
                            self.complete(req, status);
                        }
                    }
                }
                Event::SendFailed { seq, reason } => {
                    let Some(lost) = self.peers[p as usize].sends.remove(&seq) else {
                        continue;
                    };
                    if let Some(c) = lost.copy {
                        self.copies.free(c);
                    }
                    if lost.req.is_none() {
                        // Completed locally (copied): the loss surfaces on the next operation
                        // with this peer, as for any eager send whose peer dies after it.
                        warn!(
                            peer = p,
                            seq,
                            len = lost.buf.len(),
                            %reason,
                            "a locally completed small send was never acknowledged"
                        );
                    }
                    if let Some(req) = lost.req {
                        let tag = lost.tag;
                        let err = StatusError::PeerFailed {
                            peer: p,
                            reason: reason.to_string(),
                        };
                        self.complete(req, Status::failed(p, tag, 0, err));
                    }
                }
                Event::RecvFailed { seq, reason } => {
                    let peer = &mut self.peers[p as usize];
                    if let Some(inc) = peer.recvs.remove(&seq) {
                        if let Some((req, buf)) = inc.target {
                            let err = StatusError::PeerFailed {
                                peer: p,
                                reason: reason.to_string(),
                            };
                            let st = Self::recv_status(&inc.env, 0, buf.len(), Some(err));
                            self.complete(req, st);
                        }
                    }
                }
                Event::BtlFailed { btl, reason } => {
                    warn!(
                        peer = p,
                        btl,
                        ?reason,
                        "pml dr: BTL failed for peer, failing over"
                    );
                    match bml.as_deref_mut() {
                        Some(b) => {
                            b.remove_route(p, btl);
                        }
                        None => self.route_failures.push((p, btl)),
                    }
                }
                Event::PeerDead { reason } => {
                    warn!(peer = p, %reason, "pml dr: peer declared dead");
                    self.peers[p as usize].dead = Some(reason.to_string());
                    for req in self.matcher.take_posted_from(p) {
                        let err = StatusError::PeerFailed {
                            peer: p,
                            reason: reason.to_string(),
                        };
                        self.complete(req, Status::failed(p, 0, 0, err));
                    }
                }
            }
        }
        n
    }
}

impl State {
    /// Splits an ack bundled in front of data off the fragment and keeps it for a later
    /// progress pass; returns the data packet (or the fragment as it is, when it is no bundle).
    /// The data is then delivered without waiting for the ack's bookkeeping (the acknowledged
    /// message's state freed, an RTT sample, loss detection: a third of a bundled arrival's
    /// instructions), which runs while the application waits for its next message. To the
    /// connection the ack merely arrives a little after the data, as the network may reorder
    /// them. One ack is kept per peer: an earlier one still kept is handled now.
    fn defer_bundled_ack<'a>(&mut self, p: Rank, btl: BtlIndex, data: &'a [u8]) -> &'a [u8] {
        let (ack, Some(rest)) = split_bundle(data) else {
            return data;
        };
        let mut bytes = [0u8; ACK_LEN];
        bytes.copy_from_slice(ack);
        let peer = &mut self.peers[p as usize];
        if let Some((b, old)) = peer.deferred_ack.replace((btl, bytes)) {
            let _ = peer.conn.handle_packet(self.now, b, &old);
        }
        rest
    }
}

impl BmlEvents for State {
    fn recv(&mut self, btl: BtlIndex, peer: Rank, tag: BtlTag, data: &[u8]) {
        if tag != DR_TAG || peer as usize >= self.peers.len() {
            self.dropped += 1;
            return;
        }
        if !self.clock_fresh {
            // Arrivals are timed (RTT samples, ack delays) with a fresh reading.
            self.now = Instant::now();
            self.clock_fresh = true;
        }
        let now = self.now;
        self.peers.ensure(now, peer);
        let data = self.defer_bundled_ack(peer, btl, data);
        if let Some(a) = self.peers[peer as usize].conn.handle_packet(now, btl, data) {
            // A new message is announced by the packet that starts it: match it first, so
            // that a receive posted for it gets the bytes in place (not through a staging
            // buffer allocated, copied into and freed).
            self.handle_events(peer, None);
            self.place(peer, a);
        }
    }

    fn rdma_complete(
        &mut self,
        _btl: BtlIndex,
        _token: CompletionToken,
        _result: Result<(), BtlSendError>,
    ) {
        // DR never issues RDMA: every byte travels in acknowledged fragments.
    }

    fn peer_failed(&mut self, btl: BtlIndex, peer: Rank, reason: &str) {
        if (peer as usize) < self.peers.len() {
            warn!(peer, btl, reason, "BTL reports path failure");
            self.peers.ensure(self.now, peer);
            self.peers[peer as usize].conn.btl_failed(self.now, btl);
        }
    }
}

impl Pml for Dr {
    fn component_name(&self) -> &str {
        "dr"
    }

    fn isend(&mut self, args: SendArgs) -> Result<RequestId, PmlError> {
        let size = self.st.peers.len() as u32;
        if args.dest >= size {
            return Err(PmlError::BadRank {
                rank: args.dest,
                size,
            });
        }
        if args.tag < 0 {
            return Err(PmlError::BadTag(args.tag));
        }
        self.st.now = Instant::now();
        let me = self.st.me;
        self.st.peers.ensure(self.st.now, args.dest);
        let peer = &mut self.st.peers[args.dest as usize];
        let m = MatchFields {
            ctx: args.context,
            src: me,
            tag: args.tag,
        };
        let sync = args.mode == SendMode::Synchronous;
        let result = peer
            .conn
            .send_message_with(self.st.now, m, args.buf.len() as u64, sync);
        let id = self.new_request(Req::Send { status: None });
        match result {
            Ok(seq) => {
                // A small standard send is copied and completes now: its acknowledgement (a
                // round trip later) then only frees the copy, as an eager send of ob1 does.
                let len = args.buf.len();
                // Not under end-to-end checksums: they are computed over the user's buffer.
                let copy =
                    if !sync && len <= self.st.cfg.eager_copy && self.st.cfg.csum != Csum::EndToEnd
                    {
                        self.st.copies.alloc()
                    } else {
                        None
                    };
                let (req, buf) = match &copy {
                    Some(c) => {
                        let dst = &mut self.st.copies.bytes_mut(c)[..len];
                        dst.copy_from_slice(args.buf.as_slice());
                        let st = Status {
                            source: args.dest,
                            tag: args.tag,
                            len,
                            error: None,
                        };
                        self.st.complete(id, st);
                        let copied = &self.st.copies.bytes(c)[..len];
                        // SAFETY: the slab never moves while the pool lives, and this slot is
                        // not reused before the acknowledgement that frees it, which ends
                        // every use of the fragment's buffer.
                        #[allow(unsafe_code)]
                        let buf = unsafe { UserBuf::from_slice(copied) };
                        (None, buf)
                    }
                    None => (Some(id), args.buf),
                };
                self.st.peers[args.dest as usize].sends.insert(
                    seq,
                    PendingSend {
                        req,
                        buf,
                        tag: args.tag,
                        pattern: args.pattern,
                        copy,
                    },
                );
                self.pump(args.dest);
            }
            Err(e) => {
                let err = StatusError::PeerFailed {
                    peer: args.dest,
                    reason: e.to_string(),
                };
                let st = Status::failed(args.dest, args.tag, 0, err);
                self.st.complete(id, st);
            }
        }
        Ok(id)
    }

    fn irecv(&mut self, args: RecvArgs) -> Result<RequestId, PmlError> {
        let size = self.st.peers.len() as u32;
        if let Source::Rank(r) = args.source {
            if r >= size {
                return Err(PmlError::BadRank { rank: r, size });
            }
        }
        if let TagSel::Tag(t) = args.tag {
            if t < 0 {
                return Err(PmlError::BadTag(t));
            }
        }
        self.st.now = Instant::now();
        let id = self.new_request(Req::Recv {
            args,
            status: None,
            awaits: None,
        });
        match self
            .st
            .matcher
            .post(args.context, args.source, args.tag, id)
        {
            Posted::Matched(_env, (p, seq)) => {
                self.st.bind(id, p, seq);
                self.pump(p);
            }
            Posted::Queued => {
                if let Source::Rank(r) = args.source {
                    self.st.peers.ensure(self.st.now, r);
                    if let Some(reason) = self.st.peers[r as usize].dead.clone() {
                        self.st.matcher.cancel(args.context, &id);
                        let err = StatusError::PeerFailed { peer: r, reason };
                        self.st.complete(id, Status::failed(r, 0, 0, err));
                    } else {
                        if let Some(Req::Recv { awaits, .. }) = self.st.reqs.get_mut(id) {
                            *awaits = Some(r);
                        }
                        self.st.awaiting[r as usize] += 1;
                        let now = self.st.now;
                        self.st.peers[r as usize].conn.set_interest(now, true);
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
        self.progress();
        Ok(self
            .st
            .matcher
            .probe(context, source, tag)
            .map(|(env, &(p, seq))| {
                let len = self.st.peers[p as usize]
                    .recvs
                    .get(&seq)
                    .map_or(0, |i| i.len as usize);
                Status {
                    source: env.source,
                    tag: env.tag,
                    len,
                    error: None,
                }
            }))
    }

    fn improbe(
        &mut self,
        context: ContextId,
        source: Source,
        tag: TagSel,
    ) -> Result<Option<(MessageId, Status)>, PmlError> {
        let size = self.st.peers.len() as u32;
        if let Source::Rank(r) = source {
            if r >= size {
                return Err(PmlError::BadRank { rank: r, size });
            }
        }
        self.progress();
        let Some((env, (p, seq))) = self.st.matcher.take(context, source, tag) else {
            return Ok(None);
        };
        let len = self.st.peers[p as usize]
            .recvs
            .get(&seq)
            .map_or(0, |i| i.len as usize);
        let id = self.st.next_message;
        self.st.next_message += 1;
        self.st.matched.insert(id, (env, p, seq));
        Ok(Some((MessageId(id), Status::ok(env.source, env.tag, len))))
    }

    fn imrecv(
        &mut self,
        message: MessageId,
        buf: UserBuf,
        pattern: CommPattern,
    ) -> Result<RequestId, PmlError> {
        let Some((env, p, seq)) = self.st.matched.remove(&message.0) else {
            return Err(PmlError::Other(format!(
                "unknown message {message:?} (not taken by a matched probe, or received already)"
            )));
        };
        self.st.now = Instant::now();
        let args = RecvArgs {
            buf,
            source: Source::Rank(env.source),
            tag: TagSel::Tag(env.tag),
            context: env.context,
            pattern,
        };
        let id = self.new_request(Req::Recv {
            args,
            status: None,
            awaits: None,
        });
        // As a receive posted when the message was unexpected: the data (or the rest of a
        // rendezvous) moves from now on.
        self.st.bind(id, p, seq);
        self.pump(p);
        Ok(id)
    }

    fn test(&mut self, request: RequestId) -> Result<Option<Status>, PmlError> {
        let mut entry = self
            .st
            .reqs
            .entry(request)
            .ok_or(PmlError::UnknownRequest(request))?;
        let (Req::Send { status } | Req::Recv { status, .. }) = entry.get_mut();
        if status.is_none() {
            return Ok(None);
        }
        let (Req::Send { status } | Req::Recv { status, .. }) = entry.remove();
        Ok(status)
    }

    fn cancel(&mut self, request: RequestId) -> Result<bool, PmlError> {
        let ctx = match self.st.reqs.get(request) {
            None => return Err(PmlError::UnknownRequest(request)),
            Some(Req::Send { .. }) => return Ok(false),
            Some(Req::Recv { args, status, .. }) => {
                if status.is_some() {
                    return Ok(false);
                }
                args.context
            }
        };
        if self.st.matcher.cancel(ctx, &request) {
            let st = Status::failed(0, 0, 0, StatusError::Cancelled);
            self.st.complete(request, st);
            return Ok(true);
        }
        Ok(false)
    }

    fn progress(&mut self) -> usize {
        self.st.clock_fresh = false;
        self.st.passes = self.st.passes.wrapping_add(1);
        let mut n = self.bml.progress(&mut self.st);
        for (p, btl) in std::mem::take(&mut self.st.route_failures) {
            self.bml.remove_route(p, btl);
        }
        if !self.st.clock_fresh && (n > 0 || self.st.passes.is_multiple_of(CLOCK_EVERY)) {
            self.st.now = Instant::now();
        }
        let now = self.st.now;
        // A pass that delivered something leaves the timers to the next pass (never two passes
        // in a row): recomputing a changed connection's deadline (~570 instructions) then
        // happens while the application waits for its next message, not between an arrival
        // and the application seeing it. Every timer is at least `pml_dr_ack_hold_us` (20 us
        // by default) long, against a pass of a few microseconds.
        let timers = n == 0 || self.st.timers_deferred;
        self.st.timers_deferred = !timers;
        for i in 0..self.st.peers.active.len() {
            let p = self.st.peers.active[i];
            let peer = &mut self.st.peers[p as usize];
            // Bundled acks kept by a delivering pass, handled before the timers they may stop.
            if let (true, Some((btl, ack))) = (timers, peer.deferred_ack.as_ref()) {
                let _ = peer.conn.handle_packet(now, *btl, ack);
                peer.deferred_ack = None;
            }
            let conn = &mut peer.conn;
            if timers && conn.poll_timeout().is_some_and(|t| t <= now) {
                conn.handle_timeout(now);
            }
            n += self.st.handle_events(p, Some(&mut self.bml));
        }
        n += self.pump_all();
        // Acks and matches produced while handling events go out in this same pass.
        for i in 0..self.st.peers.active.len() {
            n += self
                .st
                .handle_events(self.st.peers.active[i], Some(&mut self.bml));
        }
        n
    }

    fn peer_btls(&self) -> Vec<Vec<String>> {
        (0..self.bml.peer_count() as Rank)
            .map(|p| self.bml.route_names(p))
            .collect()
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let mut sum = Counters::default();
        for &p in &self.st.peers.active {
            sum.add(&self.st.peers[p as usize].conn.counters());
        }
        let srtt_max = sum.srtt.as_micros() as u64;
        let mut v = vec![
            ("pml.dr.frags_sent".to_owned(), sum.frags_sent),
            ("pml.dr.retransmissions".to_owned(), sum.retransmissions),
            (
                "pml.dr.spurious_retransmissions".to_owned(),
                sum.spurious_retransmissions,
            ),
            ("pml.dr.lost".to_owned(), sum.lost),
            ("pml.dr.frags_received".to_owned(), sum.frags_received),
            ("pml.dr.duplicates".to_owned(), sum.duplicates),
            ("pml.dr.duplicate_acks".to_owned(), sum.duplicate_acks),
            ("pml.dr.csum_failures".to_owned(), sum.csum_failures),
            ("pml.dr.e2e_failures".to_owned(), self.st.e2e_failures),
            (
                "pml.dr.malformed".to_owned(),
                sum.malformed + self.st.dropped,
            ),
            ("pml.dr.refused".to_owned(), sum.refused),
            ("pml.dr.timeouts".to_owned(), sum.timeouts),
            (
                "pml.dr.watchdog_expirations".to_owned(),
                sum.watchdog_expirations,
            ),
            ("pml.dr.failovers".to_owned(), sum.failovers),
            ("pml.dr.acks_sent".to_owned(), sum.acks_sent),
            ("pml.dr.nacks_sent".to_owned(), sum.nacks_sent),
            ("pml.dr.acks_bundled".to_owned(), sum.acks_bundled),
            ("pml.dr.acks_received".to_owned(), sum.acks_received),
            ("pml.dr.nacks_received".to_owned(), sum.nacks_received),
            ("pml.dr.pings_sent".to_owned(), sum.pings_sent),
            ("pml.dr.pongs_sent".to_owned(), sum.pongs_sent),
            ("pml.dr.srtt_max_us".to_owned(), srtt_max),
        ];
        v.extend(self.bml.counters());
        v
    }

    fn finalize(&mut self) -> Result<(), PmlError> {
        // No linger loop here: the runtime's finalize fence keeps every rank progressing until
        // all ranks arrived, and a rank arrives only once all its sends were acknowledged, so no
        // peer can still need an ack from us. Progressing now would only see peers tearing down.
        self.bml.finalize();
        Ok(())
    }
}
