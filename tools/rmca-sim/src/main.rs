//! rmca-sim: the command line. See `rmca-sim --help`.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

use rmca_sim::memory::{dr_ud, ob1_rc};
use rmca_sim::net::{Loss, NetConfig};
use rmca_sim::params::Components;
use rmca_sim::report::{plot, Table};
use rmca_sim::sim::{Pattern, Sim, SimConfig, Stats};
use rmca_sim::{heap, SimError};

const INTRO: &str = "\
usage: rmca-sim COMMAND [options]

A deterministic discrete-event simulator driving pml-dr's own protocol core (one real
Connection per pair of virtual processes) over a modelled network, with btl-ud's receive pool
and btl-ud/btl-rc buffer memory from their own configuration code. Same seed, same output.
";

/// The commands and what each prints (each prints a table; --json prints JSON lines; --plot
/// FILE.svg draws it).
const COMMANDS: &[(&str, &str)] = &[
    (
        "memory",
        "memory per process vs process count: dr+ud, ob1+rc per-peer queues (P,32,16), \
         SRQ (S,256,64), per-peer+SRQ (P,256,32,16:S,65536,256,64,256,4096)",
    ),
    (
        "acks",
        "acknowledgement traffic and timer counts per process per second, steady stream",
    ),
    (
        "recovery",
        "recovery time after a burst loss (--bursts-ms) and peer-death detection time",
    ),
    (
        "failover",
        "vs process count: a BTL (path) killed silently, failed over to a second BTL \
         (detection, failover, messages re-sent); a peer death (detection); a burst loss \
         (recovery); every message delivered exactly once",
    ),
    (
        "alltoall",
        "pairwise all-to-all completion time vs process count (--method full, folded or both)",
    ),
    (
        "validate",
        "the simulator next to real rmca jobs (tools/rmca-sim/validate/pairwise.c over \
         dr+ud, soft provider) at --procs, same pattern, same parameters",
    ),
];

/// How an option takes its value.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// `--json`: no value.
    Flag,
    /// `--mca NAME VALUE`.
    Mca,
    /// `--NAME VALUE`, a number within (least, least allowed, most, the range in words).
    Num(f64, bool, f64, &'static str),
    /// `--NAME VALUE`, text checked by the command.
    Text,
}

/// One option: the single description the help text, the parser, the per-command check and
/// the range check are all derived from.
struct Opt {
    name: &'static str,
    arg: &'static str,
    kind: Kind,
    /// The commands that read it; empty: every command.
    cmds: &'static [&'static str],
    help: &'static str,
}

const ALL: &[&str] = &[];
const PROCS: Kind = Kind::Num(2.0, true, (1u64 << 20) as f64, "whole numbers 2 to 1048576");
const NONNEG: Kind = Kind::Num(0.0, true, f64::MAX, "a non-negative number");

const OPTIONS: &[Opt] = &[
    Opt {
        name: "procs",
        arg: "LIST",
        kind: PROCS,
        cmds: &["memory", "acks", "failover", "alltoall", "validate"],
        help: "process counts (memory: 2,4,...,16384; acks: 16,...,16384; failover: \
                 2,16,128,1024,4096; alltoall: 2,8,...,2048; validate: 2,4,8)",
    },
    Opt {
        name: "n",
        arg: "N",
        kind: PROCS,
        cmds: &["recovery"],
        help: "process count (default 64)",
    },
    Opt {
        name: "seed",
        arg: "S",
        kind: NONNEG,
        cmds: ALL,
        help: "seed (default 1)",
    },
    Opt {
        name: "mca",
        arg: "NAME VALUE",
        kind: Kind::Mca,
        cmds: ALL,
        help: "a pml_dr_*, btl_ud_* or btl_rc_* parameter (as rmca-run takes it)",
    },
    Opt {
        name: "mtu",
        arg: "BYTES",
        kind: NONNEG,
        cmds: ALL,
        help: "UD MTU (default 2048, InfiniBand's; the soft provider uses 65000)",
    },
    Opt {
        name: "latency-us",
        arg: "X",
        kind: Kind::Num(0.0, true, 1e6, "0 to 1000000 us"),
        cmds: ALL,
        help: "one-way latency (default 1.5)",
    },
    Opt {
        name: "bandwidth-gbs",
        arg: "X",
        kind: Kind::Num(0.0, false, 1e4, "above 0, at most 10000 GB/s"),
        cmds: ALL,
        help: "NIC bandwidth per direction in GB/s (default 3)",
    },
    Opt {
        name: "jitter-us",
        arg: "X",
        kind: Kind::Num(0.0, true, 1e6, "0 to 1000000 us"),
        cmds: ALL,
        help: "uniform extra delay per packet (default 0)",
    },
    Opt {
        name: "cpu-rx-ns",
        arg: "X",
        kind: Kind::Num(0.0, true, 1e9, "0 to 1000000000 ns"),
        cmds: ALL,
        help: "CPU time per received packet (default 1000)",
    },
    Opt {
        name: "cpu-tx-ns",
        arg: "X",
        kind: Kind::Num(0.0, true, 1e9, "0 to 1000000000 ns"),
        cmds: ALL,
        help: "CPU time per sent packet (default 500)",
    },
    Opt {
        name: "loss",
        arg: "SPEC",
        kind: Kind::Text,
        cmds: ALL,
        help: "none, bernoulli:P, ge:P_GB,P_BG[,LOSS_GOOD,LOSS_BAD] (default none)",
    },
    Opt {
        name: "size",
        arg: "BYTES",
        kind: Kind::Num(0.0, true, (1u64 << 30) as f64, "0 to 1073741824 bytes"),
        cmds: &["acks", "recovery", "failover", "alltoall", "validate"],
        help: "message size (default 8)",
    },
    Opt {
        name: "fanout",
        arg: "K",
        kind: Kind::Num(1.0, true, (1u64 << 20) as f64, "at least 1"),
        cmds: &["acks", "recovery", "failover"],
        help: "peers each process streams to (default 4, lowered to N-1 for small N)",
    },
    Opt {
        name: "interval-us",
        arg: "X",
        kind: Kind::Num(0.0, false, 1e6, "above 0, at most 1000000 us"),
        cmds: &["acks", "recovery", "failover"],
        help: "time between two messages to one peer (default 200)",
    },
    Opt {
        name: "duration-ms",
        arg: "X",
        kind: Kind::Num(0.0, false, 3.6e6, "above 0, at most 3600000 ms"),
        cmds: &["acks"],
        help: "streaming time (default 20)",
    },
    Opt {
        name: "bursts-ms",
        arg: "LIST",
        kind: Kind::Num(0.0, true, 3.6e6, "0 to 3600000 ms each"),
        cmds: &["recovery"],
        help: "burst lengths (default 0.1,1,5,20)",
    },
    Opt {
        name: "burst-ms",
        arg: "X",
        kind: Kind::Num(0.0, false, 3.6e6, "above 0, at most 3600000 ms"),
        cmds: &["failover"],
        help: "the burst loss's length (default 5)",
    },
    Opt {
        name: "job",
        arg: "FILE",
        kind: Kind::Text,
        cmds: &["failover"],
        help: "instead: validate against a measured job, the JSON lines of `rmca-faults --sweep \
               kill --points 1 --json` over dr+ud (error time vs the simulated peer-death \
               detection) and dr+ud+rc (resumed traffic vs the simulated failover), each row \
               simulated at 2 processes with the job's pml-dr parameters; a row outside 10% \
               fails",
    },
    Opt {
        name: "timeouts-ms",
        arg: "LIST",
        kind: NONNEG,
        cmds: &["recovery"],
        help: "pml_dr_peer_timeout values (default 1000,5000,30000)",
    },
    Opt {
        name: "method",
        arg: "M",
        kind: Kind::Text,
        cmds: &["alltoall"],
        help: "full (every process; O(N^2) memory and events), folded (process 0 alone, \
                 the others folded onto it by symmetry; no loss or jitter) or both (each, \
                 and their difference; default full)",
    },
    Opt {
        name: "losses",
        arg: "LIST",
        kind: Kind::Text,
        cmds: &["alltoall"],
        help: "instead of --loss: several loss processes separated by ';' (e.g. \
               'none;bernoulli:0.01;ge:0.01,0.25'), one completion column (and curve) each",
    },
    Opt {
        name: "death-ms",
        arg: "X",
        kind: NONNEG,
        cmds: &["alltoall"],
        help: "process n/2 dies at X ms (full method: the others fail their operations on it \
               once pml-dr declares it dead, pml_dr_peer_timeout after its silence)",
    },
    Opt {
        name: "iters",
        arg: "N",
        kind: Kind::Num(1.0, true, 1e7, "1 to 10000000"),
        cmds: &["validate"],
        help: "rounds of the pairwise exchange (default 2000)",
    },
    Opt {
        name: "rmca-run",
        arg: "PATH",
        kind: Kind::Text,
        cmds: &["validate"],
        help: "the launcher (default target/release/rmca-run)",
    },
    Opt {
        name: "program",
        arg: "PATH",
        kind: Kind::Text,
        cmds: &["validate"],
        help: "pairwise.c built with mpicc (default /tmp/rmca-sim-pairwise)",
    },
    Opt {
        name: "json",
        arg: "",
        kind: Kind::Flag,
        cmds: ALL,
        help: "JSON lines instead of the table",
    },
    Opt {
        name: "plot",
        arg: "FILE.svg",
        kind: Kind::Text,
        cmds: ALL,
        help: "draw the table's curves",
    },
];

