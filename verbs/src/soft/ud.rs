//! The UD path of a soft QP: one UDP socket per QP, one datagram per message.

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::qp::QpInner;
use super::wire::{UdOpcode, UdPacket, UdRepr, UD_HEADER_LEN};
use super::{rx, Qp, UD_GRH_LEN};
use crate::error::{Error, Result};
use crate::types::*;

/// Kernel bookkeeping charged per queued datagram beyond its payload (sk_buff truesize).
pub(super) const UD_SKB_OVERHEAD: usize = 1024;

/// Consecutive polls finding a datagram after which a UD QP receives in batches (not 2: a dr
/// ping-pong step brings a reply and an ack back to back, which is no stream).
pub(super) const UD_BATCH_STREAK: u32 = 4;

/// Most bytes a UD socket buffers beyond its QP's receive queue depth.
pub(super) const UD_RCVBUF_MAX: usize = 64 << 20;

/// Raise a UDP socket's receive buffer to `bytes`: `SO_RCVBUFFORCE` where permitted (root or
/// CAP_NET_ADMIN, which may exceed `net.core.rmem_max`), else `SO_RCVBUF` (capped by rmem_max).
pub(super) fn size_udp_rcvbuf(sock: &UdpSocket, bytes: usize) {
    let val = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        if super::link::int_sockopt(sock, libc::SOL_SOCKET, opt, val).is_ok() {
            return;
        }
    }
    tracing::debug!(bytes, "could not raise the UD socket receive buffer");
}

impl Qp {
    pub(super) fn ud_send(
        &self,
        g: &mut QpInner,
        wr: &SendWr<'_>,
        len: usize,
        dest: Option<(SocketAddr, u32, u32)>,
    ) -> Result<()> {
        let (to, dst_qpn, qkey) = dest.ok_or(Error::InvalidWr("UD send needs a destination"))?;
        let (opcode, imm) = match wr.op {
            SendOp::Send => (UdOpcode::Send, 0),
            SendOp::SendWithImm(i) => (UdOpcode::SendImm, i),
            _ => {
                return Err(Error::InvalidWr(
                    "UD supports SEND and SEND with immediate only",
                ))
            }
        };
        if len > self.ctx.ud_mtu as usize {
            return Err(Error::InvalidWr("UD message larger than the path MTU"));
        }
        if g.ud_pending.len() >= self.caps.max_send_wr as usize {
            return Err(Error::QueueFull {
                depth: self.caps.max_send_wr,
            });
        }
        // The packet is built in the QP's scratch buffer, which goes back there once the
        // datagram left (no allocation per send); only a datagram that waits keeps it.
        let mut pkt = std::mem::take(&mut g.ud_scratch);
        pkt.clear();
        pkt.resize(UD_HEADER_LEN, 0);
        UdRepr {
            opcode,
            job_tag: self.ctx.job_tag,
            src_qpn: self.qpn,
            dst_qpn,
            qkey,
            imm,
        }
        .emit(&mut pkt);
        if let Err(st) = self.ctx.mrs.gather(self.pd, wr.sges, &mut pkt) {
            let wc = Wc {
                wr_id: wr.wr_id,
                status: st,
                opcode: WcOpcode::Send,
                byte_len: 0,
                imm: None,
                qp_num: self.qpn,
                src_qp: 0,
            };
            self.send_cq.push(wc);
            self.enter_error(g);
            return Ok(());
        }
        if g.ud_peer.is_none() && self.caps.max_recv_wr == 0 && self.srq.is_none() {
            self.ud_connect(g, to);
        }
        match g.ud_fault.as_mut() {
            Some(f) => {
                let now = Instant::now();
                f.handle_send(now, (to, pkt));
                self.ud_transmit(g, Some(now));
            }
            None if g.ud_pending.is_empty() => {
                let sent = match g.udp.as_ref() {
                    Some(sock) => self.ud_send_datagram(sock, g.ud_peer, &to, &pkt),
                    None => true,
                };
                if sent {
                    g.ud_scratch = pkt;
                } else {
                    g.ud_pending.push_back((to, pkt));
                }
            }
            None => {
                g.ud_pending.push_back((to, pkt));
                self.ud_transmit(g, None);
            }
        }
        // The datagram is handed to the wire (or to the fault model): locally complete.
        if wr.signaled
            && !self.send_cq.push(Wc {
                wr_id: wr.wr_id,
                status: WcStatus::Success,
                opcode: WcOpcode::Send,
                byte_len: len as u32,
                imm: None,
                qp_num: self.qpn,
                src_qp: 0,
            })
        {
            self.enter_error(g);
        }
        Ok(())
    }

