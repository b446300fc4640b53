//! The intercommunicator schedules, sans-IO: two simulated groups (A: processes `0..a`, B:
//! `a..a+b`), each process an [`Exec`] over an in-memory transport that maps the merged
//! peer numbering (local ranks first, then remote ranks) to processes, stepped round-robin
//! without blocking until all are done.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::rc::Rc;

use rmca_framework::buffer::UserBuf;

use super::super::super::exec::{Bufs, Exec, Poll, ReduceFn, Transport};
use super::*;

type Net = Rc<RefCell<HashMap<(usize, usize), VecDeque<Vec<u8>>>>>;

/// A process of the simulation: its group's first process and size, the other group's.
struct Sim {
    net: Net,
    me: usize,
    local: (usize, usize),
    remote: (usize, usize),
    recvs: Vec<(usize, UserBuf, Option<usize>)>,
}

impl Sim {
    fn process(&self, peer: usize) -> usize {
        if peer < self.local.1 {
            self.local.0 + peer
        } else {
            assert!(
                peer - self.local.1 < self.remote.1,
                "peer {peer} out of range"
            );
            self.remote.0 + peer - self.local.1
        }
    }
}

impl Transport for Sim {
    type Handle = Option<usize>;

    fn send(&mut self, peer: usize, buf: UserBuf) -> Result<Option<Option<usize>>> {
        let to = self.process(peer);
        let mut net = self.net.borrow_mut();
        let q = net.entry((self.me, to)).or_default();
        q.push_back(buf.as_slice().to_vec());
        Ok(None)
    }

    fn recv(&mut self, peer: usize, buf: UserBuf) -> Result<Option<usize>> {
        let from = self.process(peer);
        self.recvs.push((from, buf, None));
        Ok(Some(self.recvs.len() - 1))
    }

    fn test(&mut self, h: &Option<usize>) -> Option<Result<usize>> {
        let Some(i) = *h else { return Some(Ok(0)) };
        // Match in posting order per source.
        let mut net = self.net.borrow_mut();
        for (from, buf, got) in self.recvs.iter_mut().filter(|r| r.2.is_none()) {
            if let Some(msg) = net.get_mut(&(*from, self.me)).and_then(VecDeque::pop_front) {
                buf.write_at(0, &msg[..msg.len().min(buf.len())]);
                *got = Some(msg.len());
            }
        }
        self.recvs[i].2.map(Ok)
    }

    fn wait(&mut self, _: &Option<usize>) -> Result<usize> {
        unreachable!("the simulation never blocks")
    }
}

struct Proc {
    exec: Exec<Rc<Schedule>, Option<usize>>,
    t: Sim,
    bufs: Bufs,
    _send: Vec<u8>,
    work: Vec<u8>,
    _tmp: Vec<u8>,
    done: bool,
}

/// What each process runs: its schedule, input and work buffer (given its group's sizes
/// `(l, me)` and whether it is in group A).
type Setup<'a> = &'a dyn Fn(bool, usize, usize) -> (Schedule, Vec<u8>, Vec<u8>);

/// Run a collective over groups of `a` and `b` processes; the work buffers at the end.
fn run(a: usize, b: usize, setup: Setup<'_>, reduce: Option<ReduceFn<'_>>) -> Vec<Vec<u8>> {
    let net: Net = Rc::default();
    let mut procs: Vec<Proc> = (0..a + b)
        .map(|p| {
            let in_a = p < a;
            let (local, remote) = if in_a {
                ((0, a), (a, b))
            } else {
                ((a, b), (0, a))
            };
            let me = p - local.0;
            let (s, send, mut work) = setup(in_a, local.1, me);
            let mut tmp = vec![0x5A; s.tmp_len];
            #[allow(unsafe_code)]
            // SAFETY: the vectors move into `Proc` beside `bufs` (their heap blocks stay
            // put) and are read only once the executor is done.
            let bufs = unsafe { Bufs::lend(&send, &mut work, &mut tmp) };
            Proc {
                exec: Exec::new(Rc::new(s), Vec::new()),
                t: Sim {
                    net: net.clone(),
                    me: p,
                    local,
                    remote,
                    recvs: Vec::new(),
                },
                bufs,
                _send: send,
                work,
                _tmp: tmp,
                done: false,
            }
        })
        .collect();
    for pass in 0.. {
        let mut progress = false;
        for i in 0..procs.len() {
            let i = if pass % 2 == 1 {
                procs.len() - 1 - i
            } else {
                i
            };
            let p = &mut procs[i];
            if p.done {
                continue;
            }
            match p.exec.advance(&mut p.t, &p.bufs, reduce, false) {
                Poll::Pending { events } => progress |= events > 0,
                Poll::Done(r) => {
                    r.unwrap_or_else(|e| panic!("process {i} failed: {e}"));
                    p.done = true;
                    progress = true;
                }
            }
        }
        if procs.iter().all(|p| p.done) {
            break;
        }
        assert!(progress, "deadlock over groups of {a} and {b}");
    }
    assert!(
        net.borrow().values().all(VecDeque::is_empty),
        "messages left unreceived"
    );
    procs.into_iter().map(|p| p.work).collect()
}

