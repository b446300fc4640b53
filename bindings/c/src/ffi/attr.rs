//! Attribute caching: keyvals (`MPI_Comm_create_keyval`, `MPI_Type_create_keyval`,
//! `MPI_Win_create_keyval` and the deprecated `MPI_Keyval_create`) and the attributes set
//! with them on communicators and datatypes, with the program's copy and delete callbacks.
//!
//! The tables live here, keyed by object handle, rather than in the objects' own tables:
//! the hooks of the objects' life cycles are one call each (`comm_dup`/`comm_free` from
//! `MPI_Comm_dup`/`MPI_Comm_free`, `type_dup`/`type_freed` from `MPI_Type_dup`/
//! `MPI_Type_free`, `finalize` from `MPI_Finalize`). Callbacks run with no borrow of any
//! table held: they may call MPI (set or get attributes, free communicators).
//!
//! Keyvals are freed lazily, as MPI says: `free_keyval` makes the handle invalid to the
//! program, but the keyval lives on (its callbacks still run) while an attribute uses it.
#![allow(non_snake_case)]

use std::collections::HashMap;
use std::ffi::{c_int, c_void};

use super::{call, put};
use crate::abi::*;
use crate::state::{self, Confined, MpiError, MpiResult};
use rmca_mpi_export::export;

/// `MPI_Comm_copy_attr_function` and its datatype and window forms.
type CopyFn =
    unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `MPI_Comm_delete_attr_function` and its datatype and window forms.
type DeleteFn = unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void) -> c_int;

/// The kind of object a keyval caches attributes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Comm,
    Type,
    Win,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Comm => "Comm",
            Kind::Type => "Type",
            Kind::Win => "Win",
        }
    }
}

/// What duplicating an object does with an attribute.
#[derive(Clone, Copy)]
enum OnDup {
    /// `MPI_*_NULL_COPY_FN` (0 in `mpi.h`): the duplicate does not get it.
    Null,
    /// `MPI_*_DUP_FN` (1 in `mpi.h`): the duplicate gets the same value.
    Dup,
    User(CopyFn),
}

struct Keyval {
    kind: Kind,
    copy: OnDup,
    delete: Option<DeleteFn>,
    extra_state: usize,
    /// Freed by the program: gone when `uses` reaches 0.
    freed: bool,
    /// Attributes set with it.
    uses: usize,
}

/// Keyvals are this plus their index (far from the predefined keys, 501.. and 601..).
const KEYVAL_BASE: c_int = 0x1_0000;
const MAX_KEYVALS: usize = 1 << 20;

#[derive(Default)]
struct Tables {
    keyvals: Vec<Option<Keyval>>,
    /// The attributes of each object, (keyval, value) in the order they were set.
    attrs: HashMap<(Kind, Handle), Vec<(c_int, usize)>>,
}

/// The keyvals and attributes (process-wide: see [`Confined`]).
static TABLES: Confined<Tables> = Confined::new("attributes");

fn with_tables<R>(f: impl FnOnce(&mut Tables) -> R) -> MpiResult<R> {
    TABLES.with(f)
}

fn bad_keyval(keyval: c_int, kind: Kind, why: &str) -> MpiError {
    MpiError::new(
        MPI_ERR_KEYVAL,
        format!(
            "keyval {keyval} is invalid for MPI_{}_*_attr: {why}",
            kind.name()
        ),
    )
}

impl Tables {
    /// The live keyval `keyval` of `kind`.
    fn keyval(&self, keyval: c_int, kind: Kind) -> MpiResult<&Keyval> {
        let k = usize::try_from(keyval.wrapping_sub(KEYVAL_BASE))
            .ok()
            .and_then(|i| self.keyvals.get(i))
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                bad_keyval(
                    keyval,
                    kind,
                    "not one made by MPI_*_create_keyval and not freed",
                )
            })?;
        if k.kind != kind {
            return Err(bad_keyval(
                keyval,
                kind,
                &format!("it was made by MPI_{}_create_keyval", k.kind.name()),
            ));
        }
        Ok(k)
    }

    fn keyval_mut(&mut self, keyval: c_int) -> &mut Keyval {
        self.keyvals[(keyval - KEYVAL_BASE) as usize]
            .as_mut()
            .expect("a keyval in use stays")
    }

    /// One attribute less uses `keyval`: gone with the last one if it was freed.
    fn release(&mut self, keyval: c_int) {
        let k = self.keyval_mut(keyval);
        k.uses -= 1;
        if k.freed && k.uses == 0 {
            self.keyvals[(keyval - KEYVAL_BASE) as usize] = None;
        }
    }
}

