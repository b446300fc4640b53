//! coll-sm: collectives of communicators whose members all share a node, through one shared
//! segment per communicator and no message, as Open MPI's coll/sm (and xhc).
//!
//! Barrier, bcast, reduce, allreduce, allgather, alltoall, allgatherv, alltoallv,
//! reduce_scatter (and its block form), gather and scatter of at most `coll_sm_max_size`
//! bytes (an allgather(v)'s largest block, an alltoall(v)'s or reduce_scatter's whole input,
//! a gather's block, a scatter's whole input; an alltoallv's members agree through the
//! segment whether every input fits) run as
//! [direct collectives](rmca_framework::coll::DirectColl): flags and data slots in a segment
//! every member maps (the protocol is [`protocol`], a sans-IO state machine; the mapping is
//! [`segment`], the crate's only unsafe code). Longer ones, every other operation and every
//! non-blocking form fall through to the next component of the stack (coll-base), whose
//! schedules run over point-to-point messages.
//!
//! The segment is created at the communicator's first collective coll-sm runs: rank 0
//! creates it and broadcasts its name by messages, every member maps it, and rank 0 unlinks
//! the name once all have; the mapping goes when the communicator is freed (its module is
//! dropped). If the segment cannot be made (`/dev/shm` full, say), every member learns it in
//! the same set-up collective and coll-sm falls through for good on that communicator.
//!
//! Waiting follows the process's wait mode (`mpi_wait_mode`, see
//! [`rmca_framework::progress`]): each idle pass runs one progress pass of the runtime (so
//! point-to-point traffic and non-blocking collectives move meanwhile), spins, yields, and
//! in block mode (the default when a node's ranks outnumber its cores) sleeps on a futex on
//! the very word it waits for, which the rank that stores it wakes: a rank that posts reads
//! the sleeper count on its own control line, one load, and calls the kernel only when a
//! peer sleeps (in the spin and yield modes no wait sleeps, and a post reads nothing). A
//! sleep lasts at most the wait policy's block timeout (1 ms), so point-to-point traffic
//! that arrives meanwhile is still progressed. Where ranks share cores (the yield and block
//! modes), the last rank to arrive at a barrier yields its core once after releasing the
//! others, so that they run before it goes on to the next collective (see
//! [`protocol::Step::Posted`]).
//!
//! A member that dies does not hang the others: a wait that lasts checks, every
//! [`LIVENESS_INTERVAL`], whether the processes of the members it still waits for exist (their
//! pids are in the segment), and a dead one fails the collective with
//! [`DirectError::PeerFailed`] (MPI's process-failed class, through the communicator's error
//! handler); every later direct collective of that communicator fails with it at once.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod protocol;
pub mod segment;

use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rmca_framework::coll::{
    CollComponent, CollModule, CommShape, DirectColl, DirectEnv, DirectError, ReduceBytes,
};
use rmca_framework::component::{Component, ComponentMeta};
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore};
use rmca_framework::progress::{
    wait_hook_set, wait_mode, wait_policy, IdleAction, IdleState, ReleasingBackoff, WaitMode,
};

use protocol::{Layout, Mem, Op, Run, Step, Varying, Wait};
use segment::{Segment, SetupError};

/// Default priority: above coll-base's (10) and coll-hier's (40), which it never meets
/// (coll-hier serves communicators spanning nodes, coll-sm those on one node).
const PRIORITY: i32 = 50;
/// Default of `coll_sm_max_size`.
const MAX_SIZE: u64 = 16 << 10;
/// Default of `coll_sm_split_size`.
const SPLIT_SIZE: u64 = 2 << 10;
/// The largest `coll_sm_max_size`: a segment is 2 x members x this (larger values are
/// refused when the parameter is set, naming the range).
const MAX_SIZE_CAP: u64 = 64 << 20;
/// How often a waiting rank checks that the members it waits for still exist.
pub const LIVENESS_INTERVAL: Duration = Duration::from_millis(50);
/// Idle passes between two looks at the clock for [`LIVENESS_INTERVAL`] (a pass that spins
/// takes well under a microsecond, one that sleeps at most the block timeout).
const CLOCK_PASSES: u32 = 64;
/// Loads of the awaited word between two progress passes when ranks have cores of their own
/// (`mpi_wait_mode` spin): a progress pass takes longer than the other rank's store takes to
/// arrive, so looking only once per pass would add most of a pass to every hand-over (Open
/// MPI's coll/sm spins on its flag likewise). Plain loads, no `pause`: a virtual machine may
/// trap it (176 ns a pause on this host).
const SPIN_CHECKS: u32 = 128;
/// Idle passes a wait spins before it yields in the yield and block wait modes (at most
/// `mpi_wait_spin_passes`).
const OVERSUBSCRIBED_SPIN_PASSES: u32 = 1;