fn opt(name: &str) -> Option<&'static Opt> {
    OPTIONS.iter().find(|o| o.name == name)
}

fn reads(o: &Opt, cmd: &str) -> bool {
    o.cmds.is_empty() || o.cmds.contains(&cmd)
}

/// The help text, from [`COMMANDS`] and [`OPTIONS`].
fn help() -> String {
    let mut h = format!("{INTRO}\ncommands (each prints a table; --json prints JSON lines; --plot FILE.svg draws it):\n");
    for (c, text) in COMMANDS {
        h += &wrap(&format!("  {c:<10} "), text);
    }
    h += "\noptions (the commands reading each in brackets, when not all):\n";
    for o in OPTIONS {
        let head = format!("--{} {}", o.name, o.arg);
        let which = if o.cmds.is_empty() {
            String::new()
        } else {
            format!(" [{}]", o.cmds.join(", "))
        };
        h += &wrap(
            &format!("  {:<22} ", head.trim_end()),
            &format!("{}{which}", o.help),
        );
    }
    h
}

/// `text` after `head`, wrapped at 96 columns, continuation lines indented to `head`'s width.
fn wrap(head: &str, text: &str) -> String {
    let mut out = head.to_owned();
    let mut col = head.len();
    for w in text.split_whitespace() {
        if col > head.len() && col + 1 + w.len() > 96 {
            out += &format!("\n{:1$}", "", head.len());
            col = head.len();
        } else if col > head.len() {
            out.push(' ');
            col += 1;
        }
        out += w;
        col += w.len();
    }
    out + "\n"
}

struct Opts {
    cmd: String,
    kv: BTreeMap<String, String>,
    mca: Vec<(String, String)>,
    json: bool,
}

fn parse_args(args: Vec<String>) -> Result<Opts, SimError> {
    let bad = |what: &str, value: &str, valid: &str| SimError::Invalid {
        what: what.into(),
        value: value.into(),
        valid: valid.into(),
    };
    let mut it = args.into_iter();
    let cmd = it.next().unwrap_or_default();
    let mut o = Opts {
        cmd,
        kv: BTreeMap::new(),
        mca: Vec::new(),
        json: false,
    };
    let known = COMMANDS.iter().any(|(c, _)| *c == o.cmd);
    while let Some(a) = it.next() {
        let Some(spec) = a.strip_prefix("--").and_then(opt) else {
            let all: Vec<&str> = OPTIONS.iter().map(|o| o.name).collect();
            return Err(bad("option", &a, &format!("--{}", all.join(", --"))));
        };
        // An option the command does not read would be silently ignored: refuse it.
        if known && !reads(spec, &o.cmd) {
            let own: Vec<&str> = OPTIONS
                .iter()
                .filter(|x| reads(x, &o.cmd))
                .map(|x| x.name)
                .collect();
            return Err(bad(
                "option",
                &a,
                &format!(
                    "not an option of '{}'; its options: --{}",
                    o.cmd,
                    own.join(", --")
                ),
            ));
        }
        match spec.kind {
            Kind::Flag => o.json = true,
            Kind::Mca => {
                let (Some(n), Some(v)) = (it.next(), it.next()) else {
                    return Err(bad("--mca", "", "--mca NAME VALUE"));
                };
                o.mca.push((n, v));
            }
            Kind::Num(..) | Kind::Text => {
                let v = it
                    .next()
                    .ok_or_else(|| bad(&a, "(missing)", "a value after the option"))?;
                o.kv.insert(spec.name.to_owned(), v);
            }
        }
    }
    Ok(o)
}

/// The valid range of a numeric option: (least, whether the least is allowed, most, in words).
fn range(k: &str) -> (f64, bool, f64, &'static str) {
    match opt(k).map(|o| o.kind) {
        Some(Kind::Num(lo, incl, hi, words)) => (lo, incl, hi, words),
        _ => (0.0, true, f64::MAX, "a non-negative number"),
    }
}

fn in_range(k: &str, x: f64) -> bool {
    let (lo, incl, hi, _) = range(k);
    x.is_finite() && (x > lo || (incl && x == lo)) && x <= hi
}

