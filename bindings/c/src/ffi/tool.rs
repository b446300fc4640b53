//! The MPI tool information interface (`MPI_T_*`): rmca's MCA parameters as control
//! variables (as Open MPI shows its MCA parameters), its profiling counters and per-component
//! memory as performance variables, one category per framework and per component. rmca
//! raises no events: there are none to list, and one event source (the clock events would be
//! stamped with, in nanoseconds).
//!
//! The interface has a life of its own: `MPI_T_init_thread` may come before `MPI_Init` and
//! `MPI_T_finalize` after `MPI_Finalize`. Before `MPI_Init` the parameters are resolved here
//! from the same sources init reads (files, environment, plugins on `component_path`), and a
//! write is handed to the init to come; once running, the runtime's own parameters are shown
//! (what its components read) and no write can take effect. Every call returns its code (an
//! `MPI_T_ERR_*` value) and calls no error handler.

mod catalog;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use rmca::framework::params::{parse_value, ParamStore, RawSources};
use rmca::framework::registry::Registry;
use rmca::RankProfile;
use rmca_mpi_export::export;

use crate::abi::*;
use crate::state::{self, Phase};
use catalog::{Catalog, CvarValue, MPI_CHAR, MPI_INT, MPI_LONG_LONG, MPI_UNSIGNED_LONG_LONG};

// mpi.h's MPI_T error codes and constants (MPI_T_ERR_NOT_SUPPORTED is in `abi`).
const MPI_T_ERR_CANNOT_INIT: c_int = 1001;
const MPI_T_ERR_NOT_ACCESSIBLE: c_int = 1002;
const MPI_T_ERR_NOT_INITIALIZED: c_int = 1003;
const MPI_T_ERR_INVALID: c_int = 1006;
const MPI_T_ERR_INVALID_INDEX: c_int = 1007;
const MPI_T_ERR_INVALID_ITEM: c_int = 1008;
const MPI_T_ERR_INVALID_SESSION: c_int = 1009;
const MPI_T_ERR_INVALID_HANDLE: c_int = 1010;
const MPI_T_ERR_INVALID_NAME: c_int = 1011;
const MPI_T_ERR_CVAR_SET_NOT_NOW: c_int = 1014;
const MPI_T_ERR_CVAR_SET_NEVER: c_int = 1015;
const MPI_T_ERR_PVAR_NO_WRITE: c_int = 1016;
const MPI_T_ERR_PVAR_NO_STARTSTOP: c_int = 1017;
const MPI_T_BIND_NO_OBJECT: c_int = 1;
const MPI_T_SOURCE_ORDERED: c_int = 1;
const MPI_T_PVAR_ALL_HANDLES: Handle = 1;
const HANDLE_NULL: Handle = 0;

// Handles of the interface's objects: a per-kind base plus an id never reused in the
// process, so that a freed handle, one of another kind or garbage is refused.
const CVAR_HANDLE_BASE: Handle = 0x7100_0000;
const SESSION_BASE: Handle = 0x7200_0000;
const PVAR_HANDLE_BASE: Handle = 0x7300_0000;
const ENUM_BASE: Handle = 0x7400_0000;

/// The smallest buffer a string control variable's handle asks for (its `count`).
const MIN_STRING_COUNT: usize = 256;

type TResult<T> = Result<T, c_int>;

struct CvarHandle {
    cvar: usize,
    /// Elements the caller's buffer holds (characters, for strings).
    count: usize,
}

struct PvarHandle {
    session: Handle,
    pvar: usize,
    /// The raw count this handle's value is measured from (counters start at 0 at
    /// allocation; a reset or write moves it).
    baseline: u64,
}

/// The interface's state: kept after the last `MPI_T_finalize` so that indices stay the
/// same for the life of the process; handles and sessions end with it.
struct Tool {
    refs: usize,
    catalog: Catalog,
    params: ParamStore,
    /// `params` is the running runtime's, not resolved here.
    params_from_runtime: bool,
    cvar_handles: BTreeMap<Handle, CvarHandle>,
    sessions: BTreeSet<Handle>,
    pvar_handles: BTreeMap<Handle, PvarHandle>,
    next_id: usize,
}

static TOOL: Mutex<Option<Tool>> = Mutex::new(None);

fn lock() -> MutexGuard<'static, Option<Tool>> {
    // A panic inside a call leaves consistent data (every change is one assignment).
    TOOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The origin of the event source's timestamps.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Run the body of an `MPI_T` call on the initialized interface: its code, never a panic
/// into C.
fn tool_call(f: impl FnOnce(&mut Tool) -> TResult<()>) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| match lock().as_mut() {
        Some(t) if t.refs > 0 => f(t),
        _ => Err(MPI_T_ERR_NOT_INITIALIZED),
    }));
    match r {
        Ok(Ok(())) => MPI_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => {
            tracing::error!("internal error in an MPI_T call");
            MPI_ERR_INTERN
        }
    }
}

/// The parameters as `MPI_Init` would resolve them now (with the writes made so far).
fn resolve_here() -> Result<ParamStore, String> {
    let raw =
        RawSources::gather(rmca::tool::params_set_before_init()).map_err(|e| e.to_string())?;
    Registry::discover(&raw)
        .resolve(&raw)
        .map_err(|e| e.to_string())
}

/// The running runtime's parameters (`None` before init, after finalize, or on a thread
/// other than MPI's).
fn runtime_params() -> Option<ParamStore> {
    state::with(|s| Ok(s.universe.params())).ok().flatten()
}

/// This process's profile now (`None` when MPI is not running on this thread).
fn runtime_profile() -> Option<RankProfile> {
    state::with(|s| Ok(s.universe.profile())).ok().flatten()
}

