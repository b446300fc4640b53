//! rmca-bench: OSU-style micro-benchmarks of rmca, optionally side by side with Open MPI and
//! MPICH (`--vs`), with table, JSON-lines and SVG output.
//!
//! `rmca-bench latency,bw -n 2 --runs 5 --vs --plot bench.svg`
//!
//! The driver launches its own ranks: `rmca-run -n N [--mca ...] rmca-bench --worker ...`
//! (rmca-run is looked up next to this binary), and for `--vs` compiles bench/osu_like.c (embedded
//! in this binary) with mpicc.openmpi / mpicc.mpich and runs it with their launchers, alternating
//! configurations within every run so that machine noise hits them alike.
#![deny(unsafe_code)]

mod affinity;
mod bench;
mod peers;
mod report;
mod worker;

use std::path::PathBuf;
use std::process::exit;

use bench::{Bench, Params};
use report::Results;

const USAGE: &str = "usage: rmca-bench BENCH[,BENCH...]|all [options]

benchmarks: latency bw bibw msgrate allconn barrier allreduce (all: every one)
  -n N               ranks (default 2)
  --mca NAME VALUE   MCA parameter for the rmca ranks (repeatable)
  --min BYTES        smallest message size (default 0; suffixes k, m)
  --max BYTES        largest message size (default 4m)
  --iters N          timed iterations up to 8 KiB, scaled down above (default 10000 for
                     latency, barrier, allreduce; 1000 for bw, bibw, msgrate)
  --window N         messages in flight for bw, bibw, msgrate (default 64)
  --runs N           jobs per configuration; medians and [min..max] are reported (default 5)
  --vs               also run Open MPI (ob1/vader and UCX) and MPICH on bench/osu_like.c and
                     print the ratios rmca/peer
  --peers LIST       peers for --vs (default ompi-vader,ompi-ucx,mpich)
  --json             print one JSON object per line (the tables go to stderr)
  --plot FILE.svg    draw the size sweeps (log-log) into FILE.svg
  --no-bind          do not bind ranks to cores (default: rank r on core r % ncores)
  --timeout S        per-job time limit in seconds (default 600)";

/// Command line of the driver.
struct Opts {
    benches: Vec<Bench>,
    ranks: usize,
    mca: Vec<(String, String)>,
    min: usize,
    max: usize,
    iters: Option<usize>,
    window: usize,
    runs: usize,
    vs: bool,
    peers: Vec<String>,
    json: bool,
    plot: Option<PathBuf>,
    bind: bool,
    timeout_s: u64,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mul) = match t.strip_suffix(['k', 'm', 'g']) {
        Some(n) => (
            n,
            match t.as_bytes()[t.len() - 1] {
                b'k' => 1 << 10,
                b'm' => 1 << 20,
                _ => 1 << 30,
            },
        ),
        None => (t.as_str(), 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| format!("'{s}' is not a size (e.g. 0, 64, 8k, 4m)"))
}

fn parse_num(flag: &str, s: Option<&String>) -> Result<usize, String> {
    let s = s.ok_or_else(|| format!("{flag} needs a value"))?;
    s.parse()
        .map_err(|_| format!("{flag}: '{s}' is not a number"))
}

