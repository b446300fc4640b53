//! A token travels around the ring `laps` times; each hop adds one, and rank 0 checks the
//! count after every lap.
//!
//! `rmca-run -n 4 target/release/examples/ring [laps]`

use std::process::exit;

fn main() {
    let laps: u64 = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 1000,
        Some(Ok(l)) => l,
        Some(Err(e)) => {
            eprintln!("ring: laps must be a number: {e}");
            exit(2);
        }
    };
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("ring: rmca init failed: {e}");
        exit(1)
    });
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
    let n = size as u64;
    let start = std::time::Instant::now();
    let mut token = [0u64; 2]; // [hops so far, lap]
    for lap in 0..laps {
        if rank == 0 {
            token = [lap * n, lap];
            token[0] += 1;
            if size > 1 {
                world.send(&token, next, 1).expect("send");
                world.recv(&mut token, prev, 1).expect("recv");
            }
            if token != [(lap + 1) * n, lap] {
                eprintln!(
                    "ring: lap {lap}: token {token:?}, expected [{}, {lap}]",
                    (lap + 1) * n
                );
                universe.abort(3, "corrupt token");
            }
        } else {
            world.recv(&mut token, prev, 1).expect("recv");
            token[0] += 1;
            world.send(&token, next, 1).expect("send");
        }
    }
    if rank == 0 {
        let el = start.elapsed();
        let hops = laps * n;
        println!(
            "ring: {laps} laps over {size} ranks OK ({hops} hops, {:.2} us per hop)",
            el.as_secs_f64() * 1e6 / hops.max(1) as f64
        );
    }
}
