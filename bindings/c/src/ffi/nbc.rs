//! The non-blocking collectives (`MPI_Ibarrier`, `MPI_Ibcast`, `MPI_Ireduce`,
//! `MPI_Iallreduce`, `MPI_Igather`, `MPI_Iscatter`, `MPI_Iallgather`, `MPI_Ialltoall`, the
//! v-forms `MPI_Igatherv`, `MPI_Iscatterv`, `MPI_Iallgatherv`, `MPI_Ialltoallv`,
//! `MPI_Ialltoallw`, the reduce-scatters and the scans), their large-count `_c` forms, and the
//! starters the persistent collectives (`MPI_*_init`, [`super::pcoll`]) run at each
//! `MPI_Start`, over rmca's own non-blocking collectives ([`rmca::raw`]'s collective
//! requests, the schedules and executor of the blocking ones).
//!
//! Their requests are ordinary request handles: every completion call takes them, mixed with
//! point-to-point requests, and `MPI_Request_free` lets one complete in the background.
//! `MPI_IN_PLACE` is taken where MPI defines it; derived datatypes are packed into (or
//! received in) library memory and unpacked when the request completes, as for `MPI_Irecv`.
//! The v-forms always move packed copies of the blocks (as their blocking forms do),
//! unpacked into the program's layout at completion.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};

use rmca::raw::{self, RawRequest};
use rmca::Communicator;

use super::coll::{
    apart, blocks_n, in_place, recv_n, reduce_recv, reduce_send, root_of, same_block, send_n,
    side_type,
};
use super::coll_c::read_types;
use super::op::{raw_reduction, reduction_of};
use super::rooted::{self, Gather, Scatter};
use super::types::Ty;
use super::vcoll::{arrays, count_unless, same_len, Blocks, Int, Large, TypedBlocks, Width};
use super::{call, communicator, put, recv_data_n, send_data_n};
use super::{RecvData, SendData, Staged};
use crate::abi::*;
use crate::state::{self, MpiError, MpiResult, ReqEntry, ReqState};
use rmca_mpi_export::export;

/// What starting a collective gives: its request, and the library memory it keeps.
pub(crate) type Started = (RawRequest, Option<Staged>);

/// Library-owned memory of a non-blocking collective, kept until it completes: the copy of
/// its input it reads (packed, or taken from the receive buffer for `MPI_IN_PLACE`), scratch
/// it reads or writes, the staged receive unpacked into the program's buffer at completion,
/// and (v-collectives) the unpacking of library-received blocks into the program's layout.
pub struct CollStaged {
    /// Memory the collective's views point into, only held.
    _owned: (Option<SendData>, Vec<Vec<u8>>),
    recv: Option<RecvData>,
    then: Option<Box<dyn FnOnce()>>,
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
        if let Some(then) = self.then {
            then();
        }
    }

    /// Does completing it write the program's buffer?
    pub(crate) fn unpacks(&self) -> bool {
        self.recv.as_ref().is_some_and(RecvData::is_staged) || self.then.is_some()
    }
}

/// What a started collective leaves to keep: nothing when the program's buffers are used in
/// place (so `MPI_Waitall`'s fast path stays open).
fn staged(send: Option<SendData>, scratch: Vec<u8>, recv: Option<RecvData>) -> Option<Staged> {
    keep(send, vec![scratch], recv, None)
}

/// [`staged`] with several scratch buffers and an unpacking step run at completion.
pub(crate) fn keep(
    send: Option<SendData>,
    scratch: Vec<Vec<u8>>,
    recv: Option<RecvData>,
    then: Option<Box<dyn FnOnce()>>,
) -> Option<Staged> {
    let send = send.filter(|s| matches!(s, SendData::Packed(_)));
    let scratch: Vec<Vec<u8>> = scratch.into_iter().filter(|v| v.capacity() > 0).collect();
    let recv = recv.filter(RecvData::is_staged);
    if send.is_none() && scratch.is_empty() && recv.is_none() && then.is_none() {
        return None;
    }
    Some(Staged::Coll(Box::new(CollStaged {
        _owned: (send, scratch),
        recv,
        then,
    })))
}

