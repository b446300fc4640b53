//! Accumulates, fetch-and-ops and compare-and-swaps of one contiguous run that the *target*
//! applies for an origin of its node, through a slot of the target's shared object
//! ([`crate::lockword`]): one slot per origin rank, after the object's first page.
//!
//! The origin writes the request into its slot's request line and posts it; the target's
//! progress (any rmca call that waits: OSU's target sits in a barrier) sees it, claims the
//! slot, applies the operation to its own memory under its accumulate word (so it stays
//! atomic with respect to the accumulates that come by CMA or as messages), and publishes
//! the outcome in the slot's answer line: the previous contents, the status and the
//! request's number, written together at the end. The origin polls only the answer line and
//! the target writes it once, so a request costs a few cache-line transfers (the request
//! line to the target and back for its claim, the answer line to the origin), where the
//! origin's own path ([`crate::direct`]) costs two CMA system calls (0.8-1 us each on this
//! VM). An object of up to [`SCAN_SLOTS`] slots is scanned at each progress pass (a load of
//! each request line, cached at the target until an origin writes it); a larger one keeps a
//! count of the posted requests, so that an idle pass loads one word.
//!
//! A target that computes outside rmca does not answer: once [`Wait`]'s bound passes, the
//! origin claims the slot back itself (one compare-and-swap on the request line's state
//! decides who applies it: exactly one does) and applies the operation by CMA, and skips the
//! slots of that target for a while ([`Policy`]).
//!
//! An origin has at most one request in its slot, and waits for it before the call
//! returns, so the slot needs no queue and the origin's operations stay in order.
//!
//! The protocol works on any array of atomic words ([`Cells`]: the mapped object in
//! production, a plain array in the tests); time is passed in ([`Wait::step`]).

use std::sync::atomic::{AtomicU64, Ordering};

use rmca_framework::osc::{accumulate_with, AccOp, Elem, HostAccumulate, OscError};
use rmca_osc_am::engine::Segment;
use rmca_osc_am::lockword::{acc_lock, acc_unlock};

/// Words of a shared object, by index.
pub trait Cells {
    /// Word `i` (the caller keeps within the object's length).
    fn cell(&self, i: usize) -> &AtomicU64;
}

impl Cells for [AtomicU64] {
    fn cell(&self, i: usize) -> &AtomicU64 {
        &self[i]
    }
}

impl Cells for Vec<AtomicU64> {
    fn cell(&self, i: usize) -> &AtomicU64 {
        &self[i]
    }
}

/// The request line's state (its low byte; the request's number above it): nothing posted
/// yet.
pub const FREE: u64 = 0;
/// Posted: the request is written; the target or the origin may claim it.
pub const POSTED: u64 = 1;
/// The target claimed it (it publishes the outcome in the answer line).
pub const SERVING: u64 = 2;
/// The origin claimed it back (applies it by CMA).
pub const ORIGIN: u64 = 4;

/// Bytes of data (and of result) a slot holds; larger operations go by CMA. An accumulate of
/// 256 B took 1.5-2.2 us through the slot against 2.5-3.0 by CMA, of 512 B about the same
/// either way, of 1 KiB 2.8-8 against 2.7-2.9 (OSU acc_latency and get_acc_latency,
/// `-w create`, load 5, 2026-11-30, when the data crossed in the request line's protocol of
/// before).
pub const CAPACITY: usize = 256;
/// Words of a slot: the request line, the answer line and the data.
pub const STRIDE: usize = 2 * LINE + CAPACITY / 8;
/// Words of a cache line.
const LINE: usize = 8;
/// Request line words: state (with the request's number), request (kind, operation,
/// element, fetch, length), target offset, compare-and-swap's compare and value.
const STATE: usize = 0;
const REQ: usize = 1;
const OFF: usize = 2;
const COMPARE: usize = 3;
const VALUE: usize = 4;
/// Answer line words: the number of the request answered last with its status in the low
/// byte, and a compare-and-swap's previous value.
const DONE: usize = LINE;
const OLD: usize = LINE + 1;
/// The data: the origin's, then (a fetch) the previous contents.
const DATA: usize = 2 * LINE;

/// Objects of at most this many slots are scanned at each pass of the target; larger ones
/// count their posted requests (an idle pass then loads one word, not one per origin).
pub const SCAN_SLOTS: usize = 16;

const KIND_ACC: u64 = 1;
const KIND_CAS: u64 = 2;

/// Status codes the target writes (0: applied).
const ST_OK: u64 = 0;
const ST_OP: u64 = 1;
const ST_ARG: u64 = 2;
const ST_RANGE: u64 = 3;
const ST_BAD: u64 = 4;

/// Where the slots are in an object: the pending count's word, the first slot's word and
/// the number of slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Area {
    /// The word counting posted requests not claimed yet (above [`SCAN_SLOTS`] slots: the
    /// target then reads only it while nothing is posted).
    pub pending: usize,
    /// Word index of slot 0.
    pub first: usize,
    /// Slots (one per origin rank; 0: none).
    pub slots: usize,
}

