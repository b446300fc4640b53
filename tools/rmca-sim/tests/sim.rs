//! The simulator's properties: determinism, exactly-once delivery through pml-dr's core under
//! loss, bounded acknowledgements, peer-death detection, burst recovery, a killed BTL failed
//! over to a second one, the folded all-to-all equal to the full one, refusals.

use rmca_pml_dr::DrConfig;
use rmca_sim::net::{Loss, NetConfig};
use rmca_sim::sim::{Pattern, Sim, SimConfig, Stats};

use proptest::prelude::*;
use std::time::Duration;

fn cfg(n: usize, seed: u64, loss: Loss, pattern: Pattern) -> SimConfig {
    SimConfig {
        n,
        seed,
        net: NetConfig {
            loss,
            ..NetConfig::default()
        },
        dr: DrConfig::default(),
        mtu: 2048,
        recv_buffers: 512,
        cpu_rx_ns: 1000,
        cpu_tx_ns: 500,
        deaths: vec![],
        pattern,
        max_time_ns: 600_000_000_000,
        retire: false,
        second_path: None,
        path_kills: vec![],
        fold: false,
    }
}

fn run(c: SimConfig) -> Stats {
    Sim::new(c).expect("valid").run()
}

fn stream(until_ms: u64) -> Pattern {
    Pattern::Stream {
        fanout: 2,
        interval_ns: 100_000,
        size: 8,
        until_ns: until_ms * 1_000_000,
    }
}

#[test]
fn same_seed_same_output_other_seed_other_losses() {
    let lossy = |seed| cfg(8, seed, Loss::Bernoulli { p: 0.1 }, stream(5));
    let a = format!("{:?}", run(lossy(3)));
    let b = format!("{:?}", run(lossy(3)));
    assert_eq!(a, b, "a run is a function of its configuration and seed");
    let c = format!("{:?}", run(lossy(4)));
    assert_ne!(a, c, "another seed draws other losses");
}

fn assert_exactly_once(s: &Stats) {
    assert_eq!(s.duplicate_deliveries, 0, "{s:?}");
    assert_eq!(
        s.messages_delivered, s.messages_sent,
        "every message delivered: {s:?}"
    );
    assert_eq!(s.failed_ops, 0, "{s:?}");
    assert_eq!(s.false_deaths, 0, "{s:?}");
}

#[test]
fn exactly_once_at_4_peers_under_20_percent_loss_small_and_large_messages() {
    // 8 B (one fragment, eager copy) and 300 KB (rendezvous, several vfrags of 2 KB frags).
    for size in [8, 300_000] {
        let iters = if size > 1000 { 3 } else { 30 };
        let s = run(cfg(
            4,
            9,
            Loss::Bernoulli { p: 0.2 },
            Pattern::Pairwise { iters, size },
        ));
        assert_exactly_once(&s);
        assert_eq!(s.messages_sent, 4 * 3 * iters as u64);
        assert!(s.completion_ns.is_some(), "every process finished: {s:?}");
        assert!(s.net.lost_random > 0 && s.dr.retransmissions > 0, "{s:?}");
        // Acks are bounded by what arrived: at most one per received fragment (each ack
        // answers a fragment or a duplicate; probes' answers are the pongs).
        assert!(
            s.dr.acks_sent <= s.dr.frags_received + s.dr.pongs_sent,
            "acks {} > fragments received {}",
            s.dr.acks_sent,
            s.dr.frags_received
        );
    }
}

#[test]
fn exactly_once_under_bursty_loss() {
    // Gilbert-Elliott: bad 1/6 of the time, bursts of 5 packets on average, all lost.
    let l = Loss::GilbertElliott {
        p_gb: 0.04,
        p_bg: 0.2,
        loss_good: 0.0,
        loss_bad: 1.0,
    };
    let s = run(cfg(4, 5, l, Pattern::Pairwise { iters: 40, size: 8 }));
    assert_exactly_once(&s);
    assert!(s.net.lost_random > 10, "{s:?}");
}

