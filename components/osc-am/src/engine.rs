//! The protocol of osc-am as a sans-IO state machine: one [`Engine`] per window and process.
//! Calls from the program go in through its methods, messages from peers through
//! [`Engine::handle`]; what it has to send comes out of [`Engine::outbox`]. It reads and
//! writes the window's memory through [`Segment`]s (the program's memory in production, plain
//! vectors in the tests, which drive several engines over a simulated network).
//!
//! # Protocol
//! Everything rests on one property of the transport: the messages from one process to
//! another arrive, and are applied, in the order they were sent (the PML's non-overtaking
//! rule on the window's private context; the host applies them in matching order). So a
//! synchronization message that arrives after a process's operations proves they were
//! applied, and no operation needs an acknowledgement of its own:
//! - **fence**: every member sends `Fence` to every member (itself included); once it has
//!   seen a `Fence` from each (so everything aimed at it in the epoch is applied) and every
//!   reply to its own fetching operations arrived, it sends `Fenced` to every member, and
//!   finishes when it has seen a `Fenced` from each. The second round is what keeps an
//!   operation of the next epoch (a get by a third process) from overtaking one of this
//!   epoch at its target: messages from different origins are not ordered. A member that
//!   sent no operation as a message since its last fence sends `FenceQuiet` instead (a
//!   module moving data by RDMA sends it behind all its transfers); a round whose every
//!   fence was quiet has nothing left to apply anywhere once each member saw them all, and
//!   skips the second round (every member sees the same fences, so all skip it). A host
//!   that knows by a collective of its own that every member is quiet (osc-rdma's, an
//!   allreduce on the window's communicator) ends such a fence with no message at all
//!   ([`Engine::fence_quiet`], [`Engine::fence_agreed`]): no round counted anywhere;
//! - **post/start/complete/wait**: `Post` to each origin; `start` waits for a `Post` from
//!   each target; `Complete` to each target; `wait` waits for a `Complete` from each origin.
//!   A host that shares counters with some peers (osc-rdma, with its node: per member, a
//!   count of the posts and of the completes each rank made to it, which only grow) carries
//!   those there instead ([`Engine::send_counted`]): a `Post` to any such peer, a `Complete`
//!   to one every message to which is known applied ([`Engine::quiet`], since a counter does
//!   not follow the messages); the receiver adds what its counters grew by to what came as
//!   messages ([`Engine::absorb_counts`]), so a group may mix both, and counts only grow, so
//!   a post of the next epoch that comes early is kept for it as a message would be;
//! - **lock/unlock**: `Lock` to the target, whose lock queue answers `Granted` when the lock
//!   is compatible with the holders (exclusive alone, shared together; first come, first
//!   served: a waiting exclusive request is not overtaken by later shared ones); `Unlock`
//!   releases it and is answered by `Ack` after everything sent before was applied.
//!   `MPI_MODE_NOCHECK` skips the request, and unlock sends `Flush` instead. The origin does
//!   not wait for the grant (MPI lets `MPI_Win_lock` return before the lock is acquired,
//!   except on the caller's own window, whose loads and stores the lock may protect): its
//!   operations, flushes and unlock follow the request at once, and the target holds
//!   everything an origin sends for its passive epochs (operations, `Flush`, `Unlock`, the
//!   next `Lock`) while that origin's request waits in its queue, then applies them in order
//!   once it grants it. So a lock, one operation and an unlock cost one round trip, as
//!   MPICH's and Open MPI's piggybacked lock requests do. A module moving data by RDMA asks
//!   [`Engine::granted`] before it touches the target's memory;
//! - **lock words**: where a module maps a target's lock word ([`Engine::set_lock_word`],
//!   [`crate::lockword`]: osc-rdma, for the targets on its node), an origin takes and gives
//!   back that target's lock with one atomic each instead of `Lock` and `Unlock`: the lock is
//!   held when `MPI_Win_lock` returns (a contended one is retried by each poll until free;
//!   `lock_all` takes every word or none, so it never holds some while waiting for others),
//!   and unlock gives the word back once the epoch's operations are complete at the target
//!   (a `Flush` and its `Ack` if operations without reply went as messages; the module's
//!   RDMA transfers are complete before it asks). The target takes its own word for every
//!   request that comes as a message, so both kinds of holder exclude each other; a request
//!   waiting for a word held on the node is retried by [`Engine::poll_locks`];
//! - **accumulate word**: a target whose module shares one with its node
//!   ([`Engine::set_acc_word`]) holds it while it applies each `Acc` and `Cas`; the origins
//!   of its node apply theirs themselves under the same word (osc-rdma, by CMA), only when
//!   every message they sent that target is known applied ([`Engine::quiet`]), so that
//!   accumulates stay atomic per element and in order per origin across the two paths;
//! - **flush**: `Flush`, answered by `Ack`, to a target that was sent operations without
//!   reply (puts, accumulates) since the last one; otherwise the replies awaited prove every
//!   operation complete, and no message is needed. A local flush only waits for replies
//!   (puts and accumulates copy the origin data when issued, so complete locally at once);
//! - **free**: `Free` to every member, and the window goes when every member's arrived.
//!
//! Every operation is checked at the origin (rank, epoch, range against the target's size)
//! and again at the target (range against its memory, before anything is written); a
//! target's refusal comes back as the operation's error, or at the next synchronization for
//! operations that have no reply.

use std::collections::{HashMap, VecDeque};

use rmca_framework::buffer::UserBuf;
use rmca_framework::hash::BuildIntHasher;
use rmca_framework::osc::{
    accumulate_with, AccOp, Elem, HostAccumulate, Layout, LockKind, OpId, OscError, SyncCall,
    TargetInfo,
};

use crate::lockword::{acc_lock, acc_unlock, release, try_acquire, LockWord};
use crate::wire::{Msg, Refusal};

/// Accumulates without result larger than this go as several messages of at most this many
/// bytes of data (whole elements each): each is received into a buffer that stays in the
/// cache while the target combines it (a 2 MiB message is received, then read again, from
/// memory), is sent eagerly on shm (its send completes locally without the target, which is
/// all `MPI_Win_flush_local` waits for), and neither end maps and faults in fresh pages for
/// it (`large_acc_flush_local`).
pub const ACC_PIECE: usize = 64 * 1024;

/// Memory a window exposes: one attached region.
pub trait Segment {
    /// Bytes of the region.
    fn len(&self) -> usize;
    /// No bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes `off..off+len`.
    fn read(&self, off: usize, len: usize) -> &[u8];
    /// Write `data` at `off`.
    fn write(&mut self, off: usize, data: &[u8]);
    /// Run `f` on bytes `off..off+len` in place (an accumulate's combine).
    fn modify<R>(&mut self, off: usize, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R;
}

impl Segment for UserBuf {
    fn len(&self) -> usize {
        UserBuf::len(self)
    }

    fn read(&self, off: usize, len: usize) -> &[u8] {
        &self.as_slice()[off..off + len]
    }

    fn write(&mut self, off: usize, data: &[u8]) {
        self.write_at(off, data);
    }

    fn modify<R>(&mut self, off: usize, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        self.with_mut_at(off, len, f)
    }
}

impl Segment for Vec<u8> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn read(&self, off: usize, len: usize) -> &[u8] {
        &self[off..off + len]
    }

    fn write(&mut self, off: usize, data: &[u8]) {
        self[off..off + data.len()].copy_from_slice(data);
    }

    fn modify<R>(&mut self, off: usize, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        f(&mut self[off..off + len])
    }
}

/// A lock this process holds (or asked for) at a target.
#[derive(Clone, Copy, Debug)]
struct Held {
    granted: bool,
    nocheck: bool,
    /// Taken on the target's lock word (of this kind), not by messages.
    word: Option<LockKind>,
}

/// The synchronization in progress.
#[derive(Clone, Debug)]
enum Pending {
    /// `done`: this process saw every member's `Fence` (what was sent to it is applied)
    /// and announced it with `Fenced`; the fence ends when every member did.
    Fence {
        succeed: bool,
        done: bool,
    },
    Start(Vec<usize>),
    /// Done when every reply from these targets arrived.
    Replies(Vec<usize>),
    Wait,
    /// Done when these targets granted.
    Locks(Vec<usize>),
    /// Done when these targets acknowledged and replied.
    Acks(Vec<usize>),
    Free,
}

/// Where an operation stands at its origin.
enum OpState {
    Pending,
    Done(Result<Vec<u8>, OscError>),
}

/// A post or a complete carried by a host's counter instead of a message
/// ([`Engine::send_counted`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// `MPI_Win_post`: this process exposes its window to the peer.
    Post,
    /// `MPI_Win_complete`: this process's access epoch to the peer is over, its operations
    /// applied.
    Complete,
}

/// One window at one process.
pub struct Engine<S: Segment> {
    me: usize,
    targets: Vec<TargetInfo>,
    dynamic: bool,
    /// The memory: `(base address, region)`; a window made with memory has one region at 0.
    segments: Vec<(u64, S)>,
    outbox: VecDeque<(usize, Msg)>,
    next_id: u64,
    /// (Ids are this engine's own counter: the integer hasher, not SipHash.)
    ops: HashMap<OpId, OpState, BuildIntHasher>,
    /// Replies awaited from each target.
    awaiting: Vec<u64>,
    /// `Ack`s awaited from each target.
    acks: Vec<u64>,
    /// Operations without reply sent to each target since its last `Flush` or `Unlock`: a
    /// flush of a target with none needs no round trip of its own (the replies it awaits
    /// prove the rest complete).
    unacked: Vec<u64>,
    fence_open: bool,
    fences_sent: u64,
    fences_seen: Vec<u64>,
    fenced_seen: Vec<u64>,
    /// Per member, the last round (its count of fences) whose fence was not quiet; the
    /// rounds of `Fenced` this process sent (the rounds not all quiet); the operation ids
    /// issued up to this process's last fence.
    loud_round: Vec<u64>,
    fenced_sent: u64,
    ops_at_fence: u64,
    frees_seen: Vec<u64>,
    access: Option<Vec<usize>>,
    posts_seen: Vec<u64>,
    exposure: Option<Vec<usize>>,
    completes_seen: Vec<u64>,
    /// Per peer, the posts and completes its counters held when last read
    /// ([`Engine::absorb_counts`]), already added to `posts_seen` and `completes_seen`.
    posts_counted: Vec<u64>,
    completes_counted: Vec<u64>,
    locks: Vec<Option<Held>>,
    lock_all: bool,
    // The target side of passive synchronization.
    shared_holders: usize,
    exclusive_holder: Option<usize>,
    lock_queue: VecDeque<(usize, LockKind)>,
    /// Origins whose lock request waits in `lock_queue`: what they send for their passive
    /// epochs waits in `held` until the grant.
    blocked: Vec<bool>,
    held: Vec<VecDeque<Msg>>,
    /// Origins just granted whose held messages are to be applied.
    ready: Vec<usize>,
    pending: Option<Pending>,
    /// The target list of the last synchronization that ended, kept for the next one's: a
    /// flush or unlock of one target allocates nothing.
    spare: Vec<usize>,
    /// An error a target reported for an operation without reply.
    deferred: Option<OscError>,
    /// The host's arithmetic for the elements Rust has no number for.
    host: Option<HostAccumulate>,
    /// The target's pieces of the put or accumulate being applied ([`Engine::locate_into`]),
    /// kept: applying one allocates nothing.
    pieces: Vec<(usize, usize, usize)>,
    /// The lock words this process maps, per target (its own included: the target side
    /// takes it for the requests that come as messages).
    words: Vec<Option<Box<dyn LockWord>>>,
    /// The word locks an unlock in progress gives back once its targets acknowledged.
    releases: Vec<(usize, LockKind)>,
    /// The lock each origin granted by message holds on this process's word.
    word_held: Vec<Option<LockKind>>,
    /// This process's accumulate word ([`crate::lockword::acc_lock`]), held while it applies
    /// an accumulate or compare-and-swap that came as a message: origins of its node that
    /// apply theirs directly take it too.
    acc_word: Option<Box<dyn LockWord>>,
}

impl<S: Segment> std::fmt::Debug for Engine<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("me", &self.me)
            .field("size", &self.targets.len())
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

fn refusal_error(r: Refusal) -> OscError {
    if r.range {
        OscError::Range(r.msg)
    } else {
        OscError::Arg(r.msg)
    }
}

impl<S: Segment> Engine<S> {
    /// The engine of rank `me` of a window whose members expose `targets`; `memory` is this
    /// process's region (`None` for a dynamic window, whose regions are attached later).
    pub fn new(me: usize, targets: Vec<TargetInfo>, memory: Option<S>) -> Self {
        let n = targets.len();
        Self {
            me,
            targets,
            dynamic: memory.is_none(),
            segments: memory.map(|m| vec![(0, m)]).unwrap_or_default(),
            outbox: VecDeque::new(),
            next_id: 1,
            ops: HashMap::default(),
            awaiting: vec![0; n],
            acks: vec![0; n],
            unacked: vec![0; n],
            fence_open: false,
            fences_sent: 0,
            fences_seen: vec![0; n],
            fenced_seen: vec![0; n],
            loud_round: vec![0; n],
            fenced_sent: 0,
            ops_at_fence: 1,
            frees_seen: vec![0; n],
            access: None,
            posts_seen: vec![0; n],
            exposure: None,
            completes_seen: vec![0; n],
            posts_counted: vec![0; n],
            completes_counted: vec![0; n],
            locks: vec![None; n],
            lock_all: false,
            shared_holders: 0,
            exclusive_holder: None,
            lock_queue: VecDeque::new(),
            blocked: vec![false; n],
            held: (0..n).map(|_| VecDeque::new()).collect(),
            ready: Vec::new(),
            pending: None,
            spare: Vec::new(),
            deferred: None,
            host: None,
            pieces: Vec::new(),
            words: (0..n).map(|_| None).collect(),
            releases: Vec::new(),
            word_held: vec![None; n],
            acc_word: None,
        }
    }

    /// Hold `word` while applying each accumulate and compare-and-swap that arrives as a
    /// message (a word the origins of this process's node map, and take while they apply
    /// their own accumulates to this memory directly: see [`crate::lockword`]).
    pub fn set_acc_word(&mut self, word: Box<dyn LockWord>) {
        self.acc_word = Some(word);
    }

    /// Is every operation this process sent to `target` as a message known to be applied
    /// there (no reply, acknowledgement or flush outstanding)? A module that applies an
    /// accumulate at `target` itself does so only then, so that accumulates from one origin
    /// to one target keep their order (`accumulate_ordering`) across the two paths.
    pub fn quiet(&self, target: usize) -> bool {
        self.unacked.get(target).is_some_and(|&u| u == 0)
            && self.awaiting[target] == 0
            && self.acks[target] == 0
    }

