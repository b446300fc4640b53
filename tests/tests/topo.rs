//! Process topologies and neighbourhood collectives through the Rust API, in real
//! multi-process jobs: `rmca/examples/topo_check.rs` (Cartesian grids, sub-grids, dup, a
//! graph ring, distributed graphs from both constructors, `neighbor_allgather` and
//! `neighbor_alltoall` on each, argument errors) at 1 to 4 ranks over ob1+shm and dr+ud.

use rmca_tests::{run_job, Job};

fn check(name: &str, mca: &[(&str, &str)]) {
    for n in 1..=4 {
        let out = run_job(&Job {
            ranks: n,
            program: "topo_check",
            args: &[],
            mca,
            timeout_s: 60,
        });
        assert!(
            out.success()
                && out.stdout.contains(&format!("topo_check: {n} ranks, "))
                && out.stdout.contains(" 0 failures")
                && !out.stdout.contains("FAIL"),
            "topo_check over {name} on {n} ranks failed:\n{}",
            out.text()
        );
    }
}

#[test]
fn topologies_over_ob1_shm() {
    check("ob1+shm", &[]);
}

#[test]
fn topologies_over_dr_ud() {
    check(
        "dr+ud",
        &[
            ("pml", "dr"),
            ("btl", "ud,self"),
            ("btl_ud_provider", "soft"),
        ],
    );
}
