//! [`Ob1`]: the [`Pml`] interface over [`Core`] and the BTLs.

use std::sync::Arc;

use rmca_framework::bml::{Bml, BtlIndex};
use rmca_framework::btl::CommPattern;
use rmca_framework::btl::{SendError, SendHint};
use rmca_framework::buffer::UserBuf;
use rmca_framework::matching::{Envelope, Posted, Seq};
use rmca_framework::memory::MemoryCounter;
use rmca_framework::pml::{
    spin_until_done, ContextId, MessageId, Pml, PmlError, RdmaKeys, RdmaToken, RecvArgs, RequestId,
    SendArgs, SendMode, SendStart, Source, Status, StatusError, TagSel,
};
use rmca_framework::progress::Backoff;
use rmca_framework::rank::Rank;

use super::requests::{Phase, Req, Settle};
use super::{peer_failed, Core, Unexp, CLASSES, TAG};
use crate::hdr::{self, MatchRepr};
use crate::sched::Scheduling;
use crate::Ob1Config;

/// The ob1 PML: `Core` plus the BTLs it drives.
pub struct Ob1 {
    bml: Bml,
    core: Core,
}

impl std::fmt::Debug for Ob1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ob1")
            .field("me", &self.core.me)
            .field("requests", &self.core.reqs.live())
            .field("matcher", &self.core.matcher)
            .finish()
    }
}

impl Ob1 {
    /// An ob1 instance over `bml` with `cfg`.
    pub fn new(bml: Bml, cfg: Ob1Config) -> Self {
        let core = Core::new(&bml, cfg);
        Self { bml, core }
    }

    /// Account the bytes of buffered unexpected messages to `counter` (the profile's memory
    /// per component).
    pub fn with_memory(mut self, counter: Arc<MemoryCounter>) -> Self {
        self.core.memory = Some(counter);
        self
    }

    /// Count the traffic by size class and the eager sends (`--mca profile 1`); off, those
    /// counters stay 0 and the message paths skip them.
    pub fn with_traffic_counters(mut self, on: bool) -> Self {
        self.core.traffic = on;
        self
    }

    /// Requests currently held (outstanding or completed but not yet tested).
    pub fn live_requests(&self) -> usize {
        self.core.reqs.live()
    }

    fn check_rank(&self, rank: Rank) -> Result<(), PmlError> {
        let size = self.core.routes.len();
        if (rank as usize) < size {
            Ok(())
        } else {
            Err(PmlError::BadRank {
                rank,
                size: size as u32,
            })
        }
    }

    /// Queue send `id` behind the earlier refused sends to its peer.
    fn queue_start(&mut self, dest: Rank, id: RequestId) {
        self.core.starts[dest as usize].push_back(id);
        self.core.starts_pending += 1;
    }
}

impl Pml for Ob1 {
    fn component_name(&self) -> &str {
        "ob1"
    }

    fn isend(&mut self, args: SendArgs) -> Result<RequestId, PmlError> {
        self.check_rank(args.dest)?;
        if args.tag < 0 {
            return Err(PmlError::BadTag(args.tag));
        }
        let core = &mut self.core;
        let seq = core.matcher.next_send_seq(args.context, args.dest);
        let id = core.reqs.insert(Req::new_send(&args, seq));
        if core.dead[args.dest as usize] {
            core.finish_send(id, Some(peer_failed(args.dest, "peer failed earlier")));
        } else if !core.starts[args.dest as usize].is_empty() || core.start_send(id, &mut self.bml)
        {
            self.queue_start(args.dest, id);
        }
        Ok(id)
    }

    #[inline]
    fn start_send(&mut self, args: SendArgs) -> Result<SendStart, PmlError> {
        let core = &mut self.core;
        // The eager fast path: no send waits for a BTL (so none to this peer could be
        // overtaken), one obvious eager BTL, the whole message in one fragment. No request is
        // created unless the BTL refuses.
        let path = match core.eager_paths.get(args.dest as usize) {
            Some(p)
                if args.mode == SendMode::Standard
                    && args.tag >= 0
                    && args.buf.len() as isize <= p.max_payload
                    && core.starts_pending == 0
                    && !(p.several
                        && core.cfg.scheduling.for_pattern(args.pattern)
                            == Scheduling::RoundRobin) =>
            {
                *p
            }
            _ => return self.isend(args).map(SendStart::Pending),
        };
        let len = args.buf.len();
        let seq = core.matcher.next_send_seq(args.context, args.dest);
        let h = hdr::emit_match(&MatchRepr {
            ctx: args.context,
            tag: args.tag,
            seq,
        });
        let hint = SendHint {
            pattern: args.pattern,
            message_len: len,
        };
        match self
            .bml
            .btl(path.btl)
            .send(args.dest, TAG, &h, args.buf.as_slice(), hint)
        {
            Ok(()) => {
                if core.traffic {
                    core.stats.eager += 1;
                    core.stats.count_sent(len);
                }
                Ok(SendStart::Done)
            }
            Err(e) => Ok(SendStart::Pending(
                self.refused_eager(&args, seq, path.btl, e),
            )),
        }
    }