impl Opts {
    fn f(&self, k: &str, default: f64) -> Result<f64, SimError> {
        match self.kv.get(k) {
            None => Ok(default),
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|x| in_range(k, *x))
                .ok_or_else(|| SimError::Invalid {
                    what: format!("--{k}"),
                    value: v.clone(),
                    valid: range(k).3.into(),
                }),
        }
    }
    fn u(&self, k: &str, default: u64) -> Result<u64, SimError> {
        match self.kv.get(k) {
            None => Ok(default),
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|x| in_range(k, *x as f64))
                .ok_or_else(|| SimError::Invalid {
                    what: format!("--{k}"),
                    value: v.clone(),
                    valid: match range(k).3 {
                        "a non-negative number" => "a non-negative integer",
                        r => r,
                    }
                    .into(),
                }),
        }
    }
    fn list(&self, k: &str, default: &str) -> Result<Vec<f64>, SimError> {
        let text = self.kv.get(k).map(String::as_str).unwrap_or(default);
        text.split(',')
            .map(|x| {
                x.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|v| in_range(k, *v) && (k != "procs" || v.fract() == 0.0))
                    .ok_or_else(|| SimError::Invalid {
                        what: format!("--{k}"),
                        value: text.into(),
                        valid: format!("a comma-separated list, {}", range(k).3),
                    })
            })
            .collect()
    }
    fn net(&self) -> Result<NetConfig, SimError> {
        Ok(NetConfig {
            latency_ns: (self.f("latency-us", 1.5)? * 1e3) as u64,
            jitter_ns: (self.f("jitter-us", 0.0)? * 1e3) as u64,
            bytes_per_sec: (self.f("bandwidth-gbs", 3.0)? * 1e9) as u64,
            loss: Loss::parse(self.kv.get("loss").map(String::as_str).unwrap_or("none"))?,
            bursts: Vec::new(),
        })
    }
    fn base(&self, comps: &Components, n: usize, pattern: Pattern) -> Result<SimConfig, SimError> {
        let mtu = self.u("mtu", 2048)? as usize;
        Ok(SimConfig {
            n,
            seed: self.u("seed", 1)?,
            net: self.net()?,
            dr: comps.dr.clone(),
            mtu,
            recv_buffers: comps.ud.recv_buffers_for(
                n as u32,
                DEVICE_MAX_WR,
                rmca_sim::sim::GRH_LEN + mtu,
            ),
            cpu_rx_ns: self.u("cpu-rx-ns", 1000)?,
            cpu_tx_ns: self.u("cpu-tx-ns", 500)?,
            deaths: Vec::new(),
            pattern,
            max_time_ns: 3_600 * 1_000_000_000,
            retire: false,
            second_path: None,
            path_kills: Vec::new(),
            fold: false,
        })
    }
    fn emit(
        &self,
        t: &Table,
        ys: &[usize],
        y_label: &str,
        log_x: bool,
        log_y: bool,
    ) -> Result<(), SimError> {
        if self.json {
            print!("{}", t.json_lines());
        } else {
            print!("{}", t.render());
        }
        if let Some(p) = self.kv.get("plot") {
            plot(t, ys, p, y_label, log_x, log_y)?;
            eprintln!("plot: {p}");
        }
        Ok(())
    }
}

/// The receive queue depth the automatic pool is capped at (a ConnectX HCA's max_qp_wr is
/// 16384 and above; the soft provider's is larger).
const DEVICE_MAX_WR: u32 = 16384;
const MIB: f64 = 1024.0 * 1024.0;

fn mem_cmd(o: &Opts) -> Result<(), SimError> {
    let procs = o.list(
        "procs",
        "2,4,8,16,32,64,128,256,512,1024,2048,4096,8192,16384",
    )?;
    let comps = Components::from_mca(&o.mca)?;
    let rc = |spec: &str| -> Result<_, SimError> {
        let mut m = o.mca.clone();
        m.push(("btl_rc_receive_queues".into(), spec.into()));
        m.push(("btl_rc_eager_rdma_max_peers".into(), "0".into()));
        Ok(Components::from_mca(&m)?.rc)
    };
    let (pp, srq, ps) = (
        rc("P,32,16")?,
        rc("S,256,64")?,
        rc("P,256,32,16:S,65536,256,64,256,4096")?,
    );
    let mtu = o.u("mtu", 2048)? as usize;
    let mut t = Table::new(
        &format!(
            "memory per process (MiB) vs processes, every pair connected (allconn); UD MTU {mtu}"
        ),
        &[
            "procs",
            "dr+ud",
            "ob1+rc P",
            "ob1+rc S",
            "ob1+rc P+S",
            "dr+ud buffers",
            "dr state",
            "dr B/peer",
            "rc P buffers",
            "rc S buffers",
            "rc P+S buffers",
            "rc P qp",
            "sim s",
        ],
    );
    for &n in &procs {
        let n = n as usize;
        let wall = Instant::now();
        let cfg = o.base(&comps, n, Pattern::Star { size: 0 })?;
        let (_, conns, state) = Sim::new(cfg)?.run_measuring_proc0();
        let mut u = dr_ud(&comps.ud, comps.dr.eager_copy, n as u32, mtu, DEVICE_MAX_WR);
        u.protocol = state as u64;
        let (a, b, c) = (
            ob1_rc(&pp, n as u32, 2048),
            ob1_rc(&srq, n as u32, 2048),
            ob1_rc(&ps, n as u32, 2048),
        );
        t.rows.push(vec![
            n as f64,
            u.total() as f64 / MIB,
            a.total() as f64 / MIB,
            b.total() as f64 / MIB,
            c.total() as f64 / MIB,
            u.buffers as f64 / MIB,
            u.protocol as f64 / MIB,
            state as f64 / conns.max(1) as f64,
            a.buffers as f64 / MIB,
            b.buffers as f64 / MIB,
            c.buffers as f64 / MIB,
            a.qp as f64 / MIB,
            wall.elapsed().as_secs_f64(),
        ]);
    }
    o.emit(&t, &[1, 2, 3, 4], "MiB per process", true, true)
}

/// The fanout at `n` processes: the default is lowered to n-1 for small jobs, an explicit
/// `--fanout` of n or more is refused.
fn fanout_for(o: &Opts, fanout: u32, n: usize) -> Result<u32, SimError> {
    if o.kv.contains_key("fanout") && fanout as usize >= n {
        return Err(SimError::Invalid {
            what: "--fanout".into(),
            value: fanout.to_string(),
            valid: format!("1 to {} (below the process count {n})", n - 1),
        });
    }
    Ok(fanout.min(n as u32 - 1))
}

/// Heap per process of a full all-to-all simulation, rounded up: the simulator keeps a pair's
/// state only while it has traffic in flight or a message received ahead of its step, so the
/// heap is O(n) (the `heap MiB` of `rmca-sim alltoall --losses ...`: 53.1 MiB at 1024
/// processes without loss, 34.6 MiB at 1% loss, i.e. at most 53 KiB per process;
/// bench/RESULTS.md, "Simulating pml-dr at scale"). A guard against a size that cannot fit,
/// not a prediction.
const ALLTOALL_BYTES_PER_PROC: f64 = 128.0 * 1024.0;

/// MemAvailable of /proc/meminfo in bytes.
fn mem_available() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024.0)
}

/// Refuses an all-to-all whose bookkeeping cannot fit in `available` bytes, before it runs.
fn alltoall_fits(n: usize, available: f64) -> Result<(), SimError> {
    let need = n as f64 * ALLTOALL_BYTES_PER_PROC;
    if need > available {
        let most = (available / ALLTOALL_BYTES_PER_PROC) as u64;
        return Err(SimError::Invalid {
            what: "--procs".into(),
            value: n.to_string(),
            valid: format!(
                "at most {most} processes for a full alltoall on this machine: {n} would need \
                 about {:.1} GiB ({ALLTOALL_BYTES_PER_PROC} B per process), {:.1} GiB are \
                 available",
                need / (1u64 << 30) as f64,
                available / (1u64 << 30) as f64
            ),
        });
    }
    Ok(())
}

