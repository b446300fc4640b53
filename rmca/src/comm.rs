//! Communicators, point-to-point calls and requests.

use std::rc::Rc;

use rmca_framework::btl::CommPattern;
use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{
    self, ContextId, RecvArgs, RequestId, SendArgs, SendMode, SendStart, Source, TagSel,
};
use rmca_framework::rank::Rank;

use crate::group::{Comparison, Group};
use crate::request::{Lent, Persistent, PersistentOp, Request, Scope};
use crate::{Dest, Error, Result, Shared, SplitColor, Src, ANY_TAG};

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
    /// The operation was cancelled ([`crate::Request::cancel`]) and moved no data
    /// (`MPI_Test_cancelled`); `source` and `tag` then mean nothing.
    pub cancelled: bool,
}

impl Status {
    /// The status of an operation on [`crate::PROC_NULL`]: source [`Status::PROC_NULL_SOURCE`],
    /// tag [`ANY_TAG`], no bytes (as MPI reports it).
    pub const PROC_NULL: Status = Status {
        source: Status::PROC_NULL_SOURCE,
        tag: ANY_TAG,
        bytes: 0,
        cancelled: false,
    };

    /// The status of a completed send to `dest`.
    pub(crate) fn sent(dest: usize, tag: i32, bytes: usize) -> Self {
        Status {
            source: dest,
            tag,
            bytes,
            cancelled: false,
        }
    }

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
    pub(crate) inner: Rc<CommInner>,
}

pub(crate) struct CommInner {
    pub(crate) shared: Rc<Shared>,
    /// Context id of point-to-point traffic; collectives use `context + 1`.
    pub(crate) context: ContextId,
    /// World rank of each communicator rank: the ranks point-to-point calls address (for an
    /// intercommunicator, the remote group, so that sends and statuses translate through it
    /// exactly as an intra-communicator's do).
    pub(crate) group: Box<[Rank]>,
    /// This process's rank (in the local group, for an intercommunicator).
    pub(crate) rank: usize,
    /// `group[i] == i` for every rank (world and its dups): rank translation is free.
    pub(crate) identity: bool,
    /// Collective schedules and scratch memory kept between calls.
    pub(crate) coll: crate::coll::CollCache,
    /// The local side of an intercommunicator (`None`: an intra-communicator).
    pub(crate) inter: Option<Box<crate::intercomm::InterPart>>,
    /// (world rank, communicator rank) sorted by world rank: every received message's source
    /// is translated through it on a communicator that is not the identity (a linear search
    /// of `group` per message would cost O(size)). Made on first use by a large one.
    pub(crate) rank_index: std::cell::OnceCell<Box<[(Rank, u32)]>>,
    /// The ownership of `context` when a blocking constructor agreed on it: dropped after
    /// the communicator's own drop (buffered sends drained), it gives the id back.
    #[allow(dead_code)] // held for its Drop
    pub(crate) lease: Option<crate::context_id::Lease>,
}

impl CommInner {
    /// An intra-communicator of `group` (world rank of each member) on `context`, seen from
    /// member `rank`: no collective state yet, no context lease, no remote group. The
    /// builders below add what a constructor has more of.
    pub(crate) fn intra(
        shared: Rc<Shared>,
        context: ContextId,
        group: Box<[Rank]>,
        rank: usize,
    ) -> Self {
        CommInner {
            identity: is_identity(&group),
            shared,
            context,
            group,
            rank,
            coll: Default::default(),
            inter: None,
            rank_index: Default::default(),
            lease: None,
        }
    }

