//! Intercommunicators: creation, merge, remote group queries, and the collectives with
//! intercommunicator semantics (called from the collectives' entry points when their
//! communicator is an intercommunicator).
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_void};

use rmca::{Communicator, InterRoot};

use super::coll::{apart, blocks_n, in_place, recv_n, reduce_recv, reduce_send, send_n};
use super::coll_c::read_types;
use super::group::{add_group, group};
use super::op::{reduce, reducer, Coll};
use super::types::Ty;
use super::vcoll::{arrays, Blocks, TypedBlocks, Width};
use super::{call, communicator, put, recv_data_n, send_data_n};
use crate::abi::*;
use crate::state::{self, CommEntry, ErrHandler, MpiError, MpiResult};
use rmca_mpi_export::export;

/// Register `c` with `errhandler` and store its handle at `out` (checked non-null).
pub(crate) fn add_comm(c: Communicator, errhandler: ErrHandler, out: *mut Handle) -> MpiResult<()> {
    let h = state::with(|s| {
        s.add_comm(CommEntry {
            comm: c,
            errhandler,
            name: String::new(),
        })
    })?;
    // SAFETY: the caller's handle (MPI contract of the creating call).
    unsafe { put(out, h, "newcomm") }
}

/// The communicator and error handler of `h`.
pub(crate) fn comm_entry(h: Handle) -> MpiResult<(Communicator, ErrHandler)> {
    state::with(|s| {
        let e = s.comm(h)?;
        Ok((e.comm.clone(), e.errhandler))
    })
}

/// Refuse an intra-communicator-only call on an intercommunicator with `MPI_ERR_COMM`.
pub(crate) fn refuse(c: &Communicator, what: &str) -> MpiResult<()> {
    if c.is_inter() {
        return Err(MpiError::new(
            MPI_ERR_COMM,
            format!("{what} is not available on an intercommunicator (MPI defines it on intra-communicators only)"),
        ));
    }
    Ok(())
}

/// Refuse an intercommunicator-only call on an intra-communicator.
fn need_inter(c: &Communicator, fname: &str) -> MpiResult<()> {
    if !c.is_inter() {
        return Err(MpiError::new(
            MPI_ERR_COMM,
            format!("{fname} needs an intercommunicator, and this is an intra-communicator"),
        ));
    }
    Ok(())
}

/// A rank argument that must name a process of a group of `size`.
fn rank_in(r: c_int, size: usize, what: &str) -> MpiResult<usize> {
    usize::try_from(r)
        .ok()
        .filter(|&r| r < size)
        .ok_or_else(|| {
            MpiError::new(
                MPI_ERR_RANK,
                format!(
                    "{what} {r} is invalid: ranks are 0..{}",
                    size.saturating_sub(1)
                ),
            )
        })
}

/// A C string argument (`stringtag`, pset names).
///
/// # Safety
/// `p` is null or a NUL-terminated string.
pub(crate) unsafe fn c_str(p: *const c_char, what: &str) -> MpiResult<String> {
    if p.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            format!("the {what} argument is NULL"),
        ));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned())
}

/// `MPI_Intercomm_create`: an intercommunicator between `local_comm`'s processes and
/// another disjoint group, whose leaders meet on `peer_comm` with `tag`.
#[export]
pub unsafe extern "C" fn MPI_Intercomm_create(
    local_comm: Handle,
    local_leader: c_int,
    peer_comm: Handle,
    remote_leader: c_int,
    tag: c_int,
    newintercomm: *mut Handle,
) -> c_int {
    call("MPI_Intercomm_create", local_comm, || {
        if newintercomm.is_null() {
            return Err(super::null_argument("newintercomm"));
        }
        let (c, errhandler) = comm_entry(local_comm)?;
        refuse(&c, "MPI_Intercomm_create's local_comm")?;
        // local_leader and tag are checked by rmca after the local group agreed on them, so
        // a bad one is an error in both groups, not on one process while the rest wait (a
        // negative local_leader becomes one out of range).
        let ll = usize::try_from(local_leader).unwrap_or(usize::MAX);
        // peer_comm and remote_leader are significant at the local leader only (MPI); rmca
        // checks remote_leader against the peer's size where it is used. A bad peer_comm at
        // the leader is its error after the call, in which its group learns of the failure
        // (there is no remote leader to reach), not a return that leaves the group waiting.
        let (peer, peer_error) = match communicator(peer_comm) {
            Ok(p) => (p, None),
            Err(e) => (c.clone(), (c.rank() == ll).then_some(e)),
        };
        let rl = match peer_error {
            Some(_) => usize::MAX,
            None => usize::try_from(remote_leader).unwrap_or(usize::MAX),
        };
        let inter = c
            .intercomm_create(ll, &peer, rl, tag)
            .map_err(|e| match (e, peer_error) {
                (_, Some(pe)) => pe,
                (rmca::Error::BadRank { size, .. }, None) if local_leader < 0 => MpiError::new(
                    MPI_ERR_RANK,
                    format!(
                        "local_leader {local_leader} is invalid: ranks are 0..{}",
                        size.saturating_sub(1)
                    ),
                ),
                (e, None) => e.into(),
            })?;
        add_comm(inter, errhandler, newintercomm)?;
        // The local communicator's session (its buffered-send buffer) carries over.
        // SAFETY: add_comm wrote the handle (non-null, checked).
        super::buffers::comm_derived(local_comm, unsafe { newintercomm.read() });
        Ok(())
    })
}

