//! The non-blocking and persistent collectives on an intercommunicator (MPI-4.1 §6.12 with
//! the semantics of §6.2.2: each group's data goes to, or comes from, the other group; a
//! rooted one takes `MPI_ROOT` at the root, `MPI_PROC_NULL` at the rest of its group and the
//! root's remote rank in the other group; `MPI_IN_PLACE` is refused, with `MPI_ERR_BUFFER`
//! as MPICH does), over [`rmca::raw`]'s `inter_*` collectives.
//!
//! Each function here is named after the non-blocking collective whose intercommunicator
//! form it prepares: the `nb!` macro of [`super::nbc`] calls `inter_nb::<name>` for both the
//! non-blocking call and its persistent `_init` form when the communicator is an
//! intercommunicator. A preparation checks what MPI binds at the call (roots, counts, count
//! and displacement arrays, copied) and returns the start each run makes (once for the
//! non-blocking form, at every `MPI_Start` for a persistent one), staging buffers as the
//! intra-communicator forms do. The blocking forms without an intercommunicator algorithm of
//! their own (`MPI_Alltoallw`, the reduce-scatters) run these and wait (`block_on`).
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};

use rmca::raw;
use rmca::{Communicator, InterRoot};

use super::coll::{apart, blocks_n, recv_n, reduce_recv, reduce_send, send_n};
use super::coll_c::{read_counts, read_types};
use super::inter::{inter_root, no_in_place};
use super::nbc::{keep, Started, Starter};
use super::op::{raw_reduction, reducer};
use super::types::Ty;
use super::vcoll::{arrays, Blocks, Int, Large, TypedBlocks, Width};
use super::{recv_data_n, send_data_n, RecvData, SendData, Staged};
use crate::abi::*;
use crate::state::{MpiError, MpiResult};

/// The start of a collective, as boxed for the `nb!` macro.
pub(crate) type Start = Box<dyn Starter>;

fn boxed(f: impl Starter) -> MpiResult<Start> {
    Ok(Box::new(f))
}

/// Nothing to do (a process of the root's group other than the root): a request that
/// completes at once, still counted in the collective order.
fn nothing(c: &Communicator) -> MpiResult<Started> {
    // SAFETY: no buffer.
    let r = unsafe { raw::inter_ibcast(c, std::ptr::null_mut(), 0, InterRoot::Null)? };
    Ok((r, None))
}

/// The address of the bytes of `r` (received in place or staged).
fn recv_ptr(r: &mut RecvData) -> *mut u8 {
    // SAFETY: only the address is taken; the collective writes there until completion, and
    // a staged buffer's heap block does not move when `r` does.
    unsafe { r.bytes_mut() }.as_mut_ptr()
}

/// `n` blocks of `block` bytes, back to back.
fn even(n: usize, block: usize) -> Vec<std::ops::Range<usize>> {
    (0..n).map(|j| j * block..(j + 1) * block).collect()
}

/// Run a started collective to completion (the blocking forms).
///
/// # Safety
/// The buffers the start named are valid until it completed (the blocking call's contract).
pub(crate) unsafe fn block_on(started: Started) -> MpiResult<()> {
    let (r, kept) = started;
    r.wait()?;
    // A collective keeps only `Staged::Coll` (see `keep`); a packed send copy is dropped.
    if let Some(Staged::Coll(k)) = kept {
        // SAFETY: the collective completed; the caller's contract.
        unsafe { k.finish() };
    }
    Ok(())
}

fn refuse_prefix(name: &str) -> MpiResult<Start> {
    Err(MpiError::new(
        MPI_ERR_COMM,
        format!("{name} is not defined on an intercommunicator (MPI defines no prefix reduction across two groups)"),
    ))
}

// ---- the starts ----

/// Start a broadcast of `n` elements of `dt`.
///
/// # Safety
/// MPI_Ibcast's contract for this process's role, until completion.
unsafe fn ibcast(
    c: &Communicator,
    buffer: *mut c_void,
    n: usize,
    dt: Handle,
    root: InterRoot,
) -> MpiResult<Started> {
    match root {
        InterRoot::Null => nothing(c),
        InterRoot::Root => {
            // SAFETY: the caller's contract: the root's buffer is only read.
            let mut send = unsafe { send_n(buffer, n, dt, "broadcast")? };
            let (at, len) = match &mut send {
                SendData::Direct(p, len) => (p.cast_mut(), *len),
                SendData::Packed(v) => (v.as_mut_ptr(), v.len()),
            };
            // SAFETY: as above; a packed copy moves into the request's staged data.
            let r = unsafe { raw::inter_ibcast(c, at, len, root)? };
            Ok((r, keep(Some(send), Vec::new(), None, None)))
        }
        InterRoot::Remote(_) => {
            let mut data = recv_n(buffer, n, dt, "broadcast")?;
            let len = data.len();
            // SAFETY: the caller's contract.
            let r = unsafe { raw::inter_ibcast(c, recv_ptr(&mut data), len, root)? };
            Ok((r, keep(None, Vec::new(), Some(data), None)))
        }
    }
}

