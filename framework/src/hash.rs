//! A hasher for maps keyed by small integers on hot paths (message sequences, ranks, context
//! ids, memory keys): one rotate, xor and multiply per word, as rustc's FxHash. The standard
//! SipHash costs ~140 instructions a lookup, which was a tenth of a small message's CPU in
//! pml-dr and ~1% of a soft UD ping-pong; an identity hash would leave hashbrown's tag bits
//! (the top seven) all zero for small keys. Not for keys an attacker chooses to collide: use
//! it where keys are bounded or handed out by this process.

use std::hash::{BuildHasherDefault, Hasher};

/// The hasher (see the module documentation).
#[derive(Clone, Copy, Debug, Default)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

/// `HashMap<K, V, BuildIntHasher>`: a map hashed by [`IntHasher`].
pub type BuildIntHasher = BuildHasherDefault<IntHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// Small consecutive keys land in distinct buckets and carry distinct tag bits (the top
    /// seven, which hashbrown compares before the keys).
    #[test]
    fn small_keys_spread_over_buckets_and_tags() {
        let b = BuildIntHasher::default();
        let hashes: Vec<u64> = (0u32..64).map(|k| b.hash_one(k)).collect();
        let buckets: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 63).collect();
        let tags: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(buckets.len() >= 32, "{} buckets of 64", buckets.len());
        assert!(tags.len() >= 32, "{} tags of 64", tags.len());
        // A tuple key hashes every field.
        assert_ne!(b.hash_one((1u32, 2u64)), b.hash_one((2u32, 1u64)));
    }
}
