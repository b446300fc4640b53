//! What a sweep varies and over what: the impairment of each point, the transports compared.
//! Pure, unit-tested; the driver runs it.

/// The impairment a sweep varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Independent loss: points are probabilities.
    Loss,
    /// Bursty (Gilbert) loss of a given mean burst length: points are long-run loss rates.
    Burst,
    /// Reordering (packets held back 1 ms): points are probabilities.
    Reorder,
    /// Corruption of UDP payloads that reaches the application: points are probabilities.
    Corrupt,
    /// Duplication: points are probabilities.
    Dup,
    /// One-way delay: points are microseconds.
    Delay,
    /// The link dies mid-stream: points are the loss rate from that moment on (1: dead).
    Kill,
}

impl Kind {
    /// Every kind, by name.
    pub const ALL: &'static [(&'static str, Kind)] = &[
        ("loss", Kind::Loss),
        ("burst", Kind::Burst),
        ("reorder", Kind::Reorder),
        ("corrupt", Kind::Corrupt),
        ("dup", Kind::Dup),
        ("delay", Kind::Delay),
        ("kill", Kind::Kill),
    ];

    /// The kind named `s`.
    pub fn parse(s: &str) -> Result<Kind, String> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, k)| *k)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
                format!("unknown sweep '{s}': valid are {}", names.join(", "))
            })
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map(|(n, _)| *n)
            .expect("every kind is named")
    }

    /// What a point means, for axes and tables.
    pub fn axis(self) -> &'static str {
        match self {
            Kind::Loss => "independent loss (fraction of packets)",
            Kind::Burst => "bursty loss (fraction of packets)",
            Kind::Reorder => "reordered (fraction of packets)",
            Kind::Corrupt => "corrupted (fraction of UDP packets)",
            Kind::Dup => "duplicated (fraction of packets)",
            Kind::Delay => "one-way delay (us)",
            Kind::Kill => "loss from the kill on (fraction of packets; 1 = link dead)",
        }
    }

    /// Checks a point's value.
    pub fn check_point(self, x: f64) -> Result<(), String> {
        let ok = match self {
            Kind::Delay => (0.0..=1e6).contains(&x),
            Kind::Burst => (0.0..1.0).contains(&x),
            Kind::Kill => x > 0.0 && x <= 1.0,
            _ => (0.0..=1.0).contains(&x),
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "point {x} is out of range for sweep {}: {}",
                self.name(),
                match self {
                    Kind::Delay => "0 to 1000000 us",
                    Kind::Burst => "a loss rate from 0 up to (not including) 1",
                    Kind::Kill => "a loss rate above 0, up to 1 (the link dead)",
                    _ => "a probability from 0 to 1",
                }
            ))
        }
    }

    /// rmca-impair's SPEC for point `x`, before `base` (the impairments every point shares).
    pub fn spec(self, x: f64, burst_len: f64, base: &str) -> String {
        let own = match self {
            Kind::Loss => format!("loss={x}"),
            Kind::Burst => format!("burst={x}:{burst_len}"),
            Kind::Reorder => format!("reorder={x}:1ms"),
            Kind::Corrupt => format!("corrupt={x}"),
            Kind::Dup => format!("dup={x}"),
            Kind::Delay => format!("delay={x}us"),
            // Before the kill the link has only the base impairments (see `then`).
            Kind::Kill => String::new(),
        };
        // A zero point is the perfect link (a zero burst rate is not a burst model).
        let own = if x == 0.0 { String::new() } else { own };
        [own.as_str(), base]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// What the link becomes at the kill of a kill sweep's point `x`: loss `x` on top of `base`.
pub fn then_spec(x: f64, base: &str) -> String {
    let own = format!("loss={x}");
    if base.is_empty() {
        own
    } else {
        format!("{own},{base}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_and_refusals() {
        assert_eq!(
            Kind::parse("burst").unwrap().spec(0.2, 4.0, "delay=100us"),
            "burst=0.2:4,delay=100us"
        );
        assert_eq!(Kind::Loss.spec(0.0, 4.0, ""), "");
        assert_eq!(Kind::Delay.spec(500.0, 4.0, ""), "delay=500us");
        assert!(Kind::parse("snow")
            .unwrap_err()
            .contains("valid are loss, burst"));
        assert!(Kind::Burst
            .check_point(1.0)
            .unwrap_err()
            .contains("not including"));
        assert!(Kind::Loss.check_point(-0.1).is_err());
        assert!(Kind::Kill.check_point(0.0).unwrap_err().contains("above 0"));
        assert_eq!(Kind::Kill.spec(1.0, 4.0, "delay=1ms"), "delay=1ms");
        assert_eq!(then_spec(1.0, "delay=1ms"), "loss=1,delay=1ms");
    }
}
