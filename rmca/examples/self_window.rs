//! Windows of 8-byte messages a rank sends itself: `WINDOWS` rounds of 64 receives posted,
//! 64 sends, then `Request::complete_all`, in one request scope per round (the message-rate
//! loop of `rmca-bench msgrate`, without a second process).
//!
//! Run under an instruction counter to compare the per-message cost of two builds
//! deterministically, on a machine whose timings are too noisy to show a few percent:
//! `bench/instructions.sh` does that.
//!
//! ```text
//! target/release/examples/self_window [WINDOWS]
//! ```

fn main() -> rmca::Result<()> {
    let windows: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("WINDOWS: a number of rounds"))
        .unwrap_or(1000);
    const WINDOW: usize = 64;
    let universe = rmca::init()?;
    let world = universe.world();
    let me = world.rank();
    let out = [7u8; 8];
    let mut inbox = vec![0u8; 8 * WINDOW];
    for _ in 0..windows {
        rmca::scope(|s| {
            let mut requests = Vec::with_capacity(2 * WINDOW);
            for slot in inbox.chunks_mut(8) {
                requests.push(world.irecv(s, slot, me, 2)?);
            }
            for _ in 0..WINDOW {
                requests.push(world.isend(s, &out, me, 2)?);
            }
            rmca::Request::complete_all(requests)
        })?;
    }
    assert!(inbox.iter().all(|&b| b == 7), "every message arrived");
    Ok(())
}
