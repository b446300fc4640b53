//! What a process knows about its job: its rank, the job size, node placement and identity.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::rank::{ProcInfo, Rank};

/// Set once this process has passed its job's final barrier (see [`set_closing`]).
static CLOSING: AtomicBool = AtomicBool::new(false);

/// Mark this process's job as closing (`true`, once the process has passed the final barrier
/// of `MPI_Finalize`) or running again (`false`, at init). From then on every rank has finished
/// its traffic, and a peer that finishes first tears its connections down while this one is
/// still in the closing fence: components report such path failures as expected (at debug
/// level), not as faults.
pub fn set_closing(closing: bool) {
    CLOSING.store(closing, Ordering::Relaxed);
}

/// Whether this process's job is closing (see [`set_closing`]).
pub fn closing() -> bool {
    CLOSING.load(Ordering::Relaxed)
}

/// Identity of this process and of its job, as told by the launcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    /// This process's rank.
    pub rank: Rank,
    /// Number of processes.
    pub size: u32,
    /// A string unique to the job, safe in file names.
    pub job_id: String,
    /// Random bytes shared by the job's processes (never by another job) to tag traffic.
    pub secret: Vec<u8>,
    /// Node index of every rank (`node_of[r]`); equal values share a node.
    pub node_of: Vec<u32>,
    /// Name of every node index (host names, or namespace names in tests).
    pub node_names: Vec<String>,
}

impl JobInfo {
    /// A job of one process with no launcher.
    pub fn singleton() -> Self {
        let job_id = format!("s{}", std::process::id());
        Self {
            rank: 0,
            size: 1,
            secret: job_id.as_bytes().to_vec(),
            job_id,
            node_of: vec![0],
            node_names: vec!["localhost".into()],
        }
    }

    /// Rank `rank` of a job of `size` processes all on one node ("n0"), tagged by `secret`:
    /// what in-process tests and benchmarks of a component build.
    pub fn single_node(rank: Rank, size: u32, secret: &str) -> Self {
        Self {
            rank,
            size,
            job_id: secret.to_owned(),
            secret: secret.as_bytes().to_vec(),
            node_of: vec![0; size as usize],
            node_names: vec!["n0".into()],
        }
    }

    /// True when this node's ranks outnumber the cores this process may run on: busy-polling
    /// ranks then share cores, so waits should yield and protocols that need both ends
    /// running at once (pipelined copies) lose to ones that need only one.
    pub fn oversubscribed(&self) -> bool {
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        self.local_ranks().len() > cores
    }

    /// Describe every process of the job for `add_procs`.
    pub fn procs(&self) -> Vec<ProcInfo> {
        (0..self.size)
            .map(|r| ProcInfo {
                rank: r,
                node: self.node_of[r as usize],
                is_self: r == self.rank,
            })
            .collect()
    }

    /// Ranks sharing this process's node (including itself), in rank order.
    pub fn local_ranks(&self) -> Vec<Rank> {
        let me = self.node_of[self.rank as usize];
        (0..self.size)
            .filter(|r| self.node_of[*r as usize] == me)
            .collect()
    }

    /// Name of the node `rank` runs on.
    pub fn node_name(&self, rank: Rank) -> &str {
        let idx = self.node_of[rank as usize] as usize;
        self.node_names.get(idx).map(String::as_str).unwrap_or("?")
    }

    /// Prefix every shared-memory file of this job must carry (`/dev/shm/<prefix>...`), so the
    /// launcher can remove them after a crash.
    pub fn shm_prefix(&self) -> String {
        format!("rmca-{}-", self.job_id)
    }
}
