//! An out-of-tree reliability PML, end to end, as docs/reliability-pml.md tells a researcher to
//! write one: `examples/out-of-tree-pml` (pml-sw, outside the workspace, built against
//! `rmca-framework` by path) is built with cargo, passes its own unit and property tests (the
//! sans-IO protocol over a simulated lossy link), and its `librmca_pml_sw.so` is loaded from
//! `--mca component_path DIR` and selected with `--mca pml sw` for 2-rank jobs over btl-ud
//! (soft provider) with loss, duplication, reordering and corruption injected. `stress` checks
//! that every message arrives exactly once, in order, with the right size, tag and bytes; the
//! job's profile shows the faults happened and that the plugin retransmitted and dropped what
//! it had to. Bad input: a misspelled PML name, and a plugin whose framework fingerprint is
//! not the host's, each fail with a message naming what was wrong. Nothing here is skipped.

use std::path::PathBuf;

use rmca_tests::{counter, plugin, run_job, take_profile, Job};

/// Run `cargo <args>` on the plugin crate (see [`rmca_tests::plugin::cargo`]).
fn cargo(args: &[&str]) -> String {
    plugin::cargo("out-of-tree-pml", args)
}

/// A fresh directory for `component_path` holding one plugin file, removed on drop.
struct PluginDir(PathBuf);

impl PluginDir {
    fn with(what: &str, bytes: &[u8]) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "rmca-out-of-tree-pml-{what}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the plugin directory");
        std::fs::write(dir.join("librmca_pml_sw.so"), bytes).expect("write the plugin");
        Self(dir)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for PluginDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Build the plugin (after its own tests) once for every test of this file.
fn plugin() -> &'static [u8] {
    static SO: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    SO.get_or_init(|| {
        let tested = cargo(&["test", "--release", "--locked"]);
        for t in [
            "exactly_once_in_order_over_any_faulty_link ... ok",
            "every_single_bit_flip_is_caught ... ok",
            "messages_of_every_shape_arrive_once_intact_over_a_faulty_wire ... ok",
        ] {
            assert!(
                tested.contains(t),
                "the plugin's property test did not run ({t}):\n{tested}"
            );
        }
        cargo(&["build", "--release", "--locked", "--lib"]);
        let so = plugin::target_dir().join("release/librmca_pml_sw.so");
        std::fs::read(&so).unwrap_or_else(|e| panic!("cargo built no {}: {e}", so.display()))
    })
}

/// Faults on every UD datagram (btl-ud's soft provider), and the plugin selected.
const LOSSY_UD: &[(&str, &str)] = &[
    ("pml", "sw"),
    ("btl", "ud,self"),
    ("btl_ud_provider", "soft"),
    ("btl_ud_fault_drop", "0.05"),
    ("btl_ud_fault_duplicate", "0.02"),
    ("btl_ud_fault_reorder", "0.05"),
    ("btl_ud_fault_corrupt", "0.005"),
    ("btl_ud_fault_seed", "11"),
];

/// The `messages=N bytes=B errors=E ...` lines of stress, as (messages, errors).
fn stress_lines(stdout: &str) -> Vec<(u64, u64)> {
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
            (field("messages="), field("errors="))
        })
        .collect()
}

#[test]
fn plugin_pml_delivers_exactly_once_over_lossy_ud_and_retransmits() {
    let dir = PluginDir::with("ok", plugin());
    let json = std::env::temp_dir().join(format!("rmca-oot-pml-{}.json", std::process::id()));
    let json_s = json.to_str().expect("utf-8 temp path").to_owned();
    let mut mca = LOSSY_UD.to_vec();
    mca.extend([
        ("component_path", dir.path()),
        ("profile", "1"),
        ("profile_json", json_s.as_str()),
    ]);
    // Mixed sizes up to 256 KiB (several hundred fragments for the largest), blocking,
    // synchronous and non-blocking sends, tagged and ANY_TAG receives: every byte, size, tag
    // and the order are checked by the receiver.
    let total = 3000u64;
    let total_s = total.to_string();
    let out = run_job(&Job {
        ranks: 2,
        program: "stress",
        args: &["--seed", "5", "--messages", &total_s, "--max-size", "256k"],
        mca: &mca,
        timeout_s: 180,
    });
    let lines = stress_lines(&out.stdout);
    assert_eq!(lines.len(), 2, "one line per rank:\n{}", out.text());
    assert!(
        lines.iter().all(|&(_, errors)| errors == 0),
        "a rank received a wrong, missing or duplicated message:\n{}",
        out.text()
    );
    assert_eq!(
        lines.iter().map(|l| l.0).sum::<u64>(),
        total,
        "every message sent arrived once:\n{}",
        out.text()
    );
    assert!(
        out.success(),
        "stress over pml sw on lossy ud failed:\n{}",
        out.text()
    );
    let profile = take_profile(&json, &out);
    // The faults happened (btl-ud's counters) and the plugin repaired them (its own).
    for c in [
        "btl.ud.faults_dropped",
        "btl.ud.faults_duplicated",
        "btl.ud.faults_reordered",
        "btl.ud.faults_corrupted",
        "pml.sw.retransmissions",
        "pml.sw.duplicates",
        "pml.sw.out_of_order",
        "pml.sw.crc_failures",
    ] {
        assert!(counter(&profile, c) > 0, "{c} is 0: {profile:#}");
    }
    assert!(
        counter(&profile, "pml.sw.frags_sent") > total,
        "{profile:#}"
    );
}

