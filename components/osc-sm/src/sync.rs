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
//!
//! The passive-target locks this member holds live in a [`Passive`], which the epochs share
//! with the host's fast path ([`rmca_framework::osc::DirectLocks`], through the window's
//! view): [`Passive::try_lock`] and its siblings take or release an uncontended lock with
//! one atomic on the word and nothing else, when no other epoch or synchronization is in the
//! way (a flag the epochs keep after each of their steps); everything else, and every
//! contended lock, goes through [`Epochs::sync`], which sees the same holds.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use rmca_framework::osc::{lock_word, LockKind, OscError, SyncCall};

pub use lock_word::{EXCL, READERS};

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

/// The passive-target locks one member holds or requested on a window: shared (`Rc`)
/// between its [`Epochs`] and the host's fast path, which takes and releases uncontended
/// locks here directly ([`Passive::try_lock`], [`Passive::try_unlock`],
/// [`Passive::try_lock_all`], [`Passive::try_unlock_all`]). The fast path acts only while
/// the epochs allow it ([`Passive::direct`]): then a lock is all the member's access, so the
/// two ways in never disagree.
#[derive(Debug)]
pub struct Passive {
    held: Box<[Cell<Option<Held>>]>,
    /// How many of `held` are `Some` (so that "holds any lock" is one load).
    holding: Cell<usize>,
    lock_all: Cell<bool>,
    /// Set by the epochs after each step: no synchronization in progress, the window not
    /// freed, locks allowed (no `no_locks`), no fence or start epoch open.
    direct: Cell<bool>,
}

impl Passive {
    fn new(size: usize) -> Self {
        Self {
            held: (0..size).map(|_| Cell::new(None)).collect(),
            holding: Cell::new(0),
            lock_all: Cell::new(false),
            direct: Cell::new(false),
        }
    }

    #[inline]
    fn get(&self, t: usize) -> Option<Held> {
        self.held[t].get()
    }

    #[inline]
    fn set(&self, t: usize, h: Option<Held>) {
        let was = self.held[t].replace(h).is_some();
        self.holding
            .set(self.holding.get() + usize::from(h.is_some()) - usize::from(was));
    }

    /// Does this member hold (or wait for) any lock?
    #[inline]
    fn any(&self) -> bool {
        self.lock_all.get() || self.holding.get() != 0
    }

    /// May the fast path lock and unlock now (see [`Passive::direct`]'s field)?
    #[inline]
    pub fn direct(&self) -> bool {
        self.direct.get()
    }

    /// `MPI_Win_lock(kind)` of `t` if it is granted at once and nothing else is in the way
    /// (true: held); false, nothing changed, otherwise: a contended lock, or one the epochs
    /// must see to (a misuse, another epoch open), is [`Epochs::sync`]'s.
    #[inline]
    pub fn try_lock<W: Words + ?Sized>(
        &self,
        w: &W,
        t: usize,
        kind: LockKind,
        nocheck: bool,
    ) -> bool {
        if !self.direct.get() || self.lock_all.get() || t >= self.held.len() {
            return false;
        }
        if self.get(t).is_some() || !(nocheck || try_acquire(w, t, kind)) {
            return false;
        }
        self.set(
            t,
            Some(Held {
                kind,
                granted: true,
                nocheck,
            }),
        );
        true
    }

    /// `MPI_Win_unlock` of `t`, locked by `MPI_Win_lock`: `Some(others)` once released,
    /// `others` whether another lock is still held; `None`, nothing changed, when the epochs
    /// must see to it (no such lock: the error is theirs).
    #[inline]
    pub fn try_unlock<W: Words + ?Sized>(&self, w: &W, t: usize) -> Option<bool> {
        if !self.direct.get() || self.lock_all.get() || t >= self.held.len() {
            return None;
        }
        // With no synchronization in progress every lock held is granted.
        let held = self.get(t)?;
        self.set(t, None);
        release(w, t, held);
        Some(self.holding.get() != 0)
    }

