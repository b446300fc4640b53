//! Point-to-point: the four send modes, receives, probes, exchanges, persistent requests,
//! counts.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};

use rmca::framework::pml::SendMode;
use rmca::raw;

use super::types::Ty;
use super::{
    bytes, bytes_mut, call, dest, empty_status, no_overlap, outcome, put, recv_tag, send_tag,
    source, to_mpi_status, SendData, Staged,
};
use crate::abi::*;
use crate::state::{
    self, MpiError, MpiResult, Outcome, Persistent, ReqEntry, ReqState, SendKind, Slot, State,
};
use rmca_mpi_export::export;

/// Write `st` to the caller's status `out` unless it is `MPI_STATUS_IGNORE`, leaving its
/// `MPI_ERROR` field as it was: MPI's calls that complete one operation (receives, probes,
/// `MPI_Wait`, `MPI_Test`, ...) do not set it; only the calls returning an array of
/// statuses do (MPI-4.1 §3.2.5).
///
/// # Safety
/// `out` is null or valid for writes of an `MpiStatus`.
#[inline(always)]
pub(crate) unsafe fn put_status(out: *mut MpiStatus, st: &MpiStatus) {
    if !out.is_null() {
        // SAFETY: the caller's contract; each field is written in place, none is read.
        unsafe {
            std::ptr::addr_of_mut!((*out).source).write(st.source);
            std::ptr::addr_of_mut!((*out).tag).write(st.tag);
            std::ptr::addr_of_mut!((*out).internal).write(st.internal);
        }
    }
}

/// A large count (`MPI_Count`, the `_c` calls): non-negative, and within the address space.
pub(crate) fn count_c(n: MPI_Count, what: &str) -> MpiResult<usize> {
    usize::try_from(n).map_err(|_| {
        MpiError::new(
            MPI_ERR_COUNT,
            format!("{what} count {n} is invalid: counts are >= 0 and fit the address space"),
        )
    })
}

/// [`super::send_data_n`] for a count of any width.
///
/// # Safety
/// As [`super::send_data_n`].
unsafe fn send_data_c(
    buf: *const c_void,
    n: MPI_Count,
    dt: Handle,
    what: &str,
) -> MpiResult<SendData> {
    let n = count_c(n, what)?;
    let ty = Ty::for_message(dt, n)?;
    // SAFETY: the caller's contract.
    unsafe { super::send_data_n(buf, n, &ty, what) }
}

/// [`super::recv_data`] for a count of any width.
fn recv_data_c(
    buf: *mut c_void,
    n: MPI_Count,
    dt: Handle,
    what: &str,
) -> MpiResult<super::RecvData> {
    let n = count_c(n, what)?;
    let ty = Ty::for_message(dt, n)?;
    super::recv_data_n(buf, n, &ty, what)
}

/// The communicator and the byte length of a point-to-point call that uses the buffer in
/// place (persistent requests), for a count of any width: a derived datatype must be one
/// run of bytes starting at `buf`.
fn args(
    comm: Handle,
    buf: *const c_void,
    count: MPI_Count,
    dt: Handle,
) -> MpiResult<(rmca::Communicator, usize)> {
    let c = super::communicator(comm)?;
    let n = count_c(count, "message")?;
    let ty = Ty::for_message(dt, n)?;
    let len = ty.packed_len(n)?;
    if !matches!(ty.run(n), Some((0, _))) {
        return Err(MpiError::new(
            MPI_ERR_TYPE,
            format!("datatype {dt:#x} does not lay its data out as one run from the buffer start, which persistent requests need"),
        ));
    }
    if len > 0 && buf.is_null() {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            format!("message buffer is NULL with {n} elements to transfer"),
        ));
    }
    Ok((c, len))
}

/// A blocking send of any mode: the general path (any datatype; every argument checked).
/// Out of line, so that the entry points' fast path pays no frame for it.
#[inline(never)]
fn send(
    kind: SendKind,
    buf: *const c_void,
    count: MPI_Count,
    dt: Handle,
    to: c_int,
    tag: c_int,
    comm: Handle,
) -> MpiResult<()> {
    let c = super::communicator(comm)?;
    // SAFETY: the send's contract: `buf` holds `count` elements of `dt`.
    let data = unsafe { send_data_c(buf, count, dt, "message")? };
    // SAFETY: the send's contract: `buf` is not written during the call; the slice lives
    // only for the call.
    send_on(&c, kind, unsafe { data.bytes() }, to, tag)
}

/// Send `bytes` on `c` (after the buffer checks): the rest of a blocking send, shared by
/// the general path and the fast one (a predefined datatype: no packing, no `Ty`).
#[inline(always)]
fn send_on(
    c: &rmca::Communicator,
    kind: SendKind,
    bytes: &[u8],
    to: c_int,
    tag: c_int,
) -> MpiResult<()> {
    let Some(to) = dest(to, c.size())? else {
        return Ok(());
    };
    let tag = send_tag(tag)?;
    let sent = match kind {
        SendKind::Buffered => {
            return buffered_send(c, bytes.as_ptr() as usize, bytes.len(), to, tag)
        }
        SendKind::Synchronous => raw::send(c, bytes, to, tag, SendMode::Synchronous),
        SendKind::Standard | SendKind::Ready => raw::send(c, bytes, to, tag, SendMode::Standard),
    };
    sent.map_err(MpiError::from)
}

/// Copy a buffered send into memory of its own, counted against the attached buffer, and
/// start it.
fn buffered_send(
    c: &rmca::Communicator,
    buf: usize,
    len: usize,
    to: usize,
    tag: c_int,
) -> MpiResult<()> {
    // The communicator's buffer, else its session's, else the process's.
    let pool = super::buffers::pool_for(c)?.ok_or_else(|| {
        MpiError::new(
            MPI_ERR_BUFFER,
            "MPI_Bsend without an attached buffer: call MPI_Buffer_attach first",
        )
    })?;
    super::buffers::send(&pool, c, buf, len, to, tag)
}

