//! The OSC (one-sided communication) framework: MPI windows and the RMA operations on them
//! (put, get, accumulate and its fetching forms, compare-and-swap) with every MPI
//! synchronization (fence, post/start/complete/wait, lock/unlock, lock_all/unlock_all,
//! flush, sync).
//!
//! # Design
//! One [`OscModule`] serves one window on one process, created by the component chosen for
//! that window: [`OscComponent::query`] says whether the component can serve a window of
//! this shape (an `osc-sm` only when every member shares the node, an `osc-rdma` only when
//! an RDMA-capable BTL reaches every member, `osc-am` always) and the highest priority among
//! the allowed ones wins (`--mca osc am` restricts the choice like every selector).
//!
//! The module speaks in the window's own terms: target ranks of the window's group, target
//! addresses (a displacement already scaled by the target's displacement unit, or an
//! absolute address in a dynamic window), and data already packed at the origin. The target
//! side of a derived datatype travels as a [`Layout`]: the runs of contiguous bytes the
//! target datatype covers, in typemap order, relative to the target address. So no module
//! needs a datatype engine, a target never trusts an origin's description (each run is
//! checked against the window before anything is written), and osc-rdma can turn each run
//! into one BTL put or get.
//!
//! Calls never block: an operation returns an [`OpId`] whose completion the host polls with
//! [`OscModule::poll_op`], and a synchronization starts with [`OscModule::sync`] and is
//! finished when [`OscModule::sync_done`] says so. Between polls the host drives
//! [`OscModule::progress`] with an [`OscPort`], the module's only way to the outside:
//! - osc-am sends every operation as an active message through the port
//!   ([`OscPort::send`]) and is handed the messages for it ([`OscPort::recv`]); the target
//!   applies them in its own progress, so one-sided traffic works over every PML and BTL
//!   (dr over ud included);
//! - osc-rdma uses the same messages for synchronization and for accumulates (applied by
//!   the target, which keeps them atomic and ordered), and moves put/get data with the BTLs'
//!   RDMA through the port's [`OscRdma`] capability ([`OscPort::rdma`]: the PML's
//!   `rdma_*` methods);
//! - osc-sm maps one segment holding every member's memory at creation (it places the
//!   memory of allocated windows itself: [`OscComponent::allocate`], its name agreed through
//!   an [`OscSetup`]) and does loads, stores and CPU atomics; its synchronization words live
//!   in the segment too, so it needs no port at all.
//!
//! Errors are typed ([`OscError`]) and map one to one to MPI's error classes
//! (`MPI_ERR_RMA_RANGE`, `MPI_ERR_RMA_SYNC`, ...).

use std::cell::Cell;
use std::rc::Rc;

use thiserror::Error;

use crate::buffer::UserBuf;
use crate::params::ParamStore;

pub mod typed;
pub use crate::pml::{RdmaKeys, RdmaToken};

/// Identifies an RMA operation of one module (for request-based completion).
pub type OpId = u64;

/// Errors of one-sided calls, one per MPI error class.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum OscError {
    /// Target memory outside the window (`MPI_ERR_RMA_RANGE`).
    #[error("{0}")]
    Range(String),
    /// An operation or synchronization outside the epoch it needs (`MPI_ERR_RMA_SYNC`).
    #[error("{0}")]
    Sync(String),
    /// A rank outside the window's group (`MPI_ERR_RANK`).
    #[error("{0}")]
    Rank(String),
    /// An operation or element type accumulate does not support (`MPI_ERR_OP`).
    #[error("{0}")]
    Op(String),
    /// Memory attach/detach misuse in a dynamic window (`MPI_ERR_RMA_ATTACH`).
    #[error("{0}")]
    Attach(String),
    /// Any other invalid argument (`MPI_ERR_ARG`).
    #[error("{0}")]
    Arg(String),
    /// The transport failed (`MPI_ERR_OTHER`).
    #[error("{0}")]
    Transport(String),
}

/// A target's passive-target lock as one reader-writer word in memory the processes of its
/// node share (osc-sm's windows, osc-rdma's lock words for created windows; Open MPI's
/// osc/rdma keeps one per rank likewise): bit 63 an exclusive holder, the low bits the count
/// of shared holders. A shared request is granted whenever no exclusive holder is there,
/// even with exclusive requests waiting (no reservation: a process holding one lock never
/// waits on a writer that waits on it); the price is that a writer waits while shared
/// holders keep overlapping.
pub mod lock_word {
    use super::LockKind;
    use std::sync::atomic::{fence, AtomicU64, Ordering};

    /// An exclusive holder.
    pub const EXCL: u64 = 1 << 63;
    /// The count of shared holders.
    pub const READERS: u64 = EXCL - 1;

    /// Try to take a lock of `kind` (true: held). A shared request retries while only other
    /// shared holders come and go; it fails only on an exclusive holder.
    #[inline]
    pub fn try_acquire(word: &AtomicU64, kind: LockKind) -> bool {
        match kind {
            LockKind::Exclusive => word
                .compare_exchange(0, EXCL, Ordering::Acquire, Ordering::Relaxed)
                .is_ok(),
            LockKind::Shared => {
                let mut v = word.load(Ordering::Relaxed);
                loop {
                    if v & EXCL != 0 {
                        return false;
                    }
                    match word.compare_exchange_weak(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                    {
                        Ok(_) => return true,
                        Err(now) => v = now,
                    }
                }
            }
        }
    }

    /// Give back a lock of `kind` held on `word`: what the holder wrote under it (stores,
    /// CMA copies, which are complete when their system call returns) is visible to the
    /// word's next holder, and (the full fence) to whoever this process synchronizes with
    /// next.
    #[inline]
    pub fn release(word: &AtomicU64, kind: LockKind) {
        fence(Ordering::SeqCst);
        match kind {
            LockKind::Exclusive => word.fetch_sub(EXCL, Ordering::Release),
            LockKind::Shared => word.fetch_sub(1, Ordering::Release),
        };
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn exclusive_alone_shared_together() {
            let w = AtomicU64::new(0);
            assert!(try_acquire(&w, LockKind::Shared));
            assert!(try_acquire(&w, LockKind::Shared));
            assert!(!try_acquire(&w, LockKind::Exclusive));
            release(&w, LockKind::Shared);
            assert!(!try_acquire(&w, LockKind::Exclusive));
            release(&w, LockKind::Shared);
            assert!(try_acquire(&w, LockKind::Exclusive));
            assert!(!try_acquire(&w, LockKind::Shared));
            assert!(!try_acquire(&w, LockKind::Exclusive));
            release(&w, LockKind::Exclusive);
            assert_eq!(w.load(Ordering::Relaxed), 0);
        }
    }
}

/// Lock types of passive-target synchronization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// `MPI_LOCK_SHARED`.
    Shared,
    /// `MPI_LOCK_EXCLUSIVE`.
    Exclusive,
}

/// An accumulate operation (the predefined MPI operations that apply to one-sided calls).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AccOp {
    /// `MPI_REPLACE`: the target takes the origin's value.
    Replace = 0,
    /// `MPI_NO_OP`: the target is left as it is (fetching forms only read).
    NoOp,
    /// `MPI_SUM` (wrapping on integers).
    Sum,
    /// `MPI_PROD` (wrapping on integers).
    Prod,
    /// `MPI_MIN`.
    Min,
    /// `MPI_MAX`.
    Max,
    /// `MPI_BAND`.
    BAnd,
    /// `MPI_BOR`.
    BOr,
    /// `MPI_BXOR`.
    BXor,
    /// `MPI_LAND`.
    LAnd,
    /// `MPI_LOR`.
    LOr,
    /// `MPI_LXOR`.
    LXor,
    /// `MPI_MINLOC` (on value-index pairs).
    MinLoc,
    /// `MPI_MAXLOC` (on value-index pairs).
    MaxLoc,
}

impl AccOp {
    /// Every operation, in wire order.
    pub const ALL: [AccOp; 14] = [
        AccOp::Replace,
        AccOp::NoOp,
        AccOp::Sum,
        AccOp::Prod,
        AccOp::Min,
        AccOp::Max,
        AccOp::BAnd,
        AccOp::BOr,
        AccOp::BXor,
        AccOp::LAnd,
        AccOp::LOr,
        AccOp::LXor,
        AccOp::MinLoc,
        AccOp::MaxLoc,
    ];

    /// The operation of a wire byte.
    pub fn from_u8(b: u8) -> Option<AccOp> {
        Self::ALL.get(usize::from(b)).copied()
    }
}

/// The element type of an accumulate (the predefined type the target datatype is built of).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Elem {
    /// Signed 8-bit integer.
    I8 = 0,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
    /// Bytes no arithmetic applies to (`MPI_BYTE`): only replace and no-op.
    Byte,
    /// A value-index pair, packed: an `i16` and a C `int` (`MPI_SHORT_INT`).
    PairI16,
    /// An `i32` and an `int` (`MPI_2INT`).
    PairI32,
    /// An `i64` and an `int` (`MPI_LONG_INT`).
    PairI64,
    /// An `f32` and an `int` (`MPI_FLOAT_INT`).
    PairF32,
    /// An `f64` and an `int` (`MPI_DOUBLE_INT`).
    PairF64,
    /// C `long double` (16 bytes): arithmetic by the host ([`HostAccumulate`]).
    LongDouble,
    /// `float _Complex`: products by the host (sums are two `F32`s).
    ComplexF32,
    /// `double _Complex`: products by the host (sums are two `F64`s).
    ComplexF64,
    /// `long double _Complex` (32 bytes): arithmetic by the host.
    LongDoubleComplex,
    /// A C `long double` (16 bytes, as [`Elem::LongDouble`]) and an `int`, packed: 20 bytes
    /// (`MPI_LONG_DOUBLE_INT`; the C struct pads it to 32). MINLOC/MAXLOC only compare, so
    /// the framework does them itself ([`long_double_cmp`]).
    PairLongDouble,
}

