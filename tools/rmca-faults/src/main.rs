//! rmca-faults: sweeps one impairment of a link emulated by rmca-impair (bench/impaired-link.sh:
//! two namespace nodes joined through TUN devices) and measures, per point and transport, what
//! a reliability protocol researcher plots: goodput at several message sizes, latency
//! p50/p99/p99.9 and its CDF, pml dr's retransmissions and acknowledgements per message, the
//! corrupt and duplicate packets caught, and the bad deliveries (which must be 0: any fails
//! the sweep, naming the seed that reproduces it).
//!
//! `rmca-faults --sweep burst --points 0,0.05,0.1,0.2,0.3 --plot bench/faults`
#![deny(unsafe_code)]

mod check;
mod kill;
mod peers;
mod plot;
mod stats;
mod sweep;
mod transport;
mod worker;

use std::path::{Path, PathBuf};
use std::process::{exit, Command};

use serde_json::{json, Value};

use sweep::Kind;
use transport::{Runner, Transport};

const USAGE: &str = "usage: rmca-faults --sweep KIND --points X,Y,... [options]   (as root)
  --sweep KIND        the impairment varied: loss, burst (Gilbert, mean burst --burst-len),
                      reorder (held back 1 ms), corrupt (UDP payload bits, checksum cleared),
                      dup, delay (points in us); or kill: a ping-pong of the smallest size
                      during which the link turns to loss POINT (1: dead) --kill-after
                      seconds in, measuring the time to the error (one path) or to resumed
                      traffic (failover, e.g. dr+ud+rc) next to the configured timeouts
                      (rmca transports only; e.g. dr+ud[pml_dr_peer_timeout=3000])
  --points LIST       its values (probabilities; for delay microseconds)
  --transports LIST   compared transports, each [LABEL:]BASE[NAME=VALUE,...] (default
                      dr+ud,dr+rc,ob1+rc): a base transport, optionally with MCA settings of
                      rmca's components in brackets (checked by the components' own parameter
                      code before any job runs) and a label naming it in the table, JSON and
                      plots (else the spec as written), e.g.
                        --transports 'dr+ud,w8:dr+ud[pml_dr_window=8,pml_dr_rto_min_us=2000]'
                      A piece without '=' continues the value before it (values with commas:
                      [btl_rc_receive_queues=S,256,64]). Bases (soft verbs provider: ud over
                      UDP, rc over TCP):
{BASES}
  --sizes LIST        message sizes in bytes, at least 8 (default 8,4096,65536; suffixes k, m)
  --base SPEC         rmca-impair impairments added at every point (e.g. delay=100us)
  --burst-len L       mean burst length in packets of --sweep burst (default 4)
  --seed N            seed of the emulator and the message contents (default 1)
  --lat-iters N       ping-pongs per size up to 4 KiB (default 1000; scaled down above)
  --bw-bytes B        bytes streamed per size for goodput (default 4m)
  --window W          messages in flight in the stream (default 16)
  --timeout S         per-job time limit (default 120); a job that exceeds it is reported as
                      a timeout (no goodput), not as a failure
  --kill-after S      kill sweep: seconds of ping-pong before the kill (default 1)
  --kill-run S        kill sweep: seconds of ping-pong in all (default 8)
  --json              one JSON object per row on stdout (the table goes to stderr)
  --plot DIR          write SVG plots there: goodput-SIZE.svg (goodput against the point, a
                      line per transport) and latency-cdf-TRANSPORT.svg (smallest size, a line
                      per point)
  --prefix P          namespace prefix of the nodes (default rfault)
  --script PATH       bench/impaired-link.sh (default: the one of this source tree)";

/// The usage text, with the base transports listed.
fn usage() -> String {
    USAGE.replace("{BASES}", &transport::help())
}

#[derive(Debug, Clone)]
struct Opts {
    worker: bool,
    sweep: Option<Kind>,
    points: Vec<f64>,
    transports: Vec<Transport>,
    sizes: Vec<usize>,
    base: String,
    burst_len: f64,
    seed: u64,
    lat_iters: usize,
    bw_bytes: usize,
    window: usize,
    timeout: u64,
    kill_after: f64,
    kill_run: f64,
    kill_run_given: bool,
    json: bool,
    plot: Option<PathBuf>,
    prefix: String,
    script: PathBuf,
}

fn size_arg(s: &str) -> Result<usize, String> {
    let t = s.to_ascii_lowercase();
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1024),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        _ => (t.as_str(), 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("'{s}' is not a size in bytes (e.g. 4096, 64k, 1m)"))
}

