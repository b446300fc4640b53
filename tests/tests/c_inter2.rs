//! Collectives on an intercommunicator (`tests/c/inter2.c`): the blocking v-forms,
//! `MPI_Alltoallw` and the reduce-scatters, every non-blocking collective (one progressing
//! while its process blocks in point-to-point, two outstanding at once), the large-count
//! forms, persistent collectives, `MPI_Comm_split_type`, and the refusals (prefix
//! reductions, `MPI_IN_PLACE`, bad roots, counts, types and operations). At 1 rank there is
//! no intercommunicator; at 3 the groups are uneven (2 and 1).

use rmca_tests::c::every_config;

#[test]
fn intercommunicator_collectives() {
    every_config("inter2");
}