/// Start a collective on `comm` with `start` and store its request at `request`.
fn start(
    comm: Handle,
    request: *mut Handle,
    start: impl FnOnce(&Communicator) -> MpiResult<Started>,
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

/// A copy of what `recv` holds now (an `MPI_IN_PLACE` input).
///
/// # Safety
/// The program's buffer behind `recv` is valid for reads.
unsafe fn snapshot(recv: &mut RecvData) -> MpiResult<SendData> {
    // SAFETY: the caller's contract.
    unsafe {
        recv.load()?;
        Ok(SendData::Packed(recv.bytes_mut().to_vec()))
    }
}

/// Start a barrier.
pub(crate) fn ibarrier(c: &Communicator) -> MpiResult<Started> {
    Ok((raw::ibarrier(c)?, None))
}

/// Start a broadcast of `count` elements.
///
/// # Safety
/// MPI_Ibcast's contract: `buffer` holds `count` elements until completion.
pub(crate) unsafe fn ibcast(
    c: &Communicator,
    buffer: *mut c_void,
    count: usize,
    dt: Handle,
    root: c_int,
) -> MpiResult<Started> {
    let root = root_of(root, c.size())?;
    if c.rank() == root {
        // The root's buffer is only read: packed (if need be) once, never unpacked.
        // SAFETY: the caller's contract.
        let mut send = unsafe { send_n(buffer, count, dt, "broadcast")? };
        let (at, len) = match &mut send {
            // The program's buffer (`void *` in C): the root's schedule only reads it.
            SendData::Direct(p, len) => (p.cast_mut(), *len),
            SendData::Packed(v) => (v.as_mut_ptr(), v.len()),
        };
        // SAFETY: as above; a packed copy moves into the request's staged data.
        let r = unsafe { raw::ibcast(c, at, len, root)? };
        return Ok((r, staged(Some(send), Vec::new(), None)));
    }
    let mut data = recv_n(buffer, count, dt, "broadcast")?;
    let len = data.len();
    // SAFETY: the caller's contract.
    let r = unsafe { raw::ibcast(c, recv_ptr(&mut data), len, root)? };
    Ok((r, staged(None, Vec::new(), Some(data))))
}

/// Which reduction a [`ireduction`] starts.
#[derive(Clone, Copy)]
pub(crate) enum Red {
    Reduce(c_int),
    Allreduce,
    Scan,
    Exscan,
}

/// Start a reduction of `n` elements (`MPI_IN_PLACE` as sendbuf: the input is in recvbuf;
/// for `MPI_Ireduce` only at the root).
///
/// # Safety
/// The collective's contract: the buffers hold `n` elements until completion.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn ireduction(
    fname: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    n: usize,
    dt: Handle,
    op: Handle,
    kind: Red,
) -> MpiResult<Started> {
    let root = match kind {
        Red::Reduce(r) => Some(root_of(r, c.size())?),
        _ => None,
    };
    let (ty, red) = reduction_of(op, dt, n)?;
    let bytes_op = raw_reduction(red)?;
    if let Some(root) = root.filter(|&r| r != c.rank()) {
        if in_place(sendbuf) {
            return Err(MpiError::new(
                MPI_ERR_BUFFER,
                format!("MPI_IN_PLACE is only valid as the root's sendbuf of {fname}"),
            ));
        }
        // SAFETY: the caller's contract.
        let send = unsafe { reduce_send(&red, sendbuf, n, &ty)? };
        let (at, len) = send.span();
        // SAFETY: as above; the packed copy moves into the request's staged data.
        let r = unsafe { raw::ireduce(c, at.cast(), std::ptr::null_mut(), len, bytes_op, root)? };
        return Ok((r, staged(Some(send), Vec::new(), None)));
    }
    let mut recv = reduce_recv(&red, recvbuf, n, &ty)?;
    // SAFETY: the caller's contract.
    let send = unsafe {
        if matches!(kind, Red::Exscan) {
            // Rank 0's result is left as it was: keep it through the staging.
            recv.load()?;
        }
        if in_place(sendbuf) {
            // The input is what recvbuf holds now; the collective reads a copy of it.
            snapshot(&mut recv)?
        } else {
            let send = reduce_send(&red, sendbuf, n, &ty)?;
            apart(&send, &recv, fname)?;
            send
        }
    };
    let (at, len) = send.span();
    same_block(len, recv.len(), fname)?;
    let rp = recv_ptr(&mut recv);
    // SAFETY: the caller's contract; library copies move into the request's staged data.
    let r = unsafe {
        match (kind, root) {
            (_, Some(root)) => raw::ireduce(c, at.cast(), rp, len, bytes_op, root)?,
            (Red::Scan, _) => raw::iscan(c, at.cast(), rp, len, bytes_op, false)?,
            (Red::Exscan, _) => raw::iscan(c, at.cast(), rp, len, bytes_op, true)?,
            _ => raw::iallreduce(c, at.cast(), rp, len, bytes_op)?,
        }
    };
    Ok((r, staged(Some(send), Vec::new(), Some(recv))))
}

/// Start a gather (`MPI_IN_PLACE` as the root's sendbuf: its block is in place).
///
/// # Safety
/// MPI_Igather's contract (the plan's), until completion for the root's recvbuf; the
/// blocks sent are read when the collective starts.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn igather(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: usize,
    recvtype: Handle,
    root: c_int,
) -> MpiResult<Started> {
    // SAFETY: the caller's contract.
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
}

/// Start a scatter (`MPI_IN_PLACE` as the root's recvbuf: its block stays where it is).
///
/// # Safety
/// MPI_Iscatter's contract (the plan's), until completion for recvbuf; the root's sendbuf
/// is read when the collective starts.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn iscatter(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: usize,
    recvtype: Handle,
    root: c_int,
) -> MpiResult<Started> {
    // SAFETY: the caller's contract.
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
}

/// Start an allgather (`MPI_IN_PLACE` as sendbuf: each block is in place in recvbuf).
///
/// # Safety
/// MPI_Iallgather's contract: recvbuf holds size x recvcount elements until completion,
/// sendbuf `sendcount` (read when the collective starts).
pub(crate) unsafe fn iallgather(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: usize,
    recvtype: Handle,
) -> MpiResult<Started> {
    let (n, me) = (c.size(), c.rank());
    let (rty, total, rb) = blocks_n(recvcount, recvtype, n, "receive")?;
    let mut recv = recv_data_n(recvbuf, total, &rty, "receive")?;
    // SAFETY: the caller's contract.
    let r = unsafe {
        if in_place(sendbuf) {
            recv.load()?;
            let own = recv.bytes_mut()[me * rb..(me + 1) * rb].to_vec();
            raw::iallgather(c, own.as_ptr(), rb, recv_ptr(&mut recv))?
        } else {
            let send = send_n(sendbuf, sendcount, sendtype, "send")?;
            same_block(send.len(), rb, "MPI_Iallgather")?;
            apart(&send, &recv, "MPI_Iallgather")?;
            raw::iallgather(c, send.span().0.cast(), rb, recv_ptr(&mut recv))?
        }
    };
    Ok((r, staged(None, Vec::new(), Some(recv))))
}

