//! The stepping executor, sans-IO: N simulated ranks, each an [`Exec`] over an in-memory
//! [`Transport`] (per source and tag FIFO queues, like the PML's ordering; sends complete on
//! their first test), advanced without ever blocking in a round-robin until all are done.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::rc::Rc;

use super::*;
use crate::coll::schedule;

/// Messages in flight, per (source, destination, tag).
#[derive(Default)]
struct Net {
    queues: HashMap<(usize, usize, i32), VecDeque<Vec<u8>>>,
}

/// One rank's transport for one collective (one tag).
struct Sim {
    net: Rc<RefCell<Net>>,
    me: usize,
    tag: i32,
    recvs: Vec<SimRecv>,
    /// Refuse the post with this index (counting every post of this transport).
    fail_post: Option<usize>,
    posts: usize,
    /// Blocking runs may wait; a stepping executor never does.
    may_wait: bool,
}

struct SimRecv {
    peer: usize,
    buf: UserBuf,
    /// Length of the message matched.
    got: Option<usize>,
}

#[derive(Debug)]
enum H {
    Send,
    Recv(usize),
}

impl Sim {
    fn post(&mut self) -> Result<()> {
        self.posts += 1;
        if self.fail_post == Some(self.posts - 1) {
            return Err(Error::InvalidArgument("injected post failure".into()));
        }
        Ok(())
    }

    /// Match arrived messages to unmatched receives, in posting order per source.
    fn match_arrived(&mut self) {
        let mut net = self.net.borrow_mut();
        for r in self.recvs.iter_mut().filter(|r| r.got.is_none()) {
            let key = (r.peer, self.me, self.tag);
            if let Some(msg) = net.queues.get_mut(&key).and_then(VecDeque::pop_front) {
                let n = msg.len().min(r.buf.len());
                r.buf.write_at(0, &msg[..n]);
                r.got = Some(msg.len());
            }
        }
    }
}

impl Transport for Sim {
    type Handle = H;

    fn send(&mut self, peer: usize, buf: UserBuf) -> Result<Option<H>> {
        self.post()?;
        let msg = buf.as_slice().to_vec();
        let key = (self.me, peer, self.tag);
        self.net
            .borrow_mut()
            .queues
            .entry(key)
            .or_default()
            .push_back(msg);
        Ok(Some(H::Send))
    }

    fn recv(&mut self, peer: usize, buf: UserBuf) -> Result<H> {
        self.post()?;
        self.recvs.push(SimRecv {
            peer,
            buf,
            got: None,
        });
        Ok(H::Recv(self.recvs.len() - 1))
    }

    fn test(&mut self, h: &H) -> Option<Result<usize>> {
        match h {
            H::Send => Some(Ok(0)),
            H::Recv(i) => {
                self.match_arrived();
                self.recvs[*i].got.map(Ok)
            }
        }
    }

    fn wait(&mut self, h: &H) -> Result<usize> {
        assert!(self.may_wait, "a stepping executor waited");
        // One thread runs every rank: a wait can only be for what already arrived.
        self.test(h)
            .unwrap_or_else(|| panic!("rank {} would block forever", self.me))
    }
}

/// A simulated rank running one collective.
struct SimRank {
    exec: Exec<Rc<Schedule>, H>,
    t: Sim,
    bufs: Bufs,
    // The memory `bufs` points into (heap blocks do not move with the struct).
    _send: Vec<u8>,
    work: Vec<u8>,
    _tmp: Vec<u8>,
    outcome: Option<Result<()>>,
}

impl SimRank {
    #[allow(unsafe_code)]
    fn new(
        net: &Rc<RefCell<Net>>,
        me: usize,
        tag: i32,
        sched: Schedule,
        send: Vec<u8>,
        mut work: Vec<u8>,
    ) -> Self {
        let mut tmp = vec![0xA5; sched.tmp_len];
        // SAFETY: the three vectors live in this struct next to `bufs` and are not touched
        // until the executor is done (the tests read `work` only after `outcome` is set).
        let bufs = unsafe { Bufs::lend(&send, &mut work, &mut tmp) };
        Self {
            exec: Exec::new(Rc::new(sched), Vec::new()),
            t: Sim {
                net: net.clone(),
                me,
                tag,
                recvs: Vec::new(),
                fail_post: None,
                posts: 0,
                may_wait: false,
            },
            bufs,
            _send: send,
            work,
            _tmp: tmp,
            outcome: None,
        }
    }

