//! Non-blocking requests, and the scopes that make lending a buffer to one sound.
//!
//! A non-blocking call lends its buffer to the PML until the request completes. Tying the
//! buffer's borrow to the request alone would not be enough: `std::mem::forget(request)` ends
//! the borrow without waiting, and the PML would then write into memory the program reuses.
//! So requests live in a [`Scope`], as threads do in `std::thread::scope`: a buffer is borrowed
//! for the whole scope, and the scope waits for every request still outstanding when it ends,
//! whether the closure returns or unwinds. Forgetting a request only delays its wait.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;

use rmca_framework::btl::CommPattern;
use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{RequestId, SendStart};

use crate::comm::Communicator;
use crate::{Error, Result, Status};

/// Run `f` with a [`Scope`] in which non-blocking operations can be started. Buffers given to
/// them must outlive the scope (declare them before calling `scope`); every request still
/// outstanding when `f` returns (or panics) is waited for before `scope` returns.
///
/// Loops that reuse a buffer for each round open one scope per round:
///
/// ```no_run
/// # fn main() -> rmca::Result<()> {
/// let universe = rmca::init()?;
/// let world = universe.world();
/// let peer = (world.rank() + 1) % world.size();
/// let (out, mut inbox) = ([1u64; 4], [0u64; 4]);
/// for _round in 0..10 {
///     rmca::scope(|s| {
///         let r = world.irecv(s, &mut inbox, rmca::ANY_SOURCE, 0)?;
///         world.isend(s, &out, peer, 0)?.wait()?;
///         r.wait().map(|_| ())
///     })?;
///     // The scope has ended: `inbox` may be read (or lent again) here.
/// }
/// # Ok(())
/// # }
/// ```
///
/// What the borrow checker refuses, and why each would be a use of memory the PML may still
/// write into. A buffer lent in a scope stays borrowed until the scope ends, even if its
/// request is forgotten:
///
/// ```compile_fail,E0499
/// # let universe = rmca::init().unwrap();
/// # let world = universe.world();
/// let mut buf = [0u8; 4];
/// rmca::scope(|s| {
///     std::mem::forget(world.irecv(s, &mut buf, 0, 0).unwrap());
///     world.recv(&mut buf, 0, 1).unwrap(); // `buf` is still lent to the forgotten receive
/// });
/// ```
///
/// A buffer that would be freed before the scope ends cannot be lent:
///
/// ```compile_fail,E0597
/// # let universe = rmca::init().unwrap();
/// # let world = universe.world();
/// rmca::scope(|s| {
///     let mut buf = [0u8; 4]; // dropped at the end of the closure, before the scope's wait
///     let _r = world.irecv(s, &mut buf, 0, 0).unwrap();
/// });
/// ```
///
/// And a request cannot leave its scope:
///
/// ```compile_fail
/// # let universe = rmca::init().unwrap();
/// # let world = universe.world();
/// let mut buf = [0u8; 4];
/// let request = rmca::scope(|s| world.irecv(s, &mut buf, 0, 0).unwrap());
/// ```
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    let scope = Scope {
        set: RequestSet::new(),
        _scope: PhantomData,
        _env: PhantomData,
    };
    // Dropped after `f`, also when it unwinds: the buffers lent in the scope are released to
    // the caller only once nothing can touch them any more.
    struct WaitOnExit<'a>(&'a RequestSet);
    impl Drop for WaitOnExit<'_> {
        fn drop(&mut self) {
            self.0.wait_outstanding();
        }
    }
    let exit = WaitOnExit(&scope.set);
    let out = f(&scope);
    drop(exit);
    out
}

/// The region of a program in which non-blocking requests may borrow buffers: see [`scope`].
///
/// `'scope` is the scope itself (every buffer lent in it is borrowed for `'scope`) and `'env`
/// what the scope may borrow from outside; both are invariant, as in `std::thread::Scope`.
pub struct Scope<'scope, 'env: 'scope> {
    set: RequestSet,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl std::fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("outstanding", &self.set.live())
            .finish()
    }
}

