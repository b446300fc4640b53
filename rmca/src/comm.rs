//! Communicators, point-to-point calls and requests.

use std::cell::Cell;
use std::marker::PhantomData;
use std::rc::Rc;

use rmca_framework::btl::CommPattern;
use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{
    self, ContextId, RecvArgs, RequestId, SendArgs, SendMode, SendStart, Source, TagSel,
};
use rmca_framework::rank::Rank;

use crate::{Error, Result, Shared, Src, ANY_TAG};

/// Largest receive of an exchange posted after its send (see `sendrecv_bytes`): above it, a
/// message arriving first would be copied twice (unexpected queue, then the buffer).
const SEND_FIRST_MAX: usize = 256;

/// The outcome of a receive, a probe or a send, in communicator terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// Communicator rank of the sender (receives, probes) or destination (sends).
    pub source: usize,
    /// Tag of the message.
    pub tag: i32,
    /// Bytes received (receives), or message length (probes).
    pub bytes: usize,
}

impl Status {
    /// Number of whole `T` elements received.
    pub fn count<T: bytemuck::Pod>(&self) -> usize {
        self.bytes / std::mem::size_of::<T>().max(1)
    }
}

/// A group of processes with its own matching space. Cheap to clone (clones share the same
/// context: use [`Communicator::dup`] for an isolated one).
#[derive(Clone)]
pub struct Communicator {
    // One reference-counted block: a clone (every pending request holds one) is a single
    // counter increment.
    inner: Rc<CommInner>,
}

struct CommInner {
    shared: Rc<Shared>,
    /// Context id of point-to-point traffic; collectives use `context + 1`.
    context: ContextId,
    /// World rank of each communicator rank.
    group: Box<[Rank]>,
    rank: usize,
    /// `group[i] == i` for every rank (world and its dups): rank translation is free.
    identity: bool,
    /// Number of communicators derived so far (dup/split), the same on every member.
    derived: Cell<u32>,
    /// Collective schedules and scratch memory kept between calls.
    coll: crate::coll::CollCache,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("context", &self.inner.context)
            .field("rank", &self.inner.rank)
            .field("size", &self.inner.group.len())
            .finish()
    }
}

fn check_tag(tag: i32) -> Result<()> {
    if tag < 0 {
        Err(Error::BadTag(tag))
    } else {
        Ok(())
    }
}

impl Communicator {
    pub(crate) fn world(shared: Rc<Shared>, rank: Rank, size: u32) -> Self {
        Self::new(CommInner {
            shared,
            context: 0,
            group: (0..size).collect(),
            rank: rank as usize,
            identity: true,
            derived: Cell::new(0),
            coll: Default::default(),
        })
    }

    fn new(inner: CommInner) -> Self {
        Self {
            inner: Rc::new(inner),
        }
    }

    /// The runtime this communicator belongs to.
    pub(crate) fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// This communicator's collective schedules and scratch memory.
    pub(crate) fn coll_cache(&self) -> &crate::coll::CollCache {
        &self.inner.coll
    }

    /// This process's rank in the communicator.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// Number of processes in the communicator.
    pub fn size(&self) -> usize {
        self.inner.group.len()
    }

    /// World rank of communicator rank `r`.
    pub fn world_rank(&self, r: usize) -> Result<Rank> {
        // ok_or_else: an eagerly built error would be constructed and dropped on every call.
        self.inner
            .group
            .get(r)
            .copied()
            .ok_or_else(|| Error::BadRank {
                rank: r,
                size: self.inner.group.len(),
            })
    }

    fn comm_rank_of(&self, world: Rank) -> usize {
        if self.inner.identity {
            return world as usize;
        }
        self.inner
            .group
            .iter()
            .position(|&w| w == world)
            .unwrap_or(usize::MAX)
    }

    pub(crate) fn coll_context(&self) -> ContextId {
        self.inner.context + 1
    }

