//! The non-blocking collectives of an intercommunicator over raw memory (MPI-4.1 §6.2.2:
//! each group's data goes to, or comes from, the other group), with the buffer contract of
//! the module and the progress and matching rules of [`crate::coll::nonblocking`]. A rooted
//! one takes an [`InterRoot`]: [`InterRoot::Root`] at the root, [`InterRoot::Null`] at the
//! other processes of its group, [`InterRoot::Remote`] (the root's rank in the remote group)
//! in the other group. Each process of both groups must start them in the same order.

use std::ops::Range;

use super::{span_of, start, view, view_mut, RawReduction, RawRequest};
use crate::{Communicator, Error, InterRoot, Result};

/// Start a barrier over both groups of the intercommunicator `comm`.
pub fn inter_ibarrier(comm: &Communicator) -> Result<RawRequest> {
    Ok(start(comm, comm.inter_ibarrier_plan()?))
}

/// Start a broadcast on an intercommunicator: the root's `len` bytes at `buf` land in `buf`
/// on every process of the remote group (`buf` ignored where `root` is
/// [`InterRoot::Null`]).
///
/// # Safety
/// Where used, `buf..buf+len` valid (for reads at the root, writes elsewhere) and otherwise
/// unaccessed until the request completed.
#[allow(unsafe_code)]
pub unsafe fn inter_ibcast(
    comm: &Communicator,
    buf: *mut u8,
    len: usize,
    root: InterRoot,
) -> Result<RawRequest> {
    // SAFETY: the caller's contract.
    let buf = unsafe { view_mut(buf, len) };
    Ok(start(comm, comm.inter_ibcast_plan(buf, root)?))
}

/// Start a reduction on an intercommunicator: the remote group's `len`-byte inputs at
/// `send` are reduced with `op` (in its rank order) into the root's `recv` (`send` is used
/// in the remote group only, `recv` at the root only).
///
/// # Safety
/// Where used, `send..send+len` valid for reads and unwritten, `recv..recv+len` valid for
/// writes and otherwise unaccessed, until the request completed.
#[allow(unsafe_code)]
pub unsafe fn inter_ireduce(
    comm: &Communicator,
    send: *const u8,
    recv: *mut u8,
    len: usize,
    op: RawReduction,
    root: InterRoot,
) -> Result<RawRequest> {
    op.check_len(len, "ireduce")?;
    // SAFETY: the caller's contract (each buffer only where the role uses it).
    let (send, recv) = unsafe {
        match root {
            InterRoot::Remote(_) => (view(send, len), None),
            InterRoot::Root => (view(send, 0), Some(view_mut(recv, len))),
            InterRoot::Null => (view(send, 0), None),
        }
    };
    Ok(start(
        comm,
        comm.inter_ireduce_plan(send, recv, op.0, root)?,
    ))
}

/// Start an allreduce on an intercommunicator: each process's `recv` gets the reduction of
/// the remote group's `len`-byte inputs.
///
/// # Safety
/// `send..send+len` valid for reads and unwritten, `recv..recv+len` valid for writes and
/// otherwise unaccessed, until the request completed; the two do not overlap.
#[allow(unsafe_code)]
pub unsafe fn inter_iallreduce(
    comm: &Communicator,
    send: *const u8,
    recv: *mut u8,
    len: usize,
    op: RawReduction,
) -> Result<RawRequest> {
    op.check_len(len, "iallreduce")?;
    // SAFETY: the caller's contract.
    let (send, recv) = unsafe { (view(send, len), view_mut(recv, len)) };
    Ok(start(comm, comm.inter_iallreduce_plan(send, recv, op.0)?))
}