impl<'scope> Scope<'scope, '_> {
    /// The request of an operation the PML accepted as `id`.
    #[inline]
    pub(crate) fn pending(&'scope self, comm: &Communicator, id: RequestId) -> Request<'scope> {
        self.outstanding(comm, Outstanding::Pml(id))
    }

    /// The request of a non-blocking collective started as `id` (see [`crate::coll`]).
    pub(crate) fn pending_collective(
        &'scope self,
        comm: &Communicator,
        id: RequestId,
    ) -> Request<'scope> {
        self.outstanding(comm, Outstanding::Coll(id))
    }

    #[inline]
    fn outstanding(&'scope self, comm: &Communicator, o: Outstanding) -> Request<'scope> {
        Request {
            state: ReqState::Pending {
                slot: self.set.insert(o, comm),
                set: &self.set,
            },
        }
    }

    /// The request of a send to `dest` with `tag` of `bytes` bytes that started as `started`.
    #[inline]
    pub(crate) fn started_send(
        &'scope self,
        comm: &Communicator,
        started: SendStart,
        dest: usize,
        tag: i32,
        bytes: usize,
    ) -> Request<'scope> {
        match started {
            SendStart::Done => Request::done(Status::sent(dest, tag, bytes)),
            SendStart::Pending(id) => self.pending(comm, id),
        }
    }
}

/// What an outstanding request waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outstanding {
    /// A point-to-point request of the PML.
    Pml(RequestId),
    /// A non-blocking collective, run by the runtime's progress loop: its id among the
    /// active collectives (not a PML id).
    Coll(RequestId),
}

/// A request's entry in its scope's set: what it waits for, and on which of the scope's
/// communicators (an index: a slot holds no reference count, so taking and giving one back
/// costs no counter traffic on the windowed path).
#[derive(Clone, Copy)]
struct Entry {
    what: Outstanding,
    comm: u32,
}

/// A communicator that requests of the scope ran on, and how many of them are outstanding
/// (an entry with none is reused for the next new communicator).
struct ScopeComm {
    comm: Communicator,
    live: usize,
}

/// The state of a [`RequestSet`], under one borrow.
struct Slots {
    entries: Vec<Option<Entry>>,
    free: Vec<u32>,
    comms: Vec<ScopeComm>,
    live: usize,
}

impl Slots {
    const EMPTY: Slots = Slots {
        entries: Vec::new(),
        free: Vec::new(),
        comms: Vec::new(),
        live: 0,
    };

    /// The index of `comm` among the scope's communicators, added if new.
    #[inline]
    fn comm_index(&mut self, comm: &Communicator) -> u32 {
        // Nearly always the last one (a scope's requests usually share a communicator).
        let i = match self.comms.iter().rposition(|c| c.comm.same(comm)) {
            Some(i) => i,
            None => self.add_comm(comm),
        };
        u32::try_from(i).expect("fewer than 2^32 communicators in one scope")
    }

    #[cold]
    fn add_comm(&mut self, comm: &Communicator) -> usize {
        let fresh = ScopeComm {
            comm: comm.clone(),
            live: 0,
        };
        match self.comms.iter().position(|c| c.live == 0) {
            Some(i) => {
                self.comms[i] = fresh;
                i
            }
            None => {
                self.comms.push(fresh);
                self.comms.len() - 1
            }
        }
    }
}

impl Default for Slots {
    fn default() -> Self {
        Slots::EMPTY
    }
}

thread_local! {
    /// The vectors of the last scope that ended on this thread: a scope per round of a
    /// windowed loop then allocates nothing.
    static SPARE_SLOTS: Cell<Slots> = const { Cell::new(Slots::EMPTY) };
}

/// The outstanding requests of one scope, by slot (a request keeps its slot number).
pub(crate) struct RequestSet {
    slots: RefCell<Slots>,
}

impl RequestSet {
    fn new() -> Self {
        Self {
            slots: RefCell::new(SPARE_SLOTS.with(Cell::take)),
        }
    }

    /// How many requests of the scope are outstanding.
    fn live(&self) -> usize {
        self.slots.borrow().live
    }

    #[inline]
    fn insert(&self, what: Outstanding, comm: &Communicator) -> u32 {
        comm.shared().lend();
        let mut s = self.slots.borrow_mut();
        let c = s.comm_index(comm);
        s.comms[c as usize].live += 1;
        s.live += 1;
        let entry = Some(Entry { what, comm: c });
        match s.free.pop() {
            Some(i) => {
                s.entries[i as usize] = entry;
                i
            }
            None => {
                s.entries.push(entry);
                u32::try_from(s.entries.len() - 1).expect("fewer than 2^32 requests in one scope")
            }
        }
    }

