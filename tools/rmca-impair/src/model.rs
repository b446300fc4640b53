//! The impairment model of one direction of a link, sans I/O: given a packet (its length and
//! which of its bytes may be corrupted) at time `now`, decide whether it is dropped, and if not,
//! when each of its copies leaves and which bits of it are flipped. Time is explicit
//! (nanoseconds from any origin, never decreasing) and every random choice comes from the
//! direction's own seeded generator, so a seed and a packet sequence name one outcome.

use std::ops::Range;

use serde::Serialize;

use crate::rng::Rng;
use crate::spec::{Impairment, Loss};

/// What the model needs to know of a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketInfo {
    /// Length of the whole IP packet in bytes.
    pub len: usize,
    /// Bytes whose corruption reaches the application (a UDP payload whose checksum can be
    /// cleared), if any.
    pub corruptible: Option<Range<usize>>,
}

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Larger than the direction's MTU.
    Mtu,
    /// Chosen by the loss process.
    Loss,
    /// Would have waited longer than the queue allows behind a rate limit.
    Queue,
}

/// One copy of a packet to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emit {
    /// When it leaves the link (same clock as `now`).
    pub at_ns: u64,
    /// Bit offsets (from the start of the packet) to flip; empty when not corrupted.
    pub flips: Vec<usize>,
}

/// The decision for one packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Not delivered.
    Drop(DropReason),
    /// Delivered once or (duplicated) twice.
    Deliver(Vec<Emit>),
}

/// What one direction did, cumulative.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Packets offered.
    pub packets: u64,
    /// Bytes offered.
    pub bytes: u64,
    /// Copies delivered (a duplicated packet counts twice).
    pub delivered: u64,
    /// Dropped by the loss process.
    pub lost: u64,
    /// Runs of consecutive packets dropped by the loss process (lost / loss_bursts is the
    /// mean burst length).
    pub loss_bursts: u64,
    /// Longest such run.
    pub longest_burst: u64,
    /// Dropped for exceeding the MTU.
    pub too_big: u64,
    /// Dropped by the rate limit's full queue.
    pub queue_drops: u64,
    /// Packets delivered twice.
    pub duplicated: u64,
    /// Packets held back so that later ones overtake them.
    pub reordered: u64,
    /// Packets whose payload bits were flipped.
    pub corrupted: u64,
    /// Packets chosen for corruption that carry nothing corruptible (not UDP, an empty
    /// payload, a later IP fragment): delivered intact.
    pub corrupt_skipped: u64,
}

/// One direction of a link: its impairment, its generator and its state.
#[derive(Debug, Clone)]
pub struct Direction {
    imp: Impairment,
    rng: Rng,
    /// Gilbert-Elliott state: in the bad state.
    bad: bool,
    /// The link is sending until then (rate limit).
    busy_until_ns: u64,
    /// Length of the current run of losses.
    run: u64,
    counters: Counters,
}

impl Direction {
    /// A direction applying `imp`, its choices drawn from `seed`.
    pub fn new(imp: Impairment, seed: u64) -> Self {
        Self {
            imp,
            rng: Rng::new(seed),
            bad: false,
            busy_until_ns: 0,
            run: 0,
            counters: Counters::default(),
        }
    }

    /// From now on applies `imp` (a link cut, a change of conditions), keeping the counters
    /// and the random stream; the loss chain restarts in its good state.
    pub fn set_impairment(&mut self, imp: Impairment) {
        self.imp = imp;
        self.bad = false;
        self.run = 0;
    }

    /// The impairment applied.
    pub fn impairment(&self) -> &Impairment {
        &self.imp
    }

