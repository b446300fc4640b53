//! Impairment specifications: what one direction of a link does to its packets, parsed from
//! `key=value,...` strings and checked, so that nonsense is refused with what was wrong and
//! what is valid before a single packet moves.

use std::fmt;

/// Why an impairment specification was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    /// A key that is not an impairment.
    #[error("unknown impairment '{0}': valid are {VALID_KEYS}")]
    UnknownKey(String),
    /// An item without `=`.
    #[error("'{0}' is not key=value (valid keys: {VALID_KEYS})")]
    NotKeyValue(String),
    /// A value that does not parse.
    #[error("{key}: '{value}' is not {what}")]
    BadValue {
        /// The key.
        key: &'static str,
        /// What was given.
        value: String,
        /// What is valid.
        what: &'static str,
    },
    /// A value out of its range.
    #[error("{key}: {value} is out of range: {range}")]
    OutOfRange {
        /// The key.
        key: &'static str,
        /// What was given.
        value: String,
        /// The valid range.
        range: &'static str,
    },
    /// The same impairment given twice, or two loss models at once.
    #[error("{0} given twice (one loss model: loss, burst or ge)")]
    Twice(&'static str),
}

/// Every key [`Impairment::parse`] accepts, for error messages.
pub const VALID_KEYS: &str = "loss=P, burst=RATE:LEN, ge=P_GB:P_BG[:LOSS_BAD[:LOSS_GOOD]], \
     dup=P, reorder=P[:GAP], corrupt=P[:BITS], delay=DUR, jitter=DUR, rate=BITS_PER_S, \
     queue=DUR, mtu=BYTES (P in [0,1]; DUR like 500us, 2ms, 1s; rates like 100m, 1g)";

/// How packets are lost.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Loss {
    /// No loss.
    #[default]
    None,
    /// Each packet lost independently with this probability.
    Bernoulli(f64),
    /// Gilbert-Elliott: a two-state Markov chain stepped once per packet.
    GilbertElliott {
        /// P(good -> bad) per packet.
        p_gb: f64,
        /// P(bad -> good) per packet.
        p_bg: f64,
        /// Loss probability in the bad state.
        loss_bad: f64,
        /// Loss probability in the good state.
        loss_good: f64,
    },
}

impl Loss {
    /// Simple Gilbert (every packet of a burst lost, none outside) with long-run loss `rate`
    /// and mean burst length `len` packets: P(bad -> good) = 1/len, and the stationary bad
    /// fraction p_gb / (p_gb + p_bg) equal to `rate`.
    pub fn bursty(rate: f64, len: f64) -> Self {
        let p_bg = 1.0 / len;
        let p_gb = if rate >= 1.0 {
            1.0
        } else {
            rate * p_bg / (1.0 - rate)
        };
        Loss::GilbertElliott {
            p_gb: p_gb.min(1.0),
            p_bg,
            loss_bad: 1.0,
            loss_good: 0.0,
        }
    }

    /// The long-run fraction of packets lost.
    pub fn expected_rate(&self) -> f64 {
        match *self {
            Loss::None => 0.0,
            Loss::Bernoulli(p) => p,
            Loss::GilbertElliott {
                p_gb,
                p_bg,
                loss_bad,
                loss_good,
            } => {
                if p_gb + p_bg == 0.0 {
                    return loss_good;
                }
                let bad = p_gb / (p_gb + p_bg);
                bad * loss_bad + (1.0 - bad) * loss_good
            }
        }
    }
}

/// What one direction of a link does to the packets crossing it. All times in nanoseconds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Impairment {
    /// The loss process.
    pub loss: Loss,
    /// Probability that a packet is delivered twice.
    pub duplicate: f64,
    /// Probability that a packet is held back by `reorder_gap_ns`, so later ones overtake it.
    pub reorder: f64,
    /// How long a reordered packet is held back.
    pub reorder_gap_ns: u64,
    /// Probability that a UDP packet's payload is corrupted (and its checksum cleared, so
    /// that the receiving kernel delivers it to the application).
    pub corrupt: f64,
    /// Bits flipped in a corrupted payload.
    pub corrupt_bits: u32,
    /// One-way propagation delay.
    pub delay_ns: u64,
    /// Delay varies uniformly within +/- this (may reorder packets, as netem's jitter does).
    pub jitter_ns: u64,
    /// Link rate in bits per second (0: unlimited).
    pub rate_bps: u64,
    /// With a rate: a packet that would wait longer than this to be sent is dropped.
    pub queue_ns: u64,
    /// Largest IP packet carried (0: any); larger ones are dropped and counted.
    pub mtu: usize,
}