macro_rules! blocking_send {
    ($name:ident, $kind:expr) => {
        #[doc = concat!("`", stringify!($name), "`.")]
        #[export]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
        ) -> c_int {
            call(stringify!($name), comm, || {
                // The fast path: a predefined datatype's bytes sent in place.
                if let Some(len) = super::predefined_len(buf, count, datatype) {
                    let c = super::communicator(comm)?;
                    // SAFETY: the send's contract: `buf` holds `len` bytes (not NULL when
                    // len > 0, checked), unwritten during the call; the slice lives only
                    // for the call.
                    return send_on(&c, $kind, unsafe { bytes(buf, len) }, dest, tag);
                }
                send($kind, buf, count.into(), datatype, dest, tag, comm)
            })
        }
    };
    ($name:ident, $kind:expr, large) => {
        #[doc = concat!("`", stringify!($name), "`: the large-count form.")]
        #[export]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: MPI_Count,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
        ) -> c_int {
            call(stringify!($name), comm, || {
                send($kind, buf, count, datatype, dest, tag, comm)
            })
        }
    };
}

blocking_send!(MPI_Send_c, SendKind::Standard, large);
blocking_send!(MPI_Ssend_c, SendKind::Synchronous, large);
blocking_send!(MPI_Rsend_c, SendKind::Ready, large);
blocking_send!(MPI_Bsend_c, SendKind::Buffered, large);
blocking_send!(MPI_Send, SendKind::Standard);
blocking_send!(MPI_Ssend, SendKind::Synchronous);
blocking_send!(MPI_Rsend, SendKind::Ready);
blocking_send!(MPI_Bsend, SendKind::Buffered);

/// `MPI_Recv`.
#[export]
pub unsafe extern "C" fn MPI_Recv(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    src: c_int,
    tag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Recv", comm, || {
        // The fast path: a predefined datatype's bytes received in place.
        if let Some(len) = super::predefined_len(buf, count, datatype) {
            let c = super::communicator(comm)?;
            let src = source(src, c.size())?;
            let tag = recv_tag(tag)?;
            // SAFETY: MPI_Recv's contract: `buf` holds `len` bytes (not NULL when len > 0,
            // checked) and is not accessed otherwise during the call.
            let received = raw::recv(&c, unsafe { bytes_mut(buf, len) }, src, tag);
            return match received {
                Ok(st) => {
                    // The status is converted only when the program asked for it.
                    if !status.is_null() {
                        // SAFETY: the caller's status (not MPI_STATUS_IGNORE: checked).
                        unsafe { put_status(status, &to_mpi_status(&st)) };
                    }
                    Ok(())
                }
                // SAFETY: the caller's status or MPI_STATUS_IGNORE.
                Err(e) => unsafe { failed_recv(e, status) },
            };
        }
        // SAFETY: MPI_Recv's contract.
        unsafe { recv_general(buf, count.into(), datatype, src, tag, comm, status) }
    })
}

/// `MPI_Recv_c`.
#[export]
pub unsafe extern "C" fn MPI_Recv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: Handle,
    src: c_int,
    tag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    // SAFETY: MPI_Recv_c's contract.
    call("MPI_Recv_c", comm, || unsafe {
        recv_general(buf, count, datatype, src, tag, comm, status)
    })
}

