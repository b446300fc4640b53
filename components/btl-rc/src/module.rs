//! The btl-rc module: the I/O edge around the sans-IO machines ([`crate::conn`],
//! [`crate::credits`], [`crate::sendq`], [`crate::sched`], [`crate::reorder`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use rmca_framework::btl::{
    exclusivity, Btl, BtlAttributes, BtlError, BtlEvents, BtlFlags, BtlTag, CompletionToken,
    MemAccess, MemoryUsage, ModexRead, Registration, RemoteSegment, SendError, SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::job::JobInfo;
use rmca_framework::memory::{MemoryAccounting, MemoryCounter};
use rmca_framework::rank::{ProcInfo, Rank};
use rmca_framework::rcache::{CachedRegistration, Rcache};
use rmca_verbs::{
    AccessFlags, Ah, AsyncEvent, Context, Cq, Mr, Pd, ProviderKind, Qp, QpCaps, QpInit, QpType,
    RcParams, RecvWr, SendOp, SendWr, SoftConfig, Srq, SrqInit, UdDest, Wc, WcStatus, UD_GRH_LEN,
};
use thiserror::Error;

use crate::config::{ConnectMode, RcConfig, RecvQueues};
use crate::conn::{Action, Connection, State};
use crate::credits::{Credits, CONTROL_RESERVE};
use crate::reorder::Reorder;
use crate::sched::{Plan, QpScheduler};
use crate::sendq::{Item, Pending, SendQueue};
use crate::wire::{
    parse_records, CardRepr, CmPacket, CmRepr, CmType, FragKind, FragPacket, FragRepr,
    EAGER_FOOTER_LEN, EAGER_VALID, FRAG_HEADER_LEN,
};

/// Errors of opening the module.
#[derive(Debug, Error)]
pub enum RcError {
    /// A verbs call failed.
    #[error("btl-rc: {op}: {source}")]
    Verbs {
        /// What was being done.
        op: &'static str,
        /// The verbs error.
        #[source]
        source: rmca_verbs::Error,
    },
    /// The configuration cannot work here.
    #[error("btl-rc: {0}")]
    Unsupported(String),
}

impl From<RcError> for BtlError {
    fn from(e: RcError) -> Self {
        BtlError::Other(e.to_string())
    }
}

fn verbs(op: &'static str) -> impl FnOnce(rmca_verbs::Error) -> RcError {
    move |source| RcError::Verbs { op, source }
}

const Q_KEY: u32 = 0x5243_4d31;
const CTRL_WQES: u32 = 4;
const CM_RECV: usize = 64;
const CM_SEND: usize = 16;
const WR_RDMA: u64 = 1 << 63;
const WR_CTRL: u64 = 1 << 62;
const WR_CM_SEND: u64 = 1 << 61;
const NO_FLOW_CONTROL: u16 = u16::MAX;

/// Fixed-size buffers in registered slabs (send and receive buffers).
#[derive(Debug)]
struct BufPool {
    slabs: Vec<Mr>,
    size: usize,
    per_slab: usize,
    free: Vec<u64>,
    total: usize,
    max: usize,
    memory: Arc<MemoryCounter>,
}

impl BufPool {
    fn new(size: usize, per_slab: usize, max: usize, memory: Arc<MemoryCounter>) -> Self {
        Self {
            slabs: Vec::new(),
            size,
            per_slab: per_slab.max(1),
            free: Vec::new(),
            total: 0,
            max,
            memory,
        }
    }
    fn grow(&mut self, pd: &Pd, n: usize) -> usize {
        let n = n.min(self.max.saturating_sub(self.total));
        if n == 0 {
            return 0;
        }
        let mr = match pd.register(n * self.size, AccessFlags::LOCAL_WRITE) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "btl-rc: buffer slab registration failed");
                return 0;
            }
        };
        self.memory.alloc(n * self.size);
        let slab = self.slabs.len() as u64;
        self.slabs.push(mr);
        self.free
            .extend((0..n as u64).rev().map(|i| (slab << 32) | i));
        self.total += n;
        n
    }
    fn alloc(&mut self, pd: &Pd) -> Option<u64> {
        if self.free.is_empty() {
            self.grow(pd, self.per_slab);
        }
        self.free.pop()
    }
    fn release(&mut self, id: u64) {
        self.free.push(id);
    }
    fn locate(&self, id: u64) -> (&Mr, usize) {
        let slab = ((id >> 32) & 0x1fff_ffff) as usize;
        (&self.slabs[slab], (id & 0xffff_ffff) as usize * self.size)
    }
    fn sge(&self, id: u64, len: usize) -> rmca_verbs::Sge {
        let (mr, off) = self.locate(id);
        mr.sge(off, len as u32).expect("buffer inside its slab")
    }
    fn write(&self, id: u64, at: usize, data: &[u8]) {
        let (mr, off) = self.locate(id);
        mr.write_at(off + at, data)
            .expect("write inside the buffer");
    }
    fn read(&self, id: u64, at: usize, out: &mut [u8]) {
        let (mr, off) = self.locate(id);
        mr.read_at(off + at, out).expect("read inside the buffer");
    }
}

impl Drop for BufPool {
    fn drop(&mut self) {
        self.memory.free(self.total * self.size);
    }
}

#[derive(Debug)]
struct QpSlot {
    qp: Qp,
    wqes: u32,
    ctrl_wqes: u32,
    credits: Option<Credits>,
    credit_msg_due: bool,
}

/// A ring of RDMA-writable slots this process polls for one peer's eager messages.
#[derive(Debug)]
struct RingRx {
    mr: Mr,
    slots: u32,
    slot_size: usize,
    tail: u32,
    owed: u32,
    open_due: bool,
}

/// The peer's ring we write eager messages into.
#[derive(Debug)]
struct RingTx {
    addr: u64,
    rkey: u32,
    slots: u32,
    slot_size: usize,
    head: u32,
    credits: u32,
}

#[derive(Debug)]
struct Peer {
    rank: Rank,
    reachable: bool,
    ah: Option<Ah>,
    conn: Connection,
    qps: Vec<QpSlot>,
    local_addrs: Vec<Vec<u8>>,
    sched: QpScheduler,
    queue: SendQueue,
    tx_seq: u16,
    rx: Reorder,
    rtu_due: bool,
    failed: Option<String>,
    failure_reported: bool,
    rx_count: u64,
    ring_rx: Option<RingRx>,
    ring_tx: Option<RingTx>,
}

impl Peer {
    fn control_due(&self) -> bool {
        self.rtu_due
            || self.qps.iter().any(|q| {
                q.credit_msg_due || q.credits.as_ref().is_some_and(|c| c.needs_credit_msg())
            })
            || self
                .ring_rx
                .as_ref()
                .is_some_and(|r| r.open_due || r.owed >= (r.slots / 2).max(1))
    }
}

#[derive(Debug)]
struct RdmaOp {
    token: CompletionToken,
    reg: Option<u64>,
    peer: usize,
    qp: usize,
}

#[derive(Debug)]
struct UserReg {
    mr: Mr,
    refs: u32,
    addr: usize,
    len: usize,
    cached: bool,
}

#[derive(Debug, Default)]
struct Stats {
    sent: u64,
    received: u64,
    connections: u64,
    qps_created: u64,
    cm_dropped: u64,
    malformed: u64,
    wqe_stalls: u64,
    credit_stalls: u64,
    credit_msgs: u64,
    stripes_sent: u64,
    srq_limit_events: u64,
    srq_posted: u64,
    rdma_ops: u64,
    peer_failures: u64,
    queued: u64,
    eager_rings: u64,
    eager_sent: u64,
    eager_received: u64,
    /// Data fragments (send or eager RDMA write) per QP index, summed over peers: shows
    /// how the multi-QP policy spreads traffic.
    qp_frags: Vec<u64>,
    /// Data fragments posted (sends and eager RDMA writes), for `btl_rc_fault_kill_after`.
    data_posts: u64,
}

/// The registration cache component's cache (a trait object, so Debug by hand).
struct RcacheHandle(Box<dyn Rcache>);

impl std::fmt::Debug for RcacheHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rcache")
            .field("entries", &self.0.len())
            .finish()
    }
}

impl std::ops::Deref for RcacheHandle {
    type Target = dyn Rcache;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::ops::DerefMut for RcacheHandle {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut *self.0
    }
}