    fn to_status(&self, st: &pml::Status) -> Status {
        Status {
            source: self.comm_rank_of(st.source),
            tag: st.tag,
            bytes: st.len,
        }
    }

    #[inline]
    fn finish(&self, st: pml::Status) -> Result<Status> {
        let status = self.to_status(&st);
        match st.error {
            None => Ok(status),
            Some(error) => Err(Error::Status {
                error: *error,
                status,
            }),
        }
    }

    fn source(&self, src: Src) -> Result<Source> {
        Ok(match src {
            Src::Any => Source::Any,
            Src::Rank(r) => Source::Rank(self.world_rank(r)?),
        })
    }

    fn tag_sel(tag: i32) -> Result<TagSel> {
        if tag == ANY_TAG {
            Ok(TagSel::Any)
        } else {
            check_tag(tag)?;
            Ok(TagSel::Tag(tag))
        }
    }

    // ---- raw byte-level operations shared by typed calls and collectives ----

    pub(crate) fn start_send(
        &self,
        buf: UserBuf,
        dest: usize,
        tag: i32,
        context: ContextId,
        mode: SendMode,
        pattern: CommPattern,
    ) -> Result<RequestId> {
        let args = self.send_args(buf, dest, tag, context, mode, pattern)?;
        self.inner.shared.with(|rt| Ok(rt.pml.isend(args)?))
    }

    /// Check the tag and translate `dest` to a world rank: the PML's send arguments.
    fn send_args(
        &self,
        buf: UserBuf,
        dest: usize,
        tag: i32,
        context: ContextId,
        mode: SendMode,
        pattern: CommPattern,
    ) -> Result<SendArgs> {
        check_tag(tag)?;
        Ok(SendArgs {
            buf,
            dest: self.world_rank(dest)?,
            tag,
            context,
            mode,
            pattern,
        })
    }

    /// [`Communicator::start_send`] through the PML's fast path: an eager message a BTL took
    /// at once comes back as [`SendStart::Done`], with no request behind it.
    #[inline]
    fn start_send_fast(
        &self,
        buf: UserBuf,
        dest: usize,
        tag: i32,
        context: ContextId,
        mode: SendMode,
        pattern: CommPattern,
    ) -> Result<SendStart> {
        let args = self.send_args(buf, dest, tag, context, mode, pattern)?;
        self.shared().start_send(args)
    }

    /// Finish a send started by [`Communicator::start_send_fast`].
    #[inline]
    fn wait_send(&self, started: SendStart) -> Result<()> {
        match started {
            SendStart::Done => Ok(()),
            SendStart::Pending(id) => self.wait_raw(id).map(|_| ()),
        }
    }

    #[inline]
    pub(crate) fn start_recv(
        &self,
        buf: UserBuf,
        src: Src,
        tag: i32,
        context: ContextId,
        pattern: CommPattern,
    ) -> Result<RequestId> {
        let source = self.source(src)?;
        let tag = Self::tag_sel(tag)?;
        self.shared().irecv(RecvArgs {
            buf,
            source,
            tag,
            context,
            pattern,
        })
    }

    pub(crate) fn wait_raw(&self, id: RequestId) -> Result<Status> {
        let st = self.shared().wait(id)?;
        self.finish(st)
    }

    /// Blocking send of raw bytes on `context` (collectives use their own context).
    pub(crate) fn send_bytes(
        &self,
        bytes: &[u8],
        dest: usize,
        tag: i32,
        context: ContextId,
        pattern: CommPattern,
    ) -> Result<()> {
        let started = self.start_send_fast(
            UserBuf::from_slice(bytes),
            dest,
            tag,
            context,
            SendMode::Standard,
            pattern,
        )?;
        self.wait_send(started)
    }

