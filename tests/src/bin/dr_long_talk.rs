//! A large blocking transfer, then the pair keeps talking for longer than pml dr's watchdog.
//!
//! `rmca-run -n 2 dr_long_talk MIB SECONDS`: rank 0 sends MIB MiB to rank 1 (checked byte for
//! byte), then both run an allreduce every 50 ms for SECONDS. The tail of a large message fills
//! a shared-memory ring, which is where a held-back fragment once left a local completion
//! pending, and the watchdog failed the only path to a live peer a few seconds later. Prints
//! `rank R: talked N rounds` and exits 0, or names the failure and exits 1. Rank 0's clock
//! decides when the talk ends (both ranks do the same rounds).

use std::process::exit;
use std::time::{Duration, Instant};

use rmca::coll::Op;

fn main() {
    let arg = |i: usize, default: u64| -> u64 {
        std::env::args()
            .nth(i)
            .map(|s| {
                s.parse().unwrap_or_else(|_| {
                    eprintln!("dr_long_talk: argument {i} must be a whole number, not {s:?}");
                    exit(2)
                })
            })
            .unwrap_or(default)
    };
    let (mib, seconds) = (arg(1, 64) as usize, arg(2, 8));
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("dr_long_talk: rmca init failed: {e}");
        exit(1)
    });
    let world = universe.world();
    let me = world.rank();
    if world.size() != 2 {
        eprintln!("dr_long_talk: needs exactly 2 ranks");
        exit(2);
    }
    let fill = |i: usize| (i.wrapping_mul(31) ^ (i >> 12)) as u8;
    let mut big = vec![0u8; mib << 20];
    if me == 0 {
        big.iter_mut().enumerate().for_each(|(i, b)| *b = fill(i));
        if let Err(e) = world.send(&big, 1, 7) {
            eprintln!("rank 0: large send failed: {e}");
            exit(1);
        }
    } else {
        if let Err(e) = world.recv(&mut big, 0, 7) {
            eprintln!("rank 1: large receive failed: {e}");
            exit(1);
        }
        if let Some(i) = (0..big.len()).find(|&i| big[i] != fill(i)) {
            eprintln!("rank 1: byte {i} of the large message differs");
            exit(1);
        }
    }
    let start = Instant::now();
    let mut rounds = 0u64;
    loop {
        // Rank 0's clock alone decides when to stop, and every round carries its decision:
        // with a clock per rank, one rank could leave the loop while the other (which finished
        // the transfer a retransmission later) entered one more allreduce, alone.
        let go = u64::from(me == 0 && start.elapsed() < Duration::from_secs(seconds));
        let mut sum = [0u64; 2];
        if let Err(e) = world.allreduce(&[1u64, go], &mut sum, Op::Sum) {
            eprintln!("rank {me}: allreduce failed after {rounds} rounds: {e}");
            exit(1);
        }
        if sum[0] != 2 {
            eprintln!("rank {me}: allreduce gave {} instead of 2", sum[0]);
            exit(1);
        }
        if sum[1] == 0 {
            break;
        }
        rounds += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("rank {me}: talked {rounds} rounds");
}
