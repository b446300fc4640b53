//! The discrete-event simulation: N virtual processes, each holding one pml-dr
//! [`Connection`] (the real sans-IO protocol core, not a model of it) per peer it talks to,
//! over the modelled [`Network`]. The glue here does what pml-dr's PML glue does: it seals
//! data fragments, hands received packets to the core, places arrivals, matches rendezvous
//! messages, and runs each connection's timers when `poll_timeout` says so.
//!
//! Around the core, the models: each process has one CPU that handles packets one at a time
//! (`cpu_rx_ns`, `cpu_tx_ns` per packet) and btl-ud's receive pool (a packet arriving while
//! every receive buffer holds a packet the CPU has not handled yet is dropped, as a UD QP
//! with no posted receive drops it); the pool size is btl-ud's own
//! `UdConfig::recv_buffers_for`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{Duration, Instant};

use rmca_pml_dr::proto::{Connection, Counters, Event, MatchFields, PathConfig, Transmit};
use rmca_pml_dr::DrConfig;

use crate::net::{NetConfig, Network};
use crate::queue::EventQueue;
use crate::SimError;

/// btl-ud's fragment header, in front of every datagram (`rmca_btl_ud::header::HEADER_LEN`).
pub const UD_HEADER_LEN: usize = rmca_btl_ud::header::HEADER_LEN;
/// The global route header a UD receive buffer holds in front of the datagram.
pub const GRH_LEN: usize = 40;

/// The traffic the processes generate.
#[derive(Debug, Clone, PartialEq)]
pub enum Pattern {
    /// `iters` rounds of a pairwise exchange (a pairwise all-to-all): in step k = 1..n-1,
    /// process r sends `size` bytes to (r+k)%n and receives from (r-k)%n, and moves to the next
    /// step when both are complete (MPI_Sendrecv). Exactly `tools/rmca-sim/validate/pairwise.c`.
    Pairwise {
        /// Rounds.
        iters: u32,
        /// Message size in bytes.
        size: u64,
    },
    /// Process 0 exchanges one message of `size` bytes with every other process (what one rank
    /// of the allconn benchmark does): per-peer state of one process at scale.
    Star {
        /// Message size in bytes.
        size: u64,
    },
    /// Every process sends `size` bytes to each of its `fanout` successors every `interval_ns`
    /// until `until_ns` (a steady load for acknowledgement and timer rates, losses, deaths).
    Stream {
        /// Peers each process sends to: (r+1..=r+fanout)%n.
        fanout: u32,
        /// Time between two sends to one peer.
        interval_ns: u64,
        /// Message size in bytes.
        size: u64,
        /// Last send time.
        until_ns: u64,
    },
}

/// Everything a run depends on (with the seed, the whole output).
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Processes.
    pub n: usize,
    /// Seed of every random choice.
    pub seed: u64,
    /// The network.
    pub net: NetConfig,
    /// pml-dr's parameters.
    pub dr: DrConfig,
    /// UD MTU: the largest datagram (btl-ud header included).
    pub mtu: usize,
    /// btl-ud receive buffers per process.
    pub recv_buffers: usize,
    /// CPU time to handle one received packet (btl-ud + pml-dr), ns.
    pub cpu_rx_ns: u64,
    /// CPU time to send one packet, ns.
    pub cpu_tx_ns: u64,
    /// Processes that die (stop, silently) at a time, ns.
    pub deaths: Vec<(usize, u64)>,
    /// Traffic.
    pub pattern: Pattern,
    /// Simulated time limit, ns.
    pub max_time_ns: u64,
    /// Pairwise with one round only: free a pair's two connections once both are idle, nothing
    /// is in flight between them and no receive is posted for either, and drop the simulator's
    /// entry for the pair once its counts follow from the process's step (memory of the
    /// simulator, not of a job: the all-to-all at 16384 processes would otherwise hold 2^28
    /// entries). Exact there: each direction of a pair carries one message, so nothing a freed
    /// connection learnt is consulted again (property-tested against keeping them all).
    pub retire: bool,
    /// A second BTL to every peer, after the first in pml-dr's failover order, over its own
    /// modelled network (a reliable, rc-like BTL: pml-dr's flags NEED_ACK and NEED_CSUM off);
    /// None: one BTL (ud), as `pml dr` over `btl ud`.
    pub second_path: Option<NetConfig>,
    /// Processes whose first BTL (path 0) dies silently at a time, ns: from then on every
    /// packet it sends or that reaches it on that BTL is lost, and nothing reports it (the
    /// hard case: only pml-dr's timeouts can notice; `btl_ud_fault_blackhole_after` in a job).
    pub path_kills: Vec<(usize, u64)>,
    /// Pairwise pattern only: simulate process 0 alone and fold every other process onto it
    /// by rotational symmetry (exact without random loss or jitter, see [`Sim`]'s docs).
    pub fold: bool,
}

