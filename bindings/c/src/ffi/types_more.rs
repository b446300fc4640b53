//! The rest of the datatype calls: packing (native and external32), the queries of a
//! type's size, bounds, name, envelope and contents (with their large-count forms), status
//! element counts, `MPI_Type_create_darray`, and the type-matching calls.
#![allow(non_snake_case)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::rc::Rc;

use super::types::{
    add, array, c_order, combiner, derived, put_bounds, type_error, Arg, Contents, Ty,
};
use super::{call, put};
use crate::abi::*;
use crate::dtype;
use crate::state::{self, Confined, MpiError, MpiResult};
use rmca_mpi_export::export;

/// A packing position or buffer size: `int` (`MPI_Pack`), `MPI_Aint` (`MPI_Pack_external`)
/// or `MPI_Count` (the `_c` forms).
trait Pos: Copy + std::fmt::Display {
    fn wide(self) -> i128;
    fn from_usize(n: usize) -> Option<Self>;
}

impl Pos for c_int {
    fn wide(self) -> i128 {
        self.into()
    }
    fn from_usize(n: usize) -> Option<Self> {
        n.try_into().ok()
    }
}

impl Pos for isize {
    fn wide(self) -> i128 {
        self as i128
    }
    fn from_usize(n: usize) -> Option<Self> {
        n.try_into().ok()
    }
}

impl Pos for i64 {
    fn wide(self) -> i128 {
        self.into()
    }
    fn from_usize(n: usize) -> Option<Self> {
        n.try_into().ok()
    }
}

/// The packed representation of a pack call.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rep {
    /// rmca's own: the data in type-map order, native representation, no header.
    Native,
    /// MPI's "external32": big-endian, each basic type at its standard size.
    External32,
}

fn count_of<C: Pos>(n: C, what: &str) -> MpiResult<usize> {
    usize::try_from(n.wide())
        .ok()
        .filter(|&v| v <= isize::MAX as usize)
        .ok_or_else(|| {
            MpiError::new(
                MPI_ERR_COUNT,
                format!("{what} {n} is invalid: counts are >= 0"),
            )
        })
}

/// The bytes one basic element of predefined type `h` takes in external32, the number of
/// its components (a complex number: 2), and whether it is a signed integer (for widening
/// back to a larger native size).
fn external32(h: Handle) -> (usize, usize, bool) {
    let t = dtype::lookup(h).expect("a signature names predefined types");
    match t.name {
        "MPI_LONG" => (4, 1, true),
        "MPI_UNSIGNED_LONG" => (4, 1, false),
        "MPI_WCHAR" => (2, 1, false),
        _ if t.class == dtype::Class::Complex => (t.size, 2, false),
        _ => (t.size, 1, false),
    }
}

/// The external32 size of `count` instances of `ty`.
fn external32_len(ty: &Ty, count: usize, what: &str) -> MpiResult<usize> {
    if ty.size() == 0 || count == 0 {
        return Ok(0);
    }
    // One instance's external size, times the count.
    let one: usize = ty
        .elements_of(1, what)?
        .iter()
        .map(|&(h, n)| external32(h).0 * n)
        .sum();
    one.checked_mul(count)
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| MpiError::new(MPI_ERR_COUNT, format!("{what}: {count} elements overflow")))
}

/// Convert packed native data (`native`, in type-map order) to external32 in `out`.
fn to_external32(native: &[u8], sig: &[(Handle, usize)], out: &mut [u8]) {
    let (mut i, mut o) = (0, 0);
    for &(h, n) in sig {
        let size = dtype::lookup(h).map_or(0, |t| t.size);
        let (ext, parts, _) = external32(h);
        for _ in 0..n {
            if ext == size {
                let part = size / parts;
                for p in 0..parts {
                    let src = &native[i + p * part..i + (p + 1) * part];
                    for (k, b) in src.iter().rev().enumerate() {
                        out[o + p * part + k] = *b;
                    }
                }
            } else {
                // A narrower standard size: the low-order bytes, big-endian.
                let v = &native[i..i + size];
                for k in 0..ext {
                    out[o + k] = v[ext - 1 - k];
                }
            }
            i += size;
            o += ext;
        }
    }
}

/// Convert external32 data back to packed native data.
fn from_external32(ext_data: &[u8], sig: &[(Handle, usize)], native: &mut [u8]) {
    let (mut i, mut o) = (0, 0);
    for &(h, n) in sig {
        let size = dtype::lookup(h).map_or(0, |t| t.size);
        let (ext, parts, signed) = external32(h);
        for _ in 0..n {
            if ext == size {
                let part = size / parts;
                for p in 0..parts {
                    let src = &ext_data[i + p * part..i + (p + 1) * part];
                    for (k, b) in src.iter().rev().enumerate() {
                        native[o + p * part + k] = *b;
                    }
                }
            } else {
                let fill = if signed && ext_data[i] & 0x80 != 0 {
                    0xff
                } else {
                    0
                };
                let v = &mut native[o..o + size];
                v.fill(fill);
                for k in 0..ext {
                    v[k] = ext_data[i + ext - 1 - k];
                }
            }
            i += ext;
            o += size;
        }
    }
}

/// The datarep argument of the external calls: only "external32".
///
/// # Safety
/// `datarep` is null or a NUL-terminated string.
unsafe fn datarep(datarep: *const c_char) -> MpiResult<()> {
    if datarep.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "the datarep argument is NULL"));
    }
    // SAFETY: the caller's contract.
    let s = unsafe { std::ffi::CStr::from_ptr(datarep) };
    if s.to_bytes() != b"external32" {
        return Err(MpiError::new(
            54, // MPI_ERR_UNSUPPORTED_DATAREP
            format!(
                "data representation {:?} is not supported: \"external32\" is the one the pack calls take",
                s.to_string_lossy()
            ),
        ));
    }
    Ok(())
}

/// Checked arguments of a pack or unpack: the type, the count, the position and the
/// packed length, which fits the buffer from the position.
struct Span {
    ty: Ty,
    n: usize,
    pos: usize,
    len: usize,
}

/// What the pack and unpack calls check alike: `count` instances of `datatype` to move
/// through `*position` of the packed buffer of `size` bytes (`packed`, the output of a pack
/// or the input of an unpack), whose data buffer is `data`.
///
/// # Safety
/// `position` is null or valid for a read.
unsafe fn packed_span<C: Pos, P: Pos>(
    fname: &str,
    packing: bool,
    rep: Rep,
    (count, datatype): (C, Handle),
    position: *const P,
    size: P,
    (packed, data): (*const c_void, *const c_void),
) -> MpiResult<Span> {
    let (what, count_name) = if packing {
        ("output", "incount")
    } else {
        ("input", "outcount")
    };
    let n = count_of(count, count_name)?;
    let ty = Ty::for_use(datatype)?;
    if position.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "the position argument is NULL"));
    }
    let size = count_of(size, &format!("{what} size"))?;
    // SAFETY: the caller's contract, non-null checked.
    let pos = unsafe { position.read() };
    let pos = match usize::try_from(pos.wide()) {
        Ok(p) if p <= size => p,
        _ => {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("position {pos} is outside the {what} buffer of {size} B"),
            ))
        }
    };
    let len = match rep {
        Rep::Native => ty.packed_len(n)?,
        Rep::External32 => external32_len(&ty, n, fname)?,
    };
    if len > size - pos {
        let hint = if packing {
            " (the pack size call tells the room needed)"
        } else {
            ""
        };
        return Err(MpiError::new(
            MPI_ERR_TRUNCATE,
            format!(
                "{fname}: {n} elements take {len} B but the {what} buffer has {} B left at position {pos}{hint}",
                size - pos
            ),
        ));
    }
    // The typed buffer may be MPI_BOTTOM (NULL) when the datatype's displacements are
    // absolute addresses (MPICH's struct_pack_mpi_bottom): only data that would start at
    // address 0 is refused there.
    if len > 0 && (packed.is_null() || (data.is_null() && ty.layout().true_lb() == 0)) {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            format!("{fname}: a buffer is NULL"),
        ));
    }
    Ok(Span { ty, n, pos, len })
}