fn per_sec(x: u64, procs: usize, ns: u64) -> f64 {
    x as f64 / procs as f64 / (ns as f64 / 1e9)
}

fn acks_cmd(o: &Opts) -> Result<(), SimError> {
    let procs = o.list("procs", "16,64,256,1024,4096,16384")?;
    let comps = Components::from_mca(&o.mca)?;
    let (fanout, interval, size, dur) = (
        o.u("fanout", 4)? as u32,
        (o.f("interval-us", 200.0)? * 1e3) as u64,
        o.u("size", 8)?,
        (o.f("duration-ms", 20.0)? * 1e6) as u64,
    );
    let mut t = Table::new(
        &format!(
            "acks and timers per process per second: each process sends {size} B to {fanout} peers every {} us for {} ms; loss {}",
            interval / 1000,
            dur / 1_000_000,
            o.kv.get("loss").map(String::as_str).unwrap_or("none")
        ),
        &[
            "procs",
            "msgs/s",
            "acks/s",
            "ack pkts/s",
            "timers fired/s",
            "timers armed/s",
            "retx/s",
            "acks/msg",
            "delivered",
            "dups",
            "sim s",
            "heap MiB",
        ],
    );
    for &n in &procs {
        let n = n as usize;
        let wall = Instant::now();
        heap::reset_peak();
        let pattern = Pattern::Stream {
            fanout: fanout_for(o, fanout, n)?,
            interval_ns: interval,
            size,
            until_ns: dur,
        };
        let s = Sim::new(o.base(&comps, n, pattern)?)?.run();
        check_exactly_once(&s)?;
        let el = dur.max(1);
        t.rows.push(vec![
            n as f64,
            per_sec(s.messages_sent, n, el),
            per_sec(s.dr.acks_sent, n, el),
            per_sec(s.dr.acks_sent - s.dr.acks_bundled, n, el),
            per_sec(s.timer_fires, n, el),
            per_sec(s.timer_arms, n, el),
            per_sec(s.dr.retransmissions, n, el),
            s.dr.acks_sent as f64 / s.messages_sent.max(1) as f64,
            s.messages_delivered as f64 / s.messages_sent.max(1) as f64,
            s.duplicate_deliveries as f64,
            wall.elapsed().as_secs_f64(),
            heap::peak() as f64 / MIB,
        ]);
    }
    o.emit(&t, &[2, 3, 4, 5], "per process per second", true, true)
}

fn check_exactly_once(s: &Stats) -> Result<(), SimError> {
    if s.duplicate_deliveries > 0 || s.messages_delivered > s.messages_sent {
        return Err(SimError::Param(format!(
            "protocol violation: {} duplicate deliveries, {} delivered of {} sent",
            s.duplicate_deliveries, s.messages_delivered, s.messages_sent
        )));
    }
    Ok(())
}

fn recovery_cmd(o: &Opts) -> Result<(), SimError> {
    let n = o.u("n", 64)? as usize;
    let comps = Components::from_mca(&o.mca)?;
    let (fanout, interval, size) = (
        o.u("fanout", 4)? as u32,
        (o.f("interval-us", 200.0)? * 1e3) as u64,
        o.u("size", 8)?,
    );
    let start = 10_000_000u64;
    let mut t = Table::new(
        &format!("recovery after a burst loss on every link from t=10 ms ({n} processes, {fanout} peers each, {size} B every {} us)", interval / 1000),
        &["burst ms", "recovery ms", "retx", "timeouts", "delivered", "sim s"],
    );
    for b in o.list("bursts-ms", "0.1,1,5,20")? {
        let wall = Instant::now();
        let d = (b * 1e6) as u64;
        let pattern = Pattern::Stream {
            fanout: fanout_for(o, fanout, n)?,
            interval_ns: interval,
            size,
            until_ns: start + d + 10_000_000,
        };
        let mut cfg = o.base(&comps, n, pattern)?;
        cfg.net.bursts = vec![(start, start + d.max(1))];
        let s = Sim::new(cfg)?.run();
        check_exactly_once(&s)?;
        t.rows.push(vec![
            b,
            s.recovery_ns.map_or(f64::NAN, |x| x as f64 / 1e6),
            s.dr.retransmissions as f64,
            s.dr.timeouts as f64,
            s.messages_delivered as f64 / s.messages_sent.max(1) as f64,
            wall.elapsed().as_secs_f64(),
        ]);
    }
    o.emit(&t, &[1], "ms after the burst", true, true)?;
    // Peer death: process 0 dies at 10 ms; its predecessors (which stream to it) detect it.
    let mut d = Table::new(
        &format!("peer-death detection: process 0 of {n} dies at t=10 ms; time until each peer streaming to it declares it dead"),
        &["peer_timeout ms", "min ms", "median ms", "max ms", "detections", "false", "sim s"],
    );
    for to in o.list("timeouts-ms", "1000,5000,30000")? {
        let wall = Instant::now();
        let mut mca = o.mca.clone();
        mca.push(("pml_dr_peer_timeout".into(), format!("{}", to as u64)));
        if !o.mca.iter().any(|(k, _)| k == "pml_dr_rto_max_us") {
            // pml-dr wants peer_timeout above rto_max (2 s by default).
            let cap = (to * 1000.0 / 4.0).min(2_000_000.0) as u64;
            mca.push(("pml_dr_rto_max_us".into(), cap.to_string()));
        }
        let c = Components::from_mca(&mca)?;
        let pattern = Pattern::Stream {
            fanout: fanout_for(o, fanout, n)?,
            interval_ns: interval,
            size,
            until_ns: 20_000_000,
        };
        let mut cfg = o.base(&c, n, pattern)?;
        cfg.deaths = vec![(0, start)];
        let s = Sim::new(cfg)?.run();
        let mut v = s.death_detections.clone();
        v.sort_unstable();
        let ms = |x: Option<&u64>| x.map_or(f64::NAN, |x| *x as f64 / 1e6);
        d.rows.push(vec![
            to,
            ms(v.first()),
            ms(v.get(v.len() / 2)),
            ms(v.last()),
            v.len() as f64,
            s.false_deaths as f64,
            wall.elapsed().as_secs_f64(),
        ]);
    }
    if o.json {
        print!("{}", d.json_lines());
    } else {
        print!("{}", d.render());
    }
    Ok(())
}

/// The median of a sorted list, None if empty.
fn median(v: &[u64]) -> Option<u64> {
    v.get(v.len() / 2).copied()
}

fn ms(x: Option<u64>) -> f64 {
    x.map_or(f64::NAN, |x| x as f64 / 1e6)
}

