//! The MPI tool information interface (`tests/c/tool.c`): `MPI_T` before `MPI_Init` and after
//! `MPI_Finalize`, MCA parameters as control variables (a value from the job's `--mca` flags
//! read back, a write before init taken by init), profiling counters as performance
//! variables growing with traffic, categories, events and the error codes of bad input.
//! The interface is local to each process: ob1 and dr over shared memory, on 1 and 2 ranks.

use rmca_tests::c::compile;
use rmca_tests::{run_job, Job};

fn run(ranks: usize, pml: &str, mca: &[(&str, &str)], want_pml: &str, want_eager: &str) {
    let program = compile("tool", &[]);
    let program = program.to_str().expect("UTF-8 path");
    let out = run_job(&Job {
        ranks,
        program,
        args: &[pml, want_pml, want_eager],
        mca,
        timeout_s: 120,
    });
    assert!(
        out.success() && out.stdout.contains("ok tool:"),
        "tool on {ranks} ranks with pml {pml} failed:\n{}",
        out.text()
    );
}

#[test]
fn tool_interface_over_ob1_and_shm() {
    for ranks in [1, 2] {
        run(
            ranks,
            "ob1",
            &[("btl_shm_eager_limit", "8192")],
            "-",
            "8192",
        );
    }
}

#[test]
fn tool_interface_over_dr_and_shm() {
    for ranks in [1, 2] {
        run(
            ranks,
            "dr",
            &[("pml", "dr"), ("btl_shm_eager_limit", "2048")],
            "dr",
            "2048",
        );
    }
}