    /// What the request in `slot` waits for (it stays there until [`RequestSet::release`]).
    #[inline]
    fn what(&self, slot: u32) -> Outstanding {
        self.slots.borrow().entries[slot as usize]
            .expect("a live request keeps its slot")
            .what
    }

    /// The request in `slot` and its communicator.
    fn get(&self, slot: u32) -> (Outstanding, Communicator) {
        let s = self.slots.borrow();
        let e = s.entries[slot as usize].expect("a live request keeps its slot");
        (e.what, s.comms[e.comm as usize].comm.clone())
    }

    /// Is the request in `slot` a non-blocking collective?
    fn is_collective(&self, slot: u32) -> bool {
        matches!(self.what(slot), Outstanding::Coll(_))
    }

    /// The request in `slot` completed: the PML no longer touches its buffer.
    #[inline]
    fn release(&self, slot: u32) {
        let finalize = {
            let mut s = self.slots.borrow_mut();
            let Some(e) = s.entries[slot as usize].take() else {
                return;
            };
            s.live -= 1;
            s.free.push(slot);
            let c = &mut s.comms[e.comm as usize];
            c.live -= 1;
            c.comm
                .shared()
                .unlend(1)
                .then(|| c.comm.shared_rc().clone())
        };
        // Last, outside the borrow: the last request's completion may run a deferred finalize.
        if let Some(shared) = finalize {
            crate::Shared::run_deferred_finalize(&shared);
        }
    }

    /// Wait for every request still in the set (forgotten ones, or all of them on unwind).
    fn wait_outstanding(&self) {
        if self.live() == 0 {
            return;
        }
        let n = self.slots.borrow().entries.len();
        for slot in 0..n {
            if self.slots.borrow().entries[slot].is_none() {
                continue;
            }
            let (what, comm) = self.get(slot as u32);
            if let Err(e) = comm.wait_request(what) {
                tracing::debug!("request outstanding at the end of its scope: {e}");
            }
            self.release(slot as u32);
        }
    }
}

impl Drop for RequestSet {
    fn drop(&mut self) {
        let mut s = self.slots.take();
        if s.live == 0 {
            s.entries.clear();
            s.free.clear();
            s.comms.clear();
            SPARE_SLOTS.with(|spare| spare.set(s));
        }
    }
}

/// An outstanding non-blocking operation whose buffer is borrowed for its [`Scope`].
/// Dropping it before completion waits for completion; forgetting it leaves the wait to the
/// end of the scope.
#[must_use = "a request must be waited on (dropping it waits)"]
pub struct Request<'scope> {
    state: ReqState<'scope>,
}

/// Where a [`Request`] stands.
enum ReqState<'scope> {
    /// Outstanding in the PML, in `slot` of its scope's set.
    Pending { slot: u32, set: &'scope RequestSet },
    /// Completed when it was started (an eager send the BTL took, or an operation on
    /// `PROC_NULL`), or found complete by a poll that keeps the outcome
    /// ([`Request::test_all`]): nothing left in the PML.
    Done(Status),
    /// Found failed by a poll that keeps the outcome: nothing left in the PML (boxed: rare,
    /// and a request stays two words on the hot path).
    Failed(Box<Error>),
    /// Its outcome was returned.
    Spent,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            ReqState::Pending { slot, .. } => format!("Pending(slot {slot})"),
            ReqState::Done(st) => format!("Done({st:?})"),
            ReqState::Failed(e) => format!("Failed({e})"),
            ReqState::Spent => "Spent".to_owned(),
        };
        f.debug_struct("Request").field("state", &state).finish()
    }
}

impl<'scope> Request<'scope> {
    /// The request of an operation the PML accepted as `id`, waited by `set`'s scope.
    fn pending_in(set: &'scope RequestSet, comm: &Communicator, id: RequestId) -> Self {
        Self {
            state: ReqState::Pending {
                slot: set.insert(Outstanding::Pml(id), comm),
                set,
            },
        }
    }

    /// A request that completed as it started.
    pub(crate) fn done(status: Status) -> Self {
        Self {
            state: ReqState::Done(status),
        }
    }

    /// Block until the operation completes.
    #[inline]
    pub fn wait(mut self) -> Result<Status> {
        match std::mem::replace(&mut self.state, ReqState::Spent) {
            ReqState::Pending { slot, set } => {
                let (id, comm) = set.get(slot);
                let outcome = comm.wait_request(id);
                set.release(slot);
                outcome
            }
            ReqState::Done(st) => Ok(st),
            ReqState::Failed(e) => Err(*e),
            ReqState::Spent => Err(Error::InvalidArgument("request already completed".into())),
        }
    }

