//! The collectives rmca provides, on the predefined datatypes and operations.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};

use super::op::{reduce, reducer, Coll, Reducer};
use super::rooted::{self, Gather, Scatter};
use super::types::Ty;
use super::{
    call, communicator, no_overlap, recv_data, recv_data_n, send_data, send_data_n, RecvData,
    SendData,
};
use crate::abi::*;
use crate::state::{MpiError, MpiResult};
use rmca_mpi_export::export;

pub(crate) fn in_place(p: *const c_void) -> bool {
    p as usize == MPI_IN_PLACE
}

/// A root rank of `size`.
pub(crate) fn root_of(root: c_int, size: usize) -> MpiResult<usize> {
    usize::try_from(root)
        .ok()
        .filter(|&r| r < size)
        .ok_or_else(|| {
            MpiError::new(
                MPI_ERR_ROOT,
                format!(
                    "root {root} is invalid: the communicator has ranks 0..{}",
                    size.saturating_sub(1)
                ),
            )
        })
}

/// Refuse overlapping send and receive data.
pub(crate) fn apart(send: &SendData, recv: &RecvData, fname: &str) -> MpiResult<()> {
    let ((a, al), (b, bl)) = (send.span(), recv.span());
    no_overlap(a, al, b, bl, fname)
}

/// `MPI_Barrier`.
#[export]
pub unsafe extern "C" fn MPI_Barrier(comm: Handle) -> c_int {
    call("MPI_Barrier", comm, || Ok(communicator(comm)?.barrier()?))
}

/// `MPI_Bcast`.
#[export]
pub unsafe extern "C" fn MPI_Bcast(
    buffer: *mut c_void,
    count: c_int,
    dt: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Bcast", comm, || {
        let c = communicator(comm)?;
        let mut data = recv_data(buffer, count, dt, "broadcast")?;
        let root = root_of(root, c.size())?;
        let me = c.rank();
        // SAFETY: MPI_Bcast's contract: `buffer` holds `count` elements for the call.
        unsafe {
            if me == root {
                data.load()?;
            }
            c.bcast(data.bytes_mut(), root)?;
            if me != root {
                data.finish(data.len());
            }
        }
        Ok(())
    })
}

/// Where the data of a reduction is: packed elements, or (a user operation) the program's
/// own layout, one element per extent.
///
/// # Safety
/// `buf` holds `count` elements of `ty` (the reduction's contract).
pub(crate) unsafe fn reduce_send(
    r: &Reducer,
    buf: *const c_void,
    count: usize,
    ty: &Ty,
) -> MpiResult<SendData> {
    if r.raw_layout() {
        let len = raw_len(buf, count, ty, "send")?;
        return Ok(SendData::Direct(buf.cast(), len));
    }
    // SAFETY: the caller's contract.
    unsafe { send_data_n(buf, count, ty, "send") }
}

/// The receive side of [`reduce_send`].
pub(crate) fn reduce_recv(
    r: &Reducer,
    buf: *mut c_void,
    count: usize,
    ty: &Ty,
) -> MpiResult<RecvData> {
    if r.raw_layout() {
        let len = raw_len(buf, count, ty, "receive")?;
        return Ok(RecvData::direct(buf.cast(), len));
    }
    recv_data_n(buf, count, ty, "receive")
}

fn raw_len(buf: *const c_void, count: usize, ty: &Ty, what: &str) -> MpiResult<usize> {
    let len = ty
        .raw_extent()?
        .checked_mul(count)
        .ok_or_else(|| MpiError::new(MPI_ERR_COUNT, format!("{what} count {count} overflows")))?;
    if len > 0 && buf.is_null() {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            format!("{what} buffer is NULL with {count} elements to reduce"),
        ));
    }
    Ok(len)
}

