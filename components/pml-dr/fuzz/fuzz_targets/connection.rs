//! A connection fed arbitrary packets (length-prefixed chunks of the input), with timers,
//! transmissions and placements in between: must never panic.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use rmca_pml_dr::proto::{Config, Connection, MatchFields, PathConfig, Transmit};

fuzz_target!(|data: &[u8]| {
    let base = Instant::now();
    let mut now = base;
    let paths = [
        PathConfig { btl: 0, max_send_size: 256, need_csum: true },
        PathConfig { btl: 1, max_send_size: 1024, need_csum: false },
    ];
    let mut c = Connection::new(base, Config { window: 4, ..Config::default() }, &paths).unwrap();
    let mut rest = data;
    while rest.len() >= 2 {
        let (ctl, len) = (rest[0], rest[1] as usize);
        rest = &rest[2..];
        match ctl % 4 {
            0 => {
                let _ = c.send_message(now, MatchFields::default(), (len as u64) * 97);
            }
            1 => now += Duration::from_micros(len as u64 * 500),
            2 => c.matched(now, len as u64 % 8),
            _ => {
                let n = len.min(rest.len());
                let (pkt, tail) = rest.split_at(n);
                rest = tail;
                if let Some(a) = c.handle_packet(now, ctl as usize % 3, pkt) {
                    let placed = a.payload.to_vec();
                    let _ = c.placed(now, a.token, &placed);
                }
            }
        }
        if c.poll_timeout().is_some_and(|t| t <= now) {
            c.handle_timeout(now);
        }
        while let Some(t) = c.poll_transmit(now) {
            if let Transmit::Data(d) = t {
                let _ = d.seal(&vec![0u8; d.len]);
                c.local_complete(d.token);
            }
        }
        while c.poll_event().is_some() {}
    }
});
