//! Multi-process point-to-point checks, run under rmca-run by `tests/tests/p2p.rs`.
//! `p2p_check <case>`; prints `ok <case>` on rank 0 and exits non-zero on any failure.

use rmca::{Communicator, Error, Request, Status, ANY_SOURCE, ANY_TAG, PROC_NULL};
use rmca_framework::pml::StatusError;

fn check(cond: bool, what: &str) {
    if !cond {
        eprintln!("rank check failed: {what}");
        std::process::exit(3);
    }
}

/// Messages from one sender with one tag arrive in send order, and wildcards match the
/// earliest eligible message.
fn ordering(w: &Communicator) {
    let (me, n) = (w.rank(), w.size());
    if me == 0 {
        for src in 1..n {
            // Tags 5, 6, 5, 6... from each sender: tag 6 receives must see 1, 3, 5...
            for i in 0..50u32 {
                let mut v = [0u32; 1];
                let st = w.recv(&mut v, src, 6).unwrap();
                check(
                    v[0] == 2 * i + 1 && st.tag == 6 && st.source == src,
                    "per-source tag order",
                );
            }
            for i in 0..50u32 {
                let mut v = [0u32; 1];
                w.recv(&mut v, src, ANY_TAG).unwrap();
                check(
                    v[0] == 2 * i,
                    "ANY_TAG takes the earliest remaining message",
                );
            }
        }
        // ANY_SOURCE: from each source, still in order.
        let mut next = vec![0u32; n];
        for _ in 0..(n - 1) * 20 {
            let mut v = [0u32; 1];
            let st = w.recv(&mut v, ANY_SOURCE, 9).unwrap();
            check(
                v[0] == next[st.source],
                "ANY_SOURCE preserves per-source order",
            );
            next[st.source] += 1;
        }
    } else {
        for i in 0..100u32 {
            w.send(&[i], 0, if i % 2 == 0 { 5 } else { 6 }).unwrap();
        }
        for i in 0..20u32 {
            w.send(&[i], 0, 9).unwrap();
        }
    }
}

fn truncation(w: &Communicator) {
    if w.size() < 2 {
        return;
    }
    if w.rank() == 0 {
        let mut small = [0u8; 4];
        // Guard bytes around the receive buffer must survive.
        let mut guarded = [0xAAu8; 12];
        let r = w.recv(&mut guarded[4..8], 1, 1);
        match r {
            Err(Error::Status {
                error:
                    StatusError::Truncated {
                        message_len,
                        received,
                    },
                status,
            }) => {
                check(
                    message_len == 100 && received == 4 && status.bytes == 4,
                    "truncated status",
                );
            }
            other => check(false, &format!("expected truncation, got {other:?}")),
        }
        check(
            guarded[..4] == [0xAA; 4] && guarded[8..] == [0xAA; 4],
            "no write past the buffer",
        );
        check(guarded[4..8] == [0, 1, 2, 3], "prefix delivered");
        // The large (rendezvous) case too.
        let r = w.recv(&mut small, 1, 2);
        check(
            matches!(
                r,
                Err(Error::Status {
                    error: StatusError::Truncated { .. },
                    ..
                })
            ),
            "rendezvous truncation",
        );
        w.send(&[1u8], 1, 3).unwrap();
    } else if w.rank() == 1 {
        let v: Vec<u8> = (0..100).collect();
        w.send(&v, 0, 1).unwrap();
        w.send(&vec![7u8; 1 << 20], 0, 2).unwrap();
        let mut ack = [0u8];
        w.recv(&mut ack, 0, 3).unwrap();
    }
}

