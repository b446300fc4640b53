//! Non-blocking duplication of a communicator (`MPI_Comm_idup`): [`Communicator::idup`].
//!
//! A new communicator needs a context id that none of its members uses. The blocking
//! constructors (`dup`, `split`, `create`, ...) agree on one by masks of free ids
//! (`crate::context_id`), each round holding the process's mask while its allreduce runs: a
//! non-blocking dup cannot hold it across its rounds (its members go on making other
//! communicators meanwhile, in different orders on different processes), so the largest
//! proposal may already be taken on some member when
//! the agreement completes. It therefore runs Open MPI's "nextcid" agreement:
//!
//! 1. every member proposes its lowest free id; one allreduce takes the MAX, `A`;
//! 2. when that completes, each member reserves `A` if it is still free there (its counter
//!    is `<= A`: the counter moves past `A`), else it fails; one allreduce takes the MIN of
//!    the members' successes;
//! 3. all succeeded: `A` is the id. Otherwise again from 1 with the members' new lowest free
//!    ids (an id reserved in a failed round is burnt: ids are never reused anyway).
//!
//! The ids come from a range of their own ([`NB_CONTEXT_BASE`] and up, counted per process),
//! apart from the blocking constructors' (the mask's ids, far below it), so the two schemes
//! never meet (the agreements reserve theirs in the background, on any progress pass). Two
//! agreements never both reserve an id on one process (the second finds the counter past
//! it), so an id every member reserved is that communicator's alone on each.
//!
//! [`Agreement`] is the protocol without I/O (unit-tested below); [`DupTask`] drives it with
//! non-blocking allreduces on the parent, as chained work the runtime steps on every progress
//! pass (so the dup advances while its members wait on anything, or block elsewhere), on a
//! tag reserved when `idup` is called ([`Communicator::reserve_coll_tag`]): members call it
//! in the same collective order, and its rounds, started whenever each process gets to them,
//! can never meet another collective's messages. An intercommunicator's rounds run over both
//! groups at once (a view of their union on the intercommunicator's collective context);
//! its dup takes two consecutive context pairs (its own and its local group's), as the
//! blocking dup does.

use std::cell::RefCell;
use std::rc::Rc;

use rmca_framework::pml::{ContextId, RequestId};
use rmca_framework::rank::Rank;

use crate::coll::nonblocking::Chained;
use crate::coll::Op;
use crate::comm::{CommInner, Communicator};
use crate::intercomm::InterPart;
use crate::raw::{CustomOp, RawRequest};
use crate::{Error, Result, Status, ANY_TAG};

/// The first context id of the non-blocking agreements (even: point-to-point; +1 for
/// collectives); blocking constructors stay below it.
pub(crate) const NB_CONTEXT_BASE: ContextId = 1 << 31;

impl crate::Shared {
    /// This process's lowest free id of the non-blocking agreements' range (kept in the
    /// runtime, which moves between threads with its universe).
    fn agreement_free(&self) -> u64 {
        u64::from(NB_CONTEXT_BASE) + self.nbc.agreement_ids.get()
    }

    fn set_agreement_free(&self, free: u64) {
        let offset = free.saturating_sub(u64::from(NB_CONTEXT_BASE));
        self.nbc.agreement_ids.set(offset);
    }
}

/// What an [`Agreement`] needs next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// The MAX of this value over every member (a proposal).
    Max(u64),
    /// The MIN of this value over every member (1: the candidate is reserved here, 0: not).
    Min(u64),
    /// Every member reserved this id.
    Agreed(u64),
}

/// The context-id agreement of one non-blocking constructor, without I/O: fed the results of
/// the reductions it asks for and the process's counter of free ids.
#[derive(Debug)]
pub(crate) struct Agreement {
    /// Ids taken by the new communicator (2 per context: point-to-point and collective).
    width: u64,
    /// The MAX of the last proposals, while the MIN of the successes is out.
    candidate: Option<u64>,
    /// Rounds that failed so far.
    retries: u32,
}

impl Agreement {
    /// An agreement on `width` consecutive ids, and its first step: propose `free`, this
    /// process's lowest free id.
    pub(crate) fn start(width: u64, free: u64) -> (Self, Next) {
        let a = Agreement {
            width,
            candidate: None,
            retries: 0,
        };
        (a, Next::Max(free))
    }

