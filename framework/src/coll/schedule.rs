//! Collective algorithms as communication schedules, without I/O: the coll framework's base
//! (as Open MPI's `coll/base` holds the algorithms its components choose among).
//!
//! Every algorithm is a pure function of (process count, rank, root, sizes) that returns a
//! [`Schedule`]: rounds of concurrent sends and receives over byte regions, each followed by
//! local steps (reductions, copies, packing). The executor of the `rmca` crate (`coll/exec.rs`) runs a
//! schedule on a communicator; the unit tests run the schedules of N simulated ranks against
//! each other on the simulator of [`super::sim`], so every algorithm is checked for every
//! process count without a transport.
//!
//! Layout conventions (the typed API in `rmca`'s `coll/mod.rs` adapts user buffers to them):
//! - bcast: `Work` holds the whole vector.
//! - reduce, allreduce: `Send` is the caller's input and `Work` the result (the whole vector
//!   in both; a non-root of reduce gets private space for its subtree's partial). `Work`
//!   starts uninitialized, so that the input is not copied into it up front (a full extra
//!   pass over the vector): a rank sends its own contribution from `Send`, the first reduction
//!   of a range reads its accumulated operand from `Send` (`Local::Reduce::acc`) and writes
//!   `Work`, and a rank that combines nothing copies `Send` into `Work` (n = 1). Every `Work`
//!   byte is written before it is read or sent (checked by the schedule tests).
//! - gather, scatter: `Work` holds `n` blocks in *virtual-rank order* (block `v` belongs to
//!   rank `(v + root) % n`), so every binomial subtree is one contiguous region; the root
//!   rotates by `root` blocks at the end (gather) or the start (scatter).
//! - allgather: `Work` holds `n` blocks in rank order.
//! - alltoall(v): `Send` is the user's input, `Work` the user's output.
//! - gatherv, scatterv, allgatherv: `Send` is the caller's block (the root's whole vector for
//!   scatterv), `Work` the caller's output; the per-rank byte regions are the caller's
//!   displacements (significant at the root only for gatherv/scatterv). In-place forms skip
//!   the local copy of the caller's own block (it is already where it belongs).
//! - reduce_scatter: `Send` is the whole input vector, `Work` a private vector of the same
//!   length; rank r's result ends in `Work[chunks[r]]` (the chunks tile the vector in rank
//!   order).
//! - scan, exscan: `Send` is the input, `Work` is `[partial | result]` (two vectors): the
//!   partial is what a rank forwards, the result what it returns (never written on rank 0
//!   of an exscan).
//!
//! Reduction order: a `Reduce` step combines the received partial `tmp` and the accumulated
//! operand `acc` (`work`, or the input in `send`) as `tmp op acc` when `src_first` (the
//! received partial covers lower ranks) and `acc op tmp` otherwise, so two partners combining
//! the same two partials compute bit-identical results.

use std::ops::Range;

/// Which buffer a region lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buf {
    /// The caller's input (read-only), for reductions and alltoall(v).
    Send,
    /// The result buffer.
    Work,
    /// Scratch space of `Schedule::tmp_len` bytes.
    Tmp,
}

/// A byte range of one buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// The buffer.
    pub buf: Buf,
    /// The bytes of it.
    pub range: Range<usize>,
}

impl Region {
    /// `range` of `Work`.
    pub fn work(range: Range<usize>) -> Self {
        Self {
            buf: Buf::Work,
            range,
        }
    }
    /// `range` of `Tmp`.
    pub fn tmp(range: Range<usize>) -> Self {
        Self {
            buf: Buf::Tmp,
            range,
        }
    }
    /// `range` of `Send`.
    pub fn send(range: Range<usize>) -> Self {
        Self {
            buf: Buf::Send,
            range,
        }
    }
}

/// A point-to-point transfer of one round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Comm {
    /// Send `region` to `peer`.
    Send {
        /// The communicator rank sent to.
        peer: usize,
        /// What is sent.
        region: Region,
    },
    /// Receive exactly `region.range.len()` bytes from `peer` into `region`.
    Recv {
        /// The communicator rank received from.
        peer: usize,
        /// Where the bytes go.
        region: Region,
    },
}

/// A local step run after a round's transfers completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Local {
    /// `work[dst] = tmp[src] op acc[dst]` if `src_first`, else `acc[dst] op tmp[src]`, where
    /// `acc` is `Work` (in place) or `Send` (the first reduction of a range, whose `Work`
    /// bytes are not written yet).
    Reduce {
        /// The received operand, in `Tmp`.
        src: Range<usize>,
        /// The result, in `Work`.
        dst: Range<usize>,
        /// The received operand covers lower ranks (it goes first).
        src_first: bool,
        /// Where the accumulated operand is (at `dst`'s offsets).
        acc: Buf,
    },
    /// `work[dst] = src`.
    Copy {
        /// The bytes copied.
        src: Region,
        /// Where they go in `Work`.
        dst: Range<usize>,
    },
    /// `tmp[dst] = src`: gathers scattered bytes into one contiguous send (Bruck's packing).
    Pack {
        /// The bytes copied (never overlapping `dst` when in `Tmp`).
        src: Region,
        /// Where they go in `Tmp`.
        dst: Range<usize>,
    },
}

