//! Buffers for buffered sends attached to a communicator or a session (MPI 4.1 §3.6.1):
//! `MPI_Comm_attach_buffer`, `_detach_buffer`, `_flush_buffer`, `_iflush_buffer` and the
//! `MPI_Session_*` ones, with their `_c` forms; and the process's (`MPI_Buffer_attach`,
//! `_detach`, `_flush`, `_iflush`, in env.rs), the same kind of buffer.
//!
//! A buffered send (`MPI_Bsend`, `MPI_Ibsend`, `MPI_Bsend_init`) uses its communicator's
//! buffer if one is attached, else its session's (a communicator made from a session's process
//! set, or derived from one such by `MPI_Comm_dup` (and its info and non-blocking forms),
//! `MPI_Comm_split` or `MPI_Comm_create_group`), else the process's, as MPICH does. As for the process's buffer, rmca copies each message into memory
//! of its own and counts it (with `MPI_BSEND_OVERHEAD`) against the size attached, so the
//! program's buffer is never written and a program that overruns it is told so;
//! `MPI_BUFFER_AUTOMATIC` is a buffer without a size limit.
//!
//! Communicators are known here by their context id, which a process never gives to two
//! communicators, so an entry can never be taken for a later communicator's. Freeing a
//! communicator (and finalizing a session) detaches its buffer implicitly, after its sends
//! completed, as MPICH does.
#![allow(non_snake_case)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::rc::Rc;

use rmca::framework::pml::{ContextId, SendMode};
use rmca::raw::{self, CustomOp, Polled, RawRequest};
use rmca::Communicator;

use super::session::{index as session_index, on_session};
use super::{call, communicator, put};
use crate::abi::*;
use crate::state::{self, Confined, MpiError, MpiResult, ReqEntry, ReqState};
use rmca_mpi_export::export;

/// `MPI_BUFFER_AUTOMATIC` (standard ABI value): the library manages the buffer.
const MPI_BUFFER_AUTOMATIC: usize = 2;

/// A buffered send in flight: its copy of the data, its send, and its place in the order
/// of the buffer's sends (for `iflush`, which waits for those started before it).
struct Flight {
    data: Vec<u8>,
    request: RawRequest,
    seq: u64,
}

/// A buffer attached to a communicator or a session.
pub(crate) struct Pool {
    /// The program's address (given back at detach), or `MPI_BUFFER_AUTOMATIC`.
    addr: usize,
    /// Bytes attached (unlimited for an automatic buffer).
    size: usize,
    in_flight: Vec<Flight>,
    next_seq: u64,
}

type PoolRef = Rc<RefCell<Pool>>;

impl Pool {
    /// The buffer `buffer` of `size` bytes, or an automatic one.
    fn new(buffer: *mut c_void, size: MPI_Count) -> MpiResult<Self> {
        let size = if buffer as usize == MPI_BUFFER_AUTOMATIC {
            isize::MAX as usize
        } else {
            let n = usize::try_from(size).map_err(|_| {
                MpiError::new(MPI_ERR_COUNT, format!("buffer size {size} is negative"))
            })?;
            if buffer.is_null() && n > 0 {
                return Err(MpiError::new(MPI_ERR_BUFFER, "the buffer is NULL"));
            }
            n
        };
        Ok(Self {
            addr: buffer as usize,
            size,
            in_flight: Vec::new(),
            next_seq: 0,
        })
    }

    /// Bytes of the buffer in use (data plus `MPI_BSEND_OVERHEAD` per message).
    fn used(&self) -> usize {
        self.in_flight
            .iter()
            .map(|f| f.data.len() + MPI_BSEND_OVERHEAD)
            .sum()
    }

    /// Forget the sends that completed (a failed one is logged: the program has no request
    /// to learn it from, as for `MPI_Bsend`).
    fn reclaim(&mut self) {
        let mut kept = Vec::with_capacity(self.in_flight.len());
        for f in self.in_flight.drain(..) {
            match f.request.test() {
                Polled::Pending(request) => kept.push(Flight { request, ..f }),
                Polled::Done(Err(e)) => {
                    tracing::warn!("a buffered send failed after MPI_Bsend returned: {e}")
                }
                Polled::Done(Ok(_)) => {}
            }
        }
        self.in_flight = kept;
    }

