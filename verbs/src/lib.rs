//! Verbs layer of rmca: one ibverbs-shaped API over a real provider (rdma-sys) and a software
//! provider over sockets.
//!
//! The provider is chosen at run time ([`ProviderConfig::kind`]); every object below dispatches
//! on it, so BTL code is written once. The shape follows libibverbs: a [`Context`] opens a
//! device, a protection domain ([`Pd`]) owns memory regions ([`Mr`]), queue pairs ([`Qp`]),
//! shared receive queues ([`Srq`]) and address handles ([`Ah`]); completions are polled in
//! batches from completion queues ([`Cq`]). Peers exchange [`Qp::address`] blobs through the
//! modex; an RC QP connects with the peer's blob, a UD sender builds an [`Ah`] from it.
//!
//! Differences a BTL must respect to run on both providers (they are also real-HCA rules):
//! - UD receive buffers reserve [`UD_GRH_LEN`] bytes in front of the payload; the completion's
//!   `byte_len` counts them.
//! - A work request beyond a queue's depth is refused with [`Error::QueueFull`].
//! - Send queue slots of an RC QP are released when the peer acknowledges the WR.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod error;
pub mod fault;
mod mem;
#[cfg(feature = "rdma")]
#[allow(unsafe_code)]
mod rdma;
pub mod soft;
pub mod types;

use std::sync::Arc;

pub use error::{Error, Result};
pub use fault::{FaultConfig, FaultStats};
pub use soft::link::SoftLink;
pub use soft::{SoftConfig, SoftStatsSnapshot, UD_GRH_LEN};
pub use types::*;

/// Configuration of the rdma provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaConfig {
    /// Device name; `None` picks the first device.
    pub device: Option<String>,
    /// Port number (1-based).
    pub port: u8,
    /// GID index used in address handles and RC paths (rxe needs 0).
    pub gid_index: u8,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        Self {
            device: None,
            port: 1,
            gid_index: 0,
        }
    }
}

/// Everything needed to open a context.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// Which provider.
    pub kind: ProviderKind,
    /// Soft provider settings.
    pub soft: SoftConfig,
    /// rdma provider settings.
    pub rdma: RdmaConfig,
    /// Job secret: the soft provider drops datagrams and refuses connections from other jobs.
    pub job_secret: Vec<u8>,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        Self {
            kind: ProviderKind::Soft,
            soft: SoftConfig::default(),
            rdma: RdmaConfig::default(),
            job_secret: Vec::new(),
        }
    }
}

/// Devices a provider offers. The rdma provider returns an empty list when no device exists
/// (or the feature is not compiled in), so a BTL can decline cleanly.
pub fn devices(kind: ProviderKind) -> Result<Vec<DeviceInfo>> {
    match kind {
        ProviderKind::Soft => Ok(vec![DeviceInfo {
            name: "soft0".into(),
            provider: ProviderKind::Soft,
        }]),
        #[cfg(feature = "rdma")]
        ProviderKind::Rdma => rdma::devices(),
        #[cfg(not(feature = "rdma"))]
        ProviderKind::Rdma => Ok(Vec::new()),
    }
}

#[derive(Debug, Clone)]
enum CtxImpl {
    Soft(Arc<soft::Ctx>),
    #[cfg(feature = "rdma")]
    Rdma(Arc<rdma::Ctx>),
}

/// An open device.
#[derive(Debug, Clone)]
pub struct Context {
    imp: CtxImpl,
}

impl Context {
    /// Opens the configured provider's device.
    pub fn open(cfg: &ProviderConfig) -> Result<Self> {
        let imp = match cfg.kind {
            ProviderKind::Soft => {
                CtxImpl::Soft(soft::Ctx::open(cfg.soft.clone(), &cfg.job_secret)?)
            }
            #[cfg(feature = "rdma")]
            ProviderKind::Rdma => CtxImpl::Rdma(rdma::Ctx::open(&cfg.rdma)?),
            #[cfg(not(feature = "rdma"))]
            ProviderKind::Rdma => {
                return Err(Error::ProviderUnavailable(
                    "rdma",
                    "rmca-verbs was built without the `rdma` feature".into(),
                ))
            }
        };
        Ok(Self { imp })
    }