/// One round: transfers posted together, then local steps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Round {
    /// Transfers posted together.
    pub comms: Vec<Comm>,
    /// Local steps run once every transfer of the round completed.
    pub locals: Vec<Local>,
}

/// A whole collective as seen by one rank.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Bytes of scratch space the schedule uses.
    pub tmp_len: usize,
    /// The rounds, run one after the other.
    pub rounds: Vec<Round>,
}

impl Schedule {
    /// Append a round of `comms` then `locals` (nothing when both are empty).
    pub fn push(&mut self, comms: Vec<Comm>, locals: Vec<Local>) {
        if !comms.is_empty() || !locals.is_empty() {
            self.rounds.push(Round { comms, locals });
        }
    }

    /// This schedule followed by `other` (same buffers).
    pub fn then(mut self, other: Schedule) -> Schedule {
        self.tmp_len = self.tmp_len.max(other.tmp_len);
        self.rounds.extend(other.rounds);
        self
    }
}

fn send(peer: usize, region: Region) -> Comm {
    Comm::Send { peer, region }
}
fn recv(peer: usize, region: Region) -> Comm {
    Comm::Recv { peer, region }
}

/// The whole input as the result, for a rank of a reduction that combines nothing.
fn copy_input(len: usize) -> Local {
    Local::Copy {
        src: Region::send(0..len),
        dst: 0..len,
    }
}

fn vrank(rank: usize, root: usize, n: usize) -> usize {
    (rank + n - root) % n
}
fn real(v: usize, root: usize, n: usize) -> usize {
    (v + root) % n
}
/// Lowest set bit of `v`, or the first power of two >= n for the tree root (v = 0).
fn subtree_span(v: usize, n: usize) -> usize {
    if v == 0 {
        n.next_power_of_two()
    } else {
        1 << v.trailing_zeros()
    }
}

/// Balanced split of `total` units into `n` parts: part `i` is `[i*total/n, (i+1)*total/n)`
/// (the one split every component uses, so that their parts agree).
pub fn part(total: usize, n: usize, i: usize) -> Range<usize> {
    (i * total / n)..((i + 1) * total / n)
}

// ---------------------------------------------------------------- barrier

/// The rounds of a dissemination barrier: ceil(log2 n) zero-byte exchanges at distance 2^k,
/// as (rank sent to, rank received from).
pub fn dissemination_rounds(n: usize, me: usize) -> impl Iterator<Item = (usize, usize)> {
    std::iter::successors(Some(1usize), |d| d.checked_mul(2))
        .take_while(move |&d| d < n)
        .map(move |d| ((me + d) % n, (me + n - d) % n))
}

/// Dissemination barrier as a schedule: `ibarrier` runs it (the blocking barrier runs
/// [`dissemination_rounds`] directly), and the schedule tests check that it synchronizes.
pub fn barrier_dissemination(n: usize, me: usize) -> Schedule {
    let mut s = Schedule::default();
    for (to, from) in dissemination_rounds(n, me) {
        let e = Region::work(0..0);
        s.push(vec![recv(from, e.clone()), send(to, e)], vec![]);
    }
    s
}

/// Linear barrier: everyone reports to rank 0, which then releases everyone.
pub fn barrier_linear(n: usize, me: usize) -> Schedule {
    let mut s = Schedule::default();
    let e = || Region::work(0..0);
    if me == 0 {
        s.push((1..n).map(|r| recv(r, e())).collect(), vec![]);
        s.push((1..n).map(|r| send(r, e())).collect(), vec![]);
    } else {
        s.push(vec![send(0, e())], vec![]);
        s.push(vec![recv(0, e())], vec![]);
    }
    s
}

// ---------------------------------------------------------------- bcast

/// Binomial-tree broadcast of `len` bytes: log2(n) hops; each rank forwards to its subtrees,
/// largest first.
pub fn bcast_binomial(n: usize, me: usize, root: usize, len: usize) -> Schedule {
    let mut s = Schedule::default();
    let v = vrank(me, root, n);
    if v != 0 {
        let parent = v - subtree_span(v, n);
        s.push(
            vec![recv(real(parent, root, n), Region::work(0..len))],
            vec![],
        );
    }
    let mut sends = Vec::new();
    let mut mask = subtree_span(v, n) >> 1;
    while mask > 0 {
        if v + mask < n {
            sends.push(send(real(v + mask, root, n), Region::work(0..len)));
        }
        mask >>= 1;
    }
    s.push(sends, vec![]);
    s
}

/// Linear broadcast: the root sends to everyone.
pub fn bcast_linear(n: usize, me: usize, root: usize, len: usize) -> Schedule {
    let mut s = Schedule::default();
    if me == root {
        s.push(
            (0..n)
                .filter(|&r| r != root)
                .map(|r| send(r, Region::work(0..len)))
                .collect(),
            vec![],
        );
    } else {
        s.push(vec![recv(root, Region::work(0..len))], vec![]);
    }
    s
}