/// The coll-sm component.
#[derive(Debug)]
pub struct SmComponent;

/// The registered instance.
pub static SM: SmComponent = SmComponent;
rmca_framework::builtin_component!(Coll, SM);

impl Component for SmComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "sm",
            version: env!("CARGO_PKG_VERSION"),
            description: "Barrier, bcast, reduce, allreduce, allgather(v), alltoall(v), reduce_scatter(_block), gather, scatter through one shared segment per communicator, without messages (communicators on one node; longer or other operations fall through)",
        }
    }

    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        params.add(
            Param::int("priority", i64::from(PRIORITY))
                .range(0, 100)
                .help("Priority of coll-sm in a communicator's stack (it serves intra-communicators of at least two members, all on one node)")
                .level(Level::Tuning)
                .job_wide(),
        );
        params.add(
            Param::size("max_size", MAX_SIZE)
                .range(0, MAX_SIZE_CAP as i64)
                .help("Longest bcast, reduce, allreduce, allgather or gather block, or alltoall, reduce_scatter or scatter input (bytes) coll-sm runs; longer ones fall through to the next component. Each member's part of a communicator's segment holds two slots of this size (at most 64M)")
                .level(Level::Tuning)
                .job_wide(),
        );
        params.add(
            Param::size("split_size", SPLIT_SIZE)
                .help("Reductions of at least this many bytes share the combining among the members (each combines its part, then copies the others'; communicators of three or more members); shorter ones are combined whole by the root (every member for allreduce)")
                .level(Level::Tuning)
                .job_wide(),
        );
    }
}

impl CollComponent for SmComponent {
    fn priority(&self, params: &ParamStore) -> i32 {
        params
            .get_int("coll_sm_priority")
            .map_or(PRIORITY, |v| i32::try_from(v).unwrap_or(PRIORITY))
    }

    fn query(&self, shape: &CommShape, params: &ParamStore) -> Option<Box<dyn CollModule>> {
        // The store refused values of max_size outside its range when they were set.
        let size = |name, default| {
            usize::try_from(params.get_size(name).unwrap_or(default)).unwrap_or(usize::MAX)
        };
        SmModule::new(
            shape,
            size("coll_sm_max_size", MAX_SIZE),
            size("coll_sm_split_size", SPLIT_SIZE),
        )
        .map(|m| Box::new(m) as Box<dyn CollModule>)
    }
}

/// The segment of a module, once its set-up ran.
#[derive(Debug)]
enum Shared {
    /// Not made yet (no collective ran).
    Unset,
    /// Mapped.
    Ready(Segment),
    /// Could not be made on some member: coll-sm falls through on this communicator.
    Failed,
}

/// coll-sm on one communicator.
#[derive(Debug)]
pub struct SmModule {
    me: usize,
    layout: Layout,
    /// Longest collective run here (bytes).
    max: usize,
    /// Reductions of at least this many bytes share the combining.
    split: usize,
    seg: RefCell<Shared>,
    /// The sequence number of the last collective run (see [`protocol`]).
    seq: Cell<u32>,
    /// Barriers run so far.
    barriers: Cell<u32>,
    /// Every other member finished every collective up to this sequence number, as far as
    /// this rank knows (see [`Run::after_clear`]).
    synced: Cell<Option<u32>>,
    /// A member found dead: every later direct collective fails with it.
    dead: RefCell<Option<DirectError>>,
    /// The pid of each member whose process this rank can watch (0: not watched), from the
    /// segment at set-up.
    pids: RefCell<Vec<u32>>,
}

