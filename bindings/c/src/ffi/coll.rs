//! The collectives rmca provides, on the predefined datatypes and operations.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};

use super::coll_c::count_c;
use super::op::{reduce, reduction_of, Coll, Reducer};
use super::rooted::{self, Gather, Scatter};
use super::types::Ty;
use super::vcoll::{Int, Large};
use super::{call, communicator, no_overlap, recv_data_n, send_data_n, RecvData, SendData};
use crate::abi::*;
use crate::dtype::Elem;
use crate::state::{MpiError, MpiResult};
use rmca::coll::{Op, Reducible};
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

/// `MPI_Bcast` on `count` elements.
///
/// # Safety
/// MPI_Bcast's contract: `buffer` holds `count` elements for the call.
unsafe fn bcast(
    c: &rmca::Communicator,
    buffer: *mut c_void,
    count: usize,
    dt: Handle,
    root: c_int,
) -> MpiResult<()> {
    // The fast path (as the per-message calls'): a predefined datatype and a usable buffer,
    // broadcast in place with no datatype resolution; anything else the general path checks.
    if let Some(len) = c_int::try_from(count)
        .ok()
        .and_then(|n| super::predefined_len(buffer, n, dt))
    {
        let root = root_of(root, c.size())?;
        // SAFETY: the caller's contract: `buffer` holds `len` bytes (non-null when len > 0,
        // checked by `predefined_len`).
        c.bcast(unsafe { super::bytes_mut(buffer, len) }, root)?;
        return Ok(());
    }
    let mut data = recv_n(buffer, count, dt, "broadcast")?;
    let root = root_of(root, c.size())?;
    let me = c.rank();
    // SAFETY: the caller's contract.
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
        if c.is_inter() {
            // SAFETY: MPI_Bcast's contract, as below.
            return unsafe { super::inter::bcast::<Int>(&c, buffer, count, dt, root) };
        }
        // SAFETY: MPI_Bcast's contract.
        unsafe { bcast(&c, buffer, super::count(count, "count")?, dt, root) }
    })
}

/// `MPI_Bcast_c`.
#[export]
pub unsafe extern "C" fn MPI_Bcast_c(
    buffer: *mut c_void,
    count: MPI_Count,
    dt: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Bcast_c", comm, || {
        let c = communicator(comm)?;
        if c.is_inter() {
            // SAFETY: MPI_Bcast_c's contract, as MPI_Bcast's.
            return unsafe { super::inter::bcast::<Large>(&c, buffer, count, dt, root) };
        }
        // SAFETY: MPI_Bcast_c's contract.
        unsafe { bcast(&c, buffer, count_c(count, "count")?, dt, root) }
    })
}

/// The intra-communicator `comm`, for collectives that have no intercommunicator form.
pub(crate) fn intra(comm: Handle, fname: &str) -> MpiResult<rmca::Communicator> {
    let c = communicator(comm)?;
    super::inter::refuse(&c, fname)?;
    Ok(c)
}

/// The datatype of one side of a collective whose counts on this rank are `counts` (one
/// count, or a v-form's per-rank ones): as for a message ([`Ty::for_message`]),
/// `MPI_DATATYPE_NULL` is accepted when every count is 0 (MPICH accepts it there:
/// pmodels/mpich#6323), refused as ever when data moves.
pub(crate) fn side_type(dt: Handle, counts: &[usize]) -> MpiResult<Ty> {
    Ty::for_message(dt, usize::from(counts.iter().any(|&k| k > 0)))
}

/// [`send_data_n`] on a datatype handle (`MPI_DATATYPE_NULL` with no element: bytes).
///
/// # Safety
/// As [`send_data_n`].
pub(crate) unsafe fn send_n(
    buf: *const c_void,
    count: usize,
    dt: Handle,
    what: &str,
) -> MpiResult<SendData> {
    let ty = Ty::for_message(dt, count)?;
    // SAFETY: the caller's contract.
    unsafe { send_data_n(buf, count, &ty, what) }
}

