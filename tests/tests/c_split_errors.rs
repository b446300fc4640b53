//! `MPI_Comm_split` with an invalid colour on some members (`tests/c/split_errors.c`): every
//! member of the communicator (both groups of an intercommunicator) gets `MPI_ERR_ARG`, none
//! waits for the refusing ones (a hang fails the run at the harness's timeout), and the parent
//! still splits afterwards. Under ob1, a split sends what a dup and one 16-byte allgather send
//! (MPI_T's message counters): the bad-colour check rides in the split's one exchange.

use rmca_tests::c::every_config;

#[test]
fn split_refuses_a_bad_color_on_every_member() {
    every_config("split_errors");
}
