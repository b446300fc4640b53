//! A job whose launcher is killed mid-run, for `tests/tests/shm_crash.rs`: after traffic over
//! btl shm between every pair, each rank prints `running rank R prefix P` (P: the job's
//! shared-memory prefix), then rank 0 computes without calling rmca at all while the others keep
//! talking in pairs (a rank without a partner waits in a receive from rank 0). Nothing here
//! ends: only the launcher's death does (bounded by a deadline so that a failed test leaves no
//! process behind). Arguments are ignored (tests put a marker there to find the processes).

use std::time::{Duration, Instant};

/// Longer than any test waits; reaching it means the launcher's death did not end the rank.
const DEADLINE: Duration = Duration::from_secs(120);

fn main() {
    let t0 = Instant::now();
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("launcher_loss: init: {e}");
        std::process::exit(1)
    });
    let w = universe.world();
    let (me, n) = (w.rank(), w.size());
    let (_, btls) = universe.components();
    if n < 2 || !btls.iter().any(|b| b == "shm") {
        eprintln!("launcher_loss: needs 2 ranks or more over btl shm (btls {btls:?}, {n} ranks)");
        std::process::exit(2);
    }
    // Every rank maps every other rank's segment.
    for round in 0..20u64 {
        for peer in (0..n).filter(|&p| p != me) {
            let mut got = [0u64; 2];
            w.sendrecv(&[round, me as u64], peer, 1, &mut got, peer, 1)
                .expect("sendrecv");
            assert_eq!(got, [round, peer as u64]);
        }
    }
    w.barrier().expect("barrier");
    let job = std::env::var("RMCA_JOB_ID").expect("RMCA_JOB_ID set by rmca-run");
    println!("running rank {me} prefix rmca-{job}-");
    if me == 0 {
        // A long computation: no progress, no system call, only the signal can stop it.
        let mut x = 1u64;
        while t0.elapsed() < DEADLINE {
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
            }
        }
        std::process::exit(4);
    }
    let partner = if me % 2 == 1 { me + 1 } else { me - 1 };
    if partner >= n {
        let mut x = [0u8; 8];
        let _ = w.recv(&mut x, 0, 2);
        std::process::exit(4);
    }
    let mut i = 0u64;
    while t0.elapsed() < DEADLINE {
        let mut got = [0u64; 1];
        w.sendrecv(&[i], partner, 3, &mut got, partner, 3)
            .expect("sendrecv");
        assert_eq!(got, [i]);
        i += 1;
    }
    std::process::exit(4);
}
