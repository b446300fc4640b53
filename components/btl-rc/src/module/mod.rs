//! The btl-rc module: the I/O edge around the sans-IO machines ([`crate::conn`],
//! [`crate::credits`], [`crate::sendq`], [`crate::sched`], [`crate::reorder`]).
//!
//! [`RcBtl`] and its per-peer state live here; its methods are spread over the submodules by
//! concern: [`pool`] (registered buffer slabs), [`connect`] (connection management over the
//! UD CM QP), [`send`] and [`recv`] (the data paths), [`eager`] (adaptive eager RDMA rings),
//! [`rdma`] (put/get and user-buffer registrations) and [`btl`] (the [`Btl`] impl).
//!
//! [`Btl`]: rmca_framework::btl::Btl

mod btl;
mod connect;
mod eager;
mod pool;
mod rdma;
mod recv;
mod send;

use std::collections::HashMap;
use std::sync::Arc;

use rmca_framework::btl::{exclusivity, BtlAttributes, BtlFlags, SendError};
use rmca_framework::job::JobInfo;
use rmca_framework::memory::{MemoryAccounting, MemoryCounter};
use rmca_framework::rank::Rank;
use rmca_framework::rcache::Rcache;
use rmca_verbs::{
    Ah, Context, Cq, Pd, ProviderKind, Qp, QpCaps, QpInit, QpType, RcParams, RecvWr, SoftConfig,
    Srq, SrqInit, Wc, UD_GRH_LEN,
};

use crate::config::{RcConfig, RecvQueues};
use crate::conn::{Connection, State};
use crate::credits::Credits;
use crate::reorder::{Reorder, SeqWindow};
use crate::sched::QpScheduler;
use crate::sendq::{Pending, SendQueue};
use crate::wire::{CardRepr, FRAG_HEADER_LEN};

use self::eager::{RingRx, RingTx};
use self::pool::BufPool;
use self::rdma::{RcacheHandle, RdmaOp, UserReg};

/// Errors of opening the module (shared with btl-ud: [`rmca_common_verbs::OpenError`]).
pub type RcError = rmca_common_verbs::OpenError;

const Q_KEY: u32 = 0x5243_4d31;
const CTRL_WQES: u32 = 4;
const CM_RECV: usize = 64;
const CM_SEND: usize = 16;
const WR_RDMA: u64 = 1 << 63;
const WR_CTRL: u64 = 1 << 62;
const WR_CM_SEND: u64 = 1 << 61;
const NO_FLOW_CONTROL: u16 = u16::MAX;

#[derive(Debug)]
struct QpSlot {
    qp: Qp,
    wqes: u32,
    ctrl_wqes: u32,
    credits: Option<Credits>,
    credit_msg_due: bool,
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
    tx_win: SeqWindow,
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
            || self.rx.ack_due()
            || self.qps.iter().any(|q| {
                q.credit_msg_due || q.credits.as_ref().is_some_and(|c| c.needs_credit_msg())
            })
            || self
                .ring_rx
                .as_ref()
                .is_some_and(|r| r.open_due || r.owed >= (r.slots / 2).max(1))
    }
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
    seq_acks: u64,
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
    /// Work requests of the SRQ, when `ensure_srq` creates it.
    srq_depth: u32,
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

