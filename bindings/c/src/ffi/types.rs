//! Derived datatypes: the `MPI_Type_*` constructors and queries, their handle table, and how
//! the calls move data of any datatype.
//!
//! The layouts are `rmca::Datatype`s (a list of byte runs when small, the constructors'
//! nested blocks when large). A call whose data is one run of bytes uses the program's
//! buffer in place, as for the predefined types; any other layout is packed into a buffer of
//! the library's own before a send and unpacked from one after a receive (for a non-blocking
//! receive, when the request completes). Every constructor has an `int` form and a large
//! count (`_c`) form, which share one implementation generic over the C argument types
//! ([`Arg`]), so that `MPI_Type_get_contents` returns each argument in the array the
//! standard puts it in.
#![allow(non_snake_case)]

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};
use std::rc::Rc;

use super::{call, put};
use crate::abi::*;
use crate::dtype::{self, Class};
use crate::state::{self, Confined, MpiError, MpiResult};
use rmca_mpi_export::export;

/// Handles of derived datatypes: this plus an index (between the error handlers' range and
/// the requests').
pub const TYPE_BASE: Handle = DYNAMIC_BASE * 3;
/// Derived datatypes alive at once.
const MAX_TYPES: usize = DYNAMIC_BASE;
/// The longest basic-element signature kept per type (`MPI_Get_elements` on a partial
/// instance and the external32 conversion walk it); longer ones are not kept and those
/// calls are refused.
const MAX_SIGNATURE: usize = 1 << 16;

/// `MPI_ORDER_C` and `MPI_ORDER_FORTRAN` (standard ABI values).
pub const MPI_ORDER_C: c_int = 0xC;
pub const MPI_ORDER_FORTRAN: c_int = 0xF;

/// The combiners of `MPI_Type_get_envelope` (standard ABI values).
pub mod combiner {
    use std::ffi::c_int;
    pub const NAMED: c_int = 101;
    pub const DUP: c_int = 102;
    pub const CONTIGUOUS: c_int = 103;
    pub const VECTOR: c_int = 104;
    pub const HVECTOR: c_int = 105;
    pub const INDEXED: c_int = 106;
    pub const HINDEXED: c_int = 107;
    pub const INDEXED_BLOCK: c_int = 108;
    pub const HINDEXED_BLOCK: c_int = 109;
    pub const STRUCT: c_int = 110;
    pub const SUBARRAY: c_int = 111;
    pub const DARRAY: c_int = 112;
    pub const F90_REAL: c_int = 113;
    pub const F90_COMPLEX: c_int = 114;
    pub const F90_INTEGER: c_int = 115;
    pub const RESIZED: c_int = 116;
}

/// How a derived datatype was made: its combiner and the constructor's arguments, each in
/// the array `MPI_Type_get_contents` returns it in (MPI 5.0 section 5.1.13).
#[derive(Clone, Default)]
pub struct Contents {
    pub combiner: c_int,
    pub ints: Vec<c_int>,
    pub addrs: Vec<isize>,
    pub large: Vec<i64>,
    pub types: Vec<Ty>,
}

/// A derived datatype.
#[derive(Clone)]
pub struct Derived {
    layout: rmca::Datatype,
    /// Shared by every handle of the type (`MPI_Type_get_contents` hands out more).
    committed: Rc<Cell<bool>>,
    /// The predefined type all its data is made of, when there is one (reductions).
    base: Option<Handle>,
    /// Basic elements of one instance in type-map order, as runs of (predefined handle,
    /// count); `None` when longer than [`MAX_SIGNATURE`].
    signature: Option<Vec<(Handle, usize)>>,
    pub contents: Rc<Contents>,
    /// `MPI_Type_set_name`'s.
    pub name: RefCell<String>,
    /// Predefined in MPI's eyes (the `MPI_Type_create_f90_*` types): never freed.
    pub permanent: bool,
}

/// The derived datatypes, by handle less [`TYPE_BASE`] (process-wide: see [`Confined`]).
static TYPES: Confined<Vec<Option<Rc<Derived>>>> = Confined::new("derived datatypes");

/// A datatype as the calls see it.
#[derive(Clone)]
pub enum Ty {
    Predefined(Handle, dtype::Datatype),
    Derived(Rc<Derived>),
}

pub(crate) fn type_error(msg: impl Into<String>) -> MpiError {
    MpiError::new(MPI_ERR_TYPE, msg)
}

fn bad_type(h: Handle) -> MpiError {
    let what = if h == MPI_DATATYPE_NULL {
        "MPI_DATATYPE_NULL".to_owned()
    } else {
        format!("{h:#x}")
    };
    type_error(format!(
        "invalid datatype {what}: not a predefined datatype or a derived one created and not freed"
    ))
}

/// The rmca layout of `size` bytes aligned as a C scalar of that size.
fn scalar(size: usize, align: usize) -> rmca::Datatype {
    use rmca::Datatype as D;
    match (size, align) {
        (1, _) => D::of::<u8>(),
        (2, _) => D::of::<u16>(),
        (4, _) => D::of::<u32>(),
        (8, 4) => D::of::<[u32; 2]>(),
        (8, _) => D::of::<u64>(),
        (16, 8) => D::of::<[u64; 2]>(),
        (16, _) => D::of::<u128>(),
        (32, 8) => D::of::<[u64; 4]>(),
        _ => D::of::<[u128; 2]>(),
    }
}

/// The rmca layout of a predefined type: its size, aligned as the C type (the alignment
/// rounds the extent of a structure, as C pads the struct); a value-index pair is its two
/// members with the C struct's padding between or after them.
fn predefined_layout(t: &dtype::Datatype) -> rmca::Datatype {
    if let Some((vsize, at)) = t.pair_layout() {
        let members = [scalar(vsize, vsize.min(16)), scalar(4, 4)];
        let s = rmca::Datatype::structure(&[1, 1], &[0, at as isize], &members)
            .and_then(|s| rmca::Datatype::resized(&s, 0, t.extent as isize));
        // Two scalars at fixed small offsets: nothing to overflow.
        return s.expect("a pair type's layout");
    }
    let align = match t.name {
        "MPI_2REAL" | "MPI_2INTEGER" => 4,
        "MPI_2DOUBLE_PRECISION" => 8,
        _ if t.class == Class::Complex => (t.size / 2).max(1),
        _ => t.size.min(16),
    };
    scalar(t.size, align)
}

