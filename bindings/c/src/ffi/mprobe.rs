//! Matched probes: `MPI_Mprobe`, `MPI_Improbe`, `MPI_Mrecv`, `MPI_Imrecv` (and their `_c`
//! forms). A message a matched probe found is out of matching (no other receive or probe
//! takes it) and lives in this module's table under its `MPI_Message` handle until it is
//! received.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};

use rmca::raw;

use super::p2p::put_status;
use super::p2p::{count_c, proc_null_done};
use super::types::Ty;
use super::Staged;
use super::{call, empty_status, outcome, put, recv_data_n, recv_tag, source};
use crate::abi::*;
use crate::state::{self, Confined, MpiError, MpiResult, ReqEntry, ReqState};
use rmca_mpi_export::export;

/// `MPI_MESSAGE_NULL` (the standard ABI's value, as in `mpi.h`).
pub const MPI_MESSAGE_NULL: Handle = 0x128;
/// `MPI_MESSAGE_NO_PROC`: the message of a probe of `MPI_PROC_NULL`.
pub const MPI_MESSAGE_NO_PROC: Handle = 0x129;

/// Handles of matched messages: this plus the index (clear of the other kinds' bases).
const MESSAGE_BASE: Handle = DYNAMIC_BASE * 23;
/// Entries of the message table.
const MAX_MESSAGES: usize = DYNAMIC_BASE;

/// A matched message and the communicator handle it was probed on (its errors go there).
struct Matched {
    comm: Handle,
    message: rmca::Message,
}

/// The matched messages not yet received, by handle less [`MESSAGE_BASE`] (process-wide:
/// see [`Confined`]; a thread may receive a message another one probed).
static MESSAGES: Confined<Vec<Option<Matched>>> = Confined::new("matched messages");

/// Keep `m` (probed on `comm`): its handle.
fn insert(comm: Handle, message: rmca::Message) -> MpiResult<Handle> {
    MESSAGES.with(|t| {
        super::table_insert(
            t,
            Matched { comm, message },
            (MESSAGE_BASE, MAX_MESSAGES),
            "matched messages not yet received",
            "MPI_Mrecv",
        )
    })?
}

/// What a message handle names.
enum Taken {
    /// `MPI_MESSAGE_NO_PROC`: the message of a probe of `MPI_PROC_NULL`.
    NoProc,
    Message(Handle, rmca::Message),
}

/// Take the message `h` out of the table (a receive consumes it).
fn take(h: Handle) -> MpiResult<Taken> {
    if h == MPI_MESSAGE_NO_PROC {
        return Ok(Taken::NoProc);
    }
    let found = match h.checked_sub(MESSAGE_BASE).filter(|&i| i < MAX_MESSAGES) {
        Some(i) => MESSAGES.with(|t| t.get_mut(i).and_then(Option::take))?,
        None => None,
    };
    match found {
        Some(m) => Ok(Taken::Message(m.comm, m.message)),
        None => Err(MpiError::new(
            MPI_ERR_REQUEST,
            format!("invalid message {h:#x}: not one returned by MPI_Mprobe or MPI_Improbe and not yet received (MPI_MESSAGE_NULL is not a message)"),
        )),
    }
}

/// The status of a message probe of `MPI_PROC_NULL`.
fn no_proc_status() -> MpiStatus {
    let mut st = empty_status();
    st.source = MPI_PROC_NULL;
    st
}

/// A matched probe: the message found (its handle and status), or `None`.
fn improbe(
    src: c_int,
    tag: c_int,
    comm: Handle,
    block: bool,
) -> MpiResult<Option<(Handle, MpiStatus)>> {
    let c = super::communicator(comm)?;
    let src = source(src, c.size())?;
    let tag = recv_tag(tag)?;
    if src == rmca::Src::Null {
        return Ok(Some((MPI_MESSAGE_NO_PROC, no_proc_status())));
    }
    let found = if block {
        Some(c.mprobe(src, tag)?)
    } else {
        c.improbe(src, tag)?
    };
    let Some(m) = found else { return Ok(None) };
    let st = super::to_mpi_status(m.status());
    Ok(Some((insert(comm, m)?, st)))
}

/// `MPI_Mprobe`: wait for a message and take it out of matching.
#[export]
pub unsafe extern "C" fn MPI_Mprobe(
    src: c_int,
    tag: c_int,
    comm: Handle,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Mprobe", comm, || {
        if message.is_null() {
            return Err(super::null_argument("message"));
        }
        let (h, st) = improbe(src, tag, comm, true)?.expect("a blocking probe finds one");
        // SAFETY: the caller's message handle (non-null, checked) and status.
        unsafe {
            message.write(h);
            put_status(status, &st);
        }
        Ok(())
    })
}

/// `MPI_Improbe`: take a message out of matching if one is there.
#[export]
pub unsafe extern "C" fn MPI_Improbe(
    src: c_int,
    tag: c_int,
    comm: Handle,
    flag: *mut c_int,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Improbe", comm, || {
        if message.is_null() || flag.is_null() {
            return Err(super::null_argument(if flag.is_null() {
                "flag"
            } else {
                "message"
            }));
        }
        let found = improbe(src, tag, comm, false)?;
        // SAFETY: the caller's flag, message handle (non-null, checked) and status.
        unsafe {
            flag.write(c_int::from(found.is_some()));
            if let Some((h, st)) = found {
                message.write(h);
                put_status(status, &st);
            }
        }
        Ok(())
    })
}

/// The communicator whose error handler a receive of message `h` reports to.
fn comm_of(h: Handle) -> Handle {
    h.checked_sub(MESSAGE_BASE)
        .and_then(|i| {
            MESSAGES
                .with(|t| t.get(i).and_then(|m| m.as_ref().map(|m| m.comm)))
                .ok()
                .flatten()
        })
        .unwrap_or(MPI_COMM_WORLD)
}