    /// The provider behind this context.
    pub fn provider(&self) -> ProviderKind {
        match &self.imp {
            CtxImpl::Soft(_) => ProviderKind::Soft,
            #[cfg(feature = "rdma")]
            CtxImpl::Rdma(_) => ProviderKind::Rdma,
        }
    }

    /// Device limits.
    pub fn attr(&self) -> DeviceAttr {
        match &self.imp {
            CtxImpl::Soft(c) => c.attr(),
            #[cfg(feature = "rdma")]
            CtxImpl::Rdma(c) => c.attr(),
        }
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        let imp = match &self.imp {
            CtxImpl::Soft(c) => PdImpl::Soft(c.clone(), c.new_id()),
            #[cfg(feature = "rdma")]
            CtxImpl::Rdma(c) => PdImpl::Rdma(c.alloc_pd()?),
        };
        Ok(Pd { imp })
    }

    /// Creates a completion queue of `depth` entries.
    pub fn create_cq(&self, depth: u32) -> Result<Cq> {
        let imp = match &self.imp {
            CtxImpl::Soft(c) => CqImpl::Soft(soft::Cq::new(c, depth)?),
            #[cfg(feature = "rdma")]
            CtxImpl::Rdma(c) => CqImpl::Rdma(c.create_cq(depth)?),
        };
        Ok(Cq { imp })
    }

    /// Next asynchronous event, if any (non-blocking).
    pub fn poll_async_event(&self) -> Option<AsyncEvent> {
        match &self.imp {
            CtxImpl::Soft(c) => c.poll_event(),
            #[cfg(feature = "rdma")]
            CtxImpl::Rdma(c) => c.poll_event(),
        }
    }

    /// The interface under the soft provider's bound address, its MTU and the UD payload it
    /// carries unfragmented (`None` for rdma).
    pub fn soft_link(&self) -> Option<SoftLink> {
        match &self.imp {
            CtxImpl::Soft(c) => Some(c.link().clone()),
            #[cfg(feature = "rdma")]
            CtxImpl::Rdma(_) => None,
        }
    }

    /// Drop counters of the soft provider (`None` for rdma).
    pub fn soft_stats(&self) -> Option<SoftStatsSnapshot> {
        match &self.imp {
            CtxImpl::Soft(c) => Some(c.stats()),
            #[cfg(feature = "rdma")]
            CtxImpl::Rdma(_) => None,
        }
    }
}

#[derive(Debug)]
enum PdImpl {
    Soft(Arc<soft::Ctx>, u32),
    #[cfg(feature = "rdma")]
    Rdma(Arc<rdma::Pd>),
}

/// A protection domain.
#[derive(Debug)]
pub struct Pd {
    imp: PdImpl,
}

/// Parameters of a queue pair.
#[derive(Debug, Clone, Copy)]
pub struct QpInit<'a> {
    /// RC or UD.
    pub qp_type: QpType,
    /// CQ receiving send completions.
    pub send_cq: &'a Cq,
    /// CQ receiving receive completions.
    pub recv_cq: &'a Cq,
    /// Shared receive queue, if receives come from one.
    pub srq: Option<&'a Srq>,
    /// Queue depths.
    pub caps: QpCaps,
    /// Q_Key of a UD QP (datagrams with another Q_Key are dropped).
    pub qkey: u32,
}

/// Parameters of a shared receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqInit {
    /// Depth.
    pub max_wr: u32,
    /// SGEs per receive WR.
    pub max_sge: u32,
    /// Armed limit: [`AsyncEvent::SrqLimitReached`] fires once when fewer WQEs remain (0 = off).
    pub limit: u32,
}

impl Pd {
    /// Allocates `len` zeroed, page-aligned bytes and registers them.
    pub fn register(&self, len: usize, access: AccessFlags) -> Result<Mr> {
        let buf = mem::OwnedBuf::new(len);
        let (addr, len) = (buf.as_ptr(), buf.len());
        let mut mr = self.register_inner(addr, len, access)?;
        mr.buf = Some(buf);
        Ok(mr)
    }

