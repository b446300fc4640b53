//! The typed accumulate loops: MPI's predefined operations on the element types Rust
//! computes on, each (element type, operation) a function monomorphised for the native type,
//! whose loop reads and writes whole elements of a constant size. One element (a
//! fetch-and-op) is a load, the operation and a store; a long run is a loop the compiler
//! vectorizes, and from `WIDE_MIN` bytes the same loop built for AVX2 when the CPU has it
//! (`wide`). [`apply`] is what the components' accumulates call first (osc-sm on its
//! segment, osc-rdma on the runs it reads by CMA), with [`super::accumulate_with`] for the
//! rest (pairs, the host's element types); the two compute the same bits (tested below), as
//! Open MPI's op framework serves its osc components with one set of vector loops.

use super::{AccOp, Elem};

/// A number the typed loops compute on, read and written in native byte order.
pub trait Native: Copy + PartialEq {
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
pub type Leaf = fn(&mut [u8], &[u8], Option<&mut [u8]>) -> bool;

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
pub fn leaf_of(op: AccOp, elem: Elem) -> Option<Leaf> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::osc::accumulate_with;

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
