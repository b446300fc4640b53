//! The COLL framework: collective operations, chosen per communicator among components, as
//! Open MPI's `coll` (basic/tuned, han, sm/xhc).
//!
//! # Design
//! A collective is a [`Schedule`]: pure, without I/O, what one rank sends, receives, reduces
//! and copies in which order ([`schedule`] holds the algorithms every component composes, as
//! Open MPI's `coll/base` does). One executor (in the `rmca` crate) runs any schedule,
//! blocking or stepped by progress for the non-blocking forms, so a component never does I/O
//! and its algorithms are checked by the simulator of [`sim`] for any process count and node
//! layout.
//!
//! When a communicator runs its first collective, every allowed [`CollComponent`] is asked
//! ([`CollComponent::query`]) with the communicator's [`CommShape`] (size, own rank, the node
//! of every member, whether it is an intercommunicator); those that answer with a
//! [`CollModule`] form the communicator's stack, highest priority first
//! ([`crate::registry::Registry::select_coll`]; `--mca coll base,hier` restricts it like
//! every selector). Each operation goes to the first module of the stack that provides it: a
//! module returns `None` for an operation it does not implement, or does not implement for
//! these arguments (a hierarchical module for a non-commutative reduction, say), and the
//! operation falls through to the next module (Open MPI's per-function stacking). Every
//! member builds the same stack: the shape is the same on every member (but its own rank),
//! and the parameters that decide are job-wide.
//!
//! A module's schedules for one communicator must match across its members (every send meets
//! the receive of its peer): a module decides from the shape and the call's arguments only,
//! which every member passes alike.

pub mod schedule;
pub mod sim;

use std::fmt;
use std::ops::Range;

use crate::params::ParamStore;
pub use schedule::Schedule;

/// What a coll component sees of a communicator when asked to serve it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommShape {
    /// This process's rank in the communicator.
    pub rank: usize,
    /// The node index of every member, by communicator rank (equal values share a node).
    pub node_of: Vec<u32>,
    /// An intercommunicator (collectives between two groups).
    pub inter: bool,
}

impl CommShape {
    /// An intra-communicator of members on the nodes `node_of` (by rank), seen from `rank`.
    pub fn new(rank: usize, node_of: Vec<u32>) -> Self {
        Self {
            rank,
            node_of,
            inter: false,
        }
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.node_of.len()
    }

