//! The fast paths of the completion calls for requests of the fast paths ([`Slot::Pending`]
//! and [`Slot::Sent`]: `MPI_Isend`/`MPI_Irecv` and friends on predefined datatypes): the
//! calls of OSU's bandwidth tests (`MPI_Waitall` with an array of statuses) and of programs
//! completing requests one at a time (`MPI_Wait`, `MPI_Test`, `MPI_Waitany`, `MPI_Waitsome`,
//! `MPI_Testall`, ...). Such a request is completed by its PML id where it lies in the table:
//! it never becomes a general entry (an owning `RawRequest`, a communicator handle cloned,
//! a boxed outcome), which cost more per message than the PML's whole eager path. Anything
//! else (general requests, invalid handles) is left to the general paths of `req.rs`, which
//! also raise the errors.

use std::ffi::c_int;

use super::{empty_status, outcome, to_mpi_status};
use crate::abi::*;
use crate::state::{MpiError, MpiResult, Outcome, Slot, SlotAt, State};
use rmca::raw::{Looked, RawId};

/// How [`poll`] may make progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Until the request completes.
    Wait,
    /// A progress pass if it has not completed at first.
    Test,
    /// None: a pass of `MPI_Waitany`/`MPI_Waitsome`/... ran one for the whole array.
    Look,
}

/// What [`poll`] found for a request of the fast paths.
pub(super) enum Found {
    Pending,
    /// Completed and freed (the handle is the program's to set to `MPI_REQUEST_NULL`): its
    /// outcome, and its communicator.
    Complete(Outcome, Handle),
}

/// Poll request `h` if it is one of the fast paths' (`None` otherwise: a general request,
/// an invalid handle, or one whose communicator was freed, for the general path).
#[inline]
pub(super) fn poll(s: &mut State, h: Handle, mode: Mode) -> Option<Found> {
    let (comm, done) = match s.slot(h)? {
        Slot::Sent {
            comm,
            dest,
            tag,
            len,
        } => (
            comm,
            Outcome {
                status: sent_status(dest, tag, len),
                error: None,
            },
        ),
        Slot::Pending { comm, id } => {
            let c = &s.comm(comm).ok()?.comm;
            let polled = match mode {
                // A test (with a full progress pass) before the wait: the PML's wait stops
                // delivering once its request completed, so a window completed by one
                // MPI_Wait per request would pay a progress pass per message; the pass here
                // delivers what has arrived, and the next waits find their requests done.
                // (Nothing arrived: the wait's spinning starts one pass later.)
                Mode::Wait => Some(id.test(c).unwrap_or_else(|| id.wait(c))),
                Mode::Test => id.test(c),
                Mode::Look => id.test_now(c),
            };
            match polled {
                None => return Some(Found::Pending),
                Some(r) => (comm, outcome(r)),
            }
        }
        Slot::Free | Slot::General | Slot::Reserved => return None,
    };
    // Freed: the slot is retired and its handle stale.
    s.free_fast(h);
    Some(Found::Complete(done, comm))
}

