//! The `rdma` provider: libibverbs through `rdma-sys` (any real HCA or Soft-RoCE).
//!
//! All FFI lives here. Every verbs object is owned by one Rust value whose `Drop` destroys it;
//! children keep their parents alive through `Arc`s so destruction order is always valid.
//! libibverbs objects are thread-safe, which is what the `Send`/`Sync` impls rely on.

use std::ffi::CStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdma_sys::*;

use crate::error::{Error, Result};
use crate::types::*;
use crate::{AhImpl, CqImpl, QpInit, SrqImpl, SrqInit};

fn errno_err(op: &'static str, errno: i32) -> Error {
    Error::Verbs {
        op,
        errno,
        msg: std::io::Error::from_raw_os_error(errno).to_string(),
    }
}

fn last_err(op: &'static str) -> Error {
    errno_err(
        op,
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
    )
}

/// Lists verbs devices; empty when there are none (or libibverbs finds no provider).
pub(crate) fn devices() -> Result<Vec<DeviceInfo>> {
    let mut n = 0;
    // SAFETY: ibv_get_device_list writes the count and returns a NULL-terminated array or NULL.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: i < n entries of the list are valid device pointers; names are C strings.
        let name = unsafe { CStr::from_ptr(ibv_get_device_name(*list.add(i))) };
        out.push(DeviceInfo {
            name: name.to_string_lossy().into_owned(),
            provider: ProviderKind::Rdma,
        });
    }
    // SAFETY: list came from ibv_get_device_list and is freed once.
    unsafe { ibv_free_device_list(list) };
    Ok(out)
}

fn mtu_bytes(m: ibv_mtu::Type) -> u32 {
    match m {
        ibv_mtu::IBV_MTU_256 => 256,
        ibv_mtu::IBV_MTU_512 => 512,
        ibv_mtu::IBV_MTU_1024 => 1024,
        ibv_mtu::IBV_MTU_2048 => 2048,
        ibv_mtu::IBV_MTU_4096 => 4096,
        _ => 256,
    }
}

/// Depth accounting of one work queue. libibverbs providers may accept more WRs than the
/// depth they report (or round it up), so the depth is enforced here: each posted WR carries
/// its sequence number as the verbs `wr_id`, and a completion of sequence `s` retires every
/// earlier WR of the queue (work queues complete in order), unsignalled ones included.
#[derive(Debug, Default)]
struct Ring {
    posted: u64,
    done: u64,
    depth: u32,
    ids: std::collections::VecDeque<u64>,
}

impl Ring {
    fn post(&mut self, user: u64) -> Result<u64> {
        if self.posted - self.done >= u64::from(self.depth) {
            return Err(Error::QueueFull { depth: self.depth });
        }
        self.posted += 1;
        self.ids.push_back(user);
        Ok(self.posted - 1)
    }
    fn unpost(&mut self) {
        self.posted -= 1;
        self.ids.pop_back();
    }
    fn complete(&mut self, seq: u64) -> Option<u64> {
        if seq < self.done || seq >= self.posted {
            return None;
        }
        let k = (seq - self.done) as usize;
        let user = self.ids[k];
        self.ids.drain(..=k);
        self.done = seq + 1;
        Some(user)
    }
}

/// Tags in the top bits of the verbs `wr_id`: which queue a WR was posted to.
const TAG_MASK: u64 = 3 << 62;
const TAG_RECV: u64 = 1 << 62;
const TAG_SRQ: u64 = 2 << 62;

#[derive(Debug, Default)]
struct QpRings {
    send: Mutex<Ring>,
    recv: Mutex<Ring>,
    srq: Option<Arc<SrqRaw>>,
}

/// An open device.
pub(crate) struct Ctx {
    rings: Mutex<std::collections::HashMap<u32, Arc<QpRings>>>,
    ctx: *mut ibv_context,
    port: u8,
    gid_index: u8,
    gid: [u8; 16],
    lid: u16,
    mtu: ibv_mtu::Type,
    attr: DeviceAttr,
    max_rd_atom: u8,
}

// SAFETY: libibverbs contexts are thread-safe; the pointer is only used through verbs calls.
unsafe impl Send for Ctx {}
// SAFETY: as above.
unsafe impl Sync for Ctx {}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaCtx")
            .field("port", &self.port)
            .field("lid", &self.lid)
            .finish()
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: every child object holds an Arc<Ctx>, so none is alive any more.
        unsafe { ibv_close_device(self.ctx) };
    }
}

