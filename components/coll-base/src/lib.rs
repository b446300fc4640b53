//! coll-base: every collective operation by the framework's base algorithms
//! ([`rmca_framework::coll::schedule`]), chosen by message size and process count (Open MPI's
//! coll/tuned style decision) and overridable per operation with `coll_<op>_algorithm`
//! (e.g. `--mca coll_allreduce_algorithm ring`). It serves every intra-communicator, at the
//! lowest priority of the built-in components, so every operation another component does not
//! provide falls through to it.
//!
//! | operation | auto choice | alternatives |
//! |---|---|---|
//! | barrier | dissemination | linear |
//! | bcast | binomial; scatter + ring allgather at >= `coll_bcast_long_size` bytes and > 2 ranks | linear |
//! | reduce | binomial | linear |
//! | allreduce | recursive doubling; ring at >= `coll_allreduce_long_size` bytes (and >= n elements) | reduce_bcast |
//! | gather, scatter | binomial | linear |
//! | allgather | recursive doubling for powers of two up to 256 KiB in total; above, neighbour exchange for even process counts, ring for odd; ring for other counts up to 256 KiB | ring, neighbor_exchange, linear |
//! | alltoall | Bruck for blocks of at most `coll_alltoall_small_size` bytes on at least 12 processes; linear (every transfer posted) up to `coll_alltoall_medium_size`; pairwise exchange above | bruck, linear, pairwise |
//! | alltoallv | pairwise exchange (linear when `coll_alltoall_algorithm` is linear) | linear |
//! | gatherv, scatterv | linear (no parameter) | |
//! | allgatherv | ring (follows `coll_allgather_algorithm`: linear, else ring) | linear |
//! | reduce_scatter(_block) | ring at >= `coll_allreduce_long_size` bytes, else reduce_scatterv | ring, reduce_scatterv |
//! | scan, exscan | recursive doubling | linear |
//!
//! A non-commutative operation is combined in rank order whatever the parameters say: reduce
//! uses the linear algorithm if chosen, else a binomial reduction to rank 0 then one hop to
//! the root; allreduce never uses the ring (recursive doubling instead); reduce_scatter uses
//! reduce_scatterv; scan and exscan keep rank order in both algorithms.
#![deny(unsafe_code)]
#![warn(missing_docs)]

use std::ops::Range;

use rmca_framework::coll::schedule::{self, Schedule};
use rmca_framework::coll::{CollComponent, CollModule, CommShape};
use rmca_framework::component::{Component, ComponentMeta};
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore};

/// Allgathers up to this many bytes in total use recursive doubling under 'auto' (powers of two).
const ALLGATHER_RD_MAX: usize = 256 << 10;

/// Default of `coll_bcast_long_size`.
const BCAST_LONG_SIZE: u64 = 128 << 10;

/// Default of `coll_allreduce_long_size`.
const ALLREDUCE_LONG_SIZE: u64 = 64 << 10;

/// Default of `coll_alltoall_small_size`: Open MPI tuned's bound for Bruck (200 B), rounded
/// up to a power of two.
const ALLTOALL_SMALL_SIZE: u64 = 256;

/// Fewest processes for which 'auto' takes Bruck's alltoall: below, its log2(n) rounds save
/// too few message latencies over posting every transfer at once to pay for forwarding
/// about half the blocks log2(n) times (Open MPI tuned's old decision took it from 13).
const ALLTOALL_BRUCK_MIN_RANKS: usize = 12;

/// Default of `coll_alltoall_medium_size`: above, pairwise exchange, one peer at a time, so
/// that no rank has n - 1 large messages arriving at once. Measured with osu_alltoall, this
/// limit at 32 KiB against 64 and 128 KiB, alternating, 3 rounds (2026-11-30, load 10-18):
/// 8 ranks on 8 namespace nodes, posting everything took 0.38x pairwise's time at 64 KiB
/// blocks and 0.23x at 128 KiB (medians 40 and 29 ms against 106 and 125), 256 KiB level;
/// 4 ranks of one node, 0.41-0.70x at 64 KiB and 0.73-0.85x at 128 KiB, 256 KiB level.
const ALLTOALL_MEDIUM_SIZE: u64 = 128 << 10;

/// Default priority: the lowest of the built-in components, so that it is the fallback.
const PRIORITY: i32 = 10;

/// The coll-base component.
#[derive(Debug)]
pub struct BaseComponent;

