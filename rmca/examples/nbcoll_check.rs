//! Non-blocking collectives against sequential references, overlapped with each other (several
//! of one operation outstanding at once on one communicator, others on a second one) and
//! with point-to-point traffic, completed through every request call (wait, test, wait_any,
//! complete_all). Also the progress rule: a rank that starts collectives and then blocks in a
//! receive or a blocking collective, tests another request or probes, must still progress
//! them, since its peers send the message it waits for only after their own collectives
//! completed (without that progress the job hangs). Prints `OK`/`FAIL` per group and exits
//! non-zero on any failure.
//!
//! `rmca-run -n 3 target/release/examples/nbcoll_check`

use rmca::coll::Op;
use rmca::{Communicator, Request};

mod common;
use common::Checker;

/// Element counts checked (0, tiny, odd, eager-sized, rendezvous-sized and long enough for
/// the ring allreduce and the scatter-allgather broadcast).
const COUNTS: [usize; 5] = [0, 1, 7, 300, 20_000];

fn val(r: usize, i: usize) -> u64 {
    (r * 1_000_003 + i * 7) as u64
}
fn small(r: usize, i: usize) -> u32 {
    ((r * 31 + i * 17) % 1009) as u32
}
fn float(r: usize, i: usize) -> f64 {
    ((r * 5 + i * 3) % 7) as f64 - 2.0
}

/// Every non-blocking collective at once, twice for allreduce and bcast on the world, some on
/// `dup`, with a ring of point-to-point messages, a blocking exchange and a blocking
/// allreduce in the middle.
fn overlap(c: &mut Checker, dup: &Communicator, count: usize) -> rmca::Result<()> {
    let w = c.world.clone();
    let (n, me) = (w.size(), w.rank());
    let (root_a, root_b) = (count % n, (count / 7 + 1) % n);
    let sum_in: Vec<u64> = (0..count).map(|i| val(me, i)).collect();
    let mut sum_out = vec![0u64; count];
    let max_in: Vec<u64> = (0..count).map(|i| val(me, i) % 977).collect();
    let mut max_out = vec![0u64; count];
    let fmin_in: Vec<f64> = (0..count).map(|i| float(me, i)).collect();
    let mut fmin_out = vec![0f64; count];
    let mut bc_a: Vec<u64> = (0..count)
        .map(|i| if me == root_a { val(root_a, i) } else { 0 })
        .collect();
    let mut bc_b: Vec<u32> = (0..count)
        .map(|i| if me == root_b { small(root_b, i) } else { 0 })
        .collect();
    let mut red_out = vec![0u64; count];
    let mine: Vec<u32> = (0..count).map(|i| small(me, i)).collect();
    let mut gathered = vec![0u32; n * count];
    let scatter_in: Vec<u32> = (0..n * count).map(|i| small(root_b, i) ^ 0x5a).collect();
    let mut scattered = vec![0u32; count];
    let mut all = vec![0u32; n * count];
    let a2a_in: Vec<u32> = (0..n * count).map(|i| small(me, i) + 1).collect();
    let mut a2a_out = vec![0u32; n * count];
    let ring_out: Vec<u64> = (0..count + 1).map(|i| val(me, i) ^ 0x55).collect();
    let mut ring_in = vec![0u64; count + 1];
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let mut token = [0u64];
    let mut blocking_sum = [0u64];

    rmca::scope(|s| -> rmca::Result<()> {
        let ring_r = w.irecv(s, &mut ring_in, left, 11)?;
        let mut reqs = vec![
            w.iallreduce(s, &sum_in, &mut sum_out, Op::Sum)?,
            w.ibcast(s, &mut bc_a, root_a)?,
            dup.iallreduce(s, &fmin_in, &mut fmin_out, Op::Min)?,
            w.iallreduce(s, &max_in, &mut max_out, Op::Max)?,
            w.ibarrier(s)?,
            dup.ibcast(s, &mut bc_b, root_b)?,
        ];
        let ring_s = w.isend(s, &ring_out, right, 11)?;
        reqs.push(w.ireduce(
            s,
            &sum_in,
            (me == root_b).then_some(&mut red_out[..]),
            Op::Sum,
            root_b,
        )?);
        reqs.push(dup.igather(
            s,
            &mine,
            (me == root_a).then_some(&mut gathered[..]),
            root_a,
        )?);
        reqs.push(w.iscatter(
            s,
            (me == root_b).then_some(&scatter_in[..]),
            &mut scattered,
            root_b,
        )?);
        reqs.push(dup.iallgather(s, &mine, &mut all)?);
        reqs.push(w.ialltoall(s, &a2a_in, &mut a2a_out)?);
        // Blocking calls in the middle progress the collectives too.
        w.sendrecv(&[me as u64], right, 12, &mut token, left, 12)?;
        w.allreduce(&[1u64], &mut blocking_sum, Op::Sum)?;
        ring_s.wait()?;
        // Complete them every way a request can be completed.
        Request::wait_any(&mut reqs)?;
        let mut tested = reqs.remove(reqs.len() / 2);
        while tested.test().transpose()?.is_none() {}
        let last = reqs.pop().expect("requests left");
        Request::complete_all(reqs)?;
        last.wait()?;
        ring_r.wait()?;
        Ok(())
    })?;

    let name = |what: &str| format!("{what} count={count}");
    c.check(
        &name("p2p ring"),
        &ring_in,
        &(0..count + 1)
            .map(|i| val(left, i) ^ 0x55)
            .collect::<Vec<_>>(),
    );
    c.check(&name("blocking sendrecv"), &token, &[left as u64]);
    c.check(&name("blocking allreduce"), &blocking_sum, &[n as u64]);
    let sum: Vec<u64> = (0..count)
        .map(|i| (0..n).map(|r| val(r, i)).sum())
        .collect();
    c.check(&name("iallreduce sum"), &sum_out, &sum);
    let max: Vec<u64> = (0..count)
        .map(|i| (0..n).map(|r| val(r, i) % 977).max().unwrap_or(0))
        .collect();
    c.check(&name("iallreduce max"), &max_out, &max);
    let fmin: Vec<f64> = (0..count)
        .map(|i| (0..n).map(|r| float(r, i)).fold(f64::INFINITY, f64::min))
        .collect();
    c.check(&name("iallreduce f64 min on dup"), &fmin_out, &fmin);
    c.check(
        &name("ibcast u64"),
        &bc_a,
        &(0..count).map(|i| val(root_a, i)).collect::<Vec<_>>(),
    );
    c.check(
        &name("ibcast u32 on dup"),
        &bc_b,
        &(0..count).map(|i| small(root_b, i)).collect::<Vec<_>>(),
    );
    if me == root_b {
        c.check(&name("ireduce sum"), &red_out, &sum);
    }
    if me == root_a {
        let want: Vec<u32> = (0..n)
            .flat_map(|r| (0..count).map(move |i| small(r, i)))
            .collect();
        c.check(&name("igather on dup"), &gathered, &want);
    }
    c.check(
        &name("iscatter"),
        &scattered,
        &(me * count..(me + 1) * count)
            .map(|i| small(root_b, i) ^ 0x5a)
            .collect::<Vec<_>>(),
    );
    let want: Vec<u32> = (0..n)
        .flat_map(|r| (0..count).map(move |i| small(r, i)))
        .collect();
    c.check(&name("iallgather on dup"), &all, &want);
    // Rank r's block for rank d is a2a_in(r)[d * count..]; rank me receives block me of each r.
    let want: Vec<u32> = (0..n)
        .flat_map(|r| (me * count..(me + 1) * count).map(move |i| small(r, i) + 1))
        .collect();
    c.check(&name("ialltoall"), &a2a_out, &want);
    Ok(())
}

