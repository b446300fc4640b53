//! Checks the v-collectives, scans and reductions against sequential references computed locally (every
//! rank can compute every rank's input): gatherv, scatterv, allgatherv, reduce_scatter(_block),
//! scan, exscan, the in-place forms, MinLoc/MaxLoc and user-defined operations (commutative,
//! and a non-commutative 2x2 matrix product that only rank order reproduces), plus argument
//! errors. Prints `OK`/`FAIL` per group and exits non-zero on any failure. The algorithms are
//! those the `coll_<op>_algorithm` MCA parameters select, so the tests run it under several:
//!
//! `rmca-run -n 3 --mca coll_reduce_scatter_algorithm ring target/release/examples/collv_check`

use rmca::coll::{Loc, Op, UserOp};

mod common;
use common::Checker;

/// Base element counts (per-rank counts vary around them): tiny, odd, past the eager limit.
const BASES: [usize; 3] = [1, 9, 3000];

/// Roots checked: first, last and a middle one.
fn roots(n: usize) -> Vec<usize> {
    let mut r = vec![0, n - 1, n / 2];
    r.sort();
    r.dedup();
    r
}

fn val(r: usize, i: usize) -> u32 {
    (r * 1_000_003 + i * 7 + 1) as u32
}

/// Per-rank counts around `base` (rank 1 sends nothing, so empty blocks are covered).
fn counts(n: usize, base: usize) -> Vec<usize> {
    (0..n)
        .map(|r| if r == 1 { 0 } else { base + (r * 3) % 5 })
        .collect()
}

/// Displacements placing the blocks in reverse rank order with a gap of 2 after each, and
/// the buffer length they need.
fn scattered(counts: &[usize]) -> (Vec<usize>, usize) {
    let mut displs = vec![0; counts.len()];
    let mut off = 0;
    for r in (0..counts.len()).rev() {
        displs[r] = off;
        off += counts[r] + 2;
    }
    (displs, off)
}

/// The receive buffer a v-gather should leave: block r at `displs[r]`, `fill` elsewhere.
fn placed(counts: &[usize], displs: &[usize], len: usize, fill: u32) -> Vec<u32> {
    let mut out = vec![fill; len];
    for (r, (&c, &d)) in counts.iter().zip(displs).enumerate() {
        for i in 0..c {
            out[d + i] = val(r, i);
        }
    }
    out
}

fn mine(r: usize, count: usize) -> Vec<u32> {
    (0..count).map(|i| val(r, i)).collect()
}

const FILL: u32 = 0xDEAD_BEEF;

