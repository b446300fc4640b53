//! The threaded API ([`rmca::threaded`]) under load, and its speed.
//!
//! `rmca-run -n 3 target/release/examples/threaded stress [THREADS] [ROUNDS] [SEED]`:
//! THREADS threads per rank (default 4), each on a duplicate of the world of its own, run
//! ROUNDS rounds (default 200) of a seeded random mix: ring exchanges, any-source receives
//! from every rank, probes then receives, iprobe loops, barriers, broadcasts, reductions,
//! allgathers, and dup/split/free of communicators, with messages of 0 B to 96 KiB whose
//! every byte, source, tag and length is checked. Every rank draws the same sequence per
//! thread, so the collectives of a communicator come in the same order everywhere. Prints
//! `ok threaded: ...` on rank 0 and exits 1 on any failure.
//!
//! `rmca-run -n 2 target/release/examples/threaded rate THREADS ITERS` (or `plain ITERS`: the
//! single-threaded API): 8-byte one-way latency (ping-pong, every thread at once on a
//! communicator of its own) and message rate (windows of 64 non-blocking 8-byte sends per
//! thread, answered by one reply per window); prints `latency_us` (mean per message, over the
//! threads) and `rate_msgs_per_s` (the threads' messages summed) on rank 0.

use std::process::exit;
use std::time::Instant;

use rmca::coll::Op;
use rmca::framework::rng::mix64;
use rmca::threaded::{self, Comm};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| -> u64 {
        args.get(i)
            .map(|s| {
                s.parse()
                    .unwrap_or_else(|_| usage(&format!("{s} is not a number")))
            })
            .unwrap_or(d)
    };
    match args.first().map(String::as_str) {
        Some("stress") => stress(num(1, 4) as usize, num(2, 200), num(3, 1)),
        Some("rate") => rate(num(1, 1) as usize, num(2, 20000)),
        Some("plain") => plain(num(1, 20000)),
        _ => usage("the first argument is stress, rate or plain"),
    }
}

fn usage(why: &str) -> ! {
    eprintln!("threaded: {why}\nusage: threaded stress [THREADS] [ROUNDS] [SEED] | rate THREADS ITERS | plain ITERS");
    exit(2)
}

fn fail(what: String) -> ! {
    eprintln!("threaded: FAILED {what}");
    exit(1)
}

/// Byte `i` of the message of (seed, src, dst, tag).
fn byte(seed: u64, src: usize, dst: usize, tag: i32, i: usize) -> u8 {
    (mix64(seed ^ ((src as u64) << 40) ^ ((dst as u64) << 20) ^ tag as u64) as usize + i * 31) as u8
}

fn payload(seed: u64, src: usize, dst: usize, tag: i32, len: usize) -> Vec<u8> {
    (0..len).map(|i| byte(seed, src, dst, tag, i)).collect()
}

fn check_payload(what: &str, got: &[u8], seed: u64, src: usize, dst: usize, tag: i32, len: usize) {
    if got.len() != len {
        fail(format!(
            "{what}: {} bytes from {src}, want {len}",
            got.len()
        ));
    }
    if let Some(i) = (0..len).find(|&i| got[i] != byte(seed, src, dst, tag, i)) {
        fail(format!(
            "{what}: byte {i} of the message from {src} tag {tag} is wrong"
        ));
    }
}

fn or_fail<T>(what: &str, r: Result<T, threaded::Error>) -> T {
    r.unwrap_or_else(|e| fail(format!("{what}: {e}")))
}

