//! One window of osc-rdma: osc-am's engine for synchronization and accumulates, RDMA
//! transfers for puts and gets, and the [`Tracker`] that orders the two; I/O only through the
//! host's port ([`OscPort`], [`OscRdma`]).

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use rmca_framework::buffer::UserBuf;
use rmca_framework::hash::BuildIntHasher;
use rmca_framework::osc::{
    AccOp, Elem, HostAccumulate, Layout, LentPath, LockKind, OpId, OscError, OscModule, OscPort,
    RdmaKeys, RdmaToken, SyncCall, WinConfig,
};
use rmca_framework::wire::{Reader, Writer};
use rmca_osc_am::engine::{Counted, Engine};
use rmca_osc_am::wire::Msg;

use crate::track::{Order, Tracker};

/// The kind byte of the message carrying a member's registration: its messages and
/// osc-am's share the window's channel, so osc-am's wire module reserves it.
const KEYS: u8 = rmca_osc_am::wire::RDMA_KEYS;

/// Set in the ids of the operations moved by RDMA (the engine numbers its own from 1).
const RDMA_OP: OpId = 1 << 62;

/// Operations to a target that go by CMA straight away after a request posted in its slot
/// had to be claimed back (the target computes, or sleeps in a blocking wait)
/// ([`crate::slot::Policy`]).
const SLOT_SKIP: u32 = 64;

/// What a member said about its memory.
#[derive(Debug)]
enum Peer {
    /// Not heard from yet.
    Unknown,
    /// Reached by RDMA: its memory's address and keys.
    Rdma { base: u64, keys: RdmaKeys },
    /// Not registered (no memory, or registration failed): osc-am's messages reach it.
    Messages,
}

/// This member's registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reg {
    /// Not attempted yet (done in the first progress, which has the port).
    Todo,
    /// Registered under this handle.
    Held(u64),
    /// Not registered, or released.
    None,
}

/// One transfer of an operation (one run of its layout).
#[derive(Debug)]
struct Xfer {
    op: OpId,
    peer: usize,
    seq: u64,
    /// Where in the operation's buffer, and how many bytes.
    at: usize,
    len: usize,
    /// The target address (in the target's address space).
    raddr: u64,
    get: bool,
}

/// An operation with transfers not completed: its buffer (the put's data, the get's result).
#[derive(Debug)]
struct Op {
    buf: Vec<u8>,
    /// The buffer as the BTLs see it (made once: the Vec's heap block never moves), or the
    /// program's own (`lent`).
    view: UserBuf,
    left: usize,
    get: bool,
    /// A put reading the program's buffer or a get writing it ([`OscModule::put_lent`],
    /// [`OscModule::get_lent`]): complete at the origin only once its transfers are, and
    /// then forgotten (a get's error goes to the next synchronization).
    lent: bool,
    error: Option<OscError>,
}

/// One window of osc-rdma.
pub struct RdmaModule {
    engine: Engine<UserBuf>,
    memory: UserBuf,
    reg: Reg,
    peers: Vec<Peer>,
    track: Tracker<Msg>,
    /// This member's rank, and the engine's messages to itself: handed back to the engine
    /// in the same progress (in order, behind the transfers to itself as every message is),
    /// never through the PML: no matching, no copies of their data, no rendezvous.
    me: usize,
    loopback: VecDeque<Msg>,
    /// Transfers to start at the next progress (the port is not at hand in `put`/`get`).
    todo: VecDeque<Xfer>,
    /// Started transfers, oldest first (tested from the front; a strided operation can
    /// have a great many).
    in_flight: VecDeque<(RdmaToken, Xfer)>,
    /// (Ids are this module's own counter: the integer hasher, not SipHash.)
    ops: HashMap<OpId, Op, BuildIntHasher>,
    next_op: u64,
    /// An error of a transfer without a result (a put), reported by the next synchronization.
    deferred: Option<OscError>,
    /// The synchronization in progress is `Free`; once done, the registration goes.
    freeing: bool,
    freed: bool,
    /// Puts and gets of at most this many bytes go as active messages (`osc_rdma_small_limit`).
    small_limit: u64,
    /// Puts and gets whose target runs average fewer bytes go as active messages
    /// (`osc_rdma_min_run`).
    min_run: u64,
    /// This member's lock word (`osc_rdma_lock_words`; none for a window made with
    /// `no_locks`, or where the system refused): its node's members lock it by atomics.
    lock_word: Option<crate::lockword::Own>,
    /// The node's members' lock words go to the engine (`osc_rdma_lock_words`).
    lock_words: bool,
    /// Accumulates to the node's members are applied here by CMA ([`crate::direct`],
    /// `osc_rdma_acc_direct`), to those whose object `pages` maps.
    acc_direct: bool,
    pages: Vec<Option<crate::lockword::Page>>,
    /// The host's arithmetic (elements Rust has no number for).
    host: Option<HostAccumulate>,
    /// A direct accumulate's target bytes, and its runs as addresses in the target's
    /// process (kept: no allocation per operation once warm).
    scratch: Vec<u8>,
    abs: Vec<(u64, usize)>,
    /// The operation issued last only queued RDMA transfers ([`OscModule::wants_pass`]).
    queued_only: bool,
    /// The engine refused a member's lock word on arrival: see [`RdmaModule::adopt_words`].
    words_refused: bool,
    /// Accumulates of one run to the node's members are posted in their slots for them to
    /// apply ([`crate::slot`]), claimed back after this many nanoseconds untaken
    /// (`osc_rdma_acc_slot_ns`; 0: never posted), and which targets to post to.
    slot_bound: u64,
    policy: crate::slot::Policy,
    /// The clock of the slots' waits, and the scratch of the requests this member serves.
    clock: std::time::Instant,
    slot_scratch: Vec<u8>,
    /// An accumulate was applied within its call (by slot, CMA or in place) since the last
    /// synchronization: the next one may finish without a progress pass (`quick`).
    applied: bool,
    /// Events of the accumulate paths and CMA transfers, for the profile (added to
    /// `counters` when the window is freed or dropped).
    counts: Counts,
    counters: rmca_framework::counters::CounterRegistry,
    reported: bool,
    /// Lent puts and gets to the members of this node move by CMA, issued here at the next
    /// synchronization or progress ([`crate::cma`], `osc_rdma_cma_direct`).
    cma: bool,
    /// Per member: its pid, when CMA reaches it (its object mapped: a member of this node).
    cma_pid: Vec<Option<u32>>,
    /// The transfers queued for CMA (kept: no allocation per operation once warm), and the
    /// number of the first operation among them.
    cma_q: Vec<crate::cma::Cma>,
    cma_first: u64,
    /// CMA system calls made (tests).
    cma_calls: u64,
    /// The synchronization started last moved queued transfers itself or took a lock
    /// granted at once: [`OscModule::sync_done_now`] may finish it.
    quick: bool,
    /// The host's way to queue lent puts and gets for CMA and flush them with no call in
    /// here ([`crate::cma::Lent`]; with `cma` only), whose flags [`RdmaModule::lent_flags`]
    /// sets after each synchronization.
    lent: Option<Rc<crate::cma::Lent>>,
    /// Per member: a passive-target epoch to it is open (`Lock`, `LockAll`), as the engine
    /// knows it; and a fence epoch is open (the engine's `fence_open`): the lent path's
    /// epoch checks, kept here so that they cost no error built per closed target.
    passive: Vec<bool>,
    fenced: bool,
    /// The synchronization in progress: its one target (`Some`), and for a fence whether
    /// another epoch follows; the lent path's flags are set anew for those once it finished.
    lent_sync: (Option<usize>, Option<bool>),
    /// Members `passive` has open, and whether an access epoch of `MPI_Win_start` is open
    /// (or starting): with neither nor a fence epoch, the lent path may lock
    /// ([`crate::cma::Lent::set_free`]).
    passive_open: usize,
    started: bool,
    /// Per member: the lock word held by a lock the lent path took and this module adopted
    /// ([`RdmaModule::adopt_fast`]), which the engine holds as a `nocheck` lock; given back
    /// once the unlock that ends it finished (`give_back`).
    word_held: Vec<Option<LockKind>>,
    give_back: Vec<(usize, LockKind)>,
    /// Every member heard from (no `Peer::Unknown` left: never one again).
    all_known: bool,
}

/// A window's events for the profile: plain fields (the module is used by one thread at a
/// time), added to the process's [`rmca_framework::counters::CounterRegistry`] once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Accumulates this origin posted in a target's slot ([`crate::slot`]).
    pub(crate) acc_slot_posted: u64,
    /// Requests other origins posted in this member's slots, applied here.
    pub(crate) acc_slot_served: u64,
    /// Posted requests the target did not take in time, claimed back (then applied by CMA).
    pub(crate) acc_slot_claimed_back: u64,
    /// Accumulates, fetch-and-ops and compare-and-swaps applied by this origin by CMA under
    /// the target's accumulate word ([`crate::direct`]).
    pub(crate) acc_cma: u64,
    /// Those to this process's own memory, applied in place.
    pub(crate) acc_self: u64,
    /// Lent puts and gets queued for CMA ([`crate::cma`]).
    pub(crate) cma_puts: u64,
    pub(crate) cma_gets: u64,
    /// Flushes the host finished on the lent path ([`crate::cma::Lent`]).
    pub(crate) lent_flushes: u64,
    /// Locks the host took on the lent path.
    pub(crate) lent_locks: u64,
    /// Puts the host's flush_local staged on the lent path.
    pub(crate) staged_puts: u64,
    /// Fences every member found quiet, ended by the host's collective with no message
    /// ([`OscModule::fence_agreed`]).
    pub(crate) fences_by_collective: u64,
    /// `MPI_Win_post`s and `MPI_Win_complete`s to members of this node carried by their
    /// counters ([`crate::lockword::Page::post`]) instead of messages.
    pub(crate) posts_by_counter: u64,
    pub(crate) completes_by_counter: u64,
}

impl Counts {
    /// The counts under their profile names (`osc.rdma.*`), with `cma_calls` system calls.
    fn named(&self, cma_calls: u64) -> [(&'static str, u64); 14] {
        [
            ("osc.rdma.acc_slot_posted", self.acc_slot_posted),
            ("osc.rdma.acc_slot_served", self.acc_slot_served),
            ("osc.rdma.acc_slot_claimed_back", self.acc_slot_claimed_back),
            ("osc.rdma.acc_cma", self.acc_cma),
            ("osc.rdma.acc_self", self.acc_self),
            ("osc.rdma.cma_puts", self.cma_puts),
            ("osc.rdma.cma_gets", self.cma_gets),
            ("osc.rdma.cma_calls", cma_calls),
            ("osc.rdma.lent_flushes", self.lent_flushes),
            ("osc.rdma.lent_locks", self.lent_locks),
            ("osc.rdma.staged_puts", self.staged_puts),
            ("osc.rdma.fences_by_collective", self.fences_by_collective),
            ("osc.rdma.posts_by_counter", self.posts_by_counter),
            ("osc.rdma.completes_by_counter", self.completes_by_counter),
        ]
    }
}

impl Drop for RdmaModule {
    fn drop(&mut self) {
        // A window the program never freed still counts.
        self.report_counts();
    }
}

impl std::fmt::Debug for RdmaModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaModule")
            .field("engine", &self.engine)
            .field("reg", &self.reg)
            .field("in_flight", &self.in_flight.len())
            .field("held", &self.track.held())
            .finish_non_exhaustive()
    }
}

impl RdmaModule {
    /// The module of a window over `memory` (a dynamic window's memory, attached later, is
    /// not registered: osc-am's messages carry all its traffic).
    pub fn new(config: WinConfig, memory: UserBuf) -> Self {
        Self::with_small_limit(config, memory, 0)
    }

    /// A module whose puts and gets of at most `small_limit` bytes travel as osc-am's
    /// messages: at small sizes a message costs less than an RDMA transfer and its completion
    /// (a CMA system call on shm).
    pub fn with_small_limit(config: WinConfig, memory: UserBuf, small_limit: u64) -> Self {
        let n = config.size();
        let me = config.rank;
        let host = config.host;
        let memory = if config.dynamic {
            UserBuf::empty()
        } else {
            memory
        };
        // (Used once `with_cma_direct` found CMA serves the window, dropped if not.)
        let lent =
            (!config.dynamic).then(|| Rc::new(crate::cma::Lent::new(&config.targets, small_limit)));
        Self {
            engine: Engine::new(
                config.rank,
                config.targets,
                (!config.dynamic).then_some(memory),
            )
            .with_host(config.host),
            memory,
            reg: Reg::Todo,
            peers: (0..n).map(|_| Peer::Unknown).collect(),
            track: Tracker::new(n),
            me,
            loopback: VecDeque::new(),
            todo: VecDeque::new(),
            in_flight: VecDeque::new(),
            ops: HashMap::default(),
            next_op: 0,
            deferred: None,
            freeing: false,
            freed: false,
            small_limit,
            min_run: 0,
            lock_word: None,
            lock_words: false,
            acc_direct: false,
            pages: (0..n).map(|_| None).collect(),
            host,
            scratch: Vec::new(),
            abs: Vec::new(),
            queued_only: false,
            words_refused: false,
            slot_bound: 0,
            policy: crate::slot::Policy::new(n, SLOT_SKIP),
            clock: std::time::Instant::now(),
            slot_scratch: Vec::new(),
            applied: false,
            counts: Counts::default(),
            counters: config.counters.clone(),
            reported: false,
            cma: false,
            cma_pid: vec![None; n],
            cma_q: Vec::new(),
            cma_first: 0,
            cma_calls: 0,
            quick: false,
            lent,
            passive: vec![false; n],
            fenced: false,
            lent_sync: (None, None),
            passive_open: 0,
            started: false,
            word_held: vec![None; n],
            give_back: Vec::new(),
            all_known: false,
        }
    }

    /// This module, moving its lent puts and gets to the members of this node itself by CMA
    /// ([`crate::cma`]), once their objects are mapped (as for
    /// [`RdmaModule::with_lock_words`]): at the next synchronization or progress, one system
    /// call per target and direction, with no BTL transfer to poll.
    pub fn with_cma_direct(mut self) -> Self {
        self.own_page();
        self.cma = self.lock_word.is_some();
        if !self.cma {
            self.lent = None;
        }
        // (Its own word, for the lent path's lock_all: with `with_lock_words` before.)
        self.lent_reach(self.me);
        self
    }

    /// Take over what the host queued on the lent path, behind this module's own queue.
    fn absorb_lent(&mut self) {
        let Some(l) = &self.lent else {
            return;
        };
        if self.cma_q.is_empty() {
            // (`poll_op`'s mark: the module's operations issued from now on are queued.)
            self.cma_first = self.next_op;
        }
        l.take_into(&mut self.cma_q);
    }

    /// Set the lent path's flags after a synchronization finished: a member may be
    /// accessed there when an epoch to it is open (passive or fence) and granted and CMA
    /// reaches it; flushed there when the epoch is passive and nothing this module sent it
    /// is unacknowledged; and the module is quiet when nothing of its own is queued, in
    /// flight, held or to send and no error waits. Only the synchronization's target when
    /// it had one.
    fn lent_flags(&mut self) {
        if self.lent.is_none() || !self.cma {
            return;
        }
        let (one, fence) = std::mem::take(&mut self.lent_sync);
        if let Some(succeed) = fence {
            self.fenced = succeed;
        }
        let closed = one.filter(|&t| !self.passive[t] && !self.fenced);
        let quiet = !self.freeing && !self.freed && self.deferred.is_none() && self.idle();
        // No epoch open and every message this module sent known applied: the path may
        // lock (the engine's own lock would be granted at once on the word, and its unlock
        // would send nothing). (The scan runs only once every epoch closed.)
        let free = quiet
            && self.passive_open == 0
            && !self.fenced
            && !self.started
            && (0..self.passive.len()).all(|t| self.engine.quiet(t));
        let Some(l) = &self.lent else {
            return;
        };
        l.set_free(free);
        if let Some(t) = closed {
            l.close(t);
            // Quiet again only with no epoch left open: another's flush flag, set at its
            // last synchronization, may be out of date (a message sent it since).
            l.set_quiet(quiet && self.passive_open == 0);
            return;
        }
        let targets = match one {
            Some(t) => t..t + 1,
            None => 0..self.passive.len(),
        };
        for t in targets {
            let epoch = (self.passive[t] || self.fenced) && !self.freed;
            let reach = match (self.cma_pid[t], &self.peers[t]) {
                (Some(pid), Peer::Rdma { base, .. }) if epoch && self.engine.granted(t) => {
                    Some((pid, *base))
                }
                _ => None,
            };
            l.set(t, reach, self.passive[t] && self.engine.quiet(t));
        }
        l.set_quiet(quiet);
    }

    /// Fold the lent path's counts into this module's.
    fn lent_counts(&mut self) {
        if let Some(l) = &self.lent {
            let [puts, gets, calls, flushes, locks, staged] = l.take_counts();
            self.counts.cma_puts += puts;
            self.counts.cma_gets += gets;
            self.counts.lent_flushes += flushes;
            self.counts.lent_locks += locks;
            self.counts.staged_puts += staged;
            self.cma_calls += calls;
        }
    }

    /// Adopt the locks the lent path took since this module's last call, as epochs of its
    /// own, before anything else it does (an operation's epoch check, a synchronization's
    /// conflicts): the engine holds each as a `nocheck` lock (granted, no word touched: the
    /// path holds the word), and the word goes back when the engine's unlock of it finished
    /// ([`OscModule::sync_done`]). One load when the path holds none.
    #[inline]
    fn adopt_fast(&mut self) {
        let Some(l) = &self.lent else {
            return;
        };
        if !l.holds() {
            return;
        }
        let l = l.clone();
        // A lock_all of the path: the engine holds it as a `nocheck` lock_all (granted, no
        // word touched), every word given back once its unlock_all finished.
        let all = l.holds_all()
            && match self.engine.sync(SyncCall::LockAll { nocheck: true }) {
                Ok(()) => {
                    self.set_passive(None, true);
                    true
                }
                Err(e) => {
                    // Never left held by nobody: the words go back, the epoch is lost.
                    tracing::error!("osc-rdma: a lock_all of the lent path not adopted: {e}");
                    l.take_held(|t, held| {
                        if let crate::cma::Held::Word(k) = held {
                            l.release_word(t, k);
                        }
                    });
                    return;
                }
            };
        l.take_held(|t, held| {
            let (kind, word) = match held {
                crate::cma::Held::Word(k) => (k, Some(k)),
                _ => (LockKind::Shared, None),
            };
            if all {
                self.word_held[t] = word;
                return;
            }
            // The path locks only while the engine has no epoch open and no synchronization
            // in progress, and every module call adopts first: the engine grants it.
            if let Err(e) = self.engine.sync(SyncCall::Lock {
                kind,
                target: t,
                nocheck: true,
            }) {
                // Never left held by nobody: the word goes back, the epoch is lost (logged).
                tracing::error!(
                    target = t,
                    "osc-rdma: a lock of the lent path not adopted: {e}"
                );
                if let Some(k) = word {
                    l.release_word(t, k);
                }
                return;
            }
            if !std::mem::replace(&mut self.passive[t], true) {
                self.passive_open += 1;
            }
            self.word_held[t] = word;
        });
    }

    /// Note that the passive epochs of `one` (`None`: every member) are `open` or closed.
    fn set_passive(&mut self, one: Option<usize>, open: bool) {
        match one {
            Some(t) => {
                if std::mem::replace(&mut self.passive[t], open) != open {
                    if open {
                        self.passive_open += 1;
                    } else {
                        self.passive_open -= 1;
                    }
                }
            }
            None => {
                self.passive.fill(open);
                self.passive_open = if open { self.passive.len() } else { 0 };
            }
        }
    }

    /// Tell the lent path that CMA and the lock word reach member `t`, once both its keys
    /// and its object are here and the engine takes its lock on that word.
    fn lent_reach(&mut self, t: usize) {
        let (Some(l), true) = (&self.lent, self.cma && self.lock_words) else {
            return;
        };
        if !self.engine.has_lock_word(t) {
            return;
        }
        if t == self.me {
            // Its own word: for the path's lock_all (no CMA to itself).
            if let Some(own) = &self.lock_word {
                l.reach_own(t, own.word());
            }
            return;
        }
        if let (Some(Some(pid)), Some(Peer::Rdma { base, .. }), Some(Some(page))) =
            (self.cma_pid.get(t), self.peers.get(t), self.pages.get(t))
        {
            l.reach(t, *pid, *base, page.lock_word());
        }
    }

    /// Queue a lent put or get (`view`, packed in the order of `runs`) at `addr` of `target`
    /// for [`RdmaModule::cma_flush`], when CMA reaches the target: its id (`None`: not
    /// taken, nothing queued).
    fn cma_queue(
        &mut self,
        target: usize,
        base: u64,
        addr: u64,
        runs: &[(i64, u64)],
        view: UserBuf,
        get: bool,
    ) -> Option<OpId> {
        if !self.cma {
            return None;
        }
        let pid = (*self.cma_pid.get(target)?)?;
        // Behind what the host queued on the lent path.
        self.absorb_lent();
        let num = self.next_op;
        self.next_op += 1;
        if get {
            self.counts.cma_gets += 1;
        } else {
            self.counts.cma_puts += 1;
        }
        if self.cma_q.is_empty() {
            self.cma_first = num;
        }
        let mut at = 0usize;
        for &(off, len) in runs.iter().filter(|r| r.1 > 0) {
            self.cma_q.push(crate::cma::Cma {
                op: RDMA_OP | num,
                peer: target,
                pid,
                view,
                at,
                len: len as usize,
                // In range: checked against the target's size before (so no overflow).
                raddr: base.wrapping_add(addr).wrapping_add(off as u64),
                get,
            });
            at += len as usize;
        }
        // Moved by the synchronization that completes it: no progress pass for it.
        self.queued_only = true;
        Some(RDMA_OP | num)
    }

