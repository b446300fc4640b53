//! Completion: the wait and test families, freeing requests.
#![allow(non_snake_case)]

use std::ffi::c_int;

use rmca::raw::Polled;

use super::complete::{self, Found, Mode};
use super::p2p::put_status;
use super::{call, empty_status, outcome, put};
use crate::abi::*;
use crate::state::{self, MpiError, MpiResult, Outcome, ReqState, Slot, State};
use rmca_mpi_export::export;

/// What polling a request found.
enum Poll {
    /// `MPI_REQUEST_NULL` or an inactive persistent request.
    Inactive,
    Pending,
    /// Completed: its outcome, its communicator, and whether the handle was freed (set to
    /// `MPI_REQUEST_NULL`: every request but a persistent one).
    Complete {
        outcome: Outcome,
        comm: Handle,
        freed: bool,
    },
}

/// Make progress on an active request `h` (once, or until it completes when `block`) and
/// keep its outcome in the entry if it completed.
fn settle(s: &mut State, h: Handle, block: bool) -> MpiResult<()> {
    let entry = s.request(h)?;
    if !matches!(entry.state, ReqState::Active(_)) {
        return Ok(());
    }
    let ReqState::Active(r) = std::mem::replace(&mut entry.state, ReqState::Inactive) else {
        unreachable!("matched above")
    };
    entry.state = if block {
        ReqState::Done(Box::new(outcome(r.wait())))
    } else {
        match r.test() {
            Polled::Pending(r) => ReqState::Active(r),
            Polled::Done(res) => ReqState::Done(Box::new(outcome(res))),
        }
    };
    Ok(())
}

/// Poll `h`, completing it (freeing or deactivating) if it is done.
fn poll(s: &mut State, h: Handle, block: bool) -> MpiResult<Poll> {
    poll_in(s, h, if block { Mode::Wait } else { Mode::Test })
}

/// [`poll`], making progress as `mode` says (a request of the fast paths is completed where
/// it lies: `complete.rs`).
fn poll_in(s: &mut State, h: Handle, mode: Mode) -> MpiResult<Poll> {
    if h == MPI_REQUEST_NULL {
        return Ok(Poll::Inactive);
    }
    match complete::poll(s, h, mode) {
        Some(Found::Pending) => return Ok(Poll::Pending),
        Some(Found::Complete(outcome, comm)) => {
            return Ok(Poll::Complete {
                outcome,
                comm,
                freed: true,
            })
        }
        None => {}
    }
    settle(s, h, mode == Mode::Wait)?;
    let entry = s.request(h)?;
    let comm = entry.comm;
    match &entry.state {
        ReqState::Inactive => Ok(Poll::Inactive),
        ReqState::Active(_) => Ok(Poll::Pending),
        ReqState::Done(_) => {
            let persistent = entry.persistent.is_some();
            // Only a request that staged data has any: no lookup for the others.
            let staged = entry.staged;
            let ReqState::Done(outcome) = std::mem::replace(&mut entry.state, ReqState::Inactive)
            else {
                unreachable!("matched above")
            };
            if !persistent {
                s.remove_request(h);
            }
            if let Some(staged) = staged.then(|| s.staged.remove(&h)).flatten() {
                // SAFETY: the operation completed; the program leaves its buffer alone
                // until the completion call returns.
                unsafe { staged.finish(s, outcome.status.bytes()) };
            }
            Ok(Poll::Complete {
                outcome: *outcome,
                comm,
                freed: !persistent,
            })
        }
    }
}

/// Read the `i`-th handle of a C array.
///
/// # Safety
/// `requests` must hold more than `i` handles.
unsafe fn handle_at(requests: *mut Handle, i: usize) -> Handle {
    // SAFETY: the caller's contract.
    unsafe { requests.add(i).read() }
}

/// Check an array argument of `n` entries.
fn array(ptr: *const Handle, count: c_int) -> MpiResult<usize> {
    let n = super::count(count, "request count")?;
    if n > 0 && ptr.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "the requests array is NULL"));
    }
    Ok(n)
}

