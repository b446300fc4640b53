//! The collectives with per-rank counts (gatherv, scatterv, allgatherv, alltoallv, and
//! alltoallw with per-rank datatypes too), reduce-scatter and
//! the prefix reductions (scan, exscan), with `MPI_IN_PLACE`, on any committed datatype.
//!
//! The per-rank blocks are packed back to back in a buffer of the library's own (block r
//! at the sum of the earlier blocks' bytes), which the rmca collective moves; they are
//! unpacked to (or packed from) `displs[r]` extents of the datatype in the program's
//! buffer.
#![allow(non_snake_case)]

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::ops::Range;

use super::coll::{
    blocks_n, in_place, intra, recv_n, reduce_input, reduce_recv, root_of, send_n, side_type,
};
use super::coll_c::{count_c, read_counts, read_displs, read_types, ArrayElem};
use super::op::{element_size, reduce, reduction_of, Coll};
use super::types::Ty;
use super::{call, communicator, SendData};
use crate::abi::*;
use crate::state::{MpiError, MpiResult};
use rmca_mpi_export::export;

/// One side's per-rank blocks: (count, displacement in extents) per rank, and their packed
/// byte counts and offsets.
pub(crate) struct Blocks {
    counts: Vec<usize>,
    displs: Vec<isize>,
    pub(crate) packed_counts: Vec<usize>,
    packed_displs: Vec<usize>,
    pub(crate) total: usize,
}

impl Blocks {
    /// The blocks of `counts[r]` instances of `ty` at `displs[r]` extents, one per rank.
    pub(crate) fn new(counts: &[usize], displs: &[isize], ty: &Ty, side: &str) -> MpiResult<Self> {
        let mut b = Blocks {
            counts: counts.to_vec(),
            displs: displs.to_vec(),
            packed_counts: Vec::with_capacity(counts.len()),
            packed_displs: Vec::with_capacity(counts.len()),
            total: 0,
        };
        for &c in counts {
            let bytes = ty.packed_len(c)?;
            b.packed_counts.push(bytes);
            b.packed_displs.push(b.total);
            b.total = b.total.checked_add(bytes).ok_or_else(|| {
                MpiError::new(MPI_ERR_COUNT, format!("the {side} counts overflow"))
            })?;
        }
        Ok(b)
    }

    /// The packed blocks' byte ranges, in rank order.
    pub(crate) fn regions(&self) -> Vec<std::ops::Range<usize>> {
        regions(&self.packed_counts, &self.packed_displs)
    }
}

/// Byte ranges of packed blocks.
fn regions(counts: &[usize], displs: &[usize]) -> Vec<std::ops::Range<usize>> {
    counts.iter().zip(displs).map(|(&c, &d)| d..d + c).collect()
}