    fn irecv(&mut self, args: RecvArgs) -> Result<RequestId, PmlError> {
        // Whether a specific source failed earlier (the lookup checks the rank too).
        let source_dead = match args.source {
            Source::Rank(r) => match self.core.dead.get(r as usize) {
                Some(&dead) => dead,
                None => return Err(self.check_rank(r).expect_err("rank out of range")),
            },
            Source::Any => false,
        };
        if let TagSel::Tag(t) = args.tag {
            if t < 0 {
                return Err(PmlError::BadTag(t));
            }
        }
        if !args.buf.is_writable() {
            return Err(PmlError::Other(
                "receive buffer is read-only (build it with a mutable slice)".into(),
            ));
        }
        let core = &mut self.core;
        let id = core.reqs.insert(Req::new_recv(&args));
        match core.matcher.post(args.context, args.source, args.tag, id) {
            Posted::Queued => {
                if let (true, Source::Rank(r)) = (source_dead, args.source) {
                    core.matcher.cancel(args.context, &id);
                    core.finish(id, r, 0, 0, Some(peer_failed(r, "peer failed earlier")));
                }
            }
            Posted::Matched(env, u) => self.matched_on_post(id, env, u),
        }
        Ok(id)
    }

    fn iprobe(
        &mut self,
        context: ContextId,
        source: Source,
        tag: TagSel,
    ) -> Result<Option<Status>, PmlError> {
        if let Source::Rank(r) = source {
            self.check_rank(r)?;
        }
        self.progress();
        Ok(self
            .core
            .matcher
            .probe(context, source, tag)
            .map(|(e, u)| Status::ok(e.source, e.tag, u.len())))
    }

    fn improbe(
        &mut self,
        context: ContextId,
        source: Source,
        tag: TagSel,
    ) -> Result<Option<(MessageId, Status)>, PmlError> {
        if let Source::Rank(r) = source {
            self.check_rank(r)?;
        }
        self.progress();
        let core = &mut self.core;
        let Some((env, u)) = core.matcher.take(context, source, tag) else {
            return Ok(None);
        };
        let id = core.next_message;
        core.next_message += 1;
        let st = Status::ok(env.source, env.tag, u.len());
        core.matched.insert(id, (env, u));
        Ok(Some((MessageId(id), st)))
    }

    fn imrecv(
        &mut self,
        message: MessageId,
        buf: UserBuf,
        pattern: CommPattern,
    ) -> Result<RequestId, PmlError> {
        if !buf.is_writable() {
            return Err(PmlError::Other(
                "receive buffer is read-only (build it with a mutable slice)".into(),
            ));
        }
        let Some((env, u)) = self.core.matched.remove(&message.0) else {
            return Err(PmlError::Other(format!(
                "unknown message {message:?} (not taken by a matched probe, or received already)"
            )));
        };
        let args = RecvArgs {
            buf,
            source: Source::Rank(env.source),
            tag: TagSel::Tag(env.tag),
            context: env.context,
            pattern,
        };
        let id = self.core.reqs.insert(Req::new_recv(&args));
        // As a receive posted when the message was unexpected: an eager copy is delivered
        // now, a rendezvous starts its transfer now.
        self.matched_on_post(id, env, u);
        Ok(id)
    }

    #[inline]
    fn test(&mut self, request: RequestId) -> Result<Option<Status>, PmlError> {
        self.core
            .reqs
            .take_done(request)
            .map_err(|()| PmlError::UnknownRequest(request))
    }

    fn cancel(&mut self, request: RequestId) -> Result<bool, PmlError> {
        let core = &mut self.core;
        let Some(r) = core.reqs.get_mut(request) else {
            return Err(PmlError::UnknownRequest(request));
        };
        if r.phase != Phase::RecvPosted {
            return Ok(false);
        }
        let (context, src, tag) = (r.context, r.peer, r.tag);
        if !core.matcher.cancel(context, &request) {
            return Ok(false);
        }
        core.finish(request, src, tag, 0, Some(StatusError::Cancelled));
        Ok(true)
    }

    #[inline]
    fn progress(&mut self) -> usize {
        self.progress_pass()
    }

