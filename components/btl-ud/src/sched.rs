//! Send-side bookkeeping, sans-IO: send-queue credits of the round-robin send QPs and the
//! FIFO of fragments waiting for a credit.
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
    pending: VecDeque<F>,
    pending_max: usize,
    pending_hwm: usize,
    queued_total: u64,
}

impl<F> SendScheduler<F> {
    /// `qps` send QPs of `depth` slots each; at most `pending_max` queued fragments.
    pub fn new(qps: usize, depth: u32, pending_max: usize) -> Self {
        assert!(qps > 0 && depth > 0, "at least one send QP of depth 1");
        Self {
            depth,
            outstanding: vec![0; qps],
            next: 0,
            pending: VecDeque::new(),
            pending_max,
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

    /// Decide for a new fragment. Never posts ahead of queued fragments.
    pub fn admit(&mut self) -> Admit {
        if self.pending.is_empty() {
            if let Some(qp) = self.take_credit() {
                return Admit::Post(qp);
            }
        }
        if self.pending.len() < self.pending_max {
            Admit::Queue
        } else {
            Admit::Refuse
        }
    }

    /// Queue a fragment after [`Admit::Queue`] (or after a post the device refused).
    /// Hands it back when the queue is at its cap.
    pub fn enqueue(&mut self, frag: F) -> Result<(), F> {
        if self.pending.len() >= self.pending_max {
            return Err(frag);
        }
        self.pending.push_back(frag);
        self.queued_total += 1;
        self.pending_hwm = self.pending_hwm.max(self.pending.len());
        Ok(())
    }

    /// Put a fragment back at the head (its post was refused by the device after
    /// [`SendScheduler::poll_transmit`]); ignores the cap since it was already accepted.
    pub fn requeue_front(&mut self, qp: usize, frag: F) {
        self.release(qp);
        self.pending.push_front(frag);
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
        let f = self.pending.pop_front().expect("checked non-empty");
        Some((qp, f))
    }

    /// Drop queued fragments matching `pred` (peers removed by `del_procs`); returns how many.
    pub fn drop_pending(&mut self, mut pred: impl FnMut(&F) -> bool) -> usize {
        let before = self.pending.len();
        self.pending.retain(|f| !pred(f));
        before - self.pending.len()
    }

    /// Fragments waiting now.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
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
        let mut s = SendScheduler::<u32>::new(2, 1, 1);
        assert_eq!(s.admit(), Admit::Post(0));
        assert_eq!(s.admit(), Admit::Post(1));
        assert_eq!(s.admit(), Admit::Queue);
        s.enqueue(7).unwrap();
        assert_eq!(s.admit(), Admit::Refuse);
        assert_eq!(s.enqueue(8), Err(8));
        assert_eq!(s.poll_transmit(), None, "no credit yet");
        s.complete(1);
        // A credit is free but a fragment waits: new fragments must not overtake it.
        assert_eq!(s.admit(), Admit::Refuse);
        assert_eq!(s.poll_transmit(), Some((1, 7)));
        assert_eq!(s.pending_hwm(), 1);
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
            let mut s = SendScheduler::<u64>::new(qps, depth, cap);
            let mut next_id = 0u64;
            let mut sent = Vec::new();
            let mut in_flight: Vec<Vec<u64>> = vec![Vec::new(); qps];
            let mut accepted = Vec::new();
            for o in ops {
                match o {
                    Op::Submit => match s.admit() {
                        Admit::Post(q) => { accepted.push(next_id); sent.push(next_id); in_flight[q].push(next_id); next_id += 1; }
                        Admit::Queue => { s.enqueue(next_id).unwrap(); accepted.push(next_id); next_id += 1; }
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
