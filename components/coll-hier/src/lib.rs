//! coll-hier: node-aware hierarchical collectives, as Open MPI's coll/han.
//!
//! A communicator whose members span several nodes, with several members on some node, runs
//! barrier, bcast, reduce, allreduce, allgather and reduce_scatter in phases, so that each
//! message between two nodes is sent once per node rather than once per rank:
//! 1. within each node, to the node's leader (a binomial reduction, a linear gather of the
//!    members' blocks, or zero-byte arrivals for a barrier);
//! 2. across nodes, between the leaders only (binomial bcast and reduce, recursive doubling
//!    allreduce or a ring for long vectors, an allgatherv of whole nodes' blocks, a
//!    reduce_scatter of whole nodes' chunks, dissemination barrier);
//! 3. back within each node, from the leader (a binomial broadcast, the members' chunks, or
//!    zero-byte releases).
//!
//! Allgather and reduce_scatter need each node's members to be consecutive ranks (launchers
//! place ranks in blocks by default), so that a node's blocks or chunks are one region;
//! other layouts fall through to the next component.
//!
//! A node's leader is its lowest rank, except on the root's node of a rooted operation
//! (bcast, reduce), where the root leads, so that no hop is added for a root that is not the
//! lowest rank of its node. Every phase is one of the framework's base algorithms
//! ([`rmca_framework::coll::schedule`]) run over a sub-group of ranks and joined into one
//! schedule: pure, so the simulator checks every node layout without a transport.
//!
//! Reductions combine each node's values first, then the nodes': a different association
//! than coll-base's, so coll-hier takes commutative operations only; a non-commutative one
//! (and every other operation) falls through to the next component of the stack.
//! Floating-point results may differ from coll-base's in the last bits (another order of
//! the same commutative operation, as MPI allows), but every member gets the same bits.
#![deny(unsafe_code)]
#![warn(missing_docs)]

use std::ops::Range;

use rmca_framework::coll::schedule::{self, Buf, Comm, Local, Region, Schedule};
use rmca_framework::coll::{CollComponent, CollModule, CommShape};
use rmca_framework::component::{Component, ComponentMeta};
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore};

/// Default priority: above coll-base's, so it is used wherever it serves.
const PRIORITY: i32 = 40;
/// Default of `coll_hier_allreduce_long_size`.
const ALLREDUCE_LONG: u64 = 64 << 10;
/// Default of `coll_hier_allgather_long_size`.
const ALLGATHER_LONG: u64 = 1 << 20;
/// Default of `coll_hier_alltoall_linear_size`.
const ALLTOALL_LINEAR: u64 = 64 << 10;

/// coll-hier's thresholds (bytes), from its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HierParams {
    /// Allreduces and reduce_scatters of at least this many bytes run a ring between leaders.
    pub allreduce_long: usize,
    /// Allgathers of at least this many bytes in all run a ring between leaders, else every
    /// leader sends its node's blocks to every other at once.
    pub allgather_long: usize,
    /// Alltoalls whose largest block is at most this many bytes post every transfer at once;
    /// larger ones fall through (coll-base's pairwise exchange).
    pub alltoall_linear: usize,
}

impl Default for HierParams {
    fn default() -> Self {
        let z = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        Self {
            allreduce_long: z(ALLREDUCE_LONG),
            allgather_long: z(ALLGATHER_LONG),
            alltoall_linear: z(ALLTOALL_LINEAR),
        }
    }
}

/// The coll-hier component.
#[derive(Debug)]
pub struct HierComponent;

/// The registered instance.
pub static HIER: HierComponent = HierComponent;
rmca_framework::builtin_component!(Coll, HIER);

