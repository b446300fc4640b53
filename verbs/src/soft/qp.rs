//! Queue pairs: creation, state transitions, posting sends, progress.

use std::collections::VecDeque;
use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::rc::{RcProto, RecvWqe};
use super::rc_qp::{Env, RcConn};
use super::ud::{size_udp_rcvbuf, UD_RCVBUF_MAX, UD_SKB_OVERHEAD};
use super::wire::{Hello, SoftAddr};
use super::{link, lock, rx, Cq, Ctx, Srq};
use crate::error::{Error, Result};
use crate::fault::{FaultConfig, FaultInjector, FaultStats};
use crate::types::*;

/// Queue pair.
pub(crate) struct Qp {
    pub qpn: u32,
    pub qp_type: QpType,
    pub(super) ctx: Arc<Ctx>,
    pub(super) pd: u32,
    pub(super) send_cq: Arc<Cq>,
    pub(super) recv_cq: Arc<Cq>,
    pub(super) srq: Option<Arc<Srq>>,
    pub(super) caps: QpCaps,
    pub(super) qkey: u32,
    pub(super) fd: AtomicI32,
    /// Polls by the owner (through a CQ), for the agent's [`Qp::stale`].
    polls: AtomicU64,
    /// The agent's last look at `polls`: the count it saw, and when the count last changed
    /// (ns since the context's epoch). Only the agent writes these.
    agent_seen: AtomicU64,
    agent_seen_ns: AtomicU64,
    udp_addr: Option<SocketAddr>,
    pub(super) inner: Mutex<QpInner>,
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftQp")
            .field("qpn", &self.qpn)
            .field("type", &self.qp_type)
            .finish()
    }
}

pub(super) struct QpInner {
    pub(super) state: QpState,
    pub(super) rq: VecDeque<RecvWqe>,
    pub(super) udp: Option<UdpSocket>,
    pub(super) ud_fault: Option<FaultInjector<(SocketAddr, Vec<u8>)>>,
    pub(super) ud_rx_fault: Option<FaultInjector<()>>,
    pub(super) ud_pending: VecDeque<(SocketAddr, Vec<u8>)>,
    /// Receive buffers of the UD socket (allocated at the first receive: send-only QPs never
    /// hold one).
    pub(super) ud_rx: Option<rx::RxBatch>,
    /// Consecutive receive polls that found a datagram: from `ud::UD_BATCH_STREAK` on, polls
    /// receive in batches (`recvmmsg`); below, one datagram per poll (`recv`, cheaper when
    /// nothing is queued, which is most polls of sparse traffic).
    pub(super) ud_rx_streak: u32,
    /// The destination the socket is connected to (a QP that never receives, see
    /// `Qp::ud_connect`).
    pub(super) ud_peer: Option<SocketAddr>,
    /// Where a datagram is built (kept between sends: no allocation per send).
    pub(super) ud_scratch: Vec<u8>,
    pub(super) rc: Option<RcConn>,
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
            polls: AtomicU64::new(0),
            agent_seen: AtomicU64::new(0),
            agent_seen_ns: AtomicU64::new(0),
            udp_addr,
            inner: Mutex::new(QpInner {
                state: QpState::Reset,
                rq: VecDeque::new(),
                udp,
                ud_fault,
                ud_rx_fault,
                ud_pending: VecDeque::new(),
                ud_rx: None,
                ud_rx_streak: 0,
                ud_peer: None,
                ud_scratch: Vec::new(),
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
                rx: vec![0; super::rc_qp::RC_RX_INITIAL],
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

    pub(super) fn enter_error(&self, g: &mut QpInner) {
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

    pub(super) fn flush_wc(&self, wr_id: u64, opcode: WcOpcode) {
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

    pub(super) fn inline_copy(&self, wr: &SendWr<'_>) -> Result<Option<Vec<u8>>> {
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

    /// Called by the agent (`now_ns`: its clock, ns since the context's epoch): true when the
    /// owner has not polled this QP for `agent_idle`. The owner only counts its polls (no clock
    /// read per poll, which was 2% of a soft UD ping-pong's time); the agent notes when it
    /// saw the count change, so a QP counts as stale `agent_idle` after the agent's first look
    /// that found no new poll (at most one agent period, 2 ms, later than by the clock).
    pub(super) fn stale(&self, ctx: &Ctx, now_ns: u64) -> bool {
        let polls = self.polls.load(Ordering::Relaxed);
        if polls != self.agent_seen.load(Ordering::Relaxed) {
            self.agent_seen.store(polls, Ordering::Relaxed);
            self.agent_seen_ns.store(now_ns, Ordering::Relaxed);
            return false;
        }
        let idle = ctx.cfg.agent_idle.as_nanos() as u64;
        now_ns.saturating_sub(self.agent_seen_ns.load(Ordering::Relaxed)) > idle
    }

    /// The owner's poll (through a CQ): counted for [`Qp::stale`], then [`Qp::progress`]. The
    /// clock is read only for the QPs that use it (RC timers, a fault model), at most once per
    /// CQ poll (`now`, shared by the CQ's QPs).
    pub(super) fn owner_progress(&self, g: &mut QpInner, now: &mut Option<Instant>) {
        // Only written under the QP's lock, which the caller holds.
        let polls = self.polls.load(Ordering::Relaxed);
        self.polls.store(polls.wrapping_add(1), Ordering::Relaxed);
        if self.qp_type == QpType::Ud && g.ud_fault.is_none() {
            self.ud_progress(g, None);
        } else {
            let now = *now.get_or_insert_with(Instant::now);
            self.progress(g, now, true);
        }
    }

    /// Moves everything forward: I/O, timers, completions. The owner (`owner`) defers the
    /// ACK of what it just received to its next post or poll, so that in request/reply traffic
    /// the ACK rides in the same write as the reply; the agent acknowledges at once.
    pub(super) fn progress(&self, g: &mut QpInner, now: Instant, owner: bool) {
        match self.qp_type {
            QpType::Ud => self.ud_progress(g, Some(now)),
            QpType::Rc => self.rc_progress(g, now, owner),
        }
    }

    /// A UD QP's progress: deferred sends, then receives. `now` is read here only when a
    /// fault model needs it and none was given.
    fn ud_progress(&self, g: &mut QpInner, now: Option<Instant>) {
        if g.udp.is_some() {
            self.ud_transmit(g, now);
            if let Some(f) = g.ud_fault.as_mut() {
                f.release_held();
            }
            if self.ud_reads(g) {
                self.ud_receive(g);
            }
        }
    }

    /// Whether a UD QP reads its socket now: it is in a state that receives and has somewhere
    /// to put a datagram (a posted WQE, or an SRQ). A QP without either (a send-only QP, such
    /// as btl-ud's send QPs) would only pay a receive system call per poll to find nothing: what
    /// arrives for it meanwhile waits in the socket and is dropped as "no WQE" when a receive is
    /// posted ([`Qp::post_recv`] drains first), as a HCA drops it on arrival.
    pub(super) fn ud_reads(&self, g: &QpInner) -> bool {
        g.udp.is_some()
            && matches!(g.state, QpState::Rtr | QpState::Rts | QpState::Init)
            && (self.srq.is_some() || !g.rq.is_empty())
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