fn parse_opts(args: Vec<String>) -> Result<Opts, String> {
    use lexopt::prelude::*;
    let mut o = Opts {
        worker: false,
        sweep: None,
        points: Vec::new(),
        transports: transport::parse_list("dr+ud,dr+rc,ob1+rc")?,
        sizes: vec![8, 4096, 65536],
        base: String::new(),
        burst_len: 4.0,
        seed: 1,
        lat_iters: 1000,
        bw_bytes: 4 << 20,
        window: 16,
        timeout: 120,
        kill_after: 1.0,
        kill_run: 8.0,
        kill_run_given: false,
        json: false,
        plot: None,
        prefix: "rfault".into(),
        script: Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/impaired-link.sh"),
    };
    let mut p = lexopt::Parser::from_args(args);
    let val = |p: &mut lexopt::Parser| -> Result<String, String> {
        p.value()
            .map_err(|e| e.to_string())?
            .into_string()
            .map_err(|_| "arguments must be UTF-8".to_owned())
    };
    let secs = |name: &str, v: &str| -> Result<f64, String> {
        v.parse::<f64>()
            .ok()
            .filter(|x| *x > 0.0 && *x <= 3600.0)
            .ok_or_else(|| format!("{name} '{v}' is not a number of seconds above 0, up to 3600"))
    };
    let num = |name: &str, v: &str| -> Result<u64, String> {
        v.parse::<u64>()
            .map_err(|_| format!("{name} '{v}' is not a whole number"))
    };
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Long("worker") => o.worker = true,
            Long("sweep") => o.sweep = Some(Kind::parse(&val(&mut p)?)?),
            Long("points") => {
                o.points = val(&mut p)?
                    .split(',')
                    .map(|x| {
                        x.trim()
                            .parse::<f64>()
                            .map_err(|_| format!("--points: '{x}' is not a number"))
                    })
                    .collect::<Result<_, _>>()?
            }
            Long("transports") => o.transports = transport::parse_list(&val(&mut p)?)?,
            Long("sizes") => {
                o.sizes = val(&mut p)?
                    .split(',')
                    .map(size_arg)
                    .collect::<Result<_, _>>()?
            }
            Long("base") => o.base = val(&mut p)?,
            Long("burst-len") => {
                let v = val(&mut p)?;
                o.burst_len = v
                    .parse()
                    .ok()
                    .filter(|l: &f64| (1.0..=1e6).contains(l))
                    .ok_or_else(|| format!("--burst-len '{v}' is not 1 to 1e6 packets"))?;
            }
            Long("seed") => o.seed = num("--seed", &val(&mut p)?)?,
            Long("lat-iters") => o.lat_iters = num("--lat-iters", &val(&mut p)?)? as usize,
            Long("bw-bytes") => o.bw_bytes = size_arg(&val(&mut p)?)?,
            Long("window") => o.window = num("--window", &val(&mut p)?)? as usize,
            Long("timeout") => o.timeout = num("--timeout", &val(&mut p)?)?,
            Long("kill-after") => o.kill_after = secs("--kill-after", &val(&mut p)?)?,
            Long("kill-run") => {
                o.kill_run = secs("--kill-run", &val(&mut p)?)?;
                o.kill_run_given = true;
            }
            Long("json") => o.json = true,
            Long("plot") => o.plot = Some(val(&mut p)?.into()),
            Long("prefix") => o.prefix = val(&mut p)?,
            Long("script") => o.script = val(&mut p)?.into(),
            Long("help") | Short('h') => {
                println!("{}", usage());
                exit(0);
            }
            other => return Err(other.unexpected().to_string()),
        }
    }
    if o.sizes.is_empty() || o.sizes.iter().any(|&s| s < check::MIN_SIZE) {
        return Err(format!(
            "--sizes must be at least {} bytes each (a message carries its sequence number)",
            check::MIN_SIZE
        ));
    }
    if o.lat_iters == 0 || o.window == 0 || o.bw_bytes == 0 {
        return Err("--lat-iters, --window and --bw-bytes must be above 0".into());
    }
    if o.worker {
        return Ok(o);
    }
    let kind = o
        .sweep
        .ok_or("--sweep is needed (loss, burst, reorder, corrupt, dup or delay)")?;
    if o.points.is_empty() {
        return Err("--points is needed".into());
    }
    for &x in &o.points {
        kind.check_point(x)?;
    }
    for t in &o.transports {
        transport::check_settings(t)?;
    }
    if kind == Kind::Kill {
        if let Some(t) = o.transports.iter().find(|t| t.runner != Runner::Rmca) {
            return Err(format!(
                "--sweep kill runs rmca's transports only ({} has no kill mode): valid bases \
                 are those of rmca (dr+ud, dr+rc, ob1+rc, ob1+ud, dr+ud+rc)",
                t.label
            ));
        }
        if o.kill_run <= o.kill_after {
            return Err(format!(
                "--kill-run ({} s) must be longer than --kill-after ({} s)",
                o.kill_run, o.kill_after
            ));
        }
        if (o.timeout as f64) < o.kill_run + 5.0 {
            return Err(format!(
                "--timeout ({} s) must exceed --kill-run ({} s) by 5 s at least",
                o.timeout, o.kill_run
            ));
        }
    }
    // The emulator checks the impairments itself; refuse them before any node is made.
    let probe = kind.spec(o.points[0], o.burst_len, &o.base);
    if !o.base.is_empty() && !probe.contains(&o.base) {
        return Err(format!("--base '{}' was not kept", o.base));
    }
    Ok(o)
}

