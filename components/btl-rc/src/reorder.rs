//! Per-peer in-order delivery over several QPs, and stripe reassembly, sans-IO.
//!
//! Each QP is ordered, but several QPs per peer (multi-QP scheduling, or a per-peer and a
//! shared receive queue class) are not ordered with respect to each other, so every fragment
//! carries a 16-bit per-peer sequence number and the receiver delivers in sequence order,
//! holding early arrivals (copied) until the gap fills. With one QP nothing is ever held. A
//! striped fragment is reassembled before it takes its place.
//!
//! The receiver tells a fragment from the future from a stale duplicate by its distance from
//! the next expected seq ([`WINDOW`], half the sequence space), so no fragment may ever be sent
//! [`WINDOW`] or more seqs ahead of the oldest one the receiver has not delivered yet. Nothing in
//! the transports bounds that distance: a coalesced bundle takes thousands of seqs, and a QP
//! that stalls (an RNR backoff, a slow link) lets the other QP of the peer run arbitrarily far
//! ahead. So the sender keeps a [`SeqWindow`]: it posts seq `s` only while `s` is less than
//! [`WINDOW`] past the receiver's last reported next seq, and the receiver reports its next seq
//! ([`Reorder::take_ack`]) every [`ACK_EVERY`] delivered fragments.

use std::collections::HashMap;

/// Half the sequence space: arrivals further "ahead" than this are stale duplicates, and the
/// sender never has a seq this far past the receiver's next one.
pub const WINDOW: u16 = 1 << 15;

/// The receiver reports its next seq after this many deliveries (a quarter of the window, so
/// a sender streaming at full speed is never stalled by the window while acks flow).
pub const ACK_EVERY: u16 = WINDOW / 4;

/// The sender's side of the sequence window of one peer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SeqWindow {
    acked: u16,
    /// Send attempts that found the window closed (the fragment waited for an ack).
    pub stalls: u64,
}

impl SeqWindow {
    /// How many consecutive seqs from `seq` may be posted now (0: wait for an ack). `seq` is
    /// the next unposted one, so it is never behind the acked seq.
    pub fn room(&self, seq: u16) -> u16 {
        WINDOW.saturating_sub(seq.wrapping_sub(self.acked))
    }

    /// [`Self::room`], counting a stall when it is 0.
    pub fn room_or_stall(&mut self, seq: u16) -> u16 {
        let r = self.room(seq);
        if r == 0 {
            self.stalls += 1;
        }
        r
    }

    /// The receiver reported `next`: every seq before it was delivered. Reports that do not
    /// advance (or are not within the window) are ignored.
    pub fn ack(&mut self, next: u16) {
        let d = next.wrapping_sub(self.acked);
        if d != 0 && d <= WINDOW {
            self.acked = next;
        }
    }

    /// The receiver's last reported next seq.
    pub fn acked(&self) -> u16 {
        self.acked
    }
}

#[derive(Debug)]
struct Assembly {
    tag: u8,
    data: Vec<u8>,
    got: Vec<bool>,
    left: usize,
}

/// Delivery order of one peer.
#[derive(Debug, Default)]
pub struct Reorder {
    next: u16,
    reported: u16,
    held: HashMap<u16, (u8, Vec<u8>)>,
    stripes: HashMap<u16, Assembly>,
    /// Fragments that arrived early and were held.
    pub held_total: u64,
    /// Fragments dropped as stale or inconsistent.
    pub dropped: u64,
}

impl Reorder {
    /// Fragments currently held.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The next seq to deliver.
    pub fn next(&self) -> u16 {
        self.next
    }

    /// True when the sender should hear our next seq ([`ACK_EVERY`] deliveries since the last
    /// report).
    pub fn ack_due(&self) -> bool {
        self.next.wrapping_sub(self.reported) >= ACK_EVERY
    }

    /// The next seq, to report to the sender now.
    pub fn take_ack(&mut self) -> u16 {
        self.reported = self.next;
        self.next
    }

    fn ahead(&self, seq: u16) -> Option<u16> {
        let d = seq.wrapping_sub(self.next);
        (d < WINDOW).then_some(d)
    }

    /// Fragment `seq` arrived whole; `deliver` is called for it and any it unblocks, in order.
    pub fn push(&mut self, seq: u16, tag: u8, data: &[u8], deliver: &mut dyn FnMut(u8, &[u8])) {
        match self.ahead(seq) {
            Some(0) => {
                deliver(tag, data);
                self.next = self.next.wrapping_add(1);
                self.drain(deliver);
            }
            Some(_) if !self.held.contains_key(&seq) => {
                self.held_total += 1;
                self.held.insert(seq, (tag, data.to_vec()));
            }
            _ => self.dropped += 1,
        }
    }