/// `MPI_Wait` (`mode` [`Mode::Wait`]), `MPI_Test` ([`Mode::Test`]) and one request of an
/// array pass ([`Mode::Look`]: `MPI_Waitsome`/`MPI_Testsome`) on request `*request` if it is
/// one of the fast paths' (`None` otherwise, for the general path): whether it completed
/// (always, when waiting). A completed request is freed, its handle set to
/// `MPI_REQUEST_NULL` and its status written to `status` unless that is null (with `ARRAY`,
/// the whole status, its `MPI_ERROR` field too, as the calls returning arrays of statuses
/// do); its error, if it failed, is the result. The status goes from the runtime's to the
/// program's memory once: the general form ([`poll`], a [`Found`], an [`Outcome`] carried
/// through the caller's `Poll`) moved it three times more, 36 instructions per `MPI_Wait` of
/// a window's receive (callgrind, bench/osu-instructions.sh).
///
/// # Safety
/// `request` is valid for a read and a write; `status` is null or valid for a write.
// In line in every caller: a call of its own cost a frame and its result through memory per
// request, and the callers' `mode` is a constant there (callgrind, bench/osu-instructions.sh).
#[inline(always)]
pub(super) unsafe fn complete_one<const ARRAY: bool>(
    s: &mut State,
    request: *mut Handle,
    status: *mut MpiStatus,
    mode: Mode,
) -> Option<MpiResult<bool>> {
    // SAFETY: the caller's contract.
    let h = unsafe { request.read() };
    // Looked up once, and freed where it was found once completed (nothing in between
    // changes the table: the PML's test does not reach the C state).
    let (at, slot) = s.slot_at(h)?;
    let st = match slot {
        Slot::Sent {
            comm: _,
            dest,
            tag,
            len,
        } => sent_status(dest, tag, len),
        Slot::Pending { comm, id } => {
            let c = &s.comm(comm).ok()?.comm;
            // A success comes back as a plain status ([`Looked`]); anything else is
            // completed out of line.
            let looked = match mode {
                // As in [`poll`]: a test with a progress pass first, so that a window
                // completed by one MPI_Wait per request takes its messages in one pass.
                Mode::Wait => match id.look_progressed(c) {
                    Looked::Pending => Looked::completed(id.wait(c)),
                    done => done,
                },
                Mode::Test => id.look_progressed(c),
                Mode::Look => id.look(c),
            };
            match looked {
                Looked::Done(st) => to_mpi_status(&st),
                Looked::Pending => return Some(Ok(false)),
                Looked::Other(r) => {
                    s.free_fast_at(at);
                    // SAFETY: the caller's contract.
                    return Some(unsafe { other_one::<ARRAY>(request, status, comm, *r) });
                }
            }
        }
        Slot::Free | Slot::General | Slot::Reserved => return None,
    };
    s.free_fast_at(at);
    // SAFETY: the caller's contract.
    unsafe {
        request.write(MPI_REQUEST_NULL);
        write_status::<ARRAY>(status, &st);
    }
    Some(Ok(true))
}

/// Write `st` to `out` unless it is null: whole with `ARRAY`, else as the calls completing
/// one operation do ([`super::p2p::put_status`]: `MPI_ERROR` untouched).
///
/// # Safety
/// `out` is null or valid for a write.
#[inline(always)]
unsafe fn write_status<const ARRAY: bool>(out: *mut MpiStatus, st: &MpiStatus) {
    if ARRAY {
        if !out.is_null() {
            // SAFETY: the caller's contract.
            unsafe { out.write(*st) };
        }
    } else {
        // SAFETY: the caller's contract.
        unsafe { super::p2p::put_status(out, st) };
    }
}

/// [`complete_one`] for an operation that completed otherwise than by a plain success
/// (failed, or cancelled) with outcome `r` (on communicator `comm`): its status written,
/// its error returned. Out of line: rare.
///
/// # Safety
/// As [`complete_one`].
#[cold]
#[inline(never)]
unsafe fn other_one<const ARRAY: bool>(
    request: *mut Handle,
    status: *mut MpiStatus,
    comm: Handle,
    r: rmca::Result<rmca::Status>,
) -> MpiResult<bool> {
    let o = outcome(r);
    // SAFETY: the caller's contract.
    unsafe {
        request.write(MPI_REQUEST_NULL);
        write_status::<ARRAY>(status, &o.status);
    }
    o.error.map_or(Ok(true), |e| Err(e.on(comm)))
}

