//! rmca-bench: OSU-style micro-benchmarks of rmca, several rmca configurations (`--conf`) side
//! by side, optionally with Open MPI, MPICH and libfabric rxd (`--vs`, `--peers`), with table,
//! JSON-lines and SVG output.
//!
//! `rmca-bench latency,bw -n 2 --runs 5 --vs --plot bench.svg`
//! `rmca-bench latency,bw --conf ob1+ud --conf dr+ud --peers rxd`
//! `rmca-bench --suite ud-scaling` (allconn and memory as the process count grows)
//!
//! The driver launches its own ranks: `rmca-run -n N [--mca ...] rmca-bench --worker ...`
//! (rmca-run is looked up next to this binary), and for `--vs` compiles bench/osu_like.c (embedded
//! in this binary) with mpicc.openmpi / mpicc.mpich and runs it with their launchers, alternating
//! configurations within every run so that machine noise hits them alike.
#![deny(unsafe_code)]

mod affinity;
mod bench;
mod conf;
mod memstat;
mod nodes;
mod peers;
mod report;
mod rxd;
mod udp;
mod worker;

use std::path::PathBuf;
use std::process::exit;

use bench::{Bench, Params};
use report::Results;

const USAGE: &str = "usage: rmca-bench BENCH[,BENCH...]|all [options]
       rmca-bench --suite NAME [options]