/// Arithmetic the framework has no Rust number for (C `long double`, complex products),
/// supplied by the host that made the window (the MPI C library): `target = target op
/// origin` over whole elements; false if the host does not compute `op` on `elem` either.
pub type HostAccumulate = fn(AccOp, Elem, &mut [u8], &[u8]) -> bool;

impl Elem {
    /// Every element type, in wire order.
    pub const ALL: [Elem; 21] = [
        Elem::I8,
        Elem::I16,
        Elem::I32,
        Elem::I64,
        Elem::U8,
        Elem::U16,
        Elem::U32,
        Elem::U64,
        Elem::F32,
        Elem::F64,
        Elem::Byte,
        Elem::PairI16,
        Elem::PairI32,
        Elem::PairI64,
        Elem::PairF32,
        Elem::PairF64,
        Elem::LongDouble,
        Elem::ComplexF32,
        Elem::ComplexF64,
        Elem::LongDoubleComplex,
        Elem::PairLongDouble,
    ];

    /// The element type of a wire byte.
    pub fn from_u8(b: u8) -> Option<Elem> {
        Self::ALL.get(usize::from(b)).copied()
    }

    /// Bytes of one element.
    pub fn size(self) -> usize {
        match self {
            Elem::I8 | Elem::U8 | Elem::Byte => 1,
            Elem::I16 | Elem::U16 => 2,
            Elem::I32 | Elem::U32 | Elem::F32 => 4,
            Elem::I64 | Elem::U64 | Elem::F64 => 8,
            Elem::PairI16 => 6,
            Elem::PairI32 | Elem::PairF32 => 8,
            Elem::PairI64 | Elem::PairF64 => 12,
            Elem::ComplexF32 => 8,
            Elem::LongDouble | Elem::ComplexF64 => 16,
            Elem::LongDoubleComplex => 32,
            Elem::PairLongDouble => 20,
        }
    }

    /// Is its arithmetic the host's ([`HostAccumulate`])?
    pub fn host_arithmetic(self) -> bool {
        matches!(
            self,
            Elem::LongDouble | Elem::ComplexF32 | Elem::ComplexF64 | Elem::LongDoubleComplex
        )
    }

    /// Is it a value-index pair?
    pub fn is_pair(self) -> bool {
        matches!(
            self,
            Elem::PairI16
                | Elem::PairI32
                | Elem::PairI64
                | Elem::PairF32
                | Elem::PairF64
                | Elem::PairLongDouble
        )
    }

    /// Does `op` apply to this type (MPI 5.0 section 6.9.2)?
    pub fn supports(self, op: AccOp) -> bool {
        match op {
            AccOp::Replace | AccOp::NoOp => true,
            AccOp::MinLoc | AccOp::MaxLoc => self.is_pair(),
            _ if self.is_pair() => false,
            // What the host computes is its call (a refusal then is an `OscError::Op`).
            _ if self.host_arithmetic() => true,
            AccOp::Sum | AccOp::Prod | AccOp::Min | AccOp::Max => self != Elem::Byte,
            AccOp::LAnd | AccOp::LOr | AccOp::LXor => {
                !matches!(self, Elem::F32 | Elem::F64 | Elem::Byte)
            }
            AccOp::BAnd | AccOp::BOr | AccOp::BXor => !matches!(self, Elem::F32 | Elem::F64),
        }
    }
}

/// `target = target op origin`, elementwise over whole elements of `elem` (native byte
/// order: every member of a job runs on the same architecture). The two slices have the same
/// length, a multiple of the element size (else [`OscError::Arg`]).
pub fn accumulate(op: AccOp, elem: Elem, target: &mut [u8], origin: &[u8]) -> Result<(), OscError> {
    accumulate_with(op, elem, target, origin, None)
}

/// [`accumulate`], with the host's arithmetic for the elements that need it
/// ([`Elem::host_arithmetic`]).
pub fn accumulate_with(
    op: AccOp,
    elem: Elem,
    target: &mut [u8],
    origin: &[u8],
    host: Option<HostAccumulate>,
) -> Result<(), OscError> {
    if !elem.supports(op) {
        return Err(OscError::Op(format!(
            "accumulate: {op:?} is not defined on {elem:?} elements"
        )));
    }
    let size = elem.size();
    if target.len() != origin.len() || !target.len().is_multiple_of(size) {
        return Err(OscError::Arg(format!(
            "accumulate: {} target bytes and {} origin bytes are not the same whole number of {size}-byte elements",
            target.len(),
            origin.len()
        )));
    }
    match op {
        AccOp::NoOp => return Ok(()),
        AccOp::Replace => {
            target.copy_from_slice(origin);
            return Ok(());
        }
        AccOp::MinLoc | AccOp::MaxLoc => {
            pairs(op == AccOp::MaxLoc, elem, target, origin);
            return Ok(());
        }
        _ if elem.host_arithmetic() => {
            return match host {
                Some(f) if f(op, elem, target, origin) => Ok(()),
                _ => Err(OscError::Op(format!(
                    "accumulate: {op:?} on {elem:?} elements is not computed here"
                ))),
            };
        }
        _ => {}
    }
    // One loop per (type, operation), with the element size a constant: the compiler then
    // vectorizes it (a runtime size and a match per element cost ~10x on long accumulates).
    fn each<const S: usize, T>(
        target: &mut [u8],
        origin: &[u8],
        from: impl Fn([u8; S]) -> T,
        to: impl Fn(T) -> [u8; S],
        f: impl Fn(T, T) -> T,
    ) {
        for (t, o) in target.chunks_exact_mut(S).zip(origin.chunks_exact(S)) {
            let a = from(t.try_into().expect("chunk of the type's size"));
            let b = from(o.try_into().expect("chunk of the type's size"));
            t.copy_from_slice(&to(f(a, b)));
        }
    }
    macro_rules! int {
        ($t:ty) => {{
            const S: usize = std::mem::size_of::<$t>();
            let (fr, to) = (<$t>::from_ne_bytes, <$t>::to_ne_bytes);
            match op {
                AccOp::Sum => each::<S, $t>(target, origin, fr, to, |a, b| a.wrapping_add(b)),
                AccOp::Prod => each::<S, $t>(target, origin, fr, to, |a, b| a.wrapping_mul(b)),
                AccOp::Min => each::<S, $t>(target, origin, fr, to, |a, b| a.min(b)),
                AccOp::Max => each::<S, $t>(target, origin, fr, to, |a, b| a.max(b)),
                AccOp::BAnd => each::<S, $t>(target, origin, fr, to, |a, b| a & b),
                AccOp::BOr => each::<S, $t>(target, origin, fr, to, |a, b| a | b),
                AccOp::BXor => each::<S, $t>(target, origin, fr, to, |a, b| a ^ b),
                AccOp::LAnd => {
                    each::<S, $t>(target, origin, fr, to, |a, b| <$t>::from(a != 0 && b != 0))
                }
                AccOp::LOr => {
                    each::<S, $t>(target, origin, fr, to, |a, b| <$t>::from(a != 0 || b != 0))
                }
                AccOp::LXor => each::<S, $t>(target, origin, fr, to, |a, b| {
                    <$t>::from((a != 0) != (b != 0))
                }),
                AccOp::Replace | AccOp::NoOp | AccOp::MinLoc | AccOp::MaxLoc => {
                    unreachable!("handled above")
                }
            }
        }};
    }
    macro_rules! float {
        ($t:ty) => {{
            const S: usize = std::mem::size_of::<$t>();
            let (fr, to) = (<$t>::from_ne_bytes, <$t>::to_ne_bytes);
            match op {
                AccOp::Sum => each::<S, $t>(target, origin, fr, to, |a, b| a + b),
                AccOp::Prod => each::<S, $t>(target, origin, fr, to, |a, b| a * b),
                AccOp::Min => each::<S, $t>(target, origin, fr, to, |a, b| a.min(b)),
                AccOp::Max => each::<S, $t>(target, origin, fr, to, |a, b| a.max(b)),
                _ => unreachable!("checked by supports"),
            }
        }};
    }
    match elem {
        Elem::I8 => int!(i8),
        Elem::I16 => int!(i16),
        Elem::I32 => int!(i32),
        Elem::I64 => int!(i64),
        Elem::U8 | Elem::Byte => int!(u8),
        Elem::U16 => int!(u16),
        Elem::U32 => int!(u32),
        Elem::U64 => int!(u64),
        Elem::F32 => float!(f32),
        Elem::F64 => float!(f64),
        Elem::PairI16
        | Elem::PairI32
        | Elem::PairI64
        | Elem::PairF32
        | Elem::PairF64
        | Elem::PairLongDouble => {
            unreachable!("pairs take MINLOC/MAXLOC, replace or no-op (checked by supports)")
        }
        Elem::LongDouble | Elem::ComplexF32 | Elem::ComplexF64 | Elem::LongDoubleComplex => {
            unreachable!("the host's arithmetic (handled above)")
        }
    }
    Ok(())
}

