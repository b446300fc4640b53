//! Jobs spanning two "nodes" (network namespaces joined by a veth link, ranks placed by
//! rmca-run's `--hosts` and a launch agent) on the default components, with no `--mca` at
//! all: shm inside a node, a network BTL between nodes, the PML chosen automatically.
//!
//! The rule checked here (see `rmca-runtime`): ob1 while every pair of ranks on different
//! nodes shares a BTL that delivers reliably (rc; ob1 then leaves ud unused), dr as soon as one
//! pair can only talk over a BTL that needs acknowledgements (ud alone). The job profile
//! names the BTLs that carried each rank's traffic to each peer.

use rmca_tests::{take_profile, Job, LossyLink};

/// Two nodes of a loss-free link, or None after skip_or_fail.
fn two_nodes() -> Option<LossyLink> {
    match LossyLink::new(1500, 0.0, 30) {
        Ok(l) => Some(l),
        Err(e) => {
            rmca_test_support::skip_or_fail(format!("needs root, iproute2 and veth: {e}"));
            None
        }
    }
}

/// Run coll_check (every collective against a serial reference) on 4 ranks over the two
/// nodes with `mca`, returning the job's merged profile.
fn coll_check_profile(link: &LossyLink, what: &str, mca: &[(&str, &str)]) -> serde_json::Value {
    let json =
        std::env::temp_dir().join(format!("rmca-multinode-{what}-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&json);
    let json_s = json.to_str().expect("utf-8 temp path").to_owned();
    let mut all = mca.to_vec();
    all.extend([("profile", "1"), ("profile_json", json_s.as_str())]);
    let out = link.run_job(&Job {
        ranks: 4,
        program: "coll_check",
        args: &[],
        mca: &all,
        timeout_s: 180,
    });
    assert!(
        out.success()
            && out.stdout.contains("coll_check: 4 ranks")
            && out.stdout.contains(" 0 failures"),
        "{what}: coll_check over two nodes failed:\n{}",
        out.text()
    );
    take_profile(&json, &out)
}

/// How many (rank, peer) pairs each BTL combination carried, from the profile.
fn route_counts(profile: &serde_json::Value) -> Vec<(String, usize)> {
    let mut counts = std::collections::BTreeMap::new();
    for r in profile["per_rank"].as_array().expect("per_rank") {
        for b in r["peer_btls"].as_array().expect("peer_btls") {
            *counts
                .entry(b.as_str().expect("a name").to_owned())
                .or_insert(0) += 1;
        }
    }
    counts.into_iter().collect()
}

#[test]
fn default_components_span_nodes_with_ob1_over_rc() {
    let Some(link) = two_nodes() else { return };
    let profile = coll_check_profile(&link, "default", &[]);
    assert_eq!(profile["pml"], "ob1", "{profile:#}");
    // 4 ranks, 2 per node: each reaches itself by self, its node's other rank by shm and the
    // other node's two ranks by rc alone (ud, open too, needs acknowledgements ob1 lacks).
    assert_eq!(
        route_counts(&profile),
        vec![("rc".into(), 8), ("self".into(), 4), ("shm".into(), 4)],
        "{profile:#}"
    );
}

#[test]
fn without_a_reliable_network_btl_the_job_runs_dr_over_ud() {
    let Some(link) = two_nodes() else { return };
    let profile = coll_check_profile(&link, "no-rc", &[("btl", "^rc")]);
    assert_eq!(profile["pml"], "dr", "{profile:#}");
    assert_eq!(
        route_counts(&profile),
        vec![("self".into(), 4), ("shm".into(), 4), ("ud".into(), 8)],
        "{profile:#}"
    );
    // Named explicitly, ob1 is kept, and refuses ud with its advice.
    let out = link.run_job(&Job {
        ranks: 2,
        program: "ring",
        args: &[],
        mca: &[("btl", "^rc"), ("pml", "ob1")],
        timeout_s: 60,
    });
    assert!(
        !out.success() && out.stderr.contains("select pml dr"),
        "{}",
        out.text()
    );
}
