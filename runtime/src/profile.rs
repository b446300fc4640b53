//! The job profile (in-library profiling counters, as Open MPI's MPI_T performance variables
//! expose them): every rank's counters and memory are merged at finalize into one summary,
//! printed by rank 0 and optionally written as JSON (`profile_json`): these types, serialized.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// Memory one owner (`"<framework>.<component>"`) holds in one rank.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryUse {
    /// Bytes held at the time of the profile.
    pub current: u64,
    /// Peak bytes.
    pub peak: u64,
    /// Allocations made.
    pub allocations: u64,
}

/// One rank's profile, exchanged through the modex at finalize.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankProfile {
    /// The rank.
    pub rank: u32,
    /// The PML in use.
    pub pml: String,
    /// The BTLs in use.
    pub btls: Vec<String>,
    /// Time this rank spent joining the job, microseconds.
    pub init_us: u64,
    /// PML, BTL and window (osc) counters by name.
    pub counters: BTreeMap<String, u64>,
    /// Memory by owner.
    pub memory: BTreeMap<String, MemoryUse>,
    /// The BTLs carrying this rank's traffic to each peer (by rank), joined with '+'.
    #[serde(default)]
    pub peer_btls: Vec<String>,
}

/// Memory of one owner over the job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySummary {
    /// Peaks summed over ranks.
    pub peak_total: u64,
    /// The largest peak of one rank.
    pub peak_max_per_rank: u64,
}

/// The merged profile of a job (rank 0's result of finalize).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobProfile {
    /// Ranks whose profile was merged.
    pub ranks: usize,
    /// The PML of the first rank.
    pub pml: String,
    /// The BTLs of the first rank.
    pub btls: Vec<String>,
    /// The slowest rank's time to join the job, microseconds.
    pub init_us_max: u64,
    /// Counters summed over ranks.
    pub counters: BTreeMap<String, u64>,
    /// Memory by owner.
    pub memory: BTreeMap<String, MemorySummary>,
    /// Every rank's own profile.
    pub per_rank: Vec<RankProfile>,
}

impl JobProfile {
    /// Merge per-rank profiles: counters are summed, memory peaks summed and their per-rank
    /// maximum kept.
    pub fn merge(ranks: Vec<RankProfile>) -> Self {
        let mut counters: BTreeMap<String, u64> = BTreeMap::new();
        let mut memory: BTreeMap<String, MemorySummary> = BTreeMap::new();
        for r in &ranks {
            for (k, v) in &r.counters {
                *counters.entry(k.clone()).or_default() += v;
            }
            for (k, m) in &r.memory {
                let s = memory.entry(k.clone()).or_default();
                s.peak_total += m.peak;
                s.peak_max_per_rank = s.peak_max_per_rank.max(m.peak);
            }
        }
        let first = ranks.first().cloned().unwrap_or_default();
        Self {
            ranks: ranks.len(),
            pml: first.pml,
            btls: first.btls,
            init_us_max: ranks.iter().map(|r| r.init_us).max().unwrap_or(0),
            counters,
            memory,
            per_rank: ranks,
        }
    }

    /// A counter summed over ranks, divided by the number of ranks.
    pub fn counter_per_rank(&self, name: &str) -> Option<f64> {
        let v = *self.counters.get(name)?;
        Some(v as f64 / self.ranks.max(1) as f64)
    }

    /// The largest, over ranks, of the bytes accounted by every memory owner of one rank (peaks
    /// summed over its owners).
    pub fn accounted_peak_max(&self) -> Option<u64> {
        self.per_rank
            .iter()
            .map(|r| r.memory.values().map(|m| m.peak).sum::<u64>())
            .max()
    }

    /// How many (rank, peer) pairs each combination of BTLs carries (see
    /// [`RankProfile::peer_btls`]; the detail per pair is in [`JobProfile::per_rank`]).
    pub fn route_counts(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for r in &self.per_rank {
            for b in &r.peer_btls {
                *out.entry(b.clone()).or_default() += 1;
            }
        }
        out
    }

    /// Human-readable summary.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "rmca profile: {} ranks, pml {:?}, btls {:?}, init {} us (slowest rank)",
            self.ranks, self.pml, self.btls, self.init_us_max
        );
        let _ = writeln!(out, "  {:<48} {:>16}", "counter (sum over ranks)", "value");
        for (k, v) in &self.counters {
            let _ = writeln!(out, "  {k:<48} {v:>16}");
        }
        let _ = writeln!(
            out,
            "  {:<32} {:>16} {:>16}",
            "memory (bytes)", "peak total", "peak max/rank"
        );
        for (k, m) in &self.memory {
            let _ = writeln!(
                out,
                "  {k:<32} {:>16} {:>16}",
                m.peak_total, m.peak_max_per_rank
            );
        }
        let routes = self.route_counts();
        if !routes.is_empty() {
            let _ = writeln!(out, "  {:<32} {:>16}", "btls to a peer", "rank pairs");
            for (btls, n) in routes {
                let _ = writeln!(out, "  {btls:<32} {n:>16}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(rank: u32, init_us: u64, counters: &[(&str, u64)], shm_peak: u64) -> RankProfile {
        RankProfile {
            rank,
            pml: "ob1".into(),
            btls: vec!["self".into(), "shm".into()],
            init_us,
            counters: counters.iter().map(|&(k, v)| (k.to_owned(), v)).collect(),
            memory: [(
                "btl.shm".to_owned(),
                MemoryUse {
                    current: 0,
                    peak: shm_peak,
                    allocations: 1,
                },
            )]
            .into(),
            peer_btls: vec!["self".into(), "shm".into()],
        }
    }

    #[test]
    fn merges_sums_and_maxima() {
        let m = JobProfile::merge(vec![
            rank(0, 5, &[("msgs", 2)], 10),
            rank(1, 9, &[("msgs", 3), ("unexpected", 1)], 30),
        ]);
        assert_eq!(m.counters["msgs"], 5);
        assert_eq!(m.counters["unexpected"], 1);
        assert_eq!(m.memory["btl.shm"].peak_total, 40);
        assert_eq!(m.memory["btl.shm"].peak_max_per_rank, 30);
        assert_eq!(m.init_us_max, 9);
        assert_eq!(m.counter_per_rank("msgs"), Some(2.5));
        assert_eq!(m.accounted_peak_max(), Some(30));
        assert!(m.render().contains("msgs"));
        // Every rank reaches one peer (itself) by self and one by shm.
        assert_eq!(
            m.route_counts(),
            [("self".to_owned(), 2), ("shm".to_owned(), 2)].into()
        );
        assert!(m.render().contains("btls to a peer"));
    }

    #[test]
    fn the_json_keeps_its_field_names_and_reads_back() {
        let m = JobProfile::merge(vec![rank(0, 5, &[("msgs", 2)], 10)]);
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["counters"]["msgs"], 2);
        assert_eq!(v["memory"]["btl.shm"]["peak_max_per_rank"], 10);
        assert_eq!(v["per_rank"][0]["memory"]["btl.shm"]["peak"], 10);
        assert_eq!(v["init_us_max"], 5);
        assert_eq!(serde_json::from_value::<JobProfile>(v).unwrap(), m);
    }
}