/// `MPI_Recv`'s general path (any datatype; every argument checked), out of line as
/// [`send`].
///
/// # Safety
/// `MPI_Recv`'s contract: `buf` holds `count` elements of `datatype` and is not accessed
/// otherwise during the call; `status` is the caller's or `MPI_STATUS_IGNORE`.
#[inline(never)]
unsafe fn recv_general(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: Handle,
    src: c_int,
    tag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> MpiResult<()> {
    let c = super::communicator(comm)?;
    let mut data = recv_data_c(buf, count, datatype, "message")?;
    let src = source(src, c.size())?;
    let tag = recv_tag(tag)?;
    // SAFETY: the caller's contract.
    let o = outcome(c.recv(unsafe { data.bytes_mut() }, src, tag));
    // SAFETY: as above.
    unsafe { data.finish(o.status.bytes() as usize) };
    // SAFETY: the caller's status or MPI_STATUS_IGNORE.
    unsafe { put_status(status, &o.status) };
    o.error.map_or(Ok(()), Err)
}

/// A failed receive of the fast path: its status (a truncated message's says what
/// arrived) and its error.
///
/// # Safety
/// `status` is the caller's status or `MPI_STATUS_IGNORE`.
#[cold]
#[inline(never)]
unsafe fn failed_recv(e: rmca::Error, status: *mut MpiStatus) -> MpiResult<()> {
    let o = outcome(Err(e));
    // SAFETY: the caller's contract.
    unsafe { put_status(status, &o.status) };
    o.error.map_or(Ok(()), Err)
}

/// Start a send of `kind`: its request state.
// Always: a result returned through memory and read back costs a store-forwarding stall
// per request (perf).
#[inline(always)]
pub(crate) fn start_send(
    c: &rmca::Communicator,
    kind: SendKind,
    buf: usize,
    len: usize,
    to: c_int,
    tag: c_int,
) -> MpiResult<ReqState> {
    let mode = match kind {
        SendKind::Buffered => {
            let Some(to) = dest(to, c.size())? else {
                return Ok(proc_null_done());
            };
            let tag = send_tag(tag)?;
            buffered_send(c, buf, len, to, tag)?;
            let mut st = empty_status();
            st.set_bytes(len as u64);
            return Ok(ReqState::Done(Box::new(Outcome {
                status: st,
                error: None,
            })));
        }
        SendKind::Synchronous => SendMode::Synchronous,
        SendKind::Standard | SendKind::Ready => SendMode::Standard,
    };
    start_send_on(c, mode, buf, len, to, tag)
}

/// Start a standard or synchronous send: its request state. Needs no library state, so
/// that `MPI_Isend` can run it on a communicator borrowed from the handle table.
#[inline(always)]
fn start_send_on(
    c: &rmca::Communicator,
    mode: SendMode,
    buf: usize,
    len: usize,
    to: c_int,
    tag: c_int,
) -> MpiResult<ReqState> {
    let Some(to) = dest(to, c.size())? else {
        return Ok(proc_null_done());
    };
    let tag = send_tag(tag)?;
    // SAFETY: the contract of MPI's non-blocking sends: the program leaves the buffer
    // unwritten until the request completed (Wait/Test), which is when the raw request is.
    let r = unsafe { raw::isend(c, buf as *const u8, len, to, tag, mode)? };
    Ok(ReqState::Active(r))
}

/// [`start_send_on`] for the fast path: the request's table slot ([`Slot::Pending`], or
/// [`Slot::Sent`] when a BTL took it at once), `None` for `MPI_PROC_NULL`.
#[inline(always)]
fn start_send_fast(
    c: &rmca::Communicator,
    comm: Handle,
    mode: SendMode,
    buf: usize,
    len: usize,
    to: c_int,
    tag: c_int,
) -> MpiResult<Option<Slot>> {
    let Some(to) = dest(to, c.size())? else {
        return Ok(None);
    };
    let tag = send_tag(tag)?;
    // SAFETY: the contract of MPI's non-blocking sends: the program leaves the buffer
    // unwritten until the request completed (Wait/Test), which is when the operation is.
    Ok(Some(
        match unsafe { raw::start_isend(c, buf as *const u8, len, to, tag, mode)? } {
            raw::Started::Done => Slot::Sent {
                comm,
                // A rank of a communicator: below its size, a c_int.
                dest: to as u32,
                tag,
                len,
            },
            raw::Started::Pending(id) => Slot::Pending { comm, id },
        },
    ))
}

/// [`start_recv`] for the fast path: the request's table slot, `None` for `MPI_PROC_NULL`.
#[inline(always)]
fn start_recv_fast(
    c: &rmca::Communicator,
    comm: Handle,
    buf: usize,
    len: usize,
    src: c_int,
    tag: c_int,
) -> MpiResult<Option<Slot>> {
    let src = source(src, c.size())?;
    let tag = recv_tag(tag)?;
    if src == rmca::Src::Null {
        return Ok(None);
    }
    // SAFETY: the contract of MPI_Irecv: the program leaves the buffer alone until the
    // request completed, which is when the operation is.
    let id = unsafe { raw::start_irecv(c, buf as *mut u8, len, src, tag)? };
    Ok(Some(Slot::Pending { comm, id }))
}

/// Add the request a fast path started (`None`: an operation on `MPI_PROC_NULL`, complete).
#[inline(always)]
fn add_fast(s: &mut State, comm: Handle, started: Option<Slot>) -> MpiResult<Handle> {
    match started {
        Some(slot) => s.add_slot(slot),
        None => s.add_request(ReqEntry::new(comm, proc_null_done())),
    }
}

/// A non-blocking point-to-point call queued at `MPI_THREAD_MULTIPLE` by a thread that found
/// the process lock held ([`crate::handoff`]): its arguments, a predefined datatype's bytes
/// in place; the communicator, rank and tag are checked when it starts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Queued {
    /// `MPI_Isend` (standard mode).
    Send {
        buf: usize,
        len: usize,
        dest: c_int,
        tag: c_int,
        comm: Handle,
    },
    /// `MPI_Irecv`.
    Recv {
        buf: usize,
        len: usize,
        src: c_int,
        tag: c_int,
        comm: Handle,
    },
}

/// Start queued call `op` into its reserved request `h` (by the lock's holder, the state
/// lent), as `MPI_Isend`'s and `MPI_Irecv`'s fast paths start theirs. What the call would
/// have refused (a freed communicator, a bad rank or tag) completes the request with that
/// error instead: the completion call (`MPI_Wait`, `MPI_Test`, ...) raises it on the
/// communicator's error handler, as MPI allows for non-blocking calls.
pub(crate) fn start_queued(s: &mut State, op: Queued, h: Handle) {
    let comm = match op {
        Queued::Send { comm, .. } | Queued::Recv { comm, .. } => comm,
    };
    let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let c = &s.comm(comm)?.comm;
        match op {
            Queued::Send {
                buf,
                len,
                dest,
                tag,
                ..
            } => start_send_fast(c, comm, SendMode::Standard, buf, len, dest, tag),
            Queued::Recv {
                buf, len, src, tag, ..
            } => start_recv_fast(c, comm, buf, len, src, tag),
        }
    }))
    .unwrap_or_else(|panic| Err(super::panic_error(panic)));
    let filled = match started {
        Ok(Some(slot)) => s.fill_reserved(h, slot, None),
        Ok(None) => s.fill_reserved(
            h,
            Slot::General,
            Some(ReqEntry::new(comm, proc_null_done())),
        ),
        Err(e) => {
            tracing::debug!(error = %e.msg, "a queued call failed as it started");
            let failed = Outcome {
                status: MpiStatus {
                    error: e.class,
                    ..empty_status()
                },
                error: Some(e.on(comm)),
            };
            let done = ReqEntry::new(comm, ReqState::Done(Box::new(failed)));
            s.fill_reserved(h, Slot::General, Some(done))
        }
    };
    if !filled {
        tracing::error!(
            request = h,
            "a queued call's request was not reserved: it is lost"
        );
    }
}

/// The state of an operation on `MPI_PROC_NULL`: complete, with its empty status.
#[cold]
pub(crate) fn proc_null_done() -> ReqState {
    let mut st = empty_status();
    st.source = MPI_PROC_NULL;
    ReqState::Done(Box::new(Outcome {
        status: st,
        error: None,
    }))
}

