//! The `soft` provider: verbs emulated over sockets, in pure Rust.
//!
//! RC QPs run [`rc::RcProto`] over one TCP connection each; UD QPs own one UDP socket each and
//! send one datagram per message. The data path runs in the caller's thread: `post_send` writes
//! to the socket directly and `poll_cq` drains the sockets of the CQ's QPs. A background agent
//! thread per context accepts RC connections and progresses every QP its owner has not polled
//! lately (using `try_lock`, so it never stalls the owner), so RDMA READ/WRITE are served and
//! RNR/timers run without the target application's involvement.
//!
//! A UD message is one UDP datagram that is never larger than the MTU of the interface under
//! the bound address ([`link`]): like a HCA's UD MTU, the context's MTU is the path MTU, so
//! datagrams are never IP-fragmented (the DF bit is set, and a datagram refused by the kernel
//! for a smaller path MTU is counted in [`SoftStats::ud_send_mtu_drops`]).
//!
//! Limitations: an address handle names one UD QP's socket (the soft "port" is per QP), and
//! the RC send-queue slot of a WR is released when the peer acknowledges it.

pub mod link;
pub mod rc;
mod rx;
pub mod wire;

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::fault::{FaultConfig, FaultInjector, FaultStats};
use crate::mem::MrTable;
use crate::types::*;
use link::SoftLink;
use rc::{RcEnv, RcProto, RecvWqe};
use wire::{Hello, SoftAddr, UdOpcode, UdPacket, UdRepr, HELLO_LEN, UD_HEADER_LEN};

/// Largest RC message of the soft provider; a longer announced segment is malformed.
const MAX_MSG: u64 = 64 << 20;
const MAX_SEGMENT: usize = MAX_MSG as usize + wire::RC_HEADER_LEN;

/// Bytes a UD receive buffer reserves in front of the payload for the GRH, as on real HCAs.
pub const UD_GRH_LEN: usize = 40;

/// Configuration of the soft provider.
#[derive(Debug, Clone)]
pub struct SoftConfig {
    /// Address the UDP sockets and the RC listener bind to (the node's address; default
    /// 127.0.0.1). Peers connect to it, so it must be reachable from them.
    pub bind_addr: IpAddr,
    /// UD payload MTU wanted, in bytes (default 2048). The context uses at most what one
    /// unfragmented datagram carries on the interface of `bind_addr` (its MTU minus the IP, UDP
    /// and soft UD headers, see [`link::SoftLink`]): [`DeviceAttr::mtu`] reports the value in
    /// use.
    pub ud_mtu: u32,
    /// Faults injected on UD traffic.
    pub ud_fault: FaultConfig,
    /// Faults injected on RC traffic (delay and corrupt only).
    pub rc_fault: FaultConfig,
    /// Maximum work requests per queue reported and enforced.
    pub max_qp_wr: u32,
    /// Maximum SGEs per work request.
    pub max_sge: u32,
    /// Maximum inline bytes.
    pub max_inline: u32,
    /// Maximum CQ depth.
    pub max_cqe: u32,
    /// The agent progresses a QP (RDMA service, RNR timers, UD drops) that its owner has not
    /// progressed (by polling one of its CQs) for this long.
    pub agent_idle: Duration,
}

impl Default for SoftConfig {
    fn default() -> Self {
        Self {
            bind_addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            ud_mtu: 2048,
            ud_fault: FaultConfig::default(),
            rc_fault: FaultConfig::default(),
            max_qp_wr: 16384,
            max_sge: 16,
            max_inline: 1024,
            max_cqe: 1 << 20,
            agent_idle: Duration::from_millis(1),
        }
    }
}

impl SoftConfig {
    /// Checks ranges.
    pub fn validate(&self) -> Result<()> {
        if !(256..=65000).contains(&self.ud_mtu) {
            return Err(Error::InvalidParam {
                what: "soft UD MTU",
                value: self.ud_mtu.to_string(),
                valid: "256 ..= 65000 bytes",
            });
        }
        self.ud_fault.validate()?;
        self.rc_fault.validate_rc()
    }
}

/// Counters of one soft context (packets dropped as a HCA would).
#[derive(Debug, Default)]
pub struct SoftStats {
    /// UD datagrams dropped because no receive WQE was posted.
    pub ud_no_wqe_drops: AtomicU64,
    /// Datagrams or connections dropped as foreign (other job, bad magic, wrong QPN/Q_Key).
    pub foreign_drops: AtomicU64,
    /// Malformed datagrams/segments dropped.
    pub malformed_drops: AtomicU64,
    /// UD datagrams dropped for exceeding the MTU.
    pub mtu_drops: AtomicU64,
    /// UD datagrams the kernel refused to send (EMSGSIZE): larger than the path MTU, which
    /// fell below the interface MTU after the context opened (DF is set: never fragmented).
    pub ud_send_mtu_drops: AtomicU64,
    /// Receive system calls on UD sockets that returned datagrams (`recvmmsg` batches).
    pub ud_recv_calls: AtomicU64,
}

/// Snapshot of [`SoftStats`] plus fault counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SoftStatsSnapshot {
    /// UD datagrams dropped because no receive WQE was posted.
    pub ud_no_wqe_drops: u64,
    /// Foreign traffic dropped.
    pub foreign_drops: u64,
    /// Malformed traffic dropped.
    pub malformed_drops: u64,
    /// UD datagrams above the MTU dropped.
    pub mtu_drops: u64,
    /// UD datagrams the kernel refused to send for exceeding the path MTU (EMSGSIZE).
    pub ud_send_mtu_drops: u64,
    /// Receive system calls on UD sockets that returned datagrams (several datagrams per call
    /// when they queue up).
    pub ud_recv_calls: u64,
}

pub(crate) struct Ctx {
    pub cfg: SoftConfig,
    /// The interface under `cfg.bind_addr`.
    pub link: SoftLink,
    /// UD MTU in use: `cfg.ud_mtu` clamped to what the link carries unfragmented.
    pub ud_mtu: u32,
    job_tag: u64,
    pub mrs: MrTable,
    qps: Mutex<HashMap<u32, Arc<Qp>>>,
    next_id: AtomicU32,
    listener: TcpListener,
    listen_addr: SocketAddr,
    pending: Mutex<HashMap<u32, Vec<(Hello, TcpStream)>>>,
    events: Mutex<VecDeque<AsyncEvent>>,
    epoch: Instant,
    pub stats: SoftStats,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftCtx")
            .field("listen", &self.listen_addr)
            .finish()
    }
}