/// [`recv_data_n`] on a datatype handle.
pub(crate) fn recv_n(
    buf: *mut c_void,
    count: usize,
    dt: Handle,
    what: &str,
) -> MpiResult<RecvData> {
    recv_data_n(buf, count, &Ty::for_message(dt, count)?, what)
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

/// The input of a reduction: sendbuf's data (the program's own bytes where they are
/// usable as they are, not copied), or (`MPI_IN_PLACE`) a copy of recvbuf's.
///
/// # Safety
/// The buffers hold `count` elements of `ty` (the reduction's contract), and sendbuf stays
/// valid and unwritten while the result is used.
pub(crate) unsafe fn reduce_input(
    r: &Reducer,
    sendbuf: *const c_void,
    recv: &mut RecvData,
    count: usize,
    ty: &Ty,
    fname: &str,
) -> MpiResult<SendData> {
    // SAFETY: the caller's contract.
    unsafe {
        if in_place(sendbuf) {
            recv.load()?;
            return Ok(SendData::Packed(recv.bytes_mut().to_vec()));
        }
        let send = reduce_send(r, sendbuf, count, ty)?;
        apart(&send, recv, fname)?;
        Ok(send)
    }
}

/// The largest `MPI_IN_PLACE` input the fast path copies to the stack (bytes); larger ones
/// take the general path, whose heap copy costs little next to moving the data.
const STACK_INPUT: usize = 256;

/// [`STACK_INPUT`] bytes aligned for every element type a predefined reduction works on.
#[repr(C, align(16))]
struct StackInput([u8; STACK_INPUT]);

/// Whether `op` on `dt` is a predefined operation on a predefined number type rmca reduces
/// as it is (see [`builtin`]): a reduction of no element on it needs no further check.
#[inline]
pub(crate) fn builtin_reduction(op: Handle, dt: Handle) -> bool {
    builtin(op, dt).is_some()
}

/// The rmca operation and element type of predefined `op` on predefined `dt`, when the
/// reduction is one of numbers rmca reduces as they are (what [`reducer`] resolves to
/// `Reducer::Builtin` on the datatype's own element type, or on C's `char` for `MPI_CHAR`,
/// which OSU's reduction benchmarks sum by default; not a complex sum). `None`: anything else
/// (user ops, derived types, MINLOC/MAXLOC, long double, complex, invalid handles, an op MPI
/// does not define on the type), left to the general path, which raises the errors.
#[inline(always)]
fn builtin(op: Handle, dt: Handle) -> Option<(Op, Elem)> {
    let rop = crate::dtype::lookup_op(op)?.op?;
    let Some((elem, class)) = crate::dtype::number_type(dt) else {
        // As `reducer`: MPI_CHAR is a C integer to MPICH and Open MPI.
        let char = crate::dtype::lookup(dt).is_some_and(|t| t.name == "MPI_CHAR");
        let elem = if std::ffi::c_char::MIN == 0 {
            Elem::U8
        } else {
            Elem::I8
        };
        return (char && crate::dtype::op_allowed(rop, crate::dtype::Class::Integer))
            .then_some((rop, elem));
    };
    crate::dtype::op_allowed(rop, class).then_some((rop, elem))
}

/// `MPI_Allreduce` (`root` `None`) or `MPI_Reduce` to `root` on the fast path: a predefined
/// operation on `n` (> 0) elements of a predefined number type in contiguous, aligned,
/// non-overlapping buffers, run straight on the program's memory (an `MPI_IN_PLACE` input
/// of up to [`STACK_INPUT`] bytes copied to the stack): no datatype resolution, no staging,
/// no heap allocation in this layer. `None`: the call is not one of these (or its arguments
/// are wrong); the general path runs it and checks every argument.
///
/// # Safety
/// The reduction's contract: the buffers hold `n` elements of `dt` (recvbuf at the root).
#[inline(always)]
unsafe fn fast_reduce(
    c: &rmca::Communicator,
    root: Option<usize>,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    n: usize,
    dt: Handle,
    op: Handle,
) -> Option<MpiResult<()>> {
    let (rop, elem) = builtin(op, dt)?;
    let size = elem_size(elem);
    let len = size
        .checked_mul(n)
        .filter(|&l| l > 0 && l <= isize::MAX as usize)?;
    // Alignment to the element's size: at least the type's alignment (the general path
    // copies misaligned buffers).
    let usable = |p: usize| p > MPI_IN_PLACE && p.is_multiple_of(size);
    let receives = root.is_none_or(|r| r == c.rank());
    let recv = if receives {
        usable(recvbuf as usize).then_some(recvbuf.cast::<u8>())?
    } else {
        std::ptr::null_mut()
    };
    // Not zeroed (256 B of stores per call): only the `len` bytes copied in are read.
    let mut stack = std::mem::MaybeUninit::<StackInput>::uninit();
    let send: *const u8 = if in_place(sendbuf) {
        // A non-root's MPI_IN_PLACE is an error the general path raises.
        if !receives || len > STACK_INPUT {
            return None;
        }
        let at = stack.as_mut_ptr().cast::<u8>();
        // SAFETY: recvbuf holds `len` bytes (the caller's contract); the stack buffer is
        // larger and apart; the copy initializes the bytes the collective reads.
        unsafe { std::ptr::copy_nonoverlapping(recv, at, len) };
        at
    } else {
        let s = sendbuf as usize;
        // Overlapping buffers are an error the general path raises.
        if !usable(s) || (receives && s < recv as usize + len && (recv as usize) < s + len) {
            return None;
        }
        sendbuf.cast()
    };
    macro_rules! go {
        ($($e:ident => $t:ty),*) => {
            match elem { $(Elem::$e => {
                // SAFETY: the caller's contract, the checks above (non-null, aligned to the
                // element, apart, `len` bytes each), and `stack` outlives the call.
                unsafe { fast_run::<$t>(c, root, send, recv, n, rop) }
            })* }
        };
    }
    Some(
        go!(I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16,
        U32 => u32, U64 => u64, F32 => f32, F64 => f64),
    )
}

/// `MPI_Reduce_scatter` (`counts`, elements per rank) or `MPI_Reduce_scatter_block`
/// (`counts` `None`: `block` elements per rank) on the fast path, as [`fast_reduce`]'s: a
/// predefined operation on a predefined number type in aligned, apart buffers, run straight
/// on the program's memory (no datatype resolution, no staged copy of the input). `None`:
/// anything else (`MPI_IN_PLACE`, nothing to reduce, user operations, derived types), which
/// the general path checks.
///
/// # Safety
/// The collective's contract: sendbuf holds every rank's elements, recvbuf this rank's.
#[inline(always)]
pub(crate) unsafe fn fast_reduce_scatter(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: Option<&[usize]>,
    block: usize,
    dt: Handle,
    op: Handle,
) -> Option<MpiResult<()>> {
    let (rop, elem) = builtin(op, dt)?;
    let size = elem_size(elem);
    let (total, mine) = match counts {
        Some(k) => (
            k.iter().try_fold(0usize, |a, &x| a.checked_add(x))?,
            *k.get(c.rank())?,
        ),
        None => (block.checked_mul(c.size())?, block),
    };
    let slen = total
        .checked_mul(size)
        .filter(|&l| l > 0 && l <= isize::MAX as usize)?;
    let rlen = mine * size;
    let usable = |p: usize| p > MPI_IN_PLACE && p.is_multiple_of(size);
    let (s, r) = (sendbuf as usize, recvbuf as usize);
    if !usable(s) || (rlen > 0 && (!usable(r) || (s < r + rlen && r < s + slen))) {
        return None;
    }
    macro_rules! go {
        ($($e:ident => $t:ty),*) => {
            match elem { $(Elem::$e => {
                // SAFETY: the caller's contract and the checks above (non-null, aligned to
                // the element, apart, `total` and `mine` elements).
                unsafe { fast_rs::<$t>(c, sendbuf.cast(), recvbuf.cast(), total, mine, counts, rop) }
            })* }
        };
    }
    Some(
        go!(I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16,
        U32 => u32, U64 => u64, F32 => f32, F64 => f64),
    )
}

/// [`fast_reduce_scatter`]'s collective on elements of `T`.
///
/// # Safety
/// `send` holds `total` aligned elements of `T`, `recv` `mine` (unless `mine` is 0); apart.
unsafe fn fast_rs<T: Reducible>(
    c: &rmca::Communicator,
    send: *const u8,
    recv: *mut u8,
    total: usize,
    mine: usize,
    counts: Option<&[usize]>,
    op: Op,
) -> MpiResult<()> {
    // SAFETY: the caller's contract.
    let send = unsafe { std::slice::from_raw_parts(send.cast::<T>(), total) };
    let recv: &mut [T] = if mine == 0 {
        &mut []
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(recv.cast::<T>(), mine) }
    };
    match counts {
        Some(k) => c.reduce_scatter(send, recv, k, op)?,
        None => c.reduce_scatter_block(send, recv, op)?,
    }
    Ok(())
}

