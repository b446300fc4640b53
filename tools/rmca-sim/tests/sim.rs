//! The simulator's properties: determinism, exactly-once delivery through pml-dr's core under
//! loss, bounded acknowledgements, peer-death detection, burst recovery, refusals.

use rmca_pml_dr::DrConfig;
use rmca_sim::net::{Loss, NetConfig};
use rmca_sim::sim::{Pattern, Sim, SimConfig, Stats};

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