/// Start an alltoall (`MPI_IN_PLACE` as sendbuf: the data to send is in recvbuf).
///
/// # Safety
/// MPI_Ialltoall's contract: both buffers hold size x count elements until completion.
pub(crate) unsafe fn ialltoall(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: usize,
    recvtype: Handle,
) -> MpiResult<Started> {
    let n = c.size();
    let (rty, total, rb) = blocks_n(recvcount, recvtype, n, "receive")?;
    let mut recv = recv_data_n(recvbuf, total, &rty, "receive")?;
    // SAFETY: the caller's contract.
    let send = unsafe {
        if in_place(sendbuf) {
            // The collective reads a copy of what recvbuf holds now.
            snapshot(&mut recv)?
        } else {
            let (sty, stotal, sb) = blocks_n(sendcount, sendtype, n, "send")?;
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
}

/// The step that unpacks packed `all` into `buf` with `b`'s layout at completion (but block
/// `skip`).
///
/// # Safety
/// `buf` holds every block of `b` when the step runs, and is not otherwise accessed then.
unsafe fn unpack_then(
    b: Blocks,
    all: Vec<u8>,
    buf: *mut c_void,
    ty: Ty,
    skip: Option<usize>,
) -> MpiResult<Box<dyn FnOnce()>> {
    // Addresses are checked now, so that the step cannot fail.
    b.check_addresses(buf, &ty)?;
    Ok(Box::new(move || {
        // SAFETY: the contract of `unpack_then`'s caller, kept until completion (the step
        // runs when the request completes, see `CollStaged::finish`).
        let _ = unsafe { b.unpack(&all, buf, &ty, skip) };
    }))
}

/// Start a gatherv (`rcounts`, `displs`: the root's; `MPI_IN_PLACE` as the root's sendbuf:
/// its block is in place).
///
/// # Safety
/// MPI_Igatherv's contract, until completion.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn igatherv(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    rcounts: &[usize],
    displs: &[isize],
    recvtype: Handle,
    root: usize,
) -> MpiResult<Started> {
    let me = c.rank();
    if me != root {
        // SAFETY: the caller's contract.
        let send = unsafe { send_n(sendbuf, sendcount, sendtype, "send")? };
        let (at, len) = send.span();
        // SAFETY: as above; a packed copy moves into the request's staged data.
        let r = unsafe { raw::igatherv(c, at.cast(), len, std::ptr::null_mut(), &[], root)? };
        return Ok((r, staged(Some(send), Vec::new(), None)));
    }
    let rty = side_type(recvtype, rcounts)?;
    let b = Blocks::new(rcounts, displs, &rty, "receive")?;
    b.check_null(recvbuf, "receive")?;
    // SAFETY: the caller's contract.
    unsafe {
        let own = if in_place(sendbuf) {
            SendData::Packed(b.pack_block(recvbuf, &rty, me)?)
        } else {
            let send = send_n(sendbuf, sendcount, sendtype, "send")?;
            same_len(send.len(), b.packed_counts[me], me, "MPI_Igatherv")?;
            send
        };
        let mut all = vec![0u8; b.total];
        let (at, len) = own.span();
        let r = raw::igatherv(c, at.cast(), len, all.as_mut_ptr(), &b.regions(), root)?;
        let skip = in_place(sendbuf).then_some(me);
        let then = unpack_then(b, all, recvbuf, rty, skip)?;
        Ok((r, keep(Some(own), Vec::new(), None, Some(then))))
    }
}

/// Start a scatterv (`scounts`, `displs`: the root's; `MPI_IN_PLACE` as the root's recvbuf:
/// its block stays in place).
///
/// # Safety
/// MPI_Iscatterv's contract, until completion.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn iscatterv(
    c: &Communicator,
    sendbuf: *const c_void,
    scounts: &[usize],
    displs: &[isize],
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: usize,
    recvtype: Handle,
    root: usize,
) -> MpiResult<Started> {
    let me = c.rank();
    if me != root {
        let mut recv = recv_n(recvbuf, recvcount, recvtype, "receive")?;
        let len = recv.len();
        // SAFETY: the caller's contract.
        let r =
            unsafe { raw::iscatterv(c, std::ptr::null(), &[], recv_ptr(&mut recv), len, root)? };
        return Ok((r, staged(None, Vec::new(), Some(recv))));
    }
    let sty = side_type(sendtype, scounts)?;
    let b = Blocks::new(scounts, displs, &sty, "send")?;
    b.check_null(sendbuf, "send")?;
    // SAFETY: the caller's contract.
    unsafe {
        let packed = b.pack(sendbuf, &sty)?;
        let regions = b.regions();
        if in_place(recvbuf) {
            // The root's block stays where it is: it lands in scratch.
            let mut own = vec![0u8; b.packed_counts[me]];
            let (at, len) = (own.as_mut_ptr(), own.len());
            let r = raw::iscatterv(c, packed.as_ptr(), &regions, at, len, root)?;
            return Ok((r, keep(None, vec![packed, own], None, None)));
        }
        let mut recv = recv_n(recvbuf, recvcount, recvtype, "receive")?;
        same_len(b.packed_counts[me], recv.len(), me, "MPI_Iscatterv")?;
        let len = recv.len();
        let r = raw::iscatterv(c, packed.as_ptr(), &regions, recv_ptr(&mut recv), len, root)?;
        Ok((r, keep(None, vec![packed], Some(recv), None)))
    }
}

