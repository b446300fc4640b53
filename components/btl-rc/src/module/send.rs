//! The send path: QP scheduling, send-WQE and credit reservation, posting fragments
//! (whole, striped or coalesced), draining a peer's queue, and send completions.

use rmca_framework::btl::{BtlEvents, BtlTag, SendError, SendHint};
use rmca_framework::rank::Rank;
use rmca_verbs::{SendOp, SendWr, WcStatus};

use crate::sched::Plan;
use crate::sendq::Item;
use crate::wire::{FragKind, FragRepr, FRAG_HEADER_LEN};

use super::{RcBtl, WR_CTRL, WR_RDMA};

impl RcBtl {
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

    /// Count a posted data fragment; `btl_rc_fault_kill_after` kills the path to `pi` at
    /// the configured count, at the next progress (not here: callers still hold the
    /// peer's send queue). What was posted by then is flushed, never delivered.
    pub(super) fn count_data_post(&mut self, pi: usize) {
        self.stats.data_posts += 1;
        if self
            .cfg
            .fault_kill_after
            .is_some_and(|n| self.stats.data_posts == n.max(1))
        {
            self.kill_due = Some(pi);
        }
    }

    pub(super) fn post_buf(
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

    pub(super) fn try_send_now(
        &mut self,
        pi: usize,
        tag: BtlTag,
        seq: u16,
        header: &[u8],
        payload: &[u8],
        hint: SendHint,
    ) -> Result<bool, SendError> {
        if self.peers[pi].tx_win.room_or_stall(seq) == 0 {
            return Ok(false);
        }
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
    pub(super) fn drain_peer(&mut self, pi: usize) -> usize {
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
        if self.peers[pi].rx.ack_due() && self.peers[pi].qps[0].ctrl_wqes > 0 {
            let mut hdr = FragRepr::control(FragKind::SeqAck, 0);
            hdr.seq = self.peers[pi].rx.next();
            // Not sent (no send buffer, or the peer failed): due again at the next drain.
            if self.post_buf(pi, 0, hdr, &[], true).is_ok() {
                self.peers[pi].rx.take_ack();
                self.stats.seq_acks += 1;
                moved += 1;
            }
        }
        moved += self.ring_control(pi);
        while let Some(front) = self.peers[pi].queue.front() {
            let (tag, seq, front_hint, hdr_len) = (front.tag, front.seq, front.hint, front.hdr_len);
            // Bundles take as many seqs as the window has room for.
            let room = usize::from(self.peers[pi].tx_win.room_or_stall(seq));
            if room == 0 {
                break;
            }
            if self.peers[pi].queue.next_is_bundle_within(room) {
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
                }) = self.peers[pi].queue.pop_within(room)
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
                let hint = front_hint;
                let data = std::mem::take(&mut self.peers[pi].queue_front_mut().data);
                let (h, pay) = data.split_at(hdr_len);
                match self.try_send_now(pi, tag, seq, h, pay, hint) {
                    Ok(true) => {
                        self.peers[pi].queue_front_mut().data = data;
                        self.peers[pi].queue.pop_within(1);
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

    pub(super) fn progress_sends(&mut self, events: &mut dyn BtlEvents) -> usize {
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
}
