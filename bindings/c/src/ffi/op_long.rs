//! The predefined reductions Rust has no number type for: `MPI_MAX`, `MPI_MIN`, `MPI_SUM`
//! and `MPI_PROD` on C `long double` (`MPI_LONG_DOUBLE`), `MPI_SUM` and `MPI_PROD` on
//! `long double _Complex`, and `MPI_PROD` on the float and double complex types.
//!
//! The x86-64 `long double` is the x87 80-bit extended format (in 16 bytes). Its sums and
//! products are computed by the x87 unit itself, in one small inline-assembly module
//! (`x87`): the result is then bit for bit what the program's own C computes, under the
//! same control word (precision and rounding mode), with no software float emulation to get
//! wrong. Elsewhere (`long double` is IEEE binary128 on AArch64, which Rust cannot compute
//! in yet) only `MPI_MAX`/`MPI_MIN` are offered, which need comparisons alone.
//!
//! Complex products are `(a + bi)(c + di) = (ac - bd) + (ad + bc)i`, each product rounded
//! to the element type, with C's Annex G recovery of the infinities a NaN result hides: what
//! the program's own C computes (MPICH and Open MPI skip the recovery).

use rmca::coll::Op;

use crate::dtype::{Class, Datatype};

/// A predefined reduction computed here, on packed elements of [`Special::size`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    /// `MPI_MAX`, `MPI_MIN`, `MPI_SUM` or `MPI_PROD` on C `long double`.
    LongDouble(Op),
    /// `MPI_SUM` or `MPI_PROD` on C `long double _Complex`.
    LongDoubleComplex(Op),
    /// `MPI_PROD` on `float _Complex` (and Fortran `COMPLEX`, `COMPLEX*8`).
    ComplexProd32,
    /// `MPI_PROD` on `double _Complex` (and `DOUBLE COMPLEX`, `COMPLEX*16`).
    ComplexProd64,
}

/// Are `long double` sums and products computed on this target?
const LONG_DOUBLE_ARITHMETIC: bool = cfg!(target_arch = "x86_64");

impl Special {
    /// The reduction of `op` on `t` this module computes, if it is one.
    pub fn of(op: Op, t: &Datatype) -> Option<Special> {
        match t.name {
            "MPI_LONG_DOUBLE" => match op {
                Op::Max | Op::Min => Some(Special::LongDouble(op)),
                Op::Sum | Op::Prod if LONG_DOUBLE_ARITHMETIC => Some(Special::LongDouble(op)),
                _ => None,
            },
            "MPI_C_LONG_DOUBLE_COMPLEX" | "MPI_CXX_LONG_DOUBLE_COMPLEX" => match op {
                Op::Sum | Op::Prod if LONG_DOUBLE_ARITHMETIC => {
                    Some(Special::LongDoubleComplex(op))
                }
                _ => None,
            },
            _ if t.class == Class::Complex && op == Op::Prod => match t.size {
                8 => Some(Special::ComplexProd32),
                16 => Some(Special::ComplexProd64),
                _ => None,
            },
            _ => None,
        }
    }

    /// Bytes of one element.
    pub fn size(self) -> usize {
        match self {
            Special::LongDouble(_) | Special::ComplexProd64 => 16,
            Special::LongDoubleComplex(_) => 32,
            Special::ComplexProd32 => 8,
        }
    }

    /// `a op b` for one element of `N` (= [`Special::size`]) bytes, `a` from the lower ranks.
    pub fn combine<const N: usize>(self, a: [u8; N], b: [u8; N]) -> [u8; N] {
        let mut out = [0u8; N];
        match self {
            Special::LongDouble(op) => {
                let r = long_double(op, ld(&a[..16]), ld(&b[..16]));
                out[..16].copy_from_slice(&r);
            }
            Special::LongDoubleComplex(op) => {
                let p = |x: &[u8], i: usize| Ld(ld(&x[16 * i..]));
                let (re, im) = match op {
                    Op::Prod => complex_mul(p(&a, 0), p(&a, 1), p(&b, 0), p(&b, 1)),
                    _ => (p(&a, 0).add(p(&b, 0)), p(&a, 1).add(p(&b, 1))),
                };
                out[..16].copy_from_slice(&re.0);
                out[16..32].copy_from_slice(&im.0);
            }
            Special::ComplexProd32 => {
                let f = |x: &[u8], i: usize| {
                    f32::from_ne_bytes(x[4 * i..4 * i + 4].try_into().expect("4 bytes"))
                };
                let (re, im) = complex_mul(f(&a, 0), f(&a, 1), f(&b, 0), f(&b, 1));
                out[..4].copy_from_slice(&re.to_ne_bytes());
                out[4..8].copy_from_slice(&im.to_ne_bytes());
            }
            Special::ComplexProd64 => {
                let f = |x: &[u8], i: usize| {
                    f64::from_ne_bytes(x[8 * i..8 * i + 8].try_into().expect("8 bytes"))
                };
                let (re, im) = complex_mul(f(&a, 0), f(&a, 1), f(&b, 0), f(&b, 1));
                out[..8].copy_from_slice(&re.to_ne_bytes());
                out[8..16].copy_from_slice(&im.to_ne_bytes());
            }
        }
        out
    }
}