/// Peer failures as the job grows. Three runs per process count, each streaming `size` bytes
/// to `fanout` successors every `interval` from t=0 to t=15 ms, the failure at t=10 ms:
/// (a) process 0's first BTL dies silently with a second BTL present (pml-dr's failover);
/// (b) process 0 dies (one BTL: detection by pml_dr_peer_timeout); (c) every link loses every
/// packet for `burst-ms`. pml-dr's own timers decide every time printed.
fn failover_cmd(o: &Opts) -> Result<(), SimError> {
    if let Some(path) = o.kv.get("job") {
        // The job fixes the pattern: options describing another one would be ignored.
        if let Some(k) = ["procs", "fanout", "interval-us", "size", "burst-ms"]
            .into_iter()
            .find(|k| o.kv.contains_key(*k))
        {
            return Err(SimError::Invalid {
                what: format!("--{k}"),
                value: o.kv[k].clone(),
                valid: "not with --job (each row is simulated at 2 processes, 8 B every 200 us, as the kill sweep's ping-pong)".into(),
            });
        }
        return failover_job_cmd(o, path);
    }
    let procs = o.list("procs", "2,16,128,1024,4096")?;
    let comps = Components::from_mca(&o.mca)?;
    let (fanout, interval, size, burst) = (
        o.u("fanout", 4)? as u32,
        (o.f("interval-us", 200.0)? * 1e3) as u64,
        o.u("size", 8)?,
        (o.f("burst-ms", 5.0)? * 1e6) as u64,
    );
    let start = 10_000_000u64;
    let d = &comps.dr;
    if d.peer_timeout <= d.btl_fail_silence {
        return Err(SimError::Invalid {
            what: "pml_dr_peer_timeout".into(),
            value: format!("{} ms", d.peer_timeout.as_millis()),
            valid: format!(
                "above pml_dr_btl_fail_silence ({} ms) for failover: the peer would be declared dead before its path could be failed over",
                d.btl_fail_silence.as_millis()
            ),
        });
    }
    let mut t = Table::new(
        &format!(
            "failures at t=10 ms while each process streams {size} B to {fanout} peers every {} us until 15 ms; \
             path: process 0's ud dies silently, a second (rc-like) BTL left (btl_retries {}, btl_fail_silence {} ms); \
             death: process 0 dies, one BTL (peer_timeout {} ms); burst: every packet lost for {} ms",
            interval / 1000,
            d.btl_retries,
            d.btl_fail_silence.as_millis(),
            d.peer_timeout.as_millis(),
            burst as f64 / 1e6
        ),
        &[
            "procs",
            "path detect ms",
            "path detect max",
            "failover ms",
            "re-sent",
            "failovers",
            "false failovers",
            "death detect ms",
            "death detect max",
            "false deaths",
            "burst recovery ms",
            "dups",
            "sim s",
        ],
    );
    for &n in &procs {
        let n = n as usize;
        let wall = Instant::now();
        let pattern = Pattern::Stream {
            fanout: fanout_for(o, fanout, n)?,
            interval_ns: interval,
            size,
            until_ns: start + 5_000_000,
        };
        // (a) The path: the second BTL is the same fabric without random loss.
        let mut cfg = o.base(&comps, n, pattern.clone())?;
        cfg.second_path = Some(NetConfig {
            loss: Loss::None,
            ..cfg.net.clone()
        });
        cfg.path_kills = vec![(0, start)];
        let a = Sim::new(cfg)?.run();
        check_all_delivered(&a, "path failure")?;
        let mut det = a.btl_detections.clone();
        det.sort_unstable();
        // (b) The death.
        let mut cfg = o.base(&comps, n, pattern.clone())?;
        cfg.deaths = vec![(0, start)];
        let b = Sim::new(cfg)?.run();
        check_exactly_once(&b)?;
        let mut dd = b.death_detections.clone();
        dd.sort_unstable();
        // (c) The burst.
        let mut cfg = o.base(&comps, n, pattern)?;
        cfg.net.bursts = vec![(start, start + burst)];
        let c = Sim::new(cfg)?.run();
        check_all_delivered(&c, "burst")?;
        t.rows.push(vec![
            n as f64,
            ms(median(&det)),
            ms(det.last().copied()),
            ms(a.resume_ns),
            a.dr.retransmissions as f64,
            a.dr.failovers as f64,
            a.false_btl_failures as f64,
            ms(median(&dd)),
            ms(dd.last().copied()),
            b.false_deaths as f64,
            ms(c.recovery_ns),
            (a.duplicate_deliveries + b.duplicate_deliveries + c.duplicate_deliveries) as f64,
            wall.elapsed().as_secs_f64(),
        ]);
    }
    o.emit(&t, &[1, 3, 7, 10], "ms after the failure", true, true)
}

/// The tolerance of [`failover_job_cmd`]: relative difference between the job's time and the
/// simulator's.
const FAILOVER_TOLERANCE: f64 = 0.10;

/// `failover --job FILE`: each dead-link row of an `rmca-faults --sweep kill` JSON file next to
/// the simulator at 2 processes with the same pml-dr parameters. One path (dr+ud): the job's
/// error time against the simulated detection of a silent peer (to pml-dr a dead link and a
/// dead peer are the same silence); two (dr+ud+rc): the job's resumed traffic against the
/// simulated failover.
fn failover_job_cmd(o: &Opts, path: &str) -> Result<(), SimError> {
    let text = std::fs::read_to_string(path).map_err(|e| SimError::Output {
        path: path.into(),
        why: e.to_string(),
    })?;
    let mut t = Table::new(
        &format!("failover and detection: measured job ({path}) vs simulator (2 processes, 1 peer, 8 B every 200 us, one-way latency {} us); paths 1: error ms (peer timeout), 2: resume ms (failover)", o.f("latency-us", 50.0)?),
        &[
            "paths",
            "peer_timeout ms",
            "btl_fail_silence ms",
            "job ms",
            "sim ms",
            "diff %",
            "diff/tol",
        ],
    );
    let mut o2 = Opts {
        cmd: String::new(),
        kv: o.kv.clone(),
        mca: Vec::new(),
        json: false,
    };
    // The emulated link through TUN devices is slower than a fabric; pml-dr's 5 ms
    // pml_dr_rto_min_us floors the timeouts anyway.
    o2.kv.entry("latency-us".into()).or_insert("50".into());
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad = |why: &str| SimError::Invalid {
            what: "--job".into(),
            value: format!("{path} line {}", i + 1),
            valid: format!("JSON lines of rmca-faults --sweep kill --json ({why})"),
        };
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| bad(&e.to_string()))?;
        if v["sweep"] != "kill" || v["point"].as_f64() != Some(1.0) {
            continue; // partial loss after the kill: not a dead link
        }
        let (paths, job_ms) = match v["base"].as_str() {
            Some("dr+ud") => (1, v["detect_ms"].as_f64()),
            Some("dr+ud+rc") => (2, v["resumed_ms"].as_f64()),
            _ => continue,
        };
        let Some(conf) = v["configured"].as_object() else {
            return Err(bad("no 'configured' object"));
        };
        let mut mca = o.mca.clone();
        for (k, x) in conf {
            let x = x
                .as_f64()
                .ok_or_else(|| bad("a non-numeric configured value"))?;
            mca.push((k.clone(), format!("{}", x as u64)));
        }
        let comps = Components::from_mca(&mca)?;
        let pattern = Pattern::Stream {
            fanout: 1,
            interval_ns: 200_000,
            size: 8,
            until_ns: 15_000_000,
        };
        let mut cfg = o2.base(&comps, 2, pattern)?;
        let at = 10_000_000;
        let sim = if paths == 2 {
            cfg.second_path = Some(NetConfig {
                loss: Loss::None,
                ..cfg.net.clone()
            });
            cfg.path_kills = vec![(0, at)];
            let s = Sim::new(cfg)?.run();
            check_all_delivered(&s, "path failure")?;
            s.resume_ns
        } else {
            cfg.deaths = vec![(0, at)];
            let s = Sim::new(cfg)?.run();
            check_exactly_once(&s)?;
            s.death_detections.iter().copied().max()
        };
        let (j, m) = (job_ms.unwrap_or(f64::NAN), ms(sim));
        t.rows.push(vec![
            paths as f64,
            comps.dr.peer_timeout.as_millis() as f64,
            comps.dr.btl_fail_silence.as_millis() as f64,
            j,
            m,
            (m - j) / j * 100.0,
            (m - j).abs() / (j * FAILOVER_TOLERANCE),
        ]);
    }
    if t.rows.is_empty() {
        return Err(SimError::Invalid {
            what: "--job".into(),
            value: path.into(),
            valid: "a file with at least one row of a dead link (point 1) over dr+ud or dr+ud+rc"
                .into(),
        });
    }
    o.emit(&t, &[3, 4], "ms after the kill", false, false)?;
    let out: Vec<String> = t
        .rows
        .iter()
        .filter(|r| r[6].is_nan() || r[6] > 1.0)
        .map(|r| format!("{} path(s) (job {:.1} ms, sim {:.1} ms)", r[0], r[3], r[4]))
        .collect();
    if !out.is_empty() {
        return Err(SimError::Param(format!(
            "validation failed: the simulator is more than {}% from the job at {}",
            FAILOVER_TOLERANCE * 100.0,
            out.join(", ")
        )));
    }
    Ok(())
}

