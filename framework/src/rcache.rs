//! The RCache framework: a cache of memory registrations so that repeated RDMA from the same
//! user buffer does not pay registration each time (Open MPI's `rcache/grdma`).
//!
//! Correctness over speed: an entry must never outlive the memory it describes. Callers
//! (the PML's buffer lifetime, or a BTL's memory hooks) report released ranges with
//! [`Rcache::invalidate`], which hands back every overlapping registration to deregister.

use std::collections::BTreeMap;

use crate::base::{Component, ComponentMeta};
use crate::params::{Level, Param, ParamRegistrar, ParamStore};

/// A BTL's registration of local memory, valid until
/// [`Btl::deregister_mem`](crate::btl::Btl::deregister_mem): the currency of registration caches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// BTL-private handle (e.g. an index into the BTL's table of MRs).
    pub handle: u64,
    /// Bytes the peer needs to address this memory (rkey, pid...), carried in PML headers.
    pub remote_key: Vec<u8>,
}

/// A cached registration of `addr..addr+len`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedRegistration {
    /// Start address.
    pub addr: usize,
    /// Length.
    pub len: usize,
    /// The BTL's registration.
    pub registration: Registration,
}

/// A registration cache for one BTL module.
pub trait Rcache: Send {
    /// A cached registration covering `addr..addr+len` entirely, marked most recently used.
    fn lookup(&mut self, addr: usize, len: usize) -> Option<Registration>;
    /// Cache a registration. Returns registrations evicted to respect the cache's bound; the
    /// caller deregisters them.
    fn insert(&mut self, entry: CachedRegistration) -> Vec<CachedRegistration>;
    /// Drop every registration overlapping `addr..addr+len` (memory released or remapped) and
    /// return them for deregistration.
    fn invalidate(&mut self, addr: usize, len: usize) -> Vec<CachedRegistration>;
    /// Number of cached registrations.
    fn len(&self) -> usize;
    /// True when empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Hits and misses so far.
    fn stats(&self) -> (u64, u64);
}

/// An RCache component.
pub trait RcacheComponent: Component {
    /// Create a cache.
    fn create(&self, params: &ParamStore) -> Box<dyn Rcache>;
}

/// Least-recently-used registration cache bounded by entry count.
#[derive(Debug)]
pub struct LruRcache {
    max_entries: usize,
    // addr -> (entry, last use); a BTreeMap keeps overlap queries cheap.
    entries: BTreeMap<usize, (CachedRegistration, u64)>,
    clock: u64,
    hits: u64,
    misses: u64,
}

impl LruRcache {
    /// A cache of at most `max_entries` registrations (0 = unbounded).
    pub fn new(max_entries: usize) -> Self {
        Self {
            max_entries,
            entries: BTreeMap::new(),
            clock: 0,
            hits: 0,
            misses: 0,
        }
    }
}

impl Rcache for LruRcache {
    fn lookup(&mut self, addr: usize, len: usize) -> Option<Registration> {
        self.clock += 1;
        let end = addr.saturating_add(len);
        let found = self
            .entries
            .range(..=addr)
            .rev()
            .find(|(_, (e, _))| e.addr + e.len >= end)
            .map(|(k, _)| *k);
        match found {
            Some(k) => {
                let clock = self.clock;
                let (entry, used) = self.entries.get_mut(&k).expect("key just found");
                *used = clock;
                self.hits += 1;
                Some(entry.registration.clone())
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    fn insert(&mut self, entry: CachedRegistration) -> Vec<CachedRegistration> {
        self.clock += 1;
        let mut evicted = Vec::new();
        if let Some((old, _)) = self.entries.insert(entry.addr, (entry, self.clock)) {
            evicted.push(old);
        }
        while self.max_entries > 0 && self.entries.len() > self.max_entries {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k);
            match oldest.and_then(|k| self.entries.remove(&k)) {
                Some((e, _)) => evicted.push(e),
                None => break,
            }
        }
        evicted
    }

    fn invalidate(&mut self, addr: usize, len: usize) -> Vec<CachedRegistration> {
        let end = addr.saturating_add(len);
        let doomed: Vec<usize> = self
            .entries
            .range(..end)
            .filter(|(_, (e, _))| e.addr + e.len > addr)
            .map(|(k, _)| *k)
            .collect();
        doomed
            .into_iter()
            .filter_map(|k| self.entries.remove(&k).map(|(e, _)| e))
            .collect()
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn stats(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }
}

/// The built-in `lru` rcache component.
#[derive(Debug)]
pub struct LruRcacheComponent;

impl Component for LruRcacheComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "lru",
            version: env!("CARGO_PKG_VERSION"),
            description:
                "registration cache with least-recently-used eviction and range invalidation",
        }
    }
    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        params.add(
            Param::int("max_entries", 1024)
                .range(0, 1 << 24)
                .help("Registrations kept per BTL module before the least recently used is released (0: unbounded)")
                .level(Level::Tuning),
        );
    }
}

impl RcacheComponent for LruRcacheComponent {
    fn create(&self, params: &ParamStore) -> Box<dyn Rcache> {
        let max = params
            .get_int("rcache_lru_max_entries")
            .unwrap_or(1024)
            .max(0) as usize;
        Box::new(LruRcache::new(max))
    }
}

/// The `lru` component instance (also the fallback of
/// [`InitContext::create_rcache`](crate::init::InitContext::create_rcache)).
pub static LRU_RCACHE: LruRcacheComponent = LruRcacheComponent;

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(addr: usize, len: usize, h: u64) -> CachedRegistration {
        CachedRegistration {
            addr,
            len,
            registration: Registration {
                handle: h,
                remote_key: vec![],
            },
        }
    }

    #[test]
    fn lookup_needs_full_cover() {
        let mut c = LruRcache::new(0);
        c.insert(reg(1000, 100, 1));
        assert_eq!(c.lookup(1010, 50).map(|r| r.handle), Some(1));
        assert!(
            c.lookup(1050, 100).is_none(),
            "partially covered range is a miss"
        );
        assert_eq!(c.stats(), (1, 1));
    }

    #[test]
    fn invalidate_removes_every_overlap_so_reallocated_memory_misses() {
        let mut c = LruRcache::new(0);
        c.insert(reg(1000, 100, 1));
        c.insert(reg(1100, 100, 2));
        c.insert(reg(5000, 10, 3));
        let gone: Vec<u64> = c
            .invalidate(1050, 100)
            .iter()
            .map(|e| e.registration.handle)
            .collect();
        assert_eq!(gone, vec![1, 2]);
        // Same address handed out again by the allocator: must not hit the stale entry.
        assert!(c.lookup(1000, 10).is_none());
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn evicts_least_recently_used() {
        let mut c = LruRcache::new(2);
        c.insert(reg(0, 10, 1));
        c.insert(reg(100, 10, 2));
        c.lookup(0, 10);
        let ev = c.insert(reg(200, 10, 3));
        assert_eq!(
            ev.iter().map(|e| e.registration.handle).collect::<Vec<_>>(),
            vec![2]
        );
    }
}
