//! Puts and gets of lent buffers to members of this node, moved by the origin itself with
//! CMA (`process_vm_writev` / `process_vm_readv`) at the synchronization or progress that
//! follows them (`osc_rdma_cma_direct`): no BTL transfer, no token to poll, no PML round,
//! and every transfer queued since the last one in one system call per target and direction
//! (the kernel takes a vector of local and of remote pieces: adjacent or not). A put and its
//! flush are then one system call, as Open MPI's vader put is, and 64 puts before a flush
//! (OSU's put_bw) one as well.
//!
//! The C library's small `MPI_Put`/`MPI_Get` and one-target flushes go through [`Lent`]
//! (the module's [`LentPath`]) with no call into the window: the piece is queued there and
//! the flush makes the call, as long as the module's flags say it would do the same. So do
//! its `MPI_Win_lock`/`MPI_Win_unlock` of such a member while the module has no epoch open
//! and nothing outstanding ([`Lent::set_free`]): the lock is an atomic on the target's lock
//! word, held by the path until the unlock moves the queue and gives the word back, or until
//! the module's next call, which adopts it first ([`Lent::take_held`]) as an epoch of its own.
//! `MPI_Win_lock_all`/`MPI_Win_unlock_all` likewise, once every member's word (this
//! process's own included) is mapped: a shared lock on each, taken together or not at all.
//!
//! `MPI_Win_flush_local` stages the small puts queued since the last one ([`STAGE_PIECE`]
//! bytes each, [`STAGE`] in all): their bytes are copied into a buffer of the path, which
//! the pieces point at from then on, so the program has its buffers back without a system
//! call; the next flush, unlock or module call moves them (a full stage or queue: the
//! flush_local itself). A target's memory is written no earlier than before: MPI promises a
//! flush_local's puts at the target only after a flush or synchronization.
//!
//! [`batch_end`] (how the queue splits into calls) is sans-IO; [`issue`] makes one call.
#![allow(unsafe_code)]

use std::cell::{Cell, OnceCell, RefCell};
use std::io;
use std::mem::MaybeUninit;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use rmca_framework::buffer::UserBuf;
use rmca_framework::osc::{lock_word, LentPath, LockKind, OpId, TargetInfo};
use rmca_osc_am::lockword::LockWord;

use crate::lockword::SegWord;

/// One queued transfer: a run of a lent put or get.
#[derive(Debug, Clone, Copy)]
pub struct Cma {
    /// The operation it belongs to.
    pub op: OpId,
    /// The target's window rank.
    pub peer: usize,
    /// The target's pid (of this pid namespace).
    pub pid: u32,
    /// The operation's whole lent buffer, and this run's part of it.
    pub view: UserBuf,
    /// Where in `view` this run's bytes are, and how many.
    pub at: usize,
    /// The run's length.
    pub len: usize,
    /// The target address (in the target's address space).
    pub raddr: u64,
    /// A get (read from the target) rather than a put.
    pub get: bool,
}

/// Pieces per system call (each side's iovec array lives on the stack; Linux takes up to
/// 1024).
pub const BATCH: usize = 64;

/// The end of the system call that starts at `q[start]`: the entries after it to the same
/// target in the same direction, at most [`BATCH`] in all.
pub fn batch_end(q: &[Cma], start: usize) -> usize {
    let first = &q[start];
    let mut end = start + 1;
    while end < q.len()
        && end - start < BATCH
        && q[end].peer == first.peer
        && q[end].get == first.get
    {
        end += 1;
    }
    end
}

/// Puts of at most this many bytes are staged by `MPI_Win_flush_local` ([`Lent`]): a copy
/// that size costs less than a system call (OSU's put_latency `-s flush_local`, CPU time of
/// the origin per put and flush_local: 1 B to 1 KiB ahead, 4 KiB level, 8 KiB behind with a
/// 64 KiB stage).
pub const STAGE_PIECE: usize = 2048;

/// The staging buffer's size (within the L1 cache, which the moving call reads it from): a
/// flush_local whose puts do not fit moves the queue instead. Allocated at the first
/// staging, per window.
pub const STAGE: usize = 16 * 1024;

/// The operation of the pieces queued on the [`Lent`] path: none (the module's ids all
/// have a high bit set, the engine's start at 1).
pub const NO_OP: OpId = 0;

/// One member as [`Lent`] reaches it.
#[derive(Debug)]
struct Member {
    /// Its memory's size and displacement unit (bytes).
    size: u64,
    unit: u64,
    /// Its pid, and its memory's address in its process (set with `access`).
    pid: Cell<u32>,
    base: Cell<u64>,
    /// An access epoch to it is open and granted, and CMA reaches it: a put or get may be
    /// queued.
    access: Cell<bool>,
    /// A passive-target epoch to it is open and nothing the module sent it is
    /// unacknowledged: a flush of it may finish here.
    flush: Cell<bool>,
    /// CMA reaches it and its lock word is mapped ([`Lent::reach`]): this path may lock it.
    word: OnceCell<SegWord>,
    lockable: Cell<bool>,
    /// This process's own member, whose word is mapped ([`Lent::reach_own`]): locked here
    /// within a lock_all only (no CMA to itself: its puts and gets are the module's).
    own: Cell<bool>,
    /// The lock this path holds on it and the module has not adopted ([`Held`]).
    held: Cell<Held>,
}

/// A lock the path holds on a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// None.
    No,
    /// `MPI_Win_lock` of this kind: its lock word taken.
    Word(LockKind),
    /// `MPI_Win_lock` with `MPI_MODE_NOCHECK`: no word touched.
    NoCheck,
}

