//! One-sided communication through the MPI C interface (`tests/c/rma.c`): windows of every
//! flavor, every RMA call and synchronization, derived datatypes, attributes and error
//! handlers, bad input; on 1 rank, then 2 and 3 ranks in every configuration (osc-am over
//! ob1+shm, dr+shm, dr+ud and ob1+rc).

use rmca_tests::c::every_config;

#[test]
fn one_sided_communication() {
    every_config("rma");
}