/// Bytes of one element of `e`.
fn elem_size(e: Elem) -> usize {
    match e {
        Elem::I8 | Elem::U8 => 1,
        Elem::I16 | Elem::U16 => 2,
        Elem::I32 | Elem::U32 | Elem::F32 => 4,
        Elem::I64 | Elem::U64 | Elem::F64 => 8,
    }
}

/// [`fast_reduce`]'s collective on elements of `T`.
///
/// # Safety
/// `send` holds `n` aligned elements of `T`, as does `recv` unless it is null (a non-root
/// of a reduce); the two do not overlap.
unsafe fn fast_run<T: Reducible>(
    c: &rmca::Communicator,
    root: Option<usize>,
    send: *const u8,
    recv: *mut u8,
    n: usize,
    op: Op,
) -> MpiResult<()> {
    // SAFETY: the caller's contract.
    let send = unsafe { std::slice::from_raw_parts(send.cast::<T>(), n) };
    // SAFETY: the caller's contract.
    let recv =
        (!recv.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(recv.cast::<T>(), n) });
    match (root, recv) {
        (Some(root), recv) => c.reduce(send, recv, op, root)?,
        (None, Some(recv)) => c.allreduce(send, recv, op)?,
        (None, None) => {
            return Err(MpiError::new(
                MPI_ERR_INTERN,
                "internal: the allreduce fast path has no receive buffer",
            ))
        }
    }
    Ok(())
}

