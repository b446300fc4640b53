//! Runs a [`Schedule`]: a steppable state machine over a [`Transport`].
//!
//! [`Exec`] is the one engine of every collective. It posts a round's transfers, then either
//! waits for them (a blocking collective: [`Exec::advance`] with `block`) or only tests them
//! (a non-blocking one: each call goes as far as it can without waiting and returns
//! [`Poll::Pending`] where it would have to), runs the round's local steps once they all
//! completed, and moves on. It does no I/O of its own: the [`Transport`] posts and completes
//! transfers ([`CommTransport`] over the PML, an in-memory network in the tests), so the same
//! state machine runs blocking calls, non-blocking ones and the unit tests.

use rmca_framework::btl::CommPattern;
use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{RequestId, SendMode, SendStart};

use super::schedule::{Buf, Comm, Local, Region, Schedule};
use crate::{Communicator, Error, Result, Src};

/// Computes a [`Local::Reduce`] step `(dst, src, acc, src_first)`: `dst = src op acc` if
/// `src_first`, else `acc op src`, where `acc` is the accumulated operand, `None` when it is
/// `dst` itself (in place). Only called by reductions.
pub(crate) type ReduceFn<'a> = rmca_framework::coll::ReduceBytes<'a>;

/// The three buffers of a schedule (see [`Buf`]), lent to the executor and the transfers it
/// posts as raw views: a non-blocking collective keeps them across calls, and the executor
/// hands sub-ranges to the PML while it runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bufs {
    /// The caller's input (read only).
    pub send: UserBuf,
    /// The result.
    pub work: UserBuf,
    /// Scratch space of at least the schedule's `tmp_len` bytes.
    pub tmp: UserBuf,
}

impl Bufs {
    /// Lend `send`, `work` and `tmp` to an executor.
    ///
    /// # Safety
    /// The three slices must stay valid, `send` unwritten and `work` and `tmp` otherwise
    /// unaccessed, until the executor given the result is done (it returned
    /// [`Poll::Done`]): transfers it posted may be reading or writing them until then.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn lend(send: &[u8], work: &mut [u8], tmp: &mut [u8]) -> Self {
        // SAFETY: the caller's contract.
        unsafe {
            Self {
                send: UserBuf::from_slice(send),
                work: UserBuf::from_mut_slice(work),
                tmp: UserBuf::from_mut_slice(tmp),
            }
        }
    }

    fn get(&self, b: Buf) -> &UserBuf {
        match b {
            Buf::Send => &self.send,
            Buf::Work => &self.work,
            Buf::Tmp => &self.tmp,
        }
    }

    /// `region` as a view for a transfer (`writable` for a receive).
    fn region(&self, region: &Region, writable: bool) -> Result<UserBuf> {
        if writable && region.buf == Buf::Send {
            return Err(oob(region));
        }
        let b = self.get(region.buf);
        if region.range.start > region.range.end || region.range.end > b.len() {
            return Err(oob(region));
        }
        Ok(b.slice(region.range.start, region.range.len()))
    }
}

/// What the executor needs from point-to-point messaging: post transfers of one
/// collective (its peers, tag and context are the transport's) and complete them.
pub(crate) trait Transport {
    /// An outstanding transfer.
    type Handle;
    /// Start sending `buf` to `peer`; `None` when the send completed at once.
    fn send(&mut self, peer: usize, buf: UserBuf) -> Result<Option<Self::Handle>>;
    /// Post a receive of at most `buf.len()` bytes from `peer` into `buf`.
    fn recv(&mut self, peer: usize, buf: UserBuf) -> Result<Self::Handle>;
    /// Has the transfer completed? `Some` with the bytes received (sends: any number) once
    /// it has, after which the handle is spent. Does not drive progress.
    fn test(&mut self, handle: &Self::Handle) -> Option<Result<usize>>;
    /// Block until the transfer completes (driving progress); the bytes received.
    fn wait(&mut self, handle: &Self::Handle) -> Result<usize>;
}