    /// One non-blocking step; true if anything happened.
    fn step(&mut self, reduce: Option<ReduceFn<'_>>) -> bool {
        if self.outcome.is_some() {
            return false;
        }
        match self.exec.advance(&mut self.t, &self.bufs, reduce, false) {
            Poll::Pending { events } => events > 0,
            Poll::Done(r) => {
                self.outcome = Some(r);
                true
            }
        }
    }
}

/// Step every rank round-robin until all are done; panics on deadlock.
fn run_all(ranks: &mut [SimRank], reduce: Option<ReduceFn<'_>>) {
    // Odd ranks first on odd passes: the steps interleave differently from rank order.
    for pass in 0.. {
        let mut progress = false;
        for i in 0..ranks.len() {
            let i = if pass % 2 == 1 {
                ranks.len() - 1 - i
            } else {
                i
            };
            progress |= ranks[i].step(reduce);
        }
        if ranks.iter().all(|r| r.outcome.is_some()) {
            break;
        }
        assert!(progress, "simulated ranks deadlocked");
    }
    for (me, r) in ranks.iter().enumerate() {
        if let Some(Err(e)) = &r.outcome {
            panic!("rank {me} failed: {e}");
        }
    }
}

/// `dst = src + acc` on little-endian u64 words (commutative: the order flag is irrelevant).
fn sum_u64(dst: &mut [u8], src: &[u8], acc: Option<&[u8]>, _src_first: bool) {
    for (i, d) in dst.chunks_exact_mut(8).enumerate() {
        let word = |b: &[u8]| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        let a = acc.map_or_else(|| u64::from_le_bytes((&*d).try_into().unwrap()), word);
        d.copy_from_slice(&(a.wrapping_add(word(src))).to_le_bytes());
    }
}

fn words(v: impl IntoIterator<Item = u64>) -> Vec<u8> {
    v.into_iter().flat_map(u64::to_le_bytes).collect()
}

fn pattern(r: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (r * 131 + i * 7 + 1) as u8).collect()
}

const NS: Range<usize> = 1..7;

#[test]
fn stepping_allreduces_match_the_serial_sum() {
    type A = fn(usize, usize, usize) -> Schedule;
    let algos: [(&str, A); 3] = [
        ("recursive_doubling", schedule::allreduce_recursive_doubling),
        ("reduce_bcast", schedule::allreduce_reduce_bcast),
        ("ring", |n, me, len| schedule::allreduce_ring(n, me, len, 8)),
    ];
    for n in NS {
        for count in [0usize, 1, 7, 64] {
            let input = |r: usize| words((0..count as u64).map(|i| r as u64 * 1000 + i));
            let want = words((0..count as u64).map(|i| (0..n as u64).map(|r| r * 1000 + i).sum()));
            for (name, algo) in algos {
                let net = Rc::default();
                let mut ranks: Vec<SimRank> = (0..n)
                    .map(|r| {
                        SimRank::new(
                            &net,
                            r,
                            7,
                            algo(n, r, count * 8),
                            input(r),
                            vec![0; count * 8],
                        )
                    })
                    .collect();
                run_all(&mut ranks, Some(&sum_u64));
                for (r, rank) in ranks.iter().enumerate() {
                    assert_eq!(
                        rank.work, want,
                        "{name}, {n} ranks, {count} elements, rank {r}"
                    );
                }
            }
        }
    }
}

