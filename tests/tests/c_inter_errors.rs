//! Intercommunicator constructors refused by one group (`tests/c/inter_errors.c`): a bad or
//! inconsistent `local_leader` or tag in `MPI_Intercomm_create`, inconsistent groups in
//! `MPI_Comm_create` on an intercommunicator, and a split and a merge whose exchange one group
//! rejects. Every process of both groups gets an error through its error handler, none waits
//! for a group that has returned (a hang fails the run at the harness's timeout), and the
//! parents still work afterwards. At 1 rank there is no intercommunicator; the cases that
//! need two processes in a group run at 3.

use rmca_tests::c::every_config;

#[test]
fn intercommunicator_refusals_reach_both_groups() {
    every_config("inter_errors");
}
