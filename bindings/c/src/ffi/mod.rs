//! The exported MPI functions. With `state` (the process-wide state confined to the thread
//! that initialized MPI), the only modules of the crate with `unsafe` code: C hands us raw
//! pointers, and each use of one is covered by the MPI contract of the function it came
//! through (stated at each block).
//!
//! # Safety
//! Every exported `MPI_*` function is `unsafe` with the same contract: its pointer arguments
//! are what the MPI standard says the C function receives (buffers of `count` elements of the
//! datatype, valid for the call or, for non-blocking calls, until completion; out-arguments
//! valid for a write; `MPI_STATUS_IGNORE` and friends where allowed).
#![allow(unsafe_code)]
// The contract of each function is MPI's, stated once above rather than on 75 functions.
#![allow(clippy::missing_safety_doc)]
// The implementations keep the standard's names (MPI_Send); #[export] adds the C symbols.
#![allow(non_snake_case)]

pub mod attr;
pub mod buffers;
pub mod coll;
pub mod coll_c;
pub mod comm;
mod complete;
pub mod env;
pub mod grequest;
pub mod group;
pub mod handles;
pub mod info;
pub mod inter;
pub mod inter_nb;
pub mod mprobe;
pub mod nbc;
pub mod neighbor;
pub mod op;
pub mod op_long;
pub mod p2p;
pub mod partitioned;
pub mod pcoll;
pub mod req;
mod rooted;
pub mod session;
pub mod tool;
pub mod topo;
pub mod types;
pub mod types_more;
pub mod vcoll;
pub mod win;

use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::abi::*;
pub(crate) use crate::state::communicator;
use crate::state::{self, ErrHandler, MpiError, MpiResult};

/// Entry points of functions rmca does not implement yet (`unsupported.rs`): each raises
/// `MPI_ERR_UNSUPPORTED_OPERATION` naming the call, on the error handler of the communicator
/// named after `on`.
macro_rules! not_implemented_fns {
    ($($name:ident($($arg:ident: $ty:ty),*) on $comm:ident;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: not implemented yet.")]
        #[rmca_mpi_export::export]
        #[allow(unused_variables)]
        pub extern "C" fn $name($($arg: $ty),*) -> c_int {
            $crate::ffi::not_implemented(stringify!($name), $comm)
        }
    )*};
}
// After the macro: its textual scope.
mod unsupported;

/// The error of a function rmca does not implement, raised on `comm`'s error handler; for
/// the MPI-IO calls, on the handler of file errors (`MPI_FILE_NULL`'s, `MPI_ERRORS_RETURN`
/// unless the program set another), as MPI raises `MPI_File_open`'s and every call's on a
/// file that does not exist.
#[cold]
#[inline(never)]
pub(crate) fn not_implemented(fname: &'static str, comm: Handle) -> c_int {
    let refusal = || {
        Err(MpiError::new(
            MPI_ERR_UNSUPPORTED_OPERATION,
            format!("{fname} is not implemented by rmca (the README lists what is not)"),
        ))
    };
    if fname.starts_with("MPI_File_") {
        return env::on_file(fname, env::MPI_FILE_NULL, refusal);
    }
    call(fname, comm, refusal)
}

/// Run the body of MPI function `fname` whose communicator is `comm` (errors go to its error
/// handler unless they name another one): success, or the error class after the handler ran.
/// A panic is reported as `MPI_ERR_INTERN` instead of unwinding into C.
#[inline]
pub(crate) fn call(fname: &'static str, comm: Handle, f: impl FnOnce() -> MpiResult<()>) -> c_int {
    match caught(f) {
        Ok(()) => MPI_SUCCESS,
        Err(e) => raise(fname, comm, e),
    }
}

/// A blocking completion call at `MPI_THREAD_MULTIPLE` ([`state::waits_release`]): `test`,
/// the body of the matching `MPI_Test*` call (which makes a progress pass; true when the call
/// completed), until it fails or completes. Between tests the thread lets queued threads in,
/// or, while another thread drives the progress, sleeps until that thread's test of this
/// call completes it (`test` then runs there: see `state::park_until`; its error is returned
/// here, so that the handler runs on the calling thread). The blocking calls of the other
/// levels wait inside the state (on its fast paths), where no other thread may come in.
pub(crate) fn wait_by_testing(mut test: impl FnMut() -> MpiResult<bool>) -> MpiResult<()> {
    let mut backoff = rmca::framework::progress::ParkingBackoff::default();
    let mut outcome: Option<MpiResult<()>> = None;
    let mut done = || {
        if outcome.is_none() {
            let mut complete = false;
            let r = caught(|| {
                complete = test()?;
                Ok(())
            });
            if complete || r.is_err() {
                outcome = Some(r);
            }
        }
        outcome.is_some()
    };
    while !done() {
        backoff.pass_until(0, &mut done);
    }
    outcome.expect("the loop ends on an outcome")
}

