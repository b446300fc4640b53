//! Non-blocking operations on raw memory, for foreign-language bindings.
//!
//! [`crate::scope`] ties a request's buffer to a Rust borrow, which is what makes the safe API
//! sound. A binding for C has no such scope: an `MPI_Request` outlives every Rust frame, and
//! its buffer is memory the C program owns. This module lends such memory to the PML through
//! `unsafe` calls whose contract is the C one: the caller keeps the buffer valid, and leaves it
//! alone, until the request completed ([`RawRequest::wait`], or [`RawRequest::test`] reporting
//! completion).
//!
//! A [`RawRequest`] does not take part in the scope accounting of [`crate::Universe`]'s
//! finalize: complete every raw request before finalizing (MPI requires the same of its
//! programs). Dropping an outstanding [`RawRequest`] waits for it, so that its buffer is never
//! written after the request is gone.
//!
//! The non-blocking collectives ([`ibarrier`], [`ibcast`], [`ireduce`], [`iallreduce`],
//! [`igather`], [`iscatter`], [`iallgather`], [`ialltoall`], and over byte regions
//! [`igatherv`], [`iscatterv`], [`iallgatherv`], [`ialltoallv`], [`ireduce_scatter`],
//! [`iscan`]) start the schedules of
//! [`crate::coll::nonblocking`] on the same executor, over raw memory: their requests are
//! [`RawRequest`]s too, completed by the same calls (a batch may mix them with point-to-point
//! requests), and follow that module's progress and matching rules. Their buffer contract is
//! the one above, for every buffer the call names, until the request completed: a send
//! buffer stays valid and unwritten, a receive buffer valid and otherwise unaccessed.
//!
//! On an intercommunicator, the `inter_*` functions ([`inter_ibcast`], ...) start the
//! intercommunicator forms of the same collectives.

use rmca_framework::btl::CommPattern;
use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{RequestId, SendArgs, SendMode, SendStart};

use std::ops::Range;

use crate::coll::nonblocking::ByteReduction;
use crate::coll::Reduction;
use crate::{Communicator, Error, Result, Src, Status};

mod inter;
pub use inter::*;

/// An outstanding operation started by [`isend`] or [`irecv`] on caller-owned memory.
#[must_use = "a raw request must be waited on or tested to completion"]
#[derive(Debug)]
pub struct RawRequest {
    state: RawState,
    comm: Communicator,
}

#[derive(Debug)]
enum RawState {
    /// In the PML.
    Pending(RequestId),
    /// Completed as it started (an eager send the BTL took at once): nothing in the PML.
    Done(Status),
    /// A non-blocking collective: its id among the runtime's active collectives.
    Coll(RequestId),
    /// An operation the binding drives itself ([`custom`]).
    Custom(Box<dyn CustomOp>),
    /// The outcome was handed out.
    Spent,
}

/// An operation a binding drives itself, completed by the same calls as the PML's
/// ([`RawRequest::wait`], [`RawRequest::test`], [`wait_all`], [`complete_all`], in batches
/// with the others): `MPI_Isendrecv`'s pair of operations, partitioned transfers, MPI's
/// generalized requests. Its [`CustomOp::poll`] is called between progress passes of the
/// runtime until it reports an outcome.
pub trait CustomOp: std::fmt::Debug {
    /// Make progress without blocking (the runtime's progress runs between calls); the
    /// outcome once the operation completed, after which it is not polled again.
    fn poll(&mut self) -> Option<Result<Status>>;

    /// Try to cancel (`MPI_Cancel`); whether it took effect (see [`RawRequest::cancel`]).
    fn cancel(&mut self) -> Result<bool> {
        Ok(false)
    }

    /// The operation, to reach its own calls (`MPI_Pready` on a partitioned send).
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
}

/// A request for `op`, on `comm` (the communicator whose runtime progresses while it is
/// waited for).
pub fn custom(comm: &Communicator, op: Box<dyn CustomOp>) -> RawRequest {
    RawRequest {
        state: RawState::Custom(op),
        comm: comm.clone(),
    }
}

/// Wait for `op` to complete, progressing the runtime of `comm` between polls.
fn wait_custom(comm: &Communicator, op: &mut dyn CustomOp) -> Result<Status> {
    let mut backoff = rmca_framework::progress::ReleasingBackoff::default();
    loop {
        if let Some(outcome) = op.poll() {
            return outcome;
        }
        let mut events = comm.shared().with(|rt| Ok(rt.progress()))?;
        events += comm.shared().step_collectives();
        backoff.pass(events);
    }
}

/// The outcome of [`RawRequest::test`].
#[derive(Debug)]
pub enum Polled {
    /// The operation completed with this outcome; the buffer is the caller's again.
    Done(Result<Status>),
    /// Still in progress; the request is handed back.
    Pending(RawRequest),
}

/// Start a non-blocking send of `len` bytes at `buf` to communicator rank `dest` with `tag`.
/// `mode` selects a standard or a synchronous send.
///
/// # Safety
/// `buf..buf+len` must be valid for reads (any pointer when `len` is 0) and must not be
/// written until the returned request completed.
#[allow(unsafe_code)]
#[inline]
pub unsafe fn isend(
    comm: &Communicator,
    buf: *const u8,
    len: usize,
    dest: usize,
    tag: i32,
    mode: SendMode,
) -> Result<RawRequest> {
    // SAFETY: the caller's contract, and the request below owns the operation.
    let state = match unsafe { start_isend(comm, buf, len, dest, tag, mode)? } {
        Started::Done => RawState::Done(Status::sent(dest, tag, len)),
        Started::Pending(id) => RawState::Pending(id.0),
    };
    Ok(RawRequest {
        state,
        comm: comm.clone(),
    })
}

/// An operation in the PML named by its identifier alone, for a binding that keeps its own
/// request table (the MPI C interface): it holds no communicator and has no drop glue, so a
/// table entry holding it is a few plain words, written and freed without any call.
///
/// Nothing waits for a `RawId` that is forgotten: whoever started the operation completes
/// it ([`RawBatch::complete`]) or hands it to an owning [`RawRequest`] ([`RawId::adopt`])
/// before the buffer it names is released (the start functions' safety contract).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawId(RequestId);

/// How a send started by [`start_isend`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Started {
    /// Completed as it started (an eager send a BTL took at once): nothing in the PML; its
    /// status is that of a successful send.
    Done,
    /// Running in the PML.
    Pending(RawId),
}

/// What a look at a [`RawId`] found ([`RawId::look`]): the usual outcome, a success, as a
/// plain status; anything else boxed, out of the completion calls' line (a
/// `Option<Result<Status>>` carried the runtime's error type through every test, and was
/// copied between stack slots on the way: about 20 instructions per `MPI_Test`, callgrind,
/// bench/osu-instructions.sh).
#[derive(Debug)]
pub enum Looked {
    /// Still running.
    Pending,
    /// Completed successfully (not cancelled); the id is released.
    Done(Status),
    /// Completed otherwise (failed, or cancelled), or the runtime is gone: the outcome; the
    /// id is released.
    Other(Box<Result<Status>>),
}

impl Looked {
    /// The look for an outcome `r` of a completed operation.
    #[inline]
    pub fn completed(r: Result<Status>) -> Self {
        match r {
            Ok(st) if !st.cancelled => Looked::Done(st),
            r => Looked::Other(Box::new(r)),
        }
    }
}

