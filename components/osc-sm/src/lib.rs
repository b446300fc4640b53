//! osc-sm: MPI windows whose members all share a node.
//!
//! The window's memory is one shared segment ([`segment::Segment`]) every member maps:
//! a control area (a barrier counter, and per member a reader-writer lock word, an
//! accumulate lock word and the post/complete masks of [`sync`]), then every member's memory
//! one after the other with no gap (MPI's default `alloc_shared_noncontig=false`), so
//! `MPI_Win_shared_query` hands out plain pointers and a put or get is a copy. It serves the
//! windows whose memory it places itself (`MPI_Win_allocate_shared`, and `MPI_Win_allocate`
//! when every member is on this node); `MPI_Win_create` and dynamic windows, and members on
//! other nodes, stay with osc-am.
//!
//! Operations complete when issued, on the caller's own buffers when the host uses
//! [`OscDirect`] (the C library does: no packed copy, no result kept for a poll):
//! - put and get copy the target layout's runs (each checked against the target's memory
//!   before any byte is written);
//! - accumulates (and fetch-and-op, compare-and-swap) run under the target's accumulate lock
//!   word, one hold per operation, each run combined in place by a typed loop the compiler
//!   vectorizes, built for AVX2 too and taken on runs of 256 bytes and more when the CPU
//!   has it, the fetching runs of 16 KiB and more block by block (the previous contents
//!   copied out, then combined in place while in L1) ([`kernel`]; `osc_sm_atomics=false`,
//!   the default). MPI 4.1 section 12.7 ("Atomicity")
//!   asks that concurrent accumulates on the same location with the same predefined type
//!   act as if done in some serial order, element by element, not call by call; one lock
//!   per target gives that (and more) for every element type, so a 64 KiB accumulate costs
//!   one lock acquisition and a vector loop rather than 16384 locked instructions, and a
//!   single-element fetch-and-op costs one locked instruction (the lock's) as a CPU atomic
//!   would. Its price: accumulates from many origins into one target are serialized;
//! - with `osc_sm_atomics=true`, accumulates on aligned 4- and 8-byte elements (integers,
//!   floats, value-index pairs of that size) are CPU atomics per element instead:
//!   `fetch_add`/`and`/`or`/`xor`/`swap` where the operation has one, a compare-exchange
//!   loop otherwise; every other element type goes under the lock. The choice depends only
//!   on the element type and its address, so two accumulates on the same element always
//!   take the same path and stay atomic with respect to each other: for many origins
//!   updating distinct elements of one target (no lock to share), at a locked instruction
//!   per element.
//!
//! Synchronization is the sans-IO state machine of [`sync`] over the control words: no
//! message is ever sent, so a target need not call rmca for its origins to progress.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod kernel;
pub mod segment;
pub mod sync;

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::AtomicU64;

use rmca_framework::buffer::UserBuf;
use rmca_framework::component::{Component, ComponentMeta};
use rmca_framework::osc::{
    accumulate_with, AccOp, Allocated, DirectLocks, DirectTarget, DirectView, Elem, HostAccumulate,
    Layout, LockKind, OpId, OscComponent, OscDirect, OscError, OscModule, OscPort, OscSetup,
    SyncCall, WinConfig,
};
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore};

use kernel::Kernel;
use segment::Segment;
use sync::{Epochs, Passive, Words};

/// Bytes before the members' control blocks (the barrier counter, alone on its cache line).
const HEADER: usize = 64;
/// Offset of the accumulate lock word in a member's control block.
const ACC_LOCK: usize = 8;
/// Offset of the post mask in a member's control block.
const MASKS: usize = 16;

/// The osc-sm component.
#[derive(Debug)]
pub struct SmComponent;

/// The registered instance.
pub static SM: SmComponent = SmComponent;
rmca_framework::builtin_component!(Osc, SM);

impl Component for SmComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "sm",
            version: env!("CARGO_PKG_VERSION"),
            description: "One-sided communication on a node's shared segment: loads, stores and CPU atomics (MPI_Win_allocate/_allocate_shared within a node)",
        }
    }

    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        params.add(
            Param::int("priority", 30)
                .range(0, 100)
                .help("Priority of osc-sm among the OSC components that can serve a window (allocated windows whose members all share this node)")
                .level(Level::Tuning),
        );
        params.add(
            Param::bool("atomics", false)
                .help("Accumulates, fetch-and-op and compare-and-swap on aligned 4- and 8-byte elements by CPU atomics per element (many origins updating distinct elements of one target in parallel); false: every one under the target's accumulate lock word, a large accumulate as one vectorized loop per run")
                .level(Level::Dev),
        );
    }
}

impl OscComponent for SmComponent {
    fn priority(&self, params: &ParamStore) -> i32 {
        params
            .get_int("osc_sm_priority")
            .map_or(30, |v| i32::try_from(v).unwrap_or(30))
    }

    fn query(&self, config: &WinConfig, params: &ParamStore) -> bool {
        self.refusal(config, params).is_none()
    }

    fn refusal(&self, config: &WinConfig, _params: &ParamStore) -> Option<String> {
        if config.dynamic {
            Some("it does not serve dynamic windows (MPI_Win_create_dynamic)".into())
        } else if !config.allocated {
            Some("it serves only windows whose memory it allocates (MPI_Win_allocate, _allocate_shared), not MPI_Win_create's".into())
        } else if !config.same_node {
            Some("the window's members are not all on one node".into())
        } else {
            None
        }
    }

    fn create(
        &self,
        _config: WinConfig,
        _memory: UserBuf,
        _params: &ParamStore,
    ) -> Result<Box<dyn OscModule>, OscError> {
        Err(OscError::Arg(
            "osc-sm serves only windows whose memory it allocates (MPI_Win_allocate, _allocate_shared)".into(),
        ))
    }

    fn allocates(&self, _config: &WinConfig) -> bool {
        true
    }

    fn allocate(
        &self,
        config: WinConfig,
        setup: &mut dyn OscSetup,
        params: &ParamStore,
    ) -> Result<Allocated, OscError> {
        let atomics = params.get_bool("osc_sm_atomics").unwrap_or(false);
        let module = SmModule::new(config, setup, atomics)?;
        let memory = module.part(module.me);
        Ok(Allocated {
            module: Box::new(module),
            memory,
        })
    }
}

/// Where things are in a window's segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Bytes of one member's control block.
    pub stride: usize,
    /// Offset and size of every member's memory.
    pub parts: Vec<(usize, usize)>,
    /// Bytes of the whole segment.
    pub len: usize,
}