    /// Has the operation completed? `Some` returns its outcome (after which the request is spent).
    pub fn test(&mut self) -> Option<Result<Status>> {
        if !self.poll(true) {
            return None;
        }
        // Exhaustive (no wildcard): a new kind of request must say how it completes.
        match std::mem::replace(&mut self.state, ReqState::Spent) {
            ReqState::Done(st) => Some(Ok(st)),
            ReqState::Failed(e) => Some(Err(*e)),
            // Spent already: its outcome was returned before.
            ReqState::Spent => None,
            pending @ ReqState::Pending { .. } => {
                self.state = pending;
                None
            }
        }
    }

    /// Is the operation complete? A pending request the PML reports complete keeps its
    /// outcome ([`ReqState::Done`] or [`ReqState::Failed`]) and gives back its slot; with
    /// `progress`, a miss runs one progress pass and looks again.
    fn poll(&mut self, progress: bool) -> bool {
        let (slot, set) = match self.state {
            ReqState::Pending { slot, set } => (slot, set),
            ReqState::Done(_) | ReqState::Failed(_) | ReqState::Spent => return true,
        };
        let (id, comm) = set.get(slot);
        let id = match id {
            Outstanding::Pml(id) => id,
            Outstanding::Coll(id) => {
                // Testing a collective request runs a progress pass of its own (PML and
                // every running collective).
                let Some(outcome) = comm.shared().test_collective(id) else {
                    return false;
                };
                set.release(slot);
                self.state = match outcome {
                    Ok(st) => ReqState::Done(st),
                    Err(e) => ReqState::Failed(Box::new(e)),
                };
                return true;
            }
        };
        let r = comm.shared().with(|rt| {
            if let Some(st) = rt.pml.test(id)? {
                return Ok(Some(st));
            }
            if !progress {
                return Ok(None);
            }
            rt.progress();
            Ok(rt.pml.test(id)?)
        });
        let outcome = match r {
            Ok(None) => {
                // Testing progresses non-blocking collectives too.
                comm.shared().step_collectives();
                return false;
            }
            Ok(Some(st)) => comm.finish(st),
            Err(e) => Err(e),
        };
        set.release(slot);
        self.state = match outcome {
            Ok(st) => ReqState::Done(st),
            Err(e) => ReqState::Failed(Box::new(e)),
        };
        true
    }

