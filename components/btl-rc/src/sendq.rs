//! The per-peer send queue with message coalescing, sans-IO.
//!
//! Sends queue here while the connection is being established or when the peer's QPs are out
//! of send WQEs (`btl_rc_send_wqes`), credits or send buffers. When resources come back, the
//! module asks for the next [`Item`]: with coalescing on, consecutive small messages are packed
//! into one buffer (one WQE, one credit), and a record whose PML header bytes equal the previous
//! record's carries the cached-header flag instead of the bytes, or, when only a few bytes
//! differ (a PML's sequence number), the previous header's patches. Rendezvous data (fragments of
//! messages above the eager limit) and control messages are never coalesced.

use std::collections::VecDeque;

use rmca_framework::btl::SendHint;

use crate::wire::{emit_record, header_delta, REC_HEADER_LEN};

/// A queued fragment (bytes owned: `send` returned already).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Tag.
    pub tag: u8,
    /// PML header then payload.
    pub data: Vec<u8>,
    /// Length of the PML header inside `data`.
    pub hdr_len: usize,
    /// Per-peer sequence number.
    pub seq: u16,
    /// The PML's hint.
    pub hint: SendHint,
    /// May be packed with others.
    pub coalescable: bool,
}

/// What to send next.
#[derive(Debug, PartialEq, Eq)]
pub enum Item {
    /// One fragment.
    Single(Pending),
    /// Several, packed: `(first seq, count, body)`.
    Bundle {
        /// Seq of the first record (the others follow consecutively).
        first_seq: u16,
        /// Records.
        count: u16,
        /// Encoded records.
        body: Vec<u8>,
        /// Records whose header was cached (equal or patched).
        cached: u32,
    },
}

/// One peer's FIFO.
#[derive(Debug)]
pub struct SendQueue {
    fifo: VecDeque<Pending>,
    bytes: usize,
    coalescing: bool,
    capacity: usize,
    /// Bundles built.
    pub bundles: u64,
    /// Messages that went out inside bundles.
    pub coalesced_msgs: u64,
    /// Records sent with the cached-header flag (equal header) or as patches of the previous.
    pub cached_headers: u64,
}

impl SendQueue {
    /// A queue packing at most `capacity` body bytes per bundle.
    pub fn new(coalescing: bool, capacity: usize) -> Self {
        Self {
            fifo: VecDeque::new(),
            bytes: 0,
            coalescing,
            capacity,
            bundles: 0,
            coalesced_msgs: 0,
            cached_headers: 0,
        }
    }
    /// Queued fragments.
    pub fn len(&self) -> usize {
        self.fifo.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.fifo.is_empty()
    }
    /// Bytes queued.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// Append.
    pub fn push(&mut self, p: Pending) {
        self.bytes += p.data.len();
        self.fifo.push_back(p);
    }
    /// The front fragment.
    pub fn front(&self) -> Option<&Pending> {
        self.fifo.front()
    }
    /// The front fragment, writable (the module lends its bytes while trying to send).
    pub fn front_mut(&mut self) -> Option<&mut Pending> {
        self.fifo.front_mut()
    }
    /// Drop everything (peer failed).
    pub fn clear(&mut self) {
        self.fifo.clear();
        self.bytes = 0;
    }

    /// How many front fragments the next bundle would take (1 = no bundle), at most `limit`.
    fn bundle_len(&self, limit: usize) -> usize {
        if !self.coalescing {
            return 1;
        }
        let mut used = 0usize;
        let mut n = 0usize;
        for p in &self.fifo {
            if !p.coalescable || n == usize::from(u16::MAX) || n == limit {
                break;
            }
            let need = REC_HEADER_LEN + p.data.len();
            if used + need > self.capacity {
                break;
            }
            used += need;
            n += 1;
        }
        n.max(1)
    }

    /// Body length of the next item (to check buffers before taking it).
    pub fn peek_len(&self) -> Option<usize> {
        let n = self.bundle_len(usize::MAX);
        let front = self.fifo.front()?;
        if n == 1 {
            return Some(front.data.len());
        }
        Some(
            self.fifo
                .iter()
                .take(n)
                .map(|p| REC_HEADER_LEN + p.data.len())
                .sum(),
        )
    }

    /// True when the next item is a bundle.
    pub fn next_is_bundle(&self) -> bool {
        self.next_is_bundle_within(usize::MAX)
    }

