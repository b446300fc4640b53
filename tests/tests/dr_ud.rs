//! Guaranteed delivery over UD: pml dr over btl ud (soft provider, UDP) with injected
//! faults, run by rmca-run as real multi-process jobs.
//!
//! Failover runs ud next to shm (shm's exclusivity lowered to ud's, its latency raised) and
//! kills ud's path with btl-ud's `btl_ud_fault_blackhole_after` knob.

use rmca_tests::{run_job, run_job_with, take_profile, Job};
use serde_json::Value;

/// Faults injected into every UD datagram stream (the soft provider's knobs).
const FAULTS: &[(&str, &str)] = &[
    ("pml", "dr"),
    ("btl", "ud,self"),
    ("btl_ud_provider", "soft"),
    ("btl_ud_fault_drop", "0.05"),
    ("btl_ud_fault_duplicate", "0.01"),
    ("btl_ud_fault_reorder", "0.05"),
    ("btl_ud_fault_corrupt", "0.001"),
];

/// The `messages=N bytes=B errors=E ...` lines of stress, as (messages, bytes, errors).
fn stress_lines(stdout: &str) -> Vec<(u64, u64, u64)> {
    stdout
        .lines()
        .filter(|l| l.starts_with("messages="))
        .map(|l| {
            let field = |k: &str| -> u64 {
                l.split_whitespace()
                    .find_map(|f| f.strip_prefix(k))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("no {k} in {l:?}"))
            };
            (field("messages="), field("bytes="), field("errors="))
        })
        .collect()
}

