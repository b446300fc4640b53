//! Plain data types of the verbs API, shared by every provider.

use std::time::Duration;

bitflags::bitflags! {
    /// Memory region access rights, as `ibv_access_flags`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct AccessFlags: u32 {
        /// The local HCA may write (receives, RDMA READ responses land here).
        const LOCAL_WRITE = 1;
        /// A remote peer may RDMA WRITE into the region (needs LOCAL_WRITE, as in ibverbs).
        const REMOTE_WRITE = 2;
        /// A remote peer may RDMA READ from the region.
        const REMOTE_READ = 4;
    }
}

/// Which provider implements the verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// Pure Rust emulation over TCP (RC) and UDP (UD).
    Soft,
    /// libibverbs through `rdma-sys` (real HCA or Soft-RoCE).
    Rdma,
}

impl ProviderKind {
    /// Parses `soft` or `rdma`.
    pub fn parse(s: &str) -> Result<Self, crate::Error> {
        match s {
            "soft" => Ok(Self::Soft),
            "rdma" => Ok(Self::Rdma),
            other => Err(crate::Error::InvalidParam {
                what: "provider",
                value: other.to_string(),
                valid: "soft | rdma",
            }),
        }
    }

    /// Name as accepted by [`ProviderKind::parse`].
    pub fn name(self) -> &'static str {
        match self {
            Self::Soft => "soft",
            Self::Rdma => "rdma",
        }
    }
}

/// Device description returned by device enumeration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name (`soft0`, `rxe0`, `mlx5_0`, ...).
    pub name: String,
    /// Provider implementing it.
    pub provider: ProviderKind,
}

/// Device limits, the subset of `ibv_device_attr` / `ibv_port_attr` the BTLs need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Maximum number of queue pairs.
    pub max_qp: u32,
    /// Maximum outstanding work requests per queue.
    pub max_qp_wr: u32,
    /// Maximum scatter/gather entries per work request.
    pub max_sge: u32,
    /// Maximum completion queue depth.
    pub max_cqe: u32,
    /// Maximum SRQ depth.
    pub max_srq_wr: u32,
    /// Maximum bytes of inline data in a send work request.
    pub max_inline: u32,
    /// Active path MTU in bytes (UD payload limit).
    pub mtu: u32,
    /// Largest RC message in bytes.
    pub max_msg_size: u64,
}

/// Transport type of a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable datagram.
    Ud,
}

/// Queue pair states, as in the InfiniBand specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Freshly created or reset.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Error: every posted and outstanding WR completes with a flush error.
    Error,
}

/// Queue depths requested for a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth (outstanding send WRs).
    pub max_send_wr: u32,
    /// Receive queue depth (ignored with an SRQ).
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send WR.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive WR.
    pub max_recv_sge: u32,
    /// Inline data bytes per send WR.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        Self {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        }
    }
}

/// Parameters of an RC connection (the RTR/RTS attributes that matter here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcParams {
    /// Receiver-not-ready retries before failing with [`WcStatus::RnrRetryExceeded`];
    /// 7 means retry forever, as in the InfiniBand specification.
    pub rnr_retry: u8,
    /// Time the requester waits after an RNR NAK before resending.
    pub min_rnr_timer: Duration,
    /// Transport retries (soft provider: connection attempts; rdma: `retry_cnt`).
    pub retry_cnt: u8,
    /// Local ACK timeout exponent for the rdma provider (4.096 us * 2^timeout).
    pub timeout: u8,
}

impl Default for RcParams {
    fn default() -> Self {
        Self {
            rnr_retry: 7,
            min_rnr_timer: Duration::from_micros(640),
            retry_cnt: 7,
            timeout: 14,
        }
    }
}

/// Local buffer reference in a work request (as `ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Virtual address inside a registered region.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the region.
    pub lkey: u32,
}

