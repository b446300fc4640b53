//! MPI-4 persistent collectives (`MPI_Barrier_init`, `MPI_Bcast_init`, ... and their `_c`
//! forms, defined beside their non-blocking forms in [`super::nbc`]): an inactive request
//! whose every `MPI_Start` runs the collective anew on the arguments given at init (the
//! buffers' contents as they are at that start), completed by the completion calls and
//! freed by `MPI_Request_free`, as a persistent point-to-point request.
//!
//! The arguments that MPI binds at init are checked then (counts, roots, count and
//! displacement arrays, copied); the buffers and datatypes are taken at each start. As MPI
//! says, the inits are collective calls, made in the same order on every member; the starts
//! are not: each request takes its place in the communicator's collective order at init
//! ([`rmca::coll::nonblocking::CollSlot`]), so members may start them in different orders
//! (MPICH's `coll/p_order`), and each run completes before the request can start again.

use rmca::coll::nonblocking::in_slot;

use super::nbc::Starter;
use super::{communicator, put};
use crate::abi::*;
use crate::state::{self, CollStart, MpiError, MpiResult, Persistent, ReqEntry, ReqState};

/// Make the persistent request of a collective on `comm`: `prep` checks the arguments and
/// gives the start each `MPI_Start` runs.
pub(crate) fn init<F: Starter>(
    comm: Handle,
    info: Handle,
    request: *mut Handle,
    prep: impl FnOnce(&rmca::Communicator) -> MpiResult<F>,
) -> MpiResult<()> {
    if request.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "the request argument is NULL"));
    }
    let c = communicator(comm)?;
    // rmca reads no hint; the handle must still be an info object (or MPI_INFO_NULL).
    super::info::entries_of(info)?;
    let begin = prep(&c)?;
    // Taken only once the arguments passed their checks: a refused init takes no place.
    let slot = c.reserve_coll_slot();
    let run = move |c: &rmca::Communicator| in_slot(slot, || begin(c));
    let h = state::with(|s| {
        let mut e = ReqEntry::new(comm, ReqState::Inactive);
        e.persistent = Some(Box::new(Persistent::Coll(CollStart(std::rc::Rc::new(run)))));
        s.add_request(e)
    })?;
    // SAFETY: non-null (checked above), the caller's handle.
    unsafe { put(request, h, "request") }
}