    fn wait(
        &mut self,
        request: RequestId,
        between: Option<&mut dyn FnMut() -> usize>,
    ) -> Result<Status, PmlError> {
        // The BTLs stop delivering as soon as this request completes.
        self.core.awaited = Some(request);
        self.core.awaited_done = false;
        let status = spin_until_done(
            self,
            request,
            &mut { between },
            Self::test,
            Self::progress_pass,
        );
        self.core.awaited = None;
        self.core.awaited_done = false;
        status
    }

    fn wait_all(
        &mut self,
        requests: &[RequestId],
        between: Option<&mut dyn FnMut() -> usize>,
        failed: &mut Vec<(usize, Status)>,
    ) -> Result<(), PmlError> {
        self.wait_window::<false>(requests, between, failed)
    }

    fn wait_all_statuses(
        &mut self,
        requests: &[RequestId],
        between: Option<&mut dyn FnMut() -> usize>,
        statuses: &mut Vec<(usize, Status)>,
    ) -> Result<(), PmlError> {
        self.wait_window::<true>(requests, between, statuses)
    }

    fn peer_btls(&self) -> Vec<Vec<String>> {
        (0..self.bml.peer_count() as Rank)
            .map(|p| self.bml.route_names(p))
            .collect()
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let s = &self.core.stats;
        let mut v = Vec::new();
        for (i, (name, _)) in CLASSES.iter().enumerate() {
            v.push((format!("pml.ob1.sent_msgs_{name}"), s.sent_msgs[i]));
            v.push((format!("pml.ob1.sent_bytes_{name}"), s.sent_bytes[i]));
            v.push((format!("pml.ob1.recv_msgs_{name}"), s.recv_msgs[i]));
            v.push((format!("pml.ob1.recv_bytes_{name}"), s.recv_bytes[i]));
        }
        let m = self.core.matcher.stats();
        for (k, x) in [
            ("eager", s.eager),
            ("rndv", s.rndv),
            ("rget", s.rget),
            ("frags_sent", s.frags_sent),
            ("frags_recv", s.frags_recv),
            ("placed", s.placed),
            ("gets", s.gets),
            ("bulk_get", s.bulk_get),
            ("bulk_copy", s.bulk_copy),
            ("get_failures", s.get_failures),
            ("would_block", s.would_block),
            ("dropped_foreign", s.dropped_foreign),
            ("dropped_malformed", s.dropped_malformed),
            ("dropped_stray", s.dropped_stray),
            ("route_failures", s.route_failures),
            ("peers_failed", s.peers_failed),
            ("osc_rdma_puts", self.core.osc.puts),
            ("osc_rdma_gets", self.core.osc.gets),
            ("osc_rdma_bytes", self.core.osc.bytes),
            ("unexpected", m.unexpected),
            ("out_of_order", m.out_of_order),
            ("matched_on_post", m.matched_on_post),
            ("matched_on_arrival", m.matched_on_arrival),
        ] {
            v.push((format!("pml.ob1.{k}"), x));
        }
        // What the bulk chooser believes, per BTL and size class: the estimated service time
        // (ns) of a read and of the copy pipeline for a message of the class's smallest size.
        for (btl, b) in self.core.bulk.iter().enumerate() {
            let name = self.core.names.get(btl).map_or("?", String::as_str);
            for (len, get, copy) in b.chooser.measured() {
                for (way, ns) in [("get", get), ("copy", copy)] {
                    if let Some(ns) = ns {
                        v.push((format!("pml.ob1.bulk_{name}_{len}_{way}_ns"), ns as u64));
                    }
                }
            }
        }
        v.extend(self.bml.counters());
        v
    }

    fn rdma_reaches(&self, peer: Rank) -> bool {
        self.core.osc_rdma_reaches(peer)
    }

    fn rdma_register(&mut self, mem: UserBuf, peers: &[Rank]) -> Result<(u64, RdmaKeys), PmlError> {
        self.core.osc_rdma_register(&mut self.bml, mem, peers)
    }

    fn rdma_deregister(&mut self, handle: u64) {
        self.core.osc_rdma_deregister(&mut self.bml, handle);
    }

    fn rdma_put(
        &mut self,
        peer: Rank,
        local: UserBuf,
        keys: &RdmaKeys,
        addr: u64,
    ) -> Result<RdmaToken, PmlError> {
        self.core
            .osc_rdma_start(&mut self.bml, peer, local, keys, addr, false)
    }

    fn rdma_get(
        &mut self,
        peer: Rank,
        local: UserBuf,
        keys: &RdmaKeys,
        addr: u64,
    ) -> Result<RdmaToken, PmlError> {
        self.core
            .osc_rdma_start(&mut self.bml, peer, local, keys, addr, true)
    }

    fn rdma_test(&mut self, token: RdmaToken) -> Option<Result<(), PmlError>> {
        self.core.osc_rdma_test(&mut self.bml, token)
    }

