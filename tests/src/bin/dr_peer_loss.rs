//! A peer lost in the middle of a transfer while the others are blocked receiving from it.
//!
//! `rmca-run -n N dr_peer_loss freeze|abort`: rank 1 exchanges a few warm-up messages with every
//! rank (so RTTs are known), then starts sending each of them a 16 MiB message, pushes a few ms of it
//! and is lost: `freeze` stops the process (SIGSTOP: to the network a frozen peer is exactly a
//! dead one, but the launcher sees no exit, so what ends the job is the survivors' own
//! detection), `abort` kills it outright (the launcher tears the job down).
//!
//! The other ranks sit in a blocking receive from rank 1. When that receive fails they print
//! `peer-loss detected after <ms> ms: <error>` and exit 3; a receive that succeeds exits 4.

use std::process::{exit, Command};
use std::time::{Duration, Instant};

const BIG: usize = 16 << 20;

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if mode != "freeze" && mode != "abort" {
        eprintln!("dr_peer_loss: argument must be freeze or abort, not {mode:?}");
        exit(2);
    }
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("dr_peer_loss: rmca init failed: {e}");
        exit(1)
    });
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    if n < 2 {
        eprintln!("dr_peer_loss: needs at least 2 ranks");
        exit(2);
    }
    // Warm-up: a few round trips between rank 1 and every other rank.
    let mut word = [0u64; 1];
    for i in 0..20u64 {
        if me == 1 {
            for p in (0..n).filter(|&p| p != 1) {
                world.send(&[i], p, 1).expect("warm-up send");
                world.recv(&mut word, p, 1).expect("warm-up recv");
            }
        } else {
            world.recv(&mut word, 1, 1).expect("warm-up recv");
            world.send(&word, 1, 1).expect("warm-up send");
        }
    }
    if me == 1 {
        let data = vec![0x5au8; BIG];
        rmca::scope(|s| {
            let mut reqs: Vec<_> = (0..n)
                .filter(|&p| p != 1)
                .map(|p| world.isend(s, &data, p, 2).expect("isend"))
                .collect();
            // Drive the transfers for a moment so the loss happens mid-message.
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(2) {
                for r in &mut reqs {
                    let _ = r.test();
                }
            }
            eprintln!("dr_peer_loss: rank 1 lost now ({mode})");
            if mode == "abort" {
                std::process::abort();
            }
            // The shell's kill builtin: no extra package and no unsafe here.
            let me_pid = std::process::id().to_string();
            let _ = Command::new("sh")
                .args(["-c", &format!("kill -STOP {me_pid}")])
                .status();
            // Only reached if someone resumes us; the job is being torn down by then.
            std::mem::forget(reqs);
            exit(5);
        });
    }
    let mut buf = vec![0u8; BIG];
    let t = Instant::now();
    match world.recv(&mut buf, 1, 2) {
        Ok(st) => {
            println!("rank {me}: receive from the lost peer succeeded ({st:?})");
            exit(4);
        }
        Err(e) => {
            println!(
                "rank {me}: peer-loss detected after {} ms: {e}",
                t.elapsed().as_millis()
            );
            exit(3);
        }
    }
}
