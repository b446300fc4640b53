//! Multi-process checks of the point-to-point and group calls beyond send/recv: persistent
//! requests, cancel, test_any/test_all/test_some/wait_some, scalars, groups and
//! `Communicator::create`/`compare`, and their argument checks. Every case runs in one job, on
//! any number of ranks (1 included: peers are then the process itself); run by
//! `tests/tests/p2p_more.rs`. Prints `ok p2p_more <n> ranks` on rank 0, exits non-zero (naming
//! the failed check) otherwise.

use rmca::{
    Communicator, Comparison, Error, Persistent, Request, Status, ANY_SOURCE, ANY_TAG, PROC_NULL,
};
use rmca_framework::pml::StatusError;

fn check(cond: bool, what: &str) {
    if !cond {
        eprintln!("p2p_more_check: check failed: {what}");
        std::process::exit(3);
    }
}

/// The value rank `src` puts at index `i` of its message of round `round`.
fn value(src: usize, round: usize, i: usize) -> u64 {
    (src as u64) << 40 | (round as u64) << 20 | i as u64
}

/// Above every BTL's eager limit: these runs take the rendezvous protocols.
const LARGE: usize = 40_000;

/// Ring exchanges through persistent requests, small and rendezvous-sized, the buffers
/// rewritten and read between runs; the state checks; PROC_NULL; a forgotten and a dropped
/// active request are waited before their buffers come back.
fn persistent(w: &Communicator) {
    let (me, n) = (w.rank(), w.size());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    for len in [3, LARGE] {
        let mut out = vec![0u64; len];
        let mut inbox = vec![0u64; len];
        let mut sync_out = vec![0u64; 2];
        let mut sync_in = vec![0u64; 2];
        rmca::scope(|s| {
            let mut send = w.send_init_mut(s, &mut out, right, 1).unwrap();
            let mut recv = w.recv_init(s, &mut inbox, left, 1).unwrap();
            let mut ssend = w.send_init_mut(s, &mut sync_out, right, 2).unwrap();
            let mut srecv = w.recv_init(s, &mut sync_in, ANY_SOURCE, 2).unwrap();
            check(!send.is_active(), "a new persistent request is inactive");
            check(
                matches!(send.wait(), Err(Error::InvalidArgument(_))),
                "waiting an inactive persistent request is an error",
            );
            for round in 0..12 {
                for (i, v) in send.data_mut().unwrap().iter_mut().enumerate() {
                    *v = value(me, round, i);
                }
                recv.start().unwrap();
                send.start().unwrap();
                check(send.is_active(), "started");
                check(
                    matches!(send.start(), Err(Error::InvalidArgument(_))),
                    "starting an active request is an error",
                );
                check(
                    matches!(recv.data(), Err(Error::InvalidArgument(_))),
                    "an active receive does not lend its buffer",
                );
                send.wait().unwrap();
                let st = recv.wait().unwrap();
                check(
                    st.source == left && st.tag == 1 && st.bytes == len * 8 && !st.cancelled,
                    "persistent receive status",
                );
                let got = recv.data().unwrap();
                check(
                    got.iter()
                        .enumerate()
                        .all(|(i, &v)| v == value(left, round, i)),
                    "persistent receive data of every round",
                );
                // Synchronous runs, completed by test.
                ssend.data_mut().unwrap()[0] = round as u64;
                let mut pair = [srecv, ssend];
                Persistent::start_all(&mut pair).unwrap();
                let [mut r, mut s_] = pair;
                let st = loop {
                    if let Some(st) = r.test() {
                        break st.unwrap();
                    }
                };
                check(
                    st.source == left && r.data().unwrap()[0] == round as u64,
                    "persistent ssend/recv by start_all and test",
                );
                while s_.test().is_none() {}
                (srecv, ssend) = (r, s_);
            }
            Ok::<_, Error>(())
        })
        .unwrap();
        check(
            inbox
                .iter()
                .enumerate()
                .all(|(i, &v)| v == value(left, 11, i)),
            "the buffer holds the last round after the scope",
        );
    }
    // Read-only sends and ssend_init, and PROC_NULL on both sides.
    let constant = [me as u32; 5];
    let mut got = [0u32; 5];
    let mut null_in = [7u32; 1];
    rmca::scope(|s| {
        let mut send = w.ssend_init(s, &constant, right, 3).unwrap();
        let mut recv = w.recv_init(s, &mut got, left, 3).unwrap();
        let mut null_send = w.send_init(s, &constant, PROC_NULL, 3).unwrap();
        let mut null_recv = w.recv_init(s, &mut null_in, PROC_NULL, 3).unwrap();
        check(
            matches!(send.data_mut(), Err(Error::InvalidArgument(_))),
            "a shared send buffer is not lent mutably",
        );
        for _ in 0..3 {
            recv.start().unwrap();
            send.start().unwrap();
            null_send.start().unwrap();
            null_recv.start().unwrap();
            check(
                null_recv.wait().unwrap().is_proc_null(),
                "PROC_NULL persistent receive",
            );
            null_send.wait().unwrap();
            send.wait().unwrap();
            recv.wait().unwrap();
            check(recv.data().unwrap() == [left as u32; 5], "ssend_init data");
        }
        check(null_recv.data().unwrap() == [7], "PROC_NULL writes nothing");
    });
    // A started request forgotten, and one dropped, while their messages are not yet sent:
    // the drop and the scope wait for them, so the data is there afterwards.
    let mut forgotten = [0u64; 4];
    let mut dropped = [0u64; 4];
    rmca::scope(|s| {
        let mut a = w.recv_init(s, &mut forgotten, left, 4).unwrap();
        let mut b = w.recv_init(s, &mut dropped, left, 5).unwrap();
        a.start().unwrap();
        b.start().unwrap();
        std::mem::forget(a);
        // The sends come from another request set, after both receives were posted.
        w.send(&[me as u64 + 100; 4], right, 5).unwrap();
        w.send(&[me as u64 + 200; 4], right, 4).unwrap();
        drop(b);
    });
    check(
        forgotten == [left as u64 + 200; 4] && dropped == [left as u64 + 100; 4],
        "forgotten and dropped active requests are waited",
    );
    w.barrier().unwrap();
}