/// The address of `displ` extents of `ty` from `buf`.
pub(crate) fn at(buf: *const c_void, displ: isize, ty: &Ty) -> MpiResult<*const c_void> {
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
    pub(crate) unsafe fn pack(&self, buf: *const c_void, ty: &Ty) -> MpiResult<Vec<u8>> {
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
    pub(crate) unsafe fn unpack(
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

    /// Pack block `r` from the program's buffer.
    ///
    /// # Safety
    /// `buf` holds block `r` (the collective's contract).
    pub(crate) unsafe fn pack_block(
        &self,
        buf: *const c_void,
        ty: &Ty,
        r: usize,
    ) -> MpiResult<Vec<u8>> {
        // SAFETY: the caller's contract.
        unsafe { ty.pack(at(buf, self.displs[r], ty)?, self.counts[r]) }
    }

    /// Refuse displacements whose addresses overflow (so that unpacking cannot fail later).
    pub(crate) fn check_addresses(&self, buf: *const c_void, ty: &Ty) -> MpiResult<()> {
        self.displs
            .iter()
            .try_for_each(|&d| at(buf, d, ty).map(|_| ()))
    }

    pub(crate) fn check_null(&self, buf: *const c_void, side: &str) -> MpiResult<()> {
        if self.total > 0 && buf.is_null() {
            return Err(MpiError::new(
                MPI_ERR_BUFFER,
                format!("the {side} buffer is NULL"),
            ));
        }
        Ok(())
    }
}

pub(crate) fn same_len(send: usize, recv: usize, rank: usize, fname: &str) -> MpiResult<()> {
    if send != recv {
        return Err(MpiError::new(
            MPI_ERR_COUNT,
            format!("{fname}: rank {rank} sends {send} B but its receive block holds {recv} B (type signatures must match)"),
        ));
    }
    Ok(())
}

/// `MPI_Gatherv` on read arrays (`rcounts`, `displs`: the root's, empty elsewhere).
///
/// # Safety
/// MPI_Gatherv's contract: recvbuf holds every block, sendbuf `sendcount` elements.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gatherv(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    rcounts: &[usize],
    displs: &[isize],
    recvtype: Handle,
    root: usize,
) -> MpiResult<()> {
    let me = c.rank();
    if me != root {
        // SAFETY: the caller's contract.
        let send = unsafe { send_n(sendbuf, sendcount, sendtype, "send")? };
        // SAFETY: as above.
        c.gatherv(unsafe { send.bytes() }, None, &[], &[], root)?;
        return Ok(());
    }
    let rty = side_type(recvtype, rcounts)?;
    let b = Blocks::new(rcounts, displs, &rty, "receive")?;
    b.check_null(recvbuf, "receive")?;
    let mut all = vec![0u8; b.total];
    // SAFETY: the caller's contract.
    unsafe {
        let own = if in_place(sendbuf) {
            rty.pack(at(recvbuf, b.displs[me], &rty)?, b.counts[me])?
        } else {
            let send = send_n(sendbuf, sendcount, sendtype, "send")?;
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
}

/// `MPI_Scatterv` on read arrays (`scounts`, `displs`: the root's, empty elsewhere).
///
/// # Safety
/// MPI_Scatterv's contract: sendbuf holds every block, recvbuf `recvcount` elements.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scatterv(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    scounts: &[usize],
    displs: &[isize],
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: usize,
    recvtype: Handle,
    root: usize,
) -> MpiResult<()> {
    let me = c.rank();
    if me != root {
        let mut recv = recv_n(recvbuf, recvcount, recvtype, "receive")?;
        // SAFETY: the caller's contract.
        unsafe {
            c.scatterv(None, &[], &[], recv.bytes_mut(), root)?;
            recv.finish(recv.len());
        }
        return Ok(());
    }
    let sty = side_type(sendtype, scounts)?;
    let b = Blocks::new(scounts, displs, &sty, "send")?;
    b.check_null(sendbuf, "send")?;
    // SAFETY: the caller's contract.
    unsafe {
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
            let mut recv = recv_n(recvbuf, recvcount, recvtype, "receive")?;
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
}

/// The extent of `ty` when it lays any count out as one run from the buffer with no gaps
/// (arrays of a predefined type, a contiguous derived type): the collective then moves the
/// program's bytes without packing them.
fn contiguous_extent(ty: &Ty) -> Option<usize> {
    let ext = usize::try_from(ty.extent()).ok().filter(|&e| e > 0)?;
    (ty.run(1) == Some((0, ext)) && ty.size() == ext).then_some(ext)
}

thread_local! {
    /// Byte ranges of the direct v-collectives, reused from call to call so that the warm
    /// path allocates nothing (it grows to the largest communicator's size once).
    static RANGES: RefCell<Vec<Range<usize>>> = const { RefCell::new(Vec::new()) };
}

/// `f` on an empty range vector: the thread's reused one, or a fresh one if that is in use
/// (a call from within a call) or gone (the thread is ending).
fn with_ranges<R>(f: impl FnOnce(&mut Vec<Range<usize>>) -> R) -> R {
    let mut f = Some(f);
    let kept = RANGES.try_with(|cell| {
        let mut v = cell.try_borrow_mut().ok()?;
        v.clear();
        f.take().map(|f| f(&mut v))
    });
    match (kept, f) {
        (Ok(Some(r)), _) => r,
        (_, Some(f)) => f(&mut Vec::new()),
        (_, None) => unreachable!("the closure ran but gave nothing back"),
    }
}

/// Append the byte ranges of `n` blocks of `counts[r]` elements of extent `ext` at
/// `displs[r]` extents from the buffer to `out`, and return the end of the furthest (the
/// bytes the buffer must hold). `None` when the side cannot be moved in place from the
/// program's buffer or the arrays are not plainly valid (NULL, a negative count or
/// displacement, an overflow): the caller then takes the packed path, which reads the
/// arrays again and reports each error as it always has.
///
/// # Safety
/// Each array holds `n` entries when non-null.
unsafe fn byte_ranges<W: Width>(
    counts: *const W::Elem,
    displs: *const W::Displ,
    n: usize,
    ext: usize,
    out: &mut Vec<Range<usize>>,
) -> Option<usize> {
    if n > 0 && (counts.is_null() || displs.is_null()) {
        return None;
    }
    out.reserve(n);
    let mut span = 0usize;
    for r in 0..n {
        // SAFETY: the caller's contract (both non-null here).
        let (c, d) = unsafe { (counts.add(r).read().wide(), displs.add(r).read().wide()) };
        let start = usize::try_from(d).ok()?.checked_mul(ext)?;
        let end = start.checked_add(usize::try_from(c).ok()?.checked_mul(ext)?)?;
        span = span.max(end);
        out.push(start..end);
    }
    Some(span)
}

/// `MPI_Allgatherv` straight from the program's buffers when both are contiguous (out of
/// place, a contiguous receive type, displacements >= 0): the counts and displacements read
/// once into byte ranges, no allocation on a warm path. `None`: take [`allgatherv`].
///
/// # Safety
/// MPI_Allgatherv's contract: recvbuf holds every block, sendbuf `sendcount` elements, the
/// arrays one entry per rank.
#[allow(clippy::too_many_arguments)]
unsafe fn allgatherv_direct<W: Width>(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const W::Elem,
    displs: *const W::Displ,
    recvtype: Handle,
) -> Option<MpiResult<()>> {
    if in_place(sendbuf) {
        return None;
    }
    let ext = contiguous_extent(&Ty::for_use(recvtype).ok()?)?;
    let me = c.rank();
    with_ranges(|ranges| {
        // SAFETY: the caller's contract.
        let span = unsafe { byte_ranges::<W>(recvcounts, displs, c.size(), ext, ranges)? };
        let run = || -> MpiResult<()> {
            // SAFETY: the caller's contract.
            let send = unsafe { send_n(sendbuf, sendcount, sendtype, "send")? };
            same_len(send.len(), ranges[me].len(), me, "MPI_Allgatherv")?;
            if span > 0 && recvbuf.is_null() {
                return Err(MpiError::new(MPI_ERR_BUFFER, "receive buffer is NULL"));
            }
            let (sp, sl) = send.span();
            super::no_overlap(sp, sl, recvbuf, span, "MPI_Allgatherv")?;
            // SAFETY: the caller's contract (recvbuf holds every block, the furthest ending
            // `span` bytes in; non-null when span > 0, checked above); it does not overlap
            // the send data (checked above).
            unsafe {
                let recv = super::bytes_mut(recvbuf, span);
                c.allgatherv_regions(send.bytes(), recv, ranges)?;
            }
            Ok(())
        };
        Some(run())
    })
}

/// `MPI_Alltoallv` straight from the program's buffers when both sides are contiguous (as
/// [`allgatherv_direct`]). `None`: take [`alltoallv`].
///
/// # Safety
/// MPI_Alltoallv's contract: the buffers hold every block, the arrays one entry per rank.
#[allow(clippy::too_many_arguments)]
unsafe fn alltoallv_direct<W: Width>(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    sendcounts: *const W::Elem,
    sdispls: *const W::Displ,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const W::Elem,
    rdispls: *const W::Displ,
    recvtype: Handle,
) -> Option<MpiResult<()>> {
    if in_place(sendbuf) {
        return None;
    }
    let rext = contiguous_extent(&Ty::for_use(recvtype).ok()?)?;
    let sext = contiguous_extent(&Ty::for_use(sendtype).ok()?)?;
    let n = c.size();
    with_ranges(|ranges| {
        // SAFETY: the caller's contract.
        let (rspan, sspan) = unsafe {
            (
                byte_ranges::<W>(recvcounts, rdispls, n, rext, ranges)?,
                byte_ranges::<W>(sendcounts, sdispls, n, sext, ranges)?,
            )
        };
        let (recvs, sends) = ranges.split_at(n);
        let run = || -> MpiResult<()> {
            if (rspan > 0 && recvbuf.is_null()) || (sspan > 0 && sendbuf.is_null()) {
                return Err(MpiError::new(
                    MPI_ERR_BUFFER,
                    "MPI_Alltoallv: a buffer is NULL with data to move",
                ));
            }
            super::no_overlap(sendbuf, sspan, recvbuf, rspan, "MPI_Alltoallv")?;
            // SAFETY: the caller's contract (each buffer holds every block of its side, the
            // furthest ending `span` bytes in; non-null when its span is not 0, checked
            // above); they do not overlap (checked above).
            unsafe {
                let send = super::bytes(sendbuf, sspan);
                let recv = super::bytes_mut(recvbuf, rspan);
                c.alltoallv_regions(send, sends, recv, recvs)?;
            }
            Ok(())
        };
        Some(run())
    })
}

/// `MPI_Allgatherv` on read arrays.
///
/// # Safety
/// MPI_Allgatherv's contract: recvbuf holds every block, sendbuf `sendcount` elements.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn allgatherv(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    rcounts: &[usize],
    displs: &[isize],
    recvtype: Handle,
) -> MpiResult<()> {
    let me = c.rank();
    let rty = side_type(recvtype, rcounts)?;
    let b = Blocks::new(rcounts, displs, &rty, "receive")?;
    b.check_null(recvbuf, "receive")?;
    let mut all = vec![0u8; b.total];
    // SAFETY: the caller's contract.
    unsafe {
        let own = if in_place(sendbuf) {
            rty.pack(at(recvbuf, b.displs[me], &rty)?, b.counts[me])?
        } else {
            let send = send_n(sendbuf, sendcount, sendtype, "send")?;
            same_len(send.len(), b.packed_counts[me], me, "MPI_Allgatherv")?;
            send.bytes().to_vec()
        };
        c.allgatherv(&own, &mut all, &b.packed_counts, &b.packed_displs)?;
        let skip = in_place(sendbuf).then_some(me);
        b.unpack(&all, recvbuf, &rty, skip)?;
    }
    Ok(())
}

/// A reduction whose input has `in_count` and whose result `out_count` instances of `dt`
/// (`MPI_IN_PLACE` as sendbuf: the input is in recvbuf, the result lands at its start).
///
/// # Safety
/// The collective's contract for both buffers.
#[allow(clippy::too_many_arguments)]
unsafe fn reduction(
    fname: &str,
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    in_count: usize,
    out_count: usize,
    dt: Handle,
    op: Handle,
    coll: Coll<'_>,
) -> MpiResult<()> {
    let (ty, r) = reduction_of(op, dt, in_count)?;
    if in_count == 0 {
        // Nothing moves on any member (the counts are the same everywhere) and MPI owes no
        // synchronisation: the arguments checked, done (as Open MPI).
        return Ok(());
    }
    // SAFETY: the caller's contract.
    unsafe {
        let (input, mut out) = if in_place(sendbuf) {
            let mut whole = reduce_recv(&r, recvbuf, in_count, &ty)?;
            whole.load()?;
            let input = SendData::Packed(whole.bytes_mut().to_vec());
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
        reduce(c, coll, input.bytes(), Some(out.bytes_mut()), r)?;
        out.finish(out.len());
    }
    Ok(())
}

/// `MPI_Alltoallv` on read arrays (the send ones empty in place).
///
/// # Safety
/// MPI_Alltoallv's contract: the buffers hold every block.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn alltoallv(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    scounts: &[usize],
    sdispls: &[isize],
    sendtype: Handle,
    recvbuf: *mut c_void,
    rcounts: &[usize],
    rdispls: &[isize],
    recvtype: Handle,
) -> MpiResult<()> {
    let rty = side_type(recvtype, rcounts)?;
    let rb = Blocks::new(rcounts, rdispls, &rty, "receive")?;
    rb.check_null(recvbuf, "receive")?;
    // SAFETY: the caller's contract.
    unsafe {
        let (send, sb) = if in_place(sendbuf) {
            (rb.pack(recvbuf, &rty)?, None)
        } else {
            let sty = side_type(sendtype, scounts)?;
            let sb = Blocks::new(scounts, sdispls, &sty, "send")?;
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
}

/// `MPI_Reduce_scatter_block` on `recvcount` elements per rank.
///
/// # Safety
/// The collective's contract.
pub(crate) unsafe fn reduce_scatter_block(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: usize,
    dt: Handle,
    op: Handle,
) -> MpiResult<()> {
    // SAFETY: the caller's contract.
    if let Some(r) =
        unsafe { super::coll::fast_reduce_scatter(c, sendbuf, recvbuf, None, recvcount, dt, op) }
    {
        return r;
    }
    if recvcount == 0 && super::coll::builtin_reduction(op, dt) {
        // Nothing moves on any member (the count is the same everywhere), MPI owes no
        // synchronisation, and a predefined operation on a predefined number type is all
        // there is to check: done (Open MPI returns at once too; OSU's 1-byte rows).
        return Ok(());
    }
    let (_, total, _) = blocks_n(recvcount, dt, c.size(), "receive")?;
    // SAFETY: the caller's contract.
    unsafe {
        reduction(
            "MPI_Reduce_scatter_block",
            c,
            sendbuf,
            recvbuf,
            total,
            recvcount,
            dt,
            op,
            Coll::ReduceScatterBlock,
        )
    }
}

/// `MPI_Reduce_scatter` on read counts.
///
/// # Safety
/// The collective's contract.
pub(crate) unsafe fn reduce_scatter(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: &[usize],
    dt: Handle,
    op: Handle,
) -> MpiResult<()> {
    // SAFETY: the caller's contract.
    if let Some(r) =
        unsafe { super::coll::fast_reduce_scatter(c, sendbuf, recvbuf, Some(counts), 0, dt, op) }
    {
        return r;
    }
    let me = c.rank();
    let total = counts
        .iter()
        .try_fold(0usize, |a, &k| a.checked_add(k))
        .ok_or_else(|| MpiError::new(MPI_ERR_COUNT, "the receive counts overflow"))?;
    let (ty, r) = reduction_of(op, dt, total)?;
    let inst = if r.raw_layout() {
        ty.extent() as usize
    } else {
        ty.size()
    };
    let per = inst / element_size(&r).max(1);
    let elems: Vec<usize> = counts.iter().map(|&k| k * per).collect();
    // SAFETY: the caller's contract.
    unsafe {
        reduction(
            "MPI_Reduce_scatter",
            c,
            sendbuf,
            recvbuf,
            total,
            counts[me],
            dt,
            op,
            Coll::ReduceScatter(&elems),
        )
    }
}

/// `MPI_Scan` (or, `exclusive`, `MPI_Exscan`) on `n` elements.
///
/// # Safety
/// The collective's contract: both buffers hold `n` elements.
pub(crate) unsafe fn prefix(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    n: usize,
    dt: Handle,
    op: Handle,
    exclusive: bool,
) -> MpiResult<()> {
    let (fname, coll) = if exclusive {
        ("MPI_Exscan", Coll::Exscan)
    } else {
        ("MPI_Scan", Coll::Scan)
    };
    // SAFETY: the caller's contract.
    unsafe { reduction(fname, c, sendbuf, recvbuf, n, n, dt, op, coll) }
}

/// One side of `MPI_Alltoallw`: per rank a count, a byte displacement and a datatype, and
/// the blocks' packed byte counts and offsets.
pub(crate) struct TypedBlocks {
    parts: Vec<(Ty, usize, isize)>,
    pub(crate) packed_counts: Vec<usize>,
    packed_displs: Vec<usize>,
    pub(crate) total: usize,
}

impl TypedBlocks {
    /// The blocks of `counts[r]` instances of `types[r]` at `displs[r]` bytes, per rank.
    pub(crate) fn new(
        counts: &[usize],
        displs: &[isize],
        types: &[Handle],
        side: &str,
    ) -> MpiResult<Self> {
        let n = counts.len();
        let mut b = TypedBlocks {
            parts: Vec::with_capacity(n),
            packed_counts: Vec::with_capacity(n),
            packed_displs: Vec::with_capacity(n),
            total: 0,
        };
        for r in 0..n {
            let ty = Ty::for_message(types[r], counts[r])?;
            let bytes = ty.packed_len(counts[r])?;
            b.parts.push((ty, counts[r], displs[r]));
            b.packed_counts.push(bytes);
            b.packed_displs.push(b.total);
            b.total = b.total.checked_add(bytes).ok_or_else(|| {
                MpiError::new(MPI_ERR_COUNT, format!("the {side} counts overflow"))
            })?;
        }
        Ok(b)
    }

    /// The packed blocks' byte ranges, in rank order.
    pub(crate) fn regions(&self) -> Vec<std::ops::Range<usize>> {
        regions(&self.packed_counts, &self.packed_displs)
    }

    /// Pack every block from the program's buffer.
    ///
    /// # Safety
    /// `buf` holds every block (the collective's contract).
    pub(crate) unsafe fn pack(&self, buf: *const c_void) -> MpiResult<Vec<u8>> {
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
    pub(crate) unsafe fn unpack(&self, packed: &[u8], buf: *mut c_void) {
        for (r, (ty, count, displ)) in self.parts.iter().enumerate() {
            let (p, len) = (self.packed_displs[r], self.packed_counts[r]);
            let dst = buf.cast::<u8>().wrapping_offset(*displ).cast();
            // SAFETY: the caller's contract.
            unsafe { ty.unpack(&packed[p..p + len], dst, *count) };
        }
    }

    /// Refuse a NULL buffer that would be read or written near address 0. NULL is also
    /// `MPI_BOTTOM`, where each block's displacement and datatype make absolute addresses
    /// (mpi4py's `Alltoallw` on `MPI_BOTTOM`): only a block that starts in the first page,
    /// which is never mapped, is a NULL buffer's.
    pub(crate) fn check_null(&self, buf: *const c_void, side: &str) -> MpiResult<()> {
        const UNMAPPED: isize = 4096;
        if !buf.is_null() {
            return Ok(());
        }
        for (r, (ty, _, displ)) in self.parts.iter().enumerate() {
            if self.packed_counts[r] == 0 {
                continue;
            }
            let at = displ.saturating_add(ty.layout().true_lb());
            // Below the first page (or negative: no user-space address).
            if at < UNMAPPED {
                return Err(MpiError::new(
                    MPI_ERR_BUFFER,
                    format!("the {side} buffer is NULL and the block of rank {r} is not at an absolute address (displacement {displ}, datatype true lower bound {}) as MPI_BOTTOM needs", at - displ),
                ));
            }
        }
        Ok(())
    }
}

/// `MPI_Alltoallw` on read arrays (the send ones empty in place): each block is packed
/// into library memory, the packed blocks move by the alltoallv schedule, and are unpacked
/// with the receive side's datatypes; a block's send and receive type signatures must match
/// in size.
///
/// # Safety
/// MPI_Alltoallw's contract: the buffers hold every block.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn alltoallw(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    scounts: &[usize],
    sdispls: &[isize],
    stypes: &[Handle],
    recvbuf: *mut c_void,
    rcounts: &[usize],
    rdispls: &[isize],
    rtypes: &[Handle],
) -> MpiResult<()> {
    let rb = TypedBlocks::new(rcounts, rdispls, rtypes, "receive")?;
    rb.check_null(recvbuf, "receive")?;
    // SAFETY: the caller's contract.
    unsafe {
        let (send, sb) = if in_place(sendbuf) {
            (rb.pack(recvbuf)?, None)
        } else {
            let sb = TypedBlocks::new(scounts, sdispls, stypes, "send")?;
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
}

/// A count and a count array's readers, for the int forms and the `_c` forms.
pub trait Width {
    type Count: Copy + std::fmt::Display;
    type Elem: ArrayElem;
    type Displ: ArrayElem;
    fn count(n: Self::Count, what: &str) -> MpiResult<usize>;
}

/// The classic forms: `int` counts and displacements.
pub struct Int;
/// The large-count forms: `MPI_Count` counts, `MPI_Aint` displacements.
pub struct Large;

impl Width for Int {
    type Count = c_int;
    type Elem = c_int;
    type Displ = c_int;
    fn count(n: c_int, what: &str) -> MpiResult<usize> {
        super::count(n, what)
    }
}

impl Width for Large {
    type Count = MPI_Count;
    type Elem = MPI_Count;
    type Displ = MPI_Aint;
    fn count(n: MPI_Count, what: &str) -> MpiResult<usize> {
        count_c(n, what)
    }
}

/// Counts and displacements of `n` ranks, read when `needed` (else empty).
///
/// # Safety
/// When `needed`, each array holds `n` entries (NULL is refused).
pub(crate) unsafe fn arrays<W: Width>(
    counts: *const W::Elem,
    displs: *const W::Displ,
    n: usize,
    side: &str,
    needed: bool,
) -> MpiResult<(Vec<usize>, Vec<isize>)> {
    if !needed {
        return Ok((Vec::new(), Vec::new()));
    }
    // SAFETY: the caller's contract.
    unsafe { Ok((read_counts(counts, n, side)?, read_displs(displs, n, side)?)) }
}

/// The checked count `n`, or 0 where MPI does not look at it (beside `MPI_IN_PLACE`).
pub(crate) fn count_unless<W: Width>(n: W::Count, ignored: bool, what: &str) -> MpiResult<usize> {
    if ignored {
        Ok(0)
    } else {
        W::count(n, what)
    }
}

macro_rules! v_forms {
    ($w:ty, $gatherv:ident, $scatterv:ident, $allgatherv:ident, $alltoallv:ident, $alltoallw:ident,
     $rs:ident, $rsb:ident, $scan:ident, $exscan:ident) => {
        #[doc = concat!("`", stringify!($gatherv), "` (`MPI_IN_PLACE` as the root's sendbuf: its block is in place).")]
        #[export]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $gatherv(
            sendbuf: *const c_void,
            sendcount: <$w as Width>::Count,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcounts: *const <$w as Width>::Elem,
            displs: *const <$w as Width>::Displ,
            recvtype: Handle,
            root: c_int,
            comm: Handle,
        ) -> c_int {
            call(stringify!($gatherv), comm, || {
                let c = communicator(comm)?;
                if c.is_inter() {
                    // SAFETY: the collective's contract.
                    return unsafe { super::inter::gatherv::<$w>(&c, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root) };
                }
                let (n, me) = (c.size(), c.rank());
                let root = root_of(root, n)?;
                let sc = count_unless::<$w>(sendcount, me == root && in_place(sendbuf), "send count")?;
                // SAFETY: the collective's contract: the root's arrays hold one entry per rank.
                unsafe {
                    let (rc, rd) = arrays::<$w>(recvcounts, displs, n, "receive", me == root)?;
                    gatherv(&c, sendbuf, sc, sendtype, recvbuf, &rc, &rd, recvtype, root)
                }
            })
        }

        #[doc = concat!("`", stringify!($scatterv), "` (`MPI_IN_PLACE` as the root's recvbuf: its block stays in place).")]
        #[export]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $scatterv(
            sendbuf: *const c_void,
            sendcounts: *const <$w as Width>::Elem,
            displs: *const <$w as Width>::Displ,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcount: <$w as Width>::Count,
            recvtype: Handle,
            root: c_int,
            comm: Handle,
        ) -> c_int {
            call(stringify!($scatterv), comm, || {
                let c = communicator(comm)?;
                if c.is_inter() {
                    // SAFETY: the collective's contract.
                    return unsafe { super::inter::scatterv::<$w>(&c, sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root) };
                }
                let (n, me) = (c.size(), c.rank());
                let root = root_of(root, n)?;
                let rc = count_unless::<$w>(recvcount, me == root && in_place(recvbuf), "receive count")?;
                // SAFETY: the collective's contract: the root's arrays hold one entry per rank.
                unsafe {
                    let (sc, sd) = arrays::<$w>(sendcounts, displs, n, "send", me == root)?;
                    scatterv(&c, sendbuf, &sc, &sd, sendtype, recvbuf, rc, recvtype, root)
                }
            })
        }

        #[doc = concat!("`", stringify!($allgatherv), "` (`MPI_IN_PLACE` as sendbuf: each block is in place).")]
        #[export]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $allgatherv(
            sendbuf: *const c_void,
            sendcount: <$w as Width>::Count,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcounts: *const <$w as Width>::Elem,
            displs: *const <$w as Width>::Displ,
            recvtype: Handle,
            comm: Handle,
        ) -> c_int {
            call(stringify!($allgatherv), comm, || {
                let c = communicator(comm)?;
                if c.is_inter() {
                    // SAFETY: the collective's contract.
                    return unsafe { super::inter::allgatherv::<$w>(&c, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype) };
                }
                let sc = count_unless::<$w>(sendcount, in_place(sendbuf), "send count")?;
                // SAFETY: the collective's contract: the arrays hold one entry per rank.
                unsafe {
                    if let Some(r) = allgatherv_direct::<$w>(&c, sendbuf, sc, sendtype, recvbuf, recvcounts, displs, recvtype) {
                        return r;
                    }
                    let (rc, rd) = arrays::<$w>(recvcounts, displs, c.size(), "receive", true)?;
                    allgatherv(&c, sendbuf, sc, sendtype, recvbuf, &rc, &rd, recvtype)
                }
            })
        }

        #[doc = concat!("`", stringify!($alltoallv), "` (`MPI_IN_PLACE` as sendbuf: the blocks to send are the receive blocks).")]
        #[export]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $alltoallv(
            sendbuf: *const c_void,
            sendcounts: *const <$w as Width>::Elem,
            sdispls: *const <$w as Width>::Displ,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcounts: *const <$w as Width>::Elem,
            rdispls: *const <$w as Width>::Displ,
            recvtype: Handle,
            comm: Handle,
        ) -> c_int {
            call(stringify!($alltoallv), comm, || {
                let c = communicator(comm)?;
                if c.is_inter() {
                    // SAFETY: the collective's contract.
                    return unsafe { super::inter::alltoallv::<$w>(&c, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype) };
                }
                let n = c.size();
                // SAFETY: the collective's contract: the arrays hold one entry per rank.
                unsafe {
                    if let Some(r) = alltoallv_direct::<$w>(&c, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype) {
                        return r;
                    }
                    let (rc, rd) = arrays::<$w>(recvcounts, rdispls, n, "receive", true)?;
                    let (sc, sd) = arrays::<$w>(sendcounts, sdispls, n, "send", !in_place(sendbuf))?;
                    alltoallv(&c, sendbuf, &sc, &sd, sendtype, recvbuf, &rc, &rd, recvtype)
                }
            })
        }

        #[doc = concat!("`", stringify!($alltoallw), "`: per-peer counts, byte displacements and datatypes (`MPI_IN_PLACE` as sendbuf: the blocks to send are the receive blocks).")]
        #[export]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $alltoallw(
            sendbuf: *const c_void,
            sendcounts: *const <$w as Width>::Elem,
            sdispls: *const <$w as Width>::Displ,
            sendtypes: *const Handle,
            recvbuf: *mut c_void,
            recvcounts: *const <$w as Width>::Elem,
            rdispls: *const <$w as Width>::Displ,
            recvtypes: *const Handle,
            comm: Handle,
        ) -> c_int {
            call(stringify!($alltoallw), comm, || {
                let c = communicator(comm)?;
                if c.is_inter() {
                    // SAFETY: the collective's contract.
                    return unsafe { super::inter::alltoallw::<$w>(&c, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes) };
                }
                let n = c.size();
                let send_side = !in_place(sendbuf);
                // SAFETY: the collective's contract: the arrays hold one entry per rank.
                unsafe {
                    let (rc, rd) = arrays::<$w>(recvcounts, rdispls, n, "receive", true)?;
                    let rt = read_types(recvtypes, n, "receive")?;
                    let (sc, sd) = arrays::<$w>(sendcounts, sdispls, n, "send", send_side)?;
                    let st = if send_side { read_types(sendtypes, n, "send")? } else { Vec::new() };
                    alltoallw(&c, sendbuf, &sc, &sd, &st, recvbuf, &rc, &rd, &rt)
                }
            })
        }

        #[doc = concat!("`", stringify!($rs), "` (`MPI_IN_PLACE` as sendbuf: the input is in recvbuf).")]
        #[export]
        pub unsafe extern "C" fn $rs(
            sendbuf: *const c_void,
            recvbuf: *mut c_void,
            recvcounts: *const <$w as Width>::Elem,
            dt: Handle,
            op: Handle,
            comm: Handle,
        ) -> c_int {
            call(stringify!($rs), comm, || {
                let c = communicator(comm)?;
                // SAFETY: the collective's contract: one count per rank (per process of the
                // local group on an intercommunicator).
                unsafe {
                    let counts = read_counts(recvcounts, c.local_size(), "receive")?;
                    if c.is_inter() {
                        return super::inter::reduce_scatter(stringify!($rs), &c, sendbuf, recvbuf, &counts, dt, op);
                    }
                    reduce_scatter(&c, sendbuf, recvbuf, &counts, dt, op)
                }
            })
        }

        #[doc = concat!("`", stringify!($rsb), "` (`MPI_IN_PLACE` as sendbuf: the input is in recvbuf).")]
        #[export]
        pub unsafe extern "C" fn $rsb(
            sendbuf: *const c_void,
            recvbuf: *mut c_void,
            recvcount: <$w as Width>::Count,
            dt: Handle,
            op: Handle,
            comm: Handle,
        ) -> c_int {
            call(stringify!($rsb), comm, || {
                let c = communicator(comm)?;
                let k = <$w as Width>::count(recvcount, "receive count")?;
                if c.is_inter() {
                    // SAFETY: the collective's contract.
                    return unsafe { super::inter::reduce_scatter(stringify!($rsb), &c, sendbuf, recvbuf, &vec![k; c.local_size()], dt, op) };
                }
                // SAFETY: the collective's contract.
                unsafe { reduce_scatter_block(&c, sendbuf, recvbuf, k, dt, op) }
            })
        }

        v_forms!(@prefix $w, $scan, false);
        v_forms!(@prefix $w, $exscan, true);
    };
    (@prefix $w:ty, $name:ident, $exclusive:expr) => {
        #[doc = concat!("`", stringify!($name), "` (`MPI_IN_PLACE` as sendbuf: the input is in recvbuf).")]
        #[export]
        pub unsafe extern "C" fn $name(
            sendbuf: *const c_void,
            recvbuf: *mut c_void,
            count: <$w as Width>::Count,
            dt: Handle,
            op: Handle,
            comm: Handle,
        ) -> c_int {
            call(stringify!($name), comm, || {
                let c = intra(comm, stringify!($name))?;
                let n = <$w as Width>::count(count, "count")?;
                // SAFETY: the prefix reduction's contract: both buffers hold `count` elements.
                unsafe { prefix(&c, sendbuf, recvbuf, n, dt, op, $exclusive) }
            })
        }
    };
}

v_forms!(
    Int,
    MPI_Gatherv,
    MPI_Scatterv,
    MPI_Allgatherv,
    MPI_Alltoallv,
    MPI_Alltoallw,
    MPI_Reduce_scatter,
    MPI_Reduce_scatter_block,
    MPI_Scan,
    MPI_Exscan
);
v_forms!(
    Large,
    MPI_Gatherv_c,
    MPI_Scatterv_c,
    MPI_Allgatherv_c,
    MPI_Alltoallv_c,
    MPI_Alltoallw_c,
    MPI_Reduce_scatter_c,
    MPI_Reduce_scatter_block_c,
    MPI_Scan_c,
    MPI_Exscan_c
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranges of `counts`/`displs` (C ints) of extent `ext`, and their span.
    fn ranges(
        counts: &[c_int],
        displs: &[c_int],
        ext: usize,
    ) -> Option<(Vec<Range<usize>>, usize)> {
        let mut out = Vec::new();
        // SAFETY: both arrays hold `counts.len()` entries.
        let span = unsafe {
            byte_ranges::<Int>(
                counts.as_ptr(),
                displs.as_ptr(),
                counts.len(),
                ext,
                &mut out,
            )?
        };
        Some((out, span))
    }

    #[test]
    fn byte_ranges_are_read_once_with_their_span() {
        assert_eq!(
            ranges(&[1, 0, 2], &[3, 9, 0], 8),
            Some((vec![24..32, 72..72, 0..16], 72))
        );
        assert_eq!(ranges(&[], &[], 8), Some((vec![], 0)));
    }

    #[test]
    fn irregular_arrays_leave_the_errors_to_the_packed_path() {
        // A negative count or displacement, an overflow, a NULL array: the packed path reads
        // the arrays again and raises each error class as before (or packs).
        assert_eq!(ranges(&[1, -1], &[0, 1], 4), None);
        assert_eq!(ranges(&[1, 1], &[0, -1], 4), None);
        assert_eq!(ranges(&[c_int::MAX], &[c_int::MAX], usize::MAX / 2), None);
        let mut out = Vec::new();
        // SAFETY: NULL arrays are refused before any read.
        let null = unsafe { byte_ranges::<Int>(std::ptr::null(), [0].as_ptr(), 1, 4, &mut out) };
        assert_eq!(null, None);
    }

    #[test]
    fn the_range_vector_is_reused_between_calls() {
        let first = with_ranges(|v| {
            v.extend((0..64).map(|r| r..r + 1));
            (v.as_ptr(), v.capacity())
        });
        // The next call gets it back empty, with its storage: nothing to allocate.
        let second = with_ranges(|v| {
            assert!(v.is_empty());
            v.extend((0..64).map(|r| r..r + 1));
            (v.as_ptr(), v.capacity())
        });
        assert_eq!(first, second);
        // A call from within a call gets a vector of its own.
        with_ranges(|outer| {
            outer.push(0..1);
            with_ranges(|inner| assert!(inner.is_empty() && inner.capacity() == 0));
            assert_eq!(outer.len(), 1);
        });
    }
}