#[test]
fn plugin_pml_passes_p2p_checks_over_lossy_ud() {
    let dir = PluginDir::with("p2p", plugin());
    let mut mca = LOSSY_UD.to_vec();
    mca.push(("component_path", dir.path()));
    // Matching semantics through the framework's engine: order, wildcards, probes,
    // truncation, sendrecv.
    for case in ["ordering", "truncation", "sendrecv"] {
        let out = run_job(&Job {
            ranks: 2,
            program: "p2p_check",
            args: &[case],
            mca: &mca,
            timeout_s: 120,
        });
        assert!(
            out.success() && out.stdout.contains(&format!("ok {case}")),
            "p2p_check {case} over pml sw on lossy ud failed:\n{}",
            out.text()
        );
    }
}

#[test]
fn a_dead_path_fails_the_requests_with_the_reason_and_the_plugin_logs_it() {
    let dir = PluginDir::with("dead", plugin());
    // Each rank's ud datagrams vanish after its 50th: fragments stay unacknowledged, and after
    // pml_sw_peer_timeout_ms a rank's requests to its peer fail, naming why.
    let out = run_job(&Job {
        ranks: 2,
        program: "stress",
        args: &["--messages", "200", "--max-size", "1k"],
        mca: &[
            ("component_path", dir.path()),
            ("pml", "sw"),
            ("btl", "ud,self"),
            ("btl_ud_provider", "soft"),
            ("btl_ud_fault_blackhole_after", "50"),
            ("pml_sw_peer_timeout_ms", "1000"),
        ],
        timeout_s: 60,
    });
    assert!(
        !out.success(),
        "a job over a dead path succeeded:\n{}",
        out.text()
    );
    assert!(
        out.stderr.contains("unreachable: fragment")
            && out.stderr.contains("unacknowledged")
            && out.stderr.contains("pml_sw_peer_timeout_ms"),
        "the failed request does not say why:\n{}",
        out.text()
    );
    // The plugin's own tracing events reach the host's subscriber (default level: warn).
    assert!(
        out.stderr.contains("rmca_pml_sw") && out.stderr.contains("pml-sw: peer failed"),
        "the plugin's warning is missing from the job's log:\n{}",
        out.text()
    );
}

#[test]
fn a_misspelled_pml_or_a_plugin_of_another_framework_is_a_clear_error() {
    let so = plugin();
    let good = PluginDir::with("name", so);
    let run = |dir: &PluginDir, pml: &str| {
        run_job(&Job {
            ranks: 2,
            program: "p2p_check",
            args: &["ordering"],
            mca: &[
                ("component_path", dir.path()),
                ("pml", pml),
                ("btl", "self,shm"),
            ],
            timeout_s: 60,
        })
    };
    let out = run(&good, "sww");
    assert!(!out.success(), "pml sww ran:\n{}", out.text());
    // The loaded plugin is among the valid names, and suggested.
    assert!(
        out.stderr.contains("unknown pml component 'sww'")
            && out.stderr.contains(", sw;")
            && out.stderr.contains("did you mean 'sw'"),
        "the error does not name the unknown PML and the plugin's:\n{}",
        out.text()
    );
    // The same plugin as if built against another framework source: the last hex digit of the
    // framework fingerprint in its descriptor changed (what any edit under framework/src does).
    let stale = PluginDir::with("stale", &with_other_fingerprint(so));
    let out = run(&stale, "sw");
    assert!(!out.success(), "a mismatched plugin ran:\n{}", out.text());
    assert!(
        out.stderr.contains("librmca_pml_sw.so")
            && out.stderr.contains("rmca-framework")
            && out.stderr.contains("rebuild the plugin"),
        "the refusal does not name the file, the crate and the fix:\n{}",
        out.text()
    );
}

/// `so` with the framework fingerprint of its API version (`0.1.0+<16 hex>;tracing-core=...`)
/// changed in its last digit, wherever it occurs.
fn with_other_fingerprint(so: &[u8]) -> Vec<u8> {
    let key = b";tracing-core=";
    let mut out = so.to_vec();
    let mut patched = 0;
    for i in 17..so.len().saturating_sub(key.len()) {
        let fingerprint = &so[i - 16..i];
        if &so[i..i + key.len()] == key
            && so[i - 17] == b'+'
            && fingerprint.iter().all(u8::is_ascii_hexdigit)
        {
            out[i - 1] = if so[i - 1] == b'0' { b'1' } else { b'0' };
            patched += 1;
        }
    }
    assert!(patched > 0, "no framework API version found in the plugin");
    out
}