impl Tool {
    /// Once MPI runs, show the runtime's parameters: exactly what its components read.
    fn sync_params(&mut self) {
        if !self.params_from_runtime && state::phase() == Phase::Running {
            if let Some(p) = runtime_params() {
                self.catalog.add_params(&p);
                self.params = p;
                self.params_from_runtime = true;
            }
        }
    }

    /// The profile now, after adding its counters not shown yet.
    fn sync_pvars(&mut self) -> Option<RankProfile> {
        let p = runtime_profile()?;
        self.catalog.add_profile(&p);
        Some(p)
    }

    fn sync(&mut self) {
        self.sync_params();
        self.sync_pvars();
    }

    fn new_handle(&mut self, base: Handle) -> Handle {
        self.next_id += 1;
        base + self.next_id
    }

    fn cvar(&self, index: c_int) -> TResult<&catalog::Cvar> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.catalog.cvars.get(i))
            .ok_or(MPI_T_ERR_INVALID_INDEX)
    }

    fn pvar(&self, index: c_int) -> TResult<&catalog::Pvar> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.catalog.pvars.get(i))
            .ok_or(MPI_T_ERR_INVALID_INDEX)
    }

    fn category(&self, index: c_int) -> TResult<&catalog::Category> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.catalog.categories.get(i))
            .ok_or(MPI_T_ERR_INVALID_INDEX)
    }

    fn enumeration(&self, h: Handle) -> TResult<&catalog::Enum> {
        h.checked_sub(ENUM_BASE)
            .and_then(|i| self.catalog.enums.get(i))
            .ok_or(MPI_T_ERR_INVALID_HANDLE)
    }

    fn session(&self, h: Handle) -> TResult<()> {
        if self.sessions.contains(&h) {
            Ok(())
        } else {
            Err(MPI_T_ERR_INVALID_SESSION)
        }
    }

    /// The handle `h` of session `session` (both checked).
    fn pvar_handle(&mut self, session: Handle, h: Handle) -> TResult<&mut PvarHandle> {
        self.session(session)?;
        match self.pvar_handles.get_mut(&h) {
            Some(ph) if ph.session == session => Ok(ph),
            _ => Err(MPI_T_ERR_INVALID_HANDLE),
        }
    }

    /// The raw value of performance variable `pvar` now.
    fn raw_value(&mut self, pvar: usize) -> TResult<u64> {
        let p = runtime_profile().ok_or(MPI_T_ERR_NOT_ACCESSIBLE)?;
        self.catalog.pvars[pvar]
            .value(&p)
            .ok_or(MPI_T_ERR_NOT_ACCESSIBLE)
    }
}

/// Write `v` through `p` if the caller passed somewhere to write it.
///
/// # Safety
/// `p` is null or valid for a write of a `T`.
unsafe fn out<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: non-null, and valid for a write by the caller's contract.
        unsafe { p.write(v) }
    }
}

/// Write `v` through the out-argument `p`, which the standard requires.
///
/// # Safety
/// As [`out`].
unsafe fn out_required<T>(p: *mut T, v: T) -> TResult<()> {
    if p.is_null() {
        return Err(MPI_T_ERR_INVALID);
    }
    // SAFETY: as the caller's.
    unsafe { out(p, v) };
    Ok(())
}

/// Return string `s` by the interface's rules: nothing if `len` is null; the length needed
/// (with the terminating null) if `buf` is null or `*len` is 0; otherwise as much of `s` as
/// fits in `*len` characters with the null, and in `*len` how many were written.
///
/// # Safety
/// `len` is null or a valid `int`; `buf` is null or holds `*len` characters.
unsafe fn out_string(buf: *mut c_char, len: *mut c_int, s: &str) {
    if len.is_null() {
        return;
    }
    // SAFETY: non-null `len` is the caller's int.
    let cap = unsafe { *len };
    if buf.is_null() || cap <= 0 {
        // SAFETY: as above.
        unsafe { *len = c_int::try_from(s.len() + 1).unwrap_or(c_int::MAX) };
        return;
    }
    let n = s.len().min(cap as usize - 1);
    // SAFETY: `buf` holds `cap` > `n` characters (the caller's contract); `s` is ours and
    // cannot overlap it.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
        *len = (n + 1) as c_int;
    }
}

/// The C string `name` (an argument the standard requires).
///
/// # Safety
/// `name` is null or a null-terminated string.
unsafe fn in_string<'a>(name: *const c_char) -> TResult<&'a str> {
    if name.is_null() {
        return Err(MPI_T_ERR_INVALID);
    }
    // SAFETY: a null-terminated string by the caller's contract.
    unsafe { CStr::from_ptr(name) }
        .to_str()
        .map_err(|_| MPI_T_ERR_INVALID_NAME)
}

/// Write the `len`-element list `items` into `indices` (at most `len` of them).
///
/// # Safety
/// `indices` holds `len` ints.
unsafe fn out_indices(len: c_int, indices: *mut c_int, items: &[usize]) -> TResult<()> {
    let len = usize::try_from(len).map_err(|_| MPI_T_ERR_INVALID)?;
    let n = len.min(items.len());
    if n == 0 {
        return Ok(());
    }
    if indices.is_null() {
        return Err(MPI_T_ERR_INVALID);
    }
    for (i, &item) in items[..n].iter().enumerate() {
        // SAFETY: `indices` holds `len` >= `n` ints.
        unsafe { *indices.add(i) = item as c_int };
    }
    Ok(())
}

// ---- Life cycle -------------------------------------------------------------------------

/// The level `MPI_T_init_thread` provides for `required`: the highest level not above it (the
/// ABI's levels are 0, 1024, 2048 and 4096, so a value between two is no level and a clamp
/// would hand it back).
fn provided_level(required: c_int) -> c_int {
    [
        MPI_THREAD_MULTIPLE,
        MPI_THREAD_SERIALIZED,
        MPI_THREAD_FUNNELED,
    ]
    .into_iter()
    .find(|&l| required >= l)
    .unwrap_or(MPI_THREAD_SINGLE)
}

