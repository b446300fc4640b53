//! The neighbourhood collectives: `MPI_Neighbor_allgather(v)` and
//! `MPI_Neighbor_alltoall(v,w)`, blocking, non-blocking (`MPI_Ineighbor_*`) and persistent
//! (`MPI_Neighbor_*_init`), with their large-count `_c` forms, over [`rmca::raw::ineighbor`]
//! on the communicator's topology (`MPI_ERR_TOPOLOGY` without one).
//!
//! The neighbours are the topology's, in MPI's order (see [`rmca::topo`]); a Cartesian
//! neighbour that is `MPI_PROC_NULL` takes no part and its receive block is left untouched,
//! and the block sent towards +1 of a dimension arrives as the receiver's block from -1 even
//! when both neighbours are one process (MPI 4.1, as MPICH).
//! Every block goes through library memory: the blocks sent are packed when the operation
//! starts (at each `MPI_Start` for a persistent one), the blocks received are unpacked into
//! the program's layout when it completes. Non-blocking and persistent requests work in
//! every completion call, like the other collective requests.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};
use std::ops::Range;

use rmca::raw::{self, RawRequest};

use super::topo::topology;
use super::types::Ty;
use super::{call, put, Staged};
use crate::abi::*;
use crate::state::{self, CollStart, MpiError, MpiResult, Persistent, ReqEntry, ReqState};
use rmca_mpi_export::export;

/// One block in the program's memory: `count` elements of `ty` at `addr`.
#[derive(Clone)]
struct Block {
    addr: usize,
    count: usize,
    ty: Ty,
}

/// The blocks of one neighbourhood collective, as the program gave them: kept by a
/// persistent request for each start.
#[derive(Clone)]
struct Args {
    /// One block per destination (`None`: `MPI_PROC_NULL`), or (`same`) one block sent to
    /// every destination.
    sends: Vec<(Option<usize>, Block)>,
    same: Option<Block>,
    /// One block per source.
    recvs: Vec<(Option<usize>, Block)>,
    /// The order the destination blocks are sent in (see
    /// [`rmca::topo::Neighbors::send_order`]).
    order: Vec<usize>,
}

/// The library memory of a started neighbourhood collective: the packed blocks it sends, the
/// buffer it receives into, and where each received block goes in the program's memory.
pub struct Exchange {
    send: Vec<u8>,
    recv: Vec<u8>,
    unpack: Vec<(Block, Range<usize>)>,
}

impl Exchange {
    /// Unpack the received blocks into the program's buffers.
    ///
    /// # Safety
    /// The collective completed; the program's receive buffers are valid and not otherwise
    /// accessed during the call.
    pub(crate) unsafe fn finish(&self) {
        for (b, r) in &self.unpack {
            // SAFETY: the caller's contract; the block is `count` elements of `ty` there.
            unsafe {
                b.ty.unpack(&self.recv[r.clone()], b.addr as *mut c_void, b.count)
            };
        }
    }

    /// Does completing it write the program's buffer?
    pub(crate) fn unpacks(&self) -> bool {
        !self.unpack.is_empty()
    }
}

fn err(class: c_int, msg: impl Into<String>) -> MpiError {
    MpiError::new(class, msg)
}

/// A block of `count` elements of `ty` at `buf`, checked (NULL with data to move, or
/// `MPI_IN_PLACE`, which no neighbourhood collective takes).
fn block(buf: *const c_void, count: i64, ty: &Ty, what: &str) -> MpiResult<Block> {
    let count = usize::try_from(count)
        .map_err(|_| err(MPI_ERR_COUNT, format!("{what} count {count} is negative")))?;
    let len = ty.packed_len(count)?;
    if buf as usize == MPI_IN_PLACE {
        return Err(err(
            MPI_ERR_BUFFER,
            "MPI_IN_PLACE is not valid for a neighbourhood collective",
        ));
    }
    if len > 0 && buf.is_null() {
        return Err(err(
            MPI_ERR_BUFFER,
            format!("{what} buffer is NULL with {count} elements to transfer"),
        ));
    }
    Ok(Block {
        addr: buf as usize,
        count,
        ty: ty.clone(),
    })
}

/// `buf` advanced by `elems` elements of `ty` (displacements in elements), or by `bytes`.
fn at(buf: *const c_void, elems: i64, ty: &Ty) -> *const c_void {
    (buf as *const u8).wrapping_offset((elems as isize).wrapping_mul(ty.extent())) as *const c_void
}

