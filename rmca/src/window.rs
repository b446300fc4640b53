//! One-sided communication: windows of memory that the other members of a communicator read
//! and write with put, get and accumulate, inside epochs that synchronize them (MPI's RMA).
//!
//! [`Window<T>`] is the typed API: its memory is the window's own (`allocate`), reached
//! locally through [`Window::with_local`], and each epoch is a scope, as requests are:
//! [`Window::fence`], [`Window::lock`] and [`Window::lock_all`] open an epoch, run the
//! closure given the epoch's handle ([`Epoch`]) and close it, so a buffer lent to a `get`
//! (which the epoch's end fills) stays borrowed until then.
//!
//! ```no_run
//! # fn main() -> rmca::Result<()> {
//! let universe = rmca::init()?;
//! let world = universe.world();
//! let (rank, size) = (world.rank(), world.size());
//! let win = rmca::Window::<u64>::allocate(&world, 4)?;
//! let mut left = [0u64; 1];
//! win.fence(|e| {
//!     e.put(&[rank as u64], (rank + 1) % size, 0)?;
//!     e.get(&mut left, (rank + size - 1) % size, 1)
//! })?;
//! win.with_local(|mem| assert_eq!(mem[0], ((rank + size - 1) % size) as u64));
//! # Ok(())
//! # }
//! ```
//!
//! [`RawWindow`] is the byte-level window the MPI C interface builds on (memory the caller
//! owns, target layouts of derived datatypes, request-based operations).
//!
//! # Progress
//! The window's component is chosen by the `osc` framework: osc-sm for allocated windows
//! whose members all share this node (one shared segment: every operation is a load, store
//! or CPU atomic, every synchronization a few atomics, so no progress of anyone's is
//! needed), osc-rdma for windows whose members an RDMA BTL reaches (puts and gets by the
//! BTLs' RDMA, the rest by osc-am's messages), osc-am for the others. osc-am moves its messages
//! through the PML on a context of its own (the window's communicator is a duplicate of the
//! one it was made on). A live window is stepped by every progress pass of the runtime, like
//! a non-blocking collective: a target applies the operations aimed at it whenever it is in
//! any rmca call that waits (a barrier, a receive, a synchronization of this or another
//! window). A target that computes without calling rmca delays its origins' passive-target
//! epochs until it calls again (there is no progress thread).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::rc::Rc;

use rmca_framework::buffer::UserBuf;
use rmca_framework::osc::{
    AccOp, Elem, HostAccumulate, Layout, LockKind, OpId, OscError, OscModule, OscPort, OscRdma,
    OscSetup, RdmaKeys, RdmaToken, SyncCall, TargetInfo, WinConfig,
};
use rmca_framework::pml::{ContextId, RequestId, SendMode, SendStart, Source, TagSel};
use rmca_framework::progress::ReleasingBackoff;

use crate::coll::nonblocking::Chained;
use crate::coll::{Op, Reducible};
use crate::{Communicator, Error, Result};

/// How a window was made (`MPI_WIN_CREATE_FLAVOR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// Over memory the caller owns (`MPI_Win_create`).
    Create,
    /// Over memory the window allocated (`MPI_Win_allocate`).
    Allocate,
    /// Memory attached and detached later (`MPI_Win_create_dynamic`).
    Dynamic,
    /// Memory the window allocated in one segment every member maps, each member reaching
    /// the others' by load and store (`MPI_Win_allocate_shared`).
    Shared,
}

/// Memory a window owns, freed with its state (after the module that reaches it).
enum Owned {
    None,
    /// `MPI_Win_allocate`'s memory when the component does not place it (16-byte aligned).
    Heap(#[allow(dead_code)] Vec<u128>),
    /// `MPI_Win_allocate_shared`'s segment when the component does not place it (osc-am
    /// forced by `--mca osc am`): every member's part, in order, at these offsets.
    Segment(rmca_osc_sm::segment::Segment, Vec<usize>),
}

/// The collective steps of a component making a window, over the window's communicator.
struct Setup<'a>(&'a Communicator);

impl OscSetup for Setup<'_> {
    fn bcast(&mut self, root: usize, data: &mut [u8]) -> std::result::Result<(), OscError> {
        self.0
            .bcast(data, root)
            .map_err(|e| OscError::Transport(e.to_string()))
    }

    fn all(&mut self, ok: bool) -> std::result::Result<bool, OscError> {
        let mut out = [0u8];
        self.0
            .allreduce(&[u8::from(ok)], &mut out, Op::Min)
            .map_err(|e| OscError::Transport(e.to_string()))?;
        Ok(out[0] == 1)
    }
}

/// The memory a window is made over.
enum Memory {
    /// The program's (`MPI_Win_create`; empty for a dynamic window).
    Given(UserBuf),
    /// Bytes the window allocates (`MPI_Win_allocate`, `_allocate_shared`).
    Allocate(usize),
}

/// The window's port: its messages go through the PML on the window's own context, tag 0.
struct Io {
    comm: Communicator,
    context: ContextId,
    /// Sends the PML has not completed, with the bytes they read.
    sends: Vec<(RequestId, Vec<u8>)>,
    /// Receives posted for probed messages, in matching order (applied in that order).
    recvs: VecDeque<(RequestId, Vec<u8>)>,
    /// While set, [`OscPort::recv`] reports nothing: the module's progress right after an
    /// operation is issued only sends (a receive poll is a pass of the PML; what arrived is
    /// taken by the next progress).
    sends_only: bool,
}

impl Io {
    fn rank_of(&self, world: u32) -> usize {
        let g = &self.comm.inner.group;
        if self.comm.inner.identity {
            return world as usize;
        }
        g.iter().position(|&w| w == world).unwrap_or(usize::MAX)
    }

    /// Release the sends the PML completed; how many are left.
    fn reap_sends(&mut self) -> usize {
        if self.sends.is_empty() {
            return 0;
        }
        let shared = self.comm.shared();
        self.sends.retain(|(id, _)| {
            !matches!(
                shared.with(|rt| Ok(rt.pml.test(*id)?)),
                Ok(Some(_)) | Err(_)
            )
        });
        self.sends.len()
    }
}

impl OscPort for Io {
    #[allow(unsafe_code)]
    fn send(&mut self, peer: usize, msg: Vec<u8>) -> std::result::Result<(), OscError> {
        // SAFETY: `msg` is kept in `sends` until the PML completes the send (or was taken
        // whole by a BTL when the send returns Done); a Vec's heap block does not move.
        let buf = unsafe { UserBuf::from_slice(&msg) };
        let started = self
            .comm
            .start_send_fast(
                buf,
                peer,
                0,
                self.context,
                SendMode::Standard,
                rmca_framework::btl::CommPattern::NonBlocking,
            )
            .map_err(|e| OscError::Transport(e.to_string()))?;
        if let SendStart::Pending(id) = started {
            self.sends.push((id, msg));
        }
        Ok(())
    }

