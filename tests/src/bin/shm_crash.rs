//! A rank killed by SIGKILL mid-job, for `tests/tests/shm_crash.rs`: after traffic over btl shm,
//! rank 0 lists the job's `/dev/shm` files (`segments N`), then the last rank kills itself while
//! the others wait for a message it will never send. Only the launcher can clean up after it.
//!
//! Prints `prefix P` (the job's shared-memory prefix) and `segments N` on rank 0.

use std::process::Command;

fn main() {
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("shm_crash: init: {e}");
        std::process::exit(1)
    });
    let w = universe.world();
    let (me, n) = (w.rank(), w.size());
    assert!(n >= 2, "shm_crash needs at least 2 ranks");
    let (_, btls) = universe.components();
    if !btls.iter().any(|b| b == "shm") {
        eprintln!("shm_crash: btl shm is not in use ({btls:?})");
        std::process::exit(2);
    }
    // Traffic through every ring: each rank sends to each other rank.
    for round in 0..100u64 {
        for peer in (0..n).filter(|&p| p != me) {
            let v = [round, me as u64];
            let mut got = [0u64; 2];
            let st = w
                .sendrecv(&v, peer, 1, &mut got, peer, 1)
                .expect("sendrecv");
            assert_eq!((got, st.source), ([round, peer as u64], peer));
        }
    }
    w.barrier().expect("barrier");
    if me == 0 {
        let job = std::env::var("RMCA_JOB_ID").expect("RMCA_JOB_ID set by rmca-run");
        let prefix = format!("rmca-{job}-");
        let count = std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                    .count()
            })
            .unwrap_or(0);
        println!("prefix {prefix}");
        println!("segments {count}");
    }
    w.barrier().expect("barrier");
    if me == n - 1 {
        let pid = std::process::id().to_string();
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
        // Not reached: the signal is delivered before kill(1) returns to the shell's caller.
        std::process::exit(5);
    }
    // Mid-job: wait for a message the killed rank will never send.
    let mut x = [0u8; 8];
    let _ = w.recv(&mut x, n - 1, 2);
    std::process::exit(4);
}