fn self_and_zero(w: &Communicator) {
    let me = w.rank();
    let mut empty = [0u8; 0];
    let st = rmca::scope(|s| {
        let r = w.irecv(s, &mut empty[..], me, 4).unwrap();
        w.send(&[0u8; 0][..], me, 4).unwrap();
        r.wait().unwrap()
    });
    check(st.bytes == 0 && st.source == me, "zero-byte self message");
    let mut buf = vec![0u64; 300_000];
    let data: Vec<u64> = (0..300_000).collect();
    rmca::scope(|s| {
        let r = w.irecv(s, &mut buf, me, 5).unwrap();
        w.send(&data, me, 5).unwrap();
        r.wait().unwrap();
    });
    check(buf == data, "large self message");
    if w.size() > 1 {
        let peer = (me + 1) % w.size();
        let from = (me + w.size() - 1) % w.size();
        let mut empty: [u8; 0] = [];
        let st = w
            .sendrecv(&[0u8; 0][..], peer, 6, &mut empty, from, 6)
            .unwrap();
        check(
            st.bytes == 0 && st.source == from,
            "zero-byte message between ranks",
        );
    }
}

fn large(w: &Communicator, bytes: usize) {
    if w.size() < 2 || w.rank() > 1 {
        return;
    }
    if w.rank() == 0 {
        let v: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
        w.send(&v, 1, 7).unwrap();
    } else {
        let mut v = vec![0u8; bytes];
        let st = w.recv(&mut v, 0, 7).unwrap();
        check(st.bytes == bytes, "large message length");
        check(
            v.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8),
            "large message content",
        );
    }
}

/// Every size around btl-shm's protocol boundaries (streamed records from 4 KiB, the 64 KiB
/// eager fragment, the rendezvous copy pipeline below 1 MiB, CMA above), both ways at once,
/// receives posted before the message (written in place as it arrives) and after it
/// (unexpected, delivered whole), and truncated ones.
fn medium_sizes(w: &Communicator) {
    if w.size() < 2 || w.rank() > 1 {
        return;
    }
    const SIZES: [usize; 15] = [
        4095, 4096, 4097, 8191, 16_384, 32_768, 32_833, 65_536, 65_584, 65_585, 100_003, 262_144,
        1_048_575, 1_048_576, 1_200_001,
    ];
    let peer = 1 - w.rank();
    let byte = |n: usize, i: usize, from: usize| ((i * 7 + n + from * 131) % 251) as u8;
    // A barrier of the pair (other ranks have left this test): what each sent before it has
    // reached the other, since messages from one source arrive in order.
    let sync = || {
        w.sendrecv::<u8, u8>(&[], peer, 9999, &mut [], peer, 9999)
            .unwrap();
    };
    for (k, &n) in SIZES.iter().enumerate() {
        let tag = k as i32;
        let out: Vec<u8> = (0..n).map(|i| byte(n, i, w.rank())).collect();
        // Posted first: the peer's message is matched on arrival.
        let mut early = vec![0u8; n];
        let st = rmca::scope(|sc| {
            let r = w.irecv(sc, &mut early, peer, tag).unwrap();
            sync();
            let s = w.isend(sc, &out, peer, tag).unwrap();
            let st = r.wait().unwrap();
            s.wait().unwrap();
            st
        });
        check(st.bytes == n, "posted-first length");
        check(
            early
                .iter()
                .enumerate()
                .all(|(i, &b)| b == byte(n, i, peer)),
            "posted-first content",
        );
        // Posted after the peer's message arrived (the sync orders them); then the same
        // into a buffer one third short.
        rmca::scope(|sc| {
            let s = w.isend(sc, &out, peer, 1000 + tag).unwrap();
            let s2 = w.isend(sc, &out, peer, 2000 + tag).unwrap();
            sync();
            let mut late = vec![0u8; n];
            let st = w.recv(&mut late, peer, 1000 + tag).unwrap();
            check(st.bytes == n, "unexpected length");
            check(
                late.iter().enumerate().all(|(i, &b)| b == byte(n, i, peer)),
                "unexpected content",
            );
            let mut short = vec![0xEEu8; n];
            let keep = n - n / 3;
            match w.recv(&mut short[..keep], peer, 2000 + tag) {
                Err(Error::Status {
                    error:
                        StatusError::Truncated {
                            message_len,
                            received,
                        },
                    ..
                }) => check(message_len == n && received == keep, "truncated lengths"),
                other => check(
                    false,
                    &format!("truncation of {n} B not reported: {other:?}"),
                ),
            }
            check(
                short[..keep]
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == byte(n, i, peer)),
                "truncated content",
            );
            check(
                short[keep..].iter().all(|&b| b == 0xEE),
                "wrote past a short buffer",
            );
            s.wait().unwrap();
            s2.wait().unwrap();
        });
    }
}

