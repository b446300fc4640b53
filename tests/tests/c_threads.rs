//! MPI from several threads through the C interface (`tests/c/threads.c`, built with
//! `-pthread`): at `MPI_THREAD_MULTIPLE`, four threads per rank each hammer their own duplicate
//! of the world with a seeded random mix of blocking and non-blocking sends and receives,
//! probes, matched probes, cancels, the completion calls and collectives, every payload
//! checked, at 2 and 3 ranks in every configuration (and alone); at `MPI_THREAD_SERIALIZED`
//! threads take turns; at `MPI_THREAD_FUNNELED` and `MPI_THREAD_SINGLE` a call from another
//! thread is refused with `MPI_ERR_OTHER` and a message naming the level.

use rmca_tests::c::{compile, CONFIGS};
use rmca_tests::{run_job, Job};

/// Run the program in `mode` on `ranks` ranks under `mca`; its output (asserted successful).
fn run(mode: &str, ranks: usize, config: &str, mca: &[(&str, &str)]) -> String {
    let program = compile("threads", &["-pthread"]);
    let program = program.to_str().expect("UTF-8 path");
    let out = run_job(&Job {
        ranks,
        program,
        args: &[mode],
        mca,
        timeout_s: 120,
    });
    assert!(
        out.success() && out.stdout.contains(&format!("ok threads {mode}:")),
        "threads {mode} on {ranks} ranks over {config} failed:\n{}",
        out.text()
    );
    out.text()
}

#[test]
fn threads_at_multiple_hammer_their_own_communicators_in_every_configuration() {
    run("multiple", 1, "ob1+shm", &[]);
    for (config, mca) in CONFIGS {
        for ranks in [2, 3] {
            run("multiple", ranks, config, mca);
        }
    }
}

#[test]
fn threads_at_serialized_take_turns() {
    run("serialized", 2, "ob1+shm", &[]);
    let (config, mca) = CONFIGS[2];
    run("serialized", 3, config, mca);
}

#[test]
fn a_call_from_another_thread_at_funneled_or_single_is_refused_naming_the_level() {
    for (mode, level) in [
        ("funneled", "MPI_THREAD_FUNNELED"),
        ("single", "MPI_THREAD_SINGLE"),
    ] {
        let text = run(mode, 2, "ob1+shm", &[]);
        assert!(
            text.contains(&format!("MPI_Comm_size: MPI runs at {level}"))
                && text.contains(&format!("MPI_Send: MPI runs at {level}")),
            "the refusals name the call and the level:\n{text}"
        );
    }
}
