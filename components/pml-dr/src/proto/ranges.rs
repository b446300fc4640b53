//! A compact set of `u64` ids stored as sorted, disjoint, non-adjacent half-open ranges.
//!
//! The receiver remembers every vfrag id it has completed so that late retransmissions are
//! recognised as duplicates and re-acked. Ids arrive almost in order, so the set collapses to a
//! handful of ranges (one per gap still open) instead of growing with the traffic.

/// Sorted disjoint ranges `[start, end)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    ranges: Vec<(u64, u64)>,
}

impl RangeSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// True if `x` is in the set.
    pub fn contains(&self, x: u64) -> bool {
        // First range whose end is beyond x.
        let i = self.ranges.partition_point(|&(_, end)| end <= x);
        self.ranges.get(i).is_some_and(|&(start, _)| start <= x)
    }

    /// Inserts `x`; returns false if it was already present.
    pub fn insert(&mut self, x: u64) -> bool {
        let i = self.ranges.partition_point(|&(_, end)| end < x);
        // ranges[i] is the first range with end >= x: it either contains x, ends exactly at x
        // (extend it), or starts after x.
        if let Some(&(start, end)) = self.ranges.get(i) {
            if start <= x && x < end {
                return false;
            }
            if end == x {
                // Extend right; maybe merge with the next range.
                let new_end = x + 1; // x < u64::MAX is implied by end == x being a range end
                if self.ranges.get(i + 1).is_some_and(|&(s, _)| s == new_end) {
                    self.ranges[i].1 = self.ranges[i + 1].1;
                    self.ranges.remove(i + 1);
                } else {
                    self.ranges[i].1 = new_end;
                }
                return true;
            }
            if x.checked_add(1) == Some(start) {
                self.ranges[i].0 = x;
                return true;
            }
        }
        match x.checked_add(1) {
            Some(end) => self.ranges.insert(i, (x, end)),
            // u64::MAX itself cannot be represented in a half-open range; ids never get there.
            None => return false,
        }
        true
    }

    /// The least id not in the set counting up from 0: every id below it is present (the
    /// cumulative point of a cumulative ack; 0 while 0 itself is missing).
    pub fn prefix_end(&self) -> u64 {
        match self.ranges.first() {
            Some(&(0, end)) => end,
            _ => 0,
        }
    }

    /// Number of stored ranges (the memory footprint).
    pub fn range_count(&self) -> usize {
        self.ranges.len()
    }

    /// Iterates over the stored ranges.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn prefix_end_is_the_first_gap_from_zero() {
        let mut r = RangeSet::new();
        assert_eq!(r.prefix_end(), 0);
        r.insert(1);
        assert_eq!(r.prefix_end(), 0, "0 is missing");
        r.insert(0);
        r.insert(3);
        assert_eq!(r.prefix_end(), 2);
        r.insert(2);
        assert_eq!(r.prefix_end(), 4);
    }

    proptest! {
        #[test]
        fn behaves_like_a_set(xs in proptest::collection::vec(0u64..200, 0..300)) {
            let mut r = RangeSet::new();
            let mut s = BTreeSet::new();
            for x in xs {
                prop_assert_eq!(r.insert(x), s.insert(x));
            }
            for x in 0..202 {
                prop_assert_eq!(r.contains(x), s.contains(&x));
            }
            // Canonical: sorted, non-empty, non-adjacent.
            let v: Vec<_> = r.iter().collect();
            for w in v.windows(2) {
                prop_assert!(w[0].1 < w[1].0);
            }
            for (a, b) in v {
                prop_assert!(a < b);
            }
        }
    }

    #[test]
    fn in_order_ids_stay_one_range() {
        let mut r = RangeSet::new();
        for x in 0..100_000u64 {
            r.insert(x ^ 1); // pairwise swapped: still collapses
        }
        assert_eq!(r.range_count(), 1);
        assert!(r.contains(99_999) && !r.contains(100_000));
    }
}
