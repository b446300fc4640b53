//! The configurations measured: rmca through rmca-run (one per `--conf`), and the peers
//! (bench/osu_like.c built with Debian's Open MPI and MPICH; libfabric's rxd through
//! fi_pingpong).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::bench::{iters_for, sizes, Bench, Params};

/// Peers run by `--vs` without `--peers`.
pub const DEFAULT: [&str; 4] = ["ompi-vader", "ompi-ucx", "mpich", "rmca-c"];

/// Peers run by `--vs` with `--nodes`: Open MPI's shared-memory-only ob1 cannot span nodes, so
/// its ob1 runs over tcp between them (vader inside).
pub const DEFAULT_NODES: [&str; 4] = ["ompi-tcp", "ompi-ucx", "mpich", "rmca-c"];

/// Every peer `--peers` accepts.
pub const KNOWN: [&str; 7] = [
    "ompi-vader",
    "ompi-tcp",
    "ompi-ucx",
    "mpich",
    "rxd",
    "udp",
    "rmca-c",
];

/// Peers that work across `--nodes` (the others have no network path or are two-process
/// loopback tools).
pub const NODE_CAPABLE: [&str; 4] = DEFAULT_NODES;

/// The peer benchmark source, embedded so that the binary works from any directory.
const OSU_LIKE_C: &str = include_str!("../../../bench/osu_like.c");

enum Kind {
    Rmca {
        rmca_run: PathBuf,
        exe: PathBuf,
        mca: Vec<(String, String)>,
    },
    OpenMpi {
        bin: PathBuf,
        mca: &'static [&'static str],
    },
    Mpich {
        bin: PathBuf,
    },
    /// libfabric rxd over UDP (fi_pingpong): latency and bw only.
    Rxd,
    /// A raw UDP ping-pong of this binary (`--udp-peer`): latency and bw only.
    Udp {
        exe: PathBuf,
    },
    /// osu_like.c built with rmca's `mpicc` (the MPI C interface), under rmca-run: the same
    /// program as the MPI peers, on rmca. Bound like the MPI peers (the whole process, by
    /// `rmca-run --bind-to core`) unless `--no-bind`; the Rust worker binds its main thread
    /// itself.
    RmcaC {
        rmca_run: PathBuf,
        bin: PathBuf,
    },
}

/// How every job is run.
#[derive(Clone, Debug)]
pub struct RunOpts {
    /// Bind rank r to core r % ncores.
    pub bind: bool,
    /// Per-job time limit, seconds.
    pub timeout_s: u64,
    /// Measure memory (allconn, ringconn): VmHWM/VmRSS, and for rmca the profile.
    pub mem: bool,
    /// Spread the ranks over these network-namespace nodes (`--nodes`); empty: one node.
    pub nodes: Vec<String>,
}