/// The basic elements of a predefined type, as runs of (predefined handle, count): a pair
/// is its two members.
fn predefined_signature(h: Handle, t: &dtype::Datatype) -> Vec<(Handle, usize)> {
    let v = match h {
        0x228 => 0x210, // MPI_FLOAT_INT: MPI_FLOAT, MPI_INT
        0x229 => 0x214, // MPI_DOUBLE_INT
        0x22a => 0x20a, // MPI_LONG_INT
        0x22b => return vec![(0x209, 2)],
        0x22c => 0x208,                   // MPI_SHORT_INT
        0x22d => 0x220,                   // MPI_LONG_DOUBLE_INT
        0x230 => return vec![(0x21a, 2)], // MPI_2REAL
        0x231 => return vec![(0x21c, 2)], // MPI_2DOUBLE_PRECISION
        0x232 => return vec![(0x219, 2)], // MPI_2INTEGER
        _ if t.size == 0 => return Vec::new(),
        _ => return vec![(h, 1)],
    };
    vec![(v, 1), (MPI_INT_HANDLE, 1)]
}

/// `MPI_INT`.
const MPI_INT_HANDLE: Handle = 0x209;

/// The size of basic element `h` (a predefined handle from a signature).
fn elem_size(h: Handle) -> usize {
    dtype::lookup(h).map_or(0, |t| t.size)
}

impl Ty {
    /// The datatype behind `h`, committed or not. Inlined: on the per-message path (through
    /// [`Ty::for_use`]), where a call returning the `Ty` through memory cost 25 instructions.
    #[inline(always)]
    pub fn lookup(h: Handle) -> MpiResult<Ty> {
        if let Some(t) = dtype::lookup(h) {
            return Ok(Ty::Predefined(h, t));
        }
        let i = h
            .checked_sub(TYPE_BASE)
            .filter(|&i| i < MAX_TYPES)
            .ok_or_else(|| bad_type(h))?;
        TYPES
            .with(|t| t.get(i).cloned().flatten())?
            .map(Ty::Derived)
            .ok_or_else(|| bad_type(h))
    }

    /// The datatype behind `h`, which a communication call may use (committed).
    pub fn for_use(h: Handle) -> MpiResult<Ty> {
        let t = Self::lookup(h)?;
        if let Ty::Derived(d) = &t {
            if !d.committed.get() {
                return Err(type_error(format!(
                    "datatype {h:#x} is not committed: call MPI_Type_commit before using it in communication"
                )));
            }
        }
        Ok(t)
    }

    /// The datatype of a point-to-point buffer of `n` elements: as [`Ty::for_use`], except
    /// that `MPI_DATATYPE_NULL` with a count of 0 is an empty buffer (of `MPI_BYTE`). MPICH
    /// checks a message's datatype only when there is data, and programs written against it
    /// post such empty receives (MPICH's own suite: `MPI_Irecv(NULL, 0, MPI_DATATYPE_NULL,
    /// MPI_PROC_NULL, ...)` in pt2pt/recvnull). With data, the null type is refused as before.
    pub fn for_message(h: Handle, n: usize) -> MpiResult<Ty> {
        /// `MPI_BYTE`'s handle in the standard ABI.
        const BYTE: Handle = 0x247;
        if h == MPI_DATATYPE_NULL && n == 0 {
            return Self::for_use(BYTE);
        }
        Self::for_use(h)
    }

    /// Extent in bytes (negative for a type resized so).
    pub fn extent(&self) -> isize {
        match self {
            Ty::Predefined(_, t) => t.extent as isize,
            Ty::Derived(d) => d.layout.extent(),
        }
    }

    /// Bytes of data in one instance.
    pub fn size(&self) -> usize {
        match self {
            Ty::Predefined(_, t) => t.size,
            Ty::Derived(d) => d.layout.size(),
        }
    }

    /// The layout in rmca's terms.
    pub fn layout(&self) -> rmca::Datatype {
        match self {
            Ty::Predefined(_, t) => predefined_layout(t),
            Ty::Derived(d) => d.layout.clone(),
        }
    }

    fn signature(&self) -> Option<Vec<(Handle, usize)>> {
        match self {
            Ty::Predefined(h, t) => Some(predefined_signature(*h, t)),
            Ty::Derived(d) => d.signature.clone(),
        }
    }

    fn base(&self) -> Option<Handle> {
        match self {
            Ty::Predefined(h, _) => Some(*h),
            Ty::Derived(d) => d.base,
        }
    }

    /// How it was made (`None`: a predefined type).
    pub fn contents(&self) -> Option<Rc<Contents>> {
        match self {
            Ty::Predefined(..) => None,
            Ty::Derived(d) => Some(d.contents.clone()),
        }
    }

    /// The predefined datatype reductions over this one run on.
    pub fn reduction_base(&self) -> MpiResult<dtype::Datatype> {
        self.base().and_then(dtype::lookup).ok_or_else(|| {
            MpiError::new(
                MPI_ERR_OP,
                "a reduction over a derived datatype needs one made of a single predefined type (this one mixes several)",
            )
        })
    }

    /// The extent, for an operation that works on whole instances in the program's layout
    /// (a user reduction): the type must start at its lower bound 0 and keep its data
    /// inside its extent.
    pub fn raw_extent(&self) -> MpiResult<usize> {
        // A predefined type is its data from 0 (pairs with their padding): no layout to build.
        if let Ty::Predefined(_, t) = self {
            return Ok(t.extent);
        }
        let l = self.layout();
        let inside = l.lb() == 0
            && l.extent() >= 0
            && l.true_lb() >= 0
            && l.true_lb() as usize + l.true_extent() <= l.extent() as usize;
        if !inside {
            return Err(type_error(format!(
                "a user operation needs a datatype with lower bound 0 whose data lies inside its extent (this one: lb {}, extent {}, true lb {}, true extent {})",
                l.lb(),
                l.extent(),
                l.true_lb(),
                l.true_extent()
            )));
        }
        Ok(l.extent() as usize)
    }

