//! The library's per-process state: the runtime, the handle tables and the error handlers.
//!
//! MPI objects created at run time (communicators, requests, error handlers) are entries of
//! tables here; their C handles are a per-kind base plus the index, so a handle of the wrong
//! kind, a freed one or garbage is recognised and refused with its error class instead of
//! being dereferenced.
//!
//! # Threads
//!
//! rmca's runtime and the objects of the `rmca` crate are single-threaded (`Rc`, `RefCell`):
//! the state is reached by one thread at a time, the *owner*, whose id is in `Global::owner`.
//! Every access checks it (a relaxed load and a compare with `pthread_self`). The thread level
//! is fixed by `MPI_Init_thread` and decides who the owner is:
//!
//! - `MPI_THREAD_SINGLE`, `MPI_THREAD_FUNNELED`: the thread that initialized, for good. A call
//!   from any other thread is refused with an error naming the level (`not_running`). The
//!   message path gained one relaxed load per call (the entry points' [`entry_is_direct`]):
//!   no lock, no atomic read-modify-write. The owner checks read the thread id inline
//!   (`this_thread`), and the per-message entry points hold their implementation's body
//!   (the `#[export]` attribute), so the blocking 8 B message costs 1052 instructions against
//!   1041 before thread levels existed (bench/RESULTS.md).
//! - `MPI_THREAD_SERIALIZED`: the last thread that called. A call from a thread that is not
//!   the owner takes the ownership over ([`entered`], under the process lock, which two
//!   hand-overs at once serialize on); calls of the owner pay what FUNNELED's pay. Two threads
//!   in MPI at once break the program's promise and are not detected when one of them is the
//!   owner already.
//! - `MPI_THREAD_MULTIPLE`: every MPI call runs holding a process-wide lock (a FIFO ticket
//!   lock), taken by the exported entry points ([`entered`]) and making the caller the owner
//!   until it returns. Blocking waits hold the lock only while they test and progress: one
//!   progress owner at a time, as Open MPI's and MPICH's waits (a try-lock on the progress
//!   engine, the other waiters sleeping on their request). The first thread to wait is the
//!   *driver*: between its passes it runs the tests of the other waits and wakes those whose
//!   operation completed, and it hands the lock to the threads queued for it (calls that
//!   start operations, waits that were woken). Every other waiting thread *parks*: it lists
//!   its test, gives the lock up and sleeps (spins, yields for up to 0.5 ms, then a futex) on
//!   its own word until the driver found its operation complete, or left its wait and
//!   handed it the progress (`park_until`, `wake_completed`, `leave_wait`). So a message
//!   wakes the thread it is for, and the lock's queue holds only threads with work; with
//!   every waiter queued for the lock (as before), the lock went round all of them, one
//!   progress pass each, and each hand-over to a thread that slept cost a wake-up (at 4
//!   threads per rank, each waiting thread burnt as much CPU as the one that progressed;
//!   `tests/c/threads_park.c`). The hooks are the runtime's (`rmca_framework::progress::
//!   set_wait_hook`; its waits take their borrow-free paths while one is installed, and
//!   `MPI_Wait`/`Waitall`/`Waitany`/`Waitsome` wait by testing, `ffi::wait_by_testing`).
//!   A parked wait's test runs on the driver, under the lock, while its thread sleeps:
//!   `Rc`s stay sound because every touch of an rmca object happens under the lock, whose
//!   release and acquisition order them, and the test's error is raised by the waiting
//!   thread when it returns (its error handler runs there). A call from inside a call of the
//!   same thread (an error handler, a user reduction) is the owner already: it runs without
//!   the lock and is refused by `with`'s busy flag as before; nothing is released or parked
//!   while that flag is set (a wait inside `with` keeps the lock).
//!
//!   Calls that start work need not wait for the lock: `MPI_Isend` and `MPI_Irecv` on a
//!   predefined datatype, from a thread that finds the lock held, are queued for its holder
//!   on a lock-free stack with a request handle reserved beforehand for that thread, and
//!   return at once ([`crate::handoff`], MPICH's ch4 "handoff" model). Whoever holds the lock
//!   next starts them, in the order they were queued, before anything else: at every
//!   acquisition (`entered`, `try_entered`, the wait hook's re-acquisitions, the progress
//!   thread's passes) and in each pass of a wait that keeps it (`release_for_waiters`,
//!   `park_until`); every unlock looks at the queue afterwards (`after_unlock`), so a call
//!   queued as the holder left is not stranded. A thread's later calls take the lock, and
//!   so drain, first: its calls keep their order. What such a call would have refused (a
//!   freed communicator, a rank or tag out of range) is found when it starts and raised by
//!   its completion call, as MPI allows for non-blocking calls. Measured before building it
//!   (temporary counters, bench/mt_rate.c, 2 ranks on 2 cores, load 4.6): at 2 threads per
//!   rank the lock was almost never contended at submission (25 of 563 k `MPI_Isend`/
//!   `MPI_Irecv`, 11 ms waited against 69 ms held); at 4, `MPI_Isend` waited 661 ms for it
//!   (9% of the calls, 13 us each) against 301 ms held, `MPI_Irecv` 1035 ms against 368:
//!   a quarter to a third of each thread's time. With the queue, 4 threads per rank send
//!   2.4 times as many messages, 2 and 1 thread as many (bench/RESULTS.md, mt-rate).
//!
//!   Not done, and why: per-communicator or per-peer locks need a runtime without `Rc`
//!   internals (the PML, BTLs and collectives share one `RefCell` runtime per process), so
//!   one thread runs MPI code at a time still; the queue takes the waiting out of the
//!   submissions, the parked waits out of the completions. The lock is a ticket lock (FIFO:
//!   a driver that releases and takes it back between passes starves nobody) whose waiters
//!   sleep on one of eight bells by ticket, so an unlock wakes the next thread only.
//!
//! - With the asynchronous progress thread (`mpi_async_progress`, [`crate::progress_thread`]),
//!   at any level: every call holds the process lock as at MULTIPLE (`locked`), and the thread
//!   runs its progress passes under it between calls, taking it only when no call holds it or
//!   waits for it (`progress_pass`, a `try_lock`). The level reported stays the one asked
//!   for; below SERIALIZED the owner is nobody between calls, so the FUNNELED check compares
//!   the caller with the main thread instead (`entered_with_progress_thread`,
//!   `refused_below_serialized`): another thread's call is refused naming the level as before.
//!   Without the thread nothing of this is reached: SINGLE and FUNNELED keep their one load.
//!
//! The library's other tables (derived datatypes, groups, ops, info objects, attributes,
//! windows, sessions, matched messages, partitioned and generalized requests, attached
//! buffers, `MPI_Alloc_mem` blocks) are process-wide [`Confined`] cells under the same rule:
//! an object made on one thread is the same object on every thread the level lets in. When no
//! thread owns the library (before `MPI_Init`, after `MPI_Finalize`) a thread reaches them
//! under the process lock, so the calls MPI allows then (`MPI_Info_*`, `MPI_Session_init`)
//! work from any thread; `MPI_Finalize` gives the ownership up (below MULTIPLE) for that.
//!
//! What MULTIPLE does not do yet: concurrency inside the library (one thread runs MPI code at
//! a time; see above; only the submissions above are taken off the lock), and creating communicators
//! from several threads at once (their context ids are agreed without a process-wide
//! reservation: create them from one thread, or one at a time).

// The process-wide state (`Global`) is shared memory confined to one thread by a check of
// the caller's thread id: the one other module of the crate with `unsafe` code.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU8, AtomicUsize, Ordering};

use rmca::framework::progress::Parking;
use rmca::raw::{RawBatch, RawId, RawRequest};
use rmca::{Communicator, Universe};

use crate::abi::*;

/// An MPI error: its class and what exactly was wrong. Boxed, so that every [`MpiResult`]
/// of the crate is one word of error (`MpiResult<()>` is a pointer, null for success): the
/// 48-byte error inline made each result of the per-message paths a copy through memory;
/// errors are rare, and their allocation is on the error path only.
#[derive(Debug, Clone)]
pub struct MpiError(Box<ErrorInfo>);

/// What an [`MpiError`] says (reached through it by `Deref`: `e.class`, `e.msg`, `e.comm`).
#[derive(Debug, Clone)]
pub struct ErrorInfo {
    pub class: c_int,
    pub msg: String,
    /// The communicator whose error handler decides (by default the call's, else world's).
    pub comm: Option<Handle>,
}

impl MpiError {
    #[cold]
    #[inline(never)]
    pub fn new(class: c_int, msg: impl Into<String>) -> Self {
        Self::with_comm(class, msg.into(), None)
    }

    /// An error of `class` raised on `comm`'s error handler (`None`: the call's).
    #[cold]
    #[inline(never)]
    pub fn with_comm(class: c_int, msg: String, comm: Option<Handle>) -> Self {
        Self(Box::new(ErrorInfo { class, msg, comm }))
    }

    /// Raise this error on `comm`'s error handler.
    pub fn on(mut self, comm: Handle) -> Self {
        self.0.comm = Some(comm);
        self
    }
}

impl std::ops::Deref for MpiError {
    type Target = ErrorInfo;
    fn deref(&self) -> &ErrorInfo {
        &self.0
    }
}

impl std::ops::DerefMut for MpiError {
    fn deref_mut(&mut self) -> &mut ErrorInfo {
        &mut self.0
    }
}

pub type MpiResult<T> = Result<T, MpiError>;

impl From<rmca::Error> for MpiError {
    #[cold]
    #[inline(never)]
    fn from(e: rmca::Error) -> Self {
        use rmca::framework::pml::{PmlError, StatusError};
        let class = match &e {
            rmca::Error::BadRank { .. } | rmca::Error::NegativeRank(_) => MPI_ERR_RANK,
            rmca::Error::BadTag(_) => MPI_ERR_TAG,
            rmca::Error::Status { error, .. } => match error {
                StatusError::Truncated { .. } => MPI_ERR_TRUNCATE,
                StatusError::PeerFailed { .. } => MPI_ERR_PROC_ABORTED,
                StatusError::Cancelled => MPI_ERR_OTHER,
                // Memory of this process that does not keep what is written to it: not the
                // peer's failure (PROC_ABORTED would send fault-tolerant code recovering a
                // live peer), an error inside the library's own copy.
                StatusError::Corrupted { .. } => MPI_ERR_INTERN,
            },
            rmca::Error::Pml(p) => match p {
                PmlError::BadRank { .. } => MPI_ERR_RANK,
                PmlError::BadTag(_) => MPI_ERR_TAG,
                PmlError::UnknownRequest(_) => MPI_ERR_REQUEST,
                _ => MPI_ERR_OTHER,
            },
            rmca::Error::InvalidArgument(_) => MPI_ERR_ARG,
            rmca::Error::CommKind(_) => MPI_ERR_COMM,
            rmca::Error::Rma(o) => crate::ffi::win::class_of(o),
            // A generalized request callback's code (MPI: returned as it is).
            rmca::Error::Code { code, .. } => *code,
            _ => MPI_ERR_OTHER,
        };
        MpiError::new(class, e.to_string())
    }
}

