//! The asynchronous progress thread (`mpi_async_progress`, `tests/c/async_progress.c`): with
//! it, rank 0's `MPI_Isend` of 1 MiB and a 1 MiB `MPI_Iallreduce` complete at the peers
//! while rank 0 computes without calling MPI (timestamps of one clock on both sides); without
//! it, they cannot (the control run: the measurement fails without the thread). Single-copy
//! reads are off so that the data moves only when the sender's side progresses. Also: one
//! thread named rmca-progress with the parameter, none without, none after `MPI_Finalize`
//! (at 1, 2 and 3 ranks), and `MPI_THREAD_FUNNELED`'s refusal of other threads still holds.
//! Rank 0 computes until the peers say (through files, no MPI call) they are done, 20 s at
//! most: a late-scheduled thread on a loaded machine makes it compute longer instead of
//! failing a fixed margin, and without the thread the peers still cannot finish first. A
//! program of the sessions model alone gets no thread and a warning saying why.

use rmca_tests::c::compile;
use rmca_tests::{run_job, Job};

/// Single-copy reads off: the rendezvous data moves through the rings, pushed by the sender.
const RINGS: (&str, &str) = ("btl_shm_single_copy", "off");
const ON: (&str, &str) = ("mpi_async_progress", "1");

fn run(program: &str, args: &[&str], ranks: usize, mca: &[(&str, &str)], want: &str) -> String {
    let out = run_job(&Job {
        ranks,
        program,
        args,
        mca,
        timeout_s: 120,
    });
    assert!(
        out.success() && out.stdout.contains(want),
        "{program} {args:?} on {ranks} ranks with {mca:?} failed:\n{}",
        out.text()
    );
    out.text()
}

fn overlap(mode: &str, ranks: usize, pml: &str) {
    let program = compile("async_progress", &[]);
    let program = program.to_str().expect("UTF-8 path");
    let mut mca = vec![("pml", pml), RINGS];
    if mode == "on" {
        mca.push(ON);
    }
    run(
        program,
        &[mode],
        ranks,
        &mca,
        &format!("ok async_progress {mode}:"),
    );
}

#[test]
fn the_progress_thread_completes_transfers_while_rank_0_computes_under_ob1_and_dr() {
    for pml in ["ob1", "dr"] {
        overlap("on", 2, pml);
        overlap("off", 2, pml);
    }
}

#[test]
fn the_progress_thread_starts_and_is_joined_at_1_and_3_ranks() {
    overlap("on", 1, "ob1");
    overlap("on", 3, "ob1");
    overlap("off", 1, "ob1");
}

#[test]
fn funneled_still_refuses_other_threads_with_the_progress_thread() {
    let program = compile("threads", &["-pthread"]);
    let program = program.to_str().expect("UTF-8 path");
    let text = run(program, &["funneled"], 2, &[ON], "ok threads funneled:");
    assert!(
        text.contains("MPI_Comm_size: MPI runs at MPI_THREAD_FUNNELED")
            && text.contains("MPI_Send: MPI runs at MPI_THREAD_FUNNELED"),
        "the refusals name the call and the level:\n{text}"
    );
}

#[test]
fn a_sessions_only_program_is_told_the_progress_thread_is_not_for_it() {
    // The thread serves the world model only (MPI_Init starts it, MPI_Finalize stops it): a
    // program that starts MPI by MPI_Session_init alone gets no thread, a warning naming why,
    // and working communication.
    let program = compile("async_progress", &[]);
    let program = program.to_str().expect("UTF-8 path");
    for ranks in [1, 2] {
        let text = run(
            program,
            &["session"],
            ranks,
            &[ON],
            "ok async_progress session:",
        );
        assert!(
            text.contains("mpi_async_progress: no progress thread for this process: MPI_Session_init started its runtime"),
            "the warning names why the parameter is ignored:\n{text}"
        );
    }
}
