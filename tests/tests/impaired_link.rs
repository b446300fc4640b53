//! Jobs across a link emulated by rmca-impair (bench/impaired-link.sh: two namespace nodes whose
//! TUN devices the emulator joins, impairing every packet between them from a seed): pml dr over
//! btl ud (soft provider, UDP) keeps every message exactly once, in order and intact through 20%
//! bursty loss, and catches the corruption that reaches it (payload bits flipped, UDP checksum
//! cleared, so the kernel delivers the datagram): counted, never delivered.
//!
//! Needs root and /dev/net/tun (skipped, saying so, without them; CI has both).

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use rmca_tests::{cannot_emulate, counter, release_bin, take_profile, workspace_root, JobOutput};
use serde_json::Value;

fn script() -> PathBuf {
    workspace_root().join("bench/impaired-link.sh")
}

/// Two nodes joined through rmca-impair; taken down on drop.
struct ImpairedLink {
    prefix: String,
}

impl ImpairedLink {
    /// Brings the nodes up with `impair` (rmca-impair's SPEC) on both directions, or None
    /// (after saying why) where the emulator cannot run.
    fn up(impair: &str, seed: u64) -> Option<Self> {
        Self::up_with(impair, seed, &[])
    }

    /// [`Self::up`] with more options of rmca-impair (`extra`, e.g. `--then SPEC`).
    fn up_with(impair: &str, seed: u64, extra: &[&str]) -> Option<Self> {
        if let Some(why) = cannot_emulate() {
            rmca_test_support::skip_or_fail(why);
            return None;
        }
        static N: AtomicU32 = AtomicU32::new(0);
        // Ends in a letter, so that no prefix is another's followed by a node number.
        let prefix = format!(
            "ti{}{}",
            std::process::id() % 100_000,
            char::from(b'a' + (N.fetch_add(1, Ordering::Relaxed) % 26) as u8)
        );
        let out = Command::new(script())
            .args(["up", "2", &prefix, "--", "--impair", impair, "--seed"])
            .arg(seed.to_string())
            .args(extra)
            .env("RMCA_IMPAIR", release_bin("rmca-impair"))
            .output()
            .expect("run bench/impaired-link.sh");
        let link = Self { prefix };
        assert!(
            out.status.success(),
            "impaired-link.sh up failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Some(link)
    }

    /// Runs `program args` on 2 ranks, one per node, with `mca`.
    fn run(&self, mca: &[(&str, &str)], program: &str, args: &[&str]) -> JobOutput {
        let mut cmd = Command::new(script());
        cmd.args(["run", &self.prefix, "--", "-n", "2", "--timeout", "120"]);
        for (k, v) in mca {
            cmd.arg("--mca").arg(k).arg(v);
        }
        cmd.arg(release_bin(program)).args(args);
        cmd.env("RMCA_RUN", release_bin("rmca-run"));
        for (k, _) in std::env::vars() {
            if k.starts_with("RMCA_MCA_") {
                cmd.env_remove(k);
            }
        }
        // Not the debug build's libraries that `cargo test` puts on the path.
        cmd.env_remove("LD_LIBRARY_PATH");
        let out = cmd.output().expect("run the job");
        JobOutput {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The emulator's report so far (`impaired-link.sh stats`).
    fn report(&self) -> Value {
        let out = Command::new(script())
            .args(["stats", &self.prefix])
            .output()
            .expect("impaired-link.sh stats");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "stats is not JSON ({e}): {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    /// The counters of the direction from node `from` to node `to` (zero before its first
    /// packet: the report lists a direction once it has something to say).
    fn direction(report: &Value, from: &str, to: &str) -> (Value, String) {
        report["directions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|d| {
                // Named "NODE(ADDRESS)".
                let is = |v: &Value, node: &str| {
                    v.as_str()
                        .is_some_and(|s| s.strip_prefix(node).is_some_and(|r| r.starts_with('(')))
                };
                is(&d["from"], from) && is(&d["to"], to)
            })
            .map(|d| {
                (
                    d["counters"].clone(),
                    d["impairment"].as_str().unwrap_or("").to_owned(),
                )
            })
            .unwrap_or_else(|| (serde_json::json!({"packets": 0, "lost": 0}), String::new()))
    }

    /// Node `i`'s namespace.
    fn node(&self, i: usize) -> String {
        format!("{}{i}", self.prefix)
    }

    /// Sends `n` UDP datagrams from node 0 to node 1's impaired address (bash's /dev/udp:
    /// nothing listens, the emulator counts them on the way).
    fn send_datagrams(&self, n: usize) {
        let st = Command::new("ip")
            .args(["netns", "exec", &self.node(0), "bash", "-c"])
            .arg(format!(
                "for i in $(seq {n}); do echo \"datagram $i\" >/dev/udp/10.203.0.2/9; done"
            ))
            .status()
            .expect("run bash in the node");
        assert!(st.success(), "sending datagrams failed: {st}");
    }

    /// `impaired-link.sh change` (SIGUSR2: switch to the emulator's `--then`).
    fn change(&self) {
        let st = Command::new(script())
            .args(["change", &self.prefix])
            .status()
            .expect("impaired-link.sh change");
        assert!(st.success(), "change failed: {st}");
    }

    /// The emulator's counters so far, per direction.
    fn counters(&self) -> Vec<Value> {
        self.report()["directions"]
            .as_array()
            .expect("directions")
            .iter()
            .map(|d| d["counters"].clone())
            .collect()
    }
}

impl Drop for ImpairedLink {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .args(["down", &self.prefix])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// `stress` on 2 ranks over `link` under dr+ud: both ranks verified everything (each message
/// once, in order, of the right size and content: stress's plan tells the receiver exactly what
/// each message must be) and the job's merged profile.
fn stress_over(link: &ImpairedLink, what: &str, messages: u64) -> Value {
    let json =
        std::env::temp_dir().join(format!("rmca-impaired-{what}-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&json);
    let json_s = json.to_str().expect("utf-8 temp path").to_owned();
    let messages_s = messages.to_string();
    let out = link.run(
        &[
            ("pml", "dr"),
            ("btl", "ud,self"),
            ("btl_ud_provider", "soft"),
            ("profile", "1"),
            ("profile_json", &json_s),
        ],
        "stress",
        &[
            "--seed",
            "5",
            "--messages",
            &messages_s,
            "--max-size",
            "256k",
        ],
    );
    let lines: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("messages="))
        .collect();
    assert!(
        out.success() && lines.len() == 2,
        "{what}: stress failed:\n{}",
        out.text()
    );
    let mut received = 0;
    for l in lines {
        assert!(l.contains(" errors=0 "), "{what}: {l}\n{}", out.text());
        received += l
            .strip_prefix("messages=")
            .and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{l}"));
    }
    assert_eq!(
        received,
        messages,
        "{what}: every message once\n{}",
        out.text()
    );
    take_profile(&json, &out)
}

#[test]
fn twenty_percent_bursty_loss_keeps_dr_over_ud_exactly_once() {
    let Some(link) = ImpairedLink::up("burst=0.2:4", 7) else {
        return;
    };
    let profile = stress_over(&link, "burst", 2000);
    // The link really lost a fifth of the packets, in bursts (independent loss at 20% would
    // average 1.25 packets a run), and dr really repaired it.
    for c in link.counters() {
        let (packets, lost, bursts) = (
            c["packets"].as_u64().unwrap(),
            c["lost"].as_u64().unwrap(),
            c["loss_bursts"].as_u64().unwrap(),
        );
        let rate = lost as f64 / packets as f64;
        assert!(packets > 1000 && (0.12..0.28).contains(&rate), "{c}");
        assert!(lost as f64 / bursts as f64 > 2.0, "not bursty: {c}");
    }
    assert!(
        counter(&profile, "pml.dr.retransmissions") > 0,
        "{profile:#}"
    );
}

#[test]
fn corruption_that_reaches_the_application_is_caught_never_delivered() {
    let Some(link) = ImpairedLink::up("corrupt=0.02:2,dup=0.01,reorder=0.02:500us", 11) else {
        return;
    };
    let profile = stress_over(&link, "corrupt", 2000);
    let corrupted: u64 = link
        .counters()
        .iter()
        .map(|c| c["corrupted"].as_u64().unwrap())
        .sum();
    assert!(
        corrupted > 10,
        "the emulator corrupted too little to judge: {corrupted}"
    );
    // Every corrupted datagram reached a rank (its checksum cleared) and was refused there,
    // by dr's CRC or as malformed; stress saw none of it (errors=0 above).
    let caught = counter(&profile, "pml.dr.csum_failures") + counter(&profile, "pml.dr.malformed");
    assert!(
        caught > 0,
        "corrupted {corrupted}, caught none: {profile:#}"
    );
    assert!(counter(&profile, "pml.dr.duplicates") > 0, "{profile:#}");
}

#[test]
fn then_switches_every_direction_on_change_stamps_when_and_keeps_the_counters() {
    // Loss-free (a delay, so that the direction is reported from the start) until the change,
    // every packet lost after it.
    let Some(link) = ImpairedLink::up_with("delay=200us", 9, &["--then", "loss=1"]) else {
        return;
    };
    let (a, b) = (link.node(0), link.node(1));
    let n = 40;
    link.send_datagrams(n);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let before = link.report();
    assert!(before["changed_at_unix_ns"].is_null(), "{before:#}");
    let (c0, imp0) = ImpairedLink::direction(&before, &a, &b);
    let (p0, lost0) = (
        c0["packets"].as_u64().unwrap(),
        c0["lost"].as_u64().unwrap(),
    );
    assert!(p0 >= n as u64, "{before:#}");
    assert_eq!(lost0, 0, "lost before the change: {before:#}");
    assert_eq!(c0["delivered"].as_u64(), Some(p0), "{before:#}");
    assert!(imp0.contains("delay"), "{imp0}");

    let unix_ns = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let t0 = unix_ns();
    link.change();
    // The change is applied in the emulator's loop: wait until its report shows it.
    let mut changed = link.report();
    for _ in 0..100 {
        if !changed["changed_at_unix_ns"].is_null() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        changed = link.report();
    }
    let t1 = unix_ns();
    let at = changed["changed_at_unix_ns"]
        .as_u64()
        .unwrap_or_else(|| panic!("no change stamped: {changed:#}"));
    assert!((t0..=t1).contains(&at), "stamp {at} outside {t0}..{t1}");
    // Every direction switched, not only the one that carried traffic.
    let dirs = changed["directions"].as_array().unwrap();
    assert_eq!(dirs.len(), 2, "{changed:#}");
    for d in dirs {
        let imp = d["impairment"].as_str().unwrap_or("");
        assert!(imp.starts_with("loss=1"), "{changed:#}");
    }

    link.send_datagrams(n);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let after = link.report();
    let (c1, _) = ImpairedLink::direction(&after, &a, &b);
    let (p1, lost1) = (
        c1["packets"].as_u64().unwrap(),
        c1["lost"].as_u64().unwrap(),
    );
    // The counters carried over the change, and every packet since was lost.
    assert!(p1 >= p0 + n as u64, "{after:#}");
    assert_eq!(lost1, p1 - p0, "{after:#}");
    assert_eq!(c1["delivered"].as_u64(), Some(p0), "{after:#}");
    // A second change is refused by the emulator (made once): the stamp stays.
    link.change();
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(link.report()["changed_at_unix_ns"].as_u64(), Some(at));
}

#[test]
fn the_emulator_refuses_nonsense_saying_what_is_valid() {
    let out = Command::new(release_bin("rmca-impair"))
        .args([
            "--port",
            "a:t0:10.0.0.1",
            "--port",
            "b:t1:10.0.0.2",
            "--impair",
            "loss=2",
        ])
        .output()
        .expect("run rmca-impair");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("a probability is 0 to 1"), "{err}");
    let out = Command::new(script())
        .args(["up", "1"])
        .output()
        .expect("run the script");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("N must be 2..200"));
}