    /// The result of the reduction asked for last; `free` is this process's lowest free id
    /// (moved past a reserved candidate).
    pub(crate) fn on_reduced(&mut self, result: u64, free: &mut u64) -> Next {
        match self.candidate.take() {
            None => {
                let ok = *free <= result;
                if ok {
                    *free = result + self.width;
                }
                self.candidate = Some(result);
                Next::Min(u64::from(ok))
            }
            Some(c) if result == 1 => Next::Agreed(c),
            Some(_) => {
                self.retries += 1;
                Next::Max(*free)
            }
        }
    }

    /// Rounds that failed so far.
    pub(crate) fn retries(&self) -> u32 {
        self.retries
    }
}

/// The chained work of one non-blocking dup.
struct DupTask {
    parent: Communicator,
    /// The communicator the rounds reduce over: the parent, or for an intercommunicator a
    /// view of both groups.
    over: Communicator,
    tag: i32,
    agreement: Agreement,
    /// The round in flight, and whether it is a MAX.
    round: Option<(RequestId, bool)>,
    /// Where the round's result lands.
    result: Rc<RefCell<Vec<u8>>>,
    outcome: Option<Result<Communicator>>,
}

impl DupTask {
    /// Start the reduction `next` asks for.
    fn begin(&mut self, value: u64, max: bool) -> Result<()> {
        let op = if max { Op::Max } else { Op::Min };
        let id = self
            .over
            .launch_words(&[value], op, self.tag, self.result.clone())?;
        self.round = Some((id, max));
        Ok(())
    }

    /// Act on `next`: start its round, or make the communicator.
    fn follow(&mut self, next: Next) -> Result<Option<Communicator>> {
        match next {
            Next::Max(v) => self.begin(v, true).map(|()| None),
            Next::Min(v) => self.begin(v, false).map(|()| None),
            Next::Agreed(id) => self.build(id).map(Some),
        }
    }

    /// The duplicate on agreed id `id`.
    fn build(&self, id: u64) -> Result<Communicator> {
        let width = self.agreement.width;
        let last = id.saturating_add(width);
        if last > u64::from(crate::intercomm::BOOTSTRAP_BASE) {
            return Err(Error::InvalidArgument(format!(
                "no context id left for a new communicator (next free of the non-blocking range: {id}); free ones are not reused"
            )));
        }
        let p = &self.parent.inner;
        let context = id as ContextId;
        let Some(inter) = &p.inter else {
            return Ok(Communicator::new(
                CommInner::intra(p.shared.clone(), context, p.group.clone(), p.rank)
                    // A dup keeps the topology (MPI).
                    .with_coll(p.coll.inherited()),
            ));
        };
        let l = &inter.local.inner;
        let local = Communicator::new(CommInner::intra(
            p.shared.clone(),
            context + 2,
            l.group.clone(),
            l.rank,
        ));
        Ok(Communicator::new(
            CommInner::intra(p.shared.clone(), context, p.group.clone(), p.rank).with_local(local),
        ))
    }
}

impl Chained for DupTask {
    fn step(&mut self) -> (usize, bool) {
        if self.outcome.is_some() {
            return (0, true);
        }
        let Some((id, _)) = self.round else {
            return (0, true);
        };
        let Some(done) = self.parent.shared().collective_outcome(id) else {
            return (0, false);
        };
        self.round = None;
        let next = done.and_then(|_| {
            let bytes = self.result.borrow();
            let value = bytes
                .get(..8)
                .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
                .ok_or_else(|| {
                    Error::InvalidArgument("internal: an agreement round gave no result".into())
                })?;
            let shared = self.parent.shared();
            let mut free = shared.agreement_free();
            let next = self.agreement.on_reduced(value, &mut free);
            shared.set_agreement_free(free);
            Ok(next)
        });
        match next.and_then(|n| self.follow(n)) {
            Ok(None) => (1, false),
            Ok(Some(c)) => {
                tracing::debug!(
                    context = c.inner.context,
                    retries = self.agreement.retries(),
                    "idup agreed"
                );
                self.outcome = Some(Ok(c));
                (1, true)
            }
            Err(e) => {
                self.outcome = Some(Err(e));
                (1, true)
            }
        }
    }
}

