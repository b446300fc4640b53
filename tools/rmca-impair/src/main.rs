//! rmca-impair: joins network namespaces through TUN devices and impairs what crosses.
//!
//! `rmca-impair --port ns0:imp0:10.202.0.1 --port ns1:imp1:10.202.0.2 --impair burst=0.2:4
//!  --seed 7 --json /tmp/counters.json`
//!
//! Prints the counters to stderr and writes them as JSON on SIGTERM/SIGINT (and the JSON on
//! SIGUSR1, going on). `bench/impaired-link.sh` makes the namespaces and devices and runs it.
#![deny(unsafe_code)]

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::exit;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rmca_impair::spec::Impairment;
use rmca_impair::switch::Switch;
use rmca_impair::sys;

const USAGE: &str = "usage: rmca-impair --port NETNS:IFNAME:ADDR --port ... [options]
  --port NETNS:IFNAME:ADDR  a node: the TUN device IFNAME in network namespace NETNS ('-': this
                            one), whose node has IPv4 address ADDR (packets to ADDR go there);
                            at least two
  --impair SPEC             impairment of every direction (default: none), SPEC being
                            key=value,... of: KEYS
  --dir FROM:TO=SPEC        impairment of the direction from port FROM to port TO (0-based,
                            in --port order), replacing --impair there (repeatable)
  --seed N                  seed of every random choice (default 1): the same seed, impairment
                            and packet sequence give the same decisions
  --then SPEC               on SIGUSR2, every direction switches to SPEC from that packet on
                            (e.g. loss=1: the link dies), counters kept; the report gives the
                            moment (changed_at_unix_ns)
  --json FILE               write the counters as JSON there on exit and on SIGUSR1
  --ready FILE              create FILE once every device is attached
Stops on SIGTERM or SIGINT, printing the counters.";

struct Port {
    netns: String,
    ifname: String,
    addr: Ipv4Addr,
}

struct Opts {
    ports: Vec<Port>,
    impair: Impairment,
    dirs: Vec<(usize, usize, Impairment)>,
    seed: u64,
    json: Option<PathBuf>,
    ready: Option<PathBuf>,
    then: Option<Impairment>,
}

fn parse_port(s: &str) -> Result<Port, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let [netns, ifname, addr] = parts[..] else {
        return Err(format!("--port '{s}' is not NETNS:IFNAME:ADDR"));
    };
    let addr = addr
        .parse()
        .map_err(|_| format!("--port '{s}': '{addr}' is not an IPv4 address"))?;
    if ifname.is_empty() || ifname.len() > 15 {
        return Err(format!("--port '{s}': interface names are 1 to 15 bytes"));
    }
    Ok(Port {
        netns: netns.to_owned(),
        ifname: ifname.to_owned(),
        addr,
    })
}

