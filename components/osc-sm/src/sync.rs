//! The synchronization of osc-sm as a sans-IO state machine: one [`Epochs`] per window and
//! process, driven by the host's calls ([`Epochs::sync`], then [`Epochs::poll`] until it
//! says done), its only medium the window's control words ([`Words`]): in production atomics
//! in the shared segment, in the tests plain atomics several simulated members share. It has
//! no clock and never blocks: a synchronization that must wait for other members (a fence,
//! a start, a wait, a lock) is retried by each poll.
//!
//! # Protocol
//! Operations complete when issued (they are loads, stores and atomics on the segment), so
//! synchronizing is only about ordering members:
//! - **fence** (and **free**): a barrier on one counter: every member's `k`-th entry adds
//!   one, and it may leave once the counter reached `k * size` (never reset, so members may
//!   run ahead into the next barrier);
//! - **post/start/complete/wait**: bit `t` of origin `o`'s post mask says target `t` posted
//!   to it; `start` waits for the bits of its group and clears them. Bit `o` of target `t`'s
//!   complete mask says `o` completed; `wait` waits for its group's bits and clears them. A
//!   member cannot set a bit again before it was cleared (its next post needs the wait that
//!   needs the origin's complete, which follows its start);
//! - **lock/unlock**: one reader-writer word per target: bit 63 an exclusive holder, the
//!   low bits the count of shared holders. A shared request is granted whenever no exclusive
//!   holder is there, even with exclusive requests waiting: giving waiting writers
//!   precedence would let a member holding one lock (a `lock_all` half granted, or two
//!   `MPI_Win_lock`s) wait on a writer that waits on it, a deadlock MPI's rules do not
//!   allow. The price: a writer waits while shared holders keep overlapping;
//! - **flush** and **sync**: a memory fence (everything issued is complete already).

use std::sync::atomic::{fence, AtomicU64, Ordering};

use rmca_framework::osc::{LockKind, OscError, SyncCall};

/// An exclusive holder.
pub const EXCL: u64 = 1 << 63;
/// The shared holders.
pub const READERS: u64 = EXCL - 1;

/// The control words of a window, shared by its members.
pub trait Words {
    /// The fence/free barrier counter.
    fn barrier(&self) -> &AtomicU64;
    /// Target `t`'s reader-writer lock word.
    fn lock(&self, t: usize) -> &AtomicU64;
    /// Word `w` of origin `o`'s post mask (bit `t % 64` of word `t / 64`: `t` posted to `o`).
    fn posts(&self, o: usize, w: usize) -> &AtomicU64;
    /// Word `w` of target `t`'s complete mask (bit `o % 64` of word `o / 64`: `o` completed).
    fn completes(&self, t: usize, w: usize) -> &AtomicU64;
}

/// Bytes of control words per member: its lock word, and its two masks of one bit per member.
pub fn words_per_member(size: usize) -> usize {
    8 + 2 * 8 * size.div_ceil(64)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    kind: LockKind,
    granted: bool,
    nocheck: bool,
}

/// What a barrier leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterBarrier {
    Fence { succeed: bool },
    Free,
}

/// The synchronization in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pending {
    Barrier {
        goal: u64,
        then: AfterBarrier,
    },
    Start(Vec<usize>),
    Wait,
    /// The targets whose locks are requested: one (`MPI_Win_lock`) or all (`_lock_all`), a
    /// range so that a lock allocates nothing.
    Locks(std::ops::Range<usize>),
}

/// The epochs of one window at one member.
#[derive(Debug)]
pub struct Epochs {
    me: usize,
    size: usize,
    no_locks: bool,
    fence_open: bool,
    barriers: u64,
    access: Option<Vec<usize>>,
    exposure: Option<Vec<usize>>,
    locks: Vec<Option<Held>>,
    lock_all: bool,
    pending: Option<Pending>,
    freed: bool,
}

fn bit(r: usize) -> (usize, u64) {
    (r / 64, 1u64 << (r % 64))
}

