//! coll-hier's schedules run by the framework's simulator on several node layouts, compared
//! bit for bit with coll-base's on the same inputs (integer operations, where every
//! association gives the same bits).

use proptest::prelude::*;
use rmca_coll_base::{BaseModule, CollParams};
use rmca_framework::coll::sim::{fresh, rank, simulate, Reducer};

use super::*;

/// Layouts (node of every rank) coll-hier serves: even, uneven, interleaved, a lone rank.
const LAYOUTS: &[&[u32]] = &[
    &[0, 0, 1, 1],
    &[0, 0, 0, 1, 1],
    &[0, 1, 0, 1, 1, 2],
    &[5, 5, 2],
    &[0, 1, 1, 1, 1, 1, 1, 0],
    &[3, 3, 3, 1, 1, 1, 2, 2, 2],
];

fn hier(layout: &[u32], me: usize, long: usize) -> HierModule {
    let params = HierParams {
        allreduce_long: long,
        allgather_long: long,
        alltoall_linear: long,
    };
    HierModule::new(&CommShape::new(me, layout.to_vec()), params).expect("a hierarchical layout")
}

fn base(n: usize, me: usize) -> BaseModule {
    BaseModule::new(n, me, CollParams::default())
}

/// Distinct little-endian u32 values for rank `r`.
fn input(r: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (r.wrapping_mul(2654435761) ^ (i * 40503)) as u8)
        .collect()
}

fn sum_u32(dst: &mut [u8], src: &[u8], _src_first: bool) {
    for (d, s) in dst.chunks_exact_mut(4).zip(src.chunks_exact(4)) {
        let v = u32::from_le_bytes(d.try_into().unwrap())
            .wrapping_add(u32::from_le_bytes(s.try_into().unwrap()));
        d.copy_from_slice(&v.to_le_bytes());
    }
}

fn max_i32(dst: &mut [u8], src: &[u8], _src_first: bool) {
    for (d, s) in dst.chunks_exact_mut(4).zip(src.chunks_exact(4)) {
        let v = i32::from_le_bytes(d.try_into().unwrap())
            .max(i32::from_le_bytes(s.try_into().unwrap()));
        d.copy_from_slice(&v.to_le_bytes());
    }
}

/// Every rank's `Work` after an allreduce of `len` bytes by `module(rank)`.
fn allreduce(
    n: usize,
    len: usize,
    op: Reducer,
    module: impl Fn(usize) -> Box<dyn CollModule>,
) -> Vec<Vec<u8>> {
    let ranks = (0..n)
        .map(|r| {
            fresh(
                module(r).allreduce(len, 4, false).unwrap(),
                input(r, len),
                len,
            )
        })
        .collect();
    simulate(ranks, op)
}

/// The root's `Work` after a reduce of `len` bytes to `root`.
fn reduce(
    n: usize,
    root: usize,
    len: usize,
    op: Reducer,
    module: impl Fn(usize) -> Box<dyn CollModule>,
) -> Vec<u8> {
    let ranks = (0..n)
        .map(|r| {
            fresh(
                module(r).reduce(root, len, 4, false).unwrap(),
                input(r, len),
                len,
            )
        })
        .collect();
    simulate(ranks, op).swap_remove(root)
}

/// Every rank's `Work` after a broadcast of the root's input.
fn bcast(
    n: usize,
    root: usize,
    len: usize,
    module: impl Fn(usize) -> Box<dyn CollModule>,
) -> Vec<Vec<u8>> {
    let ranks = (0..n)
        .map(|r| {
            let s = module(r).bcast(root, len).unwrap();
            if r == root {
                rank(s, vec![], input(root, len))
            } else {
                fresh(s, vec![], len)
            }
        })
        .collect();
    simulate(ranks, sum_u32)
}

/// Every rank's `Work` after an allgather of `block`-byte blocks (rank r's block placed at
/// `r * block` by the caller).
fn allgather(
    n: usize,
    block: usize,
    module: impl Fn(usize) -> Box<dyn CollModule>,
) -> Vec<Vec<u8>> {
    let ranks = (0..n)
        .map(|r| {
            fresh(module(r).allgather(block).unwrap(), vec![], n * block)
                .with(r * block, &input(r, block))
        })
        .collect();
    simulate(ranks, sum_u32)
}

