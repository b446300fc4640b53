//! Per-peer in-order delivery over several QPs, and stripe reassembly, sans-IO.
//!
//! Each QP is ordered, but several QPs per peer (multi-QP scheduling) are not ordered with respect
//! to each other, so every fragment carries a 16-bit per-peer sequence number and the receiver
//! delivers in sequence order, holding early arrivals (copied) until the gap fills. With one QP
//! nothing is ever held. A striped fragment is reassembled before it takes its place.

use std::collections::HashMap;

/// Half the sequence space: arrivals further "ahead" than this are stale duplicates.
const WINDOW: u16 = 1 << 15;

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

    #[test]
    fn stale_duplicates_are_dropped() {
        let mut r = Reorder::default();
        let mut n = 0;
        r.push(0, 1, b"a", &mut |_, _| n += 1);
        r.push(0, 1, b"a", &mut |_, _| n += 1);
        assert_eq!((n, r.dropped), (1, 1));
    }
}
