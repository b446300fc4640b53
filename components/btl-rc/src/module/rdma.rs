//! RDMA put/get and the registrations of user buffers, cached in the `rcache` component.

use std::time::Instant;

use rmca_framework::btl::{
    BtlError, CompletionToken, Registration, RemoteSegment, SendError, SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::rank::Rank;
use rmca_framework::rcache::{CachedRegistration, Rcache};
use rmca_framework::wire::read_u32_at;
use rmca_verbs::{Mr, SendOp, SendWr};

use crate::sched::Plan;

use super::{RcBtl, WR_CM_SEND, WR_CTRL, WR_RDMA};

#[derive(Debug)]
pub(super) struct RdmaOp {
    pub(super) token: CompletionToken,
    pub(super) reg: Option<u64>,
    pub(super) peer: usize,
    pub(super) qp: usize,
}

#[derive(Debug)]
pub(super) struct UserReg {
    pub(super) mr: Mr,
    pub(super) refs: u32,
    pub(super) addr: usize,
    pub(super) len: usize,
    pub(super) cached: bool,
}

/// The registration cache component's cache (a trait object, so Debug by hand).
pub(super) struct RcacheHandle(pub(super) Box<dyn Rcache>);

impl std::fmt::Debug for RcacheHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rcache")
            .field("entries", &self.0.len())
            .finish()
    }
}

impl std::ops::Deref for RcacheHandle {
    type Target = dyn Rcache;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::ops::DerefMut for RcacheHandle {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut *self.0
    }
}

impl RcBtl {
    pub(super) fn acquire_reg(&mut self, buf: UserBuf) -> Result<(u64, u32), BtlError> {
        if let Some(r) = self.rcache.lookup(buf.addr(), buf.len()) {
            if let Some(e) = self.regs.get_mut(&r.handle) {
                e.refs += 1;
                return Ok((r.handle, e.mr.lkey()));
            }
        }
        let mr = crate::reg::register_user(&self.pd, buf)
            .map_err(|e| BtlError::Other(format!("btl-rc: register {} bytes: {e}", buf.len())))?;
        let handle = self.next_reg;
        self.next_reg += 1;
        let rkey = mr.rkey();
        let lkey = mr.lkey();
        let evicted = self.rcache.insert(CachedRegistration {
            addr: buf.addr(),
            len: buf.len(),
            registration: Registration {
                handle,
                remote_key: rkey.to_le_bytes().to_vec(),
            },
        });
        for e in evicted {
            if let Some(r) = self.regs.get_mut(&e.registration.handle) {
                r.cached = false;
                if r.refs == 0 {
                    self.regs.remove(&e.registration.handle);
                }
            }
        }
        self.regs.insert(
            handle,
            UserReg {
                mr,
                refs: 1,
                addr: buf.addr(),
                len: buf.len(),
                cached: true,
            },
        );
        Ok((handle, lkey))
    }

    /// Drop a reference; the last one invalidates the cached range and deregisters, so memory
    /// freed and reallocated at the same address is never served by a stale registration.
    pub(super) fn release_reg(&mut self, handle: u64) {
        let Some(e) = self.regs.get_mut(&handle) else {
            return;
        };
        e.refs = e.refs.saturating_sub(1);
        if e.refs == 0 {
            let (addr, len, cached) = (e.addr, e.len, e.cached);
            if cached {
                for other in self.rcache.invalidate(addr, len) {
                    let h = other.registration.handle;
                    if let Some(o) = self.regs.get_mut(&h) {
                        o.cached = false;
                        if o.refs == 0 {
                            self.regs.remove(&h);
                        }
                    }
                }
            }
            self.regs.remove(&handle);
        }
    }

    pub(super) fn rdma(
        &mut self,
        peer: Rank,
        local: UserBuf,
        remote: &RemoteSegment,
        token: CompletionToken,
        read: bool,
    ) -> Result<(), SendError> {
        let pi = self.peer_idx(peer)?;
        if let Some(r) = &self.peers[pi].failed {
            return Err(SendError::PeerFailed {
                peer,
                reason: r.clone(),
            });
        }
        if local.len() != remote.len || remote.remote_key.len() != 4 {
            return Err(SendError::Unsupported(
                "put/get: local and remote lengths differ or the remote key is not btl-rc's",
            ));
        }
        if local.len() > self.attrs.rdma_pipeline_frag_size {
            return Err(SendError::TooLarge {
                len: local.len(),
                max: self.attrs.rdma_pipeline_frag_size,
            });
        }
        if !self.peers[pi].conn.is_connected() {
            self.peers[pi].conn.open(Instant::now());
            self.run_actions(pi, Instant::now());
            return Err(SendError::WouldBlock);
        }
        let qi = match self.peers[pi].sched.plan(0, SendHint::default()) {
            Plan::One(q) => q,
            Plan::Stripe(_) => 0,
        };
        if self.peers[pi].qps[qi].wqes == 0 {
            self.stats.wqe_stalls += 1;
            return Err(SendError::WouldBlock);
        }
        let (handle, sge) = if local.is_empty() {
            (None, None)
        } else {
            let (h, lkey) = self.acquire_reg(local).map_err(|e| SendError::PeerFailed {
                peer,
                reason: e.to_string(),
            })?;
            (
                Some(h),
                Some(rmca_verbs::Sge {
                    addr: local.addr() as u64,
                    length: local.len() as u32,
                    lkey,
                }),
            )
        };
        let rkey = read_u32_at(&remote.remote_key, 0);
        let op = if read {
            SendOp::RdmaRead {
                remote_addr: remote.addr,
                rkey,
            }
        } else {
            SendOp::RdmaWrite {
                remote_addr: remote.addr,
                rkey,
            }
        };
        let id = self.next_op;
        self.next_op = (self.next_op + 1) & !(WR_RDMA | WR_CTRL | WR_CM_SEND);
        let sges: Vec<rmca_verbs::Sge> = sge.into_iter().collect();
        let wr = SendWr {
            wr_id: WR_RDMA | id,
            op,
            sges: &sges,
            signaled: true,
            inline: false,
            ud: None,
        };
        match self.peers[pi].qps[qi].qp.post_send(&wr) {
            Ok(()) => {
                self.peers[pi].qps[qi].wqes -= 1;
                self.stats.rdma_ops += 1;
                self.ops.insert(
                    id,
                    RdmaOp {
                        token,
                        reg: handle,
                        peer: pi,
                        qp: qi,
                    },
                );
                Ok(())
            }
            Err(e) => {
                if let Some(h) = handle {
                    self.release_reg(h);
                }
                match e {
                    rmca_verbs::Error::QueueFull { .. } => Err(SendError::WouldBlock),
                    e => Err(SendError::PeerFailed {
                        peer,
                        reason: format!("post RDMA: {e}"),
                    }),
                }
            }
        }
    }
}
