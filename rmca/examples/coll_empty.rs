//! Reductions of no element return without waiting for the other members (MPI owes no
//! synchronisation for them, and nothing moves): every rank but the last runs an empty
//! allreduce, reduce, reduce_scatter_block, scan and exscan (typed, and in place) and only
//! then sends the last rank a token; the last rank waits for that token before it makes the
//! same calls. Were an empty reduction to wait for every member, the token would never
//! come: the last rank gives up after a deadline, says so, then makes its calls anyway
//! (releasing the others) and the job fails rather than hangs.
//!
//! `rmca-run -n 3 target/release/examples/coll_empty`

use std::process::exit;
use std::time::{Duration, Instant};

use rmca::coll::Op;

/// How long the last rank waits for the tokens.
const DEADLINE: Duration = Duration::from_secs(5);
const TAG: i32 = 7;

/// Every empty reduction of the Rust API, on `world`.
fn empties(world: &rmca::Communicator) -> rmca::Result<()> {
    let (send, mut recv, mut buf): ([f64; 0], [f64; 0], [f64; 0]) = ([], [], []);
    let last = world.size() - 1;
    world.allreduce(&send, &mut recv, Op::Sum)?;
    world.allreduce_in_place(&mut buf, Op::Max)?;
    if world.rank() == last {
        world.reduce(&send, Some(&mut recv), Op::Sum, last)?;
    } else {
        world.reduce(&send, None, Op::Sum, last)?;
    }
    world.reduce_scatter_block(&send, &mut recv, Op::Sum)?;
    world.scan(&send, &mut recv, Op::Sum)?;
    world.exscan(&send, &mut recv, Op::Sum)?;
    world.scan_in_place(&mut buf, Op::Min)?;
    Ok(())
}

fn main() {
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("coll_empty: rmca init failed: {e}");
        exit(1)
    });
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let last = size - 1;
    // A non-empty collective first, so that the communicator's collective set-up (coll-sm's
    // segment) is behind every member.
    let mut one = [rank as u64];
    world
        .allreduce_in_place(&mut one, Op::Sum)
        .expect("allreduce");
    if rank != last {
        empties(&world).expect("empty reductions");
        world.send(&[rank as u64], last, TAG).expect("send");
    } else {
        let start = Instant::now();
        let mut missing: Vec<usize> = (0..last).collect();
        while !missing.is_empty() && start.elapsed() < DEADLINE {
            missing.retain(|&q| world.iprobe(q, TAG).expect("iprobe").is_none());
        }
        let failed = !missing.is_empty();
        if failed {
            eprintln!(
                "coll_empty: ranks {missing:?} did not get past their empty reductions in {DEADLINE:?}"
            );
        }
        empties(&world).expect("empty reductions");
        for q in 0..last {
            let mut t = [0u64];
            world.recv(&mut t, q, TAG).expect("recv");
        }
        if failed {
            exit(3);
        }
        println!("coll_empty: {size} ranks: empty reductions did not wait for the last rank");
    }
    world.barrier().expect("barrier");
}
