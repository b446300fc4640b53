//! Non-blocking collectives in real multi-process jobs: `rmca/examples/nbcoll_check.rs` (every
//! non-blocking collective overlapped with others and with point-to-point traffic, compared
//! with sequential references; progress while blocked in a receive or a blocking collective)
//! on ob1+shm, dr+shm, dr+ud and ob1+rc at 1, 2, 3 and 4 ranks, one job per configuration and
//! rank count. A rank that failed to progress collectives it never tests hangs its job, which
//! the launcher's timeout turns into a failure.

use rmca_tests::{run_job, Job};

/// The transport configurations, by name.
const CONFIGS: &[(&str, &[(&str, &str)])] = &[
    ("ob1+shm", &[]),
    ("dr+shm", &[("pml", "dr")]),
    (
        "dr+ud",
        &[
            ("pml", "dr"),
            ("btl", "ud,self"),
            ("btl_ud_provider", "soft"),
        ],
    ),
    (
        "ob1+rc",
        &[
            ("pml", "ob1"),
            ("btl", "rc,self"),
            ("btl_rc_provider", "soft"),
        ],
    ),
];

fn check(config: usize) {
    let (name, mca) = CONFIGS[config];
    for n in 1..=4 {
        let out = run_job(&Job {
            ranks: n,
            program: "nbcoll_check",
            args: &[],
            mca,
            timeout_s: 60,
        });
        assert!(
            out.success()
                && out.stdout.contains(&format!("nbcoll_check: {n} ranks, "))
                && out.stdout.contains(" 0 failures")
                && !out.stdout.contains("FAIL"),
            "nbcoll_check over {name} on {n} ranks failed:\n{}",
            out.text()
        );
    }
}

#[test]
fn nonblocking_collectives_over_ob1_shm() {
    check(0);
}

#[test]
fn nonblocking_collectives_over_dr_shm() {
    check(1);
}

#[test]
fn nonblocking_collectives_over_dr_ud() {
    check(2);
}

#[test]
fn nonblocking_collectives_over_ob1_rc() {
    check(3);
}