/// Profile counters of datagrams discarded below the PML as malformed or misaddressed.
const BELOW_PML_DROPS: &[&str] = &[
    "btl.ud.drops_provider_malformed",
    "btl.ud.drops_provider_foreign",
    "btl.ud.drops_foreign",
    "btl.ud.drops_unknown_source",
    "btl.ud.drops_wrong_job",
    "btl.ud.drops_truncated",
];

/// One row: a point, a transport, a size.
fn row(
    o: &Opts,
    point: f64,
    spec: &str,
    transport: &Transport,
    size: Option<&Value>,
    job: &JobResult,
) -> Value {
    let per_msg = |name: &str| -> Value {
        match (job.profile.get(name).and_then(Value::as_u64), job.messages) {
            (Some(n), Some(m)) if m > 0 => json!(n as f64 / m as f64),
            _ => Value::Null,
        }
    };
    let c = |name: &str| job.profile.get(name).and_then(Value::as_u64);
    // The PML's own counters: `pml.NAME.KEY`, by the names pml dr uses (a plugin PML that
    // follows them, as examples/out-of-tree-pml does, gets the same columns).
    let pml = transport.pml().unwrap_or("dr");
    let pc = |key: &str| format!("pml.{pml}.{key}");
    // Frames refused as corrupt by the PML: dr's csum_failures, or crc_failures, and malformed.
    let by_pml = match (
        c(&pc("csum_failures")).or(c(&pc("crc_failures"))),
        c(&pc("malformed")),
    ) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
    // Corrupted datagrams the soft provider or btl-ud discard before dr sees them (a flipped
    // bit in their headers): caught too, below the PML.
    let below: u64 = BELOW_PML_DROPS.iter().filter_map(|n| c(n)).sum();
    json!({
        "sweep": o.sweep.map(Kind::name),
        "point": point,
        "impairment": spec,
        "seed": o.seed,
        "transport": transport.label,
        "base": transport.base,
        "mca": transport.extra.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "spec": transport.spec,
        "size": size.map(|s| s["size"].clone()),
        "goodput_mbs": size.map(|s| s["goodput_mbs"].clone()),
        "p50_us": size.map(|s| s["p50_us"].clone()),
        "mean_us": size.map(|s| s["mean_us"].clone()),
        "p99_us": size.map(|s| s["p99_us"].clone()),
        "p999_us": size.map(|s| s["p999_us"].clone()),
        "lat_samples": size.map(|s| s["lat_iters"].clone()),
        "pml": transport.pml(),
        "retransmissions_per_msg": per_msg(&pc("retransmissions")),
        "acks_per_msg": per_msg(&pc("acks_sent")),
        "pml_timeouts": c(&pc("timeouts")),
        "caught_corrupt": by_pml.map(|n| n + below),
        "caught_corrupt_by_pml": by_pml,
        "discarded_below_pml": below,
        "caught_duplicates": c(&pc("duplicates")),
        "link": job.link,
        "delivered_bad": job.delivery.as_ref().map(|d| d["duplicate"].as_u64().unwrap_or(0)
            + d["out_of_order"].as_u64().unwrap_or(0) + d["corrupt"].as_u64().unwrap_or(0)),
        "checked": job.delivery.as_ref().map(|d| d["checked"].clone()),
        "status": job.status,
        "cdf": size.map(|s| s["cdf"].clone()),
    })
}

/// What one job gave.
struct JobResult {
    status: String,
    sizes: Vec<Value>,
    delivery: Option<Value>,
    messages: Option<u64>,
    profile: serde_json::Map<String, Value>,
    link: Value,
}

