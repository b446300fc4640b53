//! The protocol run by several simulated ranks over one in-memory segment, their steps
//! interleaved in orders proptest draws: every collective of a sequence gives the expected
//! bytes on every rank, and no interleaving deadlocks.

use super::*;
use proptest::prelude::*;
use std::cell::RefCell;

/// A segment in a vector (one thread steps every rank, so plain loads and stores serve).
struct VecMem(RefCell<Vec<u8>>);

impl Mem for VecMem {
    fn load(&self, off: usize) -> u32 {
        let m = self.0.borrow();
        u32::from_ne_bytes(m[off..off + 4].try_into().unwrap())
    }
    fn store(&self, off: usize, v: u32) {
        self.0.borrow_mut()[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }
    fn mark(&self, off: usize, v: u32) {
        self.store(off, v);
    }
    fn add(&self, off: usize, v: u32) -> u32 {
        let sum = self.load(off).wrapping_add(v);
        self.store(off, sum);
        sum
    }
    fn write(&self, off: usize, data: &[u8]) {
        self.0.borrow_mut()[off..off + data.len()].copy_from_slice(data);
    }
    fn view(&self, off: usize, len: usize, f: &mut dyn FnMut(&[u8])) {
        let m = self.0.borrow();
        f(&m[off..off + len]);
    }
}

/// A non-commutative combination of u32 elements, so that the order shows in the result:
/// `a op b = a * 31 + b` (wrapping).
fn op(a: u32, b: u32) -> u32 {
    a.wrapping_mul(31).wrapping_add(b)
}

/// The executor's reduction contract for `op` on u32 (`dst = acc op src` when not
/// `src_first`, `acc` = `dst` when `None`).
fn reduce_u32(dst: &mut [u8], src: &[u8], acc: Option<&[u8]>, src_first: bool) {
    for i in 0..dst.len() / 4 {
        let word = |b: &[u8]| u32::from_ne_bytes(b[i * 4..i * 4 + 4].try_into().unwrap());
        let a = acc.map_or_else(|| word(dst), word);
        let s = word(src);
        let r = if src_first { op(s, a) } else { op(a, s) };
        dst[i * 4..i * 4 + 4].copy_from_slice(&r.to_ne_bytes());
    }
}

/// One collective of a test sequence (the same on every rank).
#[derive(Clone, Debug)]
struct Coll {
    op: Op,
    /// Elements (u32) moved (per block for allgather and alltoall).
    elems: usize,
}

impl Coll {
    /// Bytes of a rank's input and of its slot (the run's `len`) with `n` ranks.
    fn slot_bytes(&self, n: usize) -> usize {
        match self.op {
            Op::Alltoall => n * self.elems * 4,
            _ => self.elems * 4,
        }
    }

