//! Non-blocking collectives over memory the collective owns, for a caller that has no
//! [`crate::scope`] to lend buffers from: the progress owner of [`crate::threaded`], which
//! gets a member's contribution as a `Vec` from another thread and must hand the result
//! back the same way. The same schedules as [`Communicator::iallreduce`] and the others
//! (the communicator's coll components and `coll_<op>_algorithm` parameters), with the
//! input moved in and the result copied out once the schedule completed.

use std::cell::RefCell;
use std::rc::Rc;

use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::RequestId;

use super::{ByteReduction, Finish, Plan, NB_TAGS, NB_TAG_BASE};
use crate::coll::allgather_schedule;
use crate::{Communicator, Error, Result, Status};

/// A collective whose buffers the collective owns (see the module docs).
pub(crate) enum OwnedColl {
    /// Every member has called it.
    Barrier,
    /// `root`'s bytes to every member (each passes as many bytes: the root's data, the
    /// others anything of that length).
    Bcast {
        /// The rank whose bytes go out.
        root: usize,
    },
    /// The reduction of every member's bytes, at `root`.
    Reduce {
        /// The rank that gets the result.
        root: usize,
        /// The operation, on the members' element type.
        op: ByteReduction,
    },
    /// The reduction of every member's bytes, on every member.
    Allreduce {
        /// The operation, on the members' element type.
        op: ByteReduction,
    },
    /// Every member's bytes (one length everywhere), in rank order, on every member.
    Allgather,
}

/// The tag of the `seq`-th collective of a communicator whose non-blocking sequence the
/// caller counts itself ([`Communicator::launch_owned`]).
pub(crate) fn owned_tag(seq: u32) -> i32 {
    NB_TAG_BASE + (seq % NB_TAGS) as i32
}

impl Communicator {
    /// Start `kind` over `mine` (moved in) as the `seq`-th collective of this communicator's
    /// non-blocking sequence, counted by the caller: a caller that refuses a collective
    /// still counts it, so a refusal at one member never shifts the tags of the next
    /// collectives (the communicator's own count is not used: the caller must start no
    /// other non-blocking collective on it). Once its id completes
    /// ([`Communicator::owned_outcome`]), `result` holds this member's result bytes (the
    /// non-roots of a reduce hold their partial sums: not a result).
    pub(crate) fn launch_owned(
        &self,
        kind: OwnedColl,
        mine: Vec<u8>,
        seq: u32,
        result: Rc<RefCell<Vec<u8>>>,
    ) -> Result<RequestId> {
        let len = mine.len();
        let mut plan = match kind {
            OwnedColl::Barrier => self.ibarrier_plan()?,
            OwnedColl::Bcast { root } => {
                self.check_root(root)?;
                let s = self.bcast_schedule(root, len)?;
                Plan::new(s, UserBuf::empty()).owning_work(mine)
            }
            OwnedColl::Reduce { root, op } => {
                self.check_root(root)?;
                check_elements("reduce", len, &op)?;
                // Every member accumulates (its subtree, or the result) in memory of its own.
                let s = self.reduce_schedule(root, len, op.elem, !op.commutative)?;
                let mut p = Plan::new(s, UserBuf::empty())
                    .owning_work(vec![0u8; len])
                    .owning_send(mine);
                if self.rank() != root {
                    p.result_bytes = 0;
                }
                p.reduce = Some(op.apply);
                p
            }
            OwnedColl::Allreduce { op } => {
                check_elements("allreduce", len, &op)?;
                let s = self.allreduce_schedule(len, op.elem, !op.commutative)?;
                let mut p = Plan::new(s, UserBuf::empty())
                    .owning_work(vec![0u8; len])
                    .owning_send(mine);
                p.reduce = Some(op.apply);
                p
            }
            OwnedColl::Allgather => {
                let (n, me) = (self.size(), self.rank());
                let mut work = vec![0u8; n * len];
                work[me * len..(me + 1) * len].copy_from_slice(&mine);
                let s = allgather_schedule(self, len)?;
                Plan::new(s, UserBuf::empty()).owning_work(work)
            }
        };
        plan.finish = Finish::Keep(result);
        Ok(self.launch_tagged(plan, owned_tag(seq)))
    }

    /// The outcome of collective `id` (of [`Communicator::launch_owned`]) if it completed,
    /// then forgotten; `None` while it runs. Does not progress ([`crate::raw::progress`]
    /// steps the collectives).
    pub(crate) fn owned_outcome(&self, id: RequestId) -> Option<Result<Status>> {
        self.shared().collective_outcome(id)
    }
}

/// Refuse a vector that is not a whole number of the operation's elements (the schedules
/// cut vectors at element boundaries).
fn check_elements(what: &str, len: usize, op: &ByteReduction) -> Result<()> {
    if op.elem == 0 || len.is_multiple_of(op.elem) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what}: {len} B is not a whole number of {}-byte elements",
            op.elem
        )))
    }
}
