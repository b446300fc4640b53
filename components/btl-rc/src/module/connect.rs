//! Connection management: the UD CM QP's REQ/REP exchange driving [`crate::conn`], RC QP
//! creation and transitions, and failing a peer's path.

use std::time::Instant;

use rmca_verbs::{QpCaps, QpInit, QpType, RecvWr, SendOp, SendWr, UdDest, WcStatus, UD_GRH_LEN};

use crate::config::RecvQueues;
use crate::conn::Action;
use crate::credits::{Credits, CONTROL_RESERVE};
use crate::wire::{CmPacket, CmRepr, CmType};

use super::{rc_params, QpSlot, RcBtl, CTRL_WQES, NO_FLOW_CONTROL, Q_KEY, WR_CM_SEND};

impl RcBtl {
    pub(super) fn run_actions(&mut self, pi: usize, now: Instant) {
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
        self.ensure_srq()?;
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
                .modify_to_rtr(Some(addr), &rc_params(&self.cfg))
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
    pub(super) fn class_of_qp(&self, qi: usize) -> usize {
        (qi / self.cfg.qps_per_peer as usize).min(self.recv_pools.len() - 1)
    }

    /// Does QP `qi` of a peer have its own receive queue (else it uses the SRQ)?
    pub(super) fn qp_per_peer(&self, qi: usize) -> bool {
        matches!(
            self.cfg.recv.queues()[self.class_of_qp(qi)].kind,
            RecvQueues::PerPeer { .. }
        )
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

    pub(super) fn fail_peer(&mut self, pi: usize, reason: &str) {
        let p = &mut self.peers[pi];
        if p.failed.is_some() {
            return;
        }
        if rmca_framework::job::closing() {
            // The peer left the job's closing fence first and closed its QPs.
            tracing::debug!(
                peer = p.rank,
                reason,
                "btl-rc: path to peer closed at finalize"
            );
        } else {
            tracing::warn!(peer = p.rank, reason, "btl-rc: path to peer failed");
        }
        self.stats.peer_failures += 1;
        p.failed = Some(reason.to_owned());
        p.queue.clear();
        p.conn.fail(reason);
        for s in &p.qps {
            // Flushes return every posted buffer through the CQs.
            let _ = s.qp.modify_to_error();
        }
    }

    pub(super) fn progress_cm(&mut self) -> usize {
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
}