impl Plan {
    /// The layout of a window whose members expose `sizes` bytes.
    pub fn new(sizes: &[u64]) -> Result<Self, OscError> {
        let n = sizes.len();
        let too_large = || {
            OscError::Arg(format!(
                "osc-sm: the window's members expose {} bytes in all, more than this process can map",
                sizes.iter().map(|&s| u128::from(s)).sum::<u128>()
            ))
        };
        let stride = (MASKS + sync::words_per_member(n) - 8).next_multiple_of(64);
        let data = n
            .checked_mul(stride)
            .and_then(|c| c.checked_add(HEADER))
            .ok_or_else(too_large)?;
        let mut at = data;
        let mut parts = Vec::with_capacity(n);
        for &s in sizes {
            let s = usize::try_from(s).map_err(|_| too_large())?;
            parts.push((at, s));
            at = at.checked_add(s).ok_or_else(too_large)?;
        }
        Ok(Self {
            stride,
            parts,
            len: at,
        })
    }

    /// Bytes the segment holds besides the members' memory.
    pub fn overhead(&self) -> usize {
        HEADER + self.parts.len() * self.stride
    }
}

/// The runs of one operation in the segment: `(offset, len)`, each inside the target's part.
enum Runs {
    One([(usize, usize); 1]),
    Many(Vec<(usize, usize)>),
}

impl std::ops::Deref for Runs {
    type Target = [(usize, usize)];

    fn deref(&self) -> &Self::Target {
        match self {
            Runs::One(r) => r,
            Runs::Many(v) => v,
        }
    }
}

/// The control words of a window, in its segment.
struct SegWords<'a> {
    seg: &'a Segment,
    stride: usize,
    mask_words: usize,
}

impl SegWords<'_> {
    fn ctl(&self, r: usize) -> usize {
        HEADER + r * self.stride
    }
}

impl Words for SegWords<'_> {
    fn barrier(&self) -> &AtomicU64 {
        self.seg.u64_at(0)
    }
    fn lock(&self, t: usize) -> &AtomicU64 {
        self.seg.u64_at(self.ctl(t))
    }
    fn posts(&self, o: usize, w: usize) -> &AtomicU64 {
        self.seg.u64_at(self.ctl(o) + MASKS + 8 * w)
    }
    fn completes(&self, t: usize, w: usize) -> &AtomicU64 {
        self.seg
            .u64_at(self.ctl(t) + MASKS + 8 * (self.mask_words + w))
    }
}

/// The passive-target locks of a window at one member as the host's fast path takes them
/// ([`DirectLocks`], lent through the view): the epochs' own [`Passive`] on the segment's
/// lock words.
#[derive(Debug)]
struct SegLocks {
    seg: Rc<Segment>,
    stride: usize,
    mask_words: usize,
    passive: Rc<Passive>,
}

impl SegLocks {
    #[inline]
    fn words(&self) -> SegWords<'_> {
        SegWords {
            seg: &self.seg,
            stride: self.stride,
            mask_words: self.mask_words,
        }
    }
}

impl DirectLocks for SegLocks {
    fn lock(&self, t: usize, kind: LockKind, nocheck: bool) -> bool {
        self.passive.try_lock(&self.words(), t, kind, nocheck)
    }

    fn unlock(&self, t: usize) -> Option<bool> {
        self.passive.try_unlock(&self.words(), t)
    }

    fn lock_all(&self, nocheck: bool) -> bool {
        self.passive.try_lock_all(&self.words(), nocheck)
    }

    fn unlock_all(&self) -> bool {
        self.passive.try_unlock_all(&self.words())
    }
}

/// One window of osc-sm at one member.
#[derive(Debug)]
pub struct SmModule {
    seg: Rc<Segment>,
    me: usize,
    plan: Plan,
    epochs: Epochs,
    next_id: OpId,
    /// Results of fetching operations not yet polled (the others are done when issued).
    results: HashMap<OpId, Result<Vec<u8>, OscError>>,
    host: Option<HostAccumulate>,
    /// The accumulate lock words, CPU atomics and typed loops: also lent to the host through
    /// the view.
    kernel: Rc<Kernel>,
    /// Every member's memory and the epoch checks as flags, for the host's fast paths
    /// ([`OscDirect::view`]); refreshed after every synchronization step the module takes
    /// (the view's own locks set them themselves).
    view: Rc<DirectView>,
}

impl SmModule {
    /// Map the window's segment (collective over `setup`) and make the module.
    pub fn new(
        config: WinConfig,
        setup: &mut dyn OscSetup,
        atomics: bool,
    ) -> Result<Self, OscError> {
        let sizes: Vec<u64> = config.targets.iter().map(|t| t.size).collect();
        let plan = Plan::new(&sizes)?;
        let seg = Rc::new(Segment::create(setup, config.rank, plan.len)?);
        tracing::debug!(
            members = sizes.len(),
            bytes = plan.len,
            overhead = plan.overhead(),
            "osc-sm: window segment mapped"
        );
        let locks = (0..sizes.len())
            .map(|r| HEADER + r * plan.stride + ACC_LOCK)
            .collect();
        let kernel = Rc::new(Kernel::new(
            seg.clone(),
            &plan.parts,
            locks,
            atomics,
            config.host,
        ));
        let epochs = Epochs::new(config.rank, sizes.len(), config.no_locks);
        let locks = Rc::new(SegLocks {
            seg: seg.clone(),
            stride: plan.stride,
            mask_words: plan.parts.len().div_ceil(64),
            passive: epochs.passive(),
        });
        let view = Rc::new(
            DirectView::new(
                plan.parts
                    .iter()
                    .zip(&config.targets)
                    .map(|(&(off, size), t)| DirectTarget {
                        base: seg.addr(off),
                        size: size as u64,
                        disp_unit: t.disp_unit,
                    })
                    .collect(),
            )
            .with_atomics(kernel.clone())
            .with_locks(locks),
        );
        Ok(Self {
            seg,
            me: config.rank,
            epochs,
            plan,
            next_id: 1,
            results: HashMap::new(),
            host: config.host,
            kernel,
            view,
        })
    }

    /// Bring the view's flags in line with the epochs (after a synchronization step: the
    /// only calls that change them). O(members): the cost of a synchronization, not of an
    /// operation.
    fn refresh_view(&self) {
        self.epochs.view_flags(
            |t, open| self.view.set_access(t, open),
            |t, ok| self.view.set_flush(t, ok),
        );
    }

    fn part(&self, r: usize) -> UserBuf {
        let (off, len) = self.plan.parts[r];
        self.seg.user_buf(off, len)
    }