/// Cancel: an unmatched receive is withdrawn (plain and persistent); a matched one and sends
/// complete normally.
fn cancel(w: &Communicator) {
    let (me, n) = (w.rank(), w.size());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let mut never = [0u8; 8];
    let mut matched = [0u8; 3];
    let mut persistent_buf = [0u16; 2];
    let big = vec![me as u8; LARGE];
    let mut big_in = vec![0u8; LARGE];
    // Sent before the receive exists, and probed: the receive matches when it is posted.
    w.send(b"abc", right, 11).unwrap();
    rmca::scope(|s| {
        let mut r = w.irecv(s, &mut never, ANY_SOURCE, 10).unwrap();
        check(r.cancel().unwrap(), "an unmatched receive is cancelled");
        let st = r.wait().unwrap();
        check(
            st.cancelled && st.bytes == 0,
            "a cancelled receive's status",
        );

        w.probe(left, 11).unwrap();
        let mut m = w.irecv(s, &mut matched, left, 11).unwrap();
        check(!m.cancel().unwrap(), "a matched receive is not cancelled");
        let st = m.wait().unwrap();
        check(
            !st.cancelled && st.bytes == 3,
            "a matched receive completes",
        );

        let mut p = w.recv_init(s, &mut persistent_buf, ANY_SOURCE, 12).unwrap();
        check(
            !p.cancel().unwrap(),
            "an inactive persistent request has nothing to cancel",
        );
        p.start().unwrap();
        check(
            p.cancel().unwrap(),
            "an active persistent receive is cancelled",
        );
        check(p.wait().unwrap().cancelled, "its run reports it");
        // Nobody sends tag 12 (or tag 10, below) before every rank cancelled.
        w.barrier().unwrap();
        // The request can run again after a cancel.
        p.start().unwrap();
        w.send(&[me as u16, 9], right, 12).unwrap();
        let st = p.wait().unwrap();
        check(
            !st.cancelled && p.data().unwrap() == [left as u16, 9],
            "a persistent receive runs again after a cancel",
        );

        // Sends cannot be cancelled (eager: handed to a BTL; rendezvous: announced).
        let mut sreq = w.isend(s, &big, right, 13).unwrap();
        check(!sreq.cancel().unwrap(), "a send is not cancelled");
        w.recv(&mut big_in, left, 13).unwrap();
        check(
            !sreq.wait().unwrap().cancelled,
            "the send completes normally",
        );
        check(big_in.iter().all(|&b| b == left as u8), "its data arrives");
    });
    check(never == [0; 8], "a cancelled receive writes nothing");
    check(&matched == b"abc", "matched receive data");
    // Nothing stray is left behind: a later tag-10 message goes to a later receive.
    w.send(&[1u8; 8], right, 10).unwrap();
    let st = w.recv(&mut never, left, 10).unwrap();
    check(
        st.bytes == 8 && never == [1; 8],
        "cancelled receive no longer matches",
    );
    w.barrier().unwrap();
}

