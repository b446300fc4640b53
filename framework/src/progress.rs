//! The progress engine: every blocking call drives the PML and any registered progress
//! functions until its request completes.
//!
//! Waiting adapts to how busy the node is ([`WaitMode`], `mpi_wait_mode`): spinning keeps
//! small-message latency at memory speed when a peer is about to answer; yielding after a
//! short idle streak lets oversubscribed ranks (more ranks than cores) run their peers; and
//! blocking in the kernel, after a longer idle stretch, hands the core over until a sender
//! signals ([`IdleWaiter`], which a BTL provides: btl-shm's doorbell futex) instead of
//! competing with the peers for it through `sched_yield`. Ranks that each have a core spin
//! only; `auto` blocks when the node is oversubscribed (the runtime decides, see
//! [`set_wait_mode`]). The decisions are a sans-IO state machine ([`IdleState`], time passed
//! in); [`Backoff`] runs it in the wait loops. A blocked wait always ends within
//! [`IdlePolicy::block_timeout`], so a dead peer cannot hang it: the PML reports the failure
//! (peer timeouts, BTL errors) or the launcher, which watches every rank, tears the job down.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::params::{Level, Param, ParamRegistrar, ParamSpec};

/// Whether idle waits yield the CPU after [`Backoff::SPIN_PASSES`] (see [`set_yield_when_idle`]).
static YIELD_WHEN_IDLE: AtomicBool = AtomicBool::new(true);

/// Choose whether idle waits yield the CPU. Yielding lets oversubscribed ranks (more ranks
/// than cores) run their peers; a rank that has a core to itself should spin instead (Open
/// MPI's `mpi_yield_when_idle` default), because a `sched_yield` costs a system call, and on
/// a loaded machine hands the core to another process for a whole time slice while the peer's
/// answer waits. Equivalent to [`set_wait_mode`] with [`WaitMode::Yield`] or [`WaitMode::Spin`].
pub fn set_yield_when_idle(on: bool) {
    set_wait_mode(if on { WaitMode::Yield } else { WaitMode::Spin });
}

/// The current idle policy (true until [`set_yield_when_idle`] or
/// the runtime says otherwise): whether idle waits give the CPU away at all.
pub fn yield_when_idle() -> bool {
    YIELD_WHEN_IDLE.load(Ordering::Relaxed)
}

/// How a waiting rank spends the time nothing arrives (`mpi_wait_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitMode {
    /// [`WaitMode::Block`] when the node's ranks outnumber its cores, else [`WaitMode::Spin`]
    /// (decided by the runtime; never the current mode itself).
    Auto,
    /// Poll without pause: lowest latency, the core stays busy.
    Spin,
    /// Poll, and `sched_yield` after [`IdlePolicy::spin_passes`] idle passes.
    Yield,
    /// Poll, yield for [`IdlePolicy::yield_for`], then sleep in the kernel until a sender
    /// rings the BTL's doorbell or [`IdlePolicy::block_timeout`] passes.
    Block,
}

/// A wait mode name that is not one of [`WaitMode::NAMES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("mpi_wait_mode = {0:?}: not a wait mode (valid: auto, spin, yield, block)")]
pub struct BadWaitMode(pub String);

impl WaitMode {
    /// The parameter's values, in order.
    pub const NAMES: [&'static str; 4] = ["auto", "spin", "yield", "block"];

    /// The parameter value naming this mode.
    pub fn name(self) -> &'static str {
        match self {
            WaitMode::Auto => "auto",
            WaitMode::Spin => "spin",
            WaitMode::Yield => "yield",
            WaitMode::Block => "block",
        }
    }

    /// `auto` resolved for a node that is (or is not) oversubscribed; other modes unchanged.
    pub fn resolve(self, oversubscribed: bool) -> WaitMode {
        match self {
            WaitMode::Auto if oversubscribed => WaitMode::Block,
            WaitMode::Auto => WaitMode::Spin,
            m => m,
        }
    }
}

impl std::str::FromStr for WaitMode {
    type Err = BadWaitMode;
    fn from_str(s: &str) -> Result<Self, BadWaitMode> {
        match s {
            "auto" => Ok(WaitMode::Auto),
            "spin" => Ok(WaitMode::Spin),
            "yield" => Ok(WaitMode::Yield),
            "block" => Ok(WaitMode::Block),
            _ => Err(BadWaitMode(s.to_owned())),
        }
    }
}