/// `MPI_T_init_thread`: start (or count one more user of) the tool interface; callable
/// before `MPI_Init` and after `MPI_Finalize`. Provides the level asked for, up to
/// `MPI_THREAD_MULTIPLE`: the interface's own state is under one mutex, and what it reads of
/// the runtime it reads through the library state's owner check (a thread the MPI level does
/// not let in reads the values of before `MPI_Init` instead).
#[export]
pub unsafe extern "C" fn MPI_T_init_thread(required: c_int, provided: *mut c_int) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| -> TResult<()> {
        let mut g = lock();
        match g.as_mut() {
            Some(t) => t.refs += 1,
            None => {
                let (params, from_runtime) = match runtime_params() {
                    Some(p) => (p, true),
                    None => match resolve_here() {
                        Ok(p) => (p, false),
                        Err(e) => {
                            tracing::warn!("MPI_T_init_thread: MCA parameters: {e}");
                            return Err(MPI_T_ERR_CANNOT_INIT);
                        }
                    },
                };
                let mut catalog = Catalog::default();
                catalog.add_params(&params);
                *g = Some(Tool {
                    refs: 1,
                    catalog,
                    params,
                    params_from_runtime: from_runtime,
                    cvar_handles: BTreeMap::new(),
                    sessions: BTreeSet::new(),
                    pvar_handles: BTreeMap::new(),
                    next_id: 0,
                });
            }
        }
        epoch();
        let level = provided_level(required);
        // SAFETY: `provided` is null or the caller's int.
        unsafe { out(provided, level) };
        Ok(())
    }));
    match r {
        Ok(Ok(())) => MPI_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => MPI_T_ERR_CANNOT_INIT,
    }
}

/// `MPI_T_finalize`: one user fewer; the last one frees every handle and session.
#[export]
pub unsafe extern "C" fn MPI_T_finalize() -> c_int {
    tool_call(|t| {
        t.refs -= 1;
        if t.refs == 0 {
            t.cvar_handles.clear();
            t.sessions.clear();
            t.pvar_handles.clear();
        }
        Ok(())
    })
}

// ---- Control variables --------------------------------------------------------------------

/// `MPI_T_cvar_get_num`: how many MCA parameters there are.
#[export]
pub unsafe extern "C" fn MPI_T_cvar_get_num(num_cvar: *mut c_int) -> c_int {
    tool_call(|t| {
        t.sync_params();
        // SAFETY: the caller's int.
        unsafe { out_required(num_cvar, t.catalog.cvars.len() as c_int) }
    })
}

/// `MPI_T_cvar_get_info`: a parameter's name, level, type, enumeration, help and scope
/// (before `MPI_Init`, `MPI_T_SCOPE_LOCAL`, or `_ALL_EQ` for the parameters every rank must
/// share; `MPI_T_SCOPE_READONLY` once MPI started, and for parameters read before the
/// parameter system exists).
#[export]
pub unsafe extern "C" fn MPI_T_cvar_get_info(
    cvar_index: c_int,
    name: *mut c_char,
    name_len: *mut c_int,
    verbosity: *mut c_int,
    datatype: *mut Handle,
    enumtype: *mut Handle,
    desc: *mut c_char,
    desc_len: *mut c_int,
    bind: *mut c_int,
    scope: *mut c_int,
) -> c_int {
    tool_call(|t| {
        let c = t.cvar(cvar_index)?;
        let en = c.enumtype.map_or(HANDLE_NULL, |i| ENUM_BASE + i);
        // Once MPI started, every component has read its parameters: none can be written
        // again in this process.
        let scope_now = if state::phase() == Phase::Before {
            c.scope
        } else {
            catalog::SCOPE_READONLY
        };
        // SAFETY: each pointer is null or what MPI_T_cvar_get_info's prototype says.
        unsafe {
            out_string(name, name_len, &c.name);
            out(verbosity, c.verbosity());
            out(datatype, c.datatype());
            out(enumtype, en);
            out_string(desc, desc_len, &c.help);
            out(bind, MPI_T_BIND_NO_OBJECT);
            out(scope, scope_now);
        }
        Ok(())
    })
}

/// `MPI_T_cvar_get_index`: the index of the parameter named `name`.
#[export]
pub unsafe extern "C" fn MPI_T_cvar_get_index(
    name: *const c_char,
    cvar_index: *mut c_int,
) -> c_int {
    tool_call(|t| {
        // SAFETY: the caller's string.
        let name = unsafe { in_string(name) }?;
        t.sync_params();
        let i = t.catalog.cvar_index(name).ok_or(MPI_T_ERR_INVALID_NAME)?;
        // SAFETY: the caller's int.
        unsafe { out_required(cvar_index, i as c_int) }
    })
}

/// `MPI_T_cvar_handle_alloc`: a handle on a parameter (bound to no object) and how many
/// elements of its datatype a read yields (characters with the null, for strings).
#[export]
pub unsafe extern "C" fn MPI_T_cvar_handle_alloc(
    cvar_index: c_int,
    _obj_handle: *mut std::ffi::c_void,
    handle: *mut Handle,
    count: *mut c_int,
) -> c_int {
    tool_call(|t| {
        t.sync_params();
        let c = t.cvar(cvar_index)?;
        if handle.is_null() || count.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        let n = if c.datatype() == MPI_CHAR {
            let current = t
                .params
                .entry(&c.name)
                .map_or(0, |e| e.value.to_string().len());
            (current + 1).max(MIN_STRING_COUNT)
        } else {
            1
        };
        let h = t.new_handle(CVAR_HANDLE_BASE);
        t.cvar_handles.insert(
            h,
            CvarHandle {
                cvar: cvar_index as usize,
                count: n,
            },
        );
        // SAFETY: checked non-null; the caller's handle and int.
        unsafe {
            out(handle, h);
            out(count, n as c_int);
        }
        Ok(())
    })
}

