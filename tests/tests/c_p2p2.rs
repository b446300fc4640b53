//! Point-to-point extras through the C interface (`tests/c/p2p2.c`): matched probes
//! (`MPI_Mprobe`, `MPI_Improbe`, `MPI_Mrecv`, `MPI_Imrecv`, eager and rendezvous sizes, a
//! matched message not stolen by a later wildcard receive, `MPI_MESSAGE_NO_PROC`),
//! `MPI_Isendrecv(_replace)` rings, the large-count `_c` forms of every point-to-point call,
//! partitioned communication (partitions readied in reverse order, `Pready_range`/`_list`,
//! `Parrived`, restarts), generalized requests in `Waitall`/`Waitany`/`Testsome` with
//! point-to-point requests, and bad input, at 1, 2 and 3 ranks in every configuration.

use rmca_tests::c::every_config;

#[test]
fn matched_probes_isendrecv_large_counts_partitioned_and_generalized_requests() {
    every_config("p2p2");
}
