//! Partitioned communication (MPI-4): `MPI_Psend_init`, `MPI_Precv_init`, `MPI_Pready`,
//! `MPI_Pready_range`, `MPI_Pready_list`, `MPI_Parrived`.
//!
//! Over point-to-point: a partitioned send sends its whole buffer as one message once every
//! partition was marked ready (on the communicator's collective context, with a tag naming
//! the pair of requests MPI matches: the k-th `MPI_Psend_init` to a peer with a tag and the
//! k-th `MPI_Precv_init` from it with that tag; see [`raw::partitioned_channel`]); the receive posts its receive when started, and a partition has arrived
//! once the message has. The requests are persistent: `MPI_Start`/`MPI_Startall` start a
//! round, the completion calls end it, `MPI_Request_free` frees them.
//!
//! A datatype whose data is not one run (a vector, a struct with holes) goes through a
//! staging buffer of the round: the send packs the whole buffer when its last partition is
//! marked ready (MPI forbids writing a ready partition until the round completes), the
//! receive unpacks the message into the program's layout before any partition counts as
//! arrived.
#![allow(non_snake_case)]

use std::collections::HashMap;
use std::ffi::{c_int, c_void};

use rmca::raw;

use super::p2p::count_c;
use super::types::Ty;
use super::{call, dest, put, recv_tag, send_tag, source};
use crate::abi::*;
use crate::state::{
    self, Confined, MpiError, MpiResult, Persistent, ReqEntry, ReqState, SendKind, State,
};
use rmca_mpi_export::export;

/// The peer of a partitioned request's placeholder [`Persistent`] entry: no rank or
/// selector is this value, so `MPI_Start` knows to look here (see [`is_partitioned`]).
pub(crate) const PARTITIONED: c_int = c_int::MIN;

/// The arguments of a partitioned request, kept for each `MPI_Start`.
#[derive(Clone, Debug)]
struct Plan {
    send: bool,
    /// Where the data starts: the buffer plus its one run's offset, or the buffer itself
    /// when [`Plan::staged`].
    buf: usize,
    /// Bytes of the message (the packed length).
    len: usize,
    /// The datatype and count of a buffer that is not one run, packed or unpacked through a
    /// staging buffer each round; `None` for one run.
    staged: Option<StagedLayout>,
    partitions: usize,
    /// Destination or source rank (`MPI_PROC_NULL` allowed, `MPI_ANY_SOURCE` for a receive).
    peer: c_int,
    tag: c_int,
    /// The tag of its transfers on the collective context (see
    /// [`raw::partitioned_channel`]); unused with `MPI_PROC_NULL`.
    channel: c_int,
}

/// A non-contiguous buffer's datatype and count (the request keeps its own reference to the
/// type: MPI lets the program free it once the request exists).
#[derive(Clone)]
struct StagedLayout {
    ty: Ty,
    count: usize,
}

impl std::fmt::Debug for StagedLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "StagedLayout {{ count: {}, size: {} }}",
            self.count,
            self.ty.size()
        )
    }
}

/// The partitioned requests, by request handle (process-wide: see [`Confined`]).
static PLANS: Confined<HashMap<Handle, Plan>> = Confined::new("partitioned requests");

/// Whether the persistent arguments `p` are a partitioned request's placeholder.
pub(crate) fn is_partitioned(p: &Persistent) -> bool {
    matches!(
        p,
        Persistent::Send {
            dest: PARTITIONED,
            ..
        } | Persistent::Recv {
            source: PARTITIONED,
            ..
        }
    )
}

/// Forget request `h` (freed; by the call freeing it, which owns the library: the table
/// cannot refuse).
pub(crate) fn forget(h: Handle) {
    let _ = PLANS.with(|p| p.remove(&h));
}

/// A round of a partitioned send: waiting for its partitions, then the send.
#[derive(Debug)]
struct PSend {
    ready: Vec<bool>,
    missing: usize,
    plan: Plan,
    comm: rmca::Communicator,
    /// The send, once every partition is ready (`None` inside for `MPI_PROC_NULL`).
    started: Option<Option<raw::RawRequest>>,
    /// The packed data a non-contiguous buffer's send reads from (it lives until the round
    /// completes: the send refers to it).
    packed: Vec<u8>,
}

