//! Non-blocking collectives: `ibarrier`, `ibcast`, `ireduce`, `iallreduce`, `igather`,
//! `iscatter`, `iallgather` and `ialltoall` on [`Communicator`] (and, for [`crate::raw`]'s
//! byte-level callers, gatherv, scatterv, allgatherv, alltoallv, reduce_scatter and the scans).
//!
//! Each starts the same schedule its blocking form runs (same algorithms, same
//! `coll_<op>_algorithm` parameters, same results bit for bit) on the same steppable
//! executor, and returns a [`Request`] of the caller's [`crate::scope`]: the
//! buffers stay borrowed until the scope ends, and [`Request::wait`], [`Request::test`],
//! [`Request::wait_all`], [`Request::wait_any`] and [`Request::complete_all`] work on it as on
//! a point-to-point request. A completed collective's status has this rank as `source`,
//! [`ANY_TAG`] as `tag`, and the bytes of the result this rank holds as `bytes` (0 where it
//! holds none: a non-root of a reduce or gather, a barrier).
//!
//! ```no_run
//! # fn main() -> rmca::Result<()> {
//! let universe = rmca::init()?;
//! let world = universe.world();
//! let (part, mut total) = ([world.rank() as f64; 4], [0.0f64; 4]);
//! let mut params = [0u32; 8];
//! rmca::scope(|s| {
//!     let sum = world.iallreduce(s, &part, &mut total, rmca::coll::Op::Sum)?;
//!     let bcast = world.ibcast(s, &mut params, 0)?;
//!     // ... work that does not touch `total` or `params` ...
//!     rmca::Request::complete_all(vec![sum, bcast])
//! })?;
//! # Ok(())
//! # }
//! ```
//!
//! # Progress rule
//!
//! A started collective posts its first round at once and is kept in the runtime's list of
//! active collectives. Every progress pass of the runtime steps every active collective as
//! far as it can go without waiting: while the program waits on any request or tests one,
//! blocks in a point-to-point call or a probe, or runs another (blocking or non-blocking)
//! collective. So a collective completes even if its own request is never tested, as long as
//! the program calls into rmca; a program computing without any call makes no progress (there
//! is no progress thread). While no collective is active, waits take the PML's own loop, as
//! before.
//!
//! # Matching rule
//!
//! As in MPI, every member must start the collectives of one communicator in the same order
//! (blocking and non-blocking alike); several may be outstanding at once, on one communicator
//! and across communicators. They run on the communicator's collective context (its
//! point-to-point context + 1, so they never match user messages), and each non-blocking
//! collective takes the next number `k` of its communicator's sequence, counted identically
//! on every member, and uses the tag [`NB_TAG_BASE`]` + k mod 2^29`: outstanding collectives
//! of one communicator never share a tag, so they cannot take each other's messages even when
//! their rounds interleave. Blocking collectives keep their fixed per-operation tags (below
//! [`NB_TAG_BASE`]): each runs to completion where it is called, so per-source ordering keeps
//! consecutive ones apart. A tag comes back after 2^29 collectives; by then its first user
//! has completed on every rank that could still send with it, unless 2^29 collectives are
//! outstanding on one communicator at once. Collectives whose order is fixed when they are
//! set up rather than when they run (an MPI persistent collective, started in any order
//! after inits made in one order; the rounds of [`Communicator::idup`]) take their number
//! from a second sequence of the communicator, counted at set-up, in a band of their own
//! ([`RESERVED_TAG_BASE`]); each run of one reuses its tag, after the previous run completed.

use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::rc::Rc;

use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{RequestId, Status as PmlStatus};
use rmca_framework::progress::ReleasingBackoff;
use rmca_framework::slab::Slab;

use super::exec::{Bufs, CommTransport, Exec, Poll};
use super::schedule::Schedule;
use super::{
    allgather_schedule, check_len, Op, Reducible, Reduction, SchedKey, TAG_ALLTOALL, TAG_BARRIER,
};
use crate::request::Outstanding;
use crate::{Communicator, Error, Request, Result, Scope, Shared, Status, ANY_TAG};

mod inter;
pub(crate) mod owned;

/// The first tag of non-blocking collectives; blocking collectives use tags below it.
pub const NB_TAG_BASE: i32 = 1 << 30;

/// The first tag of the collectives that take their number when they are set up rather than
/// when they run (persistent collectives at their init, the agreement of
/// [`crate::Communicator::idup`] at its call): `RESERVED_TAG_BASE + k mod 2^29` for the k-th
/// of a communicator, a band apart from the other non-blocking collectives' (module docs).
pub const RESERVED_TAG_BASE: i32 = NB_TAG_BASE + (1 << 29);

/// Tags in each band of non-blocking collectives.
const NB_TAGS: u32 = 1 << 29;

/// A reduction step owned by a collective (see [`super::exec::ReduceFn`]).
type OwnedReduce = Box<dyn Fn(&mut [u8], &[u8], Option<&[u8]>, bool)>;

thread_local! {
    /// Collectives started on this thread and not collected yet, over every universe: while
    /// it is 0, no request can be a collective, and request batches skip looking.
    static UNCOLLECTED: Cell<usize> = const { Cell::new(0) };
    /// The slot the collective started now takes instead of the next number of its
    /// communicator's sequence (see [`in_slot`]): (collective context, tag).
    static SLOT: Cell<Option<(rmca_framework::pml::ContextId, i32)>> = const { Cell::new(None) };
}

/// A place in a communicator's collective order taken when a collective is set up, not when
/// it runs: an MPI persistent collective's (`MPI_Bcast_init`, ...), whose runs every member
/// may start in another order than the inits, which MPI orders. Each run takes the slot's tag
/// (in a band apart from the ordinary sequence: module docs); a run starts only after the
/// previous one completed on this process, so runs never overlap on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollSlot {
    context: rmca_framework::pml::ContextId,
    tag: i32,
}

impl Communicator {
    /// Take the next slot of this communicator's collective order for a collective set up
    /// now and run later ([`in_slot`]). Every member must take its slots in the same order
    /// (as MPI orders persistent collectives' inits with the other collective calls).
    pub fn reserve_coll_slot(&self) -> CollSlot {
        CollSlot {
            context: self.coll_context(),
            tag: self.reserve_coll_tag(),
        }
    }
}