fn at_bytes(buf: *const c_void, bytes: i64) -> *const c_void {
    (buf as *const u8).wrapping_offset(bytes as isize) as *const c_void
}

/// Read `n` values of a C array as `i64` (checked non-null when `n` > 0).
///
/// # Safety
/// `p` holds `n` values.
unsafe fn arr<T: Copy + TryInto<i64>>(p: *const T, n: usize, what: &str) -> MpiResult<Vec<i64>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(err(MPI_ERR_ARG, format!("the {what} array is NULL")));
    }
    // SAFETY: the caller's contract; non-null checked.
    let v = unsafe { std::slice::from_raw_parts(p, n) };
    Ok(v.iter()
        .map(|&x| x.try_into().unwrap_or(i64::MAX))
        .collect())
}

/// Read `n` datatype handles (checked) of a C array.
///
/// # Safety
/// `p` holds `n` handles.
unsafe fn types(p: *const Handle, n: usize, what: &str) -> MpiResult<Vec<Ty>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(err(MPI_ERR_ARG, format!("the {what} array is NULL")));
    }
    // SAFETY: the caller's contract; non-null checked.
    let v = unsafe { std::slice::from_raw_parts(p, n) };
    v.iter().map(|&h| Ty::for_use(h)).collect()
}

/// The communicator of `comm` and its neighbours: sources, destinations, the order the
/// destinations' blocks are sent in.
type Hood = (
    rmca::Communicator,
    Vec<Option<usize>>,
    Vec<Option<usize>>,
    Vec<usize>,
);

fn hood(comm: Handle) -> MpiResult<Hood> {
    let (c, t) = topology(comm)?;
    let nb = t.neighbors(c.rank())?;
    let order = nb.send_order();
    Ok((c, nb.sources, nb.destinations, order))
}

/// Start the exchange `a` on `c`: its request and library memory.
fn start(c: &rmca::Communicator, a: &Args) -> MpiResult<(RawRequest, Box<Exchange>)> {
    let mut send = Vec::new();
    let mut sends = Vec::with_capacity(a.sends.len());
    if let Some(b) = &a.same {
        // SAFETY: the program's block of `count` elements (checked by `block`); it is read
        // now, while the call runs.
        send = unsafe { b.ty.pack(b.addr as *const c_void, b.count)? };
        sends.extend(a.order.iter().map(|&i| (a.sends[i].0, 0..send.len())));
    } else {
        for (p, b) in a.order.iter().map(|&i| &a.sends[i]) {
            if p.is_none() {
                sends.push((None, 0..0));
                continue;
            }
            // SAFETY: as above.
            let data = unsafe { b.ty.pack(b.addr as *const c_void, b.count)? };
            sends.push((*p, send.len()..send.len() + data.len()));
            send.extend_from_slice(&data);
        }
    }
    let mut len = 0;
    let mut recvs = Vec::with_capacity(a.recvs.len());
    let mut unpack = Vec::new();
    for (p, b) in &a.recvs {
        if p.is_none() {
            recvs.push((None, 0..0));
            continue;
        }
        let n = b.ty.packed_len(b.count)?;
        recvs.push((*p, len..len + n));
        unpack.push((b.clone(), len..len + n));
        len += n;
    }
    let mut x = Box::new(Exchange {
        send,
        recv: vec![0; len],
        unpack,
    });
    // SAFETY: both buffers are the exchange's own, kept (their heap blocks do not move with
    // the box) until the request completed: by the caller's wait, or as the request's staged
    // data.
    let r = unsafe {
        raw::ineighbor(
            c,
            x.send.as_ptr(),
            x.send.len(),
            &sends,
            x.recv.as_mut_ptr(),
            x.recv.len(),
            &recvs,
        )?
    };
    Ok((r, x))
}

/// The blocking form: start, wait, unpack.
fn run(
    fname: &'static str,
    comm: Handle,
    args: impl FnOnce() -> MpiResult<(rmca::Communicator, Args)>,
) -> c_int {
    call(fname, comm, || {
        let (c, a) = args()?;
        let (r, x) = start(&c, &a)?;
        r.wait()?;
        // SAFETY: completed; MPI's contract: the receive buffers are the program's until
        // the call returns.
        unsafe { x.finish() };
        Ok(())
    })
}