fn v_collectives(c: &mut Checker) {
    let world = c.world.clone();
    let (n, me) = (world.size(), world.rank());
    for base in BASES {
        let cnt = counts(n, base);
        let (displs, len) = scattered(&cnt);
        let want = placed(&cnt, &displs, len, FILL);
        for root in roots(n) {
            let tag = format!("base={base} root={root}");
            // gatherv
            let mut recv = vec![FILL; len];
            let r = (me == root).then_some(&mut recv[..]);
            world
                .gatherv(&mine(me, cnt[me]), r, &cnt, &displs, root)
                .expect("gatherv");
            if me == root {
                c.check(&format!("gatherv {tag}"), &recv, &want);
            }
            // gatherv in place at the root (its block already placed).
            let mut buf = vec![FILL; len];
            if me == root {
                buf[displs[me]..displs[me] + cnt[me]].copy_from_slice(&mine(me, cnt[me]));
                world
                    .gatherv_in_place(&mut buf, &cnt, &displs, root)
                    .expect("gatherv_in_place");
                c.check(&format!("gatherv_in_place {tag}"), &buf, &want);
            } else {
                world
                    .gatherv(&mine(me, cnt[me]), None, &[], &[], root)
                    .expect("gatherv");
            }
            // scatterv (and in place at the root).
            let mut got = vec![FILL; cnt[me]];
            let s = (me == root).then_some(&want[..]);
            world
                .scatterv(s, &cnt, &displs, &mut got, root)
                .expect("scatterv");
            c.check(&format!("scatterv {tag}"), &got, &mine(me, cnt[me]));
            let mut got = vec![FILL; cnt[me]];
            if me == root {
                world
                    .scatterv_in_place(&want, &cnt, &displs, root)
                    .expect("scatterv_in_place");
            } else {
                world
                    .scatterv(None, &[], &[], &mut got, root)
                    .expect("scatterv");
                c.check(
                    &format!("scatterv (root in place) {tag}"),
                    &got,
                    &mine(me, cnt[me]),
                );
            }
            // gather and scatter in place at the root (equal blocks).
            let all: Vec<u32> = (0..n).flat_map(|r| mine(r, base)).collect();
            if me == root {
                let mut buf = vec![FILL; n * base];
                buf[me * base..(me + 1) * base].copy_from_slice(&mine(me, base));
                world
                    .gather_in_place(&mut buf, root)
                    .expect("gather_in_place");
                c.check(&format!("gather_in_place {tag}"), &buf, &all);
                world
                    .scatter_in_place(&all, root)
                    .expect("scatter_in_place");
            } else {
                world.gather(&mine(me, base), None, root).expect("gather");
                let mut got = vec![FILL; base];
                world.scatter(None, &mut got, root).expect("scatter");
                c.check(
                    &format!("scatter (root in place) {tag}"),
                    &got,
                    &mine(me, base),
                );
            }
        }
        // allgatherv, plain and in place.
        let mut recv = vec![FILL; len];
        world
            .allgatherv(&mine(me, cnt[me]), &mut recv, &cnt, &displs)
            .expect("allgatherv");
        c.check(&format!("allgatherv base={base}"), &recv, &want);
        let mut buf = vec![FILL; len];
        buf[displs[me]..displs[me] + cnt[me]].copy_from_slice(&mine(me, cnt[me]));
        world
            .allgatherv_in_place(&mut buf, &cnt, &displs)
            .expect("allgatherv_in_place");
        c.check(&format!("allgatherv_in_place base={base}"), &buf, &want);
        // allgather and alltoall in place.
        let all: Vec<u32> = (0..n).flat_map(|r| mine(r, base)).collect();
        let mut buf = vec![FILL; n * base];
        buf[me * base..(me + 1) * base].copy_from_slice(&mine(me, base));
        world
            .allgather_in_place(&mut buf)
            .expect("allgather_in_place");
        c.check(&format!("allgather_in_place base={base}"), &buf, &all);
        let a2a = |s: usize, d: usize, i: usize| (s * 65_536 + d * 1024 + i) as u32;
        let mut buf: Vec<u32> = (0..n)
            .flat_map(|d| (0..base).map(move |i| a2a(me, d, i)))
            .collect();
        world
            .alltoall_in_place(&mut buf)
            .expect("alltoall_in_place");
        let want: Vec<u32> = (0..n)
            .flat_map(|s| (0..base).map(move |i| a2a(s, me, i)))
            .collect();
        c.check(&format!("alltoall_in_place base={base}"), &buf, &want);
    }
    c.done("gatherv/scatterv/allgatherv and in-place gather/scatter/allgather/alltoall");
}

/// A 2x2 matrix of wrapping integers, row-major: associative, not commutative.
type Mat = [i64; 4];

fn matmul(a: Mat, b: Mat) -> Mat {
    let (m, p) = (i64::wrapping_mul, i64::wrapping_add);
    [
        p(m(a[0], b[0]), m(a[1], b[2])),
        p(m(a[0], b[1]), m(a[1], b[3])),
        p(m(a[2], b[0]), m(a[3], b[2])),
        p(m(a[2], b[1]), m(a[3], b[3])),
    ]
}

fn mat(r: usize, i: usize) -> Mat {
    let (r, i) = (r as i64, i as i64);
    [1 + r, (i % 3) - 1, (r * i) % 5, 2 - r]
}

fn int(r: usize, i: usize) -> i64 {
    ((r * 37 + i * 11) % 23) as i64 - 7
}