impl PSend {
    /// Mark partition `k` ready; send when it was the last.
    fn ready(&mut self, k: usize) -> MpiResult<()> {
        let Some(r) = self.ready.get_mut(k) else {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!(
                    "partition {k} is invalid: the request has partitions 0..{}",
                    self.ready.len().saturating_sub(1)
                ),
            ));
        };
        if *r {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("partition {k} was marked ready already in this round"),
            ));
        }
        *r = true;
        self.missing -= 1;
        if self.missing == 0 {
            let to = dest(self.plan.peer, self.comm.size())?;
            let mut from = self.plan.buf as *const u8;
            if let (Some(st), Some(_)) = (&self.plan.staged, to) {
                // SAFETY: MPI_Psend_init's contract: the buffer holds the request's elements,
                // every partition of which is ready (left unwritten until the round ends).
                self.packed = unsafe { st.ty.pack(from.cast(), st.count)? };
                from = self.packed.as_ptr();
            }
            self.started = Some(match to {
                None => None,
                // SAFETY: MPI_Psend_init's contract: the buffer (or the packed copy this
                // round owns) is left unwritten until the round completed, which is when
                // this send is.
                Some(to) => Some(unsafe {
                    raw::isend_partitioned(&self.comm, from, self.plan.len, to, self.plan.channel)?
                }),
            });
        }
        Ok(())
    }
}

