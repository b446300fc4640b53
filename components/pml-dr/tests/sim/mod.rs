//! A deterministic two-peer simulator for the DR protocol core: a seeded link per BTL that
//! drops, duplicates, reorders (random delay), corrupts packets on the wire and corrupts bytes
//! after placement ("bus" corruption), plus black-holing a BTL from a given time. The glue here
//! does what the PML glue will: fills payloads from send buffers, places arrivals into receive
//! buffers, matches rendezvous messages (optionally late) and reports local completion.

#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use rmca_pml_dr::proto::{
    BtlFailReason, Config, Connection, Counters, DeathReason, Event, MatchFields, PathConfig,
    Transmit,
};

/// Small, seedable, good enough for fault injection.
pub use rmca_framework::rng::SplitMix64 as Rng;

/// Faults of one BTL (both directions).
#[derive(Debug, Clone)]
pub struct Faults {
    pub drop: f64,
    pub dup: f64,
    /// Flip one bit somewhere in the packet on the wire.
    pub corrupt: f64,
    /// Flip one bit of the payload after it was placed in the receive buffer.
    pub corrupt_placed: f64,
    /// One-way delay is uniform in [min, max] (a wide range reorders).
    pub min_delay: Duration,
    pub max_delay: Duration,
    /// From this simulated offset on, everything on this BTL is lost.
    pub blackhole_at: Option<Duration>,
    /// (node, from): from this simulated offset on, everything sent towards `node` on this
    /// BTL is lost; the other direction keeps working (a one-way path death).
    pub blackhole_towards: Option<(usize, Duration)>,
    /// The BTL never reports local completion (wedged device).
    pub never_completes: bool,
    /// Serialization rate in bytes per second (per direction).
    pub bytes_per_sec: u64,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            drop: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            corrupt_placed: 0.0,
            min_delay: Duration::from_micros(20),
            max_delay: Duration::from_micros(20),
            blackhole_at: None,
            blackhole_towards: None,
            never_completes: false,
            bytes_per_sec: 125_000_000,
        }
    }
}

/// What the simulator injected (to bound retransmissions against).
#[derive(Debug, Clone, Default)]
pub struct Injected {
    pub packets: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub corrupted_placed: u64,
    pub blackholed: u64,
}

/// Byte `i` of message `seq` sent by node `node`.
pub fn pattern(node: usize, seq: u64, i: u64) -> u8 {
    let x = (node as u64 + 1)
        .wrapping_mul(0x9e37_79b9)
        .wrapping_add(seq.wrapping_mul(0x85eb_ca6b))
        .wrapping_add(i.wrapping_mul(0xc2b2_ae35));
    (x ^ (x >> 13) ^ (x >> 29)) as u8
}

pub struct Node {
    pub conn: Connection,
    pub id: usize,
    /// Sent messages' buffers by seq (kept until SendComplete, as an MPI send buffer is).
    pub send_bufs: HashMap<u64, Vec<u8>>,
    /// Receive buffers by seq (allocated at the first arrival, like a staging buffer).
    pub recv_bufs: HashMap<u64, Vec<u8>>,
    pub announced: Vec<(u64, MatchFields, u64, bool)>,
    pub received: Vec<u64>,
    pub send_complete: Vec<u64>,
    pub send_failed: Vec<u64>,
    pub recv_failed: Vec<u64>,
    pub btl_failed: Vec<usize>,
    pub btl_fail_reasons: Vec<BtlFailReason>,
    pub dead: Option<(Duration, DeathReason)>,
    /// Rendezvous messages to match at a (simulated) time.
    pub to_match: Vec<(Instant, u64)>,
    pub sent_lens: Vec<u64>,
    /// When this node matched each rendezvous message it received.
    pub matched_at: HashMap<u64, Duration>,
    /// When each of this node's sends completed.
    pub completed_at: HashMap<u64, Duration>,
}

/// A packet on the wire: (deliver at, tie-break order, to node, btl, bytes).
type InFlight = (Instant, u64, usize, usize, Vec<u8>);

pub struct Sim {
    pub base: Instant,
    pub now: Instant,
    pub nodes: Vec<Node>,
    pub faults: Vec<Faults>,
    /// (deliver at, order, to node, btl, bytes)
    wire: BinaryHeap<Reverse<InFlight>>,
    order: u64,
    /// When each (btl, direction) finishes serializing what it was given.
    link_free: HashMap<(usize, usize), Instant>,
    pub rng: Rng,
    pub injected: Injected,
    /// Delay before a receiver matches a rendezvous message (uniform in [0, max]).
    pub match_delay_max: Duration,
    pub steps: u64,
    /// Print the connection state just before a call that fails a BTL (debugging aid).
    pub debug_death: bool,
    /// Simulated time of the last packet delivered to each node.
    pub last_rx: [Duration; 2],
}

