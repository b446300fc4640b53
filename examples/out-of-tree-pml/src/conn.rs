//! The sliding-window protocol to one peer, as a sans-IO state machine (after quinn-proto): it
//! never reads a clock or touches a BTL. The caller passes `now` into every call and
//!
//! - offers payloads with [`Connection::send`] (refused with [`SendError::WindowFull`] when
//!   `window` fragments are unacknowledged: nothing is taken, try again later);
//! - feeds every frame that arrived to [`Connection::handle_frame`];
//! - sends what [`Connection::poll_transmit`] returns (DATA frames, then a pure ACK when one is
//!   owed) until it returns `None`;
//! - calls [`Connection::handle_timeout`] once `now` reaches [`Connection::poll_timeout`];
//! - takes the payloads that arrived, each exactly once and in send order, from
//!   [`Connection::poll_delivered`]; and learns which of its own were acknowledged from
//!   [`Connection::acked_through`].
//!
//! The protocol: every fragment carries a sequence number and is kept until the peer's
//! cumulative ack covers it. A fragment not acknowledged `rto` after it was sent is sent
//! again, its timeout doubling each time up to `rto_max`; if the oldest one stays
//! unacknowledged for `peer_timeout`, the connection fails. The receiver delivers in order,
//! holds up to `window` fragments that arrived ahead of a gap, drops duplicates (and re-acks
//! at once: its ack was probably lost), and acknowledges cumulatively: every `ack_every`
//! in-order fragments, or `ack_delay` after the first unacknowledged one, or on any DATA frame
//! going back (the ack rides in its header). Frames whose CRC32C fails are dropped: to the
//! protocol, corruption is loss.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::wire::{self, seq_lt, Frame, FrameError, Seq};

/// Protocol parameters. The PML reads them from the `pml_sw_*` MCA parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Most fragments unacknowledged at once (and held out of order by the receiver).
    pub window: u32,
    /// Largest payload of one fragment (the BTL's max send size less [`wire::HEADER_LEN`]).
    pub max_payload: usize,
    /// Retransmission timeout of a fragment's first transmission.
    pub rto: Duration,
    /// Cap of the doubled timeout of later transmissions.
    pub rto_max: Duration,
    /// Acknowledge at once after this many in-order fragments.
    pub ack_every: u32,
    /// Otherwise acknowledge this long after the first fragment not yet acknowledged.
    pub ack_delay: Duration,
    /// Fail the connection when the oldest fragment is unacknowledged this long.
    pub peer_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            window: 64,
            max_payload: 4096,
            rto: Duration::from_millis(5),
            rto_max: Duration::from_millis(500),
            ack_every: 8,
            ack_delay: Duration::from_micros(200),
            peer_timeout: Duration::from_secs(30),
        }
    }
}

/// A configuration that cannot work, naming the parameter and what is valid.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{name} = {value} is invalid: {valid}")]
pub struct ConfigError {
    /// The MCA parameter.
    pub name: &'static str,
    /// Its value.
    pub value: String,
    /// What would be accepted.
    pub valid: &'static str,
}

impl Config {
    /// Check the values against each other and the wire format.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |name, value: String, valid| Err(ConfigError { name, value, valid });
        if !(1..=1 << 16).contains(&self.window) {
            return bad("pml_sw_window", self.window.to_string(), "1 to 65536");
        }
        if self.max_payload == 0 {
            return bad(
                "max_payload",
                "0".into(),
                "at least 1 byte: a BTL whose max_send_size exceeds the 16-byte frame header",
            );
        }
        if self.rto.is_zero() || self.rto > self.rto_max {
            return bad(
                "pml_sw_rto_us",
                format!("{:?} (pml_sw_rto_max_us = {:?})", self.rto, self.rto_max),
                "above 0 and at most pml_sw_rto_max_us",
            );
        }
        if self.ack_every == 0 {
            return bad("pml_sw_ack_every", "0".into(), "at least 1");
        }
        if self.peer_timeout <= self.rto_max {
            return bad(
                "pml_sw_peer_timeout_ms",
                format!(
                    "{:?} (pml_sw_rto_max_us = {:?})",
                    self.peer_timeout, self.rto_max
                ),
                "longer than pml_sw_rto_max_us: a fragment must get more than one chance",
            );
        }
        Ok(())
    }
}

