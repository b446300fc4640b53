//! The slot and flag protocol of coll-sm, without I/O: what one rank reads, writes and waits
//! for in the communicator's segment, as a state machine stepped by [`Run::poll`] over any
//! [`Mem`] (the mapped segment in a job, a plain vector in the tests, which interleave the
//! ranks' steps in every order proptest draws).
//!
//! # Segment layout ([`Layout`])
//! One control block per rank ([`LINE`] bytes, so that no two ranks' words share a cache line
//! or an adjacent-line prefetch pair), the barrier's block, then two data slots per rank.
//! A control block has two post lines, one per parity of the sequence number, each with its
//! `posted` word and inline data slot, and a line with `freed` and `pid`. Rank `r` alone
//! writes its block's `posted`, `freed` and `pid` words and its slots; everyone reads them.
//! Every rank adds to the barrier's counter.
//!
//! # Dead members
//! A rank that waits long asks which members it still waits for ([`Run::awaited`]); the
//! module checks whether their processes (the `pid` each member stores in its line when the
//! segment is made) still exist, so a member that died becomes an error rather than a hang.
//! A member that finished and exited normally is never among them: it posted everything.
//!
//! # Sequence numbers
//! Every collective coll-sm runs on a communicator takes the next sequence number `s`
//! (every member runs the same collectives in the same order, and coll-sm declines or
//! accepts from arguments every member passes alike, so the numbers agree). A rank
//! publishes stage `k` of collective `s` by storing `4s + k` in its `posted` word of parity
//! `s % 2` (release; a member posts every stage a peer waits for, so a word never skips a
//! value a waiter needs, and a later value of the same parity means the earlier one), and
//! says it has read everything it needed of collective `s` by storing `s` in `freed`.
//! Comparisons wrap ([`reached`]): the members are never more than two collectives apart.
//!
//! # Slots
//! Collective `s` writes the slot `s % 2` of each rank (for at most [`INLINE`] bytes, the
//! inline slot of the post line `s % 2`, next to the `posted` word that publishes it: one
//! cache-line hand-over per post for both flag and data). Before a rank writes
//! its slot for `s`, it waits until every other rank's `freed` reached `s - 2`, the last
//! collective that used this slot: so a rank may run up to two collectives ahead (a broadcast root does not
//! wait for its readers), and nothing it writes is still being read. A rank that already
//! knows every other member finished `s - 2` skips the check ([`Run::after_clear`]): it
//! passed a barrier at `s - 2` or later (every member arrived there, so had finished
//! everything before it), or in collective `s - 1` it waited for every other member's post
//! (allreduce, a reduce's root: a member posts `s - 1` only after it finished `s - 2`). In
//! OSU's loops (a barrier between iterations) and in back-to-back allreduces, that is one
//! remote load, a cache-line hand-over on the critical path, saved per collective.
//!
//! # Operations
//! - barrier: a counter every rank increments once per barrier; barrier `b` is passed when
//!   it reaches `n * b` (one round, and every waiter watches the same word, so the last
//!   rank to arrive wakes every sleeper at once when the node is oversubscribed). Each rank
//!   also posts stage 1 after its increment, so that a waiter can tell who has not arrived.
//!   The last to arrive says that its increment released everyone ([`Step::Posted`]'s
//!   `release`), so that where ranks share cores it can let them run first.
//! - bcast: the root copies into its slot and posts; the others wait for it and copy out.
//! - reduce, allreduce, short: every rank copies its input into its slot and posts; the
//!   root (every rank for allreduce) combines all slots in rank order. The root of a reduce
//!   neither copies nor posts (nobody reads its slot): it waits and combines at once.
//! - reduce, allreduce, split (longer vectors): every rank posts its input as above, then
//!   combines its own share of the elements over all slots in rank order, writes that share
//!   of the result back into its own slot (no other rank reads that part of it in this
//!   stage) and posts stage 2; the root (every rank for allreduce) copies every share out.
//!
//! - allgather: every rank copies its block into its slot and posts; each copies every other
//!   rank's block out of its slot as soon as that rank posted (its own from its input).
//! - alltoall: every rank copies its whole input (n blocks) into its slot and posts; each
//!   copies block `me` of every other rank's slot out as soon as that rank posted. One
//!   hand-over per pair of ranks, none of the point-to-point matching and acknowledgements.
//!
//! - allgatherv: as allgather, each rank's block of its own length (every member knows every
//!   length: they are the receive counts, the same everywhere).
//! - reduce_scatter (and its block form): every rank posts its whole input as a reduction's
//!   leaf does; each waits for every other rank's post and combines its own block (its
//!   result) over all slots in rank order. One post and one wait per rank, no partials; a
//!   rank whose block is empty waits for nobody (it needs no other input).
//! - gather: every rank but the root posts its block; the root copies each block out as soon
//!   as its rank posted (its own from its input), as allgather's readers but the root alone.
//! - scatter: the root posts its whole input (n blocks), each other rank copies its block
//!   out, as a broadcast's readers.
//!
//! - alltoallv: every rank writes a header of `n + 1` offsets (in its post line up to 11
//!   ranks) and its blocks, packed in rank order (after the header when both fit the post
//!   line, else in its data slot), and posts; each reads its block's offsets from every other
//!   rank's header and copies the block out. A member knows only its own row and column of
//!   the counts, so whether its input fits its slot is its own verdict: one that does not fit
//!   writes [`DECLINED`] as its header's last offset and posts, every member sees it (each
//!   reads every header), and all of them fall through together ([`Run::declined`]).
//!
//! Reductions combine `x0 op x1 op ... op x(n-1)` in rank order, so non-commutative
//! operations are served and every rank gets the same bits.
//!
//! # Stamped slots
//! A short reduction's input of more than [`INLINE`] bytes (up to [`STAMPED`]: OSU's 64 B
//! reduce and allreduce) does not go to the data slot as one run of bytes: its first
//! [`INLINE`] bytes travel in the post line as usual, the rest in up to [`STAMPED_LINES`]
//! cache line(s) of the data slot, each holding its own copy of the post's value (a stamp)
//! before [`STAMPED_LINE_DATA`] bytes of data. The writer stores each line's data then its
//! stamp, the post line last, so `posted` still means everything; but a reader that waits
//! polls every line's stamp along with `posted` ([`Wait::lines`]), so the lines come over
//! while it waits and the post line is the only miss after the post. Without stamps the
//! reader learns of the post first and only then fetches the data: two cache-line
//! hand-overs in a row on the critical path instead of one.