/// A running operation `id` (request `*request`, at `at`, on `comm`) of a Waitsome/Testsome
/// pass ([`Mode::Look`]): whether it completed (freed, its handle set to `MPI_REQUEST_NULL`
/// and its whole status written to `status` unless that is null); `None` if its
/// communicator is gone (for the general path). Out of line, apart from the pass's loop:
/// both in one, the loop kept its state on the stack (callgrind, bench/osu-instructions.sh).
///
/// # Safety
/// As [`complete_one`].
#[inline(never)]
pub(super) unsafe fn look_pending(
    s: &mut State,
    request: *mut Handle,
    status: *mut MpiStatus,
    at: SlotAt,
    comm: Handle,
    id: RawId,
) -> Option<MpiResult<bool>> {
    let c = &s.comm(comm).ok()?.comm;
    let st = match id.look(c) {
        Looked::Done(st) => to_mpi_status(&st),
        Looked::Pending => return Some(Ok(false)),
        Looked::Other(r) => {
            s.free_fast_at(at);
            // SAFETY: the caller's contract.
            return Some(unsafe { other_one::<true>(request, status, comm, *r) });
        }
    };
    s.free_fast_at(at);
    // SAFETY: the caller's contract.
    unsafe {
        request.write(MPI_REQUEST_NULL);
        write_status::<true>(status, &st);
    }
    Some(Ok(true))
}

/// One progress pass of the runtime, for the passes over an array of [`Mode::Look`] polls.
pub(super) fn progress(s: &State) {
    if let Ok(world) = s.comm(MPI_COMM_WORLD) {
        rmca::raw::progress(&world.comm);
    }
}

/// `MPI_Waitall` with an array of statuses. One pass over the array takes each request of
/// the fast paths from the table (its handle looked at once), writes the statuses of the
/// sends completed at start and gathers the running operations into one batch for the PML,
/// which reports each one's status as it releases it. Requests of the general paths (and
/// invalid handles) are rare here: they are completed after the batch, one by one, by the
/// general path ([`super::req::wait_general`]). Nothing is allocated per call unless such a
/// request is there (the batch buffers are the state's), and no fast request is converted
/// to a general entry.
///
/// # Safety
/// `requests` holds `n` handles and `statuses` room for `n` statuses.
// Out of line: 10 instructions per message fewer than inlined into MPI_Waitall (callgrind,
// bench/instructions.sh).
#[inline(never)]
pub(super) unsafe fn waitall_statuses(
    s: &mut State,
    n: usize,
    requests: *mut Handle,
    statuses: *mut MpiStatus,
) -> MpiResult<()> {
    let mut batch = std::mem::take(&mut s.wait_batch);
    // The communicator of the running operations when they share one (OSU's windows, most
    // programs): looked up once instead of once per operation.
    let mut shared_comm: Option<Handle> = None;
    let mut mixed = false;
    // Positions of the requests left to the general path.
    let mut general: Vec<usize> = Vec::new();
    for i in 0..n {
        // SAFETY: the caller's contract.
        let at = unsafe { requests.add(i) };
        // SAFETY: the caller's contract.
        let h = unsafe { at.read() };
        let status = match s.take_fast(h) {
            Ok(Slot::Pending { comm, id }) => {
                // SAFETY: the caller's contract.
                unsafe { at.write(MPI_REQUEST_NULL) };
                batch.requests.push(id);
                batch.slots.push((i, comm));
                mixed |= *shared_comm.get_or_insert(comm) != comm;
                // Written when the batch completes.
                continue;
            }
            Ok(Slot::Sent {
                comm: _,
                dest,
                tag,
                len,
            }) => {
                // SAFETY: the caller's contract.
                unsafe { at.write(MPI_REQUEST_NULL) };
                sent_status(dest, tag, len)
            }
            _ if h == MPI_REQUEST_NULL => empty_status(),
            _ => {
                general.push(i);
                continue;
            }
        };
        // SAFETY: the caller's contract.
        unsafe { statuses.add(i).write(status) };
    }
    // The error of the lowest position, as the general path reports.
    let mut first_error: Option<(usize, MpiError)> = None;
    let mut result = Ok(());
    if !batch.requests.is_empty() {
        // Every communicator of a process shares one runtime: the batch may be completed on
        // any of them; world stands for a freed one (whose requests are general ones: see
        // `State::free_comm`).
        let one = shared_comm
            .filter(|_| !mixed)
            .and_then(|h| s.comm(h).ok())
            .map(|c| &c.comm);
        match one.map_or_else(|| s.comm(MPI_COMM_WORLD).map(|w| &w.comm), Ok) {
            Ok(world) => {
                let slots = &batch.slots;
                // A status is translated on its own communicator.
                let comm_of = |k: usize| match one {
                    Some(c) => c,
                    None => s.comm(slots[k].1).map_or(world, |c| &c.comm),
                };
                batch.requests.complete_each(world, comm_of, |k, r| {
                    let i = slots[k].0;
                    let st = match r {
                        Ok(st) => to_mpi_status(&st),
                        Err(e) => failed_status(i, slots[k].1, e, &mut first_error),
                    };
                    // SAFETY: the caller's contract.
                    unsafe { statuses.add(i).write(st) };
                });
            }
            Err(e) => result = Err(e),
        }
        batch.slots.clear();
    }
    s.wait_batch = batch;
    for i in general {
        // SAFETY: the caller's contract.
        let (st, e) = unsafe {
            let at = requests.add(i);
            super::req::wait_general(s, at.read(), at)
        };
        // SAFETY: the caller's contract.
        unsafe { statuses.add(i).write(st) };
        if let Some(e) = e {
            note_error(&mut first_error, i, e);
        }
    }
    result.and(match first_error {
        None => Ok(()),
        Some((_, e)) => Err(super::req::in_status(&e)),
    })
}

