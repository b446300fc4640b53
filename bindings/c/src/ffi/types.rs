//! Derived datatypes: the `MPI_Type_*` constructors and queries, their handle table, and how
//! the calls move data of any datatype.
//!
//! The layouts are `rmca::Datatype`s (flattened to byte segments when built). A call whose
//! data is one run of bytes uses the program's buffer in place, as for the predefined types;
//! any other layout is packed into a buffer of the library's own before a send and unpacked
//! from one after a receive (for a non-blocking receive, when the request completes).
#![allow(non_snake_case)]

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::rc::Rc;

use super::{call, put};
use crate::abi::*;
use crate::dtype::{self, Class};
use crate::state::{self, MpiError, MpiResult};
use rmca_mpi_export::export;

/// Handles of derived datatypes: this plus an index (between the error handlers' range and
/// the requests').
pub const TYPE_BASE: Handle = DYNAMIC_BASE * 3;
/// Derived datatypes alive at once.
const MAX_TYPES: usize = DYNAMIC_BASE;
/// The longest basic-element signature kept per type (`MPI_Get_elements` on a partial
/// instance walks it); longer ones are not kept and that query is refused.
const MAX_SIGNATURE: usize = 1 << 16;

/// `MPI_ORDER_C` and `MPI_ORDER_FORTRAN` (standard ABI values).
pub const MPI_ORDER_C: c_int = 0xC;
pub const MPI_ORDER_FORTRAN: c_int = 0xF;

/// A derived datatype.
#[derive(Clone)]
pub struct Derived {
    layout: rmca::Datatype,
    committed: bool,
    /// The predefined type all its data is made of, when there is one (reductions).
    base: Option<Handle>,
    /// Basic elements of one instance in type-map order, as runs of (element size, count);
    /// `None` when longer than [`MAX_SIGNATURE`].
    signature: Option<Vec<(usize, usize)>>,
}

thread_local! {
    static TYPES: RefCell<Vec<Option<Rc<Derived>>>> = const { RefCell::new(Vec::new()) };
}

/// A datatype as the calls see it.
#[derive(Clone)]
pub enum Ty {
    Predefined(Handle, dtype::Datatype),
    Derived(Rc<Derived>),
}

