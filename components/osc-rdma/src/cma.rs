//! Puts and gets of lent buffers to members of this node, moved by the origin itself with
//! CMA (`process_vm_writev` / `process_vm_readv`) at the synchronization or progress that
//! follows them (`osc_rdma_cma_direct`): no BTL transfer, no token to poll, no PML round,
//! and every transfer queued since the last one in one system call per target and direction
//! (the kernel takes a vector of local and of remote pieces: adjacent or not). A put and its
//! flush are then one system call, as Open MPI's vader put is, and 64 puts before a flush
//! (OSU's put_bw) one as well.
//!
//! [`batch_end`] (how the queue splits into calls) is sans-IO; [`issue`] makes one call.
#![allow(unsafe_code)]

use std::io;
use std::mem::MaybeUninit;

use rmca_framework::buffer::UserBuf;
use rmca_framework::osc::OpId;

/// One queued transfer: a run of a lent put or get.
#[derive(Debug, Clone, Copy)]
pub struct Cma {
    /// The operation it belongs to.
    pub op: OpId,
    /// The target's window rank.
    pub peer: usize,
    /// The target's pid (of this pid namespace).
    pub pid: u32,
    /// The operation's whole lent buffer, and this run's part of it.
    pub view: UserBuf,
    /// Where in `view` this run's bytes are, and how many.
    pub at: usize,
    /// The run's length.
    pub len: usize,
    /// The target address (in the target's address space).
    pub raddr: u64,
    /// A get (read from the target) rather than a put.
    pub get: bool,
}

/// Pieces per system call (each side's iovec array lives on the stack; Linux takes up to
/// 1024).
pub const BATCH: usize = 64;

/// The end of the system call that starts at `q[start]`: the entries after it to the same
/// target in the same direction, at most [`BATCH`] in all.
pub fn batch_end(q: &[Cma], start: usize) -> usize {
    let first = &q[start];
    let mut end = start + 1;
    while end < q.len()
        && end - start < BATCH
        && q[end].peer == first.peer
        && q[end].get == first.get
    {
        end += 1;
    }
    end
}

/// Why a call moved nothing or not everything.
#[derive(Debug)]
pub enum Failure {
    /// CMA does not reach the target (not permitted, no such process, no such call): nothing
    /// was moved.
    Unreachable(io::Error),
    /// The call failed otherwise, or moved part of the bytes only.
    Failed(io::Error),
}

/// Move `batch` (one target, one direction: [`batch_end`]'s) in one system call.
pub fn issue(batch: &[Cma]) -> Result<(), Failure> {
    debug_assert!(!batch.is_empty() && batch.len() <= BATCH);
    let n = batch.len().min(BATCH);
    // (Not zeroed: only the first `n` are written, and only those are read.)
    let mut local = [const { MaybeUninit::<libc::iovec>::uninit() }; BATCH];
    let mut remote = [const { MaybeUninit::<libc::iovec>::uninit() }; BATCH];
    let mut total = 0usize;
    // Pieces that continue the previous one on both sides join it (OSU's put_bw: 64 puts
    // to consecutive displacements from consecutive bytes): the kernel pins the remote pages
    // once per remote iovec, so 64 one-byte iovecs cost far more than one of 64 bytes.
    let mut k = 0usize;
    let (mut lend, mut rend) = (0usize, 0u64);
    for x in &batch[..n] {
        let at = x.view.slice(x.at, x.len).as_ptr();
        if k > 0 && at as usize == lend && x.raddr == rend {
            // SAFETY: written at `k - 1` below in an earlier turn.
            unsafe {
                local[k - 1].assume_init_mut().iov_len += x.len;
                remote[k - 1].assume_init_mut().iov_len += x.len;
            }
        } else {
            local[k].write(libc::iovec {
                iov_base: at.cast(),
                iov_len: x.len,
            });
            remote[k].write(libc::iovec {
                iov_base: x.raddr as usize as *mut libc::c_void,
                iov_len: x.len,
            });
            k += 1;
        }
        lend = (at as usize).wrapping_add(x.len);
        rend = x.raddr.wrapping_add(x.len as u64);
        total += x.len;
    }
    // SAFETY: the first `k` entries of both arrays were written above.
    let (local, remote) = unsafe {
        (
            std::slice::from_raw_parts(local.as_ptr().cast::<libc::iovec>(), k),
            std::slice::from_raw_parts(remote.as_ptr().cast::<libc::iovec>(), k),
        )
    };
    // SAFETY: each local piece is part of a lent buffer the program leaves to the operation
    // until it completes locally (valid for reads; for writes, a get's buffer is writable:
    // `UserBuf::is_writable`, checked by the module before queueing), and the operation
    // completes only after this call.
    unsafe { vm_rw(batch[0].pid, local, remote, batch[0].get, total) }.map_err(|e| {
        if unreachable(&e) {
            Failure::Unreachable(e)
        } else {
            Failure::Failed(e)
        }
    })
}

/// Whether CMA failed because it does not reach the process at all (not permitted, no such
/// process, no such call): nothing was moved, and messages must serve that target.
pub fn unreachable(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM | libc::ESRCH | libc::ENOSYS)
    )
}