/// Keep `e`, the error of array position `i`, if it is the lowest position failed so far.
fn note_error(first_error: &mut Option<(usize, MpiError)>, i: usize, e: MpiError) {
    if first_error.as_ref().is_none_or(|(at, _)| i < *at) {
        *first_error = Some((i, e));
    }
}

/// The status of the operation at array position `i` (on communicator `comm`) that failed
/// with `e`, noting its error in `first_error` if it is the lowest position failed so far.
/// Out of line: failures are rare, and the success path of the caller's loop stays small.
#[cold]
#[inline(never)]
fn failed_status(
    i: usize,
    comm: Handle,
    e: rmca::Error,
    first_error: &mut Option<(usize, MpiError)>,
) -> MpiStatus {
    let o = outcome(Err(e));
    if let Some(e) = o.error {
        note_error(first_error, i, e.on(comm));
    }
    o.status
}

/// The status of a send completed at start.
#[inline]
pub(super) fn sent_status(dest: u32, tag: c_int, len: usize) -> MpiStatus {
    let mut st = MpiStatus {
        source: dest as c_int,
        tag,
        error: MPI_SUCCESS,
        internal: [0; 5],
    };
    st.set_bytes(len as u64);
    st
}

/// `MPI_Testall` when every request is `MPI_REQUEST_NULL` or one of the fast paths' (`None`
/// otherwise, for the general path, as soon as a general request or an invalid handle is
/// met): a first pass (again after a progress pass if one without found an operation still
/// running) looks at each request, testing the running operations, and stops at the first
/// one still running (`false`: nothing
/// changed for the program; an operation that completed keeps its outcome in its slot,
/// [`Slot::Sent`] for a success, until all have). Once all have, a second pass frees each
/// request and writes its status. Whether all had, and then the outcome. A failed or
/// cancelled operation became a general request in the first pass and is completed by the
/// general path in the second. The statuses are written by the second pass only: the first
/// pass writing them cost 50 instructions per request more for a window of sends completed
/// at start (callgrind, bench/osu-instructions.sh).
///
/// # Safety
/// `requests` holds `n` handles; `statuses` is null or has room for `n` statuses.
pub(super) unsafe fn testall(
    s: &mut State,
    n: usize,
    requests: *mut Handle,
    statuses: *mut MpiStatus,
) -> Option<(bool, MpiResult<()>)> {
    // A look first, the progress pass only if some operation is still running (as Open
    // MPI's test_all): a window of sends completed at start needs none (3 instructions per
    // message; callgrind, bench/osu-instructions.sh).
    // SAFETY: the caller's contract.
    if !unsafe { testall_look(s, n, requests) }? {
        progress(s);
        // SAFETY: the caller's contract.
        if !unsafe { testall_look(s, n, requests) }? {
            return Some((false, Ok(())));
        }
    }
    // SAFETY: the caller's contract.
    Some((true, unsafe { testall_free(s, n, requests, statuses) }))
}

