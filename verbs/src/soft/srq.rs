//! Receive queues: shared receive queues, and posting to a QP's own receive queue.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::rc::RecvWqe;
use super::{lock, Ctx, Qp};
use crate::error::{Error, Result};
use crate::types::*;

/// Shared receive queue.
pub(crate) struct Srq {
    pub id: u32,
    ctx: Arc<Ctx>,
    pub(super) pd: u32,
    max_wr: u32,
    max_sge: u32,
    st: Mutex<SrqState>,
}

struct SrqState {
    q: VecDeque<RecvWqe>,
    limit: u32,
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftSrq").field("id", &self.id).finish()
    }
}

impl Srq {
    pub fn new(
        ctx: &Arc<Ctx>,
        pd: u32,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<Arc<Self>> {
        if max_wr == 0 || max_wr > ctx.cfg.max_qp_wr || limit > max_wr {
            return Err(Error::InvalidParam {
                what: "SRQ max_wr/limit",
                value: format!("{max_wr}/{limit}"),
                valid: "1 <= max_wr <= max_srq_wr, limit <= max_wr",
            });
        }
        Ok(Arc::new(Self {
            id: ctx.new_id(),
            ctx: ctx.clone(),
            pd,
            max_wr,
            max_sge,
            st: Mutex::new(SrqState {
                q: VecDeque::new(),
                limit,
            }),
        }))
    }

    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<()> {
        if wr.sges.len() > self.max_sge as usize {
            return Err(Error::InvalidWr("too many SGEs for this SRQ"));
        }
        let mut g = lock(&self.st);
        if g.q.len() >= self.max_wr as usize {
            return Err(Error::QueueFull { depth: self.max_wr });
        }
        g.q.push_back(RecvWqe {
            wr_id: wr.wr_id,
            sges: wr.sges.to_vec(),
        });
        Ok(())
    }

    /// Arms the limit event: fires once when fewer than `limit` WQEs remain.
    pub fn arm(&self, limit: u32) -> Result<()> {
        if limit > self.max_wr {
            return Err(Error::InvalidParam {
                what: "SRQ limit",
                value: limit.to_string(),
                valid: "0 ..= max_wr",
            });
        }
        lock(&self.st).limit = limit;
        Ok(())
    }

    pub(super) fn take(&self) -> Option<RecvWqe> {
        let mut g = lock(&self.st);
        let w = g.q.pop_front()?;
        if g.limit > 0 && (g.q.len() as u32) < g.limit {
            g.limit = 0;
            drop(g);
            self.ctx.event(AsyncEvent::SrqLimitReached { srq: self.id });
        }
        Some(w)
    }
}

impl Qp {
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<()> {
        if self.srq.is_some() {
            return Err(Error::InvalidWr("QP uses an SRQ: post to the SRQ"));
        }
        if wr.sges.len() > self.caps.max_recv_sge as usize {
            return Err(Error::InvalidWr(
                "too many SGEs for this QP's receive queue",
            ));
        }
        let mut g = lock(&self.inner);
        match g.state {
            QpState::Reset => {
                return Err(Error::InvalidWr("QP is in Reset: move it to Init first"))
            }
            QpState::Error => {
                self.flush_wc(wr.wr_id, WcOpcode::Recv);
                return Ok(());
            }
            _ => {}
        }
        if g.rq.len() >= self.caps.max_recv_wr as usize {
            return Err(Error::QueueFull {
                depth: self.caps.max_recv_wr,
            });
        }
        if self.qp_type == QpType::Ud && g.rq.is_empty() {
            // Datagrams that arrived before this WQE was posted found no WQE, as on a HCA. With
            // WQEs already posted, anything queued is theirs (earlier WQEs are consumed first):
            // no system call needed.
            self.ud_receive_all(&mut g);
        }
        g.rq.push_back(RecvWqe {
            wr_id: wr.wr_id,
            sges: wr.sges.to_vec(),
        });
        Ok(())
    }
}