    /// `MPI_Win_lock_all` if every shared lock is granted at once (true); false, nothing
    /// held, otherwise (the locks taken before a refusal are given back at once: nothing
    /// was done under them).
    pub fn try_lock_all<W: Words + ?Sized>(&self, w: &W, nocheck: bool) -> bool {
        if !self.direct.get() || self.any() {
            return false;
        }
        let n = self.held.len();
        if !nocheck {
            for t in 0..n {
                if !try_acquire(w, t, LockKind::Shared) {
                    for u in 0..t {
                        w.lock(u).fetch_sub(1, Ordering::Release);
                    }
                    return false;
                }
            }
        }
        for t in 0..n {
            self.set(
                t,
                Some(Held {
                    kind: LockKind::Shared,
                    granted: true,
                    nocheck,
                }),
            );
        }
        self.lock_all.set(true);
        true
    }

    /// `MPI_Win_unlock_all` of a granted `MPI_Win_lock_all` (true); false, nothing changed,
    /// when the epochs must see to it.
    pub fn try_unlock_all<W: Words + ?Sized>(&self, w: &W) -> bool {
        if !self.direct.get() || !self.lock_all.get() {
            return false;
        }
        self.release_all(w);
        true
    }

    fn release_all<W: Words + ?Sized>(&self, w: &W) {
        for (t, c) in self.held.iter().enumerate() {
            if let Some(h) = c.take() {
                release(w, t, h);
            }
        }
        self.holding.set(0);
        self.lock_all.set(false);
    }
}

/// Try to take a lock of `kind` on `target`'s word (true: granted; the word's protocol is
/// the framework's [`lock_word`]).
#[inline]
fn try_acquire<W: Words + ?Sized>(w: &W, target: usize, kind: LockKind) -> bool {
    lock_word::try_acquire(w.lock(target), kind)
}