impl Component for HierComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "hier",
            version: env!("CARGO_PKG_VERSION"),
            description: "Node-aware barrier, bcast, reduce, allreduce, allgather, reduce_scatter: within each node to a leader, across nodes between leaders, back within the node (communicators spanning nodes)",
        }
    }

    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        params.add(
            Param::int("priority", i64::from(PRIORITY))
                .range(0, 100)
                .help("Priority of coll-hier in a communicator's stack (it serves communicators spanning more than one node with more than one rank on some node)")
                .level(Level::Tuning)
                .job_wide(),
        );
        params.add(
            Param::size("allreduce_long_size", ALLREDUCE_LONG)
                .help("Allreduces of at least this many bytes (and at least one element per leader) run a ring between the node leaders, else recursive doubling; reduce_scatters of at least this many bytes a ring of whole nodes' chunks, else recursive doubling")
                .level(Level::Tuning)
                .job_wide(),
        );
        params.add(
            Param::size("allgather_long_size", ALLGATHER_LONG)
                .help("Allgathers of at least this many bytes in all run a ring of whole nodes' blocks between the node leaders, else every leader sends its node's blocks to every other at once (communicators whose nodes hold consecutive ranks)")
                .level(Level::Tuning)
                .job_wide(),
        );
        params.add(
            Param::size("alltoall_linear_size", ALLTOALL_LINEAR)
                .help("Alltoall(v)s whose largest block is at most this many bytes post every transfer at once (one round of network latency instead of one per peer); larger ones fall through to the next component (coll-base's pairwise exchange)")
                .level(Level::Tuning)
                .job_wide(),
        );
    }
}

impl CollComponent for HierComponent {
    fn priority(&self, params: &ParamStore) -> i32 {
        params
            .get_int("coll_hier_priority")
            .map_or(PRIORITY, |v| i32::try_from(v).unwrap_or(PRIORITY))
    }

    fn query(&self, shape: &CommShape, params: &ParamStore) -> Option<Box<dyn CollModule>> {
        let size = |name: &str, default: u64| {
            usize::try_from(params.get_size(name).unwrap_or(default)).unwrap_or(usize::MAX)
        };
        let p = HierParams {
            allreduce_long: size("coll_hier_allreduce_long_size", ALLREDUCE_LONG),
            allgather_long: size("coll_hier_allgather_long_size", ALLGATHER_LONG),
            alltoall_linear: size("coll_hier_alltoall_linear_size", ALLTOALL_LINEAR),
        };
        HierModule::new(shape, p).map(|m| Box::new(m) as Box<dyn CollModule>)
    }
}

/// coll-hier on one communicator.
#[derive(Debug)]
pub struct HierModule {
    me: usize,
    /// The members of each node, ascending; nodes in the order of their lowest rank.
    groups: Vec<Vec<usize>>,
    /// Index in `groups` of every rank's node.
    group_of: Vec<usize>,
    /// Thresholds.
    params: HierParams,
}

impl HierModule {
    /// The module for `shape`, or `None` where a hierarchy gains nothing: an
    /// intercommunicator, every member on one node, or one member per node.
    pub fn new(shape: &CommShape, params: HierParams) -> Option<Self> {
        let groups = shape.node_groups();
        if shape.inter || groups.len() < 2 || groups.iter().all(|g| g.len() == 1) {
            return None;
        }
        let mut group_of = vec![0; shape.size()];
        for (i, g) in groups.iter().enumerate() {
            for &r in g {
                group_of[r] = i;
            }
        }
        Some(Self {
            me: shape.rank,
            groups,
            group_of,
            params,
        })
    }

    /// This rank's node: its members and this rank's index among them.
    fn local(&self) -> (&[usize], usize) {
        let g = &self.groups[self.group_of[self.me]];
        (g, index(g, self.me))
    }

    /// Each node's ranks as one range, nodes in rank order, when every node's members are
    /// consecutive ranks; `None` for any other layout.
    fn blocks(&self) -> Option<Vec<Range<usize>>> {
        self.groups
            .iter()
            .map(|g| {
                let r = g[0]..g[g.len() - 1] + 1;
                (r.len() == g.len()).then_some(r)
            })
            .collect()
    }

    /// The leader of every node when `root` (if any) leads its own node.
    fn leaders(&self, root: Option<usize>) -> Vec<usize> {
        self.groups
            .iter()
            .map(|g| match root {
                Some(r) if g.contains(&r) => r,
                _ => g[0],
            })
            .collect()
    }
}

/// Where `r` is in `members`.
fn index(members: &[usize], r: usize) -> usize {
    members
        .iter()
        .position(|&m| m == r)
        .expect("a rank of the group")
}