impl SmModule {
    /// The module for `shape`, or `None` unless it is an intra-communicator of at least two
    /// members, all on one node. Collectives of up to `max` bytes run here; reductions of
    /// at least `split` bytes share the combining.
    pub fn new(shape: &CommShape, max: usize, split: usize) -> Option<Self> {
        if shape.inter || shape.size() < 2 || !shape.single_node() {
            return None;
        }
        Some(Self {
            me: shape.rank,
            layout: Layout::new(shape.size(), max),
            max,
            split,
            seg: RefCell::new(Shared::Unset),
            seq: Cell::new(0),
            barriers: Cell::new(0),
            synced: Cell::new(None),
            dead: RefCell::new(None),
            pids: RefCell::new(Vec::new()),
        })
    }

    /// Run `op` on `len` bytes (what a rank's slot holds: see [`Run::poll`]), mapping the
    /// segment first if this is the first collective; `None` if the segment could not be
    /// made (fall through).
    fn run(
        &self,
        env: &mut dyn DirectEnv,
        op: Op,
        len: usize,
        send: &[u8],
        work: &mut [u8],
        reduce: Option<ReduceBytes<'_>>,
    ) -> Option<Result<(), DirectError>> {
        self.run_with(env, op, len, send, work, reduce, None)
            .map(|r| r.map(drop))
    }