/// `f`'s result, with a panic turned into `MPI_ERR_INTERN` (it must not unwind into C).
#[inline]
pub(crate) fn caught(f: impl FnOnce() -> MpiResult<()>) -> MpiResult<()> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| Err(panic_error(panic)))
}

#[cold]
#[inline(never)]
pub(crate) fn panic_error(panic: Box<dyn std::any::Any + Send>) -> MpiError {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    MpiError::new(MPI_ERR_INTERN, format!("internal error in rmca: {what}"))
}

/// Hand `e` to the error handler of its communicator.
#[cold]
#[inline(never)]
pub(crate) fn raise(fname: &'static str, comm: Handle, e: MpiError) -> c_int {
    if !state::owned() && state::phase() == state::Phase::Running {
        // A call from a thread the thread level does not let in: the error handlers are
        // state of the owner thread, out of this one's reach. The class is returned, and the
        // message logged (MPI_Error_string gives the class's text only).
        tracing::error!("{fname}: {}", e.msg);
        return e.class;
    }
    let comm = e.comm.unwrap_or(comm);
    let handler = state::with(|s| Ok(s.errhandler_of(comm))).unwrap_or(ErrHandler::Fatal);
    invoke(fname, handler, comm, e)
}

/// Run error handler `handler` of object `obj` (a communicator, window, file or session:
/// a user handler receives its handle) on `e`: the error class, when the handler returns.
#[cold]
#[inline(never)]
pub(crate) fn invoke(
    fname: &'static str,
    handler: ErrHandler,
    mut obj: Handle,
    e: MpiError,
) -> c_int {
    match handler {
        ErrHandler::Fatal | ErrHandler::Abort => fatal(fname, &e),
        ErrHandler::Return => {
            let _ = state::with(|s| {
                s.record_error(&e);
                Ok(())
            });
            e.class
        }
        ErrHandler::User(h) => {
            let _ = state::with(|s| {
                s.record_error(&e);
                Ok(())
            });
            let mut code = e.class;
            if let Some(f) = state::errhandler_fn(h) {
                // SAFETY: `f` is the function the program registered with
                // MPI_<kind>_create_errhandler, of type MPI_<kind>_errhandler_function (a
                // handle of the kind and a code, by pointer), called with the two arguments
                // it declares; no state borrow is held, so it may call MPI.
                unsafe { f(&mut obj, &mut code) };
            }
            e.class
        }
    }
}

/// `MPI_ERRORS_ARE_FATAL`: say what went wrong and abort the job.
fn fatal(fname: &str, e: &MpiError) -> ! {
    use std::io::Write;
    let msg = format!(
        "{fname}: {} [{}]",
        e.msg,
        state::class_text(e.class)
            .split(':')
            .next()
            .unwrap_or_default()
    );
    // The fatal handler's message must reach the user whatever the logging setup.
    let _ = writeln!(std::io::stderr(), "rmca MPI error (fatal): {msg}");
    // A user error code (MPI_Add_error_code) may be a multiple of 256: never exit with 0.
    let status = if e.class & 0xff == 0 { 1 } else { e.class };
    crate::progress_thread::stop();
    let _ = state::with(|s| -> MpiResult<()> { s.universe.abort(status, &msg) });
    std::process::exit(status)
}

/// Check a count (non-negative).
pub(crate) fn count(n: c_int, what: &str) -> MpiResult<usize> {
    usize::try_from(n).map_err(|_| {
        MpiError::new(
            MPI_ERR_COUNT,
            format!("{what} {n} is negative: counts are >= 0"),
        )
    })
}

