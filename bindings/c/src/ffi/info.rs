//! `MPI_Info` objects (a key/value store: rmca reads no hint, but a program may build, copy
//! and query them) and the one-sided calls a program may make, which rmca does not
//! implement: they return `MPI_ERR_UNSUPPORTED_OPERATION` through the error handler with a
//! message naming the call.
#![allow(non_snake_case)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};

use super::{call, put, put_string};
use crate::abi::*;
use crate::state::{self, Confined, MpiError, MpiResult};
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

/// An info object: its (key, value) pairs in the order the keys were first set (the order
/// `MPI_Info_get_nthkey` counts in).
type Entries = Vec<(String, String)>;

/// The info objects, by handle less [`INFO_BASE`] (process-wide, usable before `MPI_Init`:
/// see [`Confined`]).
static INFOS: Confined<Vec<Option<Entries>>> = Confined::new("info objects");

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
    // No check that MPI runs: MPI-4 lets info objects be used before MPI_Init and after
    // MPI_Finalize (sessions pass them to MPI_Session_init). The table is the calling thread's.
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
    INFOS.with(|t| match t.get_mut(i) {
        Some(Some(e)) => f(e),
        _ => Err(info_error(h)),
    })?
}

/// Store a new info object; its handle.
fn add(e: Entries) -> MpiResult<Handle> {
    INFOS.with(|t| {
        super::table_insert(
            t,
            e,
            (INFO_BASE, MAX_INFOS),
            "info objects",
            "MPI_Info_free",
        )
    })?
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
        INFOS.with(|t| t[h - INFO_BASE] = None)?;
        // SAFETY: as above.
        unsafe { info.write(MPI_INFO_NULL) };
        Ok(())
    })
}

/// A new info object holding `entries` (what a call returning an info object hands out:
/// the program frees it).
pub fn new_info(entries: Vec<(String, String)>) -> MpiResult<Handle> {
    add(entries)
}

/// The (key, value) pairs of info `h`; none for `MPI_INFO_NULL`.
pub fn entries_of(h: Handle) -> MpiResult<Vec<(String, String)>> {
    if h == MPI_INFO_NULL {
        return Ok(Vec::new());
    }
    with_info(h, false, |e| Ok(e.clone()))
}

// ---- info hints of communicators ----

/// The hints set on each communicator (`MPI_Comm_set_info`, `MPI_Comm_dup_with_info`,
/// inherited by `MPI_Comm_dup`), by handle: those of [`COMM_HINTS`], which
/// `MPI_Comm_get_info` returns.
static COMM_INFOS: Confined<HashMap<Handle, Entries>> = Confined::new("communicator hints");

/// `new`, a duplicate of `old`, gets its hints.
pub fn comm_info_copy(old: Handle, new: Handle) -> MpiResult<()> {
    COMM_INFOS.with(|t| {
        match t.get(&old).cloned() {
            Some(e) => t.insert(new, e),
            None => t.remove(&new),
        };
    })
}

/// `comm` is freed: its hints go.
pub fn comm_info_drop(comm: Handle) -> MpiResult<()> {
    COMM_INFOS.with(|t| {
        t.remove(&comm);
    })
}

/// The communicator hints MPI defines (the assertions of MPI 4.0 section 7.4.4): rmca keeps
/// these (it exploits none: a program keeping an assertion is served correctly without it)
/// and, as MPICH, ignores every other key, so `MPI_Comm_get_info` does not report hints
/// the library does not know.
const COMM_HINTS: [&str; 4] = [
    "mpi_assert_no_any_tag",
    "mpi_assert_no_any_source",
    "mpi_assert_exact_length",
    "mpi_assert_allow_overtaking",
];

/// The entries of `e` that are communicator hints.
fn comm_hints(mut e: Entries) -> Entries {
    e.retain(|(k, _)| COMM_HINTS.contains(&k.as_str()));
    e
}

/// Set the hints of `comm` (those not in `entries` keep their values; unknown keys are
/// ignored).
fn comm_info_set(comm: Handle, entries: Entries) -> MpiResult<()> {
    let entries = comm_hints(entries);
    COMM_INFOS.with(|t| {
        let hints = t.entry(comm).or_default();
        for (k, v) in entries {
            match hints.iter_mut().find(|(hk, _)| *hk == k) {
                Some((_, hv)) => *hv = v,
                None => hints.push((k, v)),
            }
        }
    })
}

fn check_comm(comm: Handle) -> MpiResult<()> {
    state::with(|s| s.comm(comm).map(|_| ()))
}

