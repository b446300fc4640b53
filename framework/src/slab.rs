//! The request table every PML keeps its requests in: a generational slab keyed by
//! [`RequestId`].
//!
//! An id is a slot index and the slot's generation. Removing an entry bumps its slot's
//! generation, so a stale id (or a forged one, e.g. read from a packet) does not reach the
//! request that reuses the slot: every lookup with it answers `None`, as for an id never
//! issued. (The 32-bit generation wraps after 2^32-1 reuses of one slot; a forged id guesses
//! the current generation once in 2^31.) Vacant slots are chained through themselves, so
//! insert and remove allocate only when the table grows past its largest size so far.
//!
//! Generations stay below 2^31, so no id has its top bit ([`ID_SPARE_BIT`]) set: a PML may
//! use that bit to tell its other completion tokens from request ids (pml-ob1's one-sided
//! transfers). With 32-bit generations a slot reused 2^31 times (a loop of one message at a
//! time, about half an hour at a million messages a second) gave ids with it set.

use crate::pml::RequestId;

/// The bit of a [`RequestId`] no id of a [`Slab`] has set (see the module).
pub const ID_SPARE_BIT: u64 = 1 << 63;

/// Generations are below this: ids stay clear of [`ID_SPARE_BIT`].
const GEN_LIMIT: u32 = 1 << 31;

/// No vacant slot (the end of the free chain).
const NO_SLOT: u32 = u32::MAX;

#[derive(Debug)]
enum Entry<T> {
    Occupied(T),
    /// Free; the next free slot's index, or [`NO_SLOT`].
    Vacant(u32),
}

#[derive(Debug)]
struct Slot<T> {
    /// Never 0, so `RequestId(0)` and any id with a zero high half are never valid.
    gen: u32,
    entry: Entry<T>,
}

/// A generational slab of requests: [`Slab::insert`] returns a [`RequestId`];
/// [`Slab::get`], [`Slab::get_mut`] and [`Slab::remove`] answer `None` for an id that is stale
/// (its entry was removed, even if the slot was reused since) or was never issued.
#[derive(Debug)]
pub struct Slab<T> {
    slots: Vec<Slot<T>>,
    /// Head of the chain of vacant slots (most recently freed first: its memory is warm).
    free: u32,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[inline(always)]
fn make_id(gen: u32, index: u32) -> RequestId {
    RequestId((u64::from(gen) << 32) | u64::from(index))
}

#[inline(always)]
fn split_id(id: RequestId) -> (u32, usize) {
    ((id.0 >> 32) as u32, id.0 as u32 as usize)
}

impl<T> Slab<T> {
    /// An empty table; allocates on the first insert.
    pub const fn new() -> Self {
        Self {
            slots: Vec::new(),
            free: NO_SLOT,
            len: 0,
        }
    }

