//! Collective operations over point-to-point, on each communicator's collective context.
//!
//! The algorithms are components of the `coll` MCA framework ([`rmca_framework::coll`]): at
//! its first collective a communicator stacks the allowed coll components that serve it,
//! highest priority first (`--mca coll base,hier` restricts them), and each operation takes
//! the schedule of the first module that provides it. coll-hier (node-aware: within a node to
//! a leader, across nodes between leaders, back within the node) serves communicators that
//! span several nodes with several ranks on some node; coll-base (every operation, algorithm
//! by size and process count, overridable per operation with `coll_<op>_algorithm`, e.g.
//! `--mca coll_allreduce_algorithm ring`: see its crate docs for the table) serves every
//! intra-communicator and takes what the others leave. Algorithms are pure schedules
//! ([`rmca_framework::coll::schedule`]) run by one executor, and every operation uses its own
//! tag, so consecutive collectives never cross-match (per-source ordering does the rest). The
//! non-blocking forms (`ibcast`, `iallreduce`, ...) run the same schedules on the same
//! executor, stepped by the runtime's progress loop: see [`nonblocking`] for when they
//! progress and how outstanding ones are kept apart. Intercommunicator collectives are this
//! crate's own (two groups joined by their leaders), over the base algorithms.
//!
//! Reduction order (floats): binomial reduce combines ranks cyclically from the root
//! (`x[root] op x[root+1] op ...`) as a binomial tree; linear reduce combines in rank order;
//! recursive doubling combines in rank order as a balanced tree (after folding pairs
//! (2i, 2i+1) when n is not a power of two); the ring reduces chunk c in ring order starting
//! at rank c. Every algorithm gives every rank bit-identical results.
//!
//! Reduction operations are predefined [`Op`]s on [`Reducible`] numbers, [`Op::MinLoc`] and
//! [`Op::MaxLoc`] on [`Loc`] value-index pairs, or user-defined [`UserOp`]s (any [`Reduction`]).
//! A non-commutative [`UserOp`] is combined in rank order (`x0 op x1 op ... op x(n-1)`),
//! whatever the algorithm parameters say: reduce uses the linear algorithm if chosen, else a
//! binomial reduction to rank 0 then one hop to the root; allreduce never uses the ring
//! (recursive doubling instead); reduce_scatter uses reduce_scatterv; scan and exscan keep
//! rank order in both algorithms.
//!
//! In-place forms (MPI's `MPI_IN_PLACE`) are separate methods named `<op>_in_place` that take
//! one buffer, both input and output: [`Communicator::allreduce_in_place`],
//! [`Communicator::allgather_in_place`], [`Communicator::allgatherv_in_place`],
//! [`Communicator::alltoall_in_place`], [`Communicator::reduce_scatter_in_place`],
//! [`Communicator::reduce_scatter_block_in_place`], [`Communicator::scan_in_place`],
//! [`Communicator::exscan_in_place`]; and, called at the root only (the other members make
//! the ordinary call, as in MPI), [`Communicator::reduce_in_place`],
//! [`Communicator::gather_in_place`], [`Communicator::gatherv_in_place`],
//! [`Communicator::scatter_in_place`], [`Communicator::scatterv_in_place`].

mod direct;
mod erased;
mod exec;
mod in_place;
pub mod nonblocking;
mod op;
mod prefix;
mod varying;

/// The framework's schedules (where the algorithms live), under their old path here.
pub(crate) use rmca_framework::coll::schedule;

pub use op::{Loc, LocValue, Op, Reducible, Reduction, UserOp};

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

use crate::{Communicator, Error, Result, Src};
use exec::{Bufs, CommTransport, Exec, InFlight, Poll, ReduceFn};
use rmca_framework::btl::CommPattern;
use rmca_framework::coll::{CollModule, CollStack, CommShape};
use rmca_framework::pml::RequestId;
use schedule::{Comm, Schedule};

const TAG_BARRIER: i32 = 1;
const TAG_BCAST: i32 = 2;
const TAG_REDUCE: i32 = 3;
const TAG_ALLREDUCE: i32 = 4;
const TAG_GATHER: i32 = 5;
const TAG_SCATTER: i32 = 6;
const TAG_ALLGATHER: i32 = 7;
const TAG_ALLTOALL: i32 = 8;
const TAG_ALLTOALLV: i32 = 9;
// Tags from 32 on: v-forms, reduce_scatter and scans (10..=31 left free for the other
// collective operations added later, so that their tags never collide with these).
const TAG_GATHERV: i32 = 32;
const TAG_SCATTERV: i32 = 33;
const TAG_ALLGATHERV: i32 = 34;
const TAG_REDUCE_SCATTER: i32 = 35;
const TAG_SCAN: i32 = 36;
const TAG_EXSCAN: i32 = 37;
const TAG_REDUCE_SCATTER_BLOCK: i32 = 38;
/// The set-up of a direct collective module (coll-sm's segment: its name and agreements).
const TAG_SM_SETUP: i32 = 39;