/// `MPI_Allreduce` on `n` elements.
///
/// # Safety
/// MPI_Allreduce's contract: both buffers hold `n` elements for the call.
unsafe fn allreduce(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    n: usize,
    dt: Handle,
    op: Handle,
) -> MpiResult<()> {
    // SAFETY: the caller's contract.
    if let Some(r) = unsafe { fast_reduce(c, None, sendbuf, recvbuf, n, dt, op) } {
        return r;
    }
    let (ty, r) = reduction_of(op, dt, n)?;
    if n == 0 {
        // Nothing moves on any member (the count is the same everywhere) and MPI owes no
        // synchronisation: the arguments checked, done (as Open MPI).
        return Ok(());
    }
    let mut recv = reduce_recv(&r, recvbuf, n, &ty)?;
    // SAFETY: the caller's contract.
    unsafe {
        let send = reduce_input(&r, sendbuf, &mut recv, n, &ty, "MPI_Allreduce")?;
        reduce(c, Coll::Allreduce, send.bytes(), Some(recv.bytes_mut()), r)?;
        recv.finish(recv.len());
    }
    Ok(())
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
        if c.is_inter() {
            // SAFETY: MPI_Allreduce's contract, as below.
            return unsafe { super::inter::allreduce::<Int>(&c, sendbuf, recvbuf, count, dt, op) };
        }
        let n = super::count(count, "count")?;
        // SAFETY: MPI_Allreduce's contract.
        unsafe { allreduce(&c, sendbuf, recvbuf, n, dt, op) }
    })
}

/// `MPI_Allreduce_c`.
#[export]
pub unsafe extern "C" fn MPI_Allreduce_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: MPI_Count,
    dt: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Allreduce_c", comm, || {
        let c = communicator(comm)?;
        if c.is_inter() {
            // SAFETY: MPI_Allreduce_c's contract, as MPI_Allreduce's.
            return unsafe {
                super::inter::allreduce::<Large>(&c, sendbuf, recvbuf, count, dt, op)
            };
        }
        let n = count_c(count, "count")?;
        // SAFETY: MPI_Allreduce_c's contract.
        unsafe { allreduce(&c, sendbuf, recvbuf, n, dt, op) }
    })
}