impl raw::CustomOp for PSend {
    fn poll(&mut self) -> Option<rmca::Result<rmca::Status>> {
        match self.started.take()? {
            None => Some(Ok(rmca::Status::PROC_NULL)),
            Some(r) => match r.test() {
                raw::Polled::Done(res) => Some(with_tag(res, self.plan.tag)),
                raw::Polled::Pending(r) => {
                    self.started = Some(Some(r));
                    None
                }
            },
        }
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// The outcome of a transfer on a partitioned channel, with the request's own tag.
fn with_tag(res: rmca::Result<rmca::Status>, tag: c_int) -> rmca::Result<rmca::Status> {
    match res {
        Ok(st) if st.is_proc_null() => Ok(st),
        Ok(st) => Ok(rmca::Status { tag, ..st }),
        Err(rmca::Error::Status { error, status }) => Err(rmca::Error::Status {
            error,
            status: rmca::Status { tag, ..status },
        }),
        Err(e) => Err(e),
    }
}

/// A receive in flight: the request, the request's own tag, and for a non-contiguous buffer
/// the staging buffer it lands in, the layout and the program's buffer to unpack it into.
#[derive(Debug)]
struct Receiving {
    request: raw::RawRequest,
    tag: c_int,
    staging: Option<(Vec<u8>, StagedLayout, usize)>,
}

/// A round of a partitioned receive: its receive, then its outcome (with the request's tag).
#[derive(Debug)]
enum PRecv {
    Running(Receiving),
    Done(rmca::Result<rmca::Status>),
    Spent,
}

impl PRecv {
    /// Test the receive; whether the data is there (in the program's layout).
    fn arrived(&mut self) -> bool {
        if let PRecv::Running(..) = self {
            let PRecv::Running(mut rx) = std::mem::replace(self, PRecv::Spent) else {
                unreachable!("matched above")
            };
            *self = match rx.request.test() {
                raw::Polled::Pending(r) => {
                    rx.request = r;
                    PRecv::Running(rx)
                }
                raw::Polled::Done(res) => {
                    if let (Ok(st), Some((data, layout, buf))) = (&res, &rx.staging) {
                        let n = st.bytes.min(data.len());
                        // SAFETY: MPI_Precv_init's contract: the buffer holds the request's
                        // elements and is the library's until the round completes.
                        unsafe {
                            layout
                                .ty
                                .unpack(&data[..n], *buf as *mut c_void, layout.count)
                        };
                    }
                    PRecv::Done(with_tag(res, rx.tag))
                }
            };
        }
        !matches!(self, PRecv::Running(..))
    }
}

impl raw::CustomOp for PRecv {
    fn poll(&mut self) -> Option<rmca::Result<rmca::Status>> {
        if !self.arrived() {
            return None;
        }
        match std::mem::replace(self, PRecv::Spent) {
            PRecv::Done(res) => Some(res),
            _ => Some(Err(rmca::Error::InvalidArgument(
                "internal: a partitioned receive completed twice".into(),
            ))),
        }
    }

    fn cancel(&mut self) -> rmca::Result<bool> {
        match self {
            PRecv::Running(rx) => rx.request.cancel(),
            _ => Ok(false),
        }
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// Start a round of partitioned request `h` (`MPI_Start`): its state.
pub(crate) fn start(c: &rmca::Communicator, h: Handle) -> MpiResult<ReqState> {
    let plan = PLANS.with(|p| p.get(&h).cloned())?.ok_or_else(|| {
        MpiError::new(
            MPI_ERR_REQUEST,
            "internal: a partitioned request without its arguments",
        )
    })?;
    let op: Box<dyn raw::CustomOp> = if plan.send {
        Box::new(PSend {
            ready: vec![false; plan.partitions],
            missing: plan.partitions,
            plan,
            comm: c.clone(),
            started: None,
            packed: Vec::new(),
        })
    } else {
        match source(plan.peer, c.size())? {
            rmca::Src::Rank(from) => {
                let mut staging = plan
                    .staged
                    .map(|layout| (vec![0u8; plan.len], layout, plan.buf));
                let into = match &mut staging {
                    Some((data, ..)) => data.as_mut_ptr(),
                    None => plan.buf as *mut u8,
                };
                // SAFETY: MPI_Precv_init's contract: the buffer is the library's from the
                // start until the round completed, which is when this receive is; a staging
                // buffer is this round's (its heap bytes do not move with the round).
                let request =
                    unsafe { raw::irecv_partitioned(c, into, plan.len, from, plan.channel)? };
                Box::new(PRecv::Running(Receiving {
                    request,
                    tag: plan.tag,
                    staging,
                }))
            }
            _ => Box::new(PRecv::Done(Ok(rmca::Status::PROC_NULL))),
        }
    };
    Ok(ReqState::Active(raw::custom(c, op)))
}

/// `MPI_Psend_init`/`MPI_Precv_init`'s body.
#[allow(clippy::too_many_arguments)]
fn init(
    send: bool,
    buf: *const c_void,
    partitions: c_int,
    count: MPI_Count,
    datatype: Handle,
    peer: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> MpiResult<()> {
    if request.is_null() {
        return Err(super::null_argument("request"));
    }
    let c = super::communicator(comm)?;
    let parts = usize::try_from(partitions)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| {
            MpiError::new(
                MPI_ERR_ARG,
                format!(
                    "partitions {partitions} is invalid: a partitioned request has at least one"
                ),
            )
        })?;
    let n = count_c(count, "partition")?;
    let total = n.checked_mul(parts).ok_or_else(|| {
        MpiError::new(
            MPI_ERR_COUNT,
            format!("{parts} partitions of {n} elements overflow"),
        )
    })?;
    let ty = Ty::for_use(datatype)?;
    let len = ty.packed_len(total)?;
    if len > 0 && buf.is_null() {
        return Err(MpiError::new(MPI_ERR_BUFFER, "the buffer is NULL"));
    }
    // One run: the message is the program's bytes from its offset. Otherwise the rounds
    // pack or unpack through a staging buffer.
    let (start, staged) = match ty.run(total) {
        Some((off, _)) if len > 0 => ((buf as *const u8).wrapping_offset(off) as usize, None),
        Some(_) => (buf as usize, None),
        None => (buf as usize, Some(StagedLayout { ty, count: total })),
    };
    if send {
        dest(peer, c.size())?;
        send_tag(tag)?;
    } else {
        source(peer, c.size())?;
        if tag == MPI_ANY_TAG {
            return Err(MpiError::new(
                MPI_ERR_TAG,
                "MPI_ANY_TAG is not allowed for a partitioned receive",
            ));
        }
        recv_tag(tag)?;
        if peer == MPI_ANY_SOURCE {
            return Err(MpiError::new(
                MPI_ERR_RANK,
                "MPI_ANY_SOURCE is not allowed for a partitioned receive",
            ));
        }
    }
    let channel = match usize::try_from(peer) {
        Ok(p) => raw::partitioned_channel(&c, p, tag, send)?,
        Err(_) => 0,
    };
    let plan = Plan {
        send,
        buf: start,
        len,
        staged,
        partitions: parts,
        peer,
        tag,
        channel,
    };
    // The entry is persistent (completion leaves it inactive); its arguments are here.
    let placeholder = if send {
        Persistent::Send {
            buf: plan.buf,
            len,
            dest: PARTITIONED,
            tag,
            kind: SendKind::Standard,
        }
    } else {
        Persistent::Recv {
            buf: plan.buf,
            len,
            source: PARTITIONED,
            tag,
        }
    };
    let h = state::with(|s| {
        s.add_request(ReqEntry {
            comm,
            state: ReqState::Inactive,
            staged: false,
            persistent: Some(Box::new(placeholder)),
        })
    })?;
    PLANS.with(|p| p.insert(h, plan))?;
    // SAFETY: the caller's request handle (non-null, checked).
    unsafe { put(request, h, "request") }
}

/// `MPI_Psend_init`: a partitioned send of `partitions` × `count` elements.
#[export]
pub unsafe extern "C" fn MPI_Psend_init(
    buf: *const c_void,
    partitions: c_int,
    count: MPI_Count,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    _info: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Psend_init", comm, || {
        init(
            true, buf, partitions, count, datatype, dest, tag, comm, request,
        )
    })
}

/// `MPI_Precv_init`: a partitioned receive of `partitions` × `count` elements.
#[export]
pub unsafe extern "C" fn MPI_Precv_init(
    buf: *mut c_void,
    partitions: c_int,
    count: MPI_Count,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    _info: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Precv_init", comm, || {
        init(
            false, buf, partitions, count, datatype, source, tag, comm, request,
        )
    })
}