/// Is `st` the truncation of the 16-byte message into the 8-byte receive?
fn is_truncation(st: rmca::Result<Status>) -> bool {
    matches!(
        st,
        Err(Error::Status {
            error: StatusError::Truncated {
                message_len: 16,
                received: 8
            },
            ..
        })
    )
}

/// One `complete_all` batch over requests of two communicators whose ranks differ (the world
/// and a reversed split, dropped inside the scope): a failed request's status is in its own
/// communicator's ranks, and the other request still completes.
fn mixed_batch(w: &Communicator) {
    let (me, n) = (w.rank(), w.size());
    if n < 2 {
        return;
    }
    let rev = w
        .split(Some(0), (n - 1 - me) as i32)
        .unwrap()
        .expect("color 0 is kept");
    let rev_of = |world_rank: usize| n - 1 - world_rank;
    if me == 0 {
        w.send(&[5u64], 1, 41).unwrap();
        rev.send(&[1u64, 2], rev_of(1), 42).unwrap();
    } else if me == 1 {
        let mut whole = [0u64; 1];
        let mut short = [0u64; 1];
        let outcome = rmca::scope(|s| {
            let reqs = vec![
                w.irecv(s, &mut whole, 0, 41).unwrap(),
                rev.irecv(s, &mut short, rev_of(0), 42).unwrap(),
            ];
            // The scope keeps what its requests need; the handle can go.
            drop(rev);
            Request::complete_all(reqs)
        });
        check(whole == [5], "mixed batch: the world's request completed");
        match outcome {
            Err(Error::Status {
                error: StatusError::Truncated { .. },
                status,
            }) => check(
                status.source == rev_of(0) && status.tag == 42,
                "mixed batch: the failed status names the source in its own communicator",
            ),
            other => check(
                false,
                &format!("mixed batch: truncation expected, got {other:?}"),
            ),
        }
        return;
    }
    drop(rev);
}