fn parse_opts(args: Vec<String>) -> Result<Opts, String> {
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_args(args);
    let mut o = Opts {
        ports: Vec::new(),
        impair: Impairment::default(),
        dirs: Vec::new(),
        seed: 1,
        json: None,
        ready: None,
        then: None,
    };
    let mut dirs_raw: Vec<String> = Vec::new();
    let val = |p: &mut lexopt::Parser| -> Result<String, String> {
        p.value()
            .map_err(|e| e.to_string())?
            .into_string()
            .map_err(|_| "arguments must be UTF-8".to_owned())
    };
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Long("port") => o.ports.push(parse_port(&val(&mut p)?)?),
            Long("impair") => {
                o.impair = Impairment::parse(&val(&mut p)?).map_err(|e| format!("--impair: {e}"))?
            }
            Long("dir") => dirs_raw.push(val(&mut p)?),
            Long("seed") => {
                let v = val(&mut p)?;
                o.seed = v
                    .parse()
                    .map_err(|_| format!("--seed '{v}' is not a whole number"))?;
            }
            Long("json") => o.json = Some(val(&mut p)?.into()),
            Long("then") => {
                o.then = Some(Impairment::parse(&val(&mut p)?).map_err(|e| format!("--then: {e}"))?)
            }
            Long("ready") => o.ready = Some(val(&mut p)?.into()),
            Long("help") | Short('h') => {
                println!("{}", usage());
                exit(0);
            }
            other => return Err(other.unexpected().to_string()),
        }
    }
    if o.ports.len() < 2 {
        return Err("at least two --port are needed".into());
    }
    for (i, a) in o.ports.iter().enumerate() {
        if o.ports[..i].iter().any(|b| b.addr == a.addr) {
            return Err(format!("two ports have address {}", a.addr));
        }
    }
    let n = o.ports.len();
    for d in dirs_raw {
        let (pair, spec) = d
            .split_once('=')
            .ok_or_else(|| format!("--dir '{d}' is not FROM:TO=SPEC"))?;
        let (from, to) = pair
            .split_once(':')
            .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)))
            .ok_or_else(|| format!("--dir '{d}': '{pair}' is not FROM:TO (port numbers)"))?;
        if from >= n || to >= n || from == to {
            return Err(format!(
                "--dir '{d}': ports are 0 to {} and FROM differs from TO",
                n - 1
            ));
        }
        let imp = Impairment::parse(spec).map_err(|e| format!("--dir '{d}': {e}"))?;
        o.dirs.push((from, to, imp));
    }
    Ok(o)
}

fn usage() -> String {
    USAGE.replace("KEYS", rmca_impair::spec::VALID_KEYS)
}

/// Human-readable counters, one line per direction.
fn summary(report: &serde_json::Value) -> String {
    let mut s = String::from("rmca-impair counters:\n");
    for d in report["directions"].as_array().into_iter().flatten() {
        let c = &d["counters"];
        s.push_str(&format!(
            "  {} -> {} [{}]: packets {} delivered {} lost {} (bursts {}, longest {}) dup {} \
             reordered {} corrupted {} (skipped {}) too_big {} queue_drops {}\n",
            d["from"].as_str().unwrap_or("?"),
            d["to"].as_str().unwrap_or("?"),
            d["impairment"].as_str().unwrap_or(""),
            c["packets"],
            c["delivered"],
            c["lost"],
            c["loss_bursts"],
            c["longest_burst"],
            c["duplicated"],
            c["reordered"],
            c["corrupted"],
            c["corrupt_skipped"],
            c["too_big"],
            c["queue_drops"]
        ));
    }
    s.push_str(&format!(
        "  unparsable {} no_route {} write_errors {} in_flight_at_exit {}\n",
        report["switch"]["unparsable"],
        report["switch"]["no_route"],
        report["write_errors"],
        report["in_flight"]
    ));
    s
}

fn write_json(path: &Option<PathBuf>, report: &serde_json::Value) {
    if let Some(p) = path {
        // Written aside and renamed, so a reader never sees half a file.
        let tmp = p.with_extension("tmp");
        let r =
            std::fs::write(&tmp, format!("{report:#}\n")).and_then(|_| std::fs::rename(&tmp, p));
        if let Err(e) = r {
            eprintln!("rmca-impair: writing {}: {e}", p.display());
        }
    }
}