/// Affine maps `t -> x t + y` on u64 pairs, composed: associative, not commutative, so a
/// result shows the order of the combination.
fn compose(dst: &mut [u8], src: &[u8], acc: Option<&[u8]>, src_first: bool) {
    let get = |b: &[u8], i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    let acc_v: Vec<u8> = acc.map_or_else(|| dst.to_vec(), <[u8]>::to_vec);
    for e in 0..dst.len() / 16 {
        let (l, r) = if src_first {
            (&src[e * 16..], &acc_v[e * 16..])
        } else {
            (&acc_v[e * 16..], &src[e * 16..])
        };
        let x = get(l, 0).wrapping_mul(get(r, 0));
        let y = get(l, 0).wrapping_mul(get(r, 1)).wrapping_add(get(l, 1));
        dst[e * 16..e * 16 + 8].copy_from_slice(&x.to_le_bytes());
        dst[e * 16 + 8..e * 16 + 16].copy_from_slice(&y.to_le_bytes());
    }
}

/// Process `p`'s input of `elems` affine maps.
fn input_of(p: usize, elems: usize) -> Vec<u8> {
    (0..elems)
        .flat_map(|e| [(p * 7 + e + 2) as u64, (p * 13 + e * 3 + 1) as u64])
        .flat_map(u64::to_le_bytes)
        .collect()
}

/// The rank-order combination of the inputs of processes `procs`.
fn combined(procs: Range<usize>, elems: usize) -> Vec<u8> {
    let mut acc = input_of(procs.start, elems);
    for p in procs.start + 1..procs.end {
        let mut out = vec![0u8; acc.len()];
        compose(&mut out, &input_of(p, elems), Some(&acc), false);
        acc = out;
    }
    acc
}

fn pattern(p: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (p * 41 + i * 3 + 1) as u8).collect()
}

const SIZES: [(usize, usize); 8] = [
    (1, 1),
    (1, 2),
    (2, 1),
    (1, 3),
    (2, 3),
    (3, 2),
    (4, 3),
    (2, 5),
];

#[test]
fn barriers_complete_over_uneven_groups() {
    for (a, b) in SIZES {
        run(a, b, &|_, l, me| (barrier(l, me), vec![], vec![]), None);
    }
}

#[test]
fn bcast_reaches_every_process_of_the_other_group_only() {
    for (a, b) in SIZES {
        let root = a - 1;
        let len = 37;
        let out = run(
            a,
            b,
            &|in_a, l, me| {
                let r = match (in_a, me == root) {
                    (true, true) => InterRoot::Root,
                    (true, false) => InterRoot::Null,
                    (false, _) => InterRoot::Remote(root),
                };
                let work = if r == InterRoot::Root {
                    pattern(99, len)
                } else {
                    vec![0; len]
                };
                (bcast(l, me, r, len), vec![], work)
            },
            None,
        );
        for (p, w) in out.iter().enumerate() {
            let want = if p < a && p != root {
                vec![0; len]
            } else {
                pattern(99, len)
            };
            assert_eq!(w, &want, "process {p} of {a}+{b}");
        }
    }
}

#[test]
fn reduce_combines_the_other_group_in_rank_order() {
    for (a, b) in SIZES {
        let root = b / 2;
        let elems = 3;
        let out = run(
            a,
            b,
            &|in_a, l, me| {
                let r = match (in_a, me == root) {
                    (false, true) => InterRoot::Root,
                    (false, false) => InterRoot::Null,
                    (true, _) => InterRoot::Remote(root),
                };
                let p = if in_a { me } else { a + me };
                let s = reduce(l, me, r, elems * 16);
                (s, input_of(p, elems), vec![0; elems * 16])
            },
            Some(&compose),
        );
        assert_eq!(out[a + root], combined(0..a, elems), "{a}+{b}");
    }
}

#[test]
fn allreduce_gives_each_group_the_other_s_reduction() {
    for (a, b) in SIZES {
        let elems = 2;
        let out = run(
            a,
            b,
            &|in_a, l, me| {
                let p = if in_a { me } else { a + me };
                (
                    allreduce(l, me, elems * 16),
                    input_of(p, elems),
                    vec![0; elems * 16],
                )
            },
            Some(&compose),
        );
        for (p, w) in out.iter().enumerate() {
            let want = if p < a {
                combined(a..a + b, elems)
            } else {
                combined(0..a, elems)
            };
            assert_eq!(w, &want, "process {p} of {a}+{b}");
        }
    }
}

