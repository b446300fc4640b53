//! Traffic shaped to exercise every btl-rc mode, run under rmca-run by `tests/tests/rc.rs`.
//! `rc_check <cases>` with cases `alltoall`, `stream`, `flood`, `large`, `window`
//! (comma-separated) or `all` (default); prints
//! `ok <case>` on rank 0 and exits non-zero on any failure.
//!
//! - `alltoall`: every rank posts its receives and then sends to every other rank at once,
//!   with no barrier before (so on-demand connections are attempted from both sides at the
//!   same time), messages from 0 bytes to past the eager limit and the striping threshold.
//! - `stream`: a burst of small non-blocking sends to the next rank (the send-WQE budget runs
//!   out, so they queue and coalesce; after the eager RDMA threshold they go through the ring),
//!   received in order, half by ANY_SOURCE.
//! - `flood`: rank 0 stops progressing for a while (after connections exist) while every other
//!   rank sends it a burst of small messages: receive buffers (per-peer credits or the SRQ)
//!   run out, so credits stall or the SRQ's low watermark fires, and sends queue and coalesce.
//! - `window`: rank 1 first sends rank 0 enough messages for an eager RDMA ring, then, while
//!   rank 0 does not progress, a stream of tiny messages: the first go through the ring (on the
//!   per-peer queue's QP), the rest queue and coalesce into bundles of thousands of messages on
//!   the largest queue class's QP (the shared queue with `P,...:S,...`). Rank 0 then reads its
//!   receive CQ (the bundles) before the ring, so the bundles arrive far ahead of the ring's
//!   messages; the sender's sequence window must keep them within the receiver's reach.
//! - `large`: rendezvous in both directions, the same buffer sent twice (a registration cache
//!   hit) and a buffer freed and allocated again (never a stale registration).

use rmca::{Communicator, Request, ANY_SOURCE};

fn check(cond: bool, what: &str) {
    if !cond {
        eprintln!("rank check failed: {what}");
        std::process::exit(3);
    }
}

/// Deterministic content of message `i` of `len` bytes from `src` to `dst`.
fn content(src: usize, dst: usize, i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k.wrapping_mul(7) ^ i.wrapping_mul(131) ^ (src * 17 + dst * 3)) as u8)
        .collect()
}

/// Sizes around btl-rc's limits: 0, tiny, below/at/after the 12 KiB eager limit, the 16 KiB
/// striping threshold, the 64 KiB fragment size, and a rendezvous.
const SIZES: &[usize] = &[
    0, 1, 24, 1000, 4000, 11_000, 12_300, 20_000, 70_000, 600_000,
];

fn alltoall(w: &Communicator, rounds: usize) {
    let (me, n) = (w.rank(), w.size());
    for round in 0..rounds {
        let mut bufs: Vec<(usize, usize, Vec<u8>)> = Vec::new();
        for src in (0..n).filter(|&s| s != me) {
            for (si, &len) in SIZES.iter().enumerate() {
                bufs.push((src, si, vec![0xEE; len]));
            }
        }
        let sends: Vec<(usize, usize, Vec<u8>)> = (0..n)
            .filter(|&d| d != me)
            .flat_map(|d| {
                SIZES
                    .iter()
                    .enumerate()
                    .map(move |(si, &len)| (d, si, content(me, d, round * 100 + si, len)))
            })
            .collect();
        rmca::scope(|s| {
            let mut reqs: Vec<Request<'_>> = Vec::new();
            for (src, si, b) in bufs.iter_mut() {
                reqs.push(w.irecv(s, &mut b[..], *src, *si as i32).unwrap());
            }
            for (d, si, data) in &sends {
                reqs.push(w.isend(s, &data[..], *d, *si as i32).unwrap());
            }
            Request::wait_all(reqs).unwrap();
        });
        for (src, si, b) in &bufs {
            check(
                *b == content(*src, me, round * 100 + si, SIZES[*si]),
                &format!("alltoall round {round} from {src} size {}", SIZES[*si]),
            );
        }
    }
}

fn stream(w: &Communicator, count: usize) {
    let (me, n) = (w.rank(), w.size());
    if n < 2 {
        return;
    }
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let len_of = |i: usize| 8 + (i * 13) % 57;
    let out: Vec<Vec<u8>> = (0..count)
        .map(|i| content(me, next, i, len_of(i)))
        .collect();
    // First half in batches with the receives posted (expected messages, a steady stream once
    // connected: what an eager RDMA ring serves), second half in one burst that arrives
    // unexpected and is taken by ANY_SOURCE, which must still see it in order.
    let half = count / 2;
    let batch = 16;
    for start in (0..half).step_by(batch) {
        let end = (start + batch).min(half);
        let mut got: Vec<Vec<u8>> = (start..end).map(|i| vec![0; len_of(i)]).collect();
        rmca::scope(|s| {
            let mut reqs: Vec<Request<'_>> = Vec::new();
            for b in got.iter_mut() {
                reqs.push(w.irecv(s, &mut b[..], prev, 5).unwrap());
            }
            // Same tag for every message: consecutive ones share most of the match header.
            for data in &out[start..end] {
                reqs.push(w.isend(s, &data[..], next, 5).unwrap());
            }
            Request::wait_all(reqs).unwrap();
        });
        for (k, b) in got.iter().enumerate() {
            let i = start + k;
            check(
                *b == content(prev, me, i, len_of(i)),
                "stream order (posted)",
            );
        }
    }
    rmca::scope(|s| {
        let reqs: Vec<Request<'_>> = out[half..]
            .iter()
            .map(|d| w.isend(s, &d[..], next, 5).unwrap())
            .collect();
        for i in half..count {
            let mut b = vec![0u8; len_of(i)];
            let st = w.recv(&mut b[..], ANY_SOURCE, 5).unwrap();
            check(
                st.source == prev && st.bytes == len_of(i),
                "ANY_SOURCE status",
            );
            check(
                b == content(prev, me, i, len_of(i)),
                "stream order (ANY_SOURCE)",
            );
        }
        Request::wait_all(reqs).unwrap();
    });
}

