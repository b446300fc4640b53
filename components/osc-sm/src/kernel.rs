//! The accumulate kernel of a window: the target's accumulate lock word, CPU atomics per
//! element (`osc_sm_atomics`), and the typed loops that combine a run in place.
//!
//! One kernel serves both ways into osc-sm: the module's calls ([`crate::SmModule`]'s
//! [`rmca_framework::osc::OscDirect`] and [`rmca_framework::osc::OscModule`]) and the host's
//! fast path through the window's [`rmca_framework::osc::DirectView`], which lends it as a
//! [`DirectAtomics`]. So an accumulate from either path takes the same lock word (or the
//! same CPU atomic) as every other on the same element, and they stay atomic with respect
//! to each other.
//!
//! The typed loops: the operation and the element type are matched once per call into a
//! function monomorphised for the native type (`i32`, `f64`...) and the operation, whose
//! loop reads and writes whole elements of a constant size: one element (a fetch-and-op)
//! is a load, the operation and a store; a long run is a loop the compiler vectorizes, and
//! from `WIDE_MIN` bytes the same loop built for AVX2 when the CPU has it (`wide`).

use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rmca_framework::osc::{accumulate_with, AccOp, DirectAtomics, Elem, HostAccumulate};

use crate::segment::Segment;

/// The accumulate kernel of one window at one member.
#[derive(Debug)]
pub struct Kernel {
    seg: Rc<Segment>,
    /// Segment offset and length of every member's memory.
    parts: Box<[(usize, usize)]>,
    /// Segment offset of every member's accumulate lock word.
    locks: Box<[usize]>,
    /// `osc_sm_atomics`: aligned 4- and 8-byte elements by CPU atomics.
    atomics: bool,
    host: Option<HostAccumulate>,
}

impl Kernel {
    /// The kernel of the window in `seg`: members' memory at `parts`, their lock words at
    /// `locks` (segment offsets, 4-byte aligned).
    pub fn new(
        seg: Rc<Segment>,
        parts: &[(usize, usize)],
        locks: Vec<usize>,
        atomics: bool,
        host: Option<HostAccumulate>,
    ) -> Self {
        Self {
            seg,
            parts: parts.into(),
            locks: locks.into_boxed_slice(),
            atomics,
            host,
        }
    }

