//! Thread support: which threads may call rmca, and how a universe moves to another thread.
//!
//! rmca provides [`ThreadLevel::Funneled`]: one thread at a time makes rmca calls, the one that
//! holds the [`Universe`] (MPI_THREAD_FUNNELED, with "the main thread" being whichever thread
//! the universe was handed to). Communicators and requests are reference-counted without
//! atomics and are neither `Send` nor `Sync`, so the compiler refuses any other use: a single-
//! threaded program pays no lock or atomic on the message path. Programs that need
//! MPI_THREAD_MULTIPLE use [`crate::threaded`]: `Send + Sync` handles whose calls a
//! progress-owner thread runs on a universe of this API.
//!
//! To run the MPI part of a program on a worker thread, initialize on any thread and hand the
//! universe over with [`Universe::into_send`] before deriving communicators (or after dropping
//! them); the worker turns it back with [`SendUniverse::into_universe`]:
//!
//! ```no_run
//! let universe = rmca::init()?.into_send().map_err(|(_, e)| e)?;
//! let worker = std::thread::spawn(move || -> rmca::Result<u64> {
//!     let universe = universe.into_universe();
//!     let world = universe.world();
//!     let mut sum = [0u64];
//!     world.allreduce(&[world.rank() as u64], &mut sum, rmca::coll::Op::Sum)?;
//!     Ok(sum[0])
//! });
//! let sum = worker.join().expect("worker thread")?;
//! # let _ = sum;
//! # Ok::<(), rmca::Error>(())
//! ```
//!
//! Asynchronous progress (`mpi_async_progress`) is the MPI C library's: its progress thread
//! shares the library's state under the process lock every C call takes then. A universe of
//! this API is confined to one thread without a lock (above), so no second thread may drive
//! it; a Rust program overlaps communication by testing its requests (or
//! [`crate::raw::progress`]) from its computation: the parameter starts no thread here.
//!
//! A universe itself cannot cross threads:
//!
//! ```compile_fail,E0277
//! let universe = rmca::init().unwrap();
//! std::thread::spawn(move || drop(universe));
//! ```

use std::rc::Rc;

use crate::{Error, Universe};

/// The thread levels of MPI, in increasing order of what they allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ThreadLevel {
    /// Only one thread exists.
    Single,
    /// Only the thread holding the universe calls rmca.
    Funneled,
    /// Any thread, one at a time.
    Serialized,
    /// Any thread, concurrently.
    Multiple,
}

/// The thread level rmca provides: see the [module documentation](self).
pub const THREAD_LEVEL: ThreadLevel = ThreadLevel::Funneled;

/// A [`Universe`] on its way to another thread: nothing else refers to its runtime, so moving
/// it moves every handle to the runtime at once.
pub struct SendUniverse(Universe);

impl std::fmt::Debug for SendUniverse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SendUniverse").field(&self.0).finish()
    }
}

// SAFETY: the only parts of a Universe that are not `Send` are its non-atomic reference counts
// and cells (`Rc<Shared>`, the world's `Rc<CommInner>`, the schedules cached in it); the
// runtime they wrap is `Send` (asserted in rmca-runtime, with `Pml: Send` and `Btl: Send`).
// `Universe::into_send` only builds a `SendUniverse` when the universe holds the sole handles
// to both (no communicator, request or scope anywhere else refers to them), and no call is in
// progress since it takes the universe by value; the cached schedules are only referred to from
// inside the world communicator. Moving the value therefore leaves no handle behind on the old
// thread, and the new thread's uses cannot race with any other.
#[allow(unsafe_code)]
unsafe impl Send for SendUniverse {}

impl SendUniverse {
    /// The universe, on the thread that will make the rmca calls from now on.
    pub fn into_universe(self) -> Universe {
        self.0
    }
}

impl Universe {
    /// Prepare this universe to be moved to another thread (see [`crate::thread`]). Refused,
    /// with the universe given back, while communicators, requests or scopes derived from it
    /// still exist.
    pub fn into_send(self) -> std::result::Result<SendUniverse, (Universe, Error)> {
        // The universe holds two handles to the runtime (its own and the world's) and the only
        // handle to the world.
        let runtime_handles = Rc::strong_count(&self.shared) + Rc::weak_count(&self.shared);
        let world_handles = self.world.handle_count();
        if runtime_handles != 2 || world_handles != 1 {
            let others = runtime_handles.saturating_sub(2) + world_handles.saturating_sub(1);
            return Err((self, Error::StillShared { handles: others }));
        }
        Ok(SendUniverse(self))
    }
}
