//! The modelled network: one NIC per peer with a transmit and a receive serializer (bandwidth),
//! a fixed one-way latency plus jitter, a loss process per sending NIC (Bernoulli or bursty
//! Gilbert-Elliott), and loss windows (every packet sent inside one is lost: a burst loss).
//! Sans-IO: the caller passes the time; the seeded generator makes it reproducible.

use rmca_framework::rng::SplitMix64;

use crate::SimError;

/// The random loss process, applied to each packet a NIC sends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Loss {
    /// No random loss.
    None,
    /// Each packet lost independently with probability `p`.
    Bernoulli {
        /// Loss probability.
        p: f64,
    },
    /// Gilbert-Elliott: a two-state Markov chain stepped per packet; packets are lost with
    /// `loss_good` in the good state and `loss_bad` in the bad one. Mean burst length (in
    /// packets) is `1 / p_bg`; stationary bad fraction `p_gb / (p_gb + p_bg)`.
    GilbertElliott {
        /// P(good -> bad) per packet.
        p_gb: f64,
        /// P(bad -> good) per packet.
        p_bg: f64,
        /// Loss probability in the good state.
        loss_good: f64,
        /// Loss probability in the bad state.
        loss_bad: f64,
    },
}

impl Loss {
    /// Parses `none`, `bernoulli:P` or `ge:P_GB,P_BG[,LOSS_GOOD,LOSS_BAD]` (defaults 0 and 1).
    pub fn parse(text: &str) -> Result<Self, SimError> {
        let bad = |why: &str| {
            SimError::Invalid {
            what: "--loss".into(),
            value: text.into(),
            valid: format!(
                "none, bernoulli:P or ge:P_GB,P_BG[,LOSS_GOOD,LOSS_BAD] with probabilities in 0..=1 ({why})"
            ),
        }
        };
        let nums = |s: &str| -> Result<Vec<f64>, SimError> {
            s.split(',')
                .map(|x| x.trim().parse::<f64>().map_err(|_| bad("not a number")))
                .collect()
        };
        let l = match text.split_once(':') {
            None if text == "none" => Loss::None,
            Some(("bernoulli", v)) => match nums(v)?.as_slice() {
                [p] => Loss::Bernoulli { p: *p },
                _ => return Err(bad("bernoulli takes one probability")),
            },
            Some(("ge", v)) => match nums(v)?.as_slice() {
                [a, b] => Loss::GilbertElliott {
                    p_gb: *a,
                    p_bg: *b,
                    loss_good: 0.0,
                    loss_bad: 1.0,
                },
                [a, b, g, l] => Loss::GilbertElliott {
                    p_gb: *a,
                    p_bg: *b,
                    loss_good: *g,
                    loss_bad: *l,
                },
                _ => return Err(bad("ge takes 2 or 4 numbers")),
            },
            _ => return Err(bad("unknown kind")),
        };
        l.validate().map_err(|_| bad("out of range"))?;
        Ok(l)
    }

    /// Checks every probability is in 0..=1 (and a GE chain can leave the bad state).
    pub fn validate(&self) -> Result<(), SimError> {
        let probs: Vec<f64> = match *self {
            Loss::None => vec![],
            Loss::Bernoulli { p } => vec![p],
            Loss::GilbertElliott {
                p_gb,
                p_bg,
                loss_good,
                loss_bad,
            } => {
                if p_bg == 0.0 {
                    return Err(SimError::Invalid {
                        what: "ge P_BG".into(),
                        value: "0".into(),
                        valid: "above 0 (a bad state that never ends loses everything)".into(),
                    });
                }
                vec![p_gb, p_bg, loss_good, loss_bad]
            }
        };
        for p in probs {
            if !(0.0..=1.0).contains(&p) {
                return Err(SimError::Invalid {
                    what: "loss probability".into(),
                    value: p.to_string(),
                    valid: "0..=1".into(),
                });
            }
        }
        Ok(())
    }

