//! osc-rdma: MPI windows whose puts and gets move by the BTLs' RDMA.
//!
//! Each member registers its window memory with the RDMA BTLs the PML reaches the window's
//! members with (shm's CMA, rc's RDMA, self) and sends every member its address and remote
//! keys; a put or get is then one BTL put or get per contiguous run of the target layout,
//! straight between the origin's packed bytes and the target's memory, with no work at the
//! target (unless its runs are short: `osc_rdma_min_run`, one message then). Transfers start
//! with the next progress (a synchronization's at the latest) together with those queued
//! since, and runs that continue each other in both address spaces (a sweep of small puts
//! to consecutive displacements) go as one. Everything else is osc-am's protocol, reused
//! through its engine ([`rmca_osc_am::engine::Engine`]): the synchronizations, and the
//! accumulates and atomics, which the target applies (so they stay atomic and ordered as
//! `accumulate_ordering` requires whatever the BTL offers). [`track`] keeps the two paths
//! consistent: a synchronization message to a target leaves only after the transfers to it
//! completed.
//! Locks of targets on the origin's node are the exception: an atomic on the target's lock
//! word, which each member shares with its node ([`lockword`], `osc_rdma_lock_words`).
//! And so are accumulates, fetch-and-ops and compare-and-swaps on those targets: the origin
//! applies them itself, by CMA under the target's accumulate word in the same shared object
//! ([`direct`], `osc_rdma_acc_direct`), which the target holds while it applies the ones
//! that come as messages.
//! And so are puts and gets of the program's own buffers to those targets: the origin moves
//! them itself by CMA at the synchronization that completes them, every one queued since in
//! one system call per target ([`cma`], `osc_rdma_cma_direct`), so that a put and its flush,
//! or a lock, a get and an unlock, cost one system call and no pass of the PML.
//! And so are `MPI_Win_post` and `MPI_Win_complete` to those members: one added to a
//! counter in the member's shared object (its posts, its completes, per window rank), which
//! its start or wait reads, instead of a message ([`lockword`]; not when the job's waits
//! sleep, `mpi_wait_mode block`: a counter rings no doorbell).
//!
//! The component serves a window when the PML says an RDMA BTL reaches every member
//! ([`WinConfig::rdma`]; pml-dr offers none, so osc-am serves its windows); osc-sm ranks
//! above it for allocated windows within a node. A dynamic window's memory is attached
//! region by region after creation, and its origins have no keys for it: osc-rdma serves
//! it entirely with osc-am's messages (so `--mca osc rdma` serves every window of an ob1
//! job).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod cma;
pub mod direct;
pub mod lockword;
mod module;
pub mod slot;
pub mod track;

/// The unit tests' allocator: counts each thread's allocations (tests that a warm path
/// allocates nothing).
#[cfg(test)]
#[global_allocator]
static ALLOC: rmca_test_support::alloc_count::Counting = rmca_test_support::alloc_count::Counting;

use rmca_framework::buffer::UserBuf;
use rmca_framework::component::{Component, ComponentMeta};
use rmca_framework::osc::{OscComponent, OscError, OscModule, WinConfig};
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore};

pub use module::RdmaModule;

/// The osc-rdma component.
#[derive(Debug)]
pub struct RdmaComponent;

/// The registered instance.
pub static RDMA: RdmaComponent = RdmaComponent;
rmca_framework::builtin_component!(Osc, RDMA);

/// Default priority: above osc-am (10), below osc-sm (30).
const PRIORITY: i32 = 20;

/// Default `osc_rdma_small_limit`: every put and get by RDMA. An 8-byte put and its flush
/// took 1.5 us by shm's CMA against 2.1 by message (median of 3000, bench/osc_rt.c, two
/// runs alternating, 2026-11-30): the CMA copy completes at the origin, where a message
/// needs the target's progress and a round trip for the flush. (The 4096 of before came
/// from one OSU run at load 18, where every figure moved 2-10x.) Behind a lock request
/// not granted yet the operation goes as a message whatever its size (see the module).
const SMALL_LIMIT: u64 = 0;

/// Default `osc_rdma_min_run`. A put of 1 MiB under fence in runs of B bytes (stride 2B,
/// two ranks over shm, median of 15, two runs each way, load 1.8; bench/osc_strided.c,
/// 2026-11-30; a third pair at load 1.6 agreed: 16 KiB 278 us against 284):
/// by CMA one run costs about 2 us (272 ms at 8 B, 5.3 ms at 512 B, 0.6-0.9 ms at 4-8 KiB),
/// by one message 0.29-0.44 ms from 512 B to 8 KiB; the two meet between 16 and 32 KiB
/// (16 KiB: 215-404 us against 269-289). A run-per-transfer BTL cheaper than a system call
/// (rc's work requests) would meet lower: the parameter says where.
const MIN_RUN: u64 = 16384;

/// Default `osc_rdma_acc_slot_ns`: how long an origin waits for a target of its node to
/// take an accumulate posted in its slot before it applies it by CMA itself. A target in
/// MPI's progress takes it within a pass (well under a microsecond); the bound is paid only
/// when the target computes, once per 64 operations to it. Not posted at all when the
/// job's waits yield or sleep ([`slot::bound_for`]).
const ACC_SLOT_NS: u64 = 4000;