    fn words(&self) -> SegWords<'_> {
        SegWords {
            seg: &self.seg,
            stride: self.plan.stride,
            mask_words: self.plan.parts.len().div_ceil(64),
        }
    }

    /// The segment offset and length of `run` at `addr` of `target`, checked to lie inside
    /// the target's memory (the epoch is the caller's to check: [`Epochs::check_access`]).
    #[inline]
    fn place(
        &self,
        target: usize,
        addr: u64,
        (off, len): (i64, u64),
    ) -> Result<(usize, usize), OscError> {
        let (base, size) = self.plan.parts[target];
        let lo = i128::from(addr) + i128::from(off);
        let hi = lo + i128::from(len);
        if lo < 0 || hi > size as i128 {
            return Err(OscError::Range(format!(
                "bytes {lo}..{hi} of rank {target}'s window are outside it ({size} bytes)"
            )));
        }
        Ok((base + lo as usize, len as usize))
    }

    /// The segment offsets and lengths of `runs` (a layout's) at `addr` of `target`, every
    /// one checked to lie inside the target's memory, and their total length.
    fn locate(
        &self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
    ) -> Result<(Runs, usize), OscError> {
        self.epochs.check_access(target)?;
        let place = |&run: &(i64, u64)| self.place(target, addr, run);
        // One run (a predefined or contiguous target type) needs no allocation.
        match runs {
            [] => Ok((Runs::Many(Vec::new()), 0)),
            [one] => {
                let r = place(one)?;
                Ok((Runs::One([r]), r.1))
            }
            runs => {
                let v = runs
                    .iter()
                    .filter(|&&(_, l)| l > 0)
                    .map(place)
                    .collect::<Result<Vec<_>, _>>()?;
                // Each run is inside a part of at most `usize` bytes, but runs may repeat.
                let total = v
                    .iter()
                    .try_fold(0usize, |t, &(_, l)| t.checked_add(l))
                    .ok_or_else(|| {
                        OscError::Arg(
                            "the target layout covers more bytes than fit in memory".into(),
                        )
                    })?;
                Ok((Runs::Many(v), total))
            }
        }
    }

    /// Copy `data` into `runs` (located), after checking it fills them exactly.
    fn write_runs(&self, runs: &Runs, total: usize, data: &[u8]) -> Result<(), OscError> {
        if data.len() != total {
            return Err(OscError::Arg(format!(
                "put: {} bytes of data for a target layout of {total}",
                data.len()
            )));
        }
        let mut at = 0;
        for &(off, len) in runs.iter() {
            self.seg.write(off, &data[at..at + len]);
            at += len;
        }
        Ok(())
    }

    /// Copy `runs` (located) into `out`, after checking it holds them exactly.
    fn read_runs(&self, runs: &Runs, total: usize, out: &mut [u8]) -> Result<(), OscError> {
        if out.len() != total {
            return Err(OscError::Arg(format!(
                "get: a {}-byte buffer for a target layout of {total}",
                out.len()
            )));
        }
        let mut at = 0;
        for &(off, len) in runs.iter() {
            self.seg.read(off, &mut out[at..at + len]);
            at += len;
        }
        Ok(())
    }

    /// Accumulate `data` into `runs` (located) of `target`, the previous contents into `old`.
    /// Every check comes before the first byte is written.
    #[allow(clippy::too_many_arguments)]
    fn accumulate_runs(
        &self,
        target: usize,
        runs: &Runs,
        total: usize,
        op: AccOp,
        elem: Elem,
        data: &[u8],
        mut old: Option<&mut [u8]>,
    ) -> Result<(), OscError> {
        if !elem.supports(op) {
            return Err(OscError::Op(format!(
                "accumulate: {op:?} is not defined on {elem:?} elements"
            )));
        }
        let es = elem.size();
        if (op != AccOp::NoOp && data.len() != total) || !total.is_multiple_of(es) {
            return Err(OscError::Arg(format!(
                "accumulate: {} bytes of data for a target layout of {total} bytes, which must hold whole {es}-byte {elem:?} elements",
                data.len()
            )));
        }
        // An element may span runs (`MPI_SHORT_INT`: the padding between its value and its
        // index splits it): then computed on the gathered elements, like the host's.
        let split = runs.iter().any(|&(_, l)| !l.is_multiple_of(es));
        if let Some(o) = &old {
            if o.len() != total {
                return Err(OscError::Arg(format!(
                    "accumulate: a {}-byte result buffer for a target layout of {total} bytes",
                    o.len()
                )));
            }
        }
        if !split
            && runs
                .iter()
                .all(|&(off, _)| self.kernel.atomic_path(elem, off))
        {
            let mut at = 0;
            for &(off, len) in runs.iter() {
                let data = if op == AccOp::NoOp {
                    data
                } else {
                    &data[at..at + len]
                };
                let old = old.as_deref_mut().map(|o| &mut o[at..at + len]);
                self.kernel.rmw_run(off, len, op, elem, data, old);
                at += len;
            }
            return Ok(());
        }
        let seg = &self.seg;
        let host = self.host;
        if (split && op != AccOp::NoOp)
            || (elem.host_arithmetic() && !matches!(op, AccOp::Replace | AccOp::NoOp))
        {
            // The host's arithmetic may refuse the operation: compute on a copy, write back
            // only if it succeeded (nothing written otherwise).
            return self.kernel.locked(target, || {
                let mut cur = vec![0u8; total];
                let mut at = 0;
                for &(off, len) in runs.iter() {
                    seg.read(off, &mut cur[at..at + len]);
                    at += len;
                }
                if let Some(old) = old {
                    old.copy_from_slice(&cur);
                }
                accumulate_with(op, elem, &mut cur, data, host)?;
                let mut at = 0;
                for &(off, len) in runs.iter() {
                    seg.write(off, &cur[at..at + len]);
                    at += len;
                }
                Ok(())
            });
        }
        // In place, run by run, under one hold of the target's lock: a typed loop over each
        // run (vectorized), which cannot fail (checked above).
        self.kernel.locked(target, || {
            let mut at = 0;
            for &(off, len) in runs.iter() {
                if let Some(old) = old.as_deref_mut() {
                    seg.read(off, &mut old[at..at + len]);
                }
                if op != AccOp::NoOp {
                    seg.combine(off, len, &data[at..at + len], |t, o| {
                        accumulate_with(op, elem, t, o, host)
                    })?;
                }
                at += len;
            }
            Ok(())
        })
    }

    /// Compare-and-swap at `off` (located, one element of `elem`) of `target`.
    fn cas_at(
        &self,
        target: usize,
        runs: &Runs,
        elem: Elem,
        compare: &[u8],
        value: &[u8],
        old: &mut [u8],
    ) -> Result<(), OscError> {
        let es = elem.size();
        if compare.len() != es || value.len() != es || old.len() != es {
            return Err(OscError::Arg(format!(
                "compare_and_swap: compare ({} bytes), value ({} bytes) and result ({} bytes) must be one {es}-byte {elem:?} element",
                compare.len(),
                value.len(),
                old.len()
            )));
        }
        let off = runs[0].0;
        if self.kernel.cas_at(target, off, elem, compare, value, old) {
            return Ok(());
        }
        // Refused by the kernel: a result buffer over the target (then through a copy), or
        // an element of another size than 1, 2, 4 or 8 bytes (bytewise under the lock).
        let mut prev = [0u8; 8];
        if es <= 8
            && self
                .kernel
                .cas_at(target, off, elem, compare, value, &mut prev[..es])
        {
            old.copy_from_slice(&prev[..es]);
            return Ok(());
        }
        let seg = &self.seg;
        self.kernel.locked(target, || {
            seg.read(off, old);
            if old == compare {
                seg.write(off, value);
            }
        });
        Ok(())
    }

    fn finish(&mut self, result: Option<Result<Vec<u8>, OscError>>) -> OpId {
        let id = self.next_id;
        self.next_id += 1;
        if let Some(r) = result {
            self.results.insert(id, r);
        }
        id
    }

    /// Read `runs` at `addr` of `target` into `out`: the one copy of [`OscDirect::get_now`]
    /// and [`OscModule::get`].
    fn get_into(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        out: Out<'_>,
    ) -> Result<(), OscError> {
        let (runs, total) = self.locate(target, addr, runs)?;
        self.read_runs(&runs, total, out.sized(total))
    }

    /// Accumulate `data` into `runs` at `addr` of `target`, the previous contents into
    /// `old`: the one copy of [`OscDirect::accumulate_now`] and [`OscModule::accumulate`].
    #[allow(clippy::too_many_arguments)]
    fn accumulate_into(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        op: AccOp,
        elem: Elem,
        data: &[u8],
        old: Option<Out<'_>>,
    ) -> Result<(), OscError> {
        let (runs, total) = self.locate(target, addr, runs)?;
        let old = old.map(|o| o.sized(total));
        self.accumulate_runs(target, &runs, total, op, elem, data, old)
    }
}