    /// The one run of bytes `count` instances occupy, if they are one: (offset from the
    /// buffer, length).
    pub fn run(&self, count: usize) -> Option<(isize, usize)> {
        match self {
            Ty::Predefined(_, t) if t.size == t.extent => Some((0, t.size.checked_mul(count)?)),
            Ty::Predefined(_, t) => predefined_layout(t).contiguous_run(count),
            Ty::Derived(d) => d.layout.contiguous_run(count),
        }
    }

    /// Bytes `count` instances carry.
    pub fn packed_len(&self, count: usize) -> MpiResult<usize> {
        self.size()
            .checked_mul(count)
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| {
                MpiError::new(
                    MPI_ERR_COUNT,
                    format!(
                        "count {count} x type size {} overflows the address space",
                        self.size()
                    ),
                )
            })
    }

    /// Copy the data of `count` instances at `buf` into one run.
    ///
    /// # Safety
    /// `buf` holds `count` instances of the type (the MPI contract of a send buffer).
    pub unsafe fn pack(&self, buf: *const c_void, count: usize) -> MpiResult<Vec<u8>> {
        let mut out = Vec::new();
        let len = self.packed_len(count)?;
        out.try_reserve_exact(len).map_err(|_| {
            MpiError::new(
                MPI_ERR_NO_MEM,
                format!("cannot allocate {len} B to pack the data into"),
            )
        })?;
        out.resize(len, 0);
        // SAFETY: the caller's contract; `out` holds the packed length.
        unsafe { self.pack_into(buf, count, &mut out) };
        Ok(out)
    }

    /// Copy the data of `count` instances at `buf` into `out` (exactly their packed
    /// length), in type-map order.
    ///
    /// # Safety
    /// `buf` holds `count` instances of the type (the MPI contract of a send buffer).
    pub unsafe fn pack_into(&self, buf: *const c_void, count: usize, out: &mut [u8]) {
        if let Some((off, len)) = self.run(count) {
            // SAFETY: the caller's contract: the run is the instances' data.
            unsafe {
                let src = buf.cast::<u8>().offset(off);
                std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), len.min(out.len()));
            }
            return;
        }
        if let Some(runs) = self.layout().uniform_runs(count) {
            // SAFETY: the caller's contract: every run is part of the program's buffer.
            unsafe { gather_runs(&runs, buf.cast(), out) };
            return;
        }
        let mut pos = 0;
        self.layout().for_each_run(count, |off, len| {
            let n = len.min(out.len() - pos);
            // SAFETY: the caller's contract: every run of every instance is part of the
            // program's buffer; `out` has room for all of them (checked by `n`).
            unsafe {
                let src = buf.cast::<u8>().offset(off);
                std::ptr::copy_nonoverlapping(src, out.as_mut_ptr().add(pos), n);
            }
            pos += n;
            pos < out.len()
        });
    }

    /// Copy `data` (at most `count` instances' worth) into the instances at `buf`, in
    /// type-map order.
    ///
    /// # Safety
    /// `buf` holds `count` instances of the type and is not otherwise accessed during the
    /// call (the MPI contract of a receive buffer).
    pub unsafe fn unpack(&self, data: &[u8], buf: *mut c_void, count: usize) {
        if data.is_empty() {
            return;
        }
        if let Some((off, len)) = self.run(count) {
            // SAFETY: the caller's contract: the run is the instances' data.
            unsafe {
                let dst = buf.cast::<u8>().offset(off);
                std::ptr::copy_nonoverlapping(data.as_ptr(), dst, len.min(data.len()));
            }
            return;
        }
        if let Some(runs) = self.layout().uniform_runs(count) {
            // SAFETY: the caller's contract: every run is part of the program's buffer.
            unsafe { scatter_runs(&runs, data, buf.cast()) };
            return;
        }
        let mut pos = 0;
        self.layout().for_each_run(count, |off, len| {
            let n = len.min(data.len() - pos);
            // SAFETY: the caller's contract, and `pos + n <= data.len()`.
            unsafe {
                let dst = buf.cast::<u8>().offset(off);
                std::ptr::copy_nonoverlapping(data.as_ptr().add(pos), dst, n);
            }
            pos += n;
            pos < data.len()
        });
    }

    fn signature_or_error(&self, what: &str) -> MpiResult<Vec<(Handle, usize)>> {
        self.signature().ok_or_else(|| {
            type_error(format!(
                "the datatype's element signature is longer than {MAX_SIGNATURE} runs: {what} cannot walk its elements"
            ))
        })
    }

    /// Basic elements in `bytes` bytes of this type's data (`MPI_Get_elements`).
    pub fn elements(&self, bytes: usize) -> MpiResult<Option<usize>> {
        let size = self.size();
        if size == 0 {
            return Ok((bytes == 0).then_some(0));
        }
        let sig = self.signature_or_error("MPI_Get_elements")?;
        let per_instance: usize = sig.iter().map(|&(_, n)| n).sum();
        let mut n = bytes / size * per_instance;
        let mut rest = bytes % size;
        for &(h, count) in &sig {
            if rest == 0 {
                break;
            }
            let esize = elem_size(h);
            let whole = (rest / esize).min(count);
            n += whole;
            rest -= whole * esize;
            if whole < count {
                break;
            }
        }
        Ok((rest == 0).then_some(n))
    }

    /// Bytes of the first `elements` basic elements of instances of this type
    /// (`MPI_Status_set_elements`).
    pub fn bytes_of_elements(&self, elements: usize) -> MpiResult<usize> {
        let sig = self.signature_or_error("MPI_Status_set_elements")?;
        let per_instance: usize = sig.iter().map(|&(_, n)| n).sum();
        if per_instance == 0 {
            return Ok(0);
        }
        let over = || MpiError::new(MPI_ERR_COUNT, format!("{elements} elements overflow"));
        let mut bytes = (elements / per_instance)
            .checked_mul(self.size())
            .ok_or_else(over)?;
        let mut rest = elements % per_instance;
        for &(h, count) in &sig {
            let k = rest.min(count);
            bytes += k * elem_size(h);
            rest -= k;
            if rest == 0 {
                break;
            }
        }
        Ok(bytes)
    }

    /// The basic elements of `count` instances, in order: runs of (predefined handle,
    /// count) (the external32 conversion walks them).
    pub fn elements_of(&self, count: usize, what: &str) -> MpiResult<Vec<(Handle, usize)>> {
        let sig = self.signature_or_error(what)?;
        repeat(Some(&sig), count).ok_or_else(|| {
            type_error(format!(
                "{count} instances have more than {MAX_SIGNATURE} element runs: {what} cannot walk them"
            ))
        })
    }
}