    #[allow(unsafe_code)]
    fn recv(&mut self) -> Option<(usize, Vec<u8>)> {
        if self.sends_only {
            return None;
        }
        let shared = self.comm.shared();
        loop {
            if let Some((id, _)) = self.recvs.front() {
                let st = shared.with(|rt| Ok(rt.pml.test(*id)?)).ok()??;
                let (_, mut bytes) = self.recvs.pop_front()?;
                // SAFETY: the receive completed: the PML wrote its `st.len` bytes (at most
                // the buffer's length, the capacity: a longer message is truncated).
                unsafe { bytes.set_len(st.len.min(bytes.capacity())) };
                return Some((self.rank_of(st.source), bytes));
            }
            // A matched probe takes the message out of matching, and the receive goes
            // straight to it (no second match, as a receive posted after a probe needs) into
            // a buffer that is not zero-filled first: the PML writes every byte of it.
            let (msg, st) = shared
                .with(|rt| Ok(rt.pml.improbe(self.context, Source::Any, TagSel::Any)?))
                .ok()??;
            let mut bytes: Vec<u8> = Vec::with_capacity(st.len);
            // SAFETY: `bytes`' heap block of `st.len` bytes is kept in `recvs` until the
            // receive completes (moving the Vec does not move it); only the PML writes it, and
            // its length is set to what the PML wrote once it completed.
            let buf = unsafe { UserBuf::from_raw_parts_mut(bytes.as_mut_ptr(), st.len) };
            let id = shared
                .with(|rt| {
                    Ok(rt
                        .pml
                        .imrecv(msg, buf, rmca_framework::btl::CommPattern::NonBlocking)?)
                })
                .ok()?;
            self.recvs.push_back((id, bytes));
        }
    }

    fn rdma(&mut self) -> Option<&mut dyn OscRdma> {
        Some(self)
    }
}

/// The BTLs' RDMA for osc-rdma: the PML's `rdma_*` methods, window ranks made world ranks.
impl OscRdma for Io {
    fn register(&mut self, mem: UserBuf) -> std::result::Result<(u64, RdmaKeys), OscError> {
        let peers = self.comm.inner.group.clone();
        let shared = self.comm.shared();
        shared
            .with(|rt| Ok(rt.pml.rdma_register(mem, &peers)?))
            .map_err(|e| OscError::Transport(e.to_string()))
    }

    fn deregister(&mut self, handle: u64) {
        let _ = self.comm.shared().with(|rt| {
            rt.pml.rdma_deregister(handle);
            Ok(())
        });
    }

    fn put(
        &mut self,
        peer: usize,
        local: UserBuf,
        keys: &RdmaKeys,
        addr: u64,
    ) -> std::result::Result<RdmaToken, OscError> {
        self.transfer(peer, |pml, w| pml.rdma_put(w, local, keys, addr))
    }

    fn get(
        &mut self,
        peer: usize,
        local: UserBuf,
        keys: &RdmaKeys,
        addr: u64,
    ) -> std::result::Result<RdmaToken, OscError> {
        self.transfer(peer, |pml, w| pml.rdma_get(w, local, keys, addr))
    }

    fn test(&mut self, token: RdmaToken) -> Option<std::result::Result<(), OscError>> {
        match self.comm.shared().with(|rt| Ok(rt.pml.rdma_test(token))) {
            Ok(r) => r.map(|r| r.map_err(|e| OscError::Transport(e.to_string()))),
            Err(e) => Some(Err(OscError::Transport(e.to_string()))),
        }
    }
}

impl Io {
    /// The world rank of window rank `peer`.
    fn world_of(&self, peer: usize) -> std::result::Result<u32, OscError> {
        self.comm.inner.group.get(peer).copied().ok_or_else(|| {
            OscError::Rank(format!(
                "rank {peer} is not in the window's group (size {})",
                self.comm.inner.group.len()
            ))
        })
    }

    /// Start one RDMA transfer to window rank `peer` through the PML (`start` gets its world
    /// rank).
    fn transfer(
        &self,
        peer: usize,
        start: impl FnOnce(
            &mut dyn rmca_framework::pml::Pml,
            u32,
        ) -> std::result::Result<RdmaToken, rmca_framework::pml::PmlError>,
    ) -> std::result::Result<RdmaToken, OscError> {
        let w = self.world_of(peer)?;
        self.comm
            .shared()
            .with(|rt| Ok(start(rt.pml.as_mut(), w)?))
            .map_err(|e| OscError::Transport(e.to_string()))
    }
}

/// A window's state, shared between its owner and the runtime's progress.
struct Core {
    module: Box<dyn OscModule>,
    io: Io,
    freed: bool,
    /// Synchronizations the module finished within the call
    /// ([`OscModule::sync_done_now`]), with no progress pass: see [`QUICK_PASS_EVERY`].
    quick: u32,
    /// Declared after `module`, so dropped after it.
    owned: Owned,
}

impl Core {
    fn progress(&mut self) -> usize {
        let n = self.module.progress(&mut self.io);
        // Sends completed count as events, sends still pending do not: a wait on them (a
        // flush_local behind a large accumulate) would otherwise never back off, and on an
        // oversubscribed node would spin on the core its target needs to take them.
        let pending = self.io.sends.len();
        n + (pending - self.io.reap_sends())
    }

    /// Start what an operation or a lock request just queued: a progress pass that only
    /// sends (the receive poll, a pass of the PML, waits for the next progress: the
    /// synchronization that follows, usually). Nothing to send when the module reaches the
    /// targets' memory itself.
    fn start_sends(&mut self) {
        if !self.module.direct() {
            self.io.sends_only = true;
            self.progress();
            self.io.sends_only = false;
        }
    }

    /// After an operation: start what it queued, unless the module starts it with its next
    /// progress anyway ([`OscModule::wants_pass`]: osc-rdma's transfers, which the
    /// synchronization that completes them starts together).
    fn after_op(&mut self) {
        if self.module.wants_pass() {
            self.start_sends();
        }
    }
}

/// Synchronizations finished within the call ([`OscModule::sync_done_now`]) per progress
/// pass of the runtime. They make none, so a program that only puts and flushes (or locks,
/// puts and unlocks) while waiting for a peer whose message must arrive first would progress
/// nothing; MPI's progress rule wants its calls to move that traffic. A pass cost rank 0
/// about 1,800 instructions in a flush before (ob1 over shm, the window's receive poll
/// included; bench/RESULTS.md, osc-create-instructions): under 30 per call at this rate.
/// The C library's flushes on the module's lent path ([`RawWindow::lent_path`]) count
/// likewise.
pub const QUICK_PASS_EVERY: u32 = 64;

/// Stepped by every progress pass of the runtime while the window lives; the flag is the
/// owner's [`RawWindow::busy`].
struct Stepper(Rc<RefCell<Core>>, Rc<Cell<bool>>);

impl Chained for Stepper {
    fn step(&mut self) -> (usize, bool) {
        // Skipped while the window's owner is inside one of its calls (it progresses itself
        // after each pass of the runtime: a second pass of the window would double the
        // receive polls of every wait).
        if self.1.get() {
            return (0, false);
        }
        let Ok(mut core) = self.0.try_borrow_mut() else {
            return (0, false);
        };
        if core.freed {
            return (0, true);
        }
        (core.progress(), false)
    }
}

/// A window at the byte level: target addresses and layouts, operations named by [`OpId`].
/// The MPI C interface builds on it; Rust programs use [`Window`].
pub struct RawWindow {
    core: Rc<RefCell<Core>>,
    comm: Communicator,
    flavor: Flavor,
    targets: Vec<TargetInfo>,
    /// The module's [`OscModule::direct`], asked once: it never changes.
    direct: bool,
    /// Set while a call of the window progresses it itself: the runtime's passes then skip
    /// its [`Stepper`].
    busy: Rc<Cell<bool>>,
}

/// Clears [`RawWindow::busy`] when the call that set it returns (an error included).
struct Busy<'a>(&'a Cell<bool>);