/// [`Looked`] for an operation the PML reported complete with a status that is not a plain
/// success, or for a PML error (the runtime's [`Error`] built here, out of line).
#[cold]
#[inline(never)]
fn looked_other(comm: &Communicator, polled: Result<rmca_framework::pml::Status>) -> Looked {
    Looked::Other(Box::new(polled.and_then(|st| comm.finish(st))))
}

impl RawId {
    /// Whether the operation completed, without a progress pass: [`RawId::test_now`] in the
    /// form the completion calls of a binding use ([`Looked`]).
    #[inline(always)]
    pub fn look(self, comm: &Communicator) -> Looked {
        let polled = match comm.shared().rt.borrow_mut().as_mut() {
            Some(rt) => rt.pml.test(self.0),
            None => return looked_other(comm, Err(Error::Finalized)),
        };
        match polled {
            Ok(None) => Looked::Pending,
            Ok(Some(st)) if st.error.is_none() => Looked::Done(comm.to_status(&st)),
            Ok(Some(st)) => looked_other(comm, Ok(st)),
            Err(e) => looked_other(comm, Err(e.into())),
        }
    }

    /// [`RawId::look`] with a progress pass if the operation had not completed at first
    /// ([`RawId::test`]'s form for [`Looked`]).
    #[inline(always)]
    pub fn look_progressed(self, comm: &Communicator) -> Looked {
        match self.look(comm) {
            Looked::Pending => look_after_progress(comm, self),
            done => done,
        }
    }

    /// The owning form of the operation, on `comm` (the communicator it was started on):
    /// completed by [`RawRequest`]'s calls, waited for when dropped.
    pub fn adopt(self, comm: &Communicator) -> RawRequest {
        RawRequest {
            state: RawState::Pending(self.0),
            comm: comm.clone(),
        }
    }

    /// Whether the operation completed, with a progress pass if it had not at first
    /// (`MPI_Test` on a request of the binding's own table, which holds no [`RawRequest`]):
    /// its outcome once it has, the id released and not to be used again; `None` while it
    /// runs. `comm` is the communicator it was started on.
    // The look without a pass in line (in a window, the later requests' usual case: one
    // pass delivered them all), the pass out of line: the whole test as a call of its own
    // cost a frame and its outcome through memory per MPI_Test (callgrind,
    // bench/osu-instructions.sh).
    #[inline(always)]
    pub fn test(self, comm: &Communicator) -> Option<Result<Status>> {
        match self.test_now(comm) {
            None => test_after_progress(comm, self.0),
            done => done,
        }
    }

    /// Block until the operation completes: its outcome; the id is released.
    #[inline]
    pub fn wait(self, comm: &Communicator) -> Result<Status> {
        comm.wait_raw(self.0)
    }

    /// [`RawId::test`] without the progress pass (the caller runs one for many operations:
    /// [`progress`]).
    #[inline(always)]
    pub fn test_now(self, comm: &Communicator) -> Option<Result<Status>> {
        // The PML's answer matched where it lands (through `Shared::with`, a `Result` of
        // the runtime's error type in between was copied twice more per test).
        let polled = match comm.shared().rt.borrow_mut().as_mut() {
            Some(rt) => rt.pml.test(self.0),
            None => return Some(Err(Error::Finalized)),
        };
        match polled {
            Ok(None) => None,
            Ok(Some(st)) => Some(comm.finish(st)),
            Err(e) => Some(Err(e.into())),
        }
    }
}

/// One progress pass of the runtime of `comm` (every communicator of a process shares it),
/// stepping the non-blocking collectives too: for a binding that tests many operations
/// with [`RawId::test_now`] after one pass. The number of events it handled.
pub fn progress(comm: &Communicator) -> usize {
    let events = comm.shared().with(|rt| Ok(rt.progress())).unwrap_or(0);
    events + comm.shared().step_collectives()
}

/// [`isend`] without the owning request: how it started.
///
/// # Safety
/// As [`isend`]; and the operation, if [`Started::Pending`], must be completed (or adopted)
/// before the buffer is written.
#[allow(unsafe_code)]
#[inline]
pub unsafe fn start_isend(
    comm: &Communicator,
    buf: *const u8,
    len: usize,
    dest: usize,
    tag: i32,
    mode: SendMode,
) -> Result<Started> {
    let ubuf = if len == 0 {
        UserBuf::empty()
    } else {
        // SAFETY: the caller's contract: valid for reads and unwritten until completion.
        unsafe { UserBuf::from_raw_parts(buf, len) }
    };
    if tag < 0 {
        return Err(Error::BadTag(tag));
    }
    // The PML's fast path: an eager message a BTL takes at once completes here, with no
    // request behind it (as the safe API's sends do).
    let started = comm.shared().start_send(SendArgs {
        buf: ubuf,
        dest: comm.world_rank(dest)?,
        tag,
        context: p2p_context(comm),
        mode,
        pattern: CommPattern::NonBlocking,
    })?;
    Ok(match started {
        SendStart::Done => Started::Done,
        SendStart::Pending(id) => Started::Pending(RawId(id)),
    })
}

/// A blocking send of `bytes` to communicator rank `dest` (not `PROC_NULL`: the caller
/// handles it) with `tag`, in `mode`: [`Communicator::send`]'s body for a binding that
/// checked its arguments already, so that the whole call inlines into the binding's entry
/// point (the generic, re-checking path costs a call frame and the checks twice).
#[inline(always)]
pub fn send(
    comm: &Communicator,
    bytes: &[u8],
    dest: usize,
    tag: i32,
    mode: SendMode,
) -> Result<()> {
    if tag < 0 {
        return Err(Error::BadTag(tag));
    }
    // SAFETY: `bytes` stays borrowed until the send completed: waited below.
    #[allow(unsafe_code)]
    let buf = unsafe { UserBuf::from_slice(bytes) };
    let started = comm.start_send_fast(
        buf,
        dest,
        tag,
        p2p_context(comm),
        mode,
        CommPattern::Blocking,
    )?;
    match started {
        SendStart::Done => Ok(()),
        SendStart::Pending(id) => comm.wait_raw(id).map(|_| ()),
    }
}

/// A blocking receive into `bytes` from `source` with `tag` ([`crate::ANY_TAG`] or not
/// negative): [`Communicator::recv`]'s body for a binding that checked its arguments already
/// (see [`send`]). From [`Src::Null`] it returns [`Status::PROC_NULL`] at once.
#[inline(always)]
pub fn recv(comm: &Communicator, bytes: &mut [u8], source: Src, tag: i32) -> Result<Status> {
    if let Src::Null = source {
        return Ok(Status::PROC_NULL);
    }
    // SAFETY: `bytes` stays borrowed until the receive completed: waited below.
    #[allow(unsafe_code)]
    let buf = unsafe { UserBuf::from_mut_slice(bytes) };
    let id = comm.start_recv(buf, source, tag, p2p_context(comm), CommPattern::Blocking)?;
    comm.wait_raw(id)
}

/// [`irecv`] without the owning request: the operation's identifier.
///
/// # Safety
/// As [`irecv`]; and the operation must be completed (or adopted) before the buffer is
/// released or accessed.
#[allow(unsafe_code)]
#[inline]
pub unsafe fn start_irecv(
    comm: &Communicator,
    buf: *mut u8,
    len: usize,
    source: Src,
    tag: i32,
) -> Result<RawId> {
    let ubuf = if len == 0 {
        UserBuf::empty()
    } else {
        // SAFETY: the caller's contract: valid for writes and unaccessed until completion.
        unsafe { UserBuf::from_raw_parts_mut(buf, len) }
    };
    let id = comm.start_recv(
        ubuf,
        source,
        tag,
        p2p_context(comm),
        CommPattern::NonBlocking,
    )?;
    Ok(RawId(id))
}