/// Run `start`, which starts one non-blocking collective (through [`crate::raw`]) on the
/// communicator `slot` was reserved on: it takes `slot`'s place in the collective order
/// instead of the next of the sequence. A collective on another communicator, or any after
/// the first, takes its number as usual.
pub fn in_slot<R>(slot: CollSlot, start: impl FnOnce() -> R) -> R {
    struct Clear(Option<(rmca_framework::pml::ContextId, i32)>);
    impl Drop for Clear {
        fn drop(&mut self) {
            SLOT.with(|s| s.set(self.0));
        }
    }
    let _restore = Clear(SLOT.with(|s| s.replace(Some((slot.context, slot.tag)))));
    start()
}

/// Can a request of this thread be a non-blocking collective? (False: none is outstanding.)
#[inline]
pub(crate) fn any_uncollected() -> bool {
    UNCOLLECTED.with(Cell::get) > 0
}

fn count_uncollected(delta: isize) {
    UNCOLLECTED.with(|c| c.set(c.get().wrapping_add_signed(delta)));
}

/// Work that chains collectives and decides between them (the context-id agreement of
/// [`crate::Communicator::idup`]): stepped after the collectives on every progress pass, so
/// that it advances while the program waits on anything, until it says it is done.
pub(crate) trait Chained {
    /// Advance without waiting (it may start collectives); the events handled and whether
    /// it is done (then it is stepped no more).
    fn step(&mut self) -> (usize, bool);
}

/// The non-blocking collectives of a process that have not been waited for yet.
#[derive(Default)]
pub(crate) struct Active {
    table: RefCell<Slab<NbColl>>,
    /// Collectives of the table still running (the others wait to be collected), and
    /// chained work not done.
    running: Cell<usize>,
    /// Chained work not done yet.
    chained: RefCell<Vec<Rc<RefCell<dyn Chained>>>>,
    /// The lowest free context id of the non-blocking agreements' range, as an offset from
    /// its start (see [`crate::idup`]).
    pub(crate) agreement_ids: Cell<u64>,
}

impl std::fmt::Debug for Active {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Active")
            .field("running", &self.running.get())
            .finish()
    }
}

impl Active {
    /// No collective is running: waits need not step any.
    #[inline]
    pub(crate) fn is_idle(&self) -> bool {
        self.running.get() == 0
    }

    /// Step every running collective as far as it goes without waiting; the events handled.
    fn step_all(&self) -> usize {
        // A step never re-enters progress; if that ever changed, the inner pass is skipped
        // rather than aliasing the table.
        let Ok(mut table) = self.table.try_borrow_mut() else {
            return 0;
        };
        let mut events = 0;
        for (_, c) in table.iter_mut() {
            events += self.step(c);
        }
        events
    }

    /// Step the chained work once (after the collectives); the events handled.
    fn step_chained(&self) -> usize {
        // A step may start collectives and test PML requests, never run a progress pass;
        // should that change, the list is out while stepped, so an inner pass finds it empty
        // (and work added meanwhile joins it below).
        let Ok(mut list) = self.chained.try_borrow_mut() else {
            return 0;
        };
        if list.is_empty() {
            return 0;
        }
        let mut work = std::mem::take(&mut *list);
        drop(list);
        let mut events = 0;
        work.retain(|w| {
            let Ok(mut w) = w.try_borrow_mut() else {
                return true;
            };
            let (n, done) = w.step();
            events += n;
            if done {
                self.running.set(self.running.get() - 1);
            }
            !done
        });
        let mut list = self.chained.borrow_mut();
        // Work added during the pass goes after the work that was there.
        work.append(&mut list);
        *list = work;
        events
    }

    fn step(&self, c: &mut NbColl) -> usize {
        if c.outcome.is_some() {
            return 0;
        }
        let (events, finished) = c.step();
        if finished {
            self.running.set(self.running.get() - 1);
        }
        events
    }

    /// The outcome of collective `id` if it finished, which is then forgotten.
    fn take_finished(&self, id: RequestId) -> Option<Result<Status>> {
        let mut table = self.table.borrow_mut();
        match table.get(id) {
            None => Some(Err(Error::InvalidArgument(format!(
                "internal: unknown collective request {id:?}"
            )))),
            Some(c) if c.outcome.is_none() => None,
            Some(_) => {
                let c = table.remove(id)?;
                drop(table);
                count_uncollected(-1);
                c.outcome
            }
        }
    }

    /// Forget collective `id` without finishing it: only when the runtime is gone, so no
    /// transfer can touch its buffers any more.
    fn abandon(&self, id: RequestId) {
        let Some(removed) = self.table.borrow_mut().remove(id) else {
            return;
        };
        count_uncollected(-1);
        if removed.outcome.is_none() {
            self.running.set(self.running.get() - 1);
        }
    }
}

/// What a collective does once its schedule completed, to present the result in the
/// caller's layout.
enum Finish {
    Nothing,
    /// Rotate `work` right by this many bytes (gather's root: virtual-rank order to rank order).
    RotateWork(usize),
    /// Copy this range of `work` into the caller's buffer (scatter).
    CopyOut {
        from: Range<usize>,
        to: UserBuf,
    },
    /// Hand a copy of `work` to whoever holds the other end (a collective over memory it
    /// owns, whose result the caller reads after completion: [`Communicator::launch_words`]).
    Keep(Rc<RefCell<Vec<u8>>>),
    /// Fail with `Error::CommKind` and this message: a plan made for the other kind of
    /// communicator (an intra-communicator schedule on an intercommunicator, or the reverse).
    Refused(String),
}

/// One non-blocking collective in progress.
struct NbColl {
    comm: Communicator,
    tag: i32,
    exec: Exec<Rc<Schedule>, RequestId>,
    bufs: Bufs,
    reduce: Option<OwnedReduce>,
    finish: Finish,
    /// Memory the collective owns (scratch, private work space, its own input): `bufs`
    /// points into it.
    _owned: (Vec<u64>, Vec<u8>, Vec<u8>),
    /// Bytes of the result at this rank, for the status.
    result_bytes: usize,
    outcome: Option<Result<Status>>,
}