/// The RC QPs' transport parameters (`btl_rc_ib_timeout`, `btl_rc_ib_retry_count`).
fn rc_params(cfg: &RcConfig) -> RcParams {
    RcParams {
        retry_cnt: cfg.ib_retry_count,
        timeout: cfg.ib_timeout,
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
        let verbs = |op| rmca_common_verbs::verbs("btl-rc", op);
        let unsupported = |reason| RcError::Unsupported {
            btl: "btl-rc",
            reason,
        };
        let kind = cfg.device.provider.resolve();
        rmca_common_verbs::check_faults_supported(kind, &cfg.fault, "btl_rc")
            .map_err(unsupported)?;
        let soft = SoftConfig {
            rc_fault: cfg.fault,
            ..SoftConfig::default()
        };
        let pcfg = cfg
            .device
            .provider_config(kind, soft, job)
            .map_err(verbs("choose the address to bind"))?;
        let ctx = Context::open(&pcfg).map_err(verbs("open device"))?;
        let attr = ctx.attr();
        if u64::from(cfg.max_send_size as u32) > attr.max_msg_size {
            return Err(unsupported(format!(
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
            .connect(None, &rc_params(cfg))
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
        // The SRQ and its buffers (2 MiB with the default queues) are created by `ensure_srq`
        // once the module carries traffic: slabs of the shared class grow by `initial`.
        if let Some((class, RecvQueues::Shared { initial, .. })) = cfg.recv.shared() {
            let size = recv_pools[class].size;
            recv_pools[class] = BufPool::new(size, initial as usize, usize::MAX, memory.clone());
        }
        let srq_depth = attr.max_srq_wr.min(1 << 15);
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
            qp_frags: vec![0; cfg.qps_per_peer as usize * cfg.recv.queues().len()],
            ..Stats::default()
        };
        Ok(Self {
            peers: Vec::new(),
            cm_qp,
            srq: None,
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
            srq_total: 0,
            srq_depth,
            wcs: vec![Wc::EMPTY; 64],
            scratch: vec![0; scratch_len],
            stats,
            memory,
        })
    }

    /// Create the shared receive queue (when `btl_rc_receive_queues` has one) and post its
    /// initial buffers, once: before the first RC QP is created (data arrives only on RC QPs)
    /// or when the BML routes a peer over the module. A rank whose peers all go over shm
    /// never creates them (Open MPI's openib likewise posts receive buffers only for
    /// transports that reach a peer).
    fn ensure_srq(&mut self) -> Result<(), String> {
        let Some((class, RecvQueues::Shared { initial, low, .. })) = self.cfg.recv.shared() else {
            return Ok(());
        };
        if self.srq.is_some() {
            return Ok(());
        }
        let s = self
            .pd
            .create_srq(SrqInit {
                max_wr: self.srq_depth,
                max_sge: 1,
                limit: low,
            })
            .map_err(|e| format!("create SRQ: {e}"))?;
        let pool = &mut self.recv_pools[class];
        pool.grow(&self.pd, initial as usize);
        let size = pool.size;
        for _ in 0..initial {
            let id = pool
                .alloc(&self.pd)
                .ok_or("SRQ receive buffers could not be registered")?;
            let sge = pool.sge(id, size);
            s.post_recv(&RecvWr {
                wr_id: id,
                sges: &[sge],
            })
            .map_err(|e| format!("post SRQ receive: {e}"))?;
        }
        self.srq_total = initial;
        self.stats.srq_posted += u64::from(initial);
        self.srq = Some(s);
        Ok(())
    }

    /// Whether the shared receive queue exists (see `ensure_srq`), for tests.
    pub fn srq_created(&self) -> bool {
        self.srq.is_some()
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

#[cfg(test)]
mod tests {
    use rmca_framework::component::{component_params, Framework};

    use super::*;

    #[test]
    fn rc_qps_take_the_configured_transport_timeout_and_retries() {
        let cfg = |set: &[(&str, &str)]| {
            let p = component_params(Framework::Btl, &crate::RC, set).unwrap();
            RcConfig::from_params(&p, 0).unwrap()
        };
        let p = rc_params(&cfg(&[]));
        assert_eq!((p.timeout, p.retry_cnt, p.rnr_retry), (20, 6, 7));
        let p = rc_params(&cfg(&[
            ("btl_rc_ib_timeout", "14"),
            ("btl_rc_ib_retry_count", "2"),
        ]));
        assert_eq!((p.timeout, p.retry_cnt, p.rnr_retry), (14, 2, 7));
    }
}