/// Call the delete callback of `keyval` (if any) on `value` of `obj`.
fn run_delete(kind: Kind, obj: Handle, keyval: c_int, value: usize) -> MpiResult<()> {
    let (delete, extra) = with_tables(|t| {
        let k = t.keyval_mut(keyval);
        (k.delete, k.extra_state)
    })?;
    let Some(f) = delete else { return Ok(()) };
    // SAFETY: `f` is the delete function the program gave MPI_*_create_keyval for objects of
    // this kind, called with the arguments its type declares; no table is borrowed.
    let rc = unsafe { f(obj, keyval, value as *mut c_void, extra as *mut c_void) };
    callback_result(rc, "delete", kind, keyval)
}

fn callback_result(rc: c_int, what: &str, kind: Kind, keyval: c_int) -> MpiResult<()> {
    if rc == MPI_SUCCESS {
        Ok(())
    } else {
        Err(MpiError::new(
            rc,
            format!(
                "the {what} callback of {} keyval {keyval} returned error {rc}",
                kind.name()
            ),
        ))
    }
}

/// `MPI_*_create_keyval`: a keyval of `kind` with the program's callbacks (0 and 1 stand
/// for the predefined `NULL_COPY_FN`/`NULL_DELETE_FN` and `DUP_FN`).
///
/// # Safety
/// `copy` and `delete` are 0, 1 (copy only) or functions of the kind's callback types;
/// `out` is null or valid for a write.
unsafe fn create_keyval(
    kind: Kind,
    copy: *const c_void,
    delete: *const c_void,
    out: *mut c_int,
    extra_state: *mut c_void,
) -> MpiResult<()> {
    state::with(|_| Ok(()))?;
    if out.is_null() {
        return Err(super::null_argument("keyval"));
    }
    let copy = match copy as usize {
        0 => OnDup::Null,
        1 => OnDup::Dup,
        // SAFETY: the caller's contract: a function of the copy callback type.
        _ => OnDup::User(unsafe { std::mem::transmute::<*const c_void, CopyFn>(copy) }),
    };
    let delete = (!delete.is_null()).then(|| {
        // SAFETY: the caller's contract: a function of the delete callback type.
        unsafe { std::mem::transmute::<*const c_void, DeleteFn>(delete) }
    });
    let entry = Keyval {
        kind,
        copy,
        delete,
        extra_state: extra_state as usize,
        freed: false,
        uses: 0,
    };
    let h = with_tables(|t| {
        super::table_insert(
            &mut t.keyvals,
            entry,
            (0, MAX_KEYVALS),
            "keyvals",
            "MPI_*_free_keyval",
        )
    })??;
    // SAFETY: the caller's int, non-null checked.
    unsafe { put(out, KEYVAL_BASE + h as c_int, "keyval") }
}

/// `MPI_*_free_keyval`: the handle becomes `MPI_KEYVAL_INVALID`; the keyval lives on while
/// attributes use it.
///
/// # Safety
/// `keyval` is null or valid for a read and a write.
unsafe fn free_keyval(kind: Kind, keyval: *mut c_int) -> MpiResult<()> {
    state::with(|_| Ok(()))?;
    if keyval.is_null() {
        return Err(super::null_argument("keyval"));
    }
    // SAFETY: non-null, the caller's int.
    let kv = unsafe { keyval.read() };
    with_tables(|t| {
        // Freeing again a keyval that attributes keep alive does nothing (as MPICH: its
        // keyval_double_free tests free one through a copy of its handle).
        t.keyval(kv, kind)?;
        let k = t.keyval_mut(kv);
        k.freed = true;
        if k.uses == 0 {
            t.keyvals[(kv - KEYVAL_BASE) as usize] = None;
        }
        Ok::<_, MpiError>(())
    })??;
    // SAFETY: as above.
    unsafe { keyval.write(MPI_KEYVAL_INVALID) };
    Ok(())
}

