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
    /// Elements (u32) moved (per block for allgather and alltoall; the largest count plus
    /// one for the varying ones, see [`vcount`]).
    elems: usize,
    /// An alltoallv: the rank whose input does not fit (every member then declines).
    decline: Option<usize>,
}

/// Elements rank `q` sends to rank `r` in varying collective `k` of `elems` (an allgatherv:
/// `r` is 0): uneven, zero for some pairs.
fn vcount(k: usize, q: usize, r: usize, elems: usize) -> usize {
    (k * 7 + q * 3 + r * 5) % (elems + 1)
}

/// Regions of `counts[i]` u32 elements laid out in reverse order with a one-element gap
/// before each (displacements out of rank order); the regions in bytes and the total.
fn reversed_regions(counts: &[usize]) -> (Vec<Range<usize>>, usize) {
    let mut at = 0;
    let mut regions = vec![0..0; counts.len()];
    for i in (0..counts.len()).rev() {
        at += 1;
        regions[i] = at * 4..(at + counts[i]) * 4;
        at += counts[i];
    }
    (regions, at * 4)
}

/// Rank `me`'s buffers of varying collective `k`: its input, its regions in it (alltoallv),
/// its receive regions, its output's length in bytes, and the run's `len`.
struct VBufs {
    send: Vec<u8>,
    sends: Vec<Range<usize>>,
    recvs: Vec<Range<usize>>,
    out: usize,
    len: usize,
}

fn vbufs(c: &Coll, k: usize, n: usize, me: usize) -> VBufs {
    let e = c.elems;
    match c.op {
        Op::Allgatherv => {
            let counts: Vec<usize> = (0..n).map(|q| vcount(k, q, 0, e)).collect();
            let (recvs, out) = reversed_regions(&counts);
            let send = bytemuck_bytes(&input(k, me, counts[me]));
            let len = send.len();
            VBufs {
                send,
                sends: Vec::new(),
                recvs,
                out,
                len,
            }
        }
        Op::Alltoallv { .. } => {
            let sc: Vec<usize> = (0..n).map(|r| vcount(k, me, r, e)).collect();
            let rc: Vec<usize> = (0..n).map(|q| vcount(k, q, me, e)).collect();
            let (sends, total) = reversed_regions(&sc);
            let (recvs, out) = reversed_regions(&rc);
            let send = bytemuck_bytes(&input(k, me, total / 4));
            let len = sc.iter().sum::<usize>() * 4;
            VBufs {
                send,
                sends,
                recvs,
                out,
                len,
            }
        }
        _ => unreachable!(),
    }
}

impl Coll {
    fn plain(op: Op, elems: usize) -> Self {
        Self {
            op,
            elems,
            decline: None,
        }
    }

    /// Bytes of a rank's slot (the run's `len`) with `n` ranks, for collective `k`.
    fn slot_bytes(&self, n: usize, k: usize) -> usize {
        match self.op {
            Op::Alltoall | Op::Scatter { .. } => n * self.elems * 4,
            Op::ReduceScatter { .. } => rs_chunks(k, n, self.elems).last().map_or(0, |c| c.end),
            Op::Allgatherv | Op::Alltoallv { .. } => (0..n)
                .map(|q| vbufs(self, k, n, q).len + alltoallv_header(n))
                .max()
                .unwrap_or(0),
            _ => self.elems * 4,
        }
    }

    /// Bytes of rank `me`'s output with `n` ranks, for collective `k`.
    fn out_bytes(&self, n: usize, k: usize, me: usize) -> usize {
        match self.op {
            Op::Allgather | Op::Alltoall | Op::Gather { .. } => n * self.elems * 4,
            Op::ReduceScatter { .. } => rs_chunks(k, n, self.elems)[me].len(),
            _ => self.elems * 4,
        }
    }

    /// The op rank `me` runs for collective `k` (a reduce_scatter's names its own block).
    fn op_of(&self, n: usize, k: usize, me: usize) -> Op {
        match self.op {
            Op::ReduceScatter { elem, .. } => {
                let mine = rs_chunks(k, n, self.elems)[me].clone();
                Op::ReduceScatter {
                    elem,
                    start: mine.start,
                    end: mine.end,
                }
            }
            op => op,
        }
    }
}