/// Start an allgatherv (`MPI_IN_PLACE` as sendbuf: each block is in place).
///
/// # Safety
/// MPI_Iallgatherv's contract, until completion.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn iallgatherv(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    rcounts: &[usize],
    displs: &[isize],
    recvtype: Handle,
) -> MpiResult<Started> {
    let me = c.rank();
    let rty = side_type(recvtype, rcounts)?;
    let b = Blocks::new(rcounts, displs, &rty, "receive")?;
    b.check_null(recvbuf, "receive")?;
    // SAFETY: the caller's contract.
    unsafe {
        let own = if in_place(sendbuf) {
            SendData::Packed(b.pack_block(recvbuf, &rty, me)?)
        } else {
            let send = send_n(sendbuf, sendcount, sendtype, "send")?;
            same_len(send.len(), b.packed_counts[me], me, "MPI_Iallgatherv")?;
            send
        };
        let mut all = vec![0u8; b.total];
        let (at, len) = own.span();
        let r = raw::iallgatherv(c, at.cast(), len, all.as_mut_ptr(), &b.regions())?;
        let skip = in_place(sendbuf).then_some(me);
        let then = unpack_then(b, all, recvbuf, rty, skip)?;
        Ok((r, keep(Some(own), Vec::new(), None, Some(then))))
    }
}

/// Start an alltoallv (the send arrays empty in place: the blocks to send are the receive
/// blocks).
///
/// # Safety
/// MPI_Ialltoallv's contract, until completion.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn ialltoallv(
    c: &Communicator,
    sendbuf: *const c_void,
    scounts: &[usize],
    sdispls: &[isize],
    sendtype: Handle,
    recvbuf: *mut c_void,
    rcounts: &[usize],
    rdispls: &[isize],
    recvtype: Handle,
) -> MpiResult<Started> {
    let rty = side_type(recvtype, rcounts)?;
    let rb = Blocks::new(rcounts, rdispls, &rty, "receive")?;
    rb.check_null(recvbuf, "receive")?;
    // SAFETY: the caller's contract.
    unsafe {
        let (send, sregions) = if in_place(sendbuf) {
            (rb.pack(recvbuf, &rty)?, rb.regions())
        } else {
            let sty = side_type(sendtype, scounts)?;
            let sb = Blocks::new(scounts, sdispls, &sty, "send")?;
            sb.check_null(sendbuf, "send")?;
            (sb.pack(sendbuf, &sty)?, sb.regions())
        };
        let me = c.rank();
        same_len(
            sregions[me].len(),
            rb.packed_counts[me],
            me,
            "MPI_Ialltoallv",
        )?;
        let mut all = vec![0u8; rb.total];
        let rregions = rb.regions();
        let r = raw::ialltoallv(c, send.as_ptr(), &sregions, all.as_mut_ptr(), &rregions)?;
        let then = unpack_then(rb, all, recvbuf, rty, None)?;
        Ok((r, keep(None, vec![send], None, Some(then))))
    }
}

/// Start an alltoallw (the send arrays empty in place).
///
/// # Safety
/// MPI_Ialltoallw's contract, until completion.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn ialltoallw(
    c: &Communicator,
    sendbuf: *const c_void,
    scounts: &[usize],
    sdispls: &[isize],
    stypes: &[Handle],
    recvbuf: *mut c_void,
    rcounts: &[usize],
    rdispls: &[isize],
    rtypes: &[Handle],
) -> MpiResult<Started> {
    let rb = TypedBlocks::new(rcounts, rdispls, rtypes, "receive")?;
    rb.check_null(recvbuf, "receive")?;
    // SAFETY: the caller's contract.
    let (r, send, all) = unsafe {
        let (send, sregions) = if in_place(sendbuf) {
            (rb.pack(recvbuf)?, rb.regions())
        } else {
            let sb = TypedBlocks::new(scounts, sdispls, stypes, "send")?;
            sb.check_null(sendbuf, "send")?;
            (sb.pack(sendbuf)?, sb.regions())
        };
        let me = c.rank();
        same_len(
            sregions[me].len(),
            rb.packed_counts[me],
            me,
            "MPI_Ialltoallw",
        )?;
        let mut all = vec![0u8; rb.total];
        let rregions = rb.regions();
        let r = raw::ialltoallv(c, send.as_ptr(), &sregions, all.as_mut_ptr(), &rregions)?;
        (r, send, all)
    };
    let then: Box<dyn FnOnce()> = Box::new(move || {
        // SAFETY: MPI_Ialltoallw's contract, kept until completion (when this runs).
        unsafe { rb.unpack(&all, recvbuf) }
    });
    Ok((r, keep(None, vec![send], None, Some(then))))
}