impl Ctx {
    pub fn open(cfg: &crate::RdmaConfig) -> Result<Arc<Self>> {
        let mut n = 0;
        // SAFETY: see devices().
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() || n <= 0 {
            if !list.is_null() {
                // SAFETY: freed once.
                unsafe { ibv_free_device_list(list) };
            }
            return Err(Error::NoDevice(
                cfg.device.clone().unwrap_or_else(|| "(any)".into()),
            ));
        }
        let mut chosen = std::ptr::null_mut();
        for i in 0..n as usize {
            // SAFETY: valid entries of the list.
            let d = unsafe { *list.add(i) };
            // SAFETY: device names are valid C strings while the list lives.
            let name = unsafe { CStr::from_ptr(ibv_get_device_name(d)) }.to_string_lossy();
            if cfg.device.as_deref().is_none_or(|want| want == name) {
                chosen = d;
                break;
            }
        }
        let ctx = if chosen.is_null() {
            std::ptr::null_mut()
        } else {
            // SAFETY: chosen is a device of the live list.
            unsafe { ibv_open_device(chosen) }
        };
        // SAFETY: the context keeps its own device reference; the list may go.
        unsafe { ibv_free_device_list(list) };
        if chosen.is_null() {
            return Err(Error::NoDevice(cfg.device.clone().unwrap_or_default()));
        }
        if ctx.is_null() {
            return Err(last_err("ibv_open_device"));
        }
        // SAFETY: zeroed plain C structs are valid out-parameters.
        let mut dattr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; dattr is a valid out-parameter.
        let rc = unsafe { ibv_query_device(ctx, &mut dattr) };
        if rc != 0 {
            // SAFETY: ctx is open and unused.
            unsafe { ibv_close_device(ctx) };
            return Err(errno_err("ibv_query_device", rc));
        }
        // SAFETY: as above.
        let mut pattr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; pattr is a valid out-parameter.
        let rc = unsafe { ___ibv_query_port(ctx, cfg.port, &mut pattr) };
        if rc != 0 {
            // SAFETY: ctx is open and unused.
            unsafe { ibv_close_device(ctx) };
            return Err(errno_err("ibv_query_port", rc));
        }
        // SAFETY: ibv_gid is plain bytes.
        let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; gid is a valid out-parameter.
        let rc = unsafe { ibv_query_gid(ctx, cfg.port, i32::from(cfg.gid_index), &mut gid) };
        if rc != 0 {
            // SAFETY: ctx is open and unused.
            unsafe { ibv_close_device(ctx) };
            return Err(errno_err("ibv_query_gid", rc));
        }
        // Async events are polled without blocking.
        // SAFETY: async_fd is the context's event fd; fcntl on it is harmless.
        unsafe {
            let fd = (*ctx).async_fd;
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        let attr = DeviceAttr {
            max_qp: dattr.max_qp.max(0) as u32,
            max_qp_wr: dattr.max_qp_wr.max(0) as u32,
            max_sge: dattr.max_sge.max(0) as u32,
            max_cqe: dattr.max_cqe.max(0) as u32,
            max_srq_wr: dattr.max_srq_wr.max(0) as u32,
            // Not reported by the device; a conservative value every HCA (and rxe) supports.
            max_inline: 64,
            mtu: mtu_bytes(pattr.active_mtu),
            max_msg_size: u64::from(pattr.max_msg_sz),
        };
        Ok(Arc::new(Self {
            rings: Mutex::new(std::collections::HashMap::new()),
            ctx,
            port: cfg.port,
            gid_index: cfg.gid_index,
            // SAFETY: reading the raw view of the union is always valid.
            gid: unsafe { gid.raw },
            lid: pattr.lid,
            mtu: pattr.active_mtu,
            attr,
            max_rd_atom: dattr.max_qp_rd_atom.clamp(1, 16) as u8,
        }))
    }

    pub fn attr(&self) -> DeviceAttr {
        self.attr.clone()
    }

    pub fn alloc_pd(self: &Arc<Self>) -> Result<Arc<Pd>> {
        // SAFETY: ctx is open.
        let pd = unsafe { ibv_alloc_pd(self.ctx) };
        if pd.is_null() {
            return Err(last_err("ibv_alloc_pd"));
        }
        Ok(Arc::new(Pd {
            ctx: self.clone(),
            pd,
        }))
    }

    pub fn create_cq(self: &Arc<Self>, depth: u32) -> Result<Arc<Cq>> {
        if depth == 0 || depth > self.attr.max_cqe {
            return Err(Error::InvalidParam {
                what: "CQ depth",
                value: depth.to_string(),
                valid: "1 ..= max_cqe",
            });
        }
        // SAFETY: ctx is open; no channel, no context pointer.
        let cq = unsafe {
            ibv_create_cq(
                self.ctx,
                depth as i32,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if cq.is_null() {
            return Err(last_err("ibv_create_cq"));
        }
        Ok(Arc::new(Cq {
            ctx: self.clone(),
            cq,
        }))
    }

    pub fn poll_event(&self) -> Option<AsyncEvent> {
        // SAFETY: zeroed is a valid out-parameter.
        let mut ev: ibv_async_event = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; async_fd is non-blocking, so this returns -1 when none is queued.
        let rc = unsafe { ibv_get_async_event(self.ctx, &mut ev) };
        if rc != 0 {
            return None;
        }
        // Read the type as a raw integer: values unknown to the bindings must not become an
        // invalid Rust enum.
        // SAFETY: event_type is a C enum (4 bytes) at a valid address.
        let t = unsafe { *(std::ptr::addr_of!(ev.event_type) as *const u32) };
        // SAFETY: the element union member matching the event type is the valid one.
        let e = unsafe {
            match t {
                0 => AsyncEvent::CqError {
                    cq: (*ev.element.cq).handle,
                },
                1 => AsyncEvent::QpFatal {
                    qpn: (*ev.element.qp).qp_num,
                },
                9 => AsyncEvent::PortActive,
                10 => AsyncEvent::PortError,
                15 => AsyncEvent::SrqLimitReached {
                    srq: (*ev.element.srq).handle,
                },
                other => AsyncEvent::Other(other),
            }
        };
        // SAFETY: every event obtained must be acknowledged once.
        unsafe { ibv_ack_async_event(&mut ev) };
        Some(e)
    }
}

/// Protection domain.
pub(crate) struct Pd {
    ctx: Arc<Ctx>,
    pd: *mut ibv_pd,
}

// SAFETY: verbs objects are thread-safe.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RdmaPd")
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: children (MRs, QPs, SRQs, AHs) hold an Arc<Pd>; none is alive.
        unsafe { ibv_dealloc_pd(self.pd) };
    }
}

fn access_bits(a: AccessFlags) -> u32 {
    let mut v = 0;
    if a.contains(AccessFlags::LOCAL_WRITE) {
        v |= ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
    }
    if a.contains(AccessFlags::REMOTE_WRITE) {
        v |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
    }
    if a.contains(AccessFlags::REMOTE_READ) {
        v |= ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
    }
    v
}

/// Address blob: `"RA" | 2 (rdma) | qp type | gid 16 | lid u16 | qpn u32 | psn u32 | mtu u8`,
/// little-endian through `rmca_framework::wire` (carried in versioned btl-ud/btl-rc cards).
const ADDR_LEN: usize = 2 + 1 + 1 + 16 + 2 + 4 + 4 + 1;

struct RdmaAddr {
    qp_type: u8,
    gid: [u8; 16],
    lid: u16,
    qpn: u32,
    psn: u32,
    mtu: u8,
}

impl RdmaAddr {
    fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(ADDR_LEN);
        rmca_framework::wire::Writer::new(&mut v)
            .bytes(b"RA")
            .u8(2)
            .u8(self.qp_type)
            .bytes(&self.gid)
            .u16(self.lid)
            .u32(self.qpn)
            .u32(self.psn)
            .u8(self.mtu);
        v
    }
    fn parse(b: &[u8]) -> Result<Self> {
        let bad = || Error::BadAddress("not an rdma provider address");
        if b.len() != ADDR_LEN || &b[0..2] != b"RA" || b[2] != 2 {
            return Err(bad());
        }
        let mut r = rmca_framework::wire::Reader::new(&b[3..]);
        let mut field = || -> std::result::Result<Self, rmca_framework::wire::Truncated> {
            Ok(Self {
                qp_type: r.u8()?,
                gid: r.array()?,
                lid: r.u16()?,
                qpn: r.u32()?,
                psn: r.u32()?,
                mtu: r.u8()?,
            })
        };
        field().map_err(|_| bad())
    }
}