    /// The origin's checks of a compare-and-swap, as [`Engine::check_accumulate`].
    pub fn check_cas(
        &self,
        target: usize,
        addr: u64,
        elem: Elem,
        compare: &[u8],
        value: &[u8],
    ) -> Result<(), OscError> {
        self.check_epoch(target)?;
        self.check_cas_operands(target, addr, elem, compare, value)
    }

    /// [`Engine::check_cas`] but for the epoch, as [`Engine::check_accumulate_operands`].
    pub fn check_cas_operands(
        &self,
        target: usize,
        addr: u64,
        elem: Elem,
        compare: &[u8],
        value: &[u8],
    ) -> Result<(), OscError> {
        self.check_range(target, addr, &[(0, elem.size() as u64)])?;
        if compare.len() != elem.size() || value.len() != elem.size() {
            return Err(OscError::Arg("compare_and_swap: one element each".into()));
        }
        Ok(())
    }

    /// Take and give back `target`'s lock on `word` from now on (a word every process of
    /// the target's node maps: see [`crate::lockword`]); for this process's own word, grant
    /// the requests that come as messages only by taking it. Ignored for a rank outside the
    /// window, or while this process holds or asked for a lock on `target`.
    pub fn set_lock_word(&mut self, target: usize, word: Box<dyn LockWord>) {
        if target < self.size() && self.locks[target].is_none() && !self.lock_all {
            self.words[target] = Some(word);
        }
    }

    /// Does this process take `target`'s lock on a lock word?
    pub fn has_lock_word(&self, target: usize) -> bool {
        self.words.get(target).is_some_and(Option::is_some)
    }

    /// Retry the lock requests that wait for this process's lock word (held by an origin of
    /// its node): true if one was granted. Cheap when none waits.
    pub fn poll_locks(&mut self) -> bool {
        if self.lock_queue.is_empty() || self.words[self.me].is_none() {
            return false;
        }
        let before = self.lock_queue.len();
        self.grant_waiting();
        self.apply_ready();
        self.lock_queue.len() != before
    }

    /// Take the word locks of the synchronization in progress not granted yet (true: all
    /// held). `lock_all` takes all or none: holding some while waiting for others could
    /// wait on a process that waits on one of them.
    fn take_words(&mut self, g: &[usize]) -> bool {
        let mut all = true;
        for &t in g {
            let (Some(h), Some(w)) = (self.locks[t], &self.words[t]) else {
                continue;
            };
            let Some(kind) = h.word.filter(|_| !h.granted) else {
                continue;
            };
            if try_acquire(w.word(), kind) {
                if let Some(h) = self.locks[t].as_mut() {
                    h.granted = true;
                }
                continue;
            }
            all = false;
            if self.lock_all {
                // Give back what was taken, and try again at the next poll.
                for &u in g {
                    let (Some(h), Some(w)) = (self.locks[u].as_mut(), &self.words[u]) else {
                        continue;
                    };
                    if let (Some(kind), true) = (h.word, h.granted) {
                        release(w.word(), kind);
                        h.granted = false;
                    }
                }
                return false;
            }
        }
        all
    }

    /// Use the host's arithmetic for the elements Rust has no number for.
    pub fn with_host(mut self, host: Option<HostAccumulate>) -> Self {
        self.host = host;
        self
    }

    /// Members of the window.
    pub fn size(&self) -> usize {
        self.targets.len()
    }

    /// The messages to send, `(peer, message)`, in order.
    pub fn outbox(&mut self) -> &mut VecDeque<(usize, Msg)> {
        &mut self.outbox
    }

    fn send(&mut self, peer: usize, m: Msg) {
        self.outbox.push_back((peer, m));
    }

    // ---- origin side: operations ----

    fn check_rank(&self, target: usize) -> Result<(), OscError> {
        if target >= self.size() {
            return Err(OscError::Rank(format!(
                "target rank {target} is not in the window's group (size {})",
                self.size()
            )));
        }
        Ok(())
    }

    /// May this process access `target` now?
    fn check_epoch(&self, target: usize) -> Result<(), OscError> {
        self.check_rank(target)?;
        // A lock requested counts: the target applies the operation once it grants it.
        let locked = self.locks[target].is_some();
        let started = self.access.as_ref().is_some_and(|g| g.contains(&target));
        if self.fence_open || locked || started {
            return Ok(());
        }
        Err(OscError::Sync(format!(
            "no access epoch to rank {target} is open: call MPI_Win_fence, MPI_Win_start (naming it), MPI_Win_lock or MPI_Win_lock_all first"
        )))
    }

    /// The origin's check of a target's range (a dynamic window's is the target's alone).
    fn check_range(&self, target: usize, addr: u64, runs: &[(i64, u64)]) -> Result<(), OscError> {
        if self.dynamic || Layout::len_of(runs) == 0 {
            return Ok(());
        }
        let size = i128::from(self.targets[target].size);
        let (lo, hi) = Layout::span_of(runs);
        let (lo, hi) = (
            i128::from(addr) + i128::from(lo),
            i128::from(addr) + i128::from(hi),
        );
        if lo < 0 || hi > size {
            return Err(OscError::Range(format!(
                "bytes {lo}..{hi} of rank {target}'s window are outside it ({size} bytes)"
            )));
        }
        Ok(())
    }

    /// May the target's memory be accessed directly (by RDMA) now: no lock request of this
    /// process at `target` still waits for its grant?
    pub fn granted(&self, target: usize) -> bool {
        self.locks
            .get(target)
            .is_none_or(|h| h.is_none_or(|h| h.granted))
    }

    /// The origin's checks of an operation on `layout` at `addr` of `target` (rank, access
    /// epoch, range against the target's size), for a module that moves the data itself
    /// (osc-rdma's puts and gets by RDMA) and so must refuse exactly what this engine would.
    pub fn check_access(
        &self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
    ) -> Result<(), OscError> {
        self.check_epoch(target)?;
        self.check_range(target, addr, runs)
    }

    fn start_op(&mut self, target: usize, reply: bool) -> OpId {
        let id = self.next_id;
        self.next_id += 1;
        if reply {
            self.awaiting[target] += 1;
            self.ops.insert(id, OpState::Pending);
        } else {
            // Complete at the origin once issued (the data was copied): no entry, or a
            // program that never asks (MPI_Put, not MPI_Rput) would grow the map by one
            // per operation. `poll_op` answers for it from the id alone.
            self.unacked[target] += 1;
        }
        id
    }

    /// `MPI_Put`.
    pub fn put(
        &mut self,
        target: usize,
        addr: u64,
        layout: &Layout,
        data: Vec<u8>,
    ) -> Result<OpId, OscError> {
        self.check_epoch(target)?;
        self.check_range(target, addr, &layout.runs)?;
        if data.len() as u64 != layout.len() {
            return Err(OscError::Arg(format!(
                "put: {} origin bytes for {} target bytes",
                data.len(),
                layout.len()
            )));
        }
        let id = self.start_op(target, false);
        self.send(
            target,
            Msg::Put {
                addr,
                layout: layout.clone(),
                data: data.into(),
            },
        );
        Ok(id)
    }

    /// [`Engine::put`] of borrowed bytes into borrowed runs: the bytes are copied once, into
    /// the message ([`Msg::with_room`]).
    pub fn put_from(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        data: &[u8],
    ) -> Result<OpId, OscError> {
        self.check_epoch(target)?;
        self.check_range(target, addr, runs)?;
        if data.len() as u64 != Layout::len_of(runs) {
            return Err(OscError::Arg(format!(
                "put: {} origin bytes for {} target bytes",
                data.len(),
                Layout::len_of(runs)
            )));
        }
        let id = self.start_op(target, false);
        let m = Msg::Put {
            addr,
            layout: Layout {
                runs: runs.to_vec(),
            },
            data: Default::default(),
        };
        self.send(target, m.with_room(data));
        Ok(id)
    }

    /// `MPI_Get`.
    pub fn get(&mut self, target: usize, addr: u64, layout: &Layout) -> Result<OpId, OscError> {
        self.check_epoch(target)?;
        self.check_range(target, addr, &layout.runs)?;
        let id = self.start_op(target, true);
        self.send(
            target,
            Msg::Get {
                id,
                addr,
                layout: layout.clone(),
            },
        );
        Ok(id)
    }

    /// `MPI_Accumulate`, and with `fetch` `MPI_Get_accumulate` / `MPI_Fetch_and_op`.
    #[allow(clippy::too_many_arguments)]
    pub fn accumulate(
        &mut self,
        target: usize,
        addr: u64,
        layout: &Layout,
        op: AccOp,
        elem: Elem,
        data: Vec<u8>,
        fetch: bool,
    ) -> Result<OpId, OscError> {
        self.check_accumulate(target, addr, &layout.runs, op, elem, data.len())?;
        if Self::in_pieces(&layout.runs, elem, data.len(), fetch) {
            return Ok(self.acc_pieces_to(target, addr, &layout.runs, op, elem, &data));
        }
        let id = self.start_op(target, fetch);
        self.send(
            target,
            Msg::Acc {
                id,
                addr,
                layout: layout.clone(),
                op,
                elem,
                fetch,
                data: data.into(),
            },
        );
        Ok(id)
    }

    /// [`Engine::accumulate`] of borrowed bytes into borrowed runs: the bytes are copied
    /// once, into the message ([`Msg::with_room`]).
    #[allow(clippy::too_many_arguments)]
    pub fn accumulate_from(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        op: AccOp,
        elem: Elem,
        data: &[u8],
        fetch: bool,
    ) -> Result<OpId, OscError> {
        self.check_accumulate(target, addr, runs, op, elem, data.len())?;
        if Self::in_pieces(runs, elem, data.len(), fetch) {
            return Ok(self.acc_pieces_to(target, addr, runs, op, elem, data));
        }
        let id = self.start_op(target, fetch);
        let m = Msg::Acc {
            id,
            addr,
            layout: Layout {
                runs: runs.to_vec(),
            },
            op,
            elem,
            fetch,
            data: Default::default(),
        };
        self.send(target, m.with_room(data));
        Ok(id)
    }

    /// Does an accumulate go in pieces of [`ACC_PIECE`] bytes: large, without result (one
    /// result would come back in pieces), and no element split between two runs (a piece
    /// holds whole elements)?
    fn in_pieces(runs: &[(i64, u64)], elem: Elem, data_len: usize, fetch: bool) -> bool {
        let size = elem.size() as u64;
        !fetch && data_len > ACC_PIECE && runs.iter().all(|r| r.1.is_multiple_of(size))
    }

    /// Send an accumulate (checked, [`Engine::in_pieces`]) as messages of at most
    /// [`ACC_PIECE`] bytes of whole elements, in order: the pieces reach the target in that
    /// order, each element in one of them (MPI's atomicity is per element, and
    /// accumulate_ordering is kept between whole operations, which follow one another).
    #[allow(clippy::too_many_arguments)]
    fn acc_pieces_to(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        op: AccOp,
        elem: Elem,
        data: &[u8],
    ) -> OpId {
        let size = elem.size();
        let piece = ((ACC_PIECE / size).max(1) * size) as u64;
        let mut id = 0;
        let mut cur: Vec<(i64, u64)> = Vec::new();
        let (mut cur_len, mut at) = (0u64, 0usize);
        let mut emit = |e: &mut Self, cur: &mut Vec<(i64, u64)>, len: u64| {
            id = e.start_op(target, false);
            let m = Msg::Acc {
                id,
                addr,
                layout: Layout {
                    runs: std::mem::take(cur),
                },
                op,
                elem,
                fetch: false,
                data: Default::default(),
            };
            let end = at + len as usize;
            e.send(target, m.with_room(&data[at..end]));
            at = end;
        };
        for &(off, len) in runs {
            let mut k = 0u64;
            while k < len {
                // (Runs and pieces are whole elements: so is every part of a run.)
                let take = (len - k).min(piece - cur_len);
                cur.push((off + k as i64, take));
                (cur_len, k) = (cur_len + take, k + take);
                if cur_len == piece {
                    emit(self, &mut cur, cur_len);
                    cur_len = 0;
                }
            }
        }
        if cur_len > 0 {
            emit(self, &mut cur, cur_len);
        }
        // (Every piece is complete at the origin once sent, as the operation is: any of
        // their ids answers for it.)
        id
    }

    /// The origin's checks of an accumulate of `data_len` origin bytes into `runs` at
    /// `addr` of `target` (rank, epoch, range, operation, lengths), for a module that applies
    /// it itself and so must refuse exactly what this engine would.
    pub fn check_accumulate(
        &self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        op: AccOp,
        elem: Elem,
        data_len: usize,
    ) -> Result<(), OscError> {
        self.check_epoch(target)?;
        self.check_accumulate_operands(target, addr, runs, op, elem, data_len)
    }

    /// [`Engine::check_accumulate`] but for the epoch: for a module that runs an operation
    /// in an epoch the engine does not hold (osc-rdma's lent path's lock), whose other
    /// checks must be the same.
    pub fn check_accumulate_operands(
        &self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        op: AccOp,
        elem: Elem,
        data_len: usize,
    ) -> Result<(), OscError> {
        let len = Layout::len_of(runs);
        self.check_range(target, addr, runs)?;
        if !elem.supports(op) {
            return Err(OscError::Op(format!(
                "accumulate: {op:?} is not defined on {elem:?} elements"
            )));
        }
        let want = if op == AccOp::NoOp { 0 } else { len };
        if data_len as u64 != want {
            return Err(OscError::Arg(format!(
                "accumulate: {data_len} origin bytes for {len} target bytes"
            )));
        }
        // An element may span runs (`MPI_SHORT_INT`: the padding between its value and its
        // index splits it), but the layout holds whole elements.
        if !len.is_multiple_of(elem.size() as u64) {
            return Err(OscError::Arg(format!(
                "accumulate: a target layout of {len} bytes is not whole {}-byte {elem:?} elements",
                elem.size()
            )));
        }
        Ok(())
    }

