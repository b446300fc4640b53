//! The peer implementations over the same emulated link: Open MPI (pml ob1, btl tcp) and
//! MPICH running bench/faults/peer.c (the worker's measurement in C) between the two namespace
//! nodes, each launched the way it reaches real hosts (Open MPI's rsh launcher, MPICH's ssh
//! launcher, with a stand-in for ssh that enters the node's namespace), and libfabric's
//! `fi_pingpong` over `udp;ofi_rxd` (server in the second node, client in the first).
//!
//! Every peer's data goes over the impaired network (10.203.0.0/24, the TUN devices) and its
//! launch and wire-up over the clean one (10.204.0.0/24), as rmca-run's do.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::stats::{cdf, quantile};
use crate::transport::Runner;

/// The "remote shell" given to Open MPI (`plm_rsh_agent`) and MPICH (`-launcher-exec`),
/// called as ssh is (`[-options] NODE COMMAND-LINE...`): it runs the command line in NODE's
/// network namespace and in a UTS namespace named NODE (the peers tell nodes apart by host
/// name).
const AGENT: &str = r#"#!/bin/sh
# Written by rmca-faults: ssh for the namespace nodes of bench/impaired-link.sh.
while [ "${1#-}" != "$1" ]; do shift; done
node=$1
shift
exec ip netns exec "$node" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$node" "$*"
"#;

/// The impaired network, where the peers' data must go.
pub const IMPAIRED_NET: &str = "10.203.0.0/24";
/// The clean control network (launch, wire-up).
pub const CONTROL_NET: &str = "10.204.0.0/24";

/// What the peer jobs need, made once per sweep in a directory of its own.
pub struct PeerKit {
    dir: PathBuf,
    agent: PathBuf,
}

impl PeerKit {
    /// Writes the agent and builds bench/faults/peer.c with the compiler of each runner in
    /// `runners` that needs it (`src`: peer.c).
    pub fn new(runners: &[Runner], src: &Path) -> Result<Self, String> {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("rmca-faults-peers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let agent = dir.join("netns-ssh.sh");
        std::fs::write(&agent, AGENT)
            .and_then(|()| std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)))
            .map_err(|e| format!("{}: {e}", agent.display()))?;
        let kit = Self { dir, agent };
        for r in runners {
            let Some((cc, pkg)) = compiler(*r) else {
                continue;
            };
            let out = Command::new(cc)
                .args(["-O2", "-std=c11", "-o"])
                .arg(kit.binary(*r))
                .arg(src)
                .output()
                .map_err(|e| {
                    format!("{cc}: {e} (Debian package {pkg}: scripts/install-deps.sh --bench)")
                })?;
            if !out.status.success() {
                return Err(format!(
                    "{cc} {}: {}",
                    src.display(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        if runners.contains(&Runner::Rxd) && which("fi_pingpong").is_none() {
            return Err("rxd needs fi_pingpong (Debian package libfabric-bin: \
                        scripts/install-deps.sh --bench)"
                .into());
        }
        Ok(kit)
    }

    fn binary(&self, r: Runner) -> PathBuf {
        self.dir.join(match r {
            Runner::OpenMpi => "peer-ompi",
            _ => "peer-mpich",
        })
    }

    /// The command of an MPI peer's job over `nodes` (node 0 first): its launcher started in
    /// node 0, `args` to peer.c, the whole job limited to `timeout_s` by coreutils' timeout
    /// (exit 124).
    pub fn mpi_command(
        &self,
        r: Runner,
        nodes: &[String],
        mca: &[(String, String)],
        timeout_s: u64,
        args: &[String],
    ) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &nodes[0], "unshare", "--uts", "sh", "-c"])
            .arg(r#"hostname "$0" && exec "$@""#)
            .arg(&nodes[0])
            .args(["timeout", "--kill-after=5"])
            .arg(timeout_s.to_string());
        let hosts = nodes
            .iter()
            .map(|n| format!("{n}:1"))
            .collect::<Vec<_>>()
            .join(",");
        match r {
            Runner::OpenMpi => {
                c.arg("mpirun.openmpi")
                    .args(["--host", &hosts, "-np", "2", "--bind-to", "none"])
                    .args(["--mca", "plm_rsh_agent"])
                    .arg(&self.agent)
                    .args(["--mca", "btl_tcp_if_include", IMPAIRED_NET])
                    .args(["--mca", "oob_tcp_if_include", CONTROL_NET]);
                for (k, v) in mca {
                    c.args(["--mca", k, v]);
                }
                c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
            }
            _ => {
                // Debian's MPICH is ch4:ucx: UCX's TCP transport on the TUN device only (no
                // shared memory between the nodes, which share this machine).
                c.arg("mpiexec.mpich")
                    .args(["-hosts", &hosts, "-n", "2", "-launcher", "ssh"])
                    .arg("-launcher-exec")
                    .arg(&self.agent)
                    .args(["-genv", "UCX_TLS", "tcp,self"])
                    .args(["-genv", "UCX_NET_DEVICES", "rimp"]);
            }
        }
        c.arg(self.binary(r)).args(args);
        c
    }
}

impl Drop for PeerKit {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn compiler(r: Runner) -> Option<(&'static str, &'static str)> {
    match r {
        Runner::OpenMpi => Some(("mpicc.openmpi", "libopenmpi-dev")),
        Runner::Mpich => Some(("mpicc.mpich", "libmpich-dev")),
        _ => None,
    }
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(program))
            .find(|f| f.is_file())
    })
}