    /// The members grouped by node: one list of ranks (ascending) per node, nodes in the
    /// order of their lowest rank.
    pub fn node_groups(&self) -> Vec<Vec<usize>> {
        let mut groups: Vec<(u32, Vec<usize>)> = Vec::new();
        for (r, &node) in self.node_of.iter().enumerate() {
            match groups.iter_mut().find(|(n, _)| *n == node) {
                Some((_, g)) => g.push(r),
                None => groups.push((node, vec![r])),
            }
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }

    /// Every member runs on one node.
    pub fn single_node(&self) -> bool {
        self.node_of.windows(2).all(|w| w[0] == w[1])
    }
}

/// The collective operations of one communicator, as schedules (see the module docs for the
/// buffer conventions of each, in [`schedule`]). Every method returns `None` when this module
/// does not provide the operation for these arguments: the next module of the stack does.
///
/// Arguments are byte counts; `elem` is the element size of a reduction and `ordered` says
/// that the operation is not commutative (it must combine in rank order).
pub trait CollModule: fmt::Debug {
    /// A barrier.
    fn barrier(&self) -> Option<Schedule> {
        None
    }
    /// A broadcast of `len` bytes from `root`.
    fn bcast(&self, _root: usize, _len: usize) -> Option<Schedule> {
        None
    }
    /// A reduction of `len` bytes to `root`.
    fn reduce(&self, _root: usize, _len: usize, _elem: usize, _ordered: bool) -> Option<Schedule> {
        None
    }
    /// A reduction of `len` bytes whose result every member gets.
    fn allreduce(&self, _len: usize, _elem: usize, _ordered: bool) -> Option<Schedule> {
        None
    }
    /// A gather of `block`-byte blocks to `root` (virtual-rank layout).
    fn gather(&self, _root: usize, _block: usize) -> Option<Schedule> {
        None
    }
    /// A scatter of `block`-byte blocks from `root` (virtual-rank layout).
    fn scatter(&self, _root: usize, _block: usize) -> Option<Schedule> {
        None
    }
    /// An allgather of `block`-byte blocks (rank-order layout).
    fn allgather(&self, _block: usize) -> Option<Schedule> {
        None
    }
    /// An alltoall(v) over per-peer byte ranges of the input and of the output.
    fn alltoallv(&self, _sends: &[Range<usize>], _recvs: &[Range<usize>]) -> Option<Schedule> {
        None
    }
    /// An alltoall of `block` bytes from every member to every member (blocks in rank order
    /// in both buffers). Every member passes the same `block`, so an algorithm may forward
    /// other members' blocks (Bruck's); alltoallv's counts differ per member and cannot.
    /// The caller offers each module this form first, then its [`CollModule::alltoallv`]
    /// over the blocks' ranges, before it moves down the stack.
    fn alltoall(&self, _block: usize) -> Option<Schedule> {
        None
    }
    /// A gatherv to `root` of `mine` bytes per member into `regions` (read at the root).
    fn gatherv(
        &self,
        _root: usize,
        _mine: usize,
        _regions: &[Range<usize>],
        _in_place: bool,
    ) -> Option<Schedule> {
        None
    }
    /// A scatterv from `root` of `regions` (read at the root), `mine` bytes to each member.
    fn scatterv(
        &self,
        _root: usize,
        _mine: usize,
        _regions: &[Range<usize>],
        _in_place: bool,
    ) -> Option<Schedule> {
        None
    }
    /// An allgatherv into `regions`.
    fn allgatherv(&self, _regions: &[Range<usize>], _in_place: bool) -> Option<Schedule> {
        None
    }
    /// A reduce_scatter of `chunks` (tiling the vector in rank order).
    fn reduce_scatter(
        &self,
        _chunks: &[Range<usize>],
        _elem: usize,
        _ordered: bool,
    ) -> Option<Schedule> {
        None
    }
    /// A scan (`exclusive`: exscan) of `len` bytes; rank order whatever the operation.
    fn scan(&self, _len: usize, _exclusive: bool) -> Option<Schedule> {
        None
    }
    /// The collectives this module runs itself, without schedules (coll-sm: through memory
    /// the members share); `None` for a module that only builds schedules.
    fn direct(&self) -> Option<&dyn DirectColl> {
        None
    }
}

/// A reduction step of a direct collective: `dst = src op acc` when the last argument is
/// true, else `acc op src`, where `acc` is `dst` itself when `None` (as [`schedule::Local`]'s
/// `Reduce`).
pub type ReduceBytes<'a> = &'a dyn Fn(&mut [u8], &[u8], Option<&[u8]>, bool);

/// A direct collective failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DirectError {
    /// A member's process died before it did its part (the collective cannot complete);
    /// MPI's "process failed" class.
    #[error("communicator rank {rank} failed during the collective: {reason}")]
    PeerFailed {
        /// The dead member's rank in the communicator.
        rank: usize,
        /// How its death was seen.
        reason: String,
    },
    /// A set-up collective by messages (over [`DirectEnv`]) failed: the communicator's
    /// transport error, as text (the environment keeps the error itself).
    #[error("{0}")]
    Setup(String),
    /// A member sent a block longer than this member's receive region for it (an
    /// alltoallv whose counts disagree); the region holds the block's first `received` bytes.
    #[error("communicator rank {rank} sent {sent} bytes, the receive region holds {received}")]
    Truncated {
        /// The sender's rank in the communicator.
        rank: usize,
        /// Bytes it sent.
        sent: usize,
        /// Bytes the region holds.
        received: usize,
    },
}

/// What a module running collectives itself ([`DirectColl`]) needs from its communicator.
pub trait DirectEnv {
    /// One progress pass of the runtime, so that point-to-point traffic and non-blocking
    /// collectives move while a direct collective waits; the events it handled.
    fn progress(&mut self) -> usize;
    /// A collective by messages over the communicator (for set-up): whether `ok` is true on
    /// every member.
    fn all(&mut self, ok: bool) -> Result<bool, DirectError>;
    /// A broadcast of `buf` from `root` by messages over the communicator (for set-up).
    fn bcast(&mut self, root: usize, buf: &mut [u8]) -> Result<(), DirectError>;
}