fn ah_attr(ctx: &Ctx, a: &RdmaAddr) -> ibv_ah_attr {
    // SAFETY: plain C struct; zero is a valid starting value.
    let mut ah: ibv_ah_attr = unsafe { std::mem::zeroed() };
    // RoCE (rxe included) routes by GID: a GRH is mandatory.
    ah.is_global = 1;
    ah.grh.dgid = ibv_gid { raw: a.gid };
    ah.grh.sgid_index = ctx.gid_index;
    ah.grh.hop_limit = 1;
    ah.dlid = a.lid;
    ah.port_num = ctx.port;
    ah
}

impl Pd {
    pub fn reg_mr(self: &Arc<Self>, ptr: *mut u8, len: usize, access: AccessFlags) -> Result<Mr> {
        // SAFETY: the caller (Pd::register/register_raw) guarantees ptr..ptr+len stays valid
        // until the Mr is dropped.
        let mr = unsafe { ibv_reg_mr(self.pd, ptr.cast(), len, access_bits(access) as i32) };
        if mr.is_null() {
            return Err(last_err("ibv_reg_mr"));
        }
        Ok(Mr {
            _pd: self.clone(),
            mr,
        })
    }

    pub fn create_srq(self: &Arc<Self>, init: SrqInit) -> Result<Srq> {
        // SAFETY: plain C struct.
        let mut a: ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        a.attr.max_wr = init.max_wr;
        a.attr.max_sge = init.max_sge;
        a.attr.srq_limit = 0;
        // SAFETY: pd is alive; a is a valid init attribute.
        let srq = unsafe { ibv_create_srq(self.pd, &mut a) };
        if srq.is_null() {
            return Err(last_err("ibv_create_srq"));
        }
        let s = Srq {
            inner: Arc::new(SrqRaw {
                _pd: self.clone(),
                srq,
                depth: a.attr.max_wr,
                slab: Mutex::new((0, std::collections::HashMap::new())),
            }),
        };
        if init.limit > 0 {
            s.arm(init.limit)?;
        }
        Ok(s)
    }

