//! The BTL (byte transfer layer) framework: moving tagged byte fragments to one peer over one
//! network, plus optional one-sided RDMA (put/get).
//!
//! # Writing a BTL
//! A BTL component ([`BtlComponent`]) registers its MCA parameters, then at [`BtlComponent::init`]
//! creates zero or more [`Btl`] modules (one per device/port/network it drives) and publishes its
//! business card with [`InitContext::modex_put`]. After the job-wide fence the framework calls
//! [`Btl::add_procs`] with every peer; the BTL reads the peers' cards and says which it can reach.
//! The BML (see [`crate::bml`]) then chooses, per peer, which BTLs carry which traffic using the
//! [`BtlAttributes`] (exclusivity, latency, bandwidth, flags).
//!
//! Sends are *copy-or-refuse*: [`Btl::send`] either takes the fragment (copies it into its own
//! buffer, or into the wire) and returns `Ok`, or refuses with [`SendError::WouldBlock`] having
//! taken nothing, so back-pressure never loses data (crossbeam's `try_send` discipline). Receives
//! are delivered during [`Btl::progress`] to the [`BtlEvents`] sink, with the 8-bit tag the
//! sender used; the framework's [`TagDispatcher`] routes them to the callback registered for that
//! tag. A BTL never interprets the bytes of a fragment: headers belong to the PML.
//!
//! Threading: a module is driven by one thread at a time (`&mut self`); it may run helper
//! threads of its own, but events are only delivered from `progress`.

use std::fmt;

use bitflags::bitflags;
use thiserror::Error;

use crate::base::Component;
use crate::buffer::UserBuf;
use crate::init::InitContext;
pub use crate::modex::ModexRead;
use crate::rank::{ProcInfo, Rank};
pub use crate::rcache::Registration;

/// The 8-bit tag that selects the receive callback for a fragment.
pub type BtlTag = u8;

/// Well-known tag ranges. A PML owns one range so that two PMLs could never confuse their
/// headers; btl-internal control traffic uses the last range and is never delivered upward.
pub mod tags {
    use super::BtlTag;
    /// First tag owned by pml-ob1.
    pub const PML_OB1_BASE: BtlTag = 0x10;
    /// First tag owned by pml-dr.
    pub const PML_DR_BASE: BtlTag = 0x20;
    /// First tag free for third-party PMLs and tests.
    pub const USER_BASE: BtlTag = 0x40;
    /// First tag reserved for a BTL's own control traffic (never delivered to [`super::BtlEvents`]).
    pub const BTL_INTERNAL_BASE: BtlTag = 0xF0;
}

bitflags! {
    /// Capabilities a BTL advertises. Names follow Open MPI's `MCA_BTL_FLAGS_*`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct BtlFlags: u32 {
        /// Can send tagged fragments (every BTL must).
        const SEND = 1 << 0;
        /// Can write into a peer's registered memory (RDMA write).
        const PUT = 1 << 1;
        /// Can read from a peer's registered memory (RDMA read, or single-copy such as CMA).
        const GET = 1 << 2;
        /// Can send straight from user memory without a bounce copy (needs completion events).
        const SEND_INPLACE = 1 << 3;
        /// Delivery is not guaranteed: the PML must acknowledge (e.g. UD).
        const NEED_ACK = 1 << 4;
        /// Data may be corrupted past the transport's own integrity check: the PML must checksum.
        const NEED_CSUM = 1 << 5;
    }
}

/// Exclusivity levels: for a given peer, only the BTLs with the highest exclusivity among those
/// that reach it are used (self beats shm beats the networks).
pub mod exclusivity {
    /// A rank talking to itself.
    pub const SELF: u32 = 0x0001_0000;
    /// Processes of one node.
    pub const SHARED_MEMORY: u32 = 0x0000_8000;
    /// Host-bypass networks (RC, UD).
    pub const HIGH_SPEED_NETWORK: u32 = 0x0000_0400;
    /// Anything else (sockets).
    pub const DEFAULT: u32 = 0x0000_0100;
}

/// What a BTL module offers; the PML and the BML decide protocols and scheduling from this.
/// Sizes are in bytes and include the PML header of a fragment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BtlAttributes {
    /// Largest fragment (header + payload) sent eagerly, before any rendezvous.
    pub eager_limit: usize,
    /// Payload bytes carried by the rendezvous request itself.
    pub rndv_eager_limit: usize,
    /// Largest fragment [`Btl::send`] accepts.
    pub max_send_size: usize,
    /// Preferred size (header included) of the fragments that carry a rendezvous message by
    /// send (ob1's FRAGs); the PML uses at most [`BtlAttributes::max_send_size`]. Smaller
    /// fragments let the receiver start copying out sooner where the transport pipelines.
    pub pipeline_frag_size: usize,
    /// Bytes of a large message sent by copy before switching to RDMA, when RDMA is offered.
    pub rdma_pipeline_send_length: usize,
    /// Largest single put/get.
    pub rdma_pipeline_frag_size: usize,
    /// Messages below this size never use the RDMA pipeline.
    pub min_rdma_pipeline_size: usize,
    /// See [`exclusivity`].
    pub exclusivity: u32,
    /// Estimated one-way latency in nanoseconds (lower is preferred for eager traffic).
    pub latency_ns: u32,
    /// Estimated bandwidth in Mbit/s (large messages are split in proportion to it).
    pub bandwidth_mbps: u32,
    /// Capabilities.
    pub flags: BtlFlags,
}