/// `MPI_Reduce` on `n` elements.
///
/// # Safety
/// MPI_Reduce's contract: sendbuf (and the root's recvbuf) hold `n` elements.
unsafe fn reduce_to(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    n: usize,
    dt: Handle,
    op: Handle,
    root: c_int,
) -> MpiResult<()> {
    let root = root_of(root, c.size())?;
    // SAFETY: the caller's contract.
    if let Some(r) = unsafe { fast_reduce(c, Some(root), sendbuf, recvbuf, n, dt, op) } {
        return r;
    }
    let (ty, r) = reduction_of(op, dt, n)?;
    if n == 0 {
        // Nothing moves (the count is the same on every member): as allreduce's.
        return Ok(());
    }
    if c.rank() == root {
        let mut recv = reduce_recv(&r, recvbuf, n, &ty)?;
        // SAFETY: the caller's contract.
        unsafe {
            let send = reduce_input(&r, sendbuf, &mut recv, n, &ty, "MPI_Reduce")?;
            reduce(
                c,
                Coll::Reduce(root),
                send.bytes(),
                Some(recv.bytes_mut()),
                r,
            )?;
            recv.finish(recv.len());
        }
    } else {
        if in_place(sendbuf) {
            return Err(MpiError::new(
                MPI_ERR_BUFFER,
                "MPI_IN_PLACE is only valid as the root's sendbuf of MPI_Reduce",
            ));
        }
        // SAFETY: the caller's contract.
        let send = unsafe { reduce_send(&r, sendbuf, n, &ty)? };
        // SAFETY: as above.
        reduce(c, Coll::Reduce(root), unsafe { send.bytes() }, None, r)?;
    }
    Ok(())
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
        if c.is_inter() {
            // SAFETY: MPI_Reduce's contract, as below.
            return unsafe {
                super::inter::reduce_to::<Int>(&c, sendbuf, recvbuf, count, dt, op, root)
            };
        }
        let n = super::count(count, "count")?;
        // SAFETY: MPI_Reduce's contract.
        unsafe { reduce_to(&c, sendbuf, recvbuf, n, dt, op, root) }
    })
}

/// `MPI_Reduce_c`.
#[export]
pub unsafe extern "C" fn MPI_Reduce_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: MPI_Count,
    dt: Handle,
    op: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Reduce_c", comm, || {
        let c = communicator(comm)?;
        if c.is_inter() {
            // SAFETY: MPI_Reduce_c's contract, as MPI_Reduce's.
            return unsafe {
                super::inter::reduce_to::<Large>(&c, sendbuf, recvbuf, count, dt, op, root)
            };
        }
        let n = count_c(count, "count")?;
        // SAFETY: MPI_Reduce_c's contract.
        unsafe { reduce_to(&c, sendbuf, recvbuf, n, dt, op, root) }
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

/// `blocks` blocks of `n` elements of `dt` (a committed type): the type, the elements in
/// all and the bytes of a block.
pub(crate) fn blocks_n(
    n: usize,
    dt: Handle,
    blocks: usize,
    what: &str,
) -> MpiResult<(Ty, usize, usize)> {
    let ty = Ty::for_message(dt, n)?;
    let total = n.checked_mul(blocks).ok_or_else(|| {
        MpiError::new(
            MPI_ERR_COUNT,
            format!("{what} count {n} x {blocks} ranks overflows"),
        )
    })?;
    let block = ty.packed_len(n)?;
    Ok((ty, total, block))
}