/// Operations waited for together ([`RawBatch::complete`]): `MPI_Waitall`'s batch. Kept by
/// the caller and reused, so that waiting on windows of requests in a loop allocates
/// nothing per call.
#[derive(Debug, Default)]
pub struct RawBatch {
    ids: Vec<RequestId>,
    failed: Vec<(usize, rmca_framework::pml::Status)>,
}

impl RawBatch {
    /// Add an operation to the batch (its position is the number added before it).
    #[inline]
    pub fn push(&mut self, id: RawId) {
        self.ids.push(id.0);
    }

    /// Empty the batch without waiting: its operations are left to whoever started them.
    pub fn clear(&mut self) {
        self.ids.clear();
    }

    /// Operations in the batch.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Wait until every operation of the batch completed (stepping the runtime's
    /// non-blocking collectives meanwhile), and empty it. Each one that failed is reported
    /// to `failed` with its position in the batch and its outcome; `comm_of(position)` names
    /// the communicator it ran on, to translate its status (failures are rare: nothing is
    /// asked of the others). Every communicator of a process shares one runtime, so `comm`
    /// may be any of them.
    pub fn complete<'c>(
        &mut self,
        comm: &Communicator,
        comm_of: impl Fn(usize) -> &'c Communicator,
        mut failed: impl FnMut(usize, Error),
    ) {
        if self.ids.is_empty() {
            return;
        }
        match comm.shared().wait_all_into(&self.ids, &mut self.failed) {
            Ok(()) => {
                for (k, st) in self.failed.drain(..) {
                    if let Err(e) = comm_of(k).finish(st) {
                        failed(k, e);
                    }
                }
            }
            Err(e) => {
                // Finalized: the PML is gone and writes into no buffer any more.
                let msg = e.to_string();
                for k in 0..self.ids.len() {
                    failed(k, Error::InvalidArgument(msg.clone()));
                }
            }
        }
        self.ids.clear();
    }

    /// [`RawBatch::complete`] reporting every operation's outcome (`MPI_Waitall` with an
    /// array of statuses): `report(position, outcome)` is called once for each operation of
    /// the batch, in batch order, its status translated by `comm_of(position)`.
    pub fn complete_each<'c>(
        &mut self,
        comm: &Communicator,
        comm_of: impl Fn(usize) -> &'c Communicator,
        mut report: impl FnMut(usize, Result<Status>),
    ) {
        if self.ids.is_empty() {
            return;
        }
        let outcome = comm
            .shared()
            .wait_all_statuses_into(&self.ids, &mut self.failed);
        // An id the PML did not know was skipped, and nothing was reported for any after a
        // finalize: those fail here (the PML writes into no buffer for them any more).
        let missed = match outcome {
            Err(e) if self.failed.len() < self.ids.len() => {
                let mut seen = vec![false; self.ids.len()];
                for (k, _) in &self.failed {
                    seen[*k] = true;
                }
                Some((seen, e.to_string()))
            }
            _ => None,
        };
        for (k, st) in self.failed.drain(..) {
            report(k, comm_of(k).finish(st));
        }
        if let Some((seen, msg)) = missed {
            for (k, _) in seen.iter().enumerate().filter(|(_, &s)| !s) {
                report(k, Err(Error::InvalidArgument(msg.clone())));
            }
        }
        self.ids.clear();
    }
}

/// Start a non-blocking receive of at most `len` bytes into `buf` from `source` (a rank or
/// [`crate::ANY_SOURCE`]; [`crate::PROC_NULL`] is refused: there is nothing to start) with
/// `tag` ([`crate::ANY_TAG`] for any).
///
/// # Safety
/// `buf..buf+len` must be valid for writes (any pointer when `len` is 0) and must not be
/// accessed by anyone else until the returned request completed.
#[allow(unsafe_code)]
#[inline]
pub unsafe fn irecv(
    comm: &Communicator,
    buf: *mut u8,
    len: usize,
    source: Src,
    tag: i32,
) -> Result<RawRequest> {
    // SAFETY: the caller's contract, and the request below owns the operation.
    let id = unsafe { start_irecv(comm, buf, len, source, tag)? };
    Ok(id.adopt(comm))
}

/// Start receiving `message` (taken by a matched probe, [`Communicator::improbe`]) into at
/// most `len` bytes at `buf` (`MPI_Imrecv`). The message of a probe of
/// [`crate::PROC_NULL`] gives a request complete at once with [`Status::PROC_NULL`].
///
/// # Safety
/// `buf..buf+len` must be valid for writes (any pointer when `len` is 0) and must not be
/// accessed by anyone else until the returned request completed.
#[allow(unsafe_code)]
pub unsafe fn imrecv(
    message: crate::mprobe::Message,
    buf: *mut u8,
    len: usize,
) -> Result<RawRequest> {
    let comm = message.communicator().clone();
    // SAFETY: the caller's contract, and the request below owns the operation.
    let state = match unsafe { message.start(buf, len)? } {
        Some(id) => RawState::Pending(id),
        None => RawState::Done(Status::PROC_NULL),
    };
    Ok(RawRequest { state, comm })
}

/// The lowest tag of MPI's partitioned communication (`MPI_Psend_init`, [`isend_partitioned`]):
/// its messages travel on the communicator's collective context, with tags in
/// `PARTITIONED_TAG_BASE..NB_TAG_BASE` (above the blocking collectives' tags, below the
/// non-blocking collectives' band), so that no receive or probe of the program matches them.
pub const PARTITIONED_TAG_BASE: i32 = 1 << 29;