/// A view of both groups of intercommunicator `ic` as one intra-communicator (the group
/// whose first process has the lower world rank first), on `ic`'s collective context: the
/// communicator its dup's rounds reduce over.
fn union_view(ic: &Communicator, inter: &InterPart) -> Communicator {
    let (local, remote) = (&inter.local.inner.group, &ic.inner.group);
    let (first, second) = if local[0] < remote[0] {
        (local, remote)
    } else {
        (remote, local)
    };
    let group: Box<[Rank]> = first.iter().chain(second.iter()).copied().collect();
    let me = local[inter.local.rank()];
    let rank = group
        .iter()
        .position(|&w| w == me)
        .expect("a process is in its local group");
    // Its collectives run on `ic`'s collective context (this + 1), with tags `ic` reserved;
    // it sends nothing point-to-point.
    Communicator::new(CommInner::intra(
        ic.inner.shared.clone(),
        ic.inner.context,
        group,
        rank,
    ))
}

/// A [`Communicator::idup`] in progress: complete it with [`PendingDup::wait`] or
/// [`PendingDup::test`], or hand it to a binding's request table with
/// [`PendingDup::into_raw`]. It advances on every progress pass of the runtime whatever the
/// program waits on. Dropping it leaves the agreement to finish (the other members need this
/// process's part); the communicator it makes is then dropped.
#[must_use = "the duplicate is only reached through the pending dup"]
pub struct PendingDup(Rc<RefCell<DupTask>>);

impl std::fmt::Debug for PendingDup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingDup")
            .field("done", &self.is_done())
            .finish()
    }
}

impl PendingDup {
    fn is_done(&self) -> bool {
        self.0.try_borrow().is_ok_and(|t| t.outcome.is_some())
    }

    /// The duplicate (or the error), once the agreement finished; runs a progress pass if
    /// not yet. After `Some`, the outcome has been handed out.
    pub fn test(&self) -> Option<Result<Communicator>> {
        if !self.is_done() {
            let shared = self.0.borrow().parent.shared_rc().clone();
            let _ = shared.with(|rt| Ok(rt.progress()));
            shared.step_collectives();
        }
        self.take()
    }

    /// Progress until the duplicate is made.
    pub fn wait(self) -> Result<Communicator> {
        let mut backoff = rmca_framework::progress::ReleasingBackoff::default();
        let shared = self.0.borrow().parent.shared_rc().clone();
        loop {
            if let Some(outcome) = self.take() {
                return outcome;
            }
            let events = shared.with(|rt| Ok(rt.progress()))? + shared.step_collectives();
            backoff.pass(events);
        }
    }

    /// The outcome, if the agreement finished (handed out once).
    fn take(&self) -> Option<Result<Communicator>> {
        self.0.try_borrow_mut().ok()?.outcome.take()
    }

    /// A request for the dup, completed by [`crate::raw`]'s calls (successfully once the
    /// duplicate is made, or with the agreement's error), and the handle that gives the
    /// duplicate once it completed: for bindings with a request table of their own.
    pub fn into_raw(self) -> (RawRequest, DupResult) {
        let comm = self.0.borrow().parent.clone();
        let r = crate::raw::custom(
            &comm,
            Box::new(DupOp {
                task: self.0.clone(),
            }),
        );
        (r, DupResult(self.0))
    }
}

/// The request side of [`PendingDup::into_raw`].
struct DupOp {
    task: Rc<RefCell<DupTask>>,
}

impl std::fmt::Debug for DupOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DupOp")
    }
}

impl CustomOp for DupOp {
    fn poll(&mut self) -> Option<Result<Status>> {
        let mut t = self.task.try_borrow_mut().ok()?;
        let rank = t.parent.rank();
        match t.outcome.as_ref()? {
            Ok(_) => Some(Ok(Status::sent(rank, ANY_TAG, 0))),
            // The error goes to the request; the result side then has nothing.
            Err(_) => t
                .outcome
                .take()
                .map(|o| o.map(|_| Status::sent(rank, ANY_TAG, 0))),
        }
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// The duplicate of a [`PendingDup::into_raw`] request, once the request completed.
pub struct DupResult(Rc<RefCell<DupTask>>);

impl std::fmt::Debug for DupResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DupResult")
    }
}