/// The non-blocking form: start, and store the request at `request`.
fn irun(
    fname: &'static str,
    comm: Handle,
    request: *mut Handle,
    args: impl FnOnce() -> MpiResult<(rmca::Communicator, Args)>,
) -> c_int {
    call(fname, comm, || {
        if request.is_null() {
            return Err(err(MPI_ERR_ARG, "the request argument is NULL"));
        }
        let (c, a) = args()?;
        let (r, x) = start(&c, &a)?;
        let h = state::with(|s| {
            let h = s.add_request(ReqEntry::new(comm, ReqState::Active(r)))?;
            s.stage(h, Staged::Neighbor(x));
            Ok(h)
        })?;
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { put(request, h, "request") }
    })
}

/// The persistent form: an inactive request that each `MPI_Start` starts.
fn prun(
    fname: &'static str,
    comm: Handle,
    request: *mut Handle,
    args: impl FnOnce() -> MpiResult<(rmca::Communicator, Args)>,
) -> c_int {
    call(fname, comm, || {
        if request.is_null() {
            return Err(err(MPI_ERR_ARG, "the request argument is NULL"));
        }
        let (c, a) = args()?;
        // Its place in the collective order is taken at init (MPI orders the inits, not the
        // starts): see pcoll.rs.
        let slot = c.reserve_coll_slot();
        let begin = CollStart(std::rc::Rc::new(move |c: &rmca::Communicator| {
            rmca::coll::nonblocking::in_slot(slot, || {
                let (r, x) = start(c, &a)?;
                Ok((r, Some(Staged::Neighbor(x))))
            })
        }));
        let h = state::with(|s| {
            let mut e = ReqEntry::new(comm, ReqState::Inactive);
            e.persistent = Some(Box::new(Persistent::Coll(begin)));
            s.add_request(e)
        })?;
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { put(request, h, "request") }
    })
}

// The arguments of each operation: the same checks for the three forms and both count
// widths.

/// # Safety
/// The buffers hold the blocks the counts and types describe.
#[allow(clippy::too_many_arguments)]
unsafe fn allgather(
    comm: Handle,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: Handle,
) -> MpiResult<(rmca::Communicator, Args)> {
    let (c, sources, dests, order) = hood(comm)?;
    let (st, rt) = (Ty::for_use(sendtype)?, Ty::for_use(recvtype)?);
    let same = block(sendbuf, sendcount, &st, "send")?;
    let recvs = (sources.iter().enumerate())
        .map(|(j, &p)| {
            let b = block(
                at(recvbuf, j as i64 * recvcount, &rt),
                recvcount,
                &rt,
                "receive",
            )?;
            Ok((p, b))
        })
        .collect::<MpiResult<_>>()?;
    let sends = dests.iter().map(|&p| (p, same.clone())).collect();
    Ok((
        c,
        Args {
            sends,
            same: Some(same),
            recvs,
            order,
        },
    ))
}

/// # Safety
/// `recvcounts` and `displs` hold indegree values.
#[allow(clippy::too_many_arguments)]
unsafe fn allgatherv<C: Copy + TryInto<i64>, D: Copy + TryInto<i64>>(
    comm: Handle,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    displs: *const D,
    recvtype: Handle,
) -> MpiResult<(rmca::Communicator, Args)> {
    let (c, sources, dests, order) = hood(comm)?;
    let (st, rt) = (Ty::for_use(sendtype)?, Ty::for_use(recvtype)?);
    let same = block(sendbuf, sendcount, &st, "send")?;
    let n = sources.len();
    // SAFETY: the caller's contract.
    let (counts, displs) =
        unsafe { (arr(recvcounts, n, "recvcounts")?, arr(displs, n, "displs")?) };
    let recvs = (sources.iter().enumerate())
        .map(|(j, &p)| {
            Ok((
                p,
                block(at(recvbuf, displs[j], &rt), counts[j], &rt, "receive")?,
            ))
        })
        .collect::<MpiResult<_>>()?;
    let sends = dests.iter().map(|&p| (p, same.clone())).collect();
    Ok((
        c,
        Args {
            sends,
            same: Some(same),
            recvs,
            order,
        },
    ))
}