/// One implementation to measure.
pub struct Config {
    /// Name in tables and JSON.
    pub name: String,
    kind: Kind,
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// Compile osu_like.c with `mpicc` into `dir` (once per source change).
fn build_peer(dir: &Path, mpicc: &str, suffix: &str) -> Result<PathBuf, String> {
    which(mpicc).ok_or_else(|| {
        format!("{mpicc} not found (install the peers with scripts/install-deps.sh --bench)")
    })?;
    let dir = dir.join("rmca-bench-peers");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let src = dir.join("osu_like.c");
    if std::fs::read_to_string(&src).ok().as_deref() != Some(OSU_LIKE_C) {
        std::fs::write(&src, OSU_LIKE_C)
            .map_err(|e| format!("cannot write {}: {e}", src.display()))?;
    }
    let bin = dir.join(format!("osu_like.{suffix}"));
    let fresh = match (
        std::fs::metadata(&bin).and_then(|m| m.modified()),
        std::fs::metadata(&src).and_then(|m| m.modified()),
    ) {
        (Ok(b), Ok(s)) => b >= s,
        _ => false,
    };
    if !fresh {
        let out = Command::new(mpicc)
            .args(["-O2", "-o"])
            .arg(&bin)
            .arg(&src)
            .output()
            .map_err(|e| format!("cannot run {mpicc}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{mpicc} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(bin)
}

impl Config {
    /// rmca named `name`, launched by the rmca-run next to this binary with `mca`.
    pub fn rmca(
        name: &str,
        dir: &Path,
        exe: &Path,
        mca: &[(String, String)],
    ) -> Result<Config, String> {
        let rmca_run = dir.join("rmca-run");
        if !rmca_run.is_file() {
            return Err(format!(
                "{} not found: build it with `cargo build --release -p rmca-run`",
                rmca_run.display()
            ));
        }
        Ok(Config {
            name: name.into(),
            kind: Kind::Rmca {
                rmca_run,
                exe: exe.to_path_buf(),
                mca: mca.to_vec(),
            },
        })
    }

    /// A peer by name (see [`DEFAULT`]).
    pub fn peer(name: &str, dir: &Path) -> Result<Config, String> {
        let kind = match name {
            "ompi-vader" => Kind::OpenMpi {
                bin: build_peer(dir, "mpicc.openmpi", "openmpi")?,
                mca: &["pml", "ob1", "btl", "self,vader"],
            },
            "ompi-tcp" => Kind::OpenMpi {
                bin: build_peer(dir, "mpicc.openmpi", "openmpi")?,
                mca: &["pml", "ob1", "btl", "tcp,self,vader"],
            },
            "ompi-ucx" => Kind::OpenMpi {
                bin: build_peer(dir, "mpicc.openmpi", "openmpi")?,
                mca: &["pml", "ucx", "pml_ucx_tls", "any", "pml_ucx_devices", "any"],
            },
            "mpich" => Kind::Mpich {
                bin: build_peer(dir, "mpicc.mpich", "mpich")?,
            },
            "rxd" => {
                if !crate::rxd::available() {
                    return Err(
                        "fi_pingpong not found (Debian libfabric-bin; scripts/install-deps.sh --bench)"
                            .into(),
                    );
                }
                Kind::Rxd
            }
            "rmca-c" => {
                let rmca_run = dir.join("rmca-run");
                if !rmca_run.is_file() || !dir.join("libmpi.so").is_file() {
                    return Err(format!(
                        "rmca-run or libmpi.so not found in {}: build them with `cargo build --release --workspace --bins --lib`",
                        dir.display()
                    ));
                }
                let mpicc = dir.join("mpicc");
                Kind::RmcaC {
                    bin: build_peer(dir, &mpicc.to_string_lossy(), "rmca")?,
                    rmca_run,
                }
            }
            "udp" => Kind::Udp {
                exe: std::env::current_exe()
                    .map_err(|e| format!("cannot locate rmca-bench itself: {e}"))?,
            },
            other => return Err(format!("unknown peer '{other}'")),
        };
        if matches!(kind, Kind::OpenMpi { .. }) && which("mpirun.openmpi").is_none() {
            return Err("mpirun.openmpi not found".into());
        }
        if matches!(kind, Kind::Mpich { .. }) && which("mpiexec.mpich").is_none() {
            return Err("mpiexec.mpich not found".into());
        }
        Ok(Config {
            name: name.into(),
            kind,
        })
    }

    /// Does this configuration measure `bench`?
    pub fn supports(&self, bench: Bench) -> bool {
        !matches!(self.kind, Kind::Rxd | Kind::Udp { .. })
            || matches!(bench, Bench::Latency | Bench::Bw)
    }

    /// Run one job; returns the (size, figures) result lines of rank 0 (figures that were not
    /// measured are NaN).
    pub fn run(
        &self,
        bench: Bench,
        p: &Params,
        ranks: usize,
        o: &RunOpts,
    ) -> Result<Vec<(usize, Vec<f64>)>, String> {
        let (bind, timeout_s) = (o.bind, o.timeout_s);
        let nodes = if o.nodes.is_empty() {
            None
        } else {
            Some(crate::nodes::Placement::new(ranks, &o.nodes)?)
        };
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        // Whether the MPI launchers (and rmca-run for rmca-c) bind each rank to a core.
        let bind_cores = binds_to_cores(bind, nodes.is_some(), ranks, cores);
        let mut bench_args = vec![
            bench.name().to_owned(),
            p.min.to_string(),
            p.max.to_string(),
            p.iters.to_string(),
            p.window.to_string(),
            p.misalign.to_string(),
        ];
        if o.mem {
            bench_args.push("mem".into());
        }
        let mut cmd = match &self.kind {
            Kind::Rmca { rmca_run, exe, mca } => {
                let mut c = rmca_run_command(rmca_run, nodes.as_ref())?;
                c.arg("-n")
                    .arg(ranks.to_string())
                    .arg("--timeout")
                    .arg(timeout_s.to_string());
                for (k, v) in mca {
                    c.arg("--mca").arg(k).arg(v);
                }
                if o.mem {
                    // The merged profile (rank 0, at finalize) carries the accounted memory.
                    c.args(["--mca", "profile", "1"]);
                }
                c.arg(exe).arg("--worker").args(&bench_args);
                if !bind || nodes.is_some() {
                    c.arg("--no-bind");
                }
                c
            }
            Kind::OpenMpi { bin, mca } => {
                let mut c = match &nodes {
                    Some(pl) => {
                        let agent =
                            crate::nodes::write_launcher(bin.parent().unwrap_or(Path::new(".")))?;
                        let mut c = pl.in_first_node("mpirun.openmpi");
                        c.args(crate::nodes::open_mpi_args(pl, &agent));
                        c
                    }
                    None => Command::new("mpirun.openmpi"),
                };
                c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
                c.arg("-np").arg(ranks.to_string());
                if nodes.is_some() {
                    // Every namespace node shares this machine's cores: binding per node
                    // would stack the nodes' ranks on the same cores.
                    c.args(["--bind-to", "none"]);
                } else if bind_cores {
                    c.args(["--bind-to", "core"]);
                } else {
                    c.args(["--bind-to", "none", "--oversubscribe"]);
                }
                for kv in mca.chunks(2) {
                    c.arg("--mca").args(kv);
                }
                c.arg(bin).args(&bench_args);
                c
            }
            Kind::Mpich { bin } => {
                let mut c = match &nodes {
                    Some(pl) => {
                        let agent =
                            crate::nodes::write_launcher(bin.parent().unwrap_or(Path::new(".")))?;
                        let mut c = pl.in_first_node("mpiexec.mpich");
                        c.args(crate::nodes::mpich_args(pl, &agent));
                        c
                    }
                    None => Command::new("mpiexec.mpich"),
                };
                c.arg("-n").arg(ranks.to_string());
                if bind_cores {
                    c.args(["-bind-to", "core"]);
                }
                c.arg(bin).args(&bench_args);
                c
            }
            Kind::RmcaC { rmca_run, bin } => {
                let mut c = rmca_run_command(rmca_run, nodes.as_ref())?;
                c.arg("-n")
                    .arg(ranks.to_string())
                    .arg("--timeout")
                    .arg(timeout_s.to_string());
                if bind_cores {
                    c.args(["--bind-to", "core"]);
                }
                c.arg(bin).args(&bench_args);
                c
            }
            Kind::Rxd => return self.run_rxd(bench, p, bind, timeout_s),
            Kind::Udp { exe } => {
                if !self.supports(bench) {
                    return Ok(Vec::new());
                }
                return crate::udp::run(exe, bench, p, bind, Duration::from_secs(timeout_s));
            }
        };
        for (k, _) in std::env::vars() {
            // The user's own RMCA_MCA_* settings would leak into rmca only; keep runs explicit.
            if k.starts_with("RMCA_MCA_") {
                cmd.env_remove(k);
            }
        }
        let expected_ns = match &nodes {
            Some(pl) => {
                cmd.env(crate::nodes::WHERE_ENV, "1");
                Some(pl.expected_namespaces()?)
            }
            None => None,
        };
        let (ok, stdout, stderr) = run_with_timeout(cmd, Duration::from_secs(timeout_s + 30))?;
        if !ok {
            return Err(format!(
                "{} {} failed:\n{stdout}{stderr}",
                self.name,
                bench.name()
            ));
        }
        if let Some(want) = expected_ns {
            // Figures from ranks that were not where the table says are not reported.
            crate::nodes::check_placement(&stdout, &want)
                .map_err(|e| format!("{} {}: {e}", self.name, bench.name()))?;
        }
        let lines = parse_results(&stdout);
        if lines.is_empty() && !self.supports(bench) {
            return Ok(lines);
        }
        if lines.is_empty() {
            return Err(format!(
                "{} {} printed no results:\n{stdout}{stderr}",
                self.name,
                bench.name()
            ));
        }
        Ok(lines)
    }
}

impl Config {
    fn run_rxd(
        &self,
        bench: Bench,
        p: &Params,
        bind: bool,
        timeout_s: u64,
    ) -> Result<Vec<(usize, Vec<f64>)>, String> {
        if !self.supports(bench) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for size in sizes(bench, p.min, p.max) {
            // At least 100 round trips: fi_pingpong times its first exchange (rxd's connection
            // set-up) too, which a handful of iterations would not amortize.
            let it = iters_for(p.iters, size).max(100);
            if let Some(r) = crate::rxd::run(size, it, bind, Duration::from_secs(timeout_s))? {
                let v = if bench == Bench::Latency {
                    r.usec_per_xfer
                } else {
                    r.mb_per_sec
                };
                out.push((size, vec![v]));
            }
        }
        Ok(out)
    }
}

/// rmca-run, started in the first node and told to start every rank in its node when the job
/// spans `nodes`.
fn rmca_run_command(
    rmca_run: &Path,
    nodes: Option<&crate::nodes::Placement>,
) -> Result<Command, String> {
    Ok(match nodes {
        Some(pl) => {
            let mut c = pl.in_first_node(rmca_run);
            c.args(crate::nodes::rmca_run_args(pl)?);
            c
        }
        None => Command::new(rmca_run),
    })
}

/// `result SIZE V1 [V2 ...]` lines (a `-` figure was not measured: NaN); anything else
/// (launcher chatter) is ignored.
pub fn parse_results(out: &str) -> Vec<(usize, Vec<f64>)> {
    out.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            if w.next()? != "result" {
                return None;
            }
            let size = w.next()?.parse().ok()?;
            let figures: Option<Vec<f64>> = w
                .map(|x| {
                    if x == "-" {
                        Some(f64::NAN)
                    } else {
                        x.parse().ok()
                    }
                })
                .collect();
            figures.filter(|f| !f.is_empty()).map(|f| (size, f))
        })
        .collect()
}

fn run_with_timeout(mut cmd: Command, limit: Duration) -> Result<(bool, String, String), String> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    match wait_output(child, limit) {
        (ok, out, err) if !err.starts_with(TIMED_OUT) => Ok((ok, out, err)),
        _ => Err(format!(
            "{cmd:?} did not finish within {} s",
            limit.as_secs()
        )),
    }
}

const TIMED_OUT: &str = "rmca-bench: timed out\n";

/// Read all of `stream` on a thread of its own (nothing if it is not there, e.g. taken by the
/// caller).
fn read_all<R: Read + Send + 'static>(stream: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut r) = stream {
            let _ = r.read_to_string(&mut s);
        }
        s
    })
}

