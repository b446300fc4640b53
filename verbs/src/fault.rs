//! Seeded fault injection for the soft provider (smoltcp `FaultInjector` style, sans-IO).
//!
//! UD packets can be dropped, duplicated, reordered, delayed and corrupted. RC hides loss,
//! duplication and reordering below the verbs interface (the HCA retransmits), so for RC only
//! delay and corruption are meaningful; corruption is applied to the delivered payload, after
//! TCP's own integrity check, modelling the host-bus corruption an RC HCA cannot see.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::{Error, Result};

/// Fault rates (each 0..=1) and delay for one transport type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig {
    /// Probability a packet is silently dropped.
    pub drop: f64,
    /// Probability a packet is delivered twice.
    pub duplicate: f64,
    /// Probability a packet is held back and sent after the next one.
    pub reorder: f64,
    /// Probability a packet is delayed by [`FaultConfig::delay`].
    pub delay_rate: f64,
    /// Delay applied to delayed packets.
    pub delay: Duration,
    /// Probability one bit of the payload is flipped on delivery.
    pub corrupt: f64,
    /// Seed of the pseudo-random generator (same seed, same faults).
    pub seed: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self {
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            delay_rate: 0.0,
            delay: Duration::ZERO,
            corrupt: 0.0,
            seed: 0,
        }
    }
}

impl FaultConfig {
    /// True when no fault is configured (the fast path skips the injector).
    pub fn is_none(&self) -> bool {
        self.drop == 0.0
            && self.duplicate == 0.0
            && self.reorder == 0.0
            && self.delay_rate == 0.0
            && self.corrupt == 0.0
    }

    /// Checks every rate is within 0..=1.
    pub fn validate(&self) -> Result<()> {
        for (what, v) in [
            ("fault drop rate", self.drop),
            ("fault duplicate rate", self.duplicate),
            ("fault reorder rate", self.reorder),
            ("fault delay rate", self.delay_rate),
            ("fault corrupt rate", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(Error::InvalidParam {
                    what,
                    value: v.to_string(),
                    valid: "0.0 ..= 1.0",
                });
            }
        }
        Ok(())
    }

    /// Checks the config suits RC (only delay and corrupt are observable above RC).
    pub fn validate_rc(&self) -> Result<()> {
        self.validate()?;
        for (what, v) in [
            ("RC fault drop rate", self.drop),
            ("RC fault duplicate rate", self.duplicate),
            ("RC fault reorder rate", self.reorder),
        ] {
            if v != 0.0 {
                return Err(Error::InvalidParam {
                    what,
                    value: v.to_string(),
                    valid: "0 (RC retransmits below verbs; use delay or corrupt)",
                });
            }
        }
        Ok(())
    }
}

/// Counters of injected faults.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FaultStats {
    /// Packets dropped.
    pub dropped: u64,
    /// Packets duplicated.
    pub duplicated: u64,
    /// Packets reordered.
    pub reordered: u64,
    /// Packets delayed.
    pub delayed: u64,
    /// Packets corrupted.
    pub corrupted: u64,
}

/// Outgoing-side injector: packets go in with [`FaultInjector::handle_send`], come out of
/// [`FaultInjector::poll_transmit`]; the caller does the I/O and supplies the time.
#[derive(Debug)]
pub struct FaultInjector<P> {
    cfg: FaultConfig,
    rng: StdRng,
    ready: VecDeque<P>,
    delayed: VecDeque<(Instant, P)>,
    held: Option<P>,
    /// What was injected so far.
    pub stats: FaultStats,
}

