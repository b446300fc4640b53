//! The predefined datatypes: their sizes on this platform (LP64) and which reductions apply.

use crate::abi::Handle;

/// The Rust element type a reduction over a datatype runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
}

/// The MPI class of a datatype, which decides the operations allowed on it (MPI 5.0
/// section 6.9.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// C and Fortran integers.
    Integer,
    /// Floating point.
    Float,
    /// `MPI_C_BOOL`, `MPI_CXX_BOOL`, and Fortran's `MPI_LOGICAL` (`LOGICALn`): nonzero is
    /// true, results are 1 or 0 (gfortran's `.TRUE.` and `.FALSE.`).
    Logical,
    /// `MPI_BYTE`.
    Byte,
    /// Complex numbers (sums and products).
    Complex,
    /// Everything else (characters, pairs for MINLOC/MAXLOC, `MPI_PACKED`, long double).
    Other,
}

/// A predefined datatype.
#[derive(Clone, Copy, Debug)]
pub struct Datatype {
    /// `MPI_INT` and so on.
    pub name: &'static str,
    /// Size in bytes: the data one element carries.
    pub size: usize,
    /// Extent in bytes: `size`, except for the value-index pairs whose C struct is padded
    /// (`MPI_DOUBLE_INT`: 12 bytes of data in 16).
    pub extent: usize,
    pub class: Class,
    /// The element type of reductions (integers, floats, booleans and bytes).
    pub elem: Option<Elem>,
}

const fn ty(name: &'static str, size: usize, class: Class, elem: Option<Elem>) -> Datatype {
    Datatype {
        name,
        size,
        extent: size,
        class,
        elem,
    }
}

/// A value-index pair `struct { value; int index; }` of a `value` of `vsize` bytes: its
/// size is the members' (MPI counts no padding), its extent the C struct's.
const fn pair(name: &'static str, vsize: usize) -> Datatype {
    let align = if vsize > 4 { vsize } else { 4 };
    Datatype {
        name,
        size: vsize + 4,
        extent: (vsize + 4).div_ceil(align) * align,
        class: Class::Other,
        elem: None,
    }
}

impl Datatype {
    /// For a C value-index pair type (`MPI_DOUBLE_INT`...; not the Fortran ones, two
    /// values of one type): (value size, byte offset of the `int` index in the C struct).
    pub const fn pair_layout(&self) -> Option<(usize, usize)> {
        if !self.is_pair() {
            return None;
        }
        let vsize = self.size - 4;
        let at = if vsize < 4 { 4 } else { vsize };
        Some((vsize, at))
    }

    const fn is_pair(&self) -> bool {
        matches!(
            self.name.as_bytes(),
            b"MPI_FLOAT_INT"
                | b"MPI_DOUBLE_INT"
                | b"MPI_LONG_INT"
                | b"MPI_2INT"
                | b"MPI_SHORT_INT"
                | b"MPI_LONG_DOUBLE_INT"
        )
    }
}

