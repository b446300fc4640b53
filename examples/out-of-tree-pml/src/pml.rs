//! The I/O edge of pml-sw: [`Sw`] implements the framework's [`Pml`] over the BML, with one
//! [`Connection`] per peer (created on first use). It reads the clock once per progress pass,
//! hands every frame that arrives to its connection, sends what the connections ask for, and
//! turns MPI calls into records carried by the connections' reliable, ordered streams.
//!
//! Records (one per fragment, the first byte says which):
//! ```text
//! MSG    1, context u32, tag i32, length u64, sync u8, send id u64, then the first bytes
//! MORE   2, then the next bytes of the message being received from this peer
//! SYNCED 3, send id u64: the synchronous send `send id` was received
//! ```
//! A message's fragments follow each other on the stream, so MORE needs no offset, and the
//! per-(context, sender) order the matching engine wants is the arrival order (counted here:
//! the engine never holds anything).
//!
//! Deliberately simple, as a starting point: every message is eager (no rendezvous, so an
//! unexpected message is staged whole in memory), a standard send completes when the peer has
//! acknowledged its last fragment, a synchronous one when the peer says it received it (SYNCED),
//! and each peer uses its first eager BTL, moving to the next one if that BTL fails.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use rmca_framework::bml::{Bml, BmlEvents, BtlIndex};
use rmca_framework::btl::CommPattern;
use rmca_framework::btl::{tags, BtlTag, CompletionToken, SendError as BtlSendError, SendHint};
use rmca_framework::buffer::UserBuf;
use rmca_framework::matching::{Arrival, Envelope, Matcher, Posted, Seq as MatchSeq};
use rmca_framework::pml::{
    ContextId, MessageId, Pml, PmlError, RecvArgs, RequestId, SendArgs, SendMode, Source, Status,
    StatusError, TagSel,
};
use rmca_framework::rank::Rank;
use tracing::{debug, warn};

use crate::conn::{Config, Connection, Counters};
use crate::wire::{self, seq_lt, Seq};

/// The BTL tag of every pml-sw frame: the first one free for third-party PMLs.
pub const SW_TAG: BtlTag = tags::USER_BASE;

const MSG: u8 = 1;
const MORE: u8 = 2;
const SYNCED: u8 = 3;
/// Bytes of a MSG record before the message's bytes.
const MSG_HEADER: usize = 1 + 4 + 4 + 8 + 1 + 8;

/// A message being cut into fragments.
#[derive(Debug)]
struct OutMsg {
    req: RequestId,
    buf: UserBuf,
    context: ContextId,
    tag: i32,
    sync: bool,
    /// Bytes already handed to the connection (`None`: not even the MSG record).
    sent: Option<usize>,
}

/// A message arriving (or arrived) from a peer, until a receive takes all of it.
#[derive(Debug)]
struct InMsg {
    env: Envelope,
    len: usize,
    /// The sender's send id, if it waits for SYNCED.
    sync: Option<u64>,
    received: usize,
    /// Bytes that arrived before a receive matched.
    staging: Vec<u8>,
    /// The matched receive and its buffer.
    target: Option<(RequestId, UserBuf)>,
}

#[derive(Debug)]
struct Peer {
    conn: Connection,
    /// The BTL carrying this peer's frames.
    btl: BtlIndex,
    /// Records to send before any message fragment (SYNCED).
    control: VecDeque<Vec<u8>>,
    outgoing: VecDeque<OutMsg>,
    /// A frame the BTL refused with WouldBlock, offered again first.
    stalled: Option<Vec<u8>>,
    /// Standard sends whose last fragment is `Seq`: complete once it is acknowledged.
    unacked: VecDeque<(Seq, RequestId)>,
    /// The message whose fragments are arriving (its key in [`State::incoming`]).
    current: Option<u64>,
    /// Next matching sequence number of a message from this peer, per context.
    rx_seq: HashMap<ContextId, MatchSeq>,
    dead: Option<String>,
}