/// A transfer of the current round still outstanding.
#[derive(Debug)]
pub(crate) struct InFlight<H> {
    handle: H,
    peer: usize,
    /// Bytes a receive must deliver (`None` for sends).
    expect: Option<usize>,
}

/// Where [`Exec::advance`] left the collective.
#[derive(Debug)]
pub(crate) enum Poll {
    /// Waiting for transfers; `events` counts what this call did (posts and completions),
    /// for the caller's idle backoff.
    Pending {
        /// Posts and completions handled by this call.
        events: usize,
    },
    /// Finished: every transfer completed and every local step ran (or the first error,
    /// reported only once no transfer used the buffers any more). The executor is spent.
    Done(Result<()>),
}

/// A schedule being run on one rank: which round it is at and what of it is in flight.
#[derive(Debug)]
pub(crate) struct Exec<S, H> {
    sched: S,
    round: usize,
    /// The current round's transfers were posted.
    posted: bool,
    inflight: Vec<InFlight<H>>,
    /// The first error: no more posting or local steps, but what is in flight completes.
    err: Option<Error>,
}

impl<S: std::ops::Deref<Target = Schedule>, H> Exec<S, H> {
    /// An executor at the start of `sched`, keeping its in-flight list in `inflight` (a
    /// list given back by [`Exec::into_inflight`]: blocking collectives reuse one).
    pub(crate) fn new(sched: S, mut inflight: Vec<InFlight<H>>) -> Self {
        inflight.clear();
        Self {
            sched,
            round: 0,
            posted: false,
            inflight,
            err: None,
        }
    }

    /// The in-flight list, empty, for the next executor.
    pub(crate) fn into_inflight(mut self) -> Vec<InFlight<H>> {
        self.inflight.clear();
        self.inflight
    }

    /// Run the schedule as far as possible: with `block`, to its end (waiting for every
    /// transfer); without, until a transfer is still outstanding (testing, never waiting).
    /// `bufs` must be the buffers of every earlier call. Inlined: with `block` a constant,
    /// each caller gets only its half of the completion code.
    #[inline]
    pub(crate) fn advance<T: Transport<Handle = H>>(
        &mut self,
        t: &mut T,
        bufs: &Bufs,
        reduce: Option<ReduceFn<'_>>,
        block: bool,
    ) -> Poll {
        let mut events = 0;
        loop {
            if !self.posted {
                if self.err.is_some() || self.round == self.sched.rounds.len() {
                    return Poll::Done(self.err.take().map_or(Ok(()), Err));
                }
                self.post(t, bufs);
                self.posted = true;
                events += 1;
            }
            events += self.complete(t, block);
            if !self.inflight.is_empty() {
                return Poll::Pending { events };
            }
            if self.err.is_none() {
                if let Err(e) = run_locals(&self.sched.rounds[self.round].locals, bufs, reduce) {
                    self.err = Some(e);
                }
            }
            self.round += 1;
            self.posted = false;
        }
    }

