//! The collectives rmca provides, on the predefined datatypes and operations.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};

use bytemuck::Pod;
use rmca::coll::{Op, Reducible};

use super::{buffer_len, bytes, bytes_mut, call, communicator, datatype, no_overlap};
use crate::abi::*;
use crate::dtype::{self, Elem};
use crate::state::{MpiError, MpiResult};

fn in_place(p: *const c_void) -> bool {
    p as usize == MPI_IN_PLACE
}

/// A root rank of `size`.
fn root_of(root: c_int, size: usize) -> MpiResult<usize> {
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

/// The rmca operation and element type of a reduction of `dt` with `op`.
fn reduction(op: Handle, dt: Handle) -> MpiResult<(Op, Elem)> {
    let info = dtype::lookup_op(op).ok_or_else(|| {
        MpiError::new(
            MPI_ERR_OP,
            format!("invalid operation {op:#x}: rmca supports the predefined operations (user operations are not implemented yet)"),
        )
    })?;
    let t = datatype(dt)?;
    let Some(rop) = info.op else {
        return Err(MpiError::new(
            MPI_ERR_OP,
            format!("{} is not implemented by rmca's reductions yet (MPI_SUM, _PROD, _MIN, _MAX and the logical and bitwise operations are)", info.name),
        ));
    };
    match t.elem {
        Some(elem) if dtype::op_allowed(rop, t.class) => Ok((rop, elem)),
        _ if t.class == dtype::Class::Complex && dtype::op_allowed(rop, t.class) => {
            Err(MpiError::new(
                MPI_ERR_OP,
                format!(
                    "{} on {}: complex reductions are not implemented by rmca yet",
                    info.name, t.name
                ),
            ))
        }
        _ => Err(MpiError::new(
            MPI_ERR_OP,
            format!(
                "{} is not defined on {} (MPI 5.0 section 6.9.2)",
                info.name, t.name
            ),
        )),
    }
}

/// `bytes` as elements of `T`: borrowed when aligned, else copied.
fn typed<T: Pod>(bytes: &[u8]) -> std::borrow::Cow<'_, [T]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => {
            let mut v = vec![T::zeroed(); bytes.len() / size_of::<T>()];
            bytemuck::cast_slice_mut(&mut v).copy_from_slice(bytes);
            std::borrow::Cow::Owned(v)
        }
    }
}

/// Run `f` on `out` viewed as elements of `T` (through an aligned copy if it is not aligned).
fn with_typed_mut<T: Pod, R>(out: &mut [u8], f: impl FnOnce(&mut [T]) -> R) -> R {
    match bytemuck::try_cast_slice_mut(out) {
        Ok(s) => f(s),
        Err(_) => {
            let mut v = vec![T::zeroed(); out.len() / size_of::<T>()];
            let r = f(&mut v);
            out.copy_from_slice(bytemuck::cast_slice(&v));
            r
        }
    }
}

fn allreduce_as<T: Reducible>(
    c: &rmca::Communicator,
    send: &[u8],
    recv: &mut [u8],
    op: Op,
) -> rmca::Result<()> {
    let send = typed::<T>(send);
    with_typed_mut::<T, _>(recv, |r| c.allreduce(&send, r, op))
}

fn reduce_as<T: Reducible>(
    c: &rmca::Communicator,
    send: &[u8],
    recv: Option<&mut [u8]>,
    op: Op,
    root: usize,
) -> rmca::Result<()> {
    let send = typed::<T>(send);
    match recv {
        Some(recv) => with_typed_mut::<T, _>(recv, |r| c.reduce(&send, Some(r), op, root)),
        None => c.reduce(&send, None, op, root),
    }
}