/// The byte length of `n` elements of predefined datatype `dt` at `buf`, when a
/// per-message call (`MPI_Send`, `MPI_Recv`, `MPI_Isend`, `MPI_Irecv`) can use the buffer in
/// place without further checks: a predefined datatype, a non-negative count, and a buffer
/// that is neither NULL nor `MPI_IN_PLACE` when there is data. `None` sends the call down its
/// general path, which checks every argument again and raises the error: the fast path
/// builds no error and resolves no `Ty`.
#[inline(always)]
pub(crate) fn predefined_len(buf: *const c_void, n: c_int, dt: Handle) -> Option<usize> {
    let size = crate::dtype::predefined_size(dt)?;
    let n = usize::try_from(n).ok()?;
    // As `Ty::packed_len`: a length beyond isize::MAX is the general path's MPI_ERR_COUNT.
    let len = size.checked_mul(n).filter(|&l| l <= isize::MAX as usize)?;
    // NULL is 0 and MPI_IN_PLACE 1: both refused by the general path's `check_buffer`.
    (len == 0 || buf as usize > MPI_IN_PLACE).then_some(len)
}

/// Refuse a NULL buffer, or `MPI_IN_PLACE` where the call does not take it, with data to
/// move.
fn check_buffer(
    buf: *const c_void,
    len: usize,
    n: usize,
    ty: &types::Ty,
    what: &str,
) -> MpiResult<()> {
    // MPI_BOTTOM (NULL) with a derived datatype whose displacements are absolute addresses
    // (from MPI_Get_address) is how programs send scattered variables: only data that would
    // start at address 0 is refused.
    if len > 0 && buf.is_null() && ty.layout().true_lb() == 0 {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            format!("{what} buffer is NULL with {n} elements to transfer"),
        ));
    }
    if len > 0 && buf as usize == MPI_IN_PLACE {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            format!("{what} buffer is MPI_IN_PLACE, which this call (or this rank's role in it) does not take"),
        ));
    }
    Ok(())
}

/// The data of a send: the program's bytes in place (one run), or a packed copy.
pub enum SendData {
    Direct(*const u8, usize),
    Packed(Vec<u8>),
}