    pub fn create_qp(self: &Arc<Self>, init: &QpInit<'_>) -> Result<Qp> {
        let (CqImpl::Rdma(scq), CqImpl::Rdma(rcq)) = (&init.send_cq.imp, &init.recv_cq.imp) else {
            return Err(Error::ContextMismatch);
        };
        let srq = match init.srq.map(|s| &s.imp) {
            None => None,
            Some(SrqImpl::Rdma(s)) => Some(s.inner.clone()),
            Some(_) => return Err(Error::ContextMismatch),
        };
        // SAFETY: plain C struct.
        let mut a: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        a.send_cq = scq.cq;
        a.recv_cq = rcq.cq;
        a.srq = srq.as_ref().map_or(std::ptr::null_mut(), |s| s.srq);
        a.cap = ibv_qp_cap {
            max_send_wr: init.caps.max_send_wr,
            max_recv_wr: if srq.is_some() {
                0
            } else {
                init.caps.max_recv_wr
            },
            max_send_sge: init.caps.max_send_sge,
            max_recv_sge: if srq.is_some() {
                0
            } else {
                init.caps.max_recv_sge
            },
            max_inline_data: init.caps.max_inline_data,
        };
        a.qp_type = match init.qp_type {
            QpType::Rc => ibv_qp_type::IBV_QPT_RC,
            QpType::Ud => ibv_qp_type::IBV_QPT_UD,
        };
        a.sq_sig_all = 0;
        // SAFETY: pd and CQs are alive (held below); a is a valid init attribute.
        let qp = unsafe { ibv_create_qp(self.pd, &mut a) };
        if qp.is_null() {
            return Err(last_err("ibv_create_qp"));
        }
        let caps = QpCaps {
            max_send_wr: a.cap.max_send_wr,
            max_recv_wr: a.cap.max_recv_wr,
            max_send_sge: a.cap.max_send_sge,
            max_recv_sge: a.cap.max_recv_sge,
            max_inline_data: a.cap.max_inline_data,
        };
        let rings = Arc::new(QpRings {
            send: Mutex::new(Ring {
                depth: caps.max_send_wr,
                ..Default::default()
            }),
            recv: Mutex::new(Ring {
                depth: caps.max_recv_wr,
                ..Default::default()
            }),
            srq: srq.clone(),
        });
        // SAFETY: qp was just created.
        let qpn = unsafe { (*qp).qp_num };
        self.ctx
            .rings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(qpn, rings.clone());
        Ok(Qp {
            rings,
            pd: self.clone(),
            _cqs: (scq.clone(), rcq.clone()),
            _srq: srq,
            qp,
            qp_type: init.qp_type,
            qkey: init.qkey,
            // The provider wrote the actual (possibly rounded-up) capacities back.
            caps,
            state: Mutex::new(QpState::Reset),
            rc_params: Mutex::new(RcParams::default()),
        })
    }

    pub fn create_ah(self: &Arc<Self>, peer: &[u8]) -> Result<(Arc<Ah>, u32)> {
        let a = RdmaAddr::parse(peer)?;
        if a.qp_type != 1 {
            return Err(Error::BadAddress("not a UD address"));
        }
        let mut attr = ah_attr(&self.ctx, &a);
        // SAFETY: pd is alive; attr is a valid AH attribute.
        let ah = unsafe { ibv_create_ah(self.pd, &mut attr) };
        if ah.is_null() {
            return Err(last_err("ibv_create_ah"));
        }
        Ok((
            Arc::new(Ah {
                _pd: self.clone(),
                ah,
            }),
            a.qpn,
        ))
    }
}

/// Memory registration.
pub(crate) struct Mr {
    _pd: Arc<Pd>,
    mr: *mut ibv_mr,
}

// SAFETY: verbs objects are thread-safe.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RdmaMr")
    }
}

