//! The job profile (`--mca profile 1`, in-library profiling) of a job whose traffic is known:
//! messages and bytes by size class, unexpected messages, and memory per component.

use rmca_tests::{run_job, take_profile, Job};
use serde_json::Value;

/// Must match `PLAN` in tests/src/bin/profile_check.rs: (size, count), one per size class.
const PLAN: [(&str, u64, u64); 5] = [
    ("le64", 8, 10),
    ("le1k", 512, 5),
    ("le16k", 8192, 4),
    ("le256k", 200_000, 3),
    ("gt256k", 1_000_000, 2),
];

fn counter(profile: &Value, name: &str) -> u64 {
    profile["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("profile has no counter {name}: {profile:#}"))
}

#[test]
fn merged_profile_counts_the_traffic_of_the_job() {
    let json = std::env::temp_dir().join(format!("rmca-profile-{}.json", std::process::id()));
    let json_s = json.to_str().expect("utf-8 temp path").to_owned();
    let _ = std::fs::remove_file(&json);
    let out = run_job(&Job {
        ranks: 2,
        program: "profile_check",
        args: &[],
        mca: &[
            ("pml", "ob1"),
            ("btl", "self,shm"),
            ("profile", "1"),
            ("profile_json", &json_s),
        ],
        timeout_s: 120,
    });
    assert!(out.success() && out.stdout.contains("ok"), "{}", out.text());
    // Rank 0 prints the human-readable summary too.
    assert!(
        out.stderr.contains("rmca profile: 2 ranks"),
        "{}",
        out.text()
    );
    let p = take_profile(&json, &out);
    assert_eq!(p["ranks"], 2);
    assert_eq!(p["pml"], "ob1");
    for (class, size, count) in PLAN {
        let (sent, sent_b) = (
            counter(&p, &format!("pml.ob1.sent_msgs_{class}")),
            counter(&p, &format!("pml.ob1.sent_bytes_{class}")),
        );
        let (recv, recv_b) = (
            counter(&p, &format!("pml.ob1.recv_msgs_{class}")),
            counter(&p, &format!("pml.ob1.recv_bytes_{class}")),
        );
        if class == "le64" {
            // The barriers of init/finalize add small collective messages to this class.
            assert!(sent >= count && recv >= count, "{class}: {sent}/{recv}");
            assert!(sent_b >= size * count && recv_b >= size * count, "{class}");
        } else {
            assert_eq!((sent, recv), (count, count), "{class} messages: {p:#}");
            assert_eq!(
                (sent_b, recv_b),
                (size * count, size * count),
                "{class} bytes"
            );
        }
    }
    // Rank 1 probed before posting any receive: at least the first message was unexpected.
    assert!(counter(&p, "pml.ob1.unexpected") > 0, "{p:#}");
    assert!(counter(&p, "pml.ob1.eager") >= 10 + 5);
    assert!(counter(&p, "btl.shm.frags_sent") > 0);
    // The bulk chooser's estimates: the 200 kB and 1 MB messages (above shm's 128 KiB eager
    // limit) were offered for a CMA read,
    // and the first run of a size class goes the read way.
    if counter(&p, "pml.ob1.bulk_get") == 0 {
        rmca_test_support::skip_or_fail(
            "no rendezvous was offered for a CMA read (process_vm_readv not permitted here), \
             so the bulk chooser never ran",
        );
    } else {
        for class in [131072, 524288] {
            let name = format!("pml.ob1.bulk_shm_{class}_get_ns");
            assert!(counter(&p, &name) > 0, "{name}: {p:#}");
        }
    }
    // Memory per component: the shm segments, and ob1's buffered unexpected messages.
    for component in ["btl.shm", "pml.ob1"] {
        let peak = p["memory"][component]["peak_total"].as_u64();
        assert!(
            peak.is_some_and(|b| b > 0),
            "no memory for {component}: {p:#}"
        );
    }
    // Per-rank detail: allocation counts are kept per rank.
    let per_rank = p["per_rank"].as_array().expect("per_rank");
    assert_eq!(per_rank.len(), 2);
    let ob1_allocs: u64 = per_rank
        .iter()
        .filter_map(|r| r["memory"]["pml.ob1"]["allocations"].as_u64())
        .sum();
    assert!(ob1_allocs > 0, "{p:#}");
}

/// Warnings of ranks written to a file or a pipe are plain text: no terminal colour codes.
#[test]
fn logs_to_a_non_terminal_carry_no_colour_codes() {
    let out = std::process::Command::new(rmca_tests::release_bin("rmca-run"))
        .args(["-n", "2", "--timeout", "60"])
        .args(["--mca", "profile", "1"])
        .args(["--mca", "profile_json", "/nonexistent-dir/profile.json"])
        .arg(rmca_tests::release_bin("p2p_check"))
        .arg("self")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("spawn rmca-run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // A rank's warning reached the pipe through the launcher.
    assert!(stderr.contains("cannot write profile"), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in logs: {stderr:?}"
    );
}

/// A one-node job's network BTLs reach every peer but carry nothing (shm does): they must not
/// hold the pools sized for traffic (btl-ud's were 52 MB per rank at the soft provider's
/// 65000-byte MTU, btl-rc's SRQ 2 MiB), under ob1 and under dr alike.
#[test]
fn a_one_node_job_does_not_pay_for_the_network_btls_pools() {
    for pml in ["ob1", "dr"] {
        let json = std::env::temp_dir().join(format!(
            "rmca-profile-onenode-{pml}-{}.json",
            std::process::id()
        ));
        let json_s = json.to_str().expect("utf-8 temp path").to_owned();
        let _ = std::fs::remove_file(&json);
        // The default BTL list: self, shm and the verbs BTLs on the soft provider.
        let out = run_job(&Job {
            ranks: 2,
            program: "profile_check",
            args: &[],
            mca: &[("pml", pml), ("profile", "1"), ("profile_json", &json_s)],
            timeout_s: 120,
        });
        assert!(
            out.success() && out.stdout.contains("ok"),
            "{pml}: {}",
            out.text()
        );
        let p = take_profile(&json, &out);
        let peak = |c: &str| {
            p["memory"][c]["peak_max_per_rank"]
                .as_u64()
                .unwrap_or_else(|| panic!("{pml}: no memory figure for {c} (opened?): {p:#}"))
        };
        assert!(
            peak("btl.ud") <= 2 << 20,
            "{pml}: btl.ud peaked at {} bytes per rank in a job it carried nothing for",
            peak("btl.ud")
        );
        assert!(
            peak("btl.rc") <= 512 << 10,
            "{pml}: btl.rc peaked at {} bytes per rank in a job it carried nothing for",
            peak("btl.rc")
        );
        assert!(
            counter(&p, "btl.shm.frags_sent") > 0,
            "{pml}: shm carried it"
        );
    }
}