/// `sendrecv` with different tags and sizes on the two sides: a short receive is posted after
/// its send (which may be a rendezvous), a long one before it; neither order can deadlock.
fn sendrecv_shapes(w: &Communicator) {
    if w.size() < 2 || w.rank() > 1 {
        return;
    }
    const BIG: usize = 3 << 20; // a rendezvous, CMA or not
    let (me, peer) = (w.rank(), 1 - w.rank());
    let big: Vec<u8> = (0..BIG).map(|i| (i % 253) as u8).collect();
    // Rank 0 sends big and receives 8 bytes (send first); rank 1 the reverse (receive first).
    let st = if me == 0 {
        let mut small = [0u8; 8];
        let st = w.sendrecv(&big, peer, 1, &mut small, peer, 2).unwrap();
        check(small == [7u8; 8], "short receive of an asymmetric sendrecv");
        st
    } else {
        let mut got = vec![0u8; BIG];
        let st = w.sendrecv(&[7u8; 8], peer, 2, &mut got, peer, 1).unwrap();
        check(got == big, "long receive of an asymmetric sendrecv");
        st
    };
    check(st.source == peer, "sendrecv status source");
    // Both sides send big and post a short receive after it: both rendezvous sends must
    // progress while each side waits for its receive, which ends truncated.
    let mut short = [0u8; 16];
    match w.sendrecv(&big, peer, 3, &mut short, peer, 3) {
        Err(Error::Status {
            error:
                StatusError::Truncated {
                    message_len,
                    received,
                },
            ..
        }) => check(
            message_len == BIG && received == 16,
            "truncated sendrecv lengths",
        ),
        other => check(false, &format!("truncated sendrecv: {other:?}")),
    }
    check(short[..] == big[..16], "truncated sendrecv content");
}

fn many_outstanding(w: &Communicator, count: usize) {
    if w.size() < 2 || w.rank() > 1 {
        return;
    }
    let peer = 1 - w.rank();
    let send: Vec<u32> = (0..count as u32).collect();
    let mut recv = vec![u32::MAX; count];
    rmca::scope(|s| {
        let mut reqs: Vec<Request<'_>> = Vec::with_capacity(2 * count);
        for (i, slot) in recv.chunks_mut(1).enumerate() {
            reqs.push(w.irecv(s, slot, peer, (i % 1000) as i32).unwrap());
        }
        for (i, v) in send.chunks(1).enumerate() {
            reqs.push(w.isend(s, v, peer, (i % 1000) as i32).unwrap());
        }
        Request::wait_all(reqs).unwrap();
    });
    check(
        recv == send,
        "every outstanding receive got its own message in order",
    );
}

