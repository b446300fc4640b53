//! The btl-ud module: verbs objects at the edges, the sans-IO pieces ([`crate::sched`],
//! [`crate::recv`], [`crate::header`], [`crate::card`]) in the middle.

use std::sync::Arc;

use rmca_framework::btl::{
    exclusivity, Btl, BtlAttributes, BtlError, BtlEvents, BtlFlags, BtlTag, MemoryUsage, ModexRead,
    SendError, SendHint,
};
use rmca_framework::job::JobInfo;
use rmca_framework::memory::{MemoryAccounting, MemoryCounter};
use rmca_framework::mpool::PoolBuf;
use rmca_framework::rank::{ProcInfo, Rank};
use rmca_verbs::{
    AccessFlags, Ah, Context, Cq, Pd, ProviderKind, Qp, QpCaps, QpInit, QpType, RcParams, RecvWr,
    SendOp, SendWr, SoftConfig, UdDest, Wc, WcStatus, UD_GRH_LEN,
};

use crate::card::{provider_code, CardRepr};
use crate::config::UdConfig;
use crate::fault::Blackhole;
use crate::header::{job_tag16, FragRepr, HEADER_LEN};
use crate::recv::{classify, DropReason, PeerSources, RecvMeta};
use crate::reg::RegisteredPool;
use crate::sched::{Admit, SendScheduler};
use crate::MODEX_KEY;

/// Errors of opening a btl-ud module (shared with btl-rc: [`rmca_common_verbs::OpenError`]).
pub type UdError = rmca_common_verbs::OpenError;

/// Route to one peer's receive QP.
#[derive(Debug)]
struct Peer {
    ah: Ah,
    qpn: u32,
    qkey: u32,
}

/// A fragment waiting for a send credit: the whole datagram (btl-ud header included).
#[derive(Debug)]
struct Pending {
    peer: Rank,
    bytes: Vec<u8>,
}

/// Counters reported by [`Btl::counters`].
#[derive(Debug, Default, Clone)]
struct Stats {
    frags_sent: u64,
    bytes_sent: u64,
    inline_sends: u64,
    frags_received: u64,
    bytes_received: u64,
    drops_truncated: u64,
    drops_foreign: u64,
    drops_wrong_job: u64,
    drops_unknown_source: u64,
    drops_completion_error: u64,
    send_errors: u64,
    sends_refused: u64,
    recv_posts: u64,
    recv_post_errors: u64,
    cq_errors: u64,
}

/// Smallest UD MTU a peer's card may announce (the smallest InfiniBand MTU).
const MIN_PEER_MTU: usize = rmca_verbs::soft::link::MIN_UD_MTU as usize;

/// The MTU a module uses: the device's, or the user's `btl_ud_mtu` when smaller. A larger
/// `btl_ud_mtu` is lowered to the device's with a warning: a UD datagram is one packet, never
/// larger than the path (on the soft provider: the interface of `btl_ud_if_addr`), and the same
/// setting must work on nodes whose links differ.
fn effective_mtu(wanted: Option<u32>, device: u32, ctx: &Context) -> u32 {
    match wanted {
        Some(m) if m > device => {
            match ctx.soft_link() {
                Some(l) => tracing::warn!(
                    btl_ud_mtu = m,
                    interface = %l.interface,
                    if_mtu = l.if_mtu,
                    using = device,
                    "btl-ud: btl_ud_mtu {m} is larger than what one packet carries on interface {} (MTU {}, the interface of btl_ud_if_addr) after the IP, UDP and soft UD headers: using {device} bytes, so that datagrams are never IP-fragmented",
                    l.interface,
                    l.if_mtu
                ),
                None => tracing::warn!(
                    btl_ud_mtu = m,
                    using = device,
                    "btl-ud: btl_ud_mtu {m} is larger than the device's active MTU: using {device} bytes"
                ),
            }
            device
        }
        Some(m) => m,
        None => device,
    }
}

// Send wr_id layout: send QP index in bits 48.., the inline flag in bit 47, the pool buffer id
// (slab 0, so below 2^32) in the low bits.
const WR_INLINE: u64 = 1 << 47;
const WR_QP_SHIFT: u32 = 48;

/// One btl-ud module: one verbs device port.
#[derive(Debug)]
pub struct UdBtl {
    // Drop order matters for the rdma provider: QPs, then AHs, then MRs, then CQs, PD, context.
    recv_qp: Qp,
    send_qps: Vec<Qp>,
    peers: Vec<Option<Peer>>,
    recv_pool: RegisteredPool,
    send_pool: RegisteredPool,
    send_cq: Cq,
    recv_cq: Cq,
    pd: Pd,
    ctx: Context,
    sources: PeerSources,
    sched: SendScheduler<Pending>,
    attrs: BtlAttributes,
    card: CardRepr,
    rank: Rank,
    job_tag: u16,
    mtu: usize,
    inline_max: usize,
    wcs: Vec<Wc>,
    ticks: u32,
    credits: u64,
    repost_batch: usize,
    /// `btl_ud_recv_repost_batch` (the effective batch is capped at a quarter of the pool
    /// posted now).
    repost_batch_cfg: usize,
    /// Receive and send buffers of the whole pools, allocated by [`UdBtl::grow`].
    recv_full: usize,
    send_full: usize,
    /// The pools have their full size (see [`UdBtl::open`]).
    grown: bool,
    /// Why the module can no longer carry traffic (a QP or CQ failed), and whether the PML
    /// was told through `peer_failed`.
    fatal: Option<String>,
    fatal_reported: bool,
    /// `btl_ud_fault_blackhole_after`: kills the path after N sends (tests).
    blackhole: Blackhole,
    stats: Stats,
    memory: Arc<MemoryCounter>,
}

