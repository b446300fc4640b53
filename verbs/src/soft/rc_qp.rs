//! The RC path of a soft QP: the TCP connection under [`super::rc::RcProto`].

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::qp::QpInner;
use super::rc::{RcEnv, RcProto, RecvWqe};
use super::wire::{self, SoftAddr};
use super::{Qp, MAX_MSG, MAX_SEGMENT};

/// First size of a connection's receive buffer. Small messages never need more, and a QP that
/// carries large ones grows it once to fit a segment. A large initial buffer cost every QP its
/// size in resident memory whenever the allocator served it from reused heap (a zeroed
/// allocation is then written, not mapped lazily): 256 KiB per QP, so 256 KiB x 28 peers x 2
/// receive queues = 14 MiB per process, where the whole of Open MPI's tcp rank takes 14.8 MiB
/// at 32 ranks (bench/RESULTS.md, "allconn: VmHWM", from `rmca-bench allconn --mem`).
pub(super) const RC_RX_INITIAL: usize = 16 * 1024;
use crate::error::{Error, Result};
use crate::fault::FaultInjector;
use crate::types::*;

/// Segment batches held back by the RC delay fault, with their release times (kept in order).
type DelayQueue = VecDeque<(Instant, Vec<u8>)>;

pub(super) struct RcConn {
    pub(super) proto: RcProto,
    pub(super) remote: SoftAddr,
    pub(super) active: bool,
    pub(super) stream: Option<TcpStream>,
    pub(super) tx_off: usize,
    /// Bytes read from the stream and not yet parsed ([`RC_RX_INITIAL`] at first, grown to
    /// the next power of two of a segment that does not fit).
    pub(super) rx: Vec<u8>,
    pub(super) rx_start: usize,
    pub(super) rx_end: usize,
    pub(super) rx_fault: Option<FaultInjector<()>>,
    pub(super) delay: Option<(FaultInjector<()>, DelayQueue)>,
}

/// The RC machine's view of its QP (split borrows of the locked QP state).
pub(super) struct Env<'a> {
    pub(super) qp: &'a Qp,
    pub(super) rq: &'a mut VecDeque<RecvWqe>,
    pub(super) fault: Option<&'a mut FaultInjector<()>>,
    pub(super) overflow: bool,
}

impl RcEnv for Env<'_> {
    fn gather(&mut self, sges: &[Sge], out: &mut Vec<u8>) -> std::result::Result<(), WcStatus> {
        self.qp.ctx.mrs.gather(self.qp.pd, sges, out)
    }
    fn scatter(&mut self, sges: &[Sge], data: &[u8]) -> std::result::Result<(), WcStatus> {
        self.qp.ctx.mrs.scatter(self.qp.pd, sges, 0, data)
    }
    fn take_recv(&mut self) -> Option<RecvWqe> {
        match &self.qp.srq {
            Some(s) => s.take(),
            None => self.rq.pop_front(),
        }
    }
    fn remote_write(&mut self, rkey: u32, addr: u64, data: &[u8]) -> bool {
        self.qp.ctx.mrs.remote_write(self.qp.pd, rkey, addr, data)
    }
    fn remote_read(&mut self, rkey: u32, addr: u64, len: usize, out: &mut Vec<u8>) -> bool {
        self.qp
            .ctx
            .mrs
            .remote_read(self.qp.pd, rkey, addr, len, out)
    }
    fn complete(&mut self, wc: Wc, send_cq: bool) {
        let cq = if send_cq {
            &self.qp.send_cq
        } else {
            &self.qp.recv_cq
        };
        if !cq.push(wc) {
            self.overflow = true;
        }
    }
    fn corrupt(&mut self, payload: &mut [u8]) {
        if let Some(f) = self.fault.as_deref_mut() {
            f.maybe_corrupt(payload);
        }
    }
}

impl Qp {
    pub(super) fn rc_send(&self, g: &mut QpInner, wr: &SendWr<'_>) -> Result<()> {
        if wr.ud.is_some() {
            return Err(Error::InvalidWr("UD destination on an RC QP"));
        }
        let len: u64 = wr.sges.iter().map(|s| u64::from(s.length)).sum();
        if len > MAX_MSG {
            return Err(Error::InvalidWr("RC message larger than max_msg_size"));
        }
        let inline = self.inline_copy(wr)?;
        let QpInner { rq, rc, .. } = g;
        let c = rc.as_mut().expect("RC QP in RTS has a connection");
        if c.proto.outstanding() >= self.caps.max_send_wr as usize {
            return Err(Error::QueueFull {
                depth: self.caps.max_send_wr,
            });
        }
        let mut env = Env {
            qp: self,
            rq,
            fault: None,
            overflow: false,
        };
        // A deferred ACK rides in the same write as this request.
        c.proto.flush_ack();
        let r = c
            .proto
            .post(&mut env, wr.wr_id, wr.signaled, wr.op, wr.sges, inline);
        let overflow = env.overflow;
        if r.is_ok() {
            self.rc_flush(c, Instant::now());
        }
        if r.is_err() || overflow || c.proto.failed {
            self.enter_error(g);
        }
        Ok(())
    }

