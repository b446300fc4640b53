//! The PML (point-to-point messaging layer) framework: MPI matching, ordering and protocols.
//!
//! One PML runs per job (every rank must select the same one). The facade (`rmca` crate) turns
//! communicator-level calls into [`Pml`] calls on world ranks and context ids, and completes
//! requests by polling [`Pml::test`] while driving [`Pml::progress`].
//!
//! Semantics a PML must provide (MPI-3.1 §3.5): messages between one pair of processes on one
//! context are non-overtaking; a receive with [`Source::Any`] / [`TagSel::Any`] matches the
//! earliest arrived message that fits; a message longer than the receive buffer completes the
//! receive with [`StatusError::Truncated`] and writes nothing past the buffer.

use thiserror::Error;

use crate::bml::Bml;
use crate::btl::CommPattern;
use crate::buffer::UserBuf;
use crate::init::InitContext;
use crate::rank::Rank;

/// Identifies a communicator's matching space (MPI's context id).
pub type ContextId = u32;

/// A message tag chosen by the application (non-negative).
pub type Tag = i32;

/// Source selector of a receive or probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Only messages from this world rank.
    Rank(Rank),
    /// Messages from any process (`MPI_ANY_SOURCE`).
    Any,
}

/// Tag selector of a receive or probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TagSel {
    /// Only messages with this tag.
    Tag(Tag),
    /// Any tag (`MPI_ANY_TAG`).
    Any,
}

/// MPI send modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SendMode {
    /// Completes when the buffer may be reused (eager or rendezvous, the PML decides).
    #[default]
    Standard,
    /// Completes only once the matching receive has started (`MPI_Ssend`).
    Synchronous,
}

/// Arguments of a send.
#[derive(Clone, Copy, Debug)]
pub struct SendArgs {
    /// The bytes to send; valid until the request completes.
    pub buf: UserBuf,
    /// Destination world rank.
    pub dest: Rank,
    /// Message tag.
    pub tag: Tag,
    /// Communicator context.
    pub context: ContextId,
    /// Send mode.
    pub mode: SendMode,
    /// Scheduling hint passed down to the BTLs.
    pub pattern: CommPattern,
}

/// Arguments of a receive.
#[derive(Clone, Copy, Debug)]
pub struct RecvArgs {
    /// Where to write the message; valid until the request completes.
    pub buf: UserBuf,
    /// Which sender.
    pub source: Source,
    /// Which tag.
    pub tag: TagSel,
    /// Communicator context.
    pub context: ContextId,
    /// Scheduling hint (for the rendezvous traffic the receive triggers).
    pub pattern: CommPattern,
}

/// Handle of an outstanding request inside a PML.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// A message taken out of matching by a matched probe ([`Pml::improbe`]), to be received
/// by [`Pml::imrecv`] (MPI's `MPI_Message`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub u64);

/// Why a completed request did not fully succeed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum StatusError {
    /// The message was longer than the receive buffer; only `received` bytes were written.
    #[error("message truncated: {message_len} bytes sent, receive buffer holds {received}")]
    Truncated {
        /// Length of the sent message.
        message_len: usize,
        /// Bytes written to the receive buffer.
        received: usize,
    },
    /// The peer died or every path to it failed.
    #[error("peer rank {peer} unreachable: {reason}")]
    PeerFailed {
        /// The peer.
        peer: Rank,
        /// Why.
        reason: String,
    },
    /// The request was cancelled.
    #[error("request cancelled")]
    Cancelled,
    /// The message arrived intact (its checksums verified on arrival) but the receive buffer
    /// does not hold what was copied into it, even after a second copy: this process's
    /// memory is corrupt (or something else writes the buffer). Not the peer's fault: the
    /// peer stays reachable and a retransmission would not help.
    #[error(
        "message from rank {peer}: end-to-end checksum of {fragments} fragment(s) still wrong \
         in the receive buffer after copying them twice from the verified staging buffer \
         (memory corruption in this process, or the buffer written during the receive)"
    )]
    Corrupted {
        /// The sender of the message.
        peer: Rank,
        /// How many fragments stayed wrong.
        fragments: usize,
    },
}

/// The outcome of a completed request (or of a probe).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// World rank of the sender (for receives and probes) or destination (for sends).
    pub source: Rank,
    /// Tag of the message.
    pub tag: Tag,
    /// Bytes received (receives), or the message length (probes, sends).
    pub len: usize,
    /// Set when the request did not fully succeed (boxed: a status is copied on every
    /// completion, an error is rare).
    pub error: Option<Box<StatusError>>,
}