/// What determines a collective's schedule on one communicator (size and rank are the
/// communicator's, the algorithm parameters are fixed for the job): the operation's tag, the
/// root, the byte length (per block where the operation has blocks), the element size, and
/// whether the reduction must keep rank order (non-commutative operations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SchedKey {
    tag: i32,
    root: usize,
    len: usize,
    elem: usize,
    ordered: bool,
}

impl SchedKey {
    fn new(tag: i32, root: usize, len: usize, elem: usize) -> Self {
        Self {
            tag,
            root,
            len,
            elem,
            ordered: false,
        }
    }

    /// The key of a schedule built for an operation that must combine in rank order.
    fn ordered(self, ordered: bool) -> Self {
        Self { ordered, ..self }
    }
}

/// Schedules kept per communicator: loops repeat a collective with the same arguments, and
/// building a schedule allocates. Bounded; the oldest entry makes room.
const SCHEDULES_KEPT: usize = 16;

/// The largest non-root `reduce` space a communicator keeps between calls ([`CollCache`]).
const REDUCE_WORK_KEPT_BYTES: usize = 64 * 1024;

/// A communicator's collective state kept between calls.
#[derive(Debug, Default)]
pub(crate) struct CollCache {
    schedules: RefCell<Vec<(SchedKey, Rc<Schedule>)>>,
    /// Scratch memory of the last collective, reused (schedules receive into it before
    /// reading it, so it needs no clearing).
    scratch: RefCell<Vec<u64>>,
    /// A non-root's partial-result space of the last `reduce`, reused (16-byte words: any
    /// element type up to that alignment; the schedule writes it before reading it).
    reduce_work: RefCell<Vec<u128>>,
    /// The in-flight list of the last blocking collective's executor, reused.
    inflight: RefCell<Vec<InFlight<RequestId>>>,
    /// Non-blocking collectives started on this communicator so far (see
    /// [`nonblocking`] for how it keeps them apart).
    pub(crate) nb_started: std::cell::Cell<u32>,
    /// Collectives that took their number at set-up (persistent ones, `idup`'s agreement).
    pub(crate) reserved_started: std::cell::Cell<u32>,
    /// The coll modules serving this communicator, selected at its first collective.
    stack: std::cell::OnceCell<CollStack>,
    /// How a blocking barrier runs, decided at the first one.
    barrier: std::cell::OnceCell<BarrierPlan>,
    /// The communicator's process topology, which the neighbourhood collectives run over:
    /// set once by the constructor that made the communicator, kept by `dup` (see
    /// [`crate::topo`]).
    pub(crate) topo: std::cell::OnceCell<Rc<crate::topo::Topology>>,
}

impl Communicator {
    /// The schedule for `key`, built by `build` unless kept from an earlier call.
    fn schedule(
        &self,
        key: SchedKey,
        build: impl FnOnce() -> Result<Schedule>,
    ) -> Result<Rc<Schedule>> {
        let cache = &self.coll_cache().schedules;
        if let Some((_, s)) = cache.borrow().iter().find(|(k, _)| *k == key) {
            return Ok(s.clone());
        }
        let s = Rc::new(build()?);
        let mut kept = cache.borrow_mut();
        if kept.len() == SCHEDULES_KEPT {
            kept.remove(0);
        }
        kept.push((key, s.clone()));
        Ok(s)
    }

    /// The coll modules of this communicator, highest priority first: selected at the first
    /// collective from the communicator's shape (the node of every member) and the job-wide
    /// parameters, so every member selects the same stack.
    pub(crate) fn coll_stack(&self) -> Result<&CollStack> {
        let cache = self.coll_cache();
        if let Some(s) = cache.stack.get() {
            return Ok(s);
        }
        let stack = self.shared().with(|rt| {
            let node_of = self
                .inner
                .group
                .iter()
                .map(|&w| rt.job.node_of[w as usize])
                .collect();
            let shape = CommShape {
                inter: self.is_inter(),
                ..CommShape::new(self.rank(), node_of)
            };
            rt.registry
                .select_coll(&rt.params, &shape)
                .map_err(|e| Error::InvalidArgument(e.to_string()))
        })?;
        tracing::debug!(size = self.size(), stack = ?stack, "coll components selected");
        Ok(cache.stack.get_or_init(|| stack))
    }

