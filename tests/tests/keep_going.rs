//! `rmca-run --keep-going`: a rank that dies outright (not frozen) leaves the others running, so
//! the PML's own failure detection is what ends their blocked operations.

use rmca_tests::{run_job_with, Job};

#[test]
fn killed_peer_is_detected_by_pml_dr_when_the_job_keeps_going() {
    // Rank 1 aborts in the middle of sending 4 MiB to ranks 0 and 2, which sit in a blocking
    // receive from it. Without --keep-going the launcher tears the job down at once
    // (dr_ud.rs::killed_peer_ends_the_job_with_an_error_not_a_hang); with it, only pml dr's
    // peer timeout (3 s here) can end those receives, and the --timeout (124) is the hang.
    let out = run_job_with(
        &Job {
            ranks: 3,
            program: "dr_peer_loss",
            args: &["abort"],
            mca: &[
                ("pml", "dr"),
                ("btl", "ud,self"),
                ("btl_ud_provider", "soft"),
                ("pml_dr_peer_timeout", "3000"),
                ("pml_dr_rto_max_us", "500000"),
            ],
            timeout_s: 90,
        },
        &["--keep-going"],
    );
    // The job's status is the first failure: rank 1's SIGABRT.
    assert_eq!(out.code, Some(134), "{}", out.text());
    assert!(
        out.stderr.contains("rank 1") && out.stderr.contains("--keep-going"),
        "{}",
        out.text()
    );
    for survivor in [0, 2] {
        assert!(
            out.stdout.lines().any(|l| l
                .starts_with(&format!("rank {survivor}: peer-loss detected after"))
                && l.contains("peer rank 1 unreachable")),
            "rank {survivor} did not report the loss itself:\n{}",
            out.text()
        );
    }
}