/// `MPI_MINLOC`/`MPI_MAXLOC` on packed value-index pairs (the value, then a C `int` index
/// at once): the smaller (larger) value wins; equal values keep the smaller index; a NaN on
/// either side keeps the target, as a comparison that is never true would.
fn pairs(max: bool, elem: Elem, target: &mut [u8], origin: &[u8]) {
    use std::cmp::Ordering;
    fn cmp(elem: Elem, a: &[u8], b: &[u8]) -> Option<Ordering> {
        macro_rules! value {
            ($t:ty, $x:expr) => {
                <$t>::from_ne_bytes(
                    $x[..std::mem::size_of::<$t>()]
                        .try_into()
                        .expect("the value's bytes"),
                )
            };
        }
        match elem {
            Elem::PairI16 => Some(value!(i16, a).cmp(&value!(i16, b))),
            Elem::PairI32 => Some(value!(i32, a).cmp(&value!(i32, b))),
            Elem::PairI64 => Some(value!(i64, a).cmp(&value!(i64, b))),
            Elem::PairF32 => value!(f32, a).partial_cmp(&value!(f32, b)),
            Elem::PairF64 => value!(f64, a).partial_cmp(&value!(f64, b)),
            Elem::PairLongDouble => long_double_cmp(a, b),
            _ => unreachable!("pairs only (checked by supports)"),
        }
    }
    let size = elem.size();
    let at = size - 4;
    let index = |b: &[u8]| i32::from_ne_bytes(b[at..].try_into().expect("4 bytes"));
    let better = if max {
        Ordering::Greater
    } else {
        Ordering::Less
    };
    for (t, o) in target.chunks_exact_mut(size).zip(origin.chunks_exact(size)) {
        match cmp(elem, o, t) {
            Some(Ordering::Equal) => {
                let i = index(o).min(index(t));
                t[at..].copy_from_slice(&i.to_ne_bytes());
            }
            Some(c) if c == better => t.copy_from_slice(o),
            _ => {}
        }
    }
}

/// Two C `long double`s (16 bytes each, native order) compared by value, `None` if either
/// is a NaN; -0 equals +0. On x86 the format is x87 extended precision (significand with its
/// explicit integer bit in bits 0..64, exponent in 64..79, sign at 79, the rest padding),
/// elsewhere IEEE binary128: both are sign and magnitude with the magnitude's bits ordered
/// as the number, so no arithmetic is needed (Rust has no such number).
pub fn long_double_cmp(a: &[u8], b: &[u8]) -> Option<std::cmp::Ordering> {
    fn key(b: &[u8]) -> Option<i128> {
        let bits = u128::from_ne_bytes(b[..16].try_into().expect("16 bytes"));
        let (negative, magnitude) = if cfg!(any(target_arch = "x86", target_arch = "x86_64")) {
            let significand = bits as u64;
            let exponent = (bits >> 64) & 0x7fff;
            if exponent == 0x7fff && significand << 1 != 0 {
                return None;
            }
            (
                (bits >> 79) & 1 == 1,
                (exponent << 64) | u128::from(significand),
            )
        } else {
            let magnitude = bits & !(1u128 << 127);
            if magnitude >> 112 == 0x7fff && magnitude & ((1u128 << 112) - 1) != 0 {
                return None;
            }
            (bits >> 127 == 1, magnitude)
        };
        // Below 2^113 in both formats, so the signed key cannot overflow.
        let m = magnitude as i128;
        Some(if negative { -m } else { m })
    }
    Some(key(a)?.cmp(&key(b)?))
}

/// Where the data of one operation lands at the target: runs of contiguous bytes
/// `(offset, len)` relative to the target address, in the order the packed data fills them
/// (the target datatype's typemap order, `count` times). Offsets may be negative (a datatype
/// with a negative lower bound).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// The runs.
    pub runs: Vec<(i64, u64)>,
}

impl Layout {
    /// One contiguous run of `len` bytes at the target address.
    pub fn contiguous(len: u64) -> Self {
        Self {
            runs: if len == 0 { Vec::new() } else { vec![(0, len)] },
        }
    }

    /// Bytes of data the layout holds.
    pub fn len(&self) -> u64 {
        Self::len_of(&self.runs)
    }

    /// [`Layout::len`] of borrowed runs (the operations on lent buffers build no layout).
    pub fn len_of(runs: &[(i64, u64)]) -> u64 {
        runs.iter().map(|&(_, l)| l).sum()
    }

    /// No data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The lowest and one past the highest offset touched (`(0, 0)` when empty).
    pub fn span(&self) -> (i64, i64) {
        Self::span_of(&self.runs)
    }

    /// [`Layout::span`] of borrowed runs.
    pub fn span_of(runs: &[(i64, u64)]) -> (i64, i64) {
        let lo = runs.iter().map(|&(o, _)| o).min().unwrap_or(0);
        let hi = runs
            .iter()
            .map(|&(o, l)| o.saturating_add(l as i64))
            .max()
            .unwrap_or(0);
        (lo, hi)
    }
}

/// What one member of a window exposes, as every member learns it at creation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetInfo {
    /// Bytes of its window memory (0 for a dynamic window).
    pub size: u64,
    /// Its displacement unit (bytes).
    pub disp_unit: u64,
}

/// The shape of a window, given to the components when it is created (collectively).
#[derive(Clone, Debug)]
pub struct WinConfig {
    /// This process's rank in the window's group.
    pub rank: usize,
    /// What every member exposes, by rank.
    pub targets: Vec<TargetInfo>,
    /// Every member runs on this process's node.
    pub same_node: bool,
    /// A dynamic window (`MPI_Win_create_dynamic`): targets are absolute addresses of
    /// memory attached with [`OscModule::attach`].
    pub dynamic: bool,
    /// The `no_locks` info key: passive-target synchronization will not be used.
    pub no_locks: bool,
    /// The window allocates its memory (`MPI_Win_allocate`, `_allocate_shared`): a component
    /// may place it itself ([`OscComponent::allocate`]).
    pub allocated: bool,
    /// `MPI_Win_allocate_shared`: every member reaches every member's memory by load and
    /// store, so a component that serves it must map one segment on every member.
    pub shared: bool,
    /// The host's arithmetic for the elements Rust has no number for.
    pub host: Option<HostAccumulate>,
    /// The PML reaches every member with a BTL offering RDMA put and get (the port's
    /// [`OscRdma`] then serves them): what osc-rdma needs.
    pub rdma: bool,
    /// Where the module adds its event counts for the profile, when the window is freed
    /// (the runtime's; a fresh one where nobody reads them).
    pub counters: crate::counters::CounterRegistry,
}

impl WinConfig {
    /// Members of the window.
    pub fn size(&self) -> usize {
        self.targets.len()
    }
}

/// A synchronization call ([`OscModule::sync`]), with the window-group ranks it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncCall {
    /// `MPI_Win_fence`: ends the fence epoch and (unless `succeed` is false,
    /// `MPI_MODE_NOSUCCEED`) starts the next.
    Fence {
        /// Another fence epoch follows.
        succeed: bool,
    },
    /// `MPI_Win_post`: expose the window to these origins.
    Post(Vec<usize>),
    /// `MPI_Win_start`: access these targets once they posted.
    Start(Vec<usize>),
    /// `MPI_Win_complete`: end the access epoch of `Start`.
    Complete,
    /// `MPI_Win_wait`: end the exposure epoch of `Post` once every origin completed.
    Wait,
    /// `MPI_Win_lock` (`nocheck`: `MPI_MODE_NOCHECK`, no other process will hold a conflicting
    /// lock, so none is requested).
    Lock {
        /// Lock type.
        kind: LockKind,
        /// Target rank.
        target: usize,
        /// `MPI_MODE_NOCHECK`.
        nocheck: bool,
    },
    /// `MPI_Win_unlock`.
    Unlock(usize),
    /// `MPI_Win_lock_all` (`MPI_MODE_NOCHECK` as for `Lock`).
    LockAll {
        /// `MPI_MODE_NOCHECK`.
        nocheck: bool,
    },
    /// `MPI_Win_unlock_all`.
    UnlockAll,
    /// `MPI_Win_flush` (`None`: `MPI_Win_flush_all`): operations complete at the target.
    Flush(Option<usize>),
    /// `MPI_Win_flush_local` (`None`: `_all`): operations complete at the origin.
    FlushLocal(Option<usize>),
    /// `MPI_Win_free`'s quiescence: no epoch may be open, and no member may still need this
    /// one (a lock it holds here, messages on the way): a collective end.
    Free,
}

/// The module's way to the outside world, given to [`OscModule::progress`] by the host.
pub trait OscPort {
    /// Send active message `msg` to window rank `peer` (also to this process itself):
    /// messages from one process to another arrive in the order sent.
    fn send(&mut self, peer: usize, msg: Vec<u8>) -> Result<(), OscError>;

