//! Reduction operations and the element types they apply to: the predefined [`Op`]s on
//! [`Reducible`] numbers, [`Op::MinLoc`]/[`Op::MaxLoc`] on [`Loc`] pairs, and user-defined
//! operations ([`UserOp`]), all used through the [`Reduction`] trait.

use crate::{Error, Result};

/// A predefined reduction operation.
///
/// All are associative and commutative on integers; on floats, Sum and Prod are not
/// associative, so each algorithm documents its combination order (and guarantees that every
/// rank receives bit-identical results).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Sum (wrapping on integers).
    Sum,
    /// Product (wrapping on integers).
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Bitwise and (integers only).
    BitAnd,
    /// Bitwise or (integers only).
    BitOr,
    /// Bitwise exclusive or (integers only).
    BitXor,
    /// Logical and: 1 if both are non-zero, else 0 (integers only).
    LogicalAnd,
    /// Logical or (integers only).
    LogicalOr,
    /// Logical exclusive or (integers only).
    LogicalXor,
    /// Minimum value and its index, on [`Loc`] pairs only: the smaller value wins; equal
    /// values keep the lower index (MPI's `MPI_MINLOC`).
    MinLoc,
    /// Maximum value and its index, on [`Loc`] pairs only: the larger value wins; equal
    /// values keep the lower index (MPI's `MPI_MAXLOC`).
    MaxLoc,
}

impl Op {
    /// Every elementwise operation on plain numbers (all but [`Op::MinLoc`] and
    /// [`Op::MaxLoc`]), for tests and tools.
    pub const ALL: [Op; 10] = [
        Op::Sum,
        Op::Prod,
        Op::Min,
        Op::Max,
        Op::BitAnd,
        Op::BitOr,
        Op::BitXor,
        Op::LogicalAnd,
        Op::LogicalOr,
        Op::LogicalXor,
    ];

    /// Is this an integer-only operation?
    pub fn integer_only(self) -> bool {
        !matches!(
            self,
            Op::Sum | Op::Prod | Op::Min | Op::Max | Op::MinLoc | Op::MaxLoc
        )
    }

    /// Is this a value-and-index operation ([`Op::MinLoc`], [`Op::MaxLoc`])?
    pub fn is_loc(self) -> bool {
        matches!(self, Op::MinLoc | Op::MaxLoc)
    }
}

/// An element type that reductions apply to.
pub trait Reducible: bytemuck::Pod {
    /// Name of the type, for error messages.
    const NAME: &'static str;
    /// Does `op` apply to this type?
    fn supports(op: Op) -> bool;
    /// `a op b`. Only called when [`Reducible::supports`] holds.
    fn combine(op: Op, a: Self, b: Self) -> Self;
}

macro_rules! int_reducible {
    ($($t:ty),*) => {$(
        impl Reducible for $t {
            const NAME: &'static str = stringify!($t);
            fn supports(op: Op) -> bool {
                !op.is_loc()
            }
            #[inline]
            fn combine(op: Op, a: Self, b: Self) -> Self {
                match op {
                    // Excluded by `supports`; keep the left operand rather than panic.
                    Op::MinLoc | Op::MaxLoc => a,
                    Op::Sum => a.wrapping_add(b),
                    Op::Prod => a.wrapping_mul(b),
                    Op::Min => a.min(b),
                    Op::Max => a.max(b),
                    Op::BitAnd => a & b,
                    Op::BitOr => a | b,
                    Op::BitXor => a ^ b,
                    Op::LogicalAnd => Self::from(a != 0 && b != 0),
                    Op::LogicalOr => Self::from(a != 0 || b != 0),
                    Op::LogicalXor => Self::from((a != 0) != (b != 0)),
                }
            }
        }
    )*};
}
int_reducible!(i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);