    /// Blocking receive of raw bytes on `context`.
    pub(crate) fn recv_bytes(
        &self,
        bytes: &mut [u8],
        src: Src,
        tag: i32,
        context: ContextId,
        pattern: CommPattern,
    ) -> Result<Status> {
        let id = self.start_recv(UserBuf::from_mut_slice(bytes), src, tag, context, pattern)?;
        self.wait_raw(id)
    }

    /// Simultaneous send and receive (deadlock-free exchange), on `context`. Receives of up
    /// to [`SEND_FIRST_MAX`] bytes are posted after the send.
    pub(crate) fn sendrecv_bytes(
        &self,
        (send, dest, send_tag): (&[u8], usize, i32),
        (recv, src, recv_tag): (&mut [u8], Src, i32),
        context: ContextId,
        pattern: CommPattern,
    ) -> Result<Status> {
        let send = UserBuf::from_slice(send);
        if recv.len() <= SEND_FIRST_MAX {
            // A short message that arrives before its receive is posted costs one small copy;
            // sending first takes the posting out of the exchange's critical path (2-rank
            // zero-byte exchange 0.116 against 0.143 us here).
            let s =
                self.start_send_fast(send, dest, send_tag, context, SendMode::Standard, pattern)?;
            let rs = self.recv_bytes(recv, src, recv_tag, context, pattern);
            self.wait_send(s)?;
            return rs;
        }
        let r = self.start_recv(
            UserBuf::from_mut_slice(recv),
            src,
            recv_tag,
            context,
            pattern,
        )?;
        let s = self.start_send_fast(send, dest, send_tag, context, SendMode::Standard, pattern);
        // Whatever happens to the send, the receive must finish before `recv` is released.
        let rs = self.wait_raw(r);
        self.wait_send(s?)?;
        rs
    }

    // ---- typed point-to-point ----

    /// Start a send of typed elements on the point-to-point context.
    #[inline]
    fn start_typed_send<T: bytemuck::Pod>(
        &self,
        buf: &[T],
        dest: usize,
        tag: i32,
        mode: SendMode,
        pattern: CommPattern,
    ) -> Result<SendStart> {
        let bytes = UserBuf::from_slice(bytemuck::cast_slice(buf));
        self.start_send_fast(bytes, dest, tag, self.inner.context, mode, pattern)
    }

