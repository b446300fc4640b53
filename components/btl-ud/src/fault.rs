//! The path-kill knob, `btl_ud_fault_blackhole_after`: after N fragments sent by this process,
//! every later send is accepted and silently discarded, as if the network path had died (the
//! local send "succeeds", nothing arrives). Unlike the `btl_ud_fault_*` knobs of the soft
//! provider it sits in the module, above the provider, so it works on every provider (rdma
//! included) and lets tests kill ud mid-transfer to exercise pml-dr's failover.

/// Counts sends and says which ones still go out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Blackhole {
    /// Fragments let through before the path "dies" (`None`: never).
    after: Option<u64>,
    passed: u64,
    swallowed: u64,
}

impl Blackhole {
    /// A knob that lets `after` fragments through, then discards every later one (`None`:
    /// never discards).
    pub fn new(after: Option<u64>) -> Self {
        Self {
            after,
            ..Self::default()
        }
    }

    /// Called once per fragment about to be sent: true if it goes out, false if it must be
    /// discarded (and it is counted as such).
    pub fn admit(&mut self) -> bool {
        match self.after {
            Some(n) if self.passed >= n => {
                self.swallowed += 1;
                false
            }
            _ => {
                self.passed += 1;
                true
            }
        }
    }

    /// Fragments discarded so far.
    pub fn swallowed(&self) -> u64 {
        self.swallowed
    }

    /// True once the path has "died".
    pub fn is_dead(&self) -> bool {
        self.after.is_some_and(|n| self.passed >= n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lets_n_through_then_swallows_everything() {
        let mut b = Blackhole::new(Some(3));
        assert!(!b.is_dead());
        assert_eq!((0..3).map(|_| b.admit()).collect::<Vec<_>>(), [true; 3]);
        assert!(b.is_dead());
        assert!((0..100).all(|_| !b.admit()));
        assert_eq!(b.swallowed(), 100);
    }

    #[test]
    fn zero_kills_from_the_start_and_none_never() {
        let mut b = Blackhole::new(Some(0));
        assert!(!b.admit());
        assert_eq!(b.swallowed(), 1);
        let mut b = Blackhole::new(None);
        assert!((0..10_000).all(|_| b.admit()));
        assert_eq!(b.swallowed(), 0);
        assert!(!b.is_dead());
    }
}