/// `MPI_Comm_set_info`: the hints MPI defines are kept (and returned by `MPI_Comm_get_info`),
/// other keys ignored; rmca exploits none of them.
#[export]
pub unsafe extern "C" fn MPI_Comm_set_info(comm: Handle, info: Handle) -> c_int {
    call("MPI_Comm_set_info", comm, || {
        check_comm(comm)?;
        let e = entries_of(info)?;
        comm_info_set(comm, e)
    })
}

/// `MPI_Comm_get_info`: a new info object with the hints set on the communicator.
#[export]
pub unsafe extern "C" fn MPI_Comm_get_info(comm: Handle, info_used: *mut Handle) -> c_int {
    call("MPI_Comm_get_info", comm, || {
        check_comm(comm)?;
        if info_used.is_null() {
            return Err(super::null_argument("info_used"));
        }
        let e = COMM_INFOS.with(|t| t.get(&comm).cloned().unwrap_or_default())?;
        let h = add(e)?;
        // SAFETY: non-null, the caller's handle.
        unsafe { put(info_used, h, "info_used") }
    })
}

/// `MPI_Comm_dup_with_info`: `MPI_Comm_dup`, with the hints of `info` instead of `comm`'s.
#[export]
pub unsafe extern "C" fn MPI_Comm_dup_with_info(
    comm: Handle,
    info: Handle,
    newcomm: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Comm_dup_with_info's contract: `newcomm` is the caller's handle.
    unsafe { dup_with_info("MPI_Comm_dup_with_info", comm, Some(info), newcomm) }
}

