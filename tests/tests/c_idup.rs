//! The MPI C interface's non-blocking communicator duplication and persistent collective
//! order: `tests/c/idup.c` (`MPI_Comm_idup` overlapping point-to-point, other collectives and
//! blocking constructors, several outstanding, opposite orders across communicators, on an
//! intercommunicator, what the duplicate inherits; persistent collectives started in
//! another order than their inits; bad input), in every configuration.

use rmca_tests::c::every_config;

#[test]
fn idup_and_persistent_collective_order() {
    every_config("idup");
}
