//! The collectives with per-rank counts (gatherv, scatterv, allgatherv, alltoallv, and
//! alltoallw with per-rank datatypes too), reduce-scatter and
//! the prefix reductions (scan, exscan), with `MPI_IN_PLACE`, on any committed datatype.
//!
//! The per-rank blocks are packed back to back in a buffer of the library's own (block r
//! at the sum of the earlier blocks' bytes), which the rmca collective moves; they are
//! unpacked to (or packed from) `displs[r]` extents of the datatype in the program's
//! buffer.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};

use super::coll::{blocks_of, in_place, reduce_input, reduce_recv, root_of};
use super::op::{element_size, reduce, reducer, Coll};
use super::types::Ty;
use super::{call, communicator, recv_data, send_data, RecvData};
use crate::abi::*;
use crate::state::{MpiError, MpiResult};
use rmca_mpi_export::export;

/// One side's per-rank blocks: (count, displacement in extents) per rank, and their packed
/// byte counts and offsets.
struct Blocks {
    counts: Vec<usize>,
    displs: Vec<isize>,
    packed_counts: Vec<usize>,
    packed_displs: Vec<usize>,
    total: usize,
}

/// Read `n` counts and displacements.
///
/// # Safety
/// `counts` and `displs` hold `n` ints each (checked non-null).
unsafe fn blocks(
    counts: *const c_int,
    displs: *const c_int,
    n: usize,
    ty: &Ty,
    side: &str,
) -> MpiResult<Blocks> {
    if counts.is_null() || displs.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            format!("the {side} counts or displacements array is NULL"),
        ));
    }
    let mut b = Blocks {
        counts: Vec::with_capacity(n),
        displs: Vec::with_capacity(n),
        packed_counts: Vec::with_capacity(n),
        packed_displs: Vec::with_capacity(n),
        total: 0,
    };
    for r in 0..n {
        // SAFETY: the caller's contract.
        let (c, d) = unsafe { (counts.add(r).read(), displs.add(r).read()) };
        let c = usize::try_from(c).map_err(|_| {
            MpiError::new(
                MPI_ERR_COUNT,
                format!("{side} count {c} of rank {r} is negative: counts are >= 0"),
            )
        })?;
        let bytes = ty.packed_len(c)?;
        b.counts.push(c);
        b.displs.push(d as isize);
        b.packed_counts.push(bytes);
        b.packed_displs.push(b.total);
        b.total = b
            .total
            .checked_add(bytes)
            .ok_or_else(|| MpiError::new(MPI_ERR_COUNT, format!("the {side} counts overflow")))?;
    }
    Ok(b)
}

/// The address of `displ` extents of `ty` from `buf`.
fn at(buf: *const c_void, displ: isize, ty: &Ty) -> MpiResult<*const c_void> {
    let ext = ty.extent();
    let off = displ.checked_mul(ext).ok_or_else(|| {
        MpiError::new(
            MPI_ERR_ARG,
            format!("displacement {displ} x extent {ext} overflows"),
        )
    })?;
    Ok(buf.cast::<u8>().wrapping_offset(off).cast())
}

impl Blocks {
    /// Pack every block from the program's buffer.
    ///
    /// # Safety
    /// `buf` holds every block (the collective's contract).
    unsafe fn pack(&self, buf: *const c_void, ty: &Ty) -> MpiResult<Vec<u8>> {
        let mut out = Vec::with_capacity(self.total);
        for r in 0..self.counts.len() {
            // SAFETY: the caller's contract.
            out.extend(unsafe { ty.pack(at(buf, self.displs[r], ty)?, self.counts[r])? });
        }
        Ok(out)
    }

    /// Unpack every block (but `skip`) into the program's buffer.
    ///
    /// # Safety
    /// `buf` holds every block and is not otherwise accessed during the call.
    unsafe fn unpack(
        &self,
        packed: &[u8],
        buf: *mut c_void,
        ty: &Ty,
        skip: Option<usize>,
    ) -> MpiResult<()> {
        for r in 0..self.counts.len() {
            if skip == Some(r) {
                continue;
            }
            let (p, len) = (self.packed_displs[r], self.packed_counts[r]);
            let dst = at(buf, self.displs[r], ty)?.cast_mut();
            // SAFETY: the caller's contract.
            unsafe { ty.unpack(&packed[p..p + len], dst, self.counts[r]) };
        }
        Ok(())
    }

