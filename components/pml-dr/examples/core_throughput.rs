//! Cost of the DR protocol core alone: two connections joined by a perfect in-memory link
//! (no BTL, no loss), sending N messages of S bytes one way. Prints messages/s and GB/s of the
//! core's own work (header build, CRC32C of header and payload, placement copy, acking), with
//! and without payload checksums, as text and JSON. Usage: core_throughput [N] [S]
use std::collections::VecDeque;
use std::time::Instant;

use rmca_pml_dr::proto::{Config, Connection, MatchFields, PathConfig, Transmit};

fn run(n: u64, size: usize, csum: bool) -> (f64, u64) {
    let t0 = Instant::now();
    let paths = [PathConfig {
        btl: 0,
        max_send_size: 4096,
        need_csum: csum,
        need_ack: csum,
    }];
    let mut a = Connection::new(t0, Config::default(), &paths).unwrap();
    let mut b = Connection::new(t0, Config::default(), &paths).unwrap();
    let src = vec![0x5au8; size];
    let mut dst = vec![0u8; size];
    let mut to_b: VecDeque<Vec<u8>> = VecDeque::new();
    let mut to_a: VecDeque<Vec<u8>> = VecDeque::new();
    let (mut sent, mut done) = (0u64, 0u64);
    let start = Instant::now();
    while done < n {
        let now = Instant::now();
        // Keep a bounded number of messages queued, as an application would.
        while sent < n && sent - done < 64 {
            a.send_message(now, MatchFields::default(), size as u64)
                .unwrap();
            sent += 1;
        }
        while let Some(t) = a.poll_transmit(now) {
            if let Transmit::Data(d) = t {
                let p = &src[d.offset as usize..d.offset as usize + d.len];
                let mut pkt = d.seal(p).unwrap().to_vec();
                pkt.extend_from_slice(p);
                a.local_complete(d.token);
                to_b.push_back(pkt);
            }
        }
        while let Some(pkt) = to_b.pop_front() {
            if let Some(x) = b.handle_packet(now, 0, &pkt) {
                let r = x.offset as usize..x.offset as usize + x.payload.len();
                dst[r.clone()].copy_from_slice(x.payload);
                let _ = b.placed(now, x.token, &dst[r]);
            }
        }
        while let Some(ev) = b.poll_event() {
            if let rmca_pml_dr::proto::Event::IncomingMessage {
                seq, rndv: true, ..
            } = ev
            {
                b.matched(now, seq);
            }
        }
        if b.poll_timeout().is_some_and(|t| t <= now) {
            b.handle_timeout(now);
        }
        while let Some(t) = b.poll_transmit(now) {
            if let Transmit::Ack { bytes, .. } = t {
                to_a.push_back(bytes.to_vec());
            }
        }
        while let Some(pkt) = to_a.pop_front() {
            a.handle_packet(now, 0, &pkt);
        }
        if a.poll_timeout().is_some_and(|t| t <= now) {
            a.handle_timeout(now);
        }
        while let Some(ev) = a.poll_event() {
            if let rmca_pml_dr::proto::Event::SendComplete { .. } = ev {
                done += 1;
            }
        }
    }
    (start.elapsed().as_secs_f64(), a.counters().retransmissions)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let size: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(8);
    let mut json = Vec::new();
    for csum in [false, true] {
        let (secs, retx) = run(n, size, csum);
        let rate = n as f64 / secs;
        let gbs = rate * size as f64 / 1e9;
        println!(
            "core: {n} msgs of {size} B, csum={csum}: {secs:.3} s, {rate:.0} msg/s, {gbs:.3} GB/s, retx={retx}"
        );
        json.push(format!(
            "{{\"msgs\":{n},\"size\":{size},\"csum\":{csum},\"secs\":{secs:.6},\"msg_per_s\":{rate:.0},\"gb_per_s\":{gbs:.4}}}"
        ));
    }
    println!("[{}]", json.join(","));
}
