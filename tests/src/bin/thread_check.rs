//! MPI from a worker thread (rmca's FUNNELED level), run under rmca-run by
//! `tests/tests/threads.rs`: the universe is initialized on the main thread, refused for
//! hand-over while a communicator derived from it is alive, then handed to a worker thread that
//! runs point-to-point and collective traffic and derives communicators there. Prints
//! `threads ok` on rank 0; exits non-zero on any failure.

use rmca::coll::Op;
use rmca::{Error, THREAD_LEVEL};

fn check(cond: bool, what: &str) {
    if !cond {
        eprintln!("rank check failed: {what}");
        std::process::exit(3);
    }
}

fn main() {
    check(
        THREAD_LEVEL == rmca::ThreadLevel::Funneled,
        "rmca documents the FUNNELED level",
    );
    let universe = rmca::init().expect("init");
    let dup = universe.world().dup().expect("dup");
    // A communicator still alive on this thread: the hand-over is refused, the universe kept.
    let universe = match universe.into_send() {
        Ok(_) => {
            check(false, "hand-over refused while a communicator is alive");
            unreachable!()
        }
        Err((u, Error::StillShared { handles })) => {
            check(handles >= 1, "the refusal counts the live handles");
            u
        }
        Err((_, e)) => {
            check(false, &format!("unexpected refusal: {e}"));
            unreachable!()
        }
    };
    drop(dup);
    let sendable = universe
        .into_send()
        .expect("hand-over once nothing else refers to it");
    let worker = std::thread::Builder::new()
        .name("mpi-worker".into())
        .spawn(move || {
            let universe = sendable.into_universe();
            let world = universe.world();
            let (me, n) = (world.rank(), world.size());
            // A ring of point-to-point messages, both directions.
            let right = (me + 1) % n;
            let left = (me + n - 1) % n;
            let mut from_left = [0u64; 64];
            world
                .sendrecv(&[me as u64; 64], right, 3, &mut from_left, left, 3)
                .expect("sendrecv");
            check(from_left == [left as u64; 64], "ring payload from the left");
            // A collective, and a communicator derived on the worker thread.
            let mut sum = [0u64];
            world
                .allreduce(&[me as u64 + 1], &mut sum, Op::Sum)
                .expect("allreduce");
            check(sum[0] == (n * (n + 1) / 2) as u64, "allreduce sum");
            let half = world
                .split(Some((me % 2) as u32), me as i32)
                .expect("split")
                .expect("every rank has a colour");
            let mut count = [0u32];
            half.allreduce(&[1u32], &mut count, Op::Sum)
                .expect("allreduce on the split");
            check(
                count[0] as usize == n.div_ceil(2) - (me % 2) * (n % 2),
                "split size",
            );
            drop(half);
            universe.finalize().expect("finalize on the worker");
            me
        })
        .expect("spawn");
    let me = worker.join().expect("the worker thread panicked");
    if me == 0 {
        println!("threads ok");
    }
}