/// Store the new position.
///
/// # Safety
/// `position` is valid for a write.
unsafe fn advance<P: Pos>(position: *mut P, to: usize) -> MpiResult<()> {
    let p = P::from_usize(to)
        .ok_or_else(|| MpiError::new(MPI_ERR_COUNT, format!("position {to} overflows")))?;
    // SAFETY: the caller's contract.
    unsafe { position.write(p) };
    Ok(())
}

/// The pack calls: the data of `incount` instances of `datatype` at `inbuf`, in type-map
/// order and representation `rep`, at `*position` of `outbuf`.
///
/// # Safety
/// The MPI contract of the pack calls.
#[allow(clippy::too_many_arguments)]
unsafe fn pack<C: Pos, P: Pos>(
    fname: &'static str,
    rep: Rep,
    inbuf: *const c_void,
    incount: C,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: P,
    position: *mut P,
    comm: Handle,
) -> c_int {
    call(fname, comm, || {
        if rep == Rep::Native {
            super::communicator(comm)?;
        } else {
            state::with(|_| Ok(()))?;
        }
        // SAFETY: the call's contract: `position` is the caller's.
        let s = unsafe {
            packed_span(
                fname,
                true,
                rep,
                (incount, datatype),
                position,
                outsize,
                (outbuf.cast_const(), inbuf),
            )?
        };
        if s.len == 0 {
            // SAFETY: the caller's position.
            return unsafe { advance(position, s.pos) };
        }
        // SAFETY: the call's contract: `inbuf` holds `incount` instances, `outbuf` holds
        // `outsize` bytes (with `len` left at `pos`, checked above).
        unsafe {
            let out = std::slice::from_raw_parts_mut(outbuf.cast::<u8>().add(s.pos), s.len);
            match rep {
                Rep::Native => s.ty.pack_into(inbuf, s.n, out),
                Rep::External32 => {
                    let sig = s.ty.elements_of(s.n, fname)?;
                    let native = s.ty.pack(inbuf, s.n)?;
                    to_external32(&native, &sig, out);
                }
            }
            advance(position, s.pos + s.len)
        }
    })
}

/// The unpack calls: `outcount` instances of `datatype` into `outbuf` from `*position` of
/// `inbuf`.
///
/// # Safety
/// The MPI contract of the unpack calls.
#[allow(clippy::too_many_arguments)]
unsafe fn unpack<C: Pos, P: Pos>(
    fname: &'static str,
    rep: Rep,
    inbuf: *const c_void,
    insize: P,
    position: *mut P,
    outbuf: *mut c_void,
    outcount: C,
    datatype: Handle,
    comm: Handle,
) -> c_int {
    call(fname, comm, || {
        if rep == Rep::Native {
            super::communicator(comm)?;
        } else {
            state::with(|_| Ok(()))?;
        }
        // SAFETY: the call's contract: `position` is the caller's.
        let s = unsafe {
            packed_span(
                fname,
                false,
                rep,
                (outcount, datatype),
                position,
                insize,
                (inbuf, outbuf.cast_const()),
            )?
        };
        if s.len == 0 {
            // SAFETY: the caller's position.
            return unsafe { advance(position, s.pos) };
        }
        // SAFETY: the call's contract: `inbuf` holds `insize` bytes (with `len` left at
        // `pos`, checked above), `outbuf` holds `outcount` instances.
        unsafe {
            let data = std::slice::from_raw_parts(inbuf.cast::<u8>().add(s.pos), s.len);
            match rep {
                Rep::Native => s.ty.unpack(data, outbuf, s.n),
                Rep::External32 => {
                    let sig = s.ty.elements_of(s.n, fname)?;
                    let mut native = vec![0u8; s.ty.packed_len(s.n)?];
                    from_external32(data, &sig, &mut native);
                    s.ty.unpack(&native, outbuf, s.n);
                }
            }
            advance(position, s.pos + s.len)
        }
    })
}

/// `MPI_Pack`: rmca's packed form is the data itself, native representation, no header
/// (a message of `MPI_PACKED` matches the datatype's).
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
    // SAFETY: MPI_Pack's contract.
    unsafe {
        pack(
            "MPI_Pack",
            Rep::Native,
            inbuf,
            incount,
            datatype,
            outbuf,
            outsize,
            position,
            comm,
        )
    }
}

/// `MPI_Pack_c`.
#[export]
pub unsafe extern "C" fn MPI_Pack_c(
    inbuf: *const c_void,
    incount: MPI_Count,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: MPI_Count,
    position: *mut MPI_Count,
    comm: Handle,
) -> c_int {
    // SAFETY: MPI_Pack_c's contract.
    unsafe {
        pack(
            "MPI_Pack_c",
            Rep::Native,
            inbuf,
            incount,
            datatype,
            outbuf,
            outsize,
            position,
            comm,
        )
    }
}

/// `MPI_Unpack`.
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
    // SAFETY: MPI_Unpack's contract.
    unsafe {
        unpack(
            "MPI_Unpack",
            Rep::Native,
            inbuf,
            insize,
            position,
            outbuf,
            outcount,
            datatype,
            comm,
        )
    }
}

/// `MPI_Unpack_c`.
#[export]
pub unsafe extern "C" fn MPI_Unpack_c(
    inbuf: *const c_void,
    insize: MPI_Count,
    position: *mut MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    datatype: Handle,
    comm: Handle,
) -> c_int {
    // SAFETY: MPI_Unpack_c's contract.
    unsafe {
        unpack(
            "MPI_Unpack_c",
            Rep::Native,
            inbuf,
            insize,
            position,
            outbuf,
            outcount,
            datatype,
            comm,
        )
    }
}

/// `MPI_Pack_external`: big-endian, standard sizes ("external32").
#[export]
pub unsafe extern "C" fn MPI_Pack_external(
    rep: *const c_char,
    inbuf: *const c_void,
    incount: c_int,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: MPI_Aint,
    position: *mut MPI_Aint,
) -> c_int {
    // SAFETY: MPI_Pack_external's contract.
    let r = call("MPI_Pack_external", MPI_COMM_WORLD, || unsafe {
        datarep(rep)
    });
    if r != MPI_SUCCESS {
        return r;
    }
    // SAFETY: MPI_Pack_external's contract.
    unsafe {
        pack(
            "MPI_Pack_external",
            Rep::External32,
            inbuf,
            incount,
            datatype,
            outbuf,
            outsize,
            position,
            MPI_COMM_WORLD,
        )
    }
}