fn stress(threads: usize, rounds: u64, seed: u64) {
    let job = or_fail("init", threaded::init());
    let world = job.world();
    let (me, n) = (world.rank(), world.size());
    bad_input(&world);
    // Dups in one order on every rank (collectives on the world), before the threads start.
    let comms: Vec<Comm> = (0..threads).map(|_| or_fail("dup", world.dup())).collect();
    let workers: Vec<_> = comms
        .into_iter()
        .enumerate()
        .map(|(t, comm)| std::thread::spawn(move || worker(t, comm, rounds, seed)))
        .collect();
    let mut ops = 0u64;
    for w in workers {
        ops += w
            .join()
            .unwrap_or_else(|_| fail("a worker panicked".into()));
    }
    or_fail("final barrier", world.barrier());
    if me == 0 {
        println!("ok threaded: {n} ranks x {threads} threads, {rounds} rounds, {ops} operations on rank 0");
    }
    or_fail("finalize", job.finalize());
    // A finished owner fails calls; nothing waits for it.
    match world.barrier() {
        Err(threaded::Error::OwnerGone) => {}
        other => fail(format!("a call after finalize gave {other:?}")),
    }
}

/// Every kind of bad argument comes back as its error, and the communicator still works.
fn bad_input(world: &Comm) {
    use threaded::Error as E;
    let (me, n) = (world.rank(), world.size());
    let expect = |what: &str, r: Result<(), E>, ok: fn(&E) -> bool| match r {
        Err(e) if ok(&e) => {}
        other => fail(format!("bad input {what}: {other:?}")),
    };
    expect("dest out of range", world.send(&[1u8], n, 0), |e| {
        matches!(e, E::Rmca(rmca::Error::BadRank { .. }))
    });
    expect("negative tag", world.send(&[1u8], 0usize, -3), |e| {
        matches!(e, E::Rmca(rmca::Error::BadTag(-3)))
    });
    expect(
        "negative source",
        world.recv::<u8>(-2i32, 0).map(|_| ()),
        |e| matches!(e, E::Rmca(rmca::Error::NegativeRank(-2))),
    );
    expect(
        "root out of range",
        world.bcast(&[1u8], n).map(|_| ()),
        |e| matches!(e, E::Rmca(rmca::Error::BadRank { .. })),
    );
    expect("too large", world.send(&vec![0u8; 17 << 20], me, 0), |e| {
        matches!(e, E::TooLarge { .. })
    });
    expect("free the world", world.clone().free(), |e| {
        matches!(e, E::FreeWorld)
    });
    or_fail("self send", world.send(&[1u8, 2, 3], me, 5));
    expect("misaligned", world.recv::<u32>(me, 5).map(|_| ()), |e| {
        matches!(
            e,
            E::Misaligned {
                bytes: 3,
                elem: 4,
                ..
            }
        )
    });
    let d = or_fail("dup", world.dup());
    let kept = d.clone();
    or_fail("free", d.free());
    expect("freed", kept.send(&[1u8], me, 0), |e| {
        matches!(e, E::Freed(_))
    });
    // PROC_NULL completes at once.
    or_fail("send to PROC_NULL", world.send(&[1u8], rmca::PROC_NULL, 0));
    let (v, st) = or_fail("recv from PROC_NULL", world.recv::<u8>(rmca::PROC_NULL, 0));
    if !v.is_empty() || !st.is_proc_null() {
        fail(format!("PROC_NULL receive gave {v:?} {st:?}"));
    }
    refusals(world);
    or_fail("barrier after bad input", world.barrier());
}

/// A collective refused at one member, or whose members' lengths differ, fails on every
/// member (nobody waits for it forever), and the next collectives work.
fn refusals(world: &Comm) {
    use threaded::Error as E;
    let (me, n) = (world.rank(), world.size());
    if n < 2 {
        return;
    }
    let what = |w: &str, r: Result<Vec<u8>, E>, mine: fn(&E) -> bool| match r {
        Err(e) if mine(&e) => {}
        Err(E::FailedElsewhere { rank, .. }) if rank != me => {}
        other => fail(format!("refusal {w}: rank {me} got {other:?}")),
    };
    // Rank 0 names a root out of range, the others root 0.
    let root = if me == 0 { n } else { 0 };
    what(
        "of a bad root at one member",
        world.bcast(&[7u8; 5], root),
        |e| matches!(e, E::Rmca(rmca::Error::BadRank { .. })),
    );
    // An operation the element type lacks at the last member only (bitwise and on f64).
    let r = if me == n - 1 {
        world.allreduce(&[1.0f64], Op::BitAnd).map(|_| Vec::new())
    } else {
        world.allreduce(&[1u64], Op::BitAnd).map(|_| Vec::new())
    };
    what("of an operation the type lacks", r, |e| {
        matches!(e, E::Rmca(rmca::Error::InvalidArgument(_)))
    });
    // The root broadcasts 4 bytes, the others expect 8: every other member fails (in its own
    // schedule, or by notice); the root, which waits for nobody, may have completed.
    let len = if me == 0 { 4 } else { 8 };
    match world.bcast(&vec![1u8; len], 0) {
        Ok(_) if me == 0 => {}
        r => what("of lengths that differ", r, |e| matches!(e, E::Rmca(_))),
    }
    // The communicator keeps working, with the runtime's collectives.
    let sum = or_fail(
        "allreduce after refusals",
        world.allreduce(&[1u32], Op::Sum),
    );
    if sum != [n as u32] {
        fail(format!("allreduce after refusals gave {sum:?}"));
    }
}

