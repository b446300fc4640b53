//! Blocking collectives run by a module itself rather than as a schedule (coll-sm's, through
//! shared memory): [`Communicator::coll_direct`] offers an operation to the direct forms at
//! the top of the communicator's stack, and [`Env`] gives them what they need of the
//! communicator (progress passes while they wait, and set-up collectives by messages).

use rmca_framework::coll::{DirectColl, DirectEnv, DirectError};
use rmca_framework::pml::{PmlError, StatusError};

use super::{reduce_step, Op, TAG_SM_SETUP};
use crate::{Communicator, Error, Result, Status};

/// A communicator as a direct collective's environment.
struct Env<'a> {
    comm: &'a Communicator,
    /// The first error of a set-up collective, reported as it is rather than as text.
    err: Option<Error>,
}

impl Env<'_> {
    fn keep(&mut self, e: Error) -> DirectError {
        let d = DirectError::Setup(e.to_string());
        self.err.get_or_insert(e);
        d
    }
}

impl DirectEnv for Env<'_> {
    fn progress(&mut self) -> usize {
        crate::raw::progress(self.comm)
    }

    fn all(&mut self, ok: bool) -> std::result::Result<bool, DirectError> {
        // A minimum over one byte, by the schedules of the modules below (never direct).
        let c = self.comm;
        let send = [u8::from(ok)];
        let mut out = [0u8];
        let r = c.allreduce_schedule(1, 1, false).and_then(|s| {
            let op = Op::Min;
            let step = reduce_step::<u8>(&op);
            c.run_schedule(&s, TAG_SM_SETUP, &send, &mut out, Some(&step))
        });
        match r {
            Ok(()) => Ok(out[0] == 1),
            Err(e) => Err(self.keep(e)),
        }
    }

    fn bcast(&mut self, root: usize, buf: &mut [u8]) -> std::result::Result<(), DirectError> {
        let c = self.comm;
        let r = c
            .bcast_schedule(root, buf.len())
            .and_then(|s| c.run_schedule(&s, TAG_SM_SETUP, &[], buf, None));
        r.map_err(|e| self.keep(e))
    }
}

impl Communicator {
    /// A direct collective's error as the API's: a dead member as a peer failure (MPI's
    /// process-failed class through the C library), with its world rank.
    fn direct_error(&self, e: DirectError) -> Error {
        match e {
            DirectError::PeerFailed { rank, reason } => {
                let Ok(peer) = self.world_rank(rank) else {
                    return Error::BadRank {
                        rank,
                        size: self.size(),
                    };
                };
                let error = StatusError::PeerFailed {
                    peer,
                    reason: format!("communicator rank {rank} failed in a collective: {reason}"),
                };
                // A collective has no tag of the caller's: 0.
                let status = Status::sent(rank, 0, 0);
                Error::Status { error, status }
            }
            // The environment keeps a set-up error itself (above); this is the text alone.
            DirectError::Setup(m) => Error::Pml(PmlError::Other(m)),
            DirectError::Truncated {
                rank,
                sent,
                received,
            } => Error::Status {
                error: StatusError::Truncated {
                    message_len: sent,
                    received,
                },
                status: Status::sent(rank, 0, received),
            },
        }
    }

    /// Offer a blocking collective to the direct forms at the top of the stack (see
    /// [`rmca_framework::coll::CollStack::direct`]): `Some` with its outcome if one ran it,
    /// `None` if every one declined (the caller runs the stack's schedules).
    pub(crate) fn coll_direct(
        &self,
        mut run: impl FnMut(
            &dyn DirectColl,
            &mut dyn DirectEnv,
        ) -> Option<std::result::Result<(), DirectError>>,
    ) -> Option<Result<()>> {
        if self.is_inter() {
            return None;
        }
        let stack = match self.coll_stack() {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        let mut env = Env {
            comm: self,
            err: None,
        };
        for d in stack.direct() {
            if let Some(r) = run(d, &mut env) {
                return Some(r.map_err(|e| match env.err.take() {
                    // A set-up collective's own error, as it is.
                    Some(kept) => kept,
                    None => self.direct_error(e),
                }));
            }
        }
        None
    }
}