/// Set attribute `keyval` of `obj` to `value`, deleting the value it replaces first (its
/// delete callback failing leaves the old value and fails the call).
pub fn set(kind: Kind, obj: Handle, keyval: c_int, value: usize) -> MpiResult<()> {
    let old = with_tables(|t| {
        let k = t.keyval(keyval, kind)?;
        if k.freed {
            return Err(bad_keyval(keyval, kind, "it was freed"));
        }
        Ok(t.attrs
            .get(&(kind, obj))
            .and_then(|a| a.iter().find(|(k, _)| *k == keyval))
            .map(|&(_, v)| v))
    })??;
    if let Some(old) = old {
        run_delete(kind, obj, keyval, old)?;
    }
    with_tables(|t| {
        let list = t.attrs.entry((kind, obj)).or_default();
        match list.iter_mut().find(|(k, _)| *k == keyval) {
            Some(slot) => slot.1 = value,
            None => {
                list.push((keyval, value));
                t.keyval_mut(keyval).uses += 1;
            }
        }
    })
}

/// The value of attribute `keyval` of `obj`, if set.
pub fn get(kind: Kind, obj: Handle, keyval: c_int) -> MpiResult<Option<usize>> {
    with_tables(|t| {
        t.keyval(keyval, kind)?;
        Ok(t.attrs
            .get(&(kind, obj))
            .and_then(|a| a.iter().find(|(k, _)| *k == keyval))
            .map(|&(_, v)| v))
    })?
}

/// Delete attribute `keyval` of `obj` (nothing if it is not set), its delete callback first.
pub fn delete(kind: Kind, obj: Handle, keyval: c_int) -> MpiResult<()> {
    let value = get(kind, obj, keyval)?;
    let Some(value) = value else { return Ok(()) };
    run_delete(kind, obj, keyval, value)?;
    remove(kind, obj, keyval)
}

/// Remove the entry of attribute `keyval` of `obj` (its callback has run).
fn remove(kind: Kind, obj: Handle, keyval: c_int) -> MpiResult<()> {
    with_tables(|t| {
        let Some(list) = t.attrs.get_mut(&(kind, obj)) else {
            return;
        };
        let before = list.len();
        list.retain(|(k, _)| *k != keyval);
        let removed = before != list.len();
        if list.is_empty() {
            t.attrs.remove(&(kind, obj));
        }
        if removed {
            t.release(keyval);
        }
    })
}

/// Delete every attribute of `obj` (an object being freed), the most recently set first.
/// A delete callback failing stops there: the attributes not deleted stay, and the error
/// fails the call freeing the object.
pub fn delete_all(kind: Kind, obj: Handle) -> MpiResult<()> {
    loop {
        let last = with_tables(|t| t.attrs.get(&(kind, obj)).and_then(|a| a.last().copied()))?;
        let Some((keyval, value)) = last else {
            return Ok(());
        };
        run_delete(kind, obj, keyval, value)?;
        remove(kind, obj, keyval)?;
    }
}

/// Give `new`, a duplicate of `old`, the attributes the copy callbacks copy. A copy
/// callback failing deletes the attributes copied so far and fails the duplication.
pub fn copy_all(kind: Kind, old: Handle, new: Handle) -> MpiResult<()> {
    let attrs = with_tables(|t| t.attrs.get(&(kind, old)).cloned().unwrap_or_default())?;
    for (keyval, value) in attrs {
        let (copy, extra) = with_tables(|t| {
            let k = t.keyval_mut(keyval);
            (k.copy, k.extra_state)
        })?;
        let copied = match copy {
            OnDup::Null => None,
            OnDup::Dup => Some(value),
            OnDup::User(f) => {
                let mut out: usize = 0;
                let mut flag: c_int = 0;
                // SAFETY: `f` is the copy function the program gave MPI_*_create_keyval for
                // objects of this kind, called with the arguments its type declares (the
                // value out is a `void *` written through a `void **`); no table is
                // borrowed.
                let rc = unsafe {
                    f(
                        old,
                        keyval,
                        extra as *mut c_void,
                        value as *mut c_void,
                        (&mut out as *mut usize).cast(),
                        &mut flag,
                    )
                };
                if let Err(e) = callback_result(rc, "copy", kind, keyval) {
                    // What was copied goes (its delete callbacks run; their errors are
                    // secondary to the one reported).
                    let _ = delete_all(kind, new);
                    return Err(e);
                }
                (flag != 0).then_some(out)
            }
        };
        if let Some(v) = copied {
            with_tables(|t| {
                t.attrs.entry((kind, new)).or_default().push((keyval, v));
                t.keyval_mut(keyval).uses += 1;
            })?;
        }
    }
    Ok(())
}