impl NbColl {
    /// Advance without waiting; the events handled and whether it finished now.
    fn step(&mut self) -> (usize, bool) {
        let reduce = self.reduce.as_deref();
        // An intercommunicator's schedules address both groups (see `inter`).
        let polled = match self.comm.local_comm() {
            None => {
                let mut t = CommTransport {
                    comm: &self.comm,
                    tag: self.tag,
                };
                self.exec.advance(&mut t, &self.bufs, reduce, false)
            }
            Some(local) => {
                let mut t = inter::InterTransport {
                    inter: &self.comm,
                    local,
                    tag: self.tag,
                };
                self.exec.advance(&mut t, &self.bufs, reduce, false)
            }
        };
        match polled {
            Poll::Pending { events } => (events, false),
            Poll::Done(r) => {
                let status = Status::sent(self.comm.rank(), ANY_TAG, self.result_bytes);
                self.outcome = Some(r.and_then(|()| self.finish()).map(|()| status));
                (1, true)
            }
        }
    }

    /// Present the result in the caller's layout.
    #[allow(unsafe_code)]
    fn finish(&self) -> Result<()> {
        let work = &self.bufs.work;
        match &self.finish {
            Finish::Nothing => {}
            Finish::RotateWork(by) => {
                if !work.is_empty() {
                    // SAFETY: the schedule completed, so no transfer uses `work` any more, and
                    // it stays this collective's alone until its request completes.
                    let w = unsafe { std::slice::from_raw_parts_mut(work.as_ptr(), work.len()) };
                    w.rotate_right(*by);
                }
            }
            Finish::CopyOut { from, to } => {
                if !from.is_empty() {
                    // SAFETY: as above; `work` is the collective's own allocation, distinct
                    // from the caller's `to`.
                    let w = unsafe { std::slice::from_raw_parts(work.as_ptr(), work.len()) };
                    to.write_at(0, &w[from.clone()]);
                }
            }
            Finish::Keep(out) => *out.borrow_mut() = work.as_slice().to_vec(),
            Finish::Refused(msg) => return Err(Error::CommKind(msg.clone())),
        }
        Ok(())
    }
}

impl Shared {
    /// Step every running non-blocking collective once (after a PML progress pass); the
    /// events handled.
    #[inline]
    pub(crate) fn step_collectives(&self) -> usize {
        if self.nbc.is_idle() {
            return 0;
        }
        self.nbc.step_all() + self.nbc.step_chained()
    }

    /// Keep `work` stepped by every progress pass until it is done, and step it once now.
    pub(crate) fn start_chained(&self, work: Rc<RefCell<dyn Chained>>) {
        self.nbc.running.set(self.nbc.running.get() + 1);
        let done = work.borrow_mut().step().1;
        if done {
            self.nbc.running.set(self.nbc.running.get() - 1);
        } else {
            self.nbc.chained.borrow_mut().push(work);
        }
    }

    /// A progress pass: the PML and its BTLs, then the non-blocking collectives.
    fn progress_all(&self) -> Result<usize> {
        let n = self.with(|rt| Ok(rt.progress()))?;
        Ok(n + self.step_collectives())
    }

    /// [`Shared::wait`] while collectives run: the loop steps them between PML passes.
    /// Out of line, so that the check that leads here is all `wait` adds to its fast path.
    #[inline(never)]
    pub(crate) fn wait_progressing(&self, id: RequestId) -> Result<PmlStatus> {
        let mut backoff = rmca_framework::progress::ParkingBackoff::default();
        // The outcome once the request completed. With a wait hook (MPI_THREAD_MULTIPLE) the
        // test may run on the thread that progresses while this one sleeps
        // (`ParkingBackoff::pass_until`): the request is then released there, and its
        // outcome kept here.
        let mut outcome: Option<Result<PmlStatus>> = None;
        let mut done = || {
            if outcome.is_none() {
                outcome = self.with(|rt| Ok(rt.pml.test(id)?)).transpose();
            }
            outcome.is_some()
        };
        loop {
            if self.nbc.is_idle() && !rmca_framework::progress::wait_hook_set() {
                return self.with(|rt| Ok(rt.wait(id)?));
            }
            if done() {
                break;
            }
            let n = self.with(|rt| Ok(rt.progress()))?;
            backoff.pass_until(n + self.step_collectives(), &mut done);
        }
        outcome.expect("the loop ends on an outcome")
    }