impl SimConfig {
    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |what: &str, value: String, valid: &str| {
            Err(SimError::Invalid {
                what: what.into(),
                value,
                valid: valid.into(),
            })
        };
        if !(2..=1 << 20).contains(&self.n) {
            return bad("--n", self.n.to_string(), "2..=1048576 processes");
        }
        if self.mtu <= UD_HEADER_LEN + rmca_pml_dr::proto::wire::DATA_HEADER_LEN || self.mtu > 65000
        {
            return bad(
                "--mtu",
                self.mtu.to_string(),
                "above btl-ud's 4 + pml-dr's 72 header bytes, at most 65000",
            );
        }
        if self.recv_buffers == 0 {
            return bad("receive buffers", "0".into(), "at least 1");
        }
        for &(p, _) in self.deaths.iter().chain(&self.path_kills) {
            if p >= self.n {
                return bad("--kill", p.to_string(), "a process below --n");
            }
        }
        if let Some(net) = &self.second_path {
            net.validate()?;
        }
        if self.fold {
            let why = if !matches!(self.pattern, Pattern::Pairwise { .. }) {
                Some("the pairwise pattern (the all-to-all) only")
            } else if !self.deaths.is_empty() || !self.path_kills.is_empty() {
                Some("no deaths or path kills (they single processes out)")
            } else if self.net.loss != crate::net::Loss::None || !self.net.bursts.is_empty() {
                Some("no loss (random losses differ between processes; fold is exact without)")
            } else if self.net.jitter_ns > 0 {
                Some("no jitter (random delays differ between processes)")
            } else if self.retire {
                Some("not with retire (the folded process keeps its n-1 connections)")
            } else {
                None
            };
            if let Some(valid) = why {
                return bad("fold", "on".into(), valid);
            }
        }
        if self.retire && !matches!(self.pattern, Pattern::Pairwise { iters: 1, .. }) {
            // A retired pair forgets what its connections learnt (the RTT estimate), which a
            // kept connection carries into the pair's next message: exact only where a pair
            // carries one message each way (tested against keeping every connection).
            return bad(
                "retire",
                "on".into(),
                "the pairwise pattern with one round only (each direction of a pair then \
                 carries one message)",
            );
        }
        match self.pattern {
            Pattern::Pairwise { iters: 0, .. } => return bad("--iters", "0".into(), ">= 1"),
            Pattern::Stream { fanout, .. } if fanout == 0 || fanout as usize >= self.n => {
                return bad("--fanout", fanout.to_string(), "1..n-1")
            }
            Pattern::Stream { interval_ns: 0, .. } => {
                return bad("--interval-us", "0".into(), "above 0")
            }
            _ => {}
        }
        self.net.validate()?;
        self.dr
            .validate()
            .map_err(|e| SimError::Param(e.to_string()))?;
        Ok(())
    }
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Messages posted by the processes.
    pub messages_sent: u64,
    /// Messages delivered (MessageReceived), each exactly once.
    pub messages_delivered: u64,
    /// Messages delivered a second time: a protocol violation, must stay 0.
    pub duplicate_deliveries: u64,
    /// pml-dr's counters summed over every connection.
    pub dr: Counters,
    /// `handle_timeout` calls (timers that fired).
    pub timer_fires: u64,
    /// Times a connection's next deadline changed (timers armed or re-armed).
    pub timer_arms: u64,
    /// Packets dropped because every btl-ud receive buffer was full.
    pub pool_drops: u64,
    /// Most receive buffers one process had in use at once.
    pub pool_peak: usize,
    /// Packets reaching a dead process or a retired pair.
    pub late_packets: u64,
    /// Detection delays (ns after the death) of each PeerDead event about a dead process.
    pub death_detections: Vec<u64>,
    /// PeerDead events about a live process (false positives).
    pub false_deaths: u64,
    /// Sends and receives failed by the core (peer dead).
    pub failed_ops: u64,
    /// Pairwise/star: when the last process finished (ns); None if not all did.
    pub completion_ns: Option<u64>,
    /// Stream with a burst: time from the burst's end until every message sent before it
    /// was delivered (ns).
    pub recovery_ns: Option<u64>,
    /// Path kill: time from the kill until, on every pair with a killed end, a message posted
    /// after the kill was delivered (traffic resumed, on the second BTL), ns.
    pub resume_ns: Option<u64>,
    /// Most small-send copies (`pml_dr_eager_copy`) one process held unacknowledged.
    pub copies_peak: u64,
    /// Most connections alive at once (all processes).
    pub conns_peak: usize,
    /// Connections alive at the end.
    pub conns_end: usize,
    /// Events processed.
    pub events: u64,
    /// Simulated time at the end (ns).
    pub end_ns: u64,
    /// The network's counters.
    pub net: crate::net::NetStats,
    /// The second BTL's network's counters.
    pub net2: crate::net::NetStats,
    /// Detection delays (ns after the kill) of each BtlFailed event about a killed path.
    pub btl_detections: Vec<u64>,
    /// BtlFailed events on a pair neither of whose ends had its path killed (false failovers).
    pub false_btl_failures: u64,
    /// Packets lost because their process's path 0 was killed.
    pub killed_packets: u64,
}

#[derive(Debug)]
struct Peer {
    /// None while the pair is quiescent and its connections were freed (`retire`).
    conn: Option<Box<Connection>>,
    armed: Option<Instant>,
    /// The key of the connection's timer in [`Sim`]'s `timers` (cancelled when re-armed or
    /// retired: no stale entries pile up behind retired pairs).
    timer: Option<(u64, u64)>,
    /// Pairwise: a receive from this peer is posted and waiting (pml-dr's
    /// `Connection::set_interest`, as its PML sets it for a posted receive).
    interest: bool,
    in_flight: u32,
    tx_posted: u32,
    tx_acked: u32,
    rx_announced: u32,
    rx_done: u32,
    /// Announced rendezvous messages not matched yet: (index from this peer, seq).
    rndv_wait: VecDeque<(u32, u64)>,
    /// Exactly-once check: every seq below was delivered; `rx_above` holds those above.
    rx_low: u64,
    rx_above: BTreeSet<u64>,
    /// Recovery: messages to this peer that must be delivered (0: none awaited).
    recover_target: u32,
    /// Path kill: messages to this peer posted before the kill; the pair has resumed once one
    /// posted after it is delivered.
    resume_after: Option<u32>,
    dead_reported: bool,
}