    /// The next active message that arrived for this window, with its sender's rank.
    fn recv(&mut self) -> Option<(usize, Vec<u8>)>;

    /// The BTLs' RDMA for this window, when the host offers it (osc-rdma); `None` by default.
    fn rdma(&mut self) -> Option<&mut dyn OscRdma> {
        None
    }
}

/// The BTLs' RDMA as a window reaches it (through the PML: `Pml::rdma_*`), peers named by
/// their window rank. Transfers do not block: each returns a token polled with
/// [`OscRdma::test`].
pub trait OscRdma {
    /// Register this member's window memory `mem` for put and get by every member: a handle
    /// for [`OscRdma::deregister`] and the keys the members need (sent to them by the module).
    fn register(&mut self, mem: UserBuf) -> Result<(u64, RdmaKeys), OscError>;

    /// Release registration `handle` (the window is freed: no member targets it any more).
    fn deregister(&mut self, handle: u64);

    /// Write `local` at address `addr` of `peer`'s memory, registered there with `keys`;
    /// `local` stays valid until the transfer is reported done.
    fn put(
        &mut self,
        peer: usize,
        local: UserBuf,
        keys: &RdmaKeys,
        addr: u64,
    ) -> Result<RdmaToken, OscError>;

    /// Read `local.len()` bytes at address `addr` of `peer`'s memory into `local`.
    fn get(
        &mut self,
        peer: usize,
        local: UserBuf,
        keys: &RdmaKeys,
        addr: u64,
    ) -> Result<RdmaToken, OscError>;

    /// Has transfer `token` finished (`None`: not yet)? Reported once.
    fn test(&mut self, token: RdmaToken) -> Option<Result<(), OscError>>;
}

/// One window on one process.
pub trait OscModule {
    /// The component name (`"am"`).
    fn component_name(&self) -> &'static str;

    /// Put `data` at `addr` of `target` in `layout`.
    fn put(
        &mut self,
        target: usize,
        addr: u64,
        layout: &Layout,
        data: Vec<u8>,
    ) -> Result<OpId, OscError>;

    /// Get the bytes `layout` covers at `addr` of `target` (the result of [`OscModule::poll_op`]).
    fn get(&mut self, target: usize, addr: u64, layout: &Layout) -> Result<OpId, OscError>;

    /// Accumulate `data` (elements of `elem`) with `op` into `layout` at `addr` of `target`;
    /// with `fetch`, the previous contents come back as the operation's result
    /// (`MPI_Get_accumulate`, `MPI_Fetch_and_op`; `data` is empty for [`AccOp::NoOp`]).
    #[allow(clippy::too_many_arguments)]
    fn accumulate(
        &mut self,
        target: usize,
        addr: u64,
        layout: &Layout,
        op: AccOp,
        elem: Elem,
        data: Vec<u8>,
        fetch: bool,
    ) -> Result<OpId, OscError>;

    /// [`OscModule::put`] of a lent origin buffer into borrowed target runs (a
    /// [`Layout`]'s): a module that moves the bytes by RDMA reads the program's buffer in
    /// place, with no packed copy and no layout built. `data` must stay valid and unwritten
    /// until the operation completed locally: [`OscModule::poll_op`] reported it, or a
    /// synchronization that completes it locally (`flush_local` or stronger) finished (MPI's
    /// rule for origin buffers). By default the bytes and the runs are copied.
    fn put_lent(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        data: UserBuf,
    ) -> Result<OpId, OscError> {
        let layout = Layout {
            runs: runs.to_vec(),
        };
        self.put(target, addr, &layout, data.as_slice().to_vec())
    }

    /// [`OscModule::get`] of borrowed target runs straight into a lent buffer `into` (the
    /// program's contiguous origin buffer), when the module places the bytes there itself
    /// (osc-rdma's RDMA reads): no result kept, nothing to unpack, and the operation's
    /// result is empty. `into` must stay valid and untouched until the operation completed
    /// locally, as for [`OscModule::put_lent`]; an error of a transfer is then reported by
    /// the next synchronization. `None`: not taken (the caller uses [`OscModule::get`]),
    /// the default.
    fn get_lent(
        &mut self,
        _target: usize,
        _addr: u64,
        _runs: &[(i64, u64)],
        _into: UserBuf,
    ) -> Option<Result<OpId, OscError>> {
        None
    }

    /// [`OscModule::accumulate`] of borrowed origin bytes into borrowed target runs: a
    /// module that sends them copies them once, into its message (read before the call
    /// returns). By default the bytes and the runs are copied first.
    #[allow(clippy::too_many_arguments)]
    fn accumulate_from(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        op: AccOp,
        elem: Elem,
        data: &[u8],
        fetch: bool,
    ) -> Result<OpId, OscError> {
        let layout = Layout {
            runs: runs.to_vec(),
        };
        self.accumulate(target, addr, &layout, op, elem, data.to_vec(), fetch)
    }

    /// `MPI_Compare_and_swap` of one element at `addr` of `target`: the previous value is
    /// the result.
    fn compare_and_swap(
        &mut self,
        target: usize,
        addr: u64,
        elem: Elem,
        compare: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<OpId, OscError>;

    /// [`OscModule::accumulate_from`] completed within the call when the module can
    /// (osc-rdma: on a member of this node, by CMA under its accumulate word), the previous
    /// contents into `old` (the runs' length) when given: no operation kept, no result to
    /// land. A refusal is the error `accumulate_from` would raise, with nothing written.
    /// `None`: not taken, nothing done (the caller issues it with `accumulate_from`), the
    /// default.
    #[allow(clippy::too_many_arguments)]
    fn accumulate_at_once(
        &mut self,
        _target: usize,
        _addr: u64,
        _runs: &[(i64, u64)],
        _op: AccOp,
        _elem: Elem,
        _data: &[u8],
        _old: Option<&mut [u8]>,
    ) -> Option<Result<(), OscError>> {
        None
    }

    /// [`OscModule::compare_and_swap`] completed within the call likewise, the previous
    /// value into `old` (one element); `None`: not taken, the default.
    fn compare_and_swap_at_once(
        &mut self,
        _target: usize,
        _addr: u64,
        _elem: Elem,
        _compare: &[u8],
        _value: &[u8],
        _old: &mut [u8],
    ) -> Option<Result<(), OscError>> {
        None
    }

    /// The outcome of operation `id` once it completed at the origin (its result bytes for
    /// the fetching ones, empty for the others); the id is then spent.
    fn poll_op(&mut self, id: OpId) -> Option<Result<Vec<u8>, OscError>>;

    /// Start synchronization `call`; errors (wrong epoch) are returned at once.
    fn sync(&mut self, call: SyncCall) -> Result<(), OscError>;

    /// Has the synchronization started last finished? (`None`: not yet.) An error an
    /// operation met at its target is reported here.
    fn sync_done(&mut self) -> Option<Result<(), OscError>>;

    /// `MPI_Win_test`: would `Wait` finish now?
    fn exposure_complete(&self) -> bool;

    /// Drive the module: move messages through `port`, apply the ones that arrived. The
    /// events handled (0: idle).
    fn progress(&mut self, port: &mut dyn OscPort) -> usize;

    /// Did the synchronization just started ([`OscModule::sync`]) finish within that call,
    /// with nothing of it (or of anything before it) left for a progress pass: nothing to
    /// send, nothing in flight? Then its outcome, as [`OscModule::sync_done`]'s, and the host
    /// returns without a pass (osc-rdma: a flush or unlock whose transfers the module moved
    /// itself, a lock granted at once on a lock word). `None`, the default: the host
    /// progresses until `sync_done` says so. A module answers `Some` only for
    /// synchronizations that did work of their own (not a flush with nothing to do, which is
    /// how a program polls its window).
    fn sync_done_now(&mut self) -> Option<Result<(), OscError>> {
        None
    }

    /// Does the host run `MPI_Win_fence` as [`OscModule::fence_ready`], then one collective
    /// on the window's communicator (did any member send operations as messages?), then
    /// [`OscModule::fence_agreed`] when none did, [`SyncCall::Fence`] otherwise? Every
    /// member's module answers alike (a property of the component). By default, no.
    fn fence_by_collective(&self) -> bool {
        false
    }

    /// A fence's first step ([`OscModule::fence_by_collective`]), polled with progress
    /// passes between: `Some(Ok(true))` when this member sent operations as messages in
    /// the epoch (the fence then needs [`SyncCall::Fence`]); `Some(Ok(false))` once every
    /// other operation it issued is complete at its target; an error when no fence is
    /// allowed now. The target's side keeps being served by the passes of the collective.
    fn fence_ready(&mut self) -> Option<Result<bool, OscError>> {
        Some(Ok(true))
    }

    /// End a fence the collective found quiet at every member (nothing sent as a message
    /// anywhere, every member's other operations complete): `succeed`, another fence epoch
    /// follows. An operation's deferred error comes out here.
    fn fence_agreed(&mut self, _succeed: bool) -> Result<(), OscError> {
        Err(OscError::Sync(
            "this window's component does not end fences by a collective".into(),
        ))
    }

    /// Does the operation issued last need a progress pass at once? The host runs one after
    /// each operation, since a message may be what its target waits for. A module whose
    /// operation only queued work that nobody but the origin's own completion waits for
    /// (osc-rdma's RDMA transfers: the next progress, a synchronization's at the latest,
    /// starts them) answers false: the pass is saved, and the transfers queued meanwhile
    /// start together (adjacent ones as one).
    fn wants_pass(&mut self) -> bool {
        true
    }

    /// Attach memory to a dynamic window (its address is `region.addr()`).
    fn attach(&mut self, region: UserBuf) -> Result<(), OscError>;

    /// Detach the region attached at `addr`.
    fn detach(&mut self, addr: u64) -> Result<(), OscError>;

    /// Do operations reach their targets' memory without any process's progress (osc-sm:
    /// loads, stores and atomics on a shared segment)? The host then skips the runtime's
    /// progress pass after an operation and before a synchronization that is already
    /// complete (a put and a flush cost no poll of every BTL).
    fn direct(&self) -> bool {
        false
    }

    /// Member `rank`'s memory as this process maps it, when it reaches it by load and store
    /// (osc-sm's segment: `MPI_Win_shared_query`); `None` otherwise.
    fn shared_part(&self, _rank: usize) -> Option<UserBuf> {
        None
    }

    /// The operations that complete while the call runs, on the caller's own buffers (no
    /// packed copy, no result kept for [`OscModule::poll_op`]), when the module has them
    /// (osc-sm); `None` otherwise.
    fn direct_ops(&mut self) -> Option<&mut dyn OscDirect> {
        None
    }

    /// The module's [`LentPath`], when it has one (osc-rdma: puts and gets to the members
    /// of its node queued for CMA): a host keeps it next to the window, asked once, and
    /// takes small puts, gets and flushes through it with no call into the module. `None`
    /// by default.
    fn lent_path(&self) -> Option<Rc<dyn LentPath>> {
        None
    }
}

/// Puts and gets of one contiguous run of the program's own buffer, and flushes of one
/// target, that a module takes with no call into it ([`OscModule::lent_path`]; osc-rdma:
/// queued for CMA to a member of its node, moved by the flush in one system call), for a
/// host's fast `MPI_Put`, `MPI_Get` and `MPI_Win_flush(_local)`. Each call does all of it
/// or nothing and returns false; the host then calls the module, which decides and raises
/// the error if there is one (an epoch not open, bytes outside the target's memory: the
/// path takes only what the module would take, from flags the module keeps as a cache of
/// its own state). Whatever the path queued, the module takes over before anything else it
/// does, so the two stay one queue. Not `Sync`: it stays on the window's thread, as the
/// module does.
pub trait LentPath: std::fmt::Debug {
    /// `MPI_Put` of `data` at displacement `disp` of member `t`, queued. `data` stays valid
    /// and unwritten until a flush of `t` (local or not) or a synchronization of the window
    /// returned (MPI's rule for origin buffers): the transfer reads it until then.
    fn put(&self, t: usize, disp: isize, data: UserBuf) -> bool;