    /// `MPI_Compare_and_swap`.
    pub fn compare_and_swap(
        &mut self,
        target: usize,
        addr: u64,
        elem: Elem,
        compare: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<OpId, OscError> {
        self.check_cas(target, addr, elem, &compare, &value)?;
        let id = self.start_op(target, true);
        self.send(
            target,
            Msg::Cas {
                id,
                addr,
                elem,
                compare,
                value,
            },
        );
        Ok(id)
    }

    /// The outcome of operation `id` once complete at the origin (spent when returned). An
    /// issued operation without an entry is one without a result (a put or accumulate,
    /// complete at once) or one already spent: nothing to return.
    pub fn poll_op(&mut self, id: OpId) -> Option<Result<Vec<u8>, OscError>> {
        match self.ops.get(&id) {
            Some(OpState::Done(_)) => match self.ops.remove(&id) {
                Some(OpState::Done(r)) => Some(r),
                _ => None,
            },
            Some(OpState::Pending) => None,
            None if id < self.next_id => Some(Ok(Vec::new())),
            None => Some(Err(OscError::Arg(format!("unknown operation {id}")))),
        }
    }

    /// Operations whose results are kept until polled (for tests of the engine's memory).
    #[cfg(test)]
    fn kept_ops(&self) -> usize {
        self.ops.len()
    }

    // ---- synchronization ----

    /// A fence decided by the host's collective (osc-rdma): may this process's fence be
    /// quiet? `Ok(true)`: no operation went as a message since its last fence and no reply
    /// is awaited; `Ok(false)`: the fence needs this engine's rounds
    /// ([`SyncCall::Fence`]); an error when a fence is not allowed now (as `sync`'s).
    pub fn fence_quiet(&self) -> Result<bool, OscError> {
        if let Some(p) = &self.pending {
            return Err(OscError::Sync(format!(
                "a synchronization ({p:?}) is still in progress"
            )));
        }
        if self.access.is_some() || self.exposure.is_some() || self.any_lock() {
            return Err(OscError::Sync(
                "MPI_Win_fence inside a post/start or lock epoch".into(),
            ));
        }
        Ok(self.ops_at_fence == self.next_id && self.awaiting.iter().all(|&a| a == 0))
    }

    /// End a fence that every member found quiet ([`Engine::fence_quiet`], agreed by the
    /// host's collective): nothing was sent as a message by anybody, so nothing is left to
    /// apply anywhere. No message and no round counted: every member skips the same rounds,
    /// so the message rounds stay numbered alike everywhere.
    pub fn fence_agreed(&mut self, succeed: bool) -> Result<(), OscError> {
        if !self.fence_quiet()? {
            return Err(OscError::Sync(
                "a fence agreed quiet on an engine that sent operations".into(),
            ));
        }
        self.fence_open = succeed;
        Ok(())
    }

    fn any_lock(&self) -> bool {
        self.lock_all || self.locks.iter().any(Option::is_some)
    }

    fn group(&self, g: &[usize]) -> Result<(), OscError> {
        g.iter().try_for_each(|&r| self.check_rank(r))
    }

    /// A target list of `t` alone, in the spare list's allocation.
    fn one_target(&mut self, t: usize) -> Vec<usize> {
        let mut v = std::mem::take(&mut self.spare);
        v.clear();
        v.push(t);
        v
    }

    /// Start synchronization `call` (see [`SyncCall`]).
    pub fn sync(&mut self, call: SyncCall) -> Result<(), OscError> {
        if let Some(p) = &self.pending {
            return Err(OscError::Sync(format!(
                "a synchronization ({p:?}) is still in progress"
            )));
        }
        let n = self.size();
        match call {
            SyncCall::Fence { succeed } => {
                if self.access.is_some() || self.exposure.is_some() || self.any_lock() {
                    return Err(OscError::Sync(
                        "MPI_Win_fence inside a post/start or lock epoch".into(),
                    ));
                }
                // Quiet: no operation went as a message since the last fence.
                let quiet = std::mem::replace(&mut self.ops_at_fence, self.next_id) == self.next_id;
                for p in 0..n {
                    self.send(p, if quiet { Msg::FenceQuiet } else { Msg::Fence });
                }
                self.fences_sent += 1;
                self.pending = Some(Pending::Fence {
                    succeed,
                    done: false,
                });
                self.advance_fence();
            }
            SyncCall::Post(g) => {
                self.group(&g)?;
                if self.exposure.is_some() {
                    return Err(OscError::Sync(
                        "MPI_Win_post: an exposure epoch is open already (MPI_Win_wait ends it)"
                            .into(),
                    ));
                }
                for &p in &g {
                    self.send(p, Msg::Post);
                }
                self.exposure = Some(g);
            }
            SyncCall::Start(g) => {
                self.group(&g)?;
                if self.access.is_some() || self.any_lock() {
                    return Err(OscError::Sync(
                        "MPI_Win_start: an access epoch is open already".into(),
                    ));
                }
                self.fence_open = false;
                self.pending = Some(Pending::Start(g));
            }
            SyncCall::Complete => {
                let Some(g) = self.access.take() else {
                    return Err(OscError::Sync(
                        "MPI_Win_complete without MPI_Win_start".into(),
                    ));
                };
                for &p in &g {
                    self.send(p, Msg::Complete);
                }
                self.pending = Some(Pending::Replies(g));
            }
            SyncCall::Wait => {
                if self.exposure.is_none() {
                    return Err(OscError::Sync("MPI_Win_wait without MPI_Win_post".into()));
                }
                self.pending = Some(Pending::Wait);
            }
            SyncCall::Lock {
                kind,
                target,
                nocheck,
            } => {
                self.check_rank(target)?;
                if self.lock_all || self.locks[target].is_some() {
                    return Err(OscError::Sync(format!(
                        "MPI_Win_lock: this process holds a lock on rank {target} already"
                    )));
                }
                self.fence_open = false;
                self.lock(target, kind, nocheck);
                // Only a lock on this process's own window waits for the grant (see the
                // module's documentation), and a lock word found held.
                let granted = self.locks[target].is_some_and(|h| h.granted);
                if (target == self.me || self.has_lock_word(target)) && !granted {
                    self.pending = Some(Pending::Locks(self.one_target(target)));
                }
            }
            SyncCall::LockAll { nocheck } => {
                if self.any_lock() {
                    return Err(OscError::Sync(
                        "MPI_Win_lock_all: this process holds a lock already".into(),
                    ));
                }
                self.fence_open = false;
                self.lock_all = true;
                for t in 0..n {
                    self.lock(t, LockKind::Shared, nocheck);
                }
                if !nocheck {
                    // Its own window's grant, and every word (taken together or not at all).
                    let mut g = self.one_target(self.me);
                    g.extend((0..n).filter(|&t| t != self.me && self.has_lock_word(t)));
                    if self.take_words(&g) && self.locks[self.me].is_some_and(|h| h.granted) {
                        self.spare = g;
                    } else {
                        self.pending = Some(Pending::Locks(g));
                    }
                }
            }
            SyncCall::Unlock(target) => {
                self.check_rank(target)?;
                if self.lock_all || self.locks[target].is_none() {
                    return Err(OscError::Sync(format!(
                        "MPI_Win_unlock: rank {target} is not locked by MPI_Win_lock"
                    )));
                }
                self.unlock(target);
                self.pending = Some(Pending::Acks(self.one_target(target)));
            }
            SyncCall::UnlockAll => {
                if !self.lock_all {
                    return Err(OscError::Sync(
                        "MPI_Win_unlock_all without MPI_Win_lock_all".into(),
                    ));
                }
                for t in 0..n {
                    self.unlock(t);
                }
                self.lock_all = false;
                self.pending = Some(Pending::Acks((0..n).collect()));
            }
            SyncCall::Flush(t) | SyncCall::FlushLocal(t) => {
                let local = matches!(call, SyncCall::FlushLocal(_));
                let targets = match t {
                    Some(t) => {
                        self.check_rank(t)?;
                        if self.locks[t].is_none() {
                            return Err(OscError::Sync(format!(
                                "flush: no passive-target epoch to rank {t} is open (MPI_Win_lock or MPI_Win_lock_all)"
                            )));
                        }
                        self.one_target(t)
                    }
                    None => {
                        if !self.any_lock() {
                            return Err(OscError::Sync(
                                "flush_all: no passive-target epoch is open".into(),
                            ));
                        }
                        (0..n).filter(|&t| self.locks[t].is_some()).collect()
                    }
                };
                if local {
                    self.pending = Some(Pending::Replies(targets));
                } else {
                    for &t in &targets {
                        if self.unacked[t] > 0 {
                            self.unacked[t] = 0;
                            self.send(t, Msg::Flush);
                            self.acks[t] += 1;
                        }
                    }
                    self.pending = Some(Pending::Acks(targets));
                }
            }
            SyncCall::Free => {
                if self.access.is_some() || self.exposure.is_some() || self.any_lock() {
                    return Err(OscError::Sync(
                        "MPI_Win_free with an access or exposure epoch open (lock, start or post)"
                            .into(),
                    ));
                }
                for p in 0..n {
                    self.send(p, Msg::Free);
                }
                self.pending = Some(Pending::Free);
            }
        }
        Ok(())
    }

    fn lock(&mut self, target: usize, kind: LockKind, nocheck: bool) {
        if !nocheck {
            if let Some(w) = &self.words[target] {
                // `lock_all` takes its words together (`take_words`), after this.
                let granted = !self.lock_all && try_acquire(w.word(), kind);
                self.locks[target] = Some(Held {
                    granted,
                    nocheck,
                    word: Some(kind),
                });
                return;
            }
            self.send(target, Msg::Lock(kind));
        }
        self.locks[target] = Some(Held {
            granted: nocheck,
            nocheck,
            word: None,
        });
    }

    fn unlock(&mut self, target: usize) {
        let held = self.locks[target].take().expect("checked by the caller");
        if let Some(kind) = held.word {
            // Given back once the operations sent as messages are complete at the target
            // (`sync_done`): the Ack of a Flush, and the replies awaited.
            self.releases.push((target, kind));
            if self.unacked[target] > 0 {
                self.unacked[target] = 0;
                self.send(target, Msg::Flush);
                self.acks[target] += 1;
            }
            return;
        }
        if held.nocheck && self.unacked[target] == 0 {
            // Nothing to release and nothing unacknowledged: the replies awaited suffice.
            return;
        }
        self.unacked[target] = 0;
        let m = if held.nocheck {
            Msg::Flush
        } else {
            Msg::Unlock
        };
        self.send(target, m);
        self.acks[target] += 1;
    }

    /// The first round of a fence is over when this process saw every member's `Fence`
    /// (everything aimed at it in the epoch is applied) and every reply it awaits: it says
    /// so with `Fenced`, so that no member starts the next epoch (a get of this memory)
    /// before.
    fn advance_fence(&mut self) {
        if let Some(Pending::Fence {
            succeed,
            done: false,
        }) = self.pending
        {
            if self.fences_seen.iter().all(|&s| s >= self.fences_sent)
                && self.awaiting.iter().all(|&a| a == 0)
            {
                // (A member's next round's fence may be here already only if this round was
                // quiet everywhere: it finished its own without waiting for this process.)
                if self.loud_round.contains(&self.fences_sent) {
                    self.fenced_sent += 1;
                    for p in 0..self.size() {
                        self.send(p, Msg::Fenced);
                    }
                }
                self.pending = Some(Pending::Fence {
                    succeed,
                    done: true,
                });
            }
        }
    }

    /// Did the synchronization started last finish? Its outcome then (a deferred error of an
    /// operation's target comes out here).
    pub fn sync_done(&mut self) -> Option<Result<(), OscError>> {
        self.advance_fence();
        if let Some(Pending::Locks(g)) = &mut self.pending {
            let g = std::mem::take(g);
            self.take_words(&g);
            self.pending = Some(Pending::Locks(g));
        }
        let done = match &self.pending {
            None => true,
            Some(Pending::Fence { done, .. }) => {
                *done && self.fenced_seen.iter().all(|&s| s >= self.fenced_sent)
            }
            Some(Pending::Start(g)) => g.iter().all(|&t| self.posts_seen[t] > 0),
            Some(Pending::Replies(g)) => g.iter().all(|&t| self.awaiting[t] == 0),
            Some(Pending::Wait) => self.exposure_complete(),
            Some(Pending::Locks(g)) => g.iter().all(|&t| self.locks[t].is_some_and(|h| h.granted)),
            Some(Pending::Acks(g)) => g
                .iter()
                .all(|&t| self.acks[t] == 0 && self.awaiting[t] == 0),
            Some(Pending::Free) => {
                self.frees_seen.iter().all(|&s| s > 0) && self.awaiting.iter().all(|&a| a == 0)
            }
        };
        if !done {
            return None;
        }
        match self.pending.take() {
            Some(Pending::Fence { succeed, .. }) => self.fence_open = succeed,
            Some(Pending::Start(g)) => {
                for &t in &g {
                    self.posts_seen[t] -= 1;
                }
                self.access = Some(g);
            }
            Some(Pending::Wait) => {
                for &o in self.exposure.take().iter().flatten() {
                    self.completes_seen[o] -= 1;
                }
            }
            Some(Pending::Acks(g)) => {
                // Every operation of the epoch is complete at these targets: their words go.
                for (t, kind) in self.releases.drain(..) {
                    if let Some(w) = &self.words[t] {
                        release(w.word(), kind);
                    }
                }
                self.spare = g;
            }
            Some(Pending::Replies(g) | Pending::Locks(g)) => self.spare = g,
            _ => {}
        }
        Some(self.deferred.take().map_or(Ok(()), Err))
    }

    /// Would `MPI_Win_wait` finish now?
    pub fn exposure_complete(&self) -> bool {
        self.exposure
            .as_ref()
            .is_some_and(|g| g.iter().all(|&o| self.completes_seen[o] > 0))
    }

    /// Carry the outbox's `Post`s and `Complete`s that the host's counters can
    /// ([`Counted`]): `add(peer, kind)` adds one to the counter of `peer` for this process
    /// and says whether it could (a peer whose counters it shares). A `Complete` is offered
    /// only when every message this process sent the peer is known applied
    /// ([`Engine::quiet`]): the counter would overtake them, where a message follows them.
    /// The host calls this once the transfers it moves itself to those peers are complete.
    /// The other messages stay queued, in order. How many went by counter.
    pub fn send_counted(&mut self, mut add: impl FnMut(usize, Counted) -> bool) -> usize {
        if !self
            .outbox
            .iter()
            .any(|(_, m)| matches!(m, Msg::Post | Msg::Complete))
        {
            return 0;
        }
        let mut out = std::mem::take(&mut self.outbox);
        let before = out.len();
        out.retain(|(peer, m)| {
            let kind = match m {
                Msg::Post => Counted::Post,
                Msg::Complete if self.quiet(*peer) => Counted::Complete,
                _ => return true,
            };
            !add(*peer, kind)
        });
        let n = before - out.len();
        self.outbox = out;
        n
    }

    /// Add what the host's counters of posts and completes made to this process grew by
    /// since they were last read (`posts(peer)`, `completes(peer)`: their cumulative
    /// counts) to what came as messages: only those of the targets a starting access epoch
    /// waits for and of the origins of the open exposure epoch are read. True when one grew.
    pub fn absorb_counts(
        &mut self,
        posts: impl Fn(usize) -> u64,
        completes: impl Fn(usize) -> u64,
    ) -> bool {
        let mut grew = false;
        if let Some(Pending::Start(g)) = &self.pending {
            for &t in g {
                let c = posts(t);
                if c > self.posts_counted[t] {
                    self.posts_seen[t] += c - self.posts_counted[t];
                    self.posts_counted[t] = c;
                    grew = true;
                }
            }
        }
        if let Some(g) = &self.exposure {
            for &o in g {
                let c = completes(o);
                if c > self.completes_counted[o] {
                    self.completes_seen[o] += c - self.completes_counted[o];
                    self.completes_counted[o] = c;
                    grew = true;
                }
            }
        }
        grew
    }

    /// Is an access epoch of `MPI_Win_start` waiting for posts, or an exposure epoch open:
    /// may [`Engine::absorb_counts`] find anything?
    pub fn counts_awaited(&self) -> bool {
        self.exposure.is_some() || matches!(self.pending, Some(Pending::Start(_)))
    }

    /// Is an access or exposure epoch open, or a synchronization in progress?
    pub fn busy(&self) -> bool {
        self.pending.is_some()
            || self.access.is_some()
            || self.exposure.is_some()
            || self.any_lock()
    }

    // ---- dynamic windows ----

    /// Attach `region` at address `base`.
    pub fn attach(&mut self, base: u64, region: S) -> Result<(), OscError> {
        if !self.dynamic {
            return Err(OscError::Attach(
                "MPI_Win_attach on a window not made by MPI_Win_create_dynamic".into(),
            ));
        }
        let end = base.saturating_add(region.len() as u64);
        if self
            .segments
            .iter()
            .any(|(b, s)| base < b + s.len() as u64 && *b < end)
        {
            return Err(OscError::Attach(format!(
                "MPI_Win_attach: {base:#x}..{end:#x} overlaps memory attached already"
            )));
        }
        self.segments.push((base, region));
        Ok(())
    }

    /// Detach the region attached at `base`.
    pub fn detach(&mut self, base: u64) -> Result<(), OscError> {
        if !self.dynamic {
            return Err(OscError::Attach(
                "MPI_Win_detach on a window not made by MPI_Win_create_dynamic".into(),
            ));
        }
        let Some(i) = self.segments.iter().position(|(b, _)| *b == base) else {
            return Err(OscError::Attach(format!(
                "MPI_Win_detach: no memory is attached at {base:#x}"
            )));
        };
        self.segments.remove(i);
        Ok(())
    }

    // ---- target side ----

    /// The region, offset and length of each piece of each run of `layout` at `addr`, or
    /// why not. A run may span regions attached side by side (a dynamic window's).
    fn locate(&self, addr: u64, layout: &Layout) -> Result<Vec<(usize, usize, usize)>, Refusal> {
        let mut out = Vec::with_capacity(layout.runs.len());
        self.locate_into(addr, layout, &mut out)?;
        Ok(out)
    }

    /// [`Engine::locate`] into `out` (cleared first).
    fn locate_into(
        &self,
        addr: u64,
        layout: &Layout,
        out: &mut Vec<(usize, usize, usize)>,
    ) -> Result<(), Refusal> {
        out.clear();
        for &(off, len) in &layout.runs {
            let mut start = i128::from(addr) + i128::from(off);
            let end = start + i128::from(len);
            while start < end {
                let found = self.segments.iter().enumerate().find(|(_, (b, s))| {
                    start >= i128::from(*b) && start < i128::from(*b) + s.len() as i128
                });
                let Some((i, (b, s))) = found else {
                    return Err(Refusal {
                        range: true,
                        msg: format!(
                            "bytes {start:#x}..{end:#x} are outside rank {}'s window memory",
                            self.me
                        ),
                    });
                };
                let seg_end = i128::from(*b) + s.len() as i128;
                let piece_end = end.min(seg_end);
                out.push((
                    i,
                    (start - i128::from(*b)) as usize,
                    (piece_end - start) as usize,
                ));
                start = piece_end;
            }
        }
        Ok(())
    }

    fn gather(&self, runs: &[(usize, usize, usize)]) -> Vec<u8> {
        let mut out = Vec::new();
        for &(s, o, n) in runs {
            out.extend_from_slice(self.segments[s].1.read(o, n));
        }
        out
    }

    fn apply_put(&mut self, addr: u64, layout: &Layout, data: &[u8]) -> Result<(), Refusal> {
        let mut runs = std::mem::take(&mut self.pieces);
        let r = self
            .locate_into(addr, layout, &mut runs)
            .and_then(|()| self.put_pieces(&runs, data));
        self.pieces = runs;
        r
    }

    fn put_pieces(&mut self, runs: &[(usize, usize, usize)], data: &[u8]) -> Result<(), Refusal> {
        if runs.iter().map(|r| r.2).sum::<usize>() != data.len() {
            return Err(Refusal {
                range: false,
                msg: "put: data and layout lengths differ".into(),
            });
        }
        let mut at = 0;
        for &(s, o, n) in runs {
            self.segments[s].1.write(o, &data[at..at + n]);
            at += n;
        }
        Ok(())
    }

    fn apply_acc(
        &mut self,
        addr: u64,
        layout: &Layout,
        op: AccOp,
        elem: Elem,
        data: &[u8],
        fetch: bool,
    ) -> Result<Vec<u8>, Refusal> {
        let mut runs = std::mem::take(&mut self.pieces);
        let r = self
            .locate_into(addr, layout, &mut runs)
            .and_then(|()| self.acc_pieces(&runs, op, elem, data, fetch));
        self.pieces = runs;
        r
    }

    fn acc_pieces(
        &mut self,
        runs: &[(usize, usize, usize)],
        op: AccOp,
        elem: Elem,
        data: &[u8],
        fetch: bool,
    ) -> Result<Vec<u8>, Refusal> {
        let bad = |msg: String| Refusal { range: false, msg };
        let total: usize = runs.iter().map(|r| r.2).sum();
        if op != AccOp::NoOp && total != data.len() {
            return Err(bad("accumulate: data and layout lengths differ".into()));
        }
        if !elem.supports(op) || !total.is_multiple_of(elem.size()) {
            return Err(bad(format!(
                "accumulate: {op:?} on {elem:?} over {total} bytes, not whole elements"
            )));
        }
        let old = if fetch { self.gather(runs) } else { Vec::new() };
        if op != AccOp::NoOp && runs.iter().any(|r| !r.2.is_multiple_of(elem.size())) {
            // An element spans runs: computed on the gathered elements, then scattered.
            let mut cur = if fetch {
                old.clone()
            } else {
                self.gather(runs)
            };
            accumulate_with(op, elem, &mut cur, data, self.host).map_err(|e| bad(e.to_string()))?;
            let mut at = 0;
            for &(s, o, n) in runs {
                self.segments[s].1.write(o, &cur[at..at + n]);
                at += n;
            }
        } else if op != AccOp::NoOp {
            // In place, one pass over the target's memory and the data (no scratch copy out
            // and back, no allocation). A refusal of the host's arithmetic depends on the
            // operation and type only, so it comes with the first run, before any write.
            let host = self.host;
            let mut at = 0;
            for &(s, o, n) in runs {
                let origin = &data[at..at + n];
                self.segments[s]
                    .1
                    .modify(o, n, |t| accumulate_with(op, elem, t, origin, host))
                    .map_err(|e| bad(e.to_string()))?;
                at += n;
            }
        }
        Ok(old)
    }

    fn apply_cas(
        &mut self,
        addr: u64,
        elem: Elem,
        compare: &[u8],
        value: &[u8],
    ) -> Result<Vec<u8>, Refusal> {
        let runs = self.locate(addr, &Layout::contiguous(elem.size() as u64))?;
        let old = self.gather(&runs);
        if compare.len() != old.len() || value.len() != old.len() {
            return Err(Refusal {
                range: false,
                msg: "compare_and_swap: one element each".into(),
            });
        }
        if old == compare {
            if let Some(&(s, o, _)) = runs.first() {
                self.segments[s].1.write(o, value);
            }
        }
        Ok(old)
    }

    fn grant_waiting(&mut self) {
        while let Some(&(p, kind)) = self.lock_queue.front() {
            let ok = match kind {
                LockKind::Exclusive => self.exclusive_holder.is_none() && self.shared_holders == 0,
                LockKind::Shared => self.exclusive_holder.is_none(),
            };
            // The node's origins hold the word without messages: it must be free as well.
            let ok = ok
                && match &self.words[self.me] {
                    Some(w) => try_acquire(w.word(), kind),
                    None => true,
                };
            if !ok {
                break;
            }
            if self.words[self.me].is_some() {
                self.word_held[p] = Some(kind);
            }
            self.lock_queue.pop_front();
            match kind {
                LockKind::Exclusive => self.exclusive_holder = Some(p),
                LockKind::Shared => self.shared_holders += 1,
            }
            self.send(p, Msg::Granted);
            if std::mem::take(&mut self.blocked[p]) {
                self.ready.push(p);
            }
        }
    }

    /// Does `msg` belong to its sender's passive epochs (held while its lock request waits)?
    /// Answers to this process's own requests and the active-target messages never wait.
    fn passive(msg: &Msg) -> bool {
        matches!(
            msg,
            Msg::Put { .. }
                | Msg::Get { .. }
                | Msg::Acc { .. }
                | Msg::Cas { .. }
                | Msg::Lock(_)
                | Msg::Unlock
                | Msg::Flush
        )
    }

    /// Apply a message from `from`.
    pub fn handle(&mut self, from: usize, msg: Msg) {
        if from >= self.size() {
            tracing::warn!(from, "osc-am: message from outside the window dropped");
            return;
        }
        if self.blocked[from] && Self::passive(&msg) {
            self.held[from].push_back(msg);
            return;
        }
        self.apply(from, msg);
        self.apply_ready();
        self.advance_fence();
    }

    /// Apply what the origins granted meanwhile sent behind their request, in order, until
    /// one of them is blocked again (a next lock request among it).
    fn apply_ready(&mut self) {
        while let Some(p) = self.ready.pop() {
            while !self.blocked[p] {
                let Some(m) = self.held[p].pop_front() else {
                    break;
                };
                self.apply(p, m);
            }
        }
    }

    /// Messages held for origins whose lock request waits (for tests of the target's memory).
    #[cfg(test)]
    fn held_messages(&self) -> usize {
        self.held.iter().map(VecDeque::len).sum()
    }

    fn apply(&mut self, from: usize, msg: Msg) {
        match msg {
            Msg::Put { addr, layout, data } => {
                if let Err(r) = self.apply_put(addr, &layout, &data) {
                    self.send(from, Msg::Refused(r));
                }
            }
            Msg::Get { id, addr, layout } => {
                let result = self.locate(addr, &layout).map(|runs| self.gather(&runs));
                self.send(from, Msg::Reply { id, result });
            }
            Msg::Acc {
                id,
                addr,
                layout,
                op,
                elem,
                fetch,
                data,
            } => {
                if let Some(w) = &self.acc_word {
                    acc_lock(w.word());
                }
                let result = self.apply_acc(addr, &layout, op, elem, &data, fetch);
                if let Some(w) = &self.acc_word {
                    acc_unlock(w.word());
                }
                match (fetch, result) {
                    (true, result) => self.send(from, Msg::Reply { id, result }),
                    (false, Err(r)) => self.send(from, Msg::Refused(r)),
                    (false, Ok(_)) => {}
                }
            }
            Msg::Cas {
                id,
                addr,
                elem,
                compare,
                value,
            } => {
                if let Some(w) = &self.acc_word {
                    acc_lock(w.word());
                }
                let result = self.apply_cas(addr, elem, &compare, &value);
                if let Some(w) = &self.acc_word {
                    acc_unlock(w.word());
                }
                self.send(from, Msg::Reply { id, result });
            }
            Msg::Reply { id, result } => {
                if let Some(st) = self.ops.get_mut(&id) {
                    if matches!(st, OpState::Pending) {
                        *st = OpState::Done(result.map_err(refusal_error));
                        self.awaiting[from] = self.awaiting[from].saturating_sub(1);
                    }
                }
            }
            Msg::Refused(r) => {
                self.deferred.get_or_insert(refusal_error(r));
            }
            Msg::Fence => {
                self.fences_seen[from] += 1;
                self.loud_round[from] = self.fences_seen[from];
            }
            Msg::FenceQuiet => self.fences_seen[from] += 1,
            Msg::Fenced => self.fenced_seen[from] += 1,
            Msg::Post => self.posts_seen[from] += 1,
            Msg::Complete => self.completes_seen[from] += 1,
            Msg::Lock(kind) => {
                self.lock_queue.push_back((from, kind));
                self.grant_waiting();
                if self.lock_queue.iter().any(|&(p, _)| p == from) {
                    self.blocked[from] = true;
                }
            }
            Msg::Granted => {
                if let Some(h) = self.locks[from].as_mut() {
                    h.granted = true;
                }
            }
            Msg::Unlock => {
                if self.exclusive_holder == Some(from) {
                    self.exclusive_holder = None;
                } else {
                    self.shared_holders = self.shared_holders.saturating_sub(1);
                }
                if let (Some(kind), Some(w)) = (self.word_held[from].take(), &self.words[self.me]) {
                    release(w.word(), kind);
                }
                self.send(from, Msg::Ack);
                self.grant_waiting();
            }
            Msg::Flush => self.send(from, Msg::Ack),
            Msg::Ack => self.acks[from] = self.acks[from].saturating_sub(1),
            Msg::Free => self.frees_seen[from] += 1,
        }
    }
}

#[cfg(test)]
// The simulated ranks are indices into several parallel tables.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use crate::lockword::EXCL;
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Engines over a simulated network: one FIFO queue per ordered pair; `pick` chooses which
    /// non-empty queue delivers next (any interleaving across pairs is legal).
    struct Net {
        e: Vec<Engine<Vec<u8>>>,
        queues: HashMap<(usize, usize), VecDeque<Msg>>,
    }