/// `MPI_Pack_external_c`.
#[export]
pub unsafe extern "C" fn MPI_Pack_external_c(
    rep: *const c_char,
    inbuf: *const c_void,
    incount: MPI_Count,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: MPI_Count,
    position: *mut MPI_Count,
) -> c_int {
    // SAFETY: MPI_Pack_external_c's contract.
    let r = call("MPI_Pack_external_c", MPI_COMM_WORLD, || unsafe {
        datarep(rep)
    });
    if r != MPI_SUCCESS {
        return r;
    }
    // SAFETY: MPI_Pack_external_c's contract.
    unsafe {
        pack(
            "MPI_Pack_external_c",
            Rep::External32,
            inbuf,
            incount,
            datatype,
            outbuf,
            outsize,
            position,
            MPI_COMM_WORLD,
        )
    }
}

/// `MPI_Unpack_external`.
#[export]
pub unsafe extern "C" fn MPI_Unpack_external(
    rep: *const c_char,
    inbuf: *const c_void,
    insize: MPI_Aint,
    position: *mut MPI_Aint,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: Handle,
) -> c_int {
    // SAFETY: MPI_Unpack_external's contract.
    let r = call("MPI_Unpack_external", MPI_COMM_WORLD, || unsafe {
        datarep(rep)
    });
    if r != MPI_SUCCESS {
        return r;
    }
    // SAFETY: MPI_Unpack_external's contract.
    unsafe {
        unpack(
            "MPI_Unpack_external",
            Rep::External32,
            inbuf,
            insize,
            position,
            outbuf,
            outcount,
            datatype,
            MPI_COMM_WORLD,
        )
    }
}

/// `MPI_Unpack_external_c`.
#[export]
pub unsafe extern "C" fn MPI_Unpack_external_c(
    rep: *const c_char,
    inbuf: *const c_void,
    insize: MPI_Count,
    position: *mut MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    datatype: Handle,
) -> c_int {
    // SAFETY: MPI_Unpack_external_c's contract.
    let r = call("MPI_Unpack_external_c", MPI_COMM_WORLD, || unsafe {
        datarep(rep)
    });
    if r != MPI_SUCCESS {
        return r;
    }
    // SAFETY: MPI_Unpack_external_c's contract.
    unsafe {
        unpack(
            "MPI_Unpack_external_c",
            Rep::External32,
            inbuf,
            insize,
            position,
            outbuf,
            outcount,
            datatype,
            MPI_COMM_WORLD,
        )
    }
}

/// The pack size calls.
///
/// # Safety
/// `size` is null or valid for a write.
unsafe fn pack_size<C: Pos, S: Pos>(
    fname: &'static str,
    rep: Rep,
    incount: C,
    datatype: Handle,
    comm: Handle,
    size: *mut S,
) -> c_int {
    call(fname, comm, || {
        if rep == Rep::Native {
            super::communicator(comm)?;
        } else {
            state::with(|_| Ok(()))?;
        }
        let n = count_of(incount, "incount")?;
        let ty = Ty::for_use(datatype)?;
        let len = match rep {
            Rep::Native => ty.packed_len(n)?,
            Rep::External32 => external32_len(&ty, n, fname)?,
        };
        let len = S::from_usize(len).ok_or_else(|| {
            MpiError::new(
                MPI_ERR_COUNT,
                format!("{n} elements pack into {len} B, more than the size argument can hold"),
            )
        })?;
        // SAFETY: the caller's contract.
        unsafe { put(size, len, "size") }
    })
}

/// `MPI_Pack_size`: exactly the data's size (rmca's packed form has no header).
#[export]
pub unsafe extern "C" fn MPI_Pack_size(
    incount: c_int,
    datatype: Handle,
    comm: Handle,
    size: *mut c_int,
) -> c_int {
    // SAFETY: MPI_Pack_size's contract.
    unsafe { pack_size("MPI_Pack_size", Rep::Native, incount, datatype, comm, size) }
}

/// `MPI_Pack_size_c`.
#[export]
pub unsafe extern "C" fn MPI_Pack_size_c(
    incount: MPI_Count,
    datatype: Handle,
    comm: Handle,
    size: *mut MPI_Count,
) -> c_int {
    // SAFETY: MPI_Pack_size_c's contract.
    unsafe {
        pack_size(
            "MPI_Pack_size_c",
            Rep::Native,
            incount,
            datatype,
            comm,
            size,
        )
    }
}

/// `MPI_Pack_external_size`.
#[export]
pub unsafe extern "C" fn MPI_Pack_external_size(
    rep: *const c_char,
    incount: c_int,
    datatype: Handle,
    size: *mut MPI_Aint,
) -> c_int {
    // SAFETY: MPI_Pack_external_size's contract.
    let r = call("MPI_Pack_external_size", MPI_COMM_WORLD, || unsafe {
        datarep(rep)
    });
    if r != MPI_SUCCESS {
        return r;
    }
    // SAFETY: as above.
    unsafe {
        pack_size(
            "MPI_Pack_external_size",
            Rep::External32,
            incount,
            datatype,
            MPI_COMM_WORLD,
            size,
        )
    }
}

/// `MPI_Pack_external_size_c`.
#[export]
pub unsafe extern "C" fn MPI_Pack_external_size_c(
    rep: *const c_char,
    incount: MPI_Count,
    datatype: Handle,
    size: *mut MPI_Count,
) -> c_int {
    // SAFETY: MPI_Pack_external_size_c's contract.
    let r = call("MPI_Pack_external_size_c", MPI_COMM_WORLD, || unsafe {
        datarep(rep)
    });
    if r != MPI_SUCCESS {
        return r;
    }
    // SAFETY: as above.
    unsafe {
        pack_size(
            "MPI_Pack_external_size_c",
            Rep::External32,
            incount,
            datatype,
            MPI_COMM_WORLD,
            size,
        )
    }
}

/// `MPI_Get_address`: the address of `location` as an `MPI_Aint` (so that differences of
/// addresses are byte displacements).
#[export]
pub unsafe extern "C" fn MPI_Get_address(location: *const c_void, address: *mut MPI_Aint) -> c_int {
    call("MPI_Get_address", MPI_COMM_WORLD, || {
        // SAFETY: the caller's MPI_Aint.
        unsafe { put(address, location as MPI_Aint, "address") }
    })
}

/// Names given to predefined datatypes with `MPI_Type_set_name`.
static PREDEFINED_NAMES: Confined<HashMap<Handle, String>> =
    Confined::new("predefined datatype names");

/// The name `MPI_Type_get_name` gives predefined type `h`: where two standard names are one
/// handle in the ABI, the older one, as MPICH answers (its test suite accepts it for both).
fn standard_name(h: Handle, t: &dtype::Datatype) -> &'static str {
    match h {
        0x20b => "MPI_LONG_LONG_INT", // = MPI_LONG_LONG
        0x212 => "MPI_C_COMPLEX",     // = MPI_C_FLOAT_COMPLEX
        _ => t.name,
    }
}