/// `MPI_T_cvar_handle_free`: free the handle and set it to `MPI_T_CVAR_HANDLE_NULL`.
#[export]
pub unsafe extern "C" fn MPI_T_cvar_handle_free(handle: *mut Handle) -> c_int {
    tool_call(|t| {
        if handle.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        // SAFETY: the caller's handle.
        let h = unsafe { *handle };
        t.cvar_handles.remove(&h).ok_or(MPI_T_ERR_INVALID_HANDLE)?;
        // SAFETY: as above.
        unsafe { *handle = HANDLE_NULL };
        Ok(())
    })
}

/// `MPI_T_cvar_read`: the parameter's current value.
#[export]
pub unsafe extern "C" fn MPI_T_cvar_read(handle: Handle, buf: *mut std::ffi::c_void) -> c_int {
    tool_call(|t| {
        t.sync_params();
        let ch = t
            .cvar_handles
            .get(&handle)
            .ok_or(MPI_T_ERR_INVALID_HANDLE)?;
        if buf.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        let c = &t.catalog.cvars[ch.cvar];
        // A parameter the runtime does not know (a plugin seen only before init).
        let entry = t
            .params
            .entry(&c.name)
            .map_err(|_| MPI_T_ERR_NOT_ACCESSIBLE)?;
        // SAFETY: `buf` holds `count` elements of the variable's datatype (the count
        // MPI_T_cvar_handle_alloc returned).
        unsafe {
            match catalog::to_tool(c, &entry.value) {
                CvarValue::Int(v) => buf.cast::<c_int>().write_unaligned(v),
                CvarValue::LongLong(v) => buf.cast::<i64>().write_unaligned(v),
                CvarValue::Unsigned(v) => buf.cast::<u64>().write_unaligned(v),
                CvarValue::Text(s) => {
                    let n = s.len().min(ch.count - 1);
                    std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
                    *buf.cast::<u8>().add(n) = 0;
                }
            }
        }
        Ok(())
    })
}

/// `MPI_T_cvar_write`: set a parameter for the `MPI_Init` to come. Once MPI runs every
/// component has read its parameters (`MPI_T_ERR_CVAR_SET_NOT_NOW`); after `MPI_Finalize`,
/// and for parameters read before the parameter system exists, no write can take effect
/// (`MPI_T_ERR_CVAR_SET_NEVER`). A value outside the parameter's range or words is
/// `MPI_T_ERR_INVALID`.
#[export]
pub unsafe extern "C" fn MPI_T_cvar_write(handle: Handle, buf: *const std::ffi::c_void) -> c_int {
    tool_call(|t| {
        let ch = t
            .cvar_handles
            .get(&handle)
            .ok_or(MPI_T_ERR_INVALID_HANDLE)?;
        let c = t.catalog.cvars[ch.cvar].clone();
        if !c.writable() {
            return Err(MPI_T_ERR_CVAR_SET_NEVER);
        }
        match state::phase() {
            Phase::Before => {}
            Phase::Running => return Err(MPI_T_ERR_CVAR_SET_NOT_NOW),
            Phase::Finalized => return Err(MPI_T_ERR_CVAR_SET_NEVER),
        }
        if buf.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        // SAFETY: `buf` holds one element of the variable's datatype, or a null-terminated
        // string for MPI_CHAR variables.
        let value = unsafe {
            match c.datatype() {
                MPI_INT => CvarValue::Int(buf.cast::<c_int>().read_unaligned()),
                MPI_LONG_LONG => CvarValue::LongLong(buf.cast::<i64>().read_unaligned()),
                MPI_UNSIGNED_LONG_LONG => CvarValue::Unsigned(buf.cast::<u64>().read_unaligned()),
                _ => CvarValue::Text(
                    CStr::from_ptr(buf.cast::<c_char>())
                        .to_str()
                        .map_err(|_| MPI_T_ERR_INVALID)?
                        .to_owned(),
                ),
            }
        };
        let text = catalog::from_tool(&c, &value).map_err(|e| {
            tracing::debug!("MPI_T_cvar_write {}: {e}", c.name);
            MPI_T_ERR_INVALID
        })?;
        if let Err(e) = parse_value(&c.ty, &text) {
            tracing::debug!("MPI_T_cvar_write {}: '{text}' is not {e}", c.name);
            return Err(MPI_T_ERR_INVALID);
        }
        rmca::tool::set_param_before_init(&c.name, &text);
        // Resolve again: the value and its source as init will see them (a new
        // component_path may also bring plugins and their parameters).
        match resolve_here() {
            Ok(p) => {
                t.catalog.add_params(&p);
                t.params = p;
                Ok(())
            }
            Err(e) => {
                tracing::warn!("MPI_T_cvar_write {}: {e}", c.name);
                Err(MPI_T_ERR_INVALID)
            }
        }
    })
}

/// `MPI_T_enum_get_info`: how many words an enumerated parameter has, and its name.
#[export]
pub unsafe extern "C" fn MPI_T_enum_get_info(
    enumtype: Handle,
    num: *mut c_int,
    name: *mut c_char,
    name_len: *mut c_int,
) -> c_int {
    tool_call(|t| {
        let e = t.enumeration(enumtype)?;
        // SAFETY: the caller's int and string buffer.
        unsafe {
            out(num, e.items.len() as c_int);
            out_string(name, name_len, &e.name);
        }
        Ok(())
    })
}

/// `MPI_T_enum_get_item`: word `index` of an enumeration; its value is its position.
#[export]
pub unsafe extern "C" fn MPI_T_enum_get_item(
    enumtype: Handle,
    index: c_int,
    value: *mut c_int,
    name: *mut c_char,
    name_len: *mut c_int,
) -> c_int {
    tool_call(|t| {
        let e = t.enumeration(enumtype)?;
        let word = usize::try_from(index)
            .ok()
            .and_then(|i| e.items.get(i))
            .ok_or(MPI_T_ERR_INVALID_ITEM)?;
        // SAFETY: the caller's int and string buffer.
        unsafe {
            out(value, index);
            out_string(name, name_len, word);
        }
        Ok(())
    })
}