/// Start a reduce-scatter: `counts[r]` elements of the reduction to rank r
/// (`MPI_IN_PLACE` as sendbuf: the input is in recvbuf, the result lands at its start).
///
/// # Safety
/// The collective's contract, until completion.
pub(crate) unsafe fn ireduce_scatter(
    fname: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: &[usize],
    dt: Handle,
    op: Handle,
) -> MpiResult<Started> {
    let me = c.rank();
    let total = counts
        .iter()
        .try_fold(0usize, |a, &k| a.checked_add(k))
        .ok_or_else(|| MpiError::new(MPI_ERR_COUNT, "the receive counts overflow"))?;
    let (ty, red) = reduction_of(op, dt, total)?;
    let bytes_op = raw_reduction(red)?;
    // Bytes of one instance in the reduction's layout (packed, or the program's extents).
    let inst = if red.raw_layout() {
        ty.raw_extent()?
    } else {
        ty.size()
    };
    let mut out = reduce_recv(&red, recvbuf, counts[me], &ty)?;
    // SAFETY: the caller's contract.
    let send = unsafe {
        if in_place(sendbuf) {
            let mut whole = reduce_recv(&red, recvbuf, total, &ty)?;
            snapshot(&mut whole)?
        } else {
            let send = reduce_send(&red, sendbuf, total, &ty)?;
            apart(&send, &out, fname)?;
            send
        }
    };
    let bytes: Vec<usize> = counts.iter().map(|&k| k * inst).collect();
    let at = send.span().0.cast();
    // SAFETY: as above; library copies move into the request's staged data.
    let r = unsafe { raw::ireduce_scatter(c, at, recv_ptr(&mut out), &bytes, bytes_op)? };
    Ok((r, staged(Some(send), Vec::new(), Some(out))))
}

/// A collective's start, repeated by each `MPI_Start` of a persistent one.
pub(crate) trait Starter: Fn(&Communicator) -> MpiResult<Started> + 'static {}
impl<F: Fn(&Communicator) -> MpiResult<Started> + 'static> Starter for F {}

// The preparations below check what can be checked once (counts, roots, arrays, read now as
// MPI binds them at the call) and return the start, which the non-blocking form runs once
// and a persistent form at every `MPI_Start`. Buffers are read or written by each start and
// until its completion (the MPI contract of the call).

fn bcast_prep<W: Width>(
    c: &Communicator,
    buffer: *mut c_void,
    count: W::Count,
    dt: Handle,
    root: c_int,
) -> MpiResult<impl Starter> {
    root_of(root, c.size())?;
    let n = W::count(count, "count")?;
    // SAFETY (of the start): the collective's contract.
    Ok(move |c: &Communicator| unsafe { ibcast(c, buffer, n, dt, root) })
}

#[allow(clippy::too_many_arguments)]
fn reduction_prep<W: Width>(
    c: &Communicator,
    fname: &'static str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: W::Count,
    dt: Handle,
    op: Handle,
    kind: Red,
) -> MpiResult<impl Starter> {
    if let Red::Reduce(root) = kind {
        root_of(root, c.size())?;
    }
    let n = W::count(count, "count")?;
    // SAFETY (of the start): the collective's contract.
    Ok(move |c: &Communicator| unsafe { ireduction(fname, c, sendbuf, recvbuf, n, dt, op, kind) })
}

/// The block collectives' counts (0 beside `MPI_IN_PLACE` where MPI ignores them: at the
/// root of a rooted one, anywhere else; elsewhere `MPI_IN_PLACE` is refused later).
fn block_counts<W: Width>(
    sendbuf: *const c_void,
    sendcount: W::Count,
    recvbuf: *mut c_void,
    recvcount: W::Count,
    may_be_in_place: bool,
) -> MpiResult<(usize, usize)> {
    Ok((
        count_unless::<W>(
            sendcount,
            may_be_in_place && in_place(sendbuf),
            "send count",
        )?,
        count_unless::<W>(
            recvcount,
            may_be_in_place && in_place(recvbuf),
            "receive count",
        )?,
    ))
}

/// The start of a block collective: `f` is one of [`igather`], [`iscatter`] (with a root)
/// or [`iallgather`], [`ialltoall`] (`root` `None`).
type BlockFn = unsafe fn(
    &Communicator,
    *const c_void,
    usize,
    Handle,
    *mut c_void,
    usize,
    Handle,
    c_int,
) -> MpiResult<Started>;

#[allow(clippy::too_many_arguments)]
fn block_prep<W: Width>(
    c: &Communicator,
    f: BlockFn,
    sendbuf: *const c_void,
    sendcount: W::Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: W::Count,
    recvtype: Handle,
    root: Option<c_int>,
) -> MpiResult<impl Starter> {
    // The root (`None`: a form without one).
    let at_root = match root {
        Some(r) => root_of(r, c.size())? == c.rank(),
        None => true,
    };
    let root = root.unwrap_or(0);
    let (sc, rc) = block_counts::<W>(sendbuf, sendcount, recvbuf, recvcount, at_root)?;
    // SAFETY (of the start): the collective's contract.
    Ok(move |c: &Communicator| unsafe { f(c, sendbuf, sc, sendtype, recvbuf, rc, recvtype, root) })
}

/// [`iallgather`] as a [`BlockFn`] (no root).
///
/// # Safety
/// As [`iallgather`].
#[allow(clippy::too_many_arguments)]
unsafe fn iallgather_block(
    c: &Communicator,
    s: *const c_void,
    sc: usize,
    st: Handle,
    r: *mut c_void,
    rc: usize,
    rt: Handle,
    _root: c_int,
) -> MpiResult<Started> {
    // SAFETY: the caller's contract.
    unsafe { iallgather(c, s, sc, st, r, rc, rt) }
}