    fn check_null(&self, buf: *const c_void, side: &str) -> MpiResult<()> {
        if self.total > 0 && buf.is_null() {
            return Err(MpiError::new(
                MPI_ERR_BUFFER,
                format!("the {side} buffer is NULL"),
            ));
        }
        Ok(())
    }
}

fn same_len(send: usize, recv: usize, rank: usize, fname: &str) -> MpiResult<()> {
    if send != recv {
        return Err(MpiError::new(
            MPI_ERR_COUNT,
            format!("{fname}: rank {rank} sends {send} B but its receive block holds {recv} B (type signatures must match)"),
        ));
    }
    Ok(())
}

/// `MPI_Gatherv`.
#[export]
pub unsafe extern "C" fn MPI_Gatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Gatherv", comm, || {
        let c = communicator(comm)?;
        let (n, me) = (c.size(), c.rank());
        let root = root_of(root, n)?;
        if me != root {
            // SAFETY: MPI_Gatherv's contract: sendbuf holds `sendcount` elements.
            let send = unsafe { send_data(sendbuf, sendcount, sendtype, "send")? };
            // SAFETY: as above.
            c.gatherv(unsafe { send.bytes() }, None, &[], &[], root)?;
            return Ok(());
        }
        let rty = Ty::for_use(recvtype)?;
        // SAFETY: MPI_Gatherv's contract: the root's counts and displacements hold one int
        // per rank, recvbuf every block, sendbuf `sendcount` elements.
        unsafe {
            let b = blocks(recvcounts, displs, n, &rty, "receive")?;
            b.check_null(recvbuf, "receive")?;
            let mut all = vec![0u8; b.total];
            let own = if in_place(sendbuf) {
                rty.pack(at(recvbuf, b.displs[me], &rty)?, b.counts[me])?
            } else {
                let send = send_data(sendbuf, sendcount, sendtype, "send")?;
                same_len(send.len(), b.packed_counts[me], me, "MPI_Gatherv")?;
                send.bytes().to_vec()
            };
            c.gatherv(
                &own,
                Some(&mut all),
                &b.packed_counts,
                &b.packed_displs,
                root,
            )?;
            let skip = in_place(sendbuf).then_some(me);
            b.unpack(&all, recvbuf, &rty, skip)?;
        }
        Ok(())
    })
}

/// `MPI_Scatterv`.
#[export]
pub unsafe extern "C" fn MPI_Scatterv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Scatterv", comm, || {
        let c = communicator(comm)?;
        let (n, me) = (c.size(), c.rank());
        let root = root_of(root, n)?;
        if me != root {
            let mut recv = recv_data(recvbuf, recvcount, recvtype, "receive")?;
            // SAFETY: MPI_Scatterv's contract: recvbuf holds `recvcount` elements.
            unsafe {
                c.scatterv(None, &[], &[], recv.bytes_mut(), root)?;
                recv.finish(recv.len());
            }
            return Ok(());
        }
        let sty = Ty::for_use(sendtype)?;
        // SAFETY: MPI_Scatterv's contract: the root's counts and displacements hold one int
        // per rank, sendbuf every block, recvbuf `recvcount` elements.
        unsafe {
            let b = blocks(sendcounts, displs, n, &sty, "send")?;
            b.check_null(sendbuf, "send")?;
            let packed = b.pack(sendbuf, &sty)?;
            if in_place(recvbuf) {
                // The root's block stays where it is.
                let mut own = vec![0u8; b.packed_counts[me]];
                c.scatterv(
                    Some(&packed),
                    &b.packed_counts,
                    &b.packed_displs,
                    &mut own,
                    root,
                )?;
            } else {
                let mut recv = recv_data(recvbuf, recvcount, recvtype, "receive")?;
                same_len(b.packed_counts[me], recv.len(), me, "MPI_Scatterv")?;
                c.scatterv(
                    Some(&packed),
                    &b.packed_counts,
                    &b.packed_displs,
                    recv.bytes_mut(),
                    root,
                )?;
                recv.finish(recv.len());
            }
        }
        Ok(())
    })
}