/// Send work request opcode with its opcode-specific fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// Two-sided send, consumes a receive WQE at the target.
    Send,
    /// Send carrying 32 bits of immediate data.
    SendWithImm(u32),
    /// One-sided write into remote registered memory.
    RdmaWrite {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// One-sided read from remote registered memory into the local SGEs.
    RdmaRead {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
}

/// UD destination of a send work request.
#[derive(Debug, Clone, Copy)]
pub struct UdDest<'a> {
    /// Address handle of the destination port.
    pub ah: &'a crate::Ah,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
}

/// A send work request (as `ibv_send_wr`, one at a time).
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Local buffers (gather for sends/writes, scatter for reads).
    pub sges: &'a [Sge],
    /// Generate a completion on success (errors always complete).
    pub signaled: bool,
    /// Copy the data at post time (the buffers may be reused at once; `lkey` unchecked).
    pub inline: bool,
    /// Destination for UD QPs; must be `None` for RC.
    pub ud: Option<UdDest<'a>>,
}

impl<'a> SendWr<'a> {
    /// A signalled SEND of `sges`.
    pub fn send(wr_id: u64, sges: &'a [Sge]) -> Self {
        Self {
            wr_id,
            op: SendOp::Send,
            sges,
            signaled: true,
            inline: false,
            ud: None,
        }
    }
}

/// A receive work request (as `ibv_recv_wr`).
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Buffers to scatter the incoming message into.
    pub sges: &'a [Sge],
}

/// Completion status (the `ibv_wc_status` values a BTL must tell apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// Success.
    Success,
    /// Incoming message longer than the receive buffers.
    LocalLengthError,
    /// Local protection error (bad lkey or bounds).
    LocalProtectionError,
    /// The WR was flushed because the QP is in the error state.
    WrFlushError,
    /// Remote access error (bad rkey, bounds or access rights).
    RemoteAccessError,
    /// Remote invalid request (e.g. message too long for the remote receive buffers).
    RemoteInvalidRequest,
    /// Receiver-not-ready retries exhausted.
    RnrRetryExceeded,
    /// Transport retries exhausted (peer unreachable or gone).
    RetryExceeded,
    /// Local QP operation error (e.g. UD message above the MTU).
    LocalQpOperationError,
    /// Any other error reported by the provider (raw vendor status).
    Other(u32),
}

/// Opcode of a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND (with or without immediate) finished.
    Send,
    /// An RDMA WRITE finished.
    RdmaWrite,
    /// An RDMA READ finished (data is in the local buffers).
    RdmaRead,
    /// A receive WQE consumed.
    Recv,
}

/// A work completion (as `ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    /// The WR's identifier.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Received bytes (receives). For UD this includes the 40-byte GRH the provider writes in
    /// front of the payload ([`crate::UD_GRH_LEN`]), as on a real HCA.
    pub byte_len: u32,
    /// Immediate data, if the sender supplied some.
    pub imm: Option<u32>,
    /// Local QP number the completion belongs to.
    pub qp_num: u32,
    /// Source QP number (UD receives).
    pub src_qp: u32,
}

impl Wc {
    /// An all-zero completion, for sizing poll buffers.
    pub const EMPTY: Wc = Wc {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: 0,
        imm: None,
        qp_num: 0,
        src_qp: 0,
    };

    /// True when the status is [`WcStatus::Success`].
    pub fn is_ok(&self) -> bool {
        self.status == WcStatus::Success
    }
}

/// Asynchronous events (as `ibv_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// An SRQ's WQE count fell below its armed limit (the limit is now disarmed).
    SrqLimitReached {
        /// SRQ number.
        srq: u32,
    },
    /// A QP entered the error state because of a transport failure.
    QpFatal {
        /// QP number.
        qpn: u32,
    },
    /// A completion queue overflowed; completions were lost.
    CqError {
        /// CQ number.
        cq: u32,
    },
    /// The port became active.
    PortActive,
    /// The port went down.
    PortError,
    /// Another event reported by the provider (raw `ibv_event_type`).
    Other(u32),
}