impl Epochs {
    /// The epochs of member `me` of a window of `size` members (`no_locks`: the info key,
    /// which makes lock calls errors).
    pub fn new(me: usize, size: usize, no_locks: bool) -> Self {
        Self {
            me,
            size,
            no_locks,
            fence_open: false,
            barriers: 0,
            access: None,
            exposure: None,
            locks: vec![None; size],
            lock_all: false,
            pending: None,
            freed: false,
        }
    }

    fn check_rank(&self, target: usize) -> Result<(), OscError> {
        if target >= self.size {
            return Err(OscError::Rank(format!(
                "target rank {target} is not in the window's group (size {})",
                self.size
            )));
        }
        Ok(())
    }

    /// May this member access `target` now ([`Epochs::check_access`] with no error made)?
    #[inline]
    pub fn may_access(&self, target: usize) -> bool {
        if target >= self.size {
            return false;
        }
        let locked = self.locks[target].is_some_and(|h| h.granted);
        let started = self.access.as_ref().is_some_and(|g| g.contains(&target));
        self.fence_open || locked || started
    }

    /// May this member access `target` now?
    #[inline]
    pub fn check_access(&self, target: usize) -> Result<(), OscError> {
        self.check_rank(target)?;
        if self.may_access(target) {
            return Ok(());
        }
        Err(OscError::Sync(format!(
            "no access epoch to rank {target} is open: call MPI_Win_fence, MPI_Win_start (naming it), MPI_Win_lock or MPI_Win_lock_all first"
        )))
    }

    fn any_lock(&self) -> bool {
        self.lock_all || self.locks.iter().any(Option::is_some)
    }

    /// Is an access or exposure epoch open, or a synchronization in progress?
    pub fn busy(&self) -> bool {
        self.pending.is_some()
            || self.access.is_some()
            || self.exposure.is_some()
            || self.any_lock()
    }

    fn group(&self, g: &[usize]) -> Result<(), OscError> {
        g.iter().try_for_each(|&r| self.check_rank(r))
    }

    fn barrier(&mut self, w: &dyn Words, then: AfterBarrier) {
        // Everything this member stored before is visible to whoever leaves the barrier.
        fence(Ordering::SeqCst);
        self.barriers += 1;
        w.barrier().fetch_add(1, Ordering::AcqRel);
        self.pending = Some(Pending::Barrier {
            goal: self.barriers * self.size as u64,
            then,
        });
    }

    fn refuse_locks(&self, what: &str) -> Result<(), OscError> {
        if self.no_locks {
            return Err(OscError::Sync(format!(
                "{what} on a window made with the info key no_locks=true (passive-target synchronization was ruled out)"
            )));
        }
        Ok(())
    }