    /// Post every transfer of the current round (stopping at the first error).
    #[inline]
    fn post<T: Transport<Handle = H>>(&mut self, t: &mut T, bufs: &Bufs) {
        let comms = &self.sched.rounds[self.round].comms;
        if comms.is_empty() {
            return;
        }
        // Receives first, so that eager data from fast peers lands in place; but a small
        // exchange sends first, as `sendrecv` does: a short message arriving before its
        // receive costs one small copy, and sending first takes the posting out of the
        // exchange's critical path.
        let send_first = matches!(
            comms.as_slice(),
            [Comm::Recv { region, .. }, Comm::Send { .. }]
                if region.range.len() <= crate::comm::SEND_FIRST_MAX
        );
        let is_recv = |c: &&Comm| matches!(c, Comm::Recv { .. });
        let recvs_first = !send_first;
        let order = (comms.iter().filter(move |c| is_recv(c) == recvs_first))
            .chain(comms.iter().filter(move |c| is_recv(c) != recvs_first));
        for c in order {
            let posted = match c {
                Comm::Recv { peer, region } => bufs
                    .region(region, true)
                    .and_then(|b| t.recv(*peer, b))
                    .map(|handle| {
                        Some(InFlight {
                            handle,
                            peer: *peer,
                            expect: Some(region.range.len()),
                        })
                    }),
                Comm::Send { peer, region } => bufs
                    .region(region, false)
                    .and_then(|b| t.send(*peer, b))
                    .map(|h| {
                        h.map(|handle| InFlight {
                            handle,
                            peer: *peer,
                            expect: None,
                        })
                    }),
            };
            match posted {
                Ok(Some(f)) => self.inflight.push(f),
                Ok(None) => {}
                Err(e) => {
                    self.err = Some(e);
                    break;
                }
            }
        }
    }

    /// Complete what is in flight (all of it with `block`, what has finished without);
    /// returns how many completed. Errors are kept for the end of the collective.
    #[inline]
    fn complete<T: Transport<Handle = H>>(&mut self, t: &mut T, block: bool) -> usize {
        let before = self.inflight.len();
        if before == 0 {
            return 0;
        }
        let err = &mut self.err;
        if block {
            for f in self.inflight.drain(..) {
                record(err, t.wait(&f.handle), &f);
            }
        } else {
            self.inflight.retain(|f| match t.test(&f.handle) {
                Some(r) => {
                    record(err, r, f);
                    false
                }
                None => true,
            });
        }
        before - self.inflight.len()
    }
}

/// Note the outcome of a completed transfer (the first error wins).
fn record<H>(err: &mut Option<Error>, outcome: Result<usize>, f: &InFlight<H>) {
    match (outcome, f.expect) {
        (Ok(got), Some(want)) if got != want => {
            err.get_or_insert(Error::InvalidArgument(format!(
                "collective arguments differ between ranks: expected {want} B from rank {}, got {got} B",
                f.peer
            )));
        }
        (Ok(_), _) => {}
        (Err(e), _) => {
            err.get_or_insert(e);
        }
    }
}

/// The PML's point-to-point over a communicator's collective context, with one tag.
pub(crate) struct CommTransport<'a> {
    /// The communicator (peers are its ranks).
    pub comm: &'a Communicator,
    /// The collective's tag.
    pub tag: i32,
}

impl Transport for CommTransport<'_> {
    type Handle = RequestId;

    fn send(&mut self, peer: usize, buf: UserBuf) -> Result<Option<RequestId>> {
        let started = self.comm.start_send_fast(
            buf,
            peer,
            self.tag,
            self.comm.coll_context(),
            SendMode::Standard,
            CommPattern::Collective,
        )?;
        Ok(match started {
            SendStart::Done => None,
            SendStart::Pending(id) => Some(id),
        })
    }

    fn recv(&mut self, peer: usize, buf: UserBuf) -> Result<RequestId> {
        self.comm.start_recv(
            buf,
            Src::Rank(peer),
            self.tag,
            self.comm.coll_context(),
            CommPattern::Collective,
        )
    }

    fn test(&mut self, id: &RequestId) -> Option<Result<usize>> {
        match self.comm.shared().with(|rt| Ok(rt.pml.test(*id)?)) {
            Ok(None) => None,
            Ok(Some(st)) => Some(self.comm.finish(st).map(|s| s.bytes)),
            Err(e) => Some(Err(e)),
        }
    }

    fn wait(&mut self, id: &RequestId) -> Result<usize> {
        self.comm.wait_raw(*id).map(|s| s.bytes)
    }
}