/// The 16 bytes of a `long double` at the start of `b`.
fn ld(b: &[u8]) -> [u8; 16] {
    b[..16].try_into().expect("16 bytes")
}

/// The arithmetic of C's complex multiplication, on one real type.
trait Real: Copy {
    const ZERO: Self;
    const ONE: Self;
    const INFINITY: Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn is_nan(self) -> bool;
    fn is_infinite(self) -> bool;
    /// `self`'s magnitude with `sign`'s sign.
    fn copysign(self, sign: Self) -> Self;
}

macro_rules! ieee_real {
    ($($t:ty),*) => {$(
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const INFINITY: Self = <$t>::INFINITY;
            fn add(self, o: Self) -> Self { self + o }
            fn sub(self, o: Self) -> Self { self - o }
            fn mul(self, o: Self) -> Self { self * o }
            fn is_nan(self) -> bool { <$t>::is_nan(self) }
            fn is_infinite(self) -> bool { <$t>::is_infinite(self) }
            fn copysign(self, sign: Self) -> Self { <$t>::copysign(self, sign) }
        }
    )*};
}
ieee_real!(f32, f64);

/// A C `long double` (x87 extended) as its 16 bytes: the significand with its explicit
/// integer bit in bytes 0..8, the exponent in the low 15 bits of bytes 8..10, the sign at
/// the top of byte 9.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ld([u8; 16]);

impl Ld {
    const fn from_parts(exponent: u16, significand: u64) -> Ld {
        let mut b = [0u8; 16];
        let s = significand.to_le_bytes();
        let e = exponent.to_le_bytes();
        let mut i = 0;
        while i < 8 {
            b[i] = s[i];
            i += 1;
        }
        b[8] = e[0];
        b[9] = e[1];
        Ld(b)
    }

    fn exponent(self) -> u16 {
        u16::from_le_bytes([self.0[8], self.0[9]]) & 0x7fff
    }

    /// The significand without its integer bit.
    fn fraction(self) -> u64 {
        u64::from_le_bytes(self.0[..8].try_into().expect("8 bytes")) << 1
    }
}

impl Real for Ld {
    const ZERO: Self = Ld([0; 16]);
    const ONE: Self = Ld::from_parts(0x3fff, 1 << 63);
    const INFINITY: Self = Ld::from_parts(0x7fff, 1 << 63);
    fn add(self, o: Self) -> Self {
        Ld(x87::add(self.0, o.0))
    }
    fn sub(self, o: Self) -> Self {
        Ld(x87::sub(self.0, o.0))
    }
    fn mul(self, o: Self) -> Self {
        Ld(x87::mul(self.0, o.0))
    }
    fn is_nan(self) -> bool {
        self.exponent() == 0x7fff && self.fraction() != 0
    }
    fn is_infinite(self) -> bool {
        self.exponent() == 0x7fff && self.fraction() == 0
    }
    fn copysign(mut self, sign: Self) -> Self {
        self.0[9] = (self.0[9] & 0x7f) | (sign.0[9] & 0x80);
        self
    }
}