/// `MPI_Type_get_name`: the name set, the standard's for a predefined type ("MPI_INT"),
/// empty for a derived type never named.
#[export]
pub unsafe extern "C" fn MPI_Type_get_name(
    datatype: Handle,
    name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    call("MPI_Type_get_name", MPI_COMM_WORLD, || {
        // The null handle has its name, as in MPICH and Open MPI (mpi4py asks for it).
        let s = if datatype == MPI_DATATYPE_NULL {
            "MPI_DATATYPE_NULL".to_owned()
        } else {
            match Ty::lookup(datatype)? {
                Ty::Predefined(h, t) => PREDEFINED_NAMES
                    .with(|n| n.get(&h).cloned())?
                    .unwrap_or_else(|| standard_name(h, &t).to_owned()),
                Ty::Derived(d) => d.name.borrow().clone(),
            }
        };
        if name.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the type_name argument is NULL"));
        }
        let b = s.as_bytes();
        let n = b.len().min(MPI_MAX_OBJECT_NAME - 1);
        // SAFETY: MPI_Type_get_name's contract: `name` holds MPI_MAX_OBJECT_NAME chars.
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), name.cast::<u8>(), n);
            name.add(n).write(0);
            put(resultlen, n as c_int, "resultlen")
        }
    })
}

/// `MPI_Type_set_name` (cut to `MPI_MAX_OBJECT_NAME - 1` bytes).
#[export]
pub unsafe extern "C" fn MPI_Type_set_name(datatype: Handle, name: *const c_char) -> c_int {
    call("MPI_Type_set_name", MPI_COMM_WORLD, || {
        let t = Ty::lookup(datatype)?;
        if name.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the type_name argument is NULL"));
        }
        // SAFETY: MPI_Type_set_name's contract: a NUL-terminated string.
        let bytes = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
        let mut n = bytes.len().min(MPI_MAX_OBJECT_NAME - 1);
        let s = loop {
            // Cut at a character boundary (the rest is the program's bytes as they are).
            match std::str::from_utf8(&bytes[..n]) {
                Ok(s) => break s.to_owned(),
                Err(e) if e.valid_up_to() < n && e.error_len().is_none() => n = e.valid_up_to(),
                Err(_) => break String::from_utf8_lossy(&bytes[..n]).into_owned(),
            }
        };
        match t {
            Ty::Predefined(h, _) => PREDEFINED_NAMES.with(|m| m.insert(h, s))?,
            Ty::Derived(d) => Some(d.name.replace(s)),
        };
        Ok(())
    })
}

/// `MPI_Type_get_envelope` and `_c` (`large`: with the large-count array).
///
/// # Safety
/// Each pointer is null or valid for a write.
unsafe fn envelope<N: Pos>(
    fname: &'static str,
    datatype: Handle,
    (ni, na, nl, nd): (*mut N, *mut N, Option<*mut N>, *mut N),
    comb: *mut c_int,
) -> c_int {
    call(fname, MPI_COMM_WORLD, || {
        let c = Ty::lookup(datatype)?.contents().unwrap_or_else(|| {
            Rc::new(Contents {
                combiner: combiner::NAMED,
                ..Contents::default()
            })
        });
        if nl.is_none() && !c.large.is_empty() {
            return Err(type_error(format!(
                "{fname}: the datatype was made by a large-count constructor; MPI_Type_get_envelope_c describes it"
            )));
        }
        let n = |v: usize| N::from_usize(v).expect("array lengths fit");
        // SAFETY: the caller's contract.
        unsafe {
            put(ni, n(c.ints.len()), "num_integers")?;
            put(na, n(c.addrs.len()), "num_addresses")?;
            if let Some(nl) = nl {
                put(nl, n(c.large.len()), "num_large_counts")?;
            }
            put(nd, n(c.types.len()), "num_datatypes")?;
            put(comb, c.combiner, "combiner")
        }
    })
}

/// `MPI_Type_get_envelope`: how the type was made (`MPI_COMBINER_NAMED` for a predefined
/// one) and how many arguments of each kind `MPI_Type_get_contents` returns.
#[export]
pub unsafe extern "C" fn MPI_Type_get_envelope(
    datatype: Handle,
    num_integers: *mut c_int,
    num_addresses: *mut c_int,
    num_datatypes: *mut c_int,
    combiner: *mut c_int,
) -> c_int {
    // SAFETY: MPI_Type_get_envelope's contract.
    unsafe {
        envelope(
            "MPI_Type_get_envelope",
            datatype,
            (num_integers, num_addresses, None, num_datatypes),
            combiner,
        )
    }
}

/// `MPI_Type_get_envelope_c`.
#[export]
pub unsafe extern "C" fn MPI_Type_get_envelope_c(
    datatype: Handle,
    num_integers: *mut MPI_Count,
    num_addresses: *mut MPI_Count,
    num_large_counts: *mut MPI_Count,
    num_datatypes: *mut MPI_Count,
    combiner: *mut c_int,
) -> c_int {
    // SAFETY: MPI_Type_get_envelope_c's contract.
    unsafe {
        envelope(
            "MPI_Type_get_envelope_c",
            datatype,
            (
                num_integers,
                num_addresses,
                Some(num_large_counts),
                num_datatypes,
            ),
            combiner,
        )
    }
}

/// Copy `v` into the caller's array of room `max`.
///
/// # Safety
/// `out` holds `max` values (or is null when `v` is empty).
unsafe fn put_array<T: Copy, N: Pos>(v: &[T], out: *mut T, max: N, what: &str) -> MpiResult<()> {
    if v.is_empty() {
        return Ok(());
    }
    if max.wide() < v.len() as i128 {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            format!(
                "max_{what} is {max} but the datatype has {} (MPI_Type_get_envelope tells how many)",
                v.len()
            ),
        ));
    }
    if out.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            format!("the array_of_{what} argument is NULL"),
        ));
    }
    // SAFETY: the caller's contract; room checked.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out, v.len()) };
    Ok(())
}

/// `MPI_Type_get_contents` and `_c`.
///
/// # Safety
/// Each array holds its `max` values.
#[allow(clippy::type_complexity)]
unsafe fn get_contents<N: Pos>(
    fname: &'static str,
    datatype: Handle,
    (mi, ma, ml, md): (N, N, Option<N>, N),
    (ints, addrs, large, types): (*mut c_int, *mut MPI_Aint, *mut MPI_Count, *mut Handle),
) -> c_int {
    call(fname, MPI_COMM_WORLD, || {
        let Some(c) = Ty::lookup(datatype)?.contents() else {
            return Err(type_error(format!(
                "{fname} on a predefined datatype (combiner MPI_COMBINER_NAMED): it has no contents"
            )));
        };
        if ml.is_none() && !c.large.is_empty() {
            return Err(type_error(format!(
                "{fname}: the datatype was made by a large-count constructor; MPI_Type_get_contents_c describes it"
            )));
        }
        // SAFETY: the caller's contract.
        unsafe {
            put_array(&c.ints, ints, mi, "integers")?;
            put_array(&c.addrs, addrs, ma, "addresses")?;
            if let Some(ml) = ml {
                put_array(&c.large, large, ml, "large_counts")?;
            }
            // Derived types come back as new handles the caller frees; predefined ones as
            // themselves.
            let mut handles = Vec::with_capacity(c.types.len());
            for t in &c.types {
                handles.push(match t {
                    Ty::Predefined(h, _) => *h,
                    Ty::Derived(d) if d.permanent => {
                        // The f90 types are predefined to MPI: the same handle.
                        super::types::handle_of(d)?.unwrap_or(MPI_DATATYPE_NULL)
                    }
                    Ty::Derived(d) => add(d.clone())?,
                });
            }
            put_array(&handles, types, md, "datatypes")
        }
    })
}