/// The text of an error class (`MPI_Error_string`).
pub fn class_text(class: c_int) -> &'static str {
    match class {
        MPI_SUCCESS => "MPI_SUCCESS: no error",
        MPI_ERR_BUFFER => "MPI_ERR_BUFFER: invalid buffer pointer",
        MPI_ERR_COUNT => "MPI_ERR_COUNT: invalid count argument",
        MPI_ERR_TYPE => "MPI_ERR_TYPE: invalid datatype",
        MPI_ERR_TAG => "MPI_ERR_TAG: invalid tag",
        MPI_ERR_COMM => "MPI_ERR_COMM: invalid communicator",
        MPI_ERR_RANK => "MPI_ERR_RANK: invalid rank",
        MPI_ERR_REQUEST => "MPI_ERR_REQUEST: invalid request",
        MPI_ERR_ROOT => "MPI_ERR_ROOT: invalid root",
        MPI_ERR_GROUP => "MPI_ERR_GROUP: invalid group",
        MPI_ERR_OP => "MPI_ERR_OP: invalid reduce operation",
        MPI_ERR_TOPOLOGY => "MPI_ERR_TOPOLOGY: invalid communicator topology",
        MPI_ERR_DIMS => "MPI_ERR_DIMS: invalid dimension argument",
        MPI_ERR_ARG => "MPI_ERR_ARG: invalid argument of some other kind",
        MPI_ERR_UNKNOWN => "MPI_ERR_UNKNOWN: unknown error",
        MPI_ERR_TRUNCATE => "MPI_ERR_TRUNCATE: message truncated",
        MPI_ERR_OTHER => "MPI_ERR_OTHER: known error not in this list",
        MPI_ERR_INTERN => "MPI_ERR_INTERN: internal error",
        MPI_ERR_PENDING => "MPI_ERR_PENDING: pending request",
        MPI_ERR_IN_STATUS => "MPI_ERR_IN_STATUS: error code is in status",
        MPI_ERR_KEYVAL => "MPI_ERR_KEYVAL: invalid keyval",
        MPI_ERR_NO_MEM => "MPI_ERR_NO_MEM: out of memory",
        MPI_ERR_UNSUPPORTED_OPERATION => "MPI_ERR_UNSUPPORTED_OPERATION: unsupported operation",
        31 => "MPI_ERR_INFO_KEY: invalid info key",
        32 => "MPI_ERR_INFO_NOKEY: info key not set",
        33 => "MPI_ERR_INFO_VALUE: invalid info value",
        34 => "MPI_ERR_INFO: invalid info object",
        MPI_ERR_PROC_ABORTED => "MPI_ERR_PROC_ABORTED: a peer process failed",
        MPI_ERR_ERRHANDLER => "MPI_ERR_ERRHANDLER: invalid error handler",
        60 => "MPI_ERR_SESSION: invalid session",
        MPI_ERR_ABI => "MPI_ERR_ABI: ABI mismatch",
        37 => "MPI_ERR_LOCKTYPE: invalid lock type",
        46 => "MPI_ERR_RMA_ATTACH: memory cannot be attached (or detached) in this window",
        47 => "MPI_ERR_RMA_CONFLICT: conflicting accesses to a window",
        48 => "MPI_ERR_RMA_RANGE: target memory is not part of the window",
        49 => "MPI_ERR_RMA_SHARED: memory cannot be shared",
        50 => "MPI_ERR_RMA_SYNC: wrong synchronization of RMA calls",
        56 => "MPI_ERR_WIN: invalid window",
        57 => "MPI_ERR_RMA_FLAVOR: wrong window flavor for this call",
        20..=62 => "MPI error class of a feature rmca does not implement",
        _ => "",
    }
}

/// A communicator's error handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrHandler {
    /// `MPI_ERRORS_ARE_FATAL`: abort the job with the message.
    Fatal,
    /// `MPI_ERRORS_ABORT`: abort the processes of the communicator's group; rmca aborts the
    /// job as for [`ErrHandler::Fatal`], but the handler keeps its identity (a program reads
    /// back the handler it set).
    Abort,
    /// `MPI_ERRORS_RETURN`: return the class to the caller.
    Return,
    /// One made by `MPI_Comm_create_errhandler`: its handle.
    User(Handle),
}

/// The C function behind a user error handler (`MPI_Comm_errhandler_function`, variadic;
/// the window, file and session ones have the same shape: a handle and a code by pointer).
pub type CommErrhandlerFn = unsafe extern "C" fn(*mut Handle, *mut c_int, ...);

/// The kind of object a user error handler was made for (`MPI_Comm_create_errhandler`,
/// `MPI_Win_create_errhandler`, ...): it may be set on objects of that kind only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrhKind {
    Comm,
    Win,
    File,
    Session,
}

impl ErrhKind {
    /// The kind's name in MPI calls ("Comm", "Win", ...).
    pub fn name(self) -> &'static str {
        match self {
            ErrhKind::Comm => "Comm",
            ErrhKind::Win => "Win",
            ErrhKind::File => "File",
            ErrhKind::Session => "Session",
        }
    }
}

/// The user error handlers, by handle less [`ERRH_BASE`]: outside [`State`], since MPI
/// lets a program make and free error handlers before `MPI_Init` or `MPI_Session_init`
/// (`MPI_Session_create_errhandler`, `MPI_Errhandler_free`).
static ERRHANDLERS: std::sync::Mutex<Vec<(ErrhKind, CommErrhandlerFn)>> =
    std::sync::Mutex::new(Vec::new());

fn errhandlers() -> std::sync::MutexGuard<'static, Vec<(ErrhKind, CommErrhandlerFn)>> {
    ERRHANDLERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The user error handler entry of handle `h`.
fn errhandler_entry(h: Handle) -> Option<(ErrhKind, CommErrhandlerFn)> {
    errhandlers().get(h.checked_sub(ERRH_BASE)?).copied()
}

/// The error handler behind handle `h` (callable at any time).
pub fn errhandler(h: Handle) -> MpiResult<ErrHandler> {
    match h {
        MPI_ERRORS_ARE_FATAL => Ok(ErrHandler::Fatal),
        MPI_ERRORS_ABORT => Ok(ErrHandler::Abort),
        MPI_ERRORS_RETURN => Ok(ErrHandler::Return),
        _ if errhandler_entry(h).is_some() => Ok(ErrHandler::User(h)),
        _ => Err(MpiError::new(
            MPI_ERR_ARG,
            format!("invalid error handler {h:#x}: not MPI_ERRORS_ARE_FATAL, MPI_ERRORS_ABORT, MPI_ERRORS_RETURN or one created"),
        )),
    }
}

/// The error handler behind handle `h`, to set on an object of `kind`: a user handler must
/// have been made for that kind (as MPICH and Open MPI check).
pub fn errhandler_for(h: Handle, kind: ErrhKind) -> MpiResult<ErrHandler> {
    let e = errhandler(h)?;
    if let ErrHandler::User(u) = e {
        let made = errhandler_entry(u).map(|(k, _)| k);
        if made != Some(kind) {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!(
                    "error handler {h:#x} was made by MPI_{}_create_errhandler: only one made by MPI_{}_create_errhandler (or a predefined one) goes here",
                    made.map_or("?", ErrhKind::name),
                    kind.name()
                ),
            ));
        }
    }
    Ok(e)
}

/// Register a user error handler function for objects of `kind` (callable at any time).
pub fn add_errhandler(kind: ErrhKind, f: CommErrhandlerFn) -> MpiResult<Handle> {
    let mut t = errhandlers();
    if t.len() >= MAX_OBJECTS {
        return Err(MpiError::new(MPI_ERR_NO_MEM, "too many error handlers"));
    }
    t.push((kind, f));
    Ok(ERRH_BASE + t.len() - 1)
}

/// Free an error handler handle (callable at any time). A user one stays usable by the
/// objects it is set on (MPI frees the object when the last reference goes; rmca's entries
/// are never reused); freeing a predefined one does nothing, as MPI 2.2 and later say (the
/// `Comm_get_errhandler` .. `Errhandler_free` idiom frees what `get` returned).
pub fn free_errhandler(h: Handle) -> MpiResult<()> {
    errhandler(h).map(|_| ())
}

/// The function of user error handler `h`.
pub fn errhandler_fn(h: Handle) -> Option<CommErrhandlerFn> {
    errhandler_entry(h).map(|(_, f)| f)
}

/// A communicator table entry.
pub struct CommEntry {
    pub comm: Communicator,
    pub errhandler: ErrHandler,
    pub name: String,
}

/// How a send was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendKind {
    Standard,
    Synchronous,
    /// `MPI_Rsend`: the program promises the receive is posted; a standard send is correct.
    Ready,
    /// `MPI_Bsend`: copied into the attached buffer's budget, completes locally.
    Buffered,
}

/// How a persistent collective (`MPI_Neighbor_alltoall_init`, ...) starts at each
/// `MPI_Start`: given the request's communicator, its running request and the library data
/// to keep until it completes. Called with the state borrowed: it must not use
/// [`with`].
#[derive(Clone)]
#[allow(clippy::type_complexity)]
pub struct CollStart(
    pub std::rc::Rc<dyn Fn(&Communicator) -> MpiResult<(RawRequest, Option<crate::ffi::Staged>)>>,
);

impl std::fmt::Debug for CollStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CollStart")
    }
}

/// The arguments of a persistent request (`MPI_Send_init`, `MPI_Recv_init`, the `_init`
/// collectives), kept for each `MPI_Start`. Buffers are the C program's addresses.
#[derive(Clone, Debug)]
pub enum Persistent {
    Send {
        buf: usize,
        len: usize,
        dest: c_int,
        tag: c_int,
        kind: SendKind,
    },
    Recv {
        buf: usize,
        len: usize,
        source: c_int,
        tag: c_int,
    },
    /// A persistent collective.
    Coll(CollStart),
}

/// Where a request stands.
pub enum ReqState {
    /// A persistent request not started (or completed and not restarted).
    Inactive,
    /// Running in the PML.
    Active(RawRequest),
    /// Completed (at start: `MPI_PROC_NULL`, buffered sends; or by a test that found it
    /// complete without being allowed to free it). Boxed, like [`ReqEntry::persistent`]: the
    /// table's entries are moved on every `MPI_Isend`/`MPI_Irecv` and their completion, so
    /// they hold only what running requests need (48 bytes instead of 120).
    Done(Box<Outcome>),
}

/// A completed operation: its status in MPI terms, and its error if any.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub status: MpiStatus,
    pub error: Option<MpiError>,
}

/// A request table entry.
pub struct ReqEntry {
    /// The communicator (its error handler handles the request's errors).
    pub comm: Handle,
    pub state: ReqState,
    pub persistent: Option<Box<Persistent>>,
    /// Whether [`State::staged`] holds data of this request (so that completing the others
    /// never looks there).
    pub staged: bool,
}

impl ReqEntry {
    /// An entry for an operation started on `comm`.
    #[inline(always)]
    pub fn new(comm: Handle, state: ReqState) -> Self {
        Self {
            comm,
            state,
            persistent: None,
            staged: false,
        }
    }
}

/// A slot of the request table. Plain data, so that the fast paths (`MPI_Isend`,
/// `MPI_Irecv` on predefined datatypes, completed by `MPI_Waitall`) fill and clear it with
/// a few stores and no drop glue; every other request is [`Slot::General`], its
/// [`ReqEntry`] kept beside the table.
#[derive(Clone, Copy, Debug)]
pub enum Slot {
    Free,
    /// A point-to-point operation running in the PML, named by its identifier alone
    /// (completion looks its communicator up by handle).
    Pending {
        comm: Handle,
        id: RawId,
    },
    /// An operation that completed successfully and was not collected yet: a send that
    /// completed as it started (a BTL took it at once), or one `MPI_Testall` found complete
    /// while others of its array were not. Its status's fields (`dest`: the status's source,
    /// which for a send is its destination).
    Sent {
        comm: Handle,
        dest: u32,
        tag: c_int,
        len: usize,
    },
    /// The request's [`ReqEntry`] is in the general table.
    General,
    /// A handle given out for a call queued at `MPI_THREAD_MULTIPLE` ([`crate::handoff`])
    /// whose operation has not started: off the free list and refused by every call naming
    /// it, as a free slot is, until [`State::fill_reserved`] or [`State::unreserve_request`].
    Reserved,
}

/// Where a live request lies in the request table ([`State::slot_at`]): valid until the table
/// changes (a request added or freed), which the completion calls' fast paths do not do
/// between the lookup and the use.
#[derive(Clone, Copy, Debug)]
pub struct SlotAt(usize);

