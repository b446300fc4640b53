//! Accumulates, fetch-and-ops and compare-and-swaps that an origin applies itself to a member
//! of its node: the member's accumulate word taken ([`rmca_osc_am::lockword::acc_lock`]),
//! the target bytes read by CMA (`process_vm_readv`), combined here with the framework's
//! kernels, written back (`process_vm_writev`), the word given back. No message and no work
//! at the target, so the operation is complete at the target when the call returns (a flush
//! after it needs no round trip), and a target that computes or is descheduled (a loaded
//! node) does not delay it: Open MPI's osc/rdma does the same (its accumulate lock and a
//! get-modify-put) when the BTL has no atomics for the operation.
//!
//! The target holds the same word while it applies the accumulates that come as messages
//! (from other nodes, or origins without its word), so every accumulate to an element is
//! atomic with respect to the others, whichever way each travels. The word is held for the
//! two copies and the arithmetic only, never across a wait.
#![allow(unsafe_code)]

use std::io;
use std::sync::atomic::AtomicU64;

use rmca_framework::osc::{accumulate_with, AccOp, Elem, HostAccumulate, OscError};
use rmca_osc_am::lockword::{acc_lock, acc_unlock};

/// Why a direct operation did not complete.
#[derive(Debug)]
pub enum Failure {
    /// CMA does not reach the target (not permitted, no such process): nothing was written,
    /// and messages serve the target from now on.
    Unreachable(io::Error),
    /// The operation failed (the host's arithmetic refused it: nothing written; or a copy
    /// failed after the first): its error.
    Op(OscError),
}

/// A target of this node as the origin reaches it.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// Its pid (CMA).
    pub pid: u32,
    /// Its accumulate word.
    pub word: &'a AtomicU64,
}

/// Remote runs per system call (each call's iovec array lives on the stack).
const BATCH: usize = 64;

/// Copy between `local` (the runs' bytes, packed in order) and the runs `(address, length)`
/// of process `pid`: `write` to the target, else from it.
fn transfer(pid: u32, local: *mut u8, runs: &[(u64, usize)], write: bool) -> io::Result<()> {
    const NONE: libc::iovec = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut at = 0usize;
    for chunk in runs.chunks(BATCH) {
        // (One run, the common case: no array of iovecs to fill.)
        let mut one = [NONE; 1];
        let mut many;
        let riov: &mut [libc::iovec] = if chunk.len() == 1 {
            &mut one
        } else {
            many = [NONE; BATCH];
            &mut many
        };
        let mut len = 0usize;
        for (slot, &(addr, n)) in riov.iter_mut().zip(chunk) {
            *slot = libc::iovec {
                iov_base: addr as usize as *mut libc::c_void,
                iov_len: n,
            };
            len += n;
        }
        let liov = libc::iovec {
            // In the caller's buffer: `at + len` is at most its length.
            iov_base: local.wrapping_add(at).cast(),
            iov_len: len,
        };
        // SAFETY: `liov` covers `len` bytes of the caller's buffer, valid for reads (and
        // writes when reading from the target) during the call.
        unsafe {
            crate::cma::vm_rw(
                pid,
                std::slice::from_ref(&liov),
                &riov[..chunk.len()],
                !write,
                len,
            )
        }?;
        at += len;
    }
    Ok(())
}

fn read(pid: u32, into: &mut [u8], runs: &[(u64, usize)]) -> io::Result<()> {
    debug_assert_eq!(into.len(), runs.iter().map(|r| r.1).sum::<usize>());
    transfer(pid, into.as_mut_ptr(), runs, false)
}

fn write(pid: u32, from: &[u8], runs: &[(u64, usize)]) -> io::Result<()> {
    debug_assert_eq!(from.len(), runs.iter().map(|r| r.1).sum::<usize>());
    // (Only read through the pointer: `write` sends from it.)
    transfer(pid, from.as_ptr().cast_mut(), runs, true)
}

/// The first copy of an operation failed: nothing was written. Not permitted or no such
/// process: the target is out of CMA's reach; anything else is the operation's error.
fn first(e: io::Error) -> Failure {
    if crate::cma::unreachable(&e) {
        Failure::Unreachable(e)
    } else {
        later(e)
    }
}

fn later(e: io::Error) -> Failure {
    Failure::Op(OscError::Transport(format!(
        "osc-rdma: an accumulate by CMA failed: {e}"
    )))
}