/// Forget the attributes of `obj` without callbacks (the end of MPI: the objects go).
fn forget_all() -> MpiResult<()> {
    with_tables(|t| *t = Tables::default())
}

// ---- life-cycle hooks ----

/// `MPI_Comm_dup` (and its info and non-blocking forms) made `new` from `old`: copy the
/// attributes and info hints. On a copy callback's error `new` is freed, the program's
/// `newcomm` becomes `MPI_COMM_NULL` (as MPICH does) and the error is returned.
///
/// # Safety
/// `newcomm` is null or valid for a write of a handle.
pub unsafe fn comm_dup(old: Handle, new: Handle, newcomm: *mut Handle) -> MpiResult<()> {
    super::info::comm_info_copy(old, new)?;
    if let Err(e) = copy_all(Kind::Comm, old, new) {
        let _ = super::info::comm_info_drop(new);
        state::with(|s| s.free_comm(new))?;
        // SAFETY: the caller's contract.
        unsafe { put(newcomm, MPI_COMM_NULL, "newcomm")? };
        return Err(e);
    }
    super::buffers::comm_derived(old, new);
    Ok(())
}

/// `MPI_Comm_free` is about to free `comm`: check it may be freed, then run the delete
/// callbacks of its attributes (one failing fails the call, the communicator stays).
pub fn comm_free(comm: Handle) -> MpiResult<()> {
    state::with(|s| s.comm(comm).map(|_| ()))?;
    if comm == MPI_COMM_WORLD || comm == MPI_COMM_SELF {
        return Err(MpiError::new(
            MPI_ERR_COMM,
            "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed",
        ));
    }
    delete_all(Kind::Comm, comm)?;
    super::info::comm_info_drop(comm)
}

/// The end of `MPI_Type_dup` (which returned `rc` and wrote the duplicate at `new`): copy
/// the attributes of `old`; on a copy callback's error the duplicate is freed.
///
/// # Safety
/// `new` is what `MPI_Type_dup` was given; written by it when `rc` is `MPI_SUCCESS`.
pub unsafe fn type_dup(rc: c_int, old: Handle, new: *mut Handle) -> c_int {
    if rc != MPI_SUCCESS {
        return rc;
    }
    call("MPI_Type_dup", MPI_COMM_WORLD, || {
        // SAFETY: written by MPI_Type_dup (the caller's contract).
        let h = unsafe { new.read() };
        if let Err(e) = copy_all(Kind::Type, old, h) {
            let mut h = h;
            // SAFETY: a local handle variable.
            unsafe { super::types::MPI_Type_free(&mut h) };
            // SAFETY: as above.
            unsafe { new.write(MPI_DATATYPE_NULL) };
            return Err(e);
        }
        Ok(())
    })
}

/// `MPI_Type_free` is about to free `datatype`: run the delete callbacks of its attributes.
pub fn type_freed(datatype: Handle) -> MpiResult<()> {
    delete_all(Kind::Type, datatype)
}

/// The start of `MPI_Finalize`: the attributes of `MPI_COMM_SELF`, then of `MPI_COMM_WORLD`,
/// are deleted (MPI requires `MPI_COMM_SELF`'s first: libraries hook their clean-up there).
pub fn finalize() -> MpiResult<()> {
    delete_all(Kind::Comm, MPI_COMM_SELF)?;
    delete_all(Kind::Comm, MPI_COMM_WORLD)?;
    forget_all()
}

// ---- communicators ----

/// Values of the predefined attributes, static so that the pointers handed out stay valid.
static TAG_UB_VALUE: c_int = c_int::MAX;
static HOST_VALUE: c_int = MPI_PROC_NULL;
/// Every process may do I/O.
static IO_VALUE: c_int = MPI_ANY_SOURCE;
/// Clocks are per process.
static WTIME_IS_GLOBAL_VALUE: c_int = 0;
static APPNUM_VALUE: c_int = 0;

/// Is `keyval` one of the predefined communicator keys?
fn predefined_comm_key(keyval: c_int) -> bool {
    (MPI_TAG_UB..=MPI_UNIVERSE_SIZE).contains(&keyval)
}

