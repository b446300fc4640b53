//! The btl-tcp module: sockets at the edge of the [`proto`](crate::proto) state machines.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Instant;

use rmca_framework::btl::{
    exclusivity, tags, Btl, BtlAttributes, BtlError, BtlEvents, BtlFlags, BtlTag, MemoryUsage,
    ModexRead, SendError, SendHint,
};
use rmca_framework::job::JobInfo;
use rmca_framework::memory::MemoryCounter;
use rmca_framework::rank::{ProcInfo, Rank};

use crate::card::{Card, MODEX_KEY};
use crate::proto::{InEvent, Inbound, InboundError, InboundLimits, Outbound, QueueError};
use crate::wire::{HelloRepr, MAX_SECRET_LEN};
use crate::TcpConfig;

/// Reads per inbound connection per progress call, so one busy sender cannot starve the others.
const READS_PER_PROGRESS: usize = 16;

/// A reachable peer.
#[derive(Debug)]
struct Peer {
    addr: SocketAddr,
    out: Option<OutConn>,
}

/// The socket of a sending connection.
#[derive(Debug)]
enum Link {
    /// A helper thread is connecting (std has no non-blocking connect); fragments queue
    /// meanwhile, so `send` never waits for the network.
    Connecting(mpsc::Receiver<io::Result<TcpStream>>),
    /// Connected, non-blocking.
    Up(TcpStream),
}

/// Our connection to a peer, on which we send.
#[derive(Debug)]
struct OutConn {
    link: Link,
    proto: Outbound,
}

impl OutConn {
    /// Finish the connect if it completed, then write what the kernel takes now.
    /// An error means the path to the peer is broken.
    fn drive(&mut self) -> io::Result<()> {
        if let Link::Connecting(rx) = &self.link {
            match rx.try_recv() {
                Ok(Ok(stream)) => self.link = Link::Up(stream),
                Ok(Err(e)) => return Err(e),
                Err(mpsc::TryRecvError::Empty) => return Ok(()),
                Err(mpsc::TryRecvError::Disconnected) => {
                    return Err(io::Error::other(
                        "the connecting thread ended without a result",
                    ))
                }
            }
        }
        if let Link::Up(stream) = &mut self.link {
            flush(stream, &mut self.proto)?;
        }
        Ok(())
    }

    /// Whether [`OutConn::drive`] has anything to do.
    fn busy(&self) -> bool {
        matches!(self.link, Link::Connecting(_)) || self.proto.pending() > 0
    }

    fn close(&self) {
        if let Link::Up(stream) = &self.link {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

/// A connection a peer opened to us, on which we receive.
#[derive(Debug)]
struct InConn {
    stream: TcpStream,
    proto: Inbound,
}

/// Counters reported in the profile.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    sends: u64,
    send_bytes: u64,
    would_block: u64,
    delivered: u64,
    recv_bytes: u64,
    connects: u64,
    accepts: u64,
    rejected_secret: u64,
    rejected_hello: u64,
    rejected_duplicate: u64,
    protocol_errors: u64,
    clean_closes: u64,
    peer_failures: u64,
}

/// How servicing an inbound connection ended.
enum InOutcome {
    Open,
    Clean(Rank),
    Failed(InboundError),
    Io(Option<Rank>, io::Error),
    Duplicate(Rank),
}

/// The btl-tcp module.
pub struct BtlTcp {
    attrs: BtlAttributes,
    cfg: TcpConfig,
    me: Rank,
    secret: Vec<u8>,
    listener: TcpListener,
    local: SocketAddr,
    limits: Arc<InboundLimits>,
    peers: HashMap<Rank, Peer>,
    incoming: Vec<InConn>,
    /// Ranks with an open inbound connection (a second one is refused).
    inbound_from: HashSet<Rank>,
    /// Peers whose path failed, with the reason (sends to them are refused).
    failed: HashMap<Rank, String>,
    /// Failures not yet reported to the events sink.
    to_report: VecDeque<(Rank, String)>,
    counters: Counters,
    memory: Option<Arc<MemoryCounter>>,
    held: usize,
    peak: usize,
    progress_calls: u64,
}

impl std::fmt::Debug for BtlTcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BtlTcp")
            .field("me", &self.me)
            .field("local", &self.local)
            .field("peers", &self.peers.len())
            .field("incoming", &self.incoming.len())
            .finish()
    }
}

