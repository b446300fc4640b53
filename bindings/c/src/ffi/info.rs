//! `MPI_Info` objects (a key/value store: rmca reads no hint, but a program may build, copy
//! and query them) and the one-sided calls a program may make, which rmca does not
//! implement: they return `MPI_ERR_UNSUPPORTED_OPERATION` through the error handler with a
//! message naming the call.
#![allow(non_snake_case)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};

use super::{call, put, put_string};
use crate::abi::*;
use crate::state::{self, MpiError, MpiResult};
use rmca_mpi_export::export;

/// Handles of info objects: this plus an index.
pub const INFO_BASE: Handle = DYNAMIC_BASE * 6;
const MAX_INFOS: usize = DYNAMIC_BASE;
/// The longest key (`MPI_MAX_INFO_KEY` less the terminating NUL).
const MAX_KEY: usize = 255;
/// The longest value (`MPI_MAX_INFO_VAL` less the terminating NUL).
const MAX_VALUE: usize = 1023;

pub const MPI_ERR_INFO_KEY: c_int = 31;
pub const MPI_ERR_INFO_NOKEY: c_int = 32;
pub const MPI_ERR_INFO_VALUE: c_int = 33;
pub const MPI_ERR_INFO: c_int = 34;
pub const MPI_ERR_WIN: c_int = 56;
pub const MPI_WIN_NULL: Handle = 0x110;

/// An info object: its (key, value) pairs in the order the keys were first set (the order
/// `MPI_Info_get_nthkey` counts in).
type Entries = Vec<(String, String)>;

thread_local! {
    static INFOS: RefCell<Vec<Option<Entries>>> = const { RefCell::new(Vec::new()) };
}

fn info_error(h: Handle) -> MpiError {
    let what = if h == MPI_INFO_NULL {
        "MPI_INFO_NULL".to_owned()
    } else {
        format!("{h:#x}")
    };
    MpiError::new(
        MPI_ERR_INFO,
        format!("invalid info {what}: not MPI_INFO_ENV or one created and not freed"),
    )
}

/// Run `f` on the entries of info `h` (`MPI_INFO_ENV`: rmca sets none, so it is empty and
/// read-only).
fn with_info<R>(
    h: Handle,
    write: bool,
    f: impl FnOnce(&mut Entries) -> MpiResult<R>,
) -> MpiResult<R> {
    state::with(|_| Ok(()))?;
    if h == MPI_INFO_ENV {
        if write {
            return Err(MpiError::new(
                MPI_ERR_INFO,
                "MPI_INFO_ENV is read-only: MPI_Info_dup it to get one to change",
            ));
        }
        return f(&mut Vec::new());
    }
    let i = h
        .checked_sub(INFO_BASE)
        .filter(|&i| i < MAX_INFOS)
        .ok_or_else(|| info_error(h))?;
    INFOS.with(|t| match t.borrow_mut().get_mut(i) {
        Some(Some(e)) => f(e),
        _ => Err(info_error(h)),
    })
}

/// Store a new info object; its handle.
fn add(e: Entries) -> MpiResult<Handle> {
    INFOS.with(|t| {
        super::table_insert(
            &mut t.borrow_mut(),
            e,
            (INFO_BASE, MAX_INFOS),
            "info objects",
            "MPI_Info_free",
        )
    })
}

/// A C string argument (a key or a value) of at most `max` bytes.
///
/// # Safety
/// `s` is null or a NUL-terminated string.
unsafe fn string_arg(s: *const c_char, what: &str, max: usize, class: c_int) -> MpiResult<String> {
    if s.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, format!("the {what} is NULL")));
    }
    // SAFETY: the caller's contract.
    let s = unsafe { CStr::from_ptr(s) }.to_string_lossy();
    // MPI ignores leading and trailing spaces of keys and values.
    let s = s.trim_matches(' ');
    if s.is_empty() || s.len() > max {
        return Err(MpiError::new(
            class,
            format!("the {what} is {} B long: it must be 1 to {max} B", s.len()),
        ));
    }
    Ok(s.to_owned())
}