/// Runs `sig` repeated `times` times, merged; `None` when too long.
fn repeat(sig: Option<&[(Handle, usize)]>, times: usize) -> Option<Vec<(Handle, usize)>> {
    let sig = sig?;
    match sig {
        [] => Some(Vec::new()),
        _ if times == 0 => Some(Vec::new()),
        [(s, n)] => Some(vec![(*s, n.checked_mul(times)?)]),
        _ if times.checked_mul(sig.len())? > MAX_SIGNATURE => None,
        _ => {
            let mut out = Vec::new();
            for _ in 0..times {
                append(&mut out, sig);
            }
            Some(out)
        }
    }
}

fn append(out: &mut Vec<(Handle, usize)>, more: &[(Handle, usize)]) {
    for &(s, n) in more {
        match out.last_mut() {
            Some((ls, ln)) if *ls == s => *ln += n,
            _ if n > 0 => out.push((s, n)),
            _ => {}
        }
    }
}

/// Signature of blocks (repetitions, type) one after the other.
fn concat(blocks: &[(usize, &Ty)]) -> Option<Vec<(Handle, usize)>> {
    let mut out = Vec::new();
    for (n, t) in blocks {
        append(&mut out, &repeat(t.signature().as_deref(), *n)?);
        if out.len() > MAX_SIGNATURE {
            return None;
        }
    }
    Some(out)
}

/// Register a derived type; its handle.
pub(crate) fn add(d: Rc<Derived>) -> MpiResult<Handle> {
    TYPES.with(|t| {
        super::table_insert(
            t,
            d,
            (TYPE_BASE, MAX_TYPES),
            "derived datatypes",
            "MPI_Type_free",
        )
    })?
}

/// A constructor's layout error in MPI terms.
fn layout_error(e: rmca::DatatypeError) -> MpiError {
    let class = match e {
        rmca::DatatypeError::LengthMismatch { .. } | rmca::DatatypeError::NoDimensions => {
            MPI_ERR_ARG
        }
        rmca::DatatypeError::SubarrayOutOfRange { .. } => MPI_ERR_ARG,
        _ => MPI_ERR_TYPE,
    };
    MpiError::new(class, e.to_string())
}

fn nonneg(n: c_int, what: &str) -> MpiResult<usize> {
    usize::try_from(n).map_err(|_| {
        MpiError::new(
            MPI_ERR_COUNT,
            format!("{what} {n} is negative: it must be >= 0"),
        )
    })
}

/// A C argument of a constructor: `int`, `MPI_Aint` or `MPI_Count`. Each goes to its own
/// array of `MPI_Type_get_contents` (integers, addresses, large counts).
pub trait Arg: Copy + std::fmt::Display {
    fn record(self, c: &mut Contents);
    fn wide(self) -> i128;
}

impl Arg for c_int {
    fn record(self, c: &mut Contents) {
        c.ints.push(self);
    }
    fn wide(self) -> i128 {
        self.into()
    }
}

impl Arg for isize {
    fn record(self, c: &mut Contents) {
        c.addrs.push(self);
    }
    fn wide(self) -> i128 {
        self as i128
    }
}

impl Arg for i64 {
    fn record(self, c: &mut Contents) {
        c.large.push(self);
    }
    fn wide(self) -> i128 {
        self.into()
    }
}

/// A count argument: >= 0 and addressable.
fn count_arg<A: Arg>(a: A, what: &str) -> MpiResult<usize> {
    let v = a.wide();
    if v < 0 {
        return Err(MpiError::new(
            MPI_ERR_COUNT,
            format!("{what} {v} is negative: it must be >= 0"),
        ));
    }
    usize::try_from(v)
        .ok()
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| MpiError::new(MPI_ERR_COUNT, format!("{what} {v} is too large")))
}

/// A displacement or stride argument (any sign).
fn disp_arg<A: Arg>(a: A, what: &str) -> MpiResult<isize> {
    let v = a.wide();
    isize::try_from(v)
        .map_err(|_| MpiError::new(MPI_ERR_ARG, format!("{what} {v} overflows an address")))
}

/// Read `n` values of a C array (checked non-null when `n` > 0).
///
/// # Safety
/// `p` holds `n` values of `T`.
pub(crate) unsafe fn array<T: Copy>(p: *const T, n: usize, what: &str) -> MpiResult<Vec<T>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            format!("the {what} array is NULL"),
        ));
    }
    // SAFETY: the caller's contract; non-null checked.
    Ok(unsafe { std::slice::from_raw_parts(p, n) }.to_vec())
}

/// Build a type from the layout `f` makes and store its handle at `out`.
///
/// # Safety
/// `out` is null or valid for a write of a handle.
unsafe fn create(
    fname: &'static str,
    out: *mut Handle,
    f: impl FnOnce() -> MpiResult<Derived>,
) -> c_int {
    call(fname, MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        if out.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the newtype argument is NULL"));
        }
        let h = add(Rc::new(f()?))?;
        // SAFETY: the caller's handle, non-null checked.
        unsafe { put(out, h, "newtype") }
    })
}

/// A new, uncommitted derived type.
pub(crate) fn derived(
    layout: Result<rmca::Datatype, rmca::DatatypeError>,
    base: Option<Handle>,
    signature: Option<Vec<(Handle, usize)>>,
    contents: Contents,
) -> MpiResult<Derived> {
    Ok(Derived {
        layout: layout.map_err(layout_error)?,
        committed: Rc::new(Cell::new(false)),
        base,
        signature,
        contents: Rc::new(contents),
        name: RefCell::new(String::new()),
        permanent: false,
    })
}

impl Derived {
    /// Mark committed (a type made to be predefined, or a duplicate of a committed one).
    pub(crate) fn committed(self) -> Self {
        self.committed.set(true);
        self
    }
}