macro_rules! float_reducible {
    ($($t:ty),*) => {$(
        impl Reducible for $t {
            const NAME: &'static str = stringify!($t);
            fn supports(op: Op) -> bool {
                !op.integer_only() && !op.is_loc()
            }
            #[inline]
            fn combine(op: Op, a: Self, b: Self) -> Self {
                match op {
                    Op::Sum => a + b,
                    Op::Prod => a * b,
                    Op::Min => a.min(b),
                    Op::Max => a.max(b),
                    // Excluded by `supports`; keep the left operand rather than panic.
                    _ => a,
                }
            }
        }
    )*};
}
float_reducible!(f32, f64);

/// `d = f(s, d)` (`src_first`) or `f(d, s)`, elementwise.
#[inline(always)]
fn combine_all<T: Copy>(d: &mut [T], s: &[T], src_first: bool, f: impl Fn(T, T) -> T) {
    if src_first {
        d.iter_mut().zip(s).for_each(|(d, s)| *d = f(*s, *d));
    } else {
        d.iter_mut().zip(s).for_each(|(d, s)| *d = f(*d, *s));
    }
}

/// `dst = src op dst` (`src_first`) or `dst op src`, elementwise over byte views of `T`.
pub(crate) fn reduce_bytes<T: Reducible>(op: Op, dst: &mut [u8], src: &[u8], src_first: bool) {
    match (
        bytemuck::try_cast_slice_mut::<u8, T>(dst),
        bytemuck::try_cast_slice::<u8, T>(src),
    ) {
        (Ok(d), Ok(s)) => {
            // One loop per operation, so that each is a plain elementwise loop the compiler
            // vectorizes (with the operation matched inside, it stays scalar).
            macro_rules! each {
                ($($op:ident),*) => {
                    match op {
                        $(Op::$op => combine_all(d, s, src_first, |a, b| T::combine(Op::$op, a, b)),)*
                    }
                };
            }
            each!(
                Sum, Prod, Min, Max, BitAnd, BitOr, BitXor, LogicalAnd, LogicalOr, LogicalXor,
                MinLoc, MaxLoc
            )
        }
        // Misaligned views (never produced by the executor, whose buffers are 8-byte aligned
        // or the caller's typed slices): element by element.
        _ => {
            let size = std::mem::size_of::<T>();
            for (d, s) in dst.chunks_exact_mut(size).zip(src.chunks_exact(size)) {
                let (a, b): (T, T) = (
                    bytemuck::pod_read_unaligned(d),
                    bytemuck::pod_read_unaligned(s),
                );
                let r = if src_first {
                    T::combine(op, b, a)
                } else {
                    T::combine(op, a, b)
                };
                d.copy_from_slice(bytemuck::bytes_of(&r));
            }
        }
    }
}

/// `d = f(s, a)` (`src_first`) or `f(a, s)`, elementwise: [`combine_all`] with the
/// accumulated operand read from `a` instead of `d`.
#[inline(always)]
fn combine_into<T: Copy>(d: &mut [T], s: &[T], a: &[T], src_first: bool, f: impl Fn(T, T) -> T) {
    if src_first {
        d.iter_mut()
            .zip(s)
            .zip(a)
            .for_each(|((d, s), a)| *d = f(*s, *a));
    } else {
        d.iter_mut()
            .zip(s)
            .zip(a)
            .for_each(|((d, s), a)| *d = f(*a, *s));
    }
}