/// Why a payload was not taken.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SendError {
    /// `window` fragments are unacknowledged; nothing was taken.
    #[error("window full: retry once acks arrive")]
    WindowFull,
    /// The payload does not fit one fragment.
    #[error("payload of {len} bytes exceeds the {max}-byte fragment payload")]
    TooLarge {
        /// Offered length.
        len: usize,
        /// [`Config::max_payload`].
        max: usize,
    },
    /// The connection failed.
    #[error(transparent)]
    Failed(#[from] ConnError),
}

/// Why a connection failed (for good).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ConnError {
    /// A fragment went unacknowledged for `peer_timeout`.
    #[error("fragment {seq} unacknowledged for {waited:?} after {transmissions} transmissions (pml_sw_peer_timeout_ms): peer unreachable")]
    PeerTimeout {
        /// The fragment.
        seq: Seq,
        /// How long.
        waited: Duration,
        /// How often it was sent.
        transmissions: u32,
    },
}

/// What a connection counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// DATA frames sent, retransmissions included.
    pub frags_sent: u64,
    /// DATA frames sent again.
    pub retransmissions: u64,
    /// Fragments whose timer expired.
    pub timeouts: u64,
    /// Pure ACK frames sent.
    pub acks_sent: u64,
    /// DATA frames received (duplicates included).
    pub frags_received: u64,
    /// DATA frames dropped as already received.
    pub duplicates: u64,
    /// DATA frames that arrived ahead of a gap and were held.
    pub out_of_order: u64,
    /// DATA frames dropped for being a whole window ahead.
    pub beyond_window: u64,
    /// Frames dropped for a bad checksum.
    pub crc_failures: u64,
    /// Frames dropped as malformed (short, unknown kind, an ack of fragments never sent).
    pub malformed: u64,
}

impl Counters {
    /// Add `other` into `self`.
    pub fn add(&mut self, o: &Counters) {
        self.frags_sent += o.frags_sent;
        self.retransmissions += o.retransmissions;
        self.timeouts += o.timeouts;
        self.acks_sent += o.acks_sent;
        self.frags_received += o.frags_received;
        self.duplicates += o.duplicates;
        self.out_of_order += o.out_of_order;
        self.beyond_window += o.beyond_window;
        self.crc_failures += o.crc_failures;
        self.malformed += o.malformed;
    }
}

/// A fragment sent (or about to be) and not yet acknowledged.
#[derive(Debug)]
struct InFlight {
    payload: Vec<u8>,
    /// When it was first sent (`None`: not yet).
    first_sent: Option<Instant>,
    /// When it was last sent.
    last_sent: Option<Instant>,
    transmissions: u32,
    /// Its timer expired and it waits in `retransmit`.
    queued: bool,
}

/// The state of the protocol with one peer.
#[derive(Debug)]
pub struct Connection {
    cfg: Config,
    // --- sending
    /// Oldest unacknowledged sequence number: `in_flight[i]` is fragment `snd_una + i`.
    snd_una: Seq,
    in_flight: VecDeque<InFlight>,
    /// First fragment never transmitted (`snd_una <= next_new <= snd_una + in_flight.len()`).
    next_new: Seq,
    /// Fragments whose timer expired, oldest first.
    retransmit: VecDeque<Seq>,
    // --- receiving
    /// Next sequence number to deliver.
    rcv_next: Seq,
    /// Fragments that arrived ahead of a gap (fewer than `window` ahead of `rcv_next`).
    reorder: HashMap<Seq, Vec<u8>>,
    delivered: VecDeque<Vec<u8>>,
    /// In-order fragments not yet acknowledged.
    ack_owed: u32,
    /// When the owed ack must leave.
    ack_deadline: Option<Instant>,
    /// An ACK must leave on the next [`Connection::poll_transmit`].
    ack_now: bool,
    failed: Option<ConnError>,
    counters: Counters,
}