/// Contents of `combiner` with the arguments recorded by `f`, and `types`.
fn contents(combiner: c_int, types: Vec<Ty>, f: impl FnOnce(&mut Contents)) -> Contents {
    let mut c = Contents {
        combiner,
        types,
        ..Contents::default()
    };
    f(&mut c);
    c
}

/// `MPI_Type_contiguous` and `_c`.
///
/// # Safety
/// `new` is null or valid for a write of a handle.
unsafe fn contiguous<C: Arg>(
    fname: &'static str,
    count: C,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract for `new`.
    unsafe {
        create(fname, new, || {
            let n = count_arg(count, "count")?;
            let t = Ty::lookup(old)?;
            let c = contents(combiner::CONTIGUOUS, vec![t.clone()], |c| count.record(c));
            derived(
                rmca::Datatype::contiguous(n, &t.layout()),
                t.base(),
                repeat(t.signature().as_deref(), n),
                c,
            )
        })
    }
}

/// `MPI_Type_contiguous`.
#[export]
pub unsafe extern "C" fn MPI_Type_contiguous(count: c_int, old: Handle, new: *mut Handle) -> c_int {
    // SAFETY: MPI_Type_contiguous's contract.
    unsafe { contiguous("MPI_Type_contiguous", count, old, new) }
}

/// `MPI_Type_contiguous_c`.
#[export]
pub unsafe extern "C" fn MPI_Type_contiguous_c(
    count: MPI_Count,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_contiguous_c's contract.
    unsafe { contiguous("MPI_Type_contiguous_c", count, old, new) }
}

/// `MPI_Type_vector` (`bytes` false: the stride in elements of the old type) and
/// `MPI_Type_create_hvector` (`bytes` true), and their `_c` forms.
///
/// # Safety
/// `new` is null or valid for a write of a handle.
unsafe fn vector<C: Arg, S: Arg>(
    fname: &'static str,
    (count, blocklength, stride): (C, C, S),
    bytes: bool,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract for `new`.
    unsafe {
        create(fname, new, || {
            let n = count_arg(count, "count")?;
            let b = count_arg(blocklength, "blocklength")?;
            let s = disp_arg(stride, "stride")?;
            let t = Ty::lookup(old)?;
            let comb = if bytes {
                combiner::HVECTOR
            } else {
                combiner::VECTOR
            };
            let c = contents(comb, vec![t.clone()], |c| {
                count.record(c);
                blocklength.record(c);
                stride.record(c);
            });
            let l = t.layout();
            let layout = if bytes {
                rmca::Datatype::hvector(n, b, s, &l)
            } else {
                rmca::Datatype::vector(n, b, s, &l)
            };
            derived(
                layout,
                t.base(),
                repeat(t.signature().as_deref(), n.saturating_mul(b)),
                c,
            )
        })
    }
}

/// `MPI_Type_vector`: the stride in elements of the old type.
#[export]
pub unsafe extern "C" fn MPI_Type_vector(
    count: c_int,
    blocklength: c_int,
    stride: c_int,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_vector's contract.
    unsafe {
        vector(
            "MPI_Type_vector",
            (count, blocklength, stride),
            false,
            old,
            new,
        )
    }
}

/// `MPI_Type_vector_c`.
#[export]
pub unsafe extern "C" fn MPI_Type_vector_c(
    count: MPI_Count,
    blocklength: MPI_Count,
    stride: MPI_Count,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_vector_c's contract.
    unsafe {
        vector(
            "MPI_Type_vector_c",
            (count, blocklength, stride),
            false,
            old,
            new,
        )
    }
}

/// `MPI_Type_create_hvector`: the stride in bytes.
#[export]
pub unsafe extern "C" fn MPI_Type_create_hvector(
    count: c_int,
    blocklength: c_int,
    stride: isize,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_create_hvector's contract.
    unsafe {
        vector(
            "MPI_Type_create_hvector",
            (count, blocklength, stride),
            true,
            old,
            new,
        )
    }
}

/// `MPI_Type_create_hvector_c`.
#[export]
pub unsafe extern "C" fn MPI_Type_create_hvector_c(
    count: MPI_Count,
    blocklength: MPI_Count,
    stride: MPI_Count,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_create_hvector_c's contract.
    unsafe {
        vector(
            "MPI_Type_create_hvector_c",
            (count, blocklength, stride),
            true,
            old,
            new,
        )
    }
}

/// The blocks of an indexed constructor.
enum BlockLens<C> {
    /// One length per block (`indexed`, `hindexed`, `struct`).
    Each(*const C),
    /// One length for all (`indexed_block`, `hindexed_block`).
    All(C),
}

/// `MPI_Type_indexed` / `_create_hindexed` / `_create_indexed_block` /
/// `_create_hindexed_block` / `_create_struct` and their `_c` forms: `count` blocks at
/// `displs` (in elements of the old type unless `bytes`), of the old type or, for a
/// struct, of `types[i]`.
///
/// # Safety
/// The arrays hold `count` values each, `new` is null or valid for a write of a handle.
#[allow(clippy::too_many_arguments)]
unsafe fn indexed<C: Arg, D: Arg>(
    fname: &'static str,
    comb: c_int,
    count: C,
    lens: BlockLens<C>,
    displs: *const D,
    bytes: bool,
    types: Result<Handle, *const Handle>,
    new: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract for `new` and the arrays.
    unsafe {
        create(fname, new, || {
            let n = count_arg(count, "count")?;
            let (bl, raw_bl): (Vec<usize>, Vec<C>) = match lens {
                BlockLens::Each(p) => {
                    let raw = array(p, n, "blocklengths")?;
                    let bl = raw
                        .iter()
                        .map(|&b| count_arg(b, "blocklength"))
                        .collect::<MpiResult<_>>()?;
                    (bl, raw)
                }
                BlockLens::All(b) => (vec![count_arg(b, "blocklength")?; n], vec![b]),
            };
            let raw_d = array(displs, n, "displacements")?;
            let d = raw_d
                .iter()
                .map(|&x| disp_arg(x, "displacement"))
                .collect::<MpiResult<Vec<_>>>()?;
            let tys = match types {
                Ok(old) => vec![Ty::lookup(old)?],
                Err(p) => array(p, n, "types")?
                    .into_iter()
                    .map(Ty::lookup)
                    .collect::<MpiResult<Vec<_>>>()?,
            };
            let c = contents(comb, tys.clone(), |c| {
                count.record(c);
                raw_bl.iter().for_each(|b| b.record(c));
                raw_d.iter().for_each(|x| x.record(c));
            });
            if types.is_err() {
                let layouts: Vec<rmca::Datatype> = tys.iter().map(Ty::layout).collect();
                let bases: Vec<Option<Handle>> = tys.iter().map(Ty::base).collect();
                let base = match bases.first() {
                    Some(&b) if bases.iter().all(|&x| x == b) => b,
                    _ => None,
                };
                let blocks: Vec<(usize, &Ty)> = bl.iter().copied().zip(tys.iter()).collect();
                return derived(
                    rmca::Datatype::structure(&bl, &d, &layouts),
                    base,
                    concat(&blocks),
                    c,
                );
            }
            let t = &tys[0];
            let l = t.layout();
            let layout = if bytes {
                rmca::Datatype::hindexed(&bl, &d, &l)
            } else {
                rmca::Datatype::indexed(&bl, &d, &l)
            };
            let total = bl.iter().try_fold(0usize, |a, &b| a.checked_add(b));
            derived(
                layout,
                t.base(),
                total.and_then(|e| repeat(t.signature().as_deref(), e)),
                c,
            )
        })
    }
}