/// Every rank's result chunk after a reduce_scatter of `chunks` (4-byte elements).
fn reduce_scatter(
    chunks: &[std::ops::Range<usize>],
    op: Reducer,
    module: impl Fn(usize) -> Box<dyn CollModule>,
) -> Vec<Vec<u8>> {
    let n = chunks.len();
    let len = chunks.last().map_or(0, |c| c.end);
    let ranks = (0..n)
        .map(|r| {
            fresh(
                module(r).reduce_scatter(chunks, 4, false).unwrap(),
                input(r, len),
                len,
            )
        })
        .collect();
    simulate(ranks, op)
        .into_iter()
        .zip(chunks)
        .map(|(w, c)| w[c.clone()].to_vec())
        .collect()
}

/// Chunks of `words[r]` 4-byte elements for rank r, tiling the vector in rank order.
fn chunks_of(words: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut at = 0;
    words
        .iter()
        .map(|w| {
            let c = at..at + 4 * w;
            at = c.end;
            c
        })
        .collect()
}

/// Whether every node's members are consecutive ranks (what allgather and reduce_scatter
/// need).
fn consecutive(layout: &[u32]) -> bool {
    layout
        .iter()
        .enumerate()
        .all(|(i, n)| !layout[..i].contains(n) || layout[i - 1] == *n)
}

fn check_blocks(layout: &[u32], long: usize) {
    let n = layout.len();
    let h = |r| Box::new(hier(layout, r, long)) as Box<dyn CollModule>;
    let b = |r| Box::new(base(n, r)) as Box<dyn CollModule>;
    for block in [0, 1, 4, 12, 100] {
        let got = allgather(n, block, h);
        let want: Vec<u8> = (0..n).flat_map(|r| input(r, block)).collect();
        assert!(
            got.iter().all(|w| *w == want),
            "allgather {layout:?} {block} B"
        );
    }
    for words in [
        vec![0; n],
        vec![1; n],
        (0..n).map(|r| r % 3).collect(),
        vec![7; n],
    ] {
        let chunks = chunks_of(&words);
        for op in [sum_u32 as Reducer, max_i32] {
            assert_eq!(
                reduce_scatter(&chunks, op, h),
                reduce_scatter(&chunks, op, b),
                "reduce_scatter {layout:?} {words:?}"
            );
        }
    }
}

#[test]
fn allgather_and_reduce_scatter_equal_base_on_block_layouts() {
    let mut served = 0;
    for layout in LAYOUTS
        .iter()
        .chain(&[&[0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2][..]])
    {
        if !consecutive(layout) {
            continue;
        }
        served += 1;
        check_blocks(layout, usize::MAX);
        // Leaders' ring (reduce_scatter) and allgatherv ring for long vectors.
        check_blocks(layout, 8);
    }
    assert!(served >= 4, "too few block layouts checked");
}

#[test]
fn allgather_and_reduce_scatter_fall_through_on_interleaved_nodes() {
    let m = hier(&[0, 1, 0, 1, 1, 2], 0, usize::MAX);
    assert!(m.allgather(8).is_none());
    assert!(m.reduce_scatter(&chunks_of(&[1; 6]), 4, false).is_none());
    // And on a non-commutative operation.
    let m = hier(&[0, 0, 1, 1], 0, usize::MAX);
    assert!(m.reduce_scatter(&chunks_of(&[1; 4]), 4, true).is_none());
}

/// Every rank's `Work` after an alltoallv where rank r sends `size(r, p)` bytes to p, each
/// rank's schedule from `module(rank)`.
fn alltoallv(
    n: usize,
    size: impl Fn(usize, usize) -> usize,
    module: impl Fn(usize) -> Box<dyn CollModule>,
) -> Vec<Vec<u8>> {
    let ranges = |sizes: Vec<usize>| {
        let mut at = 0;
        sizes
            .into_iter()
            .map(|k| {
                at += k;
                at - k..at
            })
            .collect::<Vec<_>>()
    };
    let ranks = (0..n)
        .map(|r| {
            let sends = ranges((0..n).map(|p| size(r, p)).collect());
            let recvs = ranges((0..n).map(|p| size(p, r)).collect());
            let len = recvs.last().map_or(0, |c| c.end);
            let input = input(r, sends.last().map_or(0, |c| c.end));
            let s = module(r)
                .alltoallv(&sends, &recvs)
                .expect("a module of the stack provides it");
            fresh(s, input, len)
        })
        .collect();
    simulate(ranks, sum_u32)
}

