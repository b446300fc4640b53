//! Runs the schedules of N simulated ranks against each other ([`crate::coll::sim`]) and
//! compares with sequential references.

use std::ops::Range;

use super::*;
use crate::coll::sim::{fresh, rank, simulate, Rank, POISON};

/// Per-peer byte ranges of one side of an alltoallv.
type Layout = Vec<Range<usize>>;

/// Distinct bytes for (rank, index).
fn pattern(r: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (r * 131 + i * 7 + 1) as u8).collect()
}

// Element for order-sensitive reductions: a 2x2 matrix of wrapping u16 (associative, not
// commutative), so any deviation from the documented order changes the result.
const MAT: usize = 8;
fn mat_of(b: &[u8]) -> [u16; 4] {
    [0, 1, 2, 3].map(|i| u16::from_le_bytes([b[2 * i], b[2 * i + 1]]))
}
fn mat_mul(a: [u16; 4], b: [u16; 4]) -> [u16; 4] {
    let m = |x: u16, y: u16| x.wrapping_mul(y);
    [
        m(a[0], b[0]).wrapping_add(m(a[1], b[2])),
        m(a[0], b[1]).wrapping_add(m(a[1], b[3])),
        m(a[2], b[0]).wrapping_add(m(a[3], b[2])),
        m(a[2], b[1]).wrapping_add(m(a[3], b[3])),
    ]
}
fn put_mat(out: &mut [u8], m: [u16; 4]) {
    for i in 0..4 {
        out[2 * i..2 * i + 2].copy_from_slice(&m[i].to_le_bytes());
    }
}
fn mat_reduce(dst: &mut [u8], src: &[u8], src_first: bool) {
    for (d, s) in dst.chunks_exact_mut(MAT).zip(src.chunks_exact(MAT)) {
        let (a, b) = (mat_of(d), mat_of(s));
        put_mat(
            d,
            if src_first {
                mat_mul(b, a)
            } else {
                mat_mul(a, b)
            },
        );
    }
}
/// Sequential product of the ranks' vectors in the given rank order.
fn mat_reference(inputs: &[Vec<u8>], order: impl Iterator<Item = usize>) -> Vec<u8> {
    let mut order = order;
    let mut acc = inputs[order.next().unwrap()].clone();
    for r in order {
        mat_reduce(&mut acc, &inputs[r], false);
    }
    acc
}

// Commutative element (wrapping u32 sum) for algorithms that only promise rank-independent
// results (the ring).
fn sum_reduce(dst: &mut [u8], src: &[u8], _src_first: bool) {
    for (d, s) in dst.chunks_exact_mut(4).zip(src.chunks_exact(4)) {
        let v = u32::from_le_bytes(d.try_into().unwrap())
            .wrapping_add(u32::from_le_bytes(s.try_into().unwrap()));
        d.copy_from_slice(&v.to_le_bytes());
    }
}

const NS: Range<usize> = 1..9;

#[test]
fn barriers_complete_and_synchronize() {
    for n in NS {
        for algo in [barrier_dissemination, barrier_linear] {
            simulate(
                (0..n).map(|r| rank(algo(n, r), vec![], vec![])).collect(),
                sum_reduce,
            );
            // Synchronization: with rank 0 absent, nobody may finish (every rank depends on it).
            if n > 1 {
                let mut ranks: Vec<Rank> =
                    (0..n).map(|r| rank(algo(n, r), vec![], vec![])).collect();
                ranks[0].sched.rounds.clear();
                let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    simulate(ranks, sum_reduce)
                }));
                assert!(res.is_err(), "{n} ranks finished a barrier without rank 0");
            }
        }
    }
}

#[test]
fn bcasts_deliver_root_buffer() {
    type B = fn(usize, usize, usize, usize) -> Schedule;
    let algos: [(&str, B); 3] = [
        ("binomial", bcast_binomial),
        ("linear", bcast_linear),
        ("scatter_allgather", bcast_scatter_allgather),
    ];
    for n in NS {
        for root in 0..n {
            for len in [0, 1, 7, 64, 1000] {
                for (name, algo) in algos {
                    let want = pattern(root, len);
                    let ranks = (0..n).map(|r| {
                        if r == root {
                            rank(algo(n, r, root, len), vec![], want.clone())
                        } else {
                            fresh(algo(n, r, root, len), vec![], len)
                        }
                    });
                    for (r, got) in simulate(ranks.collect(), sum_reduce)
                        .into_iter()
                        .enumerate()
                    {
                        assert_eq!(got, want, "{name} n={n} root={root} len={len} rank={r}");
                    }
                }
            }
        }
    }
}