macro_rules! indexed_fns {
    ($($(#[$doc:meta])* $name:ident($c:ty, $lens:ident: $lt:ty, $d:ty, $comb:ident, $bytes:expr, $kind:ident);)*) => {$(
        $(#[$doc])*
        #[export]
        pub unsafe extern "C" fn $name(
            count: $c,
            $lens: $lt,
            displs: *const $d,
            old: Handle,
            new: *mut Handle,
        ) -> c_int {
            // SAFETY: the call's contract: `count` block lengths (or one) and displacements.
            unsafe {
                indexed(
                    stringify!($name),
                    combiner::$comb,
                    count,
                    BlockLens::$kind($lens),
                    displs,
                    $bytes,
                    Ok(old),
                    new,
                )
            }
        }
    )*};
}

indexed_fns! {
    /// `MPI_Type_indexed`: displacements in elements of the old type.
    MPI_Type_indexed(c_int, blocklens: *const c_int, c_int, INDEXED, false, Each);
    /// `MPI_Type_indexed_c`.
    MPI_Type_indexed_c(MPI_Count, blocklens: *const MPI_Count, MPI_Count, INDEXED, false, Each);
    /// `MPI_Type_create_hindexed`: displacements in bytes.
    MPI_Type_create_hindexed(c_int, blocklens: *const c_int, isize, HINDEXED, true, Each);
    /// `MPI_Type_create_hindexed_c`.
    MPI_Type_create_hindexed_c(MPI_Count, blocklens: *const MPI_Count, MPI_Count, HINDEXED, true, Each);
    /// `MPI_Type_create_indexed_block`: blocks of one length at displacements in elements.
    MPI_Type_create_indexed_block(c_int, blocklength: c_int, c_int, INDEXED_BLOCK, false, All);
    /// `MPI_Type_create_indexed_block_c`.
    MPI_Type_create_indexed_block_c(MPI_Count, blocklength: MPI_Count, MPI_Count, INDEXED_BLOCK, false, All);
    /// `MPI_Type_create_hindexed_block`: blocks of one length at displacements in bytes.
    MPI_Type_create_hindexed_block(c_int, blocklength: c_int, isize, HINDEXED_BLOCK, true, All);
    /// `MPI_Type_create_hindexed_block_c`.
    MPI_Type_create_hindexed_block_c(MPI_Count, blocklength: MPI_Count, MPI_Count, HINDEXED_BLOCK, true, All);
}

/// `MPI_Type_create_struct`.
#[export]
pub unsafe extern "C" fn MPI_Type_create_struct(
    count: c_int,
    blocklens: *const c_int,
    displs: *const isize,
    types: *const Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_create_struct's contract: `count` block lengths, displacements and
    // types.
    unsafe {
        indexed(
            "MPI_Type_create_struct",
            combiner::STRUCT,
            count,
            BlockLens::Each(blocklens),
            displs,
            true,
            Err(types),
            new,
        )
    }
}

/// `MPI_Type_create_struct_c`.
#[export]
pub unsafe extern "C" fn MPI_Type_create_struct_c(
    count: MPI_Count,
    blocklens: *const MPI_Count,
    displs: *const MPI_Count,
    types: *const Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_create_struct_c's contract.
    unsafe {
        indexed(
            "MPI_Type_create_struct_c",
            combiner::STRUCT,
            count,
            BlockLens::Each(blocklens),
            displs,
            true,
            Err(types),
            new,
        )
    }
}

/// `MPI_Type_create_resized` and `_c`.
///
/// # Safety
/// `new` is null or valid for a write of a handle.
unsafe fn resized<D: Arg>(
    fname: &'static str,
    old: Handle,
    lb: D,
    extent: D,
    new: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract for `new`.
    unsafe {
        create(fname, new, || {
            let l = disp_arg(lb, "lb")?;
            let e = disp_arg(extent, "extent")?;
            let t = Ty::lookup(old)?;
            let c = contents(combiner::RESIZED, vec![t.clone()], |c| {
                lb.record(c);
                extent.record(c);
            });
            derived(
                rmca::Datatype::resized(&t.layout(), l, e),
                t.base(),
                t.signature(),
                c,
            )
        })
    }
}

/// `MPI_Type_create_resized` (a negative extent is allowed: instances go down in memory).
#[export]
pub unsafe extern "C" fn MPI_Type_create_resized(
    old: Handle,
    lb: isize,
    extent: isize,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_create_resized's contract.
    unsafe { resized("MPI_Type_create_resized", old, lb, extent, new) }
}

/// `MPI_Type_create_resized_c`.
#[export]
pub unsafe extern "C" fn MPI_Type_create_resized_c(
    old: Handle,
    lb: MPI_Count,
    extent: MPI_Count,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_create_resized_c's contract.
    unsafe { resized("MPI_Type_create_resized_c", old, lb, extent, new) }
}

/// Reverse the dimensions of a Fortran-order array description (its first dimension
/// varies fastest: C order reversed), or refuse an unknown order.
pub(crate) fn c_order<T>(order: c_int, dims: &mut [&mut Vec<T>]) -> MpiResult<()> {
    match order {
        MPI_ORDER_C => Ok(()),
        MPI_ORDER_FORTRAN => {
            dims.iter_mut().for_each(|d| d.reverse());
            Ok(())
        }
        _ => Err(MpiError::new(
            MPI_ERR_ARG,
            format!("order {order} is invalid: MPI_ORDER_C or MPI_ORDER_FORTRAN"),
        )),
    }
}

/// `MPI_Type_create_subarray` and `_c`.
///
/// # Safety
/// The arrays hold `ndims` values each, `new` is null or valid for a write of a handle.
unsafe fn subarray<C: Arg>(
    fname: &'static str,
    ndims: c_int,
    (sizes, subsizes, starts): (*const C, *const C, *const C),
    order: c_int,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        create(fname, new, || {
            let n = nonneg(ndims, "ndims")?;
            let raw = (
                array(sizes, n, "sizes")?,
                array(subsizes, n, "subsizes")?,
                array(starts, n, "starts")?,
            );
            let read = |v: &[C], what| -> MpiResult<Vec<usize>> {
                v.iter().map(|&x| count_arg(x, what)).collect()
            };
            let (mut sz, mut sub, mut st) = (
                read(&raw.0, "sizes")?,
                read(&raw.1, "subsizes")?,
                read(&raw.2, "starts")?,
            );
            c_order(order, &mut [&mut sz, &mut sub, &mut st])?;
            let t = Ty::lookup(old)?;
            let c = contents(combiner::SUBARRAY, vec![t.clone()], |c| {
                ndims.record(c);
                for v in [&raw.0, &raw.1, &raw.2] {
                    v.iter().for_each(|x| x.record(c));
                }
                order.record(c);
            });
            let elems = sub.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
            derived(
                rmca::Datatype::subarray(&sz, &sub, &st, &t.layout()),
                t.base(),
                elems.and_then(|e| repeat(t.signature().as_deref(), e)),
                c,
            )
        })
    }
}

/// `MPI_Type_create_subarray` (`MPI_ORDER_C` or `MPI_ORDER_FORTRAN`).
#[export]
pub unsafe extern "C" fn MPI_Type_create_subarray(
    ndims: c_int,
    sizes: *const c_int,
    subsizes: *const c_int,
    starts: *const c_int,
    order: c_int,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_create_subarray's contract: `ndims` sizes, subsizes and starts.
    unsafe {
        subarray(
            "MPI_Type_create_subarray",
            ndims,
            (sizes, subsizes, starts),
            order,
            old,
            new,
        )
    }
}

/// `MPI_Type_create_subarray_c`.
#[export]
pub unsafe extern "C" fn MPI_Type_create_subarray_c(
    ndims: c_int,
    sizes: *const MPI_Count,
    subsizes: *const MPI_Count,
    starts: *const MPI_Count,
    order: c_int,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_create_subarray_c's contract.
    unsafe {
        subarray(
            "MPI_Type_create_subarray_c",
            ndims,
            (sizes, subsizes, starts),
            order,
            old,
            new,
        )
    }
}

/// The derived type index of `h`; `None` for a predefined type; the error for an invalid
/// one.
fn derived_index(h: Handle) -> MpiResult<Option<usize>> {
    match Ty::lookup(h)? {
        Ty::Predefined(..) => Ok(None),
        Ty::Derived(_) => Ok(Some(h - TYPE_BASE)),
    }
}

/// `MPI_Type_commit`: a predefined type is committed already (a no-op).
#[export]
pub unsafe extern "C" fn MPI_Type_commit(datatype: *mut Handle) -> c_int {
    call("MPI_Type_commit", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        if datatype.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the datatype argument is NULL"));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { datatype.read() };
        if let Ty::Derived(d) = Ty::lookup(h)? {
            d.committed.set(true);
        }
        Ok(())
    })
}

