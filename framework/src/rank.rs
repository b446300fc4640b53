//! Process identity inside a job.

/// A process's rank in the job (its position in the world communicator).
pub type Rank = u32;

/// What every component knows about a peer process at `add_procs` time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcInfo {
    /// The peer's rank.
    pub rank: Rank,
    /// Index of the node the peer runs on (equal indices = same node, as told by the launcher).
    pub node: u32,
    /// True for the calling process itself.
    pub is_self: bool,
}

impl ProcInfo {
    /// True when the peer shares the caller's node.
    pub fn same_node_as(&self, other: &ProcInfo) -> bool {
        self.node == other.node
    }
}