    impl Net {
        fn new(n: usize, bytes: usize) -> Self {
            let info = vec![
                TargetInfo {
                    size: bytes as u64,
                    disp_unit: 1
                };
                n
            ];
            Self {
                e: (0..n)
                    .map(|r| Engine::new(r, info.clone(), Some(vec![0u8; bytes])))
                    .collect(),
                queues: HashMap::new(),
            }
        }

        fn flush_outboxes(&mut self) {
            for (from, e) in self.e.iter_mut().enumerate() {
                while let Some((to, m)) = e.outbox().pop_front() {
                    // Through the encoding, as on the wire.
                    let m = Msg::decode(&m.encode()).expect("round trip");
                    self.queues.entry((from, to)).or_default().push_back(m);
                }
            }
        }

        /// Deliver one message chosen by `pick`; false when none is in flight.
        fn step(&mut self, pick: usize) -> bool {
            self.flush_outboxes();
            let mut live: Vec<(usize, usize)> = self
                .queues
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(k, _)| *k)
                .collect();
            if live.is_empty() {
                return false;
            }
            live.sort_unstable();
            let (from, to) = live[pick % live.len()];
            let m = self
                .queues
                .get_mut(&(from, to))
                .unwrap()
                .pop_front()
                .unwrap();
            self.e[to].handle(from, m);
            self.flush_outboxes();
            true
        }

