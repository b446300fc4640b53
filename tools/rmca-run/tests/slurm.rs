//! The probe under a real single-node Slurm, started by this test: one job under
//! `srun --mpi=pmi2` and one under `srun --mpi=pmix` (Slurm's `mpi_pmix_v4` with OpenPMIx).
//! Every rank checks its rank, size, local rank and node against Slurm's task variables and
//! every other rank's business card exchanged through the modex.
//!
//! Needs root, iproute2, nsenter, Debian's `slurmctld slurmd slurm-client` and `libpmix2`
//! (`scripts/install-deps.sh`); without them it skips itself with a message, or fails under
//! `RMCA_TESTS_REQUIRE=1` / `CI=true` ([`rmca_test_support::skip_or_fail`]). The daemons use
//! `auth/none`, so they run inside a private network namespace that has only a loopback
//! interface: nothing outside the test can reach them. They are killed and
//! the namespace deleted when the test ends, whatever happens.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rmca_test_support::skip_or_fail;

const PROBE: &str = env!("CARGO_BIN_EXE_rmca-rte-probe");

fn which(p: &str) -> Option<String> {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(p))
        .find(|f| f.is_file())
        .map(|f| f.to_string_lossy().into_owned())
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

struct Cluster {
    ns: String,
    dir: PathBuf,
    daemons: Vec<Child>,
}

/// Pids of processes living in the network namespace whose inode is `ino`.
fn procs_in_netns(ino: u64) -> Vec<u32> {
    let want = format!("net:[{ino}]");
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(link) = std::fs::read_link(e.path().join("ns/net")) else {
            continue;
        };
        // Zombies have no namespace link left; anything listed here is alive.
        if link.to_string_lossy() == want {
            v.push(pid);
        }
    }
    v
}