    /// `MPI_Get` into `into` (writable) from displacement `disp` of member `t`, queued:
    /// `into` is written by the flush or synchronization that completes it, and stays
    /// valid and untouched by the program until then.
    fn get(&self, t: usize, disp: isize, into: UserBuf) -> bool;

    /// `MPI_Win_flush(t)` or `MPI_Win_flush_local(t)` finished within the call: what this
    /// path queued has moved and the module has nothing else outstanding at `t`. False,
    /// nothing reported, when that is not so (nothing queued here included: a flush with
    /// nothing of its own to move is how a program polls its window, which needs the
    /// module's progress); what could not move stays queued for the module, whose
    /// synchronization then reports the error.
    fn flush(&self, t: usize) -> bool;

    /// `MPI_Win_flush_local(t)` finished within the call: what this path queued for `t` is
    /// complete at the origin (its buffers the program's again; osc-rdma: small puts copied
    /// aside, moved by a later flush or synchronization), or moved as by
    /// [`LentPath::flush`]. False as for that. By default [`LentPath::flush`].
    fn flush_local(&self, t: usize) -> bool {
        self.flush(t)
    }

    /// `MPI_Win_lock(kind)` of member `t` (`nocheck`: `MPI_MODE_NOCHECK`) granted within
    /// the call, when the module has no epoch open and nothing outstanding (the lock is all
    /// there is to it): then an access epoch to `t` is open here, puts, gets and flushes of
    /// `t` go through this path, and the module adopts the lock as its own before anything
    /// else it does. False, nothing changed, otherwise (a lock held by another process
    /// included: the module waits for it). By default never.
    fn lock(&self, _t: usize, _kind: LockKind, _nocheck: bool) -> bool {
        false
    }

    /// `MPI_Win_unlock` of member `t`, locked by [`LentPath::lock`] and not adopted by the
    /// module since: what this path queued has moved and the lock is given back. False,
    /// nothing reported, otherwise (what could not move stays queued for the module, whose
    /// unlock then reports the error). By default never.
    fn unlock(&self, _t: usize) -> bool {
        false
    }

    /// `MPI_Win_lock_all` (`nocheck`: `MPI_MODE_NOCHECK`) granted within the call, as
    /// [`LentPath::lock`] for every member at once (every shared lock taken, or none): then
    /// puts, gets and flushes of the members this path reaches go through it, and the module
    /// adopts the epoch as its own before anything else it does. False, nothing changed,
    /// otherwise. By default never.
    fn lock_all(&self, _nocheck: bool) -> bool {
        false
    }

    /// `MPI_Win_unlock_all` of an epoch [`LentPath::lock_all`] opened and the module has not
    /// adopted since: what this path queued has moved and every lock is given back. False,
    /// nothing reported, otherwise (the module's unlock then decides). By default never.
    fn unlock_all(&self) -> bool {
        false
    }
}

/// RMA operations a module completes within the call ([`OscModule::direct_ops`]), on
/// borrowed buffers: the host's per-operation copies and allocations go. `runs` are a
/// [`Layout`]'s runs; every one is checked against the target's memory, and the operation
/// refused with nothing written, as for the [`OscModule`] calls.
pub trait OscDirect {
    /// [`OscModule::put`] of `data`.
    fn put_now(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        data: &[u8],
    ) -> Result<(), OscError>;

    /// [`OscModule::get`] into `out` (the runs' total length).
    fn get_now(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        out: &mut [u8],
    ) -> Result<(), OscError>;

    /// [`OscModule::accumulate`] of `data`; with `old`, the previous contents land there.
    #[allow(clippy::too_many_arguments)]
    fn accumulate_now(
        &mut self,
        target: usize,
        addr: u64,
        runs: &[(i64, u64)],
        op: AccOp,
        elem: Elem,
        data: &[u8],
        old: Option<&mut [u8]>,
    ) -> Result<(), OscError>;

    /// [`OscModule::compare_and_swap`]; the previous value lands in `old`.
    #[allow(clippy::too_many_arguments)]
    fn compare_and_swap_now(
        &mut self,
        target: usize,
        addr: u64,
        elem: Elem,
        compare: &[u8],
        value: &[u8],
        old: &mut [u8],
    ) -> Result<(), OscError>;

    /// `MPI_Win_flush(_local)` of `target` (`None`: `_all`) finished within the call: what
    /// [`OscModule::sync`] and [`OscModule::sync_done`] do for [`SyncCall::Flush`] and
    /// [`SyncCall::FlushLocal`] (the same checks, the same errors), as one call. Every direct
    /// operation completed when issued, so this is a memory fence once the epoch is checked.
    fn flush_now(&mut self, target: Option<usize>) -> Result<(), OscError>;

    /// The module's [`DirectView`], when its members' memory is mapped in this process
    /// (osc-sm): a host keeps it next to the window and does small puts and gets, and
    /// flushes, through it without calling the module. `None` by default.
    fn view(&self) -> Option<Rc<DirectView>> {
        None
    }
}

/// The accumulate kernel of a module whose members' memory a [`DirectView`] maps (osc-sm),
/// lent through the view ([`DirectView::atomics`]) so that a host runs the small
/// accumulates, fetch-and-ops and compare-and-swaps on one contiguous run with no call into
/// the module: the module's own kernel, under the same lock word or CPU atomics as its
/// [`OscDirect`] calls, so the two stay atomic with respect to each other.
///
/// Offsets are bytes of member `t`'s memory as [`DirectView::offset`] gives them (an open
/// access epoch, inside the memory): the kernel checks the range again, not the epoch. Each
/// call returns false, having written nothing (neither the target nor `old`), for what it
/// does not take: an element type or operation outside its kernel (pairs, the host's
/// arithmetic, an operation the type has not), buffers whose lengths are not the run's, a
/// run outside the memory, a result buffer that overlaps it. The host then calls the module
/// ([`OscDirect`]), which decides and raises the error.
pub trait DirectAtomics: std::fmt::Debug {
    /// `target = target op data` over the `len` bytes at offset `off` of member `t`
    /// (whole elements of `elem`; `data` is `len` bytes, empty for [`AccOp::NoOp`]), the
    /// previous contents into `old` (`len` bytes) when given.
    #[allow(clippy::too_many_arguments)]
    fn accumulate(
        &self,
        t: usize,
        off: u64,
        len: usize,
        op: AccOp,
        elem: Elem,
        data: &[u8],
        old: Option<&mut [u8]>,
    ) -> bool;