/// Van de Geijn broadcast for long messages: binomial scatter of n chunks, then a ring
/// allgather; about 2x the message crosses each link instead of log2(n)x.
pub fn bcast_scatter_allgather(n: usize, me: usize, root: usize, len: usize) -> Schedule {
    let mut s = Schedule::default();
    let v = vrank(me, root, n);
    // Chunk c (by virtual rank) of the buffer; chunks [a, b) are contiguous.
    let chunks = |a: usize, b: usize| part(len, n, a).start..part(len, n, b.max(a + 1) - 1).end;
    let span = subtree_span(v, n);
    if v != 0 {
        let end = (v + span).min(n);
        s.push(
            vec![recv(real(v - span, root, n), Region::work(chunks(v, end)))],
            vec![],
        );
    }
    let mut sends = Vec::new();
    let mut mask = span >> 1;
    while mask > 0 {
        if v + mask < n {
            let end = (v + 2 * mask).min(n);
            sends.push(send(
                real(v + mask, root, n),
                Region::work(chunks(v + mask, end)),
            ));
        }
        mask >>= 1;
    }
    s.push(sends, vec![]);
    let right = real((v + 1) % n, root, n);
    let left = real((v + n - 1) % n, root, n);
    for step in 0..n.saturating_sub(1) {
        let out = (v + n - step) % n;
        let inc = (v + 2 * n - step - 1) % n;
        s.push(
            vec![
                recv(left, Region::work(part(len, n, inc))),
                send(right, Region::work(part(len, n, out))),
            ],
            vec![],
        );
    }
    s
}

// ---------------------------------------------------------------- reduce

/// Binomial-tree reduction of `len` bytes to `root`. Each rank receives its children's
/// partials concurrently and combines them in virtual-rank order (mine, then the child at
/// distance 1, 2, 4, ...), i.e. the result is `x[root] op x[root+1] op ...` (ranks taken
/// cyclically from the root), associated as a binomial tree. A leaf sends its input from
/// `Send` and never touches `Work`.
pub fn reduce_binomial(n: usize, me: usize, root: usize, len: usize) -> Schedule {
    let mut s = Schedule::default();
    let v = vrank(me, root, n);
    let span = subtree_span(v, n);
    let mut comms = Vec::new();
    let mut locals = Vec::new();
    let mut mask = 1;
    let mut slot = 0;
    // Where this rank's partial is: its input until the first reduction wrote `Work`.
    let mut acc = Buf::Send;
    while mask < span {
        if v + mask < n {
            let t = slot * len..(slot + 1) * len;
            comms.push(recv(real(v + mask, root, n), Region::tmp(t.clone())));
            locals.push(Local::Reduce {
                src: t,
                dst: 0..len,
                src_first: false,
                acc,
            });
            acc = Buf::Work;
            slot += 1;
        }
        mask <<= 1;
    }
    if v == 0 && acc == Buf::Send {
        locals.push(copy_input(len));
    }
    s.tmp_len = slot * len;
    s.push(comms, locals);
    if v != 0 {
        s.push(
            vec![send(
                real(v - span, root, n),
                Region {
                    buf: acc,
                    range: 0..len,
                },
            )],
            vec![],
        );
    }
    s
}

/// Linear reduction: the root receives every contribution and combines them in rank order.
pub fn reduce_linear(n: usize, me: usize, root: usize, len: usize) -> Schedule {
    let mut s = Schedule::default();
    if me != root {
        s.push(vec![send(root, Region::send(0..len))], vec![]);
        return s;
    }
    // Slot per rank; the root's own value (in `Send`) is folded in at its place.
    let others: Vec<usize> = (0..n).filter(|&r| r != root).collect();
    let slot = |r: usize| others.iter().position(|&o| o == r).expect("other rank");
    let comms = others
        .iter()
        .map(|&r| recv(r, Region::tmp(slot(r) * len..(slot(r) + 1) * len)))
        .collect();
    // Rank order: ranks below the root are combined in front of the root's value
    // (folding right to left), ranks above behind it (left to right).
    let mut locals: Vec<Local> = (0..root)
        .rev()
        .map(|r| (r, true))
        .chain((root + 1..n).map(|r| (r, false)))
        .enumerate()
        .map(|(i, (r, src_first))| Local::Reduce {
            src: slot(r) * len..(slot(r) + 1) * len,
            dst: 0..len,
            src_first,
            // The first step combines with the input; later ones with that partial.
            acc: if i == 0 { Buf::Send } else { Buf::Work },
        })
        .collect();
    if locals.is_empty() {
        locals.push(copy_input(len));
    }
    s.tmp_len = others.len() * len;
    s.push(comms, locals);
    s
}

// ---------------------------------------------------------------- allreduce