/// `s`, built for ranks `0..members.len()` of a sub-group, with the peers of the
/// communicator: virtual rank `v` is `members[v]`.
fn over(mut s: Schedule, members: &[usize]) -> Schedule {
    for round in &mut s.rounds {
        for c in &mut round.comms {
            let (Comm::Send { peer, .. } | Comm::Recv { peer, .. }) = c;
            *peer = members[*peer];
        }
    }
    s
}

/// `s`, built for a vector starting at byte 0 of `Work`, on bytes `at..` of `Work` instead.
fn shifted(mut s: Schedule, at: usize) -> Schedule {
    for round in &mut s.rounds {
        for c in &mut round.comms {
            let (Comm::Send { region, .. } | Comm::Recv { region, .. }) = c;
            if region.buf == Buf::Work {
                region.range = region.range.start + at..region.range.end + at;
            }
        }
    }
    s
}

/// `s` reading its input from `Work` instead of `Send`: a later phase whose input is what an
/// earlier phase left in `Work` (the node's partial). Valid for the base algorithms, which
/// read an input byte only before they write the same byte of `Work`.
fn input_in_work(mut s: Schedule) -> Schedule {
    let work = |b: &mut Buf| {
        if *b == Buf::Send {
            *b = Buf::Work;
        }
    };
    for round in &mut s.rounds {
        for c in &mut round.comms {
            let (Comm::Send { region, .. } | Comm::Recv { region, .. }) = c;
            work(&mut region.buf);
        }
        round.locals.retain_mut(|l| match l {
            Local::Reduce { acc, .. } => {
                work(acc);
                true
            }
            // A copy of the input into the result is a copy of `Work` onto itself.
            Local::Copy { src, dst } => {
                work(&mut src.buf);
                !(src.buf == Buf::Work && src.range == *dst)
            }
            Local::Pack { src, .. } => {
                work(&mut src.buf);
                true
            }
        });
    }
    s.rounds
        .retain(|r| !r.comms.is_empty() || !r.locals.is_empty());
    s
}

impl CollModule for HierModule {
    fn barrier(&self) -> Option<Schedule> {
        // The node's linear barrier (arrivals at its lowest rank, then releases), with the
        // leaders' dissemination barrier between its two rounds.
        let (local, i) = self.local();
        let mut arrive = over(schedule::barrier_linear(local.len(), i), local);
        if i != 0 {
            return Some(arrive);
        }
        let release = Schedule {
            tmp_len: 0,
            rounds: arrive.rounds.split_off(arrive.rounds.len().min(1)),
        };
        let leaders = self.leaders(None);
        let l = index(&leaders, self.me);
        let across = over(schedule::barrier_dissemination(leaders.len(), l), &leaders);
        Some(arrive.then(across).then(release))
    }

    fn bcast(&self, root: usize, len: usize) -> Option<Schedule> {
        let leaders = self.leaders(Some(root));
        let (local, i) = self.local();
        let leader = index(local, leaders[self.group_of[self.me]]);
        let mut s = Schedule::default();
        if let Some(l) = leaders.iter().position(|&r| r == self.me) {
            let root_node = self.group_of[root];
            s = over(
                schedule::bcast_binomial(leaders.len(), l, root_node, len),
                &leaders,
            );
        }
        Some(s.then(over(
            schedule::bcast_binomial(local.len(), i, leader, len),
            local,
        )))
    }

    fn reduce(&self, root: usize, len: usize, _elem: usize, ordered: bool) -> Option<Schedule> {
        if ordered {
            return None;
        }
        let leaders = self.leaders(Some(root));
        let (local, i) = self.local();
        let leader = index(local, leaders[self.group_of[self.me]]);
        let s = over(
            schedule::reduce_binomial(local.len(), i, leader, len),
            local,
        );
        let Some(l) = leaders.iter().position(|&r| r == self.me) else {
            return Some(s);
        };
        let across = schedule::reduce_binomial(leaders.len(), l, self.group_of[root], len);
        Some(s.then(over(input_in_work(across), &leaders)))
    }