    /// Registers caller memory.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay allocated until the returned [`Mr`] is dropped, and the caller
    /// accepts that the provider (and remote peers, with remote access) write it concurrently.
    #[allow(unsafe_code)]
    pub unsafe fn register_raw(&self, ptr: *mut u8, len: usize, access: AccessFlags) -> Result<Mr> {
        self.register_inner(ptr, len, access)
    }

    fn register_inner(&self, ptr: *mut u8, len: usize, access: AccessFlags) -> Result<Mr> {
        if access.contains(AccessFlags::REMOTE_WRITE) && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(Error::InvalidParam {
                what: "MR access flags",
                value: format!("{access:?}"),
                valid: "REMOTE_WRITE requires LOCAL_WRITE",
            });
        }
        let (imp, lkey, rkey) = match &self.imp {
            PdImpl::Soft(c, pd) => {
                let key = c.mrs.register(ptr as usize, len, access, *pd);
                (MrImpl::Soft(c.clone(), key), key, key)
            }
            #[cfg(feature = "rdma")]
            PdImpl::Rdma(pd) => {
                let m = pd.reg_mr(ptr, len, access)?;
                let (l, r) = (m.lkey(), m.rkey());
                (MrImpl::Rdma(m), l, r)
            }
        };
        Ok(Mr {
            imp,
            buf: None,
            ptr,
            len,
            lkey,
            rkey,
        })
    }

    /// Creates a shared receive queue.
    pub fn create_srq(&self, init: SrqInit) -> Result<Srq> {
        let imp = match &self.imp {
            PdImpl::Soft(c, pd) => SrqImpl::Soft(soft::Srq::new(
                c,
                *pd,
                init.max_wr,
                init.max_sge,
                init.limit,
            )?),
            #[cfg(feature = "rdma")]
            PdImpl::Rdma(pd) => SrqImpl::Rdma(pd.create_srq(init)?),
        };
        Ok(Srq { imp })
    }

    /// Creates a queue pair in the Reset state.
    pub fn create_qp(&self, init: QpInit<'_>) -> Result<Qp> {
        let imp = match &self.imp {
            PdImpl::Soft(c, pd) => {
                let (s, r) = match (&init.send_cq.imp, &init.recv_cq.imp) {
                    (CqImpl::Soft(s), CqImpl::Soft(r)) => (s, r),
                    #[cfg(feature = "rdma")]
                    _ => return Err(Error::ContextMismatch),
                };
                let srq = match init.srq.map(|s| &s.imp) {
                    None => None,
                    Some(SrqImpl::Soft(s)) => Some(s.clone()),
                    #[cfg(feature = "rdma")]
                    Some(_) => return Err(Error::ContextMismatch),
                };
                if !Arc::ptr_eq(&s.ctx, c) || !Arc::ptr_eq(&r.ctx, c) {
                    return Err(Error::ContextMismatch);
                }
                QpImpl::Soft(soft::Qp::new(
                    c,
                    soft::QpInitSoft {
                        qp_type: init.qp_type,
                        pd: *pd,
                        send_cq: s.clone(),
                        recv_cq: r.clone(),
                        srq,
                        caps: init.caps,
                        qkey: init.qkey,
                    },
                )?)
            }
            #[cfg(feature = "rdma")]
            PdImpl::Rdma(pd) => QpImpl::Rdma(pd.create_qp(&init)?),
        };
        Ok(Qp { imp })
    }

    /// Builds an address handle (UD) from a peer QP's [`Qp::address`] blob.
    pub fn create_ah(&self, peer: &[u8]) -> Result<Ah> {
        match &self.imp {
            PdImpl::Soft(..) => {
                let a = soft::wire::SoftAddr::parse(peer)
                    .map_err(|_| Error::BadAddress("not a soft address"))?;
                if a.kind != 1 {
                    return Err(Error::BadAddress("not a UD address"));
                }
                Ok(Ah {
                    imp: AhImpl::Soft(a.sock),
                    remote_qpn: a.qpn,
                })
            }
            #[cfg(feature = "rdma")]
            PdImpl::Rdma(pd) => {
                let (ah, qpn) = pd.create_ah(peer)?;
                Ok(Ah {
                    imp: AhImpl::Rdma(ah),
                    remote_qpn: qpn,
                })
            }
        }
    }
}