impl Mr {
    pub fn lkey(&self) -> u32 {
        // SAFETY: mr is a live registration.
        unsafe { (*self.mr).lkey }
    }
    pub fn rkey(&self) -> u32 {
        // SAFETY: mr is a live registration.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered once, deregistered once, before the memory is freed (crate::Mr
        // drops its registration field first).
        unsafe { ibv_dereg_mr(self.mr) };
    }
}

/// Completion queue.
pub(crate) struct Cq {
    ctx: Arc<Ctx>,
    cq: *mut ibv_cq,
}

// SAFETY: verbs objects are thread-safe.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RdmaCq")
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: QPs using the CQ hold an Arc<Cq>; none is alive.
        unsafe { ibv_destroy_cq(self.cq) };
    }
}

fn status_of(s: ibv_wc_status::Type) -> WcStatus {
    match s {
        ibv_wc_status::IBV_WC_SUCCESS => WcStatus::Success,
        ibv_wc_status::IBV_WC_LOC_LEN_ERR => WcStatus::LocalLengthError,
        ibv_wc_status::IBV_WC_LOC_QP_OP_ERR => WcStatus::LocalQpOperationError,
        ibv_wc_status::IBV_WC_LOC_PROT_ERR => WcStatus::LocalProtectionError,
        ibv_wc_status::IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlushError,
        ibv_wc_status::IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccessError,
        ibv_wc_status::IBV_WC_REM_INV_REQ_ERR => WcStatus::RemoteInvalidRequest,
        ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExceeded,
        ibv_wc_status::IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExceeded,
        other => WcStatus::Other(other),
    }
}

impl Cq {
    pub fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        const CHUNK: usize = 32;
        let mut done = 0;
        while done < out.len() {
            // SAFETY: ibv_wc is a plain C struct; zero is valid.
            let mut wcs: [ibv_wc; CHUNK] = unsafe { std::mem::zeroed() };
            let want = (out.len() - done).min(CHUNK);
            // SAFETY: cq is alive; wcs has room for `want` entries.
            let n = unsafe { ibv_poll_cq(self.cq, want as i32, wcs.as_mut_ptr()) };
            if n < 0 {
                return Err(Error::CqOverflow {
                    // SAFETY: cq is alive.
                    cq: unsafe { (*self.cq).handle },
                });
            }
            let rings = self.ctx.rings.lock().unwrap_or_else(|p| p.into_inner());
            for w in &wcs[..n as usize] {
                let with_imm = w.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
                // The queue is told by the tag in our wr_id: the opcode of an error completion
                // is undefined in verbs.
                let tag = w.wr_id & TAG_MASK;
                let key = w.wr_id & !TAG_MASK;
                let wr_id = match rings.get(&w.qp_num) {
                    Some(r) if tag == TAG_SRQ => r.srq.as_ref().and_then(|s| s.take(key)),
                    Some(r) if tag == TAG_RECV => r
                        .recv
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .complete(key),
                    Some(r) => r
                        .send
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .complete(key),
                    None => None,
                };
                // A completion of a QP destroyed meanwhile has no owner any more.
                let Some(wr_id) = wr_id else { continue };
                let status = status_of(w.status);
                let opcode = match (status, tag, w.opcode) {
                    (_, TAG_RECV | TAG_SRQ, _) => WcOpcode::Recv,
                    (WcStatus::Success, _, ibv_wc_opcode::IBV_WC_RDMA_WRITE) => WcOpcode::RdmaWrite,
                    (WcStatus::Success, _, ibv_wc_opcode::IBV_WC_RDMA_READ) => WcOpcode::RdmaRead,
                    _ => WcOpcode::Send,
                };
                out[done] = Wc {
                    wr_id,
                    status,
                    opcode,
                    byte_len: w.byte_len,
                    // SAFETY: imm_data is the valid member when IBV_WC_WITH_IMM is set.
                    imm: with_imm.then(|| {
                        u32::from_be(unsafe { w.imm_data_invalidated_rkey_union.imm_data })
                    }),
                    qp_num: w.qp_num,
                    src_qp: w.src_qp,
                };
                done += 1;
            }
            drop(rings);
            if (n as usize) < want {
                break;
            }
        }
        Ok(done)
    }
}

struct SrqRaw {
    _pd: Arc<Pd>,
    srq: *mut ibv_srq,
    depth: u32,
    /// Caller wr_ids of posted WQEs by key (SRQ WQEs may be consumed in any order).
    slab: Mutex<(u64, std::collections::HashMap<u64, u64>)>,
}

impl std::fmt::Debug for SrqRaw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RdmaSrqRaw")
    }
}

impl SrqRaw {
    fn take(&self, key: u64) -> Option<u64> {
        self.slab
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .remove(&key)
    }
}