/// `MPI_Allgatherv`.
#[export]
pub unsafe extern "C" fn MPI_Allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Allgatherv", comm, || {
        let c = communicator(comm)?;
        let (n, me) = (c.size(), c.rank());
        let rty = Ty::for_use(recvtype)?;
        // SAFETY: MPI_Allgatherv's contract: counts and displacements hold one int per
        // rank, recvbuf every block, sendbuf `sendcount` elements.
        unsafe {
            let b = blocks(recvcounts, displs, n, &rty, "receive")?;
            b.check_null(recvbuf, "receive")?;
            let mut all = vec![0u8; b.total];
            let own = if in_place(sendbuf) {
                rty.pack(at(recvbuf, b.displs[me], &rty)?, b.counts[me])?
            } else {
                let send = send_data(sendbuf, sendcount, sendtype, "send")?;
                same_len(send.len(), b.packed_counts[me], me, "MPI_Allgatherv")?;
                send.bytes().to_vec()
            };
            c.allgatherv(&own, &mut all, &b.packed_counts, &b.packed_displs)?;
            let skip = in_place(sendbuf).then_some(me);
            b.unpack(&all, recvbuf, &rty, skip)?;
        }
        Ok(())
    })
}

/// A reduction whose input has `in_count` and whose result `out_count` instances of `dt`
/// (`MPI_IN_PLACE` as sendbuf: the input is in recvbuf, the result lands at its start).
///
/// # Safety
/// The collective's contract for both buffers.
#[allow(clippy::too_many_arguments)]
unsafe fn reduction(
    fname: &str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    in_count: usize,
    out_count: usize,
    dt: Handle,
    op: Handle,
    comm: Handle,
    coll: Coll<'_>,
) -> MpiResult<()> {
    let c = communicator(comm)?;
    let ty = Ty::for_use(dt)?;
    let r = reducer(op, dt, &ty)?;
    // SAFETY: the caller's contract.
    unsafe {
        let (input, mut out) = if in_place(sendbuf) {
            let mut whole = reduce_recv(&r, recvbuf, in_count, &ty)?;
            whole.load()?;
            let input = whole.bytes_mut().to_vec();
            (input, reduce_recv(&r, recvbuf, out_count, &ty)?)
        } else {
            let mut out = reduce_recv(&r, recvbuf, out_count, &ty)?;
            if matches!(coll, Coll::Exscan) {
                // Rank 0's result is left as it was: keep it through the staging.
                out.load()?;
            }
            (
                reduce_input(&r, sendbuf, &mut out, in_count, &ty, fname)?,
                out,
            )
        };
        reduce(&c, coll, &input, Some(out.bytes_mut()), r)?;
        finish(&mut out);
    }
    Ok(())
}

/// Unpack a reduction's result.
///
/// # Safety
/// The program's buffer is valid and not otherwise accessed.
unsafe fn finish(out: &mut RecvData) {
    // SAFETY: the caller's contract.
    unsafe { out.finish(out.len()) };
}

/// `MPI_Alltoallv` (`MPI_IN_PLACE` as sendbuf: the blocks to send are the receive blocks).
#[export]
pub unsafe extern "C" fn MPI_Alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Alltoallv", comm, || {
        let c = communicator(comm)?;
        let n = c.size();
        let rty = Ty::for_use(recvtype)?;
        // SAFETY: MPI_Alltoallv's contract: one count and displacement per rank on each side,
        // the buffers hold every block.
        unsafe {
            let rb = blocks(recvcounts, rdispls, n, &rty, "receive")?;
            rb.check_null(recvbuf, "receive")?;
            let (send, sb) = if in_place(sendbuf) {
                (rb.pack(recvbuf, &rty)?, None)
            } else {
                let sty = Ty::for_use(sendtype)?;
                let sb = blocks(sendcounts, sdispls, n, &sty, "send")?;
                sb.check_null(sendbuf, "send")?;
                (sb.pack(sendbuf, &sty)?, Some(sb))
            };
            let (sc, sd) = match &sb {
                Some(sb) => (&sb.packed_counts, &sb.packed_displs),
                None => (&rb.packed_counts, &rb.packed_displs),
            };
            let mut all = vec![0u8; rb.total];
            c.alltoallv(
                &send,
                sc,
                sd,
                &mut all,
                &rb.packed_counts,
                &rb.packed_displs,
            )?;
            rb.unpack(&all, recvbuf, &rty, None)?;
        }
        Ok(())
    })
}