/// Default hold-back of a reordered packet.
pub const DEFAULT_REORDER_GAP_NS: u64 = 1_000_000;
/// Default queue of a rate-limited link, in time to drain.
pub const DEFAULT_QUEUE_NS: u64 = 50_000_000;

impl Impairment {
    /// Parses `key=value,key=value,...` (an empty string: a perfect link). See [`VALID_KEYS`].
    pub fn parse(s: &str) -> Result<Self, SpecError> {
        let mut imp = Impairment {
            corrupt_bits: 1,
            reorder_gap_ns: DEFAULT_REORDER_GAP_NS,
            queue_ns: DEFAULT_QUEUE_NS,
            ..Default::default()
        };
        let mut seen: Vec<&'static str> = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| SpecError::NotKeyValue(item.to_owned()))?;
            let key: &'static str = match k.trim() {
                "loss" => "loss",
                "burst" => "burst",
                "ge" => "ge",
                "dup" => "dup",
                "reorder" => "reorder",
                "corrupt" => "corrupt",
                "delay" => "delay",
                "jitter" => "jitter",
                "rate" => "rate",
                "queue" => "queue",
                "mtu" => "mtu",
                other => return Err(SpecError::UnknownKey(other.to_owned())),
            };
            let group = if matches!(key, "loss" | "burst" | "ge") {
                "a loss model"
            } else {
                key
            };
            if seen.contains(&group) {
                return Err(SpecError::Twice(group));
            }
            seen.push(group);
            let v = v.trim();
            let parts: Vec<&str> = v.split(':').collect();
            let arity = |min: usize, max: usize| {
                if parts.len() < min || parts.len() > max {
                    Err(SpecError::BadValue {
                        key,
                        value: v.to_owned(),
                        what: "of the form the key's help gives",
                    })
                } else {
                    Ok(())
                }
            };
            match key {
                "loss" => {
                    arity(1, 1)?;
                    imp.loss = Loss::Bernoulli(prob(key, parts[0])?);
                }
                "burst" => {
                    arity(2, 2)?;
                    let rate = prob(key, parts[0])?;
                    let len = number(key, parts[1])?;
                    if !(1.0..=1e6).contains(&len) {
                        return Err(SpecError::OutOfRange {
                            key,
                            value: parts[1].to_owned(),
                            range: "the mean burst length is 1 to 1e6 packets",
                        });
                    }
                    if rate >= 1.0 {
                        return Err(SpecError::OutOfRange {
                            key,
                            value: parts[0].to_owned(),
                            range: "a bursty loss rate is below 1 (use loss=1 for a dead link)",
                        });
                    }
                    imp.loss = Loss::bursty(rate, len);
                }
                "ge" => {
                    arity(2, 4)?;
                    let p_gb = prob(key, parts[0])?;
                    let p_bg = prob(key, parts[1])?;
                    let loss_bad = parts.get(2).map_or(Ok(1.0), |x| prob(key, x))?;
                    let loss_good = parts.get(3).map_or(Ok(0.0), |x| prob(key, x))?;
                    if p_gb > 0.0 && p_bg == 0.0 {
                        return Err(SpecError::OutOfRange {
                            key,
                            value: v.to_owned(),
                            range:
                                "P_BG must be above 0 when P_GB is (else the bad state never ends)",
                        });
                    }
                    imp.loss = Loss::GilbertElliott {
                        p_gb,
                        p_bg,
                        loss_bad,
                        loss_good,
                    };
                }
                "dup" => {
                    arity(1, 1)?;
                    imp.duplicate = prob(key, parts[0])?;
                }
                "reorder" => {
                    arity(1, 2)?;
                    imp.reorder = prob(key, parts[0])?;
                    if let Some(g) = parts.get(1) {
                        imp.reorder_gap_ns = duration(key, g)?;
                    }
                }
                "corrupt" => {
                    arity(1, 2)?;
                    imp.corrupt = prob(key, parts[0])?;
                    if let Some(b) = parts.get(1) {
                        let bits = number(key, b)?;
                        if !(1.0..=64.0).contains(&bits) || bits.fract() != 0.0 {
                            return Err(SpecError::OutOfRange {
                                key,
                                value: (*b).to_owned(),
                                range: "1 to 64 bits flipped per corrupted packet",
                            });
                        }
                        imp.corrupt_bits = bits as u32;
                    }
                }
                "delay" => {
                    arity(1, 1)?;
                    imp.delay_ns = duration(key, parts[0])?;
                }
                "jitter" => {
                    arity(1, 1)?;
                    imp.jitter_ns = duration(key, parts[0])?;
                }
                "rate" => {
                    arity(1, 1)?;
                    imp.rate_bps = rate(key, parts[0])?;
                }
                "queue" => {
                    arity(1, 1)?;
                    imp.queue_ns = duration(key, parts[0])?;
                }
                "mtu" => {
                    arity(1, 1)?;
                    let m = number(key, parts[0])?;
                    if !(68.0..=65535.0).contains(&m) || m.fract() != 0.0 {
                        return Err(SpecError::OutOfRange {
                            key,
                            value: parts[0].to_owned(),
                            range: "an IPv4 MTU is 68 to 65535 bytes",
                        });
                    }
                    imp.mtu = m as usize;
                }
                _ => unreachable!("every key is matched above"),
            }
        }
        Ok(imp)
    }

    /// True when the direction does nothing to any packet.
    pub fn is_perfect(&self) -> bool {
        self.loss.expected_rate() == 0.0
            && self.duplicate == 0.0
            && self.reorder == 0.0
            && self.corrupt == 0.0
            && self.delay_ns == 0
            && self.jitter_ns == 0
            && self.rate_bps == 0
            && self.mtu == 0
    }
}