/// Recursive doubling allreduce for any n: with p2 the largest power of two <= n and
/// rem = n - p2, ranks 2i and 2i+1 (i < rem) first fold into 2i+1, the p2 survivors exchange
/// at distances 1, 2, 4, ... combining `lower group op upper group`, then 2i+1 hands the
/// result back to 2i. Both partners of an exchange compute the same expression on the same
/// operands, so every rank ends with bit-identical results. A rank's first send and first
/// reduction read its input from `Send`; every later step reads the partial in `Work`.
pub fn allreduce_recursive_doubling(n: usize, me: usize, len: usize) -> Schedule {
    let mut s = Schedule {
        tmp_len: len,
        rounds: Vec::new(),
    };
    let p2 = if n == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    };
    let rem = n - p2;
    let w = || Region::work(0..len);
    let red = |src_first, acc| Local::Reduce {
        src: 0..len,
        dst: 0..len,
        src_first,
        acc,
    };
    // Where this rank's partial is: its input until the first reduction wrote `Work`.
    let mut acc = Buf::Send;
    let v = if me < 2 * rem {
        if me.is_multiple_of(2) {
            s.push(vec![send(me + 1, Region::send(0..len))], vec![]);
            s.push(vec![recv(me + 1, w())], vec![]);
            return s;
        }
        s.push(
            vec![recv(me - 1, Region::tmp(0..len))],
            vec![red(true, acc)],
        );
        acc = Buf::Work;
        me / 2
    } else {
        me - rem
    };
    let real_of = |v: usize| if v < rem { 2 * v + 1 } else { v + rem };
    let mut mask = 1;
    while mask < p2 {
        let pv = v ^ mask;
        let peer = real_of(pv);
        let mine = Region {
            buf: acc,
            range: 0..len,
        };
        s.push(
            vec![recv(peer, Region::tmp(0..len)), send(peer, mine)],
            vec![red(pv < v, acc)],
        );
        acc = Buf::Work;
        mask <<= 1;
    }
    if acc == Buf::Send {
        // n = 1: nothing to combine.
        s.push(vec![], vec![copy_input(len)]);
    }
    if me < 2 * rem {
        s.push(vec![send(me - 1, w())], vec![]);
    }
    s
}

/// Ring allreduce (reduce-scatter then allgather, each n-1 steps over chunks of ~len/n):
/// bandwidth-optimal for long vectors. `elem` is the element size, so chunks never split an
/// element. Chunk c is reduced in ring order starting at rank c; all ranks then copy the
/// same reduced chunks, so results are identical everywhere. A rank reduces every chunk but
/// its own exactly once, so each reduction reads its input from `Send`; its first send is
/// its own chunk, from `Send`, and the first allgather step writes that chunk of `Work`.
pub fn allreduce_ring(n: usize, me: usize, len: usize, elem: usize) -> Schedule {
    let count = len / elem.max(1);
    let chunk = |c: usize| {
        let r = part(count, n, c);
        r.start * elem..r.end * elem
    };
    let mut s = Schedule {
        tmp_len: chunk(n - 1).len().max(chunk(0).len()),
        rounds: Vec::new(),
    };
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    if n == 1 {
        s.push(vec![], vec![copy_input(len)]);
    }
    for step in 0..n - 1 {
        let out = (me + n - step) % n;
        let inc = (me + 2 * n - step - 1) % n;
        let t = 0..chunk(inc).len();
        // Step 0 sends this rank's own chunk; later steps the chunk reduced one step before.
        let out = if step == 0 {
            Region::send(chunk(out))
        } else {
            Region::work(chunk(out))
        };
        s.push(
            vec![recv(left, Region::tmp(t.clone())), send(right, out)],
            vec![Local::Reduce {
                src: t,
                dst: chunk(inc),
                src_first: true,
                acc: Buf::Send,
            }],
        );
    }
    for step in 0..n - 1 {
        let out = (me + 1 + n - step) % n;
        let inc = (me + n - step) % n;
        s.push(
            vec![
                recv(left, Region::work(chunk(inc))),
                send(right, Region::work(chunk(out))),
            ],
            vec![],
        );
    }
    s
}

/// Reduce to rank 0 (binomial) then broadcast from rank 0 (binomial). The reduction reads
/// the input from `Send` and leaves the result in rank 0's `Work`, which the broadcast sends.
pub fn allreduce_reduce_bcast(n: usize, me: usize, len: usize) -> Schedule {
    reduce_binomial(n, me, 0, len).then(bcast_binomial(n, me, 0, len))
}

// ---------------------------------------------------------------- gather / scatter

/// Binomial gather of `block`-byte blocks (virtual-rank layout): each rank receives its
/// children's subtrees straight into place, then forwards its whole subtree.
pub fn gather_binomial(n: usize, me: usize, root: usize, block: usize) -> Schedule {
    let mut s = Schedule::default();
    let v = vrank(me, root, n);
    let span = subtree_span(v, n);
    let mut comms = Vec::new();
    let mut mask = 1;
    while mask < span && v + mask < n {
        let c = v + mask;
        let end = (c + mask).min(n);
        comms.push(recv(real(c, root, n), Region::work(c * block..end * block)));
        mask <<= 1;
    }
    s.push(comms, vec![]);
    if v != 0 {
        let end = (v + span).min(n);
        s.push(
            vec![send(
                real(v - span, root, n),
                Region::work(v * block..end * block),
            )],
            vec![],
        );
    }
    s
}

/// Linear gather (virtual-rank layout): the root receives every block directly.
pub fn gather_linear(n: usize, me: usize, root: usize, block: usize) -> Schedule {
    let mut s = Schedule::default();
    let v = vrank(me, root, n);
    if v == 0 {
        s.push(
            (1..n)
                .map(|u| recv(real(u, root, n), Region::work(u * block..(u + 1) * block)))
                .collect(),
            vec![],
        );
    } else {
        s.push(
            vec![send(root, Region::work(v * block..(v + 1) * block))],
            vec![],
        );
    }
    s
}