/// A multiplicative hash of the u32 peer keys (Fx's): SipHash's resistance to chosen keys buys
/// nothing for simulated ranks, costs time on every packet, and seeds each run differently (the
/// order of a map is now the same from run to run).
#[derive(Default)]
struct PeerHasher(u64);

impl Hasher for PeerHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

#[derive(Debug, Default)]
struct Proc {
    peers: HashMap<u32, Peer, BuildHasherDefault<PeerHasher>>,
    cpu_free: u64,
    /// When each packet now holding a receive buffer is handled (non-decreasing).
    busy: VecDeque<u64>,
    dead_at: Option<u64>,
    step: u64,
    send_done: bool,
    copies: u64,
    finished: bool,
}

enum Ev {
    /// A packet reaches the NIC of `to`.
    Arrive {
        to: u32,
        from: u32,
        btl: u8,
        pkt: Box<[u8]>,
    },
    /// `to`'s CPU handles it.
    Handle {
        to: u32,
        from: u32,
        btl: u8,
        pkt: Box<[u8]>,
    },
    /// A connection's deadline.
    Timer { node: u32, peer: u32 },
    /// A stream tick.
    Gen { node: u32 },
    /// A process dies.
    Death { node: u32 },
    /// A burst window ends or a path is killed (recovery measurement starts).
    BurstEnd,
}

/// The simulator.
///
/// **Folding** ([`SimConfig::fold`]): the pairwise all-to-all is invariant under the rotation
/// r -> r+1 (mod n): every process runs the same program on its offsets, every NIC and CPU is
/// modelled alike, and without random loss or jitter nothing random breaks the symmetry. So the
/// state of process r at any time is process 0's, relabelled, and process 0 alone is simulated:
/// a packet it sends to peer k is handled, as process k would handle it from process 0, by
/// process 0's connection to n-k, and queues at process 0's receiving NIC (process k's, in the
/// same state). Events per process, completion time and every per-message counter are those of
/// the full simulation (tested at every n up to 40 and compared at up to 1024 by
/// `rmca-sim alltoall --method both`); memory and time drop from O(n^2) to O(n).
pub struct Sim {
    cfg: SimConfig,
    base: Instant,
    q: EventQueue<Ev>,
    net: Network,
    net2: Option<Network>,
    procs: Vec<Proc>,
    paths: Vec<PathConfig>,
    zeros: Vec<u8>,
    stats: Stats,
    live_conns: usize,
    burst_end: Option<u64>,
    awaiting_recovery: u64,
    awaiting_resume: u64,
    unfinished: usize,
    /// Connections whose state changed outside their own servicing (a send posted, a
    /// rendezvous matched): serviced after the event.
    dirty: Vec<(u32, u32)>,
    /// Armed connection timers by (time, place in the queue's FIFO order): (process, peer).
    /// Kept apart from the queue so that re-arming or retiring cancels them.
    timers: BTreeMap<(u64, u64), (u32, u32)>,
}

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

impl Sim {
    /// A simulator ready to run.
    pub fn new(cfg: SimConfig) -> Result<Self, SimError> {
        cfg.validate()?;
        let net = Network::new(cfg.net.clone(), cfg.n, rmca_framework::rng::mix64(cfg.seed))?;
        let mut paths = vec![PathConfig {
            btl: 0,
            max_send_size: cfg.mtu - UD_HEADER_LEN,
            // btl-ud's flags: it checks no integrity and loses packets.
            need_csum: true,
            need_ack: true,
        }];
        let net2 = match &cfg.second_path {
            Some(c) => {
                paths.push(PathConfig {
                    btl: 1,
                    max_send_size: cfg.mtu - UD_HEADER_LEN,
                    need_csum: false,
                    need_ack: false,
                });
                let seed = rmca_framework::rng::mix64(cfg.seed ^ 0x0005_eed2);
                Some(Network::new(c.clone(), cfg.n, seed)?)
            }
            None => None,
        };
        Connection::check_paths(&paths).map_err(|e| SimError::Param(e.to_string()))?;
        let mut q = EventQueue::new();
        for &(p, at) in &cfg.deaths {
            q.push(at, Ev::Death { node: p as u32 });
        }
        if let Some(&(_, end)) = cfg.net.bursts.iter().max_by_key(|b| b.1) {
            q.push(end, Ev::BurstEnd);
        } else if let Some(&(_, at)) = cfg.path_kills.iter().min_by_key(|k| k.1) {
            q.push(at, Ev::BurstEnd);
        }
        let procs = (0..cfg.n).map(|_| Proc::default()).collect();
        let mut s = Self {
            zeros: vec![0; cfg.mtu],
            base: Instant::now(),
            q,
            net,
            net2,
            procs,
            paths,
            stats: Stats::default(),
            live_conns: 0,
            burst_end: None,
            awaiting_recovery: 0,
            awaiting_resume: 0,
            unfinished: 0,
            dirty: Vec::new(),
            timers: BTreeMap::new(),
            cfg,
        };
        match s.cfg.pattern {
            Pattern::Pairwise { .. } => {
                // Folded: process 0 stands for every process.
                let live = if s.cfg.fold { 1 } else { s.cfg.n };
                s.unfinished = live;
                for r in 0..live {
                    s.start_step(r as u32);
                    s.flush();
                }
            }
            Pattern::Star { size } => {
                s.unfinished = s.cfg.n - 1;
                for p in 1..s.cfg.n as u32 {
                    s.post_send(0, p, size);
                    s.post_send(p, 0, size);
                    s.flush();
                }
            }
            Pattern::Stream { .. } => {
                for r in 0..s.cfg.n as u32 {
                    s.q.push(0, Ev::Gen { node: r });
                }
            }
        }
        Ok(s)
    }