#[test]
fn alltoall_posts_everything_at_once_up_to_its_threshold() {
    let layout = [0, 0, 1, 1, 2, 2];
    let n = layout.len();
    let want = alltoallv(n, |_, _| 8, |r| Box::new(base(n, r)));
    let got = alltoallv(n, |_, _| 8, |r| Box::new(hier(&layout, r, 8)));
    assert_eq!(got, want);
    // Linear: one round; above the threshold it falls through.
    let m = hier(&layout, 1, 8);
    let blocks = |k: usize| (0..n).map(|p| p * k..(p + 1) * k).collect::<Vec<_>>();
    assert_eq!(m.alltoallv(&blocks(8), &blocks(8)).unwrap().rounds.len(), 1);
    assert!(m.alltoallv(&blocks(9), &blocks(9)).is_none());
}

#[test]
fn alltoallv_members_choosing_differently_still_meet() {
    // Uneven sizes: ranks whose largest block exceeds the threshold take coll-base's
    // pairwise exchange, the others coll-hier's linear one; the results must not change.
    let layout = [0, 0, 0, 1, 1, 2, 2];
    let n = layout.len();
    let size = |r: usize, p: usize| {
        if (r, p) == (2, 3) {
            40
        } else {
            (r + p) % 5 * 4
        }
    };
    let want = alltoallv(n, size, |r| Box::new(base(n, r)));
    let stack = |r: usize| -> Box<dyn CollModule> {
        #[derive(Debug)]
        struct Stack(HierModule, BaseModule);
        impl CollModule for Stack {
            fn alltoallv(
                &self,
                s: &[std::ops::Range<usize>],
                r: &[std::ops::Range<usize>],
            ) -> Option<Schedule> {
                self.0.alltoallv(s, r).or_else(|| self.1.alltoallv(s, r))
            }
        }
        Box::new(Stack(hier(&layout, r, 16), base(n, r)))
    };
    let linear = (0..n)
        .filter(|&r| {
            let sends: Vec<_> = (0..n).map(|p| 0..size(r, p)).collect();
            let recvs: Vec<_> = (0..n).map(|p| 0..size(p, r)).collect();
            hier(&layout, r, 16).alltoallv(&sends, &recvs).is_some()
        })
        .count();
    assert!(
        linear > 0 && linear < n,
        "both forms in the job ({linear} linear)"
    );
    assert_eq!(alltoallv(n, size, stack), want);
}

fn check_layout(layout: &[u32], long: usize) {
    let n = layout.len();
    let h = |r| Box::new(hier(layout, r, long)) as Box<dyn CollModule>;
    let b = |r| Box::new(base(n, r)) as Box<dyn CollModule>;
    for len in [0, 4, 12, 64, 4 * 97] {
        for op in [sum_u32 as Reducer, max_i32] {
            let got = allreduce(n, len, op, h);
            assert_eq!(
                got,
                allreduce(n, len, op, b),
                "allreduce {layout:?} {len} B"
            );
            assert!(got.iter().all(|w| *w == got[0]));
            for root in 0..n {
                assert_eq!(
                    reduce(n, root, len, op, h),
                    reduce(n, root, len, op, b),
                    "reduce to {root} {layout:?} {len} B"
                );
            }
        }
        for root in 0..n {
            let got = bcast(n, root, len, h);
            assert!(
                got.iter().all(|w| *w == input(root, len)),
                "bcast from {root} {layout:?}"
            );
        }
    }
}

#[test]
fn results_equal_base_on_every_layout() {
    for layout in LAYOUTS {
        check_layout(layout, usize::MAX);
        // The ring between leaders for long vectors.
        check_layout(layout, 8);
    }
}

#[test]
fn barrier_completes_and_waits_for_everyone() {
    for layout in LAYOUTS {
        let n = layout.len();
        let all = || (0..n).map(|r| rank(hier(layout, r, 0).barrier().unwrap(), vec![], vec![]));
        simulate(all().collect(), sum_u32);
        // With any one rank absent, the barrier cannot complete.
        for absent in 0..n {
            let mut ranks: Vec<_> = all().collect();
            ranks[absent].sched.rounds.clear();
            let res =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| simulate(ranks, sum_u32)));
            assert!(
                res.is_err(),
                "{layout:?}: a barrier finished without rank {absent}"
            );
        }
    }
}