    /// Hold member `t`'s accumulate lock word while `f` runs.
    #[inline(always)]
    pub fn locked<R>(&self, t: usize, f: impl FnOnce() -> R) -> R {
        let word: &AtomicU32 = self.seg.u32_at(self.locks[t]);
        if word
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            Self::contended(word);
        }
        let r = f();
        word.store(0, Ordering::Release);
        r
    }

    /// Take `word` held by another process (or thread): spin a little, then yield.
    #[cold]
    #[inline(never)]
    fn contended(word: &AtomicU32) {
        let mut spins = 0u32;
        while word
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Does an accumulate on an element of `elem` at segment offset `at` go by CPU atomics?
    /// Only the element type and its address decide, so two accumulates on one element
    /// always take the same path.
    #[inline]
    pub fn atomic_path(&self, elem: Elem, at: usize) -> bool {
        let es = elem.size();
        self.atomics && (es == 4 || es == 8) && !elem.host_arithmetic() && at.is_multiple_of(es)
    }

    /// The accumulate of `data` into the `len` bytes at segment offset `at` by CPU atomics
    /// per element ([`Kernel::atomic_path`], the caller checked it and the lengths), the
    /// previous contents into `old`.
    #[allow(clippy::too_many_arguments)]
    pub fn rmw_run(
        &self,
        at: usize,
        len: usize,
        op: AccOp,
        elem: Elem,
        data: &[u8],
        mut old: Option<&mut [u8]>,
    ) {
        let es = elem.size();
        for k in (0..len).step_by(es) {
            let origin = if op == AccOp::NoOp {
                &[0u8; 8][..es]
            } else {
                &data[k..k + es]
            };
            if es == 4 {
                let o = u32::from_ne_bytes(origin.try_into().expect("4 bytes"));
                let prev = rmw32(self.seg.u32_at(at + k), op, elem, o, self.host);
                if let Some(old) = old.as_deref_mut() {
                    old[k..k + 4].copy_from_slice(&prev.to_ne_bytes());
                }
            } else {
                let o = u64::from_ne_bytes(origin.try_into().expect("8 bytes"));
                let prev = rmw64(self.seg.u64_at(at + k), op, elem, o, self.host);
                if let Some(old) = old.as_deref_mut() {
                    old[k..k + 8].copy_from_slice(&prev.to_ne_bytes());
                }
            }
        }
    }

    /// The segment offset of the `len` bytes at offset `off` of member `t`, if they lie in
    /// its memory.
    #[inline]
    fn place(&self, t: usize, off: u64, len: usize) -> Option<usize> {
        let &(base, size) = self.parts.get(t)?;
        let off = usize::try_from(off).ok()?;
        (off.checked_add(len)? <= size).then_some(base + off)
    }

    /// The accumulate of [`DirectAtomics::accumulate`] on the `len` bytes at segment offset
    /// `at` of member `t` (inside its memory: the caller placed them), with its refusals:
    /// false, nothing written, for what the typed loops do not take.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn accumulate_at(
        &self,
        t: usize,
        at: usize,
        len: usize,
        op: AccOp,
        elem: Elem,
        data: &[u8],
        old: Option<&mut [u8]>,
    ) -> bool {
        // No loop for what it does not compute (pairs, the host's elements, an operation
        // the type has not): refused before anything else.
        let Some(f) = leaf_of(op, elem) else {
            return false;
        };
        // A result buffer over the target (erroneous, but not to corrupt memory): the
        // module's general path copies through it.
        if old
            .as_deref()
            .is_some_and(|o| self.seg.overlaps(at, len, o))
        {
            return false;
        }
        if self.atomics {
            return self.accumulate_atomics(t, at, len, op, elem, data, old);
        }
        // The loop checks the lengths (whole elements, the data's and the result's) before
        // it writes a byte.
        self.locked(t, || {
            self.seg
                .combine(at, len, data, |target, origin| f(target, origin, old))
        })
    }

    /// [`Kernel::accumulate_at`] with `osc_sm_atomics`: CPU atomics per element where
    /// [`Kernel::atomic_path`] says so, else the lock and the loops.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn accumulate_atomics(
        &self,
        t: usize,
        at: usize,
        len: usize,
        op: AccOp,
        elem: Elem,
        data: &[u8],
        old: Option<&mut [u8]>,
    ) -> bool {
        let es = elem.size();
        if len == 0
            || !len.is_multiple_of(es)
            || (op != AccOp::NoOp && data.len() != len)
            || old.as_deref().is_some_and(|o| o.len() != len)
        {
            return false;
        }
        if self.atomic_path(elem, at) {
            self.rmw_run(at, len, op, elem, data, old);
            return true;
        }
        let Some(f) = leaf_of(op, elem) else {
            return false;
        };
        self.locked(t, || {
            self.seg
                .combine(at, len, data, |target, origin| f(target, origin, old))
        })
    }

    /// The compare-and-swap of [`DirectAtomics::compare_and_swap`] at segment offset `at` of
    /// member `t` (inside its memory: the caller placed one element there): false, nothing
    /// written, for buffers that are not one element, an element of other than 1, 2, 4 or
    /// 8 bytes, or a result buffer over the target.
    #[inline]
    pub fn cas_at(
        &self,
        t: usize,
        at: usize,
        elem: Elem,
        compare: &[u8],
        value: &[u8],
        old: &mut [u8],
    ) -> bool {
        let es = elem.size();
        if compare.len() != es
            || value.len() != es
            || old.len() != es
            || self.seg.overlaps(at, es, old)
        {
            return false;
        }
        if self.atomic_path(elem, at) {
            if es == 4 {
                let (c, v) = (u32::load(compare), u32::load(value));
                let r =
                    self.seg
                        .u32_at(at)
                        .compare_exchange(c, v, Ordering::AcqRel, Ordering::Acquire);
                r.unwrap_or_else(|x| x).store(old);
            } else {
                let (c, v) = (u64::load(compare), u64::load(value));
                let r =
                    self.seg
                        .u64_at(at)
                        .compare_exchange(c, v, Ordering::AcqRel, Ordering::Acquire);
                r.unwrap_or_else(|x| x).store(old);
            }
            return true;
        }
        match es {
            1 => self.cas_locked::<u8>(t, at, compare, value, old),
            2 => self.cas_locked::<u16>(t, at, compare, value, old),
            4 => self.cas_locked::<u32>(t, at, compare, value, old),
            8 => self.cas_locked::<u64>(t, at, compare, value, old),
            _ => return false,
        }
        true
    }

    /// Compare-and-swap of one `T` (bitwise: only equality matters) under `t`'s lock.
    #[inline(always)]
    fn cas_locked<T: Native>(
        &self,
        t: usize,
        at: usize,
        compare: &[u8],
        value: &[u8],
        old: &mut [u8],
    ) {
        let (c, v) = (T::load(compare), T::load(value));
        let prev = self.locked(
            t,
            #[inline(always)]
            || self.seg.swap_if(at, c, v),
        );
        prev.store(old);
    }
}