impl Status {
    /// A successful status.
    pub fn ok(source: Rank, tag: Tag, len: usize) -> Self {
        Self {
            source,
            tag,
            len,
            error: None,
        }
    }

    /// A status carrying `error`.
    pub fn failed(source: Rank, tag: Tag, len: usize, error: StatusError) -> Self {
        Self {
            source,
            tag,
            len,
            error: Some(Box::new(error)),
        }
    }

    /// The error, if any.
    pub fn error(&self) -> Option<&StatusError> {
        self.error.as_deref()
    }
}

/// How a send started with [`Pml::start_send`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendStart {
    /// It completed at once and successfully (typically: a BTL took the whole eager message);
    /// the PML kept no request for it. Its status is the send's own destination, tag and
    /// length, which the caller has, so none is returned: the value stays a word or two that
    /// the caller reads back without waiting for the PML's stores (on the eager path those
    /// queue behind the fragment's stores into shared memory).
    Done,
    /// It is in progress: wait for (or test) this request.
    Pending(RequestId),
}

/// Errors returned by PML calls themselves (as opposed to request statuses).
#[derive(Debug, Error)]
pub enum PmlError {
    /// The destination rank does not exist.
    #[error("rank {rank} is out of range (job size {size})")]
    BadRank {
        /// Offending rank.
        rank: Rank,
        /// Job size.
        size: u32,
    },
    /// The tag is negative or above the PML's limit.
    #[error("tag {0} is invalid (tags must be in 0..={max})", max = Tag::MAX)]
    BadTag(Tag),
    /// No BTL reaches this peer.
    #[error("{0}")]
    Unreachable(String),
    /// A request id that is not (or no longer) outstanding.
    #[error("unknown request {0:?}")]
    UnknownRequest(RequestId),
    /// The PML could not initialise.
    #[error("pml init failed: {0}")]
    Init(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// The remote keys of memory registered for one-sided RDMA ([`Pml::rdma_register`]): for
/// each RDMA BTL that registered it, the BTL's component name and its
/// [`Registration::remote_key`](crate::btl::Registration). A window's members exchange them
/// (osc-rdma), and an origin hands the target's keys back to [`Pml::rdma_put`] /
/// [`Pml::rdma_get`], which pick the key of the BTL that reaches the target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RdmaKeys {
    /// `(BTL component name, remote key)`, in the registering process's BTL order.
    pub keys: Vec<(String, Vec<u8>)>,
}

impl RdmaKeys {
    /// Serialized: a count, then per key its name and key bytes, each with a `u16` length.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = crate::wire::Writer::new(&mut out);
        w.u16(self.keys.len().min(usize::from(u16::MAX)) as u16);
        for (name, key) in self.keys.iter().take(usize::from(u16::MAX)) {
            w.u16(name.len() as u16).bytes(name.as_bytes());
            w.u16(key.len() as u16).bytes(key);
        }
        out
    }

    /// The keys of [`RdmaKeys::encode`]'s bytes; `None` when they do not decode.
    pub fn decode(b: &[u8]) -> Option<RdmaKeys> {
        let mut r = crate::wire::Reader::new(b);
        let n = r.u16().ok()?;
        let mut keys = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            let l = usize::from(r.u16().ok()?);
            let name = std::str::from_utf8(r.bytes(l).ok()?).ok()?.to_owned();
            let l = usize::from(r.u16().ok()?);
            keys.push((name, r.bytes(l).ok()?.to_vec()));
        }
        (r.remaining() == 0).then_some(RdmaKeys { keys })
    }
}

/// Identifies a one-sided RDMA transfer of a PML ([`Pml::rdma_put`], [`Pml::rdma_get`]).
pub type RdmaToken = u64;

/// One PML instance.
pub trait Pml: Send {
    /// The component name (`"ob1"`, `"dr"`).
    fn component_name(&self) -> &str;

    /// Start a send; the request completes per [`SendMode`].
    fn isend(&mut self, args: SendArgs) -> Result<RequestId, PmlError>;

    /// Start a send like [`Pml::isend`], but when it completes at once and successfully say
    /// so instead of returning a request: the fast path of blocking sends and of eager
    /// non-blocking sends, with no request to allocate, test and release. The default starts
    /// a request.
    fn start_send(&mut self, args: SendArgs) -> Result<SendStart, PmlError> {
        self.isend(args).map(SendStart::Pending)
    }

    /// Post a receive.
    fn irecv(&mut self, args: RecvArgs) -> Result<RequestId, PmlError>;