/// test_any / test_all / test_some / wait_some over receives from every rank, with indices,
/// and one truncated receive reported at its index.
fn completion_sets(w: &Communicator) {
    let (me, n) = (w.rank(), w.size());
    let mut bufs = vec![[0u64; 2]; n];
    let mut short = [0u64; 1];
    rmca::scope(|s| {
        check(
            matches!(
                Request::wait_some(&mut Vec::new()),
                Err(Error::InvalidArgument(_))
            ),
            "wait_some on nothing is an error",
        );
        check(
            Request::test_some(&mut Vec::new()).is_empty(),
            "test_some on nothing",
        );
        check(
            Request::test_any(&mut Vec::new()).is_none(),
            "test_any on nothing",
        );
        // Round 1: wait_some, after test_all / test_some / test_any saw nothing (nobody has
        // sent before the barrier below).
        let mut reqs: Vec<Request<'_>> = bufs
            .iter_mut()
            .enumerate()
            .map(|(src, b)| w.irecv(s, b, src, 20).unwrap())
            .collect();
        check(Request::test_all(&mut reqs).is_none(), "test_all: not yet");
        check(
            Request::test_some(&mut reqs).is_empty(),
            "test_some: not yet",
        );
        check(Request::test_any(&mut reqs).is_none(), "test_any: not yet");
        check(reqs.len() == n, "nothing removed while incomplete");
        w.barrier().unwrap();
        // Send in reverse rank order so that completions come out of order.
        for dest in (0..n).rev() {
            w.send(&[me as u64, dest as u64], dest, 20).unwrap();
        }
        let mut seen = vec![false; n];
        let mut original: Vec<usize> = (0..n).collect();
        while !reqs.is_empty() {
            for (i, st) in Request::wait_some(&mut reqs).unwrap() {
                let st = st.unwrap();
                let src = original[i];
                check(st.source == src, "wait_some index names the request");
                check(!seen[src], "each request completes once");
                seen[src] = true;
            }
            // Keep `original` aligned with what is left.
            original.retain(|&src| !seen[src]);
        }
        check(seen.iter().all(|&s| s), "wait_some completed every request");
    });
    check(
        bufs.iter()
            .enumerate()
            .all(|(src, b)| *b == [src as u64, me as u64]),
        "wait_some data",
    );
    w.barrier().unwrap();
    // Round 2: test_some with a truncation, then test_any, then test_all.
    let mut bufs2 = vec![[0u64; 2]; n];
    rmca::scope(|s| {
        let mut reqs: Vec<Request<'_>> = vec![w.irecv(s, &mut short, me, 21).unwrap()];
        reqs.extend(
            bufs2
                .iter_mut()
                .enumerate()
                .map(|(src, b)| w.irecv(s, b, src, 22).unwrap()),
        );
        w.send(&[5u64, 6], me, 21).unwrap();
        for dest in 0..n {
            w.send(&[me as u64 * 3, dest as u64], dest, 22).unwrap();
        }
        let mut truncated = false;
        let mut got = 0;
        let mut original: Vec<Option<usize>> =
            std::iter::once(None).chain((0..n).map(Some)).collect();
        while got < n / 2 + 1 {
            let done = Request::test_some(&mut reqs);
            let mut completed = vec![false; original.len()];
            for (i, st) in done {
                completed[i] = true;
                match original[i] {
                    None => truncated = is_truncation(st),
                    Some(src) => {
                        check(st.unwrap().source == src, "test_some index");
                        got += 1;
                    }
                }
            }
            let mut k = 0;
            original.retain(|_| {
                k += 1;
                !completed[k - 1]
            });
        }
        // test_any for one more (if any is left), then test_all for the rest.
        while !reqs.is_empty() {
            if let Some((i, st)) = Request::test_any(&mut reqs) {
                match original.remove(i) {
                    None => truncated = is_truncation(st),
                    Some(src) => check(st.unwrap().source == src, "test_any index"),
                }
                break;
            }
        }
        let statuses = loop {
            if let Some(r) = Request::test_all(&mut reqs) {
                break r;
            }
        };
        match statuses {
            Ok(sts) => {
                check(sts.len() == original.len(), "test_all returns every status");
                for (st, src) in sts.iter().zip(&original) {
                    check(src.is_some_and(|s| s == st.source), "test_all order");
                }
            }
            Err(e) => truncated = is_truncation(Err(e)),
        }
        check(reqs.is_empty(), "test_all empties the list");
        check(truncated, "the truncated receive was reported");
    });
    check(short == [5], "truncated receive kept its first element");
    // A request test_all found failed keeps its error until it is waited: complete_all
    // reports it even though the PML released it already.
    let mut short2 = [0u64; 1];
    let mut other = [0u64; 1];
    rmca::scope(|s| {
        let mut reqs = vec![
            w.irecv(s, &mut short2, me, 23).unwrap(),
            w.irecv(s, &mut other, me, 24).unwrap(),
        ];
        w.send(&[1u64, 2], me, 23).unwrap();
        let mut polls = 0;
        while !format!("{:?}", reqs[0]).contains("Failed") {
            check(
                Request::test_all(&mut reqs).is_none(),
                "test_all: one is pending",
            );
            polls += 1;
            check(polls < 1_000_000, "a self-send completes the receive");
        }
        w.send(&[3u64], me, 24).unwrap();
        check(
            is_truncation(Request::complete_all(reqs).map(|()| Status::PROC_NULL)),
            "complete_all reports the error test_all found",
        );
    });
    check(other == [3], "the other receive completed");

    check(
        bufs2
            .iter()
            .enumerate()
            .all(|(src, b)| *b == [src as u64 * 3, me as u64]),
        "test_some/test_any/test_all data",
    );
    w.barrier().unwrap();
}

