//! The completion bookkeeping of osc-rdma, sans-IO: which RDMA transfers are in flight to
//! which peer, and the synchronization messages that must wait for them.
//!
//! osc-am's protocol rests on one property: messages from one process to another are applied
//! in the order they were sent, so a synchronization message (`Fence`, `Complete`, `Unlock`,
//! `Flush`, `Free`) that arrives proves every operation sent before it was applied. osc-rdma
//! moves put and get data beside those messages, so it keeps the property by holding each
//! message to a peer until every transfer to that peer started before it has completed (a
//! completed put is in the target's memory, a completed get has read it). One message waits
//! for the transfers to every peer instead: `Fenced`, the second round of a fence, which tells
//! every member that this process is done with the epoch (including its gets from third
//! parties, whose memory the next epoch may change). Messages to one peer leave in the order
//! given.

use std::collections::VecDeque;

/// Which transfers a message waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Those to the message's destination started before it.
    Peer,
    /// Those to every peer started before it.
    All,
}

/// Sequence numbers in flight: since they are started in increasing order, a deque in that
/// order with a mark for the finished ones (dropped once they reach the front) keeps the
/// smallest in flight at the front. Transfers finish in order as a rule, so a finish is a
/// look at the front and a pop: no search, no node allocated and freed per transfer as a
/// `BTreeSet` does.
#[derive(Debug, Default)]
struct InFlight {
    /// `(sequence number, still in flight)`, increasing; the front is in flight.
    seqs: VecDeque<(u64, bool)>,
    live: usize,
}

impl InFlight {
    /// `s` is larger than every sequence number given before.
    fn insert(&mut self, s: u64) {
        self.seqs.push_back((s, true));
        self.live += 1;
    }

    /// `s` finished (nothing when it is not in flight).
    fn remove(&mut self, s: u64) {
        let at = match self.seqs.front() {
            Some(&(f, _)) if f == s => 0,
            _ => match self.seqs.binary_search_by_key(&s, |e| e.0) {
                Ok(i) => i,
                Err(_) => return,
            },
        };
        if !std::mem::replace(&mut self.seqs[at].1, false) {
            return;
        }
        self.live -= 1;
        while self.seqs.front().is_some_and(|e| !e.1) {
            self.seqs.pop_front();
        }
    }

    /// The smallest sequence number in flight.
    fn first(&self) -> Option<u64> {
        self.seqs.front().map(|e| e.0)
    }

    fn len(&self) -> usize {
        self.live
    }

    fn is_empty(&self) -> bool {
        self.live == 0
    }
}

/// Transfers in flight and the messages held behind them (`M`: the message type).
#[derive(Debug)]
pub struct Tracker<M> {
    /// The sequence number of the next transfer.
    next: u64,
    /// Transfers in flight, per peer and all together.
    in_flight: Vec<InFlight>,
    all: InFlight,
    /// Per peer, in the order given: the messages not released yet, each with the first
    /// sequence number it does not wait for.
    held: Vec<VecDeque<(Order, u64, M)>>,
    held_count: usize,
}

impl<M> Tracker<M> {
    /// The bookkeeping of a window of `peers` members.
    pub fn new(peers: usize) -> Self {
        Self {
            next: 0,
            in_flight: (0..peers).map(|_| InFlight::default()).collect(),
            all: InFlight::default(),
            held: (0..peers).map(|_| VecDeque::new()).collect(),
            held_count: 0,
        }
    }

    /// A transfer to `peer` starts: its sequence number (for [`Tracker::finish`]).
    pub fn start(&mut self, peer: usize) -> u64 {
        let s = self.next;
        self.next += 1;
        self.in_flight[peer].insert(s);
        self.all.insert(s);
        s
    }

    /// Transfer `seq` to `peer` completed (successfully or not).
    pub fn finish(&mut self, peer: usize, seq: u64) {
        self.in_flight[peer].remove(seq);
        self.all.remove(seq);
    }

    /// Send `msg` to `peer` once the transfers `order` names have completed (see
    /// [`Tracker::release`]).
    pub fn send(&mut self, peer: usize, msg: M, order: Order) {
        self.held[peer].push_back((order, self.next, msg));
        self.held_count += 1;
    }

    fn ready(&self, peer: usize, order: Order, before: u64) -> bool {
        let set = match order {
            Order::Peer => &self.in_flight[peer],
            Order::All => &self.all,
        };
        set.first().is_none_or(|s| s >= before)
    }

    /// Hand every message that may leave now to `out`, in order per peer; how many.
    pub fn release(&mut self, mut out: impl FnMut(usize, M)) -> usize {
        if self.held_count == 0 {
            return 0;
        }
        let mut n = 0;
        for peer in 0..self.held.len() {
            while let Some(&(order, before, _)) = self.held[peer].front() {
                if !self.ready(peer, order, before) {
                    break;
                }
                let (_, _, m) = self.held[peer].pop_front().expect("front exists");
                self.held_count -= 1;
                out(peer, m);
                n += 1;
            }
        }
        n
    }

    /// Transfers in flight.
    pub fn in_flight(&self) -> usize {
        self.all.len()
    }

    /// Transfers in flight to `peer`.
    pub fn in_flight_to(&self, peer: usize) -> usize {
        self.in_flight[peer].len()
    }

    /// Messages held.
    pub fn held(&self) -> usize {
        self.held_count
    }