impl<'a> Busy<'a> {
    fn set(flag: &'a Cell<bool>) -> Self {
        flag.set(true);
        Busy(flag)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl std::fmt::Debug for RawWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawWindow")
            .field("rank", &self.comm.rank())
            .field("size", &self.comm.size())
            .field("flavor", &self.flavor)
            .finish_non_exhaustive()
    }
}

impl RawWindow {
    /// Make a window over `memory` on every member of `comm` (collective), with
    /// displacement unit `disp_unit`; a [`Flavor::Dynamic`] window ignores `memory`.
    /// `no_locks` is the info key of that name.
    ///
    /// # Safety
    /// `memory` stays valid, and is accessed by the program only as MPI allows (its own
    /// loads and stores synchronized with the epochs that expose it), until
    /// [`RawWindow::free`] returned.
    #[allow(unsafe_code)]
    pub unsafe fn create(
        comm: &Communicator,
        memory: UserBuf,
        disp_unit: usize,
        flavor: Flavor,
        no_locks: bool,
    ) -> Result<RawWindow> {
        // SAFETY: the caller's contract.
        unsafe { Self::create_with_host(comm, memory, disp_unit, flavor, no_locks, None) }
    }

    /// [`RawWindow::create`] with the host's arithmetic for the accumulate elements Rust has
    /// no number for (C `long double`, complex products: see [`HostAccumulate`]).
    ///
    /// # Safety
    /// As [`RawWindow::create`].
    #[allow(unsafe_code)]
    pub unsafe fn create_with_host(
        comm: &Communicator,
        memory: UserBuf,
        disp_unit: usize,
        flavor: Flavor,
        no_locks: bool,
        host: Option<HostAccumulate>,
    ) -> Result<RawWindow> {
        // SAFETY: the caller's contract.
        let (w, _) = unsafe {
            Self::make(
                comm,
                Memory::Given(memory),
                disp_unit,
                flavor,
                no_locks,
                host,
            )?
        };
        Ok(w)
    }

    /// Allocate a window of `len` zeroed bytes on every member of `comm` (collective), with
    /// displacement unit `disp_unit`: `shared` for `MPI_Win_allocate_shared` (every member
    /// must share this node; [`RawWindow::shared_query`] then finds each member's memory),
    /// else `MPI_Win_allocate`. This member's memory is returned with the window, valid
    /// until the window is freed; the program accesses it only as MPI allows.
    #[allow(unsafe_code)]
    pub fn allocate(
        comm: &Communicator,
        len: usize,
        disp_unit: usize,
        shared: bool,
        no_locks: bool,
        host: Option<HostAccumulate>,
    ) -> Result<(RawWindow, UserBuf)> {
        let flavor = if shared {
            Flavor::Shared
        } else {
            Flavor::Allocate
        };
        // SAFETY: the window allocates and owns the memory, so nothing is the caller's.
        unsafe {
            Self::make(
                comm,
                Memory::Allocate(len),
                disp_unit,
                flavor,
                no_locks,
                host,
            )
        }
    }

    /// # Safety
    /// `Memory::Given`: as [`RawWindow::create`].
    #[allow(unsafe_code)]
    unsafe fn make(
        comm: &Communicator,
        memory: Memory,
        disp_unit: usize,
        flavor: Flavor,
        no_locks: bool,
        host: Option<HostAccumulate>,
    ) -> Result<(RawWindow, UserBuf)> {
        if comm.inner.inter.is_some() {
            return Err(Error::CommKind(
                "windows are made on intra-communicators only".into(),
            ));
        }
        let wcomm = comm.dup()?;
        let dynamic = flavor == Flavor::Dynamic;
        let size = match &memory {
            _ if dynamic => 0,
            Memory::Given(m) => m.len() as u64,
            Memory::Allocate(len) => *len as u64,
        };
        let mut all = vec![0u64; 2 * comm.size()];
        wcomm.allgather(&[size, disp_unit as u64], &mut all)?;
        let targets: Vec<TargetInfo> = all
            .chunks_exact(2)
            .map(|c| TargetInfo {
                size: c[0],
                disp_unit: c[1],
            })
            .collect();
        let shared = comm.shared();
        let (same_node, rdma) = shared.with(|rt| {
            let node = |r: u32| rt.job.node_of[r as usize];
            let me = node(rt.job.rank);
            let g = &wcomm.inner.group;
            Ok((
                g.iter().all(|&w| node(w) == me),
                g.iter().all(|&w| rt.pml.rdma_reaches(w)),
            ))
        })?;
        if flavor == Flavor::Shared && !same_node {
            return Err(Error::Rma(OscError::Arg(
                "MPI_Win_allocate_shared: the communicator spans several nodes (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED gives one per node)".into(),
            )));
        }
        let config = WinConfig {
            rank: comm.rank(),
            targets: targets.clone(),
            same_node,
            dynamic,
            no_locks,
            allocated: matches!(memory, Memory::Allocate(_)),
            shared: flavor == Flavor::Shared,
            host,
            rdma,
            counters: shared.with(|rt| Ok(rt.counters.clone()))?,
        };
        let (component, params) = shared.with(|rt| {
            let c = rt
                .registry
                .select_osc(&rt.params, &config)
                .map_err(|e| Error::InvalidArgument(format!("{e}{}", refusals(rt, &config))))?;
            Ok((c, rt.params.clone()))
        })?;
        let me = comm.rank();
        let (module, mem, owned) = match memory {
            Memory::Given(m) => (component.create(config, m, &params)?, m, Owned::None),
            Memory::Allocate(_) if component.allocates(&config) => {
                let a = component.allocate(config, &mut Setup(&wcomm), &params)?;
                (a.module, a.memory, Owned::None)
            }
            Memory::Allocate(len) if flavor == Flavor::Shared => {
                // The component reaches memory only by messages (osc-am): map the segment
                // here, so that the members still reach each other's by load and store.
                let mut offsets = Vec::with_capacity(targets.len());
                let mut total = 0usize;
                for t in &targets {
                    offsets.push(total);
                    total = usize::try_from(t.size)
                        .ok()
                        .and_then(|s| total.checked_add(s))
                        .ok_or_else(|| {
                            Error::Rma(OscError::Arg("the shared window is too large".into()))
                        })?;
                }
                let seg = rmca_osc_sm::segment::Segment::create(&mut Setup(&wcomm), me, total)?;
                let m = if total == 0 {
                    UserBuf::empty()
                } else {
                    seg.user_buf(offsets[me], len)
                };
                (
                    component.create(config, m, &params)?,
                    m,
                    Owned::Segment(seg, offsets),
                )
            }
            Memory::Allocate(len) => {
                let mut heap = vec![0u128; len.div_ceil(16)];
                let m = if len == 0 {
                    UserBuf::empty()
                } else {
                    // SAFETY: the allocation is kept in the window's state (`owned`), dropped
                    // after the module; moving the Vec does not move its heap block.
                    unsafe { UserBuf::from_raw_parts_mut(heap.as_mut_ptr().cast(), len) }
                };
                (component.create(config, m, &params)?, m, Owned::Heap(heap))
            }
        };
        let context = wcomm.inner.context;
        let core = Rc::new(RefCell::new(Core {
            module,
            io: Io {
                comm: wcomm.clone(),
                context,
                sends: Vec::new(),
                recvs: VecDeque::new(),
                sends_only: false,
            },
            freed: false,
            quick: 0,
            owned,
        }));
        let busy = Rc::new(Cell::new(false));
        shared.start_chained(Rc::new(RefCell::new(Stepper(core.clone(), busy.clone()))));
        let direct = core.borrow().module.direct();
        Ok((
            RawWindow {
                core,
                comm: wcomm,
                flavor,
                targets,
                direct,
                busy,
            },
            mem,
        ))
    }