// ---- Performance variables ----------------------------------------------------------------

/// `MPI_T_pvar_get_num`: how many counters there are (none before `MPI_Init`: they belong to
/// the PML and BTLs init selects).
#[export]
pub unsafe extern "C" fn MPI_T_pvar_get_num(num_pvar: *mut c_int) -> c_int {
    tool_call(|t| {
        t.sync_pvars();
        // SAFETY: the caller's int.
        unsafe { out_required(num_pvar, t.catalog.pvars.len() as c_int) }
    })
}

/// `MPI_T_pvar_get_info`: a counter's name, class and description; every one is a
/// continuous `MPI_UNSIGNED_LONG_LONG` bound to no object.
#[export]
pub unsafe extern "C" fn MPI_T_pvar_get_info(
    pvar_index: c_int,
    name: *mut c_char,
    name_len: *mut c_int,
    verbosity: *mut c_int,
    var_class: *mut c_int,
    datatype: *mut Handle,
    enumtype: *mut Handle,
    desc: *mut c_char,
    desc_len: *mut c_int,
    bind: *mut c_int,
    readonly: *mut c_int,
    continuous: *mut c_int,
    atomic: *mut c_int,
) -> c_int {
    tool_call(|t| {
        let p = t.pvar(pvar_index)?;
        // SAFETY: each pointer is null or what MPI_T_pvar_get_info's prototype says.
        unsafe {
            out_string(name, name_len, &p.name);
            out(verbosity, catalog::VERBOSITY_TUNER_BASIC);
            out(var_class, p.class);
            out(datatype, MPI_UNSIGNED_LONG_LONG);
            out(enumtype, HANDLE_NULL);
            out_string(desc, desc_len, &p.desc);
            out(bind, MPI_T_BIND_NO_OBJECT);
            out(readonly, c_int::from(p.readonly()));
            out(continuous, 1);
            // A reset or write only moves the handle's baseline: it cannot race a count.
            out(atomic, c_int::from(!p.readonly()));
        }
        Ok(())
    })
}

/// `MPI_T_pvar_get_index`: the index of the counter `name` of class `var_class`.
#[export]
pub unsafe extern "C" fn MPI_T_pvar_get_index(
    name: *const c_char,
    var_class: c_int,
    pvar_index: *mut c_int,
) -> c_int {
    tool_call(|t| {
        // SAFETY: the caller's string.
        let name = unsafe { in_string(name) }?;
        t.sync_pvars();
        let i = t
            .catalog
            .pvar_index(name)
            .filter(|&i| t.catalog.pvars[i].class == var_class)
            .ok_or(MPI_T_ERR_INVALID_NAME)?;
        // SAFETY: the caller's int.
        unsafe { out_required(pvar_index, i as c_int) }
    })
}

/// `MPI_T_pvar_session_create`.
#[export]
pub unsafe extern "C" fn MPI_T_pvar_session_create(pe_session: *mut Handle) -> c_int {
    tool_call(|t| {
        if pe_session.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        let h = t.new_handle(SESSION_BASE);
        t.sessions.insert(h);
        // SAFETY: checked non-null; the caller's handle.
        unsafe { *pe_session = h };
        Ok(())
    })
}

/// `MPI_T_pvar_session_free`: free the session and its handles.
#[export]
pub unsafe extern "C" fn MPI_T_pvar_session_free(pe_session: *mut Handle) -> c_int {
    tool_call(|t| {
        if pe_session.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        // SAFETY: the caller's handle.
        let s = unsafe { *pe_session };
        if !t.sessions.remove(&s) {
            return Err(MPI_T_ERR_INVALID_SESSION);
        }
        t.pvar_handles.retain(|_, h| h.session != s);
        // SAFETY: as above.
        unsafe { *pe_session = HANDLE_NULL };
        Ok(())
    })
}

/// `MPI_T_pvar_handle_alloc`: a handle on a counter in a session; a counter reads 0 at
/// allocation and counts from there.
#[export]
pub unsafe extern "C" fn MPI_T_pvar_handle_alloc(
    pe_session: Handle,
    pvar_index: c_int,
    _obj_handle: *mut std::ffi::c_void,
    handle: *mut Handle,
    count: *mut c_int,
) -> c_int {
    tool_call(|t| {
        t.session(pe_session)?;
        t.pvar(pvar_index)?;
        if handle.is_null() || count.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        let pvar = pvar_index as usize;
        // Outside MPI the handle can exist but not be read.
        let baseline = t.raw_value(pvar).unwrap_or(0);
        let h = t.new_handle(PVAR_HANDLE_BASE);
        t.pvar_handles.insert(
            h,
            PvarHandle {
                session: pe_session,
                pvar,
                baseline: if t.catalog.pvars[pvar].readonly() {
                    0
                } else {
                    baseline
                },
            },
        );
        // SAFETY: checked non-null; the caller's handle and int.
        unsafe {
            *handle = h;
            *count = 1;
        }
        Ok(())
    })
}

/// `MPI_T_pvar_handle_free`: free the handle and set it to `MPI_T_PVAR_HANDLE_NULL`.
#[export]
pub unsafe extern "C" fn MPI_T_pvar_handle_free(pe_session: Handle, handle: *mut Handle) -> c_int {
    tool_call(|t| {
        if handle.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        // SAFETY: the caller's handle.
        let h = unsafe { *handle };
        t.pvar_handle(pe_session, h)?;
        t.pvar_handles.remove(&h);
        // SAFETY: as above.
        unsafe { *handle = HANDLE_NULL };
        Ok(())
    })
}