use std::ops::Range;

use rmca_framework::coll::schedule::part;
use rmca_framework::coll::ReduceBytes;

/// Bytes of a rank's control block: four 64-byte cache lines, two adjacent-line prefetch
/// pairs. Line 0 is the post line of even-numbered collectives (`posted`, its sleeper count,
/// inline data), line 1 holds `freed`, its sleeper count and the pid, line 2 is the post line
/// of odd-numbered collectives, line 3 is padding (nothing shares line 2's prefetch pair).
pub const LINE: usize = 256;
/// Offset of the post line of collectives of parity 1 in a control block (parity 0's is at 0).
const POST_LINE_ODD: usize = 128;

/// Offset of the post line of collective `seq` in a control block.
#[inline]
fn post_line(seq: u32) -> usize {
    (seq & 1) as usize * POST_LINE_ODD
}
/// Offset of `posted` in a post line.
const POSTED: usize = 0;
/// Offset of the count of ranks sleeping on a post line's `posted` word (see `lib.rs`).
const SLEEPERS: usize = 4;
/// Offset of `freed` in a control block: in its second 64-byte cache line, away from the post
/// lines, which the other ranks poll: storing `freed` then needs no cache-line hand-over while
/// a peer spins on `posted`, and a peer's poll of `posted` does not take the line `freed` is
/// stored in (the next post, ordered after it, would wait for that).
const FREED: usize = 64;
/// Offset of the count of ranks sleeping on this block's `freed` word.
const FREED_SLEEPERS: usize = 68;
/// Offset of the process id of the block's rank (0 until it stored it).
const PID: usize = 72;
/// Offset of a post line's inline slot (collectives of at most [`INLINE`] bytes): in the
/// cache line of the `posted` word that publishes it, 16-byte aligned.
const INLINE_AT: usize = 16;
/// The longest collective whose data travels in the post line rather than a data slot: a
/// reader's one miss on `posted` brings the data with it, and the writer stores into one
/// line, not two.
pub const INLINE: usize = 64 - INLINE_AT;

/// The shortest block a scatter's root leaves out of its slot (its own: see
/// [`Run::publish_except`]); shorter ones are published with the rest in one copy, which
/// costs less than two.
const SKIP_OWN_BLOCK: usize = 512;

/// Bytes between two stamped lines (one cache line each).
const STAMP_STRIDE: usize = 64;
/// Data bytes of a stamped line: the line less its stamp word.
pub const STAMPED_LINE_DATA: usize = STAMP_STRIDE - 4;
/// Stamped lines a run uses at most (in the data slot, at least [`LINE`] bytes: room for
/// four). One: the reader polls lines the writer is still filling, and each poll of such a
/// line takes it back from the writer, whose next store to it must fetch it again. OSU's
/// loop at 2 bound ranks, medians of 6 alternating runs: 64 B (one line) reduce 0.51 us
/// stamped against 0.54 plain, allreduce 0.57 against 0.61; 128 B (two) reduce level, allreduce
/// 0.69 against 0.60; 256 B (four) reduce 0.62-0.66 against 0.53-0.60.
pub const STAMPED_LINES: usize = 1;
/// The longest reduction input that travels in stamped lines (see the module doc).
pub const STAMPED: usize = INLINE + STAMPED_LINES * STAMPED_LINE_DATA;

/// The last offset of an alltoallv header whose rank's input did not fit its slot: every
/// member falls through (see the module doc).
pub const DECLINED: u32 = u32::MAX;

/// Bytes of the header of an alltoallv slot for `n` ranks: `n + 1` offsets (u32), where
/// block `r` spans `[off[r], off[r + 1])` of the data that follows.
pub fn alltoallv_header(n: usize) -> usize {
    4 * (n + 1)
}

/// The memory a [`Run`] works on: 4-byte control words (at multiples of 4) and data bytes.
pub trait Mem {
    /// Load the word at `off` (acquire: data published before it is visible).
    fn load(&self, off: usize) -> u32;
    /// Store `v` at `off` (release: data written before it is published with it).
    fn store(&self, off: usize, v: u32);
    /// Store `v` at `off` with release ordering only, for a value no rank sleeps on (no
    /// fence: the store need not be seen before this rank's next load).
    fn mark(&self, off: usize, v: u32);
    /// Add `v` to the word at `off` atomically (acquire and release); the sum.
    fn add(&self, off: usize, v: u32) -> u32;
    /// Copy `data` to `off`.
    fn write(&self, off: usize, data: &[u8]);
    /// Run `f` on the `len` bytes at `off` (no other rank writes them meanwhile: the
    /// protocol's waits guarantee it).
    fn view(&self, off: usize, len: usize, f: &mut dyn FnMut(&[u8]));
}

/// Where everything is in a segment for `n` ranks and slots of `slot` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Ranks.
    pub n: usize,
    /// Bytes of one data slot (a multiple of [`LINE`]).
    pub slot: usize,
}

impl Layout {
    /// The layout for `n` ranks moving at most `max_len` bytes per collective.
    pub fn new(n: usize, max_len: usize) -> Self {
        Self {
            n,
            slot: max_len.max(1).next_multiple_of(LINE),
        }
    }

    /// Bytes of the whole segment.
    pub fn len(&self) -> usize {
        (self.n + 1) * LINE + self.n * 2 * self.slot
    }

    /// Offset of the barrier's counter.
    pub fn arrived(&self) -> usize {
        self.n * LINE
    }

    /// Offset of the count of ranks sleeping on the barrier's counter.
    pub fn arrived_sleepers(&self) -> usize {
        self.n * LINE + SLEEPERS
    }

    /// A segment of no bytes (never: every layout has at least one rank's line).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Offset of rank `r`'s `posted` word for collective `seq` (one word per parity of
    /// the sequence number, each in the post line with that parity's inline data).
    #[inline]
    pub fn posted(&self, r: usize, seq: u32) -> usize {
        r * LINE + post_line(seq) + POSTED
    }