    /// Where member `rank`'s memory is mapped in this process, if this process reaches it
    /// by load and store (`MPI_Win_shared_query` on an `MPI_Win_allocate_shared` window, or
    /// an allocated one osc-sm serves): its address and size in bytes.
    pub fn shared_query(&self, rank: usize) -> Option<(usize, u64)> {
        let core = self.core.borrow();
        if let Some(b) = core.module.shared_part(rank) {
            return Some((b.addr(), b.len() as u64));
        }
        match &core.owned {
            Owned::Segment(seg, offsets) => {
                let size = self.targets.get(rank)?.size;
                let addr = if seg.is_empty() {
                    0
                } else {
                    seg.addr(offsets[rank])
                };
                Some((addr, size))
            }
            _ => None,
        }
    }

    /// The window's own communicator (a duplicate of the one it was made on).
    pub fn communicator(&self) -> &Communicator {
        &self.comm
    }

    /// How it was made.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// What member `rank` exposes (size and displacement unit).
    pub fn target(&self, rank: usize) -> Option<TargetInfo> {
        self.targets.get(rank).copied()
    }

    /// Does the module reach the target's memory itself, completing every operation within
    /// its call and every flush and unlock at once (osc-sm)? The C library's fast paths run
    /// only then: nothing of the runtime needs to progress inside them.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// The component serving the window (`"am"`).
    pub fn component(&self) -> &'static str {
        self.core.borrow().module.component_name()
    }

    /// Progress the runtime and the window until `f` (run on the module after each pass)
    /// gives a value. The runtime is progressed first, even when `f` is satisfied at once:
    /// programs poll their window memory with a flush or `MPI_Win_sync` between reads
    /// (mpi4py's `util.sync`, MPICH's tests), and the others' operations reach this process's
    /// memory only through that progress.
    fn progress_until<T>(&self, mut f: impl FnMut(&mut dyn OscModule) -> Option<T>) -> Result<T> {
        let shared = self.comm.shared();
        // Releasing: at MPI_THREAD_MULTIPLE the wait lets the process's other threads call
        // MPI between its passes (nothing is borrowed there). Threads that each fence their
        // own window (MPICH's threads/rma/multifence) deadlocked across ranks otherwise: each
        // rank's lock held by a fence waiting for a thread the other rank's fence kept out.
        let mut backoff = ReleasingBackoff::default();
        // The window is progressed once per pass, here (not by the runtime's pass as well).
        let _busy = Busy::set(&self.busy);
        loop {
            let m = shared.with(|rt| Ok(rt.progress()))? + shared.step_collectives();
            let mut core = self.core.borrow_mut();
            let n = core.progress();
            if let Some(t) = f(&mut *core.module) {
                return Ok(t);
            }
            drop(core);
            backoff.pass(n + m);
        }
    }

    fn issue(
        &self,
        f: impl FnOnce(&mut dyn OscModule) -> std::result::Result<OpId, OscError>,
    ) -> Result<OpId> {
        let mut core = self.core.borrow_mut();
        let id = f(&mut *core.module)?;
        // Send at once: the target may be waiting for it.
        core.after_op();
        Ok(id)
    }

    /// The target address of displacement `disp` at `target` (scaled by its displacement
    /// unit; a dynamic window's displacements are addresses).
    pub fn address(&self, target: usize, disp: isize) -> Result<u64> {
        let t = self.targets.get(target).ok_or_else(|| {
            Error::Rma(OscError::Rank(format!(
                "target rank {target} is not in the window's group (size {})",
                self.targets.len()
            )))
        })?;
        if self.flavor == Flavor::Dynamic {
            return Ok(disp as u64);
        }
        let off = (disp as i128) * i128::from(t.disp_unit);
        u64::try_from(off).map_err(|_| {
            Error::Rma(OscError::Range(format!(
                "displacement {disp} is before the start of rank {target}'s window"
            )))
        })
    }

    /// Put `data` into `layout` at displacement `disp` of `target`.
    pub fn put(&self, target: usize, disp: isize, layout: &Layout, data: Vec<u8>) -> Result<OpId> {
        let addr = self.address(target, disp)?;
        self.issue(|m| m.put(target, addr, layout, data))
    }

    /// [`RawWindow::put`] of a lent buffer into borrowed target runs
    /// ([`OscModule::put_lent`]: `data` stays valid and unwritten until the operation
    /// completed locally, by [`RawWindow::test_op`] or a synchronization).
    pub fn put_lent(
        &self,
        target: usize,
        disp: isize,
        runs: &[(i64, u64)],
        data: UserBuf,
    ) -> Result<OpId> {
        let addr = self.address(target, disp)?;
        self.issue(|m| m.put_lent(target, addr, runs, data))
    }

    /// [`RawWindow::get`] straight into a lent buffer ([`OscModule::get_lent`]); `None` when
    /// the module does not take it (then [`RawWindow::get`]).
    pub fn get_lent(
        &self,
        target: usize,
        disp: isize,
        runs: &[(i64, u64)],
        into: UserBuf,
    ) -> Option<Result<OpId>> {
        let addr = match self.address(target, disp) {
            Ok(a) => a,
            Err(e) => return Some(Err(e)),
        };
        let mut core = self.core.borrow_mut();
        let id = match core.module.get_lent(target, addr, runs, into)? {
            Ok(id) => id,
            Err(e) => return Some(Err(e.into())),
        };
        // Started as by `issue`.
        core.after_op();
        Some(Ok(id))
    }

    /// Get `layout` at displacement `disp` of `target`: the operation's result.
    pub fn get(&self, target: usize, disp: isize, layout: &Layout) -> Result<OpId> {
        let addr = self.address(target, disp)?;
        self.issue(|m| m.get(target, addr, layout))
    }

    /// Accumulate (with `fetch`: get-accumulate, whose result is the previous contents).
    #[allow(clippy::too_many_arguments)]
    pub fn accumulate(
        &self,
        target: usize,
        disp: isize,
        layout: &Layout,
        op: AccOp,
        elem: Elem,
        data: Vec<u8>,
        fetch: bool,
    ) -> Result<OpId> {
        let addr = self.address(target, disp)?;
        self.issue(|m| m.accumulate(target, addr, layout, op, elem, data, fetch))
    }

    /// [`RawWindow::accumulate`] of borrowed bytes into borrowed target runs
    /// ([`OscModule::accumulate_from`]: the bytes are read before the call returns).
    #[allow(clippy::too_many_arguments)]
    pub fn accumulate_from(
        &self,
        target: usize,
        disp: isize,
        runs: &[(i64, u64)],
        op: AccOp,
        elem: Elem,
        data: &[u8],
        fetch: bool,
    ) -> Result<OpId> {
        let addr = self.address(target, disp)?;
        self.issue(|m| m.accumulate_from(target, addr, runs, op, elem, data, fetch))
    }

    /// [`RawWindow::accumulate_from`] completed within the call when the module can
    /// ([`OscModule::accumulate_at_once`]), the previous contents into `old` when given; `None`:
    /// not taken (nor for a displacement the general call refuses: it raises the error).
    #[allow(clippy::too_many_arguments)]
    pub fn accumulate_at_once(
        &self,
        target: usize,
        disp: isize,
        runs: &[(i64, u64)],
        op: AccOp,
        elem: Elem,
        data: &[u8],
        old: Option<&mut [u8]>,
    ) -> Option<std::result::Result<(), OscError>> {
        let addr = self.address(target, disp).ok()?;
        let mut core = self.core.borrow_mut();
        core.module
            .accumulate_at_once(target, addr, runs, op, elem, data, old)
    }

    /// [`RawWindow::compare_and_swap`] completed within the call when the module can
    /// ([`OscModule::compare_and_swap_at_once`]), the previous value into `old`; `None`: not taken.
    pub fn compare_and_swap_at_once(
        &self,
        target: usize,
        disp: isize,
        elem: Elem,
        compare: &[u8],
        value: &[u8],
        old: &mut [u8],
    ) -> Option<std::result::Result<(), OscError>> {
        let addr = self.address(target, disp).ok()?;
        let mut core = self.core.borrow_mut();
        core.module
            .compare_and_swap_at_once(target, addr, elem, compare, value, old)
    }

    /// Compare-and-swap of one element: the result is the previous value.
    pub fn compare_and_swap(
        &self,
        target: usize,
        disp: isize,
        elem: Elem,
        compare: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<OpId> {
        let addr = self.address(target, disp)?;
        self.issue(|m| m.compare_and_swap(target, addr, elem, compare, value))
    }

    /// Run `f` on the module's operations that complete within the call on borrowed buffers
    /// ([`OscModule::direct_ops`]: osc-sm), if it has them (`None` otherwise); target
    /// addresses from [`RawWindow::address`].
    pub fn direct<R>(
        &self,
        f: impl FnOnce(&mut dyn rmca_framework::osc::OscDirect) -> R,
    ) -> Option<R> {
        self.core.borrow_mut().module.direct_ops().map(f)
    }

    /// The module's [`rmca_framework::osc::DirectView`] (osc-sm): every member's memory
    /// as this process maps it and the epochs' checks as flags, which the C library keeps
    /// next to the window for its small put, get and flush; `None` for other modules.
    pub fn direct_view(&self) -> Option<Rc<rmca_framework::osc::DirectView>> {
        self.core.borrow_mut().module.direct_ops()?.view()
    }

    /// The module's [`rmca_framework::osc::LentPath`] (osc-rdma: puts and gets to the
    /// members of its node queued for CMA, and their flushes), which the C library keeps
    /// next to the window for its small put, get and flush; `None` for other modules. Its
    /// flushes make no progress pass: the host runs one every [`QUICK_PASS_EVERY`]
    /// ([`RawWindow::progress`]), as [`RawWindow::sync`] does for the flushes the module
    /// finishes within the call.
    pub fn lent_path(&self) -> Option<Rc<dyn rmca_framework::osc::LentPath>> {
        self.core.borrow().module.lent_path()
    }

    /// The outcome of `id` if it completed locally (then spent), after one progress pass.
    pub fn test_op(&self, id: OpId) -> Option<Result<Vec<u8>>> {
        let mut core = self.core.borrow_mut();
        if let Some(r) = core.module.poll_op(id) {
            return Some(r.map_err(Error::Rma));
        }
        core.progress();
        core.module.poll_op(id).map(|r| r.map_err(Error::Rma))
    }

    /// Wait until `id` completed locally; its result bytes.
    pub fn wait_op(&self, id: OpId) -> Result<Vec<u8>> {
        self.progress_until(|m| m.poll_op(id))?.map_err(Error::Rma)
    }

    /// Run synchronization `call` to its end.
    pub fn sync(&self, call: SyncCall) -> Result<()> {
        if let SyncCall::Fence { succeed } = call {
            // (Not with the wait hook, MPI_THREAD_MULTIPLE: a blocking collective holds the
            // process lock while it waits, and threads fencing windows of their own would
            // deadlock across ranks, as `progress_until` explains.)
            if self.core.borrow().module.fence_by_collective()
                && !rmca_framework::progress::wait_hook_set()
            {
                return self.fence_by_collective(succeed);
            }
        }
        self.sync_messages(call)
    }

    /// [`RawWindow::sync`] by the module's own synchronization (its messages, for a fence).
    fn sync_messages(&self, call: SyncCall) -> Result<()> {
        {
            let mut core = self.core.borrow_mut();
            // A direct module's flush is one call that finishes within it.
            if let (true, SyncCall::Flush(t) | SyncCall::FlushLocal(t)) = (self.direct, &call) {
                if let Some(d) = core.module.direct_ops() {
                    return d.flush_now(*t).map_err(Error::Rma);
                }
            }
            let lock = matches!(call, SyncCall::Lock { .. } | SyncCall::LockAll { .. });
            core.module.sync(call)?;
            // Finished within the call with nothing left to send or poll (osc-rdma: a flush
            // whose transfers it moved itself, a lock on a word): no pass, save every
            // `QUICK_PASS_EVERY`th.
            if let Some(r) = core.module.sync_done_now() {
                core.quick = core.quick.wrapping_add(1);
                if core.quick.is_multiple_of(QUICK_PASS_EVERY) {
                    drop(core);
                    self.progress();
                }
                return r.map_err(Error::Rma);
            }
            // A module that reaches memory directly finishes flushes and unlocks at once:
            // no pass of the runtime is needed (the others' operations do not need ours).
            // Nor does a lock granted at once (a lock word, a lazy request): the progress
            // a program polling its memory needs comes with the unlock or flush after it.
            // A lock request by message leaves now; so do the synchronization's messages
            // and the transfers queued since the last progress (osc-rdma's), whose
            // completions the runtime's first pass below then reports.
            core.start_sends();
            if self.direct || lock {
                if let Some(r) = core.module.sync_done() {
                    return r.map_err(Error::Rma);
                }
            }
        }
        self.progress_until(|m| m.sync_done())?.map_err(Error::Rma)
    }

    /// `MPI_Win_fence` on a module that ends quiet fences by a collective
    /// ([`OscModule::fence_by_collective`]): this member's operations of the epoch complete,
    /// then one allreduce on the window's communicator says whether any member sent
    /// operations as messages. If none did, nothing is left to apply anywhere and the fence
    /// ends there (one collective instead of a message to and from every member); else the
    /// module's message rounds run. Every member decides by the allreduce's result, so all
    /// take the same path for the same fence.
    fn fence_by_collective(&self, succeed: bool) -> Result<()> {
        // Without a pass when the module is ready at once (its transfers moved by CMA).
        let ready = self.core.borrow_mut().module.fence_ready();
        let loud = match ready {
            Some(r) => r,
            None => self.progress_until(|m| m.fence_ready())?,
        }
        .map_err(Error::Rma)?;
        // The target's side (requests posted in its accumulate slots, messages) is served
        // by the window's stepper in the collective's progress passes: no borrow held here.
        let mut any = [u8::from(loud)];
        // (A window of one member decides alone: its allreduce would be a copy.)
        if self.comm.size() > 1 {
            self.comm.allreduce(&[u8::from(loud)], &mut any, Op::Max)?;
        }
        if any[0] != 0 {
            // (Not a recursion: the module's message rounds, by the general path.)
            return self.sync_messages(SyncCall::Fence { succeed });
        }
        let mut core = self.core.borrow_mut();
        let r = core.module.fence_agreed(succeed).map_err(Error::Rma);
        // An allreduce whose last member arrived here polls nothing: a pass every
        // `QUICK_PASS_EVERY`th, as for the quick synchronizations of `sync`.
        core.quick = core.quick.wrapping_add(1);
        if core.quick.is_multiple_of(QUICK_PASS_EVERY) {
            drop(core);
            self.progress();
        }
        r
    }

    /// One progress pass of the runtime and of the window (receive, apply what arrived, send
    /// what is queued): what `MPI_Win_sync` does for a program polling its window memory; the
    /// events handled.
    pub fn progress(&self) -> usize {
        let shared = self.comm.shared();
        let _busy = Busy::set(&self.busy);
        let m = shared
            .with(|rt| Ok(rt.progress()))
            .unwrap_or(0)
            .saturating_add(shared.step_collectives());
        m + self.core.borrow_mut().progress()
    }

    /// `MPI_Win_test`: if every origin of the exposure epoch completed, end it (true).
    pub fn test_exposure(&self) -> Result<bool> {
        let ready = {
            let mut core = self.core.borrow_mut();
            core.progress();
            core.module.exposure_complete()
        };
        if ready {
            self.sync(SyncCall::Wait)?;
        }
        Ok(ready)
    }

    /// Attach `region` to a dynamic window.
    ///
    /// # Safety
    /// The region stays valid until detached (or the window freed).
    #[allow(unsafe_code)]
    pub unsafe fn attach(&self, region: UserBuf) -> Result<()> {
        Ok(self.core.borrow_mut().module.attach(region)?)
    }

    /// Detach the region attached at address `addr`.
    pub fn detach(&self, addr: u64) -> Result<()> {
        Ok(self.core.borrow_mut().module.detach(addr)?)
    }

    /// Free the window (collective): every member must have ended its epochs; returns when
    /// no member can reach this one's memory any more. Freeing a freed window does nothing.
    pub fn free(&self) -> Result<()> {
        if self.core.borrow().freed {
            return Ok(());
        }
        self.sync(SyncCall::Free)?;
        // The messages still being sent read memory the window owns.
        let shared = self.comm.shared();
        let mut backoff = ReleasingBackoff::default();
        loop {
            let left = {
                let mut core = self.core.borrow_mut();
                core.progress();
                core.io.sends.len()
            };
            if left == 0 {
                break;
            }
            let m = shared.with(|rt| Ok(rt.progress()))? + shared.step_collectives();
            backoff.pass(m);
        }
        self.core.borrow_mut().freed = true;
        Ok(())
    }
}

