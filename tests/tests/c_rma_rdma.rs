//! osc-rdma through the MPI C interface: `tests/c/rma.c` (every window flavor, RMA call and
//! synchronization) with `--mca osc rdma` forced, so that no window silently falls back to
//! osc-am, under ob1+shm (CMA) and ob1+rc (soft provider); the merged profile proves the
//! puts and gets moved by RDMA. Under pml dr, which offers no RDMA, forcing osc rdma is
//! refused at window creation with an error that says why (osc-am serves dr's windows, as
//! `c_rma.rs` runs by default); any component forced where it cannot serve gives its own
//! reason. Accumulates to a member of the node are applied by the origin, not sent
//! (`tests/c/rma_acc_count.c`, the profile's message count with and without
//! `osc_rdma_acc_direct`).

use rmca_tests::c::compile;
use rmca_tests::{counter, run_job, take_profile, Job};

#[test]
fn every_call_with_osc_rdma_forced_moves_puts_and_gets_by_rdma() {
    let program = compile("rma", &[]);
    let program = program.to_str().expect("UTF-8 path");
    let configs: [(&str, &[(&str, &str)]); 2] = [
        ("ob1+shm", &[]),
        ("ob1+rc", &[("btl", "rc,self"), ("btl_rc_provider", "soft")]),
    ];
    for (config, extra) in configs {
        for ranks in [1, 2, 3] {
            let json = std::env::temp_dir().join(format!(
                "rmca-osc-rdma-{}-{config}-{ranks}.json",
                std::process::id()
            ));
            let _ = std::fs::remove_file(&json);
            let json_s = json.to_str().expect("UTF-8 temp path").to_owned();
            // Every put and get by RDMA, however small (the default since small_limit is 0;
            // an operation behind a lock request not granted yet goes as a message, a mix
            // tests/tests/c_rma.rs runs too).
            let mut mca: Vec<(&str, &str)> = vec![
                ("osc", "rdma"),
                ("osc_rdma_small_limit", "0"),
                ("profile", "1"),
                ("profile_json", &json_s),
            ];
            mca.extend_from_slice(extra);
            let out = run_job(&Job {
                ranks,
                program,
                args: &[],
                mca: &mca,
                timeout_s: 120,
            });
            assert!(
                out.success() && out.stdout.contains("ok rma:"),
                "rma on {ranks} ranks over {config} with osc rdma failed:\n{}",
                out.text()
            );
            let profile = take_profile(&json, &out);
            for c in ["pml.ob1.osc_rdma_puts", "pml.ob1.osc_rdma_gets"] {
                assert!(
                    counter(&profile, c) > 0,
                    "{c} is 0 over {config} on {ranks} ranks: {profile:#}"
                );
            }
        }
    }
}

/// Accumulates, fetch-and-ops and compare-and-swaps to a member of the node are applied by
/// the origin (CMA under the target's accumulate word, `osc_rdma_acc_direct`), not sent:
/// `tests/c/rma_acc_count.c` (500 of each per origin, a flush after every call, exact totals)
/// sends a few dozen PML messages in all with it, and two or more per call without it.
#[test]
fn accumulates_to_a_member_of_the_node_send_no_message() {
    const CALLS: u64 = 500;
    let program = compile("rma_acc_count", &[]);
    let program = program.to_str().expect("UTF-8 path");
    for ranks in [2u64, 3] {
        for direct in ["1", "0"] {
            let json = std::env::temp_dir().join(format!(
                "rmca-acc-count-{}-{ranks}-{direct}.json",
                std::process::id()
            ));
            let _ = std::fs::remove_file(&json);
            let json_s = json.to_str().expect("UTF-8 temp path").to_owned();
            let out = run_job(&Job {
                ranks: ranks as usize,
                program,
                args: &[],
                mca: &[
                    ("osc_rdma_acc_direct", direct),
                    ("profile", "1"),
                    ("profile_json", &json_s),
                ],
                timeout_s: 120,
            });
            assert!(
                out.success() && out.stdout.contains("ok rma_acc_count:"),
                "rma_acc_count on {ranks} ranks, osc_rdma_acc_direct {direct}:\n{}",
                out.text()
            );
            let sent = counter(&take_profile(&json, &out), "pml.ob1.eager");
            let calls = 3 * CALLS * (ranks - 1);
            if direct == "1" {
                assert!(sent < CALLS, "{sent} messages for {calls} direct calls");
            } else {
                assert!(
                    sent > 2 * calls,
                    "{sent} messages for {calls} calls by message"
                );
            }
        }
    }
}

#[test]
fn osc_rdma_forced_under_pml_dr_is_refused_saying_why() {
    let program = compile("rma", &[]);
    let out = run_job(&Job {
        ranks: 2,
        program: program.to_str().expect("UTF-8 path"),
        args: &[],
        mca: &[("pml", "dr"), ("osc", "rdma")],
        timeout_s: 60,
    });
    assert!(!out.success(), "{}", out.text());
    assert!(
        out.stderr.contains("MPI_Win_create")
            && out
                .stderr
                .contains("osc rdma: it needs RDMA put and get to every member"),
        "{}",
        out.text()
    );
}

/// The refusal names the component the user forced and its own reason, not another's:
/// osc sm forced on `MPI_Win_create`'s window (memory it did not allocate) says so, under
/// ob1, where osc rdma would have served it, with no word of osc rdma.
#[test]
fn another_component_forced_is_refused_with_its_own_reason() {
    let program = compile("rma", &[]);
    let out = run_job(&Job {
        ranks: 2,
        program: program.to_str().expect("UTF-8 path"),
        args: &[],
        mca: &[("osc", "sm")],
        timeout_s: 60,
    });
    assert!(!out.success(), "{}", out.text());
    assert!(
        out.stderr.contains("MPI_Win_create")
            && out
                .stderr
                .contains("osc sm: it serves only windows whose memory it allocates")
            && out.stderr.contains("osc am, left out by the selection")
            && !out.stderr.contains("osc rdma"),
        "{}",
        out.text()
    );
}