/// `(a + bi)(c + di)` as C computes it (ISO C Annex G.5.1's multiplication, which GCC and
/// Clang implement): `(ac - bd) + (ad + bc)i`, each product rounded (no contraction into a
/// fused multiply-add); when both parts come out NaN, the infinities that an infinite
/// operand or an overflow should give are recovered.
fn complex_mul<T: Real>(mut a: T, mut b: T, mut c: T, mut d: T) -> (T, T) {
    let (ac, bd, ad, bc) = (a.mul(c), b.mul(d), a.mul(d), b.mul(c));
    let (x, y) = (ac.sub(bd), ad.add(bc));
    if !(x.is_nan() && y.is_nan()) {
        return (x, y);
    }
    // A NaN becomes a zero of its sign; an infinite factor's parts become a unit "box" of
    // their signs.
    let zero_nan = |v: T| if v.is_nan() { T::ZERO.copysign(v) } else { v };
    let boxed = |v: T| if v.is_infinite() { T::ONE } else { T::ZERO }.copysign(v);
    let mut recalc = false;
    if a.is_infinite() || b.is_infinite() {
        (a, b, c, d) = (boxed(a), boxed(b), zero_nan(c), zero_nan(d));
        recalc = true;
    }
    if c.is_infinite() || d.is_infinite() {
        (a, b, c, d) = (zero_nan(a), zero_nan(b), boxed(c), boxed(d));
        recalc = true;
    }
    if !recalc && [ac, bd, ad, bc].iter().any(|v| v.is_infinite()) {
        (a, b, c, d) = (zero_nan(a), zero_nan(b), zero_nan(c), zero_nan(d));
        recalc = true;
    }
    if !recalc {
        return (x, y);
    }
    (
        T::INFINITY.mul(a.mul(c).sub(b.mul(d))),
        T::INFINITY.mul(a.mul(d).add(b.mul(c))),
    )
}

/// `a op b` on two `long double`s.
fn long_double(op: Op, a: [u8; 16], b: [u8; 16]) -> [u8; 16] {
    use std::cmp::Ordering::{Greater, Less};
    match op {
        Op::Sum => x87::add(a, b),
        Op::Prod => x87::mul(a, b),
        // `a > b ? a : b` (MPICH's MAX, C's own idiom: on a tie, -0 and +0, the right
        // operand); a NaN loses to a number, as with fmaxl/fminl and rmca's f64 MAX/MIN.
        _ => {
            let better = if op == Op::Max { Greater } else { Less };
            match super::op::long_double_cmp(&a, &b) {
                Some(o) if o == better => a,
                Some(_) => b,
                None if super::op::long_double_cmp(&a, &a).is_none() => b,
                None => a,
            }
        }
    }
}

/// x87 arithmetic on `long double`s held as their 16 bytes (the 80-bit value in the first
/// 10, as C stores it).
#[cfg(target_arch = "x86_64")]
mod x87 {
    use std::arch::asm;