/// `f(x0, x1, ..., x(k-1))` folded left over ranks `0..k`, elementwise.
fn fold<T: Copy>(
    k: usize,
    count: usize,
    x: impl Fn(usize, usize) -> T,
    f: impl Fn(T, T) -> T,
) -> Vec<T> {
    (0..count)
        .map(|i| (1..k).fold(x(0, i), |a, r| f(a, x(r, i))))
        .collect()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Products of small primes, so that the gcd over ranks varies.
fn gcd_input(r: usize, i: usize) -> u64 {
    2u64.pow((r % 3 + i % 2) as u32) * 3u64.pow(((r + i) % 4) as u32) * 5u64.pow((i % 3) as u32)
}

fn reductions(c: &mut Checker) {
    let world = c.world.clone();
    let (n, me) = (world.size(), world.rank());
    let matmul_op = UserOp::non_commutative(matmul);
    let sum = |a: i64, b: i64| a.wrapping_add(b);
    for base in BASES {
        // reduce_scatter_block: Sum (built-in) and the matrix product (rank order).
        let k = base;
        let send: Vec<i64> = (0..n * k).map(|i| int(me, i)).collect();
        let full = fold(n, n * k, int, sum);
        let mut recv = vec![0i64; k];
        world
            .reduce_scatter_block(&send, &mut recv, Op::Sum)
            .expect("reduce_scatter_block");
        c.check(
            &format!("reduce_scatter_block Sum k={k}"),
            &recv,
            &full[me * k..(me + 1) * k],
        );
        let mut buf = send.clone();
        world
            .reduce_scatter_block_in_place(&mut buf, Op::Sum)
            .expect("reduce_scatter_block_in_place");
        c.check(
            &format!("reduce_scatter_block_in_place Sum k={k}"),
            &buf[..k],
            &full[me * k..(me + 1) * k],
        );
        c.check(
            &format!("reduce_scatter_block_in_place keeps the rest k={k}"),
            &buf[k..],
            &send[k..],
        );
        let msend: Vec<Mat> = (0..n * k).map(|i| mat(me, i)).collect();
        let mfull = fold(n, n * k, mat, matmul);
        let mut mrecv = vec![[0i64; 4]; k];
        world
            .reduce_scatter_block(&msend, &mut mrecv, matmul_op)
            .expect("reduce_scatter_block");
        c.check(
            &format!("reduce_scatter_block matmul k={k}"),
            &mrecv,
            &mfull[me * k..(me + 1) * k],
        );
        // reduce_scatter with irregular counts.
        let cnt = counts(n, base);
        let total: usize = cnt.iter().sum();
        let start: usize = cnt[..me].iter().sum();
        let send: Vec<i64> = (0..total).map(|i| int(me, i)).collect();
        let full = fold(n, total, int, sum);
        let mut recv = vec![0i64; cnt[me]];
        world
            .reduce_scatter(&send, &mut recv, &cnt, Op::Sum)
            .expect("reduce_scatter");
        let mine = &full[start..start + cnt[me]];
        c.check(&format!("reduce_scatter Sum base={base}"), &recv, mine);
        let mut buf = send.clone();
        world
            .reduce_scatter_in_place(&mut buf, &cnt, Op::Sum)
            .expect("reduce_scatter_in_place");
        c.check(
            &format!("reduce_scatter_in_place Sum base={base}"),
            &buf[..cnt[me]],
            mine,
        );
        let msend: Vec<Mat> = (0..total).map(|i| mat(me, i)).collect();
        let mfull = fold(n, total, mat, matmul);
        let mut mrecv = vec![[0i64; 4]; cnt[me]];
        world
            .reduce_scatter(&msend, &mut mrecv, &cnt, matmul_op)
            .expect("reduce_scatter");
        c.check(
            &format!("reduce_scatter matmul base={base}"),
            &mrecv,
            &mfull[start..start + cnt[me]],
        );

        // scan / exscan: Sum, Max and the matrix product, plain and in place.
        let count = base;
        let send: Vec<i64> = (0..count).map(|i| int(me, i)).collect();
        let incl = fold(me + 1, count, int, sum);
        let mut recv = vec![0i64; count];
        world.scan(&send, &mut recv, Op::Sum).expect("scan");
        c.check(&format!("scan Sum count={count}"), &recv, &incl);
        let mut buf = send.clone();
        world
            .scan_in_place(&mut buf, Op::Sum)
            .expect("scan_in_place");
        c.check(&format!("scan_in_place Sum count={count}"), &buf, &incl);
        let mut recv = vec![0i64; count];
        world.scan(&send, &mut recv, Op::Max).expect("scan");
        c.check(
            &format!("scan Max count={count}"),
            &recv,
            &fold(me + 1, count, int, i64::max),
        );
        // exscan: rank 0's buffer is left as it was.
        let excl = if me == 0 {
            vec![-1i64; count]
        } else {
            fold(me, count, int, sum)
        };
        let mut recv = vec![-1i64; count];
        world.exscan(&send, &mut recv, Op::Sum).expect("exscan");
        c.check(&format!("exscan Sum count={count}"), &recv, &excl);
        let mut buf = send.clone();
        world
            .exscan_in_place(&mut buf, Op::Sum)
            .expect("exscan_in_place");
        let want = if me == 0 { send.clone() } else { excl.clone() };
        c.check(&format!("exscan_in_place Sum count={count}"), &buf, &want);
        let msend: Vec<Mat> = (0..count).map(|i| mat(me, i)).collect();
        let mut mrecv = vec![[0i64; 4]; count];
        world.scan(&msend, &mut mrecv, matmul_op).expect("scan");
        c.check(
            &format!("scan matmul count={count}"),
            &mrecv,
            &fold(me + 1, count, mat, matmul),
        );
        let mut mrecv = vec![[7i64; 4]; count];
        world.exscan(&msend, &mut mrecv, matmul_op).expect("exscan");
        let want = if me == 0 {
            vec![[7i64; 4]; count]
        } else {
            fold(me, count, mat, matmul)
        };
        c.check(&format!("exscan matmul count={count}"), &mrecv, &want);

        // User-defined operations through reduce (every root, in place too) and allreduce.
        let mwant = fold(n, count, mat, matmul);
        for root in roots(n) {
            let mut mrecv = vec![[0i64; 4]; count];
            let r = (me == root).then_some(&mut mrecv[..]);
            world.reduce(&msend, r, matmul_op, root).expect("reduce");
            if me == root {
                c.check(
                    &format!("reduce matmul count={count} root={root}"),
                    &mrecv,
                    &mwant,
                );
                let mut buf = msend.clone();
                world
                    .reduce_in_place(&mut buf, matmul_op, root)
                    .expect("reduce_in_place");
                c.check(
                    &format!("reduce_in_place matmul count={count} root={root}"),
                    &buf,
                    &mwant,
                );
            } else {
                world.reduce(&msend, None, matmul_op, root).expect("reduce");
            }
        }
        let mut mrecv = vec![[0i64; 4]; count];
        world
            .allreduce(&msend, &mut mrecv, matmul_op)
            .expect("allreduce");
        c.check(&format!("allreduce matmul count={count}"), &mrecv, &mwant);
        let mut buf = msend.clone();
        world
            .allreduce_in_place(&mut buf, matmul_op)
            .expect("allreduce_in_place");
        c.check(
            &format!("allreduce_in_place matmul count={count}"),
            &buf,
            &mwant,
        );
        // A commutative user operation: greatest common divisor.
        let gcd_op = UserOp::commutative(gcd);
        let send: Vec<u64> = (0..count).map(|i| gcd_input(me, i)).collect();
        let mut recv = vec![0u64; count];
        world
            .allreduce(&send, &mut recv, gcd_op)
            .expect("allreduce");
        let want = fold(n, count, gcd_input, gcd);
        c.check(&format!("allreduce user gcd count={count}"), &recv, &want);
        let mut recv = vec![0u64; count];
        world.scan(&send, &mut recv, gcd_op).expect("scan");
        let want = fold(me + 1, count, gcd_input, gcd);
        c.check(&format!("scan user gcd count={count}"), &recv, &want);
        let send: Vec<i8> = (0..count).map(|i| (int(me, i) * 9) as i8).collect();
        let mut buf = send.clone();
        world
            .allreduce_in_place(&mut buf, Op::Min)
            .expect("allreduce_in_place");
        c.check(
            &format!("allreduce_in_place Min count={count}"),
            &buf,
            &fold(n, count, |r, i| (int(r, i) * 9) as i8, i8::min),
        );
    }
    c.done("reduce_scatter(_block)/scan/exscan/user operations and in-place reductions");
}

fn locs(c: &mut Checker) {
    let world = c.world.clone();
    let (n, me) = (world.size(), world.rank());
    // Values with many ties (so the lowest-index rule decides), indexed by rank.
    let fv = |r: usize, i: usize| ((r * 3 + i) % 4) as f64 - 1.5;
    let iv = |r: usize, i: usize| ((r + i * 5) % 3) as i32;
    for count in [1usize, 40, 2000] {
        let send: Vec<Loc<f64>> = (0..count)
            .map(|i| Loc {
                value: fv(me, i),
                index: me as i64,
            })
            .collect();
        let pick = |min: bool| -> Vec<Loc<f64>> {
            (0..count)
                .map(|i| {
                    // The first rank (lowest index) holding the extreme value.
                    let best = (0..n).map(|r| fv(r, i)).fold(
                        if min {
                            f64::INFINITY
                        } else {
                            f64::NEG_INFINITY
                        },
                        |a, b| if min { a.min(b) } else { a.max(b) },
                    );
                    let r = (0..n).find(|&r| fv(r, i) == best).expect("a rank");
                    Loc {
                        value: best,
                        index: r as i64,
                    }
                })
                .collect()
        };
        for (op, min) in [(Op::MinLoc, true), (Op::MaxLoc, false)] {
            let mut recv = vec![Loc::default(); count];
            world.allreduce(&send, &mut recv, op).expect("allreduce");
            c.check(
                &format!("allreduce {op:?} f64 count={count}"),
                &recv,
                &pick(min),
            );
            for root in roots(n) {
                let mut recv = vec![Loc::default(); count];
                let r = (me == root).then_some(&mut recv[..]);
                world.reduce(&send, r, op, root).expect("reduce");
                if me == root {
                    c.check(
                        &format!("reduce {op:?} f64 count={count} root={root}"),
                        &recv,
                        &pick(min),
                    );
                }
            }
        }
        // i32 pairs with the index in the value's type; scan keeps the running minimum.
        let send: Vec<Loc<i32>> = (0..count)
            .map(|i| Loc {
                value: iv(me, i),
                index: me as i32,
            })
            .collect();
        let mut recv = vec![Loc::default(); count];
        world.scan(&send, &mut recv, Op::MinLoc).expect("scan");
        let want: Vec<Loc<i32>> = (0..count)
            .map(|i| {
                let best = (0..=me).map(|r| iv(r, i)).min().expect("a rank");
                let r = (0..=me).find(|&r| iv(r, i) == best).expect("a rank");
                Loc {
                    value: best,
                    index: r as i32,
                }
            })
            .collect();
        c.check(&format!("scan MinLoc i32 count={count}"), &recv, &want);
    }
    c.done("MinLoc/MaxLoc");
}

/// Bad arguments are errors before anything is sent. Every rank makes each bad call (as
/// the root where the check is the root's), so no rank waits for another.
fn bad_arguments(c: &mut Checker) {
    let world = c.world.clone();
    let (n, me) = (world.size(), world.rank());
    let one = [1u32];
    let mut big = vec![0u32; 4 * n];
    let ones = vec![1usize; n];
    let seq: Vec<usize> = (0..n).collect();
    c.check_err(
        "gatherv with a root outside the communicator",
        world.gatherv(&one, Some(&mut big), &ones, &seq, n),
        &format!("rank {n} is not in this communicator"),
    );
    c.check_err(
        "gatherv with too few counts",
        world.gatherv(&one, Some(&mut big), &ones[1..], &seq, me),
        "need one entry per rank",
    );
    c.check_err(
        "gatherv with a region past the buffer",
        world.gatherv(&one, Some(&mut big[..n]), &ones, &vec![n; n], me),
        "exceeds the buffer",
    );
    if n > 1 {
        c.check_err(
            "gatherv with overlapping regions",
            world.gatherv(&one, Some(&mut big), &vec![2; n], &seq, me),
            "overlap",
        );
        c.check_err(
            "scatterv with a region past the buffer",
            world.scatterv(Some(&one[..]), &ones, &seq, &mut [0u32], me),
            "send region for rank 1 (1 elements at 1) exceeds the buffer (1 elements)",
        );
        c.check_err(
            "allgather_in_place with a buffer not a multiple of the size",
            world.allgather_in_place(&mut vec![0u32; n + 1]),
            "not a multiple of the size",
        );
        c.check_err(
            "gather_in_place off the root",
            world.gather_in_place(&mut big, (me + 1) % n),
            &format!("only the root (rank {}) works in place", (me + 1) % n),
        );
        c.check_err(
            "scatterv_in_place off the root",
            world.scatterv_in_place(&big, &ones, &seq, (me + 1) % n),
            "scatterv_in_place: only the root",
        );
        c.check_err(
            "reduce_in_place off the root",
            world.reduce_in_place(&mut [1i64], Op::Sum, (me + 1) % n),
            "only the root",
        );
    }
    c.check_err(
        "gatherv whose root's count differs from its send buffer",
        world.gatherv(&[1u32, 2], Some(&mut big), &ones, &seq, me),
        "expected 1",
    );
    c.check_err(
        "gatherv without a receive buffer at the root",
        world.gatherv(&one, None, &ones, &seq, me),
        "the root must pass a receive buffer",
    );
    c.check_err(
        "allgatherv with a send count that differs",
        world.allgatherv(&[1u32, 2, 3], &mut big, &ones, &seq),
        "send buffer holds 3 elements, expected 1",
    );
    c.check_err(
        "reduce_scatter with counts not adding up",
        world.reduce_scatter(&vec![1i64; n + 1], &mut [0i64; 1], &vec![1; n], Op::Sum),
        "must add up",
    );
    c.check_err(
        "reduce_scatter_in_place with counts not adding up",
        world.reduce_scatter_in_place(&mut [1i64; 3], &vec![4; n], Op::Sum),
        "must add up",
    );
    c.check_err(
        "reduce_scatter_block with a short send buffer",
        world.reduce_scatter_block(&vec![1i64; n], &mut [0i64; 2], Op::Sum),
        &format!("send buffer holds {n} elements, expected {}", 2 * n),
    );
    c.check_err(
        "scan with a short receive buffer",
        world.scan(&[1i64, 2], &mut [0i64], Op::Sum),
        "receive buffer holds 1 elements, expected 2",
    );
    c.check_err(
        "allreduce MinLoc on plain integers",
        world.allreduce(&[1i32], &mut [0], Op::MinLoc),
        "MinLoc is not defined for i32",
    );
    c.check_err(
        "exscan Sum on Loc pairs",
        world.exscan(
            &[Loc {
                value: 1.0f32,
                index: 0,
            }],
            &mut [Loc::default()],
            Op::Sum,
        ),
        "use MinLoc, MaxLoc",
    );
    c.done("argument errors");
}

fn main() {
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("collv_check: rmca init failed: {e}");
        std::process::exit(1)
    });
    let world = universe.world();
    let (n, me) = (world.size(), world.rank());
    let mut c = Checker::new(world.clone());
    v_collectives(&mut c);
    reductions(&mut c);
    locs(&mut c);
    bad_arguments(&mut c);
    let mut total = [0u32; 2];
    world
        .allreduce(&[c.failures, c.cases], &mut total, Op::Sum)
        .expect("allreduce");
    if me == 0 {
        println!(
            "collv_check: {n} ranks, {} cases, {} failures",
            total[1], total[0]
        );
    }
    drop(universe);
    std::process::exit(if total[0] == 0 { 0 } else { 1 });
}