/// `MPI_Type_get_contents`: the arguments of the constructor that made the type.
#[export]
pub unsafe extern "C" fn MPI_Type_get_contents(
    datatype: Handle,
    max_integers: c_int,
    max_addresses: c_int,
    max_datatypes: c_int,
    integers: *mut c_int,
    addresses: *mut MPI_Aint,
    datatypes: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_get_contents's contract.
    unsafe {
        get_contents(
            "MPI_Type_get_contents",
            datatype,
            (max_integers, max_addresses, None, max_datatypes),
            (integers, addresses, std::ptr::null_mut(), datatypes),
        )
    }
}

/// `MPI_Type_get_contents_c`.
#[export]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn MPI_Type_get_contents_c(
    datatype: Handle,
    max_integers: MPI_Count,
    max_addresses: MPI_Count,
    max_large_counts: MPI_Count,
    max_datatypes: MPI_Count,
    integers: *mut c_int,
    addresses: *mut MPI_Aint,
    large_counts: *mut MPI_Count,
    datatypes: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_get_contents_c's contract.
    unsafe {
        get_contents(
            "MPI_Type_get_contents_c",
            datatype,
            (
                max_integers,
                max_addresses,
                Some(max_large_counts),
                max_datatypes,
            ),
            (integers, addresses, large_counts, datatypes),
        )
    }
}

/// `MPI_Type_size_x` / `_c`: the size as an `MPI_Count`.
///
/// # Safety
/// `size` is null or valid for a write.
unsafe fn size_count(fname: &'static str, datatype: Handle, size: *mut MPI_Count) -> c_int {
    call(fname, MPI_COMM_WORLD, || {
        let s = Ty::lookup(datatype)?.size() as MPI_Count;
        // SAFETY: the caller's MPI_Count.
        unsafe { put(size, s, "size") }
    })
}

/// `MPI_Type_size_x`.
#[export]
pub unsafe extern "C" fn MPI_Type_size_x(datatype: Handle, size: *mut MPI_Count) -> c_int {
    // SAFETY: MPI_Type_size_x's contract.
    unsafe { size_count("MPI_Type_size_x", datatype, size) }
}

/// `MPI_Type_size_c`.
#[export]
pub unsafe extern "C" fn MPI_Type_size_c(datatype: Handle, size: *mut MPI_Count) -> c_int {
    // SAFETY: MPI_Type_size_c's contract.
    unsafe { size_count("MPI_Type_size_c", datatype, size) }
}

/// The extent queries with `MPI_Count` results (`true_`: the true extent).
///
/// # Safety
/// Both pointers are null or valid for a write.
unsafe fn extent_count(
    fname: &'static str,
    true_: bool,
    datatype: Handle,
    lb: *mut MPI_Count,
    extent: *mut MPI_Count,
) -> c_int {
    call(fname, MPI_COMM_WORLD, || {
        let l = Ty::lookup(datatype)?.layout();
        let (a, b) = if true_ {
            (l.true_lb(), l.true_extent() as isize)
        } else {
            (l.lb(), l.extent())
        };
        // SAFETY: the caller's MPI_Counts.
        unsafe { put_bounds::<MPI_Count>(lb, extent, a, b) }
    })
}

macro_rules! extent_fns {
    ($($name:ident, $true_:expr;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: bounds as `MPI_Count`s.")]
        #[export]
        pub unsafe extern "C" fn $name(
            datatype: Handle,
            lb: *mut MPI_Count,
            extent: *mut MPI_Count,
        ) -> c_int {
            // SAFETY: the call's contract.
            unsafe { extent_count(stringify!($name), $true_, datatype, lb, extent) }
        }
    )*};
}

extent_fns! {
    MPI_Type_get_extent_x, false;
    MPI_Type_get_extent_c, false;
    MPI_Type_get_true_extent_x, true;
    MPI_Type_get_true_extent_c, true;
}

/// The byte count a status holds.
///
/// # Safety
/// `status` is null or a valid status.
unsafe fn status_bytes(status: *const MpiStatus) -> MpiResult<usize> {
    if status.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            "the status is NULL (MPI_STATUS_IGNORE cannot be queried)",
        ));
    }
    // SAFETY: non-null, the caller's status.
    Ok(unsafe { status.read() }.bytes() as usize)
}

/// `MPI_Get_count_c`: whole instances received (`MPI_UNDEFINED` when not a whole number).
#[export]
pub unsafe extern "C" fn MPI_Get_count_c(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut MPI_Count,
) -> c_int {
    call("MPI_Get_count_c", MPI_COMM_WORLD, || {
        // SAFETY: the caller's status.
        let bytes = unsafe { status_bytes(status)? };
        let n = match Ty::lookup(datatype)?.size() {
            0 => (bytes == 0).then_some(0),
            s => bytes.is_multiple_of(s).then_some(bytes / s),
        };
        let n = n.map_or(MPI_UNDEFINED.into(), |n| n as MPI_Count);
        // SAFETY: the caller's MPI_Count.
        unsafe { put(count, n, "count") }
    })
}

/// `MPI_Get_elements_x` / `_c`: basic elements received, as an `MPI_Count`.
///
/// # Safety
/// `status` is null or a valid status; `count` null or valid for a write.
unsafe fn elements_count(
    fname: &'static str,
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut MPI_Count,
) -> c_int {
    call(fname, MPI_COMM_WORLD, || {
        // SAFETY: the caller's status.
        let bytes = unsafe { status_bytes(status)? };
        let n = Ty::lookup(datatype)?.elements(bytes)?;
        let n = n.map_or(MPI_UNDEFINED.into(), |n| n as MPI_Count);
        // SAFETY: the caller's MPI_Count.
        unsafe { put(count, n, "count") }
    })
}

/// `MPI_Get_elements_x`.
#[export]
pub unsafe extern "C" fn MPI_Get_elements_x(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut MPI_Count,
) -> c_int {
    // SAFETY: MPI_Get_elements_x's contract.
    unsafe { elements_count("MPI_Get_elements_x", status, datatype, count) }
}

/// `MPI_Get_elements_c`.
#[export]
pub unsafe extern "C" fn MPI_Get_elements_c(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut MPI_Count,
) -> c_int {
    // SAFETY: MPI_Get_elements_c's contract.
    unsafe { elements_count("MPI_Get_elements_c", status, datatype, count) }
}

/// `MPI_Status_set_elements` and its forms: the status says `count` basic elements of
/// `datatype` were received (as bytes, so that `MPI_Get_count` and `MPI_Get_elements`
/// answer accordingly).
///
/// # Safety
/// `status` is null or valid for a write.
unsafe fn set_elements<C: Pos>(
    fname: &'static str,
    status: *mut MpiStatus,
    datatype: Handle,
    count: C,
) -> c_int {
    call(fname, MPI_COMM_WORLD, || {
        let n = count_of(count, "count")?;
        let bytes = Ty::lookup(datatype)?.bytes_of_elements(n)?;
        if status.is_null() {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                "the status is NULL (MPI_STATUS_IGNORE cannot be set)",
            ));
        }
        // SAFETY: non-null, the caller's status.
        unsafe { (*status).set_bytes(bytes as u64) };
        Ok(())
    })
}