    /// Holds `lease`, the agreed ownership of the context, given back after the drop.
    pub(crate) fn leased(mut self, lease: crate::context_id::Lease) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Starts from `coll` (a dup's inherited collective state, which keeps the topology).
    pub(crate) fn with_coll(mut self, coll: crate::coll::CollCache) -> Self {
        self.coll = coll;
        self
    }

    /// Makes it an intercommunicator: `self.group` is the remote group, `local` the local one.
    pub(crate) fn with_local(mut self, local: Communicator) -> Self {
        self.inter = Some(Box::new(crate::intercomm::InterPart { local }));
        self
    }
}

/// Whether `group[i] == i` for every member (world and its dups): rank translation is free.
pub(crate) fn is_identity(group: &[Rank]) -> bool {
    group.iter().enumerate().all(|(i, &w)| w as usize == i)
}

/// The rank of world rank `world` in `group` (`usize::MAX` when it is not a member), through
/// `index` (see [`CommInner::rank_index`]) for a large group.
fn rank_in_group(
    group: &[Rank],
    index: &std::cell::OnceCell<Box<[(Rank, u32)]>>,
    world: Rank,
) -> usize {
    // Below this size a scan of the group is as fast as a search of the index.
    const SCANNED: usize = 32;
    if group.len() <= SCANNED {
        return group.iter().position(|&w| w == world).unwrap_or(usize::MAX);
    }
    let index = index.get_or_init(|| {
        let mut by_world: Vec<(Rank, u32)> = group
            .iter()
            .enumerate()
            .map(|(i, &w)| (w, i as u32))
            .collect();
        by_world.sort_unstable();
        by_world.into_boxed_slice()
    });
    index
        .binary_search_by_key(&world, |&(w, _)| w)
        .map_or(usize::MAX, |i| index[i].1 as usize)
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
        Self::new(CommInner::intra(
            shared,
            0,
            (0..size).collect(),
            rank as usize,
        ))
    }

    pub(crate) fn new(inner: CommInner) -> Self {
        Self {
            inner: Rc::new(inner),
        }
    }

    /// How many handles (clones, weak ones included) refer to this communicator.
    pub(crate) fn handle_count(&self) -> usize {
        Rc::strong_count(&self.inner) + Rc::weak_count(&self.inner)
    }

    /// The runtime this communicator belongs to.
    pub(crate) fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// The runtime this communicator belongs to, shared.
    pub(crate) fn shared_rc(&self) -> &Rc<Shared> {
        &self.inner.shared
    }

