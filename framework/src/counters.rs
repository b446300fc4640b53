//! Event counters of components outside the PML (osc modules) for the job profile.
//!
//! The PML reports its own and its BTLs' counters ([`crate::pml::Pml::counters`]); a window's
//! module lives shorter than the process and sits on paths where even an atomic costs, so
//! it counts in plain fields of its own and adds them here once, when the window is freed
//! (or dropped). The runtime holds one [`CounterRegistry`] per process, hands a clone to
//! every window at creation ([`crate::osc::WinConfig::counters`]) and folds its sums into
//! the rank's profile at finalize, beside the PML's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The process's counters by name (`"<framework>.<component>.<event>"`, e.g.
/// `"osc.rdma.acc_slot_posted"`), summed over every module that reported. Cheap to clone
/// (one shared map); locked only when a module reports and when the profile is taken.
#[derive(Clone, Debug, Default)]
pub struct CounterRegistry {
    sums: Arc<Mutex<BTreeMap<&'static str, u64>>>,
}

impl CounterRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add each `(name, count)` to its sum (a name reported with 0 still appears, so a
    /// profile shows that the component ran and counted nothing).
    pub fn add(&self, counts: &[(&'static str, u64)]) {
        let mut sums = self.sums.lock().unwrap_or_else(|p| p.into_inner());
        for &(name, n) in counts {
            let s = sums.entry(name).or_insert(0);
            *s = s.saturating_add(n);
        }
    }

    /// Every counter's sum, by name.
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        let sums = self.sums.lock().unwrap_or_else(|p| p.into_inner());
        sums.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_from_clones_are_summed_by_name_and_zeros_are_listed() {
        let r = CounterRegistry::new();
        let window = r.clone();
        window.add(&[("osc.rdma.a", 3), ("osc.rdma.b", 0)]);
        r.add(&[("osc.rdma.a", 4), ("osc.rdma.a", u64::MAX)]);
        assert_eq!(
            r.snapshot(),
            vec![
                ("osc.rdma.a".to_owned(), u64::MAX),
                ("osc.rdma.b".to_owned(), 0)
            ]
        );
        assert!(CounterRegistry::new().snapshot().is_empty());
    }
}
