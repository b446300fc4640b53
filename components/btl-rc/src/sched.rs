//! Multi-QP scheduling (binding, round robin, striping, EPC), sans-IO: which of a peer's QPs
//! carry a fragment.
//!
//! Policies: binding (always the peer's bound QP), round robin, striping (fragments at or
//! above the threshold split evenly over all QPs, smaller ones round robin) and EPC (stripe
//! blocking and collective traffic, round-robin non-blocking traffic), using the PML's
//! [`SendHint`].

use rmca_framework::btl::{CommPattern, SendHint};

/// A multi-QP policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// One QP per peer.
    Binding,
    /// Consecutive fragments on consecutive QPs.
    RoundRobin,
    /// Large fragments split over every QP.
    Striping,
    /// Stripe blocking/collective, round-robin non-blocking.
    Epc,
}

/// Where a fragment goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Whole on one QP.
    One(usize),
    /// Split: `(qp, offset, len)` stripes covering the fragment in order.
    Stripe(Vec<(usize, usize, usize)>),
}

/// One peer's scheduler.
#[derive(Clone, Debug)]
pub struct QpScheduler {
    policy: Policy,
    nqps: usize,
    bound: usize,
    next: usize,
    threshold: usize,
}

impl QpScheduler {
    /// A scheduler over `nqps` QPs; `bound` is the binding policy's QP.
    pub fn new(policy: Policy, nqps: usize, bound: usize, threshold: usize) -> Self {
        let nqps = nqps.max(1);
        Self {
            policy,
            nqps,
            bound: bound % nqps,
            next: 0,
            threshold: threshold.max(1),
        }
    }

    fn rr(&mut self) -> usize {
        let q = self.next;
        self.next = (self.next + 1) % self.nqps;
        q
    }

    fn stripe(&mut self, len: usize) -> Plan {
        let n = self.nqps;
        let base = len / n;
        let extra = len % n;
        let mut off = 0;
        let stripes = (0..n)
            .map(|i| {
                let l = base + usize::from(i < extra);
                let s = (i, off, l);
                off += l;
                s
            })
            .collect();
        Plan::Stripe(stripes)
    }

    /// Plan a fragment of `len` bytes (header included) sent with `hint`.
    pub fn plan(&mut self, len: usize, hint: SendHint) -> Plan {
        if self.nqps == 1 {
            return Plan::One(0);
        }
        let big = len >= self.threshold;
        match self.policy {
            Policy::Binding => Plan::One(self.bound),
            Policy::RoundRobin => Plan::One(self.rr()),
            Policy::Striping if big => self.stripe(len),
            Policy::Striping => Plan::One(self.rr()),
            Policy::Epc => match hint.pattern {
                CommPattern::Blocking | CommPattern::Collective if big => self.stripe(len),
                _ => Plan::One(self.rr()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hint(p: CommPattern) -> SendHint {
        SendHint {
            pattern: p,
            message_len: 0,
        }
    }

    #[test]
    fn epc_stripes_blocking_and_round_robins_nonblocking() {
        let mut s = QpScheduler::new(Policy::Epc, 4, 0, 16 << 10);
        assert!(
            matches!(s.plan(64 << 10, hint(CommPattern::Blocking)), Plan::Stripe(v) if v.len() == 4)
        );
        assert!(matches!(
            s.plan(64 << 10, hint(CommPattern::Collective)),
            Plan::Stripe(_)
        ));
        let qs: Vec<Plan> = (0..4)
            .map(|_| s.plan(64 << 10, hint(CommPattern::NonBlocking)))
            .collect();
        assert_eq!(qs, (0..4).map(Plan::One).collect::<Vec<_>>());
        assert_eq!(s.plan(100, hint(CommPattern::Blocking)), Plan::One(0));
    }

    #[test]
    fn binding_sticks() {
        let mut s = QpScheduler::new(Policy::Binding, 3, 5, 1);
        for _ in 0..5 {
            assert_eq!(s.plan(1 << 20, SendHint::default()), Plan::One(2));
        }
    }

    proptest! {
        #[test]
        fn stripes_cover_exactly(len in 0usize..1_000_000, n in 1usize..9, p in 0u8..4, pat in 0u8..3) {
            let policy = [Policy::Binding, Policy::RoundRobin, Policy::Striping, Policy::Epc][p as usize];
            let pattern = [CommPattern::Blocking, CommPattern::NonBlocking, CommPattern::Collective][pat as usize];
            let mut s = QpScheduler::new(policy, n, 0, 16 << 10);
            match s.plan(len, hint(pattern)) {
                Plan::One(q) => prop_assert!(q < n),
                Plan::Stripe(v) => {
                    prop_assert_eq!(v.len(), n);
                    let mut off = 0;
                    for (i, (q, o, l)) in v.iter().enumerate() {
                        prop_assert_eq!(*q, i);
                        prop_assert_eq!(*o, off);
                        off += l;
                    }
                    prop_assert_eq!(off, len);
                }
            }
        }
    }
}