/// Read the caller's message handle.
///
/// # Safety
/// `message` is null or the caller's handle.
unsafe fn read_message(message: *mut Handle) -> MpiResult<Handle> {
    if message.is_null() {
        return Err(super::null_argument("message"));
    }
    // SAFETY: non-null, the caller's.
    Ok(unsafe { message.read() })
}

/// `MPI_Mrecv`'s body for a count of any width.
///
/// # Safety
/// `MPI_Mrecv`'s contract.
unsafe fn mrecv(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: Handle,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> MpiResult<()> {
    // SAFETY: the caller's contract.
    let h = unsafe { read_message(message)? };
    let n = count_c(count, "message")?;
    let ty = Ty::for_message(datatype, n)?;
    let mut data = recv_data_n(buf, n, &ty, "message")?;
    let (comm, m) = match take(h)? {
        Taken::NoProc => {
            // SAFETY: the caller's handle and status.
            unsafe {
                message.write(MPI_MESSAGE_NULL);
                put_status(status, &no_proc_status());
            }
            return Ok(());
        }
        Taken::Message(comm, m) => (comm, m),
    };
    // SAFETY: the caller's handle.
    unsafe { message.write(MPI_MESSAGE_NULL) };
    // SAFETY: the receive buffer is the program's for the call (or staged), waited below.
    let (at, len) = unsafe { (data.bytes_mut().as_mut_ptr(), data.len()) };
    // SAFETY: as above.
    let r = unsafe { raw::imrecv(m, at, len) }.map_err(|e| MpiError::from(e).on(comm))?;
    let o = outcome(r.wait());
    // SAFETY: the receive completed; the caller's buffer and status.
    unsafe {
        data.finish(o.status.bytes() as usize);
        put_status(status, &o.status);
    }
    o.error.map_or(Ok(()), |e| Err(e.on(comm)))
}

/// `MPI_Imrecv`'s body for a count of any width.
///
/// # Safety
/// `MPI_Imrecv`'s contract.
unsafe fn imrecv(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: Handle,
    message: *mut Handle,
    request: *mut Handle,
) -> MpiResult<()> {
    // SAFETY: the caller's contract.
    let h = unsafe { read_message(message)? };
    if request.is_null() {
        return Err(super::null_argument("request"));
    }
    let n = count_c(count, "message")?;
    let ty = Ty::for_message(datatype, n)?;
    let mut data = recv_data_n(buf, n, &ty, "message")?;
    let (comm, st) = match take(h)? {
        Taken::NoProc => (MPI_COMM_WORLD, proc_null_done()),
        Taken::Message(comm, m) => {
            // SAFETY: the address only; the PML writes there until completion, and a staged
            // buffer's heap allocation does not move with `data`.
            let (at, len) = unsafe { (data.bytes_mut().as_mut_ptr(), data.len()) };
            // SAFETY: MPI_Imrecv's contract: the buffer is left alone until completion.
            let r = unsafe { raw::imrecv(m, at, len) }.map_err(|e| MpiError::from(e).on(comm))?;
            (comm, ReqState::Active(r))
        }
    };
    let active = matches!(st, ReqState::Active(_));
    let rh = state::with(|s| {
        let rh = s.add_request(ReqEntry::new(comm, st))?;
        if active && data.is_staged() {
            s.stage(rh, Staged::Recv(data));
        }
        Ok(rh)
    })?;
    // SAFETY: the caller's handles (non-null, checked).
    unsafe {
        message.write(MPI_MESSAGE_NULL);
        put(request, rh, "request")
    }
}

/// `MPI_Mrecv`: receive a message taken by a matched probe.
#[export]
pub unsafe extern "C" fn MPI_Mrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> c_int {
    // SAFETY: the caller's handle, if any.
    let comm = if message.is_null() {
        MPI_COMM_WORLD
    } else {
        comm_of(unsafe { message.read() })
    };
    // SAFETY: MPI_Mrecv's contract.
    call("MPI_Mrecv", comm, || unsafe {
        mrecv(buf, MPI_Count::from(count), datatype, message, status)
    })
}

/// `MPI_Mrecv_c`.
#[export]
pub unsafe extern "C" fn MPI_Mrecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: Handle,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> c_int {
    // SAFETY: the caller's handle, if any.
    let comm = if message.is_null() {
        MPI_COMM_WORLD
    } else {
        comm_of(unsafe { message.read() })
    };
    // SAFETY: MPI_Mrecv_c's contract.
    call("MPI_Mrecv_c", comm, || unsafe {
        mrecv(buf, count, datatype, message, status)
    })
}

/// `MPI_Imrecv`: start receiving a message taken by a matched probe.
#[export]
pub unsafe extern "C" fn MPI_Imrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    message: *mut Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the caller's handle, if any.
    let comm = if message.is_null() {
        MPI_COMM_WORLD
    } else {
        comm_of(unsafe { message.read() })
    };
    // SAFETY: MPI_Imrecv's contract.
    call("MPI_Imrecv", comm, || unsafe {
        imrecv(buf, MPI_Count::from(count), datatype, message, request)
    })
}

/// `MPI_Imrecv_c`.
#[export]
pub unsafe extern "C" fn MPI_Imrecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: Handle,
    message: *mut Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the caller's handle, if any.
    let comm = if message.is_null() {
        MPI_COMM_WORLD
    } else {
        comm_of(unsafe { message.read() })
    };
    // SAFETY: MPI_Imrecv_c's contract.
    call("MPI_Imrecv_c", comm, || unsafe {
        imrecv(buf, count, datatype, message, request)
    })
}
