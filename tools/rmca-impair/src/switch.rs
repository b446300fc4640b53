//! The emulated network, sans I/O: ports (one per node, each with its address), one impaired
//! [`Direction`] per ordered pair of ports, and the packets in flight. The I/O loop offers
//! each packet read from a port with [`Switch::offer`], writes what [`Switch::poll_transmit`]
//! hands back, and sleeps until [`Switch::poll_timeout`].

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::Ipv4Addr;

use serde::Serialize;

use crate::model::{Counters, Direction, PacketInfo, Verdict};
use crate::packet::{corrupt_udp, Ipv4Header};
use crate::rng::mix64;
use crate::spec::Impairment;

/// Packets the switch could not carry, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SwitchCounters {
    /// Not IPv4, or a malformed header (IPv6 router solicitations and the like).
    pub unparsable: u64,
    /// Destination is no port's address.
    pub no_route: u64,
}

/// A packet in flight: due time, then arrival order (FIFO among equal times).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at_ns: u64,
    seq: u64,
    port: usize,
    data: Vec<u8>,
}

/// The seed of direction `from -> to` given the run's seed: independent streams per direction.
pub fn direction_seed(seed: u64, from: usize, to: usize) -> u64 {
    mix64(mix64(seed ^ 0x696d_7061_6972) ^ ((from as u64) << 32 | to as u64))
}

/// Ports, directions and packets in flight.
#[derive(Debug)]
pub struct Switch {
    addrs: Vec<Ipv4Addr>,
    /// Direction `from -> to` at `from * ports + to`.
    dirs: Vec<Direction>,
    flight: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    counters: SwitchCounters,
}

impl Switch {
    /// A switch whose port `i` has address `addrs[i]`, every direction applying `imp(from, to)`
    /// with its own stream drawn from `seed`.
    pub fn new(addrs: Vec<Ipv4Addr>, seed: u64, imp: impl Fn(usize, usize) -> Impairment) -> Self {
        let n = addrs.len();
        let dirs = (0..n * n)
            .map(|k| {
                let (from, to) = (k / n, k % n);
                Direction::new(imp(from, to), direction_seed(seed, from, to))
            })
            .collect();
        Self {
            addrs,
            dirs,
            flight: BinaryHeap::new(),
            seq: 0,
            counters: SwitchCounters::default(),
        }
    }

    /// From now on every direction applies `imp(from, to)` (counters and streams kept).
    pub fn set_impairments(&mut self, imp: impl Fn(usize, usize) -> Impairment) {
        let n = self.ports();
        for (k, d) in self.dirs.iter_mut().enumerate() {
            d.set_impairment(imp(k / n, k % n));
        }
    }

    /// Number of ports.
    pub fn ports(&self) -> usize {
        self.addrs.len()
    }

    /// Takes a packet read from port `from` at `now_ns`.
    pub fn offer(&mut self, now_ns: u64, from: usize, data: &[u8]) {
        let h = match Ipv4Header::parse(data) {
            Ok(h) => h,
            Err(_) => {
                self.counters.unparsable += 1;
                return;
            }
        };
        let Some(to) = self.addrs.iter().position(|a| *a == h.dst) else {
            self.counters.no_route += 1;
            return;
        };
        let n = self.ports();
        let info = PacketInfo {
            len: h.total_len,
            corruptible: h.corruptible(),
        };
        if let Verdict::Deliver(emits) = self.dirs[from * n + to].decide(now_ns, &info) {
            for e in emits {
                let mut copy = data[..h.total_len].to_vec();
                if !e.flips.is_empty() {
                    // The flips lie within the header's own corruptible range.
                    corrupt_udp(&mut copy, &e.flips).expect("flips within the packet");
                }
                self.seq += 1;
                self.flight.push(Reverse(InFlight {
                    at_ns: e.at_ns,
                    seq: self.seq,
                    port: to,
                    data: copy,
                }));
            }
        }
    }

    /// The next packet due by `now_ns`, with the port to write it to.
    pub fn poll_transmit(&mut self, now_ns: u64) -> Option<(usize, Vec<u8>)> {
        if self.flight.peek()?.0.at_ns > now_ns {
            return None;
        }
        let Reverse(p) = self.flight.pop()?;
        Some((p.port, p.data))
    }