impl Area {
    fn at(&self, slot: usize) -> usize {
        self.first + slot * STRIDE
    }

    /// Words the object needs from `first` on.
    pub fn words(&self) -> usize {
        self.first + self.slots * STRIDE
    }

    /// Posted requests are counted (more slots than [`SCAN_SLOTS`]).
    fn counted(&self) -> bool {
        self.slots > SCAN_SLOTS
    }
}

/// A request an origin posts.
#[derive(Clone, Copy, Debug)]
pub enum Request<'a> {
    /// `target[off..off+len] = target op data`, the previous contents returned with
    /// `fetch` (`data` empty for [`AccOp::NoOp`], else `len` bytes).
    Acc {
        /// Offset in the target's memory.
        off: u64,
        /// Bytes of target memory.
        len: usize,
        /// The operation.
        op: AccOp,
        /// The element type.
        elem: Elem,
        /// The origin's data.
        data: &'a [u8],
        /// Return the previous contents.
        fetch: bool,
    },
    /// Compare-and-swap of the element at `off` (at most 8 bytes).
    Cas {
        /// Offset in the target's memory.
        off: u64,
        /// The element type.
        elem: Elem,
        /// Compared with the element, bit for bit.
        compare: &'a [u8],
        /// Stored if equal.
        value: &'a [u8],
    },
}

impl Request<'_> {
    /// Does it fit a slot?
    pub fn fits(&self) -> bool {
        match *self {
            Request::Acc { len, data, .. } => len <= CAPACITY && data.len() <= CAPACITY,
            Request::Cas { elem, .. } => elem.size() <= 8,
        }
    }
}

fn word_of(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..b.len()].copy_from_slice(b);
    u64::from_ne_bytes(w)
}

/// Copy `bytes` into the words from `at` on (the last one padded).
fn store_bytes(c: &(impl Cells + ?Sized), at: usize, bytes: &[u8]) {
    for (i, chunk) in bytes.chunks(8).enumerate() {
        c.cell(at + i).store(word_of(chunk), Ordering::Relaxed);
    }
}