    /// Offset of rank `r`'s `freed` word.
    pub fn freed(&self, r: usize) -> usize {
        r * LINE + FREED
    }

    /// Offset of the count of ranks sleeping on rank `r`'s `posted` word for `seq`.
    #[inline]
    pub fn sleepers(&self, r: usize, seq: u32) -> usize {
        r * LINE + post_line(seq) + SLEEPERS
    }

    /// Offset of the count of ranks sleeping on rank `r`'s `freed` word.
    pub fn freed_sleepers(&self, r: usize) -> usize {
        r * LINE + FREED_SLEEPERS
    }

    /// Offset of rank `r`'s process id.
    pub fn pid(&self, r: usize) -> usize {
        r * LINE + PID
    }

    /// Offset of rank `r`'s slot for collective `seq` moving `len` bytes: in its control
    /// line when `len` is at most [`INLINE`] (so that a reader's one miss on `posted`
    /// brings the data too), else in its data slots.
    #[inline]
    pub fn data(&self, r: usize, seq: u32, len: usize) -> usize {
        if len <= INLINE {
            r * LINE + post_line(seq) + INLINE_AT
        } else {
            let slot = (seq & 1) as usize;
            (self.n + 1) * LINE + (r * 2 + slot) * self.slot
        }
    }

    /// Offset of the stamp of rank `r`'s stamped line `i` for collective `seq` (its data
    /// follows the stamp; see the module doc): line `i` of its data slot.
    #[inline]
    pub fn stamp(&self, r: usize, seq: u32, i: usize) -> usize {
        self.data(r, seq, self.slot) + i * STAMP_STRIDE
    }
}

/// Stamped lines a wait also needs (see the module doc): `count` words `at`, `at + 64`, ...
/// that must reach the wait's value as well; none by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lines {
    /// Offset of the first stamp.
    pub at: usize,
    /// Stamps.
    pub count: usize,
}

impl Lines {
    /// Offset of stamp `i`.
    #[inline]
    pub fn stamp(&self, i: usize) -> usize {
        self.at + i * STAMP_STRIDE
    }
}

/// Stamped lines holding the part of a `len`-byte input past the post line.
#[inline]
fn stamped_lines(len: usize) -> usize {
    len.saturating_sub(INLINE).div_ceil(STAMPED_LINE_DATA)
}

/// `cur` is at or past `want`, on the wrapping sequence space (the values compared are
/// never more than 2^31 apart).
#[inline]
pub fn reached(cur: u32, want: u32) -> bool {
    cur.wrapping_sub(want) as i32 >= 0
}

/// The `posted` value of stage `k` of collective `seq`.
#[inline]
fn stage(seq: u32, k: u32) -> u32 {
    seq.wrapping_mul(4).wrapping_add(k)
}

/// A collective coll-sm runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Barrier number `round` of the communicator (from 1, wrapping).
    Barrier {
        /// How many barriers ran on the communicator, this one included.
        round: u32,
    },
    /// A broadcast from `root`.
    Bcast {
        /// The root.
        root: usize,
    },
    /// A reduction to `root` of `elem`-byte elements; `split`: share the combining.
    Reduce {
        /// The root.
        root: usize,
        /// Bytes per element.
        elem: usize,
        /// Every rank combines its share of the elements (two stages), rather than the root
        /// combining everything (one stage).
        split: bool,
    },
    /// A reduction whose result every rank gets; `split` as for [`Op::Reduce`].
    Allreduce {
        /// Bytes per element.
        elem: usize,
        /// Every rank combines its share of the elements, then copies the others' shares.
        split: bool,
    },
    /// An allgather of `len`-byte blocks: `send` is this rank's block, `work` gets every
    /// rank's, in rank order (`n * len` bytes).
    Allgather,
    /// An alltoall of `len / n`-byte blocks: `send` holds the block for every rank, `work`
    /// gets every rank's block for this one, both in rank order (`len` bytes).
    Alltoall,
    /// An allgatherv: `send` is this rank's block (`len` bytes), rank `q`'s lands in
    /// `work[recvs[q]]` (see [`Varying`]).
    Allgatherv,
    /// A reduce_scatter of `elem`-byte elements: `send` is this rank's whole input (`len`
    /// bytes, the same length everywhere), `work` gets the reduction of its bytes
    /// `start..end` (this rank's block).
    ReduceScatter {
        /// Bytes per element.
        elem: usize,
        /// Where this rank's block starts in the input.
        start: usize,
        /// Where it ends.
        end: usize,
    },
    /// A gather of `len`-byte blocks to `root`: `send` is this rank's block, the root's `work`
    /// gets every rank's in rank order (`n * len` bytes).
    Gather {
        /// The root.
        root: usize,
    },
    /// A scatter from `root` of `len / n`-byte blocks: the root's `send` holds every rank's
    /// block in rank order (`len` bytes), `work` gets this rank's.
    Scatter {
        /// The root.
        root: usize,
    },
    /// An alltoallv: `send[sends[r]]` goes to rank `r`, rank `q`'s block for this one lands
    /// in `work[recvs[q]]` (see [`Varying`]); `fits`: this rank's header and blocks fit its
    /// slot (else every member falls through, see [`Run::declined`]).
    Alltoallv {
        /// This rank's input fits its slot.
        fits: bool,
    },
}

/// The per-rank regions of a varying exchange ([`Op::Allgatherv`], [`Op::Alltoallv`]), in
/// bytes; one per rank.
#[derive(Clone, Copy, Debug)]
pub struct Varying<'a> {
    /// Where this rank's block for each rank is in `send` (alltoallv; empty for allgatherv).
    pub sends: &'a [Range<usize>],
    /// Where each rank's block lands in `work`.
    pub recvs: &'a [Range<usize>],
}

/// An alltoallv block longer than its receive region (MPI's truncation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncated {
    /// The rank that sent it.
    pub rank: usize,
    /// Bytes it sent.
    pub sent: usize,
    /// Bytes the region holds (the first this many were copied).
    pub received: usize,
}