/// send_value / recv_value around the ring, and a size mismatch.
fn scalars(w: &Communicator) {
    let (me, n) = (w.rank(), w.size());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    w.send_value(&(me as f64 * 1.5), right, 30).unwrap();
    let (x, st): (f64, Status) = w.recv_value(left, 30).unwrap();
    check(x == left as f64 * 1.5 && st.bytes == 8, "recv_value");
    w.send_value(&7u32, right, 31).unwrap();
    check(
        matches!(w.recv_value::<u64>(left, 31), Err(Error::InvalidArgument(m)) if m.contains("4 bytes")),
        "a short message for recv_value is an error naming its size",
    );
    let (z, st) = w.recv_value::<u64>(PROC_NULL, ANY_TAG).unwrap();
    check(z == 0 && st.is_proc_null(), "recv_value from PROC_NULL");
    w.barrier().unwrap();
}

/// Groups of the world, communicators made from them, and comparisons.
fn groups(w: &Communicator) {
    let (me, n) = (w.rank(), w.size());
    let world = w.group();
    check(world.size() == n && world.rank() == Some(me), "world group");
    let evens: Vec<usize> = (0..n).step_by(2).collect();
    let even_group = world.incl(&evens).unwrap();
    let odd_group = world.excl(&evens).unwrap();
    check(
        even_group.union(&odd_group).compare(&world)
            == if n <= 2 {
                Comparison::Identical
            } else {
                Comparison::Similar
            },
        "evens then odds",
    );
    check(
        even_group.intersection(&odd_group).is_empty()
            && world.difference(&odd_group) == even_group,
        "intersection and difference",
    );
    let translated = world
        .translate_ranks(&(0..n).collect::<Vec<_>>(), &odd_group)
        .unwrap();
    check(
        translated
            .iter()
            .enumerate()
            .all(|(r, t)| *t == (r % 2 == 1).then_some(r / 2)),
        "translate_ranks",
    );

    // A communicator of the evens: members get one, ranked in group order.
    let evens_comm = w.create(&even_group).unwrap();
    check(
        evens_comm.is_some() == (me % 2 == 0),
        "members and only they get the communicator",
    );
    // Reversed world: rank r is n-1-r.
    let reversed: Vec<usize> = (0..n).rev().collect();
    let rev = w.create(&world.incl(&reversed).unwrap()).unwrap().unwrap();
    check(
        rev.rank() == n - 1 - me && rev.size() == n,
        "reversed ranks",
    );
    // Isolation: the same tag on the world and on the new communicator, sent in the opposite
    // order to the receives.
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let rev_left = (rev.rank() + n - 1) % n; // rev rank of world rank me+1
    let (mut a, mut b) = ([0u64], [0u64]);
    rmca::scope(|s| {
        let ra = w.irecv(s, &mut a, left, 40).unwrap();
        let rb = rev.irecv(s, &mut b, rev_left, 40).unwrap();
        // Send on `rev` first, to world rank `left` = rev rank (rev.rank() + 1) % n.
        rev.send(&[2000 + me as u64], (rev.rank() + 1) % n, 40)
            .unwrap();
        w.send(&[1000 + me as u64], right, 40).unwrap();
        ra.wait().unwrap();
        rb.wait().unwrap();
    });
    check(
        a == [1000 + left as u64] && b == [2000 + right as u64],
        "created communicator has its own matching space",
    );
    if let Some(c) = &evens_comm {
        check(c.size() == evens.len() && c.rank() == me / 2, "evens ranks");
        let mut sum = [0u64];
        c.allreduce(&[me as u64], &mut sum, rmca::coll::Op::Sum)
            .unwrap();
        check(
            sum[0] == evens.iter().sum::<usize>() as u64,
            "allreduce on the created communicator",
        );
        check(
            c.group().translate_ranks(&[c.rank()], &world).unwrap() == [Some(me)],
            "translate back to the world",
        );
    }

    // Comparisons.
    check(
        w.compare(&w.clone()) == Comparison::Identical,
        "clone is identical",
    );
    let dup = w.dup().unwrap();
    check(w.compare(&dup) == Comparison::Congruent, "dup is congruent");
    check(
        w.compare(&rev)
            == if n == 1 {
                Comparison::Congruent
            } else {
                Comparison::Similar
            },
        "reversed is similar",
    );
    if let Some(c) = &evens_comm {
        check(
            w.compare(c)
                == if n == 1 {
                    Comparison::Congruent
                } else {
                    Comparison::Unequal
                },
            "evens are unequal",
        );
    }

    // MPI 2.2: each process may pass its own part of a partition (here a singleton each),
    // one communicator per part. A member of a group whose other members passed another
    // group gets an error, not a hang; a group with a process outside the communicator too
    // (made from the world, used on the evens).
    if n > 1 {
        let mine = world.incl(&[me]).unwrap();
        check(
            matches!(w.create(&mine), Ok(Some(c)) if c.size() == 1 && c.rank() == 0),
            "disjoint groups: one communicator each",
        );
        let passed = if me == 0 {
            world.incl(&(0..n).collect::<Vec<_>>()).unwrap()
        } else {
            world.incl(&[me]).unwrap()
        };
        let r = w.create(&passed);
        check(
            if me == 0 {
                matches!(r, Err(Error::InvalidArgument(m)) if m.contains("same group"))
            } else {
                matches!(r, Ok(Some(c)) if c.size() == 1)
            },
            "a member's group disagreeing with its members' refused",
        );
    }
    if let Some(c) = &evens_comm {
        let outside = world.incl(&[n - 1]).unwrap();
        let r = c.create(&outside);
        check(
            if (n - 1) % 2 == 0 {
                r.is_ok()
            } else {
                matches!(r, Err(Error::InvalidArgument(_)))
            },
            "a group with a process outside the communicator is refused",
        );
    }
    // Contexts stayed in step after the errors: the dup still works in both orders.
    let mut x = [0u32];
    dup.sendrecv(&[me as u32], right, 41, &mut x, left, 41)
        .unwrap();
    check(x == [left as u32], "dup after create");
    w.barrier().unwrap();
}

