//! A private Slurm for tests: one node, or a cluster of nodes (slurmctld plus one slurmd per
//! node), started and stopped by the test.
//!
//! Needs root, iproute2, nsenter and unshare, and Debian's `slurmctld slurmd slurm-client`
//! ([`prerequisites`] says what is missing through [`crate::skip_or_fail`]). The daemons use
//! `auth/none`, so they run inside private network namespaces that nothing outside the test
//! can reach: the single node has only its own veth pair; each node of a cluster is a
//! namespace with its own address on a bridge (in a namespace of its own), its own host name
//! (UTS namespace, as real nodes have) and its own Slurm `TmpFS` (a mount namespace: Slurm's
//! PMIx plugin names its directory there after the job alone, so two nodes on one machine
//! would share it). Node `i` is named `rn<i>`; its address is the second field of
//! [`Cluster::nodes`]. Everything is killed and the namespaces deleted when the [`Cluster`]
//! is dropped, whatever happens.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::skip_or_fail;

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

/// Whether this machine can run the tests; if not, says why (skip or fail).
pub fn prerequisites() -> bool {
    if !is_root() {
        skip_or_fail("needs root (to start Slurm daemons in private network namespaces)");
        return false;
    }
    let missing: Vec<&str> = [
        ("ip", "iproute2"),
        ("nsenter", "util-linux"),
        ("unshare", "util-linux"),
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
        return false;
    }
    true
}

fn ip(args: &[&str]) -> Result<(), String> {
    let st = Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("ip: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("`ip {}` failed", args.join(" ")))
    }
}

/// A private Slurm: its daemons, network namespaces and files, all removed on drop.
pub struct Cluster {
    /// Our network namespaces; the first holds slurmctld and runs srun.
    pub namespaces: Vec<String>,
    /// Each node's network namespace and address (empty for the single node).
    pub nodes: Vec<(String, String)>,
    dir: PathBuf,
    daemons: Vec<Child>,
}

