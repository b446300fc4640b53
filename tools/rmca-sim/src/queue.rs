//! The event queue: events ordered by explicit simulated time (nanoseconds), ties broken by
//! insertion order, so a run is a pure function of its inputs and seed.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

struct Entry<E> {
    at: u64,
    seq: u64,
    ev: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    // Reversed: BinaryHeap is a max-heap, the earliest (then first inserted) must pop first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// A min-queue of events by time, FIFO among equal times.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
    now: u64,
    /// Events popped so far.
    pub popped: u64,
    /// Most events queued at once.
    pub peak_len: usize,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue at time 0.
    pub fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            seq: 0,
            now: 0,
            popped: 0,
            peak_len: 0,
        }
    }

    /// Current simulated time: that of the last event popped.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Schedules `ev` at `at` (a time in the past is clamped to now: causality).
    pub fn push(&mut self, at: u64, ev: E) {
        let at = at.max(self.now);
        self.heap.push(Entry {
            at,
            seq: self.seq,
            ev,
        });
        self.seq += 1;
        self.peak_len = self.peak_len.max(self.heap.len());
    }

    /// The earliest event, advancing the clock to its time.
    pub fn pop(&mut self) -> Option<(u64, E)> {
        let e = self.heap.pop()?;
        self.now = e.at;
        self.popped += 1;
        Some((e.at, e.ev))
    }

    /// A place in the FIFO order among equal times, for an event kept outside the queue (a
    /// cancellable timer): it runs before every event pushed later at the same time.
    pub fn reserve_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq - 1
    }

    /// (time, place in the order) of the earliest event.
    pub fn peek_key(&self) -> Option<(u64, u64)> {
        self.heap.peek().map(|e| (e.at, e.seq))
    }

    /// An event kept outside the queue runs at `at` (not before the clock): the clock moves
    /// there and it counts as popped.
    pub fn advance(&mut self, at: u64) {
        self.now = self.now.max(at);
        self.popped += 1;
    }

    /// Time of the earliest event.
    pub fn peek_time(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.at)
    }

    /// Events queued.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pops_in_time_order_then_fifo() {
        let mut q = EventQueue::new();
        q.push(30, "c");
        q.push(10, "a1");
        q.push(20, "b");
        q.push(10, "a2");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(10, "a1"), (10, "a2"), (20, "b"), (30, "c")]);
        assert_eq!(q.now(), 30);
        assert_eq!(q.popped, 4);
    }

    #[test]
    fn the_past_is_clamped_to_now() {
        let mut q = EventQueue::new();
        q.push(100, 1);
        assert_eq!(q.pop(), Some((100, 1)));
        q.push(5, 2);
        assert_eq!(
            q.pop(),
            Some((100, 2)),
            "an event never runs before the clock"
        );
    }

    proptest! {
        #[test]
        fn any_schedule_pops_sorted_and_stable(times in proptest::collection::vec(0u64..50, 0..200)) {
            let mut q = EventQueue::new();
            for (i, t) in times.iter().enumerate() {
                q.push(*t, i);
            }
            let mut want: Vec<(u64, usize)> = times.iter().copied().zip(0..).collect();
            want.sort(); // by time, then index = insertion order
            let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
            prop_assert_eq!(got, want);
        }
    }
}