impl Connection {
    /// A connection whose first fragment (both ways) is sequence number 0.
    pub fn new(cfg: Config) -> Result<Self, ConfigError> {
        Self::starting_at(cfg, 0)
    }

    /// A connection whose first fragment (both ways) is `seq`: tests start near the wrap.
    pub fn starting_at(cfg: Config, seq: Seq) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            snd_una: seq,
            in_flight: VecDeque::new(),
            next_new: seq,
            retransmit: VecDeque::new(),
            rcv_next: seq,
            reorder: HashMap::new(),
            delivered: VecDeque::new(),
            ack_owed: 0,
            ack_deadline: None,
            ack_now: false,
            failed: None,
            counters: Counters::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Can [`Connection::send`] take a payload now?
    pub fn has_room(&self) -> bool {
        self.failed.is_none() && self.in_flight.len() < self.cfg.window as usize
    }

    /// Take `payload` for reliable delivery; returns its sequence number.
    pub fn send(&mut self, payload: Vec<u8>) -> Result<Seq, SendError> {
        if let Some(e) = &self.failed {
            return Err(e.clone().into());
        }
        if payload.len() > self.cfg.max_payload {
            return Err(SendError::TooLarge {
                len: payload.len(),
                max: self.cfg.max_payload,
            });
        }
        if !self.has_room() {
            return Err(SendError::WindowFull);
        }
        let seq = self.snd_una.wrapping_add(self.in_flight.len() as u32);
        self.in_flight.push_back(InFlight {
            payload,
            first_sent: None,
            last_sent: None,
            transmissions: 0,
            queued: false,
        });
        Ok(seq)
    }

    /// Every fragment before this sequence number was acknowledged by the peer.
    pub fn acked_through(&self) -> Seq {
        self.snd_una
    }

    /// Nothing unacknowledged either way: no fragment in flight, no ack owed.
    pub fn is_idle(&self) -> bool {
        self.in_flight.is_empty()
            && self.ack_owed == 0
            && !self.ack_now
            && self.ack_deadline.is_none()
    }

    /// Why the connection failed, once it has.
    pub fn failure(&self) -> Option<&ConnError> {
        self.failed.as_ref()
    }

    /// What it counted.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The next payload that arrived, in send order, each exactly once.
    pub fn poll_delivered(&mut self) -> Option<Vec<u8>> {
        self.delivered.pop_front()
    }

    /// A frame arrived from the peer. A bad frame is dropped (and counted) and its error
    /// returned for logging; the connection is unaffected.
    pub fn handle_frame(&mut self, now: Instant, bytes: &[u8]) -> Result<(), FrameError> {
        let frame = wire::decode(bytes).inspect_err(|e| match e {
            FrameError::Checksum { .. } => self.counters.crc_failures += 1,
            _ => self.counters.malformed += 1,
        })?;
        if self.failed.is_some() {
            return Ok(());
        }
        match frame {
            Frame::Ack { ack } => self.on_ack(ack),
            Frame::Data { seq, ack, payload } => {
                self.on_ack(ack);
                self.on_data(now, seq, payload);
            }
        }
        Ok(())
    }

    fn on_ack(&mut self, ack: Seq) {
        if seq_lt(ack, self.snd_una) {
            return; // an older ack overtaken by a newer one
        }
        if seq_lt(self.next_new, ack) {
            // It acknowledges fragments we never sent: a confused or hostile peer.
            self.counters.malformed += 1;
            return;
        }
        let n = ack.wrapping_sub(self.snd_una) as usize;
        self.in_flight.drain(..n);
        self.snd_una = ack;
    }