/// Buffered sends: they return before the receiver posts anything (rendezvous sizes
/// included: the receives come after a barrier), a message larger than the free buffer is
/// refused, and detach waits for the sends and gives the buffer back.
fn buffered(u: &rmca::Universe, w: &Communicator) {
    let (me, n) = (w.rank(), w.size());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    check(
        matches!(w.bsend(&[1u8], right, 50), Err(Error::InvalidArgument(m)) if m.contains("no buffer")),
        "bsend without an attached buffer",
    );
    check(
        matches!(u.buffer_detach(), Err(Error::InvalidArgument(_))),
        "detach without a buffer",
    );
    let attached = 2 * LARGE * 8 + 64;
    u.buffer_attach(vec![0u8; attached]).unwrap();
    check(
        matches!(u.buffer_attach(vec![0; 8]), Err(Error::InvalidArgument(_))),
        "one buffer at a time",
    );
    let mut big: Vec<u64> = (0..LARGE).map(|i| value(me, 50, i)).collect();
    w.bsend(&big, right, 50).unwrap();
    w.bsend(&big[..8], right, 51).unwrap();
    // The caller's buffer is free at once: overwrite it before the next bsend.
    big.iter_mut().for_each(|v| *v = !*v);
    w.bsend(&big, right, 52).unwrap();
    w.bsend(&[0u8; 0], PROC_NULL, 52).unwrap();
    check(
        matches!(w.bsend(&vec![0u8; attached + 1], right, 53),
            Err(Error::BsendBufferFull { needed, attached: a, .. }) if needed == attached + 1 && a == attached),
        "a message larger than the buffer is refused",
    );
    check(
        matches!(w.bsend(&[1u8], -4, 53), Err(Error::NegativeRank(-4))),
        "bsend checks its rank",
    );
    w.barrier().unwrap();
    let mut got = vec![0u64; LARGE];
    w.recv(&mut got, left, 50).unwrap();
    check(
        got.iter()
            .enumerate()
            .all(|(i, &v)| v == value(left, 50, i)),
        "first buffered message",
    );
    let mut small = [0u64; 8];
    w.recv(&mut small, left, 51).unwrap();
    check(
        small
            .iter()
            .enumerate()
            .all(|(i, &v)| v == value(left, 50, i)),
        "small buffered message",
    );
    w.recv(&mut got, left, 52).unwrap();
    check(
        got.iter()
            .enumerate()
            .all(|(i, &v)| v == !value(left, 50, i)),
        "buffered message taken before its source was overwritten",
    );
    let back = u.buffer_detach().unwrap();
    check(back.len() == attached, "detach gives the buffer back");
    check(
        matches!(w.bsend(&[1u8], right, 50), Err(Error::InvalidArgument(_))),
        "bsend after detach",
    );
    w.barrier().unwrap();
}