/// The root and the byte lengths of a rooted block collective's two sides on the fast path
/// (as bcast's): predefined datatypes, usable buffers (not `MPI_IN_PLACE`), `own` bytes on
/// this rank's side and, at the root, `size` times as many on the root's side, the two apart.
/// `None`: anything else, which the general path checks (and raises the errors of).
#[inline(always)]
fn fast_rooted(
    c: &rmca::Communicator,
    own: (*const c_void, usize, Handle),
    all: (*const c_void, usize, Handle),
    root: c_int,
) -> Option<(usize, usize, usize)> {
    let n = c.size();
    let root = usize::try_from(root).ok().filter(|&r| r < n)?;
    let mine = super::predefined_len(own.0, c_int::try_from(own.1).ok()?, own.2)?;
    if c.rank() != root {
        return Some((root, mine, 0));
    }
    let count = c_int::try_from(all.1.checked_mul(n)?).ok()?;
    let whole = super::predefined_len(all.0, count, all.2)?;
    let (a, b) = (own.0 as usize, all.0 as usize);
    let apart = mine == 0 || a + mine <= b || b + whole <= a;
    (whole == mine.checked_mul(n)? && apart).then_some((root, mine, whole))
}

/// `MPI_Gather` (`gather`) or `MPI_Scatter` on the fast path (see [`fast_rooted`]):
/// straight from and into the program's buffers, no datatype resolution.
///
/// # Safety
/// MPI_Gather's or MPI_Scatter's contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn fast_gather_scatter(
    gather: bool,
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: usize,
    recvtype: Handle,
    root: c_int,
) -> Option<MpiResult<()>> {
    let send = (sendbuf, sendcount, sendtype);
    let recv = (recvbuf.cast_const(), recvcount, recvtype);
    // The root's side holds every rank's block: the receive buffer of a gather, the send
    // buffer of a scatter.
    let (own, all) = if gather { (send, recv) } else { (recv, send) };
    let (root, mine, whole) = fast_rooted(c, own, all, root)?;
    let (slen, rlen) = if gather { (mine, whole) } else { (whole, mine) };
    // SAFETY: the caller's contract: each buffer holds its side's bytes, `mine` on this
    // rank's side and `whole` on the root's (non-null when not empty, checked by
    // `predefined_len`), apart (checked).
    let (send, recv) = unsafe { (super::bytes(sendbuf, slen), super::bytes_mut(recvbuf, rlen)) };
    let at_root = c.rank() == root;
    let r = if gather {
        c.gather(send, at_root.then_some(recv), root)
    } else {
        c.scatter(at_root.then_some(send), recv, root)
    };
    Some(r.map_err(MpiError::from))
}

/// `MPI_Gather` on `usize` counts.
///
/// # Safety
/// MPI_Gather's contract (the plan's).
#[allow(clippy::too_many_arguments)]
unsafe fn gather(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: usize,
    recvtype: Handle,
    root: c_int,
) -> MpiResult<()> {
    // SAFETY: the caller's contract.
    if let Some(r) = unsafe {
        fast_gather_scatter(
            true, c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
        )
    } {
        return r;
    }
    // SAFETY: the caller's contract; the buffers are used only during the call.
    unsafe {
        let (root, plan) = rooted::gather(
            "MPI_Gather",
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
            Gather::Leaf(send) => c.gather(send.bytes(), None, root)?,
            Gather::Root { mut recv, own } => {
                c.gather(own.bytes(), Some(recv.bytes_mut()), root)?;
                recv.finish(recv.len());
            }
        }
    }
    Ok(())
}