fn parse_opts(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        benches: Vec::new(),
        ranks: 2,
        mca: Vec::new(),
        min: 0,
        max: 4 << 20,
        iters: None,
        window: 64,
        runs: 5,
        vs: false,
        peers: peers::DEFAULT.iter().map(|s| s.to_string()).collect(),
        json: false,
        plot: None,
        bind: true,
        timeout_s: 600,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "-n" | "-np" => o.ranks = parse_num(a, it.next())?,
            "--mca" => {
                let (k, v) = (it.next(), it.next());
                match (k, v) {
                    (Some(k), Some(v)) => o.mca.push((k.clone(), v.clone())),
                    _ => return Err("--mca needs NAME VALUE".into()),
                }
            }
            "--min" => o.min = parse_size(it.next().ok_or("--min needs a size")?)?,
            "--max" => o.max = parse_size(it.next().ok_or("--max needs a size")?)?,
            "--iters" => o.iters = Some(parse_num(a, it.next())?),
            "--window" => o.window = parse_num(a, it.next())?,
            "--runs" => o.runs = parse_num(a, it.next())?,
            "--vs" => o.vs = true,
            "--peers" => {
                let list = it.next().ok_or("--peers needs a list")?;
                o.peers = list.split(',').map(str::to_owned).collect();
                if let Some(bad) = o
                    .peers
                    .iter()
                    .find(|p| !peers::DEFAULT.contains(&p.as_str()))
                {
                    return Err(format!(
                        "unknown peer '{bad}': valid peers are {}",
                        peers::DEFAULT.join(", ")
                    ));
                }
            }
            "--json" => o.json = true,
            "--plot" => o.plot = Some(PathBuf::from(it.next().ok_or("--plot needs a file name")?)),
            "--no-bind" => o.bind = false,
            "--timeout" => o.timeout_s = parse_num(a, it.next())? as u64,
            b if !b.starts_with('-') && o.benches.is_empty() => {
                for name in b.split(',') {
                    if name == "all" {
                        o.benches.extend(Bench::ALL);
                    } else {
                        o.benches.push(Bench::parse(name).ok_or_else(|| {
                            format!(
                                "unknown benchmark '{name}': valid are {} and all",
                                Bench::ALL.map(|b| b.name()).join(", ")
                            )
                        })?);
                    }
                }
            }
            other => return Err(format!("unexpected argument '{other}'")),
        }
    }
    if o.benches.is_empty() {
        return Err("no benchmark given".into());
    }
    if o.ranks < 2
        && o.benches
            .iter()
            .any(|b| matches!(b, Bench::Latency | Bench::Bw | Bench::Bibw | Bench::Msgrate))
    {
        return Err(format!(
            "point-to-point benchmarks need at least 2 ranks (-n {})",
            o.ranks
        ));
    }
    if o.ranks == 0 || o.runs == 0 || o.window == 0 || o.iters == Some(0) {
        return Err("-n, --runs, --window and --iters must be at least 1".into());
    }
    if o.min > o.max {
        return Err(format!("--min {} is larger than --max {}", o.min, o.max));
    }
    Ok(o)
}

fn default_iters(b: Bench) -> usize {
    match b {
        Bench::Bw | Bench::Bibw | Bench::Msgrate => 1000,
        Bench::Allconn => 1,
        _ => 10_000,
    }
}

/// `--worker BENCH MIN MAX ITERS WINDOW [--no-bind]`: the in-rank side.
fn worker_main(args: &[String]) -> ! {
    let parsed = (|| {
        let bench = Bench::parse(args.first()?)?;
        let n = |i: usize| args.get(i)?.parse::<usize>().ok();
        let p = Params {
            min: n(1)?,
            max: n(2)?,
            iters: n(3)?.max(1),
            window: n(4)?.max(1),
        };
        Some((bench, p, !args.iter().any(|a| a == "--no-bind")))
    })();
    let Some((bench, p, bind)) = parsed else {
        eprintln!(
            "rmca-bench --worker BENCH MIN MAX ITERS WINDOW [--no-bind]: bad arguments {args:?}"
        );
        exit(2);
    };
    match worker::run(bench, &p, bind) {
        Ok(()) => exit(0),
        Err(e) => {
            eprintln!("rmca-bench worker: {e}");
            exit(1)
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        worker_main(&args[1..]);
    }
    let o = match parse_opts(&args) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("rmca-bench: {e}\n\n{USAGE}");
            exit(2);
        }
    };
    if let Err(e) = drive(&o) {
        eprintln!("rmca-bench: {e}");
        exit(1);
    }
}

