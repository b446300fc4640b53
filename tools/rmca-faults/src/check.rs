//! What each message carries and how the receiver checks it: an 8-byte sequence number, then
//! content that is a function of (seed, sequence, offset). A receiver that expects sequence
//! `n` tells a duplicate (an earlier number), a reordering or loss (a later one) and a
//! corruption (wrong content) apart. Pure functions, unit-tested.

use serde::Serialize;

/// Smallest message that carries its sequence number.
pub const MIN_SIZE: usize = 8;

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `buf` (at least [`MIN_SIZE`] bytes) as message `seq` of the run seeded `seed`.
pub fn stamp(buf: &mut [u8], seed: u64, seq: u64) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    let key = mix(seed ^ mix(seq));
    for (w, chunk) in buf[8..].chunks_mut(8).enumerate() {
        let word = mix(key ^ w as u64).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

/// What a receiver saw wrong, cumulative. Every field must stay 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Delivery {
    /// Messages received and checked.
    pub checked: u64,
    /// A message delivered again (a sequence number already seen).
    pub duplicate: u64,
    /// A message delivered before an earlier one (a later number than expected).
    pub out_of_order: u64,
    /// A message whose content differs from its stamp.
    pub corrupt: u64,
}

impl Delivery {
    /// Checks message `buf` received where `expected` was due; returns the sequence number
    /// read from it.
    pub fn check(&mut self, buf: &[u8], seed: u64, expected: u64) -> u64 {
        self.checked += 1;
        let seq = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
        if seq < expected {
            self.duplicate += 1;
        } else if seq > expected {
            self.out_of_order += 1;
        }
        let key = mix(seed ^ mix(seq));
        let intact = buf[8..].chunks(8).enumerate().all(|(w, chunk)| {
            let word = mix(key ^ w as u64).to_le_bytes();
            chunk == &word[..chunk.len()]
        });
        if !intact {
            self.corrupt += 1;
        }
        seq
    }

    /// Adds another receiver's findings.
    pub fn add(&mut self, o: &Delivery) {
        self.checked += o.checked;
        self.duplicate += o.duplicate;
        self.out_of_order += o.out_of_order;
        self.corrupt += o.corrupt;
    }

    /// True when nothing wrong was delivered.
    #[cfg(test)]
    pub fn clean(&self) -> bool {
        self.duplicate == 0 && self.out_of_order == 0 && self.corrupt == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn tells_duplicates_reordering_and_corruption_apart() {
        let mut d = Delivery::default();
        let mut m = vec![0u8; 100];
        stamp(&mut m, 1, 5);
        assert_eq!(d.check(&m, 1, 5), 5);
        assert!(d.clean());
        d.check(&m, 1, 6);
        assert_eq!(d.duplicate, 1);
        d.check(&m, 1, 4);
        assert_eq!(d.out_of_order, 1);
        m[50] ^= 4;
        d.check(&m, 1, 5);
        assert_eq!((d.corrupt, d.checked), (1, 4));
        // A different seed is different content.
        let mut n = vec![0u8; 100];
        stamp(&mut n, 2, 5);
        assert_ne!(m[8..], n[8..]);
    }

    proptest! {
        /// Any single bit flipped after the stamp is caught (in the number or the content).
        #[test]
        fn any_flip_is_caught(size in 8usize..2000, seq in 0u64..1000, bit in any::<usize>(), seed in any::<u64>()) {
            let mut m = vec![0u8; size];
            stamp(&mut m, seed, seq);
            let b = bit % (size * 8);
            m[b / 8] ^= 1 << (b % 8);
            let mut d = Delivery::default();
            d.check(&m, seed, seq);
            prop_assert!(!d.clean());
        }
    }
}