#[test]
fn reduces_follow_documented_order() {
    for n in NS {
        for root in 0..n {
            for count in [0, 1, 5] {
                let len = count * MAT;
                let inputs: Vec<Vec<u8>> = (0..n).map(|r| pattern(r, len)).collect();
                let sched: Vec<Rank> = (0..n)
                    .map(|r| fresh(reduce_binomial(n, r, root, len), inputs[r].clone(), len))
                    .collect();
                let got = simulate(sched, mat_reduce);
                assert_eq!(
                    got[root],
                    mat_reference(&inputs, (0..n).map(|i| (root + i) % n)),
                    "binomial n={n} root={root}"
                );
                let sched: Vec<Rank> = (0..n)
                    .map(|r| fresh(reduce_linear(n, r, root, len), inputs[r].clone(), len))
                    .collect();
                let got = simulate(sched, mat_reduce);
                assert_eq!(
                    got[root],
                    mat_reference(&inputs, 0..n),
                    "linear n={n} root={root}"
                );
            }
        }
    }
}

#[test]
fn allreduces_agree_everywhere() {
    for n in NS {
        for count in [0, 1, 3, 8, 9, 40] {
            let len = count * MAT;
            let inputs: Vec<Vec<u8>> = (0..n).map(|r| pattern(r, len)).collect();
            // Rank-ordered algorithms: exact non-commutative product in rank order.
            let want = mat_reference(&inputs, 0..n);
            let rd: Vec<Rank> = (0..n)
                .map(|r| {
                    fresh(
                        allreduce_recursive_doubling(n, r, len),
                        inputs[r].clone(),
                        len,
                    )
                })
                .collect();
            for (r, got) in simulate(rd, mat_reduce).into_iter().enumerate() {
                assert_eq!(got, want, "recursive_doubling n={n} count={count} rank={r}");
            }
            let rb: Vec<Rank> = (0..n)
                .map(|r| fresh(allreduce_reduce_bcast(n, r, len), inputs[r].clone(), len))
                .collect();
            for (r, got) in simulate(rb, mat_reduce).into_iter().enumerate() {
                assert_eq!(got, want, "reduce_bcast n={n} count={count} rank={r}");
            }
            // Ring: commutative op, element size 4.
            let want: Vec<u8> = {
                let mut acc = inputs[0].clone();
                for i in &inputs[1..] {
                    sum_reduce(&mut acc, i, false);
                }
                acc
            };
            let ring: Vec<Rank> = (0..n)
                .map(|r| fresh(allreduce_ring(n, r, len, 4), inputs[r].clone(), len))
                .collect();
            for (r, got) in simulate(ring, sum_reduce).into_iter().enumerate() {
                assert_eq!(got, want, "ring n={n} count={count} rank={r}");
            }
        }
    }
}

