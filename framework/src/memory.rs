//! Per-component memory accounting for the job profile (buffers allocated, peak memory).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One component's counters. Cheap to clone and update from any thread.
#[derive(Debug, Default)]
pub struct MemoryCounter {
    current: AtomicUsize,
    peak: AtomicUsize,
    allocations: AtomicU64,
}

impl MemoryCounter {
    /// Record `bytes` newly held.
    pub fn alloc(&self, bytes: usize) {
        let now = self.current.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
        self.allocations.fetch_add(1, Ordering::Relaxed);
    }
    /// Record `bytes` released.
    pub fn free(&self, bytes: usize) {
        self.current.fetch_sub(bytes, Ordering::Relaxed);
    }
    /// Bytes held now.
    pub fn current(&self) -> usize {
        self.current.load(Ordering::Relaxed)
    }
    /// Most bytes ever held at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
    /// Number of allocations recorded.
    pub fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::Relaxed)
    }
}

/// The process's memory accounting, keyed by `"<framework>.<component>"`.
#[derive(Clone, Debug, Default)]
pub struct MemoryAccounting {
    counters: Arc<Mutex<BTreeMap<String, Arc<MemoryCounter>>>>,
}

/// A snapshot line of [`MemoryAccounting`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemorySnapshot {
    /// `"<framework>.<component>"`.
    pub owner: String,
    /// Bytes held now.
    pub current: usize,
    /// Peak bytes.
    pub peak: usize,
    /// Allocations.
    pub allocations: u64,
}

impl MemoryAccounting {
    /// A fresh accounting.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counter of `owner`, created on first use.
    pub fn counter(&self, owner: &str) -> Arc<MemoryCounter> {
        let mut map = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(owner.to_owned()).or_default().clone()
    }

    /// Every counter's current state.
    pub fn snapshot(&self) -> Vec<MemorySnapshot> {
        let map = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .map(|(k, c)| MemorySnapshot {
                owner: k.clone(),
                current: c.current(),
                peak: c.peak(),
                allocations: c.allocations(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_tracks_the_high_water_mark() {
        let acc = MemoryAccounting::new();
        let c = acc.counter("btl.shm");
        c.alloc(100);
        c.alloc(50);
        c.free(120);
        c.alloc(10);
        let s = &acc.snapshot()[0];
        assert_eq!((s.current, s.peak, s.allocations), (40, 150, 3));
    }
}