/// `MPI_Wait`.
#[export]
pub unsafe extern "C" fn MPI_Wait(request: *mut Handle, status: *mut MpiStatus) -> c_int {
    if state::waits_release() {
        return call("MPI_Wait", MPI_COMM_WORLD, || {
            let mut flag = 0;
            super::wait_by_testing(|| {
                // SAFETY: MPI_Wait's contract is MPI_Test's.
                unsafe { test(request, &mut flag, status)? };
                Ok(flag != 0)
            })
        });
    }
    call("MPI_Wait", MPI_COMM_WORLD, || {
        if request.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the request argument is NULL"));
        }
        // A request of the fast paths: completed where it lies (`complete.rs`), in this
        // call's frame (a closure of its own cost a frame per request).
        let fast = state::with(
            #[inline(always)]
            |s| {
                // SAFETY: non-null, the caller's handle and status (or MPI_STATUS_IGNORE).
                Ok(unsafe { complete::complete_one::<false>(s, request, status, Mode::Wait) })
            },
        )?;
        if let Some(r) = fast {
            return r.map(drop);
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { request.read() };
        match state::with(|s| poll(s, h, true))? {
            Poll::Complete {
                outcome,
                comm,
                freed,
            } => {
                // SAFETY: the caller's handle and status (or MPI_STATUS_IGNORE).
                unsafe {
                    if freed {
                        request.write(MPI_REQUEST_NULL);
                    }
                    put_status(status, &outcome.status);
                }
                outcome.error.map_or(Ok(()), |e| Err(e.on(comm)))
            }
            Poll::Inactive | Poll::Pending => {
                // SAFETY: as above.
                unsafe { put_status(status, &empty_status()) };
                Ok(())
            }
        }
    })
}

/// `MPI_Test`.
#[export]
pub unsafe extern "C" fn MPI_Test(
    request: *mut Handle,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    // SAFETY: MPI_Test's contract.
    call("MPI_Test", MPI_COMM_WORLD, || unsafe {
        test(request, flag, status)
    })
}

/// `MPI_Test`'s body, also `MPI_Wait`'s test at `MPI_THREAD_MULTIPLE` (`wait_by_testing`).
///
/// # Safety
/// `MPI_Test`'s contract.
#[inline(always)]
unsafe fn test(request: *mut Handle, flag: *mut c_int, status: *mut MpiStatus) -> MpiResult<()> {
    if request.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "the request argument is NULL"));
    }
    // A request of the fast paths: completed where it lies (`complete.rs`), in this call's
    // frame (a closure of its own cost a frame per request).
    let fast = state::with(
        #[inline(always)]
        |s| {
            // SAFETY: non-null, the caller's handle and status (or MPI_STATUS_IGNORE).
            Ok(unsafe { complete::complete_one::<false>(s, request, status, Mode::Test) })
        },
    )?;
    if let Some(r) = fast {
        // A failed operation completed too (its error is the call's).
        let done = !matches!(r, Ok(false));
        // SAFETY: the caller's int.
        unsafe { put(flag, c_int::from(done), "flag")? };
        return r.map(drop);
    }
    // SAFETY: non-null, the caller's handle.
    let h = unsafe { request.read() };
    match state::with(|s| poll(s, h, false))? {
        Poll::Pending => {
            // SAFETY: the caller's int.
            unsafe { put(flag, 0, "flag") }
        }
        Poll::Inactive => {
            // SAFETY: the caller's int and status (or MPI_STATUS_IGNORE).
            unsafe {
                put(flag, 1, "flag")?;
                put_status(status, &empty_status());
            }
            Ok(())
        }
        Poll::Complete {
            outcome,
            comm,
            freed,
        } => {
            // SAFETY: the caller's handle, int and status (or MPI_STATUS_IGNORE).
            unsafe {
                if freed {
                    request.write(MPI_REQUEST_NULL);
                }
                put(flag, 1, "flag")?;
                put_status(status, &outcome.status);
            }
            outcome.error.map_or(Ok(()), |e| Err(e.on(comm)))
        }
    }
}

/// Complete every request of the array (they are all done or inactive, or `block`), writing
/// the statuses; `MPI_ERR_IN_STATUS` if any failed.
///
/// # Safety
/// `requests` holds `n` handles; `statuses` is null or holds `n` statuses.
unsafe fn complete_all(
    s: &mut State,
    n: usize,
    requests: *mut Handle,
    statuses: *mut MpiStatus,
    block: bool,
) -> MpiResult<()> {
    let mut first_error: Option<MpiError> = None;
    let mut outcomes = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: the caller's contract.
        let h = unsafe { handle_at(requests, i) };
        let o = match poll(s, h, block) {
            Ok(Poll::Complete {
                outcome,
                comm,
                freed,
            }) => {
                if freed {
                    // SAFETY: the caller's contract.
                    unsafe { requests.add(i).write(MPI_REQUEST_NULL) };
                }
                if let Some(e) = &outcome.error {
                    first_error.get_or_insert_with(|| e.clone().on(comm));
                }
                outcome.status
            }
            Ok(Poll::Inactive | Poll::Pending) => empty_status(),
            Err(e) => {
                let mut st = empty_status();
                st.error = e.class;
                first_error.get_or_insert(e);
                st
            }
        };
        outcomes.push(o);
    }
    if !statuses.is_null() {
        for (i, st) in outcomes.into_iter().enumerate() {
            // SAFETY: the caller's contract.
            unsafe { statuses.add(i).write(st) };
        }
    }
    match first_error {
        None => Ok(()),
        Some(e) => Err(in_status(&e)),
    }
}