/// The nodes, taken down on drop.
struct Nodes<'a> {
    o: &'a Opts,
    /// The node names, node 0 first.
    names: Vec<String>,
}

impl Nodes<'_> {
    fn script(&self) -> Command {
        let mut c = Command::new(&self.o.script);
        let dir = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        c.env("RMCA_IMPAIR", dir.join("rmca-impair"))
            .env("RMCA_RUN", dir.join("rmca-run"));
        c
    }

    fn checked(&self, args: &[&str]) -> Result<String, String> {
        let out = self
            .script()
            .args(args)
            .output()
            .map_err(|e| format!("{}: {e}", self.o.script.display()))?;
        if !out.status.success() {
            return Err(format!(
                "impaired-link.sh {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn emulator_args(&self, spec: &str) -> Vec<String> {
        let mut a = vec!["--seed".to_owned(), self.o.seed.to_string()];
        if !spec.is_empty() {
            a.extend(["--impair".to_owned(), spec.to_owned()]);
        }
        a
    }

    fn up(o: &Opts) -> Result<Nodes<'_>, String> {
        let mut n = Nodes {
            o,
            names: Vec::new(),
        };
        // Leftovers of an interrupted sweep would make `up` refuse.
        let _ = n.script().args(["down", &o.prefix]).output();
        let mut args = vec!["up".to_owned(), "2".into(), o.prefix.clone(), "--".into()];
        args.extend(n.emulator_args(""));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = n.checked(&a)?;
        n.names = out
            .lines()
            .last()
            .unwrap_or("")
            .split(',')
            .map(str::to_owned)
            .collect();
        if n.names.len() != 2 {
            return Err(format!("impaired-link.sh up printed no 2 nodes: {out}"));
        }
        Ok(n)
    }

    /// Restarts the emulator impairing the link by `spec` (and, in a kill sweep, switching
    /// to `then` on `impaired-link.sh change`).
    fn restart(&self, spec: &str, then: Option<&str>) -> Result<(), String> {
        let mut args = vec!["restart".to_owned(), self.o.prefix.clone(), "--".into()];
        args.extend(self.emulator_args(spec));
        if let Some(t) = then {
            args.extend(["--then".to_owned(), t.to_owned()]);
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        self.checked(&a)?;
        Ok(())
    }

    /// The emulator's counters, summed over the directions, and the report itself.
    fn link_counters(&self) -> Result<(Value, Value), String> {
        let stats: Value = serde_json::from_str(&self.checked(&["stats", &self.o.prefix])?)
            .map_err(|e| format!("emulator counters: {e}"))?;
        let mut link = serde_json::Map::new();
        for d in stats["directions"].as_array().into_iter().flatten() {
            for (k, v) in d["counters"].as_object().into_iter().flatten() {
                let sum =
                    link.get(k).and_then(Value::as_u64).unwrap_or(0) + v.as_u64().unwrap_or(0);
                link.insert(k.clone(), sum.into());
            }
        }
        Ok((Value::Object(link), stats))
    }

    /// The worker's arguments after `--worker` (or peer.c's, `c` true).
    fn worker_args(&self, c: bool) -> Vec<String> {
        let o = self.o;
        let sizes: Vec<String> = o.sizes.iter().map(usize::to_string).collect();
        if c {
            let mut a = vec![
                o.seed.to_string(),
                o.lat_iters.to_string(),
                o.bw_bytes.to_string(),
                o.window.to_string(),
            ];
            a.extend(sizes);
            return a;
        }
        vec![
            "--seed".into(),
            o.seed.to_string(),
            "--sizes".into(),
            sizes.join(","),
            "--lat-iters".into(),
            o.lat_iters.to_string(),
            "--bw-bytes".into(),
            o.bw_bytes.to_string(),
            "--window".into(),
            o.window.to_string(),
        ]
    }

    /// rmca-run (in node 0, ranks on both nodes) with `mca` and the merged profile written
    /// to `prof`, running this tool's worker with `worker_args`.
    fn rmca_command(
        &self,
        mca: &[(String, String)],
        prof: &Path,
        worker_args: &[String],
    ) -> Result<Command, String> {
        let mut cmd = self.script();
        cmd.args(["run", &self.o.prefix, "--", "-n", "2", "--timeout"])
            .arg(self.o.timeout.to_string());
        for (k, v) in mca {
            cmd.args(["--mca", k, v]);
        }
        cmd.args(["--mca", "profile", "1", "--mca", "profile_json"])
            .arg(prof);
        cmd.arg(std::env::current_exe().map_err(|e| e.to_string())?);
        cmd.arg("--worker").args(worker_args);
        for (k, _) in std::env::vars() {
            if k.starts_with("RMCA_MCA_") {
                cmd.env_remove(k);
            }
        }
        Ok(cmd)
    }

    /// Runs one job of `t` over the link impaired by `spec`.
    fn job(
        &self,
        spec: &str,
        t: &Transport,
        kit: Option<&peers::PeerKit>,
    ) -> Result<JobResult, String> {
        self.restart(spec, None)?;
        if t.runner == Runner::Rxd {
            return self.rxd_job();
        }
        let prof = std::env::temp_dir().join(format!("rmca-faults-{}.json", std::process::id()));
        let _ = std::fs::remove_file(&prof);
        let mut cmd = match t.runner {
            Runner::Rmca => self.rmca_command(&t.mca(), &prof, &self.worker_args(false))?,
            r => kit.ok_or("the peer programs were not built")?.mpi_command(
                r,
                &self.names,
                &t.mca(),
                self.o.timeout,
                &self.worker_args(true),
            ),
        };
        let out = cmd.output().map_err(|e| format!("running the job: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let result: Option<Value> = stdout
            .lines()
            .find_map(|l| l.strip_prefix("faults-result "))
            .and_then(|j| serde_json::from_str(j).ok());
        let status = if out.status.success() && result.is_some() {
            "ok".to_owned()
        } else if stderr.contains("exceeded --timeout") || out.status.code() == Some(124) {
            // Too slow to finish is a measurement (no goodput), not a wrong delivery. (MPICH
            // over UCX now and then hangs in MPI_Finalize after printing its result: the
            // figures stand, the status says so.)
            format!(
                "timeout ({} s){}",
                self.o.timeout,
                if result.is_some() {
                    " after the result"
                } else {
                    ""
                }
            )
        } else {
            format!("failed (exit {:?}): {}", out.status.code(), why(&stderr))
        };
        let profile = std::fs::read_to_string(&prof)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| v["counters"].as_object().cloned())
            .unwrap_or_default();
        let _ = std::fs::remove_file(&prof);
        let (link, _) = self.link_counters()?;
        let r = result.unwrap_or(Value::Null);
        let raw = r["sizes"].as_array().cloned().unwrap_or_default();
        Ok(JobResult {
            status,
            sizes: if t.runner == Runner::Rmca {
                raw
            } else {
                peers::summarize_raw(&raw)
            },
            delivery: r.get("delivery").cloned(),
            messages: r["messages"].as_u64(),
            profile,
            link,
        })
    }

    /// fi_pingpong over udp;ofi_rxd, one server/client pair per size: the mean one-way
    /// latency only (it has no percentiles, no stream and no content check).
    fn rxd_job(&self) -> Result<JobResult, String> {
        let mut sizes = Vec::new();
        let mut status = "ok (fi_pingpong: mean latency only)".to_owned();
        for &size in &self.o.sizes {
            let it = if size <= 4096 {
                self.o.lat_iters
            } else {
                (self.o.lat_iters * 4096 / size).max(50)
            };
            let [mut server, mut client] =
                peers::rxd_commands(&self.names, size, it, self.o.timeout);
            let srv = server
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("fi_pingpong: {e}"))?;
            // The server must listen before the client sends its first datagram (rxd retries
            // it anyway, after its own timeout).
            std::thread::sleep(std::time::Duration::from_millis(300));
            let cli = client.output().map_err(|e| format!("fi_pingpong: {e}"))?;
            let srv = srv
                .wait_with_output()
                .map_err(|e| format!("fi_pingpong: {e}"))?;
            let text = String::from_utf8_lossy(&cli.stdout);
            match peers::parse_pingpong(&text) {
                Some((usec, iters)) if cli.status.success() => sizes.push(json!({
                    "size": size, "lat_iters": iters, "mean_us": usec,
                })),
                _ => {
                    status = if cli.status.code() == Some(124) {
                        format!("timeout ({} s)", self.o.timeout)
                    } else {
                        format!(
                            "failed (exit {:?}): {}",
                            cli.status.code(),
                            why(&format!(
                                "{}{}",
                                String::from_utf8_lossy(&cli.stderr),
                                String::from_utf8_lossy(&srv.stderr)
                            ))
                        )
                    };
                    break;
                }
            }
        }
        let (link, _) = self.link_counters()?;
        // Its figures are the link's only if its round trips crossed it (2 datagrams each
        // at least): seen, on this machine, to carry ~25 packets for 100 round trips.
        let trips: u64 = sizes.iter().filter_map(|s| s["lat_iters"].as_u64()).sum();
        let packets = link["packets"].as_u64().unwrap_or(0);
        if status.starts_with("ok") && packets < 2 * trips {
            status = format!(
                "failed: not over the emulated link ({packets} packets for {trips} round trips)"
            );
        }
        Ok(JobResult {
            status,
            sizes,
            delivery: None,
            messages: None,
            profile: Default::default(),
            link,
        })
    }
}

/// The worker's or the library's own words first, else the launcher's last line.
fn why(stderr: &str) -> String {
    stderr
        .lines()
        .find(|l| l.contains("rmca-faults worker:") || l.contains("rror"))
        .or_else(|| stderr.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or("")
        .to_owned()
}

impl Drop for Nodes<'_> {
    fn drop(&mut self) {
        let _ = self.script().args(["down", &self.o.prefix]).output();
    }
}

fn fmt(v: &Value, prec: usize) -> String {
    match v.as_f64() {
        Some(x) if x.is_finite() => format!("{x:.prec$}"),
        _ => "-".into(),
    }
}

fn table(rows: &[Value]) -> String {
    let tw = rows
        .iter()
        .filter_map(|r| r["transport"].as_str())
        .map(str::len)
        .max()
        .unwrap_or(0)
        .max(6);
    let mut s = format!(
        "{:>8} {:>tw$} {:>6} {:>10} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7} {:>8} {:>8} {:>5}  {}\n",
        "point",
        "transp",
        "size",
        "MB/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "retx/msg",
        "acks/msg",
        "lost %",
        "corr c",
        "dup c",
        "bad",
        "status"
    );
    for r in rows {
        let link = &r["link"];
        let lost = match (link["lost"].as_f64(), link["packets"].as_f64()) {
            (Some(l), Some(p)) if p > 0.0 => format!("{:.1}", 100.0 * l / p),
            _ => "-".into(),
        };
        let caught = |v: &Value, emu: &str| match v.as_u64() {
            Some(n) => format!("{n}/{}", link[emu].as_u64().unwrap_or(0)),
            None => format!("-/{}", link[emu].as_u64().unwrap_or(0)),
        };
        s.push_str(&format!(
            "{:>8} {:>tw$} {:>6} {:>10} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7} {:>8} {:>8} {:>5}  {}\n",
            r["point"].to_string(),
            r["transport"].as_str().unwrap_or(""),
            r["size"].as_u64().map_or("-".into(), |x| x.to_string()),
            fmt(&r["goodput_mbs"], 2),
            if r["p50_us"].is_number() || !r["mean_us"].is_number() {
                fmt(&r["p50_us"], 1)
            } else {
                format!("m{}", fmt(&r["mean_us"], 1))
            },
            fmt(&r["p99_us"], 1),
            fmt(&r["p999_us"], 1),
            fmt(&r["retransmissions_per_msg"], 3),
            fmt(&r["acks_per_msg"], 3),
            lost,
            caught(&r["caught_corrupt"], "corrupted"),
            caught(&r["caught_duplicates"], "duplicated"),
            r["delivered_bad"]
                .as_u64()
                .map_or("-".into(), |x| x.to_string()),
            r["status"].as_str().unwrap_or("")
        ));
    }
    s
}

fn plots(o: &Opts, kind: Kind, rows: &[Value], dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut written = Vec::new();
    let mut write = |name: String, svg: String| -> Result<(), String> {
        let p = dir.join(name);
        std::fs::write(&p, svg).map_err(|e| format!("{}: {e}", p.display()))?;
        written.push(p);
        Ok(())
    };
    for &size in &o.sizes {
        let lines: Vec<plot::Line> = o
            .transports
            .iter()
            .map(|t| {
                let pts = rows
                    .iter()
                    .filter(|r| r["transport"] == t.label.as_str() && r["size"] == size)
                    .filter_map(|r| Some((r["point"].as_f64()?, r["goodput_mbs"].as_f64()?)))
                    .collect();
                (t.label.clone(), pts)
            })
            .collect();
        let svg = plot::svg(
            &format!(
                "goodput of {size}-byte messages, 2 ranks over rmca-impair (seed {})",
                o.seed
            ),
            kind.axis(),
            "goodput (MB/s)",
            &lines,
            false,
        )?;
        write(format!("goodput-{size}.svg"), svg)?;
    }
    let smallest = o.sizes.iter().min().copied().unwrap_or(8);
    for t in &o.transports {
        let lines: Vec<plot::Line> = rows
            .iter()
            .filter(|r| r["transport"] == t.label.as_str() && r["size"] == smallest)
            .map(|r| {
                let pts = r["cdf"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64()?)))
                    .collect();
                (format!("{} = {}", kind.name(), r["point"]), pts)
            })
            .collect();
        if lines.iter().all(|(_, p)| p.is_empty()) {
            continue;
        }
        let svg = plot::svg(
            &format!(
                "{}: one-way latency CDF of {smallest}-byte ping-pongs",
                t.label
            ),
            "latency (us, log)",
            "fraction of messages",
            &lines,
            true,
        )?;
        write(format!("latency-cdf-{}.svg", t.file_label()), svg)?;
    }
    Ok(written)
}