fn isolation(w: &Communicator) {
    let d = w.dup().unwrap();
    let n = w.size();
    if n < 2 {
        return;
    }
    if w.rank() == 0 {
        // Post on the dup first: the world message must not match it.
        let mut a = [0u32];
        let mut b = [0u32];
        rmca::scope(|s| {
            let rd = d.irecv(s, &mut a, 1, 1).unwrap();
            w.recv(&mut b, 1, 1).unwrap();
            rd.wait().unwrap();
        });
        check(a[0] == 222 && b[0] == 111, "dup has its own matching space");
    } else if w.rank() == 1 {
        w.send(&[111u32], 0, 1).unwrap();
        d.send(&[222u32], 0, 1).unwrap();
    }
    // split: even and odd ranks; ranks ordered by descending key.
    let color = (w.rank() % 2) as u32;
    let s = w.split(Some(color), -(w.rank() as i32)).unwrap().unwrap();
    let expect_size = (n + 1 - color as usize) / 2;
    check(s.size() == expect_size, "split size");
    let mut sum = [0u64];
    if s.rank() == 0 {
        sum[0] = w.rank() as u64;
        for r in 1..s.size() {
            let mut v = [0u64];
            s.recv(&mut v, r, 2).unwrap();
            sum[0] += v[0];
        }
        let expect: u64 = (0..n as u64).filter(|r| r % 2 == color as u64).sum();
        check(sum[0] == expect, "split members");
        check(
            w.rank() == (0..n).filter(|r| r % 2 == color as usize).max().unwrap(),
            "key order",
        );
    } else {
        s.send(&[w.rank() as u64], 0, 2).unwrap();
    }
    let none = w
        .split(if w.rank() == 0 { None } else { Some(1) }, 0)
        .unwrap();
    check(
        none.is_none() == (w.rank() == 0),
        "split with undefined color",
    );
}

fn ssend_probe(w: &Communicator) {
    if w.size() < 2 || w.rank() > 1 {
        return;
    }
    if w.rank() == 0 {
        w.ssend(&[1u16, 2, 3], 1, 8).unwrap();
    } else {
        let st = w.probe(0, 8).unwrap();
        check(
            st.bytes == 6 && st.source == 0 && st.tag == 8,
            "probe status",
        );
        let mut v = vec![0u16; st.count::<u16>()];
        w.recv(&mut v, 0, 8).unwrap();
        check(v == [1, 2, 3], "probe then receive");
        check(w.iprobe(0, 8).unwrap().is_none(), "message consumed");
    }
}

/// `Request::complete_all` over mixed requests: eager sends done at once, rendezvous ones,
/// receives; an error (a truncated receive) comes back after every request completed.
fn complete_all(w: &Communicator) {
    if w.size() < 2 || w.rank() > 1 {
        return;
    }
    const BIG: usize = 200 << 10; // rendezvous on shm
    if w.rank() == 0 {
        let (mut a, mut big, mut short, mut d) = ([0u8; 8], vec![0u8; BIG], [0u8; 4], [0u8; 8]);
        let outcome = rmca::scope(|s| {
            let reqs = vec![
                w.irecv(s, &mut a, 1, 1).unwrap(),
                w.irecv(s, &mut big, 1, 2).unwrap(),
                w.irecv(s, &mut short, 1, 3).unwrap(),
                w.irecv(s, &mut d, 1, 4).unwrap(),
            ];
            Request::complete_all(reqs)
        });
        match outcome {
            Err(Error::Status {
                error: StatusError::Truncated { message_len, .. },
                ..
            }) => check(message_len == 100, "the truncated receive's length"),
            other => check(false, &format!("expected a truncation, got {other:?}")),
        }
        check(a == *b"eager-1!", "eager receive");
        check(
            big.iter().enumerate().all(|(i, &v)| v == i as u8),
            "rendezvous receive",
        );
        check(short == [7; 4], "truncated receive keeps its prefix");
        check(
            d == *b"after-3!",
            "the receive after the error completed too",
        );
        let big_back: Vec<u8> = (0..BIG).map(|i| (i * 3) as u8).collect();
        let sent = rmca::scope(|s| {
            let reqs = vec![
                w.isend(s, b"back-1!!", 1, 5).unwrap(),
                w.isend(s, &big_back, 1, 6).unwrap(),
            ];
            Request::complete_all(reqs)
        });
        check(sent.is_ok(), "sends complete");
    } else {
        let big: Vec<u8> = (0..BIG).map(|i| i as u8).collect();
        let sevens = [7u8; 100];
        let sent = rmca::scope(|s| {
            let reqs = vec![
                w.isend(s, b"eager-1!", 0, 1).unwrap(),
                w.isend(s, &big, 0, 2).unwrap(),
                w.isend(s, &sevens, 0, 3).unwrap(),
                w.isend(s, b"after-3!", 0, 4).unwrap(),
            ];
            Request::complete_all(reqs)
        });
        check(sent.is_ok(), "sends complete");
        let (mut e, mut big_back) = ([0u8; 8], vec![0u8; BIG]);
        let received = rmca::scope(|s| {
            let reqs = vec![
                w.irecv(s, &mut e, 0, 5).unwrap(),
                w.irecv(s, &mut big_back, 0, 6).unwrap(),
            ];
            Request::complete_all(reqs)
        });
        check(received.is_ok(), "receives complete");
        check(e == *b"back-1!!", "eager receive");
        check(
            big_back
                .iter()
                .enumerate()
                .all(|(i, &v)| v == (i * 3) as u8),
            "rendezvous receive",
        );
    }
}