/// # Safety
/// `s` is null or a NUL-terminated string.
unsafe fn key_arg(s: *const c_char) -> MpiResult<String> {
    // SAFETY: the caller's contract.
    unsafe { string_arg(s, "key", MAX_KEY, MPI_ERR_INFO_KEY) }
}

/// `MPI_Info_create`.
#[export]
pub unsafe extern "C" fn MPI_Info_create(info: *mut Handle) -> c_int {
    call("MPI_Info_create", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        if info.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the info argument is NULL"));
        }
        let h = add(Vec::new())?;
        // SAFETY: non-null, the caller's handle.
        unsafe { put(info, h, "info") }
    })
}

/// `MPI_Info_set`: adds the key, or replaces its value.
#[export]
pub unsafe extern "C" fn MPI_Info_set(
    info: Handle,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    call("MPI_Info_set", MPI_COMM_WORLD, || {
        // SAFETY: MPI_Info_set's contract: NUL-terminated strings.
        let (k, v) = unsafe {
            (
                key_arg(key)?,
                string_arg(value, "value", MAX_VALUE, MPI_ERR_INFO_VALUE)?,
            )
        };
        with_info(info, true, |e| {
            match e.iter_mut().find(|(ek, _)| *ek == k) {
                Some((_, ev)) => *ev = v,
                None => e.push((k, v)),
            }
            Ok(())
        })
    })
}

/// The value of `key` in `info`, if set.
///
/// # Safety
/// `key` is null or a NUL-terminated string.
unsafe fn value_of(info: Handle, key: *const c_char) -> MpiResult<Option<String>> {
    // SAFETY: the caller's contract.
    let k = unsafe { key_arg(key)? };
    with_info(info, false, |e| {
        Ok(e.iter().find(|(ek, _)| *ek == k).map(|(_, v)| v.clone()))
    })
}

/// `MPI_Info_get`: up to `valuelen` characters of the value (plus the NUL).
#[export]
pub unsafe extern "C" fn MPI_Info_get(
    info: Handle,
    key: *const c_char,
    valuelen: c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    call("MPI_Info_get", MPI_COMM_WORLD, || {
        let cap = usize::try_from(valuelen)
            .map_err(|_| MpiError::new(MPI_ERR_ARG, format!("valuelen {valuelen} is negative")))?;
        // SAFETY: MPI_Info_get's contract: a NUL-terminated key.
        let found = unsafe { value_of(info, key)? };
        // SAFETY: the caller's int, and `value` holds `valuelen` + 1 chars.
        unsafe {
            put(flag, c_int::from(found.is_some()), "flag")?;
            if let Some(v) = found {
                put_string(value, cap + 1, std::ptr::null_mut(), &v)?;
            }
        }
        Ok(())
    })
}

/// `MPI_Info_get_valuelen`.
#[export]
pub unsafe extern "C" fn MPI_Info_get_valuelen(
    info: Handle,
    key: *const c_char,
    valuelen: *mut c_int,
    flag: *mut c_int,
) -> c_int {
    call("MPI_Info_get_valuelen", MPI_COMM_WORLD, || {
        // SAFETY: MPI_Info_get_valuelen's contract: a NUL-terminated key.
        let found = unsafe { value_of(info, key)? };
        // SAFETY: the caller's ints.
        unsafe {
            put(flag, c_int::from(found.is_some()), "flag")?;
            if let Some(v) = found {
                put(valuelen, v.len() as c_int, "valuelen")?;
            }
        }
        Ok(())
    })
}

/// `MPI_Info_get_string` (MPI 4.0): the value into `*buflen` chars; `*buflen` becomes the
/// value's length plus one.
#[export]
pub unsafe extern "C" fn MPI_Info_get_string(
    info: Handle,
    key: *const c_char,
    buflen: *mut c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    call("MPI_Info_get_string", MPI_COMM_WORLD, || {
        if buflen.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the buflen argument is NULL"));
        }
        // SAFETY: MPI_Info_get_string's contract: a NUL-terminated key, the caller's ints,
        // `value` holds `*buflen` chars.
        unsafe {
            let found = value_of(info, key)?;
            put(flag, c_int::from(found.is_some()), "flag")?;
            if let Some(v) = found {
                let cap = usize::try_from(buflen.read()).unwrap_or(0);
                if cap > 0 {
                    put_string(value, cap, std::ptr::null_mut(), &v)?;
                }
                buflen.write(v.len() as c_int + 1);
            }
        }
        Ok(())
    })
}