/// Block until request `h`, which the fast paths of `complete.rs` leave alone (a general
/// request, or an invalid handle), completes: its status (with the error class of a failure)
/// and its error, the handle set to `MPI_REQUEST_NULL` at `at` if the request was freed, as
/// [`complete_all`] does for each of its requests.
///
/// # Safety
/// `at` is the program's handle of `h`, writable.
pub(super) unsafe fn wait_general(
    s: &mut State,
    h: Handle,
    at: *mut Handle,
) -> (MpiStatus, Option<MpiError>) {
    match poll(s, h, true) {
        Ok(Poll::Complete {
            outcome,
            comm,
            freed,
        }) => {
            if freed {
                // SAFETY: the caller's contract.
                unsafe { at.write(MPI_REQUEST_NULL) };
            }
            let e = outcome.error.map(|e| e.on(comm));
            (outcome.status, e)
        }
        Ok(Poll::Inactive | Poll::Pending) => (empty_status(), None),
        Err(e) => {
            let mut st = empty_status();
            st.error = e.class;
            (st, Some(e))
        }
    }
}

/// `MPI_ERR_IN_STATUS` for a completion call of many requests of which one failed with `e`.
#[cold]
pub(super) fn in_status(e: &MpiError) -> MpiError {
    MpiError::with_comm(
        MPI_ERR_IN_STATUS,
        format!("a request failed (see the statuses): {}", e.msg),
        e.comm,
    )
}

/// `MPI_Waitall`.
#[export]
pub unsafe extern "C" fn MPI_Waitall(
    count: c_int,
    requests: *mut Handle,
    statuses: *mut MpiStatus,
) -> c_int {
    if state::waits_release() {
        return call("MPI_Waitall", MPI_COMM_WORLD, || {
            let mut flag = 0;
            super::wait_by_testing(|| {
                // SAFETY: MPI_Waitall's contract is MPI_Testall's.
                unsafe { testall(count, requests, &mut flag, statuses)? };
                Ok(flag != 0)
            })
        });
    }
    call("MPI_Waitall", MPI_COMM_WORLD, || {
        let n = array(requests, count)?;
        // SAFETY: MPI_Waitall's contract: `count` handles and statuses (or
        // MPI_STATUSES_IGNORE).
        state::with(|s| {
            if statuses.is_null() {
                // SAFETY: MPI_Waitall's contract: `count` handles.
                return unsafe { waitall_ignoring_statuses(s, n, requests) };
            }
            // SAFETY: MPI_Waitall's contract: `count` handles and statuses.
            unsafe { complete::waitall_statuses(s, n, requests, statuses) }
        })
    })
}