/// `target = target op data` over the target's `runs` (absolute addresses in its process;
/// whole elements of `elem` in all, an element may span runs), the previous contents into
/// `old` when given, under the target's accumulate word. `data` is the runs' length (empty
/// for [`AccOp::NoOp`]), checked by the caller as the engine checks it; `scratch` is kept by
/// the caller (no allocation once warm).
#[allow(clippy::too_many_arguments)]
pub fn accumulate(
    t: Target<'_>,
    runs: &[(u64, usize)],
    op: AccOp,
    elem: Elem,
    data: &[u8],
    old: Option<&mut [u8]>,
    host: Option<HostAccumulate>,
    scratch: &mut Vec<u8>,
) -> Result<(), Failure> {
    acc_lock(t.word);
    let r = apply(t.pid, runs, op, elem, data, old, host, scratch);
    acc_unlock(t.word);
    r
}

#[allow(clippy::too_many_arguments)]
fn apply(
    pid: u32,
    runs: &[(u64, usize)],
    op: AccOp,
    elem: Elem,
    data: &[u8],
    old: Option<&mut [u8]>,
    host: Option<HostAccumulate>,
    scratch: &mut Vec<u8>,
) -> Result<(), Failure> {
    let len: usize = runs.iter().map(|r| r.1).sum();
    match (op, old) {
        (AccOp::NoOp, Some(o)) => read(pid, o, runs).map_err(first),
        (AccOp::NoOp, None) => Ok(()),
        (AccOp::Replace, None) => write(pid, data, runs).map_err(first),
        (_, old) => {
            // The target's bytes, combined in place; with a result, a copy of them first
            // (the result is written only once the operation succeeded).
            let fetch = old.is_some();
            let need = if fetch { 2 * len } else { len };
            // Grown to the largest operation yet and never cleared: the read overwrites
            // the bytes used (zeroing them first was a pass of `memset` per operation).
            if scratch.len() < need {
                scratch.resize(need, 0);
            }
            let (cur, prev) = scratch[..need].split_at_mut(len);
            read(pid, cur, runs).map_err(first)?;
            combine(op, elem, cur, data, fetch.then_some(prev), host).map_err(Failure::Op)?;
            write(pid, cur, runs).map_err(later)?;
            if let Some(o) = old {
                o.copy_from_slice(prev);
            }
            Ok(())
        }
    }
}

/// `cur = cur op data`, the previous contents into `prev` first when given: the typed
/// loops ([`rmca_framework::osc::typed::apply`]: AVX2 from 256 bytes where the CPU has it,
/// where `accumulate_with`'s loop is baseline x86-64's 16-byte vectors: half the time of a
/// 4 KiB accumulate's arithmetic), or `accumulate_with` for what they do not compute
/// (pairs, the host's elements) and to name the error.
fn combine(
    op: AccOp,
    elem: Elem,
    cur: &mut [u8],
    data: &[u8],
    mut prev: Option<&mut [u8]>,
    host: Option<HostAccumulate>,
) -> Result<(), OscError> {
    // (Refused by the typed loops: nothing written, `prev` included.)
    if rmca_framework::osc::typed::apply(op, elem, cur, data, prev.as_deref_mut()) {
        return Ok(());
    }
    if let Some(p) = prev {
        p.copy_from_slice(cur);
    }
    accumulate_with(op, elem, cur, data, host)
}

