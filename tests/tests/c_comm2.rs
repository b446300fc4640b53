//! Communicators beyond split and dup (`tests/c/comm2.c`): intercommunicators (creation,
//! point-to-point addressing the remote group, merge, dup/split/create/compare, the
//! collectives with `MPI_ROOT`), `MPI_Comm_create_group`, `MPI_Comm_split_type`, group
//! ranges, sessions beside the world model, bad input; and the sessions model alone
//! (`tests/c/comm2_sessions.c`).

use rmca_tests::c::{compile, every_config, run};

#[test]
fn intercommunicators_groups_and_sessions() {
    every_config("comm2");
}

#[test]
fn sessions_without_mpi_init() {
    let program = compile("comm2_sessions", &[]);
    for ranks in [1, 2, 3] {
        run(&program, "comm2_sessions", ranks, "ob1+shm", &[]);
    }
}