    /// [`Shared::wait_all`] while collectives run: each request in turn, stepping them.
    #[inline(never)]
    pub(crate) fn wait_all_progressing(
        &self,
        ids: &[RequestId],
    ) -> Result<Vec<(usize, PmlStatus)>> {
        let mut failed = Vec::new();
        let mut first_err = None;
        for (i, &id) in ids.iter().enumerate() {
            match self.wait(id) {
                Ok(st) if st.error.is_none() => {}
                Ok(st) => failed.push((i, st)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(failed), Err)
    }

    /// Keep `c` running and post its first round now (peers may need it before this rank
    /// calls into rmca again); its id.
    fn start_collective(&self, c: NbColl) -> RequestId {
        let id = self.nbc.table.borrow_mut().insert(c);
        count_uncollected(1);
        self.nbc.running.set(self.nbc.running.get() + 1);
        let mut table = self.nbc.table.borrow_mut();
        if let Some(c) = table.get_mut(id) {
            self.nbc.step(c);
        }
        id
    }

    /// Has collective `id` completed? Runs a progress pass if not yet.
    pub(crate) fn test_collective(&self, id: RequestId) -> Option<Result<Status>> {
        if let Some(outcome) = self.nbc.take_finished(id) {
            return Some(outcome);
        }
        if let Err(e) = self.progress_all() {
            self.nbc.abandon(id);
            return Some(Err(e));
        }
        self.nbc.take_finished(id)
    }

    /// The outcome of collective `id` if it finished (then forgotten), without progress:
    /// for loops that progress themselves (see [`crate::raw::wait_all`]).
    pub(crate) fn collective_outcome(&self, id: RequestId) -> Option<Result<Status>> {
        self.nbc.take_finished(id)
    }

    /// Progress until collective `id` completes.
    pub(crate) fn wait_collective(&self, id: RequestId) -> Result<Status> {
        let mut backoff = ReleasingBackoff::default();
        loop {
            if let Some(outcome) = self.nbc.take_finished(id) {
                return outcome;
            }
            match self.progress_all() {
                Ok(n) => backoff.pass(n),
                Err(e) => {
                    self.nbc.abandon(id);
                    return Err(e);
                }
            }
        }
    }
}

/// A reduction erased to bytes, for the non-blocking collectives that reduce: the step the
/// executor applies, the element size (where a schedule may cut the vector) and whether the
/// operation may combine in any order.
pub(crate) struct ByteReduction {
    apply: OwnedReduce,
    elem: usize,
    commutative: bool,
}

impl ByteReduction {
    /// `op` on elements of `T` (an error if `op` is not defined for `T`).
    pub(crate) fn new<T: bytemuck::Pod, R: Reduction<T> + 'static>(op: R) -> Result<Self> {
        op.check()?;
        Ok(Self {
            elem: std::mem::size_of::<T>(),
            commutative: op.is_commutative(),
            apply: Box::new(move |dst, src, acc, src_first| op.apply(dst, src, acc, src_first)),
        })
    }

    /// A reduction given as its step over bytes (`apply(dst, src, acc, src_first)`: `dst =
    /// src op acc` or `acc op src` elementwise, `acc` being `dst` itself when `None`), on
    /// elements of `elem` bytes.
    pub(crate) fn from_fn(elem: usize, commutative: bool, apply: OwnedReduce) -> Self {
        Self {
            apply,
            elem,
            commutative,
        }
    }

    /// Bytes of one element.
    pub(crate) fn element_size(&self) -> usize {
        self.elem
    }

    /// Whether the operation may combine in any order.
    pub(crate) fn is_commutative(&self) -> bool {
        self.commutative
    }

    /// Run the step once (see [`ByteReduction::from_fn`]).
    pub(crate) fn apply(&self, dst: &mut [u8], src: &[u8], acc: Option<&[u8]>, src_first: bool) {
        (self.apply)(dst, src, acc, src_first)
    }
}

/// A collective ready to start: its schedule and where its buffers are.
pub(crate) struct Plan {
    sched: Rc<Schedule>,
    pub(crate) send: UserBuf,
    /// The result buffer: the caller's, or a view of `own_work`.
    work: UserBuf,
    own_work: Vec<u8>,
    /// The input, when the collective owns it (`send` is a view of it).
    own_send: Vec<u8>,
    reduce: Option<OwnedReduce>,
    finish: Finish,
    result_bytes: usize,
    /// Made for an intercommunicator (its peers number both groups: see `inter`).
    inter: bool,
}

impl Plan {
    pub(crate) fn new(sched: Rc<Schedule>, work: UserBuf) -> Self {
        Self {
            sched,
            send: UserBuf::empty(),
            work,
            own_work: Vec::new(),
            own_send: Vec::new(),
            reduce: None,
            finish: Finish::Nothing,
            result_bytes: work.len(),
            inter: false,
        }
    }

    /// Use `own` (moved into the collective) as the result buffer.
    #[allow(unsafe_code)]
    fn owning_work(mut self, mut own: Vec<u8>) -> Self {
        // SAFETY: `own` moves into the collective with this view (a Vec's heap block does not
        // move with it) and is freed only after the collective finished.
        self.work = unsafe { UserBuf::from_mut_slice(&mut own) };
        self.own_work = own;
        self
    }

    /// Use `own` (moved into the collective) as the input.
    #[allow(unsafe_code)]
    fn owning_send(mut self, own: Vec<u8>) -> Self {
        // SAFETY: as in `owning_work`: the view and the Vec move into the collective
        // together, the heap block stays put and outlives the collective's transfers.
        self.send = unsafe { UserBuf::from_slice(&own) };
        self.own_send = own;
        self
    }
}

/// A read-only view of `buf`, which the caller borrowed for a scope.
#[allow(unsafe_code)]
fn lend<T: bytemuck::Pod>(buf: &[T]) -> UserBuf {
    // SAFETY: `buf` is borrowed for the scope, which waits for every request of it (the
    // collective's request waits for its executor to finish) before the borrow ends.
    unsafe { UserBuf::from_slice(bytemuck::cast_slice(buf)) }
}

/// A writable view of `buf`, which the caller borrowed for a scope.
#[allow(unsafe_code)]
fn lend_mut<T: bytemuck::Pod>(buf: &mut [T]) -> UserBuf {
    // SAFETY: as in `lend`; the borrow is exclusive for the scope.
    unsafe { UserBuf::from_mut_slice(bytemuck::cast_slice_mut(buf)) }
}

/// Refuse a byte length other than `want` (the byte-level forms' check; the typed forms check
/// element counts first, with their own message).
fn check_bytes(what: &str, buf: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what}: {buf} holds {got} B, expected {want} B"
        )))
    }
}