        fn run(&mut self) {
            while self.step(0) {}
        }

        /// Run `call` on every rank in `ranks`, then deliver until all finished.
        fn sync_all(&mut self, ranks: &[usize], call: impl Fn(usize) -> SyncCall) {
            for &r in ranks {
                self.e[r].sync(call(r)).unwrap();
            }
            self.run();
            for &r in ranks {
                assert_eq!(self.e[r].sync_done(), Some(Ok(())), "rank {r}");
            }
        }

        fn mem(&self, r: usize) -> &[u8] {
            &self.e[r].segments[0].1
        }

        /// Give every rank the lock words of its node's ranks (`node[r]`: rank r's node),
        /// one shared atomic per rank; the words, for the tests to look at.
        fn with_words(&mut self, node: &[usize]) -> Vec<std::rc::Rc<AtomicU64>> {
            let words: Vec<_> = (0..node.len())
                .map(|_| std::rc::Rc::new(AtomicU64::new(0)))
                .collect();
            for r in 0..node.len() {
                for t in 0..node.len() {
                    if node[r] == node[t] {
                        self.e[r].set_lock_word(t, Box::new(words[t].clone()));
                    }
                }
            }
            words
        }

        /// Messages in flight whose first byte is `kind`, from `from`.
        fn sent(&mut self, from: usize, pred: impl Fn(&Msg) -> bool) -> usize {
            self.flush_outboxes();
            self.queues
                .iter()
                .filter(|((f, _), _)| *f == from)
                .map(|(_, q)| q.iter().filter(|m| pred(m)).count())
                .sum()
        }
    }

    #[test]
    fn a_lock_on_a_word_sends_no_message_and_unlock_waits_for_the_puts_acks() {
        let mut net = Net::new(3, 8);
        // Ranks 0 and 1 share a node; rank 2 is elsewhere.
        let words = net.with_words(&[0, 0, 1]);
        let excl = |t| SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: t,
            nocheck: false,
        };
        net.e[1].sync(excl(0)).unwrap();
        assert_eq!(net.e[1].sync_done(), Some(Ok(())), "free: held at once");
        assert_eq!(words[0].load(Ordering::Relaxed), EXCL);
        assert_eq!(net.sent(1, |m| matches!(m, Msg::Lock(_))), 0);
        net.e[1].put(0, 0, &Layout::contiguous(1), vec![7]).unwrap();
        net.e[1].sync(SyncCall::Unlock(0)).unwrap();
        assert_eq!(
            net.e[1].sync_done(),
            None,
            "the put is not acknowledged yet"
        );
        assert_eq!(words[0].load(Ordering::Relaxed), EXCL, "still held");
        assert_eq!(net.sent(1, |m| *m == Msg::Unlock), 0);
        assert_eq!(net.sent(1, |m| *m == Msg::Flush), 1);
        // Rank 2 (another node) asks by message: the target waits for the word.
        net.e[2].sync(excl(0)).unwrap();
        assert_eq!(net.e[2].sync_done(), Some(Ok(())), "lazy, as before");
        net.e[2].put(0, 0, &Layout::contiguous(1), vec![9]).unwrap();
        net.e[2].sync(SyncCall::Unlock(0)).unwrap();
        // Deliver everything but rank 1's Flush first: rank 2's request waits.
        net.flush_outboxes();
        let flush = net.queues.remove(&(1, 0)).unwrap();
        net.run();
        assert_eq!(net.e[2].sync_done(), None);
        assert_eq!(net.mem(0)[0], 0, "rank 2's put waits for the lock");
        assert!(!net.e[0].poll_locks(), "the word is rank 1's");
        net.queues.insert((1, 0), flush);
        net.run();
        assert_eq!(net.mem(0)[0], 7);
        assert_eq!(net.e[1].sync_done(), Some(Ok(())));
        assert_eq!(words[0].load(Ordering::Relaxed), 0, "given back");
        assert!(net.e[0].poll_locks(), "granted to rank 2 now");
        // Its put and unlock, held behind the request, were applied with the grant.
        assert_eq!(net.mem(0)[0], 9);
        net.run();
        assert_eq!(net.e[2].sync_done(), Some(Ok(())));
        assert_eq!(net.mem(0)[0], 9);
        assert_eq!(words[0].load(Ordering::Relaxed), 0);
        // Misuse is refused as before, and nothing is taken.
        assert!(matches!(
            net.e[1].sync(SyncCall::Unlock(0)),
            Err(OscError::Sync(_))
        ));
        net.sync_all(&[1], |_| SyncCall::Lock {
            kind: LockKind::Shared,
            target: 0,
            nocheck: false,
        });
        assert!(matches!(net.e[1].sync(excl(0)), Err(OscError::Sync(_))));
        assert!(matches!(
            net.e[1].sync(SyncCall::LockAll { nocheck: false }),
            Err(OscError::Sync(_))
        ));
        assert_eq!(words[0].load(Ordering::Relaxed), 1);
        net.sync_all(&[1], |_| SyncCall::Unlock(0));
        assert_eq!(words[0].load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_lock_all_takes_every_word_or_none() {
        let mut net = Net::new(3, 8);
        let words = net.with_words(&[0, 0, 0]);
        net.sync_all(&[2], |_| SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 1,
            nocheck: false,
        });
        net.e[0].sync(SyncCall::LockAll { nocheck: false }).unwrap();
        assert_eq!(net.e[0].sync_done(), None, "rank 1's word is held");
        assert_eq!(
            words[0].load(Ordering::Relaxed) + words[2].load(Ordering::Relaxed),
            0,
            "and none of the others is kept meanwhile"
        );
        net.sync_all(&[2], |_| SyncCall::Unlock(1));
        assert_eq!(net.e[0].sync_done(), Some(Ok(())));
        assert!(words.iter().all(|w| w.load(Ordering::Relaxed) == 1));
        net.sync_all(&[0], |_| SyncCall::UnlockAll);
        assert!(words.iter().all(|w| w.load(Ordering::Relaxed) == 0));
    }

    /// A flush of one target keeps its target list for the next: once warm, a flush and its
    /// end allocate nothing (the origin of a put-and-flush loop: osu_put_latency).
    #[test]
    fn a_warm_flush_of_one_target_allocates_nothing() {
        let mut net = Net::new(2, 8);
        net.e[0]
            .sync(SyncCall::Lock {
                kind: LockKind::Shared,
                target: 1,
                nocheck: false,
            })
            .unwrap();
        net.run();
        for _ in 0..2 {
            net.e[0].sync(SyncCall::Flush(Some(1))).unwrap();
            assert_eq!(net.e[0].sync_done(), Some(Ok(())));
        }
        let before = rmca_test_support::alloc_count::allocations();
        for _ in 0..100 {
            net.e[0].sync(SyncCall::Flush(Some(1))).unwrap();
            assert_eq!(net.e[0].sync_done(), Some(Ok(())));
        }
        assert_eq!(rmca_test_support::alloc_count::allocations() - before, 0);
        net.e[0].sync(SyncCall::Unlock(1)).unwrap();
        net.run();
        assert_eq!(net.e[0].sync_done(), Some(Ok(())));
    }

    /// The target applies a warm put and a large accumulate where they arrived, in place:
    /// no allocation (no scratch copy of the target's memory, no list of its pieces).
    #[test]
    fn the_target_applies_puts_and_accumulates_without_allocating() {
        let n = 1 << 20;
        let mut net = Net::new(2, n);
        let l = Layout::contiguous(n as u64);
        let acc = |v: u8| Msg::Acc {
            id: 0,
            addr: 0,
            layout: l.clone(),
            op: AccOp::Sum,
            elem: Elem::U8,
            fetch: false,
            data: vec![v; n].into(),
        };
        let put = Msg::Put {
            addr: 0,
            layout: l.clone(),
            data: vec![1; n].into(),
        };
        net.e[1].handle(0, put.clone());
        net.e[1].handle(0, acc(1));
        let (put, acc) = (put, acc(2));
        let before = rmca_test_support::alloc_count::allocations();
        net.e[1].handle(0, put);
        net.e[1].handle(0, acc);
        assert_eq!(rmca_test_support::alloc_count::allocations() - before, 0);
        assert!(net.e[1].outbox().is_empty(), "nothing refused");
        assert!(net.mem(1).iter().all(|&b| b == 3));
    }

    fn i32s(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    /// An accumulate word another thread (another process of the node) may hold.
    #[derive(Debug)]
    struct SharedWord(std::sync::Arc<AtomicU64>);

    impl crate::lockword::LockWord for SharedWord {
        fn word(&self) -> &AtomicU64 {
            &self.0
        }
    }

    /// The target applies an accumulate that came as a message only under its accumulate
    /// word: an origin of its node in the middle of its own read-modify-write of the element
    /// (by CMA, here a thread) loses nothing.
    #[test]
    #[allow(unsafe_code)]
    fn a_message_accumulate_waits_for_the_accumulate_word() {
        let mut net = Net::new(2, 8);
        let word = std::sync::Arc::new(AtomicU64::new(0));
        net.e[1].set_acc_word(Box::new(SharedWord(word.clone())));
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        let at = net.e[1].segments[0].1.as_mut_ptr() as usize;
        crate::lockword::acc_lock(&word);
        let (read, was_read) = std::sync::mpsc::channel();
        let holder = {
            let word = word.clone();
            std::thread::spawn(move || {
                let p = at as *mut i32;
                // SAFETY: the target's memory (alive until joined), under the word.
                let v = unsafe { p.read_volatile() };
                read.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(30));
                // SAFETY: as above.
                unsafe { p.write_volatile(v + 1) };
                crate::lockword::acc_unlock(&word);
            })
        };
        was_read.recv().unwrap();
        net.e[0]
            .accumulate(
                1,
                0,
                &Layout::contiguous(4),
                AccOp::Sum,
                Elem::I32,
                i32s(&[10]),
                false,
            )
            .unwrap();
        net.run();
        holder.join().unwrap();
        assert_eq!(net.mem(1)[..4], i32s(&[11]), "both updates");
        assert_eq!(word.load(Ordering::Relaxed), 0, "given back by the target");
        // A compare-and-swap takes it too (left free: it would wait forever otherwise).
        let id = net.e[0]
            .compare_and_swap(
                1,
                0,
                Elem::U32,
                11u32.to_ne_bytes().to_vec(),
                5u32.to_ne_bytes().to_vec(),
            )
            .unwrap();
        net.run();
        assert_eq!(net.e[0].poll_op(id), Some(Ok(11u32.to_ne_bytes().to_vec())));
        assert_eq!(net.mem(1)[..4], i32s(&[5]));
    }

    #[test]
    fn quiet_until_every_message_to_the_target_is_known_applied() {
        let mut net = Net::new(2, 8);
        net.sync_all(&[0, 1], |_| SyncCall::LockAll { nocheck: true });
        assert!(net.e[0].quiet(1));
        net.e[0]
            .accumulate(
                1,
                0,
                &Layout::contiguous(4),
                AccOp::Sum,
                Elem::I32,
                i32s(&[1]),
                false,
            )
            .unwrap();
        assert!(!net.e[0].quiet(1), "an accumulate without reply sent");
        net.e[0].sync(SyncCall::Flush(Some(1))).unwrap();
        assert!(!net.e[0].quiet(1), "flushed, not acknowledged");
        net.run();
        assert_eq!(net.e[0].sync_done(), Some(Ok(())));
        assert!(net.e[0].quiet(1));
        let id = net.e[0]
            .accumulate(
                1,
                0,
                &Layout::contiguous(4),
                AccOp::Sum,
                Elem::I32,
                i32s(&[1]),
                true,
            )
            .unwrap();
        assert!(!net.e[0].quiet(1), "a reply awaited");
        net.run();
        assert_eq!(net.e[0].poll_op(id), Some(Ok(i32s(&[1]))));
        assert!(net.e[0].quiet(1) && net.e[0].quiet(0));
        net.sync_all(&[0, 1], |_| SyncCall::UnlockAll);
    }

    /// Fences agreed quiet by a host's collective ([`Engine::fence_agreed`]) between
    /// message rounds: no message, no round counted, so the message rounds that follow
    /// (loud at one member only) still match across members and apply what was sent.
    #[test]
    fn fences_agreed_quiet_between_message_rounds() {
        let mut net = Net::new(3, 16);
        let all = [0, 1, 2];
        net.sync_all(&all, |_| SyncCall::Fence { succeed: true });
        for round in 0..4 {
            // Quiet everywhere: agreed, nothing sent.
            for r in 0..3 {
                assert_eq!(net.e[r].fence_quiet(), Ok(true), "round {round}, rank {r}");
                net.e[r].fence_agreed(true).unwrap();
                assert!(net.e[r].outbox().is_empty());
            }
            // Loud at one member: its fence needs the message rounds, everybody's.
            let loud = round % 3;
            let t = (loud + 1) % 3;
            net.e[loud]
                .put(t, 0, &Layout::contiguous(4), i32s(&[round as i32 + 1]))
                .unwrap();
            for r in 0..3 {
                assert_eq!(net.e[r].fence_quiet(), Ok(r != loud));
            }
            assert!(matches!(
                net.e[loud].fence_agreed(true),
                Err(OscError::Sync(_))
            ));
            net.sync_all(&all, |_| SyncCall::Fence { succeed: true });
            assert_eq!(&net.mem(t)[..4], &i32s(&[round as i32 + 1])[..]);
        }
        // NOSUCCEED by agreement closes the epoch; a fence inside a lock epoch is refused.
        for r in 0..3 {
            net.e[r].fence_agreed(false).unwrap();
        }
        assert!(matches!(
            net.e[0].put(1, 0, &Layout::contiguous(1), vec![1]),
            Err(OscError::Sync(_))
        ));
        net.sync_all(&[0], |_| SyncCall::LockAll { nocheck: true });
        assert!(matches!(net.e[0].fence_quiet(), Err(OscError::Sync(_))));
    }

    #[test]
    fn fence_epoch_put_get_accumulate() {
        let mut net = Net::new(3, 16);
        let all = [0, 1, 2];
        net.sync_all(&all, |_| SyncCall::Fence { succeed: true });
        for r in 0..3 {
            let t = (r + 1) % 3;
            net.e[r]
                .put(t, 0, &Layout::contiguous(4), i32s(&[r as i32 + 10]))
                .unwrap();
            net.e[r]
                .accumulate(
                    0,
                    4,
                    &Layout::contiguous(4),
                    AccOp::Sum,
                    Elem::I32,
                    i32s(&[r as i32 + 1]),
                    false,
                )
                .unwrap();
        }
        net.sync_all(&all, |_| SyncCall::Fence { succeed: true });
        assert_eq!(&net.mem(1)[..4], &i32s(&[10])[..]);
        assert_eq!(&net.mem(0)[..8], &i32s(&[12, 6])[..]);
        let id = net.e[2].get(0, 0, &Layout::contiguous(8)).unwrap();
        assert_eq!(
            net.e[2].poll_op(id),
            None,
            "a get completes only with its reply"
        );
        net.sync_all(&all, |_| SyncCall::Fence { succeed: false });
        assert_eq!(net.e[2].poll_op(id), Some(Ok(i32s(&[12, 6]))));
        // NOSUCCEED closed the epoch.
        assert!(matches!(
            net.e[0].put(1, 0, &Layout::contiguous(1), vec![1]),
            Err(OscError::Sync(_))
        ));
    }

    #[test]
    fn operations_without_results_keep_nothing_at_the_origin() {
        let mut net = Net::new(2, 16);
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        let mut ids = Vec::new();
        for i in 0..1000u32 {
            ids.push(
                net.e[0]
                    .put(1, 0, &Layout::contiguous(4), i.to_le_bytes().to_vec())
                    .unwrap(),
            );
            net.e[0]
                .accumulate(
                    1,
                    4,
                    &Layout::contiguous(4),
                    AccOp::Sum,
                    Elem::I32,
                    i32s(&[1]),
                    false,
                )
                .unwrap();
        }
        // MPI_Put and MPI_Accumulate are never polled: nothing may pile up for them.
        assert_eq!(net.e[0].kept_ops(), 0);
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        assert_eq!(
            &net.mem(1)[..8],
            &[i32s(&[999]), i32s(&[1000])].concat()[..]
        );
        // MPI_Rput's request still completes, with no result bytes.
        assert_eq!(net.e[0].poll_op(ids[0]), Some(Ok(Vec::new())));
        assert!(matches!(
            net.e[0].poll_op(1 << 40),
            Some(Err(OscError::Arg(_)))
        ));
    }

    #[test]
    fn derived_layouts_scatter_and_gather() {
        let mut net = Net::new(2, 16);
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        let l = Layout {
            runs: vec![(0, 2), (8, 2)],
        };
        net.e[0].put(1, 4, &l, vec![1, 2, 3, 4]).unwrap();
        let g = net.e[0].get(1, 4, &l).unwrap();
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        assert_eq!(
            net.mem(1),
            &[0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 3, 4, 0, 0]
        );
        assert_eq!(net.e[0].poll_op(g), Some(Ok(vec![1, 2, 3, 4])));
    }

    /// A large accumulate without result goes as pieces of whole elements of at most
    /// ACC_PIECE bytes, every element combined once; a fetching one as one message.
    #[test]
    fn large_accumulates_without_result_go_in_pieces() {
        let n = ACC_PIECE / 8 * 5 + 3; // elements of 8 bytes: 2.5 pieces and a bit per run
        let mut net = Net::new(2, 16 * n + 64);
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        let l = Layout {
            runs: vec![(8 * n as i64 + 64, 8 * n as u64), (0, 8 * n as u64)],
        };
        let one: Vec<u8> = (0..2 * n as u64).flat_map(|i| i.to_ne_bytes()).collect();
        net.e[0]
            .accumulate_from(1, 0, &l.runs, AccOp::Sum, Elem::U64, &one, false)
            .unwrap();
        let sizes: Vec<usize> = net.e[0]
            .outbox()
            .iter()
            .map(|(_, m)| match m {
                Msg::Acc { data, layout, .. } => {
                    assert_eq!(data.len() as u64, layout.len());
                    data.len()
                }
                m => panic!("{m:?}"),
            })
            .collect();
        assert_eq!(sizes.len(), (16 * n).div_ceil(ACC_PIECE), "{sizes:?}");
        assert!(
            sizes.iter().all(|&s| s <= ACC_PIECE && s % 8 == 0),
            "{sizes:?}"
        );
        net.e[0]
            .accumulate(1, 0, &l, AccOp::Sum, Elem::U64, one.clone(), false)
            .unwrap();
        let id = net.e[0]
            .accumulate(1, 0, &l, AccOp::Sum, Elem::U64, one.clone(), true)
            .unwrap();
        assert_eq!(
            net.e[0].outbox().len(),
            2 * sizes.len() + 1,
            "fetching: one message"
        );
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        let got = |k: u64| -> Vec<u8> {
            (0..2 * n as u64)
                .flat_map(|i| (k * i).to_ne_bytes())
                .collect()
        };
        assert_eq!(net.e[0].poll_op(id), Some(Ok(got(2))));
        let all = net.e[0].get(1, 0, &l).unwrap();
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: false });
        assert_eq!(net.e[0].poll_op(all), Some(Ok(got(3))));
    }

    /// A large accumulate over two runs, fetching: every element combined once, the old
    /// contents returned whole.
    #[test]
    fn large_accumulates_combine_every_element_once() {
        let n = 64 * 1024 / 4 * 3 + 5;
        let mut net = Net::new(2, 8 * n + 64);
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        let l = Layout {
            runs: vec![(4 * n as i64 + 64, 4 * n as u64), (0, 4 * n as u64)],
        };
        let before: Vec<i32> = (0..2 * n as i32).collect();
        net.e[0].put(1, 0, &l, i32s(&before)).unwrap();
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        let add: Vec<i32> = (0..2 * n as i32).map(|i| 3 * i + 1).collect();
        let id = net.e[0]
            .accumulate(1, 0, &l, AccOp::Sum, Elem::I32, i32s(&add), true)
            .unwrap();
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        assert_eq!(net.e[0].poll_op(id), Some(Ok(i32s(&before))));
        let got = net.e[0].get(1, 0, &l).unwrap();
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: false });
        let want: Vec<i32> = (0..2 * n as i32).map(|i| 4 * i + 1).collect();
        assert_eq!(net.e[0].poll_op(got), Some(Ok(i32s(&want))));
    }

    /// `MPI_SHORT_INT` as C lays it out: the value, 2 bytes of padding, the index. Each
    /// packed 6-byte pair then spans two runs; MINLOC applies to whole pairs, fetching the
    /// old ones, and a layout of no whole number of pairs is refused.
    #[test]
    fn pairs_split_by_padding_accumulate_whole() {
        let pair = |v: i16, i: i32| [&v.to_ne_bytes()[..], &i.to_ne_bytes()[..]].concat();
        let mut net = Net::new(2, 16);
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        let l = Layout {
            runs: vec![(0, 2), (4, 4), (8, 2), (12, 4)],
        };
        net.e[0]
            .put(1, 0, &l, [pair(5, 50), pair(5, 50)].concat())
            .unwrap();
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        let id = net.e[0]
            .accumulate(
                1,
                0,
                &l,
                AccOp::MinLoc,
                Elem::PairI16,
                [pair(3, 7), pair(5, 9)].concat(),
                true,
            )
            .unwrap();
        assert!(matches!(
            net.e[0].accumulate(
                1,
                0,
                &Layout {
                    runs: vec![(0, 2), (4, 2)]
                },
                AccOp::MinLoc,
                Elem::PairI16,
                vec![0; 4],
                false,
            ),
            Err(OscError::Arg(_))
        ));
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        assert_eq!(
            net.e[0].poll_op(id),
            Some(Ok([pair(5, 50), pair(5, 50)].concat()))
        );
        let got = net.e[0].get(1, 0, &l).unwrap();
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: false });
        // The lower value wins; the tie keeps the lower index.
        assert_eq!(
            net.e[0].poll_op(got),
            Some(Ok([pair(3, 7), pair(5, 9)].concat()))
        );
    }

    #[test]
    fn operations_outside_epochs_or_the_window_are_refused_at_the_origin() {
        let mut net = Net::new(2, 8);
        let l = Layout::contiguous(4);
        assert!(matches!(
            net.e[0].put(1, 0, &l, vec![0; 4]),
            Err(OscError::Sync(_))
        ));
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        assert!(matches!(
            net.e[0].put(1, 6, &l, vec![0; 4]),
            Err(OscError::Range(_))
        ));
        assert!(matches!(net.e[0].get(2, 0, &l), Err(OscError::Rank(_))));
        let neg = Layout {
            runs: vec![(-1, 1)],
        };
        assert!(matches!(net.e[0].get(1, 0, &neg), Err(OscError::Range(_))));
        assert!(matches!(
            net.e[0].accumulate(1, 0, &l, AccOp::BAnd, Elem::F32, vec![0; 4], false),
            Err(OscError::Op(_))
        ));
        assert!(matches!(
            net.e[0].sync(SyncCall::Complete),
            Err(OscError::Sync(_))
        ));
        assert!(matches!(
            net.e[0].sync(SyncCall::Wait),
            Err(OscError::Sync(_))
        ));
        assert!(matches!(
            net.e[0].sync(SyncCall::Unlock(1)),
            Err(OscError::Sync(_))
        ));
        assert!(matches!(
            net.e[0].sync(SyncCall::Flush(Some(1))),
            Err(OscError::Sync(_))
        ));
        assert!(matches!(
            net.e[0].sync(SyncCall::UnlockAll),
            Err(OscError::Sync(_))
        ));
        net.run();
        assert_eq!(net.mem(1), &[0; 8], "nothing was written");
    }

    #[test]
    fn the_target_refuses_what_its_memory_does_not_hold() {
        // A dynamic window: only the target knows its memory.
        let info = vec![TargetInfo::default(); 2];
        let mut net = Net {
            e: (0..2).map(|r| Engine::new(r, info.clone(), None)).collect(),
            queues: HashMap::new(),
        };
        net.e[1].attach(0x1000, vec![0u8; 8]).unwrap();
        assert!(matches!(
            net.e[1].attach(0x1004, vec![0u8; 8]),
            Err(OscError::Attach(_))
        ));
        net.sync_all(&[0, 1], |_| SyncCall::Fence { succeed: true });
        net.e[0]
            .put(1, 0x1004, &Layout::contiguous(4), vec![9; 4])
            .unwrap();
        net.e[0]
            .put(1, 0x1006, &Layout::contiguous(4), vec![7; 4])
            .unwrap();
        let g = net.e[0].get(1, 0x2000, &Layout::contiguous(1)).unwrap();
        net.e[0].sync(SyncCall::Fence { succeed: true }).unwrap();
        net.e[1].sync(SyncCall::Fence { succeed: true }).unwrap();
        net.run();
        assert!(matches!(
            net.e[0].sync_done(),
            Some(Err(OscError::Range(_)))
        ));
        assert_eq!(net.e[1].sync_done(), Some(Ok(())));
        assert!(matches!(net.e[0].poll_op(g), Some(Err(OscError::Range(_)))));
        assert_eq!(
            net.e[1].segments[0].1,
            [0, 0, 0, 0, 9, 9, 9, 9],
            "the refused put wrote nothing"
        );
        // A run across two regions attached side by side.
        net.e[1].attach(0x1008, vec![0u8; 4]).unwrap();
        net.e[0]
            .put(1, 0x1006, &Layout::contiguous(4), vec![5; 4])
            .unwrap();
        net.e[0].sync(SyncCall::Fence { succeed: true }).unwrap();
        net.e[1].sync(SyncCall::Fence { succeed: true }).unwrap();
        net.run();
        assert_eq!(net.e[0].sync_done(), Some(Ok(())));
        assert_eq!(net.e[1].sync_done(), Some(Ok(())));
        assert_eq!(net.e[1].segments[0].1[6..], [5, 5]);
        assert_eq!(net.e[1].segments[1].1[..], [5, 5, 0, 0]);
        net.e[1].detach(0x1000).unwrap();
        assert!(matches!(net.e[1].detach(0x1000), Err(OscError::Attach(_))));
    }

    #[test]
    fn post_start_complete_wait() {
        let mut net = Net::new(3, 4);
        net.e[1].sync(SyncCall::Post(vec![0, 2])).unwrap();
        net.e[0].sync(SyncCall::Start(vec![1])).unwrap();
        assert_eq!(net.e[0].sync_done(), None, "start waits for the post");
        net.run();
        assert_eq!(net.e[0].sync_done(), Some(Ok(())));
        net.e[0]
            .put(1, 0, &Layout::contiguous(2), vec![5, 6])
            .unwrap();
        net.e[0].sync(SyncCall::Complete).unwrap();
        net.e[1].sync(SyncCall::Wait).unwrap();
        net.run();
        assert_eq!(net.e[0].sync_done(), Some(Ok(())));
        assert_eq!(net.e[1].sync_done(), None, "rank 2 has not completed");
        assert!(!net.e[1].exposure_complete());
        net.e[2].sync(SyncCall::Start(vec![1])).unwrap();
        net.run();
        assert_eq!(net.e[2].sync_done(), Some(Ok(())));
        net.e[2].sync(SyncCall::Complete).unwrap();
        net.run();
        assert_eq!(net.e[2].sync_done(), Some(Ok(())));
        assert_eq!(net.e[1].sync_done(), Some(Ok(())));
        assert_eq!(&net.mem(1)[..2], &[5, 6]);
    }

    /// Counters a host shares between ranks (`posts[to][from]`, `completes[to][from]`),
    /// for the pairs `mapped(from, to)` names.
    struct Counters {
        posts: Vec<Vec<u64>>,
        completes: Vec<Vec<u64>>,
    }

    impl Counters {
        fn new(n: usize) -> Self {
            Self {
                posts: vec![vec![0; n]; n],
                completes: vec![vec![0; n]; n],
            }
        }

        /// Rank `r`'s posts and completes that its counters carry (`mapped(r, peer)`); how
        /// many.
        fn send(
            &mut self,
            net: &mut Net,
            r: usize,
            mapped: &dyn Fn(usize, usize) -> bool,
        ) -> usize {
            net.e[r].send_counted(|peer, kind| {
                if !mapped(r, peer) {
                    return false;
                }
                match kind {
                    Counted::Post => self.posts[peer][r] += 1,
                    Counted::Complete => self.completes[peer][r] += 1,
                }
                true
            })
        }

        fn absorb(&self, net: &mut Net, r: usize) -> bool {
            net.e[r].absorb_counts(|t| self.posts[r][t], |o| self.completes[r][o])
        }
    }

    /// Posts and completes by counter where the pair shares counters, by message where not
    /// or where a message of the epoch went first (a put): one group mixes both, and
    /// `MPI_Win_test`'s question sees the counters once absorbed.
    #[test]
    fn posts_and_completes_by_counter_mix_with_messages() {
        let mut net = Net::new(3, 4);
        let mut c = Counters::new(3);
        // Ranks 0 and 1 share counters both ways; rank 2 shares none.
        let mapped = |a: usize, b: usize| a < 2 && b < 2;
        let is = |m: &Msg, k: &Msg| m == k;
        net.e[1].sync(SyncCall::Post(vec![0, 2])).unwrap();
        assert_eq!(c.send(&mut net, 1, &mapped), 1, "the post to rank 0");
        assert_eq!(net.sent(1, |m| is(m, &Msg::Post)), 1, "the post to rank 2");
        net.e[0].sync(SyncCall::Start(vec![1])).unwrap();
        net.e[2].sync(SyncCall::Start(vec![1])).unwrap();
        assert_eq!(net.e[0].sync_done(), None, "not read yet");
        assert!(c.absorb(&mut net, 0));
        assert_eq!(net.e[0].sync_done(), Some(Ok(())));
        net.run();
        assert_eq!(net.e[2].sync_done(), Some(Ok(())));
        // Rank 0 completes by counter (nothing sent), rank 2 by message after its put.
        net.e[0].sync(SyncCall::Complete).unwrap();
        assert_eq!(c.send(&mut net, 0, &mapped), 1);
        assert_eq!(net.e[0].sync_done(), Some(Ok(())));
        net.e[2]
            .put(1, 2, &Layout::contiguous(2), vec![7, 8])
            .unwrap();
        net.e[2].sync(SyncCall::Complete).unwrap();
        assert_eq!(c.send(&mut net, 2, &mapped), 0);
        net.e[1].sync(SyncCall::Wait).unwrap();
        assert!(c.absorb(&mut net, 1));
        assert!(
            !net.e[1].exposure_complete(),
            "rank 2's complete is a message"
        );
        assert_eq!(net.e[1].sync_done(), None);
        net.run();
        assert_eq!(net.e[2].sync_done(), Some(Ok(())));
        assert!(net.e[1].exposure_complete());
        assert_eq!(net.e[1].sync_done(), Some(Ok(())));
        assert_eq!(&net.mem(1)[2..], &[7, 8]);
        // Next epoch: rank 0 posts to rank 1 before rank 1's access epoch to rank 0 ends,
        // and the post of the epoch after comes early too; each start takes one.
        net.e[0].sync(SyncCall::Post(vec![1])).unwrap();
        c.send(&mut net, 0, &mapped);
        net.e[1].sync(SyncCall::Start(vec![0])).unwrap();
        c.absorb(&mut net, 1);
        assert_eq!(net.e[1].sync_done(), Some(Ok(())));
        let id = net.e[1].get(0, 0, &Layout::contiguous(1)).unwrap();
        net.e[1].sync(SyncCall::Complete).unwrap();
        assert_eq!(
            c.send(&mut net, 1, &mapped),
            0,
            "a reply awaited: by message"
        );
        net.run();
        assert_eq!(net.e[1].poll_op(id), Some(Ok(vec![0])));
        assert_eq!(net.e[1].sync_done(), Some(Ok(())));
        net.e[0].sync(SyncCall::Wait).unwrap();
        c.absorb(&mut net, 0);
        assert_eq!(net.e[0].sync_done(), Some(Ok(())));
        // A quiet pair again (the reply came): by counter.
        net.e[0].sync(SyncCall::Post(vec![1])).unwrap();
        c.send(&mut net, 0, &mapped);
        net.e[1].sync(SyncCall::Start(vec![0])).unwrap();
        c.absorb(&mut net, 1);
        assert_eq!(net.e[1].sync_done(), Some(Ok(())));
        net.e[1].sync(SyncCall::Complete).unwrap();
        assert_eq!(c.send(&mut net, 1, &mapped), 1);
        assert_eq!(net.e[1].sync_done(), Some(Ok(())));
        net.e[0].sync(SyncCall::Wait).unwrap();
        assert_eq!(net.e[0].sync_done(), None, "the counter not read yet");
        c.absorb(&mut net, 0);
        assert_eq!(net.e[0].sync_done(), Some(Ok(())));
        assert_eq!((c.posts[1][0], c.completes[0][1]), (2, 1));
        // Misuse is refused as before, whatever carries the epochs.
        assert!(matches!(
            net.e[0].sync(SyncCall::Wait),
            Err(OscError::Sync(_))
        ));
        assert!(matches!(
            net.e[0].sync(SyncCall::Complete),
            Err(OscError::Sync(_))
        ));
        assert!(!net.e[0].counts_awaited());
    }

    /// One run of pscw epochs among `n` ranks: in epoch `k`, origin `o` accesses target `t`
    /// when bit `o * n + t` of `groups[k]` is set (never itself); it puts `k + 1` at byte
    /// `o` of the target, directly into its memory (as a module moving its own transfers
    /// does) when `direct` says so for the epoch and pair, else by message, and gets the
    /// target's byte `n`, which the target set to `k + 1` before its post. Pairs share
    /// counters as `mapped(epoch, from, to)` says (changing between epochs: a member whose
    /// object arrives late). `pick` orders everything: which queue delivers, which rank
    /// moves. Checked: no start ends before its targets posted for its epoch, no wait before
    /// its origins completed theirs, every value seen as written.
    fn pscw_run(
        n: usize,
        groups: &[u64],
        direct: &dyn Fn(usize, usize, usize) -> bool,
        mapped: &dyn Fn(usize, usize, usize) -> bool,
        picks: &[usize],
    ) -> Result<(), TestCaseError> {
        let mut net = Net::new(n, n + 1);
        let mut c = Counters::new(n);
        let access = |k: usize, o: usize, t: usize| o != t && groups[k] >> (o * n + t) & 1 == 1;
        // Per rank: the epoch it is in, its step in it (0 post, 1 start, 2 operations,
        // 3 complete, 4 wait), whether that step's synchronization is in progress, and the
        // gets it awaits.
        let mut epoch = vec![0usize; n];
        let mut step = vec![0u8; n];
        let mut busy = vec![false; n];
        let mut gets: Vec<Vec<(OpId, u8)>> = vec![Vec::new(); n];
        // Per (target, origin): posts made, starts ended; completes made, waits ended.
        let mut posted = vec![vec![0usize; n]; n];
        let mut completed = vec![vec![0usize; n]; n];
        let mut picks = picks.iter().copied().chain(0..);
        let mut idle = 0;
        while epoch.iter().any(|&k| k < groups.len()) {
            prop_assert!(idle < 10_000, "stuck: epochs {:?} steps {:?}", epoch, step);
            let p = picks.next().unwrap_or(0);
            if p % 3 == 0 && net.step(p / 3) {
                idle = 0;
                continue;
            }
            let r = (p / 3) % n;
            let k = epoch[r];
            if k >= groups.len() {
                idle += 1;
                continue;
            }
            let mapped_now = |a: usize, b: usize| mapped(k, a, b);
            let origins: Vec<usize> = (0..n).filter(|&o| access(k, o, r)).collect();
            let targets: Vec<usize> = (0..n).filter(|&t| access(k, r, t)).collect();
            if busy[r] {
                c.absorb(&mut net, r);
                let Some(res) = net.e[r].sync_done() else {
                    idle += 1;
                    continue;
                };
                prop_assert_eq!(res, Ok(()));
                busy[r] = false;
                match step[r] {
                    1 => {
                        for &t in &targets {
                            let need = (0..=k).filter(|&j| access(j, r, t)).count();
                            prop_assert!(
                                posted[t][r] >= need,
                                "rank {} started before {} posted",
                                r,
                                t
                            );
                        }
                    }
                    3 => {
                        for (id, want) in gets[r].drain(..) {
                            prop_assert_eq!(net.e[r].poll_op(id), Some(Ok(vec![want])));
                        }
                    }
                    4 => {
                        for &o in &origins {
                            let need = (0..=k).filter(|&j| access(j, o, r)).count();
                            prop_assert!(completed[r][o] >= need, "rank {} waited before {}", r, o);
                            prop_assert_eq!(net.mem(r)[o], k as u8 + 1);
                        }
                    }
                    _ => {}
                }
                step[r] += 1;
            } else {
                let call = match step[r] {
                    0 if !origins.is_empty() => {
                        net.e[r].segments[0].1[n] = k as u8 + 1;
                        for &o in &origins {
                            posted[r][o] += 1;
                        }
                        Some(SyncCall::Post(origins.clone()))
                    }
                    1 if !targets.is_empty() => Some(SyncCall::Start(targets.clone())),
                    2 => {
                        for &t in &targets {
                            if direct(k, r, t) {
                                net.e[t].segments[0].1[r] = k as u8 + 1;
                            } else {
                                net.e[r]
                                    .put(t, r as u64, &Layout::contiguous(1), vec![k as u8 + 1])
                                    .unwrap();
                            }
                            let id = net.e[r].get(t, n as u64, &Layout::contiguous(1)).unwrap();
                            gets[r].push((id, k as u8 + 1));
                        }
                        None
                    }
                    3 if !targets.is_empty() => {
                        for &t in &targets {
                            completed[t][r] += 1;
                        }
                        Some(SyncCall::Complete)
                    }
                    4 if !origins.is_empty() => Some(SyncCall::Wait),
                    _ => None,
                };
                match call {
                    Some(call) => {
                        net.e[r].sync(call).unwrap();
                        c.send(&mut net, r, &mapped_now);
                        busy[r] = true;
                    }
                    None => step[r] += 1,
                }
            }
            if step[r] == 5 {
                step[r] = 0;
                epoch[r] += 1;
            }
            idle = 0;
        }
        net.run();
        for r in 0..n {
            prop_assert!(!net.e[r].busy(), "rank {} still in an epoch", r);
        }
        Ok(())
    }

    #[test]
    fn pscw_epochs_with_changing_groups_by_counters_and_messages() {
        // Three ranks, everybody to everybody, then rings both ways, then 0 -> 1 and 2 -> 1.
        let all = 0b011_101_110;
        let groups = [all, 0b001_100_010, 0b010_001_100, 0b010_000_010, all];
        pscw_run(3, &groups, &|_, _, _| true, &|_, _, _| true, &[]).unwrap();
        pscw_run(
            3,
            &groups,
            &|k, o, _| k % 2 == o % 2,
            &|k, a, b| (k + a + b) % 3 != 0,
            &[],
        )
        .unwrap();
        pscw_run(
            3,
            &groups,
            &|_, _, _| false,
            &|_, _, _| false,
            &[1, 4, 7, 2, 5, 8],
        )
        .unwrap();
    }

    #[test]
    fn exclusive_locks_queue_and_shared_ones_share() {
        let mut net = Net::new(3, 8);
        let excl = |t| SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: t,
            nocheck: false,
        };
        net.e[1].sync(excl(0)).unwrap();
        assert_eq!(
            net.e[1].sync_done(),
            Some(Ok(())),
            "a lock on another rank does not wait for its grant"
        );
        assert!(!net.e[1].granted(0));
        net.run();
        assert!(net.e[1].granted(0));
        net.e[2].sync(excl(0)).unwrap();
        assert_eq!(net.e[2].sync_done(), Some(Ok(())));
        let g = net.e[2].get(0, 0, &Layout::contiguous(1)).unwrap();
        net.e[2].put(0, 0, &Layout::contiguous(1), vec![2]).unwrap();
        net.e[2].sync(SyncCall::Flush(Some(0))).unwrap();
        net.run();
        assert!(!net.e[2].granted(0), "rank 1 holds the lock");
        assert_eq!(net.e[2].sync_done(), None, "the flush waits for the grant");
        assert_eq!(
            net.e[0].held_messages(),
            3,
            "the get, the put and the flush"
        );
        assert_eq!(net.mem(0)[0], 0, "rank 2's put waits at the target");
        net.e[1].put(0, 0, &Layout::contiguous(1), vec![1]).unwrap();
        net.e[1].sync(SyncCall::Unlock(0)).unwrap();
        net.run();
        assert_eq!(net.e[1].sync_done(), Some(Ok(())));
        assert!(net.e[2].granted(0), "granted after the unlock");
        assert_eq!(net.e[2].sync_done(), Some(Ok(())), "then flushed");
        assert_eq!(net.e[0].held_messages(), 0);
        assert_eq!(
            net.e[2].poll_op(g),
            Some(Ok(vec![1])),
            "the holder's put was applied before its unlock, and the waiting get after"
        );
        assert_eq!(net.mem(0)[0], 2, "and the waiting put after that");
        net.e[2].sync(SyncCall::Unlock(0)).unwrap();
        net.run();
        assert_eq!(net.e[2].sync_done(), Some(Ok(())));
        // Shared locks: both granted at once, and lock_all with flushes.
        for r in [1, 2] {
            net.e[r]
                .sync(SyncCall::Lock {
                    kind: LockKind::Shared,
                    target: 0,
                    nocheck: false,
                })
                .unwrap();
        }
        net.run();
        assert_eq!(net.e[1].sync_done(), Some(Ok(())));
        assert_eq!(net.e[2].sync_done(), Some(Ok(())));
        net.sync_all(&[1, 2], |_| SyncCall::Unlock(0));
        net.sync_all(&[0], |_| SyncCall::LockAll { nocheck: false });
        let f = net.e[0]
            .accumulate(
                2,
                0,
                &Layout::contiguous(4),
                AccOp::NoOp,
                Elem::I32,
                vec![],
                true,
            )
            .unwrap();
        net.sync_all(&[0], |_| SyncCall::Flush(None));
        assert_eq!(net.e[0].poll_op(f), Some(Ok(vec![0; 4])));
        let c = net.e[0]
            .compare_and_swap(1, 4, Elem::I32, i32s(&[0]), i32s(&[42]))
            .unwrap();
        net.sync_all(&[0], |_| SyncCall::FlushLocal(Some(1)));
        assert_eq!(net.e[0].poll_op(c), Some(Ok(i32s(&[0]))));
        assert!(matches!(net.e[0].sync(excl(1)), Err(OscError::Sync(_))));
        net.sync_all(&[0], |_| SyncCall::UnlockAll);
        assert_eq!(&net.mem(1)[4..], &i32s(&[42])[..]);
        net.sync_all(&[0, 1, 2], |_| SyncCall::Free);
    }

    #[test]
    fn a_flush_after_fetching_operations_only_needs_no_round_trip() {
        let mut net = Net::new(2, 8);
        net.sync_all(&[0], |_| SyncCall::LockAll { nocheck: true });
        let l = Layout::contiguous(4);
        let g = net.e[0].get(1, 0, &l).unwrap();
        net.e[0].sync(SyncCall::Flush(Some(1))).unwrap();
        assert!(
            net.e[0].outbox().iter().all(|(_, m)| *m != Msg::Flush),
            "the get's reply is the proof"
        );
        net.run();
        assert_eq!(net.e[0].sync_done(), Some(Ok(())));
        assert_eq!(net.e[0].poll_op(g), Some(Ok(vec![0; 4])));
        net.e[0].put(1, 0, &l, vec![1; 4]).unwrap();
        net.e[0].sync(SyncCall::Flush(Some(1))).unwrap();
        assert!(
            net.e[0].outbox().iter().any(|(_, m)| *m == Msg::Flush),
            "a put needs one"
        );
        assert_eq!(net.e[0].sync_done(), None);
        net.run();
        assert_eq!(net.e[0].sync_done(), Some(Ok(())));
        assert_eq!(&net.mem(1)[..4], &[1; 4]);
        net.sync_all(&[0], |_| SyncCall::UnlockAll);
    }

    #[test]
    fn a_lock_on_its_own_window_waits_for_the_grant() {
        let mut net = Net::new(2, 8);
        let excl = |t| SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: t,
            nocheck: false,
        };
        net.sync_all(&[1], |_| excl(0));
        net.e[0].sync(excl(0)).unwrap();
        net.run();
        assert_eq!(
            net.e[0].sync_done(),
            None,
            "rank 1 holds it: rank 0's loads and stores must wait"
        );
        net.sync_all(&[1], |_| SyncCall::Unlock(0));
        assert_eq!(net.e[0].sync_done(), Some(Ok(())));
        // lock_all waits for its own window's grant only.
        net.sync_all(&[0], |_| SyncCall::Unlock(0));
        net.sync_all(&[0], |_| excl(1));
        net.e[1].sync(SyncCall::LockAll { nocheck: false }).unwrap();
        net.run();
        assert_eq!(
            net.e[1].sync_done(),
            None,
            "its own window's shared lock waits for rank 0's exclusive one"
        );
        assert!(net.e[1].granted(0), "rank 0's window granted meanwhile");
        net.sync_all(&[0], |_| SyncCall::Unlock(1));
        assert_eq!(net.e[1].sync_done(), Some(Ok(())));
        net.sync_all(&[1], |_| SyncCall::UnlockAll);
    }

    #[test]
    fn lock_op_unlock_cycles_queue_behind_a_holder_in_order() {
        // Rank 2's lock, fetching accumulate and unlock wait at the target behind rank 1's
        // lock, and apply after the holder's operation; a second cycle follows.
        let mut net = Net::new(3, 8);
        let excl = SyncCall::Lock {
            kind: LockKind::Exclusive,
            target: 0,
            nocheck: false,
        };
        net.sync_all(&[1], |_| excl.clone());
        let add = |net: &mut Net, r: usize, v: i64| {
            net.e[r]
                .accumulate(
                    0,
                    0,
                    &Layout::contiguous(8),
                    AccOp::Sum,
                    Elem::I64,
                    v.to_ne_bytes().to_vec(),
                    true,
                )
                .unwrap()
        };
        net.e[2].sync(excl.clone()).unwrap();
        assert_eq!(net.e[2].sync_done(), Some(Ok(())));
        let a = add(&mut net, 2, 10);
        net.e[2].sync(SyncCall::Unlock(0)).unwrap();
        net.run();
        assert_eq!(net.e[2].sync_done(), None);
        let h = add(&mut net, 1, 1);
        net.sync_all(&[1], |_| SyncCall::Unlock(0));
        assert_eq!(net.e[2].sync_done(), Some(Ok(())));
        net.e[2].sync(excl.clone()).unwrap();
        assert_eq!(net.e[2].sync_done(), Some(Ok(())));
        let b = add(&mut net, 2, 100);
        net.sync_all(&[2], |_| SyncCall::Unlock(0));
        let old = |net: &mut Net, id| {
            i64::from_ne_bytes(
                net.e[2].poll_op(id).unwrap().unwrap()[..]
                    .try_into()
                    .unwrap(),
            )
        };
        assert_eq!(net.e[1].poll_op(h), Some(Ok(0i64.to_ne_bytes().to_vec())));
        assert_eq!(old(&mut net, a), 1, "after the holder's");
        assert_eq!(old(&mut net, b), 11);
        assert_eq!(i64::from_ne_bytes(net.mem(0).try_into().unwrap()), 111);
        assert_eq!(net.e[0].held_messages(), 0);
    }

    proptest! {
        /// Origins on the target's node (lock words) and one elsewhere (messages) increment
        /// a counter by a get and a put under exclusive locks, while a reader on the node
        /// reads it twice under `lock_all`: under any delivery order no increment is lost
        /// (two exclusive holders at once would lose one), the reader's two reads agree (no
        /// writer inside a shared epoch), nobody waits forever, and every word ends free.
        #[test]
        fn word_and_message_locks_exclude_each_other_under_any_delivery_order(
            picks in proptest::collection::vec(any::<usize>(), 0..600)
        ) {
            let n = 4;
            let mut net = Net::new(n, 8);
            // Rank 2 is on another node: its lock on rank 0 goes by message.
            let words = net.with_words(&[0, 0, 1, 0]);
            let rounds = 2;
            #[derive(Clone, Copy, PartialEq, Debug)]
            enum St { Idle, Locking, Reading(OpId), Unlocking, Done }
            let mut st = vec![St::Idle; n];
            let mut round = vec![0; n];
            let mut first_read: Option<u64> = None;
            let mut picks = picks.into_iter();
            let u64_of = |v: Vec<u8>| u64::from_ne_bytes(v[..].try_into().unwrap());
            for _ in 0..100_000 {
                let mut moved = false;
                for r in 0..n {
                    let reader = r == 3;
                    let before = st[r];
                    st[r] = match st[r] {
                        St::Idle if round[r] == rounds => St::Done,
                        St::Idle => {
                            let call = if reader {
                                SyncCall::LockAll { nocheck: false }
                            } else {
                                SyncCall::Lock { kind: LockKind::Exclusive, target: 0, nocheck: false }
                            };
                            net.e[r].sync(call).unwrap();
                            St::Locking
                        }
                        St::Locking => match net.e[r].sync_done() {
                            Some(res) => {
                                prop_assert_eq!(res, Ok(()));
                                first_read = None;
                                St::Reading(net.e[r].get(0, 0, &Layout::contiguous(8)).unwrap())
                            }
                            None => St::Locking,
                        },
                        St::Reading(id) => match net.e[r].poll_op(id) {
                            Some(v) => {
                                let v = u64_of(v.unwrap());
                                if reader {
                                    match first_read {
                                        None => {
                                            first_read = Some(v);
                                            St::Reading(net.e[r].get(0, 0, &Layout::contiguous(8)).unwrap())
                                        }
                                        Some(f) => {
                                            prop_assert_eq!(f, v, "a writer inside the shared epoch");
                                            net.e[r].sync(SyncCall::UnlockAll).unwrap();
                                            St::Unlocking
                                        }
                                    }
                                } else {
                                    net.e[r].put(0, 0, &Layout::contiguous(8), (v + 1).to_ne_bytes().to_vec()).unwrap();
                                    net.e[r].sync(SyncCall::Unlock(0)).unwrap();
                                    St::Unlocking
                                }
                            }
                            None => St::Reading(id),
                        },
                        St::Unlocking => match net.e[r].sync_done() {
                            Some(res) => {
                                prop_assert_eq!(res, Ok(()));
                                round[r] += 1;
                                St::Idle
                            }
                            None => St::Unlocking,
                        },
                        St::Done => St::Done,
                    };
                    moved |= st[r] != before;
                    moved |= net.e[r].poll_locks();
                }
                let stepped = net.step(picks.next().unwrap_or(0));
                if !moved && !stepped {
                    break;
                }
            }
            prop_assert!(st.iter().all(|&s| s == St::Done), "stuck: {:?}", st);
            prop_assert_eq!(u64_of(net.mem(0).to_vec()), 3 * rounds as u64);
            for w in &words {
                prop_assert_eq!(w.load(Ordering::Relaxed), 0);
            }
        }

        /// Every interleaving of deliveries across pairs gives a serialized result: each rank
        /// adds rank + 1 to rank 0's counter with a fetching accumulate under an exclusive
        /// lock; the total is the sum, and the values fetched are the partial sums of one
        /// order (distinct, each the previous one plus its adder's value).
        #[test]
        fn locked_fetch_and_add_is_serialized_under_any_delivery_order(
            picks in proptest::collection::vec(any::<usize>(), 0..400)
        ) {
            let n = 3;
            let mut net = Net::new(n, 8);
            let mut fetched: Vec<Option<OpId>> = vec![None; n];
            for r in 0..n {
                net.e[r].sync(SyncCall::Lock { kind: LockKind::Exclusive, target: 0, nocheck: false }).unwrap();
            }
            let mut picks = picks.into_iter();
            let mut stage = vec![0; n];
            loop {
                let mut progressed = false;
                for r in 0..n {
                    if stage[r] == 0 && net.e[r].sync_done().is_some() {
                        let id = net.e[r].accumulate(0, 0, &Layout::contiguous(8), AccOp::Sum, Elem::I64, (r as i64 + 1).to_ne_bytes().to_vec(), true).unwrap();
                        fetched[r] = Some(id);
                        net.e[r].sync(SyncCall::Unlock(0)).unwrap();
                        stage[r] = 1;
                        progressed = true;
                    } else if stage[r] == 1 && net.e[r].sync_done().is_some() {
                        stage[r] = 2;
                        progressed = true;
                    }
                }
                let pick = picks.next().unwrap_or(0);
                if !net.step(pick) && !progressed {
                    break;
                }
            }
            prop_assert!(stage.iter().all(|&s| s == 2));
            prop_assert_eq!(i64::from_ne_bytes(net.mem(0).try_into().unwrap()), 6);
            let mut seen: Vec<(i64, i64)> = (0..n)
                .map(|r| {
                    let v = net.e[r].poll_op(fetched[r].unwrap()).unwrap().unwrap();
                    (i64::from_ne_bytes(v[..].try_into().unwrap()), r as i64 + 1)
                })
                .collect();
            seen.sort_unstable();
            let mut expect = 0;
            for (old, add) in seen {
                prop_assert_eq!(old, expect);
                expect += add;
            }
        }

        /// A get issued after a fence sees the puts of the epoch the fence ended, whoever
        /// made them: messages from different origins are not ordered, so under some
        /// delivery orders a one-round fence would let rank 2's get reach rank 1 before
        /// rank 0's put does.
        #[test]
        fn a_fence_orders_a_third_party_get_after_the_epochs_puts(
            picks in proptest::collection::vec(any::<usize>(), 0..300)
        ) {
            let mut net = Net::new(3, 1);
            net.sync_all(&[0, 1, 2], |_| SyncCall::Fence { succeed: true });
            net.e[0].put(1, 0, &Layout::contiguous(1), vec![42]).unwrap();
            for r in 0..3 {
                net.e[r].sync(SyncCall::Fence { succeed: true }).unwrap();
            }
            let mut picks = picks.into_iter();
            let mut get = None;
            loop {
                if get.is_none() && net.e[2].sync_done().is_some() {
                    get = Some(net.e[2].get(1, 0, &Layout::contiguous(1)).unwrap());
                }
                if !net.step(picks.next().unwrap_or(0)) {
                    break;
                }
            }
            let get = get.expect("rank 2's fence ended");
            prop_assert_eq!(net.e[2].poll_op(get), Some(Ok(vec![42])));
        }

        /// Fences complete under any delivery order, and every put of the epoch is visible
        /// after them.
        #[test]
        fn fence_counts_under_any_delivery_order(
            picks in proptest::collection::vec(any::<usize>(), 0..200)
        ) {
            let n = 3;
            let mut net = Net::new(n, n);
            for r in 0..n {
                net.e[r].sync(SyncCall::Fence { succeed: true }).unwrap();
            }
            net.run();
            for r in 0..n {
                prop_assert_eq!(net.e[r].sync_done(), Some(Ok(())));
                for t in 0..n {
                    net.e[r].put(t, r as u64, &Layout::contiguous(1), vec![r as u8 + 1]).unwrap();
                }
                net.e[r].sync(SyncCall::Fence { succeed: false }).unwrap();
            }
            let mut done = vec![false; n];
            let mut picks = picks.into_iter();
            loop {
                for r in 0..n {
                    if !done[r] {
                        if let Some(res) = net.e[r].sync_done() {
                            prop_assert_eq!(res, Ok(()));
                            // Done: every put to this rank was applied.
                            prop_assert_eq!(net.mem(r), &(1..=n as u8).collect::<Vec<_>>()[..]);
                            done[r] = true;
                        }
                    }
                }
                if !net.step(picks.next().unwrap_or(0)) {
                    break;
                }
            }
            for r in 0..n {
                if !done[r] {
                    prop_assert_eq!(net.e[r].sync_done(), Some(Ok(())));
                }
            }
        }

        /// Post/start/complete/wait epochs with groups changing at random, each pair's
        /// posts and completes by counter or by message (changing between epochs), puts
        /// moved directly or by message, under any order of delivery and of the ranks'
        /// moves: every start and wait ends after what it waits for, and every value is
        /// seen as written.
        #[test]
        fn pscw_epochs_under_any_order_by_counters_and_messages(
            n in 2usize..5,
            groups in proptest::collection::vec(any::<u64>(), 1..6),
            direct in any::<u64>(),
            mapped in any::<u64>(),
            picks in proptest::collection::vec(any::<usize>(), 0..400),
        ) {
            let bit = |x: u64, k: usize, a: usize, b: usize| x >> ((k * 7 + a * 3 + b) % 64) & 1 == 1;
            pscw_run(
                n,
                &groups,
                &|k, o, t| bit(direct, k, o, t),
                &|k, a, b| bit(mapped, k, a, b),
                &picks,
            )?;
        }
    }
}