impl Default for BtlAttributes {
    fn default() -> Self {
        Self {
            eager_limit: 4096,
            rndv_eager_limit: 4096,
            max_send_size: 64 * 1024,
            pipeline_frag_size: usize::MAX,
            rdma_pipeline_send_length: 0,
            rdma_pipeline_frag_size: usize::MAX,
            min_rdma_pipeline_size: 0,
            exclusivity: exclusivity::DEFAULT,
            latency_ns: 10_000,
            bandwidth_mbps: 10_000,
            flags: BtlFlags::SEND,
        }
    }
}

/// The communication pattern a send belongs to, passed down so that multi-rail and multi-QP
/// schedulers can apply policies that depend on it (e.g. EPC: stripe blocking and collective
/// traffic, round-robin non-blocking traffic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CommPattern {
    /// A blocking point-to-point call (send/recv/ssend).
    #[default]
    Blocking,
    /// A non-blocking call (isend/irecv), likely one of several in flight.
    NonBlocking,
    /// Traffic issued on behalf of a collective operation.
    Collective,
}

/// Per-send scheduling hint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SendHint {
    /// Which kind of call produced this fragment.
    pub pattern: CommPattern,
    /// Total length of the message the fragment belongs to (for striping thresholds).
    pub message_len: usize,
}

/// Why a send, put or get was not accepted.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SendError {
    /// Resources are exhausted right now; nothing was taken. Call `progress` and retry.
    #[error("resources temporarily exhausted, retry after progress")]
    WouldBlock,
    /// The fragment exceeds [`BtlAttributes::max_send_size`].
    #[error("fragment of {len} bytes exceeds this BTL's max_send_size of {max} bytes")]
    TooLarge {
        /// Offered length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// This BTL does not reach the peer (it was not reported reachable in `add_procs`).
    #[error("peer rank {0} is not reachable through this BTL")]
    Unreachable(Rank),
    /// The path to the peer failed; the PML may fail over to another BTL.
    #[error("path to rank {peer} failed: {reason}")]
    PeerFailed {
        /// Peer.
        peer: Rank,
        /// Human-readable cause.
        reason: String,
    },
    /// The operation is not offered by this BTL (e.g. get without [`BtlFlags::GET`]).
    #[error("operation not supported by this BTL: {0}")]
    Unsupported(&'static str),
}

/// Errors of BTL setup and memory registration.
#[derive(Debug, Error)]
pub enum BtlError {
    /// A system call or device operation failed.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A peer's business card could not be used.
    #[error("bad business card from rank {rank}: {reason}")]
    BadCard {
        /// Peer.
        rank: Rank,
        /// What was wrong.
        reason: String,
    },
    /// Anything else, described.
    #[error("{0}")]
    Other(String),
}

/// Access rights of a memory registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MemAccess {
    /// Peers may read it (target of a get).
    pub remote_read: bool,
    /// Peers may write it (target of a put).
    pub remote_write: bool,
}

/// Memory on a peer, as described by the peer's [`Registration::remote_key`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteSegment {
    /// Address in the peer's address space.
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
    /// The peer's `remote_key`.
    pub remote_key: Vec<u8>,
}

/// Opaque identifier the PML attaches to a put/get or an in-place send, echoed on completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CompletionToken(pub u64);

/// Where the PML wants the rest of a fragment that is still arriving (see
/// [`BtlEvents::recv_begin`]).
#[derive(Clone, Copy, Debug)]
pub struct Placement {
    /// Bytes `head.len()..` of the fragment go here, as many as fit; the rest is dropped.
    pub dst: UserBuf,
    /// Echoed by [`BtlEvents::recv_placed`].
    pub token: CompletionToken,
}

