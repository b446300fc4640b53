//! Multi-rail scheduling policies (binding, round robin, striping, EPC), and splitting a byte
//! range by bandwidth weight.

use std::fmt;
use std::str::FromStr;

use rmca_framework::bml::{BtlIndex, Route};
use rmca_framework::btl::CommPattern;

/// How a message's traffic is spread over the BTLs that reach a peer
/// (`pml_ob1_scheduling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Scheduling {
    /// Always the first (best) route.
    Binding,
    /// Whole messages rotate over the routes.
    RoundRobin,
    /// Messages above the stripe threshold are split over every route by bandwidth weight.
    #[default]
    Striping,
    /// EPC (enhanced point-to-point and collective): stripe blocking and collective traffic,
    /// round-robin non-blocking traffic.
    Epc,
}

impl Scheduling {
    /// Every policy's parameter value.
    pub const NAMES: [&'static str; 4] = ["binding", "round_robin", "striping", "epc"];

    /// The parameter value.
    pub fn name(self) -> &'static str {
        match self {
            Scheduling::Binding => "binding",
            Scheduling::RoundRobin => "round_robin",
            Scheduling::Striping => "striping",
            Scheduling::Epc => "epc",
        }
    }

    /// The effective policy for one message: EPC resolves to striping or round robin.
    pub fn for_pattern(self, pattern: CommPattern) -> Scheduling {
        match (self, pattern) {
            (Scheduling::Epc, CommPattern::NonBlocking) => Scheduling::RoundRobin,
            (Scheduling::Epc, _) => Scheduling::Striping,
            (s, _) => s,
        }
    }
}

impl fmt::Display for Scheduling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scheduling {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "binding" => Ok(Scheduling::Binding),
            "round_robin" => Ok(Scheduling::RoundRobin),
            "striping" => Ok(Scheduling::Striping),
            "epc" => Ok(Scheduling::Epc),
            other => Err(format!(
                "pml_ob1_scheduling: '{other}' is not a policy (valid: {})",
                Scheduling::NAMES.join(", ")
            )),
        }
    }
}

/// Choose the routes a message uses: `cursor` is the peer's round-robin position (advanced
/// when the policy rotates), `max` bounds the number of routes used for one message.
pub fn choose(
    policy: Scheduling,
    routes: &[Route],
    len: usize,
    threshold: usize,
    max: usize,
    cursor: &mut usize,
) -> Vec<Route> {
    if routes.is_empty() {
        return Vec::new();
    }
    match policy {
        Scheduling::Binding | Scheduling::Epc => vec![Route {
            btl: routes[0].btl,
            weight: 1.0,
        }],
        Scheduling::RoundRobin => {
            let r = routes[*cursor % routes.len()];
            *cursor = cursor.wrapping_add(1);
            vec![Route {
                btl: r.btl,
                weight: 1.0,
            }]
        }
        Scheduling::Striping => {
            if len <= threshold || routes.len() == 1 {
                vec![Route {
                    btl: routes[0].btl,
                    weight: 1.0,
                }]
            } else {
                let mut v: Vec<Route> = routes.iter().take(max.max(1)).copied().collect();
                let total: f64 = v.iter().map(|r| r.weight).sum();
                for r in &mut v {
                    r.weight = if total > 0.0 {
                        r.weight / total
                    } else {
                        1.0 / routes.len() as f64
                    };
                }
                v
            }
        }
    }
}

/// A contiguous share of a message assigned to one BTL, consumed from `next` to `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The BTL carrying it.
    pub btl: BtlIndex,
    /// Index of the route in the chosen list (e.g. which RGET key to use).
    pub route: usize,
    /// Next byte to move.
    pub next: usize,
    /// One past the last byte.
    pub end: usize,
}

/// Split `start..end` over `routes` in proportion to their weights; every byte is assigned
/// exactly once and empty shares are omitted.
pub fn split(routes: &[Route], start: usize, end: usize) -> Vec<Segment> {
    let total = end.saturating_sub(start);
    let mut out = Vec::with_capacity(routes.len());
    let mut at = start;
    for (i, r) in routes.iter().enumerate() {
        let share = if i + 1 == routes.len() {
            end - at
        } else {
            ((total as f64 * r.weight) as usize).min(end - at)
        };
        if share > 0 {
            out.push(Segment {
                btl: r.btl,
                route: i,
                next: at,
                end: at + share,
            });
        }
        at += share;
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn routes(ws: &[f64]) -> Vec<Route> {
        let t: f64 = ws.iter().sum();
        ws.iter()
            .enumerate()
            .map(|(i, w)| Route {
                btl: i,
                weight: w / t,
            })
            .collect()
    }

    #[test]
    fn policies_pick_routes() {
        let r = routes(&[3.0, 1.0]);
        let mut c = 0;
        assert_eq!(
            choose(Scheduling::Binding, &r, 1 << 20, 16384, 4, &mut c).len(),
            1
        );
        let a = choose(Scheduling::RoundRobin, &r, 10, 16384, 4, &mut c)[0].btl;
        let b = choose(Scheduling::RoundRobin, &r, 10, 16384, 4, &mut c)[0].btl;
        assert_ne!(a, b);
        assert_eq!(
            choose(Scheduling::Striping, &r, 100, 16384, 4, &mut c).len(),
            1
        );
        assert_eq!(
            choose(Scheduling::Striping, &r, 1 << 20, 16384, 4, &mut c).len(),
            2
        );
        assert_eq!(
            choose(Scheduling::Striping, &r, 1 << 20, 16384, 1, &mut c).len(),
            1
        );
        assert_eq!(
            Scheduling::Epc.for_pattern(CommPattern::NonBlocking),
            Scheduling::RoundRobin
        );
        assert_eq!(
            Scheduling::Epc.for_pattern(CommPattern::Collective),
            Scheduling::Striping
        );
        assert_eq!("epc".parse::<Scheduling>(), Ok(Scheduling::Epc));
        assert!("stripe"
            .parse::<Scheduling>()
            .unwrap_err()
            .contains("striping"));
    }

    proptest! {
        #[test]
        fn split_covers_every_byte_once(ws in proptest::collection::vec(0.01f64..10.0, 1..5), start in 0usize..1000, len in 0usize..100_000) {
            let segs = split(&routes(&ws), start, start + len);
            let mut at = start;
            for s in &segs {
                prop_assert_eq!(s.next, at);
                prop_assert!(s.end > s.next);
                at = s.end;
            }
            prop_assert_eq!(at, start + len);
        }
    }
}