thread_local! {
    /// Partitioned requests initialized so far, by (collective context, peer world rank,
    /// tag, sending): MPI matches the k-th `MPI_Psend_init` to a peer with a tag with the
    /// k-th `MPI_Precv_init` from it with that tag, whatever the order the transfers run.
    static PARTITIONED_INITS: std::cell::RefCell<std::collections::HashMap<(u32, u32, i32, bool), u32>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// The channel of a new partitioned request with communicator rank `peer` and `tag`
/// (`send`: a send to `peer`, else a receive from it): the tag its transfers use, the same
/// on both sides for the requests MPI matches (the k-th initialized on each side for that
/// peer and tag). Exact for tags below 2^15 and the first 2^14 requests of a tag and peer;
/// beyond, two requests of one peer could share a channel.
pub fn partitioned_channel(comm: &Communicator, peer: usize, tag: i32, send: bool) -> Result<i32> {
    if tag < 0 {
        return Err(Error::BadTag(tag));
    }
    let key = (comm.coll_context(), comm.world_rank(peer)?, tag, send);
    let k = PARTITIONED_INITS.with(|m| {
        let mut m = m.borrow_mut();
        let n = m.entry(key).or_insert(0);
        let k = *n;
        *n = n.wrapping_add(1);
        k
    });
    Ok(PARTITIONED_TAG_BASE + (((tag & 0x7FFF) << 14) | (k & 0x3FFF) as i32))
}

/// Start sending the `len` bytes at `buf` to communicator rank `dest` on partitioned
/// channel `channel` ([`partitioned_channel`]).
///
/// # Safety
/// As [`isend`].
#[allow(unsafe_code)]
pub unsafe fn isend_partitioned(
    comm: &Communicator,
    buf: *const u8,
    len: usize,
    dest: usize,
    channel: i32,
) -> Result<RawRequest> {
    // SAFETY: the caller's contract.
    let ubuf = unsafe { view(buf, len) };
    let started = comm.shared().start_send(SendArgs {
        buf: ubuf,
        dest: comm.world_rank(dest)?,
        tag: channel,
        context: comm.coll_context(),
        mode: SendMode::Standard,
        pattern: CommPattern::NonBlocking,
    })?;
    let state = match started {
        SendStart::Done => RawState::Done(Status::sent(dest, channel, len)),
        SendStart::Pending(id) => RawState::Pending(id),
    };
    Ok(RawRequest {
        state,
        comm: comm.clone(),
    })
}

/// Start receiving at most `len` bytes into `buf` from communicator rank `source` on
/// partitioned channel `channel` ([`partitioned_channel`]).
///
/// # Safety
/// As [`irecv`].
#[allow(unsafe_code)]
pub unsafe fn irecv_partitioned(
    comm: &Communicator,
    buf: *mut u8,
    len: usize,
    source: usize,
    channel: i32,
) -> Result<RawRequest> {
    // SAFETY: the caller's contract.
    let ubuf = unsafe { view_mut(buf, len) };
    let id = comm.start_recv(
        ubuf,
        Src::Rank(source),
        channel,
        comm.coll_context(),
        CommPattern::NonBlocking,
    )?;
    Ok(RawId(id).adopt(comm))
}

/// The point-to-point context of `comm`: its collective context is the one above it.
pub(crate) fn p2p_context(comm: &Communicator) -> rmca_framework::pml::ContextId {
    comm.coll_context() - 1
}

impl RawRequest {
    /// The communicator the operation runs on.
    pub fn communicator(&self) -> &Communicator {
        &self.comm
    }

    /// Whether the operation completed as it started (an eager send a BTL took at once):
    /// nothing in the PML to wait for, and its outcome is success.
    #[inline]
    pub fn completed_at_start(&self) -> bool {
        matches!(self.state, RawState::Done(_))
    }

    /// Block until the operation completes.
    pub fn wait(mut self) -> Result<Status> {
        match std::mem::replace(&mut self.state, RawState::Spent) {
            RawState::Pending(id) => self.comm.wait_raw(id),
            RawState::Coll(id) => self.comm.shared().wait_collective(id),
            RawState::Custom(mut op) => wait_custom(&self.comm, &mut *op),
            RawState::Done(st) => Ok(st),
            RawState::Spent => Err(Error::InvalidArgument(
                "raw request already completed".into(),
            )),
        }
    }

    /// The operation of a request made by [`custom`] (`None` for any other).
    pub fn custom_mut(&mut self) -> Option<&mut dyn CustomOp> {
        match &mut self.state {
            RawState::Custom(op) => Some(&mut **op),
            _ => None,
        }
    }

    /// The operation as a bare [`RawId`] (to join a [`RawBatch`]) when it is a
    /// point-to-point one still in the PML; any other request is handed back.
    pub fn into_id(mut self) -> std::result::Result<RawId, RawRequest> {
        match self.state {
            RawState::Pending(id) => {
                // Not waited for on drop: the id's holder completes it now.
                self.state = RawState::Spent;
                Ok(RawId(id))
            }
            _ => Err(self),
        }
    }

    /// Whether the operation is a non-blocking collective.
    pub fn is_collective(&self) -> bool {
        matches!(self.state, RawState::Coll(_))
    }

    /// Try to cancel the operation (`MPI_Cancel`; see [`crate::Request::cancel`] for what
    /// can be cancelled). The request must still be completed; a cancel that took effect
    /// shows in its status ([`Status::cancelled`]). Returns whether it took effect.
    pub fn cancel(&mut self) -> Result<bool> {
        match &mut self.state {
            RawState::Pending(id) => {
                let id = *id;
                self.comm.shared().with(|rt| Ok(rt.pml.cancel(id)?))
            }
            RawState::Custom(op) => op.cancel(),
            // MPI does not cancel collectives.
            RawState::Coll(_) | RawState::Done(_) | RawState::Spent => Ok(false),
        }
    }

    /// Make progress once and report whether the operation completed.
    pub fn test(mut self) -> Polled {
        let id = match std::mem::replace(&mut self.state, RawState::Spent) {
            RawState::Pending(id) => id,
            RawState::Coll(id) => {
                return match self.comm.shared().test_collective(id) {
                    Some(outcome) => Polled::Done(outcome),
                    None => {
                        self.state = RawState::Coll(id);
                        Polled::Pending(self)
                    }
                }
            }
            RawState::Custom(mut op) => {
                let mut outcome = op.poll();
                if outcome.is_none() {
                    let _ = self.comm.shared().with(|rt| Ok(rt.progress()));
                    self.comm.shared().step_collectives();
                    outcome = op.poll();
                }
                return match outcome {
                    Some(outcome) => Polled::Done(outcome),
                    None => {
                        self.state = RawState::Custom(op);
                        Polled::Pending(self)
                    }
                };
            }
            RawState::Done(st) => return Polled::Done(Ok(st)),
            RawState::Spent => {
                return Polled::Done(Err(Error::InvalidArgument(
                    "raw request already completed".into(),
                )))
            }
        };
        match RawId(id).test(&self.comm) {
            None => {
                self.state = RawState::Pending(id);
                Polled::Pending(self)
            }
            Some(outcome) => Polled::Done(outcome),
        }
    }
}

/// [`RawId::look_progressed`] for an operation that was not complete at first: a progress
/// pass, then the look again.
#[inline(never)]
fn look_after_progress(comm: &Communicator, id: RawId) -> Looked {
    // The PML's pass, as `test_after_progress`'s.
    let _ = comm.shared().with(|rt| Ok(rt.progress()));
    id.look(comm)
}

/// [`RawId::test`] for an operation that was not complete at first: a progress pass, then
/// the test again.
#[inline(never)]
fn test_after_progress(comm: &Communicator, id: RequestId) -> Option<Result<Status>> {
    let polled = comm.shared().with(|rt| {
        rt.progress();
        Ok(rt.pml.test(id)?)
    });
    match polled {
        Ok(None) => None,
        Ok(Some(st)) => Some(comm.finish(st)),
        Err(e) => Some(Err(e)),
    }
}

/// Wait until every request of `requests` completed; their outcomes, in order. One progress
/// loop serves them all, so a window of receives is drained in a few passes instead of one
/// wait (and one delivery) per request.
pub fn wait_all(requests: Vec<RawRequest>) -> Vec<Result<Status>> {
    let mut out: Vec<Option<Result<Status>>> = Vec::with_capacity(requests.len());
    let mut pending = Vec::new();
    let mut colls = Vec::new();
    let mut customs = Vec::new();
    for (i, mut r) in requests.into_iter().enumerate() {
        match std::mem::replace(&mut r.state, RawState::Spent) {
            RawState::Pending(id) => {
                out.push(None);
                pending.push((i, id, r.comm.clone()));
            }
            RawState::Custom(op) => {
                out.push(None);
                customs.push((i, op, r.comm.clone()));
            }
            RawState::Coll(id) => {
                out.push(None);
                colls.push((i, id, r.comm.clone()));
            }
            RawState::Done(st) => out.push(Some(Ok(st))),
            RawState::Spent => out.push(Some(Err(Error::InvalidArgument(
                "raw request already completed".into(),
            )))),
        }
    }
    let mut backoff = rmca_framework::progress::ReleasingBackoff::default();
    while let Some((_, _, comm)) = pending.first() {
        // Every communicator of a process shares its one runtime.
        let shared = comm.shared_rc().clone();
        let before = pending.len();
        let mut events = 0;
        let r = shared.with(|rt| {
            pending.retain(|(i, id, comm)| match rt.pml.test(*id) {
                Ok(None) => true,
                Ok(Some(st)) => {
                    out[*i] = Some(comm.finish(st));
                    false
                }
                Err(e) => {
                    out[*i] = Some(Err(e.into()));
                    false
                }
            });
            if !pending.is_empty() {
                events = rt.progress();
            }
            Ok(())
        });
        if let Err(e) = r {
            // Finalized: the PML is gone and writes into no buffer any more.
            let msg = e.to_string();
            for (i, _, _) in pending.drain(..) {
                out[i] = Some(Err(Error::InvalidArgument(msg.clone())));
            }
        }
        // The collectives run in the same loop: a peer may need this rank's next round before
        // it sends what a point-to-point request here waits for.
        events += shared.step_collectives();
        let colls_before = colls.len();
        colls.retain(|(i, id, _)| match shared.collective_outcome(*id) {
            Some(outcome) => {
                out[*i] = Some(outcome);
                false
            }
            None => true,
        });
        // Spins, or yields when the node is oversubscribed (the runtime's idle policy).
        backoff.pass(events + before - pending.len() + colls_before - colls.len());
    }
    // Collectives left once the point-to-point requests completed.
    for (i, id, comm) in colls {
        out[i] = Some(comm.shared().wait_collective(id));
    }
    for (i, mut op, comm) in customs {
        out[i] = Some(wait_custom(&comm, &mut *op));
    }
    out.into_iter()
        .map(|o| o.expect("every request has an outcome"))
        .collect()
}

/// Wait until every request of `requests` completed, keeping only the errors (`None` for an
/// operation that succeeded), in order: `MPI_Waitall` with `MPI_STATUSES_IGNORE`. The
/// pending ones go to the PML in one call, as the safe API's `Request::complete_all` does.
pub fn complete_all(requests: Vec<RawRequest>) -> Vec<Option<Error>> {
    let mut out: Vec<Option<Error>> = (0..requests.len()).map(|_| None).collect();
    let mut batch = RawBatch::default();
    // Position and communicator of each operation of the batch, by its place in it.
    let mut pending = Vec::new();
    let mut colls = Vec::new();
    for (i, mut r) in requests.into_iter().enumerate() {
        match std::mem::replace(&mut r.state, RawState::Spent) {
            RawState::Pending(id) => {
                batch.push(RawId(id));
                pending.push((i, r.comm.clone()));
            }
            RawState::Coll(id) => colls.push((i, id, r.comm.clone())),
            RawState::Custom(mut op) => {
                if let Err(e) = wait_custom(&r.comm, &mut *op) {
                    out[i] = Some(e);
                }
            }
            RawState::Done(_) => {}
            RawState::Spent => {
                out[i] = Some(Error::InvalidArgument(
                    "raw request already completed".into(),
                ));
            }
        }
    }
    if let Some((_, comm)) = pending.first() {
        batch.complete(comm, |k| &pending[k].1, |k, e| out[pending[k].0] = Some(e));
    }
    // The PML's wait steps the collectives too, so waiting for them afterwards never holds up
    // a peer.
    for (i, id, comm) in colls {
        if let Err(e) = comm.shared().wait_collective(id) {
            out[i] = Some(e);
        }
    }
    out
}

impl Drop for RawRequest {
    fn drop(&mut self) {
        let outcome = match std::mem::replace(&mut self.state, RawState::Spent) {
            RawState::Pending(id) => self.comm.wait_raw(id),
            RawState::Coll(id) => self.comm.shared().wait_collective(id),
            // The operation's own drop does what it needs (the PML operations it holds are
            // raw requests, waited for as they drop).
            RawState::Custom(_) | RawState::Done(_) | RawState::Spent => return,
        };
        if let Err(e) = outcome {
            tracing::debug!("raw request dropped while outstanding: {e}");
        }
    }
}

/// A reduction operation for [`ireduce`] and [`iallreduce`], erased to bytes: a predefined
/// [`crate::coll::Op`] on its element type, a [`crate::coll::UserOp`], or any other
/// [`Reduction`].
pub struct RawReduction(ByteReduction);

impl std::fmt::Debug for RawReduction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawReduction")
            .field("element_size", &self.0.element_size())
            .finish_non_exhaustive()
    }
}