#[test]
fn gatherv_and_scatterv_move_each_remote_block() {
    for (a, b) in SIZES {
        // Process p of B sends p+1 bytes; A's root (rank 0) stores them back to back.
        let lens: Vec<usize> = (0..b).map(|j| j + 1).collect();
        let mut regions = Vec::new();
        let mut off = 0;
        for &n in &lens {
            regions.push(off..off + n);
            off += n;
        }
        let total = off;
        let out = run(
            a,
            b,
            &|in_a, l, me| {
                let _ = l;
                if in_a {
                    let r = if me == 0 {
                        InterRoot::Root
                    } else {
                        InterRoot::Null
                    };
                    (gatherv(l, r, 0, &regions), vec![], vec![0; total])
                } else {
                    let s = gatherv(l, InterRoot::Remote(0), lens[me], &[]);
                    (s, pattern(me, lens[me]), vec![])
                }
            },
            None,
        );
        let want: Vec<u8> = (0..b).flat_map(|j| pattern(j, lens[j])).collect();
        assert_eq!(out[0], want, "gatherv {a}+{b}");
        // And back: B's last process scatters to A.
        let lens: Vec<usize> = (0..a).map(|j| 2 * j + 1).collect();
        let mut regions = Vec::new();
        let mut off = 0;
        for &n in &lens {
            regions.push(off..off + n);
            off += n;
        }
        let whole = pattern(7, off);
        let out = run(
            a,
            b,
            &|in_a, l, me| {
                if in_a {
                    (
                        scatterv(l, InterRoot::Remote(b - 1), &[], lens[me]),
                        vec![],
                        vec![0; lens[me]],
                    )
                } else if me == b - 1 {
                    (
                        scatterv(l, InterRoot::Root, &regions, 0),
                        whole.clone(),
                        vec![],
                    )
                } else {
                    (scatterv(l, InterRoot::Null, &[], 0), vec![], vec![])
                }
            },
            None,
        );
        for j in 0..a {
            assert_eq!(out[j], whole[regions[j].clone()], "scatterv {a}+{b} to {j}");
        }
    }
}

#[test]
fn alltoallv_and_allgatherv_exchange_with_every_remote_process() {
    for (a, b) in SIZES {
        // Process p sends (p + q) % 3 + 1 bytes to process q of the other group.
        let size = |p: usize, q: usize| (p + q) % 3 + 1;
        let msg = |p: usize, q: usize| pattern(p * 10 + q, size(p, q));
        let layout = |p: usize, others: Range<usize>, send: bool| {
            let mut regions = Vec::new();
            let mut off = 0;
            for q in others {
                let n = if send { size(p, q) } else { size(q, p) };
                regions.push(off..off + n);
                off += n;
            }
            (regions, off)
        };
        let out = run(
            a,
            b,
            &|in_a, l, me| {
                let (p, others) = if in_a { (me, a..a + b) } else { (a + me, 0..a) };
                let (sends, _) = layout(p, others.clone(), true);
                let (recvs, rlen) = layout(p, others.clone(), false);
                let send: Vec<u8> = others.flat_map(|q| msg(p, q)).collect();
                (alltoallv(l, &sends, &recvs), send, vec![0; rlen])
            },
            None,
        );
        for (p, w) in out.iter().enumerate() {
            let others = if p < a { a..a + b } else { 0..a };
            let want: Vec<u8> = others.flat_map(|q| msg(q, p)).collect();
            assert_eq!(w, &want, "alltoallv: process {p} of {a}+{b}");
        }
        // Allgatherv: the whole input to every remote process.
        let out = run(
            a,
            b,
            &|in_a, l, me| {
                let (p, r) = if in_a { (me, b) } else { (a + me, a) };
                let len = p % 4 + 1;
                let first = if in_a { a } else { 0 };
                let mut recvs = Vec::new();
                let mut off = 0;
                for q in first..first + r {
                    recvs.push(off..off + q % 4 + 1);
                    off += q % 4 + 1;
                }
                (
                    alltoallv(l, &vec![0..len; r], &recvs),
                    pattern(p, len),
                    vec![0; off],
                )
            },
            None,
        );
        for (p, w) in out.iter().enumerate() {
            let others = if p < a { a..a + b } else { 0..a };
            let want: Vec<u8> = others.flat_map(|q| pattern(q, q % 4 + 1)).collect();
            assert_eq!(w, &want, "allgatherv: process {p} of {a}+{b}");
        }
    }
}

#[test]
fn reduce_scatter_deals_the_other_group_s_reduction() {
    for (a, b) in SIZES {
        // 6 elements in all, dealt unevenly in each group (some processes get none).
        let elems = 6;
        let deal = |l: usize| -> Vec<Range<usize>> {
            let mut out = Vec::new();
            let mut off = 0;
            for i in 0..l {
                let n = if i + 1 == l {
                    elems - off
                } else {
                    (i % 3).min(elems - off)
                };
                out.push(off * 16..(off + n) * 16);
                off += n;
            }
            out
        };
        let out = run(
            a,
            b,
            &|in_a, l, me| {
                let p = if in_a { me } else { a + me };
                let chunks = deal(l);
                let s = reduce_scatter(l, me, elems * 16, &chunks);
                (s, input_of(p, elems), vec![0; 2 * elems * 16])
            },
            Some(&compose),
        );
        for (p, w) in out.iter().enumerate() {
            let (l, me, other) = if p < a {
                (a, p, a..a + b)
            } else {
                (b, p - a, 0..a)
            };
            let chunks = deal(l);
            let whole = combined(other, elems);
            let at = reduce_scatter_result(me, elems * 16, &chunks);
            assert_eq!(w[at], whole[chunks[me].clone()], "process {p} of {a}+{b}");
        }
    }
}