    /// Long-run fraction of packets lost.
    pub fn mean_rate(&self) -> f64 {
        match *self {
            Loss::None => 0.0,
            Loss::Bernoulli { p } => p,
            Loss::GilbertElliott {
                p_gb,
                p_bg,
                loss_good,
                loss_bad,
            } => {
                let bad = p_gb / (p_gb + p_bg);
                bad * loss_bad + (1.0 - bad) * loss_good
            }
        }
    }
}

/// Network parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct NetConfig {
    /// One-way latency (wire and switches), ns.
    pub latency_ns: u64,
    /// Uniform extra delay in 0..=jitter_ns per packet (reorders when above a packet's gap).
    pub jitter_ns: u64,
    /// NIC bandwidth per direction, bytes per second.
    pub bytes_per_sec: u64,
    /// Random loss.
    pub loss: Loss,
    /// Windows `[start, end)` in ns in which every packet sent (by any NIC) is lost.
    pub bursts: Vec<(u64, u64)>,
}

impl Default for NetConfig {
    /// An InfiniBand-like fabric: 1.5 us, 3 GB/s (a 4x QDR-class link), no loss.
    fn default() -> Self {
        Self {
            latency_ns: 1_500,
            jitter_ns: 0,
            bytes_per_sec: 3_000_000_000,
            loss: Loss::None,
            bursts: Vec::new(),
        }
    }
}

impl NetConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.bytes_per_sec == 0 {
            return Err(SimError::Invalid {
                what: "--bandwidth".into(),
                value: "0".into(),
                valid: "bytes per second above 0".into(),
            });
        }
        for &(s, e) in &self.bursts {
            if e <= s {
                return Err(SimError::Invalid {
                    what: "burst window".into(),
                    value: format!("{s}..{e} ns"),
                    valid: "an end after the start".into(),
                });
            }
        }
        self.loss.validate()
    }
}

/// What the network did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Packets given to the network.
    pub packets: u64,
    /// Bytes given to the network.
    pub bytes: u64,
    /// Lost by the random loss process.
    pub lost_random: u64,
    /// Lost inside a burst window.
    pub lost_burst: u64,
}

/// The network state: per-NIC serializers and loss states.
pub struct Network {
    cfg: NetConfig,
    tx_free: Vec<u64>,
    rx_free: Vec<u64>,
    bad: Vec<bool>,
    rng: SplitMix64,
    /// Counters.
    pub stats: NetStats,
}

impl Network {
    /// A network of `n` NICs.
    pub fn new(cfg: NetConfig, n: usize, seed: u64) -> Result<Self, SimError> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            tx_free: vec![0; n],
            rx_free: vec![0; n],
            bad: vec![false; n],
            rng: SplitMix64::new(seed),
            stats: NetStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &NetConfig {
        &self.cfg
    }

    fn ser_ns(&self, len: usize) -> u64 {
        (len as u128 * 1_000_000_000 / self.cfg.bytes_per_sec as u128) as u64
    }