/// Call `$f::<T>(args)` with the Rust type of `$elem`.
macro_rules! by_elem {
    ($elem:expr, $f:ident($($arg:expr),*)) => {
        match $elem {
            Elem::I8 => $f::<i8>($($arg),*),
            Elem::I16 => $f::<i16>($($arg),*),
            Elem::I32 => $f::<i32>($($arg),*),
            Elem::I64 => $f::<i64>($($arg),*),
            Elem::U8 => $f::<u8>($($arg),*),
            Elem::U16 => $f::<u16>($($arg),*),
            Elem::U32 => $f::<u32>($($arg),*),
            Elem::U64 => $f::<u64>($($arg),*),
            Elem::F32 => $f::<f32>($($arg),*),
            Elem::F64 => $f::<f64>($($arg),*),
        }
    };
}

/// `MPI_Barrier`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Barrier(comm: Handle) -> c_int {
    call("MPI_Barrier", comm, || Ok(communicator(comm)?.barrier()?))
}

/// `MPI_Bcast`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Bcast(
    buffer: *mut c_void,
    count: c_int,
    dt: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Bcast", comm, || {
        let c = communicator(comm)?;
        let len = buffer_len(buffer, count, dt, "broadcast")?;
        let root = root_of(root, c.size())?;
        // SAFETY: MPI_Bcast's contract: `buffer` holds `count` elements for the call.
        c.bcast(unsafe { bytes_mut(buffer, len) }, root)?;
        Ok(())
    })
}

/// `MPI_Allreduce` (`MPI_IN_PLACE` as sendbuf: the input is in recvbuf).
#[no_mangle]
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
        let len = buffer_len(recvbuf, count, dt, "receive")?;
        let (rop, elem) = reduction(op, dt)?;
        // SAFETY: MPI_Allreduce's contract: recvbuf holds `count` elements for the call.
        let recv = unsafe { bytes_mut(recvbuf, len) };
        if in_place(sendbuf) {
            let send = recv.to_vec();
            by_elem!(elem, allreduce_as(&c, &send, recv, rop))?;
        } else {
            buffer_len(sendbuf, count, dt, "send")?;
            no_overlap(sendbuf, len, recvbuf, len, "MPI_Allreduce")?;
            // SAFETY: as above for sendbuf, which does not overlap recvbuf (checked).
            let send = unsafe { bytes(sendbuf, len) };
            by_elem!(elem, allreduce_as(&c, send, recv, rop))?;
        }
        Ok(())
    })
}

/// `MPI_Reduce` (`MPI_IN_PLACE` as the root's sendbuf: its input is in recvbuf).
#[no_mangle]
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
        let (rop, elem) = reduction(op, dt)?;
        let is_root = c.rank() == root;
        if is_root {
            let len = buffer_len(recvbuf, count, dt, "receive")?;
            // SAFETY: MPI_Reduce's contract: the root's recvbuf holds `count` elements.
            let recv = unsafe { bytes_mut(recvbuf, len) };
            if in_place(sendbuf) {
                let send = recv.to_vec();
                by_elem!(elem, reduce_as(&c, &send, Some(recv), rop, root))?;
            } else {
                buffer_len(sendbuf, count, dt, "send")?;
                no_overlap(sendbuf, len, recvbuf, len, "MPI_Reduce")?;
                // SAFETY: as above for sendbuf, which does not overlap recvbuf (checked).
                let send = unsafe { bytes(sendbuf, len) };
                by_elem!(elem, reduce_as(&c, send, Some(recv), rop, root))?;
            }
        } else {
            if in_place(sendbuf) {
                return Err(MpiError::new(
                    MPI_ERR_BUFFER,
                    "MPI_IN_PLACE is only valid as the root's sendbuf of MPI_Reduce",
                ));
            }
            let len = buffer_len(sendbuf, count, dt, "send")?;
            // SAFETY: MPI_Reduce's contract: sendbuf holds `count` elements.
            let send = unsafe { bytes(sendbuf, len) };
            by_elem!(elem, reduce_as(&c, send, None, rop, root))?;
        }
        Ok(())
    })
}