    /// Compare-and-swap of the element of `elem` at offset `off` of member `t`: `value`
    /// stored if the element equals `compare` (bit for bit), the previous value into `old`
    /// (each one element long).
    fn compare_and_swap(
        &self,
        t: usize,
        off: u64,
        elem: Elem,
        compare: &[u8],
        value: &[u8],
        old: &mut [u8],
    ) -> bool;
}

/// The passive-target locks of a module whose members' memory a [`DirectView`] maps
/// (osc-sm), lent through the view ([`DirectView::lock`], [`DirectView::unlock`],
/// [`DirectView::lock_all`], [`DirectView::unlock_all`]) so that a host takes and releases
/// an uncontended lock with an atomic on the target's lock word and no call into the module:
/// the module's own lock state and words, so the two ways in see the same locks.
///
/// Each call does the whole synchronization within it or nothing: it acts only when the
/// lock is all there is to it (no other epoch open, no synchronization in progress, the
/// lock granted at once), and then leaves the lock as the only epoch giving access to its
/// targets, which the view's flags then say ([`DirectView::lock`]). Otherwise it returns
/// false (`None`), having changed nothing: the host calls the module, which waits for a
/// contended lock or raises the error of a misuse.
pub trait DirectLocks: std::fmt::Debug {
    /// `MPI_Win_lock(kind)` of member `t` (`nocheck`: `MPI_MODE_NOCHECK`, no lock word
    /// touched), granted within the call.
    fn lock(&self, t: usize, kind: LockKind, nocheck: bool) -> bool;

    /// `MPI_Win_unlock` of member `t`, locked by `MPI_Win_lock`: `Some(others)` once
    /// released (every operation on `t` complete), `others` whether a lock on another member
    /// is still held.
    fn unlock(&self, t: usize) -> Option<bool>;

    /// `MPI_Win_lock_all`, every member's shared lock granted within the call.
    fn lock_all(&self, nocheck: bool) -> bool;

    /// `MPI_Win_unlock_all`.
    fn unlock_all(&self) -> bool;
}

/// One member's memory as a [`DirectView`] reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectTarget {
    /// Its address in this process.
    pub base: usize,
    /// Its length in bytes.
    pub size: u64,
    /// Its displacement unit (bytes).
    pub disp_unit: u64,
}

/// A window whose every member's memory this process maps (osc-sm), as a host may use it
/// with no call into the module: where each member's memory is, and the module's epoch
/// checks as flags it refreshes after each synchronization step ([`OscModule::sync`],
/// [`OscModule::sync_done`]): whether an access epoch to a member is open (a put or get may
/// go) and whether a flush of it would succeed at once. The flags are a cache of the
/// module's own state, never a second one: a host that finds a flag down calls the module,
/// which decides and raises the error. The module may lend its accumulate kernel with it
/// ([`DirectView::atomics`]), and its passive-target locks ([`DirectView::lock`]), whose
/// calls set the flags as the module would. Not `Sync` (its flags are cells): it stays on
/// the window's thread, as the module does.
#[derive(Debug)]
pub struct DirectView {
    targets: Box<[DirectTarget]>,
    access: Box<[Cell<bool>]>,
    flush: Box<[Cell<bool>]>,
    flush_all: Cell<bool>,
    atomics: Option<Rc<dyn DirectAtomics>>,
    locks: Option<Rc<dyn DirectLocks>>,
}

impl DirectView {
    /// A view of `targets`, every flag down (no epoch open).
    pub fn new(targets: Vec<DirectTarget>) -> Self {
        let n = targets.len();
        Self {
            targets: targets.into_boxed_slice(),
            access: (0..n).map(|_| Cell::new(false)).collect(),
            flush: (0..n).map(|_| Cell::new(false)).collect(),
            flush_all: Cell::new(false),
            atomics: None,
            locks: None,
        }
    }

    /// The view with the module's passive-target locks ([`DirectView::lock`]).
    pub fn with_locks(mut self, locks: Rc<dyn DirectLocks>) -> Self {
        self.locks = Some(locks);
        self
    }

    /// `MPI_Win_lock(kind)` of member `t` by the module's [`DirectLocks`], when it lends
    /// them and grants the lock within the call: then an access epoch to `t` is open and a
    /// flush of `t` (and of all) succeeds. False, nothing changed, otherwise (a member
    /// outside the window included): the host calls the module.
    #[inline(always)]
    pub fn lock(&self, t: usize, kind: LockKind, nocheck: bool) -> bool {
        match &self.locks {
            Some(l) if t < self.targets.len() && l.lock(t, kind, nocheck) => {
                self.access[t].set(true);
                self.flush[t].set(true);
                self.flush_all.set(true);
                true
            }
            _ => false,
        }
    }

    /// `MPI_Win_unlock` of member `t` by the module's [`DirectLocks`]: the epoch to `t` is
    /// closed (the lock was its only access, see [`DirectLocks`]). False, nothing changed,
    /// when they do not take it.
    #[inline(always)]
    pub fn unlock(&self, t: usize) -> bool {
        let Some(l) = &self.locks else {
            return false;
        };
        if t >= self.targets.len() {
            return false;
        }
        match l.unlock(t) {
            Some(others) => {
                self.access[t].set(false);
                self.flush[t].set(false);
                self.flush_all.set(others);
                true
            }
            None => false,
        }
    }

    /// `MPI_Win_lock_all` by the module's [`DirectLocks`]: every member accessible and
    /// flushable. False, nothing changed, when they do not grant it within the call.
    #[inline]
    pub fn lock_all(&self, nocheck: bool) -> bool {
        match &self.locks {
            Some(l) if l.lock_all(nocheck) => {
                self.set_all(true);
                true
            }
            _ => false,
        }
    }

    /// `MPI_Win_unlock_all` by the module's [`DirectLocks`]: every epoch closed. False,
    /// nothing changed, when they do not take it.
    #[inline]
    pub fn unlock_all(&self) -> bool {
        match &self.locks {
            Some(l) if l.unlock_all() => {
                self.set_all(false);
                true
            }
            _ => false,
        }
    }

    fn set_all(&self, open: bool) {
        for (a, f) in self.access.iter().zip(&*self.flush) {
            a.set(open);
            f.set(open);
        }
        self.flush_all.set(open);
    }

    /// The view with the module's accumulate kernel ([`DirectView::atomics`]).
    pub fn with_atomics(mut self, kernel: Rc<dyn DirectAtomics>) -> Self {
        self.atomics = Some(kernel);
        self
    }

    /// The module's accumulate kernel, when it lends one: the host runs a small accumulate
    /// or compare-and-swap there once [`DirectView::offset`] placed it.
    #[inline(always)]
    pub fn atomics(&self) -> Option<&dyn DirectAtomics> {
        self.atomics.as_deref()
    }

    /// The members' count.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    /// Has the window no member (never: a window has at least its creator)?
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// Member `t`'s memory (`None` past the last member).
    pub fn target(&self, t: usize) -> Option<DirectTarget> {
        self.targets.get(t).copied()
    }

    /// The module: is an access epoch to member `t` open (`t` is below [`DirectView::len`])?
    pub fn set_access(&self, t: usize, open: bool) {
        self.access[t].set(open);
    }

    /// The module: would a flush of member `t` (`None`: a flush of all) succeed now?
    pub fn set_flush(&self, t: Option<usize>, ok: bool) {
        match t {
            Some(t) => self.flush[t].set(ok),
            None => self.flush_all.set(ok),
        }
    }

    /// Where the `len` bytes at displacement `disp` of member `t` are in this process, when
    /// an access epoch to `t` is open and they lie inside its memory; `None` otherwise (a
    /// rank outside the window included: the module then decides). `len` 0 is `None` (the
    /// module's to handle, as every other case this view does not take).
    #[inline(always)]
    pub fn place(&self, t: usize, disp: isize, len: usize) -> Option<usize> {
        let off = self.offset(t, disp, len)?;
        // Inside a mapping of this process, so the sum fits in usize.
        Some(self.targets[t].base + off as usize)
    }

    /// [`DirectView::place`] as the byte offset in member `t`'s memory (the target address
    /// the module's calls take).
    #[inline(always)]
    pub fn offset(&self, t: usize, disp: isize, len: usize) -> Option<u64> {
        let target = self.targets.get(t)?;
        if !self.access[t].get() || len == 0 {
            return None;
        }
        // Both in u64 with overflow checked: a displacement before the start, or one whose
        // bytes end past the memory, is refused.
        let off = u64::try_from(disp).ok()?.checked_mul(target.disp_unit)?;
        let end = off.checked_add(len as u64)?;
        if end > target.size {
            return None;
        }
        Some(off)
    }

    /// Would a flush of member `t` (`None`: of all) succeed now, with nothing more to do
    /// than a memory fence? False for a member outside the window.
    #[inline(always)]
    pub fn may_flush(&self, t: Option<usize>) -> bool {
        match t {
            Some(t) => self.flush.get(t).is_some_and(Cell::get),
            None => self.flush_all.get(),
        }
    }
}

