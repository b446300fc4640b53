//! Intercommunicators and communicators made by a group alone through rmca's Rust API
//! (`rmca/examples/intercomm_check.rs`): creation, point-to-point addressing the remote
//! group, merge, dup/split/create, the intercommunicator collectives, `create_group`,
//! `intercomm_from_groups`, `split_shared` and the refusals, at 1..=4 ranks in every
//! configuration of the C tests.

use rmca_tests::c::CONFIGS;
use rmca_tests::{run_job, Job};

#[test]
fn intercommunicators_through_the_rust_api() {
    for (config, mca) in CONFIGS {
        for n in 1..=4 {
            let out = run_job(&Job {
                ranks: n,
                program: "intercomm_check",
                args: &[],
                mca,
                timeout_s: 120,
            });
            assert!(
                out.success()
                    && out.stdout.contains(&format!("intercomm_check: {n} ranks"))
                    && out.stdout.contains(" 0 failures")
                    && !out.stdout.contains("FAIL"),
                "intercomm_check over {config} on {n} ranks failed:\n{}",
                out.text()
            );
        }
    }
}
