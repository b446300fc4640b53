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
use crate::state::{sent_outcome, MpiError, MpiResult, Outcome, Slot, State};

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
        } => (comm, sent_outcome(dest, tag, len)),
        Slot::Pending { comm, id } => {
            let c = &s.comm(comm).ok()?.comm;
            let polled = match mode {
                Mode::Wait => Some(id.wait(c)),
                Mode::Test => id.test(c),
                Mode::Look => id.test_now(c),
            };
            match polled {
                None => return Some(Found::Pending),
                Some(r) => (comm, outcome(r)),
            }
        }
        Slot::Free | Slot::General => return None,
    };
    // Freed: the slot is retired and its handle stale.
    s.free_fast(h);
    Some(Found::Complete(done, comm))
}

/// One progress pass of the runtime, for the passes over an array of [`Mode::Look`] polls.
pub(super) fn progress(s: &State) {
    if let Ok(world) = s.comm(MPI_COMM_WORLD) {
        rmca::raw::progress(&world.comm);
    }
}

/// Whether every handle of the array is `MPI_REQUEST_NULL` or a request of the fast paths.
///
/// # Safety
/// `requests` holds `n` handles.
unsafe fn all_fast(s: &State, n: usize, requests: *const Handle) -> bool {
    (0..n).all(|i| {
        // SAFETY: the caller's contract.
        let h = unsafe { requests.add(i).read() };
        h == MPI_REQUEST_NULL || matches!(s.slot(h), Some(Slot::Pending { .. } | Slot::Sent { .. }))
    })
}

/// `MPI_Waitall` with an array of statuses when every request is `MPI_REQUEST_NULL` or one
/// of the fast paths' (`None` otherwise, for the general path): one pass writes the statuses
/// of the sends completed at start and gathers the running operations into one batch for the
/// PML, which reports each one's status as it releases it; a second frees the handles.
/// Nothing is allocated per call (the batch buffers are the state's), and no request is
/// converted to a general entry.
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
) -> Option<MpiResult<()>> {
    let mut batch = std::mem::take(&mut s.wait_batch);
    for i in 0..n {
        // SAFETY: the caller's contract.
        let h = unsafe { requests.add(i).read() };
        let status = match s.slot(h) {
            Some(Slot::Pending { comm, id }) => {
                batch.requests.push(id);
                batch.slots.push((i, comm));
                // Written when the batch completes.
                continue;
            }
            Some(Slot::Sent {
                comm: _,
                dest,
                tag,
                len,
            }) => sent_status(dest, tag, len),
            _ if h == MPI_REQUEST_NULL => empty_status(),
            _ => {
                // A general request or an invalid handle: all of them go the general way
                // (the statuses written so far are written again there).
                batch.requests.clear();
                batch.slots.clear();
                s.wait_batch = batch;
                return None;
            }
        };
        // SAFETY: the caller's contract.
        unsafe { statuses.add(i).write(status) };
    }
    for i in 0..n {
        // SAFETY: the caller's contract.
        unsafe {
            let at = requests.add(i);
            if at.read() != MPI_REQUEST_NULL {
                s.free_fast(at.read());
                at.write(MPI_REQUEST_NULL);
            }
        }
    }
    // The error of the lowest position, as the general path reports.
    let mut first_error: Option<(usize, MpiError)> = None;
    let mut result = Ok(());
    if !batch.requests.is_empty() {
        match s.comm(MPI_COMM_WORLD) {
            Ok(world) => {
                let world = &world.comm;
                let slots = &batch.slots;
                // A status is translated on its own communicator (a freed communicator's
                // requests are general ones: see `State::free_comm`).
                let comm_of = |k: usize| s.comm(slots[k].1).map_or(world, |c| &c.comm);
                batch.requests.complete_each(world, comm_of, |k, r| {
                    let i = slots[k].0;
                    let st = match r {
                        Ok(st) => to_mpi_status(&st),
                        Err(e) => {
                            let o = outcome(Err(e));
                            if let Some(e) = o.error {
                                if first_error.as_ref().is_none_or(|(at, _)| i < *at) {
                                    first_error = Some((i, e.on(slots[k].1)));
                                }
                            }
                            o.status
                        }
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
    Some(result.and(match first_error {
        None => Ok(()),
        Some((_, e)) => Err(super::req::in_status(&e)),
    }))
}

/// The status of a send completed at start.
#[inline]
fn sent_status(dest: u32, tag: c_int, len: usize) -> MpiStatus {
    let mut st = MpiStatus {
        source: dest as c_int,
        tag,
        error: MPI_SUCCESS,
        internal: [0; 5],
    };
    st.set_bytes(len as u64);
    st
}

/// The test of `MPI_Testall` when every request is `MPI_REQUEST_NULL` or one of the fast
/// paths' (`None` otherwise, for the general path): each running operation is tested after
/// one progress pass for the array; one that completed keeps its outcome in its slot
/// ([`Slot::Sent`] for a success) until all have. Whether all had: the caller then completes
/// them (each in one step: see [`poll`]).
///
/// # Safety
/// `requests` holds `n` handles.
pub(super) unsafe fn testall(s: &mut State, n: usize, requests: *const Handle) -> Option<bool> {
    // SAFETY: the caller's contract.
    if !unsafe { all_fast(s, n, requests) } {
        return None;
    }
    progress(s);
    let mut all = true;
    for i in 0..n {
        // SAFETY: the caller's contract.
        let h = unsafe { requests.add(i).read() };
        let Some(Slot::Pending { comm, id }) = s.slot(h) else {
            continue;
        };
        // (A freed communicator's requests are general ones: see `State::free_comm`.)
        let Ok(c) = s.comm(comm) else {
            return None;
        };
        match id.test_now(&c.comm) {
            None => all = false,
            // A success keeps its status in the slot; anything else (an error, a cancelled
            // operation) goes to a general entry, as the general path keeps it.
            Some(Ok(st)) if !st.cancelled => s.set_slot(
                h,
                Slot::Sent {
                    comm,
                    dest: st.source as u32,
                    tag: st.tag,
                    len: st.bytes,
                },
            ),
            Some(r) => s.keep_done(h, comm, outcome(r)),
        }
    }
    Some(all)
}