impl DirectAtomics for Kernel {
    fn accumulate(
        &self,
        t: usize,
        off: u64,
        len: usize,
        op: AccOp,
        elem: Elem,
        data: &[u8],
        old: Option<&mut [u8]>,
    ) -> bool {
        match self.place(t, off, len) {
            Some(at) => self.accumulate_at(t, at, len, op, elem, data, old),
            None => false,
        }
    }

    fn compare_and_swap(
        &self,
        t: usize,
        off: u64,
        elem: Elem,
        compare: &[u8],
        value: &[u8],
        old: &mut [u8],
    ) -> bool {
        match self.place(t, off, elem.size()) {
            Some(at) => self.cas_at(t, at, elem, compare, value, old),
            None => false,
        }
    }
}

/// A number the typed loops compute on, read and written in native byte order.
trait Native: Copy + PartialEq {
    /// Bytes of one.
    const SIZE: usize;
    /// The one at the start of `b` (at least `SIZE` bytes).
    fn load(b: &[u8]) -> Self;
    /// Write it at the start of `b` (at least `SIZE` bytes).
    fn store(self, b: &mut [u8]);
}

/// The operations MPI defines on every number type.
trait Arith: Native {
    fn sum(self, o: Self) -> Self;
    fn prod(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
    fn max(self, o: Self) -> Self;
}

/// The operations MPI defines on integers only (bitwise and logical).
trait Bits: Arith {
    fn band(self, o: Self) -> Self;
    fn bor(self, o: Self) -> Self;
    fn bxor(self, o: Self) -> Self;
    fn land(self, o: Self) -> Self;
    fn lor(self, o: Self) -> Self;
    fn lxor(self, o: Self) -> Self;
}

macro_rules! native {
    ($($t:ty),*) => {$(
        impl Native for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(b[..Self::SIZE].try_into().expect("one element"))
            }
            #[inline(always)]
            fn store(self, b: &mut [u8]) {
                b[..Self::SIZE].copy_from_slice(&self.to_ne_bytes());
            }
        }
    )*};
}
native!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

// The arithmetic of `accumulate_with`, expression for expression (wrapping integers, IEEE
// floats with `min`/`max`), so both compute the same bits.
macro_rules! ints {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)]
            fn sum(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)]
            fn prod(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)]
            fn min(self, o: Self) -> Self { Ord::min(self, o) }
            #[inline(always)]
            fn max(self, o: Self) -> Self { Ord::max(self, o) }
        }
        impl Bits for $t {
            #[inline(always)]
            fn band(self, o: Self) -> Self { self & o }
            #[inline(always)]
            fn bor(self, o: Self) -> Self { self | o }
            #[inline(always)]
            fn bxor(self, o: Self) -> Self { self ^ o }
            #[inline(always)]
            fn land(self, o: Self) -> Self { <$t>::from(self != 0 && o != 0) }
            #[inline(always)]
            fn lor(self, o: Self) -> Self { <$t>::from(self != 0 || o != 0) }
            #[inline(always)]
            fn lxor(self, o: Self) -> Self { <$t>::from((self != 0) != (o != 0)) }
        }
    )*};
}
ints!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! floats {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)]
            fn sum(self, o: Self) -> Self { self + o }
            #[inline(always)]
            fn prod(self, o: Self) -> Self { self * o }
            #[inline(always)]
            fn min(self, o: Self) -> Self { <$t>::min(self, o) }
            #[inline(always)]
            fn max(self, o: Self) -> Self { <$t>::max(self, o) }
        }
    )*};
}
floats!(f32, f64);