benchmarks: latency bw bibw msgrate allconn ringconn barrier allreduce
            osu_bw osu_bibw osu_mbw_mr (OSU 7's loops exactly: MPI_Waitall with statuses,
            one receive buffer, a 1-byte reply; bw/bibw/msgrate ignore statuses)
  (all: every one but ringconn and the osu_ ones)
  -n N               ranks (default 2)
  --procs LIST       process counts for allconn and ringconn, e.g. 2,4,8,16 (default: -n);
                     above the core count the ranks are oversubscribed (the table says so)
  --mca NAME VALUE   MCA parameter for every rmca configuration (repeatable)
  --conf SPEC        an rmca configuration to measure (repeatable; default one named 'rmca'
                     with --mca only). SPEC is a preset name, or NAME=ITEM,ITEM... where an
                     ITEM is key=value or a preset name; '+' in a value stands for ','
                     (btl=rc+self); with ';' between items values are literal
                     ('x=pml=ob1;btl=rc,self'). --mca applies first, the spec overrides it.
  --ratio A/B        ratio column of the medians of configurations A and B (repeatable;
                     default: dr+X/ob1+X pairs, dr+ud and ob1+ud over rxd and udp, and the first rmca configuration
                     over each MPI peer)
  --mem              allconn/ringconn also measure per-process memory: VmHWM and VmRSS
                     (/proc/self/status before finalize, max over ranks) and, for rmca, the
                     memory accounted by the framework profile (--mca profile 1, worst rank)
  --min BYTES        smallest message size (default 0; suffixes k, m)
  --max BYTES        largest message size (default 4m)
  --iters N          timed iterations up to 8 KiB, scaled down above (default 10000 for
                     latency, barrier, allreduce; 1000 for bw, bibw, msgrate)
  --window N         messages in flight for bw, bibw, msgrate (default 64)
  --misalign BYTES   start the send buffers of latency, bw, bibw and msgrate BYTES past a page
                     boundary, in rmca and in the peers (default 0: page-aligned, like the
                     receive buffers and like OSU's)
  --runs N           jobs per configuration; medians and [min..max] are reported (default 5)
  --vs               also run the peers: Open MPI (ob1/vader and UCX), MPICH and rmca's
                     MPI C interface (rmca-c) on bench/osu_like.c
  --peers LIST       peers to run (implies --vs; default ompi-vader,ompi-ucx,mpich,rmca-c,
                     where rmca-c is osu_like.c built with rmca's mpicc under rmca-run,
                     bound like the MPI peers (rmca-run --bind-to core); also
                     ompi-tcp: Open MPI ob1 over tcp,self,vader (a default with --nodes);
                     rxd: libfabric reliable datagrams over UDP through fi_pingpong, latency
                     and bw only, one message in flight; udp: a raw UDP ping-pong between
                     two processes of this binary on 127.0.0.1, busy-polling, latency and
                     ping-pong bw, the floor under any UD path)
  --suite NAME       a preset experiment (its options come first; later options override):
SUITES
  --json             print one JSON object per line (the tables go to stderr)
  --plot FILE.svg    draw the size sweeps (log-log) into FILE.svg
  --no-bind          do not bind ranks to cores (default: rank r on core r % ncores)
  --timeout S        per-job time limit in seconds (default 600)
  --nodes A,B,...    spread every job over these network-namespace nodes (as root; make them
                     with bench/netns-cluster.sh up N): ranks in blocks of ceil(N/nodes) per
                     node in order, as rmca-run places them; rmca-run (--hosts, --launch-agent
                     'ip netns exec {node} {cmd}'), Open MPI (rsh launcher) and MPICH (hydra ssh
                     launcher) start in the first node and reach the others through
                     'ip netns exec'; nothing is bound to cores; every rank reports its
                     namespace and a job whose ranks are elsewhere fails. --vs then runs
                     ompi-tcp (ob1 over tcp,self,vader), ompi-ucx, mpich and rmca-c
                     (Debian's MPICH is ch4:ucx, whose UCX judges the namespace nodes one
                     machine and uses shared memory between them: see bench/RESULTS.md)

presets for --conf:
PRESETS";

/// `--suite` experiments: name, what it measures, the options it stands for.
const SUITES: &[(&str, &str, &str)] = &[
    (
        "osu",
        "OSU 7's windowed loops (osu_bw, osu_bibw, osu_mbw_mr) and latency, 1 B to 1 MiB, \
         next to Open MPI (vader), MPICH and rmca's C interface",
        "osu_bw,osu_bibw,osu_mbw_mr,latency --min 1 --max 1m --runs 5 --conf ob1+shm \
         --peers ompi-vader,mpich,rmca-c",
    ),
    (
        "ud-reliability",
        "guaranteed delivery over UD: latency and bandwidth, ob1 and dr over rc and ud, vs rxd",
        "latency,bw --min 8 --max 1m --iters 200 --runs 3 \
         --conf ob1+rc --conf dr+rc --conf ob1+ud --conf dr+ud --peers rxd",
    ),
    (
        "ud-scaling",
        "UD against RC as jobs grow: allconn, init and memory per process vs process count",
        "allconn --procs 2,4,8,16 --mem --conf rc --conf rc+srq --conf ud --runs 3",
    ),
    (
        "wqe",
        "send-WQE budget and message coalescing: 8 B message rate with btl_rc_send_wqes 5, 10, \
         200, coalescing off/on",
        "msgrate --min 8 --max 8 --iters 200 --runs 3 \
         --conf wqe5=ob1+rc,btl_rc_send_wqes=5,btl_rc_coalescing=0 \
         --conf wqe5+coal=ob1+rc,btl_rc_send_wqes=5,btl_rc_coalescing=1 \
         --conf wqe10=ob1+rc,btl_rc_send_wqes=10,btl_rc_coalescing=0 \
         --conf wqe10+coal=ob1+rc,btl_rc_send_wqes=10,btl_rc_coalescing=1 \
         --conf wqe200=ob1+rc,btl_rc_send_wqes=200,btl_rc_coalescing=0 \
         --conf wqe200+coal=ob1+rc,btl_rc_send_wqes=200,btl_rc_coalescing=1 \
         --ratio wqe5+coal/wqe5 --ratio wqe10+coal/wqe10 --ratio wqe200+coal/wqe200 \
         --ratio wqe5+coal/wqe200",
    ),
    (
        "rc-mem",
        "shared receive queue and adaptive eager RDMA: memory per process vs process count: \
         per-peer queues, SRQ, SRQ + eager RDMA",
        "allconn --procs 2,4,8,16 --mem --conf rc --conf rc+srq --conf rc+srq+erdma --runs 3 \
         --ratio rc+srq/rc --ratio rc+srq+erdma/rc+srq",
    ),
    (
        "rc-conn",
        "on-demand connection management: on-demand vs static connections, ring and all-to-all \
         patterns",
        "allconn,ringconn --procs 2,4,8,16 --mem --runs 3 \
         --conf on_demand=rc,btl_rc_connect=on_demand --conf static=rc,btl_rc_connect=static \
         --ratio on_demand/static",
    ),
];

/// Earlier `--suite` names, still accepted: `bench/RESULTS.md` records runs under them.
const SUITE_ALIASES: &[(&str, &str)] = &[
    ("seed003-lat", "ud-reliability"),
    ("seed003-conn", "ud-scaling"),
];

fn usage() -> String {
    let suites: Vec<String> = SUITES
        .iter()
        .map(|(n, d, a)| {
            format!(
                "                     {n}: {d}\n                       = {}",
                a.split_whitespace().collect::<Vec<_>>().join(" ")
            )
        })
        .collect();
    USAGE
        .replace("SUITES", &suites.join("\n"))
        .replace("PRESETS", &conf::describe_presets())
}

/// Replace every `--suite NAME` by the options it stands for.
fn expand_suites(args: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--suite" {
            let name = it.next().ok_or("--suite needs a name")?;
            let name: &str = SUITE_ALIASES
                .iter()
                .find(|(old, _)| old == name)
                .map_or(name, |(_, new)| new);
            let (_, _, expansion) =
                SUITES.iter().find(|(n, _, _)| *n == name).ok_or_else(|| {
                    format!(
                        "unknown suite '{name}': valid are {}",
                        SUITES.iter().map(|s| s.0).collect::<Vec<_>>().join(", ")
                    )
                })?;
            // The suite's options first, so that the user's later ones override them; its
            // benchmark list is positional, so it must lead.
            let mut mine: Vec<String> = expansion.split_whitespace().map(str::to_owned).collect();
            mine.append(&mut out);
            out = mine;
        } else {
            out.push(a.clone());
        }
    }
    Ok(out)
}