/// `dst = src op acc` (`src_first`) or `acc op src`, elementwise over byte views of `T`: a
/// reduction whose accumulated operand is not in `dst` yet (the caller's input), computed in
/// one pass instead of a copy followed by [`reduce_bytes`].
pub(crate) fn reduce_into_bytes<T: Reducible>(
    op: Op,
    dst: &mut [u8],
    src: &[u8],
    acc: &[u8],
    src_first: bool,
) {
    debug_assert!(dst.len() == src.len() && dst.len() == acc.len());
    match (
        bytemuck::try_cast_slice_mut::<u8, T>(dst),
        bytemuck::try_cast_slice::<u8, T>(src),
        bytemuck::try_cast_slice::<u8, T>(acc),
    ) {
        (Ok(d), Ok(s), Ok(a)) => {
            // One loop per operation, as in `reduce_bytes`, so that each vectorizes.
            macro_rules! each {
                ($($op:ident),*) => {
                    match op {
                        $(Op::$op => combine_into(d, s, a, src_first, |x, y| T::combine(Op::$op, x, y)),)*
                    }
                };
            }
            each!(
                Sum, Prod, Min, Max, BitAnd, BitOr, BitXor, LogicalAnd, LogicalOr, LogicalXor,
                MinLoc, MaxLoc
            )
        }
        // Misaligned views (never produced by the executor): element by element.
        _ => {
            let size = std::mem::size_of::<T>();
            for ((d, s), a) in dst
                .chunks_exact_mut(size)
                .zip(src.chunks_exact(size))
                .zip(acc.chunks_exact(size))
            {
                let (s, a): (T, T) = (
                    bytemuck::pod_read_unaligned(s),
                    bytemuck::pod_read_unaligned(a),
                );
                let r = if src_first {
                    T::combine(op, s, a)
                } else {
                    T::combine(op, a, s)
                };
                d.copy_from_slice(bytemuck::bytes_of(&r));
            }
        }
    }
}

/// A value and its index, the element type of [`Op::MinLoc`] and [`Op::MaxLoc`] (MPI's
/// `MPI_2INT`, `MPI_FLOAT_INT`, `MPI_DOUBLE_INT`, ... pair types). The index has the value's
/// size ([`LocValue::Index`]: `i32` beside 4-byte values, `i64` beside 8-byte ones), so the
/// pair has no padding and is [`bytemuck::Pod`].
///
/// ```
/// use rmca::coll::{Loc, Op, Reducible};
/// let a = Loc { value: 2.5f64, index: 3 };
/// let b = Loc { value: 2.5f64, index: 1 };
/// assert_eq!(Loc::combine(Op::MaxLoc, a, b), b); // a tie keeps the lower index
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Loc<T: LocValue> {
    /// The value compared.
    pub value: T,
    /// Its index (typically a rank or a position), the tie-breaker.
    pub index: T::Index,
}

// SAFETY: `Loc<T>` is `repr(C)` with two `Pod` fields, and `LocValue` (sealed) is only
// implemented for types whose `Index` has the value's size and alignment, so the struct has
// no padding; the all-zero pattern is a valid value of both fields.
#[allow(unsafe_code)]
unsafe impl<T: LocValue> bytemuck::Zeroable for Loc<T> {}
// SAFETY: as above (no padding, every bit pattern of both fields valid, `Copy + 'static`).
#[allow(unsafe_code)]
unsafe impl<T: LocValue> bytemuck::Pod for Loc<T> {}

mod sealed {
    /// Keeps [`super::LocValue`] and [`super::Reduction`] implementable only here.
    pub trait Sealed {}
}

/// A value type of [`Loc`] pairs (sealed): `i32`, `u32` and `f32` with an `i32` index, `i64`,
/// `u64` and `f64` with an `i64` index (an index of the value's size leaves no padding).
pub trait LocValue: Reducible + PartialOrd + std::fmt::Debug + Default + sealed::Sealed {
    /// The index stored beside the value.
    type Index: bytemuck::Pod + Ord + std::fmt::Debug + Default;
}

macro_rules! loc_value {
    ($($t:ty => $i:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl LocValue for $t {
            type Index = $i;
        }
    )*};
}
loc_value!(i32 => i32, u32 => i32, f32 => i32, i64 => i64, u64 => i64, f64 => i64);

impl<T: LocValue> Reducible for Loc<T> {
    const NAME: &'static str = "Loc";
    fn supports(op: Op) -> bool {
        op.is_loc()
    }
    #[inline]
    fn combine(op: Op, a: Self, b: Self) -> Self {
        use std::cmp::Ordering::{Greater, Less};
        // The winner by value; on a tie (or an unordered NaN pair) a's value with the lower
        // index, as MPI specifies.
        let better = match op {
            Op::MaxLoc => Greater,
            _ => Less,
        };
        match a.value.partial_cmp(&b.value) {
            Some(o) if o == better => a,
            Some(o) if o == better.reverse() => b,
            _ => Loc {
                value: a.value,
                index: a.index.min(b.index),
            },
        }
    }
}

