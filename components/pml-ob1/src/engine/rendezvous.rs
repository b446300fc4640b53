//! The rendezvous protocols: a matched rendezvous, the receiver's copy pipeline (ACK, FRAGs)
//! and reads of the sender's buffer (RGET, FIN), and the sender's side of both.

use std::time::Instant;

use rmca_framework::bml::{Bml, Route};
use rmca_framework::btl::{
    BtlFlags, CompletionToken, MemAccess, RemoteSegment, SendError, SendHint,
};
use rmca_framework::matching::Envelope;
use rmca_framework::pml::{RequestId, StatusError};
use rmca_framework::rank::Rank;

use super::requests::{GetState, Phase};
use super::{frag_payload, frag_target, osc, Core, FragReject, TAG};
use crate::bulk::Bulk;
use crate::hdr::{self, Repr, RgetKey, RndvRepr};
use crate::sched;

/// The next piece of an RDMA pipeline (a receive's RGET reads, osc-rdma's puts and gets):
/// `left` bytes still to move, `in_flight` pieces outstanding of at most `depth`, each at
/// most `frag` bytes (the BTL's `rdma_pipeline_frag_size`). `None` when nothing is left or
/// the pipeline is full: the rest waits for a completion, so one large transfer cannot
/// fill a BTL's queues.
pub(super) fn rdma_piece(
    left: usize,
    in_flight: usize,
    depth: usize,
    frag: usize,
) -> Option<usize> {
    (left > 0 && in_flight < depth).then(|| left.min(frag.max(1)))
}

impl Core {
    /// A rendezvous matched receive `id`: take the first bytes, then read the rest (RGET) or
    /// ask for it (ACK).
    pub(super) fn start_rndv(
        &mut self,
        id: RequestId,
        env: Envelope,
        info: RndvRepr,
        data: &[u8],
        rget: Option<(u64, Vec<RgetKey>)>,
    ) {
        let peer = env.source;
        let msg_len = usize::try_from(info.msg_len).unwrap_or(usize::MAX);
        let Some(r) = self.reqs.get_mut(id) else {
            return;
        };
        let (wanted, first) = r.take_first(peer, env.tag, msg_len, data);
        let pattern = r.pattern;
        if first == wanted {
            let ctrl = match rget {
                Some(_) => Repr::Fin {
                    src_req: info.src_req,
                    failed: false,
                },
                None => Repr::Ack {
                    src_req: info.src_req,
                    dst_req: id.0,
                    wanted: first as u64,
                },
            };
            self.queue_ctrl(peer, ctrl);
            self.finish_recv(id);
            return;
        }
        // Pair each of our GET routes to the peer with an unused key of the same BTL component.
        let mut usable: Vec<(Route, Vec<u8>)> = Vec::new();
        if let Some((_, keys)) = rget.as_ref().filter(|_| self.cfg.use_rget) {
            let mut used = vec![false; keys.len()];
            for route in &self.routes[peer as usize].rdma {
                if !self.attrs[route.btl].flags.contains(BtlFlags::GET) {
                    continue;
                }
                let name = &self.names[route.btl];
                if let Some(k) = (0..keys.len()).find(|&k| !used[k] && &keys[k].btl == name) {
                    used[k] = true;
                    usable.push((*route, keys[k].key.clone()));
                }
            }
        }
        // A read we can take: measure it against the copy pipeline, for the BTL that would
        // read, and take the faster.
        let bulk_len = wanted - first;
        let how = match usable.first() {
            Some((route, _)) if self.cfg.adaptive_bulk => {
                let btl = route.btl;
                if self.bulk.len() <= btl {
                    self.bulk.resize_with(btl + 1, Default::default);
                }
                Some((self.bulk[btl].chooser.choose(bulk_len), btl))
            }
            _ => None,
        };
        let started = how.map(|(h, btl)| (h, Instant::now(), bulk_len, btl));
        match how {
            Some((Bulk::Get, _)) => self.stats.bulk_get += 1,
            Some((Bulk::Copy, _)) => self.stats.bulk_copy += 1,
            None => {}
        }
        if let Some((addr, _)) = rget.filter(|_| !matches!(how, Some((Bulk::Copy, _)))) {
            if !usable.is_empty() {
                let list: Vec<Route> = usable.iter().map(|u| u.0).collect();
                let policy = self.cfg.scheduling.for_pattern(pattern);
                let chosen = sched::choose(
                    policy,
                    &list,
                    wanted,
                    self.cfg.stripe_threshold,
                    self.cfg.max_rdma_per_request,
                    &mut self.cursor[peer as usize],
                );
                let keys: Vec<Vec<u8>> = chosen
                    .iter()
                    .map(|c| {
                        usable
                            .iter()
                            .find(|u| u.0.btl == c.btl)
                            .map(|u| u.1.clone())
                            .unwrap_or_default()
                    })
                    .collect();
                let segs = sched::split(&chosen, first, wanted);
                if let Some(r) = self.reqs.get_mut(id) {
                    r.phase = Phase::RecvGet;
                    r.cold().bulk = started;
                    r.cold().get = Some(GetState {
                        src_req: info.src_req,
                        addr,
                        keys,
                        segs,
                        wanted,
                        outstanding: 0,
                        failed: false,
                    });
                }
                self.activate(id);
                return;
            }
        }
        if let Some(r) = self.reqs.get_mut(id) {
            r.phase = Phase::RecvFrags;
            r.count = first;
            r.wanted = wanted;
            // A sample of the copy pipeline only if it was chosen over an offered read.
            if let Some(b @ (Bulk::Copy, _, _, _)) = started {
                r.cold().bulk = Some(b);
            }
        }
        self.queue_ctrl(
            peer,
            Repr::Ack {
                src_req: info.src_req,
                dst_req: id.0,
                wanted: wanted as u64,
            },
        );
    }