#[derive(Debug)]
enum MrImpl {
    Soft(Arc<soft::Ctx>, u32),
    #[cfg(feature = "rdma")]
    Rdma(#[allow(dead_code)] rdma::Mr), // held for its Drop (deregistration)
}

/// A registered memory region. Its memory may be written by the provider and by remote peers
/// (with REMOTE_WRITE) at any time, as with a real HCA: use the copy accessors, or the unsafe
/// slice views when you know no transfer targets the bytes.
#[derive(Debug)]
pub struct Mr {
    // Field order matters: the registration is dropped before the owned memory.
    imp: MrImpl,
    buf: Option<mem::OwnedBuf>,
    ptr: *mut u8,
    len: usize,
    lkey: u32,
    rkey: u32,
}

// SAFETY-free marker reasoning: Mr only holds an address range whose access goes through the
// copy helpers; the registration objects are thread-safe.
#[allow(unsafe_code)]
// SAFETY: the raw pointer is an address of registered memory, not an owned alias; all access
// is through bounds-checked copies (or unsafe views whose callers take responsibility).
unsafe impl Send for Mr {}
#[allow(unsafe_code)]
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Drop for Mr {
    fn drop(&mut self) {
        match &self.imp {
            MrImpl::Soft(c, key) => c.mrs.deregister(*key),
            #[cfg(feature = "rdma")]
            MrImpl::Rdma(_) => {}
        }
    }
}

impl Mr {
    /// Start address (for SGEs and as the remote address of RDMA operations).
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        if offset.checked_add(len).is_none_or(|e| e > self.len) {
            return Err(Error::OutOfBounds {
                offset,
                len,
                region: self.len,
            });
        }
        Ok(())
    }

    /// An SGE covering `offset..offset+len`.
    pub fn sge(&self, offset: usize, len: u32) -> Result<Sge> {
        self.check(offset, len as usize)?;
        Ok(Sge {
            addr: self.addr() + offset as u64,
            length: len,
            lkey: self.lkey,
        })
    }

    /// Copies `data` into the region at `offset`.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        mem::write_bytes(self.ptr, offset, data);
        Ok(())
    }

    /// Copies from the region at `offset` into `out`.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        mem::read_bytes(self.ptr, offset, out);
        Ok(())
    }

    /// Reads at most eight bytes that a remote RDMA WRITE may be landing in now (an eager
    /// slot's footer), with acquire loads: when they show the end of a write, every byte of
    /// that write is visible (the soft provider lands the last eight bytes last, as HCAs do).
    pub fn read_polled(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check_polled(offset, out.len())?;
        mem::read_polled_bytes(self.ptr, offset, out);
        Ok(())
    }

    /// Writes at most eight bytes that a remote write polls for or lands in (a footer cleared
    /// for the next write), atomically, so that the store never races with a landing write.
    pub fn write_polled(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check_polled(offset, data.len())?;
        mem::write_polled_bytes(self.ptr, offset, data);
        Ok(())
    }

    fn check_polled(&self, offset: usize, len: usize) -> Result<()> {
        if len > 8 {
            return Err(Error::PolledTooLong { len });
        }
        self.check(offset, len)
    }

    /// The region as a slice.
    ///
    /// # Safety
    /// No transfer (local receive, remote write, read response) may write the bytes while the
    /// slice lives.
    #[allow(unsafe_code)]
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: forwarded to the caller; the range is alive while self is.
        unsafe { mem::slice(self.ptr, self.len) }
    }

    /// The region as a mutable slice.
    ///
    /// # Safety
    /// As [`Mr::as_slice`], and no transfer may read the bytes while the slice lives.
    #[allow(unsafe_code)]
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: forwarded to the caller; &mut self excludes other safe views.
        unsafe { mem::slice_mut(self.ptr, self.len) }
    }
}

