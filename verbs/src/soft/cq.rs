//! Completion queues.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::{lock, Ctx, Qp};
use crate::error::{Error, Result};
use crate::types::*;

/// Completion queue.
pub(crate) struct Cq {
    pub id: u32,
    pub ctx: Arc<Ctx>,
    depth: usize,
    q: Mutex<CqQueue>,
    qps: Mutex<Vec<Arc<Qp>>>,
}

struct CqQueue {
    q: VecDeque<Wc>,
    overflowed: bool,
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftCq")
            .field("id", &self.id)
            .field("depth", &self.depth)
            .finish()
    }
}

impl Cq {
    pub fn new(ctx: &Arc<Ctx>, depth: u32) -> Result<Arc<Self>> {
        if depth == 0 || depth > ctx.cfg.max_cqe {
            return Err(Error::InvalidParam {
                what: "CQ depth",
                value: depth.to_string(),
                valid: "1 ..= max_cqe",
            });
        }
        Ok(Arc::new(Self {
            id: ctx.new_id(),
            ctx: ctx.clone(),
            depth: depth as usize,
            q: Mutex::new(CqQueue {
                q: VecDeque::with_capacity(depth as usize),
                overflowed: false,
            }),
            qps: Mutex::new(Vec::new()),
        }))
    }

    /// Pushes a completion; false when the CQ overflowed (the completion is lost).
    pub(super) fn push(&self, wc: Wc) -> bool {
        let mut g = lock(&self.q);
        if g.overflowed {
            return false;
        }
        if g.q.len() >= self.depth {
            g.overflowed = true;
            drop(g);
            self.ctx.event(AsyncEvent::CqError { cq: self.id });
            return false;
        }
        g.q.push_back(wc);
        true
    }

    pub fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        // Iterated under the list lock (no per-poll allocation): nothing takes a QP lock and
        // then this list's lock, so the order cq.qps -> qp.inner cannot deadlock.
        let mut now = None;
        for qp in lock(&self.qps).iter() {
            let mut g = lock(&qp.inner);
            qp.owner_progress(&mut g, &mut now);
        }
        let mut g = lock(&self.q);
        let n = out.len().min(g.q.len());
        for (slot, wc) in out.iter_mut().zip(g.q.drain(..n)) {
            *slot = wc;
        }
        if n == 0 && g.overflowed {
            return Err(Error::CqOverflow { cq: self.id });
        }
        Ok(n)
    }

    pub(super) fn attach(&self, qp: &Arc<Qp>) {
        let mut v = lock(&self.qps);
        if !v.iter().any(|q| Arc::ptr_eq(q, qp)) {
            v.push(qp.clone());
        }
    }

    pub(super) fn detach(&self, qpn: u32) {
        lock(&self.qps).retain(|q| q.qpn != qpn);
    }
}