#[test]
fn stepping_bcasts_allgathers_alltoalls_and_barriers_complete() {
    type B = fn(usize, usize, usize, usize) -> Schedule;
    let bcasts: [B; 3] = [
        schedule::bcast_binomial,
        schedule::bcast_linear,
        schedule::bcast_scatter_allgather,
    ];
    type G = fn(usize, usize, usize) -> Schedule;
    let allgathers: [G; 4] = [
        schedule::allgather_ring,
        schedule::allgather_recursive_doubling,
        schedule::allgather_neighbor_exchange,
        schedule::allgather_linear,
    ];
    for n in NS {
        for len in [0usize, 1, 300] {
            for (a, algo) in bcasts.iter().enumerate() {
                for root in 0..n {
                    let net = Rc::default();
                    let mut ranks: Vec<SimRank> = (0..n)
                        .map(|r| {
                            let work = if r == root {
                                pattern(root, len)
                            } else {
                                vec![0; len]
                            };
                            SimRank::new(&net, r, 1, algo(n, r, root, len), vec![], work)
                        })
                        .collect();
                    run_all(&mut ranks, None);
                    for rank in &ranks {
                        assert_eq!(
                            rank.work,
                            pattern(root, len),
                            "bcast {a}, {n} ranks, root {root}"
                        );
                    }
                }
            }
            let all: Vec<u8> = (0..n).flat_map(|r| pattern(r, len)).collect();
            for (a, algo) in allgathers.iter().enumerate() {
                let net = Rc::default();
                let mut ranks: Vec<SimRank> = (0..n)
                    .map(|r| {
                        let mut work = vec![0; n * len];
                        work[r * len..(r + 1) * len].copy_from_slice(&pattern(r, len));
                        SimRank::new(&net, r, 2, algo(n, r, len), vec![], work)
                    })
                    .collect();
                run_all(&mut ranks, None);
                for rank in &ranks {
                    assert_eq!(rank.work, all, "allgather {a}, {n} ranks, {len} B blocks");
                }
            }
            // alltoall: rank r's block for rank d is pattern(r * n + d).
            // Pairwise, and Bruck's (packing into the scratch space between rounds).
            let blocks: Vec<Range<usize>> = (0..n).map(|r| r * len..(r + 1) * len).collect();
            for bruck in [false, true] {
                let net = Rc::default();
                let mut ranks: Vec<SimRank> = (0..n)
                    .map(|r| {
                        let send: Vec<u8> = (0..n).flat_map(|d| pattern(r * n + d, len)).collect();
                        let sched = if bruck {
                            schedule::alltoall_bruck(n, r, len)
                        } else {
                            schedule::alltoallv_pairwise(n, r, &blocks, &blocks)
                        };
                        SimRank::new(&net, r, 3, sched, send, vec![0; n * len])
                    })
                    .collect();
                run_all(&mut ranks, None);
                for (d, rank) in ranks.iter().enumerate() {
                    let want: Vec<u8> = (0..n).flat_map(|r| pattern(r * n + d, len)).collect();
                    assert_eq!(
                        rank.work, want,
                        "alltoall (bruck: {bruck}), {n} ranks, rank {d}"
                    );
                }
            }
        }
        for barrier in [schedule::barrier_dissemination, schedule::barrier_linear] {
            let net = Rc::default();
            let mut ranks: Vec<SimRank> = (0..n)
                .map(|r| SimRank::new(&net, r, 4, barrier(n, r), vec![], vec![]))
                .collect();
            run_all(&mut ranks, None);
        }
    }
}

#[test]
fn advance_returns_where_it_would_wait_and_resumes_there() {
    let net = Rc::default();
    let n = 3;
    let mut ranks: Vec<SimRank> = (0..n)
        .map(|r| {
            SimRank::new(
                &net,
                r,
                9,
                schedule::barrier_dissemination(n, r),
                vec![],
                vec![],
            )
        })
        .collect();
    // Alone, rank 0 posts its first round, then stays pending without ever waiting (the
    // transport panics on a wait) however often it is stepped.
    assert!(ranks[0].step(None), "the first step posts");
    for _ in 0..10 {
        ranks[0].step(None);
        assert!(
            ranks[0].outcome.is_none(),
            "a barrier finished with one rank"
        );
    }
    // Rank 1 alone cannot finish either: rank 2 never started.
    for _ in 0..10 {
        ranks[1].step(None);
    }
    assert!(ranks[1].outcome.is_none());
    run_all(&mut ranks, None);
}