    /// An empty table with room for `n` entries before it allocates.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            slots: Vec::with_capacity(n),
            free: NO_SLOT,
            len: 0,
        }
    }

    /// Entries held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no entry is held.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries the table holds before it allocates again.
    pub fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// Stores `value` and returns its id, reusing the most recently freed slot if any.
    ///
    /// # Panics
    /// If `u32::MAX` entries are held at once (the index half of an id would overflow); the
    /// memory of that many requests runs out long before.
    // Always inlined: the value is then built in its slot rather than copied there.
    #[inline(always)]
    pub fn insert(&mut self, value: T) -> RequestId {
        let i = self.free;
        // NO_SLOT is past the end, so an empty chain falls through to growing.
        if let Some(slot) = self.slots.get_mut(i as usize) {
            if let Entry::Vacant(next) = slot.entry {
                self.free = next;
                self.len += 1;
                slot.entry = Entry::Occupied(value);
                return make_id(slot.gen, i);
            }
        }
        self.push(value)
    }

    /// [`Slab::insert`] into a new slot.
    #[cold]
    #[inline(never)]
    fn push(&mut self, value: T) -> RequestId {
        let i = u32::try_from(self.slots.len())
            .ok()
            .filter(|&i| i != NO_SLOT)
            .expect("request table full: u32::MAX - 1 requests outstanding");
        self.slots.push(Slot {
            gen: 1,
            entry: Entry::Occupied(value),
        });
        self.len += 1;
        make_id(1, i)
    }

    /// The entry `id` names, if it is still held.
    #[inline]
    pub fn get(&self, id: RequestId) -> Option<&T> {
        let (gen, i) = split_id(id);
        match self.slots.get(i) {
            Some(Slot {
                gen: g,
                entry: Entry::Occupied(v),
            }) if *g == gen => Some(v),
            _ => None,
        }
    }

    /// The entry `id` names, if it is still held.
    #[inline]
    pub fn get_mut(&mut self, id: RequestId) -> Option<&mut T> {
        let (gen, i) = split_id(id);
        match self.slots.get_mut(i) {
            Some(Slot {
                gen: g,
                entry: Entry::Occupied(v),
            }) if *g == gen => Some(v),
            _ => None,
        }
    }

    /// Whether `id` names an entry still held.
    #[inline]
    pub fn contains(&self, id: RequestId) -> bool {
        self.get(id).is_some()
    }

    /// Takes out the entry `id` names, if it is still held; `id` is stale from then on.
    #[inline]
    pub fn remove(&mut self, id: RequestId) -> Option<T> {
        self.entry(id).map(Occupied::remove)
    }

    /// The entry `id` names, if it is still held, to look at and then maybe remove with one
    /// lookup (e.g. release a request only if it completed).
    #[inline]
    pub fn entry(&mut self, id: RequestId) -> Option<Occupied<'_, T>> {
        let (gen, i) = split_id(id);
        let Slab { slots, free, len } = self;
        match slots.get_mut(i) {
            Some(slot) if slot.gen == gen && matches!(slot.entry, Entry::Occupied(_)) => {
                Some(Occupied {
                    slot,
                    free,
                    len,
                    index: i as u32,
                })
            }
            _ => None,
        }
    }

    /// The held entries with their ids, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (RequestId, &T)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match &s.entry {
                Entry::Occupied(v) => Some((make_id(s.gen, i as u32), v)),
                Entry::Vacant(_) => None,
            })
    }

    /// The held entries with their ids, in slot order, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (RequestId, &mut T)> + '_ {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| match &mut s.entry {
                Entry::Occupied(v) => Some((make_id(s.gen, i as u32), v)),
                Entry::Vacant(_) => None,
            })
    }

    /// The ids of the held entries, in slot order.
    pub fn ids(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.iter().map(|(id, _)| id)
    }
}

/// A held entry of a [`Slab`], from [`Slab::entry`].
#[derive(Debug)]
pub struct Occupied<'a, T> {
    /// An occupied slot.
    slot: &'a mut Slot<T>,
    free: &'a mut u32,
    len: &'a mut usize,
    index: u32,
}

impl<'a, T> Occupied<'a, T> {
    /// The entry.
    #[inline]
    pub fn get_mut(&mut self) -> &mut T {
        match &mut self.slot.entry {
            Entry::Occupied(v) => v,
            Entry::Vacant(_) => unreachable!("an Occupied names an occupied slot"),
        }
    }