    /// Complete a receive whose bytes all arrived.
    pub(super) fn finish_recv(&mut self, id: RequestId) {
        let Some(r) = self.reqs.get_mut(id) else {
            return;
        };
        if let Some((how, start, len, btl)) = r.cold.as_mut().and_then(|c| c.bulk.take()) {
            let now = Instant::now();
            let b = &mut self.bulk[btl];
            let from = b.free_at.map_or(start, |f| f.max(start));
            let ns = u64::try_from(now.duration_since(from).as_nanos()).unwrap_or(u64::MAX);
            b.chooser.record(len, how, ns);
            b.free_at = Some(now);
        }
        let received = r.msg_len.min(r.buf.len());
        let error = (r.msg_len > received).then_some(StatusError::Truncated {
            message_len: r.msg_len,
            received,
        });
        let (peer, tag) = (r.peer, r.tag);
        self.finish(id, peer, tag, received, error);
    }

    pub(super) fn on_frag(&mut self, peer: Rank, dst_req: u64, offset: u64, data: &[u8]) {
        let (r, at) = match frag_target(&mut self.reqs, peer, dst_req, offset, data.len()) {
            Ok(t) => t,
            Err(FragReject::Stray) => {
                self.stats.dropped_stray += 1;
                return;
            }
            Err(FragReject::Malformed) => {
                self.stats.dropped_malformed += 1;
                return;
            }
        };
        r.buf.write_at(at, data);
        r.count += data.len();
        self.stats.frags_recv += 1;
        // (A duplicate FRAG from a broken peer must not complete a buffer a BTL is still
        // writing into.)
        if r.count >= r.wanted && r.placing == 0 {
            self.finish_recv(RequestId(dst_req));
        }
    }

    pub(super) fn on_rdma_complete(
        &mut self,
        token: CompletionToken,
        result: Result<(), SendError>,
    ) {
        if token.0 & osc::TOKEN_BIT != 0 {
            self.osc.complete(token.0, result);
            return;
        }
        let id = RequestId(token.0);
        let Some(r) = self.reqs.get_mut(id) else {
            self.stats.dropped_stray += 1;
            return;
        };
        if r.phase != Phase::RecvGet {
            return;
        }
        let Some(g) = r.cold.as_mut().and_then(|c| c.get.as_mut()) else {
            return;
        };
        g.outstanding = g.outstanding.saturating_sub(1);
        if let Err(e) = result {
            tracing::debug!(
                ?e,
                "ob1: RDMA get failed, falling back to the copy pipeline"
            );
            g.failed = true;
            self.stats.get_failures += 1;
        }
        let all_issued = g.segs.iter().all(|s| s.next >= s.end);
        if g.outstanding == 0 && (all_issued || g.failed) {
            self.finish_get(id);
        }
    }