/// The sink of everything a BTL reports during [`Btl::progress`].
pub trait BtlEvents {
    /// A fragment arrived from `peer` with `tag`; `data` is only valid during the call.
    fn recv(&mut self, peer: Rank, tag: BtlTag, data: &[u8]);
    /// A fragment of `len` bytes from `peer` is arriving and only its first bytes, `head`
    /// (at least 64, or all of them), are there yet: a BTL that can write the rest straight
    /// into place as it arrives offers it here, before [`BtlEvents::recv`]. The PML either
    /// takes the fragment now, handling `head` as it would the start of the fragment in
    /// `recv`, and returns where the remaining bytes go: the BTL then copies them there as
    /// they arrive and reports [`BtlEvents::recv_placed`] exactly once, instead of `recv`
    /// (so that the receiver's copy overlaps the sender's writing); or it returns `None`
    /// (the default) and receives the whole fragment with `recv` later.
    fn recv_begin(
        &mut self,
        _peer: Rank,
        _tag: BtlTag,
        _head: &[u8],
        _len: usize,
    ) -> Option<Placement> {
        None
    }
    /// The fragment taken by [`BtlEvents::recv_begin`] with `token` is in place: `Ok(n)` with
    /// the `n` bytes written to the placement's `dst`, or the error that ended it (the BTL
    /// writes nothing more either way).
    fn recv_placed(&mut self, _token: CompletionToken, _result: Result<usize, SendError>) {}
    /// A put or get finished (successfully or not).
    fn rdma_complete(&mut self, token: CompletionToken, result: Result<(), SendError>);
    /// An in-place send (see [`Btl::send_inplace`]) left the user buffer.
    fn send_complete(&mut self, _token: CompletionToken) {}
    /// The path to `peer` through this BTL is broken (peer died, QP in error...).
    fn peer_failed(&mut self, peer: Rank, reason: &str);
    /// Whether to go on delivering fragments in this progress call. A BTL that delivers
    /// several per call asks after each one; the default is yes. A PML answers no once the
    /// operation it is blocked on has completed, so that the BTL returns at once instead of
    /// looking for more (on shared memory, looking at an empty ring reads a line the peer
    /// wrote last: a cache miss between a message's arrival and its completion).
    fn wants_more(&self) -> bool {
        true
    }
}

/// One BTL module: one network (device, port) driven by one component.
pub trait Btl: Send {
    /// The component name (`"shm"`, `"ud"`...).
    fn component_name(&self) -> &str;

    /// The module's attributes. A module may narrow them in `add_procs` (e.g. drop GET when a
    /// peer forbids single-copy access); they are fixed from then on, which is when the BML reads them.
    fn attributes(&self) -> &BtlAttributes;

    /// Learn the job's processes (with their business cards via `modex`) and return, for each
    /// entry of `procs`, whether this module can reach it.
    fn add_procs(
        &mut self,
        procs: &[ProcInfo],
        modex: &dyn ModexRead,
    ) -> Result<Vec<bool>, BtlError>;

    /// The BML chose this module for the traffic (or as a failover path) of `peers`, after
    /// every module answered `add_procs`. A module that reaches peers it will never carry
    /// traffic for (a network BTL next to shm on one node) need not pay for resources sized
    /// for traffic: it may keep them small at open and grow them here (as Open MPI's BTLs
    /// allocate per-transport receive resources lazily). Not called for modules that serve
    /// no peer: the BML finalizes and drops those. Default: nothing.
    fn peers_routed(&mut self, _peers: &[Rank]) {}

    /// Forget peers (they left or were declared dead). Pending traffic to them is dropped.
    fn del_procs(&mut self, _ranks: &[Rank]) {}

    /// Send one fragment: `header` then `payload`, delivered to the peer's callback for `tag`
    /// as one contiguous buffer. `header.len() + payload.len()` must not exceed
    /// [`BtlAttributes::max_send_size`]. Returns when the bytes were taken (copied or queued).
    fn send(
        &mut self,
        peer: Rank,
        tag: BtlTag,
        header: &[u8],
        payload: &[u8],
        hint: SendHint,
    ) -> Result<(), SendError>;

    /// Send without copying `payload` (only with [`BtlFlags::SEND_INPLACE`]): the BTL reads
    /// `payload` until it reports [`BtlEvents::send_complete`] with `token`.
    fn send_inplace(
        &mut self,
        _peer: Rank,
        _tag: BtlTag,
        _header: &[u8],
        _payload: UserBuf,
        _hint: SendHint,
        _token: CompletionToken,
    ) -> Result<(), SendError> {
        Err(SendError::Unsupported("send_inplace"))
    }

    /// Register `buf` for RDMA with `access` (only with PUT or GET).
    fn register_mem(
        &mut self,
        _buf: UserBuf,
        _access: MemAccess,
    ) -> Result<Registration, BtlError> {
        Err(BtlError::Other(format!(
            "btl {} does not register memory",
            self.component_name()
        )))
    }

    /// Release a registration made by [`Btl::register_mem`].
    fn deregister_mem(&mut self, _registration: &Registration) {}

