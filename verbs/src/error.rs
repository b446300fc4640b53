//! Typed errors of the verbs API.

use crate::types::{QpState, QpType};

/// Errors returned by verbs calls.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A parameter is out of range; says which and what is valid.
    #[error("invalid {what}: {value} (valid: {valid})")]
    InvalidParam {
        /// Parameter name.
        what: &'static str,
        /// Value given.
        value: String,
        /// Valid values or range.
        valid: &'static str,
    },
    /// No device of that name exists for the provider.
    #[error("no verbs device {0:?}")]
    NoDevice(String),
    /// The requested provider is not compiled in or not usable here.
    #[error("provider {0} unavailable: {1}")]
    ProviderUnavailable(&'static str, String),
    /// Objects from different contexts/providers were mixed.
    #[error("objects belong to different contexts or providers")]
    ContextMismatch,
    /// The send or receive queue is full: the WR was refused, not queued.
    #[error("queue full: {depth} work requests outstanding")]
    QueueFull {
        /// The queue's depth.
        depth: u32,
    },
    /// A work request is malformed for this QP (wrong opcode for the type, too many SGEs, ...).
    #[error("invalid work request: {0}")]
    InvalidWr(&'static str),
    /// The QP state does not allow the operation or transition.
    #[error("invalid QP transition {from:?} -> {to:?}")]
    InvalidTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// Operation not valid for this QP type.
    #[error("operation not supported on {0:?} QPs")]
    WrongQpType(QpType),
    /// The peer address blob is malformed or from another provider/job.
    #[error("bad peer address: {0}")]
    BadAddress(&'static str),
    /// Access outside a memory region.
    #[error("out of bounds: offset {offset} + len {len} > region {region}")]
    OutOfBounds {
        /// Offset asked.
        offset: usize,
        /// Length asked.
        len: usize,
        /// Region size.
        region: usize,
    },
    /// A polled access ([`crate::Mr::read_polled`], [`crate::Mr::write_polled`]) longer than
    /// the one word that can be read or written atomically.
    #[error("a polled access is at most 8 bytes, not {len}")]
    PolledTooLong {
        /// Length asked.
        len: usize,
    },
    /// The completion queue overflowed: completions were lost and the CQ is unusable.
    #[error("completion queue {cq} overflowed")]
    CqOverflow {
        /// CQ number.
        cq: u32,
    },
    /// The soft provider found no interface to take its UD MTU from.
    #[error("soft verbs: no interface for address {addr}: {reason}")]
    NoInterface {
        /// The bound address.
        addr: std::net::IpAddr,
        /// Why.
        reason: &'static str,
    },
    /// The interface under the soft provider's bound address cannot carry the smallest UD
    /// datagram unfragmented.
    #[error(
        "soft verbs: interface {interface} of address {addr} has an MTU of {if_mtu} bytes, which \
         leaves {limit} bytes of UD payload after the IP, UDP and soft UD headers; at least \
         {min} are needed (raise the interface MTU by {short} bytes or bind another address)"
    )]
    LinkMtuTooSmall {
        /// The interface.
        interface: String,
        /// The bound address.
        addr: std::net::IpAddr,
        /// Its MTU.
        if_mtu: u32,
        /// UD payload it leaves.
        limit: u32,
        /// Smallest UD MTU accepted.
        min: u32,
        /// How much the interface MTU falls short.
        short: u32,
    },
    /// Operating-system error.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// Cause.
        source: std::io::Error,
    },
    /// The rdma provider reported an errno.
    #[error("{op} failed: errno {errno} ({msg})")]
    Verbs {
        /// The ibverbs call.
        op: &'static str,
        /// errno.
        errno: i32,
        /// strerror.
        msg: String,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, source: std::io::Error) -> Self {
        Error::Io { op, source }
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;