/// `MPI_Waitall` with `MPI_STATUSES_IGNORE`, the loop of windowed transfers (a window of
/// `MPI_Isend`/`MPI_Irecv`, then this): one pass over the array frees the handles (every
/// request but a persistent one is freed by this call, failed or not) and moves the running
/// operations into one batch for the PML ([`rmca::raw::RawBatch`]). The buffers are the
/// state's, reused: nothing is allocated per call, and no request is looked up, moved or
/// converted to a status more than once (the general path cost as much per message as the
/// PML's whole eager path).
///
/// # Safety
/// `requests` holds `n` handles.
unsafe fn waitall_ignoring_statuses(
    s: &mut State,
    n: usize,
    requests: *mut Handle,
) -> MpiResult<()> {
    let mut batch = std::mem::take(&mut s.wait_batch);
    // The error of the lowest position, as the general path reports.
    let mut first_error: Option<(usize, MpiError)> = None;
    let mut note = |i: usize, e: MpiError| {
        if first_error.as_ref().is_none_or(|(at, _)| i < *at) {
            first_error = Some((i, e));
        }
    };
    for i in 0..n {
        // SAFETY: the caller's contract.
        let h = unsafe { handle_at(requests, i) };
        if h == MPI_REQUEST_NULL {
            continue;
        }
        match s.take_fast(h) {
            Ok(Slot::Pending { comm, id }) => {
                // SAFETY: the caller's contract.
                unsafe { requests.add(i).write(MPI_REQUEST_NULL) };
                batch.requests.push(id);
                batch.slots.push((i, comm));
                continue;
            }
            Ok(Slot::Sent { .. }) => {
                // An eager send the BTL took at once: done, successfully.
                // SAFETY: the caller's contract.
                unsafe { requests.add(i).write(MPI_REQUEST_NULL) };
                continue;
            }
            Ok(Slot::General | Slot::Free | Slot::Reserved) => {}
            Err(e) => {
                note(i, e);
                continue;
            }
        }
        // A request of the general paths.
        let entry = match s.request(h) {
            Ok(entry) => entry,
            Err(e) => {
                note(i, e);
                continue;
            }
        };
        let comm = entry.comm;
        let staged = std::mem::take(&mut entry.staged);
        // Persistent requests stay, inactive once complete; the others are freed.
        let state = std::mem::replace(&mut entry.state, ReqState::Inactive);
        if entry.persistent.is_none() {
            s.free_request(h);
            // SAFETY: the caller's contract.
            unsafe { requests.add(i).write(MPI_REQUEST_NULL) };
        }
        if staged {
            // SAFETY: the caller's contract: the buffers are left alone until we return.
            if let Some(e) = unsafe { complete_staged(s, h, state) } {
                note(i, e.on(comm));
            }
            continue;
        }
        match state {
            // Joins the batch while its communicator's entry is there to translate a failed
            // status (a freed communicator's operations are waited for on their own, as
            // collectives are).
            ReqState::Active(r) if s.comm(comm).is_err() => batch.colls.push((i, comm, r)),
            ReqState::Active(r) if r.completed_at_start() => {}
            ReqState::Active(r) => match r.into_id() {
                Ok(id) => {
                    batch.requests.push(id);
                    batch.slots.push((i, comm));
                }
                Err(coll) => batch.colls.push((i, comm, coll)),
            },
            ReqState::Done(outcome) => {
                if let Some(e) = outcome.error {
                    note(i, e.on(comm));
                }
            }
            // A persistent request not started: nothing to do.
            ReqState::Inactive => {}
        }
    }
    if !batch.requests.is_empty() {
        let world = &s.comm(MPI_COMM_WORLD)?.comm;
        let slots = &batch.slots;
        // A failed operation's status is translated on its own communicator (there: see
        // above and `State::free_comm`).
        let comm_of = |k: usize| s.comm(slots[k].1).map_or(world, |c| &c.comm);
        batch.requests.complete(world, comm_of, |k, e| {
            let (i, comm) = slots[k];
            note(i, MpiError::from(e).on(comm));
        });
    }
    for (i, comm, r) in batch.colls.drain(..) {
        if let Err(e) = r.wait() {
            note(i, MpiError::from(e).on(comm));
        }
    }
    batch.slots.clear();
    s.wait_batch = batch;
    match first_error {
        None => Ok(()),
        Some((_, e)) => Err(in_status(&e)),
    }
}

/// Complete request `h` (its state taken out of its entry), whose data is staged
/// aside, on its own: data of a non-contiguous derived datatype is unpacked by the length
/// received, which only the request's own status has. Its error, if it failed.
///
/// # Safety
/// The program leaves the request's buffers alone until the completion call returns.
#[cold]
unsafe fn complete_staged(s: &mut State, h: Handle, state: ReqState) -> Option<MpiError> {
    let done = match state {
        ReqState::Active(r) => super::outcome(r.wait()),
        ReqState::Done(outcome) => *outcome,
        ReqState::Inactive => return None,
    };
    if let Some(staged) = s.staged.remove(&h) {
        // SAFETY: the operation completed; the caller's contract.
        unsafe { staged.finish(s, done.status.bytes()) };
    }
    done.error
}

/// `MPI_Testall`: completes all of them, or none.
#[export]
pub unsafe extern "C" fn MPI_Testall(
    count: c_int,
    requests: *mut Handle,
    flag: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    // SAFETY: MPI_Testall's contract.
    call("MPI_Testall", MPI_COMM_WORLD, || unsafe {
        testall(count, requests, flag, statuses)
    })
}