    /// True when the next item taken with [`Self::pop_within`]`(limit)` is a bundle.
    pub fn next_is_bundle_within(&self, limit: usize) -> bool {
        !self.fifo.is_empty() && self.bundle_len(limit) > 1
    }

    /// Take the next item.
    pub fn pop(&mut self) -> Option<Item> {
        self.pop_within(usize::MAX)
    }

    /// Take the next item, a bundle of at most `limit` messages (the seqs the sender's
    /// window has room for).
    pub fn pop_within(&mut self, limit: usize) -> Option<Item> {
        let n = self.bundle_len(limit);
        if n == 1 {
            let p = self.fifo.pop_front()?;
            self.bytes -= p.data.len();
            return Some(Item::Single(p));
        }
        let mut body = Vec::with_capacity(self.peek_len().unwrap_or(0));
        let mut prev_hdr: Option<Vec<u8>> = None;
        let mut first_seq = 0;
        let mut cached = 0;
        for i in 0..n {
            let p = self.fifo.pop_front().expect("counted");
            self.bytes -= p.data.len();
            if i == 0 {
                first_seq = p.seq;
            }
            let (h, pay) = p.data.split_at(p.hdr_len);
            let delta = header_delta(prev_hdr.as_deref(), h);
            cached += u32::from(delta.is_some());
            emit_record(&mut body, p.tag, h, pay, delta.as_deref());
            prev_hdr = Some(h.to_vec());
        }
        self.bundles += 1;
        self.coalesced_msgs += n as u64;
        self.cached_headers += u64::from(cached);
        Some(Item::Bundle {
            first_seq,
            count: n as u16,
            body,
            cached,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::parse_records;
    use proptest::prelude::*;

    fn p(seq: u16, hdr: &[u8], pay: &[u8], coalescable: bool) -> Pending {
        let mut data = hdr.to_vec();
        data.extend_from_slice(pay);
        Pending {
            tag: seq as u8,
            data,
            hdr_len: hdr.len(),
            seq,
            hint: SendHint::default(),
            coalescable,
        }
    }

    #[test]
    fn rendezvous_data_is_never_packed() {
        let mut q = SendQueue::new(true, 4096);
        q.push(p(0, b"h", b"a", true));
        q.push(p(1, b"h", b"b", true));
        q.push(p(2, b"R", &[0; 100], false));
        q.push(p(3, b"h", b"c", true));
        assert!(matches!(
            q.pop(),
            Some(Item::Bundle {
                count: 2,
                cached: 1,
                ..
            })
        ));
        assert!(matches!(q.pop(), Some(Item::Single(x)) if x.seq == 2));
        assert!(matches!(q.pop(), Some(Item::Single(x)) if x.seq == 3));
        assert!(q.pop().is_none());
    }

    proptest! {
        /// Whatever is queued comes out in order, each message exactly once, bundles fit the
        /// buffer, and bundle records decode to the original bytes.
        #[test]
        fn order_and_content_survive(msgs in proptest::collection::vec(
                (proptest::collection::vec(0u8..3, 0..4), proptest::collection::vec(any::<u8>(), 0..300), any::<bool>()), 1..80),
                cap in 64usize..2048, on in any::<bool>()) {
            let mut q = SendQueue::new(on, cap);
            for (i, (h, pay, c)) in msgs.iter().enumerate() {
                q.push(p(i as u16, h, pay, *c));
            }
            let mut out = Vec::new();
            while let Some(it) = q.pop() {
                match it {
                    Item::Single(x) => out.push((x.seq, x.data)),
                    Item::Bundle { first_seq, count, body, .. } => {
                        prop_assert!(on);
                        prop_assert!(body.len() <= cap);
                        let recs = parse_records(&body, count).unwrap();
                        for (k, r) in recs.iter().enumerate() {
                            let mut d = r.header.to_vec();
                            d.extend_from_slice(r.payload);
                            out.push((first_seq + k as u16, d));
                        }
                    }
                }
            }
            prop_assert_eq!(out.len(), msgs.len());
            for (i, (seq, d)) in out.iter().enumerate() {
                prop_assert_eq!(*seq, i as u16);
                let mut want = msgs[i].0.clone();
                want.extend_from_slice(&msgs[i].1);
                prop_assert_eq!(d, &want);
            }
            prop_assert_eq!(q.bytes(), 0);
        }
    }
}