pub const MAX_SEND: usize = 1024;

impl Sim {
    pub fn new(seed: u64, cfg: Config, faults: Vec<Faults>, max_send: &[usize]) -> Self {
        let base = Instant::now();
        let paths: Vec<PathConfig> = max_send
            .iter()
            .enumerate()
            .map(|(btl, &m)| PathConfig {
                btl,
                max_send_size: m,
                need_csum: true,
                need_ack: true,
            })
            .collect();
        let nodes = (0..2)
            .map(|id| Node {
                conn: Connection::new(base, cfg.clone(), &paths).expect("valid config"),
                id,
                send_bufs: HashMap::new(),
                recv_bufs: HashMap::new(),
                announced: Vec::new(),
                received: Vec::new(),
                send_complete: Vec::new(),
                send_failed: Vec::new(),
                recv_failed: Vec::new(),
                btl_failed: Vec::new(),
                btl_fail_reasons: Vec::new(),
                dead: None,
                to_match: Vec::new(),
                sent_lens: Vec::new(),
                matched_at: HashMap::new(),
                completed_at: HashMap::new(),
            })
            .collect();
        Self {
            base,
            now: base,
            nodes,
            faults,
            wire: BinaryHeap::new(),
            order: 0,
            link_free: HashMap::new(),
            rng: Rng::new(seed),
            injected: Injected::default(),
            match_delay_max: Duration::ZERO,
            steps: 0,
            debug_death: false,
            last_rx: [Duration::ZERO; 2],
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.now - self.base
    }

    /// Node `n` sends a message of `len` bytes (tag = seq, ctx = 7, src = n).
    pub fn send(&mut self, n: usize, len: u64) -> u64 {
        self.send_with(n, len, false)
    }

    /// Like [`Sim::send`], optionally synchronous (complete only once matched).
    pub fn send_with(&mut self, n: usize, len: u64, synchronous: bool) -> u64 {
        let node = &mut self.nodes[n];
        let seq_guess = node.sent_lens.len() as u64;
        let m = MatchFields {
            ctx: 7,
            src: n as u32,
            tag: seq_guess as i32,
        };
        let seq = node
            .conn
            .send_message_with(self.now, m, len, synchronous)
            .expect("peer alive");
        assert_eq!(seq, seq_guess, "sequence numbers are dense");
        node.send_bufs
            .insert(seq, (0..len).map(|i| pattern(n, seq, i)).collect());
        node.sent_lens.push(len);
        seq
    }

    fn blackholed(&self, btl: usize) -> bool {
        self.faults[btl]
            .blackhole_at
            .is_some_and(|t| self.elapsed() >= t)
    }

    fn put_on_wire(&mut self, to: usize, btl: usize, mut bytes: Vec<u8>) {
        self.injected.packets += 1;
        if self.debug_death {
            eprintln!(
                "{:?} {}->{} {:?}",
                self.elapsed(),
                1 - to,
                to,
                rmca_pml_dr::proto::wire::parse(&bytes)
            );
        }
        let one_way = self.faults[btl]
            .blackhole_towards
            .is_some_and(|(n, t)| n == to && self.elapsed() >= t);
        if self.blackholed(btl) || one_way {
            self.injected.blackholed += 1;
            return;
        }
        let f = self.faults[btl].clone();
        if self.rng.chance(f.drop) {
            if self.debug_death {
                eprintln!("  dropped");
            }
            self.injected.dropped += 1;
            return;
        }
        if self.rng.chance(f.corrupt) {
            self.injected.corrupted += 1;
            let bit = self.rng.below(bytes.len() as u64 * 8) as usize;
            bytes[bit / 8] ^= 1 << (bit % 8);
        }
        let free = self.link_free.entry((btl, to)).or_insert(self.now);
        let start = (*free).max(self.now);
        let ser = Duration::from_nanos(bytes.len() as u64 * 1_000_000_000 / f.bytes_per_sec);
        *free = start + ser;
        let sent_at = start + ser;
        let copies = if self.rng.chance(f.dup) {
            self.injected.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let span = (f.max_delay - f.min_delay).as_nanos() as u64;
            let delay = f.min_delay + Duration::from_nanos(self.rng.below(span + 1));
            self.order += 1;
            self.wire.push(Reverse((
                sent_at + delay,
                self.order,
                to,
                btl,
                bytes.clone(),
            )));
        }
    }

    /// Drives both nodes until `done` holds or nothing is left to do; panics after `max_time` of
    /// simulated time or too many steps (a hang).
    pub fn run(&mut self, max_time: Duration, mut done: impl FnMut(&Sim) -> bool) {
        loop {
            self.steps += 1;
            assert!(
                self.steps < 5_000_000,
                "simulation did not converge (steps)"
            );
            assert!(
                self.elapsed() <= max_time,
                "simulation exceeded {max_time:?} of simulated time"
            );
            let mut progressed = false;
            for n in 0..2 {
                progressed |= self.service(n);
            }
            while let Some(Reverse((t, ..))) = self.wire.peek() {
                if *t > self.now {
                    break;
                }
                let Reverse((_, _, to, btl, bytes)) = self.wire.pop().expect("peeked");
                self.deliver(to, btl, &bytes);
                progressed = true;
            }
            if progressed {
                continue;
            }
            if done(self) {
                return;
            }
            // Advance time to the next thing that can happen.
            let mut next: Option<Instant> = self.wire.peek().map(|Reverse((t, ..))| *t);
            for node in &self.nodes {
                for t in node
                    .conn
                    .poll_timeout()
                    .into_iter()
                    .chain(node.to_match.iter().map(|m| m.0))
                {
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
            }
            match next {
                Some(t) => self.now = self.now.max(t),
                None => return,
            }
        }
    }

    /// Timers, matches, transmissions and events of node `n`. True if anything happened.
    fn service(&mut self, n: usize) -> bool {
        let now = self.now;
        let mut progressed = false;
        // The connection remembers its answers between changes: they must equal fresh ones.
        let c = &self.nodes[n].conn;
        assert_eq!(
            c.poll_timeout(),
            c.poll_timeout_uncached(),
            "remembered timeout is stale"
        );
        if self.nodes[n].conn.poll_timeout().is_some_and(|t| t <= now) {
            let before = self
                .debug_death
                .then(|| format!("{:#?}", self.nodes[n].conn));
            let failovers = self.nodes[n].conn.counters().failovers;
            self.nodes[n].conn.handle_timeout(now);
            if let Some(b) = before {
                let c = &self.nodes[n].conn;
                if c.is_dead().is_some() || c.counters().failovers != failovers {
                    eprintln!("node {n} at {:?} before failing:\n{b}", self.elapsed());
                }
            }
            progressed = true;
        }
        let due: Vec<u64> = {
            let node = &mut self.nodes[n];
            let (due, keep): (Vec<_>, Vec<_>) = node.to_match.iter().partition(|m| m.0 <= now);
            node.to_match = keep;
            due.into_iter().map(|m| m.1).collect()
        };
        let elapsed = self.elapsed();
        for seq in due {
            self.nodes[n].matched_at.insert(seq, elapsed);
            self.nodes[n].conn.matched(now, seq);
            progressed = true;
        }
        while let Some(t) = self.nodes[n].conn.poll_transmit(now) {
            progressed = true;
            match t {
                Transmit::Ack { btl, bytes } => self.put_on_wire(1 - n, btl, bytes.to_vec()),
                Transmit::Data(d) => {
                    let node = &mut self.nodes[n];
                    let buf = &node.send_bufs[&d.seq];
                    let payload = &buf[d.offset as usize..d.offset as usize + d.len];
                    let header = d.seal(payload).expect("described range");
                    let mut pkt = header.to_vec();
                    pkt.extend_from_slice(payload);
                    if !self.faults[d.btl].never_completes {
                        node.conn.local_complete(d.token);
                    }
                    self.put_on_wire(1 - n, d.btl, pkt);
                }
            }
        }
        let c = &self.nodes[n].conn;
        assert!(
            !c.has_transmit(now),
            "poll_transmit returned nothing while a packet was due"
        );
        assert_eq!(
            c.poll_timeout(),
            c.poll_timeout_uncached(),
            "remembered timeout is stale"
        );
        progressed |= self.drain_events(n);
        progressed
    }

    fn drain_events(&mut self, n: usize) -> bool {
        let now = self.now;
        let elapsed = self.elapsed();
        let mut any = false;
        while let Some(e) = self.nodes[n].conn.poll_event() {
            any = true;
            let node = &mut self.nodes[n];
            match e {
                Event::IncomingMessage { seq, m, len, rndv } => {
                    node.announced.push((seq, m, len, rndv));
                    if rndv {
                        let span = self.match_delay_max.as_nanos() as u64;
                        let d = Duration::from_nanos(self.rng.below(span + 1));
                        node.to_match.push((now + d, seq));
                    }
                }
                Event::MessageReceived { seq } => node.received.push(seq),
                Event::SendComplete { seq } => {
                    node.completed_at.insert(seq, elapsed);
                    node.send_bufs.remove(&seq);
                    node.send_complete.push(seq);
                }
                Event::SendFailed { seq, .. } => node.send_failed.push(seq),
                Event::RecvFailed { seq, .. } => node.recv_failed.push(seq),
                Event::BtlFailed { btl, reason } => {
                    node.btl_failed.push(btl);
                    node.btl_fail_reasons.push(reason);
                }
                Event::PeerDead { reason } => {
                    assert!(node.dead.is_none(), "PeerDead reported twice");
                    node.dead = Some((elapsed, reason));
                }
            }
        }
        any
    }

    fn deliver(&mut self, to: usize, btl: usize, bytes: &[u8]) {
        let now = self.now;
        let corrupt_placed = self.rng.chance(self.faults[btl].corrupt_placed);
        let flip = self.rng.next_u64();
        self.last_rx[to] = self.elapsed();
        let node = &mut self.nodes[to];
        let Some(a) = node.conn.handle_packet(now, btl, bytes) else {
            return;
        };
        let buf = node
            .recv_bufs
            .entry(a.seq)
            .or_insert_with(|| vec![0u8; a.msg_len as usize]);
        assert_eq!(
            buf.len() as u64,
            a.msg_len,
            "message length changed between fragments"
        );
        let range = a.offset as usize..a.offset as usize + a.payload.len();
        buf[range.clone()].copy_from_slice(a.payload);
        if corrupt_placed && !a.payload.is_empty() {
            self.injected.corrupted_placed += 1;
            let bit = (flip % (a.payload.len() as u64 * 8)) as usize;
            buf[range.start + bit / 8] ^= 1 << (bit % 8);
        }
        let _ = node.conn.placed(now, a.token, &buf[range]);
    }

    /// Every message sent by `from` was announced in order, received exactly once and intact at
    /// the other node, and completed exactly once at `from`.
    pub fn assert_delivered(&self, from: usize) {
        let tx = &self.nodes[from];
        let rx = &self.nodes[1 - from];
        let n = tx.sent_lens.len() as u64;
        let seqs: Vec<u64> = rx.announced.iter().map(|a| a.0).collect();
        assert_eq!(
            seqs,
            (0..n).collect::<Vec<_>>(),
            "announced once each, in order"
        );
        for (seq, m, len, _) in &rx.announced {
            assert_eq!(*len, tx.sent_lens[*seq as usize]);
            assert_eq!(
                *m,
                MatchFields {
                    ctx: 7,
                    src: from as u32,
                    tag: *seq as i32
                }
            );
        }
        let mut got = rx.received.clone();
        got.sort_unstable();
        if got != (0..n).collect::<Vec<_>>() && std::env::var_os("DR_SIM_DUMP").is_some() {
            eprintln!("TX {:#?}\nRX {:#?}", tx.conn, rx.conn);
        }
        assert_eq!(
            got,
            (0..n).collect::<Vec<_>>(),
            "received exactly once each"
        );
        for seq in 0..n {
            let len = tx.sent_lens[seq as usize];
            let empty = Vec::new();
            let buf = rx.recv_bufs.get(&seq).unwrap_or(&empty);
            assert_eq!(buf.len() as u64, len, "message {seq} length");
            for (i, b) in buf.iter().enumerate() {
                assert_eq!(
                    *b,
                    pattern(from, seq, i as u64),
                    "message {seq} byte {i} corrupted"
                );
            }
        }
        let mut done = tx.send_complete.clone();
        done.sort_unstable();
        assert_eq!(
            done,
            (0..n).collect::<Vec<_>>(),
            "send completed exactly once each"
        );
    }

    pub fn all_done(&self) -> bool {
        self.nodes.iter().enumerate().all(|(i, node)| {
            node.send_complete.len() == node.sent_lens.len()
                && self.nodes[1 - i].received.len() == node.sent_lens.len()
        })
    }

    pub fn counters(&self, n: usize) -> Counters {
        self.nodes[n].conn.counters()
    }
}

/// Frags needed to send these messages once, cut as the protocol cuts them.
pub fn frags_needed(c: &Connection, vfrag_frags: u64, lens: &[u64]) -> u64 {
    let (f, eager) = (c.frag_size(), c.eager_limit());
    let mut n = 0;
    for &l in lens {
        if l <= eager {
            n += l.div_ceil(f).max(1);
        } else {
            n += eager.div_ceil(f).max(1);
            let mut rest = l - eager;
            while rest > 0 {
                let chunk = rest.min(f * vfrag_frags);
                n += chunk.div_ceil(f);
                rest -= chunk;
            }
        }
    }
    n
}

/// Convenience: lens from a map for debugging.
pub fn summarize(c: &Counters) -> BTreeMap<&'static str, u64> {
    BTreeMap::from([
        ("frags_sent", c.frags_sent),
        ("retx", c.retransmissions),
        ("lost", c.lost),
        ("spurious", c.spurious_retransmissions),
        ("dups", c.duplicates),
        ("dup_acks", c.duplicate_acks),
        ("csum", c.csum_failures),
        ("timeouts", c.timeouts),
        ("failovers", c.failovers),
        ("acks_sent", c.acks_sent),
        ("nacks_sent", c.nacks_sent),
        ("malformed", c.malformed),
    ])
}