    /// Connects the socket of a QP that can never receive (created without a receive queue
    /// and without an SRQ: btl-ud's send QPs) to its first destination: sends to it then skip
    /// the route lookup of an unconnected `sendto` (a HCA's address handle caches its path
    /// likewise); sends elsewhere still name their address. (A connected UDP socket only
    /// accepts datagrams from its peer, and undoing the connection would give up the socket's
    /// port, the QP's address: hence only QPs that never receive.)
    fn ud_connect(&self, g: &mut QpInner, to: SocketAddr) {
        let Some(sock) = g.udp.as_ref() else { return };
        match sock.connect(to) {
            Ok(()) => g.ud_peer = Some(to),
            // Then every send names its address, as before: slower, not wrong.
            Err(e) => tracing::debug!(error = %e, %to, "soft UD: connect of a send-only socket"),
        }
    }

    /// Sends one datagram; false when the socket's buffer is full (try again later). A
    /// datagram the kernel refuses for good is lost, as on the wire.
    fn ud_send_datagram(
        &self,
        sock: &UdpSocket,
        peer: Option<SocketAddr>,
        to: &SocketAddr,
        p: &[u8],
    ) -> bool {
        let mut retried = false;
        loop {
            let r = if peer.as_ref() == Some(to) {
                sock.send(p)
            } else {
                sock.send_to(p, to)
            };
            match r {
                Ok(_) => return true,
                Err(ref e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(ref e) if e.kind() == ErrorKind::Interrupted => {}
                Err(ref e)
                    if e.raw_os_error() == Some(libc::ECONNREFUSED)
                        && peer.is_some()
                        && !retried =>
                {
                    // A connected socket reports an earlier ICMP error (a closed port) on its
                    // next send, which it then does not make: the error is consumed, try once
                    // more (the datagram may be for another, live destination).
                    retried = true;
                }
                Err(ref e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                    // DF is set: the path MTU towards `to` fell below the datagram (the
                    // interface MTU was lowered, or a router reported a smaller path). The
                    // message is lost, as a HCA drops a packet above the path MTU; counted, and
                    // said (at growing intervals, not once per datagram).
                    let n = self
                        .ctx
                        .stats
                        .ud_send_mtu_drops
                        .fetch_add(1, Ordering::Relaxed)
                        + 1;
                    if n.is_power_of_two() {
                        tracing::warn!(
                            bytes = p.len(),
                            %to,
                            dropped = n,
                            interface = %self.ctx.link.interface,
                            "soft verbs: a UD datagram exceeds the path MTU (EMSGSIZE: the interface MTU shrank or a router reported a smaller path); dropped"
                        );
                    }
                    return true;
                }
                Err(e) => {
                    // Unreachable destination etc.: a datagram is just lost, as on the wire.
                    tracing::trace!(error = %e, "soft UD send failed");
                    return true;
                }
            }
        }
    }

    /// Sends the datagrams waiting for room in the socket (and those the fault model releases
    /// by `now`; read when not given and needed).
    pub(super) fn ud_transmit(&self, g: &mut QpInner, now: Option<Instant>) {
        if let Some(f) = g.ud_fault.as_mut() {
            let now = now.unwrap_or_else(Instant::now);
            while let Some(p) = f.poll_transmit(now) {
                g.ud_pending.push_back(p);
            }
        }
        let Some(sock) = g.udp.as_ref() else { return };
        while let Some((to, p)) = g.ud_pending.front() {
            if !self.ud_send_datagram(sock, g.ud_peer, to, p) {
                break;
            }
            g.ud_pending.pop_front();
        }
    }

    /// A progress poll's receive: while datagrams come one at a time (sparse traffic, a
    /// ping-pong), one `recv` per poll, since most polls find nothing and an empty `recv` costs
    /// less than an empty `recvmmsg`; once [`UD_BATCH_STREAK`] polls in a row found a datagram
    /// (a stream), [`Qp::ud_receive_all`]'s batches, until a batch finds at most one.
    pub(super) fn ud_receive(&self, g: &mut QpInner) {
        if g.ud_rx_streak >= UD_BATCH_STREAK {
            let n = self.ud_receive_all(g);
            if n <= 1 {
                g.ud_rx_streak = n as u32;
            }
            return;
        }
        if g.udp.is_none() {
            return;
        }
        let mut rx = self.take_rx(g);
        let Some(sock) = g.udp.as_ref() else { return };
        match rx.recv_one(sock) {
            Ok(_) => {
                self.ctx.stats.ud_recv_calls.fetch_add(1, Ordering::Relaxed);
                g.ud_rx_streak += 1;
                let (d, truncated) = rx.datagram(0);
                self.ud_deliver(g, d, truncated);
            }
            Err(ref e) if e.kind() == ErrorKind::WouldBlock => {
                self.ctx
                    .stats
                    .ud_empty_polls
                    .fetch_add(1, Ordering::Relaxed);
                g.ud_rx_streak = 0;
            }
            Err(e) => {
                // E.g. ECONNREFUSED from an earlier send to a closed port: not fatal for UD.
                tracing::trace!(error = %e, "soft UD recv");
            }
        }
        g.ud_rx = Some(rx);
    }

    fn take_rx(&self, g: &mut QpInner) -> rx::RxBatch {
        g.ud_rx
            .take()
            .unwrap_or_else(|| rx::RxBatch::for_mtu(UD_HEADER_LEN + self.ctx.ud_mtu as usize))
    }

    /// Receives every datagram queued on the QP's socket, a batch per system call
    /// (`recvmmsg`: one call returns what is queued, so a poll that finds one datagram costs
    /// one call, not a second one that says there is no more), and hands each to
    /// [`Qp::ud_deliver`] in arrival order. Returns how many datagrams were received.
    pub(super) fn ud_receive_all(&self, g: &mut QpInner) -> usize {
        if g.udp.is_none() {
            return 0;
        }
        let mut total = 0;
        let mut rx = self.take_rx(g);
        while let Some(sock) = g.udp.as_ref() {
            let n = match rx.recv(sock) {
                Ok(n) => n,
                Err(ref e) if e.kind() == ErrorKind::WouldBlock => {
                    self.ctx
                        .stats
                        .ud_empty_polls
                        .fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(ref e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // E.g. ECONNREFUSED from an earlier send to a closed port: not fatal for UD.
                    tracing::trace!(error = %e, "soft UD recvmmsg");
                    continue;
                }
            };
            self.ctx.stats.ud_recv_calls.fetch_add(1, Ordering::Relaxed);
            total += n;
            let mut stop = false;
            for i in 0..n {
                let (d, truncated) = rx.datagram(i);
                if !self.ud_deliver(g, d, truncated) {
                    stop = true;
                    break;
                }
            }
            if stop || n < rx.capacity() {
                // A short batch: the socket is drained (what arrives later waits for the next
                // poll).
                break;
            }
        }
        g.ud_rx = Some(rx);
        total
    }

    /// Delivers one received datagram (`truncated`: it did not fit an MTU-sized buffer) into
    /// the next receive WQE, or drops and counts it as a HCA would. False when the QP entered
    /// the error state (nothing more may be delivered).
    fn ud_deliver(&self, g: &mut QpInner, dgram: &mut [u8], truncated: bool) -> bool {
        let QpInner {
            rq,
            ud_rx_fault,
            state,
            ..
        } = g;
        let st = &self.ctx.stats;
        let n = dgram.len();
        let pkt = match UdPacket::new_checked(&mut dgram[..]) {
            Ok(p) => p,
            Err(_) => {
                st.malformed_drops.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        };
        let repr = match UdRepr::parse(&pkt) {
            Ok(r) => r,
            Err(_) => {
                st.malformed_drops.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        };
        if repr.job_tag != self.ctx.job_tag || repr.dst_qpn != self.qpn || repr.qkey != self.qkey {
            st.foreign_drops.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        if truncated || pkt.payload().len() > self.ctx.ud_mtu as usize {
            st.mtu_drops.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        if !matches!(*state, QpState::Rtr | QpState::Rts) {
            st.ud_no_wqe_drops.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let wqe = match &self.srq {
            Some(s) => s.take(),
            None => rq.pop_front(),
        };
        let Some(wqe) = wqe else {
            st.ud_no_wqe_drops.fetch_add(1, Ordering::Relaxed);
            return true;
        };
        let payload = &mut dgram[UD_HEADER_LEN..n];
        if let Some(f) = ud_rx_fault.as_mut() {
            f.maybe_corrupt(payload);
        }
        let (status, byte_len) = match self
            .ctx
            .mrs
            .scatter(self.pd, &wqe.sges, UD_GRH_LEN, payload)
        {
            Ok(()) => (WcStatus::Success, (payload.len() + UD_GRH_LEN) as u32),
            Err(s) => (s, 0),
        };
        let wc = Wc {
            wr_id: wqe.wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len,
            imm: (repr.opcode == UdOpcode::SendImm).then_some(repr.imm),
            qp_num: self.qpn,
            src_qp: repr.src_qpn,
        };
        if !self.recv_cq.push(wc) || status != WcStatus::Success {
            self.enter_error(g);
            return false;
        }
        true
    }
}