/// Run `f` on the running round of partitioned request `h`'s operation; `MPI_ERR_REQUEST`
/// if `h` is not an active partitioned request of the kind `T`.
fn with_round<T: 'static, R>(
    s: &mut State,
    h: Handle,
    what: &str,
    f: impl FnOnce(&mut T) -> MpiResult<R>,
) -> MpiResult<R> {
    let entry = s.request(h)?;
    let comm = entry.comm;
    let op = match &mut entry.state {
        ReqState::Active(r) => r
            .custom_mut()
            .and_then(|op| op.as_any_mut().downcast_mut::<T>()),
        _ => None,
    };
    match op {
        Some(op) => f(op).map_err(|e| e.on(comm)),
        None => Err(MpiError::new(
            MPI_ERR_REQUEST,
            format!(
                "{what} needs a started partitioned {} request",
                if what == "MPI_Parrived" {
                    "receive"
                } else {
                    "send"
                }
            ),
        )
        .on(comm)),
    }
}

/// Mark each partition of `parts` ready on send request `h`.
fn ready(h: Handle, parts: impl Iterator<Item = c_int>, what: &str) -> MpiResult<()> {
    state::with(|s| {
        with_round::<PSend, ()>(s, h, what, |op| {
            for k in parts {
                let k = usize::try_from(k).map_err(|_| {
                    MpiError::new(
                        MPI_ERR_ARG,
                        format!("partition {k} is invalid: partitions are >= 0"),
                    )
                })?;
                op.ready(k)?;
            }
            Ok(())
        })
    })
}

/// `MPI_Pready`: partition `partition` of the send buffer may be sent.
#[export]
pub unsafe extern "C" fn MPI_Pready(partition: c_int, request: Handle) -> c_int {
    call("MPI_Pready", MPI_COMM_WORLD, || {
        ready(request, std::iter::once(partition), "MPI_Pready")
    })
}

/// `MPI_Pready_range`: partitions `low..=high` may be sent.
#[export]
pub unsafe extern "C" fn MPI_Pready_range(
    partition_low: c_int,
    partition_high: c_int,
    request: Handle,
) -> c_int {
    call("MPI_Pready_range", MPI_COMM_WORLD, || {
        if partition_low > partition_high {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("partition range {partition_low}..={partition_high} is empty"),
            ));
        }
        ready(request, partition_low..=partition_high, "MPI_Pready_range")
    })
}

/// `MPI_Pready_list`: the `length` partitions listed may be sent.
#[export]
pub unsafe extern "C" fn MPI_Pready_list(
    length: c_int,
    array_of_partitions: *const c_int,
    request: Handle,
) -> c_int {
    call("MPI_Pready_list", MPI_COMM_WORLD, || {
        let n = super::count(length, "length")?;
        if n > 0 && array_of_partitions.is_null() {
            return Err(super::null_argument("array_of_partitions"));
        }
        // SAFETY: MPI_Pready_list's contract: the array holds `length` ints.
        let list: Vec<c_int> = (0..n)
            .map(|i| unsafe { array_of_partitions.add(i).read() })
            .collect();
        ready(request, list.into_iter(), "MPI_Pready_list")
    })
}

/// `MPI_Parrived`: whether partition `partition` of a started partitioned receive has
/// arrived (rmca: once the whole message has).
#[export]
pub unsafe extern "C" fn MPI_Parrived(
    request: Handle,
    partition: c_int,
    flag: *mut c_int,
) -> c_int {
    call("MPI_Parrived", MPI_COMM_WORLD, || {
        if flag.is_null() {
            return Err(super::null_argument("flag"));
        }
        let plan = PLANS.with(|p| p.get(&request).map(|p| (p.send, p.partitions)))?;
        if let Some((_, partitions)) = plan.filter(|&(send, _)| !send) {
            if !matches!(usize::try_from(partition), Ok(k) if k < partitions) {
                return Err(MpiError::new(
                    MPI_ERR_ARG,
                    format!(
                        "partition {partition} is invalid: the request has partitions 0..{}",
                        partitions - 1
                    ),
                ));
            }
        }
        let arrived = state::with(|s| {
            // A round already completed (inactive): its data is there.
            if plan.is_some_and(|(send, _)| !send)
                && matches!(
                    s.request(request)?.state,
                    ReqState::Inactive | ReqState::Done(_)
                )
            {
                return Ok(true);
            }
            with_round::<PRecv, bool>(s, request, "MPI_Parrived", |op| Ok(op.arrived()))
        })?;
        // SAFETY: the caller's int (non-null, checked).
        unsafe { put(flag, c_int::from(arrived), "flag") }
    })
}
