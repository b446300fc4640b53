//! pml dr over the default one-node BTLs (shm + self) as real multi-process jobs.

use rmca_tests::{run_job, Job};

#[test]
fn a_large_transfer_leaves_no_watchdog_behind_over_shm() {
    // The watchdog is shortened so that talking for three of its periods after the transfer
    // stays quick; the transfer is large enough to fill shm's rings at its tail.
    let out = run_job(&Job {
        ranks: 2,
        program: "dr_long_talk",
        args: &["64", "3"],
        mca: &[("pml", "dr"), ("pml_dr_watchdog", "1000")],
        timeout_s: 120,
    });
    assert!(out.success(), "{}", out.text());
    for r in 0..2 {
        assert!(
            out.stdout.contains(&format!("rank {r}: talked")),
            "{}",
            out.text()
        );
    }
    assert!(!out.stderr.contains("declared dead"), "{}", out.text());
    assert!(!out.stderr.contains("Watchdog"), "{}", out.text());
}
