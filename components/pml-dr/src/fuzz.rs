//! Bodies of the fuzz targets, shared by the cargo-fuzz targets in `fuzz/` (nightly,
//! coverage-guided) and the bounded stable runner `tests/fuzz.rs` that the test script runs.
//! Each body must never panic, whatever the bytes.

use std::time::{Duration, Instant};

use crate::proto::wire::{self, AckPacket, DataPacket, Repr, ACK_LEN, DATA_HEADER_LEN};
use crate::proto::{Config, Connection, MatchFields, PathConfig, Transmit};

/// The `parse` target: every parser on arbitrary bytes; what parses must re-emit identically.
pub fn parse(data: &[u8]) {
    let _ = wire::peek_type(data);
    if let Ok(p) = DataPacket::new_checked(data) {
        let _ = p.payload();
    }
    let _ = AckPacket::new_checked(data);
    match wire::parse(data) {
        Ok(Repr::Data(r)) => {
            let mut h = [0u8; DATA_HEADER_LEN];
            r.emit(&mut h);
            assert_eq!(&h[..], &data[..DATA_HEADER_LEN]);
        }
        Ok(Repr::Ack(r)) => assert_eq!(&r.to_bytes()[..], &data[..ACK_LEN]),
        Err(_) => {}
    }
}

/// The BTL paths of the connection under fuzz: (index, largest fragment, needs checksums).
pub const CONNECTION_PATHS: [PathConfig; 2] = [
    PathConfig {
        btl: 0,
        max_send_size: 256,
        need_csum: true,
        need_ack: true,
    },
    PathConfig {
        btl: 1,
        max_send_size: 1024,
        need_csum: false,
        need_ack: false,
    },
];

/// The window of the connection under fuzz (small, so that it fills up).
pub const CONNECTION_WINDOW: usize = 4;

/// One connection driven by the ops of a `connection` input; also used by input generators
/// as a replica of the target, to learn what it transmits (and so craft valid replies).
#[derive(Debug)]
pub struct ConnectionHarness {
    c: Connection,
    now: Instant,
    sent: Vec<(usize, Vec<u8>)>,
}

impl Default for ConnectionHarness {
    fn default() -> Self {
        Self::new()
    }
}

impl ConnectionHarness {
    /// A fresh connection with [`CONNECTION_PATHS`] and [`CONNECTION_WINDOW`].
    pub fn new() -> Self {
        let now = Instant::now();
        let cfg = Config {
            window: CONNECTION_WINDOW,
            ..Config::default()
        };
        let c = Connection::new(now, cfg, &CONNECTION_PATHS).expect("valid fuzz configuration");
        Self {
            c,
            now,
            sent: Vec::new(),
        }
    }

    /// The harness's clock (it starts at creation and moves only with op 1).
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The connection.
    pub fn connection(&self) -> &Connection {
        &self.c
    }

    /// One op: `ctl % 4` selects it: 0 sends a message of `arg * 97` bytes, 1 advances the
    /// clock by `arg * 500` µs, 2 matches message `arg % 8`, 3 feeds `packet` as received on
    /// BTL `ctl % 3` (and places what it carries). Then timers fire, transmissions are sealed
    /// (zero payload) and completed, and events are drained.
    pub fn step(&mut self, ctl: u8, arg: u8, packet: &[u8]) {
        let (c, now) = (&mut self.c, self.now);
        match ctl % 4 {
            0 => {
                let _ = c.send_message(now, MatchFields::default(), u64::from(arg) * 97);
            }
            1 => self.now += Duration::from_micros(u64::from(arg) * 500),
            2 => c.matched(now, u64::from(arg) % 8),
            _ => {
                if let Some(a) = c.handle_packet(now, usize::from(ctl) % 3, packet) {
                    let placed = a.payload.to_vec();
                    let _ = c.placed(now, a.token, &placed);
                }
            }
        }
        let (c, now) = (&mut self.c, self.now);
        if c.poll_timeout().is_some_and(|t| t <= now) {
            c.handle_timeout(now);
        }
        while let Some(t) = c.poll_transmit(now) {
            match t {
                Transmit::Data(d) => {
                    let payload = vec![0u8; d.len];
                    if let Ok(h) = d.seal(&payload) {
                        let mut pkt = h.to_vec();
                        pkt.extend_from_slice(&payload);
                        self.sent.push((d.btl, pkt));
                    }
                    c.local_complete(d.token);
                }
                Transmit::Ack { btl, bytes } => self.sent.push((btl, bytes.to_vec())),
            }
        }
        while c.poll_event().is_some() {}
    }

    /// The packets transmitted since the last call, as (BTL index, bytes).
    pub fn take_sent(&mut self) -> Vec<(usize, Vec<u8>)> {
        std::mem::take(&mut self.sent)
    }
}

/// The `connection` target: a connection fed arbitrary ops (see [`ConnectionHarness::step`]):
/// pairs `(ctl, arg)`, followed for op 3 by a packet of `arg` bytes. Must never panic.
pub fn connection(data: &[u8]) {
    let mut h = ConnectionHarness::new();
    let mut rest = data;
    while rest.len() >= 2 {
        let (ctl, arg) = (rest[0], rest[1]);
        rest = &rest[2..];
        let packet = if ctl % 4 == 3 {
            let (p, tail) = rest.split_at(usize::from(arg).min(rest.len()));
            rest = tail;
            p
        } else {
            &[]
        };
        h.step(ctl, arg, packet);
        h.sent.clear();
    }
}