/// Start a reduction (`root` `None`: an allreduce) of `n` elements.
///
/// # Safety
/// The collective's contract for this process's role, until completion.
#[allow(clippy::too_many_arguments)]
unsafe fn ireduction(
    fname: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    n: usize,
    dt: Handle,
    op: Handle,
    root: Option<InterRoot>,
) -> MpiResult<Started> {
    // Nothing but the root is significant in the root's group (mpi4py passes MPI_BYTE with
    // MPI_SUM there).
    if root == Some(InterRoot::Null) {
        return nothing(c);
    }
    let ty = Ty::for_use(dt)?;
    let red = reducer(op, dt, &ty)?;
    let bytes_op = raw_reduction(red)?;
    match root {
        Some(InterRoot::Null) => nothing(c),
        Some(InterRoot::Root) => {
            let mut recv = reduce_recv(&red, recvbuf, n, &ty)?;
            let len = recv.len();
            // SAFETY: the caller's contract.
            let r = unsafe {
                raw::inter_ireduce(
                    c,
                    std::ptr::null(),
                    recv_ptr(&mut recv),
                    len,
                    bytes_op,
                    InterRoot::Root,
                )?
            };
            Ok((r, keep(None, Vec::new(), Some(recv), None)))
        }
        Some(remote) => {
            no_in_place(sendbuf, fname)?;
            // SAFETY: the caller's contract.
            let send = unsafe { reduce_send(&red, sendbuf, n, &ty)? };
            let (at, len) = send.span();
            // SAFETY: as above; a packed copy moves into the request's staged data.
            let r = unsafe {
                raw::inter_ireduce(c, at.cast(), std::ptr::null_mut(), len, bytes_op, remote)?
            };
            Ok((r, keep(Some(send), Vec::new(), None, None)))
        }
        None => {
            no_in_place(sendbuf, fname)?;
            let mut recv = reduce_recv(&red, recvbuf, n, &ty)?;
            // SAFETY: the caller's contract.
            let send = unsafe { reduce_send(&red, sendbuf, n, &ty)? };
            apart(&send, &recv, fname)?;
            let (at, len) = send.span();
            let rp = recv_ptr(&mut recv);
            // SAFETY: as above; library copies move into the request's staged data.
            let r = unsafe { raw::inter_iallreduce(c, at.cast(), rp, len, bytes_op)? };
            Ok((r, keep(Some(send), Vec::new(), Some(recv), None)))
        }
    }
}

/// A remote process's side of a gather or gatherv: its `sc` elements of `st` to the root.
///
/// # Safety
/// The collective's contract for a sending process, until completion.
unsafe fn gather_contribution(
    c: &Communicator,
    fname: &str,
    sendbuf: *const c_void,
    sc: usize,
    st: Handle,
    root: InterRoot,
) -> MpiResult<Started> {
    no_in_place(sendbuf, fname)?;
    // SAFETY: the caller's contract.
    let send = unsafe { send_n(sendbuf, sc, st, "send")? };
    let (at, len) = send.span();
    // SAFETY: as above; a packed copy moves into the request's staged data.
    let r = unsafe { raw::inter_igatherv(c, at.cast(), len, std::ptr::null_mut(), &[], root)? };
    Ok((r, keep(Some(send), Vec::new(), None, None)))
}

/// A remote process's side of a scatter or scatterv: `rc` elements of `rt` from the root.
///
/// # Safety
/// The collective's contract for a receiving process, until completion.
unsafe fn scatter_share(
    c: &Communicator,
    fname: &str,
    recvbuf: *mut c_void,
    rc: usize,
    rt: Handle,
    root: InterRoot,
) -> MpiResult<Started> {
    no_in_place(recvbuf, fname)?;
    let mut recv = recv_n(recvbuf, rc, rt, "receive")?;
    let len = recv.len();
    // SAFETY: the caller's contract.
    let r =
        unsafe { raw::inter_iscatterv(c, std::ptr::null(), &[], recv_ptr(&mut recv), len, root)? };
    Ok((r, keep(None, Vec::new(), Some(recv), None)))
}

