//! Send-side bookkeeping, sans-IO: send-queue credits of the round-robin send QPs and the
//! FIFO of fragments waiting for a credit, bounded in fragments and in bytes (a queued
//! fragment is a copy of up to one MTU: 4096 of 65000 bytes would hold 266 MB).
//!
//! The module asks [`SendScheduler::admit`] what to do with a new fragment: post it now on
//! a given QP, queue it (all send queues are full, or older fragments are already waiting:
//! FIFO keeps the PML's order), or refuse it (queue at its cap: the caller returns
//! `WouldBlock`, having taken nothing). Completions give credits back; [`SendScheduler::poll_transmit`]
//! then hands out queued fragments with the QP to post them on.

use std::collections::VecDeque;

/// What to do with a new fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Post on this send QP now (a credit was taken).
    Post(usize),
    /// Queue it ([`SendScheduler::enqueue`] will accept it).
    Queue,
    /// The pending queue is full: refuse.
    Refuse,
}

/// Credits and pending FIFO of the send QPs.
#[derive(Debug)]
pub struct SendScheduler<F> {
    depth: u32,
    outstanding: Vec<u32>,
    next: usize,
    pending: VecDeque<(F, usize)>,
    pending_max: usize,
    /// Bytes of the queued fragments, and their cap (one fragment is always let in, whatever
    /// its size, so that a cap below the MTU cannot stall the BTL).
    pending_bytes: usize,
    pending_bytes_max: usize,
    pending_hwm: usize,
    queued_total: u64,
}

impl<F> SendScheduler<F> {
    /// `qps` send QPs of `depth` slots each; at most `pending_max` queued fragments and (beyond
    /// the first) `pending_bytes_max` queued bytes.
    pub fn new(qps: usize, depth: u32, pending_max: usize, pending_bytes_max: usize) -> Self {
        assert!(qps > 0 && depth > 0, "at least one send QP of depth 1");
        Self {
            depth,
            outstanding: vec![0; qps],
            next: 0,
            pending: VecDeque::new(),
            pending_max,
            pending_bytes: 0,
            pending_bytes_max,
            pending_hwm: 0,
            queued_total: 0,
        }
    }

    /// Take a credit on the next QP (round robin) that has one.
    fn take_credit(&mut self) -> Option<usize> {
        let n = self.outstanding.len();
        for i in 0..n {
            let qp = (self.next + i) % n;
            if self.outstanding[qp] < self.depth {
                self.outstanding[qp] += 1;
                self.next = (qp + 1) % n;
                return Some(qp);
            }
        }
        None
    }

    /// Room in the queue for a fragment of `bytes`?
    fn has_room(&self, bytes: usize) -> bool {
        self.pending.len() < self.pending_max
            && (self.pending.is_empty() || self.pending_bytes + bytes <= self.pending_bytes_max)
    }

    /// Decide for a new fragment of `bytes`. Never posts ahead of queued fragments.
    pub fn admit(&mut self, bytes: usize) -> Admit {
        if self.pending.is_empty() {
            if let Some(qp) = self.take_credit() {
                return Admit::Post(qp);
            }
        }
        if self.has_room(bytes) {
            Admit::Queue
        } else {
            Admit::Refuse
        }
    }

    /// Queue a fragment of `bytes` after [`Admit::Queue`] (or after a post the device
    /// refused). Hands it back when the queue is at its cap.
    pub fn enqueue(&mut self, frag: F, bytes: usize) -> Result<(), F> {
        if !self.has_room(bytes) {
            return Err(frag);
        }
        self.pending_bytes += bytes;
        self.pending.push_back((frag, bytes));
        self.queued_total += 1;
        self.pending_hwm = self.pending_hwm.max(self.pending.len());
        Ok(())
    }

    /// Put a fragment back at the head (its post was refused by the device after
    /// [`SendScheduler::poll_transmit`]); ignores the cap since it was already accepted.
    pub fn requeue_front(&mut self, qp: usize, frag: F, bytes: usize) {
        self.release(qp);
        self.pending_bytes += bytes;
        self.pending.push_front((frag, bytes));
    }

    /// Give back the credit of a post the device refused (the fragment is then queued).
    pub fn release(&mut self, qp: usize) {
        self.outstanding[qp] = self.outstanding[qp].saturating_sub(1);
    }

    /// A send on `qp` completed: one credit back.
    pub fn complete(&mut self, qp: usize) {
        self.release(qp);
    }

    /// The next queued fragment with the QP (and credit) to post it on, if both exist.
    pub fn poll_transmit(&mut self) -> Option<(usize, F)> {
        if self.pending.is_empty() {
            return None;
        }
        let qp = self.take_credit()?;
        let (f, bytes) = self.pending.pop_front().expect("checked non-empty");
        self.pending_bytes -= bytes;
        Some((qp, f))
    }

    /// Drop queued fragments matching `pred` (peers removed by `del_procs`); returns how many.
    pub fn drop_pending(&mut self, mut pred: impl FnMut(&F) -> bool) -> usize {
        let before = self.pending.len();
        let mut freed = 0;
        self.pending.retain(|(f, bytes)| {
            let drop = pred(f);
            if drop {
                freed += bytes;
            }
            !drop
        });
        self.pending_bytes -= freed;
        before - self.pending.len()
    }