/// One btl-rc module: one verbs device port.
#[derive(Debug)]
pub struct RcBtl {
    // Drop order matters for the rdma provider: QPs, then the SRQ, MRs, CQs, PD, context.
    peers: Vec<Peer>,
    cm_qp: Qp,
    srq: Option<Srq>,
    regs: HashMap<u64, UserReg>,
    cm_recv: BufPool,
    cm_send: BufPool,
    /// Receive buffers per receive queue class (`btl_rc_receive_queues`, by size).
    recv_pools: Vec<BufPool>,
    send_pool: BufPool,
    send_cq: Cq,
    recv_cq: Cq,
    cm_cq: Cq,
    pd: Pd,
    ctx: Context,
    rcache: RcacheHandle,
    next_reg: u64,
    ops: HashMap<u64, RdmaOp>,
    next_op: u64,
    qpn_map: HashMap<u32, (usize, usize)>,
    /// Peer whose QPs `btl_rc_fault_kill_after` kills at the next progress.
    kill_due: Option<usize>,
    cfg: RcConfig,
    attrs: BtlAttributes,
    card: CardRepr,
    rank: Rank,
    job_tag: u32,
    ud_mtu: usize,
    srq_total: u32,
    wcs: Vec<Wc>,
    scratch: Vec<u8>,
    stats: Stats,
    memory: Arc<MemoryCounter>,
}