    /// NIC `from` starts sending `len` bytes to `to` at `now` (or when its transmitter is free):
    /// the time the last byte is received, or None if the packet is lost. A lost packet still
    /// takes its transmit time.
    pub fn send(&mut self, now: u64, from: usize, to: usize, len: usize) -> Option<u64> {
        self.stats.packets += 1;
        self.stats.bytes += len as u64;
        let ser = self.ser_ns(len);
        let start = now.max(self.tx_free[from]);
        self.tx_free[from] = start + ser;
        if self
            .cfg
            .bursts
            .iter()
            .any(|&(s, e)| start >= s && start < e)
        {
            self.stats.lost_burst += 1;
            return None;
        }
        let lost = match self.cfg.loss {
            Loss::None => false,
            Loss::Bernoulli { p } => self.rng.chance(p),
            Loss::GilbertElliott {
                p_gb,
                p_bg,
                loss_good,
                loss_bad,
            } => {
                let b = &mut self.bad[from];
                *b = if *b {
                    !self.rng.chance(p_bg)
                } else {
                    self.rng.chance(p_gb)
                };
                let p = if *b { loss_bad } else { loss_good };
                self.rng.chance(p)
            }
        };
        if lost {
            self.stats.lost_random += 1;
            return None;
        }
        let jitter = if self.cfg.jitter_ns > 0 {
            self.rng.below(self.cfg.jitter_ns + 1)
        } else {
            0
        };
        // The receiver's NIC takes one packet at a time: incast queues there.
        let at_rx = start + ser + self.cfg.latency_ns + jitter;
        let done = at_rx.max(self.rx_free[to] + ser);
        self.rx_free[to] = done;
        Some(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(loss: Loss) -> Network {
        Network::new(
            NetConfig {
                latency_ns: 1000,
                bytes_per_sec: 1_000_000_000,
                loss,
                ..NetConfig::default()
            },
            4,
            7,
        )
        .unwrap()
    }

    #[test]
    fn latency_and_bandwidth() {
        let mut n = net(Loss::None);
        // 1000 bytes at 1 GB/s = 1 us on the wire, + 1 us latency.
        assert_eq!(n.send(0, 0, 1, 1000), Some(2000));
        // Back to back from the same NIC: queued behind the first.
        assert_eq!(n.send(0, 0, 2, 1000), Some(3000));
        // Two senders to one receiver: the second is serialized at the receiver's NIC.
        let mut n = net(Loss::None);
        assert_eq!(n.send(0, 0, 3, 1000), Some(2000));
        assert_eq!(n.send(0, 1, 3, 1000), Some(3000));
    }

    #[test]
    fn bernoulli_rate_is_close() {
        let mut n = net(Loss::Bernoulli { p: 0.2 });
        let lost = (0..20_000).filter(|_| n.send(0, 0, 1, 1).is_none()).count();
        assert!((3_600..4_400).contains(&lost), "{lost}");
        assert_eq!(n.stats.lost_random, lost as u64);
    }

    #[test]
    fn gilbert_elliott_losses_come_in_bursts() {
        // Bad 1/11 of the time, mean burst 10 packets.
        let l = Loss::GilbertElliott {
            p_gb: 0.01,
            p_bg: 0.1,
            loss_good: 0.0,
            loss_bad: 1.0,
        };
        assert!((l.mean_rate() - 1.0 / 11.0).abs() < 1e-12);
        let mut n = net(l);
        let lost: Vec<bool> = (0..200_000).map(|_| n.send(0, 0, 1, 1).is_none()).collect();
        let total = lost.iter().filter(|x| **x).count() as f64;
        let bursts = lost.windows(2).filter(|w| w[1] && !w[0]).count() as f64;
        let mean_burst = total / bursts;
        assert!((total / 200_000.0 - 1.0 / 11.0).abs() < 0.01, "{total}");
        assert!((8.0..12.0).contains(&mean_burst), "{mean_burst}");
    }

    #[test]
    fn a_burst_window_loses_everything_inside_only() {
        let mut n = Network::new(
            NetConfig {
                bursts: vec![(100, 200)],
                ..NetConfig::default()
            },
            2,
            1,
        )
        .unwrap();
        assert!(n.send(99, 0, 1, 0).is_some());
        assert!(n.send(100, 0, 1, 0).is_none());
        assert!(n.send(199, 1, 0, 0).is_none());
        assert!(n.send(200, 0, 1, 0).is_some());
        assert_eq!(n.stats.lost_burst, 2);
    }

    #[test]
    fn nonsense_is_refused_with_what_is_valid() {
        for bad in [
            "bernoulli:1.5",
            "ge:0.1",
            "ge:0.1,0",
            "flaky:3",
            "bernoulli:x",
        ] {
            let e = Loss::parse(bad).unwrap_err().to_string();
            assert!(
                e.contains("--loss") && e.contains("bernoulli:P"),
                "{bad}: {e}"
            );
        }
        assert_eq!(
            Loss::parse("bernoulli:0.2").unwrap(),
            Loss::Bernoulli { p: 0.2 }
        );
        let e = NetConfig {
            bytes_per_sec: 0,
            ..NetConfig::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("--bandwidth"), "{e}");
    }
}