/// Where a fetching operation's result lands: the caller's buffer (the direct calls: its
/// length is checked against the target layout's) or a new one of the layout's length (the
/// queued calls, whose result the host collects later).
enum Out<'a> {
    Given(&'a mut [u8]),
    New(&'a mut Vec<u8>),
}

impl<'a> Out<'a> {
    /// The buffer, a new one made `total` bytes long (after the layout was checked: a
    /// refused operation allocates nothing).
    fn sized(self, total: usize) -> &'a mut [u8] {
        match self {
            Out::Given(b) => b,
            Out::New(v) => {
                v.resize(total, 0);
                v
            }
        }
    }
}

impl OscModule for SmModule {
    fn component_name(&self) -> &'static str {
        "sm"
    }

    fn put(
        &mut self,
        target: usize,
        addr: u64,
        layout: &Layout,
        data: Vec<u8>,
    ) -> Result<OpId, OscError> {
        self.put_now(target, addr, &layout.runs, &data)?;
        Ok(self.finish(None))
    }

    fn get(&mut self, target: usize, addr: u64, layout: &Layout) -> Result<OpId, OscError> {
        let mut out = Vec::new();
        self.get_into(target, addr, &layout.runs, Out::New(&mut out))?;
        Ok(self.finish(Some(Ok(out))))
    }

    fn accumulate(
        &mut self,
        target: usize,
        addr: u64,
        layout: &Layout,
        op: AccOp,
        elem: Elem,
        data: Vec<u8>,
        fetch: bool,
    ) -> Result<OpId, OscError> {
        let mut old = Vec::new();
        let out = fetch.then_some(Out::New(&mut old));
        self.accumulate_into(target, addr, &layout.runs, op, elem, &data, out)?;
        Ok(self.finish(fetch.then_some(Ok(old))))
    }

    fn compare_and_swap(
        &mut self,
        target: usize,
        addr: u64,
        elem: Elem,
        compare: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<OpId, OscError> {
        let mut old = vec![0u8; elem.size()];
        self.compare_and_swap_now(target, addr, elem, &compare, &value, &mut old)?;
        Ok(self.finish(Some(Ok(old))))
    }

    fn poll_op(&mut self, id: OpId) -> Option<Result<Vec<u8>, OscError>> {
        if let Some(r) = self.results.remove(&id) {
            return Some(r);
        }
        Some(if id > 0 && id < self.next_id {
            Ok(Vec::new())
        } else {
            Err(OscError::Arg(format!("unknown operation {id}")))
        })
    }

    fn sync(&mut self, call: SyncCall) -> Result<(), OscError> {
        if let SyncCall::Flush(t) | SyncCall::FlushLocal(t) = call {
            return self.epochs.flush(t);
        }
        let w = SegWords {
            seg: &self.seg,
            stride: self.plan.stride,
            mask_words: self.plan.parts.len().div_ceil(64),
        };
        // A post opens an exposure epoch only: no flag of the view changes.
        let post = matches!(call, SyncCall::Post(_));
        let r = self.epochs.sync(call, &w);
        if !post {
            self.refresh_view();
        }
        r
    }

    fn sync_done(&mut self) -> Option<Result<(), OscError>> {
        if !self.epochs.waiting() {
            return Some(Ok(()));
        }
        let w = SegWords {
            seg: &self.seg,
            stride: self.plan.stride,
            mask_words: self.plan.parts.len().div_ceil(64),
        };
        let locks = self.epochs.waiting_for_locks();
        let r = self.epochs.poll(&w);
        // Also when still waiting for locks: a lock_all's grants come one by one. (Nothing
        // else changes a flag before it ends: a start or a wait that goes on polls the
        // words only.)
        if r.is_some() || locks {
            self.refresh_view();
        }
        r
    }

    fn exposure_complete(&self) -> bool {
        self.epochs.exposure_complete(&self.words())
    }

    fn progress(&mut self, _port: &mut dyn OscPort) -> usize {
        // Nothing travels: every operation was applied when issued.
        0
    }

    fn attach(&mut self, _region: UserBuf) -> Result<(), OscError> {
        Err(OscError::Attach(
            "MPI_Win_attach on a window not made by MPI_Win_create_dynamic".into(),
        ))
    }

    fn detach(&mut self, _addr: u64) -> Result<(), OscError> {
        Err(OscError::Attach(
            "MPI_Win_detach on a window not made by MPI_Win_create_dynamic".into(),
        ))
    }

    fn direct(&self) -> bool {
        true
    }

    fn shared_part(&self, rank: usize) -> Option<UserBuf> {
        (rank < self.plan.parts.len()).then(|| self.part(rank))
    }

    fn direct_ops(&mut self) -> Option<&mut dyn OscDirect> {
        Some(self)
    }
}

impl OscDirect for SmModule {
    fn put_now(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        data: &[u8],
    ) -> Result<(), OscError> {
        // One run (a predefined or contiguous target type: OSU's loops), its checks in line.
        if let [run] = *runs {
            self.epochs.check_access(target)?;
            let (at, len) = self.place(target, addr, run)?;
            return self.write_runs(&Runs::One([(at, len)]), len, data);
        }
        let (runs, total) = self.locate(target, addr, runs)?;
        self.write_runs(&runs, total, data)
    }

    fn get_now(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        out: &mut [u8],
    ) -> Result<(), OscError> {
        if let [run] = *runs {
            self.epochs.check_access(target)?;
            let (at, len) = self.place(target, addr, run)?;
            return self.read_runs(&Runs::One([(at, len)]), len, out);
        }
        self.get_into(target, addr, runs, Out::Given(out))
    }