    fn at(&self, t: u64) -> Instant {
        self.base + Duration::from_nanos(t)
    }

    fn now(&self) -> u64 {
        self.q.now()
    }

    fn peer_mut(&mut self, node: u32, peer: u32) -> &mut Peer {
        let base = self.base;
        let cfg = &self.cfg;
        let paths = &self.paths;
        let (tx, rx) = self.implied(node, peer);
        let live = &mut self.live_conns;
        let peak = &mut self.stats.conns_peak;
        let p = self.procs[node as usize]
            .peers
            .entry(peer)
            .or_insert_with(|| Peer {
                conn: None,
                armed: None,
                timer: None,
                interest: false,
                in_flight: 0,
                tx_posted: tx,
                tx_acked: tx,
                rx_announced: rx,
                rx_done: rx,
                rndv_wait: VecDeque::new(),
                rx_low: 0,
                rx_above: BTreeSet::new(),
                recover_target: 0,
                resume_after: None,
                dead_reported: false,
            });
        if p.conn.is_none() {
            *live += 1;
            *peak = (*peak).max(*live);
            p.conn = Some(Box::new(
                Connection::new(base, cfg.dr.clone(), paths).expect("validated"),
            ));
        }
        p
    }

    fn post_send(&mut self, node: u32, to: u32, size: u64) {
        let now = self.at(self.now());
        let copy = size <= self.cfg.dr.eager_copy as u64;
        let m = MatchFields {
            ctx: 0,
            src: node,
            tag: 0,
        };
        self.dirty.push((node, to));
        let p = self.peer_mut(node, to);
        match p.conn.as_mut().expect("created").send_message(now, m, size) {
            Ok(_) => {
                p.tx_posted += 1;
                self.stats.messages_sent += 1;
                if copy {
                    let pr = &mut self.procs[node as usize];
                    pr.copies += 1;
                    self.stats.copies_peak = self.stats.copies_peak.max(pr.copies);
                }
            }
            Err(_) => self.stats.failed_ops += 1,
        }
    }

    /// Pairwise: (to, from) of step `step`.
    fn step_peers(&self, r: u32, step: u64) -> (u32, u32) {
        let n = self.cfg.n as u64;
        let k = step % (n - 1) + 1;
        (((r as u64 + k) % n) as u32, ((r as u64 + n - k) % n) as u32)
    }

    fn start_step(&mut self, r: u32) {
        let Pattern::Pairwise { iters, size } = self.cfg.pattern else {
            return;
        };
        let n = self.cfg.n as u64;
        let total = iters as u64 * (n - 1);
        loop {
            let step = self.procs[r as usize].step;
            if step >= total {
                if !self.procs[r as usize].finished {
                    self.procs[r as usize].finished = true;
                    self.unfinished -= 1;
                    if self.unfinished == 0 {
                        self.stats.completion_ns = Some(self.now());
                    }
                }
                return;
            }
            let (to, from) = self.step_peers(r, step);
            let iter = (step / (n - 1)) as u32;
            let pr = &self.procs[r as usize];
            if !pr.send_done {
                // Post this step's send once.
                let posted = pr
                    .peers
                    .get(&to)
                    .map_or(self.implied(r, to).0, |p| p.tx_posted);
                if posted <= iter {
                    self.post_send(r, to, size);
                }
                let p = &self.procs[r as usize].peers[&to];
                let copy = size <= self.cfg.dr.eager_copy as u64;
                if copy || p.tx_acked > iter || is_dead(p) {
                    self.procs[r as usize].send_done = true;
                }
            }
            // The receive: match a waiting rendezvous message, or see whether it arrived.
            // Looked up, not created: a connection made only to wait would never be retired
            // (nothing but a packet services it) and the glue sets no interest on it, so it
            // would do nothing (the first packet from the peer creates it).
            let now = self.at(self.now());
            let mut matched = false;
            let recv_done = match self.procs[r as usize].peers.get_mut(&from) {
                Some(fp) => {
                    if let Some(&(idx, seq)) = fp.rndv_wait.front() {
                        if idx == iter {
                            fp.rndv_wait.pop_front();
                            let c = fp.conn.as_mut().expect("announced on a live connection");
                            c.matched(now, seq);
                            matched = true;
                        }
                    }
                    fp.rx_done > iter || is_dead(fp)
                }
                None => false, // nothing received from `from` beyond the steps passed
            };
            // The receive is posted: as pml-dr's PML does, the connection awaits the peer
            // (silence then counts towards its death, keepalives probe it) until it is done.
            let waiting = !recv_done;
            let fp = if waiting {
                Some(self.peer_mut(r, from))
            } else {
                self.procs[r as usize].peers.get_mut(&from)
            };
            if let Some(fp) = fp.filter(|fp| fp.interest != waiting) {
                if let Some(c) = fp.conn.as_mut() {
                    fp.interest = waiting;
                    c.set_interest(now, waiting);
                    matched = true;
                }
            }
            if matched {
                self.dirty.push((r, from));
            }
            if self.procs[r as usize].send_done && recv_done {
                let pr = &mut self.procs[r as usize];
                pr.step += 1;
                pr.send_done = false;
                if self.cfg.retire {
                    // The pairs of the step just left may be finished now.
                    self.maybe_retire(r, to);
                    self.maybe_retire(r, from);
                    self.prune(r, to);
                    self.prune(r, from);
                }
                continue;
            }
            return;
        }
    }

