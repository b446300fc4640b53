//! `MPI_THREAD_MULTIPLE` for Rust programs: `Send + Sync + Clone` communicator handles that
//! any number of threads use at once, served by one progress-owner thread.
//!
//! ```no_run
//! # fn main() -> Result<(), rmca::threaded::Error> {
//! let job = rmca::threaded::init()?;
//! let world = job.world();
//! let workers: Vec<_> = (0..4)
//!     .map(|t| {
//!         let world = world.clone();
//!         std::thread::spawn(move || -> Result<f64, rmca::threaded::Error> {
//!             // A communicator per thread keeps the threads' traffic apart.
//!             let mine = world.dup()?;
//!             let sum = mine.allreduce(&[t as f64], rmca::coll::Op::Sum)?;
//!             mine.free()?;
//!             Ok(sum[0])
//!         })
//!     })
//!     .collect();
//! for w in workers {
//!     let _ = w.join().expect("worker")?;
//! }
//! job.finalize()?;
//! # Ok(())
//! # }
//! ```
//!
//! # Design
//!
//! The single-threaded API ([`crate::Universe`], [`crate::Communicator`]) stays as it is:
//! reference counts and cells without atomics, no lock on its message path. Here a thread
//! of its own, the *owner*, initializes a universe and is the only thread that ever touches
//! it. A [`Comm`] is a communicator id and a channel to the owner; every call is a command
//! the owner runs without blocking, answered on a channel of the call's own, so a thread
//! waiting for a receive never holds up another thread's send, and the owner keeps the
//! runtime progressing (rendezvous transfers, peers' collectives) while the application
//! computes: asynchronous progress comes with it. No `unsafe` code is involved: the owner
//! reaches the runtime through the safe API only, which shapes the rest:
//!
//! * **Buffers are owned.** A send's data is copied when it is called into the universe's
//!   buffered-send pool ([`crate::Communicator::bsend`]: the send completes as soon as the
//!   copy is made, which MPI allows a standard send); a receive's data comes back as a new
//!   `Vec<T>`. A message is limited to the pool's size ([`Config::send_pool`]); a send that
//!   finds the pool full waits in a queue of the owner until earlier sends drained (its
//!   handle's call returns then), so sends leave in the order they were called.
//! * **Receives are matched by the owner**, in the order they were posted, with matched
//!   probes ([`crate::Communicator::improbe`]): each posted receive takes the earliest
//!   arrived message that matches it, which is MPI's matching order, and the receive of a
//!   matched message needs nothing but the sender's progress.
//! * **Collectives are the runtime's own** non-blocking schedules (the algorithms and
//!   coll components [`crate::Communicator::iallreduce`] and the others run), started by
//!   the owner over memory the collective owns (the caller's contribution moved in, the
//!   result copied out) and stepped by its progress passes, so that no collective blocks
//!   the owner while it waits for a member that has not called it yet. A collective that
//!   fails at one member (refused there, or its members' lengths differ) fails on every
//!   member ([`Error::FailedElsewhere`]): the member announces it on a duplicate of the
//!   communicator kept for these notices, and the others fail it on the notice or refuse it
//!   when they reach it (`CollOrder`, no I/O, unit tested below). A refused collective
//!   still takes its number in the communicator's order, so the next ones are unaffected.
//! * **New communicators** are agreed with the runtime's non-blocking duplication
//!   ([`crate::Communicator::idup`]); a split exchanges colours and keys with a collective
//!   first, then every member of one colour shares the duplicate's matching space (the
//!   colours' groups are disjoint, so their messages never meet).
//!
//! MPI's ordering holds per thread: a thread's commands reach the owner in the order it
//! made them (one channel), sends to one peer on one communicator leave in that order and
//! the PML keeps them ordered. Collectives on one communicator must be called in the same
//! order on every member, as MPI requires (threads that run collectives concurrently use
//! communicators of their own).
//!
//! Errors are typed ([`Error`]). Once the owner is gone ([`Threaded::finalize`], or the
//! [`Threaded`] dropped), every call through any handle returns [`Error::OwnerGone`], and a
//! call that was waiting gets it too: nothing hangs on a finished owner.
//!
//! The cost of the design is a hand-over per call (a channel message each way, and a
//! thread wake-up when the waiting side sleeps) and a copy per message on each side:
//! `rmca-bench`-style figures are printed by `examples/threaded.rs rate`.
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::time::Duration;

use bytemuck::Pod;
use rmca_framework::pml::RequestId;

use crate::coll::nonblocking::owned::OwnedColl;
use crate::coll::nonblocking::ByteReduction;
use crate::coll::Op;
use crate::comm::CommInner;
use crate::{Communicator, Dest, PendingDup, Src, Status, Universe};

/// Errors of the threaded API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The runtime refused the call (bad rank or tag, a failed transfer, ...).
    #[error(transparent)]
    Rmca(#[from] crate::Error),
    /// The progress owner has finished (finalized, or failed): no call can be served.
    #[error("the rmca progress owner has finished (finalized or failed): no call through this handle can be served")]
    OwnerGone,
    /// A message longer than the buffered-send pool.
    #[error("a message of {len} bytes is longer than the send pool ({limit} bytes): raise rmca::threaded::Config::send_pool")]
    TooLarge {
        /// Bytes of the message.
        len: usize,
        /// Bytes of the pool.
        limit: usize,
    },
    /// A received message is not a whole number of the receiver's elements (it was consumed).
    #[error(
        "a message of {bytes} bytes from rank {from} is not a whole number of {elem}-byte elements"
    )]
    Misaligned {
        /// Bytes of the message.
        bytes: usize,
        /// Bytes of one element.
        elem: usize,
        /// Its sender.
        from: usize,
    },
    /// The communicator was freed (by this or another thread) before the call was served.
    #[error("communicator {0} was freed")]
    Freed(u32),
    /// The world communicator cannot be freed.
    #[error("the world communicator cannot be freed (it goes with finalize)")]
    FreeWorld,
    /// The owner failed (its thread panicked, or an internal invariant broke).
    #[error("{0}")]
    Collective(String),
    /// Another member refused or failed this collective (and told every member): it cannot
    /// complete here. Later collectives on the communicator are not affected.
    #[error("the collective failed at rank {rank}: {reason}")]
    FailedElsewhere {
        /// The member where it failed.
        rank: usize,
        /// Its error there.
        reason: String,
    },
}

/// Result alias of the threaded API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Settings of [`init_with`].
#[derive(Clone, Debug)]
pub struct Config {
    /// Bytes of the buffered-send pool: the longest message, and how much sent data may
    /// wait for its receivers before further sends queue in the owner.
    pub send_pool: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            send_pool: 16 << 20,
        }
    }
}

/// The id of a communicator in the owner's table.
type CommId = u32;
const WORLD: CommId = 0;