    /// Fragments waiting now.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
    /// Bytes of the fragments waiting now.
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }
    /// Most fragments ever waiting at once.
    pub fn pending_hwm(&self) -> usize {
        self.pending_hwm
    }
    /// Fragments that ever went through the queue.
    pub fn queued_total(&self) -> u64 {
        self.queued_total
    }
    /// Credits in use on `qp`.
    pub fn outstanding(&self, qp: usize) -> u32 {
        self.outstanding[qp]
    }
    /// Sends posted and not completed, over all QPs.
    pub fn total_outstanding(&self) -> u64 {
        self.outstanding.iter().map(|&o| u64::from(o)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_robin_then_queue_then_refuse() {
        let mut s = SendScheduler::<u32>::new(2, 1, 1, usize::MAX);
        assert_eq!(s.admit(10), Admit::Post(0));
        assert_eq!(s.admit(10), Admit::Post(1));
        assert_eq!(s.admit(10), Admit::Queue);
        s.enqueue(7, 10).unwrap();
        assert_eq!(s.admit(10), Admit::Refuse);
        assert_eq!(s.enqueue(8, 10), Err(8));
        assert_eq!(s.poll_transmit(), None, "no credit yet");
        s.complete(1);
        // A credit is free but a fragment waits: new fragments must not overtake it.
        assert_eq!(s.admit(10), Admit::Refuse);
        assert_eq!(s.poll_transmit(), Some((1, 7)));
        assert_eq!(s.pending_hwm(), 1);
    }

    #[test]
    fn the_queue_is_bounded_in_bytes_but_always_takes_one_fragment() {
        // 64 KB fragments (the loopback MTU) against a 100 KB budget: one queued, then full.
        let mut s = SendScheduler::<u32>::new(1, 1, 4096, 100_000);
        assert_eq!(s.admit(65_000), Admit::Post(0));
        assert_eq!(s.admit(65_000), Admit::Queue);
        s.enqueue(1, 65_000).unwrap();
        assert_eq!(
            s.admit(65_000),
            Admit::Refuse,
            "a second 65 KB copy exceeds 100 KB"
        );
        assert_eq!(s.enqueue(2, 65_000), Err(2));
        // Small fragments still fit beside it.
        assert_eq!(s.admit(2_000), Admit::Queue);
        s.enqueue(3, 2_000).unwrap();
        assert_eq!(s.pending_bytes(), 67_000);
        s.complete(0);
        assert_eq!(s.poll_transmit(), Some((0, 1)));
        assert_eq!(s.pending_bytes(), 2_000);
        assert_eq!(s.drop_pending(|_| true), 1);
        assert_eq!(s.pending_bytes(), 0);
        // A budget below one fragment still lets one in (never a stall).
        let mut tiny = SendScheduler::<u32>::new(1, 1, 8, 10);
        assert_eq!(tiny.admit(500), Admit::Post(0));
        assert_eq!(tiny.admit(500), Admit::Queue);
        tiny.enqueue(9, 500).unwrap();
        assert_eq!(tiny.admit(1), Admit::Refuse);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Submit,
        Complete(usize),
        Flush,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Submit),
            2 => (0usize..4).prop_map(Op::Complete),
            1 => Just(Op::Flush),
        ]
    }

    proptest! {
        /// Credits never exceed the depth, accepted fragments are all transmitted exactly once
        /// and in submission order, and only a full queue refuses.
        #[test]
        fn fifo_credits_and_no_loss(qps in 1usize..4, depth in 1u32..4, cap in 0usize..6,
                                    ops in proptest::collection::vec(op(), 0..200)) {
            let mut s = SendScheduler::<u64>::new(qps, depth, cap, usize::MAX);
            let mut next_id = 0u64;
            let mut sent = Vec::new();
            let mut in_flight: Vec<Vec<u64>> = vec![Vec::new(); qps];
            let mut accepted = Vec::new();
            for o in ops {
                match o {
                    Op::Submit => match s.admit(1) {
                        Admit::Post(q) => { accepted.push(next_id); sent.push(next_id); in_flight[q].push(next_id); next_id += 1; }
                        Admit::Queue => { s.enqueue(next_id, 1).unwrap(); accepted.push(next_id); next_id += 1; }
                        Admit::Refuse => prop_assert_eq!(s.pending_len(), cap),
                    },
                    Op::Complete(q) => {
                        let q = q % qps;
                        if !in_flight[q].is_empty() { in_flight[q].remove(0); s.complete(q); }
                    }
                    Op::Flush => while let Some((q, f)) = s.poll_transmit() { sent.push(f); in_flight[q].push(f); },
                }
                for (q, fl) in in_flight.iter().enumerate() {
                    prop_assert!(s.outstanding(q) <= depth);
                    prop_assert_eq!(s.outstanding(q) as usize, fl.len());
                }
            }
            // Drain everything.
            loop {
                for (q, fl) in in_flight.iter_mut().enumerate() { while fl.pop().is_some() { s.complete(q); } }
                let mut moved = false;
                while let Some((q, f)) = s.poll_transmit() { sent.push(f); in_flight[q].push(f); moved = true; }
                if !moved { break; }
            }
            prop_assert_eq!(sent, accepted);
        }
    }
}