    /// The coll components serving this communicator, highest priority first (an operation
    /// goes to the first that provides it): e.g. `["hier", "base"]` on a communicator spanning
    /// nodes. Selected at the first use, locally (no message): every member selects the same.
    pub fn coll_components(&self) -> Result<Vec<&'static str>> {
        self.refuse_inter("coll_components")?;
        Ok(self.coll_stack()?.names())
    }

    /// The schedule of `op` from the first module of the stack that provides it.
    pub(crate) fn coll_provide(
        &self,
        op: &str,
        build: impl Fn(&dyn CollModule) -> Option<Schedule>,
    ) -> Result<Schedule> {
        // Intercommunicator collectives have their own schedules (see `nonblocking::inter`).
        self.refuse_inter("this collective")?;
        let stack = self.coll_stack()?;
        stack.first(build).map(|(_, s)| s).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{op}: no coll component of this communicator provides it (its components: {}); allow 'base' in the 'coll' selector",
                stack.names().join(",")
            ))
        })
    }

    fn check_root(&self, root: usize) -> Result<()> {
        if root < self.size() {
            Ok(())
        } else {
            Err(Error::BadRank {
                rank: root,
                size: self.size(),
            })
        }
    }

    fn run_schedule(
        &self,
        s: &Schedule,
        tag: i32,
        send: &[u8],
        work: &mut [u8],
        reduce: Option<ReduceFn<'_>>,
    ) -> Result<()> {
        self.refuse_inter("this collective")?;
        // Taken out for the run (no borrow is held while messages are exchanged).
        let cache = self.coll_cache();
        let mut scratch = cache.scratch.take();
        let words = s.tmp_len.div_ceil(8);
        if scratch.len() < words {
            scratch.resize(words, 0);
        }
        let tmp = &mut bytemuck::cast_slice_mut(scratch.as_mut_slice())[..s.tmp_len];
        // SAFETY: the executor runs to its end below (`block`), waiting for every transfer it
        // posted even after an error, before the borrows of `send`, `work` and `tmp` end.
        #[allow(unsafe_code)]
        let bufs = unsafe { Bufs::lend(send, work, tmp) };
        // The blocking collective is the non-blocking engine run to its end.
        let mut exec = Exec::new(s, cache.inflight.take());
        let r = match exec.advance(&mut CommTransport { comm: self, tag }, &bufs, reduce, true) {
            Poll::Done(r) => r,
            Poll::Pending { .. } => Err(Error::InvalidArgument(
                "internal: a blocking collective stopped before its end".into(),
            )),
        };
        *cache.inflight.borrow_mut() = exec.into_inflight();
        *cache.scratch.borrow_mut() = scratch;
        r
    }

    /// Block until every member called `barrier`.
    pub fn barrier(&self) -> Result<()> {
        if self.is_inter() {
            return self.inter_barrier();
        }
        if let Some(r) = self.coll_direct(|d, env| d.barrier(env)) {
            return r;
        }
        let plan = match self.coll_cache().barrier.get() {
            Some(p) => p,
            None => {
                let s = self.coll_provide("barrier", |m| m.barrier())?;
                let plan = BarrierPlan::of(s);
                self.coll_cache().barrier.get_or_init(|| plan)
            }
        };
        match plan {
            // Run straight from its exchanges: a barrier is pure latency, and interpreting a
            // schedule is a visible share of it.
            BarrierPlan::Exchanges(rounds) => {
                let ctx = self.coll_context();
                for &(to, from) in rounds.iter() {
                    self.sendrecv_bytes(
                        (&[], to, TAG_BARRIER),
                        (&mut [], Src::Rank(from), TAG_BARRIER),
                        ctx,
                        CommPattern::Collective,
                    )?;
                }
                Ok(())
            }
            BarrierPlan::Schedule(s) => {
                let s = s.clone();
                self.run_schedule(&s, TAG_BARRIER, &[], &mut [], None)
            }
        }
    }

    /// Broadcast `buf` from `root` to every member (`buf` must have the same length everywhere).
    pub fn bcast<T: bytemuck::Pod>(&self, buf: &mut [T], root: usize) -> Result<()> {
        self.check_root(root)?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        if let Some(r) = self.coll_direct(|d, env| d.bcast(env, bytes, root)) {
            return r;
        }
        let s = self.bcast_schedule(root, bytes.len())?;
        self.run_schedule(&s, TAG_BCAST, &[], bytes, None)
    }

    /// The schedule of a broadcast of `len` bytes from `root`.
    fn bcast_schedule(&self, root: usize, len: usize) -> Result<Rc<Schedule>> {
        let key = SchedKey::new(TAG_BCAST, root, len, 0);
        self.schedule(key, || self.coll_provide("bcast", |m| m.bcast(root, len)))
    }

    /// Reduce every member's `send` with `op` (an [`Op`], a [`UserOp`] or a reference to
    /// one) into `recv` at `root`. `recv` is required at the root (same length as `send`) and
    /// ignored elsewhere.
    pub fn reduce<T: bytemuck::Pod>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        op: impl Reduction<T>,
        root: usize,
    ) -> Result<()> {
        self.check_root(root)?;
        op.check()?;
        // The schedule reads the input from `send` and writes `work` before reading it.
        if self.rank() == root {
            let recv = recv.ok_or_else(|| {
                Error::InvalidArgument("reduce: the root must pass a receive buffer".into())
            })?;
            check_len("reduce", "receive buffer", recv.len(), send.len())?;
            return self.reduce_bytes(
                bytemuck::cast_slice(send),
                bytemuck::cast_slice_mut(recv),
                &op,
                root,
            );
        }
        // Non-roots accumulate their subtree in private space (a leaf never touches it),
        // kept between calls: a zeroed allocation per call cost more than a small reduce.
        let len = std::mem::size_of_val(send);
        if std::mem::align_of::<T>() > std::mem::align_of::<u128>() {
            let mut own = vec![T::zeroed(); send.len()];
            let work = bytemuck::cast_slice_mut(&mut own);
            return self.reduce_bytes(bytemuck::cast_slice(send), work, &op, root);
        }
        let cache = self.coll_cache();
        // Taken out for the run: a reduce on this communicator from within the operation
        // (a user function calling MPI) finds an empty one and takes its own.
        let mut own = cache.reduce_work.take();
        let words = len.div_ceil(std::mem::size_of::<u128>());
        if own.len() < words {
            own.resize(words, 0);
        }
        let work = &mut bytemuck::cast_slice_mut(own.as_mut_slice())[..len];
        let r = self.reduce_bytes(bytemuck::cast_slice(send), work, &op, root);
        // Kept only while small: a communicator should not hold its largest reduce's space
        // for the rest of its life, and a large reduce's allocation is small beside its data.
        if std::mem::size_of_val(own.as_slice()) <= REDUCE_WORK_KEPT_BYTES {
            *cache.reduce_work.borrow_mut() = own;
        }
        r
    }

    /// Reduce `send` into `work` at the root (private partial space elsewhere).
    fn reduce_bytes<T: bytemuck::Pod>(
        &self,
        send: &[u8],
        work: &mut [u8],
        op: &impl Reduction<T>,
        root: usize,
    ) -> Result<()> {
        if send.is_empty() {
            // Nothing to reduce on any member (the count is the same everywhere), and MPI
            // owes no synchronisation but a barrier's: the arguments checked, done.
            return Ok(());
        }
        let (elem, ordered) = (std::mem::size_of::<T>(), !op.is_commutative());
        let step = reduce_step(op);
        if let Some(r) =
            self.coll_direct(|d, env| d.reduce(env, send, work, root, elem, ordered, &step))
        {
            return r;
        }
        let s = self.reduce_schedule(root, send.len(), elem, ordered)?;
        self.run_schedule(&s, TAG_REDUCE, send, work, Some(&step))
    }

    /// The schedule of a reduction of `len` bytes to `root`; `ordered`: the operation is not
    /// commutative and must combine in rank order.
    pub(crate) fn reduce_schedule(
        &self,
        root: usize,
        len: usize,
        elem: usize,
        ordered: bool,
    ) -> Result<Rc<Schedule>> {
        let key = SchedKey::new(TAG_REDUCE, root, len, elem).ordered(ordered);
        self.schedule(key, || {
            self.coll_provide("reduce", |m| m.reduce(root, len, elem, ordered))
        })
    }

    /// Reduce every member's `send` with `op` (an [`Op`], a [`UserOp`] or a reference to
    /// one); every member gets the result in `recv`.
    pub fn allreduce<T: bytemuck::Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Reduction<T>,
    ) -> Result<()> {
        op.check()?;
        check_len("allreduce", "receive buffer", recv.len(), send.len())?;
        self.allreduce_bytes(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            &op,
        )
    }

    /// Allreduce over byte views of `T` (lengths checked by the caller).
    fn allreduce_bytes<T: bytemuck::Pod>(
        &self,
        send: &[u8],
        recv: &mut [u8],
        op: &impl Reduction<T>,
    ) -> Result<()> {
        if send.is_empty() {
            // Nothing to reduce on any member: as reduce's.
            return Ok(());
        }
        // `recv` needs no initialization: the schedule reads the input from `send` where it
        // first needs it (a copy up front would be a full extra pass over the vector).
        let (elem, ordered) = (std::mem::size_of::<T>(), !op.is_commutative());
        let step = reduce_step(op);
        if let Some(r) =
            self.coll_direct(|d, env| d.allreduce(env, send, recv, elem, ordered, &step))
        {
            return r;
        }
        let s = self.allreduce_schedule(send.len(), elem, ordered)?;
        self.run_schedule(&s, TAG_ALLREDUCE, send, recv, Some(&step))
    }

    /// The schedule of an allreduce of `len` bytes of `elem`-byte elements; `ordered`: the
    /// operation is not commutative and must combine in rank order.
    pub(crate) fn allreduce_schedule(
        &self,
        len: usize,
        elem: usize,
        ordered: bool,
    ) -> Result<Rc<Schedule>> {
        let key = SchedKey::new(TAG_ALLREDUCE, 0, len, elem).ordered(ordered);
        self.schedule(key, || {
            self.coll_provide("allreduce", |m| m.allreduce(len, elem, ordered))
        })
    }

    /// Gather every member's `send` (same length everywhere) into `recv` at `root`, in rank
    /// order; `recv` (size × `send.len()`) is required at the root and ignored elsewhere.
    pub fn gather<T: bytemuck::Pod>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        root: usize,
    ) -> Result<()> {
        self.check_root(root)?;
        let (n, me) = (self.size(), self.rank());
        let block = std::mem::size_of_val(send);
        let v = (me + n - root) % n;
        let mut own;
        let work: &mut [u8] = if me == root {
            let recv = recv.ok_or_else(|| {
                Error::InvalidArgument("gather: the root must pass a receive buffer".into())
            })?;
            check_len("gather", "receive buffer", recv.len(), n * send.len())?;
            bytemuck::cast_slice_mut(recv)
        } else {
            // A direct form needs no space at a leaf: nothing passes through it.
            if let Some(r) =
                self.coll_direct(|d, env| d.gather(env, bytemuck::cast_slice(send), &mut [], root))
            {
                return r;
            }
            own = vec![0u8; n * block];
            &mut own
        };
        if me == root {
            // In rank order, straight into the receive buffer.
            let input = bytemuck::cast_slice(send);
            if let Some(r) = self.coll_direct(|d, env| d.gather(env, input, work, root)) {
                return r;
            }
        }
        work[v * block..(v + 1) * block].copy_from_slice(bytemuck::cast_slice(send));
        self.gather_virtual(work, block, root)?;
        if me == root {
            // Virtual-rank order to rank order.
            work.rotate_right(root * block);
        }
        Ok(())
    }

    /// Gather over `work` in virtual-rank layout, this rank's block already in place.
    fn gather_virtual(&self, work: &mut [u8], block: usize, root: usize) -> Result<()> {
        let s = self.gather_schedule(root, block)?;
        self.run_schedule(&s, TAG_GATHER, &[], work, None)
    }

    /// The schedule of a gather of `block`-byte blocks to `root`.
    fn gather_schedule(&self, root: usize, block: usize) -> Result<Rc<Schedule>> {
        let key = SchedKey::new(TAG_GATHER, root, block, 0);
        self.schedule(key, || {
            self.coll_provide("gather", |m| m.gather(root, block))
        })
    }

    /// Scatter `send` (size × `recv.len()` elements, required at the root, ignored elsewhere)
    /// from `root`: member r receives block r.
    pub fn scatter<T: bytemuck::Pod>(
        &self,
        send: Option<&[T]>,
        recv: &mut [T],
        root: usize,
    ) -> Result<()> {
        self.check_root(root)?;
        let (n, me) = (self.size(), self.rank());
        let block = std::mem::size_of_val(recv);
        let v = (me + n - root) % n;
        let input: &[u8] = match send {
            Some(send) if me == root => {
                check_len("scatter", "send buffer", send.len(), n * recv.len())?;
                bytemuck::cast_slice(send)
            }
            None if me == root => {
                return Err(Error::InvalidArgument(
                    "scatter: the root must pass a send buffer".into(),
                ))
            }
            _ => &[],
        };
        {
            // In rank order, straight out of the send buffer and into the receive buffer.
            let out = bytemuck::cast_slice_mut(recv);
            if let Some(r) = self.coll_direct(|d, env| d.scatter(env, input, out, root)) {
                return r;
            }
        }
        let mut work = vec![0u8; n * block];
        if me == root {
            work.copy_from_slice(input);
            // Rank order to virtual-rank order.
            work.rotate_left(root * block);
        }
        self.scatter_virtual(&mut work, block, root)?;
        bytemuck::cast_slice_mut::<T, u8>(recv).copy_from_slice(&work[v * block..(v + 1) * block]);
        Ok(())
    }

    /// Scatter over `work` in virtual-rank layout (the whole vector at the root).
    fn scatter_virtual(&self, work: &mut [u8], block: usize, root: usize) -> Result<()> {
        let s = self.scatter_schedule(root, block)?;
        self.run_schedule(&s, TAG_SCATTER, &[], work, None)
    }

    /// The schedule of a scatter of `block`-byte blocks from `root`.
    fn scatter_schedule(&self, root: usize, block: usize) -> Result<Rc<Schedule>> {
        let key = SchedKey::new(TAG_SCATTER, root, block, 0);
        self.schedule(key, || {
            self.coll_provide("scatter", |m| m.scatter(root, block))
        })
    }

    /// Gather every member's `send` into every member's `recv` (size × `send.len()`), in rank order.
    pub fn allgather<T: bytemuck::Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        check_len(
            "allgather",
            "receive buffer",
            recv.len(),
            self.size() * send.len(),
        )?;
        allgather_bytes(
            self,
            Some(bytemuck::cast_slice(send)),
            std::mem::size_of_val(send),
            bytemuck::cast_slice_mut(recv),
        )
    }

    /// Every member sends block r of `send` to member r and receives member r's block into
    /// block r of `recv` (both size × k elements).
    pub fn alltoall<T: bytemuck::Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let n = self.size();
        if !send.len().is_multiple_of(n) {
            return Err(Error::InvalidArgument(format!(
                "alltoall: send length {} is not a multiple of the size {n}",
                send.len()
            )));
        }
        check_len("alltoall", "receive buffer", recv.len(), send.len())?;
        let block = std::mem::size_of_val(send) / n;
        let (send, recv): (&[u8], &mut [u8]) =
            (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        if let Some(r) = self.coll_direct(|d, env| d.alltoall(env, send, recv)) {
            return r;
        }
        let ranges: Vec<Range<usize>> = (0..n).map(|r| r * block..(r + 1) * block).collect();
        self.alltoallv_bytes(send, &ranges, recv, &ranges, TAG_ALLTOALL)
    }

    /// Like [`Communicator::alltoall`] with per-peer element counts and displacements: send
    /// `send[send_displs[r]..][..send_counts[r]]` to r, receive r's into
    /// `recv[recv_displs[r]..][..recv_counts[r]]`. Receive regions must not overlap.
    #[allow(clippy::too_many_arguments)]
    pub fn alltoallv<T: bytemuck::Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        let sz = std::mem::size_of::<T>();
        let sends = layout(
            "alltoallv",
            "send",
            self.size(),
            send.len(),
            send_counts,
            send_displs,
            sz,
        )?;
        let recvs = layout(
            "alltoallv",
            "receive",
            self.size(),
            recv.len(),
            recv_counts,
            recv_displs,
            sz,
        )?;
        check_disjoint("alltoallv", &recvs)?;
        self.alltoallv_bytes(
            bytemuck::cast_slice(send),
            &sends,
            bytemuck::cast_slice_mut(recv),
            &recvs,
            TAG_ALLTOALLV,
        )
    }

    /// [`Communicator::alltoallv`] over bytes, the blocks given as byte ranges rather than
    /// counts and displacements (what a caller that computed them already, like the C
    /// library, passes without a conversion): `sends[r]` of `send` goes to member r, whose
    /// block lands in its `recvs[me]` of `recv`. One range per member on each side, inside
    /// its buffer; the receive ranges must not overlap.
    pub fn alltoallv_regions(
        &self,
        send: &[u8],
        sends: &[Range<usize>],
        recv: &mut [u8],
        recvs: &[Range<usize>],
    ) -> Result<()> {
        let n = self.size();
        check_regions("alltoallv", "send", n, send.len(), sends)?;
        check_regions("alltoallv", "receive", n, recv.len(), recvs)?;
        check_disjoint("alltoallv", recvs)?;
        self.alltoallv_bytes(send, sends, recv, recvs, TAG_ALLTOALLV)
    }

    fn alltoallv_bytes(
        &self,
        send: &[u8],
        sends: &[Range<usize>],
        recv: &mut [u8],
        recvs: &[Range<usize>],
        tag: i32,
    ) -> Result<()> {
        if tag == TAG_ALLTOALLV {
            // alltoall offered its direct form already (before taking this path).
            self.check_self_block(sends, recvs)?;
            if let Some(r) = self.coll_direct(|d, env| d.alltoallv(env, send, sends, recv, recvs)) {
                return r;
            }
        }
        let s = self.alltoallv_schedule(sends, recvs, tag)?;
        self.run_schedule(&s, tag, send, recv, None)
    }

    /// This rank's block to itself is as long as its receive region for it.
    fn check_self_block(&self, sends: &[Range<usize>], recvs: &[Range<usize>]) -> Result<()> {
        let me = self.rank();
        if sends[me].len() != recvs[me].len() {
            return Err(Error::InvalidArgument(format!(
                "alltoallv: this rank sends {} B to itself but expects {} B",
                sends[me].len(),
                recvs[me].len()
            )));
        }
        Ok(())
    }

    /// The schedule of an alltoall(v) over the byte ranges `sends` and `recvs` (one per
    /// rank); `tag` tells alltoall (whose schedules are kept) from alltoallv.
    fn alltoallv_schedule(
        &self,
        sends: &[Range<usize>],
        recvs: &[Range<usize>],
        tag: i32,
    ) -> Result<Rc<Schedule>> {
        self.check_self_block(sends, recvs)?;
        // alltoall's regions follow from the block size; alltoallv's from every count, so
        // only alltoall's schedules are kept, and only alltoall (every member's blocks the
        // same size) is offered to the modules' block forms (Bruck's) before their
        // alltoallv.
        Ok(if tag == TAG_ALLTOALL {
            let block = sends[0].len();
            let build = || {
                self.coll_provide("alltoall", |m| {
                    m.alltoall(block).or_else(|| m.alltoallv(sends, recvs))
                })
            };
            self.schedule(SchedKey::new(tag, 0, block, 0), build)?
        } else {
            Rc::new(self.coll_provide("alltoallv", |m| m.alltoallv(sends, recvs))?)
        })
    }
}

