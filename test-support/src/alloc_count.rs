//! A global allocator for tests that a warm path allocates nothing: the system's allocator,
//! counting each thread's allocations (the test harness runs tests on several threads, so
//! each test reads its own count). A test binary installs it with
//! `#[global_allocator] static ALLOC: rmca_test_support::alloc_count::Counting =
//! rmca_test_support::alloc_count::Counting;` and compares [`allocations`] around the path.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

/// The counting allocator (see the module).
#[derive(Debug)]
pub struct Counting;

// SAFETY: every call goes to the system allocator unchanged; the counter is a
// const-initialised thread-local, which allocates nothing itself.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        COUNT.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        COUNT.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocations (and reallocations) made by this thread so far, when [`Counting`] is the
/// binary's global allocator (0 otherwise).
pub fn allocations() -> u64 {
    COUNT.with(|c| c.get())
}
