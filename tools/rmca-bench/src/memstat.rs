//! Per-process memory figures: `/proc/self/status` (VmHWM, VmRSS) and the framework's memory
//! accounting from the merged job profile (`--mca profile 1`).

use serde_json::Value;

/// Peak and current resident set size, KiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vm {
    /// VmHWM: peak resident set size.
    pub hwm_kib: u64,
    /// VmRSS: resident set size now.
    pub rss_kib: u64,
}

/// Parse the `VmHWM:` and `VmRSS:` lines of a `/proc/<pid>/status` text (values in kB).
pub fn parse_status(text: &str) -> Option<Vm> {
    let field = |name: &str| -> Option<u64> {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let mut w = rest.split_whitespace();
            let n = w.next()?.parse().ok()?;
            match w.next() {
                Some("kB") | None => Some(n),
                _ => None,
            }
        })
    };
    Some(Vm {
        hwm_kib: field("VmHWM")?,
        rss_kib: field("VmRSS")?,
    })
}

/// This process's figures now.
pub fn current() -> Option<Vm> {
    parse_status(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// From a merged profile (`rmca::Universe::finalize` on rank 0): the largest, over ranks, of
/// the bytes accounted by every memory owner (BTL buffers, rings, registrations; peaks summed
/// over the owners of one rank).
pub fn accounted_peak_max(profile: &Value) -> Option<u64> {
    profile
        .get("per_rank")?
        .as_array()?
        .iter()
        .map(|r| {
            r.get("memory")
                .and_then(Value::as_object)
                .map(|m| {
                    m.values()
                        .filter_map(|o| o.get("peak").and_then(Value::as_u64))
                        .sum::<u64>()
                })
                .unwrap_or(0)
        })
        .max()
}

/// A counter of the merged profile divided by the number of ranks (e.g. connections per rank).
pub fn counter_per_rank(profile: &Value, name: &str) -> Option<f64> {
    let v = profile.get("counters")?.get(name)?.as_u64()?;
    let ranks = profile.get("ranks")?.as_u64()?.max(1);
    Some(v as f64 / ranks as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const STATUS: &str = "Name:\trmca-bench\nUmask:\t0022\nState:\tR (running)\n\
        VmPeak:\t  123456 kB\nVmSize:\t  120000 kB\nVmHWM:\t    8432 kB\nVmRSS:\t    8100 kB\n\
        RssAnon:\t    2000 kB\nThreads:\t1\n";

    #[test]
    fn status_lines_are_parsed() {
        assert_eq!(
            parse_status(STATUS),
            Some(Vm {
                hwm_kib: 8432,
                rss_kib: 8100
            })
        );
        // Kernel threads have no Vm lines; a garbled value is not a figure.
        assert_eq!(parse_status("Name:\tkthreadd\nState:\tS\n"), None);
        assert_eq!(parse_status("VmHWM:\t12x kB\nVmRSS:\t1 kB\n"), None);
        assert_eq!(parse_status("VmHWM:\t12 MB\nVmRSS:\t1 kB\n"), None);
        // VmHWMx is not VmHWM.
        assert_eq!(parse_status("VmHWMx:\t5 kB\nVmRSS:\t1 kB\n"), None);
    }

    #[test]
    fn this_process_has_figures() {
        let vm = current().expect("/proc/self/status");
        assert!(vm.hwm_kib >= vm.rss_kib && vm.rss_kib > 0, "{vm:?}");
    }

    #[test]
    fn profile_memory_is_the_worst_rank_summed_over_owners() {
        let p = json!({
            "ranks": 2,
            "counters": {"btl.rc.connections": 6},
            "per_rank": [
                {"memory": {"btl.rc": {"peak": 100, "current": 5}, "btl.self": {"peak": 10}}},
                {"memory": {"btl.rc": {"peak": 90}, "btl.self": {"peak": 30}}},
            ]
        });
        assert_eq!(accounted_peak_max(&p), Some(120));
        assert_eq!(counter_per_rank(&p, "btl.rc.connections"), Some(3.0));
        assert_eq!(counter_per_rank(&p, "nope"), None);
        assert_eq!(accounted_peak_max(&json!({})), None);
    }
}