/// [`testall`]'s first pass: `None` (for the general path) at a general request or an
/// invalid handle; `Some(false)` at the first operation still running; else `Some(true)`.
/// Each pass a function of its own: in one, the loops kept their state on the stack
/// (callgrind, bench/osu-instructions.sh).
///
/// # Safety
/// `requests` holds `n` handles.
#[inline(never)]
unsafe fn testall_look(s: &mut State, n: usize, requests: *mut Handle) -> Option<bool> {
    for i in 0..n {
        // SAFETY: the caller's contract.
        let h = unsafe { requests.add(i).read() };
        match s.slot_at(h) {
            Some((_, Slot::Sent { .. })) => {}
            Some((at, Slot::Pending { comm, id })) => match testall_one(s, h, at, comm, id) {
                TestallOne::Done => {}
                // Not all done: the rest need no test now (the next call tests them).
                TestallOne::Pending => return Some(false),
                TestallOne::General => return None,
            },
            // A general request: all go to the general path, which takes the slots this
            // pass left as they are (completed operations as `Slot::Sent` or general
            // entries). Looked for here, not in a pass before the progress pass: one handle
            // lookup per request fewer.
            Some((_, Slot::Free | Slot::General | Slot::Reserved)) => return None,
            None if h == MPI_REQUEST_NULL => {}
            // An invalid handle: the general path raises the error.
            None => return None,
        }
    }
    Some(true)
}

/// [`testall`]'s second pass, once all have completed: each request freed and its status
/// written; the failed and cancelled operations (general entries now) completed by the
/// general path; the outcome.
///
/// # Safety
/// As [`testall`].
#[inline(never)]
unsafe fn testall_free(
    s: &mut State,
    n: usize,
    requests: *mut Handle,
    statuses: *mut MpiStatus,
) -> MpiResult<()> {
    let mut first_error: Option<(usize, MpiError)> = None;
    for i in 0..n {
        // SAFETY: the caller's contract.
        let at = unsafe { requests.add(i) };
        // SAFETY: the caller's contract.
        let h = unsafe { at.read() };
        // Each branch writes its own status: one write after the match made the loop carry
        // the status through the stack (25 instructions per request; callgrind,
        // bench/osu-instructions.sh).
        match s.slot_at(h) {
            Some((slot_at, Slot::Sent { dest, tag, len, .. })) => {
                s.free_fast_at(slot_at);
                // SAFETY: the caller's contract.
                unsafe {
                    at.write(MPI_REQUEST_NULL);
                    if !statuses.is_null() {
                        statuses.add(i).write(sent_status(dest, tag, len));
                    }
                }
            }
            None if h == MPI_REQUEST_NULL => {
                if !statuses.is_null() {
                    // SAFETY: the caller's contract.
                    unsafe { statuses.add(i).write(empty_status()) };
                }
            }
            // Done (the first pass saw to it): completed at once.
            // SAFETY: the caller's contract.
            _ => unsafe { testall_general(s, i, at, statuses, &mut first_error) },
        }
    }
    first_error.map_or(Ok(()), |(_, e)| Err(super::req::in_status(&e)))
}

/// [`testall_free`] on a general request (a failed or cancelled operation) at position `i`,
/// whose handle is at `at`: completed by the general path, its status written, its error
/// noted. Out of line: rare.
///
/// # Safety
/// As [`testall`], and `at` is `requests + i`.
#[cold]
#[inline(never)]
unsafe fn testall_general(
    s: &mut State,
    i: usize,
    at: *mut Handle,
    statuses: *mut MpiStatus,
    first_error: &mut Option<(usize, MpiError)>,
) {
    // SAFETY: the caller's contract.
    let (st, e) = unsafe { super::req::wait_general(s, at.read(), at) };
    if let Some(e) = e {
        note_error(first_error, i, e);
    }
    if !statuses.is_null() {
        // SAFETY: the caller's contract.
        unsafe { statuses.add(i).write(st) };
    }
}

