//! A PMI-1 / PMI-2 server as a sans-IO state machine (used by `rmca-run`).
//!
//! The caller owns the sockets: it reports connections, bytes and disconnections with
//! [`PmiServer::connect`], [`PmiServer::handle_input`] and [`PmiServer::disconnect`], then drains
//! [`PmiServer::poll_transmit`] (bytes to write to a connection) and [`PmiServer::poll_event`]
//! (what the launcher must act on: aborts, finalizes, protocol errors). There is no clock here:
//! the server never times out by itself, the launcher's job monitor does.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::wire::{Framer, Message, OwnedMessage, WireVersion};

/// Identifies one connection, chosen by the caller.
pub type ConnId = u64;

/// Limits advertised by `get_maxes`, the same as Hydra's.
#[derive(Debug, Clone, Copy)]
pub struct Maxes {
    /// Longest KVS name.
    pub kvsname: usize,
    /// Longest key.
    pub keylen: usize,
    /// Longest value.
    pub vallen: usize,
}

impl Default for Maxes {
    fn default() -> Self {
        Self {
            kvsname: 256,
            keylen: 64,
            vallen: 1024,
        }
    }
}

/// Static description of the job served.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Number of ranks.
    pub size: u32,
    /// KVS name (also the PMI-2 job id).
    pub kvsname: String,
    /// Limits advertised to clients.
    pub maxes: Maxes,
    /// One-time tokens, one per rank, that a client connecting without a known rank (TCP,
    /// `PMI_PORT`) must present with its identity (`initack pmiid= token=` or PMI-2 `fullinit
    /// pmirank= token=`) before anything else is served: without them anyone who can reach the
    /// port could read the KVS (the job secret under launch agents) or abort the job. `None`
    /// serves any client (MPICH's servers do the same).
    pub tokens: Option<Vec<String>>,
    /// Keys present before any rank puts (e.g. `PMI_process_mapping`).
    pub preload: Vec<(String, String)>,
    /// How many clients of unknown rank are held, and for how long, before they identify.
    pub untrusted_limit: UntrustedLimit,
}

/// Bounds on clients that have not yet presented a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UntrustedLimit {
    /// At most this many are held at once (the oldest are evicted for newer ones).
    pub max: usize,
    /// Each is evicted this long after it connected.
    pub auth_timeout: Duration,
}

impl UntrustedLimit {
    /// Room for every rank of a job of `size` connecting at once, plus stragglers.
    pub fn for_job(size: u32) -> Self {
        Self {
            max: 2 * size as usize + 64,
            auth_timeout: Duration::from_secs(10),
        }
    }
}

/// Something the launcher must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// A rank completed PMI init on a connection.
    Initialized {
        /// The rank.
        rank: u32,
    },
    /// A rank called finalize.
    Finalized {
        /// The rank.
        rank: u32,
    },
    /// A rank asked to abort the job.
    Abort {
        /// The rank, if the connection had identified itself.
        rank: Option<u32>,
        /// Requested exit code.
        code: i32,
        /// Message given by the rank.
        message: String,
    },
    /// Every rank entered the barrier; replies were queued.
    BarrierComplete {
        /// Barriers completed so far, this one included.
        epoch: u64,
    },
    /// The connection sent something we cannot serve; the caller should close it (the client
    /// then sees EOF and fails instead of waiting forever for a reply).
    Close {
        /// The connection.
        conn: ConnId,
        /// The rank, if known.
        rank: Option<u32>,
        /// What was wrong.
        reason: String,
    },
}

#[derive(Debug)]
struct Conn {
    rank: Option<u32>,
    framer: Framer,
    /// Framing of replies (set by the client's init).
    version: WireVersion,
    finalized: bool,
    /// Socketpair connections (rank known at connect) and servers without tokens start out
    /// trusted; a TCP client becomes so by presenting its rank's token.
    trusted: bool,
    /// When an untrusted client connected (it must present a token before a deadline).
    since: Option<Instant>,
}

/// The PMI server state machine.
#[derive(Debug)]
pub struct PmiServer {
    cfg: ServerConfig,
    kvs: HashMap<String, String>,
    conns: HashMap<ConnId, Conn>,
    /// Ranks waiting in the current barrier, and the connections to answer.
    barrier: BTreeSet<u32>,
    barrier_conns: Vec<ConnId>,
    /// Ranks that died without finalizing while the job goes on (launcher's keep-going mode):
    /// no fence can complete without them, so fences fail instead of waiting forever.
    departed: BTreeSet<u32>,
    epoch: u64,
    transmit: VecDeque<(ConnId, Vec<u8>)>,
    events: VecDeque<ServerEvent>,
    dropped: u64,
}