/// Start a receive: its request state.
// Always: a result returned through memory and read back costs a store-forwarding stall
// per request (perf).
#[inline(always)]
pub(crate) fn start_recv(
    c: &rmca::Communicator,
    buf: usize,
    len: usize,
    src: c_int,
    tag: c_int,
) -> MpiResult<ReqState> {
    let src = source(src, c.size())?;
    let tag = recv_tag(tag)?;
    if src == rmca::Src::Null {
        return Ok(proc_null_done());
    }
    // SAFETY: the contract of MPI_Irecv: the program leaves the buffer alone until the
    // request completed, which is when the raw request is.
    let r = unsafe { raw::irecv(c, buf as *mut u8, len, src, tag)? };
    Ok(ReqState::Active(r))
}

// MPI's argument list, plus the send mode.
#[allow(clippy::too_many_arguments)]
fn isend(
    kind: SendKind,
    buf: *const c_void,
    count: MPI_Count,
    dt: Handle,
    to: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> MpiResult<()> {
    let c = super::communicator(comm)?;
    // SAFETY: the send's contract: `buf` holds `count` elements of `dt`.
    let data = unsafe { send_data_c(buf, count, dt, "message")? };
    let (ptr, len) = match &data {
        SendData::Direct(p, len) => (*p as usize, *len),
        SendData::Packed(v) => (v.as_ptr() as usize, v.len()),
    };
    let h = state::with(|s| {
        let st = start_send(&c, kind, ptr, len, to, tag)?;
        let active = matches!(st, ReqState::Active(_));
        let h = s.add_request(ReqEntry::new(comm, st))?;
        if active && matches!(data, SendData::Packed(_)) {
            // The packed copy is read until the request completes.
            s.stage(h, Staged::Send(data));
        }
        Ok(h)
    })?;
    // SAFETY: the caller's request handle.
    unsafe { put(request, h, "request") }
}

/// The PML's mode of a send of `kind`; `None` for a buffered send (it needs the attached
/// buffer, in the library state: the general path).
#[inline(always)]
fn unbuffered_mode(kind: SendKind) -> Option<SendMode> {
    match kind {
        SendKind::Standard | SendKind::Ready => Some(SendMode::Standard),
        SendKind::Synchronous => Some(SendMode::Synchronous),
        SendKind::Buffered => None,
    }
}

/// The fast path of the non-blocking sends (a predefined datatype's `len` bytes at `buf`,
/// sent in place): one visit of the library state, whose communicator is borrowed for the
/// start (starting runs no callback of the program, which could call MPI) instead of cloned.
// MPI's argument list, with the buffer resolved.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn isend_in_place(
    mode: SendMode,
    buf: usize,
    len: usize,
    to: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> MpiResult<()> {
    let h = state::with(|s| {
        let started = start_send_fast(&s.comm(comm)?.comm, comm, mode, buf, len, to, tag)?;
        add_fast(s, comm, started)
    })?;
    // SAFETY: the caller's request handle.
    unsafe { put(request, h, "request") }
}

macro_rules! nonblocking_send {
    ($name:ident, $kind:expr) => {
        #[doc = concat!("`", stringify!($name), "`.")]
        #[export]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
            request: *mut Handle,
        ) -> c_int {
            call(stringify!($name), comm, || {
                // Refused before anything starts: a send started and then refused would
                // still be delivered, with no request to complete it by.
                if request.is_null() {
                    return Err(super::null_argument("request"));
                }
                if let (Some(len), Some(mode)) = (
                    super::predefined_len(buf, count, datatype),
                    unbuffered_mode($kind),
                ) {
                    return isend_in_place(mode, buf as usize, len, dest, tag, comm, request);
                }
                isend($kind, buf, count.into(), datatype, dest, tag, comm, request)
            })
        }
    };
    ($name:ident, $kind:expr, large) => {
        #[doc = concat!("`", stringify!($name), "`: the large-count form.")]
        #[export]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: MPI_Count,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
            request: *mut Handle,
        ) -> c_int {
            call(stringify!($name), comm, || {
                if request.is_null() {
                    return Err(super::null_argument("request"));
                }
                isend($kind, buf, count, datatype, dest, tag, comm, request)
            })
        }
    };
}

nonblocking_send!(MPI_Isend_c, SendKind::Standard, large);
nonblocking_send!(MPI_Issend_c, SendKind::Synchronous, large);
nonblocking_send!(MPI_Irsend_c, SendKind::Ready, large);
nonblocking_send!(MPI_Ibsend_c, SendKind::Buffered, large);

nonblocking_send!(MPI_Isend, SendKind::Standard);
nonblocking_send!(MPI_Issend, SendKind::Synchronous);
nonblocking_send!(MPI_Irsend, SendKind::Ready);
nonblocking_send!(MPI_Ibsend, SendKind::Buffered);

/// `MPI_Irecv`.
#[export]
pub unsafe extern "C" fn MPI_Irecv(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    src: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Irecv", comm, || {
        // Refused before anything starts (a receive started and then refused would still
        // take a message).
        if request.is_null() {
            return Err(super::null_argument("request"));
        }
        // The fast path: a predefined datatype's bytes received in place, in one visit of
        // the library state, its communicator borrowed for the start (as `isend_in_place`).
        if let Some(len) = super::predefined_len(buf, count, datatype) {
            let h = state::with(|s| {
                let c = &s.comm(comm)?.comm;
                let started = start_recv_fast(c, comm, buf as usize, len, src, tag)?;
                add_fast(s, comm, started)
            })?;
            // SAFETY: the caller's request handle.
            return unsafe { put(request, h, "request") };
        }
        irecv_general(buf, count.into(), datatype, src, tag, comm, request)
    })
}

