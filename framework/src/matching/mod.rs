//! MPI matching engine (sans-IO), shared by pml-ob1 and pml-dr.
//!
//! The engine knows nothing of wires or buffers: the PML tells it that a receive was posted
//! ([`Matcher::post`]) or that a message header arrived ([`Matcher::arrive`]) and it answers
//! which receive a message belongs to, following MPI-3.1 §3.5:
//! - messages from one sender on one context are matched in the order they were *sent*: each
//!   carries a per-(context, sender) sequence number, and a message that arrives early (it was
//!   striped over another BTL) waits in a holding area until its predecessors arrived;
//! - a message matches the earliest posted receive that fits (specific source or
//!   [`Source::Any`], specific tag or [`TagSel::Any`]);
//! - a receive matches the earliest *arrived* unexpected message that fits.
//!
//! The payload type `T` is whatever the PML keeps for a message nobody has asked for yet (an
//! eager copy, a rendezvous descriptor). It is built lazily by the closure given to
//! [`Matcher::arrive`], so the common case (a receive is already posted) copies nothing and
//! allocates nothing. `R` is the PML's handle of a posted receive (a request id).
//!
//! Cost: a message from a specific source matched against receives posted for that source is
//! O(1) (front of a per-source queue, plus the front of the wildcard queue); `ANY_SOURCE`
//! receives scan the per-source unexpected queues.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use crate::pml::{ContextId, Source, Tag, TagSel};
use crate::rank::Rank;

/// Per-(context, sender) message sequence number (wrapping).
pub type Seq = u32;

/// Who sent a message, on which context, with which tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// Communicator context.
    pub context: ContextId,
    /// World rank of the sender.
    pub source: Rank,
    /// Message tag.
    pub tag: Tag,
}

impl Envelope {
    /// Does a receive with these selectors accept this message (context aside)?
    pub fn fits(&self, source: Source, tag: TagSel) -> bool {
        (match source {
            Source::Any => true,
            Source::Rank(r) => r == self.source,
        }) && tag_fits(tag, self.tag)
    }
}

fn tag_fits(sel: TagSel, tag: Tag) -> bool {
    match sel {
        TagSel::Any => true,
        TagSel::Tag(t) => t == tag,
    }
}

/// What happened to an arriving message (see [`Matcher::arrive`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival<R> {
    /// It matched this posted receive (removed from the posted queue). The payload closure was
    /// not called: the PML delivers the data straight into the receive.
    Matched(R),
    /// No receive fits yet: the payload was stored in the unexpected queue.
    Unexpected,
    /// It arrived before one of its predecessors: the payload is held until they arrive.
    Held,
    /// Its sequence number was already consumed (a duplicate or a stray): dropped, the
    /// closure was not called.
    Stale,
}

/// What happened to a posted receive (see [`Matcher::post`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Posted<T> {
    /// It matched this unexpected message, removed from the unexpected queue.
    Matched(Envelope, T),
    /// Nothing fits yet; the receive waits in the posted queue.
    Queued,
}

/// A held message released by the arrival of its predecessor that matched a posted receive
/// (see [`Matcher::poll_released`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Released<R, T> {
    /// The receive it matched.
    pub recv: R,
    /// The message's envelope.
    pub envelope: Envelope,
    /// The payload built when the message was held.
    pub payload: T,
}

/// Counters of a [`Matcher`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatchStats {
    /// Messages that found no posted receive on arrival.
    pub unexpected: u64,
    /// Messages that arrived out of sequence and were held.
    pub out_of_order: u64,
    /// Messages dropped as stale (sequence already consumed).
    pub stale: u64,
    /// Receives that matched an unexpected message when posted.
    pub matched_on_post: u64,
    /// Messages that matched a posted receive on arrival (or on release).
    pub matched_on_arrival: u64,
}

/// Identity hasher for the u32 context ids: they are small distinct integers, so hashing them
/// would only cost time on the hot path.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n);
    }
}

type IdMap<V> = HashMap<ContextId, V, BuildHasherDefault<IdHasher>>;

struct PostedEntry<R> {
    order: u64,
    tag: TagSel,
    handle: R,
}

