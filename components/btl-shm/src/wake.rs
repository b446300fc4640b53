//! Waking a sleeping receiver: the doorbell word in the first line of every process's
//! segment, and the process's [`IdleWaiter`] on its own doorbell.
//!
//! A waiting process that has been idle a while (the progress engine's block mode, see
//! [`rmca_framework::progress`]) announces that it will sleep by storing [`SLEEPING`] in its
//! doorbell, polls its rings once more, and only then sleeps on the word (a futex, at most
//! the engine's timeout). A sender that published a record loads the receiver's doorbell and,
//! only if it reads [`SLEEPING`], swaps it back to [`AWAKE`] and wakes the receiver. A store
//! and a load on each side, each ordered by a full fence (the Dekker pattern), make sure that
//! either the sender sees the announcement or the receiver's extra poll sees the record.
//! Outside block mode senders pay one load of a process-wide flag.

use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::Duration;

use rmca_framework::progress::{self, IdleWaiter};

use crate::sys::{self, DoorbellPage};

/// The doorbell's value while its owner polls (or spins, or yields).
pub const AWAKE: u32 = 0;
/// The doorbell's value once its owner announced a sleep.
pub const SLEEPING: u32 = 1;

/// This process's doorbell, the [`IdleWaiter`] the module installs in block mode.
#[derive(Debug)]
pub struct Doorbell {
    page: DoorbellPage,
}

impl Doorbell {
    /// The doorbell in `page` (this process's own segment).
    pub fn new(page: DoorbellPage) -> Self {
        Self { page }
    }

    /// The word senders ring.
    pub fn word(&self) -> &AtomicU32 {
        self.page.word()
    }
}

impl IdleWaiter for Doorbell {
    fn arm(&self) {
        // SeqCst: the polls that follow must not be performed before senders can see this.
        self.word().store(SLEEPING, Ordering::SeqCst);
    }

    fn block(&self, timeout: Duration) {
        // The kernel re-checks the word under its lock: a ring between this load and the
        // sleep makes futex_wait return at once.
        if self.word().load(Ordering::Acquire) == SLEEPING {
            sys::futex_wait(self.word(), SLEEPING, timeout);
        }
    }

    fn disarm(&self) {
        self.word().store(AWAKE, Ordering::Relaxed);
    }
}

/// After publishing a record to the owner of `word`: wake it if it announced a sleep. Call
/// only in block mode ([`progress::wait_mode_blocks`]); [`ring_if_blocking`] checks.
#[inline(never)]
pub fn ring(word: &AtomicU32) {
    // Orders our record's publication before the load (the other half of `arm`'s SeqCst).
    fence(Ordering::SeqCst);
    if word.load(Ordering::Relaxed) == SLEEPING && word.swap(AWAKE, Ordering::AcqRel) == SLEEPING {
        sys::futex_wake(word, 1);
    }
}

/// [`ring`] when waits of this job may sleep; one load otherwise. `word` is called only then.
#[inline(always)]
pub fn ring_if_blocking<'a>(word: impl FnOnce() -> &'a AtomicU32) {
    if progress::wait_mode_blocks() {
        ring(word());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::Mapping;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Instant;

    /// A segment and our doorbell in it, plus a second view of the word (a sender's mapping).
    fn segment(tag: &str) -> (Mapping, Doorbell) {
        let path = std::path::PathBuf::from(sys::SHM_DIR).join(format!(
            "rmca-test-wake-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_file(&path);
        let seg = Mapping::create(&path, 2 * 4096).unwrap();
        let bell = Doorbell::new(DoorbellPage::open(&path, 32).unwrap());
        (seg, bell)
    }

    #[test]
    fn a_ring_wakes_a_sleeper_long_before_its_timeout() {
        let (seg, bell) = segment("wake");
        let bell = Arc::new(bell);
        let asleep = Arc::new(AtomicBool::new(false));
        let (b, a) = (bell.clone(), asleep.clone());
        let sleeper = std::thread::spawn(move || {
            b.arm();
            a.store(true, Ordering::SeqCst);
            let t = Instant::now();
            // A lost wake-up would sleep the whole 30 s.
            b.block(Duration::from_secs(30));
            b.disarm();
            t.elapsed()
        });
        while !asleep.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // The sender's side sees the announcement through its own mapping of the segment.
        let word = seg.atomic_u32(32);
        while word.load(Ordering::SeqCst) != SLEEPING {
            std::thread::yield_now();
        }
        // Give the sleeper time to enter the kernel (a ring before that is also fine: the
        // futex then returns at once).
        std::thread::sleep(Duration::from_millis(20));
        ring(word);
        assert_eq!(
            word.load(Ordering::SeqCst),
            AWAKE,
            "the ring resets the bell"
        );
        let slept = sleeper.join().unwrap();
        assert!(slept < Duration::from_secs(15), "woken after {slept:?}");
    }

    #[test]
    fn a_ring_between_arming_and_sleeping_is_not_lost_and_silence_times_out() {
        let (seg, bell) = segment("early");
        let word = seg.atomic_u32(32);
        bell.arm();
        ring(word);
        let t = Instant::now();
        bell.block(Duration::from_secs(30));
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "slept through a ring"
        );
        bell.disarm();
        // Nobody rings: the sleep ends at its timeout (a dead sender never hangs a wait).
        bell.arm();
        let t = Instant::now();
        bell.block(Duration::from_millis(2));
        assert!(t.elapsed() >= Duration::from_millis(1), "{:?}", t.elapsed());
        bell.disarm();
        // A ring with nobody asleep changes nothing and makes no system call worth noting.
        ring(word);
        assert_eq!(word.load(Ordering::SeqCst), AWAKE);
    }
}