    /// A function computing `a OP b` by the x87 instruction `$insn`, which pops `a` (st(1))
    /// OP `b` (st(0)) into st(0).
    macro_rules! binop {
        ($(#[$doc:meta])* $name:ident, $insn:literal) => {
            $(#[$doc])*
            pub fn $name(a: [u8; 16], b: [u8; 16]) -> [u8; 16] {
                let mut out = [0u8; 16];
                // SAFETY: the instructions read 10 bytes at `a` and `b` and write 10 at `out`,
                // all 16-byte locals; the x87 stack, empty at entry (the x86-64 calling
                // convention), is declared clobbered and left empty (two loads, one popping
                // operation, one popping store).
                unsafe {
                    asm!(
                        "fld tbyte ptr [{a}]",
                        "fld tbyte ptr [{b}]",
                        $insn,
                        "fstp tbyte ptr [{out}]",
                        a = in(reg) a.as_ptr(),
                        b = in(reg) b.as_ptr(),
                        out = in(reg) out.as_mut_ptr(),
                        out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                        out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                        options(nostack),
                    );
                }
                out
            }
        };
    }

    binop!(
        /// `a + b`.
        add,
        "faddp st(1), st(0)"
    );
    binop!(
        /// `a * b`.
        mul,
        "fmulp st(1), st(0)"
    );
    binop!(
        /// `a - b` (Intel syntax: `fsubp st(1), st(0)` leaves st(1) - st(0), here a - b).
        sub,
        "fsubp st(1), st(0)"
    );
}

/// Never reached: [`Special::of`] offers no `long double` arithmetic off x86-64.
#[cfg(not(target_arch = "x86_64"))]
mod x87 {
    pub fn add(_: [u8; 16], _: [u8; 16]) -> [u8; 16] {
        unreachable!("long double arithmetic is offered on x86-64 only")
    }
    pub fn mul(_: [u8; 16], _: [u8; 16]) -> [u8; 16] {
        unreachable!("long double arithmetic is offered on x86-64 only")
    }
    pub fn sub(_: [u8; 16], _: [u8; 16]) -> [u8; 16] {
        unreachable!("long double arithmetic is offered on x86-64 only")
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The x87 bytes of `x` (a normal f64 or zero: exact).
    fn ldbl(x: f64) -> [u8; 16] {
        let bits = x.to_bits();
        let sign = (bits >> 63) as u16;
        let exp = ((bits >> 52) & 0x7ff) as u16;
        let frac = bits & ((1 << 52) - 1);
        let (e, m) = if exp == 0 {
            (0, 0)
        } else {
            (exp + (16383 - 1023), (1u64 << 63) | (frac << 11))
        };
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&m.to_ne_bytes());
        out[8..10].copy_from_slice(&((sign << 15) | e).to_ne_bytes());
        out
    }

    /// Sums and products of values whose results are exact in 64 significand bits, and one
    /// that only extended precision holds (1 + 2^-60, which rounds to 1 in f64).
    #[test]
    fn x87_arithmetic() {
        assert_eq!(x87::add(ldbl(1.5), ldbl(-4.0)), ldbl(-2.5));
        assert_eq!(x87::mul(ldbl(1.5), ldbl(-4.0)), ldbl(-6.0));
        let tiny = x87::add(ldbl(1.0), ldbl(2f64.powi(-60)));
        assert_ne!(tiny, ldbl(1.0));
        assert_eq!(x87::add(tiny, ldbl(-1.0)), ldbl(2f64.powi(-60)));
        // The order of the subtraction shows.
        assert_eq!(x87::sub(ldbl(1.0), ldbl(4.0)), ldbl(-3.0));
        let (re, im) = complex_mul(Ld(ldbl(1.0)), Ld(ldbl(2.0)), Ld(ldbl(3.0)), Ld(ldbl(4.0)));
        assert_eq!((re, im), (Ld(ldbl(-5.0)), Ld(ldbl(10.0))));
        assert_eq!(Ld::ONE, Ld(ldbl(1.0)));
        assert!(Ld::INFINITY.is_infinite() && !Ld::INFINITY.is_nan());
    }

    #[test]
    fn long_double_max_min() {
        let max = Special::LongDouble(Op::Max);
        let min = Special::LongDouble(Op::Min);
        assert_eq!(max.combine(ldbl(-1.0), ldbl(2.0)), ldbl(2.0));
        assert_eq!(min.combine(ldbl(-1.0), ldbl(2.0)), ldbl(-1.0));
        // A tie keeps the right operand.
        assert_eq!(max.combine(ldbl(0.0), ldbl(-0.0)), ldbl(-0.0));
        assert_eq!(min.combine(ldbl(-0.0), ldbl(0.0)), ldbl(0.0));
        let mut nan = ldbl(1.0);
        // Exponent all ones, a fraction bit set beside the integer bit.
        nan[9] |= 0x7f;
        nan[8] = 0xff;
        nan[0] = 1;
        assert_eq!(max.combine(nan, ldbl(3.0)), ldbl(3.0));
        assert_eq!(min.combine(ldbl(3.0), nan), ldbl(3.0));
    }

    /// Annex G: an infinite factor times a finite nonzero one is infinite, where the plain
    /// formula gives NaN + NaN i; NaN parts that are not both NaN stay as they are.
    #[test]
    fn complex_infinities_recovered() {
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        assert_eq!(complex_mul(inf, nan, 2.0, 3.0), (inf, inf));
        assert_eq!(complex_mul(nan, 1e300, 1e300, 1e300), (-inf, inf));
        let (x, y) = complex_mul(inf, inf, 1.0, 1.0);
        assert!(x.is_nan() && y == inf);
        let (x, y) = complex_mul(Ld(ldbl(2.0)), Ld(ldbl(3.0)), Ld::INFINITY, Ld(ldbl(0.0)));
        assert_eq!((x, y), (Ld::INFINITY, Ld::INFINITY));
    }

    #[test]
    fn complex_products() {
        let c32 = |re: f32, im: f32| {
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&re.to_ne_bytes());
            b[4..].copy_from_slice(&im.to_ne_bytes());
            b
        };
        assert_eq!(
            Special::ComplexProd32.combine(c32(1.0, 2.0), c32(3.0, 4.0)),
            c32(-5.0, 10.0)
        );
        let mut a = [0u8; 32];
        a[..16].copy_from_slice(&ldbl(1.0));
        a[16..].copy_from_slice(&ldbl(2.0));
        let mut b = [0u8; 32];
        b[..16].copy_from_slice(&ldbl(3.0));
        b[16..].copy_from_slice(&ldbl(4.0));
        let p = Special::LongDoubleComplex(Op::Prod).combine(a, b);
        assert_eq!((&p[..16], &p[16..]), (&ldbl(-5.0)[..], &ldbl(10.0)[..]));
        let s = Special::LongDoubleComplex(Op::Sum).combine(a, b);
        assert_eq!((&s[..16], &s[16..]), (&ldbl(4.0)[..], &ldbl(6.0)[..]));
    }
}