impl Communicator {
    /// Start `plan` as a collective of `scope`.
    fn start_plan<'s>(&self, scope: &'s Scope<'s, '_>, plan: Plan) -> Request<'s> {
        let id = self.launch(plan);
        scope.pending_collective(self, id)
    }

    /// Start `plan` among the runtime's active collectives; its id there (for
    /// [`Shared::wait_collective`] and [`Shared::test_collective`]).
    pub(crate) fn launch(&self, plan: Plan) -> RequestId {
        if let Some((ctx, tag)) = SLOT.with(Cell::get) {
            if ctx == self.coll_context() {
                SLOT.with(|s| s.set(None));
                return self.launch_tagged(plan, tag);
            }
        }
        // The sequence number that keeps this collective's messages apart (module docs).
        let seq = self.coll_cache().nb_started.get();
        self.coll_cache().nb_started.set(seq.wrapping_add(1));
        self.launch_tagged(plan, NB_TAG_BASE + (seq % NB_TAGS) as i32)
    }

    /// The tag of the next collective of this communicator that takes its number when it
    /// is set up ([`RESERVED_TAG_BASE`]): every member must reserve in the same order (as
    /// MPI orders the calls that do it: persistent collectives' inits, `MPI_Comm_idup`).
    pub(crate) fn reserve_coll_tag(&self) -> i32 {
        let k = self.coll_cache().reserved_started.get();
        self.coll_cache().reserved_started.set(k.wrapping_add(1));
        RESERVED_TAG_BASE + (k % NB_TAGS) as i32
    }

    /// [`Communicator::launch`] on `tag` (one of [`Communicator::reserve_coll_tag`]; a
    /// collective of that tag that ran before must have completed on this process).
    #[allow(unsafe_code)]
    pub(crate) fn launch_tagged(&self, plan: Plan, tag: i32) -> RequestId {
        // A plan for the other kind of communicator runs nothing and fails with CommKind.
        let plan = if plan.inter == self.is_inter() {
            plan
        } else {
            let mut p = Plan::new(Rc::new(Schedule::default()), UserBuf::empty());
            p.finish = Finish::Refused(if plan.inter {
                "an intercommunicator collective was started on an intra-communicator".into()
            } else {
                "this collective is not available on an intercommunicator (its non-blocking collectives are rmca::raw::inter_*)".into()
            });
            p
        };
        let mut tmp = vec![0u64; plan.sched.tmp_len.div_ceil(8)];
        // SAFETY: `tmp` moves into the collective with this view (its heap block stays put)
        // and is freed only after the collective finished.
        let tmp_view = unsafe {
            UserBuf::from_mut_slice(
                &mut bytemuck::cast_slice_mut(tmp.as_mut_slice())[..plan.sched.tmp_len],
            )
        };
        let c = NbColl {
            comm: self.clone(),
            tag,
            exec: Exec::new(plan.sched, Vec::new()),
            bufs: Bufs {
                send: plan.send,
                work: plan.work,
                tmp: tmp_view,
            },
            reduce: plan.reduce,
            finish: plan.finish,
            _owned: (tmp, plan.own_work, plan.own_send),
            result_bytes: plan.result_bytes,
            outcome: None,
        };
        self.shared().start_collective(c)
    }

    /// Start an allreduce with `op` of `words` (copied: the collective owns its memory) on
    /// `tag` (see [`Communicator::launch_tagged`]); once it completed, `result` holds the
    /// reduced words' bytes. For the runtime's own agreements ([`crate::idup`]).
    pub(crate) fn launch_words(
        &self,
        words: &[u64],
        op: Op,
        tag: i32,
        result: Rc<RefCell<Vec<u8>>>,
    ) -> Result<RequestId> {
        let len = std::mem::size_of_val(words);
        let red = ByteReduction::new::<u64, _>(op)?;
        let s = self.allreduce_schedule(len, red.elem, !red.commutative)?;
        let mut plan = Plan::new(s, UserBuf::empty())
            .owning_work(vec![0u8; len])
            .owning_send(bytemuck::cast_slice(words).to_vec());
        plan.reduce = Some(red.apply);
        plan.finish = Finish::Keep(result);
        Ok(self.launch_tagged(plan, tag))
    }

    /// Wait for the request `o` (point-to-point or collective).
    #[inline]
    pub(crate) fn wait_request(&self, o: Outstanding) -> Result<Status> {
        match o {
            Outstanding::Pml(id) => self.wait_raw(id),
            Outstanding::Coll(id) => self.shared().wait_collective(id),
        }
    }

    /// The plan of a barrier.
    pub(crate) fn ibarrier_plan(&self) -> Result<Plan> {
        let key = SchedKey::new(TAG_BARRIER, 0, 0, 0);
        let s = self.schedule(key, || self.coll_provide("ibarrier", |m| m.barrier()))?;
        Ok(Plan::new(s, UserBuf::empty()))
    }

    /// Start a barrier: the request completes once every member started it.
    pub fn ibarrier<'s>(&self, scope: &'s Scope<'s, '_>) -> Result<Request<'s>> {
        Ok(self.start_plan(scope, self.ibarrier_plan()?))
    }

    /// The plan of a broadcast of the bytes of `buf` from `root`.
    pub(crate) fn ibcast_plan(&self, buf: UserBuf, root: usize) -> Result<Plan> {
        self.check_root(root)?;
        let s = self.bcast_schedule(root, buf.len())?;
        Ok(Plan::new(s, buf))
    }

    /// Start a broadcast of `buf` from `root` (see [`Communicator::bcast`]); `buf` stays
    /// borrowed until the end of `scope`.
    pub fn ibcast<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        root: usize,
    ) -> Result<Request<'s>> {
        let plan = self.ibcast_plan(lend_mut(buf), root)?;
        Ok(self.start_plan(scope, plan))
    }

    /// The plan of a reduction of the bytes of `send` into `recv` (the root's) at `root`.
    pub(crate) fn ireduce_plan(
        &self,
        send: UserBuf,
        recv: Option<UserBuf>,
        op: ByteReduction,
        root: usize,
    ) -> Result<Plan> {
        self.check_root(root)?;
        let len = send.len();
        // A non-commutative operation must combine in rank order.
        let s = self.reduce_schedule(root, len, op.elem, !op.commutative)?;
        let mut plan = if self.rank() == root {
            let recv = recv.ok_or_else(|| {
                Error::InvalidArgument("ireduce: the root must pass a receive buffer".into())
            })?;
            check_bytes("ireduce", "receive buffer", recv.len(), len)?;
            Plan::new(s, recv)
        } else {
            // Non-roots accumulate their subtree in private space.
            let mut p = Plan::new(s, UserBuf::empty()).owning_work(vec![0u8; len]);
            p.result_bytes = 0;
            p
        };
        plan.send = send;
        plan.reduce = Some(op.apply);
        Ok(plan)
    }

    /// Start a reduction to `root` (see [`Communicator::reduce`]); the buffers stay borrowed
    /// until the end of `scope`.
    pub fn ireduce<'s, T: Reducible>(
        &self,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: Option<&'s mut [T]>,
        op: Op,
        root: usize,
    ) -> Result<Request<'s>> {
        self.check_root(root)?;
        let op = ByteReduction::new::<T, _>(op)?;
        if let (Some(recv), true) = (&recv, self.rank() == root) {
            check_len("ireduce", "receive buffer", recv.len(), send.len())?;
        }
        let plan = self.ireduce_plan(lend(send), recv.map(lend_mut), op, root)?;
        Ok(self.start_plan(scope, plan))
    }

    /// The plan of an allreduce of the bytes of `send` into `recv`.
    pub(crate) fn iallreduce_plan(
        &self,
        send: UserBuf,
        recv: UserBuf,
        op: ByteReduction,
    ) -> Result<Plan> {
        check_bytes("iallreduce", "receive buffer", recv.len(), send.len())?;
        // A non-commutative operation must combine in rank order.
        let s = self.allreduce_schedule(send.len(), op.elem, !op.commutative)?;
        let mut plan = Plan::new(s, recv);
        plan.send = send;
        plan.reduce = Some(op.apply);
        Ok(plan)
    }

    /// Start an allreduce (see [`Communicator::allreduce`]); the buffers stay borrowed until
    /// the end of `scope`.
    pub fn iallreduce<'s, T: Reducible>(
        &self,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
        op: Op,
    ) -> Result<Request<'s>> {
        let op = ByteReduction::new::<T, _>(op)?;
        check_len("iallreduce", "receive buffer", recv.len(), send.len())?;
        let plan = self.iallreduce_plan(lend(send), lend_mut(recv), op)?;
        Ok(self.start_plan(scope, plan))
    }

    /// The plan of a gather of the bytes of `send` into `recv` (the root's: size blocks).
    pub(crate) fn igather_plan(
        &self,
        send: UserBuf,
        recv: Option<UserBuf>,
        root: usize,
    ) -> Result<Plan> {
        self.check_root(root)?;
        let (n, me) = (self.size(), self.rank());
        let block = send.len();
        let v = (me + n - root) % n;
        let s = self.gather_schedule(root, block)?;
        let plan = if me == root {
            let recv = recv.ok_or_else(|| {
                Error::InvalidArgument("igather: the root must pass a receive buffer".into())
            })?;
            check_bytes("igather", "receive buffer", recv.len(), n * block)?;
            recv.write_at(v * block, send.as_slice());
            let mut p = Plan::new(s, recv);
            p.finish = Finish::RotateWork(root * block);
            p
        } else {
            let mut own = vec![0u8; n * block];
            own[v * block..(v + 1) * block].copy_from_slice(send.as_slice());
            let mut p = Plan::new(s, UserBuf::empty()).owning_work(own);
            p.result_bytes = 0;
            p
        };
        Ok(plan)
    }

    /// Start a gather to `root` (see [`Communicator::gather`]); the buffers stay borrowed
    /// until the end of `scope`.
    pub fn igather<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: Option<&'s mut [T]>,
        root: usize,
    ) -> Result<Request<'s>> {
        self.check_root(root)?;
        if let (Some(recv), true) = (&recv, self.rank() == root) {
            check_len(
                "igather",
                "receive buffer",
                recv.len(),
                self.size() * send.len(),
            )?;
        }
        let plan = self.igather_plan(lend(send), recv.map(lend_mut), root)?;
        Ok(self.start_plan(scope, plan))
    }

    /// The plan of a scatter of `send` (the root's: size blocks) into the bytes of `recv`.
    pub(crate) fn iscatter_plan(
        &self,
        send: Option<UserBuf>,
        recv: UserBuf,
        root: usize,
    ) -> Result<Plan> {
        self.check_root(root)?;
        let (n, me) = (self.size(), self.rank());
        let block = recv.len();
        let v = (me + n - root) % n;
        let mut own = vec![0u8; n * block];
        if me == root {
            let send = send.ok_or_else(|| {
                Error::InvalidArgument("iscatter: the root must pass a send buffer".into())
            })?;
            check_bytes("iscatter", "send buffer", send.len(), n * block)?;
            own.copy_from_slice(send.as_slice());
            // Rank order to virtual-rank order.
            own.rotate_left(root * block);
        }
        let s = self.scatter_schedule(root, block)?;
        let mut plan = Plan::new(s, UserBuf::empty()).owning_work(own);
        plan.finish = Finish::CopyOut {
            from: v * block..(v + 1) * block,
            to: recv,
        };
        plan.result_bytes = block;
        Ok(plan)
    }

    /// Start a scatter from `root` (see [`Communicator::scatter`]); the buffers stay borrowed
    /// until the end of `scope`.
    pub fn iscatter<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        send: Option<&'s [T]>,
        recv: &'s mut [T],
        root: usize,
    ) -> Result<Request<'s>> {
        self.check_root(root)?;
        if let (Some(send), true) = (&send, self.rank() == root) {
            check_len(
                "iscatter",
                "send buffer",
                send.len(),
                self.size() * recv.len(),
            )?;
        }
        let plan = self.iscatter_plan(send.map(lend), lend_mut(recv), root)?;
        Ok(self.start_plan(scope, plan))
    }

    /// The plan of an allgather of the bytes of `send` into `recv` (size blocks).
    pub(crate) fn iallgather_plan(&self, send: UserBuf, recv: UserBuf) -> Result<Plan> {
        let (me, block) = (self.rank(), send.len());
        check_bytes(
            "iallgather",
            "receive buffer",
            recv.len(),
            self.size() * block,
        )?;
        recv.write_at(me * block, send.as_slice());
        let s = allgather_schedule(self, block)?;
        Ok(Plan::new(s, recv))
    }

    /// Start an allgather (see [`Communicator::allgather`]); the buffers stay borrowed until
    /// the end of `scope`.
    pub fn iallgather<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
    ) -> Result<Request<'s>> {
        check_len(
            "iallgather",
            "receive buffer",
            recv.len(),
            self.size() * send.len(),
        )?;
        let plan = self.iallgather_plan(lend(send), lend_mut(recv))?;
        Ok(self.start_plan(scope, plan))
    }

    /// The plan of an alltoall of the bytes of `send` (size blocks) into `recv`.
    pub(crate) fn ialltoall_plan(&self, send: UserBuf, recv: UserBuf) -> Result<Plan> {
        let n = self.size();
        if !send.len().is_multiple_of(n) {
            return Err(Error::InvalidArgument(format!(
                "ialltoall: send length {} B is not a multiple of the size {n}",
                send.len()
            )));
        }
        check_bytes("ialltoall", "receive buffer", recv.len(), send.len())?;
        let block = send.len() / n;
        let ranges: Vec<Range<usize>> = (0..n).map(|r| r * block..(r + 1) * block).collect();
        let s = self.alltoallv_schedule(&ranges, &ranges, TAG_ALLTOALL)?;
        let mut plan = Plan::new(s, recv);
        plan.send = send;
        Ok(plan)
    }

    /// Start an alltoall (see [`Communicator::alltoall`]); the buffers stay borrowed until
    /// the end of `scope`.
    pub fn ialltoall<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
    ) -> Result<Request<'s>> {
        let n = self.size();
        if !send.len().is_multiple_of(n) {
            return Err(Error::InvalidArgument(format!(
                "ialltoall: send length {} is not a multiple of the size {n}",
                send.len()
            )));
        }
        check_len("ialltoall", "receive buffer", recv.len(), send.len())?;
        let plan = self.ialltoall_plan(lend(send), lend_mut(recv))?;
        Ok(self.start_plan(scope, plan))
    }
}