impl fmt::Display for Impairment {
    /// The canonical `key=value,...` form ([`Impairment::parse`] reads it back).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items: Vec<String> = Vec::new();
        match self.loss {
            Loss::None => {}
            Loss::Bernoulli(p) => items.push(format!("loss={p}")),
            Loss::GilbertElliott {
                p_gb,
                p_bg,
                loss_bad,
                loss_good,
            } => items.push(format!("ge={p_gb}:{p_bg}:{loss_bad}:{loss_good}")),
        }
        if self.duplicate > 0.0 {
            items.push(format!("dup={}", self.duplicate));
        }
        if self.reorder > 0.0 {
            items.push(format!(
                "reorder={}:{}ns",
                self.reorder, self.reorder_gap_ns
            ));
        }
        if self.corrupt > 0.0 {
            items.push(format!("corrupt={}:{}", self.corrupt, self.corrupt_bits));
        }
        if self.delay_ns > 0 {
            items.push(format!("delay={}ns", self.delay_ns));
        }
        if self.jitter_ns > 0 {
            items.push(format!("jitter={}ns", self.jitter_ns));
        }
        if self.rate_bps > 0 {
            items.push(format!("rate={},queue={}ns", self.rate_bps, self.queue_ns));
        }
        if self.mtu > 0 {
            items.push(format!("mtu={}", self.mtu));
        }
        f.write_str(&items.join(","))
    }
}

fn number(key: &'static str, v: &str) -> Result<f64, SpecError> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err(SpecError::BadValue {
            key,
            value: v.to_owned(),
            what: "a number",
        }),
    }
}

fn prob(key: &'static str, v: &str) -> Result<f64, SpecError> {
    let p = number(key, v)?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(SpecError::OutOfRange {
            key,
            value: v.to_owned(),
            range: "a probability is 0 to 1",
        })
    }
}