/// FNV-1a of the job secret: CM datagrams of other jobs are dropped.
fn job_tag(secret: &[u8]) -> u32 {
    secret.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

fn rc_params() -> RcParams {
    RcParams {
        // 7 is the largest count the spec allows, but Soft-RoCE (rxe) reads it as "retry
        // forever", so a peer that vanished would never fail its sends: 6 retries of the
        // local ACK timeout, then RETRY_EXC_ERR and peer_failed.
        retry_cnt: 6,
        ..RcParams::default()
    }
}

impl RcBtl {
    /// Open the device, create the CM QP and the receive resources. No RC QP exists yet.
    /// `rcache` caches the user-buffer registrations of put/get (the component the `rcache`
    /// selector chose: [`rmca_framework::component::InitContext::create_rcache`]).
    pub fn open(
        cfg: &RcConfig,
        job: &JobInfo,
        memory: &MemoryAccounting,
        rcache: Box<dyn Rcache>,
    ) -> Result<Self, RcError> {
        let kind = cfg.device.provider.resolve();
        rmca_common_verbs::check_faults_supported(kind, &cfg.fault, "btl_rc")
            .map_err(RcError::Unsupported)?;
        let soft = SoftConfig {
            rc_fault: cfg.fault,
            ..SoftConfig::default()
        };
        let pcfg = cfg.device.provider_config(kind, soft, &job.secret);
        let ctx = Context::open(&pcfg).map_err(verbs("open device"))?;
        let attr = ctx.attr();
        if u64::from(cfg.max_send_size as u32) > attr.max_msg_size {
            return Err(RcError::Unsupported(format!(
                "btl_rc_max_send_size {} exceeds the device's largest message ({})",
                cfg.max_send_size, attr.max_msg_size
            )));
        }
        let memory = memory.counter("btl.rc");
        let pd = ctx.alloc_pd().map_err(verbs("alloc PD"))?;
        let cqe = attr.max_cqe.min(1 << 16);
        let send_cq = ctx.create_cq(cqe).map_err(verbs("create send CQ"))?;
        let recv_cq = ctx.create_cq(cqe).map_err(verbs("create recv CQ"))?;
        let cm_cq = ctx
            .create_cq((CM_RECV + CM_SEND) as u32 * 2)
            .map_err(verbs("create CM CQ"))?;
        let ud_mtu = attr.mtu as usize;
        let cm_qp = pd
            .create_qp(QpInit {
                qp_type: QpType::Ud,
                send_cq: &cm_cq,
                recv_cq: &cm_cq,
                srq: None,
                caps: QpCaps {
                    max_send_wr: CM_SEND as u32,
                    max_recv_wr: CM_RECV as u32,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qkey: Q_KEY,
            })
            .map_err(verbs("create CM QP"))?;
        cm_qp
            .connect(None, &rc_params())
            .map_err(verbs("activate CM QP"))?;
        let mut cm_recv = BufPool::new(UD_GRH_LEN + ud_mtu, CM_RECV, CM_RECV, memory.clone());
        cm_recv.grow(&pd, CM_RECV);
        let mut cm_send = BufPool::new(ud_mtu, CM_SEND, CM_SEND, memory.clone());
        cm_send.grow(&pd, CM_SEND);
        for _ in 0..CM_RECV {
            let id = cm_recv.alloc(&pd).expect("pre-grown");
            let sge = cm_recv.sge(id, UD_GRH_LEN + ud_mtu);
            cm_qp
                .post_recv(&RecvWr {
                    wr_id: id,
                    sges: &[sge],
                })
                .map_err(verbs("post CM receive"))?;
        }
        let buf_size = cfg.max_send_size + FRAG_HEADER_LEN;
        let send_pool = BufPool::new(buf_size, 64, usize::MAX, memory.clone());
        // One pool per receive queue class, of that class's buffer size.
        let mut recv_pools: Vec<BufPool> = cfg
            .recv
            .queues()
            .iter()
            .map(|q| BufPool::new(q.size + FRAG_HEADER_LEN, 64, usize::MAX, memory.clone()))
            .collect();
        let mut srq = None;
        let mut srq_total = 0;
        if let Some((class, RecvQueues::Shared { initial, low, .. })) = cfg.recv.shared() {
            let depth = attr.max_srq_wr.min(1 << 15);
            let s = pd
                .create_srq(SrqInit {
                    max_wr: depth,
                    max_sge: 1,
                    limit: low,
                })
                .map_err(verbs("create SRQ"))?;
            let size = recv_pools[class].size;
            let recv_pool = &mut recv_pools[class];
            *recv_pool = BufPool::new(size, initial as usize, usize::MAX, memory.clone());
            recv_pool.grow(&pd, initial as usize);
            for _ in 0..initial {
                let id = recv_pool.alloc(&pd).expect("pre-grown");
                let sge = recv_pool.sge(id, size);
                s.post_recv(&RecvWr {
                    wr_id: id,
                    sges: &[sge],
                })
                .map_err(verbs("post SRQ receive"))?;
            }
            srq_total = initial;
            srq = Some(s);
        }
        let estimate = cfg.device.estimate(kind, rmca_common_verbs::Transport::Rc);
        let attrs = BtlAttributes {
            eager_limit: cfg.eager_limit,
            rndv_eager_limit: cfg.eager_limit,
            max_send_size: cfg.max_send_size,
            rdma_pipeline_send_length: cfg.eager_limit,
            rdma_pipeline_frag_size: (attr.max_msg_size.min(8 << 20)) as usize,
            min_rdma_pipeline_size: 0,
            exclusivity: exclusivity::HIGH_SPEED_NETWORK,
            latency_ns: estimate.latency_ns,
            bandwidth_mbps: estimate.bandwidth_mbps,
            flags: BtlFlags::SEND | BtlFlags::PUT | BtlFlags::GET,
            ..BtlAttributes::default()
        };
        let card = CardRepr {
            provider: u8::from(kind == ProviderKind::Rdma),
            cm_addr: cm_qp.address(),
        };
        let scratch_len = recv_pools
            .iter()
            .map(|p| p.size)
            .chain([buf_size, UD_GRH_LEN + ud_mtu])
            .max()
            .unwrap_or(buf_size);
        let stats = Stats {
            srq_posted: u64::from(srq_total),
            qp_frags: vec![0; cfg.qps_per_peer as usize * cfg.recv.queues().len()],
            ..Stats::default()
        };
        Ok(Self {
            peers: Vec::new(),
            cm_qp,
            srq,
            regs: HashMap::new(),
            cm_recv,
            cm_send,
            recv_pools,
            send_pool,
            send_cq,
            recv_cq,
            cm_cq,
            pd,
            ctx,
            rcache: RcacheHandle(rcache),
            next_reg: 1,
            ops: HashMap::new(),
            next_op: 0,
            qpn_map: HashMap::new(),
            kill_due: None,
            cfg: cfg.clone(),
            attrs,
            card,
            rank: job.rank,
            job_tag: job_tag(&job.secret),
            ud_mtu,
            srq_total,
            wcs: vec![Wc::EMPTY; 64],
            scratch: vec![0; scratch_len],
            stats,
            memory,
        })
    }

    /// The business card to publish under [`crate::MODEX_KEY`].
    pub fn card(&self) -> &CardRepr {
        &self.card
    }

    /// Connection state towards `peer` (for tests and tools).
    pub fn connection_state(&self, peer: Rank) -> Option<State> {
        self.peers.get(peer as usize).map(|p| p.conn.state())
    }

    /// RC QPs currently existing.
    pub fn qp_count(&self) -> usize {
        self.peers.iter().map(|p| p.qps.len()).sum()
    }

    fn peer_idx(&self, peer: Rank) -> Result<usize, SendError> {
        match self.peers.get(peer as usize) {
            Some(p) if p.reachable => Ok(peer as usize),
            _ => Err(SendError::Unreachable(peer)),
        }
    }

    // ------------------------------------------------------------------ connection actions

    fn run_actions(&mut self, pi: usize, now: Instant) {
        while let Some(a) = self.peers[pi].conn.poll_action() {
            let r = match a {
                Action::CreateQps => self.create_qps(pi),
                Action::ConnectQps { remote, credits } => self.connect_qps(pi, &remote, credits),
                Action::SendReq => {
                    self.cm_send(pi, CmType::Req);
                    Ok(())
                }
                Action::SendRep => {
                    self.cm_send(pi, CmType::Rep);
                    Ok(())
                }
                Action::SendRtu => {
                    self.peers[pi].rtu_due = true;
                    Ok(())
                }
                Action::Established => {
                    self.stats.connections += 1;
                    tracing::debug!(me = self.rank, peer = pi, "btl-rc: connection established");
                    Ok(())
                }
                Action::Fail(reason) => {
                    self.fail_peer(pi, &reason);
                    Ok(())
                }
            };
            if let Err(e) = r {
                self.peers[pi].conn.fail(&e);
            }
        }
        let _ = now;
    }

    fn create_qps(&mut self, pi: usize) -> Result<(), String> {
        if !self.peers[pi].qps.is_empty() {
            return Ok(());
        }
        let n = self.cfg.qps_per_peer as usize;
        // QPs grouped by receive queue class: class c owns QPs c*n .. (c+1)*n.
        let classes: Vec<Option<u32>> = self
            .cfg
            .recv
            .queues()
            .iter()
            .map(|q| match q.kind {
                RecvQueues::PerPeer { bufs, .. } => Some(bufs + CONTROL_RESERVE),
                RecvQueues::Shared { .. } => None,
            })
            .collect();
        for (class, per_peer) in classes
            .iter()
            .flat_map(|c| std::iter::repeat_n(c, n))
            .enumerate()
        {
            let class = class / n;
            let per_peer = *per_peer;
            let qp = self
                .pd
                .create_qp(QpInit {
                    qp_type: QpType::Rc,
                    send_cq: &self.send_cq,
                    recv_cq: &self.recv_cq,
                    srq: if per_peer.is_none() {
                        self.srq.as_ref()
                    } else {
                        None
                    },
                    caps: QpCaps {
                        max_send_wr: self.cfg.send_wqes + CTRL_WQES,
                        max_recv_wr: per_peer.unwrap_or(1),
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    qkey: 0,
                })
                .map_err(|e| format!("create RC QP: {e}"))?;
            qp.modify_to_init()
                .map_err(|e| format!("RC QP to Init: {e}"))?;
            if let Some(count) = per_peer {
                for _ in 0..count {
                    let pool = &mut self.recv_pools[class];
                    let id = pool.alloc(&self.pd).ok_or("receive buffers exhausted")?;
                    let sge = pool.sge(id, pool.size);
                    qp.post_recv(&RecvWr {
                        wr_id: id,
                        sges: &[sge],
                    })
                    .map_err(|e| format!("post receive: {e}"))?;
                }
            }
            self.stats.qps_created += 1;
            let qi = self.peers[pi].qps.len();
            self.qpn_map.insert(qp.qp_num(), (pi, qi));
            self.peers[pi].local_addrs.push(qp.address());
            self.peers[pi].qps.push(QpSlot {
                qp,
                wqes: self.cfg.send_wqes,
                ctrl_wqes: CTRL_WQES,
                credits: None,
                credit_msg_due: false,
            });
        }
        Ok(())
    }

    fn connect_qps(&mut self, pi: usize, remote: &[Vec<u8>], credits: u16) -> Result<(), String> {
        let p = &mut self.peers[pi];
        if remote.len() != p.qps.len() {
            return Err(format!(
                "peer {} uses {} QPs per peer, this process {} (btl_rc_qps_per_peer must agree)",
                p.rank,
                remote.len(),
                p.qps.len()
            ));
        }
        let qpp = self.cfg.qps_per_peer as usize;
        let per_peer = self.cfg.recv.per_peer();
        if per_peer.is_some() == (credits == NO_FLOW_CONTROL) {
            return Err(format!(
                "peer {} {} per-peer receive queues and this process {} (btl_rc_receive_queues must agree)",
                p.rank,
                if credits == NO_FLOW_CONTROL { "has no" } else { "has" },
                if per_peer.is_some() { "has" } else { "has none" },
            ));
        }
        for (qi, (slot, addr)) in p.qps.iter_mut().zip(remote).enumerate() {
            // Flow control only on the per-peer class's QPs: the SRQ class has none.
            let (granted, threshold) = match per_peer {
                Some((class, _, threshold)) if qi / qpp == class => (u32::from(credits), threshold),
                _ => (u32::MAX / 2, u32::MAX),
            };
            slot.qp
                .modify_to_rtr(Some(addr), &rc_params())
                .map_err(|e| format!("RC QP to RTR: {e}"))?;
            slot.qp
                .modify_to_rts()
                .map_err(|e| format!("RC QP to RTS: {e}"))?;
            slot.credits = Some(Credits::new(granted, threshold));
        }
        Ok(())
    }

    /// The credits a peer gets on each of its QPs of the per-peer class.
    fn local_credits(&self) -> u16 {
        match self.cfg.recv.per_peer() {
            Some((_, bufs, _)) => bufs.min(u32::from(u16::MAX - 1)) as u16,
            None => NO_FLOW_CONTROL,
        }
    }

    /// The receive queue class of QP `qi` of a peer.
    fn class_of_qp(&self, qi: usize) -> usize {
        (qi / self.cfg.qps_per_peer as usize).min(self.recv_pools.len() - 1)
    }

    /// Does QP `qi` of a peer have its own receive queue (else it uses the SRQ)?
    fn qp_per_peer(&self, qi: usize) -> bool {
        matches!(
            self.cfg.recv.queues()[self.class_of_qp(qi)].kind,
            RecvQueues::PerPeer { .. }
        )
    }

    /// The scheduler's plan for a fragment of `len` bytes, on the QPs of the receive queue
    /// class whose buffers hold it.
    fn plan(&mut self, pi: usize, len: usize, hint: SendHint) -> Plan {
        let base = self.cfg.recv.class_of(len) * self.cfg.qps_per_peer as usize;
        match self.peers[pi].sched.plan(len, hint) {
            Plan::One(q) => Plan::One(base + q),
            Plan::Stripe(v) => Plan::Stripe(
                v.into_iter()
                    .map(|(q, off, l)| (base + q, off, l))
                    .collect(),
            ),
        }
    }

    fn cm_send(&mut self, pi: usize, t: CmType) {
        let repr = CmRepr {
            cm_type: t,
            src: self.rank,
            dst: self.peers[pi].rank,
            job: self.job_tag,
            credits: self.local_credits(),
            addrs: self.peers[pi].local_addrs.clone(),
        };
        let bytes = repr.to_bytes();
        if bytes.len() > self.ud_mtu {
            self.peers[pi]
                .conn
                .fail("connection request larger than the UD MTU");
            return;
        }
        let Some(ah) = self.peers[pi].ah.as_ref() else {
            return;
        };
        let Some(id) = self.cm_send.alloc(&self.pd) else {
            // Every CM send slot is busy: the retransmission timer covers this loss.
            self.stats.cm_dropped += 1;
            return;
        };
        self.cm_send.write(id, 0, &bytes);
        let sge = self.cm_send.sge(id, bytes.len());
        let wr = SendWr {
            wr_id: WR_CM_SEND | id,
            op: SendOp::Send,
            sges: &[sge],
            signaled: true,
            inline: false,
            ud: Some(UdDest {
                ah,
                remote_qpn: ah.remote_qpn(),
                remote_qkey: Q_KEY,
            }),
        };
        if let Err(e) = self.cm_qp.post_send(&wr) {
            tracing::debug!(error = %e, "btl-rc: CM send refused");
            self.cm_send.release(id);
            self.stats.cm_dropped += 1;
        }
    }

    /// Count a posted data fragment; `btl_rc_fault_kill_after` kills the path to `pi` at
    /// the configured count, at the next progress (not here: callers still hold the
    /// peer's send queue). What was posted by then is flushed, never delivered.
    fn count_data_post(&mut self, pi: usize) {
        self.stats.data_posts += 1;
        if self
            .cfg
            .fault_kill_after
            .is_some_and(|n| self.stats.data_posts == n.max(1))
        {
            self.kill_due = Some(pi);
        }
    }

    fn fail_peer(&mut self, pi: usize, reason: &str) {
        let p = &mut self.peers[pi];
        if p.failed.is_some() {
            return;
        }
        tracing::warn!(peer = p.rank, reason, "btl-rc: path to peer failed");
        self.stats.peer_failures += 1;
        p.failed = Some(reason.to_owned());
        p.queue.clear();
        p.conn.fail(reason);
        for s in &p.qps {
            // Flushes return every posted buffer through the CQs.
            let _ = s.qp.modify_to_error();
        }
    }

    // ------------------------------------------------------------------ send path

    fn post_buf(
        &mut self,
        pi: usize,
        qi: usize,
        hdr: FragRepr,
        parts: &[&[u8]],
        control: bool,
    ) -> Result<(), SendError> {
        let Some(id) = self.send_pool.alloc(&self.pd) else {
            return Err(SendError::WouldBlock);
        };
        let mut h = [0u8; FRAG_HEADER_LEN];
        let mut hdr = hdr;
        if let Some(c) = self.peers[pi].qps[qi].credits.as_mut() {
            hdr.credits = c.take_owed();
        }
        hdr.emit(&mut h);
        self.send_pool.write(id, 0, &h);
        let mut off = FRAG_HEADER_LEN;
        for part in parts {
            self.send_pool.write(id, off, part);
            off += part.len();
        }
        let sge = self.send_pool.sge(id, off);
        let wr = SendWr {
            wr_id: if control { WR_CTRL | id } else { id },
            op: SendOp::Send,
            sges: &[sge],
            signaled: true,
            inline: false,
            ud: None,
        };
        let slot = &mut self.peers[pi].qps[qi];
        match slot.qp.post_send(&wr) {
            Ok(()) => {
                if control {
                    slot.ctrl_wqes -= 1;
                } else {
                    slot.wqes -= 1;
                    if let Some(c) = self.stats.qp_frags.get_mut(qi) {
                        *c += 1;
                    }
                    self.count_data_post(pi);
                }
                Ok(())
            }
            Err(e) => {
                self.send_pool.release(id);
                if let Some(c) = slot.credits.as_mut() {
                    c.returned(hdr.credits);
                }
                match e {
                    rmca_verbs::Error::QueueFull { .. } => Err(SendError::WouldBlock),
                    e => {
                        let reason = format!("post send: {e}");
                        self.fail_peer(pi, &reason);
                        Err(SendError::PeerFailed {
                            peer: pi as Rank,
                            reason,
                        })
                    }
                }
            }
        }
    }

    /// Can QP `qi` of `pi` take one data send now? Spends the credit when it can.
    fn reserve(&mut self, pi: usize, qi: usize) -> bool {
        let slot = &mut self.peers[pi].qps[qi];
        if slot.wqes == 0 {
            self.stats.wqe_stalls += 1;
            return false;
        }
        match slot.credits.as_mut() {
            Some(c) => {
                let ok = c.try_spend(1);
                if !ok {
                    self.stats.credit_stalls += 1;
                }
                ok
            }
            None => true,
        }
    }

    fn unreserve(&mut self, pi: usize, qi: usize) {
        if let Some(c) = self.peers[pi].qps[qi].credits.as_mut() {
            c.returned(1);
        }
    }

    fn try_send_now(
        &mut self,
        pi: usize,
        tag: BtlTag,
        seq: u16,
        header: &[u8],
        payload: &[u8],
        hint: SendHint,
    ) -> Result<bool, SendError> {
        let len = header.len() + payload.len();
        let plan = self.plan(pi, len, hint);
        match plan {
            Plan::One(qi) => {
                if self.try_eager(pi, qi, tag, seq, header, payload)? {
                    return Ok(true);
                }
                if self.send_pool.free.is_empty() && self.send_pool.total >= self.send_pool.max {
                    return Ok(false);
                }
                if !self.reserve(pi, qi) {
                    return Ok(false);
                }
                let hdr = FragRepr::data(tag, seq, header.len());
                match self.post_buf(pi, qi, hdr, &[header, payload], false) {
                    Ok(()) => Ok(true),
                    Err(SendError::WouldBlock) => {
                        self.unreserve(pi, qi);
                        Ok(false)
                    }
                    Err(e) => Err(e),
                }
            }
            Plan::Stripe(stripes) => {
                // All stripes or none: check every QP first.
                let mut taken = Vec::new();
                for &(qi, _, _) in &stripes {
                    if self.reserve(pi, qi) {
                        taken.push(qi);
                    } else {
                        for q in taken {
                            self.unreserve(pi, q);
                        }
                        return Ok(false);
                    }
                }
                let mut whole = Vec::with_capacity(len);
                whole.extend_from_slice(header);
                whole.extend_from_slice(payload);
                let n = stripes.len() as u16;
                for (i, &(qi, off, l)) in stripes.iter().enumerate() {
                    let hdr = FragRepr {
                        kind: FragKind::Stripe,
                        tag,
                        credits: 0,
                        seq,
                        aux: ((i as u16) << 8) | n,
                        a: len as u32,
                        b: off as u32,
                    };
                    match self.post_buf(pi, qi, hdr, &[&whole[off..off + l]], false) {
                        Ok(()) => self.stats.stripes_sent += 1,
                        Err(SendError::WouldBlock) if i == 0 => {
                            for &(q, _, _) in &stripes {
                                self.unreserve(pi, q);
                            }
                            return Ok(false);
                        }
                        Err(SendError::WouldBlock) => {
                            // Send buffers ran out mid-stripe; the fragment cannot be
                            // half-sent, so the path is unusable (never happens with an
                            // unbounded send pool).
                            let reason = "send buffers exhausted mid-stripe".to_owned();
                            self.fail_peer(pi, &reason);
                            return Err(SendError::PeerFailed {
                                peer: pi as Rank,
                                reason,
                            });
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok(true)
            }
        }
    }

    fn send_control(&mut self, pi: usize, qi: usize, kind: FragKind) -> bool {
        if self.peers[pi].qps[qi].ctrl_wqes == 0 {
            return false;
        }
        self.post_buf(pi, qi, FragRepr::control(kind, 0), &[], true)
            .is_ok()
    }

    /// Send what the connection owes and what is queued, in order.
    fn drain_peer(&mut self, pi: usize) -> usize {
        if self.peers[pi].failed.is_some() || !self.peers[pi].conn.is_connected() {
            return 0;
        }
        let mut moved = 0;
        if self.peers[pi].rtu_due && self.send_control(pi, 0, FragKind::Rtu) {
            self.peers[pi].rtu_due = false;
            moved += 1;
        }
        for qi in 0..self.peers[pi].qps.len() {
            let due = {
                let s = &self.peers[pi].qps[qi];
                s.credit_msg_due || s.credits.as_ref().is_some_and(|c| c.needs_credit_msg())
            };
            if due {
                let ok = self.send_control(pi, qi, FragKind::Credit);
                self.peers[pi].qps[qi].credit_msg_due = !ok;
                if ok {
                    self.stats.credit_msgs += 1;
                    moved += 1;
                }
            }
        }
        moved += self.ring_control(pi);
        while let Some(front) = self.peers[pi].queue.front() {
            let front_hint = front.hint;
            if self.peers[pi].queue.next_is_bundle() {
                // A bundle can be as large as a fragment: the largest receive buffers.
                let base = (self.recv_pools.len() - 1) * self.cfg.qps_per_peer as usize;
                let qi = base
                    + match self.peers[pi].sched.plan(0, front_hint) {
                        Plan::One(q) => q,
                        Plan::Stripe(_) => 0,
                    };
                if !self.reserve(pi, qi) {
                    break;
                }
                let Some(Item::Bundle {
                    first_seq,
                    count,
                    body,
                    ..
                }) = self.peers[pi].queue.pop()
                else {
                    unreachable!("next_is_bundle")
                };
                let hdr = FragRepr {
                    kind: FragKind::Coalesced,
                    tag: 0,
                    credits: 0,
                    seq: first_seq,
                    aux: count,
                    a: 0,
                    b: 0,
                };
                match self.post_buf(pi, qi, hdr, &[&body], false) {
                    Ok(()) => moved += 1,
                    Err(_) => {
                        // Only a failed peer gets here (the pool is unbounded).
                        return moved;
                    }
                }
            } else {
                let (tag, seq, hint, hdr_len) = (front.tag, front.seq, front.hint, front.hdr_len);
                let data = std::mem::take(&mut self.peers[pi].queue_front_mut().data);
                let (h, pay) = data.split_at(hdr_len);
                match self.try_send_now(pi, tag, seq, h, pay, hint) {
                    Ok(true) => {
                        self.peers[pi].queue_front_mut().data = data;
                        self.peers[pi].queue.pop();
                        moved += 1;
                    }
                    Ok(false) => {
                        self.peers[pi].queue_front_mut().data = data;
                        break;
                    }
                    Err(_) => return moved,
                }
            }
        }
        moved
    }

    // ------------------------------------------------------------------ progress parts

    fn progress_cm(&mut self) -> usize {
        let mut wcs = std::mem::take(&mut self.wcs);
        let n = match self.cm_cq.poll(&mut wcs) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "btl-rc: CM CQ");
                0
            }
        };
        let now = Instant::now();
        for wc in &wcs[..n] {
            if wc.wr_id & WR_CM_SEND != 0 {
                self.cm_send.release(wc.wr_id & !WR_CM_SEND);
                continue;
            }
            let id = wc.wr_id;
            let len = (wc.byte_len as usize).min(UD_GRH_LEN + self.ud_mtu);
            if wc.is_ok() && len > UD_GRH_LEN {
                let mut buf = std::mem::take(&mut self.scratch);
                self.cm_recv.read(id, 0, &mut buf[..len]);
                self.handle_cm(&buf[UD_GRH_LEN..len], wc.src_qp, now);
                self.scratch = buf;
            } else if wc.is_ok() {
                self.stats.malformed += 1;
            }
            if wc.status != WcStatus::WrFlushError {
                let sge = self.cm_recv.sge(id, UD_GRH_LEN + self.ud_mtu);
                let _ = self.cm_qp.post_recv(&RecvWr {
                    wr_id: id,
                    sges: &[sge],
                });
            }
        }
        self.wcs = wcs;
        n
    }

    fn handle_cm(&mut self, bytes: &[u8], src_qp: u32, now: Instant) {
        let Ok(p) = CmPacket::new_checked(bytes) else {
            self.stats.malformed += 1;
            return;
        };
        let m = CmRepr::parse(&p);
        let pi = m.src as usize;
        let valid = m.job == self.job_tag
            && m.dst == self.rank
            && self.peers.get(pi).is_some_and(|p| {
                p.reachable && p.ah.as_ref().is_some_and(|a| a.remote_qpn() == src_qp)
            });
        if !valid {
            self.stats.cm_dropped += 1;
            return;
        }
        if self.peers[pi].failed.is_some() {
            return;
        }
        match m.cm_type {
            CmType::Req => self.peers[pi].conn.handle_req(now, m.addrs, m.credits),
            CmType::Rep => self.peers[pi].conn.handle_rep(m.addrs, m.credits),
        }
        self.run_actions(pi, now);
    }

    fn progress_sends(&mut self, events: &mut dyn BtlEvents) -> usize {
        let mut wcs = std::mem::take(&mut self.wcs);
        let n = match self.send_cq.poll(&mut wcs) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "btl-rc: send CQ");
                0
            }
        };
        for wc in &wcs[..n] {
            let loc = self.qpn_map.get(&wc.qp_num).copied();
            if wc.wr_id & WR_RDMA != 0 {
                let Some(op) = self.ops.remove(&(wc.wr_id & !WR_RDMA)) else {
                    continue;
                };
                if let Some(slot) = self.peers[op.peer].qps.get_mut(op.qp) {
                    slot.wqes += 1;
                }
                if let Some(h) = op.reg {
                    self.release_reg(h);
                }
                let result = if wc.is_ok() {
                    Ok(())
                } else {
                    let reason = format!("RDMA {:?}", wc.status);
                    if wc.status != WcStatus::WrFlushError {
                        self.fail_peer(op.peer, &reason);
                    }
                    Err(SendError::PeerFailed {
                        peer: op.peer as Rank,
                        reason,
                    })
                };
                events.rdma_complete(op.token, result);
                continue;
            }
            let control = wc.wr_id & WR_CTRL != 0;
            self.send_pool.release(wc.wr_id & !WR_CTRL);
            if let Some((pi, qi)) = loc {
                if let Some(slot) = self.peers[pi].qps.get_mut(qi) {
                    if control {
                        slot.ctrl_wqes += 1;
                    } else {
                        slot.wqes += 1;
                    }
                }
                if !wc.is_ok() && wc.status != WcStatus::WrFlushError {
                    self.fail_peer(pi, &format!("send completed with {:?}", wc.status));
                }
            }
        }
        self.wcs = wcs;
        n
    }

    fn progress_recvs(&mut self, events: &mut dyn BtlEvents) -> usize {
        let mut wcs = std::mem::take(&mut self.wcs);
        let n = match self.recv_cq.poll(&mut wcs) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "btl-rc: receive CQ");
                0
            }
        };
        let mut delivered = 0;
        for wc in &wcs[..n] {
            let id = wc.wr_id;
            let Some((pi, qi)) = self.qpn_map.get(&wc.qp_num).copied() else {
                // Not ours (never happens): the buffer cannot be attributed to a pool.
                continue;
            };
            let class = self.class_of_qp(qi);
            if !wc.is_ok() {
                self.recv_pools[class].release(id);
                if !self.qp_per_peer(qi) {
                    self.srq_total = self.srq_total.saturating_sub(1);
                }
                if wc.status != WcStatus::WrFlushError {
                    self.fail_peer(pi, &format!("receive completed with {:?}", wc.status));
                }
                continue;
            }
            let len = (wc.byte_len as usize).min(self.recv_pools[class].size);
            let mut buf = std::mem::take(&mut self.scratch);
            self.recv_pools[class].read(id, 0, &mut buf[..len]);
            self.repost(pi, qi, id);
            delivered += self.handle_frag(pi, qi, &buf[..len], events);
            self.scratch = buf;
        }
        self.wcs = wcs;
        delivered
    }

    fn repost(&mut self, pi: usize, qi: usize, id: u64) {
        let class = self.class_of_qp(qi);
        let pool = &self.recv_pools[class];
        let sge = pool.sge(id, pool.size);
        let wr = RecvWr {
            wr_id: id,
            sges: &[sge],
        };
        let r = match (&self.srq, self.qp_per_peer(qi)) {
            (Some(s), false) => s.post_recv(&wr),
            _ => self.peers[pi].qps[qi].qp.post_recv(&wr),
        };
        if let Err(e) = r {
            tracing::warn!(error = %e, "btl-rc: repost failed");
            self.recv_pools[class].release(id);
        }
    }

    fn handle_frag(
        &mut self,
        pi: usize,
        qi: usize,
        bytes: &[u8],
        events: &mut dyn BtlEvents,
    ) -> usize {
        self.handle_frag_from(pi, qi, bytes, events, false)
    }

    fn handle_frag_from(
        &mut self,
        pi: usize,
        qi: usize,
        bytes: &[u8],
        events: &mut dyn BtlEvents,
        ring: bool,
    ) -> usize {
        let now = Instant::now();
        self.peers[pi].conn.handle_inband();
        self.run_actions(pi, now);
        let Ok(p) = FragPacket::new_checked(bytes) else {
            self.stats.malformed += 1;
            return 0;
        };
        let h = FragRepr::parse(&p);
        let per_peer = self.qp_per_peer(qi);
        let peer = &mut self.peers[pi];
        if let Some(c) = peer.qps[qi].credits.as_mut() {
            c.returned(h.credits);
            if per_peer && !ring && !h.kind.is_control() {
                c.consumed();
            }
        }
        let rank = peer.rank;
        let mut n = 0usize;
        let mut deliver = |tag: u8, data: &[u8]| {
            n += 1;
            events.recv(rank, tag, data);
        };
        match h.kind {
            FragKind::Data => peer.rx.push(h.seq, h.tag, p.body(), &mut deliver),
            FragKind::Coalesced => match parse_records(p.body(), h.aux) {
                Ok(recs) => {
                    let mut tmp = Vec::new();
                    for (i, r) in recs.iter().enumerate() {
                        tmp.clear();
                        tmp.extend_from_slice(&r.header);
                        tmp.extend_from_slice(r.payload);
                        peer.rx
                            .push(h.seq.wrapping_add(i as u16), r.tag, &tmp, &mut deliver);
                    }
                }
                Err(_) => self.stats.malformed += 1,
            },
            FragKind::Stripe => {
                let (idx, count) = p.stripe();
                if h.a as usize > self.cfg.max_send_size {
                    self.stats.malformed += 1;
                } else {
                    peer.rx.push_stripe(
                        h.seq,
                        h.tag,
                        idx,
                        count,
                        h.a as usize,
                        h.b as usize,
                        p.body(),
                        &mut deliver,
                    );
                }
            }
            FragKind::Credit | FragKind::Rtu => {}
            FragKind::EagerOpen => match <[u8; 8]>::try_from(p.body()) {
                Ok(addr) if h.b as usize > FRAG_HEADER_LEN + EAGER_FOOTER_LEN && h.seq >= 2 => {
                    peer.ring_tx = Some(RingTx {
                        addr: u64::from_le_bytes(addr),
                        rkey: h.a,
                        slots: u32::from(h.seq),
                        slot_size: h.b as usize,
                        head: 0,
                        credits: u32::from(h.seq),
                    });
                }
                _ => self.stats.malformed += 1,
            },
            FragKind::EagerCredit => {
                if let Some(r) = peer.ring_tx.as_mut() {
                    r.credits = (r.credits + u32::from(h.aux)).min(r.slots);
                }
            }
        }
        self.stats.received += n as u64;
        if n > 0 {
            self.maybe_open_ring(pi, n as u64);
        }
        n
    }

    // ------------------------------------------------------------------ eager RDMA

    /// Adaptive eager RDMA (seed 000): after `btl_rc_eager_rdma_threshold` messages from a
    /// peer, give it a ring of RDMA-writable slots that this process polls.
    fn maybe_open_ring(&mut self, pi: usize, n: u64) {
        let cfg = &self.cfg;
        let p = &mut self.peers[pi];
        p.rx_count += n;
        if p.ring_rx.is_some()
            || p.rx_count < u64::from(cfg.eager_rdma_threshold)
            || self.stats.eager_rings >= u64::from(cfg.eager_rdma_max_peers)
        {
            return;
        }
        let slot_size = cfg.eager_limit + FRAG_HEADER_LEN + EAGER_FOOTER_LEN;
        let slots = cfg.eager_rdma_num.min(u32::from(u16::MAX));
        let bytes = slot_size * slots as usize;
        match self
            .pd
            .register(bytes, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        {
            Ok(mr) => {
                self.memory.alloc(bytes);
                self.stats.eager_rings += 1;
                p.ring_rx = Some(RingRx {
                    mr,
                    slots,
                    slot_size,
                    tail: 0,
                    owed: 0,
                    open_due: true,
                });
            }
            Err(e) => tracing::warn!(error = %e, "btl-rc: eager RDMA ring registration failed"),
        }
    }

    /// Tell the peer about its ring, and return consumed slots.
    fn ring_control(&mut self, pi: usize) -> usize {
        let Some(r) = self.peers[pi].ring_rx.as_ref() else {
            return 0;
        };
        if self.peers[pi].qps.is_empty() || self.peers[pi].qps[0].ctrl_wqes == 0 {
            return 0;
        }
        if r.open_due {
            let hdr = FragRepr {
                kind: FragKind::EagerOpen,
                tag: 0,
                credits: 0,
                seq: r.slots as u16,
                aux: 0,
                a: r.mr.rkey(),
                b: r.slot_size as u32,
            };
            let addr = r.mr.addr().to_le_bytes();
            if self.post_buf(pi, 0, hdr, &[&addr], true).is_ok() {
                if let Some(r) = self.peers[pi].ring_rx.as_mut() {
                    r.open_due = false;
                }
                return 1;
            }
            return 0;
        }
        if r.owed >= (r.slots / 2).max(1) {
            let owed = r.owed;
            let mut hdr = FragRepr::control(FragKind::EagerCredit, 0);
            hdr.aux = owed as u16;
            if self.post_buf(pi, 0, hdr, &[], true).is_ok() {
                if let Some(r) = self.peers[pi].ring_rx.as_mut() {
                    r.owed -= owed;
                }
                return 1;
            }
        }
        0
    }

    /// Send through the peer's eager RDMA ring when it has a free slot and the fragment fits.
    fn try_eager(
        &mut self,
        pi: usize,
        qi: usize,
        tag: BtlTag,
        seq: u16,
        header: &[u8],
        payload: &[u8],
    ) -> Result<bool, SendError> {
        let len = FRAG_HEADER_LEN + header.len() + payload.len();
        let total = len + EAGER_FOOTER_LEN;
        let (remote_addr, rkey) = match self.peers[pi].ring_tx.as_ref() {
            Some(r) if r.credits > 0 && total <= r.slot_size => (
                r.addr + u64::from(r.head) * r.slot_size as u64 + (r.slot_size - total) as u64,
                r.rkey,
            ),
            _ => return Ok(false),
        };
        if self.peers[pi].qps[qi].wqes == 0 {
            return Ok(false);
        }
        let Some(id) = self.send_pool.alloc(&self.pd) else {
            return Ok(false);
        };
        let hdr = FragRepr::data(tag, seq, header.len());
        let mut h = [0u8; FRAG_HEADER_LEN];
        hdr.emit(&mut h);
        self.send_pool.write(id, 0, &h);
        self.send_pool.write(id, FRAG_HEADER_LEN, header);
        self.send_pool
            .write(id, FRAG_HEADER_LEN + header.len(), payload);
        let mut footer = [0u8; EAGER_FOOTER_LEN];
        footer[..4].copy_from_slice(&(len as u32).to_le_bytes());
        footer[4..].copy_from_slice(&EAGER_VALID.to_le_bytes());
        self.send_pool.write(id, len, &footer);
        let sge = self.send_pool.sge(id, total);
        let wr = SendWr {
            wr_id: id,
            op: SendOp::RdmaWrite { remote_addr, rkey },
            sges: &[sge],
            signaled: true,
            inline: false,
            ud: None,
        };
        match self.peers[pi].qps[qi].qp.post_send(&wr) {
            Ok(()) => {
                self.peers[pi].qps[qi].wqes -= 1;
                if let Some(c) = self.stats.qp_frags.get_mut(qi) {
                    *c += 1;
                }
                let r = self.peers[pi].ring_tx.as_mut().expect("checked");
                r.head = (r.head + 1) % r.slots;
                r.credits -= 1;
                self.stats.eager_sent += 1;
                self.count_data_post(pi);
                Ok(true)
            }
            Err(rmca_verbs::Error::QueueFull { .. }) => {
                self.send_pool.release(id);
                Ok(false)
            }
            Err(e) => {
                self.send_pool.release(id);
                let reason = format!("post RDMA write: {e}");
                self.fail_peer(pi, &reason);
                Err(SendError::PeerFailed {
                    peer: pi as Rank,
                    reason,
                })
            }
        }
    }

    /// Poll the ring of `pi` for slots written by the peer, in order.
    fn poll_ring(&mut self, pi: usize, events: &mut dyn BtlEvents) -> usize {
        let mut n = 0;
        loop {
            let Some(r) = self.peers[pi].ring_rx.as_mut() else {
                return n;
            };
            let end = (r.tail as usize + 1) * r.slot_size;
            let mut footer = [0u8; EAGER_FOOTER_LEN];
            r.mr.read_at(end - EAGER_FOOTER_LEN, &mut footer)
                .expect("slot inside the ring");
            if u32::from_le_bytes(footer[4..].try_into().expect("4")) != EAGER_VALID {
                return n;
            }
            let len = u32::from_le_bytes(footer[..4].try_into().expect("4")) as usize;
            let mut buf = std::mem::take(&mut self.scratch);
            let ok = len <= r.slot_size - EAGER_FOOTER_LEN;
            if ok {
                r.mr.read_at(end - EAGER_FOOTER_LEN - len, &mut buf[..len])
                    .expect("inside the slot");
            }
            r.mr.write_at(end - EAGER_FOOTER_LEN, &[0; EAGER_FOOTER_LEN])
                .expect("slot inside the ring");
            r.tail = (r.tail + 1) % r.slots;
            r.owed += 1;
            if ok {
                self.stats.eager_received += 1;
                n += self.handle_frag_from(pi, 0, &buf[..len], events, true);
            } else {
                self.stats.malformed += 1;
            }
            self.scratch = buf;
        }
    }

    fn progress_async(&mut self) {
        while let Some(ev) = self.ctx.poll_async_event() {
            match ev {
                AsyncEvent::SrqLimitReached { .. } => self.srq_refill(),
                AsyncEvent::QpFatal { qpn } => {
                    if let Some(&(pi, _)) = self.qpn_map.get(&qpn) {
                        self.fail_peer(pi, "QP entered the error state");
                    }
                }
                other => tracing::debug!(?other, "btl-rc: async event"),
            }
        }
    }

    /// The SRQ fell below its low watermark: grow the pool and post the new buffers, then
    /// re-arm (seed 000's SRQ limit event).
    fn srq_refill(&mut self) {
        let Some((class, RecvQueues::Shared { low, grow, max, .. })) = self.cfg.recv.shared()
        else {
            return;
        };
        self.stats.srq_limit_events += 1;
        let Some(srq) = &self.srq else { return };
        let add = grow.min(max.saturating_sub(self.srq_total));
        let mut posted = 0;
        for _ in 0..add {
            let pool = &mut self.recv_pools[class];
            let Some(id) = pool.alloc(&self.pd) else {
                break;
            };
            let sge = pool.sge(id, pool.size);
            if srq
                .post_recv(&RecvWr {
                    wr_id: id,
                    sges: &[sge],
                })
                .is_err()
            {
                self.recv_pools[class].release(id);
                break;
            }
            posted += 1;
        }
        self.srq_total += posted;
        self.stats.srq_posted += u64::from(posted);
        tracing::debug!(posted, total = self.srq_total, "btl-rc: SRQ low watermark");
        if let Err(e) = srq.arm_limit(low) {
            tracing::warn!(error = %e, "btl-rc: re-arming the SRQ limit");
        }
    }

    // ------------------------------------------------------------------ registrations

    fn acquire_reg(&mut self, buf: UserBuf) -> Result<(u64, u32), BtlError> {
        if let Some(r) = self.rcache.lookup(buf.addr(), buf.len()) {
            if let Some(e) = self.regs.get_mut(&r.handle) {
                e.refs += 1;
                return Ok((r.handle, e.mr.lkey()));
            }
        }
        let mr = crate::reg::register_user(&self.pd, buf)
            .map_err(|e| BtlError::Other(format!("btl-rc: register {} bytes: {e}", buf.len())))?;
        let handle = self.next_reg;
        self.next_reg += 1;
        let rkey = mr.rkey();
        let lkey = mr.lkey();
        let evicted = self.rcache.insert(CachedRegistration {
            addr: buf.addr(),
            len: buf.len(),
            registration: Registration {
                handle,
                remote_key: rkey.to_le_bytes().to_vec(),
            },
        });
        for e in evicted {
            if let Some(r) = self.regs.get_mut(&e.registration.handle) {
                r.cached = false;
                if r.refs == 0 {
                    self.regs.remove(&e.registration.handle);
                }
            }
        }
        self.regs.insert(
            handle,
            UserReg {
                mr,
                refs: 1,
                addr: buf.addr(),
                len: buf.len(),
                cached: true,
            },
        );
        Ok((handle, lkey))
    }

    /// Drop a reference; the last one invalidates the cached range and deregisters, so memory
    /// freed and reallocated at the same address is never served by a stale registration.
    fn release_reg(&mut self, handle: u64) {
        let Some(e) = self.regs.get_mut(&handle) else {
            return;
        };
        e.refs = e.refs.saturating_sub(1);
        if e.refs == 0 {
            let (addr, len, cached) = (e.addr, e.len, e.cached);
            if cached {
                for other in self.rcache.invalidate(addr, len) {
                    let h = other.registration.handle;
                    if let Some(o) = self.regs.get_mut(&h) {
                        o.cached = false;
                        if o.refs == 0 {
                            self.regs.remove(&h);
                        }
                    }
                }
            }
            self.regs.remove(&handle);
        }
    }

    fn rdma(
        &mut self,
        peer: Rank,
        local: UserBuf,
        remote: &RemoteSegment,
        token: CompletionToken,
        read: bool,
    ) -> Result<(), SendError> {
        let pi = self.peer_idx(peer)?;
        if let Some(r) = &self.peers[pi].failed {
            return Err(SendError::PeerFailed {
                peer,
                reason: r.clone(),
            });
        }
        if local.len() != remote.len || remote.remote_key.len() != 4 {
            return Err(SendError::Unsupported(
                "put/get: local and remote lengths differ or the remote key is not btl-rc's",
            ));
        }
        if local.len() > self.attrs.rdma_pipeline_frag_size {
            return Err(SendError::TooLarge {
                len: local.len(),
                max: self.attrs.rdma_pipeline_frag_size,
            });
        }
        if !self.peers[pi].conn.is_connected() {
            self.peers[pi].conn.open(Instant::now());
            self.run_actions(pi, Instant::now());
            return Err(SendError::WouldBlock);
        }
        let qi = match self.peers[pi].sched.plan(0, SendHint::default()) {
            Plan::One(q) => q,
            Plan::Stripe(_) => 0,
        };
        if self.peers[pi].qps[qi].wqes == 0 {
            self.stats.wqe_stalls += 1;
            return Err(SendError::WouldBlock);
        }
        let (handle, sge) = if local.is_empty() {
            (None, None)
        } else {
            let (h, lkey) = self.acquire_reg(local).map_err(|e| SendError::PeerFailed {
                peer,
                reason: e.to_string(),
            })?;
            (
                Some(h),
                Some(rmca_verbs::Sge {
                    addr: local.addr() as u64,
                    length: local.len() as u32,
                    lkey,
                }),
            )
        };
        let rkey = u32::from_le_bytes(remote.remote_key[..4].try_into().expect("4 bytes"));
        let op = if read {
            SendOp::RdmaRead {
                remote_addr: remote.addr,
                rkey,
            }
        } else {
            SendOp::RdmaWrite {
                remote_addr: remote.addr,
                rkey,
            }
        };
        let id = self.next_op;
        self.next_op = (self.next_op + 1) & !(WR_RDMA | WR_CTRL | WR_CM_SEND);
        let sges: Vec<rmca_verbs::Sge> = sge.into_iter().collect();
        let wr = SendWr {
            wr_id: WR_RDMA | id,
            op,
            sges: &sges,
            signaled: true,
            inline: false,
            ud: None,
        };
        match self.peers[pi].qps[qi].qp.post_send(&wr) {
            Ok(()) => {
                self.peers[pi].qps[qi].wqes -= 1;
                self.stats.rdma_ops += 1;
                self.ops.insert(
                    id,
                    RdmaOp {
                        token,
                        reg: handle,
                        peer: pi,
                        qp: qi,
                    },
                );
                Ok(())
            }
            Err(e) => {
                if let Some(h) = handle {
                    self.release_reg(h);
                }
                match e {
                    rmca_verbs::Error::QueueFull { .. } => Err(SendError::WouldBlock),
                    e => Err(SendError::PeerFailed {
                        peer,
                        reason: format!("post RDMA: {e}"),
                    }),
                }
            }
        }
    }
}