/// The registered instance.
pub static BASE: BaseComponent = BaseComponent;
rmca_framework::builtin_component!(Coll, BASE);

/// The operations with a `coll_<op>_algorithm` parameter: op, values (`auto` first), help.
/// [`CollParams::algorithms`] follows this order.
const ALGORITHMS: [(&str, &[&str], &str); 10] = [
    ("barrier", &["auto", "dissemination", "linear"], "Barrier algorithm (auto: dissemination)"),
    ("bcast", &["auto", "binomial", "scatter_allgather", "linear"], "Broadcast algorithm (auto: binomial below coll_bcast_long_size, scatter+ring allgather above)"),
    ("reduce", &["auto", "binomial", "linear"], "Reduce algorithm (auto: binomial)"),
    ("allreduce", &["auto", "recursive_doubling", "ring", "reduce_bcast"], "Allreduce algorithm (auto: recursive doubling below coll_allreduce_long_size, ring above)"),
    ("gather", &["auto", "binomial", "linear"], "Gather algorithm (auto: binomial)"),
    ("scatter", &["auto", "binomial", "linear"], "Scatter algorithm (auto: binomial)"),
    ("allgather", &["auto", "recursive_doubling", "ring", "neighbor_exchange", "linear"], "Allgather algorithm (auto: recursive doubling for powers of two up to 256 KiB in total; above 256 KiB neighbour exchange for even process counts, ring for odd; ring otherwise); allgatherv runs linear when this is 'linear', else ring"),
    ("alltoall", &["auto", "pairwise", "linear", "bruck"], "Alltoall algorithm (auto: Bruck for blocks of at most coll_alltoall_small_size bytes on 12 or more processes, linear up to coll_alltoall_medium_size, pairwise exchange above); alltoallv runs linear when this is 'linear', else pairwise (Bruck forwards others' blocks, whose sizes alltoallv does not share)"),
    ("reduce_scatter", &["auto", "ring", "reduce_scatterv"], "Reduce_scatter(_block) algorithm (auto: ring at >= coll_allreduce_long_size bytes for built-in and commutative operations, else binomial reduce to rank 0 + linear scatterv; non-commutative operations always take the latter)"),
    ("scan", &["auto", "recursive_doubling", "linear"], "Scan and exscan algorithm (auto: recursive doubling)"),
];

impl Component for BaseComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "base",
            version: env!("CARGO_PKG_VERSION"),
            description: "Every collective by point-to-point algorithms chosen by size and process count (binomial, recursive doubling, ring, ...); coll_<op>_algorithm overrides",
        }
    }

    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        params.add(
            Param::int("priority", i64::from(PRIORITY))
                .range(0, 100)
                .help("Priority of coll-base in a communicator's stack of coll components (it serves every intra-communicator and every operation)")
                .level(Level::Tuning)
                .job_wide(),
        );
        // Every rank must run the same algorithm (their send/receive schedules must match), so
        // the collective choices are job-wide. The names predate the coll framework (no
        // component in them) and are kept.
        for (op, values, help) in ALGORITHMS {
            params.add_global(
                Param::enumeration(&format!("coll_{op}_algorithm"), "auto", values)
                    .help(help)
                    .level(Level::Tuning)
                    .job_wide(),
            );
        }
        // The size thresholds of the 'auto' choices, job-wide as the algorithms.
        let thresholds: [(&str, u64, &str); 4] = [
            ("coll_bcast_long_size", BCAST_LONG_SIZE, "Broadcasts of at least this many bytes use scatter+allgather under 'auto'"),
            ("coll_allreduce_long_size", ALLREDUCE_LONG_SIZE, "Allreduces of at least this many bytes use the ring under 'auto'"),
            ("coll_alltoall_small_size", ALLTOALL_SMALL_SIZE, "Alltoalls of blocks of at most this many bytes use Bruck's algorithm under 'auto' (on 12 or more processes)"),
            ("coll_alltoall_medium_size", ALLTOALL_MEDIUM_SIZE, "Alltoalls of blocks of at most this many bytes (and more than coll_alltoall_small_size) post every transfer at once under 'auto'; larger ones use pairwise exchange"),
        ];
        for (name, default, help) in thresholds {
            params.add_global(
                Param::size(name, default)
                    .help(help)
                    .level(Level::Tuning)
                    .job_wide(),
            );
        }
    }
}

impl CollComponent for BaseComponent {
    fn priority(&self, params: &ParamStore) -> i32 {
        params
            .get_int("coll_base_priority")
            .map_or(PRIORITY, |v| i32::try_from(v).unwrap_or(PRIORITY))
    }