/// The plans of the non-blocking v-collectives, reduce-scatters and prefix reductions, over
/// bytes: the schedules of the blocking forms (`gatherv`, `scatterv`, `allgatherv`,
/// `alltoallv`, `reduce_scatter(_block)`, `scan`, `exscan`), started on the executor.
/// Regions are byte ranges, checked here against the buffers; the raw API
/// ([`crate::raw`]) is their only caller.
impl Communicator {
    /// The plan of a gatherv of the bytes of `send` into `recv` (the root's) at `regions`
    /// (the root's: one per rank, disjoint, inside `recv`).
    pub(crate) fn igatherv_plan(
        &self,
        send: UserBuf,
        recv: Option<UserBuf>,
        regions: &[Range<usize>],
        root: usize,
    ) -> Result<Plan> {
        self.check_root(root)?;
        let (n, me) = (self.size(), self.rank());
        if me != root {
            let s = self.coll_provide("igatherv", |m| m.gatherv(root, send.len(), &[], false))?;
            let mut p = Plan::new(Rc::new(s), UserBuf::empty());
            p.send = send;
            return Ok(p);
        }
        let recv = recv.ok_or_else(|| {
            Error::InvalidArgument("igatherv: the root must pass a receive buffer".into())
        })?;
        check_regions("igatherv", regions, n, recv.len(), true)?;
        check_bytes("igatherv", "send buffer", send.len(), regions[root].len())?;
        let s = self.coll_provide("igatherv", |m| m.gatherv(root, send.len(), regions, false))?;
        let mut p = Plan::new(Rc::new(s), recv);
        p.send = send;
        Ok(p)
    }