/// peer.c's per-size entries (raw latency samples, stream count and seconds) turned into the
/// worker's (percentiles, CDF, goodput).
pub fn summarize_raw(sizes: &[Value]) -> Vec<Value> {
    sizes
        .iter()
        .map(|s| {
            let mut lat: Vec<f64> = s["lat_us"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_f64)
                .collect();
            lat.sort_by(f64::total_cmp);
            let size = s["size"].as_u64().unwrap_or(0);
            let count = s["stream_messages"].as_u64().unwrap_or(0);
            let secs = s["stream_secs"].as_f64().unwrap_or(f64::NAN);
            json!({
                "size": size,
                "lat_iters": lat.len(),
                "p50_us": quantile(&lat, 0.5),
                "p99_us": quantile(&lat, 0.99),
                "p999_us": quantile(&lat, 0.999),
                "max_us": quantile(&lat, 1.0),
                "cdf": cdf(&lat, 101),
                "stream_messages": count,
                "goodput_mbs": (size * count) as f64 / secs / 1e6,
            })
        })
        .collect()
}

/// fi_pingpong's commands for one size: the server in `nodes[1]`, the client in `nodes[0]`
/// addressing the server's impaired address, `iters` round trips, each limited to
/// `timeout_s`.
pub fn rxd_commands(nodes: &[String], size: usize, iters: usize, timeout_s: u64) -> [Command; 2] {
    let one = |node: &str, server_addr: Option<&str>| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", node, "timeout", "--kill-after=2"])
            .arg(timeout_s.to_string())
            // The udp provider under rxd binds to the first interface (the clean control
            // veth) whatever `-d` names, and advertises that address: its datagrams then
            // bypass the emulated link. FI_UDP_IFACE pins it to the impaired device.
            .env("FI_UDP_IFACE", "rimp")
            // The impaired interface's domain; -c: fi_pingpong checks the data it receives.
            .args([
                "fi_pingpong",
                "-p",
                "udp;ofi_rxd",
                "-e",
                "rdm",
                "-d",
                "rimp",
                "-c",
            ])
            .arg("-I")
            .arg(iters.to_string())
            .arg("-S")
            .arg(size.to_string());
        if let Some(a) = server_addr {
            c.arg(a);
        }
        c
    };
    [one(&nodes[1], None), one(&nodes[0], Some("10.203.0.2"))]
}

/// The result line of fi_pingpong's output (`bytes #sent #ack total time MB/sec usec/xfer
/// Mxfers/sec`): the one-way latency (us, elapsed over 2 x iterations) and the round trips.
pub fn parse_pingpong(out: &str) -> Option<(f64, u64)> {
    out.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() != 8 || !w[4].ends_with('s') {
            return None;
        }
        let usec: f64 = w[6].parse().ok()?;
        let it = w[1];
        let (num, mul) = match it.as_bytes().last()? {
            b'k' => (&it[..it.len() - 1], 1000),
            b'm' => (&it[..it.len() - 1], 1_000_000),
            _ => (it, 1),
        };
        let iters = num.parse::<u64>().ok()? * mul;
        (usec.is_finite() && usec > 0.0).then_some((usec, iters))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_samples_become_percentiles_and_goodput() {
        let raw = json!([{"size": 1000, "stream_messages": 100, "stream_secs": 0.5,
            "lat_us": [3.0, 1.0, 2.0, 4.0]}]);
        let s = summarize_raw(raw.as_array().unwrap());
        assert_eq!(s[0]["p50_us"], 2.0);
        assert_eq!(s[0]["p99_us"], 4.0);
        assert_eq!(s[0]["lat_iters"], 4);
        assert_eq!(s[0]["goodput_mbs"], 0.2);
    }

    #[test]
    fn the_pingpong_line_is_found_among_chatter() {
        let out =
            "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n\
                   8       1k      =1k      15k         3.41s      0.00    1705.37       0.00\n";
        assert_eq!(parse_pingpong(out), Some((1705.37, 1000)));
        assert_eq!(parse_pingpong("fi_getinfo(): -61"), None);
    }
}