/// `MPI_Comm_dup` then, with `info`, the hints replaced by `info`'s. Errors are raised once,
/// by whichever step found them.
///
/// # Safety
/// `newcomm` is null or valid for a read and a write of a handle.
unsafe fn dup_with_info(
    fname: &'static str,
    comm: Handle,
    info: Option<Handle>,
    newcomm: *mut Handle,
) -> c_int {
    let hints = std::cell::Cell::new(None);
    let rc = call(fname, comm, || {
        check_comm(comm)?;
        if let Some(info) = info {
            hints.set(Some(comm_hints(entries_of(info)?)));
        }
        Ok(())
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    // SAFETY: the caller's contract.
    let rc = unsafe { super::comm::MPI_Comm_dup(comm, newcomm) };
    if rc != MPI_SUCCESS {
        return rc;
    }
    if let Some(e) = hints.take() {
        // SAFETY: written by MPI_Comm_dup.
        let new = unsafe { newcomm.read() };
        if let Err(e) = COMM_INFOS.with(|t| t.insert(new, e)) {
            return super::raise(fname, comm, e);
        }
    }
    MPI_SUCCESS
}

/// A request that is complete already (the non-blocking forms of calls rmca completes at
/// once), on `comm`.
pub fn completed_request(comm: Handle) -> MpiResult<Handle> {
    use crate::state::{Outcome, ReqEntry, ReqState};
    let done = ReqState::Done(Box::new(Outcome {
        status: super::empty_status(),
        error: None,
    }));
    state::with(|s| s.add_request(ReqEntry::new(comm, done)))
}

/// What an `MPI_Comm_idup` request keeps until it completes: the duplicate's handle (in the
/// communicator table from the call on, holding the parent until the duplicate is made, so
/// that the attributes are copied at the call, as MPICH does; the program only learns it at
/// completion) and where the program wants it.
pub struct DupStaged {
    result: rmca::DupResult,
    handle: Handle,
    newcomm: *mut Handle,
}

impl DupStaged {
    /// The request completed: the duplicate takes its handle, which the program gets in
    /// `newcomm`; if the agreement failed the handle goes and it gets `MPI_COMM_NULL`.
    ///
    /// # Safety
    /// `newcomm` is still valid for a write (MPI: the call's output argument, until the
    /// request completes).
    pub(crate) unsafe fn finish(self, s: &mut state::State) {
        let out = match (self.result.take(), s.comm_mut(self.handle)) {
            (Some(dup), Ok(entry)) => {
                entry.comm = dup;
                self.handle
            }
            _ => {
                // Runs under the completion call: a delete callback calling MPI gets an
                // error (a failed agreement is rare: a peer failed, or no id is left).
                let _ = super::attr::delete_all(super::attr::Kind::Comm, self.handle);
                let _ = comm_info_drop(self.handle);
                let _ = s.free_comm(self.handle);
                MPI_COMM_NULL
            }
        };
        // SAFETY: the caller's contract; checked non-null at the call.
        unsafe { self.newcomm.write(out) };
    }
}

/// `MPI_Comm_idup` and `MPI_Comm_idup_with_info`: the duplicate's context id is agreed on
/// without blocking (`rmca::Communicator::idup`); the request completes once it is, and
/// the duplicate appears in `newcomm` then. As `MPI_Comm_dup`: the error handler, the
/// attributes its copy callbacks copy (at the call) and the hints (`info`'s with
/// `_with_info`).
///
/// # Safety
/// `newcomm` and `request` are null or valid for writes of a handle, `newcomm` until the
/// request completes.
unsafe fn idup(
    fname: &'static str,
    comm: Handle,
    info: Option<Handle>,
    newcomm: *mut Handle,
    request: *mut Handle,
) -> c_int {
    use crate::state::{CommEntry, ReqEntry, ReqState};
    call(fname, comm, || {
        if request.is_null() {
            return Err(super::null_argument("request"));
        }
        if newcomm.is_null() {
            return Err(super::null_argument("newcomm"));
        }
        let (c, errhandler) = state::with(|s| {
            let e = s.comm(comm)?;
            Ok((e.comm.clone(), e.errhandler))
        })?;
        let hints = info.map(|i| entries_of(i).map(comm_hints)).transpose()?;
        let (r, result) = c.idup()?.into_raw();
        let h = state::with(|s| {
            s.add_comm(CommEntry {
                comm: c,
                errhandler,
                name: String::new(),
            })
        })?;
        // On a copy callback's error `h` is freed and `newcomm` is MPI_COMM_NULL; the
        // agreement runs on without a request (the other members need this process's part).
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { super::attr::comm_dup(comm, h, newcomm)? };
        if let Some(e) = hints {
            COMM_INFOS.with(|t| t.insert(h, e))?;
        }
        let staged = DupStaged {
            result,
            handle: h,
            newcomm,
        };
        let rh = state::with(|s| {
            let rh = s.add_request(ReqEntry::new(comm, ReqState::Active(r)))?;
            s.stage(rh, super::Staged::Dup(Box::new(staged)));
            Ok(rh)
        })?;
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { put(request, rh, "request") }
    })
}

/// `MPI_Comm_idup`.
#[export]
pub unsafe extern "C" fn MPI_Comm_idup(
    comm: Handle,
    newcomm: *mut Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Comm_idup's contract.
    unsafe { idup("MPI_Comm_idup", comm, None, newcomm, request) }
}

/// `MPI_Comm_idup_with_info`.
#[export]
pub unsafe extern "C" fn MPI_Comm_idup_with_info(
    comm: Handle,
    info: Handle,
    newcomm: *mut Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: MPI_Comm_idup_with_info's contract.
    unsafe {
        idup(
            "MPI_Comm_idup_with_info",
            comm,
            Some(info),
            newcomm,
            request,
        )
    }
}

/// `MPI_Info_create_env` (callable before `MPI_Init` and after `MPI_Finalize`): the keys MPI
/// defines for the start of the process that rmca knows, the same whatever the state of MPI
/// (MPICH's infocreateenv compares objects made before and after `MPI_Init`): `command` and
/// `argv` (from `argc`/`argv`), `wdir`, `host`, and `maxprocs` when a launcher gave the
/// job's size (`PMI_SIZE`: rmca-run, hydra and Slurm's PMI-2 set it). `thread_level` is
/// left out: no launcher here asks for one.
#[export]
pub unsafe extern "C" fn MPI_Info_create_env(
    argc: c_int,
    argv: *const *const c_char,
    info: *mut Handle,
) -> c_int {
    call("MPI_Info_create_env", MPI_COMM_WORLD, || {
        if info.is_null() {
            return Err(super::null_argument("info"));
        }
        let n = usize::try_from(argc)
            .map_err(|_| MpiError::new(MPI_ERR_ARG, format!("argc {argc} is negative")))?;
        let mut args = Vec::new();
        if !argv.is_null() {
            for i in 0..n {
                // SAFETY: MPI_Info_create_env's contract: `argv` holds `argc` strings
                // (C's main arguments), each NUL-terminated or NULL.
                let a = unsafe { argv.add(i).read() };
                if a.is_null() {
                    break;
                }
                // SAFETY: as above.
                args.push(unsafe { CStr::from_ptr(a) }.to_string_lossy().into_owned());
            }
        }
        let mut e: Entries = Vec::new();
        if let Some((command, rest)) = args.split_first() {
            e.push(("command".into(), command.clone()));
            if !rest.is_empty() {
                e.push(("argv".into(), rest.join(" ")));
            }
        }
        if let Ok(dir) = std::env::current_dir() {
            e.push(("wdir".into(), dir.to_string_lossy().into_owned()));
        }
        if let Some(n) = std::env::var("PMI_SIZE")
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
        {
            e.push(("maxprocs".into(), n.to_string()));
        }
        e.push(("host".into(), rmca::hostname()));
        e.retain(|(_, v)| !v.is_empty() && v.len() <= MAX_VALUE);
        let h = add(e)?;
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { put(info, h, "info") }
    })
}