/// Copy the words from `at` on into `out`.
fn load_bytes(c: &(impl Cells + ?Sized), at: usize, out: &mut [u8]) {
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let w = c.cell(at + i).load(Ordering::Relaxed).to_ne_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// Write `req` into slot `slot` (the origin's own, nothing of its in flight) and post it:
/// the [`Wait`] for its answer, started at `now` with `bound`.
pub fn post(
    c: &(impl Cells + ?Sized),
    area: Area,
    slot: usize,
    req: &Request<'_>,
    now: u64,
    bound: u64,
) -> Wait {
    let at = area.at(slot);
    // The request's number: one past the answer's (a line the origin read last, so no
    // transfer). A request claimed back leaves the answer as it was: its number is reused,
    // which is fine, only one is in flight.
    let seq = (c.cell(at + DONE).load(Ordering::Relaxed) >> 8).wrapping_add(1) & SEQ_MASK;
    match *req {
        Request::Acc {
            off,
            len,
            op,
            elem,
            data,
            fetch,
        } => {
            let r = KIND_ACC
                | u64::from(op as u8) << 8
                | u64::from(elem as u8) << 16
                | u64::from(fetch) << 24
                | (len as u64) << 32;
            c.cell(at + REQ).store(r, Ordering::Relaxed);
            c.cell(at + OFF).store(off, Ordering::Relaxed);
            store_bytes(c, at + DATA, data);
        }
        Request::Cas {
            off,
            elem,
            compare,
            value,
        } => {
            let r = KIND_CAS | u64::from(elem as u8) << 16 | (elem.size() as u64) << 32;
            c.cell(at + REQ).store(r, Ordering::Relaxed);
            c.cell(at + OFF).store(off, Ordering::Relaxed);
            c.cell(at + COMPARE)
                .store(word_of(compare), Ordering::Relaxed);
            c.cell(at + VALUE).store(word_of(value), Ordering::Relaxed);
        }
    }
    if area.counted() {
        // Counted before it is posted: the count is never below the posted slots, so a
        // target that reads 0 has nothing to find.
        c.cell(area.pending).fetch_add(1, Ordering::AcqRel);
    }
    c.cell(at + STATE)
        .store(seq << 8 | POSTED, Ordering::Release);
    Wait {
        start: now,
        bound,
        seq,
        taken: false,
    }
}

/// Request numbers wrap within 56 bits (the answer word's status byte below them).
const SEQ_MASK: u64 = (1 << 56) - 1;

/// The answer word of slot `slot` (what [`Wait::step`] looks at): the only word the waiting
/// origin polls.
pub fn answer(c: &(impl Cells + ?Sized), area: Area, slot: usize) -> u64 {
    c.cell(area.at(slot) + DONE).load(Ordering::Acquire)
}

/// The origin claims its posted request back (the target has not taken it): true if it
/// now applies it itself, false if the target took it first (then wait for its answer:
/// [`Wait::taken`]).
pub fn reclaim(c: &(impl Cells + ?Sized), area: Area, slot: usize, w: &Wait) -> bool {
    let posted = w.seq << 8 | POSTED;
    let ok = c
        .cell(area.at(slot) + STATE)
        .compare_exchange(
            posted,
            w.seq << 8 | ORIGIN,
            Ordering::Acquire,
            Ordering::Acquire,
        )
        .is_ok();
    if ok && area.counted() {
        c.cell(area.pending).fetch_sub(1, Ordering::AcqRel);
    }
    ok
}

/// The outcome of a request the target answered (`answer`, as [`Wait::step`] saw it): its
/// previous contents into `old` (a fetch's `len` bytes, a compare-and-swap's element), or
/// the target's refusal.
pub fn collect(
    c: &(impl Cells + ?Sized),
    area: Area,
    slot: usize,
    answer: u64,
    old: Option<&mut [u8]>,
) -> Result<(), OscError> {
    let at = area.at(slot);
    match answer & 0xff {
        ST_OK => {
            if let Some(o) = old {
                if c.cell(at + REQ).load(Ordering::Relaxed) & 0xff == KIND_CAS {
                    let w = c.cell(at + OLD).load(Ordering::Relaxed).to_ne_bytes();
                    let n = o.len().min(8);
                    o[..n].copy_from_slice(&w[..n]);
                } else {
                    load_bytes(c, at + DATA, o);
                }
            }
            Ok(())
        }
        ST_OP => Err(OscError::Op(
            "accumulate: the target's arithmetic refused the operation on this type".into(),
        )),
        ST_RANGE => Err(OscError::Range(
            "accumulate: outside the target's memory".into(),
        )),
        ST_ARG => Err(OscError::Arg("accumulate: refused by the target".into())),
        _ => Err(OscError::Transport(
            "osc-rdma: the target could not read an accumulate request".into(),
        )),
    }
}

/// The target's pass: claim and apply every request posted in its slots (nothing but one
/// load per slot, or of the pending count above [`SCAN_SLOTS`], when none is), under its
/// accumulate word `acc`, to `mem` (its window's memory, offsets from its start). Requests
/// are checked against `mem` (a refusal, nothing written, goes back as the answer's
/// status). Returns how many it applied.
pub fn serve<M: Segment>(
    c: &(impl Cells + ?Sized),
    area: Area,
    acc: &AtomicU64,
    mem: &mut M,
    host: Option<HostAccumulate>,
    scratch: &mut Vec<u8>,
) -> usize {
    if area.slots == 0 {
        return 0;
    }
    if area.counted() && c.cell(area.pending).load(Ordering::Acquire) == 0 {
        return 0;
    }
    let mut n = 0;
    for slot in 0..area.slots {
        let at = area.at(slot);
        let st = c.cell(at + STATE);
        let s = st.load(Ordering::Acquire);
        if s & 0xff != POSTED
            || st
                .compare_exchange(s, s & !0xff | SERVING, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        acc_lock(acc);
        let status = apply(c, at, mem, host, scratch);
        acc_unlock(acc);
        // The answer last, in one store: the origin polls this word only.
        c.cell(at + DONE)
            .store(s & !0xff | status, Ordering::Release);
        if area.counted() {
            // (After the answer: the count only has to stay at or above the posted slots.)
            c.cell(area.pending).fetch_sub(1, Ordering::AcqRel);
        }
        n += 1;
    }
    n
}

/// Apply the request at word `at` (held: the target's accumulate word); its status.
fn apply<M: Segment>(
    c: &(impl Cells + ?Sized),
    at: usize,
    mem: &mut M,
    host: Option<HostAccumulate>,
    scratch: &mut Vec<u8>,
) -> u64 {
    let req = c.cell(at + REQ).load(Ordering::Relaxed);
    let off = c.cell(at + OFF).load(Ordering::Relaxed);
    let (kind, op, elem) = (req & 0xff, (req >> 8) as u8, (req >> 16) as u8);
    let fetch = (req >> 24) & 0xff != 0;
    let len = (req >> 32) as usize;
    let (Some(op), Some(elem)) = (AccOp::from_u8(op), Elem::from_u8(elem)) else {
        return ST_BAD;
    };
    let Ok(off) = usize::try_from(off) else {
        return ST_RANGE;
    };
    if off.checked_add(len).is_none_or(|end| end > mem.len()) {
        return ST_RANGE;
    }
    match kind {
        KIND_CAS => {
            if len != elem.size() || len > 8 {
                return ST_ARG;
            }
            let compare = c.cell(at + COMPARE).load(Ordering::Relaxed).to_ne_bytes();
            let value = c.cell(at + VALUE).load(Ordering::Relaxed).to_ne_bytes();
            let mut old = [0u8; 8];
            old[..len].copy_from_slice(mem.read(off, len));
            if old[..len] == compare[..len] {
                mem.write(off, &value[..len]);
            }
            c.cell(at + OLD)
                .store(u64::from_ne_bytes(old), Ordering::Relaxed);
            ST_OK
        }
        KIND_ACC => {
            if len > CAPACITY || !elem.supports(op) || !len.is_multiple_of(elem.size()) {
                return ST_ARG;
            }
            // The origin's data (none for MPI_NO_OP), then the previous contents after it.
            let dlen = if op == AccOp::NoOp { 0 } else { len };
            scratch.clear();
            scratch.resize(dlen + if fetch { len } else { 0 }, 0);
            let (data, prev) = scratch.split_at_mut(dlen);
            load_bytes(c, at + DATA, data);
            if fetch {
                prev.copy_from_slice(mem.read(off, len));
            }
            if op != AccOp::NoOp {
                let r = mem.modify(off, len, |t| accumulate_with(op, elem, t, data, host));
                match r {
                    Ok(()) => {}
                    Err(OscError::Op(_)) => return ST_OP,
                    Err(_) => return ST_ARG,
                }
            }
            if fetch {
                store_bytes(c, at + DATA, prev);
            }
            ST_OK
        }
        _ => ST_BAD,
    }
}

/// An accumulate a process applies to its own memory ([`acc_here`]).
#[derive(Clone, Copy, Debug)]
pub struct Here<'a> {
    /// Offset in the memory.
    pub off: usize,
    /// Bytes.
    pub len: usize,
    /// The operation.
    pub op: AccOp,
    /// The element type.
    pub elem: Elem,
    /// The origin's data (`len` bytes; none for [`AccOp::NoOp`]).
    pub data: &'a [u8],
    /// The host's arithmetic.
    pub host: Option<HostAccumulate>,
}

/// An accumulate on this process's own memory `mem` (checked by the caller: in range, whole
/// elements, data of the length), in place under its accumulate word `acc`: no loopback
/// message. The previous contents into `old` when given, written only if it succeeds.
pub fn acc_here<M: Segment>(
    acc: &AtomicU64,
    mem: &mut M,
    h: Here<'_>,
    old: Option<&mut [u8]>,
    scratch: &mut Vec<u8>,
) -> Result<(), OscError> {
    if h.off.checked_add(h.len).is_none_or(|end| end > mem.len()) {
        return Err(OscError::Range(
            "accumulate: outside the window's memory".into(),
        ));
    }
    // The origin data may lie in the window itself (MPI forbids only conflicting accesses):
    // copied first when it overlaps the target bytes, which are written through.
    let (t, d) = (mem.read(h.off, h.len).as_ptr_range(), h.data.as_ptr_range());
    let copy;
    let src = if d.start < t.end && t.start < d.end {
        copy = h.data.to_vec();
        &copy[..]
    } else {
        h.data
    };
    acc_lock(acc);
    scratch.clear();
    if old.is_some() {
        scratch.extend_from_slice(mem.read(h.off, h.len));
    }
    let r = if h.op == AccOp::NoOp {
        Ok(())
    } else {
        mem.modify(h.off, h.len, |t| {
            accumulate_with(h.op, h.elem, t, src, h.host)
        })
    };
    acc_unlock(acc);
    if let (Ok(()), Some(o)) = (&r, old) {
        o.copy_from_slice(scratch);
    }
    r
}

/// A compare-and-swap of the element at `off` of this process's own memory (`old`'s
/// length, at most 8 bytes), under its accumulate word.
pub fn cas_here<M: Segment>(
    acc: &AtomicU64,
    mem: &mut M,
    off: usize,
    compare: &[u8],
    value: &[u8],
    old: &mut [u8],
) -> Result<(), OscError> {
    let n = old.len();
    if n > 8 || compare.len() != n || value.len() != n {
        return Err(OscError::Arg("compare_and_swap: one element each".into()));
    }
    if off.checked_add(n).is_none_or(|end| end > mem.len()) {
        return Err(OscError::Range(
            "compare_and_swap: outside the window's memory".into(),
        ));
    }
    acc_lock(acc);
    old.copy_from_slice(mem.read(off, n));
    if old == compare {
        mem.write(off, value);
    }
    acc_unlock(acc);
    Ok(())
}

/// What the waiting origin does next ([`Wait::step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Keep waiting (the target is applying it, or may still take it).
    Wait,
    /// The bound passed with the request perhaps untaken: try to claim it back
    /// ([`reclaim`]).
    Reclaim,
    /// Answered: [`collect`] the outcome.
    Collect,
    /// The answer word holds a number no request of this origin's had (another process
    /// wrote it).
    Broken,
}