/// `MPI_Irecv`'s general path (any datatype, any count width).
fn irecv_general(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: Handle,
    src: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> MpiResult<()> {
    let c = super::communicator(comm)?;
    let mut data = recv_data_c(buf, count, datatype, "message")?;
    // SAFETY: only the address is taken; the PML writes there until completion, and a
    // staged buffer's heap allocation does not move when `data` does.
    let at = unsafe { data.bytes_mut() }.as_mut_ptr() as usize;
    let st = start_recv(&c, at, data.len(), src, tag)?;
    let h = state::with(|s| {
        let h = s.add_request(ReqEntry::new(comm, st))?;
        if data.is_staged() {
            s.stage(h, Staged::Recv(data));
        }
        Ok(h)
    })?;
    // SAFETY: the caller's request handle.
    unsafe { put(request, h, "request") }
}

/// `MPI_Irecv_c`.
#[export]
pub unsafe extern "C" fn MPI_Irecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: Handle,
    src: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Irecv_c", comm, || {
        if request.is_null() {
            return Err(super::null_argument("request"));
        }
        irecv_general(buf, count, datatype, src, tag, comm, request)
    })
}

// MPI's argument list, plus the send mode.
#[allow(clippy::too_many_arguments)]
fn send_init(
    kind: SendKind,
    buf: *const c_void,
    count: MPI_Count,
    dt: Handle,
    to: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> MpiResult<()> {
    let (c, len) = args(comm, buf, count, dt)?;
    // Arguments are checked now, as MPI asks, not at each start.
    dest(to, c.size())?;
    send_tag(tag)?;
    let h = state::with(|s| {
        s.add_request(ReqEntry {
            comm,
            state: ReqState::Inactive,
            staged: false,
            persistent: Some(Box::new(Persistent::Send {
                buf: buf as usize,
                len,
                dest: to,
                tag,
                kind,
            })),
        })
    })?;
    // SAFETY: the caller's request handle.
    unsafe { put(request, h, "request") }
}

macro_rules! persistent_send {
    ($name:ident, $kind:expr) => {
        #[doc = concat!("`", stringify!($name), "`: a persistent request, started by `MPI_Start`.")]
        #[export]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
            request: *mut Handle,
        ) -> c_int {
            call(stringify!($name), comm, || {
                send_init($kind, buf, count.into(), datatype, dest, tag, comm, request)
            })
        }
    };
    ($name:ident, $kind:expr, large) => {
        #[doc = concat!("`", stringify!($name), "`: the large-count form.")]
        #[export]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: MPI_Count,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
            request: *mut Handle,
        ) -> c_int {
            call(stringify!($name), comm, || {
                send_init($kind, buf, count, datatype, dest, tag, comm, request)
            })
        }
    };
}

persistent_send!(MPI_Send_init_c, SendKind::Standard, large);
persistent_send!(MPI_Ssend_init_c, SendKind::Synchronous, large);
persistent_send!(MPI_Rsend_init_c, SendKind::Ready, large);
persistent_send!(MPI_Bsend_init_c, SendKind::Buffered, large);

persistent_send!(MPI_Send_init, SendKind::Standard);
persistent_send!(MPI_Ssend_init, SendKind::Synchronous);
persistent_send!(MPI_Rsend_init, SendKind::Ready);
persistent_send!(MPI_Bsend_init, SendKind::Buffered);

/// `MPI_Recv_init`.
#[export]
pub unsafe extern "C" fn MPI_Recv_init(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    src: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Recv_init", comm, || {
        recv_init(buf, count.into(), datatype, src, tag, comm, request)
    })
}

/// `MPI_Recv_init_c`.
#[export]
pub unsafe extern "C" fn MPI_Recv_init_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: Handle,
    src: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Recv_init_c", comm, || {
        recv_init(buf, count, datatype, src, tag, comm, request)
    })
}

/// `MPI_Recv_init`'s body, for a count of any width.
fn recv_init(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: Handle,
    src: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> MpiResult<()> {
    let (c, len) = args(comm, buf, count, datatype)?;
    source(src, c.size())?;
    recv_tag(tag)?;
    let h = state::with(|s| {
        s.add_request(ReqEntry {
            comm,
            state: ReqState::Inactive,
            staged: false,
            persistent: Some(Box::new(Persistent::Recv {
                buf: buf as usize,
                len,
                source: src,
                tag,
            })),
        })
    })?;
    // SAFETY: the caller's request handle.
    unsafe { put(request, h, "request") }
}

/// Start persistent request `h`.
fn start(s: &mut State, h: Handle) -> MpiResult<()> {
    let entry = s.request(h)?;
    // A bad start is the request's communicator's error (its handler decides), not the world's.
    let comm = entry.comm;
    let Some(p) = entry.persistent.as_deref().cloned() else {
        return Err(MpiError::new(
            MPI_ERR_REQUEST,
            "MPI_Start on a request that is not persistent (made by MPI_Send_init or MPI_Recv_init)",
        )
        .on(comm));
    };
    if !matches!(entry.state, ReqState::Inactive) {
        return Err(MpiError::new(
            MPI_ERR_REQUEST,
            "MPI_Start on a persistent request that is still active: complete it first",
        )
        .on(comm));
    }
    let c = s.comm(comm)?.comm.clone();
    if super::partitioned::is_partitioned(&p) {
        let st = super::partitioned::start(&c, h).map_err(|e| e.on(comm))?;
        s.request(h)?.state = st;
        return Ok(());
    }
    let st = match p {
        Persistent::Send {
            buf,
            len,
            dest,
            tag,
            kind,
        } => start_send(&c, kind, buf, len, dest, tag),
        Persistent::Recv {
            buf,
            len,
            source,
            tag,
        } => start_recv(&c, buf, len, source, tag),
        Persistent::Coll(f) => {
            let (r, keep) = (f.0)(&c).map_err(|e| e.on(comm))?;
            s.request(h)?.state = ReqState::Active(r);
            if let Some(keep) = keep {
                s.stage(h, keep);
            }
            return Ok(());
        }
    }
    .map_err(|e| e.on(comm))?;
    s.request(h)?.state = st;
    Ok(())
}

/// `MPI_Start`.
#[export]
pub unsafe extern "C" fn MPI_Start(request: *mut Handle) -> c_int {
    call("MPI_Start", MPI_COMM_WORLD, || {
        if request.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the request argument is NULL"));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { request.read() };
        state::with(|s| start(s, h))
    })
}

/// `MPI_Startall`.
#[export]
pub unsafe extern "C" fn MPI_Startall(count: c_int, requests: *mut Handle) -> c_int {
    call("MPI_Startall", MPI_COMM_WORLD, || {
        let n = super::count(count, "request count")?;
        if n > 0 && requests.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the requests array is NULL"));
        }
        // SAFETY: MPI_Startall's contract: `requests` holds `count` handles.
        let hs = unsafe { bytes(requests.cast(), n * size_of::<Handle>()) };
        let hs: Vec<Handle> = hs
            .chunks_exact(size_of::<Handle>())
            .map(|b| Handle::from_ne_bytes(b.try_into().expect("handle-sized chunk")))
            .collect();
        state::with(|s| hs.iter().try_for_each(|&h| start(s, h)))
    })
}

