//! `rmca-bench --nodes`: one allconn job per implementation over two network-namespace nodes
//! made by bench/netns-cluster.sh. rmca-bench fails a job whose ranks did not run in the
//! namespaces it placed them in (every rank reports its own), so success means the launchers
//! really spread the ranks. The MPI peers run when installed (scripts/install-deps.sh --bench).

use std::process::Command;

use rmca_tests::{release_bin, workspace_root};

/// The cluster of this test, taken down when dropped.
struct Cluster {
    prefix: String,
    nodes: String,
}

impl Cluster {
    /// Two nodes, or None after skip_or_fail.
    fn up() -> Option<Cluster> {
        // A prefix of this process only (veth names stay under 15 bytes).
        let prefix = format!("rbt{}n", std::process::id() % 100_000);
        let script = workspace_root().join("bench/netns-cluster.sh");
        let out = Command::new("bash")
            .arg(&script)
            .args(["up", "2", &prefix])
            .output()
            .expect("run bash");
        let cluster = Cluster {
            prefix,
            nodes: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        };
        if !out.status.success() {
            rmca_test_support::skip_or_fail(format!(
                "bench/netns-cluster.sh up needs root and iproute2: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            return None;
        }
        Some(cluster)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(workspace_root().join("bench/netns-cluster.sh"))
            .args(["down", &self.prefix])
            .status();
    }
}

#[test]
fn allconn_runs_each_implementation_across_namespace_nodes() {
    let Some(cluster) = Cluster::up() else {
        return;
    };
    let out = Command::new(release_bin("rmca-bench"))
        .args([
            "allconn",
            "--procs",
            "4",
            "--runs",
            "1",
            "--json",
            "--timeout",
            "60",
        ])
        .args(["--peers", "ompi-tcp,mpich", "--nodes", &cluster.nodes])
        .output()
        .expect("run rmca-bench");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "rmca-bench --nodes failed:\n{stdout}\n{stderr}"
    );
    let measured = |config: &str| {
        stdout.lines().any(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            v["config"] == config && v["metric"] == "connect" && v["procs"] == 4
        })
    };
    assert!(measured("rmca"), "no rmca figure:\n{stdout}\n{stderr}");
    for peer in ["ompi-tcp", "mpich"] {
        // A peer that is not installed is skipped by rmca-bench, saying so: then this test
        // has not checked its placement, which under CI is a failure (scripts/install-deps.sh
        // installs both).
        if measured(peer) {
            continue;
        }
        assert!(
            stderr.contains(&format!("skipping {peer}: ")),
            "{peer} neither measured nor skipped:\n{stdout}\n{stderr}"
        );
        rmca_test_support::skip_or_fail(format!(
            "{peer} is not installed: its placement across nodes was not checked ({stderr})"
        ));
    }
}