/// `MPI_Type_free`: the handle becomes `MPI_DATATYPE_NULL`; calls in progress, and types
/// built from it, keep their own reference to the layout.
#[export]
pub unsafe extern "C" fn MPI_Type_free(datatype: *mut Handle) -> c_int {
    call("MPI_Type_free", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        if datatype.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the datatype argument is NULL"));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { datatype.read() };
        let permanent = matches!(Ty::lookup(h)?, Ty::Derived(d) if d.permanent);
        let Some(i) = derived_index(h)?.filter(|_| !permanent) else {
            return Err(type_error(
                "MPI_Type_free on a predefined datatype: only derived datatypes are freed",
            ));
        };
        super::attr::type_freed(h)?;
        TYPES.with(|t| t[i] = None)?;
        // SAFETY: as above.
        unsafe { datatype.write(MPI_DATATYPE_NULL) };
        Ok(())
    })
}

/// `MPI_Type_size` (`MPI_UNDEFINED` when it does not fit an int).
#[export]
pub unsafe extern "C" fn MPI_Type_size(datatype: Handle, size: *mut c_int) -> c_int {
    call("MPI_Type_size", MPI_COMM_WORLD, || {
        let s = Ty::lookup(datatype)?.size();
        let s = c_int::try_from(s).unwrap_or(MPI_UNDEFINED);
        // SAFETY: the caller's int.
        unsafe { put(size, s, "size") }
    })
}

/// Write a (lower bound, extent) pair.
///
/// # Safety
/// Both pointers are null or valid for a write of a `T`.
pub(crate) unsafe fn put_bounds<T: TryFrom<isize>>(
    lb: *mut T,
    extent: *mut T,
    l: isize,
    e: isize,
) -> MpiResult<()> {
    let conv = |v: isize| {
        T::try_from(v).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("{v} overflows")))
    };
    // SAFETY: the caller's contract.
    unsafe {
        put(lb, conv(l)?, "lb")?;
        put(extent, conv(e)?, "extent")
    }
}