    /// Is a matching message available? Does not receive it.
    fn iprobe(
        &mut self,
        context: ContextId,
        source: Source,
        tag: TagSel,
    ) -> Result<Option<Status>, PmlError>;

    /// A matched probe (`MPI_Improbe`): the earliest arrived message that fits is removed
    /// from matching, so that no receive or probe matches it afterwards, and kept aside
    /// under the returned id (with its status: source, tag, length) until
    /// [`Pml::imrecv`] receives it. A rendezvous message's data moves only then. The
    /// default supports no matched probe.
    fn improbe(
        &mut self,
        _context: ContextId,
        _source: Source,
        _tag: TagSel,
    ) -> Result<Option<(MessageId, Status)>, PmlError> {
        Err(PmlError::Other(format!(
            "pml {} does not support matched probes",
            self.component_name()
        )))
    }

    /// Receive the message `message` taken by [`Pml::improbe`] into `buf`: a receive
    /// request that completes as one of [`Pml::irecv`] matched to that message would
    /// (truncation included). The id is spent.
    fn imrecv(
        &mut self,
        message: MessageId,
        _buf: UserBuf,
        _pattern: CommPattern,
    ) -> Result<RequestId, PmlError> {
        Err(PmlError::Other(format!(
            "pml {} does not know message {message:?}",
            self.component_name()
        )))
    }

    /// Poll a request: `Some(status)` once it completed, after which the id is released.
    fn test(&mut self, request: RequestId) -> Result<Option<Status>, PmlError>;

    /// Try to cancel a request (`MPI_Cancel`). Returns true if cancelled: the request then
    /// completes at once with [`StatusError::Cancelled`] (and must still be tested). The
    /// default cancels nothing. ob1 and dr cancel a receive that has not matched a message
    /// (it leaves the posted queue; a matched one completes normally), and no send: an eager
    /// message was handed to a BTL when the send started, and a rendezvous or synchronous
    /// send has announced itself to the receiver, whose unexpected queue would have to be
    /// asked to drop it (a protocol round trip neither PML has; MPI-4 deprecates cancelling
    /// sends).
    fn cancel(&mut self, _request: RequestId) -> Result<bool, PmlError> {
        Ok(false)
    }

    /// Drive the BTLs and the protocols. Returns the number of events handled (0 = idle).
    fn progress(&mut self) -> usize;

    /// Progress until `request` completes and return its status (a blocking wait). Between
    /// passes `between` runs too (the runtime's registered progress functions; its result
    /// counts as events). One dynamic call for the whole wait: inside, [`Pml::test`] and
    /// [`Pml::progress`] are direct calls ([`spin_until_done`]). A PML overrides it to do more
    /// around the loop (ob1 tells its BTLs when the awaited request completed).
    fn wait(
        &mut self,
        request: RequestId,
        between: Option<&mut dyn FnMut() -> usize>,
    ) -> Result<Status, PmlError> {
        spin_until_done(self, request, &mut { between }, Self::test, Self::progress)
    }