/// The element type of accumulates on `T`.
fn elem_of<T: Reducible>() -> Result<Elem> {
    Ok(match T::NAME {
        "i8" => Elem::I8,
        "i16" => Elem::I16,
        "i32" => Elem::I32,
        "i64" => Elem::I64,
        "u8" => Elem::U8,
        "u16" => Elem::U16,
        "u32" => Elem::U32,
        "u64" => Elem::U64,
        "f32" => Elem::F32,
        "f64" => Elem::F64,
        other => {
            return Err(Error::InvalidArgument(format!(
                "one-sided accumulates apply to primitive numbers, not {other}"
            )))
        }
    })
}

/// The accumulate operation of a predefined reduction operation: `None` for `MinLoc` and
/// `MaxLoc`, which apply to value-index pairs only (the C library maps its pair datatypes
/// itself). The one mapping: the Rust windows and the C library's both use it.
pub fn accumulate_op(op: Op) -> Option<AccOp> {
    Some(match op {
        Op::Sum => AccOp::Sum,
        Op::Prod => AccOp::Prod,
        Op::Min => AccOp::Min,
        Op::Max => AccOp::Max,
        Op::BitAnd => AccOp::BAnd,
        Op::BitOr => AccOp::BOr,
        Op::BitXor => AccOp::BXor,
        Op::LogicalAnd => AccOp::LAnd,
        Op::LogicalOr => AccOp::LOr,
        Op::LogicalXor => AccOp::LXor,
        Op::MinLoc | Op::MaxLoc => return None,
    })
}

