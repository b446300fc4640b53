//! The non-blocking collectives: `MPI_Ibarrier`, `MPI_Ibcast`, `MPI_Ireduce`,
//! `MPI_Iallreduce`, `MPI_Igather`, `MPI_Iscatter`, `MPI_Iallgather` and `MPI_Ialltoall`, over
//! rmca's own non-blocking collectives ([`rmca::raw`]'s collective requests, the schedules
//! and executor of the blocking ones).
//!
//! Their requests are ordinary request handles: every completion call takes them, mixed with
//! point-to-point requests, and `MPI_Request_free` lets one complete in the background.
//! `MPI_IN_PLACE` is taken where MPI defines it; derived datatypes are packed into (or
//! received in) library memory and unpacked when the request completes, as for `MPI_Irecv`.
//! The v-forms (`MPI_Igatherv` ...) are not provided: rmca has no non-blocking v-collectives.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};

use rmca::raw::{self, RawRequest};

use super::coll::{apart, blocks_of, in_place, reduce_recv, reduce_send, root_of, same_block};
use super::op::{raw_reduction, reducer};
use super::rooted::{self, Gather, Scatter};
use super::types::Ty;
use super::{call, communicator, put, recv_data, recv_data_n, send_data, send_data_n};
use super::{RecvData, SendData, Staged};
use crate::abi::*;
use crate::state::{self, MpiError, MpiResult, ReqEntry, ReqState};
use rmca_mpi_export::export;

/// Library-owned memory of a non-blocking collective, kept until it completes: the copy of
/// its input it reads (packed, or taken from the receive buffer for `MPI_IN_PLACE`), scratch
/// it writes, and the staged receive unpacked into the program's buffer at completion.
pub struct CollStaged {
    /// The input copy and the scratch: memory the collective's views point into, only held.
    _owned: (Option<SendData>, Vec<u8>),
    recv: Option<RecvData>,
}

impl CollStaged {
    /// Unpack the staged receive into the program's buffer.
    ///
    /// # Safety
    /// The collective completed; the program's receive buffer is valid and not otherwise
    /// accessed during the call.
    pub(crate) unsafe fn finish(self) {
        if let Some(r) = &self.recv {
            // SAFETY: the caller's contract.
            unsafe { r.finish(r.len()) };
        }
    }

    /// Does completing it write the program's buffer?
    pub(crate) fn unpacks(&self) -> bool {
        self.recv.as_ref().is_some_and(RecvData::is_staged)
    }
}

/// What a started collective leaves to keep: nothing when the program's buffers are used in
/// place (so `MPI_Waitall`'s fast path stays open).
fn staged(send: Option<SendData>, scratch: Vec<u8>, recv: Option<RecvData>) -> Option<Staged> {
    let send = send.filter(|s| matches!(s, SendData::Packed(_)));
    let recv = recv.filter(RecvData::is_staged);
    if send.is_none() && scratch.is_empty() && recv.is_none() {
        return None;
    }
    Some(Staged::Coll(Box::new(CollStaged {
        _owned: (send, scratch),
        recv,
    })))
}

/// Start a collective on `comm` with `start` and store its request at `request`.
fn start(
    comm: Handle,
    request: *mut Handle,
    start: impl FnOnce(&rmca::Communicator) -> MpiResult<(RawRequest, Option<Staged>)>,
) -> MpiResult<()> {
    if request.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "the request argument is NULL"));
    }
    let c = communicator(comm)?;
    let (r, keep) = start(&c)?;
    let h = state::with(|s| {
        let h = s.add_request(ReqEntry::new(comm, ReqState::Active(r)))?;
        if let Some(keep) = keep {
            s.stage(h, keep);
        }
        Ok(h)
    })?;
    // SAFETY: non-null (checked above), the caller's handle.
    unsafe { put(request, h, "request") }
}

/// The address of the bytes of `r` (received in place or staged).
fn recv_ptr(r: &mut RecvData) -> *mut u8 {
    // SAFETY: only the address is taken; the collective writes there until completion, and
    // a staged buffer's heap block does not move when `r` does.
    unsafe { r.bytes_mut() }.as_mut_ptr()
}

/// `MPI_Ibarrier`.
#[export]
pub unsafe extern "C" fn MPI_Ibarrier(comm: Handle, request: *mut Handle) -> c_int {
    call("MPI_Ibarrier", comm, || {
        start(comm, request, |c| Ok((raw::ibarrier(c)?, None)))
    })
}