/// The kill sweep: one job per point and transport, its table, JSON and plot.
fn drive_kill(o: &Opts, nodes: &Nodes) -> Result<bool, String> {
    let mut rows = Vec::new();
    for &point in &o.points {
        for t in &o.transports {
            eprintln!(
                "rmca-faults: kill to loss={point} after {} s over {}",
                o.kill_after, t.label
            );
            rows.push(kill::job(nodes, point, t)?);
        }
    }
    if o.json {
        for r in &rows {
            println!("{r}");
        }
        eprint!("{}", kill::table(&rows));
    } else {
        print!("{}", kill::table(&rows));
    }
    if let Some(dir) = &o.plot {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let lines: Vec<plot::Line> = o
            .transports
            .iter()
            .map(|t| {
                let pts = rows
                    .iter()
                    .filter(|r| r["transport"] == t.label.as_str())
                    .filter_map(|r| {
                        let y = r["detect_ms"].as_f64().or(r["resumed_ms"].as_f64())?;
                        Some((r["point"].as_f64()?, y))
                    })
                    .collect();
                (t.label.clone(), pts)
            })
            .collect();
        let svg = plot::svg(
            &format!(
                "time from the kill to the error or to resumed traffic (seed {})",
                o.seed
            ),
            Kind::Kill.axis(),
            "ms",
            &lines,
            false,
        )?;
        let p = dir.join("kill.svg");
        std::fs::write(&p, svg).map_err(|e| format!("{}: {e}", p.display()))?;
        eprintln!("rmca-faults: wrote {}", p.display());
    }
    let mut clean = true;
    for r in &rows {
        let bad = r["delivered_bad"].as_u64().unwrap_or(0);
        let failed = r["status"]
            .as_str()
            .is_some_and(|s| s.starts_with("failed"));
        if failed || bad > 0 {
            clean = false;
            eprintln!(
                "FAILED: kill to loss={} over {}: {bad} bad deliveries, {}; reproduce with: \
                 rmca-faults --sweep kill --points {} --transports '{}' --seed {} \
                 --kill-after {} --kill-run {}",
                r["point"],
                r["transport"].as_str().unwrap_or(""),
                r["status"].as_str().unwrap_or(""),
                r["point"],
                r["spec"].as_str().unwrap_or(""),
                o.seed,
                o.kill_after,
                o.kill_run
            );
        }
    }
    Ok(clean)
}