    fn accumulate_now(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        op: AccOp,
        elem: Elem,
        data: &[u8],
        old: Option<&mut [u8]>,
    ) -> Result<(), OscError> {
        // One run (a predefined or contiguous target type: OSU's loops and the C library's
        // fast path), its checks in line as `put_now`'s: no layout located.
        if let [run] = *runs {
            self.epochs.check_access(target)?;
            let (off, len) = self.place(target, addr, run)?;
            let mut old = old;
            if self
                .kernel
                .accumulate_at(target, off, len, op, elem, data, old.as_deref_mut())
            {
                return Ok(());
            }
            // What the kernel does not take (pairs, the host's elements, a split element,
            // bad input, whose error comes from here).
            let r = Runs::One([(off, len)]);
            return self.accumulate_runs(target, &r, len, op, elem, data, old);
        }
        self.accumulate_into(target, addr, runs, op, elem, data, old.map(Out::Given))
    }

    fn compare_and_swap_now(
        &mut self,
        target: usize,
        addr: u64,
        elem: Elem,
        compare: &[u8],
        value: &[u8],
        old: &mut [u8],
    ) -> Result<(), OscError> {
        // One element: its checks in line, as `put_now`'s (no layout located).
        self.epochs.check_access(target)?;
        let run = self.place(target, addr, (0, elem.size() as u64))?;
        self.cas_at(target, &Runs::One([run]), elem, compare, value, old)
    }

    fn flush_now(&mut self, target: Option<usize>) -> Result<(), OscError> {
        // No wait: `sync_done` is done at once after a flush.
        self.epochs.flush(target)
    }