impl<P: Clone> FaultInjector<P> {
    /// New injector; the config must be valid.
    pub fn new(cfg: FaultConfig) -> Self {
        Self {
            rng: StdRng::seed_from_u64(cfg.seed),
            cfg,
            ready: VecDeque::new(),
            delayed: VecDeque::new(),
            held: None,
            stats: FaultStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    fn roll(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen::<f64>() < p
    }

    /// Offers a packet for transmission at `now`.
    pub fn handle_send(&mut self, now: Instant, pkt: P) {
        if self.roll(self.cfg.drop) {
            self.stats.dropped += 1;
            return;
        }
        let copies = if self.roll(self.cfg.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let pkt = pkt.clone();
            if self.roll(self.cfg.delay_rate) {
                self.stats.delayed += 1;
                self.delayed.push_back((now + self.cfg.delay, pkt));
                continue;
            }
            if self.held.is_none() && self.roll(self.cfg.reorder) {
                self.stats.reordered += 1;
                self.held = Some(pkt);
                continue;
            }
            self.ready.push_back(pkt);
            // A held packet goes out right after the one that overtook it.
            if let Some(h) = self.held.take() {
                self.ready.push_back(h);
            }
        }
    }

    /// Next packet due at `now`, if any.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<P> {
        if let Some(p) = self.ready.pop_front() {
            return Some(p);
        }
        if let Some((due, _)) = self.delayed.front() {
            if *due <= now {
                return self.delayed.pop_front().map(|(_, p)| p);
            }
        }
        None
    }

    /// When the next delayed packet falls due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.ready.is_empty() {
            return Some(Instant::now());
        }
        self.delayed.front().map(|(d, _)| *d)
    }

    /// Releases a packet held for reordering when nothing overtook it (called when idle, so a
    /// held packet is not stuck forever).
    pub fn release_held(&mut self) {
        if let Some(h) = self.held.take() {
            self.ready.push_back(h);
        }
    }

    /// Decides whether the next unit is delayed (RC delays whole in-order batches).
    pub fn maybe_delay(&mut self) -> bool {
        let d = self.roll(self.cfg.delay_rate);
        if d {
            self.stats.delayed += 1;
        }
        d
    }

    /// Receive-side corruption: flips one random bit of `payload` with the configured rate.
    /// Returns true if it did.
    pub fn maybe_corrupt(&mut self, payload: &mut [u8]) -> bool {
        if payload.is_empty() || !self.roll(self.cfg.corrupt) {
            return false;
        }
        let bit = self.rng.gen_range(0..payload.len() * 8);
        payload[bit / 8] ^= 1 << (bit % 8);
        self.stats.corrupted += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn no_faults_is_identity() {
        let mut f = FaultInjector::new(FaultConfig::default());
        let now = Instant::now();
        for i in 0..10u32 {
            f.handle_send(now, i);
        }
        let out: Vec<u32> = std::iter::from_fn(|| f.poll_transmit(now)).collect();
        assert_eq!(out, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn rc_rejects_drop() {
        let c = FaultConfig {
            drop: 0.1,
            ..Default::default()
        };
        assert!(c.validate_rc().is_err());
        let c = FaultConfig {
            drop: 1.5,
            ..Default::default()
        };
        assert!(c.validate().is_err());
    }

    #[test]
    fn delay_holds_until_due() {
        let mut f = FaultInjector::new(FaultConfig {
            delay_rate: 1.0,
            delay: Duration::from_millis(5),
            ..Default::default()
        });
        let now = Instant::now();
        f.handle_send(now, 1u8);
        assert_eq!(f.poll_transmit(now), None);
        assert_eq!(f.poll_timeout(), Some(now + Duration::from_millis(5)));
        assert_eq!(f.poll_transmit(now + Duration::from_millis(5)), Some(1));
    }

    proptest! {
        #[test]
        fn conserves_packets(seed in any::<u64>(), drop in 0.0..1.0f64, dup in 0.0..1.0f64,
                             reorder in 0.0..1.0f64, n in 1usize..200) {
            let mut f = FaultInjector::new(FaultConfig { drop, duplicate: dup, reorder,
                seed, ..Default::default() });
            let now = Instant::now();
            for i in 0..n { f.handle_send(now, i); }
            f.release_held();
            let out: Vec<usize> = std::iter::from_fn(|| f.poll_transmit(now)).collect();
            let s = f.stats;
            prop_assert_eq!(out.len() as u64, n as u64 - s.dropped + s.duplicated);
            let mut sorted = out.clone(); sorted.sort(); sorted.dedup();
            prop_assert_eq!(sorted.len() as u64, n as u64 - s.dropped);
        }

        #[test]
        fn same_seed_same_faults(seed in any::<u64>()) {
            let cfg = FaultConfig { drop: 0.3, duplicate: 0.2, reorder: 0.2, corrupt: 0.5, seed,
                ..Default::default() };
            let run = || {
                let mut f = FaultInjector::new(cfg);
                let now = Instant::now();
                for i in 0..50u32 { f.handle_send(now, i); }
                let mut buf = [0u8; 16];
                let c = f.maybe_corrupt(&mut buf);
                (std::iter::from_fn(|| f.poll_transmit(now)).collect::<Vec<_>>(), c, buf)
            };
            prop_assert_eq!(run(), run());
        }
    }
}