/// One `process_vm_readv` (`get`: from process `pid` into `local`) or `process_vm_writev`
/// (from `local` to `pid`) over the pieces `local` and `remote`, retried when a signal
/// interrupts it; `Ok` once all `total` bytes moved (a partial move is an
/// `UnexpectedEof` error). The one CMA call of this crate: [`issue`] and the accumulates
/// applied by the origin (`crate::direct`) make theirs here.
///
/// # Safety
/// Every local piece is memory valid for reads (for `get`, for writes) during the call,
/// not otherwise accessed meanwhile; the remote pieces are the kernel's to check against
/// the target's address space.
pub unsafe fn vm_rw(
    pid: u32,
    local: &[libc::iovec],
    remote: &[libc::iovec],
    get: bool,
    total: usize,
) -> io::Result<()> {
    let pid = pid as libc::pid_t;
    // The two calls take the same arguments: which way the bytes go is the only difference.
    let call = if get {
        libc::process_vm_readv
    } else {
        libc::process_vm_writev
    };
    loop {
        // SAFETY: the caller's contract for the local pieces; both arrays are as long as
        // the counts passed.
        let moved = unsafe {
            call(
                pid,
                local.as_ptr(),
                local.len() as _,
                remote.as_ptr(),
                remote.len() as _,
                0,
            )
        };
        if moved < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if moved as usize != total {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("CMA moved {moved} of {total} bytes"),
            ));
        }
        return Ok(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(peer: usize, view: UserBuf, raddr: u64, get: bool) -> Cma {
        Cma {
            op: 0,
            peer,
            pid: std::process::id(),
            view,
            at: 0,
            len: view.len(),
            raddr,
            get,
        }
    }

    #[test]
    fn a_batch_is_one_target_and_direction_at_most_batch_long() {
        let b = [1u8; 4];
        // SAFETY: a view of `b`, which outlives it; nothing moves through it here.
        let v = unsafe { UserBuf::from_slice(&b) };
        let q: Vec<Cma> = [(1, false), (1, false), (2, false), (2, true), (2, true)]
            .iter()
            .map(|&(p, g)| x(p, v, 0, g))
            .collect();
        assert_eq!(batch_end(&q, 0), 2);
        assert_eq!(batch_end(&q, 2), 3);
        assert_eq!(batch_end(&q, 3), 5);
        let long = vec![x(1, v, 0, false); BATCH + 3];
        assert_eq!(batch_end(&long, 0), BATCH);
        assert_eq!(batch_end(&long, BATCH), BATCH + 3);
    }

    #[test]
    fn adjacent_pieces_join_and_move_their_bytes() {
        let src: Vec<u8> = (1..=8).collect();
        let mut dst = vec![0u8; 8];
        let at = dst.as_mut_ptr() as u64;
        // SAFETY: a view of `src`, which outlives the call.
        let v = unsafe { UserBuf::from_slice(&src) };
        // Eight one-byte puts, consecutive on both sides but the fourth (a gap at the target).
        let q: Vec<Cma> = (0..8usize)
            .map(|i| Cma {
                at: i,
                len: 1,
                ..x(1, v, at + i as u64 + u64::from(i >= 4), false)
            })
            .filter(|c| c.raddr < at + 8)
            .collect();
        issue(&q).unwrap();
        assert_eq!(dst, [1, 2, 3, 4, 0, 5, 6, 7]);
    }

    #[test]
    fn pieces_not_adjacent_on_either_side_move_in_one_call() {
        let src: Vec<u8> = (1..=8).collect();
        let mut dst = vec![0u8; 16];
        let at = dst.as_mut_ptr() as u64;
        // SAFETY: views of `src`, which outlives the calls.
        let v = unsafe { UserBuf::from_slice(&src) };
        let puts = [
            Cma {
                at: 4,
                len: 2,
                ..x(1, v, at + 10, false)
            },
            Cma {
                at: 0,
                len: 3,
                ..x(1, v, at, false)
            },
        ];
        issue(&puts).unwrap();
        assert_eq!(dst, [1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 5, 6, 0, 0, 0, 0]);
        let mut back = vec![0u8; 4];
        // SAFETY: `back` outlives the call.
        let w = unsafe { UserBuf::from_mut_slice(&mut back) };
        let gets = [
            Cma {
                len: 2,
                ..x(1, w, at + 10, true)
            },
            Cma {
                at: 2,
                len: 2,
                ..x(1, w, at + 1, true)
            },
        ];
        issue(&gets).unwrap();
        assert_eq!(back, [5, 6, 2, 3]);
        // A process that does not exist: unreachable, nothing moved.
        let dead = Cma {
            pid: i32::MAX as u32,
            ..puts[0]
        };
        assert!(matches!(issue(&[dead]), Err(Failure::Unreachable(_))));
        // A remote range that is not mapped: failed.
        let unmapped = Cma {
            raddr: 8,
            ..puts[0]
        };
        assert!(matches!(issue(&[unmapped]), Err(Failure::Failed(_))));
    }
}