/// A communicator's own buffer (`Communicator::attach_buffer`): its buffered sends (and its
/// clones') use it instead of the universe's, which is too small here for any message; a
/// communicator made from it does not; flush and detach wait for the sends; dropping the
/// last handle detaches it after its sends.
fn comm_buffers(u: &rmca::Universe, w: &Communicator) {
    let (me, n) = (w.rank(), w.size());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    u.buffer_attach(vec![0u8; 4]).unwrap();
    let big: Vec<u64> = (0..LARGE).map(|i| value(me, 60, i)).collect();
    let dup = w.dup().unwrap();
    let same = dup.clone();
    let derived = dup.dup().unwrap();
    check(
        matches!(dup.detach_buffer(), Err(Error::InvalidArgument(_)))
            && matches!(dup.flush_buffer(), Err(Error::InvalidArgument(_))),
        "detach and flush without a communicator buffer",
    );
    dup.attach_buffer(vec![0u8; 2 * LARGE * 8]).unwrap();
    check(
        matches!(
            same.attach_buffer(vec![0; 8]),
            Err(Error::InvalidArgument(_))
        ),
        "a clone shares its communicator's buffer (one at a time)",
    );
    dup.bsend(&big, right, 60).unwrap();
    same.bsend(&big, right, 61).unwrap();
    check(
        matches!(
            w.bsend(&big, right, 62),
            Err(Error::BsendBufferFull { attached: 4, .. })
        ),
        "the world uses the universe's buffer",
    );
    check(
        matches!(
            derived.bsend(&big, right, 62),
            Err(Error::BsendBufferFull { attached: 4, .. })
        ),
        "a communicator made from it does not share its buffer",
    );
    check(
        matches!(
            dup.bsend(&big, right, 62),
            Err(Error::BsendBufferFull { .. })
        ),
        "the communicator's buffer is full",
    );
    w.barrier().unwrap();
    let mut got = vec![0u64; LARGE];
    for tag in [60, 61] {
        dup.recv(&mut got, left, tag).unwrap();
        check(
            got.iter()
                .enumerate()
                .all(|(i, &v)| v == value(left, 60, i)),
            "message through the communicator's buffer",
        );
    }
    dup.flush_buffer().unwrap();
    // Flushed: room for two messages again.
    dup.bsend(&big, right, 63).unwrap();
    dup.bsend(&big, right, 63).unwrap();
    for _ in 0..2 {
        dup.recv(&mut got, left, 63).unwrap();
    }
    let back = dup.detach_buffer().unwrap();
    check(back.len() == 2 * LARGE * 8, "detach gives the buffer back");
    // The last handle dropped with a send in flight: the drop waits for it.
    derived.attach_buffer(back).unwrap();
    derived.bsend(&big, right, 64).unwrap();
    derived.recv(&mut got, left, 64).unwrap();
    drop(derived);
    u.buffer_flush().unwrap();
    check(
        u.buffer_detach().unwrap().len() == 4,
        "the universe's buffer",
    );
    w.barrier().unwrap();
}

