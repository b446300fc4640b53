//! Collectives through the C interface, second part (`tests/c/coll2.c`): the non-blocking
//! v-collectives, reduce-scatters and scans against their blocking forms (with
//! point-to-point traffic in flight, completed in one `MPI_Waitall`), persistent collectives
//! (`MPI_*_init`) started several times over changed buffers by `MPI_Start`/`MPI_Startall`,
//! the large-count `_c` forms, `MPI_Reduce_local`(`_c`) with predefined and user operations
//! (commutative or not, `MPI_Op_create_c`), arithmetic on the char types, a user operation on
//! 128-byte elements called on whole buffers, MINLOC/MAXLOC on `MPI_LONG_DOUBLE_INT`, and bad
//! input, at 1, 2 and 3 ranks in every configuration.

use rmca_tests::c::every_config;

#[test]
fn nonblocking_v_collectives_persistent_collectives_large_counts_and_reductions() {
    every_config("coll2");
}