#[test]
fn collectives_with_distinct_tags_interleave_without_crossing() {
    // Two broadcasts on the same ranks and links, with different roots and data, stepped
    // second-first on every rank but the roots: each gets its own data.
    let (n, len) = (4, 64);
    let net = Rc::default();
    let make = |tag: i32, root: usize| -> Vec<SimRank> {
        (0..n)
            .map(|r| {
                let work = if r == root {
                    pattern(root + 10 * tag as usize, len)
                } else {
                    vec![0; len]
                };
                SimRank::new(
                    &net,
                    r,
                    tag,
                    schedule::bcast_binomial(n, r, root, len),
                    vec![],
                    work,
                )
            })
            .collect()
    };
    let mut first = make(1, 0);
    let mut second = make(2, 1);
    for _ in 0..4 {
        for r in (0..n).rev() {
            second[r].step(None);
        }
    }
    run_all(&mut first, None);
    run_all(&mut second, None);
    for r in 0..n {
        assert_eq!(first[r].work, pattern(10, len), "first bcast at rank {r}");
        assert_eq!(second[r].work, pattern(21, len), "second bcast at rank {r}");
    }
}

#[test]
fn a_failed_post_reports_only_after_what_was_posted_completed() {
    // 2-rank allreduce of 512 B: one exchange round, receive posted first (too long for the
    // send-first path). Rank 0's send post fails after its receive was posted.
    let (n, len) = (2, 512);
    let net = Rc::default();
    let mut ranks: Vec<SimRank> = (0..n)
        .map(|r| {
            let s = schedule::allreduce_recursive_doubling(n, r, len);
            SimRank::new(&net, r, 5, s, words((0..64).map(|_| 1)), vec![0; len])
        })
        .collect();
    ranks[0].t.fail_post = Some(1);
    for _ in 0..5 {
        ranks[0].step(None);
    }
    // Its receive is still posted: no outcome yet, whatever the error.
    assert!(
        ranks[0].outcome.is_none(),
        "reported before its receive completed"
    );
    ranks[1].step(Some(&sum_u64));
    ranks[0].step(Some(&sum_u64));
    match &ranks[0].outcome {
        Some(Err(e)) => assert!(e.to_string().contains("injected post failure"), "{e}"),
        other => panic!("expected the post error, got {other:?}"),
    }
    assert!(
        ranks[0].work.iter().all(|&b| b == 0),
        "the reduction ran after an error"
    );
}

#[test]
fn a_short_message_is_an_error_naming_both_lengths() {
    let net = Rc::default();
    // The root broadcasts 8 B, the other rank expects 16 B.
    let mut root = SimRank::new(
        &net,
        0,
        6,
        schedule::bcast_binomial(2, 0, 0, 8),
        vec![],
        vec![1; 8],
    );
    let mut other = SimRank::new(
        &net,
        1,
        6,
        schedule::bcast_binomial(2, 1, 0, 16),
        vec![],
        vec![0; 16],
    );
    root.step(None);
    root.step(None);
    other.step(None);
    other.step(None);
    match &other.outcome {
        Some(Err(e)) => assert!(
            e.to_string().contains("expected 16 B from rank 0, got 8 B"),
            "{e}"
        ),
        o => panic!("expected a length error, got {o:?}"),
    }
}

#[test]
fn blocking_runs_are_the_same_engine_to_the_end() {
    // A binomial broadcast run rank by rank in tree order, each to its end in one blocking
    // call: every parent has sent before its children run.
    for n in NS {
        for root in 0..n {
            let len = 100;
            let net = Rc::default();
            let mut ranks: Vec<SimRank> = (0..n)
                .map(|r| {
                    let work = if r == root {
                        pattern(root, len)
                    } else {
                        vec![0; len]
                    };
                    SimRank::new(
                        &net,
                        r,
                        8,
                        schedule::bcast_binomial(n, r, root, len),
                        vec![],
                        work,
                    )
                })
                .collect();
            for v in 0..n {
                let r = &mut ranks[(v + root) % n];
                r.t.may_wait = true;
                match r.exec.advance(&mut r.t, &r.bufs, None, true) {
                    Poll::Done(Ok(())) => {}
                    other => panic!("blocking run of rank {v} ended with {other:?}"),
                }
                assert_eq!(r.work, pattern(root, len), "{n} ranks, root {root}");
            }
        }
    }
}