    fn finalize(&mut self) -> Result<(), PmlError> {
        let pending = self.core.reqs.outstanding();
        for (btl, reg) in self.core.dereg.drain(..) {
            self.bml.btl(btl).deregister_mem(&reg);
        }
        for (btl, reg) in self.core.osc.take_registrations() {
            self.bml.btl(btl).deregister_mem(&reg);
        }
        self.bml.finalize();
        if pending > 0 {
            tracing::warn!(pending, "ob1 finalized with requests still outstanding");
        }
        Ok(())
    }
}

impl Ob1 {
    /// One pass over the BTLs, then the work their events queued.
    #[inline(always)]
    fn progress_pass(&mut self) -> usize {
        let n = self.bml.progress(&mut self.core);
        // An idle pass stops here: most passes of a wait loop find nothing queued.
        if !self.core.has_work() {
            return n;
        }
        n + self.core.run(&mut self.bml)
    }

    /// The eager fast path's BTL refused the fragment: keep the send as a request with the
    /// sequence number it already has, and handle the refusal as isend does (retry in order,
    /// or fail over).
    #[inline(never)]
    fn refused_eager(
        &mut self,
        args: &SendArgs,
        seq: Seq,
        btl: BtlIndex,
        e: SendError,
    ) -> RequestId {
        let id = self.core.reqs.insert(Req::new_send(args, seq));
        if self.core.send_refused(&mut self.bml, id, args.dest, btl, e) {
            self.queue_start(args.dest, id);
        }
        id
    }

    /// `wait_all` (`ALL` false: only the failures reported, into `out`) and
    /// `wait_all_statuses` (`ALL` true: every status): one loop over the window.
    #[inline(always)]
    fn wait_window<const ALL: bool>(
        &mut self,
        requests: &[RequestId],
        mut between: Option<&mut dyn FnMut() -> usize>,
        out: &mut Vec<(usize, Status)>,
    ) -> Result<(), PmlError> {
        // The BTLs deliver whatever they have until the *last* request completed (then as
        // `wait` does, one record at a time): taking a window's messages in few passes rather
        // than one pass per message raised the 8 B message rate 1.2x here. Stopping at the
        // last keeps the next window's messages in the rings until receives are posted for
        // them.
        self.core.awaited = requests.last().copied();
        self.core.awaited_done = requests.last().is_some_and(|&id| {
            self.core
                .reqs
                .get_mut(id)
                .is_some_and(|r| r.phase == Phase::Done)
        });
        // One loop over the window: a request found complete costs one check; progress
        // passes run only while the next request is still in flight.
        let mut unknown = None;
        let mut backoff = Backoff::default();
        let mut i = 0;
        while let Some(&id) = requests.get(i) {
            if ALL {
                // Every status is wanted: taken (and the request released) as it completes.
                match self.core.reqs.take_done(id) {
                    Ok(Some(st)) => out.push((i, st)),
                    Ok(None) => {
                        self.wait_pass(&mut between, &mut backoff);
                        continue;
                    }
                    Err(()) => {
                        unknown.get_or_insert(id);
                    }
                }
                i += 1;
                continue;
            }
            match self.core.reqs.settle(id) {
                Settle::Released => {}
                Settle::Pending => {
                    self.wait_pass(&mut between, &mut backoff);
                    continue;
                }
                Settle::Failed => self.take_failed(i, id, out),
                Settle::Unknown => {
                    unknown.get_or_insert(id);
                }
            }
            i += 1;
        }
        self.core.awaited = None;
        self.core.awaited_done = false;
        unknown.map_or(Ok(()), |id| Err(PmlError::UnknownRequest(id)))
    }

    /// One pass of a wait loop: progress, the runtime's functions, back-off. Out of line in
    /// `wait_all`, so that its check of completed requests keeps its values in registers.
    #[inline(never)]
    fn wait_pass(
        &mut self,
        between: &mut Option<&mut dyn FnMut() -> usize>,
        backoff: &mut Backoff,
    ) {
        let mut n = self.progress_pass();
        if let Some(f) = between.as_mut() {
            n += f();
        }
        backoff.pass(n);
    }

    /// `wait_all` found request `id` (its `i`-th) completed with an error: release it and
    /// report its status.
    #[cold]
    fn take_failed(&mut self, i: usize, id: RequestId, failed: &mut Vec<(usize, Status)>) {
        if let Ok(Some(status)) = self.core.reqs.take_done(id) {
            failed.push((i, status));
        }
    }

    /// A receive found its message already waiting.
    #[inline(never)]
    fn matched_on_post(&mut self, id: RequestId, env: Envelope, u: Unexp) {
        let rndv = matches!(u, Unexp::Rndv { .. });
        self.core.deliver_unexp(id, env, u);
        if rndv {
            self.core.run(&mut self.bml);
        }
    }
}