// SAFETY: verbs objects are thread-safe.
unsafe impl Send for SrqRaw {}
// SAFETY: as above.
unsafe impl Sync for SrqRaw {}

impl Drop for SrqRaw {
    fn drop(&mut self) {
        // SAFETY: QPs attached hold an Arc<SrqRaw>; none is alive.
        unsafe { ibv_destroy_srq(self.srq) };
    }
}

/// Shared receive queue.
pub(crate) struct Srq {
    inner: Arc<SrqRaw>,
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RdmaSrq")
    }
}

fn sges(s: &[Sge]) -> Vec<ibv_sge> {
    s.iter()
        .map(|g| ibv_sge {
            addr: g.addr,
            length: g.length,
            lkey: g.lkey,
        })
        .collect()
}

impl Srq {
    pub fn id(&self) -> u32 {
        // SAFETY: srq is alive.
        unsafe { (*self.inner.srq).handle }
    }

    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<()> {
        let mut sg = sges(wr.sges);
        // SAFETY: plain C struct.
        let mut w: ibv_recv_wr = unsafe { std::mem::zeroed() };
        let key = {
            let mut slab = self.inner.slab.lock().unwrap_or_else(|p| p.into_inner());
            if slab.1.len() >= self.inner.depth as usize {
                return Err(Error::QueueFull {
                    depth: self.inner.depth,
                });
            }
            let key = slab.0 & !TAG_MASK;
            slab.0 = slab.0.wrapping_add(1);
            slab.1.insert(key, wr.wr_id);
            key
        };
        w.wr_id = key | TAG_SRQ;
        w.sg_list = sg.as_mut_ptr();
        w.num_sge = sg.len() as i32;
        let mut bad = std::ptr::null_mut();
        // SAFETY: srq alive; w and its SGE array live across the call (copied by the provider).
        let rc = unsafe { ibv_post_srq_recv(self.inner.srq, &mut w, &mut bad) };
        if rc != 0 {
            self.inner.take(key);
        }
        match rc {
            0 => Ok(()),
            libc::ENOMEM => Err(Error::QueueFull {
                depth: self.inner.depth,
            }),
            e => Err(errno_err("ibv_post_srq_recv", e)),
        }
    }

    pub fn arm(&self, limit: u32) -> Result<()> {
        // SAFETY: plain C struct.
        let mut a: ibv_srq_attr = unsafe { std::mem::zeroed() };
        a.srq_limit = limit;
        // SAFETY: srq alive; mask selects only the limit.
        let rc = unsafe {
            ibv_modify_srq(
                self.inner.srq,
                &mut a,
                ibv_srq_attr_mask::IBV_SRQ_LIMIT.0 as i32,
            )
        };
        if rc != 0 {
            return Err(errno_err("ibv_modify_srq", rc));
        }
        Ok(())
    }
}

/// Address handle.
pub(crate) struct Ah {
    _pd: Arc<Pd>,
    ah: *mut ibv_ah,
}

// SAFETY: verbs objects are thread-safe.
unsafe impl Send for Ah {}
// SAFETY: as above.
unsafe impl Sync for Ah {}

impl std::fmt::Debug for Ah {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RdmaAh")
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once; WRs referencing it have been posted (the HCA
        // copies the address vector at post time).
        unsafe { ibv_destroy_ah(self.ah) };
    }
}

/// Queue pair.
pub(crate) struct Qp {
    pd: Arc<Pd>,
    _cqs: (Arc<Cq>, Arc<Cq>),
    _srq: Option<Arc<SrqRaw>>,
    qp: *mut ibv_qp,
    qp_type: QpType,
    qkey: u32,
    caps: QpCaps,
    state: Mutex<QpState>,
    rc_params: Mutex<RcParams>,
    rings: Arc<QpRings>,
}

// SAFETY: verbs objects are thread-safe.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaQp")
            .field("qpn", &self.qp_num())
            .finish()
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        self.pd
            .ctx
            .rings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.qp_num());
        // SAFETY: created once, destroyed once; CQs/SRQ/PD outlive it (fields dropped after).
        unsafe { ibv_destroy_qp(self.qp) };
    }
}

/// InfiniBand RNR timer encoding: the smallest code whose delay covers `d`.
fn rnr_code(d: Duration) -> u8 {
    const US: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
        327_680, 491_520,
    ];
    let want = d.as_micros().min(u128::from(u32::MAX)) as u32;
    (1..32).find(|&i| US[i] >= want).unwrap_or(0) as u8
}

impl Qp {
    pub fn qp_num(&self) -> u32 {
        // SAFETY: qp is alive.
        unsafe { (*self.qp).qp_num }
    }

    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    fn psn(&self) -> u32 {
        self.qp_num().wrapping_mul(2654435761) & 0xff_ffff
    }