/// `target = f(target, origin)` element by element, the previous elements into `old` first
/// (all three of the same whole number of elements: the caller checked). One element, the
/// common small case, goes without the loop's set-up; a run of [`WIDE_MIN`] bytes or more
/// goes to the same loop compiled for AVX2 when the CPU has it ([`wide::each`]).
#[inline(always)]
fn each<T: Native>(
    target: &mut [u8],
    origin: &[u8],
    old: Option<&mut [u8]>,
    f: impl Fn(T, T) -> T,
) {
    let s = T::SIZE;
    if target.len() == s && origin.len() == s {
        let x = T::load(target);
        if let Some(old) = old {
            x.store(old);
        }
        f(x, T::load(origin)).store(target);
        return;
    }
    if target.len() >= WIDE_MIN {
        each_long(target, origin, old, f);
    } else {
        each_run(target, origin, old, f);
    }
}

/// [`each`] on a run of [`WIDE_MIN`] bytes or more, out of line: the AVX2 call and its
/// feature test inlined would make every caller save more registers, the short runs' too.
///
/// A fetching run of [`SPLIT_MIN`] bytes or more goes block by block: the block's previous
/// contents copied out (`memcpy`), then the block combined in place while it is still in
/// the L1 cache. Past the L1 cache the one-pass loop (two loads, two stores per vector)
/// costs 1.2-1.6x the two passes (bytes summed, on this machine's Xeon, 48 KiB L1: 24 KiB
/// 1.6 against 1.1 us, 64 KiB 4.3-5.0 against 3.5-3.7 us), whose copy streams and whose
/// update finds its block in L1.
#[inline(never)]
fn each_long<T: Native>(
    target: &mut [u8],
    origin: &[u8],
    old: Option<&mut [u8]>,
    f: impl Fn(T, T) -> T,
) {
    let avx2 = wide::avx2();
    match old {
        Some(old) if target.len() >= SPLIT_MIN => {
            // Whole elements per block (BLOCK is a multiple of every element size).
            let blocks = target.chunks_mut(BLOCK).zip(origin.chunks(BLOCK));
            for ((t, o), r) in blocks.zip(old.chunks_mut(BLOCK)) {
                r.copy_from_slice(t);
                if avx2 {
                    wide::each(t, o, None, &f);
                } else {
                    each_run(t, o, None, &f);
                }
            }
        }
        old if avx2 => wide::each(target, origin, old, f),
        old => each_run(target, origin, old, f),
    }
}

/// The run length (bytes) from which [`each_long`] fetches and combines block by block:
/// below it the three buffers fit in L1 and the one pass is as fast (OSU's 8 KiB
/// get_accumulate: 0.22 us one pass, 0.23 in two).
const SPLIT_MIN: usize = 16 * 1024;
/// The block of [`each_long`]'s two passes: inside L1 with its origin and its copy. (2, 4
/// and 8 KiB blocks measured within 10% of each other from 16 KiB; 8 KiB the best at 16-32
/// KiB.)
const BLOCK: usize = 8192;

/// The run length (bytes) from which [`each`] takes the AVX2 loop: below it the loop's
/// set-up and the feature test weigh more than the wider vectors save.
const WIDE_MIN: usize = 256;

/// The loop of [`each`] over a run of any length.
#[inline(always)]
fn each_run<T: Native>(
    target: &mut [u8],
    origin: &[u8],
    old: Option<&mut [u8]>,
    f: impl Fn(T, T) -> T,
) {
    let s = T::SIZE;
    match old {
        None => {
            for (t, o) in target.chunks_exact_mut(s).zip(origin.chunks_exact(s)) {
                f(T::load(t), T::load(o)).store(t);
            }
        }
        Some(old) => {
            let pairs = target.chunks_exact_mut(s).zip(origin.chunks_exact(s));
            for ((t, o), r) in pairs.zip(old.chunks_exact_mut(s)) {
                let x = T::load(t);
                x.store(r);
                f(x, T::load(o)).store(t);
            }
        }
    }
}