/// Start a gather: the root gets `rc` elements of `rt` from each remote process.
///
/// # Safety
/// MPI_Igather's contract for this process's role, until completion.
#[allow(clippy::too_many_arguments)]
unsafe fn igather(
    c: &Communicator,
    sendbuf: *const c_void,
    sc: usize,
    st: Handle,
    recvbuf: *mut c_void,
    rc: usize,
    rt: Handle,
    root: InterRoot,
) -> MpiResult<Started> {
    match root {
        InterRoot::Null => nothing(c),
        InterRoot::Root => {
            let (rty, total, rb) = blocks_n(rc, rt, c.size(), "receive")?;
            let mut recv = recv_data_n(recvbuf, total, &rty, "receive")?;
            let regions = even(c.size(), rb);
            // SAFETY: the caller's contract.
            let r = unsafe {
                raw::inter_igatherv(c, std::ptr::null(), 0, recv_ptr(&mut recv), &regions, root)?
            };
            Ok((r, keep(None, Vec::new(), Some(recv), None)))
        }
        // SAFETY: the caller's contract.
        InterRoot::Remote(_) => unsafe {
            gather_contribution(c, "MPI_Igather", sendbuf, sc, st, root)
        },
    }
}

/// Start a scatter: the root sends `sc` elements of `st` to each remote process.
///
/// # Safety
/// MPI_Iscatter's contract for this process's role, until completion.
#[allow(clippy::too_many_arguments)]
unsafe fn iscatter(
    c: &Communicator,
    sendbuf: *const c_void,
    sc: usize,
    st: Handle,
    recvbuf: *mut c_void,
    rc: usize,
    rt: Handle,
    root: InterRoot,
) -> MpiResult<Started> {
    match root {
        InterRoot::Null => nothing(c),
        InterRoot::Root => {
            let (sty, total, sb) = blocks_n(sc, st, c.size(), "send")?;
            // SAFETY: the caller's contract.
            let send = unsafe { send_data_n(sendbuf, total, &sty, "send")? };
            let regions = even(c.size(), sb);
            let at = send.span().0.cast();
            // SAFETY: as above; a packed copy moves into the request's staged data.
            let r =
                unsafe { raw::inter_iscatterv(c, at, &regions, std::ptr::null_mut(), 0, root)? };
            Ok((r, keep(Some(send), Vec::new(), None, None)))
        }
        // SAFETY: the caller's contract.
        InterRoot::Remote(_) => unsafe { scatter_share(c, "MPI_Iscatter", recvbuf, rc, rt, root) },
    }
}

/// Start an allgather (`all_to_all`: an alltoall, `sc` elements per remote process).
///
/// # Safety
/// The collective's contract, until completion.
#[allow(clippy::too_many_arguments)]
unsafe fn iexchange(
    fname: &str,
    c: &Communicator,
    sendbuf: *const c_void,
    sc: usize,
    st: Handle,
    recvbuf: *mut c_void,
    rc: usize,
    rt: Handle,
    all_to_all: bool,
) -> MpiResult<Started> {
    no_in_place(sendbuf, fname)?;
    let n = c.size();
    let (rty, total, rb) = blocks_n(rc, rt, n, "receive")?;
    let mut recv = recv_data_n(recvbuf, total, &rty, "receive")?;
    let (sty, stotal, sb) = blocks_n(sc, st, if all_to_all { n } else { 1 }, "send")?;
    // SAFETY: the caller's contract.
    let send = unsafe { send_data_n(sendbuf, stotal, &sty, "send")? };
    apart(&send, &recv, fname)?;
    let sends = if all_to_all {
        even(n, sb)
    } else {
        vec![0..sb; n]
    };
    let at = send.span().0.cast();
    // SAFETY: as above; library copies move into the request's staged data.
    let r = unsafe { raw::inter_ialltoallv(c, at, &sends, recv_ptr(&mut recv), &even(n, rb))? };
    Ok((r, keep(Some(send), Vec::new(), Some(recv), None)))
}

/// The step that unpacks packed `all` into `buf` with `b`'s layout at completion.
fn unpack_then(b: Blocks, all: Vec<u8>, buf: *mut c_void, ty: Ty) -> MpiResult<Box<dyn FnOnce()>> {
    // Addresses are checked now, so that the step cannot fail.
    b.check_addresses(buf, &ty)?;
    Ok(Box::new(move || {
        // SAFETY: the collective's contract: `buf` holds every block until completion, when
        // this runs (see `CollStaged::finish`).
        let _ = unsafe { b.unpack(&all, buf, &ty, None) };
    }))
}