/// The module's [`LentPath`] (osc-rdma with `osc_rdma_cma_direct`): puts and gets of one
/// run queued here, with no call into the module, and moved by a flush of their target in
/// one system call per target and direction ([`issue`]), as the module's own queue is
/// moved by its synchronizations. The flags are the module's, set after each of its
/// synchronizations ([`Lent::set`], [`Lent::set_quiet`]) and lowered by anything that
/// leaves work of its own outstanding; the module takes the queue over
/// ([`Lent::take_into`]) before it queues or moves anything itself, so a general-path
/// synchronization moves, and reports, what was queued here. The queue holds at most
/// [`BATCH`] pieces (allocated once): a put or get past that goes through the module.
/// `MPI_Win_flush_local` stages small puts (`Lent::stage`); staged pieces point into the
/// path's stage, which outlives them (retired, not reused, when the module takes them).
#[derive(Debug)]
pub struct Lent {
    members: Box<[Member]>,
    /// The module has nothing queued, in flight, held or to send, and no error to report.
    quiet: Cell<bool>,
    /// Operations of at most this many bytes are not taken (`osc_rdma_small_limit`: the
    /// module sends them as messages).
    small: u64,
    queue: RefCell<Vec<Cma>>,
    /// Puts and gets queued here, system calls made, flushes finished here, locks taken
    /// here (the profile's).
    puts: Cell<u64>,
    gets: Cell<u64>,
    calls: Cell<u64>,
    flushes: Cell<u64>,
    locks: Cell<u64>,
    /// The module has no epoch open and no synchronization in progress: a lock may be
    /// taken here ([`Lent::set_free`]).
    free: Cell<bool>,
    /// Members this path holds a lock on (not adopted by the module yet).
    holding: Cell<u32>,
    /// Those locks are one `MPI_Win_lock_all`'s ([`Lent::holds_all`]).
    all: Cell<bool>,
    /// The module applied an accumulate within its call since the last flush here
    /// ([`Lent::applied`]): complete at its target, so a flush with nothing queued may
    /// finish here once (not every one: a flush with nothing to do is how a program polls
    /// its window, and the module's gives it a progress pass).
    applied: Cell<bool>,
    /// Staged puts' bytes ([`STAGE`], allocated at the first staging), of which the first
    /// `staged` are those of queued pieces; the first `staged_n` queued pieces are staged
    /// (each staging takes every piece queued after them).
    stage: RefCell<Vec<Cell<u8>>>,
    staged: Cell<usize>,
    staged_n: Cell<usize>,
    /// Stages the module took pieces of ([`Lent::take_into`]): kept until it is quiet
    /// ([`Lent::set_quiet`]), as its queue or its BTLs' transfers may still read them.
    retired: RefCell<Vec<Vec<Cell<u8>>>>,
    /// Puts staged (the profile's `osc.rdma.staged_puts`).
    staged_puts: Cell<u64>,
}

impl Lent {
    /// The path of a window whose members expose `targets`, every flag down; operations
    /// of at most `small` bytes are left to the module.
    pub fn new(targets: &[TargetInfo], small: u64) -> Self {
        Self {
            members: targets
                .iter()
                .map(|t| Member {
                    size: t.size,
                    unit: t.disp_unit,
                    pid: Cell::new(0),
                    base: Cell::new(0),
                    access: Cell::new(false),
                    flush: Cell::new(false),
                    word: OnceCell::new(),
                    lockable: Cell::new(false),
                    own: Cell::new(false),
                    held: Cell::new(Held::No),
                })
                .collect(),
            quiet: Cell::new(false),
            small,
            queue: RefCell::new(Vec::with_capacity(BATCH)),
            puts: Cell::new(0),
            gets: Cell::new(0),
            calls: Cell::new(0),
            flushes: Cell::new(0),
            locks: Cell::new(0),
            free: Cell::new(false),
            holding: Cell::new(0),
            all: Cell::new(false),
            applied: Cell::new(false),
            stage: RefCell::new(Vec::new()),
            staged: Cell::new(0),
            staged_n: Cell::new(0),
            retired: RefCell::new(Vec::new()),
            staged_puts: Cell::new(0),
        }
    }

    /// The module: an accumulate, fetch-and-op or compare-and-swap completed at its target
    /// within its call (nothing left outstanding), so the next flush may finish here.
    #[inline]
    pub fn applied(&self) {
        self.applied.set(true);
    }

    /// The module: `word` is this process's own lock word (member `t`), which the module's
    /// engine takes too: a lock_all of this path takes it with the others'. Set once.
    pub fn reach_own(&self, t: usize, word: SegWord) {
        let Some(m) = self.members.get(t) else {
            return;
        };
        let _ = m.word.set(word);
        m.own.set(true);
    }

    /// The module: CMA reaches member `t` (process `pid`, its memory at `base` there) and
    /// `word` is its lock word, which the module's engine takes too: this path may lock it
    /// while the module is free ([`Lent::set_free`]). The word is set once.
    pub fn reach(&self, t: usize, pid: u32, base: u64, word: SegWord) {
        let Some(m) = self.members.get(t) else {
            return;
        };
        m.pid.set(pid);
        m.base.set(base);
        let _ = m.word.set(word);
        m.lockable.set(true);
    }

    /// The module: CMA does not reach member `t` after all: its epoch is closed here and
    /// this path locks it no more.
    pub fn unreach(&self, t: usize) {
        if let Some(m) = self.members.get(t) {
            m.lockable.set(false);
        }
        self.close(t);
    }