/// Wait for `child` at most `limit`, killing it then; returns (success, stdout, stderr),
/// stderr starting with a timeout marker when it was killed. Either stream may have been
/// taken (or not piped): the other is still read and the limit still holds.
pub fn wait_output(mut child: Child, limit: Duration) -> (bool, String, String) {
    let t_out = read_all(child.stdout.take());
    let t_err = read_all(child.stderr.take());
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => {}
            Err(_) => break None,
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (out, err) = (
        t_out.join().unwrap_or_default(),
        t_err.join().unwrap_or_default(),
    );
    match status {
        Some(st) => (st.success(), out, err),
        None => (false, out, format!("{TIMED_OUT}{err}")),
    }
}

/// Whether a job's launcher binds each rank to a core: asked for, on one node (namespace
/// nodes share this machine's cores), and no more ranks than cores. The MPI peers and rmca-c
/// (through `rmca-run --bind-to core`) follow the same rule, so that they compare alike.
fn binds_to_cores(bind: bool, on_nodes: bool, ranks: usize, cores: usize) -> bool {
    bind && !on_nodes && ranks <= cores
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launchers_bind_only_one_node_jobs_that_fit_the_cores() {
        assert!(binds_to_cores(true, false, 2, 2));
        assert!(!binds_to_cores(false, false, 2, 2), "--no-bind");
        assert!(!binds_to_cores(true, true, 2, 8), "namespace nodes");
        assert!(!binds_to_cores(true, false, 3, 2), "oversubscribed");
    }

    #[test]
    fn a_child_whose_stdout_was_taken_still_reports_stderr_and_keeps_the_limit() {
        // What the udp and rxd peers do with their server: read its first stdout line (the
        // port), then wait for it.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "echo oops >&2; exec sleep 5"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let t = Instant::now();
        let (ok, out, err) = wait_output(child, Duration::from_millis(300));
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "the limit was not applied"
        );
        assert!(!ok && out.is_empty());
        assert!(
            err.starts_with(TIMED_OUT) && err.contains("oops"),
            "{err:?}"
        );
    }

    #[test]
    fn result_lines_are_picked_from_launcher_chatter() {
        let out = "Warning: something\nresult 0 1.5\nresult 8 2.25 9\nresult x 1\nresult 16\nbye\n";
        assert_eq!(
            parse_results(out),
            vec![(0, vec![1.5]), (8, vec![2.25, 9.0])]
        );
        let r = parse_results("result 4 1 - 3\n");
        assert_eq!(r.len(), 1);
        assert!(r[0].1[1].is_nan() && r[0].1[2] == 3.0);
    }

    #[test]
    fn embedded_source_is_the_peer_benchmark() {
        assert!(OSU_LIKE_C.contains("MPI_Init") && OSU_LIKE_C.contains("result %ld"));
    }
}