/// `500us`, `2ms`, `1.5s`, `100ns`, or a bare number of milliseconds; at most one hour.
fn duration(key: &'static str, v: &str) -> Result<u64, SpecError> {
    let bad = || SpecError::BadValue {
        key,
        value: v.to_owned(),
        what: "a duration like 500us, 2ms or 1s",
    };
    let split = v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" | "" => 1e6,
        "s" => 1e9,
        _ => return Err(bad()),
    };
    let x: f64 = num.parse().map_err(|_| bad())?;
    let ns = x * scale;
    if !ns.is_finite() || !(0.0..=3.6e12).contains(&ns) {
        return Err(SpecError::OutOfRange {
            key,
            value: v.to_owned(),
            range: "0 to 1 hour",
        });
    }
    Ok(ns as u64)
}

/// `100m`, `1g`, `56k`, `1000000` (bits per second; a trailing `bit` or `bps` is allowed).
fn rate(key: &'static str, v: &str) -> Result<u64, SpecError> {
    let bad = || SpecError::BadValue {
        key,
        value: v.to_owned(),
        what: "a rate in bits per second like 100m, 1g or 56k",
    };
    let t = v
        .trim_end_matches("bps")
        .trim_end_matches("bit")
        .to_ascii_lowercase();
    let (num, scale) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1e3),
        Some('m') => (&t[..t.len() - 1], 1e6),
        Some('g') => (&t[..t.len() - 1], 1e9),
        _ => (t.as_str(), 1.0),
    };
    let x: f64 = num.parse().map_err(|_| bad())?;
    let bps = x * scale;
    if !bps.is_finite() || !(1e3..=1e12).contains(&bps) {
        return Err(SpecError::OutOfRange {
            key,
            value: v.to_owned(),
            range: "1k to 1000g bits per second",
        });
    }
    Ok(bps as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_key() {
        let i = Impairment::parse(
            "burst=0.2:4, dup=0.01, reorder=0.05:2ms, corrupt=0.001:3, delay=1ms, jitter=200us, \
             rate=100m, queue=20ms, mtu=1400",
        )
        .unwrap();
        assert!((i.loss.expected_rate() - 0.2).abs() < 1e-12);
        assert_eq!(i.duplicate, 0.01);
        assert_eq!((i.reorder, i.reorder_gap_ns), (0.05, 2_000_000));
        assert_eq!((i.corrupt, i.corrupt_bits), (0.001, 3));
        assert_eq!((i.delay_ns, i.jitter_ns), (1_000_000, 200_000));
        assert_eq!(
            (i.rate_bps, i.queue_ns, i.mtu),
            (100_000_000, 20_000_000, 1400)
        );
        assert!(Impairment::parse("").unwrap().is_perfect());
        // The canonical form reads back to the same thing.
        assert_eq!(Impairment::parse(&i.to_string()).unwrap(), i);
    }

    #[test]
    fn refuses_nonsense_saying_what_is_valid() {
        let cases = [
            ("loss=1.5", "a probability is 0 to 1"),
            ("loss=x", "not a number"),
            ("los=0.1", "valid are loss=P"),
            ("loss", "not key=value"),
            ("loss=0.1,burst=0.1:3", "given twice"),
            ("burst=0.2:0.5", "mean burst length"),
            ("burst=1:3", "below 1"),
            ("ge=0.1:0", "P_BG must be above 0"),
            ("delay=5 parsecs", "a duration"),
            ("delay=-1ms", "0 to 1 hour"),
            ("rate=fast", "a rate in bits"),
            ("rate=10", "1k to 1000g"),
            ("mtu=20", "68 to 65535"),
            ("corrupt=0.1:0", "1 to 64 bits"),
            ("loss=0.1:0.2", "of the form"),
        ];
        for (spec, want) in cases {
            let e = Impairment::parse(spec).expect_err(spec).to_string();
            assert!(e.contains(want), "{spec}: {e}");
        }
    }

    #[test]
    fn bursty_loss_has_the_asked_rate() {
        for (rate, len) in [(0.01, 1.0), (0.2, 4.0), (0.3, 10.0)] {
            let l = Loss::bursty(rate, len);
            assert!((l.expected_rate() - rate).abs() < 1e-12, "{l:?}");
        }
    }
}