/// The refusal of an invalid request handle.
#[cold]
#[inline(never)]
fn bad_request(h: Handle) -> MpiError {
    MpiError::new(
        MPI_ERR_REQUEST,
        format!("invalid request {h:#x}: not a request started and not yet completed or freed"),
    )
}

/// The outcome of a send that completed as it started ([`Slot::Sent`]).
#[cold]
pub fn sent_outcome(dest: u32, tag: c_int, len: usize) -> Outcome {
    crate::ffi::outcome(Ok(rmca::Status {
        source: dest as usize,
        tag,
        bytes: len,
        cancelled: false,
    }))
}

/// Handles of communicators rmca made: [`COMM_BASE`] + index.
pub const COMM_BASE: Handle = DYNAMIC_BASE;
/// Handles of user error handlers.
pub const ERRH_BASE: Handle = DYNAMIC_BASE * 2;
/// Handles of requests: this plus the index, plus the slot's generation shifted by
/// 32 bits (`REQ_GEN_SHIFT`, on 64-bit targets; 32-bit ones have no room for it).
pub const REQ_BASE: Handle = 0x4000_0000;
/// Where a request handle's generation starts.
const REQ_GEN_SHIFT: u32 = 32;
/// The bits of a request handle below its generation.
const REQ_LOW_MASK: Handle = 0xFFFF_FFFF;

/// The generation bits of a request handle.
#[inline]
fn gen_bits(gen: u32) -> Handle {
    (gen as Handle).checked_shl(REQ_GEN_SHIFT).unwrap_or(0)
}
/// Entries of each table (a handle must stay below the next kind's base).
const MAX_OBJECTS: usize = DYNAMIC_BASE;

/// Where the process stands in the MPI life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Before = 0,
    Running = 1,
    Finalized = 2,
}

/// Everything the library knows between calls.
pub struct State {
    pub universe: Universe,
    /// Index 0 is `MPI_COMM_WORLD`, 1 is `MPI_COMM_SELF`.
    comms: Vec<Option<CommEntry>>,
    requests: Vec<Slot>,
    /// The entries of the [`Slot::General`] requests, by slot (grown on demand).
    general: Vec<Option<ReqEntry>>,
    /// The generation of each request slot, bumped when its request is freed: it is part of
    /// the handle, so a handle kept after its request was freed never names the slot's next
    /// request (LIFO reuse would hand that slot out at once).
    request_gens: Vec<u32>,
    free_requests: Vec<usize>,
    /// The error handler of `MPI_FILE_NULL`, which file operations without a file use
    /// (`MPI_ERRORS_RETURN` by default, as MPI says).
    pub file_errhandler: ErrHandler,
    /// Requests freed by `MPI_Request_free` while active: they run on, and are completed at
    /// the latest by `MPI_Finalize`.
    pub detached: Vec<RawRequest>,
    /// The message of the last error of each class returned to the program.
    last_error: Vec<Option<String>>,
    pub thread_level: c_int,
    /// Library-owned data of non-blocking operations on non-contiguous derived datatypes,
    /// by request handle: packed sends, staged receives (unpacked when completed).
    pub staged: std::collections::HashMap<Handle, crate::ffi::Staged>,
    /// Staged data of requests freed while active: kept until `MPI_Finalize` completes them.
    pub staged_detached: Vec<crate::ffi::Staged>,
    /// Scratch of `MPI_Waitall`, kept so that a program waiting on windows of requests in a
    /// loop allocates nothing per call (see [`WaitBatch`]).
    pub wait_batch: WaitBatch,
}

/// The reused buffers of one `MPI_Waitall`: the operations handed to the PML together, the
/// array position and communicator of each, and the collectives.
#[derive(Default)]
pub struct WaitBatch {
    pub requests: RawBatch,
    pub slots: Vec<(usize, Handle)>,
    /// Requests of the call waited for on their own after the batch (non-blocking
    /// collectives, and operations of a freed communicator; the PML's wait steps the
    /// collectives meanwhile): array position, communicator, request.
    pub colls: Vec<(usize, Handle, RawRequest)>,
}

/// The library state of the process. It is reached only from its owner thread (see the
/// module documentation): every access checks the caller's thread id against the owner's,
/// so a call from another thread gets an error instead of a data race. Not a thread-local:
/// from a shared library every thread-local access is a call to `__tls_get_addr`, which the
/// per-message calls paid twice per message.
struct Global {
    /// `pthread_self()` of the thread that may reach the state: the one that initialized
    /// (SINGLE, FUNNELED), the last caller (SERIALIZED), the holder of `lock` (MULTIPLE, 0
    /// while nobody holds it); 0 before `MPI_Init`.
    owner: AtomicUsize,
    /// `pthread_self()` of the thread that initialized MPI (`MPI_Is_thread_main`), 0 before.
    main: AtomicUsize,
    /// The thread level provided, fixed at init (`MPI_THREAD_SINGLE` before).
    level: AtomicI32,
    /// The process lock of `MPI_THREAD_MULTIPLE` (and of SERIALIZED's hand-overs).
    lock: TicketLock,
    /// Whether the entry points check the caller's thread (SERIALIZED, MULTIPLE, and any
    /// level while the progress thread runs).
    checked_entry: AtomicBool,
    /// Whether every MPI call holds `lock` (MULTIPLE; and any level while the asynchronous
    /// progress thread runs, see [`crate::progress_thread`]).
    locked: AtomicBool,
    /// The life-cycle [`Phase`], process-wide.
    phase: AtomicU8,
    /// The thread that makes progress for the waits parked at `MPI_THREAD_MULTIPLE` (see
    /// [`park_until`]), 0 while none waits: changed under `lock`, read without it by a parked
    /// thread's watchdog.
    driver: AtomicUsize,
    /// The waits parked, oldest first (by the owner: under `lock`).
    parked: UnsafeCell<Vec<*const Parked>>,
    /// Parked waits woken (their operation done, or to drive) that have not taken the lock
    /// back yet (changed under `lock`).
    woken: AtomicUsize,
    /// Set while a call works on the state: a call from inside it (an error handler, a user
    /// reduction) is refused instead of aliasing the state.
    busy: UnsafeCell<bool>,
    /// How many [`Confined`] tables the owner has borrowed now: the wait hook keeps the lock
    /// while any is (a thread it handed the lock to would find the table taken).
    pinned: UnsafeCell<u32>,
    state: UnsafeCell<Option<State>>,
    /// The communicator of the last lookup by handle ([`communicator`]): the per-message
    /// calls find it with a compare instead of a visit of the state (busy flag, table,
    /// entry). Dropped when that handle is freed and at finalize; no reference into it is
    /// held past a lookup (callers get a clone).
    comm_cache: UnsafeCell<Option<(Handle, Communicator)>>,
}

// SAFETY: `busy`, `pinned`, `parked`, `state` and `comm_cache` are only accessed by the thread whose id is in
// `owner` (see `owned`), one access at a time (`busy`): the state, which holds `Rc`s and
// `RefCell`s, is confined to that thread as a thread-local would be. The owner changes only
// at SERIALIZED and MULTIPLE and while the progress thread runs (its passes own the state
// between a successful `try_lock` and the unlock), and then under `lock`: the new owner
// acquires it after the old one released it (MULTIPLE, the progress thread) or stored its
// hand-over under it (SERIALIZED), so every access of the old owner happens before the new
// one's. A thread id is unique among live threads;
// should the initializing thread exit and its id be reused, the new thread is the only one
// reaching the state from then on.
unsafe impl Sync for Global {}

static GLOBAL: Global = Global {
    owner: AtomicUsize::new(0),
    main: AtomicUsize::new(0),
    level: AtomicI32::new(MPI_THREAD_SINGLE),
    lock: TicketLock::new(),
    checked_entry: AtomicBool::new(false),
    locked: AtomicBool::new(false),
    phase: AtomicU8::new(Phase::Before as u8),
    driver: AtomicUsize::new(0),
    parked: UnsafeCell::new(Vec::new()),
    woken: AtomicUsize::new(0),
    busy: UnsafeCell::new(false),
    pinned: UnsafeCell::new(0),
    state: UnsafeCell::new(None),
    comm_cache: UnsafeCell::new(None),
};