    /// Move the transfers queued for CMA, one system call per target and direction (and
    /// [`crate::cma::BATCH`] pieces); how many. A failed call's error goes to the next
    /// synchronization, as a BTL transfer's does; a target CMA turns out not to reach (not
    /// permitted: nothing moved) has its transfers, these and the later ones, go by the
    /// BTLs.
    fn cma_flush(&mut self) -> usize {
        self.absorb_lent();
        if self.cma_q.is_empty() {
            return 0;
        }
        let mut q = std::mem::take(&mut self.cma_q);
        let mut start = 0;
        while start < q.len() {
            let end = crate::cma::batch_end(&q, start);
            let peer = q[start].peer;
            // (Refused earlier in this pass: no call.)
            let r = self.cma_pid[peer].map(|_| {
                self.cma_calls += 1;
                crate::cma::issue(&q[start..end])
            });
            let refused = match r {
                None => true,
                Some(Ok(())) => false,
                Some(Err(crate::cma::Failure::Failed(e))) => {
                    self.deferred.get_or_insert(OscError::Transport(format!(
                        "osc-rdma: a transfer by CMA to rank {peer} failed: {e}"
                    )));
                    // (The error is the next synchronization's, not the lent path's.)
                    if let Some(l) = &self.lent {
                        l.set_quiet(false);
                    }
                    false
                }
                Some(Err(crate::cma::Failure::Unreachable(e))) => {
                    tracing::debug!(
                        peer,
                        "osc-rdma: CMA does not reach the member ({e}): its puts and gets go by the BTLs"
                    );
                    self.cma_pid[peer] = None;
                    if let Some(l) = &self.lent {
                        l.unreach(peer);
                        l.set_quiet(false);
                    }
                    true
                }
            };
            if refused {
                for x in &q[start..end] {
                    self.cma_to_btl(x);
                }
            }
            start = end;
        }
        let n = q.len();
        q.clear();
        self.cma_q = q;
        n
    }

    /// Hand a transfer queued for CMA to the BTLs (queued as `put_lent`'s are, under its
    /// operation's id).
    fn cma_to_btl(&mut self, x: &crate::cma::Cma) {
        // (The lent path's pieces have no id: one each now.)
        let id = if x.op == crate::cma::NO_OP {
            self.next_op += 1;
            RDMA_OP | (self.next_op - 1)
        } else {
            x.op
        };
        let op = self.ops.entry(id).or_insert(Op {
            buf: Vec::new(),
            view: x.view,
            left: 0,
            get: x.get,
            lent: true,
            error: None,
        });
        op.left += 1;
        let seq = self.track.start(x.peer);
        self.todo.push_back(Xfer {
            op: id,
            peer: x.peer,
            seq,
            at: x.at,
            len: x.len,
            raddr: x.raddr,
            get: x.get,
        });
    }

    /// Nothing queued, in flight, held or to send, and every member heard from: a
    /// synchronization that finished needs no progress pass.
    fn settled(&mut self) -> bool {
        !(self.words_refused && self.words_adoptable()) && self.idle()
    }

    /// A lock word the engine refused could be handed to it now (`adopt_words`, in the
    /// progress pass): its member has no passive epoch open here. While one is open (a
    /// program that locks right after creating the window and flushes in that epoch: OSU's
    /// `-s flush`) the engine refuses it again, so a pass per flush would buy nothing.
    fn words_adoptable(&self) -> bool {
        self.pages
            .iter()
            .zip(&self.passive)
            .enumerate()
            .any(|(t, (p, &open))| p.is_some() && !open && !self.engine.has_lock_word(t))
    }

    /// [`RdmaModule::settled`] but for lock words the engine refused (taken by the
    /// progress after the lock epoch: `adopt_words`), which the lent path's flushes do not
    /// need.
    fn idle(&mut self) -> bool {
        if !self.all_known {
            self.all_known = !self.peers.iter().any(|p| matches!(p, Peer::Unknown));
        }
        self.reg != Reg::Todo
            && self.cma_q.is_empty()
            && self.lent.as_ref().is_none_or(|l| l.is_empty())
            && self.todo.is_empty()
            && self.in_flight.is_empty()
            && self.track.quiet()
            && self.loopback.is_empty()
            && self.engine.outbox().is_empty()
            && self.all_known
    }

    /// This module, with lock words ([`crate::lockword`]): its own made now, its node's
    /// members' mapped as their announcements arrive, so that a lock on a member of this
    /// node is an atomic instead of a round trip.
    pub fn with_lock_words(mut self) -> Self {
        self.own_page();
        if let Some(own) = &self.lock_word {
            self.engine.set_lock_word(self.me, Box::new(own.word()));
            self.lock_words = true;
        }
        self
    }

    /// This module, applying its accumulates, fetch-and-ops and compare-and-swaps to the
    /// members of this node itself ([`crate::direct`]), under their accumulate words, once
    /// their objects are mapped (as for [`RdmaModule::with_lock_words`]).
    pub fn with_acc_words(mut self) -> Self {
        self.own_page();
        self.acc_direct = self.lock_word.is_some();
        self
    }

    /// Make this member's object (lock and accumulate words), once; its engine holds the
    /// accumulate word while it applies the accumulates that come as messages.
    fn own_page(&mut self) {
        if self.lock_word.is_none() {
            if let Some(own) = crate::lockword::Own::create(self.pages.len()) {
                self.engine.set_acc_word(Box::new(own.acc_word()));
                self.lock_word = Some(own);
            }
        }
    }

    /// Can this process apply an accumulate to `target` itself now: a member of this node
    /// whose object it maps and whose memory RDMA reaches (its address known), its lock (if
    /// asked for by message) granted, and every message this process sent it known applied
    /// (so accumulates from here to there stay in order, `accumulate_ordering`, across the
    /// two paths; what goes as a message afterwards is applied after). The runs of `runs`
    /// at `addr`, as addresses in the target's process, are then in `self.abs`.
    /// This process itself qualifies likewise for an operation on one run: applied in place
    /// under its own word, no loopback message ([`RdmaModule::acc_here`]).
    fn direct_target(&mut self, target: usize, addr: u64, runs: &[(i64, u64)]) -> bool {
        if !self.acc_direct || !self.engine.granted(target) || !self.engine.quiet(target) {
            return false;
        }
        let base = if target == self.me {
            if self.memory.is_empty() || runs.iter().filter(|r| r.1 > 0).count() != 1 {
                return false;
            }
            self.memory.addr() as u64
        } else {
            if !self.pages.get(target).is_some_and(Option::is_some) {
                return false;
            }
            let Some(base) = self.rdma_base(target) else {
                return false;
            };
            base
        };
        self.abs.clear();
        // In range: checked against the target's size before (so no overflow either).
        let at = base.wrapping_add(addr);
        self.abs.extend(
            runs.iter()
                .filter(|r| r.1 > 0)
                .map(|&(off, len)| (at.wrapping_add(off as u64), len as usize)),
        );
        true
    }

    /// Apply an accumulate (checked) to `target` here ([`RdmaModule::direct_target`] said
    /// so, and filled `self.abs`), the previous contents into `old` when given: complete at
    /// the target. `None`: CMA does not reach the target (nothing written): messages serve
    /// it from now on, this operation included.
    fn acc_here(
        &mut self,
        target: usize,
        op: AccOp,
        elem: Elem,
        data: &[u8],
        mut old: Option<&mut [u8]>,
    ) -> Option<Result<(), OscError>> {
        if target == self.me {
            self.counts.acc_self += 1;
            let r = self.acc_self(op, elem, data, old);
            if r.is_ok() {
                self.mark_applied();
            }
            return Some(r);
        }
        if let [(at, len)] = self.abs[..] {
            let req = crate::slot::Request::Acc {
                off: at.wrapping_sub(self.rdma_base(target)?),
                len,
                op,
                elem,
                data,
                fetch: old.is_some(),
            };
            if let Some(r) = self.by_slot(target, &req, old.as_deref_mut()) {
                return Some(r);
            }
        }
        let page = self.pages.get(target)?.as_ref()?;
        let t = crate::direct::Target {
            pid: page.pid(),
            word: page.acc_word(),
        };
        self.counts.acc_cma += 1;
        let r = crate::direct::accumulate(
            t,
            &self.abs,
            op,
            elem,
            data,
            old,
            self.host,
            &mut self.scratch,
        );
        self.outcome(target, r)
    }

    /// A compare-and-swap (checked) of the element at `self.abs[0]` of `target`, as
    /// [`RdmaModule::acc_here`].
    fn cas_here(
        &mut self,
        target: usize,
        compare: &[u8],
        value: &[u8],
        old: &mut [u8],
    ) -> Option<Result<(), OscError>> {
        let &(at, _) = self.abs.first()?;
        // (Compared bit for bit: any element type of the size will do.)
        let elem = match old.len() {
            1 => Elem::U8,
            2 => Elem::U16,
            4 => Elem::U32,
            _ => Elem::U64,
        };
        if target == self.me {
            self.counts.acc_self += 1;
            let off = at.wrapping_sub(self.memory.addr() as u64) as usize;
            let (_, _, word) = self.lock_word.as_ref()?.slots();
            let r = crate::slot::cas_here(word, &mut self.memory, off, compare, value, old);
            if r.is_ok() {
                self.mark_applied();
            }
            return Some(r);
        }
        let req = crate::slot::Request::Cas {
            off: at.wrapping_sub(self.rdma_base(target)?),
            elem,
            compare,
            value,
        };
        if let Some(r) = self.by_slot(target, &req, Some(&mut *old)) {
            return Some(r);
        }
        let page = self.pages.get(target)?.as_ref()?;
        let t = crate::direct::Target {
            pid: page.pid(),
            word: page.acc_word(),
        };
        self.counts.acc_cma += 1;
        let r = crate::direct::compare_and_swap(t, at, compare, value, old);
        self.outcome(target, r)
    }

    /// An accumulate to this process's own memory, one run (`self.abs[0]`), in place under
    /// its own accumulate word.
    fn acc_self(
        &mut self,
        op: AccOp,
        elem: Elem,
        data: &[u8],
        old: Option<&mut [u8]>,
    ) -> Result<(), OscError> {
        let &[(at, len)] = &self.abs[..] else {
            return Err(OscError::Arg("accumulate: one run expected".into()));
        };
        let Some((_, _, word)) = self.lock_word.as_ref().map(crate::lockword::Own::slots) else {
            return Err(OscError::Arg("accumulate: no accumulate word".into()));
        };
        let off = at.wrapping_sub(self.memory.addr() as u64) as usize;
        crate::slot::acc_here(
            word,
            &mut self.memory,
            crate::slot::Here {
                off,
                len,
                op,
                elem,
                data,
                host: self.host,
            },
            old,
            &mut self.slot_scratch,
        )
    }