/// The executor's reduction step for `T` under `op` (see [`ReduceFn`]).
fn reduce_step<'a, T: bytemuck::Pod>(
    op: &'a impl Reduction<T>,
) -> impl Fn(&mut [u8], &[u8], Option<&[u8]>, bool) + 'a {
    move |dst, src, acc, src_first| op.apply(dst, src, acc, src_first)
}

fn check_len(what: &str, buf: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what}: {buf} holds {got} elements, expected {want}"
        )))
    }
}

/// Receive regions must not overlap (MPI makes it an error: the result would depend on the
/// arrival order).
fn check_disjoint(what: &str, regions: &[Range<usize>]) -> Result<()> {
    // The common case, regions in ascending order: one pass and no sorted copy. The pair
    // found is the one the sort below would find (a stable sort keeps this order).
    let mut prev: Option<(usize, &Range<usize>)> = None;
    let mut ordered = true;
    let mut overlap = None;
    for (r, g) in regions.iter().enumerate().filter(|(_, g)| !g.is_empty()) {
        if let Some((p, pg)) = prev {
            if g.start < pg.start {
                ordered = false;
                break;
            }
            if pg.end > g.start && overlap.is_none() {
                overlap = Some((p, r));
            }
        }
        prev = Some((r, g));
    }
    if ordered {
        return match overlap {
            None => Ok(()),
            Some((p, r)) => Err(Error::InvalidArgument(format!(
                "{what}: receive regions of ranks {p} and {r} overlap"
            ))),
        };
    }
    let mut sorted: Vec<(usize, &Range<usize>)> = regions
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.is_empty())
        .collect();
    sorted.sort_by_key(|(_, r)| r.start);
    match sorted.windows(2).find(|w| w[0].1.end > w[1].1.start) {
        None => Ok(()),
        Some(w) => Err(Error::InvalidArgument(format!(
            "{what}: receive regions of ranks {} and {} overlap",
            w[0].0, w[1].0
        ))),
    }
}

