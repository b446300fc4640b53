//! pml ob1 over btl ud (soft provider) with `pml_ob1_unreliable_btls`: the switch that lets the
//! benchmarks measure ob1+ud against dr+ud (the cost of reliability). Without it ob1 refuses ud
//! (tests/tests/dr_ud.rs, `ob1_refuses_ud_instead_of_losing_messages`).

use rmca_tests::{run_job, Job};

#[test]
fn ob1_runs_over_ud_when_unreliable_btls_are_accepted() {
    // A ring of 2 is a ping-pong: one datagram in flight, so loopback UDP has no reason to drop
    // one (ob1 would never recover it). No faults are injected.
    let out = run_job(&Job {
        ranks: 2,
        program: "ring",
        args: &["2000"],
        mca: &[
            ("pml", "ob1"),
            ("btl", "ud,self"),
            ("btl_ud_provider", "soft"),
            ("pml_ob1_unreliable_btls", "1"),
        ],
        timeout_s: 120,
    });
    assert!(out.success(), "{}", out.text());
    assert!(
        out.stdout.contains("ring: 2000 laps over 2 ranks OK"),
        "{}",
        out.text()
    );
    // Every rank says once that losses will not be recovered.
    assert_eq!(
        out.stderr.matches("will not be recovered").count(),
        2,
        "{}",
        out.text()
    );
}

#[test]
fn ob1_still_refuses_ud_when_the_switch_is_off() {
    let out = run_job(&Job {
        ranks: 2,
        program: "ring",
        args: &["10"],
        mca: &[
            ("pml", "ob1"),
            ("btl", "ud,self"),
            ("btl_ud_provider", "soft"),
            ("pml_ob1_unreliable_btls", "0"),
        ],
        timeout_s: 60,
    });
    assert!(!out.success(), "{}", out.text());
    assert!(
        out.stderr.contains("btl ud delivers unreliably")
            && out.stderr.contains("pml_ob1_unreliable_btls"),
        "{}",
        out.text()
    );
    assert!(!out.stdout.contains("laps over"), "{}", out.text());
}