    /// Nothing in flight and nothing held.
    pub fn quiet(&self) -> bool {
        self.all.is_empty() && self.held_count == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Messages sent in a script: destination, id, order, the transfers in flight then.
    type Sent = Vec<(usize, u32, Order, Vec<(usize, u64)>)>;

    fn drain(t: &mut Tracker<u32>) -> Vec<(usize, u32)> {
        let mut v = Vec::new();
        t.release(|p, m| v.push((p, m)));
        v
    }

    #[test]
    fn an_unlock_waits_for_the_puts_to_its_target_only() {
        let mut t = Tracker::new(3);
        let a = t.start(1);
        let b = t.start(2);
        t.send(1, 10, Order::Peer);
        t.send(2, 20, Order::Peer);
        t.send(0, 30, Order::Peer);
        assert_eq!(drain(&mut t), [(0, 30)]);
        t.finish(2, b);
        assert_eq!(drain(&mut t), [(2, 20)]);
        // A transfer started after the message does not hold it.
        let c = t.start(1);
        t.finish(1, a);
        assert_eq!(drain(&mut t), [(1, 10)]);
        assert!(!t.quiet());
        t.finish(1, c);
        assert!(t.quiet());
    }

    #[test]
    fn fenced_waits_for_every_transfer_and_keeps_the_order_behind_it() {
        let mut t = Tracker::new(2);
        let g = t.start(1);
        t.send(0, 1, Order::All);
        t.send(0, 2, Order::Peer);
        // The second message could go, but not before the first.
        assert!(drain(&mut t).is_empty());
        assert_eq!((t.held(), t.in_flight(), t.in_flight_to(1)), (2, 1, 1));
        t.finish(1, g);
        assert_eq!(drain(&mut t), [(0, 1), (0, 2)]);
    }

    #[test]
    fn transfers_finishing_out_of_order_hold_their_messages_until_the_oldest_finished() {
        let mut t = Tracker::new(2);
        let a = t.start(1);
        let b = t.start(1);
        let c = t.start(1);
        t.send(1, 7, Order::Peer);
        t.finish(1, c);
        t.finish(1, b);
        // Finished twice, or never started: nothing changes.
        t.finish(1, b);
        t.finish(1, 99);
        assert_eq!(t.in_flight_to(1), 1);
        assert!(
            drain(&mut t).is_empty(),
            "the oldest transfer is still in flight"
        );
        t.finish(1, a);
        assert_eq!(drain(&mut t), [(1, 7)]);
        assert!(t.quiet());
    }

    #[test]
    fn a_warm_tracker_allocates_nothing_per_transfer() {
        let mut t: Tracker<u32> = Tracker::new(2);
        for p in 0..2 {
            let s = t.start(p);
            t.finish(p, s);
        }
        let before = rmca_test_support::alloc_count::allocations();
        for i in 0..1000 {
            let s = t.start(i % 2);
            t.finish(i % 2, s);
        }
        assert_eq!(rmca_test_support::alloc_count::allocations() - before, 0);
        assert!(t.quiet());
    }

    proptest! {
        /// Under any interleaving of starts, sends and completions, a message leaves only
        /// after every transfer it waits for, and the messages to a peer leave in order.
        #[test]
        fn messages_never_overtake_their_transfers(
            script in proptest::collection::vec((0u8..3, 0usize..3, any::<bool>()), 1..60),
        ) {
            let mut t = Tracker::new(3);
            let mut live: Vec<(usize, u64)> = Vec::new();
            let mut sent: Sent = Vec::new();
            let mut next_msg = 0u32;
            let mut out: Vec<(usize, u32)> = Vec::new();
            let mut finished: Vec<(usize, u64)> = Vec::new();
            let check = |t: &mut Tracker<u32>, finished: &Vec<(usize, u64)>,
                             sent: &Sent,
                             out: &mut Vec<(usize, u32)>| {
                t.release(|p, m| {
                    let (_, _, order, waits) = sent.iter().find(|s| s.1 == m).unwrap();
                    for w in waits {
                        if *order == Order::All || w.0 == p {
                            assert!(finished.contains(w), "message {m} left before transfer {w:?}");
                        }
                    }
                    out.push((p, m));
                });
            };
            for (what, peer, all) in script {
                match what {
                    0 => live.push((peer, t.start(peer))),
                    1 => {
                        let order = if all { Order::All } else { Order::Peer };
                        sent.push((peer, next_msg, order, live.clone()));
                        t.send(peer, next_msg, order);
                        next_msg += 1;
                    }
                    _ => {
                        if !live.is_empty() {
                            let (p, s) = live.remove(peer % live.len());
                            t.finish(p, s);
                            finished.push((p, s));
                        }
                    }
                }
                check(&mut t, &finished, &sent, &mut out);
            }
            for (p, s) in live.drain(..) {
                t.finish(p, s);
                finished.push((p, s));
            }
            check(&mut t, &finished, &sent, &mut out);
            prop_assert!(t.quiet());
            prop_assert_eq!(out.len(), sent.len());
            for p in 0..3 {
                let got: Vec<u32> = out.iter().filter(|o| o.0 == p).map(|o| o.1).collect();
                let want: Vec<u32> = sent.iter().filter(|s| s.0 == p).map(|s| s.1).collect();
                prop_assert_eq!(got, want);
            }
        }
    }
}