/// Start a gatherv (`rc`, `rd`: the root's).
///
/// # Safety
/// MPI_Igatherv's contract for this process's role, until completion.
#[allow(clippy::too_many_arguments)]
unsafe fn igatherv(
    c: &Communicator,
    sendbuf: *const c_void,
    sc: usize,
    st: Handle,
    recvbuf: *mut c_void,
    rc: &[usize],
    rd: &[isize],
    rt: Handle,
    root: InterRoot,
) -> MpiResult<Started> {
    match root {
        InterRoot::Null => nothing(c),
        InterRoot::Root => {
            let rty = Ty::for_use(rt)?;
            let b = Blocks::new(rc, rd, &rty, "receive")?;
            b.check_null(recvbuf, "receive")?;
            let mut all = vec![0u8; b.total];
            let regions = b.regions();
            // SAFETY: `all` moves into the unpacking step the request keeps.
            let r = unsafe {
                raw::inter_igatherv(c, std::ptr::null(), 0, all.as_mut_ptr(), &regions, root)?
            };
            let then = unpack_then(b, all, recvbuf, rty)?;
            Ok((r, keep(None, Vec::new(), None, Some(then))))
        }
        // SAFETY: the caller's contract.
        InterRoot::Remote(_) => unsafe {
            gather_contribution(c, "MPI_Igatherv", sendbuf, sc, st, root)
        },
    }
}

/// Start a scatterv (`sc`, `sd`: the root's).
///
/// # Safety
/// MPI_Iscatterv's contract for this process's role, until completion.
#[allow(clippy::too_many_arguments)]
unsafe fn iscatterv(
    c: &Communicator,
    sendbuf: *const c_void,
    sc: &[usize],
    sd: &[isize],
    st: Handle,
    recvbuf: *mut c_void,
    rc: usize,
    rt: Handle,
    root: InterRoot,
) -> MpiResult<Started> {
    match root {
        InterRoot::Null => nothing(c),
        InterRoot::Root => {
            let sty = Ty::for_use(st)?;
            let b = Blocks::new(sc, sd, &sty, "send")?;
            b.check_null(sendbuf, "send")?;
            // SAFETY: the caller's contract.
            let packed = unsafe { b.pack(sendbuf, &sty)? };
            let regions = b.regions();
            // SAFETY: `packed` moves into the request's staged data.
            let r = unsafe {
                raw::inter_iscatterv(c, packed.as_ptr(), &regions, std::ptr::null_mut(), 0, root)?
            };
            Ok((r, keep(None, vec![packed], None, None)))
        }
        // SAFETY: the caller's contract.
        InterRoot::Remote(_) => unsafe { scatter_share(c, "MPI_Iscatterv", recvbuf, rc, rt, root) },
    }
}

/// Start an allgatherv: this process's block goes to every remote process, remote rank j's
/// lands at `rd[j]`.
///
/// # Safety
/// MPI_Iallgatherv's contract, until completion.
#[allow(clippy::too_many_arguments)]
unsafe fn iallgatherv(
    c: &Communicator,
    sendbuf: *const c_void,
    sc: usize,
    st: Handle,
    recvbuf: *mut c_void,
    rc: &[usize],
    rd: &[isize],
    rt: Handle,
) -> MpiResult<Started> {
    no_in_place(sendbuf, "MPI_Iallgatherv")?;
    let rty = Ty::for_use(rt)?;
    let b = Blocks::new(rc, rd, &rty, "receive")?;
    b.check_null(recvbuf, "receive")?;
    // SAFETY: the caller's contract.
    let send = unsafe { send_n(sendbuf, sc, st, "send")? };
    let (at, len) = send.span();
    let mut all = vec![0u8; b.total];
    let regions = b.regions();
    // SAFETY: as above; `all` and a packed copy move into the request's staged data.
    let r = unsafe {
        raw::inter_ialltoallv(
            c,
            at.cast(),
            &vec![0..len; c.size()],
            all.as_mut_ptr(),
            &regions,
        )?
    };
    let then = unpack_then(b, all, recvbuf, rty)?;
    Ok((r, keep(Some(send), Vec::new(), None, Some(then))))
}

/// Start an alltoallv.
///
/// # Safety
/// MPI_Ialltoallv's contract, until completion.
#[allow(clippy::too_many_arguments)]
unsafe fn ialltoallv(
    c: &Communicator,
    sendbuf: *const c_void,
    sc: &[usize],
    sd: &[isize],
    st: Handle,
    recvbuf: *mut c_void,
    rc: &[usize],
    rd: &[isize],
    rt: Handle,
) -> MpiResult<Started> {
    no_in_place(sendbuf, "MPI_Ialltoallv")?;
    let (sty, rty) = (Ty::for_use(st)?, Ty::for_use(rt)?);
    let sb = Blocks::new(sc, sd, &sty, "send")?;
    let rb = Blocks::new(rc, rd, &rty, "receive")?;
    sb.check_null(sendbuf, "send")?;
    rb.check_null(recvbuf, "receive")?;
    // SAFETY: the caller's contract.
    let send = unsafe { sb.pack(sendbuf, &sty)? };
    let mut all = vec![0u8; rb.total];
    let rregions = rb.regions();
    // SAFETY: `send` and `all` move into the request's staged data.
    let r = unsafe {
        raw::inter_ialltoallv(c, send.as_ptr(), &sb.regions(), all.as_mut_ptr(), &rregions)?
    };
    let then = unpack_then(rb, all, recvbuf, rty)?;
    Ok((r, keep(None, vec![send], None, Some(then))))
}

