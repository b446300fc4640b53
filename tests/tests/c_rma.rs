//! One-sided communication through the MPI C interface (`tests/c/rma.c`): windows of every
//! flavor, every RMA call and synchronization, derived datatypes, attributes and error
//! handlers, bad input; on 1 rank, then 2 and 3 ranks in every configuration (ob1+shm and
//! ob1+rc: osc-rdma for the windows over the program's memory, osc-sm for the allocated ones
//! within the node; dr+shm and dr+ud: osc-am). `c_rma_rdma.rs` forces osc-rdma.

use rmca_tests::c::every_config;

#[test]
fn one_sided_communication() {
    every_config("rma");
}
