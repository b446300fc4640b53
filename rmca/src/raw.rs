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

use rmca_framework::btl::CommPattern;
use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{RequestId, SendArgs, SendMode, SendStart};

use crate::{Communicator, Error, Result, Src, Status};

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
    /// The outcome was handed out.
    Spent,
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
    let state = match started {
        SendStart::Done => RawState::Done(Status::sent(dest, tag, len)),
        SendStart::Pending(id) => RawState::Pending(id),
    };
    Ok(RawRequest {
        state,
        comm: comm.clone(),
    })
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
    Ok(RawRequest {
        state: RawState::Pending(id),
        comm: comm.clone(),
    })
}

/// The point-to-point context of `comm`: its collective context is the one above it.
fn p2p_context(comm: &Communicator) -> rmca_framework::pml::ContextId {
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
            RawState::Done(st) => Ok(st),
            RawState::Spent => Err(Error::InvalidArgument(
                "raw request already completed".into(),
            )),
        }
    }

    /// Try to cancel the operation (`MPI_Cancel`; see [`crate::Request::cancel`] for what
    /// can be cancelled). The request must still be completed; a cancel that took effect
    /// shows in its status ([`Status::cancelled`]). Returns whether it took effect.
    pub fn cancel(&mut self) -> Result<bool> {
        match self.state {
            RawState::Pending(id) => self.comm.shared().with(|rt| Ok(rt.pml.cancel(id)?)),
            RawState::Done(_) | RawState::Spent => Ok(false),
        }
    }

    /// Make progress once and report whether the operation completed.
    pub fn test(mut self) -> Polled {
        let id = match std::mem::replace(&mut self.state, RawState::Spent) {
            RawState::Pending(id) => id,
            RawState::Done(st) => return Polled::Done(Ok(st)),
            RawState::Spent => {
                return Polled::Done(Err(Error::InvalidArgument(
                    "raw request already completed".into(),
                )))
            }
        };
        let polled = self.comm.shared().with(|rt| {
            if let Some(st) = rt.pml.test(id)? {
                return Ok(Some(st));
            }
            rt.progress();
            Ok(rt.pml.test(id)?)
        });
        match polled {
            Ok(None) => {
                self.state = RawState::Pending(id);
                Polled::Pending(self)
            }
            Ok(Some(st)) => Polled::Done(self.comm.finish(st)),
            // The PML no longer knows the request (finalized, or it failed): nothing writes
            // into the buffer any more.
            Err(e) => Polled::Done(Err(e)),
        }
    }
}

/// Wait until every request of `requests` completed; their outcomes, in order. One progress
/// loop serves them all, so a window of receives is drained in a few passes instead of one
/// wait (and one delivery) per request.
pub fn wait_all(requests: Vec<RawRequest>) -> Vec<Result<Status>> {
    let mut out: Vec<Option<Result<Status>>> = Vec::with_capacity(requests.len());
    let mut pending = Vec::new();
    for (i, mut r) in requests.into_iter().enumerate() {
        match std::mem::replace(&mut r.state, RawState::Spent) {
            RawState::Pending(id) => {
                out.push(None);
                pending.push((i, id, r.comm.clone()));
            }
            RawState::Done(st) => out.push(Some(Ok(st))),
            RawState::Spent => out.push(Some(Err(Error::InvalidArgument(
                "raw request already completed".into(),
            )))),
        }
    }
    let mut backoff = rmca_framework::progress::Backoff::default();
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
        // Spins, or yields when the node is oversubscribed (the runtime's idle policy).
        backoff.pass(events + before - pending.len());
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
    let mut ids = Vec::new();
    let mut at = Vec::new();
    let mut comms = Vec::new();
    for (i, mut r) in requests.into_iter().enumerate() {
        match std::mem::replace(&mut r.state, RawState::Spent) {
            RawState::Pending(id) => {
                ids.push(id);
                at.push(i);
                comms.push(r.comm.clone());
            }
            RawState::Done(_) => {}
            RawState::Spent => {
                out[i] = Some(Error::InvalidArgument(
                    "raw request already completed".into(),
                ));
            }
        }
    }
    let Some(comm) = comms.first() else {
        return out;
    };
    // Every communicator of a process shares its one runtime.
    match comm.shared().wait_all(&ids) {
        Ok(failed) => {
            for (k, st) in failed {
                if let Err(e) = comms[k].finish(st) {
                    out[at[k]] = Some(e);
                }
            }
        }
        Err(e) => {
            // Finalized: the PML is gone and writes into no buffer any more.
            let msg = e.to_string();
            for &i in &at {
                out[i] = Some(Error::InvalidArgument(msg.clone()));
            }
        }
    }
    out
}

/// [`complete_all`] for a caller that waits on batches over and over (`MPI_Waitall` with
/// `MPI_STATUSES_IGNORE` in a loop): waits until every request of `batch` completed and
/// empties it, pushing the position in `batch` and the error of each one that failed onto
/// `failed`. It allocates nothing in the steady state: `batch` and `failed` are the caller's
/// to reuse, and the identifiers go to the PML in the runtime's own reused buffer (that of
/// [`crate::Request::complete_all`]).
pub fn complete_batch(batch: &mut Vec<RawRequest>, failed: &mut Vec<(usize, Error)>) {
    let Some(shared) = batch.first().map(|r| r.comm.shared_rc().clone()) else {
        return;
    };
    let mut ids = shared.take_batch();
    ids.reserve(batch.len());
    for (i, r) in batch.iter_mut().enumerate() {
        match r.state {
            RawState::Pending(id) => ids.push(id),
            // Completed when it started (an eager send the BTL took at once).
            RawState::Done(_) => r.state = RawState::Spent,
            RawState::Spent => failed.push((
                i,
                Error::InvalidArgument("raw request already completed".into()),
            )),
        }
    }
    if !ids.is_empty() {
        // Every communicator of a process shares its one runtime.
        let outcome = shared.wait_all(&ids);
        // The k-th identifier is the k-th request still pending above; failures are rare, so
        // their positions are found by counting instead of being recorded for every request.
        let pending_at = |k: usize| {
            batch
                .iter()
                .enumerate()
                .filter(|(_, r)| matches!(r.state, RawState::Pending(_)))
                .nth(k)
                .map(|(i, _)| i)
        };
        match outcome {
            Ok(failures) => {
                for (k, st) in failures {
                    if let Some(i) = pending_at(k) {
                        if let Err(e) = batch[i].comm.finish(st) {
                            failed.push((i, e));
                        }
                    }
                }
            }
            Err(e) => {
                // Finalized: the PML is gone and writes into no buffer any more.
                let msg = e.to_string();
                for (i, r) in batch.iter().enumerate() {
                    if matches!(r.state, RawState::Pending(_)) {
                        failed.push((i, Error::InvalidArgument(msg.clone())));
                    }
                }
            }
        }
    }
    shared.give_batch(ids);
    // Every request the PML knew is released now, failed or not: nothing to wait for when
    // they are dropped.
    for mut r in batch.drain(..) {
        r.state = RawState::Spent;
        drop(r);
    }
}

impl Drop for RawRequest {
    fn drop(&mut self) {
        if let RawState::Pending(id) = std::mem::replace(&mut self.state, RawState::Spent) {
            if let Err(e) = self.comm.wait_raw(id) {
                tracing::debug!("raw request dropped while outstanding: {e}");
            }
        }
    }
}