    /// Progress until every request of `requests` completed and release them all
    /// (`MPI_Waitall` with `MPI_STATUSES_IGNORE`): the loop of windowed transfers, one dynamic
    /// call for the whole window. Requests that completed successfully produce nothing; the
    /// status of each one that did not (truncation, peer failure, cancel) is appended to
    /// `failed` with its index in `requests`. Every request is waited for even after a
    /// failure, so no buffer is released while a transfer still uses it; an id the PML does not
    /// know is skipped and the first such error returned at the end. The default waits for
    /// each in turn with [`Pml::wait`].
    fn wait_all(
        &mut self,
        requests: &[RequestId],
        mut between: Option<&mut dyn FnMut() -> usize>,
        failed: &mut Vec<(usize, Status)>,
    ) -> Result<(), PmlError> {
        let mut first_err = None;
        for (i, &id) in requests.iter().enumerate() {
            let between = between
                .as_mut()
                .map(|f| &mut **f as &mut dyn FnMut() -> usize);
            match self.wait(id, between) {
                Ok(st) if st.error.is_none() => {}
                Ok(st) => failed.push((i, st)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// [`Pml::wait_all`] reporting every request's status, failed or not (`MPI_Waitall` with
    /// an array of statuses, as OSU's bandwidth tests call it): each is appended to
    /// `statuses` with its index in `requests`, in order. Unknown ids are skipped (nothing is
    /// appended for them) and the first such error returned at the end. The default waits for
    /// each in turn with [`Pml::wait`].
    fn wait_all_statuses(
        &mut self,
        requests: &[RequestId],
        mut between: Option<&mut dyn FnMut() -> usize>,
        statuses: &mut Vec<(usize, Status)>,
    ) -> Result<(), PmlError> {
        let mut first_err = None;
        for (i, &id) in requests.iter().enumerate() {
            let between = between
                .as_mut()
                .map(|f| &mut **f as &mut dyn FnMut() -> usize);
            match self.wait(id, between) {
                Ok(st) => statuses.push((i, st)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Counters for the profile, as `(name, value)` pairs (PML and its BTLs).
    fn counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }

    /// For the profile: the component names of the BTLs that carry traffic to each peer (by
    /// rank), e.g. `["self"], ["shm"], ["rc"]`. Empty when the PML does not say.
    fn peer_btls(&self) -> Vec<Vec<String>> {
        Vec::new()
    }

    /// One-sided RDMA (osc-rdma): does a BTL offering both put and get (possibly two
    /// BTLs) reach world rank `peer`? The default: no PML RDMA at all (pml-dr), so osc-am
    /// serves its windows.
    fn rdma_reaches(&self, _peer: Rank) -> bool {
        false
    }

    /// Register `mem` (a window's memory) for remote put and get with every RDMA BTL that
    /// reaches one of `peers`: a handle for [`Pml::rdma_deregister`] and the keys the peers
    /// need.
    fn rdma_register(
        &mut self,
        _mem: UserBuf,
        _peers: &[Rank],
    ) -> Result<(u64, RdmaKeys), PmlError> {
        Err(PmlError::Other(format!(
            "pml {} offers no one-sided RDMA",
            self.component_name()
        )))
    }

    /// Release a registration of [`Pml::rdma_register`] (no transfer may target it any more).
    fn rdma_deregister(&mut self, _handle: u64) {}

    /// Write `local` at address `addr` of world rank `peer`, inside memory `peer` registered
    /// with `keys`. `local` stays valid until [`Pml::rdma_test`] reports the transfer done:
    /// then the bytes are in the target's memory.
    fn rdma_put(
        &mut self,
        _peer: Rank,
        _local: UserBuf,
        _keys: &RdmaKeys,
        _addr: u64,
    ) -> Result<RdmaToken, PmlError> {
        Err(PmlError::Other(format!(
            "pml {} offers no one-sided RDMA",
            self.component_name()
        )))
    }

    /// Read `local.len()` bytes at address `addr` of world rank `peer` into `local` (as
    /// [`Pml::rdma_put`] the other way).
    fn rdma_get(
        &mut self,
        _peer: Rank,
        _local: UserBuf,
        _keys: &RdmaKeys,
        _addr: u64,
    ) -> Result<RdmaToken, PmlError> {
        Err(PmlError::Other(format!(
            "pml {} offers no one-sided RDMA",
            self.component_name()
        )))
    }

    /// Has transfer `token` finished? `None`: not yet (transfers the BTLs refused for lack of
    /// resources are retried here). Once reported, the token is spent.
    fn rdma_test(&mut self, token: RdmaToken) -> Option<Result<(), PmlError>> {
        Some(Err(PmlError::Other(format!(
            "pml {}: unknown RDMA transfer {token}",
            self.component_name()
        ))))
    }

    /// Flush and release; called once, after every request completed.
    fn finalize(&mut self) -> Result<(), PmlError>;
}

/// The loop of a blocking wait: `test` the request, and after each miss run a `progress` pass
/// (and `between`), backing off when passes find nothing. [`Pml::wait`]'s default, and the core
/// of a PML's own `wait` and `wait_all` (whose `test` may return less than a [`Status`]).
#[inline]
pub fn spin_until_done<P: ?Sized, T>(
    pml: &mut P,
    request: RequestId,
    between: &mut Option<&mut dyn FnMut() -> usize>,
    test: impl Fn(&mut P, RequestId) -> Result<Option<T>, PmlError>,
    progress: impl Fn(&mut P) -> usize,
) -> Result<T, PmlError> {
    let mut backoff = crate::progress::Backoff::default();
    loop {
        if let Some(st) = test(pml, request)? {
            return Ok(st);
        }
        let mut n = progress(pml);
        if let Some(f) = between.as_mut() {
            n += f();
        }
        backoff.pass(n);
    }
}

/// A PML component.
pub trait PmlComponent: crate::base::Component {
    /// Priority of this PML given the current parameters (highest allowed wins).
    fn priority(&self, params: &crate::params::ParamStore) -> i32;

    /// Create the PML over the job's BML (the BTLs, already wired to every peer).
    fn init(&self, ctx: &mut InitContext<'_>, bml: Bml) -> Result<Box<dyn Pml>, PmlError>;
}