    /// Runs until nothing is left to do or the time limit; returns what was measured.
    pub fn run(mut self) -> Stats {
        while let Some((t, ev)) = self.next_event() {
            if t > self.cfg.max_time_ns {
                break;
            }
            self.event(t, ev);
            self.flush();
        }
        let mut stats = std::mem::take(&mut self.stats);
        for p in &self.procs {
            for peer in p.peers.values() {
                if let Some(c) = &peer.conn {
                    stats.dr.add(&c.counters());
                }
            }
        }
        stats.events = self.q.popped;
        stats.end_ns = self.q.now();
        stats.net = self.net.stats.clone();
        if let Some(n2) = &self.net2 {
            stats.net2 = n2.stats.clone();
        }
        stats.conns_end = self.live_conns;
        stats
    }

    /// Runs, then returns the stats and the heap bytes process 0's per-peer state held (its
    /// map of connections, measured by dropping it under the counting allocator).
    pub fn run_measuring_proc0(mut self) -> (Stats, usize, usize) {
        while let Some((t, ev)) = self.next_event() {
            if t > self.cfg.max_time_ns {
                break;
            }
            self.event(t, ev);
            self.flush();
        }
        let mut stats = std::mem::take(&mut self.stats);
        for p in &self.procs {
            for peer in p.peers.values() {
                if let Some(c) = &peer.conn {
                    stats.dr.add(&c.counters());
                }
            }
        }
        stats.events = self.q.popped;
        stats.end_ns = self.q.now();
        stats.net = self.net.stats.clone();
        let peers = std::mem::take(&mut self.procs[0].peers);
        let count = peers.len();
        // Only the connections: the simulator's own bookkeeping around each is not counted.
        let conns: Vec<Box<Connection>> = peers.into_values().filter_map(|p| p.conn).collect();
        let before = crate::heap::live();
        drop(conns);
        let heap = before.saturating_sub(crate::heap::live());
        (stats, count, heap)
    }

    /// The earliest of the queue's next event and the first armed timer (by time, then FIFO).
    fn next_event(&mut self) -> Option<(u64, Ev)> {
        let timer = self.timers.first_key_value().map(|(&k, _)| k);
        match (timer, self.q.peek_key()) {
            (Some(k), q) if q.is_none_or(|q| k < q) => {
                let (_, (node, peer)) = self.timers.pop_first().expect("peeked");
                self.q.advance(k.0);
                if let Some(p) = self.procs[node as usize].peers.get_mut(&peer) {
                    p.timer = None;
                }
                Some((k.0, Ev::Timer { node, peer }))
            }
            _ => self.q.pop(),
        }
    }