/// Start a gatherv on an intercommunicator: the root gets remote rank j's `send_len` bytes
/// at `send` in `recv[regions[j]]` (`recv`, `regions`: the root's; `send`: the remote
/// group's).
///
/// # Safety
/// Where used, `send` valid for reads and unwritten, `recv` valid for writes over every
/// region and otherwise unaccessed, until the request completed.
#[allow(unsafe_code)]
pub unsafe fn inter_igatherv(
    comm: &Communicator,
    send: *const u8,
    send_len: usize,
    recv: *mut u8,
    regions: &[Range<usize>],
    root: InterRoot,
) -> Result<RawRequest> {
    // SAFETY: the caller's contract (each buffer only where the role uses it).
    let (send, recv) = unsafe {
        match root {
            InterRoot::Root => (view(send, 0), Some(view_mut(recv, span_of(regions)))),
            InterRoot::Remote(_) => (view(send, send_len), None),
            InterRoot::Null => (view(send, 0), None),
        }
    };
    Ok(start(
        comm,
        comm.inter_igatherv_plan(send, recv, regions, root)?,
    ))
}

/// Start a scatterv on an intercommunicator: remote rank j gets the root's
/// `send[regions[j]]` in the `recv_len` bytes at its `recv`.
///
/// # Safety
/// Where used, `send` valid for reads over every region and unwritten, `recv` valid for
/// writes and otherwise unaccessed, until the request completed.
#[allow(unsafe_code)]
pub unsafe fn inter_iscatterv(
    comm: &Communicator,
    send: *const u8,
    regions: &[Range<usize>],
    recv: *mut u8,
    recv_len: usize,
    root: InterRoot,
) -> Result<RawRequest> {
    // SAFETY: the caller's contract (each buffer only where the role uses it).
    let (send, recv) = unsafe {
        match root {
            InterRoot::Root => (Some(view(send, span_of(regions))), view_mut(recv, 0)),
            InterRoot::Remote(_) => (None, view_mut(recv, recv_len)),
            InterRoot::Null => (None, view_mut(recv, 0)),
        }
    };
    Ok(start(
        comm,
        comm.inter_iscatterv_plan(send, regions, recv, root)?,
    ))
}

/// Start an alltoallv on an intercommunicator: `send[sends[j]]` goes to remote rank j, whose
/// block lands in `recv[recvs[j]]` (an allgatherv: every send region the whole input).
///
/// # Safety
/// `send` valid for reads over every send region and unwritten, `recv` valid for writes
/// over every receive region (disjoint) and otherwise unaccessed, until the request
/// completed; apart.
#[allow(unsafe_code)]
pub unsafe fn inter_ialltoallv(
    comm: &Communicator,
    send: *const u8,
    sends: &[Range<usize>],
    recv: *mut u8,
    recvs: &[Range<usize>],
) -> Result<RawRequest> {
    // SAFETY: the caller's contract.
    let (send, recv) = unsafe { (view(send, span_of(sends)), view_mut(recv, span_of(recvs))) };
    Ok(start(
        comm,
        comm.inter_ialltoallv_plan(send, sends, recv, recvs)?,
    ))
}

/// Start a reduce_scatter on an intercommunicator: the remote group's inputs (the sum of
/// `counts` bytes at `send`, `counts`: bytes per process of THIS group, in local rank order)
/// are reduced with `op` (in the remote group's rank order), and this process's part lands
/// in `recv`.
///
/// # Safety
/// `send` valid for reads of the sum of `counts` bytes and unwritten, `recv` valid for
/// writes of this process's count and otherwise unaccessed, until the request completed.
#[allow(unsafe_code)]
pub unsafe fn inter_ireduce_scatter(
    comm: &Communicator,
    send: *const u8,
    recv: *mut u8,
    counts: &[usize],
    op: RawReduction,
) -> Result<RawRequest> {
    let mut chunks = Vec::with_capacity(counts.len());
    let mut off = 0usize;
    for &c in counts {
        op.check_len(c, "ireduce_scatter")?;
        let end = off
            .checked_add(c)
            .ok_or_else(|| Error::InvalidArgument("ireduce_scatter: the counts overflow".into()))?;
        chunks.push(off..end);
        off = end;
    }
    let me = comm.local_comm().map_or(0, Communicator::rank);
    let mine = chunks.get(me).map_or(0, |c| c.len());
    // SAFETY: the caller's contract.
    let (send, recv) = unsafe { (view(send, off), view_mut(recv, mine)) };
    Ok(start(
        comm,
        comm.inter_ireduce_scatter_plan(send, recv, &chunks, op.0)?,
    ))
}