/// The byte chunks of reduce_scatter `k` of scale `elems` on `n` ranks: uneven, zero for
/// some ranks, tiling the input in rank order.
fn rs_chunks(k: usize, n: usize, elems: usize) -> Vec<Range<usize>> {
    let mut at = 0;
    (0..n)
        .map(|r| {
            let c = vcount(k, r, 1, elems) * 4;
            at += c;
            at - c..at
        })
        .collect()
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
        Op::ReduceScatter { .. } => {
            let chunk = rs_chunks(k, n, c.elems)[me].clone();
            let total = c.slot_bytes(n, k) / 4;
            let mut acc = input(k, 0, total);
            for q in 1..n {
                for (a, x) in acc.iter_mut().zip(input(k, q, total)) {
                    *a = op(*a, x);
                }
            }
            Some(acc[chunk.start / 4..chunk.end / 4].to_vec())
        }
        Op::Gather { root } => {
            (me == root).then(|| (0..n).flat_map(|q| input(k, q, c.elems)).collect())
        }
        Op::Scatter { root } => {
            Some(input(k, root, n * c.elems)[me * c.elems..(me + 1) * c.elems].to_vec())
        }
        Op::Allgather => Some((0..n).flat_map(|q| input(k, q, c.elems)).collect()),
        Op::Alltoall => Some(
            (0..n)
                .flat_map(|q| input(k, q, n * c.elems)[me * c.elems..(me + 1) * c.elems].to_vec())
                .collect(),
        ),
        // Checked as bytes by `vexpected`.
        Op::Allgatherv | Op::Alltoallv { .. } => None,
    }
}

/// What rank `me` must hold after varying collective `k`: every region filled from its
/// sender, the gaps untouched (0xEE).
fn vexpected(c: &Coll, k: usize, n: usize, me: usize) -> Vec<u8> {
    let mine = vbufs(c, k, n, me);
    let mut out = vec![0xEE; mine.out];
    for q in 0..n {
        let theirs = vbufs(c, k, n, q);
        let block = match c.op {
            Op::Allgatherv => &theirs.send[..],
            _ => &theirs.send[theirs.sends[me].clone()],
        };
        out[mine.recvs[q].clone()].copy_from_slice(block);
    }
    out
}