/// `MPI_Intercomm_create_from_groups`: made by the members of both groups alone.
#[export]
pub unsafe extern "C" fn MPI_Intercomm_create_from_groups(
    local_group: Handle,
    local_leader: c_int,
    remote_group: Handle,
    remote_leader: c_int,
    stringtag: *const c_char,
    _info: Handle,
    errhandler: Handle,
    newintercomm: *mut Handle,
) -> c_int {
    super::session::call_eh(
        "MPI_Intercomm_create_from_groups",
        errhandler,
        MPI_COMM_NULL,
        || {
            if newintercomm.is_null() {
                return Err(super::null_argument("newintercomm"));
            }
            let eh = state::with(|s| s.errhandler(errhandler))?;
            let (lg, rg) = (group(local_group)?, group(remote_group)?);
            let ll = rank_in(local_leader, lg.size(), "local_leader")?;
            let rl = rank_in(remote_leader, rg.size(), "remote_leader")?;
            // SAFETY: MPI's contract: a NUL-terminated string.
            let tag = unsafe { c_str(stringtag, "stringtag")? };
            let world = communicator(MPI_COMM_WORLD)?;
            let inter = world.intercomm_from_groups(&lg, ll, &rg, rl, &tag)?;
            add_comm(inter, eh, newintercomm)
        },
    )
}

/// `MPI_Intercomm_merge`: the group passing `high` = false first.
#[export]
pub unsafe extern "C" fn MPI_Intercomm_merge(
    intercomm: Handle,
    high: c_int,
    newintracomm: *mut Handle,
) -> c_int {
    call("MPI_Intercomm_merge", intercomm, || {
        if newintracomm.is_null() {
            return Err(super::null_argument("newintracomm"));
        }
        let (c, errhandler) = comm_entry(intercomm)?;
        need_inter(&c, "MPI_Intercomm_merge")?;
        let merged = c.intercomm_merge(high != 0)?;
        add_comm(merged, errhandler, newintracomm)?;
        // SAFETY: add_comm wrote the handle (non-null, checked).
        super::buffers::comm_derived(intercomm, unsafe { newintracomm.read() });
        Ok(())
    })
}

/// `MPI_Comm_remote_size`.
#[export]
pub unsafe extern "C" fn MPI_Comm_remote_size(comm: Handle, size: *mut c_int) -> c_int {
    call("MPI_Comm_remote_size", comm, || {
        let c = communicator(comm)?;
        need_inter(&c, "MPI_Comm_remote_size")?;
        // SAFETY: the caller's int.
        unsafe { put(size, c.size() as c_int, "size") }
    })
}

/// `MPI_Comm_remote_group`.
#[export]
pub unsafe extern "C" fn MPI_Comm_remote_group(comm: Handle, g: *mut Handle) -> c_int {
    call("MPI_Comm_remote_group", comm, || {
        let c = communicator(comm)?;
        need_inter(&c, "MPI_Comm_remote_group")?;
        let remote = c.remote_group().ok_or_else(|| {
            MpiError::new(MPI_ERR_INTERN, "intercommunicator without a remote group")
        })?;
        add_group(remote, g)
    })
}

