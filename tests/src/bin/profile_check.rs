//! A job with a known traffic plan, for `tests/tests/profile.rs` (`--mca profile 1`): rank 0
//! sends [`PLAN`] to rank 1, which lets the first ones arrive before posting any receive (so
//! they are unexpected), then receives everything and checks it. Prints `ok` on rank 1.

use rmca::Request;

/// (message size, count): one entry per size class of the profile.
pub const PLAN: [(usize, usize); 5] = [(8, 10), (512, 5), (8192, 4), (200_000, 3), (1_000_000, 2)];

fn byte(i: usize, k: usize) -> u8 {
    (i.wrapping_mul(131) ^ k.wrapping_mul(7)) as u8
}

fn main() {
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("profile_check: init: {e}");
        std::process::exit(1)
    });
    let w = universe.world();
    assert_eq!(w.size(), 2, "profile_check runs on 2 ranks");
    let msgs: Vec<Vec<u8>> = PLAN
        .iter()
        .flat_map(|&(size, count)| std::iter::repeat_n(size, count))
        .enumerate()
        .map(|(i, size)| (0..size).map(|k| byte(i, k)).collect())
        .collect();
    if w.rank() == 0 {
        rmca::scope(|s| {
            let reqs = msgs
                .iter()
                .map(|m| w.isend(s, m, 1, 7))
                .collect::<Result<Vec<_>, _>>()
                .expect("isend");
            Request::wait_all(reqs).expect("sends");
        });
    } else {
        // Progress until the first message is in the unexpected queue: no receive is posted.
        let st = w.probe(0, 7).expect("probe");
        assert_eq!(st.bytes, PLAN[0].0);
        for (i, m) in msgs.iter().enumerate() {
            let mut buf = vec![0u8; m.len()];
            let st = w.recv(&mut buf, 0, 7).expect("recv");
            assert_eq!((st.bytes, &buf), (m.len(), m), "message {i}");
        }
        println!("ok");
    }
}