    /// Are `self` and `other` handles of the same communicator?
    #[inline]
    pub(crate) fn same(&self, other: &Communicator) -> bool {
        Rc::ptr_eq(&self.inner, &other.inner)
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

    // Inlined: the status of every completed operation is translated here.
    #[inline]
    fn comm_rank_of(&self, world: Rank) -> usize {
        if self.inner.identity {
            return world as usize;
        }
        rank_in_group(&self.inner.group, &self.inner.rank_index, world)
    }

    pub(crate) fn coll_context(&self) -> ContextId {
        self.inner.context + 1
    }

    // Inlined: every completed operation's status passes here (callgrind: 23 instructions
    // per message as a call in OSU's window).
    #[inline]
    pub(crate) fn to_status(&self, st: &pml::Status) -> Status {
        Status {
            source: self.comm_rank_of(st.source),
            tag: st.tag,
            bytes: st.len,
            cancelled: false,
        }
    }

    #[inline]
    pub(crate) fn finish(&self, st: pml::Status) -> Result<Status> {
        let mut status = self.to_status(&st);
        match st.error {
            None => Ok(status),
            // As in MPI, a cancelled request completes normally; its status says so.
            Some(error) if *error == pml::StatusError::Cancelled => {
                status.cancelled = true;
                Ok(status)
            }
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

    /// Start a send through the PML (always a request; the typed calls' staged sends).
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

    /// Start a send of `buf` on the point-to-point context (a persistent request's run).
    pub(crate) fn start_send_bytes(
        &self,
        buf: UserBuf,
        dest: usize,
        tag: i32,
        mode: SendMode,
        pattern: CommPattern,
    ) -> Result<SendStart> {
        self.start_send_fast(buf, dest, tag, self.inner.context, mode, pattern)
    }

    /// Post a receive into `buf` on the point-to-point context (a persistent request's run).
    pub(crate) fn start_recv_bytes(
        &self,
        buf: UserBuf,
        source: Src,
        tag: i32,
    ) -> Result<RequestId> {
        self.start_recv(
            buf,
            source,
            tag,
            self.inner.context,
            CommPattern::NonBlocking,
        )
    }

    /// Finish a send started by [`Communicator::start_send_fast`].
    #[inline]
    fn wait_send(&self, started: SendStart) -> Result<()> {
        match started {
            SendStart::Done => Ok(()),
            SendStart::Pending(id) => self.wait_raw(id).map(|_| ()),
        }
    }

    #[inline(always)]
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

    /// Blocking standard send of raw bytes on `context`.
    #[allow(unsafe_code)]
    pub(crate) fn send_bytes(
        &self,
        bytes: &[u8],
        dest: usize,
        tag: i32,
        context: ContextId,
        pattern: CommPattern,
    ) -> Result<()> {
        // SAFETY: `bytes` stays borrowed until the send completes: waited below.
        let buf = unsafe { UserBuf::from_slice(bytes) };
        let started = self.start_send_fast(buf, dest, tag, context, SendMode::Standard, pattern)?;
        self.wait_send(started)
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

    /// Buffered send (`MPI_Bsend`): the message is copied into the buffer attached to this
    /// communicator ([`Communicator::attach_buffer`]), else the one attached with
    /// [`crate::Universe::buffer_attach`], and sent from there, so this returns at once, even
    /// for a message the receiver has not asked for yet. Fails with
    /// [`Error::BsendBufferFull`] (sending nothing) when the buffer has no room left, and
    /// with [`Error::InvalidArgument`] when none is attached. A send to
    /// [`crate::PROC_NULL`] returns at once.
    pub fn bsend<T: bytemuck::Pod>(
        &self,
        buf: &[T],
        dest: impl Into<Dest>,
        tag: i32,
    ) -> Result<()> {
        let Some(dest) = Self::dest(dest.into(), tag)? else {
            return Ok(());
        };
        let args = self.send_args(
            UserBuf::empty(),
            dest,
            tag,
            self.inner.context,
            SendMode::Standard,
            CommPattern::NonBlocking,
        )?;
        self.bsend_copy(bytemuck::cast_slice(buf), |rt, copy| {
            Ok(rt.pml.start_send(SendArgs { buf: copy, ..args })?)
        })
    }

    /// Blocking send of one value (`send(std::slice::from_ref(value), ..)`).
    ///
    /// A separate call rather than a `send` generic over "a value or a slice": with a generic
    /// buffer parameter, `&Vec<T>` and `&[T; N]` arguments would no longer coerce to `&[T]`
    /// (an array would even be sent as one value), so existing calls would change meaning or
    /// stop compiling.
    pub fn send_value<T: bytemuck::Pod>(
        &self,
        value: &T,
        dest: impl Into<Dest>,
        tag: i32,
    ) -> Result<()> {
        self.send(std::slice::from_ref(value), dest, tag)
    }

    /// Blocking receive of one value. A message of another size is an error: longer ones
    /// [`pml::StatusError::Truncated`] as for [`Communicator::recv`], shorter ones
    /// [`Error::InvalidArgument`] naming both sizes. A receive from [`crate::PROC_NULL`]
    /// returns `T::zeroed()` with [`Status::PROC_NULL`].
    pub fn recv_value<T: bytemuck::Pod>(
        &self,
        source: impl Into<Src>,
        tag: i32,
    ) -> Result<(T, Status)> {
        let mut value = T::zeroed();
        let status = self.recv(std::slice::from_mut(&mut value), source, tag)?;
        let want = std::mem::size_of::<T>();
        if !status.is_proc_null() && status.bytes != want {
            return Err(Error::InvalidArgument(format!(
                "recv_value: the message from rank {} (tag {}) has {} bytes, a value of this type has {want}",
                status.source, status.tag, status.bytes
            )));
        }
        Ok((value, status))
    }

    // ---- persistent requests ----

    /// The checked destination of a persistent send (`None`: `PROC_NULL`).
    fn persistent_send(&self, dest: Dest, tag: i32, mode: SendMode) -> Result<PersistentOp> {
        let dest = Self::dest(dest, tag)?;
        if let Some(d) = dest {
            self.world_rank(d)?;
        }
        Ok(PersistentOp::Send { dest, tag, mode })
    }

    /// A persistent standard-mode send of `buf` (`MPI_Send_init`): arguments checked now,
    /// each [`Persistent::start`] sends the buffer's current contents. `buf` stays borrowed
    /// (read-only) for the scope; see [`Persistent`].
    pub fn send_init<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s [T],
        dest: impl Into<Dest>,
        tag: i32,
    ) -> Result<Persistent<'s, T>> {
        let op = self.persistent_send(dest.into(), tag, SendMode::Standard)?;
        Ok(scope.persistent(self, Lent::Shared(buf), op))
    }

    /// [`Communicator::send_init`] with the buffer borrowed exclusively, so that it can be
    /// rewritten between runs with [`Persistent::data_mut`].
    pub fn send_init_mut<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        dest: impl Into<Dest>,
        tag: i32,
    ) -> Result<Persistent<'s, T>> {
        let op = self.persistent_send(dest.into(), tag, SendMode::Standard)?;
        Ok(scope.persistent(self, Lent::Exclusive(buf), op))
    }