    /// One progress pass of the runtime of the first pending request of `requests` (if any),
    /// then which of them are complete (their outcomes kept in them).
    fn poll_all(requests: &mut [Request<'scope>]) -> Vec<bool> {
        let comm = requests.iter().find_map(|r| match r.state {
            ReqState::Pending { slot, set } => Some(set.get(slot).1),
            _ => None,
        });
        if let Some(comm) = comm {
            // A finalized runtime shows up in each request's own poll below.
            let _ = comm.shared().with(|rt| {
                rt.progress();
                Ok(())
            });
            comm.shared().step_collectives();
        }
        requests.iter_mut().map(|r| r.poll(false)).collect()
    }

    /// The outcome of a request that [`Request::poll`] found complete.
    fn take_outcome(self) -> Result<Status> {
        self.wait()
    }

    /// Try to cancel the operation (`MPI_Cancel`). A receive that has not matched a message
    /// yet is withdrawn from matching: it completes at once and its [`Status::cancelled`]
    /// says so. Sends cannot be cancelled with either PML (an eager message was handed to a
    /// BTL when the send started, and a rendezvous announcement is already queued at the
    /// receiver; see `Pml::cancel` in the framework; even a send still queued behind BTL
    /// back-pressure holds a sequence number the receiver's ordering would wait for), nor can
    /// a receive that matched: those complete normally. Either way the request must still be
    /// waited or tested; the returned flag says whether the cancel took effect.
    pub fn cancel(&mut self) -> Result<bool> {
        let ReqState::Pending { slot, set } = self.state else {
            return Ok(false);
        };
        match set.get(slot) {
            (Outstanding::Pml(id), comm) => comm.shared().with(|rt| Ok(rt.pml.cancel(id)?)),
            // MPI defines no cancel of a collective: it completes normally.
            (Outstanding::Coll(_), _) => Ok(false),
        }
    }

    /// Complete at most one request of `requests` without blocking (`MPI_Testany`): one
    /// progress pass, then the first complete request is removed and returned with its index
    /// and outcome (the index also comes with an error). `None`: none has completed (or the
    /// list is empty).
    pub fn test_any(requests: &mut Vec<Request<'scope>>) -> Option<(usize, Result<Status>)> {
        let i = Self::poll_all(requests).iter().position(|&d| d)?;
        Some((i, requests.remove(i).take_outcome()))
    }

    /// Complete every request of `requests` if all have completed (`MPI_Testall`): one
    /// progress pass, then either `None` (some are still outstanding: every request stays in
    /// `requests`, those complete keeping their outcome) or the statuses in order, `requests`
    /// emptied. As [`Request::wait_all`], the first error is returned if any failed.
    pub fn test_all(requests: &mut Vec<Request<'scope>>) -> Option<Result<Vec<Status>>> {
        if !Self::poll_all(requests).into_iter().all(|d| d) {
            return None;
        }
        Some(Self::wait_all(std::mem::take(requests)))
    }

    /// Complete every request of `requests` that has completed, without blocking
    /// (`MPI_Testsome`): one progress pass, then the complete ones are removed and returned,
    /// each with its index in `requests` as it was before the call (ascending). Empty when none
    /// has completed.
    pub fn test_some(requests: &mut Vec<Request<'scope>>) -> Vec<(usize, Result<Status>)> {
        let done = Self::poll_all(requests);
        let mut out = Vec::new();
        let mut kept = Vec::with_capacity(requests.len());
        for (index, (r, d)) in std::mem::take(requests).into_iter().zip(done).enumerate() {
            if d {
                out.push((index, r.take_outcome()));
            } else {
                kept.push(r);
            }
        }
        *requests = kept;
        out
    }

    /// Block until at least one request of `requests` completes, then complete every one that
    /// has (`MPI_Waitsome`): as [`Request::test_some`], never empty. An empty list is an
    /// error (nothing could complete).
    pub fn wait_some(requests: &mut Vec<Request<'scope>>) -> Result<Vec<(usize, Result<Status>)>> {
        if requests.is_empty() {
            return Err(Error::InvalidArgument("wait_some on an empty list".into()));
        }
        let mut backoff = rmca_framework::progress::ReleasingBackoff::default();
        loop {
            let done = Self::test_some(requests);
            if !done.is_empty() {
                return Ok(done);
            }
            backoff.pass(0);
        }
    }

    /// Wait for every request; statuses in order. The first error is returned after all
    /// requests completed (no buffer is released while still in use).
    pub fn wait_all(requests: Vec<Request<'scope>>) -> Result<Vec<Status>> {
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
    pub fn complete_all(mut requests: Vec<Request<'scope>>) -> Result<()> {
        // Collectives are not the PML's: a batch with one is waited for request by request.
        if crate::coll::nonblocking::any_uncollected()
            && requests.iter().any(Request::is_collective)
        {
            return Self::wait_all(requests).map(drop);
        }
        // Requests that completed when they started (eager sends) are only looked at; the
        // others go to the PML in one call, which waits for them in order.
        // Only ids are read here (no communicator handle taken per request).
        let mut pending = requests.iter().filter_map(|r| match r.state {
            ReqState::Pending { slot, set } => match set.what(slot) {
                Outstanding::Pml(id) => Some((id, set, slot)),
                Outstanding::Coll(_) => None,
            },
            _ => None,
        });
        let Some((first, first_set, first_slot)) = pending.next() else {
            // Nothing left in the PML; a request polled complete may hold an error.
            return requests
                .iter_mut()
                .find_map(|r| match std::mem::replace(&mut r.state, ReqState::Spent) {
                    ReqState::Failed(e) => Some(*e),
                    _ => None,
                })
                .map_or(Ok(()), Err);
        };
        let comm = first_set.get(first_slot).1;
        let shared = comm.shared();
        let mut ids = shared.take_batch();
        ids.reserve(requests.len());
        ids.push(first);
        ids.extend(pending.map(|(id, _, _)| id));
        let outcome = shared.wait_all(&ids);
        shared.give_batch(ids);
        // Every request the PML knew is released now, failed or not.
        let failed = match outcome {
            Ok(failed) => failed,
            Err(e) => {
                for r in &mut requests {
                    r.spend();
                }
                return Err(e);
            }
        };
        let mut first_err = None;
        let mut pending_index = 0;
        let mut failed = failed.into_iter().peekable();
        for r in &mut requests {
            if !matches!(r.state, ReqState::Pending { .. }) {
                if let ReqState::Failed(e) = std::mem::replace(&mut r.state, ReqState::Spent) {
                    first_err.get_or_insert(*e);
                }
                continue;
            }
            if failed.peek().is_some_and(|(i, _)| *i == pending_index) {
                let (_, st) = failed.next().expect("peeked");
                // The status is in the terms of the request's own communicator.
                if let ReqState::Pending { slot, set } = r.state {
                    if let Err(e) = set.get(slot).1.finish(st) {
                        first_err.get_or_insert(e);
                    }
                }
            }
            r.spend();
            pending_index += 1;
        }
        // Every request is spent now and owns nothing: forgetting them skips a call into the
        // request's drop glue per element (it can hold a boxed error, so the glue is not
        // trivial and is not inlined).
        debug_assert!(requests.iter().all(|r| matches!(r.state, ReqState::Spent)));
        requests.into_iter().for_each(std::mem::forget);
        first_err.map_or(Ok(()), Err)
    }

    /// Wait until one request completes; it is removed from `requests` and returned with its index.
    pub fn wait_any(requests: &mut Vec<Request<'scope>>) -> Result<(usize, Status)> {
        if requests.is_empty() {
            return Err(Error::InvalidArgument("wait_any on an empty list".into()));
        }
        let mut backoff = rmca_framework::progress::Backoff::default();
        loop {
            for i in 0..requests.len() {
                if let Some(r) = requests[i].test() {
                    let _completed = requests.remove(i);
                    return r.map(|s| (i, s));
                }
            }
            // The pass made progress inside test/iprobe; its event count is not known here.
            backoff.pass(0);
        }
    }

    /// Is this an outstanding non-blocking collective?
    fn is_collective(&self) -> bool {
        matches!(self.state, ReqState::Pending { slot, set } if set.is_collective(slot))
    }

    /// The PML completed this request (its outcome was handled elsewhere).
    fn spend(&mut self) {
        if let ReqState::Pending { slot, set } = std::mem::replace(&mut self.state, ReqState::Spent)
        {
            set.release(slot);
        }
    }
}

impl Drop for Request<'_> {
    #[inline]
    fn drop(&mut self) {
        // Small enough to inline where a window of requests is dropped (they are done or spent
        // by then); an outstanding one waits out of line.
        if matches!(self.state, ReqState::Pending { .. }) {
            self.wait_on_drop();
        }
    }
}

impl Request<'_> {
    /// Dropped while outstanding: finish the transfer now rather than at the end of the scope,
    /// as a blocking call would.
    #[cold]
    #[inline(never)]
    fn wait_on_drop(&mut self) {
        if let ReqState::Pending { slot, set } = std::mem::replace(&mut self.state, ReqState::Spent)
        {
            let (id, comm) = set.get(slot);
            if let Err(e) = comm.wait_request(id) {
                tracing::debug!("request dropped with error: {e}");
            }
            set.release(slot);
        }
    }
}