#[derive(Debug)]
enum Req {
    Send {
        peer: Rank,
        tag: i32,
        len: usize,
        status: Option<Status>,
    },
    Recv {
        context: ContextId,
        buf: UserBuf,
        status: Option<Status>,
    },
}

/// Everything but the BML, so that the BML can deliver its events into it.
#[derive(Debug)]
struct State {
    cfg: Config,
    nprocs: usize,
    /// Each peer's first eager BTL and the largest frame it carries (read at init).
    routes: Vec<(BtlIndex, usize)>,
    peers: Vec<Option<Box<Peer>>>,
    /// Peers with a connection, in creation order (the progress loop walks these).
    active: Vec<Rank>,
    matcher: Matcher<RequestId, u64>,
    incoming: HashMap<u64, InMsg>,
    next_incoming: u64,
    /// Messages taken by a matched probe, waiting for `imrecv`.
    probed: HashSet<u64>,
    reqs: HashMap<RequestId, Req>,
    next_req: u64,
    /// Synchronous sends waiting for SYNCED, by send id.
    sync_waits: HashMap<u64, RequestId>,
    /// BTL failures reported during a BML progress call, handled after it.
    route_failures: Vec<(Rank, BtlIndex, String)>,
    /// Frames or records dropped here (wrong tag, unknown peer, malformed record).
    dropped: u64,
    now: Instant,
}

/// The pml-sw instance of one process.
#[derive(Debug)]
pub struct Sw {
    bml: Bml,
    st: State,
}

impl Sw {
    /// A PML over `bml`. Every peer's BTL must carry a frame header, a MSG record header and at
    /// least one byte.
    pub fn new(bml: Bml, cfg: Config) -> Result<Self, PmlError> {
        cfg.validate().map_err(|e| PmlError::Init(e.to_string()))?;
        let nprocs = bml.peer_count();
        let mut routes = Vec::with_capacity(nprocs);
        for peer in 0..nprocs as Rank {
            let Some(route) = bml.routes(peer).eager.first() else {
                return Err(PmlError::Init(format!("no BTL reaches rank {peer}")));
            };
            let btl = bml.btl_ref(route.btl);
            let max = btl.attributes().max_send_size;
            if max <= wire::HEADER_LEN + MSG_HEADER {
                return Err(PmlError::Init(format!(
                    "btl {} carries fragments of at most {max} bytes; pml sw needs more than {}",
                    btl.component_name(),
                    wire::HEADER_LEN + MSG_HEADER
                )));
            }
            routes.push((route.btl, max));
        }
        Ok(Self {
            st: State {
                cfg,
                nprocs,
                routes,
                peers: (0..nprocs).map(|_| None).collect(),
                active: Vec::new(),
                matcher: Matcher::new(nprocs),
                incoming: HashMap::new(),
                next_incoming: 0,
                probed: HashSet::new(),
                reqs: HashMap::new(),
                next_req: 1,
                sync_waits: HashMap::new(),
                route_failures: Vec::new(),
                dropped: 0,
                now: Instant::now(),
            },
            bml,
        })
    }