/// Start or stop `handle`: every counter of rmca is continuous, so only `MPI_T_PVAR_ALL_HANDLES`
/// (which concerns the non-continuous ones: none) succeeds.
fn start_stop(t: &mut Tool, session: Handle, handle: Handle) -> TResult<()> {
    if handle == MPI_T_PVAR_ALL_HANDLES {
        return t.session(session);
    }
    t.pvar_handle(session, handle)?;
    Err(MPI_T_ERR_PVAR_NO_STARTSTOP)
}

/// `MPI_T_pvar_start`: counters are continuous (`MPI_T_ERR_PVAR_NO_STARTSTOP`).
#[export]
pub unsafe extern "C" fn MPI_T_pvar_start(pe_session: Handle, handle: Handle) -> c_int {
    tool_call(|t| start_stop(t, pe_session, handle))
}

/// `MPI_T_pvar_stop`: counters are continuous (`MPI_T_ERR_PVAR_NO_STARTSTOP`).
#[export]
pub unsafe extern "C" fn MPI_T_pvar_stop(pe_session: Handle, handle: Handle) -> c_int {
    tool_call(|t| start_stop(t, pe_session, handle))
}

/// The value of `handle` now, and the raw value it was measured from.
fn read_handle(t: &mut Tool, session: Handle, handle: Handle) -> TResult<(u64, u64)> {
    let ph = t.pvar_handle(session, handle)?;
    let (pvar, baseline) = (ph.pvar, ph.baseline);
    let raw = t.raw_value(pvar)?;
    Ok((raw.wrapping_sub(baseline), raw))
}

/// Write one `unsigned long long` to the caller's buffer.
///
/// # Safety
/// `buf` is null or holds one `unsigned long long`.
unsafe fn out_u64(buf: *mut std::ffi::c_void, v: u64) -> TResult<()> {
    // SAFETY: as the caller's.
    unsafe { out_required(buf.cast::<u64>(), v) }
}

/// `MPI_T_pvar_read`: the counter's value (since allocation or the last reset, for counters).
#[export]
pub unsafe extern "C" fn MPI_T_pvar_read(
    pe_session: Handle,
    handle: Handle,
    buf: *mut std::ffi::c_void,
) -> c_int {
    tool_call(|t| {
        let (v, _) = read_handle(t, pe_session, handle)?;
        // SAFETY: `buf` holds `count` (1) unsigned long long.
        unsafe { out_u64(buf, v) }
    })
}

/// `MPI_T_pvar_readreset`: read, then count from 0 again (counters only).
#[export]
pub unsafe extern "C" fn MPI_T_pvar_readreset(
    pe_session: Handle,
    handle: Handle,
    buf: *mut std::ffi::c_void,
) -> c_int {
    tool_call(|t| {
        if handle == MPI_T_PVAR_ALL_HANDLES {
            t.session(pe_session)?;
            return Err(MPI_T_ERR_INVALID_HANDLE);
        }
        let pvar = t.pvar_handle(pe_session, handle)?.pvar;
        if t.catalog.pvars[pvar].readonly() {
            return Err(MPI_T_ERR_PVAR_NO_WRITE);
        }
        if buf.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        let (v, raw) = read_handle(t, pe_session, handle)?;
        t.pvar_handle(pe_session, handle)?.baseline = raw;
        // SAFETY: `buf` holds one unsigned long long.
        unsafe { out_u64(buf, v) }
    })
}

/// `MPI_T_pvar_reset`: count from 0 again; `MPI_T_PVAR_ALL_HANDLES` resets every counter
/// handle of the session (the read-only ones are left).
#[export]
pub unsafe extern "C" fn MPI_T_pvar_reset(pe_session: Handle, handle: Handle) -> c_int {
    tool_call(|t| {
        let handles: Vec<Handle> = if handle == MPI_T_PVAR_ALL_HANDLES {
            t.session(pe_session)?;
            let readonly = |pvar: usize| t.catalog.pvars[pvar].readonly();
            t.pvar_handles
                .iter()
                .filter(|(_, h)| h.session == pe_session && !readonly(h.pvar))
                .map(|(&k, _)| k)
                .collect()
        } else {
            let pvar = t.pvar_handle(pe_session, handle)?.pvar;
            if t.catalog.pvars[pvar].readonly() {
                return Err(MPI_T_ERR_PVAR_NO_WRITE);
            }
            vec![handle]
        };
        for h in handles {
            let (_, raw) = read_handle(t, pe_session, h)?;
            t.pvar_handle(pe_session, h)?.baseline = raw;
        }
        Ok(())
    })
}

/// `MPI_T_pvar_write`: set what a counter handle reads (it counts on from there); levels and
/// peaks are measured, not written (`MPI_T_ERR_PVAR_NO_WRITE`).
#[export]
pub unsafe extern "C" fn MPI_T_pvar_write(
    pe_session: Handle,
    handle: Handle,
    buf: *const std::ffi::c_void,
) -> c_int {
    tool_call(|t| {
        if handle == MPI_T_PVAR_ALL_HANDLES {
            t.session(pe_session)?;
            return Err(MPI_T_ERR_INVALID_HANDLE);
        }
        let pvar = t.pvar_handle(pe_session, handle)?.pvar;
        if t.catalog.pvars[pvar].readonly() {
            return Err(MPI_T_ERR_PVAR_NO_WRITE);
        }
        if buf.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        // SAFETY: `buf` holds one unsigned long long (the variable's datatype).
        let v = unsafe { buf.cast::<u64>().read_unaligned() };
        let raw = t.raw_value(pvar)?;
        t.pvar_handle(pe_session, handle)?.baseline = raw.wrapping_sub(v);
        Ok(())
    })
}

// ---- Categories ---------------------------------------------------------------------------

