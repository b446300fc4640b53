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
    HierModule::new(&CommShape::new(me, layout.to_vec()), long).expect("a hierarchical layout")
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
    assert!(m.allgather(8).is_none());
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
        prop_assume!(HierModule::new(&shape, long).is_some());
        let n = layout.len();
        let (root, len) = (root % n, 4 * words);
        let h = |r| Box::new(hier(&layout, r, long)) as Box<dyn CollModule>;
        let b = |r| Box::new(base(n, r)) as Box<dyn CollModule>;
        prop_assert_eq!(allreduce(n, len, sum_u32, h), allreduce(n, len, sum_u32, b));
        prop_assert_eq!(reduce(n, root, len, sum_u32, h), reduce(n, root, len, sum_u32, b));
        let got = bcast(n, root, len, h);
        prop_assert!(got.iter().all(|w| *w == input(root, len)));
        simulate((0..n).map(|r| rank(h(r).barrier().unwrap(), vec![], vec![])).collect(), sum_u32);
    }
}