/// This thread's id, `pthread_self()`. On x86-64 glibc that is one load, the `self` word of
/// the thread control block at `%fs:0x10` (glibc's `THREAD_SELF`), read inline here: the
/// library's call to `pthread_self` cost a call, a return and the caller's register saving
/// on every owner check (two per blocking message), which is most of what the thread checks
/// added to the single-threaded path. Elsewhere, the call.
#[inline(always)]
pub(crate) fn this_thread() -> usize {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    {
        let id: usize;
        // SAFETY: on x86-64 Linux %fs is the thread pointer of every glibc thread, whose
        // control block holds its own address at offset 0x10 (tcbhead_t.self), the value
        // pthread_self returns. A read of this thread's own block: no side effect; `pure`
        // lets repeated reads in one function be merged (the value never changes for a thread).
        unsafe {
            std::arch::asm!(
                "mov {}, qword ptr fs:[0x10]",
                out(reg) id,
                options(nostack, readonly, preserves_flags, pure)
            );
        }
        id
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
    // SAFETY: pthread_self has no preconditions.
    unsafe {
        libc::pthread_self() as usize
    }
}

/// Whether this thread owns the state now (see the module documentation): the exported entry
/// points take their fast path when it does.
#[inline(always)]
pub fn owned() -> bool {
    GLOBAL.owner.load(Ordering::Relaxed) == this_thread()
}

/// The life-cycle phase of the process's MPI.
pub fn phase() -> Phase {
    match GLOBAL.phase.load(Ordering::Acquire) {
        0 => Phase::Before,
        1 => Phase::Running,
        _ => Phase::Finalized,
    }
}

pub fn set_phase(p: Phase) {
    GLOBAL.phase.store(p as u8, Ordering::Release);
}

/// Clears the busy flag when a call on the state ends, normally or by a panic.
struct Busy;

impl Drop for Busy {
    fn drop(&mut self) {
        // SAFETY: only the owner thread creates a `Busy` (see `with`).
        unsafe { *GLOBAL.busy.get() = false };
    }
}

/// Whether the state is installed and this thread owns it (by `MPI_Init`, or by
/// `MPI_Session_init` before it).
pub fn installed() -> bool {
    // SAFETY: the owner thread only (checked first), with no call on the state (`busy`).
    owned() && unsafe { !*GLOBAL.busy.get() && (*GLOBAL.state.get()).is_some() }
}

/// Install the state for the sessions model (`MPI_Session_init` before any `MPI_Init`): the
/// world model's phase stays `Before` (`MPI_Initialized` is false; `MPI_Init` later adopts
/// this state).
pub fn install_for_sessions(universe: Universe, self_comm: Communicator, thread_level: c_int) {
    install_state(universe, self_comm, thread_level, false);
}

/// Install the state after `MPI_Init`.
pub fn install(universe: Universe, self_comm: Communicator, thread_level: c_int) {
    install_state(universe, self_comm, thread_level, true);
}

fn install_state(
    universe: Universe,
    self_comm: Communicator,
    thread_level: c_int,
    world_model: bool,
) {
    let world = universe.world();
    let state = State {
        universe,
        comms: vec![
            Some(CommEntry {
                comm: world,
                errhandler: ErrHandler::Fatal,
                name: "MPI_COMM_WORLD".into(),
            }),
            Some(CommEntry {
                comm: self_comm,
                errhandler: ErrHandler::Fatal,
                name: "MPI_COMM_SELF".into(),
            }),
        ],
        requests: Vec::new(),
        general: Vec::new(),
        request_gens: Vec::new(),
        free_requests: Vec::new(),
        file_errhandler: ErrHandler::Return,
        detached: Vec::new(),
        last_error: vec![None; 64],
        thread_level,
        staged: Default::default(),
        staged_detached: Vec::new(),
        wait_batch: WaitBatch::default(),
    };
    if phase() != Phase::Before || installed() {
        // MPI_Init checks the phase first; a second state would replace one in use.
        tracing::error!("MPI state installed twice: the second is dropped");
        return;
    }
    let me = this_thread();
    // The progress thread (world model only: a session's state has no MPI_Finalize to stop
    // it) makes every call take the lock, whatever the level; the level itself, and with it
    // who may call (the main thread only below SERIALIZED), stays the one asked for.
    let async_progress = world_model && rmca::framework::progress::async_progress().enabled;
    if !world_model && rmca::framework::progress::async_progress().enabled {
        crate::progress_thread::not_for_sessions();
    }
    let locked = thread_level == MPI_THREAD_MULTIPLE || async_progress;
    // The owner changes under the process lock: a thread reaching the process-wide tables
    // while nobody owned them ([`Confined`], before `MPI_Init`) holds it, and is done first.
    GLOBAL.lock.lock();
    GLOBAL.main.store(me, Ordering::Relaxed);
    GLOBAL.level.store(thread_level, Ordering::Relaxed);
    GLOBAL.owner.store(me, Ordering::Relaxed);
    GLOBAL.checked_entry.store(
        thread_level >= MPI_THREAD_SERIALIZED || async_progress,
        Ordering::Relaxed,
    );
    GLOBAL.locked.store(locked, Ordering::Relaxed);
    // SAFETY: this thread is now the owner, and no call is on the state (it had none).
    unsafe { *GLOBAL.state.get() = Some(state) };
    // Handles reserved for queued calls name slots of the previous state, if any.
    crate::handoff::new_state();
    if locked {
        // The state is the lock's from now on: published by this unlock (a thread that
        // calls MPI later acquires it); the waits hand the lock over (MULTIPLE).
        GLOBAL.owner.store(0, Ordering::Relaxed);
    }
    GLOBAL.lock.unlock();
    if thread_level == MPI_THREAD_MULTIPLE {
        rmca::framework::progress::set_wait_hook(rmca::framework::progress::WaitHook {
            release: release_for_waiters,
            reacquire: reacquire_after_wait,
            park: park_until,
            leave: leave_wait,
        });
    }
    if world_model {
        set_phase(Phase::Running);
    }
    if async_progress {
        let cpu = rmca::framework::progress::async_progress().cpu;
        if let Err(e) = crate::progress_thread::start(cpu) {
            // The calls stay locked: correct, only without the background progress.
            tracing::warn!(error = %e, "mpi_async_progress: the progress thread did not start");
        }
    }
}

/// A FIFO lock (tickets): under `MPI_THREAD_MULTIPLE` a waiting thread hands over to the
/// threads queued in the order they came, none starved by one that releases and takes it
/// back in a loop (a wait between its progress passes). Waiters spin briefly, then sleep (a
/// futex; at most 1 ms at a time, so a lost wake-up costs a millisecond, never a hang):
/// there may be more threads than cores, and a queued thread that yields in a loop takes the
/// core from the holder it waits for. Each sleeps on the bell of its ticket ([`BELLS`] of
/// them, by ticket modulo), and an unlock rings the next ticket's bell only, with a system
/// call only if a thread sleeps there: sleeping on one shared word, every unlock woke every
/// queued thread, all but one to go back to sleep (on 2 cores with 4 threads per rank, most
/// of the time of `osu_latency_mt -t 4:4` went to those wake-ups).
struct TicketLock {
    next: AtomicU32,
    serving: AtomicU32,
    bells: [Bell; BELLS],
}

/// Bells of [`TicketLock`]: more than the threads usually queued, so that a ring wakes one.
const BELLS: usize = 8;

/// Where the holders of the tickets of one residue sleep.
#[repr(align(64))]
struct Bell {
    /// Bumped by every ring (the futex word).
    rung: AtomicU32,
    /// Threads asleep (or about to be) on `rung`.
    sleepers: AtomicU32,
}

impl Bell {
    const fn new() -> Self {
        Self {
            rung: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
        }
    }
}

impl TicketLock {
    const fn new() -> Self {
        Self {
            next: AtomicU32::new(0),
            serving: AtomicU32::new(0),
            bells: [const { Bell::new() }; BELLS],
        }
    }

    fn bell(&self, ticket: u32) -> &Bell {
        &self.bells[ticket as usize % BELLS]
    }

    fn lock(&self) {
        // SeqCst on `serving` and the bell's words (here and in `unlock`): a waiter that
        // announced its sleep and then saw an old `serving` is seen by the unlocker (which
        // rings), and one that read the bell before the ring does not sleep (the futex
        // compares).
        let ticket = self.next.fetch_add(1, Ordering::SeqCst);
        let mut spins = 0u32;
        loop {
            if self.serving.load(Ordering::SeqCst) == ticket {
                return;
            }
            if spins < 100 {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let bell = self.bell(ticket);
            let rung = bell.rung.load(Ordering::SeqCst);
            bell.sleepers.fetch_add(1, Ordering::SeqCst);
            if self.serving.load(Ordering::SeqCst) != ticket {
                futex_wait(&bell.rung, rung, std::time::Duration::from_millis(1));
            }
            bell.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Take the lock if nobody holds it or is queued for it (never waits, never queues).
    fn try_lock(&self) -> bool {
        let serving = self.serving.load(Ordering::SeqCst);
        self.next
            .compare_exchange(
                serving,
                serving.wrapping_add(1),
                Ordering::SeqCst,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Only by the holder.
    fn unlock(&self) {
        let serving = self.serving.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
        if self.next.load(Ordering::SeqCst) != serving {
            let bell = self.bell(serving);
            bell.rung.fetch_add(1, Ordering::SeqCst);
            if bell.sleepers.load(Ordering::SeqCst) != 0 {
                futex_wake(&bell.rung, i32::MAX);
            }
        }
    }

    /// Whether a thread is queued behind the holder (by the holder).
    fn contended(&self) -> bool {
        let next = self.next.load(Ordering::Relaxed);
        next.wrapping_sub(self.serving.load(Ordering::Relaxed)) > 1
    }
}

/// How long a parked wait gives its core away by `sched_yield` before it sleeps in the
/// kernel: the MPI threads of a rank often outnumber the cores (`osu_latency_mt -t 4:4` on 2
/// cores), and a thread woken from a futex waits for the scheduler to run it, while a
/// yielding one sees its word change as soon as the core's other threads yielded or blocked.
/// (Threads queued for the lock do not yield: they hold a place in a FIFO, and yielding there
/// made the 2-threads message rate (bench/mt_rate.c) 10 times lower under load.)
const YIELD_FOR: std::time::Duration = std::time::Duration::from_micros(500);

/// Spin a little, then yield the core for [`YIELD_FOR`] at most, until `ready`: whether it
/// became so.
fn spin_then_yield(ready: impl Fn() -> bool) -> bool {
    for _ in 0..50 {
        if ready() {
            return true;
        }
        std::hint::spin_loop();
    }
    let start = std::time::Instant::now();
    loop {
        if ready() {
            return true;
        }
        if start.elapsed() > YIELD_FOR {
            return false;
        }
        std::thread::yield_now();
    }
}

/// Sleep while `word` holds `expected`, `timeout` at most (spurious returns are fine): the
/// process lock's waiters and the progress thread's idle sleeps.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: std::time::Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a live, aligned u32 (the atomic's), with a valid timespec; the
    // kernel only reads both.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wake up to `waiters` threads sleeping on `word` (`i32::MAX`: all).
pub(crate) fn futex_wake(word: &AtomicU32, waiters: i32) {
    // SAFETY: FUTEX_WAKE on a live, aligned u32; the kernel does not access it otherwise.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            waiters,
        );
    }
}

/// The process lock held by an MPI call at `MPI_THREAD_MULTIPLE` (this thread is the owner
/// meanwhile); released when dropped, also by a panic.
struct Held;

impl Drop for Held {
    fn drop(&mut self) {
        GLOBAL.owner.store(0, Ordering::Relaxed);
        GLOBAL.lock.unlock();
        crate::handoff::after_unlock();
        // The call may have started an operation: a progress thread asleep for want of
        // work wakes (one relaxed load otherwise; never reached without the lock).
        crate::progress_thread::call_ended();
    }
}

/// The thread level provided (`MPI_THREAD_SINGLE` before `MPI_Init`): callable from any
/// thread.
pub fn thread_level() -> c_int {
    GLOBAL.level.load(Ordering::Relaxed)
}

/// Whether this thread initialized MPI (`MPI_Is_thread_main`): callable from any thread.
pub fn is_main_thread() -> bool {
    GLOBAL.main.load(Ordering::Relaxed) == this_thread()
}

/// Whether the completion calls wait by testing, so that the wait hook may hand the process
/// lock over between tests (`MPI_THREAD_MULTIPLE`; one relaxed load otherwise).
#[inline]
pub fn waits_release() -> bool {
    GLOBAL.level.load(Ordering::Relaxed) == MPI_THREAD_MULTIPLE
}

/// Whether an exported entry point calls its implementation directly: below
/// `MPI_THREAD_SERIALIZED` (one relaxed load: a call from a wrong thread is refused by the
/// state's own checks, [`with`]). Otherwise it goes out of line, where a thread that owns the
/// state already (a call from inside a call, SERIALIZED's last caller) calls it directly and
/// any other through [`entered`].
#[inline(always)]
pub fn entry_is_direct() -> bool {
    !GLOBAL.checked_entry.load(Ordering::Relaxed)
}

/// Run `f`, an MPI function called from a thread that does not own the state (the exported
/// entry points' slow path, `rmca_mpi_export`): at `MPI_THREAD_MULTIPLE` under the process
/// lock, this thread the owner until `f` returns; at `MPI_THREAD_SERIALIZED` after taking the
/// ownership over (while MPI runs; after `MPI_Finalize`, `f` runs as it is). Only reached at
/// those two levels ([`entry_is_direct`]).
#[cold]
#[inline(never)]
pub fn entered<R>(f: impl FnOnce() -> R) -> R {
    if GLOBAL.locked.load(Ordering::Relaxed)
        && GLOBAL.level.load(Ordering::Relaxed) != MPI_THREAD_MULTIPLE
    {
        return entered_with_progress_thread(f);
    }
    match GLOBAL.level.load(Ordering::Relaxed) {
        MPI_THREAD_MULTIPLE => {
            GLOBAL.lock.lock();
            GLOBAL.owner.store(this_thread(), Ordering::Relaxed);
            let _held = Held;
            // Operations queued while the lock was held start first: a thread's queued
            // operations precede its later calls ([`crate::handoff`]).
            crate::handoff::drain();
            f()
        }
        // Running, or a session's state before `MPI_Init`.
        MPI_THREAD_SERIALIZED if phase() != Phase::Finalized => {
            // The program promises that no other thread is in MPI now: the previous owner's
            // calls happened before this one (its own synchronization orders them).
            GLOBAL.lock.lock();
            GLOBAL.owner.store(this_thread(), Ordering::Relaxed);
            GLOBAL.lock.unlock();
            f()
        }
        _ => f(),
    }
}

/// [`entered`] at `MPI_THREAD_MULTIPLE` if the process lock is free now (nobody holds it or
/// is queued for it): `f`'s result, or `f` back without waiting ([`crate::handoff`]).
pub(crate) fn try_entered<R, F: FnOnce() -> R>(f: F) -> Result<R, F> {
    if !GLOBAL.lock.try_lock() {
        return Err(f);
    }
    GLOBAL.owner.store(this_thread(), Ordering::Relaxed);
    let _held = Held;
    crate::handoff::drain();
    Ok(f())
}

/// Take the process lock if it is free, start the queued operations and give it back
/// ([`crate::handoff::after_unlock`]): false if it was not free (its holder, or the thread
/// queued for it, starts them).
pub(crate) fn drain_if_free() -> bool {
    if !GLOBAL.lock.try_lock() {
        return false;
    }
    GLOBAL.owner.store(this_thread(), Ordering::Relaxed);
    crate::handoff::drain();
    GLOBAL.owner.store(0, Ordering::Relaxed);
    GLOBAL.lock.unlock();
    true
}

/// Whether a call may be queued for the lock's holder ([`crate::handoff`]): at
/// `MPI_THREAD_MULTIPLE`, between `MPI_Init` and `MPI_Finalize`.
pub(crate) fn handoff_open() -> bool {
    GLOBAL.level.load(Ordering::Relaxed) == MPI_THREAD_MULTIPLE && phase() == Phase::Running
}

/// [`entered`] while the progress thread runs at a level below MULTIPLE: the lock is held
/// for the whole call (the progress thread takes it between calls). Below SERIALIZED only the
/// main thread may call: another thread's call runs without the lock and without owning the
/// state, so its first touch of the state ([`with`], [`communicator`], [`Confined::with`])
/// refuses it with the error naming the level, as without the thread (the FUNNELED check
/// compares the caller with `GLOBAL.main` instead of the owner, which is nobody between
/// calls now). SERIALIZED's hand-over needs no special case: the lock orders the calls.
#[cold]
#[inline(never)]
fn entered_with_progress_thread<R>(f: impl FnOnce() -> R) -> R {
    let me = this_thread();
    if GLOBAL.level.load(Ordering::Relaxed) < MPI_THREAD_SERIALIZED
        && GLOBAL.main.load(Ordering::Relaxed) != me
    {
        return f();
    }
    GLOBAL.lock.lock();
    GLOBAL.owner.store(me, Ordering::Relaxed);
    let _held = Held;
    f()
}

/// What the asynchronous progress thread's attempt found ([`progress_pass`]).
pub(crate) use rmca::framework::progress::AsyncPass;

/// The lock of a progress pass: released without waking the progress thread (it is the
/// progress thread).
struct PassHeld;

impl Drop for PassHeld {
    fn drop(&mut self) {
        GLOBAL.owner.store(0, Ordering::Relaxed);
        GLOBAL.lock.unlock();
        crate::handoff::after_unlock();
    }
}

/// One attempt of the progress thread ([`crate::progress_thread`]): if no MPI call holds the
/// library lock (and none is queued for it), take it, run a progress pass of the runtime
/// (PML, BTLs, registered functions, non-blocking collectives), and say whether operations
/// are outstanding. With none, `arm` runs before the lock is released: a call that starts
/// one afterwards finds the thread announced asleep and wakes it ([`Held`]).
pub(crate) fn progress_pass(arm: impl FnOnce()) -> AsyncPass {
    if !GLOBAL.lock.try_lock() {
        return AsyncPass::LockBusy;
    }
    GLOBAL.owner.store(this_thread(), Ordering::Relaxed);
    let _held = PassHeld;
    crate::handoff::drain();
    // The world communicator, cloned and dropped under the lock (its counts are the calls').
    let Ok(world) = with(|s| Ok(s.comm(MPI_COMM_WORLD)?.comm.clone())) else {
        // Finalizing: nothing to drive.
        return AsyncPass::Ran {
            events: 0,
            outstanding: false,
        };
    };
    // Outside `with`: a user reduction run by a collective's step may call MPI.
    let events = rmca::raw::progress(&world);
    drop(world);
    // Waits parked at MULTIPLE whose operations this pass completed go on.
    wake_completed();
    let outstanding =
        with(|s| Ok(s.active_requests() > 0 || !s.detached.is_empty())).unwrap_or(false);
    if events == 0 && !outstanding {
        arm();
    }
    AsyncPass::Ran {
        events,
        outstanding,
    }
}

/// The wait hook's first half (`MPI_THREAD_MULTIPLE`): release the process lock if a thread
/// is queued for it and this thread may (it holds it, and no call of its own has the state
/// borrowed: `busy`). True if released.
fn release_for_waiters() -> bool {
    if !owned() {
        return false;
    }
    // SAFETY: the owner thread (checked above), the only one touching `busy` and `pinned`.
    if unsafe { *GLOBAL.busy.get() || *GLOBAL.pinned.get() != 0 } {
        return false;
    }
    // Each pass of a wait that holds the lock starts what was queued meanwhile.
    crate::handoff::drain();
    if !GLOBAL.lock.contended() {
        return false;
    }
    GLOBAL.owner.store(0, Ordering::Relaxed);
    GLOBAL.lock.unlock();
    true
}

/// The wait hook's second half: queue for the lock again and own the state.
fn reacquire_after_wait() {
    GLOBAL.lock.lock();
    GLOBAL.owner.store(this_thread(), Ordering::Relaxed);
    crate::handoff::drain();
}

/// A wait parked at `MPI_THREAD_MULTIPLE` ([`park_until`]): on its thread's stack while it
/// sleeps, listed in `GLOBAL.parked`.
struct Parked {
    /// [`WAITING`], then [`DONE`] or [`DRIVE`]: set under the lock by the thread that took
    /// the entry off the list (the futex word the waiter sleeps on).
    word: AtomicU32,
    /// The wait's test (`WaitHook::park`'s `done`), its lifetime erased: see [`park_until`].
    done: *mut (dyn FnMut() -> bool + 'static),
    /// The waiting thread (`this_thread`).
    thread: usize,
}

/// [`Parked::word`]: asleep, listed.
const WAITING: u32 = 0;
/// [`Parked::word`]: its operation completed (its `done` returned true on the driver).
const DONE: u32 = 1;
/// [`Parked::word`]: the driver left; this wait makes the progress now.
const DRIVE: u32 = 2;

/// The wait hook's `park` (`MPI_THREAD_MULTIPLE`): one progress owner at a time. The first
/// thread of a wait becomes the *driver* (`GLOBAL.driver`): it makes the progress passes and,
/// after each, runs the tests of the parked waits ([`wake_completed`]) and wakes those done;
/// it lets queued threads in as before (released while another thread is queued, then queued
/// again). A thread that waits while another drives parks: it lists its test, gives the lock
/// up and sleeps on its own word until the driver found its operation complete (then it
/// queues for the lock to return) or left its wait and handed it the progress ([`leave_wait`]).
/// So a waiting thread is not in the lock's queue, and a message wakes the thread it is
/// for: with every waiter queued for the lock (the previous scheme), the lock went round
/// all of them, one progress pass each, and each hand-over to a thread that slept cost a
/// wake-up. Nothing changes while the state is borrowed (`busy`, `pinned`: nobody may come
/// in).
fn park_until(done: &mut dyn FnMut() -> bool) -> Parking {
    if !owned() {
        return Parking::Kept;
    }
    // SAFETY: the owner thread (checked above), the only one touching `busy` and `pinned`.
    if unsafe { *GLOBAL.busy.get() || *GLOBAL.pinned.get() != 0 } {
        return Parking::Kept;
    }
    // The holder's pass starts the operations queued meanwhile ([`crate::handoff`]): the
    // threads that queued them do not wait for the lock.
    crate::handoff::drain();
    wake_completed();
    let me = this_thread();
    let driver = GLOBAL.driver.load(Ordering::Relaxed);
    if driver == 0 || driver == me {
        GLOBAL.driver.store(me, Ordering::Relaxed);
        if release_for_waiters() {
            return Parking::Released;
        }
        // SAFETY: the owner thread; no reference into the list is live.
        let others = GLOBAL.woken.load(Ordering::Relaxed) != 0
            || unsafe { !(*GLOBAL.parked.get()).is_empty() };
        if others {
            // Other threads wait in MPI (MPICH's waits yield on every pass): a woken one
            // needs a core to come back, and a parked one in its yielding phase answers at
            // once, while this spinning wait would keep the core for its whole time slice
            // when the threads outnumber the cores. osu_latency_mt -t 4:4, 2 ranks bound to
            // a core each, load 4-9: median 19-25 us per message with this, 110-310 us
            // yielding only for woken threads or never.
            std::thread::yield_now();
        }
        return Parking::Kept;
    }
    let entry = Parked {
        word: AtomicU32::new(WAITING),
        // SAFETY (of the erased lifetime): `done` is called only by the holder of the lock
        // (`wake_completed`), while this thread sleeps below, and the entry leaves the list
        // under the lock before this function returns (this thread takes the lock again
        // first, and an entry still listed then is removed here): no call outlives the
        // borrow. What `done` touches (the runtime's `Rc`s, the caller's status and handle)
        // is reached by one thread at a time, each hand-over ordered by the lock, as the
        // state is (see `Global`).
        done: unsafe {
            std::mem::transmute::<
                *mut (dyn FnMut() -> bool + '_),
                *mut (dyn FnMut() -> bool + 'static),
            >(done)
        },
        thread: me,
    };
    // SAFETY: the owner thread; no reference into the list is live.
    unsafe { (*GLOBAL.parked.get()).push(&entry) };
    GLOBAL.owner.store(0, Ordering::Relaxed);
    GLOBAL.lock.unlock();
    crate::handoff::after_unlock();
    sleep_parked(&entry);
    GLOBAL.lock.lock();
    GLOBAL.owner.store(me, Ordering::Relaxed);
    crate::handoff::drain();
    if entry.word.load(Ordering::Relaxed) != WAITING {
        GLOBAL.woken.fetch_sub(1, Ordering::Relaxed);
    } else {
        // Woken by the watchdog: nobody drives (should the hand-over have been missed).
        // SAFETY: the owner thread; no reference into the list is live.
        unsafe { (*GLOBAL.parked.get()).retain(|&p| !std::ptr::eq(p, &entry)) };
        if GLOBAL.driver.load(Ordering::Relaxed) == 0 {
            GLOBAL.driver.store(me, Ordering::Relaxed);
        }
    }
    Parking::Parked
}

/// Sleep until the word of `entry` leaves [`WAITING`]; or until nobody drives (a watchdog
/// every 10 ms: the hand-over of [`leave_wait`] should never be missed, and if it is the
/// waits go on, late).
fn sleep_parked(entry: &Parked) {
    let woken = || entry.word.load(Ordering::Acquire) != WAITING;
    if spin_then_yield(woken) {
        return;
    }
    loop {
        futex_wait(&entry.word, WAITING, std::time::Duration::from_millis(10));
        if entry.word.load(Ordering::Acquire) != WAITING
            || GLOBAL.driver.load(Ordering::Relaxed) == 0
        {
            return;
        }
    }
}

/// Run the tests of the parked waits (by the lock's holder, with nothing of the state
/// borrowed): wake each one whose operation completed. The word is set and the waiter woken
/// under the lock, which the waiter takes before its entry goes out of scope.
fn wake_completed() {
    // SAFETY: the owner thread. Taken out while the tests run (a test runs no wait, but a
    // wait parked meanwhile would find the list as it should be).
    let mut list = unsafe { std::mem::take(&mut *GLOBAL.parked.get()) };
    if list.is_empty() {
        return;
    }
    list.retain(|&p| {
        // SAFETY: a listed entry is alive (its thread sleeps in `park_until` until it holds
        // the lock again, which this thread holds) and its `done` is called by the lock's
        // holder only (see `park_until`).
        let entry = unsafe { &*p };
        // A test that panics is left to its own thread, which tests again and reports it.
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: as above: nobody else calls it now, and its thread sleeps.
            unsafe { (*entry.done)() }
        }))
        .unwrap_or(true);
        if done {
            GLOBAL.woken.fetch_add(1, Ordering::Relaxed);
            entry.word.store(DONE, Ordering::Release);
            futex_wake(&entry.word, 1);
        }
        !done
    });
    // SAFETY: the owner thread; no reference into the list is live.
    let parked = unsafe { &mut *GLOBAL.parked.get() };
    let newer = std::mem::replace(parked, list);
    parked.extend(newer);
}

/// The wait hook's `leave`: a wait that called [`park_until`] ended (on its thread, holding
/// the lock). If it drove, the oldest parked wait drives now.
fn leave_wait() {
    let me = this_thread();
    if !owned() || GLOBAL.driver.load(Ordering::Relaxed) != me {
        return;
    }
    // SAFETY: the owner thread; no reference into the list is live.
    let parked = unsafe { &mut *GLOBAL.parked.get() };
    if parked.is_empty() {
        GLOBAL.driver.store(0, Ordering::Relaxed);
        return;
    }
    let next = parked.remove(0);
    // SAFETY: a listed entry is alive (see `wake_completed`).
    let entry = unsafe { &*next };
    GLOBAL.driver.store(entry.thread, Ordering::Relaxed);
    GLOBAL.woken.fetch_add(1, Ordering::Relaxed);
    entry.word.store(DRIVE, Ordering::Release);
    futex_wake(&entry.word, 1);
}

/// Take the state out (finalize); `None` on another thread than the initializing one, or
/// from inside a call on the state.
pub fn take() -> Option<State> {
    if !owned() {
        return None;
    }
    // SAFETY: this is the owner thread (checked above), the only one touching `busy`.
    if unsafe { *GLOBAL.busy.get() } {
        return None;
    }
    // The progress thread ends first (it takes the lock this call holds only between calls:
    // it is asleep or sleeping off a busy lock, and sees the stop at once).
    crate::progress_thread::stop();
    // SAFETY: the owner thread, the only one touching the state; with `busy` false no
    // reference to the state is live.
    let state = unsafe {
        set_comm_cache(None);
        (*GLOBAL.state.get()).take()
    };
    if state.is_some()
        && thread_level() != MPI_THREAD_MULTIPLE
        && GLOBAL.locked.load(Ordering::Relaxed)
    {
        // The calls were locked for the progress thread only: from now on as without it (this
        // call holds the lock and gives it back as it returns, nobody the owner).
        GLOBAL.locked.store(false, Ordering::Relaxed);
        GLOBAL
            .checked_entry
            .store(thread_level() >= MPI_THREAD_SERIALIZED, Ordering::Relaxed);
    } else if state.is_some() && thread_level() != MPI_THREAD_MULTIPLE {
        // From now on nobody owns the library: the calls allowed after finalize reach the
        // process-wide tables from any thread, under the process lock ([`Confined`]). (At
        // MULTIPLE this call holds the lock and gives it back as it returns.)
        GLOBAL.lock.lock();
        GLOBAL.owner.store(0, Ordering::Relaxed);
        GLOBAL.lock.unlock();
    }
    state
}

/// The communicator behind handle `h` (a clone: nothing of the state is borrowed while the
/// caller works with it). The last one looked up is cached: a blocking send or receive
/// looks its communicator up on every call.
#[inline(always)]
pub fn communicator(h: Handle) -> MpiResult<Communicator> {
    if owned() {
        // SAFETY: the owner thread, the only one touching the cache; the reference ends
        // with this statement (the communicator is cloned), and cloning runs no code that
        // could replace the cache.
        if let Some((cached, c)) = unsafe { &*GLOBAL.comm_cache.get() } {
            if *cached == h {
                return Ok(c.clone());
            }
        }
    }
    communicator_uncached(h)
}

#[inline(never)]
fn communicator_uncached(h: Handle) -> MpiResult<Communicator> {
    let c = with(|s| Ok(s.comm(h)?.comm.clone()))?;
    // `with` succeeded: this is the owner thread.
    set_comm_cache(Some((h, c.clone())));
    Ok(c)
}

/// Replace the cached communicator. Only on the owner thread, which holds no reference into
/// the cache between lookups.
fn set_comm_cache(entry: Option<(Handle, Communicator)>) {
    debug_assert!(owned());
    // SAFETY: the owner thread (callers: after a successful `with`, `take`, `free_comm`, all
    // owner-checked); no reference into the cache is live (see `communicator`). The old
    // communicator is dropped after the write, outside the cell.
    let old = unsafe { std::mem::replace(&mut *GLOBAL.comm_cache.get(), entry) };
    drop(old);
}

/// Run `f` on the state; an error if MPI is not running on this thread.
#[inline(always)]
pub fn with<R>(f: impl FnOnce(&mut State) -> MpiResult<R>) -> MpiResult<R> {
    if !owned() {
        return Err(not_running());
    }
    // SAFETY: this is the owner thread (checked above), the only one touching `busy`.
    let busy = unsafe { &mut *GLOBAL.busy.get() };
    if *busy {
        return Err(reentered());
    }
    *busy = true;
    let _clear = Busy;
    // SAFETY: the owner thread, and no other reference to the state is live: `busy` was
    // false, and it stays true until `_clear` is dropped after `f` returned.
    match unsafe { (*GLOBAL.state.get()).as_mut() } {
        Some(state) => f(state),
        None => Err(not_running()),
    }
}

/// A process-wide table of the library (derived datatypes, groups, ops, info objects,
/// attributes, windows, ...), confined as the state is: the owner thread reaches it directly
/// (a relaxed load and a compare, as [`with`]; about what a thread-local cost, which from a
/// shared library is a call to `__tls_get_addr`), so that an object made on one thread is
/// the same object on every thread the thread level lets call MPI. When nobody owns the
/// library (before `MPI_Init`, after `MPI_Finalize`, and at `MPI_THREAD_MULTIPLE` outside the
/// entry points), a thread takes the process lock and is the owner for the access: the calls
/// MPI allows then (`MPI_Info_*`, `MPI_Session_init`, ...) work from any thread. A thread the
/// level does not let in (another than the main one at FUNNELED) gets the error naming the
/// level. Starts empty (`T::default()` at the first access).
pub struct Confined<T> {
    /// What the table holds, for the error of a nested access ("derived datatypes").
    what: &'static str,
    /// Set while the table is lent out: a nested access is refused, not aliased.
    borrowed: UnsafeCell<bool>,
    value: UnsafeCell<Option<T>>,
}

// SAFETY: `borrowed` and `value` are reached only by the thread whose id is in
// `GLOBAL.owner` (checked by `with`; a thread that finds no owner becomes it under the process
// lock first), one borrow at a time (`borrowed`): the table, which may hold `Rc`s, is confined
// as the state is (see `Global`'s `Sync`), every hand-over of the owner ordered by the lock.
unsafe impl<T> Sync for Confined<T> {}

/// Ends a borrow of a [`Confined`] table, normally or by a panic.
struct Lent<'a>(&'a UnsafeCell<bool>);

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        // SAFETY: created by the owner thread while it borrows the table (see `Confined::lend`),
        // and dropped on it before it can stop being the owner.
        unsafe {
            *self.0.get() = false;
            *GLOBAL.pinned.get() -= 1;
        }
    }
}

/// A [`Confined`] table read by [`Confined::peek`]: ends the read when dropped, normally or
/// by a panic (no pin to give back).
pub struct Peeked<T: 'static> {
    borrowed: &'static UnsafeCell<bool>,
    value: &'static T,
}