/// `MPI_Status_set_elements`.
#[export]
pub unsafe extern "C" fn MPI_Status_set_elements(
    status: *mut MpiStatus,
    datatype: Handle,
    count: c_int,
) -> c_int {
    // SAFETY: MPI_Status_set_elements's contract.
    unsafe { set_elements("MPI_Status_set_elements", status, datatype, count) }
}

/// `MPI_Status_set_elements_x`.
#[export]
pub unsafe extern "C" fn MPI_Status_set_elements_x(
    status: *mut MpiStatus,
    datatype: Handle,
    count: MPI_Count,
) -> c_int {
    // SAFETY: MPI_Status_set_elements_x's contract.
    unsafe { set_elements("MPI_Status_set_elements_x", status, datatype, count) }
}

/// `MPI_Status_set_elements_c`.
#[export]
pub unsafe extern "C" fn MPI_Status_set_elements_c(
    status: *mut MpiStatus,
    datatype: Handle,
    count: MPI_Count,
) -> c_int {
    // SAFETY: MPI_Status_set_elements_c's contract.
    unsafe { set_elements("MPI_Status_set_elements_c", status, datatype, count) }
}

/// `MPI_TYPECLASS_*` (standard ABI values).
const TYPECLASS_INTEGER: c_int = 192;
const TYPECLASS_REAL: c_int = 193;
const TYPECLASS_COMPLEX: c_int = 194;

/// `MPI_Type_match_size`: the first predefined type of `typeclass` and `size` bytes,
/// Fortran's before C's (as MPICH chooses).
#[export]
pub unsafe extern "C" fn MPI_Type_match_size(
    typeclass: c_int,
    size: c_int,
    datatype: *mut Handle,
) -> c_int {
    call("MPI_Type_match_size", MPI_COMM_WORLD, || {
        // MPI_REAL2..16, FLOAT, DOUBLE, LONG_DOUBLE / INTEGER1..16, CHAR, SHORT, INT,
        // LONG, LONG_LONG / COMPLEX4..32, C complexes.
        let (name, list): (&str, &[Handle]) = match typeclass {
            TYPECLASS_REAL => (
                "MPI_TYPECLASS_REAL",
                &[0x2ca, 0x2d2, 0x2da, 0x2e2, 0x210, 0x214, 0x220],
            ),
            TYPECLASS_INTEGER => (
                "MPI_TYPECLASS_INTEGER",
                &[
                    0x2c1, 0x2c9, 0x2d1, 0x2d9, 0x2e1, 0x243, 0x208, 0x209, 0x20a, 0x20b,
                ],
            ),
            TYPECLASS_COMPLEX => (
                "MPI_TYPECLASS_COMPLEX",
                &[0x2d3, 0x2db, 0x2e3, 0x2eb, 0x212, 0x216, 0x224],
            ),
            _ => {
                return Err(MpiError::new(
                    MPI_ERR_ARG,
                    format!(
                        "typeclass {typeclass} is not MPI_TYPECLASS_REAL, _INTEGER or _COMPLEX"
                    ),
                ))
            }
        };
        let found = list
            .iter()
            .copied()
            .find(|&h| dtype::lookup(h).is_some_and(|t| t.size as i128 == size as i128))
            .ok_or_else(|| {
                MpiError::new(
                    MPI_ERR_ARG,
                    format!("no predefined datatype of {name} has {size} bytes"),
                )
            })?;
        // SAFETY: the caller's handle.
        unsafe { put(datatype, found, "datatype") }
    })
}

/// `MPI_Type_get_value_index`: the predefined pair type of a (value, index) pair
/// (`MPI_DOUBLE`, `MPI_INT`) -> `MPI_DOUBLE_INT`; `MPI_DATATYPE_NULL` when there is none.
#[export]
pub unsafe extern "C" fn MPI_Type_get_value_index(
    value_type: Handle,
    index_type: Handle,
    pair_type: *mut Handle,
) -> c_int {
    call("MPI_Type_get_value_index", MPI_COMM_WORLD, || {
        Ty::lookup(value_type)?;
        Ty::lookup(index_type)?;
        let pair = match (value_type, index_type) {
            (0x210, 0x209) => 0x228, // MPI_FLOAT, MPI_INT: MPI_FLOAT_INT
            (0x214, 0x209) => 0x229, // MPI_DOUBLE_INT
            (0x20a, 0x209) => 0x22a, // MPI_LONG_INT
            (0x209, 0x209) => 0x22b, // MPI_2INT
            (0x208, 0x209) => 0x22c, // MPI_SHORT_INT
            (0x220, 0x209) => 0x22d, // MPI_LONG_DOUBLE_INT
            (0x21a, 0x21a) => 0x230, // MPI_2REAL
            (0x21c, 0x21c) => 0x231, // MPI_2DOUBLE_PRECISION
            (0x219, 0x219) => 0x232, // MPI_2INTEGER
            _ => MPI_DATATYPE_NULL,
        };
        // SAFETY: the caller's handle.
        unsafe { put(pair_type, pair, "pair_type") }
    })
}

/// The `MPI_Type_create_f90_*` types made so far, by (combiner, p, r): each request returns
/// the same handle, as for a predefined type.
static F90: Confined<HashMap<(c_int, c_int, c_int), Handle>> = Confined::new("f90 datatypes");

/// The `MPI_Type_create_f90_*` calls: the first of `candidates` (predefined type, decimal
/// precision, decimal exponent range) that meets `p` and `r` (`MPI_UNDEFINED`: any), as a
/// type that behaves as that predefined one but answers `MPI_Type_get_envelope` with the
/// f90 combiner and (p, r).
///
/// # Safety
/// `new` is null or valid for a write.
unsafe fn f90(
    fname: &'static str,
    comb: c_int,
    (p, r): (c_int, c_int),
    candidates: &[(Handle, c_int, c_int)],
    new: *mut Handle,
) -> c_int {
    call(fname, MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        let want = |v: c_int| if v == MPI_UNDEFINED { 0 } else { v };
        let (wp, wr) = (want(p), want(r));
        if wp < 0 || wr < 0 {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("{fname}: precision {p} and range {r} must be >= 0 or MPI_UNDEFINED"),
            ));
        }
        let &(base, _, _) = candidates
            .iter()
            .find(|&&(_, cp, cr)| cp >= wp && cr >= wr)
            .ok_or_else(|| {
                MpiError::new(
                    MPI_ERR_OTHER,
                    format!("{fname}: no predefined type has precision >= {p} and range >= {r}"),
                )
            })?;
        let h = match F90.with(|m| m.get(&(comb, p, r)).copied())? {
            Some(h) => h,
            None => {
                let t = Ty::lookup(base)?;
                let c = Contents {
                    combiner: comb,
                    ints: if comb == combiner::F90_INTEGER {
                        vec![r]
                    } else {
                        vec![p, r]
                    },
                    ..Contents::default()
                };
                let mut d = derived(Ok(t.layout()), Some(base), Some(vec![(base, 1)]), c)?;
                d.permanent = true;
                let h = add(Rc::new(d.committed()))?;
                F90.with(|m| m.insert((comb, p, r), h))?;
                h
            }
        };
        // SAFETY: the caller's handle.
        unsafe { put(new, h, "newtype") }
    })
}