/// Run `colls` on `n` ranks over one segment, stepping the rank `order[i % len]` picks
/// (modulo the ranks still running) at step `i`; panics on a wrong result or a deadlock.
fn simulate(n: usize, colls: &[Coll], order: &[usize]) {
    let max = colls
        .iter()
        .enumerate()
        .map(|(k, c)| c.slot_bytes(n, k))
        .max()
        .unwrap_or(0);
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
        sends: Vec<Range<usize>>,
        recvs: Vec<Range<usize>>,
    }
    let mut ranks: Vec<Rank> = (0..n)
        .map(|_| Rank {
            k: 0,
            synced: None,
            run: None,
            send: Vec::new(),
            work: Vec::new(),
            sends: Vec::new(),
            recvs: Vec::new(),
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
        let varying = matches!(c.op, Op::Allgatherv | Op::Alltoallv { .. });
        if rank.run.is_none() && varying {
            let b = vbufs(c, rank.k, n, me);
            let fits = c.decline != Some(me);
            let (op, len) = match c.op {
                Op::Alltoallv { .. } => (Op::Alltoallv { fits }, if fits { b.len } else { 0 }),
                op => (op, b.len),
            };
            (rank.send, rank.sends, rank.recvs) = (b.send, b.sends, b.recvs);
            rank.work = vec![0xEE; b.out];
            let run = Run::new(op, layout, me, rank.k as u32 + 1, len);
            rank.run = Some(run.after_clear(rank.synced));
        }
        if rank.run.is_none() {
            let bytes = c.slot_bytes(n, rank.k);
            rank.send = bytemuck_bytes(&input(rank.k, me, bytes / 4));
            rank.work = match c.op {
                Op::Bcast { root } if root == me => rank.send.clone(),
                _ => vec![0xEE; c.out_bytes(n, rank.k, me)],
            };
            let op = match c.op {
                // Barriers are numbered among themselves.
                Op::Barrier { .. } => Op::Barrier {
                    round: colls[..=rank.k]
                        .iter()
                        .filter(|c| matches!(c.op, Op::Barrier { .. }))
                        .count() as u32,
                },
                _ => c.op_of(n, rank.k, me),
            };
            let run = Run::new(op, layout, me, rank.k as u32 + 1, bytes);
            rank.run = Some(run.after_clear(rank.synced));
        }
        let run = rank.run.as_mut().unwrap();
        let step = if varying {
            let v = Varying {
                sends: &rank.sends,
                recvs: &rank.recvs,
            };
            run.poll_v(&mem, &rank.send, &mut rank.work, v)
        } else {
            run.poll(&mem, &rank.send, &mut rank.work, Some(&reduce_u32))
        };
        match step {
            Step::Done => {
                if matches!(c.op, Op::Alltoallv { .. }) {
                    assert_eq!(run.declined(), c.decline.is_some(), "rank {me}: {c:?}");
                    assert_eq!(run.truncated(), None);
                }
                if varying && !run.declined() {
                    assert_eq!(
                        rank.work,
                        vexpected(c, rank.k, n, me),
                        "rank {me}, collective {} {:?} of {n} ranks",
                        rank.k,
                        c
                    );
                }
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
    (0..12u8, 0..n, any::<bool>(), 0..40usize).prop_map(move |(kind, root, split, elems)| {
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
            5 => Op::Alltoall,
            6 => Op::Allgatherv,
            9 => Op::ReduceScatter {
                elem: 4,
                start: 0,
                end: 0,
            },
            10 => Op::Gather { root },
            11 => Op::Scatter { root },
            _ => Op::Alltoallv { fits: true },
        };
        Coll {
            op,
            elems: if kind == 0 { 0 } else { elems },
            // Kind 8: an alltoallv that the member `root` cannot fit.
            decline: (kind == 8).then_some(root),
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
            colls.push(Coll::plain(Op::Bcast { root }, 7));
            for split in [false, true] {
                let reduce = Op::Reduce {
                    root,
                    elem: 4,
                    split,
                };
                colls.push(Coll::plain(reduce, 13));
                colls.push(Coll::plain(Op::Allreduce { elem: 4, split }, 3));
            }
            // Inline (one u32 per block) and in the data slots.
            for elems in [1, 20] {
                colls.push(Coll::plain(Op::Allgather, elems));
                colls.push(Coll::plain(Op::Alltoall, elems));
            }
            // Uneven counts with zeros, out-of-order displacements, inline and in the slots;
            // an alltoallv that the member `root` cannot fit.
            for elems in [3, 30] {
                colls.push(Coll::plain(Op::Allgatherv, elems));
                colls.push(Coll::plain(Op::Alltoallv { fits: true }, elems));
            }
            colls.push(Coll {
                decline: Some(root),
                ..Coll::plain(Op::Alltoallv { fits: true }, 5)
            });
            colls.push(Coll::plain(Op::Barrier { round: 0 }, 0));
            // Inline, stamped (the last line partly filled, full, every line) and past the
            // stamped lines.
            for elems in [12, 16, 17, 26, 27, 28, 64] {
                let reduce = Op::Reduce {
                    root,
                    elem: 4,
                    split: false,
                };
                colls.push(Coll::plain(reduce, elems));
                let allreduce = Op::Allreduce {
                    elem: 4,
                    split: false,
                };
                colls.push(Coll::plain(allreduce, elems));
            }
            // Uneven blocks with zeros, inline, stamped and in the slots.
            for elems in [2, 20, 40, 90] {
                let rs = Op::ReduceScatter {
                    elem: 4,
                    start: 0,
                    end: 0,
                };
                colls.push(Coll::plain(rs, elems));
            }
            for elems in [1, 20] {
                colls.push(Coll::plain(Op::Gather { root }, elems));
                colls.push(Coll::plain(Op::Scatter { root }, elems));
            }
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
            lines: Lines::default(),
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

#[test]
fn varying_exchanges_past_eleven_ranks_keep_the_alltoallv_header_in_the_slot() {
    // 12 offsets and more do not fit the post line: header and blocks in the data slot.
    assert!(alltoallv_header(12) > INLINE && alltoallv_header(11) <= INLINE);
    for n in [11, 12, 13] {
        let colls = [
            Coll::plain(Op::Alltoallv { fits: true }, 3),
            Coll::plain(Op::Allgatherv, 9),
            Coll::plain(Op::Alltoallv { fits: true }, 30),
            Coll {
                decline: Some(n - 1),
                ..Coll::plain(Op::Alltoallv { fits: true }, 2)
            },
            Coll::plain(Op::Alltoallv { fits: true }, 1),
        ];
        simulate(n, &colls, &[0, 3, 1, 4, 1, 5, 9, 2, 6]);
        simulate(n, &colls, &[0]);
    }
}

#[test]
fn stamped_lines_carry_the_post_and_the_waiter_polls_them() {
    // 100 bytes: 48 in the post line, 52 in the first stamped line.
    let layout = Layout::new(2, 1024);
    let mem = VecMem(RefCell::new(vec![0; layout.len()]));
    let reduce = Op::Reduce {
        root: 0,
        elem: 4,
        split: false,
    };
    let mut root = Run::new(reduce, layout, 0, 1, 100);
    let (send, mut work) = (vec![1u8; 100], vec![0u8; 100]);
    let Step::Wait(w) = root.poll(&mem, &send, &mut work, Some(&reduce_u32)) else {
        panic!("the root must wait for the leaf");
    };
    assert_eq!(w.off, layout.posted(1, 1));
    assert_eq!(
        w.lines,
        Lines {
            at: layout.stamp(1, 1, 0),
            count: 1
        }
    );
    // Each stamped line is a cache line of its own, in the leaf's data slot, past the
    // control blocks.
    assert!(layout.stamp(1, 1, 0) >= layout.arrived() + LINE);
    assert_eq!(layout.stamp(1, 1, 1) - layout.stamp(1, 1, 0), 64);
    assert!(!w.ready(&mem));
    let mut leaf = Run::new(reduce, layout, 1, 1, 100);
    let data: Vec<u8> = (0..100u8).collect();
    assert!(matches!(
        leaf.poll(&mem, &data, &mut [], Some(&reduce_u32)),
        Step::Posted { .. }
    ));
    // The stamp and the post say the same, and the waiter sees both.
    assert_eq!(
        mem.load(layout.stamp(1, 1, 0)),
        mem.load(layout.posted(1, 1))
    );
    assert!(w.ready(&mem));
    // Bytes 48.. of the input follow the stamp.
    let mut tail = vec![0u8; 52];
    mem.view(layout.stamp(1, 1, 0) + 4, 52, &mut |b| {
        tail.copy_from_slice(b)
    });
    assert_eq!(tail, data[48..]);
    // An inline reduction and a split one have no stamped lines.
    assert_eq!(stamped_lines(INLINE), 0);
    assert_eq!(stamped_lines(STAMPED), STAMPED_LINES);
    let split = Op::Allreduce {
        elem: 4,
        split: true,
    };
    assert_eq!(Run::new(split, layout, 0, 2, 100).stamped, 0);
    assert_eq!(Run::new(reduce, layout, 0, 2, STAMPED + 4).stamped, 0);
}

#[test]
fn gather_leaves_and_the_scatter_root_do_not_wait_for_readers() {
    // A gather's leaf and a scatter's root post and are done at once (the root, the readers
    // free the slot later); their next use of the slot waits for the readers.
    let layout = Layout::new(3, 64);
    let mem = VecMem(RefCell::new(vec![0; layout.len()]));
    let mut leaf = Run::new(Op::Gather { root: 0 }, layout, 2, 1, 8);
    assert!(matches!(
        leaf.poll(&mem, &[3; 8], &mut [], None),
        Step::Posted { .. }
    ));
    assert_eq!(leaf.poll(&mem, &[3; 8], &mut [], None), Step::Done);
    assert_eq!(leaf.clears(), None);
    let mut root = Run::new(Op::Scatter { root: 1 }, layout, 1, 2, 24);
    let send: Vec<u8> = (0..24).collect();
    let mut own = [0u8; 8];
    assert!(matches!(
        root.poll(&mem, &send, &mut own, None),
        Step::Posted { .. }
    ));
    assert_eq!(root.poll(&mem, &send, &mut own, None), Step::Done);
    assert_eq!(own, send[8..16]);
    // The gather's root at 1 waits for rank 1's block (rank 1 has not run it).
    let mut groot = Run::new(Op::Gather { root: 0 }, layout, 0, 1, 8);
    let mut all = [0u8; 24];
    assert!(matches!(
        groot.poll(&mem, &[1; 8], &mut all, None),
        Step::Wait(Wait { from: Some(1), .. })
    ));
}

#[test]
fn the_scatter_root_publishes_only_the_other_members_blocks() {
    // Its own block goes straight to its output: writing it to the slot too would cost a
    // copy of a block no one reads (a third of the bytes here, half at two ranks); blocks
    // shorter than SKIP_OWN_BLOCK go in one copy with the rest.
    let layout = Layout::new(3, 4096);
    let mem = VecMem(RefCell::new(vec![0; layout.len()]));
    let (block, seq) = (SKIP_OWN_BLOCK, 1);
    let send: Vec<u8> = (0..3 * block).map(|i| (i % 251 + 1) as u8).collect();
    let mut own = vec![0u8; block];
    let mut root = Run::new(Op::Scatter { root: 1 }, layout, 1, seq, 3 * block);
    assert!(matches!(
        root.poll(&mem, &send, &mut own, None),
        Step::Posted { .. }
    ));
    assert_eq!(root.poll(&mem, &send, &mut own, None), Step::Done);
    assert_eq!(own, send[block..2 * block]);
    let at = layout.data(1, seq, 3 * block);
    let slot = mem.0.borrow()[at..at + 3 * block].to_vec();
    assert_eq!(slot[..block], send[..block], "rank 0's block");
    assert_eq!(slot[2 * block..], send[2 * block..], "rank 2's block");
    assert!(
        slot[block..2 * block].iter().all(|&b| b == 0),
        "the root's own block was written to its slot"
    );
}

#[test]
fn reduce_scatter_member_with_an_empty_block_waits_for_nobody() {
    // Three ranks, one u32 element in all (OSU's reduce_scatter of 4 B on more ranks than
    // elements): rank 0's block holds it, ranks 1 and 2 have empty blocks.
    let layout = Layout::new(3, 64);
    let mem = VecMem(RefCell::new(vec![0; layout.len()]));
    let rs = |me: usize, end: usize| {
        let op = Op::ReduceScatter {
            elem: 4,
            start: 0,
            end,
        };
        Run::new(op, layout, me, 1, 4)
    };
    let inputs: Vec<[u8; 4]> = (0..3u32).map(|q| (q + 5).to_ne_bytes()).collect();
    let (mut r0, mut r1, mut r2) = (rs(0, 4), rs(1, 0), rs(2, 0));
    let mut out0 = [0u8; 4];
    // Rank 1 posts its input and is done before anyone else entered.
    assert!(matches!(
        r1.poll(&mem, &inputs[1], &mut [], Some(&reduce_u32)),
        Step::Posted { .. }
    ));
    assert_eq!(
        r1.poll(&mem, &inputs[1], &mut [], Some(&reduce_u32)),
        Step::Done
    );
    // It waited for nobody, so it learned nothing of the others' progress.
    assert_eq!(r1.clears(), None);
    // Rank 0 (the block's owner) waits for rank 2's input.
    assert!(matches!(
        r0.poll(&mem, &inputs[0], &mut out0, Some(&reduce_u32)),
        Step::Posted { .. }
    ));
    assert!(matches!(
        r0.poll(&mem, &inputs[0], &mut out0, Some(&reduce_u32)),
        Step::Wait(Wait { from: Some(2), .. })
    ));
    assert!(matches!(
        r2.poll(&mem, &inputs[2], &mut [], Some(&reduce_u32)),
        Step::Posted { .. }
    ));
    assert_eq!(
        r2.poll(&mem, &inputs[2], &mut [], Some(&reduce_u32)),
        Step::Done
    );
    assert_eq!(
        r0.poll(&mem, &inputs[0], &mut out0, Some(&reduce_u32)),
        Step::Done
    );
    assert_eq!(u32::from_ne_bytes(out0), op(op(5, 6), 7));
    assert_eq!(r0.clears(), Some(0));
}