/// Communicators derived from one parent never share a context id, whatever their colors:
/// the split color below made a 32-bit hash of (parent, ordinal, color), the earlier scheme,
/// give the split at ordinal 0 the id of the dup at ordinal 1, so that their messages matched
/// each other's receives.
fn contexts(w: &Communicator) {
    let (me, n) = (w.rank(), w.size());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let a = w.split(Some(2_538_682_794), me as i32).unwrap().unwrap();
    let b = w.dup().unwrap();
    let c = w.create(&w.group()).unwrap().unwrap();
    let (mut on_a, mut on_b, mut on_c) = ([0u32], [0u32], [0u32]);
    rmca::scope(|s| {
        let ra = a.irecv(s, &mut on_a, left, 0).unwrap();
        let rc = c.irecv(s, &mut on_c, left, 0).unwrap();
        // Sent first, on the others: they must not match the receives posted on `a` and `c`.
        b.send(&[2u32], right, 0).unwrap();
        c.send(&[3u32], right, 0).unwrap();
        a.send(&[1u32], right, 0).unwrap();
        ra.wait().unwrap();
        rc.wait().unwrap();
        b.recv(&mut on_b, left, 0).unwrap();
    });
    check(
        (on_a, on_b, on_c) == ([1], [2], [3]),
        "split, dup and create have distinct matching spaces",
    );
    w.barrier().unwrap();
}

/// Argument checks of the new calls: nothing is sent when they fail.
fn arguments(w: &Communicator) {
    let n = w.size();
    let buf = [0u8; 4];
    let mut rbuf = [0u8; 4];
    rmca::scope(|s| {
        check(
            matches!(w.send_init(s, &buf, -2, 0), Err(Error::NegativeRank(-2))),
            "send_init negative rank",
        );
        check(
            matches!(w.send_init(s, &buf, n, 0), Err(Error::BadRank { rank, size }) if rank == n && size == n),
            "send_init rank out of range",
        );
        check(
            matches!(w.ssend_init(s, &buf, 0, -1), Err(Error::BadTag(-1))),
            "ssend_init negative tag",
        );
        check(
            matches!(w.send_init(s, &buf, PROC_NULL, -5), Err(Error::BadTag(-5))),
            "PROC_NULL still checks the tag",
        );
    });
    rmca::scope(|s| {
        check(
            matches!(
                w.recv_init(s, &mut rbuf, -3, 0),
                Err(Error::NegativeRank(-3))
            ),
            "recv_init negative rank",
        );
    });
    rmca::scope(|s| {
        check(
            matches!(
                w.recv_init(s, &mut rbuf, n + 1, 0),
                Err(Error::BadRank { .. })
            ),
            "recv_init rank out of range",
        );
    });
    rmca::scope(|s| {
        check(
            matches!(w.recv_init(s, &mut rbuf, 0, -7), Err(Error::BadTag(-7))),
            "recv_init negative tag",
        );
    });
    check(
        matches!(w.send_value(&1u8, -1, 0), Err(Error::NegativeRank(-1))),
        "send_value negative rank",
    );
    check(
        matches!(w.group().incl(&[n]), Err(Error::InvalidArgument(_))),
        "incl out of range",
    );
    w.barrier().unwrap();
}

fn main() {
    let u = rmca::init().unwrap_or_else(|e| {
        eprintln!("init failed: {e}");
        std::process::exit(2)
    });
    let w = u.world();
    // First: it needs the world's first derived communicators.
    contexts(&w);
    persistent(&w);
    cancel(&w);
    completion_sets(&w);
    mixed_batch(&w);
    w.barrier().unwrap();
    scalars(&w);
    groups(&w);
    arguments(&w);
    buffered(&u, &w);
    comm_buffers(&u, &w);
    w.barrier().unwrap();
    if w.rank() == 0 {
        println!("ok p2p_more {} ranks", w.size());
    }
}