/// What a [`Run`] waits for: the word at `off` to reach `want` (see [`reached`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    /// The word's offset.
    pub off: usize,
    /// The value it must reach.
    pub want: u32,
    /// Offset of the count of sleepers on that word (a waiter that sleeps announces itself
    /// there, and the rank that stores the word wakes it).
    pub sleepers: usize,
    /// The rank whose word it is; `None` for the barrier's counter (any rank not arrived).
    pub from: Option<usize>,
    /// Stamped lines of the same post: a waiter that spins polls them along with the word
    /// (see the module doc). The word alone decides: it is stored after them.
    pub lines: Lines,
}

impl Wait {
    /// Whether the word and every stamped line reached the value waited for.
    #[inline]
    pub fn ready<M: Mem + ?Sized>(&self, mem: &M) -> bool {
        // Every load issued, none skipped: they are independent, so they go out together.
        let mut ok = reached(mem.load(self.off), self.want);
        for i in 0..self.lines.count {
            ok &= reached(mem.load(self.lines.stamp(i)), self.want);
        }
        ok
    }
}

/// Where [`Run::poll`] left a collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Finished.
    Done,
    /// Cannot go on until this word moves.
    Wait(Wait),
    /// This rank posted its word at `off` (a sleeper on it must be woken); poll again.
    Posted {
        /// Offset of the `posted` word stored.
        off: usize,
        /// Offset of its sleeper count.
        sleepers: usize,
        /// The post released every other member at once (the last arrival at a barrier):
        /// where ranks share cores, this rank should give its core up now, so that the
        /// members it released run before it goes on (see `lib.rs`).
        release: bool,
    },
}

/// One collective on one rank: which stage it is at.
#[derive(Clone, Debug)]
pub struct Run {
    op: Op,
    layout: Layout,
    me: usize,
    seq: u32,
    len: usize,
    stage: u8,
    /// The next rank to check in the current wait over ranks.
    next: usize,
    /// Every other member finished every collective up to this sequence number, as far as
    /// this rank knows (see [`Run::after_clear`]).
    synced: Option<u32>,
    /// An alltoallv member's input did not fit: every member falls through.
    declined: bool,
    /// The first alltoallv block longer than its receive region.
    truncated: Option<Truncated>,
    /// Stamped lines of every rank's stage-1 post (see the module doc); 0: none.
    stamped: usize,
}

/// Share `q` of `len` bytes of `elem`-byte elements among `n` ranks: the schedule library's
/// balanced split of the elements ([`part`]), in bytes.
pub fn share(len: usize, elem: usize, n: usize, q: usize) -> Range<usize> {
    let p = part(len / elem, n, q);
    (p.start * elem)..(p.end * elem)
}

impl Run {
    /// Collective number `seq` (from 1, wrapping) of `op` over `len` bytes on rank `me`.
    ///
    /// # Panics
    /// If `len` exceeds the slot, `me` or a root is not a rank, or a reduction's `elem` is 0
    /// or does not divide `len`: the module checks the arguments before it starts a run.
    #[inline]
    pub fn new(op: Op, layout: Layout, me: usize, seq: u32, len: usize) -> Self {
        assert!(me < layout.n && len <= layout.slot, "coll-sm: bad run");
        match op {
            Op::Bcast { root } | Op::Reduce { root, .. } => assert!(root < layout.n),
            _ => {}
        }
        if let Op::Reduce { elem, .. } | Op::Allreduce { elem, .. } = op {
            assert!(
                elem > 0 && len.is_multiple_of(elem),
                "coll-sm: bad element size"
            );
        }
        if let Op::ReduceScatter { elem, start, end } = op {
            assert!(
                elem > 0
                    && len.is_multiple_of(elem)
                    && start <= end
                    && end <= len
                    && start.is_multiple_of(elem)
                    && end.is_multiple_of(elem),
                "coll-sm: bad reduce_scatter block"
            );
        }
        if let Op::Gather { root } | Op::Scatter { root } = op {
            assert!(root < layout.n);
        }
        if matches!(op, Op::Alltoall | Op::Scatter { .. }) {
            assert!(len.is_multiple_of(layout.n), "coll-sm: bad alltoall length");
        }
        if let Op::Alltoallv { fits: true } = op {
            assert!(
                len + alltoallv_header(layout.n) <= layout.slot,
                "coll-sm: bad alltoallv length"
            );
        }
        // Short reductions only: the split ones write their shares back into the slot.
        let reduction = matches!(
            op,
            Op::Reduce { split: false, .. }
                | Op::Allreduce { split: false, .. }
                | Op::ReduceScatter { .. }
        );
        let stamped = if reduction && len > INLINE && len <= STAMPED {
            stamped_lines(len)
        } else {
            0
        };
        Self {
            op,
            layout,
            me,
            seq,
            len,
            stage: 0,
            next: 0,
            synced: None,
            declined: false,
            truncated: None,
            stamped,
        }
    }

    /// Once done (an alltoallv): some member's input did not fit its slot, so every member
    /// declines this collective (its output is not written, or not whole).
    pub fn declined(&self) -> bool {
        self.declined
    }

    /// Once done (an alltoallv that was not declined): the first block longer than its
    /// receive region, if any (only the region's length was copied).
    pub fn truncated(&self) -> Option<Truncated> {
        self.truncated
    }

    /// Before this collective, this rank learned that every other member had finished every
    /// collective up to `seq` (what [`Run::clears`] of an earlier run said; `None`: nothing
    /// known): slots those used need no `freed` check (one remote load per member saved).
    #[inline]
    pub fn after_clear(mut self, seq: Option<u32>) -> Self {
        self.synced = seq;
        self
    }