/// An origin's wait for its posted request ([`post`]), from `start` (nanoseconds, any
/// clock) for at most `bound` before it claims it back.
#[derive(Clone, Copy, Debug)]
pub struct Wait {
    start: u64,
    bound: u64,
    /// The request's number, which its answer carries.
    seq: u64,
    /// The target claimed it (a claim back failed): wait for the answer whatever the time.
    taken: bool,
}

impl Wait {
    /// Given the slot's [`answer`] word at time `now`.
    pub fn step(&self, answer: u64, now: u64) -> Step {
        match answer >> 8 {
            s if s == self.seq => Step::Collect,
            // The answer to the request before (or to none yet).
            s if s.wrapping_add(1) & SEQ_MASK == self.seq => {
                if !self.taken && now.saturating_sub(self.start) >= self.bound {
                    Step::Reclaim
                } else {
                    Step::Wait
                }
            }
            _ => Step::Broken,
        }
    }

    /// The claim back failed: the target applies it.
    pub fn taken(self) -> Self {
        Self {
            taken: true,
            ..self
        }
    }
}

/// The bound in force for a job whose waits are `mode` (the framework's wait mode,
/// [`rmca_framework::progress::wait_mode`]), `configured` by `osc_rdma_acc_slot_ns`: 0 (never
/// posted) when waits yield or sleep (`mpi_wait_mode` yield or block, which `auto` picks on
/// an oversubscribed node): a waiting target then gives its core away and seldom takes a
/// request within the bound, so nearly every post would cost the whole bound before the
/// claim back and the CMA path the origin takes anyway.
pub fn bound_for(configured: u64, mode: rmca_framework::progress::WaitMode) -> u64 {
    use rmca_framework::progress::WaitMode;
    match mode {
        WaitMode::Yield | WaitMode::Block => 0,
        WaitMode::Spin | WaitMode::Auto => configured,
    }
}

