//! `MPI_THREAD_MULTIPLE`'s handoff: a thread that finds the process lock held queues its
//! non-blocking point-to-point call for the lock's holder instead of waiting for the lock
//! (as MPICH's ch4 "handoff" model hands operations to the thread that progresses).
//!
//! The runtime under the library is single-threaded (see [`crate::state`]): one thread runs
//! MPI code at a time, under the process lock. At 4 threads per rank a third of each
//! thread's time went to waiting for that lock in `MPI_Isend` and `MPI_Irecv` (bench/
//! mt_rate.c; each call holds it about 0.5 us, a waiter on a shared core waits for the
//! holder's time slice). Here `MPI_Isend` (standard mode) and `MPI_Irecv` on a predefined
//! datatype, from a thread that does not hold the lock:
//!
//! - take the lock if it is free (nobody holds it or is queued for it) and run as before;
//! - otherwise push the call's arguments on a lock-free stack (`Queue::push`: a compare-and-swap)
//!   with a request handle reserved beforehand for this thread (a per-thread stash, filled
//!   while the thread held the lock: [`crate::state::State::reserve_request`]), and return
//!   `MPI_SUCCESS` with that handle at once.
//!
//! Whoever takes the lock next starts the queued calls first (`drain`, in the order they
//! were pushed), and so does the holder between the passes of its waits: at every
//! acquisition in `state::entered`, after the wait hook's re-acquisitions and in each of its
//! passes (`release_for_waiters`, `park_until`), and in the progress thread's passes. So a
//! thread's calls keep their order: its queued calls precede any later call of its own,
//! which takes the lock (and drains) first, or is queued behind them. A push that races with
//! the holder's last drain is not stranded: every unlock looks at the queue afterwards and
//! the pushing thread looks at the lock after pushing (`after_unlock`; both sides
//! sequentially consistent, so at least one of them sees the other).
//!
//! What the call would have refused once started (a freed communicator, a rank or tag out of
//! range) is found when it starts: its request completes with that error, raised by the
//! completion call on the communicator's error handler (MPI allows a non-blocking call's
//! errors to be reported at completion). A null request pointer, an unknown or derived
//! datatype, a negative count, the other send modes and the large-count forms take the lock
//! as before. Below `MPI_THREAD_MULTIPLE` none of this is reached: the entry points go here
//! only from their out-of-line path for threads that do not own the library
//! (`rmca_mpi_export`), which SINGLE and FUNNELED never take.

// The queue's nodes are raw pointers handed between threads, and the request pointer is the
// C caller's.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::sync::Mutex;

use crate::abi::*;
use crate::ffi::p2p::{start_queued, Queued};
use crate::state;

/// A queued call and its reserved request handle: a node of a [`Queue`].
struct Node {
    next: *mut Node,
    op: Queued,
    handle: Handle,
}

/// A queue of calls: a Treiber stack (pushed by any thread, taken whole by the lock's
/// holder, so no node is ever popped alone and there is no ABA), read back oldest first.
struct Queue {
    /// The newest node.
    head: AtomicPtr<Node>,
}

/// The calls queued for the lock's holder.
static QUEUE: Queue = Queue::new();

impl Queue {
    const fn new() -> Self {
        Self {
            head: AtomicPtr::new(null_mut()),
        }
    }

    /// Whether a call is queued; `order` as the caller's pairing needs.
    fn is_empty(&self, order: Ordering) -> bool {
        self.head.load(order).is_null()
    }

