//! A counting global allocator: live and peak heap bytes of this process, so the simulator can
//! state its own memory and measure the heap that pml-dr's per-peer state really takes.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counted.
pub struct Counting;

fn add(n: usize) {
    let live = LIVE.fetch_add(n, Relaxed) + n;
    PEAK.fetch_max(live, Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's own arguments, unchanged, so the
// GlobalAlloc contract (layouts, pointers) is upheld by `System`; the counters are plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded as given (the caller guarantees a non-zero-size layout).
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            add(l.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            add(l.size());
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` was allocated by `System` with layout `l` (through this allocator).
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: `p`/`l` came from this allocator; `new` is the caller's valid new size.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_sub(l.size(), Relaxed);
            add(new);
        }
        q
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap bytes allocated and not freed.
pub fn live() -> usize {
    LIVE.load(Relaxed)
}

/// Most heap bytes live at once since the start (or the last [`reset_peak`]).
pub fn peak() -> usize {
    PEAK.load(Relaxed)
}

/// Restarts the peak from the current live bytes.
pub fn reset_peak() {
    PEAK.store(live(), Relaxed);
}
