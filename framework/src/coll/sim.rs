//! A simulator of N ranks running their schedules against each other without I/O (eager,
//! per-pair FIFO channels, like the PML's per-source ordering): what the schedule tests of the
//! framework and of every coll component run, so that an algorithm is checked for every
//! process count and layout without a transport.
//!
//! `Send` holds a rank's input; `Work` holds only what the caller put there (the root's
//! vector of a bcast, one's own block of a gather), the rest is poison, like `Tmp`. The
//! simulator tracks which `Work` and `Tmp` bytes were written and panics when a schedule
//! sends, combines or copies a byte before anything wrote it, receives a length other than
//! the one it expects, deadlocks or leaves a message unreceived.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;

use super::schedule::{Buf, Comm, Local, Region, Round, Schedule};

/// A reduction `(dst, src, src_first)`: `dst = src op dst` if `src_first`, else `dst op src`.
pub type Reducer = fn(&mut [u8], &[u8], bool);

/// The contents of `Work` and `Tmp` bytes that nothing wrote yet.
pub const POISON: u8 = 0xA5;

/// One simulated rank: its schedule, buffers and how far it got.
pub struct Rank {
    /// The rank's schedule.
    pub sched: Schedule,
    next: usize,
    posted: bool,
    send: Vec<u8>,
    work: Vec<u8>,
    tmp: Vec<u8>,
    /// Which bytes of `work` hold data (the caller's, or written by the schedule).
    work_written: Vec<bool>,
    /// Which bytes of `tmp` were written by the schedule.
    tmp_written: Vec<bool>,
}

impl Rank {
    /// Place the caller's `data` at `at` in `Work`.
    pub fn with(mut self, at: usize, data: &[u8]) -> Self {
        self.work[at..at + data.len()].copy_from_slice(data);
        self.mark_written(&Region::work(at..at + data.len()));
        self
    }

    fn written(&mut self, b: Buf) -> Option<&mut Vec<bool>> {
        match b {
            Buf::Send => None,
            Buf::Work => Some(&mut self.work_written),
            Buf::Tmp => Some(&mut self.tmp_written),
        }
    }

    fn mark_written(&mut self, region: &Region) {
        if let Some(w) = self.written(region.buf) {
            w[region.range.clone()].fill(true);
        }
    }

    /// Panics if the schedule of rank `me` reads a byte of `region` that nothing wrote.
    fn check_written(&mut self, me: usize, region: &Region, what: &str) {
        if let Some(w) = self.written(region.buf) {
            if let Some(i) = w[region.range.clone()].iter().position(|w| !w) {
                panic!(
                    "rank {me} {what} {region:?} before byte {} was written",
                    region.range.start + i
                );
            }
        }
    }
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end
}

/// Regions written by a round must not overlap anything else the round touches: the real
/// executor hands them to the PML concurrently.
fn check_disjoint(round: &Round) {
    let regions: Vec<(bool, &Region)> = round
        .comms
        .iter()
        .map(|c| match c {
            Comm::Send { region, .. } => (false, region),
            Comm::Recv { region, .. } => (true, region),
        })
        .collect();
    for (i, (wi, ri)) in regions.iter().enumerate() {
        for (wj, rj) in regions.iter().skip(i + 1) {
            if (*wi || *wj) && ri.buf == rj.buf {
                assert!(
                    !overlaps(&ri.range, &rj.range),
                    "round touches {ri:?} and {rj:?} concurrently"
                );
            }
        }
    }
}

fn buf(r: &mut Rank, b: Buf) -> &mut Vec<u8> {
    match b {
        Buf::Send => &mut r.send,
        Buf::Work => &mut r.work,
        Buf::Tmp => &mut r.tmp,
    }
}