    fn drain(&mut self, deliver: &mut dyn FnMut(u8, &[u8])) {
        while let Some((tag, data)) = self.held.remove(&self.next) {
            deliver(tag, &data);
            self.next = self.next.wrapping_add(1);
        }
    }

    /// Stripe `idx` of `count` of fragment `seq` (`total` bytes) at `offset` arrived.
    #[allow(clippy::too_many_arguments)]
    pub fn push_stripe(
        &mut self,
        seq: u16,
        tag: u8,
        idx: u8,
        count: u8,
        total: usize,
        offset: usize,
        body: &[u8],
        deliver: &mut dyn FnMut(u8, &[u8]),
    ) {
        if self.ahead(seq).is_none() || self.held.contains_key(&seq) {
            self.dropped += 1;
            return;
        }
        let a = self.stripes.entry(seq).or_insert_with(|| Assembly {
            tag,
            data: vec![0; total],
            got: vec![false; usize::from(count)],
            left: usize::from(count),
        });
        let i = usize::from(idx);
        if a.data.len() != total
            || a.got.len() != usize::from(count)
            || a.got[i]
            || offset + body.len() > total
        {
            self.dropped += 1;
            return;
        }
        a.got[i] = true;
        a.left -= 1;
        a.data[offset..offset + body.len()].copy_from_slice(body);
        if a.left == 0 {
            let a = self.stripes.remove(&seq).expect("present");
            self.push(seq, a.tag, &a.data, deliver);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any arrival order of numbered fragments (some striped) is delivered in order, once.
        #[test]
        fn delivers_in_order(n in 1usize..60, start in any::<u16>(), perm_seed in any::<u64>()) {
            let mut r = Reorder { next: start, ..Default::default() };
            // Fragment i: data [i as u8; i % 7 * 10]; every third is split in 3 stripes.
            type Arrival = (usize, Option<(u8, usize, usize)>);
            let mut arrivals: Vec<Arrival> = Vec::new();
            for i in 0..n {
                let len = i % 7 * 10;
                if i % 3 == 0 {
                    let base = len / 3;
                    for s in 0..3u8 {
                        let off = base * usize::from(s);
                        let l = if s == 2 { len - off } else { base };
                        arrivals.push((i, Some((s, off, l))));
                    }
                } else {
                    arrivals.push((i, None));
                }
            }
            let mut x = perm_seed | 1;
            for k in (1..arrivals.len()).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                arrivals.swap(k, (x as usize) % (k + 1));
            }
            let mut out: Vec<(u8, Vec<u8>)> = Vec::new();
            for (i, st) in arrivals {
                let seq = start.wrapping_add(i as u16);
                let data = vec![i as u8; i % 7 * 10];
                match st {
                    None => r.push(seq, i as u8, &data, &mut |t, d| out.push((t, d.to_vec()))),
                    Some((s, off, l)) => r.push_stripe(seq, i as u8, s, 3, data.len(), off, &data[off..off + l],
                                                       &mut |t, d| out.push((t, d.to_vec()))),
                }
            }
            prop_assert_eq!(out.len(), n);
            for (i, (t, d)) in out.iter().enumerate() {
                prop_assert_eq!(*t, i as u8);
                prop_assert_eq!(d, &vec![i as u8; i % 7 * 10]);
            }
            prop_assert_eq!(r.held(), 0);
        }
    }

    /// What travels on one QP of the simulated peer: one message, or a coalesced bundle of
    /// consecutive ones (each message's body is its index, to check order across seq wraps).
    enum Unit {
        One(u16, u32),
        Bundle(u16, Vec<u32>),
    }

    /// A sender and a receiver joined by two ordered links (two QPs of one peer: the per-peer
    /// and the shared queue class) and an ordered link back for the receiver's acks; the test
    /// decides what moves when. `windowed: false` is the sender before [`SeqWindow`].
    struct Sim {
        total: u32,
        sent: u32,
        windowed: bool,
        win: SeqWindow,
        links: [std::collections::VecDeque<Unit>; 2],
        acks: std::collections::VecDeque<u16>,
        rx: Reorder,
        out: Vec<u32>,
    }

    impl Sim {
        fn new(total: u32, windowed: bool) -> Self {
            Self {
                total,
                sent: 0,
                windowed,
                win: SeqWindow::default(),
                links: Default::default(),
                acks: Default::default(),
                rx: Reorder::default(),
                out: Vec::new(),
            }
        }

        /// Post up to `n` messages on `link` (one unit); false when nothing could go.
        fn send(&mut self, link: usize, n: u32) -> bool {
            let seq = self.sent as u16;
            let room = if self.windowed {
                u32::from(self.win.room_or_stall(seq))
            } else {
                u32::MAX
            };
            let n = n.min(self.total - self.sent).min(room);
            if n == 0 {
                return false;
            }
            let first = self.sent;
            self.links[link].push_back(if n == 1 {
                Unit::One(seq, first)
            } else {
                Unit::Bundle(seq, (first..first + n).collect())
            });
            self.sent += n;
            true
        }

