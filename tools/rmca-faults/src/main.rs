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
mod plot;
mod stats;
mod sweep;
mod worker;

use std::path::{Path, PathBuf};
use std::process::{exit, Command};

use serde_json::{json, Value};

use sweep::Kind;

const USAGE: &str = "usage: rmca-faults --sweep KIND --points X,Y,... [options]   (as root)
  --sweep KIND        the impairment varied: loss, burst (Gilbert, mean burst --burst-len),
                      reorder (held back 1 ms), corrupt (UDP payload bits, checksum cleared),
                      dup, delay (points in us)
  --points LIST       its values (probabilities; for delay microseconds)
  --transports LIST   compared transports (default dr+ud,dr+rc,ob1+rc; soft verbs provider:
                      ud over UDP, rc over TCP); also ob1+ud (no reliability: loss-free
                      points only, as in Friedley07's comparison)
  --sizes LIST        message sizes in bytes, at least 8 (default 8,4096,65536; suffixes k, m)
  --base SPEC         rmca-impair impairments added at every point (e.g. delay=100us)
  --burst-len L       mean burst length in packets of --sweep burst (default 4)
  --seed N            seed of the emulator and the message contents (default 1)
  --lat-iters N       ping-pongs per size up to 4 KiB (default 1000; scaled down above)
  --bw-bytes B        bytes streamed per size for goodput (default 4m)
  --window W          messages in flight in the stream (default 16)
  --timeout S         per-job time limit (default 120); a job that exceeds it is reported as
                      a timeout (no goodput), not as a failure
  --json              one JSON object per row on stdout (the table goes to stderr)
  --plot DIR          write SVG plots there: goodput-SIZE.svg (goodput against the point, a
                      line per transport) and latency-cdf-TRANSPORT.svg (smallest size, a line
                      per point)
  --prefix P          namespace prefix of the nodes (default rfault)
  --script PATH       bench/impaired-link.sh (default: the one of this source tree)";

#[derive(Debug, Clone)]
struct Opts {
    worker: bool,
    sweep: Option<Kind>,
    points: Vec<f64>,
    transports: Vec<String>,
    sizes: Vec<usize>,
    base: String,
    burst_len: f64,
    seed: u64,
    lat_iters: usize,
    bw_bytes: usize,
    window: usize,
    timeout: u64,
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
        transports: ["dr+ud", "dr+rc", "ob1+rc"].map(str::to_owned).to_vec(),
        sizes: vec![8, 4096, 65536],
        base: String::new(),
        burst_len: 4.0,
        seed: 1,
        lat_iters: 1000,
        bw_bytes: 4 << 20,
        window: 16,
        timeout: 120,
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
            Long("transports") => {
                o.transports = val(&mut p)?.split(',').map(str::to_owned).collect()
            }
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
            Long("json") => o.json = true,
            Long("plot") => o.plot = Some(val(&mut p)?.into()),
            Long("prefix") => o.prefix = val(&mut p)?,
            Long("script") => o.script = val(&mut p)?.into(),
            Long("help") | Short('h') => {
                println!("{USAGE}");
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
        sweep::transport(t)?;
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
    transport: &str,
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
    // Corrupted datagrams the soft provider or btl-ud discard before dr sees them (a flipped
    // bit in their headers): caught too, below the PML.
    let below: u64 = BELOW_PML_DROPS.iter().filter_map(|n| c(n)).sum();
    json!({
        "sweep": o.sweep.map(Kind::name),
        "point": point,
        "impairment": spec,
        "seed": o.seed,
        "transport": transport,
        "size": size.map(|s| s["size"].clone()),
        "goodput_mbs": size.map(|s| s["goodput_mbs"].clone()),
        "p50_us": size.map(|s| s["p50_us"].clone()),
        "p99_us": size.map(|s| s["p99_us"].clone()),
        "p999_us": size.map(|s| s["p999_us"].clone()),
        "lat_samples": size.map(|s| s["lat_iters"].clone()),
        "retransmissions_per_msg": per_msg("pml.dr.retransmissions"),
        "acks_per_msg": per_msg("pml.dr.acks_sent"),
        "dr_timeouts": c("pml.dr.timeouts"),
        "caught_corrupt": match (c("pml.dr.csum_failures"), c("pml.dr.malformed")) {
            (Some(a), Some(b)) => json!(a + b + below),
            _ => Value::Null,
        },
        "caught_corrupt_by_dr": match (c("pml.dr.csum_failures"), c("pml.dr.malformed")) {
            (Some(a), Some(b)) => json!(a + b),
            _ => Value::Null,
        },
        "discarded_below_pml": below,
        "caught_duplicates": c("pml.dr.duplicates"),
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
        let n = Nodes { o };
        // Leftovers of an interrupted sweep would make `up` refuse.
        let _ = n.script().args(["down", &o.prefix]).output();
        let mut args = vec!["up".to_owned(), "2".into(), o.prefix.clone(), "--".into()];
        args.extend(n.emulator_args(""));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        n.checked(&a)?;
        Ok(n)
    }

    /// Runs the worker over the link impaired by `spec` under `transport`.
    fn job(&self, spec: &str, transport: &[(&str, &str)]) -> Result<JobResult, String> {
        let mut args = vec!["restart".to_owned(), self.o.prefix.clone(), "--".into()];
        args.extend(self.emulator_args(spec));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        self.checked(&a)?;
        let prof = std::env::temp_dir().join(format!("rmca-faults-{}.json", std::process::id()));
        let _ = std::fs::remove_file(&prof);
        let mut cmd = self.script();
        cmd.args(["run", &self.o.prefix, "--", "-n", "2", "--timeout"])
            .arg(self.o.timeout.to_string());
        for (k, v) in transport {
            cmd.args(["--mca", k, v]);
        }
        cmd.args(["--mca", "profile", "1", "--mca", "profile_json"])
            .arg(&prof);
        cmd.arg(std::env::current_exe().map_err(|e| e.to_string())?);
        cmd.args(["--worker", "--seed", &self.o.seed.to_string()]);
        let sizes: Vec<String> = self.o.sizes.iter().map(usize::to_string).collect();
        cmd.args(["--sizes", &sizes.join(",")]);
        cmd.args(["--lat-iters", &self.o.lat_iters.to_string()]);
        cmd.args(["--bw-bytes", &self.o.bw_bytes.to_string()]);
        cmd.args(["--window", &self.o.window.to_string()]);
        for (k, _) in std::env::vars() {
            if k.starts_with("RMCA_MCA_") {
                cmd.env_remove(k);
            }
        }
        let out = cmd.output().map_err(|e| format!("running the job: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let result: Option<Value> = stdout
            .lines()
            .find_map(|l| l.strip_prefix("faults-result "))
            .and_then(|j| serde_json::from_str(j).ok());
        let status = if out.status.success() && result.is_some() {
            "ok".to_owned()
        } else if stderr.contains("exceeded --timeout") {
            // Too slow to finish is a measurement (no goodput), not a wrong delivery.
            format!("timeout ({} s)", self.o.timeout)
        } else {
            // The worker's or the library's own words first, else the launcher's last line.
            let why = stderr
                .lines()
                .find(|l| l.contains("rmca-faults worker:") || l.contains("rror"))
                .or_else(|| stderr.lines().rev().find(|l| !l.trim().is_empty()))
                .unwrap_or("");
            format!("failed (exit {:?}): {why}", out.status.code())
        };
        let profile = std::fs::read_to_string(&prof)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| v["counters"].as_object().cloned())
            .unwrap_or_default();
        let _ = std::fs::remove_file(&prof);
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
        let r = result.unwrap_or(Value::Null);
        Ok(JobResult {
            status,
            sizes: r["sizes"].as_array().cloned().unwrap_or_default(),
            delivery: r.get("delivery").cloned(),
            messages: r["messages"].as_u64(),
            profile,
            link: Value::Object(link),
        })
    }
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
    let mut s = format!(
        "{:>8} {:>7} {:>6} {:>10} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7} {:>8} {:>8} {:>5}  {}\n",
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
            "{:>8} {:>7} {:>6} {:>10} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7} {:>8} {:>8} {:>5}  {}\n",
            r["point"].to_string(),
            r["transport"].as_str().unwrap_or(""),
            r["size"].as_u64().map_or("-".into(), |x| x.to_string()),
            fmt(&r["goodput_mbs"], 2),
            fmt(&r["p50_us"], 1),
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
                    .filter(|r| r["transport"] == t.as_str() && r["size"] == size)
                    .filter_map(|r| Some((r["point"].as_f64()?, r["goodput_mbs"].as_f64()?)))
                    .collect();
                (t.clone(), pts)
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
            .filter(|r| r["transport"] == t.as_str() && r["size"] == smallest)
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
            &format!("{t}: one-way latency CDF of {smallest}-byte ping-pongs"),
            "latency (us, log)",
            "fraction of messages",
            &lines,
            true,
        )?;
        write(format!("latency-cdf-{t}.svg"), svg)?;
    }
    Ok(written)
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
    let nodes = Nodes::up(o)?;
    let mut rows = Vec::new();
    for &point in &o.points {
        let spec = kind.spec(point, o.burst_len, &o.base);
        for t in &o.transports {
            let (name, mca) = sweep::transport(t)?;
            eprintln!(
                "rmca-faults: {} = {point} [{spec}] over {name}",
                kind.name()
            );
            let job = nodes.job(&spec, mca)?;
            if job.sizes.is_empty() {
                rows.push(row(o, point, &spec, name, None, &job));
            }
            for s in &job.sizes {
                rows.push(row(o, point, &spec, name, Some(s), &job));
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
        if !timed_out && (r["status"] != "ok" || bad != Some(0)) {
            clean = false;
            eprintln!(
                "FAILED: {} = {} over {}: {} bad deliveries, {}; reproduce with: rmca-faults \
                 --sweep {} --points {} --transports {} --seed {}{}",
                kind.name(),
                r["point"],
                r["transport"].as_str().unwrap_or(""),
                bad.map_or("unknown".into(), |b| b.to_string()),
                r["status"].as_str().unwrap_or(""),
                kind.name(),
                r["point"],
                r["transport"].as_str().unwrap_or(""),
                o.seed,
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
        eprintln!("rmca-faults: {e}\n{USAGE}");
        exit(2)
    });
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
                "valid are dr+ud",
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
