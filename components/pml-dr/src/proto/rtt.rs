//! Round-trip-time estimation and retransmission timeout (RFC 6298, with QUIC's use of the
//! receiver-reported ack delay and of unambiguous samples).

use std::time::Duration;

/// Smoothed RTT state for one path.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    latest: Duration,
    min: Duration,
    initial: Duration,
}

impl RttEstimator {
    /// A fresh estimator that reports `initial` until the first sample.
    pub fn new(initial: Duration) -> Self {
        Self {
            srtt: None,
            rttvar: initial / 2,
            latest: initial,
            min: Duration::MAX,
            initial,
        }
    }

    /// Feeds one unambiguous sample. `ack_delay` (reported by the receiver) is subtracted when
    /// that does not take the sample below the minimum RTT seen, as in RFC 9002.
    pub fn update(&mut self, sample: Duration, ack_delay: Duration) {
        self.min = self.min.min(sample);
        let adjusted = if sample >= self.min + ack_delay {
            sample - ack_delay
        } else {
            sample
        };
        self.latest = adjusted;
        match self.srtt {
            None => {
                self.srtt = Some(adjusted);
                self.rttvar = adjusted / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(adjusted);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((srtt * 7 + adjusted) / 8);
            }
        }
    }

    /// Smoothed RTT (the initial value before any sample).
    pub fn srtt(&self) -> Duration {
        self.srtt.unwrap_or(self.initial)
    }

    /// True once at least one sample was taken.
    pub fn has_sample(&self) -> bool {
        self.srtt.is_some()
    }

    /// Latest (ack-delay adjusted) sample.
    pub fn latest(&self) -> Duration {
        self.latest
    }

    /// Smallest sample seen (`None` before the first).
    pub fn min(&self) -> Option<Duration> {
        self.srtt.map(|_| self.min)
    }

    /// RTT variation.
    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }

    /// srtt + 4 rttvar (at least `granularity` for the variance term), clamped to
    /// `[floor, cap]`. The caller applies exponential backoff on top (and the cap again).
    pub fn rto(&self, granularity: Duration, floor: Duration, cap: Duration) -> Duration {
        let raw = self.srtt() + (self.rttvar * 4).max(granularity);
        raw.clamp(floor, cap.max(floor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn first_sample_sets_srtt_and_half_var() {
        let mut r = RttEstimator::new(100 * MS);
        assert!(!r.has_sample());
        r.update(10 * MS, Duration::ZERO);
        assert_eq!(r.srtt(), 10 * MS);
        assert_eq!(r.rttvar(), 5 * MS);
        assert_eq!(r.rto(MS, MS, 1000 * MS), 30 * MS);
    }

    #[test]
    fn smoothing_and_clamping() {
        let mut r = RttEstimator::new(100 * MS);
        r.update(10 * MS, Duration::ZERO);
        r.update(18 * MS, Duration::ZERO);
        // srtt = (7*10 + 18)/8 = 11; rttvar = (3*5 + 8)/4 = 5.75
        assert_eq!(r.srtt(), 11 * MS);
        assert_eq!(r.rttvar(), Duration::from_micros(5750));
        assert_eq!(r.rto(MS, 50 * MS, 1000 * MS), 50 * MS, "floor");
        assert_eq!(r.rto(MS, MS, 20 * MS), 20 * MS, "cap");
    }

    #[test]
    fn ack_delay_is_subtracted_but_not_below_min_rtt() {
        let mut r = RttEstimator::new(100 * MS);
        r.update(10 * MS, 8 * MS); // first sample: min = 10, 10 < 10 + 8: not subtracted
        assert_eq!(r.latest(), 10 * MS);
        r.update(20 * MS, 5 * MS); // 20 >= 10 + 5: subtracted
        assert_eq!(r.latest(), 15 * MS);
    }
}