    /// The module: it has no epoch open (lock, lock_all, fence, start) and no
    /// synchronization in progress (`free`), or it has. Set after each synchronization;
    /// lowered when it adopts this path's locks.
    pub fn set_free(&self, free: bool) {
        self.free.set(free);
    }

    /// Does this path hold a lock the module has not adopted? (One load: the module asks
    /// before everything it does.)
    #[inline(always)]
    pub fn holds(&self) -> bool {
        self.holding.get() != 0
    }

    /// Are the locks this path holds one `MPI_Win_lock_all`'s (every member's, shared)?
    /// The module asks before [`Lent::take_held`], to adopt them as one epoch.
    pub fn holds_all(&self) -> bool {
        self.all.get()
    }

    /// Does this path hold a lock on member `t` that the module has not adopted? An
    /// accumulate the module completes within its call may run in that epoch without
    /// adopting it, and the unlock stays this path's.
    #[inline]
    pub fn holds_lock(&self, t: usize) -> bool {
        self.members
            .get(t)
            .is_some_and(|m| m.held.get() != Held::No)
    }

    /// The module adopts the locks this path holds: `f(t, held)` for each (its epoch is the
    /// module's from now on: the access and flush flags stay as they are), and the path is
    /// no longer free.
    pub fn take_held(&self, mut f: impl FnMut(usize, Held)) {
        self.free.set(false);
        self.all.set(false);
        if self.holding.replace(0) == 0 {
            return;
        }
        for (t, m) in self.members.iter().enumerate() {
            let h = m.held.replace(Held::No);
            if h != Held::No {
                f(t, h);
            }
        }
    }

    /// The module: give back member `t`'s lock word, held as `kind` (a lock this path took
    /// and the module adopted, whose epoch the module ended).
    pub fn release_word(&self, t: usize, kind: LockKind) {
        if let Some(w) = self.members.get(t).and_then(|m| m.word.get()) {
            lock_word::release(w.word(), kind);
        }
    }

    /// The module: member `t` may be accessed (`Some((pid, base))`: its process and its
    /// memory's address there) or not, and may be flushed here (`flush`, only with access).
    pub fn set(&self, t: usize, access: Option<(u32, u64)>, flush: bool) {
        let Some(m) = self.members.get(t) else {
            return;
        };
        if let Some((pid, base)) = access {
            m.pid.set(pid);
            m.base.set(base);
        }
        m.access.set(access.is_some());
        m.flush.set(access.is_some() && flush);
    }

    /// The module: member `t` is closed to this path (CMA does not reach it).
    pub fn close(&self, t: usize) {
        self.set(t, None, false);
    }

    /// The module: nothing of its own is outstanding (`quiet`) or something is. Quiet, it
    /// reads no retired stage any more: they go.
    pub fn set_quiet(&self, quiet: bool) {
        self.quiet.set(quiet);
        if quiet {
            if let Ok(mut r) = self.retired.try_borrow_mut() {
                r.clear();
            }
        }
    }

    /// Nothing queued here.
    pub fn is_empty(&self) -> bool {
        self.queue.borrow().is_empty()
    }

    /// Move the queued pieces to the end of `out`, in order (their operation is
    /// [`NO_OP`]: the module names one if it must).
    /// Staged pieces keep pointing at their stage, retired with them (not written again,
    /// kept until the module is quiet).
    pub fn take_into(&self, out: &mut Vec<Cma>) {
        let mut q = self.queue.borrow_mut();
        if !q.is_empty() {
            out.extend_from_slice(&q);
            q.clear();
        }
        self.staged_n.set(0);
        if self.staged.replace(0) > 0 {
            // (Moved, not copied: the bytes stay where the pieces point.)
            let old = std::mem::take(&mut *self.stage.borrow_mut());
            self.retired.borrow_mut().push(old);
        }
    }

    /// Puts and gets queued here, system calls made, flushes finished, locks taken and puts
    /// staged here, since the last call (each counted once).
    pub fn take_counts(&self) -> [u64; 6] {
        [
            &self.puts,
            &self.gets,
            &self.calls,
            &self.flushes,
            &self.locks,
            &self.staged_puts,
        ]
        .map(Cell::take)
    }

    /// Move every queued piece, one system call per target and direction: true once all
    /// moved (or none was queued). On a failure the pieces from the failed call on stay
    /// queued for the module (which moves them again and reports the error, or sends them
    /// by its BTLs when CMA does not reach the target).
    #[inline(always)]
    fn move_queue(&self, q: &mut Vec<Cma>) -> bool {
        let mut start = 0;
        while start < q.len() {
            let end = batch_end(q, start);
            self.calls.set(self.calls.get() + 1);
            if issue(&q[start..end]).is_err() {
                // (This call's pieces again: a put rewrites the same bytes, a get rereads
                // them.)
                q.drain(..start);
                self.staged_n.set(self.staged_n.get().saturating_sub(start));
                return false;
            }
            start = end;
        }
        q.clear();
        // (Nothing points at the stage any more.)
        self.staged.set(0);
        self.staged_n.set(0);
        true
    }

