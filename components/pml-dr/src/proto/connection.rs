//! The per-peer DR state machine: both directions of the reliable stream to one peer.
//!
//! Sender side: messages are cut into vfrags of up to `vfrag_frags` fragments; every
//! transmission of a fragment gets a fresh `pkt_num` so that acks (which echo it) give
//! unambiguous RTT samples and QUIC-style loss detection (packet and time thresholds). A per-path
//! probe timeout (srtt + 4 rttvar + ack delay, backed off exponentially, capped) sends probes;
//! `btl_retries` consecutive timeouts fail the path and move every unacknowledged vfrag to the
//! next one while another is left; the last path keeps probing. A peer silent for
//! `peer_timeout` while we await it is declared dead: every waiting state has that deadline.
//!
//! Receiver side: fragments are handed to the glue for placement ((message, offset, bytes)),
//! the payload checksum is verified over the bytes as placed, vfrags are acked as the
//! [`AckPolicy`] says (by default with a 64-bit mask: when complete, on request or on a
//! duplicate at once; otherwise after `ack_delay`),
//! completed vfrag ids are remembered in a [`RangeSet`] so duplicates are re-acked and never
//! delivered twice, and new messages are announced in per-peer sequence order (MPI ordering).

use std::cell::Cell;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use thiserror::Error;
use tracing::{debug, trace, warn};

use super::config::{AckPolicy, Config, ConfigError, PathConfig, RtoPolicy};
use super::counters::Counters;
use super::ranges::RangeSet;
use super::rtt::RttEstimator;
use super::sorted_map::SortedMap;
use super::wire::{
    self, full_mask, AckRepr, DataRepr, MatchFields, PacketType, WireError, ACK_FLAG_BUNDLED,
    ACK_FLAG_CUMULATIVE, ACK_FLAG_DUP, ACK_FLAG_MATCHED, ACK_FLAG_PING, ACK_FLAG_PONG, ACK_LEN,
    DATA_HEADER_LEN, FLAG_ACK_REQ, FLAG_PAYLOAD_CSUM, FLAG_RETX,
};

/// Per-peer message sequence number (assigned by the sender, in MPI send order).
pub type MsgSeq = u64;

/// Timer granularity: the least variance term and loss delay we assume.
const GRANULARITY: Duration = Duration::from_micros(250);
/// Probes sent per probe timeout (two, so one loss does not count as a dead path).
const PROBES_PER_PTO: usize = 2;
/// Loss repairs remembered for spurious-loss detection.
const REPAIR_MEMORY: usize = 256;
/// Longest exponent of the timeout backoff.
const MAX_BACKOFF_SHIFT: u32 = 16;

/// Why the peer was declared dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DeathReason {
    /// Nothing was heard from the peer (or, while messages of ours waited, no acknowledgement
    /// of them) for `pml_dr_peer_timeout` while we awaited it.
    #[error("peer silent (or not acknowledging) for longer than pml_dr_peer_timeout")]
    PeerTimeout,
    /// Every BTL to the peer has failed.
    #[error("every BTL to the peer has failed")]
    NoBtlLeft,
}

/// Why a BTL was failed for this peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BtlFailReason {
    /// `pml_dr_btl_retries` consecutive retransmission timeouts.
    AckTimeout,
    /// A send was not completed locally within `pml_dr_watchdog`.
    Watchdog,
    /// The BTL reported the path broken.
    Reported,
}

/// Something the glue must act on, from [`Connection::poll_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A new incoming message, announced exactly once and in per-peer sequence order: match it.
    /// For a rendezvous message call [`Connection::matched`] once a receive is matched.
    IncomingMessage {
        /// Message sequence.
        seq: MsgSeq,
        /// Match fields.
        m: MatchFields,
        /// Total length.
        len: u64,
        /// Rendezvous: only the first vfrag is sent before [`Connection::matched`].
        rndv: bool,
    },
    /// Every byte of an announced message has been placed and verified (exactly once).
    MessageReceived {
        /// Message sequence.
        seq: MsgSeq,
    },
    /// The peer acknowledged every byte of a sent message: the send buffer may be reused.
    SendComplete {
        /// Message sequence.
        seq: MsgSeq,
    },
    /// A send will never complete.
    SendFailed {
        /// Message sequence.
        seq: MsgSeq,
        /// Why.
        reason: DeathReason,
    },
    /// An announced receive will never complete.
    RecvFailed {
        /// Message sequence.
        seq: MsgSeq,
        /// Why.
        reason: DeathReason,
    },
    /// A BTL was failed for this peer; its traffic moved to the next BTL.
    BtlFailed {
        /// BTL index.
        btl: usize,
        /// Why.
        reason: BtlFailReason,
    },
    /// The peer is dead; the connection is closed (all requests were failed above).
    PeerDead {
        /// Why.
        reason: DeathReason,
    },
}

/// Errors of [`Connection::send_message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SendError {
    /// The peer was declared dead.
    #[error("peer is dead: {0}")]
    PeerDead(DeathReason),
}

/// Errors of [`Connection::placed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PlaceError {
    /// The placed bytes failed the payload checksum: they are garbage and will be overwritten by
    /// the retransmission (a NACK was queued).
    #[error("payload checksum mismatch (NACK sent)")]
    ChecksumMismatch,
    /// The fragment no longer belongs to a live vfrag (peer dead); nothing was recorded.
    #[error("fragment is stale")]
    Stale,
}

/// Errors of [`DataTransmit::seal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SealError {
    /// The payload slice is not the described range.
    #[error("payload is {got} bytes, the fragment is {want}")]
    LengthMismatch {
        /// Bytes given.
        got: usize,
        /// Bytes described.
        want: usize,
    },
}

/// Identifies a data transmission for local-completion tracking (the watchdog).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxToken(pub u64);

/// A packet to hand to a BTL.
#[derive(Debug, Clone)]
pub enum Transmit {
    /// A data fragment: the glue fills the payload from the send buffer.
    Data(DataTransmit),
    /// An ACK/NACK, complete.
    Ack {
        /// BTL index to send on (the one the data came in on).
        btl: usize,
        /// The packet.
        bytes: [u8; ACK_LEN],
    },
}

/// A data fragment to send: header plus the payload range `offset..offset+len` of message
/// `seq`'s send buffer (the core never copies application data).
#[derive(Debug, Clone)]
pub struct DataTransmit {
    /// BTL index to send on.
    pub btl: usize,
    /// Message.
    pub seq: MsgSeq,
    /// Payload offset in the message.
    pub offset: u64,
    /// Payload length.
    pub len: usize,
    /// Pass to [`Connection::local_complete`] when the BTL reports local completion.
    pub token: TxToken,
    repr: DataRepr,
    /// An ack to the same peer travelling in front of this fragment (see [`Config::ack_bundle`]).
    ack: Option<AckRepr>,
}

/// The bytes to put in front of a fragment's payload: its data header, preceded by the bundled
/// ack when one travels with it. Dereferences to those bytes.
#[derive(Debug, Clone, Copy)]
pub struct SealedHeader {
    bytes: [u8; ACK_LEN + DATA_HEADER_LEN],
    start: usize,
}

impl std::ops::Deref for SealedHeader {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[self.start..]
    }
}

impl DataTransmit {
    /// Computes the checksums over `payload` (the bytes being sent, read from the send buffer)
    /// and returns the header to put in front of them (with the bundled ack, if any, first).
    pub fn seal(&self, payload: &[u8]) -> Result<SealedHeader, SealError> {
        if payload.len() != self.len {
            return Err(SealError::LengthMismatch {
                got: payload.len(),
                want: self.len,
            });
        }
        let mut repr = self.repr;
        if repr.flags & FLAG_PAYLOAD_CSUM != 0 {
            repr.payload_crc = crc32c::crc32c(payload);
        }
        let mut bytes = [0u8; ACK_LEN + DATA_HEADER_LEN];
        repr.emit(&mut bytes[ACK_LEN..]);
        let start = match &self.ack {
            Some(a) => {
                a.emit(&mut bytes[..ACK_LEN]);
                0
            }
            None => ACK_LEN,
        };
        Ok(SealedHeader { bytes, start })
    }

    /// The bundled ack as a packet of its own, for a fragment that will not be sent after all
    /// (the ack must still reach the peer).
    pub fn bundled_ack_alone(&self) -> Option<Transmit> {
        self.ack.map(|mut a| {
            a.flags &= !ACK_FLAG_BUNDLED;
            Transmit::Ack {
                btl: self.btl,
                bytes: a.to_bytes(),
            }
        })
    }

    /// The header fields (before sealing).
    pub fn repr(&self) -> &DataRepr {
        &self.repr
    }
}

/// A received fragment to place: copy `payload` to `offset` of message `seq`'s receive buffer
/// (or a staging buffer if not matched yet), then call [`Connection::placed`] with the bytes
/// as placed.
#[derive(Debug)]
pub struct Arrival<'a> {
    /// Message.
    pub seq: MsgSeq,
    /// Offset of the payload in the message.
    pub offset: u64,
    /// The payload in the received packet.
    pub payload: &'a [u8],
    /// Total message length (to size a staging buffer).
    pub msg_len: u64,
    /// Match fields.
    pub m: MatchFields,
    /// MATCH, RNDV or FRAG.
    pub kind: PacketType,
    /// Hand back to [`Connection::placed`].
    pub token: PlaceToken,
}