    pub fn state(&self) -> QpState {
        // SAFETY: plain C structs as out-parameters.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut i: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: qp alive; valid out-parameters.
        let rc = unsafe {
            ibv_query_qp(
                self.qp,
                &mut a,
                ibv_qp_attr_mask::IBV_QP_STATE.0 as i32,
                &mut i,
            )
        };
        if rc != 0 {
            return *self.state.lock().unwrap_or_else(|p| p.into_inner());
        }
        match a.qp_state {
            ibv_qp_state::IBV_QPS_RESET => QpState::Reset,
            ibv_qp_state::IBV_QPS_INIT => QpState::Init,
            ibv_qp_state::IBV_QPS_RTR => QpState::Rtr,
            ibv_qp_state::IBV_QPS_RTS => QpState::Rts,
            _ => QpState::Error,
        }
    }

    pub fn address(&self) -> Vec<u8> {
        let c = &self.pd.ctx;
        RdmaAddr {
            qp_type: match self.qp_type {
                QpType::Rc => 0,
                QpType::Ud => 1,
            },
            gid: c.gid,
            lid: c.lid,
            qpn: self.qp_num(),
            psn: self.psn(),
            mtu: c.mtu as u8,
        }
        .to_bytes()
    }

    fn modify(&self, a: &mut ibv_qp_attr, mask: u32, to: QpState) -> Result<()> {
        // SAFETY: qp alive; a is a fully initialised attribute for the bits in mask.
        let rc = unsafe { ibv_modify_qp(self.qp, a, mask as i32) };
        if rc != 0 {
            let from = self.state();
            return Err(if rc == libc::EINVAL {
                Error::InvalidTransition { from, to }
            } else {
                errno_err("ibv_modify_qp", rc)
            });
        }
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = to;
        Ok(())
    }

    fn check_from(&self, from: QpState, to: QpState) -> Result<()> {
        let s = self.state();
        if s != from {
            return Err(Error::InvalidTransition { from: s, to });
        }
        Ok(())
    }

    pub fn modify_init(&self) -> Result<()> {
        self.check_from(QpState::Reset, QpState::Init)?;
        // SAFETY: plain C struct.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = self.pd.ctx.port;
        let mut mask = ibv_qp_attr_mask::IBV_QP_STATE.0
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0
            | ibv_qp_attr_mask::IBV_QP_PORT.0;
        match self.qp_type {
            QpType::Rc => {
                a.qp_access_flags = access_bits(AccessFlags::all());
                mask |= ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0;
            }
            QpType::Ud => {
                a.qkey = self.qkey;
                mask |= ibv_qp_attr_mask::IBV_QP_QKEY.0;
            }
        }
        self.modify(&mut a, mask, QpState::Init)
    }

    pub fn modify_rtr(&self, remote: Option<&[u8]>, p: &RcParams) -> Result<()> {
        self.check_from(QpState::Init, QpState::Rtr)?;
        // SAFETY: plain C struct.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        let mut mask = ibv_qp_attr_mask::IBV_QP_STATE.0;
        if self.qp_type == QpType::Rc {
            let r = RdmaAddr::parse(
                remote.ok_or(Error::BadAddress("RC needs the peer's address at RTR"))?,
            )?;
            if r.qp_type != 0 {
                return Err(Error::BadAddress("a UD address given to an RC QP"));
            }
            a.path_mtu = (self.pd.ctx.mtu as u8).min(r.mtu) as ibv_mtu::Type;
            a.dest_qp_num = r.qpn;
            a.rq_psn = r.psn;
            a.max_dest_rd_atomic = self.pd.ctx.max_rd_atom;
            a.min_rnr_timer = rnr_code(p.min_rnr_timer);
            a.ah_attr = ah_attr(&self.pd.ctx, &r);
            mask |= ibv_qp_attr_mask::IBV_QP_AV.0
                | ibv_qp_attr_mask::IBV_QP_PATH_MTU.0
                | ibv_qp_attr_mask::IBV_QP_DEST_QPN.0
                | ibv_qp_attr_mask::IBV_QP_RQ_PSN.0
                | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC.0
                | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0;
            *self.rc_params.lock().unwrap_or_else(|p| p.into_inner()) = *p;
        }
        self.modify(&mut a, mask, QpState::Rtr)
    }

    pub fn modify_rts(&self) -> Result<()> {
        self.check_from(QpState::Rtr, QpState::Rts)?;
        // SAFETY: plain C struct.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        a.sq_psn = self.psn();
        let mut mask = ibv_qp_attr_mask::IBV_QP_STATE.0 | ibv_qp_attr_mask::IBV_QP_SQ_PSN.0;
        if self.qp_type == QpType::Rc {
            let p = *self.rc_params.lock().unwrap_or_else(|p| p.into_inner());
            a.timeout = p.timeout;
            a.retry_cnt = p.retry_cnt.min(7);
            a.rnr_retry = p.rnr_retry.min(7);
            a.max_rd_atomic = self.pd.ctx.max_rd_atom;
            mask |= ibv_qp_attr_mask::IBV_QP_TIMEOUT.0
                | ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0
                | ibv_qp_attr_mask::IBV_QP_RNR_RETRY.0
                | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC.0;
        }
        self.modify(&mut a, mask, QpState::Rts)
    }

