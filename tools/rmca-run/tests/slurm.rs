//! The probe under a real Slurm started by these tests, under `srun --mpi=pmi2` and under
//! `srun --mpi=pmix` (Slurm's `mpi_pmix_v4` with OpenPMIx): on a single node, and on a
//! cluster of eight nodes (slurmctld plus one slurmd per node), jobs of 2 to 8 nodes and up to
//! 32 ranks. Every rank checks its rank,
//! size, local rank, node and node count against Slurm's task variables, and every other
//! rank's business card exchanged through the modex. An abort ends the step (under both), and
//! rmca-run runs a job across the same node namespaces through a launch agent.
//!
//! The clusters come from [`rmca_test_support::slurm`] (what they need, and how they are kept
//! private); without root or Slurm the tests skip themselves with a message, or fail under
//! `RMCA_TESTS_REQUIRE=1` / `CI=true`.

use std::process::{Command, Stdio};
use std::time::Instant;

use rmca_test_support::skip_or_fail;
use rmca_test_support::slurm::{has_pmix, prerequisites, start_nodes, start_single, stop, Cluster};

const PROBE: &str = env!("CARGO_BIN_EXE_rmca-rte-probe");
const RUN: &str = env!("CARGO_BIN_EXE_rmca-run");

/// Run the probe as `ranks` tasks under `srun --mpi=<mpi> <srun_args>` and check every rank's
/// report.
fn run_probe(cl: &Cluster, mpi: &str, launcher: &str, srun_args: &[&str], ranks: u32) {
    let m = format!("mkslurm{}{mpi}", std::process::id());
    let what = format!("srun --mpi={mpi} -n {ranks} {}", srun_args.join(" "));
    let t0 = Instant::now();
    let out = cl
        .cmd("srun")
        .args([
            &format!("--mpi={mpi}"),
            "-n",
            &ranks.to_string(),
            "--time=2",
        ])
        .args(srun_args)
        .args([
            PROBE,
            "--marker",
            &m,
            "--card-size",
            "3000",
            "--expect-slurm",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("srun");
    eprintln!("{what} took {:?}", t0.elapsed());
    remove_probe_shm(&m);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what}:\n{stdout}\n{stderr}");
    let launcher = format!("launcher {launcher} ");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.contains("cards ok") && l.contains(&launcher))
            .count(),
        ranks as usize,
        "{what}:\n{stdout}\n{stderr}"
    );
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.contains("matches slurm"))
            .count(),
        ranks as usize,
        "{what}:\n{stdout}\n{stderr}"
    );
    assert!(
        !stderr.contains("error"),
        "{what}: slurmstepd complained:\n{stderr}"
    );
    for l in stdout.lines().filter(|l| l.contains("cards ok")) {
        eprintln!("  {l}");
    }
}

/// Remove the shm files of the probe's job named with `marker`: Slurm does not know rmca's shm
/// naming, so a step it ends leaves them behind.
fn remove_probe_shm(marker: &str) {
    if let Ok(d) = std::fs::read_dir("/dev/shm") {
        for e in d.flatten() {
            if e.file_name().to_string_lossy().contains(marker) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Rank 1 of a two-node step calls abort while the others wait in a fence: Slurm ends the
/// whole step then, not at its time limit.
fn abort_ends_the_step(cl: &Cluster, mpi: &str) {
    let m = format!("mkslurmabort{}{mpi}", std::process::id());
    let t0 = Instant::now();
    let out = cl
        .cmd("srun")
        .args([&format!("--mpi={mpi}"), "-N", "2", "-n", "4", "--time=1"])
        .args([
            PROBE, "--marker", &m, "--mode", "abort", "--who", "1", "--code", "7",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("srun");
    eprintln!("abort under --mpi={mpi} took {:?}", t0.elapsed());
    remove_probe_shm(&m);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "--mpi={mpi}:\n{stdout}\n{stderr}");
    assert_eq!(
        stdout.lines().filter(|l| l.contains("cards ok")).count(),
        4,
        "--mpi={mpi}: every rank got past init:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("aborted") && !stderr.contains("TIME LIMIT"),
        "--mpi={mpi}: the abort did not end the step:\n{stderr}"
    );
}

/// rmca-run in node 0's namespace starts two ranks per node over every node namespace through
/// a launch agent, its PMI server on node 0's address, in blocks.
fn rmca_run_across_the_same_nodes(cl: &Cluster) {
    let m = format!("mkslurmrun{}", std::process::id());
    let hosts: Vec<&str> = cl.nodes.iter().map(|(ns, _)| ns.as_str()).collect();
    let ranks = 2 * hosts.len() as u32;
    let out = Command::new("nsenter")
        .arg(format!("--net=/var/run/netns/{}", cl.nodes[0].0))
        .args([RUN, "-n", &ranks.to_string(), "--hosts", &hosts.join(",")])
        .args([
            "--launch-agent",
            "nsenter --net=/var/run/netns/{node} {cmd}",
        ])
        .args(["--pmi-addr", &cl.nodes[0].1, "--timeout", "60"])
        .args([PROBE, "--marker", &m, "--card-size", "3000"])
        .stdin(Stdio::null())
        .output()
        .expect("rmca-run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rmca-run:\n{stdout}\n{stderr}");
    for r in 0..ranks {
        let (node, first) = (r / 2, r / 2 * 2);
        let want = format!(
            "rank {r} of {ranks}: cards ok, node {node} local [{first},{}] ",
            first + 1
        );
        assert!(stdout.contains(&want), "no {want:?} in\n{stdout}\n{stderr}");
    }
}

#[test]
fn probe_runs_under_slurm_srun_mpi_pmi2_and_pmix() {
    if !prerequisites() {
        return;
    }
    let cl = match start_single() {
        Ok(c) => c,
        Err(e) => {
            skip_or_fail(format!("could not start a single-node Slurm: {e}"));
            return;
        }
    };
    run_probe(&cl, "pmi2", "Pmi2", &[], 4);
    if has_pmix(&cl) {
        run_probe(&cl, "pmix", "Pmix", &[], 4);
    }
    stop(cl);
}

#[test]
fn probe_runs_across_slurm_nodes_under_pmi2_and_pmix() {
    if !prerequisites() {
        return;
    }
    let cl = match start_nodes(8, 2) {
        Ok(c) => c,
        Err(e) => {
            skip_or_fail(format!("could not start an eight-node Slurm: {e}"));
            return;
        }
    };
    let pmix = has_pmix(&cl);
    // Two nodes in blocks (2+2), then four nodes cyclic and in blocks of uneven size, then all
    // eight oversubscribed: node identity and local ranks must follow wherever Slurm put each
    // task.
    for (mpi, launcher) in [("pmi2", "Pmi2"), ("pmix", "Pmix")] {
        if mpi == "pmix" && !pmix {
            continue;
        }
        run_probe(&cl, mpi, launcher, &["-N", "2"], 4);
        run_probe(&cl, mpi, launcher, &["-N", "4", "--distribution=cyclic"], 8);
        run_probe(&cl, mpi, launcher, &["-N", "4"], 5);
        // All eight nodes, 32 ranks on 16 CPUs (oversubscribed).
        run_probe(&cl, mpi, launcher, &["-N", "8", "--overcommit"], 32);
        abort_ends_the_step(&cl, mpi);
    }
    rmca_run_across_the_same_nodes(&cl);
    stop(cl);
}