/// What a request reports through its life: a send completed when it started (eager) and one
/// still outstanding (rendezvous) both give destination, tag and length; `test` returns the
/// outcome once and then nothing; a receive's status names its source.
fn request_states(w: &Communicator) {
    if w.size() < 2 || w.rank() > 1 {
        return;
    }
    const BIG: usize = 200 << 10; // rendezvous on shm
    let peer = 1 - w.rank();
    let big = vec![w.rank() as u8; BIG];
    let mut got_small = [0u8; 8];
    let mut got_big = vec![0u8; BIG];
    rmca::scope(|s| {
        let r_small = w.irecv(s, &mut got_small, peer, 11).unwrap();
        let r_big = w.irecv(s, &mut got_big, peer, 12).unwrap();
        let mut s_small = w.isend(s, b"8 bytes!", peer, 11).unwrap();
        let s_big = w.isend(s, &big, peer, 12).unwrap();
        let st = loop {
            if let Some(outcome) = s_small.test() {
                break outcome.unwrap();
            }
        };
        check(
            (st.source, st.tag, st.bytes) == (peer, 11, 8),
            &format!("eager send status {st:?}"),
        );
        check(s_small.test().is_none(), "a spent request reports nothing");
        let st = s_big.wait().unwrap();
        check(
            (st.source, st.tag, st.bytes) == (peer, 12, BIG),
            &format!("rendezvous send status {st:?}"),
        );
        let st = r_small.wait().unwrap();
        check(
            (st.source, st.tag, st.bytes) == (peer, 11, 8),
            &format!("receive status {st:?}"),
        );
        let st = r_big.wait().unwrap();
        check(
            (st.source, st.tag, st.bytes) == (peer, 12, BIG),
            &format!("large receive status {st:?}"),
        );
    });
    check(got_small == *b"8 bytes!", "eager payload");
    check(
        got_big.iter().all(|&v| v == peer as u8),
        "rendezvous payload",
    );
    // A receive tested until it completes, then spent.
    let mut token = [0u8; 4];
    rmca::scope(|s| {
        let mut r = w.irecv(s, &mut token, peer, 13).unwrap();
        w.send(&[w.rank() as u8; 4], peer, 13).unwrap();
        let st = loop {
            if let Some(outcome) = r.test() {
                break outcome.unwrap();
            }
        };
        check(st.source == peer && st.bytes == 4, "tested receive status");
        check(r.test().is_none(), "a spent receive reports nothing");
        check(
            format!("{r:?}").to_lowercase().contains("spent"),
            "debug names the state",
        );
        drop(r);
    });
    check(token == [peer as u8; 4], "tested receive payload");
}