    fn on_data(&mut self, now: Instant, seq: Seq, payload: &[u8]) {
        self.counters.frags_received += 1;
        if seq_lt(seq, self.rcv_next) || self.reorder.contains_key(&seq) {
            // We had it: our ack was probably lost, so send one at once.
            self.counters.duplicates += 1;
            self.ack_now = true;
            return;
        }
        let ahead = seq.wrapping_sub(self.rcv_next);
        if ahead >= self.cfg.window {
            self.counters.beyond_window += 1;
            return;
        }
        if ahead > 0 {
            self.counters.out_of_order += 1;
            self.reorder.insert(seq, payload.to_vec());
        } else {
            self.delivered.push_back(payload.to_vec());
            self.rcv_next = self.rcv_next.wrapping_add(1);
            self.ack_owed += 1;
            // The gap just filled may release what was held behind it.
            while let Some(p) = self.reorder.remove(&self.rcv_next) {
                self.delivered.push_back(p);
                self.rcv_next = self.rcv_next.wrapping_add(1);
                self.ack_owed += 1;
            }
        }
        if self.ack_owed >= self.cfg.ack_every || self.cfg.ack_delay.is_zero() {
            self.ack_now = true;
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + self.cfg.ack_delay);
        }
    }

    /// The next frame to send, or `None`. DATA frames first (retransmissions, then new
    /// fragments), each carrying the cumulative ack; then a pure ACK if one is owed.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.failed.is_some() {
            return None;
        }
        let seq = loop {
            match self.retransmit.pop_front() {
                // Acknowledged while it waited.
                Some(s) if seq_lt(s, self.snd_una) => continue,
                Some(s) => break Some(s),
                None => break None,
            }
        };
        let seq = seq.or_else(|| {
            let sent = self.next_new.wrapping_sub(self.snd_una) as usize;
            (sent < self.in_flight.len()).then(|| {
                let s = self.next_new;
                self.next_new = s.wrapping_add(1);
                s
            })
        });
        if let Some(seq) = seq {
            let f = &mut self.in_flight[seq.wrapping_sub(self.snd_una) as usize];
            if f.transmissions > 0 {
                self.counters.retransmissions += 1;
            }
            f.transmissions += 1;
            f.queued = false;
            f.first_sent.get_or_insert(now);
            f.last_sent = Some(now);
            self.counters.frags_sent += 1;
            let frame = wire::data(seq, self.rcv_next, &f.payload);
            self.ack_sent();
            return Some(frame);
        }
        if self.ack_now {
            self.ack_sent();
            self.counters.acks_sent += 1;
            return Some(wire::ack(self.rcv_next));
        }
        None
    }

    fn ack_sent(&mut self) {
        self.ack_owed = 0;
        self.ack_deadline = None;
        self.ack_now = false;
    }

    /// The timeout of a fragment sent `transmissions` times: `rto`, doubled per
    /// retransmission, at most `rto_max`.
    fn rto(&self, transmissions: u32) -> Duration {
        let doubled = self
            .cfg
            .rto
            .saturating_mul(1u32 << transmissions.saturating_sub(1).min(20));
        doubled.min(self.cfg.rto_max)
    }

    /// When [`Connection::handle_timeout`] must be called next (`None`: no timer runs).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.failed.is_some() {
            return None;
        }
        let mut next = self.ack_deadline;
        let mut earliest = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        if let Some(first) = self.in_flight.front().and_then(|f| f.first_sent) {
            earliest(first + self.cfg.peer_timeout);
        }
        for f in self.in_flight.iter().filter(|f| !f.queued) {
            if let Some(last) = f.last_sent {
                earliest(last + self.rto(f.transmissions));
            }
        }
        next
    }

    /// Run the timers due at `now`: owed acks, retransmissions, the peer timeout.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.failed.is_some() {
            return;
        }
        if self.ack_deadline.is_some_and(|d| d <= now) {
            self.ack_now = true;
        }
        if let Some(oldest) = self.in_flight.front() {
            if let Some(first) = oldest.first_sent {
                let waited = now.saturating_duration_since(first);
                if waited >= self.cfg.peer_timeout {
                    let e = ConnError::PeerTimeout {
                        seq: self.snd_una,
                        waited,
                        transmissions: oldest.transmissions,
                    };
                    tracing::warn!("pml-sw: {e}");
                    self.failed = Some(e);
                    return;
                }
            }
        }
        for i in 0..self.in_flight.len() {
            let f = &self.in_flight[i];
            let Some(last) = f.last_sent else { break }; // the rest were never sent
            if !f.queued && last + self.rto(f.transmissions) <= now {
                self.in_flight[i].queued = true;
                self.retransmit
                    .push_back(self.snd_una.wrapping_add(i as u32));
                self.counters.timeouts += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests;