/// The input of a reduction: sendbuf's data, or (`MPI_IN_PLACE`) a copy of recvbuf's.
///
/// # Safety
/// The buffers hold `count` elements of `ty` (the reduction's contract).
pub(crate) unsafe fn reduce_input(
    r: &Reducer,
    sendbuf: *const c_void,
    recv: &mut RecvData,
    count: usize,
    ty: &Ty,
    fname: &str,
) -> MpiResult<Vec<u8>> {
    // SAFETY: the caller's contract.
    unsafe {
        if in_place(sendbuf) {
            recv.load()?;
            return Ok(recv.bytes_mut().to_vec());
        }
        let send = reduce_send(r, sendbuf, count, ty)?;
        apart(&send, recv, fname)?;
        Ok(send.bytes().to_vec())
    }
}

/// `MPI_Allreduce` (`MPI_IN_PLACE` as sendbuf: the input is in recvbuf).
#[export]
pub unsafe extern "C" fn MPI_Allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Allreduce", comm, || {
        let c = communicator(comm)?;
        let n = super::count(count, "count")?;
        let ty = Ty::for_use(dt)?;
        let r = reducer(op, dt, &ty)?;
        let mut recv = reduce_recv(&r, recvbuf, n, &ty)?;
        // SAFETY: MPI_Allreduce's contract: both buffers hold `count` elements for the call.
        unsafe {
            let send = reduce_input(&r, sendbuf, &mut recv, n, &ty, "MPI_Allreduce")?;
            reduce(&c, Coll::Allreduce, &send, Some(recv.bytes_mut()), r)?;
            recv.finish(recv.len());
        }
        Ok(())
    })
}

/// `MPI_Reduce` (`MPI_IN_PLACE` as the root's sendbuf: its input is in recvbuf).
#[export]
pub unsafe extern "C" fn MPI_Reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: Handle,
    op: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Reduce", comm, || {
        let c = communicator(comm)?;
        let root = root_of(root, c.size())?;
        let n = super::count(count, "count")?;
        let ty = Ty::for_use(dt)?;
        let r = reducer(op, dt, &ty)?;
        if c.rank() == root {
            let mut recv = reduce_recv(&r, recvbuf, n, &ty)?;
            // SAFETY: MPI_Reduce's contract: the root's buffers hold `count` elements.
            unsafe {
                let send = reduce_input(&r, sendbuf, &mut recv, n, &ty, "MPI_Reduce")?;
                reduce(&c, Coll::Reduce(root), &send, Some(recv.bytes_mut()), r)?;
                recv.finish(recv.len());
            }
        } else {
            if in_place(sendbuf) {
                return Err(MpiError::new(
                    MPI_ERR_BUFFER,
                    "MPI_IN_PLACE is only valid as the root's sendbuf of MPI_Reduce",
                ));
            }
            // SAFETY: MPI_Reduce's contract: sendbuf holds `count` elements.
            let send = unsafe { reduce_send(&r, sendbuf, n, &ty)? };
            // SAFETY: as above.
            reduce(&c, Coll::Reduce(root), unsafe { send.bytes() }, None, r)?;
        }
        Ok(())
    })
}

pub(crate) fn same_block(send: usize, recv: usize, fname: &str) -> MpiResult<()> {
    if send != recv {
        return Err(MpiError::new(
            MPI_ERR_COUNT,
            format!("{fname}: each process sends {send} B but each receive block holds {recv} B (type signatures must match)"),
        ));
    }
    Ok(())
}

/// `blocks` blocks of `count` elements of `dt` (a checked count and a committed type).
pub(crate) fn blocks_of(
    count: c_int,
    dt: Handle,
    blocks: usize,
    what: &str,
) -> MpiResult<(Ty, usize, usize)> {
    let n = super::count(count, &format!("{what} count"))?;
    let ty = Ty::for_use(dt)?;
    let total = n.checked_mul(blocks).ok_or_else(|| {
        MpiError::new(
            MPI_ERR_COUNT,
            format!("{what} count {n} x {blocks} ranks overflows"),
        )
    })?;
    let block = ty.packed_len(n)?;
    Ok((ty, total, block))
}

