//! Non-blocking calls queued for the process lock's holder at `MPI_THREAD_MULTIPLE`
//! (`tests/c/threads_handoff.c`, 2 ranks, 4 threads each): an `MPI_Isend` made while another
//! thread holds the lock returns at once and its refusal (a rank out of range) comes with its
//! `MPI_Wait`; under a random mix of `MPI_Isend`/`MPI_Irecv` windows, blocking sends, probes,
//! cancels and completion calls on shared and per-thread communicators, each thread's
//! messages match in order, no request handle is live on two threads at once, and every
//! request completes once.

use rmca_tests::c::{compile, run, CONFIGS};

#[test]
fn queued_calls_keep_each_threads_order_and_report_errors_at_completion() {
    let program = compile("threads_handoff", &["-pthread"]);
    for (config, mca) in CONFIGS {
        run(&program, "threads_handoff", 2, config, mca);
    }
}
