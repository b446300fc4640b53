//! Receive events: what the BTLs deliver to [`Core`] ([`BmlEvents`]), headers parsed and
//! matched, and the fragments a BTL writes in place as they arrive.

use rmca_framework::bml::{BmlEvents, BtlIndex};
use rmca_framework::btl::{BtlTag, CompletionToken, Placement, SendError};
use rmca_framework::matching::{Arrival, Envelope};
use rmca_framework::pml::RequestId;
use rmca_framework::rank::Rank;

use super::requests::Phase;
use super::{frag_target, peer_failed, Core, Unexp, TAG};
use crate::hdr::{self, MatchRepr, Packet, Repr, RgetKey, RndvRepr};

impl BmlEvents for Core {
    #[inline]
    fn recv(&mut self, _btl: BtlIndex, peer: Rank, tag: BtlTag, data: &[u8]) {
        if tag != TAG {
            self.stats.dropped_foreign += 1;
            return;
        }
        if let Some((m, payload)) = hdr::parse_match(data) {
            self.on_match(peer, m, payload);
            return;
        }
        self.recv_control(peer, data);
    }

    fn recv_begin(
        &mut self,
        _btl: BtlIndex,
        peer: Rank,
        tag: BtlTag,
        head: &[u8],
        len: usize,
    ) -> Option<Placement> {
        if tag != TAG {
            return None;
        }
        match hdr::parse_match(head) {
            Some((m, payload)) => {
                self.begin_match(peer, m, payload, len.saturating_sub(hdr::MATCH_LEN))
            }
            None => self.begin_frag(peer, head, len),
        }
    }

    fn recv_placed(
        &mut self,
        _btl: BtlIndex,
        token: CompletionToken,
        result: Result<usize, SendError>,
    ) {
        self.on_placed(token, result);
    }

    fn rdma_complete(
        &mut self,
        _btl: BtlIndex,
        token: CompletionToken,
        result: Result<(), SendError>,
    ) {
        self.on_rdma_complete(token, result);
    }

    fn peer_failed(&mut self, btl: BtlIndex, peer: Rank, reason: &str) {
        self.failures.push((btl, peer, reason.to_owned()));
    }

    #[inline]
    fn wants_more(&self) -> bool {
        !self.awaited_done
    }
}

impl Core {
    /// Every header but an eager MATCH.
    #[inline(never)]
    fn recv_control(&mut self, peer: Rank, data: &[u8]) {
        let parsed = Packet::new_checked(data)
            .and_then(|p| Repr::parse(&p).map(|r| (r, &data[p.header_len()..])));
        let (repr, payload) = match parsed {
            Ok(x) => x,
            Err(e) => {
                self.stats.dropped_malformed += 1;
                tracing::debug!(peer, %e, "ob1: malformed fragment dropped");
                return;
            }
        };
        match repr {
            Repr::Match(m) => self.on_match(peer, m, payload),
            Repr::Rndv(info) => self.on_rndv(peer, info, payload, None),
            Repr::Rget { rndv, addr, keys } => {
                self.on_rndv(peer, rndv, payload, Some((addr, keys)))
            }
            Repr::Ack {
                src_req,
                dst_req,
                wanted,
            } => self.on_ack(peer, src_req, dst_req, wanted),
            Repr::Frag { dst_req, offset } => self.on_frag(peer, dst_req, offset, payload),
            Repr::Fin { src_req, .. } => self.on_fin(peer, src_req),
        }
    }

    /// An eager message from `peer`, the rank the BTL delivered it from: headers carry no
    /// source rank, the BTL names the sender.
    #[inline]
    fn on_match(&mut self, peer: Rank, m: MatchRepr, payload: &[u8]) {
        // The receive hot path: a well-formed, in-order message for the oldest posted receive.
        if m.tag >= 0 {
            let env = Envelope {
                context: m.ctx,
                source: peer,
                tag: m.tag,
            };
            if let Some(id) = self.matcher.arrive_posted(env, m.seq) {
                self.deliver_eager(id, env, payload);
                return;
            }
        }
        // (The envelope is rebuilt there: one built here for both paths is spilled to the
        // stack before the fast path's first test.)
        self.on_match_general(peer, m, payload);
    }