    fn view(&self) -> Option<Rc<DirectView>> {
        Some(self.view.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmca_framework::osc::TargetInfo;

    /// A window of one member: its collective steps are trivial.
    struct Alone;

    impl OscSetup for Alone {
        fn bcast(&mut self, _root: usize, _data: &mut [u8]) -> Result<(), OscError> {
            Ok(())
        }
        fn all(&mut self, ok: bool) -> Result<bool, OscError> {
            Ok(ok)
        }
    }

    fn module(size: u64, atomics: bool) -> SmModule {
        let config = WinConfig {
            rank: 0,
            targets: vec![TargetInfo { size, disp_unit: 1 }],
            same_node: true,
            dynamic: false,
            no_locks: false,
            allocated: true,
            shared: true,
            host: None,
            rdma: false,
            counters: Default::default(),
        };
        SmModule::new(config, &mut Alone, atomics).unwrap()
    }

    fn fence(m: &mut SmModule, succeed: bool) {
        m.sync(SyncCall::Fence { succeed }).unwrap();
        assert_eq!(m.sync_done(), Some(Ok(())));
    }

    fn i32s(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    #[test]
    fn parts_follow_each_other_with_no_gap() {
        let p = Plan::new(&[12, 0, 5, 64]).unwrap();
        assert_eq!(p.parts[0].0 % 64, 0);
        assert_eq!(p.parts[1], (p.parts[0].0 + 12, 0));
        assert_eq!(p.parts[2], (p.parts[0].0 + 12, 5));
        assert_eq!(p.parts[3].0, p.parts[0].0 + 17);
        assert_eq!(p.len, p.parts[3].0 + 64);
        assert!(Plan::new(&[u64::MAX, u64::MAX]).is_err());
    }

    #[test]
    fn every_operation_on_one_members_segment() {
        for atomics in [true, false] {
            let mut m = module(32, atomics);
            assert!(matches!(
                m.put(0, 0, &Layout::contiguous(4), vec![0; 4]),
                Err(OscError::Sync(_))
            ));
            fence(&mut m, true);
            m.put(0, 0, &Layout::contiguous(8), i32s(&[5, 6])).unwrap();
            let layout = Layout {
                runs: vec![(0, 4), (-4, 4)],
            };
            let id = m.get(0, 4, &layout).unwrap();
            assert_eq!(m.poll_op(id), Some(Ok(i32s(&[6, 5]))));
            let id = m
                .accumulate(
                    0,
                    0,
                    &Layout::contiguous(8),
                    AccOp::Sum,
                    Elem::I32,
                    i32s(&[1, 2]),
                    true,
                )
                .unwrap();
            assert_eq!(m.poll_op(id), Some(Ok(i32s(&[5, 6]))));
            let id = m
                .accumulate(
                    0,
                    0,
                    &Layout::contiguous(8),
                    AccOp::Max,
                    Elem::I32,
                    i32s(&[7, 0]),
                    false,
                )
                .unwrap();
            assert_eq!(m.poll_op(id), Some(Ok(Vec::new())));
            let id = m
                .compare_and_swap(0, 4, Elem::I32, i32s(&[8]), i32s(&[80]))
                .unwrap();
            assert_eq!(m.poll_op(id), Some(Ok(i32s(&[8]))));
            let id = m
                .accumulate(
                    0,
                    0,
                    &Layout::contiguous(8),
                    AccOp::NoOp,
                    Elem::I32,
                    Vec::new(),
                    true,
                )
                .unwrap();
            assert_eq!(m.poll_op(id), Some(Ok(i32s(&[7, 80]))));
            // Bytes (the lock path on either setting), doubles.
            m.accumulate(
                0,
                9,
                &Layout::contiguous(2),
                AccOp::BXor,
                Elem::U8,
                vec![3, 5],
                false,
            )
            .unwrap();
            m.accumulate(
                0,
                16,
                &Layout::contiguous(8),
                AccOp::Sum,
                Elem::F64,
                1.5f64.to_ne_bytes().to_vec(),
                false,
            )
            .unwrap();
            m.accumulate(
                0,
                16,
                &Layout::contiguous(8),
                AccOp::Prod,
                Elem::F64,
                3.0f64.to_ne_bytes().to_vec(),
                false,
            )
            .unwrap();
            let id = m.get(0, 8, &Layout::contiguous(16)).unwrap();
            let got = m.poll_op(id).unwrap().unwrap();
            assert_eq!(&got[..4], &[0, 3, 5, 0]);
            assert_eq!(f64::from_ne_bytes(got[8..].try_into().unwrap()), 4.5);
            fence(&mut m, false);
        }
    }

    #[test]
    fn the_view_follows_the_epochs_and_the_memory() {
        use rmca_framework::osc::LockKind;
        let mut m = module(32, false);
        let v = m.view().unwrap();
        let base = m.part(0).addr();
        assert_eq!(v.len(), 1);
        // No epoch: nothing placed, no flush; the module refuses the same.
        assert_eq!(v.place(0, 0, 4), None);
        assert!(!v.may_flush(Some(0)) && !v.may_flush(None));
        assert!(matches!(m.flush_now(Some(0)), Err(OscError::Sync(_))));
        // A fence opens access to every member, but no flush (not a passive epoch).
        fence(&mut m, true);
        assert_eq!(v.place(0, 4, 4), Some(base + 4));
        assert!(!v.may_flush(Some(0)));
        // Bounds: the last byte, past it, before the start, zero bytes, another rank.
        assert_eq!(v.place(0, 31, 1), Some(base + 31));
        assert_eq!(v.place(0, 31, 2), None);
        assert_eq!(v.place(0, -1, 1), None);
        assert_eq!(v.place(0, isize::MAX, 1), None);
        assert_eq!(v.place(0, 0, 0), None);
        assert_eq!(v.place(1, 0, 1), None);
        assert!(!v.may_flush(Some(1)));
        fence(&mut m, false);
        assert_eq!(v.place(0, 0, 1), None);
        // A lock: access and flush until the unlock.
        m.sync(SyncCall::Lock {
            kind: LockKind::Shared,
            target: 0,
            nocheck: false,
        })
        .unwrap();
        assert_eq!(m.sync_done(), Some(Ok(())));
        assert_eq!(v.place(0, 0, 32), Some(base));
        assert!(v.may_flush(Some(0)) && v.may_flush(None));
        m.flush_now(Some(0)).unwrap();
        m.flush_now(None).unwrap();
        assert!(matches!(m.flush_now(Some(1)), Err(OscError::Rank(_))));
        m.sync(SyncCall::Unlock(0)).unwrap();
        assert_eq!(m.sync_done(), Some(Ok(())));
        assert_eq!(v.place(0, 0, 1), None);
        assert!(!v.may_flush(Some(0)) && !v.may_flush(None));
        // lock_all, then the free: nothing open after it.
        m.sync(SyncCall::LockAll { nocheck: false }).unwrap();
        assert_eq!(m.sync_done(), Some(Ok(())));
        assert!(v.place(0, 0, 1).is_some() && v.may_flush(None));
        m.sync(SyncCall::UnlockAll).unwrap();
        assert_eq!(m.sync_done(), Some(Ok(())));
        m.sync(SyncCall::Free).unwrap();
        assert_eq!(m.sync_done(), Some(Ok(())));
        assert_eq!(v.place(0, 0, 1), None);
        assert!(!v.may_flush(None));
    }

    #[test]
    fn bad_input_is_refused_and_writes_nothing() {
        let mut m = module(8, true);
        fence(&mut m, true);
        let before = m.part(0).as_slice().to_vec();
        // A run past the end after one inside: nothing written.
        let layout = Layout {
            runs: vec![(0, 4), (6, 4)],
        };
        assert!(matches!(
            m.put(0, 0, &layout, vec![9; 8]),
            Err(OscError::Range(_))
        ));
        assert!(matches!(
            m.accumulate(0, 0, &layout, AccOp::Sum, Elem::I32, vec![9; 8], false),
            Err(OscError::Range(_))
        ));
        assert!(matches!(
            m.put(0, u64::MAX, &Layout::contiguous(1), vec![9]),
            Err(OscError::Range(_))
        ));
        assert!(matches!(
            m.get(1, 0, &Layout::contiguous(1)),
            Err(OscError::Rank(_))
        ));
        assert!(matches!(
            m.accumulate(
                0,
                0,
                &Layout::contiguous(8),
                AccOp::BAnd,
                Elem::F64,
                vec![0; 8],
                false
            ),
            Err(OscError::Op(_))
        ));
        assert!(matches!(
            m.accumulate(
                0,
                0,
                &Layout::contiguous(6),
                AccOp::Sum,
                Elem::I32,
                vec![0; 6],
                false
            ),
            Err(OscError::Arg(_))
        ));
        assert!(matches!(
            m.compare_and_swap(0, 6, Elem::I32, vec![0; 4], vec![1; 4]),
            Err(OscError::Range(_))
        ));
        assert_eq!(m.part(0).as_slice(), &before[..]);
        assert!(matches!(m.poll_op(999), Some(Err(OscError::Arg(_)))));
        fence(&mut m, false);
    }

    #[test]
    fn the_views_locks_are_the_modules() {
        let mut m = module(16, false);
        let v = m.view().unwrap();
        let base = m.part(0).addr();
        let lock = |kind| SyncCall::Lock {
            kind,
            target: 0,
            nocheck: false,
        };
        // The view's lock: the module's operations and flush see it, its unlock ends it.
        assert!(v.lock(0, LockKind::Exclusive, false));
        assert_eq!(v.place(0, 0, 16), Some(base));
        m.put_now(0, 0, &[(0, 4)], &[1, 2, 3, 4]).unwrap();
        m.flush_now(Some(0)).unwrap();
        assert!(!v.lock(0, LockKind::Shared, false), "locked twice");
        assert!(matches!(
            m.sync(lock(LockKind::Shared)),
            Err(OscError::Sync(_))
        ));
        m.sync(SyncCall::Unlock(0)).unwrap();
        assert_eq!(m.sync_done(), Some(Ok(())));
        assert_eq!(v.place(0, 0, 1), None);
        assert!(matches!(
            m.put_now(0, 0, &[(0, 1)], &[9]),
            Err(OscError::Sync(_))
        ));
        assert_eq!(m.part(0).as_slice()[..4], [1, 2, 3, 4]);
        // The module's lock, the view's unlock; then no lock to unlock.
        m.sync(lock(LockKind::Shared)).unwrap();
        assert_eq!(m.sync_done(), Some(Ok(())));
        assert!(v.unlock(0));
        assert!(!v.may_flush(None) && v.place(0, 0, 1).is_none());
        assert!(matches!(m.flush_now(None), Err(OscError::Sync(_))));
        assert!(!v.unlock(0) && !v.unlock_all());
        // lock_all by the view, unlock_all by the module.
        assert!(v.lock_all(false));
        m.flush_now(None).unwrap();
        assert!(!v.lock(0, LockKind::Shared, false) && !v.unlock(0));
        m.sync(SyncCall::UnlockAll).unwrap();
        assert_eq!(m.sync_done(), Some(Ok(())));
        assert!(v.place(0, 0, 1).is_none() && !v.may_flush(None));
        // A fence epoch open: the view's locks stand aside for the module.
        fence(&mut m, true);
        assert!(!v.lock(0, LockKind::Shared, false) && !v.lock_all(false));
        fence(&mut m, false);
        assert!(v.lock(0, LockKind::Exclusive, true), "MPI_MODE_NOCHECK");
        assert!(v.unlock(0));
        // Every lock word given back: the module's exclusive lock is granted at once.
        m.sync(lock(LockKind::Exclusive)).unwrap();
        assert_eq!(m.sync_done(), Some(Ok(())));
        assert!(!v.lock_all(false), "lock_all inside a lock epoch");
        assert!(v.unlock(0));
    }

    #[test]
    fn a_window_of_no_bytes_maps_its_control_words() {
        let mut m = module(0, true);
        assert!(m.shared_part(0).is_some_and(|p| p.is_empty()));
        fence(&mut m, true);
        assert!(matches!(
            m.put(0, 0, &Layout::contiguous(1), vec![1]),
            Err(OscError::Range(_))
        ));
        m.sync(SyncCall::Free).unwrap();
        assert_eq!(m.sync_done(), Some(Ok(())));
    }

    /// Element types and an operation each supports, for the reference comparison.
    fn elem_op() -> impl proptest::strategy::Strategy<Value = (Elem, AccOp)> {
        use proptest::prelude::*;
        let elems = [
            Elem::I8,
            Elem::I16,
            Elem::I32,
            Elem::I64,
            Elem::U8,
            Elem::U32,
            Elem::U64,
            Elem::F32,
            Elem::F64,
            Elem::PairI32,
            Elem::PairF64,
            Elem::PairI16,
            Elem::PairI64,
            Elem::PairF32,
            Elem::PairLongDouble,
        ];
        (0..elems.len(), 0..AccOp::ALL.len()).prop_filter_map(
            "op defined on elem",
            move |(e, o)| {
                let (e, o) = (elems[e], AccOp::ALL[o]);
                e.supports(o).then_some((e, o))
            },
        )
    }

    /// `v` as a C `long double` (x87 extended on x86, IEEE binary128 elsewhere).
    fn long_double(v: u8) -> [u8; 16] {
        if v == 0 {
            return [0; 16];
        }
        let e = 7 - v.leading_zeros();
        let bits = if cfg!(any(target_arch = "x86", target_arch = "x86_64")) {
            (u128::from(16383 + e) << 64) | (u128::from(v) << (63 - e))
        } else {
            (u128::from(16383 + e) << 112) | ((u128::from(v) << (112 - e)) & ((1 << 112) - 1))
        };
        bits.to_ne_bytes()
    }

    /// `n` elements of `elem` from `seed`: integers as they come, floats and pairs' values
    /// from small integers (so every result is exact and no NaN compares unequal).
    fn elements(elem: Elem, n: usize, seed: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            let b = seed[i % seed.len()].wrapping_add(i as u8);
            match elem {
                Elem::F32 => out.extend_from_slice(&f32::from(b % 16).to_ne_bytes()),
                Elem::F64 => out.extend_from_slice(&f64::from(b % 16).to_ne_bytes()),
                Elem::PairF64 => {
                    out.extend_from_slice(&f64::from(b % 4).to_ne_bytes());
                    out.extend_from_slice(&i32::from(b).to_ne_bytes());
                }
                Elem::PairI32 => {
                    out.extend_from_slice(&i32::from(b % 4).to_ne_bytes());
                    out.extend_from_slice(&i32::from(b).to_ne_bytes());
                }
                Elem::PairI16 | Elem::PairI64 | Elem::PairF32 | Elem::PairLongDouble => {
                    let v = b % 4;
                    match elem {
                        Elem::PairI16 => out.extend_from_slice(&i16::from(v).to_ne_bytes()),
                        Elem::PairI64 => out.extend_from_slice(&i64::from(v).to_ne_bytes()),
                        Elem::PairF32 => out.extend_from_slice(&f32::from(v).to_ne_bytes()),
                        _ => out.extend_from_slice(&long_double(v)),
                    }
                    out.extend_from_slice(&i32::from(b).to_ne_bytes());
                }
                _ => out.extend((0..elem.size()).map(|k| b.wrapping_mul(k as u8 + 7))),
            }
        }
        out
    }

    proptest::proptest! {
        /// Every accumulate, on either path, over any non-overlapping runs (gaps, descending
        /// order, misaligned starts; short runs and long ones, which the kernel's wide loops
        /// take), leaves the target and fetches what the framework's reference arithmetic
        /// computes on a gathered copy.
        #[test]
        fn accumulates_match_the_reference(
            (elem, op) in elem_op(),
            pieces in proptest::collection::vec(
                (0usize..3, proptest::prop_oneof![1usize..6, 40usize..300]),
                1..6,
            ),
            reverse: bool,
            shift in 0usize..3,
            seed in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..16),
            atomics: bool,
            fetch: bool,
            split: bool,
        ) {
            let es = elem.size();
            // Runs of whole elements with gaps between them, `shift` bytes from the start;
            // with `split`, pairs laid out as C pads `MPI_SHORT_INT` (value, 2 bytes of
            // padding, index): each element spans two runs.
            let mut runs = Vec::new();
            let mut at = shift;
            for &(gap, n) in &pieces {
                at += gap * es;
                if split && elem.is_pair() {
                    for _ in 0..n {
                        runs.push((at as i64, (es - 4) as u64));
                        runs.push(((at + es - 2) as i64, 4));
                        at += es + 2;
                    }
                } else {
                    runs.push((at as i64, (n * es) as u64));
                    at += n * es;
                }
            }
            if reverse {
                runs.reverse();
            }
            let size = at + 8;
            let mut m = module(size as u64, atomics);
            fence(&mut m, true);
            let before = elements(Elem::U8, size, &seed);
            m.put_now(0, 0, &[(0, size as u64)], &before).unwrap();
            let total: usize = runs.iter().map(|&(_, l)| l as usize).sum();
            let data = if op == AccOp::NoOp {
                Vec::new()
            } else {
                elements(elem, total / es, &seed[1..].iter().chain(&[3]).copied().collect::<Vec<_>>())
            };
            // The reference: gather, compute, scatter.
            let mut want = before.clone();
            let mut cur: Vec<u8> = runs
                .iter()
                .flat_map(|&(o, l)| want[o as usize..o as usize + l as usize].to_vec())
                .collect();
            let old_want = cur.clone();
            if op != AccOp::NoOp {
                rmca_framework::osc::accumulate(op, elem, &mut cur, &data).unwrap();
            }
            let mut k = 0;
            for &(o, l) in &runs {
                want[o as usize..o as usize + l as usize].copy_from_slice(&cur[k..k + l as usize]);
                k += l as usize;
            }
            let mut old = vec![0u8; total];
            m.accumulate_now(0, 0, &runs, op, elem, &data, fetch.then_some(&mut old[..])).unwrap();
            let mut got = vec![0u8; size];
            m.get_now(0, 0, &[(0, size as u64)], &mut got).unwrap();
            proptest::prop_assert_eq!(got, want);
            if fetch {
                proptest::prop_assert_eq!(old, old_want);
            }
            fence(&mut m, false);
        }
    }

    proptest::proptest! {
        /// The one-run entry of `accumulate_now` (the C library's fast path: its plain
        /// kernel, or the general one for atomics, pairs and host arithmetic) leaves the
        /// target and fetches exactly what the general entry (`OscModule::accumulate`, which
        /// locates a layout) does on a twin window, at any offset and element count.
        #[test]
        fn the_one_run_entry_matches_the_general_one(
            (elem, op) in elem_op(),
            n in 1usize..9,
            shift in 0usize..9,
            seed in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..16),
            atomics: bool,
            fetch: bool,
        ) {
            let es = elem.size();
            let size = shift + n * es + 8;
            let (mut a, mut b) = (module(size as u64, atomics), module(size as u64, atomics));
            fence(&mut a, true);
            fence(&mut b, true);
            let before = elements(Elem::U8, size, &seed);
            a.put_now(0, 0, &[(0, size as u64)], &before).unwrap();
            b.put_now(0, 0, &[(0, size as u64)], &before).unwrap();
            let data = if op == AccOp::NoOp {
                Vec::new()
            } else {
                elements(elem, n, &seed[1..].iter().chain(&[5]).copied().collect::<Vec<_>>())
            };
            let mut old = vec![0u8; n * es];
            a.accumulate_now(
                0,
                shift as u64,
                &[(0, (n * es) as u64)],
                op,
                elem,
                &data,
                fetch.then_some(&mut old[..]),
            )
            .unwrap();
            let layout = Layout::contiguous((n * es) as u64);
            let id = b.accumulate(0, shift as u64, &layout, op, elem, data, fetch).unwrap();
            let want_old = b.poll_op(id).unwrap().unwrap();
            let (mut got, mut want) = (vec![0u8; size], vec![0u8; size]);
            a.get_now(0, 0, &[(0, size as u64)], &mut got).unwrap();
            b.get_now(0, 0, &[(0, size as u64)], &mut want).unwrap();
            proptest::prop_assert_eq!(got, want);
            if fetch {
                proptest::prop_assert_eq!(old, want_old);
            }
        }
    }