/// The local steps of a round. Runs only once the round's transfers all completed, so no
/// transfer touches the buffers meanwhile.
#[allow(unsafe_code)]
fn run_locals(locals: &[Local], bufs: &Bufs, reduce: Option<ReduceFn<'_>>) -> Result<()> {
    if locals.is_empty() {
        return Ok(());
    }
    // SAFETY: `Bufs::lend`'s contract makes the three regions valid and this executor's alone
    // while it runs, and no transfer is in flight here; the three are distinct (separate
    // borrows or allocations), and only `work` and `tmp` are written.
    let (send, work, tmp) = unsafe {
        (
            bytes(&bufs.send),
            bytes_mut(&bufs.work),
            bytes_mut(&bufs.tmp),
        )
    };
    for l in locals {
        match l {
            Local::Reduce {
                src,
                dst,
                src_first,
                acc,
            } => {
                let f = reduce.ok_or_else(|| {
                    Error::InvalidArgument("internal: reduction step without an operation".into())
                })?;
                let acc = match acc {
                    Buf::Work => None,
                    Buf::Send => Some(get(send, dst, Buf::Send)?),
                    Buf::Tmp => Some(get(tmp, dst, Buf::Tmp)?),
                };
                let src = get(tmp, src, Buf::Tmp)?;
                let dst = work.get_mut(dst.clone()).ok_or_else(|| oob_work(dst))?;
                f(dst, src, acc, *src_first);
            }
            Local::Copy { src, dst } => {
                if work.get(dst.clone()).is_none() {
                    return Err(oob_work(dst));
                }
                match src.buf {
                    Buf::Send => work[dst.clone()].copy_from_slice(get(send, &src.range, src.buf)?),
                    Buf::Tmp => work[dst.clone()].copy_from_slice(get(tmp, &src.range, src.buf)?),
                    Buf::Work => {
                        if src.range.len() != dst.len() || work.get(src.range.clone()).is_none() {
                            return Err(oob(src));
                        }
                        work.copy_within(src.range.clone(), dst.start)
                    }
                }
            }
            Local::Pack { src, dst } => {
                if tmp.get(dst.clone()).is_none() || src.range.len() != dst.len() {
                    return Err(oob(&Region::tmp(dst.clone())));
                }
                match src.buf {
                    Buf::Send => tmp[dst.clone()].copy_from_slice(get(send, &src.range, src.buf)?),
                    Buf::Work => tmp[dst.clone()].copy_from_slice(get(work, &src.range, src.buf)?),
                    Buf::Tmp => {
                        if tmp.get(src.range.clone()).is_none() {
                            return Err(oob(src));
                        }
                        tmp.copy_within(src.range.clone(), dst.start)
                    }
                }
            }
        }
    }
    Ok(())
}

fn get<'a>(b: &'a [u8], range: &std::ops::Range<usize>, buf: Buf) -> Result<&'a [u8]> {
    b.get(range.clone()).ok_or_else(|| {
        oob(&Region {
            buf,
            range: range.clone(),
        })
    })
}

/// The bytes of `b`.
///
/// # Safety
/// `b` must be valid for reads and not written while the result lives.
#[allow(unsafe_code)]
unsafe fn bytes(b: &UserBuf) -> &[u8] {
    if b.is_empty() {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(b.as_ptr(), b.len()) }
}

/// The bytes of `b`, writable.
///
/// # Safety
/// `b` must be writable, valid, and accessed by nothing else while the result lives.
#[allow(unsafe_code, clippy::mut_from_ref)]
unsafe fn bytes_mut(b: &UserBuf) -> &mut [u8] {
    if b.is_empty() {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(b.as_ptr(), b.len()) }
}

fn oob_work(range: &std::ops::Range<usize>) -> Error {
    oob(&Region {
        buf: Buf::Work,
        range: range.clone(),
    })
}

fn oob(region: &Region) -> Error {
    Error::InvalidArgument(format!(
        "internal: collective region {region:?} outside its buffer"
    ))
}

#[cfg(test)]
mod tests;