impl<T> std::ops::Deref for Peeked<T> {
    type Target = T;

    #[inline(always)]
    fn deref(&self) -> &T {
        self.value
    }
}

impl<T> Drop for Peeked<T> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: created by the owner thread while it reads the table, dropped on it (the
        // guard is not `Send`).
        unsafe { *self.borrowed.get() = false };
    }
}

/// The owner of a moment that found no owner ([`Confined::with`]'s slow path): gives the
/// ownership and the process lock back, normally or by a panic.
struct Borrowed;

impl Drop for Borrowed {
    fn drop(&mut self) {
        GLOBAL.owner.store(0, Ordering::Relaxed);
        GLOBAL.lock.unlock();
        crate::handoff::after_unlock();
    }
}

impl<T: Default> Confined<T> {
    /// An empty table of `what`.
    pub const fn new(what: &'static str) -> Self {
        Self {
            what,
            borrowed: UnsafeCell::new(false),
            value: UnsafeCell::new(None),
        }
    }

    /// Run `f` on the table; an error if this thread may not reach it now (the thread level
    /// does not let it call MPI) or if `f`'s caller has it borrowed already.
    #[inline(always)]
    pub fn with<R>(&'static self, f: impl FnOnce(&mut T) -> R) -> MpiResult<R> {
        if owned() {
            self.lend(f)
        } else {
            self.with_unowned(f)
        }
    }

