//! Communicators, point-to-point calls and requests.

use std::cell::Cell;
use std::rc::Rc;

use rmca_framework::btl::CommPattern;
use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{
    self, ContextId, RecvArgs, RequestId, SendArgs, SendMode, SendStart, Source, TagSel,
};
use rmca_framework::rank::Rank;

use crate::request::{Request, Scope};
use crate::{Dest, Error, Result, Shared, Src, ANY_TAG};

/// Largest receive of an exchange posted after its send (see `sendrecv_bytes`): above it, a
/// message arriving first would be copied twice (unexpected queue, then the buffer).
pub(crate) const SEND_FIRST_MAX: usize = 256;

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
    /// The status of an operation on [`crate::PROC_NULL`]: source [`Status::PROC_NULL_SOURCE`],
    /// tag [`ANY_TAG`], no bytes (as MPI reports it).
    pub const PROC_NULL: Status = Status {
        source: Status::PROC_NULL_SOURCE,
        tag: ANY_TAG,
        bytes: 0,
    };

    /// The `source` of a status that comes from [`crate::PROC_NULL`].
    pub const PROC_NULL_SOURCE: usize = usize::MAX;

    /// True for the status of an operation on [`crate::PROC_NULL`].
    pub fn is_proc_null(&self) -> bool {
        self.source == Self::PROC_NULL_SOURCE
    }

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

    /// The runtime this communicator belongs to, shared.
    pub(crate) fn shared_rc(&self) -> &Rc<Shared> {
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
    pub(crate) fn finish(&self, st: pml::Status) -> Result<Status> {
        let status = self.to_status(&st);
        match st.error {
            None => Ok(status),
            Some(error) => Err(Error::Status {
                error: *error,
                status,
            }),
        }
    }

    /// The PML's source selector, or `None` for `PROC_NULL` (nothing to receive).
    fn source(&self, src: Src) -> Result<Option<Source>> {
        Ok(Some(match src {
            Src::Any => Source::Any,
            Src::Rank(r) => Source::Rank(self.world_rank(r)?),
            Src::Null => return Ok(None),
            Src::Negative(r) => return Err(Error::NegativeRank(r)),
        }))
    }

    /// The destination rank, or `None` for `PROC_NULL` (nothing to send). The tag is checked
    /// in both cases.
    fn dest(dest: Dest, tag: i32) -> Result<Option<usize>> {
        check_tag(tag)?;
        match dest {
            Dest::Rank(r) => Ok(Some(r)),
            Dest::Null => Ok(None),
            Dest::Negative(r) => Err(Error::NegativeRank(r)),
        }
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
    pub(crate) fn start_send_fast(
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
        let tag = Self::tag_sel(tag)?;
        let Some(source) = self.source(src)? else {
            return Err(Error::InvalidArgument(
                "internal: PROC_NULL reached the PML".into(),
            ));
        };
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

    /// Blocking receive of raw bytes on `context`.
    #[allow(unsafe_code)]
    pub(crate) fn recv_bytes(
        &self,
        bytes: &mut [u8],
        src: Src,
        tag: i32,
        context: ContextId,
        pattern: CommPattern,
    ) -> Result<Status> {
        // SAFETY: `bytes` stays borrowed until the receive completes: waited below.
        let buf = unsafe { UserBuf::from_mut_slice(bytes) };
        let id = self.start_recv(buf, src, tag, context, pattern)?;
        self.wait_raw(id)
    }

    /// Simultaneous send and receive (deadlock-free exchange), on `context`. Receives of up
    /// to [`SEND_FIRST_MAX`] bytes are posted after the send.
    #[allow(unsafe_code)]
    pub(crate) fn sendrecv_bytes(
        &self,
        (send, dest, send_tag): (&[u8], usize, i32),
        (recv, src, recv_tag): (&mut [u8], Src, i32),
        context: ContextId,
        pattern: CommPattern,
    ) -> Result<Status> {
        // SAFETY: both buffers stay borrowed until both transfers completed: every path below
        // waits for what it started before returning.
        let send = unsafe { UserBuf::from_slice(send) };
        if recv.len() <= SEND_FIRST_MAX {
            // A short message that arrives before its receive is posted costs one small copy;
            // sending first takes the posting out of the exchange's critical path.
            let s =
                self.start_send_fast(send, dest, send_tag, context, SendMode::Standard, pattern)?;
            let rs = self.recv_bytes(recv, src, recv_tag, context, pattern);
            self.wait_send(s)?;
            return rs;
        }
        // SAFETY: as for `send` above.
        let recv = unsafe { UserBuf::from_mut_slice(recv) };
        let r = self.start_recv(recv, src, recv_tag, context, pattern)?;
        let s = self.start_send_fast(send, dest, send_tag, context, SendMode::Standard, pattern);
        // Whatever happens to the send, the receive must finish before `recv` is released.
        let rs = self.wait_raw(r);
        self.wait_send(s?)?;
        rs
    }

    // ---- typed point-to-point ----

    /// Start a send of typed elements on the point-to-point context.
    ///
    /// # Safety
    /// `buf` must stay borrowed until the send completes (waited for, or lent for a scope).
    #[inline]
    #[allow(unsafe_code)]
    unsafe fn start_typed_send<T: bytemuck::Pod>(
        &self,
        buf: &[T],
        dest: usize,
        tag: i32,
        mode: SendMode,
        pattern: CommPattern,
    ) -> Result<SendStart> {
        // SAFETY: the caller's contract.
        let bytes = unsafe { UserBuf::from_slice(bytemuck::cast_slice(buf)) };
        self.start_send_fast(bytes, dest, tag, self.inner.context, mode, pattern)
    }

    /// Start a receive of typed elements on the point-to-point context.
    ///
    /// # Safety
    /// `buf` must stay borrowed until the receive completes (waited for, or lent for a scope).
    #[inline]
    #[allow(unsafe_code)]
    unsafe fn start_typed_recv<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        source: Src,
        tag: i32,
        pattern: CommPattern,
    ) -> Result<RequestId> {
        // SAFETY: the caller's contract.
        let bytes = unsafe { UserBuf::from_mut_slice(bytemuck::cast_slice_mut(buf)) };
        self.start_recv(bytes, source, tag, self.inner.context, pattern)
    }

    /// Blocking standard-mode send. A send to [`crate::PROC_NULL`] returns at once.
    #[inline]
    #[allow(unsafe_code)]
    pub fn send<T: bytemuck::Pod>(&self, buf: &[T], dest: impl Into<Dest>, tag: i32) -> Result<()> {
        let Some(dest) = Self::dest(dest.into(), tag)? else {
            return Ok(());
        };
        // SAFETY: `buf` stays borrowed until the send completes: waited below.
        let started = unsafe {
            self.start_typed_send(buf, dest, tag, SendMode::Standard, CommPattern::Blocking)?
        };
        self.wait_send(started)
    }

    /// Blocking synchronous send: returns once the receiver has matched the message.
    #[allow(unsafe_code)]
    pub fn ssend<T: bytemuck::Pod>(
        &self,
        buf: &[T],
        dest: impl Into<Dest>,
        tag: i32,
    ) -> Result<()> {
        let Some(dest) = Self::dest(dest.into(), tag)? else {
            return Ok(());
        };
        // SAFETY: `buf` stays borrowed until the send completes: waited below.
        let started = unsafe {
            self.start_typed_send(buf, dest, tag, SendMode::Synchronous, CommPattern::Blocking)?
        };
        self.wait_send(started)
    }

    /// Blocking receive. A message longer than `buf` fills `buf` and returns
    /// [`Error::Status`] with [`pml::StatusError::Truncated`]; nothing is written past `buf`.
    /// A receive from [`crate::PROC_NULL`] returns [`Status::PROC_NULL`] at once.
    #[inline]
    #[allow(unsafe_code)]
    pub fn recv<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        source: impl Into<Src>,
        tag: i32,
    ) -> Result<Status> {
        let source = source.into();
        if self.is_null_source(source, tag)? {
            return Ok(Status::PROC_NULL);
        }
        // SAFETY: `buf` stays borrowed until the receive completes: waited below.
        let id = unsafe { self.start_typed_recv(buf, source, tag, CommPattern::Blocking)? };
        self.wait_raw(id)
    }

    /// Is `source` [`crate::PROC_NULL`]? Checks the tag and the source's sign either way.
    fn is_null_source(&self, source: Src, tag: i32) -> Result<bool> {
        Self::tag_sel(tag)?;
        match source {
            Src::Null => Ok(true),
            Src::Negative(r) => Err(Error::NegativeRank(r)),
            Src::Any | Src::Rank(_) => Ok(false),
        }
    }

    /// Non-blocking send; `buf` stays borrowed until the end of `scope` (see [`crate::scope`]).
    #[inline]
    pub fn isend<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s [T],
        dest: impl Into<Dest>,
        tag: i32,
    ) -> Result<Request<'s>> {
        self.start_send_request(scope, buf, dest.into(), tag, SendMode::Standard)
    }

    /// Non-blocking synchronous send; `buf` stays borrowed until the end of `scope`.
    pub fn issend<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s [T],
        dest: impl Into<Dest>,
        tag: i32,
    ) -> Result<Request<'s>> {
        self.start_send_request(scope, buf, dest.into(), tag, SendMode::Synchronous)
    }

    #[inline]
    #[allow(unsafe_code)]
    fn start_send_request<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s [T],
        dest: Dest,
        tag: i32,
        mode: SendMode,
    ) -> Result<Request<'s>> {
        let Some(dest) = Self::dest(dest, tag)? else {
            return Ok(Request::done(Status::PROC_NULL));
        };
        // SAFETY: `buf` is borrowed for the scope, which waits for the request before it ends
        // (even if the request is forgotten).
        let started =
            unsafe { self.start_typed_send(buf, dest, tag, mode, CommPattern::NonBlocking)? };
        Ok(scope.started_send(self, started, dest, tag, std::mem::size_of_val(buf)))
    }

    /// Non-blocking receive; `buf` stays borrowed until the end of `scope` (see
    /// [`crate::scope`]).
    #[inline]
    #[allow(unsafe_code)]
    pub fn irecv<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        source: impl Into<Src>,
        tag: i32,
    ) -> Result<Request<'s>> {
        let source = source.into();
        if self.is_null_source(source, tag)? {
            return Ok(Request::done(Status::PROC_NULL));
        }
        // SAFETY: `buf` is borrowed for the scope, which waits for the request before it ends
        // (even if the request is forgotten).
        let id = unsafe { self.start_typed_recv(buf, source, tag, CommPattern::NonBlocking)? };
        Ok(scope.pending(self, id))
    }

    /// Send and receive at once (no deadlock whatever the peers' order). Either side may be
    /// [`crate::PROC_NULL`].
    pub fn sendrecv<S: bytemuck::Pod, R: bytemuck::Pod>(
        &self,
        send: &[S],
        dest: impl Into<Dest>,
        send_tag: i32,
        recv: &mut [R],
        source: impl Into<Src>,
        recv_tag: i32,
    ) -> Result<Status> {
        let source = source.into();
        let recv_null = self.is_null_source(source, recv_tag)?;
        let Some(dest) = Self::dest(dest.into(), send_tag)? else {
            return if recv_null {
                Ok(Status::PROC_NULL)
            } else {
                self.recv(recv, source, recv_tag)
            };
        };
        if recv_null {
            self.send(send, dest, send_tag)?;
            return Ok(Status::PROC_NULL);
        }
        self.sendrecv_bytes(
            (bytemuck::cast_slice(send), dest, send_tag),
            (bytemuck::cast_slice_mut(recv), source, recv_tag),
            self.inner.context,
            CommPattern::Blocking,
        )
    }

    /// Is a matching message waiting? Does not receive it. A probe of [`crate::PROC_NULL`]
    /// finds [`Status::PROC_NULL`] at once.
    pub fn iprobe(&self, source: impl Into<Src>, tag: i32) -> Result<Option<Status>> {
        let tag = Self::tag_sel(tag)?;
        let Some(source) = self.source(source.into())? else {
            return Ok(Some(Status::PROC_NULL));
        };
        let ctx = self.inner.context;
        let st = self.inner.shared.with(|rt| {
            if let Some(st) = rt.pml.iprobe(ctx, source, tag)? {
                return Ok(Some(st));
            }
            rt.progress();
            Ok(rt.pml.iprobe(ctx, source, tag)?)
        })?;
        if st.is_none() {
            // A probing loop progresses non-blocking collectives too.
            self.shared().step_collectives();
        }
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