    /// The plan of a scatterv of `send` (the root's) at `regions` (the root's: one per rank,
    /// inside `send`) into the bytes of `recv`.
    pub(crate) fn iscatterv_plan(
        &self,
        send: Option<UserBuf>,
        regions: &[Range<usize>],
        recv: UserBuf,
        root: usize,
    ) -> Result<Plan> {
        self.check_root(root)?;
        let (n, me) = (self.size(), self.rank());
        let mut send_view = UserBuf::empty();
        if me == root {
            let send = send.ok_or_else(|| {
                Error::InvalidArgument("iscatterv: the root must pass a send buffer".into())
            })?;
            check_regions("iscatterv", regions, n, send.len(), false)?;
            check_bytes(
                "iscatterv",
                "receive buffer",
                recv.len(),
                regions[root].len(),
            )?;
            send_view = send;
        }
        let s = self.coll_provide("iscatterv", |m| {
            m.scatterv(root, recv.len(), regions, false)
        })?;
        let mut p = Plan::new(Rc::new(s), recv);
        p.send = send_view;
        Ok(p)
    }

    /// The plan of an allgatherv of the bytes of `send` into `recv` at `regions` (one per
    /// rank, disjoint, inside `recv`, the same everywhere).
    pub(crate) fn iallgatherv_plan(
        &self,
        send: UserBuf,
        recv: UserBuf,
        regions: &[Range<usize>],
    ) -> Result<Plan> {
        let (n, me) = (self.size(), self.rank());
        check_regions("iallgatherv", regions, n, recv.len(), true)?;
        check_bytes("iallgatherv", "send buffer", send.len(), regions[me].len())?;
        let s = self.coll_provide("iallgatherv", |m| m.allgatherv(regions, false))?;
        let mut p = Plan::new(Rc::new(s), recv);
        p.send = send;
        Ok(p)
    }

    /// The plan of an alltoallv: `send[sends[r]]` goes to rank r, rank r's block lands in
    /// `recv[recvs[r]]` (disjoint).
    pub(crate) fn ialltoallv_plan(
        &self,
        send: UserBuf,
        sends: &[Range<usize>],
        recv: UserBuf,
        recvs: &[Range<usize>],
    ) -> Result<Plan> {
        let n = self.size();
        check_regions("ialltoallv", sends, n, send.len(), false)?;
        check_regions("ialltoallv", recvs, n, recv.len(), true)?;
        let s = self.alltoallv_schedule(sends, recvs, super::TAG_ALLTOALLV)?;
        let mut p = Plan::new(s, recv);
        p.send = send;
        Ok(p)
    }

    /// The plan of a reduce_scatter of the bytes of `send` (tiled by `chunks`, one per rank
    /// in rank order) into `recv` (this rank's chunk); `block` is the chunk size of a
    /// reduce_scatter_block (see [`Communicator::reduce_scatter_elems`]).
    pub(crate) fn ireduce_scatter_plan(
        &self,
        send: UserBuf,
        recv: UserBuf,
        chunks: &[Range<usize>],
        op: ByteReduction,
        block: Option<usize>,
    ) -> Result<Plan> {
        let (n, me) = (self.size(), self.rank());
        let len = send.len();
        let tiled = chunks.len() == n
            && chunks.first().is_none_or(|c| c.start == 0)
            && chunks.windows(2).all(|w| w[0].end == w[1].start)
            && chunks.last().is_none_or(|c| c.end == len);
        if !tiled {
            return Err(Error::InvalidArgument(format!(
                "ireduce_scatter: the chunks must tile the {len}-byte send buffer in rank order, one per rank ({n})"
            )));
        }
        check_bytes(
            "ireduce_scatter",
            "receive buffer",
            recv.len(),
            chunks[me].len(),
        )?;
        let (s, _) = self.reduce_scatter_schedule(chunks, len, op.elem, !op.commutative, block)?;
        // The schedule works over the whole vector; this rank's chunk is copied out at the end.
        let mut p = Plan::new(s, UserBuf::empty()).owning_work(vec![0u8; len]);
        p.send = send;
        p.reduce = Some(op.apply);
        p.finish = Finish::CopyOut {
            from: chunks[me].clone(),
            to: recv,
        };
        p.result_bytes = chunks[me].len();
        Ok(p)
    }

