//! Checks the coll components a communicator stacks and the operations coll-hier serves:
//! prints `stack <communicator>: <components>` (rank 0), then runs barrier, bcast, reduce,
//! allreduce (blocking and non-blocking, every root, several sizes, commutative built-in
//! operations and a non-commutative user operation, which falls through to coll-base),
//! allgather (blocking and not) and reduce_scatter (equal and uneven chunks) on the world and
//! on each node's communicator, comparing with sequential references. Exits non-zero on any
//! failure.
//!
//! With `--only-hier` (run under `--mca coll hier`), it checks instead that an operation
//! coll-hier does not provide fails on every rank with an error naming the operation and
//! the components, and that the others still work.
//!
//! `rmca-run -n 4 --hosts a,b ... target/release/examples/coll_hier_check`

use rmca::coll::{Op, UserOp};
use rmca::Communicator;

mod common;
use common::Checker;

/// Element counts checked (0, tiny, odd, eager-sized, rendezvous-sized).
const COUNTS: [usize; 5] = [0, 1, 7, 300, 20_000];

fn input(r: usize, i: usize) -> i64 {
    ((r * 37 + i * 11) % 23) as i64 - 7
}

/// A 2x2 integer matrix product: associative, not commutative.
fn matmul(a: [i64; 4], b: [i64; 4]) -> [i64; 4] {
    [
        a[0].wrapping_mul(b[0])
            .wrapping_add(a[1].wrapping_mul(b[2])),
        a[0].wrapping_mul(b[1])
            .wrapping_add(a[1].wrapping_mul(b[3])),
        a[2].wrapping_mul(b[0])
            .wrapping_add(a[3].wrapping_mul(b[2])),
        a[2].wrapping_mul(b[1])
            .wrapping_add(a[3].wrapping_mul(b[3])),
    ]
}

fn mat(r: usize, i: usize) -> [i64; 4] {
    [input(r, i), 1, input(r + 1, i + 2) % 3, 1]
}

fn combine(op: Op, a: i64, b: i64) -> i64 {
    match op {
        Op::Sum => a.wrapping_add(b),
        Op::Max => a.max(b),
        Op::BitXor => a ^ b,
        _ => unreachable!("only the operations checked here"),
    }
}

fn check_comm(c: &mut Checker, comm: &Communicator, what: &str) {
    let (n, me) = (comm.size(), comm.rank());
    for _ in 0..3 {
        comm.barrier().expect("barrier");
    }
    for count in COUNTS {
        let send: Vec<i64> = (0..count).map(|i| input(me, i)).collect();
        for op in [Op::Sum, Op::Max, Op::BitXor] {
            let want: Vec<i64> = (0..count)
                .map(|i| (1..n).fold(input(0, i), |acc, r| combine(op, acc, input(r, i))))
                .collect();
            let mut got = vec![i64::MIN; count];
            comm.allreduce(&send, &mut got, op).expect("allreduce");
            c.check(
                &format!("{what} allreduce {op:?} count={count}"),
                &got,
                &want,
            );
            let mut got = vec![i64::MIN; count];
            rmca::scope(|s| comm.iallreduce(s, &send, &mut got, op)?.wait()).expect("iallreduce");
            c.check(
                &format!("{what} iallreduce {op:?} count={count}"),
                &got,
                &want,
            );
            for root in 0..n {
                let mut got = vec![i64::MIN; count];
                let recv = (me == root).then_some(&mut got[..]);
                comm.reduce(&send, recv, op, root).expect("reduce");
                if me == root {
                    c.check(
                        &format!("{what} reduce {op:?} root={root} count={count}"),
                        &got,
                        &want,
                    );
                }
            }
        }
        for root in 0..n {
            let want: Vec<i64> = (0..count).map(|i| input(root, i)).collect();
            let mut buf = if me == root {
                want.clone()
            } else {
                vec![0; count]
            };
            comm.bcast(&mut buf, root).expect("bcast");
            c.check(
                &format!("{what} bcast root={root} count={count}"),
                &buf,
                &want,
            );
            let mut buf = if me == root {
                want.clone()
            } else {
                vec![0; count]
            };
            rmca::scope(|s| comm.ibcast(s, &mut buf, root)?.wait()).expect("ibcast");
            c.check(
                &format!("{what} ibcast root={root} count={count}"),
                &buf,
                &want,
            );
        }
        // Non-commutative: rank order, whichever component serves it.
        let send: Vec<[i64; 4]> = (0..count.min(300)).map(|i| mat(me, i)).collect();
        let want: Vec<[i64; 4]> = (0..send.len())
            .map(|i| (1..n).fold(mat(0, i), |acc, r| matmul(acc, mat(r, i))))
            .collect();
        let mut got = vec![[0i64; 4]; send.len()];
        comm.allreduce(&send, &mut got, UserOp::non_commutative(matmul))
            .expect("allreduce");
        c.check(
            &format!("{what} allreduce matmul count={}", send.len()),
            &got,
            &want,
        );
        for root in 0..n {
            let mut got = vec![[0i64; 4]; send.len()];
            let recv = (me == root).then_some(&mut got[..]);
            comm.reduce(&send, recv, UserOp::non_commutative(matmul), root)
                .expect("reduce");
            if me == root {
                c.check(&format!("{what} reduce matmul root={root}"), &got, &want);
            }
        }
    }
    check_blocks(c, comm, what);
    rmca::scope(|s| comm.ibarrier(s)?.wait()).expect("ibarrier");
}