/// Bytes of one block (`count` elements of `dt`), with the pointer check.
fn block(buf: *const c_void, count: c_int, dt: Handle, what: &str) -> MpiResult<usize> {
    buffer_len(buf, count, dt, what)
}

fn same_block(send: usize, recv: usize, fname: &str) -> MpiResult<()> {
    if send != recv {
        return Err(MpiError::new(
            MPI_ERR_COUNT,
            format!("{fname}: each process sends {send} B but each receive block holds {recv} B (type signatures must match)"),
        ));
    }
    Ok(())
}

/// `MPI_Gather`.
#[no_mangle]
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
        let (n, me) = (c.size(), c.rank());
        let root = root_of(root, n)?;
        if me != root {
            let b = block(sendbuf, sendcount, sendtype, "send")?;
            // SAFETY: MPI_Gather's contract: sendbuf holds `sendcount` elements.
            c.gather(unsafe { bytes(sendbuf, b) }, None, root)?;
            return Ok(());
        }
        let rb = block(recvbuf, recvcount, recvtype, "receive")?;
        // SAFETY: MPI_Gather's contract: the root's recvbuf holds size x recvcount elements.
        let recv = unsafe { bytes_mut(recvbuf, n * rb) };
        if in_place(sendbuf) {
            let own = recv[me * rb..(me + 1) * rb].to_vec();
            c.gather(&own, Some(recv), root)?;
        } else {
            let sb = block(sendbuf, sendcount, sendtype, "send")?;
            same_block(sb, rb, "MPI_Gather")?;
            no_overlap(sendbuf, sb, recvbuf, n * rb, "MPI_Gather")?;
            // SAFETY: as above; no overlap (checked).
            c.gather(unsafe { bytes(sendbuf, sb) }, Some(recv), root)?;
        }
        Ok(())
    })
}

/// `MPI_Scatter`.
#[no_mangle]
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
        let (n, me) = (c.size(), c.rank());
        let root = root_of(root, n)?;
        if me != root {
            let rb = block(recvbuf, recvcount, recvtype, "receive")?;
            // SAFETY: MPI_Scatter's contract: recvbuf holds `recvcount` elements.
            c.scatter(None, unsafe { bytes_mut(recvbuf, rb) }, root)?;
            return Ok(());
        }
        let sb = block(sendbuf, sendcount, sendtype, "send")?;
        // SAFETY: MPI_Scatter's contract: the root's sendbuf holds size x sendcount elements.
        let send = unsafe { bytes(sendbuf, n * sb) };
        if in_place(recvbuf) {
            // The root's block stays where it is.
            let mut own = vec![0u8; sb];
            c.scatter(Some(send), &mut own, root)?;
        } else {
            let rb = block(recvbuf, recvcount, recvtype, "receive")?;
            same_block(sb, rb, "MPI_Scatter")?;
            no_overlap(sendbuf, n * sb, recvbuf, rb, "MPI_Scatter")?;
            // SAFETY: as above; no overlap (checked).
            c.scatter(Some(send), unsafe { bytes_mut(recvbuf, rb) }, root)?;
        }
        Ok(())
    })
}

/// `MPI_Allgather`.
#[no_mangle]
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
        let rb = block(recvbuf, recvcount, recvtype, "receive")?;
        // SAFETY: MPI_Allgather's contract: recvbuf holds size x recvcount elements.
        let recv = unsafe { bytes_mut(recvbuf, n * rb) };
        if in_place(sendbuf) {
            let own = recv[me * rb..(me + 1) * rb].to_vec();
            c.allgather(&own, recv)?;
        } else {
            let sb = block(sendbuf, sendcount, sendtype, "send")?;
            same_block(sb, rb, "MPI_Allgather")?;
            no_overlap(sendbuf, sb, recvbuf, n * rb, "MPI_Allgather")?;
            // SAFETY: MPI_Allgather's contract: sendbuf holds `sendcount` elements; no
            // overlap (checked).
            c.allgather(unsafe { bytes(sendbuf, sb) }, recv)?;
        }
        Ok(())
    })
}