    /// Every get of receive `id` completed (or one failed): FIN, or fall back to ACK + FRAGs.
    fn finish_get(&mut self, id: RequestId) {
        let Some(r) = self.reqs.get_mut(id).filter(|r| r.phase == Phase::RecvGet) else {
            return;
        };
        let Some(g) = r.cold.as_mut().and_then(|c| c.get.take()) else {
            return;
        };
        let peer = r.peer;
        if g.failed {
            // Not a measure of either way.
            if let Some(c) = r.cold.as_mut() {
                c.bulk = None;
            }
            // The sender streams everything again from its start; FRAGs overwrite what the
            // gets may have written with the same bytes.
            r.phase = Phase::RecvFrags;
            r.count = 0;
            r.wanted = g.wanted;
            self.queue_ctrl(
                peer,
                Repr::Ack {
                    src_req: g.src_req,
                    dst_req: id.0,
                    wanted: g.wanted as u64,
                },
            );
        } else {
            self.queue_ctrl(
                peer,
                Repr::Fin {
                    src_req: g.src_req,
                    failed: false,
                },
            );
            self.finish_recv(id);
        }
    }

    pub(super) fn on_ack(&mut self, peer: Rank, src_req: u64, dst_req: u64, wanted: u64) {
        let id = RequestId(src_req);
        let Some(s) = self
            .reqs
            .get_mut(id)
            .filter(|s| s.phase == Phase::SendWaitAck)
        else {
            self.stats.dropped_stray += 1;
            return;
        };
        if s.peer != peer {
            self.stats.dropped_malformed += 1;
            return;
        }
        // Registrations (an RGET the receiver could not read) are no longer needed.
        if let Some(cold) = s.cold.as_mut() {
            self.dereg.append(&mut cold.regs);
        }
        let sent = s.count;
        let wanted = usize::try_from(wanted)
            .unwrap_or(usize::MAX)
            .min(s.buf.len());
        if wanted <= sent {
            self.finish_send(id, None);
            return;
        }
        let policy = self.cfg.scheduling.for_pattern(s.pattern);
        let chosen = sched::choose(
            policy,
            &self.routes[peer as usize].send,
            wanted,
            self.cfg.stripe_threshold,
            self.cfg.max_rdma_per_request,
            &mut self.cursor[peer as usize],
        );
        s.phase = Phase::SendStream;
        let cold = s.cold();
        cold.dst_req = dst_req;
        cold.segs = sched::split(&chosen, sent, wanted);
        self.activate(id);
    }

    pub(super) fn on_fin(&mut self, peer: Rank, src_req: u64) {
        let id = RequestId(src_req);
        let waiting = self
            .reqs
            .get_mut(id)
            .is_some_and(|s| s.phase == Phase::SendWaitAck && s.peer == peer);
        if !waiting {
            self.stats.dropped_stray += 1;
            return;
        }
        self.finish_send(id, None);
    }

    /// The rendezvous of send `id` left carrying `sent` bytes.
    pub(super) fn wait_ack(&mut self, id: RequestId, sent: usize) {
        if let Some(s) = self.reqs.get_mut(id) {
            s.phase = Phase::SendWaitAck;
            s.count = sent;
        }
    }

    /// Register the send buffer with the GET routes to the peer (once) and build the RGET header.
    pub(super) fn rget_header(
        &mut self,
        id: RequestId,
        bml: &mut Bml,
        rndv: RndvRepr,
    ) -> Option<Vec<u8>> {
        let s = self.reqs.get_mut(id)?;
        let (dest, buf) = (s.peer, s.buf);
        let cold = s.cold();
        if cold.regs.is_empty() {
            let access = MemAccess {
                remote_read: true,
                remote_write: false,
            };
            for route in self.routes[dest as usize]
                .rdma
                .iter()
                .take(self.cfg.max_rdma_per_request)
            {
                if !self.attrs[route.btl].flags.contains(BtlFlags::GET)
                    || buf.len() < self.attrs[route.btl].min_rdma_pipeline_size
                {
                    continue;
                }
                match bml.btl(route.btl).register_mem(buf, access) {
                    Ok(reg) => cold.regs.push((route.btl, reg)),
                    Err(e) => {
                        tracing::debug!(%e, btl = route.btl, "ob1: registration failed, not offering this BTL")
                    }
                }
            }
        }
        if cold.regs.is_empty() {
            return None;
        }
        let keys = cold
            .regs
            .iter()
            .map(|(b, reg)| RgetKey {
                btl: self.names[*b].clone(),
                key: reg.remote_key.clone(),
            })
            .collect();
        let repr = Repr::Rget {
            rndv,
            addr: buf.addr() as u64,
            keys,
        };
        let mut h = vec![0u8; repr.header_len()];
        match repr.emit(&mut h) {
            Ok(_) => Some(h),
            Err(e) => {
                tracing::debug!(
                    ?e,
                    "ob1: RGET header not encodable, using the copy pipeline"
                );
                self.dereg.append(&mut cold.regs);
                None
            }
        }
    }