type Reply<T> = SyncSender<Result<T>>;
/// Receives a matched message (in the owner) and answers its caller.
type Deliver = Box<dyn FnOnce(crate::Result<crate::Message>) + Send>;
/// Makes a reduction in the owner (a `ByteReduction` is not `Send`).
type MakeReduction = fn(Op) -> crate::Result<ByteReduction>;

enum Cmd {
    Send {
        comm: CommId,
        dest: Dest,
        tag: i32,
        bytes: Vec<u8>,
        reply: Reply<()>,
    },
    Recv {
        comm: CommId,
        src: Src,
        tag: i32,
        deliver: Deliver,
    },
    Probe {
        comm: CommId,
        src: Src,
        tag: i32,
        blocking: bool,
        reply: Reply<Option<Status>>,
    },
    Coll {
        comm: CommId,
        kind: KindCmd,
        mine: Vec<u8>,
        reply: Reply<Option<Vec<u8>>>,
    },
    Dup {
        comm: CommId,
        reply: Reply<(CommId, usize, usize)>,
    },
    Split {
        comm: CommId,
        color: Option<u32>,
        key: i32,
        reply: Reply<Option<(CommId, usize, usize)>>,
    },
    Free {
        comm: CommId,
        reply: Reply<()>,
    },
    Finalize {
        reply: Reply<()>,
    },
}

/// A collective as a handle asks for it.
enum KindCmd {
    Barrier,
    Bcast {
        root: usize,
    },
    Reduce {
        root: usize,
        op: Op,
        make: MakeReduction,
    },
    Allreduce {
        op: Op,
        make: MakeReduction,
    },
    Allgather,
}

/// Start the progress owner with the default [`Config`]: it joins the job (as
/// [`crate::init`]) and serves the handles.
pub fn init() -> Result<Threaded> {
    init_with(Config::default())
}

/// [`init`] with `config`.
pub fn init_with(config: Config) -> Result<Threaded> {
    let (tx, rx) = mpsc::channel::<Cmd>();
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<(usize, usize)>>(1);
    let join = std::thread::Builder::new()
        .name("rmca-owner".into())
        .spawn(move || owner_main(config, rx, ready_tx))
        .map_err(|e| {
            Error::Rmca(crate::Error::InvalidArgument(format!(
                "cannot start the rmca progress owner thread: {e}"
            )))
        })?;
    let (rank, size) = ready_rx.recv().map_err(|_| Error::OwnerGone)??;
    Ok(Threaded {
        world: Comm {
            id: WORLD,
            rank,
            size,
            tx,
        },
        join: Some(join),
    })
}

/// The running job, served by its progress owner thread. Dropping it finalizes (as
/// [`Threaded::finalize`], reporting an error through `tracing`).
#[derive(Debug)]
pub struct Threaded {
    world: Comm,
    join: Option<std::thread::JoinHandle<()>>,
}

impl Threaded {
    /// The communicator of every process of the job.
    pub fn world(&self) -> Comm {
        self.world.clone()
    }

    /// Finalize: the owner fails every call still waiting ([`Error::OwnerGone`] from then
    /// on), finalizes the runtime (a barrier of the world) and ends.
    pub fn finalize(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        let Some(join) = self.join.take() else {
            return Ok(());
        };
        let r = self.world.call(|reply| Cmd::Finalize { reply });
        if join.join().is_err() {
            return Err(Error::Collective(
                "the rmca progress owner thread panicked".into(),
            ));
        }
        r
    }
}

impl Drop for Threaded {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            tracing::error!("rmca threaded finalize failed: {e}");
        }
    }
}

/// A communicator usable from any thread (`Send + Sync`, cheap to clone: clones are the same
/// communicator). Collective calls follow MPI: every member calls them in the same order.
#[derive(Clone, Debug)]
pub struct Comm {
    id: CommId,
    rank: usize,
    size: usize,
    tx: Sender<Cmd>,
}

/// An outstanding [`Comm::isend`].
#[must_use = "wait or test a send request to learn its outcome"]
#[derive(Debug)]
pub struct SendRequest(Receiver<Result<()>>);

impl SendRequest {
    /// Wait until the send's data is buffered or sent (its buffer was copied at the call).
    pub fn wait(self) -> Result<()> {
        self.0.recv().map_err(|_| Error::OwnerGone)?
    }

    /// The outcome if the send completed.
    pub fn test(&mut self) -> Option<Result<()>> {
        poll(&self.0)
    }
}

/// An outstanding [`Comm::irecv`]: its message comes back with its status.
#[must_use = "wait or test a receive request to get its message"]
#[derive(Debug)]
pub struct RecvRequest<T>(Receiver<Result<(Vec<T>, Status)>>);

impl<T> RecvRequest<T> {
    /// Wait for the message.
    pub fn wait(self) -> Result<(Vec<T>, Status)> {
        self.0.recv().map_err(|_| Error::OwnerGone)?
    }

    /// The message if it arrived.
    pub fn test(&mut self) -> Option<Result<(Vec<T>, Status)>> {
        poll(&self.0)
    }
}

fn poll<T>(rx: &Receiver<Result<T>>) -> Option<Result<T>> {
    match rx.try_recv() {
        Ok(r) => Some(r),
        Err(TryRecvError::Empty) => None,
        Err(TryRecvError::Disconnected) => Some(Err(Error::OwnerGone)),
    }
}

/// `bytes` as elements of `T` (a new vector: the bytes need not be aligned for `T`).
fn to_elems<T: Pod>(bytes: &[u8], source: usize) -> Result<Vec<T>> {
    let elem = std::mem::size_of::<T>();
    if elem == 0 || !bytes.len().is_multiple_of(elem) {
        return Err(Error::Misaligned {
            bytes: bytes.len(),
            elem,
            from: source,
        });
    }
    let mut v = vec![T::zeroed(); bytes.len() / elem];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(bytes);
    Ok(v)
}

impl Comm {
    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of processes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Send a command that answers on `reply` and wait for the answer.
    fn call<R>(&self, cmd: impl FnOnce(Reply<R>) -> Cmd) -> Result<R> {
        let (reply, rx) = mpsc::sync_channel(1);
        self.tx.send(cmd(reply)).map_err(|_| Error::OwnerGone)?;
        rx.recv().map_err(|_| Error::OwnerGone)?
    }

    /// Start a send of a copy of `data` to `dest` with `tag` (standard mode: it completes
    /// once the copy is buffered).
    pub fn isend<T: Pod>(
        &self,
        data: &[T],
        dest: impl Into<Dest>,
        tag: i32,
    ) -> Result<SendRequest> {
        let (reply, rx) = mpsc::sync_channel(1);
        let cmd = Cmd::Send {
            comm: self.id,
            dest: dest.into(),
            tag,
            bytes: bytemuck::cast_slice(data).to_vec(),
            reply,
        };
        self.tx.send(cmd).map_err(|_| Error::OwnerGone)?;
        Ok(SendRequest(rx))
    }