/// The predefined datatype behind `handle`, if it is one rmca knows.
#[inline]
pub const fn lookup(handle: Handle) -> Option<Datatype> {
    use Class::*;
    use Elem::*;
    let t = match handle {
        0x201 => ty("MPI_AINT", 8, Integer, Some(I64)),
        0x202 => ty("MPI_COUNT", 8, Integer, Some(I64)),
        0x203 => ty("MPI_OFFSET", 8, Integer, Some(I64)),
        0x207 => ty("MPI_PACKED", 1, Other, None),
        0x208 => ty("MPI_SHORT", 2, Integer, Some(I16)),
        0x209 => ty("MPI_INT", 4, Integer, Some(I32)),
        0x20a => ty("MPI_LONG", 8, Integer, Some(I64)),
        0x20b => ty("MPI_LONG_LONG", 8, Integer, Some(I64)),
        0x20c => ty("MPI_UNSIGNED_SHORT", 2, Integer, Some(U16)),
        0x20d => ty("MPI_UNSIGNED", 4, Integer, Some(U32)),
        0x20e => ty("MPI_UNSIGNED_LONG", 8, Integer, Some(U64)),
        0x20f => ty("MPI_UNSIGNED_LONG_LONG", 8, Integer, Some(U64)),
        0x210 => ty("MPI_FLOAT", 4, Float, Some(F32)),
        0x212 => ty("MPI_C_FLOAT_COMPLEX", 8, Complex, None),
        0x213 => ty("MPI_CXX_FLOAT_COMPLEX", 8, Complex, None),
        0x214 => ty("MPI_DOUBLE", 8, Float, Some(F64)),
        0x216 => ty("MPI_C_DOUBLE_COMPLEX", 16, Complex, None),
        0x217 => ty("MPI_CXX_DOUBLE_COMPLEX", 16, Complex, None),
        0x218 => ty("MPI_LOGICAL", 4, Logical, Some(U32)),
        0x219 => ty("MPI_INTEGER", 4, Integer, Some(I32)),
        0x21a => ty("MPI_REAL", 4, Float, Some(F32)),
        0x21b => ty("MPI_COMPLEX", 8, Complex, None),
        0x21c => ty("MPI_DOUBLE_PRECISION", 8, Float, Some(F64)),
        0x21d => ty("MPI_DOUBLE_COMPLEX", 16, Complex, None),
        0x21e => ty("MPI_CHARACTER", 1, Other, None),
        0x220 => ty("MPI_LONG_DOUBLE", 16, Other, None),
        0x224 => ty("MPI_C_LONG_DOUBLE_COMPLEX", 32, Complex, None),
        0x225 => ty("MPI_CXX_LONG_DOUBLE_COMPLEX", 32, Complex, None),
        0x228 => pair("MPI_FLOAT_INT", 4),
        0x229 => pair("MPI_DOUBLE_INT", 8),
        0x22a => pair("MPI_LONG_INT", 8),
        0x22b => pair("MPI_2INT", 4),
        0x22c => pair("MPI_SHORT_INT", 2),
        0x22d => pair("MPI_LONG_DOUBLE_INT", 16),
        0x230 => ty("MPI_2REAL", 8, Other, None),
        0x231 => ty("MPI_2DOUBLE_PRECISION", 16, Other, None),
        0x232 => ty("MPI_2INTEGER", 8, Other, None),
        0x238 => ty("MPI_C_BOOL", 1, Logical, Some(U8)),
        0x239 => ty("MPI_CXX_BOOL", 1, Logical, Some(U8)),
        0x23c => ty("MPI_WCHAR", 4, Other, None),
        0x240 => ty("MPI_INT8_T", 1, Integer, Some(I8)),
        0x241 => ty("MPI_UINT8_T", 1, Integer, Some(U8)),
        // MPI_CHAR is a printable character, not an integer: no reductions.
        0x243 => ty("MPI_CHAR", 1, Other, None),
        0x244 => ty("MPI_SIGNED_CHAR", 1, Integer, Some(I8)),
        0x245 => ty("MPI_UNSIGNED_CHAR", 1, Integer, Some(U8)),
        0x247 => ty("MPI_BYTE", 1, Byte, Some(U8)),
        0x248 => ty("MPI_INT16_T", 2, Integer, Some(I16)),
        0x249 => ty("MPI_UINT16_T", 2, Integer, Some(U16)),
        0x250 => ty("MPI_INT32_T", 4, Integer, Some(I32)),
        0x251 => ty("MPI_UINT32_T", 4, Integer, Some(U32)),
        0x258 => ty("MPI_INT64_T", 8, Integer, Some(I64)),
        0x259 => ty("MPI_UINT64_T", 8, Integer, Some(U64)),
        0x2c0 => ty("MPI_LOGICAL1", 1, Logical, Some(U8)),
        0x2c1 => ty("MPI_INTEGER1", 1, Integer, Some(I8)),
        0x2c8 => ty("MPI_LOGICAL2", 2, Logical, Some(U16)),
        0x2c9 => ty("MPI_INTEGER2", 2, Integer, Some(I16)),
        0x2ca => ty("MPI_REAL2", 2, Other, None),
        0x2d0 => ty("MPI_LOGICAL4", 4, Logical, Some(U32)),
        0x2d1 => ty("MPI_INTEGER4", 4, Integer, Some(I32)),
        0x2d2 => ty("MPI_REAL4", 4, Float, Some(F32)),
        0x2d3 => ty("MPI_COMPLEX4", 4, Complex, None),
        0x2d8 => ty("MPI_LOGICAL8", 8, Logical, Some(U64)),
        0x2d9 => ty("MPI_INTEGER8", 8, Integer, Some(I64)),
        0x2da => ty("MPI_REAL8", 8, Float, Some(F64)),
        0x2db => ty("MPI_COMPLEX8", 8, Complex, None),
        0x2e0 => ty("MPI_LOGICAL16", 16, Other, None),
        0x2e1 => ty("MPI_INTEGER16", 16, Other, None),
        0x2e2 => ty("MPI_REAL16", 16, Other, None),
        0x2e3 => ty("MPI_COMPLEX16", 16, Complex, None),
        0x2eb => ty("MPI_COMPLEX32", 32, Complex, None),
        _ => return None,
    };
    Some(t)
}