/// `MPI_Type_get_extent`.
#[export]
pub unsafe extern "C" fn MPI_Type_get_extent(
    datatype: Handle,
    lb: *mut isize,
    extent: *mut isize,
) -> c_int {
    call("MPI_Type_get_extent", MPI_COMM_WORLD, || {
        let l = Ty::lookup(datatype)?.layout();
        // SAFETY: the caller's MPI_Aints.
        unsafe { put_bounds(lb, extent, l.lb(), l.extent()) }
    })
}

/// `MPI_Type_get_true_extent`.
#[export]
pub unsafe extern "C" fn MPI_Type_get_true_extent(
    datatype: Handle,
    true_lb: *mut isize,
    true_extent: *mut isize,
) -> c_int {
    call("MPI_Type_get_true_extent", MPI_COMM_WORLD, || {
        let l = Ty::lookup(datatype)?.layout();
        // SAFETY: the caller's MPI_Aints.
        unsafe { put_bounds(true_lb, true_extent, l.true_lb(), l.true_extent() as isize) }
    })
}

/// `MPI_Type_dup`: a new handle with the same layout, committed if the old one is (a
/// predefined type's duplicate is a committed derived type).
#[export]
pub unsafe extern "C" fn MPI_Type_dup(old: Handle, new: *mut Handle) -> c_int {
    // SAFETY: MPI_Type_dup's contract for `new` (then the attributes are copied).
    unsafe {
        super::attr::type_dup(
            create("MPI_Type_dup", new, || {
                let t = Ty::lookup(old)?;
                let committed = match &t {
                    Ty::Derived(d) => d.committed.get(),
                    Ty::Predefined(..) => true,
                };
                let c = contents(combiner::DUP, vec![t.clone()], |_| {});
                let d = derived(Ok(t.layout()), t.base(), t.signature(), c)?;
                d.committed.set(committed);
                Ok(d)
            }),
            old,
            new,
        )
    }
}

/// The signature of `n` instances of `t` (`None`: too long to keep).
pub(crate) fn repeat_signature(t: &Ty, n: usize) -> Option<Vec<(Handle, usize)>> {
    repeat(t.signature().as_deref(), n)
}

/// The predefined type all of `t`'s data is made of, if one.
pub(crate) fn base_of(t: &Ty) -> Option<Handle> {
    t.base()
}

/// The handle of derived type `d`, if it has one.
pub(crate) fn handle_of(d: &Rc<Derived>) -> MpiResult<Option<Handle>> {
    TYPES.with(|t| {
        t.iter()
            .position(|x| x.as_ref().is_some_and(|x| Rc::ptr_eq(x, d)))
            .map(|i| TYPE_BASE + i)
    })
}

/// Pack evenly spaced runs (`UniformRuns`: a vector of a basic type, a resized basic type)
/// into `out` by one loop per element size: a fixed-size move per run instead of a walk and
/// a `memcpy` call (a 2^31-element strided byte vector packs in seconds, not a minute).
/// `out` may end inside a run.
///
/// # Safety
/// Every run of `runs` is readable memory at `buf`.
unsafe fn gather_runs(runs: &rmca::datatype::UniformRuns, buf: *const u8, out: &mut [u8]) {
    /// # Safety
    /// As [`gather_runs`].
    #[inline(always)]
    unsafe fn fixed<const N: usize>(
        runs: &rmca::datatype::UniformRuns,
        buf: *const u8,
        out: &mut [u8],
    ) {
        for (i, o) in out.chunks_exact_mut(N).enumerate() {
            // SAFETY: the caller's contract: run i is readable; `o` holds N bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(buf.offset(runs.offset_of(i)), o.as_mut_ptr(), N)
            };
        }
    }
    let whole = out.len() / runs.len * runs.len;
    let (full, tail) = out.split_at_mut(whole);
    // SAFETY (each arm): the caller's contract.
    unsafe {
        match runs.len {
            1 => fixed::<1>(runs, buf, full),
            2 => fixed::<2>(runs, buf, full),
            4 => fixed::<4>(runs, buf, full),
            8 => fixed::<8>(runs, buf, full),
            16 => fixed::<16>(runs, buf, full),
            len => {
                for (i, o) in full.chunks_exact_mut(len).enumerate() {
                    std::ptr::copy_nonoverlapping(
                        buf.offset(runs.offset_of(i)),
                        o.as_mut_ptr(),
                        len,
                    );
                }
            }
        }
        if !tail.is_empty() {
            let src = buf.offset(runs.offset_of(whole / runs.len));
            std::ptr::copy_nonoverlapping(src, tail.as_mut_ptr(), tail.len());
        }
    }
}

/// Unpack `data` into evenly spaced runs at `buf` (the inverse of [`gather_runs`]); `data`
/// may end inside a run.
///
/// # Safety
/// Every run of `runs` is writable memory at `buf`, not otherwise accessed during the call.
unsafe fn scatter_runs(runs: &rmca::datatype::UniformRuns, data: &[u8], buf: *mut u8) {
    /// # Safety
    /// As [`scatter_runs`].
    #[inline(always)]
    unsafe fn fixed<const N: usize>(runs: &rmca::datatype::UniformRuns, data: &[u8], buf: *mut u8) {
        for (i, d) in data.chunks_exact(N).enumerate() {
            // SAFETY: the caller's contract: run i is writable; `d` holds N bytes.
            unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), buf.offset(runs.offset_of(i)), N) };
        }
    }
    let whole = data.len() / runs.len * runs.len;
    let (full, tail) = data.split_at(whole);
    // SAFETY (each arm): the caller's contract.
    unsafe {
        match runs.len {
            1 => fixed::<1>(runs, full, buf),
            2 => fixed::<2>(runs, full, buf),
            4 => fixed::<4>(runs, full, buf),
            8 => fixed::<8>(runs, full, buf),
            16 => fixed::<16>(runs, full, buf),
            len => {
                for (i, d) in full.chunks_exact(len).enumerate() {
                    std::ptr::copy_nonoverlapping(d.as_ptr(), buf.offset(runs.offset_of(i)), len);
                }
            }
        }
        if !tail.is_empty() {
            let dst = buf.offset(runs.offset_of(whole / runs.len));
            std::ptr::copy_nonoverlapping(tail.as_ptr(), dst, tail.len());
        }
    }
}