// ---- collectives on intercommunicators ----

/// The root argument of a rooted collective on an intercommunicator.
pub(crate) fn inter_root(root: c_int, remote_size: usize) -> MpiResult<InterRoot> {
    match root {
        MPI_ROOT => Ok(InterRoot::Root),
        MPI_PROC_NULL => Ok(InterRoot::Null),
        r => match usize::try_from(r) {
            Ok(r) if r < remote_size => Ok(InterRoot::Remote(r)),
            _ => Err(MpiError::new(
                MPI_ERR_ROOT,
                format!(
                    "root {root} is invalid on an intercommunicator: MPI_ROOT (the root), MPI_PROC_NULL (the root's group) or a remote rank 0..{}",
                    remote_size.saturating_sub(1)
                ),
            )),
        },
    }
}

fn local_of(c: &Communicator) -> MpiResult<&Communicator> {
    c.local_comm()
        .ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "intercommunicator without a local side"))
}

pub(crate) fn no_in_place(p: *const c_void, fname: &str) -> MpiResult<()> {
    if in_place(p) {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            format!("{fname}: MPI_IN_PLACE is not allowed on an intercommunicator"),
        ));
    }
    Ok(())
}

/// `MPI_Bcast` on an intercommunicator.
///
/// # Safety
/// MPI_Bcast's contract.
pub(crate) unsafe fn bcast<W: Width>(
    c: &Communicator,
    buffer: *mut c_void,
    count: W::Count,
    dt: Handle,
    root: c_int,
) -> MpiResult<()> {
    let root = inter_root(root, c.size())?;
    if root == InterRoot::Null {
        return Ok(());
    }
    let mut data = recv_n(buffer, W::count(count, "count")?, dt, "broadcast")?;
    // SAFETY: the caller's contract: `buffer` holds `count` elements for the call.
    unsafe {
        if root == InterRoot::Root {
            data.load()?;
        }
        c.inter_bcast(data.bytes_mut(), root)?;
        if root != InterRoot::Root {
            data.finish(data.len());
        }
    }
    Ok(())
}

/// `MPI_Allreduce` on an intercommunicator: each group gets the reduction of the other's
/// data.
///
/// # Safety
/// MPI_Allreduce's contract.
pub(crate) unsafe fn allreduce<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: W::Count,
    dt: Handle,
    op: Handle,
) -> MpiResult<()> {
    no_in_place(sendbuf, "MPI_Allreduce")?;
    let local = local_of(c)?;
    let n = W::count(count, "count")?;
    let ty = Ty::for_use(dt)?;
    let r = reducer(op, dt, &ty)?;
    let mut recv = reduce_recv(&r, recvbuf, n, &ty)?;
    // SAFETY: the caller's contract: both buffers hold `count` elements for the call.
    unsafe {
        let send = reduce_send(&r, sendbuf, n, &ty)?;
        apart(&send, &recv, "MPI_Allreduce")?;
        let len = recv.len();
        let mut mine = vec![0u8; len];
        let leader = local.rank() == 0;
        reduce(
            local,
            Coll::Reduce(0),
            send.bytes(),
            leader.then_some(&mut mine[..]),
            r,
        )?;
        c.leader_exchange(&mine, recv.bytes_mut())?;
        local.bcast(recv.bytes_mut(), 0)?;
        recv.finish(len);
    }
    Ok(())
}

/// `MPI_Reduce` on an intercommunicator: the root gets the reduction of the remote group.
///
/// # Safety
/// MPI_Reduce's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn reduce_to<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: W::Count,
    dt: Handle,
    op: Handle,
    root: c_int,
) -> MpiResult<()> {
    let root = inter_root(root, c.size())?;
    let local = local_of(c)?;
    // Nothing of the call is significant at the root's group but the root (mpi4py passes
    // MPI_BYTE with MPI_SUM there).
    if root == InterRoot::Null {
        return Ok(());
    }
    let n = W::count(count, "count")?;
    let ty = Ty::for_use(dt)?;
    let r = reducer(op, dt, &ty)?;
    // SAFETY: the caller's contract: the buffers of this process's role hold `count`
    // elements for the call.
    unsafe {
        match root {
            InterRoot::Null => Ok(()),
            InterRoot::Root => {
                let mut recv = reduce_recv(&r, recvbuf, n, &ty)?;
                c.coll_recv_remote(recv.bytes_mut(), 0)?;
                recv.finish(recv.len());
                Ok(())
            }
            InterRoot::Remote(to) => {
                no_in_place(sendbuf, "MPI_Reduce")?;
                let send = reduce_send(&r, sendbuf, n, &ty)?;
                let leader = local.rank() == 0;
                let mut mine = vec![0u8; if leader { send.len() } else { 0 }];
                reduce(
                    local,
                    Coll::Reduce(0),
                    send.bytes(),
                    leader.then_some(&mut mine[..]),
                    r,
                )?;
                if leader {
                    c.coll_send_remote(&mine, to)?;
                }
                Ok(())
            }
        }
    }
}