/// `MPI_Scatter` on `usize` counts.
///
/// # Safety
/// MPI_Scatter's contract (the plan's).
#[allow(clippy::too_many_arguments)]
unsafe fn scatter(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: usize,
    recvtype: Handle,
    root: c_int,
) -> MpiResult<()> {
    // SAFETY: the caller's contract.
    if let Some(r) = unsafe {
        fast_gather_scatter(
            false, c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
        )
    } {
        return r;
    }
    // SAFETY: the caller's contract; the buffers are used only during the call.
    unsafe {
        let (root, plan) = rooted::scatter(
            "MPI_Scatter",
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
}

/// `MPI_Allgather` on `usize` counts.
///
/// # Safety
/// MPI_Allgather's contract: recvbuf holds size x recvcount elements, sendbuf `sendcount`.
unsafe fn allgather(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: usize,
    recvtype: Handle,
) -> MpiResult<()> {
    let (n, me) = (c.size(), c.rank());
    let (rty, total, rb) = blocks_n(recvcount, recvtype, n, "receive")?;
    let mut recv = recv_data_n(recvbuf, total, &rty, "receive")?;
    // SAFETY: the caller's contract.
    unsafe {
        if in_place(sendbuf) {
            recv.load()?;
            let all = recv.bytes_mut();
            let own = all[me * rb..(me + 1) * rb].to_vec();
            c.allgather(&own, all)?;
        } else {
            let send = send_n(sendbuf, sendcount, sendtype, "send")?;
            same_block(send.len(), rb, "MPI_Allgather")?;
            apart(&send, &recv, "MPI_Allgather")?;
            c.allgather(send.bytes(), recv.bytes_mut())?;
        }
        recv.finish(recv.len());
    }
    Ok(())
}

/// `MPI_Alltoall` on `usize` counts.
///
/// # Safety
/// MPI_Alltoall's contract: both buffers hold size x count elements.
unsafe fn alltoall(
    c: &rmca::Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: usize,
    recvtype: Handle,
) -> MpiResult<()> {
    let n = c.size();
    let (rty, total, rb) = blocks_n(recvcount, recvtype, n, "receive")?;
    let mut recv = recv_data_n(recvbuf, total, &rty, "receive")?;
    // SAFETY: the caller's contract.
    unsafe {
        if in_place(sendbuf) {
            recv.load()?;
            let send = recv.bytes_mut().to_vec();
            c.alltoall(&send, recv.bytes_mut())?;
        } else {
            let (sty, stotal, sb) = blocks_n(sendcount, sendtype, n, "send")?;
            same_block(sb, rb, "MPI_Alltoall")?;
            let send = send_data_n(sendbuf, stotal, &sty, "send")?;
            apart(&send, &recv, "MPI_Alltoall")?;
            c.alltoall(send.bytes(), recv.bytes_mut())?;
        }
        recv.finish(recv.len());
    }
    Ok(())
}

/// The side of a rooted collective that only the root's arguments describe (gather's
/// receive, scatter's send).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Send,
    Recv,
}

/// The exported int and `_c` forms of a block collective (gather, scatter: with a root).
macro_rules! block_coll {
    ($name:ident, $name_c:ident, $inner:ident, $inter:ident, root: $root_side:expr) => {
        #[doc = concat!("`", stringify!($name), "`.")]
        #[export]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name(
            sendbuf: *const c_void,
            sendcount: c_int,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcount: c_int,
            recvtype: Handle,
            root: c_int,
            comm: Handle,
        ) -> c_int {
            call(stringify!($name), comm, || {
                let c = communicator(comm)?;
                if c.is_inter() {
                    // SAFETY: the collective's contract.
                    return unsafe {
                        super::inter::$inter::<Int>(
                            &c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
                        )
                    };
                }
                // A count beside the root's MPI_IN_PLACE is not looked at, nor the root's
                // side of the exchange on the other ranks (MPICH's tests pass -1 there).
                let at_root = root_of(root, c.size())? == c.rank();
                let sc = if (at_root && in_place(sendbuf)) || (!at_root && $root_side == Side::Send) { 0 } else { super::count(sendcount, "send count")? };
                let rc = if (at_root && in_place(recvbuf)) || (!at_root && $root_side == Side::Recv) { 0 } else { super::count(recvcount, "receive count")? };
                // SAFETY: the collective's contract.
                unsafe { $inner(&c, sendbuf, sc, sendtype, recvbuf, rc, recvtype, root) }
            })
        }

        #[doc = concat!("`", stringify!($name_c), "`.")]
        #[export]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name_c(
            sendbuf: *const c_void,
            sendcount: MPI_Count,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcount: MPI_Count,
            recvtype: Handle,
            root: c_int,
            comm: Handle,
        ) -> c_int {
            call(stringify!($name_c), comm, || {
                let c = communicator(comm)?;
                if c.is_inter() {
                    // SAFETY: the collective's contract, as the int form's.
                    return unsafe {
                        super::inter::$inter::<Large>(
                            &c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
                        )
                    };
                }
                let at_root = root_of(root, c.size())? == c.rank();
                let sc = if (at_root && in_place(sendbuf)) || (!at_root && $root_side == Side::Send) { 0 } else { count_c(sendcount, "send count")? };
                let rc = if (at_root && in_place(recvbuf)) || (!at_root && $root_side == Side::Recv) { 0 } else { count_c(recvcount, "receive count")? };
                // SAFETY: the collective's contract.
                unsafe { $inner(&c, sendbuf, sc, sendtype, recvbuf, rc, recvtype, root) }
            })
        }
    };
    ($name:ident, $name_c:ident, $inner:ident, $inter:ident) => {
        #[doc = concat!("`", stringify!($name), "` (`MPI_IN_PLACE` as sendbuf: the data is in recvbuf).")]
        #[export]
        pub unsafe extern "C" fn $name(
            sendbuf: *const c_void,
            sendcount: c_int,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcount: c_int,
            recvtype: Handle,
            comm: Handle,
        ) -> c_int {
            call(stringify!($name), comm, || {
                let c = communicator(comm)?;
                if c.is_inter() {
                    // SAFETY: the collective's contract.
                    return unsafe {
                        super::inter::$inter::<Int>(
                            &c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                        )
                    };
                }
                // In place, the send count is not looked at.
                let sc = if in_place(sendbuf) {
                    0
                } else {
                    super::count(sendcount, "send count")?
                };
                let rc = super::count(recvcount, "receive count")?;
                // SAFETY: the collective's contract.
                unsafe { $inner(&c, sendbuf, sc, sendtype, recvbuf, rc, recvtype) }
            })
        }

        #[doc = concat!("`", stringify!($name_c), "`.")]
        #[export]
        pub unsafe extern "C" fn $name_c(
            sendbuf: *const c_void,
            sendcount: MPI_Count,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcount: MPI_Count,
            recvtype: Handle,
            comm: Handle,
        ) -> c_int {
            call(stringify!($name_c), comm, || {
                let c = communicator(comm)?;
                if c.is_inter() {
                    // SAFETY: the collective's contract, as the int form's.
                    return unsafe {
                        super::inter::$inter::<Large>(
                            &c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                        )
                    };
                }
                let sc = if in_place(sendbuf) {
                    0
                } else {
                    count_c(sendcount, "send count")?
                };
                let rc = count_c(recvcount, "receive count")?;
                // SAFETY: the collective's contract.
                unsafe { $inner(&c, sendbuf, sc, sendtype, recvbuf, rc, recvtype) }
            })
        }
    };
}