#[test]
fn a_dead_peer_is_detected_after_the_peer_timeout_and_only_it() {
    let mut c = cfg(6, 1, Loss::None, stream(20));
    c.dr.peer_timeout = std::time::Duration::from_millis(500);
    c.dr.rto_max = std::time::Duration::from_millis(100);
    c.deaths = vec![(0, 10_000_000)];
    let s = run(c);
    // Processes 4 and 5 stream to process 0 (fanout 2): both detect it.
    assert_eq!(s.death_detections.len(), 2, "{s:?}");
    for d in &s.death_detections {
        assert!(
            (500_000_000..1_500_000_000).contains(d),
            "detected {d} ns after the death, peer_timeout 500 ms"
        );
    }
    assert_eq!(s.false_deaths, 0);
}

#[test]
fn recovery_after_a_burst_is_measured_and_complete() {
    let mut c = cfg(8, 2, Loss::None, stream(30));
    c.net.bursts = vec![(10_000_000, 15_000_000)];
    let s = run(c);
    assert_exactly_once(&s);
    let r = s.recovery_ns.expect("recovered");
    assert!(r > 0 && r < 5_000_000_000, "{r}");
    assert!(s.net.lost_burst > 0 && s.dr.timeouts > 0, "{s:?}");
}

#[test]
fn retiring_quiescent_pairs_changes_nothing_the_protocol_sees_without_loss() {
    let p = Pattern::Pairwise { iters: 1, size: 8 };
    let a = run(cfg(64, 1, Loss::None, p.clone()));
    let mut c = cfg(64, 1, Loss::None, p);
    c.retire = true;
    let b = run(c);
    assert_exactly_once(&b);
    assert_eq!(a.completion_ns, b.completion_ns);
    assert_eq!(a.dr.acks_sent, b.dr.acks_sent);
    assert!(
        b.conns_peak < a.conns_peak,
        "{} vs {}",
        b.conns_peak,
        a.conns_peak
    );
}

#[test]
fn pml_dr_per_peer_heap_is_measured() {
    let (s, conns, heap) = Sim::new(cfg(64, 1, Loss::None, Pattern::Star { size: 0 }))
        .unwrap()
        .run_measuring_proc0();
    assert_exactly_once(&s);
    assert_eq!(conns, 63);
    let per_peer = heap / conns;
    assert!(
        per_peer >= std::mem::size_of::<rmca_pml_dr::proto::Connection>(),
        "{per_peer}"
    );
}

#[test]
fn nonsense_configurations_are_refused_naming_what_is_valid() {
    let ok = || cfg(4, 1, Loss::None, Pattern::Pairwise { iters: 1, size: 8 });
    let err = |c: SimConfig| Sim::new(c).err().expect("refused").to_string();
    let e = err(SimConfig { n: 1, ..ok() });
    assert!(e.contains("--n") && e.contains("2..="), "{e}");
    let e = err(SimConfig { mtu: 50, ..ok() });
    assert!(e.contains("--mtu"), "{e}");
    let e = err(SimConfig {
        deaths: vec![(9, 0)],
        ..ok()
    });
    assert!(e.contains("--kill") && e.contains("below --n"), "{e}");
    let mut c = ok();
    c.net.loss = Loss::Bernoulli { p: 2.0 };
    assert!(err(c).contains("0..=1"));
    let mut c = ok();
    c.dr.window = 0;
    assert!(err(c).contains("pml_dr_window"));
    let e = err(SimConfig {
        pattern: Pattern::Stream {
            fanout: 4,
            interval_ns: 1,
            size: 1,
            until_ns: 1,
        },
        ..ok()
    });
    assert!(e.contains("--fanout"), "{e}");
}