/// A v-collective's side given as byte ranges: one per rank, each inside the buffer of
/// `len` bytes.
fn check_regions(
    what: &str,
    side: &str,
    n: usize,
    len: usize,
    regions: &[Range<usize>],
) -> Result<()> {
    if regions.len() != n {
        return Err(Error::InvalidArgument(format!(
            "{what}: {side} regions ({}) need one entry per rank ({n})",
            regions.len()
        )));
    }
    match regions.iter().position(|g| g.start > g.end || g.end > len) {
        None => Ok(()),
        Some(r) => Err(Error::InvalidArgument(format!(
            "{what}: {side} region for rank {r} ({:?}) exceeds the buffer ({len} bytes)",
            regions[r]
        ))),
    }
}

/// Byte ranges of a v-collective's side (`counts[r]` elements at `displs[r]` for each rank),
/// validated against the buffer of `len` elements of `sz` bytes.
fn layout(
    what: &str,
    side: &str,
    n: usize,
    len: usize,
    counts: &[usize],
    displs: &[usize],
    sz: usize,
) -> Result<Vec<Range<usize>>> {
    if counts.len() != n || displs.len() != n {
        return Err(Error::InvalidArgument(format!(
            "{what}: {side} counts ({}) and displacements ({}) need one entry per rank ({n})",
            counts.len(),
            displs.len()
        )));
    }
    counts
        .iter()
        .zip(displs)
        .enumerate()
        .map(|(r, (&c, &d))| match d.checked_add(c) {
            Some(end) if end <= len => Ok(d * sz..end * sz),
            _ => Err(Error::InvalidArgument(format!(
                "{what}: {side} region for rank {r} ({c} elements at {d}) exceeds the buffer ({len} elements)"
            ))),
        })
        .collect()
}