    /// [`Confined::with`] for a thread that does not own the library.
    #[cold]
    #[inline(never)]
    fn with_unowned<R>(&'static self, f: impl FnOnce(&mut T) -> R) -> MpiResult<R> {
        GLOBAL.lock.lock();
        if GLOBAL.owner.load(Ordering::Relaxed) != 0 || refused_below_serialized() {
            // Owned by the thread the level names (SINGLE, FUNNELED; SERIALIZED's last caller
            // when this call came round the entry points' hand-over).
            GLOBAL.lock.unlock();
            return Err(wrong_thread());
        }
        GLOBAL.owner.store(this_thread(), Ordering::Relaxed);
        let _back = Borrowed;
        self.lend(f)
    }

    /// Lend the table to `f` (on the owner thread).
    #[inline(always)]
    fn lend<R>(&'static self, f: impl FnOnce(&mut T) -> R) -> MpiResult<R> {
        debug_assert!(owned());
        // SAFETY: the owner thread (the callers checked it or became it), the only one
        // touching `borrowed`, `pinned` and `value`; while `borrowed` is set (until `_lent`
        // drops) no other reference to `value` is made.
        unsafe {
            if *self.borrowed.get() {
                return Err(self.nested());
            }
            *self.borrowed.get() = true;
            *GLOBAL.pinned.get() += 1;
            let _lent = Lent(&self.borrowed);
            Ok(f((*self.value.get()).get_or_insert_with(T::default)))
        }
    }

    /// The table for reading while the returned guard lives, when this thread owns the
    /// library now and the table is neither lent out nor empty (`None` otherwise): for the
    /// fast paths that only read an entry and neither wait nor call back into the library
    /// (osc-sm's direct view), in line with no closure. Unlike [`Confined::with`] it has no
    /// way in for a thread that does not own the library (that call goes the general way)
    /// and does not pin the table for the wait hook (the reader does not wait): a relaxed
    /// load and compare, and the `borrowed` flag (a nested use of the table meanwhile is
    /// refused, not aliased).
    #[inline(always)]
    pub fn peek(&'static self) -> Option<Peeked<T>> {
        if !owned() {
            return None;
        }
        // SAFETY: the owner thread (checked above), the only one touching `borrowed` and
        // `value`; while `borrowed` is set (until the guard drops, normally or by a panic)
        // no other reference to `value` is made, and the guard (not `Send`: it holds a
        // shared reference to the table, which holds `Rc`s) stays on this thread.
        unsafe {
            if *self.borrowed.get() {
                return None;
            }
            let value = (*self.value.get()).as_ref()?;
            *self.borrowed.get() = true;
            Some(Peeked {
                borrowed: &self.borrowed,
                value,
            })
        }
    }

    #[cold]
    #[inline(never)]
    fn nested(&self) -> MpiError {
        MpiError::new(
            MPI_ERR_INTERN,
            format!(
                "the table of {} was reached from inside a use of it (an MPI call from a callback the library runs while it works on that table)",
                self.what
            ),
        )
    }
}

/// Whether this thread, owning nothing, is one the level refuses while nobody owns the
/// library between calls: below SERIALIZED with the progress thread, any thread but the
/// main one while MPI runs (without the thread the main one owns the library for good).
fn refused_below_serialized() -> bool {
    GLOBAL.locked.load(Ordering::Relaxed)
        && thread_level() < MPI_THREAD_SERIALIZED
        && phase() == Phase::Running
        && GLOBAL.main.load(Ordering::Relaxed) != this_thread()
}