    /// When the next packet in flight is due.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.flight.peek().map(|p| p.0.at_ns)
    }

    /// Packets in flight.
    pub fn in_flight(&self) -> usize {
        self.flight.len()
    }

    /// The switch's own counters.
    pub fn counters(&self) -> &SwitchCounters {
        &self.counters
    }

    /// Direction `from -> to`.
    pub fn direction(&self, from: usize, to: usize) -> &Direction {
        &self.dirs[from * self.ports() + to]
    }

    /// Counters of every direction that saw a packet or is impaired, as JSON.
    pub fn report(&self, names: &[String]) -> serde_json::Value {
        let n = self.ports();
        let mut dirs = Vec::new();
        for from in 0..n {
            for to in 0..n {
                let d = self.direction(from, to);
                if from == to
                    || (d.counters() == &Counters::default() && d.impairment().is_perfect())
                {
                    continue;
                }
                dirs.push(serde_json::json!({
                    "from": names.get(from).cloned().unwrap_or_else(|| from.to_string()),
                    "to": names.get(to).cloned().unwrap_or_else(|| to.to_string()),
                    "impairment": d.impairment().to_string(),
                    "counters": d.counters(),
                }));
            }
        }
        serde_json::json!({
            "directions": dirs,
            "switch": self.counters,
            "in_flight": self.in_flight(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp_to(dst: [u8; 4], tag: u8) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&40u16.to_be_bytes());
        p[9] = 17;
        p[16..20].copy_from_slice(&dst);
        p[20 + 4..20 + 6].copy_from_slice(&20u16.to_be_bytes());
        p[39] = tag;
        p
    }

    #[test]
    fn routes_by_destination_with_each_direction_impaired_on_its_own() {
        let addrs = vec![Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)];
        let mut s = Switch::new(addrs, 1, |from, _| {
            Impairment::parse(if from == 0 { "delay=1ms" } else { "loss=1" }).unwrap()
        });
        s.offer(0, 0, &udp_to([10, 0, 0, 2], 7));
        s.offer(0, 1, &udp_to([10, 0, 0, 1], 8));
        s.offer(0, 1, &udp_to([10, 0, 0, 9], 9));
        s.offer(0, 1, &[0x60; 40]);
        assert_eq!(s.poll_timeout(), Some(1_000_000));
        assert_eq!(s.poll_transmit(999_999), None);
        let (port, data) = s.poll_transmit(1_000_000).unwrap();
        assert_eq!((port, data[39]), (1, 7));
        assert_eq!(s.poll_transmit(u64::MAX), None);
        assert_eq!(s.direction(1, 0).counters().lost, 1);
        assert_eq!(
            s.counters(),
            &SwitchCounters {
                unparsable: 1,
                no_route: 1
            }
        );
        let r = s.report(&["a".into(), "b".into()]);
        assert_eq!(r["directions"].as_array().unwrap().len(), 2, "{r}");
    }

    #[test]
    fn equal_due_times_leave_in_arrival_order() {
        let addrs = vec![Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)];
        let mut s = Switch::new(addrs, 1, |_, _| Impairment::default());
        for tag in 0..50 {
            s.offer(5, 0, &udp_to([10, 0, 0, 2], tag));
        }
        let tags: Vec<u8> = std::iter::from_fn(|| s.poll_transmit(5).map(|(_, d)| d[39])).collect();
        assert_eq!(tags, (0..50).collect::<Vec<u8>>());
    }

    #[test]
    fn a_change_of_impairment_applies_from_then_on_and_keeps_the_counters() {
        let addrs = vec![Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)];
        let mut s = Switch::new(addrs, 1, |_, _| Impairment::default());
        s.offer(0, 0, &udp_to([10, 0, 0, 2], 1));
        s.set_impairments(|_, _| Impairment::parse("loss=1").unwrap());
        for tag in 2..10 {
            s.offer(1, 0, &udp_to([10, 0, 0, 2], tag));
        }
        let got: Vec<u8> = std::iter::from_fn(|| s.poll_transmit(9).map(|(_, d)| d[39])).collect();
        assert_eq!(got, vec![1]);
        let c = s.direction(0, 1).counters();
        assert_eq!((c.packets, c.delivered, c.lost), (9, 1, 8));
    }
}
