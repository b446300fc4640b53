//! The threaded API (`rmca::threaded`, MPI_THREAD_MULTIPLE for Rust programs) as real
//! multi-process jobs: `examples/threaded.rs stress` runs 4 threads per rank, each a seeded
//! random mix of ring exchanges, any-source receives, probes, iprobe loops, barriers,
//! broadcasts, reductions, allgathers and dup/split/free on a duplicated communicator of its
//! own, every byte checked; bad arguments first (each its typed error), and a call after
//! finalize (an error, not a hang). At 1 rank, and at 2 and 3 ranks under ob1+shm, dr+shm,
//! dr+ud and ob1+rc (soft verbs).

use rmca_tests::c::CONFIGS;
use rmca_tests::{run_job, Job};

fn stress(ranks: usize, config: &str, mca: &[(&str, &str)]) {
    let out = run_job(&Job {
        ranks,
        program: "threaded",
        args: &["stress", "4", "150", "11"],
        mca,
        timeout_s: 120,
    });
    assert!(
        out.success() && out.stdout.contains("ok threaded:"),
        "threaded stress on {ranks} ranks over {config}:\n{}",
        out.text()
    );
}

#[test]
fn four_threads_per_rank_in_every_configuration() {
    stress(1, "ob1+shm", &[]);
    for (config, mca) in CONFIGS {
        for ranks in [2, 3] {
            stress(ranks, config, mca);
        }
    }
}