    /// Stage the pieces queued since the last staging (`MPI_Win_flush_local`): each one's
    /// bytes copied to the stage, the piece pointing there from now on. `Some(true)` once
    /// done, `Some(false)` with none to stage; `None`, nothing changed, when a get is among
    /// them (its bytes arrive only by the call), a put of more than [`STAGE_PIECE`] bytes,
    /// or they do not fit (the stage, or a queue left full): the caller moves the queue.
    fn stage(&self, q: &mut [Cma]) -> Option<bool> {
        let from = self.staged_n.get();
        let fresh = q.get(from..)?;
        if fresh.is_empty() {
            return Some(false);
        }
        let mut bytes = 0usize;
        for x in fresh {
            if x.get || x.len > STAGE_PIECE {
                return None;
            }
            bytes += x.len;
        }
        let mut at = self.staged.get();
        if q.len() >= BATCH || at + bytes > STAGE {
            return None;
        }
        let n = fresh.len() as u64;
        let mut stage = self.stage.try_borrow_mut().ok()?;
        if stage.is_empty() {
            // (No piece points at an empty stage: `staged` is 0.)
            *stage = (0..STAGE).map(|_| Cell::new(0)).collect();
        }
        // Through the cells: pieces staged before point into the same bytes.
        let base = stage.as_ptr().cast::<u8>().cast_mut();
        for x in &mut q[from..] {
            // SAFETY: `at + x.len <= STAGE` (checked above for the sum), inside the stage's
            // allocation, whose bytes are cells (written through a shared pointer) no queued
            // piece points at yet (those end at `staged`); the source is the program's put
            // buffer of `x.len` bytes from `x.at`, valid for reads until this flush_local
            // returns (MPI's contract), and not the stage.
            unsafe {
                let dst = base.add(at);
                std::ptr::copy_nonoverlapping(x.view.slice(x.at, x.len).as_ptr(), dst, x.len);
                x.view = UserBuf::from_raw_parts(dst, x.len);
            }
            x.at = 0;
            at += x.len;
        }
        self.staged.set(at);
        self.staged_n.set(q.len());
        self.staged_puts.set(self.staged_puts.get() + n);
        Some(true)
    }

    /// Queue a put or get (`get`) of `buf` at displacement `disp` of member `t`, when the
    /// module would queue it too.
    #[inline(always)]
    fn queue_one(&self, t: usize, disp: isize, buf: UserBuf, get: bool) -> bool {
        let Some(m) = self.members.get(t) else {
            return false;
        };
        let len = buf.len();
        // (`small` is 0 at least: no operation of no bytes either, the module's to handle.)
        if !m.access.get() || len as u64 <= self.small || (get && !buf.is_writable()) {
            return false;
        }
        // In u64 with overflow checked: a displacement before the start, or bytes that end
        // past the memory, are the module's to refuse (MPI_ERR_RMA_RANGE).
        let Some(off) = u64::try_from(disp)
            .ok()
            .and_then(|d| d.checked_mul(m.unit))
            .filter(|o| o.checked_add(len as u64).is_some_and(|e| e <= m.size))
        else {
            return false;
        };
        let Ok(mut q) = self.queue.try_borrow_mut() else {
            return false;
        };
        if q.len() >= BATCH {
            return false;
        }
        q.push(Cma {
            op: NO_OP,
            peer: t,
            pid: m.pid.get(),
            view: buf,
            at: 0,
            len,
            // Inside the target's memory, which lies in its address space: no overflow.
            raddr: m.base.get().wrapping_add(off),
            get,
        });
        let n = if get { &self.gets } else { &self.puts };
        n.set(n.get() + 1);
        true
    }
}

impl LentPath for Lent {
    #[inline]
    fn put(&self, t: usize, disp: isize, data: UserBuf) -> bool {
        self.queue_one(t, disp, data, false)
    }

    #[inline]
    fn get(&self, t: usize, disp: isize, into: UserBuf) -> bool {
        self.queue_one(t, disp, into, true)
    }

    fn flush(&self, t: usize) -> bool {
        if !self.quiet.get() || !self.members.get(t).is_some_and(|m| m.flush.get()) {
            return false;
        }
        let Ok(mut q) = self.queue.try_borrow_mut() else {
            return false;
        };
        // Nothing queued: only after an accumulate applied within its call.
        if (q.is_empty() && !self.applied.get()) || !self.move_queue(&mut q) {
            return false;
        }
        self.applied.set(false);
        self.flushes.set(self.flushes.get() + 1);
        true
    }

    fn flush_local(&self, t: usize) -> bool {
        if !self.quiet.get() || !self.members.get(t).is_some_and(|m| m.flush.get()) {
            return false;
        }
        let Ok(mut q) = self.queue.try_borrow_mut() else {
            return false;
        };
        let done = match self.stage(&mut q) {
            Some(true) => true,
            // Nothing new queued: as a flush (nothing queued at all: the module's).
            Some(false) => (!q.is_empty() || self.applied.get()) && self.move_queue(&mut q),
            None => self.move_queue(&mut q),
        };
        if !done {
            return false;
        }
        self.applied.set(false);
        self.flushes.set(self.flushes.get() + 1);
        true
    }

    #[inline]
    fn lock(&self, t: usize, kind: LockKind, nocheck: bool) -> bool {
        let Some(m) = self.members.get(t) else {
            return false;
        };
        // (A second lock of `t` finds `held` set: the module's, which raises the error.)
        if !self.free.get() || !self.quiet.get() || !m.lockable.get() || m.held.get() != Held::No {
            return false;
        }
        let held = if nocheck {
            Held::NoCheck
        } else {
            match m.word.get() {
                Some(w) if lock_word::try_acquire(w.word(), kind) => Held::Word(kind),
                // Held by another: the module waits for it.
                _ => return false,
            }
        };
        m.held.set(held);
        self.holding.set(self.holding.get() + 1);
        m.access.set(true);
        // (The module is quiet: nothing it sent `t` is unacknowledged.)
        m.flush.set(true);
        self.locks.set(self.locks.get() + 1);
        true
    }

