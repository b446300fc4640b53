//! Ping-pong between ranks 0 and 1 over a range of sizes; prints one-way latency and
//! bandwidth. Other ranks (if any) idle.
//!
//! `rmca-run -n 2 target/release/examples/pingpong [iterations]`

use std::process::exit;
use std::time::Instant;

fn main() {
    let iters: usize = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 1000,
        Some(Ok(i)) if i > 0 => i,
        _ => {
            eprintln!("pingpong: iterations must be a positive number");
            exit(2);
        }
    };
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("pingpong: rmca init failed: {e}");
        exit(1)
    });
    let world = universe.world();
    if world.size() < 2 {
        eprintln!("pingpong: needs at least 2 ranks");
        exit(2);
    }
    let rank = world.rank();
    if rank == 0 {
        println!("{:>10} {:>12} {:>12}", "bytes", "latency_us", "MB/s");
    }
    let mut size = 0usize;
    while size <= 1 << 20 {
        let mut buf = vec![(size % 251) as u8; size];
        let warmup = iters / 10 + 1;
        let mut t0 = Instant::now();
        for i in 0..warmup + iters {
            if i == warmup {
                t0 = Instant::now();
            }
            if rank == 0 {
                world.send(&buf, 1, 0).expect("send");
                world.recv(&mut buf, 1, 0).expect("recv");
            } else if rank == 1 {
                world.recv(&mut buf, 0, 0).expect("recv");
                world.send(&buf, 0, 0).expect("send");
            }
        }
        if rank == 0 {
            if buf.iter().any(|&b| b != (size % 251) as u8) {
                universe.abort(3, "pingpong: payload corrupted");
            }
            let one_way = t0.elapsed().as_secs_f64() / (2 * iters) as f64;
            println!(
                "{size:>10} {:>12.3} {:>12.1}",
                one_way * 1e6,
                size as f64 / one_way / 1e6
            );
        }
        size = if size == 0 { 1 } else { size * 4 };
    }
}