    fn event(&mut self, t: u64, ev: Ev) {
        match ev {
            Ev::Arrive { to, from, btl, pkt } => {
                if btl == 0 && self.path_killed(to, t) {
                    self.stats.killed_packets += 1;
                    return self.landed(from, to);
                }
                let pr = &mut self.procs[to as usize];
                if pr.dead_at.is_some() {
                    self.stats.late_packets += 1;
                    return self.landed(from, to);
                }
                while pr.busy.front().is_some_and(|&d| d <= t) {
                    pr.busy.pop_front();
                }
                if pr.busy.len() >= self.cfg.recv_buffers {
                    self.stats.pool_drops += 1;
                    return self.landed(from, to);
                }
                let start = t.max(pr.cpu_free);
                pr.cpu_free = start + self.cfg.cpu_rx_ns;
                pr.busy.push_back(pr.cpu_free);
                self.stats.pool_peak = self.stats.pool_peak.max(pr.busy.len());
                let at = pr.cpu_free;
                self.q.push(at, Ev::Handle { to, from, btl, pkt });
            }
            Ev::Handle { to, from, btl, pkt } => {
                self.landed(from, to);
                if self.procs[to as usize].dead_at.is_some() {
                    self.stats.late_packets += 1;
                    return;
                }
                if !self.procs[to as usize].peers.contains_key(&from) && self.retired(to, from) {
                    self.stats.late_packets += 1;
                    return;
                }
                let now = self.at(t);
                let c = self.peer_mut(to, from).conn.as_mut().expect("created");
                if let Some(a) = c.handle_packet(now, btl as usize, &pkt) {
                    // Placed as received: the payload was not corrupted in this model.
                    let token = a.token;
                    let range = pkt.len() - a.payload.len()..pkt.len();
                    let _ = c.placed(now, token, &pkt[range]);
                }
                self.service_pair(to, from);
            }
            Ev::Timer { node, peer } => {
                if self.procs[node as usize].dead_at.is_some() {
                    return;
                }
                let now = self.at(t);
                let Some(p) = self.procs[node as usize].peers.get_mut(&peer) else {
                    return;
                };
                if p.armed.is_none_or(|a| a > now) {
                    return; // re-armed later (or disarmed) since: a stale entry
                }
                p.armed = None;
                let Some(c) = p.conn.as_mut() else {
                    return; // freed while quiescent
                };
                c.handle_timeout(now);
                self.stats.timer_fires += 1;
                self.service_pair(node, peer);
            }
            Ev::Gen { node } => {
                let Pattern::Stream {
                    fanout,
                    interval_ns,
                    size,
                    until_ns,
                } = self.cfg.pattern
                else {
                    return;
                };
                if self.procs[node as usize].dead_at.is_some() {
                    return;
                }
                let n = self.cfg.n as u32;
                for j in 1..=fanout {
                    let to = (node + j) % n;
                    if self.procs[node as usize]
                        .peers
                        .get(&to)
                        .is_some_and(is_dead)
                    {
                        continue; // the application stops talking to a peer it knows dead
                    }
                    self.post_send(node, to, size);
                }
                if t + interval_ns <= until_ns {
                    self.q.push(t + interval_ns, Ev::Gen { node });
                }
            }
            Ev::Death { node } => {
                let pr = &mut self.procs[node as usize];
                pr.dead_at = Some(t);
                // Pairwise: the job completes when every live process has (the others fail
                // their operations on the dead one once pml-dr declares it dead).
                if matches!(self.cfg.pattern, Pattern::Pairwise { .. }) && !pr.finished {
                    pr.finished = true;
                    self.unfinished -= 1;
                    if self.unfinished == 0 {
                        self.stats.completion_ns = Some(t);
                    }
                }
            }
            Ev::BurstEnd => {
                self.burst_end = Some(t);
                for a in 0..self.cfg.n as u32 {
                    let targets: Vec<(u32, u32)> = self.procs[a as usize]
                        .peers
                        .iter()
                        .map(|(&b, p)| (b, p.tx_posted))
                        .collect();
                    for (b, target) in targets {
                        let got = self.procs[b as usize]
                            .peers
                            .get(&a)
                            .map_or(self.implied(b, a).1, |p| p.rx_done);
                        // Pairs carrying traffic (a pair only acknowledging has nothing to
                        // resume).
                        if target > 0 && self.pair_kill(a, b, t).is_some() {
                            let p = self.procs[a as usize].peers.get_mut(&b).expect("listed");
                            p.resume_after = Some(target);
                            self.awaiting_resume += 1;
                        }
                        if got < target {
                            self.procs[a as usize]
                                .peers
                                .get_mut(&b)
                                .expect("listed")
                                .recover_target = target;
                            self.awaiting_recovery += 1;
                        }
                    }
                }
                if self.awaiting_recovery == 0 {
                    self.stats.recovery_ns = Some(0);
                }
            }
        }
    }

    /// Whether `node`'s path 0 is dead at `t`.
    fn path_killed(&self, node: u32, t: u64) -> bool {
        self.cfg
            .path_kills
            .iter()
            .any(|&(p, at)| p == node as usize && at <= t)
    }

    /// The kill time of the pair's path 0 (the earlier end's), if one end's was killed by `t`.
    fn pair_kill(&self, a: u32, b: u32, t: u64) -> Option<u64> {
        self.cfg
            .path_kills
            .iter()
            .filter(|&&(p, at)| (p == a as usize || p == b as usize) && at <= t)
            .map(|&(_, at)| at)
            .min()
    }

    /// Where a packet `node` sends to `peer` is handled: (process, the peer it came from as
    /// that process sees it). Folded, the rotation taking `peer` to 0 takes `node` (0) to
    /// n - peer: the packet reaches process 0's connection to n - peer, whose state is, by
    /// symmetry, that of `peer`'s connection to 0.
    fn route(&self, node: u32, peer: u32) -> (u32, u32) {
        if self.cfg.fold {
            let n = self.cfg.n as u32;
            (0, (n - peer) % n)
        } else {
            (peer, node)
        }
    }

    /// A packet for a pair without connection whose exchanges are over: it was retired.
    fn retired(&self, to: u32, from: u32) -> bool {
        self.cfg.retire && self.pair_done_count(to, from)
    }

    /// Pairwise: whether process `a` has finished every exchange with `b` (both directions).
    fn pair_done_count(&self, a: u32, b: u32) -> bool {
        let Pattern::Pairwise { iters, .. } = self.cfg.pattern else {
            return false;
        };
        let n = self.cfg.n as u64;
        let k_to = (b as u64 + n - a as u64) % n; // a sends to b in step k_to - 1 of each iter
        let k_from = (a as u64 + n - b as u64) % n; // a receives from b in step k_from - 1
        let last_to = (iters as u64 - 1) * (n - 1) + k_to - 1;
        let last_from = (iters as u64 - 1) * (n - 1) + k_from - 1;
        self.procs[a as usize].step > last_to.max(last_from)
    }

    fn landed(&mut self, from: u32, to: u32) {
        if let Some(p) = self.procs[from as usize].peers.get_mut(&to) {
            p.in_flight = p.in_flight.saturating_sub(1);
        }
    }