/// `MPI_Gather` on an intercommunicator: the root gets a block from each remote process.
///
/// # Safety
/// MPI_Gather's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gather<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: W::Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: W::Count,
    recvtype: Handle,
    root: c_int,
) -> MpiResult<()> {
    let root = inter_root(root, c.size())?;
    // SAFETY: the caller's contract for this process's role.
    unsafe {
        match root {
            InterRoot::Null => Ok(()),
            InterRoot::Root => {
                let rc = W::count(recvcount, "receive count")?;
                let (rty, total, _) = blocks_n(rc, recvtype, c.size(), "receive")?;
                let mut recv = recv_data_n(recvbuf, total, &rty, "receive")?;
                c.inter_gather(&[], Some(recv.bytes_mut()), root)?;
                recv.finish(recv.len());
                Ok(())
            }
            InterRoot::Remote(_) => {
                no_in_place(sendbuf, "MPI_Gather")?;
                let send = send_n(
                    sendbuf,
                    W::count(sendcount, "send count")?,
                    sendtype,
                    "send",
                )?;
                Ok(c.inter_gather(send.bytes(), None, root)?)
            }
        }
    }
}

/// `MPI_Scatter` on an intercommunicator: the root sends a block to each remote process.
///
/// # Safety
/// MPI_Scatter's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scatter<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: W::Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: W::Count,
    recvtype: Handle,
    root: c_int,
) -> MpiResult<()> {
    let root = inter_root(root, c.size())?;
    // SAFETY: the caller's contract for this process's role.
    unsafe {
        match root {
            InterRoot::Null => Ok(()),
            InterRoot::Root => {
                let sc = W::count(sendcount, "send count")?;
                let (sty, total, _) = blocks_n(sc, sendtype, c.size(), "send")?;
                let send = send_data_n(sendbuf, total, &sty, "send")?;
                Ok(c.inter_scatter(Some(send.bytes()), &mut [], root)?)
            }
            InterRoot::Remote(_) => {
                no_in_place(recvbuf, "MPI_Scatter")?;
                let rc = W::count(recvcount, "receive count")?;
                let mut recv = recv_n(recvbuf, rc, recvtype, "receive")?;
                c.inter_scatter(None, recv.bytes_mut(), root)?;
                recv.finish(recv.len());
                Ok(())
            }
        }
    }
}

/// `MPI_Allgather` on an intercommunicator: each process gets the remote group's blocks.
///
/// # Safety
/// MPI_Allgather's contract.
pub(crate) unsafe fn allgather<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: W::Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: W::Count,
    recvtype: Handle,
) -> MpiResult<()> {
    no_in_place(sendbuf, "MPI_Allgather")?;
    let rc = W::count(recvcount, "receive count")?;
    let (rty, total, _) = blocks_n(rc, recvtype, c.size(), "receive")?;
    let mut recv = recv_data_n(recvbuf, total, &rty, "receive")?;
    // SAFETY: the caller's contract.
    unsafe {
        let send = send_n(
            sendbuf,
            W::count(sendcount, "send count")?,
            sendtype,
            "send",
        )?;
        apart(&send, &recv, "MPI_Allgather")?;
        c.inter_allgather(send.bytes(), recv.bytes_mut())?;
        recv.finish(recv.len());
    }
    Ok(())
}