    fn query(&self, shape: &CommShape, params: &ParamStore) -> Option<Box<dyn CollModule>> {
        // Intercommunicator collectives are the API's own (two groups, leaders' exchange).
        if shape.inter {
            return None;
        }
        Some(Box::new(BaseModule::new(
            shape.size(),
            shape.rank,
            CollParams::read(params),
        )))
    }
}

/// The `coll_*` parameters coll-base decides by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollParams {
    /// The algorithm of each operation of [`ALGORITHMS`] ("auto" when unset).
    algorithms: [String; ALGORITHMS.len()],
    /// Broadcasts of at least this many bytes use scatter + allgather under "auto".
    pub bcast_long_size: usize,
    /// Allreduces (and reduce_scatters) of at least this many bytes use the ring under "auto".
    pub allreduce_long_size: usize,
    /// Alltoall blocks of at most this many bytes use Bruck under "auto" (enough processes).
    pub alltoall_small_size: usize,
    /// Alltoall blocks of at most this many bytes post every transfer at once under "auto".
    pub alltoall_medium_size: usize,
}

impl Default for CollParams {
    fn default() -> Self {
        Self {
            algorithms: ALGORITHMS.map(|_| "auto".to_owned()),
            bcast_long_size: BCAST_LONG_SIZE as usize,
            allreduce_long_size: ALLREDUCE_LONG_SIZE as usize,
            alltoall_small_size: ALLTOALL_SMALL_SIZE as usize,
            alltoall_medium_size: ALLTOALL_MEDIUM_SIZE as usize,
        }
    }
}

impl CollParams {
    /// The parameters of `params` (defaults for those it does not declare).
    pub fn read(params: &ParamStore) -> Self {
        let size = |name: &str, default: u64| {
            usize::try_from(params.get_size(name).unwrap_or(default)).unwrap_or(usize::MAX)
        };
        Self {
            algorithms: ALGORITHMS.map(|(op, _, _)| {
                params
                    .get_str(&format!("coll_{op}_algorithm"))
                    .map(str::to_owned)
                    .unwrap_or_else(|_| "auto".into())
            }),
            bcast_long_size: size("coll_bcast_long_size", BCAST_LONG_SIZE),
            allreduce_long_size: size("coll_allreduce_long_size", ALLREDUCE_LONG_SIZE),
            alltoall_small_size: size("coll_alltoall_small_size", ALLTOALL_SMALL_SIZE),
            alltoall_medium_size: size("coll_alltoall_medium_size", ALLTOALL_MEDIUM_SIZE),
        }
    }

    /// The algorithm chosen for `op` ("auto" when unset).
    pub fn algorithm(&self, op: &str) -> &str {
        &self.algorithms[Self::index(op)]
    }

    /// `op`'s place in [`ALGORITHMS`].
    fn index(op: &str) -> usize {
        ALGORITHMS
            .iter()
            .position(|(o, _, _)| *o == op)
            .expect("every collective has an algorithm parameter")
    }

    /// `op`'s algorithm set to `algorithm` (tests, and callers that decide for themselves).
    pub fn with(mut self, op: &str, algorithm: &str) -> Self {
        self.algorithms[Self::index(op)] = algorithm.to_owned();
        self
    }
}

/// coll-base on one communicator: `n` members, this one `me`.
#[derive(Debug)]
pub struct BaseModule {
    n: usize,
    me: usize,
    params: CollParams,
}

impl BaseModule {
    /// The module of rank `me` of `n` under `params`.
    pub fn new(n: usize, me: usize, params: CollParams) -> Self {
        Self { n, me, params }
    }
}

impl CollModule for BaseModule {
    fn barrier(&self) -> Option<Schedule> {
        let (n, me) = (self.n, self.me);
        Some(match self.params.algorithm("barrier") {
            "linear" => schedule::barrier_linear(n, me),
            _ => schedule::barrier_dissemination(n, me),
        })
    }

    fn bcast(&self, root: usize, len: usize) -> Option<Schedule> {
        let (n, me) = (self.n, self.me);
        let long = self.params.bcast_long_size;
        Some(match self.params.algorithm("bcast") {
            "linear" => schedule::bcast_linear(n, me, root, len),
            "binomial" => schedule::bcast_binomial(n, me, root, len),
            "scatter_allgather" => schedule::bcast_scatter_allgather(n, me, root, len),
            _ if n > 2 && len >= long => schedule::bcast_scatter_allgather(n, me, root, len),
            _ => schedule::bcast_binomial(n, me, root, len),
        })
    }