/// One thread's rounds on its communicator; the operations done.
fn worker(t: usize, comm: Comm, rounds: u64, seed: u64) -> u64 {
    let (me, n) = (comm.rank(), comm.size());
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    let mut ops = 0;
    for round in 0..rounds {
        let r = mix64(seed ^ ((t as u64) << 32) ^ round);
        let tag = (round % 30000) as i32;
        let len = if r.is_multiple_of(97) {
            96 << 10
        } else {
            (r >> 8) as usize % 2048
        };
        let s = seed ^ round;
        let what = format!("thread {t} round {round}");
        match r % 11 {
            0 | 1 => {
                // Ring exchange.
                let (got, st) = or_fail(
                    &what,
                    comm.sendrecv::<u8, u8>(
                        &payload(s, me, right, tag, len),
                        right,
                        tag,
                        left,
                        tag,
                    ),
                );
                if st.source != left || st.tag != tag {
                    fail(format!("{what}: ring status {st:?}"));
                }
                check_payload(&what, &got, s, left, me, tag, len);
            }
            2 => {
                // Any-source receives of a message from every rank (itself included).
                let sends: Vec<_> = (0..n)
                    .map(|d| or_fail(&what, comm.isend(&payload(s, me, d, tag, len / 4), d, tag)))
                    .collect();
                let mut seen = vec![false; n];
                for _ in 0..n {
                    let (got, st) = or_fail(&what, comm.recv::<u8>(rmca::ANY_SOURCE, tag));
                    if st.source >= n || seen[st.source] {
                        fail(format!("{what}: any-source status {st:?}"));
                    }
                    seen[st.source] = true;
                    check_payload(&what, &got, s, st.source, me, tag, len / 4);
                }
                for q in sends {
                    or_fail(&what, q.wait());
                }
            }
            3 => {
                // Probe, then receive what it saw.
                or_fail(
                    &what,
                    comm.send(&payload(s, me, right, tag, len), right, tag),
                );
                let st = or_fail(&what, comm.probe(left, tag));
                if st.bytes != len || st.source != left {
                    fail(format!(
                        "{what}: probe status {st:?}, want {len} bytes from {left}"
                    ));
                }
                let (got, _) = or_fail(&what, comm.recv::<u8>(left, tag));
                check_payload(&what, &got, s, left, me, tag, len);
            }
            4 => {
                // An iprobe loop, then a non-blocking receive tested to completion.
                or_fail(
                    &what,
                    comm.send(&payload(s, me, right, tag, len), right, tag),
                );
                while or_fail(&what, comm.iprobe(left, rmca::ANY_TAG)).is_none() {
                    std::thread::yield_now();
                }
                let mut q = or_fail(&what, comm.irecv::<u8>(left, rmca::ANY_TAG));
                let (got, st) = loop {
                    if let Some(done) = q.test() {
                        break or_fail(&what, done);
                    }
                    std::thread::yield_now();
                };
                if st.tag != tag {
                    fail(format!("{what}: any-tag status {st:?}"));
                }
                check_payload(&what, &got, s, left, me, tag, len);
            }
            5 => or_fail(&what, comm.barrier()),
            6 => {
                let root = (r >> 20) as usize % n;
                let data = payload(s, root, root, tag, len);
                // Every member passes the root's length (MPI's count); only the root's bytes count.
                let mine = if me == root {
                    data.clone()
                } else {
                    vec![0u8; len]
                };
                let got = or_fail(&what, comm.bcast(&mine, root));
                if got != data {
                    fail(format!("{what}: bcast from {root} differs"));
                }
            }
            7 => {
                let v: Vec<u64> = (0..len / 8 + 1).map(|i| (me * 1000 + i) as u64).collect();
                let got = or_fail(&what, comm.allreduce(&v, Op::Sum));
                let want: Vec<u64> = (0..v.len())
                    .map(|i| (0..n).map(|q| (q * 1000 + i) as u64).sum())
                    .collect();
                if got != want {
                    fail(format!("{what}: allreduce differs"));
                }
                let root = (r >> 24) as usize % n;
                let m = or_fail(&what, comm.reduce(&[me as i32 + 1], Op::Max, root));
                if m != (me == root).then(|| vec![n as i32]) {
                    fail(format!("{what}: reduce to {root} gave {m:?}"));
                }
            }
            8 => {
                let got = or_fail(&what, comm.allgather(&[me as u32, round as u32]));
                let want: Vec<u32> = (0..n).flat_map(|q| [q as u32, round as u32]).collect();
                if got != want {
                    fail(format!("{what}: allgather {got:?}"));
                }
            }
            9 => {
                // A dup used, then freed.
                let d = or_fail(&what, comm.dup());
                let (got, _) = or_fail(
                    &what,
                    d.sendrecv::<u32, u32>(&[me as u32], right, 1, left, 1),
                );
                if got != [left as u32] {
                    fail(format!("{what}: dup exchange {got:?}"));
                }
                or_fail(&what, d.free());
            }
            _ => {
                // A split by parity, used, then freed.
                let part = or_fail(&what, comm.split(Some((me % 2) as u32), -(me as i32)));
                let part = part.unwrap_or_else(|| fail(format!("{what}: no part")));
                let members = (0..n).filter(|q| q % 2 == me % 2).count();
                if part.size() != members {
                    fail(format!("{what}: split size {} want {members}", part.size()));
                }
                let sum = or_fail(&what, part.allreduce(&[1u32], Op::Sum));
                if sum != [members as u32] {
                    fail(format!("{what}: split sum {sum:?}"));
                }
                // Ranks by descending key: the highest rank of the parity first.
                let first = or_fail(&what, part.bcast(&[me as u32], 0));
                let top = (0..n).filter(|q| q % 2 == me % 2).max().unwrap_or(0);
                if first != [top as u32] {
                    fail(format!("{what}: split rank 0 is {first:?}, want {top}"));
                }
                or_fail(&what, part.free());
            }
        }
        ops += 1;
    }
    ops
}