/// Which targets an origin posts to: after it had to claim a request back (the target
/// computes, or was descheduled on a loaded node), the next `skip` operations to that target
/// go by CMA straight away, then a request is posted again. (A heartbeat the target wrote at
/// each pass, to post again as soon as it was back in its progress, measured no gain: the
/// claim backs of a 200,000-operation run stayed at about 2,500; it cost a store to a shared
/// line in every progress pass, and was removed.)
#[derive(Debug)]
pub struct Policy {
    skip: u32,
    skipping: Vec<u32>,
}

impl Policy {
    /// For `n` targets.
    pub fn new(n: usize, skip: u32) -> Self {
        Self {
            skip,
            skipping: vec![0; n],
        }
    }

    /// Post the next operation to `target`?
    pub fn post(&mut self, target: usize) -> bool {
        match self.skipping.get_mut(target) {
            Some(0) => true,
            Some(s) => {
                *s -= 1;
                false
            }
            None => false,
        }
    }

    /// The last request to `target` had to be claimed back.
    pub fn reclaimed(&mut self, target: usize) {
        if let Some(s) = self.skipping.get_mut(target) {
            *s = self.skip;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Scanned (3 slots) and counted (more than [`SCAN_SLOTS`]) objects.
    const AREA: Area = Area {
        pending: 0,
        first: 8,
        slots: 3,
    };
    const BIG: Area = Area {
        pending: 0,
        first: 8,
        slots: SCAN_SLOTS + 4,
    };

    fn cells_for(area: Area) -> Vec<AtomicU64> {
        (0..area.words()).map(|_| AtomicU64::new(0)).collect()
    }

    fn cells() -> Vec<AtomicU64> {
        cells_for(AREA)
    }

    #[test]
    fn no_slots_when_waits_yield_or_sleep() {
        use rmca_framework::progress::WaitMode;
        assert_eq!(bound_for(4000, WaitMode::Spin), 4000);
        assert_eq!(bound_for(4000, WaitMode::Auto), 4000);
        assert_eq!(bound_for(4000, WaitMode::Yield), 0);
        assert_eq!(bound_for(4000, WaitMode::Block), 0);
        assert_eq!(bound_for(0, WaitMode::Spin), 0);
    }

    fn add(off: u64, v: &[u8; 8]) -> Request<'_> {
        Request::Acc {
            off,
            len: 8,
            op: AccOp::Sum,
            elem: Elem::U64,
            data: v,
            fetch: true,
        }
    }

    /// Post `req` in `slot`, let the target serve, collect the answer.
    fn through(
        c: &[AtomicU64],
        area: Area,
        slot: usize,
        req: &Request<'_>,
        mem: &mut Vec<u8>,
        old: Option<&mut [u8]>,
    ) -> Result<(), OscError> {
        let acc = AtomicU64::new(0);
        let w = post(c, area, slot, req, 0, 100);
        assert_eq!(serve(c, area, &acc, mem, None, &mut Vec::new()), 1);
        assert_eq!(acc.load(Ordering::Relaxed), 0, "word given back");
        let a = answer(c, area, slot);
        assert_eq!(w.step(a, 1_000_000), Step::Collect);
        collect(c, area, slot, a, old)
    }

    #[test]
    fn a_request_served_by_the_target_fetches_and_combines() {
        for area in [AREA, BIG] {
            let c = cells_for(area);
            let acc = AtomicU64::new(0);
            let mut mem: Vec<u8> = [5u64, 7].iter().flat_map(|v| v.to_ne_bytes()).collect();
            let mut scratch = Vec::new();
            assert_eq!(serve(&*c, area, &acc, &mut mem, None, &mut scratch), 0);
            let w = post(&*c, area, 1, &add(8, &3u64.to_ne_bytes()), 0, 100);
            assert_eq!(w.step(answer(&*c, area, 1), 10), Step::Wait);
            assert_eq!(serve(&*c, area, &acc, &mut mem, None, &mut scratch), 1);
            let a = answer(&*c, area, 1);
            assert_eq!(w.step(a, 10), Step::Collect);
            assert!(
                !reclaim(&*c, area, 1, &w),
                "taken: not the origin's any more"
            );
            let mut old = [0u8; 8];
            collect(&*c, area, 1, a, Some(&mut old)).unwrap();
            assert_eq!(u64::from_ne_bytes(old), 7);
            assert_eq!(mem[8..], 10u64.to_ne_bytes());
            assert_eq!(c[0].load(Ordering::Relaxed), 0, "nothing pending");
            assert_eq!(acc.load(Ordering::Relaxed), 0, "word given back");
            assert_eq!(
                serve(&*c, area, &acc, &mut mem, None, &mut scratch),
                0,
                "applied once"
            );
            // A compare-and-swap of one byte: equal, swapped; not equal, kept.
            for (cmp, want_old, want_now) in [(9u8, 0, 0), (0, 0, 4)] {
                let cas = Request::Cas {
                    off: 3,
                    elem: Elem::U8,
                    compare: &[cmp],
                    value: &[4],
                };
                let mut o = [0xffu8];
                through(&c, area, 0, &cas, &mut mem, Some(&mut o)).unwrap();
                assert_eq!((o[0], mem[3]), (want_old, want_now));
            }
            // MPI_NO_OP reads; MPI_REPLACE of an odd length writes only its bytes.
            let noop = Request::Acc {
                off: 8,
                len: 8,
                op: AccOp::NoOp,
                elem: Elem::U64,
                data: &[],
                fetch: true,
            };
            through(&c, area, 2, &noop, &mut mem, Some(&mut old)).unwrap();
            assert_eq!(u64::from_ne_bytes(old), 10);
            let replace = Request::Acc {
                off: 9,
                len: 3,
                op: AccOp::Replace,
                elem: Elem::U8,
                data: &[1, 2, 3],
                fetch: false,
            };
            through(&c, area, 2, &replace, &mut mem, None).unwrap();
            assert_eq!(mem[8..13], [10, 1, 2, 3, 0]);
            // A full slot's fetch: every byte of the data and of the result crosses.
            let mut big: Vec<u8> = (0..CAPACITY).map(|i| i as u8).collect();
            let ones = vec![1u8; CAPACITY];
            let full = Request::Acc {
                off: 0,
                len: CAPACITY,
                op: AccOp::Sum,
                elem: Elem::U8,
                data: &ones,
                fetch: true,
            };
            let mut prev = vec![0u8; CAPACITY];
            through(&c, area, 1, &full, &mut big, Some(&mut prev)).unwrap();
            assert!(prev.iter().enumerate().all(|(i, &b)| b == i as u8));
            assert!(big
                .iter()
                .enumerate()
                .all(|(i, &b)| b == (i as u8).wrapping_add(1)));
        }
    }

    #[test]
    fn an_idle_target_reads_the_slots_only_while_nothing_is_counted() {
        // Counted: with a count of 0 the slots are not looked at, even one holding garbage
        // that looks posted.
        let c = cells_for(BIG);
        c[BIG.first + STATE].store(7 << 8 | POSTED, Ordering::Relaxed);
        let mut mem = vec![0u8; 8];
        let acc = AtomicU64::new(0);
        assert_eq!(serve(&*c, BIG, &acc, &mut mem, None, &mut Vec::new()), 0);
        // Scanned: no count kept; a request is found by its state alone.
        let c = cells();
        post(&*c, AREA, 2, &add(0, &[1; 8]), 0, 100);
        assert_eq!(c[0].load(Ordering::Relaxed), 0, "no count");
        assert_eq!(serve(&*c, AREA, &acc, &mut mem, None, &mut Vec::new()), 1);
    }

    #[test]
    fn bad_requests_are_refused_with_their_class_and_nothing_written() {
        let c = cells();
        let acc = AtomicU64::new(0);
        let mut mem = vec![1u8; 32];
        let long_double = [2u8; 16];
        type Class = fn(&OscError) -> bool;
        let cases: [(Request<'_>, Class); 3] = [
            // Past the end of the target's memory.
            (add(28, &[1; 8]), |e| matches!(e, OscError::Range(_))),
            // Arithmetic the target has no host for.
            (
                Request::Acc {
                    off: 0,
                    len: 16,
                    op: AccOp::Sum,
                    elem: Elem::LongDouble,
                    data: &long_double,
                    fetch: false,
                },
                |e| matches!(e, OscError::Op(_)),
            ),
            // Not whole elements.
            (
                Request::Acc {
                    off: 0,
                    len: 6,
                    op: AccOp::Sum,
                    elem: Elem::U32,
                    data: &[1; 6],
                    fetch: false,
                },
                |e| matches!(e, OscError::Arg(_)),
            ),
        ];
        for (req, class) in cases {
            let e = through(&c, AREA, 0, &req, &mut mem, None).unwrap_err();
            assert!(class(&e), "{e:?} for {req:?}");
            assert_eq!(mem, vec![1u8; 32], "nothing written");
        }
        // Garbage in the request word.
        let w = post(&*c, AREA, 0, &add(0, &[1; 8]), 0, 100);
        c[AREA.first + REQ].store(0xffff_ffff_ffff_ff01, Ordering::Relaxed);
        serve(&*c, AREA, &acc, &mut mem, None, &mut Vec::new());
        let a = answer(&*c, AREA, 0);
        assert_eq!(w.step(a, 0), Step::Collect);
        assert!(matches!(
            collect(&*c, AREA, 0, a, None),
            Err(OscError::Transport(_) | OscError::Range(_))
        ));
        assert_eq!(mem, vec![1u8; 32]);
        assert_eq!(acc.load(Ordering::Relaxed), 0);
        // An answer word another process overwrote: no request of this origin's has that
        // number.
        let w = post(&*c, AREA, 1, &add(0, &[1; 8]), 0, 100);
        c[AREA.first + STRIDE + DONE].store(99 << 8, Ordering::Relaxed);
        assert_eq!(w.step(answer(&*c, AREA, 1), 0), Step::Broken);
    }

    #[test]
    fn the_origin_reclaims_an_untaken_request_once_the_bound_passes() {
        for area in [AREA, BIG] {
            let c = cells_for(area);
            let w = post(&*c, area, 2, &add(0, &[1; 8]), 100, 50);
            let a = answer(&*c, area, 2);
            assert_eq!(w.step(a, 120), Step::Wait);
            assert_eq!(w.step(a, 150), Step::Reclaim);
            assert_eq!(w.taken().step(a, 10_000), Step::Wait, "taken: wait for it");
            assert!(reclaim(&*c, area, 2, &w));
            assert!(!reclaim(&*c, area, 2, &w), "once");
            assert_eq!(c[0].load(Ordering::Relaxed), 0, "no longer pending");
            let mut mem = vec![0u8; 8];
            let acc = AtomicU64::new(0);
            assert_eq!(
                serve(&*c, area, &acc, &mut mem, None, &mut Vec::new()),
                0,
                "the target does not apply it too"
            );
            assert_eq!(mem, vec![0u8; 8]);
            // The next request (its number reused: the answer never came) goes through.
            let mut old = [9u8; 8];
            through(&c, area, 2, &add(0, &[1; 8]), &mut mem, Some(&mut old)).unwrap();
            assert_eq!((old, mem.as_slice()), ([0; 8], &[1u8; 8][..]));
        }
        let mut p = Policy::new(2, 2);
        assert!(p.post(1));
        p.reclaimed(1);
        assert!(!p.post(1) && !p.post(1), "skipped twice");
        assert!(p.post(1) && p.post(0));
        assert!(!p.post(7), "no such target");
    }

    /// One step of the interleaving: origin `o` posts, waits (the clock advanced by the
    /// given nanoseconds), reclaims; the target serves; a third party applies a fetch-add
    /// by itself under the word (as CMA does).
    #[derive(Clone, Debug)]
    enum Ev {
        /// (The last: whether an idle origin starts another operation.)
        Origin(usize, u64, bool),
        Target,
        Direct,
    }

    /// An origin's progress through one fetch-and-add.
    #[derive(Clone, Copy, Debug)]
    enum O {
        Idle,
        Posted(Wait),
        Mine,
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Origins fetch-and-adding to one counter through their slots, a target serving at
        /// random moments, origins reclaiming when their bound passes, and a direct
        /// accumulator: no update is lost or applied twice, every fetched value is seen
        /// once, and each origin's fetches increase (its operations stay in order); in a
        /// scanned and in a counted object.
        #[test]
        fn no_lost_or_double_update_under_any_interleaving(
            counted in any::<bool>(),
            evs in proptest::collection::vec(
                prop_oneof![
                    (0usize..3, 0u64..40).prop_map(|(o, d)| Ev::Origin(o, d, true)),
                    Just(Ev::Target),
                    Just(Ev::Direct),
                ],
                1..200,
            )
        ) {
            let area = if counted { BIG } else { AREA };
            let c = cells_for(area);
            let acc = AtomicU64::new(0);
            let mut mem = vec![0u8; 8];
            let mut scratch = Vec::new();
            let mut now = 0u64;
            let mut o = [O::Idle; 3];
            let mut seen: Vec<Vec<u64>> = vec![Vec::new(); 3];
            let mut direct = Vec::new();
            let one = 1u64.to_ne_bytes();
            let fetch_add = |mem: &mut Vec<u8>| {
                let v = u64::from_ne_bytes(mem[..8].try_into().unwrap());
                mem[..8].copy_from_slice(&(v + 1).to_ne_bytes());
                v
            };
            // Each origin finishes its operation in flight at the end (the target serving
            // or the bound passing).
            let tail = (0..3).flat_map(|i| {
                [Ev::Target, Ev::Origin(i, 100, false), Ev::Origin(i, 0, false)]
            });
            for ev in evs.into_iter().chain(tail) {
                match ev {
                    Ev::Target => {
                        serve(&*c, area, &acc, &mut mem, None, &mut scratch);
                    }
                    Ev::Direct => {
                        acc_lock(&acc);
                        direct.push(fetch_add(&mut mem));
                        acc_unlock(&acc);
                    }
                    Ev::Origin(i, dt, start) => {
                        now += dt;
                        o[i] = match o[i] {
                            O::Idle if !start => O::Idle,
                            O::Idle => O::Posted(post(&*c, area, i, &add(0, &one), now, 50)),
                            O::Posted(w) => {
                                let a = answer(&*c, area, i);
                                match w.step(a, now) {
                                    Step::Wait => O::Posted(w),
                                    Step::Collect => {
                                        let mut old = [0u8; 8];
                                        collect(&*c, area, i, a, Some(&mut old)).unwrap();
                                        seen[i].push(u64::from_ne_bytes(old));
                                        O::Idle
                                    }
                                    Step::Reclaim if reclaim(&*c, area, i, &w) => O::Mine,
                                    Step::Reclaim => O::Posted(w.taken()),
                                    Step::Broken => panic!("slot {i} broken"),
                                }
                            }
                            O::Mine => {
                                // The origin's own path: the word, the copies, the word back.
                                acc_lock(&acc);
                                seen[i].push(fetch_add(&mut mem));
                                acc_unlock(&acc);
                                O::Idle
                            }
                        };
                    }
                }
            }
            for (i, s) in seen.iter().enumerate() {
                prop_assert!(s.windows(2).all(|w| w[0] < w[1]), "origin {} out of order: {:?}", i, s);
            }
            let mut all: Vec<u64> = seen.concat();
            all.extend(&direct);
            all.sort_unstable();
            let total = u64::from_ne_bytes(mem[..8].try_into().unwrap());
            prop_assert_eq!(all, (0..total).collect::<Vec<_>>(), "every value once");
            prop_assert!(o.iter().all(|s| matches!(s, O::Idle)), "{:?}", o);
            prop_assert_eq!(c[0].load(Ordering::Relaxed), 0);
        }
    }

    /// Real threads: origins posting fetch-adds and reclaiming after a short bound, a
    /// target thread serving, all on one counter: nothing lost, every value once; in a
    /// scanned and in a counted object.
    #[test]
    fn concurrent_origins_and_a_serving_target_lose_no_update() {
        for area in [AREA, BIG] {
            concurrent_in(area);
        }
    }

    fn concurrent_in(area: Area) {
        use std::sync::Arc;
        let c: Arc<Vec<AtomicU64>> = Arc::new(cells_for(area));
        let acc = Arc::new(AtomicU64::new(0));
        let mem = Arc::new(std::sync::Mutex::new(vec![0u8; 8]));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let per = 2000u64;
        let epoch = std::time::Instant::now();
        let target = {
            let (c, acc, mem, stop) = (c.clone(), acc.clone(), mem.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut scratch = Vec::new();
                let mut served = 0;
                while !stop.load(Ordering::Relaxed) {
                    // The Mutex only hands the memory over between threads; which of the
                    // target and the origin applies a request is the slot's state alone.
                    let mut m = mem.lock().unwrap();
                    served += serve(&*c, area, &acc, &mut *m, None, &mut scratch);
                    drop(m);
                    std::hint::spin_loop();
                }
                served
            })
        };
        let origins: Vec<_> = (0..3)
            .map(|i| {
                let (c, acc, mem) = (c.clone(), acc.clone(), mem.clone());
                std::thread::spawn(move || {
                    let mut seen = Vec::new();
                    let one = 1u64.to_ne_bytes();
                    let now = || epoch.elapsed().as_nanos() as u64;
                    for k in 0..per {
                        // Alternately a generous and a zero bound: both paths taken.
                        let bound = if k % 2 == 0 { 1_000_000 } else { 0 };
                        let mut w = post(&*c, area, i, &add(0, &one), now(), bound);
                        loop {
                            let a = answer(&*c, area, i);
                            match w.step(a, now()) {
                                Step::Wait => std::hint::spin_loop(),
                                Step::Collect => {
                                    let mut old = [0u8; 8];
                                    collect(&*c, area, i, a, Some(&mut old)).unwrap();
                                    seen.push(u64::from_ne_bytes(old));
                                    break;
                                }
                                Step::Reclaim => {
                                    if reclaim(&*c, area, i, &w) {
                                        // (The Mutex first, as the target takes it.)
                                        let mut m = mem.lock().unwrap();
                                        acc_lock(&acc);
                                        let v = u64::from_ne_bytes(m[..8].try_into().unwrap());
                                        m[..8].copy_from_slice(&(v + 1).to_ne_bytes());
                                        acc_unlock(&acc);
                                        drop(m);
                                        seen.push(v);
                                        break;
                                    }
                                    w = w.taken();
                                }
                                Step::Broken => panic!("broken slot"),
                            }
                        }
                    }
                    seen
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in origins {
            let s = t.join().unwrap();
            assert!(s.windows(2).all(|w| w[0] < w[1]), "in order");
            all.extend(s);
        }
        stop.store(true, Ordering::Relaxed);
        let served = target.join().unwrap();
        all.sort_unstable();
        assert_eq!(all, (0..3 * per).collect::<Vec<_>>(), "every value once");
        assert!(served > 0, "the target served some");
        assert_eq!(c[0].load(Ordering::Relaxed), 0);
    }
}