impl SendData {
    /// The bytes to send.
    ///
    /// # Safety
    /// For `Direct`, the program's buffer is valid and unwritten while the slice lives.
    pub(crate) unsafe fn bytes(&self) -> &[u8] {
        match self {
            // SAFETY: the caller's contract; non-null when len > 0 (checked by send_data_n).
            SendData::Direct(p, len) => unsafe { bytes((*p).cast(), *len) },
            SendData::Packed(v) => v,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.span().1
    }

    /// Where the bytes are (for overlap checks, without making a slice).
    pub(crate) fn span(&self) -> (*const c_void, usize) {
        match self {
            SendData::Direct(p, len) => (p.cast(), *len),
            SendData::Packed(v) => (v.as_ptr().cast(), v.len()),
        }
    }
}

/// The data of `n` elements (a checked count) of `ty` at `buf`, to send.
///
/// # Safety
/// `buf` holds `n` elements of `ty` (the MPI contract of a send buffer).
pub(crate) unsafe fn send_data_n(
    buf: *const c_void,
    n: usize,
    ty: &types::Ty,
    what: &str,
) -> MpiResult<SendData> {
    let len = ty.packed_len(n)?;
    check_buffer(buf, len, n, ty, what)?;
    match ty.run(n) {
        Some((off, len)) => Ok(SendData::Direct(
            (buf as *const u8).wrapping_offset(if len == 0 { 0 } else { off }),
            len,
        )),
        // SAFETY: the caller's contract.
        None => Ok(SendData::Packed(unsafe { ty.pack(buf, n)? })),
    }
}

/// Where a receive lands: the program's bytes in place (one run), or a buffer unpacked
/// into the program's layout by `RecvData::finish`.
pub struct RecvData {
    direct: Option<(*mut u8, usize)>,
    staging: Vec<u8>,
    target: Option<(types::Ty, usize, usize)>,
}

impl RecvData {
    /// The bytes to receive into.
    ///
    /// # Safety
    /// For a direct receive, the program's buffer is valid and not otherwise accessed while
    /// the slice lives.
    pub(crate) unsafe fn bytes_mut(&mut self) -> &mut [u8] {
        match self.direct {
            // SAFETY: the caller's contract; non-null when len > 0 (checked by recv_data).
            Some((p, len)) => unsafe { bytes_mut(p.cast(), len) },
            None => &mut self.staging,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.span().1
    }

    /// The program's `len` bytes at `p`, received in place.
    pub(crate) fn direct(p: *mut u8, len: usize) -> Self {
        RecvData {
            direct: Some((p, len)),
            staging: Vec::new(),
            target: None,
        }
    }

    /// Where the bytes are (for overlap checks, without making a slice).
    pub(crate) fn span(&self) -> (*const c_void, usize) {
        match self.direct {
            Some((p, len)) => (p.cast_const().cast(), len),
            None => (self.staging.as_ptr().cast(), self.staging.len()),
        }
    }

    /// Fill a staged buffer with what the program's buffer holds now (the input of an
    /// `MPI_IN_PLACE` collective).
    ///
    /// # Safety
    /// The program's buffer is valid for reads.
    pub(crate) unsafe fn load(&mut self) -> MpiResult<()> {
        if let Some((ty, buf, count)) = &self.target {
            // SAFETY: the caller's contract.
            self.staging = unsafe { ty.pack(*buf as *const c_void, *count)? };
        }
        Ok(())
    }

    /// Is the data staged (to unpack at completion)?
    pub(crate) fn is_staged(&self) -> bool {
        self.target.is_some()
    }

    /// Unpack the first `received` bytes into the program's buffer (nothing for a direct
    /// receive).
    ///
    /// # Safety
    /// The program's buffer is valid and not otherwise accessed during the call.
    pub(crate) unsafe fn finish(&self, received: usize) {
        if let Some((ty, buf, count)) = &self.target {
            let n = received.min(self.staging.len());
            // SAFETY: the caller's contract.
            unsafe { ty.unpack(&self.staging[..n], *buf as *mut c_void, *count) };
        }
    }
}

/// Library-owned data of a non-blocking operation on a non-contiguous datatype.
pub enum Staged {
    /// The packed copy a send reads from.
    Send(SendData),
    /// The buffer a receive lands in, unpacked into the program's layout at completion.
    Recv(RecvData),
    /// A non-blocking collective's (see [`nbc::CollStaged`]).
    Coll(Box<nbc::CollStaged>),
    /// A neighbourhood collective's packed blocks (see [`neighbor::Exchange`]).
    Neighbor(Box<neighbor::Exchange>),
    /// A non-blocking communicator duplication's result (see [`info::DupStaged`]).
    Dup(Box<info::DupStaged>),
}

impl Staged {
    /// Complete: unpack a receive's `received` bytes; `s` is the state the completion call
    /// works on (a duplicate made by `MPI_Comm_idup` enters its tables).
    ///
    /// # Safety
    /// The operation completed; the program's receive buffer is valid and not otherwise
    /// accessed during the call.
    pub(crate) unsafe fn finish(self, s: &mut state::State, received: u64) {
        match self {
            // SAFETY: the caller's contract.
            Staged::Recv(r) => unsafe { r.finish(received as usize) },
            // SAFETY: the caller's contract.
            Staged::Coll(c) => unsafe { c.finish() },
            // SAFETY: the caller's contract.
            Staged::Neighbor(x) => unsafe { x.finish() },
            // SAFETY: the caller's contract.
            Staged::Dup(d) => unsafe { d.finish(s) },
            Staged::Send(_) => {}
        }
    }

    /// Does completing it write the program's buffer (so it cannot complete unseen, after
    /// `MPI_Request_free`)?
    pub(crate) fn unpacks(&self) -> bool {
        match self {
            Staged::Recv(_) => true,
            Staged::Coll(c) => c.unpacks(),
            Staged::Neighbor(x) => x.unpacks(),
            // The program's communicator handle is written at completion.
            Staged::Dup(_) => true,
            Staged::Send(_) => false,
        }
    }
}

/// Where `n` elements (a checked count) of `ty` at `buf` are received.
pub(crate) fn recv_data_n(
    buf: *mut c_void,
    n: usize,
    ty: &types::Ty,
    what: &str,
) -> MpiResult<RecvData> {
    let len = ty.packed_len(n)?;
    check_buffer(buf, len, n, ty, what)?;
    Ok(match ty.run(n) {
        Some((off, len)) => RecvData {
            direct: Some((
                (buf as *mut u8).wrapping_offset(if len == 0 { 0 } else { off }),
                len,
            )),
            staging: Vec::new(),
            target: None,
        },
        None => RecvData {
            direct: None,
            staging: vec![0; len],
            target: Some((ty.clone(), buf as usize, n)),
        },
    })
}

/// The `len` bytes at `buf` (a checked, non-null pointer when `len` > 0).
///
/// # Safety
/// `buf..buf+len` must be valid for reads and not written for `'a` (the MPI contract of a
/// send buffer for the duration of the call).
pub(crate) unsafe fn bytes<'a>(buf: *const c_void, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract; the pointer is non-null (checked by the callers).
        unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }
    }
}