/// Binomial scatter (virtual-rank layout): the mirror image of [`gather_binomial`].
pub fn scatter_binomial(n: usize, me: usize, root: usize, block: usize) -> Schedule {
    let mut s = Schedule::default();
    let v = vrank(me, root, n);
    let span = subtree_span(v, n);
    if v != 0 {
        let end = (v + span).min(n);
        s.push(
            vec![recv(
                real(v - span, root, n),
                Region::work(v * block..end * block),
            )],
            vec![],
        );
    }
    let mut sends = Vec::new();
    let mut mask = span >> 1;
    while mask > 0 {
        let c = v + mask;
        if c < n {
            let end = (c + mask).min(n);
            sends.push(send(real(c, root, n), Region::work(c * block..end * block)));
        }
        mask >>= 1;
    }
    s.push(sends, vec![]);
    s
}

/// Linear scatter (virtual-rank layout): the root sends every block directly.
pub fn scatter_linear(n: usize, me: usize, root: usize, block: usize) -> Schedule {
    let mut s = Schedule::default();
    let v = vrank(me, root, n);
    if v == 0 {
        s.push(
            (1..n)
                .map(|u| send(real(u, root, n), Region::work(u * block..(u + 1) * block)))
                .collect(),
            vec![],
        );
    } else {
        s.push(
            vec![recv(root, Region::work(v * block..(v + 1) * block))],
            vec![],
        );
    }
    s
}

// ---------------------------------------------------------------- allgather

/// Ring allgather (rank-order layout): n-1 steps, each passing one block to the right.
pub fn allgather_ring(n: usize, me: usize, block: usize) -> Schedule {
    let mut s = Schedule::default();
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    for step in 0..n.saturating_sub(1) {
        let out = (me + n - step) % n;
        let inc = (me + 2 * n - step - 1) % n;
        s.push(
            vec![
                recv(left, Region::work(inc * block..(inc + 1) * block)),
                send(right, Region::work(out * block..(out + 1) * block)),
            ],
            vec![],
        );
    }
    s
}

/// Recursive doubling allgather for any n (rank-order layout): the rem = n - p2 even ranks
/// below 2*rem hand their block to their odd neighbour, the p2 survivors double their
/// contiguous holdings log2(p2) times, and the odd ranks return the full result.
pub fn allgather_recursive_doubling(n: usize, me: usize, block: usize) -> Schedule {
    let mut s = Schedule::default();
    let p2 = if n == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    };
    let rem = n - p2;
    let all = || Region::work(0..n * block);
    let v = if me < 2 * rem {
        if me.is_multiple_of(2) {
            s.push(
                vec![send(me + 1, Region::work(me * block..(me + 1) * block))],
                vec![],
            );
            s.push(vec![recv(me + 1, all())], vec![]);
            return s;
        }
        s.push(
            vec![recv(me - 1, Region::work((me - 1) * block..me * block))],
            vec![],
        );
        me / 2
    } else {
        me - rem
    };
    // First real block held by virtual rank v (virtual ranks map to contiguous real ranges).
    let start = |v: usize| if v < rem { 2 * v } else { v + rem };
    let real_of = |v: usize| if v < rem { 2 * v + 1 } else { v + rem };
    let mut mask = 1;
    while mask < p2 {
        let mine = v & !(mask - 1);
        let theirs = mine ^ mask;
        let r = |g: usize| start(g) * block..start(g + mask) * block;
        s.push(
            vec![
                recv(real_of(v ^ mask), Region::work(r(theirs))),
                send(real_of(v ^ mask), Region::work(r(mine))),
            ],
            vec![],
        );
        mask <<= 1;
    }
    if me < 2 * rem {
        s.push(vec![send(me - 1, all())], vec![]);
    }
    s
}

/// Linear allgather: everyone sends its block to everyone at once.
pub fn allgather_linear(n: usize, me: usize, block: usize) -> Schedule {
    let mut s = Schedule::default();
    let mut comms: Vec<Comm> = (0..n)
        .filter(|&r| r != me)
        .map(|r| recv(r, Region::work(r * block..(r + 1) * block)))
        .collect();
    comms.extend(
        (0..n)
            .filter(|&r| r != me)
            .map(|r| send(r, Region::work(me * block..(me + 1) * block))),
    );
    s.push(comms, vec![]);
    s
}

/// Neighbour-exchange allgather (Chen et al.; rank-order layout) for an even number of
/// ranks: n/2 rounds instead of the ring's n - 1, each exchanging with one neighbour. Round
/// 0 swaps blocks within the pair (2p, 2p+1); from then on ranks alternate between their
/// left and right neighbours, each round forwarding the pair's two blocks it received the
/// round before. With an odd number of ranks it is the ring ([`allgather_ring`]).
pub fn allgather_neighbor_exchange(n: usize, me: usize, block: usize) -> Schedule {
    if !n.is_multiple_of(2) {
        return allgather_ring(n, me, block);
    }
    let mut s = Schedule::default();
    let pairs = n / 2;
    let p = me / 2;
    let even = me.is_multiple_of(2);
    let partner = me ^ 1;
    s.push(
        vec![
            recv(
                partner,
                Region::work(partner * block..(partner + 1) * block),
            ),
            send(partner, Region::work(me * block..(me + 1) * block)),
        ],
        vec![],
    );
    // Pair chunk c: blocks 2c and 2c + 1.
    let chunk = |c: usize| Region::work(2 * c * block..(2 * c + 2) * block);
    // The pair chunk received at round i >= 1: an even rank gets p - 1, p + 1, p - 2, ...,
    // an odd one p + 1, p - 1, p + 2, ... (mod n/2); round 0 completed its own pair's.
    let got = |i: usize| -> usize {
        if i == 0 {
            return p;
        }
        let k = i.div_ceil(2) % pairs;
        let left = (i % 2 == 1) == even;
        if left {
            (p + pairs - k) % pairs
        } else {
            (p + k) % pairs
        }
    };
    for i in 1..pairs {
        // Odd rounds: an even rank goes left (me - 1), an odd one right (me + 1); even
        // rounds: within the pair.
        let peer = match (i % 2 == 1, even) {
            (true, true) => (me + n - 1) % n,
            (true, false) => (me + 1) % n,
            (false, _) => partner,
        };
        s.push(
            vec![recv(peer, chunk(got(i))), send(peer, chunk(got(i - 1)))],
            vec![],
        );
    }
    s
}

