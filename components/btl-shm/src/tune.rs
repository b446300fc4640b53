//! The stream chunk, chosen from two costs measured at init instead of one figure measured once.
//!
//! A streamed record is written in chunks, each made visible by a progress store that moves a
//! cache line from the producer's core to the consumer's (a *handoff*). More chunks overlap the
//! two copies better; each costs a handoff. With `n = len / c` chunks of `c` bytes the record
//! takes about `n x handoff + c / rate` (the handoffs, plus the last chunk, which the consumer
//! copies after the producer), least at `c = sqrt(len x handoff x rate)`. The handoff moves
//! between ~50 and ~280 ns on the 2-vCPU VM from one boot (or period) to the next, and the copy
//! rate moves with it, so both are measured when the module starts ([`crate::sys`] does the
//! timing; this module only computes).
//!
//! Chunks are powers of two (the nearest to the ideal, on a log scale) between [`MIN_CHUNK`]
//! and [`MAX_CHUNK`]. The floor is measured, not modelled: below 16 KiB glibc 2.36 copies with
//! a vector loop instead of `rep movsb`, and 8 KiB chunks were 4-15% slower than 16 KiB ones
//! from 16 KiB to 1 MiB even with fast handoffs (`bench/RESULTS.md`, "ob1 + shm medium
//! messages: stream chunks").

/// Smallest chunk chosen.
pub const MIN_CHUNK: usize = 16 * 1024;
/// Largest chunk chosen (a 64 KiB eager fragment goes in one; a 128 KiB one, with
/// `btl_shm_eager_limit` raised, still in two).
pub const MAX_CHUNK: usize = 64 * 1024;

/// Costs measured at init.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Costs {
    /// One-way time to move a written cache line to the other core (ns).
    pub handoff_ns: f64,
    /// Bytes per ns of a cache-resident copy of a chunk's size.
    pub copy_bytes_per_ns: f64,
}

impl Costs {
    /// A handoff expressed in bytes of copying (what a chunk boundary costs), or `None` for
    /// figures no measurement gives (not finite, not positive, or absurd).
    pub fn handoff_bytes(&self) -> Option<u64> {
        let ok = |v: f64, max: f64| v.is_finite() && v > 0.0 && v < max;
        if !ok(self.handoff_ns, 100_000.0) || !ok(self.copy_bytes_per_ns, 10_000.0) {
            return None;
        }
        Some((self.handoff_ns * self.copy_bytes_per_ns).round().max(1.0) as u64)
    }
}

/// The chunk of a `len`-byte streamed record when a handoff costs `handoff_bytes` of copying.
pub fn chunk_for(len: usize, handoff_bytes: u64) -> usize {
    let ideal = (len as f64 * handoff_bytes as f64).sqrt();
    if ideal.is_nan() || ideal < MIN_CHUNK as f64 {
        return MIN_CHUNK;
    }
    if ideal >= MAX_CHUNK as f64 {
        return MAX_CHUNK;
    }
    // The power of two nearest on a log scale: below it, or twice it from sqrt(2) times it.
    let below = 1usize << (usize::BITS - 1 - (ideal as usize).leading_zeros());
    let chunk = if ideal >= below as f64 * std::f64::consts::SQRT_2 {
        below * 2
    } else {
        below
    };
    chunk.clamp(MIN_CHUNK, MAX_CHUNK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn costs(handoff_ns: f64, rate: f64) -> u64 {
        Costs {
            handoff_ns,
            copy_bytes_per_ns: rate,
        }
        .handoff_bytes()
        .unwrap()
    }

    /// The figures of the two moods seen on the VM: with fast handoffs the chunk stays at the
    /// 16 KiB that measured best there; with slow ones a shm eager fragment (64 KiB) goes in
    /// two chunks instead of four.
    #[test]
    fn the_two_moods() {
        // (A 16 KiB copy measured 70-78 bytes per ns there.)
        let fast = costs(55.0, 75.0);
        let slow = costs(280.0, 75.0);
        for len in [4096, 16_448, 32_768, 65_600] {
            assert_eq!(chunk_for(len, fast), MIN_CHUNK, "fast, {len} B");
        }
        assert_eq!(chunk_for(16_448, slow), MIN_CHUNK);
        assert_eq!(chunk_for(65_600, slow), 32 * 1024);
        assert_eq!(chunk_for(1 << 20, slow), MAX_CHUNK);
    }

    #[test]
    fn nearest_power_of_two_on_a_log_scale() {
        // ideal = sqrt(len x h): 16 KiB x sqrt(2) is the boundary between 16 and 32 KiB.
        let h = 4096;
        let boundary = (16_384.0f64 * std::f64::consts::SQRT_2).powi(2) / h as f64;
        assert_eq!(chunk_for(boundary as usize - 64, h), 16_384);
        assert_eq!(chunk_for(boundary as usize + 64, h), 32_768);
    }

    #[test]
    fn measurements_that_are_no_measurement() {
        for (h, r) in [
            (0.0, 10.0),
            (-1.0, 10.0),
            (f64::NAN, 10.0),
            (50.0, f64::INFINITY),
            (1e9, 10.0),
            (50.0, 0.0),
        ] {
            let c = Costs {
                handoff_ns: h,
                copy_bytes_per_ns: r,
            };
            assert_eq!(c.handoff_bytes(), None, "{c:?}");
        }
    }

    proptest! {
        /// Always a power of two in bounds, never smaller for longer records or dearer handoffs.
        #[test]
        fn bounded_power_of_two_and_monotone(len in 1usize..(1 << 30), h in 1u64..1_000_000, more in 0usize..(1 << 20), dearer in 0u64..100_000) {
            let c = chunk_for(len, h);
            prop_assert!(c.is_power_of_two() && (MIN_CHUNK..=MAX_CHUNK).contains(&c));
            prop_assert!(chunk_for(len + more, h) >= c);
            prop_assert!(chunk_for(len, h + dearer) >= c);
        }
    }
}
