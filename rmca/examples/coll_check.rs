//! Runs every collective over several sizes, roots, operations and types, and compares each
//! result with a sequential reference computed locally (every rank can compute every rank's
//! input). Prints `OK`/`FAIL` per case (failures from any rank, successes from rank 0) and
//! exits non-zero on any failure. The algorithms are those selected by the
//! `coll_<op>_algorithm` MCA parameters, so the tests run it once per forced algorithm:
//!
//! `rmca-run -n 5 --mca coll_allreduce_algorithm ring target/release/examples/coll_check`

use rmca::coll::{Op, Reducible};

mod common;
use common::Checker;

/// Element counts checked (0, tiny, odd, eager-sized, rendezvous-sized).
const COUNTS: [usize; 5] = [0, 1, 7, 300, 20_000];

/// Input of rank `r`, element `i` (small values so that Sum/Prod of floats are exact).
fn input_i64(r: usize, i: usize) -> i64 {
    ((r * 37 + i * 11) % 23) as i64 - 7
}
fn input_f64(r: usize, i: usize) -> f64 {
    ((r * 5 + i * 3) % 7) as f64 - 2.0
}

fn reference<T: Reducible>(
    n: usize,
    count: usize,
    op: Op,
    f: impl Fn(usize, usize) -> T,
) -> Vec<T> {
    (0..count)
        .map(|i| (1..n).fold(f(0, i), |acc, r| T::combine(op, acc, f(r, i))))
        .collect()
}

fn reductions<T: Reducible + PartialEq + std::fmt::Debug>(
    c: &mut Checker,
    ty: &str,
    ops: &[Op],
    f: fn(usize, usize) -> T,
) {
    let (n, me) = (c.world.size(), c.world.rank());
    for &count in &COUNTS {
        let send: Vec<T> = (0..count).map(|i| f(me, i)).collect();
        for &op in ops {
            let want = reference(n, count, op, f);
            let mut recv = poisoned::<T>(count);
            c.world.allreduce(&send, &mut recv, op).expect("allreduce");
            c.check(
                &format!("allreduce {ty} {op:?} count={count}"),
                &recv,
                &want,
            );
            for root in roots(n) {
                let mut recv = poisoned::<T>(count);
                let r = if me == root {
                    Some(&mut recv[..])
                } else {
                    None
                };
                c.world.reduce(&send, r, op, root).expect("reduce");
                if me == root {
                    c.check(
                        &format!("reduce {ty} {op:?} count={count} root={root}"),
                        &recv,
                        &want,
                    );
                }
            }
        }
    }
    c.done(&format!("reduce/allreduce {ty}"));
}

/// A receive buffer of `count` elements filled with 0xA5 bytes: a collective that read its
/// receive buffer before writing it would fold them into the result.
fn poisoned<T: Reducible>(count: usize) -> Vec<T> {
    let mut v = vec![T::zeroed(); count];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).fill(0xA5);
    v
}

/// Roots checked: first, last and a middle one.
fn roots(n: usize) -> Vec<usize> {
    let mut r = vec![0, n - 1, n / 2];
    r.dedup();
    r.sort();
    r.dedup();
    r
}