/// The collective steps a component may need while a window is made (agreeing on the name
/// of a shared segment), run by the host over the window's communicator. Every member calls
/// them in the same order.
pub trait OscSetup {
    /// Broadcast `data` from window rank `root` to every member.
    fn bcast(&mut self, root: usize, data: &mut [u8]) -> Result<(), OscError>;

    /// Is `ok` true on every member?
    fn all(&mut self, ok: bool) -> Result<bool, OscError>;
}

/// A window whose memory its component placed ([`OscComponent::allocate`]).
pub struct Allocated {
    /// The window's module.
    pub module: Box<dyn OscModule>,
    /// This member's memory (`config.targets[config.rank].size` bytes), valid until the
    /// module is dropped.
    pub memory: UserBuf,
}

impl std::fmt::Debug for Allocated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocated")
            .field("component", &self.module.component_name())
            .field("len", &self.memory.len())
            .finish()
    }
}

/// An OSC component.
pub trait OscComponent: crate::base::Component {
    /// Priority given the parameters (highest usable wins).
    fn priority(&self, params: &ParamStore) -> i32;

    /// Can this component serve a window of this shape?
    fn query(&self, config: &WinConfig, params: &ParamStore) -> bool;

    /// Why [`OscComponent::query`] refuses a window of this shape, for the user: the error
    /// when no allowed component serves a window gives each refusing one's own reason.
    fn refusal(&self, _config: &WinConfig, _params: &ParamStore) -> Option<String> {
        None
    }

    /// The module of a window whose own memory is `memory` (empty for a dynamic window).
    fn create(
        &self,
        config: WinConfig,
        memory: UserBuf,
        params: &ParamStore,
    ) -> Result<Box<dyn OscModule>, OscError>;

    /// Does this component place the memory of an allocated window itself
    /// ([`OscComponent::allocate`] rather than [`OscComponent::create`])?
    fn allocates(&self, _config: &WinConfig) -> bool {
        false
    }