/// Give back the lock `held` on `target` (granted): everything stored under it is visible
/// to the word's next holder (the release), and to whoever this member synchronizes with
/// next (the fence: MPI_Win_unlock completes the operations at the target).
#[inline]
fn release<W: Words + ?Sized>(w: &W, target: usize, held: Held) {
    if held.nocheck {
        fence(Ordering::SeqCst);
        return;
    }
    lock_word::release(w.lock(target), held.kind);
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
    /// The locks held or requested, shared with the host's fast path.
    passive: Rc<Passive>,
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
        let e = Self {
            me,
            size,
            no_locks,
            fence_open: false,
            barriers: 0,
            access: None,
            exposure: None,
            passive: Rc::new(Passive::new(size)),
            pending: None,
            freed: false,
        };
        e.allow_direct();
        e
    }

    /// The locks this member holds, shared with the host's fast path ([`Passive`]).
    pub fn passive(&self) -> Rc<Passive> {
        self.passive.clone()
    }

    /// Let the fast path lock and unlock exactly while nothing but locks is in the way:
    /// after every step that may have changed the epochs.
    fn allow_direct(&self) {
        self.passive.direct.set(
            self.pending.is_none()
                && !self.freed
                && !self.no_locks
                && !self.fence_open
                && self.access.is_none(),
        );
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
        let locked = self.passive.get(target).is_some_and(|h| h.granted);
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
        self.passive.any()
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
        let r = self.start(call, w);
        // What another member did already ends the wait within the call (a start whose
        // targets posted, a wait whose origins completed: OSU's pscw loops, where the other
        // side runs ahead): nothing left for a poll.
        if r.is_ok() && self.pending.is_some() {
            // (A finished step is always Ok.)
            let _ = self.step(w);
        }
        self.allow_direct();
        r
    }

    /// Does the synchronization in progress take locks (whose grants, one by one, open
    /// access to their targets while it waits)?
    pub fn waiting_for_locks(&self) -> bool {
        matches!(self.pending, Some(Pending::Locks(_)))
    }

    fn start(&mut self, call: SyncCall, w: &dyn Words) -> Result<(), OscError> {
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
                if self.passive.lock_all.get() || self.passive.get(target).is_some() {
                    return Err(OscError::Sync(format!(
                        "MPI_Win_lock: this process holds a lock on rank {target} already"
                    )));
                }
                self.fence_open = false;
                self.request(target, kind, nocheck);
                // Granted at once when free: no step left for a poll.
                if !nocheck && !try_acquire(w, target, kind) {
                    self.pending = Some(Pending::Locks(target..target + 1));
                } else {
                    self.grant(target);
                }
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
                self.passive.lock_all.set(true);
                self.pending = Some(Pending::Locks(0..n));
            }
            SyncCall::Unlock(target) => {
                self.check_rank(target)?;
                let held = match self.passive.get(target) {
                    Some(h) if !self.passive.lock_all.get() => h,
                    _ => {
                        return Err(OscError::Sync(format!(
                            "MPI_Win_unlock: rank {target} is not locked by MPI_Win_lock"
                        )))
                    }
                };
                self.passive.set(target, None);
                release(w, target, held);
            }
            SyncCall::UnlockAll => {
                if !self.passive.lock_all.get() {
                    return Err(OscError::Sync(
                        "MPI_Win_unlock_all without MPI_Win_lock_all".into(),
                    ));
                }
                self.passive.release_all(w);
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

    /// Every member's [`Epochs::may_access`] (`access(t, open)`) and [`Epochs::may_flush`]
    /// (`flush(Some(t), ok)`, then `flush(None, ok)` for the flush of all), what a host's
    /// cached view holds, in one pass over the members and one over the access group (not a
    /// search of the group per member).
    pub fn view_flags(
        &self,
        mut access: impl FnMut(usize, bool),
        mut flush: impl FnMut(Option<usize>, bool),
    ) {
        let idle = self.pending.is_none() && !self.freed;
        for t in 0..self.size {
            let held = self.passive.get(t);
            access(t, self.fence_open || held.is_some_and(|h| h.granted));
            flush(Some(t), idle && held.is_some());
        }
        // (A start's group was checked against the window's size.)
        for &t in self.access.iter().flatten() {
            access(t, true);
        }
        flush(None, idle && self.any_lock());
    }

    /// Would [`Epochs::flush`] of `target` succeed (no error made: what a host's cached
    /// view of the epochs holds)?
    pub fn may_flush(&self, target: Option<usize>) -> bool {
        if self.pending.is_some() || self.freed {
            return false;
        }
        match target {
            Some(t) => t < self.size && self.passive.get(t).is_some(),
            None => self.any_lock(),
        }
    }

    /// [`Epochs::flush`]'s checks, with their errors.
    fn check_flush(&self, target: Option<usize>) -> Result<(), OscError> {
        self.idle()?;
        match target {
            Some(t) => {
                self.check_rank(t)?;
                if self.passive.get(t).is_none() {
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
        self.passive.set(
            target,
            Some(Held {
                kind,
                granted: nocheck,
                nocheck,
            }),
        );
    }

    /// Mark the requested lock on `target` granted.
    fn grant(&self, target: usize) {
        if let Some(h) = self.passive.get(target) {
            self.passive.set(target, Some(Held { granted: true, ..h }));
        }
    }

    /// Did the synchronization started last finish? (`None`: not yet; call again later.)
    pub fn poll(&mut self, w: &dyn Words) -> Option<Result<(), OscError>> {
        let r = self.step(w);
        self.allow_direct();
        r
    }

    fn step(&mut self, w: &dyn Words) -> Option<Result<(), OscError>> {
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
                    let h = self.passive.get(t).expect("requested");
                    if !h.granted {
                        if try_acquire(w, t, h.kind) {
                            self.grant(t);
                        } else {
                            all = false;
                        }
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
    fn a_wait_that_is_over_already_ends_within_the_call() {
        let (w, mut e) = members(2);
        // 1 posted before 0 starts, 0 completed before 1 waits, both fenced before the
        // last one enters: each call finds its wait over, nothing left for a poll.
        e[1].sync(SyncCall::Post(vec![0]), &*w).unwrap();
        e[0].sync(SyncCall::Start(vec![1]), &*w).unwrap();
        assert!(!e[0].waiting());
        e[0].check_access(1).unwrap();
        e[0].sync(SyncCall::Complete, &*w).unwrap();
        e[1].sync(SyncCall::Wait, &*w).unwrap();
        assert!(!e[1].waiting() && !e[1].busy());
        e[0].sync(SyncCall::Fence { succeed: true }, &*w).unwrap();
        assert!(e[0].waiting());
        e[1].sync(SyncCall::Fence { succeed: true }, &*w).unwrap();
        assert!(!e[1].waiting());
        e[1].check_access(0).unwrap();
        assert_eq!(e[0].poll(&*w), Some(Ok(())));
        // A wait that is not over still is one.
        e[0].sync(SyncCall::Fence { succeed: false }, &*w).unwrap();
        assert!(e[0].waiting());
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

    /// The fast path's lock of `target` by member `m` (`kind`), through its [`Passive`].
    fn direct(e: &[Epochs], w: &Sim, m: usize, target: usize, kind: LockKind) -> bool {
        e[m].passive().try_lock(w, target, kind, false)
    }

    #[test]
    fn the_fast_path_takes_free_locks_and_the_epochs_see_them() {
        let (w, mut e) = members(2);
        assert!(direct(&e, &w, 0, 1, LockKind::Exclusive));
        assert_eq!(w.lock(1).load(Ordering::Relaxed), EXCL);
        // The epochs see the hold: access, flush, and their refusals.
        e[0].check_access(1).unwrap();
        assert!(e[0].may_flush(Some(1)) && e[0].may_flush(None) && !e[0].may_flush(Some(0)));
        assert!(matches!(
            e[0].sync(lock(LockKind::Shared, 1), &*w),
            Err(OscError::Sync(_))
        ));
        assert!(matches!(
            e[0].sync(SyncCall::Fence { succeed: true }, &*w),
            Err(OscError::Sync(_))
        ));
        // A second lock of the same rank is the epochs' (their error), nothing changed.
        assert!(!direct(&e, &w, 0, 1, LockKind::Exclusive));
        assert!(!direct(&e, &w, 0, 1, LockKind::Shared));
        assert_eq!(w.lock(1).load(Ordering::Relaxed), EXCL);
        // Another rank: a second lock epoch beside the first.
        assert!(direct(&e, &w, 0, 0, LockKind::Shared));
        // The general unlock of a lock the fast path took, and the reverse.
        e[0].sync(SyncCall::Unlock(1), &*w).unwrap();
        assert_eq!(w.lock(1).load(Ordering::Relaxed), 0);
        assert!(matches!(e[0].check_access(1), Err(OscError::Sync(_))));
        assert_eq!(e[0].passive().try_unlock(&*w, 0), Some(false));
        assert_eq!(w.lock(0).load(Ordering::Relaxed), 0);
        assert!(!e[0].busy());
        e[0].sync(lock(LockKind::Exclusive, 0), &*w).unwrap();
        assert_eq!(e[0].poll(&*w), Some(Ok(())));
        assert!(direct(&e, &w, 0, 1, LockKind::Shared));
        assert_eq!(
            e[0].passive().try_unlock(&*w, 0),
            Some(true),
            "rank 1 is still held"
        );
        assert_eq!(e[0].passive().try_unlock(&*w, 1), Some(false));
        // Unlock without a lock: the epochs' error.
        assert_eq!(e[0].passive().try_unlock(&*w, 1), None);
        assert_eq!(e[0].passive().try_unlock(&*w, 7), None);
        assert!(!direct(&e, &w, 0, 2, LockKind::Shared), "no rank 2");
        assert!(matches!(
            e[0].sync(SyncCall::Unlock(1), &*w),
            Err(OscError::Sync(_))
        ));
        // MPI_MODE_NOCHECK: no word touched.
        assert!(e[0].passive().try_lock(&*w, 1, LockKind::Exclusive, true));
        assert_eq!(w.lock(1).load(Ordering::Relaxed), 0);
        e[0].check_access(1).unwrap();
        assert_eq!(e[0].passive().try_unlock(&*w, 1), Some(false));
        assert_eq!(w.lock(1).load(Ordering::Relaxed), 0);
    }

    #[test]
    fn contended_locks_are_left_to_the_epochs_which_wait() {
        let (w, mut e) = members(3);
        // Shared then exclusive: the writer is refused (nothing changed) and waits in the
        // epochs; another reader is let in by the fast path meanwhile.
        assert!(direct(&e, &w, 0, 2, LockKind::Shared));
        assert!(!direct(&e, &w, 1, 2, LockKind::Exclusive));
        assert_eq!(w.lock(2).load(Ordering::Relaxed), 1);
        assert!(matches!(e[1].check_access(2), Err(OscError::Sync(_))));
        e[1].sync(lock(LockKind::Exclusive, 2), &*w).unwrap();
        assert_eq!(e[1].poll(&*w), None);
        // While its lock is pending, member 1's fast path stands aside entirely.
        assert!(!direct(&e, &w, 1, 0, LockKind::Shared));
        assert!(direct(&e, &w, 2, 2, LockKind::Shared));
        assert_eq!(e[0].passive().try_unlock(&*w, 2), Some(false));
        assert_eq!(e[1].poll(&*w), None);
        assert_eq!(e[2].passive().try_unlock(&*w, 2), Some(false));
        assert_eq!(e[1].poll(&*w), Some(Ok(())));
        assert_eq!(w.lock(2).load(Ordering::Relaxed), EXCL);
        // Exclusive held: neither kind gets in by the fast path, nor does a lock_all,
        // which gives back the shared locks it took before the refusal.
        assert!(!direct(&e, &w, 0, 2, LockKind::Shared));
        assert!(!direct(&e, &w, 2, 2, LockKind::Exclusive));
        assert!(!e[0].passive().try_lock_all(&*w, false));
        for t in 0..2 {
            assert_eq!(w.lock(t).load(Ordering::Relaxed), 0, "rank {t} given back");
        }
        assert!(!e[0].busy());
        // Member 1 releases by its fast path; member 0's lock_all is granted then.
        assert_eq!(e[1].passive().try_unlock(&*w, 2), Some(false));
        assert!(e[0].passive().try_lock_all(&*w, false));
        for t in 0..3 {
            assert_eq!(w.lock(t).load(Ordering::Relaxed), 1);
            e[0].check_access(t).unwrap();
        }
        // lock_all against lock: a writer waits, a reader joins; lock and unlock of one
        // rank are refused inside lock_all (the epochs' errors).
        assert!(!direct(&e, &w, 1, 1, LockKind::Exclusive));
        assert!(direct(&e, &w, 2, 1, LockKind::Shared));
        assert!(!direct(&e, &w, 0, 1, LockKind::Shared));
        assert_eq!(e[0].passive().try_unlock(&*w, 1), None);
        assert!(matches!(
            e[0].sync(SyncCall::Unlock(1), &*w),
            Err(OscError::Sync(_))
        ));
        // The general unlock_all of a fast lock_all.
        e[0].sync(SyncCall::UnlockAll, &*w).unwrap();
        assert_eq!(w.lock(1).load(Ordering::Relaxed), 1, "member 2's");
        assert_eq!(e[2].passive().try_unlock(&*w, 1), Some(false));
        assert!(
            !e[0].passive().try_unlock_all(&*w),
            "unlock_all without lock_all"
        );
        for t in 0..3 {
            assert_eq!(w.lock(t).load(Ordering::Relaxed), 0);
        }
        assert!(e.iter().all(|m| !m.busy()));
    }

    #[test]
    fn the_fast_path_stands_aside_for_every_other_epoch() {
        let (w, mut e) = members(2);
        // A fence epoch open: the lock is the epochs' (which close the fence epoch).
        for m in &mut e {
            m.sync(SyncCall::Fence { succeed: true }, &*w).unwrap();
        }
        for m in &mut e {
            assert_eq!(m.poll(&*w), Some(Ok(())));
        }
        assert!(!direct(&e, &w, 0, 1, LockKind::Shared));
        for m in &mut e {
            m.sync(SyncCall::Fence { succeed: false }, &*w).unwrap();
        }
        for m in &mut e {
            assert_eq!(m.poll(&*w), Some(Ok(())));
        }
        assert!(direct(&e, &w, 0, 1, LockKind::Shared));
        assert_eq!(e[0].passive().try_unlock(&*w, 1), Some(false));
        // A start epoch (and its wait for the post).
        e[0].sync(SyncCall::Start(vec![1]), &*w).unwrap();
        assert!(!direct(&e, &w, 0, 1, LockKind::Shared), "start pending");
        e[1].sync(SyncCall::Post(vec![0]), &*w).unwrap();
        assert_eq!(e[0].poll(&*w), Some(Ok(())));
        assert!(!direct(&e, &w, 0, 1, LockKind::Shared), "start epoch open");
        assert!(!e[0].passive().try_lock_all(&*w, false));
        e[0].sync(SyncCall::Complete, &*w).unwrap();
        e[1].sync(SyncCall::Wait, &*w).unwrap();
        assert_eq!(e[1].poll(&*w), Some(Ok(())));
        // A lock_all being granted (rank 1 held exclusively by member 1).
        assert!(direct(&e, &w, 1, 1, LockKind::Exclusive));
        e[0].sync(SyncCall::LockAll { nocheck: false }, &*w)
            .unwrap();
        assert_eq!(e[0].poll(&*w), None);
        assert!(!e[0].passive().try_unlock_all(&*w), "lock_all pending");
        assert!(!direct(&e, &w, 0, 0, LockKind::Shared));
        assert_eq!(e[1].passive().try_unlock(&*w, 1), Some(false));
        assert_eq!(e[0].poll(&*w), Some(Ok(())));
        assert!(e[0].passive().try_unlock_all(&*w));
        assert!(!e[0].busy());
        // no_locks, and a freed window.
        let nl = Epochs::new(0, 2, true);
        assert!(!nl.passive().try_lock(&*w, 1, LockKind::Shared, false));
        assert!(!nl.passive().try_lock_all(&*w, true));
        for m in &mut e {
            m.sync(SyncCall::Free, &*w).unwrap();
        }
        for m in &mut e {
            assert_eq!(m.poll(&*w), Some(Ok(())));
        }
        assert!(!direct(&e, &w, 0, 1, LockKind::Shared));
        for t in 0..2 {
            assert_eq!(w.lock(t).load(Ordering::Relaxed), 0);
        }
    }

    /// One step of a simulated member in the lock property: what it does next.
    #[derive(Clone, Copy, Debug)]
    enum Step {
        /// `direct`: by the fast path ([`Passive`]), else through the epochs.
        Request {
            target: usize,
            exclusive: bool,
            direct: bool,
        },
        All {
            direct: bool,
        },
        Poll,
        Release {
            direct: bool,
        },
    }

    fn step() -> impl Strategy<Value = (usize, Step)> {
        (
            0usize..4,
            prop_oneof![
                (0usize..3, any::<bool>(), any::<bool>()).prop_map(
                    |(target, exclusive, direct)| Step::Request {
                        target,
                        exclusive,
                        direct
                    }
                ),
                any::<bool>().prop_map(|direct| Step::All { direct }),
                Just(Step::Poll),
                Just(Step::Poll),
                any::<bool>().prop_map(|direct| Step::Release { direct }),
            ],
        )
    }

    /// Synchronization call `k` (of 12) of 3 members, `g` a mask of members for the group
    /// calls and `t` a target.
    fn any_call(k: u8, g: u8, t: usize) -> SyncCall {
        let group: Vec<usize> = (0..3).filter(|r| g & (1 << r) != 0).collect();
        match k % 12 {
            0 => SyncCall::Fence {
                succeed: g & 1 == 0,
            },
            1 => SyncCall::Post(group),
            2 => SyncCall::Start(group),
            3 => SyncCall::Complete,
            4 => SyncCall::Wait,
            5 => lock(LockKind::Shared, t),
            6 => lock(LockKind::Exclusive, t),
            7 => SyncCall::LockAll {
                nocheck: g & 1 != 0,
            },
            8 => SyncCall::Unlock(t),
            9 => SyncCall::UnlockAll,
            10 => SyncCall::Flush(Some(t)),
            _ => SyncCall::Flush(None),
        }
    }

    proptest! {
        /// Whatever the members did (any call, in any order, misuse included, polled or
        /// not), [`Epochs::view_flags`] gives every member's `may_access` and `may_flush`.
        #[test]
        fn the_view_flags_are_the_epochs_checks(
            steps in proptest::collection::vec((0usize..3, any::<u8>(), 0u8..8, 0usize..3, any::<bool>()), 1..120)
        ) {
            let (w, mut e) = members(3);
            for (m, k, g, t, poll) in steps {
                let _ = e[m].sync(any_call(k, g, t), &*w);
                if poll {
                    let _ = e[m].poll(&*w);
                }
                for x in &e {
                    let mut access = [None; 3];
                    let mut flush = [None; 4];
                    x.view_flags(|t, open| access[t] = Some(open), |t, ok| flush[t.unwrap_or(3)] = Some(ok));
                    for r in 0..3 {
                        prop_assert_eq!(access[r], Some(x.may_access(r)));
                        prop_assert_eq!(flush[r], Some(x.may_flush(Some(r))));
                    }
                    prop_assert_eq!(flush[3], Some(x.may_flush(None)));
                }
            }
        }

        /// Under any interleaving of 4 members locking 3 targets (lock, lock_all, unlock),
        /// each step through the epochs or the fast path: an exclusive holder is alone, the
        /// word always counts exactly the holders, and once everyone lets go every request
        /// is granted in the end.
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
                    Step::Request { target, exclusive, direct } if holding[m].is_none() => {
                        let kind = if exclusive { LockKind::Exclusive } else { LockKind::Shared };
                        if direct {
                            // Granted at once, or nothing changed.
                            if e[m].passive().try_lock(&*w, target, kind, false) {
                                holding[m] = Some((vec![target], exclusive, true));
                            } else {
                                prop_assert!(!e[m].busy());
                            }
                        } else {
                            // Granted within the call when free (nothing left to poll).
                            e[m].sync(lock(kind, target), &*w).unwrap();
                            holding[m] = Some((vec![target], exclusive, !e[m].waiting()));
                        }
                    }
                    Step::All { direct } if holding[m].is_none() => {
                        if direct {
                            if e[m].passive().try_lock_all(&*w, false) {
                                holding[m] = Some(((0..3).collect(), false, true));
                            } else {
                                prop_assert!(!e[m].busy());
                            }
                        } else {
                            e[m].sync(SyncCall::LockAll { nocheck: false }, &*w).unwrap();
                            holding[m] = Some(((0..3).collect(), false, false));
                        }
                    }
                    Step::Poll => {
                        if let Some(h) = holding[m].as_mut().filter(|h| !h.2) {
                            // Partial lock_all grants count as holders too.
                            if e[m].poll(&*w).is_some() { h.2 = true; }
                        }
                    }
                    Step::Release { direct } => {
                        if let Some((ts, _, true)) = &holding[m] {
                            if direct {
                                // A granted lock with nothing else open: the fast path's.
                                let p = e[m].passive();
                                if ts.len() > 1 {
                                    prop_assert!(p.try_unlock_all(&*w));
                                } else {
                                    prop_assert_eq!(p.try_unlock(&*w, ts[0]), Some(false));
                                }
                            } else {
                                let call = if ts.len() > 1 { SyncCall::UnlockAll } else { SyncCall::Unlock(ts[0]) };
                                e[m].sync(call, &*w).unwrap();
                            }
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
