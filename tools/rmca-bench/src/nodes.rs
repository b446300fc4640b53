//! `--nodes`: every job spread over network-namespace nodes (bench/netns-cluster.sh), each
//! implementation started by its own launcher in the first node and reaching the others the way
//! it would reach real hosts: rmca-run through `--hosts`/`--launch-agent`, Open MPI through its
//! rsh launcher and MPICH through hydra's ssh launcher, both with [`LAUNCHER`] standing in for
//! ssh.
//!
//! Placement is by blocks, as rmca-run places ranks: `per = ceil(ranks / nodes)` consecutive
//! ranks on each node in order, so a job smaller than the node list uses its first nodes only.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The "remote shell" given to Open MPI (`plm_rsh_agent`) and MPICH (`-launcher-exec`).
/// Called as ssh would be: `[-options] NODE COMMAND-LINE...`, the command line being one shell
/// string (Open MPI quotes its orted arguments for the remote shell). It runs the command in
/// NODE's network namespace and in a UTS namespace of its own named NODE: the peers name their
/// shared-memory segments after the host name, and every namespace node shares /dev/shm.
pub const LAUNCHER: &str = r#"#!/bin/sh
# Written by rmca-bench (--nodes): ssh for network-namespace nodes.
while [ "${1#-}" != "$1" ]; do shift; done
node=$1
shift
exec ip netns exec "$node" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$node" "$*"
"#;

/// Set in every rank's environment under `--nodes`: each rank of the worker and of
/// bench/osu_like.c then prints `where RANK net:[INODE]`, its network namespace, checked by
/// [`check_placement`].
pub const WHERE_ENV: &str = "RMCA_BENCH_WHERE";

/// Where a job's ranks go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Every node given (rmca-run receives them all and places the same blocks itself).
    pub nodes: Vec<String>,
    /// The nodes used, in order, with their rank counts.
    pub used: Vec<(String, usize)>,
}