#[test]
fn inter_node_messages_only_between_leaders() {
    // 2 nodes x 3 ranks, root 4 (not its node's lowest rank): only the leaders 0 and 4 talk
    // across nodes, once each way at most.
    let layout = [0, 0, 0, 1, 1, 1];
    for r in 0..6 {
        let m = hier(&layout, r, usize::MAX);
        for s in [
            m.bcast(4, 64),
            m.reduce(4, 64, 4, false),
            m.allreduce(64, 4, false),
            m.barrier(),
            m.allgather(16),
            m.reduce_scatter(&chunks_of(&[2, 1, 3, 0, 4, 1]), 4, false),
        ] {
            let s = s.unwrap();
            let peers = s.rounds.iter().flat_map(|x| &x.comms).map(|c| match c {
                Comm::Send { peer, .. } | Comm::Recv { peer, .. } => *peer,
            });
            for p in peers {
                if layout[p] != layout[r] {
                    let leaders = [[0, 4], [0, 3]];
                    assert!(
                        leaders.iter().any(|l| l.contains(&r) && l.contains(&p)),
                        "rank {r} talks to {p} across nodes"
                    );
                }
            }
        }
    }
}

#[test]
fn non_commutative_and_other_operations_fall_through() {
    let m = hier(&[0, 0, 1, 1], 1, usize::MAX);
    assert!(m.reduce(0, 8, 4, true).is_none());
    assert!(m.allreduce(8, 4, true).is_none());
    assert!(m.gather(0, 8).is_none());
    assert!(m.scan(8, false).is_none());
}

#[test]
fn served_only_where_a_hierarchy_helps() {
    let params = rmca_framework::component::component_params(
        rmca_framework::component::Framework::Coll,
        &HIER,
        &[],
    )
    .unwrap();
    assert_eq!(HIER.priority(&params), PRIORITY);
    let q = |layout: &[u32]| {
        HIER.query(&CommShape::new(0, layout.to_vec()), &params)
            .is_some()
    };
    assert!(q(&[0, 0, 1, 1]));
    assert!(q(&[0, 1, 1]));
    assert!(!q(&[0, 0, 0]), "one node");
    assert!(!q(&[0, 1, 2]), "one rank per node");
    assert!(!q(&[0]));
    let mut inter = CommShape::new(0, vec![0, 0, 1, 1]);
    inter.inter = true;
    assert!(HIER.query(&inter, &params).is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any layout coll-hier serves gives coll-base's results bit for bit.
    #[test]
    fn random_layouts_match_base(
        layout in proptest::collection::vec(0u32..4, 2..10),
        root in 0usize..10,
        words in 0usize..40,
        long in prop_oneof![Just(usize::MAX), Just(8usize)],
    ) {
        let shape = CommShape::new(0, layout.clone());
        prop_assume!(HierModule::new(&shape, HierParams::default()).is_some());
        let n = layout.len();
        let (root, len) = (root % n, 4 * words);
        let h = |r| Box::new(hier(&layout, r, long)) as Box<dyn CollModule>;
        let b = |r| Box::new(base(n, r)) as Box<dyn CollModule>;
        prop_assert_eq!(allreduce(n, len, sum_u32, h), allreduce(n, len, sum_u32, b));
        prop_assert_eq!(reduce(n, root, len, sum_u32, h), reduce(n, root, len, sum_u32, b));
        let got = bcast(n, root, len, h);
        prop_assert!(got.iter().all(|w| *w == input(root, len)));
        simulate((0..n).map(|r| rank(h(r).barrier().unwrap(), vec![], vec![])).collect(), sum_u32);
        if consecutive(&layout) {
            let block = words % 9;
            let want: Vec<u8> = (0..n).flat_map(|r| input(r, block)).collect();
            prop_assert!(allgather(n, block, h).iter().all(|w| *w == want));
            let chunks = chunks_of(&(0..n).map(|r| (r * 7 + words) % 5).collect::<Vec<_>>());
            prop_assert_eq!(reduce_scatter(&chunks, sum_u32, h), reduce_scatter(&chunks, sum_u32, b));
        } else {
            prop_assert!(h(0).allgather(4).is_none());
        }
    }
}