impl PmiServer {
    /// A server for one job.
    pub fn new(cfg: ServerConfig) -> Self {
        let kvs = cfg.preload.iter().cloned().collect();
        Self {
            cfg,
            kvs,
            conns: HashMap::new(),
            barrier: BTreeSet::new(),
            barrier_conns: Vec::new(),
            departed: BTreeSet::new(),
            epoch: 0,
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            dropped: 0,
        }
    }

    /// A new connection; `rank` is known for `PMI_FD` socketpairs, `None` for TCP until the
    /// client identifies itself (`initack pmiid=` or PMI-2 `fullinit pmirank=`).
    pub fn connect(&mut self, conn: ConnId, rank: Option<u32>) {
        self.conns.insert(
            conn,
            Conn {
                rank,
                framer: Framer::new(),
                version: WireVersion::V1,
                finalized: false,
                trusted: rank.is_some() || self.cfg.tokens.is_none(),
                since: None,
            },
        );
    }

    /// A new client of unknown rank accepted at `now` (TCP). Until it presents its token it is
    /// held only for `auth_timeout`, and at most `max_untrusted` such clients are held: the
    /// oldest are evicted first, so a flood of idle or garbage clients cannot keep a late rank
    /// out. Returns the connections to close (already forgotten by the server).
    pub fn connect_untrusted(&mut self, conn: ConnId, now: Instant) -> Vec<ConnId> {
        self.connect(conn, None);
        if let Some(c) = self.conns.get_mut(&conn) {
            if !c.trusted {
                c.since = Some(now);
            }
        }
        self.evict_untrusted(now)
    }

    /// Connections whose authentication deadline passed, and the oldest untrusted ones beyond
    /// the limit; they are forgotten here and must be closed by the caller.
    pub fn evict_untrusted(&mut self, now: Instant) -> Vec<ConnId> {
        let limit = self.cfg.untrusted_limit;
        let mut waiting: Vec<(Instant, ConnId)> = self
            .conns
            .iter()
            .filter(|(_, c)| !c.trusted)
            .filter_map(|(&id, c)| c.since.map(|t| (t, id)))
            .collect();
        waiting.sort_unstable();
        let excess = waiting.len().saturating_sub(limit.max);
        let evict: Vec<ConnId> = waiting
            .iter()
            .enumerate()
            .filter(|(i, (t, _))| {
                *i < excess || now.saturating_duration_since(*t) >= limit.auth_timeout
            })
            .map(|(_, &(_, id))| id)
            .collect();
        for id in &evict {
            self.disconnect(*id);
        }
        evict
    }

    /// When the oldest untrusted client's authentication deadline passes.
    pub fn untrusted_deadline(&self) -> Option<Instant> {
        self.conns
            .values()
            .filter(|c| !c.trusted)
            .filter_map(|c| c.since)
            .min()
            .map(|t| t + self.cfg.untrusted_limit.auth_timeout)
    }

    /// The connection went away. Returns the rank and whether it had finalized.
    pub fn disconnect(&mut self, conn: ConnId) -> Option<(Option<u32>, bool)> {
        let c = self.conns.remove(&conn)?;
        self.barrier_conns.retain(|&x| x != conn);
        Some((c.rank, c.finalized))
    }