    /// Send `data` to `dest` with `tag` (returns once the data is buffered).
    pub fn send<T: Pod>(&self, data: &[T], dest: impl Into<Dest>, tag: i32) -> Result<()> {
        self.isend(data, dest, tag)?.wait()
    }

    /// Post a receive from `src` with `tag` ([`crate::ANY_SOURCE`], [`crate::ANY_TAG`] and
    /// [`crate::PROC_NULL`] allowed); the message comes back whole, whatever its length.
    pub fn irecv<T: Pod + Send>(&self, src: impl Into<Src>, tag: i32) -> Result<RecvRequest<T>> {
        let (reply, rx) = mpsc::sync_channel::<Result<(Vec<T>, Status)>>(1);
        let deliver: Deliver = Box::new(move |found: crate::Result<crate::Message>| {
            let _ = reply.send(found.map_err(Error::from).and_then(receive_matched::<T>));
        });
        let cmd = Cmd::Recv {
            comm: self.id,
            src: src.into(),
            tag,
            deliver,
        };
        self.tx.send(cmd).map_err(|_| Error::OwnerGone)?;
        Ok(RecvRequest(rx))
    }

    /// Receive a message from `src` with `tag` (see [`Comm::irecv`]).
    pub fn recv<T: Pod + Send>(&self, src: impl Into<Src>, tag: i32) -> Result<(Vec<T>, Status)> {
        self.irecv(src, tag)?.wait()
    }

    /// Send `data` to `dest` and receive from `src` (posted first: no deadlock between two
    /// members exchanging).
    pub fn sendrecv<S: Pod, R: Pod + Send>(
        &self,
        data: &[S],
        dest: impl Into<Dest>,
        send_tag: i32,
        src: impl Into<Src>,
        recv_tag: i32,
    ) -> Result<(Vec<R>, Status)> {
        let r = self.irecv(src, recv_tag)?;
        let s = self.isend(data, dest, send_tag)?;
        let got = r.wait();
        s.wait()?;
        got
    }

    /// The status of a message from `src` with `tag` that a receive would get now, if any.
    /// A message a receive posted before is waiting for may be reported too.
    pub fn iprobe(&self, src: impl Into<Src>, tag: i32) -> Result<Option<Status>> {
        let (src, comm) = (src.into(), self.id);
        self.call(|reply| Cmd::Probe {
            comm,
            src,
            tag,
            blocking: false,
            reply,
        })
    }

    /// Wait for a message from `src` with `tag` and return its status (see [`Comm::iprobe`]).
    pub fn probe(&self, src: impl Into<Src>, tag: i32) -> Result<Status> {
        let (src, comm) = (src.into(), self.id);
        self.call(|reply| Cmd::Probe {
            comm,
            src,
            tag,
            blocking: true,
            reply,
        })?
        .ok_or(Error::OwnerGone)
    }

    fn coll(&self, kind: KindCmd, mine: Vec<u8>) -> Result<Option<Vec<u8>>> {
        let comm = self.id;
        self.call(|reply| Cmd::Coll {
            comm,
            kind,
            mine,
            reply,
        })
    }

    /// Wait until every member called it.
    pub fn barrier(&self) -> Result<()> {
        self.coll(KindCmd::Barrier, Vec::new()).map(|_| ())
    }

    /// `root`'s `data` on every member. As in MPI, every member passes as many elements as
    /// the root (the others' contents are ignored): a member whose length differs fails the
    /// broadcast on every member.
    pub fn bcast<T: Pod>(&self, data: &[T], root: usize) -> Result<Vec<T>> {
        let out = self.coll(KindCmd::Bcast { root }, bytemuck::cast_slice(data).to_vec())?;
        to_elems(&out.unwrap_or_default(), root)
    }

    /// The reduction of every member's `data` with `op` (in rank order), at `root` only.
    pub fn reduce<T: crate::coll::Reducible>(
        &self,
        data: &[T],
        op: Op,
        root: usize,
    ) -> Result<Option<Vec<T>>> {
        let make: MakeReduction = ByteReduction::new::<T, Op>;
        let kind = KindCmd::Reduce { root, op, make };
        match self.coll(kind, bytemuck::cast_slice(data).to_vec())? {
            Some(b) => to_elems(&b, root).map(Some),
            None => Ok(None),
        }
    }

    /// The reduction of every member's `data` with `op` (in rank order), on every member.
    pub fn allreduce<T: crate::coll::Reducible>(&self, data: &[T], op: Op) -> Result<Vec<T>> {
        let make: MakeReduction = ByteReduction::new::<T, Op>;
        let out = self.coll(
            KindCmd::Allreduce { op, make },
            bytemuck::cast_slice(data).to_vec(),
        )?;
        to_elems(&out.unwrap_or_default(), 0)
    }

    /// Every member's `data` (all of one length), in rank order, on every member.
    pub fn allgather<T: Pod>(&self, data: &[T]) -> Result<Vec<T>> {
        let out = self.coll(KindCmd::Allgather, bytemuck::cast_slice(data).to_vec())?;
        to_elems(&out.unwrap_or_default(), 0)
    }

    fn handle(&self, (id, rank, size): (CommId, usize, usize)) -> Comm {
        Comm {
            id,
            rank,
            size,
            tx: self.tx.clone(),
        }
    }

    /// A communicator of the same processes with a matching space of its own. Collective.
    pub fn dup(&self) -> Result<Comm> {
        let comm = self.id;
        let made = self.call(|reply| Cmd::Dup { comm, reply })?;
        Ok(self.handle(made))
    }

    /// Partition by `color` (ranks ordered by `key`, then by rank); `None` leaves this
    /// process out. Collective.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Comm>> {
        let comm = self.id;
        let made = self.call(|reply| Cmd::Split {
            comm,
            color,
            key,
            reply,
        })?;
        Ok(made.map(|m| self.handle(m)))
    }

    /// Free this communicator (every clone of it): calls on it fail with [`Error::Freed`]
    /// from then on, receives still waiting on it too.
    pub fn free(self) -> Result<()> {
        let comm = self.id;
        self.call(|reply| Cmd::Free { comm, reply })
    }
}

/// The receive arguments' errors, found when the receive is posted.
fn check_recv(comm: &Communicator, src: Src, tag: i32) -> crate::Result<()> {
    if tag < 0 && tag != crate::ANY_TAG {
        return Err(crate::Error::BadTag(tag));
    }
    match src {
        Src::Negative(r) => Err(crate::Error::NegativeRank(r)),
        Src::Rank(r) if r >= comm.size() => Err(crate::Error::BadRank {
            rank: r,
            size: comm.size(),
        }),
        _ => Ok(()),
    }
}