    /// Push FRAGs of a streaming send. Returns true if more remain.
    pub(super) fn stream(&mut self, id: RequestId, bml: &mut Bml) -> bool {
        let mut budget = self.cfg.send_pipeline_depth;
        loop {
            let Some(s) = self
                .reqs
                .get_mut(id)
                .filter(|s| s.phase == Phase::SendStream)
            else {
                return false;
            };
            let (dest, buf, pattern) = (s.peer, s.buf, s.pattern);
            let cold = s.cold();
            // The share with the most left goes next, so the BTLs of a stripe advance together.
            let Some(seg) = cold
                .segs
                .iter_mut()
                .filter(|g| g.next < g.end)
                .max_by_key(|g| g.end - g.next)
            else {
                self.finish_send(id, None);
                return false;
            };
            if budget == 0 {
                return true;
            }
            let a = &self.attrs[seg.btl];
            let room = a.max_send_size.min(a.pipeline_frag_size);
            let chunk = (seg.end - seg.next).min(frag_payload(room.saturating_sub(hdr::FRAG_LEN)));
            let mut h = [0u8; hdr::FRAG_LEN];
            let _ = Repr::Frag {
                dst_req: cold.dst_req,
                offset: seg.next as u64,
            }
            .emit(&mut h);
            let hint = SendHint {
                pattern,
                message_len: buf.len(),
            };
            let btl = seg.btl;
            match bml.btl(btl).send(
                dest,
                TAG,
                &h,
                &buf.as_slice()[seg.next..seg.next + chunk],
                hint,
            ) {
                Ok(()) => {
                    seg.next += chunk;
                    budget -= 1;
                    self.stats.frags_sent += 1;
                }
                Err(e) => return self.send_refused(bml, id, dest, btl, e),
            }
        }
    }

    /// Issue gets of a receive. Returns true if more remain to issue.
    pub(super) fn issue_gets(&mut self, id: RequestId, bml: &mut Bml) -> bool {
        let depth = self.cfg.recv_pipeline_depth;
        loop {
            let Some(r) = self.reqs.get_mut(id).filter(|r| r.phase == Phase::RecvGet) else {
                return false;
            };
            let (peer, buf) = (r.peer, r.buf);
            let Some(g) = r.cold.as_mut().and_then(|c| c.get.as_mut()) else {
                return false;
            };
            if g.failed {
                return false;
            }
            let Some(seg) = g
                .segs
                .iter_mut()
                .filter(|s| s.next < s.end)
                .max_by_key(|s| s.end - s.next)
            else {
                return false;
            };
            let frag = self.attrs[seg.btl].rdma_pipeline_frag_size;
            let Some(chunk) = rdma_piece(seg.end - seg.next, g.outstanding, depth, frag) else {
                return true;
            };
            let remote = RemoteSegment {
                addr: g.addr.wrapping_add(seg.next as u64),
                len: chunk,
                remote_key: g.keys[seg.route].clone(),
            };
            let local = buf.slice(seg.next, chunk);
            match bml
                .btl(seg.btl)
                .get(peer, local, &remote, CompletionToken(id.0))
            {
                Ok(()) => {
                    seg.next += chunk;
                    g.outstanding += 1;
                    self.stats.gets += 1;
                }
                Err(SendError::WouldBlock) => {
                    self.stats.would_block += 1;
                    return true;
                }
                Err(e) => {
                    tracing::debug!(%e, "ob1: get refused, falling back to the copy pipeline");
                    g.failed = true;
                    self.stats.get_failures += 1;
                    if g.outstanding == 0 {
                        self.finish_get(id);
                    }
                    return false;
                }
            }
        }
    }
}