/// `MPI_Gather`.
#[export]
pub unsafe extern "C" fn MPI_Gather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Gather", comm, || {
        let c = communicator(comm)?;
        // SAFETY: MPI_Gather's contract (the plan's).
        let (root, plan) = unsafe {
            rooted::gather(
                "MPI_Gather",
                &c,
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                recvcount,
                recvtype,
                root,
            )?
        };
        // SAFETY: as above; the buffers are used only during the call.
        unsafe {
            match plan {
                Gather::Leaf(send) => c.gather(send.bytes(), None, root)?,
                Gather::Root { mut recv, own } => {
                    c.gather(own.bytes(), Some(recv.bytes_mut()), root)?;
                    recv.finish(recv.len());
                }
            }
        }
        Ok(())
    })
}

/// `MPI_Scatter`.
#[export]
pub unsafe extern "C" fn MPI_Scatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Scatter", comm, || {
        let c = communicator(comm)?;
        // SAFETY: MPI_Scatter's contract (the plan's).
        let (root, plan) = unsafe {
            rooted::scatter(
                "MPI_Scatter",
                &c,
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                recvcount,
                recvtype,
                root,
            )?
        };
        // SAFETY: as above; the buffers are used only during the call.
        unsafe {
            match plan {
                Scatter::Leaf(mut recv) => {
                    c.scatter(None, recv.bytes_mut(), root)?;
                    recv.finish(recv.len());
                }
                // The root's block stays where it is: it lands in scratch.
                Scatter::Root {
                    send,
                    own: None,
                    block,
                } => c.scatter(Some(send.bytes()), &mut vec![0u8; block], root)?,
                Scatter::Root {
                    send,
                    own: Some(mut recv),
                    ..
                } => {
                    c.scatter(Some(send.bytes()), recv.bytes_mut(), root)?;
                    recv.finish(recv.len());
                }
            }
        }
        Ok(())
    })
}

/// `MPI_Allgather`.
#[export]
pub unsafe extern "C" fn MPI_Allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Allgather", comm, || {
        let c = communicator(comm)?;
        let (n, me) = (c.size(), c.rank());
        let (rty, total, rb) = blocks_of(recvcount, recvtype, n, "receive")?;
        let mut recv = recv_data_n(recvbuf, total, &rty, "receive")?;
        // SAFETY: MPI_Allgather's contract: recvbuf holds size x recvcount elements,
        // sendbuf `sendcount`.
        unsafe {
            if in_place(sendbuf) {
                recv.load()?;
                let all = recv.bytes_mut();
                let own = all[me * rb..(me + 1) * rb].to_vec();
                c.allgather(&own, all)?;
            } else {
                let send = send_data(sendbuf, sendcount, sendtype, "send")?;
                same_block(send.len(), rb, "MPI_Allgather")?;
                apart(&send, &recv, "MPI_Allgather")?;
                c.allgather(send.bytes(), recv.bytes_mut())?;
            }
            recv.finish(recv.len());
        }
        Ok(())
    })
}

/// `MPI_Alltoall`.
#[export]
pub unsafe extern "C" fn MPI_Alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Alltoall", comm, || {
        let c = communicator(comm)?;
        let n = c.size();
        let (rty, total, rb) = blocks_of(recvcount, recvtype, n, "receive")?;
        let mut recv = recv_data_n(recvbuf, total, &rty, "receive")?;
        // SAFETY: MPI_Alltoall's contract: both buffers hold size x count elements.
        unsafe {
            if in_place(sendbuf) {
                recv.load()?;
                let send = recv.bytes_mut().to_vec();
                c.alltoall(&send, recv.bytes_mut())?;
            } else {
                let (sty, stotal, sb) = blocks_of(sendcount, sendtype, n, "send")?;
                same_block(sb, rb, "MPI_Alltoall")?;
                let send = send_data_n(sendbuf, stotal, &sty, "send")?;
                apart(&send, &recv, "MPI_Alltoall")?;
                c.alltoall(send.bytes(), recv.bytes_mut())?;
            }
            recv.finish(recv.len());
        }
        Ok(())
    })
}