    /// Post `req` in this process's slot of `target` and wait for the target to apply it,
    /// serving this process's own slots meanwhile (the target may be waiting on one of its
    /// own): its outcome, the previous contents into `old`. `None`: not posted (no slots,
    /// or [`crate::slot::Policy`] skips the target), or claimed back once the bound passed:
    /// the caller applies it by CMA (the slot is free again).
    fn by_slot(
        &mut self,
        target: usize,
        req: &crate::slot::Request<'_>,
        old: Option<&mut [u8]>,
    ) -> Option<Result<(), OscError>> {
        use crate::slot::{self as slot, Step};
        let me = self.me;
        if self.slot_bound == 0 || !req.fits() {
            return None;
        }
        let mut wait;
        {
            let (cells, area) = self.pages.get(target)?.as_ref()?.slots();
            if me >= area.slots || !self.policy.post(target) {
                return None;
            }
            wait = slot::post(cells, area, me, req, self.now(), self.slot_bound);
        }
        self.counts.acc_slot_posted += 1;
        let mut spins = 0u32;
        loop {
            let (cells, area) = self.pages.get(target)?.as_ref()?.slots();
            let answer = slot::answer(cells, area, me);
            // The clock every 8th poll: the bound is microseconds, a poll tens of ns.
            let now = if spins.is_multiple_of(8) {
                self.now()
            } else {
                0
            };
            match wait.step(answer, now) {
                Step::Collect => {
                    let r = slot::collect(cells, area, me, answer, old);
                    if r.is_ok() {
                        self.mark_applied();
                    }
                    return Some(r);
                }
                Step::Reclaim => {
                    if slot::reclaim(cells, area, me, &wait) {
                        self.policy.reclaimed(target);
                        self.counts.acc_slot_claimed_back += 1;
                        return None;
                    }
                    // The target took it meanwhile: its answer comes.
                    wait = wait.taken();
                }
                Step::Broken => {
                    return Some(Err(OscError::Transport(format!(
                        "osc-rdma: rank {target}'s slot for this process was overwritten"
                    ))));
                }
                Step::Wait => {
                    if spins.is_multiple_of(8) {
                        // With the clock: the answer is what this loop waits for.
                        self.serve_slots();
                    }
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(4096) {
                        // Taken, and the target descheduled while it applies it.
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
        }
    }

    /// Apply the requests the node's origins posted in this member's slots.
    fn serve_slots(&mut self) -> usize {
        let Some(own) = &self.lock_word else {
            return 0;
        };
        let (cells, area, word) = own.slots();
        let n = crate::slot::serve(
            cells,
            area,
            word,
            &mut self.memory,
            self.host,
            &mut self.slot_scratch,
        );
        self.counts.acc_slot_served += n as u64;
        n
    }

    /// Add this window's counts to the process's registry, once (at the end of `Free`, or
    /// when dropped unfreed).
    fn report_counts(&mut self) {
        self.lent_counts();
        if !std::mem::replace(&mut self.reported, true) {
            self.counters.add(&self.counts.named(self.cma_calls));
        }
    }

    /// Nanoseconds since the module was made (the slots' waits).
    fn now(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }

    /// This module, posting accumulates of one run to the node's members in their slots for
    /// them to apply, claimed back after `bound` nanoseconds untaken ([`crate::slot`]; 0:
    /// never posted).
    pub fn with_acc_slots(mut self, bound: u64) -> Self {
        self.slot_bound = bound;
        self
    }

    /// A direct operation's outcome (see [`RdmaModule::acc_here`]).
    fn outcome(
        &mut self,
        target: usize,
        r: Result<(), crate::direct::Failure>,
    ) -> Option<Result<(), OscError>> {
        match r {
            Ok(()) => {
                self.mark_applied();
                Some(Ok(()))
            }
            Err(crate::direct::Failure::Op(e)) => Some(Err(e)),
            Err(crate::direct::Failure::Unreachable(e)) => {
                tracing::debug!(
                    target,
                    "osc-rdma: CMA does not reach the member ({e}): its accumulates go as messages"
                );
                self.pages[target] = None;
                None
            }
        }
    }

    /// Does the lent path hold a lock on member `target` this module has not adopted? The
    /// module then has no epoch open (the path locks only while it is free, and every other
    /// call of the module adopts first), so an operation it completes within its call may
    /// run in that epoch as it is, checked as the engine checks it but for the epoch (the
    /// path's lock is the epoch): the path's unlock then ends it with one atomic, where an
    /// adopted lock costs an engine lock and an engine unlock (OSU's `-s lock`: lock, one
    /// operation, unlock).
    fn lent_epoch(&self, target: usize) -> bool {
        target != self.me && self.lent.as_ref().is_some_and(|l| l.holds_lock(target))
    }

    /// An accumulate completed at its target within its call: the next synchronization may
    /// finish without a progress pass (`quick`), and the next flush on the lent path with
    /// nothing queued too ([`crate::cma::Lent::applied`]).
    fn mark_applied(&mut self) {
        self.applied = true;
        if let Some(l) = &self.lent {
            l.applied();
        }
    }

    /// The id of a direct operation that completed (its result, with `fetch`, kept for
    /// [`OscModule::poll_op`]).
    fn done_op(&mut self, result: Vec<u8>, fetch: bool) -> OpId {
        // Complete already, nothing to send: no progress pass for it (`wants_pass`).
        self.queued_only = true;
        self.new_op(result, UserBuf::empty(), 0, fetch, false)
    }

    /// [`RdmaModule::acc_here`] as an operation with an id.
    fn acc_direct(
        &mut self,
        target: usize,
        op: AccOp,
        elem: Elem,
        data: &[u8],
        fetch: bool,
    ) -> Option<Result<OpId, OscError>> {
        let len = self.abs.iter().map(|r| r.1).sum();
        let mut result = if fetch { vec![0u8; len] } else { Vec::new() };
        let r = self.acc_here(target, op, elem, data, fetch.then_some(&mut result[..]))?;
        Some(r.map(|()| self.done_op(result, fetch)))
    }

    /// This module, with puts and gets whose target runs average fewer than `min_run` bytes
    /// travelling as osc-am's messages: one BTL transfer per run costs a system call (CMA)
    /// or a work request each, where one message packs every run and the target unpacks
    /// them in one pass (a transposing put of 4-byte elements is a million runs).
    pub fn with_min_run(mut self, min_run: u64) -> Self {
        self.min_run = min_run;
        self
    }

    fn keys_message(reg: Option<(u64, &RdmaKeys)>) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = Writer::new(&mut out);
        w.u8(KEYS);
        match reg {
            Some((base, keys)) => {
                w.u8(1).u64(base).bytes(&keys.encode());
            }
            None => {
                w.u8(0);
            }
        }
        out
    }

    fn parse_keys(b: &[u8]) -> Option<Peer> {
        let mut r = Reader::new(b);
        if r.u8().ok()? != KEYS {
            return None;
        }
        match r.u8().ok()? {
            0 => Some(Peer::Messages),
            1 => {
                let base = r.u64().ok()?;
                Some(Peer::Rdma {
                    base,
                    keys: RdmaKeys::decode(r.rest())?,
                })
            }
            _ => None,
        }
    }

    /// Register this member's memory and tell every member (first progress).
    fn register(&mut self, port: &mut dyn OscPort) {
        let mut announce = None;
        if !self.memory.is_empty() {
            if let Some(rdma) = port.rdma() {
                match rdma.register(self.memory) {
                    Ok((h, keys)) if !keys.keys.is_empty() => {
                        self.reg = Reg::Held(h);
                        announce = Some(keys);
                    }
                    Ok((h, _)) => {
                        rdma.deregister(h);
                        tracing::debug!(
                            "osc-rdma: no BTL registered the window: messages serve it"
                        );
                    }
                    Err(e) => tracing::debug!(
                        "osc-rdma: registering the window failed ({e}): messages serve it"
                    ),
                }
            }
        }
        if self.reg == Reg::Todo {
            self.reg = Reg::None;
        }
        // The lock word first: a peer has it once it has the keys, which every epoch waits for.
        if let Some(own) = &self.lock_word {
            let m = own.announce().encode();
            for p in (0..self.peers.len()).filter(|&p| p != self.me) {
                if let Err(e) = port.send(p, m.clone()) {
                    tracing::warn!(peer = p, "osc-rdma: sending the lock word failed: {e}");
                }
            }
        }
        let msg = Self::keys_message(announce.as_ref().map(|k| (self.memory.addr() as u64, k)));
        for p in 0..self.peers.len() {
            if p == self.me {
                self.peers[p] = match &announce {
                    Some(keys) => Peer::Rdma {
                        base: self.memory.addr() as u64,
                        keys: keys.clone(),
                    },
                    None => Peer::Messages,
                };
                continue;
            }
            if let Err(e) = port.send(p, msg.clone()) {
                tracing::warn!(peer = p, "osc-rdma: sending the window's keys failed: {e}");
            }
        }
    }

    fn new_op(&mut self, buf: Vec<u8>, view: UserBuf, left: usize, get: bool, lent: bool) -> OpId {
        let id = RDMA_OP | self.next_op;
        self.next_op += 1;
        // A get's entry keeps its result until polled; a put's (and a lent get's) lives only
        // while a transfer reads (writes) its buffer.
        if left > 0 || (get && !lent) {
            self.ops.insert(
                id,
                Op {
                    buf,
                    view,
                    left,
                    get,
                    lent,
                    error: None,
                },
            );
        }
        id
    }

    /// Queue one transfer per run of `layout` for operation `id` (its buffer packed in
    /// layout order).
    fn queue(
        &mut self,
        id: OpId,
        target: usize,
        base: u64,
        addr: u64,
        runs: &[(i64, u64)],
        get: bool,
    ) {
        let mut at = 0usize;
        for &(off, len) in runs {
            if len == 0 {
                continue;
            }
            // In range: checked against the target's size before (so no overflow either).
            let raddr = base.wrapping_add(addr).wrapping_add(off as u64);
            let seq = self.track.start(target);
            self.todo.push_back(Xfer {
                op: id,
                peer: target,
                seq,
                at,
                len: len as usize,
                raddr,
                get,
            });
            at += len as usize;
        }
    }

    /// The target's address when RDMA reaches it.
    fn rdma_base(&self, target: usize) -> Option<u64> {
        match self.peers.get(target) {
            Some(Peer::Rdma { base, .. }) => Some(*base),
            _ => None,
        }
    }

    /// The target's address when this operation on `layout` goes by RDMA: the target is
    /// reached by RDMA, the operation is larger than `small_limit`, its runs average at
    /// least `min_run` bytes, and no lock request to the target waits for its grant. Behind a lock request not granted yet, a transfer
    /// would wait for the grant (a round trip) before it starts, and the unlock behind it
    /// (another): as a message, the operation follows the request and the target applies it
    /// once it grants the lock, so a lock, an operation and an unlock cost one round trip.
    /// (MPI does not order puts and gets to one location within an epoch, so the two paths
    /// may interleave; accumulates always go as messages, in order.)
    fn rdma_for(&self, target: usize, runs: &[(i64, u64)]) -> Option<u64> {
        let len = Layout::len_of(runs);
        if len <= self.small_limit || !self.engine.granted(target) {
            return None;
        }
        // (Counting the runs only when the mean could fall short: most layouts are one run.)
        if self.min_run > 0 && runs.len() > 1 {
            let runs = runs.iter().filter(|r| r.1 > 0).count() as u64;
            if len < self.min_run.saturating_mul(runs) {
                return None;
            }
        }
        self.rdma_base(target)
    }

    /// A transfer ended: account it to its operation.
    fn finished(&mut self, x: &Xfer, result: Result<(), OscError>) {
        self.track.finish(x.peer, x.seq);
        let Some(op) = self.ops.get_mut(&x.op) else {
            return;
        };
        op.left -= 1;
        let kept = op.get && !op.lent;
        if let Err(e) = result {
            if kept {
                op.error.get_or_insert(e);
            } else {
                self.deferred.get_or_insert(e);
            }
        }
        if op.left == 0 && !kept {
            // The put's data is no longer read by any BTL (the lent get's buffer written).
            self.ops.remove(&x.op);
        }
    }

    /// Queue puts by RDMA of `view` (the put's packed bytes) for a new operation.
    #[allow(clippy::too_many_arguments)]
    fn put_rdma(
        &mut self,
        target: usize,
        base: u64,
        addr: u64,
        runs: &[(i64, u64)],
        buf: Vec<u8>,
        view: UserBuf,
        lent: bool,
    ) -> OpId {
        let n = runs.iter().filter(|r| r.1 > 0).count();
        let id = self.new_op(buf, view, n, false, lent);
        self.queue(id, target, base, addr, runs, false);
        self.queued_only = true;
        id
    }

    /// Hand the engine the lock words it refused when they arrived, now that it takes them.
    /// It takes a member's word only while no lock on that member is held or asked for, and
    /// a program that locks right after creating the window (OSU's `-s lock`) asks before
    /// the announcement is read: without this, every epoch of the run would lock by message
    /// and move its puts and gets as messages behind the request.
    fn adopt_words(&mut self) {
        let mut refused = false;
        for (t, page) in self.pages.iter().enumerate() {
            if let (Some(p), false) = (page, self.engine.has_lock_word(t)) {
                self.engine.set_lock_word(t, Box::new(p.lock_word()));
                refused |= !self.engine.has_lock_word(t);
            }
        }
        self.words_refused = refused;
        for t in 0..self.pages.len() {
            self.lent_reach(t);
        }
    }

    /// Start the queued transfers and collect the completed ones.
    fn transfers(&mut self, port: &mut dyn OscPort) -> usize {
        let mut n = 0;
        // Transfers to a target whose lock request still waits for its grant (the engine
        // lets an epoch start before it) stay queued, in order: the target's memory is not
        // this process's to touch yet.
        let mut waiting = VecDeque::new();
        // The transfers started by this pass are not tested in it: a BTL reports a
        // completion in its own progress (shm's CMA copy is done, but reported there), so
        // the test would only fail, at a hash lookup in the PML each.
        let tested = self.in_flight.len();
        while let Some(x) = self.todo.pop_front() {
            if !self.engine.granted(x.peer) {
                waiting.push_back(x);
                continue;
            }
            // The keys are borrowed, not cloned: each transfer would otherwise copy the
            // target's key list (a Vec of names and Vecs).
            let keys = match self.peers.get(x.peer) {
                Some(Peer::Rdma { keys, .. }) => Some(keys),
                _ => None,
            };
            let local = self.ops.get(&x.op).map(|op| op.view.slice(x.at, x.len));
            // The transfers queued behind this one that continue it on both sides (OSU's
            // put_bw: 64 puts of `sbuf + j * size` to `disp + j * size`) go with it as one:
            // one system call (CMA) or work request for them all.
            let (local, joined) = match local {
                Some(l) => Self::joined(&self.todo, &self.ops, &x, l),
                None => (None, 0),
            };
            let started = match (local, keys, port.rdma()) {
                (Some(local), Some(keys), Some(rdma)) => {
                    if x.get {
                        rdma.get(x.peer, local, keys, x.raddr)
                    } else {
                        rdma.put(x.peer, local, keys, x.raddr)
                    }
                }
                _ => Err(OscError::Transport(format!(
                    "osc-rdma: no RDMA path to rank {} for a transfer",
                    x.peer
                ))),
            };
            n += 1;
            match started {
                Ok(token) => {
                    // Entries of one token complete together: see the tests below.
                    self.in_flight.push_back((token, x));
                    for _ in 0..joined {
                        if let Some(y) = self.todo.pop_front() {
                            self.in_flight.push_back((token, y));
                        }
                    }
                }
                Err(e) => {
                    self.finished(&x, Err(e.clone()));
                    for _ in 0..joined {
                        if let Some(y) = self.todo.pop_front() {
                            self.finished(&y, Err(e.clone()));
                        }
                    }
                }
            }
        }
        // (Appended: the queue keeps its allocation for the next operations.)
        self.todo.append(&mut waiting);
        if tested == 0 {
            return n;
        }
        let Some(rdma) = port.rdma() else {
            return n;
        };
        // In issue order, up to the first not finished: a BTL completes its transfers to a
        // peer in order as a rule (shm's CMA copies always), so testing the ones behind it
        // would cost a PML lookup each for nothing (64 puts before a flush, OSU's put_bw:
        // 2016 failed tests); an out-of-order completion is taken when the earlier one is.
        let mut left = tested;
        while left > 0 {
            let Some(&(token, _)) = self.in_flight.front() else {
                break;
            };
            let Some(r) = rdma.test(token) else {
                break;
            };
            // The transfer and those joined to it (the same token, next in the queue).
            while let Some((_, x)) = self.in_flight.pop_front_if(|e| e.0 == token) {
                n += 1;
                left = left.saturating_sub(1);
                self.finished(&x, r.clone());
            }
        }
        n
    }

    /// How many of the transfers at the front of `todo` continue `x` (whose local bytes
    /// are `local`) in both address spaces, with `local` grown over theirs.
    fn joined(
        todo: &VecDeque<Xfer>,
        ops: &HashMap<OpId, Op, BuildIntHasher>,
        x: &Xfer,
        mut local: UserBuf,
    ) -> (Option<UserBuf>, usize) {
        let mut joined = 0;
        let mut raddr = x.raddr.wrapping_add(x.len as u64);
        for y in todo {
            if y.peer != x.peer || y.get != x.get || y.raddr != raddr {
                break;
            }
            let Some(next) = ops.get(&y.op).map(|op| op.view.slice(y.at, y.len)) else {
                break;
            };
            let Some(both) = join(local, next) else {
                break;
            };
            local = both;
            raddr = raddr.wrapping_add(y.len as u64);
            joined += 1;
        }
        (Some(local), joined)
    }

    /// Carry the posts and completes the engine just queued to members of this node by
    /// their counters ([`Engine::send_counted`]): a complete only to a member no transfer
    /// of this process's is queued or in flight to (the CMA queue moved before: see
    /// `sync`), the others go as messages, behind the transfers. Then read this member's
    /// own counters. Whether the synchronization may finish within its call (this member
    /// maps objects, and nothing of it went as a message).
    /// Not when the job's waits sleep (`mpi_wait_mode block`, as `auto` picks on an
    /// oversubscribed node): a sleeping member wakes when a message rings its doorbell,
    /// and a counter rings none (its wait would last the sleep's timeout).
    fn pscw_counted(&mut self) -> bool {
        if rmca_framework::progress::wait_mode_blocks() {
            self.absorb_counts();
            return false;
        }
        let me = self.me;
        let (pages, track, todo, counts) = (&self.pages, &self.track, &self.todo, &mut self.counts);
        self.engine.send_counted(|peer, kind| {
            let behind_transfers = kind == Counted::Complete
                && (track.in_flight_to(peer) > 0 || todo.iter().any(|x| x.peer == peer));
            !behind_transfers && add_counted(pages, counts, me, peer, kind)
        });
        self.absorb_counts();
        self.lock_word.is_some() && self.engine.outbox().is_empty()
    }

    /// Add what this member's counters of posts and completes grew by to the engine's
    /// ([`Engine::absorb_counts`]), when its epochs wait for any.
    fn absorb_counts(&mut self) {
        if let Some(own) = &self.lock_word {
            if self.engine.counts_awaited() {
                self.engine
                    .absorb_counts(|t| own.posts(t), |o| own.completes(o));
            }
        }
    }

    /// Hand the engine's messages to the tracker.
    fn take_outbox(&mut self) -> usize {
        let mut n = 0;
        while let Some((peer, m)) = self.engine.outbox().pop_front() {
            // The second round of a fence waits for every transfer, and so does a quiet
            // fence, which ends the round when all are: see `track`.
            let order = if matches!(m, Msg::Fenced | Msg::FenceQuiet) {
                Order::All
            } else {
                Order::Peer
            };
            self.track.send(peer, m, order);
            n += 1;
        }
        n
    }

    fn release(&mut self, port: &mut dyn OscPort) -> usize {
        let (me, loopback) = (self.me, &mut self.loopback);
        let (engine, pages, counts) = (&self.engine, &self.pages, &mut self.counts);
        self.track.release(|peer, m| {
            if peer == me {
                loopback.push_back(m);
                return;
            }
            // A complete that waited for this process's transfers to a member of the node
            // goes by its counter, as `pscw_counted`'s do, when no message to it is still
            // unapplied.
            if matches!(m, Msg::Complete)
                && engine.quiet(peer)
                && !rmca_framework::progress::wait_mode_blocks()
                && add_counted(pages, counts, me, peer, Counted::Complete)
            {
                return;
            }
            if let Err(e) = port.send(peer, m.into_bytes()) {
                // The PML reports a dead peer through its requests; nothing to retry here.
                tracing::warn!(peer, "osc-rdma: send failed: {e}");
            }
        })
    }
}

/// `a` and `b` as one buffer, when `b` starts where `a` ends (a get's only when both are
/// writable).
#[allow(unsafe_code)]
fn join(a: UserBuf, b: UserBuf) -> Option<UserBuf> {
    if a.addr().checked_add(a.len())? != b.addr() || a.is_writable() != b.is_writable() {
        return None;
    }
    let len = a.len().checked_add(b.len())?;
    // SAFETY: every byte of the range is a byte of `a` or of `b`, each valid (and writable,
    // when both are) for as long as its operation lives, which is as long as the transfer
    // that moves the joined range (its entries complete together, `transfers`). The range
    // may span two of the program's allocations: it is only handed to the BTLs, which copy
    // it by address (a system call, a DMA), never read it as one Rust slice.
    Some(unsafe {
        if a.is_writable() {
            UserBuf::from_raw_parts_mut(a.as_ptr(), len)
        } else {
            UserBuf::from_raw_parts(a.as_ptr(), len)
        }
    })
}

/// A put's origin bytes must fill its target runs exactly.
fn check_put_len(origin: usize, runs: &[(i64, u64)]) -> Result<(), OscError> {
    let target = Layout::len_of(runs);
    if origin as u64 != target {
        return Err(OscError::Arg(format!(
            "put: {origin} origin bytes for {target} target bytes"
        )));
    }
    Ok(())
}

/// Add one to `peer`'s counter of `kind` by window rank `me` in `peer`'s shared object, and
/// count it: false, nothing done, when this process maps no object of `peer`'s or `me` has
/// no counter there (above [`crate::lockword::PSCW_MAX`]).
fn add_counted(
    pages: &[Option<crate::lockword::Page>],
    counts: &mut Counts,
    me: usize,
    peer: usize,
    kind: Counted,
) -> bool {
    let Some(page) = pages.get(peer).and_then(Option::as_ref) else {
        return false;
    };
    let (cell, n) = match kind {
        Counted::Post => (page.post(me), &mut counts.posts_by_counter),
        Counted::Complete => (page.complete(me), &mut counts.completes_by_counter),
    };
    let Some(cell) = cell else {
        return false;
    };
    // (Release: this process's stores, and its transfers to the member completed before,
    // are seen by the member once it reads the count.)
    cell.fetch_add(1, std::sync::atomic::Ordering::Release);
    *n += 1;
    true
}

impl OscModule for RdmaModule {
    fn component_name(&self) -> &'static str {
        "rdma"
    }

    #[allow(unsafe_code)]
    fn put(
        &mut self,
        target: usize,
        addr: u64,
        layout: &Layout,
        data: Vec<u8>,
    ) -> Result<OpId, OscError> {
        self.adopt_fast();
        self.engine.check_access(target, addr, &layout.runs)?;
        check_put_len(data.len(), &layout.runs)?;
        let rdma = self.rdma_for(target, &layout.runs);
        let Some(base) = rdma else {
            return self.engine.put(target, addr, layout, data);
        };
        // SAFETY: the Vec moves into the operation's entry, which is dropped only once no
        // transfer reads it (`finished`); moving a Vec does not move its heap block.
        let view = unsafe { UserBuf::from_slice(&data) };
        Ok(self.put_rdma(target, base, addr, &layout.runs, data, view, false))
    }

    fn put_lent(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        data: UserBuf,
    ) -> Result<OpId, OscError> {
        self.adopt_fast();
        self.engine.check_access(target, addr, runs)?;
        check_put_len(data.len(), runs)?;
        match self.rdma_for(target, runs) {
            // The transfers read the program's buffer, which MPI leaves untouched until the
            // operation completes locally: `poll_op` and every synchronization wait for them.
            Some(base) => Ok(
                match self.cma_queue(target, base, addr, runs, data, false) {
                    Some(id) => id,
                    None => self.put_rdma(target, base, addr, runs, Vec::new(), data, true),
                },
            ),
            // Copied into the message at once.
            None => self.engine.put_from(target, addr, runs, data.as_slice()),
        }
    }

    #[allow(unsafe_code)]
    fn get(&mut self, target: usize, addr: u64, layout: &Layout) -> Result<OpId, OscError> {
        self.adopt_fast();
        self.engine.check_access(target, addr, &layout.runs)?;
        let rdma = self.rdma_for(target, &layout.runs);
        let Some(base) = rdma else {
            return self.engine.get(target, addr, layout);
        };
        let len = usize::try_from(layout.len())
            .map_err(|_| OscError::Arg("get: the layout is too large for memory".into()))?;
        let mut buf = vec![0u8; len];
        // SAFETY: as for put: the result buffer lives in the operation's entry until every
        // transfer into it completed and the result was taken.
        let view = unsafe { UserBuf::from_mut_slice(&mut buf) };
        let runs = layout.runs.iter().filter(|r| r.1 > 0).count();
        let id = self.new_op(buf, view, runs, true, false);
        self.queue(id, target, base, addr, &layout.runs, true);
        self.queued_only = true;
        Ok(id)
    }

    fn accumulate(
        &mut self,
        target: usize,
        addr: u64,
        layout: &Layout,
        op: AccOp,
        elem: Elem,
        data: Vec<u8>,
        fetch: bool,
    ) -> Result<OpId, OscError> {
        // (A lock the lent path took counts for the epoch check.)
        self.adopt_fast();
        self.engine
            .check_accumulate(target, addr, &layout.runs, op, elem, data.len())?;
        if self.direct_target(target, addr, &layout.runs) {
            if let Some(r) = self.acc_direct(target, op, elem, &data, fetch) {
                return r;
            }
        }
        self.engine
            .accumulate(target, addr, layout, op, elem, data, fetch)
    }

    fn get_lent(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        into: UserBuf,
    ) -> Option<Result<OpId, OscError>> {
        self.adopt_fast();
        if let Err(e) = self.engine.check_access(target, addr, runs) {
            return Some(Err(e));
        }
        if into.len() as u64 != Layout::len_of(runs) || !into.is_writable() {
            return Some(Err(OscError::Arg(format!(
                "get: a buffer of {} bytes for {} target bytes",
                into.len(),
                Layout::len_of(runs)
            ))));
        }
        // By message, the result comes back in a reply: `get` keeps it for the caller.
        let base = self.rdma_for(target, runs)?;
        if let Some(id) = self.cma_queue(target, base, addr, runs, into, true) {
            return Some(Ok(id));
        }
        let n = runs.iter().filter(|r| r.1 > 0).count();
        let id = self.new_op(Vec::new(), into, n, true, true);
        self.queue(id, target, base, addr, runs, true);
        self.queued_only = true;
        Some(Ok(id))
    }

    fn accumulate_from(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        op: AccOp,
        elem: Elem,
        data: &[u8],
        fetch: bool,
    ) -> Result<OpId, OscError> {
        // (A lock the lent path took counts for the epoch check.)
        self.adopt_fast();
        self.engine
            .check_accumulate(target, addr, runs, op, elem, data.len())?;
        if self.direct_target(target, addr, runs) {
            if let Some(r) = self.acc_direct(target, op, elem, data, fetch) {
                return r;
            }
        }
        self.engine
            .accumulate_from(target, addr, runs, op, elem, data, fetch)
    }

    fn compare_and_swap(
        &mut self,
        target: usize,
        addr: u64,
        elem: Elem,
        compare: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<OpId, OscError> {
        // (A lock the lent path took counts for the epoch check.)
        self.adopt_fast();
        self.engine
            .check_cas(target, addr, elem, &compare, &value)?;
        if self.direct_target(target, addr, &[(0, elem.size() as u64)]) {
            let mut old = vec![0u8; elem.size()];
            if let Some(r) = self.cas_here(target, &compare, &value, &mut old) {
                return r.map(|()| self.done_op(old, true));
            }
        }
        self.engine
            .compare_and_swap(target, addr, elem, compare, value)
    }

    fn accumulate_at_once(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        op: AccOp,
        elem: Elem,
        data: &[u8],
        mut old: Option<&mut [u8]>,
    ) -> Option<Result<(), OscError>> {
        // In the lent path's epoch, not adopted (`lent_epoch`); what the checks or the direct
        // path do not take goes the general way below.
        if self.lent_epoch(target)
            && self
                .engine
                .check_accumulate_operands(target, addr, runs, op, elem, data.len())
                .is_ok()
            && old
                .as_ref()
                .is_none_or(|o| o.len() as u64 == Layout::len_of(runs))
            && self.direct_target(target, addr, runs)
        {
            if let Some(r) = self.acc_here(target, op, elem, data, old.as_deref_mut()) {
                return Some(r);
            }
        }
        // (A lock the lent path took counts for the epoch check.)
        self.adopt_fast();
        if let Err(e) = self
            .engine
            .check_accumulate(target, addr, runs, op, elem, data.len())
        {
            return Some(Err(e));
        }
        if old
            .as_ref()
            .is_some_and(|o| o.len() as u64 != Layout::len_of(runs))
        {
            return Some(Err(OscError::Arg(format!(
                "accumulate: a result of {} bytes for {} target bytes",
                old.map_or(0, |o| o.len()),
                Layout::len_of(runs)
            ))));
        }
        if !self.direct_target(target, addr, runs) {
            return None;
        }
        self.acc_here(target, op, elem, data, old)
    }

    fn compare_and_swap_at_once(
        &mut self,
        target: usize,
        addr: u64,
        elem: Elem,
        compare: &[u8],
        value: &[u8],
        old: &mut [u8],
    ) -> Option<Result<(), OscError>> {
        // In the lent path's epoch, as `accumulate_at_once`.
        if self.lent_epoch(target)
            && old.len() == elem.size()
            && self
                .engine
                .check_cas_operands(target, addr, elem, compare, value)
                .is_ok()
            && self.direct_target(target, addr, &[(0, elem.size() as u64)])
        {
            if let Some(r) = self.cas_here(target, compare, value, old) {
                return Some(r);
            }
        }
        // (A lock the lent path took counts for the epoch check.)
        self.adopt_fast();
        if let Err(e) = self.engine.check_cas(target, addr, elem, compare, value) {
            return Some(Err(e));
        }
        if old.len() != elem.size() {
            return Some(Err(OscError::Arg(
                "compare_and_swap: a result of one element".into(),
            )));
        }
        if !self.direct_target(target, addr, &[(0, elem.size() as u64)]) {
            return None;
        }
        self.cas_here(target, compare, value, old)
    }

    fn poll_op(&mut self, id: OpId) -> Option<Result<Vec<u8>, OscError>> {
        if id & RDMA_OP == 0 {
            return self.engine.poll_op(id);
        }
        match self.ops.get(&id) {
            // A put is complete at the origin once issued (its data was copied), a lent one
            // once its transfers are (its entry goes with the last).
            Some(op) if op.lent => None,
            Some(op) if !op.get => Some(Ok(Vec::new())),
            Some(op) if op.left > 0 => None,
            Some(_) => {
                let op = self.ops.remove(&id)?;
                Some(match op.error {
                    Some(e) => Err(e),
                    None => Ok(op.buf),
                })
            }
            // Queued for CMA (or issued after the first that is: complete either way once
            // the queue moved, at the next progress).
            None if !self.cma_q.is_empty() && (id & !RDMA_OP) >= self.cma_first => None,
            None if id & !RDMA_OP < self.next_op => Some(Ok(Vec::new())),
            None => Some(Err(OscError::Arg(format!("unknown operation {id}")))),
        }
    }

    fn sync(&mut self, call: SyncCall) -> Result<(), OscError> {
        self.adopt_fast();
        // A flush_local of a member CMA reaches that has operations of the epoch sent as
        // messages unacknowledged (issued before its keys were known) is a flush: only the
        // member's acknowledgement makes it quiet again, and then the lent path takes the
        // epoch's flushes (after flush_locals alone it never would: OSU's `-s flush_local`).
        let call = match call {
            SyncCall::FlushLocal(Some(t))
                if self.lent.is_some()
                    && self.cma_pid.get(t).is_some_and(Option::is_some)
                    && !self.engine.quiet(t) =>
            {
                SyncCall::Flush(Some(t))
            }
            c => c,
        };
        let free = call == SyncCall::Free;
        let lock = matches!(call, SyncCall::Lock { .. } | SyncCall::LockAll { .. });
        // The lent path waits for this synchronization's end (`lent_flags`), and the epochs
        // it opens or closes are noted for it once the engine took the call: its one
        // target, the passive epochs it opens (true) or closes, and the fence epoch (the
        // engine's ends with any other epoch's start).
        if let Some(l) = &self.lent {
            l.set_quiet(false);
        }
        let (one, passive, fence) = match &call {
            SyncCall::Lock { target, .. } => (Some(*target), Some(true), Some(false)),
            SyncCall::Unlock(t) => (Some(*t), Some(false), None),
            SyncCall::Flush(Some(t)) | SyncCall::FlushLocal(Some(t)) => (Some(*t), None, None),
            SyncCall::LockAll { .. } => (None, Some(true), Some(false)),
            SyncCall::UnlockAll => (None, Some(false), None),
            SyncCall::Fence { succeed } => (None, None, Some(*succeed)),
            SyncCall::Start(_) => (None, None, Some(false)),
            _ => (None, None, None),
        };
        // The transfers queued for CMA move now, complete before any message of the
        // synchronization is made (a flush or an unlock then has nothing to wait for).
        let moved = self.cma_flush() > 0;
        // (Accumulates applied within their calls since the last synchronization: complete
        // at their targets already, as the moved transfers are.)
        let applied = std::mem::take(&mut self.applied);
        self.quick = false;
        let start = match &call {
            SyncCall::Start(_) => Some(true),
            SyncCall::Complete => Some(false),
            _ => None,
        };
        let unlock = match &call {
            SyncCall::Unlock(t) => Some(*t),
            _ => None,
        };
        let unlock_all = call == SyncCall::UnlockAll;
        let pscw = matches!(
            call,
            SyncCall::Post(_) | SyncCall::Start(_) | SyncCall::Complete | SyncCall::Wait
        );
        if let Err(e) = self.engine.sync(call) {
            // Refused, nothing changed: the lent path's flags as they were (the queue moved).
            self.lent_sync = (None, None);
            self.lent_flags();
            return Err(e);
        }
        if let Some(open) = passive {
            self.set_passive(one, open);
        }
        if let Some(s) = start {
            self.started = s;
        }
        // A lock the lent path took: its word goes back once the engine's unlock finished
        // (a lock_all's: every word, at its unlock_all's end).
        if let Some(t) = unlock {
            if let Some(kind) = self.word_held[t].take() {
                self.give_back.push((t, kind));
            }
        }
        if unlock_all {
            for (t, held) in self.word_held.iter_mut().enumerate() {
                if let Some(kind) = held.take() {
                    self.give_back.push((t, kind));
                }
            }
        }
        if fence == Some(false) {
            // (Closed now: the engine closed it in this call.)
            self.fenced = false;
        }
        self.lent_sync = (one, fence);
        self.freeing = free;
        // Post and complete by the node's counters, start and wait seeing them: finished
        // within the call when nothing went as a message and nothing is awaited.
        let counted = pscw && self.pscw_counted();
        self.quick = moved || lock || applied || counted;
        Ok(())
    }

    fn fence_by_collective(&self) -> bool {
        true
    }

    fn fence_ready(&mut self) -> Option<Result<bool, OscError>> {
        self.adopt_fast();
        match self.engine.fence_quiet() {
            Err(e) => return Some(Err(e)),
            // Operations went as messages: the engine's rounds apply them (no wait here).
            Ok(false) => return Some(Ok(true)),
            Ok(true) => {}
        }
        // This member's transfers of the epoch complete (CMA's now, within the call; the
        // BTLs' over the host's passes), as a flush of every target would: its
        // accumulates by slot or by CMA completed within their calls.
        self.cma_flush();
        if !self.idle() {
            return None;
        }
        Some(Ok(false))
    }

    fn fence_agreed(&mut self, succeed: bool) -> Result<(), OscError> {
        self.engine.fence_agreed(succeed)?;
        self.counts.fences_by_collective += 1;
        self.quick = false;
        self.applied = false;
        self.lent_sync = (None, Some(succeed));
        let r = match self.deferred.take() {
            Some(e) => Err(e),
            None => Ok(()),
        };
        self.lent_flags();
        r
    }

    fn sync_done_now(&mut self) -> Option<Result<(), OscError>> {
        // Only a synchronization that moved this process's own transfers or took a lock: a
        // flush with nothing to do is how a program polls its window, whose progress pass
        // it needs (the others' messages reach this process's memory through it).
        if !std::mem::take(&mut self.quick) || self.freeing || !self.settled() {
            return None;
        }
        self.sync_done()
    }

    fn sync_done(&mut self) -> Option<Result<(), OscError>> {
        // Every member's keys first (every epoch starts with a synchronization, so no
        // operation is issued before them), and the transfers and held messages of the
        // epoch: flush, unlock, complete and fence cover the RDMA as well as the messages.
        if self.peers.iter().any(|p| matches!(p, Peer::Unknown))
            || !self.cma_q.is_empty()
            || !self.todo.is_empty()
            || !self.track.quiet()
        {
            return None;
        }
        self.absorb_counts();
        let r = self.engine.sync_done()?;
        // (Every operation of those epochs is complete at the target.)
        if let Some(l) = &self.lent {
            for (t, kind) in self.give_back.drain(..) {
                l.release_word(t, kind);
            }
        }
        if std::mem::take(&mut self.freeing) {
            self.freed = true;
            self.report_counts();
        }
        let r = match (r, self.deferred.take()) {
            (Err(e), _) | (Ok(()), Some(e)) => Err(e),
            (Ok(()), None) => Ok(()),
        };
        self.lent_flags();
        Some(r)
    }

    fn exposure_complete(&self) -> bool {
        self.engine.exposure_complete()
    }

    fn progress(&mut self, port: &mut dyn OscPort) -> usize {
        let mut n = self.serve_slots();
        if self.reg == Reg::Todo {
            self.register(port);
            n += 1;
        }
        // Before any message leaves: they follow the transfers issued before them.
        n += self.cma_flush();
        n += self.transfers(port);
        n += self.take_outbox();
        while let Some((from, bytes)) = port.recv() {
            n += 1;
            if bytes.first() == Some(&KEYS) {
                if let Some(slot) = self.peers.get_mut(from) {
                    // Unreadable keys: osc-am's messages still reach the peer, and the
                    // synchronizations waiting for its keys (`sync_done`) do not hang.
                    *slot = Self::parse_keys(&bytes).unwrap_or_else(|| {
                        tracing::warn!(
                            from,
                            "osc-rdma: malformed keys message: messages serve the peer"
                        );
                        Peer::Messages
                    });
                }
                self.lent_reach(from);
                continue;
            }
            if bytes.first() == Some(&crate::lockword::KIND) {
                // Mapped only where this member uses words (its own exists) and the peer's
                // is of this node; messages serve the others.
                let page = crate::lockword::Announce::decode(&bytes)
                    .filter(|_| self.lock_word.is_some())
                    .and_then(|a| crate::lockword::open(&a));
                if let Some(p) = page {
                    if self.lock_words {
                        self.engine.set_lock_word(from, Box::new(p.lock_word()));
                        self.words_refused |= !self.engine.has_lock_word(from);
                    }
                    if let Some(slot) = self.cma_pid.get_mut(from) {
                        *slot = Some(p.pid());
                    }
                    if let Some(slot) = self.pages.get_mut(from) {
                        *slot = Some(p);
                    }
                    self.lent_reach(from);
                }
                continue;
            }
            match Msg::decode_vec(bytes) {
                Some(m) => self.engine.handle(from, m),
                None => tracing::warn!(from, "osc-rdma: malformed message dropped"),
            }
            n += self.take_outbox();
        }
        // Posts and completes of the node's members by counter.
        self.absorb_counts();
        // (Not while every refused word's member has an epoch open: refused again.)
        if self.words_refused && self.words_adoptable() {
            self.adopt_words();
        }
        // Lock requests by message waiting for this member's word (held on the node).
        if self.engine.poll_locks() {
            n += 1 + self.take_outbox();
        }
        if !self.todo.is_empty() {
            // A grant that just arrived releases the transfers waiting for it.
            n += self.transfers(port);
        }
        n += self.release(port);
        // Messages to itself, and what they make (a grant, an ack) until none is left.
        while let Some(m) = self.loopback.pop_front() {
            n += 1;
            self.engine.handle(self.me, m);
            n += self.take_outbox();
            n += self.release(port);
        }
        if self.freed {
            if let Reg::Held(h) = self.reg {
                // Every member's Free arrived after its transfers to this memory completed.
                if let Some(rdma) = port.rdma() {
                    rdma.deregister(h);
                }
                self.reg = Reg::None;
            }
        }
        // The slots once more at the end: a request that came during the pass waits for
        // the next poll, and the rest of the runtime's pass (the PML's, a collective's wait)
        // lies between this one and the next pass's first (a load per slot when none came).
        n + self.serve_slots()
    }

    fn wants_pass(&mut self) -> bool {
        // (Called after every operation of the module's own: the lent path's flushes wait
        // for the synchronization that completes it.)
        if let Some(l) = &self.lent {
            l.set_quiet(false);
        }
        // Transfers wait for the next progress (the synchronization's first, at the
        // latest): started together there, adjacent ones as one (`transfers`), and no pass
        // per operation. Anything to send (a message operation, one behind a lock request)
        // goes at once.
        !std::mem::take(&mut self.queued_only)
            || !self.engine.outbox().is_empty()
            || self.track.held() > 0
            || !self.loopback.is_empty()
    }

    fn attach(&mut self, region: UserBuf) -> Result<(), OscError> {
        self.engine.attach(region.addr() as u64, region)
    }

    fn lent_path(&self) -> Option<Rc<dyn LentPath>> {
        // (Not without CMA from here, `osc_rdma_cma_direct`: its flags stay down then.)
        self.lent
            .clone()
            .filter(|_| self.cma)
            .map(|l| l as Rc<dyn LentPath>)
    }

    fn detach(&mut self, addr: u64) -> Result<(), OscError> {
        self.engine.detach(addr)
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    //! Modules over a simulated network and simulated RDMA whose transfers complete only when
    //! the test says so (as a real BTL's may, much later than they were issued).
    use super::*;
    use rmca_framework::osc::{LockKind, OscRdma, TargetInfo};

    struct Xf {
        token: RdmaToken,
        local: UserBuf,
        raddr: u64,
        get: bool,
        done: bool,
    }

    #[derive(Default)]
    struct World {
        /// Messages in flight per (from, to), in order.
        queues: HashMap<(usize, usize), VecDeque<Vec<u8>>>,
        xfers: Vec<Xf>,
        next: u64,
        /// Messages sent, as (from, to, kind byte), in order.
        log: Vec<(usize, usize, u8)>,
    }

    impl World {
        /// Complete every transfer issued: copy its bytes now.
        fn complete_all(&mut self) {
            for x in self.xfers.iter_mut().filter(|x| !x.done) {
                let remote = x.raddr as usize as *mut u8;
                // SAFETY: `raddr` lies in a test member's memory (the module checked the range
                // against its size) and `local` in an operation's buffer, both alive.
                unsafe {
                    if x.get {
                        std::ptr::copy(remote, x.local.as_ptr(), x.local.len());
                    } else {
                        std::ptr::copy(x.local.as_ptr(), remote, x.local.len());
                    }
                }
                x.done = true;
            }
        }
    }

    struct Port<'a> {
        w: &'a mut World,
        me: usize,
    }

    impl OscPort for Port<'_> {
        fn send(&mut self, peer: usize, msg: Vec<u8>) -> Result<(), OscError> {
            self.w.log.push((self.me, peer, msg[0]));
            self.w
                .queues
                .entry((self.me, peer))
                .or_default()
                .push_back(msg);
            Ok(())
        }

        fn recv(&mut self) -> Option<(usize, Vec<u8>)> {
            let me = self.me;
            let from =
                (0..8).find(|&f| self.w.queues.get(&(f, me)).is_some_and(|q| !q.is_empty()))?;
            let m = self.w.queues.get_mut(&(from, me))?.pop_front()?;
            Some((from, m))
        }

        fn rdma(&mut self) -> Option<&mut dyn OscRdma> {
            Some(self)
        }
    }

    impl OscRdma for Port<'_> {
        fn register(&mut self, _mem: UserBuf) -> Result<(u64, RdmaKeys), OscError> {
            Ok((
                7,
                RdmaKeys {
                    keys: vec![("sim".into(), vec![1, 2])],
                },
            ))
        }

        fn deregister(&mut self, _handle: u64) {}

        fn put(
            &mut self,
            _peer: usize,
            local: UserBuf,
            keys: &RdmaKeys,
            addr: u64,
        ) -> Result<RdmaToken, OscError> {
            assert_eq!(keys.keys[0].0, "sim");
            self.w.next += 1;
            self.w.xfers.push(Xf {
                token: self.w.next,
                local,
                raddr: addr,
                get: false,
                done: false,
            });
            Ok(self.w.next)
        }

        fn get(
            &mut self,
            peer: usize,
            local: UserBuf,
            keys: &RdmaKeys,
            addr: u64,
        ) -> Result<RdmaToken, OscError> {
            let t = self.put(peer, local, keys, addr)?;
            self.w.xfers.last_mut().expect("just pushed").get = true;
            Ok(t)
        }

        fn test(&mut self, token: RdmaToken) -> Option<Result<(), OscError>> {
            let i = self.w.xfers.iter().position(|x| x.token == token)?;
            self.w.xfers[i].done.then(|| {
                self.w.xfers.remove(i);
                Ok(())
            })
        }
    }

