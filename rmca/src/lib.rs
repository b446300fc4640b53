//! rmca: a Rust messaging runtime built on a Modular Component Architecture. One import for
//! applications.
//!
//! ```no_run
//! let universe = rmca::init().expect("rmca init");
//! let world = universe.world();
//! let (rank, size) = (world.rank(), world.size());
//! if rank == 0 {
//!     world.send(&[1.0f64, 2.0], 1 % size, 7).unwrap();
//! } else if rank == 1 {
//!     let mut buf = [0.0f64; 2];
//!     let status = world.recv(&mut buf, rmca::ANY_SOURCE, 7).unwrap();
//!     assert_eq!((status.source, status.count::<f64>()), (0, 2));
//! }
//! ```
//!
//! Shaped after rsmpi: a [`Universe`] owns the runtime (finalized on drop), a [`Communicator`]
//! sends and receives typed buffers of plain-old-data elements ([`bytemuck::Pod`]), and
//! non-blocking calls return a [`Request`] that lives in a [`scope`]: its buffer stays borrowed
//! until the scope ends, and the scope waits for every request left outstanding (dropping an
//! unfinished request also waits for it), so a buffer can never be freed under a transfer,
//! not even by `std::mem::forget`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod bsend;
pub mod coll;
mod comm;
mod context_id;
pub mod datatype;
mod group;
mod idup;
mod intercomm;
mod mprobe;
pub mod raw;
mod request;
mod split;
pub mod thread;
pub mod threaded;
pub mod tool;
pub mod topo;
pub mod window;

use std::cell::RefCell;
use std::io::IsTerminal;
use std::rc::Rc;

/// The `bytemuck` crate rmca builds on, for `#[bytemuck(crate = "rmca::bytemuck")]` (see [`datatype`]).
pub use bytemuck;
pub use bytemuck::Pod;
pub use bytemuck::Zeroable;
pub use comm::{Communicator, Status};
pub use context_id::AgreementError;
pub use datatype::{Datatype, DatatypeError, TypedRequest};
pub use group::{Comparison, Group};
pub use idup::{DupResult, PendingDup};
pub use intercomm::InterRoot;
pub use mprobe::Message;
pub use request::{scope, Persistent, Request, Scope};
pub use rmca_framework as framework;
use rmca_framework::pml::{PmlError, RecvArgs, RequestId, SendArgs, SendStart, StatusError};
pub use rmca_runtime::profile::{JobProfile, MemorySummary, MemoryUse, RankProfile};
use rmca_runtime::{InitError, Runtime};
pub use split::SplitColor;
use thiserror::Error;
pub use thread::{SendUniverse, ThreadLevel, THREAD_LEVEL};
pub use window::{Epoch, RawWindow, Window};

// Built-in components: referenced here so that their crates (and their inventory entries)
// are linked into every program that uses rmca.
use rmca_btl_rc as _;
use rmca_btl_self as _;
use rmca_btl_shm as _;
use rmca_btl_ud as _;
use rmca_coll_base as _;
use rmca_coll_hier as _;
use rmca_coll_sm as _;
use rmca_osc_am as _;
use rmca_osc_rdma as _;
use rmca_osc_sm as _;
use rmca_pml_dr as _;
use rmca_pml_ob1 as _;