/// `MPI_Reduce_scatter_block`.
#[export]
pub unsafe extern "C" fn MPI_Reduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    dt: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Reduce_scatter_block", comm, || {
        let n = communicator(comm)?.size();
        let (_, total, _) = blocks_of(recvcount, dt, n, "receive")?;
        let k = super::count(recvcount, "receive count")?;
        // SAFETY: MPI_Reduce_scatter_block's contract.
        unsafe {
            reduction(
                "MPI_Reduce_scatter_block",
                sendbuf,
                recvbuf,
                total,
                k,
                dt,
                op,
                comm,
                Coll::ReduceScatterBlock,
            )
        }
    })
}

/// `MPI_Reduce_scatter`.
#[export]
pub unsafe extern "C" fn MPI_Reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    dt: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Reduce_scatter", comm, || {
        let c = communicator(comm)?;
        let (n, me) = (c.size(), c.rank());
        if recvcounts.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the recvcounts array is NULL"));
        }
        let mut counts = Vec::with_capacity(n);
        for r in 0..n {
            // SAFETY: MPI_Reduce_scatter's contract: one count per rank.
            let v = unsafe { recvcounts.add(r).read() };
            counts.push(usize::try_from(v).map_err(|_| {
                MpiError::new(
                    MPI_ERR_COUNT,
                    format!("receive count {v} of rank {r} is negative: counts are >= 0"),
                )
            })?);
        }
        let total: usize = counts.iter().sum();
        let ty = Ty::for_use(dt)?;
        let r = reducer(op, dt, &ty)?;
        let inst = if r.raw_layout() {
            ty.extent() as usize
        } else {
            ty.size()
        };
        let per = inst / element_size(&r).max(1);
        let elems: Vec<usize> = counts.iter().map(|&k| k * per).collect();
        // SAFETY: MPI_Reduce_scatter's contract.
        unsafe {
            reduction(
                "MPI_Reduce_scatter",
                sendbuf,
                recvbuf,
                total,
                counts[me],
                dt,
                op,
                comm,
                Coll::ReduceScatter(&elems),
            )
        }
    })
}

macro_rules! prefix {
    ($name:ident, $coll:expr) => {
        #[doc = concat!("`", stringify!($name), "`.")]
        #[export]
        pub unsafe extern "C" fn $name(
            sendbuf: *const c_void,
            recvbuf: *mut c_void,
            count: c_int,
            dt: Handle,
            op: Handle,
            comm: Handle,
        ) -> c_int {
            call(stringify!($name), comm, || {
                let n = super::count(count, "count")?;
                // SAFETY: the prefix reduction's contract: both buffers hold `count`
                // elements.
                unsafe {
                    reduction(
                        stringify!($name),
                        sendbuf,
                        recvbuf,
                        n,
                        n,
                        dt,
                        op,
                        comm,
                        $coll,
                    )
                }
            })
        }
    };
}

prefix!(MPI_Scan, Coll::Scan);
prefix!(MPI_Exscan, Coll::Exscan);

/// One side of `MPI_Alltoallw`: per rank a count, a byte displacement and a datatype, and
/// the blocks' packed byte counts and offsets.
struct TypedBlocks {
    parts: Vec<(Ty, usize, isize)>,
    packed_counts: Vec<usize>,
    packed_displs: Vec<usize>,
    total: usize,
}