/// Allgather and reduce_scatter (coll-hier's when every node's ranks are consecutive).
fn check_blocks(c: &mut Checker, comm: &Communicator, what: &str) {
    let (n, me) = (comm.size(), comm.rank());
    for count in COUNTS {
        let send: Vec<i64> = (0..count).map(|i| input(me, i)).collect();
        let want: Vec<i64> = (0..n)
            .flat_map(|r| (0..count).map(move |i| input(r, i)))
            .collect();
        let mut got = vec![i64::MIN; n * count];
        comm.allgather(&send, &mut got).expect("allgather");
        c.check(&format!("{what} allgather count={count}"), &got, &want);
        let mut got = vec![i64::MIN; n * count];
        rmca::scope(|s| comm.iallgather(s, &send, &mut got)?.wait()).expect("iallgather");
        c.check(&format!("{what} iallgather count={count}"), &got, &want);
        // Equal chunks of `count` elements, then uneven ones (rank r: (r + count) % 3).
        let counts: Vec<usize> = (0..n).map(|r| (r + count) % 3).collect();
        for counts in [vec![count; n], counts] {
            let total: usize = counts.iter().sum();
            let first: usize = counts[..me].iter().sum();
            let send: Vec<i64> = (0..total).map(|i| input(me, i)).collect();
            for op in [Op::Sum, Op::Max] {
                let want: Vec<i64> = (first..first + counts[me])
                    .map(|i| (1..n).fold(input(0, i), |acc, r| combine(op, acc, input(r, i))))
                    .collect();
                let mut got = vec![i64::MIN; counts[me]];
                comm.reduce_scatter(&send, &mut got, &counts, op)
                    .expect("reduce_scatter");
                c.check(
                    &format!("{what} reduce_scatter {op:?} counts={counts:?}"),
                    &got,
                    &want,
                );
            }
        }
    }
}

fn main() -> rmca::Result<()> {
    let universe = rmca::init()?;
    let world = universe.world();
    let (n, me) = (world.size(), world.rank());
    let only_hier = std::env::args().any(|a| a == "--only-hier");
    // (Splitting runs collectives coll-hier alone may not provide.)
    let node = if only_hier {
        None
    } else {
        Some(world.split_shared(me as i32)?)
    };
    let mut stacks = vec![("world", world.coll_components()?)];
    if let Some(node) = &node {
        stacks.push(("node", node.coll_components()?));
    }
    if me == 0 {
        for (what, s) in &stacks {
            println!("stack {what}: {}", s.join(","));
        }
    }
    let mut c = Checker::new(world.clone());
    if only_hier {
        // coll-hier alone: what it provides works, the rest is refused on every rank.
        let mut got = [0i64; 3];
        world.allreduce(&[me as i64; 3], &mut got, Op::Sum)?;
        c.check("hier allreduce", &got, &[(n * (n - 1) / 2) as i64; 3]);
        let mut all = vec![0i64; n];
        world.allgather(&[me as i64], &mut all)?;
        c.check("hier allgather", &all, &(0..n as i64).collect::<Vec<_>>());
        let mut all = vec![0i64; n];
        let recv = (me == 0).then_some(&mut all[..]);
        c.check_err(
            "gather refused",
            world.gather(&[me as i64], recv, 0),
            "gather: no coll component of this communicator provides it (its components: hier)",
        );
        c.check_err(
            "non-commutative allreduce refused",
            world.allreduce(
                &[[1i64; 4]],
                &mut [[0i64; 4]],
                UserOp::non_commutative(matmul),
            ),
            "allreduce: no coll component",
        );
        world.barrier()?;
        c.done("only hier");
    } else {
        check_comm(&mut c, &world, "world");
        c.done("world");
        let node = node.as_ref().expect("split above");
        check_comm(&mut c, node, "node");
        c.done("node");
    }
    let mut total = [0u32];
    world.allreduce(&[c.failures], &mut total, Op::Sum)?;
    if me == 0 {
        println!(
            "coll_hier_check: {n} ranks, {} cases, {} failures",
            c.cases, total[0]
        );
    }
    drop(node);
    universe.finalize()?;
    if total[0] > 0 {
        std::process::exit(1);
    }
    Ok(())
}