    /// Services every connection marked dirty (until none is).
    fn flush(&mut self) {
        while let Some((a, b)) = self.dirty.pop() {
            self.service_pair(a, b);
        }
    }

    fn service_pair(&mut self, node: u32, peer: u32) {
        let t = self.now();
        let now = self.at(t);
        let dead = self.procs[node as usize].dead_at.is_some();
        if dead {
            return;
        }
        let Some(p) = self.procs[node as usize].peers.get_mut(&peer) else {
            return;
        };
        if p.conn.is_none() {
            return;
        }
        // Transmissions.
        let mut out: Vec<(usize, Box<[u8]>)> = Vec::new();
        let c = p.conn.as_mut().expect("checked");
        while let Some(tx) = c.poll_transmit(now) {
            match tx {
                Transmit::Ack { btl, bytes } => out.push((btl, bytes.to_vec().into_boxed_slice())),
                Transmit::Data(d) => {
                    let payload = &self.zeros[..d.len];
                    let hdr = d.seal(payload).expect("the described length");
                    let mut pkt = Vec::with_capacity(hdr.len() + d.len);
                    pkt.extend_from_slice(&hdr);
                    pkt.extend_from_slice(payload);
                    c.local_complete(d.token);
                    out.push((d.btl, pkt.into_boxed_slice()));
                }
            }
        }
        let (dst, src) = self.route(node, peer);
        for (btl, pkt) in out {
            let pr = &mut self.procs[node as usize];
            let start = t.max(pr.cpu_free);
            pr.cpu_free = start + self.cfg.cpu_tx_ns;
            let depart = pr.cpu_free;
            let net = match (btl, self.net2.as_mut()) {
                (1, Some(n2)) => n2,
                _ => &mut self.net,
            };
            // Folded, the destination's receive NIC is process 0's (same state by symmetry).
            let arrival = net.send(
                depart,
                node as usize,
                dst as usize,
                pkt.len() + UD_HEADER_LEN,
            );
            if btl == 0 && self.path_killed(node, depart) {
                // The NIC is dead: the send is accepted and goes nowhere (transmit time kept).
                self.stats.killed_packets += 1;
                continue;
            }
            if let Some(arr) = arrival {
                if let Some(p) = self.procs[node as usize].peers.get_mut(&peer) {
                    p.in_flight += 1;
                }
                self.q.push(
                    arr,
                    Ev::Arrive {
                        to: dst,
                        from: src,
                        btl: btl as u8,
                        pkt,
                    },
                );
            }
        }
        // Events.
        let mut advance = false;
        loop {
            let Some(p) = self.procs[node as usize].peers.get_mut(&peer) else {
                return;
            };
            let Some(e) = p.conn.as_mut().and_then(|c| c.poll_event()) else {
                break;
            };
            match e {
                Event::IncomingMessage { seq, rndv, .. } => {
                    let idx = p.rx_announced;
                    p.rx_announced += 1;
                    if rndv {
                        p.rndv_wait.push_back((idx, seq));
                        advance = true;
                    }
                    if !matches!(self.cfg.pattern, Pattern::Pairwise { .. }) && rndv {
                        // Other patterns post every receive up front.
                        p.rndv_wait.pop_back();
                        p.conn.as_mut().expect("polled").matched(now, seq);
                        self.dirty.push((node, peer));
                    }
                }
                Event::MessageReceived { seq } => {
                    if seq < p.rx_low || !p.rx_above.insert(seq) {
                        self.stats.duplicate_deliveries += 1;
                        continue;
                    }
                    while p.rx_above.remove(&p.rx_low) {
                        p.rx_low += 1;
                    }
                    p.rx_done += 1;
                    self.stats.messages_delivered += 1;
                    let rx_done = p.rx_done;
                    advance = true;
                    // Recovery: the sender's target for this pair.
                    if let Some(burst_end) = self.burst_end {
                        if let Some(s) = self.procs[peer as usize].peers.get_mut(&node) {
                            if s.recover_target > 0 && rx_done >= s.recover_target {
                                s.recover_target = 0;
                                self.awaiting_recovery -= 1;
                                if self.awaiting_recovery == 0 {
                                    self.stats.recovery_ns = Some(t - burst_end);
                                }
                            }
                            if s.resume_after.is_some_and(|r| rx_done > r) {
                                s.resume_after = None;
                                self.awaiting_resume -= 1;
                                if self.awaiting_resume == 0 {
                                    self.stats.resume_ns = Some(t - burst_end);
                                }
                            }
                        }
                    }
                    if let Pattern::Star { .. } = self.cfg.pattern {
                        if node == 0 {
                            self.unfinished -= 1;
                            if self.unfinished == 0 {
                                self.stats.completion_ns = Some(t);
                            }
                        }
                    }
                }
                Event::SendComplete { .. } => {
                    p.tx_acked += 1;
                    let copy = self.cfg.pattern_size() <= self.cfg.dr.eager_copy as u64;
                    if copy {
                        self.procs[node as usize].copies -= 1;
                    }
                    advance = true;
                }
                Event::SendFailed { .. } | Event::RecvFailed { .. } => {
                    self.stats.failed_ops += 1;
                    advance = true;
                }
                Event::BtlFailed { .. } => match self.pair_kill(node, peer, t) {
                    Some(k) => self.stats.btl_detections.push(t - k),
                    None => self.stats.false_btl_failures += 1,
                },
                Event::PeerDead { .. } => {
                    if !p.dead_reported {
                        p.dead_reported = true;
                        match self.procs[peer as usize].dead_at {
                            Some(d) => self.stats.death_detections.push(t.saturating_sub(d)),
                            None => self.stats.false_deaths += 1,
                        }
                    }
                    advance = true;
                }
            }
        }
        if advance {
            self.start_step(node);
        }
        // Re-arm the timer.
        let Some(p) = self.procs[node as usize].peers.get_mut(&peer) else {
            return;
        };
        let Some(c) = p.conn.as_ref() else {
            return;
        };
        let next = c.poll_timeout();
        if next != p.armed {
            p.armed = next;
            if let Some(k) = p.timer.take() {
                self.timers.remove(&k);
            }
            if let Some(d) = next {
                self.stats.timer_arms += 1;
                // Not before the clock, as the queue would clamp it.
                let at = ns(d.saturating_duration_since(self.base)).max(t);
                let key = (at, self.q.reserve_seq());
                self.timers.insert(key, (node, peer));
                p.timer = Some(key);
            }
        }
        if self.cfg.retire {
            self.maybe_retire(node, peer);
        }
    }