// ---------------------------------------------------------------- alltoall(v)

/// Pairwise exchange: step k sends to `me + k` and receives from `me - k`, one peer per step,
/// so no rank is flooded. `sends[r]`/`recvs[r]` are the byte ranges for peer r.
pub fn alltoallv_pairwise(
    n: usize,
    me: usize,
    sends: &[Range<usize>],
    recvs: &[Range<usize>],
) -> Schedule {
    let mut s = Schedule::default();
    s.push(
        vec![],
        vec![Local::Copy {
            src: Region::send(sends[me].clone()),
            dst: recvs[me].clone(),
        }],
    );
    for k in 1..n {
        let to = (me + k) % n;
        let from = (me + n - k) % n;
        s.push(
            vec![
                recv(from, Region::work(recvs[from].clone())),
                send(to, Region::send(sends[to].clone())),
            ],
            vec![],
        );
    }
    s
}

/// Linear alltoall(v): every transfer posted at once.
pub fn alltoallv_linear(
    n: usize,
    me: usize,
    sends: &[Range<usize>],
    recvs: &[Range<usize>],
) -> Schedule {
    let mut s = Schedule::default();
    let mut comms: Vec<Comm> = (0..n)
        .filter(|&r| r != me)
        .map(|r| recv(r, Region::work(recvs[r].clone())))
        .collect();
    comms.extend(
        (0..n)
            .filter(|&r| r != me)
            .map(|r| send(r, Region::send(sends[r].clone()))),
    );
    s.push(
        comms,
        vec![Local::Copy {
            src: Region::send(sends[me].clone()),
            dst: recvs[me].clone(),
        }],
    );
    s
}

/// Bruck's alltoall of `block`-byte blocks (rank-order layout in `Send` and `Work`):
/// ceil(log2 n) rounds instead of n - 1, each moving about half the blocks, so small blocks
/// pay log2(n) message latencies rather than n - 1 (Open MPI tuned's choice for small
/// blocks). Block `i` of the rotated vector (what goes to rank `me + i`, later what came from
/// rank `me - i`) lives at `Work` block `me - i` from the start, where its final content
/// belongs, so no rotation back is needed: round k sends to `me + 2^k` the blocks whose index
/// has bit k set, packed into `Tmp`, and unpacks what `me - 2^k` sent into the same indices.
pub fn alltoall_bruck(n: usize, me: usize, block: usize) -> Schedule {
    let mut s = Schedule::default();
    // Nothing moves (every member passes the same block size, so all return here).
    if n == 0 || block == 0 {
        return s;
    }
    let at = |i: usize| {
        let b = (me + n - i % n) % n;
        b * block..(b + 1) * block
    };
    // Rotate: Work block (me - i) = Send block (me + i).
    let rotate = (0..n)
        .map(|i| {
            let from = (me + i) % n;
            Local::Copy {
                src: Region::send(from * block..(from + 1) * block),
                dst: at(i),
            }
        })
        .collect();
    let dists: Vec<usize> = std::iter::successors(Some(1usize), |d| d.checked_mul(2))
        .take_while(|&d| d < n)
        .collect();
    // The indices of a round, packed in descending order: a run of consecutive indices
    // then lies in ascending `Work` blocks (one copy unless it wraps around).
    let picks = |d: usize| -> Vec<usize> { (0..n).rev().filter(|i| i & d != 0).collect() };
    let most = dists.iter().map(|&d| picks(d).len()).max().unwrap_or(0);
    s.tmp_len = 2 * most * block;
    // Copies between the `Work` blocks of `idx` (in order) and `Tmp` from `base`, merged
    // where both sides are contiguous.
    let spans = |idx: &[usize], base: usize| -> Vec<(Range<usize>, Range<usize>)> {
        let mut out: Vec<(Range<usize>, Range<usize>)> = Vec::new();
        for (k, &i) in idx.iter().enumerate() {
            let w = at(i);
            let t = base + k * block..base + (k + 1) * block;
            match out.last_mut() {
                Some((lw, lt)) if lw.end == w.start && lt.end == t.start => {
                    lw.end = w.end;
                    lt.end = t.end;
                }
                _ => out.push((w, t)),
            }
        }
        out
    };
    // Each round's packing runs with the local steps of the round before it (the first
    // with the rotation), after that round's unpacking.
    let mut rounds: Vec<(Vec<Comm>, Vec<Local>)> = vec![(vec![], rotate)];
    let recv_at = most * block;
    for &d in &dists {
        let idx = picks(d);
        let len = idx.len() * block;
        let pack = spans(&idx, 0).into_iter().map(|(w, t)| Local::Pack {
            src: Region::work(w),
            dst: t,
        });
        rounds.last_mut().expect("the rotation").1.extend(pack);
        let unpack = spans(&idx, recv_at)
            .into_iter()
            .map(|(w, t)| Local::Copy {
                src: Region::tmp(t),
                dst: w,
            })
            .collect();
        rounds.push((
            vec![
                recv((me + n - d) % n, Region::tmp(recv_at..recv_at + len)),
                send((me + d) % n, Region::tmp(0..len)),
            ],
            unpack,
        ));
    }
    for (comms, locals) in rounds {
        s.push(comms, locals);
    }
    s
}