    /// Once done: the collective up to which, as this run learned, every other member has
    /// finished everything (for [`Run::after_clear`] of the next runs). A barrier `s`: `s`
    /// (every member arrived, so finished everything before; the barrier uses no slot). A
    /// collective `s` in which this rank waited for every other member's post of `s` (an
    /// allreduce, allgather, alltoall or reduce_scatter with a block of its own; a reduce or gather at its root): `s - 1` (a member posts `s`
    /// only after it finished `s - 1`). `None` for the others (a member may still be reading an earlier slot).
    pub fn clears(&self) -> Option<u32> {
        if self.stage != u8::MAX {
            return None;
        }
        match self.op {
            Op::Barrier { .. } => Some(self.seq),
            // A reduce_scatter's member with an empty block waited for nobody.
            Op::ReduceScatter { start, end, .. } if start == end => None,
            Op::Allreduce { .. }
            | Op::Allgather
            | Op::Alltoall
            | Op::Allgatherv
            | Op::Alltoallv { .. }
            | Op::ReduceScatter { .. } => Some(self.seq.wrapping_sub(1)),
            Op::Reduce { root, .. } | Op::Gather { root } if root == self.me => {
                Some(self.seq.wrapping_sub(1))
            }
            Op::Reduce { .. } | Op::Gather { .. } | Op::Bcast { .. } | Op::Scatter { .. } => None,
        }
    }

    /// Go as far as possible without waiting. `send` is the input of a reduction, `work`
    /// the buffer of a broadcast or the result of a reduction (private space on a
    /// reduction's non-root), both `len` bytes (an allgather's `work` holds `n * len`, see
    /// [`Op::Allgather`] and [`Op::Alltoall`]); `reduce` combines for reductions.
    #[inline]
    pub fn poll<M: Mem + ?Sized>(
        &mut self,
        mem: &M,
        send: &[u8],
        work: &mut [u8],
        reduce: Option<ReduceBytes<'_>>,
    ) -> Step {
        if self.stage == u8::MAX {
            return Step::Done;
        }
        // One function per kind of operation: each keeps only its own values live, where one
        // function for all spilled registers in its prologue on every call.
        match self.op {
            Op::Barrier { round } => self.poll_barrier(mem, round),
            Op::Bcast { root } => self.poll_bcast(mem, root, work),
            Op::Reduce { .. } | Op::Allreduce { .. } => self.poll_reduce(mem, send, work, reduce),
            Op::Allgather | Op::Alltoall => self.poll_exchange(mem, send, work),
            Op::ReduceScatter { start, end, .. } => {
                self.poll_reduce_scatter(mem, send, work, start..end, reduce)
            }
            Op::Gather { root } | Op::Scatter { root } => self.poll_rooted(mem, root, send, work),
            Op::Allgatherv | Op::Alltoallv { .. } => {
                unreachable!("coll-sm: a varying exchange is polled by poll_v")
            }
        }
    }

    /// [`Run::poll`] of a varying exchange ([`Op::Allgatherv`], [`Op::Alltoallv`]) over the
    /// regions `v`; the others as [`Run::poll`].
    #[inline(never)]
    pub fn poll_v<M: Mem + ?Sized>(
        &mut self,
        mem: &M,
        send: &[u8],
        work: &mut [u8],
        v: Varying<'_>,
    ) -> Step {
        if self.stage == u8::MAX {
            return Step::Done;
        }
        let (l, me, seq, n) = (self.layout, self.me, self.seq, self.layout.n);
        let alltoallv = matches!(self.op, Op::Alltoallv { .. });
        if self.stage == 0 {
            match self.op {
                Op::Allgatherv => return self.publish(mem, &send[..self.len]),
                Op::Alltoallv { fits } => {
                    if let Some(w) = self.wait_freed(mem) {
                        return w;
                    }
                    let at = self.header_at(me);
                    if fits {
                        let mut data = self.blocks_at(me, self.len);
                        let mut off = 0u32;
                        mem.write(at, &off.to_ne_bytes());
                        for (r, block) in v.sends.iter().enumerate() {
                            mem.write(data, &send[block.clone()]);
                            data += block.len();
                            off += block.len() as u32;
                            mem.write(at + 4 * (r + 1), &off.to_ne_bytes());
                        }
                    } else {
                        mem.write(at + 4 * n, &DECLINED.to_ne_bytes());
                        self.declined = true;
                    }
                    self.stage = 1;
                    return self.post(mem, 1);
                }
                _ => unreachable!("coll-sm: poll_v on {:?}", self.op),
            }
        }
        // Every other rank's block for this one, as soon as that rank posted; this rank's own
        // straight from `send`.
        while self.next < n {
            let q = self.next;
            let to = v.recvs[q].clone();
            if q == me {
                if !self.declined {
                    let from = if alltoallv {
                        v.sends[me].clone()
                    } else {
                        0..self.len
                    };
                    work[to].copy_from_slice(&send[from]);
                }
            } else {
                if let Some(w) = self.wait_one(mem, q, 1) {
                    return w;
                }
                if alltoallv {
                    let at = self.header_at(q);
                    let word = |i: usize| {
                        let mut x = [0u8; 4];
                        mem.view(at + 4 * i, 4, &mut |b| x.copy_from_slice(b));
                        u32::from_ne_bytes(x)
                    };
                    if word(n) == DECLINED {
                        self.declined = true;
                    }
                    if !self.declined {
                        let (start, end) = (word(me) as usize, word(me + 1) as usize);
                        let sent = end.saturating_sub(start);
                        let take = sent.min(to.len());
                        if sent > to.len() && self.truncated.is_none() {
                            self.truncated = Some(Truncated {
                                rank: q,
                                sent,
                                received: to.len(),
                            });
                        }
                        let data = self.blocks_at(q, word(n) as usize);
                        let dst = &mut work[to.start..to.start + take];
                        mem.view(data + start, take, &mut |b| dst.copy_from_slice(b));
                    }
                } else {
                    let dst = &mut work[to.clone()];
                    mem.view(l.data(q, seq, to.len()), to.len(), &mut |b| {
                        dst.copy_from_slice(b)
                    });
                }
            }
            self.next += 1;
        }
        self.finish(mem)
    }