/// `MPI_Testall`'s body, also `MPI_Waitall`'s test at `MPI_THREAD_MULTIPLE`.
///
/// # Safety
/// `MPI_Testall`'s contract.
#[inline(always)]
unsafe fn testall(
    count: c_int,
    requests: *mut Handle,
    flag: *mut c_int,
    statuses: *mut MpiStatus,
) -> MpiResult<()> {
    let n = array(requests, count)?;
    state::with(|s| {
        // SAFETY: MPI_Testall's contract: `count` handles, `count` statuses (or
        // MPI_STATUSES_IGNORE).
        let all = match unsafe { complete::testall(s, n, requests, statuses) } {
            Some((all, done)) => {
                // SAFETY: the caller's int.
                unsafe { put(flag, c_int::from(all), "flag")? };
                return done;
            }
            None => {
                let mut all = true;
                for i in 0..n {
                    // SAFETY: MPI_Testall's contract: `count` handles.
                    let h = unsafe { handle_at(requests, i) };
                    if h == MPI_REQUEST_NULL {
                        continue;
                    }
                    settle(s, h, false)?;
                    all &= !matches!(s.request(h)?.state, ReqState::Active(_));
                }
                all
            }
        };
        // SAFETY: the caller's int.
        unsafe { put(flag, c_int::from(all), "flag")? };
        if !all {
            return Ok(());
        }
        // SAFETY: as above, and `count` statuses (or MPI_STATUSES_IGNORE).
        unsafe { complete_all(s, n, requests, statuses, false) }
    })
}

/// How many of the `n` handles at `requests` are `MPI_REQUEST_NULL` before the first that
/// is not. Four compared at a time: one compare and branch per handle cost 4 times more per
/// message of a 64-request window completed by `MPI_Waitany` (callgrind).
///
/// # Safety
/// `requests` holds `n` handles.
#[inline]
unsafe fn leading_nulls(requests: *const Handle, n: usize) -> usize {
    // SAFETY: the caller's contract (`i` < `n`).
    let at = |i: usize| MPI_REQUEST_NULL ^ unsafe { requests.add(i).read() };
    let mut i = 0;
    while i + 4 <= n && (at(i) | at(i + 1) | at(i + 2) | at(i + 3)) == 0 {
        i += 4;
    }
    while i < n && at(i) == 0 {
        i += 1;
    }
    i
}

/// What one pass of Waitany/Testany found.
enum Any {
    /// Some requests are pending, none completed.
    Pending,
    /// Every request is inactive: `index` was set to `MPI_UNDEFINED` and `status` emptied.
    Inactive,
    /// A request completed: `index` and `status` were written, the handle freed (unless
    /// persistent); the operation's error, if it failed.
    Found(MpiResult<()>),
}

/// One pass of Waitany/Testany over `n` requests. With `progress`, one progress pass for the
/// array first; without, what has completed already (a window's later `MPI_Waitany` calls
/// find a request the previous calls' passes completed, with no pass of their own). A
/// request of the fast paths is completed where it lies, its status written straight to
/// the program's (`complete::complete_one`): through the general form (an `Outcome` carried
/// back to the caller) a window's `MPI_Waitany` cost 1.6 times its `MPI_Wait`.
///
/// # Safety
/// `requests` holds `n` handles; `index` is the caller's int, `status` a status or
/// `MPI_STATUS_IGNORE`.
unsafe fn any_pass(
    s: &mut State,
    n: usize,
    requests: *mut Handle,
    index: *mut c_int,
    status: *mut MpiStatus,
    progress: bool,
) -> MpiResult<Any> {
    if progress {
        complete::progress(s);
    }
    // The lowest completed index, as MPICH and Open MPI answer: MPI allows any, but programs
    // and test suites (mpi4py's test_p2p_obj) rely on it. The requests already completed
    // (MPI_REQUEST_NULL) are skipped four at a time at the start, where a window completed
    // in order has them.
    // SAFETY: the caller's contract.
    let skip = unsafe { leading_nulls(requests, n) };
    let mut inactive = skip;
    for i in skip..n {
        // SAFETY: the caller's contract.
        let h = unsafe { handle_at(requests, i) };
        if h == MPI_REQUEST_NULL {
            inactive += 1;
            continue;
        }
        // SAFETY: the caller's contract (`i` < `n`).
        match unsafe { complete::complete_one::<false>(s, requests.add(i), status, Mode::Look) } {
            Some(Ok(false)) => continue,
            Some(r) => {
                // SAFETY: the caller's int.
                unsafe { put(index, i as c_int, "index")? };
                return Ok(Any::Found(r.map(drop)));
            }
            None => {}
        }
        match poll_in(s, h, Mode::Look)? {
            Poll::Inactive => inactive += 1,
            Poll::Pending => {}
            Poll::Complete {
                outcome,
                comm,
                freed,
            } => {
                // SAFETY: the caller's contract.
                unsafe {
                    if freed {
                        requests.add(i).write(MPI_REQUEST_NULL);
                    }
                    put(index, i as c_int, "index")?;
                    put_status(status, &outcome.status);
                }
                return Ok(Any::Found(
                    outcome.error.map_or(Ok(()), |e| Err(e.on(comm))),
                ));
            }
        }
    }
    if inactive < n {
        return Ok(Any::Pending);
    }
    // SAFETY: the caller's int and status.
    unsafe {
        put(index, MPI_UNDEFINED, "index")?;
        put_status(status, &empty_status());
    }
    Ok(Any::Inactive)
}

