//! The job profile (in-library profiling): every rank's counters and memory are
//! merged at finalize into one summary, printed by rank 0 and optionally written as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

/// Merge per-rank profiles (as produced by `Runtime::profile_json`): counters are summed,
/// memory is summed and its per-rank maximum kept.
pub fn merge(ranks: &[Value]) -> Value {
    let mut counters: BTreeMap<String, u64> = BTreeMap::new();
    let mut mem_peak_sum: BTreeMap<String, u64> = BTreeMap::new();
    let mut mem_peak_max: BTreeMap<String, u64> = BTreeMap::new();
    let mut init_us = Vec::new();
    for r in ranks {
        if let Some(c) = r.get("counters").and_then(Value::as_object) {
            for (k, v) in c {
                *counters.entry(k.clone()).or_default() += v.as_u64().unwrap_or(0);
            }
        }
        if let Some(m) = r.get("memory").and_then(Value::as_object) {
            for (k, v) in m {
                let peak = v.get("peak").and_then(Value::as_u64).unwrap_or(0);
                *mem_peak_sum.entry(k.clone()).or_default() += peak;
                let e = mem_peak_max.entry(k.clone()).or_default();
                *e = (*e).max(peak);
            }
        }
        if let Some(t) = r.get("init_us").and_then(Value::as_u64) {
            init_us.push(t);
        }
    }
    let memory: BTreeMap<String, Value> = mem_peak_sum
        .iter()
        .map(|(k, sum)| {
            (
                k.clone(),
                json!({"peak_total": sum, "peak_max_per_rank": mem_peak_max[k]}),
            )
        })
        .collect();
    json!({
        "ranks": ranks.len(),
        "pml": ranks.first().and_then(|r| r.get("pml")).cloned().unwrap_or(Value::Null),
        "btls": ranks.first().and_then(|r| r.get("btls")).cloned().unwrap_or(Value::Null),
        "init_us_max": init_us.iter().copied().max().unwrap_or(0),
        "counters": counters,
        "memory": memory,
        "per_rank": ranks,
    })
}

/// Human-readable summary.
pub fn render(summary: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "rmca profile: {} ranks, pml {}, btls {}, init {} us (slowest rank)",
        summary["ranks"], summary["pml"], summary["btls"], summary["init_us_max"]
    );
    if let Some(c) = summary["counters"].as_object() {
        let _ = writeln!(out, "  {:<48} {:>16}", "counter (sum over ranks)", "value");
        for (k, v) in c {
            let _ = writeln!(out, "  {k:<48} {:>16}", v);
        }
    }
    if let Some(m) = summary["memory"].as_object() {
        let _ = writeln!(
            out,
            "  {:<32} {:>16} {:>16}",
            "memory (bytes)", "peak total", "peak max/rank"
        );
        for (k, v) in m {
            let _ = writeln!(
                out,
                "  {k:<32} {:>16} {:>16}",
                v["peak_total"], v["peak_max_per_rank"]
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_sums_and_maxima() {
        let a = json!({"pml": "ob1", "init_us": 5, "counters": {"msgs": 2}, "memory": {"btl.shm": {"peak": 10}}});
        let b = json!({"pml": "ob1", "init_us": 9, "counters": {"msgs": 3, "unexpected": 1}, "memory": {"btl.shm": {"peak": 30}}});
        let m = merge(&[a, b]);
        assert_eq!(m["counters"]["msgs"], 5);
        assert_eq!(m["counters"]["unexpected"], 1);
        assert_eq!(m["memory"]["btl.shm"]["peak_total"], 40);
        assert_eq!(m["memory"]["btl.shm"]["peak_max_per_rank"], 30);
        assert_eq!(m["init_us_max"], 9);
        assert!(render(&m).contains("msgs"));
    }
}