fn type_error(msg: impl Into<String>) -> MpiError {
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

/// The rmca layout of a predefined type: its size, aligned as the C type (the alignment
/// rounds the extent of a structure, as C pads the struct).
fn predefined_layout(h: Handle, t: &dtype::Datatype) -> rmca::Datatype {
    use rmca::Datatype as D;
    let align = match h {
        // The value-index pairs: aligned as their larger member.
        0x228 | 0x22b | 0x22c | 0x230 | 0x232 => 4,
        0x229 | 0x22a | 0x231 => 8,
        0x22d => 16,
        _ if t.class == Class::Complex => (t.size / 2).max(1),
        _ => t.size.min(16),
    };
    match (t.size, align) {
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

impl Ty {
    /// The datatype behind `h`, committed or not.
    pub fn lookup(h: Handle) -> MpiResult<Ty> {
        if let Some(t) = dtype::lookup(h) {
            return Ok(Ty::Predefined(h, t));
        }
        let i = h
            .checked_sub(TYPE_BASE)
            .filter(|&i| i < MAX_TYPES)
            .ok_or_else(|| bad_type(h))?;
        TYPES
            .with(|t| t.borrow().get(i).cloned().flatten())
            .map(Ty::Derived)
            .ok_or_else(|| bad_type(h))
    }

    /// The datatype behind `h`, which a communication call may use (committed).
    pub fn for_use(h: Handle) -> MpiResult<Ty> {
        let t = Self::lookup(h)?;
        if let Ty::Derived(d) = &t {
            if !d.committed {
                return Err(type_error(format!(
                    "datatype {h:#x} is not committed: call MPI_Type_commit before using it in communication"
                )));
            }
        }
        Ok(t)
    }

    /// Extent in bytes.
    pub fn extent(&self) -> isize {
        match self {
            Ty::Predefined(_, t) => t.size as isize,
            Ty::Derived(d) => d.layout.extent() as isize,
        }
    }

    /// Bytes of data in one instance.
    pub fn size(&self) -> usize {
        match self {
            Ty::Predefined(_, t) => t.size,
            Ty::Derived(d) => d.layout.size(),
        }
    }

    fn layout(&self) -> rmca::Datatype {
        match self {
            Ty::Predefined(h, t) => predefined_layout(*h, t),
            Ty::Derived(d) => d.layout.clone(),
        }
    }

    fn signature(&self) -> Option<Vec<(usize, usize)>> {
        match self {
            Ty::Predefined(_, t) if t.size == 0 => Some(Vec::new()),
            Ty::Predefined(_, t) => Some(vec![(t.size, 1)]),
            Ty::Derived(d) => d.signature.clone(),
        }
    }

    fn base(&self) -> Option<Handle> {
        match self {
            Ty::Predefined(h, _) => Some(*h),
            Ty::Derived(d) => d.base,
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
        let l = self.layout();
        let inside =
            l.lb() == 0 && l.true_lb() >= 0 && l.true_lb() as usize + l.true_extent() <= l.extent();
        if !inside {
            return Err(type_error(format!(
                "a user operation needs a datatype with lower bound 0 whose data lies inside its extent (this one: lb {}, extent {}, true lb {}, true extent {})",
                l.lb(),
                l.extent(),
                l.true_lb(),
                l.true_extent()
            )));
        }
        Ok(l.extent())
    }

    /// The one run of bytes `count` instances occupy, if they are one: (offset from the
    /// buffer, length).
    pub fn run(&self, count: usize) -> Option<(isize, usize)> {
        match self {
            Ty::Predefined(_, t) => Some((0, t.size.checked_mul(count)?)),
            Ty::Derived(d) => {
                let l = &d.layout;
                match l.segments() {
                    _ if count == 0 => Some((0, 0)),
                    [] => Some((0, 0)),
                    [s] if count == 1 || s.len == l.extent() => {
                        Some((s.offset, s.len.checked_mul(count)?))
                    }
                    _ => None,
                }
            }
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
        let mut out = vec![0u8; self.packed_len(count)?];
        let l = self.layout();
        let extent = l.extent() as isize;
        let mut pos = 0;
        for i in 0..count as isize {
            for s in l.segments() {
                // SAFETY: the caller's contract: every segment of every instance is part of
                // the program's buffer; `out` has room for all of them (packed_len).
                unsafe {
                    let src = buf.cast::<u8>().offset(i * extent + s.offset);
                    std::ptr::copy_nonoverlapping(src, out.as_mut_ptr().add(pos), s.len);
                }
                pos += s.len;
            }
        }
        Ok(out)
    }

    /// Copy `data` (at most `count` instances' worth) into the instances at `buf`, in
    /// type-map order.
    ///
    /// # Safety
    /// `buf` holds `count` instances of the type and is not otherwise accessed during the
    /// call (the MPI contract of a receive buffer).
    pub unsafe fn unpack(&self, data: &[u8], buf: *mut c_void, count: usize) {
        let l = self.layout();
        let extent = l.extent() as isize;
        let mut pos = 0;
        'all: for i in 0..count as isize {
            for s in l.segments() {
                if pos >= data.len() {
                    break 'all;
                }
                let n = s.len.min(data.len() - pos);
                // SAFETY: the caller's contract, and `pos + n <= data.len()`.
                unsafe {
                    let dst = buf.cast::<u8>().offset(i * extent + s.offset);
                    std::ptr::copy_nonoverlapping(data.as_ptr().add(pos), dst, n);
                }
                pos += n;
            }
        }
    }

    /// Basic elements in `bytes` bytes of this type's data (`MPI_Get_elements`).
    pub fn elements(&self, bytes: usize) -> MpiResult<Option<usize>> {
        let size = self.size();
        if size == 0 {
            return Ok((bytes == 0).then_some(0));
        }
        let sig = self.signature().ok_or_else(|| {
            type_error(format!(
                "the datatype's element signature is longer than {MAX_SIGNATURE} runs: MPI_Get_elements cannot count its elements"
            ))
        })?;
        let per_instance: usize = sig.iter().map(|&(_, n)| n).sum();
        let mut n = bytes / size * per_instance;
        let mut rest = bytes % size;
        for &(esize, count) in &sig {
            if rest == 0 {
                break;
            }
            let whole = (rest / esize).min(count);
            n += whole;
            rest -= whole * esize;
            if whole < count {
                break;
            }
        }
        Ok((rest == 0).then_some(n))
    }
}

/// Runs `sig` repeated `times` times, merged; `None` when too long.
fn repeat(sig: Option<&[(usize, usize)]>, times: usize) -> Option<Vec<(usize, usize)>> {
    let sig = sig?;
    match sig {
        [] => Some(Vec::new()),
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

fn append(out: &mut Vec<(usize, usize)>, more: &[(usize, usize)]) {
    for &(s, n) in more {
        match out.last_mut() {
            Some((ls, ln)) if *ls == s => *ln += n,
            _ if n > 0 => out.push((s, n)),
            _ => {}
        }
    }
}

/// Signature of blocks (repetitions, type) one after the other.
fn concat(blocks: &[(usize, &Ty)]) -> Option<Vec<(usize, usize)>> {
    let mut out = Vec::new();
    for (n, t) in blocks {
        append(&mut out, &repeat(t.signature().as_deref(), *n)?);
        if out.len() > MAX_SIGNATURE {
            return None;
        }
    }
    Some(out)
}

/// Register a new (uncommitted) derived type; its handle.
fn add(d: Derived) -> MpiResult<Handle> {
    TYPES.with(|t| {
        super::table_insert(
            &mut t.borrow_mut(),
            Rc::new(d),
            (TYPE_BASE, MAX_TYPES),
            "derived datatypes",
            "MPI_Type_free",
        )
    })
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

/// Read `n` values of a C array (checked non-null when `n` > 0).
///
/// # Safety
/// `p` holds `n` values of `T`.
unsafe fn array<T: Copy>(p: *const T, n: usize, what: &str) -> MpiResult<Vec<T>> {
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
        let h = add(f()?)?;
        // SAFETY: the caller's handle, non-null checked.
        unsafe { put(out, h, "newtype") }
    })
}

fn derived(
    layout: Result<rmca::Datatype, rmca::DatatypeError>,
    base: Option<Handle>,
    signature: Option<Vec<(usize, usize)>>,
) -> MpiResult<Derived> {
    Ok(Derived {
        layout: layout.map_err(layout_error)?,
        committed: false,
        base,
        signature,
    })
}

/// `MPI_Type_contiguous`.
#[export]
pub unsafe extern "C" fn MPI_Type_contiguous(count: c_int, old: Handle, new: *mut Handle) -> c_int {
    // SAFETY: MPI_Type_contiguous's contract for `new`.
    unsafe {
        create("MPI_Type_contiguous", new, || {
            let n = nonneg(count, "count")?;
            let t = Ty::lookup(old)?;
            derived(
                rmca::Datatype::contiguous(n, &t.layout()),
                t.base(),
                repeat(t.signature().as_deref(), n),
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
    // SAFETY: MPI_Type_vector's contract for `new`.
    unsafe {
        create("MPI_Type_vector", new, || {
            let (n, b) = (nonneg(count, "count")?, nonneg(blocklength, "blocklength")?);
            let t = Ty::lookup(old)?;
            derived(
                rmca::Datatype::vector(n, b, stride as isize, &t.layout()),
                t.base(),
                repeat(t.signature().as_deref(), n.saturating_mul(b)),
            )
        })
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
    // SAFETY: MPI_Type_create_hvector's contract for `new`.
    unsafe {
        create("MPI_Type_create_hvector", new, || {
            let (n, b) = (nonneg(count, "count")?, nonneg(blocklength, "blocklength")?);
            let t = Ty::lookup(old)?;
            derived(
                rmca::Datatype::hvector(n, b, stride, &t.layout()),
                t.base(),
                repeat(t.signature().as_deref(), n.saturating_mul(b)),
            )
        })
    }
}

/// Block lengths of an indexed or struct constructor.
///
/// # Safety
/// `p` holds `n` ints.
unsafe fn blocklengths(p: *const c_int, n: usize) -> MpiResult<Vec<usize>> {
    // SAFETY: the caller's contract.
    unsafe { array(p, n, "blocklengths")? }
        .into_iter()
        .map(|b| nonneg(b, "blocklength"))
        .collect()
}

/// `MPI_Type_indexed`: displacements in elements of the old type.
#[export]
pub unsafe extern "C" fn MPI_Type_indexed(
    count: c_int,
    blocklens: *const c_int,
    displs: *const c_int,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_indexed's contract: `count` block lengths and displacements.
    unsafe {
        create("MPI_Type_indexed", new, || {
            let n = nonneg(count, "count")?;
            let bl = blocklengths(blocklens, n)?;
            let d: Vec<isize> = array(displs, n, "displacements")?
                .into_iter()
                .map(|d| d as isize)
                .collect();
            let t = Ty::lookup(old)?;
            derived(
                rmca::Datatype::indexed(&bl, &d, &t.layout()),
                t.base(),
                repeat(t.signature().as_deref(), bl.iter().sum()),
            )
        })
    }
}

/// `MPI_Type_create_hindexed`: displacements in bytes.
#[export]
pub unsafe extern "C" fn MPI_Type_create_hindexed(
    count: c_int,
    blocklens: *const c_int,
    displs: *const isize,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_create_hindexed's contract: `count` block lengths and displacements.
    unsafe {
        create("MPI_Type_create_hindexed", new, || {
            let n = nonneg(count, "count")?;
            let bl = blocklengths(blocklens, n)?;
            let d = array(displs, n, "displacements")?;
            let t = Ty::lookup(old)?;
            derived(
                rmca::Datatype::hindexed(&bl, &d, &t.layout()),
                t.base(),
                repeat(t.signature().as_deref(), bl.iter().sum()),
            )
        })
    }
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
        create("MPI_Type_create_struct", new, || {
            let n = nonneg(count, "count")?;
            let bl = blocklengths(blocklens, n)?;
            let d = array(displs, n, "displacements")?;
            let tys = array(types, n, "types")?
                .into_iter()
                .map(Ty::lookup)
                .collect::<MpiResult<Vec<_>>>()?;
            let layouts: Vec<rmca::Datatype> = tys.iter().map(Ty::layout).collect();
            let bases: Vec<Option<Handle>> = tys.iter().map(Ty::base).collect();
            let base = match bases.first() {
                Some(&b) if bases.iter().all(|&x| x == b) => b,
                _ => None,
            };
            let blocks: Vec<(usize, &Ty)> = bl.iter().copied().zip(tys.iter()).collect();
            derived(
                rmca::Datatype::structure(&bl, &d, &layouts),
                base,
                concat(&blocks),
            )
        })
    }
}

/// `MPI_Type_create_resized`.
#[export]
pub unsafe extern "C" fn MPI_Type_create_resized(
    old: Handle,
    lb: isize,
    extent: isize,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_create_resized's contract for `new`.
    unsafe {
        create("MPI_Type_create_resized", new, || {
            let t = Ty::lookup(old)?;
            derived(
                rmca::Datatype::resized(&t.layout(), lb, extent),
                t.base(),
                t.signature(),
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
        create("MPI_Type_create_subarray", new, || {
            let n = nonneg(ndims, "ndims")?;
            let read = |p, what| -> MpiResult<Vec<usize>> {
                array(p, n, what)?
                    .into_iter()
                    .map(|v| nonneg(v, what))
                    .collect()
            };
            let (mut sz, mut sub, mut st) = (
                read(sizes, "sizes")?,
                read(subsizes, "subsizes")?,
                read(starts, "starts")?,
            );
            match order {
                MPI_ORDER_C => {}
                // Fortran order: the first dimension varies fastest, C order reversed.
                MPI_ORDER_FORTRAN => {
                    sz.reverse();
                    sub.reverse();
                    st.reverse();
                }
                _ => {
                    return Err(MpiError::new(
                        MPI_ERR_ARG,
                        format!("order {order} is invalid: MPI_ORDER_C or MPI_ORDER_FORTRAN"),
                    ))
                }
            }
            let t = Ty::lookup(old)?;
            let elems = sub.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
            derived(
                rmca::Datatype::subarray(&sz, &sub, &st, &t.layout()),
                t.base(),
                elems.and_then(|e| repeat(t.signature().as_deref(), e)),
            )
        })
    }
}

/// The derived type index of `h`, or the error for a predefined/invalid one.
fn derived_index(h: Handle, fname: &str) -> MpiResult<usize> {
    if dtype::lookup(h).is_some() {
        return Err(type_error(format!(
            "{fname} on a predefined datatype: only derived datatypes are committed or freed"
        )));
    }
    Ty::lookup(h)?;
    Ok(h - TYPE_BASE)
}

/// `MPI_Type_commit`.
#[export]
pub unsafe extern "C" fn MPI_Type_commit(datatype: *mut Handle) -> c_int {
    call("MPI_Type_commit", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        if datatype.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the datatype argument is NULL"));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { datatype.read() };
        let i = derived_index(h, "MPI_Type_commit")?;
        TYPES.with(|t| {
            if let Some(Some(d)) = t.borrow_mut().get_mut(i) {
                Rc::make_mut(d).committed = true;
            }
        });
        Ok(())
    })
}

/// `MPI_Type_free`: the handle becomes `MPI_DATATYPE_NULL`; calls in progress keep their
/// own reference to the layout.
#[export]
pub unsafe extern "C" fn MPI_Type_free(datatype: *mut Handle) -> c_int {
    call("MPI_Type_free", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        if datatype.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the datatype argument is NULL"));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { datatype.read() };
        let i = derived_index(h, "MPI_Type_free")?;
        TYPES.with(|t| t.borrow_mut()[i] = None);
        // SAFETY: as above.
        unsafe { datatype.write(MPI_DATATYPE_NULL) };
        Ok(())
    })
}

/// `MPI_Type_size`.
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
/// Both pointers are null or valid for a write of an `MPI_Aint`.
unsafe fn put_bounds(lb: *mut isize, extent: *mut isize, l: isize, e: usize) -> MpiResult<()> {
    // SAFETY: the caller's contract.
    unsafe {
        put(lb, l, "lb")?;
        put(extent, e as isize, "extent")
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
        unsafe { put_bounds(true_lb, true_extent, l.true_lb(), l.true_extent()) }
    })
}

/// `MPI_Type_create_indexed_block`: blocks of one length at displacements in elements of the
/// old type.
#[export]
pub unsafe extern "C" fn MPI_Type_create_indexed_block(
    count: c_int,
    blocklength: c_int,
    displs: *const c_int,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_create_indexed_block's contract: `count` displacements.
    unsafe {
        create("MPI_Type_create_indexed_block", new, || {
            let n = nonneg(count, "count")?;
            let b = nonneg(blocklength, "blocklength")?;
            let d: Vec<isize> = array(displs, n, "displacements")?
                .into_iter()
                .map(|d| d as isize)
                .collect();
            let t = Ty::lookup(old)?;
            derived(
                rmca::Datatype::indexed(&vec![b; n], &d, &t.layout()),
                t.base(),
                repeat(t.signature().as_deref(), n.saturating_mul(b)),
            )
        })
    }
}

/// `MPI_Type_create_hindexed_block`: blocks of one length at displacements in bytes.
#[export]
pub unsafe extern "C" fn MPI_Type_create_hindexed_block(
    count: c_int,
    blocklength: c_int,
    displs: *const isize,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_create_hindexed_block's contract: `count` displacements.
    unsafe {
        create("MPI_Type_create_hindexed_block", new, || {
            let n = nonneg(count, "count")?;
            let b = nonneg(blocklength, "blocklength")?;
            let d = array(displs, n, "displacements")?;
            let t = Ty::lookup(old)?;
            derived(
                rmca::Datatype::hindexed(&vec![b; n], &d, &t.layout()),
                t.base(),
                repeat(t.signature().as_deref(), n.saturating_mul(b)),
            )
        })
    }
}

/// `MPI_Type_dup`: a new handle with the same layout, committed if the old one is (a
/// predefined type's duplicate is a committed derived type).
#[export]
pub unsafe extern "C" fn MPI_Type_dup(old: Handle, new: *mut Handle) -> c_int {
    // SAFETY: MPI_Type_dup's contract for `new`.
    unsafe {
        create("MPI_Type_dup", new, || match Ty::lookup(old)? {
            Ty::Derived(d) => Ok((*d).clone()),
            t @ Ty::Predefined(..) => {
                let mut d = derived(Ok(t.layout()), t.base(), t.signature())?;
                d.committed = true;
                Ok(d)
            }
        })
    }
}

/// What `MPI_Pack` and `MPI_Unpack` check alike: `count` instances of `datatype` to move
/// through `*position` of the packed buffer of `size` bytes (`packed`, the output of
/// `MPI_Pack` or the input of `MPI_Unpack`), whose data buffer is `data`. Returns the type,
/// the count, the position and the packed length, which fits the buffer from the position.
///
/// # Safety
/// `position` is null or valid for a read.
unsafe fn packed_span(
    call: &str,
    count: c_int,
    datatype: Handle,
    position: *const c_int,
    size: c_int,
    (packed, data): (*const c_void, *const c_void),
) -> MpiResult<(Ty, usize, usize, usize)> {
    let (what, count_name) = if call == "MPI_Pack" {
        ("output", "incount")
    } else {
        ("input", "outcount")
    };
    let n = nonneg(count, count_name)?;
    let ty = Ty::for_use(datatype)?;
    if position.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "the position argument is NULL"));
    }
    let size = nonneg(size, &format!("{what} size"))?;
    // SAFETY: the caller's contract, non-null checked.
    let pos = unsafe { position.read() };
    let pos = match usize::try_from(pos) {
        Ok(p) if p <= size => p,
        _ => {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("position {pos} is outside the {what} buffer of {size} B"),
            ))
        }
    };
    let len = ty.packed_len(n)?;
    if len > size - pos {
        let hint = if call == "MPI_Pack" {
            " (MPI_Pack_size tells the room needed)"
        } else {
            ""
        };
        return Err(MpiError::new(
            MPI_ERR_TRUNCATE,
            format!(
                "{call}: {n} elements take {len} B but the {what} buffer has {} B left at position {pos}{hint}",
                size - pos
            ),
        ));
    }
    if len > 0 && (packed.is_null() || data.is_null()) {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            format!("{call}: a buffer is NULL"),
        ));
    }
    Ok((ty, n, pos, len))
}

/// `MPI_Pack`: the data of `incount` instances of `datatype` at `inbuf`, in type-map order,
/// appended at `*position` of `outbuf` (rmca's packed form is the data itself, native
/// representation, no header: a message of `MPI_PACKED` matches the datatype's).
#[export]
pub unsafe extern "C" fn MPI_Pack(
    inbuf: *const c_void,
    incount: c_int,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: c_int,
    position: *mut c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Pack", comm, || {
        super::communicator(comm)?;
        // SAFETY: MPI_Pack's contract: `position` is the caller's int.
        let (ty, n, pos, len) = unsafe {
            packed_span(
                "MPI_Pack",
                incount,
                datatype,
                position,
                outsize,
                (outbuf.cast_const(), inbuf),
            )?
        };
        // SAFETY: MPI_Pack's contract: `inbuf` holds `incount` instances, `outbuf` holds
        // `outsize` bytes (with `len` left at `pos`, checked above).
        unsafe {
            let data = ty.pack(inbuf, n)?;
            std::ptr::copy_nonoverlapping(data.as_ptr(), outbuf.cast::<u8>().add(pos), len);
            position.write((pos + len) as c_int);
        }
        Ok(())
    })
}