/// Requests in scopes: a forgotten request and one outstanding when the scope's closure
/// panics are both waited for before the scope returns, so their buffers hold the data.
fn scopes(w: &Communicator) {
    if w.size() < 2 || w.rank() > 1 {
        return;
    }
    const BIG: usize = 200 << 10; // rendezvous on shm
    let peer = 1 - w.rank();
    let pattern = |i: usize, round: usize| (i * 5 + round * 17) as u8;
    if w.rank() == 0 {
        let (mut small, mut big) = ([0u8; 8], vec![0u8; BIG]);
        rmca::scope(|s| {
            std::mem::forget(w.irecv(s, &mut small, peer, 20).unwrap());
            std::mem::forget(w.irecv(s, &mut big, peer, 21).unwrap());
            // The sender waits for this before sending: the receives are outstanding when
            // the closure returns.
            w.send(&[1u8], peer, 22).unwrap();
        });
        check(
            small == *b"forgot!!",
            "a forgotten receive completed before its scope ended",
        );
        check(
            big.iter().enumerate().all(|(i, &b)| b == pattern(i, 0)),
            "a forgotten rendezvous receive completed before its scope ended",
        );
        let mut again = vec![0u8; BIG];
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rmca::scope(|s| {
                let _r = w.irecv(s, &mut again, peer, 23).unwrap();
                w.send(&[1u8], peer, 24).unwrap();
                std::mem::forget(_r);
                panic!("user code panics with a receive outstanding");
            })
        }));
        check(unwound.is_err(), "the panic went through the scope");
        check(
            again.iter().enumerate().all(|(i, &b)| b == pattern(i, 1)),
            "the scope waited for its receive while unwinding",
        );
    } else {
        let mut go = [0u8];
        w.recv(&mut go, peer, 22).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let big: Vec<u8> = (0..BIG).map(|i| pattern(i, 0)).collect();
        w.send(b"forgot!!", peer, 20).unwrap();
        w.send(&big, peer, 21).unwrap();
        w.recv(&mut go, peer, 24).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let big: Vec<u8> = (0..BIG).map(|i| pattern(i, 1)).collect();
        w.send(&big, peer, 23).unwrap();
    }
}

/// `PROC_NULL` in every point-to-point call (a non-periodic shift), and negative ranks
/// refused everywhere a rank is taken.
fn proc_null_and_negative_ranks(w: &Communicator) {
    let (me, n) = (w.rank(), w.size());
    let right = if me + 1 < n {
        rmca::Dest::Rank(me + 1)
    } else {
        rmca::Dest::Null
    };
    let left = if me > 0 {
        rmca::Src::Rank(me - 1)
    } else {
        rmca::Src::Null
    };
    let mut got = [u64::MAX];
    let st = w
        .sendrecv(&[me as u64], right, 30, &mut got, left, 30)
        .unwrap();
    if me == 0 {
        check(
            st == Status::PROC_NULL && st.is_proc_null(),
            "sendrecv from PROC_NULL status",
        );
        check(got == [u64::MAX], "nothing written by a PROC_NULL receive");
    } else {
        check(
            got == [me as u64 - 1] && st.source == me - 1,
            "shift from the left",
        );
    }
    let mut buf = [7u8; 4];
    w.send(&buf, PROC_NULL, 1).unwrap();
    w.ssend(&buf, PROC_NULL, 1).unwrap();
    check(
        w.recv(&mut buf, PROC_NULL, 1).unwrap() == Status::PROC_NULL,
        "recv PROC_NULL",
    );
    check(
        w.recv(&mut buf, PROC_NULL, ANY_TAG).unwrap().is_proc_null(),
        "recv PROC_NULL, any tag",
    );
    check(buf == [7; 4], "PROC_NULL receive leaves the buffer");
    check(
        w.iprobe(PROC_NULL, 1).unwrap() == Some(Status::PROC_NULL),
        "iprobe PROC_NULL",
    );
    check(
        w.probe(PROC_NULL, 1).unwrap() == Status::PROC_NULL,
        "probe PROC_NULL",
    );
    rmca::scope(|s| {
        let r = w.irecv(s, &mut buf, PROC_NULL, 1).unwrap();
        let q = w.isend(s, &[1u8], PROC_NULL, 1).unwrap();
        check(r.wait().unwrap().is_proc_null(), "irecv PROC_NULL");
        check(q.wait().unwrap().is_proc_null(), "isend PROC_NULL");
    });
    let negative = |r: rmca::Result<Status>, what: &str| {
        check(
            matches!(r, Err(Error::NegativeRank(-3))),
            &format!("{what} with rank -3 is refused: {r:?}"),
        )
    };
    negative(w.recv(&mut buf, -3, 1), "recv");
    negative(w.send(&buf, -3, 1).map(|_| Status::PROC_NULL), "send");
    negative(w.ssend(&buf, -3, 1).map(|_| Status::PROC_NULL), "ssend");
    negative(w.sendrecv(&buf, -3, 1, &mut got, 0, 1), "sendrecv (dest)");
    negative(w.sendrecv(&buf, 0, 1, &mut got, -3, 1), "sendrecv (source)");
    negative(w.iprobe(-3, 1).map(|_| Status::PROC_NULL), "iprobe");
    rmca::scope(|s| {
        negative(
            w.irecv(s, &mut buf, -3, 1).map(|_| Status::PROC_NULL),
            "irecv",
        );
        negative(
            w.isend(s, &[1u8], -3, 1).map(|_| Status::PROC_NULL),
            "isend",
        );
    });
    let msg = format!("{}", Error::NegativeRank(-3));
    check(
        msg.contains("ANY_SOURCE") && msg.contains("PROC_NULL"),
        "the error names the valid values",
    );
    // ANY_SOURCE still means any source.
    w.send(&[9u8], me, 31).unwrap();
    let st = w.recv(&mut buf[..1], ANY_SOURCE, 31).unwrap();
    check(st.source == me && buf[0] == 9, "ANY_SOURCE receive");
}

