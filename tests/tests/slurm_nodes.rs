//! rmca jobs across two nodes of a private Slurm cluster (`rmca_test_support::slurm`: one
//! slurmd per network namespace on a bridge), under `srun --mpi=pmix` and `--mpi=pmi2`, two
//! ranks per node. Node identity comes from Slurm's placement: shm joins only the ranks of one
//! node (all namespaces share this machine's /dev/shm, so shm would physically work between
//! them, and only the node identity says otherwise), and a job with a network BTL between the
//! nodes runs: pml dr over ud (soft provider, each node's own address) between nodes, shm
//! inside them; and the default components with no setting at all (ob1, shm inside a node, rc
//! between nodes on each node's own address). Without root or Slurm the test skips itself, or fails under
//! `RMCA_TESTS_REQUIRE=1` / `CI=true`.

use std::path::Path;
use std::process::{Output, Stdio};

use rmca_test_support::skip_or_fail;
use rmca_test_support::slurm::{has_pmix, prerequisites, start_nodes, stop, Cluster};
use rmca_tests::release_bin;

/// `ring 20` as 4 tasks on 2 nodes under `srun --mpi=<mpi>`, with `mca` as environment
/// settings; each task first sets `btl_ud_if_addr` to its node's own address.
fn srun_ring(cl: &Cluster, mpi: &str, ring: &Path, mca: &[(&str, &str)]) -> Output {
    // rn<i> has the address of node i; Slurm names the task's node in SLURMD_NODENAME.
    let (_, addr0) = &cl.nodes[0];
    let prefix = addr0
        .rsplit_once('.')
        .map(|(p, _)| p)
        .expect("IPv4 address");
    let script = format!(
        "RMCA_MCA_btl_ud_if_addr={prefix}.$(( ${{SLURMD_NODENAME#rn}} + 1 )) exec '{}' 20",
        ring.display()
    );
    let mut cmd = cl.cmd("srun");
    cmd.args([&format!("--mpi={mpi}"), "-N", "2", "-n", "4"])
        .args(["--ntasks-per-node=2", "--time=2", "sh", "-c", &script])
        .stdin(Stdio::null());
    for (k, v) in mca {
        cmd.env(format!("RMCA_MCA_{k}"), v);
    }
    let t0 = std::time::Instant::now();
    let out = cmd.output().expect("srun");
    eprintln!("srun --mpi={mpi} {mca:?}: {:?}", t0.elapsed());
    out
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn ring_spans_slurm_nodes_with_shm_inside_and_ud_between() {
    if !prerequisites() {
        return;
    }
    let ring = release_bin("ring");
    // tests/c/p2p.c compiled with rmca's wrapper (libmpi.so is built with the release
    // binaries: `cargo build --release --workspace --bins --examples --lib`).
    let c_p2p = std::env::temp_dir().join(format!("rmca-slurm-p2p-{}", std::process::id()));
    let cc = std::process::Command::new(release_bin("mpicc"))
        .arg("-O1")
        .arg(rmca_tests::workspace_root().join("tests/c/p2p.c"))
        .arg("-o")
        .arg(&c_p2p)
        .output()
        .expect("run mpicc");
    assert!(cc.status.success(), "mpicc tests/c/p2p.c: {}", text(&cc));
    let cl = match start_nodes(2, 4) {
        Ok(c) => c,
        Err(e) => {
            skip_or_fail(format!("could not start a two-node Slurm: {e}"));
            return;
        }
    };
    let pmix = has_pmix(&cl);
    for mpi in ["pmi2", "pmix"] {
        if mpi == "pmix" && !pmix {
            continue;
        }
        // shm and self only: ranks 2 and 3 are on the other node, and nothing reaches them.
        let out = srun_ring(&cl, mpi, &ring, &[("btl", "shm,self")]);
        let t = text(&out);
        assert!(!out.status.success(), "--mpi={mpi}: {t}");
        // Some rank of each node says so (a peer may fail first, on a segment already gone).
        let says = |ranks: [u32; 2], others: &str| {
            ranks
                .iter()
                .any(|r| t.contains(&format!("rank {r} cannot reach rank(s) {others}:")))
        };
        assert!(
            says([0, 1], "2, 3") && says([2, 3], "0, 1"),
            "--mpi={mpi}: shm must not join ranks of different Slurm nodes: {t}"
        );
        // A network BTL between the nodes: the ring runs.
        let out = srun_ring(
            &cl,
            mpi,
            &ring,
            &[
                ("pml", "dr"),
                ("btl", "ud,shm,self"),
                ("btl_ud_provider", "soft"),
            ],
        );
        let t = text(&out);
        assert!(out.status.success(), "--mpi={mpi}: {t}");
        assert!(
            t.contains("ring: 20 laps over 4 ranks OK"),
            "--mpi={mpi}: {t}"
        );
        // The default components, with no setting at all (not even the addresses): ob1, shm
        // inside each node and rc between them, as the profile's route table shows.
        let mut cmd = cl.cmd("srun");
        cmd.args([&format!("--mpi={mpi}"), "-N", "2", "-n", "4"])
            .args(["--ntasks-per-node=2", "--time=2"])
            .arg(&ring)
            .arg("20")
            .env("RMCA_MCA_profile", "1")
            .stdin(Stdio::null());
        let out = cmd.output().expect("srun");
        let t = text(&out);
        assert!(
            out.status.success() && t.contains("ring: 20 laps over 4 ranks OK"),
            "--mpi={mpi}, default components: {t}"
        );
        let route = |btls: &str, pairs: usize| {
            t.lines().any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w == [btls, &pairs.to_string()]
            })
        };
        assert!(
            t.contains("pml \"ob1\"") && route("rc", 8) && route("shm", 4),
            "--mpi={mpi}: default components across Slurm nodes: ob1, rc between nodes: {t}"
        );
        // An MPI program in C (tests/c/p2p.c, built with rmca's mpicc) the same way.
        let mut cmd = cl.cmd("srun");
        cmd.args([&format!("--mpi={mpi}"), "-N", "2", "-n", "4"])
            .args(["--ntasks-per-node=2", "--time=2"])
            .arg(&c_p2p)
            .stdin(Stdio::null());
        let out = cmd.output().expect("srun");
        let t = text(&out);
        assert!(
            out.status.success() && t.contains("ok p2p"),
            "--mpi={mpi}: the C program across Slurm nodes: {t}"
        );
    }
    stop(cl);
    let _ = std::fs::remove_file(&c_p2p);
}