impl RawReduction {
    /// `op` on elements of `T`; an error if `op` is not defined for `T`.
    pub fn new<T: bytemuck::Pod, R: Reduction<T> + 'static>(op: R) -> Result<Self> {
        Ok(Self(ByteReduction::new::<T, R>(op)?))
    }

    /// Bytes of one element: the lengths given to [`ireduce`] and [`iallreduce`] are
    /// multiples of it.
    pub fn element_size(&self) -> usize {
        self.0.element_size()
    }

    /// A reduction on elements of `elem` bytes given by its step over byte runs of whole
    /// elements: `f(dst, src, acc, src_first)` sets `dst` to `src op acc` (`src_first`) or
    /// `acc op src`, elementwise, where `acc` is `dst` itself when `None` (the left operand
    /// always comes from lower ranks). For bindings whose operations work on whole buffers
    /// (MPI's user functions); `commutative: false` keeps rank order.
    pub fn from_fn(
        elem: usize,
        commutative: bool,
        f: impl Fn(&mut [u8], &[u8], Option<&[u8]>, bool) + 'static,
    ) -> Result<Self> {
        if elem == 0 {
            return Err(Error::InvalidArgument(
                "a reduction on elements of 0 bytes".into(),
            ));
        }
        Ok(Self(ByteReduction::from_fn(elem, commutative, Box::new(f))))
    }

    /// `inout = input op inout`, elementwise, here and now (MPI's `MPI_Reduce_local`).
    pub fn apply_local(&self, inout: &mut [u8], input: &[u8]) -> Result<()> {
        self.check_len(inout.len(), "reduce_local")?;
        if input.len() != inout.len() {
            return Err(Error::InvalidArgument(format!(
                "reduce_local: the input holds {} B, the result {} B",
                input.len(),
                inout.len()
            )));
        }
        self.0.apply(inout, input, None, true);
        Ok(())
    }

    fn check_len(&self, len: usize, what: &str) -> Result<()> {
        let elem = self.element_size();
        if elem > 0 && !len.is_multiple_of(elem) {
            return Err(Error::InvalidArgument(format!(
                "{what}: {len} B is not a whole number of {elem}-byte elements"
            )));
        }
        Ok(())
    }
}

/// A read-only view of `len` bytes at `buf` (empty when `len` is 0, whatever `buf` is).
///
/// # Safety
/// As [`UserBuf::from_raw_parts`].
#[allow(unsafe_code)]
unsafe fn view(buf: *const u8, len: usize) -> UserBuf {
    if len == 0 {
        UserBuf::empty()
    } else {
        // SAFETY: the caller's contract.
        unsafe { UserBuf::from_raw_parts(buf, len) }
    }
}

/// A writable view of `len` bytes at `buf` (empty when `len` is 0, whatever `buf` is).
///
/// # Safety
/// As [`UserBuf::from_raw_parts_mut`].
#[allow(unsafe_code)]
unsafe fn view_mut(buf: *mut u8, len: usize) -> UserBuf {
    if len == 0 {
        UserBuf::empty()
    } else {
        // SAFETY: the caller's contract.
        unsafe { UserBuf::from_raw_parts_mut(buf, len) }
    }
}