/// How a [`Persistent`] request borrows its buffer.
pub(crate) enum Lent<'scope, T> {
    /// Read-only (sends).
    Shared(&'scope [T]),
    /// Exclusively: lent back mutably between runs.
    Exclusive(&'scope mut [T]),
}

/// What a [`Persistent`] request does at each start.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PersistentOp {
    /// Send to this communicator rank (`None`: `PROC_NULL`).
    Send {
        dest: Option<usize>,
        tag: i32,
        mode: rmca_framework::pml::SendMode,
    },
    /// Receive (a `source` of `None`: `PROC_NULL`).
    Recv {
        source: Option<crate::Src>,
        tag: i32,
    },
}

/// A persistent operation (`MPI_Send_init`, `MPI_Recv_init`): the arguments are checked once,
/// then [`Persistent::start`] runs the operation again and again, each run completed by
/// [`Persistent::wait`] or [`Persistent::test`] before the next start.
///
/// The buffer is borrowed for the request's [`Scope`], as for [`Request`]s: while a run is
/// outstanding, a dropped persistent request waits for it, and a forgotten one
/// (`std::mem::forget`) is waited at the end of the scope, so the PML never writes into a
/// released buffer. Between runs the request lends the buffer back: [`Persistent::data`]
/// (and [`Persistent::data_mut`] for receives and `send_init_mut` sends) return it, refusing
/// while a run is outstanding; the borrow checker keeps such a borrow from overlapping a start.
///
/// ```no_run
/// # fn main() -> rmca::Result<()> {
/// let universe = rmca::init()?;
/// let world = universe.world();
/// let (right, left) = ((world.rank() + 1) % world.size(), (world.rank() + world.size() - 1) % world.size());
/// let (mut out, mut inbox) = ([0u64; 4], [0u64; 4]);
/// rmca::scope(|s| {
///     let mut send = world.send_init_mut(s, &mut out, right, 0)?;
///     let mut recv = world.recv_init(s, &mut inbox, left, 0)?;
///     for step in 0..10u64 {
///         send.data_mut()?.fill(step);
///         recv.start()?;
///         send.start()?;
///         send.wait()?;
///         recv.wait()?;
///         assert_eq!(recv.data()?[0], step);
///     }
///     Ok(())
/// })
/// # }
/// ```
///
/// What the borrow checker refuses. The buffer stays lent for the whole scope, even if the
/// request is forgotten while active:
///
/// ```compile_fail,E0503
/// # let universe = rmca::init().unwrap();
/// # let world = universe.world();
/// let mut inbox = [0u8; 4];
/// rmca::scope(|s| {
///     let mut r = world.recv_init(s, &mut inbox, 0, 0).unwrap();
///     r.start().unwrap();
///     std::mem::forget(r);
///     let _peek = inbox[0]; // still lent to the forgotten, active receive
/// });
/// ```
///
/// And a buffer lent back between runs must be given up before the next start:
///
/// ```compile_fail,E0502
/// # let universe = rmca::init().unwrap();
/// # let world = universe.world();
/// let mut inbox = [0u8; 4];
/// rmca::scope(|s| {
///     let mut r = world.recv_init(s, &mut inbox, 0, 0).unwrap();
///     let seen = r.data().unwrap();
///     r.start().unwrap(); // the PML may now write into what `seen` reads
///     let _peek = seen[0];
/// });
/// ```
pub struct Persistent<'scope, T> {
    comm: Communicator,
    set: &'scope RequestSet,
    /// The buffer, borrowed for `'scope` (`_buf`). Kept as a pointer rather than the reference
    /// it came from: a reference moved along with the request would be re-asserted as unique
    /// while the PML writes through the pointer it was given.
    ptr: std::ptr::NonNull<T>,
    len: usize,
    /// Borrowed exclusively (receives, `send_init_mut`): may be lent back mutably.
    exclusive: bool,
    _buf: PhantomData<&'scope mut [T]>,
    op: PersistentOp,
    /// The outstanding run, if started and not yet completed.
    active: Option<Request<'scope>>,
}