// ---------------------------------------------------------------- v-collectives

/// Linear gatherv: the root receives rank r's block into `Work[regions[r]]` and copies its
/// own from `Send` (unless `in_place`); other ranks send their `mine` bytes. `regions` is
/// only read at the root.
pub fn gatherv_linear(
    n: usize,
    me: usize,
    root: usize,
    mine: usize,
    regions: &[Range<usize>],
    in_place: bool,
) -> Schedule {
    let mut s = Schedule::default();
    if me != root {
        s.push(vec![send(root, Region::send(0..mine))], vec![]);
        return s;
    }
    let comms = (0..n)
        .filter(|&r| r != root)
        .map(|r| recv(r, Region::work(regions[r].clone())))
        .collect();
    let locals = if in_place {
        vec![]
    } else {
        vec![Local::Copy {
            src: Region::send(0..regions[root].len()),
            dst: regions[root].clone(),
        }]
    };
    s.push(comms, locals);
    s
}

/// Linear scatterv: the root sends `Send[regions[r]]` to rank r and copies its own region
/// into `Work` (unless `in_place`); other ranks receive their `mine` bytes into `Work`.
/// `regions` is only read at the root.
pub fn scatterv_linear(
    n: usize,
    me: usize,
    root: usize,
    mine: usize,
    regions: &[Range<usize>],
    in_place: bool,
) -> Schedule {
    let mut s = Schedule::default();
    if me != root {
        s.push(vec![recv(root, Region::work(0..mine))], vec![]);
        return s;
    }
    let comms = (0..n)
        .filter(|&r| r != root)
        .map(|r| send(r, Region::send(regions[r].clone())))
        .collect();
    let locals = if in_place {
        vec![]
    } else {
        vec![Local::Copy {
            src: Region::send(regions[root].clone()),
            dst: 0..regions[root].len(),
        }]
    };
    s.push(comms, locals);
    s
}

/// This rank's own block copied from `Send` into its region of `Work` (nothing in place).
fn own_block(me: usize, regions: &[Range<usize>], in_place: bool) -> Vec<Local> {
    if in_place {
        return vec![];
    }
    vec![Local::Copy {
        src: Region::send(0..regions[me].len()),
        dst: regions[me].clone(),
    }]
}

/// Ring allgatherv: n-1 steps, each passing one rank's region to the right (regions may
/// differ in size and sit anywhere in `Work`, disjoint).
pub fn allgatherv_ring(n: usize, me: usize, regions: &[Range<usize>], in_place: bool) -> Schedule {
    let mut s = Schedule::default();
    s.push(vec![], own_block(me, regions, in_place));
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    for step in 0..n.saturating_sub(1) {
        let out = (me + n - step) % n;
        let inc = (me + 2 * n - step - 1) % n;
        s.push(
            vec![
                recv(left, Region::work(regions[inc].clone())),
                send(right, Region::work(regions[out].clone())),
            ],
            vec![],
        );
    }
    s
}

/// Linear allgatherv: every rank sends its block to every other at once.
pub fn allgatherv_linear(
    n: usize,
    me: usize,
    regions: &[Range<usize>],
    in_place: bool,
) -> Schedule {
    let mut s = Schedule::default();
    s.push(vec![], own_block(me, regions, in_place));
    let mine = if in_place {
        Region::work(regions[me].clone())
    } else {
        Region::send(0..regions[me].len())
    };
    let mut comms: Vec<Comm> = (0..n)
        .filter(|&r| r != me)
        .map(|r| recv(r, Region::work(regions[r].clone())))
        .collect();
    comms.extend((0..n).filter(|&r| r != me).map(|r| send(r, mine.clone())));
    s.push(comms, vec![]);
    s
}

// ---------------------------------------------------------------- reduce_scatter

/// Ring reduce-scatter over `chunks` (byte ranges tiling the vector in rank order, one per
/// rank): n-1 steps; at step k a rank sends chunk `me-1-k` (its input at k = 0, else the
/// partial it reduced one step before) and reduces the received chunk `me-2-k`, so chunk c
/// is combined in ring order starting at rank c+1 and ends, complete, at rank c.
/// Commutative operations only.
pub fn reduce_scatter_ring(n: usize, me: usize, chunks: &[Range<usize>]) -> Schedule {
    let mut s = Schedule {
        tmp_len: chunks.iter().map(|c| c.len()).max().unwrap_or(0),
        rounds: Vec::new(),
    };
    if n == 1 {
        s.push(
            vec![],
            vec![Local::Copy {
                src: Region::send(chunks[0].clone()),
                dst: chunks[0].clone(),
            }],
        );
        return s;
    }
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    for step in 0..n - 1 {
        let out = (me + 2 * n - 1 - step) % n;
        let inc = (me + 2 * n - 2 - step) % n;
        let out = if step == 0 {
            Region::send(chunks[out].clone())
        } else {
            Region::work(chunks[out].clone())
        };
        let t = 0..chunks[inc].len();
        s.push(
            vec![recv(left, Region::tmp(t.clone())), send(right, out)],
            vec![Local::Reduce {
                src: t,
                dst: chunks[inc].clone(),
                src_first: true,
                acc: Buf::Send,
            }],
        );
    }
    s
}

