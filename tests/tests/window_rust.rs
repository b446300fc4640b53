//! The typed one-sided API (`rmca::Window<T>`, `rmca/examples/window_check.rs`) across ranks
//! under each osc component: osc-sm (the default on one node), osc-rdma (gets written by
//! RDMA straight into the epoch's lent buffers) and osc-am (messages, under ob1 and dr).

use rmca_tests::{run_job, Job};

#[test]
fn window_check_under_every_osc_component() {
    let cases: [(&[(&str, &str)], &str); 4] = [
        (&[], "sm"),
        (&[("osc", "rdma")], "rdma"),
        (&[("osc", "am")], "am"),
        (&[("pml", "dr"), ("osc", "^sm")], "am"),
    ];
    for (mca, component) in cases {
        for n in [2, 3] {
            let out = run_job(&Job {
                ranks: n,
                program: "window_check",
                args: &[],
                mca,
                timeout_s: 120,
            });
            assert!(
                out.success()
                    && out.stdout.contains(&format!(
                        "window_check: {n} ranks, component {component}, 0 failures"
                    ))
                    && out.stdout.contains("OK window")
                    && !out.stdout.contains("FAIL"),
                "window_check on {n} ranks with {mca:?}:\n{}",
                out.text()
            );
        }
    }
}