/// Rank 0 starts a barrier, a long broadcast and a long allreduce (each several rounds, so
/// they need progress after their start), then blocks in a receive from the last rank, which
/// sends only once its own collectives completed: rank 0 must progress them while blocked.
/// Then rank 0 starts an allreduce and blocks in a barrier that the others enter only after
/// the allreduce completed.
fn progress_without_test(c: &mut Checker) -> rmca::Result<()> {
    let w = c.world.clone();
    let (n, me) = (w.size(), w.rank());
    let (bcast_len, reduce_len) = (40_000, 20_000);
    let mut bc: Vec<u64> = (0..bcast_len)
        .map(|i| if me == 0 { val(0, i) } else { 0 })
        .collect();
    let ar_in: Vec<u64> = (0..reduce_len).map(|i| val(me, i)).collect();
    let mut ar_out = vec![0u64; reduce_len];
    let mut got = [0u64];
    rmca::scope(|s| -> rmca::Result<()> {
        let started = vec![
            w.ibarrier(s)?,
            w.ibcast(s, &mut bc, 0)?,
            w.iallreduce(s, &ar_in, &mut ar_out, Op::Sum)?,
        ];
        if me == 0 {
            if n > 1 {
                w.recv(&mut got, n - 1, 21)?;
            }
            Request::complete_all(started)?;
        } else {
            Request::wait_all(started)?;
            if me == n - 1 {
                w.send(&[42u64], 0, 21)?;
            }
        }
        Ok(())
    })?;
    if me == 0 && n > 1 {
        c.check(
            "progress: the message sent after the collectives",
            &got,
            &[42],
        );
    }
    c.check(
        "progress: ibcast",
        &bc,
        &(0..bcast_len).map(|i| val(0, i)).collect::<Vec<_>>(),
    );
    let sum: Vec<u64> = (0..reduce_len)
        .map(|i| (0..n).map(|r| val(r, i)).sum())
        .collect();
    c.check("progress: iallreduce", &ar_out, &sum);

    // Testing another request, or probing, progresses them too: rank 0 starts a barrier and
    // a long allreduce, lets the others start theirs only then (so nothing of theirs can have
    // arrived when rank 0 started), and only tests a receive (or probes for its message) that
    // the last rank satisfies once its collectives completed.
    for probing in [false, true] {
        let how = if probing {
            "probing"
        } else {
            "testing another request"
        };
        let (mut got, mut go) = ([0u64], [0u8]);
        let mut ar3 = vec![0u64; reduce_len];
        rmca::scope(|s| -> rmca::Result<()> {
            if me == 0 {
                let started = vec![w.ibarrier(s)?, w.iallreduce(s, &ar_in, &mut ar3, Op::Sum)?];
                for r in 1..n {
                    w.send(&[1u8], r, 23)?;
                }
                if n > 1 && probing {
                    while w.iprobe(n - 1, 22)?.is_none() {}
                    w.recv(&mut got, n - 1, 22)?;
                } else if n > 1 {
                    let mut r = w.irecv(s, &mut got, n - 1, 22)?;
                    while r.test().transpose()?.is_none() {}
                }
                return Request::complete_all(started);
            }
            w.recv(&mut go, 0, 23)?;
            let started = vec![w.ibarrier(s)?, w.iallreduce(s, &ar_in, &mut ar3, Op::Sum)?];
            Request::wait_all(started)?;
            if me == n - 1 {
                w.send(&[7u64], 0, 22)?;
            }
            Ok(())
        })?;
        if me == 0 && n > 1 {
            c.check(&format!("progress while {how}: the message"), &got, &[7]);
        }
        c.check(&format!("progress while {how}: iallreduce"), &ar3, &sum);
    }

    let mut ar2 = vec![0u64; reduce_len];
    rmca::scope(|s| -> rmca::Result<()> {
        let r = w.iallreduce(s, &ar_in, &mut ar2, Op::Sum)?;
        if me == 0 {
            w.barrier()?;
            r.wait()?;
        } else {
            r.wait()?;
            w.barrier()?;
        }
        Ok(())
    })?;
    c.check("progress: iallreduce during a blocking barrier", &ar2, &sum);
    Ok(())
}