/// `MPI_Probe`.
#[export]
pub unsafe extern "C" fn MPI_Probe(
    src: c_int,
    tag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Probe", comm, || {
        let c = super::communicator(comm)?;
        let src = source(src, c.size())?;
        let tag = recv_tag(tag)?;
        let st = c.probe(src, tag)?;
        // SAFETY: the caller's status or MPI_STATUS_IGNORE.
        unsafe { put_status(status, &to_mpi_status(&st)) };
        Ok(())
    })
}

/// `MPI_Iprobe`.
#[export]
pub unsafe extern "C" fn MPI_Iprobe(
    src: c_int,
    tag: c_int,
    comm: Handle,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Iprobe", comm, || {
        let c = super::communicator(comm)?;
        let src = source(src, c.size())?;
        let tag = recv_tag(tag)?;
        let found = c.iprobe(src, tag)?;
        // SAFETY: the caller's int and status (or MPI_STATUS_IGNORE).
        unsafe {
            put(flag, c_int::from(found.is_some()), "flag")?;
            if let Some(st) = found {
                put_status(status, &to_mpi_status(&st));
            }
        }
        Ok(())
    })
}

/// `MPI_Sendrecv`.
#[export]
pub unsafe extern "C" fn MPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    to: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    src: c_int,
    recvtag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Sendrecv", comm, || {
        let send = (sendbuf, sendcount.into(), sendtype, to, sendtag);
        let recv = (recvbuf, recvcount.into(), recvtype, src, recvtag);
        // SAFETY: MPI_Sendrecv's contract.
        unsafe { sendrecv(send, recv, comm, status, "MPI_Sendrecv") }
    })
}

/// `MPI_Sendrecv_c`.
#[export]
pub unsafe extern "C" fn MPI_Sendrecv_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: Handle,
    to: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: Handle,
    src: c_int,
    recvtag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Sendrecv_c", comm, || {
        let send = (sendbuf, sendcount, sendtype, to, sendtag);
        let recv = (recvbuf, recvcount, recvtype, src, recvtag);
        // SAFETY: MPI_Sendrecv_c's contract.
        unsafe { sendrecv(send, recv, comm, status, "MPI_Sendrecv_c") }
    })
}

/// The send half of an exchange: buffer, count, datatype, destination, tag.
type SendHalf = (*const c_void, MPI_Count, Handle, c_int, c_int);
/// The receive half of an exchange: buffer, count, datatype, source, tag.
type RecvHalf = (*mut c_void, MPI_Count, Handle, c_int, c_int);

/// `MPI_Sendrecv`'s body, for counts of any width.
///
/// # Safety
/// `MPI_Sendrecv`'s contract.
unsafe fn sendrecv(
    (sendbuf, sendcount, sendtype, to, sendtag): SendHalf,
    (recvbuf, recvcount, recvtype, src, recvtag): RecvHalf,
    comm: Handle,
    status: *mut MpiStatus,
    fname: &str,
) -> MpiResult<()> {
    let c = super::communicator(comm)?;
    // SAFETY: MPI_Sendrecv's contract: `sendbuf` holds `sendcount` elements.
    let send = unsafe { send_data_c(sendbuf, sendcount, sendtype, "send")? };
    let mut recv = recv_data_c(recvbuf, recvcount, recvtype, "receive")?;
    let to = match dest(to, c.size())? {
        Some(d) => rmca::Dest::Rank(d),
        None => rmca::Dest::Null,
    };
    let sendtag = send_tag(sendtag)?;
    let src = source(src, c.size())?;
    let recvtag = recv_tag(recvtag)?;
    // SAFETY: MPI_Sendrecv's contract: both buffers are valid for the call, the send
    // buffer unwritten and the receive buffer unaccessed otherwise.
    let (sb, rb) = unsafe { (send.bytes(), recv.bytes_mut()) };
    no_overlap(
        sb.as_ptr().cast(),
        sb.len(),
        rb.as_ptr().cast(),
        rb.len(),
        fname,
    )?;
    let o = outcome(c.sendrecv(sb, to, sendtag, rb, src, recvtag));
    // SAFETY: as above; the caller's status or MPI_STATUS_IGNORE.
    unsafe {
        recv.finish(o.status.bytes() as usize);
        put_status(status, &o.status);
    }
    o.error.map_or(Ok(()), Err)
}

/// `MPI_Sendrecv_replace`: the message sent is a copy, the reply lands in `buf`.
#[export]
pub unsafe extern "C" fn MPI_Sendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    to: c_int,
    sendtag: c_int,
    src: c_int,
    recvtag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Sendrecv_replace", comm, || {
        // SAFETY: MPI_Sendrecv_replace's contract.
        unsafe {
            sendrecv_replace(
                buf,
                count.into(),
                datatype,
                (to, sendtag, src, recvtag),
                comm,
                status,
            )
        }
    })
}

/// `MPI_Sendrecv_replace_c`.
#[export]
pub unsafe extern "C" fn MPI_Sendrecv_replace_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: Handle,
    to: c_int,
    sendtag: c_int,
    src: c_int,
    recvtag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Sendrecv_replace_c", comm, || {
        // SAFETY: MPI_Sendrecv_replace_c's contract.
        unsafe {
            sendrecv_replace(
                buf,
                count,
                datatype,
                (to, sendtag, src, recvtag),
                comm,
                status,
            )
        }
    })
}