    /// Copy the `len` bytes at `buf` into memory of the buffer's and start their send to
    /// `to` on `c`; refused with `MPI_ERR_BUFFER` when the buffer has no room for them.
    fn send(
        &mut self,
        c: &Communicator,
        buf: usize,
        len: usize,
        to: usize,
        tag: c_int,
    ) -> MpiResult<()> {
        self.reclaim();
        if self.used() + len + MPI_BSEND_OVERHEAD > self.size && !self.in_flight.is_empty() {
            // Sends the receivers took may need a pass of progress to complete (rendezvous).
            raw::progress(c);
            self.reclaim();
        }
        let used = self.used();
        if used + len + MPI_BSEND_OVERHEAD > self.size {
            return Err(MpiError::new(
                MPI_ERR_BUFFER,
                format!(
                    "the attached buffer ({} B) cannot hold this message: {len} B + MPI_BSEND_OVERHEAD ({MPI_BSEND_OVERHEAD} B), {used} B in use by sends in flight",
                    self.size
                ),
            ));
        }
        // SAFETY: MPI_Bsend's contract: `buf` holds `len` bytes (checked non-null if len > 0
        // by the caller's argument checks).
        let data = unsafe { super::bytes(buf as *const c_void, len) }.to_vec();
        // SAFETY: `data` is owned by the flight entry, which keeps it (and never writes it)
        // until the request completed: an entry is dropped only after a completed test or a
        // wait (or with its request, whose drop waits for the send first).
        let request = unsafe { raw::isend(c, data.as_ptr(), len, to, tag, SendMode::Standard)? };
        self.in_flight.push(Flight {
            data,
            request,
            seq: self.next_seq,
        });
        self.next_seq += 1;
        Ok(())
    }

