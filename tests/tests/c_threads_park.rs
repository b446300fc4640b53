//! Waits at `MPI_THREAD_MULTIPLE` while another thread makes the progress
//! (`tests/c/threads_park.c`, 2 ranks, `mpi_wait_mode=spin`): blocked threads sleep while one
//! drives (the others' CPU time stays under a tenth of their wait), their statuses and
//! payloads are right though another thread's test completed them, a parked wait's error is
//! raised on the waiting thread, and each thread's messages match in the order its receives
//! were posted under a random mix of receives, probes, cancels and completion calls.

use rmca_tests::c::{compile, run, CONFIGS};

#[test]
fn parked_waits_sleep_complete_on_the_driver_and_keep_each_threads_order() {
    let program = compile("threads_park", &["-pthread"]);
    for (config, mca) in CONFIGS {
        let mut params = vec![("mpi_wait_mode", "spin")];
        params.extend_from_slice(mca);
        run(&program, "threads_park", 2, config, &params);
    }
}