/// `MPI_Ibcast`.
#[export]
pub unsafe extern "C" fn MPI_Ibcast(
    buffer: *mut c_void,
    count: c_int,
    dt: Handle,
    root: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Ibcast", comm, || {
        start(comm, request, |c| {
            let root = root_of(root, c.size())?;
            if c.rank() == root {
                // The root's buffer is only read: packed (if need be) once, never unpacked.
                // SAFETY: MPI_Ibcast's contract: `buffer` holds `count` elements until
                // completion.
                let mut send = unsafe { send_data(buffer, count, dt, "broadcast")? };
                let (at, len) = match &mut send {
                    // The program's buffer (`void *` in C): the root's schedule only reads it.
                    SendData::Direct(p, len) => (p.cast_mut(), *len),
                    SendData::Packed(v) => (v.as_mut_ptr(), v.len()),
                };
                // SAFETY: as above; a packed copy moves into the request's staged data.
                let r = unsafe { raw::ibcast(c, at, len, root)? };
                return Ok((r, staged(Some(send), Vec::new(), None)));
            }
            let mut data = recv_data(buffer, count, dt, "broadcast")?;
            let len = data.len();
            // SAFETY: MPI_Ibcast's contract: `buffer` holds `count` elements until completion.
            let r = unsafe { raw::ibcast(c, recv_ptr(&mut data), len, root)? };
            Ok((r, staged(None, Vec::new(), Some(data))))
        })
    })
}

/// Start a reduction (`root`: `MPI_Ireduce`'s, else `MPI_Iallreduce`).
#[allow(clippy::too_many_arguments)]
fn ireduce(
    fname: &str,
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: Handle,
    op: Handle,
    root: Option<c_int>,
) -> MpiResult<(RawRequest, Option<Staged>)> {
    let root = root.map(|r| root_of(r, c.size())).transpose()?;
    let n = super::count(count, "count")?;
    let ty = Ty::for_use(dt)?;
    let red = reducer(op, dt, &ty)?;
    let bytes_op = raw_reduction(red)?;
    if root.is_some_and(|r| r != c.rank()) {
        if in_place(sendbuf) {
            return Err(MpiError::new(
                MPI_ERR_BUFFER,
                "MPI_IN_PLACE is only valid as the root's sendbuf of MPI_Ireduce",
            ));
        }
        // SAFETY: MPI_Ireduce's contract: sendbuf holds `count` elements until completion.
        let send = unsafe { reduce_send(&red, sendbuf, n, &ty)? };
        let (at, len) = send.span();
        let root = root.expect("checked above");
        // SAFETY: as above; the packed copy moves into the request's staged data.
        let r = unsafe { raw::ireduce(c, at.cast(), std::ptr::null_mut(), len, bytes_op, root)? };
        return Ok((r, staged(Some(send), Vec::new(), None)));
    }
    let mut recv = reduce_recv(&red, recvbuf, n, &ty)?;
    // SAFETY: MPI's contract: both buffers hold `count` elements until completion.
    let send = unsafe {
        if in_place(sendbuf) {
            // The input is what recvbuf holds now; the collective reads a copy of it.
            recv.load()?;
            SendData::Packed(recv.bytes_mut().to_vec())
        } else {
            let send = reduce_send(&red, sendbuf, n, &ty)?;
            apart(&send, &recv, fname)?;
            send
        }
    };
    let (at, len) = send.span();
    same_block(len, recv.len(), fname)?;
    let rp = recv_ptr(&mut recv);
    // SAFETY: as above; library copies move into the request's staged data.
    let r = unsafe {
        match root {
            Some(root) => raw::ireduce(c, at.cast(), rp, len, bytes_op, root)?,
            None => raw::iallreduce(c, at.cast(), rp, len, bytes_op)?,
        }
    };
    Ok((r, staged(Some(send), Vec::new(), Some(recv))))
}

/// `MPI_Ireduce` (`MPI_IN_PLACE` as the root's sendbuf: its input is in recvbuf).
#[export]
pub unsafe extern "C" fn MPI_Ireduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: Handle,
    op: Handle,
    root: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Ireduce", comm, || {
        start(comm, request, |c| {
            ireduce(
                "MPI_Ireduce",
                c,
                sendbuf,
                recvbuf,
                count,
                dt,
                op,
                Some(root),
            )
        })
    })
}

/// `MPI_Iallreduce` (`MPI_IN_PLACE` as sendbuf: the input is in recvbuf).
#[export]
pub unsafe extern "C" fn MPI_Iallreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: Handle,
    op: Handle,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Iallreduce", comm, || {
        start(comm, request, |c| {
            ireduce("MPI_Iallreduce", c, sendbuf, recvbuf, count, dt, op, None)
        })
    })
}

/// `MPI_Igather` (`MPI_IN_PLACE` as the root's sendbuf: its block is in place).
#[export]
pub unsafe extern "C" fn MPI_Igather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Igather", comm, || {
        start(comm, request, |c| {
            // SAFETY: MPI_Igather's contract (the plan's), until completion for the root's
            // recvbuf; the blocks sent are read when the collective starts.
            unsafe {
                let (root, plan) = rooted::gather(
                    "MPI_Igather",
                    c,
                    sendbuf,
                    sendcount,
                    sendtype,
                    recvbuf,
                    recvcount,
                    recvtype,
                    root,
                )?;
                match plan {
                    Gather::Leaf(send) => {
                        let (at, len) = send.span();
                        let r = raw::igather(c, at.cast(), len, std::ptr::null_mut(), root)?;
                        Ok((r, None))
                    }
                    Gather::Root { mut recv, own } => {
                        let (at, len) = own.span();
                        let r = raw::igather(c, at, len, recv_ptr(&mut recv), root)?;
                        Ok((r, staged(None, Vec::new(), Some(recv))))
                    }
                }
            }
        })
    })
}