/// The typed loops compiled for AVX2 (32-byte vectors), chosen at run time: the build
/// targets baseline x86-64 (16-byte SSE2 vectors), and a 64 KiB accumulate is then about
/// twice the instructions of a peer's AVX2 loop. Elsewhere than x86-64, never taken.
#[allow(unsafe_code)]
mod wide {
    use super::{each_run, Native};

    /// Does this CPU run AVX2? (The standard library caches the CPUID answer: one load.)
    #[inline(always)]
    pub fn avx2() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx2")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// [`each_run`] compiled with AVX2 enabled; the caller checked [`avx2`].
    #[inline(always)]
    pub fn each<T: Native>(
        target: &mut [u8],
        origin: &[u8],
        old: Option<&mut [u8]>,
        f: impl Fn(T, T) -> T,
    ) {
        #[cfg(target_arch = "x86_64")]
        {
            debug_assert!(avx2());
            // SAFETY: the only obligation of a `target_feature` function is that the CPU has
            // the feature: every caller checked `avx2()` first.
            unsafe { each_avx2(target, origin, old, f) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        each_run(target, origin, old, f)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn each_avx2<T: Native>(
        target: &mut [u8],
        origin: &[u8],
        old: Option<&mut [u8]>,
        f: impl Fn(T, T) -> T,
    ) {
        each_run(target, origin, old, f)
    }
}

/// `MPI_NO_OP`: the previous elements into `old`, the target untouched; false, nothing
/// written, unless the target is whole elements and `old` (if any) as long.
fn fetch<T: Native>(target: &mut [u8], _origin: &[u8], old: Option<&mut [u8]>) -> bool {
    if !target.len().is_multiple_of(T::SIZE) {
        return false;
    }
    match old {
        Some(old) if old.len() != target.len() => false,
        Some(old) => {
            if target.len() == T::SIZE {
                T::load(target).store(old);
            } else {
                old.copy_from_slice(target);
            }
            true
        }
        None => true,
    }
}

/// An operation as a type, so that each (element type, operation) is its own function.
trait Op<T> {
    fn f(a: T, b: T) -> T;
}

macro_rules! ops {
    ($($name:ident: $bound:ident => $f:expr;)*) => {$(
        struct $name;
        impl<T: $bound> Op<T> for $name {
            #[inline(always)]
            fn f(a: T, b: T) -> T {
                $f(a, b)
            }
        }
    )*};
}
ops! {
    Replace: Native => |_, b| b;
    Sum: Arith => T::sum;
    Prod: Arith => T::prod;
    Min: Arith => T::min;
    Max: Arith => T::max;
    BAnd: Bits => T::band;
    BOr: Bits => T::bor;
    BXor: Bits => T::bxor;
    LAnd: Bits => T::land;
    LOr: Bits => T::lor;
    LXor: Bits => T::lxor;
}

/// One (element type, operation) over a run: `target = target op origin` element by
/// element, the previous elements into `old` first; false, nothing written, unless the
/// target is whole elements and the origin and `old` (if any) are as long.
fn leaf<T: Native, O: Op<T>>(target: &mut [u8], origin: &[u8], old: Option<&mut [u8]>) -> bool {
    if !target.len().is_multiple_of(T::SIZE)
        || origin.len() != target.len()
        || old.as_deref().is_some_and(|o| o.len() != target.len())
    {
        return false;
    }
    each::<T>(target, origin, old, O::f);
    true
}

/// The typed loop of one (element type, operation), with its length checks.
type Leaf = fn(&mut [u8], &[u8], Option<&mut [u8]>) -> bool;

/// The loops of an integer type, by [`AccOp`] (the pairs' operations have none).
const fn ints<T: Bits>() -> [Option<Leaf>; 14] {
    [
        Some(leaf::<T, Replace>),
        Some(fetch::<T>),
        Some(leaf::<T, Sum>),
        Some(leaf::<T, Prod>),
        Some(leaf::<T, Min>),
        Some(leaf::<T, Max>),
        Some(leaf::<T, BAnd>),
        Some(leaf::<T, BOr>),
        Some(leaf::<T, BXor>),
        Some(leaf::<T, LAnd>),
        Some(leaf::<T, LOr>),
        Some(leaf::<T, LXor>),
        None,
        None,
    ]
}

/// The loops of a floating-point type (no bitwise or logical operations).
const fn floats<T: Arith>() -> [Option<Leaf>; 14] {
    [
        Some(leaf::<T, Replace>),
        Some(fetch::<T>),
        Some(leaf::<T, Sum>),
        Some(leaf::<T, Prod>),
        Some(leaf::<T, Min>),
        Some(leaf::<T, Max>),
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
    ]
}

/// `MPI_BYTE`: replace, no-op and the bitwise operations, on `u8`.
const fn bytes() -> [Option<Leaf>; 14] {
    let mut row = ints::<u8>();
    let mut op = 0;
    while op < row.len() {
        if !matches!(op, 0 | 1 | 6 | 7 | 8) {
            row[op] = None;
        }
        op += 1;
    }
    row
}

/// Every typed loop, by [`Elem`] and [`AccOp`] (their wire order), for the element types
/// Rust computes on; `None` where MPI defines no such operation (`Elem::supports`).
static LEAVES: [[Option<Leaf>; 14]; 11] = [
    ints::<i8>(),
    ints::<i16>(),
    ints::<i32>(),
    ints::<i64>(),
    ints::<u8>(),
    ints::<u16>(),
    ints::<u32>(),
    ints::<u64>(),
    floats::<f32>(),
    floats::<f64>(),
    bytes(),
];

/// The typed loop of `op` on `elem`: one indexed load. `None` for what it does not compute
/// (pairs, the host's elements, an operation the type has not).
#[inline(always)]
fn leaf_of(op: AccOp, elem: Elem) -> Option<Leaf> {
    LEAVES.get(elem as usize)?[op as usize]
}

/// `target = target op origin` over whole elements of `elem`, the previous contents into
/// `old` first (`origin` ignored by [`AccOp::NoOp`]): the loop of `LEAVES` monomorphised
/// for the native type and the operation. False, nothing written, for what it does not
/// compute (pairs, the host's elements, an operation the type has not) and for lengths
/// that are not whole elements or differ.
#[inline]
pub fn apply(
    op: AccOp,
    elem: Elem,
    target: &mut [u8],
    origin: &[u8],
    old: Option<&mut [u8]>,
) -> bool {
    leaf_of(op, elem).is_some_and(|f| f(target, origin, old))
}

/// `op` on one 4- or 8-byte element as a CPU atomic; the previous value.
macro_rules! rmw {
    ($name:ident, $atomic:ty, $t:ty, $ints:pat) => {
        fn $name(
            a: &$atomic,
            op: AccOp,
            elem: Elem,
            origin: $t,
            host: Option<HostAccumulate>,
        ) -> $t {
            let int = matches!(elem, $ints);
            match op {
                AccOp::Replace => a.swap(origin, Ordering::AcqRel),
                AccOp::NoOp => a.load(Ordering::Acquire),
                AccOp::Sum if int => a.fetch_add(origin, Ordering::AcqRel),
                AccOp::BAnd if int => a.fetch_and(origin, Ordering::AcqRel),
                AccOp::BOr if int => a.fetch_or(origin, Ordering::AcqRel),
                AccOp::BXor if int => a.fetch_xor(origin, Ordering::AcqRel),
                _ => {
                    let r = a.fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                        let mut b = cur.to_ne_bytes();
                        accumulate_with(op, elem, &mut b, &origin.to_ne_bytes(), host)
                            .ok()
                            .map(|()| <$t>::from_ne_bytes(b))
                    });
                    // Err only if the operation failed, which the caller's checks rule out.
                    r.unwrap_or_else(|v| v)
                }
            }
        }
    };
}
rmw!(rmw32, AtomicU32, u32, Elem::I32 | Elem::U32);
rmw!(rmw64, AtomicU64, u64, Elem::I64 | Elem::U64);

#[cfg(test)]
mod tests {
    use super::*;