fn flood(w: &Communicator, count: usize) {
    let (me, n) = (w.rank(), w.size());
    if n < 2 {
        return;
    }
    // Connect rank 0 with everyone first: a sleeping rank could not answer a connection
    // request, and the point is exhausting receive resources, not connection timeouts.
    let mut token = [0u8; 1];
    if me == 0 {
        for src in 1..n {
            w.recv(&mut token, src, 30).unwrap();
            w.send(&token, src, 31).unwrap();
        }
        // Not progressing: whatever the peers send now waits in receive buffers or in
        // their send queues (the soft provider's RC retries receiver-not-ready forever).
        std::thread::sleep(std::time::Duration::from_millis(400));
        for src in 1..n {
            for i in 0..count {
                let len = 16 + i % 100;
                let mut b = vec![0u8; len];
                let st = w.recv(&mut b[..], src, 32).unwrap();
                check(
                    st.bytes == len && b == content(src, 0, i, len),
                    "flood order and content",
                );
            }
        }
    } else {
        w.send(&token, 0, 30).unwrap();
        w.recv(&mut token, 0, 31).unwrap();
        let out: Vec<Vec<u8>> = (0..count)
            .map(|i| content(me, 0, i, 16 + i % 100))
            .collect();
        rmca::scope(|s| {
            let reqs: Vec<Request<'_>> = out
                .iter()
                .map(|d| w.isend(s, &d[..], 0, 32).unwrap())
                .collect();
            Request::wait_all(reqs).unwrap();
        });
    }
}

fn window(w: &Communicator, count: u32) {
    let me = w.rank();
    if w.size() < 2 || me > 1 {
        return;
    }
    let mut token = [0u8; 1];
    if me == 0 {
        // Past btl_rc_eager_rdma_threshold (16): rank 0 opens a ring for rank 1.
        for _ in 0..40 {
            w.recv(&mut token, 1, 40).unwrap();
        }
        // The ring's address travels before this reply on the same QP.
        w.send(&token, 1, 41).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let mut got = vec![u32::MAX; count as usize];
        rmca::scope(|s| {
            let reqs: Vec<Request<'_>> = got
                .chunks_mut(1)
                .map(|slot| w.irecv(s, slot, 1, 42).unwrap())
                .collect();
            Request::wait_all(reqs).unwrap();
        });
        check(
            got.iter().enumerate().all(|(i, &v)| v == i as u32),
            "window: every message once, in order",
        );
    } else {
        for _ in 0..40 {
            w.send(&token, 0, 40).unwrap();
        }
        w.recv(&mut token, 0, 41).unwrap();
        let out: Vec<u32> = (0..count).collect();
        rmca::scope(|s| {
            let reqs: Vec<Request<'_>> = out
                .chunks(1)
                .map(|v| w.isend(s, v, 0, 42).unwrap())
                .collect();
            Request::wait_all(reqs).unwrap();
        });
    }
}

fn large(w: &Communicator, bytes: usize) {
    let (me, n) = (w.rank(), w.size());
    if n < 2 || me > 1 {
        return;
    }
    let peer = 1 - me;
    let exchange = |data: &[u8], round: usize| {
        let mut got = vec![0u8; bytes];
        w.sendrecv(
            data,
            peer,
            20 + round as i32,
            &mut got[..],
            peer,
            20 + round as i32,
        )
        .unwrap();
        check(
            got == content(peer, me, round, bytes),
            &format!("large exchange round {round}"),
        );
    };
    let data = content(me, peer, 0, bytes);
    exchange(&data, 0);
    drop(data);
    // A new allocation, likely at the address just freed, with other content.
    let data = content(me, peer, 1, bytes);
    exchange(&data, 1);
    let data2 = content(me, peer, 2, bytes);
    exchange(&data2, 2);
    drop(data);
    drop(data2);
    let data = content(me, peer, 3, bytes);
    exchange(&data, 3);
}

fn main() {
    let case = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let u = rmca::init().unwrap_or_else(|e| {
        eprintln!("init failed: {e}");
        std::process::exit(2)
    });
    let w = u.world();
    // One case, `all`, or several separated by commas.
    let run = |name: &str| case == "all" || case.split(',').any(|c| c == name);
    if run("alltoall") {
        alltoall(&w, 2);
    }
    if run("stream") {
        stream(&w, 3000);
    }
    if run("flood") {
        flood(&w, 300);
    }
    if run("large") {
        large(&w, 3 << 20);
    }
    if run("window") {
        window(&w, 80_000);
    }
    w.barrier().unwrap();
    if w.rank() == 0 {
        println!("ok {case}");
    }
    if let Err(e) = u.finalize() {
        eprintln!("finalize failed: {e}");
        std::process::exit(4);
    }
}