/// `MPI_Iscatter` (`MPI_IN_PLACE` as the root's recvbuf: its block stays where it is).
#[export]
pub unsafe extern "C" fn MPI_Iscatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Iscatter", comm, || {
        start(comm, request, |c| {
            // SAFETY: MPI_Iscatter's contract (the plan's), until completion for recvbuf;
            // the root's sendbuf is read when the collective starts.
            unsafe {
                let (root, plan) = rooted::scatter(
                    "MPI_Iscatter",
                    c,
                    sendbuf,
                    sendcount,
                    sendtype,
                    recvbuf,
                    recvcount,
                    recvtype,
                    root,
                )?;
                match plan {
                    Scatter::Leaf(mut recv) => {
                        let len = recv.len();
                        let at = recv_ptr(&mut recv);
                        let r = raw::iscatter(c, std::ptr::null(), at, len, root)?;
                        Ok((r, staged(None, Vec::new(), Some(recv))))
                    }
                    // The root's own block lands in scratch the request keeps.
                    Scatter::Root {
                        send,
                        own: None,
                        block,
                    } => {
                        let mut own = vec![0u8; block];
                        let at = send.span().0.cast();
                        let r = raw::iscatter(c, at, own.as_mut_ptr(), block, root)?;
                        Ok((r, staged(None, own, None)))
                    }
                    Scatter::Root {
                        send,
                        own: Some(mut recv),
                        block,
                    } => {
                        let at = send.span().0.cast();
                        let r = raw::iscatter(c, at, recv_ptr(&mut recv), block, root)?;
                        Ok((r, staged(None, Vec::new(), Some(recv))))
                    }
                }
            }
        })
    })
}

/// `MPI_Iallgather` (`MPI_IN_PLACE` as sendbuf: each block is in place in recvbuf).
#[export]
pub unsafe extern "C" fn MPI_Iallgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Iallgather", comm, || {
        start(comm, request, |c| {
            let (n, me) = (c.size(), c.rank());
            let (rty, total, rb) = blocks_of(recvcount, recvtype, n, "receive")?;
            let mut recv = recv_data_n(recvbuf, total, &rty, "receive")?;
            // SAFETY: MPI_Iallgather's contract: recvbuf holds size x recvcount elements
            // until completion, sendbuf `sendcount` (read when the collective starts).
            let r = unsafe {
                if in_place(sendbuf) {
                    recv.load()?;
                    let own = recv.bytes_mut()[me * rb..(me + 1) * rb].to_vec();
                    raw::iallgather(c, own.as_ptr(), rb, recv_ptr(&mut recv))?
                } else {
                    let send = send_data(sendbuf, sendcount, sendtype, "send")?;
                    same_block(send.len(), rb, "MPI_Iallgather")?;
                    apart(&send, &recv, "MPI_Iallgather")?;
                    raw::iallgather(c, send.span().0.cast(), rb, recv_ptr(&mut recv))?
                }
            };
            Ok((r, staged(None, Vec::new(), Some(recv))))
        })
    })
}

/// `MPI_Ialltoall` (`MPI_IN_PLACE` as sendbuf: the data to send is in recvbuf).
#[export]
pub unsafe extern "C" fn MPI_Ialltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Ialltoall", comm, || {
        start(comm, request, |c| {
            let n = c.size();
            let (rty, total, rb) = blocks_of(recvcount, recvtype, n, "receive")?;
            let mut recv = recv_data_n(recvbuf, total, &rty, "receive")?;
            // SAFETY: MPI_Ialltoall's contract: both buffers hold size x count elements until
            // completion.
            let send = unsafe {
                if in_place(sendbuf) {
                    // The collective reads a copy of what recvbuf holds now.
                    recv.load()?;
                    SendData::Packed(recv.bytes_mut().to_vec())
                } else {
                    let (sty, stotal, sb) = blocks_of(sendcount, sendtype, n, "send")?;
                    same_block(sb, rb, "MPI_Ialltoall")?;
                    let send = send_data_n(sendbuf, stotal, &sty, "send")?;
                    apart(&send, &recv, "MPI_Ialltoall")?;
                    send
                }
            };
            let at = send.span().0.cast();
            // SAFETY: as above; library copies move into the request's staged data.
            let r = unsafe { raw::ialltoall(c, at, recv_ptr(&mut recv), rb)? };
            Ok((r, staged(Some(send), Vec::new(), Some(recv))))
        })
    })
}