/// A reduction operation on elements of type `T`: a predefined [`Op`] (on [`Reducible`]
/// types), a user-defined [`UserOp`], or a reference to either. Sealed; its methods are the
/// collectives' internals.
pub trait Reduction<T: bytemuck::Pod>: sealed::Sealed {
    /// Is the operation defined for `T`? (An error names what is valid.)
    #[doc(hidden)]
    fn check(&self) -> Result<()>;
    /// May the operands be combined in any order? Non-commutative operations are combined in
    /// rank order, which rules out some algorithms.
    #[doc(hidden)]
    fn is_commutative(&self) -> bool;
    /// `dst = src op acc` (`src_first`) or `acc op src` elementwise over byte views of `T`,
    /// where `acc` is `dst` itself when `None`.
    #[doc(hidden)]
    fn apply(&self, dst: &mut [u8], src: &[u8], acc: Option<&[u8]>, src_first: bool);
}

impl sealed::Sealed for Op {}

impl<T: Reducible> Reduction<T> for Op {
    fn check(&self) -> Result<()> {
        if T::supports(*self) {
            return Ok(());
        }
        let valid: Vec<String> = Op::ALL
            .iter()
            .chain(&[Op::MinLoc, Op::MaxLoc])
            .filter(|o| T::supports(**o))
            .map(|o| format!("{o:?}"))
            .collect();
        Err(Error::InvalidArgument(format!(
            "{self:?} is not defined for {}: use {}",
            T::NAME,
            valid.join(", ")
        )))
    }
    fn is_commutative(&self) -> bool {
        true
    }
    fn apply(&self, dst: &mut [u8], src: &[u8], acc: Option<&[u8]>, src_first: bool) {
        match acc {
            None => reduce_bytes::<T>(*self, dst, src, src_first),
            Some(acc) => reduce_into_bytes::<T>(*self, dst, src, acc, src_first),
        }
    }
}

impl<R: ?Sized + sealed::Sealed> sealed::Sealed for &R {}

impl<T: bytemuck::Pod, R: ?Sized + Reduction<T>> Reduction<T> for &R {
    fn check(&self) -> Result<()> {
        (**self).check()
    }
    fn is_commutative(&self) -> bool {
        (**self).is_commutative()
    }
    fn apply(&self, dst: &mut [u8], src: &[u8], acc: Option<&[u8]>, src_first: bool) {
        (**self).apply(dst, src, acc, src_first)
    }
}

/// A user-defined reduction operation: `f(a, b)` combines two elements, `a` from lower ranks
/// than `b` (MPI's `MPI_Op_create`). It must be associative; a [`UserOp::non_commutative`]
/// operation is combined strictly in rank order (`x0 op x1 op ... op x(n-1)`), so the
/// collectives pick order-preserving algorithms for it whatever `coll_*_algorithm` says (see
/// the module documentation).
///
/// ```
/// use rmca::coll::UserOp;
/// // 2x2 matrix product: associative, not commutative.
/// let matmul = UserOp::non_commutative(|a: [i64; 4], b: [i64; 4]| {
///     [a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
///      a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]]
/// });
/// # let _ = matmul;
/// ```
#[derive(Clone, Copy)]
pub struct UserOp<F> {
    f: F,
    commutative: bool,
}

impl<F> UserOp<F> {
    /// An operation whose operands may be combined in any order.
    pub fn commutative(f: F) -> Self {
        Self {
            f,
            commutative: true,
        }
    }

    /// An operation combined in rank order only.
    pub fn non_commutative(f: F) -> Self {
        Self {
            f,
            commutative: false,
        }
    }
}

impl<F> std::fmt::Debug for UserOp<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserOp")
            .field("commutative", &self.commutative)
            .finish_non_exhaustive()
    }
}

impl<F> sealed::Sealed for UserOp<F> {}