    /// The entry, for as long as the table is borrowed.
    #[inline]
    pub fn into_mut(self) -> &'a mut T {
        match &mut self.slot.entry {
            Entry::Occupied(v) => v,
            Entry::Vacant(_) => unreachable!("an Occupied names an occupied slot"),
        }
    }

    /// Takes the entry out; its id is stale from then on.
    #[inline]
    pub fn remove(self) -> T {
        let old = std::mem::replace(&mut self.slot.entry, Entry::Vacant(*self.free));
        self.vacated();
        match old {
            Entry::Occupied(v) => v,
            Entry::Vacant(_) => unreachable!("an Occupied names an occupied slot"),
        }
    }

    /// Drops the entry where it lies (cheaper than moving it out with [`Occupied::remove`]
    /// when the caller has no use for it); its id is stale from then on.
    #[inline]
    pub fn delete(self) {
        self.slot.entry = Entry::Vacant(*self.free);
        self.vacated();
    }

    /// Vacates the slot without running the entry's destructor, as [`std::mem::forget`]
    /// does: for an entry the caller has already emptied of everything it owns, where the
    /// drop glue (not inlined for a type with boxed parts) would only find nothing to free.
    /// Whatever the entry still owns is leaked. Its id is stale from then on.
    #[inline]
    pub fn forget(self) {
        std::mem::forget(std::mem::replace(
            &mut self.slot.entry,
            Entry::Vacant(*self.free),
        ));
        self.vacated();
    }

    #[inline(always)]
    fn vacated(self) {
        // Wrap below GEN_LIMIT, skipping 0: a zero generation is never issued.
        let next = self.slot.gen + 1;
        self.slot.gen = if next == GEN_LIMIT { 1 } else { next };
        *self.free = self.index;
        *self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn insert_get_remove() {
        let mut s = Slab::new();
        let a = s.insert("a");
        let b = s.insert("b");
        assert_ne!(a, b);
        assert_eq!(s.len(), 2);
        assert_eq!(s.get(a), Some(&"a"));
        *s.get_mut(b).unwrap() = "B";
        assert_eq!(s.remove(b), Some("B"));
        assert_eq!(s.remove(b), None);
        assert_eq!(s.len(), 1);
        assert!(s.contains(a));
        assert!(!s.contains(b));
    }

    #[test]
    fn forget_vacates_without_dropping() {
        use std::rc::Rc;
        let owned = Rc::new(());
        let mut s = Slab::new();
        let a = s.insert(Rc::clone(&owned));
        let b = s.insert(Rc::clone(&owned));
        s.entry(a).unwrap().forget();
        // The slot is free and the id stale, but the destructor did not run (leaked).
        assert_eq!(s.get(a), None);
        assert_eq!(s.len(), 1);
        assert_eq!(Rc::strong_count(&owned), 3);
        s.entry(b).unwrap().delete();
        assert_eq!(Rc::strong_count(&owned), 2);
        // The forgotten slot is reused like a deleted one.
        let c = s.insert(Rc::clone(&owned));
        assert_eq!(c.0 as u32, b.0 as u32);
        let d = s.insert(Rc::clone(&owned));
        assert_eq!(d.0 as u32, a.0 as u32);
    }

    #[test]
    fn entry_looks_then_removes() {
        let mut s = Slab::new();
        let a = s.insert(1);
        let b = s.insert(2);
        *s.entry(a).unwrap().get_mut() += 10;
        assert_eq!(s.get(a), Some(&11));
        *s.entry(b).unwrap().into_mut() += 20;
        let e = s.entry(b).unwrap();
        assert_eq!(e.remove(), 22);
        assert!(s.entry(b).is_none());
        assert_eq!(s.len(), 1);
        assert_eq!(s.get(a), Some(&11));
        s.entry(a).unwrap().delete();
        assert!(s.is_empty());
        assert_eq!(s.get(a), None);
        // Both slots are reused before the table grows.
        let c = s.insert(3);
        let d = s.insert(4);
        assert_eq!((c.0 as u32, d.0 as u32), (0, 1));
        assert_eq!(s.slots.len(), 2);
    }

    #[test]
    fn stale_id_never_reaches_the_slot_reuser() {
        let mut s = Slab::new();
        let old = s.insert(1);
        assert_eq!(s.remove(old), Some(1));
        let new = s.insert(2);
        // Same slot, other generation.
        assert_eq!(old.0 as u32, new.0 as u32);
        assert_ne!(old, new);
        assert_eq!(s.get(old), None);
        assert_eq!(s.get_mut(old), None);
        assert_eq!(s.remove(old), None);
        assert_eq!(s.get(new), Some(&2));
    }

    #[test]
    fn unknown_and_forged_ids_are_refused() {
        let mut s = Slab::new();
        let a = s.insert(7u8);
        for forged in [
            RequestId(0),
            RequestId(a.0 as u32 as u64), // generation 0
            RequestId(a.0 + (1 << 32)),   // a later generation
            RequestId(a.0 + 1),           // a slot never used
            RequestId(u64::MAX),
        ] {
            assert_eq!(s.get(forged), None, "{forged:?}");
            assert_eq!(s.remove(forged), None, "{forged:?}");
        }
        assert_eq!(s.get(a), Some(&7));
    }

    #[test]
    fn generation_skips_zero_on_wrap() {
        let mut s = Slab::new();
        let first = s.insert(0);
        s.slots[0].gen = GEN_LIMIT - 1;
        let last = make_id(GEN_LIMIT - 1, 0);
        assert_eq!(
            last.0 & ID_SPARE_BIT,
            0,
            "the last generation leaves the spare bit"
        );
        assert_eq!(s.remove(last), Some(0));
        let next = s.insert(1);
        assert_eq!(split_id(next), (1, 0));
        // The wrapped generation equals the very first one: only 2^31 - 1 reuses of one slot
        // apart, which no request outlives.
        assert_eq!(next, first);
    }

    #[test]
    fn steady_state_reuses_slots_without_growing() {
        let mut s = Slab::with_capacity(4);
        for round in 0..1000 {
            let ids: Vec<_> = (0..4).map(|k| s.insert(round * 4 + k)).collect();
            for id in ids {
                assert!(s.remove(id).is_some());
            }
        }
        assert_eq!(s.slots.len(), 4);
        assert_eq!(s.capacity(), 4);
        assert!(s.is_empty());
    }

    #[test]
    fn iteration_sees_held_entries_only() {
        let mut s = Slab::new();
        let ids: Vec<_> = (0..5).map(|v| s.insert(v)).collect();
        s.remove(ids[1]);
        s.remove(ids[3]);
        let seen: Vec<_> = s.iter().map(|(id, &v)| (id, v)).collect();
        assert_eq!(seen, vec![(ids[0], 0), (ids[2], 2), (ids[4], 4)]);
        for (_, v) in s.iter_mut() {
            *v += 10;
        }
        assert_eq!(s.ids().collect::<Vec<_>>(), vec![ids[0], ids[2], ids[4]]);
        assert_eq!(s.get(ids[4]), Some(&14));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u32),
        /// Acts on the `n`-th id ever issued (modulo their count): often a stale one.
        Get(usize),
        Set(usize, u32),
        Remove(usize),
        Forged(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => any::<u32>().prop_map(Op::Insert),
            2 => any::<usize>().prop_map(Op::Get),
            1 => (any::<usize>(), any::<u32>()).prop_map(|(i, v)| Op::Set(i, v)),
            3 => any::<usize>().prop_map(Op::Remove),
            1 => any::<u64>().prop_map(Op::Forged),
        ]
    }

    proptest! {
        /// The slab behaves as a map from ids never issued twice to values.
        #[test]
        fn matches_a_hashmap(ops in proptest::collection::vec(op(), 1..400)) {
            let mut slab = Slab::new();
            let mut model: HashMap<RequestId, u32> = HashMap::new();
            let mut issued: Vec<RequestId> = Vec::new();
            let mut peak = 0;
            for op in ops {
                match op {
                    Op::Insert(v) => {
                        let id = slab.insert(v);
                        prop_assert!(!issued.contains(&id), "id {:?} issued twice", id);
                        issued.push(id);
                        model.insert(id, v);
                    }
                    Op::Get(n) if !issued.is_empty() => {
                        let id = issued[n % issued.len()];
                        prop_assert_eq!(slab.get(id), model.get(&id));
                    }
                    Op::Set(n, v) if !issued.is_empty() => {
                        let id = issued[n % issued.len()];
                        match (slab.get_mut(id), model.get_mut(&id)) {
                            (Some(a), Some(b)) => { *a = v; *b = v; }
                            (None, None) => {}
                            (a, b) => prop_assert!(false, "get_mut {:?}: {:?} vs {:?}", id, a, b),
                        }
                    }
                    Op::Remove(n) if !issued.is_empty() => {
                        let id = issued[n % issued.len()];
                        prop_assert_eq!(slab.remove(id), model.remove(&id));
                    }
                    Op::Forged(raw) => {
                        let id = RequestId(raw);
                        prop_assert_eq!(slab.get(id), model.get(&id));
                    }
                    _ => {}
                }
                prop_assert_eq!(slab.len(), model.len());
                peak = peak.max(model.len());
                // Slots are reused: never more than the most held at once.
                prop_assert!(slab.slots.len() <= peak);
                let mut seen: Vec<_> = slab.iter().map(|(id, &v)| (id, v)).collect();
                let mut want: Vec<_> = model.iter().map(|(&id, &v)| (id, v)).collect();
                seen.sort();
                want.sort();
                prop_assert_eq!(seen, want);
            }
        }
    }
}