    /// [`Run::poll`] of a barrier.
    #[inline(never)]
    fn poll_barrier<M: Mem + ?Sized>(&mut self, mem: &M, round: u32) -> Step {
        let l = self.layout;
        let want = round.wrapping_mul(l.n as u32);
        if self.stage == 0 {
            self.stage = 1;
            let last = mem.add(l.arrived(), 1) == want;
            // Arrived (for [`Run::awaited`]); nobody waits on this value, so no
            // wake-up and no fence. After the increment: a rank seen arrived has
            // incremented. Marked in the post line of the *next* collective: the
            // store takes that line back from the members that read it two
            // collectives ago here, inside the barrier, rather than in the next
            // collective's post, on its critical path (OSU times the collective
            // after a barrier, not the barrier). Its word goes on monotonic: it held
            // a stage of collective `seq - 1`, and `seq + 1` posts above this.
            mem.mark(
                l.posted(self.me, self.seq.wrapping_add(1)),
                stage(self.seq, 1),
            );
            if last {
                // The last to arrive: the others may be asleep on the counter.
                return Step::Posted {
                    off: l.arrived(),
                    sleepers: l.arrived_sleepers(),
                    release: true,
                };
            }
        }
        let off = l.arrived();
        if !reached(mem.load(off), want) {
            return Step::Wait(Wait {
                off,
                want,
                sleepers: l.arrived_sleepers(),
                from: None,
                lines: Lines::default(),
            });
        }
        self.finish(mem)
    }

    /// [`Run::poll`] of a broadcast from `root`.
    #[inline(never)]
    fn poll_bcast<M: Mem + ?Sized>(&mut self, mem: &M, root: usize, work: &mut [u8]) -> Step {
        let (l, me, seq, len) = (self.layout, self.me, self.seq, self.len);
        if root == me {
            if self.stage == 1 {
                return self.finish(mem);
            }
            return self.publish(mem, &work[..len]);
        }
        if let Some(w) = self.wait_one(mem, root, 1) {
            return w;
        }
        mem.view(l.data(root, seq, len), len, &mut |b| {
            work[..len].copy_from_slice(b)
        });
        self.finish(mem)
    }

    /// Stage 0 of an operation in which this rank publishes `data` in its slot: once no
    /// member still reads the slot, write it and post stage 1.
    fn publish<M: Mem + ?Sized>(&mut self, mem: &M, data: &[u8]) -> Step {
        if let Some(w) = self.wait_freed(mem) {
            return w;
        }
        let (l, me, seq) = (self.layout, self.me, self.seq);
        if l.n > 1 {
            if self.stamped > 0 {
                // Each line's data, then its stamp; the post line's part last (the post,
                // ordered after all of them, still means everything).
                let (head, rest) = data.split_at(INLINE);
                for (i, chunk) in rest.chunks(STAMPED_LINE_DATA).enumerate() {
                    let at = l.stamp(me, seq, i);
                    mem.write(at + 4, chunk);
                    mem.mark(at, stage(seq, 1));
                }
                mem.write(l.data(me, seq, 0), head);
            } else {
                mem.write(l.data(me, seq, self.len), data);
            }
        }
        self.stage = 1;
        self.post(mem, 1)
    }

    /// [`Run::publish`] of `data` but for the bytes `skip`, which no reader reads (a
    /// scatter root's own block): left unwritten in an unstamped slot; a stamped post
    /// (short inputs) writes everything as [`Run::publish`] does.
    fn publish_except<M: Mem + ?Sized>(
        &mut self,
        mem: &M,
        data: &[u8],
        skip: Range<usize>,
    ) -> Step {
        if self.stamped > 0 {
            return self.publish(mem, data);
        }
        if let Some(w) = self.wait_freed(mem) {
            return w;
        }
        let (l, me, seq) = (self.layout, self.me, self.seq);
        if l.n > 1 {
            let at = l.data(me, seq, self.len);
            let (head, tail) = (&data[..skip.start], &data[skip.end..]);
            if !head.is_empty() {
                mem.write(at, head);
            }
            if !tail.is_empty() {
                mem.write(at + skip.end, tail);
            }
        }
        self.stage = 1;
        self.post(mem, 1)
    }

    /// Copy bytes `range` of rank `q`'s stamped input (posted: see the module doc) to `out`.
    fn read_stamped<M: Mem + ?Sized>(
        &self,
        mem: &M,
        q: usize,
        range: Range<usize>,
        out: &mut [u8],
    ) {
        let (l, seq) = (self.layout, self.seq);
        let mut at = range.start;
        while at < range.end {
            let (from, end) = if at < INLINE {
                (l.data(q, seq, 0) + at, range.end.min(INLINE))
            } else {
                let (i, j) = (
                    (at - INLINE) / STAMPED_LINE_DATA,
                    (at - INLINE) % STAMPED_LINE_DATA,
                );
                let line_end = INLINE + (i + 1) * STAMPED_LINE_DATA;
                (l.stamp(q, seq, i) + 4 + j, range.end.min(line_end))
            };
            let dst = &mut out[at - range.start..end - range.start];
            mem.view(from, end - at, &mut |b| dst.copy_from_slice(b));
            at = end;
        }
    }

    /// [`Run::poll`] of a reduce or an allreduce.
    #[inline(never)]
    fn poll_reduce<M: Mem + ?Sized>(
        &mut self,
        mem: &M,
        send: &[u8],
        work: &mut [u8],
        reduce: Option<ReduceBytes<'_>>,
    ) -> Step {
        let (l, me, seq, n) = (self.layout, self.me, self.seq, self.layout.n);
        // Every rank gets the result in an allreduce: as the root of a reduce.
        let (root, elem, split) = match self.op {
            Op::Reduce { root, elem, split } => (Some(root), elem, split),
            Op::Allreduce { elem, split } => (None, elem, split),
            _ => unreachable!("coll-sm: poll_reduce on {:?}", self.op),
        };
        let result = root.is_none_or(|r| r == me);
        if self.stage == 0 {
            if root == Some(me) && !split {
                // The root of a short reduce combines its own input from `send`: nobody
                // reads its slot or waits for its post, so it goes straight to combining
                // (two fewer cache-line hand-overs on the critical path).
                self.stage = 1;
            } else {
                return self.publish(mem, &send[..self.len]);
            }
        }
        if self.stage == 1 {
            if !split && !result {
                return self.finish(mem);
            }
            if let Some(w) = self.wait_all(mem, |q| q != me, 1) {
                return w;
            }
            let reduce = reduce.expect("coll-sm: a reduction without its operation");
            if !split {
                self.combine(mem, send, &mut work[..self.len], 0..self.len, reduce);
                return self.finish(mem);
            }
            let mine = share(self.len, elem, n, me);
            if !mine.is_empty() {
                self.combine(mem, send, &mut work[mine.clone()], mine.clone(), reduce);
                mem.write(l.data(me, seq, self.len) + mine.start, &work[mine]);
            }
            self.stage = 2;
            return self.post(mem, 2);
        }
        if !result {
            return self.finish(mem);
        }
        // Copy every other share out as soon as its rank posted it.
        while self.next < n {
            let q = self.next;
            let theirs = share(self.len, elem, n, q);
            if q != me && !theirs.is_empty() {
                if let Some(w) = self.wait_one(mem, q, 2) {
                    return w;
                }
                let dst = &mut work[theirs.clone()];
                mem.view(
                    l.data(q, seq, self.len) + theirs.start,
                    theirs.len(),
                    &mut |b| dst.copy_from_slice(b),
                );
            }
            self.next += 1;
        }
        self.finish(mem)
    }