    proptest::proptest! {
        /// The kernel the view lends the host (`DirectView::atomics`: the C library's fast
        /// path for the small accumulates, fetch-and-ops and compare-and-swaps) leaves the
        /// target and fetches what the module's general entry (`OscModule::accumulate`,
        /// `compare_and_swap`) does on a twin window, for every element type and operation
        /// (those it refuses included: it then writes nothing, and the general entry
        /// raises the error), on either accumulate path, at any offset and count.
        #[test]
        fn the_views_kernel_matches_the_general_entry(
            e in 0usize..Elem::ALL.len(),
            o in 0usize..AccOp::ALL.len(),
            n in 1usize..6,
            shift in 0usize..9,
            seed in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..16),
            atomics: bool,
            fetch: bool,
            cas: bool,
        ) {
            let (elem, op) = (Elem::ALL[e], AccOp::ALL[o]);
            let es = elem.size();
            let len = if cas { es } else { n * es };
            let size = shift + len + 8;
            let (mut a, mut b) = (module(size as u64, atomics), module(size as u64, atomics));
            fence(&mut a, true);
            fence(&mut b, true);
            let before = elements(Elem::U8, size, &seed);
            a.put_now(0, 0, &[(0, size as u64)], &before).unwrap();
            b.put_now(0, 0, &[(0, size as u64)], &before).unwrap();
            let view = a.view().unwrap();
            let kernel = view.atomics().unwrap();
            let off = view.offset(0, shift as isize, len).unwrap();
            let data = elements(elem, len / es, &seed[1..].iter().chain(&[5]).copied().collect::<Vec<_>>());
            let mut old = vec![0xa5u8; len];
            let (took, want_old) = if cas {
                // The compare value: the target's own bytes on odd seeds (a hit), else data.
                let compare = if seed[0] % 2 == 1 { before[shift..shift + es].to_vec() } else { data.clone() };
                let took = kernel.compare_and_swap(0, off, elem, &compare, &data, &mut old);
                let want = b.compare_and_swap(0, shift as u64, elem, compare, data.clone());
                let want_old = want.map(|id| b.poll_op(id).unwrap().unwrap());
                (took, want_old.ok())
            } else {
                let data = if op == AccOp::NoOp { Vec::new() } else { data };
                let took = kernel.accumulate(0, off, len, op, elem, &data, fetch.then_some(&mut old[..]));
                let layout = Layout::contiguous(len as u64);
                let want = b.accumulate(0, shift as u64, &layout, op, elem, data, fetch);
                let want_old = want.map(|id| b.poll_op(id).unwrap().unwrap());
                (took, want_old.ok())
            };
            let (mut got, mut want) = (vec![0u8; size], vec![0u8; size]);
            a.get_now(0, 0, &[(0, size as u64)], &mut got).unwrap();
            b.get_now(0, 0, &[(0, size as u64)], &mut want).unwrap();
            if took {
                proptest::prop_assert!(want_old.is_some(), "the kernel took what the module refuses");
                proptest::prop_assert_eq!(&got, &want);
                if cas || fetch {
                    proptest::prop_assert_eq!(old, want_old.unwrap());
                }
            } else {
                // Refused: nothing written, and the module decides (the element types and
                // operations the typed loops leave to it, or its error).
                proptest::prop_assert_eq!(&got, &before, "a refusal wrote the target");
                proptest::prop_assert!(old.iter().all(|&x| x == 0xa5), "a refusal wrote the result");
                proptest::prop_assert!(
                    want_old.is_none() || elem.is_pair() || elem.host_arithmetic() || (cas && !matches!(es, 1 | 2 | 4 | 8)),
                    "the kernel refused {op:?} on {elem:?} (cas {cas}), which the module takes"
                );
            }
        }
    }

    /// The one-run entries refuse what the general ones refuse, before writing a byte of
    /// the target or of the result: outside an epoch, outside the window, a data or result
    /// length that is not the run's, an operation the element type does not have.
    #[test]
    fn the_one_run_entries_refuse_bad_input_and_write_nothing() {
        for atomics in [false, true] {
            let mut m = module(16, atomics);
            let one = i32s(&[1]);
            let mut old = [7u8; 4];
            let run = [(0i64, 4u64)];
            assert!(matches!(
                m.accumulate_now(0, 0, &run, AccOp::Sum, Elem::I32, &one, Some(&mut old)),
                Err(OscError::Sync(_))
            ));
            fence(&mut m, true);
            m.put_now(0, 0, &[(0, 16)], &[9u8; 16]).unwrap();
            type Case<'a> = (u64, &'a [(i64, u64)], AccOp, Elem, &'a [u8]);
            let refused: [Case<'_>; 5] = [
                (16, &run, AccOp::Sum, Elem::I32, &one),
                (14, &run, AccOp::Sum, Elem::I32, &one),
                (0, &[(-4, 4)], AccOp::Sum, Elem::I32, &one),
                (0, &run, AccOp::Sum, Elem::I32, &[1, 0]),
                (0, &run, AccOp::BAnd, Elem::F32, &one),
            ];
            for (addr, runs, op, elem, data) in refused {
                let r = m.accumulate_now(0, addr, runs, op, elem, data, Some(&mut old));
                assert!(r.is_err(), "{addr} {runs:?} {op:?} {elem:?}: {r:?}");
                assert_eq!(old, [7u8; 4], "a refused accumulate wrote its result");
            }
            let mut short = [7u8; 2];
            assert!(m
                .accumulate_now(0, 0, &run, AccOp::Sum, Elem::I32, &one, Some(&mut short))
                .is_err());
            assert!(matches!(
                m.compare_and_swap_now(0, 13, Elem::U32, &one, &one, &mut old),
                Err(OscError::Range(_))
            ));
            assert_eq!(old, [7u8; 4], "a refused compare-and-swap wrote its result");
            let mut all = [0u8; 16];
            m.get_now(0, 0, &[(0, 16)], &mut all).unwrap();
            assert_eq!(all, [9u8; 16], "nothing written");
            fence(&mut m, false);
        }
    }
}