fn run(o: Opts) -> io::Result<()> {
    sys::install_signal_handlers()?;
    let mut tuns: Vec<File> = Vec::new();
    for p in &o.ports {
        let _ns = if p.netns == "-" {
            None
        } else {
            Some(sys::InNetns::enter(&p.netns)?)
        };
        tuns.push(sys::attach_tun(&p.ifname)?);
    }
    let names: Vec<String> = o
        .ports
        .iter()
        .map(|p| format!("{}({})", p.netns, p.addr))
        .collect();
    let mut switch = Switch::new(o.ports.iter().map(|p| p.addr).collect(), o.seed, |f, t| {
        o.dirs
            .iter()
            .rev()
            .find(|(a, b, _)| (*a, *b) == (f, t))
            .map_or_else(|| o.impair.clone(), |d| d.2.clone())
    });
    if let Some(r) = &o.ready {
        File::create(r)?;
    }
    let origin = Instant::now();
    let now = || origin.elapsed().as_nanos() as u64;
    let mut buf = vec![0u8; 65536];
    let mut write_errors = 0u64;
    let mut changed_at: Option<u128> = None;
    let report = |s: &Switch, write_errors: u64, changed_at: Option<u128>| {
        let mut r = s.report(&names);
        r["seed"] = o.seed.into();
        r["write_errors"] = write_errors.into();
        r["changed_at_unix_ns"] = changed_at.map(|t| t as u64).into();
        r
    };
    while !sys::STOP.load(Ordering::Relaxed) {
        if sys::CHANGE.swap(false, Ordering::Relaxed) {
            match &o.then {
                Some(then) if changed_at.is_none() => {
                    switch.set_impairments(|_, _| then.clone());
                    let t = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos());
                    changed_at = Some(t);
                    eprintln!("rmca-impair: every direction now [{then}] (unix ns {t})");
                }
                Some(_) => eprintln!("rmca-impair: SIGUSR2 again: the change is made once"),
                None => eprintln!("rmca-impair: SIGUSR2 without --then: nothing to change to"),
            }
        }
        if sys::DUMP.swap(false, Ordering::Relaxed) {
            write_json(&o.json, &report(&switch, write_errors, changed_at));
        }
        let t = now();
        while let Some((port, data)) = switch.poll_transmit(t) {
            if tuns[port].write(&data).is_err() {
                write_errors += 1;
            }
        }
        let wait = switch
            .poll_timeout()
            .map_or(Duration::from_millis(200), |at| {
                Duration::from_nanos(at.saturating_sub(now())).min(Duration::from_millis(200))
            });
        let ready = sys::wait_readable(&tuns, wait)?;
        for (i, r) in ready.into_iter().enumerate() {
            if !r {
                continue;
            }
            // A bounded batch per port, so that one busy sender cannot starve the others.
            for _ in 0..64 {
                match tuns[i].read(&mut buf) {
                    Ok(n) => switch.offer(now(), i, &buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => break,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    let r = report(&switch, write_errors, changed_at);
    eprint!("{}", summary(&r));
    write_json(&o.json, &r);
    Ok(())
}

fn main() {
    let opts = parse_opts(std::env::args().skip(1).collect()).unwrap_or_else(|e| {
        eprintln!("rmca-impair: {e}\n{}", usage());
        exit(2)
    });
    if let Err(e) = run(opts) {
        eprintln!("rmca-impair: {e}");
        exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn options_parse_and_nonsense_is_refused_clearly() {
        let o = parse_opts(args(
            "--port a:t0:10.0.0.1 --port b:t1:10.0.0.2 --impair loss=0.1 --dir 1:0=delay=1ms --seed 5",
        ))
        .unwrap();
        assert_eq!((o.ports.len(), o.seed, o.dirs.len()), (2, 5, 1));
        for (bad, want) in [
            ("--port a:t0:10.0.0.1", "at least two"),
            ("--port a:t0 --port b:t1:10.0.0.2", "NETNS:IFNAME:ADDR"),
            ("--port a:t0:x --port b:t1:10.0.0.2", "not an IPv4 address"),
            (
                "--port a:t0:10.0.0.1 --port b:t1:10.0.0.1",
                "two ports have address",
            ),
            (
                "--port a:t0:10.0.0.1 --port b:t1:10.0.0.2 --dir 0:2=loss=0.1",
                "ports are 0 to 1",
            ),
            (
                "--port a:t0:10.0.0.1 --port b:t1:10.0.0.2 --impair loss=2",
                "a probability is 0 to 1",
            ),
            (
                "--port a:t0:10.0.0.1 --port b:t1:10.0.0.2 --seed x",
                "whole number",
            ),
            (
                "--port a:t0:10.0.0.1 --port b:t1:10.0.0.2 --then cut=1",
                "--then: unknown impairment 'cut'",
            ),
            ("--bogus", "bogus"),
        ] {
            let e = parse_opts(args(bad))
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(e.contains(want), "{bad}: {e}");
        }
    }
}