/// Start an alltoallw (per remote process a count, a byte displacement and a datatype).
///
/// # Safety
/// MPI_Ialltoallw's contract, until completion.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn ialltoallw(
    c: &Communicator,
    sendbuf: *const c_void,
    sc: &[usize],
    sd: &[isize],
    st: &[Handle],
    recvbuf: *mut c_void,
    rc: &[usize],
    rd: &[isize],
    rt: &[Handle],
) -> MpiResult<Started> {
    no_in_place(sendbuf, "MPI_Ialltoallw")?;
    let sb = TypedBlocks::new(sc, sd, st, "send")?;
    let rb = TypedBlocks::new(rc, rd, rt, "receive")?;
    sb.check_null(sendbuf, "send")?;
    rb.check_null(recvbuf, "receive")?;
    // SAFETY: the caller's contract.
    let send = unsafe { sb.pack(sendbuf)? };
    let mut all = vec![0u8; rb.total];
    let rregions = rb.regions();
    // SAFETY: `send` and `all` move into the request's staged data.
    let r = unsafe {
        raw::inter_ialltoallv(c, send.as_ptr(), &sb.regions(), all.as_mut_ptr(), &rregions)?
    };
    let then: Box<dyn FnOnce()> = Box::new(move || {
        // SAFETY: MPI_Ialltoallw's contract, kept until completion (when this runs).
        unsafe { rb.unpack(&all, recvbuf) }
    });
    Ok((r, keep(None, vec![send], None, Some(then))))
}

/// Start a reduce-scatter: `counts[i]` elements of the remote group's reduction to local
/// rank i.
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
    no_in_place(sendbuf, fname)?;
    let me = c.local_comm().map_or(0, Communicator::rank);
    let total = counts
        .iter()
        .try_fold(0usize, |a, &k| a.checked_add(k))
        .ok_or_else(|| MpiError::new(MPI_ERR_COUNT, "the receive counts overflow"))?;
    let ty = Ty::for_use(dt)?;
    let red = reducer(op, dt, &ty)?;
    let bytes_op = raw_reduction(red)?;
    // Bytes of one instance in the reduction's layout (packed, or the program's extents).
    let inst = if red.raw_layout() {
        ty.raw_extent()?
    } else {
        ty.size()
    };
    let mut out = reduce_recv(&red, recvbuf, counts[me], &ty)?;
    // SAFETY: the caller's contract.
    let send = unsafe { reduce_send(&red, sendbuf, total, &ty)? };
    apart(&send, &out, fname)?;
    let bytes: Vec<usize> = counts.iter().map(|&k| k * inst).collect();
    let at = send.span().0.cast();
    // SAFETY: as above; library copies move into the request's staged data.
    let r = unsafe { raw::inter_ireduce_scatter(c, at, recv_ptr(&mut out), &bytes, bytes_op)? };
    Ok((r, keep(Some(send), Vec::new(), Some(out), None)))
}

// ---- the preparations, one per non-blocking collective (see the module docs) ----

/// The local group's size.
fn local_size(c: &Communicator) -> usize {
    c.local_comm().map_or(c.size(), Communicator::size)
}

/// `MPI_Ibarrier` / `MPI_Barrier_init` on an intercommunicator.
pub(crate) fn MPI_Ibarrier(_c: &Communicator) -> MpiResult<Start> {
    boxed(|c: &Communicator| Ok((raw::inter_ibarrier(c)?, None)))
}

fn bcast<W: Width>(
    c: &Communicator,
    buffer: *mut c_void,
    count: W::Count,
    dt: Handle,
    root: c_int,
) -> MpiResult<Start> {
    let root = inter_root(root, c.size())?;
    let n = W::count(count, "count")?;
    // SAFETY (of the start): the collective's contract.
    boxed(move |c: &Communicator| unsafe { ibcast(c, buffer, n, dt, root) })
}

/// `MPI_Ibcast` on an intercommunicator.
pub(crate) fn MPI_Ibcast(
    c: &Communicator,
    buffer: *mut c_void,
    count: c_int,
    dt: Handle,
    root: c_int,
) -> MpiResult<Start> {
    bcast::<Int>(c, buffer, count, dt, root)
}

/// `MPI_Ibcast_c` on an intercommunicator.
pub(crate) fn MPI_Ibcast_c(
    c: &Communicator,
    buffer: *mut c_void,
    count: MPI_Count,
    dt: Handle,
    root: c_int,
) -> MpiResult<Start> {
    bcast::<Large>(c, buffer, count, dt, root)
}