impl TypedBlocks {
    /// Read `n` counts, byte displacements and datatypes.
    ///
    /// # Safety
    /// The arrays hold `n` entries each (checked non-null).
    unsafe fn read(
        counts: *const c_int,
        displs: *const c_int,
        types: *const Handle,
        n: usize,
        side: &str,
    ) -> MpiResult<Self> {
        if counts.is_null() || displs.is_null() || types.is_null() {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("the {side} counts, displacements or datatypes array is NULL"),
            ));
        }
        let mut b = TypedBlocks {
            parts: Vec::with_capacity(n),
            packed_counts: Vec::with_capacity(n),
            packed_displs: Vec::with_capacity(n),
            total: 0,
        };
        for r in 0..n {
            // SAFETY: the caller's contract.
            let (c, d, t) = unsafe {
                (
                    counts.add(r).read(),
                    displs.add(r).read(),
                    types.add(r).read(),
                )
            };
            let c = usize::try_from(c).map_err(|_| {
                MpiError::new(
                    MPI_ERR_COUNT,
                    format!("{side} count {c} of rank {r} is negative: counts are >= 0"),
                )
            })?;
            let ty = Ty::for_use(t)?;
            let bytes = ty.packed_len(c)?;
            b.parts.push((ty, c, d as isize));
            b.packed_counts.push(bytes);
            b.packed_displs.push(b.total);
            b.total = b.total.checked_add(bytes).ok_or_else(|| {
                MpiError::new(MPI_ERR_COUNT, format!("the {side} counts overflow"))
            })?;
        }
        Ok(b)
    }

    /// Pack every block from the program's buffer.
    ///
    /// # Safety
    /// `buf` holds every block (the collective's contract).
    unsafe fn pack(&self, buf: *const c_void) -> MpiResult<Vec<u8>> {
        let mut out = Vec::with_capacity(self.total);
        for (ty, count, displ) in &self.parts {
            let from = buf.cast::<u8>().wrapping_offset(*displ).cast();
            // SAFETY: the caller's contract.
            out.extend(unsafe { ty.pack(from, *count)? });
        }
        Ok(out)
    }

    /// Unpack every block into the program's buffer.
    ///
    /// # Safety
    /// `buf` holds every block and is not otherwise accessed during the call.
    unsafe fn unpack(&self, packed: &[u8], buf: *mut c_void) {
        for (r, (ty, count, displ)) in self.parts.iter().enumerate() {
            let (p, len) = (self.packed_displs[r], self.packed_counts[r]);
            let dst = buf.cast::<u8>().wrapping_offset(*displ).cast();
            // SAFETY: the caller's contract.
            unsafe { ty.unpack(&packed[p..p + len], dst, *count) };
        }
    }

    fn check_null(&self, buf: *const c_void, side: &str) -> MpiResult<()> {
        if self.total > 0 && buf.is_null() {
            return Err(MpiError::new(
                MPI_ERR_BUFFER,
                format!("the {side} buffer is NULL"),
            ));
        }
        Ok(())
    }
}

/// `MPI_Alltoallw`: per-peer counts, byte displacements and datatypes (`MPI_IN_PLACE` as
/// sendbuf: the blocks to send are the receive blocks). Each block is packed into library
/// memory, the packed blocks move by the alltoallv schedule, and are unpacked with the
/// receive side's datatypes; a block's send and receive type signatures must match in size.
#[export]
pub unsafe extern "C" fn MPI_Alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Alltoallw", comm, || {
        let c = communicator(comm)?;
        let n = c.size();
        // SAFETY: MPI_Alltoallw's contract: one count, displacement and datatype per rank on
        // each side, the buffers hold every block.
        unsafe {
            let rb = TypedBlocks::read(recvcounts, rdispls, recvtypes, n, "receive")?;
            rb.check_null(recvbuf, "receive")?;
            let (send, sb) = if in_place(sendbuf) {
                (rb.pack(recvbuf)?, None)
            } else {
                let sb = TypedBlocks::read(sendcounts, sdispls, sendtypes, n, "send")?;
                sb.check_null(sendbuf, "send")?;
                (sb.pack(sendbuf)?, Some(sb))
            };
            let (sc, sd) = match &sb {
                Some(sb) => (&sb.packed_counts, &sb.packed_displs),
                None => (&rb.packed_counts, &rb.packed_displs),
            };
            let me = c.rank();
            same_len(sc[me], rb.packed_counts[me], me, "MPI_Alltoallw")?;
            let mut all = vec![0u8; rb.total];
            c.alltoallv(
                &send,
                sc,
                sd,
                &mut all,
                &rb.packed_counts,
                &rb.packed_displs,
            )?;
            rb.unpack(&all, recvbuf);
        }
        Ok(())
    })
}