        fn deliver(&mut self, link: usize) -> bool {
            let Some(u) = self.links[link].pop_front() else {
                return false;
            };
            let out = &mut self.out;
            let mut d = |_: u8, b: &[u8]| out.push(u32::from_le_bytes(b.try_into().unwrap()));
            match u {
                Unit::One(seq, i) => self.rx.push(seq, 0, &i.to_le_bytes(), &mut d),
                Unit::Bundle(seq, v) => {
                    for (k, i) in v.iter().enumerate() {
                        self.rx
                            .push(seq.wrapping_add(k as u16), 0, &i.to_le_bytes(), &mut d);
                    }
                }
            }
            if self.rx.ack_due() {
                self.acks.push_back(self.rx.take_ack());
            }
            true
        }

        fn deliver_ack(&mut self) -> bool {
            match self.acks.pop_front() {
                Some(a) => {
                    self.win.ack(a);
                    true
                }
                None => false,
            }
        }

        /// Move everything (fair from here on) until every message is delivered; false on a
        /// deadlock.
        fn finish(&mut self, bundle: u32) -> bool {
            while self.out.len() < self.total as usize {
                let mut moved = self.send(0, 1) | self.send(1, bundle);
                while self.deliver(0) | self.deliver(1) {
                    moved = true;
                }
                while self.deliver_ack() {
                    moved = true;
                }
                if !moved {
                    return false;
                }
            }
            true
        }

        fn delivered_in_order_once(&self) -> bool {
            self.rx.dropped == 0
                && self.out.len() == self.total as usize
                && self.out.iter().enumerate().all(|(i, &v)| v == i as u32)
        }
    }

    /// The hang of `p2p_check all` over `P,256,...:S,65536,...`: a small fragment waits on
    /// the per-peer QP while coalesced bundles (thousands of seqs each) stream over the shared
    /// queue's QP. Without the window the receiver took bundles more than half the sequence
    /// space ahead for stale duplicates and dropped them.
    #[test]
    fn a_stalled_qp_never_lets_the_other_run_out_of_the_window() {
        for windowed in [false, true] {
            let mut sim = Sim::new(60_000, windowed);
            assert!(sim.send(0, 1), "the small fragment, held up on QP 0");
            for _ in 0..25 {
                sim.send(1, 2340);
                while sim.deliver(1) | sim.deliver_ack() {}
            }
            let finished = sim.finish(2340);
            if windowed {
                assert!(finished, "deadlock");
                assert!(sim.delivered_in_order_once(), "dropped {}", sim.rx.dropped);
                assert!(sim.win.stalls > 0, "the window held the sender back");
            } else {
                // The failure the window prevents: bundles dropped, the job waits forever.
                assert!(sim.rx.dropped > 0 && !finished);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Any schedule of sends (singles and bundles of up to 4000 on either QP), deliveries
        /// per QP and acks, one QP possibly starved until the end: every message is delivered
        /// once, in order, nothing is dropped and nothing deadlocks.
        #[test]
        fn windowed_sender_never_overruns_the_receiver(
            ops in proptest::collection::vec((0u8..4, 0usize..2, 1u32..4000), 1..160),
            starve in any::<bool>(),
            total in 1u32..100_000,
        ) {
            let mut sim = Sim::new(total, true);
            for (op, link, n) in ops {
                match op {
                    0 | 1 => { sim.send(link, if link == 0 { 1 } else { n }); }
                    2 if !(starve && link == 0) => { sim.deliver(link); }
                    2 => {}
                    _ => { sim.deliver_ack(); }
                }
            }
            prop_assert!(sim.finish(4000), "deadlock");
            prop_assert!(sim.delivered_in_order_once(), "dropped {}", sim.rx.dropped);
        }

        /// Acks that do not advance (duplicates, or from outside the window) leave it alone.
        #[test]
        fn acks_only_advance(acked in any::<u16>(), next in any::<u16>()) {
            let mut w = SeqWindow { acked, stalls: 0 };
            w.ack(next);
            let d = next.wrapping_sub(acked);
            prop_assert_eq!(w.acked(), if d != 0 && d <= WINDOW { next } else { acked });
            prop_assert_eq!(w.room(w.acked()), WINDOW);
        }
    }

    #[test]
    fn stale_duplicates_are_dropped() {
        let mut r = Reorder::default();
        let mut n = 0;
        r.push(0, 1, b"a", &mut |_, _| n += 1);
        r.push(0, 1, b"a", &mut |_, _| n += 1);
        assert_eq!((n, r.dropped), (1, 1));
    }
}