/// Exactly once, and nothing lost: every message sent was delivered (no process died).
fn check_all_delivered(s: &Stats, what: &str) -> Result<(), SimError> {
    check_exactly_once(s)?;
    if s.messages_delivered != s.messages_sent || s.failed_ops > 0 || s.false_deaths > 0 {
        return Err(SimError::Param(format!(
            "protocol violation after the {what}: {} of {} messages delivered, {} operations failed, {} live peers declared dead",
            s.messages_delivered, s.messages_sent, s.failed_ops, s.false_deaths
        )));
    }
    Ok(())
}

/// One all-to-all run: full (every process) or folded (process 0 alone, the others folded onto
/// it by symmetry). Returns (stats, messages of the whole job, wall s, heap MiB).
fn alltoall_run(
    o: &Opts,
    comps: &Components,
    n: usize,
    size: u64,
    fold: bool,
    loss: Option<&Loss>,
) -> Result<(Stats, f64, f64, f64), SimError> {
    let wall = Instant::now();
    heap::reset_peak();
    let mut cfg = o.base(comps, n, Pattern::Pairwise { iters: 1, size })?;
    if let Some(l) = loss {
        cfg.net.loss = *l;
    }
    cfg.retire = !fold;
    cfg.fold = fold;
    if o.kv.contains_key("death-ms") {
        // The middle process: its death singles out no offset.
        cfg.deaths = vec![(n / 2, (o.f("death-ms", 0.0)? * 1e6) as u64)];
    }
    let s = Sim::new(cfg)?.run();
    check_exactly_once(&s)?;
    // Folded, process 0's messages stand for each process's.
    let msgs = s.messages_sent as f64 * if fold { n as f64 } else { 1.0 };
    Ok((
        s,
        msgs,
        wall.elapsed().as_secs_f64(),
        heap::peak() as f64 / MIB,
    ))
}

fn alltoall_cmd(o: &Opts) -> Result<(), SimError> {
    let procs = o.list("procs", "2,8,32,128,512,1024,2048")?;
    let comps = Components::from_mca(&o.mca)?;
    let size = o.u("size", 8)?;
    let method = o.kv.get("method").map(String::as_str).unwrap_or("full");
    let (full, folded) = match method {
        "full" => (true, false),
        "folded" => (false, true),
        "both" => (true, true),
        m => {
            return Err(SimError::Invalid {
                what: "--method".into(),
                value: m.into(),
                valid: "full, folded or both".into(),
            })
        }
    };
    if full {
        if let Some(avail) = mem_available() {
            for &n in &procs {
                alltoall_fits(n as usize, avail)?;
            }
        }
    }
    let loss = o.kv.get("loss").map(String::as_str).unwrap_or("none");
    if let Some(list) = o.kv.get("losses") {
        if folded || o.kv.contains_key("loss") {
            return Err(SimError::Invalid {
                what: "--losses".into(),
                value: list.clone(),
                valid: "the full method only, without --loss".into(),
            });
        }
        let losses = list
            .split(';')
            .map(|l| Loss::parse(l.trim()).map(|x| (l.trim().to_string(), x)))
            .collect::<Result<Vec<_>, _>>()?;
        return alltoall_losses(o, &comps, &procs, size, &losses);
    }
    if full && folded {
        let mut t = Table::new(
            &format!("pairwise all-to-all of {size} B, full simulation vs folded (process 0 alone); loss {loss}"),
            &[
                "procs",
                "full ms",
                "folded ms",
                "diff %",
                "full acks/msg",
                "folded acks/msg",
                "full events/proc",
                "folded events",
                "full sim s",
                "folded sim s",
                "full heap MiB",
                "folded heap MiB",
            ],
        );
        for &n in &procs {
            let n = n as usize;
            let (a, am, aw, ah) = alltoall_run(o, &comps, n, size, false, None)?;
            let (b, bm, bw, bh) = alltoall_run(o, &comps, n, size, true, None)?;
            let (x, y) = (ms(a.completion_ns), ms(b.completion_ns));
            t.rows.push(vec![
                n as f64,
                x,
                y,
                (y - x) / x * 100.0,
                a.dr.acks_sent as f64 / am.max(1.0),
                b.dr.acks_sent as f64 * n as f64 / bm.max(1.0),
                a.events as f64 / n as f64,
                b.events as f64,
                aw,
                bw,
                ah,
                bh,
            ]);
        }
        return o.emit(&t, &[1, 2], "ms", true, true);
    }
    let mut t = Table::new(
        &format!(
            "pairwise all-to-all of {size} B: completion time vs processes; loss {loss}; {}",
            if folded {
                "folded (process 0 simulated, the others by symmetry; messages and drops for the whole job)"
            } else {
                "full simulation"
            }
        ),
        &[
            "procs",
            "completion ms",
            "messages",
            "acks/msg",
            "retx/msg",
            "pool drops",
            "events",
            "peak conns",
            "sim s",
            "heap MiB",
        ],
    );
    for &n in &procs {
        let n = n as usize;
        let (s, m, wall, heap_mib) = alltoall_run(o, &comps, n, size, folded, None)?;
        let scale = if folded { n as f64 } else { 1.0 };
        t.rows.push(vec![
            n as f64,
            ms(s.completion_ns),
            m,
            s.dr.acks_sent as f64 * scale / m.max(1.0),
            s.dr.retransmissions as f64 * scale / m.max(1.0),
            s.pool_drops as f64 * scale,
            s.events as f64,
            s.conns_peak as f64,
            wall,
            heap_mib,
        ]);
    }
    o.emit(&t, &[1], "ms", true, true)
}