/// `MPI_Type_create_f90_integer`: an integer of at least `r` decimal digits of range.
#[export]
pub unsafe extern "C" fn MPI_Type_create_f90_integer(r: c_int, new: *mut Handle) -> c_int {
    // INTEGER1, 2, 4, 8 (the decimal range each holds).
    let c = [(0x2c1, 0, 2), (0x2c9, 0, 4), (0x2d1, 0, 9), (0x2d9, 0, 18)];
    // SAFETY: MPI_Type_create_f90_integer's contract.
    unsafe {
        f90(
            "MPI_Type_create_f90_integer",
            combiner::F90_INTEGER,
            (0, r),
            &c,
            new,
        )
    }
}

/// `MPI_Type_create_f90_real`: a real of at least `p` digits and exponent range `r`.
#[export]
pub unsafe extern "C" fn MPI_Type_create_f90_real(p: c_int, r: c_int, new: *mut Handle) -> c_int {
    // REAL4, REAL8, REAL16 (x87 extended in 16 bytes: 18 digits).
    let c = [(0x2d2, 6, 37), (0x2da, 15, 307), (0x2e2, 18, 4931)];
    // SAFETY: MPI_Type_create_f90_real's contract.
    unsafe {
        f90(
            "MPI_Type_create_f90_real",
            combiner::F90_REAL,
            (p, r),
            &c,
            new,
        )
    }
}

/// `MPI_Type_create_f90_complex`: a complex of reals as `MPI_Type_create_f90_real`'s.
#[export]
pub unsafe extern "C" fn MPI_Type_create_f90_complex(
    p: c_int,
    r: c_int,
    new: *mut Handle,
) -> c_int {
    // COMPLEX8, COMPLEX16, COMPLEX32.
    let c = [(0x2db, 6, 37), (0x2e3, 15, 307), (0x2eb, 18, 4931)];
    // SAFETY: MPI_Type_create_f90_complex's contract.
    unsafe {
        f90(
            "MPI_Type_create_f90_complex",
            combiner::F90_COMPLEX,
            (p, r),
            &c,
            new,
        )
    }
}

/// `MPI_DISTRIBUTE_*` (standard ABI values).
const DISTRIBUTE_NONE: c_int = 16;
const DISTRIBUTE_BLOCK: c_int = 17;
const DISTRIBUTE_CYCLIC: c_int = 18;
const DISTRIBUTE_DFLT_DARG: c_int = 19;

/// One dimension of a distributed array, C order (the last dimension varies fastest).
#[derive(Clone, Copy, Debug)]
struct Dim {
    gsize: usize,
    distrib: c_int,
    darg: c_int,
    psize: usize,
    coord: usize,
}

/// The layout of process `coord`'s part of a distributed array of `old` (MPI 5.0 section
/// 5.1.4): dimensions from the fastest outwards, each a block or cyclic selection of the
/// one inside it resized to a row of the global array; the lower bound 0 and the extent
/// of the whole global array, so that it is a subarray-like type of the local data.
fn darray_layout(dims: &[Dim], old: &rmca::Datatype) -> MpiResult<rmca::Datatype> {
    use rmca::Datatype as D;
    let err = |e: rmca::DatatypeError| type_error(e.to_string());
    let over = || MpiError::new(MPI_ERR_ARG, "the global array's size overflows an address");
    let mut stride = old.extent() as i128; // bytes between consecutive elements of a dim
    let mut disp: i128 = 0; // of the first local element
    let mut t = old.clone();
    for (i, d) in dims.iter().enumerate().rev() {
        let stride_b = isize::try_from(stride).map_err(|_| over())?;
        // The copies of the inner type, one global row (of this dimension) apart.
        let elem = if i + 1 == dims.len() {
            old.clone()
        } else {
            D::resized(&t, 0, stride_b).map_err(err)?
        };
        let g = d.gsize;
        t = match d.distrib {
            DISTRIBUTE_NONE => D::contiguous(g, &elem).map_err(err)?,
            DISTRIBUTE_BLOCK => {
                let blk = if d.darg == DISTRIBUTE_DFLT_DARG {
                    g.div_ceil(d.psize)
                } else {
                    d.darg as usize
                };
                let start = d.coord * blk;
                let n = g.saturating_sub(start).min(blk);
                disp += start as i128 * stride;
                D::contiguous(n, &elem).map_err(err)?
            }
            _ => {
                // Cyclic: blocks `coord`, `coord + psize`, ... of `blk` elements.
                let blk = if d.darg == DISTRIBUTE_DFLT_DARG {
                    1
                } else {
                    d.darg as usize
                };
                let nblocks = g.div_ceil(blk);
                let mine = if d.coord < nblocks {
                    (nblocks - d.coord).div_ceil(d.psize)
                } else {
                    0
                };
                let step = (d.psize * blk) as i128 * stride;
                let step_b = isize::try_from(step).map_err(|_| over())?;
                // The last block may be short.
                let last_len = if mine > 0 {
                    let last = d.coord + (mine - 1) * d.psize;
                    (g - last * blk).min(blk)
                } else {
                    0
                };
                let full = if last_len < blk { mine - 1 } else { mine };
                disp += (d.coord * blk) as i128 * stride;
                let body = D::hvector(full, blk, step_b, &elem).map_err(err)?;
                if full < mine {
                    let tail = D::contiguous(last_len, &elem).map_err(err)?;
                    let at = isize::try_from(full as i128 * step).map_err(|_| over())?;
                    D::structure(&[1, 1], &[0, at], &[body, tail]).map_err(err)?
                } else {
                    body
                }
            }
        };
        stride = stride.checked_mul(g as i128).ok_or_else(over)?;
    }
    let whole = isize::try_from(stride).map_err(|_| over())?;
    let disp = isize::try_from(disp).map_err(|_| over())?;
    let placed = D::hindexed(&[1], &[disp], &t).map_err(err)?;
    D::resized(&placed, 0, whole).map_err(err)
}