/// Refuse a predefined key where the program may not change it.
fn refuse_predefined(keyval: c_int, fname: &str) -> MpiResult<()> {
    if predefined_comm_key(keyval) {
        return Err(MpiError::new(
            MPI_ERR_KEYVAL,
            format!("{fname}: keyval {keyval} is a predefined attribute key, which the program cannot set or delete"),
        ));
    }
    Ok(())
}

fn check_comm(comm: Handle) -> MpiResult<()> {
    state::with(|s| s.comm(comm).map(|_| ()))
}

/// `MPI_Comm_create_keyval`.
#[export]
pub unsafe extern "C" fn MPI_Comm_create_keyval(
    copy_fn: *const c_void,
    delete_fn: *const c_void,
    keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    call("MPI_Comm_create_keyval", MPI_COMM_WORLD, || {
        // SAFETY: MPI_Comm_create_keyval's contract: callbacks of the communicator types
        // (or the predefined 0/1), an int out.
        unsafe { create_keyval(Kind::Comm, copy_fn, delete_fn, keyval, extra_state) }
    })
}

/// `MPI_Keyval_create` (deprecated): `MPI_Comm_create_keyval`.
#[export]
pub unsafe extern "C" fn MPI_Keyval_create(
    copy_fn: *const c_void,
    delete_fn: *const c_void,
    keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    call("MPI_Keyval_create", MPI_COMM_WORLD, || {
        // SAFETY: as MPI_Comm_create_keyval (the C types are the same).
        unsafe { create_keyval(Kind::Comm, copy_fn, delete_fn, keyval, extra_state) }
    })
}

/// `MPI_Comm_free_keyval`.
#[export]
pub unsafe extern "C" fn MPI_Comm_free_keyval(keyval: *mut c_int) -> c_int {
    call("MPI_Comm_free_keyval", MPI_COMM_WORLD, || {
        // SAFETY: the caller's int.
        unsafe { free_keyval(Kind::Comm, keyval) }
    })
}

/// `MPI_Keyval_free` (deprecated): `MPI_Comm_free_keyval`.
#[export]
pub unsafe extern "C" fn MPI_Keyval_free(keyval: *mut c_int) -> c_int {
    call("MPI_Keyval_free", MPI_COMM_WORLD, || {
        // SAFETY: the caller's int.
        unsafe { free_keyval(Kind::Comm, keyval) }
    })
}

fn comm_set(comm: Handle, keyval: c_int, value: usize, fname: &str) -> MpiResult<()> {
    check_comm(comm)?;
    refuse_predefined(keyval, fname)?;
    set(Kind::Comm, comm, keyval, value)
}

/// `MPI_Comm_set_attr`.
#[export]
pub unsafe extern "C" fn MPI_Comm_set_attr(
    comm: Handle,
    keyval: c_int,
    attribute_val: *mut c_void,
) -> c_int {
    call("MPI_Comm_set_attr", comm, || {
        comm_set(comm, keyval, attribute_val as usize, "MPI_Comm_set_attr")
    })
}

/// `MPI_Attr_put` (deprecated): `MPI_Comm_set_attr`.
#[export]
pub unsafe extern "C" fn MPI_Attr_put(
    comm: Handle,
    keyval: c_int,
    attribute_val: *mut c_void,
) -> c_int {
    call("MPI_Attr_put", comm, || {
        comm_set(comm, keyval, attribute_val as usize, "MPI_Attr_put")
    })
}

/// The attribute `keyval` of `comm`: a predefined key's value is a pointer to a static int.
fn comm_get(comm: Handle, keyval: c_int) -> MpiResult<Option<usize>> {
    let world_size = state::with(|s| {
        s.comm(comm)?;
        Ok(s.comm(MPI_COMM_WORLD)?.comm.size())
    })?;
    // MPI_UNIVERSE_SIZE's value lives as long as the process: the job never grows.
    static UNIVERSE_SIZE_VALUE: std::sync::OnceLock<c_int> = std::sync::OnceLock::new();
    let value: *const c_int = match keyval {
        MPI_TAG_UB => &TAG_UB_VALUE,
        MPI_HOST => &HOST_VALUE,
        MPI_IO => &IO_VALUE,
        MPI_WTIME_IS_GLOBAL => &WTIME_IS_GLOBAL_VALUE,
        MPI_APPNUM => &APPNUM_VALUE,
        MPI_LASTUSEDCODE => super::env::LASTUSEDCODE.as_ptr(),
        MPI_UNIVERSE_SIZE => UNIVERSE_SIZE_VALUE.get_or_init(|| world_size as c_int),
        _ => return get(Kind::Comm, comm, keyval),
    };
    Ok(Some(value as usize))
}