    /// Writes pending bytes; returns false if the connection broke.
    fn rc_flush(&self, c: &mut RcConn, now: Instant) -> bool {
        if let Some((inj, q)) = c.delay.as_mut() {
            // Delay whole batches in order (RC never reorders).
            if !c.proto.tx.is_empty() {
                let mut due = now;
                if inj.maybe_delay() {
                    due = now + inj.config().delay;
                }
                if let Some((last, _)) = q.back() {
                    due = due.max(*last);
                }
                q.push_back((due, std::mem::take(&mut c.proto.tx)));
            }
            while q.front().is_some_and(|(d, _)| *d <= now) {
                let (_, b) = q.pop_front().expect("front");
                c.proto.tx.extend_from_slice(&b);
                if q.is_empty() {
                    break;
                }
            }
            if !q.is_empty() && c.proto.tx.is_empty() {
                return true;
            }
        }
        let Some(s) = c.stream.as_mut() else {
            return true;
        };
        while c.tx_off < c.proto.tx.len() {
            match s.write(&c.proto.tx[c.tx_off..]) {
                Ok(0) => return false,
                Ok(n) => c.tx_off += n,
                Err(ref e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(ref e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        if c.tx_off == c.proto.tx.len() {
            c.proto.tx.clear();
            c.tx_off = 0;
        }
        true
    }

    pub(super) fn rc_progress(&self, g: &mut QpInner, now: Instant, defer_ack: bool) {
        if !matches!(g.state, QpState::Rtr | QpState::Rts) {
            return;
        }
        let QpInner { rq, rc, .. } = g;
        let Some(c) = rc.as_mut() else { return };
        if c.stream.is_none() && !c.active {
            match self
                .ctx
                .take_pending(self.qpn, c.remote.qpn, c.remote.sock.port())
            {
                Some(s) => {
                    self.fd.store(s.as_raw_fd(), Ordering::Relaxed);
                    c.stream = Some(s);
                }
                // Not accepted yet: the agent accepts and files it within a poll period.
                None => return,
            }
        }
        let mut broken = false;
        let mut malformed = false;
        // An ACK deferred by the previous call goes out now at the latest.
        c.proto.flush_ack();
        let mut env = Env {
            qp: self,
            rq,
            fault: c.rx_fault.as_mut(),
            overflow: false,
        };
        // Read and parse until the socket is drained; the buffer is allocated once and grows
        // only when one segment is larger than it.
        loop {
            let mut full = false;
            if let Some(s) = c.stream.as_mut() {
                loop {
                    if c.rx_end == c.rx.len() {
                        // Compact only when out of room: a large segment arriving in pieces
                        // is not moved again and again.
                        if c.rx_start > 0 {
                            c.rx.copy_within(c.rx_start..c.rx_end, 0);
                            c.rx_end -= c.rx_start;
                            c.rx_start = 0;
                            continue;
                        }
                        full = true;
                        break;
                    }
                    match s.read(&mut c.rx[c.rx_end..]) {
                        Ok(0) => {
                            broken = true;
                            break;
                        }
                        Ok(n) => c.rx_end += n,
                        Err(ref e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(ref e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(_) => {
                            broken = true;
                            break;
                        }
                    }
                }
            }
            let mut pos = c.rx_start;
            let mut need = 0;
            while pos < c.rx_end {
                match wire::RcSegment::new_checked(&mut c.rx[pos..c.rx_end]) {
                    Ok(mut seg) => {
                        let r = seg.repr();
                        let total = seg.total_len();
                        c.proto.handle_segment(now, &mut env, r, seg.payload_mut());
                        pos += total;
                    }
                    Err(wire::WireError::Truncated) => {
                        need = wire::RcSegment::<&[u8]>::announced_len(&c.rx[pos..c.rx_end]);
                        break;
                    }
                    Err(_) => {
                        malformed = true;
                        break;
                    }
                }
            }
            c.rx_start = pos;
            if pos == c.rx_end {
                c.rx_start = 0;
                c.rx_end = 0;
            }
            if need > MAX_SEGMENT {
                malformed = true;
            }
            if !full || broken || malformed {
                break;
            }
            if c.rx_start == 0 && need > c.rx.len() {
                c.rx.resize(need.next_power_of_two(), 0);
            }
        }
        if !defer_ack {
            c.proto.flush_ack();
        }
        c.proto.handle_timeout(now, &mut env);
        let overflow = env.overflow;
        if !self.rc_flush(c, now) {
            broken = true;
        }
        if malformed {
            self.ctx
                .stats
                .malformed_drops
                .fetch_add(1, Ordering::Relaxed);
        }
        if c.proto.failed || overflow {
            self.enter_error(g);
        } else if broken || malformed {
            tracing::debug!(qpn = self.qpn, "soft RC connection lost");
            let QpInner { rq, rc, .. } = g;
            if let Some(c) = rc.as_mut() {
                let mut env = Env {
                    qp: self,
                    rq,
                    fault: None,
                    overflow: false,
                };
                // Like transport retries running out on a HCA.
                if c.proto.outstanding() > 0 {
                    c.proto.fail_with(&mut env, WcStatus::RetryExceeded);
                }
            }
            self.enter_error(g);
            self.ctx.event(AsyncEvent::QpFatal { qpn: self.qpn });
        }
    }
}