    /// Bytes received on a connection.
    pub fn handle_input(&mut self, conn: ConnId, data: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else {
            self.dropped += 1;
            return;
        };
        c.framer.push(data);
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            let frame = match c.framer.next_frame() {
                None => return,
                Some(Ok(f)) => f,
                Some(Err(e)) => {
                    self.reject(conn, format!("malformed PMI message: {e}"));
                    return;
                }
            };
            let msg = match frame.parse() {
                Ok(m) => m,
                Err(e) => {
                    self.reject(conn, format!("malformed PMI message: {e}"));
                    return;
                }
            };
            if let Err(reason) = self.dispatch(conn, &msg) {
                self.reject(conn, reason);
                return;
            }
        }
    }

    /// Next bytes to write.
    pub fn poll_transmit(&mut self) -> Option<(ConnId, Vec<u8>)> {
        self.transmit.pop_front()
    }

    /// Next event for the launcher.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    /// Malformed or unexpected messages dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Ranks currently waiting in a barrier (for diagnostics on timeout).
    pub fn ranks_in_barrier(&self) -> Vec<u32> {
        self.barrier.iter().copied().collect()
    }

    fn reject(&mut self, conn: ConnId, reason: String) {
        self.dropped += 1;
        let rank = self.conns.get(&conn).and_then(|c| c.rank);
        tracing::warn!(conn, ?rank, %reason, "closing PMI connection");
        self.events
            .push_back(ServerEvent::Close { conn, rank, reason });
    }

    fn reply(&mut self, conn: ConnId, msg: OwnedMessage) {
        let version = self
            .conns
            .get(&conn)
            .map(|c| c.version)
            .unwrap_or(WireVersion::V1);
        self.transmit.push_back((conn, msg.encode(version)));
    }

    fn rank_of(&self, conn: ConnId) -> Option<u32> {
        self.conns.get(&conn).and_then(|c| c.rank)
    }

    fn need_rank(&self, conn: ConnId, cmd: &str) -> Result<u32, String> {
        self.rank_of(conn)
            .ok_or_else(|| format!("{cmd} before the connection identified its rank"))
    }

    fn parse_rank(&self, v: Option<&str>, what: &str) -> Result<u32, String> {
        let r: u32 = v
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("{what} missing or not a number"))?;
        if r >= self.cfg.size {
            return Err(format!(
                "{what}={r} out of range (job size {})",
                self.cfg.size
            ));
        }
        if self.conns.values().any(|c| c.rank == Some(r)) {
            return Err(format!("{what}={r} already connected"));
        }
        Ok(r)
    }

    fn check_put(&self, key: &str, value: &str) -> Result<(), String> {
        if key.len() > self.cfg.maxes.keylen {
            return Err(format!(
                "key of {} bytes exceeds keylen_max {}",
                key.len(),
                self.cfg.maxes.keylen
            ));
        }
        if value.len() > self.cfg.maxes.vallen {
            return Err(format!(
                "value of {} bytes exceeds vallen_max {}",
                value.len(),
                self.cfg.maxes.vallen
            ));
        }
        Ok(())
    }

    /// `rank` died without finalizing and the job goes on without it. Every fence, the one in
    /// progress and later ones, fails with `rc=1` and a message naming the dead ranks, so the
    /// survivors get an error from their fence (e.g. in finalize) instead of a hang.
    pub fn rank_departed(&mut self, rank: u32) {
        if self.departed.insert(rank) {
            self.fail_barrier();
        }
    }

    /// Answer the waiting fence with an error, if a departed rank makes it impossible.
    fn fail_barrier(&mut self) {
        if self.departed.is_empty() || self.barrier_conns.is_empty() {
            return;
        }
        let dead: Vec<String> = self.departed.iter().map(u32::to_string).collect();
        let msg = format!("fence cannot complete: rank(s) {} died", dead.join(","));
        let conns = std::mem::take(&mut self.barrier_conns);
        self.barrier.clear();
        for c in conns {
            let v = self.conns.get(&c).map(|c| c.version);
            let reply = match v {
                Some(WireVersion::V2) => OwnedMessage::new("kvs-fence-response"),
                _ => OwnedMessage::new("barrier_out"),
            };
            self.reply(c, reply.with("rc", 1).with("msg", &msg));
        }
    }

    fn enter_barrier(&mut self, conn: ConnId, rank: u32) {
        self.barrier.insert(rank);
        self.barrier_conns.push(conn);
        if !self.departed.is_empty() {
            self.fail_barrier();
            return;
        }
        if self.barrier.len() as u32 == self.cfg.size {
            self.epoch += 1;
            let conns = std::mem::take(&mut self.barrier_conns);
            self.barrier.clear();
            for c in conns {
                let v = self.conns.get(&c).map(|c| c.version);
                let msg = match v {
                    Some(WireVersion::V2) => OwnedMessage::new("kvs-fence-response").with("rc", 0),
                    _ => OwnedMessage::new("barrier_out").with("rc", 0),
                };
                self.reply(c, msg);
            }
            self.events
                .push_back(ServerEvent::BarrierComplete { epoch: self.epoch });
        }
    }

    /// Check the one-time token a TCP client presents for `rank`, and trust the connection.
    fn authenticate(&mut self, conn: ConnId, rank: u32, m: &Message<'_>) -> Result<(), String> {
        if self.conns.get(&conn).is_some_and(|c| c.trusted) {
            return Ok(());
        }
        let Some(tokens) = self.cfg.tokens.as_mut() else {
            return Ok(());
        };
        let expected = tokens.get_mut(rank as usize);
        match (expected, m.get("token")) {
            (Some(t), Some(given)) if !t.is_empty() && t.as_str() == given => {
                // One use: a token read from a command line cannot open a second connection.
                t.clear();
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.trusted = true;
                    c.since = None;
                }
                Ok(())
            }
            (_, None) => Err(format!(
                "unauthenticated PMI client claiming rank {rank}: no token (this server needs the one-time token its launcher gave the rank on standard input)"
            )),
            _ => Err(format!(
                "PMI client claiming rank {rank} presented a wrong or already used token"
            )),
        }
    }

    fn dispatch(&mut self, conn: ConnId, m: &Message<'_>) -> Result<(), String> {
        let cmd: &str = &m.cmd;
        let trusted = self.conns.get(&conn).is_some_and(|c| c.trusted);
        // Before it has identified itself with a token, a TCP client may only negotiate the
        // version and identify.
        if !trusted && !matches!(cmd, "init" | "initack" | "fullinit") {
            return Err(format!(
                "PMI command '{cmd}' from a client that has not authenticated"
            ));
        }
        match cmd {
            // ---- PMI-1 (and the PMI-1-framed init of PMI-2) ----
            "init" => {
                let v = m.get_int("pmi_version").unwrap_or(1);
                let (version, sub) = match v {
                    1 => (WireVersion::V1, 1),
                    2 => (WireVersion::V2, 0),
                    _ => return Err(format!("unsupported pmi_version={v} (1 and 2 are)")),
                };
                let reply = OwnedMessage::new("response_to_init")
                    .with("pmi_version", v)
                    .with("pmi_subversion", sub)
                    .with("rc", 0);
                self.reply(conn, reply);
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.version = version;
                }
                if version == WireVersion::V1 {
                    if let Some(rank) = self.rank_of(conn) {
                        self.events.push_back(ServerEvent::Initialized { rank });
                    }
                }
            }
            "initack" => {
                let rank = self.parse_rank(m.get("pmiid"), "pmiid")?;
                self.authenticate(conn, rank, m)?;
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.rank = Some(rank);
                }
                self.reply(conn, OwnedMessage::new("initack"));
                self.reply(conn, OwnedMessage::new("set").with("size", self.cfg.size));
                self.reply(conn, OwnedMessage::new("set").with("rank", rank));
                self.reply(conn, OwnedMessage::new("set").with("debug", 0));
            }
            "get_maxes" => {
                let mx = self.cfg.maxes;
                self.reply(
                    conn,
                    OwnedMessage::new("maxes")
                        .with("kvsname_max", mx.kvsname)
                        .with("keylen_max", mx.keylen)
                        .with("vallen_max", mx.vallen),
                );
            }
            "get_appnum" => self.reply(conn, OwnedMessage::new("appnum").with("appnum", 0)),
            "get_universe_size" => self.reply(
                conn,
                OwnedMessage::new("universe_size").with("size", self.cfg.size),
            ),
            "get_my_kvsname" => {
                let k = self.cfg.kvsname.clone();
                self.reply(conn, OwnedMessage::new("my_kvsname").with("kvsname", k));
            }
            "put" => {
                self.need_rank(conn, "put")?;
                let key = m.get("key").ok_or("put without key")?;
                let value = m.get("value").ok_or("put without value")?;
                let reply = match self.check_put(key, value) {
                    Ok(()) => {
                        self.kvs.insert(key.to_string(), value.to_string());
                        OwnedMessage::new("put_result")
                            .with("rc", 0)
                            .with("msg", "success")
                    }
                    Err(e) => OwnedMessage::new("put_result")
                        .with("rc", -1)
                        .with("msg", e),
                };
                self.reply(conn, reply);
            }
            "get" => {
                let key = m.get("key").ok_or("get without key")?;
                let reply = match self.kvs.get(key) {
                    Some(v) => OwnedMessage::new("get_result")
                        .with("rc", 0)
                        .with("msg", "success")
                        .with("value", v),
                    None => OwnedMessage::new("get_result")
                        .with("rc", -1)
                        .with("msg", "key_not_found"),
                };
                self.reply(conn, reply);
            }
            "barrier_in" => {
                let rank = self.need_rank(conn, "barrier_in")?;
                self.enter_barrier(conn, rank);
            }
            "finalize" => {
                let rank = self.need_rank(conn, "finalize")?;
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.finalized = true;
                }
                let v = self.conns.get(&conn).map(|c| c.version);
                let msg = if v == Some(WireVersion::V2) {
                    OwnedMessage::new("finalize-response").with("rc", 0)
                } else {
                    OwnedMessage::new("finalize_ack")
                };
                self.reply(conn, msg);
                self.events.push_back(ServerEvent::Finalized { rank });
            }
            "abort" => {
                let code = m.get_int("exitcode").unwrap_or(1) as i32;
                let message = m
                    .get("message")
                    .or_else(|| m.get("msg"))
                    .unwrap_or("")
                    .to_string();
                let rank = self.rank_of(conn);
                self.events.push_back(ServerEvent::Abort {
                    rank,
                    code,
                    message,
                });
            }
            // ---- PMI-2 ----
            "fullinit" => {
                let rank = match self.rank_of(conn) {
                    Some(r) => r,
                    None => {
                        let r = self.parse_rank(m.get("pmirank"), "pmirank")?;
                        self.authenticate(conn, r, m)?;
                        if let Some(c) = self.conns.get_mut(&conn) {
                            c.rank = Some(r);
                        }
                        r
                    }
                };
                self.reply(
                    conn,
                    OwnedMessage::new("fullinit-response")
                        .with("rc", 0)
                        .with("pmi-version", 2)
                        .with("pmi-subversion", 0)
                        .with("rank", rank)
                        .with("size", self.cfg.size)
                        .with("appnum", 0)
                        .with("debugged", "FALSE")
                        .with("pmiverbose", "FALSE"),
                );
                self.events.push_back(ServerEvent::Initialized { rank });
            }
            "job-getid" => {
                let k = self.cfg.kvsname.clone();
                self.reply(
                    conn,
                    OwnedMessage::new("job-getid-response")
                        .with("jobid", k)
                        .with("rc", 0),
                );
            }
            "kvs-put" => {
                self.need_rank(conn, "kvs-put")?;
                let key = m.get("key").ok_or("kvs-put without key")?;
                let value = m.get("value").ok_or("kvs-put without value")?;
                let reply = match self.check_put(key, value) {
                    Ok(()) => {
                        self.kvs.insert(key.to_string(), value.to_string());
                        OwnedMessage::new("kvs-put-response").with("rc", 0)
                    }
                    Err(e) => OwnedMessage::new("kvs-put-response")
                        .with("rc", -1)
                        .with("errmsg", e),
                };
                self.reply(conn, reply);
            }
            "kvs-get" | "info-getjobattr" => {
                let key = m.get("key").ok_or("kvs-get without key")?;
                let name = format!("{cmd}-response");
                let reply = match self.kvs.get(key) {
                    Some(v) => OwnedMessage::new(&name)
                        .with("found", "TRUE")
                        .with("value", v)
                        .with("rc", 0),
                    None => OwnedMessage::new(&name)
                        .with("found", "FALSE")
                        .with("rc", 0),
                };
                self.reply(conn, reply);
            }
            "info-getnodeattr" => self.reply(
                conn,
                OwnedMessage::new("info-getnodeattr-response")
                    .with("found", "FALSE")
                    .with("rc", 0),
            ),
            "info-putnodeattr" => self.reply(
                conn,
                OwnedMessage::new("info-putnodeattr-response").with("rc", 0),
            ),
            "kvs-fence" => {
                let rank = self.need_rank(conn, "kvs-fence")?;
                self.enter_barrier(conn, rank);
            }
            other => return Err(format!("unknown PMI command {other:?}")),
        }
        Ok(())
    }
}