#[cold]
#[inline(never)]
fn reentered() -> MpiError {
    MpiError::new(
        MPI_ERR_OTHER,
        "MPI called from inside an MPI call (an error handler may not call MPI)",
    )
}

/// The error of a call made outside `MPI_Init` .. `MPI_Finalize`, or from another thread.
#[cold]
#[inline(never)]
pub fn not_running() -> MpiError {
    let msg = match phase() {
        Phase::Before => "MPI is not initialized: call MPI_Init or MPI_Init_thread first",
        Phase::Finalized => "MPI was finalized: no MPI call may follow MPI_Finalize",
        Phase::Running => return wrong_thread(),
    };
    MpiError::new(MPI_ERR_OTHER, msg)
}

/// The error of a call from a thread the thread level does not let in, naming the level.
#[cold]
#[inline(never)]
fn wrong_thread() -> MpiError {
    let msg = match thread_level() {
        MPI_THREAD_SINGLE => {
            "MPI runs at MPI_THREAD_SINGLE (MPI_Init, or MPI_Init_thread asked for it): only the \
             thread that initialized MPI may call it, and this call came from another thread \
             (ask MPI_Init_thread for MPI_THREAD_MULTIPLE to call MPI from any thread)"
        }
        MPI_THREAD_FUNNELED => {
            "MPI runs at MPI_THREAD_FUNNELED: only the main thread (the one that called \
             MPI_Init_thread) may call MPI, and this call came from another thread (ask \
             MPI_Init_thread for MPI_THREAD_MULTIPLE to call MPI from any thread)"
        }
        MPI_THREAD_SERIALIZED => {
            "MPI runs at MPI_THREAD_SERIALIZED and another thread called MPI while this one was \
             in a call: threads must call MPI one at a time at this level (ask \
             MPI_Init_thread for MPI_THREAD_MULTIPLE to call MPI from threads at once)"
        }
        _ => {
            "MPI runs at MPI_THREAD_MULTIPLE, and this thread reached the library's state \
             without holding its lock (an internal path that bypassed the entry points)"
        }
    };
    MpiError::new(MPI_ERR_OTHER, msg)
}

fn comm_index(h: Handle) -> Option<usize> {
    match h {
        MPI_COMM_WORLD => Some(0),
        MPI_COMM_SELF => Some(1),
        _ if (COMM_BASE..COMM_BASE + MAX_OBJECTS).contains(&h) => Some(h - COMM_BASE),
        _ => None,
    }
}

fn comm_handle(index: usize) -> Handle {
    match index {
        0 => MPI_COMM_WORLD,
        1 => MPI_COMM_SELF,
        i => COMM_BASE + i,
    }
}

/// The refusal of an invalid communicator handle.
pub fn bad_comm(h: Handle) -> MpiError {
    let what = if h == MPI_COMM_NULL {
        "MPI_COMM_NULL".to_owned()
    } else {
        format!("{h:#x}")
    };
    MpiError::new(
        MPI_ERR_COMM,
        format!("invalid communicator {what}: not MPI_COMM_WORLD, MPI_COMM_SELF or one created and not freed"),
    )
}

impl State {
    /// The communicator entry of `h`.
    pub fn comm(&self, h: Handle) -> MpiResult<&CommEntry> {
        comm_index(h)
            .and_then(|i| self.comms.get(i))
            .and_then(Option::as_ref)
            .ok_or_else(|| bad_comm(h))
    }

    pub fn comm_mut(&mut self, h: Handle) -> MpiResult<&mut CommEntry> {
        comm_index(h)
            .and_then(|i| self.comms.get_mut(i))
            .and_then(Option::as_mut)
            .ok_or_else(|| bad_comm(h))
    }

    /// Add a communicator; its handle.
    pub fn add_comm(&mut self, entry: CommEntry) -> MpiResult<Handle> {
        let index = match self.comms.iter().skip(2).position(Option::is_none) {
            Some(i) => i + 2,
            None => {
                self.comms.push(None);
                self.comms.len() - 1
            }
        };
        if index >= MAX_OBJECTS {
            return Err(MpiError::new(
                MPI_ERR_NO_MEM,
                format!("too many communicators (at most {MAX_OBJECTS}): free some"),
            ));
        }
        self.comms[index] = Some(entry);
        Ok(comm_handle(index))
    }

    /// Remove a communicator made at run time.
    pub fn free_comm(&mut self, h: Handle) -> MpiResult<()> {
        if h == MPI_COMM_WORLD || h == MPI_COMM_SELF {
            return Err(MpiError::new(
                MPI_ERR_COMM,
                "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed",
            ));
        }
        self.comm(h)?;
        let i = comm_index(h).expect("checked above");
        // Operations still running on it complete normally (MPI): those named by their
        // identifier alone take the communicator along now, since its entry goes.
        let entry = self.comms[i].take().expect("checked above");
        // The handle may be reused by the next communicator made.
        set_comm_cache(None);
        for slot in 0..self.requests.len() {
            if let Slot::Pending { comm, id } = self.requests[slot] {
                if comm == h {
                    let running = ReqState::Active(id.adopt(&entry.comm));
                    self.set_general(slot, ReqEntry::new(h, running));
                }
            }
        }
        Ok(())
    }

    /// The error handler deciding for `comm` (world's for an invalid handle, as MPICH does).
    pub fn errhandler_of(&self, comm: Handle) -> ErrHandler {
        self.comm(comm)
            .or_else(|_| self.comm(MPI_COMM_WORLD))
            .map_or(ErrHandler::Fatal, |e| e.errhandler)
    }

    /// The error handler behind handle `h` ([`errhandler`]).
    pub fn errhandler(&self, h: Handle) -> MpiResult<ErrHandler> {
        errhandler(h)
    }

    /// The error handler behind handle `h`, to set on an object of `kind`
    /// ([`errhandler_for`]).
    pub fn errhandler_for(&self, h: Handle, kind: ErrhKind) -> MpiResult<ErrHandler> {
        errhandler_for(h, kind)
    }

    /// The handle of error handler `e`.
    pub fn errhandler_handle(e: ErrHandler) -> Handle {
        match e {
            ErrHandler::Fatal => MPI_ERRORS_ARE_FATAL,
            ErrHandler::Abort => MPI_ERRORS_ABORT,
            ErrHandler::Return => MPI_ERRORS_RETURN,
            ErrHandler::User(h) => h,
        }
    }

    /// Register a user error handler function for objects of `kind` ([`add_errhandler`]).
    pub fn add_errhandler(&mut self, kind: ErrhKind, f: CommErrhandlerFn) -> MpiResult<Handle> {
        add_errhandler(kind, f)
    }

    /// Free an error handler handle ([`free_errhandler`]).
    pub fn free_errhandler(&mut self, h: Handle) -> MpiResult<()> {
        free_errhandler(h)
    }

    /// The function of user error handler `h` ([`errhandler_fn`]).
    pub fn errhandler_fn(&self, h: Handle) -> Option<CommErrhandlerFn> {
        errhandler_fn(h)
    }

    /// Remember the message of an error returned to the program.
    pub fn record_error(&mut self, e: &MpiError) {
        if let Some(slot) = usize::try_from(e.class)
            .ok()
            .and_then(|c| self.last_error.get_mut(c))
        {
            *slot = Some(e.msg.clone());
        }
    }

    /// The message of the last error of `class` returned.
    pub fn last_error(&self, class: c_int) -> Option<&str> {
        self.last_error
            .get(usize::try_from(class).ok()?)?
            .as_deref()
    }

    // ---- requests ----

    /// Add a request of the general paths; its handle.
    pub fn add_request(&mut self, entry: ReqEntry) -> MpiResult<Handle> {
        let h = self.add_slot(Slot::General)?;
        let i = self.request_index(h).expect("just added");
        self.set_general(i, entry);
        Ok(h)
    }

    /// Add a request of the fast paths (`slot` is not [`Slot::General`]); its handle.
    #[inline(always)]
    pub fn add_slot(&mut self, slot: Slot) -> MpiResult<Handle> {
        let index = match self.free_requests.pop() {
            Some(i) => {
                self.requests[i] = slot;
                i
            }
            None => {
                if self.requests.len() >= REQ_BASE {
                    return Err(MpiError::new(MPI_ERR_NO_MEM, "too many requests"));
                }
                self.requests.push(slot);
                self.request_gens.push(0);
                self.requests.len() - 1
            }
        };
        Ok(REQ_BASE + index + gen_bits(self.request_gens[index]))
    }

    /// Reserve a request slot for a handle given out before its operation starts (a call
    /// queued at `MPI_THREAD_MULTIPLE`, [`crate::handoff`]): a [`Slot::Reserved`].
    pub fn reserve_request(&mut self) -> MpiResult<Handle> {
        self.add_slot(Slot::Reserved)
    }

    /// The slot of `h` if it is reserved ([`State::reserve_request`]), left free (and off
    /// the free list) for the caller to fill or give back.
    fn take_reserved(&mut self, h: Handle) -> Option<usize> {
        let i = self.request_index(h)?;
        let slot = &mut self.requests[i];
        matches!(slot, Slot::Reserved).then(|| {
            *slot = Slot::Free;
            i
        })
    }

    /// Put the started operation `slot` in the reserved slot of `h` (a fast-path slot, or
    /// [`Slot::General`] with `general`'s entry); false if `h` is not a reserved slot.
    pub fn fill_reserved(&mut self, h: Handle, slot: Slot, general: Option<ReqEntry>) -> bool {
        let Some(i) = self.take_reserved(h) else {
            return false;
        };
        match general {
            Some(entry) => self.set_general(i, entry),
            None => self.requests[i] = slot,
        }
        true
    }

    /// Give a reserved slot that was never used back to the free list.
    pub fn unreserve_request(&mut self, h: Handle) {
        if let Some(i) = self.take_reserved(h) {
            self.free_requests.push(i);
        }
    }

    /// Make slot `i` a general one holding `entry`.
    fn set_general(&mut self, i: usize, entry: ReqEntry) {
        if self.general.len() <= i {
            self.general.resize_with(i + 1, || None);
        }
        self.general[i] = Some(entry);
        self.requests[i] = Slot::General;
    }

    /// The slot of request handle `h`, if `h` is of the slot's current generation.
    #[inline]
    fn request_index(&self, h: Handle) -> Option<usize> {
        let i = (h & REQ_LOW_MASK)
            .checked_sub(REQ_BASE)
            .filter(|&i| i < REQ_BASE)?;
        (h & !REQ_LOW_MASK == gen_bits(*self.request_gens.get(i)?)).then_some(i)
    }

    /// The request handle whose low 32 bits are `low` (`MPI_Request_fromint`): the slot's
    /// current generation restored, so that `fromint(toint(r)) == r` while `r` is live.
    pub fn request_from_low_bits(&self, low: Handle) -> Handle {
        match (low & REQ_LOW_MASK).checked_sub(REQ_BASE) {
            Some(i) if i < REQ_BASE => low + self.request_gens.get(i).map_or(0, |&g| gen_bits(g)),
            _ => low,
        }
    }

    /// Retire slot `i` (its request is freed): the next request there gets a new handle.
    #[inline]
    fn retire_request_slot(&mut self, i: usize) {
        self.requests[i] = Slot::Free;
        self.request_gens[i] = self.request_gens[i].wrapping_add(1);
        self.free_requests.push(i);
    }