impl Placement {
    /// Blocks of `ceil(ranks / nodes)` ranks over `nodes`.
    pub fn new(ranks: usize, nodes: &[String]) -> Result<Placement, String> {
        if nodes.is_empty() || ranks == 0 {
            return Err("a placement needs at least one node and one rank".into());
        }
        let per = ranks.div_ceil(nodes.len());
        let used = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), ranks.saturating_sub(i * per).min(per)))
            .filter(|(_, k)| *k > 0)
            .collect();
        Ok(Placement {
            nodes: nodes.to_vec(),
            used,
        })
    }

    /// `program` started in the first node: its network namespace, and a UTS namespace named
    /// after it, as [`LAUNCHER`] starts the other nodes' daemons. Arguments added to the
    /// returned command go to `program`.
    pub fn in_first_node(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let node = &self.nodes[0];
        let mut c = Command::new("ip");
        c.args(["netns", "exec", node, "unshare", "--uts", "sh", "-c"])
            .arg(r#"hostname "$0" && exec "$@""#)
            .arg(node)
            .arg(program);
        c
    }

    /// The node of each rank, in rank order.
    pub fn rank_nodes(&self) -> Vec<&str> {
        self.used
            .iter()
            .flat_map(|(n, k)| std::iter::repeat_n(n.as_str(), *k))
            .collect()
    }

    /// The network namespace (`net:[INODE]`, as /proc/self/ns/net reads) of each rank's node.
    pub fn expected_namespaces(&self) -> Result<Vec<String>, String> {
        use std::os::unix::fs::MetadataExt;
        self.rank_nodes()
            .into_iter()
            .map(|n| {
                let path = Path::new("/run/netns").join(n);
                std::fs::metadata(&path)
                    .map(|m| format!("net:[{}]", m.ino()))
                    .map_err(|e| format!("--nodes: cannot stat {}: {e}", path.display()))
            })
            .collect()
    }

    /// `NODE:K,...` over the nodes used, the host list with slot counts both peers read.
    fn host_slots(&self) -> String {
        self.used
            .iter()
            .map(|(n, k)| format!("{n}:{k}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Check the `where RANK NAMESPACE` lines of a job's output against `expected` (the namespace
/// of each rank): every rank must report once, from its own node's namespace.
pub fn check_placement(out: &str, expected: &[String]) -> Result<(), String> {
    let mut seen: Vec<Option<&str>> = vec![None; expected.len()];
    for l in out.lines() {
        let mut w = l.split_whitespace();
        if w.next() != Some("where") {
            continue;
        }
        let (Some(rank), Some(ns)) = (w.next().and_then(|r| r.parse::<usize>().ok()), w.next())
        else {
            return Err(format!("placement check: malformed line '{l}'"));
        };
        match seen.get_mut(rank) {
            Some(slot @ None) => *slot = Some(ns),
            Some(Some(_)) => return Err(format!("placement check: rank {rank} reported twice")),
            None => {
                return Err(format!(
                    "placement check: rank {rank} reported, but the job has {} ranks",
                    expected.len()
                ))
            }
        }
    }
    for (rank, (got, want)) in seen.iter().zip(expected).enumerate() {
        match got {
            None => {
                return Err(format!(
                    "placement check: rank {rank} did not report its node"
                ))
            }
            Some(g) if g != want => {
                return Err(format!(
                    "placement check: rank {rank} ran in namespace {g}, its node's is {want}"
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A node name as `ip netns` and the launchers accept it (it also ends up in a shell word).
pub fn check_node_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "--nodes: '{name}' is not a node name (letters, digits, '-', '_', '.'; e.g. the names bench/netns-cluster.sh up prints)"
        ))
    }
}

/// Fails naming the first node that is no network namespace of this machine.
pub fn check_nodes_exist(nodes: &[String]) -> Result<(), String> {
    match nodes
        .iter()
        .find(|n| !Path::new("/run/netns").join(n).exists())
    {
        Some(n) => Err(format!(
            "--nodes: no network namespace '{n}' (create the nodes with `bench/netns-cluster.sh up N`, as root)"
        )),
        None => Ok(()),
    }
}

/// The address `hosts` (an /etc/hosts text) gives `node`.
pub fn address_in_hosts(hosts: &str, node: &str) -> Option<String> {
    hosts.lines().find_map(|l| {
        let l = l.split('#').next().unwrap_or("");
        let mut w = l.split_whitespace();
        let addr = w.next()?;
        w.any(|n| n == node).then(|| addr.to_owned())
    })
}

/// rmca-run's options for `p`: every node, each rank started in its node's network namespace,
/// and the PMI server on the first node's address (from /etc/netns/NODE/hosts, which
/// bench/netns-cluster.sh writes).
pub fn rmca_run_args(p: &Placement) -> Result<Vec<String>, String> {
    let first = &p.nodes[0];
    let hosts_file = Path::new("/etc/netns").join(first).join("hosts");
    let hosts = std::fs::read_to_string(&hosts_file).map_err(|e| {
        format!(
            "cannot read {} for the address of {first} (bench/netns-cluster.sh writes it): {e}",
            hosts_file.display()
        )
    })?;
    let addr = address_in_hosts(&hosts, first)
        .ok_or_else(|| format!("{} does not name {first}", hosts_file.display()))?;
    Ok(rmca_run_args_at(p, &addr))
}

fn rmca_run_args_at(p: &Placement, pmi_addr: &str) -> Vec<String> {
    vec![
        "--hosts".into(),
        p.nodes.join(","),
        "--launch-agent".into(),
        "ip netns exec {node} {cmd}".into(),
        "--pmi-addr".into(),
        pmi_addr.into(),
    ]
}

/// mpirun's options for `p`: the nodes with their slots, [`LAUNCHER`] (at `agent`) as the rsh
/// agent.
pub fn open_mpi_args(p: &Placement, agent: &Path) -> Vec<String> {
    vec![
        "--host".into(),
        p.host_slots(),
        "--mca".into(),
        "plm_rsh_agent".into(),
        agent.to_string_lossy().into_owned(),
        // mpirun forwards only the environment it is told to the other nodes' ranks.
        "-x".into(),
        WHERE_ENV.into(),
    ]
}

/// mpiexec's (hydra's) options for `p`: the nodes with their slots, the ssh launcher with
/// [`LAUNCHER`] (at `agent`) for ssh.
pub fn mpich_args(p: &Placement, agent: &Path) -> Vec<String> {
    vec![
        "-hosts".into(),
        p.host_slots(),
        "-launcher".into(),
        "ssh".into(),
        "-launcher-exec".into(),
        agent.to_string_lossy().into_owned(),
    ]
}

/// Write [`LAUNCHER`] into `dir` (executable) unless it is there already; returns its path.
pub fn write_launcher(dir: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("netns-launch.sh");
    if std::fs::read_to_string(&path).ok().as_deref() != Some(LAUNCHER) {
        // Written aside and renamed: a peer job may be reading the old one.
        let tmp = dir.join(format!("netns-launch.sh.{}", std::process::id()));
        std::fs::write(&tmp, LAUNCHER)
            .and_then(|()| std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)))
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("n{i}")).collect()
    }

    fn counts(p: &Placement) -> Vec<usize> {
        p.used.iter().map(|(_, k)| *k).collect()
    }

    #[test]
    fn ranks_go_in_blocks_like_rmca_run_places_them() {
        // rmca-run: rank r on node r / ceil(np / nodes).
        for ranks in 1..=40 {
            let p = Placement::new(ranks, &names(8)).unwrap();
            let per = ranks.div_ceil(8);
            let mut expect: Vec<(String, usize)> = Vec::new();
            for r in 0..ranks {
                let node = format!("n{}", r / per);
                match expect.last_mut() {
                    Some((n, k)) if *n == node => *k += 1,
                    _ => expect.push((node, 1)),
                }
            }
            assert_eq!(p.used, expect, "{ranks} ranks");
        }
        assert_eq!(counts(&Placement::new(2, &names(8)).unwrap()), vec![1, 1]);
        assert_eq!(counts(&Placement::new(32, &names(8)).unwrap()), vec![4; 8]);
        assert_eq!(
            counts(&Placement::new(10, &names(8)).unwrap()),
            vec![2, 2, 2, 2, 2]
        );
        assert_eq!(
            counts(&Placement::new(7, &names(3)).unwrap()),
            vec![3, 3, 1]
        );
        assert!(Placement::new(0, &names(2)).is_err());
        assert!(Placement::new(2, &[]).is_err());
    }

    #[test]
    fn each_launcher_gets_the_same_nodes_and_slots() {
        let p = Placement::new(6, &names(4)).unwrap();
        let agent = Path::new("/tmp/x/netns-launch.sh");
        assert_eq!(
            open_mpi_args(&p, agent).join(" "),
            "--host n0:2,n1:2,n2:2 --mca plm_rsh_agent /tmp/x/netns-launch.sh -x RMCA_BENCH_WHERE"
        );
        assert_eq!(
            mpich_args(&p, agent).join(" "),
            "-hosts n0:2,n1:2,n2:2 -launcher ssh -launcher-exec /tmp/x/netns-launch.sh"
        );
        assert_eq!(
            rmca_run_args_at(&p, "10.201.0.1"),
            vec![
                "--hosts",
                "n0,n1,n2,n3",
                "--launch-agent",
                "ip netns exec {node} {cmd}",
                "--pmi-addr",
                "10.201.0.1"
            ]
        );
        let c = p.in_first_node("mpirun.openmpi");
        let args: Vec<String> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(c.get_program(), "ip");
        assert_eq!(args[..5], ["netns", "exec", "n0", "unshare", "--uts"]);
        assert_eq!(args[args.len() - 2..], ["n0", "mpirun.openmpi"]);
    }

    #[test]
    fn placement_is_checked_rank_by_rank() {
        let p = Placement::new(3, &names(2)).unwrap();
        assert_eq!(p.rank_nodes(), vec!["n0", "n0", "n1"]);
        let want: Vec<String> = ["net:[1]", "net:[1]", "net:[2]"].map(String::from).to_vec();
        let out = "where 2 net:[2]\nresult 0 1 2\nwhere 0 net:[1]\nwhere 1 net:[1]\n";
        assert_eq!(check_placement(out, &want), Ok(()));
        // A rank on the wrong node, a missing rank, a rank twice, a rank out of range.
        let e = check_placement("where 0 net:[1]\nwhere 1 net:[2]\nwhere 2 net:[2]\n", &want);
        assert!(e.unwrap_err().contains("rank 1 ran in namespace net:[2]"));
        let e = check_placement("where 0 net:[1]\nwhere 2 net:[2]\n", &want);
        assert!(e.unwrap_err().contains("rank 1 did not report"));
        let e = check_placement("where 0 net:[1]\nwhere 0 net:[1]\n", &want);
        assert!(e.unwrap_err().contains("twice"));
        let e = check_placement("where 3 net:[1]\n", &want);
        assert!(e.unwrap_err().contains("job has 3 ranks"));
        assert!(check_placement("where x\n", &want)
            .unwrap_err()
            .contains("malformed"));
    }

    #[test]
    fn the_first_nodes_address_comes_from_its_hosts_file() {
        let hosts = "127.0.0.1 localhost\n10.201.0.1 rmcan0\n10.201.0.2 rmcan1 # two\n";
        assert_eq!(
            address_in_hosts(hosts, "rmcan1").as_deref(),
            Some("10.201.0.2")
        );
        assert_eq!(
            address_in_hosts(hosts, "rmcan0").as_deref(),
            Some("10.201.0.1")
        );
        assert_eq!(address_in_hosts(hosts, "rmcan"), None);
        assert_eq!(address_in_hosts(hosts, "two"), None);
    }

    #[test]
    fn node_names_are_checked() {
        assert!(check_node_name("rmcan0").is_ok());
        assert!(check_node_name("a.b-c_1").is_ok());
        for bad in ["", "a b", "a;b", "-x", "$(x)"] {
            assert!(
                check_node_name(bad)
                    .unwrap_err()
                    .contains("not a node name"),
                "{bad:?}"
            );
        }
        assert!(check_nodes_exist(&["no-such-rmca-bench-node".into()])
            .unwrap_err()
            .contains("netns-cluster.sh"));
    }

    /// The launcher drops ssh's options, then runs the command line (one shell string) in the
    /// node: checked with a stand-in `ip` that prints what it was asked to run.
    #[test]
    fn the_launcher_runs_the_command_line_in_the_node() {
        let dir = std::env::temp_dir().join(format!("rmca-bench-launcher-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let agent = write_launcher(&dir).unwrap();
        // Stand-in for `ip netns exec NODE CMD...` and `unshare --uts CMD...`: skip to CMD
        // after printing the node, and run it.
        std::fs::write(
            dir.join("ip"),
            "#!/bin/sh\necho \"node=$3\"\nshift 3\n[ \"$1\" = unshare ] && shift 2\nexec \"$@\"\n",
        )
        .unwrap();
        std::fs::write(dir.join("hostname"), "#!/bin/sh\necho \"hostname=$1\"\n").unwrap();
        for f in ["ip", "hostname"] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = format!(
            "{}:{}",
            dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        // As hydra calls it (`-x` first) and as Open MPI does (its arguments quoted for the
        // remote shell).
        // A script just written may be briefly "busy" (ETXTBSY): another test thread's fork
        // can hold its write descriptor until that child execs. Retry, as a shell does.
        let out = (0..100)
            .find_map(|_| {
                match Command::new(&agent)
                    .args(["-x", "n3", "echo", "\"a  b\"", "c"])
                    .env("PATH", &path)
                    .output()
                {
                    Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                        None
                    }
                    // The stand-ins it runs can be busy the same way.
                    Ok(o) if String::from_utf8_lossy(&o.stderr).contains("Text file busy") => {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                        None
                    }
                    other => Some(other.unwrap()),
                }
            })
            .expect("the launcher script stayed busy for a second");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "node=n3\nhostname=n3\na  b c\n"
        );
    }
}