    /// Feed `p`'s connection with records, send its frames, complete what was acknowledged.
    /// Returns the frames sent.
    fn pump(&mut self, p: Rank) -> usize {
        let st = &mut self.st;
        let Some(peer) = st.peers[p as usize].as_deref_mut() else {
            return 0;
        };
        if peer.dead.is_some() {
            return 0;
        }
        // Cut records while the window has room: control first, then message fragments.
        while peer.conn.has_room() {
            if let Some(r) = peer.control.pop_front() {
                peer.conn
                    .send(r)
                    .expect("room checked, record smaller than a fragment");
                continue;
            }
            let Some(m) = peer.outgoing.front_mut() else {
                break;
            };
            let record = next_fragment(m, peer.conn.config().max_payload);
            let seq = peer
                .conn
                .send(record)
                .expect("room checked, cut to the payload size");
            if m.sent == Some(m.buf.len()) {
                // Its last fragment: the send completes on its ack, or on SYNCED.
                let m = peer.outgoing.pop_front().expect("the front message");
                if m.sync {
                    st.sync_waits.insert(m.req.0, m.req);
                } else {
                    peer.unacked.push_back((seq, m.req));
                }
            }
        }
        // Send: a stalled frame first, then whatever the connection wants out.
        let mut sent = 0;
        let hint = SendHint {
            pattern: CommPattern::NonBlocking,
            message_len: 0,
        };
        while let Some(frame) = peer
            .stalled
            .take()
            .or_else(|| peer.conn.poll_transmit(st.now))
        {
            match self.bml.btl(peer.btl).send(p, SW_TAG, &frame, &[], hint) {
                Ok(()) => sent += 1,
                Err(BtlSendError::WouldBlock) => {
                    peer.stalled = Some(frame);
                    break;
                }
                Err(e) => {
                    // The frame is kept: the next BTL (if any) sends it.
                    peer.stalled = Some(frame);
                    st.route_failures.push((p, peer.btl, e.to_string()));
                    break;
                }
            }
        }
        // Standard sends whose last fragment the peer acknowledged.
        let acked = peer.conn.acked_through();
        let mut done = Vec::new();
        while let Some(&(seq, req)) = peer.unacked.front() {
            if !seq_lt(seq, acked) {
                break;
            }
            peer.unacked.pop_front();
            done.push(req);
        }
        let failure = peer.conn.failure().map(|e| e.to_string());
        for req in done {
            st.complete_send(req, None);
        }
        if let Some(reason) = failure {
            st.fail_peer(p, &reason);
        }
        sent
    }

    /// Apply the BTL failures noted during progress: move the peer to its next BTL, or fail it.
    fn handle_route_failures(&mut self) {
        for (p, btl, reason) in std::mem::take(&mut self.st.route_failures) {
            let Some(peer) = self.st.peers[p as usize].as_deref_mut() else {
                continue;
            };
            if peer.btl != btl {
                continue; // already moved
            }
            if self.bml.remove_route(p, btl) {
                peer.btl = self.bml.routes(p).eager[0].btl;
                warn!(
                    peer = p,
                    "pml-sw: btl failed ({reason}); moving to the next one"
                );
            } else {
                self.st
                    .fail_peer(p, &format!("its last BTL failed: {reason}"));
            }
        }
    }

    fn check_rank(&self, rank: Rank) -> Result<(), PmlError> {
        if (rank as usize) < self.st.nprocs {
            Ok(())
        } else {
            Err(PmlError::BadRank {
                rank,
                size: self.st.nprocs as u32,
            })
        }
    }
}

/// The next record of message `m`: its MSG record, or a MORE one; as many bytes as fit.
fn next_fragment(m: &mut OutMsg, max_payload: usize) -> Vec<u8> {
    let mut r = Vec::with_capacity(max_payload);
    let from = match m.sent {
        None => {
            r.push(MSG);
            r.extend_from_slice(&m.context.to_le_bytes());
            r.extend_from_slice(&m.tag.to_le_bytes());
            r.extend_from_slice(&(m.buf.len() as u64).to_le_bytes());
            r.push(u8::from(m.sync));
            r.extend_from_slice(&m.req.0.to_le_bytes());
            0
        }
        Some(n) => {
            r.push(MORE);
            n
        }
    };
    let take = (max_payload - r.len()).min(m.buf.len() - from);
    r.extend_from_slice(&m.buf.as_slice()[from..from + take]);
    m.sent = Some(from + take);
    r
}

/// The fields of a MSG record.
#[derive(Debug, PartialEq, Eq)]
struct MsgHeader {
    context: ContextId,
    tag: i32,
    len: u64,
    /// The sender's send id, if it is a synchronous send.
    sync: Option<u64>,
}

