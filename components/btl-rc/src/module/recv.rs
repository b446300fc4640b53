//! The receive path: receive completions, reposting, fragment dispatch, and the SRQ's
//! low-watermark refill.

use std::time::Instant;

use rmca_framework::btl::BtlEvents;
use rmca_verbs::{AsyncEvent, RecvWr, WcStatus};

use crate::config::RecvQueues;
use crate::wire::{
    parse_records, FragKind, FragPacket, FragRepr, EAGER_FOOTER_LEN, FRAG_HEADER_LEN,
};

use super::eager::RingTx;
use super::RcBtl;

impl RcBtl {
    pub(super) fn progress_recvs(&mut self, events: &mut dyn BtlEvents) -> usize {
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

    pub(super) fn handle_frag_from(
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
        let dropped_before = peer.rx.dropped;
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
            FragKind::SeqAck => peer.tx_win.ack(h.seq),
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
        if peer.rx.dropped > dropped_before {
            // Only a duplicate gets here: the sender's window keeps every fresh fragment
            // within reach of the receiver's next seq.
            tracing::debug!(peer = rank, seq = h.seq, kind = ?h.kind, qp = qi, "btl-rc: stale fragment dropped");
        }
        self.stats.received += n as u64;
        if n > 0 {
            self.maybe_open_ring(pi, n as u64);
        }
        n
    }

    pub(super) fn progress_async(&mut self) {
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
    /// re-arm (the SRQ limit event).
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
}