impl Ctx {
    pub fn open(cfg: SoftConfig, secret: &[u8]) -> Result<Arc<Self>> {
        cfg.validate()?;
        let listener = TcpListener::bind(SocketAddr::new(cfg.bind_addr, 0))
            .map_err(|e| Error::io("bind RC listener", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("listener nonblocking", e))?;
        let listen_addr = listener
            .local_addr()
            .map_err(|e| Error::io("local_addr", e))?;
        let link = link::link_of(cfg.bind_addr)?;
        if link.ud_mtu_limit < link::MIN_UD_MTU {
            return Err(Error::LinkMtuTooSmall {
                addr: cfg.bind_addr,
                if_mtu: link.if_mtu,
                limit: link.ud_mtu_limit,
                min: link::MIN_UD_MTU,
                short: link::MIN_UD_MTU - link.ud_mtu_limit,
                interface: link.interface,
            });
        }
        let ud_mtu = cfg.ud_mtu.min(link.ud_mtu_limit);
        if ud_mtu < cfg.ud_mtu {
            // The caller (a BTL) knows whether the value was the user's and says so.
            tracing::debug!(
                wanted = cfg.ud_mtu,
                ud_mtu,
                interface = %link.interface,
                if_mtu = link.if_mtu,
                "soft verbs: UD MTU lowered to what the interface carries unfragmented"
            );
        }
        let ctx = Arc::new(Self {
            cfg,
            link,
            ud_mtu,
            job_tag: wire::job_tag(secret),
            mrs: MrTable::default(),
            qps: Mutex::new(HashMap::new()),
            next_id: AtomicU32::new(1),
            listener,
            listen_addr,
            pending: Mutex::new(HashMap::new()),
            events: Mutex::new(VecDeque::new()),
            epoch: Instant::now(),
            stats: SoftStats::default(),
        });
        let weak = Arc::downgrade(&ctx);
        std::thread::Builder::new()
            .name("rmca-verbs-agent".into())
            .spawn(move || agent(weak))
            .map_err(|e| Error::io("spawn agent", e))?;
        Ok(ctx)
    }

    pub fn attr(&self) -> DeviceAttr {
        DeviceAttr {
            max_qp: 1 << 16,
            max_qp_wr: self.cfg.max_qp_wr,
            max_sge: self.cfg.max_sge,
            max_cqe: self.cfg.max_cqe,
            max_srq_wr: self.cfg.max_qp_wr,
            max_inline: self.cfg.max_inline,
            mtu: self.ud_mtu,
            max_msg_size: MAX_MSG,
        }
    }

    pub fn new_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn event(&self, e: AsyncEvent) {
        tracing::debug!(?e, "soft verbs async event");
        lock(&self.events).push_back(e);
    }

    pub fn poll_event(&self) -> Option<AsyncEvent> {
        lock(&self.events).pop_front()
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The interface under the bound address.
    pub fn link(&self) -> &SoftLink {
        &self.link
    }

    pub fn stats(&self) -> SoftStatsSnapshot {
        SoftStatsSnapshot {
            ud_no_wqe_drops: self.stats.ud_no_wqe_drops.load(Ordering::Relaxed),
            foreign_drops: self.stats.foreign_drops.load(Ordering::Relaxed),
            malformed_drops: self.stats.malformed_drops.load(Ordering::Relaxed),
            mtu_drops: self.stats.mtu_drops.load(Ordering::Relaxed),
            ud_send_mtu_drops: self.stats.ud_send_mtu_drops.load(Ordering::Relaxed),
            ud_recv_calls: self.stats.ud_recv_calls.load(Ordering::Relaxed),
        }
    }

    /// Accepts pending RC connections and files them by destination QPN.
    fn accept_all(&self) {
        loop {
            match self.listener.accept() {
                Ok((mut s, peer)) => {
                    let hello = (|| -> std::io::Result<Hello> {
                        s.set_nonblocking(false)?;
                        s.set_read_timeout(Some(Duration::from_secs(1)))?;
                        let mut b = [0u8; HELLO_LEN];
                        s.read_exact(&mut b)?;
                        Hello::parse(&b).map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))
                    })();
                    match hello {
                        Ok(h) if h.job_tag == self.job_tag => {
                            let _ = s.set_nodelay(true);
                            let qp = lock(&self.qps).get(&h.dst_qpn).cloned();
                            // Filed under the QP's lock, so entering the error state (which
                            // closes unclaimed connections under the same lock) cannot miss it.
                            let g = qp.as_ref().map(|q| lock(&q.inner));
                            let alive = g
                                .as_ref()
                                .is_some_and(|g| !matches!(g.state, QpState::Error));
                            if alive && s.set_nonblocking(true).is_ok() {
                                lock(&self.pending)
                                    .entry(h.dst_qpn)
                                    .or_default()
                                    .push((h, s));
                            } else {
                                tracing::debug!(
                                    qpn = h.dst_qpn,
                                    "soft RC: connection for a gone or failed QP closed"
                                );
                                let _ = s.shutdown(std::net::Shutdown::Both);
                            }
                            drop(g);
                        }
                        Ok(_) => {
                            tracing::warn!(%peer, "soft verbs: RC connection from another job refused");
                            self.stats.foreign_drops.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            tracing::warn!(%peer, error = %e, "soft verbs: bad RC hello");
                            self.stats.malformed_drops.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                Err(ref e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!(error = %e, "soft verbs: accept failed");
                    return;
                }
            }
        }
    }

    /// Closes connections accepted for `qpn` that it never claimed (it is going away or into
    /// the error state), so the peer sees the loss instead of waiting forever.
    fn drop_pending(&self, qpn: u32) {
        if let Some(v) = lock(&self.pending).remove(&qpn) {
            for (_, s) in v {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    fn take_pending(&self, qpn: u32, src_qpn: u32, src_port: u16) -> Option<TcpStream> {
        let mut p = lock(&self.pending);
        let v = p.get_mut(&qpn)?;
        let i = v
            .iter()
            .position(|(h, _)| h.src_qpn == src_qpn && h.src_port == src_port)?;
        let (_, s) = v.swap_remove(i);
        if v.is_empty() {
            p.remove(&qpn);
        }
        Some(s)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a verbs lock leaves plain data; keep going rather than cascade.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The agent: accepts connections; progresses the QPs their owner has not polled lately.
fn agent(weak: Weak<Ctx>) {
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        // The agent ends with its context (the last handle dropped).
        let Some(ctx) = weak.upgrade() else { return };
        ctx.accept_all();
        fds.clear();
        fds.push(libc::pollfd {
            fd: ctx.listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        // Serve only the QPs their owner has not progressed lately: no contention with a busy
        // owner, and no wake-ups for its sockets.
        let qps: Vec<Arc<Qp>> = lock(&ctx.qps).values().cloned().collect();
        let now = Instant::now();
        for qp in &qps {
            if !qp.stale(&ctx) {
                continue;
            }
            if let Ok(mut g) = qp.inner.try_lock() {
                qp.progress(&mut g, now, false);
            }
            let fd = qp.fd.load(Ordering::Relaxed);
            if fd >= 0 {
                fds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        drop(ctx);
        drop(qps);
        sys_poll(&mut fds, 2);
    }
}

/// Kernel bookkeeping charged per queued datagram beyond its payload (sk_buff truesize).
const UD_SKB_OVERHEAD: usize = 1024;

/// Most bytes a UD socket buffers beyond its QP's receive queue depth.
const UD_RCVBUF_MAX: usize = 64 << 20;

/// Raise a UDP socket's receive buffer to `bytes`: `SO_RCVBUFFORCE` where permitted (root or
/// CAP_NET_ADMIN, which may exceed `net.core.rmem_max`), else `SO_RCVBUF` (capped by rmem_max).
#[allow(unsafe_code)]
fn size_udp_rcvbuf(sock: &UdpSocket, bytes: usize) {
    let val = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: the fd is a live socket owned by `sock`; the option value is a c_int read
        // by the kernel for the given length.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&val as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return;
        }
    }
    tracing::debug!(bytes, "could not raise the UD socket receive buffer");
}

#[allow(unsafe_code)]
fn sys_poll(fds: &mut [libc::pollfd], timeout_ms: i32) {
    // SAFETY: `fds` is a valid, exclusively borrowed array of pollfd of the given length; a
    // stale fd (socket closed meanwhile) only yields POLLNVAL.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms);
    }
}

/// Completion queue.
pub(crate) struct Cq {
    pub id: u32,
    pub ctx: Arc<Ctx>,
    depth: usize,
    q: Mutex<CqQueue>,
    qps: Mutex<Vec<Arc<Qp>>>,
}

struct CqQueue {
    q: VecDeque<Wc>,
    overflowed: bool,
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftCq")
            .field("id", &self.id)
            .field("depth", &self.depth)
            .finish()
    }
}

impl Cq {
    pub fn new(ctx: &Arc<Ctx>, depth: u32) -> Result<Arc<Self>> {
        if depth == 0 || depth > ctx.cfg.max_cqe {
            return Err(Error::InvalidParam {
                what: "CQ depth",
                value: depth.to_string(),
                valid: "1 ..= max_cqe",
            });
        }
        Ok(Arc::new(Self {
            id: ctx.new_id(),
            ctx: ctx.clone(),
            depth: depth as usize,
            q: Mutex::new(CqQueue {
                q: VecDeque::with_capacity(depth as usize),
                overflowed: false,
            }),
            qps: Mutex::new(Vec::new()),
        }))
    }

    /// Pushes a completion; false when the CQ overflowed (the completion is lost).
    fn push(&self, wc: Wc) -> bool {
        let mut g = lock(&self.q);
        if g.overflowed {
            return false;
        }
        if g.q.len() >= self.depth {
            g.overflowed = true;
            drop(g);
            self.ctx.event(AsyncEvent::CqError { cq: self.id });
            return false;
        }
        g.q.push_back(wc);
        true
    }

    pub fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        // Iterated under the list lock (no per-poll allocation): nothing takes a QP lock and
        // then this list's lock, so the order cq.qps -> qp.inner cannot deadlock.
        let now = Instant::now();
        for qp in lock(&self.qps).iter() {
            let mut g = lock(&qp.inner);
            qp.progress(&mut g, now, true);
        }
        let mut g = lock(&self.q);
        let n = out.len().min(g.q.len());
        for (slot, wc) in out.iter_mut().zip(g.q.drain(..n)) {
            *slot = wc;
        }
        if n == 0 && g.overflowed {
            return Err(Error::CqOverflow { cq: self.id });
        }
        Ok(n)
    }

    fn attach(&self, qp: &Arc<Qp>) {
        let mut v = lock(&self.qps);
        if !v.iter().any(|q| Arc::ptr_eq(q, qp)) {
            v.push(qp.clone());
        }
    }

    fn detach(&self, qpn: u32) {
        lock(&self.qps).retain(|q| q.qpn != qpn);
    }
}

/// Shared receive queue.
pub(crate) struct Srq {
    pub id: u32,
    ctx: Arc<Ctx>,
    pd: u32,
    max_wr: u32,
    max_sge: u32,
    st: Mutex<SrqState>,
}

struct SrqState {
    q: VecDeque<RecvWqe>,
    limit: u32,
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftSrq").field("id", &self.id).finish()
    }
}

impl Srq {
    pub fn new(
        ctx: &Arc<Ctx>,
        pd: u32,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<Arc<Self>> {
        if max_wr == 0 || max_wr > ctx.cfg.max_qp_wr || limit > max_wr {
            return Err(Error::InvalidParam {
                what: "SRQ max_wr/limit",
                value: format!("{max_wr}/{limit}"),
                valid: "1 <= max_wr <= max_srq_wr, limit <= max_wr",
            });
        }
        Ok(Arc::new(Self {
            id: ctx.new_id(),
            ctx: ctx.clone(),
            pd,
            max_wr,
            max_sge,
            st: Mutex::new(SrqState {
                q: VecDeque::new(),
                limit,
            }),
        }))
    }

    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<()> {
        if wr.sges.len() > self.max_sge as usize {
            return Err(Error::InvalidWr("too many SGEs for this SRQ"));
        }
        let mut g = lock(&self.st);
        if g.q.len() >= self.max_wr as usize {
            return Err(Error::QueueFull { depth: self.max_wr });
        }
        g.q.push_back(RecvWqe {
            wr_id: wr.wr_id,
            sges: wr.sges.to_vec(),
        });
        Ok(())
    }

    /// Arms the limit event: fires once when fewer than `limit` WQEs remain.
    pub fn arm(&self, limit: u32) -> Result<()> {
        if limit > self.max_wr {
            return Err(Error::InvalidParam {
                what: "SRQ limit",
                value: limit.to_string(),
                valid: "0 ..= max_wr",
            });
        }
        lock(&self.st).limit = limit;
        Ok(())
    }

    fn take(&self) -> Option<RecvWqe> {
        let mut g = lock(&self.st);
        let w = g.q.pop_front()?;
        if g.limit > 0 && (g.q.len() as u32) < g.limit {
            g.limit = 0;
            drop(g);
            self.ctx.event(AsyncEvent::SrqLimitReached { srq: self.id });
        }
        Some(w)
    }
}

/// Queue pair.
pub(crate) struct Qp {
    pub qpn: u32,
    pub qp_type: QpType,
    ctx: Arc<Ctx>,
    pd: u32,
    send_cq: Arc<Cq>,
    recv_cq: Arc<Cq>,
    srq: Option<Arc<Srq>>,
    caps: QpCaps,
    qkey: u32,
    fd: AtomicI32,
    last_progress: AtomicU64,
    udp_addr: Option<SocketAddr>,
    inner: Mutex<QpInner>,
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftQp")
            .field("qpn", &self.qpn)
            .field("type", &self.qp_type)
            .finish()
    }
}

struct QpInner {
    state: QpState,
    rq: VecDeque<RecvWqe>,
    udp: Option<UdpSocket>,
    ud_fault: Option<FaultInjector<(SocketAddr, Vec<u8>)>>,
    ud_rx_fault: Option<FaultInjector<()>>,
    ud_pending: VecDeque<(SocketAddr, Vec<u8>)>,
    /// Receive buffers of the UD socket (allocated at the first receive: send-only QPs never
    /// hold one).
    ud_rx: Option<rx::RxBatch>,
    rc: Option<RcConn>,
}

/// Segment batches held back by the RC delay fault, with their release times (kept in order).
type DelayQueue = VecDeque<(Instant, Vec<u8>)>;

struct RcConn {
    proto: RcProto,
    remote: SoftAddr,
    active: bool,
    stream: Option<TcpStream>,
    tx_off: usize,
    rx: Vec<u8>,
    rx_start: usize,
    rx_end: usize,
    rx_fault: Option<FaultInjector<()>>,
    delay: Option<(FaultInjector<()>, DelayQueue)>,
}

/// The RC machine's view of its QP (split borrows of the locked QP state).
struct Env<'a> {
    qp: &'a Qp,
    rq: &'a mut VecDeque<RecvWqe>,
    fault: Option<&'a mut FaultInjector<()>>,
    overflow: bool,
}

impl RcEnv for Env<'_> {
    fn gather(&mut self, sges: &[Sge], out: &mut Vec<u8>) -> std::result::Result<(), WcStatus> {
        self.qp.ctx.mrs.gather(self.qp.pd, sges, out)
    }
    fn scatter(&mut self, sges: &[Sge], data: &[u8]) -> std::result::Result<(), WcStatus> {
        self.qp.ctx.mrs.scatter(self.qp.pd, sges, 0, data)
    }
    fn take_recv(&mut self) -> Option<RecvWqe> {
        match &self.qp.srq {
            Some(s) => s.take(),
            None => self.rq.pop_front(),
        }
    }
    fn remote_write(&mut self, rkey: u32, addr: u64, data: &[u8]) -> bool {
        self.qp.ctx.mrs.remote_write(self.qp.pd, rkey, addr, data)
    }
    fn remote_read(&mut self, rkey: u32, addr: u64, len: usize, out: &mut Vec<u8>) -> bool {
        self.qp
            .ctx
            .mrs
            .remote_read(self.qp.pd, rkey, addr, len, out)
    }
    fn complete(&mut self, wc: Wc, send_cq: bool) {
        let cq = if send_cq {
            &self.qp.send_cq
        } else {
            &self.qp.recv_cq
        };
        if !cq.push(wc) {
            self.overflow = true;
        }
    }
    fn corrupt(&mut self, payload: &mut [u8]) {
        if let Some(f) = self.fault.as_deref_mut() {
            f.maybe_corrupt(payload);
        }
    }
}

/// Creation parameters of a soft QP.
pub(crate) struct QpInitSoft {
    pub qp_type: QpType,
    pub pd: u32,
    pub send_cq: Arc<Cq>,
    pub recv_cq: Arc<Cq>,
    pub srq: Option<Arc<Srq>>,
    pub caps: QpCaps,
    pub qkey: u32,
}

impl Qp {
    pub fn new(ctx: &Arc<Ctx>, init: QpInitSoft) -> Result<Arc<Self>> {
        let c = &init.caps;
        let cfg = &ctx.cfg;
        if c.max_send_wr == 0
            || c.max_send_wr > cfg.max_qp_wr
            || c.max_recv_wr > cfg.max_qp_wr
            || c.max_send_sge > cfg.max_sge
            || c.max_recv_sge > cfg.max_sge
            || c.max_inline_data > cfg.max_inline
        {
            return Err(Error::InvalidParam {
                what: "QP caps",
                value: format!("{c:?}"),
                valid: "1 <= send_wr <= max_qp_wr, recv_wr <= max_qp_wr, sge <= max_sge, inline <= max_inline",
            });
        }
        if let Some(s) = &init.srq {
            if s.pd != init.pd {
                return Err(Error::ContextMismatch);
            }
        }
        let qpn = ctx.new_id();
        let (udp, udp_addr) = if init.qp_type == QpType::Ud {
            let s = UdpSocket::bind(SocketAddr::new(cfg.bind_addr, 0))
                .map_err(|e| Error::io("bind UD socket", e))?;
            s.set_nonblocking(true)
                .map_err(|e| Error::io("UD nonblocking", e))?;
            link::set_dont_fragment(&s, cfg.bind_addr.is_ipv6())?;
            // A HCA accepts as many datagrams as there are posted receives; the kernel's
            // default socket buffer (~200 KiB, 50-100 datagrams) would silently drop bursts that
            // a real device takes. Size it for the deepest receive queue this QP can have.
            // With datagrams of up to 65000 bytes that is half a gigabyte: beyond the posted
            // receives, bound the backlog to UD_RCVBUF_MAX.
            let per = ctx.ud_mtu as usize + UD_SKB_OVERHEAD;
            let depth = c.max_recv_wr.max(cfg.max_qp_wr.min(8192)) as usize;
            let posted = c.max_recv_wr as usize * per;
            size_udp_rcvbuf(&s, (depth * per).min(posted.max(UD_RCVBUF_MAX)));
            let a = s.local_addr().map_err(|e| Error::io("local_addr", e))?;
            (Some(s), Some(a))
        } else {
            (None, None)
        };
        let fd = udp.as_ref().map_or(-1, |s| s.as_raw_fd());
        let ud_fault = (init.qp_type == QpType::Ud && !cfg.ud_fault.is_none()).then(|| {
            FaultInjector::new(FaultConfig {
                seed: cfg.ud_fault.seed ^ u64::from(qpn),
                ..cfg.ud_fault
            })
        });
        let ud_rx_fault = ud_fault.as_ref().map(|_| {
            FaultInjector::new(FaultConfig {
                seed: cfg.ud_fault.seed.wrapping_add(0x5eed) ^ u64::from(qpn),
                ..cfg.ud_fault
            })
        });
        let qp = Arc::new(Self {
            qpn,
            qp_type: init.qp_type,
            ctx: ctx.clone(),
            pd: init.pd,
            send_cq: init.send_cq.clone(),
            recv_cq: init.recv_cq.clone(),
            srq: init.srq,
            caps: init.caps,
            qkey: init.qkey,
            fd: AtomicI32::new(fd),
            last_progress: AtomicU64::new(0),
            udp_addr,
            inner: Mutex::new(QpInner {
                state: QpState::Reset,
                rq: VecDeque::new(),
                udp,
                ud_fault,
                ud_rx_fault,
                ud_pending: VecDeque::new(),
                ud_rx: None,
                rc: None,
            }),
        });
        init.send_cq.attach(&qp);
        init.recv_cq.attach(&qp);
        lock(&ctx.qps).insert(qpn, qp.clone());
        Ok(qp)
    }

    /// Breaks the reference cycles (called when the public handle drops).
    pub fn destroy(&self) {
        self.send_cq.detach(self.qpn);
        self.recv_cq.detach(self.qpn);
        lock(&self.ctx.qps).remove(&self.qpn);
        self.ctx.drop_pending(self.qpn);
        self.fd.store(-1, Ordering::Relaxed);
        let mut g = lock(&self.inner);
        g.udp = None;
        g.rc = None;
    }

    pub fn address(&self) -> Vec<u8> {
        match self.qp_type {
            QpType::Rc => SoftAddr {
                sock: self.ctx.listen_addr,
                qpn: self.qpn,
                kind: 0,
            },
            QpType::Ud => SoftAddr {
                sock: self.udp_addr.expect("UD QPs have a socket"),
                qpn: self.qpn,
                kind: 1,
            },
        }
        .to_bytes()
    }

    pub fn state(&self) -> QpState {
        lock(&self.inner).state
    }

    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    pub fn modify_init(&self) -> Result<()> {
        let mut g = lock(&self.inner);
        if g.state != QpState::Reset {
            return Err(Error::InvalidTransition {
                from: g.state,
                to: QpState::Init,
            });
        }
        g.state = QpState::Init;
        Ok(())
    }

    pub fn modify_rtr(&self, remote: Option<&[u8]>, params: &RcParams) -> Result<()> {
        let mut g = lock(&self.inner);
        if g.state != QpState::Init {
            return Err(Error::InvalidTransition {
                from: g.state,
                to: QpState::Rtr,
            });
        }
        if self.qp_type == QpType::Rc {
            let blob = remote.ok_or(Error::BadAddress("RC needs the peer's address at RTR"))?;
            let remote =
                SoftAddr::parse(blob).map_err(|_| Error::BadAddress("not a soft RC address"))?;
            if remote.kind != 0 {
                return Err(Error::BadAddress("a UD address given to an RC QP"));
            }
            let local = SoftAddr {
                sock: self.ctx.listen_addr,
                qpn: self.qpn,
                kind: 0,
            };
            // The side with the smaller address connects; the other accepts: one TCP stream.
            let active = local.to_bytes() < remote.to_bytes();
            let stream = if active {
                let mut tries = 0;
                let s = loop {
                    match TcpStream::connect_timeout(&remote.sock, Duration::from_secs(5)) {
                        Ok(s) => break s,
                        Err(e) if tries < params.retry_cnt => {
                            tries += 1;
                            tracing::debug!(error = %e, "soft RC connect retry");
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        Err(e) => return Err(Error::io("RC connect", e)),
                    }
                };
                let hello = Hello {
                    job_tag: self.ctx.job_tag,
                    src_qpn: self.qpn,
                    dst_qpn: remote.qpn,
                    src_port: self.ctx.listen_addr.port(),
                };
                (&s).write_all(&hello.to_bytes())
                    .map_err(|e| Error::io("RC hello", e))?;
                s.set_nodelay(true).map_err(|e| Error::io("nodelay", e))?;
                s.set_nonblocking(true)
                    .map_err(|e| Error::io("nonblocking", e))?;
                self.fd.store(s.as_raw_fd(), Ordering::Relaxed);
                Some(s)
            } else {
                None
            };
            let rf = self.ctx.cfg.rc_fault;
            g.rc = Some(RcConn {
                proto: RcProto::new(self.qpn, params.rnr_retry, params.min_rnr_timer),
                remote,
                active,
                stream,
                tx_off: 0,
                rx: vec![0; 256 * 1024],
                rx_start: 0,
                rx_end: 0,
                rx_fault: (rf.corrupt > 0.0).then(|| {
                    FaultInjector::new(FaultConfig {
                        seed: rf.seed ^ u64::from(self.qpn),
                        ..rf
                    })
                }),
                delay: (rf.delay_rate > 0.0).then(|| {
                    (
                        FaultInjector::new(FaultConfig {
                            seed: rf.seed.wrapping_add(1) ^ u64::from(self.qpn),
                            ..rf
                        }),
                        VecDeque::new(),
                    )
                }),
            });
        }
        g.state = QpState::Rtr;
        Ok(())
    }

    pub fn modify_rts(&self) -> Result<()> {
        let mut g = lock(&self.inner);
        if g.state != QpState::Rtr {
            return Err(Error::InvalidTransition {
                from: g.state,
                to: QpState::Rts,
            });
        }
        g.state = QpState::Rts;
        Ok(())
    }

    pub fn modify_error(&self) {
        let mut g = lock(&self.inner);
        self.enter_error(&mut g);
    }

    pub fn reset(&self) {
        let mut g = lock(&self.inner);
        g.rq.clear();
        g.ud_pending.clear();
        g.rc = None;
        if self.qp_type == QpType::Rc {
            self.fd.store(-1, Ordering::Relaxed);
        }
        g.state = QpState::Reset;
    }

    fn enter_error(&self, g: &mut QpInner) {
        if g.state == QpState::Error {
            return;
        }
        g.state = QpState::Error;
        let QpInner { rq, rc, .. } = g;
        let mut env = Env {
            qp: self,
            rq,
            fault: None,
            overflow: false,
        };
        if let Some(c) = rc.as_mut() {
            c.proto.fail(&mut env);
            // Closing the stream tells the peer, as a HCA's retries would eventually.
            if let Some(s) = c.stream.take() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            self.ctx.drop_pending(self.qpn);
            self.fd.store(-1, Ordering::Relaxed);
        }
        while let Some(w) = env.rq.pop_front() {
            let wc = Wc {
                wr_id: w.wr_id,
                status: WcStatus::WrFlushError,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                imm: None,
                qp_num: self.qpn,
                src_qp: 0,
            };
            self.recv_cq.push(wc);
        }
    }

    fn flush_wc(&self, wr_id: u64, opcode: WcOpcode) {
        self.send_or_recv_cq(opcode).push(Wc {
            wr_id,
            status: WcStatus::WrFlushError,
            opcode,
            byte_len: 0,
            imm: None,
            qp_num: self.qpn,
            src_qp: 0,
        });
    }

    fn send_or_recv_cq(&self, op: WcOpcode) -> &Cq {
        if op == WcOpcode::Recv {
            &self.recv_cq
        } else {
            &self.send_cq
        }
    }

    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<()> {
        if self.srq.is_some() {
            return Err(Error::InvalidWr("QP uses an SRQ: post to the SRQ"));
        }
        if wr.sges.len() > self.caps.max_recv_sge as usize {
            return Err(Error::InvalidWr(
                "too many SGEs for this QP's receive queue",
            ));
        }
        let mut g = lock(&self.inner);
        match g.state {
            QpState::Reset => {
                return Err(Error::InvalidWr("QP is in Reset: move it to Init first"))
            }
            QpState::Error => {
                self.flush_wc(wr.wr_id, WcOpcode::Recv);
                return Ok(());
            }
            _ => {}
        }
        if g.rq.len() >= self.caps.max_recv_wr as usize {
            return Err(Error::QueueFull {
                depth: self.caps.max_recv_wr,
            });
        }
        if self.qp_type == QpType::Ud && g.rq.is_empty() {
            // Datagrams that arrived before this WQE was posted found no WQE, as on a HCA. With
            // WQEs already posted, anything queued is theirs (earlier WQEs are consumed first):
            // no system call needed.
            self.ud_receive(&mut g);
        }
        g.rq.push_back(RecvWqe {
            wr_id: wr.wr_id,
            sges: wr.sges.to_vec(),
        });
        Ok(())
    }

    pub fn post_send(
        &self,
        wr: &SendWr<'_>,
        ud_dest: Option<(SocketAddr, u32, u32)>,
    ) -> Result<()> {
        if wr.sges.len() > self.caps.max_send_sge as usize {
            return Err(Error::InvalidWr("too many SGEs for this QP's send queue"));
        }
        let len: usize = wr.sges.iter().map(|s| s.length as usize).sum();
        if wr.inline && len > self.caps.max_inline_data as usize {
            return Err(Error::InvalidWr(
                "inline data above the QP's max_inline_data",
            ));
        }
        let mut g = lock(&self.inner);
        match g.state {
            QpState::Rts => {}
            QpState::Error => {
                let op = match wr.op {
                    SendOp::Send | SendOp::SendWithImm(_) => WcOpcode::Send,
                    SendOp::RdmaWrite { .. } => WcOpcode::RdmaWrite,
                    SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
                };
                self.flush_wc(wr.wr_id, op);
                return Ok(());
            }
            s => {
                return Err(Error::InvalidTransition {
                    from: s,
                    to: QpState::Rts,
                })
            }
        }
        match self.qp_type {
            QpType::Ud => self.ud_send(&mut g, wr, len, ud_dest),
            QpType::Rc => self.rc_send(&mut g, wr),
        }
    }

    fn inline_copy(&self, wr: &SendWr<'_>) -> Result<Option<Vec<u8>>> {
        if !wr.inline {
            return Ok(None);
        }
        let mut v = Vec::new();
        // Inline data is copied now so the caller may reuse the buffers at once.
        self.ctx
            .mrs
            .gather(self.pd, wr.sges, &mut v)
            .map_err(|_| Error::InvalidWr("inline SGE outside registered memory"))?;
        Ok(Some(v))
    }

    fn rc_send(&self, g: &mut QpInner, wr: &SendWr<'_>) -> Result<()> {
        if wr.ud.is_some() {
            return Err(Error::InvalidWr("UD destination on an RC QP"));
        }
        let len: u64 = wr.sges.iter().map(|s| u64::from(s.length)).sum();
        if len > MAX_MSG {
            return Err(Error::InvalidWr("RC message larger than max_msg_size"));
        }
        let inline = self.inline_copy(wr)?;
        let QpInner { rq, rc, .. } = g;
        let c = rc.as_mut().expect("RC QP in RTS has a connection");
        if c.proto.outstanding() >= self.caps.max_send_wr as usize {
            return Err(Error::QueueFull {
                depth: self.caps.max_send_wr,
            });
        }
        let mut env = Env {
            qp: self,
            rq,
            fault: None,
            overflow: false,
        };
        // A deferred ACK rides in the same write as this request.
        c.proto.flush_ack();
        let r = c
            .proto
            .post(&mut env, wr.wr_id, wr.signaled, wr.op, wr.sges, inline);
        let overflow = env.overflow;
        if r.is_ok() {
            self.rc_flush(c, Instant::now());
        }
        if r.is_err() || overflow || c.proto.failed {
            self.enter_error(g);
        }
        Ok(())
    }

    /// Writes pending bytes; returns false if the connection broke.
    fn rc_flush(&self, c: &mut RcConn, now: Instant) -> bool {
        if let Some((inj, q)) = c.delay.as_mut() {
            // Delay whole batches in order (RC never reorders).
            if !c.proto.tx.is_empty() {
                let mut due = now;
                if inj.maybe_delay() {
                    due = now + inj.config().delay;
                }
                if let Some((last, _)) = q.back() {
                    due = due.max(*last);
                }
                q.push_back((due, std::mem::take(&mut c.proto.tx)));
            }
            while q.front().is_some_and(|(d, _)| *d <= now) {
                let (_, b) = q.pop_front().expect("front");
                c.proto.tx.extend_from_slice(&b);
                if q.is_empty() {
                    break;
                }
            }
            if !q.is_empty() && c.proto.tx.is_empty() {
                return true;
            }
        }
        let Some(s) = c.stream.as_mut() else {
            return true;
        };
        while c.tx_off < c.proto.tx.len() {
            match s.write(&c.proto.tx[c.tx_off..]) {
                Ok(0) => return false,
                Ok(n) => c.tx_off += n,
                Err(ref e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(ref e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        if c.tx_off == c.proto.tx.len() {
            c.proto.tx.clear();
            c.tx_off = 0;
        }
        true
    }

    fn ud_send(
        &self,
        g: &mut QpInner,
        wr: &SendWr<'_>,
        len: usize,
        dest: Option<(SocketAddr, u32, u32)>,
    ) -> Result<()> {
        let (to, dst_qpn, qkey) = dest.ok_or(Error::InvalidWr("UD send needs a destination"))?;
        let (opcode, imm) = match wr.op {
            SendOp::Send => (UdOpcode::Send, 0),
            SendOp::SendWithImm(i) => (UdOpcode::SendImm, i),
            _ => {
                return Err(Error::InvalidWr(
                    "UD supports SEND and SEND with immediate only",
                ))
            }
        };
        if len > self.ctx.ud_mtu as usize {
            return Err(Error::InvalidWr("UD message larger than the path MTU"));
        }
        if g.ud_pending.len() >= self.caps.max_send_wr as usize {
            return Err(Error::QueueFull {
                depth: self.caps.max_send_wr,
            });
        }
        let mut pkt = vec![0u8; UD_HEADER_LEN];
        UdRepr {
            opcode,
            job_tag: self.ctx.job_tag,
            src_qpn: self.qpn,
            dst_qpn,
            qkey,
            imm,
        }
        .emit(&mut pkt);
        if let Err(st) = self.ctx.mrs.gather(self.pd, wr.sges, &mut pkt) {
            let wc = Wc {
                wr_id: wr.wr_id,
                status: st,
                opcode: WcOpcode::Send,
                byte_len: 0,
                imm: None,
                qp_num: self.qpn,
                src_qp: 0,
            };
            self.send_cq.push(wc);
            self.enter_error(g);
            return Ok(());
        }
        let now = Instant::now();
        match g.ud_fault.as_mut() {
            Some(f) => f.handle_send(now, (to, pkt)),
            None => g.ud_pending.push_back((to, pkt)),
        }
        self.ud_transmit(g, now);
        // The datagram is handed to the wire (or to the fault model): locally complete.
        if wr.signaled
            && !self.send_cq.push(Wc {
                wr_id: wr.wr_id,
                status: WcStatus::Success,
                opcode: WcOpcode::Send,
                byte_len: len as u32,
                imm: None,
                qp_num: self.qpn,
                src_qp: 0,
            })
        {
            self.enter_error(g);
        }
        Ok(())
    }

    fn ud_transmit(&self, g: &mut QpInner, now: Instant) {
        if let Some(f) = g.ud_fault.as_mut() {
            while let Some(p) = f.poll_transmit(now) {
                g.ud_pending.push_back(p);
            }
        }
        let Some(sock) = g.udp.as_ref() else { return };
        while let Some((to, p)) = g.ud_pending.front() {
            match sock.send_to(p, to) {
                Ok(_) => {
                    g.ud_pending.pop_front();
                }
                Err(ref e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(ref e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                    // DF is set: the path MTU towards `to` fell below the datagram (the
                    // interface MTU was lowered, or a router reported a smaller path). The
                    // message is lost, as a HCA drops a packet above the path MTU; counted, and
                    // said (at growing intervals, not once per datagram).
                    let n = self
                        .ctx
                        .stats
                        .ud_send_mtu_drops
                        .fetch_add(1, Ordering::Relaxed)
                        + 1;
                    if n.is_power_of_two() {
                        tracing::warn!(
                            bytes = p.len(),
                            %to,
                            dropped = n,
                            interface = %self.ctx.link.interface,
                            "soft verbs: a UD datagram exceeds the path MTU (EMSGSIZE: the interface MTU shrank or a router reported a smaller path); dropped"
                        );
                    }
                    g.ud_pending.pop_front();
                }
                Err(e) => {
                    // Unreachable destination etc.: a datagram is just lost, as on the wire.
                    tracing::trace!(error = %e, "soft UD send_to failed");
                    g.ud_pending.pop_front();
                }
            }
        }
    }

    /// Receives every datagram queued on the QP's socket, a batch per system call
    /// (`recvmmsg`: one call returns what is queued, so a poll that finds one datagram costs
    /// one call, not a second one that says there is no more), and hands each to
    /// [`Qp::ud_deliver`] in arrival order.
    fn ud_receive(&self, g: &mut QpInner) {
        if g.udp.is_none() {
            return;
        }
        let mtu = self.ctx.ud_mtu as usize;
        let mut rx = g
            .ud_rx
            .take()
            .unwrap_or_else(|| rx::RxBatch::for_mtu(UD_HEADER_LEN + mtu));
        while let Some(sock) = g.udp.as_ref() {
            let n = match rx.recv(sock) {
                Ok(n) => n,
                Err(ref e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(ref e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // E.g. ECONNREFUSED from an earlier send to a closed port: not fatal for UD.
                    tracing::trace!(error = %e, "soft UD recvmmsg");
                    continue;
                }
            };
            self.ctx.stats.ud_recv_calls.fetch_add(1, Ordering::Relaxed);
            let mut stop = false;
            for i in 0..n {
                let (d, truncated) = rx.datagram(i);
                if !self.ud_deliver(g, d, truncated) {
                    stop = true;
                    break;
                }
            }
            if stop || n < rx.capacity() {
                // A short batch: the socket is drained (what arrives later waits for the next
                // poll).
                break;
            }
        }
        g.ud_rx = Some(rx);
    }

    /// Delivers one received datagram (`truncated`: it did not fit an MTU-sized buffer) into
    /// the next receive WQE, or drops and counts it as a HCA would. False when the QP entered
    /// the error state (nothing more may be delivered).
    fn ud_deliver(&self, g: &mut QpInner, dgram: &mut [u8], truncated: bool) -> bool {
        let QpInner {
            rq,
            ud_rx_fault,
            state,
            ..
        } = g;
        let st = &self.ctx.stats;
        let n = dgram.len();
        let pkt = match UdPacket::new_checked(&mut dgram[..]) {
            Ok(p) => p,
            Err(_) => {
                st.malformed_drops.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        };
        let repr = match UdRepr::parse(&pkt) {
            Ok(r) => r,
            Err(_) => {
                st.malformed_drops.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        };
        if repr.job_tag != self.ctx.job_tag || repr.dst_qpn != self.qpn || repr.qkey != self.qkey {
            st.foreign_drops.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        if truncated || pkt.payload().len() > self.ctx.ud_mtu as usize {
            st.mtu_drops.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        if !matches!(*state, QpState::Rtr | QpState::Rts) {
            st.ud_no_wqe_drops.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let wqe = match &self.srq {
            Some(s) => s.take(),
            None => rq.pop_front(),
        };
        let Some(wqe) = wqe else {
            st.ud_no_wqe_drops.fetch_add(1, Ordering::Relaxed);
            return true;
        };
        let payload = &mut dgram[UD_HEADER_LEN..n];
        if let Some(f) = ud_rx_fault.as_mut() {
            f.maybe_corrupt(payload);
        }
        let (status, byte_len) = match self
            .ctx
            .mrs
            .scatter(self.pd, &wqe.sges, UD_GRH_LEN, payload)
        {
            Ok(()) => (WcStatus::Success, (payload.len() + UD_GRH_LEN) as u32),
            Err(s) => (s, 0),
        };
        let wc = Wc {
            wr_id: wqe.wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len,
            imm: (repr.opcode == UdOpcode::SendImm).then_some(repr.imm),
            qp_num: self.qpn,
            src_qp: repr.src_qpn,
        };
        if !self.recv_cq.push(wc) || status != WcStatus::Success {
            self.enter_error(g);
            return false;
        }
        true
    }

    /// True when the owner has not progressed this QP for `agent_idle`.
    fn stale(&self, ctx: &Ctx) -> bool {
        let idle = ctx.cfg.agent_idle.as_nanos() as u64;
        ctx.now_ns()
            .saturating_sub(self.last_progress.load(Ordering::Relaxed))
            > idle
    }

    /// Moves everything forward: I/O, timers, completions. The owner (`owner`) defers the
    /// ACK of what it just received to its next post or poll, so that in request/reply traffic
    /// the ACK rides in the same write as the reply; the agent acknowledges at once.
    fn progress(&self, g: &mut QpInner, now: Instant, owner: bool) {
        self.last_progress
            .store(self.ctx.now_ns(), Ordering::Relaxed);
        match self.qp_type {
            QpType::Ud => {
                if g.udp.is_some() {
                    self.ud_transmit(g, now);
                    if let Some(f) = g.ud_fault.as_mut() {
                        f.release_held();
                    }
                    if matches!(g.state, QpState::Rtr | QpState::Rts | QpState::Init) {
                        self.ud_receive(g);
                    }
                }
            }
            QpType::Rc => self.rc_progress(g, now, owner),
        }
    }

    fn rc_progress(&self, g: &mut QpInner, now: Instant, defer_ack: bool) {
        if !matches!(g.state, QpState::Rtr | QpState::Rts) {
            return;
        }
        let QpInner { rq, rc, .. } = g;
        let Some(c) = rc.as_mut() else { return };
        if c.stream.is_none() && !c.active {
            match self
                .ctx
                .take_pending(self.qpn, c.remote.qpn, c.remote.sock.port())
            {
                Some(s) => {
                    self.fd.store(s.as_raw_fd(), Ordering::Relaxed);
                    c.stream = Some(s);
                }
                // Not accepted yet: the agent accepts and files it within a poll period.
                None => return,
            }
        }
        let mut broken = false;
        let mut malformed = false;
        // An ACK deferred by the previous call goes out now at the latest.
        c.proto.flush_ack();
        let mut env = Env {
            qp: self,
            rq,
            fault: c.rx_fault.as_mut(),
            overflow: false,
        };
        // Read and parse until the socket is drained; the buffer is allocated once and grows
        // only when one segment is larger than it.
        loop {
            let mut full = false;
            if let Some(s) = c.stream.as_mut() {
                loop {
                    if c.rx_end == c.rx.len() {
                        // Compact only when out of room: a large segment arriving in pieces
                        // is not moved again and again.
                        if c.rx_start > 0 {
                            c.rx.copy_within(c.rx_start..c.rx_end, 0);
                            c.rx_end -= c.rx_start;
                            c.rx_start = 0;
                            continue;
                        }
                        full = true;
                        break;
                    }
                    match s.read(&mut c.rx[c.rx_end..]) {
                        Ok(0) => {
                            broken = true;
                            break;
                        }
                        Ok(n) => c.rx_end += n,
                        Err(ref e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(ref e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(_) => {
                            broken = true;
                            break;
                        }
                    }
                }
            }
            let mut pos = c.rx_start;
            let mut need = 0;
            while pos < c.rx_end {
                match wire::RcSegment::new_checked(&mut c.rx[pos..c.rx_end]) {
                    Ok(mut seg) => {
                        let r = seg.repr();
                        let total = seg.total_len();
                        c.proto.handle_segment(now, &mut env, r, seg.payload_mut());
                        pos += total;
                    }
                    Err(wire::WireError::Truncated) => {
                        need = wire::RcSegment::<&[u8]>::announced_len(&c.rx[pos..c.rx_end]);
                        break;
                    }
                    Err(_) => {
                        malformed = true;
                        break;
                    }
                }
            }
            c.rx_start = pos;
            if pos == c.rx_end {
                c.rx_start = 0;
                c.rx_end = 0;
            }
            if need > MAX_SEGMENT {
                malformed = true;
            }
            if !full || broken || malformed {
                break;
            }
            if c.rx_start == 0 && need > c.rx.len() {
                c.rx.resize(need.next_power_of_two(), 0);
            }
        }
        if !defer_ack {
            c.proto.flush_ack();
        }
        c.proto.handle_timeout(now, &mut env);
        let overflow = env.overflow;
        if !self.rc_flush(c, now) {
            broken = true;
        }
        if malformed {
            self.ctx
                .stats
                .malformed_drops
                .fetch_add(1, Ordering::Relaxed);
        }
        if c.proto.failed || overflow {
            self.enter_error(g);
        } else if broken || malformed {
            tracing::debug!(qpn = self.qpn, "soft RC connection lost");
            let QpInner { rq, rc, .. } = g;
            if let Some(c) = rc.as_mut() {
                let mut env = Env {
                    qp: self,
                    rq,
                    fault: None,
                    overflow: false,
                };
                // Like transport retries running out on a HCA.
                if c.proto.outstanding() > 0 {
                    c.proto.fail_with(&mut env, WcStatus::RetryExceeded);
                }
            }
            self.enter_error(g);
            self.ctx.event(AsyncEvent::QpFatal { qpn: self.qpn });
        }
    }

    pub fn fault_stats(&self) -> FaultStats {
        let g = lock(&self.inner);
        let mut s = FaultStats::default();
        for f in [
            g.ud_fault.as_ref().map(|f| f.stats),
            g.ud_rx_fault.as_ref().map(|f| f.stats),
        ]
        .into_iter()
        .flatten()
        {
            s.dropped += f.dropped;
            s.duplicated += f.duplicated;
            s.reordered += f.reordered;
            s.delayed += f.delayed;
            s.corrupted += f.corrupted;
        }
        if let Some(c) = &g.rc {
            for f in [
                c.rx_fault.as_ref().map(|f| f.stats),
                c.delay.as_ref().map(|d| d.0.stats),
            ]
            .into_iter()
            .flatten()
            {
                s.delayed += f.delayed;
                s.corrupted += f.corrupted;
            }
        }
        s
    }
}