fn main() {
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("coll_check: rmca init failed: {e}");
        std::process::exit(1)
    });
    let world = universe.world();
    let (n, me) = (world.size(), world.rank());
    let mut c = Checker::new(world.clone());

    for _ in 0..3 {
        world.barrier().expect("barrier");
    }
    c.done("barrier");

    let val = |r: usize, i: usize| (r * 1_000_003 + i * 7) as u32;
    for &count in &COUNTS {
        for root in roots(n) {
            let mut buf: Vec<u32> = if me == root {
                (0..count).map(|i| val(root, i)).collect()
            } else {
                vec![0; count]
            };
            world.bcast(&mut buf, root).expect("bcast");
            c.check(
                &format!("bcast count={count} root={root}"),
                &buf,
                &(0..count).map(|i| val(root, i)).collect::<Vec<_>>(),
            );

            let mine: Vec<u32> = (0..count).map(|i| val(me, i)).collect();
            let all: Vec<u32> = (0..n)
                .flat_map(|r| (0..count).map(move |i| val(r, i)))
                .collect();
            let mut g = vec![0u32; n * count];
            world
                .gather(
                    &mine,
                    if me == root { Some(&mut g[..]) } else { None },
                    root,
                )
                .expect("gather");
            if me == root {
                c.check(&format!("gather count={count} root={root}"), &g, &all);
            }
            let mut s = vec![0u32; count];
            world
                .scatter(if me == root { Some(&all[..]) } else { None }, &mut s, root)
                .expect("scatter");
            c.check(&format!("scatter count={count} root={root}"), &s, &mine);
        }
        let mine: Vec<u32> = (0..count).map(|i| val(me, i)).collect();
        let all: Vec<u32> = (0..n)
            .flat_map(|r| (0..count).map(move |i| val(r, i)))
            .collect();
        let mut g = vec![0u32; n * count];
        world.allgather(&mine, &mut g).expect("allgather");
        c.check(&format!("allgather count={count}"), &g, &all);

        // alltoall: block d of rank s holds f(s, d, i).
        let a2a = |s: usize, d: usize, i: usize| (s * 65_536 + d * 1024 + i) as u32;
        let send: Vec<u32> = (0..n)
            .flat_map(|d| (0..count).map(move |i| a2a(me, d, i)))
            .collect();
        let want: Vec<u32> = (0..n)
            .flat_map(|s| (0..count).map(move |i| a2a(s, me, i)))
            .collect();
        let mut recv = vec![0u32; n * count];
        world.alltoall(&send, &mut recv).expect("alltoall");
        c.check(&format!("alltoall count={count}"), &recv, &want);

        // alltoallv: rank s sends (s + d) % 3 * count / 2 + d elements to d; receive blocks
        // packed in reverse source order with a gap of one element.
        let cnt = |s: usize, d: usize| (s + d) % 3 * count / 2 + d;
        let scounts: Vec<usize> = (0..n).map(|d| cnt(me, d)).collect();
        let sdispls: Vec<usize> = scounts
            .iter()
            .scan(0, |o, &k| {
                let d = *o;
                *o += k;
                Some(d)
            })
            .collect();
        let send: Vec<u32> = (0..n)
            .flat_map(|d| (0..cnt(me, d)).map(move |i| a2a(me, d, i)))
            .collect();
        let rcounts: Vec<usize> = (0..n).map(|s| cnt(s, me)).collect();
        let mut rdispls = vec![0; n];
        let mut off = 0;
        for s in (0..n).rev() {
            rdispls[s] = off;
            off += rcounts[s] + 1;
        }
        let mut recv = vec![u32::MAX; off];
        world
            .alltoallv(&send, &scounts, &sdispls, &mut recv, &rcounts, &rdispls)
            .expect("alltoallv");
        let mut want = vec![u32::MAX; off];
        for s in 0..n {
            for i in 0..rcounts[s] {
                want[rdispls[s] + i] = a2a(s, me, i);
            }
        }
        c.check(&format!("alltoallv count={count}"), &recv, &want);
    }
    c.done("bcast/gather/scatter/allgather/alltoall/alltoallv");

    reductions::<i64>(&mut c, "i64", &Op::ALL, input_i64);
    reductions::<u8>(
        &mut c,
        "u8",
        &[Op::Sum, Op::Prod, Op::Max, Op::BitXor, Op::LogicalOr],
        |r, i| (r * 13 + i) as u8,
    );
    reductions::<i32>(
        &mut c,
        "i32",
        &[Op::Sum, Op::Min, Op::BitAnd, Op::LogicalAnd],
        |r, i| input_i64(r, i) as i32,
    );
    reductions::<f64>(
        &mut c,
        "f64",
        &[Op::Sum, Op::Prod, Op::Min, Op::Max],
        input_f64,
    );
    reductions::<f32>(&mut c, "f32", &[Op::Sum, Op::Max], |r, i| {
        input_f64(r, i) as f32
    });

    // Determinism: non-representable float sums must come out bit-identical on every rank.
    let count = 5000;
    let send: Vec<f64> = (0..count)
        .map(|i| 1.0 / (1.0 + (me * count + i) as f64))
        .collect();
    let mut sum = vec![0.0f64; count];
    world
        .allreduce(&send, &mut sum, Op::Sum)
        .expect("allreduce");
    let bits: Vec<u64> = sum.iter().map(|x| x.to_bits()).collect();
    let mut everyone = vec![0u64; n * count];
    world.allgather(&bits, &mut everyone).expect("allgather");
    for r in 0..n {
        c.check(
            &format!("allreduce f64 bit-identical on rank {r}"),
            &everyone[r * count..(r + 1) * count],
            &bits,
        );
    }
    c.done("allreduce determinism");

    // Bad arguments are errors, not crashes (checked locally, no communication happens).
    let mut small = [0i64; 1];
    c.cases += 1;
    if world.allreduce(&[1i64, 2], &mut small, Op::Sum).is_ok() {
        c.failures += 1;
        println!("FAIL allreduce accepted a short receive buffer");
    }
    c.cases += 1;
    if world.allreduce(&[1.0f64], &mut [0.0], Op::BitXor).is_ok() {
        c.failures += 1;
        println!("FAIL allreduce accepted BitXor on f64");
    }
    c.cases += 1;
    if world.bcast(&mut small, n).is_ok() {
        c.failures += 1;
        println!("FAIL bcast accepted root {n}");
    }

    let mut total = [0u32; 2];
    world
        .allreduce(&[c.failures, c.cases], &mut total, Op::Sum)
        .expect("allreduce");
    if me == 0 {
        println!(
            "coll_check: {n} ranks, {} cases, {} failures",
            total[1], total[0]
        );
    }
    drop(universe);
    std::process::exit(if total[0] == 0 { 0 } else { 1 });
}
