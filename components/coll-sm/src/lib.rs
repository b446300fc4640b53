//! coll-sm: collectives of communicators whose members all share a node, through one shared
//! segment per communicator and no message, as Open MPI's coll/sm (and xhc).
//!
//! Barrier, bcast, reduce and allreduce of at most `coll_sm_max_size` bytes run as
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
//! peer sleeps. A sleep lasts at most the wait policy's block timeout (1 ms), so
//! point-to-point traffic that arrives meanwhile is still progressed.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod protocol;
pub mod segment;

use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;

use rmca_framework::coll::{
    CollComponent, CollModule, CommShape, DirectColl, DirectEnv, DirectError, ReduceBytes,
};
use rmca_framework::component::{Component, ComponentMeta};
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore};
use rmca_framework::progress::{
    wait_hook_set, wait_policy, IdleAction, IdleState, ReleasingBackoff,
};

use protocol::{Layout, Mem, Op, Run, Step, Wait};
use segment::Segment;

/// Default priority: above coll-base's (10) and coll-hier's (40), which it never meets
/// (coll-hier serves communicators spanning nodes, coll-sm those on one node).
const PRIORITY: i32 = 50;
/// Default of `coll_sm_max_size`.
const MAX_SIZE: u64 = 16 << 10;
/// Default of `coll_sm_split_size`.
const SPLIT_SIZE: u64 = 2 << 10;

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
            description: "Barrier, bcast, reduce, allreduce through one shared segment per communicator, without messages (communicators on one node; longer or other operations fall through)",
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
                .help("Longest bcast, reduce or allreduce (bytes) coll-sm runs; longer ones fall through to the next component. Each member's part of a communicator's segment holds two slots of this size")
                .level(Level::Tuning)
                .job_wide(),
        );
        params.add(
            Param::size("split_size", SPLIT_SIZE)
                .help("Reductions of at least this many bytes share the combining among the members (each combines its part, then copies the others'); shorter ones are combined whole by the root (every member for allreduce)")
                .level(Level::Tuning)
                .job_wide(),
        );
    }
}

/// The largest `coll_sm_max_size` honoured: a segment is 2 x members x this.
const MAX_SIZE_CAP: u64 = 64 << 20;

impl CollComponent for SmComponent {
    fn priority(&self, params: &ParamStore) -> i32 {
        params
            .get_int("coll_sm_priority")
            .map_or(PRIORITY, |v| i32::try_from(v).unwrap_or(PRIORITY))
    }

    fn query(&self, shape: &CommShape, params: &ParamStore) -> Option<Box<dyn CollModule>> {
        let size = |name, default| {
            usize::try_from(params.get_size(name).unwrap_or(default).min(MAX_SIZE_CAP))
                .unwrap_or(usize::MAX)
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
        })
    }

    /// Run `op` on `len` bytes, mapping the segment first if this is the first collective;
    /// `None` if the segment could not be made (fall through).
    fn run(
        &self,
        env: &mut dyn DirectEnv,
        op: Op,
        send: &[u8],
        work: &mut [u8],
        reduce: Option<ReduceBytes<'_>>,
    ) -> Option<Result<(), DirectError>> {
        let len = work.len();
        let mut seg = self.seg.borrow_mut();
        if let Shared::Unset = *seg {
            *seg = match Segment::create(env, self.me, self.layout.len()) {
                Ok(s) => {
                    tracing::debug!(
                        bytes = s.len(),
                        ranks = self.layout.n,
                        "coll-sm: segment mapped"
                    );
                    Shared::Ready(s)
                }
                Err(e) => {
                    // Every member got the same answer from the set-up's agreement.
                    tracing::warn!("{e}; collectives of this communicator fall through");
                    Shared::Failed
                }
            };
        }
        let Shared::Ready(seg) = &*seg else {
            return None;
        };
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        let mut run = Run::new(op, self.layout, self.me, seq, len);
        let mut idle = Idle::default();
        loop {
            match run.poll(seg, send, work, reduce) {
                Step::Done => break,
                Step::Posted { off, sleepers } => {
                    wake_sleepers(seg, off, sleepers);
                    idle.state = IdleState::default();
                }
                Step::Wait(w) => {
                    let events = env.progress();
                    idle.pass(seg, w, events);
                }
            }
        }
        let l = self.layout;
        wake_sleepers(seg, l.freed(self.me), l.freed_sleepers(self.me));
        Some(Ok(()))
    }

    /// Whether a reduction of `len` bytes of `elem`-byte elements runs here, and split.
    fn reduction(&self, len: usize, elem: usize) -> Option<bool> {
        (elem > 0 && len.is_multiple_of(elem) && len <= self.max)
            .then(|| len >= self.split && len / elem >= self.layout.n)
    }
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
        let policy = wait_policy();
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
        let r = self.run(env, Op::Barrier { round }, &[], &mut [], None);
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
        self.run(env, Op::Bcast { root }, &[], buf, None)
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
        self.run(env, Op::Allreduce { elem, split }, send, work, Some(reduce))
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
    }
}