fn drive(o: &Opts) -> Result<bool, String> {
    let kind = o.sweep.expect("checked by parse_opts");
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| e.to_string())?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("needs root (network namespaces and TUN devices)".into());
    }
    let mut runners: Vec<Runner> = o.transports.iter().map(|t| t.runner).collect();
    runners.dedup();
    let kit = if runners.iter().any(|r| *r != Runner::Rmca) {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/faults/peer.c");
        Some(peers::PeerKit::new(&runners, &src)?)
    } else {
        None
    };
    let nodes = Nodes::up(o)?;
    if kind == Kind::Kill {
        return drive_kill(o, &nodes);
    }
    let mut rows = Vec::new();
    for &point in &o.points {
        let spec = kind.spec(point, o.burst_len, &o.base);
        for t in &o.transports {
            eprintln!(
                "rmca-faults: {} = {point} [{spec}] over {}",
                kind.name(),
                t.label
            );
            let job = nodes.job(&spec, t, kit.as_ref())?;
            if job.sizes.is_empty() {
                rows.push(row(o, point, &spec, t, None, &job));
            }
            for s in &job.sizes {
                rows.push(row(o, point, &spec, t, Some(s), &job));
            }
        }
    }
    drop(nodes);
    if o.json {
        for r in &rows {
            println!("{r}");
        }
        eprint!("{}", table(&rows));
    } else {
        print!("{}", table(&rows));
    }
    if let Some(dir) = &o.plot {
        for p in plots(o, kind, &rows, dir)? {
            eprintln!("rmca-faults: wrote {}", p.display());
        }
    }
    let mut clean = true;
    for r in &rows {
        let bad = r["delivered_bad"].as_u64();
        let timed_out = r["status"]
            .as_str()
            .is_some_and(|s| s.starts_with("timeout"));
        // fi_pingpong checks nothing: its rows have no delivery counts to judge.
        let unchecked = r["base"] == "rxd";
        let ok = r["status"].as_str().is_some_and(|s| s.starts_with("ok"));
        if !timed_out && (!ok || (!unchecked && bad != Some(0))) {
            clean = false;
            eprintln!(
                "FAILED: {} = {} over {}: {} bad deliveries, {}; reproduce with: rmca-faults \
                 --sweep {} --points {} --transports '{}' --seed {} --sizes {} --lat-iters {} \
                 --bw-bytes {} --window {} --burst-len {}{}",
                kind.name(),
                r["point"],
                r["transport"].as_str().unwrap_or(""),
                bad.map_or("unknown".into(), |b| b.to_string()),
                r["status"].as_str().unwrap_or(""),
                kind.name(),
                r["point"],
                r["spec"].as_str().unwrap_or(""),
                o.seed,
                o.sizes
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                o.lat_iters,
                o.bw_bytes,
                o.window,
                o.burst_len,
                if o.base.is_empty() {
                    String::new()
                } else {
                    format!(" --base '{}'", o.base)
                }
            );
        }
    }
    Ok(clean)
}

