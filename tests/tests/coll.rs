//! Every collective against a sequential reference, for 1..=8 ranks (powers of two and not),
//! with each algorithm forced through its `coll_<op>_algorithm` MCA parameter, plus the
//! examples. The checking program is `rmca/examples/coll_check.rs`; the collectives of issue
//! 17 (v-forms, reduce_scatter, scans, in-place forms, MinLoc/MaxLoc, user operations) are
//! checked by `rmca/examples/collv_check.rs` over ob1+shm, dr+shm, dr+ud and ob1+rc at 1..=4
//! ranks.

use rmca_tests::{run_job, Job};

/// Algorithm sets: together they force every registered algorithm of every collective.
const CONFIGS: &[(&str, &[(&str, &str)])] = &[
    (
        "linear",
        &[
            ("coll_barrier_algorithm", "linear"),
            ("coll_bcast_algorithm", "linear"),
            ("coll_reduce_algorithm", "linear"),
            ("coll_allreduce_algorithm", "reduce_bcast"),
            ("coll_gather_algorithm", "linear"),
            ("coll_scatter_algorithm", "linear"),
            ("coll_allgather_algorithm", "linear"),
            ("coll_alltoall_algorithm", "linear"),
        ],
    ),
    (
        "trees",
        &[
            ("coll_barrier_algorithm", "dissemination"),
            ("coll_bcast_algorithm", "binomial"),
            ("coll_reduce_algorithm", "binomial"),
            ("coll_allreduce_algorithm", "recursive_doubling"),
            ("coll_gather_algorithm", "binomial"),
            ("coll_scatter_algorithm", "binomial"),
            ("coll_allgather_algorithm", "recursive_doubling"),
            ("coll_alltoall_algorithm", "pairwise"),
        ],
    ),
    (
        "long",
        &[
            ("coll_bcast_algorithm", "scatter_allgather"),
            ("coll_allreduce_algorithm", "ring"),
            ("coll_allgather_algorithm", "ring"),
        ],
    ),
    // 'auto' with low thresholds, so that the size-based switches happen inside the checked sizes.
    (
        "auto",
        &[
            ("coll_bcast_long_size", "1k"),
            ("coll_allreduce_long_size", "1k"),
            ("coll_alltoall_medium_size", "1k"),
        ],
    ),
    // Algorithms that forward other ranks' blocks: Bruck's alltoall (alltoallv falls back to
    // pairwise under it) and the neighbour-exchange allgather (the ring at odd counts).
    (
        "exchange",
        &[
            ("coll_alltoall_algorithm", "bruck"),
            ("coll_allgather_algorithm", "neighbor_exchange"),
        ],
    ),
];

fn check(config: &str, mca: &[(&str, &str)]) {
    // coll-base alone: on one node coll-sm would take the short barriers, bcasts and
    // reductions these configurations force algorithms for (tests/tests/c_coll_sm.rs runs
    // coll_check under the default stack).
    let mca = &[mca, &[("coll", "base")]].concat();
    for n in 1..=8 {
        let out = run_job(&Job {
            ranks: n,
            program: "coll_check",
            args: &[],
            mca,
            timeout_s: 120,
        });
        assert!(
            out.success()
                && out.stdout.contains(&format!("coll_check: {n} ranks"))
                && out.stdout.contains(" 0 failures"),
            "coll_check with {config} algorithms on {n} ranks failed:\n{}",
            out.text()
        );
        assert!(
            !out.stdout.contains("FAIL"),
            "{config}, {n} ranks:\n{}",
            out.text()
        );
    }
}

#[test]
fn linear_algorithms_match_reference() {
    check(CONFIGS[0].0, CONFIGS[0].1);
}

#[test]
fn tree_algorithms_match_reference() {
    check(CONFIGS[1].0, CONFIGS[1].1);
}

#[test]
fn long_message_algorithms_match_reference() {
    check(CONFIGS[2].0, CONFIGS[2].1);
}

#[test]
fn auto_selection_matches_reference() {
    check(CONFIGS[3].0, CONFIGS[3].1);
}

#[test]
fn bruck_and_neighbor_exchange_match_reference() {
    check(CONFIGS[4].0, CONFIGS[4].1);
}

/// Transport configurations for `collv_check` (gatherv, scatterv, allgatherv,
/// reduce_scatter(_block), scan, exscan, in-place forms, MinLoc/MaxLoc, user operations),
/// each also forcing a different set of algorithms so that all of them run somewhere.
const V_CONFIGS: &[(&str, &[(&str, &str)])] = &[
    // ob1 + shm, 'auto' with a low long-message threshold: the ring reduce_scatter for
    // commutative operations and its refusal for non-commutative ones happen in the sizes.
    ("ob1+shm", &[("coll_allreduce_long_size", "1k")]),
    (
        "dr+shm",
        &[
            ("pml", "dr"),
            ("coll_reduce_scatter_algorithm", "reduce_scatterv"),
            ("coll_scan_algorithm", "linear"),
            ("coll_allgather_algorithm", "linear"),
            ("coll_gather_algorithm", "linear"),
            ("coll_scatter_algorithm", "linear"),
            ("coll_reduce_algorithm", "linear"),
            ("coll_allreduce_algorithm", "reduce_bcast"),
        ],
    ),
    (
        "dr+ud",
        &[
            ("pml", "dr"),
            ("btl", "ud,self"),
            ("btl_ud_provider", "soft"),
            // Forced ring and binomial: a non-commutative operation must still get rank order.
            ("coll_reduce_scatter_algorithm", "ring"),
            ("coll_allreduce_algorithm", "ring"),
            ("coll_reduce_algorithm", "binomial"),
            ("coll_scan_algorithm", "recursive_doubling"),
        ],
    ),
    (
        "ob1+rc",
        &[
            ("pml", "ob1"),
            ("btl", "rc,self"),
            ("btl_rc_provider", "soft"),
            // The in-place alltoall through Bruck's packing, the allgathers (in place too)
            // through neighbour exchange.
            ("coll_alltoall_algorithm", "bruck"),
            ("coll_allgather_algorithm", "neighbor_exchange"),
        ],
    ),
];