    /// Allocate the memory of a window (`config.allocated`) and make its module (collective:
    /// `setup` reaches the other members). Called only when [`OscComponent::allocates`].
    fn allocate(
        &self,
        _config: WinConfig,
        _setup: &mut dyn OscSetup,
        _params: &ParamStore,
    ) -> Result<Allocated, OscError> {
        Err(OscError::Arg(
            "this OSC component does not allocate window memory".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_direct_view_places_only_inside_an_open_epoch_and_the_memory() {
        let v = DirectView::new(vec![
            DirectTarget {
                base: 0x1000,
                size: 64,
                disp_unit: 8,
            },
            DirectTarget {
                base: 0x2000,
                size: 3,
                disp_unit: 1,
            },
        ]);
        assert_eq!(v.place(0, 0, 1), None, "no epoch");
        v.set_access(0, true);
        assert_eq!(v.place(0, 7, 8), Some(0x1000 + 56));
        assert_eq!(v.place(0, 7, 9), None, "one byte past the end");
        assert_eq!(v.place(0, 8, 1), None);
        assert_eq!(v.place(0, -1, 1), None);
        assert_eq!(v.place(0, isize::MAX, 1), None, "overflowing scale");
        assert_eq!(v.place(0, 0, 0), None, "zero bytes are the module's");
        assert_eq!(v.place(1, 0, 1), None, "no epoch to rank 1");
        assert_eq!(v.place(2, 0, 1), None, "no rank 2");
        v.set_access(1, true);
        assert_eq!(v.place(1, 2, 1), Some(0x2002));
        assert_eq!(v.offset(1, 2, 1), Some(2));
        assert_eq!(v.offset(0, 1, 8), Some(8));
        assert!(!v.may_flush(Some(0)) && !v.may_flush(None) && !v.may_flush(Some(9)));
        v.set_flush(Some(1), true);
        v.set_flush(None, true);
        assert!(v.may_flush(Some(1)) && v.may_flush(None) && !v.may_flush(Some(0)));
    }

    /// Locks that grant what `grant` says, recording the calls.
    #[derive(Debug, Default)]
    struct FakeLocks {
        grant: Cell<bool>,
        others: Cell<bool>,
        calls: std::cell::RefCell<Vec<String>>,
    }

    impl DirectLocks for FakeLocks {
        fn lock(&self, t: usize, kind: LockKind, nocheck: bool) -> bool {
            self.calls
                .borrow_mut()
                .push(format!("lock {t} {kind:?} {nocheck}"));
            self.grant.get()
        }
        fn unlock(&self, t: usize) -> Option<bool> {
            self.calls.borrow_mut().push(format!("unlock {t}"));
            self.grant.get().then_some(self.others.get())
        }
        fn lock_all(&self, nocheck: bool) -> bool {
            self.calls.borrow_mut().push(format!("lock_all {nocheck}"));
            self.grant.get()
        }
        fn unlock_all(&self) -> bool {
            self.calls.borrow_mut().push("unlock_all".into());
            self.grant.get()
        }
    }

    #[test]
    fn a_direct_views_locks_open_and_close_exactly_their_epochs() {
        let t = |base| DirectTarget {
            base,
            size: 8,
            disp_unit: 1,
        };
        let bare = DirectView::new(vec![t(0x1000)]);
        assert!(!bare.lock(0, LockKind::Shared, false) && !bare.unlock(0));
        assert!(!bare.lock_all(false) && !bare.unlock_all());
        let locks = Rc::new(FakeLocks::default());
        let v = DirectView::new(vec![t(0x1000), t(0x2000)]).with_locks(locks.clone());
        // Refused: nothing changes.
        assert!(!v.lock(1, LockKind::Exclusive, false));
        assert!(v.place(1, 0, 1).is_none() && !v.may_flush(Some(1)) && !v.may_flush(None));
        locks.grant.set(true);
        assert!(!v.lock(2, LockKind::Shared, false), "no rank 2: not asked");
        assert!(v.lock(1, LockKind::Exclusive, true));
        assert_eq!(v.place(1, 7, 1), Some(0x2007));
        assert!(v.place(0, 0, 1).is_none());
        assert!(v.may_flush(Some(1)) && v.may_flush(None) && !v.may_flush(Some(0)));
        assert!(v.lock(0, LockKind::Shared, false));
        locks.others.set(true);
        assert!(v.unlock(1));
        assert!(v.place(1, 0, 1).is_none() && !v.may_flush(Some(1)));
        assert!(
            v.may_flush(None) && v.place(0, 0, 1).is_some(),
            "rank 0 still held"
        );
        locks.others.set(false);
        assert!(v.unlock(0));
        assert!(!v.may_flush(None) && v.place(0, 0, 1).is_none());
        assert!(!v.unlock(5), "no rank 5: not asked");
        assert!(v.lock_all(false));
        assert!(v.place(0, 0, 8).is_some() && v.place(1, 0, 8).is_some());
        assert!(v.may_flush(Some(0)) && v.may_flush(Some(1)) && v.may_flush(None));
        locks.grant.set(false);
        assert!(!v.unlock_all());
        assert!(v.may_flush(None), "refused: still open");
        locks.grant.set(true);
        assert!(v.unlock_all());
        assert!(v.place(0, 0, 1).is_none() && v.place(1, 0, 1).is_none());
        assert!(!v.may_flush(Some(0)) && !v.may_flush(Some(1)) && !v.may_flush(None));
        assert_eq!(
            *locks.calls.borrow(),
            [
                "lock 1 Exclusive false",
                "lock 1 Exclusive true",
                "lock 0 Shared false",
                "unlock 1",
                "unlock 0",
                "lock_all false",
                "unlock_all",
                "unlock_all"
            ]
        );
    }

    #[test]
    fn accumulate_applies_elementwise() {
        let mut t: Vec<u8> = [1i32, -2, 3].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let o: Vec<u8> = [10i32, 5, -7]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        accumulate(AccOp::Sum, Elem::I32, &mut t, &o).unwrap();
        let r: Vec<i32> = t
            .chunks(4)
            .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(r, [11, 3, -4]);
        accumulate(AccOp::Max, Elem::I32, &mut t, &o).unwrap();
        accumulate(AccOp::Replace, Elem::I32, &mut t, &o).unwrap();
        assert_eq!(t, o);
        let mut f = 1.5f64.to_ne_bytes().to_vec();
        accumulate(AccOp::Prod, Elem::F64, &mut f, &2.0f64.to_ne_bytes()).unwrap();
        assert_eq!(f64::from_ne_bytes(f[..].try_into().unwrap()), 3.0);
    }

    #[test]
    fn minloc_and_maxloc_keep_the_lower_index_of_equal_values() {
        let pair = |v: f64, i: i32| {
            let mut b = v.to_ne_bytes().to_vec();
            b.extend_from_slice(&i.to_ne_bytes());
            b
        };
        let mut t = [pair(1.0, 5), pair(3.0, 2), pair(2.0, 9)].concat();
        let o = [pair(0.5, 7), pair(3.0, 1), pair(4.0, 0)].concat();
        let mut u = t.clone();
        accumulate(AccOp::MinLoc, Elem::PairF64, &mut t, &o).unwrap();
        assert_eq!(t, [pair(0.5, 7), pair(3.0, 1), pair(2.0, 9)].concat());
        accumulate(AccOp::MaxLoc, Elem::PairF64, &mut u, &o).unwrap();
        assert_eq!(u, [pair(1.0, 5), pair(3.0, 1), pair(4.0, 0)].concat());
        assert!(matches!(
            accumulate(AccOp::Sum, Elem::PairI32, &mut [0; 8], &[0; 8]),
            Err(OscError::Op(_))
        ));
    }

    /// `v` as a C `long double` of this target (exact: both formats hold every f64).
    fn long_double(v: f64) -> [u8; 16] {
        let bits = v.to_bits();
        let negative = bits >> 63 == 1;
        let (e, f) = (((bits >> 52) & 0x7ff) as i64, bits & ((1 << 52) - 1));
        // (unbiased exponent, significand with the leading 1 at bit 63), or a special.
        let normal = |e: i64, sig: u64| (e, sig);
        let (exp, sig, special) = match (e, f) {
            (0, 0) => (0, 0, Some(0u128)),
            (0x7ff, _) => (0, 0, Some(0x7fff)),
            (0, f) => {
                let lz = i64::from(f.leading_zeros());
                let (x, s) = normal(-1074 + 63 - lz, f << lz);
                (x, s, None)
            }
            (e, f) => {
                let (x, s) = normal(e - 1023, (1 << 63) | (f << 11));
                (x, s, None)
            }
        };
        let out = if cfg!(any(target_arch = "x86", target_arch = "x86_64")) {
            let (biased, sig) = match special {
                Some(0) => (0u128, 0u64),
                Some(_) => (0x7fff, (1 << 63) | (f << 11)),
                None => ((exp + 16383) as u128, sig),
            };
            (u128::from(negative) << 79) | (biased << 64) | u128::from(sig)
        } else {
            let (biased, frac) = match special {
                Some(0) => (0u128, 0u128),
                Some(_) => (0x7fff, u128::from(f) << 60),
                None => ((exp + 16383) as u128, u128::from(sig << 1) << 48),
            };
            (u128::from(negative) << 127) | (biased << 112) | frac
        };
        out.to_ne_bytes()
    }

    /// One packed pair of `elem` holding `v` (converted to the value type) and `i`.
    fn pair_of(elem: Elem, v: f64, i: i32) -> Vec<u8> {
        let mut b = match elem {
            Elem::PairI16 => (v as i16).to_ne_bytes().to_vec(),
            Elem::PairI32 => (v as i32).to_ne_bytes().to_vec(),
            Elem::PairI64 => (v as i64).to_ne_bytes().to_vec(),
            Elem::PairF32 => (v as f32).to_ne_bytes().to_vec(),
            Elem::PairF64 => v.to_ne_bytes().to_vec(),
            Elem::PairLongDouble => long_double(v).to_vec(),
            _ => unreachable!(),
        };
        b.extend_from_slice(&i.to_ne_bytes());
        assert_eq!(b.len(), elem.size());
        b
    }

    const PAIRS: [Elem; 6] = [
        Elem::PairI16,
        Elem::PairI32,
        Elem::PairI64,
        Elem::PairF32,
        Elem::PairF64,
        Elem::PairLongDouble,
    ];

    #[test]
    fn long_doubles_compare_by_value() {
        use std::cmp::Ordering::*;
        // The encoding itself, against x87's 1.0 and -2.0.
        if cfg!(target_arch = "x86_64") {
            assert_eq!(
                long_double(1.0)[..10],
                [0, 0, 0, 0, 0, 0, 0, 0x80, 0xff, 0x3f]
            );
            assert_eq!(
                long_double(-2.0)[..10],
                [0, 0, 0, 0, 0, 0, 0, 0x80, 0x00, 0xc0]
            );
        }
        let c = |a: f64, b: f64| long_double_cmp(&long_double(a), &long_double(b));
        assert_eq!(c(1.0, 2.0), Some(Less));
        assert_eq!(c(-1.0, -2.0), Some(Greater));
        assert_eq!(c(-0.0, 0.0), Some(Equal));
        assert_eq!(c(f64::MIN_POSITIVE / 4.0, 0.0), Some(Greater));
        assert_eq!(c(f64::NEG_INFINITY, f64::MIN), Some(Less));
        assert_eq!(c(f64::NAN, 1.0), None);
        assert_eq!(c(1.0, f64::NAN), None);
    }

    #[test]
    fn long_double_pairs_take_minloc_and_maxloc() {
        let e = Elem::PairLongDouble;
        let mut t = [pair_of(e, 1.0, 5), pair_of(e, 3.0, 2), pair_of(e, -2.0, 9)].concat();
        let o = [pair_of(e, 0.5, 7), pair_of(e, 3.0, 1), pair_of(e, 4.0, 0)].concat();
        let mut u = t.clone();
        accumulate(AccOp::MinLoc, e, &mut t, &o).unwrap();
        assert_eq!(
            t,
            [pair_of(e, 0.5, 7), pair_of(e, 3.0, 1), pair_of(e, -2.0, 9)].concat()
        );
        accumulate(AccOp::MaxLoc, e, &mut u, &o).unwrap();
        assert_eq!(
            u,
            [pair_of(e, 1.0, 5), pair_of(e, 3.0, 1), pair_of(e, 4.0, 0)].concat()
        );
        for op in [AccOp::Sum, AccOp::Max, AccOp::BAnd] {
            assert!(matches!(
                accumulate(op, e, &mut t, &o),
                Err(OscError::Op(_))
            ));
        }
        assert!(matches!(
            accumulate(AccOp::MinLoc, e, &mut [0; 32], &[0; 32]),
            Err(OscError::Arg(_))
        ));
        accumulate(AccOp::Replace, e, &mut t, &o).unwrap();
        assert_eq!(t, o);
    }

    proptest::proptest! {
        /// MINLOC/MAXLOC on every pair type agree with a plain reference on typed values.
        #[test]
        fn pair_kernels_match_a_reference(
            which in 0..PAIRS.len(),
            max: bool,
            elems in proptest::collection::vec(
                ((-4i32..4, -1e6f64..1e6, proptest::bool::ANY, -3i32..3),
                 (-4i32..4, -1e6f64..1e6, proptest::bool::ANY, -3i32..3)),
                0..16,
            ),
        ) {
            let elem = PAIRS[which];
            // Small integers make ties frequent; the integer value types take them only.
            let value = |(small, wide, use_wide, _): (i32, f64, bool, i32)| {
                if use_wide && matches!(elem, Elem::PairF32 | Elem::PairF64 | Elem::PairLongDouble) {
                    // Exactly representable in f32 too, so every type compares the same.
                    f64::from(wide as f32)
                } else {
                    f64::from(small)
                }
            };
            let mut target = Vec::new();
            let mut origin = Vec::new();
            let mut expect = Vec::new();
            for &(t, o) in &elems {
                let (tv, ov) = (value(t), value(o));
                target.extend(pair_of(elem, tv, t.3));
                origin.extend(pair_of(elem, ov, o.3));
                let wins = if max { ov > tv } else { ov < tv };
                expect.extend(if wins {
                    pair_of(elem, ov, o.3)
                } else if ov == tv {
                    pair_of(elem, tv, t.3.min(o.3))
                } else {
                    pair_of(elem, tv, t.3)
                });
            }
            let op = if max { AccOp::MaxLoc } else { AccOp::MinLoc };
            accumulate(op, elem, &mut target, &origin).unwrap();
            proptest::prop_assert_eq!(target, expect);
        }
    }

    #[test]
    fn the_hosts_arithmetic_serves_the_elements_rust_has_no_number_for() {
        fn host(op: AccOp, elem: Elem, t: &mut [u8], o: &[u8]) -> bool {
            if op != AccOp::Sum || elem != Elem::LongDouble {
                return false;
            }
            // A stand-in arithmetic: bytewise wrapping sums.
            t.iter_mut()
                .zip(o)
                .for_each(|(a, b)| *a = a.wrapping_add(*b));
            true
        }
        let mut t = [1u8; 16];
        assert!(matches!(
            accumulate(AccOp::Sum, Elem::LongDouble, &mut t, &[2; 16]),
            Err(OscError::Op(_))
        ));
        accumulate_with(AccOp::Sum, Elem::LongDouble, &mut t, &[2; 16], Some(host)).unwrap();
        assert_eq!(t, [3; 16]);
        assert!(matches!(
            accumulate_with(AccOp::Max, Elem::LongDouble, &mut t, &[2; 16], Some(host)),
            Err(OscError::Op(_))
        ));
        accumulate_with(AccOp::Replace, Elem::LongDouble, &mut t, &[7; 16], None).unwrap();
        assert_eq!(t, [7; 16]);
    }

    #[test]
    fn accumulate_refuses_what_mpi_does_not_define() {
        let mut f = [0u8; 8];
        assert!(matches!(
            accumulate(AccOp::BAnd, Elem::F64, &mut f, &[0; 8]),
            Err(OscError::Op(_))
        ));
        assert!(matches!(
            accumulate(AccOp::Sum, Elem::I32, &mut f, &[0; 4]),
            Err(OscError::Arg(_))
        ));
    }

    #[test]
    fn layout_span_covers_negative_offsets() {
        let l = Layout {
            runs: vec![(-8, 4), (16, 8)],
        };
        assert_eq!((l.len(), l.span()), (12, (-8, 24)));
        assert!(Layout::contiguous(0).is_empty());
    }
}