/// [`ialltoall`] as a [`BlockFn`] (no root).
///
/// # Safety
/// As [`ialltoall`].
#[allow(clippy::too_many_arguments)]
unsafe fn ialltoall_block(
    c: &Communicator,
    s: *const c_void,
    sc: usize,
    st: Handle,
    r: *mut c_void,
    rc: usize,
    rt: Handle,
    _root: c_int,
) -> MpiResult<Started> {
    // SAFETY: the caller's contract.
    unsafe { ialltoall(c, s, sc, st, r, rc, rt) }
}

#[allow(clippy::too_many_arguments)]
fn gatherv_prep<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: W::Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const W::Elem,
    displs: *const W::Displ,
    recvtype: Handle,
    root: c_int,
) -> MpiResult<impl Starter> {
    let (n, me) = (c.size(), c.rank());
    let root = root_of(root, n)?;
    let sc = count_unless::<W>(sendcount, me == root && in_place(sendbuf), "send count")?;
    // SAFETY: the collective's contract: the root's arrays hold one entry per rank.
    let (rc, rd) = unsafe { arrays::<W>(recvcounts, displs, n, "receive", me == root)? };
    // SAFETY (of the start): the collective's contract.
    Ok(move |c: &Communicator| unsafe {
        igatherv(c, sendbuf, sc, sendtype, recvbuf, &rc, &rd, recvtype, root)
    })
}

#[allow(clippy::too_many_arguments)]
fn scatterv_prep<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcounts: *const W::Elem,
    displs: *const W::Displ,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: W::Count,
    recvtype: Handle,
    root: c_int,
) -> MpiResult<impl Starter> {
    let (n, me) = (c.size(), c.rank());
    let root = root_of(root, n)?;
    let rc = count_unless::<W>(recvcount, me == root && in_place(recvbuf), "receive count")?;
    // SAFETY: the collective's contract: the root's arrays hold one entry per rank.
    let (sc, sd) = unsafe { arrays::<W>(sendcounts, displs, n, "send", me == root)? };
    // SAFETY (of the start): the collective's contract.
    Ok(move |c: &Communicator| unsafe {
        iscatterv(c, sendbuf, &sc, &sd, sendtype, recvbuf, rc, recvtype, root)
    })
}

#[allow(clippy::too_many_arguments)]
fn allgatherv_prep<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: W::Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const W::Elem,
    displs: *const W::Displ,
    recvtype: Handle,
) -> MpiResult<impl Starter> {
    let sc = count_unless::<W>(sendcount, in_place(sendbuf), "send count")?;
    // SAFETY: the collective's contract: the arrays hold one entry per rank.
    let (rc, rd) = unsafe { arrays::<W>(recvcounts, displs, c.size(), "receive", true)? };
    // SAFETY (of the start): the collective's contract.
    Ok(move |c: &Communicator| unsafe {
        iallgatherv(c, sendbuf, sc, sendtype, recvbuf, &rc, &rd, recvtype)
    })
}

#[allow(clippy::too_many_arguments)]
fn alltoallv_prep<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcounts: *const W::Elem,
    sdispls: *const W::Displ,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const W::Elem,
    rdispls: *const W::Displ,
    recvtype: Handle,
) -> MpiResult<impl Starter> {
    let n = c.size();
    // SAFETY: the collective's contract: the arrays hold one entry per rank.
    let ((rc, rd), (sc, sd)) = unsafe {
        (
            arrays::<W>(recvcounts, rdispls, n, "receive", true)?,
            arrays::<W>(sendcounts, sdispls, n, "send", !in_place(sendbuf))?,
        )
    };
    // SAFETY (of the start): the collective's contract.
    Ok(move |c: &Communicator| unsafe {
        ialltoallv(c, sendbuf, &sc, &sd, sendtype, recvbuf, &rc, &rd, recvtype)
    })
}

#[allow(clippy::too_many_arguments)]
fn alltoallw_prep<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcounts: *const W::Elem,
    sdispls: *const W::Displ,
    sendtypes: *const Handle,
    recvbuf: *mut c_void,
    recvcounts: *const W::Elem,
    rdispls: *const W::Displ,
    recvtypes: *const Handle,
) -> MpiResult<impl Starter> {
    let n = c.size();
    let send_side = !in_place(sendbuf);
    // SAFETY: the collective's contract: the arrays hold one entry per rank.
    let (rc, rd, rt, sc, sd, st) = unsafe {
        let (rc, rd) = arrays::<W>(recvcounts, rdispls, n, "receive", true)?;
        let rt = read_types(recvtypes, n, "receive")?;
        let (sc, sd) = arrays::<W>(sendcounts, sdispls, n, "send", send_side)?;
        let st = if send_side {
            read_types(sendtypes, n, "send")?
        } else {
            Vec::new()
        };
        (rc, rd, rt, sc, sd, st)
    };
    // SAFETY (of the start): the collective's contract.
    Ok(move |c: &Communicator| unsafe {
        ialltoallw(c, sendbuf, &sc, &sd, &st, recvbuf, &rc, &rd, &rt)
    })
}