/// `MPI_Info_delete`.
#[export]
pub unsafe extern "C" fn MPI_Info_delete(info: Handle, key: *const c_char) -> c_int {
    call("MPI_Info_delete", MPI_COMM_WORLD, || {
        // SAFETY: MPI_Info_delete's contract: a NUL-terminated key.
        let k = unsafe { key_arg(key)? };
        with_info(info, true, |e| {
            let at = e.iter().position(|(ek, _)| *ek == k).ok_or_else(|| {
                MpiError::new(
                    MPI_ERR_INFO_NOKEY,
                    format!("key \"{k}\" is not set in the info"),
                )
            })?;
            e.remove(at);
            Ok(())
        })
    })
}

/// `MPI_Info_get_nkeys`.
#[export]
pub unsafe extern "C" fn MPI_Info_get_nkeys(info: Handle, nkeys: *mut c_int) -> c_int {
    call("MPI_Info_get_nkeys", MPI_COMM_WORLD, || {
        let n = with_info(info, false, |e| Ok(e.len()))?;
        // SAFETY: the caller's int.
        unsafe { put(nkeys, n as c_int, "nkeys") }
    })
}

/// `MPI_Info_get_nthkey`: key `n` (0-based, in the order keys were first set) into a buffer
/// of `MPI_MAX_INFO_KEY` chars.
#[export]
pub unsafe extern "C" fn MPI_Info_get_nthkey(info: Handle, n: c_int, key: *mut c_char) -> c_int {
    call("MPI_Info_get_nthkey", MPI_COMM_WORLD, || {
        let k = with_info(info, false, |e| {
            usize::try_from(n)
                .ok()
                .and_then(|i| e.get(i))
                .map(|(k, _)| k.clone())
                .ok_or_else(|| {
                    MpiError::new(
                        MPI_ERR_ARG,
                        format!(
                            "key number {n} is invalid: the info has keys 0..{}",
                            e.len()
                        ),
                    )
                })
        })?;
        // SAFETY: the caller's buffer of MPI_MAX_INFO_KEY chars.
        unsafe { put_string(key, MAX_KEY + 1, std::ptr::null_mut(), &k) }
    })
}

/// `MPI_Info_dup`.
#[export]
pub unsafe extern "C" fn MPI_Info_dup(info: Handle, newinfo: *mut Handle) -> c_int {
    call("MPI_Info_dup", MPI_COMM_WORLD, || {
        let e = with_info(info, false, |e| Ok(e.clone()))?;
        if newinfo.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the newinfo argument is NULL"));
        }
        let h = add(e)?;
        // SAFETY: non-null, the caller's handle.
        unsafe { put(newinfo, h, "newinfo") }
    })
}

/// `MPI_Info_free`: the handle becomes `MPI_INFO_NULL`.
#[export]
pub unsafe extern "C" fn MPI_Info_free(info: *mut Handle) -> c_int {
    call("MPI_Info_free", MPI_COMM_WORLD, || {
        if info.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the info argument is NULL"));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { info.read() };
        with_info(h, true, |_| Ok(()))?;
        INFOS.with(|t| t.borrow_mut()[h - INFO_BASE] = None);
        // SAFETY: as above.
        unsafe { info.write(MPI_INFO_NULL) };
        Ok(())
    })
}

/// The refusal of a one-sided call.
fn one_sided(fname: &str) -> MpiError {
    MpiError::new(
        MPI_ERR_UNSUPPORTED_OPERATION,
        format!("{fname}: one-sided communication (MPI_Win_*, MPI_Put, MPI_Get, MPI_Accumulate) is not implemented by rmca"),
    )
}