/// The `len` bytes at `buf`, writable.
///
/// # Safety
/// `buf..buf+len` must be valid for writes and not otherwise accessed for `'a` (the MPI
/// contract of a receive buffer for the duration of the call).
pub(crate) unsafe fn bytes_mut<'a>(buf: *mut c_void, len: usize) -> &'a mut [u8] {
    if len == 0 {
        &mut []
    } else {
        // SAFETY: the caller's contract; the pointer is non-null (checked by the callers).
        unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) }
    }
}

/// Refuse overlapping send and receive regions (MPI forbids aliased arguments; Rust may not
/// hold a shared and a mutable view of the same bytes).
pub(crate) fn no_overlap(
    a: *const c_void,
    a_len: usize,
    b: *const c_void,
    b_len: usize,
    fname: &str,
) -> MpiResult<()> {
    let (a, b) = (a as usize, b as usize);
    if a_len > 0 && b_len > 0 && a < b + b_len && b < a + a_len {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            format!("{fname}: the send and receive buffers overlap (MPI forbids aliased buffers; use MPI_IN_PLACE where the call has it)"),
        ));
    }
    Ok(())
}

/// Store `v` at `out` (checked non-null).
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
#[inline]
pub(crate) unsafe fn put<T>(out: *mut T, v: T, what: &str) -> MpiResult<()> {
    if out.is_null() {
        return Err(null_argument(what));
    }
    // SAFETY: the caller's contract; non-null checked above.
    unsafe { out.write(v) };
    Ok(())
}

/// The refusal of a NULL pointer given for `what`.
#[cold]
#[inline(never)]
pub(crate) fn null_argument(what: &str) -> MpiError {
    MpiError::new(MPI_ERR_ARG, format!("the {what} argument is NULL"))
}

/// Write `status` to `out` unless it is `MPI_STATUS_IGNORE`.
///
/// # Safety
/// `out` must be null or valid for a write of an `MPI_Status`.
pub(crate) unsafe fn put_status(out: *mut MpiStatus, status: &MpiStatus) {
    if !out.is_null() {
        // SAFETY: the caller's contract.
        unsafe { out.write(*status) };
    }
}

/// Copy `s` into the C string buffer `out` of `cap` bytes (truncated, NUL-terminated) and
/// store its length in `len`.
///
/// # Safety
/// `out` must be valid for `cap` bytes of writes, `len` null or valid for a write.
pub(crate) unsafe fn put_string(
    out: *mut c_char,
    cap: usize,
    len: *mut c_int,
    s: &str,
) -> MpiResult<()> {
    if out.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "the string argument is NULL"));
    }
    let n = s.len().min(cap - 1);
    // SAFETY: `out` holds `cap` bytes (the caller's contract) and n + 1 <= cap.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), out.cast::<u8>(), n);
        out.add(n).write(0);
    }
    if !len.is_null() {
        // SAFETY: the caller's contract.
        unsafe { len.write(n as c_int) };
    }
    Ok(())
}

/// Stores `value` in the first free entry of one of the library's handle tables (groups,
/// derived datatypes, user operations, info objects), which holds at most `max` entries; its
/// handle is `base` + index. Full: `MPI_ERR_NO_MEM`, naming `what` the table holds and the
/// call that frees an entry.
pub(crate) fn table_insert<T>(
    table: &mut Vec<Option<T>>,
    value: T,
    (base, max): (Handle, usize),
    what: &str,
    free_call: &str,
) -> MpiResult<Handle> {
    let i = match table.iter().position(Option::is_none) {
        Some(i) => i,
        None if table.len() < max => {
            table.push(None);
            table.len() - 1
        }
        None => {
            return Err(MpiError::new(
                MPI_ERR_NO_MEM,
                format!("too many {what} (at most {max}): free some with {free_call}"),
            ))
        }
    };
    table[i] = Some(value);
    Ok(base + i)
}

/// The status of an empty or `MPI_PROC_NULL` operation.
pub(crate) fn empty_status() -> MpiStatus {
    MpiStatus {
        source: MPI_ANY_SOURCE,
        tag: MPI_ANY_TAG,
        error: MPI_SUCCESS,
        internal: [0; 5],
    }
}