/// [`accumulate_op`] for the typed windows, whose elements are never pairs.
fn acc_op(op: Op) -> Result<AccOp> {
    accumulate_op(op).ok_or_else(|| {
        Error::InvalidArgument(
            "one-sided accumulates of a typed window do not take MinLoc/MaxLoc (pairs)".into(),
        )
    })
}

/// A typed window of `T` elements on every member of a communicator, its memory its own.
pub struct Window<T: bytemuck::Pod> {
    raw: RawWindow,
    /// The memory the window exposes (owned by the window's state, which outlives every
    /// access: the one pointer every access goes through).
    base: *mut T,
    /// Elements at `base`.
    len: usize,
}

impl<T: bytemuck::Pod> std::fmt::Debug for Window<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("raw", &self.raw)
            .field("len", &self.len)
            .finish()
    }
}

/// A result an epoch fills at its end: where, and from which operation.
struct Landing {
    id: OpId,
    to: UserBuf,
    /// The module writes `to` itself: the operation's result is empty.
    lent: bool,
}

/// The handle of an open epoch: the operations of the epoch go through it, and buffers lent
/// to the fetching ones (`get`, `fetch_and_op`, ...) stay borrowed for `'scope`, until the
/// epoch's end has filled them:
///
/// ```compile_fail
/// # let universe = rmca::init().unwrap();
/// # let world = universe.world();
/// let win = rmca::Window::<u8>::allocate(&world, 4).unwrap();
/// let mut buf = [0u8; 4];
/// win.fence(|e| {
///     e.get(&mut buf, 0, 0)?;
///     let early = buf[0]; // `buf` is lent to the get until the epoch ends
///     Ok(early)
/// })
/// .unwrap();
/// ```
pub struct Epoch<'scope, 'env: 'scope, T: bytemuck::Pod> {
    win: &'scope Window<T>,
    landings: RefCell<Vec<Landing>>,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl<T: bytemuck::Pod> std::fmt::Debug for Epoch<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epoch")
            .field("pending", &self.landings.borrow().len())
            .finish()
    }
}