fn main() {
    let o = parse_opts(std::env::args().skip(1).collect()).unwrap_or_else(|e| {
        eprintln!("rmca-faults: {e}\n{}", usage());
        exit(2)
    });
    if o.worker && o.kill_run_given {
        let p = worker::KillParams {
            size: o.sizes.iter().min().copied().unwrap_or(8),
            run_s: o.kill_run,
            seed: o.seed,
        };
        if let Err(e) = worker::run_kill(&p) {
            eprintln!("rmca-faults worker: {e}");
            exit(1);
        }
        return;
    }
    if o.worker {
        let p = worker::WorkerParams {
            sizes: o.sizes.clone(),
            lat_iters: o.lat_iters,
            bw_bytes: o.bw_bytes,
            window: o.window,
            seed: o.seed,
        };
        if let Err(e) = worker::run(&p) {
            eprintln!("rmca-faults worker: {e}");
            exit(1);
        }
        return;
    }
    match drive(&o) {
        Ok(true) => {}
        Ok(false) => exit(1),
        Err(e) => {
            eprintln!("rmca-faults: {e}");
            exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn options_and_refusals() {
        let o = parse_opts(args(
            "--sweep burst --points 0,0.1 --sizes 8,64k --transports dr+ud",
        ))
        .unwrap();
        assert_eq!(o.sizes, vec![8, 65536]);
        assert_eq!(o.points, vec![0.0, 0.1]);
        for (bad, want) in [
            ("--points 0.1", "--sweep is needed"),
            ("--sweep loss", "--points is needed"),
            ("--sweep loss --points 2", "a probability from 0 to 1"),
            ("--sweep loss --points x", "not a number"),
            ("--sweep loss --points 0.1 --sizes 4", "at least 8 bytes"),
            (
                "--sweep loss --points 0.1 --transports tcp",
                "BASE one of dr+ud",
            ),
            (
                "--sweep loss --points 0.1 --transports dr+ud[pml_dr_windw=8]",
                "unknown MCA parameter 'pml_dr_windw'",
            ),
            ("--sweep loss --points 0.1 --burst-len 0", "1 to 1e6"),
            ("--sweep snow --points 0.1", "valid are loss"),
        ] {
            let e = parse_opts(args(bad))
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn the_table_shows_caught_over_injected_and_bad_deliveries() {
        let r = json!({"point": 0.1, "transport": "dr+ud", "size": 8, "goodput_mbs": 1.5,
            "p50_us": 20.0, "p99_us": 100.0, "p999_us": 900.0, "retransmissions_per_msg": 0.2,
            "acks_per_msg": 0.9, "caught_corrupt": 3, "caught_duplicates": 5,
            "link": {"lost": 10, "packets": 100, "corrupted": 3, "duplicated": 4},
            "delivered_bad": 0, "status": "ok"});
        let t = table(&[r]);
        assert!(
            t.contains("dr+ud") && t.contains("10.0") && t.contains("3/3") && t.contains("5/4"),
            "{t}"
        );
    }
}