/// Write a get_attr's answer: the value through `attribute_val` (a `void **`) and the flag.
///
/// # Safety
/// `attribute_val` is null or valid for a write of a pointer, `flag` of an int.
unsafe fn put_attr(
    value: Option<usize>,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> MpiResult<()> {
    if attribute_val.is_null() {
        return Err(super::null_argument("attribute_val"));
    }
    // SAFETY: the caller's contract.
    unsafe {
        put(flag, c_int::from(value.is_some()), "flag")?;
        if let Some(v) = value {
            attribute_val.cast::<usize>().write(v);
        }
    }
    Ok(())
}

/// `MPI_Comm_get_attr`: the predefined keys (`MPI_TAG_UB`, `MPI_HOST`, `MPI_IO`,
/// `MPI_WTIME_IS_GLOBAL`, `MPI_APPNUM`, `MPI_LASTUSEDCODE`, `MPI_UNIVERSE_SIZE`: a pointer
/// to an int) and the program's.
#[export]
pub unsafe extern "C" fn MPI_Comm_get_attr(
    comm: Handle,
    keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    call("MPI_Comm_get_attr", comm, || {
        let v = comm_get(comm, keyval)?;
        // SAFETY: MPI_Comm_get_attr's contract: a `void **` and an int.
        unsafe { put_attr(v, attribute_val, flag) }
    })
}

/// `MPI_Attr_get` (deprecated): `MPI_Comm_get_attr`.
#[export]
pub unsafe extern "C" fn MPI_Attr_get(
    comm: Handle,
    keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    call("MPI_Attr_get", comm, || {
        let v = comm_get(comm, keyval)?;
        // SAFETY: as MPI_Comm_get_attr.
        unsafe { put_attr(v, attribute_val, flag) }
    })
}

fn comm_delete(comm: Handle, keyval: c_int, fname: &str) -> MpiResult<()> {
    check_comm(comm)?;
    refuse_predefined(keyval, fname)?;
    delete(Kind::Comm, comm, keyval)
}

/// `MPI_Comm_delete_attr`.
#[export]
pub unsafe extern "C" fn MPI_Comm_delete_attr(comm: Handle, keyval: c_int) -> c_int {
    call("MPI_Comm_delete_attr", comm, || {
        comm_delete(comm, keyval, "MPI_Comm_delete_attr")
    })
}

/// `MPI_Attr_delete` (deprecated): `MPI_Comm_delete_attr`.
#[export]
pub unsafe extern "C" fn MPI_Attr_delete(comm: Handle, keyval: c_int) -> c_int {
    call("MPI_Attr_delete", comm, || {
        comm_delete(comm, keyval, "MPI_Attr_delete")
    })
}

// ---- datatypes ----

fn check_type(datatype: Handle) -> MpiResult<()> {
    state::with(|_| Ok(()))?;
    super::types::Ty::lookup(datatype).map(|_| ())
}

/// `MPI_Type_create_keyval`.
#[export]
pub unsafe extern "C" fn MPI_Type_create_keyval(
    copy_fn: *const c_void,
    delete_fn: *const c_void,
    keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    call("MPI_Type_create_keyval", MPI_COMM_WORLD, || {
        // SAFETY: MPI_Type_create_keyval's contract: callbacks of the datatype types (or
        // the predefined 0/1), an int out.
        unsafe { create_keyval(Kind::Type, copy_fn, delete_fn, keyval, extra_state) }
    })
}

/// `MPI_Type_free_keyval`.
#[export]
pub unsafe extern "C" fn MPI_Type_free_keyval(keyval: *mut c_int) -> c_int {
    call("MPI_Type_free_keyval", MPI_COMM_WORLD, || {
        // SAFETY: the caller's int.
        unsafe { free_keyval(Kind::Type, keyval) }
    })
}

/// `MPI_Type_set_attr` (predefined datatypes too).
#[export]
pub unsafe extern "C" fn MPI_Type_set_attr(
    datatype: Handle,
    keyval: c_int,
    attribute_val: *mut c_void,
) -> c_int {
    call("MPI_Type_set_attr", MPI_COMM_WORLD, || {
        check_type(datatype)?;
        set(Kind::Type, datatype, keyval, attribute_val as usize)
    })
}

/// `MPI_Type_get_attr`.
#[export]
pub unsafe extern "C" fn MPI_Type_get_attr(
    datatype: Handle,
    keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    call("MPI_Type_get_attr", MPI_COMM_WORLD, || {
        check_type(datatype)?;
        let v = get(Kind::Type, datatype, keyval)?;
        // SAFETY: MPI_Type_get_attr's contract: a `void **` and an int.
        unsafe { put_attr(v, attribute_val, flag) }
    })
}

/// `MPI_Type_delete_attr`.
#[export]
pub unsafe extern "C" fn MPI_Type_delete_attr(datatype: Handle, keyval: c_int) -> c_int {
    call("MPI_Type_delete_attr", MPI_COMM_WORLD, || {
        check_type(datatype)?;
        delete(Kind::Type, datatype, keyval)
    })
}

// ---- windows (keyvals only: rmca has no windows yet; `set`, `get`, `delete` and
// `delete_all` with `Kind::Win` are what their attribute calls need) ----

/// `MPI_Win_create_keyval`.
#[export]
pub unsafe extern "C" fn MPI_Win_create_keyval(
    copy_fn: *const c_void,
    delete_fn: *const c_void,
    keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    call("MPI_Win_create_keyval", MPI_COMM_WORLD, || {
        // SAFETY: MPI_Win_create_keyval's contract: callbacks of the window types (or the
        // predefined 0/1), an int out.
        unsafe { create_keyval(Kind::Win, copy_fn, delete_fn, keyval, extra_state) }
    })
}

/// `MPI_Win_free_keyval`.
#[export]
pub unsafe extern "C" fn MPI_Win_free_keyval(keyval: *mut c_int) -> c_int {
    call("MPI_Win_free_keyval", MPI_COMM_WORLD, || {
        // SAFETY: the caller's int.
        unsafe { free_keyval(Kind::Win, keyval) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A keyval made without MPI running (the tests have no state): its number.
    fn keyval(kind: Kind, copy: OnDup) -> c_int {
        let entry = Keyval {
            kind,
            copy,
            delete: None,
            extra_state: 0,
            freed: false,
            uses: 0,
        };
        let i = with_tables(|t| {
            super::super::table_insert(&mut t.keyvals, entry, (0, MAX_KEYVALS), "keyvals", "-")
        })
        .unwrap()
        .unwrap();
        KEYVAL_BASE + i as c_int
    }

    #[test]
    fn attributes_are_per_object_and_copied_by_the_keyval_rule() {
        let dup = keyval(Kind::Comm, OnDup::Dup);
        let null = keyval(Kind::Comm, OnDup::Null);
        set(Kind::Comm, 7, dup, 70).unwrap();
        set(Kind::Comm, 7, null, 71).unwrap();
        assert_eq!(get(Kind::Comm, 7, dup).unwrap(), Some(70));
        assert_eq!(get(Kind::Comm, 8, dup).unwrap(), None);
        copy_all(Kind::Comm, 7, 8).unwrap();
        assert_eq!(get(Kind::Comm, 8, dup).unwrap(), Some(70));
        assert_eq!(get(Kind::Comm, 8, null).unwrap(), None);
        // A keyval of another kind is refused.
        let e = get(Kind::Type, 7, dup).unwrap_err();
        assert_eq!(e.class, MPI_ERR_KEYVAL);
        delete_all(Kind::Comm, 7).unwrap();
        delete_all(Kind::Comm, 8).unwrap();
        assert_eq!(get(Kind::Comm, 7, dup).unwrap(), None);
    }

    #[test]
    fn a_freed_keyval_lives_while_an_attribute_uses_it() {
        let k = keyval(Kind::Type, OnDup::Dup);
        set(Kind::Type, 3, k, 30).unwrap();
        // As MPI_Type_free_keyval does (which needs MPI running).
        with_tables(|t| t.keyval_mut(k).freed = true).unwrap();
        assert_eq!(get(Kind::Type, 3, k).unwrap(), Some(30));
        assert_eq!(set(Kind::Type, 4, k, 1).unwrap_err().class, MPI_ERR_KEYVAL);
        delete(Kind::Type, 3, k).unwrap();
        assert_eq!(get(Kind::Type, 3, k).unwrap_err().class, MPI_ERR_KEYVAL);
    }
}