/// Run every rank's schedule to completion and return every rank's `Work`; panics on
/// deadlock, length mismatch, a read of unwritten bytes or leftover messages.
pub fn simulate(mut ranks: Vec<Rank>, reduce: Reducer) -> Vec<Vec<u8>> {
    let n = ranks.len();
    let mut chan: HashMap<(usize, usize), VecDeque<Vec<u8>>> = HashMap::new();
    for r in &mut ranks {
        r.tmp = vec![POISON; r.sched.tmp_len];
        r.tmp_written = vec![false; r.sched.tmp_len];
        for round in &r.sched.rounds {
            check_disjoint(round);
        }
    }
    loop {
        let mut progress = false;
        for (me, r) in ranks.iter_mut().enumerate() {
            let Some(round) = r.sched.rounds.get(r.next).cloned() else {
                continue;
            };
            if !r.posted {
                for c in &round.comms {
                    if let Comm::Send { peer, region } = c {
                        assert!(*peer < n && *peer != me, "rank {me} sends to {peer}");
                        r.check_written(me, region, "sends");
                        let data = buf(r, region.buf)[region.range.clone()].to_vec();
                        chan.entry((me, *peer)).or_default().push_back(data);
                    }
                }
                r.posted = true;
                progress = true;
            }
            let mut need: HashMap<usize, usize> = HashMap::new();
            for c in &round.comms {
                if let Comm::Recv { peer, .. } = c {
                    *need.entry(*peer).or_default() += 1;
                }
            }
            if need
                .iter()
                .any(|(p, k)| chan.get(&(*p, me)).map_or(0, |q| q.len()) < *k)
            {
                continue;
            }
            for c in &round.comms {
                if let Comm::Recv { peer, region } = c {
                    assert!(region.buf != Buf::Send, "receive into the send buffer");
                    let msg = chan.get_mut(&(*peer, me)).unwrap().pop_front().unwrap();
                    assert_eq!(
                        msg.len(),
                        region.range.len(),
                        "rank {me} receives {} B from {peer} into {region:?}",
                        msg.len()
                    );
                    buf(r, region.buf)[region.range.clone()].copy_from_slice(&msg);
                    r.mark_written(region);
                }
            }
            for l in &round.locals {
                match l {
                    Local::Reduce {
                        src,
                        dst,
                        src_first,
                        acc,
                    } => {
                        let (src, acc) = (
                            Region::tmp(src.clone()),
                            Region {
                                buf: *acc,
                                range: dst.clone(),
                            },
                        );
                        r.check_written(me, &src, "combines");
                        r.check_written(me, &acc, "combines");
                        let s = r.tmp[src.range].to_vec();
                        let mut v = buf(r, acc.buf)[acc.range].to_vec();
                        reduce(&mut v, &s, *src_first);
                        r.work[dst.clone()].copy_from_slice(&v);
                        r.mark_written(&Region::work(dst.clone()));
                    }
                    Local::Copy { src, dst } => {
                        r.check_written(me, src, "copies");
                        let s = buf(r, src.buf)[src.range.clone()].to_vec();
                        r.work[dst.clone()].copy_from_slice(&s);
                        r.mark_written(&Region::work(dst.clone()));
                    }
                    Local::Pack { src, dst } => {
                        r.check_written(me, src, "packs");
                        assert!(
                            src.buf != Buf::Tmp || !overlaps(&src.range, dst),
                            "rank {me} packs {src:?} onto itself at {dst:?}"
                        );
                        let s = buf(r, src.buf)[src.range.clone()].to_vec();
                        r.tmp[dst.clone()].copy_from_slice(&s);
                        r.mark_written(&Region::tmp(dst.clone()));
                    }
                }
            }
            r.next += 1;
            r.posted = false;
            progress = true;
        }
        if !progress {
            break;
        }
    }
    for (me, r) in ranks.iter().enumerate() {
        assert_eq!(
            r.next,
            r.sched.rounds.len(),
            "rank {me} stuck at round {} (deadlock)",
            r.next
        );
    }
    assert!(
        chan.values().all(|q| q.is_empty()),
        "unreceived messages left"
    );
    ranks.into_iter().map(|r| r.work).collect()
}

/// A rank whose `Work` starts as `work`, all of it the caller's data.
pub fn rank(sched: Schedule, send: Vec<u8>, work: Vec<u8>) -> Rank {
    Rank {
        sched,
        next: 0,
        posted: false,
        send,
        work_written: vec![true; work.len()],
        work,
        tmp: Vec::new(),
        tmp_written: Vec::new(),
    }
}

/// A rank whose `Work` is `len` bytes of poison that the schedule must write before reading.
pub fn fresh(sched: Schedule, send: Vec<u8>, len: usize) -> Rank {
    Rank {
        work: vec![POISON; len],
        work_written: vec![false; len],
        ..rank(sched, send, vec![])
    }
}