/// Receive a matched message into a vector of its length (in the owner).
fn receive_matched<T: Pod>(msg: crate::Message) -> Result<(Vec<T>, Status)> {
    let st = msg.status().clone();
    let elem = std::mem::size_of::<T>();
    if elem == 0 || !st.bytes.is_multiple_of(elem) {
        let mut sink = vec![0u8; st.bytes];
        msg.recv(&mut sink)?;
        return Err(Error::Misaligned {
            bytes: st.bytes,
            elem,
            from: st.source,
        });
    }
    let mut v = vec![T::zeroed(); st.bytes / elem];
    let st = msg.recv(&mut v)?;
    Ok((v, st))
}

// ---------------------------------------------------------------------------------------
// The order of a communicator's collectives and their refusals, without I/O.

/// The collectives of one communicator at this member: the number of the next one (every
/// member counts alike, a refused collective included, so the tags of later collectives
/// never shift), those running, and the refusals that other members announced.
///
/// A collective that fails at one member (refused before it starts: a bad root, an
/// operation the element type lacks, a length that is no whole number of elements; or
/// failed while it runs: the members' lengths differ) is announced by that member to every
/// other one with a notice naming the collective's number. A member running that collective
/// fails it on the notice (its schedule may be waiting for the announcer, which will never
/// send); a member that has not started it yet refuses it when it does, without running it.
/// So no member waits forever on a collective another member refused.
#[derive(Debug, Default)]
pub(crate) struct CollOrder {
    next: u32,
    running: Vec<u32>,
    /// Notices of collectives not started here yet: number -> (announcer, reason).
    ahead: HashMap<u32, (usize, String)>,
}

/// What to do with a collective being started ([`CollOrder::begin`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Begin {
    /// Start it as collective number `seq` (then [`CollOrder::started`], or, if this member
    /// refuses it, [`CollOrder::ended`] and a notice to the others).
    Run(u32),
    /// Member `rank` refused collective `seq` already (`reason`): fail it without running it.
    Refused {
        /// Its number.
        seq: u32,
        /// The member that refused it.
        rank: usize,
        /// Why.
        reason: String,
    },
}

impl CollOrder {
    /// Number the next collective.
    pub(crate) fn begin(&mut self) -> Begin {
        let seq = self.next;
        self.next = self.next.wrapping_add(1);
        match self.ahead.remove(&seq) {
            Some((rank, reason)) => Begin::Refused { seq, rank, reason },
            None => Begin::Run(seq),
        }
    }

    /// Collective `seq` runs here.
    pub(crate) fn started(&mut self, seq: u32) {
        self.running.push(seq);
    }

    /// Collective `seq` finished here (completed, failed or refused).
    pub(crate) fn ended(&mut self, seq: u32) {
        self.running.retain(|&s| s != seq);
    }

    /// Member `rank` announced that collective `seq` failed there; `Some(seq)` if it runs
    /// here (fail it now). A notice of a collective not begun yet is kept for
    /// [`CollOrder::begin`]; one of a collective that already ended here is dropped.
    pub(crate) fn on_notice(&mut self, seq: u32, rank: usize, reason: String) -> Option<u32> {
        if self.running.contains(&seq) {
            self.ended(seq);
            return Some(seq);
        }
        // Numbers wrap: "not begun" is the half of the circle ahead of `next`.
        if seq.wrapping_sub(self.next) < 1 << 31 {
            self.ahead.entry(seq).or_insert((rank, reason));
        }
        None
    }

    /// No collective runs here.
    #[cfg(test)]
    pub(crate) fn is_idle(&self) -> bool {
        self.running.is_empty()
    }
}

/// A refusal notice's bytes: the collective's number, then the reason.
fn notice_bytes(seq: u32, reason: &str) -> Vec<u8> {
    let mut b = seq.to_le_bytes().to_vec();
    b.extend_from_slice(reason.as_bytes());
    b
}

/// A notice's (number, reason); `None` if it is too short to be one.
fn parse_notice(b: &[u8]) -> Option<(u32, String)> {
    let seq = u32::from_le_bytes(b.get(..4)?.try_into().ok()?);
    Some((seq, String::from_utf8_lossy(&b[4..]).into_owned()))
}

// ---------------------------------------------------------------------------------------
// The owner.

/// A communicator in the owner's table: the application's (its collective context carries
/// the collectives' schedules), and a duplicate for the collectives' refusal notices.
struct Entry {
    p2p: Communicator,
    control: Communicator,
    order: CollOrder,
}

/// The tag of refusal notices on an entry's `control` communicator.
const NOTICE_TAG: i32 = 0;

struct PostedRecv {
    comm: CommId,
    src: Src,
    tag: i32,
    deliver: Deliver,
}

struct PendingProbe {
    comm: CommId,
    src: Src,
    tag: i32,
    reply: Reply<Option<Status>>,
}

/// What a collective is for when it completes.
enum Then {
    Reply(Reply<Option<Vec<u8>>>),
    /// A split's exchange of (colour, key): then the duplicates.
    Split {
        color: Option<u32>,
        reply: Reply<Option<(CommId, usize, usize)>>,
    },
}

/// A collective running on the runtime's executor.
struct ActiveColl {
    comm: CommId,
    seq: u32,
    /// The communicator it runs on (it may outlive the entry: see `Cmd::Free`).
    on: Communicator,
    id: RequestId,
    /// Where the executor leaves this member's result bytes.
    result: Rc<RefCell<Vec<u8>>>,
    /// The bytes are a result (not a reduce's partial sums off the root, not a barrier's).
    holds_result: bool,
    then: Then,
}

/// A dup or split waiting for its two duplicates.
struct Making {
    p2p: PendingDup,
    control: PendingDup,
    got: (Option<Communicator>, Option<Communicator>),
    /// The split's members of this colour (parent ranks in new rank order), `None` for a
    /// dup; `Some(None)`: this process is in no colour.
    split: Option<Option<Vec<usize>>>,
    reply: MakingReply,
}

enum MakingReply {
    Dup(Reply<(CommId, usize, usize)>),
    Split(Reply<Option<(CommId, usize, usize)>>),
}

/// A send waiting for room in the pool.
struct Deferred {
    comm: Communicator,
    dest: usize,
    tag: i32,
    bytes: Vec<u8>,
    reply: Option<Reply<()>>,
}

struct Owner {
    universe: Universe,
    pool: usize,
    comms: HashMap<CommId, Entry>,
    next_id: CommId,
    recvs: Vec<PostedRecv>,
    probes: Vec<PendingProbe>,
    colls: Vec<ActiveColl>,
    /// Collectives failed here while their schedules still run (another member refused
    /// them, or their communicator was freed): kept until the executor lets them go.
    orphans: Vec<(Communicator, RequestId)>,
    making: Vec<Making>,
    deferred: VecDeque<Deferred>,
}

