//! Adaptive eager RDMA: rings of RDMA-writable slots a receiver offers to its busiest peers.

use rmca_framework::btl::{BtlEvents, BtlTag, SendError};
use rmca_framework::rank::Rank;
use rmca_framework::wire::{read_u32_at, write_u32_at};
use rmca_verbs::{AccessFlags, Mr, SendOp, SendWr};

use crate::wire::{FragKind, FragRepr, EAGER_FOOTER_LEN, EAGER_VALID, FRAG_HEADER_LEN};

use super::RcBtl;

/// A ring of RDMA-writable slots this process polls for one peer's eager messages.
#[derive(Debug)]
pub(super) struct RingRx {
    pub(super) mr: Mr,
    pub(super) slots: u32,
    pub(super) slot_size: usize,
    pub(super) tail: u32,
    pub(super) owed: u32,
    pub(super) open_due: bool,
}

/// The peer's ring we write eager messages into.
#[derive(Debug)]
pub(super) struct RingTx {
    pub(super) addr: u64,
    pub(super) rkey: u32,
    pub(super) slots: u32,
    pub(super) slot_size: usize,
    pub(super) head: u32,
    pub(super) credits: u32,
}

impl RcBtl {
    /// Adaptive eager RDMA: after `btl_rc_eager_rdma_threshold` messages from a
    /// peer, give it a ring of RDMA-writable slots that this process polls.
    pub(super) fn maybe_open_ring(&mut self, pi: usize, n: u64) {
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
    pub(super) fn ring_control(&mut self, pi: usize) -> usize {
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
    pub(super) fn try_eager(
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
        write_u32_at(&mut footer, 0, len as u32);
        write_u32_at(&mut footer, 4, EAGER_VALID);
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
    pub(super) fn poll_ring(&mut self, pi: usize, events: &mut dyn BtlEvents) -> usize {
        let mut n = 0;
        loop {
            let Some(r) = self.peers[pi].ring_rx.as_mut() else {
                return n;
            };
            let end = (r.tail as usize + 1) * r.slot_size;
            let mut footer = [0u8; EAGER_FOOTER_LEN];
            // Polled while the peer's write may be landing: the footer lands last, and this
            // acquire read makes the payload before it visible.
            r.mr.read_polled(end - EAGER_FOOTER_LEN, &mut footer)
                .expect("slot inside the ring");
            if read_u32_at(&footer, 4) != EAGER_VALID {
                return n;
            }
            let len = read_u32_at(&footer, 0) as usize;
            let mut buf = std::mem::take(&mut self.scratch);
            let ok = len <= r.slot_size - EAGER_FOOTER_LEN;
            if ok {
                r.mr.read_at(end - EAGER_FOOTER_LEN - len, &mut buf[..len])
                    .expect("inside the slot");
            }
            r.mr.write_polled(end - EAGER_FOOTER_LEN, &[0; EAGER_FOOTER_LEN])
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
}
