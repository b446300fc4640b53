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
            .field("outstanding", &self.set.live.get())
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
            SendStart::Done => Request::done(Status {
                source: dest,
                tag,
                bytes,
            }),
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

type Slot = Option<(Outstanding, Communicator)>;

thread_local! {
    /// The slot vectors of the last scope that ended on this thread: a scope per round of a
    /// windowed loop then allocates nothing.
    static SPARE_SLOTS: Cell<(Vec<Slot>, Vec<u32>)> = const { Cell::new((Vec::new(), Vec::new())) };
}

/// The outstanding requests of one scope, by slot (a request keeps its slot number).
pub(crate) struct RequestSet {
    slots: RefCell<Vec<Slot>>,
    free: RefCell<Vec<u32>>,
    live: Cell<usize>,
}

impl RequestSet {
    fn new() -> Self {
        let (slots, free) = SPARE_SLOTS.with(Cell::take);
        Self {
            slots: RefCell::new(slots),
            free: RefCell::new(free),
            live: Cell::new(0),
        }
    }

    fn insert(&self, id: Outstanding, comm: &Communicator) -> u32 {
        crate::Shared::lent_requests(comm.shared_rc(), 1);
        self.live.set(self.live.get() + 1);
        let entry = Some((id, comm.clone()));
        let mut slots = self.slots.borrow_mut();
        match self.free.borrow_mut().pop() {
            Some(i) => {
                slots[i as usize] = entry;
                i
            }
            None => {
                slots.push(entry);
                u32::try_from(slots.len() - 1).expect("fewer than 2^32 requests in one scope")
            }
        }
    }

    /// The request in `slot` (it stays there until [`RequestSet::release`]).
    fn get(&self, slot: u32) -> (Outstanding, Communicator) {
        self.slots.borrow()[slot as usize]
            .clone()
            .expect("a live request keeps its slot")
    }

    /// Is the request in `slot` a non-blocking collective?
    fn is_collective(&self, slot: u32) -> bool {
        matches!(
            self.slots.borrow()[slot as usize],
            Some((Outstanding::Coll(_), _))
        )
    }

    /// The request in `slot` completed: the PML no longer touches its buffer.
    fn release(&self, slot: u32) {
        let taken = self.slots.borrow_mut()[slot as usize].take();
        if let Some((_, comm)) = taken {
            self.live.set(self.live.get() - 1);
            self.free.borrow_mut().push(slot);
            // Last: it may run a deferred finalize.
            crate::Shared::lent_requests(comm.shared_rc(), -1);
        }
    }

    /// Wait for every request still in the set (forgotten ones, or all of them on unwind).
    fn wait_outstanding(&self) {
        if self.live.get() == 0 {
            return;
        }
        let n = self.slots.borrow().len();
        for slot in 0..n {
            let Some((id, comm)) = self.slots.borrow()[slot].clone() else {
                continue;
            };
            if let Err(e) = comm.wait_request(id) {
                tracing::debug!("request outstanding at the end of its scope: {e}");
            }
            self.release(slot as u32);
        }
    }
}

impl Drop for RequestSet {
    fn drop(&mut self) {
        let (mut slots, mut free) = (self.slots.take(), self.free.take());
        if slots.iter().all(Option::is_none) {
            slots.clear();
            free.clear();
            SPARE_SLOTS.with(|s| s.set((slots, free)));
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
    /// `PROC_NULL`): nothing left in the PML.
    Done(Status),
    /// Its outcome was returned.
    Spent,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            ReqState::Pending { slot, .. } => format!("Pending(slot {slot})"),
            ReqState::Done(st) => format!("Done({st:?})"),
            ReqState::Spent => "Spent".to_owned(),
        };
        f.debug_struct("Request").field("state", &state).finish()
    }
}

impl<'scope> Request<'scope> {
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
            ReqState::Spent => Err(Error::InvalidArgument("request already completed".into())),
        }
    }

    /// Has the operation completed? `Some` returns its outcome (after which the request is spent).
    pub fn test(&mut self) -> Option<Result<Status>> {
        let ReqState::Pending { slot, set } = self.state else {
            return match std::mem::replace(&mut self.state, ReqState::Spent) {
                ReqState::Done(st) => Some(Ok(st)),
                _ => None,
            };
        };
        let (id, comm) = set.get(slot);
        let id = match id {
            Outstanding::Pml(id) => id,
            Outstanding::Coll(id) => {
                let outcome = comm.shared().test_collective(id)?;
                set.release(slot);
                self.state = ReqState::Spent;
                return Some(outcome);
            }
        };
        let r = comm.shared().with(|rt| {
            if let Some(st) = rt.pml.test(id)? {
                return Ok(Some(st));
            }
            rt.progress();
            Ok(rt.pml.test(id)?)
        });
        let outcome = match r {
            Ok(None) => {
                // Testing progresses non-blocking collectives too.
                comm.shared().step_collectives();
                return None;
            }
            Ok(Some(st)) => comm.finish(st),
            Err(e) => Err(e),
        };
        set.release(slot);
        self.state = ReqState::Spent;
        Some(outcome)
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
        let mut pending = requests.iter().filter_map(|r| match r.state {
            ReqState::Pending { slot, set } => match set.get(slot) {
                (Outstanding::Pml(id), comm) => Some((id, comm)),
                (Outstanding::Coll(_), _) => None,
            },
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
                r.state = ReqState::Spent;
                continue;
            }
            if failed.peek().is_some_and(|(i, _)| *i == pending_index) {
                let (_, st) = failed.next().expect("peeked");
                if let Err(e) = comm.finish(st) {
                    first_err.get_or_insert(e);
                }
            }
            r.spend();
            pending_index += 1;
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Wait until one request completes; it is removed from `requests` and returned with its index.
    pub fn wait_any(requests: &mut Vec<Request<'scope>>) -> Result<(usize, Status)> {
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