fn owner_main(config: Config, rx: Receiver<Cmd>, ready: SyncSender<Result<(usize, usize)>>) {
    let started = (|| -> crate::Result<Owner> {
        let universe = crate::init()?;
        let world = universe.world();
        let control = world.dup()?;
        universe.buffer_attach(vec![0u8; config.send_pool])?;
        let mut comms = HashMap::new();
        comms.insert(
            WORLD,
            Entry {
                p2p: world,
                control,
                order: CollOrder::default(),
            },
        );
        Ok(Owner {
            universe,
            pool: config.send_pool,
            comms,
            next_id: WORLD + 1,
            recvs: Vec::new(),
            probes: Vec::new(),
            colls: Vec::new(),
            orphans: Vec::new(),
            making: Vec::new(),
            deferred: VecDeque::new(),
        })
    })();
    let owner = match started {
        Ok(o) => o,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    let world = &owner.comms[&WORLD].p2p;
    let _ = ready.send(Ok((world.rank(), world.size())));
    owner.run(rx);
}

impl Owner {
    fn run(mut self, rx: Receiver<Cmd>) {
        let mut idle_passes = 0u32;
        let finalize_reply = loop {
            let mut events = 0usize;
            let mut finalize = None;
            loop {
                match rx.try_recv() {
                    Ok(Cmd::Finalize { reply }) => {
                        finalize = Some(Some(reply));
                        break;
                    }
                    Ok(cmd) => {
                        events += 1;
                        self.command(cmd);
                    }
                    Err(TryRecvError::Empty) => break,
                    // Every handle and the Threaded are gone: nobody can be waiting.
                    Err(TryRecvError::Disconnected) => {
                        finalize = Some(None);
                        break;
                    }
                }
            }
            if let Some(f) = finalize {
                break f;
            }
            events += self.pump();
            if events > 0 {
                idle_passes = 0;
                continue;
            }
            idle_passes = idle_passes.saturating_add(1);
            if self.busy() {
                // Work in flight: poll the network, letting the application's threads run.
                if idle_passes > 16 {
                    std::thread::yield_now();
                }
                continue;
            }
            // Nothing posted: sleep until a command comes (or briefly, so that buffered
            // rendezvous sends and peers' transfers keep progressing).
            let wait = if idle_passes > 64 {
                Duration::from_millis(1)
            } else {
                Duration::from_micros(50)
            };
            match rx.recv_timeout(wait) {
                Ok(Cmd::Finalize { reply }) => break Some(reply),
                Ok(cmd) => {
                    idle_passes = 0;
                    self.command(cmd);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break None,
            }
        };
        let r = self.shutdown();
        if let Some(reply) = finalize_reply {
            let _ = reply.send(r);
        }
    }

    fn busy(&self) -> bool {
        !(self.recvs.is_empty()
            && self.probes.is_empty()
            && self.colls.is_empty()
            && self.making.is_empty()
            && self.deferred.is_empty())
    }

    /// Fail everything still waiting, then finalize the runtime.
    fn shutdown(mut self) -> Result<()> {
        // Sends already called go out first (their callers were told they would).
        let mut rounds = 0u32;
        while !self.deferred.is_empty() && rounds < 100_000 {
            self.flush_deferred();
            crate::raw::progress(&self.comms[&WORLD].p2p);
            rounds += 1;
        }
        for d in self.deferred.drain(..) {
            if let Some(reply) = d.reply {
                let _ = reply.send(Err(Error::OwnerGone));
            }
        }
        for r in self.recvs.drain(..) {
            (r.deliver)(Err(crate::Error::Finalized));
        }
        for p in self.probes.drain(..) {
            let _ = p.reply.send(Err(Error::OwnerGone));
        }
        for c in self.colls.drain(..) {
            match c.then {
                Then::Reply(r) => {
                    let _ = r.send(Err(Error::OwnerGone));
                }
                Then::Split { reply, .. } => {
                    let _ = reply.send(Err(Error::OwnerGone));
                }
            }
        }
        self.orphans.clear();
        for m in self.making.drain(..) {
            match m.reply {
                MakingReply::Dup(r) => {
                    let _ = r.send(Err(Error::OwnerGone));
                }
                MakingReply::Split(r) => {
                    let _ = r.send(Err(Error::OwnerGone));
                }
            }
        }
        self.comms.retain(|&id, _| id == WORLD);
        let Owner {
            universe, comms, ..
        } = self;
        drop(comms);
        universe.finalize()?;
        Ok(())
    }

    fn entry(&self, comm: CommId) -> Result<&Entry> {
        self.comms.get(&comm).ok_or(Error::Freed(comm))
    }

    fn command(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Send {
                comm,
                dest,
                tag,
                bytes,
                reply,
            } => {
                if let Err(e) = self.start_send(comm, dest, tag, bytes, Some(reply.clone())) {
                    let _ = reply.send(Err(e));
                }
            }
            Cmd::Recv {
                comm,
                src,
                tag,
                deliver,
            } => match self.entry(comm) {
                Err(_) => deliver(Err(crate::Error::InvalidArgument(format!(
                    "communicator {comm} was freed"
                )))),
                Ok(e) => {
                    // Refused at once rather than on every pass.
                    let p2p = e.p2p.clone();
                    match (src, check_recv(&p2p, src, tag)) {
                        (_, Err(e)) => deliver(Err(e)),
                        (Src::Null, Ok(())) => deliver(
                            p2p.improbe(Src::Null, tag)
                                .and_then(|m| m.ok_or(crate::Error::Finalized)),
                        ),
                        _ => self.recvs.push(PostedRecv {
                            comm,
                            src,
                            tag,
                            deliver,
                        }),
                    }
                }
            },
            Cmd::Probe {
                comm,
                src,
                tag,
                blocking,
                reply,
            } => {
                let found = self
                    .entry(comm)
                    .and_then(|e| e.p2p.iprobe(src, tag).map_err(Error::from));
                match found {
                    Ok(None) if blocking => self.probes.push(PendingProbe {
                        comm,
                        src,
                        tag,
                        reply,
                    }),
                    other => {
                        let _ = reply.send(other);
                    }
                }
            }
            Cmd::Coll {
                comm,
                kind,
                mine,
                reply,
            } => self.start_coll(comm, kind, mine, Then::Reply(reply)),
            Cmd::Dup { comm, reply } => match self.start_making(comm, None) {
                Ok((p2p, control)) => self.making.push(Making {
                    p2p,
                    control,
                    got: (None, None),
                    split: None,
                    reply: MakingReply::Dup(reply),
                }),
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            Cmd::Split {
                comm,
                color,
                key,
                reply,
            } => {
                let mine = [color.map_or(-1i64, i64::from), i64::from(key)];
                let bytes = bytemuck::cast_slice(&mine).to_vec();
                let then = Then::Split { color, reply };
                self.start_coll(comm, KindCmd::Allgather, bytes, then);
            }
            Cmd::Free { comm, reply } => {
                let r = if comm == WORLD {
                    Err(Error::FreeWorld)
                } else if self.comms.remove(&comm).is_none() {
                    Err(Error::Freed(comm))
                } else {
                    // Receives waiting on it will never be matched now.
                    let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.recvs)
                        .into_iter()
                        .partition(|r| r.comm == comm);
                    self.recvs = kept;
                    for r in gone {
                        (r.deliver)(Err(crate::Error::InvalidArgument(format!(
                            "communicator {comm} was freed while this receive waited"
                        ))));
                    }
                    // So are collectives running on it (their notices are no longer read).
                    let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.colls)
                        .into_iter()
                        .partition(|c| c.comm == comm);
                    self.colls = kept;
                    for c in gone {
                        self.orphans.push((c.on, c.id));
                        self.finish_coll(c.comm, c.then, Err(Error::Freed(comm)));
                    }
                    Ok(())
                };
                let _ = reply.send(r);
            }
            Cmd::Finalize { .. } => unreachable!("handled by the loop"),
        }
    }

    /// Buffer a send now, or queue it behind earlier ones.
    fn start_send(
        &mut self,
        comm: CommId,
        dest: Dest,
        tag: i32,
        bytes: Vec<u8>,
        reply: Option<Reply<()>>,
    ) -> Result<()> {
        let p2p = self.entry(comm)?.p2p.clone();
        let dest = match dest {
            Dest::Null => {
                if tag < 0 {
                    return Err(crate::Error::BadTag(tag).into());
                }
                if let Some(r) = reply {
                    let _ = r.send(Ok(()));
                }
                return Ok(());
            }
            Dest::Negative(r) => return Err(crate::Error::NegativeRank(r).into()),
            Dest::Rank(r) => r,
        };
        self.queue_send(p2p, dest, tag, bytes, reply)
    }

    fn queue_send(
        &mut self,
        comm: Communicator,
        dest: usize,
        tag: i32,
        bytes: Vec<u8>,
        reply: Option<Reply<()>>,
    ) -> Result<()> {
        if bytes.len() > self.pool {
            return Err(Error::TooLarge {
                len: bytes.len(),
                limit: self.pool,
            });
        }
        if dest >= comm.size() {
            return Err(crate::Error::BadRank {
                rank: dest,
                size: comm.size(),
            }
            .into());
        }
        if tag < 0 {
            return Err(crate::Error::BadTag(tag).into());
        }
        self.deferred.push_back(Deferred {
            comm,
            dest,
            tag,
            bytes,
            reply,
        });
        self.flush_deferred();
        Ok(())
    }

    /// Buffer the queued sends, in order, while the pool has room; the sends buffered.
    fn flush_deferred(&mut self) -> usize {
        let mut n = 0;
        while let Some(d) = self.deferred.front() {
            match d.comm.bsend(&d.bytes, d.dest, d.tag) {
                Err(crate::Error::BsendBufferFull { .. }) => break,
                r => {
                    let d = self.deferred.pop_front().expect("front");
                    if let Some(reply) = d.reply {
                        let _ = reply.send(r.map_err(Error::from));
                    } else if let Err(e) = r {
                        tracing::warn!("rmca threaded: a collective's message failed: {e}");
                    }
                    n += 1;
                }
            }
        }
        n
    }

    /// Start a collective on the runtime's executor (or refuse it, telling the others).
    fn start_coll(&mut self, comm: CommId, kind: KindCmd, mine: Vec<u8>, then: Then) {
        // A notice that came before this call may refuse this very collective.
        self.drain_notices(comm);
        let Some(e) = self.comms.get_mut(&comm) else {
            return self.finish_coll(comm, then, Err(Error::Freed(comm)));
        };
        let begun = e.order.begin();
        let on = e.p2p.clone();
        let (me, n) = (on.rank(), on.size());
        let seq = match begun {
            Begin::Run(seq) => seq,
            Begin::Refused { rank, reason, .. } => {
                // This member's own bad argument, if it has one, says more than the other's.
                let root = match &kind {
                    KindCmd::Bcast { root } | KindCmd::Reduce { root, .. } => *root,
                    _ => 0,
                };
                let own = match &kind {
                    KindCmd::Reduce { op, make, .. } | KindCmd::Allreduce { op, make } => {
                        make(*op).err()
                    }
                    _ => None,
                };
                let err = if root >= n {
                    crate::Error::BadRank {
                        rank: root,
                        size: n,
                    }
                    .into()
                } else if let Some(own) = own {
                    own.into()
                } else {
                    Error::FailedElsewhere { rank, reason }
                };
                return self.finish_coll(comm, then, Err(err));
            }
        };
        let owned = match kind {
            KindCmd::Barrier => Ok((OwnedColl::Barrier, false)),
            KindCmd::Bcast { root } => Ok((OwnedColl::Bcast { root }, true)),
            KindCmd::Reduce { root, op, make } => {
                make(op).map(|op| (OwnedColl::Reduce { root, op }, me == root))
            }
            KindCmd::Allreduce { op, make } => {
                make(op).map(|op| (OwnedColl::Allreduce { op }, true))
            }
            KindCmd::Allgather => Ok((OwnedColl::Allgather, true)),
        };
        let result = Rc::new(RefCell::new(Vec::new()));
        let launched = owned.and_then(|(kind, holds_result)| {
            let id = on.launch_owned(kind, mine, seq, result.clone())?;
            Ok((id, holds_result))
        });
        match launched {
            Ok((id, holds_result)) => {
                e.order.started(seq);
                self.colls.push(ActiveColl {
                    comm,
                    seq,
                    on,
                    id,
                    result,
                    holds_result,
                    then,
                });
            }
            Err(err) => {
                let err = Error::from(err);
                self.announce_failure(comm, seq, &err);
                self.finish_coll(comm, then, Err(err));
            }
        }
    }

    /// Collective `seq` of `comm` failed here with `err`: tell every other member, whose
    /// schedules may wait for this one (see [`CollOrder`]).
    fn announce_failure(&mut self, comm: CommId, seq: u32, err: &Error) {
        let Some(e) = self.comms.get_mut(&comm) else {
            return;
        };
        e.order.ended(seq);
        let (control, me) = (e.control.clone(), e.control.rank());
        let bytes = notice_bytes(seq, &err.to_string());
        for r in (0..control.size()).filter(|&r| r != me) {
            if let Err(e) = self.queue_send(control.clone(), r, NOTICE_TAG, bytes.clone(), None) {
                tracing::warn!(
                    "rmca threaded: a collective's refusal notice to rank {r} failed: {e}"
                );
            }
        }
    }

    /// Read the refusal notices that reached `comm`, failing the collectives they name
    /// that run here; the notices read.
    fn drain_notices(&mut self, comm: CommId) -> usize {
        let Some(e) = self.comms.get_mut(&comm) else {
            return 0;
        };
        let mut failed = Vec::new();
        let mut n = 0;
        loop {
            let got = e
                .control
                .improbe(Src::Any, NOTICE_TAG)
                .and_then(|m| match m {
                    None => Ok(None),
                    Some(m) => {
                        let from = m.status().source;
                        let mut bytes = vec![0u8; m.status().bytes];
                        m.recv(&mut bytes).map(|_| Some((from, bytes)))
                    }
                });
            match got {
                Ok(None) => break,
                Ok(Some((from, bytes))) => {
                    n += 1;
                    let Some((seq, reason)) = parse_notice(&bytes) else {
                        tracing::warn!(
                            "rmca threaded: a {}-byte refusal notice from rank {from} is too short",
                            bytes.len()
                        );
                        continue;
                    };
                    if let Some(seq) = e.order.on_notice(seq, from, reason.clone()) {
                        failed.push((seq, from, reason));
                    }
                }
                Err(err) => {
                    tracing::warn!("rmca threaded: reading refusal notices failed: {err}");
                    break;
                }
            }
        }
        for (seq, rank, reason) in failed {
            if let Some(i) = self
                .colls
                .iter()
                .position(|c| c.comm == comm && c.seq == seq)
            {
                let c = self.colls.remove(i);
                self.orphans.push((c.on, c.id));
                self.finish_coll(comm, c.then, Err(Error::FailedElsewhere { rank, reason }));
            }
        }
        n
    }

    /// Answer a collective's caller (a split goes on to make its communicator).
    fn finish_coll(&mut self, comm: CommId, then: Then, outcome: Result<Option<Vec<u8>>>) {
        match then {
            Then::Reply(r) => {
                let _ = r.send(outcome);
            }
            Then::Split { color, reply } => {
                let members = outcome.map(|table| {
                    let table: Vec<i64> = table
                        .unwrap_or_default()
                        .chunks_exact(8)
                        .map(|b| i64::from_ne_bytes(b.try_into().expect("8 bytes")))
                        .collect();
                    color.map(|color| {
                        let mut m: Vec<(i64, usize)> = table
                            .chunks_exact(2)
                            .enumerate()
                            .filter(|(_, e)| e[0] == i64::from(color))
                            .map(|(r, e)| (e[1], r))
                            .collect();
                        m.sort();
                        m.into_iter().map(|(_, r)| r).collect::<Vec<usize>>()
                    })
                });
                let started = members.and_then(|m| Ok((m, self.start_making(comm, None)?)));
                match started {
                    Ok((members, (p2p, control))) => self.making.push(Making {
                        p2p,
                        control,
                        got: (None, None),
                        split: Some(members),
                        reply: MakingReply::Split(reply),
                    }),
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
        }
    }

    fn start_making(&mut self, comm: CommId, _: Option<()>) -> Result<(PendingDup, PendingDup)> {
        let e = self.entry(comm)?;
        Ok((e.p2p.idup()?, e.control.idup()?))
    }

    /// One pass over everything waiting; the events handled.
    fn pump(&mut self) -> usize {
        let mut events = crate::raw::progress(&self.comms[&WORLD].p2p);
        events += self.flush_deferred();
        events += self.match_recvs();
        events += self.match_probes();
        events += self.step_colls();
        events += self.step_making();
        events
    }

    fn match_recvs(&mut self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < self.recvs.len() {
            let r = &self.recvs[i];
            let Some(e) = self.comms.get(&r.comm) else {
                i += 1;
                continue;
            };
            match e.p2p.improbe(r.src, r.tag) {
                Ok(None) => i += 1,
                found => {
                    let r = self.recvs.remove(i);
                    let found = found.and_then(|m| m.ok_or(crate::Error::Finalized));
                    (r.deliver)(found);
                    n += 1;
                }
            }
        }
        n
    }

    fn match_probes(&mut self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < self.probes.len() {
            let p = &self.probes[i];
            let found = match self.comms.get(&p.comm) {
                None => Err(Error::Freed(p.comm)),
                Some(e) => e.p2p.iprobe(p.src, p.tag).map_err(Error::from),
            };
            match found {
                Ok(None) => i += 1,
                other => {
                    let p = self.probes.remove(i);
                    let _ = p.reply.send(other);
                    n += 1;
                }
            }
        }
        n
    }

    fn step_colls(&mut self) -> usize {
        let mut n = 0;
        let mut comms: Vec<CommId> = self.colls.iter().map(|c| c.comm).collect();
        comms.sort_unstable();
        comms.dedup();
        for comm in comms {
            n += self.drain_notices(comm);
        }
        self.orphans
            .retain(|(on, id)| on.owned_outcome(*id).is_none());
        let mut i = 0;
        while i < self.colls.len() {
            let c = &self.colls[i];
            let Some(outcome) = c.on.owned_outcome(c.id) else {
                i += 1;
                continue;
            };
            n += 1;
            let c = self.colls.remove(i);
            let outcome = match outcome {
                Ok(_) => {
                    if let Some(e) = self.comms.get_mut(&c.comm) {
                        e.order.ended(c.seq);
                    }
                    Ok(c.holds_result.then(|| c.result.take()))
                }
                Err(err) => {
                    let err = Error::from(err);
                    self.announce_failure(c.comm, c.seq, &err);
                    Err(err)
                }
            };
            self.finish_coll(c.comm, c.then, outcome);
        }
        n
    }

    fn step_making(&mut self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < self.making.len() {
            let m = &mut self.making[i];
            let mut failed = None;
            if m.got.0.is_none() {
                match m.p2p.test() {
                    Some(Ok(c)) => m.got.0 = Some(c),
                    Some(Err(e)) => failed = Some(e),
                    None => {}
                }
            }
            if m.got.1.is_none() {
                match m.control.test() {
                    Some(Ok(c)) => m.got.1 = Some(c),
                    Some(Err(e)) => failed = Some(e),
                    None => {}
                }
            }
            if failed.is_none() && (m.got.0.is_none() || m.got.1.is_none()) {
                i += 1;
                continue;
            }
            n += 1;
            let m = self.making.remove(i);
            let made = match failed {
                Some(e) => Err(Error::from(e)),
                None => {
                    let (p2p, control) = (m.got.0.expect("made"), m.got.1.expect("made"));
                    match &m.split {
                        None => Ok(Some((p2p, control))),
                        Some(None) => Ok(None),
                        Some(Some(members)) => {
                            Ok(Some((subgroup(&p2p, members), subgroup(&control, members))))
                        }
                    }
                }
            };
            let made = made.map(|pair| {
                pair.map(|(p2p, control)| {
                    let id = self.next_id;
                    self.next_id += 1;
                    let shape = (id, p2p.rank(), p2p.size());
                    let order = CollOrder::default();
                    self.comms.insert(
                        id,
                        Entry {
                            p2p,
                            control,
                            order,
                        },
                    );
                    shape
                })
            });
            match m.reply {
                MakingReply::Dup(r) => {
                    let _ = r.send(made.and_then(|m| {
                        m.ok_or_else(|| Error::Collective("internal: a dup made nothing".into()))
                    }));
                }
                MakingReply::Split(r) => {
                    let _ = r.send(made);
                }
            }
        }
        n
    }
}

/// The communicator of `members` (ranks of `full`, in their new order) in `full`'s matching
/// space: the colours of one split share it, their groups being disjoint.
fn subgroup(full: &Communicator, members: &[usize]) -> Communicator {
    let inner = &full.inner;
    let group: Box<[crate::framework::rank::Rank]> =
        members.iter().map(|&r| inner.group[r]).collect();
    let rank = members
        .iter()
        .position(|&r| r == inner.rank)
        .expect("a member of its colour");
    Communicator::new(CommInner::intra(
        inner.shared.clone(),
        inner.context,
        group,
        rank,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(order: &mut CollOrder) -> (u32, usize) {
        match order.begin() {
            Begin::Refused { seq, rank, .. } => (seq, rank),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_notice_fails_the_running_collective_or_refuses_a_later_one() {
        let mut o = CollOrder::default();
        assert_eq!(o.begin(), Begin::Run(0));
        o.started(0);
        // Rank 2 refused collective 0 while it runs here: fail it now.
        assert_eq!(o.on_notice(0, 2, "bad root".into()), Some(0));
        assert!(o.is_idle());
        // A second notice of it (another member failed it too) is dropped.
        assert_eq!(o.on_notice(0, 1, "x".into()), None);
        // Rank 1 refused collective 2 before this member reached it.
        assert_eq!(o.on_notice(2, 1, "no such op".into()), None);
        assert_eq!(o.begin(), Begin::Run(1));
        o.started(1);
        o.ended(1);
        assert_eq!(refused(&mut o), (2, 1));
        // The refusal used up number 2: the next collective is 3, as everywhere.
        assert_eq!(o.begin(), Begin::Run(3));
        assert!(o.ahead.is_empty());
    }

    #[test]
    fn numbers_wrap_without_taking_old_notices_for_new_collectives() {
        let mut o = CollOrder {
            next: u32::MAX,
            ..CollOrder::default()
        };
        // Collective u32::MAX - 1 ended here already: its notice is stale.
        assert_eq!(o.on_notice(u32::MAX - 1, 1, "late".into()), None);
        // Collective 0 (after the wrap) is ahead.
        assert_eq!(o.on_notice(0, 1, "refused".into()), None);
        assert_eq!(o.begin(), Begin::Run(u32::MAX));
        assert_eq!(refused(&mut o), (0, 1));
        assert!(o.ahead.is_empty());
    }

    proptest::proptest! {
        /// Members that see the same refusals, each in its own interleaving of notices and
        /// starts, fail the same collectives and number every one alike.
        #[test]
        fn every_member_fails_the_refused_collectives(
            refused_by: Vec<Option<u8>>,
            delays in proptest::collection::vec(0usize..4, 0..16),
        ) {
            let total = refused_by.len() as u32;
            let refusers: Vec<(u32, usize)> = refused_by
                .iter()
                .enumerate()
                .filter_map(|(s, r)| r.map(|r| (s as u32, r as usize % 3 + 1)))
                .collect();
            let mut o = CollOrder::default();
            let mut pending: Vec<(usize, u32, usize)> = refusers
                .iter()
                .enumerate()
                .map(|(i, &(s, r))| (delays.get(i).copied().unwrap_or(0), s, r))
                .collect();
            let mut failed = Vec::new();
            for step in 0..total as usize + 4 {
                // Notices due at this step arrive before the step's collective begins.
                let (due, later): (Vec<_>, Vec<_>) =
                    pending.into_iter().partition(|&(d, s, _)| d + s as usize <= step);
                pending = later;
                for (_, s, r) in due {
                    if let Some(s) = o.on_notice(s, r, String::new()) {
                        failed.push(s);
                    }
                }
                if (step as u32) < total {
                    match o.begin() {
                        Begin::Run(s) => {
                            proptest::prop_assert_eq!(s, step as u32);
                            o.started(s);
                        }
                        Begin::Refused { seq, .. } => failed.push(seq),
                    }
                }
                // Collectives run for a step: one whose notice came in time failed, the
                // others completed (a refused collective completes nowhere that waits for
                // its refuser: modelled by its notice always arriving, late or not).
                if step >= 1 && step as u32 - 1 < total
                    && !refusers.iter().any(|&(s, _)| s == step as u32 - 1)
                {
                    o.ended(step as u32 - 1);
                }
            }
            failed.sort_unstable();
            let want: Vec<u32> = refusers.iter().map(|&(s, _)| s).collect();
            proptest::prop_assert_eq!(failed, want);
            proptest::prop_assert!(o.is_idle());
        }
    }

    #[test]
    fn handles_are_send_sync_and_elements_convert_unaligned() {
        fn is_send_sync<T: Send + Sync + Clone>() {}
        is_send_sync::<Comm>();
        fn is_send<T: Send>() {}
        is_send::<SendRequest>();
        is_send::<RecvRequest<f64>>();
        is_send::<Error>();
        let bytes: Vec<u8> = (0..17).collect();
        let v: Vec<u32> = to_elems(&bytes[1..], 0).unwrap();
        assert_eq!(v[0], u32::from_ne_bytes([1, 2, 3, 4]));
        assert!(matches!(
            to_elems::<u32>(&bytes[..6], 3),
            Err(Error::Misaligned {
                bytes: 6,
                elem: 4,
                from: 3
            })
        ));
    }

    #[test]
    fn a_finished_owner_fails_calls_instead_of_hanging() {
        let (tx, rx) = mpsc::channel::<Cmd>();
        let comm = Comm {
            id: WORLD,
            rank: 0,
            size: 1,
            tx,
        };
        // A command taken by the owner, which then goes without answering.
        let waiting = std::thread::spawn({
            let comm = comm.clone();
            move || comm.barrier()
        });
        let cmd = rx.recv().unwrap();
        drop(cmd);
        assert!(matches!(waiting.join().unwrap(), Err(Error::OwnerGone)));
        drop(rx);
        assert!(matches!(comm.send(&[1u8], 0, 0), Err(Error::OwnerGone)));
        assert!(matches!(comm.irecv::<u8>(0, 0), Err(Error::OwnerGone)));
    }
}