struct UnexpectedEntry<T> {
    arrival: u64,
    tag: Tag,
    payload: T,
}

struct PeerState<R, T> {
    /// Next sequence number expected from this peer (receive side).
    expected: Seq,
    /// Next sequence number to stamp on a message to this peer (send side).
    next_send: Seq,
    /// Receives posted for this specific source, in posting order.
    posted: VecDeque<PostedEntry<R>>,
    /// Messages from this peer nobody asked for yet, in arrival order.
    unexpected: VecDeque<UnexpectedEntry<T>>,
    /// Messages that arrived ahead of their predecessors (rare: striping over several BTLs).
    /// Keyed by sequence number: a burst of reordering can hold many, so lookups stay O(1).
    held: HashMap<Seq, (Tag, T)>,
}

impl<R, T> Default for PeerState<R, T> {
    fn default() -> Self {
        Self {
            expected: 0,
            next_send: 0,
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            held: HashMap::new(),
        }
    }
}

struct ContextState<R, T> {
    peers: Vec<PeerState<R, T>>,
    /// `ANY_SOURCE` receives in posting order.
    wild: VecDeque<PostedEntry<R>>,
    post_order: u64,
    arrival_order: u64,
    unexpected_count: usize,
}

impl<R, T> ContextState<R, T> {
    fn new(peers: usize) -> Self {
        Self {
            peers: (0..peers).map(|_| PeerState::default()).collect(),
            wild: VecDeque::new(),
            post_order: 0,
            arrival_order: 0,
            unexpected_count: 0,
        }
    }

    /// Queue a receive that found no unexpected message.
    #[inline]
    fn queue_posted(&mut self, nprocs: usize, source: Source, tag: TagSel, recv: R) {
        let order = self.post_order;
        self.post_order += 1;
        let entry = PostedEntry {
            order,
            tag,
            handle: recv,
        };
        match source {
            Source::Any => self.wild.push_back(entry),
            Source::Rank(r) if (r as usize) < nprocs => {
                self.peers[r as usize].posted.push_back(entry)
            }
            Source::Rank(_) => {}
        }
    }

    /// Remove and return the earliest posted receive that `source`/`tag` fits.
    #[inline]
    fn take_posted(&mut self, source: Rank, tag: Tag) -> Option<R> {
        let peer = &mut self.peers[source as usize];
        // The common case: no ANY_SOURCE receive waiting, and the oldest receive posted for this
        // source fits (receives posted in the order messages come): O(1), no scan.
        if self.wild.is_empty() {
            if peer.posted.front().is_some_and(|p| tag_fits(p.tag, tag)) {
                return peer.posted.pop_front().map(|p| p.handle);
            }
            let i = peer.posted.iter().position(|p| tag_fits(p.tag, tag))?;
            return peer.posted.remove(i).map(|p| p.handle);
        }
        let specific = peer.posted.iter().position(|p| tag_fits(p.tag, tag));
        let wild = self.wild.iter().position(|p| tag_fits(p.tag, tag));
        match (specific, wild) {
            (None, None) => None,
            (Some(i), None) => peer.posted.remove(i).map(|p| p.handle),
            (None, Some(j)) => self.wild.remove(j).map(|p| p.handle),
            (Some(i), Some(j)) => {
                if peer.posted[i].order < self.wild[j].order {
                    peer.posted.remove(i).map(|p| p.handle)
                } else {
                    self.wild.remove(j).map(|p| p.handle)
                }
            }
        }
    }

    /// Find the earliest arrived unexpected message fitting `source`/`tag`: (peer, index).
    fn find_unexpected(&self, source: Source, tag: TagSel) -> Option<(usize, usize)> {
        if self.unexpected_count == 0 {
            return None;
        }
        match source {
            Source::Rank(r) => {
                let peer = self.peers.get(r as usize)?;
                peer.unexpected
                    .iter()
                    .position(|u| tag_fits(tag, u.tag))
                    .map(|i| (r as usize, i))
            }
            Source::Any => {
                let mut best: Option<(u64, usize, usize)> = None;
                for (p, peer) in self.peers.iter().enumerate() {
                    if let Some(i) = peer.unexpected.iter().position(|u| tag_fits(tag, u.tag)) {
                        let a = peer.unexpected[i].arrival;
                        if best.is_none() || best.is_some_and(|(b, _, _)| a < b) {
                            best = Some((a, p, i));
                        }
                    }
                }
                best.map(|(_, p, i)| (p, i))
            }
        }
    }