/// Register the progress engine's parameters (`mpi_wait_mode`) with the MCA base's.
pub fn register_params(specs: &mut Vec<ParamSpec>) {
    let mut r = ParamRegistrar::new("mpi", "base", specs);
    r.add_global(
        Param::enumeration("mpi_wait_mode", "auto", &WaitMode::NAMES)
            .help(
                "How waiting ranks spend idle time: spin (poll only), yield (poll, then \
                 sched_yield after mpi_wait_spin_passes idle passes), block (poll, yield for \
                 mpi_wait_yield_us, then sleep \
                 until a sender rings the shared-memory doorbell, at most 1 ms at a time), auto \
                 (block when the node's ranks outnumber its CPUs, else spin). block needs every \
                 BTL in use able to wake a sleeper (shm, self); otherwise it yields",
            )
            .level(Level::Tuning),
    );
    r.add_global(
        Param::int("mpi_wait_spin_passes", Backoff::SPIN_PASSES.into())
            .range(0, 1 << 30)
            .help("Idle progress passes a wait spins before it yields (mpi_wait_mode yield, block)")
            .level(Level::Tuning),
    );
    r.add_global(
        Param::int("mpi_wait_yield_us", IdlePolicy::YIELD_US.into())
            .range(0, 1_000_000)
            .help("Microseconds a wait yields before it sleeps (mpi_wait_mode block)")
            .level(Level::Tuning),
    );
    r.add_global(
        Param::bool("mpi_async_progress", false)
            .help(
                "Start a progress thread at MPI_Init (C library) that drives the PML, the BTLs, \
                 registered progress functions and non-blocking collectives while the program \
                 computes outside MPI. It takes the library lock only when no MPI call holds \
                 it and sleeps when nothing is outstanding; every MPI call then takes the \
                 library lock (as at MPI_THREAD_MULTIPLE) whatever level was asked for",
            )
            .level(Level::Tuning),
    );
    r.add_global(
        Param::int("mpi_async_progress_cpu", -1)
            .range(-1, 65_535)
            .help(
                "CPU the progress thread is bound to; -1: it inherits the rank's binding (the \
                 rank's core: the thread sleeps while nothing is outstanding and runs short \
                 passes otherwise, so it shares the core rather than taking another rank's)",
            )
            .level(Level::Tuning),
    );
}

// ---- Asynchronous progress (mpi_async_progress) ----

/// The settings of the asynchronous progress thread (`mpi_async_progress`,
/// `mpi_async_progress_cpu`), set by the runtime at init for the bindings that run one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AsyncProgress {
    /// Whether a progress thread runs.
    pub enabled: bool,
    /// The CPU it is bound to (`None`: it inherits the rank's binding).
    pub cpu: Option<u32>,
}

static ASYNC_ENABLED: AtomicBool = AtomicBool::new(false);
/// `mpi_async_progress_cpu`, -1 for none.
static ASYNC_CPU: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

impl AsyncProgress {
    /// The settings of a resolved parameter store (defaults where a parameter is missing).
    pub fn from_params(params: &crate::params::ParamStore) -> Self {
        AsyncProgress {
            enabled: params.get_bool("mpi_async_progress").unwrap_or(false),
            cpu: params
                .get_int("mpi_async_progress_cpu")
                .ok()
                .and_then(|c| u32::try_from(c).ok()),
        }
    }
}

/// Record the progress thread's settings (the runtime, at init).
pub fn set_async_progress(cfg: AsyncProgress) {
    ASYNC_ENABLED.store(cfg.enabled, Ordering::Relaxed);
    let cpu = cfg.cpu.and_then(|c| i32::try_from(c).ok()).unwrap_or(-1);
    ASYNC_CPU.store(cpu, Ordering::Relaxed);
}

/// The progress thread's settings (off until the runtime says otherwise).
pub fn async_progress() -> AsyncProgress {
    AsyncProgress {
        enabled: ASYNC_ENABLED.load(Ordering::Relaxed),
        cpu: u32::try_from(ASYNC_CPU.load(Ordering::Relaxed)).ok(),
    }
}

/// What one attempt of the progress thread found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncPass {
    /// An MPI call of the program holds the library lock: it progresses by itself, and the
    /// thread does not queue for the lock (that would make the call hand it over).
    LockBusy,
    /// A progress pass ran.
    Ran {
        /// The events it handled.
        events: usize,
        /// Whether any operation is outstanding (started and not completed).
        outstanding: bool,
    },
}

/// What the progress thread does next ([`AsyncPacer::next`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncAction {
    /// Run another pass at once.
    Again,
    /// Sleep this long, then try again.
    Sleep(Duration),
    /// Nothing is outstanding: sleep until an MPI call of the program ends (it may have
    /// started an operation), or this long at most.
    AwaitWork(Duration),
}

/// The pacing of the progress thread, sans IO: fed what each attempt found, it says when to
/// try again. A pass with events is followed by another at once (a rendezvous transfer or a
/// collective is moving: each pass pushes it on); a few idle passes spin; then it sleeps
/// for increasing times up to [`AsyncPacer::MAX_IDLE_SLEEP`] while operations are
/// outstanding, and until woken when none is; while the program is inside MPI (the lock is
/// taken) it backs off up to [`AsyncPacer::MAX_BUSY_SLEEP`], since that call progresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AsyncPacer {
    idle: u32,
    idle_sleep: Duration,
    busy_sleep: Duration,
}