    /// Start a receive of typed elements on the point-to-point context.
    #[inline]
    fn start_typed_recv<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        source: Src,
        tag: i32,
        pattern: CommPattern,
    ) -> Result<RequestId> {
        let bytes = UserBuf::from_mut_slice(bytemuck::cast_slice_mut(buf));
        self.start_recv(bytes, source, tag, self.inner.context, pattern)
    }

    /// Blocking standard-mode send.
    #[inline]
    pub fn send<T: bytemuck::Pod>(&self, buf: &[T], dest: usize, tag: i32) -> Result<()> {
        let started =
            self.start_typed_send(buf, dest, tag, SendMode::Standard, CommPattern::Blocking)?;
        self.wait_send(started)
    }

    /// Blocking synchronous send: returns once the receiver has matched the message.
    pub fn ssend<T: bytemuck::Pod>(&self, buf: &[T], dest: usize, tag: i32) -> Result<()> {
        let started =
            self.start_typed_send(buf, dest, tag, SendMode::Synchronous, CommPattern::Blocking)?;
        self.wait_send(started)
    }

    /// Blocking receive. A message longer than `buf` fills `buf` and returns
    /// [`Error::Status`] with [`pml::StatusError::Truncated`]; nothing is written past `buf`.
    #[inline]
    pub fn recv<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        source: impl Into<Src>,
        tag: i32,
    ) -> Result<Status> {
        let id = self.start_typed_recv(buf, source.into(), tag, CommPattern::Blocking)?;
        self.wait_raw(id)
    }

    /// Non-blocking send; the buffer stays borrowed until the request completes.
    #[inline]
    pub fn isend<'a, T: bytemuck::Pod>(
        &self,
        buf: &'a [T],
        dest: usize,
        tag: i32,
    ) -> Result<Request<'a>> {
        self.start_send_request(buf, dest, tag, SendMode::Standard)
    }

    /// Non-blocking synchronous send.
    pub fn issend<'a, T: bytemuck::Pod>(
        &self,
        buf: &'a [T],
        dest: usize,
        tag: i32,
    ) -> Result<Request<'a>> {
        self.start_send_request(buf, dest, tag, SendMode::Synchronous)
    }

    #[inline]
    fn start_send_request<'a, T: bytemuck::Pod>(
        &self,
        buf: &'a [T],
        dest: usize,
        tag: i32,
        mode: SendMode,
    ) -> Result<Request<'a>> {
        let started = self.start_typed_send(buf, dest, tag, mode, CommPattern::NonBlocking)?;
        Ok(Request::started(
            self,
            started,
            dest,
            tag,
            std::mem::size_of_val(buf),
        ))
    }

    /// Non-blocking receive; the buffer stays borrowed until the request completes.
    #[inline]
    pub fn irecv<'a, T: bytemuck::Pod>(
        &self,
        buf: &'a mut [T],
        source: impl Into<Src>,
        tag: i32,
    ) -> Result<Request<'a>> {
        let id = self.start_typed_recv(buf, source.into(), tag, CommPattern::NonBlocking)?;
        Ok(Request::new(self.clone(), id))
    }

    /// Send and receive at once (no deadlock whatever the peers' order).
    pub fn sendrecv<S: bytemuck::Pod, R: bytemuck::Pod>(
        &self,
        send: &[S],
        dest: usize,
        send_tag: i32,
        recv: &mut [R],
        source: impl Into<Src>,
        recv_tag: i32,
    ) -> Result<Status> {
        self.sendrecv_bytes(
            (bytemuck::cast_slice(send), dest, send_tag),
            (bytemuck::cast_slice_mut(recv), source.into(), recv_tag),
            self.inner.context,
            CommPattern::Blocking,
        )
    }

    /// Is a matching message waiting? Does not receive it.
    pub fn iprobe(&self, source: impl Into<Src>, tag: i32) -> Result<Option<Status>> {
        let source = self.source(source.into())?;
        let tag = Self::tag_sel(tag)?;
        let ctx = self.inner.context;
        let st = self.inner.shared.with(|rt| {
            if let Some(st) = rt.pml.iprobe(ctx, source, tag)? {
                return Ok(Some(st));
            }
            rt.progress();
            Ok(rt.pml.iprobe(ctx, source, tag)?)
        })?;
        Ok(st.map(|s| self.to_status(&s)))
    }

    /// Wait until a matching message is available; does not receive it.
    pub fn probe(&self, source: impl Into<Src>, tag: i32) -> Result<Status> {
        let source = source.into();
        let mut idle = 0u32;
        loop {
            if let Some(st) = self.iprobe(source, tag)? {
                return Ok(st);
            }
            idle += 1;
            if idle > 256 {
                std::thread::yield_now();
            }
        }
    }

    // ---- communicator management ----

    fn derive_context(&self, color: u32) -> ContextId {
        let n = self.inner.derived.get();
        self.inner.derived.set(n + 1);
        // Every member derives the same id from (parent, ordinal, color) without communication;
        // FNV-1a spreads them; ids are even (p2p) with the odd neighbour for collectives.
        let mut h: u32 = 0x811c_9dc5;
        for b in self
            .inner
            .context
            .to_le_bytes()
            .into_iter()
            .chain(n.to_le_bytes())
            .chain(color.to_le_bytes())
        {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
        (h | 2) & !1
    }

    /// A communicator with the same processes and an isolated matching space. Collective:
    /// every member must call it, in the same order relative to other dup/split calls.
    pub fn dup(&self) -> Result<Communicator> {
        let context = self.derive_context(u32::MAX);
        Ok(Communicator::new(CommInner {
            shared: self.inner.shared.clone(),
            context,
            group: self.inner.group.clone(),
            rank: self.inner.rank,
            identity: self.inner.identity,
            derived: Cell::new(0),
            coll: Default::default(),
        }))
    }

    /// Partition the communicator by `color` (ranks ordered by `key`, then by old rank).
    /// `color = None` leaves this process out (returns `None`). Collective.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Communicator>> {
        let mine = [color.map_or(-1i64, i64::from), i64::from(key)];
        let mut all = vec![[0i64; 2]; self.size()];
        crate::coll::allgather_into(self, &mine, bytemuck::cast_slice_mut(&mut all))?;
        let context_color = color.unwrap_or(u32::MAX - 1);
        let context = self.derive_context(context_color);
        let Some(color) = color else { return Ok(None) };
        let mut members: Vec<(i64, usize)> = all
            .iter()
            .enumerate()
            .filter(|(_, e)| e[0] == i64::from(color))
            .map(|(r, e)| (e[1], r))
            .collect();
        members.sort();
        let group: Vec<Rank> = members.iter().map(|&(_, r)| self.inner.group[r]).collect();
        let rank = members
            .iter()
            .position(|&(_, r)| r == self.inner.rank)
            .expect("caller is a member of its color");
        let identity = group.iter().enumerate().all(|(i, &w)| w as usize == i);
        Ok(Some(Communicator::new(CommInner {
            shared: self.inner.shared.clone(),
            context,
            group: group.into(),
            rank,
            identity,
            derived: Cell::new(0),
            coll: Default::default(),
        })))
    }
}

