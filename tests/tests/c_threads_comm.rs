//! Communicators created by several threads at once at `MPI_THREAD_MULTIPLE`
//! (`tests/c/threads_comm.c`): dup, split, create, create_group, idup, intercomm_create and
//! merge on four threads' own parents, each result checked whole and isolated; then 5000
//! dups freed one by one (context ids are given back and taken again). The default
//! components, coll-sm included: its shared-memory waits hand the process lock to the other
//! threads between passes, so threads in collectives on different communicators of two
//! processes do not wait for each other.

use rmca_tests::c::{compile, run, CONFIGS};

#[test]
fn threads_create_communicators_at_once() {
    let area = "threads_comm";
    let program = compile(area, &[]);
    run(&program, area, 1, "ob1+shm", &[]);
    for (config, mca) in CONFIGS {
        for ranks in [2, 3] {
            run(&program, area, ranks, config, mca);
        }
    }
}