/// Run `collv_check` on 1, 2, 3 and 4 ranks under `V_CONFIGS[i]`.
fn check_v(i: usize) {
    let (config, mca) = V_CONFIGS[i];
    for n in 1..=4 {
        let out = run_job(&Job {
            ranks: n,
            program: "collv_check",
            args: &[],
            mca,
            timeout_s: 120,
        });
        assert!(
            out.success()
                && out.stdout.contains(&format!("collv_check: {n} ranks"))
                && out.stdout.contains(" 0 failures")
                && !out.stdout.contains("FAIL"),
            "collv_check over {config} on {n} ranks failed:\n{}",
            out.text()
        );
    }
}

#[test]
fn v_collectives_scans_and_user_ops_over_ob1_shm() {
    check_v(0);
}

#[test]
fn v_collectives_scans_and_user_ops_over_dr_shm() {
    check_v(1);
}

#[test]
fn v_collectives_scans_and_user_ops_over_dr_ud() {
    check_v(2);
}

#[test]
fn v_collectives_scans_and_user_ops_over_ob1_rc() {
    check_v(3);
}

#[test]
fn unknown_algorithm_is_rejected_with_the_valid_names() {
    let out = run_job(&Job {
        ranks: 2,
        program: "coll_check",
        args: &[],
        mca: &[("coll_allreduce_algorithm", "bogus")],
        timeout_s: 60,
    });
    assert!(!out.success(), "{}", out.text());
    assert!(
        out.stderr
            .contains("recursive_doubling, ring, reduce_bcast"),
        "{}",
        out.text()
    );
}

#[test]
fn hello_prints_every_rank() {
    let out = run_job(&Job {
        ranks: 3,
        program: "hello",
        args: &[],
        mca: &[],
        timeout_s: 60,
    });
    assert!(out.success(), "{}", out.text());
    for r in 0..3 {
        assert!(
            out.stdout
                .contains(&format!("hello from rank {r} of 3 on node")),
            "{}",
            out.text()
        );
    }
}

#[test]
fn ring_token_survives_many_laps() {
    for n in [1, 2, 4] {
        let out = run_job(&Job {
            ranks: n,
            program: "ring",
            args: &["200"],
            mca: &[],
            timeout_s: 120,
        });
        assert!(
            out.success()
                && out
                    .stdout
                    .contains(&format!("ring: 200 laps over {n} ranks OK")),
            "{}",
            out.text()
        );
    }
}

#[test]
fn pingpong_covers_sizes() {
    let out = run_job(&Job {
        ranks: 2,
        program: "pingpong",
        args: &["20"],
        mca: &[],
        timeout_s: 120,
    });
    assert!(out.success(), "{}", out.text());
    // 0, 1, 4, ..., 1 MiB: 12 rows after the header.
    let rows = out
        .stdout
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u64>().is_ok())
        })
        .count();
    assert_eq!(rows, 12, "{}", out.text());
}

#[test]
fn rmca_bench_prints_json_lines_and_a_plot() {
    let svg = std::env::temp_dir().join(format!("rmca-bench-test-{}.svg", std::process::id()));
    let out = std::process::Command::new(rmca_tests::release_bin("rmca-bench"))
        .args([
            "latency,allreduce,allconn",
            "-n",
            "2",
            "--max",
            "64",
            "--iters",
            "20",
            "--runs",
            "2",
            "--json",
            "--no-bind",
            "--plot",
        ])
        .arg(&svg)
        .output()
        .expect("run rmca-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let objs: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    // latency: sizes 0,1,2,...,64 (8 sizes); allreduce: 4..64 (5 sizes); allconn: 2 metrics.
    assert_eq!(objs.len(), 8 + 5 + 2, "{stdout}");
    for o in &objs {
        assert_eq!(o["config"], "rmca");
        assert_eq!(o["ranks"], 2);
        assert_eq!(o["values"].as_array().map(Vec::len), Some(2), "{o}");
        assert_eq!(o["runs"], 2);
        assert!(o["median"].as_f64().is_some_and(|m| m > 0.0), "{o}");
    }
    assert!(objs
        .iter()
        .any(|o| o["benchmark"] == "allconn" && o["metric"] == "init"));
    let plot = std::fs::read_to_string(&svg).expect("plot written");
    let _ = std::fs::remove_file(&svg);
    // One data line (2 px) per panel: latency and allreduce, one configuration each.
    assert!(
        plot.starts_with("<svg") && plot.matches(r#"stroke-width="2" points="#).count() == 2,
        "{plot}"
    );
}

/// Reductions of no element (allreduce, reduce, reduce_scatter_block, scan, exscan, typed
/// and in place) return without waiting for the other members, on coll-sm's segment and on
/// coll-base's schedules alike: `rmca/examples/coll_empty.rs` has the last rank make its
/// calls only after the others got past theirs.
#[test]
fn empty_reductions_do_not_wait_for_the_other_members() {
    for mca in [&[][..], &[("coll", "base")][..]] {
        let out = run_job(&Job {
            ranks: 3,
            program: "coll_empty",
            args: &[],
            mca,
            timeout_s: 60,
        });
        assert!(
            out.success() && out.stdout.contains("did not wait for the last rank"),
            "{mca:?}: {}",
            out.text()
        );
    }
}