impl Drop for RcBtl {
    fn drop(&mut self) {
        for p in &self.peers {
            if let Some(r) = &p.ring_rx {
                self.memory.free(r.slots as usize * r.slot_size);
            }
        }
    }
}

impl Peer {
    fn queue_front_mut(&mut self) -> &mut Pending {
        self.queue.front_mut().expect("non-empty")
    }
}

impl Btl for RcBtl {
    fn component_name(&self) -> &str {
        "rc"
    }

    fn attributes(&self) -> &BtlAttributes {
        &self.attrs
    }

    fn add_procs(
        &mut self,
        procs: &[ProcInfo],
        modex: &dyn ModexRead,
    ) -> Result<Vec<bool>, BtlError> {
        let mut reach = Vec::with_capacity(procs.len());
        let now = Instant::now();
        for p in procs {
            let idx = p.rank as usize;
            while self.peers.len() <= idx {
                let r = self.peers.len() as Rank;
                self.peers.push(Peer {
                    rank: r,
                    reachable: false,
                    ah: None,
                    conn: Connection::new(
                        self.rank,
                        r,
                        self.cfg.connect_timeout,
                        self.cfg.connect_retries,
                    ),
                    qps: Vec::new(),
                    local_addrs: Vec::new(),
                    sched: QpScheduler::new(
                        self.cfg.policy,
                        self.cfg.qps_per_peer as usize,
                        (self.rank as usize) ^ (r as usize),
                        self.cfg.stripe_threshold,
                    ),
                    queue: SendQueue::new(self.cfg.coalescing, self.cfg.max_send_size),
                    tx_seq: 0,
                    rx: Reorder::default(),
                    rtu_due: false,
                    failed: None,
                    failure_reported: false,
                    rx_count: 0,
                    ring_rx: None,
                    ring_tx: None,
                });
            }
            if p.is_self {
                reach.push(false);
                continue;
            }
            let card = match modex.get(p.rank, crate::MODEX_KEY) {
                Ok(Some(c)) => c,
                Ok(None) => {
                    reach.push(false);
                    continue;
                }
                Err(e) => return Err(BtlError::Other(format!("btl-rc: modex: {e}"))),
            };
            let card = CardRepr::parse(&card).map_err(|e| BtlError::BadCard {
                rank: p.rank,
                reason: e.to_string(),
            })?;
            if card.provider != self.card.provider {
                tracing::info!(peer = p.rank, "btl-rc: peer uses another verbs provider");
                reach.push(false);
                continue;
            }
            let ah = self
                .pd
                .create_ah(&card.cm_addr)
                .map_err(|e| BtlError::BadCard {
                    rank: p.rank,
                    reason: format!("CM address: {e}"),
                })?;
            let peer = &mut self.peers[idx];
            peer.ah = Some(ah);
            peer.reachable = true;
            reach.push(true);
            if self.cfg.connect == ConnectMode::Static {
                peer.conn.open(now);
                self.run_actions(idx, now);
            }
        }
        Ok(reach)
    }