impl Arrival<'_> {
    /// The payload's CRC32C, if the sender sent one (for a later end-to-end check of staged
    /// bytes, see [`super::e2e`]).
    pub fn payload_crc(&self) -> Option<u32> {
        let r = &self.token.repr;
        (r.flags & FLAG_PAYLOAD_CSUM != 0).then_some(r.payload_crc)
    }
}

/// Proof of a pending placement; consumed by [`Connection::placed`].
#[derive(Debug)]
pub struct PlaceToken {
    repr: DataRepr,
    btl: usize,
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    pkt: u64,
    at: Instant,
}

/// Each fragment's latest transmission, by fragment index: inline for a vfrag of one fragment
/// (every small message), else on the heap (an allocation and a free per vfrag were ~200
/// instructions of a small message's). Dereferences to the slice.
#[derive(Debug)]
enum SentLog {
    One(Option<Sent>),
    Many(Box<[Option<Sent>]>),
}

impl SentLog {
    fn new(count: u8) -> Self {
        if count <= 1 {
            Self::One(None)
        } else {
            Self::Many(vec![None; count as usize].into_boxed_slice())
        }
    }
}

impl std::ops::Deref for SentLog {
    type Target = [Option<Sent>];
    fn deref(&self) -> &[Option<Sent>] {
        match self {
            Self::One(s) => std::slice::from_ref(s),
            Self::Many(v) => v,
        }
    }
}

impl std::ops::DerefMut for SentLog {
    fn deref_mut(&mut self) -> &mut [Option<Sent>] {
        match self {
            Self::One(s) => std::slice::from_mut(s),
            Self::Many(v) => v,
        }
    }
}

#[derive(Debug)]
struct Path {
    btl: usize,
    csum: bool,
    /// Held acks ride in front of data on this path ([`Config::ack_bundle`]).
    bundle_acks: bool,
    failed: bool,
    rtt: RttEstimator,
    /// Consecutive probe timeouts without an ack on this path.
    pto_count: u32,
    largest_acked: Option<u64>,
    /// When the largest acknowledged transmission was sent.
    largest_acked_sent: Option<Instant>,
    last_ack_eliciting: Option<Instant>,
    /// When the last probe timeout fired (timers of policies without early loss detection
    /// restart from it, so one timeout does not cascade into the next).
    last_timeout: Option<Instant>,
    loss_time: Option<Instant>,
    /// Packet threshold, raised when reordering caused spurious retransmissions.
    reorder_threshold: u64,
    /// Time threshold in eighths of an RTT (9 = QUIC's 9/8), raised likewise.
    loss_eighths: u32,
}

#[derive(Debug)]
struct Probe {
    /// A probe was sent and not answered yet.
    outstanding: bool,
    next_at: Instant,
    interval: Duration,
}

#[derive(Debug)]
struct TxVfrag {
    seq: MsgSeq,
    kind: PacketType,
    offset: u64,
    len: u64,
    count: u8,
    path: usize,
    acked: u64,
    /// Fragments to (re)send.
    queued: u64,
    /// Queued because declared lost by the loss thresholds.
    lost: u64,
    /// Queued fragments to send twice (a lone probe is doubled, as QUIC sends two).
    twice: u64,
    sent: SentLog,
    /// Fragments transmitted at least once (bit i = `sent[i].is_some()`).
    sent_mask: u64,
    /// Set once a RNDV vfrag is fully acked but the receiver has not matched yet.
    awaiting_match: Option<Probe>,
}

impl TxVfrag {
    fn full(&self) -> u64 {
        full_mask(self.count as usize)
    }
    /// Sent and not acked (queued retransmissions included: still out there).
    fn unacked_sent(&self) -> u64 {
        self.sent_mask & !self.acked
    }
    fn ack_eliciting_in_flight(&self) -> bool {
        self.unacked_sent() != 0 || self.awaiting_match.as_ref().is_some_and(|p| p.outstanding)
    }
}

#[derive(Debug)]
struct TxMsg {
    m: MatchFields,
    len: u64,
    rndv: bool,
    matched: bool,
    /// Bytes already cut into vfrags.
    next_offset: u64,
    /// The first (MATCH or RNDV) vfrag was cut. Not `next_offset > 0`: with an eager limit of
    /// 0 the RNDV vfrag carries no bytes, and every later vfrag must still be a FRAG.
    started: bool,
    open_vfrags: u32,
}

#[derive(Debug)]
struct RxVfrag {
    seq: MsgSeq,
    kind: PacketType,
    count: u8,
    mask: u64,
    /// Handed out for placement, not yet confirmed.
    placing: u64,
    last_pkt: u64,
    last_rx: Instant,
    btl: usize,
    ack_due: Option<Instant>,
}

#[derive(Debug)]
struct RxMsg {
    m: MatchFields,
    len: u64,
    rndv: bool,
    matched: bool,
    announced: bool,
    remaining: u64,
    any_placed: bool,
    /// MessageReceived was emitted.
    reported: bool,
    /// The RNDV vfrag: id, fragment count, last pkt_num seen (for the MATCHED ack).
    rndv_vfrag: Option<(u64, u8, u64)>,
    last_btl: usize,
}

#[derive(Debug, Clone, Copy)]
struct PendingAck {
    btl: usize,
    repr: AckRepr,
    rx_at: Instant,
    /// Not sent before this unless data leaves first (see [`Config::ack_hold`]).
    ready_at: Instant,
}

/// Both directions of the reliable stream to one peer. See the module documentation.
#[derive(Debug)]
pub struct Connection {
    cfg: Config,
    frag_size: u64,
    eager_limit: u64,
    paths: Vec<Path>,
    dead: Option<DeathReason>,
    events: VecDeque<Event>,
    counters: Counters,

    // Sender.
    next_msg_seq: MsgSeq,
    next_vfrag_id: u64,
    next_pkt_num: u64,
    next_token: u64,
    tx_msgs: SortedMap<MsgSeq, TxMsg>,
    /// Messages with bytes to cut into vfrags, FIFO.
    tx_ready: VecDeque<MsgSeq>,
    tx_vfrags: SortedMap<u64, TxVfrag>,
    pending_local: SortedMap<TxToken, (usize, Instant)>,
    /// Recent loss repairs (pkt_num, path): a duplicate-ack echoing one proves the loss was
    /// spurious even after its vfrag completed.
    recent_repairs: VecDeque<(u64, usize)>,

    // Receiver.
    rx_done: RangeSet,
    rx_partial: SortedMap<u64, RxVfrag>,
    rx_msgs: SortedMap<MsgSeq, RxMsg>,
    next_announce: MsgSeq,
    acks: VecDeque<PendingAck>,
    /// Data just left: the held acks follow it at once (they are due anyway, and behind the
    /// data they no longer delay it).
    flush_acks: bool,
    rx_limit: usize,

    // Liveness.
    last_heard: Instant,
    awaiting_since: Option<Instant>,
    /// Last acknowledgement (ack, NACK, duplicate ack: not a keepalive) of our data.
    last_acked: Instant,
    /// Since when we have had messages to deliver (unacknowledged or unmatched).
    tx_since: Option<Instant>,
    /// The glue awaits a message from this peer (a receive posted for it).
    interest: bool,
    last_ping: Option<Instant>,

    // What the progress loop asks on every pass, remembered until the state changes (every
    // `&mut self` entry point but `poll_event` calls `touch`): an idle pass then costs two
    // comparisons instead of walks over every timer and queue.
    /// [`Connection::poll_timeout`]'s answer (None: not computed since the last change).
    timeout_cache: Cell<Option<Option<Instant>>>,
    /// `poll_transmit` found nothing to send and nothing changed since: it has nothing until
    /// the time given (the first held ack's `ready_at`), or ever when None.
    tx_quiet: Option<Option<Instant>>,
    /// A cumulative ack arrived under another policy (warned once).
    policy_mismatch_seen: bool,
}