/// Command line of the driver.
#[derive(Debug)]
struct Opts {
    benches: Vec<Bench>,
    ranks: usize,
    procs: Vec<usize>,
    mca: Vec<(String, String)>,
    confs: Vec<conf::Conf>,
    ratios: Vec<(String, String)>,
    mem: bool,
    min: usize,
    max: usize,
    iters: Option<usize>,
    window: usize,
    misalign: usize,
    runs: usize,
    vs: bool,
    peers: Vec<String>,
    json: bool,
    plot: Option<PathBuf>,
    bind: bool,
    timeout_s: u64,
    nodes: Vec<String>,
}

fn parse_size(s: &str) -> Result<usize, String> {
    rmca::framework::params::parse_size(s)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("'{s}' is not a size (e.g. 0, 64, 8k, 4m)"))
}

fn parse_num(flag: &str, s: &str) -> Result<usize, String> {
    s.parse()
        .map_err(|_| format!("{flag}: '{s}' is not a number"))
}

fn parse_opts(args: &[String]) -> Result<Opts, String> {
    use lexopt::prelude::*;
    let args = expand_suites(args)?;
    // `--mca NAME VALUE` as every rmca tool reads it (a value may start with '-').
    let (settings, rest) = rmca::framework::params::cmdline_settings(&args)?;
    let mut o = Opts {
        benches: Vec::new(),
        ranks: 2,
        procs: Vec::new(),
        mca: settings.into_iter().map(|s| (s.name, s.value)).collect(),
        confs: Vec::new(),
        ratios: Vec::new(),
        mem: false,
        min: 0,
        max: 4 << 20,
        iters: None,
        window: 64,
        misalign: 0,
        runs: 5,
        vs: false,
        peers: peers::DEFAULT.iter().map(|s| s.to_string()).collect(),
        json: false,
        plot: None,
        bind: true,
        timeout_s: 600,
        nodes: Vec::new(),
    };
    let mut peers_given = false;
    // Open MPI's single-dash `-np` (lexopt would read it as `-n p`).
    let rest = rest
        .into_iter()
        .map(|a| if a == "-np" { "--np".to_owned() } else { a });
    let mut p = lexopt::Parser::from_args(rest);
    // The value of the option just read, as text; `what` names it in errors.
    fn value(p: &mut lexopt::Parser, what: &str) -> Result<String, String> {
        let v = p.value().map_err(|_| format!("{what} needs a value"))?;
        v.into_string()
            .map_err(|v| format!("{what}: {v:?} is not valid UTF-8"))
    }
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => return Err(String::new()),
            Short('n') | Long("np") => o.ranks = parse_num("-n", &value(&mut p, "-n")?)?,
            Long("procs") => {
                let list = value(&mut p, "--procs (a list, e.g. 2,4,8,16)")?;
                o.procs = list
                    .split(',')
                    .map(|p| match p.trim().parse::<usize>() {
                        Ok(n) if n >= 1 => Ok(n),
                        _ => Err(format!("--procs: '{p}' is not a process count (1 or more)")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            Long("conf") => {
                let c = conf::parse(&value(&mut p, "--conf (a spec)")?)?;
                if o.confs.iter().any(|e| e.name == c.name) {
                    return Err(format!("--conf: the name '{}' is used twice", c.name));
                }
                o.confs.push(c);
            }
            Long("ratio") => {
                let r = value(&mut p, "--ratio (A/B)")?;
                let (a, b) = r
                    .split_once('/')
                    .filter(|(a, b)| !a.is_empty() && !b.is_empty())
                    .ok_or_else(|| format!("--ratio '{r}': expected A/B (configuration names)"))?;
                o.ratios.push((a.to_owned(), b.to_owned()));
            }
            Long("mem") => o.mem = true,
            Long("min") => o.min = parse_size(&value(&mut p, "--min (a size)")?)?,
            Long("max") => o.max = parse_size(&value(&mut p, "--max (a size)")?)?,
            Long("iters") => o.iters = Some(parse_num("--iters", &value(&mut p, "--iters")?)?),
            Long("window") => o.window = parse_num("--window", &value(&mut p, "--window")?)?,
            Long("misalign") => {
                o.misalign = parse_num("--misalign", &value(&mut p, "--misalign")?)?;
            }
            Long("runs") => o.runs = parse_num("--runs", &value(&mut p, "--runs")?)?,
            Long("vs") => o.vs = true,
            Long("peers") => {
                let list = value(&mut p, "--peers (a list)")?;
                o.peers = list.split(',').map(str::to_owned).collect();
                o.vs = true;
                peers_given = true;
                if let Some(bad) = o.peers.iter().find(|p| !peers::KNOWN.contains(&p.as_str())) {
                    return Err(format!(
                        "unknown peer '{bad}': valid peers are {}",
                        peers::KNOWN.join(", ")
                    ));
                }
            }
            Long("json") => o.json = true,
            Long("plot") => o.plot = Some(PathBuf::from(value(&mut p, "--plot (a file name)")?)),
            Long("no-bind") => o.bind = false,
            Long("nodes") => {
                let list = value(&mut p, "--nodes (node names, e.g. rmcan0,rmcan1)")?;
                o.nodes = list.split(',').map(|n| n.trim().to_owned()).collect();
                for (i, n) in o.nodes.iter().enumerate() {
                    nodes::check_node_name(n)?;
                    if o.nodes[..i].contains(n) {
                        return Err(format!("--nodes: '{n}' is listed twice"));
                    }
                }
            }
            Long("timeout") => {
                o.timeout_s = parse_num("--timeout", &value(&mut p, "--timeout")?)? as u64;
            }
            Value(v) if o.benches.is_empty() => {
                let list = v
                    .into_string()
                    .map_err(|v| format!("benchmark list {v:?} is not valid UTF-8"))?;
                for name in list.split(',') {
                    if name == "all" {
                        o.benches.extend(Bench::ALL);
                    } else {
                        o.benches.push(Bench::parse(name).ok_or_else(|| {
                            format!(
                                "unknown benchmark '{name}': valid are {} and all",
                                Bench::KNOWN.map(|b| b.name()).join(", ")
                            )
                        })?);
                    }
                }
            }
            other => return Err(other.unexpected().to_string()),
        }
    }
    if o.benches.is_empty() {
        return Err("no benchmark given".into());
    }
    if o.ranks < 2 && o.benches.iter().any(|b| b.is_point_to_point()) {
        return Err(format!(
            "point-to-point benchmarks need at least 2 ranks (-n {})",
            o.ranks
        ));
    }
    if o.ranks == 0 || o.runs == 0 || o.window == 0 || o.iters == Some(0) {
        return Err("-n, --runs, --window and --iters must be at least 1".into());
    }
    if o.misalign >= 4096 {
        return Err(format!(
            "--misalign {}: must be below the page size (0..4096)",
            o.misalign
        ));
    }
    if o.min > o.max {
        return Err(format!("--min {} is larger than --max {}", o.min, o.max));
    }
    if o.procs.is_empty() {
        o.procs = vec![o.ranks];
    }
    if !o.nodes.is_empty() {
        if !peers_given {
            o.peers = peers::DEFAULT_NODES.iter().map(|s| s.to_string()).collect();
        }
        if let Some(bad) = o
            .peers
            .iter()
            .find(|p| !peers::NODE_CAPABLE.contains(&p.as_str()))
        {
            return Err(format!(
                "peer '{bad}' cannot span --nodes: valid peers there are {}",
                peers::NODE_CAPABLE.join(", ")
            ));
        }
    }
    let mut names: Vec<String> = o.confs.iter().map(|c| c.name.clone()).collect();
    if names.is_empty() {
        names.push("rmca".into());
    }
    if o.vs {
        names.extend(o.peers.iter().cloned());
    }
    for (a, b) in &o.ratios {
        if let Some(bad) = [a, b].into_iter().find(|n| !names.contains(n)) {
            return Err(format!(
                "--ratio {a}/{b}: '{bad}' is not a configuration of this run (have: {})",
                names.join(", ")
            ));
        }
    }
    Ok(o)
}

fn default_iters(b: Bench) -> usize {
    match b {
        Bench::Bw
        | Bench::Bibw
        | Bench::Msgrate
        | Bench::OsuBw
        | Bench::OsuBibw
        | Bench::OsuMbwMr => 1000,
        Bench::Allconn | Bench::Ringconn => 1,
        _ => 10_000,
    }
}

/// A JSON line of `json_lines` with `mca` set to the parameters of its own configuration
/// (`--mca` merged with its `--conf` spec) when it is one of `confs`.
fn with_own_params(line: &str, confs: &serde_json::Map<String, serde_json::Value>) -> String {
    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(line) else {
        return line.to_owned();
    };
    let own = v
        .get("config")
        .and_then(|c| c.as_str())
        .and_then(|c| confs.get(c))
        .cloned();
    if let (Some(own), Some(o)) = (own, v.as_object_mut()) {
        if let (Some(serde_json::Value::Object(m)), serde_json::Value::Object(p)) =
            (o.get_mut("mca"), own)
        {
            m.extend(p);
        }
    }
    v.to_string()
}

/// The default ratio columns: dr+X over ob1+X, dr+ud and ob1+ud over rxd and udp, and the first rmca
/// configuration over each MPI peer.
fn default_ratios(rmca: &[String], peers: &[String]) -> Vec<(String, String)> {
    let mut r = Vec::new();
    for a in rmca {
        if let Some(x) = a.strip_prefix("dr+") {
            let b = format!("ob1+{x}");
            if rmca.contains(&b) {
                r.push((a.clone(), b));
            }
        }
    }
    for dgram in ["rxd", "udp"] {
        if peers.iter().any(|p| p == dgram) {
            for a in rmca
                .iter()
                .filter(|a| a.as_str() == "dr+ud" || a.as_str() == "ob1+ud")
            {
                r.push((a.clone(), dgram.into()));
            }
        }
    }
    if let Some(first) = rmca.first() {
        for p in peers
            .iter()
            .filter(|p| p.as_str() != "rxd" && p.as_str() != "udp")
        {
            r.push((first.clone(), p.clone()));
        }
    }
    r
}

/// `--worker BENCH MIN MAX ITERS WINDOW MISALIGN [mem] [--no-bind]`: the in-rank side.
fn worker_main(args: &[String]) -> ! {
    let parsed = (|| {
        let bench = Bench::parse(args.first()?)?;
        let n = |i: usize| args.get(i)?.parse::<usize>().ok();
        let p = Params {
            min: n(1)?,
            max: n(2)?,
            iters: n(3)?.max(1),
            window: n(4)?.max(1),
            misalign: n(5).filter(|&m| m < 4096)?,
        };
        Some((
            bench,
            p,
            !args.iter().any(|a| a == "--no-bind"),
            args.iter().skip(6).any(|a| a == "mem"),
        ))
    })();
    let Some((bench, p, bind, mem)) = parsed else {
        eprintln!(
            "rmca-bench --worker BENCH MIN MAX ITERS WINDOW MISALIGN [mem] [--no-bind]: bad arguments {args:?}"
        );
        exit(2);
    };
    match worker::run(bench, &p, bind, mem) {
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
    if args.first().map(String::as_str) == Some("--udp-peer") {
        match udp::peer_main(&args[1..]) {
            Ok(()) => exit(0),
            Err(e) => {
                eprintln!("rmca-bench --udp-peer: {e}");
                exit(1)
            }
        }
    }
    let o = match parse_opts(&args) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            println!("{}", usage());
            return;
        }
        Err(e) => {
            eprintln!("rmca-bench: {e}\n\n{}", usage());
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
    let mut configs = Vec::new();
    if o.confs.is_empty() {
        configs.push(peers::Config::rmca("rmca", &dir, &exe, &o.mca)?);
    }
    for c in &o.confs {
        // --mca first, the configuration's own parameters override it.
        let mut mca: Vec<(String, String)> = o
            .mca
            .iter()
            .filter(|(k, _)| !c.mca.iter().any(|(ck, _)| ck == k))
            .cloned()
            .collect();
        mca.extend(c.mca.iter().cloned());
        configs.push(peers::Config::rmca(&c.name, &dir, &exe, &mca)?);
    }
    let rmca_names: Vec<String> = configs.iter().map(|c| c.name.clone()).collect();
    let mut peer_names = Vec::new();
    if o.vs {
        for name in &o.peers {
            match peers::Config::peer(name, &dir) {
                Ok(c) => {
                    peer_names.push(c.name.clone());
                    configs.push(c);
                }
                Err(e) => eprintln!("rmca-bench: skipping {name}: {e}"),
            }
        }
    }
    let names: Vec<String> = configs.iter().map(|c| c.name.clone()).collect();
    let ratios = if o.ratios.is_empty() {
        default_ratios(&rmca_names, &peer_names)
    } else {
        o.ratios
            .iter()
            .filter(|(a, b)| names.contains(a) && names.contains(b))
            .cloned()
            .collect()
    };
    let mut results = Results {
        configs: names,
        ratios,
        ..Default::default()
    };
    let ropts = peers::RunOpts {
        bind: o.bind,
        timeout_s: o.timeout_s,
        mem: o.mem,
        nodes: o.nodes.clone(),
    };
    if !o.nodes.is_empty() {
        nodes::check_nodes_exist(&o.nodes)?;
    }
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let mut failed = 0usize;
    for run in 0..o.runs {
        for &bench in &o.benches {
            let p = Params {
                min: o.min,
                max: o.max,
                iters: o.iters.unwrap_or_else(|| default_iters(bench)),
                window: o.window,
                misalign: o.misalign,
            };
            let counts = if bench.sweeps_procs() {
                o.procs.clone()
            } else {
                vec![o.ranks]
            };
            for &n in &counts {
                for c in configs.iter().filter(|c| c.supports(bench)) {
                    // Progress goes to stderr, also with --json (whose stream is stdout).
                    eprintln!(
                        "run {}/{}: {} on {} ({n} ranks)",
                        run + 1,
                        o.runs,
                        bench.name(),
                        c.name
                    );
                    // A failed job is reported and its figures are missing; the others go on.
                    let lines = match c.run(bench, &p, n, &ropts) {
                        Ok(l) => l,
                        Err(e) => {
                            eprintln!("rmca-bench: {} {} -n {n}: {e}", c.name, bench.name());
                            failed += 1;
                            continue;
                        }
                    };
                    for (size, figures) in lines {
                        let x = if bench.sweeps_procs() { n } else { size };
                        results.add(bench, &c.name, x, &figures);
                    }
                }
            }
        }
    }
    let mca: serde_json::Map<String, serde_json::Value> = o
        .mca
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    let confs: serde_json::Map<String, serde_json::Value> = o
        .confs
        .iter()
        .map(|c| {
            let m: serde_json::Map<String, serde_json::Value> = c
                .mca
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into()))
                .collect();
            (c.name.clone(), serde_json::Value::Object(m))
        })
        .collect();
    let oversubscribed = o.procs.iter().any(|&n| n > cores);
    for &bench in &o.benches {
        let mut note = String::new();
        if bench.sweeps_procs() && oversubscribed {
            note = format!(
                "note: {cores} cores: jobs with more than {cores} ranks are oversubscribed (busy-polling ranks share cores)\n"
            );
        }
        if !o.nodes.is_empty() {
            note.push_str(&format!(
                "note: ranks in blocks over {} namespace nodes ({}), not bound to cores\n",
                o.nodes.len(),
                o.nodes.join(",")
            ));
        }
        let table = format!("{}{note}", results.table(bench, o.ranks, o.runs));
        if o.json {
            let ctx = serde_json::json!({
                "ranks": o.ranks,
                "runs": o.runs,
                "window": o.window,
                "misalign": o.misalign,
                "iters": o.iters.unwrap_or_else(|| default_iters(bench)),
                "bind": o.bind && o.nodes.is_empty(),
                "nodes": o.nodes,
                "mca": mca,
                "cores": cores,
            });
            for l in results.json_lines(bench, &ctx) {
                println!("{}", with_own_params(&l, &confs));
            }
            // The table still goes to the terminal, out of the way of the JSON stream.
            eprint!("{table}");
        } else {
            print!("{table}");
        }
    }
    if let Some(path) = &o.plot {
        std::fs::write(path, results.svg(&o.benches, o.ranks)?)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        if !o.json {
            eprintln!("plot written to {}", path.display());
        }
    }
    if failed > 0 {
        return Err(format!(
            "{failed} job(s) failed (their figures are missing from the tables)"
        ));
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
        // The forms a CLI parser accepts: attached values, `=`, Open MPI's -np, a negative
        // --mca value.
        let o = parse_opts(&args("bw -n4 --max=1m --min=8 --mca btl_x -1")).unwrap();
        assert_eq!((o.ranks, o.min, o.max), (4, 8, 1 << 20));
        assert_eq!(o.mca, vec![("btl_x".to_owned(), "-1".to_owned())]);
        assert_eq!(parse_opts(&args("bw -np 3")).unwrap().ranks, 3);
        assert!(parse_opts(&args("bw --runs"))
            .unwrap_err()
            .contains("--runs needs a value"));
        assert!(parse_opts(&args("bw --frobnicate"))
            .unwrap_err()
            .contains("--frobnicate"));
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
    fn confs_ratios_and_procs() {
        let o = parse_opts(&args(
            "allconn --procs 2,4,8 --conf ob1+ud --conf dr+ud --conf x=ob1+rc,btl_rc_send_wqes=5 --mem --ratio x/ob1+ud",
        ))
        .unwrap();
        assert_eq!(o.procs, vec![2, 4, 8]);
        assert!(o.mem);
        let names: Vec<&str> = o.confs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, vec!["ob1+ud", "dr+ud", "x"]);
        assert_eq!(o.ratios, vec![("x".to_owned(), "ob1+ud".to_owned())]);
        assert!(parse_opts(&args("latency --conf dr+ud --conf dr+ud"))
            .unwrap_err()
            .contains("used twice"));
        assert!(
            parse_opts(&args("latency --conf dr+ud --ratio dr+ud/ob1+ud"))
                .unwrap_err()
                .contains("not a configuration")
        );
        assert!(parse_opts(&args("allconn --procs 2,0")).is_err());
        assert!(parse_opts(&args("latency --ratio ab")).is_err());
        // --peers implies --vs and accepts rxd.
        let o = parse_opts(&args("latency --conf dr+ud --peers rxd --ratio dr+ud/rxd")).unwrap();
        assert!(o.vs && o.peers == vec!["rxd".to_owned()]);
    }

    #[test]
    fn default_ratios_pair_dr_with_ob1_and_rxd() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let r = default_ratios(&s(&["ob1+ud", "dr+ud", "dr+rc"]), &s(&["rxd", "mpich"]));
        let r: Vec<String> = r.iter().map(|(a, b)| format!("{a}/{b}")).collect();
        assert_eq!(
            r,
            vec!["dr+ud/ob1+ud", "ob1+ud/rxd", "dr+ud/rxd", "ob1+ud/mpich"]
        );
        // The raw UDP floor gets its own ratios and is never the MPI-peer comparison.
        let r = default_ratios(&s(&["dr+ud"]), &s(&["rxd", "udp"]));
        let r: Vec<String> = r.iter().map(|(a, b)| format!("{a}/{b}")).collect();
        assert_eq!(r, vec!["dr+ud/rxd", "dr+ud/udp"]);
    }

    #[test]
    fn every_suite_parses_and_later_options_override() {
        for (name, _, _) in SUITES {
            let o = parse_opts(&args(&format!("--suite {name}")))
                .unwrap_or_else(|e| panic!("suite {name}: {e}"));
            assert!(!o.benches.is_empty() && !o.confs.is_empty(), "{name}");
        }
        let o = parse_opts(&args("--suite ud-scaling --runs 1 --procs 2")).unwrap();
        assert_eq!((o.runs, o.procs.clone()), (1, vec![2]));
        assert_eq!(o.benches, vec![Bench::Allconn]);
        assert!(parse_opts(&args("--suite nope"))
            .unwrap_err()
            .contains("ud-reliability"));
        assert!(usage().contains("rc+srq+erdma") && usage().contains("rc-conn"));
    }

    #[test]
    fn earlier_suite_names_expand_like_the_current_ones() {
        for (old, new) in SUITE_ALIASES {
            assert_eq!(
                expand_suites(&args(&format!("--suite {old} --runs 1"))),
                expand_suites(&args(&format!("--suite {new} --runs 1"))),
                "{old}"
            );
        }
        // The help text names each suite by what it measures.
        assert!(!usage().contains("seed"), "{}", usage());
    }

    #[test]
    fn json_lines_carry_their_own_configuration() {
        let confs = serde_json::json!({"dr+ud": {"pml": "dr", "btl": "ud,self"}});
        let confs = confs.as_object().unwrap();
        let l = r#"{"config":"dr+ud","mca":{"btl_ud_mtu":"1024"},"median":1.0}"#;
        let v: serde_json::Value = serde_json::from_str(&with_own_params(l, confs)).unwrap();
        assert_eq!(v["mca"]["pml"], "dr");
        assert_eq!(v["mca"]["btl_ud_mtu"], "1024");
        // A peer keeps the global parameters only.
        let l = r#"{"config":"rxd","mca":{},"median":1.0}"#;
        let v: serde_json::Value = serde_json::from_str(&with_own_params(l, confs)).unwrap();
        assert_eq!(v["mca"], serde_json::json!({}));
    }

    #[test]
    fn nodes_pick_the_peers_that_span_them() {
        let o = parse_opts(&args("allconn --procs 2,32 --vs --nodes n0,n1,n2")).unwrap();
        assert_eq!(o.nodes, vec!["n0", "n1", "n2"]);
        assert_eq!(o.peers, peers::DEFAULT_NODES);
        // Without --nodes the single-node peers stay the default.
        assert_eq!(
            parse_opts(&args("allconn --vs")).unwrap().peers,
            peers::DEFAULT
        );
        let o = parse_opts(&args(
            "allconn --nodes n0,n1 --peers mpich --ratio rmca/mpich",
        ))
        .unwrap();
        assert_eq!(o.peers, vec!["mpich"]);
        let e = parse_opts(&args("allconn --nodes n0,n1 --peers ompi-vader")).unwrap_err();
        assert!(
            e.contains("'ompi-vader' cannot span") && e.contains("ompi-tcp"),
            "{e}"
        );
        assert!(parse_opts(&args("allconn --nodes n0,n0"))
            .unwrap_err()
            .contains("listed twice"));
        assert!(parse_opts(&args("allconn --nodes n0,,n1"))
            .unwrap_err()
            .contains("not a node name"));
        assert!(parse_opts(&args("allconn --nodes"))
            .unwrap_err()
            .contains("--nodes"));
    }

    #[test]
    fn sizes_accept_suffixes() {
        assert_eq!(parse_size("0").unwrap(), 0);
        assert_eq!(parse_size("8K").unwrap(), 8192);
        assert_eq!(parse_size("4m").unwrap(), 4 << 20);
        assert!(parse_size("-1").is_err());
    }
}
