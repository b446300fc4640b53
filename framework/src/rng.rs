//! SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
//! OOPSLA 2014): the one deterministic generator of the project's fault injection, simulations,
//! tests and examples. Reproducible from a seed, cheap, and well mixed; not for secrets (those
//! come from the kernel: `rmca_rte::random_bytes`).

/// The SplitMix64 finaliser: a cheap, well-mixed hash of a 64-bit word.
#[inline]
pub fn mix64(z: u64) -> u64 {
    let mut z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A SplitMix64 stream from a seed (the default stream is seed 0).
#[derive(Clone, Debug, Default)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next word.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let z = mix64(self.0);
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z
    }

    /// True with probability `p` (0 never, 1 always).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// A number below `n` (0 when `n` is 0); the modulo bias is negligible for small `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // First outputs of the reference SplitMix64 for seed 1234567.
        let mut r = SplitMix64::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn chance_respects_its_bounds() {
        let mut r = SplitMix64::new(7);
        assert!((0..1000).all(|_| !r.chance(0.0)));
        assert!((0..1000).all(|_| r.chance(1.0)));
    }
}