/// `MPI_Sendrecv_replace`'s body, for a count of any width; `peers` is (destination, send
/// tag, source, receive tag).
///
/// # Safety
/// `MPI_Sendrecv_replace`'s contract.
unsafe fn sendrecv_replace(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: Handle,
    (to, sendtag, src, recvtag): (c_int, c_int, c_int, c_int),
    comm: Handle,
    status: *mut MpiStatus,
) -> MpiResult<()> {
    let c = super::communicator(comm)?;
    // SAFETY: MPI_Sendrecv_replace's contract: `buf` holds `count` elements for the call.
    let copy = unsafe {
        send_data_c(buf, count, datatype, "message")?
            .bytes()
            .to_vec()
    };
    let mut recv = recv_data_c(buf, count, datatype, "message")?;
    let to = match dest(to, c.size())? {
        Some(d) => rmca::Dest::Rank(d),
        None => rmca::Dest::Null,
    };
    let sendtag = send_tag(sendtag)?;
    let src = source(src, c.size())?;
    let recvtag = recv_tag(recvtag)?;
    // SAFETY: as above; the copy is separate from `buf`.
    let o = outcome(c.sendrecv(
        &copy,
        to,
        sendtag,
        unsafe { recv.bytes_mut() },
        src,
        recvtag,
    ));
    // SAFETY: as above; the caller's status or MPI_STATUS_IGNORE.
    unsafe {
        recv.finish(o.status.bytes() as usize);
        put_status(status, &o.status);
    }
    o.error.map_or(Ok(()), Err)
}

/// Read the byte count of a status (not `MPI_STATUS_IGNORE`).
fn status_bytes(status: *const MpiStatus) -> MpiResult<usize> {
    if status.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            "the status is NULL (MPI_STATUS_IGNORE cannot be queried)",
        ));
    }
    // SAFETY: non-null, the caller's status.
    Ok(unsafe { status.read() }.bytes() as usize)
}

/// Store a count, `MPI_UNDEFINED` when there is none or it does not fit an int.
fn put_count(out: *mut c_int, n: Option<usize>) -> MpiResult<()> {
    let n = n
        .and_then(|n| c_int::try_from(n).ok())
        .unwrap_or(MPI_UNDEFINED);
    // SAFETY: the caller's int.
    unsafe { put(out, n, "count") }
}

/// `MPI_Get_count`: whole instances of the datatype received (MPI_UNDEFINED when not a
/// whole number).
#[export]
pub unsafe extern "C" fn MPI_Get_count(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut c_int,
) -> c_int {
    call("MPI_Get_count", MPI_COMM_WORLD, || {
        let bytes = status_bytes(status)?;
        let size = Ty::lookup(datatype)?.size();
        let n = match size {
            0 => (bytes == 0).then_some(0),
            s => (bytes % s == 0).then_some(bytes / s),
        };
        put_count(count, n)
    })
}

/// `MPI_Get_elements`: basic elements received (counts the elements of a partly
/// received instance of a derived datatype too).
#[export]
pub unsafe extern "C" fn MPI_Get_elements(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut c_int,
) -> c_int {
    call("MPI_Get_elements", MPI_COMM_WORLD, || {
        let bytes = status_bytes(status)?;
        let n = Ty::lookup(datatype)?.elements(bytes)?;
        put_count(count, n)
    })
}

/// One half of an `MPI_Isendrecv`: running in the PML, or its outcome.
#[derive(Debug)]
enum Half {
    Running(raw::RawRequest),
    Done(rmca::Result<rmca::Status>),
    /// The outcome was handed on.
    Spent,
}

impl Half {
    /// Test a running half once.
    fn poll(&mut self) {
        if let Half::Running(_) = self {
            let Half::Running(r) = std::mem::replace(self, Half::Spent) else {
                unreachable!("matched above")
            };
            *self = match r.test() {
                raw::Polled::Pending(r) => Half::Running(r),
                raw::Polled::Done(res) => Half::Done(res),
            };
        }
    }

    fn take(&mut self) -> rmca::Result<rmca::Status> {
        match std::mem::replace(self, Half::Spent) {
            Half::Done(res) => res,
            _ => Err(rmca::Error::InvalidArgument(
                "internal: an exchange's half taken before it completed".into(),
            )),
        }
    }
}

/// `MPI_Isendrecv`'s operation: a send and a receive, complete when both are; its status is
/// the receive's (a failed send's error when the receive succeeded). `_keep` is the
/// library's copy of the data sent (packed, or `MPI_Isendrecv_replace`'s copy), read until
/// the send completed.
#[derive(Debug)]
struct Exchange {
    send: Half,
    recv: Half,
    _keep: Vec<u8>,
}

impl raw::CustomOp for Exchange {
    fn poll(&mut self) -> Option<rmca::Result<rmca::Status>> {
        self.send.poll();
        self.recv.poll();
        if matches!(self.send, Half::Running(_)) || matches!(self.recv, Half::Running(_)) {
            return None;
        }
        let sent = self.send.take();
        let received = self.recv.take();
        Some(match (sent, received) {
            (Err(e), Ok(_)) => Err(e),
            (_, received) => received,
        })
    }

