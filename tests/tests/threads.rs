//! rmca from a worker thread (the FUNNELED thread level), on every PML/BTL combination and at
//! 1 to 4 ranks. The checking program is `tests/src/bin/thread_check.rs`.

use rmca_tests::{run_job, Job};

const CONFIGS: &[(&str, &[(&str, &str)])] = &[
    ("ob1+shm", &[]),
    ("dr+shm", &[("pml", "dr")]),
    ("dr+ud", &[("pml", "dr"), ("btl", "ud,self")]),
    (
        "ob1+rc",
        &[
            ("pml", "ob1"),
            ("btl", "rc,self"),
            ("btl_rc_provider", "soft"),
        ],
    ),
];

#[test]
fn a_universe_handed_to_a_worker_thread_carries_the_job() {
    for (name, mca) in CONFIGS {
        for n in 1..=4 {
            let out = run_job(&Job {
                ranks: n,
                program: "thread_check",
                args: &[],
                mca,
                timeout_s: 120,
            });
            assert!(
                out.success() && out.stdout.contains("threads ok"),
                "thread_check under {name} on {n} ranks failed:\n{}",
                out.text()
            );
        }
    }
}