/// `MPI_Alltoall` on an intercommunicator: block `j` goes to and comes from remote rank `j`.
///
/// # Safety
/// MPI_Alltoall's contract.
pub(crate) unsafe fn alltoall<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: W::Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: W::Count,
    recvtype: Handle,
) -> MpiResult<()> {
    no_in_place(sendbuf, "MPI_Alltoall")?;
    let n = c.size();
    // Each group's send blocks match the other group's receive blocks, not its own.
    let rc = W::count(recvcount, "receive count")?;
    let sc = W::count(sendcount, "send count")?;
    let (rty, total, _) = blocks_n(rc, recvtype, n, "receive")?;
    let (sty, stotal, _) = blocks_n(sc, sendtype, n, "send")?;
    let mut recv = recv_data_n(recvbuf, total, &rty, "receive")?;
    // SAFETY: the caller's contract.
    unsafe {
        let send = send_data_n(sendbuf, stotal, &sty, "send")?;
        apart(&send, &recv, "MPI_Alltoall")?;
        c.inter_alltoall(send.bytes(), recv.bytes_mut())?;
        recv.finish(recv.len());
    }
    Ok(())
}

// ---- v-forms on intercommunicators (int and `_c` widths) ----

/// `MPI_Gatherv` on an intercommunicator: the root gets block `i` from remote rank `i`.
///
/// # Safety
/// MPI_Gatherv's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gatherv<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: W::Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const W::Elem,
    displs: *const W::Displ,
    recvtype: Handle,
    root: c_int,
) -> MpiResult<()> {
    let root = inter_root(root, c.size())?;
    // SAFETY: the caller's contract for this process's role.
    unsafe {
        match root {
            InterRoot::Null => Ok(()),
            InterRoot::Root => {
                let (rc, rd) = arrays::<W>(recvcounts, displs, c.size(), "receive", true)?;
                let rty = Ty::for_use(recvtype)?;
                let b = Blocks::new(&rc, &rd, &rty, "receive")?;
                b.check_null(recvbuf, "receive")?;
                let mut all = vec![0u8; b.total];
                for (i, r) in b.regions().into_iter().enumerate() {
                    c.coll_recv_remote(&mut all[r], i)?;
                }
                b.unpack(&all, recvbuf, &rty, None)
            }
            InterRoot::Remote(_) => {
                no_in_place(sendbuf, "MPI_Gatherv")?;
                let n = W::count(sendcount, "send count")?;
                let send = send_data_n(sendbuf, n, &Ty::for_use(sendtype)?, "send")?;
                Ok(c.inter_gather(send.bytes(), None, root)?)
            }
        }
    }
}

/// `MPI_Scatterv` on an intercommunicator: the root sends block `i` to remote rank `i`.
///
/// # Safety
/// MPI_Scatterv's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scatterv<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcounts: *const W::Elem,
    displs: *const W::Displ,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: W::Count,
    recvtype: Handle,
    root: c_int,
) -> MpiResult<()> {
    let root = inter_root(root, c.size())?;
    // SAFETY: the caller's contract for this process's role.
    unsafe {
        match root {
            InterRoot::Null => Ok(()),
            InterRoot::Root => {
                let (sc, sd) = arrays::<W>(sendcounts, displs, c.size(), "send", true)?;
                let sty = Ty::for_use(sendtype)?;
                let b = Blocks::new(&sc, &sd, &sty, "send")?;
                b.check_null(sendbuf, "send")?;
                let packed = b.pack(sendbuf, &sty)?;
                for (i, r) in b.regions().into_iter().enumerate() {
                    c.coll_send_remote(&packed[r], i)?;
                }
                Ok(())
            }
            InterRoot::Remote(_) => {
                no_in_place(recvbuf, "MPI_Scatterv")?;
                let n = W::count(recvcount, "receive count")?;
                let mut recv = recv_data_n(recvbuf, n, &Ty::for_use(recvtype)?, "receive")?;
                c.inter_scatter(None, recv.bytes_mut(), root)?;
                recv.finish(recv.len());
                Ok(())
            }
        }
    }
}