fn io_err(op: String) -> impl FnOnce(io::Error) -> BtlError {
    move |source| BtlError::Io { op, source }
}

/// Write what the kernel takes now; the number of bytes written.
fn flush(stream: &mut TcpStream, proto: &mut Outbound) -> io::Result<usize> {
    let mut total = 0;
    while let Some(bytes) = proto.poll_transmit() {
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                proto.advance(n);
                total += n;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(total)
}

impl BtlTcp {
    /// Bind the listening socket for `job`'s process (see [`TcpConfig`] for the port choice).
    pub fn bind(cfg: TcpConfig, job: &JobInfo) -> Result<Self, BtlError> {
        cfg.validate()?;
        if job.secret.len() > MAX_SECRET_LEN {
            return Err(BtlError::Other(format!(
                "btl tcp: the job secret is {} bytes, the handshake carries at most {MAX_SECRET_LEN}",
                job.secret.len()
            )));
        }
        let listener = Self::listen(&cfg)?;
        listener
            .set_nonblocking(true)
            .map_err(io_err("btl tcp: making the listener non-blocking".into()))?;
        let local = listener
            .local_addr()
            .map_err(io_err("btl tcp: reading the listen address".into()))?;
        let attrs = BtlAttributes {
            eager_limit: cfg.eager_limit,
            rndv_eager_limit: cfg.eager_limit,
            max_send_size: cfg.max_send_size,
            pipeline_frag_size: usize::MAX,
            rdma_pipeline_send_length: 0,
            rdma_pipeline_frag_size: usize::MAX,
            min_rdma_pipeline_size: 0,
            exclusivity: exclusivity::DEFAULT,
            latency_ns: cfg.latency_ns,
            bandwidth_mbps: cfg.bandwidth_mbps,
            flags: BtlFlags::SEND,
        };
        let limits = Arc::new(InboundLimits {
            me: job.rank,
            job_size: job.size,
            secret: job.secret.clone(),
            max_frame: cfg.max_send_size,
            handshake_timeout: cfg.handshake_timeout,
        });
        Ok(Self {
            attrs,
            cfg,
            me: job.rank,
            secret: job.secret.clone(),
            listener,
            local,
            limits,
            peers: HashMap::new(),
            incoming: Vec::new(),
            inbound_from: HashSet::new(),
            failed: HashMap::new(),
            to_report: VecDeque::new(),
            counters: Counters::default(),
            memory: None,
            held: 0,
            peak: 0,
            progress_calls: 0,
        })
    }

    fn listen(cfg: &TcpConfig) -> Result<TcpListener, BtlError> {
        if cfg.port_min == 0 {
            let addr = SocketAddr::new(cfg.if_addr, 0);
            return TcpListener::bind(addr).map_err(io_err(format!(
                "btl tcp: listening on {addr} (btl_tcp_if_addr)"
            )));
        }
        let last = cfg.port_min + cfg.port_range;
        let mut last_err = None;
        for port in cfg.port_min..=last {
            match TcpListener::bind(SocketAddr::new(cfg.if_addr, port)) {
                Ok(l) => return Ok(l),
                Err(e) => last_err = Some(e),
            }
        }
        let source = last_err.unwrap_or_else(|| io::ErrorKind::AddrInUse.into());
        Err(BtlError::Io {
            op: format!(
                "btl tcp: no free port on {} in {}..={last} (btl_tcp_port_min, btl_tcp_port_range)",
                cfg.if_addr, cfg.port_min
            ),
            source,
        })
    }

    /// Account this module's buffers in the process's memory profile.
    pub fn set_memory_counter(&mut self, counter: Arc<MemoryCounter>) {
        counter.alloc(self.held);
        self.memory = Some(counter);
    }

    /// Where this module listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The business card to publish.
    pub fn card(&self) -> Card {
        Card { addr: self.local }
    }

    /// A counter by name (as listed by [`Btl::counters`]), for tests and tools.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.counters()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }

    fn adjust_memory(&mut self, before: usize, after: usize) {
        if after > before {
            self.held += after - before;
            self.peak = self.peak.max(self.held);
            if let Some(m) = &self.memory {
                m.alloc(after - before);
            }
        } else if before > after {
            self.held = self.held.saturating_sub(before - after);
            if let Some(m) = &self.memory {
                m.free(before - after);
            }
        }
    }

    fn fail_peer(&mut self, peer: Rank, reason: String) {
        if self.failed.contains_key(&peer) {
            return;
        }
        tracing::warn!(peer, me = self.me, "btl tcp: path failed: {reason}");
        self.counters.peer_failures += 1;
        if let Some(p) = self.peers.get_mut(&peer) {
            if let Some(out) = p.out.take() {
                out.close();
                self.adjust_memory(out.proto.capacity(), 0);
            }
        }
        self.failed.insert(peer, reason.clone());
        self.to_report.push_back((peer, reason));
    }

    /// Start opening our sending connection to `peer` (completed by [`OutConn::drive`]).
    fn connect(&mut self, peer: Rank) -> Result<(), SendError> {
        let Some(p) = self.peers.get(&peer) else {
            return Err(SendError::Unreachable(peer));
        };
        let addr = p.addr;
        let timeout = self.cfg.connect_timeout;
        let (tx, rx) = mpsc::channel();
        let spawned = thread::Builder::new()
            .name(format!("btl-tcp-connect-{peer}"))
            .spawn(move || {
                let result = TcpStream::connect_timeout(&addr, timeout)
                    .and_then(|s| {
                        // Small fragments must leave now: the PML does its own batching.
                        s.set_nodelay(true)?;
                        s.set_nonblocking(true)?;
                        Ok(s)
                    })
                    .map_err(|e| io::Error::new(e.kind(), format!("connecting to {addr}: {e}")));
                // The module may be gone; then the socket just closes.
                let _ = tx.send(result);
            });
        if let Err(e) = spawned {
            let reason = format!("connecting to {addr}: cannot start a thread: {e}");
            self.fail_peer(peer, reason.clone());
            return Err(SendError::PeerFailed { peer, reason });
        }
        let hello = HelloRepr {
            rank: self.me,
            to: peer,
            secret: &self.secret,
        };
        let proto = Outbound::new(&hello, self.cfg.max_pending);
        self.adjust_memory(0, proto.capacity());
        self.counters.connects += 1;
        if let Some(p) = self.peers.get_mut(&peer) {
            p.out = Some(OutConn {
                link: Link::Connecting(rx),
                proto,
            });
        }
        Ok(())
    }

    fn accept(&mut self, now: Instant) {
        loop {
            match self.listener.accept() {
                Ok((stream, from)) => {
                    if let Err(e) = stream.set_nonblocking(true) {
                        tracing::warn!(%from, "btl tcp: dropping accepted connection: {e}");
                        continue;
                    }
                    self.counters.accepts += 1;
                    self.incoming.push(InConn {
                        stream,
                        proto: Inbound::new(self.limits.clone(), now),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // E.g. EMFILE or a connection reset before accept: not fatal to the module.
                    tracing::warn!("btl tcp: accept: {e}");
                    break;
                }
            }
        }
    }

    /// Read and deliver what one inbound connection has.
    fn service(
        conn: &mut InConn,
        now: Instant,
        inbound_from: &mut HashSet<Rank>,
        failed: &HashMap<Rank, String>,
        counters: &mut Counters,
        events: &mut dyn BtlEvents,
        delivered: &mut usize,
    ) -> InOutcome {
        for _ in 0..READS_PER_PROGRESS {
            let buf = conn.proto.read_buf();
            let window = buf.len();
            let n = match conn.stream.read(buf) {
                Ok(0) => {
                    return match conn.proto.handle_eof() {
                        Ok(Some(peer)) => InOutcome::Clean(peer),
                        Ok(None) => InOutcome::Failed(InboundError::EofBeforeHello),
                        Err(e) => InOutcome::Failed(e),
                    }
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return InOutcome::Io(conn.proto.peer(), e),
            };
            conn.proto.commit(n);
            // A short read means the socket is drained: skip the read that would say EAGAIN.
            let drained = n < window;
            loop {
                match conn.proto.poll_event() {
                    Ok(None) => break,
                    Ok(Some(InEvent::Hello { peer })) => {
                        if failed.contains_key(&peer) || !inbound_from.insert(peer) {
                            return InOutcome::Duplicate(peer);
                        }
                    }
                    Ok(Some(InEvent::Frame { peer, tag, data })) => {
                        counters.delivered += 1;
                        counters.recv_bytes += data.len() as u64;
                        *delivered += 1;
                        events.recv(peer, tag, data);
                    }
                    Ok(Some(InEvent::Bye { .. })) => {}
                    Err(e) => return InOutcome::Failed(e),
                }
            }
            if drained {
                break;
            }
        }
        match conn.proto.handle_timeout(now) {
            Ok(()) => InOutcome::Open,
            Err(e) => InOutcome::Failed(e),
        }
    }

    fn close_incoming(&mut self, idx: usize, outcome: InOutcome) {
        let conn = self.incoming.swap_remove(idx);
        let _ = conn.stream.shutdown(Shutdown::Both);
        self.adjust_memory(conn.proto.capacity(), 0);
        // A refused duplicate carries the rank of the connection that stays open: keep it.
        if let (Some(p), false) = (
            conn.proto.peer(),
            matches!(outcome, InOutcome::Duplicate(_)),
        ) {
            self.inbound_from.remove(&p);
        }
        match outcome {
            InOutcome::Open => {}
            InOutcome::Clean(p) => {
                self.counters.clean_closes += 1;
                tracing::debug!(peer = p, "btl tcp: peer closed its connection cleanly");
            }
            InOutcome::Duplicate(p) => {
                self.counters.rejected_duplicate += 1;
                tracing::warn!(
                    peer = p,
                    "btl tcp: refused a second connection claiming rank {p}"
                );
            }
            InOutcome::Io(peer, e) => match peer {
                Some(p) => self.fail_peer(p, format!("receiving from rank {p}: {e}")),
                None => self.counters.rejected_hello += 1,
            },
            InOutcome::Failed(e) => {
                match &e {
                    InboundError::WrongSecret { .. } => self.counters.rejected_secret += 1,
                    InboundError::BadHello(_)
                    | InboundError::BadRank { .. }
                    | InboundError::Misdirected { .. }
                    | InboundError::HandshakeTimeout(_)
                    | InboundError::EofBeforeHello => self.counters.rejected_hello += 1,
                    InboundError::UnexpectedEof { .. } => {}
                    InboundError::FrameTooLarge { .. }
                    | InboundError::ReservedTag { .. }
                    | InboundError::DataAfterBye(_) => self.counters.protocol_errors += 1,
                }
                match e.peer() {
                    Some(p) => self.fail_peer(p, e.to_string()),
                    None => tracing::warn!("btl tcp: refused a connection: {e}"),
                }
            }
        }
    }
}

impl Btl for BtlTcp {
    fn component_name(&self) -> &str {
        "tcp"
    }

    fn attributes(&self) -> &BtlAttributes {
        &self.attrs
    }

    fn add_procs(
        &mut self,
        procs: &[ProcInfo],
        modex: &dyn ModexRead,
    ) -> Result<Vec<bool>, BtlError> {
        // Read every card before changing anything, so a bad card leaves the module as it was.
        let my_node = procs.iter().find(|p| p.is_self).map(|p| p.node);
        let mut found = Vec::with_capacity(procs.len());
        for p in procs {
            if p.is_self || p.rank == self.me {
                found.push(None);
                continue;
            }
            let bytes = modex.get(p.rank, MODEX_KEY).map_err(|e| {
                BtlError::Other(format!("btl tcp: reading rank {}'s card: {e}", p.rank))
            })?;
            match bytes {
                None => found.push(None),
                Some(b) => {
                    let card = Card::decode(&b).map_err(|e| BtlError::BadCard {
                        rank: p.rank,
                        reason: e.to_string(),
                    })?;
                    // A loopback card only means something on the peer's own node: from here it
                    // would reach some other process of this host.
                    if card.addr.ip().is_loopback() && my_node.is_some_and(|n| n != p.node) {
                        tracing::warn!(
                            peer = p.rank,
                            addr = %card.addr,
                            "btl tcp: rank {} is on another node but published a loopback address; \
                             set btl_tcp_if_addr to an address other nodes can reach",
                            p.rank
                        );
                        found.push(None);
                        continue;
                    }
                    found.push(Some(card));
                }
            }
        }
        let mut reach = Vec::with_capacity(procs.len());
        for (p, card) in procs.iter().zip(found) {
            match card {
                Some(c) => {
                    self.peers.entry(p.rank).or_insert(Peer {
                        addr: c.addr,
                        out: None,
                    });
                    reach.push(true);
                }
                None => reach.push(false),
            }
        }
        Ok(reach)
    }

    fn del_procs(&mut self, ranks: &[Rank]) {
        for r in ranks {
            if let Some(p) = self.peers.remove(r) {
                if let Some(out) = p.out {
                    out.close();
                    self.adjust_memory(out.proto.capacity(), 0);
                }
            }
        }
        // Their inbound connections go too: a later EOF must not report a forgotten peer.
        let mut i = 0;
        while i < self.incoming.len() {
            match self.incoming[i].proto.peer() {
                Some(p) if ranks.contains(&p) => {
                    let conn = self.incoming.swap_remove(i);
                    let _ = conn.stream.shutdown(Shutdown::Both);
                    self.adjust_memory(conn.proto.capacity(), 0);
                    self.inbound_from.remove(&p);
                }
                _ => i += 1,
            }
        }
    }

    fn send(
        &mut self,
        peer: Rank,
        tag: BtlTag,
        header: &[u8],
        payload: &[u8],
        _hint: SendHint,
    ) -> Result<(), SendError> {
        if tag >= tags::BTL_INTERNAL_BASE {
            return Err(SendError::Unsupported(
                "tags 0xf0..=0xff are reserved for btl-internal traffic",
            ));
        }
        let len = header.len() + payload.len();
        if len > self.cfg.max_send_size {
            return Err(SendError::TooLarge {
                len,
                max: self.cfg.max_send_size,
            });
        }
        if let Some(reason) = self.failed.get(&peer) {
            return Err(SendError::PeerFailed {
                peer,
                reason: reason.clone(),
            });
        }
        let Some(p) = self.peers.get(&peer) else {
            return Err(SendError::Unreachable(peer));
        };
        if p.out.is_none() {
            self.connect(peer)?;
        }
        let Some(out) = self.peers.get_mut(&peer).and_then(|p| p.out.as_mut()) else {
            return Err(SendError::Unreachable(peer));
        };
        let before = out.proto.capacity();
        match out.proto.queue(tag, header, payload) {
            Ok(()) => {}
            Err(QueueError::Full { .. }) => {
                // Drain what the kernel takes now, so the retry after progress has room.
                let _ = out.drive();
                self.counters.would_block += 1;
                return Err(SendError::WouldBlock);
            }
            Err(QueueError::Closing) => {
                return Err(SendError::PeerFailed {
                    peer,
                    reason: "connection is closing".into(),
                });
            }
        }
        // Write at once: most fragments leave here without waiting for progress.
        let result = out.drive();
        let after = out.proto.capacity();
        self.adjust_memory(before, after);
        self.counters.sends += 1;
        self.counters.send_bytes += len as u64;
        if let Err(e) = result {
            // The bytes were taken; the loss is reported as a path failure at the next progress.
            self.fail_peer(peer, format!("sending to rank {peer}: {e}"));
        }
        Ok(())
    }

    fn progress(&mut self, events: &mut dyn BtlEvents) -> usize {
        let now = Instant::now();
        let mut n = 0;
        // Accept at every call while peers may still connect, then only now and then: the
        // accept syscall would otherwise double the cost of an idle progress call.
        self.progress_calls = self.progress_calls.wrapping_add(1);
        if self.incoming.len() < self.peers.len() || self.progress_calls & 63 == 0 {
            self.accept(now);
        }
        let mut i = 0;
        while i < self.incoming.len() {
            let conn = &mut self.incoming[i];
            let before = conn.proto.capacity();
            let outcome = Self::service(
                conn,
                now,
                &mut self.inbound_from,
                &self.failed,
                &mut self.counters,
                events,
                &mut n,
            );
            let after = conn.proto.capacity();
            self.adjust_memory(before, after);
            match outcome {
                InOutcome::Open => i += 1,
                other => self.close_incoming(i, other),
            }
        }
        let mut broken = Vec::new();
        for (rank, p) in &mut self.peers {
            if let Some(out) = &mut p.out {
                if out.busy() {
                    if let Err(e) = out.drive() {
                        broken.push((*rank, format!("sending to rank {rank}: {e}")));
                    }
                }
            }
        }
        for (rank, reason) in broken {
            self.fail_peer(rank, reason);
        }
        while let Some((rank, reason)) = self.to_report.pop_front() {
            events.peer_failed(rank, &reason);
            n += 1;
        }
        n
    }

    fn memory_usage(&self) -> MemoryUsage {
        MemoryUsage {
            current: self.held,
            peak: self.peak,
        }
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let c = self.counters;
        [
            ("sends", c.sends),
            ("send_bytes", c.send_bytes),
            ("would_block", c.would_block),
            ("delivered", c.delivered),
            ("recv_bytes", c.recv_bytes),
            ("connects", c.connects),
            ("accepts", c.accepts),
            ("rejected_secret", c.rejected_secret),
            ("rejected_hello", c.rejected_hello),
            ("rejected_duplicate", c.rejected_duplicate),
            ("protocol_errors", c.protocol_errors),
            ("clean_closes", c.clean_closes),
            ("peer_failures", c.peer_failures),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    fn finalize(&mut self) {
        // Say goodbye on every sending connection and push out what is queued, waiting at most
        // the connect timeout per peer (a peer that stopped reading must not hang us).
        let timeout = self.cfg.connect_timeout;
        for (rank, p) in &mut self.peers {
            let Some(mut out) = p.out.take() else {
                continue;
            };
            out.proto.queue_bye();
            let stream = match out.link {
                Link::Up(s) => Ok(s),
                Link::Connecting(rx) => rx
                    .recv_timeout(timeout)
                    .unwrap_or_else(|e| Err(io::Error::new(io::ErrorKind::TimedOut, e))),
            };
            let result = stream.and_then(|mut stream| {
                stream.set_nonblocking(false)?;
                stream.set_write_timeout(Some(timeout))?;
                while let Some(bytes) = out.proto.poll_transmit() {
                    let n = stream.write(bytes)?;
                    if n == 0 {
                        return Err(io::ErrorKind::WriteZero.into());
                    }
                    out.proto.advance(n);
                }
                stream.flush()?;
                stream.shutdown(Shutdown::Write)
            });
            if let Err(e) = result {
                tracing::warn!(
                    peer = rank,
                    "btl tcp: finalize: {} bytes to rank {rank} not sent: {e}",
                    out.proto.pending()
                );
            }
        }
        self.peers.clear();
        self.incoming.clear();
        self.inbound_from.clear();
        if let Some(m) = &self.memory {
            m.free(self.held);
        }
        self.held = 0;
    }
}