    #[inline]
    fn unlock(&self, t: usize) -> bool {
        let Some(m) = self.members.get(t) else {
            return false;
        };
        let held = m.held.get();
        // (A lock_all's member: `MPI_Win_unlock` of it is the module's error.)
        if held == Held::No || self.all.get() || !self.quiet.get() {
            return false;
        }
        let Ok(mut q) = self.queue.try_borrow_mut() else {
            return false;
        };
        // Every operation on `t` complete before the word goes (those on other members
        // complete early, which MPI allows).
        if !self.move_queue(&mut q) {
            return false;
        }
        if let (Held::Word(kind), Some(w)) = (held, m.word.get()) {
            lock_word::release(w.word(), kind);
        }
        m.held.set(Held::No);
        self.holding.set(self.holding.get() - 1);
        m.access.set(false);
        m.flush.set(false);
        true
    }

    fn lock_all(&self, nocheck: bool) -> bool {
        if !self.free.get() || !self.quiet.get() || self.holding.get() != 0 {
            return false;
        }
        // Every member lockable here (this process's own by its word), or the module's.
        if !self.members.iter().all(|m| m.own.get() || m.lockable.get()) {
            return false;
        }
        if !nocheck {
            // All or none, as the engine's lock_all: holding some while waiting for others
            // could wait on a process that waits on one of them.
            for (i, m) in self.members.iter().enumerate() {
                let got = m
                    .word
                    .get()
                    .is_some_and(|w| lock_word::try_acquire(w.word(), LockKind::Shared));
                if !got {
                    for w in self.members[..i].iter().filter_map(|m| m.word.get()) {
                        lock_word::release(w.word(), LockKind::Shared);
                    }
                    // Held exclusively by another: the module waits for it.
                    return false;
                }
            }
        }
        let held = if nocheck {
            Held::NoCheck
        } else {
            Held::Word(LockKind::Shared)
        };
        for m in self.members.iter() {
            m.held.set(held);
            // Reached by CMA (not this process itself): accessed and flushed here (the
            // module is quiet: nothing it sent is unacknowledged).
            let cma = m.lockable.get();
            m.access.set(cma);
            m.flush.set(cma);
        }
        self.holding.set(self.members.len() as u32);
        self.all.set(true);
        self.locks.set(self.locks.get() + 1);
        true
    }

    fn unlock_all(&self) -> bool {
        if !self.all.get() || !self.quiet.get() {
            return false;
        }
        let Ok(mut q) = self.queue.try_borrow_mut() else {
            return false;
        };
        // Every operation complete before any word goes.
        if !self.move_queue(&mut q) {
            return false;
        }
        // `lock_word::release`'s full fence once for all the words, not once per word (a
        // locked instruction each on x86, half of this call's time at two members).
        fence(Ordering::SeqCst);
        for m in self.members.iter() {
            if let (Held::Word(kind), Some(w)) = (m.held.get(), m.word.get()) {
                release_fenced(w.word(), kind);
            }
            m.held.set(Held::No);
            m.access.set(false);
            m.flush.set(false);
        }
        self.holding.set(0);
        self.all.set(false);
        true
    }
}

/// [`lock_word::release`] after the caller's full fence (the same word encoding: the
/// exclusive bit or one shared holder taken off).
#[inline]
fn release_fenced(word: &AtomicU64, kind: LockKind) {
    let by = match kind {
        LockKind::Exclusive => lock_word::EXCL,
        LockKind::Shared => 1,
    };
    word.fetch_sub(by, Ordering::Release);
}

/// Why a call moved nothing or not everything.
#[derive(Debug)]
pub enum Failure {
    /// CMA does not reach the target (not permitted, no such process, no such call): nothing
    /// was moved.
    Unreachable(io::Error),
    /// The call failed otherwise, or moved part of the bytes only.
    Failed(io::Error),
}

/// Move `batch` (one target, one direction: [`batch_end`]'s) in one system call.
pub fn issue(batch: &[Cma]) -> Result<(), Failure> {
    debug_assert!(!batch.is_empty() && batch.len() <= BATCH);
    let n = batch.len().min(BATCH);
    // (Not zeroed: only the first `n` are written, and only those are read.)
    let mut local = [const { MaybeUninit::<libc::iovec>::uninit() }; BATCH];
    let mut remote = [const { MaybeUninit::<libc::iovec>::uninit() }; BATCH];
    let mut total = 0usize;
    // Pieces that continue the previous one on both sides join it (OSU's put_bw: 64 puts
    // to consecutive displacements from consecutive bytes): the kernel pins the remote pages
    // once per remote iovec, so 64 one-byte iovecs cost far more than one of 64 bytes.
    let mut k = 0usize;
    let (mut lend, mut rend) = (0usize, 0u64);
    for x in &batch[..n] {
        let at = x.view.slice(x.at, x.len).as_ptr();
        if k > 0 && at as usize == lend && x.raddr == rend {
            // SAFETY: written at `k - 1` below in an earlier turn.
            unsafe {
                local[k - 1].assume_init_mut().iov_len += x.len;
                remote[k - 1].assume_init_mut().iov_len += x.len;
            }
        } else {
            local[k].write(libc::iovec {
                iov_base: at.cast(),
                iov_len: x.len,
            });
            remote[k].write(libc::iovec {
                iov_base: x.raddr as usize as *mut libc::c_void,
                iov_len: x.len,
            });
            k += 1;
        }
        lend = (at as usize).wrapping_add(x.len);
        rend = x.raddr.wrapping_add(x.len as u64);
        total += x.len;
    }
    // SAFETY: the first `k` entries of both arrays were written above.
    let (local, remote) = unsafe {
        (
            std::slice::from_raw_parts(local.as_ptr().cast::<libc::iovec>(), k),
            std::slice::from_raw_parts(remote.as_ptr().cast::<libc::iovec>(), k),
        )
    };
    // SAFETY: each local piece is part of a lent buffer the program leaves to the operation
    // until it completes locally (valid for reads; for writes, a get's buffer is writable:
    // `UserBuf::is_writable`, checked by the module before queueing), and the operation
    // completes only after this call.
    unsafe { vm_rw(batch[0].pid, local, remote, batch[0].get, total) }.map_err(|e| {
        if unreachable(&e) {
            Failure::Unreachable(e)
        } else {
            Failure::Failed(e)
        }
    })
}