    /// [`SmModule::run`] of any operation (`v`: the regions of a varying exchange); the
    /// finished run.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn run_with(
        &self,
        env: &mut dyn DirectEnv,
        op: Op,
        len: usize,
        send: &[u8],
        work: &mut [u8],
        reduce: Option<ReduceBytes<'_>>,
        v: Option<Varying<'_>>,
    ) -> Option<Result<Run, DirectError>> {
        if let Some(e) = &*self.dead.borrow() {
            return Some(Err(e.clone()));
        }
        let mut seg = self.seg.borrow_mut();
        if let Shared::Unset = *seg {
            match self.set_up(env) {
                Ok(s) => *seg = Shared::Ready(s),
                Err(SetupError::Os(e)) => {
                    // Every member got the same answer from the set-up's agreement.
                    tracing::warn!("{e}; collectives of this communicator fall through");
                    *seg = Shared::Failed;
                }
                Err(SetupError::Messages(e)) => {
                    // The communicator's transport failed (a member died, say): it is not
                    // usable any more, and the set-up is not retried.
                    *seg = Shared::Failed;
                    return Some(Err(e));
                }
            }
        }
        let Shared::Ready(seg) = &*seg else {
            return None;
        };
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        let mut run = Run::new(op, self.layout, self.me, seq, len).after_clear(self.synced.get());
        let mut idle = Idle::default();
        let mut live = Liveness::default();
        let mode = wait_mode();
        let spin = mode == WaitMode::Spin;
        // Only block mode sleeps, so only there has a post anyone to wake (and needs the
        // fence of the sleeper count's Dekker pattern).
        let block = mode == WaitMode::Block;
        seg.fence_posts(block);
        loop {
            let step = match v {
                None => run.poll(seg, send, work, reduce),
                Some(v) => run.poll_v(seg, send, work, v),
            };
            match step {
                Step::Done => break,
                Step::Posted {
                    off,
                    sleepers,
                    release,
                } => {
                    if block {
                        wake_sleepers(seg, off, sleepers);
                    }
                    idle.state = IdleState::default();
                    if release && !spin {
                        // Ranks share cores: the members just released are runnable, and one
                        // may be queued on this very core. Letting them run first means that
                        // they, not this rank, reach the next collective early: a broadcast's
                        // root posts before its readers look, a reduce's leaves post before
                        // their root waits (else the rank that arrived last is first again
                        // at the next collective, where it waits through two context switches
                        // for a member of its own core: 10 us per OSU bcast or reduce here).
                        std::thread::yield_now();
                    }
                }
                Step::Wait(w) => {
                    if spin && spin_on(seg, w) {
                        continue;
                    }
                    let events = env.progress();
                    idle.pass(seg, w, events);
                    if live.due() {
                        if let Some(e) = dead_member(seg, &self.pids.borrow(), &run, w) {
                            tracing::warn!("coll-sm: {e}");
                            *self.dead.borrow_mut() = Some(e.clone());
                            return Some(Err(e));
                        }
                    }
                }
            }
        }
        if let Some(c) = run.clears() {
            self.synced.set(Some(c));
        }
        if block {
            let l = self.layout;
            wake_sleepers(seg, l.freed(self.me), l.freed_sleepers(self.me));
        }
        Some(Ok(run))
    }

    /// Map the segment on every member, publishing this member's process id in it (for the
    /// others' liveness checks): the creation's own all-mapped agreement makes every pid
    /// visible before any member waits on the segment.
    fn set_up(&self, env: &mut dyn DirectEnv) -> Result<Segment, SetupError> {
        let seg = Segment::create(env, self.me, self.layout.len(), self.layout.pid(self.me))?;
        // A member whose process is not visible from here (another pid namespace sharing
        // this /dev/shm, say) is not watched: its pid would name nothing, or another process.
        let l = self.layout;
        *self.pids.borrow_mut() = (0..l.n)
            .map(|q| {
                let pid = seg.load(l.pid(q));
                if q == self.me {
                    0
                } else if pid == 0 || segment::process_gone(pid) {
                    tracing::debug!(rank = q, pid, "coll-sm: member not watched");
                    0
                } else {
                    pid
                }
            })
            .collect();
        tracing::debug!(
            bytes = seg.len(),
            ranks = self.layout.n,
            "coll-sm: segment mapped"
        );
        Ok(seg)
    }

    /// Whether a reduction of `len` bytes of `elem`-byte elements runs here, and split.
    /// Two members never split: each would combine half the vector instead of all of it,
    /// but pay a second hand-over and copy the other half out, which costs more than the
    /// half combine saves (measured: bench/RESULTS.md, osu_allreduce 4-8 KiB at 2 ranks).
    fn reduction(&self, len: usize, elem: usize) -> Option<bool> {
        (elem > 0 && len.is_multiple_of(elem) && len <= self.max)
            .then(|| self.layout.n > 2 && len >= self.split && len / elem >= self.layout.n)
    }
}

/// The first member `run` still waits for (in its wait `w`) whose process is gone, as the
/// error of the collective. Whom it waits for is read again after the processes were found
/// gone, so a member that stored its part and then exited normally is never taken for dead.
fn dead_member(seg: &Segment, pids: &[u32], run: &Run, w: Wait) -> Option<DirectError> {
    let gone: Vec<(usize, u32)> = run
        .awaited(seg, w)
        .into_iter()
        .filter_map(|q| {
            let pid = pids.get(q).copied().unwrap_or(0);
            (pid != 0 && segment::process_gone(pid)).then_some((q, pid))
        })
        .collect();
    if gone.is_empty() {
        return None;
    }
    let still = run.awaited(seg, w);
    gone.into_iter()
        .find(|(q, _)| still.contains(q))
        .map(|(rank, pid)| DirectError::PeerFailed {
            rank,
            reason: format!("coll-sm: its process (pid {pid}) is gone and never did its part"),
        })
}

/// When a wait next checks its members' processes: every [`LIVENESS_INTERVAL`], the clock
/// read once per [`CLOCK_PASSES`] idle passes.
#[derive(Debug, Default)]
struct Liveness {
    passes: u32,
    next: Option<Instant>,
}