impl AsyncPacer {
    /// Idle passes (operations outstanding, nothing moved) spun before the first sleep.
    pub const SPIN_PASSES: u32 = 32;
    /// The first sleep after the spin passes; each idle sleep doubles it.
    pub const FIRST_IDLE_SLEEP: Duration = Duration::from_micros(10);
    /// The longest sleep while operations are outstanding: the most a peer's answer (a
    /// rendezvous's clear-to-send, a collective's next round) waits for the thread.
    pub const MAX_IDLE_SLEEP: Duration = Duration::from_micros(200);
    /// The first sleep while the program holds the lock.
    pub const FIRST_BUSY_SLEEP: Duration = Duration::from_micros(50);
    /// The longest sleep while the program holds the lock.
    pub const MAX_BUSY_SLEEP: Duration = Duration::from_millis(1);
    /// The longest sleep with nothing outstanding (a safety net: the end of any MPI call
    /// wakes the thread).
    pub const AWAIT_WORK: Duration = Duration::from_millis(100);

    /// The next action after an attempt that found `pass`.
    pub fn next(&mut self, pass: AsyncPass) -> AsyncAction {
        match pass {
            AsyncPass::LockBusy => {
                self.idle = 0;
                self.idle_sleep = Duration::ZERO;
                self.busy_sleep = grow(
                    self.busy_sleep,
                    Self::FIRST_BUSY_SLEEP,
                    Self::MAX_BUSY_SLEEP,
                );
                AsyncAction::Sleep(self.busy_sleep)
            }
            AsyncPass::Ran {
                events,
                outstanding,
            } => {
                self.busy_sleep = Duration::ZERO;
                if events > 0 {
                    self.idle = 0;
                    self.idle_sleep = Duration::ZERO;
                    return AsyncAction::Again;
                }
                if !outstanding {
                    self.idle = 0;
                    self.idle_sleep = Duration::ZERO;
                    return AsyncAction::AwaitWork(Self::AWAIT_WORK);
                }
                self.idle = self.idle.saturating_add(1);
                if self.idle <= Self::SPIN_PASSES {
                    return AsyncAction::Again;
                }
                self.idle_sleep = grow(
                    self.idle_sleep,
                    Self::FIRST_IDLE_SLEEP,
                    Self::MAX_IDLE_SLEEP,
                );
                AsyncAction::Sleep(self.idle_sleep)
            }
        }
    }
}

/// `current` doubled (`first` if zero), at most `max`.
fn grow(current: Duration, first: Duration, max: Duration) -> Duration {
    if current.is_zero() {
        first
    } else {
        (current * 2).min(max)
    }
}

/// Idle passes spinning before yielding (`mpi_wait_spin_passes`).
static SPIN_PASSES: AtomicU32 = AtomicU32::new(Backoff::SPIN_PASSES);
/// Microseconds of yielding before blocking (`mpi_wait_yield_us`).
static YIELD_US: AtomicU32 = AtomicU32::new(IdlePolicy::YIELD_US);

/// Set the thresholds of the idle policy (`mpi_wait_spin_passes`, `mpi_wait_yield_us`).
pub fn set_wait_thresholds(spin_passes: u32, yield_us: u32) {
    SPIN_PASSES.store(spin_passes, Ordering::Relaxed);
    YIELD_US.store(yield_us, Ordering::Relaxed);
}

/// The policy in force: [`wait_mode`] with the thresholds of [`set_wait_thresholds`].
pub fn wait_policy() -> IdlePolicy {
    IdlePolicy {
        spin_passes: SPIN_PASSES.load(Ordering::Relaxed),
        yield_for: Duration::from_micros(YIELD_US.load(Ordering::Relaxed).into()),
        ..IdlePolicy::new(wait_mode())
    }
}

/// The mode in force: 0 spin, 1 yield, 2 block (see [`set_wait_mode`]).
static WAIT_MODE: AtomicU8 = AtomicU8::new(1);

/// Set the wait mode of this process's wait loops (`Auto` counts as not oversubscribed:
/// resolve it first with [`WaitMode::resolve`]). The runtime calls it before the BTLs start,
/// so that they see whether senders must ring doorbells ([`wait_mode_blocks`]).
pub fn set_wait_mode(mode: WaitMode) {
    let m = match mode.resolve(false) {
        WaitMode::Spin | WaitMode::Auto => 0,
        WaitMode::Yield => 1,
        WaitMode::Block => 2,
    };
    WAIT_MODE.store(m, Ordering::Relaxed);
    YIELD_WHEN_IDLE.store(m != 0, Ordering::Relaxed);
}

/// The wait mode in force (never [`WaitMode::Auto`]).
pub fn wait_mode() -> WaitMode {
    match WAIT_MODE.load(Ordering::Relaxed) {
        0 => WaitMode::Spin,
        1 => WaitMode::Yield,
        _ => WaitMode::Block,
    }
}

/// Whether waits may sleep: a sender must then ring its receiver's doorbell after publishing
/// (one load of this flag is all a non-blocking job pays).
#[inline]
pub fn wait_mode_blocks() -> bool {
    WAIT_MODE.load(Ordering::Relaxed) == 2
}

/// What "block until something arrives" means for a transport: a BTL that can wake a
/// sleeping receiver implements it, and the progress engine sleeps through it.
///
/// The protocol avoids lost wake-ups without costing senders a system call per message:
/// the waiter [`arm`](IdleWaiter::arm)s (announces it will sleep), runs one more progress
/// pass, and only if that pass found nothing calls [`block`](IdleWaiter::block); a sender
/// that publishes after the announcement sees it and wakes the waiter, one published before
/// it is found by the extra pass.
pub trait IdleWaiter: Send + Sync {
    /// Announce that this process is about to sleep (a sequentially consistent store).
    fn arm(&self);
    /// Sleep until a sender signals, or `timeout` passes; returns at once if one signalled
    /// since [`arm`](IdleWaiter::arm).
    fn block(&self, timeout: Duration);
    /// No longer about to sleep: senders stop signalling.
    fn disarm(&self);
}