fn counter(profile: &Value, name: &str) -> u64 {
    profile["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("profile has no counter {name}: {profile:#}"))
}

#[test]
fn dr_over_lossy_ud_delivers_every_byte_exactly_once_in_order() {
    let ranks = 3;
    let total = 100_000u64;
    let json = std::env::temp_dir().join(format!("rmca-dr-ud-profile-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&json);
    let json_s = json.to_str().expect("utf-8 temp path").to_owned();
    let mut mca = FAULTS.to_vec();
    mca.push(("profile", "1"));
    mca.push(("profile_json", &json_s));
    mca.push(("btl_ud_fault_seed", "42"));
    let total_s = total.to_string();
    // Finalize must succeed too, even when the faults hit its last fragments and their acks:
    // small sends (the barrier's) complete locally, and the finalize fence keeps every rank
    // progressing (re-acknowledging duplicates) until all ranks have finished the barrier, so
    // no rank tears down while a peer still waits for it. (Before that fence, a dropped ack
    // of the last barrier fragment failed the survivor's finalize in about 1 run in 5.)
    let out = run_job(&Job {
        ranks,
        program: "stress",
        args: &["--seed", "42", "--messages", &total_s, "--max-size", "8m"],
        mca: &mca,
        timeout_s: 240,
    });
    let lines = stress_lines(&out.stdout);
    assert_eq!(lines.len(), ranks, "one line per rank:\n{}", out.text());
    for (m, _, e) in &lines {
        assert_eq!(*e, 0, "a rank saw errors:\n{}", out.text());
        assert!(*m > 0, "a rank received nothing:\n{}", out.text());
    }
    // Each rank counts what it received and verified; every message sent arrived once.
    let received: u64 = lines.iter().map(|l| l.0).sum();
    assert_eq!(received, total, "{}", out.text());
    assert!(
        out.success(),
        "stress over lossy ud failed:\n{}",
        out.text()
    );
    let profile = take_profile(&json, &out);
    // Proof that the faults happened and were repaired, from the merged profile.
    for c in [
        "btl.ud.faults_dropped",
        "btl.ud.faults_duplicated",
        "btl.ud.faults_reordered",
        "btl.ud.faults_corrupted",
        "pml.dr.retransmissions",
        "pml.dr.csum_failures",
        "pml.dr.duplicates",
    ] {
        assert!(counter(&profile, c) > 0, "{c} is 0: {profile:#}");
    }
    assert_eq!(counter(&profile, "pml.dr.failovers"), 0, "{profile:#}");
}

#[test]
fn finalize_succeeds_every_time_over_a_lossy_link() {
    // 30% of the datagrams are lost, the finalize barrier's and their acks too: every rank
    // must keep answering retransmissions until all ranks are through the barrier (the
    // finalize fence progresses the PML). A rank that stopped progressing as soon as its own
    // barrier was done (a plain PMI fence) left a peer without its lost barrier fragment, and
    // that peer's finalize failed ("unreachable") after pml_dr_peer_timeout: about one job in
    // three here, so twenty jobs in a row catch it.
    for seed in 1..=20 {
        let seed = seed.to_string();
        let out = run_job(&Job {
            ranks: 2,
            program: "stress",
            args: &["--seed", &seed, "--messages", "20", "--max-size", "1k"],
            mca: &[
                ("pml", "dr"),
                ("btl", "ud,self"),
                ("btl_ud_provider", "soft"),
                ("btl_ud_fault_drop", "0.3"),
                ("btl_ud_fault_seed", &seed),
                ("pml_dr_peer_timeout", "10000"),
            ],
            timeout_s: 60,
        });
        assert!(out.success(), "job with seed {seed}:\n{}", out.text());
    }
}

#[test]
fn stress_verifies_the_same_plan_on_reliable_transports() {
    // The same program on ob1 over shm: the plan, tags, wildcards and blocking mix are sound
    // independently of dr (a stress bug would show here too).
    let out = run_job(&Job {
        ranks: 3,
        program: "stress",
        args: &["--seed", "9", "--messages", "20000", "--max-size", "8m"],
        mca: &[("pml", "ob1"), ("btl", "self,shm")],
        timeout_s: 300,
    });
    assert!(out.success(), "{}", out.text());
    let lines = stress_lines(&out.stdout);
    assert_eq!(lines.len(), 3, "{}", out.text());
    assert!(lines.iter().all(|l| l.2 == 0), "{}", out.text());
    assert_eq!(lines.iter().map(|l| l.0).sum::<u64>(), 20_000);
}

#[test]
fn ob1_refuses_ud_instead_of_losing_messages() {
    // ob1 has no acks or checksums: unless pml_ob1_unreliable_btls is set (benchmarks on a
    // lossless link, tests/tests/ob1_ud.rs), it must refuse ud at init with a message naming
    // the fix, not hang or deliver corrupted data.
    let out = run_job(&Job {
        ranks: 2,
        program: "stress",
        args: &["--messages", "1000"],
        mca: &[
            ("pml", "ob1"),
            ("btl", "ud,self"),
            ("btl_ud_provider", "soft"),
            ("btl_ud_fault_drop", "0.05"),
        ],
        timeout_s: 60,
    });
    assert!(!out.success(), "{}", out.text());
    assert_ne!(
        out.code,
        Some(124),
        "timed out instead of failing:\n{}",
        out.text()
    );
    assert!(
        out.stderr.contains("btl ud delivers unreliably")
            && out.stderr.contains("select pml dr (--mca pml dr)"),
        "{}",
        out.text()
    );
    assert!(!out.stdout.contains("messages="), "{}", out.text());
}

const PEER_LOSS: &[(&str, &str)] = &[
    ("pml", "dr"),
    ("btl", "ud,self"),
    ("btl_ud_provider", "soft"),
    ("pml_dr_peer_timeout", "3000"),
    ("pml_dr_rto_max_us", "500000"),
    // The loss must come mid-message: with the loopback default of 65000-byte datagrams rank 1
    // hands all 16 MiB to the kernel (and so to the receivers) within its first millisecond.
    ("btl_ud_mtu", "2048"),
];

#[test]
fn frozen_peer_fails_the_blocked_receives_instead_of_hanging() {
    // Rank 1 is stopped mid-transfer; the launcher sees no exit, so only pml dr's own liveness
    // detection can end the blocked receives of ranks 0 and 2. The --timeout (124) is the hang.
    let out = run_job(&Job {
        ranks: 3,
        program: "dr_peer_loss",
        args: &["freeze"],
        mca: PEER_LOSS,
        timeout_s: 90,
    });
    assert_eq!(out.code, Some(3), "{}", out.text());
    assert!(
        out.stdout.contains("peer-loss detected after")
            && out.stdout.contains("peer rank 1 unreachable"),
        "{}",
        out.text()
    );
}

#[test]
fn killed_peer_ends_the_job_with_an_error_not_a_hang() {
    // Without --keep-going the launcher tears the job down as soon as rank 1 dies.
    let out = run_job(&Job {
        ranks: 3,
        program: "dr_peer_loss",
        args: &["abort"],
        mca: PEER_LOSS,
        timeout_s: 90,
    });
    // 128 + SIGABRT: the launcher reports the dead rank and tears the job down.
    assert_eq!(out.code, Some(134), "{}", out.text());
    assert!(out.stderr.contains("rank 1"), "{}", out.text());
}

#[test]
fn killed_peer_fails_the_survivors_receives_through_dr_liveness() {
    // With --keep-going the survivors outlive the killed rank 1: only pml dr's own detection
    // (peer_timeout of silence on the last BTL, then every request needing the peer fails)
    // ends their blocked receives. The --timeout (124) is the hang.
    let out = run_job_with(
        &Job {
            ranks: 3,
            program: "dr_peer_loss",
            args: &["abort"],
            mca: PEER_LOSS,
            timeout_s: 90,
        },
        &["--keep-going"],
    );
    // The job's status is the first failure: rank 1's abort.
    assert_eq!(out.code, Some(134), "{}", out.text());
    for r in [0, 2] {
        assert!(
            out.stdout.lines().any(|l| l
                .starts_with(&format!("rank {r}: peer-loss detected after"))
                && l.contains("peer rank 1 unreachable")),
            "rank {r} did not report the loss itself:\n{}",
            out.text()
        );
    }
}

#[test]
fn dr_fails_over_from_a_black_holed_ud_path_to_the_second_btl() {
    // ud and shm both reach the (same-node) peer: shm's exclusivity is lowered to ud's so the
    // BML keeps both, its latency raised so dr sends on ud first. btl-ud's kill knob then
    // black-holes ud after 3000 fragments per process (mid-stream: the job moves ~130 MB), with
    // no error anywhere: dr's timeouts must fail ud over to shm, which finishes the job.
    let json = std::env::temp_dir().join(format!("rmca-dr-failover-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&json);
    let json_s = json.to_str().expect("utf-8 temp path").to_owned();
    let out = run_job(&Job {
        ranks: 2,
        program: "dr_failover",
        args: &["2000"],
        mca: &[
            ("pml", "dr"),
            ("btl", "ud,shm,self"),
            ("btl_ud_provider", "soft"),
            ("btl_shm_exclusivity", "1024"),
            ("btl_shm_latency", "1000000"),
            ("btl_ud_fault_blackhole_after", "3000"),
            ("profile", "1"),
            ("profile_json", &json_s),
        ],
        timeout_s: 300,
    });
    assert!(out.success(), "{}", out.text());
    let lines: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("failover "))
        .collect();
    assert_eq!(lines.len(), 2, "{}", out.text());
    for l in &lines {
        assert!(
            l.contains("messages=2000 ") && l.contains(" errors=0 "),
            "{}",
            out.text()
        );
    }
    let profile = take_profile(&json, &out);
    // ud carried traffic first (a process reached its 3000; its peer may fail ud over before
    // reaching its own, once acks stop coming back on it), was cut, dr failed the path over
    // and shm finished the job.
    assert!(
        counter(&profile, "btl.ud.frags_sent") >= 3000,
        "{profile:#}"
    );
    assert!(
        counter(&profile, "btl.ud.faults_blackholed") > 0,
        "{profile:#}"
    );
    assert!(counter(&profile, "pml.dr.failovers") > 0, "{profile:#}");
    assert!(counter(&profile, "btl.shm.frags_sent") > 0, "{profile:#}");
}

#[test]
fn a_rank_with_another_vfrag_size_fails_init_naming_both_values() {
    // The last rank runs with pml_dr_vfrag_frags = 16, the others with the default 64: the
    // protocol constant is checked through the modex, so every rank fails init at once with
    // the parameter and both values, rather than exchanging misunderstood vfrags.
    let out = run_job(&Job {
        ranks: 2,
        program: "dr_mismatch",
        args: &["pml_dr_vfrag_frags", "16"],
        mca: &[
            ("pml", "dr"),
            ("btl", "ud,self"),
            ("btl_ud_provider", "soft"),
        ],
        timeout_s: 60,
    });
    assert_ne!(out.code, Some(124), "hung:\n{}", out.text());
    assert!(!out.success(), "{}", out.text());
    assert!(!out.stdout.contains("init succeeded"), "{}", out.text());
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("init failed"))
        .unwrap_or_else(|| panic!("no init failure reported:\n{}", out.text()));
    assert!(
        line.contains("pml_dr_vfrag_frags") && line.contains("64") && line.contains("16"),
        "{}",
        out.text()
    );
}