/// What [`testall_one`] found.
enum TestallOne {
    /// Completed: a success kept in its slot ([`Slot::Sent`]), anything else as a general
    /// entry.
    Done,
    Pending,
    /// Its communicator was freed: the general path's.
    General,
}

/// [`testall`]'s test of running operation `id` (request `h` at `at`, on `comm`).
#[inline(always)]
fn testall_one(s: &mut State, h: Handle, at: SlotAt, comm: Handle, id: RawId) -> TestallOne {
    // (A freed communicator's requests are general ones: see `State::free_comm`.)
    let Ok(c) = s.comm(comm) else {
        return TestallOne::General;
    };
    match id.look(&c.comm) {
        Looked::Pending => TestallOne::Pending,
        // A success keeps its status in the slot (a receive from MPI_PROC_NULL, whose
        // status a slot cannot hold, as a general entry).
        Looked::Done(st) if !st.is_proc_null() => {
            s.set_slot_at(
                at,
                Slot::Sent {
                    comm,
                    dest: st.source as u32,
                    tag: st.tag,
                    len: st.bytes,
                },
            );
            TestallOne::Done
        }
        Looked::Done(st) => {
            s.keep_done(h, comm, outcome(Ok(st)));
            TestallOne::Done
        }
        // A failed or cancelled operation goes to a general entry, as the general path
        // keeps it, and is completed by the second pass.
        Looked::Other(r) => {
            s.keep_done(h, comm, outcome(*r));
            TestallOne::Done
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmca::framework::pml::StatusError;

    #[test]
    fn sent_status_reports_destination_tag_and_count() {
        let st = sent_status(3, 42, (1 << 33) + 5);
        assert_eq!((st.source, st.tag, st.error), (3, 42, MPI_SUCCESS));
        assert_eq!(st.bytes(), (1 << 33) + 5);
        assert_eq!(st.internal[2], 0, "not cancelled");
    }

    #[test]
    fn one_completion_leaves_mpi_error_alone_and_an_array_writes_it() {
        let st = MpiStatus {
            source: 1,
            tag: 2,
            error: MPI_ERR_TRUNCATE,
            internal: [3; 5],
        };
        let mut out = MpiStatus {
            source: -5,
            tag: -5,
            error: 77,
            internal: [9; 5],
        };
        // SAFETY: `out` is a live status; null is MPI_STATUS_IGNORE, written nowhere.
        unsafe {
            write_status::<false>(&mut out, &st);
            assert_eq!(
                (out.source, out.tag, out.error, out.internal),
                (1, 2, 77, [3; 5])
            );
            write_status::<true>(&mut out, &st);
            assert_eq!(out.error, MPI_ERR_TRUNCATE);
            write_status::<true>(std::ptr::null_mut(), &st);
            write_status::<false>(std::ptr::null_mut(), &st);
        }
    }

    #[test]
    fn a_failed_operation_keeps_its_status_and_the_lowest_failed_position() {
        let truncated = |received| rmca::Error::Status {
            error: StatusError::Truncated {
                message_len: 8,
                received,
            },
            status: rmca::Status {
                source: 1,
                tag: 7,
                bytes: received,
                cancelled: false,
            },
        };
        let comm = MPI_COMM_WORLD + 1;
        let mut first = None;
        let st = failed_status(5, comm, truncated(4), &mut first);
        assert_eq!((st.source, st.tag, st.error), (1, 7, MPI_ERR_TRUNCATE));
        assert_eq!(st.bytes(), 4);
        let (at, e) = first.as_ref().expect("noted");
        assert_eq!((*at, e.class, e.comm), (5, MPI_ERR_TRUNCATE, Some(comm)));
        // A higher position leaves the noted error; a lower one replaces it.
        failed_status(9, comm, truncated(2), &mut first);
        assert_eq!(first.as_ref().map(|(at, _)| *at), Some(5));
        note_error(&mut first, 2, MpiError::new(MPI_ERR_REQUEST, "stale"));
        let (at, e) = first.expect("noted");
        assert_eq!((at, e.class), (2, MPI_ERR_REQUEST));
    }
}