fn main() {
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("nbcoll_check: rmca init failed: {e}");
        std::process::exit(1)
    });
    let world = universe.world();
    let (n, me) = (world.size(), world.rank());
    if me == 0 {
        println!("nbcoll_check: {n} ranks");
    }
    let dup = world.dup().expect("dup");
    let mut c = Checker::new(world.clone());

    progress_without_test(&mut c).expect("progress case");
    c.done("progress without testing");

    for count in COUNTS {
        overlap(&mut c, &dup, count).expect("overlap case");
    }
    c.done("overlapping non-blocking collectives and p2p");

    // Bad arguments are errors, not crashes (checked locally, no communication happens).
    let (mut short, mut one, mut float_out) = ([0u64; 1], [0u64; 1], [0f64; 1]);
    let (a2a_in, mut a2a_out) = (vec![0u32; n], vec![0u32; n + 1]);
    rmca::scope(|s| {
        c.expect_err("ibcast to root n", world.ibcast(s, &mut short, n));
        c.expect_err(
            "iallreduce with a short receive buffer",
            world.iallreduce(s, &[1u64, 2], &mut one, Op::Sum),
        );
        c.expect_err(
            "iallreduce BitXor on f64",
            world.iallreduce(s, &[1.0f64], &mut float_out, Op::BitXor),
        );
        // Only the root refuses it (elsewhere `None` is the valid argument).
        let root = n - 1;
        if me == root {
            c.expect_err(
                "ireduce without a receive buffer at the root",
                world.ireduce(s, &[1u64], None, Op::Sum, root),
            );
        }
        c.expect_err(
            "ialltoall with a receive buffer of another length",
            world.ialltoall(s, &a2a_in, &mut a2a_out),
        );
    });
    c.done("argument errors");

    let mut total = [0u32; 2];
    world
        .allreduce(&[c.failures, c.cases], &mut total, Op::Sum)
        .expect("allreduce");
    if me == 0 {
        println!(
            "nbcoll_check: {n} ranks, {} cases, {} failures",
            total[1], total[0]
        );
    }
    drop(universe);
    std::process::exit(if total[0] == 0 { 0 } else { 1 });
}