impl Liveness {
    /// After an idle pass: whether a check is due now.
    fn due(&mut self) -> bool {
        self.passes = self.passes.wrapping_add(1);
        if !self.passes.is_multiple_of(CLOCK_PASSES) {
            return false;
        }
        let now = Instant::now();
        match self.next {
            Some(t) if now < t => false,
            Some(_) => {
                self.next = Some(now + LIVENESS_INTERVAL);
                true
            }
            None => {
                // The wait has lasted CLOCK_PASSES passes: the first check one interval on.
                self.next = Some(now + LIVENESS_INTERVAL);
                false
            }
        }
    }
}

/// Load the awaited word up to [`SPIN_CHECKS`] times; whether it reached what `w` wants
/// (with a stamped post's lines, polled along: see [`protocol`]'s stamped slots).
#[inline]
fn spin_on(seg: &Segment, w: Wait) -> bool {
    if w.lines.count > 0 {
        return (0..SPIN_CHECKS).any(|_| w.ready(seg));
    }
    let word = seg.word(w.off);
    (0..SPIN_CHECKS).any(|_| protocol::reached(word.load(Ordering::Acquire), w.want))
}

/// Wake the ranks sleeping on the word at `off` (if its sleeper count says there are).
fn wake_sleepers(seg: &Segment, off: usize, sleepers: usize) {
    if seg.word(sleepers).load(Ordering::SeqCst) != 0 {
        seg.wake(off);
    }
}

/// The idle policy of a wait: the process's wait mode, sleeping on the awaited word.
#[derive(Debug, Default)]
struct Idle {
    state: IdleState,
    /// Lets other threads into MPI between passes (`MPI_THREAD_MULTIPLE`): a thread blocked
    /// here must not keep out a thread whose message the other members wait for.
    others: ReleasingBackoff,
}