    #[inline(never)]
    fn on_match_general(&mut self, peer: Rank, m: MatchRepr, payload: &[u8]) {
        if m.tag < 0 {
            self.stats.dropped_malformed += 1;
            return;
        }
        let env = Envelope {
            context: m.ctx,
            source: peer,
            tag: m.tag,
        };
        match self.matcher.arrive(env, m.seq, || {
            if let Some(mem) = &self.memory {
                mem.alloc(payload.len());
            }
            let mut v = self.spare.pop().unwrap_or_default();
            v.clear();
            v.extend_from_slice(payload);
            Unexp::Eager(v)
        }) {
            Arrival::Matched(id) => self.deliver_eager(id, env, payload),
            Arrival::Stale => self.stats.dropped_stray += 1,
            Arrival::Unexpected | Arrival::Held => {}
        }
        self.drain_released();
    }

    fn on_rndv(
        &mut self,
        peer: Rank,
        info: RndvRepr,
        payload: &[u8],
        rget: Option<(u64, Vec<RgetKey>)>,
    ) {
        // As for MATCH, the source is the peer the BTL names; only the tag can be invalid.
        if info.hdr.tag < 0 {
            self.stats.dropped_malformed += 1;
            return;
        }
        let env = Envelope {
            context: info.hdr.ctx,
            source: peer,
            tag: info.hdr.tag,
        };
        let mut rget = Some(rget);
        let memory = self.memory.as_deref();
        let arrival = self.matcher.arrive(env, info.hdr.seq, || {
            if let Some(mem) = memory {
                mem.alloc(payload.len());
            }
            Unexp::Rndv {
                info,
                data: payload.to_vec(),
                rget: rget.take().flatten(),
            }
        });
        match arrival {
            Arrival::Matched(id) => self.start_rndv(id, env, info, payload, rget.take().flatten()),
            Arrival::Stale => self.stats.dropped_stray += 1,
            Arrival::Unexpected | Arrival::Held => {}
        }
        self.drain_released();
    }
}

impl Core {
    /// The start of an eager message whose rest a BTL can write in place as it arrives: taken
    /// only in the common case (in order, for the oldest posted receive of its source), which
    /// is then matched now. The request waits in [`Phase::RecvFrags`] for the rest.
    fn begin_match(
        &mut self,
        peer: Rank,
        m: MatchRepr,
        head: &[u8],
        msg_len: usize,
    ) -> Option<Placement> {
        if m.tag < 0 {
            return None;
        }
        let env = Envelope {
            context: m.ctx,
            source: peer,
            tag: m.tag,
        };
        let id = self.matcher.arrive_posted(env, m.seq)?;
        let r = self.reqs.get_mut(id)?;
        let (wanted, n) = r.take_first(peer, m.tag, msg_len, head);
        r.wanted = wanted;
        r.count = n;
        r.phase = Phase::RecvFrags;
        r.placing = 1;
        self.stats.placed += 1;
        Some(Placement {
            dst: r.buf.slice(n, wanted - n),
            token: CompletionToken(id.0),
        })
    }

    /// The start of a FRAG whose rest a BTL can write in place; a FRAG that [`Core::on_frag`]
    /// would drop is left to it.
    fn begin_frag(&mut self, peer: Rank, head: &[u8], len: usize) -> Option<Placement> {
        let p = Packet::new_checked(head).ok()?;
        let Ok(Repr::Frag { dst_req, offset }) = Repr::parse(&p) else {
            return None;
        };
        let payload = &head[p.header_len()..];
        let total = len
            .checked_sub(p.header_len())
            .filter(|&t| t >= payload.len())?;
        let (r, at) = frag_target(&mut self.reqs, peer, dst_req, offset, total).ok()?;
        r.placing = r.placing.checked_add(1)?;
        r.buf.write_at(at, payload);
        r.count += payload.len();
        self.stats.frags_recv += 1;
        self.stats.placed += 1;
        Some(Placement {
            dst: r.buf.slice(at + payload.len(), total - payload.len()),
            token: CompletionToken(dst_req),
        })
    }

    /// A BTL finished writing a fragment taken by `begin_match` or `begin_frag`.
    fn on_placed(&mut self, token: CompletionToken, result: Result<usize, SendError>) {
        let id = RequestId(token.0);
        let Some(r) = self
            .reqs
            .get_mut(id)
            .filter(|r| r.phase == Phase::RecvFrags && r.placing > 0)
        else {
            self.stats.dropped_stray += 1;
            return;
        };
        r.placing -= 1;
        match result {
            Ok(n) => r.count += n,
            Err(e) => {
                let peer = r.peer;
                r.error
                    .get_or_insert_with(|| Box::new(peer_failed(peer, &e.to_string())));
            }
        }
        if r.placing > 0 {
            return;
        }
        if let Some(e) = r.error.take() {
            let (peer, tag) = (r.peer, r.tag);
            self.finish(id, peer, tag, 0, Some(*e));
        } else if r.count >= r.wanted {
            self.finish_recv(id);
        }
    }
}
