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
//! * **Collectives are the owner's own state machines** (`CollMachine`, no I/O, unit
//!   tested below) over point-to-point messages on a duplicate of each communicator kept
//!   for them (linear: every member to a root, the root to every member), so that no
//!   collective blocks the owner while it waits for a member that has not called it yet.
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
//! `rmca-bench`-style figures are printed by the `threaded_rate` example.
#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::time::Duration;

use bytemuck::Pod;

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
    /// A collective's members disagreed (e.g. block lengths of an allgather).
    #[error("{0}")]
    Collective(String),
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

    /// `root`'s `data` on every member (the others' `data` is ignored).
    pub fn bcast<T: Pod>(&self, data: &[T], root: usize) -> Result<Vec<T>> {
        self.check_root(root)?;
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
        self.check_root(root)?;
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

    fn check_root(&self, root: usize) -> Result<()> {
        if root < self.size {
            Ok(())
        } else {
            Err(crate::Error::BadRank {
                rank: root,
                size: self.size,
            }
            .into())
        }
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
// Collectives without I/O.

/// What a collective computes at its root once every contribution arrived.
pub(crate) enum Combine {
    /// Nothing (a barrier).
    Nothing,
    /// Keep the root's own data (a broadcast has no gather).
    Root,
    /// Fold the contributions in rank order.
    Reduce(ByteReduction),
    /// Concatenate them in rank order (equal lengths).
    Concat,
}

/// A linear collective without I/O: the members' contributions go to the root (unless
/// `gather` is off), the root combines them, and the result goes back to every member
/// (unless `scatter_result` is off: a reduce). Tags: `tag` for the gather, `tag + 1` for the
/// result.
pub(crate) struct CollMachine {
    me: usize,
    n: usize,
    root: usize,
    tag: i32,
    spread: bool,
    combine: Combine,
    parts: Vec<Option<Vec<u8>>>,
    missing: usize,
    outcome: Option<Result<Option<Vec<u8>>>>,
}

/// A message a [`CollMachine`] sends.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Out {
    pub(crate) dest: usize,
    pub(crate) tag: i32,
    pub(crate) bytes: Vec<u8>,
}

impl CollMachine {
    /// A collective of rank `me` of `n` on `tag` (and `tag + 1`), started with this member's
    /// contribution `mine`; the messages to send now.
    pub(crate) fn start(
        me: usize,
        n: usize,
        root: usize,
        tag: i32,
        (gather, spread): (bool, bool),
        combine: Combine,
        mine: Vec<u8>,
    ) -> (Self, Vec<Out>) {
        let mut m = Self {
            me,
            n,
            root,
            tag,
            spread,
            combine,
            parts: vec![None; n],
            missing: 0,
            outcome: None,
        };
        let mut out = Vec::new();
        if me == root {
            m.parts[me] = Some(mine);
            m.missing = if gather { n - 1 } else { 0 };
            if m.missing == 0 {
                out = m.finish_root();
            }
        } else if gather {
            out.push(Out {
                dest: root,
                tag,
                bytes: mine,
            });
            if !spread {
                m.outcome = Some(Ok(None));
            }
        }
        (m, out)
    }

    /// The (source, tag) pairs of the messages it waits for now.
    pub(crate) fn expected(&self) -> Vec<(usize, i32)> {
        if self.outcome.is_some() {
            return Vec::new();
        }
        if self.me == self.root {
            (0..self.n)
                .filter(|&r| self.parts[r].is_none())
                .map(|r| (r, self.tag))
                .collect()
        } else {
            vec![(self.root, self.tag + 1)]
        }
    }

    /// A message arrived from `src` with `tag`; the messages to send now.
    pub(crate) fn on_message(&mut self, src: usize, tag: i32, bytes: Vec<u8>) -> Vec<Out> {
        if self.outcome.is_some() {
            return Vec::new();
        }
        if self.me == self.root {
            if tag != self.tag || src >= self.n || self.parts[src].is_some() {
                self.outcome = Some(Err(Error::Collective(format!(
                    "collective: an unexpected message from rank {src} with tag {tag}"
                ))));
                return Vec::new();
            }
            self.parts[src] = Some(bytes);
            self.missing -= 1;
            if self.missing == 0 {
                return self.finish_root();
            }
            Vec::new()
        } else {
            self.outcome = Some(Ok(Some(bytes)));
            Vec::new()
        }
    }

    fn finish_root(&mut self) -> Vec<Out> {
        let parts: Vec<Vec<u8>> = self
            .parts
            .iter_mut()
            .map(|p| p.take().unwrap_or_default())
            .collect();
        let result = match &self.combine {
            Combine::Nothing => Ok(Vec::new()),
            Combine::Root => Ok(parts[self.root].clone()),
            Combine::Concat => {
                let len = parts[0].len();
                match parts.iter().position(|p| p.len() != len) {
                    Some(r) => Err(Error::Collective(format!(
                        "allgather: rank {r} gave {} bytes, rank 0 gave {len}",
                        parts[r].len()
                    ))),
                    None => Ok(parts.concat()),
                }
            }
            Combine::Reduce(red) => {
                let mut acc = parts[0].clone();
                let mut bad = None;
                for (r, p) in parts.iter().enumerate().skip(1) {
                    if p.len() != acc.len() {
                        bad = Some((r, p.len()));
                        break;
                    }
                    red.apply(&mut acc, p, None, false);
                }
                match bad {
                    Some((r, len)) => Err(Error::Collective(format!(
                        "reduce: rank {r} gave {len} bytes, rank 0 gave {}",
                        acc.len()
                    ))),
                    None => Ok(acc),
                }
            }
        };
        let mut out = Vec::new();
        // The result goes out even when it is an error here (members learn nothing more
        // than an empty result then; the root reports the error).
        if self.spread {
            let bytes = result.as_ref().map(Clone::clone).unwrap_or_default();
            for r in (0..self.n).filter(|&r| r != self.me) {
                out.push(Out {
                    dest: r,
                    tag: self.tag + 1,
                    bytes: bytes.clone(),
                });
            }
        }
        self.outcome = Some(result.map(Some));
        out
    }

    /// The outcome, once done (handed out once).
    pub(crate) fn take_outcome(&mut self) -> Option<Result<Option<Vec<u8>>>> {
        self.outcome.take()
    }

    pub(crate) fn is_done(&self) -> bool {
        self.outcome.is_some()
    }
}

// ---------------------------------------------------------------------------------------
// The owner.

/// A communicator in the owner's table: the application's, and a duplicate for the
/// collectives' messages.
struct Entry {
    p2p: Communicator,
    coll: Communicator,
    /// Collectives started on it (each takes two tags).
    seq: u32,
}

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

struct ActiveColl {
    comm: CommId,
    machine: CollMachine,
    then: Then,
}

/// A dup or split waiting for its two duplicates.
struct Making {
    p2p: PendingDup,
    coll: PendingDup,
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
    making: Vec<Making>,
    deferred: VecDeque<Deferred>,
}

fn owner_main(config: Config, rx: Receiver<Cmd>, ready: SyncSender<Result<(usize, usize)>>) {
    let started = (|| -> crate::Result<Owner> {
        let universe = crate::init()?;
        let world = universe.world();
        let coll = world.dup()?;
        universe.buffer_attach(vec![0u8; config.send_pool])?;
        let mut comms = HashMap::new();
        comms.insert(
            WORLD,
            Entry {
                p2p: world,
                coll,
                seq: 0,
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
            } => {
                if let Err(e) = self.start_coll(comm, kind, mine, Then::Reply(reply.clone())) {
                    let _ = reply.send(Err(e));
                }
            }
            Cmd::Dup { comm, reply } => match self.start_making(comm, None) {
                Ok((p2p, coll)) => self.making.push(Making {
                    p2p,
                    coll,
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
                let then = Then::Split {
                    color,
                    reply: reply.clone(),
                };
                if let Err(e) = self.start_coll(comm, KindCmd::Allgather, bytes, then) {
                    let _ = reply.send(Err(e));
                }
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

    fn start_coll(&mut self, comm: CommId, kind: KindCmd, mine: Vec<u8>, then: Then) -> Result<()> {
        let e = self.comms.get_mut(&comm).ok_or(Error::Freed(comm))?;
        let (me, n) = (e.coll.rank(), e.coll.size());
        // Two tags per collective; a tag comes back after 2^29 collectives on one
        // communicator, long after its first user completed everywhere.
        let tag = ((e.seq % (1 << 29)) * 2) as i32;
        e.seq = e.seq.wrapping_add(1);
        let coll = e.coll.clone();
        let (root, shape, combine) = match kind {
            KindCmd::Barrier => (0, (true, true), Combine::Nothing),
            KindCmd::Bcast { root } => (root, (false, true), Combine::Root),
            KindCmd::Reduce { root, op, make } => (root, (true, false), Combine::Reduce(make(op)?)),
            KindCmd::Allreduce { op, make } => (0, (true, true), Combine::Reduce(make(op)?)),
            KindCmd::Allgather => (0, (true, true), Combine::Concat),
        };
        let (machine, out) = CollMachine::start(me, n, root, tag, shape, combine, mine);
        for o in out {
            self.queue_send(coll.clone(), o.dest, o.tag, o.bytes, None)?;
        }
        let mut c = ActiveColl {
            comm,
            machine,
            then,
        };
        if c.machine.is_done() {
            self.complete_coll(&mut c);
        } else {
            self.colls.push(c);
        }
        Ok(())
    }

    fn complete_coll(&mut self, c: &mut ActiveColl) {
        let Some(outcome) = c.machine.take_outcome() else {
            return;
        };
        match std::mem::replace(&mut c.then, Then::Reply(mpsc::sync_channel(1).0)) {
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
                let started = members.and_then(|m| Ok((m, self.start_making(c.comm, None)?)));
                match started {
                    Ok((members, (p2p, coll))) => self.making.push(Making {
                        p2p,
                        coll,
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
        Ok((e.p2p.idup()?, e.coll.idup()?))
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
        let mut i = 0;
        while i < self.colls.len() {
            let comm = self.colls[i].comm;
            let Some(coll) = self.comms.get(&comm).map(|e| e.coll.clone()) else {
                let mut c = self.colls.remove(i);
                c.machine.outcome = Some(Err(Error::Freed(comm)));
                self.complete_coll(&mut c);
                continue;
            };
            for (src, tag) in self.colls[i].machine.expected() {
                let got = coll.improbe(src, tag).and_then(|m| match m {
                    None => Ok(None),
                    Some(m) => {
                        let mut bytes = vec![0u8; m.status().bytes];
                        m.recv(&mut bytes).map(|_| Some(bytes))
                    }
                });
                match got {
                    Ok(None) => {}
                    Ok(Some(bytes)) => {
                        n += 1;
                        let out = self.colls[i].machine.on_message(src, tag, bytes);
                        for o in out {
                            if let Err(e) =
                                self.queue_send(coll.clone(), o.dest, o.tag, o.bytes, None)
                            {
                                self.colls[i].machine.outcome = Some(Err(e));
                            }
                        }
                    }
                    Err(e) => {
                        self.colls[i].machine.outcome = Some(Err(e.into()));
                        break;
                    }
                }
            }
            if self.colls[i].machine.is_done() {
                let mut c = self.colls.remove(i);
                self.complete_coll(&mut c);
            } else {
                i += 1;
            }
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
                match m.coll.test() {
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
                    let (p2p, coll) = (m.got.0.expect("made"), m.got.1.expect("made"));
                    match &m.split {
                        None => Ok(Some((p2p, coll))),
                        Some(None) => Ok(None),
                        Some(Some(members)) => {
                            Ok(Some((subgroup(&p2p, members), subgroup(&coll, members))))
                        }
                    }
                }
            };
            let made = made.map(|pair| {
                pair.map(|(p2p, coll)| {
                    let id = self.next_id;
                    self.next_id += 1;
                    let shape = (id, p2p.rank(), p2p.size());
                    self.comms.insert(id, Entry { p2p, coll, seq: 0 });
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
    Communicator::new(CommInner {
        rank_index: Default::default(),
        shared: inner.shared.clone(),
        context: inner.context,
        identity: group.iter().enumerate().all(|(i, &w)| w as usize == i),
        group,
        rank,
        coll: Default::default(),
        inter: None,
        lease: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run one collective among `n` simulated members (messages delivered in a random-ish
    /// order given by `seed`); every member's outcome.
    fn simulate(
        n: usize,
        root: usize,
        shape: (bool, bool),
        combine: impl Fn() -> Combine,
        input: impl Fn(usize) -> Vec<u8>,
        seed: u64,
    ) -> Vec<Result<Option<Vec<u8>>>> {
        let mut machines = Vec::new();
        let mut wire: Vec<(usize, Out)> = Vec::new();
        for me in 0..n {
            let (m, out) = CollMachine::start(me, n, root, 10, shape, combine(), input(me));
            machines.push(m);
            wire.extend(out.into_iter().map(|o| (me, o)));
        }
        let mut x = seed | 1;
        while !wire.is_empty() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (src, o) = wire.remove((x as usize) % wire.len());
            assert!(
                machines[o.dest].expected().contains(&(src, o.tag)),
                "a message nobody expects: {src} -> {} tag {}",
                o.dest,
                o.tag
            );
            let more = machines[o.dest].on_message(src, o.tag, o.bytes);
            wire.extend(more.into_iter().map(|m| (o.dest, m)));
        }
        machines
            .iter_mut()
            .map(|m| m.take_outcome().expect("every member finished"))
            .collect()
    }

    fn sum_u32() -> Combine {
        Combine::Reduce(ByteReduction::new::<u32, Op>(Op::Sum).expect("sum of u32"))
    }

    #[test]
    fn allreduce_barrier_bcast_reduce_allgather_agree() {
        for n in 1..6 {
            for seed in 1..20u64 {
                let le = |v: u32| v.to_ne_bytes().to_vec();
                let total: u32 = (0..n as u32).map(|r| r + 1).sum();
                for out in simulate(n, 0, (true, true), sum_u32, |r| le(r as u32 + 1), seed) {
                    assert_eq!(out.unwrap(), Some(le(total)));
                }
                for out in simulate(
                    n,
                    0,
                    (true, true),
                    || Combine::Nothing,
                    |_| Vec::new(),
                    seed,
                ) {
                    assert_eq!(out.unwrap(), Some(Vec::new()));
                }
                let root = n - 1;
                for out in simulate(
                    n,
                    root,
                    (false, true),
                    || Combine::Root,
                    |r| le(r as u32 * 7),
                    seed,
                ) {
                    assert_eq!(out.unwrap(), Some(le(root as u32 * 7)));
                }
                for (r, out) in
                    simulate(n, root, (true, false), sum_u32, |r| le(r as u32 + 1), seed)
                        .into_iter()
                        .enumerate()
                {
                    assert_eq!(out.unwrap(), (r == root).then(|| le(total)));
                }
                let all: Vec<u8> = (0..n as u8).flat_map(|r| [r, r]).collect();
                for out in simulate(
                    n,
                    0,
                    (true, true),
                    || Combine::Concat,
                    |r| vec![r as u8; 2],
                    seed,
                ) {
                    assert_eq!(out.unwrap(), Some(all.clone()));
                }
            }
        }
    }

    #[test]
    fn a_non_commutative_fold_runs_in_rank_order() {
        // A "keep the left operand's digits, shift in the right's" fold: a*10 + b.
        let make = || {
            Combine::Reduce(ByteReduction::from_fn(
                8,
                false,
                Box::new(
                    |dst: &mut [u8], src: &[u8], acc: Option<&[u8]>, src_first: bool| {
                        let a = u64::from_ne_bytes(acc.unwrap_or(dst).try_into().unwrap());
                        let b = u64::from_ne_bytes(src.try_into().unwrap());
                        let v = if src_first { b * 10 + a } else { a * 10 + b };
                        dst.copy_from_slice(&v.to_ne_bytes());
                    },
                ),
            ))
        };
        for seed in 1..30u64 {
            let outs = simulate(
                4,
                0,
                (true, true),
                make,
                |r| (r as u64 + 1).to_ne_bytes().to_vec(),
                seed,
            );
            for out in outs {
                assert_eq!(out.unwrap(), Some(1234u64.to_ne_bytes().to_vec()));
            }
        }
    }

    #[test]
    fn unequal_allgather_blocks_fail_at_the_root_and_reach_everyone() {
        let outs = simulate(
            3,
            0,
            (true, true),
            || Combine::Concat,
            |r| vec![0u8; r + 1],
            5,
        );
        assert!(matches!(outs[0], Err(Error::Collective(_))));
        // The others get an empty result (the root reports the error).
        assert_eq!(outs[1].as_ref().unwrap(), &Some(Vec::new()));
    }

    #[test]
    fn a_stray_message_fails_the_root_instead_of_corrupting_it() {
        let (mut m, _) = CollMachine::start(0, 3, 0, 4, (true, true), Combine::Nothing, Vec::new());
        assert!(m.on_message(1, 4, Vec::new()).is_empty());
        assert!(m.on_message(1, 4, Vec::new()).is_empty());
        assert!(matches!(m.take_outcome(), Some(Err(Error::Collective(_)))));
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