/// The waiter of this process (set by the BTL that can wake it; see [`set_idle_waiter`]).
static IDLE_WAITER: Mutex<Option<Arc<dyn IdleWaiter>>> = Mutex::new(None);

/// Install (or with `None` remove) the waiter blocked waits sleep on. Without one,
/// [`WaitMode::Block`] yields instead of sleeping.
pub fn set_idle_waiter(waiter: Option<Arc<dyn IdleWaiter>>) {
    *IDLE_WAITER.lock().unwrap_or_else(|p| p.into_inner()) = waiter;
}

/// The installed waiter, if any.
pub fn idle_waiter() -> Option<Arc<dyn IdleWaiter>> {
    IDLE_WAITER
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// The thresholds of the idle state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdlePolicy {
    /// The mode (not [`WaitMode::Auto`], which counts as [`WaitMode::Spin`]).
    pub mode: WaitMode,
    /// Idle passes spent spinning before yielding.
    pub spin_passes: u32,
    /// Time spent yielding before blocking ([`WaitMode::Block`]).
    pub yield_for: Duration,
    /// Longest single sleep: a wake-up lost to a dead or slow sender costs at most this.
    pub block_timeout: Duration,
}

impl IdlePolicy {
    /// Default yielding time before a sleep, in microseconds: long enough that a peer
    /// answering within a time slice of a yielding core is caught without a sleep (a sleep
    /// and its wake-up cost tens of us here).
    pub const YIELD_US: u32 = 20;

    /// The policy of `mode` with the default thresholds.
    pub const fn new(mode: WaitMode) -> Self {
        IdlePolicy {
            mode,
            spin_passes: Backoff::SPIN_PASSES,
            yield_for: Duration::from_micros(Self::YIELD_US as u64),
            block_timeout: Duration::from_millis(1),
        }
    }
}

/// What a wait loop does after a pass ([`IdleState::on_pass`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleAction {
    /// Poll again at once.
    Spin,
    /// `sched_yield`, then poll.
    Yield,
    /// Announce the sleep ([`IdleWaiter::arm`]), then poll once more.
    Arm,
    /// The pass after arming found nothing: sleep for at most this long, then disarm and poll.
    Block(Duration),
    /// The pass after arming found events: withdraw the announcement and go on.
    Disarm,
}

/// The idle state machine of one wait, sans IO: fed each pass's event count (and, when it
/// needs one, the time), it says whether to spin, yield, arm, block or disarm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdleState {
    idle: u32,
    /// When yielding started (read only once the spin passes are spent).
    yielding_since: Option<Instant>,
    armed: bool,
}

impl IdleState {
    /// The next action after a pass that handled `events`; `now` is called only past the
    /// spin phase of a blocking policy (spinning reads no clock).
    pub fn on_pass(
        &mut self,
        policy: &IdlePolicy,
        events: usize,
        now: impl FnOnce() -> Instant,
    ) -> IdleAction {
        if events > 0 {
            let armed = self.armed;
            *self = IdleState::default();
            return if armed {
                IdleAction::Disarm
            } else {
                IdleAction::Spin
            };
        }
        if self.armed {
            // Armed, and the pass since found nothing: sleep. Afterwards the wait re-arms
            // (a timeout is no event: a silent peer keeps us asleep, 1 ms at a time).
            self.armed = false;
            return IdleAction::Block(policy.block_timeout);
        }
        self.idle = self.idle.saturating_add(1);
        if self.idle <= policy.spin_passes {
            return IdleAction::Spin;
        }
        match policy.mode {
            WaitMode::Spin | WaitMode::Auto => IdleAction::Spin,
            WaitMode::Yield => IdleAction::Yield,
            WaitMode::Block => {
                let t = now();
                let since = *self.yielding_since.get_or_insert(t);
                if t.saturating_duration_since(since) < policy.yield_for {
                    IdleAction::Yield
                } else {
                    self.armed = true;
                    IdleAction::Arm
                }
            }
        }
    }

    /// Whether the last action was [`IdleAction::Arm`] (a sleep is announced).
    pub fn armed(&self) -> bool {
        self.armed
    }
}

/// Handle of a registered progress function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProgressId(u64);

type ProgressFn = Box<dyn FnMut() -> usize + Send>;

/// Registered progress functions (beyond the PML, which the runtime always drives).
#[derive(Default)]
pub struct ProgressEngine {
    fns: Vec<(ProgressId, ProgressFn)>,
    next: u64,
}

impl std::fmt::Debug for ProgressEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressEngine")
            .field("functions", &self.fns.len())
            .finish()
    }
}