#[allow(clippy::too_many_arguments)]
fn reduction<W: Width>(
    fname: &'static str,
    c: &Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: W::Count,
    dt: Handle,
    op: Handle,
    root: Option<c_int>,
) -> MpiResult<Start> {
    let root = root.map(|r| inter_root(r, c.size())).transpose()?;
    let n = W::count(count, "count")?;
    // SAFETY (of the start): the collective's contract.
    boxed(move |c: &Communicator| unsafe {
        ireduction(fname, c, sendbuf, recvbuf, n, dt, op, root)
    })
}

macro_rules! reductions {
    ($w:ty, $cnt:ty, $ireduce:ident, $iallreduce:ident, $iscan:ident, $iexscan:ident) => {
        #[doc = concat!("`", stringify!($ireduce), "` on an intercommunicator.")]
        pub(crate) fn $ireduce(
            c: &Communicator,
            sendbuf: *const c_void,
            recvbuf: *mut c_void,
            count: $cnt,
            dt: Handle,
            op: Handle,
            root: c_int,
        ) -> MpiResult<Start> {
            reduction::<$w>(
                stringify!($ireduce),
                c,
                sendbuf,
                recvbuf,
                count,
                dt,
                op,
                Some(root),
            )
        }

        #[doc = concat!("`", stringify!($iallreduce), "` on an intercommunicator.")]
        pub(crate) fn $iallreduce(
            c: &Communicator,
            sendbuf: *const c_void,
            recvbuf: *mut c_void,
            count: $cnt,
            dt: Handle,
            op: Handle,
        ) -> MpiResult<Start> {
            reduction::<$w>(
                stringify!($iallreduce),
                c,
                sendbuf,
                recvbuf,
                count,
                dt,
                op,
                None,
            )
        }

        #[doc = concat!("`", stringify!($iscan), "`: refused on an intercommunicator.")]
        pub(crate) fn $iscan(
            _c: &Communicator,
            _sendbuf: *const c_void,
            _recvbuf: *mut c_void,
            _count: $cnt,
            _dt: Handle,
            _op: Handle,
        ) -> MpiResult<Start> {
            refuse_prefix(stringify!($iscan))
        }

        #[doc = concat!("`", stringify!($iexscan), "`: refused on an intercommunicator.")]
        pub(crate) fn $iexscan(
            _c: &Communicator,
            _sendbuf: *const c_void,
            _recvbuf: *mut c_void,
            _count: $cnt,
            _dt: Handle,
            _op: Handle,
        ) -> MpiResult<Start> {
            refuse_prefix(stringify!($iexscan))
        }
    };
}

reductions!(
    Int,
    c_int,
    MPI_Ireduce,
    MPI_Iallreduce,
    MPI_Iscan,
    MPI_Iexscan
);
reductions!(
    Large,
    MPI_Count,
    MPI_Ireduce_c,
    MPI_Iallreduce_c,
    MPI_Iscan_c,
    MPI_Iexscan_c
);

/// Which block collective a [`block`] preparation starts.
#[derive(Clone, Copy)]
enum BlockKind {
    Gather,
    Scatter,
    Allgather,
    Alltoall,
}

#[allow(clippy::too_many_arguments)]
fn block<W: Width>(
    kind: BlockKind,
    c: &Communicator,
    sendbuf: *const c_void,
    sendcount: W::Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: W::Count,
    recvtype: Handle,
    root: Option<c_int>,
) -> MpiResult<Start> {
    let root = root.map(|r| inter_root(r, c.size())).transpose()?;
    // Only the counts this process's role uses are significant (and checked).
    let (uses_send, uses_recv) = match (kind, root) {
        (_, Some(InterRoot::Null)) => (false, false),
        (BlockKind::Gather, Some(InterRoot::Root))
        | (BlockKind::Scatter, Some(InterRoot::Remote(_))) => (false, true),
        (BlockKind::Gather, _) | (BlockKind::Scatter, _) => (true, false),
        _ => (true, true),
    };
    let sc = if uses_send {
        W::count(sendcount, "send count")?
    } else {
        0
    };
    let rc = if uses_recv {
        W::count(recvcount, "receive count")?
    } else {
        0
    };
    let root = root.unwrap_or(InterRoot::Null);
    // SAFETY (of the start): the collective's contract.
    boxed(move |c: &Communicator| unsafe {
        match kind {
            BlockKind::Gather => igather(c, sendbuf, sc, sendtype, recvbuf, rc, recvtype, root),
            BlockKind::Scatter => iscatter(c, sendbuf, sc, sendtype, recvbuf, rc, recvtype, root),
            BlockKind::Allgather => iexchange(
                "MPI_Iallgather",
                c,
                sendbuf,
                sc,
                sendtype,
                recvbuf,
                rc,
                recvtype,
                false,
            ),
            BlockKind::Alltoall => iexchange(
                "MPI_Ialltoall",
                c,
                sendbuf,
                sc,
                sendtype,
                recvbuf,
                rc,
                recvtype,
                true,
            ),
        }
    })
}