impl Connection {
    /// A connection to one peer over `paths` (failover order). The fragment payload size is the
    /// smallest `max_send_size` minus the DR header, so a vfrag keeps its fragmentation when it
    /// moves to another BTL.
    pub fn new(now: Instant, cfg: Config, paths: &[PathConfig]) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Self::check_paths(paths)?;
        let frag = paths
            .iter()
            .map(|p| p.max_send_size - DATA_HEADER_LEN)
            .min()
            .expect("checked: at least one path");
        // Fragments carry a u32 payload length.
        let frag_size = frag.min(u32::MAX as usize) as u64;
        let vfrag_bytes = frag_size.saturating_mul(cfg.vfrag_frags as u64);
        let eager_limit = cfg.eager_limit.min(vfrag_bytes);
        let rx_limit = (cfg.window * 4).max(256);
        Ok(Self {
            frag_size,
            eager_limit,
            paths: paths
                .iter()
                .map(|p| Path {
                    btl: p.btl,
                    csum: cfg.csum.on(p.need_csum),
                    bundle_acks: cfg.ack_bundle.on(p.need_ack),
                    failed: false,
                    rtt: RttEstimator::new(cfg.rto_initial),
                    pto_count: 0,
                    largest_acked: None,
                    largest_acked_sent: None,
                    last_ack_eliciting: None,
                    last_timeout: None,
                    loss_time: None,
                    reorder_threshold: cfg.reorder_threshold,
                    loss_eighths: 9,
                })
                .collect(),
            cfg,
            dead: None,
            events: VecDeque::new(),
            counters: Counters::default(),
            next_msg_seq: 0,
            next_vfrag_id: 0,
            next_pkt_num: 0,
            next_token: 0,
            tx_msgs: SortedMap::new(),
            tx_ready: VecDeque::new(),
            tx_vfrags: SortedMap::new(),
            pending_local: SortedMap::new(),
            recent_repairs: VecDeque::new(),
            rx_done: RangeSet::new(),
            rx_partial: SortedMap::new(),
            rx_msgs: SortedMap::new(),
            next_announce: 0,
            acks: VecDeque::new(),
            flush_acks: false,
            rx_limit,
            last_heard: now,
            awaiting_since: None,
            last_acked: now,
            tx_since: None,
            interest: false,
            last_ping: None,
            timeout_cache: Cell::new(None),
            tx_quiet: None,
            policy_mismatch_seen: false,
        })
    }

    /// The state changed: what `poll_timeout` and `poll_transmit` remembered is void.
    fn touch(&mut self) {
        self.timeout_cache.set(None);
        self.tx_quiet = None;
    }

    /// Checks the BTLs to one peer as [`Connection::new`] does (so a glue that creates
    /// connections lazily can reject a bad peer at init): at least one, each with room for
    /// payload after the DR header.
    pub fn check_paths(paths: &[PathConfig]) -> Result<(), ConfigError> {
        if paths.is_empty() {
            return Err(ConfigError::NoPath);
        }
        for p in paths {
            if p.max_send_size <= DATA_HEADER_LEN {
                return Err(ConfigError::FragTooSmall {
                    btl: p.btl,
                    max_send_size: p.max_send_size,
                });
            }
        }
        Ok(())
    }

    /// Payload bytes per fragment.
    pub fn frag_size(&self) -> u64 {
        self.frag_size
    }

    /// Effective eager limit (the configured one, clamped to one vfrag).
    pub fn eager_limit(&self) -> u64 {
        self.eager_limit
    }

    /// Counters (with the current srtt of the active path).
    pub fn counters(&self) -> Counters {
        let mut c = self.counters.clone();
        c.srtt = self
            .active_path()
            .map(|p| self.paths[p].rtt.srtt())
            .unwrap_or_default();
        c
    }

    /// Smoothed RTT of the path over BTL `btl`, if it has had a sample.
    pub fn srtt(&self, btl: usize) -> Option<Duration> {
        self.paths
            .iter()
            .find(|p| p.btl == btl)
            .filter(|p| p.rtt.has_sample())
            .map(|p| p.rtt.srtt())
    }

    /// Why the peer is dead, if it is.
    pub fn is_dead(&self) -> Option<DeathReason> {
        self.dead
    }

    /// True while we wait for the peer to say something (unacked data or an unmatched
    /// rendezvous being probed, a receive in progress, an announced gap, or a receive posted
    /// for it). Every such state has a silence deadline: [`Connection::poll_timeout`] is armed
    /// and the peer is declared dead after `peer_timeout` of silence.
    pub fn awaits_peer(&self) -> bool {
        self.dead.is_none() && self.awaiting_peer()
    }

    /// True if nothing is queued, in flight or partially received in either direction.
    pub fn is_idle(&self) -> bool {
        self.tx_msgs.is_empty() && self.rx_msgs.is_empty() && self.acks.is_empty()
    }

    /// Next event for the glue.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    // ------------------------------------------------------------------ sender API

    /// Queues a message of `len` bytes; returns its sequence number. The send buffer must stay
    /// valid until [`Event::SendComplete`] or [`Event::SendFailed`] (retransmissions read it).
    pub fn send_message(
        &mut self,
        now: Instant,
        m: MatchFields,
        len: u64,
    ) -> Result<MsgSeq, SendError> {
        self.send_message_with(now, m, len, false)
    }

    /// Like [`Connection::send_message`]; `synchronous` forces the rendezvous protocol whatever
    /// the length, so that [`Event::SendComplete`] also means the receiver has matched
    /// (`MPI_Ssend`).
    pub fn send_message_with(
        &mut self,
        now: Instant,
        m: MatchFields,
        len: u64,
        synchronous: bool,
    ) -> Result<MsgSeq, SendError> {
        self.touch();
        if let Some(r) = self.dead {
            return Err(SendError::PeerDead(r));
        }
        let seq = self.next_msg_seq;
        self.next_msg_seq += 1;
        let rndv = synchronous || len > self.eager_limit;
        self.tx_msgs.insert(
            seq,
            TxMsg {
                m,
                len,
                rndv,
                matched: false,
                next_offset: 0,
                started: false,
                open_vfrags: 0,
            },
        );
        self.tx_ready.push_back(seq);
        self.update_awaiting(now);
        Ok(seq)
    }

    /// The next packet to send, if any: acks first, then retransmissions and new fragments in
    /// vfrag order, within the window.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if let Some(quiet) = self.tx_quiet {
            if quiet.is_none_or(|t| now < t) {
                return None;
            }
        }
        let t = self.poll_transmit_uncached(now);
        self.tx_quiet = None;
        if t.is_some() {
            self.timeout_cache.set(None);
        } else if self.dead.is_none() {
            // Nothing to send: so it stays until a held ack falls due or the state changes.
            // (Returning None left `flush_acks` clear: only `ready_at` lets an ack out.)
            self.tx_quiet = Some(self.acks.iter().map(|a| a.ready_at).min());
        }
        t
    }

    /// Whether [`Connection::poll_transmit`] at `now` would return a packet, without sending
    /// it (for tests of the remembered answer).
    #[doc(hidden)]
    pub fn has_transmit(&self, now: Instant) -> bool {
        if self.dead.is_some() {
            return false;
        }
        if self
            .acks
            .iter()
            .any(|a| self.flush_acks || a.ready_at <= now)
        {
            return true;
        }
        if self
            .tx_vfrags
            .values()
            .any(|v| v.queued != 0 && !self.paths[v.path].failed)
        {
            return true;
        }
        self.in_flight_vfrags() < self.cfg.window
            && self.active_path().is_some()
            && !self.tx_ready.is_empty()
    }

    fn poll_transmit_uncached(&mut self, now: Instant) -> Option<Transmit> {
        if self.dead.is_some() {
            return None;
        }
        let flush = self.flush_acks;
        if let Some(i) = self.acks.iter().position(|a| flush || a.ready_at <= now) {
            let a = self.acks.remove(i).expect("position is in range");
            return Some(Transmit::Ack {
                btl: a.btl,
                bytes: self.ack_to_send(now, a).to_bytes(),
            });
        }
        loop {
            if let Some(mut t) = self.next_queued_frag(now) {
                self.flush_acks = true;
                // A held ack to this peer rides in front of the data (one packet, not two) when
                // both fit the smallest BTL fragment; the other held acks follow the data.
                let bundles = self.paths.iter().any(|p| p.btl == t.btl && p.bundle_acks);
                if bundles && t.len + ACK_LEN <= self.frag_size as usize {
                    if let Some(i) = self.acks.iter().position(|a| a.btl == t.btl) {
                        let a = self.acks.remove(i).expect("position is in range");
                        let mut repr = self.ack_to_send(now, a);
                        repr.flags |= ACK_FLAG_BUNDLED;
                        self.counters.acks_bundled += 1;
                        t.ack = Some(repr);
                    }
                }
                return Some(Transmit::Data(t));
            }
            if !self.cut_vfrag() {
                self.flush_acks = false;
                return None;
            }
        }
    }

    /// The ack `a` as it leaves now (its hold time filled in), counted.
    fn ack_to_send(&mut self, now: Instant, a: PendingAck) -> AckRepr {
        let mut repr = a.repr;
        let delay = now.saturating_duration_since(a.rx_at);
        repr.ack_delay_us = delay.as_micros().min(u32::MAX as u128) as u32;
        if repr.nack {
            self.counters.nacks_sent += 1;
        } else {
            self.counters.acks_sent += 1;
        }
        repr
    }

    /// The BTL completed the send of `token` locally (its buffer is free).
    pub fn local_complete(&mut self, token: TxToken) {
        self.touch();
        self.pending_local.remove(&token);
    }

    /// The BTL reported that the send of `token` failed locally: counts as a timeout of its path
    /// (towards failover and backoff). The fragment is resent by the next probe timeout, not at
    /// once: a BTL failing every send synchronously must not spin the caller.
    pub fn local_failed(&mut self, now: Instant, token: TxToken) {
        self.touch();
        if let Some((p, _)) = self.pending_local.remove(&token) {
            if !self.paths[p].failed {
                self.path_timeout(now, p, false);
            }
        }
    }

    /// The BTL itself reported that its path to the peer is broken: fail it over now rather
    /// than waiting for timeouts.
    pub fn btl_failed(&mut self, now: Instant, btl: usize) {
        self.touch();
        if self.dead.is_some() {
            return;
        }
        if let Some(p) = self.paths.iter().position(|p| p.btl == btl && !p.failed) {
            self.fail_path(now, p, BtlFailReason::Reported);
        }
        self.update_awaiting(now);
    }

    fn active_path(&self) -> Option<usize> {
        self.paths.iter().position(|p| !p.failed)
    }

    fn in_flight_vfrags(&self) -> usize {
        self.tx_vfrags
            .values()
            .filter(|v| v.awaiting_match.is_none())
            .count()
    }

    /// Cuts the next vfrag from the first ready message, if the window allows.
    fn cut_vfrag(&mut self) -> bool {
        if self.in_flight_vfrags() >= self.cfg.window {
            return false;
        }
        let Some(path) = self.active_path() else {
            return false;
        };
        let Some(&seq) = self.tx_ready.front() else {
            return false;
        };
        let msg = self.tx_msgs.get_mut(&seq).expect("ready message exists");
        let vfrag_bytes = self.frag_size * self.cfg.vfrag_frags as u64;
        let (kind, len) = if !msg.started {
            if msg.rndv {
                (PacketType::Rndv, self.eager_limit.min(msg.len))
            } else {
                (PacketType::Match, msg.len)
            }
        } else {
            (
                PacketType::Frag,
                (msg.len - msg.next_offset).min(vfrag_bytes),
            )
        };
        let offset = msg.next_offset;
        msg.next_offset += len;
        msg.started = true;
        msg.open_vfrags += 1;
        // An RNDV message pauses after its first vfrag until the receiver has matched.
        let more = msg.next_offset < msg.len && (kind != PacketType::Rndv || msg.matched);
        if !more {
            self.tx_ready.pop_front();
        }
        let count = len.div_ceil(self.frag_size).max(1) as u8;
        let id = self.next_vfrag_id;
        self.next_vfrag_id += 1;
        trace!(id, seq, ?kind, offset, len, count, "new vfrag");
        self.tx_vfrags.insert(
            id,
            TxVfrag {
                seq,
                kind,
                offset,
                len,
                count,
                path,
                acked: 0,
                queued: full_mask(count as usize),
                lost: 0,
                twice: 0,
                sent: SentLog::new(count),
                sent_mask: 0,
                awaiting_match: None,
            },
        );
        true
    }

    fn next_queued_frag(&mut self, now: Instant) -> Option<DataTransmit> {
        let (&id, v) = self
            .tx_vfrags
            .iter_mut()
            .find(|(_, v)| v.queued != 0 && !self.paths[v.path].failed)?;
        let i = v.queued.trailing_zeros() as usize;
        if v.twice & (1u64 << i) != 0 {
            v.twice &= !(1u64 << i);
        } else {
            v.queued &= !(1u64 << i);
        }
        let retx = v.sent[i].is_some();
        let probe = v.awaiting_match.is_some();
        if let Some(p) = v.awaiting_match.as_mut() {
            p.outstanding = true;
        }
        let pkt = self.next_pkt_num;
        self.next_pkt_num += 1;
        let repair = v.lost & (1u64 << i) != 0;
        v.lost &= !(1u64 << i);
        if repair {
            if self.recent_repairs.len() == REPAIR_MEMORY {
                self.recent_repairs.pop_front();
            }
            self.recent_repairs.push_back((pkt, v.path));
        }
        v.sent[i] = Some(Sent { pkt, at: now });
        v.sent_mask |= 1u64 << i;
        let off_in_vfrag = i as u64 * self.frag_size;
        let len = (v.len - off_in_vfrag.min(v.len)).min(self.frag_size) as usize;
        let msg = &self.tx_msgs[&v.seq];
        let path = &mut self.paths[v.path];
        path.last_ack_eliciting = Some(now);
        let mut flags = 0;
        if path.csum {
            flags |= FLAG_PAYLOAD_CSUM;
        }
        // Ask for an immediate ack at the end of a burst so losses show up within one RTT.
        if v.queued == 0 || probe {
            flags |= FLAG_ACK_REQ;
        }
        if retx {
            flags |= FLAG_RETX;
            self.counters.retransmissions += 1;
        }
        self.counters.frags_sent += 1;
        let token = TxToken(self.next_token);
        self.next_token += 1;
        self.pending_local.insert(token, (v.path, now));
        let repr = DataRepr {
            kind: v.kind,
            flags,
            frag_index: i as u8,
            frag_count: v.count,
            payload_crc: 0,
            payload_len: len as u32,
            vfrag_id: id,
            pkt_num: pkt,
            m: msg.m,
            msg_seq: v.seq,
            msg_len: msg.len,
            offset: v.offset + off_in_vfrag,
        };
        Some(DataTransmit {
            btl: path.btl,
            seq: v.seq,
            offset: repr.offset,
            len,
            token,
            repr,
            ack: None,
        })
    }

    // ------------------------------------------------------------------ receive path

    /// Feeds a BTL fragment received on BTL `btl`: one packet, or an ack bundled in front of a
    /// data packet (see [`wire::split_bundle`]; the ack is handled first). A data fragment that
    /// needs placing is returned; everything else (acks, duplicates, garbage) is consumed here.
    /// Never panics.
    pub fn handle_packet<'a>(
        &mut self,
        now: Instant,
        btl: usize,
        bytes: &'a [u8],
    ) -> Option<Arrival<'a>> {
        self.touch();
        let (first, data) = wire::split_bundle(bytes);
        let Some(data) = data else {
            return self.handle_one_packet(now, btl, first);
        };
        // An ack never needs placing.
        let _ = self.handle_one_packet(now, btl, first);
        self.handle_one_packet(now, btl, data)
    }

    fn handle_one_packet<'a>(
        &mut self,
        now: Instant,
        btl: usize,
        bytes: &'a [u8],
    ) -> Option<Arrival<'a>> {
        if self.dead.is_some() {
            return None;
        }
        let result = match wire::peek_type(bytes) {
            Ok(t) if t.is_data() => self.handle_data(now, btl, bytes),
            Ok(_) => {
                match AckRepr::parse_bytes(bytes) {
                    Ok(ack) => {
                        self.last_heard = now;
                        if ack.flags & ACK_FLAG_PING != 0 {
                            self.counters.pongs_sent += 1;
                            let pong = AckRepr {
                                flags: ACK_FLAG_PONG,
                                ..ack
                            };
                            self.push_ack(PendingAck {
                                btl,
                                repr: pong,
                                rx_at: now,
                                ready_at: now,
                            });
                        } else if ack.flags & ACK_FLAG_PONG == 0 {
                            self.last_acked = now;
                            self.handle_ack(now, ack);
                        }
                    }
                    Err(e) => self.count_bad(e),
                }
                None
            }
            Err(e) => {
                self.count_bad(e);
                None
            }
        };
        self.update_awaiting(now);
        result
    }

    fn count_bad(&mut self, e: WireError) {
        trace!(%e, "dropped packet");
        if e == WireError::BadChecksum {
            self.counters.csum_failures += 1;
        } else {
            self.counters.malformed += 1;
        }
    }

    fn handle_data<'a>(
        &mut self,
        now: Instant,
        btl: usize,
        bytes: &'a [u8],
    ) -> Option<Arrival<'a>> {
        let repr = match DataRepr::parse_bytes(bytes) {
            Ok(r) => r,
            Err(e) => {
                self.count_bad(e);
                return None;
            }
        };
        // The header CRC passed: this came from the peer.
        self.last_heard = now;
        self.counters.frags_received += 1;
        let id = repr.vfrag_id;
        let bit = 1u64 << repr.frag_index;
        if self.rx_done.contains(id) {
            self.counters.duplicates += 1;
            let matched = self.rx_msg_matched(repr.msg_seq);
            let flags = ACK_FLAG_DUP | if matched { ACK_FLAG_MATCHED } else { 0 };
            self.queue_ack(
                now,
                btl,
                &repr,
                full_mask(repr.frag_count as usize),
                flags,
                false,
                false,
            );
            return None;
        }
        if let Some(v) = self.rx_partial.get(&id) {
            if v.seq != repr.msg_seq || v.count != repr.frag_count || v.kind != repr.kind {
                self.counters.malformed += 1;
                return None;
            }
            if v.mask & bit != 0 {
                self.counters.duplicates += 1;
                if self.cfg.ack_policy == AckPolicy::Vfrag {
                    // No partial acks: the sender resends the whole vfrag on its timeout.
                    return None;
                }
                let (mask, matched) = (v.mask, self.rx_msg_matched(repr.msg_seq));
                let flags = ACK_FLAG_DUP | if matched { ACK_FLAG_MATCHED } else { 0 };
                self.queue_ack(now, btl, &repr, mask, flags, false, false);
                return None;
            }
            if v.placing & bit != 0 {
                // Another copy is being placed right now; its outcome will be acked.
                self.counters.duplicates += 1;
                return None;
            }
        } else {
            match self.accept_new_vfrag(&repr) {
                Ok(()) => {}
                Err(Refusal::Inconsistent) => {
                    self.counters.malformed += 1;
                    return None;
                }
                Err(Refusal::NotNow) => {
                    self.counters.refused += 1;
                    return None;
                }
            }
            self.rx_partial.insert(
                id,
                RxVfrag {
                    seq: repr.msg_seq,
                    kind: repr.kind,
                    count: repr.frag_count,
                    mask: 0,
                    placing: 0,
                    last_pkt: repr.pkt_num,
                    last_rx: now,
                    btl,
                    ack_due: None,
                },
            );
        }
        let v = self.rx_partial.get_mut(&id).expect("inserted above");
        v.placing |= bit;
        if let Some(m) = self.rx_msgs.get_mut(&repr.msg_seq) {
            m.last_btl = btl;
        }
        Some(Arrival {
            seq: repr.msg_seq,
            offset: repr.offset,
            payload: bytes.get(DATA_HEADER_LEN..DATA_HEADER_LEN + repr.payload_len as usize)?,
            msg_len: repr.msg_len,
            m: repr.m,
            kind: repr.kind,
            token: PlaceToken { repr, btl },
        })
    }

    /// Checks a first fragment of an unseen vfrag against what we know of its message, and
    /// registers the message if it is new. False means drop it.
    fn accept_new_vfrag(&mut self, r: &DataRepr) -> Result<(), Refusal> {
        if self.rx_partial.len() >= self.rx_limit {
            warn!(
                limit = self.rx_limit,
                "too many partial vfrags from peer; dropping"
            );
            return Err(Refusal::NotNow);
        }
        if let Some(m) = self.rx_msgs.get(&r.msg_seq) {
            // Same message: fields must agree (else the peer contradicts itself).
            if m.len != r.msg_len || m.m != r.m {
                return Err(Refusal::Inconsistent);
            }
            return match r.kind {
                PacketType::Match if !m.rndv => Ok(()),
                // Only one RNDV vfrag per message; a MATCH vfrag of a rendezvous message.
                PacketType::Match | PacketType::Rndv => Err(Refusal::Inconsistent),
                // FRAG vfrags only after the match: resent once it happened.
                _ if m.rndv && !m.matched => Err(Refusal::NotNow),
                _ if m.rndv => Ok(()),
                _ => Err(Refusal::Inconsistent),
            };
        }
        // The message every later one waits for (they are held unannounced until it arrives)
        // is taken even at the limit: refusing it would leave the limit full forever, and the
        // sender's retransmissions of it refused each time (a deadlock once a loss left a hole
        // and the sender kept streaming past it). It adds at most one entry over the limit:
        // once it is announced, the entries held behind it are announced too.
        let fills_the_hole = r.msg_seq == self.next_announce
            && self
                .rx_msgs
                .iter()
                .next_back()
                .is_some_and(|(&last, _)| last > self.next_announce);
        // Eager messages are bounded by the job-wide eager limit: this also bounds the
        // staging memory an unexpected message can make the glue allocate.
        if r.kind == PacketType::Match && r.msg_len > self.cfg.eager_limit {
            return Err(Refusal::Inconsistent);
        }
        // A finished message's late copy; a FRAG ahead of its RNDV (reordered); the limit.
        if r.msg_seq < self.next_announce
            || r.kind == PacketType::Frag
            || (self.rx_msgs.len() >= self.rx_limit && !fills_the_hole)
        {
            return Err(Refusal::NotNow);
        }
        self.rx_msgs.insert(
            r.msg_seq,
            RxMsg {
                m: r.m,
                len: r.msg_len,
                rndv: r.kind == PacketType::Rndv,
                matched: false,
                announced: false,
                remaining: r.msg_len,
                any_placed: false,
                reported: false,
                rndv_vfrag: (r.kind == PacketType::Rndv).then_some((
                    r.vfrag_id,
                    r.frag_count,
                    r.pkt_num,
                )),
                last_btl: 0,
            },
        );
        self.announce_in_order();
        Ok(())
    }

    fn announce_in_order(&mut self) {
        while let Some(m) = self.rx_msgs.get_mut(&self.next_announce) {
            m.announced = true;
            let seq = self.next_announce;
            self.events.push_back(Event::IncomingMessage {
                seq,
                m: m.m,
                len: m.len,
                rndv: m.rndv,
            });
            self.next_announce += 1;
            self.maybe_finish_rx(seq);
        }
    }

    fn maybe_finish_rx(&mut self, seq: MsgSeq) {
        let Some(m) = self.rx_msgs.get_mut(&seq) else {
            return;
        };
        if m.announced && m.any_placed && m.remaining == 0 && !m.reported {
            m.reported = true;
            self.events.push_back(Event::MessageReceived { seq });
        }
        // A rendezvous message is remembered until matched: its MATCHED ack is still owed.
        if m.reported && (!m.rndv || m.matched) {
            self.rx_msgs.remove(&seq);
        }
    }

    /// A finished message was necessarily matched; otherwise ask its state.
    fn rx_msg_matched(&self, seq: MsgSeq) -> bool {
        match self.rx_msgs.get(&seq) {
            Some(m) => m.matched,
            None => seq < self.next_announce,
        }
    }

    /// Queue an ack of `r`'s vfrag; `hold` delays it by [`Config::ack_hold`] unless data to
    /// the peer leaves first.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn queue_ack(
        &mut self,
        now: Instant,
        btl: usize,
        r: &DataRepr,
        mask: u64,
        flags: u8,
        nack: bool,
        hold: bool,
    ) {
        let repr = self.policy_ack(AckRepr {
            nack,
            flags,
            frag_count: r.frag_count,
            ack_delay_us: 0,
            vfrag_id: r.vfrag_id,
            mask,
            echo_pkt_num: r.pkt_num,
            msg_seq: r.msg_seq,
        });
        let ready_at = if hold { now + self.cfg.ack_hold } else { now };
        self.push_ack(PendingAck {
            btl,
            repr,
            rx_at: now,
            ready_at,
        });
    }

    /// An ack of one vfrag as the policy sends it: under `cumulative`, an ack (not a NACK) says
    /// how many vfrags arrived complete and in order instead (the echo, for RTT samples, and
    /// the MATCHED flag of `msg_seq` are kept).
    #[inline]
    fn policy_ack(&self, repr: AckRepr) -> AckRepr {
        if self.cfg.ack_policy != AckPolicy::Cumulative || repr.nack {
            return repr;
        }
        self.cumulative_ack(repr)
    }

    #[cold]
    #[inline(never)]
    fn cumulative_ack(&self, repr: AckRepr) -> AckRepr {
        AckRepr {
            flags: repr.flags | ACK_FLAG_CUMULATIVE,
            frag_count: 1,
            vfrag_id: self.rx_done.prefix_end(),
            mask: 0,
            ..repr
        }
    }

    fn push_ack(&mut self, a: PendingAck) {
        // One queued ack per vfrag is enough: the newest state supersedes older ones (and is
        // due no later than the one it replaces).
        let keepalive = ACK_FLAG_PING | ACK_FLAG_PONG;
        let cumulative = |r: &AckRepr| r.flags & ACK_FLAG_CUMULATIVE != 0;
        if let Some(q) = self.acks.iter_mut().find(|q| {
            if cumulative(&a.repr) {
                // A newer cumulative point covers an older one, unless that one carries the
                // MATCHED flag of another message.
                return cumulative(&q.repr)
                    && (q.repr.msg_seq == a.repr.msg_seq || q.repr.flags & ACK_FLAG_MATCHED == 0);
            }
            q.repr.vfrag_id == a.repr.vfrag_id
                && q.repr.nack == a.repr.nack
                && !cumulative(&q.repr)
                && q.repr.flags & keepalive == a.repr.flags & keepalive
        }) {
            let ready_at = q.ready_at.min(a.ready_at);
            *q = PendingAck { ready_at, ..a };
        } else {
            self.acks.push_back(a);
        }
    }

    /// Reports that the payload of `token` now sits in memory as `placed`. Verifies the payload
    /// checksum over those bytes; on success the fragment counts as received exactly once.
    pub fn placed(
        &mut self,
        now: Instant,
        token: PlaceToken,
        placed: &[u8],
    ) -> Result<(), PlaceError> {
        self.touch();
        let PlaceToken { repr, btl } = token;
        let id = repr.vfrag_id;
        let bit = 1u64 << repr.frag_index;
        let Some(v) = self.rx_partial.get_mut(&id) else {
            return Err(PlaceError::Stale);
        };
        v.placing &= !bit;
        if !repr.payload_intact(placed) {
            self.counters.csum_failures += 1;
            // The NACK names the corrupted transmission; its mask reports the rest of the vfrag
            // only under policies with partial acks.
            let mask = if self.cfg.ack_policy.partial_acks() {
                v.mask
            } else {
                0
            };
            debug!(
                id,
                frag = repr.frag_index,
                "payload checksum mismatch, NACK"
            );
            let matched = self.rx_msg_matched(repr.msg_seq);
            let flags = if matched { ACK_FLAG_MATCHED } else { 0 };
            self.queue_ack(now, btl, &repr, mask, flags, true, false);
            self.update_awaiting(now);
            return Err(PlaceError::ChecksumMismatch);
        }
        v.mask |= bit;
        v.last_pkt = repr.pkt_num;
        if repr.kind == PacketType::Rndv {
            if let Some((_, _, pkt)) = self
                .rx_msgs
                .get_mut(&repr.msg_seq)
                .and_then(|m| m.rndv_vfrag.as_mut())
            {
                *pkt = repr.pkt_num;
            }
        }
        v.last_rx = now;
        v.btl = btl;
        let complete = v.mask == full_mask(v.count as usize);
        let mask = v.mask;
        if let Some(m) = self.rx_msgs.get_mut(&repr.msg_seq) {
            m.remaining = m.remaining.saturating_sub(repr.payload_len as u64);
            m.any_placed = true;
        }
        let matched = self.rx_msg_matched(repr.msg_seq);
        let flags = if matched { ACK_FLAG_MATCHED } else { 0 };
        let policy = self.cfg.ack_policy;
        if complete {
            self.rx_partial.remove(&id);
            self.rx_done.insert(id);
            // Held briefly: a reply the application sends at once carries this ack in front of
            // its data (or, unbundled, right behind it: one fewer packet ahead of the reply).
            let hold = policy != AckPolicy::Immediate;
            self.queue_ack(now, btl, &repr, mask, flags, false, hold);
        } else if !policy.partial_acks() {
            // vfrag, cumulative: nothing is said of a vfrag until it is complete.
        } else if repr.flags & FLAG_ACK_REQ != 0 || policy == AckPolicy::Immediate {
            self.rx_partial.get_mut(&id).expect("present").ack_due = None;
            self.queue_ack(now, btl, &repr, mask, flags, false, false);
        } else {
            let v = self.rx_partial.get_mut(&id).expect("present");
            if v.ack_due.is_none() {
                v.ack_due = Some(now + self.cfg.ack_delay);
            }
        }
        self.maybe_finish_rx(repr.msg_seq);
        self.update_awaiting(now);
        Ok(())
    }

    /// The glue matched rendezvous message `seq` to a receive: let the sender stream the rest.
    /// A no-op for eager or unknown messages.
    pub fn matched(&mut self, now: Instant, seq: MsgSeq) {
        self.touch();
        let Some(m) = self.rx_msgs.get_mut(&seq) else {
            return;
        };
        if !m.rndv || m.matched {
            return;
        }
        m.matched = true;
        let (btl, (vid, count, pkt)) = match m.rndv_vfrag {
            Some(v) => (m.last_btl, v),
            None => return,
        };
        // Ack the RNDV vfrag with MATCHED now. If this ack is lost, the sender's probes are
        // re-acked with the flag too (every ack of a matched message carries it).
        let mask = match self.rx_partial.get(&vid) {
            None => full_mask(count as usize),
            Some(v) if self.cfg.ack_policy.partial_acks() => v.mask,
            // Only the match is news: the vfrag is acked when complete.
            Some(_) => 0,
        };
        let repr = self.policy_ack(AckRepr {
            nack: false,
            flags: ACK_FLAG_MATCHED,
            frag_count: count,
            ack_delay_us: 0,
            vfrag_id: vid,
            mask,
            echo_pkt_num: pkt,
            msg_seq: seq,
        });
        self.push_ack(PendingAck {
            btl,
            repr,
            rx_at: now,
            ready_at: now,
        });
        self.maybe_finish_rx(seq);
        self.update_awaiting(now);
    }

    /// Gives up on placing `token` (e.g. no staging memory): the fragment is treated as never
    /// received and will be retransmitted. Every [`Arrival`] must end in `placed` or `abandon`.
    pub fn abandon(&mut self, token: PlaceToken) {
        self.touch();
        if let Some(v) = self.rx_partial.get_mut(&token.repr.vfrag_id) {
            v.placing &= !(1u64 << token.repr.frag_index);
        }
    }

    // ------------------------------------------------------------------ acks at the sender

    fn handle_ack(&mut self, now: Instant, ack: AckRepr) {
        if ack.nack {
            self.counters.nacks_received += 1;
        } else {
            self.counters.acks_received += 1;
        }
        if ack.flags & ACK_FLAG_MATCHED != 0 {
            if let Some(m) = self.tx_msgs.get_mut(&ack.msg_seq) {
                m.matched = true;
            }
        }
        if ack.flags & ACK_FLAG_CUMULATIVE != 0 {
            if self.cfg.ack_policy != AckPolicy::Cumulative {
                // The ranks disagree on pml_dr_ack_policy (the runtime's job-wide check was
                // bypassed): refuse rather than read a cumulative point as a vfrag id.
                self.policy_mismatch();
                return;
            }
            self.handle_cumulative_ack(now, ack);
            return;
        }
        if ack.flags & ACK_FLAG_DUP != 0 && !ack.nack {
            if let Some(i) = self
                .recent_repairs
                .iter()
                .position(|&(pkt, _)| pkt == ack.echo_pkt_num)
            {
                let (_, p) = self.recent_repairs.remove(i).expect("found");
                self.spurious_loss(p);
            }
        }
        let Some(v) = self.tx_vfrags.get_mut(&ack.vfrag_id) else {
            self.counters.duplicate_acks += 1;
            return;
        };
        if v.count != ack.frag_count || v.seq != ack.msg_seq {
            self.counters.malformed += 1;
            return;
        }
        let p = v.path;
        // Reordering, not loss: the "lost" original arrived (its repair came back as a
        // duplicate, or it is acked before the repair even left).
        let spurious = v.awaiting_match.is_none() && ack.mask & v.lost != 0;
        v.acked |= ack.mask;
        v.queued &= !v.acked;
        v.lost &= !v.acked;
        v.twice &= !v.acked;
        let path = &mut self.paths[p];
        // Any answer proves the path works in both directions.
        path.pto_count = 0;
        if !ack.nack && path.largest_acked.is_none_or(|l| ack.echo_pkt_num > l) {
            path.largest_acked = Some(ack.echo_pkt_num);
            let echoed = v.sent.iter().flatten().find(|s| s.pkt == ack.echo_pkt_num);
            path.largest_acked_sent = echoed.map(|s| s.at);
            if let Some(s) = echoed {
                let sample = now.saturating_duration_since(s.at);
                path.rtt
                    .update(sample, Duration::from_micros(ack.ack_delay_us as u64));
            }
        }

        if ack.nack {
            // The header of the corrupted transmission was intact, so the echo names exactly
            // the fragment that must be resent (if it is still the latest transmission).
            if let Some(i) = v
                .sent
                .iter()
                .position(|s| s.is_some_and(|s| s.pkt == ack.echo_pkt_num))
            {
                let b = 1u64 << i;
                if v.acked & b == 0 && v.queued & b == 0 {
                    v.queued |= b;
                    self.counters.lost += 1;
                }
            }
        }
        if v.acked == v.full() {
            self.vfrag_fully_acked(now, ack.vfrag_id);
        }
        if spurious {
            self.spurious_loss(p);
        }
        self.detect_lost(now, p);
    }

    #[cold]
    fn policy_mismatch(&mut self) {
        self.counters.malformed += 1;
        if !self.policy_mismatch_seen {
            self.policy_mismatch_seen = true;
            warn!(
                policy = self.cfg.ack_policy.word(),
                "the peer acknowledges cumulatively but pml_dr_ack_policy is not cumulative \
                 here: every rank must use the same policy (its cumulative acks are dropped)"
            );
        }
    }

    /// A cumulative ack: every vfrag below `ack.vfrag_id` arrived. The echoed transmission (any
    /// vfrag's) gives the RTT sample. Out of line: the default policy's ack path stays as
    /// small as it was (inlining decisions there cost instructions per message).
    #[cold]
    #[inline(never)]
    fn handle_cumulative_ack(&mut self, now: Instant, ack: AckRepr) {
        let point = ack.vfrag_id;
        let echoed = self.tx_vfrags.iter().find_map(|(&id, v)| {
            v.sent
                .iter()
                .flatten()
                .find(|s| s.pkt == ack.echo_pkt_num)
                .map(|s| (id, v.path, s.at))
        });
        if let Some((_, p, at)) = echoed {
            let path = &mut self.paths[p];
            path.pto_count = 0;
            if path.largest_acked.is_none_or(|l| ack.echo_pkt_num > l) {
                path.largest_acked = Some(ack.echo_pkt_num);
                path.largest_acked_sent = Some(at);
                let sample = now.saturating_duration_since(at);
                path.rtt
                    .update(sample, Duration::from_micros(ack.ack_delay_us as u64));
            }
        }
        let covered: Vec<u64> = self
            .tx_vfrags
            .iter()
            .take_while(|(&id, _)| id < point)
            .map(|(&id, _)| id)
            .collect();
        for id in covered {
            let v = self.tx_vfrags.get_mut(&id).expect("listed above");
            let newly = v.acked != v.full();
            v.acked = v.full();
            v.queued = 0;
            v.lost = 0;
            v.twice = 0;
            // A rendezvous vfrag awaiting the match moves on when the match is known, or its
            // probe was answered (the probe schedule advances), as under the other policies.
            let answered = echoed.is_some_and(|(e, _, _)| e == id);
            let matched = self.tx_msgs.get(&v.seq).is_some_and(|m| m.matched);
            if newly || answered || (v.awaiting_match.is_some() && matched) {
                self.vfrag_fully_acked(now, id);
            }
        }
    }

    /// A loss declared on path `p` proved spurious: the path reorders. Stop counting packets (a
    /// burst sent within microseconds can arrive in any order) and widen the time threshold,
    /// as RACK does.
    fn spurious_loss(&mut self, p: usize) {
        let path = &mut self.paths[p];
        path.reorder_threshold = u64::MAX;
        path.loss_eighths = (path.loss_eighths + 4).min(40);
        self.counters.spurious_retransmissions += 1;
        debug!(
            eighths = path.loss_eighths,
            "spurious retransmission: loss thresholds widened"
        );
    }

    #[inline]
    fn vfrag_fully_acked(&mut self, now: Instant, id: u64) {
        let (seq, kind, path) = {
            let v = &self.tx_vfrags[&id];
            (v.seq, v.kind, v.path)
        };
        let msg = &self.tx_msgs[&seq];
        if kind == PacketType::Rndv && !msg.matched {
            // The receiver has the RNDV but has not matched yet: probe it now and then (it
            // re-acks, with MATCHED once matched), backing off to rto_max.
            let first_interval = self.rto(path);
            let cap = self.cfg.rto_max;
            let factor = if self.cfg.rto_backoff { 2 } else { 1 };
            let v = self.tx_vfrags.get_mut(&id).expect("present");
            match v.awaiting_match.as_mut() {
                Some(p) => {
                    p.outstanding = false;
                    p.next_at = now + p.interval;
                    p.interval = (p.interval * factor).min(cap);
                }
                None => {
                    v.awaiting_match = Some(Probe {
                        outstanding: false,
                        next_at: now + first_interval,
                        interval: (first_interval * factor).min(cap),
                    });
                }
            }
            return;
        }
        self.tx_vfrags.remove(&id);
        let msg = self.tx_msgs.get_mut(&seq).expect("vfrag's message exists");
        msg.open_vfrags -= 1;
        if msg.rndv && msg.matched && msg.next_offset < msg.len && !self.tx_ready.contains(&seq) {
            self.tx_ready.push_back(seq);
        }
        if msg.next_offset == msg.len && msg.open_vfrags == 0 {
            self.tx_msgs.remove(&seq);
            self.events.push_back(Event::SendComplete { seq });
        }
    }

    /// QUIC loss detection on one path: an unacked transmission is lost when one
    /// `reorder_threshold` transmissions later was acked, or when it is older than 9/8 RTT and
    /// something later was acked.
    fn detect_lost(&mut self, now: Instant, p: usize) {
        let path = &mut self.paths[p];
        path.loss_time = None;
        if !self.cfg.ack_policy.early_loss_detection() {
            return;
        }
        let Some(largest) = path.largest_acked else {
            return;
        };
        let rtt = path.rtt.srtt().max(path.rtt.latest());
        let mut loss_delay = (rtt * path.loss_eighths / 8).max(GRANULARITY);
        if path.reorder_threshold == u64::MAX {
            // Reordering seen: also cover the RTT variation (jitter is what reorders).
            loss_delay = loss_delay.max(path.rtt.srtt() + path.rtt.rttvar() * 4);
        }
        let threshold = path.reorder_threshold;
        // RACK's reordering window: the packet threshold only counts transmissions sent at
        // least min_rtt/4 before the acknowledged one. Fragments of one burst leave within
        // microseconds and may legitimately arrive in any order; the time threshold covers them.
        let reo_wnd = path
            .rtt
            .min()
            .map_or(Duration::MAX, |m| (m / 4).max(Duration::from_micros(1)));
        let acked_sent = path.largest_acked_sent;
        let mut lost = 0;
        let mut loss_time: Option<Instant> = None;
        for v in self.tx_vfrags.values_mut().filter(|v| v.path == p) {
            // Only fragments out on the wire: sent, not acked, not already queued again.
            let mut out = v.unacked_sent() & !v.queued;
            while out != 0 {
                let i = out.trailing_zeros() as usize;
                let b = 1u64 << i;
                out &= !b;
                let Some(s) = v.sent[i] else { continue };
                if s.pkt >= largest {
                    continue;
                }
                let by_count = largest - s.pkt >= threshold
                    && acked_sent
                        .is_some_and(|t| s.at.checked_add(reo_wnd).is_some_and(|x| x <= t));
                if by_count || s.at + loss_delay <= now {
                    v.queued |= b;
                    v.lost |= b;
                    lost += 1;
                } else {
                    let t = s.at + loss_delay;
                    loss_time = Some(loss_time.map_or(t, |l| l.min(t)));
                }
            }
        }
        self.counters.lost += lost;
        self.paths[p].loss_time = loss_time;
    }

    // ------------------------------------------------------------------ timers

    fn rto(&self, p: usize) -> Duration {
        match self.cfg.rto_policy {
            RtoPolicy::Rtt => {
                self.paths[p]
                    .rtt
                    .rto(GRANULARITY, self.cfg.rto_min, self.cfg.rto_max)
                    + self.cfg.ack_delay
            }
            RtoPolicy::Fixed => self.cfg.rto_fixed,
        }
    }

    /// A timeout after `count` consecutive ones: doubled each time (`pml_dr_rto_backoff`), at
    /// most `rto_max`.
    fn backed_off(&self, rto: Duration, count: u32) -> Duration {
        if !self.cfg.rto_backoff {
            return rto;
        }
        rto.checked_mul(1u32 << count.min(MAX_BACKOFF_SHIFT))
            .unwrap_or(self.cfg.rto_max)
            .min(self.cfg.rto_max)
    }

    fn pto_deadline(&self, p: usize) -> Option<Instant> {
        let path = &self.paths[p];
        if path.failed {
            return None;
        }
        let mut last = path.last_ack_eliciting?;
        if !self
            .tx_vfrags
            .values()
            .any(|v| v.path == p && v.ack_eliciting_in_flight())
        {
            return None;
        }
        if !self.cfg.ack_policy.early_loss_detection() {
            last = self.oldest_timer_start(p).unwrap_or(last);
        }
        Some(last + self.backed_off(self.rto(p), path.pto_count))
    }

    /// Without early loss detection (`vfrag`, `cumulative`) a timeout is the only repair, so it
    /// runs from the oldest unacknowledged transmission (the DR paper's per-vfrag ACK timer),
    /// not from the newest one: a sender streaming past a lost fragment would otherwise push
    /// its timer back with every new send and repair the loss only once the window stalls. A
    /// timeout restarts it (the fragments beyond that timeout's resend budget wait one more).
    #[cold]
    fn oldest_timer_start(&self, p: usize) -> Option<Instant> {
        let oldest = self
            .tx_vfrags
            .values()
            .filter(|v| v.path == p)
            .flat_map(|v| {
                let unacked = v.unacked_sent();
                v.sent
                    .iter()
                    .enumerate()
                    .filter(move |(i, _)| unacked & (1u64 << i) != 0)
                    .filter_map(|(_, s)| s.as_ref().map(|s| s.at))
            })
            .min()?;
        Some(match self.paths[p].last_timeout {
            Some(t) => oldest.max(t),
            None => oldest,
        })
    }

    /// While we await the peer, anything it says (data, acks, keepalive answers) proves it
    /// alive. While our own messages wait, only acknowledgements of them count: a peer that
    /// answers keepalives or sends data but never acknowledges ours (the path towards it dead,
    /// or a peer that drops what we send) would otherwise keep them retransmitting forever.
    fn silence_deadline(&self) -> Option<Instant> {
        let pt = self.cfg.peer_timeout;
        let heard = self.awaiting_since.map(|s| s.max(self.last_heard) + pt);
        let acked = self.tx_since.map(|s| s.max(self.last_acked) + pt);
        match (heard, acked) {
            (Some(h), Some(a)) => Some(h.min(a)),
            (h, a) => h.or(a),
        }
    }

    fn ping_interval(&self) -> Duration {
        (self.cfg.peer_timeout / 8).max(self.cfg.rto_min)
    }

    /// While we await a silent peer, a keepalive every peer_timeout/8 makes a live but idle
    /// peer answer (its PML progress answers; the application need not send), so only a dead
    /// one reaches the silence limit.
    fn ping_deadline(&self) -> Option<Instant> {
        let since = self.awaiting_since?.max(self.last_heard);
        let base = self.last_ping.map_or(since, |p| p.max(since));
        Some(base + self.ping_interval())
    }

    /// The glue does (or no longer does) await a message from this peer, e.g. a receive posted
    /// for it: silence then counts towards peer death, and keepalives probe it.
    pub fn set_interest(&mut self, now: Instant, interested: bool) {
        self.touch();
        self.interest = interested;
        self.update_awaiting(now);
    }

    /// When [`Connection::handle_timeout`] must next be called (None: no timer armed).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if let Some(t) = self.timeout_cache.get() {
            return t;
        }
        let t = self.poll_timeout_uncached();
        self.timeout_cache.set(Some(t));
        t
    }

    /// [`Connection::poll_timeout`] computed afresh (for tests of the remembered answer).
    #[doc(hidden)]
    pub fn poll_timeout_uncached(&self) -> Option<Instant> {
        if self.dead.is_some() {
            return None;
        }
        let mut t: Option<Instant> = None;
        let mut min = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        for p in 0..self.paths.len() {
            min(self.pto_deadline(p));
            if !self.paths[p].failed {
                min(self.paths[p].loss_time);
            }
        }
        for v in self.tx_vfrags.values() {
            if let Some(pr) = &v.awaiting_match {
                if !pr.outstanding {
                    min(Some(pr.next_at));
                }
            }
        }
        for v in self.rx_partial.values() {
            min(v.ack_due);
        }
        for a in &self.acks {
            min(Some(a.ready_at));
        }
        if let Some((_, &(_, at))) = self.pending_local.first() {
            min(Some(at + self.cfg.watchdog));
        }
        min(self.silence_deadline());
        min(self.ping_deadline());
        t
    }

    /// Runs every timer that is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.touch();
        if self.dead.is_some() {
            return;
        }
        if self.silence_deadline().is_some_and(|d| d <= now) {
            warn!(
                timeout = ?self.cfg.peer_timeout,
                "peer silent or not acknowledging too long; declaring it dead"
            );
            self.die(DeathReason::PeerTimeout);
            return;
        }
        if self.ping_deadline().is_some_and(|d| d <= now) {
            if let Some(p) = self.active_path() {
                self.last_ping = Some(now);
                self.counters.pings_sent += 1;
                let ping = AckRepr {
                    nack: false,
                    flags: ACK_FLAG_PING,
                    frag_count: 1,
                    ack_delay_us: 0,
                    vfrag_id: 0,
                    mask: 0,
                    echo_pkt_num: 0,
                    msg_seq: 0,
                };
                let btl = self.paths[p].btl;
                self.push_ack(PendingAck {
                    btl,
                    repr: ping,
                    rx_at: now,
                    ready_at: now,
                });
            }
        }
        // Watchdog: tokens are issued in time order, so the first is the oldest.
        while let Some((&tok, &(p, at))) = self.pending_local.first() {
            if at + self.cfg.watchdog > now {
                break;
            }
            self.pending_local.remove(&tok);
            self.counters.watchdog_expirations += 1;
            if !self.paths[p].failed {
                self.fail_path(now, p, BtlFailReason::Watchdog);
                if self.dead.is_some() {
                    return;
                }
            }
        }
        for p in 0..self.paths.len() {
            if self.paths[p].failed {
                continue;
            }
            if self.paths[p].loss_time.is_some_and(|t| t <= now) {
                self.detect_lost(now, p);
            }
            if self.pto_deadline(p).is_some_and(|t| t <= now) {
                self.path_timeout(now, p, true);
                if self.dead.is_some() {
                    return;
                }
            }
        }
        for v in self.tx_vfrags.values_mut() {
            if let Some(pr) = v.awaiting_match.as_mut() {
                if !pr.outstanding && pr.next_at <= now {
                    // Re-send fragment 0: the receiver re-acks, with MATCHED once it matched.
                    v.queued |= 1;
                }
            }
        }
        let mut due = Vec::new();
        for (&id, v) in self.rx_partial.iter_mut() {
            if v.ack_due.is_some_and(|t| t <= now) {
                v.ack_due = None;
                due.push((id, v.btl, v.count, v.mask, v.last_pkt, v.last_rx, v.seq));
            }
        }
        for (id, btl, count, mask, pkt, rx_at, seq) in due {
            let flags = if self.rx_msg_matched(seq) {
                ACK_FLAG_MATCHED
            } else {
                0
            };
            let repr = AckRepr {
                nack: false,
                flags,
                frag_count: count,
                ack_delay_us: 0,
                vfrag_id: id,
                mask,
                echo_pkt_num: pkt,
                msg_seq: seq,
            };
            self.push_ack(PendingAck {
                btl,
                repr,
                rx_at,
                ready_at: now,
            });
        }
        self.update_awaiting(now);
    }

    /// A probe timeout on path `p` (or a local send failure, `probe` false): back off, probe,
    /// or fail the path over to the next BTL.
    fn path_timeout(&mut self, now: Instant, p: usize, probe: bool) {
        self.counters.timeouts += 1;
        let path = &mut self.paths[p];
        path.pto_count += 1;
        debug!(
            btl = path.btl,
            count = path.pto_count,
            "retransmission timeout"
        );
        // Retries exhausted: move to the next BTL if one is left. On the last one, keep
        // probing (backed off, capped at rto_max): only peer_timeout of silence kills the peer,
        // so a slow but live peer is never given up on by a retry count.
        // A peer that is merely busy (not progressing) looks like a dead path for a few
        // RTT-derived timeouts: also require btl_fail_silence without an acknowledgement.
        let silent_for = now.saturating_duration_since(
            self.tx_since
                .map_or(self.last_acked, |s| s.max(self.last_acked)),
        );
        if path.pto_count >= self.cfg.btl_retries
            && silent_for >= self.cfg.btl_fail_silence
            && self.paths.iter().filter(|q| !q.failed).count() > 1
        {
            self.fail_path(now, p, BtlFailReason::AckTimeout);
            return;
        }
        let path = &mut self.paths[p];
        path.last_ack_eliciting = Some(now);
        path.last_timeout = Some(now);
        if !probe {
            return;
        }
        if !self.cfg.ack_policy.partial_acks() {
            self.resend_oldest_unacked(p);
            return;
        }
        // Probe with the oldest unacked fragments; their acks will reveal the rest.
        let mut probes = 0;
        let mut last: Option<(u64, u64)> = None;
        for (&id, v) in self.tx_vfrags.iter_mut().filter(|(_, v)| v.path == p) {
            if probes == PROBES_PER_PTO {
                break;
            }
            let mut cand = v.unacked_sent() & !v.queued;
            if cand == 0 && v.awaiting_match.as_ref().is_some_and(|pr| pr.outstanding) {
                cand = 1;
            }
            while cand != 0 && probes < PROBES_PER_PTO {
                let b = cand & cand.wrapping_neg();
                v.queued |= b;
                cand &= !b;
                probes += 1;
                last = Some((id, b));
            }
        }
        // A lone candidate goes twice, so that a single loss does not count as a dead path.
        if probes == 1 {
            if let Some((id, b)) = last {
                if let Some(v) = self.tx_vfrags.get_mut(&id) {
                    v.twice |= b;
                }
            }
        }
    }

    /// A timeout without partial acks (vfrag, cumulative): what arrived of a vfrag is unknown,
    /// so every unacknowledged fragment of the oldest vfrags on path `p` goes again (the
    /// receiver drops what it has), up to `vfrag_frags` fragments (at least one whole vfrag);
    /// a rendezvous vfrag awaiting the match is probed with its first fragment. Bounded: the
    /// whole window resent at each timeout overflowed the receiver (a UDP socket, a receive
    /// pool) at the same place every time, the already-received head of the burst getting
    /// through and its missing tail never (a livelock at 1% loss over btl ud).
    #[cold]
    fn resend_oldest_unacked(&mut self, p: usize) {
        let mut budget = self.cfg.vfrag_frags as u32;
        for v in self.tx_vfrags.values_mut().filter(|v| v.path == p) {
            if v.awaiting_match.is_some() {
                if v.awaiting_match.as_ref().is_some_and(|pr| pr.outstanding) {
                    v.queued |= 1;
                }
                continue;
            }
            let missing = v.full() & !v.acked;
            if missing == 0 {
                continue;
            }
            if budget == 0 {
                break;
            }
            v.queued |= missing;
            budget = budget.saturating_sub(missing.count_ones());
        }
    }

    fn fail_path(&mut self, now: Instant, p: usize, reason: BtlFailReason) {
        let btl = self.paths[p].btl;
        self.paths[p].failed = true;
        warn!(btl, ?reason, "BTL failed for this peer");
        self.events.push_back(Event::BtlFailed { btl, reason });
        self.pending_local.retain(|_, (q, _)| *q != p);
        let Some(next) = self.active_path() else {
            self.die(DeathReason::NoBtlLeft);
            return;
        };
        self.counters.failovers += 1;
        self.paths[next].last_ack_eliciting = Some(now);
        for v in self.tx_vfrags.values_mut().filter(|v| v.path == p) {
            v.path = next;
            v.queued = v.full() & !v.acked;
            v.lost = 0;
            v.twice = 0;
            if let Some(pr) = v.awaiting_match.as_mut() {
                pr.outstanding = false;
                pr.next_at = now;
            }
        }
    }

    fn die(&mut self, reason: DeathReason) {
        if self.dead.is_some() {
            return;
        }
        self.dead = Some(reason);
        for (&seq, _) in self.tx_msgs.iter() {
            self.events.push_back(Event::SendFailed { seq, reason });
        }
        for (&seq, m) in self.rx_msgs.iter() {
            if m.announced && !m.reported {
                self.events.push_back(Event::RecvFailed { seq, reason });
            }
        }
        self.events.push_back(Event::PeerDead { reason });
        self.tx_msgs.clear();
        self.tx_ready.clear();
        self.tx_vfrags.clear();
        self.pending_local.clear();
        self.rx_partial.clear();
        self.rx_msgs.clear();
        self.acks.clear();
        self.awaiting_since = None;
        self.tx_since = None;
    }

    /// Are we waiting for the peer to say something? (Unacked data, a receive in progress, an
    /// announced gap.) An unmatched rendezvous at our side waits for us, not for the peer.
    fn awaiting_peer(&self) -> bool {
        self.interest
            || !self.tx_msgs.is_empty()
            || !self.rx_partial.is_empty()
            || self
                .rx_msgs
                .values()
                .any(|m| !m.announced || (m.rndv && m.matched))
    }

    #[inline]
    fn update_awaiting(&mut self, now: Instant) {
        if self.dead.is_some() {
            return;
        }
        match (self.awaiting_peer(), self.awaiting_since) {
            (true, None) => self.awaiting_since = Some(now),
            (false, Some(_)) => self.awaiting_since = None,
            _ => {}
        }
        match (!self.tx_msgs.is_empty(), self.tx_since) {
            (true, None) => self.tx_since = Some(now),
            (false, Some(_)) => self.tx_since = None,
            _ => {}
        }
    }
}

/// Why a valid-looking fragment of a new vfrag was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// It contradicts what the peer sent before (counted as malformed).
    Inconsistent,
    /// Not now: the sender's retransmission is taken later (counted as refused).
    NotNow,
}