/// # Safety
/// The buffers hold the blocks the counts and types describe.
#[allow(clippy::too_many_arguments)]
unsafe fn alltoall(
    comm: Handle,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: Handle,
) -> MpiResult<(rmca::Communicator, Args)> {
    let (c, sources, dests, order) = hood(comm)?;
    let (st, rt) = (Ty::for_use(sendtype)?, Ty::for_use(recvtype)?);
    let sends = (dests.iter().enumerate())
        .map(|(i, &p)| {
            Ok((
                p,
                block(
                    at(sendbuf, i as i64 * sendcount, &st),
                    sendcount,
                    &st,
                    "send",
                )?,
            ))
        })
        .collect::<MpiResult<_>>()?;
    let recvs = (sources.iter().enumerate())
        .map(|(j, &p)| {
            Ok((
                p,
                block(
                    at(recvbuf, j as i64 * recvcount, &rt),
                    recvcount,
                    &rt,
                    "receive",
                )?,
            ))
        })
        .collect::<MpiResult<_>>()?;
    Ok((
        c,
        Args {
            sends,
            same: None,
            recvs,
            order,
        },
    ))
}

/// # Safety
/// The send arrays hold outdegree values, the receive ones indegree.
#[allow(clippy::too_many_arguments)]
unsafe fn alltoallv<C: Copy + TryInto<i64>, D: Copy + TryInto<i64>>(
    comm: Handle,
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const D,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const D,
    recvtype: Handle,
) -> MpiResult<(rmca::Communicator, Args)> {
    let (c, sources, dests, order) = hood(comm)?;
    let (st, rt) = (Ty::for_use(sendtype)?, Ty::for_use(recvtype)?);
    let (ni, no) = (sources.len(), dests.len());
    // SAFETY: the caller's contract.
    let (sc, sd, rc, rd) = unsafe {
        (
            arr(sendcounts, no, "sendcounts")?,
            arr(sdispls, no, "sdispls")?,
            arr(recvcounts, ni, "recvcounts")?,
            arr(rdispls, ni, "rdispls")?,
        )
    };
    let sends = (dests.iter().enumerate())
        .map(|(i, &p)| Ok((p, block(at(sendbuf, sd[i], &st), sc[i], &st, "send")?)))
        .collect::<MpiResult<_>>()?;
    let recvs = (sources.iter().enumerate())
        .map(|(j, &p)| Ok((p, block(at(recvbuf, rd[j], &rt), rc[j], &rt, "receive")?)))
        .collect::<MpiResult<_>>()?;
    Ok((
        c,
        Args {
            sends,
            same: None,
            recvs,
            order,
        },
    ))
}

/// # Safety
/// The send arrays hold outdegree values, the receive ones indegree (displacements in
/// bytes).
#[allow(clippy::too_many_arguments)]
unsafe fn alltoallw<C: Copy + TryInto<i64>>(
    comm: Handle,
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const MPI_Aint,
    sendtypes: *const Handle,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const MPI_Aint,
    recvtypes: *const Handle,
) -> MpiResult<(rmca::Communicator, Args)> {
    let (c, sources, dests, order) = hood(comm)?;
    let (ni, no) = (sources.len(), dests.len());
    // SAFETY: the caller's contract.
    let (sc, sd, st, rc, rd, rt) = unsafe {
        (
            arr(sendcounts, no, "sendcounts")?,
            arr(sdispls, no, "sdispls")?,
            types(sendtypes, no, "sendtypes")?,
            arr(recvcounts, ni, "recvcounts")?,
            arr(rdispls, ni, "rdispls")?,
            types(recvtypes, ni, "recvtypes")?,
        )
    };
    let sends = (dests.iter().enumerate())
        .map(|(i, &p)| Ok((p, block(at_bytes(sendbuf, sd[i]), sc[i], &st[i], "send")?)))
        .collect::<MpiResult<_>>()?;
    let recvs = (sources.iter().enumerate())
        .map(|(j, &p)| {
            Ok((
                p,
                block(at_bytes(recvbuf, rd[j]), rc[j], &rt[j], "receive")?,
            ))
        })
        .collect::<MpiResult<_>>()?;
    Ok((
        c,
        Args {
            sends,
            same: None,
            recvs,
            order,
        },
    ))
}