/// Peak resident memory of this process so far (VmHWM), MiB.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// The full all-to-all at each process count under each loss process: completion time, the
/// protocol's repairs, wall time, peak heap (the counting allocator, per run) and peak RSS (the
/// process's so far: the largest run so far, process counts rising).
fn alltoall_losses(
    o: &Opts,
    comps: &Components,
    procs: &[f64],
    size: u64,
    losses: &[(String, Loss)],
) -> Result<(), SimError> {
    let mut cols = vec!["procs".to_string()];
    for (l, _) in losses {
        cols.push(format!("{l} ms"));
    }
    for (l, _) in losses {
        for c in ["retx/msg", "peak conns", "sim s", "heap MiB"] {
            cols.push(format!("{l} {c}"));
        }
    }
    cols.push("RSS MiB".into());
    let names: Vec<&str> = cols.iter().map(String::as_str).collect();
    let death =
        o.kv.get("death-ms")
            .map_or(String::new(), |d| format!("; process n/2 dies at {d} ms"));
    let mut t = Table::new(
        &format!(
            "pairwise all-to-all of {size} B, full simulation (pair state only while in use): \
             completion time vs processes and loss{death}"
        ),
        &names,
    );
    for &n in procs {
        let n = n as usize;
        let mut row = vec![n as f64];
        let mut rest = Vec::new();
        for (_, l) in losses {
            let (s, m, wall, heap_mib) = alltoall_run(o, comps, n, size, false, Some(l))?;
            row.push(ms(s.completion_ns));
            rest.extend([
                s.dr.retransmissions as f64 / m.max(1.0),
                s.conns_peak as f64,
                wall,
                heap_mib,
            ]);
        }
        row.extend(rest);
        row.push(peak_rss_mib());
        t.rows.push(row);
    }
    let ys: Vec<usize> = (1..=losses.len()).collect();
    o.emit(&t, &ys, "ms", true, true)
}

/// Counters of a real job's merged profile (profile_json).
fn job_counters(path: &str) -> Result<BTreeMap<String, f64>, SimError> {
    let text = std::fs::read_to_string(path).map_err(|e| SimError::Output {
        path: path.into(),
        why: e.to_string(),
    })?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| SimError::Output {
        path: path.into(),
        why: e.to_string(),
    })?;
    let mut out = BTreeMap::new();
    if let Some(c) = v["counters"].as_object() {
        for (k, x) in c {
            out.insert(k.clone(), x.as_f64().unwrap_or(f64::NAN));
        }
    }
    if let Some(m) = v["memory"]["btl.ud"]["peak_max_per_rank"].as_f64() {
        out.insert("mem.btl.ud".into(), m);
    }
    Ok(out)
}