    fn reduce(&self, root: usize, len: usize, _elem: usize, ordered: bool) -> Option<Schedule> {
        let (n, me) = (self.n, self.me);
        Some(match self.params.algorithm("reduce") {
            "linear" => schedule::reduce_linear(n, me, root, len),
            // The binomial tree combines cyclically from the root: rank order only from 0.
            _ if ordered => {
                tracing::debug!("reduce: a non-commutative operation reduces to rank 0 in rank order (then one hop to root {root} if it is not 0)");
                schedule::reduce_in_order(n, me, root, len)
            }
            _ => schedule::reduce_binomial(n, me, root, len),
        })
    }

    fn allreduce(&self, len: usize, elem: usize, ordered: bool) -> Option<Schedule> {
        let (n, me) = (self.n, self.me);
        let long = self.params.allreduce_long_size;
        Some(match self.params.algorithm("allreduce") {
            // The ring combines chunk c from rank c on: not rank order.
            "ring" if !ordered => schedule::allreduce_ring(n, me, len, elem),
            "ring" => {
                tracing::debug!("allreduce: a non-commutative operation runs recursive doubling, not the ring chosen by coll_allreduce_algorithm");
                schedule::allreduce_recursive_doubling(n, me, len)
            }
            "reduce_bcast" => schedule::allreduce_reduce_bcast(n, me, len),
            "recursive_doubling" => schedule::allreduce_recursive_doubling(n, me, len),
            _ if !ordered && n > 1 && len / elem.max(1) >= n && len >= long => {
                schedule::allreduce_ring(n, me, len, elem)
            }
            _ => schedule::allreduce_recursive_doubling(n, me, len),
        })
    }

    fn gather(&self, root: usize, block: usize) -> Option<Schedule> {
        let (n, me) = (self.n, self.me);
        Some(match self.params.algorithm("gather") {
            "linear" => schedule::gather_linear(n, me, root, block),
            _ => schedule::gather_binomial(n, me, root, block),
        })
    }

    fn scatter(&self, root: usize, block: usize) -> Option<Schedule> {
        let (n, me) = (self.n, self.me);
        Some(match self.params.algorithm("scatter") {
            "linear" => schedule::scatter_linear(n, me, root, block),
            _ => schedule::scatter_binomial(n, me, root, block),
        })
    }

    fn allgather(&self, block: usize) -> Option<Schedule> {
        let (n, me) = (self.n, self.me);
        Some(match self.params.algorithm("allgather") {
            "ring" => schedule::allgather_ring(n, me, block),
            "linear" => schedule::allgather_linear(n, me, block),
            "recursive_doubling" => schedule::allgather_recursive_doubling(n, me, block),
            "neighbor_exchange" => schedule::allgather_neighbor_exchange(n, me, block),
            _ if n.is_power_of_two() && n * block <= ALLGATHER_RD_MAX => {
                schedule::allgather_recursive_doubling(n, me, block)
            }
            // Long vectors: n/2 neighbour exchanges of two blocks rather than the ring's
            // n - 1 steps of one (Open MPI tuned likewise for even counts); both talk to
            // neighbours only.
            _ if n.is_multiple_of(2) && n * block > ALLGATHER_RD_MAX => {
                schedule::allgather_neighbor_exchange(n, me, block)
            }
            _ => schedule::allgather_ring(n, me, block),
        })
    }

    fn alltoall(&self, block: usize) -> Option<Schedule> {
        let (n, me) = (self.n, self.me);
        let p = &self.params;
        let ranges =
            || -> Vec<Range<usize>> { (0..n).map(|r| r * block..(r + 1) * block).collect() };
        Some(match p.algorithm("alltoall") {
            "bruck" => schedule::alltoall_bruck(n, me, block),
            "linear" => schedule::alltoallv_linear(n, me, &ranges(), &ranges()),
            "pairwise" => schedule::alltoallv_pairwise(n, me, &ranges(), &ranges()),
            _ if block <= p.alltoall_small_size && n >= ALLTOALL_BRUCK_MIN_RANKS => {
                schedule::alltoall_bruck(n, me, block)
            }
            _ if block <= p.alltoall_medium_size => {
                schedule::alltoallv_linear(n, me, &ranges(), &ranges())
            }
            _ => schedule::alltoallv_pairwise(n, me, &ranges(), &ranges()),
        })
    }