/// Hydra's `PMI_process_mapping` value for a rank-to-node map in which each node's ranks are
/// contiguous: `(vector,(first_node,node_count,ranks_per_node),...)`. `None` if the map is not
/// blocked that way.
pub fn process_mapping(node_of_rank: &[u32]) -> Option<String> {
    // Run-length over ranks: (node, count).
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &n in node_of_rank {
        match runs.last_mut() {
            Some((ln, c)) if *ln == n => *c += 1,
            _ => runs.push((n, 1)),
        }
    }
    // Nodes must appear once each, in increasing order from 0.
    for (i, (n, _)) in runs.iter().enumerate() {
        if *n != i as u32 {
            return None;
        }
    }
    let mut segs: Vec<(u32, u32, u32)> = Vec::new();
    for (n, c) in runs {
        match segs.last_mut() {
            Some((_, nodes, ppn)) if *ppn == c => *nodes += 1,
            _ => segs.push((n, 1, c)),
        }
    }
    let body: Vec<String> = segs
        .iter()
        .map(|(s, n, p)| format!("({s},{n},{p})"))
        .collect();
    Some(format!("(vector,{})", body.join(",")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{parse_v1, parse_v2};

    fn server(size: u32) -> PmiServer {
        PmiServer::new(ServerConfig {
            size,
            kvsname: "kvs_test".into(),
            maxes: Maxes::default(),
            preload: vec![("PMI_process_mapping".into(), "(vector,(0,1,2))".into())],
            tokens: None,
            untrusted_limit: UntrustedLimit::for_job(size),
        })
    }

    fn send(s: &mut PmiServer, c: ConnId, m: OwnedMessage, v: WireVersion) {
        s.handle_input(c, &m.encode(v));
    }

    fn replies(s: &mut PmiServer) -> Vec<(ConnId, String)> {
        std::iter::from_fn(|| s.poll_transmit())
            .map(|(c, b)| (c, String::from_utf8(b).unwrap()))
            .collect()
    }

    #[test]
    fn barrier_releases_only_when_all_ranks_entered() {
        let mut s = server(2);
        s.connect(1, Some(0));
        s.connect(2, Some(1));
        send(&mut s, 1, OwnedMessage::new("barrier_in"), WireVersion::V1);
        assert!(replies(&mut s).is_empty());
        assert_eq!(s.ranks_in_barrier(), vec![0]);
        send(&mut s, 2, OwnedMessage::new("barrier_in"), WireVersion::V1);
        let r = replies(&mut s);
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|(_, t)| t.starts_with("cmd=barrier_out")));
        assert_eq!(
            s.poll_event(),
            Some(ServerEvent::BarrierComplete { epoch: 1 })
        );
    }

    #[test]
    fn fences_fail_once_a_rank_departed() {
        let mut s = server(3);
        for r in 0..3 {
            s.connect(u64::from(r) + 1, Some(r));
        }
        send(&mut s, 1, OwnedMessage::new("barrier_in"), WireVersion::V1);
        assert!(replies(&mut s).is_empty());
        s.rank_departed(2);
        let r = replies(&mut s);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(
            r[0].1.starts_with("cmd=barrier_out") && r[0].1.contains("rc=1"),
            "{r:?}"
        );
        assert!(r[0].1.contains(r"2\ died"), "names the dead rank: {r:?}");
        assert!(s.ranks_in_barrier().is_empty());
        // A later fence fails at once rather than waiting for the dead rank.
        send(&mut s, 2, OwnedMessage::new("barrier_in"), WireVersion::V1);
        let r = replies(&mut s);
        assert!(r.len() == 1 && r[0].1.contains("rc=1"), "{r:?}");
    }

    #[test]
    fn untrusted_clients_are_bounded_in_number_and_time() {
        let mut s = server(2);
        s.cfg.tokens = Some(vec!["aa11".into(), "bb22".into()]);
        s.cfg.untrusted_limit = UntrustedLimit {
            max: 3,
            auth_timeout: Duration::from_secs(10),
        };
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        for c in 0..3 {
            assert!(s.connect_untrusted(100 + c, at(c)).is_empty());
        }
        // A fourth idle client pushes out the oldest.
        assert_eq!(s.connect_untrusted(103, at(3)), vec![100]);
        // A rank that identifies is trusted and never evicted, however many idle clients follow.
        send(
            &mut s,
            101,
            OwnedMessage::new("initack")
                .with("pmiid", 0)
                .with("token", "aa11"),
            WireVersion::V1,
        );
        for c in 0..10 {
            let evicted = s.connect_untrusted(200 + c, at(10 + c));
            assert!(!evicted.contains(&101), "{evicted:?}");
        }
        assert_eq!(
            s.untrusted_deadline(),
            Some(at(17) + Duration::from_secs(10))
        );
        // Past the deadline every idle client goes; the trusted rank stays.
        let mut left = s.evict_untrusted(at(20_000));
        left.sort_unstable();
        assert_eq!(left, vec![207, 208, 209]);
        assert_eq!(s.untrusted_deadline(), None);
        assert!(s.disconnect(101).is_some(), "the trusted rank was kept");
    }

    #[test]
    fn tcp_clients_need_their_ranks_one_time_token() {
        let mut s = server(2);
        s.cfg.tokens = Some(vec!["aa11".into(), "bb22".into()]);
        // No token: refused, and nothing else is served on that connection.
        s.connect(100, None);
        send(
            &mut s,
            100,
            OwnedMessage::new("initack").with("pmiid", 0),
            WireVersion::V1,
        );
        assert!(
            matches!(s.poll_event(), Some(ServerEvent::Close { conn: 100, reason, .. }) if reason.contains("no token"))
        );
        s.connect(101, None);
        send(
            &mut s,
            101,
            OwnedMessage::new("get")
                .with("kvsname", "kvs_test")
                .with("key", "PMI_process_mapping"),
            WireVersion::V1,
        );
        assert!(
            matches!(s.poll_event(), Some(ServerEvent::Close { conn: 101, reason, .. }) if reason.contains("not authenticated"))
        );
        // Rank 1's token does not open rank 0.
        s.connect(102, None);
        send(
            &mut s,
            102,
            OwnedMessage::new("initack")
                .with("pmiid", 0)
                .with("token", "bb22"),
            WireVersion::V1,
        );
        assert!(
            matches!(s.poll_event(), Some(ServerEvent::Close { conn: 102, reason, .. }) if reason.contains("wrong or already used"))
        );
        let _ = replies(&mut s);
        // The right token works once.
        s.connect(103, None);
        send(
            &mut s,
            103,
            OwnedMessage::new("initack")
                .with("pmiid", 0)
                .with("token", "aa11"),
            WireVersion::V1,
        );
        let r = replies(&mut s);
        assert!(
            r.iter()
                .any(|(c, t)| *c == 103 && t.starts_with("cmd=initack")),
            "{r:?}"
        );
        assert_eq!(s.poll_event(), None);
        // Even once rank 0's connection is gone, its token opens nothing.
        s.disconnect(103);
        s.connect(104, None);
        send(
            &mut s,
            104,
            OwnedMessage::new("initack")
                .with("pmiid", 0)
                .with("token", "aa11"),
            WireVersion::V1,
        );
        let ev = s.poll_event();
        assert!(
            matches!(&ev, Some(ServerEvent::Close { conn: 104, reason, .. }) if reason.contains("already used")),
            "{ev:?}"
        );
        // PMI-2 identifies with fullinit.
        s.connect(105, None);
        send(
            &mut s,
            105,
            OwnedMessage::new("fullinit")
                .with("pmirank", 1)
                .with("token", "bb22"),
            WireVersion::V2,
        );
        let r = replies(&mut s);
        assert!(
            r.iter()
                .any(|(c, t)| *c == 105 && t.contains("fullinit-response")),
            "{r:?}"
        );
        // Socketpair connections (rank known) need no token.
        s.connect(106, Some(1));
        send(&mut s, 106, OwnedMessage::new("get_maxes"), WireVersion::V1);
        assert!(replies(&mut s).iter().any(|(c, _)| *c == 106));
    }

    #[test]
    fn put_get_and_limits() {
        let mut s = server(1);
        s.connect(7, Some(0));
        send(
            &mut s,
            7,
            OwnedMessage::new("put")
                .with("kvsname", "kvs_test")
                .with("key", "a")
                .with("value", "1:ff"),
            WireVersion::V1,
        );
        send(
            &mut s,
            7,
            OwnedMessage::new("get").with("key", "a"),
            WireVersion::V1,
        );
        send(
            &mut s,
            7,
            OwnedMessage::new("get").with("key", "zz"),
            WireVersion::V1,
        );
        let long = "x".repeat(2000);
        send(
            &mut s,
            7,
            OwnedMessage::new("put")
                .with("key", "b")
                .with("value", &long),
            WireVersion::V1,
        );
        let r = replies(&mut s);
        let g = parse_v1(&r[1].1).unwrap();
        assert_eq!(g.get("value"), Some("1:ff"));
        assert_eq!(parse_v1(&r[2].1).unwrap().rc(), -1);
        assert_eq!(parse_v1(&r[3].1).unwrap().rc(), -1);
    }

    #[test]
    fn tcp_initack_then_pmi2_session() {
        let mut s = server(2);
        s.connect(1, None);
        send(
            &mut s,
            1,
            OwnedMessage::new("initack").with("pmiid", 1),
            WireVersion::V1,
        );
        let r = replies(&mut s);
        assert_eq!(r.len(), 4);
        assert_eq!(parse_v1(&r[2].1).unwrap().get("rank"), Some("1"));
        // A second connection cannot claim the same rank.
        s.connect(2, None);
        send(
            &mut s,
            2,
            OwnedMessage::new("initack").with("pmiid", 1),
            WireVersion::V1,
        );
        assert!(matches!(
            s.poll_event(),
            Some(ServerEvent::Close { conn: 2, .. })
        ));
        // PMI-2 on a fresh connection identified by fullinit.
        s.connect(3, None);
        send(
            &mut s,
            3,
            OwnedMessage::new("init")
                .with("pmi_version", 2)
                .with("pmi_subversion", 0),
            WireVersion::V1,
        );
        send(
            &mut s,
            3,
            OwnedMessage::new("fullinit").with("pmirank", 0),
            WireVersion::V2,
        );
        send(
            &mut s,
            3,
            OwnedMessage::new("info-getjobattr").with("key", "PMI_process_mapping"),
            WireVersion::V2,
        );
        let r = replies(&mut s);
        assert!(r[0].1.starts_with("cmd=response_to_init"));
        let fi = parse_v2(&r[1].1[6..]).unwrap();
        assert_eq!(fi.cmd, "fullinit-response");
        assert_eq!(fi.get("size"), Some("2"));
        let attr = parse_v2(&r[2].1[6..]).unwrap();
        assert_eq!(attr.get("value"), Some("(vector,(0,1,2))"));
    }

    #[test]
    fn garbage_and_unknown_commands_close_the_connection() {
        let mut s = server(1);
        s.connect(1, Some(0));
        s.handle_input(1, b"\x00\x01garbage");
        assert!(matches!(
            s.poll_event(),
            Some(ServerEvent::Close { conn: 1, .. })
        ));
        s.connect(2, Some(0));
        s.handle_input(2, b"cmd=frobnicate\n");
        assert!(matches!(
            s.poll_event(),
            Some(ServerEvent::Close { conn: 2, .. })
        ));
        assert_eq!(s.dropped(), 2);
        // Input for an unknown connection is counted, not a panic.
        s.handle_input(99, b"cmd=init\n");
        assert_eq!(s.dropped(), 3);
    }

    #[test]
    fn abort_and_finalize_are_reported() {
        let mut s = server(2);
        s.connect(1, Some(1));
        send(
            &mut s,
            1,
            OwnedMessage::new("abort")
                .with("exitcode", 5)
                .with("message", "bad thing"),
            WireVersion::V1,
        );
        assert_eq!(
            s.poll_event(),
            Some(ServerEvent::Abort {
                rank: Some(1),
                code: 5,
                message: "bad thing".into()
            })
        );
        send(&mut s, 1, OwnedMessage::new("finalize"), WireVersion::V1);
        assert_eq!(s.poll_event(), Some(ServerEvent::Finalized { rank: 1 }));
        assert_eq!(s.disconnect(1), Some((Some(1), true)));
    }

    /// One simulated client: its requests, the reply each expects, and for gets the value.
    struct Sim {
        prog: Vec<(OwnedMessage, WireVersion, &'static str, Option<String>)>,
        pc: usize,
        waiting: bool,
        framer: crate::wire::Framer,
    }

    fn program(r: u32, n: u32) -> Vec<(OwnedMessage, WireVersion, &'static str, Option<String>)> {
        let v2 = r % 2 == 1;
        let w = if v2 { WireVersion::V2 } else { WireVersion::V1 };
        let mut p = vec![(
            OwnedMessage::new("init").with("pmi_version", if v2 { 2 } else { 1 }),
            WireVersion::V1,
            "response_to_init",
            None,
        )];
        let (put, put_r, bar, bar_r, get, get_r, fin_r) = if v2 {
            (
                "kvs-put",
                "kvs-put-response",
                "kvs-fence",
                "kvs-fence-response",
                "kvs-get",
                "kvs-get-response",
                "finalize-response",
            )
        } else {
            (
                "put",
                "put_result",
                "barrier_in",
                "barrier_out",
                "get",
                "get_result",
                "finalize_ack",
            )
        };
        p.push((
            OwnedMessage::new(put)
                .with("key", format!("k{r}"))
                .with("value", format!("v{r}")),
            w,
            put_r,
            None,
        ));
        p.push((OwnedMessage::new(bar), w, bar_r, None));
        for q in 0..n {
            p.push((
                OwnedMessage::new(get).with("key", format!("k{q}")),
                w,
                get_r,
                Some(format!("v{q}")),
            ));
        }
        p.push((OwnedMessage::new(bar), w, bar_r, None));
        p.push((OwnedMessage::new("finalize"), w, fin_r, None));
        p
    }

    proptest::proptest! {
        /// Whatever the interleaving of ranks (mixing PMI-1 and PMI-2) and however their bytes
        /// are split, every fence completes, every get after a fence sees every put before it,
        /// and nothing is dropped.
        #[test]
        fn random_interleavings_complete_every_fence(n in 1u32..6, seed in proptest::prelude::any::<u64>(), split in 1usize..48) {
            let mut s = server(n);
            let mut sims: Vec<Sim> = (0..n)
                .map(|r| Sim { prog: program(r, n), pc: 0, waiting: false, framer: crate::wire::Framer::new() })
                .collect();
            for r in 0..n {
                s.connect(r as u64, Some(r));
            }
            let mut rng = seed | 1;
            let mut finalized = 0;
            for _ in 0..10_000 {
                let runnable: Vec<usize> = (0..n as usize)
                    .filter(|&i| !sims[i].waiting && sims[i].pc < sims[i].prog.len())
                    .collect();
                if runnable.is_empty() {
                    break;
                }
                rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
                let i = runnable[(rng % runnable.len() as u64) as usize];
                let (m, w, _, _) = &sims[i].prog[sims[i].pc];
                let bytes = m.encode(*w);
                sims[i].waiting = true;
                for chunk in bytes.chunks(split) {
                    s.handle_input(i as u64, chunk);
                }
                while let Some((c, b)) = s.poll_transmit() {
                    let sim = &mut sims[c as usize];
                    sim.framer.push(&b);
                    while let Some(fr) = sim.framer.next_frame() {
                        let fr = fr.unwrap();
                        let msg = fr.parse().unwrap();
                        let (_, _, want, val) = &sim.prog[sim.pc];
                        proptest::prop_assert_eq!(&*msg.cmd, *want);
                        if let Some(v) = val {
                            proptest::prop_assert_eq!(msg.get("value"), Some(v.as_str()));
                        }
                        sim.pc += 1;
                        sim.waiting = false;
                    }
                }
                while let Some(e) = s.poll_event() {
                    if matches!(e, ServerEvent::Finalized { .. }) {
                        finalized += 1;
                    }
                    proptest::prop_assert!(!matches!(e, ServerEvent::Close { .. }), "{:?}", e);
                }
            }
            proptest::prop_assert!(sims.iter().all(|x| x.pc == x.prog.len()), "a rank never finished");
            proptest::prop_assert_eq!(finalized, n);
            proptest::prop_assert_eq!(s.dropped(), 0);
        }
    }

    #[test]
    fn process_mapping_formats() {
        assert_eq!(
            process_mapping(&[0, 0, 1, 1]).as_deref(),
            Some("(vector,(0,2,2))")
        );
        assert_eq!(
            process_mapping(&[0, 0, 0, 1, 1]).as_deref(),
            Some("(vector,(0,1,3),(1,1,2))")
        );
        assert_eq!(process_mapping(&[0, 1, 0]), None);
    }
}