    pub fn modify_error(&self) -> Result<()> {
        // SAFETY: plain C struct.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_ERR;
        self.modify(&mut a, ibv_qp_attr_mask::IBV_QP_STATE.0, QpState::Error)
    }

    pub fn reset(&self) -> Result<()> {
        // SAFETY: plain C struct.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RESET;
        self.modify(&mut a, ibv_qp_attr_mask::IBV_QP_STATE.0, QpState::Reset)
    }

    pub fn post_send(&self, wr: &SendWr<'_>) -> Result<()> {
        if wr.sges.len() > self.caps.max_send_sge as usize {
            return Err(Error::InvalidWr("too many SGEs for this QP's send queue"));
        }
        let mut sg = sges(wr.sges);
        // SAFETY: plain C struct.
        let mut w: ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = wr.wr_id;
        w.sg_list = sg.as_mut_ptr();
        w.num_sge = sg.len() as i32;
        w.send_flags = 0;
        if wr.signaled {
            w.send_flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        if wr.inline {
            w.send_flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        match wr.op {
            SendOp::Send => w.opcode = ibv_wr_opcode::IBV_WR_SEND,
            SendOp::SendWithImm(imm) => {
                w.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
                w.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            }
            SendOp::RdmaWrite { remote_addr, rkey } => {
                w.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                w.wr.rdma = rdma_t { remote_addr, rkey };
            }
            SendOp::RdmaRead { remote_addr, rkey } => {
                w.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
                w.wr.rdma = rdma_t { remote_addr, rkey };
            }
        }
        match (self.qp_type, wr.ud) {
            (QpType::Ud, Some(d)) => {
                let AhImpl::Rdma(ah) = &d.ah.imp else {
                    return Err(Error::ContextMismatch);
                };
                let len: u64 = wr.sges.iter().map(|s| u64::from(s.length)).sum();
                if len > u64::from(self.pd.ctx.attr.mtu) {
                    return Err(Error::InvalidWr("UD message larger than the path MTU"));
                }
                w.wr.ud = ud_t {
                    ah: ah.ah,
                    remote_qpn: d.remote_qpn,
                    remote_qkey: d.remote_qkey,
                };
            }
            (QpType::Ud, None) => return Err(Error::InvalidWr("UD send needs a destination")),
            (QpType::Rc, Some(_)) => return Err(Error::InvalidWr("UD destination on an RC QP")),
            (QpType::Rc, None) => {}
        }
        let mut ring = self.rings.send.lock().unwrap_or_else(|p| p.into_inner());
        w.wr_id = ring.post(wr.wr_id)?;
        let mut bad = std::ptr::null_mut();
        // SAFETY: qp alive; w, its SGEs and the AH live across the call; the provider copies
        // the WR (and inline data) before returning.
        let rc = unsafe { ibv_post_send(self.qp, &mut w, &mut bad) };
        if rc != 0 {
            ring.unpost();
        }
        match rc {
            0 => Ok(()),
            libc::ENOMEM => Err(Error::QueueFull {
                depth: self.caps.max_send_wr,
            }),
            e => Err(errno_err("ibv_post_send", e)),
        }
    }

    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<()> {
        if self._srq.is_some() {
            return Err(Error::InvalidWr("QP uses an SRQ: post to the SRQ"));
        }
        let mut sg = sges(wr.sges);
        // SAFETY: plain C struct.
        let mut w: ibv_recv_wr = unsafe { std::mem::zeroed() };
        w.wr_id = wr.wr_id;
        w.sg_list = sg.as_mut_ptr();
        w.num_sge = sg.len() as i32;
        let mut ring = self.rings.recv.lock().unwrap_or_else(|p| p.into_inner());
        w.wr_id = ring.post(wr.wr_id)? | TAG_RECV;
        let mut bad = std::ptr::null_mut();
        // SAFETY: qp alive; w and SGEs live across the call.
        let rc = unsafe { ibv_post_recv(self.qp, &mut w, &mut bad) };
        if rc != 0 {
            ring.unpost();
        }
        match rc {
            0 => Ok(()),
            libc::ENOMEM => Err(Error::QueueFull {
                depth: self.caps.max_recv_wr,
            }),
            e => Err(errno_err("ibv_post_recv", e)),
        }
    }
}