#[test]
fn the_command_prints_tables_json_and_refuses_bad_options() {
    let bin = env!("CARGO_BIN_EXE_rmca-sim");
    let out = std::process::Command::new(bin)
        .args(["memory", "--procs", "2,16", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(v["dr+ud"].as_f64().unwrap() > 0.0, "{v}");
    }
    let out = std::process::Command::new(bin)
        .args(["alltoall", "--loss", "bernoulli:7"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--loss") && e.contains("bernoulli:P"), "{e}");
    let out = std::process::Command::new(bin)
        .args(["frobnicate"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("memory, acks"));
}

#[test]
fn the_lossy_all_to_all_runs_each_loss_process_with_a_death_and_refuses_nonsense() {
    let bin = env!("CARGO_BIN_EXE_rmca-sim");
    let run = |args: &[&str]| std::process::Command::new(bin).args(args).output().unwrap();
    let out = run(&[
        "alltoall",
        "--procs",
        "8,16",
        "--losses",
        "none;bernoulli:0.05;ge:0.01,0.25",
        "--death-ms",
        "0.01",
        "--mca",
        "pml_dr_peer_timeout",
        "2000",
        "--mca",
        "pml_dr_rto_max_us",
        "500000",
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        for loss in ["none", "bernoulli:0.05", "ge:0.01,0.25"] {
            // Every live process completes: the dead one is declared dead by each that waits.
            let ms = v[format!("{loss} ms")].as_f64().unwrap();
            assert!(ms >= 2000.0, "{loss}: {v}");
        }
        assert!(v["bernoulli:0.05 retx/msg"].as_f64().unwrap() > 0.0, "{v}");
    }
    for (args, says) in [
        (
            &["alltoall", "--losses", "none", "--method", "folded"][..],
            "full method only",
        ),
        (
            &["alltoall", "--losses", "none", "--loss", "none"][..],
            "without --loss",
        ),
        (
            &["alltoall", "--losses", "none;bernoulli:2"][..],
            "bernoulli:P",
        ),
        (
            &["alltoall", "--method", "folded", "--death-ms", "1"][..],
            "no deaths",
        ),
    ] {
        let out = run(args);
        assert!(!out.status.success(), "{args:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(says), "{args:?}: {e}");
    }
}

/// `n` processes streaming to 2 successors, process 0's first BTL killed at 10 ms, a second BTL.
fn killed_path(n: usize, seed: u64, loss: Loss) -> SimConfig {
    let mut c = cfg(n, seed, loss, stream(15));
    c.second_path = Some(NetConfig::default());
    c.path_kills = vec![(0, 10_000_000)];
    c.dr.btl_fail_silence = Duration::from_millis(200);
    c
}

#[test]
fn a_killed_path_fails_over_to_the_second_btl_exactly_once() {
    let s = run(killed_path(6, 1, Loss::None));
    assert_exactly_once(&s);
    // Process 0 streams to 1 and 2, 4 and 5 stream to 0: both ends of those 4 pairs fail the
    // path over (0 for its successors, 4 and 5 for 0; 1 and 2 once their acks to 0 stop being
    // answered... they only acknowledge, so they may not): at least the 4 senders' sides.
    assert!(s.btl_detections.len() >= 4, "{s:?}");
    assert_eq!(
        s.false_btl_failures, 0,
        "only pairs with process 0 fail over: {s:?}"
    );
    assert_eq!(s.dr.failovers as usize, s.btl_detections.len());
    for &d in &s.btl_detections {
        // Not before btl_fail_silence of silence, nor long after (the next backed-off probe).
        assert!(
            (200_000_000..1_000_000_000).contains(&d),
            "detected {d} ns after the kill"
        );
    }
    let r = s.resume_ns.expect("every pair resumed on the second BTL");
    assert!((200_000_000..1_100_000_000).contains(&r), "{r}");
    assert!(s.killed_packets > 0 && s.net2.packets > 0, "{s:?}");
    assert!(
        s.dr.retransmissions > 0,
        "the stranded fragments are re-sent: {s:?}"
    );
}

#[test]
fn a_killed_path_with_loss_is_deterministic_and_exactly_once() {
    let a = run(killed_path(5, 7, Loss::Bernoulli { p: 0.05 }));
    let b = run(killed_path(5, 7, Loss::Bernoulli { p: 0.05 }));
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert_exactly_once(&a);
    assert!(a.resume_ns.is_some(), "{a:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Folding every process onto process 0 by symmetry changes nothing the protocol sees:
    /// same completion time to the nanosecond, same acks and retransmissions per message, same
    /// events per process, every message exactly once.
    #[test]
    fn the_folded_all_to_all_equals_the_full_one(
        n in 2usize..40,
        size in prop::sample::select(vec![0u64, 8, 4096, 70_000]),
        iters in 1u32..3,
    ) {
        let p = Pattern::Pairwise { iters, size };
        let full = run(cfg(n, 1, Loss::None, p.clone()));
        let mut c = cfg(n, 1, Loss::None, p);
        c.fold = true;
        let folded = run(c);
        assert_exactly_once(&full);
        assert_exactly_once(&folded);
        prop_assert!(full.completion_ns.is_some());
        prop_assert_eq!(full.completion_ns, folded.completion_ns);
        prop_assert_eq!(full.messages_sent, folded.messages_sent * n as u64);
        prop_assert_eq!(full.dr.acks_sent, folded.dr.acks_sent * n as u64);
        prop_assert_eq!(full.dr.frags_sent, folded.dr.frags_sent * n as u64);
        prop_assert_eq!(full.events, folded.events * n as u64);
    }

    /// Under any loss, killing any process's path with a second BTL present still delivers
    /// every message exactly once, and only pairs with the killed process fail over.
    #[test]
    fn any_path_kill_keeps_exactly_once(
        n in 3usize..7,
        victim in 0usize..7,
        kill_ms in 1u64..14,
        p in 0.0f64..0.1,
        seed in 0u64..1000,
    ) {
        let mut c = killed_path(n, seed, Loss::Bernoulli { p });
        c.path_kills = vec![(victim % n, kill_ms * 1_000_000)];
        let s = run(c);
        assert_exactly_once(&s);
        prop_assert_eq!(s.false_btl_failures, 0);
    }
}

/// What the protocol and the network did in a run, without the simulator's own bookkeeping
/// (events, timer entries, connections held): the figures retiring must not change.
fn protocol_figures(s: &Stats) -> String {
    // `srtt` is one connection's estimate, not a sum: which one depends on the order added.
    let mut dr = s.dr.clone();
    dr.srtt = Duration::ZERO;
    format!(
        "completion {:?} sent {} delivered {} dups {} dr {:?} pool drops {} peak {} late {} \
         deaths {:?} false {} failed {} recovery {:?} net {:?}",
        s.completion_ns,
        s.messages_sent,
        s.messages_delivered,
        s.duplicate_deliveries,
        dr,
        s.pool_drops,
        s.pool_peak,
        s.late_packets,
        s.death_detections,
        s.false_deaths,
        s.failed_ops,
        s.recovery_ns,
        s.net,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Retiring (a pair's connections freed once both are idle with nothing in flight, its
    /// entry dropped once its counts follow from the steps) changes nothing the protocol or the
    /// network sees in the all-to-all (one round: each direction of a pair carries one
    /// message), under independent or bursty loss, jitter, a burst window and a death: the
    /// same packets lost, the same completion to the nanosecond, the same pml-dr counters.
    #[test]
    fn retiring_idle_pairs_equals_keeping_every_connection_under_any_loss(
        n in 2usize..24,
        size in prop::sample::select(vec![0u64, 8, 4096, 70_000]),
        loss in prop::sample::select(vec![0.0, 0.01, 0.05, 0.2]),
        bursty in any::<bool>(),
        jitter_ns in prop::sample::select(vec![0u64, 3_000]),
        burst in any::<bool>(),
        death in prop::option::of(0usize..24),
        seed in 0u64..1000,
    ) {
        let l = match (loss > 0.0, bursty) {
            (false, _) => Loss::None,
            (true, false) => Loss::Bernoulli { p: loss },
            (true, true) => Loss::GilbertElliott { p_gb: loss / 4.0, p_bg: 0.25, loss_good: 0.0, loss_bad: 1.0 },
        };
        let mut keep = cfg(n, seed, l, Pattern::Pairwise { iters: 1, size });
        keep.net.jitter_ns = jitter_ns;
        if burst {
            keep.net.bursts = vec![(20_000, 60_000)];
        }
        if let Some(d) = death {
            keep.deaths = vec![(d % n, 30_000)];
            keep.dr.peer_timeout = Duration::from_millis(2000);
            keep.dr.rto_max = Duration::from_millis(500);
        }
        keep.max_time_ns = 20_000_000_000;
        let mut retire = keep.clone();
        retire.retire = true;
        let a = run(keep);
        let b = run(retire);
        prop_assert_eq!(a.duplicate_deliveries, 0);
        prop_assert_eq!(protocol_figures(&a), protocol_figures(&b));
        prop_assert!(b.conns_peak <= a.conns_peak);
    }
}

#[test]
fn retiring_is_refused_where_a_kept_connection_would_differ() {
    let mut c = cfg(8, 1, Loss::None, Pattern::Pairwise { iters: 2, size: 8 });
    c.retire = true;
    let e = Sim::new(c).err().expect("refused").to_string();
    assert!(e.contains("retire") && e.contains("one round"), "{e}");
    let mut c = cfg(8, 1, Loss::None, stream(1));
    c.retire = true;
    assert!(Sim::new(c).is_err());
}

#[test]
fn fold_and_path_kills_refuse_nonsense_naming_what_is_valid() {
    let err = |c: SimConfig| Sim::new(c).err().expect("refused").to_string();
    let p = Pattern::Pairwise { iters: 1, size: 8 };
    let mut c = cfg(8, 1, Loss::Bernoulli { p: 0.01 }, p.clone());
    c.fold = true;
    let e = err(c);
    assert!(e.contains("fold") && e.contains("no loss"), "{e}");
    let mut c = cfg(8, 1, Loss::None, stream(5));
    c.fold = true;
    assert!(err(c).contains("pairwise pattern"));
    let mut c = cfg(8, 1, Loss::None, p.clone());
    c.fold = true;
    c.retire = true;
    assert!(err(c).contains("retire"));
    let mut c = cfg(8, 1, Loss::None, p.clone());
    c.fold = true;
    c.net.jitter_ns = 10;
    assert!(err(c).contains("jitter"));
    let mut c = cfg(8, 1, Loss::None, p.clone());
    c.path_kills = vec![(8, 0)];
    let e = err(c);
    assert!(e.contains("below --n"), "{e}");
    let mut c = cfg(8, 1, Loss::None, p);
    c.second_path = Some(NetConfig {
        bytes_per_sec: 0,
        ..NetConfig::default()
    });
    assert!(err(c).contains("above 0"));
}

#[test]
fn the_failover_and_folded_commands_run_and_refuse_bad_options() {
    let bin = env!("CARGO_BIN_EXE_rmca-sim");
    let cmd = |a: &[&str]| std::process::Command::new(bin).args(a).output().unwrap();
    let out = cmd(&[
        "failover",
        "--procs",
        "2,8",
        "--json",
        "--mca",
        "pml_dr_peer_timeout",
        "500",
        "--mca",
        "pml_dr_rto_max_us",
        "100000",
        "--mca",
        "pml_dr_btl_fail_silence",
        "200",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["dups"], 0.0, "{v}");
        assert_eq!(v["false failovers"], 0.0, "{v}");
        let det = v["death detect ms"].as_f64().unwrap();
        assert!((500.0..600.0).contains(&det), "{v}");
        let f = v["failover ms"].as_f64().unwrap();
        assert!((200.0..500.0).contains(&f), "btl_fail_silence 200 ms: {v}");
    }
    let out = cmd(&["alltoall", "--method", "both", "--procs", "2,16"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines()
            .skip(2)
            .all(|l| l.split_whitespace().nth(3) == Some("0")),
        "{text}"
    );
    let out = cmd(&["alltoall", "--method", "folded", "--loss", "bernoulli:0.01"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no loss"));
    let out = cmd(&["alltoall", "--method", "half"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("full, folded or both"));
    let out = cmd(&["failover", "--job", "/nonexistent/kill.json"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/kill.json"));
    let out = cmd(&["failover", "--job", "x.json", "--procs", "4"]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--procs") && e.contains("not with --job"), "{e}");
    // A peer timeout that expires before a path can be failed over is refused.
    let out = cmd(&[
        "failover",
        "--mca",
        "pml_dr_peer_timeout",
        "500",
        "--mca",
        "pml_dr_rto_max_us",
        "100000",
    ]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("pml_dr_btl_fail_silence"), "{e}");
    let out = cmd(&["failover", "--bursts-ms", "5"]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("not an option of 'failover'") && e.contains("--burst-ms"),
        "{e}"
    );
}