    /// Write `local` into the peer's `remote` memory (only with [`BtlFlags::PUT`]).
    /// Completion is reported by [`BtlEvents::rdma_complete`] with `token`.
    fn put(
        &mut self,
        _peer: Rank,
        _local: UserBuf,
        _remote: &RemoteSegment,
        _token: CompletionToken,
    ) -> Result<(), SendError> {
        Err(SendError::Unsupported("put"))
    }

    /// Read the peer's `remote` memory into `local` (only with [`BtlFlags::GET`]).
    /// Completion is reported by [`BtlEvents::rdma_complete`] with `token`.
    fn get(
        &mut self,
        _peer: Rank,
        _local: UserBuf,
        _remote: &RemoteSegment,
        _token: CompletionToken,
    ) -> Result<(), SendError> {
        Err(SendError::Unsupported("get"))
    }

    /// Make progress: move queued data, poll completions, deliver received fragments.
    /// Returns the number of events delivered (0 means idle, so callers may back off).
    fn progress(&mut self, events: &mut dyn BtlEvents) -> usize;

    /// Memory this module holds, for the profile.
    fn memory_usage(&self) -> MemoryUsage {
        MemoryUsage::default()
    }

    /// Counters of this module for the profile, as `(name, value)` pairs.
    fn counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }

    /// Release everything. No call follows.
    fn finalize(&mut self) {}
}

/// Bytes held by a component instance, for the per-component memory profile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Bytes currently held.
    pub current: usize,
    /// Highest value of `current` seen.
    pub peak: usize,
}

/// A BTL component: the factory of BTL modules.
pub trait BtlComponent: Component {
    /// Open the component and create its modules. A component that cannot run here (no device,
    /// disabled by parameter) returns `Ok(vec![])` and says why with `tracing::info!`; an error
    /// is for a component that should work but failed.
    fn init(&self, ctx: &mut InitContext<'_>) -> Result<Vec<Box<dyn Btl>>, BtlError>;
}

/// Callback for fragments of one tag.
pub type RecvCallback<'a> = Box<dyn FnMut(Rank, &[u8]) + 'a>;
/// Callback for RDMA completions.
pub type RdmaCallback<'a> = Box<dyn FnMut(CompletionToken, Result<(), SendError>) + 'a>;
/// Callback for path failures.
pub type FailureCallback<'a> = Box<dyn FnMut(Rank, &str) + 'a>;

/// Routes received fragments to a callback registered per tag (Open MPI's
/// `mca_btl_base_active_message_trigger`), for PMLs that prefer callbacks to one event sink.
pub struct TagDispatcher<'a> {
    handlers: Vec<Option<RecvCallback<'a>>>,
    rdma: Option<RdmaCallback<'a>>,
    failures: Option<FailureCallback<'a>>,
    /// Fragments whose tag had no callback (counted, dropped).
    pub unhandled: u64,
}

impl<'a> Default for TagDispatcher<'a> {
    fn default() -> Self {
        Self {
            handlers: (0..256).map(|_| None).collect(),
            rdma: None,
            failures: None,
            unhandled: 0,
        }
    }
}

impl<'a> TagDispatcher<'a> {
    /// Register the callback for `tag`, replacing any previous one.
    pub fn register(&mut self, tag: BtlTag, callback: impl FnMut(Rank, &[u8]) + 'a) {
        self.handlers[usize::from(tag)] = Some(Box::new(callback));
    }
    /// Register the callback for RDMA completions.
    pub fn on_rdma(&mut self, callback: impl FnMut(CompletionToken, Result<(), SendError>) + 'a) {
        self.rdma = Some(Box::new(callback));
    }
    /// Register the callback for path failures.
    pub fn on_failure(&mut self, callback: impl FnMut(Rank, &str) + 'a) {
        self.failures = Some(Box::new(callback));
    }
}

impl fmt::Debug for TagDispatcher<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tags: Vec<usize> = (0..256).filter(|t| self.handlers[*t].is_some()).collect();
        f.debug_struct("TagDispatcher")
            .field("tags", &tags)
            .field("unhandled", &self.unhandled)
            .finish()
    }
}

impl BtlEvents for TagDispatcher<'_> {
    fn recv(&mut self, peer: Rank, tag: BtlTag, data: &[u8]) {
        match &mut self.handlers[usize::from(tag)] {
            Some(cb) => cb(peer, data),
            None => {
                self.unhandled += 1;
                tracing::warn!(
                    peer,
                    tag,
                    len = data.len(),
                    "fragment with unregistered tag dropped"
                );
            }
        }
    }
    fn rdma_complete(&mut self, token: CompletionToken, result: Result<(), SendError>) {
        if let Some(cb) = &mut self.rdma {
            cb(token, result);
        }
    }
    fn peer_failed(&mut self, peer: Rank, reason: &str) {
        if let Some(cb) = &mut self.failures {
            cb(peer, reason);
        }
    }
}