impl Component for RdmaComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "rdma",
            version: env!("CARGO_PKG_VERSION"),
            description: "One-sided communication with puts and gets by the BTLs' RDMA (shm CMA, rc, self), locks by shared lock words within a node, other synchronization and accumulates by active messages",
        }
    }

    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        params.add(
            Param::int("priority", i64::from(PRIORITY))
                .range(0, 100)
                .help("Priority of osc-rdma among the OSC components that can serve a window (the windows whose members an RDMA BTL reaches)")
                .level(Level::Tuning),
        );
        params.add(
            Param::int("small_limit", SMALL_LIMIT as i64)
                .range(0, 1 << 30)
                .help("Puts and gets of at most this many bytes travel as active messages, larger ones by the BTLs' RDMA (0: all by RDMA; an operation behind a lock request not granted yet goes as a message whatever its size)")
                .level(Level::Tuning),
        );
        params.add(
            Param::int("lock_words", 1)
                .range(0, 1)
                .help("Lock and unlock the window's members on this node by atomics on a lock word each, in a small shared object per member, instead of a message round trip, on windows over memory given at creation (0: by messages; members on other nodes, and dynamic windows, always go by messages)")
                .level(Level::Tuning),
        );
        params.add(
            Param::int("acc_direct", 1)
                .range(0, 1)
                .help("Accumulates, fetch-and-ops and compare-and-swaps on the window's members on this node are applied by the origin itself (the target's bytes read and written by CMA under the target's accumulate word, in the small shared object that holds its lock word), on windows over memory given at creation: no message, no work at the target (0: the target applies every one, sent as a message; members on other nodes, and dynamic windows, always so)")
                .level(Level::Tuning),
        );
        params.add(
            Param::int("acc_slot_ns", ACC_SLOT_NS as i64)
                .range(0, 1_000_000_000)
                .help("Accumulates, fetch-and-ops and compare-and-swaps of one contiguous run (up to 256 bytes) on the window's members on this node are posted in a slot of the target's shared object for the target's progress to apply (no system call); one not taken within this many nanoseconds (the target computes outside MPI) is claimed back and applied by the origin by CMA (osc_rdma_acc_direct), as are the next 64 to that target (0: never posted; nor when waits yield or sleep, mpi_wait_mode yield or block, as auto picks on an oversubscribed node: the target gives its core away)")
                .level(Level::Tuning),
        );
        params.add(
            Param::int("cma_direct", 1)
                .range(0, 1)
                .help("Puts and gets of the program's contiguous buffers to the window's members on this node are moved by the origin itself with CMA at the synchronization (or progress) that completes them, all those queued since in one system call per target, on windows over memory given at creation (0: by the BTLs' RDMA through the PML; members on other nodes, and dynamic windows, always so)")
                .level(Level::Tuning),
        );
        params.add(
            Param::int("min_run", MIN_RUN as i64)
                .range(0, 1 << 30)
                .help("Puts and gets whose target layout has runs of fewer bytes than this on average travel as one active message each (packed at the origin, unpacked at the target) instead of one RDMA transfer per run (0: by RDMA whatever the runs)")
                .level(Level::Tuning),
        );
    }
}

impl OscComponent for RdmaComponent {
    fn priority(&self, params: &ParamStore) -> i32 {
        params
            .get_int("osc_rdma_priority")
            .map_or(PRIORITY, |v| i32::try_from(v).unwrap_or(PRIORITY))
    }

    fn query(&self, config: &WinConfig, params: &ParamStore) -> bool {
        self.refusal(config, params).is_none()
    }

    fn refusal(&self, config: &WinConfig, _params: &ParamStore) -> Option<String> {
        (!config.rdma).then(|| {
            "it needs RDMA put and get to every member (pml ob1 over the shm, rc or self BTLs)"
                .into()
        })
    }

    fn create(
        &self,
        config: WinConfig,
        memory: UserBuf,
        params: &ParamStore,
    ) -> Result<Box<dyn OscModule>, OscError> {
        let small_limit = params
            .get_int("osc_rdma_small_limit")
            .map_or(SMALL_LIMIT, |v| u64::try_from(v).unwrap_or(SMALL_LIMIT));
        let min_run = params
            .get_int("osc_rdma_min_run")
            .map_or(MIN_RUN, |v| u64::try_from(v).unwrap_or(MIN_RUN));
        // A window made with `no_locks` never locks: no word to make. Nor a dynamic window:
        // every operation on it is a message the target applies, so a word held from the
        // lock to the unlock spans a round trip the message protocol keeps within one
        // progress of the target's (MPICH's linked_list_bench_lock_excl, 4 ranks on 2
        // cores: 21 s with words against 3 s by messages).
        let words = !config.no_locks
            && !config.dynamic
            && params.get_int("osc_rdma_lock_words").unwrap_or(1) != 0;
        // Accumulates by CMA under the target's word: any window over memory given at
        // creation (a dynamic window's targets are reached by messages only).
        let acc = !config.dynamic && params.get_int("osc_rdma_acc_direct").unwrap_or(1) != 0;
        // Puts and gets by CMA from here: likewise.
        let cma = !config.dynamic && params.get_int("osc_rdma_cma_direct").unwrap_or(1) != 0;
        let module =
            RdmaModule::with_small_limit(config, memory, small_limit).with_min_run(min_run);
        let module = if words {
            module.with_lock_words()
        } else {
            module
        };
        let module = if cma {
            module.with_cma_direct()
        } else {
            module
        };
        let slot_ns = params
            .get_int("osc_rdma_acc_slot_ns")
            .map_or(ACC_SLOT_NS, |v| u64::try_from(v).unwrap_or(ACC_SLOT_NS));
        // (The wait mode is the job's, set at init: the targets' as well as this process's.)
        let slot_ns = slot::bound_for(slot_ns, rmca_framework::progress::wait_mode());
        Ok(Box::new(if acc {
            module.with_acc_words().with_acc_slots(slot_ns)
        } else {
            module
        }))
    }
}