    fn allreduce(&self, len: usize, elem: usize, ordered: bool) -> Option<Schedule> {
        if ordered {
            return None;
        }
        let leaders = self.leaders(None);
        let (local, i) = self.local();
        let mut s = over(schedule::reduce_binomial(local.len(), i, 0, len), local);
        if let Some(l) = leaders.iter().position(|&r| r == self.me) {
            let n = leaders.len();
            let across = if len >= self.params.allreduce_long && len / elem.max(1) >= n {
                schedule::allreduce_ring(n, l, len, elem)
            } else {
                schedule::allreduce_recursive_doubling(n, l, len)
            };
            s = s.then(over(input_in_work(across), &leaders));
        }
        Some(s.then(over(
            schedule::bcast_binomial(local.len(), i, 0, len),
            local,
        )))
    }

    fn allgather(&self, block: usize) -> Option<Schedule> {
        // Each node's blocks are one region of `Work` (consecutive ranks): the leader gathers
        // them in place, the leaders exchange whole nodes' regions, each leader broadcasts
        // the whole vector within its node.
        let nodes = self.blocks()?;
        let (local, i) = self.local();
        let g = self.group_of[self.me];
        let at = nodes[g].start * block;
        let mut s = shifted(
            over(schedule::gather_linear(local.len(), i, 0, block), local),
            at,
        );
        let total = self.group_of.len() * block;
        if i == 0 {
            let leaders = self.leaders(None);
            let regions: Vec<Range<usize>> = nodes
                .iter()
                .map(|r| r.start * block..r.end * block)
                .collect();
            // Every exchange posted at once while the vector is short: one round of latency;
            // a ring of whole nodes above.
            let across = if total < self.params.allgather_long {
                schedule::allgatherv_linear(leaders.len(), g, &regions, true)
            } else {
                schedule::allgatherv_ring(leaders.len(), g, &regions, true)
            };
            s = s.then(over(across, &leaders));
        }
        Some(s.then(over(
            schedule::bcast_binomial(local.len(), i, 0, total),
            local,
        )))
    }

    fn reduce_scatter(
        &self,
        chunks: &[Range<usize>],
        _elem: usize,
        ordered: bool,
    ) -> Option<Schedule> {
        if ordered {
            return None;
        }
        // The node's sum at its leader; between leaders, the nodes' sums combined (recursive
        // doubling over the whole vector while it is short, a ring over whole nodes' chunks
        // above), each leader holding at least its node's chunks; then each member's chunk
        // from its leader.
        let nodes = self.blocks()?;
        let len = chunks.last().map_or(0, |c| c.end);
        let (local, i) = self.local();
        let g = self.group_of[self.me];
        let mut s = over(schedule::reduce_binomial(local.len(), i, 0, len), local);
        if i == 0 {
            let leaders = self.leaders(None);
            let across = if len >= self.params.allreduce_long {
                let node_chunks: Vec<Range<usize>> = nodes
                    .iter()
                    .map(|r| chunks[r.start].start..chunks[r.end - 1].end)
                    .collect();
                schedule::reduce_scatter_ring(leaders.len(), g, &node_chunks)
            } else {
                schedule::allreduce_recursive_doubling(leaders.len(), g, len)
            };
            s = s.then(over(input_in_work(across), &leaders));
            s.push(
                local[1..]
                    .iter()
                    .map(|&r| Comm::Send {
                        peer: r,
                        region: Region::work(chunks[r].clone()),
                    })
                    .collect(),
                vec![],
            );
        } else {
            s.push(
                vec![Comm::Recv {
                    peer: local[0],
                    region: Region::work(chunks[self.me].clone()),
                }],
                vec![],
            );
        }
        Some(s)
    }

    fn alltoallv(&self, sends: &[Range<usize>], recvs: &[Range<usize>]) -> Option<Schedule> {
        // Not hierarchical: across nodes, a pairwise exchange waits one network latency per
        // peer (n - 1 dependent steps); posted at once, the transfers overlap. The members of
        // an alltoallv may decide differently (their largest blocks differ): either form
        // exchanges one message each way per pair and posts its sends without waiting, so
        // linear and pairwise members meet each other.
        let largest = sends
            .iter()
            .chain(recvs)
            .map(|r| r.len())
            .max()
            .unwrap_or(0);
        (largest <= self.params.alltoall_linear)
            .then(|| schedule::alltoallv_linear(sends.len(), self.me, sends, recvs))
    }
}

#[cfg(test)]
mod tests;