/// An rmca status in MPI terms.
pub(crate) fn to_mpi_status(st: &rmca::Status) -> MpiStatus {
    if st.is_proc_null() {
        let mut s = empty_status();
        s.source = MPI_PROC_NULL;
        return s;
    }
    let mut s = MpiStatus {
        source: st.source as c_int,
        tag: st.tag,
        error: MPI_SUCCESS,
        internal: [0; 5],
    };
    s.set_bytes(st.bytes as u64);
    s.internal[2] = c_int::from(st.cancelled);
    s
}

/// The outcome of an rmca call that produced a status.
pub(crate) fn outcome(r: rmca::Result<rmca::Status>) -> state::Outcome {
    match r {
        Ok(st) => state::Outcome {
            status: to_mpi_status(&st),
            error: None,
        },
        Err(e) => {
            let status = match &e {
                rmca::Error::Status { status, .. } => to_mpi_status(status),
                _ => empty_status(),
            };
            let error = MpiError::from(e);
            state::Outcome {
                status: MpiStatus {
                    error: error.class,
                    ..status
                },
                error: Some(error),
            }
        }
    }
}

// The argument checks of every point-to-point call: inlined, their refusals built out of
// line (the message formatting would otherwise weigh on the fast paths).

/// A destination rank: `None` for `MPI_PROC_NULL`.
#[inline]
pub(crate) fn dest(rank: c_int, size: usize) -> MpiResult<Option<usize>> {
    if rank == MPI_PROC_NULL {
        return Ok(None);
    }
    match usize::try_from(rank) {
        Ok(r) if r < size => Ok(Some(r)),
        _ => Err(bad_rank("destination", rank, size, "MPI_PROC_NULL")),
    }
}

/// A source selector.
#[inline]
pub(crate) fn source(rank: c_int, size: usize) -> MpiResult<rmca::Src> {
    match rank {
        MPI_ANY_SOURCE => Ok(rmca::Src::Any),
        MPI_PROC_NULL => Ok(rmca::Src::Null),
        _ => match usize::try_from(rank) {
            Ok(r) if r < size => Ok(rmca::Src::Rank(r)),
            _ => Err(bad_rank(
                "source",
                rank,
                size,
                "MPI_ANY_SOURCE, MPI_PROC_NULL",
            )),
        },
    }
}

#[cold]
#[inline(never)]
fn bad_rank(what: &str, rank: c_int, size: usize, or: &str) -> MpiError {
    MpiError::new(
        MPI_ERR_RANK,
        format!(
            "{what} rank {rank} is invalid: the communicator has ranks 0..{} (or use {or})",
            size.saturating_sub(1)
        ),
    )
}

/// A send tag (0..=MPI_TAG_UB).
#[inline]
pub(crate) fn send_tag(tag: c_int) -> MpiResult<c_int> {
    if tag < 0 {
        return Err(bad_tag(tag, "a send", ""));
    }
    Ok(tag)
}

/// A receive tag in rmca terms (`MPI_ANY_TAG` becomes rmca's).
#[inline]
pub(crate) fn recv_tag(tag: c_int) -> MpiResult<c_int> {
    if tag == MPI_ANY_TAG {
        return Ok(rmca::ANY_TAG);
    }
    if tag < 0 {
        return Err(bad_tag(tag, "a receive", " or MPI_ANY_TAG"));
    }
    Ok(tag)
}

#[cold]
#[inline(never)]
fn bad_tag(tag: c_int, what: &str, or: &str) -> MpiError {
    MpiError::new(
        MPI_ERR_TAG,
        format!(
            "tag {tag} is invalid for {what}: tags are 0..={}{or}",
            c_int::MAX
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_insert_reuses_free_entries_and_refuses_past_its_bound() {
        let mut t: Vec<Option<&str>> = Vec::new();
        let at = |t: &mut Vec<Option<&'static str>>, v| {
            table_insert(t, v, (100, 2), "things", "Thing_free")
        };
        assert_eq!(at(&mut t, "a").unwrap(), 100);
        assert_eq!(at(&mut t, "b").unwrap(), 101);
        let e = at(&mut t, "c").unwrap_err();
        assert_eq!(e.class, MPI_ERR_NO_MEM);
        assert!(
            e.msg
                .contains("too many things (at most 2): free some with Thing_free"),
            "{}",
            e.msg
        );
        t[0] = None;
        assert_eq!(at(&mut t, "d").unwrap(), 100);
        assert_eq!(t, [Some("d"), Some("b")]);
    }
}