impl ProgressEngine {
    /// Register `f`; it is called on every progress pass and returns how many events it handled.
    pub fn register(&mut self, f: impl FnMut() -> usize + Send + 'static) -> ProgressId {
        let id = ProgressId(self.next);
        self.next += 1;
        self.fns.push((id, Box::new(f)));
        id
    }

    /// Remove a function. Returns false if it was not registered.
    pub fn unregister(&mut self, id: ProgressId) -> bool {
        let before = self.fns.len();
        self.fns.retain(|(i, _)| *i != id);
        self.fns.len() != before
    }

    /// No function is registered.
    pub fn is_empty(&self) -> bool {
        self.fns.is_empty()
    }

    /// Run every function once; total events handled.
    pub fn run(&mut self) -> usize {
        self.fns.iter_mut().map(|(_, f)| f()).sum()
    }
}

/// The idle policy of a wait loop: call [`Backoff::pass`] after every pass, with the events
/// it handled. It runs [`IdleState`] under the process's [`wait_mode`] and the installed
/// [`IdleWaiter`]; the common case (events, or the spin phase) stays inline and reads no clock.
#[derive(Debug, Default)]
pub struct Backoff {
    state: IdleState,
}

impl Backoff {
    /// Passes spent spinning before yielding the CPU by default (`mpi_wait_spin_passes`).
    /// Short: the policy yields or blocks only when the node is oversubscribed (or asked),
    /// and there every idle pass takes the core from a peer that may be the one we wait for
    /// (4 ranks on 2 loaded cores, bench/oversub.sh, 2026-11-29: barrier 14-23 us with 0-32
    /// passes against 88 us with 256, halo 35-37 against 80).
    pub const SPIN_PASSES: u32 = 32;

    /// Note a pass with or without events; yields or sleeps after a long idle streak.
    #[inline]
    pub fn pass(&mut self, events: usize) {
        // No PAUSE between passes: it costs up to ~140 cycles on recent x86, which would be
        // added to the latency of noticing the peer's message.
        let s = &mut self.state;
        if !s.armed {
            if events > 0 {
                s.idle = 0;
                s.yielding_since = None;
                return;
            }
            // Spinning (the first passes, or for good in spin mode) stays here.
            if s.idle < SPIN_PASSES.load(Ordering::Relaxed) || !yield_when_idle() {
                s.idle = s.idle.saturating_add(1);
                return;
            }
        }
        self.slow_pass(events);
    }

    #[inline(never)]
    fn slow_pass(&mut self, events: usize) {
        let policy = wait_policy();
        match self.state.on_pass(&policy, events, Instant::now) {
            IdleAction::Spin => {}
            IdleAction::Yield => std::thread::yield_now(),
            IdleAction::Arm => match idle_waiter() {
                Some(w) => w.arm(),
                None => {
                    // Nothing can wake us: yield rather than sleep blind.
                    self.state.armed = false;
                    std::thread::yield_now();
                }
            },
            IdleAction::Block(timeout) => {
                if let Some(w) = idle_waiter() {
                    w.block(timeout);
                    w.disarm();
                }
            }
            IdleAction::Disarm => {
                if let Some(w) = idle_waiter() {
                    w.disarm();
                }
            }
        }
    }
}

impl Drop for Backoff {
    #[inline]
    fn drop(&mut self) {
        // A wait that ends on the pass after arming: withdraw the announcement, or senders
        // would keep signalling a process that is not asleep.
        if self.state.armed {
            if let Some(w) = idle_waiter() {
                w.disarm();
            }
        }
    }
}

// ---- Waits that let other threads in (MPI_THREAD_MULTIPLE) ----

/// What a wait loop runs around each pass when it holds no borrow of the runtime
/// ([`set_wait_hook`]).
#[derive(Clone, Copy, Debug)]
pub struct WaitHook {
    /// Let threads waiting to enter MPI in: true if something was released, which
    /// `reacquire` then takes back before the loop touches the runtime again.
    pub release: fn() -> bool,
    /// Take back what `release` gave away.
    pub reacquire: fn(),
    /// Between two passes of a wait that can tell whether its operation completed
    /// ([`ParkingBackoff::pass_until`]): `done` tests the operation once, without a wait,
    /// keeps its outcome for the loop and says whether it completed. The binding may call it
    /// later from another thread, one holding what `release` gives away, while this thread
    /// sleeps inside the call (one progress owner at a time): see [`Parking`].
    pub park: fn(done: &mut dyn FnMut() -> bool) -> Parking,
    /// A wait that called `park` ended (its operation completed, or it failed): the binding
    /// hands the progress over to a parked waiter if this thread made it.
    pub leave: fn(),
}

/// What the wait hook's `park` did ([`WaitHook::park`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parking {
    /// Nothing was released: the loop goes on as after [`Backoff::pass`].
    Kept,
    /// Released for queued threads, as `release`: the loop runs its idle pass, then
    /// `reacquire`.
    Released,
    /// The thread slept until another one found its operation complete (`done` returned
    /// true there) or handed it the progress, and holds what `release` gives away again.
    Parked,
}

/// The wait hook, unset unless a binding provides `MPI_THREAD_MULTIPLE`.
static WAIT_HOOK: std::sync::OnceLock<WaitHook> = std::sync::OnceLock::new();