    /// What it did so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Decides the fate of one packet offered at `now_ns`.
    pub fn decide(&mut self, now_ns: u64, pkt: &PacketInfo) -> Verdict {
        self.counters.packets += 1;
        self.counters.bytes += pkt.len as u64;
        if self.imp.mtu > 0 && pkt.len > self.imp.mtu {
            self.counters.too_big += 1;
            return Verdict::Drop(DropReason::Mtu);
        }
        if self.lose() {
            self.counters.lost += 1;
            if self.run == 0 {
                self.counters.loss_bursts += 1;
            }
            self.run += 1;
            self.counters.longest_burst = self.counters.longest_burst.max(self.run);
            return Verdict::Drop(DropReason::Loss);
        }
        self.run = 0;
        // Serialisation behind earlier packets at the link's rate.
        let mut base = now_ns;
        if self.imp.rate_bps > 0 {
            let start = self.busy_until_ns.max(now_ns);
            if start - now_ns > self.imp.queue_ns {
                self.counters.queue_drops += 1;
                return Verdict::Drop(DropReason::Queue);
            }
            let tx = (pkt.len as u128 * 8 * 1_000_000_000 / u128::from(self.imp.rate_bps)) as u64;
            self.busy_until_ns = start + tx;
            base = self.busy_until_ns;
        }
        let flips = if self.imp.corrupt > 0.0 && self.rng.chance(self.imp.corrupt) {
            match &pkt.corruptible {
                Some(r) if !r.is_empty() => {
                    self.counters.corrupted += 1;
                    self.pick_flips(r)
                }
                _ => {
                    self.counters.corrupt_skipped += 1;
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        let copies = if self.imp.duplicate > 0.0 && self.rng.chance(self.imp.duplicate) {
            self.counters.duplicated += 1;
            2
        } else {
            1
        };
        let emits: Vec<Emit> = (0..copies)
            .map(|_| Emit {
                at_ns: self.departure(base),
                flips: flips.clone(),
            })
            .collect();
        self.counters.delivered += emits.len() as u64;
        Verdict::Deliver(emits)
    }

    /// Steps the loss process by one packet: true if this packet is lost.
    fn lose(&mut self) -> bool {
        match self.imp.loss {
            Loss::None => false,
            Loss::Bernoulli(p) => self.rng.chance(p),
            Loss::GilbertElliott {
                p_gb,
                p_bg,
                loss_bad,
                loss_good,
            } => {
                // Transition first, then lose according to the state entered: a burst then
                // starts with the packet that found the channel bad.
                self.bad = if self.bad {
                    !self.rng.chance(p_bg)
                } else {
                    self.rng.chance(p_gb)
                };
                self.rng.chance(if self.bad { loss_bad } else { loss_good })
            }
        }
    }

    /// When a copy whose last bit left the sender at `base` reaches the other side.
    fn departure(&mut self, base: u64) -> u64 {
        let mut at = base + self.imp.delay_ns;
        if self.imp.jitter_ns > 0 {
            let span = 2 * self.imp.jitter_ns + 1;
            let offset = self.rng.below(span) as i128 - i128::from(self.imp.jitter_ns);
            at = (i128::from(at) + offset).max(i128::from(base)) as u64;
        }
        if self.imp.reorder > 0.0 && self.rng.chance(self.imp.reorder) {
            self.counters.reordered += 1;
            at += self.imp.reorder_gap_ns;
        }
        at
    }

    /// `corrupt_bits` distinct bit offsets within the byte range `r` (all of them if fewer).
    fn pick_flips(&mut self, r: &Range<usize>) -> Vec<usize> {
        let bits = (r.len() * 8) as u64;
        let want = u64::from(self.imp.corrupt_bits).min(bits) as usize;
        let mut flips: Vec<usize> = Vec::with_capacity(want);
        while flips.len() < want {
            let b = r.start * 8 + self.rng.below(bits) as usize;
            if !flips.contains(&b) {
                flips.push(b);
            }
        }
        flips
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn udp(len: usize) -> PacketInfo {
        PacketInfo {
            len,
            corruptible: Some(28..len),
        }
    }

    fn run(imp: &str, seed: u64, n: usize) -> (Vec<Verdict>, Counters) {
        let mut d = Direction::new(Impairment::parse(imp).unwrap(), seed);
        let v = (0..n)
            .map(|i| d.decide(i as u64 * 10_000, &udp(100 + i % 1000)))
            .collect();
        (v, d.counters().clone())
    }

    #[test]
    fn a_perfect_link_delivers_everything_at_once_in_order() {
        let (v, c) = run("", 1, 1000);
        for (i, x) in v.iter().enumerate() {
            assert_eq!(
                x,
                &Verdict::Deliver(vec![Emit {
                    at_ns: i as u64 * 10_000,
                    flips: vec![]
                }])
            );
        }
        assert_eq!((c.packets, c.delivered, c.lost), (1000, 1000, 0));
    }

    #[test]
    fn rates_converge() {
        let n = 200_000;
        let (_, c) = run("loss=0.1,dup=0.02,corrupt=0.03,reorder=0.05", 3, n);
        let f = |x: u64| x as f64 / n as f64;
        assert!((f(c.lost) - 0.1).abs() < 0.005, "{c:?}");
        let kept = n as f64 * 0.9;
        assert!((c.duplicated as f64 / kept - 0.02).abs() < 0.003, "{c:?}");
        assert!((c.corrupted as f64 / kept - 0.03).abs() < 0.003, "{c:?}");
        // Reordering is drawn per copy.
        assert!(
            (c.reordered as f64 / c.delivered as f64 - 0.05).abs() < 0.004,
            "{c:?}"
        );
        assert_eq!(c.delivered, (n as u64 - c.lost) + c.duplicated);
    }

    #[test]
    fn gilbert_elliott_bursts_match_the_model() {
        // Simple Gilbert: bursts are geometric with mean 1/p_bg, the loss rate the stationary
        // bad fraction.
        let n = 400_000;
        let (v, c) = run("burst=0.2:4", 11, n);
        let rate = c.lost as f64 / n as f64;
        assert!((rate - 0.2).abs() < 0.01, "rate {rate}: {c:?}");
        let mean = c.lost as f64 / c.loss_bursts as f64;
        assert!((mean - 4.0).abs() < 0.15, "mean burst {mean}: {c:?}");
        // The distribution too: P(burst length = k) = (1 - r)^(k-1) r with r = 1/4.
        let mut lengths = std::collections::BTreeMap::<u64, u64>::new();
        let mut runlen = 0u64;
        for x in &v {
            if matches!(x, Verdict::Drop(DropReason::Loss)) {
                runlen += 1;
            } else if runlen > 0 {
                *lengths.entry(runlen).or_default() += 1;
                runlen = 0;
            }
        }
        let bursts: u64 = lengths.values().sum();
        for k in 1..=6u64 {
            let want = 0.75f64.powi(k as i32 - 1) * 0.25;
            let got = lengths.get(&k).copied().unwrap_or(0) as f64 / bursts as f64;
            assert!(
                (got - want).abs() < 0.01,
                "P(len={k}) = {got}, model {want}"
            );
        }
        // Independent loss at the same rate has bursts of mean 1 / (1 - 0.2) = 1.25.
        let (_, b) = run("loss=0.2", 11, n);
        let mean_b = b.lost as f64 / b.loss_bursts as f64;
        assert!((mean_b - 1.25).abs() < 0.05, "{mean_b}");
    }

    #[test]
    fn full_gilbert_elliott_rate_matches_its_formula() {
        let n = 400_000;
        let (_, c) = run("ge=0.05:0.2:0.8:0.01", 5, n);
        let want = Loss::GilbertElliott {
            p_gb: 0.05,
            p_bg: 0.2,
            loss_bad: 0.8,
            loss_good: 0.01,
        }
        .expected_rate();
        let rate = c.lost as f64 / n as f64;
        assert!((rate - want).abs() < 0.01, "{rate} vs {want}");
    }

    #[test]
    fn rate_limit_serialises_and_tail_drops() {
        // 8 Mbit/s: a 1000-byte packet takes 1 ms on the wire.
        let mut d = Direction::new(Impairment::parse("rate=8m,queue=3ms").unwrap(), 1);
        let p = PacketInfo {
            len: 1000,
            corruptible: None,
        };
        let at = |v: Verdict| match v {
            Verdict::Deliver(e) => e[0].at_ns,
            other => panic!("{other:?}"),
        };
        assert_eq!(at(d.decide(0, &p)), 1_000_000);
        assert_eq!(at(d.decide(0, &p)), 2_000_000);
        assert_eq!(at(d.decide(0, &p)), 3_000_000);
        assert_eq!(at(d.decide(0, &p)), 4_000_000); // waited 3 ms: still allowed
        assert_eq!(d.decide(0, &p), Verdict::Drop(DropReason::Queue));
        assert_eq!(at(d.decide(10_000_000, &p)), 11_000_000); // idle link again
        assert_eq!(d.counters().queue_drops, 1);
    }

    #[test]
    fn mtu_delay_jitter_and_corruption() {
        let mut d = Direction::new(
            Impairment::parse("mtu=1000,delay=2ms,jitter=500us,corrupt=1:3").unwrap(),
            9,
        );
        assert_eq!(d.decide(0, &udp(1001)), Verdict::Drop(DropReason::Mtu));
        for t in 0..1000u64 {
            match d.decide(t, &udp(500)) {
                Verdict::Deliver(e) => {
                    assert!(e[0].at_ns >= t + 1_500_000 && e[0].at_ns <= t + 2_500_000);
                    assert_eq!(e[0].flips.len(), 3);
                    assert!(e[0].flips.iter().all(|&b| (28 * 8..500 * 8).contains(&b)));
                }
                other => panic!("{other:?}"),
            }
        }
        // Nothing to corrupt: delivered intact and counted.
        let tcp = PacketInfo {
            len: 100,
            corruptible: None,
        };
        assert!(matches!(d.decide(2000, &tcp), Verdict::Deliver(e) if e[0].flips.is_empty()));
        assert_eq!(d.counters().corrupt_skipped, 1);
        assert_eq!(d.counters().too_big, 1);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The same seed and packets give the same decisions, whatever the impairment.
        #[test]
        fn same_seed_same_decisions(
            seed in any::<u64>(),
            loss in 0.0f64..0.5, dup in 0.0f64..0.2, reorder in 0.0f64..0.2,
            corrupt in 0.0f64..0.2, jitter_us in 0u64..1000,
            lens in proptest::collection::vec(20usize..9000, 1..200),
        ) {
            let spec = format!(
                "burst={loss}:3,dup={dup},reorder={reorder},corrupt={corrupt},jitter={jitter_us}us,rate=1g"
            );
            let imp = Impairment::parse(&spec).unwrap();
            let go = || {
                let mut d = Direction::new(imp.clone(), seed);
                lens.iter().enumerate().map(|(i, &len)| d.decide(i as u64 * 1000, &PacketInfo {
                    len, corruptible: (len > 28).then_some(28..len),
                })).collect::<Vec<_>>()
            };
            prop_assert_eq!(go(), go());
        }

        /// Without jitter or reordering, delivery times never decrease (a FIFO link), and
        /// never precede the packet's arrival plus the delay.
        #[test]
        fn fifo_without_jitter(
            seed in any::<u64>(),
            gaps in proptest::collection::vec(0u64..100_000, 1..300),
            delay_us in 0u64..5000,
        ) {
            let imp = Impairment::parse(&format!("loss=0.1,dup=0.1,delay={delay_us}us,rate=100m")).unwrap();
            let mut d = Direction::new(imp, seed);
            let (mut now, mut last) = (0u64, 0u64);
            for g in gaps {
                now += g;
                if let Verdict::Deliver(e) = d.decide(now, &PacketInfo { len: 1000, corruptible: None }) {
                    for x in e {
                        prop_assert!(x.at_ns >= last && x.at_ns >= now + delay_us * 1000);
                        last = x.at_ns;
                    }
                }
            }
        }
    }
}
