//! A target's lock as one reader-writer word in memory its node's processes share (as
//! osc-sm's windows have, and Open MPI's osc/rdma keeps per rank): bit 63 an exclusive
//! holder, the low bits the count of shared holders (the protocol is the framework's
//! [`lock_word`](rmca_framework::osc::lock_word)). A module that maps a target's word hands it
//! to the engine ([`Engine::set_lock_word`](crate::engine::Engine::set_lock_word)): the
//! origins on the node then take and give back
//! that target's lock with an atomic each, no message, and the target grants the lock
//! requests that come as messages (from origins without the word: other nodes) only by
//! taking the same word, so both kinds of holder exclude each other.
//!
//! A shared request is granted whenever no exclusive holder is there, even with exclusive
//! requests waiting (no reservation: a process holding one lock never waits on a writer
//! that waits on it). The price: a writer waits while shared holders keep overlapping.
//!
//! Next to it a target may keep an *accumulate word* ([`acc_lock`], [`acc_unlock`]; set with
//! [`Engine::set_acc_word`](crate::engine::Engine::set_acc_word)): a plain spin lock held
//! for the few copies of one accumulate, by the target while it applies one that came as a
//! message and by an origin of its node that applies one itself (osc-rdma's accumulates by
//! CMA), so that accumulates to one element stay atomic with respect to each other whichever
//! way they travel. It is never held across a wait for anything else, so spinning on it
//! cannot deadlock.

use std::sync::atomic::{AtomicU64, Ordering};

pub use rmca_framework::osc::lock_word::{release, try_acquire, EXCL, READERS};

/// A target's lock word, wherever it is mapped (a shared segment in production, a plain
/// atomic in the tests).
pub trait LockWord: std::fmt::Debug {
    /// The word.
    fn word(&self) -> &AtomicU64;
}

impl LockWord for std::rc::Rc<AtomicU64> {
    fn word(&self) -> &AtomicU64 {
        self
    }
}

/// Spins on a held accumulate word before each yield of the CPU: a holder keeps it for
/// a few copies (a microsecond or so), but may be descheduled meanwhile on a loaded node.
const ACC_SPINS: u32 = 256;

/// Take accumulate word `w` (free: 0, held: 1), waiting while another holds it.
pub fn acc_lock(w: &AtomicU64) {
    let mut spins = 0u32;
    loop {
        if w.load(Ordering::Relaxed) == 0
            && w.compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return;
        }
        spins += 1;
        if spins < ACC_SPINS {
            std::hint::spin_loop();
        } else {
            // The holder may be waiting for this CPU.
            std::thread::yield_now();
        }
    }
}

/// Give back accumulate word `w` (taken by [`acc_lock`]): what was written under it is
/// visible to the next holder.
pub fn acc_unlock(w: &AtomicU64) {
    w.store(0, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Threads doing an unprotected read-modify-write under the word lose no update.
    #[test]
    fn the_accumulate_word_excludes_its_holders() {
        let w = Arc::new(AtomicU64::new(0));
        let n = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (w, n) = (w.clone(), n.clone());
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        acc_lock(&w);
                        // A load and a store, not an atomic add: only the word makes it one.
                        let v = n.load(Ordering::Relaxed);
                        n.store(v + 1, Ordering::Relaxed);
                        acc_unlock(&w);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(n.load(Ordering::Relaxed), 80_000);
        assert_eq!(w.load(Ordering::Relaxed), 0, "given back");
    }
}