#[test]
fn gathers_and_scatters_place_blocks() {
    type G = fn(usize, usize, usize, usize) -> Schedule;
    for n in NS {
        for root in 0..n {
            for block in [0, 1, 13] {
                for (name, algo) in [
                    ("binomial", gather_binomial as G),
                    ("linear", gather_linear),
                ] {
                    // Gather: virtual-rank layout; rank r's block sits at slot (r - root) mod n.
                    let ranks = (0..n).map(|r| {
                        let v = (r + n - root) % n;
                        fresh(algo(n, r, root, block), vec![], n * block)
                            .with(v * block, &pattern(r, block))
                    });
                    let got = simulate(ranks.collect(), sum_reduce);
                    let want: Vec<u8> = (0..n)
                        .flat_map(|v| pattern((v + root) % n, block))
                        .collect();
                    assert_eq!(
                        got[root], want,
                        "gather {name} n={n} root={root} block={block}"
                    );
                }
                for (name, algo) in [
                    ("binomial", scatter_binomial as G),
                    ("linear", scatter_linear),
                ] {
                    let full: Vec<u8> = (0..n)
                        .flat_map(|v| pattern((v + root) % n, block))
                        .collect();
                    let ranks = (0..n).map(|r| {
                        if r == root {
                            rank(algo(n, r, root, block), vec![], full.clone())
                        } else {
                            fresh(algo(n, r, root, block), vec![], n * block)
                        }
                    });
                    for (r, got) in simulate(ranks.collect(), sum_reduce)
                        .into_iter()
                        .enumerate()
                    {
                        let v = (r + n - root) % n;
                        assert_eq!(
                            &got[v * block..(v + 1) * block],
                            &pattern(r, block)[..],
                            "scatter {name} n={n} root={root} rank={r}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn allgathers_collect_every_block() {
    type A = fn(usize, usize, usize) -> Schedule;
    for n in NS {
        for block in [0, 1, 13] {
            for (name, algo) in [
                ("ring", allgather_ring as A),
                ("recursive_doubling", allgather_recursive_doubling),
                ("neighbor_exchange", allgather_neighbor_exchange),
                ("linear", allgather_linear),
            ] {
                let ranks = (0..n).map(|r| {
                    fresh(algo(n, r, block), vec![], n * block).with(r * block, &pattern(r, block))
                });
                let want: Vec<u8> = (0..n).flat_map(|r| pattern(r, block)).collect();
                for (r, got) in simulate(ranks.collect(), sum_reduce)
                    .into_iter()
                    .enumerate()
                {
                    assert_eq!(got, want, "allgather {name} n={n} block={block} rank={r}");
                }
            }
        }
    }
}

#[test]
fn alltoallvs_transpose() {
    type V = fn(usize, usize, &[Range<usize>], &[Range<usize>]) -> Schedule;
    for n in NS {
        // Irregular counts: rank s sends (s + d) % 3 + d bytes to rank d.
        let cnt = |s: usize, d: usize| (s + d) % 3 + d;
        for (name, algo) in [
            ("pairwise", alltoallv_pairwise as V),
            ("linear", alltoallv_linear),
        ] {
            let layouts: Vec<(Layout, Layout)> = (0..n)
                .map(|me| {
                    let mut off = 0;
                    let sends = (0..n)
                        .map(|d| {
                            off += 1; // gaps between regions
                            let r = off..off + cnt(me, d);
                            off = r.end;
                            r
                        })
                        .collect();
                    let mut off = 0;
                    let recvs = (0..n)
                        .rev()
                        .map(|s| {
                            let r = off..off + cnt(s, me);
                            off = r.end + 2;
                            r
                        })
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect();
                    (sends, recvs)
                })
                .collect();
            let ranks = (0..n).map(|me| {
                let (sends, recvs) = &layouts[me];
                let send_len = sends.last().unwrap().end;
                let mut send = vec![0; send_len];
                for (d, r) in sends.iter().enumerate() {
                    send[r.clone()].copy_from_slice(&pattern(me * 10 + d, r.len()));
                }
                let recv_len = recvs.iter().map(|r| r.end).max().unwrap();
                fresh(algo(n, me, sends, recvs), send, recv_len)
            });
            for (me, got) in simulate(ranks.collect(), sum_reduce)
                .into_iter()
                .enumerate()
            {
                for (s, r) in layouts[me].1.iter().enumerate() {
                    assert_eq!(
                        &got[r.clone()],
                        &pattern(s * 10 + me, r.len())[..],
                        "alltoallv {name} n={n} {s}->{me}"
                    );
                }
            }
        }
    }
}

/// Every alltoall algorithm of uniform blocks (Bruck's forwards other ranks' blocks, packed)
/// at 1 to 17 ranks, including odd counts and non-powers of two, and odd block sizes.
#[test]
fn alltoalls_of_blocks_transpose() {
    type A = fn(usize, usize, usize) -> Schedule;
    let ranges =
        |n: usize, block: usize| -> Layout { (0..n).map(|r| r * block..(r + 1) * block).collect() };
    fn pairwise(n: usize, me: usize, block: usize) -> Schedule {
        let r: Layout = (0..n).map(|r| r * block..(r + 1) * block).collect();
        alltoallv_pairwise(n, me, &r, &r)
    }
    fn linear(n: usize, me: usize, block: usize) -> Schedule {
        let r: Layout = (0..n).map(|r| r * block..(r + 1) * block).collect();
        alltoallv_linear(n, me, &r, &r)
    }
    for n in 1..=17 {
        for block in [0, 1, 3, 13] {
            for (name, algo) in [
                ("bruck", alltoall_bruck as A),
                ("pairwise", pairwise),
                ("linear", linear),
            ] {
                let ranks = (0..n).map(|me| {
                    let send: Vec<u8> = (0..n).flat_map(|d| pattern(me * 10 + d, block)).collect();
                    fresh(algo(n, me, block), send, n * block)
                });
                for (me, got) in simulate(ranks.collect(), sum_reduce)
                    .into_iter()
                    .enumerate()
                {
                    for (src, r) in ranges(n, block).into_iter().enumerate() {
                        assert_eq!(
                            &got[r.clone()],
                            &pattern(src * 10 + me, block)[..],
                            "alltoall {name} n={n} block={block} {src}->{me}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn bruck_takes_log2_rounds_of_messages_and_neighbor_exchange_half_the_ring() {
    for n in [2usize, 5, 8, 12, 17, 32] {
        let messages = |s: &Schedule| s.rounds.iter().filter(|r| !r.comms.is_empty()).count();
        let log2 = n.next_power_of_two().trailing_zeros() as usize;
        assert_eq!(messages(&alltoall_bruck(n, 1, 8)), log2, "n={n}");
        // Packed: one send of at most half the blocks (rounded up) per round.
        for r in &alltoall_bruck(n, 1, 8).rounds {
            for c in &r.comms {
                if let Comm::Send { region, .. } = c {
                    assert!(region.range.len() <= n.div_ceil(2) * 8, "n={n}");
                }
            }
        }
        if n % 2 == 0 {
            assert_eq!(
                messages(&allgather_neighbor_exchange(n, 1, 8)),
                n / 2,
                "n={n}"
            );
        }
    }
}

/// Irregular byte regions of `Work` for n ranks: rank r's block has `(r * 5 + k) % 4 + r`
/// bytes, placed in reverse rank order with a gap of `k % 3` bytes after each.
fn scattered_regions(n: usize, k: usize) -> Vec<Range<usize>> {
    let mut off = 0;
    let mut out = vec![0..0; n];
    for r in (0..n).rev() {
        let len = (r * 5 + k) % 4 + r;
        out[r] = off..off + len;
        off += len + k % 3;
    }
    out
}

#[test]
fn gathervs_and_scattervs_place_regions() {
    for n in NS {
        for root in 0..n {
            for k in 0..3 {
                let regions = scattered_regions(n, k);
                let total = regions.iter().map(|r| r.end).max().unwrap_or(0);
                for in_place in [false, true] {
                    // gatherv: the root's own block is either in Send or already in Work.
                    let ranks = (0..n).map(|r| {
                        let mine = pattern(r, regions[r].len());
                        if r != root {
                            return fresh(
                                gatherv_linear(n, r, root, mine.len(), &[], false),
                                mine,
                                0,
                            );
                        }
                        let sched = gatherv_linear(n, r, root, mine.len(), &regions, in_place);
                        if in_place {
                            fresh(sched, vec![], total).with(regions[r].start, &mine)
                        } else {
                            fresh(sched, mine, total)
                        }
                    });
                    let got = simulate(ranks.collect(), sum_reduce);
                    for (r, reg) in regions.iter().enumerate() {
                        assert_eq!(
                            &got[root][reg.clone()],
                            &pattern(r, reg.len())[..],
                            "gatherv n={n} root={root} k={k} in_place={in_place} block of {r}"
                        );
                    }
                    // scatterv: the root's Send is the whole vector.
                    let mut full = vec![0u8; total];
                    for (r, reg) in regions.iter().enumerate() {
                        full[reg.clone()].copy_from_slice(&pattern(r, reg.len()));
                    }
                    let ranks = (0..n).map(|r| {
                        let mine = regions[r].len();
                        if r == root {
                            let sched = scatterv_linear(n, r, root, mine, &regions, in_place);
                            fresh(sched, full.clone(), if in_place { 0 } else { mine })
                        } else {
                            fresh(scatterv_linear(n, r, root, mine, &[], false), vec![], mine)
                        }
                    });
                    for (r, got) in simulate(ranks.collect(), sum_reduce)
                        .into_iter()
                        .enumerate()
                    {
                        if r == root && in_place {
                            assert!(got.is_empty());
                            continue;
                        }
                        assert_eq!(
                            got,
                            pattern(r, regions[r].len()),
                            "scatterv n={n} root={root} k={k} in_place={in_place} rank={r}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn allgathervs_collect_every_region() {
    type A = fn(usize, usize, &[Range<usize>], bool) -> Schedule;
    for n in NS {
        for k in 0..3 {
            let regions = scattered_regions(n, k);
            let total = regions.iter().map(|r| r.end).max().unwrap_or(0);
            for (name, algo) in [
                ("ring", allgatherv_ring as A),
                ("linear", allgatherv_linear),
            ] {
                for in_place in [false, true] {
                    let ranks = (0..n).map(|r| {
                        let mine = pattern(r, regions[r].len());
                        let sched = algo(n, r, &regions, in_place);
                        if in_place {
                            fresh(sched, vec![], total).with(regions[r].start, &mine)
                        } else {
                            fresh(sched, mine, total)
                        }
                    });
                    for (me, got) in simulate(ranks.collect(), sum_reduce)
                        .into_iter()
                        .enumerate()
                    {
                        for (r, reg) in regions.iter().enumerate() {
                            assert_eq!(
                                &got[reg.clone()],
                                &pattern(r, reg.len())[..],
                                "allgatherv {name} n={n} k={k} in_place={in_place} rank {me}, block of {r}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Chunks of `MAT`-byte elements tiling a vector in rank order, rank r getting
/// `(r + k) % 3` elements (some empty).
fn tiled_chunks(n: usize, k: usize) -> Vec<Range<usize>> {
    let mut off = 0;
    (0..n)
        .map(|r| {
            let len = (r + k) % 3 * MAT;
            off += len;
            off - len..off
        })
        .collect()
}

#[test]
fn reduce_scatters_deliver_each_chunk() {
    for n in NS {
        for k in 0..3 {
            let chunks = tiled_chunks(n, k);
            let len = chunks.last().unwrap().end;
            let inputs: Vec<Vec<u8>> = (0..n).map(|r| pattern(r, len)).collect();
            // reduce + scatterv: rank order, so a non-commutative product.
            let want = mat_reference(&inputs, 0..n);
            let ranks = (0..n).map(|r| {
                fresh(
                    reduce_scatter_reduce_scatterv(n, r, &chunks),
                    inputs[r].clone(),
                    len,
                )
            });
            for (r, got) in simulate(ranks.collect(), mat_reduce)
                .into_iter()
                .enumerate()
            {
                let c = chunks[r].clone();
                assert_eq!(
                    got[c.clone()],
                    want[c],
                    "reduce_scatterv n={n} k={k} rank={r}"
                );
            }
            // Ring: commutative.
            let mut want = inputs[0].clone();
            for i in &inputs[1..] {
                sum_reduce(&mut want, i, false);
            }
            let ranks =
                (0..n).map(|r| fresh(reduce_scatter_ring(n, r, &chunks), inputs[r].clone(), len));
            for (r, got) in simulate(ranks.collect(), sum_reduce)
                .into_iter()
                .enumerate()
            {
                let c = chunks[r].clone();
                assert_eq!(got[c.clone()], want[c], "ring n={n} k={k} rank={r}");
            }
        }
    }
}

#[test]
fn in_order_reduce_keeps_rank_order_at_any_root() {
    for n in NS {
        for root in 0..n {
            for count in [0, 1, 4] {
                let len = count * MAT;
                let inputs: Vec<Vec<u8>> = (0..n).map(|r| pattern(r, len)).collect();
                let ranks =
                    (0..n).map(|r| fresh(reduce_in_order(n, r, root, len), inputs[r].clone(), len));
                let got = simulate(ranks.collect(), mat_reduce);
                assert_eq!(
                    got[root],
                    mat_reference(&inputs, 0..n),
                    "n={n} root={root} count={count}"
                );
            }
        }
    }
}

#[test]
fn scans_compute_rank_ordered_prefixes() {
    type S = fn(usize, usize, usize, bool) -> Schedule;
    for n in NS {
        for count in [0, 1, 3] {
            let len = count * MAT;
            let inputs: Vec<Vec<u8>> = (0..n).map(|r| pattern(r, len)).collect();
            for (name, algo) in [
                ("recursive_doubling", scan_recursive_doubling as S),
                ("linear", scan_linear),
            ] {
                for exclusive in [false, true] {
                    let ranks = (0..n)
                        .map(|r| fresh(algo(n, r, len, exclusive), inputs[r].clone(), 2 * len));
                    for (r, got) in simulate(ranks.collect(), mat_reduce)
                        .into_iter()
                        .enumerate()
                    {
                        let upto = if exclusive { r } else { r + 1 };
                        if upto == 0 {
                            // Rank 0 of an exscan: its result is never written.
                            assert!(got[len..].iter().all(|&b| b == POISON) || len == 0);
                            continue;
                        }
                        assert_eq!(
                            got[len..],
                            mat_reference(&inputs, 0..upto)[..],
                            "{name} exclusive={exclusive} n={n} count={count} rank={r}"
                        );
                    }
                }
            }
        }
    }
}