/// Install `hook`, run by the wait loops that hold no borrow of the runtime between their
/// passes ([`ReleasingBackoff`]). The MPI C library installs one at `MPI_THREAD_MULTIPLE`: it
/// hands the process-wide MPI lock to a thread waiting for it, so that a thread blocked in a
/// receive or a barrier lets the others call MPI meanwhile. Set once per process; false if one
/// was installed already.
pub fn set_wait_hook(hook: WaitHook) -> bool {
    WAIT_HOOK.set(hook).is_ok()
}

/// Whether a wait hook is installed: the waits of the runtime then take their borrow-free
/// paths (a test and a progress pass per round) instead of the PML's own wait loops.
#[inline]
pub fn wait_hook_set() -> bool {
    WAIT_HOOK.get().is_some()
}

/// A [`Backoff`] for wait loops that hold no borrow of the runtime (or of anything another
/// thread's MPI call may reach) when they call [`ReleasingBackoff::pass`]: the pass also lets
/// other threads in through the wait hook. Without a hook it is a [`Backoff`].
#[derive(Debug, Default)]
pub struct ReleasingBackoff {
    backoff: Backoff,
}

impl ReleasingBackoff {
    /// [`Backoff::pass`], with the wait hook's lock released around it.
    #[inline]
    pub fn pass(&mut self, events: usize) {
        match WAIT_HOOK.get() {
            None => self.backoff.pass(events),
            Some(hook) => {
                let released = (hook.release)();
                self.backoff.pass(events);
                if released {
                    (hook.reacquire)();
                }
            }
        }
    }
}

/// The backoff of a wait that can test its own operation ([`ParkingBackoff::pass_until`]):
/// a [`ReleasingBackoff`] that may park the thread through the wait hook, and calls the
/// hook's `leave` when the wait ends, on every exit path (a drop). A type of its own so that
/// the other waits (and coll-sm, which keeps a [`ReleasingBackoff`] per module) carry no
/// drop glue below `MPI_THREAD_MULTIPLE`.
#[derive(Debug, Default)]
pub struct ParkingBackoff {
    backoff: Backoff,
    /// Whether a pass ran the hook's `park`: the hook's `leave` runs when the wait ends.
    parked: bool,
}

impl ParkingBackoff {
    /// [`ReleasingBackoff::pass`] for a wait whose operation `done` tests (see
    /// [`WaitHook::park`]): with a hook, this thread may sleep until another one finds the
    /// operation complete, so the loop must look at `done`'s kept outcome (call `done`
    /// again: it returns true at once) before testing anything itself.
    #[inline]
    pub fn pass_until(&mut self, events: usize, done: &mut dyn FnMut() -> bool) {
        let Some(hook) = WAIT_HOOK.get() else {
            return self.backoff.pass(events);
        };
        self.parked = true;
        match (hook.park)(done) {
            Parking::Kept => self.backoff.pass(events),
            Parking::Released => {
                self.backoff.pass(events);
                (hook.reacquire)();
            }
            // It slept: a new idle streak starts.
            Parking::Parked => self.backoff = Backoff::default(),
        }
    }
}

