//! [`SortedMap`]: the connection's ordered maps (messages, vfrags, send tokens by number), as a
//! sorted ring buffer instead of a `BTreeMap`.
//!
//! Their keys are numbers that mostly arrive in increasing order and leave from either end (a
//! message is inserted behind the others and usually completes first); a `BTreeMap` allocated,
//! searched and rebalanced nodes for that, a quarter of a small message's CPU in pml-dr. Here
//! an insert behind the last key is a push, a lookup or removal at either end a comparison or
//! two, anything else a binary search, and a removal in the middle moves the shorter side
//! (bounded by the connection's limits: the window, `rx_limit`). Iteration is in key order, as
//! a `BTreeMap`'s.

use std::collections::VecDeque;

/// An ordered map over a `VecDeque` of `(key, value)` sorted by key. See the module
/// documentation.
#[derive(Debug, Clone)]
pub struct SortedMap<K, V> {
    items: VecDeque<(K, V)>,
}

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        Self {
            items: VecDeque::new(),
        }
    }
}

/// Capacity kept after a burst: above it, a map that emptied to an eighth gives memory back.
const KEEP: usize = 256;

impl<K: Ord + Copy, V> SortedMap<K, V> {
    /// An empty map (no allocation).
    pub fn new() -> Self {
        Self::default()
    }

    /// Where `k` is (`Ok`) or would go (`Err`): the ends first, where keys come and go.
    #[inline]
    fn find(&self, k: &K) -> Result<usize, usize> {
        let n = self.items.len();
        let Some((last, _)) = self.items.back() else {
            return Err(0);
        };
        match k.cmp(last) {
            std::cmp::Ordering::Greater => return Err(n),
            std::cmp::Ordering::Equal => return Ok(n - 1),
            std::cmp::Ordering::Less => {}
        }
        match k.cmp(&self.items[0].0) {
            std::cmp::Ordering::Less => return Err(0),
            std::cmp::Ordering::Equal => return Ok(0),
            std::cmp::Ordering::Greater => {}
        }
        self.items.binary_search_by(|(x, _)| x.cmp(k))
    }

    /// Inserts `v` under `k`; returns the value it replaced.
    #[inline]
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        match self.find(&k) {
            Ok(i) => Some(std::mem::replace(&mut self.items[i].1, v)),
            Err(i) if i == self.items.len() => {
                self.items.push_back((k, v));
                None
            }
            Err(i) => {
                self.items.insert(i, (k, v));
                None
            }
        }
    }

    /// The value under `k`.
    #[inline]
    pub fn get(&self, k: &K) -> Option<&V> {
        let i = self.find(k).ok()?;
        Some(&self.items[i].1)
    }

    /// The value under `k`, mutably.
    #[inline]
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        let i = self.find(k).ok()?;
        Some(&mut self.items[i].1)
    }

    /// Removes and returns the value under `k`.
    #[inline]
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let i = self.find(k).ok()?;
        let v = if i == 0 {
            self.items.pop_front()
        } else {
            self.items.remove(i)
        }
        .map(|(_, v)| v);
        if self.items.capacity() > KEEP && self.items.len() < self.items.capacity() / 8 {
            self.items.shrink_to(KEEP.max(self.items.len() * 2));
        }
        v
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.items.clear();
    }

    /// The entry with the least key.
    pub fn first(&self) -> Option<(&K, &V)> {
        self.items.front().map(|(k, v)| (k, v))
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> {
        self.items.iter().map(|(k, v)| (k, v))
    }

    /// Entries in key order, values mutable.
    pub fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = (&K, &mut V)> {
        self.items.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// Values in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> {
        self.items.iter().map(|(_, v)| v)
    }

    /// Values in key order, mutable.
    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut V> {
        self.items.iter_mut().map(|(_, v)| v)
    }

    /// Keeps the entries for which `f` is true.
    pub fn retain(&mut self, mut f: impl FnMut(&K, &mut V) -> bool) {
        self.items.retain_mut(|(k, v)| f(k, v));
    }
}

impl<K: Ord + Copy, V> std::ops::Index<&K> for SortedMap<K, V> {
    type Output = V;
    #[inline]
    fn index(&self, k: &K) -> &V {
        self.get(k).expect("key present in SortedMap")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u32),
        Remove(u16),
        Get(u16),
        Bump(u16),
        RetainOdd,
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Small keys so that lookups hit; weights favour inserts so maps grow past a few.
        prop_oneof![
            6 => (0u16..200, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            4 => (0u16..200).prop_map(Op::Remove),
            3 => (0u16..200).prop_map(Op::Get),
            2 => (0u16..200).prop_map(Op::Bump),
            1 => Just(Op::RetainOdd),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Every operation answers as a `BTreeMap`'s does, and iteration is in the same order.
        #[test]
        fn behaves_as_a_btreemap(ops in proptest::collection::vec(op(), 0..400),
                                 ascending in any::<bool>()) {
            let mut m = SortedMap::new();
            let mut b = BTreeMap::new();
            for (i, op) in ops.into_iter().enumerate() {
                match op {
                    // Half the cases insert mostly in order (the connection's pattern).
                    Op::Insert(k, v) => {
                        let k = if ascending { (i as u16).wrapping_add(k % 4) } else { k };
                        prop_assert_eq!(m.insert(k, v), b.insert(k, v));
                    }
                    Op::Remove(k) => prop_assert_eq!(m.remove(&k), b.remove(&k)),
                    Op::Get(k) => prop_assert_eq!(m.get(&k), b.get(&k)),
                    Op::Bump(k) => {
                        if let (Some(x), Some(y)) = (m.get_mut(&k), b.get_mut(&k)) {
                            *x = x.wrapping_add(1);
                            *y = y.wrapping_add(1);
                        } else {
                            prop_assert!(m.get(&k).is_none() && !b.contains_key(&k));
                        }
                    }
                    Op::RetainOdd => {
                        m.retain(|_, v| *v % 2 == 1);
                        b.retain(|_, v| *v % 2 == 1);
                    }
                    Op::Clear => {
                        m.clear();
                        b.clear();
                    }
                }
                prop_assert_eq!(m.len(), b.len());
                prop_assert_eq!(m.is_empty(), b.is_empty());
                prop_assert!(m.iter().eq(b.iter()));
                prop_assert!(m.values().eq(b.values()));
            }
        }
    }

    #[test]
    fn a_large_map_that_empties_gives_memory_back() {
        let mut m = SortedMap::new();
        for k in 0..10_000u64 {
            m.insert(k, k);
        }
        assert_eq!(m[&9_999], 9_999);
        for k in 0..9_990u64 {
            assert_eq!(m.remove(&k), Some(k));
        }
        assert!(m.items.capacity() <= 4 * KEEP, "{}", m.items.capacity());
        assert!(m.values().copied().eq(9_990..10_000));
    }
}