/// `MPI_Alltoall`.
#[no_mangle]
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
        let rb = block(recvbuf, recvcount, recvtype, "receive")?;
        // SAFETY: MPI_Alltoall's contract: recvbuf holds size x recvcount elements.
        let recv = unsafe { bytes_mut(recvbuf, n * rb) };
        if in_place(sendbuf) {
            let send = recv.to_vec();
            c.alltoall(&send, recv)?;
        } else {
            let sb = block(sendbuf, sendcount, sendtype, "send")?;
            same_block(sb, rb, "MPI_Alltoall")?;
            no_overlap(sendbuf, n * sb, recvbuf, n * rb, "MPI_Alltoall")?;
            // SAFETY: MPI_Alltoall's contract: sendbuf holds size x sendcount elements; no
            // overlap (checked).
            c.alltoall(unsafe { bytes(sendbuf, n * sb) }, recv)?;
        }
        Ok(())
    })
}

/// Byte counts and displacements of one side of an alltoallv, and the span they cover.
///
/// # Safety
/// `counts` and `displs` hold `n` ints each (checked non-null).
unsafe fn layout(
    counts: *const c_int,
    displs: *const c_int,
    n: usize,
    elem: usize,
    side: &str,
) -> MpiResult<(Vec<usize>, Vec<usize>, usize)> {
    if counts.is_null() || displs.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            format!("the {side} counts or displacements array is NULL"),
        ));
    }
    let (mut cs, mut ds, mut span) = (Vec::with_capacity(n), Vec::with_capacity(n), 0);
    for i in 0..n {
        // SAFETY: the caller's contract.
        let (cnt, dsp) = unsafe { (counts.add(i).read(), displs.add(i).read()) };
        let cnt = usize::try_from(cnt).map_err(|_| {
            MpiError::new(
                MPI_ERR_COUNT,
                format!("{side} count {cnt} of rank {i} is negative: counts are >= 0"),
            )
        })?;
        let dsp = usize::try_from(dsp).map_err(|_| {
            MpiError::new(
                MPI_ERR_ARG,
                format!("{side} displacement {dsp} of rank {i} is negative"),
            )
        })?;
        cs.push(cnt * elem);
        ds.push(dsp * elem);
        if cnt > 0 {
            span = span.max((dsp + cnt) * elem);
        }
    }
    Ok((cs, ds, span))
}

/// `MPI_Alltoallv`.
#[no_mangle]
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
        let rsize = datatype(recvtype)?.size;
        // SAFETY: MPI_Alltoallv's contract: size counts and displacements.
        let (rc, rd, rspan) = unsafe { layout(recvcounts, rdispls, n, rsize, "receive")? };
        if rspan > 0 && recvbuf.is_null() {
            return Err(MpiError::new(MPI_ERR_BUFFER, "the receive buffer is NULL"));
        }
        // SAFETY: MPI_Alltoallv's contract: recvbuf covers every receive block.
        let recv = unsafe { bytes_mut(recvbuf, rspan) };
        if in_place(sendbuf) {
            let send = recv.to_vec();
            c.alltoallv(&send, &rc, &rd, recv, &rc, &rd)?;
        } else {
            let ssize = datatype(sendtype)?.size;
            // SAFETY: as above, for the send side.
            let (sc, sd, sspan) = unsafe { layout(sendcounts, sdispls, n, ssize, "send")? };
            if sspan > 0 && sendbuf.is_null() {
                return Err(MpiError::new(MPI_ERR_BUFFER, "the send buffer is NULL"));
            }
            no_overlap(sendbuf, sspan, recvbuf, rspan, "MPI_Alltoallv")?;
            // SAFETY: MPI_Alltoallv's contract: sendbuf covers every send block; no overlap
            // (checked).
            c.alltoallv(unsafe { bytes(sendbuf, sspan) }, &sc, &sd, recv, &rc, &rd)?;
        }
        Ok(())
    })
}