    fn alltoallv(&self, sends: &[Range<usize>], recvs: &[Range<usize>]) -> Option<Schedule> {
        let (n, me) = (self.n, self.me);
        Some(match self.params.algorithm("alltoall") {
            "linear" => schedule::alltoallv_linear(n, me, sends, recvs),
            _ => schedule::alltoallv_pairwise(n, me, sends, recvs),
        })
    }

    fn gatherv(
        &self,
        root: usize,
        mine: usize,
        regions: &[Range<usize>],
        in_place: bool,
    ) -> Option<Schedule> {
        Some(schedule::gatherv_linear(
            self.n, self.me, root, mine, regions, in_place,
        ))
    }

    fn scatterv(
        &self,
        root: usize,
        mine: usize,
        regions: &[Range<usize>],
        in_place: bool,
    ) -> Option<Schedule> {
        Some(schedule::scatterv_linear(
            self.n, self.me, root, mine, regions, in_place,
        ))
    }

    fn allgatherv(&self, regions: &[Range<usize>], in_place: bool) -> Option<Schedule> {
        let (n, me) = (self.n, self.me);
        Some(match self.params.algorithm("allgather") {
            "linear" => schedule::allgatherv_linear(n, me, regions, in_place),
            _ => schedule::allgatherv_ring(n, me, regions, in_place),
        })
    }

    fn reduce_scatter(
        &self,
        chunks: &[Range<usize>],
        _elem: usize,
        ordered: bool,
    ) -> Option<Schedule> {
        let (n, me) = (self.n, self.me);
        let len = chunks.last().map_or(0, |c| c.end);
        let long = self.params.allreduce_long_size;
        // The ring combines chunk c in ring order from rank c + 1: commutative only.
        Some(match self.params.algorithm("reduce_scatter") {
            "ring" if !ordered => schedule::reduce_scatter_ring(n, me, chunks),
            "ring" => {
                tracing::debug!("reduce_scatter: a non-commutative operation runs reduce_scatterv, not the ring chosen by coll_reduce_scatter_algorithm");
                schedule::reduce_scatter_reduce_scatterv(n, me, chunks)
            }
            "reduce_scatterv" => schedule::reduce_scatter_reduce_scatterv(n, me, chunks),
            _ if !ordered && n > 1 && len >= long => schedule::reduce_scatter_ring(n, me, chunks),
            _ => schedule::reduce_scatter_reduce_scatterv(n, me, chunks),
        })
    }