/// Latency and message rate through the handles, `threads` threads per rank at once.
fn rate(threads: usize, iters: u64) {
    let job = or_fail("init", threaded::init());
    let world = job.world();
    if world.size() < 2 {
        usage("rate needs 2 ranks");
    }
    let me = world.rank();
    let comms: Vec<Comm> = (0..threads).map(|_| or_fail("dup", world.dup())).collect();
    let run = |f: fn(&Comm, u64) -> f64| -> Vec<f64> {
        or_fail("barrier", world.barrier());
        let ws: Vec<_> = comms
            .iter()
            .cloned()
            .map(|c| std::thread::spawn(move || f(&c, iters)))
            .collect();
        ws.into_iter().map(|w| w.join().expect("worker")).collect()
    };
    let lat = run(pingpong);
    let rates = run(window);
    if me == 0 {
        let mean = lat.iter().sum::<f64>() / lat.len() as f64;
        println!("latency_us threads={threads} {mean:.3}");
        println!(
            "rate_msgs_per_s threads={threads} {:.0}",
            rates.iter().sum::<f64>()
        );
    }
    or_fail("finalize", job.finalize());
}

/// One-way 8 B latency in microseconds (ranks 0 and 1; others idle).
fn pingpong(c: &Comm, iters: u64) -> f64 {
    let me = c.rank();
    if me > 1 {
        return 0.0;
    }
    let buf = [0u8; 8];
    let t = Instant::now();
    for _ in 0..iters {
        if me == 0 {
            or_fail("ping", c.send(&buf, 1, 1));
            or_fail("pong", c.recv::<u8>(1, 1));
        } else {
            or_fail("ping", c.recv::<u8>(0, 1));
            or_fail("pong", c.send(&buf, 0, 1));
        }
    }
    t.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64
}