impl Drop for ParkingBackoff {
    fn drop(&mut self) {
        if self.parked {
            if let Some(hook) = WAIT_HOOK.get() {
                (hook.leave)();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::Arc;

    /// Run `passes` (events per pass) through a state machine whose clock advances `step`
    /// per clock read; the actions taken.
    fn drive(policy: IdlePolicy, passes: &[usize], step: Duration) -> Vec<IdleAction> {
        let t0 = Instant::now();
        let mut clock = t0;
        let mut st = IdleState::default();
        passes
            .iter()
            .map(|&e| {
                st.on_pass(&policy, e, || {
                    clock += step;
                    clock
                })
            })
            .collect()
    }

    #[test]
    fn spin_mode_never_gives_the_cpu_away() {
        let p = IdlePolicy::new(WaitMode::Spin);
        let a = drive(p, &[0; 2000], Duration::from_millis(1));
        assert!(a.iter().all(|&x| x == IdleAction::Spin));
    }

    #[test]
    fn yield_mode_yields_after_the_spin_passes() {
        let p = IdlePolicy {
            spin_passes: 256,
            ..IdlePolicy::new(WaitMode::Yield)
        };
        let a = drive(p, &[0; 300], Duration::from_millis(1));
        assert!(a[..256].iter().all(|&x| x == IdleAction::Spin));
        assert!(a[256..].iter().all(|&x| x == IdleAction::Yield));
    }

    #[test]
    fn block_mode_spins_yields_then_arms_and_blocks_with_a_timeout() {
        let p = IdlePolicy {
            spin_passes: 256,
            yield_for: Duration::from_micros(50),
            ..IdlePolicy::new(WaitMode::Block)
        };
        // 10 us per clock read: 50 us of yielding is 5 yields (reads at 10..50 us).
        let a = drive(p, &[0; 256 + 5 + 4], Duration::from_micros(10));
        assert!(a[..256].iter().all(|&x| x == IdleAction::Spin));
        assert!(a[256..261].iter().all(|&x| x == IdleAction::Yield), "{a:?}");
        let b = IdleAction::Block(Duration::from_millis(1));
        assert_eq!(a[261..], [IdleAction::Arm, b, IdleAction::Arm, b]);
    }

    #[test]
    fn an_event_after_arming_disarms_and_restarts_the_spin() {
        let p = IdlePolicy {
            spin_passes: 2,
            yield_for: Duration::ZERO,
            ..IdlePolicy::new(WaitMode::Block)
        };
        let a = drive(p, &[0, 0, 0, 1, 0, 0, 0], Duration::from_micros(1));
        use IdleAction::*;
        assert_eq!(a, [Spin, Spin, Arm, Disarm, Spin, Spin, Arm]);
        // An event while spinning resets the streak without a disarm.
        let a = drive(p, &[0, 0, 1, 0, 0, 0], Duration::from_micros(1));
        assert_eq!(a, [Spin, Spin, Spin, Spin, Spin, Arm]);
    }

    #[test]
    fn the_clock_is_read_only_past_the_spin_phase() {
        let p = IdlePolicy::new(WaitMode::Block);
        let mut st = IdleState::default();
        for _ in 0..p.spin_passes {
            st.on_pass(&p, 0, || panic!("clock read while spinning"));
        }
        let mut st = IdleState::default();
        for _ in 0..10_000 {
            st.on_pass(&IdlePolicy::new(WaitMode::Yield), 0, || {
                panic!("yield mode needs no clock")
            });
        }
    }

    #[test]
    fn wait_modes_parse_resolve_and_refuse_bad_names() {
        for n in WaitMode::NAMES {
            assert_eq!(n.parse::<WaitMode>().unwrap().name(), n);
        }
        let e = "sleep".parse::<WaitMode>().unwrap_err().to_string();
        assert!(
            e.contains("\"sleep\"") && e.contains("auto, spin, yield, block"),
            "{e}"
        );
        assert_eq!(WaitMode::Auto.resolve(true), WaitMode::Block);
        assert_eq!(WaitMode::Auto.resolve(false), WaitMode::Spin);
        assert_eq!(WaitMode::Yield.resolve(true), WaitMode::Yield);
    }

    proptest::proptest! {
        /// Whatever the events, an armed state is followed by a block or a disarm (never a
        /// second arm, never a sleep without an announcement), and every sleep is bounded.
        #[test]
        fn arms_and_blocks_alternate_properly(
            events in proptest::collection::vec(0usize..2, 1..600),
            spin in 0u32..8,
        ) {
            let p = IdlePolicy { spin_passes: spin, yield_for: Duration::from_micros(3), ..IdlePolicy::new(WaitMode::Block) };
            let a = drive(p, &events, Duration::from_micros(1));
            let mut armed = false;
            for x in a {
                match x {
                    IdleAction::Arm => { proptest::prop_assert!(!armed); armed = true; }
                    IdleAction::Block(t) => { proptest::prop_assert!(armed && t <= Duration::from_millis(1)); armed = false; }
                    IdleAction::Disarm => { proptest::prop_assert!(armed); armed = false; }
                    _ => proptest::prop_assert!(!armed),
                }
            }
        }
    }

    #[test]
    fn a_releasing_backoff_runs_the_wait_hook_around_each_pass() {
        use std::sync::atomic::AtomicUsize;
        static RELEASES: AtomicUsize = AtomicUsize::new(0);
        static REACQUIRES: AtomicUsize = AtomicUsize::new(0);
        // A plain Backoff never runs it; a releasing one takes back only what it released.
        static PARKS: AtomicUsize = AtomicUsize::new(0);
        static LEAVES: AtomicUsize = AtomicUsize::new(0);
        assert!(set_wait_hook(WaitHook {
            release: || RELEASES.fetch_add(1, Ordering::Relaxed).is_multiple_of(2),
            reacquire: || {
                REACQUIRES.fetch_add(1, Ordering::Relaxed);
            },
            park: |done| match PARKS.fetch_add(1, Ordering::Relaxed) {
                0 => Parking::Kept,
                1 => Parking::Released,
                _ => {
                    // Another thread found the operation complete meanwhile.
                    assert!(done());
                    Parking::Parked
                }
            },
            leave: || {
                LEAVES.fetch_add(1, Ordering::Relaxed);
            },
        }));
        assert!(wait_hook_set());
        let mut plain = Backoff::default();
        plain.pass(0);
        assert_eq!(RELEASES.load(Ordering::Relaxed), 0);
        let mut b = ReleasingBackoff::default();
        for events in [0, 1, 0, 0, 2] {
            b.pass(events);
        }
        assert_eq!(RELEASES.load(Ordering::Relaxed), 5);
        assert_eq!(REACQUIRES.load(Ordering::Relaxed), 3);
        drop(b);
        assert_eq!(LEAVES.load(Ordering::Relaxed), 0, "no park, no leave");
        // A wait that tests its operation: park each pass, reacquire after a release only,
        // leave once when it ends.
        let mut b = ParkingBackoff::default();
        let mut tests = 0;
        let mut done = || {
            tests += 1;
            true
        };
        for events in [0, 0, 0] {
            b.pass_until(events, &mut done);
        }
        assert_eq!(PARKS.load(Ordering::Relaxed), 3);
        assert_eq!(REACQUIRES.load(Ordering::Relaxed), 4);
        assert_eq!(tests, 1, "tested by the hook once, when parked");
        drop(b);
        assert_eq!(LEAVES.load(Ordering::Relaxed), 1);
        let other = WaitHook {
            release: || false,
            reacquire: || {},
            park: |_| Parking::Kept,
            leave: || {},
        };
        assert!(!set_wait_hook(other), "set once per process");
    }

    #[test]
    fn the_async_pacer_spins_on_events_sleeps_when_idle_and_backs_off_from_a_busy_lock() {
        let mut p = AsyncPacer::default();
        let idle = AsyncPass::Ran {
            events: 0,
            outstanding: true,
        };
        let moved = AsyncPass::Ran {
            events: 3,
            outstanding: true,
        };
        assert_eq!(p.next(moved), AsyncAction::Again);
        for _ in 0..AsyncPacer::SPIN_PASSES {
            assert_eq!(p.next(idle), AsyncAction::Again);
        }
        let mut sleeps = Vec::new();
        for _ in 0..8 {
            match p.next(idle) {
                AsyncAction::Sleep(d) => sleeps.push(d),
                a => panic!("idle with work outstanding: {a:?}"),
            }
        }
        assert_eq!(sleeps[0], AsyncPacer::FIRST_IDLE_SLEEP);
        assert!(sleeps.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*sleeps.last().unwrap(), AsyncPacer::MAX_IDLE_SLEEP);
        // An event starts over: no sleep until the spin passes are spent again.
        assert_eq!(p.next(moved), AsyncAction::Again);
        assert_eq!(p.next(idle), AsyncAction::Again);
        // Nothing outstanding: sleep until woken, whatever came before.
        assert_eq!(
            p.next(AsyncPass::Ran {
                events: 0,
                outstanding: false
            }),
            AsyncAction::AwaitWork(AsyncPacer::AWAIT_WORK)
        );
        // The program inside MPI: growing sleeps, bounded.
        let mut last = Duration::ZERO;
        for _ in 0..12 {
            let AsyncAction::Sleep(d) = p.next(AsyncPass::LockBusy) else {
                panic!("a busy lock sleeps")
            };
            assert!(d >= last && d <= AsyncPacer::MAX_BUSY_SLEEP);
            last = d;
        }
        assert_eq!(last, AsyncPacer::MAX_BUSY_SLEEP);
        assert_eq!(p.next(moved), AsyncAction::Again);
        assert_eq!(
            p.next(AsyncPass::LockBusy),
            AsyncAction::Sleep(AsyncPacer::FIRST_BUSY_SLEEP)
        );
    }

    proptest::proptest! {
        /// Whatever the passes, the thread never sleeps while events flow, never sleeps
        /// unbounded, and never waits for work while work is outstanding.
        #[test]
        fn the_async_pacer_never_sleeps_on_events_and_bounds_every_sleep(
            passes in proptest::collection::vec((0usize..3, proptest::bool::ANY, proptest::bool::ANY), 1..400),
        ) {
            let mut p = AsyncPacer::default();
            for (events, outstanding, busy) in passes {
                let pass = if busy { AsyncPass::LockBusy } else { AsyncPass::Ran { events, outstanding } };
                match p.next(pass) {
                    AsyncAction::Again => proptest::prop_assert!(!busy),
                    AsyncAction::Sleep(d) => {
                        proptest::prop_assert!(busy || (events == 0 && outstanding));
                        proptest::prop_assert!(d <= AsyncPacer::MAX_BUSY_SLEEP && !d.is_zero());
                    }
                    AsyncAction::AwaitWork(_) => proptest::prop_assert!(!busy && events == 0 && !outstanding),
                }
            }
        }
    }

    #[test]
    fn async_progress_settings_default_off_and_round_trip() {
        assert_eq!(
            AsyncProgress::default(),
            AsyncProgress {
                enabled: false,
                cpu: None
            }
        );
        let mut specs = Vec::new();
        register_params(&mut specs);
        let names: Vec<_> = specs.iter().map(|s| s.name.clone()).collect();
        assert!(names.iter().any(|n| n == "mpi_async_progress"), "{names:?}");
        assert!(
            names.iter().any(|n| n == "mpi_async_progress_cpu"),
            "{names:?}"
        );
        let on = AsyncProgress {
            enabled: true,
            cpu: Some(3),
        };
        set_async_progress(on);
        assert_eq!(async_progress(), on);
        set_async_progress(AsyncProgress::default());
        assert_eq!(async_progress(), AsyncProgress::default());
    }

    #[test]
    fn registered_functions_run_until_unregistered() {
        let mut e = ProgressEngine::default();
        let hits = Arc::new(AtomicI32::new(0));
        let h = hits.clone();
        let id = e.register(move || {
            h.fetch_add(1, Ordering::Relaxed);
            2
        });
        assert_eq!(e.run(), 2);
        assert!(e.unregister(id));
        assert!(!e.unregister(id));
        assert_eq!(e.run(), 0);
        assert_eq!(hits.load(Ordering::Relaxed), 1);
    }
}