/// Reduce-scatter as a binomial reduction to rank 0 (rank order, so any associative
/// operation) followed by a linear scatter of the chunks from rank 0's `Work`.
pub fn reduce_scatter_reduce_scatterv(n: usize, me: usize, chunks: &[Range<usize>]) -> Schedule {
    let len = chunks.last().map_or(0, |c| c.end);
    let mut s = reduce_binomial(n, me, 0, len);
    if me == 0 {
        s.push(
            (1..n)
                .map(|r| send(r, Region::work(chunks[r].clone())))
                .collect(),
            vec![],
        );
    } else {
        s.push(vec![recv(0, Region::work(chunks[me].clone()))], vec![]);
    }
    s
}

// ---------------------------------------------------------------- in-order reduce

/// Reduction to `root` in rank order for non-commutative operations: a binomial reduction to
/// rank 0 (which combines `x0 op x1 op ... op x(n-1)`), then rank 0 hands the result to the
/// root (one more hop when the root is not 0).
pub fn reduce_in_order(n: usize, me: usize, root: usize, len: usize) -> Schedule {
    let mut s = reduce_binomial(n, me, 0, len);
    if root != 0 {
        if me == 0 {
            s.push(vec![send(root, Region::work(0..len))], vec![]);
        } else if me == root {
            s.push(vec![recv(0, Region::work(0..len))], vec![]);
        }
    }
    s
}

// ---------------------------------------------------------------- scan / exscan

/// Recursive doubling scan (`exclusive`: exscan) of `len` bytes. `Work` is `[partial |
/// result]`. At distance 1, 2, 4, ... a rank exchanges its partial (the reduction of its
/// aligned group of ranks so far) with `me ^ mask`; a partial from below is combined in front
/// of both the partial and the result, one from above behind the partial only, so every
/// combination keeps rank order (correct for non-commutative operations). ceil(log2 n) rounds.
pub fn scan_recursive_doubling(n: usize, me: usize, len: usize, exclusive: bool) -> Schedule {
    let mut s = Schedule {
        tmp_len: len,
        rounds: Vec::new(),
    };
    let (partial, result) = (0..len, len..2 * len);
    let mut first = vec![Local::Copy {
        src: Region::send(0..len),
        dst: partial.clone(),
    }];
    if !exclusive {
        first.push(Local::Copy {
            src: Region::send(0..len),
            dst: result.clone(),
        });
    }
    s.push(vec![], first);
    let mut have_result = !exclusive;
    let mut mask = 1;
    while mask < n {
        let peer = me ^ mask;
        if peer < n {
            let from_below = peer < me;
            let mut locals = Vec::new();
            if from_below {
                locals.push(if have_result {
                    Local::Reduce {
                        src: 0..len,
                        dst: result.clone(),
                        src_first: true,
                        acc: Buf::Work,
                    }
                } else {
                    Local::Copy {
                        src: Region::tmp(0..len),
                        dst: result.clone(),
                    }
                });
                have_result = true;
            }
            locals.push(Local::Reduce {
                src: 0..len,
                dst: partial.clone(),
                src_first: from_below,
                acc: Buf::Work,
            });
            s.push(
                vec![
                    recv(peer, Region::tmp(0..len)),
                    send(peer, Region::work(partial.clone())),
                ],
                locals,
            );
        }
        mask <<= 1;
    }
    s
}

/// Linear (chain) scan (`exclusive`: exscan): rank r receives the reduction of ranks 0..r
/// from r-1, combines its input behind it and forwards the result to r+1. n-1 hops in
/// sequence; rank order.
pub fn scan_linear(n: usize, me: usize, len: usize, exclusive: bool) -> Schedule {
    let mut s = Schedule {
        tmp_len: len,
        rounds: Vec::new(),
    };
    let (partial, result) = (0..len, len..2 * len);
    let forwarded = if me == 0 {
        if !exclusive {
            s.push(
                vec![],
                vec![Local::Copy {
                    src: Region::send(0..len),
                    dst: result.clone(),
                }],
            );
        }
        Region::send(0..len)
    } else {
        let reduce = Local::Reduce {
            src: 0..len,
            dst: partial.clone(),
            src_first: true,
            acc: Buf::Send,
        };
        let to_result = Local::Copy {
            src: if exclusive {
                Region::tmp(0..len)
            } else {
                Region::work(partial.clone())
            },
            dst: result,
        };
        s.push(
            vec![recv(me - 1, Region::tmp(0..len))],
            vec![reduce, to_result],
        );
        Region::work(partial)
    };
    if me + 1 < n {
        s.push(vec![send(me + 1, forwarded)], vec![]);
    }
    s
}

#[cfg(test)]
mod tests;