    /// Start synchronization `call`; wrong use is refused at once, with nothing changed.
    pub fn sync(&mut self, call: SyncCall, w: &dyn Words) -> Result<(), OscError> {
        self.idle()?;
        let n = self.size;
        match call {
            SyncCall::Fence { succeed } => {
                if self.access.is_some() || self.exposure.is_some() || self.any_lock() {
                    return Err(OscError::Sync(
                        "MPI_Win_fence inside a post/start or lock epoch".into(),
                    ));
                }
                self.barrier(w, AfterBarrier::Fence { succeed });
            }
            SyncCall::Post(g) => {
                self.group(&g)?;
                if self.exposure.is_some() {
                    return Err(OscError::Sync(
                        "MPI_Win_post: an exposure epoch is open already (MPI_Win_wait ends it)"
                            .into(),
                    ));
                }
                let (word, mask) = bit(self.me);
                for &o in &g {
                    w.posts(o, word).fetch_or(mask, Ordering::AcqRel);
                }
                self.exposure = Some(g);
            }
            SyncCall::Start(g) => {
                self.group(&g)?;
                if self.access.is_some() || self.any_lock() {
                    return Err(OscError::Sync(
                        "MPI_Win_start: an access epoch is open already".into(),
                    ));
                }
                self.fence_open = false;
                self.pending = Some(Pending::Start(g));
            }
            SyncCall::Complete => {
                let Some(g) = self.access.take() else {
                    return Err(OscError::Sync(
                        "MPI_Win_complete without MPI_Win_start".into(),
                    ));
                };
                let (word, mask) = bit(self.me);
                for &t in &g {
                    w.completes(t, word).fetch_or(mask, Ordering::AcqRel);
                }
            }
            SyncCall::Wait => {
                if self.exposure.is_none() {
                    return Err(OscError::Sync("MPI_Win_wait without MPI_Win_post".into()));
                }
                self.pending = Some(Pending::Wait);
            }
            SyncCall::Lock {
                kind,
                target,
                nocheck,
            } => {
                self.check_rank(target)?;
                self.refuse_locks("MPI_Win_lock")?;
                if self.lock_all || self.locks[target].is_some() {
                    return Err(OscError::Sync(format!(
                        "MPI_Win_lock: this process holds a lock on rank {target} already"
                    )));
                }
                self.fence_open = false;
                self.request(target, kind, nocheck);
                self.pending = Some(Pending::Locks(target..target + 1));
            }
            SyncCall::LockAll { nocheck } => {
                self.refuse_locks("MPI_Win_lock_all")?;
                if self.any_lock() {
                    return Err(OscError::Sync(
                        "MPI_Win_lock_all: this process holds a lock already".into(),
                    ));
                }
                self.fence_open = false;
                for t in 0..n {
                    self.request(t, LockKind::Shared, nocheck);
                }
                self.lock_all = true;
                self.pending = Some(Pending::Locks(0..n));
            }
            SyncCall::Unlock(target) => {
                self.check_rank(target)?;
                if self.lock_all || self.locks[target].is_none() {
                    return Err(OscError::Sync(format!(
                        "MPI_Win_unlock: rank {target} is not locked by MPI_Win_lock"
                    )));
                }
                self.release(w, target);
            }
            SyncCall::UnlockAll => {
                if !self.lock_all {
                    return Err(OscError::Sync(
                        "MPI_Win_unlock_all without MPI_Win_lock_all".into(),
                    ));
                }
                for t in 0..n {
                    self.release(w, t);
                }
                self.lock_all = false;
            }
            SyncCall::Flush(t) | SyncCall::FlushLocal(t) => return self.flush(t),
            SyncCall::Free => {
                if self.access.is_some() || self.exposure.is_some() || self.any_lock() {
                    return Err(OscError::Sync(
                        "MPI_Win_free with an access or exposure epoch open (lock, start or post)"
                            .into(),
                    ));
                }
                self.barrier(w, AfterBarrier::Free);
            }
        }
        Ok(())
    }

    /// Does a synchronization wait for other members ([`Epochs::poll`] has work)?
    #[inline]
    pub fn waiting(&self) -> bool {
        self.pending.is_some()
    }

    /// Refuse a synchronization while another is in progress or after the window's free.
    fn idle(&self) -> Result<(), OscError> {
        if let Some(p) = &self.pending {
            return Err(OscError::Sync(format!(
                "a synchronization ({p:?}) is still in progress"
            )));
        }
        if self.freed {
            return Err(OscError::Sync("the window was freed".into()));
        }
        Ok(())
    }

