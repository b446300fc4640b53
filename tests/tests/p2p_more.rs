//! Persistent requests, cancel, test_any/test_all/test_some/wait_some, scalars, groups and
//! `Communicator::create`/`compare` across every PML/BTL configuration at 1 to 4
//! ranks: one `p2p_more_check` job (tests/src/bin/p2p_more_check.rs, every case) per
//! configuration and rank count.

use rmca_tests::{run_job, Job};

fn check_all_rank_counts(config: &str, mca: &[(&str, &str)]) {
    for n in 1..=4 {
        let out = run_job(&Job {
            ranks: n,
            program: "p2p_more_check",
            args: &[],
            mca,
            timeout_s: 120,
        });
        assert!(
            out.success() && out.stdout.contains(&format!("ok p2p_more {n} ranks")),
            "p2p_more_check over {config} on {n} ranks failed:\n{}",
            out.text()
        );
    }
}

#[test]
fn ob1_over_shm() {
    check_all_rank_counts("ob1+shm", &[]);
}

#[test]
fn dr_over_shm() {
    check_all_rank_counts("dr+shm", &[("pml", "dr")]);
}

#[test]
fn dr_over_ud() {
    check_all_rank_counts(
        "dr+ud",
        &[
            ("pml", "dr"),
            ("btl", "ud,self"),
            ("btl_ud_provider", "soft"),
        ],
    );
}

#[test]
fn ob1_over_rc() {
    check_all_rank_counts(
        "ob1+rc",
        &[
            ("pml", "ob1"),
            ("btl", "rc,self"),
            ("btl_rc_provider", "soft"),
        ],
    );
}