/// The first handle of the predefined datatypes' range (MPI 5.0 ABI: 0x200..0x300).
const PREDEFINED_BASE: Handle = 0x200;

/// What the per-message and per-reduction fast paths need of a predefined datatype, in one
/// table by handle - [`PREDEFINED_BASE`], made from [`lookup`] at compile time: one load is
/// cheaper than building the whole [`Datatype`] through `lookup`'s jump table.
#[derive(Clone, Copy)]
struct Fast {
    /// The size when the elements are one run of bytes (0: no datatype, or a padded pair):
    /// the point-to-point calls' [`predefined_size`].
    size: u8,
    /// The element type and class of a number type: the collectives' [`number_type`].
    number: Option<(Elem, Class)>,
}

const FAST: [Fast; 0x100] = {
    let mut table = [Fast {
        size: 0,
        number: None,
    }; 0x100];
    let mut i = 0;
    while i < table.len() {
        if let Some(t) = lookup(PREDEFINED_BASE + i) {
            assert!(t.size > 0 && t.extent <= u8::MAX as usize);
            if t.size == t.extent {
                table[i].size = t.size as u8;
            }
            if let Some(e) = t.elem {
                table[i].number = Some((e, t.class));
            }
        }
        i += 1;
    }
    table
};

/// The size in bytes of predefined datatype `handle`; `None` if `handle` is not one (a
/// derived datatype, or not a datatype) or is a pair type with padding (not one run).
#[inline(always)]
pub fn predefined_size(handle: Handle) -> Option<usize> {
    match FAST.get(handle.wrapping_sub(PREDEFINED_BASE)) {
        Some(f) if f.size > 0 => Some(usize::from(f.size)),
        _ => None,
    }
}

/// The element type reductions run on and the class of predefined datatype `handle`, when
/// it is a number type (integers, floats, booleans, bytes); `None` otherwise (derived
/// datatypes, pairs, characters, long double, complex, invalid handles).
#[inline(always)]
pub fn number_type(handle: Handle) -> Option<(Elem, Class)> {
    FAST.get(handle.wrapping_sub(PREDEFINED_BASE))?.number
}

/// A predefined operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpInfo {
    pub name: &'static str,
    /// The rmca operation, or `None` for the predefined ones rmca does not reduce with yet.
    pub op: Option<rmca::coll::Op>,
}

/// The predefined operation behind `handle`.
pub fn lookup_op(handle: Handle) -> Option<OpInfo> {
    use rmca::coll::Op;
    let (name, op) = match handle {
        0x21 => ("MPI_SUM", Some(Op::Sum)),
        0x22 => ("MPI_MIN", Some(Op::Min)),
        0x23 => ("MPI_MAX", Some(Op::Max)),
        0x24 => ("MPI_PROD", Some(Op::Prod)),
        0x28 => ("MPI_BAND", Some(Op::BitAnd)),
        0x29 => ("MPI_BOR", Some(Op::BitOr)),
        0x2a => ("MPI_BXOR", Some(Op::BitXor)),
        0x30 => ("MPI_LAND", Some(Op::LogicalAnd)),
        0x31 => ("MPI_LOR", Some(Op::LogicalOr)),
        0x32 => ("MPI_LXOR", Some(Op::LogicalXor)),
        0x38 => ("MPI_MINLOC", None),
        0x39 => ("MPI_MAXLOC", None),
        0x3c => ("MPI_REPLACE", None),
        0x3d => ("MPI_NO_OP", None),
        _ => return None,
    };
    Some(OpInfo { name, op })
}