    /// Queue `op` with its request handle.
    fn push(&self, op: Queued, handle: Handle) {
        let node = Box::into_raw(Box::new(Node {
            next: null_mut(),
            op,
            handle,
        }));
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: the node is this thread's until the exchange below publishes it.
            unsafe { (*node).next = head };
            // SeqCst: ordered before this thread's look at the lock ([`after_unlock`]).
            match self
                .head
                .compare_exchange_weak(head, node, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Take every queued call, oldest first.
    fn take_all(&self) -> Taken {
        let mut list = self.head.swap(null_mut(), Ordering::AcqRel);
        // Pushed newest first: reversed into the order of their pushes.
        let mut oldest = null_mut::<Node>();
        while !list.is_null() {
            // SAFETY: taken off the queue by the swap: this thread's alone now.
            let next = unsafe { (*list).next };
            // SAFETY: as above.
            unsafe { (*list).next = oldest };
            oldest = list;
            list = next;
        }
        Taken(oldest)
    }
}

/// Calls taken off a [`Queue`], oldest first; the nodes not visited are freed when dropped.
struct Taken(*mut Node);

impl Iterator for Taken {
    type Item = (Queued, Handle);

    fn next(&mut self) -> Option<(Queued, Handle)> {
        if self.0.is_null() {
            return None;
        }
        // SAFETY: made by `Box::into_raw` in `Queue::push`, taken off the queue by
        // `take_all` (this iterator's alone), and visited once.
        let node = unsafe { Box::from_raw(self.0) };
        self.0 = node.next;
        Some((node.op, node.handle))
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        for _ in self.by_ref() {}
    }
}

/// Bumped when a new library state is installed: reserved handles of an older one are void.
static EPOCH: AtomicU32 = AtomicU32::new(0);

/// Handles reserved by threads that exited, with their epoch: given back by the next drain.
static RETURNED: Mutex<Vec<(u32, Handle)>> = Mutex::new(Vec::new());
/// Whether [`RETURNED`] has entries (so that a drain looks at the mutex only then).
static ANY_RETURNED: AtomicBool = AtomicBool::new(false);

/// Request handles a thread keeps reserved (refilled when under half while it holds the
/// lock): more than a window of calls (OSU and bench/mt_rate.c post 64) between two
/// acquisitions.
const STASH: usize = 128;

/// A thread's reserved request handles.
struct Stash {
    epoch: u32,
    handles: Vec<Handle>,
}

impl Drop for Stash {
    fn drop(&mut self) {
        if self.handles.is_empty() {
            return;
        }
        let mut r = RETURNED.lock().unwrap_or_else(|p| p.into_inner());
        r.extend(self.handles.drain(..).map(|h| (self.epoch, h)));
        ANY_RETURNED.store(true, Ordering::Release);
    }
}

thread_local! {
    static STASH_OF: RefCell<Stash> = const {
        RefCell::new(Stash {
            epoch: 0,
            handles: Vec::new(),
        })
    };
}

/// A new library state was installed (`MPI_Init`, `MPI_Session_init`): handles reserved in a
/// previous one are dropped by the threads' stashes at their next use.
pub(crate) fn new_state() {
    EPOCH.fetch_add(1, Ordering::Relaxed);
}

/// This thread's stash, emptied first if it holds handles of an older state.
fn with_stash<R>(f: impl FnOnce(&mut Vec<Handle>) -> R) -> Option<R> {
    let epoch = EPOCH.load(Ordering::Relaxed);
    STASH_OF
        .try_with(|s| {
            let mut s = s.try_borrow_mut().ok()?;
            if s.epoch != epoch {
                s.handles.clear();
                s.epoch = epoch;
            }
            Some(f(&mut s.handles))
        })
        .ok()
        .flatten()
}

/// Fill this thread's stash if under half full (holding the lock, the state not lent).
fn refill() {
    with_stash(|handles| {
        if handles.len() >= STASH / 2 {
            return;
        }
        let _ = state::with(|s| {
            while handles.len() < STASH {
                handles.push(s.reserve_request()?);
            }
            Ok(())
        });
    });
}

/// Start the queued calls, oldest first (by the lock's holder, with the state not lent; a
/// load when the queue is empty).
#[inline]
pub(crate) fn drain() {
    if QUEUE.is_empty(Ordering::Relaxed) && !ANY_RETURNED.load(Ordering::Relaxed) {
        return;
    }
    drain_queued();
}

#[cold]
#[inline(never)]
fn drain_queued() {
    if !state::installed() {
        // Nothing to start them on (finalizing), or the state is lent: left for later.
        return;
    }
    let taken = QUEUE.take_all();
    let returned = if ANY_RETURNED.swap(false, Ordering::Acquire) {
        std::mem::take(&mut *RETURNED.lock().unwrap_or_else(|p| p.into_inner()))
    } else {
        Vec::new()
    };
    let epoch = EPOCH.load(Ordering::Relaxed);
    let _ = state::with(|s| {
        for (op, h) in taken {
            start_queued(s, op, h);
        }
        for (e, h) in returned {
            if e == epoch {
                s.unreserve_request(h);
            }
        }
        Ok(())
    });
}

/// After an unlock of the process lock: calls queued since the holder's last drain are
/// started now if the lock is free (else its next holder, or the thread queued for it,
/// starts them). SeqCst with the unlock's and the push's: of a push and an unlock that race,
/// one of the two threads sees the other.
#[inline]
pub(crate) fn after_unlock() {
    while !QUEUE.is_empty(Ordering::SeqCst) {
        if !state::drain_if_free() {
            return;
        }
    }
}

/// Queue call `op` with a reserved request handle if the lock is held; run it under the lock
/// (`run`, the call's implementation) otherwise, or when this thread has no handle reserved.
fn submit(op: Queued, request: *mut Handle, run: impl FnOnce() -> c_int) -> c_int {
    if !state::handoff_open() {
        return state::entered(run);
    }
    let run = match state::try_entered(move || {
        refill();
        run()
    }) {
        Ok(rc) => return rc,
        Err(run) => run,
    };
    let Some(h) = with_stash(|handles| handles.pop()).flatten() else {
        return state::entered(run);
    };
    // SAFETY: non-null (checked by the callers), the caller's handle to write (MPI_Isend's
    // contract).
    unsafe { request.write(h) };
    QUEUE.push(op, h);
    // The holder may have released the lock between the try and the push.
    after_unlock();
    MPI_SUCCESS
}

/// `MPI_Isend` from a thread that does not own the library (the entry point's out-of-line
/// path at `MPI_THREAD_MULTIPLE`): queued if the lock is held (see the module documentation),
/// else `run`, the call under the lock.
///
/// # Safety
/// `MPI_Isend`'s contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn isend(
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
    run: impl FnOnce() -> c_int,
) -> c_int {
    let op = |len| Queued::Send {
        buf: buf as usize,
        len,
        dest,
        tag,
        comm,
    };
    submit_if_predefined(buf, count, datatype, request, op, run)
}

/// `MPI_Irecv` from a thread that does not own the library: as [`isend`].
///
/// # Safety
/// `MPI_Irecv`'s contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn irecv(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    src: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
    run: impl FnOnce() -> c_int,
) -> c_int {
    let op = |len| Queued::Recv {
        buf: buf as usize,
        len,
        src,
        tag,
        comm,
    };
    submit_if_predefined(buf, count, datatype, request, op, run)
}