/// `MPI_Allgatherv` on an intercommunicator: block `i` of the receive side comes from
/// remote rank `i`.
///
/// # Safety
/// MPI_Allgatherv's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn allgatherv<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: W::Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const W::Elem,
    displs: *const W::Displ,
    recvtype: Handle,
) -> MpiResult<()> {
    no_in_place(sendbuf, "MPI_Allgatherv")?;
    let n = c.size();
    // SAFETY: the caller's contract.
    unsafe {
        let (rc, rd) = arrays::<W>(recvcounts, displs, n, "receive", true)?;
        let rty = Ty::for_use(recvtype)?;
        let b = Blocks::new(&rc, &rd, &rty, "receive")?;
        b.check_null(recvbuf, "receive")?;
        let count = W::count(sendcount, "send count")?;
        let send = send_data_n(sendbuf, count, &Ty::for_use(sendtype)?, "send")?;
        // The same block to every remote process.
        let sregions = vec![0..send.len(); n];
        let mut all = vec![0u8; b.total];
        c.inter_alltoallv(send.bytes(), &sregions, &mut all, &b.regions())?;
        b.unpack(&all, recvbuf, &rty, None)
    }
}

/// `MPI_Alltoallv` on an intercommunicator: send block `j` goes to remote rank `j`, receive
/// block `j` comes from it.
///
/// # Safety
/// MPI_Alltoallv's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn alltoallv<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcounts: *const W::Elem,
    sdispls: *const W::Displ,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const W::Elem,
    rdispls: *const W::Displ,
    recvtype: Handle,
) -> MpiResult<()> {
    no_in_place(sendbuf, "MPI_Alltoallv")?;
    let n = c.size();
    // SAFETY: the caller's contract.
    unsafe {
        let (sc, sd) = arrays::<W>(sendcounts, sdispls, n, "send", true)?;
        let (rc, rd) = arrays::<W>(recvcounts, rdispls, n, "receive", true)?;
        let (sty, rty) = (Ty::for_use(sendtype)?, Ty::for_use(recvtype)?);
        let sb = Blocks::new(&sc, &sd, &sty, "send")?;
        let rb = Blocks::new(&rc, &rd, &rty, "receive")?;
        sb.check_null(sendbuf, "send")?;
        rb.check_null(recvbuf, "receive")?;
        let packed = sb.pack(sendbuf, &sty)?;
        let mut all = vec![0u8; rb.total];
        c.inter_alltoallv(&packed, &sb.regions(), &mut all, &rb.regions())?;
        rb.unpack(&all, recvbuf, &rty, None)
    }
}

/// `MPI_Alltoallw` on an intercommunicator: per remote process a count, a byte
/// displacement and a datatype on each side.
///
/// # Safety
/// MPI_Alltoallw's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn alltoallw<W: Width>(
    c: &Communicator,
    sendbuf: *const c_void,
    sendcounts: *const W::Elem,
    sdispls: *const W::Displ,
    sendtypes: *const Handle,
    recvbuf: *mut c_void,
    recvcounts: *const W::Elem,
    rdispls: *const W::Displ,
    recvtypes: *const Handle,
) -> MpiResult<()> {
    no_in_place(sendbuf, "MPI_Alltoallw")?;
    let n = c.size();
    // SAFETY: the caller's contract: one entry per remote process in each array.
    unsafe {
        let (sc, sd) = arrays::<W>(sendcounts, sdispls, n, "send", true)?;
        let (rc, rd) = arrays::<W>(recvcounts, rdispls, n, "receive", true)?;
        let st = read_types(sendtypes, n, "send")?;
        let rt = read_types(recvtypes, n, "receive")?;
        let sb = TypedBlocks::new(&sc, &sd, &st, "send")?;
        let rb = TypedBlocks::new(&rc, &rd, &rt, "receive")?;
        sb.check_null(sendbuf, "send")?;
        rb.check_null(recvbuf, "receive")?;
        let packed = sb.pack(sendbuf)?;
        let mut all = vec![0u8; rb.total];
        c.inter_alltoallv(&packed, &sb.regions(), &mut all, &rb.regions())?;
        rb.unpack(&all, recvbuf);
    }
    Ok(())
}

/// `MPI_Reduce_scatter` (`counts`: one per process of the local group) and
/// `MPI_Reduce_scatter_block` on an intercommunicator: each process gets its part of the
/// reduction of the remote group's inputs.
///
/// # Safety
/// The collective's contract.
pub(crate) unsafe fn reduce_scatter(
    fname: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: &[usize],
    dt: Handle,
    op: Handle,
) -> MpiResult<()> {
    // SAFETY: the caller's contract, for the whole (blocking) call.
    unsafe {
        let started = super::inter_nb::ireduce_scatter(fname, c, sendbuf, recvbuf, counts, dt, op)?;
        super::inter_nb::block_on(started)
    }
}