/// Compare-and-swap of the element at `addr` (absolute, in the target's process): `value`
/// stored if it equals `compare` bit for bit, the previous value into `old` (each the
/// element's size, at most 8 bytes: checked by the caller), under the accumulate word.
pub fn compare_and_swap(
    t: Target<'_>,
    addr: u64,
    compare: &[u8],
    value: &[u8],
    old: &mut [u8],
) -> Result<(), Failure> {
    let n = old.len().min(8);
    let run = [(addr, n)];
    let mut cur = [0u8; 8];
    acc_lock(t.word);
    let r = read(t.pid, &mut cur[..n], &run)
        .map_err(first)
        .and_then(|()| {
            if cur[..n] == compare[..n] {
                write(t.pid, &value[..n], &run).map_err(later)
            } else {
                Ok(())
            }
        });
    acc_unlock(t.word);
    r?;
    old[..n].copy_from_slice(&cur[..n]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    fn me() -> u32 {
        std::process::id()
    }

    fn i32s(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    #[test]
    fn accumulates_by_cma_combine_fetch_and_refuse_without_writing() {
        let word = AtomicU64::new(0);
        let t = Target {
            pid: me(),
            word: &word,
        };
        let mut mem = i32s(&[1, 2, 3, 4]);
        let at = mem.as_mut_ptr() as u64;
        let mut scratch = Vec::new();
        // Two runs (elements 0 and 2), summed, the old values fetched.
        let runs = [(at, 4), (at + 8, 4)];
        let mut old = vec![0u8; 8];
        accumulate(
            t,
            &runs,
            AccOp::Sum,
            Elem::I32,
            &i32s(&[10, 20]),
            Some(&mut old),
            None,
            &mut scratch,
        )
        .unwrap();
        assert_eq!(old, i32s(&[1, 3]));
        assert_eq!(mem, i32s(&[11, 2, 23, 4]));
        assert_eq!(word.load(Ordering::Relaxed), 0, "given back");
        // MPI_NO_OP reads, MPI_REPLACE writes.
        accumulate(
            t,
            &runs,
            AccOp::NoOp,
            Elem::I32,
            &[],
            Some(&mut old),
            None,
            &mut scratch,
        )
        .unwrap();
        assert_eq!(old, i32s(&[11, 23]));
        let replace = i32s(&[7, 8]);
        accumulate(
            t,
            &runs,
            AccOp::Replace,
            Elem::I32,
            &replace,
            None,
            None,
            &mut scratch,
        )
        .unwrap();
        assert_eq!(mem, i32s(&[7, 2, 8, 4]));
        // An element split over two runs (a pair of 8 bytes in runs of 4): combined whole.
        let mut pair = vec![0u8; 16];
        pair[..4].copy_from_slice(&5i32.to_ne_bytes());
        pair[12..].copy_from_slice(&1i32.to_ne_bytes());
        let p = pair.as_mut_ptr() as u64;
        let data = [3i32.to_ne_bytes(), 9i32.to_ne_bytes()].concat();
        accumulate(
            t,
            &[(p, 4), (p + 12, 4)],
            AccOp::MinLoc,
            Elem::PairI32,
            &data,
            None,
            None,
            &mut scratch,
        )
        .unwrap();
        assert_eq!(pair[..4], 3i32.to_ne_bytes());
        assert_eq!(pair[12..], 9i32.to_ne_bytes());
        // Elements needing the host's arithmetic, with no host: refused, nothing written.
        let mut ld = vec![1u8; 16];
        let before = ld.clone();
        let l = ld.as_mut_ptr() as u64;
        let r = accumulate(
            t,
            &[(l, 16)],
            AccOp::Sum,
            Elem::LongDouble,
            &[2u8; 16],
            Some(&mut old[..0]),
            None,
            &mut scratch,
        );
        assert!(matches!(r, Err(Failure::Op(OscError::Op(_)))), "{r:?}");
        assert_eq!(ld, before);
        assert_eq!(
            word.load(Ordering::Relaxed),
            0,
            "given back after a refusal"
        );
    }

    /// Long runs (the typed loops, AVX2 from 256 bytes where the CPU has it) and the
    /// pairs (the framework's loop) give what the framework's `accumulate_with` gives, with
    /// and without the previous contents fetched, at lengths off the vector widths.
    #[test]
    fn long_accumulates_by_cma_agree_with_the_framework() {
        let word = AtomicU64::new(0);
        let t = Target {
            pid: me(),
            word: &word,
        };
        let mut scratch = Vec::new();
        let bytes = |n: usize, k: u32| -> Vec<u8> {
            (0..n as u32)
                .map(|i| (i.wrapping_add(k).wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect()
        };
        let cases = [
            (Elem::I8, AccOp::Sum),
            (Elem::I32, AccOp::Max),
            (Elem::U64, AccOp::BXor),
            (Elem::I64, AccOp::Prod),
            (Elem::I16, AccOp::LAnd),
            (Elem::U8, AccOp::Replace),
            (Elem::PairI32, AccOp::MinLoc),
        ];
        for (elem, op) in cases {
            for n in [4096, 4096 + 8 * 3, 256 - 8, 65536] {
                let n = n / elem.size() * elem.size();
                for fetch in [false, true] {
                    let mut mem = bytes(n, 1);
                    let data = bytes(n, 2);
                    let mut want = mem.clone();
                    let prev = want.clone();
                    accumulate_with(op, elem, &mut want, &data, None).unwrap();
                    let mut old = vec![0u8; if fetch { n } else { 0 }];
                    let at = mem.as_mut_ptr() as u64;
                    accumulate(
                        t,
                        &[(at, n)],
                        op,
                        elem,
                        &data,
                        fetch.then_some(&mut old[..]),
                        None,
                        &mut scratch,
                    )
                    .unwrap();
                    assert!(mem == want, "{elem:?} {op:?} {n} bytes, fetch {fetch}");
                    if fetch {
                        assert!(old == prev, "{elem:?} {op:?} {n} bytes: previous contents");
                    }
                }
            }
        }
    }

    /// The scratch grows to the largest operation and stays: a smaller one after it neither
    /// shrinks nor rewrites it (no `memset` of the run per operation before the read).
    #[test]
    fn a_warm_scratch_is_kept_as_it_is() {
        let word = AtomicU64::new(0);
        let t = Target {
            pid: me(),
            word: &word,
        };
        let mut scratch = Vec::new();
        let mut mem = vec![1u8; 4096];
        let at = mem.as_mut_ptr() as u64;
        let mut old = vec![0u8; 4096];
        let sum = |scratch: &mut Vec<u8>, old: &mut [u8], n: usize| {
            accumulate(
                t,
                &[(at, n)],
                AccOp::Sum,
                Elem::U8,
                &vec![2u8; n],
                Some(old),
                None,
                scratch,
            )
            .unwrap();
        };
        sum(&mut scratch, &mut old, 4096);
        assert_eq!(scratch.len(), 2 * 4096);
        // (A mark past what the next operation uses: it must survive it.)
        scratch[2 * 16] = 0xa5;
        sum(&mut scratch, &mut old[..16], 16);
        assert_eq!(scratch.len(), 2 * 4096, "kept at its largest");
        assert_eq!(scratch[2 * 16], 0xa5, "not rewritten past the operation");
        assert_eq!((mem[0], mem[16], old[0]), (5, 3, 3));
    }

    #[test]
    fn compare_and_swap_by_cma() {
        let word = AtomicU64::new(0);
        let t = Target {
            pid: me(),
            word: &word,
        };
        let mut v = 5u64;
        let at = std::ptr::addr_of_mut!(v) as u64;
        let mut old = [0u8; 8];
        compare_and_swap(t, at, &4u64.to_ne_bytes(), &9u64.to_ne_bytes(), &mut old).unwrap();
        assert_eq!((u64::from_ne_bytes(old), v), (5, 5), "not equal: kept");
        compare_and_swap(t, at, &5u64.to_ne_bytes(), &9u64.to_ne_bytes(), &mut old).unwrap();
        assert_eq!((u64::from_ne_bytes(old), v), (5, 9), "equal: swapped");
        let mut b = [1u8, 2];
        let at = b.as_mut_ptr() as u64 + 1;
        let mut o = [0u8; 1];
        compare_and_swap(t, at, &[2], &[7], &mut o).unwrap();
        assert_eq!((o, b), ([2], [1, 7]), "one byte, its neighbour untouched");
    }

    #[test]
    fn a_process_out_of_reach_is_unreachable_and_nothing_is_written() {
        let word = AtomicU64::new(0);
        // Beyond pid_max (at most 2^22): no such process.
        let t = Target {
            pid: (1 << 22) + 7,
            word: &word,
        };
        let mut old = [0u8; 4];
        let r = accumulate(
            t,
            &[(0x1000, 4)],
            AccOp::Sum,
            Elem::I32,
            &[1; 4],
            Some(&mut old),
            None,
            &mut Vec::new(),
        );
        assert!(matches!(r, Err(Failure::Unreachable(_))), "{r:?}");
        let r = compare_and_swap(t, 0x1000, &[0; 4], &[1; 4], &mut old);
        assert!(matches!(r, Err(Failure::Unreachable(_))), "{r:?}");
        assert_eq!(old, [0; 4]);
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }

    /// Origins applying fetch-and-adds to one counter by CMA at once (threads here, with
    /// the counter in this process) lose no update under the word, and each sees every
    /// value once.
    #[test]
    fn concurrent_direct_accumulates_lose_no_update() {
        let word = Arc::new(AtomicU64::new(0));
        let counter = Arc::new(std::sync::Mutex::new(0u64));
        // The counter's address (the Mutex's data never moves while the Arc lives); the
        // Mutex is never locked: only CMA and the word touch it.
        let at = counter
            .try_lock()
            .map(|g| &*g as *const u64 as u64)
            .unwrap();
        let per = 3000u64;
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (word, _keep) = (word.clone(), counter.clone());
                std::thread::spawn(move || {
                    let t = Target {
                        pid: me(),
                        word: &word,
                    };
                    let mut seen = Vec::new();
                    let mut scratch = Vec::new();
                    let mut old = [0u8; 8];
                    for _ in 0..per {
                        accumulate(
                            t,
                            &[(at, 8)],
                            AccOp::Sum,
                            Elem::U64,
                            &1u64.to_ne_bytes(),
                            Some(&mut old),
                            None,
                            &mut scratch,
                        )
                        .unwrap();
                        seen.push(u64::from_ne_bytes(old));
                    }
                    seen
                })
            })
            .collect();
        let mut all: Vec<u64> = threads
            .into_iter()
            .flat_map(|t| {
                let seen = t.join().unwrap();
                assert!(seen.windows(2).all(|w| w[0] < w[1]), "in order");
                seen
            })
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..4 * per).collect::<Vec<_>>(), "every value once");
        assert_eq!(*counter.lock().unwrap(), 4 * per);
    }
}