/// Whether CMA failed because it does not reach the process at all (not permitted, no such
/// process, no such call): nothing was moved, and messages must serve that target.
pub fn unreachable(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM | libc::ESRCH | libc::ENOSYS)
    )
}

/// One `process_vm_readv` (`get`: from process `pid` into `local`) or `process_vm_writev`
/// (from `local` to `pid`) over the pieces `local` and `remote`, retried when a signal
/// interrupts it; `Ok` once all `total` bytes moved (a partial move is an
/// `UnexpectedEof` error). The one CMA call of this crate: [`issue`] and the accumulates
/// applied by the origin (`crate::direct`) make theirs here.
///
/// # Safety
/// Every local piece is memory valid for reads (for `get`, for writes) during the call,
/// not otherwise accessed meanwhile; the remote pieces are the kernel's to check against
/// the target's address space.
pub unsafe fn vm_rw(
    pid: u32,
    local: &[libc::iovec],
    remote: &[libc::iovec],
    get: bool,
    total: usize,
) -> io::Result<()> {
    let pid = pid as libc::pid_t;
    // The two calls take the same arguments: which way the bytes go is the only difference.
    let call = if get {
        libc::process_vm_readv
    } else {
        libc::process_vm_writev
    };
    loop {
        // SAFETY: the caller's contract for the local pieces; both arrays are as long as
        // the counts passed.
        let moved = unsafe {
            call(
                pid,
                local.as_ptr(),
                local.len() as _,
                remote.as_ptr(),
                remote.len() as _,
                0,
            )
        };
        if moved < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if moved as usize != total {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("CMA moved {moved} of {total} bytes"),
            ));
        }
        return Ok(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(peer: usize, view: UserBuf, raddr: u64, get: bool) -> Cma {
        Cma {
            op: 0,
            peer,
            pid: std::process::id(),
            view,
            at: 0,
            len: view.len(),
            raddr,
            get,
        }
    }

    #[test]
    fn a_batch_is_one_target_and_direction_at_most_batch_long() {
        let b = [1u8; 4];
        // SAFETY: a view of `b`, which outlives it; nothing moves through it here.
        let v = unsafe { UserBuf::from_slice(&b) };
        let q: Vec<Cma> = [(1, false), (1, false), (2, false), (2, true), (2, true)]
            .iter()
            .map(|&(p, g)| x(p, v, 0, g))
            .collect();
        assert_eq!(batch_end(&q, 0), 2);
        assert_eq!(batch_end(&q, 2), 3);
        assert_eq!(batch_end(&q, 3), 5);
        let long = vec![x(1, v, 0, false); BATCH + 3];
        assert_eq!(batch_end(&long, 0), BATCH);
        assert_eq!(batch_end(&long, BATCH), BATCH + 3);
    }

    /// The lent path on its own: flags, the memory's bounds in displacement units, the
    /// small limit, a full queue; a flush moves the queue in one call per target only when
    /// the module is quiet and the target flushable, and leaves what failed to the module.
    #[test]
    fn the_lent_path_takes_only_what_its_flags_and_bounds_allow() {
        let mut dst = vec![0u8; 64];
        let at = dst.as_mut_ptr() as u64;
        let info = |size| TargetInfo { size, disp_unit: 4 };
        let l = Lent::new(&[info(64), info(8)], 1);
        let src: Vec<u8> = (1..=8).collect();
        // SAFETY: a view of `src`, which outlives the path's use of it.
        let v = unsafe { UserBuf::from_slice(&src) };
        assert!(!l.put(0, 0, v), "flags down");
        l.set(0, Some((std::process::id(), at)), true);
        l.set(1, Some((std::process::id(), at)), false);
        assert!(
            !l.put(0, 0, v.slice(0, 1)),
            "at most `small` bytes: the module's"
        );
        assert!(!l.put(0, 15, v), "units of 4: bytes 60..68 of 64");
        assert!(!l.put(0, isize::MAX, v), "overflow");
        assert!(!l.put(2, 0, v), "no such member");
        assert!(l.put(0, 14, v) && l.put(1, 0, v));
        assert!(!l.flush(0), "the module is not quiet");
        l.set_quiet(true);
        assert!(!l.flush(1), "not flushable");
        assert!(l.flush(0));
        assert_eq!(&dst[56..], &src[..]);
        assert_eq!(
            l.take_counts(),
            [2, 0, 2, 1, 0, 0],
            "two targets, two calls"
        );
        assert!(l.is_empty() && !l.flush(0), "nothing queued: the module's");
        // After an accumulate the module applied within its call: once here.
        l.applied();
        assert!(!l.flush(1), "not flushable");
        assert!(l.flush(0) && !l.flush(0), "once");
        l.applied();
        l.set_quiet(false);
        assert!(!l.flush(0), "the module is not quiet");
        l.set_quiet(true);
        for _ in 0..BATCH {
            assert!(l.put(0, 0, v));
        }
        assert!(!l.put(0, 0, v), "a full queue");
        let mut q = Vec::new();
        l.take_into(&mut q);
        assert_eq!(q.len(), BATCH);
        assert!(q.iter().all(|x| x.op == NO_OP && x.raddr == at && !x.get));
        // A target CMA does not reach: nothing moves, everything stays for the module.
        l.set(0, Some((i32::MAX as u32, at)), true);
        assert!(l.put(0, 1, v));
        assert!(!l.flush(0));
        assert!(!l.is_empty());
        l.close(0);
        assert!(!l.put(0, 0, v) && !l.flush(0));
    }

    /// A path to one member at `dst` (this process), one-byte units, quiet and flushable.
    fn one_member(dst: &mut [u8]) -> (Lent, u64) {
        let at = dst.as_mut_ptr() as u64;
        let info = TargetInfo {
            size: dst.len() as u64,
            disp_unit: 1,
        };
        let l = Lent::new(&[info], 0);
        l.set(0, Some((std::process::id(), at)), true);
        l.set_quiet(true);
        (l, at)
    }

    /// `MPI_Win_flush_local` after small puts copies them aside: the program's buffer is
    /// its own again at once (overwritten here), the target untouched and no system call
    /// made; the next flush moves the staged bytes, the old ones, in one call. A get after
    /// staged puts is moved with them, behind them.
    #[test]
    fn flush_local_stages_small_puts_and_the_next_flush_moves_them() {
        let mut dst = vec![0u8; 64];
        let (l, _) = one_member(&mut dst);
        let mut src = [0u8; 8];
        for i in 0..4u8 {
            src.fill(i + 1);
            // SAFETY: a view of `src`, which outlives the path's use of it.
            let v = unsafe { UserBuf::from_slice(&src) };
            assert!(l.put(0, 8 * i as isize, v));
            assert!(l.flush_local(0));
            src.fill(0xee);
        }
        assert!(dst.iter().all(|&b| b == 0), "nothing at the target yet");
        assert_eq!(l.take_counts(), [4, 0, 0, 4, 0, 4], "staged, no call");
        assert!(l.flush(0));
        for i in 0..4 {
            assert_eq!(&dst[8 * i..8 * i + 8], &[i as u8 + 1; 8], "piece {i}");
        }
        assert_eq!(
            l.take_counts(),
            [0, 0, 1, 1, 0, 0],
            "one call, pieces joined"
        );
        assert!(
            l.is_empty() && !l.flush_local(0),
            "nothing queued: the module's"
        );
        // A put staged, then a get of the same bytes: the flush_local moves both, in order.
        src.fill(9);
        // SAFETY: as above.
        let v = unsafe { UserBuf::from_slice(&src) };
        assert!(l.put(0, 40, v.slice(0, 4)) && l.flush_local(0));
        src.fill(0xee);
        let mut back = [0u8; 4];
        // SAFETY: `back` outlives the path's use of it.
        let w = unsafe { UserBuf::from_mut_slice(&mut back) };
        assert!(l.get(0, 40, w) && l.flush_local(0));
        assert_eq!((back, &dst[40..44]), ([9; 4], &[9u8; 4][..]));
        assert_eq!(l.take_counts(), [1, 1, 2, 2, 0, 1], "a call each way");
    }

    /// The stage holds [`STAGE`] bytes and the queue [`BATCH`] pieces: a flush_local whose
    /// puts do not fit, or that would leave the queue full, moves everything queued instead;
    /// a put of more than [`STAGE_PIECE`] bytes is moved, not staged.
    #[test]
    fn a_full_stage_or_queue_makes_the_flush_local_move_the_queue() {
        let mut dst = vec![0u8; 2 * STAGE];
        let (l, _) = one_member(&mut dst);
        let mut src = vec![0u8; STAGE_PIECE + 1];
        let fits = STAGE / STAGE_PIECE;
        for i in 0..=fits {
            src.fill(i as u8 + 1);
            // SAFETY: a view of `src`, which outlives the path's use of it.
            let v = unsafe { UserBuf::from_slice(&src) };
            assert!(l.put(0, (i * STAGE_PIECE) as isize, v.slice(0, STAGE_PIECE)));
            assert!(l.flush_local(0));
        }
        assert_eq!(l.take_counts()[2], 1, "the last flush_local's call");
        assert!(l.is_empty());
        for i in 0..=fits {
            assert_eq!(dst[i * STAGE_PIECE], i as u8 + 1);
        }
        // SAFETY: as above.
        let v = unsafe { UserBuf::from_slice(&src) };
        assert!(l.put(0, 0, v) && l.flush_local(0));
        assert_eq!(l.take_counts()[2..], [1, 1, 0, 0], "too large: moved");
        for i in 0..BATCH {
            assert!(l.put(0, i as isize, v.slice(0, 1)) && l.flush_local(0));
            assert_eq!(l.is_empty(), i == BATCH - 1, "piece {i}");
        }
        assert_eq!(l.take_counts()[2..], [1, BATCH as u64, 0, BATCH as u64 - 1]);
    }

    /// What the module takes over ([`Lent::take_into`]) keeps pointing at the staged bytes,
    /// which no later staging overwrites (the stage is retired until the module is quiet).
    #[test]
    fn the_module_takes_staged_pieces_over_with_their_bytes() {
        let mut dst = vec![0u8; 16];
        let (l, _) = one_member(&mut dst);
        let mut src = [1u8; 4];
        // SAFETY: a view of `src`, which outlives the path's use of it.
        let v = unsafe { UserBuf::from_slice(&src) };
        assert!(l.put(0, 0, v) && l.flush_local(0));
        src.fill(2);
        let mut q = Vec::new();
        l.take_into(&mut q);
        assert!(l.is_empty() && q.len() == 1);
        assert_eq!(q[0].view.slice(q[0].at, q[0].len).as_slice(), [1; 4]);
        assert!(l.put(0, 4, v) && l.flush_local(0), "a fresh stage");
        src.fill(3);
        assert_eq!(q[0].view.slice(q[0].at, q[0].len).as_slice(), [1; 4]);
        assert_eq!(l.retired.borrow().len(), 1);
        issue(&q).unwrap();
        assert!(l.flush(0));
        assert_eq!(&dst[..8], &[1, 1, 1, 1, 2, 2, 2, 2]);
        l.set_quiet(false);
        assert_eq!(l.retired.borrow().len(), 1, "the module may still read it");
        l.set_quiet(true);
        assert!(l.retired.borrow().is_empty());
    }

    /// A lock of the path: its unlock moves the staged puts before the word goes; when the
    /// call fails the unlock is the module's (the word still held, the staged bytes queued),
    /// and the module moves those bytes, the ones staged, not the program's buffer.
    #[test]
    fn an_unlock_moves_the_staged_puts_before_the_word_goes() {
        let Some(own) = crate::lockword::Own::create(1) else {
            return; // (No lock words on this system: nothing to lock.)
        };
        let mut dst = vec![0u8; 16];
        let (l, at) = one_member(&mut dst);
        let me = std::process::id();
        l.reach(0, me, at, own.word());
        l.set_free(true);
        let word = own.word();
        let mut src = [5u8; 4];
        // SAFETY: a view of `src`, which outlives the path's use of it.
        let v = unsafe { UserBuf::from_slice(&src) };
        assert!(l.lock(0, LockKind::Exclusive, false));
        assert!(l.put(0, 0, v) && l.flush_local(0));
        src.fill(6);
        assert!(
            !lock_word::try_acquire(word.word(), LockKind::Shared),
            "held"
        );
        assert_eq!(dst[0], 0);
        assert!(l.unlock(0));
        assert_eq!(&dst[..4], &[5; 4]);
        assert!(
            lock_word::try_acquire(word.word(), LockKind::Exclusive),
            "given back"
        );
        lock_word::release(word.word(), LockKind::Exclusive);
        // CMA fails at the unlock: nothing given back, the staged bytes left to the module.
        assert!(l.lock(0, LockKind::Exclusive, false));
        l.set(0, Some((i32::MAX as u32, at)), true);
        src.fill(7);
        assert!(l.put(0, 8, v) && l.flush_local(0));
        src.fill(8);
        assert!(!l.unlock(0));
        assert!(
            !lock_word::try_acquire(word.word(), LockKind::Shared),
            "still held"
        );
        let mut q = Vec::new();
        l.take_into(&mut q);
        assert_eq!(q.len(), 1);
        q[0].pid = me;
        issue(&q).unwrap();
        assert_eq!(&dst[8..12], &[7; 4]);
        l.take_held(|_, _| {});
        lock_word::release(word.word(), LockKind::Exclusive);
    }

    #[test]
    fn adjacent_pieces_join_and_move_their_bytes() {
        let src: Vec<u8> = (1..=8).collect();
        let mut dst = vec![0u8; 8];
        let at = dst.as_mut_ptr() as u64;
        // SAFETY: a view of `src`, which outlives the call.
        let v = unsafe { UserBuf::from_slice(&src) };
        // Eight one-byte puts, consecutive on both sides but the fourth (a gap at the target).
        let q: Vec<Cma> = (0..8usize)
            .map(|i| Cma {
                at: i,
                len: 1,
                ..x(1, v, at + i as u64 + u64::from(i >= 4), false)
            })
            .filter(|c| c.raddr < at + 8)
            .collect();
        issue(&q).unwrap();
        assert_eq!(dst, [1, 2, 3, 4, 0, 5, 6, 7]);
    }

    #[test]
    fn pieces_not_adjacent_on_either_side_move_in_one_call() {
        let src: Vec<u8> = (1..=8).collect();
        let mut dst = vec![0u8; 16];
        let at = dst.as_mut_ptr() as u64;
        // SAFETY: views of `src`, which outlives the calls.
        let v = unsafe { UserBuf::from_slice(&src) };
        let puts = [
            Cma {
                at: 4,
                len: 2,
                ..x(1, v, at + 10, false)
            },
            Cma {
                at: 0,
                len: 3,
                ..x(1, v, at, false)
            },
        ];
        issue(&puts).unwrap();
        assert_eq!(dst, [1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 5, 6, 0, 0, 0, 0]);
        let mut back = vec![0u8; 4];
        // SAFETY: `back` outlives the call.
        let w = unsafe { UserBuf::from_mut_slice(&mut back) };
        let gets = [
            Cma {
                len: 2,
                ..x(1, w, at + 10, true)
            },
            Cma {
                at: 2,
                len: 2,
                ..x(1, w, at + 1, true)
            },
        ];
        issue(&gets).unwrap();
        assert_eq!(back, [5, 6, 2, 3]);
        // A process that does not exist: unreachable, nothing moved.
        let dead = Cma {
            pid: i32::MAX as u32,
            ..puts[0]
        };
        assert!(matches!(issue(&[dead]), Err(Failure::Unreachable(_))));
        // A remote range that is not mapped: failed.
        let unmapped = Cma {
            raddr: 8,
            ..puts[0]
        };
        assert!(matches!(issue(&[unmapped]), Err(Failure::Failed(_))));
    }
}