/// `MPI_T_category_get_num`: one category per framework and one per component.
#[export]
pub unsafe extern "C" fn MPI_T_category_get_num(num_cat: *mut c_int) -> c_int {
    tool_call(|t| {
        t.sync();
        // SAFETY: the caller's int.
        unsafe { out_required(num_cat, t.catalog.categories.len() as c_int) }
    })
}

/// `MPI_T_category_get_info`: a category's name, description and what it holds.
#[export]
pub unsafe extern "C" fn MPI_T_category_get_info(
    cat_index: c_int,
    name: *mut c_char,
    name_len: *mut c_int,
    desc: *mut c_char,
    desc_len: *mut c_int,
    num_cvars: *mut c_int,
    num_pvars: *mut c_int,
    num_categories: *mut c_int,
) -> c_int {
    tool_call(|t| {
        let c = t.category(cat_index)?;
        // SAFETY: each pointer is null or what MPI_T_category_get_info's prototype says.
        unsafe {
            out_string(name, name_len, &c.name);
            out_string(desc, desc_len, &c.desc);
            out(num_cvars, c.cvars.len() as c_int);
            out(num_pvars, c.pvars.len() as c_int);
            out(num_categories, c.subcategories.len() as c_int);
        }
        Ok(())
    })
}

/// `MPI_T_category_get_index`: the index of the category `name`.
#[export]
pub unsafe extern "C" fn MPI_T_category_get_index(
    name: *const c_char,
    cat_index: *mut c_int,
) -> c_int {
    tool_call(|t| {
        // SAFETY: the caller's string.
        let name = unsafe { in_string(name) }?;
        t.sync();
        let i = t
            .catalog
            .category_index(name)
            .ok_or(MPI_T_ERR_INVALID_NAME)?;
        // SAFETY: the caller's int.
        unsafe { out_required(cat_index, i as c_int) }
    })
}

/// `MPI_T_category_get_cvars`: up to `len` indices of the category's control variables.
#[export]
pub unsafe extern "C" fn MPI_T_category_get_cvars(
    cat_index: c_int,
    len: c_int,
    indices: *mut c_int,
) -> c_int {
    tool_call(|t| {
        let c = t.category(cat_index)?;
        // SAFETY: `indices` holds `len` ints.
        unsafe { out_indices(len, indices, &c.cvars) }
    })
}

/// `MPI_T_category_get_pvars`: up to `len` indices of the category's performance variables.
#[export]
pub unsafe extern "C" fn MPI_T_category_get_pvars(
    cat_index: c_int,
    len: c_int,
    indices: *mut c_int,
) -> c_int {
    tool_call(|t| {
        let c = t.category(cat_index)?;
        // SAFETY: `indices` holds `len` ints.
        unsafe { out_indices(len, indices, &c.pvars) }
    })
}

/// `MPI_T_category_get_categories`: up to `len` indices of the category's subcategories.
#[export]
pub unsafe extern "C" fn MPI_T_category_get_categories(
    cat_index: c_int,
    len: c_int,
    indices: *mut c_int,
) -> c_int {
    tool_call(|t| {
        let c = t.category(cat_index)?;
        // SAFETY: `indices` holds `len` ints.
        unsafe { out_indices(len, indices, &c.subcategories) }
    })
}

/// `MPI_T_category_get_events`: no category holds events (rmca raises none).
#[export]
pub unsafe extern "C" fn MPI_T_category_get_events(
    cat_index: c_int,
    len: c_int,
    indices: *mut c_int,
) -> c_int {
    tool_call(|t| {
        t.category(cat_index)?;
        // SAFETY: `indices` holds `len` ints.
        unsafe { out_indices(len, indices, &[]) }
    })
}

/// `MPI_T_category_get_num_events`: 0 (rmca raises no events).
#[export]
pub unsafe extern "C" fn MPI_T_category_get_num_events(
    cat_index: c_int,
    num_events: *mut c_int,
) -> c_int {
    tool_call(|t| {
        t.category(cat_index)?;
        // SAFETY: the caller's int.
        unsafe { out_required(num_events, 0) }
    })
}

/// `MPI_T_category_changed`: a number that changes whenever variables or categories are
/// added (at `MPI_Init`, when the counters appear).
#[export]
pub unsafe extern "C" fn MPI_T_category_changed(update_number: *mut c_int) -> c_int {
    tool_call(|t| {
        t.sync();
        // SAFETY: the caller's int.
        unsafe { out_required(update_number, t.catalog.updates) }
    })
}

// ---- Events and their sources ---------------------------------------------------------------
// rmca raises no events: there is no event index, registration or instance to name, so every
// call naming one is refused with the code for a bad index or handle.

/// `MPI_T_event_get_num`: 0, rmca raises no events.
#[export]
pub unsafe extern "C" fn MPI_T_event_get_num(num_events: *mut c_int) -> c_int {
    // SAFETY: the caller's int.
    tool_call(|_| unsafe { out_required(num_events, 0) })
}

/// `MPI_T_event_get_index`: no event has a name.
#[export]
pub unsafe extern "C" fn MPI_T_event_get_index(
    name: *const c_char,
    _event_index: *mut c_int,
) -> c_int {
    tool_call(|_| {
        // SAFETY: the caller's string.
        unsafe { in_string(name) }?;
        Err(MPI_T_ERR_INVALID_NAME)
    })
}

/// `MPI_T_event_get_info`: there is no event index.
#[export]
pub unsafe extern "C" fn MPI_T_event_get_info(
    _event_index: c_int,
    _name: *mut c_char,
    _name_len: *mut c_int,
    _verbosity: *mut c_int,
    _array_of_datatypes: *mut Handle,
    _array_of_displacements: *mut MPI_Aint,
    _num_elements: *mut c_int,
    _enumtype: *mut Handle,
    _info: *mut Handle,
    _desc: *mut c_char,
    _desc_len: *mut c_int,
    _bind: *mut c_int,
) -> c_int {
    tool_call(|_| Err(MPI_T_ERR_INVALID_INDEX))
}