    /// Bytes of a rank's output with `n` ranks.
    fn out_bytes(&self, n: usize) -> usize {
        match self.op {
            Op::Allgather | Op::Alltoall => n * self.elems * 4,
            _ => self.elems * 4,
        }
    }
}

/// Rank `r`'s input for collective `k`.
fn input(k: usize, r: usize, elems: usize) -> Vec<u32> {
    (0..elems)
        .map(|i| (k * 1000 + r * 100 + i) as u32 ^ 0x5a5a)
        .collect()
}

/// What rank `me` must hold after collective `k` (`None`: nothing checked).
fn expected(c: &Coll, k: usize, n: usize, me: usize) -> Option<Vec<u32>> {
    let folded = || {
        let mut acc = input(k, 0, c.elems);
        for q in 1..n {
            for (a, x) in acc.iter_mut().zip(input(k, q, c.elems)) {
                *a = op(*a, x);
            }
        }
        acc
    };
    match c.op {
        Op::Barrier { .. } => None,
        Op::Bcast { root } => Some(input(k, root, c.elems)),
        Op::Reduce { root, .. } => (me == root).then(folded),
        Op::Allreduce { .. } => Some(folded()),
        Op::Allgather => Some((0..n).flat_map(|q| input(k, q, c.elems)).collect()),
        Op::Alltoall => Some(
            (0..n)
                .flat_map(|q| input(k, q, n * c.elems)[me * c.elems..(me + 1) * c.elems].to_vec())
                .collect(),
        ),
    }
}

/// Run `colls` on `n` ranks over one segment, stepping the rank `order[i % len]` picks
/// (modulo the ranks still running) at step `i`; panics on a wrong result or a deadlock.
fn simulate(n: usize, colls: &[Coll], order: &[usize]) {
    let max = colls.iter().map(|c| c.slot_bytes(n)).max().unwrap_or(0);
    let layout = Layout::new(n, max);
    let mem = VecMem(RefCell::new(vec![0; layout.len()]));
    // Per rank: the collective it is at, its run and its buffers.
    struct Rank {
        k: usize,
        /// What its last run that knew said every other member finished ([`Run::clears`]).
        synced: Option<u32>,
        run: Option<Run>,
        send: Vec<u8>,
        work: Vec<u8>,
    }
    let mut ranks: Vec<Rank> = (0..n)
        .map(|_| Rank {
            k: 0,
            synced: None,
            run: None,
            send: Vec::new(),
            work: Vec::new(),
        })
        .collect();
    // After a rank waits, the next live rank is stepped (until one moves), so a rank that
    // waits never starves the others; a whole round of waits is a deadlock.
    let mut forced: Option<usize> = None;
    let mut idle_streak = 0;
    let mut step = 0;
    // Posts that released everyone, per collective.
    let mut releases = vec![0usize; colls.len()];
    loop {
        let live: Vec<usize> = (0..n).filter(|&r| ranks[r].k < colls.len()).collect();
        if live.is_empty() {
            // Exactly one member (the last to arrive) released each barrier, and nothing else
            // released anyone.
            for (k, c) in colls.iter().enumerate() {
                let barrier = matches!(c.op, Op::Barrier { .. });
                assert_eq!(releases[k], usize::from(barrier), "collective {k} {c:?}");
            }
            return;
        }
        let pick = forced.unwrap_or(order[step % order.len()]) % live.len();
        let me = live[pick];
        step += 1;
        let rank = &mut ranks[me];
        let c = &colls[rank.k];
        if rank.run.is_none() {
            let bytes = c.slot_bytes(n);
            rank.send = bytemuck_bytes(&input(rank.k, me, bytes / 4));
            rank.work = match c.op {
                Op::Bcast { root } if root == me => rank.send.clone(),
                _ => vec![0xEE; c.out_bytes(n)],
            };
            let op = match c.op {
                // Barriers are numbered among themselves.
                Op::Barrier { .. } => Op::Barrier {
                    round: colls[..=rank.k]
                        .iter()
                        .filter(|c| matches!(c.op, Op::Barrier { .. }))
                        .count() as u32,
                },
                op => op,
            };
            let run = Run::new(op, layout, me, rank.k as u32 + 1, bytes);
            rank.run = Some(run.after_clear(rank.synced));
        }
        let run = rank.run.as_mut().unwrap();
        match run.poll(&mem, &rank.send, &mut rank.work, Some(&reduce_u32)) {
            Step::Done => {
                if let Some(want) = expected(c, rank.k, n, me) {
                    assert_eq!(
                        rank.work,
                        bytemuck_bytes(&want),
                        "rank {me}, collective {} {:?} of {n} ranks",
                        rank.k,
                        c
                    );
                }
                if let Some(done) = run.clears() {
                    rank.synced = Some(done);
                }
                rank.run = None;
                rank.k += 1;
                (idle_streak, forced) = (0, None);
            }
            Step::Posted { release, .. } => {
                if release {
                    // Released: every member has arrived at this barrier.
                    releases[rank.k] += 1;
                    let k = rank.k;
                    assert!(
                        ranks
                            .iter()
                            .all(|r| r.k > k || (r.k == k && r.run.is_some())),
                        "rank {me} released collective {k} before every member arrived"
                    );
                }
                (idle_streak, forced) = (0, None)
            }
            Step::Wait(w) => {
                // Whom it waits for: someone, and nobody who finished this collective
                // (a member that exited after it must never be taken for a dead one).
                let (k, awaited) = (rank.k, run.awaited(&mem, w));
                assert!(!awaited.is_empty(), "rank {me} waits for nobody at {w:?}");
                for q in awaited {
                    assert!(
                        q != me && ranks[q].k <= k,
                        "rank {me} at collective {k} awaits rank {q}, which finished it"
                    );
                }
                idle_streak += 1;
                forced = Some(pick + 1);
                assert!(
                    idle_streak <= live.len(),
                    "deadlock: every live rank waits, at collectives {:?}",
                    ranks.iter().map(|r| r.k).collect::<Vec<_>>()
                );
            }
        }
    }
}

fn bytemuck_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn any_coll(n: usize) -> impl Strategy<Value = Coll> {
    (0..6u8, 0..n, any::<bool>(), 0..40usize).prop_map(move |(kind, root, split, elems)| {
        let op = match kind {
            0 => Op::Barrier { round: 0 },
            1 => Op::Bcast { root },
            2 => Op::Reduce {
                root,
                elem: 4,
                split,
            },
            3 => Op::Allreduce { elem: 4, split },
            4 => Op::Allgather,
            _ => Op::Alltoall,
        };
        Coll {
            op,
            elems: if kind == 0 { 0 } else { elems },
        }
    })
}

fn case() -> impl Strategy<Value = (usize, Vec<Coll>, Vec<usize>)> {
    (1..=5usize).prop_flat_map(|n| {
        (
            Just(n),
            prop::collection::vec(any_coll(n), 1..12),
            prop::collection::vec(0..64usize, 1..40),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    /// Any sequence of collectives, any interleaving of the ranks: right bytes, no deadlock.
    #[test]
    fn every_interleaving_gives_the_results((n, colls, order) in case()) {
        simulate(n, &colls, &order);
    }
}

#[test]
fn round_robin_sequences_at_one_to_five_ranks() {
    for n in 1..=5 {
        let mut colls = Vec::new();
        for root in 0..n {
            colls.push(Coll {
                op: Op::Bcast { root },
                elems: 7,
            });
            for split in [false, true] {
                colls.push(Coll {
                    op: Op::Reduce {
                        root,
                        elem: 4,
                        split,
                    },
                    elems: 13,
                });
                colls.push(Coll {
                    op: Op::Allreduce { elem: 4, split },
                    elems: 3,
                });
            }
            // Inline (one u32 per block) and in the data slots.
            for elems in [1, 20] {
                colls.push(Coll {
                    op: Op::Allgather,
                    elems,
                });
                colls.push(Coll {
                    op: Op::Alltoall,
                    elems,
                });
            }
            colls.push(Coll {
                op: Op::Barrier { round: 0 },
                elems: 0,
            });
        }
        simulate(n, &colls, &[0, 1, 2, 3, 4]);
        // One rank runs as far ahead as the protocol lets it before the others move.
        simulate(n, &colls, &[0; 1]);
    }
}

#[test]
fn a_rank_runs_at_most_two_collectives_ahead() {
    // Rank 0 broadcasts three times before rank 1 moves: the third must wait for rank 1 to
    // have read the first (slot 1 is reused by collective 3).
    let layout = Layout::new(2, 8);
    let mem = VecMem(RefCell::new(vec![0; layout.len()]));
    let mut buf = [1u8; 8];
    for seq in 1..=2 {
        let mut r = Run::new(Op::Bcast { root: 0 }, layout, 0, seq, 8);
        assert!(matches!(
            r.poll(&mem, &[], &mut buf, None),
            Step::Posted { .. }
        ));
        assert_eq!(r.poll(&mem, &[], &mut buf, None), Step::Done);
    }
    let mut third = Run::new(Op::Bcast { root: 0 }, layout, 0, 3, 8);
    assert_eq!(
        third.poll(&mem, &[], &mut buf, None),
        Step::Wait(Wait {
            off: layout.freed(1),
            want: 1,
            sleepers: layout.freed_sleepers(1),
            from: Some(1),
        })
    );
    let mut out = [0u8; 8];
    let mut reader = Run::new(Op::Bcast { root: 0 }, layout, 1, 1, 8);
    assert_eq!(reader.poll(&mem, &[], &mut out, None), Step::Done);
    assert_eq!(out, [1u8; 8]);
    assert!(matches!(
        third.poll(&mem, &[], &mut buf, None),
        Step::Posted { .. }
    ));
}

#[test]
fn sequence_numbers_compare_across_the_wrap() {
    assert!(reached(5, 5) && reached(6, 5) && !reached(4, 5));
    assert!(reached(1, u32::MAX) && !reached(u32::MAX, 1));
    assert!(reached(0, 0u32.wrapping_sub(2)));
}

#[test]
fn shares_tile_the_vector_on_element_boundaries() {
    for n in 1..6 {
        for elems in 0..20 {
            let mut at = 0;
            for q in 0..n {
                let s = share(elems * 8, 8, n, q);
                assert_eq!(s.start, at);
                assert_eq!(s.start % 8, 0);
                at = s.end;
            }
            assert_eq!(at, elems * 8);
        }
    }
}

#[test]
fn awaited_names_who_has_not_done_its_part() {
    // A barrier of 3: rank 0 waits for 1 and 2, then for 2 alone, then for nobody.
    let layout = Layout::new(3, 8);
    let mem = VecMem(RefCell::new(vec![0; layout.len()]));
    let barrier = |me| Run::new(Op::Barrier { round: 1 }, layout, me, 1, 0);
    let (mut r0, mut r1, mut r2) = (barrier(0), barrier(1), barrier(2));
    let Step::Wait(w) = r0.poll(&mem, &[], &mut [], None) else {
        panic!("rank 0 alone must wait");
    };
    assert_eq!(w.from, None);
    assert_eq!(r0.awaited(&mem, w), vec![1, 2]);
    assert!(matches!(r1.poll(&mem, &[], &mut [], None), Step::Wait(_)));
    assert_eq!(r0.awaited(&mem, w), vec![2]);
    assert!(matches!(
        r2.poll(&mem, &[], &mut [], None),
        Step::Posted { .. }
    ));
    assert!(r0.awaited(&mem, w).is_empty());
    assert_eq!(r0.poll(&mem, &[], &mut [], None), Step::Done);

    // A bcast: the readers wait for the root alone, until it posted.
    let mut buf = [7u8; 8];
    let mut reader = Run::new(Op::Bcast { root: 2 }, layout, 0, 2, 8);
    let Step::Wait(w) = reader.poll(&mem, &[], &mut buf, None) else {
        panic!("the reader must wait for the root");
    };
    assert_eq!(reader.awaited(&mem, w), vec![2]);
    let mut root = Run::new(Op::Bcast { root: 2 }, layout, 2, 2, 8);
    assert!(matches!(
        root.poll(&mem, &[], &mut buf, None),
        Step::Posted { .. }
    ));
    assert!(reader.awaited(&mem, w).is_empty());
}

#[test]
fn short_data_travels_in_the_control_line_next_to_posted() {
    let l = Layout::new(3, 1024);
    // OSU's 32-byte reductions (8 floats) travel inline.
    assert!(l.data(0, 1, 32) < l.arrived());
    for r in 0..3 {
        for seq in [1u32, 2] {
            let at = l.data(r, seq, INLINE);
            // In the 64-byte cache line of the `posted` word that publishes it, clear of the
            // control words, 16-byte aligned.
            let posted = l.posted(r, seq);
            assert_eq!(at / 64, posted / 64);
            assert_eq!((at + INLINE - 1) / 64, posted / 64);
            assert!(at >= l.sleepers(r, seq) + 4 && at.is_multiple_of(16));
            assert!(l.data(r, seq, INLINE + 1) >= l.arrived() + LINE);
            // `freed` and the pid (stored by the owner while peers poll `posted`) are in
            // another cache line.
            assert_ne!(l.freed(r) / 64, posted / 64);
            assert_ne!(l.pid(r) / 64, posted / 64);
        }
        assert_ne!(l.data(r, 1, 1), l.data(r, 2, 1), "two inline slots");
        // The two parities' post lines are in different adjacent-line prefetch pairs, and
        // the same parity's post word is the same word.
        assert_ne!(l.posted(r, 1) / 128, l.posted(r, 2) / 128);
        assert_eq!(l.posted(r, 1), l.posted(r, 3));
        assert_eq!(l.sleepers(r, 2), l.sleepers(r, 4));
    }
}

#[test]
fn a_rank_that_heard_everyone_in_the_last_collective_skips_the_freed_checks() {
    let layout = Layout::new(2, 64);
    let mem = VecMem(RefCell::new(vec![0; layout.len()]));
    let (send, mut work) = (vec![1u8; 8], vec![0u8; 8]);
    // Collective 3 on rank 0 while rank 1's `freed` still says 0 (< 3 - 2): without
    // knowledge it waits for rank 1 to free the slot collective 1 used...
    let allreduce = Op::Allreduce {
        elem: 4,
        split: false,
    };
    let mut blind = Run::new(allreduce, layout, 0, 3, 8);
    assert!(matches!(
        blind.poll(&mem, &send, &mut work, Some(&reduce_u32)),
        Step::Wait(Wait { off, .. }) if off == layout.freed(1)
    ));
    // ...but after an allreduce 2 (which saw rank 1's post of 2, so rank 1 had finished 1)
    // it writes and posts at once.
    let mut told = Run::new(allreduce, layout, 0, 3, 8).after_clear(Some(2 - 1));
    assert!(matches!(
        told.poll(&mem, &send, &mut work, Some(&reduce_u32)),
        Step::Posted { .. }
    ));
}

#[test]
fn only_runs_that_heard_every_member_clear_earlier_slots() {
    let layout = Layout::new(3, 64);
    let mem = VecMem(RefCell::new(vec![0; layout.len()]));
    // Everyone posted everything of collective 5 and freed 4: a lone rank finishes any run.
    for q in 0..3 {
        mem.store(layout.posted(q, 5), 5 * 4 + 2);
        mem.store(layout.freed(q), 4);
    }
    mem.store(layout.arrived(), 3);
    let clears = |op: Op, me: usize| {
        let mut run = Run::new(op, layout, me, 5, 8);
        let (send, mut work) = (vec![0u8; 8], vec![0u8; 8]);
        assert!(run.clears().is_none(), "nothing is known before the end");
        while run.poll(&mem, &send, &mut work, Some(&reduce_u32)) != Step::Done {}
        run.clears()
    };
    let reduce = |root| Op::Reduce {
        root,
        elem: 4,
        split: false,
    };
    assert_eq!(clears(Op::Barrier { round: 1 }, 0), Some(5));
    let allreduce = Op::Allreduce {
        elem: 4,
        split: true,
    };
    assert_eq!(clears(allreduce, 1), Some(4));
    assert_eq!(clears(reduce(2), 2), Some(4), "the root heard everyone");
    assert_eq!(clears(reduce(2), 0), None, "a leaf heard nobody");
    assert_eq!(
        clears(Op::Bcast { root: 1 }, 0),
        None,
        "a reader heard the root only"
    );
    assert_eq!(
        clears(Op::Bcast { root: 1 }, 1),
        None,
        "the root heard nobody"
    );
    // An allgather or alltoall waited for every member's post, as an allreduce.
    for (op, len, out) in [(Op::Allgather, 8, 24), (Op::Alltoall, 12, 12)] {
        let mut run = Run::new(op, layout, 0, 5, len);
        let (send, mut work) = (vec![0u8; len], vec![0u8; out]);
        while run.poll(&mem, &send, &mut work, None) != Step::Done {}
        assert_eq!(run.clears(), Some(4), "{op:?}");
    }
}

#[test]
fn a_barrier_marks_arrival_in_the_next_collectives_post_line() {
    // The mark is the store that takes the next post's line back from its readers, inside
    // the barrier rather than on the next collective's critical path.
    let layout = Layout::new(2, 8);
    let mem = VecMem(RefCell::new(vec![0; layout.len()]));
    let mut b = Run::new(Op::Barrier { round: 1 }, layout, 0, 3, 0);
    assert!(matches!(b.poll(&mem, &[], &mut [], None), Step::Wait(_)));
    assert_eq!(mem.load(layout.posted(0, 4)), stage(3, 1));
    assert_eq!(
        mem.load(layout.posted(0, 3)),
        0,
        "this collective's line untouched"
    );
    // A bcast 4 from rank 0 posts over the mark (monotonic), and its reader gets it.
    let mut out = [0u8; 8];
    let mut b1 = Run::new(Op::Barrier { round: 1 }, layout, 1, 3, 0);
    assert!(matches!(
        b1.poll(&mem, &[], &mut [], None),
        Step::Posted { .. }
    ));
    assert_eq!(b.poll(&mem, &[], &mut [], None), Step::Done);
    assert_eq!(b1.poll(&mem, &[], &mut [], None), Step::Done);
    let mut root = Run::new(Op::Bcast { root: 0 }, layout, 0, 4, 8).after_clear(Some(3));
    let mut buf = [9u8; 8];
    assert!(matches!(
        root.poll(&mem, &[], &mut buf, None),
        Step::Posted { .. }
    ));
    let mut reader = Run::new(Op::Bcast { root: 0 }, layout, 1, 4, 8).after_clear(Some(3));
    assert_eq!(reader.poll(&mem, &[], &mut out, None), Step::Done);
    assert_eq!(out, [9u8; 8]);
}