    /// A persistent synchronous send (`MPI_Ssend_init`): each run completes once the receiver
    /// matched it.
    pub fn ssend_init<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s [T],
        dest: impl Into<Dest>,
        tag: i32,
    ) -> Result<Persistent<'s, T>> {
        let op = self.persistent_send(dest.into(), tag, SendMode::Synchronous)?;
        Ok(scope.persistent(self, Lent::Shared(buf), op))
    }

    /// A persistent receive into `buf` (`MPI_Recv_init`): arguments checked now, each
    /// [`Persistent::start`] posts the receive. Read the message with [`Persistent::data`]
    /// after each run; see [`Persistent`].
    pub fn recv_init<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        source: impl Into<Src>,
        tag: i32,
    ) -> Result<Persistent<'s, T>> {
        let source = source.into();
        let source = if self.is_null_source(source, tag)? {
            None
        } else {
            self.source(source)?;
            Some(source)
        };
        Ok(scope.persistent(
            self,
            Lent::Exclusive(buf),
            PersistentOp::Recv { source, tag },
        ))
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
        let mut backoff = rmca_framework::progress::ReleasingBackoff::default();
        loop {
            if let Some(st) = self.iprobe(source, tag)? {
                return Ok(st);
            }
            // The pass made progress inside test/iprobe; its event count is not known here.
            backoff.pass(0);
        }
    }

    // ---- communicator management ----

    /// Agree with the other processes of a parent on `want` new context ids
    /// (`crate::context_id`): `key` is the same on every member (the parent's context),
    /// `member` says whether this process joins the new communicator (takes the ids),
    /// `parties` is how many processes agree, and `reduce` returns the bitwise AND of its
    /// argument over every one of them.
    pub(crate) fn agree_contexts(
        &self,
        parties: usize,
        key: u64,
        want: usize,
        member: bool,
        mut reduce: impl FnMut(&[u64]) -> Result<Vec<u64>>,
    ) -> Result<Vec<crate::context_id::Lease>> {
        use crate::context_id::{Lease, Step};
        let ids = self.inner.shared.context_ids.clone();
        if parties == 1 {
            // This process alone: no collective, and no wait for other agreements.
            let mut backoff = rmca_framework::progress::ReleasingBackoff::default();
            loop {
                let got = ids.borrow_mut().take_local(if member { want } else { 0 });
                if let Some(contexts) = got {
                    return Ok(contexts
                        .into_iter()
                        .map(|c| Lease::new(ids.clone(), c))
                        .collect());
                }
                if ids.borrow().all_used() {
                    return Err(crate::context_id::AgreementError::Exhausted {
                        slots: crate::context_id::SLOTS,
                    }
                    .into());
                }
                // Every free id is held by rounds of other threads' agreements.
                crate::raw::progress(self);
                backoff.pass(0);
            }
        }
        let (mut a, mut words) = ids.borrow_mut().begin(key, want, member);
        loop {
            // No borrow of the table across the collective: other threads' agreements (and
            // dropped communicators) use it while this one waits.
            let reduced = match reduce(&words) {
                Ok(r) => r,
                Err(e) => {
                    ids.borrow_mut().abandon(&mut a);
                    return Err(e);
                }
            };
            let step = ids.borrow_mut().on_reduced(&mut a, &reduced)?;
            match step {
                Step::Round(w) => words = w,
                Step::Agreed(contexts) => {
                    if a.rounds() > 1 {
                        tracing::debug!(
                            rounds = a.rounds(),
                            ?contexts,
                            "context ids agreed after retries"
                        );
                    }
                    return Ok(contexts
                        .into_iter()
                        .map(|c| Lease::new(ids.clone(), c))
                        .collect());
                }
            }
        }
    }

    /// [`Communicator::agree_contexts`] over this intra-communicator, keyed by its context.
    fn agree_over_self(&self, want: usize, member: bool) -> Result<Vec<crate::context_id::Lease>> {
        let key = u64::from(self.inner.context);
        self.agree_contexts(self.size(), key, want, member, |words| {
            let mut and = vec![0u64; words.len()];
            self.allreduce(words, &mut and, crate::coll::Op::BitAnd)?;
            Ok(and)
        })
    }

    /// A communicator with the same processes and an isolated matching space. Collective:
    /// every member must call it, in the same order relative to other dup/split/create calls
    /// (an allreduce of the members' masks of free context ids agrees on the new one: one
    /// round unless other constructors run on other threads at once).
    pub fn dup(&self) -> Result<Communicator> {
        if self.is_inter() {
            return self.inter_dup();
        }
        let lease = self.agree_over_self(1, true)?.pop().expect("one id agreed");
        let inner = &self.inner;
        Ok(Communicator::new(
            CommInner::intra(
                inner.shared.clone(),
                lease.context(),
                inner.group.clone(),
                inner.rank,
            )
            // A dup keeps the topology (MPI).
            .with_coll(inner.coll.inherited())
            .leased(lease),
        ))
    }

    /// Partition the communicator by `color` (ranks ordered by `key`, then by old rank).
    /// `color = None` leaves this process out (returns `None`). Collective.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Communicator>> {
        self.split_with(color.into(), key)
    }

    /// [`Communicator::split`] with the colour as the caller got it: a
    /// [`SplitColor::Invalid`] one on any member makes every member refuse the split (an
    /// [`Error::InvalidArgument`] naming the first such rank) after the split's one
    /// exchange of (colour, key), so none waits for a member that refused alone; nothing is
    /// made and the communicator is unchanged.
    pub fn split_with(&self, color: SplitColor, key: i32) -> Result<Option<Communicator>> {
        if self.is_inter() {
            return self.inter_split(color, key);
        }
        let mine = [color.word(), i64::from(key)];
        let mut all = vec![[0i64; 2]; self.size()];
        crate::coll::allgather_into(self, &mine, bytemuck::cast_slice_mut(&mut all))?;
        crate::split::refuse_invalid("", all.iter().map(|e| e[0]))?;
        let color = match color {
            SplitColor::Of(c) => Some(c),
            _ => None,
        };
        // One id for every color: the new communicators are disjoint.
        let lease = self.agree_over_self(1, color.is_some())?.pop();
        let (Some(color), Some(lease)) = (color, lease) else {
            return Ok(None);
        };
        let members = crate::split::members_of(color, all.iter().map(|e| (e[0], e[1])));
        let group: Vec<Rank> = members.iter().map(|&r| self.inner.group[r]).collect();
        let rank = members
            .iter()
            .position(|&r| r == self.inner.rank)
            .expect("caller is a member of its color");
        Ok(Some(Communicator::new(
            CommInner::intra(
                self.inner.shared.clone(),
                lease.context(),
                group.into(),
                rank,
            )
            .leased(lease),
        )))
    }

    /// The communicator's group: its processes in rank order (`MPI_Comm_group`). Local.
    pub fn group(&self) -> Group {
        if let Some(inter) = &self.inner.inter {
            return inter.local.group();
        }
        Group::from_world_ranks(self.inner.group.to_vec(), self.inner.group[self.inner.rank])
    }

    /// A communicator of the members of `group`, ranked in the group's order
    /// (`MPI_Comm_create`). Collective over `self`: every member of `self` calls it with a
    /// subset of `self`'s group; the members of `group` get `Some`, the others `None`. As
    /// since MPI 2.2, processes may pass different groups if they are disjoint and every
    /// member of a group passes that group (e.g. each process its own part of a partition):
    /// one call makes one communicator per group. The groups are compared (one allgather of
    /// their fingerprints) so that a disagreement is an error rather than a hang.
    pub fn create(&self, group: &Group) -> Result<Option<Communicator>> {
        if self.is_inter() {
            return self.inter_create(group);
        }
        let members = group.world_ranks();
        // Checked before any communication, the same way on every process (the group is
        // the same everywhere, or the allgather below reports it).
        let mut in_self = vec![false; self.size()];
        let mut check = Ok(());
        for &w in members {
            match self.inner.group.iter().position(|&m| m == w) {
                Some(r) => in_self[r] = true,
                None => {
                    check = Err(Error::InvalidArgument(format!(
                        "Communicator::create: world rank {w} of the group is not in this communicator"
                    )));
                    break;
                }
            }
        }
        // FNV-1a over the members, plus a flag for a group that failed the check.
        let mut fingerprint: u64 = 0xcbf2_9ce4_8422_2325;
        for b in members.iter().flat_map(|w| w.to_le_bytes()) {
            fingerprint ^= u64::from(b);
            fingerprint = fingerprint.wrapping_mul(0x0100_0000_01b3);
        }
        let mine = [fingerprint, members.len() as u64, u64::from(check.is_err())];
        let mut all = vec![[0u64; 3]; self.size()];
        crate::coll::allgather_into(self, &mine, bytemuck::cast_slice_mut(&mut all))?;
        check?;
        if let Some(r) = all.iter().position(|e| e[2] != 0) {
            return Err(Error::InvalidArgument(format!(
                "Communicator::create: rank {r} passed a group that is not a subset of this communicator"
            )));
        }
        // Since MPI 2.2 each process may pass a different group, as long as the groups are
        // disjoint and every member of a group passes that same group: checked for the
        // members of the group this process passed.
        if let Some(r) = (0..self.size()).find(|&r| in_self[r] && all[r][..2] != mine[..2]) {
            // Found here only: the members of other, consistent groups go on to agree on
            // their ids over this whole communicator, so this process still takes part (taking
            // none) before it reports the error; otherwise they would wait for it forever.
            self.agree_over_self(1, false)?;
            return Err(Error::InvalidArgument(format!(
                "Communicator::create: rank {r}, a member of the group passed here, passed another group (every member of a group must pass the same group)"
            )));
        }
        // Every member of `self` takes part; those outside the group take no id.
        let lease = self.agree_over_self(1, group.rank().is_some())?.pop();
        let (Some(rank), Some(lease)) = (group.rank(), lease) else {
            return Ok(None);
        };
        Ok(Some(Communicator::new(
            CommInner::intra(
                self.inner.shared.clone(),
                lease.context(),
                members.into(),
                rank,
            )
            .leased(lease),
        )))
    }

    /// How this communicator relates to `other` (`MPI_Comm_compare`):
    /// [`Comparison::Identical`] for the same communicator (a clone: one matching space),
    /// [`Comparison::Congruent`] for the same processes in the same order (e.g. a
    /// [`Communicator::dup`]), [`Comparison::Similar`] for the same processes in another
    /// order, [`Comparison::Unequal`] otherwise. Local.
    pub fn compare(&self, other: &Communicator) -> Comparison {
        if Rc::ptr_eq(&self.inner, &other.inner) {
            return Comparison::Identical;
        }
        if self.is_inter() || other.is_inter() {
            return self.inter_compare(other);
        }
        match self.group().compare(&other.group()) {
            Comparison::Identical if self.inner.context == other.inner.context => {
                Comparison::Identical
            }
            Comparison::Identical => Comparison::Congruent,
            c => c,
        }
    }
}

#[cfg(test)]
mod rank_index_tests {
    use super::*;

    #[test]
    fn the_index_answers_as_a_scan_of_the_group() {
        // Groups on both sides of the scan threshold, in a scrambled order, with world ranks
        // that are not members.
        for size in [1usize, 5, 32, 33, 100, 1000] {
            let group: Vec<Rank> = (0..size as Rank)
                .map(|i| (i * 7919 + 13) % 100_003)
                .collect();
            let index = std::cell::OnceCell::new();
            for world in group.iter().copied().chain([1, 2, 100_002, Rank::MAX]) {
                let want = group.iter().position(|&w| w == world).unwrap_or(usize::MAX);
                assert_eq!(
                    rank_in_group(&group, &index, world),
                    want,
                    "size {size} world {world}"
                );
            }
            assert_eq!(
                index.get().is_some(),
                size > 32,
                "index made only for a large group"
            );
        }
    }
}