impl DupResult {
    /// The duplicate, if the request completed successfully (handed out once).
    pub fn take(&self) -> Option<Communicator> {
        self.0.try_borrow_mut().ok()?.outcome.take()?.ok()
    }
}

impl Communicator {
    /// Start duplicating this communicator (`MPI_Comm_idup`): the same processes (for an
    /// intercommunicator, both groups) in a matching space of its own, as
    /// [`Communicator::dup`] makes, without waiting for the other members. Collective:
    /// every member calls it in the same order relative to the communicator's other
    /// collectives; meanwhile each may communicate, run other collectives and make other
    /// communicators (blocking or not, in any order across communicators).
    pub fn idup(&self) -> Result<PendingDup> {
        let (over, width) = match &self.inner.inter {
            None => (self.clone(), 2),
            Some(inter) => (union_view(self, inter), 4),
        };
        let tag = self.reserve_coll_tag();
        let (agreement, first) = Agreement::start(width, self.shared().agreement_free());
        let mut task = DupTask {
            parent: self.clone(),
            over,
            tag,
            agreement,
            round: None,
            result: Rc::new(RefCell::new(Vec::new())),
            outcome: None,
        };
        task.follow(first)?;
        let task = Rc::new(RefCell::new(task));
        self.shared().start_chained(task.clone());
        Ok(PendingDup(task))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Members of one agreement, each with its own counter of free ids, driven through
    /// the reductions it asks for (all members in lock step).
    fn run(width: u64, free: &mut [u64], between: impl Fn(usize, &mut [u64])) -> (u64, u32) {
        let mut members: Vec<(Agreement, Next)> =
            free.iter().map(|&f| Agreement::start(width, f)).collect();
        for round in 0.. {
            let reduce = |pick: fn(u64, u64) -> u64| {
                members
                    .iter()
                    .map(|(_, n)| match n {
                        Next::Max(v) | Next::Min(v) => *v,
                        Next::Agreed(_) => panic!("asked for no reduction"),
                    })
                    .reduce(pick)
                    .unwrap()
            };
            let result = match members[0].1 {
                Next::Max(_) => reduce(u64::max),
                Next::Min(_) => reduce(u64::min),
                Next::Agreed(id) => {
                    assert!(members.iter().all(|(_, n)| *n == Next::Agreed(id)));
                    return (id, members[0].0.retries());
                }
            };
            between(round, free);
            for (i, (a, n)) in members.iter_mut().enumerate() {
                *n = a.on_reduced(result, &mut free[i]);
            }
        }
        unreachable!()
    }

    /// The largest proposal is taken when it is free everywhere, and every member's counter
    /// moves past it (two ids per intra-communicator, four per intercommunicator).
    #[test]
    fn agrees_on_the_largest_free_id() {
        let mut free = [10, 14, 12];
        assert_eq!(run(2, &mut free, |_, _| {}), (14, 0));
        assert_eq!(free, [16, 16, 16]);
        let mut free = [10, 10];
        assert_eq!(run(4, &mut free, |_, _| {}), (10, 0));
        assert_eq!(free, [14, 14]);
    }

    /// An id another agreement took on one member between the rounds fails the round on
    /// that member: every member retries, and the next proposal is past it there.
    #[test]
    fn retries_past_an_id_taken_meanwhile() {
        let mut free = [10, 10, 10];
        // After the first MAX (10), member 1 reserves 10 and 12 for something else.
        let (id, retries) = run(2, &mut free, |round, free| {
            if round == 0 {
                free[1] = 14;
            }
        });
        assert_eq!((id, retries), (14, 1));
        // Members 0 and 2 reserved 10 in the failed round: burnt, never handed out again.
        assert_eq!(free, [16, 16, 16]);
    }

    /// Two agreements on overlapping members, interleaved in different orders on the member
    /// they share, never confirm the same id.
    #[test]
    fn overlapping_agreements_get_distinct_ids() {
        // Members: a = {p, q}, b = {q, r}; all start at 10, both propose 10 everywhere.
        let mut p = 10;
        let mut q = 10;
        let mut r = 10;
        let (mut ap, _) = Agreement::start(2, p);
        let (mut aq, _) = Agreement::start(2, q);
        let (mut bq, _) = Agreement::start(2, q);
        let (mut br, _) = Agreement::start(2, r);
        // Both MAXes give 10; q sees b's first, then a's.
        let bq1 = bq.on_reduced(10, &mut q);
        let br1 = br.on_reduced(10, &mut r);
        let aq1 = aq.on_reduced(10, &mut q);
        let ap1 = ap.on_reduced(10, &mut p);
        assert_eq!((bq1, br1), (Next::Min(1), Next::Min(1)));
        assert_eq!((aq1, ap1), (Next::Min(0), Next::Min(1)));
        // b confirms 10; a retries from the members' new counters (p 12, q 12).
        assert_eq!(bq.on_reduced(1, &mut q), Next::Agreed(10));
        assert_eq!(br.on_reduced(1, &mut r), Next::Agreed(10));
        assert_eq!(aq.on_reduced(0, &mut q), Next::Max(12));
        assert_eq!(ap.on_reduced(0, &mut p), Next::Max(12));
        assert_eq!(aq.on_reduced(12, &mut q), Next::Min(1));
        assert_eq!(ap.on_reduced(12, &mut p), Next::Min(1));
        assert_eq!(aq.on_reduced(1, &mut q), Next::Agreed(12));
        assert_eq!((p, q, r), (14, 14, 12));
    }

    /// A collective started in a reserved slot takes the slot's tag, not a number of the
    /// communicator's sequence; only the first started in the closure does, and only on the
    /// communicator the slot belongs to.
    #[test]
    fn a_slot_takes_the_place_of_the_sequence() {
        let universe = crate::init().expect("a singleton job");
        let world = universe.world();
        let other = world.dup().unwrap();
        let seq = |c: &Communicator| c.coll_cache().nb_started.get();
        let (w0, o0) = (seq(&world), seq(&other));
        let slot = world.reserve_coll_slot();
        assert_ne!(
            slot,
            world.reserve_coll_slot(),
            "each reservation is a new slot"
        );
        let (a, b, c) = crate::coll::nonblocking::in_slot(slot, || {
            let a = crate::raw::ibarrier(&other).unwrap();
            let b = crate::raw::ibarrier(&world).unwrap();
            let c = crate::raw::ibarrier(&world).unwrap();
            (a, b, c)
        });
        // `other` and the second barrier on `world` took sequence numbers; the first did not.
        assert_eq!((seq(&world), seq(&other)), (w0 + 1, o0 + 1));
        for r in [a, b, c] {
            r.wait().unwrap();
        }
        let d = crate::raw::ibarrier(&world).unwrap();
        assert_eq!(
            seq(&world),
            w0 + 2,
            "the slot is used up outside the closure"
        );
        d.wait().unwrap();
    }

    /// On a singleton job: dups made by `idup` (several outstanding, next to a blocking
    /// dup) have distinct contexts, apart from the blocking range, and work.
    #[test]
    fn idup_makes_working_duplicates() {
        let universe = crate::init().expect("a singleton job");
        let world = universe.world();
        let a = world.idup().unwrap();
        let b = world.idup().unwrap();
        let blocking = world.dup().unwrap();
        let (b, a) = (b.wait().unwrap(), a.wait().unwrap());
        let ctx = |c: &Communicator| c.inner.context;
        assert!(ctx(&a) >= NB_CONTEXT_BASE && ctx(&b) >= NB_CONTEXT_BASE);
        assert!(ctx(&blocking) < NB_CONTEXT_BASE);
        assert_ne!(ctx(&a), ctx(&b));
        assert_eq!(a.compare(&world), crate::Comparison::Congruent);
        let mut got = [0u32];
        a.sendrecv(&[7u32], 0, 3, &mut got, 0, 3).unwrap();
        assert_eq!(got, [7]);
        let mut sum = [0u64];
        b.allreduce(&[5u64], &mut sum, Op::Sum).unwrap();
        assert_eq!(sum, [5]);
        // Through a raw request, as a binding completes it.
        let (r, result) = world.idup().unwrap().into_raw();
        r.wait().unwrap();
        let c = result.take().expect("the duplicate");
        assert!(result.take().is_none(), "handed out once");
        assert!(ctx(&c) > ctx(&a).max(ctx(&b)));
    }
}