/// Blocking collectives a module runs itself rather than as a [`Schedule`] (coll-sm: flags
/// and slots in a segment the members share, no message). Each returns `None` when it
/// declines these arguments (too long, say): the operation falls through to the next
/// module's direct form or to the stack's schedules. Declining must depend only on what
/// every member passes alike, so that every member takes the same path. Non-blocking forms
/// always take the schedules.
pub trait DirectColl: fmt::Debug {
    /// A barrier.
    fn barrier(&self, _env: &mut dyn DirectEnv) -> Option<Result<(), DirectError>> {
        None
    }
    /// A broadcast of `buf` from `root`.
    fn bcast(
        &self,
        _env: &mut dyn DirectEnv,
        _buf: &mut [u8],
        _root: usize,
    ) -> Option<Result<(), DirectError>> {
        None
    }
    /// A reduction of `send` into `work` at `root` (`work`, as long as `send`, is private
    /// space elsewhere); `elem`-byte elements; `ordered`: not commutative.
    #[allow(clippy::too_many_arguments)]
    fn reduce(
        &self,
        _env: &mut dyn DirectEnv,
        _send: &[u8],
        _work: &mut [u8],
        _root: usize,
        _elem: usize,
        _ordered: bool,
        _reduce: ReduceBytes<'_>,
    ) -> Option<Result<(), DirectError>> {
        None
    }
    /// A reduction of `send` whose result every member gets in `work`.
    fn allreduce(
        &self,
        _env: &mut dyn DirectEnv,
        _send: &[u8],
        _work: &mut [u8],
        _elem: usize,
        _ordered: bool,
        _reduce: ReduceBytes<'_>,
    ) -> Option<Result<(), DirectError>> {
        None
    }
    /// An allgather: every member's `send` into `recv` (`size * send.len()` bytes, rank
    /// order; `recv` does not overlap `send`).
    fn allgather(
        &self,
        _env: &mut dyn DirectEnv,
        _send: &[u8],
        _recv: &mut [u8],
    ) -> Option<Result<(), DirectError>> {
        None
    }
    /// An alltoall: block r of `send` to member r, member r's block into block r of `recv`
    /// (both `size` equal blocks; they do not overlap).
    fn alltoall(
        &self,
        _env: &mut dyn DirectEnv,
        _send: &[u8],
        _recv: &mut [u8],
    ) -> Option<Result<(), DirectError>> {
        None
    }
    /// An allgatherv: member r's block (`regions[r].len()` bytes; this member's is `send`)
    /// into `recv[regions[r]]` (regions disjoint, one per member, of the same lengths on
    /// every member; `recv` does not overlap `send`).
    fn allgatherv(
        &self,
        _env: &mut dyn DirectEnv,
        _send: &[u8],
        _recv: &mut [u8],
        _regions: &[Range<usize>],
    ) -> Option<Result<(), DirectError>> {
        None
    }
    /// A reduce_scatter: the reduction of every member's `send` (the same length everywhere,
    /// `elem`-byte elements; `ordered`: not commutative), of which this member gets bytes
    /// `chunks[me]` in `recv` (`chunks` tile `send` in rank order, on element boundaries,
    /// the same on every member; `recv` is this member's chunk long and does not overlap
    /// `send`). Both MPI_Reduce_scatter and MPI_Reduce_scatter_block.
    #[allow(clippy::too_many_arguments)]
    fn reduce_scatter(
        &self,
        _env: &mut dyn DirectEnv,
        _send: &[u8],
        _recv: &mut [u8],
        _chunks: &[Range<usize>],
        _elem: usize,
        _ordered: bool,
        _reduce: ReduceBytes<'_>,
    ) -> Option<Result<(), DirectError>> {
        None
    }
    /// A gather to `root`: every member's `send` (the same length everywhere) into the
    /// root's `recv` (`size * send.len()` bytes, rank order; empty elsewhere; it does not
    /// overlap `send`).
    fn gather(
        &self,
        _env: &mut dyn DirectEnv,
        _send: &[u8],
        _recv: &mut [u8],
        _root: usize,
    ) -> Option<Result<(), DirectError>> {
        None
    }
    /// A scatter from `root`: block r of the root's `send` (`size * recv.len()` bytes, rank
    /// order; empty elsewhere) into member r's `recv` (the same length everywhere; it does
    /// not overlap `send`).
    fn scatter(
        &self,
        _env: &mut dyn DirectEnv,
        _send: &[u8],
        _recv: &mut [u8],
        _root: usize,
    ) -> Option<Result<(), DirectError>> {
        None
    }
    /// An alltoallv: `send[sends[r]]` to member r, member r's block for this one into
    /// `recv[recvs[r]]` (disjoint). Each member knows only its own row and column of the
    /// counts, so a module must not decline from lengths alone unless every member reaches
    /// the same verdict (coll-sm agrees on it through its segment).
    fn alltoallv(
        &self,
        _env: &mut dyn DirectEnv,
        _send: &[u8],
        _sends: &[Range<usize>],
        _recv: &mut [u8],
        _recvs: &[Range<usize>],
    ) -> Option<Result<(), DirectError>> {
        None
    }
}

