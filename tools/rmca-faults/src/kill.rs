//! `--sweep kill`: the link dies (or turns to loss P) in the middle of a ping-pong, and the
//! sweep measures how long the transport takes to say so (an error, for one path: pml dr's
//! peer timeout) or to carry the traffic again (a failover to a second path), next to the
//! timeouts it was configured with. [`analyse`] is pure and unit-tested; [`job`] runs one.

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::transport::{self, Transport};
use crate::{why, Nodes};

/// What one kill job showed, from the worker's report and the moment of the kill.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// From the kill to the error that ended the traffic (ms), if one did.
    pub detect_ms: Option<f64>,
    /// With no error: from the kill to the end of the longest stall (over 10 ms) after it,
    /// i.e. traffic carried again (0: it never stalled).
    pub resumed_ms: Option<f64>,
    /// The longest silence between two round trips after the kill (ms; to the error or the
    /// end of the run when traffic never resumed).
    pub longest_stall_ms: f64,
}

/// Reads the worker's `faults-kill` report against the kill at `kill_ns` (unix ns).
pub fn analyse(report: &Value, kill_ns: u64) -> Outcome {
    let ms = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e6;
    let last_ok = report["last_ok_ns"].as_u64().unwrap_or(0);
    let error_ns = report["error_ns"].as_u64();
    let gaps: Vec<(u64, u64)> = report["gaps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| Some((g[0].as_u64()?, g[1].as_u64()?)))
        .collect();
    // The stall the kill caused is the longest gap after it: a round trip in flight at the
    // kill may complete just after it, and on a loaded machine silences of tens of ms come
    // and go around it; none: it never stalled.
    let after = |(a, b): &(u64, u64)| ms((*a).max(kill_ns), *b);
    let resumed_ms = if error_ns.is_some() || last_ok <= kill_ns {
        None
    } else {
        Some(
            gaps.iter()
                .filter(|(_, b)| *b > kill_ns)
                .max_by(|x, y| after(x).total_cmp(&after(y)))
                .map_or(0.0, |(_, b)| ms(kill_ns, *b)),
        )
    };
    let mut longest = gaps
        .iter()
        .filter(|(_, b)| *b > kill_ns)
        .map(|(a, b)| ms((*a).max(kill_ns), *b))
        .fold(0.0, f64::max);
    if let Some(e) = error_ns {
        longest = longest.max(ms(last_ok.max(kill_ns), e));
    }
    Outcome {
        detect_ms: error_ns.map(|e| ms(kill_ns, e)),
        resumed_ms,
        longest_stall_ms: longest,
    }
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One kill job of `t` at point `x`: ping-pong over the link with the base impairments, the
/// link changed to loss `x` `kill_after` seconds into it, the report read. The row, as JSON.
pub fn job(nodes: &Nodes, x: f64, t: &Transport) -> Result<Value, String> {
    let o = nodes.o;
    let before = crate::sweep::Kind::Kill.spec(x, o.burst_len, &o.base);
    let then = crate::sweep::then_spec(x, &o.base);
    nodes.restart(&before, Some(&then))?;
    let prof = std::env::temp_dir().join(format!("rmca-faults-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&prof);
    let size = o.sizes.iter().min().copied().unwrap_or(8);
    let args = [
        "--seed".to_owned(),
        o.seed.to_string(),
        "--sizes".into(),
        size.to_string(),
        "--kill-run".into(),
        o.kill_run.to_string(),
    ];
    let mut cmd = nodes.rmca_command(&t.mca(), &prof, &args)?;
    if !t.clean.is_empty() {
        cmd.env("RMCA_IMPAIR_CLEAN", t.clean);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running the job: {e}"))?;
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut err = child.stderr.take().expect("piped");
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(o.timeout + 10);
    let mut lines = Vec::new();
    let mut streaming = false;
    while let Ok(l) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        streaming = l.starts_with("faults-streaming");
        lines.push(l);
        if streaming {
            break;
        }
    }
    let mut signalled = None;
    if streaming {
        std::thread::sleep(Duration::from_secs_f64(o.kill_after));
        signalled = Some(unix_ns());
        nodes.checked(&["change", &o.prefix])?;
    }
    lines.extend(rx.iter());
    let _ = reader.join();
    let status = child.wait().map_err(|e| e.to_string())?;
    let stderr = err_reader.join().unwrap_or_default();
    let _ = std::fs::remove_file(&prof);
    let (link, stats) = nodes.link_counters()?;
    // The emulator's own stamp of the change; the moment the signal was sent otherwise.
    let kill_ns = stats["changed_at_unix_ns"].as_u64().or(signalled);
    let report: Option<Value> = lines
        .iter()
        .find_map(|l| l.strip_prefix("faults-kill "))
        .and_then(|j| serde_json::from_str(j).ok());
    let timed_out = stderr.contains("exceeded --timeout");
    let (outcome, status) = match (&report, kill_ns) {
        (Some(r), Some(k)) => {
            let oc = analyse(r, k);
            let s = match (oc.detect_ms, oc.resumed_ms) {
                (Some(_), _) => "error reported".to_owned(),
                (None, Some(_)) => "traffic resumed".to_owned(),
                (None, None) => format!("no error, no traffic for {} s", o.kill_run - o.kill_after),
            };
            (Some(oc), s)
        }
        _ if timed_out => (
            None,
            format!(
                "timeout ({} s): no error reported, traffic never resumed",
                o.timeout
            ),
        ),
        _ => (
            None,
            format!("failed (exit {:?}): {}", status.code(), why(&stderr)),
        ),
    };
    let bad = report.as_ref().and_then(|r| {
        let d = &r["delivery"];
        Some(d["duplicate"].as_u64()? + d["out_of_order"].as_u64()? + d["corrupt"].as_u64()?)
    });
    Ok(json!({
        "sweep": "kill",
        "point": x,
        "impairment": before,
        "then": then,
        "seed": o.seed,
        "transport": t.label,
        "base": t.base,
        "mca": t.extra.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "spec": t.spec,
        "size": size,
        "kill_after_s": o.kill_after,
        "kill_at_unix_ns": kill_ns,
        "detect_ms": outcome.as_ref().and_then(|x| x.detect_ms),
        "resumed_ms": outcome.as_ref().and_then(|x| x.resumed_ms),
        "longest_stall_ms": outcome.as_ref().map(|x| x.longest_stall_ms),
        "round_trips": report.as_ref().and_then(|r| r["round_trips"].as_u64()),
        "error": report.as_ref().and_then(|r| r["error"].as_str().map(str::to_owned)),
        "configured": transport::configured_timeouts(t)?,
        "link": link,
        "delivered_bad": bad,
        "checked": report.as_ref().map(|r| r["delivery"]["checked"].clone()),
        "status": status,
    }))
}

/// The kill sweep's table.
pub fn table(rows: &[Value]) -> String {
    let tw = rows
        .iter()
        .filter_map(|r| r["transport"].as_str())
        .map(str::len)
        .max()
        .unwrap_or(0)
        .max(6);
    let f = |v: &Value| v.as_f64().map_or("-".into(), |x| format!("{x:.1}"));
    let conf_of = |r: &Value| {
        r["configured"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{}={v}", k.trim_start_matches("pml_dr_")))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default()
    };
    let cw = rows
        .iter()
        .map(|r| conf_of(r).len())
        .max()
        .unwrap_or(0)
        .max(10);
    let mut s = format!(
        "{:>6} {:>tw$} {:>10} {:>10} {:>10} {:>8} {:>4}  {:<cw$}  {}\n",
        "point",
        "transp",
        "error ms",
        "resume ms",
        "stall ms",
        "rtrips",
        "bad",
        "configured",
        "status"
    );
    for r in rows {
        let conf = conf_of(r);
        s.push_str(&format!(
            "{:>6} {:>tw$} {:>10} {:>10} {:>10} {:>8} {:>4}  {:<cw$}  {}\n",
            r["point"].to_string(),
            r["transport"].as_str().unwrap_or(""),
            f(&r["detect_ms"]),
            f(&r["resumed_ms"]),
            f(&r["longest_stall_ms"]),
            r["round_trips"]
                .as_u64()
                .map_or("-".into(), |x| x.to_string()),
            r["delivered_bad"]
                .as_u64()
                .map_or("-".into(), |x| x.to_string()),
            conf,
            r["status"].as_str().unwrap_or("")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn an_error_after_the_kill_is_the_detection_time() {
        let r = json!({"last_ok_ns": 1002 * MS, "error_ns": 4000 * MS,
            "gaps": [[100 * MS, 150 * MS]], "round_trips": 50});
        let o = analyse(&r, 1001 * MS);
        assert_eq!(o.detect_ms, Some(2999.0));
        assert_eq!(o.resumed_ms, None);
        assert_eq!(o.longest_stall_ms, 2998.0);
    }

    #[test]
    fn a_failover_is_the_end_of_the_gap_spanning_the_kill() {
        let r = json!({"last_ok_ns": 9000 * MS, "error_ns": null,
            "gaps": [[100 * MS, 150 * MS], [1000 * MS, 2200 * MS], [3000 * MS, 3020 * MS]]});
        let o = analyse(&r, 1010 * MS);
        assert_eq!(o.detect_ms, None);
        assert_eq!(o.resumed_ms, Some(1190.0));
        assert_eq!(o.longest_stall_ms, 1190.0);
        // A round trip in flight at the kill completes just after it; the stall follows.
        let r = json!({"last_ok_ns": 9000 * MS, "gaps": [[1011 * MS, 2200 * MS]]});
        assert_eq!(analyse(&r, 1010 * MS).resumed_ms, Some(1190.0));
        // A scheduling hiccup across the kill is not the stall the kill caused.
        let r = json!({"last_ok_ns": 9000 * MS,
            "gaps": [[995 * MS, 1011 * MS], [1012 * MS, 3000 * MS], [4000 * MS, 4050 * MS]]});
        assert_eq!(analyse(&r, 1010 * MS).resumed_ms, Some(1990.0));
        // Traffic that never stalled 10 ms resumed "at once".
        let o = analyse(&json!({"last_ok_ns": 9000 * MS, "gaps": []}), 1010 * MS);
        assert_eq!((o.resumed_ms, o.longest_stall_ms), (Some(0.0), 0.0));
        // Nothing completed after the kill: no resumption.
        let o = analyse(&json!({"last_ok_ns": 1000 * MS, "gaps": []}), 1010 * MS);
        assert_eq!(o.resumed_ms, None);
    }

    #[test]
    fn the_table_names_the_configured_timeouts() {
        let r = json!({"point": 1.0, "transport": "dr+ud", "detect_ms": 3012.5,
            "resumed_ms": null, "longest_stall_ms": 3012.5, "round_trips": 900,
            "delivered_bad": 0, "configured": {"pml_dr_peer_timeout": 3000},
            "status": "error reported"});
        let t = table(&[r]);
        assert!(
            t.contains("3012.5") && t.contains("peer_timeout=3000"),
            "{t}"
        );
    }
}
