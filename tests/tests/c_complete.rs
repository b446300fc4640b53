//! The completion calls on windows of point-to-point requests through the C interface
//! (`tests/c/complete.c`): `MPI_Waitall` with an array of statuses (OSU's bandwidth loop) on
//! requests of the fast paths alone and mixed with `MPI_REQUEST_NULL`, `MPI_PROC_NULL` and
//! derived-datatype requests; `MPI_Testall` completing a window in two halves;
//! `MPI_Waitsome`/`Testsome`/`Waitany`/`Testany`/`Wait`/`Test` with and without statuses;
//! truncation, stale handles and bad counts; at 1, 2 and 3 ranks in every configuration.

use rmca_tests::c::every_config;

#[test]
fn completion_calls_with_and_without_statuses() {
    every_config("complete");
}