impl<T> std::fmt::Debug for Persistent<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persistent")
            .field("op", &self.op)
            .field("active", &self.active)
            .finish()
    }
}

impl<'scope> Scope<'scope, '_> {
    /// A persistent request over `buf` (arguments already checked).
    pub(crate) fn persistent<T: bytemuck::Pod>(
        &'scope self,
        comm: &Communicator,
        buf: Lent<'scope, T>,
        op: PersistentOp,
    ) -> Persistent<'scope, T> {
        let (ptr, len, exclusive) = match buf {
            Lent::Shared(b) => (std::ptr::NonNull::from(b), b.len(), false),
            Lent::Exclusive(b) => (std::ptr::NonNull::from(&mut *b), b.len(), true),
        };
        Persistent {
            comm: comm.clone(),
            set: &self.set,
            ptr: ptr.cast(),
            len,
            exclusive,
            _buf: PhantomData,
            op,
            active: None,
        }
    }
}

impl<'scope, T: bytemuck::Pod> Persistent<'scope, T> {
    fn idle(&self, what: &str) -> Result<()> {
        if self.active.is_some() {
            return Err(Error::InvalidArgument(format!(
                "Persistent::{what}: the request is active (started and not yet waited or tested to completion)"
            )));
        }
        Ok(())
    }

    /// Is a run outstanding (started, not yet completed by `wait` or `test`)?
    pub fn is_active(&self) -> bool {
        self.active.is_some()
    }