    fn push_unexpected(&mut self, source: Rank, tag: Tag, payload: T) {
        let arrival = self.arrival_order;
        self.arrival_order += 1;
        self.unexpected_count += 1;
        self.peers[source as usize]
            .unexpected
            .push_back(UnexpectedEntry {
                arrival,
                tag,
                payload,
            });
    }
}

/// The matching state of one process: every context it has seen, every peer.
pub struct Matcher<R, T> {
    nprocs: usize,
    contexts: Vec<ContextState<R, T>>,
    index: IdMap<usize>,
    /// The last context used and its slot: most programs use one communicator at a time.
    last: (ContextId, usize),
    released: VecDeque<Released<R, T>>,
    stats: MatchStats,
}

impl<R, T> std::fmt::Debug for Matcher<R, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matcher")
            .field("nprocs", &self.nprocs)
            .field("contexts", &self.contexts.len())
            .field("stats", &self.stats)
            .finish()
    }
}

/// `a` comes before `b` in wrapping sequence space.
fn seq_before(a: Seq, b: Seq) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl<R, T> Matcher<R, T> {
    /// A matcher for a job of `nprocs` processes.
    pub fn new(nprocs: usize) -> Self {
        // Context 0 (the world's) exists from the start, so that the last-used cache always
        // names a real slot and its check is one comparison.
        let mut index = IdMap::default();
        index.insert(0, 0);
        Self {
            nprocs,
            contexts: vec![ContextState::new(nprocs)],
            index,
            last: (0, 0),
            released: VecDeque::new(),
            stats: MatchStats::default(),
        }
    }

    /// Number of processes (valid sources are `0..nprocs`).
    pub fn nprocs(&self) -> usize {
        self.nprocs
    }

    /// Counters.
    pub fn stats(&self) -> MatchStats {
        self.stats
    }

    /// The slot of `context`, created on first use.
    #[inline(always)]
    fn slot(&mut self, context: ContextId) -> usize {
        if self.last.0 == context {
            return self.last.1;
        }
        self.slot_slow(context)
    }

    #[inline(never)]
    fn slot_slow(&mut self, context: ContextId) -> usize {
        let i = match self.index.get(&context) {
            Some(&i) => i,
            None => {
                self.contexts.push(ContextState::new(self.nprocs));
                self.index.insert(context, self.contexts.len() - 1);
                self.contexts.len() - 1
            }
        };
        self.last = (context, i);
        i
    }

    fn ctx(&mut self, context: ContextId) -> &mut ContextState<R, T> {
        let i = self.slot(context);
        &mut self.contexts[i]
    }

    fn ctx_ref(&self, context: ContextId) -> Option<&ContextState<R, T>> {
        self.index.get(&context).map(|&i| &self.contexts[i])
    }

    /// The sequence number to stamp on the next message to `dest` on `context` (advances it).
    /// Panics if `dest >= nprocs` (the PML validates ranks first).
    #[inline]
    pub fn next_send_seq(&mut self, context: ContextId, dest: Rank) -> Seq {
        let p = &mut self.ctx(context).peers[dest as usize];
        let s = p.next_send;
        p.next_send = s.wrapping_add(1);
        s
    }

    /// Post a receive with handle `recv`. If an unexpected message fits, it is removed and
    /// returned with its payload; otherwise the receive is queued.
    /// A `Source::Rank` beyond `nprocs` never matches anything (the PML rejects it first).
    #[inline]
    pub fn post(&mut self, context: ContextId, source: Source, tag: TagSel, recv: R) -> Posted<T> {
        let nprocs = self.nprocs;
        let slot = self.slot(context);
        let c = &mut self.contexts[slot];
        if c.unexpected_count == 0 {
            // Pre-posted receives (the common case of a well-ordered program) only queue.
            c.queue_posted(nprocs, source, tag, recv);
            return Posted::Queued;
        }
        self.post_searching(slot, context, source, tag, recv)
    }

    /// [`Matcher::post`] when unexpected messages are waiting on the context.
    #[inline(never)]
    fn post_searching(
        &mut self,
        slot: usize,
        context: ContextId,
        source: Source,
        tag: TagSel,
        recv: R,
    ) -> Posted<T> {
        let nprocs = self.nprocs;
        let c = &mut self.contexts[slot];
        if let Some((p, i)) = c.find_unexpected(source, tag) {
            let u = c.peers[p]
                .unexpected
                .remove(i)
                .expect("index from find_unexpected");
            c.unexpected_count -= 1;
            self.stats.matched_on_post += 1;
            return Posted::Matched(
                Envelope {
                    context,
                    source: p as Rank,
                    tag: u.tag,
                },
                u.payload,
            );
        }
        c.queue_posted(nprocs, source, tag, recv);
        Posted::Queued
    }

    /// A message with `envelope` and sequence number `seq` arrived. `payload` is called only
    /// if the engine must keep the message (unexpected or held). After an in-order arrival,
    /// held successors may have been released: drain them with [`Matcher::poll_released`].
    /// A source beyond `nprocs` is reported as [`Arrival::Stale`].
    #[inline]
    pub fn arrive(
        &mut self,
        envelope: Envelope,
        seq: Seq,
        payload: impl FnOnce() -> T,
    ) -> Arrival<R> {
        match self.arrive_posted(envelope, seq) {
            Some(recv) => Arrival::Matched(recv),
            None => self.arrive_general(envelope, seq, payload),
        }
    }

    /// The common case of [`Matcher::arrive`], tried alone: the message is in sequence,
    /// nothing is held, no `ANY_SOURCE` receive waits, and the oldest receive posted for its
    /// source fits. Returns that receive (removed); `None` means nothing changed and
    /// [`Matcher::arrive`] must handle the message. No successor can be released by such an
    /// arrival (nothing was held), so [`Matcher::poll_released`] has nothing new.
    #[inline]
    pub fn arrive_posted(&mut self, envelope: Envelope, seq: Seq) -> Option<R> {
        let src = envelope.source as usize;
        if src >= self.nprocs {
            return None;
        }
        let slot = self.slot(envelope.context);
        let c = &mut self.contexts[slot];
        if !c.wild.is_empty() {
            return None;
        }
        let peer = &mut c.peers[src];
        if seq != peer.expected
            || !peer.held.is_empty()
            || !peer
                .posted
                .front()
                .is_some_and(|p| tag_fits(p.tag, envelope.tag))
        {
            return None;
        }
        let p = peer.posted.pop_front()?;
        peer.expected = seq.wrapping_add(1);
        self.stats.matched_on_arrival += 1;
        Some(p.handle)
    }

    /// [`Matcher::arrive`] for every other case: out of sequence, held successors, wildcards,
    /// unexpected.
    #[inline(never)]
    fn arrive_general(
        &mut self,
        envelope: Envelope,
        seq: Seq,
        payload: impl FnOnce() -> T,
    ) -> Arrival<R> {
        let src = envelope.source as usize;
        if src >= self.nprocs {
            self.stats.stale += 1;
            return Arrival::Stale;
        }
        let slot = self.slot(envelope.context);
        let c = &mut self.contexts[slot];
        let expected = c.peers[src].expected;
        if seq != expected {
            if seq_before(seq, expected) || c.peers[src].held.contains_key(&seq) {
                self.stats.stale += 1;
                return Arrival::Stale;
            }
            c.peers[src].held.insert(seq, (envelope.tag, payload()));
            self.stats.out_of_order += 1;
            return Arrival::Held;
        }
        c.peers[src].expected = expected.wrapping_add(1);
        let result = match c.take_posted(envelope.source, envelope.tag) {
            Some(r) => {
                self.stats.matched_on_arrival += 1;
                Arrival::Matched(r)
            }
            None => {
                c.push_unexpected(envelope.source, envelope.tag, payload());
                self.stats.unexpected += 1;
                Arrival::Unexpected
            }
        };
        if !c.peers[src].held.is_empty() {
            self.release_held(slot, envelope.context, envelope.source);
        }
        result
    }

    fn release_held(&mut self, slot: usize, context: ContextId, source: Rank) {
        let c = &mut self.contexts[slot];
        loop {
            let peer = &mut c.peers[source as usize];
            let Some((tag, payload)) = peer.held.remove(&peer.expected) else {
                break;
            };
            peer.expected = peer.expected.wrapping_add(1);
            let envelope = Envelope {
                context,
                source,
                tag,
            };
            match c.take_posted(source, tag) {
                Some(recv) => {
                    self.stats.matched_on_arrival += 1;
                    self.released.push_back(Released {
                        recv,
                        envelope,
                        payload,
                    });
                }
                None => {
                    self.stats.unexpected += 1;
                    c.push_unexpected(source, tag, payload);
                }
            }
        }
    }

    /// The next held message that matched a posted receive when its predecessor arrived.
    #[inline]
    pub fn poll_released(&mut self) -> Option<Released<R, T>> {
        self.released.pop_front()
    }

    /// The earliest arrived unexpected message fitting the selectors, without removing it.
    pub fn probe(&self, context: ContextId, source: Source, tag: TagSel) -> Option<(Envelope, &T)> {
        let c = self.ctx_ref(context)?;
        let (p, i) = c.find_unexpected(source, tag)?;
        let u = &c.peers[p].unexpected[i];
        Some((
            Envelope {
                context,
                source: p as Rank,
                tag: u.tag,
            },
            &u.payload,
        ))
    }

    /// The earliest arrived unexpected message fitting the selectors, removed (a matched
    /// probe, `MPI_Mprobe`): no receive or probe matches it afterwards, and the PML keeps it
    /// aside until the program receives it (`MPI_Mrecv`).
    pub fn take(
        &mut self,
        context: ContextId,
        source: Source,
        tag: TagSel,
    ) -> Option<(Envelope, T)> {
        let slot = *self.index.get(&context)?;
        let c = &mut self.contexts[slot];
        let (p, i) = c.find_unexpected(source, tag)?;
        let u = c.peers[p].unexpected.remove(i)?;
        c.unexpected_count -= 1;
        self.stats.matched_on_post += 1;
        Some((
            Envelope {
                context,
                source: p as Rank,
                tag: u.tag,
            },
            u.payload,
        ))
    }

    /// Remove a posted (not yet matched) receive. Returns false if it is not queued.
    pub fn cancel(&mut self, context: ContextId, recv: &R) -> bool
    where
        R: PartialEq,
    {
        let Some(&slot) = self.index.get(&context) else {
            return false;
        };
        let c = &mut self.contexts[slot];
        if let Some(i) = c.wild.iter().position(|p| &p.handle == recv) {
            c.wild.remove(i);
            return true;
        }
        for peer in &mut c.peers {
            if let Some(i) = peer.posted.iter().position(|p| &p.handle == recv) {
                peer.posted.remove(i);
                return true;
            }
        }
        false
    }

    /// The peer `source` failed: remove and return every receive posted specifically for it
    /// (on every context) so the PML can complete them with an error. Its unexpected and held
    /// messages stay: eager ones are complete and may still be received.
    pub fn take_posted_from(&mut self, source: Rank) -> Vec<R> {
        let mut out = Vec::new();
        for c in &mut self.contexts {
            if let Some(p) = c.peers.get_mut(source as usize) {
                out.extend(p.posted.drain(..).map(|e| e.handle));
            }
        }
        out
    }

    /// Number of posted receives waiting (all contexts).
    pub fn posted_len(&self) -> usize {
        self.contexts
            .iter()
            .map(|c| c.wild.len() + c.peers.iter().map(|p| p.posted.len()).sum::<usize>())
            .sum()
    }

    /// Number of unexpected messages waiting (all contexts).
    pub fn unexpected_len(&self) -> usize {
        self.contexts.iter().map(|c| c.unexpected_count).sum()
    }

    /// Number of held (out-of-sequence) messages (all contexts).
    pub fn held_len(&self) -> usize {
        self.contexts
            .iter()
            .map(|c| c.peers.iter().map(|p| p.held.len()).sum::<usize>())
            .sum()
    }
}

#[cfg(test)]
mod tests;