block_coll!(MPI_Gather, MPI_Gather_c, gather, gather, root: Side::Recv);
block_coll!(MPI_Scatter, MPI_Scatter_c, scatter, scatter, root: Side::Send);
block_coll!(MPI_Allgather, MPI_Allgather_c, allgather, allgather);
block_coll!(MPI_Alltoall, MPI_Alltoall_c, alltoall, alltoall);

#[cfg(test)]
mod tests {
    use super::super::op::reducer;
    use super::*;

    /// The fast path takes exactly the reductions the general path runs as numbers of the
    /// datatype's own element type (`Reducer::Builtin`; not `MPI_CHAR`'s special case nor
    /// complex sums, reduced as twice as many reals), with the same operation and element
    /// type; every other pair of handles (invalid ones included) is left to the general path.
    #[test]
    fn fast_path_decides_as_the_general_path() {
        let (mut taken, mut left) = (0, 0);
        for dt in (0..0x340).chain([MPI_DATATYPE_NULL, usize::MAX]) {
            for op in (0..0x50).chain([MPI_OP_NULL, usize::MAX]) {
                let general = Ty::for_use(dt)
                    .ok()
                    .and_then(|ty| reducer(op, dt, &ty).ok());
                let want = match general {
                    Some(Reducer::Builtin(rop, elem))
                        if crate::dtype::lookup(dt)
                            .is_some_and(|t| t.elem.is_some() || t.name == "MPI_CHAR") =>
                    {
                        Some((rop, elem))
                    }
                    _ => None,
                };
                let got = builtin(op, dt);
                assert_eq!(got, want, "datatype {dt:#x}, operation {op:#x}");
                if got.is_some() {
                    taken += 1;
                } else {
                    left += 1;
                }
            }
        }
        assert!(taken > 300 && left > 0, "{taken} taken, {left} left");
    }
}