impl<T: bytemuck::Pod, F: Fn(T, T) -> T> Reduction<T> for UserOp<F> {
    fn check(&self) -> Result<()> {
        Ok(())
    }
    fn is_commutative(&self) -> bool {
        self.commutative
    }
    fn apply(&self, dst: &mut [u8], src: &[u8], acc: Option<&[u8]>, src_first: bool) {
        combine_elements(dst, src, acc, src_first, &self.f);
    }
}

/// `dst = f(src, acc)` (`src_first`) or `f(acc, src)` elementwise over byte views of `T`
/// (`acc` is `dst` when `None`), aligned or not.
fn combine_elements<T: bytemuck::Pod>(
    dst: &mut [u8],
    src: &[u8],
    acc: Option<&[u8]>,
    src_first: bool,
    f: impl Fn(T, T) -> T,
) {
    let size = std::mem::size_of::<T>();
    if size == 0 {
        return;
    }
    for (i, (d, s)) in dst
        .chunks_exact_mut(size)
        .zip(src.chunks_exact(size))
        .enumerate()
    {
        let s: T = bytemuck::pod_read_unaligned(s);
        let a: T = match acc {
            None => bytemuck::pod_read_unaligned(d),
            Some(acc) => bytemuck::pod_read_unaligned(&acc[i * size..(i + 1) * size]),
        };
        let r = if src_first { f(s, a) } else { f(a, s) };
        d.copy_from_slice(bytemuck::bytes_of(&r));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_ops() {
        assert_eq!(i32::combine(Op::Sum, i32::MAX, 1), i32::MIN);
        assert_eq!(u8::combine(Op::Prod, 16, 17), 16);
        assert_eq!(i64::combine(Op::Min, -3, 2), -3);
        assert_eq!(u16::combine(Op::Max, 3, 9), 9);
        assert_eq!(u32::combine(Op::BitAnd, 0b1100, 0b1010), 0b1000);
        assert_eq!(u32::combine(Op::BitOr, 0b1100, 0b1010), 0b1110);
        assert_eq!(u32::combine(Op::BitXor, 0b1100, 0b1010), 0b0110);
        assert_eq!(i8::combine(Op::LogicalAnd, 5, -1), 1);
        assert_eq!(i8::combine(Op::LogicalAnd, 5, 0), 0);
        assert_eq!(usize::combine(Op::LogicalOr, 0, 0), 0);
        assert_eq!(isize::combine(Op::LogicalXor, 4, 0), 1);
        assert_eq!(isize::combine(Op::LogicalXor, 4, 2), 0);
    }

    #[test]
    fn float_ops_and_support() {
        assert_eq!(f64::combine(Op::Sum, 1.5, 2.0), 3.5);
        assert_eq!(f32::combine(Op::Min, 1.5, -2.0), -2.0);
        assert!(!f64::supports(Op::BitXor));
        assert!(f64::supports(Op::Max));
        assert!(u8::supports(Op::LogicalOr));
    }

    #[test]
    fn reduce_bytes_order_and_misalignment() {
        let mut d = [0u8; 17];
        let s = [0u8; 17];
        // Misaligned u32 views take the slow path and still compute.
        d[1..5].copy_from_slice(&7u32.to_ne_bytes());
        let mut s2 = s;
        s2[1..5].copy_from_slice(&5u32.to_ne_bytes());
        reduce_bytes::<u32>(Op::Sum, &mut d[1..], &s2[1..], false);
        assert_eq!(u32::from_ne_bytes(d[1..5].try_into().unwrap()), 12);
        // Aligned fast path.
        let mut a = [1.0f64, 2.0];
        let b = [10.0f64, 20.0];
        reduce_bytes::<f64>(
            Op::Prod,
            bytemuck::cast_slice_mut(&mut a),
            bytemuck::cast_slice(&b),
            true,
        );
        assert_eq!(a, [10.0, 40.0]);
    }

    /// An element whose combination is not commutative (`a op b` = 10a + b for every op), so
    /// the operand order a kernel passes to `combine` shows in the result.
    #[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
    #[repr(transparent)]
    struct Ordered(u32);

    impl Reducible for Ordered {
        const NAME: &'static str = "Ordered";
        fn supports(_: Op) -> bool {
            true
        }
        fn combine(_: Op, a: Self, b: Self) -> Self {
            Ordered(a.0 * 10 + b.0)
        }
    }

    #[test]
    fn reduce_into_bytes_computes_from_three_operands() {
        let src = [1i32, -2, i32::MAX, 40];
        let acc = [10i32, 20, 1, -40];
        let mut dst = [0x5a5a_5a5ai32; 4];
        for src_first in [false, true] {
            reduce_into_bytes::<i32>(
                Op::Sum,
                bytemuck::cast_slice_mut(&mut dst),
                bytemuck::cast_slice(&src),
                bytemuck::cast_slice(&acc),
                src_first,
            );
            assert_eq!(dst, [11, 18, i32::MIN, 0], "src_first={src_first}");
        }
        // Floats: the same values as the in-place kernel, bit for bit.
        let src = [0.1f64, 1e300, -3.5, f64::MIN_POSITIVE];
        let acc = [0.2f64, 1e300, 7.25, -0.0];
        for op in [Op::Sum, Op::Prod, Op::Min, Op::Max] {
            for src_first in [false, true] {
                let mut dst = [f64::NAN; 4];
                reduce_into_bytes::<f64>(
                    op,
                    bytemuck::cast_slice_mut(&mut dst),
                    bytemuck::cast_slice(&src),
                    bytemuck::cast_slice(&acc),
                    src_first,
                );
                let mut in_place = acc;
                reduce_bytes::<f64>(
                    op,
                    bytemuck::cast_slice_mut(&mut in_place),
                    bytemuck::cast_slice(&src),
                    src_first,
                );
                assert_eq!(
                    dst.map(f64::to_bits),
                    in_place.map(f64::to_bits),
                    "{op:?} src_first={src_first}"
                );
            }
        }
    }

    #[test]
    fn src_first_selects_operand_order() {
        let (src, acc) = ([Ordered(1), Ordered(2)], [Ordered(3), Ordered(4)]);
        for (src_first, want) in [(true, [13, 24]), (false, [31, 42])] {
            let want = want.map(Ordered);
            let mut dst = [Ordered(0); 2];
            reduce_into_bytes::<Ordered>(
                Op::Sum,
                bytemuck::cast_slice_mut(&mut dst),
                bytemuck::cast_slice(&src),
                bytemuck::cast_slice(&acc),
                src_first,
            );
            assert_eq!(dst, want, "3-operand, src_first={src_first}");
            let mut in_place = acc;
            reduce_bytes::<Ordered>(
                Op::Sum,
                bytemuck::cast_slice_mut(&mut in_place),
                bytemuck::cast_slice(&src),
                src_first,
            );
            assert_eq!(in_place, want, "in place, src_first={src_first}");
            // Misaligned views take the element-by-element path, in the same order.
            // (Word-aligned storage, so that one byte in is certainly misaligned.)
            let (mut d, mut s, mut a) = ([0u32; 3], [0u32; 3], [0u32; 3]);
            let [d, s, a] =
                [&mut d, &mut s, &mut a].map(|w| &mut bytemuck::cast_slice_mut(w)[1..9]);
            s.copy_from_slice(bytemuck::cast_slice(&src));
            a.copy_from_slice(bytemuck::cast_slice(&acc));
            reduce_into_bytes::<Ordered>(Op::Sum, d, s, a, src_first);
            assert_eq!(
                bytemuck::pod_read_unaligned::<[Ordered; 2]>(d),
                want,
                "misaligned, src_first={src_first}"
            );
        }
    }

    #[test]
    fn loc_ops_pick_value_then_lowest_index() {
        let l = |value: f64, index: i64| Loc { value, index };
        assert_eq!(Loc::combine(Op::MinLoc, l(1.0, 5), l(2.0, 0)), l(1.0, 5));
        assert_eq!(Loc::combine(Op::MinLoc, l(3.0, 5), l(2.0, 9)), l(2.0, 9));
        assert_eq!(Loc::combine(Op::MaxLoc, l(1.0, 5), l(2.0, 9)), l(2.0, 9));
        assert_eq!(Loc::combine(Op::MaxLoc, l(4.0, 5), l(2.0, 0)), l(4.0, 5));
        // Ties keep the lower index whichever operand it comes from.
        for op in [Op::MinLoc, Op::MaxLoc] {
            assert_eq!(Loc::combine(op, l(7.0, 3), l(7.0, 1)), l(7.0, 1));
            assert_eq!(Loc::combine(op, l(7.0, 1), l(7.0, 3)), l(7.0, 1));
        }
        let i = |value: i32, index: i32| Loc { value, index };
        assert_eq!(Loc::combine(Op::MinLoc, i(-4, 2), i(-4, 0)), i(-4, 0));
        assert_eq!(std::mem::size_of::<Loc<f32>>(), 8);
        assert_eq!(std::mem::size_of::<Loc<u64>>(), 16);
        // Through the byte kernel (the path the collectives take).
        let mut d = [i(5, 0), i(1, 4)];
        let s = [i(5, 2), i(0, 7)];
        reduce_bytes::<Loc<i32>>(
            Op::MinLoc,
            bytemuck::cast_slice_mut(&mut d),
            bytemuck::cast_slice(&s),
            true,
        );
        assert_eq!(d, [i(5, 0), i(0, 7)]);
    }

    #[test]
    fn op_support_errors_name_the_valid_ops() {
        let e = Reduction::<f64>::check(&Op::BitXor)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("BitXor is not defined for f64") && e.contains("Sum, Prod, Min, Max"),
            "{e}"
        );
        assert!(!e.contains("MinLoc"), "{e}");
        let e = Reduction::<i32>::check(&Op::MinLoc)
            .unwrap_err()
            .to_string();
        assert!(e.contains("MinLoc is not defined for i32"), "{e}");
        let e = Reduction::<Loc<f32>>::check(&Op::Sum)
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("use MinLoc, MaxLoc"), "{e}");
        assert!(Reduction::<Loc<f32>>::check(&Op::MaxLoc).is_ok());
    }

    #[test]
    fn user_ops_combine_in_the_given_order() {
        // String-concatenation-like: digits appended, so operand order shows.
        let concat = UserOp::non_commutative(|a: u64, b: u64| a * 10 + b);
        assert!(!Reduction::<u64>::is_commutative(&concat));
        assert!(Reduction::<u64>::is_commutative(&UserOp::commutative(
            |a: u64, b: u64| a + b
        )));
        let (src, acc) = ([1u64, 2], [3u64, 4]);
        for (src_first, want) in [(true, [13u64, 24]), (false, [31, 42])] {
            let mut dst = [0u64; 2];
            // Through a reference, as the collectives take it.
            fn apply_via<R: Reduction<u64>>(r: R, d: &mut [u8], s: &[u8], a: &[u8], sf: bool) {
                r.apply(d, s, Some(a), sf)
            }
            apply_via::<&UserOp<_>>(
                &concat,
                bytemuck::cast_slice_mut(&mut dst),
                bytemuck::cast_slice(&src),
                bytemuck::cast_slice(&acc),
                src_first,
            );
            assert_eq!(dst, want, "3-operand, src_first={src_first}");
            let mut in_place = acc;
            concat.apply(
                bytemuck::cast_slice_mut(&mut in_place),
                bytemuck::cast_slice(&src),
                None,
                src_first,
            );
            assert_eq!(in_place, want, "in place, src_first={src_first}");
        }
        // Misaligned byte views.
        let mut words = [0u64; 3];
        let bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[1..17];
        bytes.copy_from_slice(bytemuck::cast_slice(&acc));
        concat.apply(bytes, bytemuck::cast_slice(&src), None, false);
        assert_eq!(bytemuck::pod_read_unaligned::<[u64; 2]>(bytes), [31, 42]);
    }
}
