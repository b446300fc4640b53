//! Pinning the worker to one core (the only unsafe code of rmca-bench: a libc call).
#![allow(unsafe_code)]

/// Pin the calling process to `core`. Returns false if the kernel refused.
pub fn pin_to_core(core: usize) -> bool {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write within it, and
    // sched_setaffinity only reads `size_of::<cpu_set_t>()` bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}