impl<'scope, T: bytemuck::Pod> Epoch<'scope, '_, T> {
    fn disp(index: usize) -> Result<isize> {
        isize::try_from(index).map_err(|_| Error::InvalidArgument("index too large".into()))
    }

    /// Write `data` into `target`'s window from element `index` on.
    pub fn put(&self, data: &[T], target: usize, index: usize) -> Result<()> {
        let bytes = bytemuck::cast_slice::<T, u8>(data).to_vec();
        let layout = Layout::contiguous(bytes.len() as u64);
        self.win
            .raw
            .put(target, Self::disp(index)?, &layout, bytes)?;
        Ok(())
    }

    /// Read `buf.len()` elements of `target`'s window from `index` on into `buf`, filled
    /// when the epoch ends.
    #[allow(unsafe_code)]
    pub fn get(&self, buf: &'scope mut [T], target: usize, index: usize) -> Result<()> {
        let bytes = bytemuck::cast_slice_mut::<T, u8>(buf);
        let len = bytes.len() as u64;
        let disp = Self::disp(index)?;
        // SAFETY: `buf` is borrowed mutably for 'scope, which lasts until the epoch's end
        // waited for the operation (a module writing it in place) or wrote the result
        // there (or dropped the landing without writing).
        let to = unsafe { UserBuf::from_mut_slice(bytes) };
        // Lent to a module that writes it itself (osc-rdma's RDMA reads): nothing to land.
        let (id, lent) = match self.win.raw.get_lent(target, disp, &[(0, len)], to) {
            Some(r) => (r?, true),
            None => (
                self.win.raw.get(target, disp, &Layout::contiguous(len))?,
                false,
            ),
        };
        self.landings.borrow_mut().push(Landing { id, to, lent });
        Ok(())
    }

    /// Combine `data` into `target`'s window from `index` on with `op` (atomically per
    /// element with respect to other accumulates).
    pub fn accumulate(&self, data: &[T], target: usize, index: usize, op: Op) -> Result<()>
    where
        T: Reducible,
    {
        let bytes = bytemuck::cast_slice::<T, u8>(data);
        self.win.raw.accumulate_from(
            target,
            Self::disp(index)?,
            &[(0, bytes.len() as u64)],
            acc_op(op)?,
            elem_of::<T>()?,
            bytes,
            false,
        )?;
        Ok(())
    }

    /// Combine `value` into element `index` of `target` with `op` and fetch the previous
    /// value into `old` (filled when the epoch ends; `MPI_Fetch_and_op`).
    #[allow(unsafe_code)]
    pub fn fetch_and_op(
        &self,
        value: T,
        old: &'scope mut T,
        target: usize,
        index: usize,
        op: Op,
    ) -> Result<()>
    where
        T: Reducible,
    {
        let layout = Layout::contiguous(std::mem::size_of::<T>() as u64);
        let id = self.win.raw.accumulate(
            target,
            Self::disp(index)?,
            &layout,
            acc_op(op)?,
            elem_of::<T>()?,
            bytemuck::bytes_of(&value).to_vec(),
            true,
        )?;
        // SAFETY: as in `get`.
        let to = unsafe { UserBuf::from_mut_slice(bytemuck::bytes_of_mut(old)) };
        self.landings.borrow_mut().push(Landing {
            id,
            to,
            lent: false,
        });
        Ok(())
    }

    /// Store `value` at element `index` of `target` if it holds `compare`; the previous
    /// value lands in `old` when the epoch ends (`MPI_Compare_and_swap`).
    #[allow(unsafe_code)]
    pub fn compare_and_swap(
        &self,
        value: T,
        compare: T,
        old: &'scope mut T,
        target: usize,
        index: usize,
    ) -> Result<()>
    where
        T: Reducible,
    {
        let id = self.win.raw.compare_and_swap(
            target,
            Self::disp(index)?,
            elem_of::<T>()?,
            bytemuck::bytes_of(&compare).to_vec(),
            bytemuck::bytes_of(&value).to_vec(),
        )?;
        // SAFETY: as in `get`.
        let to = unsafe { UserBuf::from_mut_slice(bytemuck::bytes_of_mut(old)) };
        self.landings.borrow_mut().push(Landing {
            id,
            to,
            lent: false,
        });
        Ok(())
    }

    /// Complete every operation of a lock epoch at its targets now, and fill the buffers
    /// lent so far (`MPI_Win_flush_all`); refused in a fence epoch.
    pub fn flush(&self) -> Result<()> {
        self.win.raw.sync(SyncCall::Flush(None))?;
        self.land()
    }

    /// Write the results of the completed fetching operations into their buffers.
    fn land(&self) -> Result<()> {
        let landings = std::mem::take(&mut *self.landings.borrow_mut());
        let mut first_err = None;
        for l in landings {
            match self.win.raw.wait_op(l.id) {
                Ok(_) if l.lent => {}
                Ok(bytes) if bytes.len() == l.to.len() => l.to.write_at(0, &bytes),
                Ok(bytes) => {
                    first_err.get_or_insert(Error::InvalidArgument(format!(
                        "internal: {} result bytes for a buffer of {}",
                        bytes.len(),
                        l.to.len()
                    )));
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl<T: bytemuck::Pod> Window<T> {
    /// Allocate a window of `len` elements of `T` (zeroed) on every member of `comm`
    /// (collective; members may choose different lengths). When every member shares this
    /// node, osc-sm serves it from one shared segment.
    pub fn allocate(comm: &Communicator, len: usize) -> Result<Self> {
        Self::allocate_with(comm, len, false)
    }

    /// Allocate a window of `len` elements of `T` (zeroed) on every member of `comm`, in one
    /// segment every member maps (collective; `MPI_Win_allocate_shared`: every member must
    /// share this node): [`Window::with_shared`] reaches any member's elements by load and
    /// store. The members' parts follow each other in rank order with no gap.
    pub fn allocate_shared(comm: &Communicator, len: usize) -> Result<Self> {
        Self::allocate_with(comm, len, true)
    }

    fn allocate_with(comm: &Communicator, len: usize, shared: bool) -> Result<Self> {
        let size = std::mem::size_of::<T>();
        let bytes = len.checked_mul(size).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "a window of {len} elements of {size} bytes is too large"
            ))
        })?;
        let (raw, mem) = RawWindow::allocate(comm, bytes, size.max(1), shared, false, None)?;
        let base = mem.as_ptr().cast::<T>();
        if len > 0 && !base.is_aligned() {
            return Err(Error::InvalidArgument(format!(
                "window memory at {base:p} is not aligned for {} (alignment {})",
                std::any::type_name::<T>(),
                std::mem::align_of::<T>()
            )));
        }
        Ok(Self { raw, base, len })
    }

    /// Elements of this member's window.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Does this member expose no memory?
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The component serving the window (`"sm"`, `"am"`).
    pub fn component(&self) -> &'static str {
        self.raw.component()
    }

    /// Run `f` on member `rank`'s elements as this process maps them (a window of
    /// [`Window::allocate_shared`], or one osc-sm serves): `None` if this process does not
    /// reach them by load and store. The other members may store into them at any time: MPI's
    /// rules (a synchronization, or `MPI_Win_sync` and a barrier) say when their stores are
    /// visible, and two members storing into the same element outside them is a race.
    #[allow(unsafe_code)]
    pub fn with_shared<R>(&self, rank: usize, f: impl FnOnce(&mut [T]) -> R) -> Option<R> {
        let (addr, bytes) = self.raw.shared_query(rank)?;
        let _held = self.raw.core.borrow_mut();
        let n = bytes as usize / std::mem::size_of::<T>().max(1);
        if n == 0 {
            return Some(f(&mut []));
        }
        let p = addr as *mut T;
        if !p.is_aligned() {
            return None;
        }
        // SAFETY: `n` elements of member `rank`'s part of the window's segment, mapped until
        // the window's state goes (it is borrowed here); this process touches them only
        // through this slice meanwhile. Other processes' concurrent stores are the program's
        // to synchronize, as MPI's shared-memory model says (see above).
        let mem = unsafe { std::slice::from_raw_parts_mut(p, n) };
        Some(f(mem))
    }

    /// The window's communicator.
    pub fn communicator(&self) -> &Communicator {
        self.raw.communicator()
    }

    /// Run `f` on this member's window memory. No remote operation is applied meanwhile (the
    /// window's progress waits); MPI's rules still say when remote updates are visible (after
    /// the epoch that made them ended at the origin and was synchronized with this member).
    #[allow(unsafe_code)]
    pub fn with_local<R>(&self, f: impl FnOnce(&mut [T]) -> R) -> R {
        let _held = self.raw.core.borrow_mut();
        if self.len == 0 {
            return f(&mut []);
        }
        // SAFETY: the memory is the window's own (kept by its state, borrowed here); while
        // `_held` is borrowed no progress pass of this window runs (the stepper skips a
        // borrowed window), so nothing in this process else writes it, and `f` cannot reach
        // it otherwise (no other accessor exists). With osc-sm the other members store into
        // it directly; MPI's rules say when (after the epochs that did so).
        let mem = unsafe { std::slice::from_raw_parts_mut(self.base, self.len) };
        f(mem)
    }

    fn epoch<'env, R, F>(&self, open: SyncCall, close: SyncCall, f: F) -> Result<R>
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> Result<R>,
    {
        self.raw.sync(open)?;
        let e = Epoch {
            win: self,
            landings: RefCell::new(Vec::new()),
            _scope: PhantomData,
            _env: PhantomData,
        };
        // Buffers lent to a module (`get`) must not be written after their borrow ends: a
        // panic unwinding out of `f` first waits for those operations (errors ignored).
        let out = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&e))) {
            Ok(out) => out,
            Err(panic) => {
                for l in e.landings.take() {
                    if l.lent {
                        let _ = self.raw.wait_op(l.id);
                    }
                }
                std::panic::resume_unwind(panic)
            }
        };
        let closed = self.raw.sync(close);
        let landed = e.land();
        let out = out?;
        closed?;
        landed?;
        Ok(out)
    }

    /// A fence epoch (collective: every member calls it): the operations issued in `f`
    /// complete, at origins and targets, before it returns.
    pub fn fence<'env, R, F>(&self, f: F) -> Result<R>
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> Result<R>,
    {
        self.epoch(
            SyncCall::Fence { succeed: true },
            SyncCall::Fence { succeed: false },
            f,
        )
    }

    /// A passive-target epoch on `target` (only the origin calls it): `exclusive` keeps every
    /// other origin's lock out meanwhile.
    pub fn lock<'env, R, F>(&self, target: usize, exclusive: bool, f: F) -> Result<R>
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> Result<R>,
    {
        let kind = if exclusive {
            LockKind::Exclusive
        } else {
            LockKind::Shared
        };
        self.epoch(
            SyncCall::Lock {
                kind,
                target,
                nocheck: false,
            },
            SyncCall::Unlock(target),
            f,
        )
    }

    /// A shared passive-target epoch on every member.
    pub fn lock_all<'env, R, F>(&self, f: F) -> Result<R>
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> Result<R>,
    {
        self.epoch(SyncCall::LockAll { nocheck: false }, SyncCall::UnlockAll, f)
    }

    /// Free the window (collective), reporting errors that dropping it would log.
    pub fn free(self) -> Result<()> {
        self.raw.free()
    }
}