fn reduce_scatter_prep<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const W::Elem,
    dt: Handle,
    op: Handle,
) -> MpiResult<impl Starter> {
    // SAFETY: the collective's contract: one count per rank.
    let counts = unsafe { super::coll_c::read_counts(recvcounts, c.size(), "receive")? };
    // SAFETY (of the start): the collective's contract.
    Ok(move |c: &Communicator| unsafe {
        ireduce_scatter("MPI_Ireduce_scatter", c, sendbuf, recvbuf, &counts, dt, op)
    })
}

fn reduce_scatter_block_prep<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: W::Count,
    dt: Handle,
    op: Handle,
) -> MpiResult<impl Starter> {
    let k = W::count(recvcount, "receive count")?;
    let counts = vec![k; c.size()];
    // SAFETY (of the start): the collective's contract.
    Ok(move |c: &Communicator| unsafe {
        ireduce_scatter(
            "MPI_Ireduce_scatter_block",
            c,
            sendbuf,
            recvbuf,
            &counts,
            dt,
            op,
        )
    })
}

/// A non-blocking collective and its persistent form, from the preparation `$prep` (an
/// expression over the arguments and the communicator `$c`, giving a [`Starter`]).
macro_rules! nb {
    ($i:ident, $init:ident, ($($arg:ident : $ty:ty),* $(,)?), |$c:ident| $prep:expr) => {
        #[doc = concat!("`", stringify!($i), "`.")]
        #[export]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $i($($arg: $ty,)* comm: Handle, request: *mut Handle) -> c_int {
            call(stringify!($i), comm, || {
                start(comm, request, |$c: &Communicator| {
                    if $c.is_inter() {
                        return super::inter_nb::$i($c, $($arg),*)?($c);
                    }
                    let go = $prep;
                    go($c)
                })
            })
        }

        #[doc = concat!("`", stringify!($init), "`: a persistent collective, started by `MPI_Start`.")]
        #[export]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $init(
            $($arg: $ty,)*
            comm: Handle,
            info: Handle,
            request: *mut Handle,
        ) -> c_int {
            call(stringify!($init), comm, || {
                super::pcoll::init(comm, info, request, |$c: &Communicator| {
                    if $c.is_inter() {
                        return super::inter_nb::$i($c, $($arg),*);
                    }
                    Ok(Box::new($prep) as super::inter_nb::Start)
                })
            })
        }
    };
}

nb!(MPI_Ibarrier, MPI_Barrier_init, (), |_c| ibarrier);

nb!(MPI_Ibcast, MPI_Bcast_init, (buffer: *mut c_void, count: c_int, dt: Handle, root: c_int),
    |c| bcast_prep::<Int>(c, buffer, count, dt, root)?);
nb!(MPI_Ibcast_c, MPI_Bcast_init_c,
    (buffer: *mut c_void, count: MPI_Count, dt: Handle, root: c_int),
    |c| bcast_prep::<Large>(c, buffer, count, dt, root)?);

nb!(MPI_Ireduce, MPI_Reduce_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, dt: Handle, op: Handle, root: c_int),
    |c| reduction_prep::<Int>(c, "MPI_Ireduce", sendbuf, recvbuf, count, dt, op, Red::Reduce(root))?);
nb!(MPI_Ireduce_c, MPI_Reduce_init_c,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, dt: Handle, op: Handle, root: c_int),
    |c| reduction_prep::<Large>(c, "MPI_Ireduce_c", sendbuf, recvbuf, count, dt, op, Red::Reduce(root))?);

nb!(MPI_Iallreduce, MPI_Allreduce_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, dt: Handle, op: Handle),
    |c| reduction_prep::<Int>(c, "MPI_Iallreduce", sendbuf, recvbuf, count, dt, op, Red::Allreduce)?);
nb!(MPI_Iallreduce_c, MPI_Allreduce_init_c,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, dt: Handle, op: Handle),
    |c| reduction_prep::<Large>(c, "MPI_Iallreduce_c", sendbuf, recvbuf, count, dt, op, Red::Allreduce)?);

nb!(MPI_Iscan, MPI_Scan_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, dt: Handle, op: Handle),
    |c| reduction_prep::<Int>(c, "MPI_Iscan", sendbuf, recvbuf, count, dt, op, Red::Scan)?);
nb!(MPI_Iscan_c, MPI_Scan_init_c,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, dt: Handle, op: Handle),
    |c| reduction_prep::<Large>(c, "MPI_Iscan_c", sendbuf, recvbuf, count, dt, op, Red::Scan)?);

nb!(MPI_Iexscan, MPI_Exscan_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, dt: Handle, op: Handle),
    |c| reduction_prep::<Int>(c, "MPI_Iexscan", sendbuf, recvbuf, count, dt, op, Red::Exscan)?);
nb!(MPI_Iexscan_c, MPI_Exscan_init_c,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, dt: Handle, op: Handle),
    |c| reduction_prep::<Large>(c, "MPI_Iexscan_c", sendbuf, recvbuf, count, dt, op, Red::Exscan)?);