/// `MPI_Waitany`.
#[export]
pub unsafe extern "C" fn MPI_Waitany(
    count: c_int,
    requests: *mut Handle,
    index: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    if state::waits_release() {
        return call("MPI_Waitany", MPI_COMM_WORLD, || {
            let mut flag = 0;
            super::wait_by_testing(|| {
                // SAFETY: MPI_Waitany's contract is MPI_Testany's.
                unsafe { testany(count, requests, index, &mut flag, status)? };
                Ok(flag != 0)
            })
        });
    }
    call("MPI_Waitany", MPI_COMM_WORLD, || {
        let n = array(requests, count)?;
        state::with(|s| {
            let mut backoff = rmca::framework::progress::Backoff::default();
            // The first look without a progress pass, as Open MPI's wait_any does.
            let mut progress = false;
            loop {
                // SAFETY: MPI_Waitany's contract: `count` handles, the caller's index and
                // status.
                match unsafe { any_pass(s, n, requests, index, status, progress)? } {
                    Any::Pending => {}
                    Any::Inactive => return Ok(()),
                    Any::Found(r) => return r,
                }
                if progress {
                    backoff.pass(0);
                }
                progress = true;
            }
        })
    })
}

/// `MPI_Testany`.
#[export]
pub unsafe extern "C" fn MPI_Testany(
    count: c_int,
    requests: *mut Handle,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    // SAFETY: MPI_Testany's contract.
    call("MPI_Testany", MPI_COMM_WORLD, || unsafe {
        testany(count, requests, index, flag, status)
    })
}