    fn del_procs(&mut self, ranks: &[Rank]) {
        for &r in ranks {
            if let Some(p) = self.peers.get_mut(r as usize) {
                p.reachable = false;
                p.queue.clear();
            }
        }
    }

    fn send(
        &mut self,
        peer: Rank,
        tag: BtlTag,
        header: &[u8],
        payload: &[u8],
        hint: SendHint,
    ) -> Result<(), SendError> {
        let pi = self.peer_idx(peer)?;
        let len = header.len() + payload.len();
        if len > self.attrs.max_send_size {
            return Err(SendError::TooLarge {
                len,
                max: self.attrs.max_send_size,
            });
        }
        if let Some(r) = &self.peers[pi].failed {
            return Err(SendError::PeerFailed {
                peer,
                reason: r.clone(),
            });
        }
        let now = Instant::now();
        if self.peers[pi].conn.state() == State::Idle {
            self.peers[pi].conn.open(now);
            self.run_actions(pi, now);
        }
        let p = &self.peers[pi];
        let direct = p.conn.is_connected() && p.queue.is_empty() && !p.rtu_due;
        let seq = p.tx_seq;
        if direct && self.try_send_now(pi, tag, seq, header, payload, hint)? {
            self.peers[pi].tx_seq = seq.wrapping_add(1);
            self.stats.sent += 1;
            return Ok(());
        }
        let p = &mut self.peers[pi];
        if p.queue.bytes() + len > self.cfg.pending_max {
            return Err(SendError::WouldBlock);
        }
        let mut data = Vec::with_capacity(len);
        data.extend_from_slice(header);
        data.extend_from_slice(payload);
        let eager = self.cfg.eager_limit;
        p.queue.push(Pending {
            tag,
            data,
            hdr_len: header.len(),
            seq,
            hint,
            coalescable: len <= eager && hint.message_len <= eager,
        });
        p.tx_seq = seq.wrapping_add(1);
        self.stats.sent += 1;
        self.stats.queued += 1;
        Ok(())
    }

