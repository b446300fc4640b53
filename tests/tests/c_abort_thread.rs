//! `MPI_Abort` from a thread other than the main one (`tests/c/abort_thread.c`) ends the job
//! with its code while every main thread waits in a receive: at `MPI_THREAD_FUNNELED` (a
//! thread the level does not let into MPI: Open MPI and MPICH abort from any thread, and so
//! does rmca), with and without the asynchronous progress thread, and at
//! `MPI_THREAD_MULTIPLE` (through the runtime's abort). The message names the code.

use rmca_tests::c::compile;
use rmca_tests::{run_job, Job};

fn aborts(level: &str, code: &str, ranks: usize, mca: &[(&str, &str)]) {
    let program = compile("abort_thread", &["-pthread"]);
    let out = run_job(&Job {
        ranks,
        program: program.to_str().expect("UTF-8 path"),
        args: &[level, code],
        mca,
        timeout_s: 60,
    });
    let want: i32 = code.parse().expect("a code");
    let ctx = format!("{level} on {ranks} ranks {mca:?}:\n{}", out.text());
    assert_eq!(out.code, Some(want), "{ctx}");
    assert!(!out.stdout.contains("returned"), "{ctx}");
    assert!(
        out.stderr
            .contains(&format!("MPI_Abort called with error code {want}")),
        "{ctx}"
    );
}

#[test]
fn abort_from_a_thread_funneled_does_not_let_in() {
    for ranks in [1, 2, 3] {
        aborts("funneled", "7", ranks, &[]);
    }
    aborts("funneled", "9", 2, &[("mpi_async_progress", "1")]);
}

#[test]
fn abort_from_any_thread_at_multiple() {
    for ranks in [1, 2] {
        aborts("multiple", "5", ranks, &[]);
    }
}