/// The three forms (blocking, `I`, `_init`) of a neighbourhood collective for one count
/// width: `$args` builds its [`Args`] from the parameters.
macro_rules! neighbor_fns {
    ($block:ident, $nb:ident, $init:ident, ($($p:ident: $t:ty),*), |$comm:ident| $args:expr) => {
        #[doc = concat!("`", stringify!($block), "`.")]
        #[export]
        pub unsafe extern "C" fn $block($($p: $t,)* $comm: Handle) -> c_int {
            // SAFETY: the function's MPI contract (the arrays and buffers it names).
            run(stringify!($block), $comm, || unsafe { $args })
        }

        #[doc = concat!("`", stringify!($nb), "`.")]
        #[export]
        pub unsafe extern "C" fn $nb($($p: $t,)* $comm: Handle, request: *mut Handle) -> c_int {
            // SAFETY: as above, the buffers until completion.
            irun(stringify!($nb), $comm, request, || unsafe { $args })
        }

        #[doc = concat!("`", stringify!($init), "`: a persistent request, started by `MPI_Start`.")]
        #[export]
        pub unsafe extern "C" fn $init(
            $($p: $t,)*
            $comm: Handle,
            _info: Handle,
            request: *mut Handle,
        ) -> c_int {
            // SAFETY: as above, the buffers while the request lives.
            prun(stringify!($init), $comm, request, || unsafe { $args })
        }
    };
}

neighbor_fns!(
    MPI_Neighbor_allgather, MPI_Ineighbor_allgather, MPI_Neighbor_allgather_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle),
    |comm| allgather(comm, sendbuf, i64::from(sendcount), sendtype, recvbuf, i64::from(recvcount), recvtype)
);
neighbor_fns!(
    MPI_Neighbor_allgather_c, MPI_Ineighbor_allgather_c, MPI_Neighbor_allgather_init_c,
    (sendbuf: *const c_void, sendcount: MPI_Count, sendtype: Handle, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: Handle),
    |comm| allgather(comm, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype)
);
neighbor_fns!(
    MPI_Neighbor_allgatherv, MPI_Ineighbor_allgatherv, MPI_Neighbor_allgatherv_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: Handle),
    |comm| allgatherv(comm, sendbuf, i64::from(sendcount), sendtype, recvbuf, recvcounts, displs, recvtype)
);
neighbor_fns!(
    MPI_Neighbor_allgatherv_c, MPI_Ineighbor_allgatherv_c, MPI_Neighbor_allgatherv_init_c,
    (sendbuf: *const c_void, sendcount: MPI_Count, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const MPI_Count, displs: *const MPI_Aint, recvtype: Handle),
    |comm| allgatherv(comm, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype)
);
neighbor_fns!(
    MPI_Neighbor_alltoall, MPI_Ineighbor_alltoall, MPI_Neighbor_alltoall_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle),
    |comm| alltoall(comm, sendbuf, i64::from(sendcount), sendtype, recvbuf, i64::from(recvcount), recvtype)
);
neighbor_fns!(
    MPI_Neighbor_alltoall_c, MPI_Ineighbor_alltoall_c, MPI_Neighbor_alltoall_init_c,
    (sendbuf: *const c_void, sendcount: MPI_Count, sendtype: Handle, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: Handle),
    |comm| alltoall(comm, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype)
);
neighbor_fns!(
    MPI_Neighbor_alltoallv, MPI_Ineighbor_alltoallv, MPI_Neighbor_alltoallv_init,
    (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: Handle),
    |comm| alltoallv(comm, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype)
);
neighbor_fns!(
    MPI_Neighbor_alltoallv_c, MPI_Ineighbor_alltoallv_c, MPI_Neighbor_alltoallv_init_c,
    (sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint, sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const MPI_Count, rdispls: *const MPI_Aint, recvtype: Handle),
    |comm| alltoallv(comm, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype)
);
neighbor_fns!(
    MPI_Neighbor_alltoallw, MPI_Ineighbor_alltoallw, MPI_Neighbor_alltoallw_init,
    (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const MPI_Aint, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const MPI_Aint, recvtypes: *const Handle),
    |comm| alltoallw(comm, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes)
);
neighbor_fns!(
    MPI_Neighbor_alltoallw_c, MPI_Ineighbor_alltoallw_c, MPI_Neighbor_alltoallw_init_c,
    (sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint, sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const MPI_Count, rdispls: *const MPI_Aint, recvtypes: *const Handle),
    |comm| alltoallw(comm, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes)
);
