//! Sans-IO reliable-connected transport of the soft provider.
//!
//! The byte stream below (TCP) is reliable and ordered, so this layer does what an RC HCA does
//! above its link: PSNs, cumulative ACKs, receiver-not-ready NAKs with go-back-N resends after
//! the RNR timer, remote access checks with NAKs, and completion generation. Memory, receive
//! WQEs and completion queues are reached through [`RcEnv`]; segments to write accumulate in
//! [`RcProto::tx`]; time is passed in.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::wire::{RcOpcode, RcRepr, Syndrome};
use crate::types::{SendOp, Sge, Wc, WcOpcode, WcStatus};

/// A posted receive work request.
#[derive(Debug, Clone)]
pub struct RecvWqe {
    /// Caller's id.
    pub wr_id: u64,
    /// Buffers.
    pub sges: Vec<Sge>,
}

/// What the RC machine needs from its QP.
pub trait RcEnv {
    /// Appends the bytes of local `sges` to `out`.
    fn gather(&mut self, sges: &[Sge], out: &mut Vec<u8>) -> Result<(), WcStatus>;
    /// Writes `data` into local `sges`.
    fn scatter(&mut self, sges: &[Sge], data: &[u8]) -> Result<(), WcStatus>;
    /// Next receive WQE (own RQ or SRQ).
    fn take_recv(&mut self) -> Option<RecvWqe>;
    /// Applies an RDMA WRITE to this side's memory; false on access violation.
    fn remote_write(&mut self, rkey: u32, addr: u64, data: &[u8]) -> bool;
    /// Serves an RDMA READ from this side's memory; false on access violation.
    fn remote_read(&mut self, rkey: u32, addr: u64, len: usize, out: &mut Vec<u8>) -> bool;
    /// Delivers a completion to the send (`true`) or receive CQ.
    fn complete(&mut self, wc: Wc, send_cq: bool);
    /// Fault hook on delivered payload (host-bus corruption model).
    fn corrupt(&mut self, payload: &mut [u8]);
}

fn psn_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[derive(Debug, Clone)]
struct Outstanding {
    psn: u32,
    wr_id: u64,
    signaled: bool,
    op: SendOp,
    sges: Vec<Sge>,
    inline_data: Option<Vec<u8>>,
    len: u32,
}

/// Counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RcStats {
    /// RNR NAKs sent (we had no receive WQE).
    pub rnr_naks_sent: u64,
    /// RNR NAKs received (peer had none).
    pub rnr_naks_received: u64,
    /// Segments resent after an RNR NAK.
    pub resent: u64,
    /// Segments dropped as out of sequence while waiting for a resend.
    pub out_of_sequence: u64,
    /// Remote access violations served.
    pub access_errors: u64,
}

/// The RC state machine of one QP.
#[derive(Debug)]
pub struct RcProto {
    next_psn: u32,
    outstanding: VecDeque<Outstanding>,
    resend_at: Option<(u32, Instant)>,
    rnr_retry: u8,
    rnr_count: u8,
    rnr_timer: Duration,
    expected_psn: u32,
    ack_pending: Option<u32>,
    scratch: Vec<u8>,
    /// Encoded segments waiting to be written to the stream.
    pub tx: Vec<u8>,
    /// Set when the QP must enter the error state (completions already generated).
    pub failed: bool,
    /// Counters.
    pub stats: RcStats,
    qpn: u32,
}

impl RcProto {
    /// New machine for QP `qpn`.
    pub fn new(qpn: u32, rnr_retry: u8, rnr_timer: Duration) -> Self {
        Self {
            next_psn: 0,
            outstanding: VecDeque::new(),
            resend_at: None,
            rnr_retry,
            rnr_count: 0,
            rnr_timer,
            expected_psn: 0,
            ack_pending: None,
            scratch: Vec::new(),
            tx: Vec::new(),
            failed: false,
            stats: RcStats::default(),
            qpn,
        }
    }

    /// Send WRs posted and not yet completed (they occupy send queue slots).
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    fn wc(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode, byte_len: u32) -> Wc {
        Wc {
            wr_id,
            status,
            opcode,
            byte_len,
            imm: None,
            qp_num: self.qpn,
            src_qp: 0,
        }
    }

