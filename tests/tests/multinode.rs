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

/// Two nodes joined by two links: rc bound to link 0, ud to link 1 (where PMI runs too).
fn two_nodes_two_links() -> Option<LossyLink> {
    let link = match LossyLink::new(1500, 0.0, 30).and_then(LossyLink::with_second_link) {
        Ok(l) => l,
        Err(e) => {
            rmca_test_support::skip_or_fail(format!("needs root, iproute2 and veth: {e}"));
            return None;
        }
    };
    let mut link = link;
    link.pmi_link = 1;
    link.bind(&[("btl_rc_if_addr", 0), ("btl_ud_if_addr", 1)])
        .expect("write the node scripts");
    Some(link)
}

/// dr over rc (preferred: lower latency estimate) and ud, between two nodes; failing over
/// quickly, and declaring a peer dead after `peer_timeout_ms` of silence.
fn dr_two_paths(json: &str, peer_timeout_ms: &str) -> Vec<(String, String)> {
    [
        ("pml", "dr"),
        ("btl_rc_latency", "1000"),
        ("btl_ud_latency", "50000"),
        ("pml_dr_btl_fail_silence", "300"),
        ("pml_dr_peer_timeout", peer_timeout_ms),
        ("profile", "1"),
        ("profile_json", json),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

#[test]
fn a_dead_link_between_nodes_fails_over_to_the_other_under_dr() {
    let Some(link) = two_nodes_two_links() else {
        return;
    };
    let json = std::env::temp_dir().join(format!(
        "rmca-multinode-failover-{}.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&json);
    let mca = dr_two_paths(json.to_str().expect("utf-8 temp path"), "30000");
    let mca: Vec<(&str, &str)> = mca.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // 4 MiB checked byte for byte, then an allreduce every 50 ms for 8 s; rc's link goes down
    // 3 s in (the namespace's veth set down at both ends, as a pulled cable).
    let out = link.run_job_while(
        &Job {
            ranks: 2,
            program: "dr_long_talk",
            args: &["4", "8"],
            mca: &mca,
            timeout_s: 120,
        },
        || {
            std::thread::sleep(std::time::Duration::from_secs(3));
            link.set_link(0, false);
        },
    );
    assert!(
        out.success() && out.stdout.contains("talked"),
        "dr_long_talk across a link failure:\n{}",
        out.text()
    );
    let profile = take_profile(&json, &out);
    let failovers = profile["counters"]["pml.dr.failovers"]
        .as_u64()
        .unwrap_or(0);
    assert!(failovers > 0, "no failover counted: {profile:#}");
}

#[test]
fn a_node_cut_off_is_reported_in_bounded_time() {
    let Some(link) = two_nodes_two_links() else {
        return;
    };
    let json = std::env::temp_dir().join(format!("rmca-multinode-cut-{}.json", std::process::id()));
    let mca = dr_two_paths(json.to_str().expect("utf-8 temp path"), "3000");
    let mca: Vec<(&str, &str)> = mca.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let started = std::time::Instant::now();
    // Both links down 2 s into a 60 s talk: no path is left, and the survivors must say which
    // rank they lost, long before the talk or the launcher's timeout would end the job.
    let out = link.run_job_while(
        &Job {
            ranks: 2,
            program: "dr_long_talk",
            args: &["1", "60"],
            mca: &mca,
            timeout_s: 120,
        },
        || {
            std::thread::sleep(std::time::Duration::from_secs(2));
            link.set_link(0, false);
            link.set_link(1, false);
        },
    );
    let elapsed = started.elapsed();
    let _ = std::fs::remove_file(&json);
    assert!(
        !out.success(),
        "the job cannot succeed without a path:\n{}",
        out.text()
    );
    assert!(
        out.stderr.contains("unreachable") && out.stderr.contains("rank"),
        "the lost rank is named:\n{}",
        out.text()
    );
    // Bounded: peer_timeout (3 s) of silence after the cut, plus the failover attempt and the
    // launcher's teardown; never the 60 s talk or the 120 s job timeout.
    assert!(
        elapsed < std::time::Duration::from_secs(45),
        "reported after {elapsed:?}:\n{}",
        out.text()
    );
}