/// An outstanding non-blocking operation, borrowing its buffer for `'a`.
/// Dropping it before completion waits for completion.
#[must_use = "a request must be waited on (dropping it waits)"]
pub struct Request<'a> {
    state: ReqState,
    _buf: PhantomData<&'a mut [u8]>,
}

/// Where a [`Request`] stands.
#[derive(Debug)]
enum ReqState {
    /// Outstanding in the PML; the communicator waits for it and translates its status.
    Pending(RequestId, Communicator),
    /// Completed successfully when it was started (an eager send the BTL took): nothing left
    /// in the PML, and no communicator to hold.
    Done(Status),
    /// Its outcome was returned.
    Spent,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("state", &self.state)
            .finish()
    }
}

impl<'a> Request<'a> {
    pub(crate) fn new(comm: Communicator, id: RequestId) -> Self {
        Self {
            state: ReqState::Pending(id, comm),
            _buf: PhantomData,
        }
    }

    /// The request of a send to `dest` with `tag` of `bytes` bytes that started as `started`.
    #[inline]
    fn started(
        comm: &Communicator,
        started: SendStart,
        dest: usize,
        tag: i32,
        bytes: usize,
    ) -> Self {
        let state = match started {
            SendStart::Done => ReqState::Done(Status {
                source: dest,
                tag,
                bytes,
            }),
            SendStart::Pending(id) => ReqState::Pending(id, comm.clone()),
        };
        Self {
            state,
            _buf: PhantomData,
        }
    }

    /// Block until the operation completes.
    #[inline]
    pub fn wait(mut self) -> Result<Status> {
        match std::mem::replace(&mut self.state, ReqState::Spent) {
            ReqState::Pending(id, comm) => comm.wait_raw(id),
            ReqState::Done(st) => Ok(st),
            ReqState::Spent => Err(Error::InvalidArgument("request already completed".into())),
        }
    }

    /// Has the operation completed? `Some` returns its outcome (after which the request is spent).
    pub fn test(&mut self) -> Option<Result<Status>> {
        let ReqState::Pending(id, comm) = &self.state else {
            return match std::mem::replace(&mut self.state, ReqState::Spent) {
                ReqState::Done(st) => Some(Ok(st)),
                _ => None,
            };
        };
        let id = *id;
        let r = comm.shared().with(|rt| {
            if let Some(st) = rt.pml.test(id)? {
                return Ok(Some(st));
            }
            rt.progress();
            Ok(rt.pml.test(id)?)
        });
        let outcome = match r {
            Ok(None) => return None,
            Ok(Some(st)) => comm.finish(st),
            Err(e) => Err(e),
        };
        self.state = ReqState::Spent;
        Some(outcome)
    }