/// A coll component: offers a module for the communicators it can serve.
pub trait CollComponent: crate::base::Component {
    /// Priority given the parameters (the stack is ordered by it, highest first).
    fn priority(&self, params: &ParamStore) -> i32;

    /// The module serving a communicator of this shape, or `None` if this component does
    /// not serve it (a hierarchical component for a communicator on one node, say).
    fn query(&self, shape: &CommShape, params: &ParamStore) -> Option<Box<dyn CollModule>>;
}

/// A communicator's modules, highest priority first, each with its component's name.
pub struct CollStack {
    modules: Vec<(&'static str, Box<dyn CollModule>)>,
}

impl fmt::Debug for CollStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.modules.iter().map(|(n, _)| n))
            .finish()
    }
}

impl CollStack {
    /// A stack of `modules`, highest priority first.
    pub fn new(modules: Vec<(&'static str, Box<dyn CollModule>)>) -> Self {
        Self { modules }
    }

    /// The components of the stack, highest priority first.
    pub fn names(&self) -> Vec<&'static str> {
        self.modules.iter().map(|(n, _)| *n).collect()
    }

    /// The direct forms of the modules at the top of the stack, in order: those of every
    /// module above the first one that has none. A blocking operation tries them first (each
    /// may decline), then [`CollStack::first`]; a module with direct forms provides no
    /// schedule for the operations it runs directly, so the order of the stack is kept.
    pub fn direct(&self) -> impl Iterator<Item = &dyn DirectColl> + '_ {
        self.modules.iter().map_while(|(_, m)| m.direct())
    }

    /// The schedule of the first module that provides `op` (`build` asks one module), with
    /// that module's component name; `None` when no module does.
    pub fn first(
        &self,
        build: impl Fn(&dyn CollModule) -> Option<Schedule>,
    ) -> Option<(&'static str, Schedule)> {
        self.modules
            .iter()
            .find_map(|(name, m)| build(m.as_ref()).map(|s| (*name, s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_groups_follow_lowest_rank() {
        let s = CommShape::new(0, vec![3, 1, 3, 0, 1]);
        assert_eq!(s.node_groups(), vec![vec![0, 2], vec![1, 4], vec![3]]);
        assert!(!s.single_node());
        assert!(CommShape::new(0, vec![2, 2]).single_node());
        assert_eq!(s.size(), 5);
    }

    #[derive(Debug)]
    struct OnlyBarrier;
    impl CollModule for OnlyBarrier {
        fn barrier(&self) -> Option<Schedule> {
            Some(schedule::barrier_linear(2, 0))
        }
    }
    #[derive(Debug)]
    struct All;
    impl CollModule for All {
        fn barrier(&self) -> Option<Schedule> {
            Some(schedule::barrier_dissemination(2, 0))
        }
        fn bcast(&self, root: usize, len: usize) -> Option<Schedule> {
            Some(schedule::bcast_binomial(2, 0, root, len))
        }
    }

    #[test]
    fn operations_fall_through_the_stack() {
        let stack = CollStack::new(vec![
            ("first", Box::new(OnlyBarrier)),
            ("second", Box::new(All)),
        ]);
        assert_eq!(stack.names(), ["first", "second"]);
        assert_eq!(stack.first(|m| m.barrier()).unwrap().0, "first");
        assert_eq!(stack.first(|m| m.bcast(0, 8)).unwrap().0, "second");
        assert!(stack.first(|m| m.allgather(8)).is_none());
    }
}