    /// Posts a send WR (SEND, SEND with immediate, RDMA WRITE, RDMA READ). `inline_data` holds
    /// the bytes already copied for inline sends. Returns an error status when the local
    /// gather fails (the caller moves the QP to error).
    pub fn post(
        &mut self,
        env: &mut dyn RcEnv,
        wr_id: u64,
        signaled: bool,
        op: SendOp,
        sges: &[Sge],
        inline_data: Option<Vec<u8>>,
    ) -> Result<(), WcStatus> {
        let len: u32 = match &inline_data {
            Some(d) => d.len() as u32,
            None => sges.iter().map(|s| s.length).sum(),
        };
        let o = Outstanding {
            psn: self.next_psn,
            wr_id,
            signaled,
            op,
            sges: sges.to_vec(),
            inline_data,
            len,
        };
        self.next_psn = self.next_psn.wrapping_add(1);
        // Keep order: while a resend is pending, new WRs wait to go out with it.
        if self.resend_at.is_none() {
            if let Err(st) = self.encode(env, &o) {
                let wc = self.wc(wr_id, st, opcode_of(op), 0);
                env.complete(wc, true);
                self.fail(env);
                return Err(st);
            }
        }
        self.outstanding.push_back(o);
        Ok(())
    }

    fn encode(&mut self, env: &mut dyn RcEnv, o: &Outstanding) -> Result<(), WcStatus> {
        let mut r = RcRepr::new(RcOpcode::Send, o.psn);
        let with_data = match o.op {
            SendOp::Send => true,
            SendOp::SendWithImm(imm) => {
                r.opcode = RcOpcode::SendImm;
                r.imm = imm;
                true
            }
            SendOp::RdmaWrite { remote_addr, rkey } => {
                r.opcode = RcOpcode::Write;
                r.remote_addr = remote_addr;
                r.rkey = rkey;
                true
            }
            SendOp::RdmaRead { remote_addr, rkey } => {
                r.opcode = RcOpcode::ReadReq;
                r.remote_addr = remote_addr;
                r.rkey = rkey;
                r.dma_len = o.len;
                false
            }
        };
        // Header first, then the payload gathered straight behind it (one copy, no scratch).
        let start = self.tx.len();
        r.payload_len = if with_data { o.len } else { 0 };
        r.emit(&[], &mut self.tx);
        if with_data {
            let res = match &o.inline_data {
                Some(d) => {
                    self.tx.extend_from_slice(d);
                    Ok(())
                }
                None => env.gather(&o.sges, &mut self.tx),
            };
            if let Err(e) = res {
                self.tx.truncate(start);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Flushes every outstanding WR with [`WcStatus::WrFlushError`] and marks the machine failed.
    pub fn fail(&mut self, env: &mut dyn RcEnv) {
        self.failed = true;
        self.resend_at = None;
        while let Some(o) = self.outstanding.pop_front() {
            let wc = self.wc(o.wr_id, WcStatus::WrFlushError, opcode_of(o.op), 0);
            env.complete(wc, true);
        }
    }

    /// Fails the oldest outstanding WR with `status`, flushes the rest.
    pub fn fail_with(&mut self, env: &mut dyn RcEnv, status: WcStatus) {
        self.fail_front(env, status)
    }

    fn fail_front(&mut self, env: &mut dyn RcEnv, status: WcStatus) {
        if let Some(o) = self.outstanding.pop_front() {
            let wc = self.wc(o.wr_id, status, opcode_of(o.op), 0);
            env.complete(wc, true);
        }
        self.fail(env);
    }

    /// Completes outstanding non-read WRs with PSN <= `psn`.
    fn ack_upto(&mut self, env: &mut dyn RcEnv, psn: u32) {
        while let Some(o) = self.outstanding.front() {
            if psn_lt(psn, o.psn) || matches!(o.op, SendOp::RdmaRead { .. }) && o.psn == psn {
                break;
            }
            let o = self.outstanding.pop_front().expect("front exists");
            self.rnr_count = 0;
            if o.signaled {
                let wc = self.wc(o.wr_id, WcStatus::Success, opcode_of(o.op), o.len);
                env.complete(wc, true);
            }
        }
    }

    /// Handles one segment received from the peer.
    pub fn handle_segment(
        &mut self,
        now: Instant,
        env: &mut dyn RcEnv,
        r: RcRepr,
        payload: &mut [u8],
    ) {
        if self.failed {
            return;
        }
        match r.opcode {
            RcOpcode::Ack => self.ack_upto(env, r.psn),
            RcOpcode::ReadResp => {
                self.ack_upto(env, r.psn.wrapping_sub(1));
                let Some(o) = self.outstanding.front() else {
                    return;
                };
                if o.psn != r.psn {
                    return; // stale duplicate response
                }
                let o = self.outstanding.pop_front().expect("front exists");
                self.rnr_count = 0;
                env.corrupt(payload);
                match env.scatter(&o.sges, payload) {
                    Ok(()) => {
                        if o.signaled {
                            let wc = self.wc(o.wr_id, WcStatus::Success, WcOpcode::RdmaRead, o.len);
                            env.complete(wc, true);
                        }
                    }
                    Err(st) => {
                        let wc = self.wc(o.wr_id, st, WcOpcode::RdmaRead, 0);
                        env.complete(wc, true);
                        self.fail(env);
                    }
                }
            }
            RcOpcode::Nak => {
                self.ack_upto(env, r.psn.wrapping_sub(1));
                if self.outstanding.front().map(|o| o.psn) != Some(r.psn) {
                    return;
                }
                match Syndrome::from_u8(r.syndrome) {
                    Syndrome::Rnr => {
                        self.stats.rnr_naks_received += 1;
                        if self.rnr_retry != 7 && self.rnr_count >= self.rnr_retry {
                            self.fail_front(env, WcStatus::RnrRetryExceeded);
                            return;
                        }
                        self.rnr_count = self.rnr_count.saturating_add(1);
                        // Go-back-N: everything from the NAKed PSN is resent after the timer.
                        self.resend_at = Some((r.psn, now + self.rnr_timer));
                    }
                    Syndrome::RemoteAccess => self.fail_front(env, WcStatus::RemoteAccessError),
                    Syndrome::InvalidRequest => {
                        self.fail_front(env, WcStatus::RemoteInvalidRequest)
                    }
                }
            }
            RcOpcode::Send | RcOpcode::SendImm | RcOpcode::Write | RcOpcode::ReadReq => {
                self.handle_request(env, r, payload)
            }
        }
    }

    fn nak(&mut self, psn: u32, syn: Syndrome) {
        let mut r = RcRepr::new(RcOpcode::Nak, psn);
        r.syndrome = syn as u8;
        r.emit(&[], &mut self.tx);
    }

    fn handle_request(&mut self, env: &mut dyn RcEnv, r: RcRepr, payload: &mut [u8]) {
        if psn_lt(r.psn, self.expected_psn) {
            // A duplicate: already executed; re-acknowledge (reads are re-executed).
            if r.opcode == RcOpcode::ReadReq {
                self.serve_read(env, r);
            } else {
                self.ack_pending = Some(self.expected_psn.wrapping_sub(1));
            }
            return;
        }
        if r.psn != self.expected_psn {
            // After a NAK the requester goes back; drop until the NAKed PSN comes again.
            self.stats.out_of_sequence += 1;
            return;
        }
        match r.opcode {
            RcOpcode::Send | RcOpcode::SendImm => {
                let Some(wqe) = env.take_recv() else {
                    self.stats.rnr_naks_sent += 1;
                    self.flush_ack();
                    self.nak(r.psn, Syndrome::Rnr);
                    return;
                };
                env.corrupt(payload);
                match env.scatter(&wqe.sges, payload) {
                    Ok(()) => {
                        let mut wc = self.wc(
                            wqe.wr_id,
                            WcStatus::Success,
                            WcOpcode::Recv,
                            payload.len() as u32,
                        );
                        if r.opcode == RcOpcode::SendImm {
                            wc.imm = Some(r.imm);
                        }
                        env.complete(wc, false);
                        self.expected_psn = self.expected_psn.wrapping_add(1);
                        self.ack_pending = Some(r.psn);
                    }
                    Err(st) => {
                        let wc = self.wc(wqe.wr_id, st, WcOpcode::Recv, 0);
                        env.complete(wc, false);
                        self.flush_ack();
                        self.nak(r.psn, Syndrome::InvalidRequest);
                        self.fail(env);
                    }
                }
            }
            RcOpcode::Write => {
                env.corrupt(payload);
                if env.remote_write(r.rkey, r.remote_addr, payload) {
                    self.expected_psn = self.expected_psn.wrapping_add(1);
                    self.ack_pending = Some(r.psn);
                } else {
                    self.stats.access_errors += 1;
                    self.flush_ack();
                    self.nak(r.psn, Syndrome::RemoteAccess);
                    self.fail(env);
                }
            }
            RcOpcode::ReadReq => {
                self.expected_psn = self.expected_psn.wrapping_add(1);
                self.serve_read(env, r);
            }
            _ => {}
        }
    }

    fn serve_read(&mut self, env: &mut dyn RcEnv, r: RcRepr) {
        let mut data = std::mem::take(&mut self.scratch);
        data.clear();
        if env.remote_read(r.rkey, r.remote_addr, r.dma_len as usize, &mut data) {
            self.flush_ack();
            let mut resp = RcRepr::new(RcOpcode::ReadResp, r.psn);
            resp.payload_len = data.len() as u32;
            resp.emit(&data, &mut self.tx);
        } else {
            self.stats.access_errors += 1;
            self.flush_ack();
            self.nak(r.psn, Syndrome::RemoteAccess);
            self.fail(env);
        }
        self.scratch = data;
    }

    /// Emits the coalesced ACK, if one is due (call after a batch of segments).
    pub fn flush_ack(&mut self) {
        if let Some(psn) = self.ack_pending.take() {
            RcRepr::new(RcOpcode::Ack, psn).emit(&[], &mut self.tx);
        }
    }

    /// Drives timers (RNR resend).
    pub fn handle_timeout(&mut self, now: Instant, env: &mut dyn RcEnv) {
        let Some((from, due)) = self.resend_at else {
            return;
        };
        if now < due || self.failed {
            return;
        }
        self.resend_at = None;
        let todo: Vec<Outstanding> = self
            .outstanding
            .iter()
            .filter(|o| !psn_lt(o.psn, from))
            .cloned()
            .collect();
        for o in todo {
            self.stats.resent += 1;
            if let Err(st) = self.encode(env, &o) {
                // Memory deregistered meanwhile: fail like a local protection error.
                self.fail_front(env, st);
                return;
            }
        }
    }

    /// When [`RcProto::handle_timeout`] wants to run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.resend_at.map(|(_, t)| t)
    }
}

fn opcode_of(op: SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithImm(_) => WcOpcode::Send,
        SendOp::RdmaWrite { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soft::wire::RcSegment;

    /// A fake QP: memory is one flat array addressed from 0, key 1 grants everything.
    #[derive(Default)]
    struct Env {
        mem: Vec<u8>,
        recvs: VecDeque<RecvWqe>,
        send_wcs: Vec<Wc>,
        recv_wcs: Vec<Wc>,
    }

    impl RcEnv for Env {
        fn gather(&mut self, sges: &[Sge], out: &mut Vec<u8>) -> Result<(), WcStatus> {
            for s in sges {
                let a = s.addr as usize;
                out.extend_from_slice(
                    self.mem
                        .get(a..a + s.length as usize)
                        .ok_or(WcStatus::LocalProtectionError)?,
                );
            }
            Ok(())
        }
        fn scatter(&mut self, sges: &[Sge], data: &[u8]) -> Result<(), WcStatus> {
            let s = sges[0];
            if data.len() > s.length as usize {
                return Err(WcStatus::LocalLengthError);
            }
            self.mem[s.addr as usize..s.addr as usize + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn take_recv(&mut self) -> Option<RecvWqe> {
            self.recvs.pop_front()
        }
        fn remote_write(&mut self, rkey: u32, addr: u64, data: &[u8]) -> bool {
            let a = addr as usize;
            if rkey != 1 || a + data.len() > self.mem.len() {
                return false;
            }
            self.mem[a..a + data.len()].copy_from_slice(data);
            true
        }
        fn remote_read(&mut self, rkey: u32, addr: u64, len: usize, out: &mut Vec<u8>) -> bool {
            let a = addr as usize;
            if rkey != 1 || a + len > self.mem.len() {
                return false;
            }
            out.extend_from_slice(&self.mem[a..a + len]);
            true
        }
        fn complete(&mut self, wc: Wc, send_cq: bool) {
            if send_cq {
                self.send_wcs.push(wc)
            } else {
                self.recv_wcs.push(wc)
            }
        }
        fn corrupt(&mut self, _: &mut [u8]) {}
    }

    /// Moves all of `from`'s pending bytes into `to`.
    fn deliver(now: Instant, from: &mut RcProto, to: &mut RcProto, env: &mut Env) {
        let bytes = std::mem::take(&mut from.tx);
        let mut pos = 0;
        while pos < bytes.len() {
            let seg = RcSegment::new_checked(&bytes[pos..]).unwrap();
            let r = seg.repr();
            let mut p = seg.payload().to_vec();
            pos += seg.total_len();
            to.handle_segment(now, env, r, &mut p);
        }
        to.flush_ack();
    }

    fn sge(addr: u64, len: u32) -> Sge {
        Sge {
            addr,
            length: len,
            lkey: 1,
        }
    }

    #[test]
    fn rnr_then_resend_delivers_in_order() {
        let t0 = Instant::now();
        let timer = Duration::from_millis(1);
        let (mut a, mut b) = (RcProto::new(1, 7, timer), RcProto::new(2, 7, timer));
        let mut ea = Env {
            mem: (0..64).collect(),
            ..Default::default()
        };
        let mut eb = Env {
            mem: vec![0; 64],
            ..Default::default()
        };
        a.post(&mut ea, 10, true, SendOp::Send, &[sge(0, 4)], None)
            .unwrap();
        a.post(&mut ea, 11, true, SendOp::Send, &[sge(4, 4)], None)
            .unwrap();
        deliver(t0, &mut a, &mut b, &mut eb); // no receive posted: RNR NAK for psn 0
        assert_eq!(b.stats.rnr_naks_sent, 1);
        assert_eq!(b.stats.out_of_sequence, 1);
        deliver(t0, &mut b, &mut a, &mut ea);
        assert!(ea.send_wcs.is_empty());
        eb.recvs.push_back(RecvWqe {
            wr_id: 20,
            sges: vec![sge(0, 8)],
        });
        eb.recvs.push_back(RecvWqe {
            wr_id: 21,
            sges: vec![sge(8, 8)],
        });
        a.handle_timeout(t0, &mut ea);
        assert!(a.tx.is_empty(), "no resend before the RNR timer");
        a.handle_timeout(t0 + timer, &mut ea);
        deliver(t0 + timer, &mut a, &mut b, &mut eb);
        deliver(t0 + timer, &mut b, &mut a, &mut ea);
        assert_eq!(
            eb.recv_wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            vec![20, 21]
        );
        assert_eq!(&eb.mem[0..4], &[0, 1, 2, 3]);
        assert_eq!(&eb.mem[8..12], &[4, 5, 6, 7]);
        assert_eq!(
            ea.send_wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            vec![10, 11]
        );
        assert_eq!(a.outstanding(), 0);
    }

    #[test]
    fn rnr_retry_exhaustion_fails() {
        let t0 = Instant::now();
        let (mut a, mut b) = (
            RcProto::new(1, 1, Duration::ZERO),
            RcProto::new(2, 7, Duration::ZERO),
        );
        let mut ea = Env {
            mem: vec![1; 8],
            ..Default::default()
        };
        let mut eb = Env::default();
        a.post(&mut ea, 5, true, SendOp::Send, &[sge(0, 4)], None)
            .unwrap();
        a.post(&mut ea, 6, false, SendOp::Send, &[sge(0, 4)], None)
            .unwrap();
        for _ in 0..3 {
            deliver(t0, &mut a, &mut b, &mut eb);
            deliver(t0, &mut b, &mut a, &mut ea);
            a.handle_timeout(t0, &mut ea);
        }
        assert!(a.failed);
        assert_eq!(ea.send_wcs[0].status, WcStatus::RnrRetryExceeded);
        assert_eq!(ea.send_wcs[1].status, WcStatus::WrFlushError);
    }

    #[test]
    fn write_read_and_bad_rkey() {
        let t0 = Instant::now();
        let (mut a, mut b) = (
            RcProto::new(1, 7, Duration::ZERO),
            RcProto::new(2, 7, Duration::ZERO),
        );
        let mut ea = Env {
            mem: vec![7; 16],
            ..Default::default()
        };
        let mut eb = Env {
            mem: vec![0; 16],
            ..Default::default()
        };
        a.post(
            &mut ea,
            1,
            true,
            SendOp::RdmaWrite {
                remote_addr: 4,
                rkey: 1,
            },
            &[sge(0, 4)],
            None,
        )
        .unwrap();
        a.post(
            &mut ea,
            2,
            true,
            SendOp::RdmaRead {
                remote_addr: 2,
                rkey: 1,
            },
            &[sge(8, 4)],
            None,
        )
        .unwrap();
        deliver(t0, &mut a, &mut b, &mut eb);
        deliver(t0, &mut b, &mut a, &mut ea);
        assert_eq!(&eb.mem[4..8], &[7; 4]);
        assert_eq!(&ea.mem[8..12], &[0, 0, 7, 7]);
        assert_eq!(ea.send_wcs.len(), 2);
        assert!(ea.send_wcs.iter().all(|w| w.is_ok()));
        a.post(
            &mut ea,
            3,
            true,
            SendOp::RdmaWrite {
                remote_addr: 0,
                rkey: 99,
            },
            &[sge(0, 4)],
            None,
        )
        .unwrap();
        deliver(t0, &mut a, &mut b, &mut eb);
        deliver(t0, &mut b, &mut a, &mut ea);
        assert_eq!(ea.send_wcs[2].status, WcStatus::RemoteAccessError);
        assert!(a.failed && b.failed);
    }
}