/// Errors of the rmca API.
#[derive(Debug, Error)]
pub enum Error {
    /// The process could not join its job (boxed: it is large and never on a message path).
    #[error(transparent)]
    Init(Box<InitError>),
    /// A PML call was rejected.
    #[error(transparent)]
    Pml(#[from] PmlError),
    /// A request completed with an error (truncation, peer failure, cancel); the status is
    /// attached.
    #[error("{error} (source {}, tag {})", status.source, status.tag)]
    Status {
        /// What went wrong.
        error: StatusError,
        /// The request's status.
        status: Status,
    },
    /// A rank argument is outside the communicator.
    #[error("rank {rank} is not in this communicator (size {size})")]
    BadRank {
        /// The rank.
        rank: usize,
        /// Communicator size.
        size: usize,
    },
    /// A negative rank that is not [`ANY_SOURCE`] or [`PROC_NULL`].
    #[error("rank {0} is invalid: ranks are non-negative (use rmca::ANY_SOURCE to receive from any rank, rmca::PROC_NULL for no rank)")]
    NegativeRank(i32),
    /// A tag argument is invalid.
    #[error("tag {0} is invalid: tags are non-negative (use rmca::ANY_TAG to receive any)")]
    BadTag(i32),
    /// Finalize was called while requests of a [`Scope`] were outstanding: it completes when
    /// the last of them does (at the latest when their scope ends), since the PML may still
    /// write into their buffers.
    #[error("finalize deferred: {outstanding} non-blocking request(s) still outstanding; rmca finalizes when they complete (at the latest when their scope ends)")]
    FinalizeDeferred {
        /// Requests outstanding when finalize was called.
        outstanding: usize,
    },
    /// [`Universe::into_send`] was refused: communicators, requests or scopes derived from the
    /// universe still refer to it, and would stay behind on this thread.
    #[error("the universe cannot move to another thread: {handles} communicator(s), request(s) or scope(s) derived from it still exist on this one (drop them first)")]
    StillShared {
        /// Handles other than the universe's own.
        handles: usize,
    },
    /// A derived datatype could not be built or does not fit its buffer.
    #[error(transparent)]
    Datatype(#[from] DatatypeError),
    /// A one-sided operation or synchronization was refused (see [`window`]).
    #[error(transparent)]
    Rma(#[from] rmca_framework::osc::OscError),
    /// The runtime was finalized.
    #[error("rmca was finalized")]
    Finalized,
    /// Another argument is invalid.
    #[error("{0}")]
    InvalidArgument(String),
    /// A communicator constructor failed to agree on a context id, or a peer sent it a
    /// malformed count, length or rank.
    #[error(transparent)]
    Agreement(#[from] context_id::AgreementError),
    /// The operation is not defined on this kind of communicator (an intra-communicator
    /// operation on an intercommunicator, or the converse).
    #[error("{0}")]
    CommKind(String),
    /// A custom operation ([`raw::custom`]) failed with an error code of its own (in the C
    /// library, the code a generalized request's callback returned, reported as it is).
    #[error("{message}")]
    Code {
        /// The code.
        code: i32,
        /// What failed.
        message: String,
    },
    /// A buffered send found no room in the attached buffer (nothing was sent).
    #[error("bsend of {needed} bytes: the attached buffer ({attached} bytes) has no free part that large ({in_use} bytes still being sent); attach a larger one (Universe::buffer_attach)")]
    BsendBufferFull {
        /// Bytes of the message.
        needed: usize,
        /// Bytes attached.
        attached: usize,
        /// Bytes of messages still being sent from the buffer.
        in_use: usize,
    },
}

impl From<InitError> for Error {
    fn from(e: InitError) -> Self {
        Error::Init(Box::new(e))
    }
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Receive from any source.
pub const ANY_SOURCE: Src = Src::Any;
/// Receive with any tag.
pub const ANY_TAG: i32 = -1;

/// The rank that does not exist: a send to it or a receive from it completes at once, moving
/// nothing (a receive's status is [`Status::PROC_NULL`]). Handy at the edges of a
/// non-periodic halo exchange.
pub const PROC_NULL: ProcNull = ProcNull;

/// The type of [`PROC_NULL`], accepted wherever a source or a destination is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcNull;

/// The source selector of a receive or probe: a rank of the communicator, [`ANY_SOURCE`] or
/// [`PROC_NULL`]. Integers convert into it; a negative integer is kept as
/// [`Src::Negative`] and refused by every call with [`Error::NegativeRank`] (unlike the
/// C interface, no integer stands for "any source": use the constant).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    /// This communicator rank.
    Rank(usize),
    /// Any rank.
    Any,
    /// No rank ([`PROC_NULL`]).
    Null,
    /// A negative integer given as a rank: an error wherever it is used.
    Negative(i32),
}

/// The destination of a send: a rank of the communicator or [`PROC_NULL`]. Integers convert
/// into it; a negative integer is refused with [`Error::NegativeRank`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// This communicator rank.
    Rank(usize),
    /// No rank ([`PROC_NULL`]): the send completes at once.
    Null,
    /// A negative integer given as a rank: an error wherever it is used.
    Negative(i32),
}

impl From<usize> for Src {
    fn from(r: usize) -> Self {
        Src::Rank(r)
    }
}

impl From<i32> for Src {
    fn from(r: i32) -> Self {
        usize::try_from(r).map_or(Src::Negative(r), Src::Rank)
    }
}

impl From<u32> for Src {
    fn from(r: u32) -> Self {
        Src::Rank(r as usize)
    }
}

impl From<ProcNull> for Src {
    fn from(_: ProcNull) -> Self {
        Src::Null
    }
}

impl From<usize> for Dest {
    fn from(r: usize) -> Self {
        Dest::Rank(r)
    }
}

impl From<i32> for Dest {
    fn from(r: i32) -> Self {
        usize::try_from(r).map_or(Dest::Negative(r), Dest::Rank)
    }
}

impl From<u32> for Dest {
    fn from(r: u32) -> Self {
        Dest::Rank(r as usize)
    }
}

impl From<ProcNull> for Dest {
    fn from(_: ProcNull) -> Self {
        Dest::Null
    }
}

pub(crate) struct Shared {
    rt: RefCell<Option<Runtime>>,
    /// The ids of a [`Request::complete_all`] batch, kept between calls (no allocation per
    /// window).
    batch: std::cell::Cell<Vec<RequestId>>,
    /// Requests of every [`Scope`] still outstanding: finalizing under them would let the
    /// PML go while it may still write into their buffers.
    lent: std::cell::Cell<usize>,
    /// Finalize was called under outstanding requests: it runs when the last completes.
    finalize_deferred: std::cell::Cell<bool>,
    /// This process's free context ids and the agreements on them in progress
    /// (`context_id`): the blocking constructors' ids, given back by their leases.
    pub(crate) context_ids: Rc<RefCell<context_id::ContextIds>>,
    /// The buffer of buffered sends, while one is attached. Declared after `rt`, so that a
    /// runtime dropped unfinalized goes before the memory its sends may point into.
    bsend: RefCell<Option<bsend::BsendPool>>,
    /// The buffers attached to single communicators (`Communicator::attach_buffer`); after
    /// `rt` for the same reason.
    comm_bsend: RefCell<bsend::CommPools>,
    /// Non-blocking collectives not waited for yet, stepped by every progress loop.
    nbc: coll::nonblocking::Active,
}

impl Shared {
    /// Run `f` on the runtime, or fail if finalized.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Runtime) -> Result<R>) -> Result<R> {
        let mut g = self.rt.borrow_mut();
        // Not `ok_or(Error::Finalized)`: that builds and drops an Error on every call.
        let Some(rt) = g.as_mut() else {
            return Err(Error::Finalized);
        };
        f(rt)
    }

    /// Progress until `id` completes (stepping non-blocking collectives meanwhile).
    #[inline]
    pub(crate) fn wait(&self, id: RequestId) -> Result<rmca_framework::pml::Status> {
        // With a wait hook (MPI_THREAD_MULTIPLE), the loop that lets other threads in.
        if !self.nbc.is_idle() || rmca_framework::progress::wait_hook_set() {
            return self.wait_progressing(id);
        }
        self.with(|rt| Ok(rt.wait(id)?))
    }

    /// Progress until every request of `ids` completed; the statuses of those that failed
    /// come back with their index in `ids`.
    pub(crate) fn wait_all(
        &self,
        ids: &[RequestId],
    ) -> Result<Vec<(usize, rmca_framework::pml::Status)>> {
        let mut failed = Vec::new();
        self.wait_all_into(ids, &mut failed)?;
        Ok(failed)
    }

    /// [`Shared::wait_all`] reporting the failures into the caller's reused buffer.
    #[inline]
    pub(crate) fn wait_all_into(
        &self,
        ids: &[RequestId],
        failed: &mut Vec<(usize, rmca_framework::pml::Status)>,
    ) -> Result<()> {
        if !self.nbc.is_idle() || rmca_framework::progress::wait_hook_set() {
            failed.extend(self.wait_all_progressing(ids)?);
            return Ok(());
        }
        self.with(|rt| Ok(rt.wait_all(ids, failed)?))
    }

    /// [`Shared::wait_all_into`] reporting every status (failed or not) with its index in
    /// `ids`, in order.
    #[inline]
    pub(crate) fn wait_all_statuses_into(
        &self,
        ids: &[RequestId],
        statuses: &mut Vec<(usize, rmca_framework::pml::Status)>,
    ) -> Result<()> {
        if !self.nbc.is_idle() || rmca_framework::progress::wait_hook_set() {
            // Each in turn, stepping the collectives (as `wait_all_progressing`).
            let mut first_err = None;
            for (i, &id) in ids.iter().enumerate() {
                match self.wait(id) {
                    Ok(st) => statuses.push((i, st)),
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
            return first_err.map_or(Ok(()), Err);
        }
        self.with(|rt| Ok(rt.wait_all_statuses(ids, statuses)?))
    }

    /// The batch buffer of [`Request::complete_all`] (empty), to be given back with
    /// [`Shared::give_batch`].
    pub(crate) fn take_batch(&self) -> Vec<RequestId> {
        let mut v = self.batch.take();
        v.clear();
        v
    }

    /// One more request of a scope lent its buffer to the PML.
    #[inline]
    pub(crate) fn lend(&self) {
        self.lent.set(self.lent.get() + 1);
    }

    /// `n` lent requests completed. True when that was the last of them and a finalize was
    /// deferred for them: the caller then runs [`Shared::run_deferred_finalize`] (outside any
    /// borrow of its own state: finalize runs a barrier).
    #[inline]
    pub(crate) fn unlend(&self, n: usize) -> bool {
        let left = self.lent.get() - n;
        self.lent.set(left);
        left == 0 && self.finalize_deferred.get()
    }

    /// Run the finalize deferred while requests were outstanding (see [`Shared::unlend`]).
    #[cold]
    pub(crate) fn run_deferred_finalize(shared: &Rc<Shared>) {
        if shared.lent.get() == 0 && shared.finalize_deferred.take() {
            if let Err(e) = Shared::finalize(shared) {
                tracing::error!("rmca deferred finalize failed: {e}");
            }
        }
    }

    /// Finalize the runtime (after a barrier of the world), or defer it while requests of a
    /// scope are outstanding.
    fn finalize(shared: &Rc<Shared>) -> Result<Option<JobProfile>> {
        let (rank, size) = match shared.rt.borrow().as_ref() {
            None => return Ok(None),
            Some(rt) => (rt.job.rank, rt.job.size),
        };
        // The PML may still write into the buffers of outstanding requests: it must outlive
        // them. Their communicators keep the runtime up meanwhile.
        let outstanding = shared.lent.get();
        if outstanding > 0 {
            shared.finalize_deferred.set(true);
            return Err(Error::FinalizeDeferred { outstanding });
        }
        // Buffered sends complete before finalize (as MPI_Finalize requires).
        if let Some(pool) = shared.bsend.borrow_mut().as_mut() {
            shared.with(|rt| pool.drain(rt))?;
        }
        shared.with(|rt| shared.comm_bsend.borrow_mut().drain_all(rt))?;
        // Quiesce: nobody tears down receive resources while a peer may still send to it.
        Communicator::world(shared.clone(), rank, size).barrier()?;
        let rt = shared.rt.borrow_mut().take().ok_or(Error::Finalized)?;
        Ok(rt.finalize()?)
    }

    /// Keep `v` for the next batch.
    pub(crate) fn give_batch(&self, v: Vec<RequestId>) {
        self.batch.set(v);
    }

    /// Buffered send of `msg` (see [`Communicator::bsend`]): `start` is given the copy.
    pub(crate) fn bsend(
        &self,
        msg: &[u8],
        start: impl FnOnce(&mut Runtime, rmca_framework::buffer::UserBuf) -> Result<SendStart>,
    ) -> Result<()> {
        let mut pool = self.bsend.borrow_mut();
        let Some(pool) = pool.as_mut() else {
            return Err(Error::InvalidArgument(
                "bsend: no buffer is attached (Universe::buffer_attach)".into(),
            ));
        };
        self.with(|rt| pool.send(rt, msg, start))
    }

    /// Start a send (the PML's fast path for eager messages).
    #[inline]
    pub(crate) fn start_send(&self, args: SendArgs) -> Result<SendStart> {
        self.with(|rt| Ok(rt.pml.start_send(args)?))
    }

    /// Post a receive.
    #[inline]
    pub(crate) fn irecv(&self, args: RecvArgs) -> Result<RequestId> {
        self.with(|rt| Ok(rt.pml.irecv(args)?))
    }
}

/// The running job as seen by this process. Dropping it finalizes rmca (after a barrier).
pub struct Universe {
    shared: Rc<Shared>,
    world: Communicator,
}

impl std::fmt::Debug for Universe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Universe")
            .field("world", &self.world)
            .finish()
    }
}

/// Join the job started by `rmca-run` (or Hydra, or Slurm; or run as a singleton).
///
/// Unless the application installed a `tracing` subscriber already, one is installed that
/// writes to stderr with the filter in `RMCA_LOG` (default `warn`, e.g. `RMCA_LOG=debug` or
/// `RMCA_LOG=rmca_btl_shm=trace`). It is installed before plugins load, so that they log too.
/// Parameters set through [`tool::set_param_before_init`] apply as this process's own
/// command-line settings.
pub fn init() -> Result<Universe> {
    install_default_logging();
    let rt = Runtime::init(tool::params_set_before_init())?;
    Ok(Universe::from_runtime(rt))
}

impl Universe {
    fn from_runtime(rt: Runtime) -> Self {
        let size = rt.job.size;
        let rank = rt.job.rank;
        let shared = Rc::new(Shared {
            rt: RefCell::new(Some(rt)),
            batch: Default::default(),
            lent: Default::default(),
            finalize_deferred: Default::default(),
            context_ids: Default::default(),
            bsend: Default::default(),
            comm_bsend: Default::default(),
            nbc: Default::default(),
        });
        let world = Communicator::world(shared.clone(), rank, size);
        Self { shared, world }
    }

    /// The communicator of every process of the job.
    pub fn world(&self) -> Communicator {
        self.world.clone()
    }

    /// The name of the node this process runs on (as the launcher placed it) and the node index.
    pub fn node(&self) -> (String, u32) {
        self.shared
            .with(|rt| {
                let idx = rt.job.node_of[rt.job.rank as usize];
                Ok((rt.job.node_name(rt.job.rank).to_owned(), idx))
            })
            .unwrap_or_else(|_| (hostname(), 0))
    }

    /// Names of the PML and BTLs in use.
    pub fn components(&self) -> (String, Vec<String>) {
        self.shared
            .with(|rt| Ok((rt.pml.component_name().to_owned(), rt.btl_names.clone())))
            .unwrap_or_default()
    }

    /// Time this process spent joining the job.
    pub fn init_time(&self) -> std::time::Duration {
        self.shared
            .with(|rt| Ok(rt.init_time()))
            .unwrap_or_default()
    }

    /// Abort every process of the job with `code`.
    pub fn abort(&self, code: i32, msg: &str) -> ! {
        let g = self.shared.rt.borrow();
        match g.as_ref() {
            Some(rt) => rt.abort(code, msg),
            None => std::process::exit(code),
        }
    }

    /// Attach `buffer` for buffered sends ([`Communicator::bsend`]; `MPI_Buffer_attach`):
    /// each message in flight takes its length in it. One buffer at a time: an error if one
    /// is attached already.
    pub fn buffer_attach(&self, buffer: Vec<u8>) -> Result<()> {
        let mut slot = self.shared.bsend.borrow_mut();
        if let Some(pool) = slot.as_ref() {
            return Err(Error::InvalidArgument(format!(
                "buffer_attach: a buffer of {} bytes is attached already (detach it first)",
                pool.capacity()
            )));
        }
        *slot = Some(bsend::BsendPool::new(buffer));
        Ok(())
    }

    /// Wait until every buffered send has completed and give the attached buffer back
    /// (`MPI_Buffer_detach`). An error if none is attached.
    pub fn buffer_detach(&self) -> Result<Vec<u8>> {
        let mut slot = self.shared.bsend.borrow_mut();
        let Some(pool) = slot.as_mut() else {
            return Err(Error::InvalidArgument(
                "buffer_detach: no buffer is attached".into(),
            ));
        };
        self.shared.with(|rt| pool.drain(rt))?;
        Ok(slot.take().expect("checked above").into_buffer())
    }

    /// Finalize explicitly, returning the merged profile on rank 0 when `profile` is on.
    pub fn finalize(self) -> Result<Option<JobProfile>> {
        self.finalize_inner()
    }

    fn finalize_inner(&self) -> Result<Option<JobProfile>> {
        Shared::finalize(&self.shared)
    }
}

impl Drop for Universe {
    fn drop(&mut self) {
        match self.finalize_inner() {
            Ok(_) | Err(Error::FinalizeDeferred { .. }) => {}
            Err(e) => tracing::error!("rmca finalize failed: {e}"),
        }
    }
}

fn install_default_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RMCA_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Fails only when the application already chose a subscriber, which then stays in charge.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: logs redirected to a file stay plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// This node's host name (what `MPI_Get_processor_name` and `MPI_INFO_ENV`'s `host` give),
/// known before and after initialization.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// Make sure every built-in component crate is linked into the program (their `inventory`
/// registrations are only seen if the crate is linked). Tools call it before opening the
/// registry; applications get it through [`init`].
pub fn link_builtin_components() {
    // Referencing the crates above with `use ... as _` is what links them; this function gives
    // tools a call that documents the intent at their call site.
}