    fn maybe_retire(&mut self, a: u32, b: u32) {
        // An end without connection holds nothing for the pair (never made, or retired).
        let quiet = |s: &Self, x: u32, y: u32| {
            s.procs[x as usize].peers.get(&y).is_none_or(|p| {
                p.in_flight == 0
                    && p.rndv_wait.is_empty()
                    && !p.interest
                    && p.conn
                        .as_ref()
                        .is_none_or(|c| c.is_idle() && c.is_dead().is_none())
            })
        };
        let live = |s: &Self, x: u32, y: u32| {
            s.procs[x as usize]
                .peers
                .get(&y)
                .is_some_and(|p| p.conn.is_some())
        };
        if (live(self, a, b) || live(self, b, a)) && quiet(self, a, b) && quiet(self, b, a) {
            // Nothing in flight, nothing owed either way: both ends restart from fresh
            // connections if the pair talks again (sequence numbers restart together).
            for (x, y) in [(a, b), (b, a)] {
                let timers = &mut self.timers;
                let c = self.procs[x as usize].peers.get_mut(&y).and_then(|p| {
                    // The next connection numbers its messages from 0 again.
                    p.rx_low = 0;
                    p.rx_above.clear();
                    p.armed = None;
                    if let Some(k) = p.timer.take() {
                        timers.remove(&k);
                    }
                    p.conn.take()
                });
                if let Some(c) = c {
                    self.stats.dr.add(&c.counters());
                    self.live_conns -= 1;
                }
                self.prune(x, y);
            }
        }
    }

    /// Pairwise with `retire`: the exchange counts `a` would hold for `b` had it kept them
    /// since the start, given its step alone: (messages sent to `b`, messages received from
    /// `b`) = the steps before `a`'s current one whose send goes to `b` (whose receive comes
    /// from `b`). A pair whose counts are these needs no entry at all (see [`Sim::prune`]).
    fn implied(&self, a: u32, b: u32) -> (u32, u32) {
        if !self.cfg.retire || !matches!(self.cfg.pattern, Pattern::Pairwise { .. }) {
            return (0, 0);
        }
        let n = self.cfg.n as u64;
        let step = self.procs[a as usize].step;
        // Step s sends to a + (s % (n-1) + 1): to b in steps k-1, k-1 + (n-1), ... with k the
        // offset of b from a; the count of those below `step`.
        let before = |k: u64| ((step + n - 1 - k) / (n - 1)) as u32;
        let (a, b) = (a as u64, b as u64);
        (before((b + n - a) % n), before((a + n - b) % n))
    }

    /// Drops `a`'s entry for `b` when it holds nothing [`Sim::implied`] cannot give back: no
    /// connection, nothing in flight or waiting, counts equal to the implied ones, no
    /// measurement pending on it. So the simulator holds per-pair state only while a pair has
    /// traffic in flight or a message received ahead of its step (what keeps the all-to-all at
    /// 16384 processes in memory: O(pairs active at once), not O(n^2)).
    fn prune(&mut self, a: u32, b: u32) {
        if !self.cfg.retire || !matches!(self.cfg.pattern, Pattern::Pairwise { .. }) {
            return;
        }
        let (tx, rx) = self.implied(a, b);
        let peers = &mut self.procs[a as usize].peers;
        let removable = peers.get(&b).is_some_and(|p| {
            p.conn.is_none()
                && p.in_flight == 0
                && p.rndv_wait.is_empty()
                && p.rx_above.is_empty()
                && (p.tx_posted, p.tx_acked, p.rx_announced, p.rx_done) == (tx, tx, rx, rx)
                && p.timer.is_none()
                && !p.interest
                && p.recover_target == 0
                && p.resume_after.is_none()
                && !p.dead_reported
        });
        if removable {
            peers.remove(&b);
        }
    }
}

fn is_dead(p: &Peer) -> bool {
    p.conn.as_ref().is_some_and(|c| c.is_dead().is_some())
}

impl SimConfig {
    fn pattern_size(&self) -> u64 {
        match self.pattern {
            Pattern::Pairwise { size, .. }
            | Pattern::Star { size }
            | Pattern::Stream { size, .. } => size,
        }
    }
}