    /// The buffer, between runs (an error while one is outstanding).
    #[allow(unsafe_code)]
    pub fn data(&self) -> Result<&[T]> {
        self.idle("data")?;
        // SAFETY: the buffer is borrowed for `'scope` by this request, and no run is
        // outstanding, so nothing writes into it while the returned borrow of `self` lives
        // (starting one takes `&mut self`).
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) })
    }

    /// The buffer to modify, between runs: receives, and sends made with `send_init_mut`.
    #[allow(unsafe_code)]
    pub fn data_mut(&mut self) -> Result<&mut [T]> {
        self.idle("data_mut")?;
        if !self.exclusive {
            return Err(Error::InvalidArgument(
                "Persistent::data_mut: this send borrowed its buffer shared (use send_init_mut to modify it between runs)".into(),
            ));
        }
        // SAFETY: the buffer was borrowed exclusively for `'scope` by this request, no run is
        // outstanding, and the returned borrow of `self` excludes a start while it lives.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) })
    }

    /// Start a run (`MPI_Start`). An error if the previous run has not been completed.
    #[allow(unsafe_code)]
    pub fn start(&mut self) -> Result<()> {
        self.idle("start")?;
        let ptr = self.ptr.as_ptr().cast::<u8>();
        let bytes = std::mem::size_of::<T>() * self.len;
        let request = match self.op {
            PersistentOp::Send { dest: None, .. } | PersistentOp::Recv { source: None, .. } => {
                Request::done(Status::PROC_NULL)
            }
            PersistentOp::Send {
                dest: Some(dest),
                tag,
                mode,
            } => {
                // SAFETY: the buffer is borrowed for the scope, which waits for the run before
                // it ends (even if this request is forgotten); the PML only reads a send buffer.
                let buf = unsafe { UserBuf::from_raw_parts(ptr, bytes) };
                let started =
                    self.comm
                        .start_send_bytes(buf, dest, tag, mode, CommPattern::NonBlocking)?;
                match started {
                    SendStart::Done => Request::done(Status::sent(dest, tag, bytes)),
                    SendStart::Pending(id) => Request::pending_in(self.set, &self.comm, id),
                }
            }
            PersistentOp::Recv {
                source: Some(source),
                tag,
            } => {
                // SAFETY: as for sends; receives always borrow their buffer exclusively, and
                // this request lends it out only between runs (`data`/`data_mut`).
                let buf = unsafe { UserBuf::from_raw_parts_mut(ptr, bytes) };
                let id = self.comm.start_recv_bytes(buf, source, tag)?;
                Request::pending_in(self.set, &self.comm, id)
            }
        };
        self.active = Some(request);
        Ok(())
    }

    /// Start every request of `requests` (`MPI_Startall`), in order; stops at the first error
    /// (the requests started before it stay active).
    pub fn start_all(requests: &mut [Persistent<'scope, T>]) -> Result<()> {
        requests.iter_mut().try_for_each(Persistent::start)
    }

    /// Block until the run completes; the request can then be started again. An error if it
    /// is not active.
    pub fn wait(&mut self) -> Result<Status> {
        match self.active.take() {
            Some(r) => r.wait(),
            None => Err(Error::InvalidArgument(
                "Persistent::wait: the request is not active (start it first)".into(),
            )),
        }
    }

    /// Has the run completed? `Some` returns its outcome (the request can then be started
    /// again); `None` while outstanding or when not active.
    pub fn test(&mut self) -> Option<Result<Status>> {
        let outcome = self.active.as_mut()?.test()?;
        self.active = None;
        Some(outcome)
    }

    /// Wait for the runs of every active request of `requests`, statuses in order (inactive
    /// ones report `None`). The first error is returned after all completed.
    pub fn wait_all(requests: &mut [Persistent<'scope, T>]) -> Result<Vec<Option<Status>>> {
        let mut out = Vec::with_capacity(requests.len());
        let mut first_err = None;
        for r in requests {
            match r.active.take().map(Request::wait) {
                None => out.push(None),
                Some(Ok(st)) => out.push(Some(st)),
                Some(Err(e)) => {
                    out.push(None);
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(out), Err)
    }

    /// Try to cancel the active run (see [`Request::cancel`]); it must still be waited.
    pub fn cancel(&mut self) -> Result<bool> {
        match self.active.as_mut() {
            Some(r) => r.cancel(),
            None => Ok(false),
        }
    }
}