/// Refuse a window-creating call on `comm`'s error handler; `*win` becomes `MPI_WIN_NULL`.
///
/// # Safety
/// `win` is null or valid for a write of a handle.
unsafe fn refuse_window(fname: &'static str, comm: Handle, win: *mut Handle) -> c_int {
    call(fname, comm, || {
        super::communicator(comm)?;
        if !win.is_null() {
            // SAFETY: the caller's contract.
            unsafe { win.write(MPI_WIN_NULL) };
        }
        Err(one_sided(fname))
    })
}

/// `MPI_Win_create`: not implemented (`MPI_ERR_UNSUPPORTED_OPERATION`).
#[export]
pub unsafe extern "C" fn MPI_Win_create(
    _base: *mut c_void,
    _size: isize,
    _disp_unit: c_int,
    _info: Handle,
    comm: Handle,
    win: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Win_create's contract for `win`.
    unsafe { refuse_window("MPI_Win_create", comm, win) }
}

/// `MPI_Win_allocate`: not implemented (`MPI_ERR_UNSUPPORTED_OPERATION`).
#[export]
pub unsafe extern "C" fn MPI_Win_allocate(
    _size: isize,
    _disp_unit: c_int,
    _info: Handle,
    comm: Handle,
    _baseptr: *mut c_void,
    win: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Win_allocate's contract for `win`.
    unsafe { refuse_window("MPI_Win_allocate", comm, win) }
}

/// A one-sided call on a window: no window exists, so the error goes to `MPI_COMM_WORLD`'s
/// handler.
fn on_window(fname: &'static str) -> c_int {
    call(fname, MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        Err(one_sided(fname))
    })
}

/// `MPI_Win_free`: not implemented (`MPI_ERR_UNSUPPORTED_OPERATION`).
#[export]
pub unsafe extern "C" fn MPI_Win_free(_win: *mut Handle) -> c_int {
    on_window("MPI_Win_free")
}

/// `MPI_Win_fence`: not implemented (`MPI_ERR_UNSUPPORTED_OPERATION`).
#[export]
pub unsafe extern "C" fn MPI_Win_fence(_assert: c_int, _win: Handle) -> c_int {
    on_window("MPI_Win_fence")
}

/// `MPI_Win_lock`: not implemented (`MPI_ERR_UNSUPPORTED_OPERATION`).
#[export]
pub unsafe extern "C" fn MPI_Win_lock(
    _lock_type: c_int,
    _rank: c_int,
    _assert: c_int,
    _win: Handle,
) -> c_int {
    on_window("MPI_Win_lock")
}

/// `MPI_Win_unlock`: not implemented (`MPI_ERR_UNSUPPORTED_OPERATION`).
#[export]
pub unsafe extern "C" fn MPI_Win_unlock(_rank: c_int, _win: Handle) -> c_int {
    on_window("MPI_Win_unlock")
}

/// `MPI_Put`: not implemented (`MPI_ERR_UNSUPPORTED_OPERATION`).
#[export]
pub unsafe extern "C" fn MPI_Put(
    _origin: *const c_void,
    _origin_count: c_int,
    _origin_type: Handle,
    _target_rank: c_int,
    _target_disp: isize,
    _target_count: c_int,
    _target_type: Handle,
    _win: Handle,
) -> c_int {
    on_window("MPI_Put")
}

/// `MPI_Get`: not implemented (`MPI_ERR_UNSUPPORTED_OPERATION`).
#[export]
pub unsafe extern "C" fn MPI_Get(
    _origin: *mut c_void,
    _origin_count: c_int,
    _origin_type: Handle,
    _target_rank: c_int,
    _target_disp: isize,
    _target_count: c_int,
    _target_type: Handle,
    _win: Handle,
) -> c_int {
    on_window("MPI_Get")
}

/// `MPI_Accumulate`: not implemented (`MPI_ERR_UNSUPPORTED_OPERATION`).
#[export]
pub unsafe extern "C" fn MPI_Accumulate(
    _origin: *const c_void,
    _origin_count: c_int,
    _origin_type: Handle,
    _target_rank: c_int,
    _target_disp: isize,
    _target_count: c_int,
    _target_type: Handle,
    _op: Handle,
    _win: Handle,
) -> c_int {
    on_window("MPI_Accumulate")
}