    struct Sim {
        w: World,
        m: Vec<RdmaModule>,
        /// The members' memories (their heap blocks never move).
        mem: Vec<Vec<u8>>,
    }

    impl Sim {
        fn new(n: usize, bytes: usize) -> Self {
            Self::build(n, bytes, |_| false)
        }

        /// Members `r` with `words(r)` make and map lock words (all in this process, so
        /// all of one node: each maps the others' through /proc/self/fd).
        fn build(n: usize, bytes: usize, words: impl Fn(usize) -> bool) -> Self {
            Self::build_acc(n, bytes, words, |_| false)
        }

        /// As `build`, members `r` with `acc(r)` applying their accumulates to the others
        /// themselves ([`RdmaModule::with_acc_words`]; by CMA into this process).
        fn build_acc(
            n: usize,
            bytes: usize,
            words: impl Fn(usize) -> bool,
            acc: impl Fn(usize) -> bool,
        ) -> Self {
            let mut s = Self::unstarted(n, bytes, words, acc);
            s.run();
            s
        }

        /// As `build_acc`, before any progress: nobody has read anybody's keys or words.
        fn unstarted(
            n: usize,
            bytes: usize,
            words: impl Fn(usize) -> bool,
            acc: impl Fn(usize) -> bool,
        ) -> Self {
            let mut mem: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; bytes]).collect();
            let targets = vec![
                TargetInfo {
                    size: bytes as u64,
                    disp_unit: 1,
                };
                n
            ];
            let m = (0..n)
                .map(|r| {
                    let config = WinConfig {
                        rank: r,
                        targets: targets.clone(),
                        same_node: true,
                        dynamic: false,
                        no_locks: false,
                        allocated: false,
                        shared: false,
                        host: None,
                        rdma: true,
                        counters: Default::default(),
                    };
                    // SAFETY: `mem` lives in the Sim as long as the modules, never resized.
                    let m =
                        RdmaModule::new(config, unsafe { UserBuf::from_mut_slice(&mut mem[r]) });
                    let m = if words(r) { m.with_lock_words() } else { m };
                    if acc(r) {
                        m.with_acc_words()
                    } else {
                        m
                    }
                })
                .collect();
            Sim {
                w: World::default(),
                m,
                mem,
            }
        }

        /// Progress every member until nothing moves (transfers stay as they are).
        fn run(&mut self) {
            loop {
                let mut n = 0;
                for (r, m) in self.m.iter_mut().enumerate() {
                    n += m.progress(&mut Port {
                        w: &mut self.w,
                        me: r,
                    });
                }
                if n == 0 {
                    break;
                }
            }
        }

        fn sync(&mut self, r: usize, call: SyncCall) -> Option<Result<(), OscError>> {
            self.m[r].sync(call).unwrap();
            self.run();
            self.m[r].sync_done()
        }

        fn kinds_sent(&self, from: usize, to: usize) -> Vec<u8> {
            self.kinds_sent_since(0, from, to)
        }

        /// As `kinds_sent`, from log entry `mark` on.
        fn kinds_sent_since(&self, mark: usize, from: usize, to: usize) -> Vec<u8> {
            self.w.log[mark..]
                .iter()
                .filter(|l| l.0 == from && l.1 == to)
                .map(|l| l.2)
                .collect()
        }
    }

    const UNLOCK: u8 = 14;
    const LOCK_SHARED: u8 = 11;
    const LOCK_EXCL: u8 = 12;
    const POST: u8 = 9;
    const COMPLETE: u8 = 10;

    /// Post/start/complete/wait among members of the node whose objects are mapped (ranks
    /// 0 and 1) go by the objects' counters, with a member that has none (rank 2) by
    /// messages, in one group: a complete behind a transfer in flight waits for it, then
    /// goes by counter too; one with nothing in flight finishes within its call; the
    /// target's wait ends only once every origin completed, with every put in its memory.
    #[test]
    fn posts_and_completes_between_members_of_the_node_go_by_counter() {
        let mut s = Sim::build(3, 8, |r| r < 2);
        let done = |s: &mut Sim, r: usize| {
            s.run();
            s.m[r].sync_done()
        };
        s.m[1].sync(SyncCall::Post(vec![0, 2])).unwrap();
        assert_eq!(done(&mut s, 1), Some(Ok(())));
        s.m[0].sync(SyncCall::Start(vec![1])).unwrap();
        s.m[2].sync(SyncCall::Start(vec![1])).unwrap();
        assert_eq!(done(&mut s, 0), Some(Ok(())));
        assert_eq!(done(&mut s, 2), Some(Ok(())));
        s.m[0]
            .put(1, 0, &Layout::contiguous(2), vec![1, 2])
            .unwrap();
        s.m[2]
            .put(1, 4, &Layout::contiguous(2), vec![3, 4])
            .unwrap();
        s.m[0].sync(SyncCall::Complete).unwrap();
        s.m[2].sync(SyncCall::Complete).unwrap();
        s.m[1].sync(SyncCall::Wait).unwrap();
        assert_eq!(done(&mut s, 0), None, "its put is in flight");
        assert_eq!(done(&mut s, 1), None);
        assert!(!s.m[1].exposure_complete());
        s.w.complete_all();
        assert_eq!(done(&mut s, 0), Some(Ok(())));
        assert_eq!(done(&mut s, 2), Some(Ok(())));
        assert_eq!(done(&mut s, 1), Some(Ok(())));
        assert_eq!(&s.mem[1][..6], [1, 2, 0, 0, 3, 4]);
        assert!(!s.kinds_sent(1, 0).contains(&POST), "no post to rank 0");
        assert!(s.kinds_sent(1, 2).contains(&POST));
        assert!(!s.kinds_sent(0, 1).contains(&COMPLETE));
        assert!(s.kinds_sent(2, 1).contains(&COMPLETE));
        assert_eq!(s.m[1].counts.posts_by_counter, 1);
        assert_eq!(s.m[0].counts.completes_by_counter, 1);
        // Rank 0 exposes to rank 1 (and back), an empty epoch each way: every call ends
        // within itself but the wait, whose complete comes later, and nothing is sent.
        let mark = s.w.log.len();
        for r in [0, 1] {
            s.m[r].sync(SyncCall::Post(vec![1 - r])).unwrap();
            assert_eq!(s.m[r].sync_done_now(), Some(Ok(())));
        }
        for r in [0, 1] {
            s.m[r].sync(SyncCall::Start(vec![1 - r])).unwrap();
            assert_eq!(s.m[r].sync_done_now(), Some(Ok(())));
        }
        s.m[0].sync(SyncCall::Complete).unwrap();
        assert_eq!(s.m[0].sync_done_now(), Some(Ok(())));
        s.m[0].sync(SyncCall::Wait).unwrap();
        assert_eq!(s.m[0].sync_done_now(), None, "rank 1 has not completed");
        s.m[1].sync(SyncCall::Complete).unwrap();
        assert_eq!(s.m[1].sync_done_now(), Some(Ok(())));
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        s.m[1].sync(SyncCall::Wait).unwrap();
        assert_eq!(s.m[1].sync_done_now(), Some(Ok(())));
        assert_eq!(s.w.log.len(), mark, "no message");
        assert_eq!(s.m[0].counts.completes_by_counter, 2);
        assert_eq!(s.m[0].counts.posts_by_counter, 1);
        // Misuse is refused as before.
        assert!(matches!(
            s.m[0].sync(SyncCall::Complete),
            Err(OscError::Sync(_))
        ));
    }

    #[test]
    fn a_lock_on_a_member_of_the_node_is_an_atomic_and_its_unlock_waits_for_the_transfers() {
        let mut s = Sim::build(3, 8, |_| true);
        let excl = |t| SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: t,
            nocheck: false,
        };
        assert!((0..3).all(|r| (0..3).all(|t| s.m[r].engine.has_lock_word(t))));
        let mark = s.w.log.len();
        assert_eq!(s.sync(0, excl(1)), Some(Ok(())));
        s.m[0]
            .put(1, 0, &Layout::contiguous(4), vec![1, 2, 3, 4])
            .unwrap();
        s.run();
        assert_eq!(s.w.xfers.len(), 1, "granted at once: by RDMA");
        s.m[0].sync(SyncCall::Unlock(1)).unwrap();
        s.run();
        assert_eq!(s.m[0].sync_done(), None, "the put is not complete");
        // Rank 2 waits for the word meanwhile, in MPI_Win_lock.
        s.m[2].sync(excl(1)).unwrap();
        s.run();
        assert_eq!(s.m[2].sync_done(), None, "rank 0 holds rank 1's word");
        s.w.complete_all();
        s.run();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        s.run();
        assert_eq!(s.m[2].sync_done(), Some(Ok(())), "given back at the unlock");
        let g = s.m[2].get(1, 0, &Layout::contiguous(4)).unwrap();
        s.run();
        s.w.complete_all();
        assert_eq!(s.sync(2, SyncCall::Unlock(1)), Some(Ok(())));
        assert_eq!(s.m[2].poll_op(g), Some(Ok(vec![1, 2, 3, 4])));
        for from in 0..3 {
            for to in 0..3 {
                let kinds = s.kinds_sent_since(mark, from, to);
                assert!(
                    !kinds
                        .iter()
                        .any(|k| [LOCK_SHARED, LOCK_EXCL, UNLOCK].contains(k)),
                    "{from} -> {to}: {kinds:?}"
                );
            }
        }
        // lock_all: every word at once, none of them messages either.
        assert_eq!(
            s.sync(1, SyncCall::LockAll { nocheck: false }),
            Some(Ok(()))
        );
        assert_eq!(s.sync(1, SyncCall::UnlockAll), Some(Ok(())));
        assert!(s
            .w
            .log
            .iter()
            .skip(mark)
            .all(|l| ![LOCK_SHARED, LOCK_EXCL, UNLOCK].contains(&l.2)));
    }

    #[test]
    fn a_member_without_the_word_locks_by_message_and_the_target_takes_its_word() {
        // Rank 2 uses no words (another node, as far as locks go): its request waits at
        // rank 1 for the word rank 0 holds, and its put with it.
        let mut s = Sim::build(3, 8, |r| r != 2);
        let excl = |t| SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: t,
            nocheck: false,
        };
        assert!(!s.m[2].engine.has_lock_word(1));
        assert_eq!(s.sync(0, excl(1)), Some(Ok(())));
        assert_eq!(s.sync(2, excl(1)), Some(Ok(())), "lazy, by message");
        s.m[2].put(1, 0, &Layout::contiguous(1), vec![9]).unwrap();
        s.m[2].sync(SyncCall::Unlock(1)).unwrap();
        s.run();
        assert_eq!(s.m[2].sync_done(), None);
        assert!(s.w.xfers.is_empty(), "no RDMA before the grant");
        s.m[0].put(1, 0, &Layout::contiguous(1), vec![5]).unwrap();
        s.run();
        s.w.complete_all();
        assert_eq!(s.mem[1][0], 5);
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        s.run();
        assert_eq!(
            s.m[2].sync_done(),
            Some(Ok(())),
            "granted once the word was free"
        );
        assert_eq!(s.mem[1][0], 9, "after rank 0's");
        // And rank 0 (a word) waits while rank 2 (a message) holds it.
        assert_eq!(s.sync(2, excl(1)), Some(Ok(())));
        s.run();
        s.m[0].sync(excl(1)).unwrap();
        s.run();
        assert_eq!(
            s.m[0].sync_done(),
            None,
            "rank 2 holds rank 1's word by message"
        );
        assert_eq!(s.sync(2, SyncCall::Unlock(1)), Some(Ok(())));
        s.run();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
    }
    const FENCED: u8 = 18;
    const FENCE: u8 = 8;
    const FENCE_QUIET: u8 = 19;

    #[test]
    fn operations_whose_runs_average_under_min_run_go_as_messages() {
        let mut s = Sim::new(2, 32);
        for m in &mut s.m {
            m.min_run = 4;
        }
        s.mem[1][20..22].copy_from_slice(&[5, 6]);
        s.mem[1][28..30].copy_from_slice(&[7, 8]);
        let lock = SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 1,
            nocheck: false,
        };
        assert_eq!(s.sync(0, lock), Some(Ok(())));
        let short = Layout {
            runs: vec![(0, 2), (8, 2), (12, 0)],
        };
        s.m[0].put(1, 0, &short, vec![1, 2, 3, 4]).unwrap();
        let g = s.m[0].get(1, 20, &short).unwrap();
        s.run();
        assert!(s.w.xfers.is_empty(), "runs of 2 bytes against 4: messages");
        let long = Layout {
            runs: vec![(0, 4), (8, 4)],
        };
        s.m[0].put(1, 0, &long, vec![9; 8]).unwrap();
        s.run();
        assert_eq!(s.w.xfers.len(), 2, "runs of 4 bytes: one transfer each");
        s.w.complete_all();
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        assert_eq!(s.m[0].poll_op(g), Some(Ok(vec![5, 6, 7, 8])));
        assert_eq!(&s.mem[1][..12], [9, 9, 9, 9, 0, 0, 0, 0, 9, 9, 9, 9]);
    }

    /// A lent put is read by its transfers where the program's buffer is (no copy), and is
    /// complete at the origin, for its request and for flush_local, only once they are.
    #[test]
    fn a_lent_put_reads_the_programs_buffer_until_its_transfers_complete() {
        let mut s = Sim::new(2, 16);
        let lock = SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 1,
            nocheck: false,
        };
        assert_eq!(s.sync(0, lock), Some(Ok(())));
        let origin = vec![1u8, 2, 3, 4];
        let runs = [(0, 2), (8, 2)];
        // SAFETY: `origin` outlives the module's use of it (the test ends after the flush).
        let lent = unsafe { UserBuf::from_slice(&origin) };
        let id = s.m[0].put_lent(1, 2, &runs, lent).unwrap();
        s.run();
        let locals: Vec<usize> = s.w.xfers.iter().map(|x| x.local.addr()).collect();
        let at = origin.as_ptr() as usize;
        assert_eq!(locals, [at, at + 2], "the transfers read the lent buffer");
        assert_eq!(s.m[0].poll_op(id), None, "not complete at the origin yet");
        s.m[0].sync(SyncCall::FlushLocal(Some(1))).unwrap();
        s.run();
        assert_eq!(
            s.m[0].sync_done(),
            None,
            "flush_local waits for the transfers"
        );
        s.w.complete_all();
        s.run();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        assert_eq!(s.m[0].poll_op(id), Some(Ok(Vec::new())));
        assert_eq!(&s.mem[1][2..4], [1, 2]);
        assert_eq!(&s.mem[1][10..12], [3, 4]);
        // Out of range or too short: refused, nothing transferred.
        let far = [(14, 4)];
        assert!(matches!(
            s.m[0].put_lent(1, 0, &far, lent),
            Err(OscError::Range(_))
        ));
        assert!(matches!(
            s.m[0].put_lent(1, 0, &runs[..1], lent),
            Err(OscError::Arg(_))
        ));
        s.run();
        assert!(s.w.xfers.is_empty());
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
    }

    /// Puts and gets that continue each other in both address spaces start together at the
    /// next progress as one transfer, complete together, and need no progress pass each
    /// ([`OscModule::wants_pass`]); the others stay transfers of their own. Once warm,
    /// issuing, starting and completing them allocates nothing.
    #[test]
    fn adjacent_transfers_go_as_one_and_complete_together() {
        let mut s = Sim::new(2, 64);
        let lock = SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 1,
            nocheck: false,
        };
        assert_eq!(s.sync(0, lock), Some(Ok(())));
        let origin: Vec<u8> = (1..=32).collect();
        // SAFETY: `origin` outlives the module's use of it (the test ends after the flush).
        let lent = unsafe { UserBuf::from_slice(&origin) };
        let cycle = |s: &mut Sim, round: u8| {
            // Eight puts of 4 bytes, adjacent on both sides; a ninth at a gap; a tenth
            // adjacent at the target but not at the origin.
            let mut ids = Vec::with_capacity(10);
            for i in 0..8 {
                let runs = [(0, 4)];
                ids.push(s.m[0].put_lent(1, 4 * i, &runs, lent.slice(4 * i as usize, 4)));
                assert!(
                    !s.m[0].wants_pass(),
                    "an RDMA put waits for the next progress"
                );
            }
            ids.push(s.m[0].put_lent(1, 40, &[(0, 4)], lent.slice(0, 4)));
            ids.push(s.m[0].put_lent(1, 44, &[(0, 4)], lent.slice(16, 4)));
            assert!(s.w.xfers.is_empty(), "nothing started before a progress");
            s.run();
            let lens: Vec<usize> = s.w.xfers.iter().map(|x| x.local.len()).collect();
            assert_eq!(lens, [32, 4, 4], "round {round}");
            for id in &ids {
                let id = *id.as_ref().unwrap();
                assert_eq!(s.m[0].poll_op(id), None, "not complete at the origin yet");
            }
            s.w.complete_all();
            s.run();
            for id in ids {
                assert_eq!(s.m[0].poll_op(id.unwrap()), Some(Ok(Vec::new())));
            }
            assert!(s.m[0].in_flight.is_empty() && s.m[0].ops.is_empty());
        };
        cycle(&mut s, 0);
        let before = rmca_test_support::alloc_count::allocations();
        cycle(&mut s, 1);
        // (The cycle's own Vecs, of ids and of lengths, are its only allocations.)
        assert_eq!(rmca_test_support::alloc_count::allocations() - before, 2);
        assert_eq!(&s.mem[1][..32], &origin[..]);
        assert_eq!(&s.mem[1][40..48], [1, 2, 3, 4, 17, 18, 19, 20]);
        // Gets: adjacent into adjacent parts of one buffer, one transfer.
        let mut into = vec![0u8; 16];
        // SAFETY: `into` outlives the module's use of it (read after the flush).
        let lent = unsafe { UserBuf::from_mut_slice(&mut into) };
        for i in 0..4 {
            s.m[0]
                .get_lent(1, 8 + 4 * i, &[(0, 4)], lent.slice(4 * i as usize, 4))
                .unwrap()
                .unwrap();
        }
        s.run();
        let lens: Vec<usize> = s.w.xfers.iter().map(|x| x.local.len()).collect();
        assert_eq!(lens, [16]);
        s.w.complete_all();
        assert_eq!(s.sync(0, SyncCall::Flush(Some(1))), Some(Ok(())));
        assert_eq!(into, origin[8..24]);
        // A put by message (a lock not granted yet would do; an accumulate does) wants its
        // pass at once.
        s.m[0]
            .accumulate(
                1,
                0,
                &Layout::contiguous(1),
                AccOp::Sum,
                Elem::U8,
                vec![1],
                false,
            )
            .unwrap();
        assert!(s.m[0].wants_pass());
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        assert_eq!(s.mem[1][0], 2);
    }

    /// A lock asked for before the target's word was read (a program that locks right after
    /// creating the window) goes by message, and so does its epoch; the word is taken for
    /// the epochs after it, which then send no lock message and move their puts by RDMA.
    #[test]
    fn a_word_announced_during_the_first_epoch_serves_the_next_ones() {
        // No progress yet: nobody has read anybody's keys or word.
        let mut s = Sim::unstarted(2, 8, |_| true, |_| false);
        let excl = SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 1,
            nocheck: false,
        };
        assert_eq!(s.sync(0, excl.clone()), Some(Ok(())));
        assert!(s.kinds_sent(0, 1).contains(&LOCK_EXCL), "by message");
        s.m[0].put(1, 0, &Layout::contiguous(1), vec![4]).unwrap();
        s.run();
        s.w.complete_all();
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        assert_eq!(s.mem[1][0], 4);
        s.run();
        assert!(s.m[0].engine.has_lock_word(1), "taken once the epoch ended");
        for round in 0..3u8 {
            let mark = s.w.log.len();
            assert_eq!(s.sync(0, excl.clone()), Some(Ok(())));
            s.m[0]
                .put(1, 1, &Layout::contiguous(1), vec![round])
                .unwrap();
            s.run();
            assert_eq!(s.w.xfers.len(), 1, "granted at once: by RDMA");
            s.w.complete_all();
            assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
            assert_eq!(s.mem[1][1], round);
            let kinds = s.kinds_sent_since(mark, 0, 1);
            assert!(
                !kinds
                    .iter()
                    .any(|k| [LOCK_SHARED, LOCK_EXCL, UNLOCK].contains(k)),
                "round {round}: {kinds:?}"
            );
        }
    }

    /// A word refused because its epoch was open (OSU's `-s flush`: a lock right after the
    /// window's creation, then every operation and flush in that epoch) costs the flushes
    /// of that epoch no progress pass: the engine would refuse it again until the unlock.
    /// It is taken once the epoch ended.
    #[test]
    fn a_refused_word_costs_the_flushes_of_its_epoch_no_pass() {
        let mut s = Sim::unstarted(2, 16, |_| true, |_| true);
        let excl = SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 1,
            nocheck: false,
        };
        assert_eq!(s.sync(0, excl), Some(Ok(())));
        assert!(s.kinds_sent(0, 1).contains(&LOCK_EXCL), "by message");
        assert!(
            !s.m[0].engine.has_lock_word(1),
            "refused: the epoch is open"
        );
        for v in 1..4u64 {
            let r =
                s.m[0].accumulate_at_once(1, 0, &[(0, 8)], AccOp::Sum, Elem::U64, &u64s(v), None);
            assert_eq!(r, Some(Ok(())), "applied by the origin");
            s.m[0].sync(SyncCall::Flush(Some(1))).unwrap();
            assert_eq!(s.m[0].sync_done_now(), Some(Ok(())), "flush {v}: no pass");
        }
        assert_eq!(s.mem[1][..8], u64s(6));
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        s.run();
        assert!(s.m[0].engine.has_lock_word(1), "taken once the epoch ended");
    }

    /// Only a buffer that continues another joins it, and a writable one only a writable one
    /// (a get's joined view is never made writable out of a read-only one).
    #[test]
    fn join_takes_buffers_in_order_and_of_one_kind() {
        let mut into = vec![0u8; 8];
        // SAFETY: views of `into`, which outlives them; nothing is read or written through
        // them.
        let (ro, w) = unsafe {
            (
                UserBuf::from_slice(&into),
                UserBuf::from_mut_slice(&mut into),
            )
        };
        assert!(join(ro.slice(0, 4), w.slice(4, 4)).is_none());
        assert!(join(ro.slice(0, 4), ro.slice(4, 4)).is_some_and(|j| !j.is_writable()));
        let both = join(w.slice(0, 4), w.slice(4, 4)).expect("adjacent");
        assert!(both.is_writable() && both.addr() == w.addr() && both.len() == 8);
        assert!(join(w.slice(4, 4), w.slice(0, 4)).is_none(), "not in order");
        assert!(join(w.slice(0, 2), w.slice(4, 4)).is_none(), "a gap");
    }

    /// A lent get is written by its transfers where the program's buffer is, complete once
    /// they are, and then forgotten; by message (behind a lock not granted yet) it is not
    /// taken.
    #[test]
    fn a_lent_get_writes_the_programs_buffer_and_keeps_nothing() {
        let mut s = Sim::new(2, 16);
        s.mem[1][2..4].copy_from_slice(&[5, 6]);
        s.mem[1][10..12].copy_from_slice(&[7, 8]);
        let lock = SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 1,
            nocheck: false,
        };
        assert_eq!(s.sync(0, lock), Some(Ok(())));
        let mut into = vec![0u8; 4];
        let runs = [(0, 2), (8, 2)];
        // SAFETY: `into` outlives the module's use of it (read after the flush).
        let lent = unsafe { UserBuf::from_mut_slice(&mut into) };
        let id = s.m[0].get_lent(1, 2, &runs, lent).unwrap().unwrap();
        s.run();
        let at = lent.addr();
        let locals: Vec<usize> = s.w.xfers.iter().map(|x| x.local.addr()).collect();
        assert_eq!(locals, [at, at + 2], "the transfers write the lent buffer");
        assert_eq!(s.m[0].poll_op(id), None);
        s.w.complete_all();
        assert_eq!(s.sync(0, SyncCall::Flush(Some(1))), Some(Ok(())));
        assert!(s.m[0].ops.is_empty(), "nothing kept");
        assert_eq!(s.m[0].poll_op(id), Some(Ok(Vec::new())));
        assert!(matches!(
            s.m[0].get_lent(1, 14, &runs, lent),
            Some(Err(OscError::Range(_)))
        ));
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        assert_eq!(into, [5, 6, 7, 8]);
        // Outside an epoch: refused.
        assert!(matches!(
            s.m[0].get_lent(1, 2, &runs, lent),
            Some(Err(OscError::Sync(_)))
        ));
    }

    /// Members of one node (this process) with lock words and puts and gets by CMA
    /// ([`RdmaModule::with_cma_direct`]), every announcement read.
    fn cma_sim(n: usize, bytes: usize) -> Sim {
        let mut s = Sim::build(n, bytes, |_| true);
        for m in &mut s.m {
            m.cma = m.lock_word.is_some();
            // (As `with_cma_direct` before the announcements: the lent path may lock.)
            for t in 0..n {
                m.lent_reach(t);
            }
        }
        assert!((0..n).all(|r| (0..n).all(|t| r == t || s.m[r].cma_pid[t].is_some())));
        s
    }

    /// A put and its flush to a member of the node: one CMA call made by the flush itself,
    /// which then needs no progress pass, no BTL transfer and no message; the origin's
    /// buffer is read until then (not complete before), and nothing is allocated once warm.
    /// A get likewise, in a lock/unlock epoch of its own on the target's word.
    #[test]
    fn a_put_and_its_flush_to_a_node_member_are_one_cma_call_and_no_pass() {
        let mut s = cma_sim(2, 64);
        let excl = SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 1,
            nocheck: false,
        };
        s.m[0].sync(excl.clone()).unwrap();
        assert_eq!(
            s.m[0].sync_done_now(),
            Some(Ok(())),
            "a word granted at once"
        );
        let origin: Vec<u8> = (1..=8).collect();
        // SAFETY: `origin` outlives the module's use of it (the flushes below).
        let lent = unsafe { UserBuf::from_slice(&origin) };
        let mark = s.w.log.len();
        let cycle = |s: &mut Sim, at: u64| {
            let id = s.m[0].put_lent(1, at, &[(0, 8)], lent).unwrap();
            assert!(!s.m[0].wants_pass(), "moved by the flush");
            assert_eq!(s.m[0].poll_op(id), None, "the buffer is still read");
            s.m[0].sync(SyncCall::Flush(Some(1))).unwrap();
            // No progress: finished within the call.
            assert_eq!(s.m[0].sync_done_now(), Some(Ok(())));
            assert_eq!(s.m[0].poll_op(id), Some(Ok(Vec::new())));
        };
        cycle(&mut s, 0);
        let (calls, allocs) = (
            s.m[0].cma_calls,
            rmca_test_support::alloc_count::allocations(),
        );
        cycle(&mut s, 8);
        assert_eq!(s.m[0].cma_calls - calls, 1, "one system call");
        assert_eq!(rmca_test_support::alloc_count::allocations(), allocs);
        assert_eq!(&s.mem[1][..16], [origin.clone(), origin.clone()].concat());
        // A flush with nothing to do finishes too, but not without a pass: a program
        // polling its window needs one.
        s.m[0].sync(SyncCall::Flush(Some(1))).unwrap();
        assert_eq!(s.m[0].sync_done_now(), None);
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        s.m[0].sync(SyncCall::Unlock(1)).unwrap();
        assert_eq!(s.m[0].sync_done_now(), None, "nothing moved: a pass");
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        // Lock, get, unlock: the unlock moves the get and gives the word back at once.
        s.mem[1][20..24].copy_from_slice(&[7, 6, 5, 4]);
        let mut into = vec![0u8; 4];
        // SAFETY: `into` outlives the module's use of it (read after the unlock).
        let lent = unsafe { UserBuf::from_mut_slice(&mut into) };
        for _ in 0..2 {
            s.m[0].sync(excl.clone()).unwrap();
            assert_eq!(s.m[0].sync_done_now(), Some(Ok(())));
            let calls = s.m[0].cma_calls;
            s.m[0].get_lent(1, 20, &[(0, 4)], lent).unwrap().unwrap();
            s.m[0].sync(SyncCall::Unlock(1)).unwrap();
            assert_eq!(s.m[0].sync_done_now(), Some(Ok(())));
            assert_eq!(s.m[0].cma_calls - calls, 1);
        }
        assert_eq!(into, [7, 6, 5, 4]);
        assert!(s.w.xfers.is_empty(), "no BTL transfer");
        assert!(
            s.kinds_sent_since(mark, 0, 1).is_empty(),
            "no message: {:?}",
            s.kinds_sent_since(mark, 0, 1)
        );
        // The word is free: another member takes it at once.
        assert_eq!(s.sync(1, excl.clone()), Some(Ok(())));
        assert_eq!(s.sync(1, SyncCall::Unlock(1)), Some(Ok(())));
    }

    /// Every put and get queued before a flush moves with it, one CMA call per target and
    /// direction whatever their addresses (OSU's put_bw: 64 puts, one call); a lent put
    /// not flushed yet moves with the next progress (its request completes then).
    #[test]
    fn puts_queued_before_a_flush_move_in_one_call_per_target_and_direction() {
        let mut s = cma_sim(3, 256);
        s.m[0].sync(SyncCall::LockAll { nocheck: false }).unwrap();
        s.run();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        let origin: Vec<u8> = (0..96).collect();
        // SAFETY: `origin` outlives the module's use of it.
        let lent = unsafe { UserBuf::from_slice(&origin) };
        s.mem[2][..4].copy_from_slice(&[9, 9, 9, 9]);
        let mut into = vec![0u8; 4];
        // SAFETY: `into` outlives the module's use of it.
        let dst = unsafe { UserBuf::from_mut_slice(&mut into) };
        let calls = s.m[0].cma_calls;
        // 48 puts to rank 1, 64 pieces in all (`cma::BATCH`): one byte each in reverse
        // order, every other byte, and 16 of two runs; then a get from rank 2.
        for i in 0..32u64 {
            s.m[0]
                .put_lent(1, 2 * (31 - i), &[(0, 1)], lent.slice(i as usize, 1))
                .unwrap();
            if i < 16 {
                let two = lent.slice(32 + 2 * i as usize, 2);
                s.m[0]
                    .put_lent(1, 100 + 4 * i, &[(0, 1), (2, 1)], two)
                    .unwrap();
            }
        }
        s.m[0].get_lent(2, 0, &[(0, 4)], dst).unwrap().unwrap();
        s.m[0].sync(SyncCall::Flush(None)).unwrap();
        assert_eq!(s.m[0].sync_done_now(), Some(Ok(())));
        assert_eq!(s.m[0].cma_calls - calls, 2, "rank 1's puts, rank 2's get");
        for i in 0..32usize {
            assert_eq!(s.mem[1][2 * (31 - i)], i as u8);
        }
        for i in 0..16usize {
            assert_eq!(s.mem[1][100 + 4 * i], 32 + 2 * i as u8);
            assert_eq!(s.mem[1][102 + 4 * i], 33 + 2 * i as u8);
        }
        assert_eq!(into, [9, 9, 9, 9]);
        // Not flushed: the next progress moves it (a request's test progresses).
        let id = s.m[0].put_lent(2, 10, &[(0, 2)], lent.slice(0, 2)).unwrap();
        assert_eq!(s.m[0].poll_op(id), None);
        s.run();
        assert_eq!(s.m[0].poll_op(id), Some(Ok(Vec::new())));
        assert_eq!(&s.mem[2][10..12], [0, 1]);
        assert!(s.w.xfers.is_empty(), "no BTL transfer");
        s.m[0].sync(SyncCall::UnlockAll).unwrap();
        s.run();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
    }

    /// A target CMA does not reach (no such process here): the queued transfers go by the
    /// BTLs, complete only once those are (nothing finishes within the flush), and so do the
    /// later ones.
    #[test]
    fn a_target_cma_does_not_reach_gets_its_transfers_by_the_btls() {
        let mut s = cma_sim(2, 16);
        s.m[0].cma_pid[1] = Some(i32::MAX as u32);
        let lock = SyncCall::Lock {
            kind: LockKind::Shared,
            target: 1,
            nocheck: false,
        };
        assert_eq!(s.sync(0, lock), Some(Ok(())));
        let origin = vec![3u8, 4];
        // SAFETY: `origin` outlives the module's use of it.
        let lent = unsafe { UserBuf::from_slice(&origin) };
        let id = s.m[0].put_lent(1, 2, &[(0, 2)], lent).unwrap();
        s.m[0].sync(SyncCall::Flush(Some(1))).unwrap();
        assert_eq!(s.m[0].sync_done_now(), None);
        assert_eq!(s.m[0].cma_pid[1], None, "out of reach from now on");
        s.run();
        assert_eq!(s.w.xfers.len(), 1, "by the BTL");
        assert_eq!(s.m[0].sync_done(), None);
        assert_eq!(s.m[0].poll_op(id), None, "the BTL still reads the buffer");
        s.w.complete_all();
        s.run();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        assert_eq!(s.m[0].poll_op(id), Some(Ok(Vec::new())));
        assert_eq!(&s.mem[1][2..4], [3, 4]);
        s.m[0].put_lent(1, 0, &[(0, 2)], lent).unwrap();
        s.run();
        assert_eq!(s.w.xfers.len(), 1, "the next one too");
        s.w.complete_all();
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        assert_eq!(&s.mem[1][..4], [3, 4, 3, 4]);
    }

    /// The lent path (the C library's `MPI_Put`/`MPI_Get`/`MPI_Win_flush` on a member of the
    /// node): taken only inside a granted epoch and the target's memory, a put and its flush
    /// are one CMA call with no call into the module, no message, no BTL transfer and no
    /// allocation once warm; a flush with nothing queued, or with the module's own work
    /// outstanding, is the module's; what the path queued moves with the module's next
    /// synchronization; the unlock closes the path.
    #[test]
    fn the_lent_path_moves_a_put_and_its_flush_in_one_cma_call_with_no_call_in() {
        let mut s = cma_sim(2, 64);
        let p = s.m[0].lent_path().expect("CMA reaches rank 1");
        let origin: Vec<u8> = (1..=8).collect();
        // SAFETY: `origin` outlives the path's use of it (the flushes below).
        let lent = unsafe { UserBuf::from_slice(&origin) };
        assert!(!p.put(1, 0, lent), "no epoch open");
        let excl = SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 1,
            nocheck: false,
        };
        s.m[0].sync(excl.clone()).unwrap();
        assert_eq!(s.m[0].sync_done_now(), Some(Ok(())));
        let mark = s.w.log.len();
        // Outside the memory, another rank, no bytes: the module's to refuse.
        assert!(!p.put(1, 57, lent), "past the end");
        assert!(!p.put(1, -1, lent), "before the start");
        assert!(!p.put(2, 0, lent), "not a member");
        assert!(!p.put(1, 0, lent.slice(0, 0)), "no bytes");
        assert!(!p.get(1, 0, lent), "a get into a read-only buffer");
        assert!(!p.flush(1), "nothing queued: the module's flush (a pass)");
        let cycle = |at: isize| {
            assert!(p.put(1, at, lent));
            assert!(p.flush(1));
        };
        cycle(0);
        let allocs = rmca_test_support::alloc_count::allocations();
        cycle(8);
        assert_eq!(rmca_test_support::alloc_count::allocations(), allocs);
        assert_eq!(&s.mem[1][..16], [origin.clone(), origin.clone()].concat());
        let mut into = vec![0u8; 16];
        // SAFETY: `into` outlives the path's use of it (read after the flush).
        let dst = unsafe { UserBuf::from_mut_slice(&mut into) };
        assert!(p.get(1, 0, dst));
        assert!(p.flush(1));
        s.m[0].lent_counts();
        assert_eq!(s.m[0].cma_calls, 3, "one system call per flush");
        assert_eq!((s.m[0].counts.cma_puts, s.m[0].counts.cma_gets), (2, 1));
        assert_eq!(s.m[0].counts.lent_flushes, 3);
        // The module's own put (a derived datatype, two runs) leaves the flush to it, which
        // moves what the path queued too; then the path flushes again.
        assert!(p.put(1, 40, lent));
        s.m[0].put_lent(1, 32, &[(0, 4), (12, 4)], lent).unwrap();
        assert!(!s.m[0].wants_pass());
        assert!(!p.flush(1), "the module's work is outstanding");
        s.m[0].sync(SyncCall::Flush(Some(1))).unwrap();
        assert_eq!(s.m[0].sync_done_now(), Some(Ok(())));
        assert_eq!(
            &s.mem[1][32..48],
            [1, 2, 3, 4, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert!(p.put(1, 56, lent));
        assert!(p.flush(1));
        assert_eq!(&s.mem[1][56..], &origin[..]);
        // A put left queued moves with the unlock, which closes the path.
        assert!(p.put(1, 48, lent));
        s.m[0].sync(SyncCall::Unlock(1)).unwrap();
        assert_eq!(s.m[0].sync_done_now(), Some(Ok(())));
        assert_eq!(&s.mem[1][48..56], &origin[..]);
        assert!(!p.put(1, 0, lent), "the epoch is closed");
        assert!(s.w.xfers.is_empty(), "no BTL transfer");
        assert!(
            s.kinds_sent_since(mark, 0, 1).is_empty(),
            "no message: {:?}",
            s.kinds_sent_since(mark, 0, 1)
        );
        // A fence epoch opens it to every member of the node; the fence moves the queue.
        assert_eq!(s.sync(0, SyncCall::Fence { succeed: true }), None);
        assert_eq!(s.sync(1, SyncCall::Fence { succeed: true }), Some(Ok(())));
        s.run();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        assert!(p.put(1, 0, lent.slice(0, 1)));
        assert!(!p.flush(1), "a flush is not a fence epoch's");
        s.m[0].sync(SyncCall::Fence { succeed: false }).unwrap();
        s.m[1].sync(SyncCall::Fence { succeed: false }).unwrap();
        s.run();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        assert_eq!(s.m[1].sync_done(), Some(Ok(())));
        assert!(!p.put(1, 0, lent), "no epoch after the last fence");
    }

    /// An accumulate, fetch-and-op or compare-and-swap completed within its call leaves the
    /// flush after it to the lent path (no call into the module), once per operation: a
    /// flush with nothing done since is the module's (its progress pass). Not after an
    /// operation of the module's own that is outstanding.
    #[test]
    fn the_flush_after_an_accumulate_applied_at_once_is_the_lent_paths() {
        let mut s = Sim::build_acc(2, 16, |_| true, |_| true);
        for m in &mut s.m {
            m.cma = m.lock_word.is_some();
        }
        let p = s.m[0].lent_path().expect("CMA reaches rank 1");
        let excl = SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 1,
            nocheck: false,
        };
        s.m[0].sync(excl).unwrap();
        assert_eq!(s.m[0].sync_done_now(), Some(Ok(())));
        assert!(!p.flush(1), "nothing done: the module's flush (a pass)");
        let mut old = [0u8; 8];
        let r = s.m[0].compare_and_swap_at_once(1, 0, Elem::U64, &u64s(0), &u64s(7), &mut old);
        assert_eq!(r, Some(Ok(())));
        assert!(p.flush(1), "complete at the target: the path's");
        assert!(!p.flush(1), "once");
        let r = s.m[0].accumulate_at_once(1, 8, &[(0, 8)], AccOp::Sum, Elem::U64, &u64s(2), None);
        assert_eq!(r, Some(Ok(())));
        assert!(p.flush(1));
        assert_eq!(
            (&s.mem[1][..8], &s.mem[1][8..]),
            (&u64s(7)[..], &u64s(2)[..])
        );
        // An operation by message (no accumulate words: `osc_rdma_acc_direct` 0) leaves the
        // flush to the module.
        let mut s2 = Sim::build_acc(2, 16, |_| true, |_| false);
        for m in &mut s2.m {
            m.cma = m.lock_word.is_some();
        }
        let p2 = s2.m[0].lent_path().expect("CMA reaches rank 1");
        s2.m[0]
            .sync(SyncCall::Lock {
                kind: LockKind::Exclusive,
                target: 1,
                nocheck: false,
            })
            .unwrap();
        assert_eq!(s2.m[0].sync_done_now(), Some(Ok(())));
        fop(&mut s2.m[0], 1, false);
        assert!(s2.m[0].wants_pass(), "sent as a message");
        assert!(!p2.flush(1), "the module's work is outstanding");
        s.m[0].lent_counts();
        assert_eq!(s.m[0].counts.lent_flushes, 2);
    }

    /// In an epoch the lent path locked, an accumulate or compare-and-swap completed within
    /// its call leaves the lock to the path (not adopted: the path's unlock is one atomic),
    /// and the word keeps excluding the others meanwhile; bad input goes the general way,
    /// which adopts the lock and refuses it with its class, nothing written.
    #[test]
    fn operations_at_once_leave_the_lent_paths_lock_to_it() {
        let mut s = Sim::build_acc(3, 16, |_| true, |_| true);
        for m in &mut s.m {
            m.cma = m.lock_word.is_some();
            for t in 0..3 {
                m.lent_reach(t);
            }
        }
        let p = s.m[0].lent_path().unwrap();
        let x = |t| SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: t,
            nocheck: false,
        };
        // (The first synchronization makes the path free.)
        assert_eq!(s.sync(0, x(1)), Some(Ok(())));
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        assert!(p.lock(1, LockKind::Exclusive, false));
        s.m[2].sync(x(1)).unwrap();
        s.run();
        let mut old = [9u8; 8];
        let r = s.m[0].compare_and_swap_at_once(1, 0, Elem::U64, &u64s(0), &u64s(7), &mut old);
        assert_eq!(r, Some(Ok(())));
        let r = s.m[0].accumulate_at_once(1, 8, &[(0, 8)], AccOp::Sum, Elem::U64, &u64s(2), None);
        assert_eq!(r, Some(Ok(())));
        assert_eq!((old, &s.mem[1][..8]), (0u64.to_ne_bytes(), &u64s(7)[..]));
        assert!(!s.m[0].passive[1], "not adopted");
        assert_eq!(s.m[2].sync_done(), None, "rank 0 holds rank 1's word");
        assert!(p.unlock(1), "the path's unlock");
        s.run();
        assert_eq!(s.m[2].sync_done(), Some(Ok(())), "given back at the unlock");
        assert_eq!(s.sync(2, SyncCall::Unlock(1)), Some(Ok(())));
        // Bad input in the path's epoch: the general way's error, nothing written.
        assert!(p.lock(1, LockKind::Exclusive, false));
        let far = s.m[0].accumulate_at_once(1, 12, &[(0, 8)], AccOp::Sum, Elem::U64, &[1; 8], None);
        assert!(matches!(far, Some(Err(OscError::Range(_)))), "{far:?}");
        let op = s.m[0].accumulate_at_once(1, 0, &[(0, 8)], AccOp::BAnd, Elem::F64, &[1; 8], None);
        assert!(matches!(op, Some(Err(OscError::Op(_)))), "{op:?}");
        let cas = s.m[0].compare_and_swap_at_once(1, 12, Elem::U64, &u64s(0), &u64s(1), &mut old);
        assert!(matches!(cas, Some(Err(OscError::Range(_)))), "{cas:?}");
        assert_eq!(
            (&s.mem[1][..8], &s.mem[1][8..]),
            (&u64s(7)[..], &u64s(2)[..])
        );
        assert!(s.m[0].passive[1], "adopted by the general way");
        assert!(!p.unlock(1), "the module's unlock now");
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        // Without an epoch: refused (no lock of the path's to run in).
        let r = s.m[0].accumulate_at_once(1, 0, &[(0, 8)], AccOp::Sum, Elem::U64, &[1; 8], None);
        assert!(matches!(r, Some(Err(OscError::Sync(_)))), "{r:?}");
    }

    /// Without CMA from the origin (`osc_rdma_cma_direct` 0) there is no lent path; with
    /// it, a target CMA turns out not to reach has what the path queued moved by the BTLs
    /// (each piece its own operation) by the module's synchronization, and the path closed
    /// to it.
    #[test]
    fn the_lent_paths_pieces_go_by_the_btls_where_cma_does_not_reach() {
        let s = Sim::build(2, 16, |_| true);
        assert!(s.m[0].lent_path().is_none(), "no CMA from here");
        let mut s2 = cma_sim(2, 16);
        s2.m[0].cma_pid[1] = Some(i32::MAX as u32);
        let lock = SyncCall::Lock {
            kind: LockKind::Shared,
            target: 1,
            nocheck: false,
        };
        assert_eq!(s2.sync(0, lock.clone()), Some(Ok(())));
        let p = s2.m[0].lent_path().unwrap();
        let origin = vec![3u8, 4, 5, 6];
        // SAFETY: `origin` outlives the module's use of it.
        let lent = unsafe { UserBuf::from_slice(&origin) };
        assert!(p.put(1, 0, lent.slice(0, 2)));
        assert!(p.put(1, 4, lent.slice(2, 2)));
        assert!(!p.flush(1), "CMA refused: the module's to handle");
        s2.m[0].sync(SyncCall::Flush(Some(1))).unwrap();
        assert_eq!(s2.m[0].sync_done_now(), None);
        s2.run();
        assert_eq!(s2.w.xfers.len(), 2, "by the BTL, one per piece");
        s2.w.complete_all();
        s2.run();
        assert_eq!(s2.m[0].sync_done(), Some(Ok(())));
        assert_eq!(&s2.mem[1][..6], [3, 4, 0, 0, 5, 6]);
        assert!(!p.put(1, 0, lent), "closed to it");
        assert_eq!(s2.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        drop(s);
    }

    /// A put sent as a message (at most `osc_rdma_small_limit` bytes) in a passive epoch of
    /// a member CMA reaches stays unacknowledged: a flush_local of that member is then a
    /// flush, after which the member is quiet and the lent path takes the epoch's flushes
    /// again (after flush_locals alone it never would).
    #[test]
    fn a_flush_local_with_messages_unacknowledged_is_a_flush() {
        let mut s = cma_sim(2, 16);
        s.m[0].small_limit = 4;
        let lock = SyncCall::Lock {
            kind: LockKind::Shared,
            target: 1,
            nocheck: false,
        };
        assert_eq!(s.sync(0, lock), Some(Ok(())));
        s.m[0]
            .put(1, 0, &Layout::contiguous(4), vec![1, 2, 3, 4])
            .unwrap();
        assert!(!s.m[0].engine.quiet(1), "sent as a message");
        assert_eq!(s.sync(0, SyncCall::FlushLocal(Some(1))), Some(Ok(())));
        assert!(s.m[0].engine.quiet(1), "acknowledged: a flush");
        assert_eq!(&s.mem[1][..4], [1, 2, 3, 4]);
        let p = s.m[0].lent_path().unwrap();
        let origin = vec![7u8; 8];
        // SAFETY: `origin` outlives the module's use of it.
        let lent = unsafe { UserBuf::from_slice(&origin) };
        assert!(
            p.put(1, 8, lent) && p.flush_local(1),
            "the lent path's again"
        );
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        assert_eq!(&s.mem[1][8..16], [7; 8]);
    }

    /// Puts the host's flush_local staged (`crate::cma::Lent`'s stage) to a target CMA turns
    /// out not to reach: the module's flush sends the staged bytes by the BTLs, those the
    /// program wrote before its flush_local, not its buffer overwritten since.
    #[test]
    fn staged_puts_go_by_the_btls_with_their_staged_bytes_where_cma_does_not_reach() {
        let mut s = cma_sim(2, 16);
        s.m[0].cma_pid[1] = Some(i32::MAX as u32);
        let lock = SyncCall::Lock {
            kind: LockKind::Shared,
            target: 1,
            nocheck: false,
        };
        assert_eq!(s.sync(0, lock), Some(Ok(())));
        let p = s.m[0].lent_path().unwrap();
        let mut origin = vec![3u8, 4, 5, 6];
        // SAFETY: `origin` outlives the module's use of it.
        let lent = unsafe { UserBuf::from_slice(&origin) };
        assert!(p.put(1, 0, lent.slice(0, 2)) && p.flush_local(1));
        assert!(p.put(1, 4, lent.slice(2, 2)) && p.flush_local(1));
        origin.fill(9);
        s.m[0].sync(SyncCall::Flush(Some(1))).unwrap();
        s.run();
        assert_eq!(s.w.xfers.len(), 2, "by the BTL, one per piece");
        s.w.complete_all();
        s.run();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        assert_eq!(&s.mem[1][..6], [3, 4, 0, 0, 5, 6]);
        s.m[0].lent_counts();
        assert_eq!(s.m[0].counts.staged_puts, 2);
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
    }

    /// The lent path's locks (the C library's `MPI_Win_lock`/`MPI_Win_unlock` of a member
    /// of the node): taken only while the module has no epoch open, an atomic on the
    /// target's word that excludes the module's word locks of the other members; a lock,
    /// put and unlock make one CMA call and no call into the module. Whatever the module is
    /// called for next adopts the lock first, so its checks see it: a second lock of the
    /// target, a fence, `MPI_Win_start` and a free are refused (`OscError::Sync`), an
    /// accumulate is taken, and the module's unlock gives the word back.
    #[test]
    fn the_lent_paths_locks_are_the_modules_once_it_is_called() {
        let mut s = cma_sim(3, 64);
        let p = s.m[0].lent_path().unwrap();
        let lock = |t, kind| SyncCall::Lock {
            kind,
            target: t,
            nocheck: false,
        };
        use LockKind::{Exclusive as X, Shared as S};
        assert!(
            !p.lock(1, X, false),
            "not free before the first synchronization"
        );
        assert_eq!(s.sync(0, lock(1, X)), Some(Ok(())));
        assert!(!p.lock(2, X, false), "an epoch is open");
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        let origin: Vec<u8> = (1..=8).collect();
        // SAFETY: `origin` outlives the path's use of it.
        let lent = unsafe { UserBuf::from_slice(&origin) };
        let mark = s.w.log.len();
        let calls = s.m[0].cma_calls;
        // Lock, put, unlock: no call into module 0; rank 2's lock waits meanwhile.
        assert!(p.lock(1, X, false));
        s.m[2].sync(lock(1, S)).unwrap();
        s.run();
        assert_eq!(s.m[2].sync_done(), None, "rank 0 holds rank 1's word");
        assert!(p.put(1, 8, lent));
        let allocs = rmca_test_support::alloc_count::allocations();
        assert!(p.unlock(1));
        assert_eq!(rmca_test_support::alloc_count::allocations(), allocs);
        assert_eq!(&s.mem[1][8..16], &origin[..]);
        s.run();
        assert_eq!(s.m[2].sync_done(), Some(Ok(())), "given back at the unlock");
        assert!(!p.lock(1, X, false), "rank 2 holds it shared");
        assert!(p.lock(1, S, false), "shared with rank 2");
        assert!(p.unlock(1));
        assert!(!p.unlock(1), "not locked: the module's error");
        assert!(matches!(
            s.m[0].sync(SyncCall::Unlock(1)),
            Err(OscError::Sync(_))
        ));
        assert_eq!(s.sync(2, SyncCall::Unlock(1)), Some(Ok(())));
        s.m[0].lent_counts();
        assert_eq!(s.m[0].counts.lent_locks, 2);
        assert_eq!(s.m[0].cma_calls - calls, 1, "the unlock's, moving the put");
        assert!(
            s.kinds_sent_since(mark, 0, 1).is_empty() && s.w.xfers.is_empty(),
            "no message, no BTL transfer"
        );
        // A second lock of the same member: the module's, refused; the first stays, and
        // ends by the module's unlock.
        assert!(p.lock(1, S, false));
        assert!(!p.lock(1, S, false));
        assert!(matches!(s.m[0].sync(lock(1, S)), Err(OscError::Sync(_))));
        assert!(!p.unlock(1), "adopted: the module's");
        assert!(p.put(1, 0, lent.slice(0, 2)), "the epoch is still open");
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        assert_eq!(&s.mem[1][..2], [1, 2]);
        assert_eq!(
            s.sync(2, lock(1, X)),
            Some(Ok(())),
            "the word was given back"
        );
        assert_eq!(s.sync(2, SyncCall::Unlock(1)), Some(Ok(())));
        // Epochs that do not mix with a lock, refused with the lock held; nothing changes.
        for call in [
            SyncCall::Fence { succeed: true },
            SyncCall::Start(vec![1]),
            SyncCall::LockAll { nocheck: false },
            SyncCall::Free,
        ] {
            assert!(p.lock(1, X, false));
            assert!(
                matches!(s.m[0].sync(call.clone()), Err(OscError::Sync(_))),
                "{call:?}"
            );
            assert!(!p.lock(2, X, false), "the module holds an epoch now");
            assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        }
        // An accumulate in a lock of the path: the module's check sees the lock.
        assert!(p.lock(1, X, false));
        s.m[0]
            .accumulate_from(1, 16, &[(0, 8)], AccOp::Sum, Elem::U64, &u64s(5), false)
            .unwrap();
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        assert_eq!(s.mem[1][16..24], u64s(5));
        // MPI_MODE_NOCHECK: no word touched (rank 2 takes it exclusively meanwhile).
        assert!(p.lock(1, X, true));
        assert_eq!(s.sync(2, lock(1, X)), Some(Ok(())));
        assert!(p.unlock(1));
        assert_eq!(s.sync(2, SyncCall::Unlock(1)), Some(Ok(())));
        // An access epoch of MPI_Win_start open: not free.
        assert_eq!(s.sync(1, SyncCall::Post(vec![0])), Some(Ok(())));
        assert_eq!(s.sync(0, SyncCall::Start(vec![1])), Some(Ok(())));
        assert!(!p.lock(2, X, false));
        assert_eq!(s.sync(0, SyncCall::Complete), Some(Ok(())));
        assert_eq!(s.sync(1, SyncCall::Wait), Some(Ok(())));
        assert!(p.lock(2, X, false), "free again");
        assert!(p.unlock(2));
    }

    /// The lent path's lock_all (the C library's `MPI_Win_lock_all`/`_unlock_all` on a
    /// window all of whose members' words are mapped): a shared lock on every member's
    /// word, this process's own included, taken together or not at all, only while the
    /// module has no epoch open; a lock_all, puts and an unlock_all make one CMA call per
    /// target and no call into the module. Whatever the module is called for next adopts
    /// the epoch as a lock_all: its checks see it (an unlock of one member, a lock, a fence
    /// are refused), and its unlock_all gives every word back.
    #[test]
    fn the_lent_paths_lock_all_takes_every_word_and_is_the_modules_once_called() {
        let mut s = cma_sim(3, 64);
        let p = s.m[0].lent_path().unwrap();
        let lock = |t, kind| SyncCall::Lock {
            kind,
            target: t,
            nocheck: false,
        };
        let all = SyncCall::LockAll { nocheck: false };
        use LockKind::{Exclusive as X, Shared as S};
        assert!(
            !p.lock_all(false),
            "not free before the first synchronization"
        );
        assert_eq!(s.sync(0, all.clone()), Some(Ok(())));
        assert!(!p.lock_all(false), "an epoch is open");
        assert_eq!(s.sync(0, SyncCall::UnlockAll), Some(Ok(())));
        let origin: Vec<u8> = (1..=8).collect();
        // SAFETY: `origin` outlives the path's use of it.
        let lent = unsafe { UserBuf::from_slice(&origin) };
        let mark = s.w.log.len();
        let calls = s.m[0].cma_calls;
        // Lock_all, two puts, unlock_all: no call into module 0. Exclusive locks of rank 1
        // (by rank 2) and of rank 0 itself (by rank 1) wait meanwhile.
        assert!(p.lock_all(false));
        s.m[2].sync(lock(1, X)).unwrap();
        s.m[1].sync(lock(0, X)).unwrap();
        s.run();
        assert_eq!(s.m[2].sync_done(), None, "rank 0 holds rank 1's word");
        assert_eq!(s.m[1].sync_done(), None, "rank 0 holds its own word");
        assert!(p.put(1, 8, lent) && p.put(2, 0, lent.slice(0, 4)));
        assert!(!p.put(0, 0, lent), "this process itself: the module's");
        assert!(!p.lock(1, S, false) && !p.lock_all(false), "held already");
        assert!(!p.unlock(1), "not MPI_Win_lock's: the module's");
        let allocs = rmca_test_support::alloc_count::allocations();
        assert!(p.unlock_all());
        assert_eq!(rmca_test_support::alloc_count::allocations(), allocs);
        assert_eq!(&s.mem[1][8..16], &origin[..]);
        assert_eq!(&s.mem[2][..4], &origin[..4]);
        assert!(!p.unlock_all(), "not locked: the module's error");
        assert!(matches!(
            s.m[0].sync(SyncCall::UnlockAll),
            Err(OscError::Sync(_))
        ));
        s.run();
        assert_eq!(
            s.m[2].sync_done(),
            Some(Ok(())),
            "given back at the unlock_all"
        );
        assert_eq!(s.m[1].sync_done(), Some(Ok(())), "its own word too");
        s.m[0].lent_counts();
        assert_eq!(s.m[0].counts.lent_locks, 1);
        assert_eq!(s.m[0].cma_calls - calls, 2, "one per target");
        assert!(
            (1..3).all(|t| s.kinds_sent_since(mark, 0, t).is_empty()) && s.w.xfers.is_empty(),
            "no message, no BTL transfer"
        );
        // One word held exclusively by another: none taken (rank 1 locks rank 0 at once
        // meanwhile: rank 0's own word was given back).
        assert!(!p.lock_all(false), "rank 2 holds rank 1's word");
        assert_eq!(s.sync(1, SyncCall::Unlock(0)), Some(Ok(())));
        assert_eq!(s.sync(1, lock(0, X)), Some(Ok(())), "rank 0's word is free");
        assert_eq!(s.sync(1, SyncCall::Unlock(0)), Some(Ok(())));
        assert_eq!(s.sync(2, SyncCall::Unlock(1)), Some(Ok(())));
        // Adopted by the module: an unlock of one member, a lock, a fence are its errors;
        // an accumulate goes in the epoch; its unlock_all gives every word back.
        assert!(p.lock_all(false));
        for call in [
            SyncCall::Unlock(1),
            lock(2, S),
            SyncCall::Fence { succeed: true },
            all.clone(),
        ] {
            assert!(
                matches!(s.m[0].sync(call.clone()), Err(OscError::Sync(_))),
                "{call:?}"
            );
        }
        assert!(!p.unlock_all(), "adopted: the module's");
        assert!(p.put(2, 8, lent.slice(0, 2)), "the epoch is still open");
        s.m[0]
            .accumulate_from(1, 16, &[(0, 8)], AccOp::Sum, Elem::U64, &u64s(5), false)
            .unwrap();
        assert_eq!(s.sync(0, SyncCall::UnlockAll), Some(Ok(())));
        assert_eq!(s.mem[1][16..24], u64s(5));
        assert_eq!(&s.mem[2][8..10], [1, 2]);
        for t in 0..3 {
            assert_eq!(s.sync(2, lock(t, X)), Some(Ok(())), "word {t} given back");
            assert_eq!(s.sync(2, SyncCall::Unlock(t)), Some(Ok(())));
        }
        // MPI_MODE_NOCHECK: no word touched (rank 2 takes one exclusively meanwhile).
        assert!(p.lock_all(true));
        assert_eq!(s.sync(2, lock(1, X)), Some(Ok(())));
        assert!(p.unlock_all());
        assert_eq!(s.sync(2, SyncCall::Unlock(1)), Some(Ok(())));
        // A lock of the path and its lock_all exclude each other.
        assert!(p.lock(1, S, false));
        assert!(!p.lock_all(false));
        assert!(p.unlock(1));
        assert!(p.lock_all(false) && p.unlock_all(), "free again");
    }

    /// A lent-path unlock whose CMA call fails leaves the lock and the queue to the module,
    /// whose unlock moves what it can by the BTLs (CMA does not reach the target), finishes
    /// once those are complete, and gives the word back.
    #[test]
    fn a_lent_unlock_that_cma_fails_is_the_modules() {
        let mut s = cma_sim(2, 16);
        let p = s.m[0].lent_path().unwrap();
        let lock = SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 1,
            nocheck: false,
        };
        assert_eq!(s.sync(0, lock.clone()), Some(Ok(())));
        assert_eq!(s.sync(0, SyncCall::Unlock(1)), Some(Ok(())));
        assert!(p.lock(1, LockKind::Exclusive, false));
        // (The target's pid as the path knows it: no such process.)
        if let (Some(Some(page)), Some(Peer::Rdma { base, .. })) =
            (s.m[0].pages.get(1), s.m[0].peers.get(1))
        {
            let l = s.m[0].lent.as_ref().unwrap();
            l.reach(1, i32::MAX as u32, *base, page.lock_word());
        }
        let origin = vec![3u8, 4];
        // SAFETY: `origin` outlives the module's use of it.
        let lent = unsafe { UserBuf::from_slice(&origin) };
        assert!(p.put(1, 2, lent));
        assert!(!p.unlock(1), "CMA refused");
        s.m[0].cma_pid[1] = Some(i32::MAX as u32);
        s.m[0].sync(SyncCall::Unlock(1)).unwrap();
        s.run();
        assert_eq!(
            s.m[0].sync_done(),
            None,
            "the BTL's transfer is not complete"
        );
        s.m[1].sync(lock.clone()).unwrap();
        s.run();
        assert_eq!(s.m[1].sync_done(), None, "rank 0 still holds the word");
        s.w.complete_all();
        s.run();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        assert_eq!(&s.mem[1][2..4], [3, 4]);
        s.run();
        assert_eq!(s.m[1].sync_done(), Some(Ok(())), "given back");
        assert!(!p.lock(1, LockKind::Shared, false), "CMA does not reach it");
    }

    mod lent_locks_and_the_others {
        use super::*;
        use proptest::prelude::*;

        /// One origin's read-modify-write of the target's counter under an exclusive lock.
        #[derive(Debug)]
        enum St {
            Idle,
            /// The module's lock requested.
            Locking,
            Locked,
            /// The module's get and its flush issued.
            Reading(OpId),
            /// The lent path's get queued, the module's flush issued.
            ReadingInto,
            /// The counter read.
            Have(u64),
            /// The module's unlock issued.
            Unlocking,
            /// Rank 0 holds a lock_all of the lent path, and read the counter in it.
            All(u64),
            /// The module's unlock_all issued (of a lock_all it adopted).
            UnlockingAll,
        }

        const T: usize = 3;

        /// Advance origin `o` by one step (`lent`: by the lent path where it may); true
        /// when a cycle ended.
        fn advance(
            s: &mut Sim,
            o: usize,
            st: &mut St,
            p: Option<&Rc<dyn LentPath>>,
            out: &mut [u8; 8],
            inb: &mut [u8; 8],
        ) -> bool {
            let excl = SyncCall::Lock {
                kind: LockKind::Exclusive,
                target: T,
                nocheck: false,
            };
            // SAFETY: the origin's buffers outlive the Sim's use of them (each operation
            // completes before the step that reads or rewrites them).
            let (src, dst) = unsafe { (UserBuf::from_slice(out), UserBuf::from_mut_slice(inb)) };
            match std::mem::replace(st, St::Idle) {
                // Every third cycle of rank 0's, a shared lock_all by the lent path that
                // reads the counter (no other origin may change it meanwhile).
                St::Idle
                    if u64::from_ne_bytes(*out) % 3 == 1
                        && p.is_some_and(|p| p.lock_all(false)) =>
                {
                    let p = p.unwrap();
                    assert!(p.get(T, 0, dst) && p.flush(T), "the lock_all's own");
                    *out = (u64::from_ne_bytes(*out) + 1).to_ne_bytes();
                    *st = St::All(u64::from_ne_bytes(*inb));
                }
                St::All(_) => match p {
                    Some(p) if p.unlock_all() => {}
                    _ => {
                        s.m[o].sync(SyncCall::UnlockAll).unwrap();
                        *st = St::UnlockingAll;
                    }
                },
                St::UnlockingAll => {
                    if s.m[o].sync_done().is_none() {
                        *st = St::UnlockingAll;
                    }
                }
                St::Idle => {
                    if p.is_some_and(|p| p.lock(T, LockKind::Exclusive, false)) {
                        *st = St::Locked;
                    } else {
                        s.m[o].sync(excl).unwrap();
                        *st = St::Locking;
                    }
                }
                St::Locking => {
                    *st = match s.m[o].sync_done() {
                        Some(r) => {
                            r.unwrap();
                            St::Locked
                        }
                        None => St::Locking,
                    }
                }
                St::Locked => match p {
                    Some(p) if p.get(T, 0, dst) => {
                        *st = if p.flush(T) {
                            St::Have(u64::from_ne_bytes(*inb))
                        } else {
                            s.m[o].sync(SyncCall::Flush(Some(T))).unwrap();
                            St::ReadingInto
                        };
                    }
                    _ => {
                        let id = s.m[o].get(T, 0, &Layout::contiguous(8)).unwrap();
                        s.m[o].sync(SyncCall::Flush(Some(T))).unwrap();
                        *st = St::Reading(id);
                    }
                },
                St::Reading(id) => {
                    *st = match s.m[o].sync_done() {
                        Some(r) => {
                            r.unwrap();
                            let v = s.m[o].poll_op(id).unwrap().unwrap();
                            St::Have(u64::from_ne_bytes(v[..8].try_into().unwrap()))
                        }
                        None => St::Reading(id),
                    }
                }
                St::ReadingInto => {
                    *st = match s.m[o].sync_done() {
                        Some(r) => {
                            r.unwrap();
                            St::Have(u64::from_ne_bytes(*inb))
                        }
                        None => St::ReadingInto,
                    }
                }
                St::Have(v) => {
                    *out = (v + 1).to_ne_bytes();
                    match p {
                        Some(p) if p.put(T, 0, src) => {
                            if p.unlock(T) {
                                return true;
                            }
                        }
                        _ => {
                            s.m[o]
                                .put(T, 0, &Layout::contiguous(8), out.to_vec())
                                .unwrap();
                        }
                    }
                    s.m[o].sync(SyncCall::Unlock(T)).unwrap();
                    *st = St::Unlocking;
                }
                St::Unlocking => match s.m[o].sync_done() {
                    Some(r) => {
                        r.unwrap();
                        return true;
                    }
                    None => *st = St::Unlocking,
                },
            }
            false
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            /// Three origins increment rank 3's counter, each by reading it and writing it
            /// back under an exclusive lock: rank 0 by the lent path where it may (its lock
            /// an atomic on the word; its get and put moved by CMA) or by its module (which
            /// adopts the path's lock when called within it), rank 1 by its module's word
            /// locks, rank 2 by messages (a member without the words: rank 3 grants it by
            /// taking its own word). Every third cycle of its own, rank 0 takes a lock_all
            /// by the lent path instead and reads the counter, which no other origin may
            /// change until its unlock_all (the lent path's, or the module's once it adopted
            /// it). In any interleaving no increment is lost and every word is free at the end.
            #[test]
            fn lent_word_and_message_locks_exclude_each_other(
                // (Rank 0 the busiest, mostly by the lent path.)
                steps in proptest::collection::vec(
                    (prop_oneof![6 => Just(0usize), 1 => Just(1), 1 => Just(2)], prop::bool::weighted(0.8)),
                    1..240,
                ),
            ) {
                let mut s = Sim::build(4, 8, |r| r != 2);
                for r in [0, 1, 3] {
                    s.m[r].cma = s.m[r].lock_word.is_some();
                    for t in 0..4 {
                        s.m[r].lent_reach(t);
                    }
                }
                let path = s.m[0].lent_path();
                prop_assert!(path.is_some());
                let mut st = [St::Idle, St::Idle, St::Idle];
                let mut bufs = [[0u8; 8]; 6];
                let mut done = 0u64;
                let run = |s: &mut Sim, o: usize, lent: bool, st: &mut [St; 3], bufs: &mut [[u8; 8]; 6]| {
                    let (out, rest) = bufs[2 * o..].split_at_mut(1);
                    let p = path.as_ref().filter(|_| lent && o == 0);
                    let ended = advance(s, o, &mut st[o], p, &mut out[0], &mut rest[0]);
                    s.run();
                    s.w.complete_all();
                    s.run();
                    ended
                };
                for (o, lent) in steps {
                    done += u64::from(run(&mut s, o, lent, &mut st, &mut bufs));
                    if let St::All(v) = st[0] {
                        prop_assert_eq!(&s.mem[T][..8], &v.to_ne_bytes()[..], "changed under rank 0's lock_all");
                    }
                }
                // Every origin to the end of its cycle.
                for _ in 0..64 {
                    for o in 0..3 {
                        if !matches!(st[o], St::Idle) {
                            done += u64::from(run(&mut s, o, true, &mut st, &mut bufs));
                        }
                    }
                }
                prop_assert!(st.iter().all(|x| matches!(x, St::Idle)), "{:?}", st);
                prop_assert_eq!(&s.mem[T][..8], &done.to_ne_bytes()[..], "no increment lost");
                // Every word free: an exclusive lock of each member granted at once.
                for t in 0..4 {
                    prop_assert_eq!(s.sync(1, SyncCall::Lock { kind: LockKind::Exclusive, target: t, nocheck: false }), Some(Ok(())));
                    prop_assert_eq!(s.sync(1, SyncCall::Unlock(t)), Some(Ok(())));
                }
            }
        }
    }

    #[test]
    fn an_unlock_leaves_only_after_its_puts_completed() {
        let mut s = Sim::new(2, 16);
        let lock = SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 1,
            nocheck: false,
        };
        assert_eq!(s.sync(0, lock), Some(Ok(())));
        let layout = Layout {
            runs: vec![(0, 2), (8, 2)],
        };
        s.m[0].put(1, 2, &layout, vec![1, 2, 3, 4]).unwrap();
        s.run();
        assert_eq!(s.w.xfers.len(), 2, "one transfer per run");
        s.m[0].sync(SyncCall::Unlock(1)).unwrap();
        s.run();
        assert!(
            !s.kinds_sent(0, 1).contains(&UNLOCK),
            "unlock overtook the puts"
        );
        assert_eq!(s.m[0].sync_done(), None);
        assert_eq!(s.mem[1], [0; 16], "nothing placed yet");
        s.w.complete_all();
        s.run();
        assert!(s.kinds_sent(0, 1).contains(&UNLOCK));
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        assert_eq!(&s.mem[1][2..4], [1, 2]);
        assert_eq!(&s.mem[1][10..12], [3, 4]);
    }

    #[test]
    fn behind_a_lock_not_granted_yet_puts_and_gets_go_as_messages() {
        let mut s = Sim::new(3, 8);
        s.mem[2].copy_from_slice(&[9, 8, 7, 6, 5, 4, 3, 2]);
        let excl = SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 2,
            nocheck: false,
        };
        assert_eq!(s.sync(1, excl.clone()), Some(Ok(())));
        // Rank 1 holds the lock: rank 0's request waits, and so do its put and get, as
        // messages the target holds behind the request (no transfer waiting for a grant).
        assert_eq!(s.sync(0, excl.clone()), Some(Ok(())));
        s.m[0]
            .put(2, 0, &Layout::contiguous(4), vec![1; 4])
            .unwrap();
        let g = s.m[0].get(2, 4, &Layout::contiguous(4)).unwrap();
        s.m[0].sync(SyncCall::Unlock(2)).unwrap();
        s.run();
        assert!(
            s.w.xfers.is_empty(),
            "no RDMA for operations behind the request"
        );
        assert!(
            s.kinds_sent(0, 2).contains(&UNLOCK),
            "the unlock follows the request at once"
        );
        assert_eq!(s.m[0].sync_done(), None, "not granted yet");
        assert_eq!(
            s.mem[2][..4],
            [9, 8, 7, 6],
            "nothing written before the grant"
        );
        assert_eq!(s.sync(1, SyncCall::Unlock(2)), Some(Ok(())));
        s.run();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        assert_eq!(s.m[0].poll_op(g), Some(Ok(vec![5, 4, 3, 2])));
        assert_eq!(s.mem[2][..4], [1; 4]);
        // Granted (the next epoch's lock came back before the operation): by RDMA.
        assert_eq!(s.sync(0, excl), Some(Ok(())));
        s.run();
        s.m[0]
            .put(2, 4, &Layout::contiguous(4), vec![3; 4])
            .unwrap();
        s.run();
        assert_eq!(s.w.xfers.len(), 1, "granted: the put moves by RDMA");
        s.w.complete_all();
        assert_eq!(s.sync(0, SyncCall::Unlock(2)), Some(Ok(())));
        assert_eq!(s.mem[2][4..], [3; 4]);
    }

    #[test]
    fn a_fence_waits_for_the_gets_and_holds_fenced_until_then() {
        let mut s = Sim::new(3, 8);
        s.mem[2].copy_from_slice(&[9, 8, 7, 6, 5, 4, 3, 2]);
        for r in 0..3 {
            s.m[r].sync(SyncCall::Fence { succeed: true }).unwrap();
        }
        s.run();
        for r in 0..3 {
            assert_eq!(s.m[r].sync_done(), Some(Ok(())));
        }
        let id = s.m[0].get(2, 4, &Layout::contiguous(4)).unwrap();
        let mark = s.w.log.len();
        for r in 0..3 {
            s.m[r].sync(SyncCall::Fence { succeed: false }).unwrap();
        }
        s.run();
        // No operation went as a message: every fence is quiet, and rank 0's goes to nobody
        // (rank 1 included) before its get from rank 2 ended.
        for to in 0..3 {
            assert!(!s.kinds_sent_since(mark, 0, to).contains(&FENCE_QUIET));
        }
        assert!(s.kinds_sent_since(mark, 1, 0).contains(&FENCE_QUIET));
        assert_eq!(s.m[0].poll_op(id), None);
        assert!((0..3).all(|r| s.m[r].sync_done().is_none()));
        s.w.complete_all();
        s.run();
        for r in 0..3 {
            assert_eq!(s.m[r].sync_done(), Some(Ok(())), "rank {r}");
        }
        assert_eq!(s.m[0].poll_op(id), Some(Ok(vec![5, 4, 3, 2])));
        // A quiet round needs no second one: no Fenced from anybody.
        for (from, to) in (0..3).flat_map(|f| (0..3).map(move |t| (f, t))) {
            let kinds = s.kinds_sent_since(mark, from, to);
            assert!(
                !kinds.contains(&FENCED) && !kinds.contains(&FENCE),
                "{from} to {to}"
            );
        }
        // An accumulate (a message: no accumulate words here) makes rank 0's next fence
        // loud: every member then sends Fenced, rank 0's only behind its transfers.
        for r in 0..3 {
            s.m[r].sync(SyncCall::Fence { succeed: true }).unwrap();
        }
        s.run();
        for r in 0..3 {
            assert_eq!(s.m[r].sync_done(), Some(Ok(())));
        }
        let id = s.m[0].get(2, 4, &Layout::contiguous(4)).unwrap();
        s.m[0]
            .accumulate(
                1,
                0,
                &Layout::contiguous(4),
                AccOp::Sum,
                Elem::U32,
                vec![1, 0, 0, 0],
                false,
            )
            .unwrap();
        let mark = s.w.log.len();
        for r in 0..3 {
            s.m[r].sync(SyncCall::Fence { succeed: false }).unwrap();
        }
        s.run();
        for to in 0..3 {
            assert!(!s.kinds_sent_since(mark, 0, to).contains(&FENCED));
        }
        assert!(s.kinds_sent_since(mark, 1, 0).contains(&FENCED));
        assert!((0..3).all(|r| s.m[r].sync_done().is_none()));
        s.w.complete_all();
        s.run();
        for r in 0..3 {
            assert_eq!(s.m[r].sync_done(), Some(Ok(())), "rank {r}");
            // (To another member: a member's messages to itself are not sent.)
            let to = (r + 1) % 3;
            assert!(
                s.kinds_sent_since(mark, r, to).contains(&FENCED),
                "rank {r}"
            );
        }
        assert_eq!(s.m[0].poll_op(id), Some(Ok(vec![5, 4, 3, 2])));
        assert_eq!(s.mem[1][0], 1);
    }

    /// A fence by the host's collective: `fence_ready` waits for this member's transfers
    /// (not for the others'), says loud after an operation sent as a message, and a fence
    /// agreed quiet sends nothing and is counted.
    #[test]
    fn a_quiet_fence_waits_for_its_transfers_and_sends_nothing() {
        let mut s = Sim::new(3, 16);
        assert!((0..3).all(|r| s.m[r].fence_by_collective()));
        for r in 0..3 {
            s.m[r].sync(SyncCall::Fence { succeed: true }).unwrap();
        }
        s.run();
        for r in 0..3 {
            assert_eq!(s.m[r].sync_done(), Some(Ok(())), "rank {r}");
        }
        s.m[0]
            .put(1, 4, &Layout::contiguous(4), vec![9, 8, 7, 6])
            .unwrap();
        let mark = s.w.log.len();
        s.run();
        assert_eq!(s.m[0].fence_ready(), None, "its put is in flight");
        assert_eq!(s.m[1].fence_ready(), Some(Ok(false)));
        s.w.complete_all();
        s.run();
        assert_eq!(s.m[0].fence_ready(), Some(Ok(false)));
        for r in 0..3 {
            s.m[r].fence_agreed(true).unwrap();
        }
        s.run();
        for (from, to) in (0..3).flat_map(|f| (0..3).map(move |t| (f, t))) {
            assert!(
                s.kinds_sent_since(mark, from, to).is_empty(),
                "{from} to {to}"
            );
        }
        assert_eq!(&s.mem[1][4..8], &[9, 8, 7, 6]);
        assert!((0..3).all(|r| s.m[r].counts.fences_by_collective == 1));
        // An accumulate (a message here: no accumulate words) makes rank 0's fence loud.
        s.m[0]
            .accumulate(
                2,
                0,
                &Layout::contiguous(4),
                AccOp::Sum,
                Elem::U32,
                vec![1, 0, 0, 0],
                false,
            )
            .unwrap();
        assert_eq!(s.m[0].fence_ready(), Some(Ok(true)));
        assert_eq!(s.m[2].fence_ready(), Some(Ok(false)));
    }

    #[test]
    fn out_of_range_or_outside_an_epoch_nothing_is_transferred() {
        let mut s = Sim::new(2, 8);
        assert!(matches!(
            s.m[0].put(1, 0, &Layout::contiguous(4), vec![1; 4]),
            Err(OscError::Sync(_))
        ));
        s.m[0].sync(SyncCall::LockAll { nocheck: false }).unwrap();
        s.run();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        assert!(matches!(
            s.m[0].put(1, 6, &Layout::contiguous(4), vec![1; 4]),
            Err(OscError::Range(_))
        ));
        let negative = Layout {
            runs: vec![(-1, 2)],
        };
        assert!(matches!(
            s.m[0].get(1, 0, &negative),
            Err(OscError::Range(_))
        ));
        assert!(matches!(
            s.m[0].put(1, 0, &Layout::contiguous(4), vec![1; 3]),
            Err(OscError::Arg(_))
        ));
        s.run();
        assert!(s.w.xfers.is_empty());
        assert_eq!(s.sync(0, SyncCall::UnlockAll), Some(Ok(())));
        assert_eq!(s.mem[1], [0; 8]);
    }

    #[test]
    fn keys_messages_and_osc_am_messages_cannot_be_mistaken() {
        let keys = RdmaKeys {
            keys: vec![("sim".into(), vec![1, 2])],
        };
        for m in [
            RdmaModule::keys_message(Some((7, &keys))),
            RdmaModule::keys_message(None),
        ] {
            assert!(rmca_osc_am::wire::RESERVED_KINDS.contains(&m[0]));
            assert_eq!(Msg::decode(&m), None, "a keys message read as osc-am's");
            assert!(RdmaModule::parse_keys(&m).is_some());
        }
        // The other way: what the engine sends is never taken for keys by `progress`.
        for m in [
            Msg::Fence,
            Msg::Flush,
            Msg::Ack,
            Msg::Free,
            Msg::Unlock,
            Msg::Granted,
        ] {
            assert_ne!(m.encode().first(), Some(&KEYS), "{m:?}");
        }
    }

    #[test]
    fn a_malformed_keys_message_leaves_the_peer_to_messages() {
        let mut s = Sim::new(2, 8);
        s.w.queues
            .entry((1, 0))
            .or_default()
            .push_back(vec![KEYS, 1, 0xFF]);
        s.run();
        assert!(matches!(s.m[0].peers[1], Peer::Messages));
        assert_eq!(
            s.sync(0, SyncCall::LockAll { nocheck: false }),
            Some(Ok(()))
        );
        s.m[0]
            .put(1, 0, &Layout::contiguous(4), vec![1, 2, 3, 4])
            .unwrap();
        s.run();
        assert!(s.w.xfers.is_empty(), "no RDMA without the peer's keys");
        assert_eq!(s.sync(0, SyncCall::UnlockAll), Some(Ok(())));
        assert_eq!(s.mem[1][..4], [1, 2, 3, 4]);
    }

    #[test]
    fn a_get_of_no_bytes_completes_with_an_empty_result_and_no_transfer() {
        let mut s = Sim::new(2, 8);
        assert_eq!(
            s.sync(0, SyncCall::LockAll { nocheck: false }),
            Some(Ok(()))
        );
        let id = s.m[0].get(1, 0, &Layout::contiguous(0)).unwrap();
        s.run();
        assert!(s.w.xfers.is_empty());
        assert_eq!(s.m[0].poll_op(id), Some(Ok(Vec::new())));
        assert_eq!(s.sync(0, SyncCall::UnlockAll), Some(Ok(())));
    }

    #[test]
    fn accumulates_go_to_the_target_behind_the_puts() {
        let mut s = Sim::new(2, 8);
        let lock = SyncCall::Lock {
            kind: LockKind::Shared,
            target: 1,
            nocheck: true,
        };
        assert_eq!(s.sync(0, lock), Some(Ok(())));
        s.m[0]
            .put(1, 0, &Layout::contiguous(4), 5i32.to_ne_bytes().to_vec())
            .unwrap();
        s.m[0]
            .accumulate(
                1,
                4,
                &Layout::contiguous(4),
                AccOp::Sum,
                Elem::I32,
                3i32.to_ne_bytes().to_vec(),
                false,
            )
            .unwrap();
        s.run();
        // The accumulate waits for the put before it to the same target.
        assert_eq!(s.mem[1][4..], [0; 4]);
        s.w.complete_all();
        s.m[0].sync(SyncCall::Flush(Some(1))).unwrap();
        s.run();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        assert_eq!(s.mem[1][..4], 5i32.to_ne_bytes());
        assert_eq!(s.mem[1][4..], 3i32.to_ne_bytes());
    }

    const ACC: u8 = 3;

    fn u64s(v: u64) -> Vec<u8> {
        v.to_ne_bytes().to_vec()
    }

    fn fop(m: &mut RdmaModule, v: u64, fetch: bool) -> OpId {
        m.accumulate_from(
            1,
            0,
            &[(0, 8)],
            AccOp::Sum,
            Elem::U64,
            &v.to_ne_bytes(),
            fetch,
        )
        .unwrap()
    }

    /// On a member of its node an origin applies accumulates, fetch-and-ops and
    /// compare-and-swaps itself: complete when issued, no message, a flush with no round
    /// trip; refusals are the engine's, with nothing written.
    #[test]
    fn a_node_members_accumulates_are_applied_by_the_origin_with_no_message() {
        let mut s = Sim::build_acc(2, 16, |_| false, |_| true);
        assert_eq!(s.sync(0, SyncCall::LockAll { nocheck: true }), Some(Ok(())));
        let mark = s.w.log.len();
        let a = fop(&mut s.m[0], 5, true);
        assert_eq!(s.m[0].poll_op(a), Some(Ok(u64s(0))), "complete at once");
        assert_eq!(s.mem[1][..8], u64s(5));
        let b = fop(&mut s.m[0], 2, false);
        assert_eq!(s.m[0].poll_op(b), Some(Ok(Vec::new())));
        let c = s.m[0]
            .compare_and_swap(1, 0, Elem::U64, u64s(7), u64s(40))
            .unwrap();
        assert_eq!(s.m[0].poll_op(c), Some(Ok(u64s(7))));
        let d = s.m[0]
            .accumulate(
                1,
                8,
                &Layout::contiguous(4),
                AccOp::NoOp,
                Elem::I32,
                Vec::new(),
                true,
            )
            .unwrap();
        assert_eq!(s.m[0].poll_op(d), Some(Ok(vec![0; 4])));
        assert_eq!(s.mem[1][..8], u64s(40));
        s.m[0].sync(SyncCall::Flush(Some(1))).unwrap();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())), "nothing to wait for");
        s.run();
        assert!(s.kinds_sent_since(mark, 0, 1).is_empty(), "no message");
        // Refused as the engine refuses: outside the window, a wrong length, an operation
        // the type has not; nothing written.
        let far = s.m[0].accumulate_from(1, 12, &[(0, 8)], AccOp::Sum, Elem::U64, &[1; 8], false);
        assert!(matches!(far, Err(OscError::Range(_))), "{far:?}");
        let short = s.m[0].accumulate_from(1, 0, &[(0, 8)], AccOp::Sum, Elem::U64, &[1; 4], false);
        assert!(matches!(short, Err(OscError::Arg(_))), "{short:?}");
        let op = s.m[0].accumulate_from(1, 0, &[(0, 8)], AccOp::BAnd, Elem::F64, &[1; 8], false);
        assert!(matches!(op, Err(OscError::Op(_))), "{op:?}");
        let cas = s.m[0].compare_and_swap(1, 12, Elem::U64, u64s(0), u64s(1));
        assert!(matches!(cas, Err(OscError::Range(_))), "{cas:?}");
        assert_eq!(s.mem[1][..8], u64s(40));
        assert_eq!(s.mem[1][8..], [0; 8]);
        assert_eq!(s.sync(0, SyncCall::UnlockAll), Some(Ok(())));
        // Outside an epoch: refused.
        assert!(matches!(
            s.m[0].accumulate_from(1, 0, &[(0, 8)], AccOp::Sum, Elem::U64, &[1; 8], false),
            Err(OscError::Sync(_))
        ));
        // Without the words (osc_rdma_acc_direct=0): messages, applied by the target.
        let mut s = Sim::build_acc(2, 16, |_| false, |_| false);
        assert_eq!(s.sync(0, SyncCall::LockAll { nocheck: true }), Some(Ok(())));
        let a = fop(&mut s.m[0], 5, true);
        assert_eq!(s.m[0].poll_op(a), None);
        s.run();
        assert_eq!(s.m[0].poll_op(a), Some(Ok(u64s(0))));
        assert!(s.kinds_sent(0, 1).contains(&ACC));
    }

    /// The calls that complete within the call write the program's result buffer at once;
    /// refusals are the engine's; without the words they are not taken.
    #[test]
    fn accumulate_and_compare_and_swap_at_once_on_a_node_member() {
        let mut s = Sim::build_acc(2, 16, |_| false, |_| true);
        assert_eq!(s.sync(0, SyncCall::LockAll { nocheck: true }), Some(Ok(())));
        let mut old = [9u8; 8];
        let r = s.m[0].accumulate_at_once(
            1,
            0,
            &[(0, 8)],
            AccOp::Sum,
            Elem::U64,
            &3u64.to_ne_bytes(),
            Some(&mut old),
        );
        assert_eq!(r, Some(Ok(())));
        assert_eq!((old, &s.mem[1][..8]), (0u64.to_ne_bytes(), &u64s(3)[..]));
        let r = s.m[0].compare_and_swap_at_once(1, 0, Elem::U64, &u64s(3), &u64s(8), &mut old);
        assert_eq!(r, Some(Ok(())));
        assert_eq!((old, &s.mem[1][..8]), (3u64.to_ne_bytes(), &u64s(8)[..]));
        let far = s.m[0].accumulate_at_once(1, 12, &[(0, 8)], AccOp::Sum, Elem::U64, &[1; 8], None);
        assert!(matches!(far, Some(Err(OscError::Range(_)))), "{far:?}");
        let short = s.m[0].accumulate_at_once(
            1,
            0,
            &[(0, 8)],
            AccOp::Sum,
            Elem::U64,
            &[1; 8],
            Some(&mut old[..4]),
        );
        assert!(matches!(short, Some(Err(OscError::Arg(_)))), "{short:?}");
        assert_eq!(s.mem[1][..8], u64s(8), "nothing written");
        assert_eq!(s.sync(0, SyncCall::UnlockAll), Some(Ok(())));
        let mut s = Sim::build_acc(2, 16, |_| false, |_| false);
        assert_eq!(s.sync(0, SyncCall::LockAll { nocheck: true }), Some(Ok(())));
        assert_eq!(
            s.m[0].accumulate_at_once(1, 0, &[(0, 8)], AccOp::Sum, Elem::U64, &[1; 8], None),
            None
        );
        assert_eq!(
            s.m[0].compare_and_swap_at_once(1, 0, Elem::U64, &u64s(0), &u64s(1), &mut old),
            None
        );
        assert_eq!(s.sync(0, SyncCall::UnlockAll), Some(Ok(())));
    }

    /// Each path's events reach the process's counter registry once, when the window is
    /// freed (the profile's `osc.rdma.*`), not before, and not again when it is dropped.
    #[test]
    fn the_accumulate_paths_are_counted_into_the_registry_at_free() {
        let mut s = Sim::build_acc(2, 16, |_| false, |_| true);
        let reg = rmca_framework::counters::CounterRegistry::new();
        for m in &mut s.m {
            m.counters = reg.clone();
        }
        assert_eq!(s.sync(0, SyncCall::LockAll { nocheck: true }), Some(Ok(())));
        let mut old = [0u8; 8];
        let sum = |s: &mut Sim, t: usize| {
            s.m[0].accumulate_at_once(t, 0, &[(0, 8)], AccOp::Sum, Elem::U64, &u64s(1), None)
        };
        assert_eq!(sum(&mut s, 1), Some(Ok(())));
        assert_eq!(sum(&mut s, 0), Some(Ok(())));
        let r = s.m[0].compare_and_swap_at_once(1, 0, Elem::U64, &u64s(1), &u64s(5), &mut old);
        assert_eq!(r, Some(Ok(())));
        assert_eq!(s.sync(0, SyncCall::UnlockAll), Some(Ok(())));
        assert!(reg.snapshot().is_empty(), "nothing before the free");
        for r in 0..2 {
            s.m[r].sync(SyncCall::Free).unwrap();
        }
        s.run();
        for r in 0..2 {
            assert_eq!(s.m[r].sync_done(), Some(Ok(())));
        }
        let got = |reg: &rmca_framework::counters::CounterRegistry, name: &str| {
            reg.snapshot()
                .into_iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v)
        };
        let expect = [
            ("osc.rdma.acc_cma", 2),
            ("osc.rdma.acc_self", 1),
            ("osc.rdma.acc_slot_posted", 0),
            ("osc.rdma.acc_slot_served", 0),
            ("osc.rdma.acc_slot_claimed_back", 0),
        ];
        for (name, n) in expect {
            assert_eq!(got(&reg, name), Some(n), "{name}: {:?}", reg.snapshot());
        }
        drop(s);
        assert_eq!(got(&reg, "osc.rdma.acc_cma"), Some(2), "reported once");
    }

    /// An accumulate applied directly never overtakes one this origin sent the target as a
    /// message that may not be applied yet (accumulate_ordering).
    #[test]
    fn a_direct_accumulate_waits_for_the_origins_messages_to_the_target() {
        // No lock words: rank 0's lock is a message, its first fetch-and-add goes behind it.
        let mut s = Sim::build_acc(2, 16, |_| false, |_| true);
        let excl = SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 1,
            nocheck: false,
        };
        s.m[0].sync(excl).unwrap();
        let first = fop(&mut s.m[0], 1, true);
        fn port(w: &mut World, me: usize) -> Port<'_> {
            Port { w, me }
        }
        s.m[0].progress(&mut port(&mut s.w, 0));
        // The lock request reaches the target, the accumulate behind it is still on its way
        // when the grant comes back.
        let q = s.w.queues.get_mut(&(0, 1)).unwrap();
        assert_eq!(q.len(), 2);
        let late = q.pop_back().unwrap();
        assert_eq!(late[0], ACC);
        s.m[1].progress(&mut port(&mut s.w, 1));
        s.m[0].progress(&mut port(&mut s.w, 0));
        assert!(s.m[0].engine.granted(1));
        let second = fop(&mut s.m[0], 10, true);
        assert_eq!(s.mem[1][..8], u64s(0), "not applied before the first");
        s.w.queues.get_mut(&(0, 1)).unwrap().push_front(late);
        s.m[0].sync(SyncCall::Unlock(1)).unwrap();
        s.run();
        assert_eq!(s.m[0].sync_done(), Some(Ok(())));
        assert_eq!(s.m[0].poll_op(first), Some(Ok(u64s(0))));
        assert_eq!(s.m[0].poll_op(second), Some(Ok(u64s(1))), "in order");
        // Every message known applied: direct again.
        assert_eq!(s.sync(0, SyncCall::LockAll { nocheck: true }), Some(Ok(())));
        let mark = s.w.log.len();
        let third = fop(&mut s.m[0], 100, true);
        assert_eq!(s.m[0].poll_op(third), Some(Ok(u64s(11))));
        assert!(!s.kinds_sent_since(mark, 0, 1).contains(&ACC));
        assert_eq!(s.sync(0, SyncCall::UnlockAll), Some(Ok(())));
    }

    /// The target's own accumulate word excludes the origins that apply theirs directly
    /// from its application of those that came as messages: a direct fetch-and-add done
    /// while another origin's message is being applied (a thread holding the word here)
    /// waits for it.
    #[test]
    fn a_direct_accumulate_waits_for_the_targets_accumulate_word() {
        let mut s = Sim::build_acc(2, 16, |_| false, |_| true);
        assert_eq!(s.sync(0, SyncCall::LockAll { nocheck: true }), Some(Ok(())));
        let page = s.m[0].pages[1].as_ref().unwrap();
        // The word's address (the object stays mapped while the module lives).
        let word = page.acc_word() as *const std::sync::atomic::AtomicU64 as usize;
        let at = s.mem[1].as_mut_ptr() as usize;
        // SAFETY: the mapped word, alive until the thread is joined.
        let w = unsafe { &*(word as *const std::sync::atomic::AtomicU64) };
        rmca_osc_am::lockword::acc_lock(w);
        let (read, was_read) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            // SAFETY: the target's memory and its word, alive until joined.
            let (w, p) = unsafe {
                (
                    &*(word as *const std::sync::atomic::AtomicU64),
                    at as *mut u64,
                )
            };
            // SAFETY: under the word.
            let v = unsafe { p.read_volatile() };
            read.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(30));
            // SAFETY: under the word.
            unsafe { p.write_volatile(v + 1) };
            rmca_osc_am::lockword::acc_unlock(w);
        });
        was_read.recv().unwrap();
        let id = fop(&mut s.m[0], 10, true);
        holder.join().unwrap();
        assert_eq!(s.m[0].poll_op(id), Some(Ok(u64s(1))), "after the holder's");
        assert_eq!(s.mem[1][..8], u64s(11));
        assert_eq!(s.sync(0, SyncCall::UnlockAll), Some(Ok(())));
    }

    mod direct_and_messages {
        use super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Step {
            /// The next operation of origin 0 or 2 (fetching or not, adding `v`).
            Op { origin: bool, fetch: bool, v: u8 },
            /// One progress of rank `r`.
            Progress(usize),
            /// A flush of the origin to the target, run to its end.
            Flush(bool),
        }

        fn step() -> impl Strategy<Value = Step> {
            prop_oneof![
                3 => (any::<bool>(), any::<bool>(), 1u8..20)
                    .prop_map(|(origin, fetch, v)| Step::Op { origin, fetch, v }),
                3 => (0usize..3).prop_map(Step::Progress),
                1 => any::<bool>().prop_map(Step::Flush),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            /// Rank 0 applies its accumulates to rank 1 by CMA when it may (its lock by a
            /// word, or by message when `words0` is false: then its first ones go as
            /// messages), rank 2 sends them all as messages; in any interleaving of their
            /// operations and the ranks' progress, no update is lost and each origin's
            /// fetch-and-adds see the counter grow in their issue order.
            #[test]
            fn direct_and_message_accumulators_lose_nothing_and_keep_each_origins_order(
                words0 in any::<bool>(),
                steps in proptest::collection::vec(step(), 1..60),
            ) {
                let mut s = Sim::build_acc(3, 8, |r| r == 0 && words0, |r| r != 2);
                for o in [0, 2] {
                    s.m[o].sync(SyncCall::LockAll { nocheck: false }).unwrap();
                }
                let mut ids: [Vec<(OpId, bool)>; 3] = Default::default();
                let mut total = 0u64;
                for st in steps {
                    match st {
                        Step::Op { origin, fetch, v } => {
                            let o = if origin { 2 } else { 0 };
                            // (Once its lock_all returned.)
                            if s.m[o].sync_done().is_some() {
                                total += u64::from(v);
                                let id = fop(&mut s.m[o], u64::from(v), fetch);
                                ids[o].push((id, fetch));
                            }
                        }
                        Step::Progress(r) => {
                            s.m[r].progress(&mut Port { w: &mut s.w, me: r });
                        }
                        Step::Flush(origin) => {
                            let o = if origin { 2 } else { 0 };
                            if s.m[o].sync_done().is_some() {
                                s.m[o].sync(SyncCall::Flush(Some(1))).unwrap();
                                s.run();
                                prop_assert_eq!(s.m[o].sync_done(), Some(Ok(())));
                            }
                        }
                    }
                }
                s.run();
                for o in [0, 2] {
                    prop_assert_eq!(s.m[o].sync_done(), Some(Ok(())), "rank {}'s lock_all", o);
                    s.m[o].sync(SyncCall::UnlockAll).unwrap();
                }
                s.run();
                for o in [0, 2] {
                    prop_assert_eq!(s.m[o].sync_done(), Some(Ok(())));
                }
                prop_assert_eq!(&s.mem[1][..], &u64s(total)[..], "no update lost");
                for o in [0, 2] {
                    let mut last = None;
                    for &(id, fetch) in &ids[o] {
                        let r = s.m[o].poll_op(id);
                        prop_assert!(matches!(r, Some(Ok(_))), "{:?}", r);
                        if fetch {
                            let v = u64::from_ne_bytes(r.unwrap().unwrap()[..8].try_into().unwrap());
                            prop_assert!(last.is_none_or(|l| l < v), "rank {} saw {} after {:?}", o, v, last);
                            last = Some(v);
                        }
                    }
                }
            }
        }
    }
}