    fn cancel(&mut self) -> rmca::Result<bool> {
        match &mut self.recv {
            Half::Running(r) => r.cancel(),
            _ => Ok(false),
        }
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// Start both halves of an exchange; its request handle. `send` holds the data sent
/// (`keep`: the library's copy of it, if any), `recv` where the reply lands.
///
/// # Safety
/// The contract of `MPI_Isendrecv`: the program's buffers are left alone until the request
/// completed.
unsafe fn start_exchange(
    c: &rmca::Communicator,
    comm: Handle,
    send: (SendData, c_int, c_int),
    mut recv: super::RecvData,
    (src, recvtag): (c_int, c_int),
) -> MpiResult<Handle> {
    let (data, to, sendtag) = send;
    let to = dest(to, c.size())?;
    let sendtag = send_tag(sendtag)?;
    let src = source(src, c.size())?;
    let recvtag = recv_tag(recvtag)?;
    let (sp, sl) = data.span();
    let (rp, rl) = recv.span();
    no_overlap(sp, sl, rp, rl, "MPI_Isendrecv")?;
    let recv_half = if src == rmca::Src::Null {
        Half::Done(Ok(rmca::Status::PROC_NULL))
    } else {
        // SAFETY: the caller's contract (a staged buffer is the library's, kept with the
        // request until completion; its heap allocation does not move with `recv`).
        let at = unsafe { recv.bytes_mut() }.as_mut_ptr();
        // SAFETY: as above.
        Half::Running(unsafe { raw::irecv(c, at, rl, src, recvtag)? })
    };
    let send_half = match to {
        None => Half::Done(Ok(rmca::Status::PROC_NULL)),
        // SAFETY: the caller's contract; a packed copy is kept by the operation.
        Some(to) => {
            Half::Running(unsafe { raw::isend(c, sp.cast(), sl, to, sendtag, SendMode::Standard)? })
        }
    };
    let keep = match data {
        SendData::Packed(v) => v,
        SendData::Direct(..) => Vec::new(),
    };
    let op = Exchange {
        send: send_half,
        recv: recv_half,
        _keep: keep,
    };
    let r = raw::custom(c, Box::new(op));
    state::with(|s| {
        let h = s.add_request(ReqEntry::new(comm, ReqState::Active(r)))?;
        if recv.is_staged() {
            s.stage(h, Staged::Recv(recv));
        }
        Ok(h)
    })
}

/// `MPI_Isendrecv`'s body, for counts of any width.
///
/// # Safety
/// `MPI_Isendrecv`'s contract.
unsafe fn isendrecv(
    (sendbuf, sendcount, sendtype, to, sendtag): SendHalf,
    (recvbuf, recvcount, recvtype, src, recvtag): RecvHalf,
    comm: Handle,
    request: *mut Handle,
) -> MpiResult<()> {
    if request.is_null() {
        return Err(super::null_argument("request"));
    }
    let c = super::communicator(comm)?;
    // SAFETY: MPI_Isendrecv's contract: `sendbuf` holds `sendcount` elements.
    let send = unsafe { send_data_c(sendbuf, sendcount, sendtype, "send")? };
    let recv = recv_data_c(recvbuf, recvcount, recvtype, "receive")?;
    // SAFETY: MPI_Isendrecv's contract.
    let h = unsafe { start_exchange(&c, comm, (send, to, sendtag), recv, (src, recvtag))? };
    // SAFETY: the caller's request handle (non-null, checked).
    unsafe { put(request, h, "request") }
}

/// `MPI_Isendrecv_replace`'s body, for a count of any width: the data is copied out first,
/// the reply lands in `buf`.
///
/// # Safety
/// `MPI_Isendrecv_replace`'s contract.
unsafe fn isendrecv_replace(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: Handle,
    (to, sendtag, src, recvtag): (c_int, c_int, c_int, c_int),
    comm: Handle,
    request: *mut Handle,
) -> MpiResult<()> {
    if request.is_null() {
        return Err(super::null_argument("request"));
    }
    let c = super::communicator(comm)?;
    // SAFETY: MPI_Isendrecv_replace's contract: `buf` holds `count` elements now.
    let copy = unsafe {
        send_data_c(buf, count, datatype, "message")?
            .bytes()
            .to_vec()
    };
    let recv = recv_data_c(buf, count, datatype, "message")?;
    let send = (SendData::Packed(copy), to, sendtag);
    // SAFETY: MPI_Isendrecv_replace's contract; the data sent is the library's copy.
    let h = unsafe { start_exchange(&c, comm, send, recv, (src, recvtag))? };
    // SAFETY: the caller's request handle (non-null, checked).
    unsafe { put(request, h, "request") }
}

/// `MPI_Isendrecv`: a send and a receive under one request.
#[export]
pub unsafe extern "C" fn MPI_Isendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    to: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    src: c_int,
    recvtag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Isendrecv", comm, || {
        let send = (sendbuf, sendcount.into(), sendtype, to, sendtag);
        let recv = (recvbuf, recvcount.into(), recvtype, src, recvtag);
        // SAFETY: MPI_Isendrecv's contract.
        unsafe { isendrecv(send, recv, comm, request) }
    })
}

/// `MPI_Isendrecv_c`.
#[export]
pub unsafe extern "C" fn MPI_Isendrecv_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: Handle,
    to: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: Handle,
    src: c_int,
    recvtag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Isendrecv_c", comm, || {
        let send = (sendbuf, sendcount, sendtype, to, sendtag);
        let recv = (recvbuf, recvcount, recvtype, src, recvtag);
        // SAFETY: MPI_Isendrecv_c's contract.
        unsafe { isendrecv(send, recv, comm, request) }
    })
}

/// `MPI_Isendrecv_replace`: the message sent is a copy taken now, the reply lands in `buf`.
#[export]
pub unsafe extern "C" fn MPI_Isendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    to: c_int,
    sendtag: c_int,
    src: c_int,
    recvtag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Isendrecv_replace", comm, || {
        let peers = (to, sendtag, src, recvtag);
        // SAFETY: MPI_Isendrecv_replace's contract.
        unsafe { isendrecv_replace(buf, count.into(), datatype, peers, comm, request) }
    })
}

/// `MPI_Isendrecv_replace_c`.
#[export]
pub unsafe extern "C" fn MPI_Isendrecv_replace_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: Handle,
    to: c_int,
    sendtag: c_int,
    src: c_int,
    recvtag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Isendrecv_replace_c", comm, || {
        let peers = (to, sendtag, src, recvtag);
        // SAFETY: MPI_Isendrecv_replace_c's contract.
        unsafe { isendrecv_replace(buf, count, datatype, peers, comm, request) }
    })
}