    /// The scalar element types (`Elem::ALL` lists them first, the pair types after).
    const ELEMS: &[Elem] = Elem::ALL.split_at(11).0;

    /// Equal, or both NaNs of the element's float type at the same place (the two loops may
    /// pick either NaN operand's payload).
    fn same(elem: Elem, a: &[u8], b: &[u8]) -> bool {
        let es = elem.size();
        a.len() == b.len()
            && a.chunks(es).zip(b.chunks(es)).all(|(x, y)| {
                x == y
                    || match elem {
                        Elem::F32 => f32::load(x).is_nan() && f32::load(y).is_nan(),
                        Elem::F64 => f64::load(x).is_nan() && f64::load(y).is_nan(),
                        _ => false,
                    }
            })
    }

    /// The long runs (the AVX2 loop where the CPU has it, [`WIDE_MIN`] bytes and more; the
    /// fetching ones block by block from [`SPLIT_MIN`] bytes) compute what the framework's
    /// `accumulate_with` computes, for every element type and operation, at 64 KiB and at
    /// lengths around the thresholds and off the vector width and the block (tails), with
    /// and without the previous contents fetched, at aligned and misaligned starts.
    #[test]
    fn long_runs_agree_with_the_framework() {
        let bytes: Vec<u8> = (0..2 * 65536 + 64)
            .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for &elem in ELEMS {
            let es = elem.size();
            for &op in AccOp::ALL.iter().filter(|&&op| elem.supports(op)) {
                for n in [
                    WIDE_MIN / es - 1,
                    WIDE_MIN / es,
                    WIDE_MIN / es + 3,
                    SPLIT_MIN / es - 1,
                    SPLIT_MIN / es + 3,
                    65536 / es,
                ] {
                    for (shift, fetch) in [(0, false), (1, true), (es / 2 + 3, false), (7, true)] {
                        let len = n * es;
                        let a = &bytes[shift..shift + len];
                        let b = &bytes[65536 + shift..65536 + shift + len];
                        let origin = if op == AccOp::NoOp { &[][..] } else { b };
                        // The target at `shift` bytes into a buffer: misaligned starts.
                        let mut buf = vec![0u8; len + 8];
                        buf[shift % 8..shift % 8 + len].copy_from_slice(a);
                        let mut old = vec![0xa5u8; len];
                        let target = &mut buf[shift % 8..shift % 8 + len];
                        let took = apply(op, elem, target, origin, fetch.then_some(&mut old[..]));
                        let mut want = a.to_vec();
                        if op != AccOp::NoOp {
                            accumulate_with(op, elem, &mut want, b, None).unwrap();
                        }
                        assert!(took, "{op:?} on {elem:?}, {n} elements");
                        assert!(
                            same(elem, target, &want),
                            "{op:?} on {elem:?}, {n} elements at +{shift}"
                        );
                        if fetch {
                            assert_eq!(&old[..], a, "{op:?} on {elem:?}: fetched");
                        }
                    }
                }
            }
        }
    }