fn netns_inode(ns: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/var/run/netns/{ns}"))
        .map(|m| m.ino())
        .ok()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let ino = netns_inode(&self.ns);
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        // slurmd forks daemonised slurmstepd processes that can outlive it (retrying to report
        // to the dead slurmd): everything in our private namespace was started by this test.
        if let Some(ino) = ino {
            let t0 = Instant::now();
            loop {
                let left = procs_in_netns(ino);
                if left.is_empty() || t0.elapsed() > Duration::from_secs(10) {
                    break;
                }
                for pid in left {
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Cluster {
    fn cmd(&self, prog: &str) -> Command {
        // nsenter (not `ip netns exec`, which remounts /sys and hides the cgroup tree that
        // slurmd needs) joins only the network namespace.
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/var/run/netns/{}", self.ns))
            .arg(prog)
            .env("SLURM_CONF", self.dir.join("slurm.conf"));
        c
    }
}

fn start() -> Result<Cluster, String> {
    let id = std::process::id();
    let ns = format!("rmcaS{}", id % 100_000);
    let dir = std::env::temp_dir().join(format!("rmca-slurm-{id}"));
    if !Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
    {
        return Err("cannot create a network namespace".into());
    }
    let mut cl = Cluster {
        ns,
        dir: dir.clone(),
        daemons: Vec::new(),
    };
    // Slurm resolves "127.0.0.1" with AI_ADDRCONFIG, which needs some non-loopback IPv4
    // address: give the namespace a veth pair of its own (both ends inside it).
    let (v0, v1) = (
        format!("rs0{}", id % 100_000),
        format!("rs1{}", id % 100_000),
    );
    let net = 10 + id % 200;
    for args in [
        vec!["-n", &cl.ns, "link", "set", "lo", "up"],
        vec![
            "-n", &cl.ns, "link", "add", &v0, "type", "veth", "peer", "name", &v1,
        ],
        vec!["-n", &cl.ns, "link", "set", &v0, "up"],
        vec!["-n", &cl.ns, "link", "set", &v1, "up"],
    ] {
        let _ = Command::new("ip").args(&args).status();
    }
    let addr = format!("10.{net}.251.1/24");
    let _ = Command::new("ip")
        .args(["-n", &cl.ns, "addr", "add", &addr, "dev", &v0])
        .status();
    for sub in ["state", "spool", "log", "tmp"] {
        std::fs::create_dir_all(dir.join(sub)).map_err(|e| e.to_string())?;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let d = dir.display();
    let conf = format!(
        "ClusterName=rmcatest\n\
         SlurmctldHost={host}(127.0.0.1)\n\
         SlurmctldPort=46817\nSlurmdPort=46818\n\
         AuthType=auth/none\nCredType=cred/none\n\
         SlurmUser=root\nSlurmdUser=root\n\
         StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
         SlurmctldPidFile={d}/ctld.pid\nSlurmdPidFile={d}/d.pid\n\
         SlurmctldLogFile={d}/log/ctld.log\nSlurmdLogFile={d}/log/d.log\n\
         ProctrackType=proctrack/pgid\nTaskPlugin=task/none\nSwitchType=switch/none\n\
         MpiDefault=none\nSchedulerType=sched/builtin\n\
         SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
         SlurmdParameters=config_overrides\nReturnToService=2\n\
         JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n\
         TmpFS={d}/tmp\n\
         NodeName={host} NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN\n\
         PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
    );
    std::fs::write(dir.join("slurm.conf"), conf).map_err(|e| e.to_string())?;
    let conf_path = dir.join("slurm.conf").to_string_lossy().into_owned();
    let ctld = cl
        .cmd("slurmctld")
        .args(["-D", "-f", &conf_path])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    cl.daemons.push(ctld);
    let slurmd = cl
        .cmd("slurmd")
        .args(["-D", "-f", &conf_path, "-N", &host])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    cl.daemons.push(slurmd);
    // Wait (bounded) for the node to become schedulable.
    let t0 = Instant::now();
    loop {
        let out = cl
            .cmd("sinfo")
            .args(["-h", "-o", "%t"])
            .output()
            .map_err(|e| e.to_string())?;
        let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if state == "idle" {
            eprintln!("slurm up after {:?}", t0.elapsed());
            return Ok(cl);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let tail = |f: &str| {
                let log = std::fs::read_to_string(dir.join("log").join(f)).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                lines[lines.len().saturating_sub(10)..].join("\n")
            };
            return Err(format!(
                "node never became idle (state {state:?})\nslurmctld log:\n{}\nslurmd log:\n{}",
                tail("ctld.log"),
                tail("d.log")
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Run the probe as `ranks` tasks under `srun --mpi=<mpi>` and check every rank's report.
fn run_probe(cl: &Cluster, mpi: &str, launcher: &str, ranks: u32) {
    let m = format!("mkslurm{}{mpi}", std::process::id());
    let t0 = Instant::now();
    let out = cl
        .cmd("srun")
        .args([
            &format!("--mpi={mpi}"),
            "-n",
            &ranks.to_string(),
            "--time=2",
        ])
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
    eprintln!("srun --mpi={mpi} took {:?}", t0.elapsed());
    // Slurm does not know our shm naming: remove the probe's files ourselves.
    if let Ok(d) = std::fs::read_dir("/dev/shm") {
        for e in d.flatten() {
            if e.file_name().to_string_lossy().contains(&m) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "--mpi={mpi}:\n{stdout}\n{stderr}");
    let launcher = format!("launcher {launcher} ");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.contains("cards ok") && l.contains(&launcher))
            .count(),
        ranks as usize,
        "--mpi={mpi}:\n{stdout}\n{stderr}"
    );
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.contains("matches slurm"))
            .count(),
        ranks as usize,
        "--mpi={mpi}:\n{stdout}\n{stderr}"
    );
    assert!(
        !stderr.contains("error"),
        "--mpi={mpi}: slurmstepd complained:\n{stderr}"
    );
}

#[test]
fn probe_runs_under_slurm_srun_mpi_pmi2_and_pmix() {
    if !is_root() {
        skip_or_fail("needs root (to start Slurm daemons in a private network namespace)");
        return;
    }
    let missing: Vec<&str> = [
        ("ip", "iproute2"),
        ("nsenter", "util-linux"),
        ("slurmctld", "slurmctld"),
        ("slurmd", "slurmd"),
        ("srun", "slurm-client"),
        ("sinfo", "slurm-client"),
    ]
    .iter()
    .filter(|(prog, _)| which(prog).is_none())
    .map(|&(_, pkg)| pkg)
    .collect();
    if !missing.is_empty() {
        skip_or_fail(format!(
            "Slurm or its tools are not installed (Debian packages: {}; scripts/install-deps.sh \
             installs them)",
            missing.join(" ")
        ));
        return;
    }
    let cl = match start() {
        Ok(c) => c,
        Err(e) => {
            skip_or_fail(format!("could not start a single-node Slurm: {e}"));
            return;
        }
    };
    run_probe(&cl, "pmi2", "Pmi2", 4);
    let plugins = cl
        .cmd("srun")
        .arg("--mpi=list")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
        })
        .unwrap_or_default();
    if plugins.contains("pmix") {
        run_probe(&cl, "pmix", "Pmix", 4);
    } else {
        skip_or_fail(format!(
            "this Slurm has no pmix plugin (srun --mpi=list: {plugins:?}; Debian package \
             slurm-wlm-basic-plugins)"
        ));
    }
    let ino = netns_inode(&cl.ns).expect("our namespace");
    drop(cl);
    assert!(
        procs_in_netns(ino).is_empty(),
        "Slurm processes outlived the test"
    );
}
