//! Reduction operations and the element types they apply to.

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
}

impl Op {
    /// Every operation, for tests and tools.
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
        !matches!(self, Op::Sum | Op::Prod | Op::Min | Op::Max)
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
            fn supports(_: Op) -> bool {
                true
            }
            #[inline]
            fn combine(op: Op, a: Self, b: Self) -> Self {
                match op {
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
                !op.integer_only()
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
            each!(Sum, Prod, Min, Max, BitAnd, BitOr, BitXor, LogicalAnd, LogicalOr, LogicalXor)
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
            each!(Sum, Prod, Min, Max, BitAnd, BitOr, BitXor, LogicalAnd, LogicalOr, LogicalXor)
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
}