macro_rules! nb_block {
    ($i:ident, $init:ident, $i_c:ident, $init_c:ident, $f:expr, root) => {
        nb!($i, $init,
            (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void,
             recvcount: c_int, recvtype: Handle, root: c_int),
            |c| block_prep::<Int>(c, $f, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, Some(root))?);
        nb!($i_c, $init_c,
            (sendbuf: *const c_void, sendcount: MPI_Count, sendtype: Handle, recvbuf: *mut c_void,
             recvcount: MPI_Count, recvtype: Handle, root: c_int),
            |c| block_prep::<Large>(c, $f, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, Some(root))?);
    };
    ($i:ident, $init:ident, $i_c:ident, $init_c:ident, $f:expr) => {
        nb!($i, $init,
            (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void,
             recvcount: c_int, recvtype: Handle),
            |c| block_prep::<Int>(c, $f, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, None)?);
        nb!($i_c, $init_c,
            (sendbuf: *const c_void, sendcount: MPI_Count, sendtype: Handle, recvbuf: *mut c_void,
             recvcount: MPI_Count, recvtype: Handle),
            |c| block_prep::<Large>(c, $f, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, None)?);
    };
}

nb_block!(
    MPI_Igather,
    MPI_Gather_init,
    MPI_Igather_c,
    MPI_Gather_init_c,
    igather,
    root
);
nb_block!(
    MPI_Iscatter,
    MPI_Scatter_init,
    MPI_Iscatter_c,
    MPI_Scatter_init_c,
    iscatter,
    root
);
nb_block!(
    MPI_Iallgather,
    MPI_Allgather_init,
    MPI_Iallgather_c,
    MPI_Allgather_init_c,
    iallgather_block
);
nb_block!(
    MPI_Ialltoall,
    MPI_Alltoall_init,
    MPI_Ialltoall_c,
    MPI_Alltoall_init_c,
    ialltoall_block
);

macro_rules! nb_v {
    ($w:ty, $cnt:ty, $arr:ty, $dsp:ty, $gv:ident, $gvi:ident, $sv:ident, $svi:ident, $agv:ident,
     $agvi:ident, $atv:ident, $atvi:ident, $atw:ident, $atwi:ident, $rs:ident, $rsi:ident,
     $rsb:ident, $rsbi:ident) => {
        nb!($gv, $gvi,
            (sendbuf: *const c_void, sendcount: $cnt, sendtype: Handle, recvbuf: *mut c_void,
             recvcounts: *const $arr, displs: *const $dsp, recvtype: Handle, root: c_int),
            |c| gatherv_prep::<$w>(c, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                recvtype, root)?);
        nb!($sv, $svi,
            (sendbuf: *const c_void, sendcounts: *const $arr, displs: *const $dsp,
             sendtype: Handle, recvbuf: *mut c_void, recvcount: $cnt, recvtype: Handle,
             root: c_int),
            |c| scatterv_prep::<$w>(c, sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount,
                recvtype, root)?);
        nb!($agv, $agvi,
            (sendbuf: *const c_void, sendcount: $cnt, sendtype: Handle, recvbuf: *mut c_void,
             recvcounts: *const $arr, displs: *const $dsp, recvtype: Handle),
            |c| allgatherv_prep::<$w>(c, sendbuf, sendcount, sendtype, recvbuf, recvcounts,
                displs, recvtype)?);
        nb!($atv, $atvi,
            (sendbuf: *const c_void, sendcounts: *const $arr, sdispls: *const $dsp,
             sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const $arr,
             rdispls: *const $dsp, recvtype: Handle),
            |c| alltoallv_prep::<$w>(c, sendbuf, sendcounts, sdispls, sendtype, recvbuf,
                recvcounts, rdispls, recvtype)?);
        nb!($atw, $atwi,
            (sendbuf: *const c_void, sendcounts: *const $arr, sdispls: *const $dsp,
             sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const $arr,
             rdispls: *const $dsp, recvtypes: *const Handle),
            |c| alltoallw_prep::<$w>(c, sendbuf, sendcounts, sdispls, sendtypes, recvbuf,
                recvcounts, rdispls, recvtypes)?);
        nb!($rs, $rsi,
            (sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const $arr, dt: Handle,
             op: Handle),
            |c| reduce_scatter_prep::<$w>(c, sendbuf, recvbuf, recvcounts, dt, op)?);
        nb!($rsb, $rsbi,
            (sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: $cnt, dt: Handle,
             op: Handle),
            |c| reduce_scatter_block_prep::<$w>(c, sendbuf, recvbuf, recvcount, dt, op)?);
    };
}

nb_v!(
    Int,
    c_int,
    c_int,
    c_int,
    MPI_Igatherv,
    MPI_Gatherv_init,
    MPI_Iscatterv,
    MPI_Scatterv_init,
    MPI_Iallgatherv,
    MPI_Allgatherv_init,
    MPI_Ialltoallv,
    MPI_Alltoallv_init,
    MPI_Ialltoallw,
    MPI_Alltoallw_init,
    MPI_Ireduce_scatter,
    MPI_Reduce_scatter_init,
    MPI_Ireduce_scatter_block,
    MPI_Reduce_scatter_block_init
);
nb_v!(
    Large,
    MPI_Count,
    MPI_Count,
    MPI_Aint,
    MPI_Igatherv_c,
    MPI_Gatherv_init_c,
    MPI_Iscatterv_c,
    MPI_Scatterv_init_c,
    MPI_Iallgatherv_c,
    MPI_Allgatherv_init_c,
    MPI_Ialltoallv_c,
    MPI_Alltoallv_init_c,
    MPI_Ialltoallw_c,
    MPI_Alltoallw_init_c,
    MPI_Ireduce_scatter_c,
    MPI_Reduce_scatter_init_c,
    MPI_Ireduce_scatter_block_c,
    MPI_Reduce_scatter_block_init_c
);