/// A MSG record's header, and the message's first bytes after it.
fn parse_msg(r: &[u8]) -> Option<(MsgHeader, &[u8])> {
    if r.len() < MSG_HEADER {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes(r[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().expect("8 bytes"));
    let sync = match r[17] {
        0 => None,
        1 => Some(u64_at(18)),
        _ => return None,
    };
    let header = MsgHeader {
        context: u32_at(1),
        tag: u32_at(5) as i32,
        len: u64_at(9),
        sync,
    };
    Some((header, &r[MSG_HEADER..]))
}

impl State {
    /// `p`'s connection, created on first use (a send to, a receive from, or a frame from it).
    fn peer(&mut self, p: Rank) -> &mut Peer {
        if self.peers[p as usize].is_none() {
            let (btl, max_frame) = self.routes[p as usize];
            let cfg = Config {
                max_payload: max_frame - wire::HEADER_LEN,
                ..self.cfg.clone()
            };
            let conn = Connection::new(cfg).expect("config and frame size checked at init");
            self.peers[p as usize] = Some(Box::new(Peer {
                conn,
                btl,
                control: VecDeque::new(),
                outgoing: VecDeque::new(),
                stalled: None,
                unacked: VecDeque::new(),
                current: None,
                rx_seq: HashMap::new(),
                dead: None,
            }));
            self.active.push(p);
        }
        self.peers[p as usize]
            .as_deref_mut()
            .expect("created just above")
    }

    fn new_req(&mut self, req: Req) -> RequestId {
        let id = RequestId(self.next_req);
        self.next_req += 1;
        self.reqs.insert(id, req);
        id
    }

    fn complete_send(&mut self, id: RequestId, error: Option<StatusError>) {
        if let Some(Req::Send {
            peer,
            tag,
            len,
            status,
        }) = self.reqs.get_mut(&id)
        {
            *status = Some(match error {
                None => Status::ok(*peer, *tag, *len),
                Some(e) => Status::failed(*peer, *tag, *len, e),
            });
        }
    }

    fn complete_recv(&mut self, id: RequestId, status: Status) {
        if let Some(Req::Recv { status: s, .. }) = self.reqs.get_mut(&id) {
            *s = Some(status);
        }
    }

    /// One record delivered (exactly once, in order) by `p`'s connection.
    fn on_record(&mut self, p: Rank, r: &[u8]) {
        match r.first() {
            Some(&MSG) => {
                let Some((
                    MsgHeader {
                        context,
                        tag,
                        len,
                        sync,
                    },
                    data,
                )) = parse_msg(r)
                else {
                    return self.malformed(p, "short or bad MSG record");
                };
                if self.peer(p).current.is_some() {
                    return self.malformed(p, "MSG before the previous message's end");
                }
                let Ok(len) = usize::try_from(len) else {
                    return self.malformed(p, "message length beyond this machine's memory");
                };
                let key = self.next_incoming;
                self.next_incoming += 1;
                let env = Envelope {
                    context,
                    source: p,
                    tag,
                };
                self.incoming.insert(
                    key,
                    InMsg {
                        env,
                        len,
                        sync,
                        received: 0,
                        staging: Vec::new(),
                        target: None,
                    },
                );
                // Its first bytes are staged before matching, so that a message whole in this
                // record (a short one) completes in `bind` like any other.
                self.peer(p).current = Some(key);
                self.append(p, key, data);
                let seq = {
                    let s = self.peer(p).rx_seq.entry(context).or_insert(0);
                    let now = *s;
                    *s = s.wrapping_add(1);
                    now
                };
                match self.matcher.arrive(env, seq, || key) {
                    Arrival::Matched(req) => self.bind(key, req),
                    Arrival::Unexpected | Arrival::Held => {}
                    Arrival::Stale => {
                        self.incoming.remove(&key);
                        warn!(peer = p, "pml-sw: a message was refused by matching");
                    }
                }
            }
            Some(&MORE) => match self.peer(p).current {
                Some(key) => self.append(p, key, &r[1..]),
                None => self.malformed(p, "MORE record outside a message"),
            },
            Some(&SYNCED) if r.len() == 9 => {
                let id = u64::from_le_bytes(r[1..9].try_into().expect("8 bytes"));
                match self.sync_waits.remove(&id) {
                    Some(req) => self.complete_send(req, None),
                    None => self.malformed(p, "SYNCED for no synchronous send"),
                }
            }
            _ => self.malformed(p, "unknown record"),
        }
    }

    fn malformed(&mut self, p: Rank, what: &str) {
        self.dropped += 1;
        warn!(peer = p, "pml-sw: dropped a record: {what}");
    }

    /// Bytes of message `key` arrived.
    fn append(&mut self, p: Rank, key: u64, data: &[u8]) {
        let Some(m) = self.incoming.get_mut(&key) else {
            return; // its receive failed meanwhile
        };
        if m.received + data.len() > m.len {
            return self.malformed(p, "more bytes than the message length");
        }
        match m.target {
            Some((_, buf)) => {
                let fits = buf.len().saturating_sub(m.received).min(data.len());
                buf.write_at(m.received.min(buf.len()), &data[..fits]);
            }
            None => m.staging.extend_from_slice(data),
        }
        m.received += data.len();
        if m.received == m.len {
            self.peer(p).current = None;
            self.try_finish(key);
        }
    }

    /// Receive `req` takes message `key`: what arrived so far moves into its buffer.
    fn bind(&mut self, key: u64, req: RequestId) {
        let Some(Req::Recv { buf, .. }) = self.reqs.get(&req) else {
            return;
        };
        let buf = *buf;
        let m = self.incoming.get_mut(&key).expect("bound messages exist");
        let fits = m.staging.len().min(buf.len());
        buf.write_at(0, &m.staging[..fits]);
        m.staging = Vec::new();
        m.target = Some((req, buf));
        self.try_finish(key);
    }

    /// Complete the receive of message `key` if it is matched and whole.
    fn try_finish(&mut self, key: u64) {
        let Some(m) = self.incoming.get(&key) else {
            return;
        };
        let Some((req, buf)) = m.target else { return };
        if m.received < m.len {
            return;
        }
        let m = self.incoming.remove(&key).expect("just looked at it");
        let status = if m.len > buf.len() {
            let e = StatusError::Truncated {
                message_len: m.len,
                received: buf.len(),
            };
            Status::failed(m.env.source, m.env.tag, buf.len(), e)
        } else {
            Status::ok(m.env.source, m.env.tag, m.len)
        };
        self.complete_recv(req, status);
        if let Some(id) = m.sync {
            let mut r = vec![SYNCED];
            r.extend_from_slice(&id.to_le_bytes());
            if let Some(peer) = self.peers[m.env.source as usize].as_deref_mut() {
                peer.control.push_back(r);
            }
        }
    }

    /// `p` is unreachable: every request involving it fails with `reason`.
    fn fail_peer(&mut self, p: Rank, reason: &str) {
        let peer = self.peer(p);
        if peer.dead.is_some() {
            return;
        }
        warn!(peer = p, "pml-sw: peer failed: {reason}");
        peer.dead = Some(reason.to_owned());
        peer.outgoing.clear();
        peer.unacked.clear();
        peer.control.clear();
        peer.stalled = None;
        let current = peer.current.take();
        let error = || StatusError::PeerFailed {
            peer: p,
            reason: reason.to_owned(),
        };
        let sends: Vec<RequestId> = self
            .reqs
            .iter()
            .filter(|(_, r)| matches!(r, Req::Send { peer, status: None, .. } if *peer == p))
            .map(|(id, _)| *id)
            .collect();
        for id in sends {
            self.complete_send(id, Some(error()));
        }
        self.sync_waits.retain(|_, req| {
            !matches!(
                self.reqs.get(req),
                Some(Req::Send {
                    status: Some(_),
                    ..
                })
            )
        });
        let mut recvs = self.matcher.take_posted_from(p);
        // A receive matched to the message cut short.
        if let Some(m) = current.and_then(|k| self.incoming.remove(&k)) {
            recvs.extend(m.target.map(|(req, _)| req));
        }
        for id in recvs {
            self.complete_recv(id, Status::failed(p, 0, 0, error()));
        }
    }
}

impl BmlEvents for State {
    fn recv(&mut self, _btl: BtlIndex, p: Rank, tag: BtlTag, data: &[u8]) {
        if p as usize >= self.nprocs {
            self.dropped += 1;
            return;
        }
        let now = self.now;
        let peer = self.peer(p);
        if tag != SW_TAG || peer.dead.is_some() {
            self.dropped += 1;
            return;
        }
        if let Err(e) = peer.conn.handle_frame(now, data) {
            debug!(peer = p, "pml-sw: dropped a frame: {e}");
        }
        let records: Vec<Vec<u8>> = std::iter::from_fn(|| peer.conn.poll_delivered()).collect();
        for r in records {
            self.on_record(p, &r);
        }
    }

    fn rdma_complete(&mut self, _: BtlIndex, _: CompletionToken, _: Result<(), BtlSendError>) {
        // pml-sw does no RDMA.
    }

    fn peer_failed(&mut self, btl: BtlIndex, p: Rank, reason: &str) {
        self.route_failures.push((p, btl, reason.to_owned()));
    }
}

impl Pml for Sw {
    fn component_name(&self) -> &str {
        "sw"
    }

    fn isend(&mut self, args: SendArgs) -> Result<RequestId, PmlError> {
        self.check_rank(args.dest)?;
        if args.tag < 0 {
            return Err(PmlError::BadTag(args.tag));
        }
        let peer = args.dest;
        self.st.peer(peer);
        let req = self.st.new_req(Req::Send {
            peer,
            tag: args.tag,
            len: args.buf.len(),
            status: None,
        });
        if let Some(reason) = self.st.peer(peer).dead.clone() {
            self.st
                .complete_send(req, Some(StatusError::PeerFailed { peer, reason }));
            return Ok(req);
        }
        self.st.peer(peer).outgoing.push_back(OutMsg {
            req,
            buf: args.buf,
            context: args.context,
            tag: args.tag,
            sync: args.mode == SendMode::Synchronous,
            sent: None,
        });
        self.pump(peer);
        Ok(req)
    }

    fn irecv(&mut self, args: RecvArgs) -> Result<RequestId, PmlError> {
        if let Source::Rank(r) = args.source {
            self.check_rank(r)?;
            self.st.peer(r);
        }
        if let TagSel::Tag(t) = args.tag {
            if t < 0 {
                return Err(PmlError::BadTag(t));
            }
        }
        let req = self.st.new_req(Req::Recv {
            context: args.context,
            buf: args.buf,
            status: None,
        });
        match self
            .st
            .matcher
            .post(args.context, args.source, args.tag, req)
        {
            Posted::Matched(_, key) => self.st.bind(key, req),
            Posted::Queued => {
                if let Source::Rank(r) = args.source {
                    if let Some(reason) = self.st.peer(r).dead.clone() {
                        self.st.matcher.cancel(args.context, &req);
                        let e = StatusError::PeerFailed { peer: r, reason };
                        self.st.complete_recv(req, Status::failed(r, 0, 0, e));
                    }
                }
            }
        }
        Ok(req)
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
            .st
            .matcher
            .probe(context, source, tag)
            .map(|(env, key)| Status::ok(env.source, env.tag, self.st.incoming[key].len)))
    }

    fn improbe(
        &mut self,
        context: ContextId,
        source: Source,
        tag: TagSel,
    ) -> Result<Option<(MessageId, Status)>, PmlError> {
        if let Source::Rank(r) = source {
            self.check_rank(r)?;
        }
        self.progress();
        Ok(self
            .st
            .matcher
            .take(context, source, tag)
            .map(|(env, key)| {
                self.st.probed.insert(key);
                let len = self.st.incoming[&key].len;
                (MessageId(key), Status::ok(env.source, env.tag, len))
            }))
    }

    fn imrecv(
        &mut self,
        message: MessageId,
        buf: UserBuf,
        _pattern: CommPattern,
    ) -> Result<RequestId, PmlError> {
        if !self.st.probed.remove(&message.0) {
            return Err(PmlError::Other(format!(
                "pml sw: {message:?} was not returned by a matched probe, or was already received"
            )));
        }
        let context = self.st.incoming[&message.0].env.context;
        let req = self.st.new_req(Req::Recv {
            context,
            buf,
            status: None,
        });
        self.st.bind(message.0, req);
        Ok(req)
    }

    fn test(&mut self, request: RequestId) -> Result<Option<Status>, PmlError> {
        let done = match self.st.reqs.get(&request) {
            None => return Err(PmlError::UnknownRequest(request)),
            Some(Req::Send { status, .. } | Req::Recv { status, .. }) => status.is_some(),
        };
        if !done {
            return Ok(None);
        }
        match self.st.reqs.remove(&request) {
            Some(Req::Send { status, .. } | Req::Recv { status, .. }) => Ok(status),
            None => Err(PmlError::UnknownRequest(request)),
        }
    }

    fn cancel(&mut self, request: RequestId) -> Result<bool, PmlError> {
        let Some(Req::Recv {
            context,
            status: None,
            ..
        }) = self.st.reqs.get(&request)
        else {
            return Ok(false); // sends, and receives already matched or done
        };
        if !self.st.matcher.cancel(*context, &request) {
            return Ok(false);
        }
        self.st
            .complete_recv(request, Status::failed(0, 0, 0, StatusError::Cancelled));
        Ok(true)
    }

    fn progress(&mut self) -> usize {
        self.st.now = Instant::now();
        let mut n = self.bml.progress(&mut self.st);
        self.handle_route_failures();
        let now = self.st.now;
        for i in 0..self.st.active.len() {
            let p = self.st.active[i];
            let peer = self.st.peer(p);
            if peer.conn.poll_timeout().is_some_and(|t| t <= now) {
                peer.conn.handle_timeout(now);
            }
            n += self.pump(p);
        }
        self.handle_route_failures();
        n
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let mut sum = Counters::default();
        for &p in &self.st.active {
            if let Some(peer) = self.st.peers[p as usize].as_deref() {
                sum.add(&peer.conn.counters());
            }
        }
        let mut v: Vec<(String, u64)> = [
            ("frags_sent", sum.frags_sent),
            ("retransmissions", sum.retransmissions),
            ("timeouts", sum.timeouts),
            ("acks_sent", sum.acks_sent),
            ("frags_received", sum.frags_received),
            ("duplicates", sum.duplicates),
            ("out_of_order", sum.out_of_order),
            ("beyond_window", sum.beyond_window),
            ("crc_failures", sum.crc_failures),
            ("malformed", sum.malformed + self.st.dropped),
        ]
        .into_iter()
        .map(|(k, v)| (format!("pml.sw.{k}"), v))
        .collect();
        v.extend(self.bml.counters());
        v
    }

    fn peer_btls(&self) -> Vec<Vec<String>> {
        (0..self.st.nprocs as Rank)
            .map(|p| self.bml.route_names(p))
            .collect()
    }

    fn finalize(&mut self) -> Result<(), PmlError> {
        // The runtime's finalize fence kept every rank progressing until all ranks were done,
        // and a standard send completes only once acknowledged: nothing of ours is in flight.
        for &p in &self.st.active {
            if let Some(peer) = self.st.peers[p as usize].as_deref() {
                if !peer.conn.is_idle() {
                    debug!(
                        peer = p,
                        "pml-sw: finalize with traffic still unacknowledged"
                    );
                }
            }
        }
        self.bml.finalize();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let data = b"0123456789".to_vec();
        let mut r = vec![MSG];
        r.extend_from_slice(&7u32.to_le_bytes());
        r.extend_from_slice(&(-1i32).to_le_bytes());
        r.extend_from_slice(&10u64.to_le_bytes());
        r.push(1);
        r.extend_from_slice(&42u64.to_le_bytes());
        r.extend_from_slice(&data);
        let header = MsgHeader {
            context: 7,
            tag: -1,
            len: 10,
            sync: Some(42),
        };
        assert_eq!(parse_msg(&r), Some((header, &data[..])));
        assert_eq!(parse_msg(&r[..MSG_HEADER - 1]), None);
        r[17] = 2;
        assert_eq!(parse_msg(&r), None, "sync flag must be 0 or 1");
    }
}