    /// Wait for every request; statuses in order. The first error is returned after all
    /// requests completed (no buffer is released while still in use).
    pub fn wait_all(requests: Vec<Request<'a>>) -> Result<Vec<Status>> {
        let mut out = Vec::with_capacity(requests.len());
        let mut first_err = None;
        for r in requests {
            match r.wait() {
                Ok(s) => out.push(s),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Wait for every request without collecting statuses (`MPI_Waitall` with
    /// `MPI_STATUSES_IGNORE`): the loop of windowed transfers. The first error is returned
    /// after all requests completed.
    pub fn complete_all(mut requests: Vec<Request<'a>>) -> Result<()> {
        // Requests that completed when they started (eager sends) are only looked at; the
        // others go to the PML in one call, which waits for them in order.
        let outcome = {
            let mut pending = requests.iter().filter_map(|r| match &r.state {
                ReqState::Pending(id, comm) => Some((*id, comm)),
                _ => None,
            });
            let Some((first, comm)) = pending.next() else {
                return Ok(());
            };
            let shared = comm.shared();
            let mut ids = shared.take_batch();
            ids.reserve(requests.len());
            ids.push(first);
            ids.extend(pending.map(|(id, _)| id));
            let outcome = shared.wait_all(&ids);
            shared.give_batch(ids);
            outcome
        };
        // Every request the PML knew is released now, failed or not.
        let failed = match outcome {
            Ok(failed) => failed,
            Err(e) => {
                for r in &mut requests {
                    r.state = ReqState::Spent;
                }
                return Err(e);
            }
        };
        let mut first_err = None;
        let mut pending_index = 0;
        let mut failed = failed.into_iter().peekable();
        for r in &mut requests {
            let ReqState::Pending(_, comm) = std::mem::replace(&mut r.state, ReqState::Spent)
            else {
                continue;
            };
            if failed.peek().is_some_and(|(i, _)| *i == pending_index) {
                let (_, st) = failed.next().expect("peeked");
                if let Err(e) = comm.finish(st) {
                    first_err.get_or_insert(e);
                }
            }
            pending_index += 1;
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Wait until one request completes; it is removed from `requests` and returned with its index.
    pub fn wait_any(requests: &mut Vec<Request<'a>>) -> Result<(usize, Status)> {
        if requests.is_empty() {
            return Err(Error::InvalidArgument("wait_any on an empty list".into()));
        }
        let mut idle = 0u32;
        loop {
            for i in 0..requests.len() {
                if let Some(r) = requests[i].test() {
                    let _completed = requests.remove(i);
                    return r.map(|s| (i, s));
                }
            }
            idle += 1;
            if idle > 256 {
                std::thread::yield_now();
            }
        }
    }
}

impl Drop for Request<'_> {
    #[inline]
    fn drop(&mut self) {
        // Small enough to inline where a window of requests is dropped (they are done or spent
        // by then); an outstanding one waits out of line.
        if matches!(self.state, ReqState::Pending(..)) {
            self.wait_on_drop();
        }
    }
}

impl Request<'_> {
    /// Dropped while outstanding: the buffer is borrowed only as long as the request lives,
    /// so finish the transfer before the borrow ends.
    #[cold]
    #[inline(never)]
    fn wait_on_drop(&mut self) {
        if let ReqState::Pending(id, comm) = std::mem::replace(&mut self.state, ReqState::Spent) {
            if let Err(e) = comm.wait_raw(id) {
                tracing::debug!("request dropped with error: {e}");
            }
        }
    }
}
