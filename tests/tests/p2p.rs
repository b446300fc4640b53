//! Point-to-point semantics across processes: pml ob1 over btl shm + self, launched by rmca-run.

use rmca_tests::{run_job, Job};

fn p2p(n: usize, case: &str, mca: &[(&str, &str)]) {
    let out = run_job(&Job {
        ranks: n,
        program: "p2p_check",
        args: &[case],
        mca,
        timeout_s: 240,
    });
    assert!(
        out.success(),
        "p2p_check {case} on {n} ranks failed:\n{}",
        out.text()
    );
    assert!(out.stdout.contains(&format!("ok {case}")), "{}", out.text());
}

#[test]
fn matching_order_and_wildcards() {
    for n in [2, 3, 4] {
        p2p(n, "ordering", &[]);
    }
}

#[test]
fn truncation_is_an_error_status_not_corruption() {
    p2p(2, "truncation", &[]);
}

#[test]
fn self_send_and_zero_byte_messages() {
    p2p(1, "self", &[]);
    p2p(3, "self", &[]);
}

#[test]
fn large_messages_with_and_without_single_copy() {
    p2p(2, "large", &[]);
    // Without GET the rendezvous falls back to the pipelined copy protocol.
    p2p(2, "large", &[("btl_shm_single_copy", "off")]);
}

#[test]
fn medium_sizes_across_the_shm_protocol_boundaries() {
    p2p(2, "medium", &[]);
    // Delivered whole instead of written in place; and with no streaming at all.
    p2p(2, "medium", &[("btl_shm_place_in_buffer", "0")]);
    p2p(2, "medium", &[("btl_shm_stream_min", "0")]);
}

#[test]
fn sendrecv_with_sends_before_short_receives_never_deadlocks() {
    p2p(2, "sendrecv", &[]);
    p2p(2, "sendrecv", &[("btl_shm_single_copy", "off")]);
    p2p(2, "sendrecv", &[("pml", "dr")]);
}

#[test]
fn one_gib_transfer() {
    p2p(2, "gib", &[]);
}

#[test]
fn hundred_thousand_outstanding_requests() {
    p2p(2, "outstanding", &[]);
}

#[test]
fn communicator_isolation_dup_and_split() {
    for n in [2, 3, 5] {
        p2p(n, "isolation", &[]);
    }
}

#[test]
fn synchronous_send_and_probe() {
    p2p(2, "ssend", &[]);
}

#[test]
fn request_reports_its_status_once_whether_done_at_start_or_pending() {
    p2p(2, "request_states", &[]);
}

#[test]
fn complete_all_waits_for_every_request_then_reports_the_first_error() {
    p2p(2, "complete_all", &[]);
    p2p(3, "complete_all", &[]);
    // pml dr waits through the framework's default `Pml::wait_all`.
    p2p(2, "complete_all", &[("pml", "dr")]);
}

#[test]
fn forgotten_and_unwound_requests_are_waited_by_their_scope() {
    p2p(2, "scopes", &[]);
    p2p(2, "scopes", &[("pml", "dr")]);
}

#[test]
fn proc_null_everywhere_and_negative_ranks_refused() {
    for n in [1, 3] {
        p2p(n, "proc_null", &[]);
    }
    p2p(2, "proc_null", &[("pml", "dr")]);
}

#[test]
fn finalize_is_deferred_until_outstanding_requests_complete() {
    p2p(1, "finalize_outstanding", &[]);
}