/// [`submit`] the call `op(bytes)` when its buffer is `count` elements of predefined
/// `datatype` and `request` is not NULL; else `run` under the lock, whose checks refuse
/// what is wrong.
fn submit_if_predefined(
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    request: *mut Handle,
    op: impl FnOnce(usize) -> Queued,
    run: impl FnOnce() -> c_int,
) -> c_int {
    match crate::ffi::predefined_len(buf, count, datatype) {
        Some(len) if !request.is_null() => submit(op(len), request, run),
        _ => state::entered(run),
    }
}

#[cfg(test)]
mod tests {
    use super::{Queue, Queued};
    use std::sync::atomic::Ordering;

    fn op(thread: i32, seq: i32) -> Queued {
        Queued::Send {
            buf: 0,
            len: 0,
            dest: thread,
            tag: seq,
            comm: 0,
        }
    }

    /// Four threads push numbered calls while a fifth takes the queue whole now and then:
    /// every call is taken once, and each thread's calls come out in the order it pushed
    /// them (what keeps MPI's per-thread order once the holder starts them).
    #[test]
    fn every_call_is_taken_once_in_each_threads_order() {
        const PER: i32 = 20_000;
        let q = Queue::new();
        let done = std::sync::atomic::AtomicUsize::new(0);
        let mut next = [0i32; 4];
        let mut check = |taken: super::Taken| {
            for (op, h) in taken {
                let Queued::Send { dest, tag, .. } = op else {
                    panic!("a receive was never pushed")
                };
                assert_eq!(
                    tag, next[dest as usize],
                    "thread {dest}'s calls out of order"
                );
                assert_eq!(h, (dest as usize) << 20 | tag as usize);
                next[dest as usize] += 1;
            }
        };
        std::thread::scope(|s| {
            for t in 0..4 {
                let q = &q;
                let done = &done;
                s.spawn(move || {
                    for k in 0..PER {
                        q.push(op(t, k), (t as usize) << 20 | k as usize);
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                });
            }
            while done.load(Ordering::SeqCst) < 4 {
                check(q.take_all());
                std::thread::yield_now();
            }
        });
        check(q.take_all());
        assert_eq!(next, [PER; 4], "every call taken");
        assert!(q.is_empty(Ordering::SeqCst));
    }

    /// Calls taken but not visited are freed (Miri / the sanitizers see a leak otherwise),
    /// and a queue taken empty yields nothing.
    #[test]
    fn unvisited_calls_are_dropped_and_an_empty_queue_yields_nothing() {
        let q = Queue::new();
        assert_eq!(q.take_all().count(), 0);
        for k in 0..3 {
            q.push(op(0, k), k as usize);
        }
        let mut taken = q.take_all();
        assert_eq!(taken.next().map(|(_, h)| h), Some(0));
        drop(taken);
        assert!(q.is_empty(Ordering::SeqCst));
    }
}
