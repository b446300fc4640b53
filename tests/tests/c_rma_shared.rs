//! One-sided communication on windows whose members share the node, through the MPI C
//! interface (`tests/c/rma_shared.c`): MPI_Win_allocate_shared and MPI_Win_shared_query,
//! load/store between members, every RMA call and synchronization, atomics and exclusive
//! locks under contention, bad input. osc-sm serves these windows in every configuration
//! (its segment does not depend on the PML or BTL); osc-am, forced with `--mca osc am`,
//! serves them too (over a segment mapped by the window), and so does `tests/c/rma.c`,
//! whose `MPI_Win_allocate` windows osc-sm takes by default.

use rmca_tests::c::{compile, every_config, run};

#[test]
fn shared_memory_windows() {
    every_config("rma_shared");
}

#[test]
fn the_same_programs_with_osc_am_forced() {
    for area in ["rma_shared", "rma"] {
        let program = compile(area, &[]);
        for ranks in [2, 3] {
            run(&program, area, ranks, "ob1+shm, osc am", &[("osc", "am")]);
        }
    }
}

/// osc-sm's other accumulate path: CPU atomics per 4- and 8-byte element (the default is
/// the target's lock word with in-place loops).
#[test]
fn accumulates_by_cpu_atomics() {
    let program = compile("rma_shared", &[]);
    run(
        &program,
        "rma_shared",
        3,
        "ob1+shm, osc_sm_atomics true",
        &[("osc_sm_atomics", "true")],
    );
}

/// The small operations' fast path from three threads per rank at `MPI_THREAD_MULTIPLE`
/// (`tests/c/rma_shared_threads.c`), on both of osc-sm's accumulate paths: no lost update.
#[test]
fn small_operations_from_many_threads() {
    let program = compile("rma_shared_threads", &["-pthread"]);
    for (config, mca) in [
        ("ob1+shm", &[][..]),
        (
            "ob1+shm, osc_sm_atomics true",
            &[("osc_sm_atomics", "true")][..],
        ),
    ] {
        for ranks in [1, 2] {
            run(&program, "rma_shared_threads", ranks, config, mca);
        }
    }
}

/// Fence epochs of one window per thread, four threads per rank at `MPI_THREAD_MULTIPLE`
/// (`tests/c/rma_fence_threads.c`, MPICH's threads/rma/multifence's pattern), on osc-sm's and
/// osc-rdma's windows: a fence's wait lets the rank's other threads in (it deadlocked
/// across ranks when it kept the process lock for its whole wait).
#[test]
fn fences_of_one_window_per_thread() {
    let program = compile("rma_fence_threads", &["-pthread"]);
    for ranks in [2, 3] {
        run(&program, "rma_fence_threads", ranks, "ob1+shm", &[]);
    }
}

/// MPI's progress rule in a loop of `MPI_Win_lock`/`MPI_Win_unlock` alone on an osc-sm
/// window (`tests/c/win_lock_progress.c`): the spinning rank's uncontended locks take the
/// fast path, which runs a progress pass every so many calls, so a peer's rendezvous send
/// to it completes and the peer's flag arrives (without the passes the program gives up
/// after 10 s and fails).
#[test]
fn lock_unlock_loops_progress_point_to_point_traffic() {
    let program = compile("win_lock_progress", &[]);
    for ranks in [2, 3] {
        run(&program, "win_lock_progress", ranks, "ob1+shm", &[]);
    }
    run(&program, "win_lock_progress", 2, "dr", &[("pml", "dr")]);
}