/// `MPI_Type_create_darray` and `_c`.
///
/// # Safety
/// The arrays hold `ndims` values each; `new` is null or valid for a write.
#[allow(clippy::too_many_arguments)]
unsafe fn darray<C: Arg>(
    fname: &'static str,
    (size, rank, ndims): (c_int, c_int, c_int),
    gsizes: *const C,
    (distribs, dargs, psizes): (*const c_int, *const c_int, *const c_int),
    order: c_int,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    call(fname, MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        let arg = |m: String| MpiError::new(MPI_ERR_ARG, m);
        if size <= 0 {
            return Err(arg(format!("size {size} must be > 0")));
        }
        if rank < 0 || rank >= size {
            return Err(MpiError::new(
                MPI_ERR_RANK,
                format!("rank {rank} is outside 0..{size}"),
            ));
        }
        if ndims <= 0 {
            return Err(arg(format!("ndims {ndims} must be > 0")));
        }
        let n = ndims as usize;
        // SAFETY: the caller's contract: `ndims` values each.
        let (raw_g, dist, darg, ps) = unsafe {
            (
                array(gsizes, n, "gsizes")?,
                array(distribs, n, "distribs")?,
                array(dargs, n, "dargs")?,
                array(psizes, n, "psizes")?,
            )
        };
        let t = Ty::lookup(old)?;
        let mut g = Vec::with_capacity(n);
        for (i, &x) in raw_g.iter().enumerate() {
            match x.wide() {
                v if v > 0 => g.push(
                    usize::try_from(v).map_err(|_| arg(format!("gsizes[{i}] {v} is too large")))?,
                ),
                v => return Err(arg(format!("gsizes[{i}] {v} must be > 0"))),
            }
        }
        let mut procs: i128 = 1;
        for (i, &p) in ps.iter().enumerate() {
            if p <= 0 {
                return Err(arg(format!("psizes[{i}] {p} must be > 0")));
            }
            procs *= p as i128;
        }
        if procs != size as i128 {
            return Err(arg(format!(
                "the process grid psizes has {procs} processes but size is {size}"
            )));
        }
        // Process coordinates: the grid is row-major whatever the array order.
        let mut coords = vec![0usize; n];
        let mut r = rank as usize;
        for i in (0..n).rev() {
            coords[i] = r % ps[i] as usize;
            r /= ps[i] as usize;
        }
        let mut dims = Vec::with_capacity(n);
        for i in 0..n {
            let d = Dim {
                gsize: g[i],
                distrib: dist[i],
                darg: darg[i],
                psize: ps[i] as usize,
                coord: coords[i],
            };
            match d.distrib {
                DISTRIBUTE_NONE if d.psize != 1 => {
                    return Err(arg(format!(
                        "dimension {i} is MPI_DISTRIBUTE_NONE over {} processes (it must be 1)",
                        d.psize
                    )))
                }
                DISTRIBUTE_NONE => {}
                DISTRIBUTE_BLOCK | DISTRIBUTE_CYCLIC => {
                    if d.darg != DISTRIBUTE_DFLT_DARG && d.darg <= 0 {
                        return Err(arg(format!(
                            "dargs[{i}] {} must be > 0 or MPI_DISTRIBUTE_DFLT_DARG",
                            d.darg
                        )));
                    }
                    if d.distrib == DISTRIBUTE_BLOCK
                        && d.darg != DISTRIBUTE_DFLT_DARG
                        && (d.darg as i128) * (d.psize as i128) < d.gsize as i128
                    {
                        return Err(arg(format!(
                            "dimension {i}: blocks of {} over {} processes cannot cover {} elements",
                            d.darg, d.psize, d.gsize
                        )));
                    }
                }
                x => {
                    return Err(arg(format!(
                        "distribs[{i}] {x} is not MPI_DISTRIBUTE_BLOCK, _CYCLIC or _NONE"
                    )))
                }
            }
            dims.push(d);
        }
        let mut ordered = dims.clone();
        c_order(order, &mut [&mut ordered])?;
        let layout = darray_layout(&ordered, &t.layout())?;
        let c = {
            let mut c = Contents {
                combiner: combiner::DARRAY,
                types: vec![t.clone()],
                ..Contents::default()
            };
            size.record(&mut c);
            rank.record(&mut c);
            ndims.record(&mut c);
            raw_g.iter().for_each(|x| x.record(&mut c));
            for v in [&dist, &darg, &ps] {
                v.iter().for_each(|x| x.record(&mut c));
            }
            order.record(&mut c);
            c
        };
        let elems = layout.size().checked_div(t.size().max(1)).unwrap_or(0);
        let sig = super::types::repeat_signature(&t, elems);
        let d = derived(Ok(layout), super::types::base_of(&t), sig, c)?;
        if new.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the newtype argument is NULL"));
        }
        let h = add(Rc::new(d))?;
        // SAFETY: the caller's handle, non-null checked.
        unsafe { put(new, h, "newtype") }
    })
}

/// `MPI_Type_create_darray`: this process's part of an array distributed over a process
/// grid (block, cyclic or not distributed, per dimension).
#[export]
pub unsafe extern "C" fn MPI_Type_create_darray(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    gsizes: *const c_int,
    distribs: *const c_int,
    dargs: *const c_int,
    psizes: *const c_int,
    order: c_int,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_create_darray's contract.
    unsafe {
        darray(
            "MPI_Type_create_darray",
            (size, rank, ndims),
            gsizes,
            (distribs, dargs, psizes),
            order,
            old,
            new,
        )
    }
}

/// `MPI_Type_create_darray_c`.
#[export]
pub unsafe extern "C" fn MPI_Type_create_darray_c(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    gsizes: *const MPI_Count,
    distribs: *const c_int,
    dargs: *const c_int,
    psizes: *const c_int,
    order: c_int,
    old: Handle,
    new: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Type_create_darray_c's contract.
    unsafe {
        darray(
            "MPI_Type_create_darray_c",
            (size, rank, ndims),
            gsizes,
            (distribs, dargs, psizes),
            order,
            old,
            new,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external32_is_big_endian_at_standard_sizes() {
        // MPI_INT, MPI_LONG (4 bytes in external32), MPI_DOUBLE.
        let sig = [(0x209, 1), (0x20a, 2), (0x214, 1)];
        let mut native = Vec::new();
        native.extend_from_slice(&0x01020304i32.to_ne_bytes());
        native.extend_from_slice(&(-2i64).to_ne_bytes());
        native.extend_from_slice(&7i64.to_ne_bytes());
        native.extend_from_slice(&1.5f64.to_ne_bytes());
        let mut ext = vec![0u8; 4 + 4 + 4 + 8];
        to_external32(&native, &sig, &mut ext);
        assert_eq!(&ext[..4], &[1, 2, 3, 4]);
        assert_eq!(&ext[4..8], &[0xff, 0xff, 0xff, 0xfe]);
        assert_eq!(&ext[8..12], &[0, 0, 0, 7]);
        assert_eq!(&ext[12..], &1.5f64.to_be_bytes());
        let mut back = vec![0u8; native.len()];
        from_external32(&ext, &sig, &mut back);
        assert_eq!(back, native);
    }

    #[test]
    fn darray_block_and_cyclic_match_the_hand_layout() {
        let u8t = rmca::Datatype::of::<u8>();
        // 4 x 6 array on a 2 x 2 grid, process (1, 0): rows 2..4 (block), columns 0, 2, 4
        // (cyclic 1).
        let dims = [
            Dim {
                gsize: 4,
                distrib: DISTRIBUTE_BLOCK,
                darg: DISTRIBUTE_DFLT_DARG,
                psize: 2,
                coord: 1,
            },
            Dim {
                gsize: 6,
                distrib: DISTRIBUTE_CYCLIC,
                darg: DISTRIBUTE_DFLT_DARG,
                psize: 2,
                coord: 0,
            },
        ];
        let t = darray_layout(&dims, &u8t).unwrap();
        assert_eq!((t.lb(), t.extent()), (0, 24));
        let a: Vec<u8> = (0..24).collect();
        assert_eq!(t.pack_to_vec(&a, 1).unwrap(), [12, 14, 16, 18, 20, 22]);
        // Cyclic(2) over 3 processes of 7 elements, process 0: blocks 0 and 3 (short).
        let d = [Dim {
            gsize: 7,
            distrib: DISTRIBUTE_CYCLIC,
            darg: 2,
            psize: 3,
            coord: 0,
        }];
        let t = darray_layout(&d, &u8t).unwrap();
        assert_eq!(
            t.pack_to_vec(&(0..7).collect::<Vec<u8>>(), 1).unwrap(),
            [0, 1, 6]
        );
        assert_eq!(t.extent(), 7);
    }
}