#[derive(Debug, Clone)]
enum CqImpl {
    Soft(Arc<soft::Cq>),
    #[cfg(feature = "rdma")]
    Rdma(Arc<rdma::Cq>),
}

/// A completion queue.
#[derive(Debug, Clone)]
pub struct Cq {
    imp: CqImpl,
}

impl Cq {
    /// Polls up to `out.len()` completions; returns how many were written. The soft provider
    /// progresses the CQ's QPs here (socket I/O, timers); an empty `out` progresses without
    /// consuming completions. After an overflow, once the queued entries are drained, returns
    /// [`Error::CqOverflow`] (the rdma provider reports overflow as [`AsyncEvent::CqError`]).
    pub fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        match &self.imp {
            CqImpl::Soft(c) => c.poll(out),
            #[cfg(feature = "rdma")]
            CqImpl::Rdma(c) => c.poll(out),
        }
    }
}

#[derive(Debug)]
enum SrqImpl {
    Soft(Arc<soft::Srq>),
    #[cfg(feature = "rdma")]
    Rdma(rdma::Srq),
}

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    imp: SrqImpl,
}

impl Srq {
    /// Posts a receive WR; refused with [`Error::QueueFull`] beyond the depth.
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<()> {
        match &self.imp {
            SrqImpl::Soft(s) => s.post_recv(wr),
            #[cfg(feature = "rdma")]
            SrqImpl::Rdma(s) => s.post_recv(wr),
        }
    }

    /// Arms the limit event (fires once when fewer than `limit` WQEs remain).
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        match &self.imp {
            SrqImpl::Soft(s) => s.arm(limit),
            #[cfg(feature = "rdma")]
            SrqImpl::Rdma(s) => s.arm(limit),
        }
    }

    /// SRQ number (as in [`AsyncEvent::SrqLimitReached`]).
    pub fn id(&self) -> u32 {
        match &self.imp {
            SrqImpl::Soft(s) => s.id,
            #[cfg(feature = "rdma")]
            SrqImpl::Rdma(s) => s.id(),
        }
    }
}

#[derive(Debug, Clone)]
enum AhImpl {
    Soft(std::net::SocketAddr),
    #[cfg(feature = "rdma")]
    Rdma(Arc<rdma::Ah>),
}

/// An address handle: the route to a UD peer, built from its address blob.
#[derive(Debug, Clone)]
pub struct Ah {
    imp: AhImpl,
    remote_qpn: u32,
}

impl Ah {
    /// The QP number in the blob the handle was built from.
    pub fn remote_qpn(&self) -> u32 {
        self.remote_qpn
    }
}

#[derive(Debug)]
enum QpImpl {
    Soft(Arc<soft::Qp>),
    #[cfg(feature = "rdma")]
    Rdma(rdma::Qp),
}

/// A queue pair.
#[derive(Debug)]
pub struct Qp {
    imp: QpImpl,
}

impl Drop for Qp {
    fn drop(&mut self) {
        match &self.imp {
            QpImpl::Soft(q) => q.destroy(),
            #[cfg(feature = "rdma")]
            QpImpl::Rdma(_) => {}
        }
    }
}

impl Qp {
    /// QP number.
    pub fn qp_num(&self) -> u32 {
        match &self.imp {
            QpImpl::Soft(q) => q.qpn,
            #[cfg(feature = "rdma")]
            QpImpl::Rdma(q) => q.qp_num(),
        }
    }

    /// Transport type.
    pub fn qp_type(&self) -> QpType {
        match &self.imp {
            QpImpl::Soft(q) => q.qp_type,
            #[cfg(feature = "rdma")]
            QpImpl::Rdma(q) => q.qp_type(),
        }
    }