/// The request of the collective `plan` started on `comm`.
fn start(comm: &Communicator, plan: crate::coll::nonblocking::Plan) -> RawRequest {
    RawRequest {
        state: RawState::Coll(comm.launch(plan)),
        comm: comm.clone(),
    }
}

/// Start a barrier (see [`Communicator::ibarrier`]).
pub fn ibarrier(comm: &Communicator) -> Result<RawRequest> {
    Ok(start(comm, comm.ibarrier_plan()?))
}

/// Start a broadcast of the `len` bytes at `buf` from `root` (see [`Communicator::ibcast`]).
///
/// # Safety
/// `buf..buf+len` must be valid for reads and writes, and not accessed by anyone else, until
/// the request completed (read-only at the root, which the library does not write).
#[allow(unsafe_code)]
pub unsafe fn ibcast(
    comm: &Communicator,
    buf: *mut u8,
    len: usize,
    root: usize,
) -> Result<RawRequest> {
    // SAFETY: the caller's contract.
    let buf = unsafe { view_mut(buf, len) };
    Ok(start(comm, comm.ibcast_plan(buf, root)?))
}

/// Start a reduction of the `len` bytes at `send` with `op` into `recv` at `root` (see
/// [`Communicator::ireduce`]); `recv` is ignored elsewhere.
///
/// # Safety
/// `send..send+len` valid for reads and unwritten, at the root `recv..recv+len` valid for
/// writes and otherwise unaccessed, until the request completed; the two do not overlap.
#[allow(unsafe_code)]
pub unsafe fn ireduce(
    comm: &Communicator,
    send: *const u8,
    recv: *mut u8,
    len: usize,
    op: RawReduction,
    root: usize,
) -> Result<RawRequest> {
    op.check_len(len, "ireduce")?;
    // SAFETY: the caller's contract (`recv` only at the root).
    let (send, recv) = unsafe {
        let recv = (comm.rank() == root).then(|| view_mut(recv, len));
        (view(send, len), recv)
    };
    Ok(start(comm, comm.ireduce_plan(send, recv, op.0, root)?))
}

/// Start an allreduce of the `len` bytes at `send` with `op` into `recv` (see
/// [`Communicator::iallreduce`]).
///
/// # Safety
/// `send..send+len` valid for reads and unwritten, `recv..recv+len` valid for writes and
/// otherwise unaccessed, until the request completed; the two do not overlap.
#[allow(unsafe_code)]
pub unsafe fn iallreduce(
    comm: &Communicator,
    send: *const u8,
    recv: *mut u8,
    len: usize,
    op: RawReduction,
) -> Result<RawRequest> {
    op.check_len(len, "iallreduce")?;
    // SAFETY: the caller's contract.
    let (send, recv) = unsafe { (view(send, len), view_mut(recv, len)) };
    Ok(start(comm, comm.iallreduce_plan(send, recv, op.0)?))
}

/// A blocking allreduce of `send` with `op` into `recv` (as long as `send`). Unlike
/// [`iallreduce`] run to its end, it takes the direct collectives of the communicator's
/// stack first (coll-sm's shared segment on one node), as the typed
/// [`Communicator::allreduce`] does.
pub fn allreduce(
    comm: &Communicator,
    send: &[u8],
    recv: &mut [u8],
    op: &RawReduction,
) -> Result<()> {
    comm.allreduce_erased(send, recv, &op.0)
}

/// A blocking reduce of `send` with `op` into `recv` at `root` (as long as `send` there;
/// ignored elsewhere), taking the direct collectives first as [`allreduce`] does.
pub fn reduce(
    comm: &Communicator,
    send: &[u8],
    recv: Option<&mut [u8]>,
    op: &RawReduction,
    root: usize,
) -> Result<()> {
    comm.reduce_erased(send, recv, &op.0, root)
}

/// A blocking reduce_scatter of `send` with `op`: member r gets `counts[r]` bytes of the
/// result (the bytes after the earlier members' counts; one count per member, the same
/// everywhere, whole elements, summing to `send.len()`) in `recv`. `block`: every count is
/// this one (reduce_scatter_block). Takes the direct collectives first as [`allreduce`].
pub fn reduce_scatter(
    comm: &Communicator,
    send: &[u8],
    recv: &mut [u8],
    counts: &[usize],
    op: &RawReduction,
    block: bool,
) -> Result<()> {
    let mut at = 0usize;
    let mut chunks = Vec::with_capacity(counts.len());
    for &k in counts {
        let end = at
            .checked_add(k)
            .ok_or_else(|| Error::InvalidArgument("reduce_scatter: the counts overflow".into()))?;
        chunks.push(at..end);
        at = end;
    }
    let block = if block { counts.first().copied() } else { None };
    comm.reduce_scatter_erased(send, recv, &chunks, &op.0, block)
}

/// Start a gather of the `block` bytes at `send` to `root`, into `recv` (size × `block`
/// bytes, in rank order; ignored elsewhere) (see [`Communicator::igather`]). `send` is read
/// when the call starts, not later.
///
/// # Safety
/// `send..send+block` valid for reads during the call; at the root `recv` valid for writes of
/// size × `block` bytes and otherwise unaccessed until the request completed, apart from
/// `send`.
#[allow(unsafe_code)]
pub unsafe fn igather(
    comm: &Communicator,
    send: *const u8,
    block: usize,
    recv: *mut u8,
    root: usize,
) -> Result<RawRequest> {
    let total = total_of(comm, block, "igather")?;
    // SAFETY: the caller's contract (`recv` only at the root).
    let (send, recv) = unsafe {
        let recv = (comm.rank() == root).then(|| view_mut(recv, total));
        (view(send, block), recv)
    };
    Ok(start(comm, comm.igather_plan(send, recv, root)?))
}

/// Start a scatter from `root` of `send` (size × `block` bytes in rank order; ignored
/// elsewhere) into the `block` bytes at `recv` (see [`Communicator::iscatter`]). The root's
/// `send` is read when the call starts, not later.
///
/// # Safety
/// At the root `send` valid for reads of size × `block` bytes during the call; `recv` valid
/// for writes of `block` bytes and otherwise unaccessed until the request completed.
#[allow(unsafe_code)]
pub unsafe fn iscatter(
    comm: &Communicator,
    send: *const u8,
    recv: *mut u8,
    block: usize,
    root: usize,
) -> Result<RawRequest> {
    let total = total_of(comm, block, "iscatter")?;
    // SAFETY: the caller's contract (`send` only at the root).
    let (send, recv) = unsafe {
        let send = (comm.rank() == root).then(|| view(send, total));
        (send, view_mut(recv, block))
    };
    Ok(start(comm, comm.iscatter_plan(send, recv, root)?))
}

/// Start an allgather of the `block` bytes at `send` into `recv` (size × `block` bytes, in
/// rank order) (see [`Communicator::iallgather`]). `send` is read when the call starts.
///
/// # Safety
/// `send` valid for reads of `block` bytes during the call; `recv` valid for writes of size
/// × `block` bytes and otherwise unaccessed until the request completed, apart from `send`.
#[allow(unsafe_code)]
pub unsafe fn iallgather(
    comm: &Communicator,
    send: *const u8,
    block: usize,
    recv: *mut u8,
) -> Result<RawRequest> {
    let total = total_of(comm, block, "iallgather")?;
    // SAFETY: the caller's contract.
    let (send, recv) = unsafe { (view(send, block), view_mut(recv, total)) };
    Ok(start(comm, comm.iallgather_plan(send, recv)?))
}