    fn register_mem(&mut self, buf: UserBuf, _access: MemAccess) -> Result<Registration, BtlError> {
        if buf.is_empty() {
            return Ok(Registration {
                handle: 0,
                remote_key: 0u32.to_le_bytes().to_vec(),
            });
        }
        let (handle, _) = self.acquire_reg(buf)?;
        let rkey = self.regs[&handle].mr.rkey();
        Ok(Registration {
            handle,
            remote_key: rkey.to_le_bytes().to_vec(),
        })
    }

    fn deregister_mem(&mut self, registration: &Registration) {
        if registration.handle != 0 {
            self.release_reg(registration.handle);
        }
    }

    fn put(
        &mut self,
        peer: Rank,
        local: UserBuf,
        remote: &RemoteSegment,
        token: CompletionToken,
    ) -> Result<(), SendError> {
        self.rdma(peer, local, remote, token, false)
    }

    fn get(
        &mut self,
        peer: Rank,
        local: UserBuf,
        remote: &RemoteSegment,
        token: CompletionToken,
    ) -> Result<(), SendError> {
        if !local.is_writable() {
            return Err(SendError::Unsupported("get into a read-only buffer"));
        }
        self.rdma(peer, local, remote, token, true)
    }

    fn progress(&mut self, events: &mut dyn BtlEvents) -> usize {
        if let Some(pi) = self.kill_due.take() {
            let n = self.cfg.fault_kill_after.unwrap_or_default();
            self.fail_peer(
                pi,
                &format!("fault injection: QPs killed after {n} data fragments"),
            );
        }
        let mut n = self.progress_cm();
        self.progress_async();
        let now = Instant::now();
        for pi in 0..self.peers.len() {
            if self.peers[pi].conn.poll_timeout().is_some_and(|t| t <= now) {
                self.peers[pi].conn.handle_timeout(now);
                self.run_actions(pi, now);
            }
        }
        n += self.progress_recvs(events);
        n += self.progress_sends(events);
        for pi in 0..self.peers.len() {
            n += self.poll_ring(pi, events);
            if !self.peers[pi].queue.is_empty() || self.peers[pi].control_due() {
                n += self.drain_peer(pi);
            }
            let p = &mut self.peers[pi];
            if let (Some(reason), false) = (&p.failed, p.failure_reported) {
                p.failure_reported = true;
                events.peer_failed(p.rank, reason);
                n += 1;
            }
        }
        n
    }