impl Idle {
    /// After a pass that found `w` not yet reached and handled `events` elsewhere.
    fn pass(&mut self, seg: &Segment, w: Wait, events: usize) {
        if wait_hook_set() {
            // A pass with an event: only the hook's release and reacquire, never a sleep
            // (the sleeping is ours, below). The wait holds no borrow of the runtime here.
            self.others.pass(1);
        }
        let mut policy = wait_policy();
        if policy.mode != WaitMode::Spin {
            // Ranks outnumber cores (or the user asked to give the CPU up): the member this
            // rank waits for most likely waits for this very core, so spinning only delays
            // it; yield from the first idle pass (Open MPI's yield_when_idle does likewise).
            policy.spin_passes = policy.spin_passes.min(OVERSUBSCRIBED_SPIN_PASSES);
        }
        match self.state.on_pass(&policy, events, std::time::Instant::now) {
            IdleAction::Spin | IdleAction::Disarm => {}
            IdleAction::Yield => std::thread::yield_now(),
            IdleAction::Arm | IdleAction::Block(_) => {
                // Announce the sleep, then look again: a poster that stored before the
                // announcement is seen here, one after it sees the count and wakes us.
                let count = seg.word(w.sleepers);
                count.fetch_add(1, Ordering::SeqCst);
                let seen = seg.load(w.off);
                if !protocol::reached(seen, w.want) {
                    seg.sleep(w.off, seen, policy.block_timeout);
                }
                count.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

impl CollModule for SmModule {
    fn direct(&self) -> Option<&dyn DirectColl> {
        Some(self)
    }
}

impl DirectColl for SmModule {
    fn barrier(&self, env: &mut dyn DirectEnv) -> Option<Result<(), DirectError>> {
        let round = self.barriers.get().wrapping_add(1);
        let r = self.run(env, Op::Barrier { round }, 0, &[], &mut [], None);
        if r.is_some() {
            self.barriers.set(round);
        }
        r
    }

    fn bcast(
        &self,
        env: &mut dyn DirectEnv,
        buf: &mut [u8],
        root: usize,
    ) -> Option<Result<(), DirectError>> {
        if buf.len() > self.max || root >= self.layout.n {
            return None;
        }
        self.run(env, Op::Bcast { root }, buf.len(), &[], buf, None)
    }

    fn reduce(
        &self,
        env: &mut dyn DirectEnv,
        send: &[u8],
        work: &mut [u8],
        root: usize,
        elem: usize,
        _ordered: bool,
        reduce: ReduceBytes<'_>,
    ) -> Option<Result<(), DirectError>> {
        // Rank order whatever the operation: non-commutative ones are served too.
        let split = self.reduction(send.len(), elem)?;
        if work.len() != send.len() || root >= self.layout.n {
            return None;
        }
        self.run(
            env,
            Op::Reduce { root, elem, split },
            send.len(),
            send,
            work,
            Some(reduce),
        )
    }

    fn allreduce(
        &self,
        env: &mut dyn DirectEnv,
        send: &[u8],
        work: &mut [u8],
        elem: usize,
        _ordered: bool,
        reduce: ReduceBytes<'_>,
    ) -> Option<Result<(), DirectError>> {
        let split = self.reduction(send.len(), elem)?;
        if work.len() != send.len() {
            return None;
        }
        self.run(
            env,
            Op::Allreduce { elem, split },
            send.len(),
            send,
            work,
            Some(reduce),
        )
    }

    fn allgather(
        &self,
        env: &mut dyn DirectEnv,
        send: &[u8],
        recv: &mut [u8],
    ) -> Option<Result<(), DirectError>> {
        // Zero-byte blocks move nothing (and need no synchronisation): the schedules do it.
        let len = send.len();
        if len == 0 || len > self.max || Some(recv.len()) != len.checked_mul(self.layout.n) {
            return None;
        }
        self.run(env, Op::Allgather, len, send, recv, None)
    }

    fn alltoall(
        &self,
        env: &mut dyn DirectEnv,
        send: &[u8],
        recv: &mut [u8],
    ) -> Option<Result<(), DirectError>> {
        // A rank's slot holds its whole input (every member's block).
        let len = send.len();
        if len == 0 || len > self.max || recv.len() != len || !len.is_multiple_of(self.layout.n) {
            return None;
        }
        self.run(env, Op::Alltoall, len, send, recv, None)
    }

    fn allgatherv(
        &self,
        env: &mut dyn DirectEnv,
        send: &[u8],
        recv: &mut [u8],
        regions: &[Range<usize>],
    ) -> Option<Result<(), DirectError>> {
        // The lengths are the same on every member, so is the verdict. Zero bytes in all
        // move nothing: the schedules do it.
        let (n, me) = (self.layout.n, self.me);
        let longest = regions.iter().map(Range::len).max().unwrap_or(0);
        if regions.len() != n
            || longest == 0
            || longest > self.max
            || regions[me].len() != send.len()
            || regions.iter().any(|r| r.end > recv.len())
        {
            return None;
        }
        let v = Varying {
            sends: &[],
            recvs: regions,
        };
        let r = self.run_with(env, Op::Allgatherv, send.len(), send, recv, None, Some(v));
        r.map(|r| r.map(drop))
    }

    fn reduce_scatter(
        &self,
        env: &mut dyn DirectEnv,
        send: &[u8],
        recv: &mut [u8],
        chunks: &[Range<usize>],
        elem: usize,
        _ordered: bool,
        reduce: ReduceBytes<'_>,
    ) -> Option<Result<(), DirectError>> {
        // Rank order whatever the operation, as reduce. The input's length and the chunks
        // are the same on every member, so is the verdict; nothing to reduce (zero
        // elements in all): the schedules do it.
        let (n, me, len) = (self.layout.n, self.me, send.len());
        self.reduction(len, elem)?;
        let on_elements = |c: &Range<usize>| {
            c.start <= c.end
                && c.end <= len
                && c.start.is_multiple_of(elem)
                && c.end.is_multiple_of(elem)
        };
        if len == 0 || chunks.len() != n || !chunks.iter().all(on_elements) {
            return None;
        }
        let mine = chunks[me].clone();
        if recv.len() != mine.len() {
            return None;
        }
        let op = Op::ReduceScatter {
            elem,
            start: mine.start,
            end: mine.end,
        };
        self.run(env, op, len, send, recv, Some(reduce))
    }

    fn gather(
        &self,
        env: &mut dyn DirectEnv,
        send: &[u8],
        recv: &mut [u8],
        root: usize,
    ) -> Option<Result<(), DirectError>> {
        // A member's slot holds its block. Zero-byte blocks move nothing: the schedules.
        let (n, len) = (self.layout.n, send.len());
        let whole = (self.me != root) || Some(recv.len()) == len.checked_mul(n);
        if len == 0 || len > self.max || root >= n || !whole {
            return None;
        }
        self.run(env, Op::Gather { root }, len, send, recv, None)
    }

    fn scatter(
        &self,
        env: &mut dyn DirectEnv,
        send: &[u8],
        recv: &mut [u8],
        root: usize,
    ) -> Option<Result<(), DirectError>> {
        // The root's slot holds its whole input (every member's block).
        let n = self.layout.n;
        let total = recv.len().checked_mul(n)?;
        let whole = self.me != root || send.len() == total;
        if total == 0 || total > self.max || root >= n || !whole {
            return None;
        }
        self.run(env, Op::Scatter { root }, total, send, recv, None)
    }

    fn alltoallv(
        &self,
        env: &mut dyn DirectEnv,
        send: &[u8],
        sends: &[Range<usize>],
        recv: &mut [u8],
        recvs: &[Range<usize>],
    ) -> Option<Result<(), DirectError>> {
        let (n, me) = (self.layout.n, self.me);
        // Arguments every member passes alike (the size, the parameter), or a caller's bug.
        if self.max == 0
            || sends.len() != n
            || recvs.len() != n
            || sends[me].len() != recvs[me].len()
            || sends.iter().any(|r| r.start > r.end || r.end > send.len())
            || recvs.iter().any(|r| r.start > r.end || r.end > recv.len())
        {
            return None;
        }
        // This member's own verdict; the others learn it through the segment.
        let total = sends.iter().try_fold(0usize, |a, r| a.checked_add(r.len()));
        let fits = total.is_some_and(|t| {
            t <= self.max && t + protocol::alltoallv_header(n) <= self.layout.slot
        });
        let len = if fits { total.unwrap_or(0) } else { 0 };
        let v = Varying { sends, recvs };
        let op = Op::Alltoallv { fits };
        match self.run_with(env, op, len, send, recv, None, Some(v))? {
            Err(e) => Some(Err(e)),
            Ok(run) if run.declined() => None,
            Ok(run) => Some(match run.truncated() {
                None => Ok(()),
                Some(t) => Err(DirectError::Truncated {
                    rank: t.rank,
                    sent: t.sent,
                    received: t.received,
                }),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_single_node_intra_communicators_of_two_or_more() {
        assert!(SmModule::new(&CommShape::new(0, vec![0, 0, 0]), 64, 8).is_some());
        assert!(SmModule::new(&CommShape::new(0, vec![0]), 64, 8).is_none());
        assert!(SmModule::new(&CommShape::new(1, vec![0, 1]), 64, 8).is_none());
        let inter = CommShape {
            inter: true,
            ..CommShape::new(0, vec![0, 0])
        };
        assert!(SmModule::new(&inter, 64, 8).is_none());
    }

    /// The component's parameters resolved with `max_size` set on the command line.
    fn with_max_size(v: &str) -> Result<ParamStore, Vec<rmca_framework::params::ParamError>> {
        use rmca_framework::params::{RawSetting, RawSources, Source};
        let mut specs = Vec::new();
        SM.register_params(&mut ParamRegistrar::new("coll", "sm", &mut specs));
        let cli = vec![RawSetting {
            name: "coll_sm_max_size".into(),
            value: v.into(),
            source: Source::CommandLine,
        }];
        let raw = RawSources::from_parts(None, None, false, Vec::new(), cli).unwrap();
        ParamStore::resolve(specs, &raw)
    }

    #[test]
    fn max_size_above_64_mib_is_refused_naming_the_parameter_and_range() {
        for bad in ["65M", "1G", "67108865"] {
            let errs = with_max_size(bad).expect_err(bad);
            let text = errs.iter().map(ToString::to_string).collect::<String>();
            assert!(
                text.contains("coll_sm_max_size") && text.contains("0..=64M") && text.contains(bad),
                "{text}"
            );
        }
        // The bound itself is accepted, and used as it is (no clamp).
        let store = with_max_size("64M").unwrap();
        assert_eq!(store.get_size("coll_sm_max_size").ok(), Some(64 << 20));
        let shape = CommShape::new(0, vec![0, 0]);
        assert!(SM.query(&shape, &store).is_some());
    }

    /// Rank 0 of a communicator whose other members agree with everything: counts the
    /// set-up's collectives by messages.
    #[derive(Default)]
    struct CountingEnv {
        rounds: u32,
    }
    impl DirectEnv for CountingEnv {
        fn progress(&mut self) -> usize {
            0
        }
        fn all(&mut self, ok: bool) -> Result<bool, DirectError> {
            self.rounds += 1;
            Ok(ok)
        }
        fn bcast(&mut self, root: usize, _: &mut [u8]) -> Result<(), DirectError> {
            assert_eq!(root, 0, "only rank 0's name is broadcast");
            self.rounds += 1;
            Ok(())
        }
    }

    #[test]
    fn set_up_takes_the_creations_three_rounds_and_publishes_the_pid() {
        let m = SmModule::new(&CommShape::new(0, vec![0, 0]), 64, 8).unwrap();
        let mut env = CountingEnv::default();
        let seg = m.set_up(&mut env).unwrap();
        // Member 0 created it (1), broadcast its name (2), all mapped (3): the pids travel
        // in the last one, without a round of their own.
        assert_eq!(env.rounds, 3);
        assert_eq!(seg.load(m.layout.pid(0)), std::process::id());
        // The other member never stored its pid here: it is not watched.
        assert_eq!(*m.pids.borrow(), vec![0, 0]);
    }

    #[test]
    fn exchanges_beyond_the_slot_or_of_bad_lengths_fall_through() {
        let sm = SmModule::new(&CommShape::new(0, vec![0; 4]), 256, 64).unwrap();
        // The direct forms (CollModule has schedule-building methods of the same names).
        let m: &dyn DirectColl = &sm;
        let mut env = CountingEnv::default();
        let mut out = vec![0u8; 4 * 257];
        let declined = |r: Option<Result<(), DirectError>>| r.is_none();
        assert!(
            declined(m.allgather(&mut env, &[0; 257], &mut out)),
            "block longer than the slot"
        );
        assert!(declined(m.allgather(&mut env, &[], &mut [])), "zero bytes");
        assert!(
            declined(m.allgather(&mut env, &[0; 8], &mut out[..24])),
            "output not one block per member"
        );
        assert!(
            declined(m.alltoall(&mut env, &[0; 260], &mut out[..260])),
            "input longer than the slot"
        );
        assert!(
            declined(m.alltoall(&mut env, &[0; 6], &mut out[..6])),
            "input not one block per member"
        );
        assert!(
            declined(m.alltoall(&mut env, &[0; 8], &mut out[..4])),
            "output shorter than the input"
        );
        assert_eq!(env.rounds, 0, "declining sets nothing up");
    }

    #[test]
    fn reductions_beyond_the_slot_or_of_odd_sizes_fall_through() {
        let m = SmModule::new(&CommShape::new(0, vec![0; 4]), 256, 64).unwrap();
        assert_eq!(m.reduction(256, 8), Some(true));
        assert_eq!(m.reduction(257, 1), None, "longer than the slot");
        assert_eq!(m.reduction(12, 8), None, "not whole elements");
        assert_eq!(m.reduction(8, 0), None);
        assert_eq!(m.reduction(32, 8), Some(false), "short: combined whole");
        assert_eq!(
            m.reduction(64, 32),
            Some(false),
            "fewer elements than ranks"
        );
        let two = SmModule::new(&CommShape::new(0, vec![0; 2]), 256, 64).unwrap();
        assert_eq!(
            two.reduction(256, 8),
            Some(false),
            "two members never split"
        );
    }
}