impl UdBtl {
    /// Open the device, create the QPs, allocate, register and post the first
    /// `btl_ud_recv_buffers_initial` receive buffers. The business card to publish is
    /// [`UdBtl::card`].
    ///
    /// The rest of the receive pool and the send pool (together 52 MB at the soft provider's
    /// 65000-byte MTU) are allocated by `grow` once the module carries traffic: the
    /// BML routes a peer over it ([`Btl::peers_routed`]), or a datagram is sent or delivered.
    /// A rank whose peers all go over shm thus never maps them (Open MPI allocates a
    /// transport's receive resources only for transports that reach a peer). The buffers
    /// posted at open take datagrams of a peer whose BML routed ud before ours did; beyond
    /// them such a datagram is dropped (pml dr resends it), only in that window at startup.
    pub fn open(cfg: &UdConfig, job: &JobInfo, memory: &MemoryAccounting) -> Result<Self, UdError> {
        let verbs = |op| rmca_common_verbs::verbs("btl-ud", op);
        let unsupported = |reason| UdError::Unsupported {
            btl: "btl-ud",
            reason,
        };
        let kind = cfg.device.provider.resolve();
        rmca_common_verbs::check_faults_supported(kind, &cfg.fault, "btl_ud")
            .map_err(unsupported)?;
        let mut soft = SoftConfig {
            ud_fault: cfg.fault,
            ..SoftConfig::default()
        };
        // The soft "device" MTU is ours to choose, up to what its interface carries in one
        // packet (the largest by default: on loopback one datagram carries 32 times more than
        // 2 KiB, and each costs a system call); a real device's is only lowered.
        soft.ud_mtu = cfg.mtu.unwrap_or(crate::config::defaults::SOFT_MTU);
        let pcfg = cfg
            .device
            .provider_config(kind, soft, job)
            .map_err(verbs("choose the address to bind"))?;
        let ctx = Context::open(&pcfg).map_err(verbs("open device"))?;
        let attr = ctx.attr();
        let mtu = effective_mtu(cfg.mtu, attr.mtu, &ctx) as usize;
        if mtu <= HEADER_LEN {
            return Err(unsupported(format!(
                "device MTU of {mtu} bytes cannot carry a fragment"
            )));
        }
        let depth = cfg.send_queue_depth.min(attr.max_qp_wr);
        let recv_n = cfg.recv_buffers_for(
            job.size,
            attr.max_qp_wr.min(attr.max_cqe.saturating_sub(16)),
            UD_GRH_LEN + mtu,
        );
        let inline_max = (cfg.max_inline.min(attr.max_inline) as usize).min(mtu);

        let pd = ctx.alloc_pd().map_err(verbs("alloc PD"))?;
        let send_cq_depth = (cfg.send_qps as u32 * depth + 16).min(attr.max_cqe);
        let send_cq = ctx
            .create_cq(send_cq_depth)
            .map_err(verbs("create send CQ"))?;
        let recv_cq = ctx
            .create_cq((recv_n as u32 + 16).min(attr.max_cqe))
            .map_err(verbs("create receive CQ"))?;
        let counter = memory.counter("btl.ud");
        let recv_initial = cfg.recv_buffers_initial.clamp(1, recv_n);
        let recv_pool = RegisteredPool::new(
            &pd,
            UD_GRH_LEN + mtu,
            recv_initial,
            recv_n,
            AccessFlags::LOCAL_WRITE,
            counter.clone(),
        )
        .map_err(verbs("register receive pool"))?;
        let send_n = cfg.send_qps * depth as usize;
        let send_pool = RegisteredPool::new(
            &pd,
            mtu,
            0,
            send_n,
            AccessFlags::LOCAL_WRITE,
            counter.clone(),
        )
        .map_err(verbs("register send pool"))?;

        let qkey = cfg.qkey;
        let recv_qp = pd
            .create_qp(QpInit {
                qp_type: QpType::Ud,
                // The receive QP never sends: keep it off the send CQ so that polling one CQ
                // only drives the QPs that can complete on it (the soft provider polls each
                // attached QP's socket).
                send_cq: &recv_cq,
                recv_cq: &recv_cq,
                srq: None,
                caps: QpCaps {
                    max_send_wr: 1,
                    max_recv_wr: recv_n as u32,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qkey,
            })
            .map_err(verbs("create receive QP"))?;
        recv_qp
            .modify_to_init()
            .map_err(verbs("receive QP to INIT"))?;
        let mut send_qps = Vec::with_capacity(cfg.send_qps);
        for _ in 0..cfg.send_qps {
            let qp = pd
                .create_qp(QpInit {
                    qp_type: QpType::Ud,
                    send_cq: &send_cq,
                    // Send QPs never receive: no receive queue (the soft provider then
                    // connects the socket to the first destination, sparing later sends
                    // a route lookup).
                    recv_cq: &send_cq,
                    srq: None,
                    caps: QpCaps {
                        max_send_wr: depth,
                        max_recv_wr: 0,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: inline_max as u32,
                    },
                    qkey,
                })
                .map_err(verbs("create send QP"))?;
            qp.connect(None, &RcParams::default())
                .map_err(verbs("send QP to RTS"))?;
            send_qps.push(qp);
        }
        let card = CardRepr {
            provider: provider_code(kind),
            mtu: mtu as u32,
            qkey,
            addr: recv_qp.address(),
            send_qpns: send_qps.iter().map(Qp::qp_num).collect(),
        };
        let estimate = cfg.device.estimate(kind, rmca_common_verbs::Transport::Ud);
        let max = mtu - HEADER_LEN;
        let attrs = BtlAttributes {
            eager_limit: max,
            rndv_eager_limit: max,
            max_send_size: max,
            exclusivity: exclusivity::HIGH_SPEED_NETWORK,
            latency_ns: estimate.latency_ns,
            bandwidth_mbps: estimate.bandwidth_mbps,
            flags: BtlFlags::SEND | BtlFlags::NEED_ACK | BtlFlags::NEED_CSUM,
            ..BtlAttributes::default()
        };
        let mut btl = Self {
            recv_qp,
            send_qps,
            peers: Vec::new(),
            recv_pool,
            send_pool,
            send_cq,
            recv_cq,
            pd,
            ctx,
            sources: PeerSources::default(),
            sched: SendScheduler::new(cfg.send_qps, depth, cfg.pending_max, cfg.pending_bytes_max),
            attrs,
            card,
            rank: job.rank,
            job_tag: job_tag16(&job.secret),
            mtu,
            inline_max,
            wcs: vec![Wc::EMPTY; cfg.poll_batch],
            ticks: 0,
            credits: send_n as u64,
            repost_batch: cfg.repost_batch.min((recv_initial / 4).max(1)),
            repost_batch_cfg: cfg.repost_batch,
            recv_full: recv_n,
            send_full: send_n,
            grown: false,
            fatal: None,
            fatal_reported: false,
            blackhole: Blackhole::new(cfg.blackhole_after),
            stats: Stats::default(),
            memory: counter,
        };
        // Post the initial buffers before the QP can receive, so early datagrams find some.
        btl.refill();
        btl.recv_qp
            .modify_to_rtr(None, &RcParams::default())
            .map_err(verbs("receive QP to RTR"))?;
        btl.recv_qp
            .modify_to_rts()
            .map_err(verbs("receive QP to RTS"))?;
        tracing::info!(
            provider = kind.name(),
            mtu,
            recv_buffers = recv_initial,
            recv_buffers_full = recv_n,
            send_qps = cfg.send_qps,
            depth,
            inline_max,
            "btl-ud module open"
        );
        Ok(btl)
    }

    /// The business card to publish under [`MODEX_KEY`].
    pub fn card(&self) -> &CardRepr {
        &self.card
    }

    /// The provider in use.
    pub fn provider(&self) -> ProviderKind {
        self.ctx.provider()
    }

    /// The UD MTU of this module's receive buffers (what it publishes; fragments it sends are
    /// at most [`UdBtl::send_mtu`]).
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The largest datagram (header included) this module sends: its MTU, lowered by
    /// `add_procs` to the smallest MTU of the peers it reaches (as a HCA's path MTU is the
    /// smaller of both ends').
    pub fn send_mtu(&self) -> usize {
        self.attrs.max_send_size + HEADER_LEN
    }

    /// Receive buffers posted now.
    pub fn recv_posted(&self) -> usize {
        self.recv_pool.in_use()
    }

    /// Whether the pools have their full size (the module carried, or was routed, traffic).
    pub fn pools_grown(&self) -> bool {
        self.grown
    }

    /// Allocate the rest of the receive pool (posted at once) and the send pool, once. A
    /// failed registration of the send pool fails the module (no fragment could be sent); of
    /// the receive pool, it leaves the buffers posted at open (datagrams beyond them are
    /// dropped, which pml dr recovers from), with a warning.
    fn grow(&mut self) {
        if self.grown {
            return;
        }
        self.grown = true;
        match self.recv_pool.grow_to(&self.pd, self.recv_full) {
            Ok(0) => {}
            Ok(_) => {
                self.repost_batch = self
                    .repost_batch_cfg
                    .min((self.recv_pool.capacity() / 4).max(1));
                self.refill();
            }
            Err(e) => tracing::warn!(
                error = %e,
                posted = self.recv_pool.capacity(),
                wanted = self.recv_full,
                "btl-ud: registering the rest of the receive pool failed; going on with the buffers posted at open"
            ),
        }
        if let Err(e) = self.send_pool.grow_to(&self.pd, self.send_full) {
            self.fail(format!("btl-ud: registering the send pool failed: {e}"));
        }
        tracing::debug!(
            recv_buffers = self.recv_pool.capacity(),
            send_buffers = self.send_pool.capacity(),
            "btl-ud: pools grown to their full size"
        );
    }

    /// Post every free receive buffer.
    fn refill(&mut self) {
        let size = self.recv_pool.buffer_size();
        while let Some(buf) = self.recv_pool.alloc() {
            let sge = self.recv_pool.sge(&buf, size);
            let wr = RecvWr {
                wr_id: buf.id(),
                sges: &[sge],
            };
            if let Err(e) = self.recv_qp.post_recv(&wr) {
                self.stats.recv_post_errors += 1;
                tracing::warn!(error = %e, "btl-ud: posting a receive buffer failed");
                self.recv_pool.free(buf);
                return;
            }
            self.stats.recv_posts += 1;
        }
    }

    /// Copy `parts` into a registered send buffer and post it on `qp` to `peer`.
    fn post(&mut self, qp: usize, peer: Rank, parts: &[&[u8]]) -> Result<(), rmca_verbs::Error> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let Some(buf) = self.send_pool.alloc() else {
            // Cannot happen (one buffer per credit), but never lose the fragment if it does.
            return Err(rmca_verbs::Error::QueueFull {
                depth: self.send_pool.capacity() as u32,
            });
        };
        {
            let b = self.send_pool.bytes_mut(&buf);
            let mut at = 0;
            for p in parts {
                b[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
        }
        let sge = self.send_pool.sge(&buf, len);
        let inline = len <= self.inline_max;
        let wr_id = ((qp as u64) << WR_QP_SHIFT) | if inline { WR_INLINE } else { buf.id() };
        let Some(Some(p)) = self.peers.get(peer as usize) else {
            self.send_pool.free(buf);
            return Err(rmca_verbs::Error::BadAddress("peer not reachable"));
        };
        let sges = [sge];
        let wr = SendWr {
            wr_id,
            op: SendOp::SendWithImm(self.rank),
            sges: &sges,
            signaled: true,
            inline,
            ud: Some(UdDest {
                ah: &p.ah,
                remote_qpn: p.qpn,
                remote_qkey: p.qkey,
            }),
        };
        match self.send_qps[qp].post_send(&wr) {
            Ok(()) => {
                if inline {
                    // The device copied the bytes at post time.
                    self.send_pool.free(buf);
                    self.stats.inline_sends += 1;
                }
                self.stats.frags_sent += 1;
                self.stats.bytes_sent += len as u64;
                Ok(())
            }
            Err(e) => {
                self.send_pool.free(buf);
                Err(e)
            }
        }
    }

    fn queue(&mut self, peer: Rank, parts: &[&[u8]]) -> Result<(), SendError> {
        let bytes: Vec<u8> = parts.concat();
        let len = bytes.len();
        match self.sched.enqueue(Pending { peer, bytes }, len) {
            Ok(()) => {
                self.memory.alloc(len);
                Ok(())
            }
            Err(_) => {
                self.stats.sends_refused += 1;
                Err(SendError::WouldBlock)
            }
        }
    }

    fn poll_send_completions(&mut self) -> usize {
        let mut done = 0;
        loop {
            let n = match self.send_cq.poll(&mut self.wcs) {
                Ok(n) => n,
                Err(e) => {
                    self.stats.cq_errors += 1;
                    tracing::error!(error = %e, "btl-ud: send CQ failed");
                    self.fail(format!("btl-ud send completion queue failed: {e}"));
                    return done;
                }
            };
            for i in 0..n {
                let wc = self.wcs[i];
                let qp = (wc.wr_id >> WR_QP_SHIFT) as usize;
                if qp < self.send_qps.len() {
                    self.sched.complete(qp);
                }
                if wc.wr_id & WR_INLINE == 0 {
                    self.send_pool
                        .free(PoolBuf::from_id(wc.wr_id & (WR_INLINE - 1)));
                }
                if wc.status == WcStatus::WrFlushError {
                    self.fail("a btl-ud send QP entered the error state".into());
                }
                if wc.status != WcStatus::Success {
                    self.stats.send_errors += 1;
                    tracing::warn!(status = ?wc.status, "btl-ud: send completed in error (fragment lost)");
                }
            }
            done += n;
            if n < self.wcs.len() {
                return done;
            }
        }
    }

    fn flush_pending(&mut self) {
        while let Some((qp, frag)) = self.sched.poll_transmit() {
            let len = frag.bytes.len();
            match self.post(qp, frag.peer, &[&frag.bytes]) {
                Ok(()) => self.memory.free(len),
                Err(rmca_verbs::Error::QueueFull { .. }) => {
                    self.sched.requeue_front(qp, frag, len);
                    return;
                }
                Err(e) => {
                    self.sched.release(qp);
                    self.memory.free(len);
                    self.stats.send_errors += 1;
                    tracing::warn!(peer = frag.peer, error = %e, "btl-ud: queued fragment could not be posted (lost)");
                }
            }
        }
    }

    fn poll_receives(&mut self, events: &mut dyn BtlEvents) -> usize {
        let n = match self.recv_cq.poll(&mut self.wcs) {
            Ok(n) => n,
            Err(e) => {
                self.stats.cq_errors += 1;
                tracing::error!(error = %e, "btl-ud: receive CQ failed");
                self.fail(format!("btl-ud receive completion queue failed: {e}"));
                return 0;
            }
        };
        let mut delivered = 0;
        let mut errors = false;
        for i in 0..n {
            let wc = self.wcs[i];
            errors |= !wc.is_ok();
            let buf = PoolBuf::from_id(wc.wr_id);
            let meta = RecvMeta {
                ok: wc.is_ok(),
                byte_len: wc.byte_len,
                imm: wc.imm,
                src_qp: wc.src_qp,
            };
            let data = self.recv_pool.bytes(&buf);
            match classify(meta, data, UD_GRH_LEN, self.job_tag, &self.sources) {
                Ok(d) => {
                    let frag = &data[d.range];
                    self.stats.frags_received += 1;
                    self.stats.bytes_received += frag.len() as u64;
                    events.recv(d.peer, d.tag, frag);
                    delivered += 1;
                }
                Err(reason) => {
                    tracing::debug!(
                        ?reason,
                        src_qp = wc.src_qp,
                        len = wc.byte_len,
                        "btl-ud: datagram dropped"
                    );
                    let s = &mut self.stats;
                    *match reason {
                        DropReason::Truncated => &mut s.drops_truncated,
                        DropReason::Foreign => &mut s.drops_foreign,
                        DropReason::WrongJob => &mut s.drops_wrong_job,
                        DropReason::UnknownSource => &mut s.drops_unknown_source,
                        DropReason::CompletionError => &mut s.drops_completion_error,
                    } += 1;
                }
            }
            self.recv_pool.free(buf);
        }
        // Repost consumed buffers together once a batch of them is free (each post costs a
        // doorbell, or a lock and a queue push on the soft provider: a batch of 16 is ~5000
        // instructions). Preferably from a poll that found nothing: a poll that delivered
        // returns to an application waiting for that data, so it reposts only when two
        // batches are free (a stream, which rarely finds its queue empty, still keeps at least
        // half the pool posted, since a batch is at most a quarter of it).
        if delivered > 0 && !self.grown {
            // A peer routed its traffic over ud before our BML did (or routes it without us).
            self.grow();
        }
        let free = self.recv_pool.capacity() - self.recv_pool.in_use();
        let batches = if n == 0 { 1 } else { 2 };
        // The QP's state is asked (under its lock) when a completion is in error (a QP that
        // enters the error state flushes its posted receives in error) or every 16th call
        // (none were posted), not on every poll.
        if (errors || self.ticks & 15 == 0) && self.recv_qp_in_error() {
            self.fail("the btl-ud receive QP entered the error state".into());
        } else if self.fatal.is_none() && free >= batches * self.repost_batch {
            self.refill();
        }
        delivered
    }

    /// The module cannot carry traffic any more: remember why; `progress` tells the PML.
    fn fail(&mut self, reason: String) {
        if self.fatal.is_none() {
            tracing::error!(%reason, "btl-ud: module failed");
            self.fatal = Some(reason);
        }
    }

    fn recv_qp_in_error(&self) -> bool {
        self.recv_qp.state() == rmca_verbs::QpState::Error
    }
}

impl Btl for UdBtl {
    fn component_name(&self) -> &str {
        "ud"
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
        for p in procs {
            let blob = modex.get(p.rank, MODEX_KEY).map_err(|e| {
                BtlError::Other(format!("btl-ud: reading rank {}'s card: {e}", p.rank))
            })?;
            let Some(blob) = blob else {
                reach.push(false);
                continue;
            };
            let card = CardRepr::from_bytes(&blob).map_err(|e| BtlError::BadCard {
                rank: p.rank,
                reason: e.to_string(),
            })?;
            if card.provider != self.card.provider || card.qkey != self.card.qkey {
                tracing::warn!(
                    rank = p.rank,
                    "btl-ud: rank unreachable: it uses another verbs provider or Q_Key (set the same btl_ud_provider and btl_ud_qkey everywhere)"
                );
                reach.push(false);
                continue;
            }
            if (card.mtu as usize) < MIN_PEER_MTU {
                return Err(BtlError::BadCard {
                    rank: p.rank,
                    reason: format!(
                        "UD MTU of {} bytes (valid: at least {MIN_PEER_MTU})",
                        card.mtu
                    ),
                });
            }
            // Its datagrams fit our buffers: it sends at most the smaller of both MTUs, as we
            // do (below).
            self.sources.insert(p.rank, card.send_qpns.clone());
            let peer_mtu = card.mtu as usize;
            if peer_mtu < self.send_mtu() {
                // The module has one fragment size (the PML reads the attributes after
                // add_procs): the smallest MTU among the peers, like the path MTU of a HCA
                // toward a peer whose port MTU is smaller.
                tracing::info!(
                    rank = p.rank,
                    peer_mtu,
                    mtu = self.mtu,
                    "btl-ud: a peer's UD MTU is smaller than ours: fragments are limited to it"
                );
                let max = peer_mtu - HEADER_LEN;
                self.attrs.max_send_size = max;
                self.attrs.eager_limit = self.attrs.eager_limit.min(max);
                self.attrs.rndv_eager_limit = self.attrs.rndv_eager_limit.min(max);
                self.inline_max = self.inline_max.min(peer_mtu);
            }
            let ah = self
                .pd
                .create_ah(&card.addr)
                .map_err(|e| BtlError::BadCard {
                    rank: p.rank,
                    reason: format!("address handle: {e}"),
                })?;
            let r = p.rank as usize;
            if self.peers.len() <= r {
                self.peers.resize_with(r + 1, || None);
            }
            let qpn = ah.remote_qpn();
            self.peers[r] = Some(Peer {
                ah,
                qpn,
                qkey: card.qkey,
            });
            reach.push(true);
        }
        Ok(reach)
    }

    fn peers_routed(&mut self, peers: &[Rank]) {
        if !peers.is_empty() {
            self.grow();
        }
    }

    fn del_procs(&mut self, ranks: &[Rank]) {
        for &r in ranks {
            if let Some(slot) = self.peers.get_mut(r as usize) {
                *slot = None;
            }
            self.sources.remove(r);
        }
        let mut freed = 0;
        self.sched.drop_pending(|f| {
            let gone = ranks.contains(&f.peer);
            if gone {
                freed += f.bytes.len();
            }
            gone
        });
        self.memory.free(freed);
    }

    fn send(
        &mut self,
        peer: Rank,
        tag: BtlTag,
        header: &[u8],
        payload: &[u8],
        _hint: SendHint,
    ) -> Result<(), SendError> {
        let len = header.len() + payload.len();
        if len > self.attrs.max_send_size {
            return Err(SendError::TooLarge {
                len,
                max: self.attrs.max_send_size,
            });
        }
        if !matches!(self.peers.get(peer as usize), Some(Some(_))) {
            return Err(SendError::Unreachable(peer));
        }
        if let Some(reason) = &self.fatal {
            return Err(SendError::PeerFailed {
                peer,
                reason: reason.clone(),
            });
        }
        if !self.grown {
            // Sent without the BML's routing (a direct user of the module): grow now.
            self.grow();
            if let Some(reason) = &self.fatal {
                return Err(SendError::PeerFailed {
                    peer,
                    reason: reason.clone(),
                });
            }
        }
        if !self.blackhole.admit() {
            // The injected path death: the send "succeeds" locally and nothing arrives.
            return Ok(());
        }
        let mut hdr = [0u8; HEADER_LEN];
        FragRepr {
            tag,
            job_tag: self.job_tag,
        }
        .emit(&mut hdr);
        let parts: [&[u8]; 3] = [&hdr, header, payload];
        match self.sched.admit(hdr.len() + header.len() + payload.len()) {
            Admit::Post(qp) => match self.post(qp, peer, &parts) {
                Ok(()) => Ok(()),
                Err(rmca_verbs::Error::QueueFull { .. }) => {
                    // The device's queue is fuller than our credits say: queue, never drop.
                    self.sched.release(qp);
                    self.queue(peer, &parts)
                }
                Err(e) => {
                    self.sched.release(qp);
                    self.stats.send_errors += 1;
                    Err(SendError::PeerFailed {
                        peer,
                        reason: format!("btl-ud post_send: {e}"),
                    })
                }
            },
            Admit::Queue => self.queue(peer, &parts),
            Admit::Refuse => {
                self.stats.sends_refused += 1;
                Err(SendError::WouldBlock)
            }
        }
    }

    fn progress(&mut self, events: &mut dyn BtlEvents) -> usize {
        // Send completions are reaped lazily: when fragments wait for credits, when half the
        // credits are in use, or every 16th call (which also lets the soft provider transmit
        // datagrams its socket deferred, and delayed faults). The CQ holds every credit's
        // completion, so it cannot overflow meanwhile; the receive path stays cheap.
        self.ticks = self.ticks.wrapping_add(1);
        let busy = self.sched.total_outstanding() >= self.credits / 2;
        let completed = if busy || self.sched.pending_len() > 0 || self.ticks & 15 == 0 {
            self.poll_send_completions()
        } else {
            0
        };
        if self.sched.pending_len() > 0 {
            self.flush_pending();
        }
        let delivered = self.poll_receives(events);
        let mut reported = 0;
        if let (Some(reason), false) = (&self.fatal, self.fatal_reported) {
            self.fatal_reported = true;
            for (rank, p) in self.peers.iter().enumerate() {
                if p.is_some() {
                    events.peer_failed(rank as Rank, reason);
                    reported += 1;
                }
            }
        }
        delivered + completed + reported
    }

    fn memory_usage(&self) -> MemoryUsage {
        MemoryUsage {
            current: self.memory.current(),
            peak: self.memory.peak(),
        }
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let s = &self.stats;
        let mut v: Vec<(&str, u64)> = vec![
            ("frags_sent", s.frags_sent),
            ("bytes_sent", s.bytes_sent),
            ("inline_sends", s.inline_sends),
            ("frags_received", s.frags_received),
            ("bytes_received", s.bytes_received),
            ("recv_buffers_total", self.recv_pool.capacity() as u64),
            ("recv_buffers_posted", self.recv_pool.in_use() as u64),
            ("recv_posts", s.recv_posts),
            ("recv_post_errors", s.recv_post_errors),
            ("drops_truncated", s.drops_truncated),
            ("drops_foreign", s.drops_foreign),
            ("drops_wrong_job", s.drops_wrong_job),
            ("drops_unknown_source", s.drops_unknown_source),
            ("drops_completion_error", s.drops_completion_error),
            ("send_errors", s.send_errors),
            ("sends_refused", s.sends_refused),
            ("sends_outstanding", self.sched.total_outstanding()),
            ("pending_now", self.sched.pending_len() as u64),
            ("pending_max_depth", self.sched.pending_hwm() as u64),
            ("pending_total", self.sched.queued_total()),
            ("cq_errors", s.cq_errors),
        ];
        if let Some(p) = self.ctx.soft_stats() {
            v.extend([
                ("drops_no_recv_posted", p.ud_no_wqe_drops),
                ("drops_provider_foreign", p.foreign_drops),
                ("drops_provider_malformed", p.malformed_drops),
                ("drops_provider_mtu", p.mtu_drops),
                ("drops_provider_send_mtu", p.ud_send_mtu_drops),
            ]);
        }
        let mut f = self.recv_qp.fault_stats();
        for qp in &self.send_qps {
            let s = qp.fault_stats();
            f.dropped += s.dropped;
            f.duplicated += s.duplicated;
            f.reordered += s.reordered;
            f.delayed += s.delayed;
            f.corrupted += s.corrupted;
        }
        v.extend([
            ("faults_dropped", f.dropped),
            ("faults_duplicated", f.duplicated),
            ("faults_reordered", f.reordered),
            ("faults_delayed", f.delayed),
            ("faults_corrupted", f.corrupted),
            ("faults_blackholed", self.blackhole.swallowed()),
        ]);
        v.into_iter().map(|(k, x)| (k.to_owned(), x)).collect()
    }

    fn finalize(&mut self) {
        let mut freed = 0;
        self.sched.drop_pending(|f| {
            freed += f.bytes.len();
            true
        });
        self.memory.free(freed);
        for qp in self.send_qps.iter().chain(std::iter::once(&self.recv_qp)) {
            let _ = qp.modify_to_error();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use rmca_framework::btl::CompletionToken;
    use rmca_framework::modex::{LocalModex, ModexWrite};
    use rmca_framework::params::{ParamRegistrar, ParamStore, RawSources};

    #[derive(Default)]
    struct Failures(Vec<(Rank, String)>);
    impl BtlEvents for Failures {
        fn recv(&mut self, _peer: Rank, _tag: BtlTag, _data: &[u8]) {}
        fn rdma_complete(&mut self, _t: CompletionToken, _r: Result<(), SendError>) {}
        fn peer_failed(&mut self, peer: Rank, reason: &str) {
            self.0.push((peer, reason.to_owned()));
        }
    }

    fn soft_cfg() -> UdConfig {
        soft_cfg_with(&[])
    }

    fn soft_cfg_with(extra: &[(&str, &str)]) -> UdConfig {
        let mut specs = Vec::new();
        config::register(&mut ParamRegistrar::new("btl", "ud", &mut specs));
        let mut env = vec![
            ("RMCA_MCA_btl_ud_provider".to_owned(), "soft".to_owned()),
            ("RMCA_MCA_btl_ud_recv_buffers".to_owned(), "16".to_owned()),
        ];
        env.extend(
            extra
                .iter()
                .map(|(k, v)| (format!("RMCA_MCA_btl_ud_{k}"), (*v).to_owned())),
        );
        let raw = RawSources::from_parts(None, None, false, env, vec![]).unwrap();
        UdConfig::from_params(&ParamStore::resolve(specs, &raw).unwrap(), 0).unwrap()
    }

    /// Payloads received, in order.
    #[derive(Default)]
    struct Received(Vec<Vec<u8>>);
    impl BtlEvents for Received {
        fn recv(&mut self, _peer: Rank, _tag: BtlTag, data: &[u8]) {
            self.0.push(data.to_vec());
        }
        fn rdma_complete(&mut self, _t: CompletionToken, _r: Result<(), SendError>) {}
        fn peer_failed(&mut self, peer: Rank, reason: &str) {
            panic!("peer {peer} failed: {reason}");
        }
    }

    fn counter(b: &UdBtl, name: &str) -> u64 {
        b.counters()
            .into_iter()
            .find(|(k, _)| k == name)
            .unwrap_or_else(|| panic!("no counter {name}"))
            .1
    }

    /// Progresses both modules until `rx` has `want` payloads or a (generous) bound passes.
    fn pump(b: &mut [UdBtl], to: usize, rx: &mut Received, want: usize) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while rx.0.len() < want && std::time::Instant::now() < until {
            b[1 - to].progress(&mut Received::default());
            b[to].progress(rx);
        }
    }

    #[test]
    fn blackhole_after_n_swallows_every_later_send_of_this_process_only() {
        assert_eq!(soft_cfg().blackhole_after, None, "off by default");
        let mut b = opened_pair_with(|r| {
            // Only rank 0's sends die, after 3 fragments.
            let cfg = if r == 0 {
                soft_cfg_with(&[("fault_blackhole_after", "3")])
            } else {
                soft_cfg()
            };
            assert_eq!(cfg.blackhole_after, (r == 0).then_some(3));
            cfg
        });
        for i in 0..8u8 {
            // Every send is accepted: the death is silent, as a dead network's would be.
            b[0].send(1, 0x40, &[i], &[], SendHint::default()).unwrap();
        }
        let mut rx = Received::default();
        pump(&mut b, 1, &mut rx, 3);
        assert_eq!(rx.0, vec![vec![0u8], vec![1], vec![2]]);
        assert_eq!(counter(&b[0], "frags_sent"), 3);
        assert_eq!(counter(&b[0], "faults_blackholed"), 5);
        // Later fragments never show up, even after a marker from the live direction has
        // made the round trip.
        b[1].send(0, 0x40, b"back", &[], SendHint::default())
            .unwrap();
        let mut back = Received::default();
        pump(&mut b, 0, &mut back, 1);
        assert_eq!(
            back.0,
            vec![b"back".to_vec()],
            "the other process's sends still work"
        );
        for _ in 0..1000 {
            b[1].progress(&mut rx);
        }
        assert_eq!(rx.0.len(), 3, "nothing after the cut arrives");
        assert_eq!(counter(&b[1], "faults_blackholed"), 0);
    }

    #[test]
    fn the_soft_default_mtu_is_one_packet_of_the_interface() {
        let m = UdBtl::open(&soft_cfg(), &job(0), &MemoryAccounting::new()).unwrap();
        let link = m.ctx.soft_link().expect("soft provider");
        // On loopback (65536-byte MTU) that is the 65000 bytes a soft datagram carries at most.
        assert_eq!(
            m.mtu(),
            (link.ud_mtu_limit as usize).min(config::defaults::SOFT_MTU as usize),
            "{link:?}"
        );
        assert_eq!(m.attributes().max_send_size, m.mtu() - HEADER_LEN);
    }

    #[test]
    fn the_automatic_receive_pool_is_bounded_in_bytes() {
        let mut cfg = soft_cfg();
        cfg.recv_buffers = None;
        // Small buffers: 256 + 16 per rank.
        assert_eq!(cfg.recv_buffers_for(2, 16384, 2088), 288);
        assert_eq!(cfg.recv_buffers_for(4096, 16384, 2088), 8192);
        // 65000-byte datagrams: at most 32 MiB of buffers, at least 64 buffers.
        assert_eq!(cfg.recv_buffers_for(2, 16384, 65040), 288);
        assert_eq!(cfg.recv_buffers_for(64, 16384, 65040), (32 << 20) / 65040);
        assert_eq!(cfg.recv_buffers_for(64, 16384, 1 << 20), 64);
        // The device's limit and the parameter still rule.
        assert_eq!(cfg.recv_buffers_for(64, 100, 65040), 100);
        cfg.recv_buffers = Some(5000);
        assert_eq!(cfg.recv_buffers_for(2, 16384, 65040), 5000);
    }

    fn job(rank: Rank) -> JobInfo {
        JobInfo {
            rank,
            size: 2,
            job_id: "fatal".into(),
            secret: b"fatal".to_vec(),
            node_of: vec![0, 0],
            node_names: vec!["n".into()],
        }
    }

    #[test]
    fn a_receive_qp_in_error_fails_every_peer_once_and_refuses_sends() {
        let mut b = opened_pair();
        b[1].recv_qp.modify_to_error().unwrap();
        let mut ev = Failures::default();
        b[1].progress(&mut ev);
        assert_eq!(
            ev.0.iter().map(|f| f.0).collect::<Vec<_>>(),
            vec![0, 1],
            "{:?}",
            ev.0
        );
        assert!(ev.0[0].1.contains("error state"));
        b[1].progress(&mut ev);
        assert_eq!(ev.0.len(), 2, "reported once");
        assert!(matches!(
            b[1].send(0, 0x40, b"x", &[], SendHint::default()),
            Err(SendError::PeerFailed { peer: 0, .. })
        ));
        assert_eq!(
            b[1].recv_posted(),
            0,
            "flushed buffers are not reposted into a dead QP"
        );
        // The healthy module is unaffected.
        assert!(b[0].send(1, 0x40, b"x", &[], SendHint::default()).is_ok());
    }

    /// Two soft-provider modules that reach each other (and themselves).
    fn opened_pair() -> Vec<UdBtl> {
        opened_pair_with(|_| soft_cfg())
    }

    /// [`opened_pair`] with rank r's configuration `cfg(r)`.
    fn opened_pair_with(cfg: impl Fn(Rank) -> UdConfig) -> Vec<UdBtl> {
        let modex = LocalModex::new();
        let mem = MemoryAccounting::new();
        let mut b: Vec<UdBtl> = (0..2)
            .map(|r| {
                let m = UdBtl::open(&cfg(r), &job(r), &mem).unwrap();
                modex
                    .writer(r)
                    .put(MODEX_KEY, &m.card().to_bytes())
                    .unwrap();
                m
            })
            .collect();
        for (r, m) in b.iter_mut().enumerate() {
            assert_eq!(
                m.add_procs(&job(r as Rank).procs(), &modex).unwrap(),
                vec![true, true]
            );
        }
        b
    }

    /// A poll that delivers returns to an application waiting for the data: it leaves a batch
    /// of free receive buffers to the next poll that finds nothing (the idle wait), and
    /// reposts at once only when two batches are free.
    #[test]
    fn receive_buffers_are_reposted_by_an_idle_poll_unless_two_batches_are_free() {
        let mut b = opened_pair();
        let total = b[1].recv_posted();
        let batch = b[1].repost_batch;
        assert_eq!((total, batch), (16, 4), "16 buffers, batches of a quarter");
        for i in 0..batch as u8 {
            b[0].send(1, 0x40, &[i], &[], SendHint::default()).unwrap();
        }
        let mut rx = Received::default();
        pump(&mut b, 1, &mut rx, batch);
        assert_eq!(rx.0.len(), batch);
        assert_eq!(
            b[1].recv_posted(),
            total - batch,
            "not reposted by the delivering poll"
        );
        b[1].progress(&mut rx);
        assert_eq!(b[1].recv_posted(), total, "reposted by the idle poll");
        // Two batches consumed without an idle poll between them: reposted while delivering.
        for i in 0..2 * batch as u8 {
            b[0].send(1, 0x40, &[i], &[], SendHint::default()).unwrap();
        }
        let mut rx = Received::default();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while rx.0.len() < 2 * batch && std::time::Instant::now() < until {
            b[0].progress(&mut Received::default());
            let before = rx.0.len();
            b[1].progress(&mut rx);
            if rx.0.len() == before {
                continue;
            }
            assert!(
                b[1].recv_posted() > total - 2 * batch,
                "two batches free are reposted by the poll that frees them"
            );
        }
        assert_eq!(rx.0.len(), 2 * batch);
    }

    /// Bytes btl-ud holds in `mem` now.
    fn ud_bytes(mem: &MemoryAccounting) -> usize {
        mem.counter("btl.ud").current()
    }

    /// At open only `btl_ud_recv_buffers_initial` receive buffers exist and no send buffer;
    /// the BML routing a peer over the module grows both pools to their full size.
    #[test]
    fn the_pools_are_small_until_the_bml_routes_a_peer_over_the_module() {
        let cfg = soft_cfg_with(&[("recv_buffers", "64"), ("recv_buffers_initial", "4")]);
        let mem = MemoryAccounting::new();
        let mut m = UdBtl::open(&cfg, &job(0), &mem).unwrap();
        let (recv_buf, send_buf) = (UD_GRH_LEN + m.mtu(), m.mtu());
        let send_full = cfg.send_qps * cfg.send_queue_depth as usize;
        assert_eq!(m.recv_posted(), 4);
        assert!(!m.pools_grown());
        assert_eq!(ud_bytes(&mem), 4 * recv_buf, "no send buffer at open");
        m.peers_routed(&[]);
        assert!(!m.pools_grown(), "routing no peer is no reason to grow");
        m.peers_routed(&[1]);
        assert!(m.pools_grown());
        assert_eq!(m.recv_posted(), 64);
        assert_eq!(counter(&m, "recv_buffers_total"), 64);
        assert_eq!(ud_bytes(&mem), 64 * recv_buf + send_full * send_buf);
        m.peers_routed(&[1]);
        assert_eq!(ud_bytes(&mem), 64 * recv_buf + send_full * send_buf, "once");
    }

    /// What a one-node job's rank pays for ud when shm carries every peer (the BML drops ud
    /// without routing anything over it): the initial buffers, not the 52 MB of full pools
    /// at the soft provider's 65000-byte MTU.
    #[test]
    fn an_unrouted_module_with_the_default_sizes_holds_about_a_mebibyte() {
        let mut specs = Vec::new();
        config::register(&mut ParamRegistrar::new("btl", "ud", &mut specs));
        let env = vec![("RMCA_MCA_btl_ud_provider".to_owned(), "soft".to_owned())];
        let raw = RawSources::from_parts(None, None, false, env, vec![]).unwrap();
        let cfg = UdConfig::from_params(&ParamStore::resolve(specs, &raw).unwrap(), 0).unwrap();
        let mem = MemoryAccounting::new();
        let m = UdBtl::open(&cfg, &job(0), &mem).unwrap();
        let initial = config::defaults::RECV_INITIAL as usize;
        assert_eq!(m.recv_posted(), initial);
        assert_eq!(ud_bytes(&mem), initial * (UD_GRH_LEN + m.mtu()));
        assert!(
            mem.counter("btl.ud").peak() <= 16 * 65040,
            "{}",
            ud_bytes(&mem)
        );
        drop(m);
        assert_eq!(ud_bytes(&mem), 0);
    }

    /// A peer whose BML routed ud before ours did sends first: its datagrams land in the
    /// buffers posted at open, and the first delivery grows the pool (no datagram lost).
    /// The sender grew its own pools at its first send (no BML in this test).
    #[test]
    fn early_datagrams_find_the_initial_buffers_and_the_first_delivery_grows_the_pool() {
        let mut b = opened_pair_with(|_| {
            soft_cfg_with(&[("recv_buffers", "64"), ("recv_buffers_initial", "4")])
        });
        assert!(!b[0].pools_grown() && !b[1].pools_grown());
        for i in 0..4u8 {
            b[0].send(1, 0x40, &[i], &[], SendHint::default()).unwrap();
        }
        assert!(b[0].pools_grown(), "a send grows the sender's pools");
        let mut rx = Received::default();
        pump(&mut b, 1, &mut rx, 4);
        assert_eq!(rx.0, vec![vec![0u8], vec![1], vec![2], vec![3]]);
        assert!(
            b[1].pools_grown(),
            "the first delivery grows the receiver's pool"
        );
        assert_eq!(counter(&b[1], "recv_buffers_total"), 64);
        assert!(
            b[1].recv_posted() >= 64 - 4,
            "the grown pool is posted (but for buffers consumed since, reposted by batch): {}",
            b[1].recv_posted()
        );
        assert_eq!(
            b[1].repost_batch, 16,
            "batches of a quarter of the grown pool"
        );
        // A burst the initial buffers could not have held now arrives whole.
        for i in 0..40u8 {
            b[0].send(1, 0x40, &[i], &[], SendHint::default()).unwrap();
        }
        let mut rx = Received::default();
        pump(&mut b, 1, &mut rx, 40);
        assert_eq!(rx.0.len(), 40);
        assert_eq!(counter(&b[1], "drops_no_recv_posted"), 0);
    }
}