    proptest::proptest! {
        /// The typed loops compute what the framework's `accumulate_with` computes, for
        /// every element type and operation, on any bits (NaNs and overflows included) and
        /// any element count (one element takes its own branch), and fetch the previous
        /// contents; what the type has not is refused with nothing written.
        #[test]
        fn the_typed_loops_agree_with_the_framework(
            e in 0..ELEMS.len(),
            o in 0..AccOp::ALL.len(),
            n in 1usize..6,
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 96),
            fetch: bool,
        ) {
            let (elem, op) = (ELEMS[e], AccOp::ALL[o]);
            let len = n * elem.size();
            let (a, b) = (&bytes[..len], &bytes[48..48 + len]);
            let origin = if op == AccOp::NoOp { &[][..] } else { b };
            let mut got = a.to_vec();
            let mut old = vec![0xa5u8; len];
            let took = apply(op, elem, &mut got, origin, fetch.then_some(&mut old[..]));
            let mut want = a.to_vec();
            let r = if op == AccOp::NoOp {
                Ok(())
            } else {
                accumulate_with(op, elem, &mut want, b, None)
            };
            if elem.supports(op) {
                proptest::prop_assert!(took && r.is_ok(), "{op:?} on {elem:?}");
                proptest::prop_assert!(same(elem, &got, &want), "{op:?} on {elem:?}: {got:?} {want:?}");
                if fetch {
                    proptest::prop_assert_eq!(&old[..], a);
                }
            } else {
                proptest::prop_assert!(!took && r.is_err(), "{op:?} on {elem:?}");
                proptest::prop_assert_eq!(&got[..], a, "nothing written");
                proptest::prop_assert!(old.iter().all(|&x| x == 0xa5), "no result written");
            }
        }
    }
}
