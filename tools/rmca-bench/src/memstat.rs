//! Per-process memory figures from `/proc/self/status` (VmHWM, VmRSS). The framework's own
//! accounting comes from the merged job profile (`rmca::JobProfile`).

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