/// Does MPI define `op` on datatypes of `class`? (MPI 5.0 section 6.9.2.)
pub fn op_allowed(op: rmca::coll::Op, class: Class) -> bool {
    use rmca::coll::Op;
    match op {
        Op::Min | Op::Max => matches!(class, Class::Integer | Class::Float),
        Op::Sum | Op::Prod => matches!(class, Class::Integer | Class::Float | Class::Complex),
        Op::LogicalAnd | Op::LogicalOr | Op::LogicalXor => {
            matches!(class, Class::Integer | Class::Logical)
        }
        Op::BitAnd | Op::BitOr | Op::BitXor => matches!(class, Class::Integer | Class::Byte),
        // Defined on the value-index pair types (MPI_2INT, MPI_DOUBLE_INT...), which this
        // library does not offer yet: MPI_MINLOC and MPI_MAXLOC map to no rmca op above.
        Op::MinLoc | Op::MaxLoc => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_the_c_types_of_this_platform() {
        use std::ffi::{c_int, c_long, c_longlong, c_short};
        assert_eq!(lookup(0x208).unwrap().size, size_of::<c_short>());
        assert_eq!(lookup(0x209).unwrap().size, size_of::<c_int>());
        assert_eq!(lookup(0x20a).unwrap().size, size_of::<c_long>());
        assert_eq!(lookup(0x20b).unwrap().size, size_of::<c_longlong>());
        assert_eq!(lookup(0x201).unwrap().size, size_of::<isize>());
    }

    #[test]
    fn the_fast_table_agrees_with_lookup() {
        for h in 0..0x400 {
            assert_eq!(
                predefined_size(h),
                lookup(h).filter(|t| t.size == t.extent).map(|t| t.size),
                "handle {h:#x}"
            );
            assert_eq!(
                number_type(h),
                lookup(h).and_then(|t| Some((t.elem?, t.class))),
                "handle {h:#x}"
            );
        }
        assert_eq!(predefined_size(usize::MAX), None);
        assert_eq!(number_type(usize::MAX), None);
        assert_eq!(number_type(0x209), Some((Elem::I32, Class::Integer)));
    }

    #[test]
    fn pair_types_count_no_padding() {
        #[repr(C)]
        struct Di(f64, i32);
        #[repr(C)]
        struct Si(i16, i32);
        let di = lookup(0x229).unwrap();
        assert_eq!((di.size, di.extent), (12, size_of::<Di>()));
        assert_eq!(di.pair_layout(), Some((8, 8)));
        let si = lookup(0x22c).unwrap();
        assert_eq!((si.size, si.extent), (6, size_of::<Si>()));
        assert_eq!(si.pair_layout(), Some((2, std::mem::offset_of!(Si, 1))));
        let ldi = lookup(0x22d).unwrap();
        assert_eq!((ldi.size, ldi.extent), (20, 32));
        assert_eq!(lookup(0x22b).unwrap().extent, 8);
        assert_eq!(predefined_size(0x229), None);
        assert_eq!(predefined_size(0x22b), Some(8));
        assert_eq!(lookup(0x209).unwrap().pair_layout(), None);
    }

    #[test]
    fn reductions_follow_the_standard_table() {
        use rmca::coll::Op;
        assert!(op_allowed(Op::Sum, Class::Integer));
        assert!(!op_allowed(Op::Sum, Class::Byte));
        assert!(op_allowed(Op::BitXor, Class::Byte));
        assert!(!op_allowed(Op::BitAnd, Class::Float));
        assert!(op_allowed(Op::LogicalOr, Class::Logical));
        assert!(!op_allowed(Op::Max, Class::Logical));
        assert!(lookup(0x2ff).is_none());
        // Fortran LOGICALs reduce with .AND./.OR./.NEQV. as integers of their size.
        for (h, elem) in [
            (0x218, Elem::U32),
            (0x2c0, Elem::U8),
            (0x2c8, Elem::U16),
            (0x2d8, Elem::U64),
        ] {
            let t = lookup(h).unwrap();
            assert_eq!(
                (t.class, t.elem),
                (Class::Logical, Some(elem)),
                "{}",
                t.name
            );
        }
    }
}