    /// The plan of an inclusive (or, `exclusive`, exclusive) prefix reduction of the bytes
    /// of `send` into `recv` (rank 0's `recv` is left untouched by an exclusive one).
    pub(crate) fn iscan_plan(
        &self,
        send: UserBuf,
        recv: UserBuf,
        op: ByteReduction,
        exclusive: bool,
    ) -> Result<Plan> {
        let what = if exclusive { "iexscan" } else { "iscan" };
        check_bytes(what, "receive buffer", recv.len(), send.len())?;
        let len = send.len();
        let (s, _) = self.prefix_schedule(len, exclusive)?;
        // [partial | result] in the collective's own memory.
        let mut p = Plan::new(s, UserBuf::empty()).owning_work(vec![0u8; 2 * len]);
        p.send = send;
        p.reduce = Some(op.apply);
        if exclusive && self.rank() == 0 {
            p.result_bytes = 0;
        } else {
            p.finish = Finish::CopyOut {
                from: len..2 * len,
                to: recv,
            };
            p.result_bytes = len;
        }
        Ok(p)
    }
}

/// Refuse `regions` that are not one per rank inside a buffer of `len` bytes, or (`disjoint`,
/// receive regions) that overlap.
fn check_regions(
    what: &str,
    regions: &[Range<usize>],
    n: usize,
    len: usize,
    disjoint: bool,
) -> Result<()> {
    if regions.len() != n {
        return Err(Error::InvalidArgument(format!(
            "{what}: {} regions given, one per rank ({n}) expected",
            regions.len()
        )));
    }
    if let Some((r, g)) = regions
        .iter()
        .enumerate()
        .find(|(_, g)| g.start > g.end || g.end > len)
    {
        return Err(Error::InvalidArgument(format!(
            "{what}: region {g:?} of rank {r} is outside the {len}-byte buffer"
        )));
    }
    if disjoint {
        super::check_disjoint(what, regions)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::coll::{Op, UserOp};
    use crate::raw::{self, RawReduction};

    /// The byte-level v-collectives, reduce-scatter and scans of [`crate::raw`] on a
    /// singleton job: each moves (or reduces) its own data where its regions say, checks its
    /// regions, and a reduction given by its byte step combines in rank order.
    #[test]
    #[allow(unsafe_code)]
    // One rank: every region list holds one region (one per rank).
    #[allow(clippy::single_range_in_vec_init)]
    fn raw_v_collectives_and_prefix_reductions_on_one_rank() {
        let universe = crate::init().expect("a singleton job");
        let world = universe.world();
        let send = [1u8, 2, 3, 4];
        let mut recv = [0u8; 8];
        // SAFETY (every block): the buffers outlive the wait that follows each start.
        unsafe {
            raw::igatherv(&world, send.as_ptr(), 4, recv.as_mut_ptr(), &[2..6], 0)
                .unwrap()
                .wait()
                .unwrap();
            assert_eq!(recv, [0, 0, 1, 2, 3, 4, 0, 0]);
            let mut got = [0u8; 3];
            raw::iscatterv(&world, send.as_ptr(), &[1..4], got.as_mut_ptr(), 3, 0)
                .unwrap()
                .wait()
                .unwrap();
            assert_eq!(got, [2, 3, 4]);
            let mut all = [9u8; 6];
            raw::iallgatherv(&world, send.as_ptr(), 4, all.as_mut_ptr(), &[1..5])
                .unwrap()
                .wait()
                .unwrap();
            assert_eq!(all, [9, 1, 2, 3, 4, 9]);
            let mut out = [0u8; 4];
            raw::ialltoallv(&world, send.as_ptr(), &[1..3], out.as_mut_ptr(), &[2..4])
                .unwrap()
                .wait()
                .unwrap();
            assert_eq!(out, [0, 0, 2, 3]);
            // A block to itself whose send and receive lengths differ is refused.
            assert!(
                raw::ialltoallv(&world, send.as_ptr(), &[0..2], out.as_mut_ptr(), &[0..3]).is_err()
            );
            let words = [5u32, 7];
            let mut sum = [0u32; 2];
            let op = RawReduction::new::<u32, _>(Op::Sum).unwrap();
            raw::ireduce_scatter(
                &world,
                words.as_ptr().cast(),
                sum.as_mut_ptr().cast(),
                &[8],
                op,
            )
            .unwrap()
            .wait()
            .unwrap();
            assert_eq!(sum, words);
            let op = RawReduction::new::<u32, _>(UserOp::non_commutative(|a: u32, b| a * 10 + b))
                .unwrap();
            let mut scan = [0u32; 2];
            raw::iscan(
                &world,
                words.as_ptr().cast(),
                scan.as_mut_ptr().cast(),
                8,
                op,
                false,
            )
            .unwrap()
            .wait()
            .unwrap();
            assert_eq!(scan, words);
            // Rank 0's exclusive scan leaves its buffer alone.
            let op = RawReduction::new::<u32, _>(Op::Max).unwrap();
            let mut ex = [3u32; 2];
            raw::iscan(
                &world,
                words.as_ptr().cast(),
                ex.as_mut_ptr().cast(),
                8,
                op,
                true,
            )
            .unwrap()
            .wait()
            .unwrap();
            assert_eq!(ex, [3, 3]);
        }
        // A reduction given by its byte step: `inout = input op inout`, in that order.
        let op = RawReduction::from_fn(1, false, |dst, src, acc, src_first| {
            for (i, d) in dst.iter_mut().enumerate() {
                let a = acc.map_or(*d, |a| a[i]);
                let (x, y) = if src_first { (src[i], a) } else { (a, src[i]) };
                *d = x * 10 + y;
            }
        })
        .unwrap();
        let mut inout = [1u8, 2];
        op.apply_local(&mut inout, &[3, 4]).unwrap();
        assert_eq!(inout, [31, 42]);
        assert!(op.apply_local(&mut inout, &[1]).is_err());
        assert!(RawReduction::from_fn(0, true, |_, _, _, _| {}).is_err());
    }
}