    /// `MPI_Win_flush(_local)` of `target` (`None`: `_all`): every operation completed when
    /// issued, so a memory fence once the epoch is checked; no control word is touched (what
    /// [`Epochs::sync`] does for a flush, reachable without the words: the hot path of
    /// OSU's passive-target loops).
    #[inline]
    pub fn flush(&self, target: Option<usize>) -> Result<(), OscError> {
        self.check_flush(target)?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// Would [`Epochs::flush`] of `target` succeed (no error made: what a host's cached
    /// view of the epochs holds)?
    pub fn may_flush(&self, target: Option<usize>) -> bool {
        if self.pending.is_some() || self.freed {
            return false;
        }
        match target {
            Some(t) => t < self.size && self.locks[t].is_some(),
            None => self.any_lock(),
        }
    }

    /// [`Epochs::flush`]'s checks, with their errors.
    fn check_flush(&self, target: Option<usize>) -> Result<(), OscError> {
        self.idle()?;
        match target {
            Some(t) => {
                self.check_rank(t)?;
                if self.locks[t].is_none() {
                    return Err(OscError::Sync(format!(
                        "flush: no passive-target epoch to rank {t} is open (MPI_Win_lock or MPI_Win_lock_all)"
                    )));
                }
            }
            None if !self.any_lock() => {
                return Err(OscError::Sync(
                    "flush_all: no passive-target epoch is open".into(),
                ));
            }
            None => {}
        }
        Ok(())
    }

    fn request(&mut self, target: usize, kind: LockKind, nocheck: bool) {
        self.locks[target] = Some(Held {
            kind,
            granted: nocheck,
            nocheck,
        });
    }

    fn release(&mut self, w: &dyn Words, target: usize) {
        let held = self.locks[target].take().expect("checked by the caller");
        fence(Ordering::SeqCst);
        if held.nocheck {
            return;
        }
        let word = w.lock(target);
        match held.kind {
            LockKind::Exclusive => word.fetch_sub(EXCL, Ordering::Release),
            LockKind::Shared => word.fetch_sub(1, Ordering::Release),
        };
    }

    /// Try to take a requested lock on `target` (true: granted).
    fn try_acquire(w: &dyn Words, target: usize, kind: LockKind) -> bool {
        let word = w.lock(target);
        let v = word.load(Ordering::Relaxed);
        let (blocked, next) = match kind {
            LockKind::Shared => (v & EXCL != 0, v + 1),
            LockKind::Exclusive => (v != 0, EXCL),
        };
        !blocked
            && word
                .compare_exchange(v, next, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Did the synchronization started last finish? (`None`: not yet; call again later.)
    pub fn poll(&mut self, w: &dyn Words) -> Option<Result<(), OscError>> {
        if !self.waiting() {
            // Nothing waits (a flush, an unlock, a complete): done, nothing to take.
            return Some(Ok(()));
        }
        let done = match &mut self.pending {
            None => true,
            Some(Pending::Barrier { goal, .. }) => w.barrier().load(Ordering::Acquire) >= *goal,
            Some(Pending::Start(g)) => g.iter().all(|&t| {
                let (word, mask) = bit(t);
                w.posts(self.me, word).load(Ordering::Acquire) & mask != 0
            }),
            Some(Pending::Wait) => self.exposure_complete(w),
            Some(Pending::Locks(g)) => {
                let mut all = true;
                for t in g.clone() {
                    let h = self.locks[t].as_mut().expect("requested");
                    if !h.granted {
                        h.granted = Self::try_acquire(w, t, h.kind);
                        all &= h.granted;
                    }
                }
                all
            }
        };
        if !done {
            return None;
        }
        match self.pending.take() {
            Some(Pending::Barrier { then, .. }) => match then {
                AfterBarrier::Fence { succeed } => self.fence_open = succeed,
                AfterBarrier::Free => {
                    self.fence_open = false;
                    self.freed = true;
                }
            },
            Some(Pending::Start(g)) => {
                for &t in &g {
                    let (word, mask) = bit(t);
                    w.posts(self.me, word).fetch_and(!mask, Ordering::AcqRel);
                }
                self.access = Some(g);
            }
            Some(Pending::Wait) => {
                for &o in self.exposure.take().iter().flatten() {
                    let (word, mask) = bit(o);
                    w.completes(self.me, word)
                        .fetch_and(!mask, Ordering::AcqRel);
                }
            }
            Some(Pending::Locks(_)) | None => {}
        }
        Some(Ok(()))
    }

    /// Would `MPI_Win_wait` finish now?
    pub fn exposure_complete(&self, w: &dyn Words) -> bool {
        self.exposure.as_ref().is_some_and(|g| {
            g.iter().all(|&o| {
                let (word, mask) = bit(o);
                w.completes(self.me, word).load(Ordering::Acquire) & mask != 0
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::rc::Rc;

    /// The control words of a simulated window, shared by its simulated members.
    struct Sim {
        n: usize,
        barrier: AtomicU64,
        locks: Vec<AtomicU64>,
        posts: Vec<AtomicU64>,
        completes: Vec<AtomicU64>,
    }

    impl Sim {
        fn new(n: usize) -> Rc<Self> {
            let words = n * n.div_ceil(64);
            let z = |k| (0..k).map(|_| AtomicU64::new(0)).collect();
            Rc::new(Self {
                n,
                barrier: AtomicU64::new(0),
                locks: z(n),
                posts: z(words),
                completes: z(words),
            })
        }
    }

    impl Words for Sim {
        fn barrier(&self) -> &AtomicU64 {
            &self.barrier
        }
        fn lock(&self, t: usize) -> &AtomicU64 {
            &self.locks[t]
        }
        fn posts(&self, o: usize, w: usize) -> &AtomicU64 {
            &self.posts[o * self.n.div_ceil(64) + w]
        }
        fn completes(&self, t: usize, w: usize) -> &AtomicU64 {
            &self.completes[t * self.n.div_ceil(64) + w]
        }
    }

    fn members(n: usize) -> (Rc<Sim>, Vec<Epochs>) {
        (
            Sim::new(n),
            (0..n).map(|r| Epochs::new(r, n, false)).collect(),
        )
    }

    fn lock(kind: LockKind, target: usize) -> SyncCall {
        SyncCall::Lock {
            kind,
            target,
            nocheck: false,
        }
    }

    #[test]
    fn a_fence_waits_for_every_member_and_opens_the_epoch() {
        let (w, mut e) = members(3);
        assert!(matches!(e[0].check_access(1), Err(OscError::Sync(_))));
        for m in e.iter_mut().take(2) {
            m.sync(SyncCall::Fence { succeed: true }, &*w).unwrap();
            assert_eq!(m.poll(&*w), None);
        }
        e[2].sync(SyncCall::Fence { succeed: true }, &*w).unwrap();
        for m in &mut e {
            assert_eq!(m.poll(&*w), Some(Ok(())));
            m.check_access(2).unwrap();
        }
        // A fast member enters the next fence before a slow one left this one: the counter
        // is never reset, so neither is confused.
        e[0].sync(SyncCall::Fence { succeed: false }, &*w).unwrap();
        assert_eq!(e[0].poll(&*w), None);
        e[1].sync(SyncCall::Fence { succeed: false }, &*w).unwrap();
        e[2].sync(SyncCall::Fence { succeed: false }, &*w).unwrap();
        for m in &mut e {
            assert_eq!(m.poll(&*w), Some(Ok(())));
            assert!(matches!(m.check_access(0), Err(OscError::Sync(_))));
        }
    }

    #[test]
    fn post_start_complete_wait_pair_exactly_the_named_members() {
        let (w, mut e) = members(3);
        // 2 posts to 0 early, for a later epoch: 0's start naming 1 must not take it.
        e[2].sync(SyncCall::Post(vec![0]), &*w).unwrap();
        e[0].sync(SyncCall::Start(vec![1]), &*w).unwrap();
        assert_eq!(e[0].poll(&*w), None);
        assert!(matches!(e[0].check_access(1), Err(OscError::Sync(_))));
        e[1].sync(SyncCall::Post(vec![0]), &*w).unwrap();
        assert_eq!(e[0].poll(&*w), Some(Ok(())));
        e[0].check_access(1).unwrap();
        assert!(matches!(e[0].check_access(2), Err(OscError::Sync(_))));
        e[1].sync(SyncCall::Wait, &*w).unwrap();
        assert!(!e[1].exposure_complete(&*w));
        assert_eq!(e[1].poll(&*w), None);
        e[0].sync(SyncCall::Complete, &*w).unwrap();
        assert_eq!(e[1].poll(&*w), Some(Ok(())));
        // The early post is still there for the next start.
        e[0].sync(SyncCall::Start(vec![2]), &*w).unwrap();
        assert_eq!(e[0].poll(&*w), Some(Ok(())));
        e[0].sync(SyncCall::Complete, &*w).unwrap();
        e[2].sync(SyncCall::Wait, &*w).unwrap();
        assert_eq!(e[2].poll(&*w), Some(Ok(())));
        assert!(e.iter().all(|m| !m.busy()));
    }

    #[test]
    fn misuse_is_refused_with_nothing_changed() {
        let (w, mut e) = members(2);
        let m = &mut e[0];
        for bad in [
            SyncCall::Complete,
            SyncCall::Wait,
            SyncCall::Unlock(1),
            SyncCall::UnlockAll,
            SyncCall::Flush(Some(1)),
            SyncCall::Flush(None),
        ] {
            assert!(matches!(m.sync(bad, &*w), Err(OscError::Sync(_))));
        }
        assert!(matches!(
            m.sync(lock(LockKind::Shared, 2), &*w),
            Err(OscError::Rank(_))
        ));
        m.sync(lock(LockKind::Shared, 1), &*w).unwrap();
        assert_eq!(m.poll(&*w), Some(Ok(())));
        assert!(matches!(
            m.sync(SyncCall::Fence { succeed: true }, &*w),
            Err(OscError::Sync(_))
        ));
        assert!(matches!(
            m.sync(lock(LockKind::Exclusive, 1), &*w),
            Err(OscError::Sync(_))
        ));
        assert!(matches!(
            m.sync(SyncCall::Free, &*w),
            Err(OscError::Sync(_))
        ));
        m.sync(SyncCall::Unlock(1), &*w).unwrap();
        assert_eq!(w.lock(1).load(Ordering::Relaxed), 0);
        let mut nl = Epochs::new(0, 2, true);
        assert!(matches!(
            nl.sync(SyncCall::LockAll { nocheck: false }, &*w),
            Err(OscError::Sync(_))
        ));
    }

    #[test]
    fn shared_holders_share_and_an_exclusive_one_is_alone() {
        let (w, mut e) = members(3);
        e[0].sync(lock(LockKind::Shared, 2), &*w).unwrap();
        assert_eq!(e[0].poll(&*w), Some(Ok(())));
        e[1].sync(lock(LockKind::Exclusive, 2), &*w).unwrap();
        assert_eq!(e[1].poll(&*w), None);
        // A shared request joins the holder although a writer waits (see the module docs).
        e[2].sync(lock(LockKind::Shared, 2), &*w).unwrap();
        assert_eq!(e[2].poll(&*w), Some(Ok(())));
        e[0].sync(SyncCall::Unlock(2), &*w).unwrap();
        assert_eq!(e[1].poll(&*w), None);
        e[2].sync(SyncCall::Unlock(2), &*w).unwrap();
        assert_eq!(e[1].poll(&*w), Some(Ok(())));
        e[0].sync(lock(LockKind::Shared, 2), &*w).unwrap();
        assert_eq!(e[0].poll(&*w), None);
        e[1].sync(SyncCall::Unlock(2), &*w).unwrap();
        assert_eq!(e[0].poll(&*w), Some(Ok(())));
        e[0].sync(SyncCall::Unlock(2), &*w).unwrap();
        assert_eq!(w.lock(2).load(Ordering::Relaxed), 0);
    }

    /// One step of a simulated member in the lock property: what it does next.
    #[derive(Clone, Copy, Debug)]
    enum Step {
        Request { target: usize, exclusive: bool },
        All,
        Poll,
        Release,
    }

    fn step() -> impl Strategy<Value = (usize, Step)> {
        (
            0usize..4,
            prop_oneof![
                (0usize..3, any::<bool>())
                    .prop_map(|(target, exclusive)| Step::Request { target, exclusive }),
                Just(Step::All),
                Just(Step::Poll),
                Just(Step::Poll),
                Just(Step::Release),
            ],
        )
    }

    proptest! {
        /// Under any interleaving of 4 members locking 3 targets (lock, lock_all, unlock):
        /// an exclusive holder is alone, the word always counts exactly the holders, and
        /// once everyone lets go every request is granted in the end.
        #[test]
        fn locks_exclude_under_any_interleaving(steps in proptest::collection::vec(step(), 1..200)) {
            let n = 4;
            let (w, mut e) = members(n);
            // What each member asked for and holds: (targets, exclusive).
            let mut holding: Vec<Option<(Vec<usize>, bool, bool)>> = vec![None; n];
            let check = |holding: &[Option<(Vec<usize>, bool, bool)>]| {
                for t in 0..3 {
                    let granted: Vec<bool> = holding.iter().flatten()
                        .filter(|(ts, _, g)| *g && ts.contains(&t)).map(|(_, x, _)| *x).collect();
                    let excl = granted.iter().filter(|&&x| x).count();
                    assert!(excl == 0 || granted.len() == 1, "target {t}: {granted:?}");
                    let v = w.lock(t).load(Ordering::Relaxed);
                    assert_eq!(v & READERS, (granted.len() - excl) as u64);
                    assert_eq!(v & EXCL != 0, excl == 1);
                }
            };
            for (m, s) in steps {
                match s {
                    Step::Request { target, exclusive } if holding[m].is_none() => {
                        let kind = if exclusive { LockKind::Exclusive } else { LockKind::Shared };
                        e[m].sync(lock(kind, target), &*w).unwrap();
                        holding[m] = Some((vec![target], exclusive, false));
                    }
                    Step::All if holding[m].is_none() => {
                        e[m].sync(SyncCall::LockAll { nocheck: false }, &*w).unwrap();
                        holding[m] = Some(((0..3).collect(), false, false));
                    }
                    Step::Poll => {
                        if let Some(h) = holding[m].as_mut().filter(|h| !h.2) {
                            // Partial lock_all grants count as holders too.
                            if e[m].poll(&*w).is_some() { h.2 = true; }
                        }
                    }
                    Step::Release => {
                        if let Some((ts, _, true)) = &holding[m] {
                            let call = if ts.len() > 1 { SyncCall::UnlockAll } else { SyncCall::Unlock(ts[0]) };
                            e[m].sync(call, &*w).unwrap();
                            holding[m] = None;
                        }
                    }
                    _ => {}
                }
                // The flags a host's view caches agree with the checks, for every member
                // and target (one past the last too).
                for em in &e {
                    for t in 0..=n {
                        prop_assert_eq!(em.may_access(t), em.check_access(t).is_ok());
                        prop_assert_eq!(em.may_flush(Some(t)), em.check_flush(Some(t)).is_ok());
                    }
                    prop_assert_eq!(em.may_flush(None), em.check_flush(None).is_ok());
                }
                // A lock_all still being granted holds some targets already: only check
                // the word's invariants once every member's lock is settled.
                if holding.iter().flatten().all(|h| h.2 || h.0.len() == 1) {
                    check(&holding);
                }
            }
            // Everyone lets go in turn: every request is granted in the end.
            for _ in 0..2 * n {
                for m in 0..n {
                    if let Some(h) = holding[m].as_mut() {
                        if !h.2 && e[m].poll(&*w).is_some() { h.2 = true; }
                    }
                    if let Some((ts, _, true)) = &holding[m] {
                        let call = if ts.len() > 1 { SyncCall::UnlockAll } else { SyncCall::Unlock(ts[0]) };
                        e[m].sync(call, &*w).unwrap();
                        holding[m] = None;
                    }
                }
            }
            prop_assert!(holding.iter().all(Option::is_none), "{holding:?}");
            for t in 0..3 { prop_assert_eq!(w.lock(t).load(Ordering::Relaxed), 0); }
        }

        /// Fences and frees entered in any order by 3 members: nobody leaves a barrier
        /// before everyone entered it.
        #[test]
        fn barriers_hold_until_everyone_entered(order in proptest::collection::vec(0usize..3, 1..60)) {
            let n = 3;
            let (w, mut e) = members(n);
            let mut entered = [0u64; 3];
            let mut left = [0u64; 3];
            for m in order {
                if entered[m] == left[m] {
                    e[m].sync(SyncCall::Fence { succeed: true }, &*w).unwrap();
                    entered[m] += 1;
                }
                if e[m].poll(&*w).is_some() {
                    left[m] = entered[m];
                    let min = *entered.iter().min().unwrap();
                    prop_assert!(left[m] <= min, "member {m} left barrier {} with {entered:?}", left[m]);
                }
            }
        }
    }
}
