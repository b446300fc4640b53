//! Sleeping on a word of shared memory until another process changes it, and waking such
//! sleepers: the Linux futex, in its process-shared form (never `FUTEX_PRIVATE_FLAG`: the
//! sleeper and the waker are different processes mapping the same object, so the kernel must
//! key the wait on the page, not on this process's address). The one copy btl-shm (a
//! receiver's doorbell) and coll-sm (a rank waiting on a segment flag) use; the C library's
//! process-private wait (one process's threads) is a different call and stays in its crate.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleep while `word` holds `expected`, at most `timeout`. Returns at once if the word
/// differs (the kernel compares under its own lock, so a store and wake between the caller's
/// last look and this call is never missed). Every return (woken, timed out, interrupted,
/// spurious) looks the same: callers re-check their word and loop.
///
/// `word` must lie in memory other processes map with `MAP_SHARED` (or be this process's own)
/// for a waker elsewhere to reach it; any live word is safe to pass.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a live, aligned 4-byte word (the `&AtomicU32` guarantees both for
    // the call's duration); the kernel only reads the word and the timespec, which lives on
    // this stack for the call. No memory is written; the result is deliberately ignored (see
    // the doc comment).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wake up to `n` processes (or threads) sleeping in [`wait`] on `word`; `u32::MAX` (or any
/// count above `i32::MAX`) wakes them all.
pub fn wake(word: &AtomicU32, n: u32) {
    let n = n.min(i32::MAX as u32);
    // SAFETY: FUTEX_WAKE uses the word's address only as the key of the wait queue; it reads
    // and writes no memory of this process.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_changed_word_does_not_sleep() {
        let w = AtomicU32::new(1);
        let t = Instant::now();
        wait(&w, 0, Duration::from_secs(5));
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "slept on a changed word"
        );
    }

    #[test]
    fn a_sleep_ends_at_its_timeout() {
        let w = AtomicU32::new(0);
        let t = Instant::now();
        wait(&w, 0, Duration::from_millis(20));
        // Interrupted early is allowed, but not a sleep far past the timeout.
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_store_and_wake_ends_a_long_sleep() {
        let w = Arc::new(AtomicU32::new(0));
        let sleeper = {
            let w = Arc::clone(&w);
            std::thread::spawn(move || {
                let t = Instant::now();
                while w.load(Ordering::Acquire) == 0 {
                    wait(&w, 0, Duration::from_secs(30));
                }
                t.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        w.store(1, Ordering::Release);
        wake(&w, u32::MAX);
        let slept = sleeper.join().unwrap();
        assert!(slept < Duration::from_secs(30), "the wake was lost");
    }
}