    /// [`Run::poll`] of an allgather or an alltoall.
    #[inline(never)]
    fn poll_exchange<M: Mem + ?Sized>(&mut self, mem: &M, send: &[u8], work: &mut [u8]) -> Step {
        if self.stage == 0 {
            return self.publish(mem, &send[..self.len]);
        }
        // Block `me` of each slot (alltoall), or the whole slot (allgather), as soon as its
        // rank posted it; this rank's own straight from `send`.
        let (l, me, seq, n, len) = (self.layout, self.me, self.seq, self.layout.n, self.len);
        let all = self.op == Op::Alltoall;
        let block = if all { len / n } else { len };
        let at = if all { me * block } else { 0 };
        while self.next < n {
            let q = self.next;
            let dst = &mut work[q * block..(q + 1) * block];
            if q == me {
                dst.copy_from_slice(&send[at..at + block]);
            } else {
                if let Some(w) = self.wait_one(mem, q, 1) {
                    return w;
                }
                mem.view(l.data(q, seq, len) + at, block, &mut |b| {
                    dst.copy_from_slice(b)
                });
            }
            self.next += 1;
        }
        self.finish(mem)
    }

    /// [`Run::poll`] of a reduce_scatter: post the whole input, then combine this rank's
    /// block (`mine`, bytes of the input) over every rank's input into `work`.
    #[inline(never)]
    fn poll_reduce_scatter<M: Mem + ?Sized>(
        &mut self,
        mem: &M,
        send: &[u8],
        work: &mut [u8],
        mine: Range<usize>,
        reduce: Option<ReduceBytes<'_>>,
    ) -> Step {
        if self.stage == 0 {
            return self.publish(mem, &send[..self.len]);
        }
        if mine.is_empty() {
            // Nothing to combine here (OSU's reduce_scatter of fewer elements than ranks):
            // the others read this rank's input, it needs none of theirs, so it goes on at
            // once as a reduce's leaf does rather than waiting for everyone's post.
            return self.finish(mem);
        }
        let me = self.me;
        if let Some(w) = self.wait_all(mem, |q| q != me, 1) {
            return w;
        }
        let reduce = reduce.expect("coll-sm: a reduction without its operation");
        let dst = &mut work[..mine.len()];
        self.combine(mem, send, dst, mine, reduce);
        self.finish(mem)
    }

    /// [`Run::poll`] of a gather to `root` (every other rank posts its block, the root copies
    /// each out as soon as its rank posted) or a scatter from `root` (the root posts every
    /// block, each other rank copies its own out).
    #[inline(never)]
    fn poll_rooted<M: Mem + ?Sized>(
        &mut self,
        mem: &M,
        root: usize,
        send: &[u8],
        work: &mut [u8],
    ) -> Step {
        let (l, me, seq, n, len) = (self.layout, self.me, self.seq, self.layout.n, self.len);
        let gather = matches!(self.op, Op::Gather { .. });
        if gather != (me == root) {
            // A gather's leaf or a scatter's root: publish, and done (the readers free the
            // slot when they have read it). A scatter's root leaves its own block out when
            // it is long enough for the copy saved to outweigh a second write: no one reads
            // it there.
            if self.stage == 0 {
                let block = len / n;
                if gather || block < SKIP_OWN_BLOCK {
                    return self.publish(mem, &send[..len]);
                }
                return self.publish_except(mem, &send[..len], me * block..(me + 1) * block);
            }
            if !gather {
                // The scatter's root keeps its own block.
                let block = len / n;
                work[..block].copy_from_slice(&send[me * block..(me + 1) * block]);
            }
            return self.finish(mem);
        }
        if !gather {
            // A scatter's reader: its block of the root's slot.
            let block = len / n;
            if let Some(w) = self.wait_one(mem, root, 1) {
                return w;
            }
            let dst = &mut work[..block];
            mem.view(l.data(root, seq, len) + me * block, block, &mut |b| {
                dst.copy_from_slice(b)
            });
            return self.finish(mem);
        }
        // The gather's root: every block as soon as its rank posted, its own from `send`.
        while self.next < n {
            let q = self.next;
            let dst = &mut work[q * len..(q + 1) * len];
            if q == me {
                dst.copy_from_slice(&send[..len]);
            } else {
                if let Some(w) = self.wait_one(mem, q, 1) {
                    return w;
                }
                mem.view(l.data(q, seq, len), len, &mut |b| dst.copy_from_slice(b));
            }
            self.next += 1;
        }
        self.finish(mem)
    }

    /// Offset of rank `q`'s alltoallv header: in its post line when the header fits there
    /// (up to 11 ranks: the reader's miss on `posted` brings it), else at the start of its
    /// data slot.
    fn header_at(&self, q: usize) -> usize {
        let l = self.layout;
        if alltoallv_header(l.n) <= INLINE {
            l.data(q, self.seq, 0)
        } else {
            l.data(q, self.seq, l.slot)
        }
    }

    /// Offset of rank `q`'s alltoallv blocks, `total` bytes: after the header when both fit
    /// in the post line (or the header is in the data slot), else at the data slot's start.
    fn blocks_at(&self, q: usize, total: usize) -> usize {
        let (l, head) = (self.layout, alltoallv_header(self.layout.n));
        if head > INLINE || head + total <= INLINE {
            self.header_at(q) + head
        } else {
            l.data(q, self.seq, l.slot)
        }
    }