const WINDOW: u64 = 64;

/// 8 B messages per second from rank 0 to rank 1, windows of [`WINDOW`].
fn window(c: &Comm, iters: u64) -> f64 {
    let me = c.rank();
    if me > 1 {
        return 0.0;
    }
    let buf = [0u8; 8];
    let windows = (iters / WINDOW).max(1);
    let t = Instant::now();
    for _ in 0..windows {
        if me == 0 {
            let qs: Vec<_> = (0..WINDOW)
                .map(|_| or_fail("isend", c.isend(&buf, 1, 2)))
                .collect();
            for q in qs {
                or_fail("wait", q.wait());
            }
            or_fail("ack", c.recv::<u8>(1, 3));
        } else {
            let qs: Vec<_> = (0..WINDOW)
                .map(|_| or_fail("irecv", c.irecv::<u8>(0, 2)))
                .collect();
            for q in qs {
                or_fail("wait", q.wait());
            }
            or_fail("ack", c.send(&buf, 0, 3));
        }
    }
    (windows * WINDOW) as f64 / t.elapsed().as_secs_f64()
}

/// The same two figures through the single-threaded API, for comparison.
fn plain(iters: u64) {
    let universe = rmca::init().unwrap_or_else(|e| fail(format!("init: {e}")));
    let world = universe.world();
    let me = world.rank();
    let ok = |what: &str, r: rmca::Result<()>| r.unwrap_or_else(|e| fail(format!("{what}: {e}")));
    let buf = [0u8; 8];
    let mut rbuf = [0u8; 8];
    ok("barrier", world.barrier());
    let t = Instant::now();
    if me < 2 {
        for _ in 0..iters {
            if me == 0 {
                ok("ping", world.send(&buf, 1usize, 1));
                ok("pong", world.recv(&mut rbuf, 1usize, 1).map(|_| ()));
            } else {
                ok("ping", world.recv(&mut rbuf, 0usize, 1).map(|_| ()));
                ok("pong", world.send(&buf, 0usize, 1));
            }
        }
    }
    let lat = t.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64;
    ok("barrier", world.barrier());
    let windows = (iters / WINDOW).max(1);
    let mut rbufs = vec![[0u8; 8]; WINDOW as usize];
    let t = Instant::now();
    if me < 2 {
        for _ in 0..windows {
            if me == 0 {
                ok(
                    "window",
                    rmca::scope(|s| {
                        let qs = (0..WINDOW)
                            .map(|_| world.isend(s, &buf, 1usize, 2))
                            .collect::<rmca::Result<Vec<_>>>()?;
                        rmca::Request::complete_all(qs)
                    }),
                );
                ok("ack", world.recv(&mut rbuf, 1usize, 3).map(|_| ()));
            } else {
                ok(
                    "window",
                    rmca::scope(|s| {
                        let qs = rbufs
                            .iter_mut()
                            .map(|b| world.irecv(s, b, 0usize, 2))
                            .collect::<rmca::Result<Vec<_>>>()?;
                        rmca::Request::complete_all(qs)
                    }),
                );
                ok("ack", world.send(&buf, 0usize, 3));
            }
        }
    }
    let rate = (windows * WINDOW) as f64 / t.elapsed().as_secs_f64();
    if me == 0 {
        println!("latency_us plain {lat:.3}");
        println!("rate_msgs_per_s plain {rate:.0}");
    }
    ok("finalize", universe.finalize().map(|_| ()));
}
