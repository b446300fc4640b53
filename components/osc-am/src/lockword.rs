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

use std::sync::atomic::AtomicU64;

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