    /// The members that have not yet stored what the wait `w` (this run's last
    /// [`Step::Wait`]) needs: its word's rank if the word has not reached `w.want`; for the
    /// barrier's counter, every member that has not arrived (posted stage 1). Empty once
    /// the wait is over. A member that finished the collective is never among them.
    pub fn awaited<M: Mem + ?Sized>(&self, mem: &M, w: Wait) -> Vec<usize> {
        if reached(mem.load(w.off), w.want) {
            return Vec::new();
        }
        match w.from {
            Some(q) => vec![q],
            None => {
                // Where the barrier marks arrivals (see `poll`): a member reaches that
                // value there only by arriving (or by passing the barrier and posting).
                let (arrived, at) = (stage(self.seq, 1), self.seq.wrapping_add(1));
                (0..self.layout.n)
                    .filter(|&q| {
                        q != self.me && !reached(mem.load(self.layout.posted(q, at)), arrived)
                    })
                    .collect()
            }
        }
    }

    /// Store stage `k` in this rank's `posted` word.
    #[inline]
    fn post<M: Mem + ?Sized>(&mut self, mem: &M, k: u32) -> Step {
        self.next = 0;
        let off = self.layout.posted(self.me, self.seq);
        mem.store(off, stage(self.seq, k));
        Step::Posted {
            off,
            sleepers: self.layout.sleepers(self.me, self.seq),
            release: false,
        }
    }

    /// Say this rank read all it needed of this collective; done.
    fn finish<M: Mem + ?Sized>(&mut self, mem: &M) -> Step {
        mem.store(self.layout.freed(self.me), self.seq);
        self.stage = u8::MAX;
        Step::Done
    }

    /// Wait for rank `q`'s stage `k`.
    fn wait_one<M: Mem + ?Sized>(&self, mem: &M, q: usize, k: u32) -> Option<Step> {
        let (off, want) = (self.layout.posted(q, self.seq), stage(self.seq, k));
        (!reached(mem.load(off), want)).then(|| {
            // A stamped post's lines, for the waiter to poll along (see the module doc).
            let lines = if k == 1 && self.stamped > 0 {
                Lines {
                    at: self.layout.stamp(q, self.seq, 0),
                    count: self.stamped,
                }
            } else {
                Lines::default()
            };
            Step::Wait(Wait {
                off,
                want,
                sleepers: self.layout.sleepers(q, self.seq),
                from: Some(q),
                lines,
            })
        })
    }

    /// Wait for stage `k` of every rank `which` selects (from `self.next` on).
    fn wait_all<M: Mem + ?Sized>(
        &mut self,
        mem: &M,
        which: impl Fn(usize) -> bool,
        k: u32,
    ) -> Option<Step> {
        while self.next < self.layout.n {
            if which(self.next) {
                if let Some(w) = self.wait_one(mem, self.next, k) {
                    return Some(w);
                }
            }
            self.next += 1;
        }
        None
    }

    /// Before writing this rank's slot: wait until every other rank is done with the
    /// collective that used it last (`seq - 2`).
    fn wait_freed<M: Mem + ?Sized>(&mut self, mem: &M) -> Option<Step> {
        let want = self.seq.wrapping_sub(2);
        if self.synced.is_some_and(|c| reached(c, want)) {
            // Every other member finished every collective up to c >= seq - 2 (the last
            // user of this slot; when seq - 2 is a barrier, which uses no slot, an earlier
            // one), so none still reads this slot.
            return None;
        }
        while self.next < self.layout.n {
            let q = self.next;
            if q != self.me {
                let off = self.layout.freed(q);
                if !reached(mem.load(off), want) {
                    return Some(Step::Wait(Wait {
                        off,
                        want,
                        sleepers: self.layout.freed_sleepers(q),
                        from: Some(q),
                        lines: Lines::default(),
                    }));
                }
            }
            self.next += 1;
        }
        self.next = 0;
        None
    }

    /// `dst = x0 op x1 op ... op x(n-1)` over bytes `range` of every rank's input (this
    /// rank's from `send`, the others' from their slots); `dst` is `range.len()` bytes.
    fn combine<M: Mem + ?Sized>(
        &self,
        mem: &M,
        send: &[u8],
        dst: &mut [u8],
        range: Range<usize>,
        reduce: ReduceBytes<'_>,
    ) {
        let (l, me, seq, len) = (self.layout, self.me, self.seq, self.len);
        if range.is_empty() {
            return;
        }
        if l.n == 1 {
            dst.copy_from_slice(&send[range]);
            return;
        }
        // Stamped inputs are copied out of their lines first (the operation wants whole
        // elements in one run); at most STAMPED bytes each, on the stack.
        // Made (and zeroed) only for stamped inputs.
        let mut bufs = if self.stamped > 0 {
            Some((Stage([0; STAMPED]), Stage([0; STAMPED])))
        } else {
            None
        };
        let (mut a, mut b) = match &mut bufs {
            Some((a, b)) => (Some(a), Some(b)),
            None => (None, None),
        };
        let operand = |q: usize, buf: Option<&mut Stage>, f: &mut dyn FnMut(&[u8])| {
            if q == me {
                f(&send[range.clone()]);
            } else if let Some(buf) = buf {
                let buf = &mut buf.0[..range.len()];
                self.read_stamped(mem, q, range.clone(), buf);
                f(buf);
            } else {
                mem.view(l.data(q, seq, len) + range.start, range.len(), f);
            }
        };
        operand(0, a.as_deref_mut(), &mut |x0| {
            operand(1, b.as_deref_mut(), &mut |x1| {
                reduce(dst, x1, Some(x0), false)
            })
        });
        for q in 2..l.n {
            operand(q, a.as_deref_mut(), &mut |xq| reduce(dst, xq, None, false));
        }
    }
}

/// A stamped input copied out of its lines, aligned for any element a reduction combines.
#[repr(C, align(16))]
struct Stage([u8; STAMPED]);

#[cfg(test)]
mod tests;