/// Finalize under an outstanding request of a scope is deferred (the PML could still write
/// into its buffer) until that request completes; then it runs. One rank.
fn finalize_with_outstanding(u: rmca::Universe) {
    let w = u.world();
    let mut buf = [0u8; 8];
    let mut u = Some(u);
    rmca::scope(|s| {
        let r = w.irecv(s, &mut buf, 0, 40).unwrap();
        let err = u.take().expect("universe").finalize();
        check(
            matches!(&err, Err(Error::FinalizeDeferred { outstanding: 1 })),
            &format!("finalize under an outstanding request: {err:?}"),
        );
        w.send(b"finished", 0, 40).unwrap();
        check(
            r.wait().unwrap().bytes == 8,
            "the request completes after the deferral",
        );
    });
    check(buf == *b"finished", "payload received before finalize ran");
    check(
        matches!(w.send(&[1u8], 0, 41), Err(Error::Finalized)),
        "the deferred finalize ran when the request completed",
    );
    println!("ok finalize_outstanding");
}

fn main() {
    let case = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let u = rmca::init().unwrap_or_else(|e| {
        eprintln!("init failed: {e}");
        std::process::exit(2)
    });
    if case == "finalize_outstanding" {
        return finalize_with_outstanding(u);
    }
    let w = u.world();
    let run = |name: &str| case == name || case == "all";
    if run("ordering") {
        ordering(&w);
    }
    if run("truncation") {
        truncation(&w);
    }
    if run("self") {
        self_and_zero(&w);
    }
    if run("large") {
        large(&w, 64 << 20);
    }
    if case == "gib" {
        large(&w, 1 << 30);
    }
    if run("medium") {
        medium_sizes(&w);
    }
    if run("sendrecv") {
        sendrecv_shapes(&w);
    }
    if run("outstanding") {
        many_outstanding(&w, 100_000);
    }
    if run("isolation") {
        isolation(&w);
    }
    if run("ssend") {
        ssend_probe(&w);
    }
    if run("complete_all") {
        complete_all(&w);
    }
    if run("request_states") {
        request_states(&w);
    }
    if run("scopes") {
        scopes(&w);
    }
    if run("proc_null") {
        proc_null_and_negative_ranks(&w);
    }
    w.barrier().unwrap();
    if w.rank() == 0 {
        println!("ok {case}");
    }
}
