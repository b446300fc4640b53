//! The progress engine: every blocking call drives the PML and any registered progress
//! functions until its request completes.
//!
//! Waiting is a spin-then-yield loop: spinning keeps small-message latency at memory speed when
//! a peer is about to answer, and yielding after a short idle streak lets oversubscribed ranks
//! (more ranks than cores) run their peers. Ranks that each have a core spin only: the
//! runtime sets [`set_yield_when_idle`] from
//! [`JobInfo::oversubscribed`](crate::job::JobInfo::oversubscribed). A wait never blocks in
//! the kernel, so a dead peer cannot hang it: the PML reports the failure (peer timeouts, BTL errors) or the launcher,
//! which watches every rank, tears the job down.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether idle waits yield the CPU after [`Backoff::SPIN_PASSES`] (see [`set_yield_when_idle`]).
static YIELD_WHEN_IDLE: AtomicBool = AtomicBool::new(true);

/// Choose whether idle waits yield the CPU. Yielding lets oversubscribed ranks (more ranks
/// than cores) run their peers; a rank that has a core to itself should spin instead (Open
/// MPI's `mpi_yield_when_idle` default), because a `sched_yield` costs a system call, and on
/// a loaded machine hands the core to another process for a whole time slice while the peer's
/// answer waits.
pub fn set_yield_when_idle(on: bool) {
    YIELD_WHEN_IDLE.store(on, Ordering::Relaxed);
}

/// The current idle policy (true until [`set_yield_when_idle`] or
/// the runtime says otherwise).
pub fn yield_when_idle() -> bool {
    YIELD_WHEN_IDLE.load(Ordering::Relaxed)
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

/// The idle policy of a wait loop: call [`Backoff::pass`] after every pass, with the events it handled.
#[derive(Debug, Default)]
pub struct Backoff {
    idle: u32,
}

impl Backoff {
    /// Passes spent spinning before yielding the CPU.
    pub const SPIN_PASSES: u32 = 256;

    /// Note a pass with or without events; yields the CPU after a long idle streak.
    #[inline]
    pub fn pass(&mut self, events: usize) {
        if events > 0 {
            self.idle = 0;
            return;
        }
        self.idle = self.idle.saturating_add(1);
        // No PAUSE between passes: it costs up to ~140 cycles on recent x86, which would be
        // added to the latency of noticing the peer's message.
        if self.idle > Self::SPIN_PASSES && yield_when_idle() {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::Arc;

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