/// `MPI_T_event_handle_alloc`: there is no event index.
#[export]
pub unsafe extern "C" fn MPI_T_event_handle_alloc(
    _event_index: c_int,
    _obj_handle: *mut std::ffi::c_void,
    _info: Handle,
    _event_registration: *mut Handle,
) -> c_int {
    tool_call(|_| Err(MPI_T_ERR_INVALID_INDEX))
}

/// Define event calls whose first argument is a registration or instance handle: none can
/// exist, so each is refused as an invalid handle.
macro_rules! no_event_handle {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        $(#[$doc])*
        #[export]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            tool_call(|_| Err(MPI_T_ERR_INVALID_HANDLE))
        }
    )*};
}

no_event_handle! {
    /// `MPI_T_event_handle_free`: no event registration exists.
    MPI_T_event_handle_free(_event_registration: Handle, _user_data: *mut std::ffi::c_void, _free_cb_function: *mut std::ffi::c_void);
    /// `MPI_T_event_handle_get_info`: no event registration exists.
    MPI_T_event_handle_get_info(_event_registration: Handle, _info_used: *mut Handle);
    /// `MPI_T_event_handle_set_info`: no event registration exists.
    MPI_T_event_handle_set_info(_event_registration: Handle, _info: Handle);
    /// `MPI_T_event_register_callback`: no event registration exists.
    MPI_T_event_register_callback(_event_registration: Handle, _cb_safety: c_int, _info: Handle, _user_data: *mut std::ffi::c_void, _event_cb_function: *mut std::ffi::c_void);
    /// `MPI_T_event_callback_get_info`: no event registration exists.
    MPI_T_event_callback_get_info(_event_registration: Handle, _cb_safety: c_int, _info_used: *mut Handle);
    /// `MPI_T_event_callback_set_info`: no event registration exists.
    MPI_T_event_callback_set_info(_event_registration: Handle, _cb_safety: c_int, _info: Handle);
    /// `MPI_T_event_set_dropped_handler`: no event registration exists.
    MPI_T_event_set_dropped_handler(_event_registration: Handle, _dropped_cb_function: *mut std::ffi::c_void);
    /// `MPI_T_event_read`: no event instance exists.
    MPI_T_event_read(_event_instance: Handle, _element_index: c_int, _buffer: *mut std::ffi::c_void);
    /// `MPI_T_event_copy`: no event instance exists.
    MPI_T_event_copy(_event_instance: Handle, _buffer: *mut std::ffi::c_void);
    /// `MPI_T_event_get_timestamp`: no event instance exists.
    MPI_T_event_get_timestamp(_event_instance: Handle, _event_timestamp: *mut MPI_Count);
    /// `MPI_T_event_get_source`: no event instance exists.
    MPI_T_event_get_source(_event_instance: Handle, _source_index: *mut c_int);
}

/// `MPI_T_source_get_num`: one source, the process's monotonic clock.
#[export]
pub unsafe extern "C" fn MPI_T_source_get_num(num_sources: *mut c_int) -> c_int {
    // SAFETY: the caller's int.
    tool_call(|_| unsafe { out_required(num_sources, 1) })
}

/// `MPI_T_source_get_info`: source 0 stamps in nanoseconds since `MPI_T_init_thread`, in
/// order.
#[export]
pub unsafe extern "C" fn MPI_T_source_get_info(
    source_index: c_int,
    name: *mut c_char,
    name_len: *mut c_int,
    desc: *mut c_char,
    desc_len: *mut c_int,
    ordering: *mut c_int,
    ticks_per_second: *mut MPI_Count,
    max_ticks: *mut MPI_Count,
    info: *mut Handle,
) -> c_int {
    tool_call(|_| {
        if source_index != 0 {
            return Err(MPI_T_ERR_INVALID_INDEX);
        }
        // SAFETY: each pointer is null or what MPI_T_source_get_info's prototype says.
        unsafe {
            out_string(name, name_len, "rmca_clock");
            out_string(
                desc,
                desc_len,
                "This process's monotonic clock, in nanoseconds since the tool interface started",
            );
            out(ordering, MPI_T_SOURCE_ORDERED);
            out(ticks_per_second, 1_000_000_000);
            out(max_ticks, MPI_Count::MAX);
            out(info, MPI_INFO_NULL);
        }
        Ok(())
    })
}

/// `MPI_T_source_get_timestamp`: source 0's clock now.
#[export]
pub unsafe extern "C" fn MPI_T_source_get_timestamp(
    source_index: c_int,
    timestamp: *mut MPI_Count,
) -> c_int {
    tool_call(|_| {
        if source_index != 0 {
            return Err(MPI_T_ERR_INVALID_INDEX);
        }
        let ns = MPI_Count::try_from(epoch().elapsed().as_nanos()).unwrap_or(MPI_Count::MAX);
        // SAFETY: the caller's MPI_Count.
        unsafe { out_required(timestamp, ns) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provided_level_is_always_one_of_the_four() {
        for l in [
            MPI_THREAD_SINGLE,
            MPI_THREAD_FUNNELED,
            MPI_THREAD_SERIALIZED,
            MPI_THREAD_MULTIPLE,
        ] {
            assert_eq!(provided_level(l), l);
        }
        assert_eq!(provided_level(-1), MPI_THREAD_SINGLE);
        assert_eq!(provided_level(1), MPI_THREAD_SINGLE);
        assert_eq!(provided_level(MPI_THREAD_FUNNELED + 1), MPI_THREAD_FUNNELED);
        assert_eq!(
            provided_level(MPI_THREAD_MULTIPLE - 1),
            MPI_THREAD_SERIALIZED
        );
        assert_eq!(provided_level(i32::MAX), MPI_THREAD_MULTIPLE);
    }
}
