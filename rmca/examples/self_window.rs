//! Messages of 8 bytes a rank sends itself, `ROUNDS` rounds of one of two loops:
//! - `window` (the default): 64 receives posted, 64 sends, then `Request::complete_all`, in
//!   one request scope per round (the message-rate loop of `rmca-bench msgrate`, without a
//!   second process);
//! - `blocking`: 64 times a blocking send then a blocking receive (the calls of the latency
//!   loop).
//!
//! Run under an instruction counter to compare the per-message cost of two builds
//! deterministically, on a machine whose timings are too noisy to show a few percent:
//! `bench/instructions.sh` does that (and runs bench/self_window.c, the same loops through
//! the MPI C interface).
//!
//! ```text
//! target/release/examples/self_window [ROUNDS [window|blocking]]
//! ```

const WINDOW: usize = 64;

/// One round of the message-rate loop (a function of its own: the instruction counter
/// counts inside it).
#[inline(never)]
fn window_round(world: &rmca::Communicator, out: &[u8; 8], inbox: &mut [u8]) -> rmca::Result<()> {
    let me = world.rank();
    rmca::scope(|s| {
        let mut requests = Vec::with_capacity(2 * WINDOW);
        for slot in inbox.chunks_mut(8) {
            requests.push(world.irecv(s, slot, me, 2)?);
        }
        for _ in 0..WINDOW {
            requests.push(world.isend(s, out, me, 2)?);
        }
        rmca::Request::complete_all(requests)
    })
}

/// One round of the latency loop's calls.
#[inline(never)]
fn blocking_round(world: &rmca::Communicator, out: &[u8; 8], inbox: &mut [u8]) -> rmca::Result<()> {
    let me = world.rank();
    for slot in inbox.chunks_mut(8) {
        world.send(out, me, 2)?;
        world.recv(slot, me, 2)?;
    }
    Ok(())
}

fn main() -> rmca::Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args
        .next()
        .map(|s| s.parse().expect("ROUNDS: a number of rounds"))
        .unwrap_or(1000);
    let round = match args.next().as_deref() {
        None | Some("window") => window_round,
        Some("blocking") => blocking_round,
        Some(other) => panic!("unknown loop {other:?}: window or blocking"),
    };
    let universe = rmca::init()?;
    let world = universe.world();
    let out = [7u8; 8];
    let mut inbox = vec![0u8; 8 * WINDOW];
    for _ in 0..rounds {
        round(&world, &out, &mut inbox)?;
    }
    assert!(inbox.iter().all(|&b| b == 7), "every message arrived");
    Ok(())
}