/// `MPI_Testany`'s body, also `MPI_Waitany`'s test at `MPI_THREAD_MULTIPLE`.
///
/// # Safety
/// `MPI_Testany`'s contract.
#[inline(always)]
unsafe fn testany(
    count: c_int,
    requests: *mut Handle,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> MpiResult<()> {
    let n = array(requests, count)?;
    // SAFETY: MPI_Testany's contract: `count` handles, the caller's index and status.
    let pass = state::with(|s| unsafe { any_pass(s, n, requests, index, status, true) })?;
    // SAFETY: the caller's int and index.
    unsafe {
        match pass {
            Any::Pending => {
                put(flag, 0, "flag")?;
                put(index, MPI_UNDEFINED, "index")
            }
            Any::Inactive => put(flag, 1, "flag"),
            Any::Found(r) => {
                put(flag, 1, "flag")?;
                r
            }
        }
    }
}

/// One pass of Waitsome/Testsome: completes what is done; `None` when all are inactive.
/// A send completed at start ([`Slot::Sent`]: a window of eager sends) is completed in the
/// loop, a running operation by [`complete::look_pending`], anything else by [`some_one`],
/// both out of line: with them in the loop, the loop kept its counters on the stack and a
/// send cost twice as much (callgrind, bench/osu-instructions.sh).
///
/// # Safety
/// `requests` holds `n` handles, `indices` room for `n` ints, `statuses` is null or room
/// for `n` statuses.
unsafe fn some_pass(
    s: &mut State,
    n: usize,
    requests: *mut Handle,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> MpiResult<Option<(usize, Option<MpiError>)>> {
    let (mut done, mut inactive, mut first_error) = (0usize, 0usize, None::<MpiError>);
    // One progress pass for the array, then each request looked at.
    complete::progress(s);
    for i in 0..n {
        // SAFETY: the caller's contract.
        let h = unsafe { handle_at(requests, i) };
        if h == MPI_REQUEST_NULL {
            inactive += 1;
            continue;
        }
        let one = match s.slot_at(h) {
            Some((at, Slot::Sent { dest, tag, len, .. })) => {
                s.free_fast_at(at);
                // SAFETY: the caller's contract (`i`, `done` < `n`).
                unsafe {
                    requests.add(i).write(MPI_REQUEST_NULL);
                    indices.add(done).write(i as c_int);
                    if !statuses.is_null() {
                        statuses
                            .add(done)
                            .write(complete::sent_status(dest, tag, len));
                    }
                }
                done += 1;
                continue;
            }
            Some((at, Slot::Pending { comm, id })) => {
                let st = if statuses.is_null() {
                    statuses
                } else {
                    // SAFETY: the caller's contract (`done` < `n`).
                    unsafe { statuses.add(done) }
                };
                // SAFETY: the caller's contract (`i` < `n`; `st` null or room for one).
                match unsafe { complete::look_pending(s, requests.add(i), st, at, comm, id) } {
                    Some(Ok(false)) => One::Pending,
                    Some(Ok(true)) => One::Done(None),
                    Some(Err(e)) => One::Done(Some(e)),
                    // SAFETY: the caller's contract (`i`, `done` < `n`).
                    None => unsafe { some_one(s, h, requests.add(i), statuses, done)? },
                }
            }
            // SAFETY: the caller's contract (`i`, `done` < `n`).
            _ => unsafe { some_one(s, h, requests.add(i), statuses, done)? },
        };
        match one {
            One::Inactive => inactive += 1,
            One::Pending => {}
            One::Done(e) => {
                // SAFETY: the caller's contract.
                unsafe { indices.add(done).write(i as c_int) };
                done += 1;
                if let Some(e) = e {
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    if inactive == n {
        return Ok(None);
    }
    Ok(Some((done, first_error)))
}

/// What [`some_one`] found.
enum One {
    Inactive,
    Pending,
    /// Completed (its status written); its error, if it failed.
    Done(Option<MpiError>),
}

/// [`some_pass`] on request `h` at `at`, not a send completed at start: completed if it is
/// done, its status written to `statuses[done]` (unless `statuses` is null).
///
/// # Safety
/// `at` is the program's handle of `h`, writable; `statuses` is null or has room past
/// `done`.
#[inline(never)]
unsafe fn some_one(
    s: &mut State,
    h: Handle,
    at: *mut Handle,
    statuses: *mut MpiStatus,
    done: usize,
) -> MpiResult<One> {
    let st = if statuses.is_null() {
        statuses
    } else {
        // SAFETY: the caller's contract.
        unsafe { statuses.add(done) }
    };
    // A request of the fast paths: its status written where the next one goes.
    // SAFETY: the caller's contract (`st` null or room for a status).
    match unsafe { complete::complete_one::<true>(s, at, st, Mode::Look) } {
        Some(Ok(false)) => return Ok(One::Pending),
        Some(Ok(true)) => return Ok(One::Done(None)),
        Some(Err(e)) => return Ok(One::Done(Some(e))),
        None => {}
    }
    Ok(match poll_in(s, h, Mode::Look)? {
        Poll::Inactive => One::Inactive,
        Poll::Pending => One::Pending,
        Poll::Complete {
            outcome,
            comm,
            freed,
        } => {
            // SAFETY: the caller's contract.
            unsafe {
                if freed {
                    at.write(MPI_REQUEST_NULL);
                }
                if !st.is_null() {
                    st.write(outcome.status);
                }
            }
            One::Done(outcome.error.map(|e| e.on(comm)))
        }
    })
}

/// The result of Waitsome/Testsome.
fn some_result(found: Option<(usize, Option<MpiError>)>, outcount: *mut c_int) -> MpiResult<()> {
    let (n, err) = found.map_or((MPI_UNDEFINED, None), |(d, e)| (d as c_int, e));
    // SAFETY: the caller's int.
    unsafe { put(outcount, n, "outcount")? };
    match err {
        None => Ok(()),
        Some(e) => Err(in_status(&e)),
    }
}

fn some_args(
    count: c_int,
    requests: *const Handle,
    indices: *const c_int,
    outcount: *const c_int,
) -> MpiResult<usize> {
    let n = array(requests, count)?;
    if (n > 0 && indices.is_null()) || outcount.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            "the indices or outcount argument is NULL",
        ));
    }
    Ok(n)
}

/// `MPI_Waitsome`.
#[export]
pub unsafe extern "C" fn MPI_Waitsome(
    incount: c_int,
    requests: *mut Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    if state::waits_release() && !outcount.is_null() {
        // SAFETY: MPI_Waitsome's contract is MPI_Testsome's; `outcount` is the caller's int
        // (not NULL: checked), read after each test wrote it.
        return call("MPI_Waitsome", MPI_COMM_WORLD, || {
            super::wait_by_testing(|| unsafe {
                testsome(incount, requests, outcount, indices, statuses)?;
                Ok(outcount.read() != 0)
            })
        });
    }
    call("MPI_Waitsome", MPI_COMM_WORLD, || {
        let n = some_args(incount, requests, indices, outcount)?;
        let found = state::with(|s| {
            let mut backoff = rmca::framework::progress::Backoff::default();
            loop {
                // SAFETY: MPI_Waitsome's contract: `incount` handles, indices and statuses.
                match unsafe { some_pass(s, n, requests, indices, statuses)? } {
                    Some((0, None)) => backoff.pass(0),
                    other => return Ok(other),
                }
            }
        })?;
        some_result(found, outcount)
    })
}

/// `MPI_Testsome`.
#[export]
pub unsafe extern "C" fn MPI_Testsome(
    incount: c_int,
    requests: *mut Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    // SAFETY: MPI_Testsome's contract.
    call("MPI_Testsome", MPI_COMM_WORLD, || unsafe {
        testsome(incount, requests, outcount, indices, statuses)
    })
}

/// `MPI_Testsome`'s body, also `MPI_Waitsome`'s test at `MPI_THREAD_MULTIPLE`.
///
/// # Safety
/// `MPI_Testsome`'s contract.
#[inline(always)]
unsafe fn testsome(
    incount: c_int,
    requests: *mut Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> MpiResult<()> {
    let n = some_args(incount, requests, indices, outcount)?;
    // SAFETY: MPI_Testsome's contract: `incount` handles, indices and statuses.
    let found = state::with(|s| unsafe { some_pass(s, n, requests, indices, statuses) })?;
    some_result(found, outcount)
}

/// `MPI_Request_free`: an active operation runs on and is completed by the library.
#[export]
pub unsafe extern "C" fn MPI_Request_free(request: *mut Handle) -> c_int {
    call("MPI_Request_free", MPI_COMM_WORLD, || {
        if request.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the request argument is NULL"));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { request.read() };
        state::with(|s| {
            s.request(h)?;
            let unpacking = s
                .staged
                .get(&h)
                .filter(|st| st.unpacks())
                .map(|st| matches!(st, super::Staged::Dup(_)));
            if let Some(is_dup) = unpacking {
                if matches!(s.request(h)?.state, ReqState::Active(_)) {
                    let what = if is_dup {
                        "a pending MPI_Comm_idup: its communicator is handed out when the request completes"
                    } else {
                        "an active receive (or non-blocking collective) into a non-contiguous derived datatype: rmca unpacks such a receive when it is completed"
                    };
                    return Err(MpiError::new(
                        MPI_ERR_REQUEST,
                        format!("MPI_Request_free on {what}, so complete it (MPI_Wait/MPI_Test) instead"),
                    ));
                }
            }
            if let Some(entry) = s.remove_request(h) {
                if let ReqState::Active(r) = entry.state {
                    s.detached.push(r);
                }
                if entry
                    .persistent
                    .as_deref()
                    .is_some_and(super::partitioned::is_partitioned)
                {
                    super::partitioned::forget(h);
                }
            }
            if let Some(staged) = s.staged.remove(&h) {
                s.staged_detached.push(staged);
            }
            Ok(())
        })?;
        // SAFETY: as above.
        unsafe { request.write(MPI_REQUEST_NULL) };
        Ok(())
    })
}

/// `MPI_Request_get_status`: like `MPI_Test`, but the request is left as it is.
#[export]
pub unsafe extern "C" fn MPI_Request_get_status(
    request: Handle,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Request_get_status", MPI_COMM_WORLD, || {
        let found = if request == MPI_REQUEST_NULL {
            Some(empty_status())
        } else {
            state::with(|s| {
                settle(s, request, false)?;
                Ok(match &s.request(request)?.state {
                    ReqState::Active(_) => None,
                    ReqState::Inactive => Some(empty_status()),
                    ReqState::Done(o) => {
                        let st = o.status;
                        if let Some(staged) = s.staged.remove(&request) {
                            // SAFETY: the operation completed; the program may read its
                            // buffer once this call says so.
                            unsafe { staged.finish(s, st.bytes()) };
                        }
                        Some(st)
                    }
                })
            })?
        };
        // SAFETY: the caller's int and status (or MPI_STATUS_IGNORE).
        unsafe {
            put(flag, c_int::from(found.is_some()), "flag")?;
            if let Some(st) = found {
                put_status(status, &st);
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_nulls_stops_at_the_first_live_handle() {
        let live = MPI_REQUEST_NULL + 1;
        for n in 0..11 {
            for first in 0..=n {
                let mut v = vec![MPI_REQUEST_NULL; n];
                if first < n {
                    v[first] = live;
                }
                // SAFETY: `v` holds `n` handles.
                assert_eq!(unsafe { leading_nulls(v.as_ptr(), n) }, first, "n {n}");
            }
        }
    }
}