    fn memory_usage(&self) -> MemoryUsage {
        MemoryUsage {
            current: self.memory.current(),
            peak: self.memory.peak(),
        }
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let s = &self.stats;
        let (hits, misses) = self.rcache.stats();
        let sum = |f: &dyn Fn(&Peer) -> u64| self.peers.iter().map(f).sum::<u64>();
        let v: Vec<(&str, u64)> = vec![
            ("fragments_sent", s.sent),
            ("fragments_received", s.received),
            ("fragments_queued", s.queued),
            ("connections", s.connections),
            ("qps_created", s.qps_created),
            ("qps_now", self.qp_count() as u64),
            ("connect_requests", sum(&|p| p.conn.reqs_sent)),
            ("connect_collisions", sum(&|p| p.conn.collisions)),
            ("cm_dropped", s.cm_dropped),
            ("malformed_dropped", s.malformed),
            ("send_wqe_stalls", s.wqe_stalls),
            ("credit_stalls", s.credit_stalls),
            ("credit_messages", s.credit_msgs),
            ("coalesced_buffers", sum(&|p| p.queue.bundles)),
            ("coalesced_messages", sum(&|p| p.queue.coalesced_msgs)),
            ("cached_headers", sum(&|p| p.queue.cached_headers)),
            ("stripes_sent", s.stripes_sent),
            ("reordered_held", sum(&|p| p.rx.held_total)),
            (
                "recv_buffers_allocated",
                self.recv_pools.iter().map(|p| p.total as u64).sum(),
            ),
            ("send_buffers_allocated", self.send_pool.total as u64),
            ("srq_buffers_posted", s.srq_posted),
            ("srq_low_watermark_events", s.srq_limit_events),
            ("rdma_ops", s.rdma_ops),
            ("eager_rdma_connections", s.eager_rings),
            ("eager_rdma_sent", s.eager_sent),
            ("eager_rdma_received", s.eager_received),
            ("rcache_hits", hits),
            ("rcache_misses", misses),
            ("registrations_now", self.regs.len() as u64),
            ("peer_failures", s.peer_failures),
        ];
        let mut v: Vec<(String, u64)> = v.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        v.extend(
            s.qp_frags
                .iter()
                .enumerate()
                .map(|(i, &n)| (format!("qp{i}_fragments_sent"), n)),
        );
        v
    }

    fn finalize(&mut self) {
        for p in &mut self.peers {
            p.queue.clear();
        }
    }
}