impl<T: bytemuck::Pod> Drop for Window<T> {
    fn drop(&mut self) {
        if let Err(e) = self.raw.free() {
            // The memory stays with the window's state, which the runtime's progress keeps
            // while the window is not freed: nothing can write freed memory.
            tracing::error!("window free failed: {e}");
        }
    }
}

/// Why the allowed OSC components refused a window, each in its own words (`"; osc sm: ..."`),
/// and, when the selection left osc am out, that it serves every window.
fn refusals(rt: &rmca_runtime::Runtime, config: &WinConfig) -> String {
    use rmca_framework::base::Framework;
    use rmca_framework::component::ComponentRef;
    let Ok(sel) = rt.registry.selector(&rt.params, Framework::Osc) else {
        return String::new();
    };
    let mut out = String::new();
    for c in rt.registry.of(Framework::Osc) {
        let ComponentRef::Osc(o) = c.component else {
            continue;
        };
        let name = c.meta().name;
        if !sel.allows(name) {
            continue;
        }
        if let Some(why) = o.refusal(config, &rt.params) {
            out.push_str(&format!("; osc {name}: {why}"));
        }
    }
    if !sel.allows("am") {
        out.push_str("; osc am, left out by the selection, serves every window");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_singleton_window_through_every_epoch_kind() {
        let universe = crate::init().expect("a singleton job");
        let world = universe.world();
        let win = Window::<i64>::allocate(&world, 4).unwrap();
        // Every member (the one) is on this node: osc-sm.
        assert_eq!((win.len(), win.raw.component()), (4, "sm"));
        win.fence(|e| e.put(&[7, 8], 0, 1)).unwrap();
        let mut got = [0i64; 2];
        win.fence(|e| e.get(&mut got, 0, 1)).unwrap();
        assert_eq!(got, [7, 8]);
        let mut old = 0i64;
        win.lock(0, true, |e| {
            e.accumulate(&[5], 0, 0, Op::Sum)?;
            e.fetch_and_op(1, &mut old, 0, 0, Op::Sum)
        })
        .unwrap();
        assert_eq!(old, 5);
        let mut was = 0i64;
        win.lock_all(|e| {
            e.compare_and_swap(100, 6, &mut was, 0, 0)?;
            e.flush()
        })
        .unwrap();
        assert_eq!(was, 6);
        win.with_local(|m| assert_eq!(m, &[100, 7, 8, 0]));
        win.free().unwrap();
    }

    #[test]
    fn a_shared_window_is_reached_by_load_and_store() {
        let universe = crate::init().expect("a singleton job");
        let world = universe.world();
        let win = Window::<u32>::allocate_shared(&world, 3).unwrap();
        assert_eq!(win.component(), "sm");
        win.with_local(|m| m.copy_from_slice(&[1, 2, 3]));
        assert_eq!(win.with_shared(0, |m| m.to_vec()), Some(vec![1, 2, 3]));
        assert_eq!(win.with_shared(1, |m| m.len()), None);
        win.fence(|e| e.accumulate(&[10, 10], 0, 1, Op::Sum))
            .unwrap();
        win.with_shared(0, |m| m[0] = 7).unwrap();
        let mut got = [0u32; 3];
        win.lock(0, false, |e| e.get(&mut got, 0, 0)).unwrap();
        assert_eq!(got, [7, 12, 13]);
        win.free().unwrap();
        // Nothing left behind in /dev/shm: the name went once every member mapped it.
        let left = std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.flatten()
                    .filter(|e| {
                        let n = e.file_name();
                        let n = n.to_string_lossy();
                        n.starts_with(&format!("rmca-osc-sm-{}-", std::process::id()))
                    })
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(left, 0);
    }

    #[test]
    fn bad_input_is_refused_and_writes_nothing() {
        let universe = crate::init().expect("a singleton job");
        let world = universe.world();
        let win = Window::<u32>::allocate(&world, 2).unwrap();
        // No epoch.
        assert!(matches!(
            win.raw.put(0, 0, &Layout::contiguous(4), vec![1; 4]),
            Err(Error::Rma(OscError::Sync(_)))
        ));
        // Past the end, before the start, another rank.
        let r = win.fence(|e| e.put(&[1, 2, 3], 0, 0));
        assert!(matches!(r, Err(Error::Rma(OscError::Range(_)))), "{r:?}");
        let r = win.fence(|e| e.put(&[1], 1, 0));
        assert!(matches!(r, Err(Error::Rma(OscError::Rank(_)))), "{r:?}");
        assert!(matches!(
            win.raw.address(0, -1),
            Err(Error::Rma(OscError::Range(_)))
        ));
        // MinLoc has no one-sided form yet.
        let r = win.fence(|e| e.accumulate(&[1], 0, 0, Op::MinLoc));
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        win.with_local(|m| assert_eq!(m, &[0, 0]));
    }
}