/// Start an alltoall: block r of `send` (size × `block` bytes) goes to rank r, block r of
/// `recv` comes from rank r (see [`Communicator::ialltoall`]).
///
/// # Safety
/// `send` valid for reads and unwritten, `recv` valid for writes and otherwise unaccessed,
/// size × `block` bytes each, until the request completed; the two do not overlap.
#[allow(unsafe_code)]
pub unsafe fn ialltoall(
    comm: &Communicator,
    send: *const u8,
    recv: *mut u8,
    block: usize,
) -> Result<RawRequest> {
    let total = total_of(comm, block, "ialltoall")?;
    // SAFETY: the caller's contract.
    let (send, recv) = unsafe { (view(send, total), view_mut(recv, total)) };
    Ok(start(comm, comm.ialltoall_plan(send, recv)?))
}

/// The end of the furthest of `regions` (the bytes a buffer holding them spans).
fn span_of(regions: &[Range<usize>]) -> usize {
    regions.iter().map(|r| r.end).max().unwrap_or(0)
}

/// Start a gatherv to `root`: this rank's `send_len` bytes at `send` land at the root in
/// `recv[regions[r]]` for rank r (`regions`: the root's, one per rank, disjoint; ignored
/// elsewhere) (see [`Communicator::gatherv`]).
///
/// # Safety
/// `send..send+send_len` valid for reads and unwritten, at the root `recv` valid for writes
/// over every region and otherwise unaccessed, until the request completed; the two do not
/// overlap.
#[allow(unsafe_code)]
pub unsafe fn igatherv(
    comm: &Communicator,
    send: *const u8,
    send_len: usize,
    recv: *mut u8,
    regions: &[Range<usize>],
    root: usize,
) -> Result<RawRequest> {
    // SAFETY: the caller's contract (`recv` only at the root).
    let (send, recv) = unsafe {
        let recv = (comm.rank() == root).then(|| view_mut(recv, span_of(regions)));
        (view(send, send_len), recv)
    };
    Ok(start(comm, comm.igatherv_plan(send, recv, regions, root)?))
}

/// Start a scatterv from `root`: `send[regions[r]]` (the root's; ignored elsewhere) goes to
/// rank r, which receives it into the `recv_len` bytes at `recv` (see
/// [`Communicator::scatterv`]).
///
/// # Safety
/// At the root `send` valid for reads over every region and unwritten; `recv..recv+recv_len`
/// valid for writes and otherwise unaccessed; until the request completed, apart.
#[allow(unsafe_code)]
pub unsafe fn iscatterv(
    comm: &Communicator,
    send: *const u8,
    regions: &[Range<usize>],
    recv: *mut u8,
    recv_len: usize,
    root: usize,
) -> Result<RawRequest> {
    // SAFETY: the caller's contract (`send` only at the root).
    let (send, recv) = unsafe {
        let send = (comm.rank() == root).then(|| view(send, span_of(regions)));
        (send, view_mut(recv, recv_len))
    };
    Ok(start(comm, comm.iscatterv_plan(send, regions, recv, root)?))
}

/// Start an allgatherv: this rank's `send_len` bytes at `send` land in every rank's
/// `recv[regions[me]]` (`regions`: one per rank, disjoint, the same everywhere) (see
/// [`Communicator::allgatherv`]).
///
/// # Safety
/// `send` valid for reads and unwritten, `recv` valid for writes over every region and
/// otherwise unaccessed, until the request completed; the two do not overlap.
#[allow(unsafe_code)]
pub unsafe fn iallgatherv(
    comm: &Communicator,
    send: *const u8,
    send_len: usize,
    recv: *mut u8,
    regions: &[Range<usize>],
) -> Result<RawRequest> {
    // SAFETY: the caller's contract.
    let (send, recv) = unsafe { (view(send, send_len), view_mut(recv, span_of(regions))) };
    Ok(start(comm, comm.iallgatherv_plan(send, recv, regions)?))
}

/// Start an alltoallv: `send[sends[r]]` goes to rank r, rank r's block lands in
/// `recv[recvs[r]]` (disjoint) (see [`Communicator::alltoallv`]).
///
/// # Safety
/// `send` valid for reads over every send region and unwritten, `recv` valid for writes
/// over every receive region and otherwise unaccessed, until the request completed; apart.
#[allow(unsafe_code)]
pub unsafe fn ialltoallv(
    comm: &Communicator,
    send: *const u8,
    sends: &[Range<usize>],
    recv: *mut u8,
    recvs: &[Range<usize>],
) -> Result<RawRequest> {
    // SAFETY: the caller's contract.
    let (send, recv) = unsafe { (view(send, span_of(sends)), view_mut(recv, span_of(recvs))) };
    Ok(start(comm, comm.ialltoallv_plan(send, sends, recv, recvs)?))
}

/// Start a reduce_scatter: the `len` bytes at `send` (every rank's, tiled by `counts`
/// bytes per rank in rank order) are reduced with `op`, and this rank's part lands in
/// `recv` (`counts[me]` bytes) (see [`Communicator::reduce_scatter`]). Equal counts make it a
/// reduce_scatter_block.
///
/// # Safety
/// `send` valid for reads of the sum of `counts` bytes and unwritten, `recv` valid for
/// writes of `counts[me]` bytes and otherwise unaccessed, until the request completed.
#[allow(unsafe_code)]
pub unsafe fn ireduce_scatter(
    comm: &Communicator,
    send: *const u8,
    recv: *mut u8,
    counts: &[usize],
    op: RawReduction,
) -> Result<RawRequest> {
    let mut chunks = Vec::with_capacity(counts.len());
    let mut off = 0usize;
    for &c in counts {
        op.check_len(c, "ireduce_scatter")?;
        let end = off
            .checked_add(c)
            .ok_or_else(|| Error::InvalidArgument("ireduce_scatter: the counts overflow".into()))?;
        chunks.push(off..end);
        off = end;
    }
    let mine = chunks.get(comm.rank()).map_or(0, |c| c.len());
    let block = counts
        .first()
        .filter(|&&b| counts.iter().all(|&c| c == b))
        .copied();
    // SAFETY: the caller's contract.
    let (send, recv) = unsafe { (view(send, off), view_mut(recv, mine)) };
    Ok(start(
        comm,
        comm.ireduce_scatter_plan(send, recv, &chunks, op.0, block)?,
    ))
}

/// Start an inclusive prefix reduction of the `len` bytes at `send` with `op` into `recv`
/// (see [`Communicator::scan`]); `exclusive`: an exclusive one ([`Communicator::exscan`]),
/// which leaves rank 0's `recv` untouched.
///
/// # Safety
/// `send..send+len` valid for reads and unwritten, `recv..recv+len` valid for writes and
/// otherwise unaccessed, until the request completed.
#[allow(unsafe_code)]
pub unsafe fn iscan(
    comm: &Communicator,
    send: *const u8,
    recv: *mut u8,
    len: usize,
    op: RawReduction,
    exclusive: bool,
) -> Result<RawRequest> {
    op.check_len(len, if exclusive { "iexscan" } else { "iscan" })?;
    // SAFETY: the caller's contract.
    let (send, recv) = unsafe { (view(send, len), view_mut(recv, len)) };
    Ok(start(comm, comm.iscan_plan(send, recv, op.0, exclusive)?))
}

/// Size × `block` bytes, checked.
fn total_of(comm: &Communicator, block: usize, what: &str) -> Result<usize> {
    block.checked_mul(comm.size()).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{what}: {block} B per rank x {} ranks overflows",
            comm.size()
        ))
    })
}