    /// The request entry of `h`. A request of the fast paths becomes a general one here: a
    /// running operation an owning [`ReqState::Active`], a send completed at start a
    /// [`ReqState::Done`].
    pub fn request(&mut self, h: Handle) -> MpiResult<&mut ReqEntry> {
        let i = self.request_index(h).ok_or_else(|| bad_request(h))?;
        match self.requests[i] {
            Slot::Free | Slot::Reserved => return Err(bad_request(h)),
            Slot::Pending { comm, id } => {
                // The communicator is there: freeing it makes its fast-path requests general
                // (see `free_comm`).
                let c = &self.comm(comm)?.comm;
                let entry = ReqEntry::new(comm, ReqState::Active(id.adopt(c)));
                self.set_general(i, entry);
            }
            Slot::Sent {
                comm,
                dest,
                tag,
                len,
            } => {
                let done = ReqState::Done(Box::new(sent_outcome(dest, tag, len)));
                self.set_general(i, ReqEntry::new(comm, done));
            }
            Slot::General => {}
        }
        self.general[i].as_mut().ok_or_else(|| bad_request(h))
    }

    /// The slot of request `h` for `MPI_Waitall`'s fast path: a request of the fast paths
    /// is freed and its slot handed back; a general one ([`Slot::General`]) is left in place
    /// for [`State::request`].
    #[inline]
    pub fn take_fast(&mut self, h: Handle) -> MpiResult<Slot> {
        let i = self.request_index(h).ok_or_else(|| bad_request(h))?;
        let slot = self.requests[i];
        match slot {
            Slot::Free | Slot::Reserved => return Err(bad_request(h)),
            Slot::Pending { .. } | Slot::Sent { .. } => self.retire_request_slot(i),
            Slot::General => {}
        }
        Ok(slot)
    }

    /// The slot of request `h` as it is (nothing converted or freed): `None` for an invalid
    /// handle. For the completion calls' fast paths (`ffi::complete`).
    #[inline]
    pub fn slot(&self, h: Handle) -> Option<Slot> {
        self.request_index(h).map(|i| self.requests[i])
    }

    /// The slot of request `h` as it is, with its place in the table for
    /// [`State::free_fast_at`] and [`State::set_slot_at`]: `None` for an invalid handle. The
    /// completion calls' fast paths look a handle up once this way instead of once to look
    /// and again to free (about 20 instructions per `MPI_Test`; callgrind,
    /// bench/osu-instructions.sh).
    #[inline]
    pub fn slot_at(&self, h: Handle) -> Option<(SlotAt, Slot)> {
        let i = self.request_index(h)?;
        Some((SlotAt(i), self.requests[i]))
    }

    /// Free the request at `at` ([`State::slot_at`], the table unchanged since) if it is one
    /// of the fast paths' ([`Slot::Pending`], [`Slot::Sent`]), as [`State::free_fast`].
    #[inline]
    pub fn free_fast_at(&mut self, at: SlotAt) {
        if matches!(
            self.requests[at.0],
            Slot::Pending { .. } | Slot::Sent { .. }
        ) {
            self.retire_request_slot(at.0);
        }
    }

    /// [`State::set_slot`] on the request at `at` ([`State::slot_at`], the table unchanged
    /// since).
    #[inline]
    pub fn set_slot_at(&mut self, at: SlotAt, slot: Slot) {
        if !matches!(
            self.requests[at.0],
            Slot::Free | Slot::Reserved | Slot::General
        ) {
            self.requests[at.0] = slot;
        }
    }

    /// Free request `h` if it is one of the fast paths' ([`Slot::Pending`], [`Slot::Sent`]:
    /// nothing to drop), as [`State::take_fast`] without returning the slot.
    #[inline]
    pub fn free_fast(&mut self, h: Handle) {
        if let Some(i) = self.request_index(h) {
            if matches!(self.requests[i], Slot::Pending { .. } | Slot::Sent { .. }) {
                self.retire_request_slot(i);
            }
        }
    }

    /// Replace the slot of live request `h` by `slot` (a fast-path one: [`Slot::Pending`] or
    /// [`Slot::Sent`]), keeping its handle: `MPI_Testall` keeps a completed operation's
    /// status there until every request of its array has completed.
    #[inline]
    pub fn set_slot(&mut self, h: Handle, slot: Slot) {
        if let Some(i) = self.request_index(h) {
            if !matches!(
                self.requests[i],
                Slot::Free | Slot::Reserved | Slot::General
            ) {
                self.requests[i] = slot;
            }
        }
    }

    /// Make live request `h` a general one holding `done`, the outcome of its operation (on
    /// `comm`), which a test found complete but may not free yet.
    pub fn keep_done(&mut self, h: Handle, comm: Handle, done: Outcome) {
        if let Some(i) = self.request_index(h) {
            let entry = ReqEntry::new(comm, ReqState::Done(Box::new(done)));
            self.set_general(i, entry);
        }
    }

    /// Keep the library-owned data of request `h` until it completes.
    pub fn stage(&mut self, h: Handle, data: crate::ffi::Staged) {
        if let Ok(entry) = self.request(h) {
            entry.staged = true;
            self.staged.insert(h, data);
        }
    }

    /// Free request `h` in place (its state should have been taken first).
    #[inline]
    pub fn free_request(&mut self, h: Handle) {
        if let Some(i) = self.request_index(h) {
            if !matches!(self.requests[i], Slot::Free | Slot::Reserved) {
                if let Some(g) = self.general.get_mut(i) {
                    *g = None;
                }
                self.retire_request_slot(i);
            }
        }
    }

    /// Remove request `h` (completed or freed).
    pub fn remove_request(&mut self, h: Handle) -> Option<ReqEntry> {
        self.request(h).ok()?;
        let i = self.request_index(h)?;
        let entry = self.general.get_mut(i)?.take()?;
        self.retire_request_slot(i);
        Some(entry)
    }

    /// Requests still active (for finalize's warning).
    pub fn active_requests(&self) -> usize {
        let pending = self
            .requests
            .iter()
            .filter(|s| matches!(s, Slot::Pending { .. }))
            .count();
        let active = self
            .general
            .iter()
            .flatten()
            .filter(|r| matches!(r.state, ReqState::Active(_)))
            .count();
        pending + active
    }
}

#[cfg(test)]
mod tests {
    use super::{Confined, TicketLock, BELLS};
    use std::cell::UnsafeCell;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A counter only touched under the lock.
    struct Guarded(UnsafeCell<u64>);
    // SAFETY: accessed only while holding the test's lock.
    unsafe impl Sync for Guarded {}

    impl Guarded {
        fn get(&self) -> *mut u64 {
            self.0.get()
        }
    }

    /// Before `MPI_Init` nobody owns the library: every thread reaches a table, one at a
    /// time under the process lock; a nested access is refused, not aliased.
    #[test]
    fn a_table_without_an_owner_serves_every_thread_and_refuses_a_nested_access() {
        static T: Confined<Vec<u32>> = Confined::new("test values");
        std::thread::scope(|s| {
            for i in 0..4 {
                s.spawn(move || {
                    for _ in 0..1000 {
                        T.with(|v| v.push(i)).unwrap();
                    }
                });
            }
        });
        assert_eq!(T.with(|v| v.len()).unwrap(), 4000);
        let inner = T.with(|_| T.with(|v| v.len()).map_err(|e| (e.class, e.msg.clone())));
        let (class, msg) = inner.unwrap().unwrap_err();
        assert_eq!(class, crate::abi::MPI_ERR_INTERN);
        assert!(msg.contains("table of test values"), "{msg}");
        // The failed nested access left the table usable.
        assert_eq!(
            T.with(|v| v.iter().filter(|&&x| x == 3).count()).unwrap(),
            1000
        );
    }

    /// The progress thread's try: only a free lock with nobody queued is taken.
    #[test]
    fn try_lock_takes_only_a_free_lock_and_never_queues() {
        let lock = TicketLock::new();
        assert!(lock.try_lock());
        assert!(!lock.try_lock(), "held");
        assert!(!lock.contended(), "a failed try does not queue");
        lock.unlock();
        assert!(lock.try_lock());
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                lock.lock();
                lock.unlock();
            });
            while !lock.contended() {
                std::thread::yield_now();
            }
            lock.unlock();
            waiter.join().unwrap();
        });
        assert!(lock.try_lock(), "free again after the queue drained");
        lock.unlock();
    }

    /// The inline thread id is `pthread_self()`, distinct per thread.
    #[test]
    fn this_thread_is_pthread_self_on_every_thread() {
        let main = super::this_thread();
        // SAFETY: pthread_self has no preconditions.
        assert_eq!(main, unsafe { libc::pthread_self() as usize });
        let other = std::thread::spawn(|| {
            // SAFETY: as above.
            let p = unsafe { libc::pthread_self() as usize };
            assert_eq!(super::this_thread(), p);
            p
        })
        .join()
        .unwrap();
        assert_ne!(main, other);
    }

    #[test]
    fn the_ticket_lock_excludes_and_says_when_a_thread_is_queued() {
        let lock = TicketLock::new();
        let n = Guarded(UnsafeCell::new(0));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        lock.lock();
                        // SAFETY: under the lock.
                        unsafe { *n.get() += 1 };
                        lock.unlock();
                    }
                });
            }
        });
        // SAFETY: every thread joined.
        assert_eq!(unsafe { *n.get() }, 80_000);

        lock.lock();
        assert!(!lock.contended(), "nobody queued yet");
        let entered = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                lock.lock();
                entered.store(true, Ordering::Relaxed);
                lock.unlock();
            });
            while !lock.contended() {
                std::thread::yield_now();
            }
            assert!(!entered.load(Ordering::Relaxed), "the queued thread waits");
            lock.unlock();
        });
        assert!(entered.load(Ordering::Relaxed));
        assert!(!lock.contended());
    }

    /// An unlock rings the bell of the next ticket only: the threads queued behind it sleep
    /// on.
    #[test]
    fn an_unlock_rings_the_next_tickets_bell_only() {
        let lock = TicketLock::new();
        lock.lock();
        let rung = |t: u32| lock.bell(t).rung.load(Ordering::SeqCst);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    lock.lock();
                    lock.unlock();
                });
            }
            // Tickets 1, 2 and 3 queued.
            while lock.next.load(Ordering::SeqCst) != 4 {
                std::thread::yield_now();
            }
            let before: Vec<u32> = (1..4).map(rung).collect();
            lock.unlock();
            // Ticket 1 rung once by this unlock (later ones by the queued threads' unlocks):
            // each unlock rings one bell, the next ticket's.
            while lock.serving.load(Ordering::SeqCst) != 4 {
                std::thread::yield_now();
            }
            let after: Vec<u32> = (1..4).map(rung).collect();
            assert_eq!(
                after
                    .iter()
                    .zip(&before)
                    .map(|(a, b)| a - b)
                    .collect::<Vec<_>>(),
                vec![1, 1, 1],
                "each of tickets 1-3 rung once, by the unlock before its turn"
            );
        });
        // Nobody queued: an unlock rings nothing.
        let before: Vec<u32> = (0..BELLS as u32).map(rung).collect();
        lock.lock();
        lock.unlock();
        assert_eq!((0..BELLS as u32).map(rung).collect::<Vec<_>>(), before);
    }

    /// A receive whose buffer stays corrupt after pml dr's second copy is the library's
    /// internal error, not a failed peer (fault-tolerant code would try to recover a live one).
    #[test]
    fn memory_corruption_is_an_internal_error_and_a_dead_peer_is_proc_aborted() {
        use rmca::framework::pml::StatusError;
        let class = |error: StatusError| {
            let status = rmca::Status {
                source: 1,
                tag: 0,
                bytes: 0,
                cancelled: false,
            };
            super::MpiError::from(rmca::Error::Status { error, status }).class
        };
        let corrupted = StatusError::Corrupted {
            peer: 1,
            fragments: 2,
        };
        assert_eq!(class(corrupted), crate::abi::MPI_ERR_INTERN);
        let failed = StatusError::PeerFailed {
            peer: 1,
            reason: "silent".into(),
        };
        assert_eq!(class(failed), crate::abi::MPI_ERR_PROC_ABORTED);
    }
}