macro_rules! blocks {
    ($w:ty, $cnt:ty, $gather:ident, $scatter:ident, $allgather:ident, $alltoall:ident) => {
        blocks!(@rooted $w, $cnt, $gather, BlockKind::Gather);
        blocks!(@rooted $w, $cnt, $scatter, BlockKind::Scatter);
        blocks!(@all $w, $cnt, $allgather, BlockKind::Allgather);
        blocks!(@all $w, $cnt, $alltoall, BlockKind::Alltoall);
    };
    (@rooted $w:ty, $cnt:ty, $name:ident, $kind:expr) => {
        #[doc = concat!("`", stringify!($name), "` on an intercommunicator.")]
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $name(
            c: &Communicator,
            sendbuf: *const c_void,
            sendcount: $cnt,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcount: $cnt,
            recvtype: Handle,
            root: c_int,
        ) -> MpiResult<Start> {
            block::<$w>($kind, c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, Some(root))
        }
    };
    (@all $w:ty, $cnt:ty, $name:ident, $kind:expr) => {
        #[doc = concat!("`", stringify!($name), "` on an intercommunicator.")]
        pub(crate) fn $name(
            c: &Communicator,
            sendbuf: *const c_void,
            sendcount: $cnt,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcount: $cnt,
            recvtype: Handle,
        ) -> MpiResult<Start> {
            block::<$w>($kind, c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, None)
        }
    };
}

blocks!(
    Int,
    c_int,
    MPI_Igather,
    MPI_Iscatter,
    MPI_Iallgather,
    MPI_Ialltoall
);
blocks!(
    Large,
    MPI_Count,
    MPI_Igather_c,
    MPI_Iscatter_c,
    MPI_Iallgather_c,
    MPI_Ialltoall_c
);