/// Start a neighbourhood exchange over `comm`'s topology or any neighbour lists (the
/// neighbourhood collectives of [`crate::topo`]): the bytes `send[range]` go to each
/// (peer, range) of `sends`, and a block from each (peer, range) of `recvs` lands in
/// `recv[range]`, in list order (a peer listed twice gets, and gives, its blocks in that
/// order: list the sends of a topology's neighbourhood in
/// [`crate::topo::Neighbors::send_order`]); `None` peers take no part. Every member must
/// start it in the same collective order, with matching block sizes.
///
/// # Safety
/// `send..send+send_len` valid for reads and unwritten, `recv..recv+recv_len` valid for
/// writes and otherwise unaccessed, until the request completed; the two do not overlap.
#[allow(unsafe_code)]
pub unsafe fn ineighbor(
    comm: &Communicator,
    send: *const u8,
    send_len: usize,
    sends: &[(Option<usize>, std::ops::Range<usize>)],
    recv: *mut u8,
    recv_len: usize,
    recvs: &[(Option<usize>, std::ops::Range<usize>)],
) -> Result<RawRequest> {
    // SAFETY: the caller's contract.
    let (send, recv) = unsafe { (view(send, send_len), view_mut(recv, recv_len)) };
    Ok(start(comm, comm.neighbor_plan(send, sends, recv, recvs)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operation done after `left` more polls, counting cancels.
    #[derive(Debug)]
    struct Countdown {
        left: u32,
        cancels: u32,
    }

    impl CustomOp for Countdown {
        fn poll(&mut self) -> Option<Result<Status>> {
            if self.left == 0 {
                return Some(Ok(Status::sent(0, 42, 7)));
            }
            self.left -= 1;
            None
        }
        fn cancel(&mut self) -> Result<bool> {
            self.cancels += 1;
            Ok(true)
        }
        fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
            self
        }
    }

    /// Custom operations complete through `test`, `wait` and `wait_all` (mixed with the
    /// PML's), reach their own calls through `custom_mut`, and take cancels.
    #[test]
    #[allow(unsafe_code)]
    fn custom_operations_complete_with_the_others() {
        let universe = crate::init().expect("a singleton job");
        let world = universe.world();
        let me = world.rank();
        let mut r = custom(
            &world,
            Box::new(Countdown {
                left: 5,
                cancels: 0,
            }),
        );
        assert!(r.cancel().unwrap());
        let op = r.custom_mut().unwrap().as_any_mut();
        assert_eq!(op.downcast_mut::<Countdown>().unwrap().cancels, 1);
        let r = match r.test() {
            Polled::Pending(r) => r,
            Polled::Done(o) => panic!("done too early: {o:?}"),
        };
        assert_eq!(r.wait().unwrap().tag, 42);
        let out = [9u8; 3];
        let mut got = [0u8; 3];
        // SAFETY: both buffers outlive wait_all, which waits for every request.
        let requests = unsafe {
            vec![
                custom(
                    &world,
                    Box::new(Countdown {
                        left: 3,
                        cancels: 0,
                    }),
                ),
                irecv(&world, got.as_mut_ptr(), 3, Src::Rank(me), 5).unwrap(),
                isend(&world, out.as_ptr(), 3, me, 5, SendMode::Standard).unwrap(),
            ]
        };
        let outcomes = wait_all(requests);
        assert_eq!(outcomes[0].as_ref().unwrap().tag, 42);
        assert_eq!(outcomes[1].as_ref().unwrap().bytes, 3);
        assert_eq!(got, out);
        let errors = complete_all(vec![custom(
            &world,
            Box::new(Countdown {
                left: 2,
                cancels: 0,
            }),
        )]);
        assert!(errors[0].is_none());

        // Partitioned channels: the k-th request of a peer, tag and direction gets the k-th
        // channel of the tag, in the band reserved for them.
        let ch = |tag, send| partitioned_channel(&world, me, tag, send).unwrap();
        let (a0, a1, b0) = (ch(7, true), ch(7, true), ch(8, true));
        assert_eq!((ch(7, false), ch(7, false)), (a0, a1));
        assert!(a0 != a1 && a0 != b0 && a1 != b0);
        for c in [a0, a1, b0] {
            assert!((PARTITIONED_TAG_BASE..crate::coll::nonblocking::NB_TAG_BASE).contains(&c));
        }
        assert!(matches!(
            partitioned_channel(&world, me, -3, true),
            Err(Error::BadTag(-3))
        ));
        // A partitioned transfer to self on its channel.
        let mut got = [0u8; 3];
        // SAFETY: both buffers outlive the waits below.
        let (r, s) = unsafe {
            (
                irecv_partitioned(&world, got.as_mut_ptr(), 3, me, a0).unwrap(),
                isend_partitioned(&world, out.as_ptr(), 3, me, a0).unwrap(),
            )
        };
        s.wait().unwrap();
        assert_eq!(r.wait().unwrap().bytes, 3);
        assert_eq!(got, out);
    }

    /// A rank messaging itself through the raw calls: `complete_all` reports each failure at
    /// its own position (a truncated receive among successes), and the data arrives; the
    /// blocking `send`/`recv` deliver, report a truncation, and answer a receive from
    /// `PROC_NULL` without the PML (one test: a process initializes rmca once).
    #[test]
    #[allow(unsafe_code)]
    fn raw_calls_on_a_rank_messaging_itself() {
        let universe = crate::init().expect("a singleton job");
        let world = universe.world();
        let me = world.rank();
        let out = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let mut fits = [0u8; 8];
        let mut short = [0u8; 4];
        // SAFETY: every buffer outlives complete_all below, which waits for every request.
        let requests = unsafe {
            vec![
                isend(&world, out.as_ptr(), 8, me, 1, SendMode::Standard).unwrap(),
                irecv(&world, fits.as_mut_ptr(), 8, Src::Rank(me), 1).unwrap(),
                isend(&world, out.as_ptr(), 8, me, 2, SendMode::Standard).unwrap(),
                irecv(&world, short.as_mut_ptr(), 4, Src::Rank(me), 2).unwrap(),
            ]
        };
        // The sends are done as they start (eager, to self): the truncated receive is the
        // second operation of the PML's batch but the fourth request.
        assert!(requests[0].completed_at_start() && requests[2].completed_at_start());
        let outcome = complete_all(requests);
        assert!(outcome[0].is_none() && outcome[1].is_none() && outcome[2].is_none());
        assert!(
            matches!(outcome[3], Some(Error::Status { .. })),
            "the truncated receive fails: {outcome:?}"
        );
        assert_eq!(fits, out);
        assert_eq!(short, out[..4]);

        send(&world, &out[..5], me, 3, SendMode::Standard).unwrap();
        let mut got = [0u8; 8];
        let st = recv(&world, &mut got, Src::Rank(me), 3).unwrap();
        assert_eq!((st.bytes, &got[..5]), (5, &out[..5]));
        send(&world, &out, me, 4, SendMode::Standard).unwrap();
        let mut small = [0u8; 2];
        assert!(
            matches!(
                recv(&world, &mut small, Src::Rank(me), 4),
                Err(Error::Status { .. })
            ),
            "a truncated blocking receive fails"
        );
        let st = recv(&world, &mut got, Src::Null, 5).unwrap();
        assert_eq!(st, Status::PROC_NULL);
        assert!(matches!(
            send(&world, &out, me, -1, SendMode::Standard),
            Err(Error::BadTag(-1))
        ));
    }
}