/// Pids of processes living in the network namespace whose inode is `ino`.
pub fn procs_in_netns(ino: u64) -> Vec<u32> {
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
        let inodes = self.inodes();
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        // slurmd forks daemonised slurmstepd processes that can outlive it (retrying to report
        // to the dead slurmd): everything in our private namespaces was started by this test.
        let t0 = Instant::now();
        loop {
            let left: Vec<u32> = inodes.iter().flat_map(|&i| procs_in_netns(i)).collect();
            if left.is_empty() || t0.elapsed() > Duration::from_secs(10) {
                break;
            }
            for pid in left {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Cluster {
    fn new(dir: PathBuf) -> Self {
        Self {
            namespaces: Vec::new(),
            nodes: Vec::new(),
            dir,
            daemons: Vec::new(),
        }
    }

    /// Create network namespace `ns`, owned (and deleted) by this cluster.
    fn add_netns(&mut self, ns: &str) -> Result<(), String> {
        ip(&["netns", "add", ns]).map_err(|e| {
            format!("{e}: network namespaces are not available here (a container without CAP_SYS_ADMIN?)")
        })?;
        self.namespaces.push(ns.to_string());
        ip(&["-n", ns, "link", "set", "lo", "up"])
    }

    /// Inodes of our network namespaces (to look for leftover processes after a drop).
    pub fn inodes(&self) -> Vec<u64> {
        self.namespaces
            .iter()
            .filter_map(|n| netns_inode(n))
            .collect()
    }

    /// `prog` in the first namespace, with this cluster's `SLURM_CONF`.
    pub fn cmd(&self, prog: &str) -> Command {
        // nsenter (not `ip netns exec`, which remounts /sys and hides the cgroup tree that
        // slurmd needs) joins only the network namespace.
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/var/run/netns/{}", self.namespaces[0]))
            .arg(prog)
            .env("SLURM_CONF", self.conf());
        c
    }

    fn conf(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }

    /// Write slurm.conf for `nodes` (name, address, CPUs), slurmctld at `ctld_addr`.
    fn write_conf(&self, ctld_addr: &str, nodes: &[(String, String, u32)]) -> Result<(), String> {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "localhost".into());
        let d = self.dir.display();
        // %n: each slurmd of the cluster keeps its own spool, pid file and log.
        let mut conf = format!(
            "ClusterName=rmcatest\n\
             SlurmctldHost={host}({ctld_addr})\n\
             SlurmctldPort=46817\nSlurmdPort=46818\n\
             AuthType=auth/none\nCredType=cred/none\n\
             SlurmUser=root\nSlurmdUser=root\n\
             StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool/%n\n\
             SlurmctldPidFile={d}/ctld.pid\nSlurmdPidFile={d}/d-%n.pid\n\
             SlurmctldLogFile={d}/log/ctld.log\nSlurmdLogFile={d}/log/d-%n.log\n\
             ProctrackType=proctrack/pgid\nTaskPlugin=task/none\nSwitchType=switch/none\n\
             MpiDefault=none\nSchedulerType=sched/builtin\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
             SlurmdParameters=config_overrides\nReturnToService=2\n\
             JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n\
             TmpFS={d}/tmp\n"
        );
        for (name, addr, cpus) in nodes {
            conf += &format!("NodeName={name} NodeAddr={addr} CPUs={cpus} State=UNKNOWN\n");
        }
        conf += "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
        for sub in ["state", "spool", "log", "tmp"] {
            std::fs::create_dir_all(self.dir.join(sub)).map_err(|e| e.to_string())?;
        }
        for (name, _, _) in nodes {
            std::fs::create_dir_all(self.dir.join("spool").join(name))
                .map_err(|e| e.to_string())?;
        }
        std::fs::write(self.conf(), conf).map_err(|e| e.to_string())
    }

    fn start_slurmctld(&mut self) -> Result<(), String> {
        let conf = self.conf();
        let ctld = self
            .cmd("slurmctld")
            .arg("-D")
            .arg("-f")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        self.daemons.push(ctld);
        Ok(())
    }

    /// Wait (bounded) until `nodes` nodes are schedulable.
    fn wait_idle(&self, nodes: usize) -> Result<(), String> {
        let t0 = Instant::now();
        loop {
            let out = self
                .cmd("sinfo")
                .args(["-h", "-N", "-o", "%t"])
                .output()
                .map_err(|e| e.to_string())?;
            let states = String::from_utf8_lossy(&out.stdout).into_owned();
            if states.lines().filter(|l| l.trim() == "idle").count() == nodes {
                eprintln!("slurm with {nodes} node(s) up after {:?}", t0.elapsed());
                return Ok(());
            }
            if t0.elapsed() > Duration::from_secs(60) {
                let tail = |f: &Path| {
                    let log = std::fs::read_to_string(f).unwrap_or_default();
                    let lines: Vec<&str> = log.lines().collect();
                    lines[lines.len().saturating_sub(10)..].join("\n")
                };
                let mut logs = String::new();
                for e in std::fs::read_dir(self.dir.join("log"))
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    logs += &format!("{}:\n{}\n", e.path().display(), tail(&e.path()));
                }
                return Err(format!(
                    "nodes never all became idle (states {states:?})\n{logs}"
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// One node: slurmctld and slurmd in one namespace, with only a veth pair of its own.
pub fn start_single() -> Result<Cluster, String> {
    let id = std::process::id();
    let mut cl = Cluster::new(std::env::temp_dir().join(format!("rmca-slurm-{id}")));
    let ns = format!("rmcaS{}", id % 100_000);
    cl.add_netns(&ns)?;
    // Slurm resolves "127.0.0.1" with AI_ADDRCONFIG, which needs some non-loopback IPv4
    // address: give the namespace a veth pair of its own (both ends inside it).
    let (v0, v1) = (
        format!("rs0{}", id % 100_000),
        format!("rs1{}", id % 100_000),
    );
    let net = 10 + id % 200;
    ip(&[
        "-n", &ns, "link", "add", &v0, "type", "veth", "peer", "name", &v1,
    ])?;
    ip(&["-n", &ns, "link", "set", &v0, "up"])?;
    ip(&["-n", &ns, "link", "set", &v1, "up"])?;
    ip(&[
        "-n",
        &ns,
        "addr",
        "add",
        &format!("10.{net}.251.1/24"),
        "dev",
        &v0,
    ])?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    cl.write_conf("127.0.0.1", &[(host.clone(), "127.0.0.1".into(), 8)])?;
    cl.start_slurmctld()?;
    let conf = cl.conf();
    let slurmd = cl
        .cmd("slurmd")
        .arg("-D")
        .arg("-f")
        .arg(&conf)
        .args(["-N", &host])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    cl.daemons.push(slurmd);
    cl.wait_idle(1)?;
    Ok(cl)
}

/// `nodes` nodes `rn0..`, each a network namespace with its address on a bridge, its own host
/// name and its own TmpFS, with `cpus` CPUs each; slurmctld and srun in node 0's namespace.
pub fn start_nodes(nodes: usize, cpus: u32) -> Result<Cluster, String> {
    let id = std::process::id() % 100_000;
    let mut cl =
        Cluster::new(std::env::temp_dir().join(format!("rmca-slurm-nodes-{}", std::process::id())));
    let node_ns: Vec<String> = (0..nodes).map(|i| format!("rmcaN{i}x{id}")).collect();
    for ns in &node_ns {
        cl.add_netns(ns)?;
    }
    let hub = format!("rmcaH{id}");
    cl.add_netns(&hub)?;
    let bridge = "rmcabr";
    ip(&["-n", &hub, "link", "add", bridge, "type", "bridge"])?;
    ip(&["-n", &hub, "link", "set", bridge, "up"])?;
    let net = 10 + id % 200;
    let mut conf_nodes = Vec::new();
    for (i, ns) in node_ns.iter().enumerate() {
        let (inner, outer) = (format!("rn{i}a{id}"), format!("rn{i}b{id}"));
        let addr = format!("10.{net}.88.{}", i + 1);
        ip(&[
            "link", "add", &inner, "type", "veth", "peer", "name", &outer,
        ])?;
        ip(&["link", "set", &inner, "netns", ns])?;
        ip(&["link", "set", &outer, "netns", &hub])?;
        ip(&["-n", &hub, "link", "set", &outer, "master", bridge])?;
        ip(&["-n", &hub, "link", "set", &outer, "up"])?;
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            &inner,
        ])?;
        ip(&["-n", ns, "link", "set", &inner, "up"])?;
        cl.nodes.push((ns.clone(), addr.clone()));
        conf_nodes.push((format!("rn{i}"), addr, cpus));
    }
    cl.write_conf(&conf_nodes[0].1, &conf_nodes)?;
    cl.start_slurmctld()?;
    let conf = cl.conf().to_string_lossy().into_owned();
    let tmp = cl.dir.join("tmp").to_string_lossy().into_owned();
    for (i, ns) in node_ns.iter().enumerate() {
        let name = &conf_nodes[i].0;
        let own_tmp = cl.dir.join(format!("tmp-{name}"));
        std::fs::create_dir_all(&own_tmp).map_err(|e| e.to_string())?;
        // A shell in new mount and UTS namespaces gives the node its own TmpFS and host name,
        // then becomes the node's slurmd in the node's network namespace (exec all the way:
        // the child's pid is slurmd's).
        let script = format!(
            "mount --bind '{}' '{tmp}' && hostname {name} && exec nsenter --net=/var/run/netns/{ns} slurmd -D -f '{conf}' -N {name}",
            own_tmp.display()
        );
        let slurmd = Command::new("unshare")
            .args([
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "sh",
                "-c",
                &script,
            ])
            .env("SLURM_CONF", &conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        cl.daemons.push(slurmd);
    }
    cl.wait_idle(nodes)?;
    Ok(cl)
}

/// Whether srun offers `--mpi=pmix` (skips or fails when not).
pub fn has_pmix(cl: &Cluster) -> bool {
    let plugins = cl
        .cmd("srun")
        .arg("--mpi=list")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
        })
        .unwrap_or_default();
    if !plugins.contains("pmix") {
        skip_or_fail(format!(
            "this Slurm has no pmix plugin (srun --mpi=list: {plugins:?}; Debian package \
             slurm-wlm-basic-plugins)"
        ));
        return false;
    }
    true
}

/// Stop the cluster and check that nothing it started is left.
pub fn stop(cl: Cluster) {
    let inodes = cl.inodes();
    drop(cl);
    for ino in inodes {
        assert!(
            procs_in_netns(ino).is_empty(),
            "Slurm processes outlived the test"
        );
    }
}
