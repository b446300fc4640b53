//! The soft context and its agent thread.

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::link::{self, SoftLink};
use super::wire::{self, Hello, HELLO_LEN};
use super::{lock, Qp, SoftConfig, SoftStats, SoftStatsSnapshot, MAX_MSG};
use crate::error::{Error, Result};
use crate::mem::MrTable;
use crate::types::*;

pub(crate) struct Ctx {
    pub cfg: SoftConfig,
    /// The interface under `cfg.bind_addr`.
    pub link: SoftLink,
    /// UD MTU in use: `cfg.ud_mtu` clamped to what the link carries unfragmented.
    pub ud_mtu: u32,
    pub(super) job_tag: u64,
    pub mrs: MrTable,
    pub(super) qps: Mutex<HashMap<u32, Arc<Qp>>>,
    next_id: AtomicU32,
    listener: TcpListener,
    pub(super) listen_addr: SocketAddr,
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

    pub(super) fn event(&self, e: AsyncEvent) {
        tracing::debug!(?e, "soft verbs async event");
        lock(&self.events).push_back(e);
    }

    pub fn poll_event(&self) -> Option<AsyncEvent> {
        lock(&self.events).pop_front()
    }

    pub(super) fn now_ns(&self) -> u64 {
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
            ud_empty_polls: self.stats.ud_empty_polls.load(Ordering::Relaxed),
            accept_calls: self.stats.accept_calls.load(Ordering::Relaxed),
        }
    }

    /// Accepts pending RC connections and files them by destination QPN.
    fn accept_all(&self) {
        loop {
            self.stats.accept_calls.fetch_add(1, Ordering::Relaxed);
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
    pub(super) fn drop_pending(&self, qpn: u32) {
        if let Some(v) = lock(&self.pending).remove(&qpn) {
            for (_, s) in v {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    pub(super) fn take_pending(&self, qpn: u32, src_qpn: u32, src_port: u16) -> Option<TcpStream> {
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

/// The agent: accepts connections; progresses the QPs their owner has not polled lately.
fn agent(weak: Weak<Ctx>) {
    let mut fds: Vec<libc::pollfd> = Vec::new();
    // Accept only when the last poll saw a connection waiting: an empty `accept` on every
    // wake-up (every 2 ms) allocated and freed a socket each time, and was most of the
    // agent's time in a profile of an idle rank.
    let mut listener_ready = true;
    loop {
        // The agent ends with its context (the last handle dropped).
        let Some(ctx) = weak.upgrade() else { return };
        if listener_ready {
            ctx.accept_all();
        }
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
        let now_ns = ctx.now_ns();
        for qp in &qps {
            if !qp.stale(&ctx, now_ns) {
                continue;
            }
            // A UD QP that does not read its socket (no WQE, no SRQ) is not watched: a stray
            // datagram left queued on it would wake every poll.
            let mut watch = true;
            if let Ok(mut g) = qp.inner.try_lock() {
                qp.progress(&mut g, now, false);
                watch = qp.qp_type != QpType::Ud || qp.ud_reads(&g);
            }
            let fd = qp.fd.load(Ordering::Relaxed);
            if watch && fd >= 0 {
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
        listener_ready = fds[0].revents != 0;
    }
}

#[allow(unsafe_code)]
fn sys_poll(fds: &mut [libc::pollfd], timeout_ms: i32) {
    // SAFETY: `fds` is a valid, exclusively borrowed array of pollfd of the given length; a
    // stale fd (socket closed meanwhile) only yields POLLNVAL.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms);
    }
}
