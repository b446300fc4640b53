//! The `soft` provider: verbs emulated over sockets, in pure Rust.
//!
//! RC QPs run [`rc::RcProto`] over one TCP connection each; UD QPs own one UDP socket each and
//! send one datagram per message. The data path runs in the caller's thread: `post_send` writes
//! to the socket directly and `poll_cq` drains the sockets of the CQ's QPs. A background agent
//! thread per context accepts RC connections and progresses every QP its owner has not polled
//! lately (using `try_lock`, so it never stalls the owner), so RDMA READ/WRITE are served and
//! RNR/timers run without the target application's involvement.
//!
//! A UD message is one UDP datagram that is never larger than the MTU of the interface under
//! the bound address ([`link`]): like a HCA's UD MTU, the context's MTU is the path MTU, so
//! datagrams are never IP-fragmented (the DF bit is set, and a datagram refused by the kernel
//! for a smaller path MTU is counted in [`SoftStats::ud_send_mtu_drops`]).
//!
//! Limitations: an address handle names one UD QP's socket (the soft "port" is per QP), and
//! the RC send-queue slot of a WR is released when the peer acknowledges it.

mod cq;
mod ctx;
pub mod link;
mod qp;
pub mod rc;
mod rc_qp;
mod rx;
mod srq;
mod ud;
pub mod wire;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::fault::FaultConfig;
#[cfg(doc)]
use crate::types::DeviceAttr;

pub(crate) use cq::Cq;
pub(crate) use ctx::Ctx;
pub(crate) use qp::{Qp, QpInitSoft};
pub(crate) use srq::Srq;

/// Largest RC message of the soft provider; a longer announced segment is malformed.
const MAX_MSG: u64 = 64 << 20;
const MAX_SEGMENT: usize = MAX_MSG as usize + wire::RC_HEADER_LEN;

/// Bytes a UD receive buffer reserves in front of the payload for the GRH, as on real HCAs.
pub const UD_GRH_LEN: usize = 40;

/// Configuration of the soft provider.
#[derive(Debug, Clone)]
pub struct SoftConfig {
    /// Address the UDP sockets and the RC listener bind to (the node's address; default
    /// 127.0.0.1). Peers connect to it, so it must be reachable from them.
    pub bind_addr: IpAddr,
    /// UD payload MTU wanted, in bytes (default 2048). The context uses at most what one
    /// unfragmented datagram carries on the interface of `bind_addr` (its MTU minus the IP, UDP
    /// and soft UD headers, see [`link::SoftLink`]): [`DeviceAttr::mtu`] reports the value in
    /// use.
    pub ud_mtu: u32,
    /// Faults injected on UD traffic.
    pub ud_fault: FaultConfig,
    /// Faults injected on RC traffic (delay and corrupt only).
    pub rc_fault: FaultConfig,
    /// Maximum work requests per queue reported and enforced.
    pub max_qp_wr: u32,
    /// Maximum SGEs per work request.
    pub max_sge: u32,
    /// Maximum inline bytes.
    pub max_inline: u32,
    /// Maximum CQ depth.
    pub max_cqe: u32,
    /// The agent progresses a QP (RDMA service, RNR timers, UD drops) that its owner has not
    /// progressed (by polling one of its CQs) for this long.
    pub agent_idle: Duration,
}

impl Default for SoftConfig {
    fn default() -> Self {
        Self {
            bind_addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            ud_mtu: 2048,
            ud_fault: FaultConfig::default(),
            rc_fault: FaultConfig::default(),
            max_qp_wr: 16384,
            max_sge: 16,
            max_inline: 1024,
            max_cqe: 1 << 20,
            agent_idle: Duration::from_millis(1),
        }
    }
}

impl SoftConfig {
    /// Checks ranges.
    pub fn validate(&self) -> Result<()> {
        if !(256..=65000).contains(&self.ud_mtu) {
            return Err(Error::InvalidParam {
                what: "soft UD MTU",
                value: self.ud_mtu.to_string(),
                valid: "256 ..= 65000 bytes",
            });
        }
        self.ud_fault.validate()?;
        self.rc_fault.validate_rc()
    }
}

/// Counters of one soft context (packets dropped as a HCA would).
#[derive(Debug, Default)]
pub struct SoftStats {
    /// UD datagrams dropped because no receive WQE was posted.
    pub ud_no_wqe_drops: AtomicU64,
    /// Datagrams or connections dropped as foreign (other job, bad magic, wrong QPN/Q_Key).
    pub foreign_drops: AtomicU64,
    /// Malformed datagrams/segments dropped.
    pub malformed_drops: AtomicU64,
    /// UD datagrams dropped for exceeding the MTU.
    pub mtu_drops: AtomicU64,
    /// UD datagrams the kernel refused to send (EMSGSIZE): larger than the path MTU, which
    /// fell below the interface MTU after the context opened (DF is set: never fragmented).
    pub ud_send_mtu_drops: AtomicU64,
    /// Receive system calls on UD sockets that returned datagrams (`recvmmsg` batches).
    pub ud_recv_calls: AtomicU64,
    /// Receive system calls on UD sockets that found nothing queued (the idle poll's cost).
    pub ud_empty_polls: AtomicU64,
    /// `accept` system calls on the RC listener.
    pub accept_calls: AtomicU64,
}

/// Snapshot of [`SoftStats`] plus fault counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SoftStatsSnapshot {
    /// UD datagrams dropped because no receive WQE was posted.
    pub ud_no_wqe_drops: u64,
    /// Foreign traffic dropped.
    pub foreign_drops: u64,
    /// Malformed traffic dropped.
    pub malformed_drops: u64,
    /// UD datagrams above the MTU dropped.
    pub mtu_drops: u64,
    /// UD datagrams the kernel refused to send for exceeding the path MTU (EMSGSIZE).
    pub ud_send_mtu_drops: u64,
    /// Receive system calls on UD sockets that returned datagrams (several datagrams per call
    /// when they queue up).
    pub ud_recv_calls: u64,
    /// Receive system calls on UD sockets that found nothing queued.
    pub ud_empty_polls: u64,
    /// `accept` system calls on the RC listener (made only when a connection is pending).
    pub accept_calls: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a verbs lock leaves plain data; keep going rather than cascade.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