    fn scan(&self, len: usize, exclusive: bool) -> Option<Schedule> {
        let (n, me) = (self.n, self.me);
        Some(match self.params.algorithm("scan") {
            "linear" => schedule::scan_linear(n, me, len, exclusive),
            _ => schedule::scan_recursive_doubling(n, me, len, exclusive),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmca_framework::component::{component_params, Framework};

    #[test]
    fn parameters_choose_algorithms() {
        let params = component_params(
            Framework::Coll,
            &BASE,
            &[
                ("coll_bcast_algorithm", "linear"),
                ("coll_base_priority", "3"),
            ],
        )
        .unwrap();
        assert_eq!(BASE.priority(&params), 3);
        let m = BASE.query(&CommShape::new(0, vec![0; 4]), &params).unwrap();
        assert_eq!(m.bcast(0, 8), Some(schedule::bcast_linear(4, 0, 0, 8)));
        // auto: binomial below the long size, scatter + allgather above.
        let defaults = component_params(Framework::Coll, &BASE, &[]).unwrap();
        let m = BASE
            .query(&CommShape::new(1, vec![0; 4]), &defaults)
            .unwrap();
        assert_eq!(m.bcast(0, 8), Some(schedule::bcast_binomial(4, 1, 0, 8)));
        assert_eq!(
            m.bcast(0, 1 << 20),
            Some(schedule::bcast_scatter_allgather(4, 1, 0, 1 << 20))
        );
        // Non-commutative: rank order, whatever the parameter says.
        let ring = component_params(
            Framework::Coll,
            &BASE,
            &[("coll_allreduce_algorithm", "ring")],
        )
        .unwrap();
        let m = BASE.query(&CommShape::new(2, vec![0; 4]), &ring).unwrap();
        assert_eq!(
            m.allreduce(64, 4, true),
            Some(schedule::allreduce_recursive_doubling(4, 2, 64))
        );
        assert_eq!(
            m.allreduce(64, 4, false),
            Some(schedule::allreduce_ring(4, 2, 64, 4))
        );
    }

    #[test]
    fn alltoall_auto_takes_bruck_linear_or_pairwise_by_block_and_process_count() {
        let defaults = component_params(Framework::Coll, &BASE, &[]).unwrap();
        let at = |n: usize| {
            BASE.query(&CommShape::new(1, vec![0; n]), &defaults)
                .unwrap()
        };
        let r = |n: usize, b: usize| (0..n).map(|i| i * b..(i + 1) * b).collect::<Vec<_>>();
        let linear = |n: usize, b: usize| schedule::alltoallv_linear(n, 1, &r(n, b), &r(n, b));
        let pairwise = |n: usize, b: usize| schedule::alltoallv_pairwise(n, 1, &r(n, b), &r(n, b));
        assert_eq!(at(16).alltoall(8), Some(schedule::alltoall_bruck(16, 1, 8)));
        assert_eq!(
            at(16).alltoall(256),
            Some(schedule::alltoall_bruck(16, 1, 256))
        );
        assert_eq!(
            at(8).alltoall(8),
            Some(linear(8, 8)),
            "few processes: posted"
        );
        assert_eq!(at(16).alltoall(257), Some(linear(16, 257)));
        assert_eq!(at(16).alltoall(128 << 10), Some(linear(16, 128 << 10)));
        assert_eq!(
            at(16).alltoall((128 << 10) + 1),
            Some(pairwise(16, (128 << 10) + 1))
        );
        // The thresholds are parameters; Bruck forced on alltoallv runs pairwise (its
        // counts differ per member: nobody can forward another's block).
        let forced = component_params(
            Framework::Coll,
            &BASE,
            &[
                ("coll_alltoall_algorithm", "bruck"),
                ("coll_alltoall_medium_size", "1k"),
            ],
        )
        .unwrap();
        let m = BASE.query(&CommShape::new(1, vec![0; 4]), &forced).unwrap();
        assert_eq!(m.alltoall(4096), Some(schedule::alltoall_bruck(4, 1, 4096)));
        assert_eq!(m.alltoallv(&r(4, 8), &r(4, 8)), Some(pairwise(4, 8)));
        let small = component_params(
            Framework::Coll,
            &BASE,
            &[("coll_alltoall_medium_size", "1k")],
        )
        .unwrap();
        let m = BASE.query(&CommShape::new(1, vec![0; 4]), &small).unwrap();
        assert_eq!(m.alltoall(2048), Some(pairwise(4, 2048)));
    }

    #[test]
    fn long_allgathers_take_neighbor_exchange_on_even_counts() {
        let defaults = component_params(Framework::Coll, &BASE, &[]).unwrap();
        let at = |n: usize| {
            BASE.query(&CommShape::new(1, vec![0; n]), &defaults)
                .unwrap()
        };
        // Powers of two up to 256 KiB in total: recursive doubling.
        assert_eq!(
            at(8).allgather(32 << 10),
            Some(schedule::allgather_recursive_doubling(8, 1, 32 << 10))
        );
        // Above: neighbour exchange on even counts, the ring on odd ones.
        assert_eq!(
            at(8).allgather(64 << 10),
            Some(schedule::allgather_neighbor_exchange(8, 1, 64 << 10))
        );
        assert_eq!(
            at(6).allgather(64 << 10),
            Some(schedule::allgather_neighbor_exchange(6, 1, 64 << 10))
        );
        assert_eq!(
            at(5).allgather(64 << 10),
            Some(schedule::allgather_ring(5, 1, 64 << 10))
        );
        assert_eq!(at(6).allgather(8), Some(schedule::allgather_ring(6, 1, 8)));
    }

    #[test]
    fn bad_algorithm_names_are_refused() {
        let e = component_params(
            Framework::Coll,
            &BASE,
            &[("coll_bcast_algorithm", "binary")],
        )
        .unwrap_err();
        let text = e
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(text.contains("coll_bcast_algorithm"), "{text}");
        assert!(text.contains("binomial"), "valid values listed: {text}");
    }

    #[test]
    fn intercommunicators_are_declined() {
        let params = component_params(Framework::Coll, &BASE, &[]).unwrap();
        let mut shape = CommShape::new(0, vec![0, 0]);
        shape.inter = true;
        assert!(BASE.query(&shape, &params).is_none());
    }
}