    /// Wait for every send in flight; the first failure is reported once all were waited.
    fn flush(&mut self) -> MpiResult<()> {
        let mut first_err = None;
        for f in self.in_flight.drain(..) {
            if let Err(e) = f.request.wait() {
                first_err.get_or_insert(MpiError::from(e));
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// What detach gives back: the address attached and its size (0 for an automatic
    /// buffer, as `MPI_Buffer_detach` says).
    fn given_back(&self) -> (usize, usize) {
        if self.addr == MPI_BUFFER_AUTOMATIC {
            (self.addr, 0)
        } else {
            (self.addr, self.size)
        }
    }
}

/// The request of `MPI_Comm_iflush_buffer` / `MPI_Session_iflush_buffer`: complete once the
/// sends started from the buffer before the call completed (later ones are not waited for).
#[derive(Debug)]
struct Flush {
    pool: PoolRef,
    /// Sends numbered below this were in flight at the call.
    upto: u64,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("size", &self.size)
            .field("in_flight", &self.in_flight.len())
            .finish()
    }
}

impl CustomOp for Flush {
    fn poll(&mut self) -> Option<rmca::Result<rmca::Status>> {
        // Busy: a send or detach of this buffer is under way; the next poll sees it.
        let mut pool = self.pool.try_borrow_mut().ok()?;
        pool.reclaim();
        if pool.in_flight.iter().any(|f| f.seq < self.upto) {
            return None;
        }
        Some(Ok(rmca::Status {
            // An empty status: MPI_ANY_SOURCE and MPI_ANY_TAG, no data (wrapping both ways).
            source: MPI_ANY_SOURCE as usize,
            tag: MPI_ANY_TAG,
            bytes: 0,
            cancelled: false,
        }))
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// The buffers attached, and which communicators belong to which session.
#[derive(Default)]
struct Tables {
    /// By communicator context id.
    comms: HashMap<ContextId, PoolRef>,
    /// By session handle.
    sessions: HashMap<Handle, PoolRef>,
    /// The process's (`MPI_Buffer_attach`).
    process: Option<PoolRef>,
    /// The session of each communicator made in one, by context id.
    comm_session: HashMap<ContextId, Handle>,
    /// The groups `MPI_Group_from_session_pset` made: their session, and the group itself
    /// (a handle freed and reused for another group is then not taken for this one).
    group_session: HashMap<Handle, (Handle, rmca::Group)>,
}

/// The attached buffers (process-wide: see [`Confined`]).
static TABLES: Confined<Tables> = Confined::new("attached buffers");

fn with_tables<R>(f: impl FnOnce(&mut Tables) -> R) -> MpiResult<R> {
    TABLES.with(f)
}

/// The buffer a buffered send on `c` uses: the communicator's, else its session's, else the
/// process's. Cheap when only the process's may be attached (the usual case).
pub(crate) fn pool_for(c: &Communicator) -> MpiResult<Option<PoolRef>> {
    with_tables(|t| {
        if t.comms.is_empty() && t.sessions.is_empty() {
            return t.process.clone();
        }
        let ctx = c.context_id();
        t.comms
            .get(&ctx)
            .or_else(|| t.comm_session.get(&ctx).and_then(|s| t.sessions.get(s)))
            .or(t.process.as_ref())
            .cloned()
    })
}

/// Buffered send of the `len` bytes at `buf` through `pool` (see [`pool_for`]).
pub(crate) fn send(
    pool: &PoolRef,
    c: &Communicator,
    buf: usize,
    len: usize,
    to: usize,
    tag: c_int,
) -> MpiResult<()> {
    pool.try_borrow_mut()
        .map_err(|_| {
            MpiError::new(
                MPI_ERR_OTHER,
                "buffered send while its buffer is being detached",
            )
        })?
        .send(c, buf, len, to, tag)
}

// ---- life-cycle hooks (called by session.rs, comm.rs, attr.rs, env.rs) ----
//
// The hooks that return nothing are called right after their call made the object through
// the state, i.e. on the thread that owns the library, with no table lent: the table cannot
// refuse them (`.ok()`).

/// `MPI_Group_from_session_pset` made group `group` in `session`.
pub(crate) fn group_made(session: Handle, group: Handle) {
    if let Ok(g) = super::group::group(group) {
        with_tables(|t| t.group_session.insert(group, (session, g))).ok();
    }
}

/// The session group `group` was made in, if it is still that group and the session lives.
fn session_of_group(group: Handle) -> Option<Handle> {
    let g = super::group::group(group).ok()?;
    let (session, made) = with_tables(|t| t.group_session.get(&group).cloned()).ok()??;
    (made.compare(&g) == rmca::Comparison::Identical && session_index(session).is_ok())
        .then_some(session)
}

/// `MPI_Comm_create_from_group` made `c` from `group`: a session's communicator if the group
/// is a session's.
pub(crate) fn comm_from_group(group: Handle, c: &Communicator) {
    if let Some(session) = session_of_group(group) {
        with_tables(|t| t.comm_session.insert(c.context_id(), session)).ok();
    }
}

/// Communicator `new` was made from `old` (dup, split, create_group): it belongs to `old`'s
/// session. Handles (`MPI_COMM_NULL` and invalid ones: nothing to do).
pub(crate) fn comm_derived(old: Handle, new: Handle) {
    if new == MPI_COMM_NULL || with_tables(|t| t.comm_session.is_empty()).unwrap_or(true) {
        return;
    }
    let (Ok(old), Ok(new)) = (communicator(old), communicator(new)) else {
        return;
    };
    with_tables(|t| {
        if let Some(&s) = t.comm_session.get(&old.context_id()) {
            t.comm_session.insert(new.context_id(), s);
        }
    })
    .ok();
}

/// Communicator `c` is being freed: its buffer is detached once its sends completed (as
/// MPICH does), and it leaves its session.
pub(crate) fn comm_freed(c: &Communicator) -> MpiResult<()> {
    let ctx = c.context_id();
    let pool = with_tables(|t| {
        t.comm_session.remove(&ctx);
        t.comms.remove(&ctx)
    })?;
    pool.map_or(Ok(()), |p| p.borrow_mut().flush())
}

/// Session `session` is being finalized: its buffer is detached once its sends completed,
/// and its communicators and groups are forgotten.
pub(crate) fn session_finalized(session: Handle) -> MpiResult<()> {
    let pool = with_tables(|t| {
        t.comm_session.retain(|_, s| *s != session);
        t.group_session.retain(|_, (s, _)| *s != session);
        t.sessions.remove(&session)
    })?;
    pool.map_or(Ok(()), |p| p.borrow_mut().flush())
}

/// `MPI_Finalize`: the sends from the process's buffer and from those of the world model's
/// communicators complete (session communicators outlive it).
pub(crate) fn world_finalized() -> MpiResult<()> {
    let pools: Vec<PoolRef> = with_tables(|t| {
        let world: Vec<ContextId> = t
            .comms
            .keys()
            .filter(|c| !t.comm_session.contains_key(c))
            .copied()
            .collect();
        let mut pools: Vec<PoolRef> = world.iter().filter_map(|c| t.comms.remove(c)).collect();
        // The process's stays attached (MPI_Buffer_detach after MPI_Finalize is erroneous
        // anyway); its sends complete now.
        pools.extend(t.process.clone());
        pools
    })?;
    let mut first_err = None;
    for p in pools {
        if let Err(e) = p.borrow_mut().flush() {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

// ---- the calls ----

/// Which object a buffer belongs to.
#[derive(Clone, Copy)]
pub(crate) enum Owner {
    Comm(ContextId),
    Session(Handle),
    /// The process (`MPI_Buffer_attach`).
    Process,
}

impl Owner {
    fn of_comm(comm: Handle) -> MpiResult<Self> {
        Ok(Self::Comm(communicator(comm)?.context_id()))
    }

    fn of_session(session: Handle) -> MpiResult<Self> {
        session_index(session)?;
        Ok(Self::Session(session))
    }

    fn what(self) -> &'static str {
        match self {
            Self::Comm(_) => "the communicator",
            Self::Session(_) => "the session",
            Self::Process => "the process (MPI_Buffer_attach)",
        }
    }

    fn get(self, t: &mut Tables) -> Option<&PoolRef> {
        match self {
            Self::Comm(c) => t.comms.get(&c),
            Self::Session(s) => t.sessions.get(&s),
            Self::Process => t.process.as_ref(),
        }
    }

    fn attached(self) -> MpiResult<PoolRef> {
        with_tables(|t| self.get(t).cloned())?.ok_or_else(|| {
            MpiError::new(
                MPI_ERR_BUFFER,
                format!("no buffer is attached to {}", self.what()),
            )
        })
    }
}

pub(crate) fn attach(owner: Owner, buffer: *mut c_void, size: MPI_Count) -> MpiResult<()> {
    let pool = Pool::new(buffer, size)?;
    with_tables(|t| {
        if owner.get(t).is_some() {
            return Err(MpiError::new(
                MPI_ERR_BUFFER,
                format!(
                    "a buffer is already attached to {}: detach it first",
                    owner.what()
                ),
            ));
        }
        let pool = Rc::new(RefCell::new(pool));
        match owner {
            Owner::Comm(c) => t.comms.insert(c, pool),
            Owner::Session(s) => t.sessions.insert(s, pool),
            Owner::Process => t.process.replace(pool),
        };
        Ok(())
    })?
}

/// Detach `owner`'s buffer once its sends completed: its address and size. `fits` checks
/// the size before anything is done (the `int` form refuses a size it cannot return).
pub(crate) fn detach(
    owner: Owner,
    fits: impl FnOnce(usize) -> MpiResult<()>,
) -> MpiResult<(usize, usize)> {
    let pool = owner.attached()?;
    let mut p = pool
        .try_borrow_mut()
        .map_err(|_| MpiError::new(MPI_ERR_OTHER, "the buffer is being detached already"))?;
    let given = p.given_back();
    fits(given.1)?;
    p.flush()?;
    drop(p);
    with_tables(|t| match owner {
        Owner::Comm(c) => t.comms.remove(&c),
        Owner::Session(s) => t.sessions.remove(&s),
        Owner::Process => t.process.take(),
    })?;
    Ok(given)
}

pub(crate) fn flush(owner: Owner) -> MpiResult<()> {
    let pool = owner.attached()?;
    let mut p = pool
        .try_borrow_mut()
        .map_err(|_| MpiError::new(MPI_ERR_OTHER, "the buffer is being detached"))?;
    p.flush()
}

/// Start a flush of `owner`'s buffer: its request (on `comm`, for its error handler).
///
/// # Safety
/// `request` is null or valid for a write of a handle.
pub(crate) unsafe fn iflush(owner: Owner, comm: Handle, request: *mut Handle) -> MpiResult<()> {
    if request.is_null() {
        return Err(super::null_argument("request"));
    }
    let pool = owner.attached()?;
    let upto = pool.borrow().next_seq;
    // The runtime progresses through the world's communicator (sessions share it).
    let c = communicator(comm).or_else(|_| communicator(MPI_COMM_WORLD))?;
    let r = raw::custom(&c, Box::new(Flush { pool, upto }));
    let h = state::with(|s| s.add_request(ReqEntry::new(comm, ReqState::Active(r))))?;
    // SAFETY: non-null (checked), the caller's handle.
    unsafe { put(request, h, "request") }
}

/// The `int` size of a detached buffer, refused before detaching when it does not fit.
pub(crate) fn int_size(n: usize) -> MpiResult<()> {
    c_int::try_from(n).map(drop).map_err(|_| {
        MpiError::new(
            MPI_ERR_VALUE_TOO_LARGE,
            format!("the buffer's size {n} does not fit an int: use the _c form to detach it"),
        )
    })
}

/// Write a detached buffer's address and size.
///
/// # Safety
/// `buffer_addr` is null or valid for a write of a pointer, `size` for one of a `T`.
unsafe fn put_detached<T: TryFrom<usize>>(
    (addr, n): (usize, usize),
    buffer_addr: *mut c_void,
    size: *mut T,
) -> MpiResult<()> {
    let n = T::try_from(n).map_err(|_| MpiError::new(MPI_ERR_INTERN, "size checked"))?;
    // SAFETY: the caller's contract (MPI's: `buffer_addr` is a `void **`).
    unsafe {
        put(buffer_addr.cast::<usize>(), addr, "buffer_addr")?;
        put(size, n, "size")
    }
}

/// Null output arguments of a detach, refused before anything is detached.
fn detach_args(buffer_addr: *mut c_void, size: *const c_void) -> MpiResult<()> {
    if buffer_addr.is_null() {
        return Err(super::null_argument("buffer_addr"));
    }
    if size.is_null() {
        return Err(super::null_argument("size"));
    }
    Ok(())
}

/// `MPI_Comm_attach_buffer` (`MPI_BUFFER_AUTOMATIC` too).
#[export]
pub unsafe extern "C" fn MPI_Comm_attach_buffer(
    comm: Handle,
    buffer: *mut c_void,
    size: c_int,
) -> c_int {
    call("MPI_Comm_attach_buffer", comm, || {
        attach(Owner::of_comm(comm)?, buffer, size.into())
    })
}

/// `MPI_Comm_attach_buffer_c`: with an `MPI_Count` size.
#[export]
pub unsafe extern "C" fn MPI_Comm_attach_buffer_c(
    comm: Handle,
    buffer: *mut c_void,
    size: MPI_Count,
) -> c_int {
    call("MPI_Comm_attach_buffer_c", comm, || {
        attach(Owner::of_comm(comm)?, buffer, size)
    })
}

/// `MPI_Comm_detach_buffer`: waits for the buffered sends in flight from the buffer.
#[export]
pub unsafe extern "C" fn MPI_Comm_detach_buffer(
    comm: Handle,
    buffer_addr: *mut c_void,
    size: *mut c_int,
) -> c_int {
    call("MPI_Comm_detach_buffer", comm, || {
        detach_args(buffer_addr, size.cast())?;
        let given = detach(Owner::of_comm(comm)?, int_size)?;
        // SAFETY: MPI's contract: a `void **` and an int (both non-null, checked).
        unsafe { put_detached(given, buffer_addr, size) }
    })
}

/// `MPI_Comm_detach_buffer_c`: with an `MPI_Count` size.
#[export]
pub unsafe extern "C" fn MPI_Comm_detach_buffer_c(
    comm: Handle,
    buffer_addr: *mut c_void,
    size: *mut MPI_Count,
) -> c_int {
    call("MPI_Comm_detach_buffer_c", comm, || {
        detach_args(buffer_addr, size.cast())?;
        let given = detach(Owner::of_comm(comm)?, |_| Ok(()))?;
        // SAFETY: MPI's contract: a `void **` and an MPI_Count (both non-null, checked).
        unsafe { put_detached(given, buffer_addr, size) }
    })
}

/// `MPI_Comm_flush_buffer`: waits for the buffered sends in flight from the communicator's
/// buffer; it stays attached.
#[export]
pub unsafe extern "C" fn MPI_Comm_flush_buffer(comm: Handle) -> c_int {
    call("MPI_Comm_flush_buffer", comm, || {
        flush(Owner::of_comm(comm)?)
    })
}

/// `MPI_Comm_iflush_buffer`: a request complete once the buffered sends in flight from the
/// communicator's buffer at the call completed.
#[export]
pub unsafe extern "C" fn MPI_Comm_iflush_buffer(comm: Handle, request: *mut Handle) -> c_int {
    call("MPI_Comm_iflush_buffer", comm, || {
        // SAFETY: the caller's handle.
        unsafe { iflush(Owner::of_comm(comm)?, comm, request) }
    })
}

/// `MPI_Session_attach_buffer` (`MPI_BUFFER_AUTOMATIC` too).
#[export]
pub unsafe extern "C" fn MPI_Session_attach_buffer(
    session: Handle,
    buffer: *mut c_void,
    size: c_int,
) -> c_int {
    on_session("MPI_Session_attach_buffer", session, || {
        attach(Owner::of_session(session)?, buffer, size.into())
    })
}

/// `MPI_Session_attach_buffer_c`: with an `MPI_Count` size.
#[export]
pub unsafe extern "C" fn MPI_Session_attach_buffer_c(
    session: Handle,
    buffer: *mut c_void,
    size: MPI_Count,
) -> c_int {
    on_session("MPI_Session_attach_buffer_c", session, || {
        attach(Owner::of_session(session)?, buffer, size)
    })
}

/// `MPI_Session_detach_buffer`: waits for the buffered sends in flight from the buffer.
#[export]
pub unsafe extern "C" fn MPI_Session_detach_buffer(
    session: Handle,
    buffer_addr: *mut c_void,
    size: *mut c_int,
) -> c_int {
    on_session("MPI_Session_detach_buffer", session, || {
        let owner = Owner::of_session(session)?;
        detach_args(buffer_addr, size.cast())?;
        let given = detach(owner, int_size)?;
        // SAFETY: MPI's contract: a `void **` and an int (both non-null, checked).
        unsafe { put_detached(given, buffer_addr, size) }
    })
}

/// `MPI_Session_detach_buffer_c`: with an `MPI_Count` size.
#[export]
pub unsafe extern "C" fn MPI_Session_detach_buffer_c(
    session: Handle,
    buffer_addr: *mut c_void,
    size: *mut MPI_Count,
) -> c_int {
    on_session("MPI_Session_detach_buffer_c", session, || {
        let owner = Owner::of_session(session)?;
        detach_args(buffer_addr, size.cast())?;
        let given = detach(owner, |_| Ok(()))?;
        // SAFETY: MPI's contract: a `void **` and an MPI_Count (both non-null, checked).
        unsafe { put_detached(given, buffer_addr, size) }
    })
}

/// `MPI_Session_flush_buffer`: waits for the buffered sends in flight from the session's
/// buffer; it stays attached.
#[export]
pub unsafe extern "C" fn MPI_Session_flush_buffer(session: Handle) -> c_int {
    on_session("MPI_Session_flush_buffer", session, || {
        flush(Owner::of_session(session)?)
    })
}

/// `MPI_Session_iflush_buffer`: a request complete once the buffered sends in flight from
/// the session's buffer at the call completed.
#[export]
pub unsafe extern "C" fn MPI_Session_iflush_buffer(session: Handle, request: *mut Handle) -> c_int {
    on_session("MPI_Session_iflush_buffer", session, || {
        let owner = Owner::of_session(session)?;
        // SAFETY: the caller's handle. The request's errors go to the world's handler (a
        // request names a communicator, and the session's is none).
        unsafe { iflush(owner, MPI_COMM_WORLD, request) }
    })
}