macro_rules! v_forms {
    ($w:ty, $cnt:ty, $arr:ty, $dsp:ty, $gv:ident, $sv:ident, $agv:ident, $atv:ident, $atw:ident,
     $rs:ident, $rsb:ident) => {
        #[doc = concat!("`", stringify!($gv), "` on an intercommunicator.")]
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $gv(
            c: &Communicator,
            sendbuf: *const c_void,
            sendcount: $cnt,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcounts: *const $arr,
            displs: *const $dsp,
            recvtype: Handle,
            root: c_int,
        ) -> MpiResult<Start> {
            let root = inter_root(root, c.size())?;
            let sc = match root {
                InterRoot::Remote(_) => <$w as Width>::count(sendcount, "send count")?,
                _ => 0,
            };
            // SAFETY: the collective's contract: the root's arrays hold one entry per
            // remote process.
            let (rc, rd) = unsafe {
                arrays::<$w>(recvcounts, displs, c.size(), "receive", root == InterRoot::Root)?
            };
            // SAFETY (of the start): the collective's contract.
            boxed(move |c: &Communicator| unsafe {
                igatherv(c, sendbuf, sc, sendtype, recvbuf, &rc, &rd, recvtype, root)
            })
        }

        #[doc = concat!("`", stringify!($sv), "` on an intercommunicator.")]
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $sv(
            c: &Communicator,
            sendbuf: *const c_void,
            sendcounts: *const $arr,
            displs: *const $dsp,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcount: $cnt,
            recvtype: Handle,
            root: c_int,
        ) -> MpiResult<Start> {
            let root = inter_root(root, c.size())?;
            let rc = match root {
                InterRoot::Remote(_) => <$w as Width>::count(recvcount, "receive count")?,
                _ => 0,
            };
            // SAFETY: the collective's contract: the root's arrays hold one entry per
            // remote process.
            let (sc, sd) = unsafe {
                arrays::<$w>(sendcounts, displs, c.size(), "send", root == InterRoot::Root)?
            };
            // SAFETY (of the start): the collective's contract.
            boxed(move |c: &Communicator| unsafe {
                iscatterv(c, sendbuf, &sc, &sd, sendtype, recvbuf, rc, recvtype, root)
            })
        }

        #[doc = concat!("`", stringify!($agv), "` on an intercommunicator.")]
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $agv(
            c: &Communicator,
            sendbuf: *const c_void,
            sendcount: $cnt,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcounts: *const $arr,
            displs: *const $dsp,
            recvtype: Handle,
        ) -> MpiResult<Start> {
            let sc = <$w as Width>::count(sendcount, "send count")?;
            // SAFETY: the collective's contract: one entry per remote process.
            let (rc, rd) = unsafe { arrays::<$w>(recvcounts, displs, c.size(), "receive", true)? };
            // SAFETY (of the start): the collective's contract.
            boxed(move |c: &Communicator| unsafe {
                iallgatherv(c, sendbuf, sc, sendtype, recvbuf, &rc, &rd, recvtype)
            })
        }

        #[doc = concat!("`", stringify!($atv), "` on an intercommunicator.")]
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $atv(
            c: &Communicator,
            sendbuf: *const c_void,
            sendcounts: *const $arr,
            sdispls: *const $dsp,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcounts: *const $arr,
            rdispls: *const $dsp,
            recvtype: Handle,
        ) -> MpiResult<Start> {
            let n = c.size();
            // SAFETY: the collective's contract: one entry per remote process.
            let ((sc, sd), (rc, rd)) = unsafe {
                (
                    arrays::<$w>(sendcounts, sdispls, n, "send", true)?,
                    arrays::<$w>(recvcounts, rdispls, n, "receive", true)?,
                )
            };
            // SAFETY (of the start): the collective's contract.
            boxed(move |c: &Communicator| unsafe {
                ialltoallv(c, sendbuf, &sc, &sd, sendtype, recvbuf, &rc, &rd, recvtype)
            })
        }

        #[doc = concat!("`", stringify!($atw), "` on an intercommunicator.")]
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $atw(
            c: &Communicator,
            sendbuf: *const c_void,
            sendcounts: *const $arr,
            sdispls: *const $dsp,
            sendtypes: *const Handle,
            recvbuf: *mut c_void,
            recvcounts: *const $arr,
            rdispls: *const $dsp,
            recvtypes: *const Handle,
        ) -> MpiResult<Start> {
            let n = c.size();
            // SAFETY: the collective's contract: one entry per remote process.
            let (sc, sd, st, rc, rd, rt) = unsafe {
                let (sc, sd) = arrays::<$w>(sendcounts, sdispls, n, "send", true)?;
                let (rc, rd) = arrays::<$w>(recvcounts, rdispls, n, "receive", true)?;
                let st = read_types(sendtypes, n, "send")?;
                let rt = read_types(recvtypes, n, "receive")?;
                (sc, sd, st, rc, rd, rt)
            };
            // SAFETY (of the start): the collective's contract.
            boxed(move |c: &Communicator| unsafe {
                ialltoallw(c, sendbuf, &sc, &sd, &st, recvbuf, &rc, &rd, &rt)
            })
        }

        #[doc = concat!("`", stringify!($rs), "` on an intercommunicator (one count per process of the local group).")]
        pub(crate) fn $rs(
            c: &Communicator,
            sendbuf: *const c_void,
            recvbuf: *mut c_void,
            recvcounts: *const $arr,
            dt: Handle,
            op: Handle,
        ) -> MpiResult<Start> {
            // SAFETY: the collective's contract: one count per process of the local group.
            let counts = unsafe { read_counts(recvcounts, local_size(c), "receive")? };
            // SAFETY (of the start): the collective's contract.
            boxed(move |c: &Communicator| unsafe {
                ireduce_scatter(stringify!($rs), c, sendbuf, recvbuf, &counts, dt, op)
            })
        }

        #[doc = concat!("`", stringify!($rsb), "` on an intercommunicator.")]
        pub(crate) fn $rsb(
            c: &Communicator,
            sendbuf: *const c_void,
            recvbuf: *mut c_void,
            recvcount: $cnt,
            dt: Handle,
            op: Handle,
        ) -> MpiResult<Start> {
            let k = <$w as Width>::count(recvcount, "receive count")?;
            let counts = vec![k; local_size(c)];
            // SAFETY (of the start): the collective's contract.
            boxed(move |c: &Communicator| unsafe {
                ireduce_scatter(stringify!($rsb), c, sendbuf, recvbuf, &counts, dt, op)
            })
        }
    };
}

v_forms!(
    Int,
    c_int,
    c_int,
    c_int,
    MPI_Igatherv,
    MPI_Iscatterv,
    MPI_Iallgatherv,
    MPI_Ialltoallv,
    MPI_Ialltoallw,
    MPI_Ireduce_scatter,
    MPI_Ireduce_scatter_block
);
v_forms!(
    Large,
    MPI_Count,
    MPI_Count,
    MPI_Aint,
    MPI_Igatherv_c,
    MPI_Iscatterv_c,
    MPI_Iallgatherv_c,
    MPI_Ialltoallv_c,
    MPI_Ialltoallw_c,
    MPI_Ireduce_scatter_c,
    MPI_Ireduce_scatter_block_c
);