    /// Actual queue capacities (a provider may round the requested depths up).
    pub fn caps(&self) -> QpCaps {
        match &self.imp {
            QpImpl::Soft(q) => q.caps(),
            #[cfg(feature = "rdma")]
            QpImpl::Rdma(q) => q.caps(),
        }
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        match &self.imp {
            QpImpl::Soft(q) => q.state(),
            #[cfg(feature = "rdma")]
            QpImpl::Rdma(q) => q.state(),
        }
    }

    /// Opaque address blob to publish through the modex.
    pub fn address(&self) -> Vec<u8> {
        match &self.imp {
            QpImpl::Soft(q) => q.address(),
            #[cfg(feature = "rdma")]
            QpImpl::Rdma(q) => q.address(),
        }
    }

    /// Reset -> Init.
    pub fn modify_to_init(&self) -> Result<()> {
        match &self.imp {
            QpImpl::Soft(q) => q.modify_init(),
            #[cfg(feature = "rdma")]
            QpImpl::Rdma(q) => q.modify_init(),
        }
    }

    /// Init -> RTR. RC needs the peer's address blob (the soft provider opens the connection
    /// here); UD takes `None`.
    pub fn modify_to_rtr(&self, remote: Option<&[u8]>, params: &RcParams) -> Result<()> {
        match &self.imp {
            QpImpl::Soft(q) => q.modify_rtr(remote, params),
            #[cfg(feature = "rdma")]
            QpImpl::Rdma(q) => q.modify_rtr(remote, params),
        }
    }

    /// RTR -> RTS.
    pub fn modify_to_rts(&self) -> Result<()> {
        match &self.imp {
            QpImpl::Soft(q) => q.modify_rts(),
            #[cfg(feature = "rdma")]
            QpImpl::Rdma(q) => q.modify_rts(),
        }
    }

    /// Any state -> Error: outstanding and later WRs complete with [`WcStatus::WrFlushError`].
    pub fn modify_to_error(&self) -> Result<()> {
        match &self.imp {
            QpImpl::Soft(q) => {
                q.modify_error();
                Ok(())
            }
            #[cfg(feature = "rdma")]
            QpImpl::Rdma(q) => q.modify_error(),
        }
    }

    /// Any state -> Reset (queues emptied without completions).
    pub fn reset(&self) -> Result<()> {
        match &self.imp {
            QpImpl::Soft(q) => {
                q.reset();
                Ok(())
            }
            #[cfg(feature = "rdma")]
            QpImpl::Rdma(q) => q.reset(),
        }
    }

    /// Reset -> Init -> RTR -> RTS in one call (RC: with the peer's blob; UD: `None`).
    pub fn connect(&self, remote: Option<&[u8]>, params: &RcParams) -> Result<()> {
        self.modify_to_init()?;
        self.modify_to_rtr(remote, params)?;
        self.modify_to_rts()
    }

    /// Posts a send WR; refused with [`Error::QueueFull`] when the send queue is full.
    pub fn post_send(&self, wr: &SendWr<'_>) -> Result<()> {
        match &self.imp {
            QpImpl::Soft(q) => {
                let dest = match wr.ud {
                    Some(d) => match &d.ah.imp {
                        AhImpl::Soft(a) => Some((*a, d.remote_qpn, d.remote_qkey)),
                        #[cfg(feature = "rdma")]
                        AhImpl::Rdma(_) => return Err(Error::ContextMismatch),
                    },
                    None => None,
                };
                q.post_send(wr, dest)
            }
            #[cfg(feature = "rdma")]
            QpImpl::Rdma(q) => q.post_send(wr),
        }
    }

    /// Posts a receive WR (not for QPs attached to an SRQ).
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<()> {
        match &self.imp {
            QpImpl::Soft(q) => q.post_recv(wr),
            #[cfg(feature = "rdma")]
            QpImpl::Rdma(q) => q.post_recv(wr),
        }
    }

    /// Faults injected so far on this QP (soft provider; zero for rdma).
    pub fn fault_stats(&self) -> FaultStats {
        match &self.imp {
            QpImpl::Soft(q) => q.fault_stats(),
            #[cfg(feature = "rdma")]
            QpImpl::Rdma(_) => FaultStats::default(),
        }
    }
}
