//! The [`Btl`] impl of [`RcBtl`]: the framework's entry points.

use std::time::Instant;

use rmca_framework::btl::{
    Btl, BtlAttributes, BtlError, BtlEvents, BtlTag, CompletionToken, MemAccess, MemoryUsage,
    ModexRead, Registration, RemoteSegment, SendError, SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::rank::{ProcInfo, Rank};

use crate::config::ConnectMode;
use crate::conn::{Connection, State};
use crate::reorder::{Reorder, SeqWindow};
use crate::sched::QpScheduler;
use crate::sendq::{Pending, SendQueue};
use crate::wire::CardRepr;

use super::{Peer, RcBtl};

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
                    tx_win: SeqWindow::default(),
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

    fn peers_routed(&mut self, peers: &[Rank]) {
        if peers.is_empty() {
            return;
        }
        // Now rather than at the first connection, which would then wait for a registration.
        if let Err(e) = self.ensure_srq() {
            tracing::warn!(error = %e, "btl-rc: shared receive queue (retried at the first connection)");
        }
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
            ("reorder_dropped", sum(&|p| p.rx.dropped)),
            ("seq_window_stalls", sum(&|p| p.tx_win.stalls)),
            ("seq_acks_sent", s.seq_acks),
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