/// Allgather of `block`-byte blocks into `out`: `mine` is copied into place first, or is
/// already there (`None`, in place).
fn allgather_bytes(
    comm: &Communicator,
    mine: Option<&[u8]>,
    block: usize,
    out: &mut [u8],
) -> Result<()> {
    let me = comm.rank();
    if let Some(mine) = mine {
        // In place (`None`) takes the schedules: a direct form reads `mine` apart from `out`.
        if let Some(r) = comm.coll_direct(|d, env| d.allgather(env, mine, out)) {
            return r;
        }
        out[me * block..(me + 1) * block].copy_from_slice(mine);
    }
    let s = allgather_schedule(comm, block)?;
    comm.run_schedule(&s, TAG_ALLGATHER, &[], out, None)
}

/// The schedule of an allgather of `block`-byte blocks.
fn allgather_schedule(comm: &Communicator, block: usize) -> Result<Rc<Schedule>> {
    let key = SchedKey::new(TAG_ALLGATHER, 0, block, 0);
    comm.schedule(key, || {
        comm.coll_provide("allgather", |m| m.allgather(block))
    })
}

/// Gather `mine` from every member into `out` (rank order; `out.len() == size * mine.len()`
/// bytes). Used by `Communicator::split`.
pub(crate) fn allgather_into<T: bytemuck::Pod>(
    comm: &Communicator,
    mine: &[T],
    out: &mut [u8],
) -> Result<()> {
    let mine: &[u8] = bytemuck::cast_slice(mine);
    if out.len() != mine.len() * comm.size() {
        return Err(Error::InvalidArgument(format!(
            "allgather: output holds {} B, expected {}",
            out.len(),
            mine.len() * comm.size()
        )));
    }
    allgather_bytes(comm, Some(mine), mine.len(), out)
}

/// How a communicator runs its blocking barrier.
#[derive(Debug)]
enum BarrierPlan {
    /// Zero-byte exchanges, one per round (to, from): run as `sendrecv`s.
    Exchanges(Box<[(usize, usize)]>),
    /// Any other schedule, run by the executor.
    Schedule(Rc<Schedule>),
}

impl BarrierPlan {
    /// Exchanges when every round of `s` is one zero-byte receive and one zero-byte send and
    /// nothing else (a dissemination barrier), else the schedule itself.
    fn of(s: Schedule) -> Self {
        let exchange = |r: &schedule::Round| match (r.comms.as_slice(), r.locals.is_empty()) {
            (
                [Comm::Recv {
                    peer: from,
                    region: a,
                }, Comm::Send {
                    peer: to,
                    region: b,
                }],
                true,
            ) if a.range.is_empty() && b.range.is_empty() => Some((*to, *from)),
            _ => None,
        };
        match s.rounds.iter().map(exchange).collect::<Option<Vec<_>>>() {
            Some(x) => BarrierPlan::Exchanges(x.into_boxed_slice()),
            None => BarrierPlan::Schedule(Rc::new(s)),
        }
    }
}