fn validate_cmd(o: &Opts) -> Result<(), SimError> {
    let procs = o.list("procs", "2,4,8")?;
    let iters = o.u("iters", 2000)?;
    let size = o.u("size", 8)?;
    let p_loss = match Loss::parse(o.kv.get("loss").map(String::as_str).unwrap_or("none"))? {
        Loss::None => 0.0,
        Loss::Bernoulli { p } => p,
        _ => {
            return Err(SimError::Invalid {
                what: "--loss".into(),
                value: o.kv["loss"].clone(),
                valid: "none or bernoulli:P for validate (the soft provider's btl_ud_fault_drop is independent loss)".into(),
            })
        }
    };
    let run =
        o.kv.get("rmca-run")
            .cloned()
            .unwrap_or_else(|| "target/release/rmca-run".into());
    let prog =
        o.kv.get("program")
            .cloned()
            .unwrap_or_else(|| "/tmp/rmca-sim-pairwise".into());
    let mtu = o.u("mtu", 65000)?;
    let mut t = Table::new(
        &format!("validation: pairwise exchange of {size} B x {iters} rounds, dr+ud (soft provider, MTU {mtu}), drop {p_loss}; job (measured) vs sim"),
        &[
            "procs",
            "job frags/msg",
            "sim frags/msg",
            "job acks/msg",
            "sim acks/msg",
            "job ack pkts/msg",
            "sim ack pkts/msg",
            "job retx/msg",
            "sim retx/msg",
            "job pool",
            "sim pool",
            "job us/step",
            "sim us/step",
            "diff/tol",
        ],
    );
    for &n in &procs {
        let n = n as usize;
        let json =
            std::env::temp_dir().join(format!("rmca-sim-validate-{}-{n}.json", std::process::id()));
        let mut cmd = std::process::Command::new(&run);
        cmd.args(["-n", &n.to_string()]);
        let mut mca: Vec<(String, String)> = vec![
            ("pml".into(), "dr".into()),
            ("btl".into(), "ud,self".into()),
            ("btl_ud_provider".into(), "soft".into()),
            ("btl_ud_mtu".into(), mtu.to_string()),
            ("profile".into(), "1".into()),
            ("profile_json".into(), json.display().to_string()),
        ];
        if p_loss > 0.0 {
            mca.push(("btl_ud_fault_drop".into(), p_loss.to_string()));
            mca.push(("btl_ud_fault_seed".into(), o.u("seed", 1)?.to_string()));
        }
        mca.extend(o.mca.iter().cloned());
        for (k, v) in &mca {
            cmd.args(["--mca", k, v]);
        }
        cmd.args([&prog, &iters.to_string(), &size.to_string()]);
        let out = cmd.output().map_err(|e| SimError::Output {
            path: run.clone(),
            why: e.to_string(),
        })?;
        if !out.status.success() {
            return Err(SimError::Output {
                path: run.clone(),
                why: format!(
                    "job at {n} ranks failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
            });
        }
        let c = job_counters(&json.display().to_string())?;
        // "pairwise n=.. time_s=T" on rank 0's stdout.
        let stdout = String::from_utf8_lossy(&out.stdout);
        let job_s = stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix("time_s="))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN);
        let steps = (iters as usize * (n - 1)) as f64;
        std::fs::remove_file(&json).ok();
        let msgs = (iters as usize * n * (n - 1)) as f64;
        let g = |k: &str| c.get(k).copied().unwrap_or(f64::NAN);
        // The simulator, configured alike: loopback-like network, the soft MTU.
        let mut o2 = Opts {
            cmd: String::new(),
            kv: o.kv.clone(),
            mca: o.mca.clone(),
            json: false,
        };
        o2.kv.entry("latency-us".into()).or_insert("10".into());
        o2.kv.entry("cpu-rx-ns".into()).or_insert("3000".into());
        o2.kv.entry("cpu-tx-ns".into()).or_insert("3000".into());
        o2.kv.insert("mtu".into(), mtu.to_string());
        let comps = Components::from_mca(&o.mca)?;
        let mut cfg = o2.base(
            &comps,
            n,
            Pattern::Pairwise {
                iters: iters as u32,
                size,
            },
        )?;
        cfg.net.loss = if p_loss > 0.0 {
            Loss::Bernoulli { p: p_loss }
        } else {
            Loss::None
        };
        let s = Sim::new(cfg)?.run();
        check_exactly_once(&s)?;
        let sm = s.messages_sent.max(1) as f64;
        // The protocol's figures (not the timing-dependent bundling), each against its
        // tolerance: fragments and acks per message within 5% (or 0.01), retransmissions
        // within 20% (or 0.02 per message: the job's spurious ones when an oversubscribed rank
        // is descheduled beyond pml_dr_rto_min). The worst ratio is printed: <= 1 passes.
        let within = |j: f64, m: f64, rel: f64, abs: f64| (j - m).abs() / (rel * j.abs()).max(abs);
        let worst = [
            within(
                g("pml.dr.frags_sent") / msgs,
                s.dr.frags_sent as f64 / sm,
                0.05,
                0.01,
            ),
            within(
                g("pml.dr.acks_sent") / msgs,
                s.dr.acks_sent as f64 / sm,
                0.05,
                0.01,
            ),
            within(
                g("pml.dr.retransmissions") / msgs,
                s.dr.retransmissions as f64 / sm,
                0.2,
                0.02,
            ),
        ]
        .into_iter()
        .fold(0.0, f64::max);
        t.rows.push(vec![
            n as f64,
            g("pml.dr.frags_sent") / msgs,
            s.dr.frags_sent as f64 / sm,
            g("pml.dr.acks_sent") / msgs,
            s.dr.acks_sent as f64 / sm,
            (g("pml.dr.acks_sent") - g("pml.dr.acks_bundled")) / msgs,
            (s.dr.acks_sent - s.dr.acks_bundled) as f64 / sm,
            g("pml.dr.retransmissions") / msgs,
            s.dr.retransmissions as f64 / sm,
            g("btl.ud.recv_buffers_total") / n as f64,
            o2.base(&comps, n, Pattern::Star { size: 0 })?.recv_buffers as f64,
            job_s * 1e6 / steps,
            s.completion_ns.map_or(f64::NAN, |x| x as f64 / 1e3 / steps),
            worst,
        ]);
    }
    o.emit(&t, &[3, 4, 7, 8], "per message", false, false)?;
    // A row outside its tolerance fails the command, not only the eye.
    let last = t.rows.first().map_or(0, |r| r.len() - 1);
    let out: Vec<String> = t
        .rows
        .iter()
        // NaN (a figure missing) fails too.
        .filter(|r| r[last].is_nan() || r[last] > 1.0)
        .map(|r| format!("{} ranks (diff/tol {:.2})", r[0], r[last]))
        .collect();
    if !out.is_empty() {
        return Err(SimError::Param(format!(
            "validation failed: the simulator is outside its tolerance at {} (seed {})",
            out.join(", "),
            o.u("seed", 1)?
        )));
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args[0] == "--help" || args[0] == "-h" {
        print!("{}", help());
        return if args.is_empty() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    let r = parse_args(args).and_then(|o| match o.cmd.as_str() {
        "memory" => mem_cmd(&o),
        "acks" => acks_cmd(&o),
        "recovery" => recovery_cmd(&o),
        "failover" => failover_cmd(&o),
        "alltoall" => alltoall_cmd(&o),
        "validate" => validate_cmd(&o),
        other => Err(SimError::Invalid {
            what: "command".into(),
            value: other.into(),
            valid: format!(
                "{} (rmca-sim --help)",
                COMMANDS.iter().map(|c| c.0).collect::<Vec<_>>().join(", ")
            ),
        }),
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rmca-sim: {e}");
            ExitCode::FAILURE
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
    fn options_a_command_does_not_read_are_refused() {
        assert!(parse_args(args("acks --fanout 2 --latency-us 3")).is_ok());
        let e = parse_args(args("alltoall --iters 0"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("--iters") && e.contains("not an option of 'alltoall'"),
            "{e}"
        );
        assert!(e.contains("--procs") && e.contains("--size"), "{e}");
    }

    #[test]
    fn numbers_out_of_their_range_are_refused_naming_it() {
        let o = parse_args(args(
            "acks --latency-us 1e300 --duration-ms 0 --bandwidth-gbs 0 --cpu-rx-ns 99999999999",
        ))
        .unwrap();
        for (k, want) in [
            ("latency-us", "0 to 1000000 us"),
            ("duration-ms", "above 0"),
            ("bandwidth-gbs", "above 0"),
        ] {
            let e = o.f(k, 1.0).unwrap_err().to_string();
            assert!(e.contains(k) && e.contains(want), "{e}");
        }
        let e = o.u("cpu-rx-ns", 1).unwrap_err().to_string();
        assert!(e.contains("0 to 1000000000 ns"), "{e}");
        let o = parse_args(args("memory --procs 2,2.5")).unwrap();
        assert!(o
            .list("procs", "")
            .unwrap_err()
            .to_string()
            .contains("whole numbers"));
        let o = parse_args(args("acks --fanout 16")).unwrap();
        let e = fanout_for(&o, 16, 16).unwrap_err().to_string();
        assert!(e.contains("1 to 15"), "{e}");
        // The default fanout is lowered for small jobs instead.
        let o = parse_args(args("acks")).unwrap();
        assert_eq!(fanout_for(&o, 4, 3).unwrap(), 2);
    }

    #[test]
    fn the_option_table_is_the_one_source_of_the_help_and_the_parser() {
        let h = help();
        for (c, _) in COMMANDS {
            assert!(h.contains(&format!("  {c} ")), "{c} missing from the help");
        }
        for o in OPTIONS {
            assert!(h.contains(&format!("--{} {}", o.name, o.arg).trim_end().to_owned()));
            for c in o.cmds {
                assert!(COMMANDS.iter().any(|x| x.0 == *c), "--{} names {c}", o.name);
            }
            // Every option is accepted by the commands that read it and refused by the others.
            for (c, _) in COMMANDS {
                let mut a = vec![c.to_string(), format!("--{}", o.name)];
                a.extend(
                    ["x", "y"]
                        .iter()
                        .take(match o.kind {
                            Kind::Flag => 0,
                            Kind::Mca => 2,
                            _ => 1,
                        })
                        .map(|s| s.to_string()),
                );
                assert_eq!(parse_args(a).is_ok(), reads(o, c), "--{} of {c}", o.name);
            }
        }
        // Help lines stay within 100 columns.
        assert!(h.lines().all(|l| l.len() <= 100), "{h}");
    }

    #[test]
    fn an_alltoall_that_cannot_fit_is_refused_before_it_runs() {
        let gib = (1u64 << 30) as f64;
        // O(n): 16384 processes fit in 8 GiB, a million in 64 GiB do not.
        assert!(alltoall_fits(16384, 8.0 * gib).is_ok());
        let e = alltoall_fits(1 << 20, 64.0 * gib).unwrap_err().to_string();
        assert!(e.contains("at most 524288") && e.contains("GiB"), "{e}");
    }
}