fn drive(o: &Opts) -> Result<(), String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot locate rmca-bench itself: {e}"))?;
    let dir = exe
        .parent()
        .ok_or("rmca-bench has no directory")?
        .to_path_buf();
    let mut configs = vec![peers::Config::rmca(&dir, &exe, &o.mca)?];
    if o.vs {
        for name in &o.peers {
            match peers::Config::peer(name, &dir) {
                Ok(c) => configs.push(c),
                Err(e) => eprintln!("rmca-bench: skipping {name}: {e}"),
            }
        }
    }
    let mut results = Results {
        configs: configs.iter().map(|c| c.name.clone()).collect(),
        ..Default::default()
    };
    for run in 0..o.runs {
        for &bench in &o.benches {
            let p = Params {
                min: o.min,
                max: o.max,
                iters: o.iters.unwrap_or_else(|| default_iters(bench)),
                window: o.window,
            };
            for c in &configs {
                if !o.json {
                    eprintln!("run {}/{}: {} on {}", run + 1, o.runs, bench.name(), c.name);
                }
                let lines = c.run(bench, &p, o.ranks, o.bind, o.timeout_s)?;
                for (size, figures) in lines {
                    results.add(bench, &c.name, size, &figures);
                }
            }
        }
    }
    let mca: serde_json::Map<String, serde_json::Value> = o
        .mca
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    for &bench in &o.benches {
        if o.json {
            let ctx = serde_json::json!({
                "ranks": o.ranks,
                "runs": o.runs,
                "window": o.window,
                "iters": o.iters.unwrap_or_else(|| default_iters(bench)),
                "bind": o.bind,
                "mca": mca,
            });
            for l in results.json_lines(bench, &ctx) {
                println!("{l}");
            }
            // The table still goes to the terminal, out of the way of the JSON stream.
            eprint!("{}", results.table(bench, o.ranks, o.runs));
        } else {
            print!("{}", results.table(bench, o.ranks, o.runs));
        }
    }
    if let Some(path) = &o.plot {
        std::fs::write(path, results.svg(&o.benches, o.ranks))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        if !o.json {
            eprintln!("plot written to {}", path.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn parses_a_full_command_line() {
        let o = parse_opts(&args("latency,bw -n 4 --mca btl self,shm --min 8 --max 64k --runs 3 --vs --json --plot x.svg --no-bind")).unwrap();
        assert_eq!(o.benches, vec![Bench::Latency, Bench::Bw]);
        assert_eq!((o.ranks, o.min, o.max, o.runs), (4, 8, 64 << 10, 3));
        assert_eq!(o.mca, vec![("btl".to_owned(), "self,shm".to_owned())]);
        assert!(o.vs && o.json && !o.bind && o.plot.is_some());
        assert_eq!(parse_opts(&args("all")).unwrap().benches.len(), 7);
    }

    #[test]
    fn rejects_bad_input_naming_the_valid_choices() {
        let e = parse_opts(&args("latncy")).err().unwrap();
        assert!(e.contains("latency, bw, bibw"), "{e}");
        assert!(parse_opts(&args("latency -n 1"))
            .err()
            .unwrap()
            .contains("at least 2 ranks"));
        assert!(parse_opts(&args("latency --max 4x"))
            .err()
            .unwrap()
            .contains("not a size"));
        assert!(parse_opts(&args("latency --vs --peers ompi,mpich"))
            .err()
            .unwrap()
            .contains("valid peers"));
        assert!(parse_opts(&args("latency --min 8 --max 4")).is_err());
        assert!(parse_opts(&args("")).is_err());
    }

    #[test]
    fn sizes_accept_suffixes() {
        assert_eq!(parse_size("0").unwrap(), 0);
        assert_eq!(parse_size("8K").unwrap(), 8192);
        assert_eq!(parse_size("4m").unwrap(), 4 << 20);
        assert!(parse_size("-1").is_err());
    }
}