/// `MPI_Unpack`: `outcount` instances of `datatype` into `outbuf` from `*position` of
/// `inbuf` (see [`MPI_Pack`]).
#[export]
pub unsafe extern "C" fn MPI_Unpack(
    inbuf: *const c_void,
    insize: c_int,
    position: *mut c_int,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Unpack", comm, || {
        super::communicator(comm)?;
        // SAFETY: MPI_Unpack's contract: `position` is the caller's int.
        let (ty, n, pos, len) = unsafe {
            packed_span(
                "MPI_Unpack",
                outcount,
                datatype,
                position,
                insize,
                (inbuf, outbuf.cast_const()),
            )?
        };
        // SAFETY: MPI_Unpack's contract: `inbuf` holds `insize` bytes (with `len` left at
        // `pos`, checked above), `outbuf` holds `outcount` instances.
        unsafe {
            let data = std::slice::from_raw_parts(inbuf.cast::<u8>().add(pos), len);
            ty.unpack(data, outbuf, n);
            position.write((pos + len) as c_int);
        }
        Ok(())
    })
}

/// `MPI_Pack_size`: the bytes `MPI_Pack` needs for `incount` instances (exactly their data:
/// rmca's packed form has no header).
#[export]
pub unsafe extern "C" fn MPI_Pack_size(
    incount: c_int,
    datatype: Handle,
    comm: Handle,
    size: *mut c_int,
) -> c_int {
    call("MPI_Pack_size", comm, || {
        super::communicator(comm)?;
        let n = nonneg(incount, "incount")?;
        let len = Ty::for_use(datatype)?.packed_len(n)?;
        let len = c_int::try_from(len).map_err(|_| {
            MpiError::new(
                MPI_ERR_COUNT,
                format!("{n} elements pack into {len} B, more than an int can hold"),
            )
        })?;
        // SAFETY: the caller's int.
        unsafe { put(size, len, "size") }
    })
}
