//! Start and end, time, versions, error handling.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_double, c_int, c_void};
use std::sync::atomic::AtomicI32;
use std::sync::OnceLock;
use std::time::Instant;

use super::{call, put, put_string};
use crate::abi::*;
use crate::state::{
    self, CommErrhandlerFn, ErrHandler, ErrhKind, MpiError, MpiResult, Phase, State,
};
use rmca_mpi_export::export;

/// The origin of `MPI_Wtime`.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn init(required: c_int) -> MpiResult<c_int> {
    match state::phase() {
        Phase::Before => {}
        Phase::Running => {
            return Err(MpiError::new(
                MPI_ERR_OTHER,
                "MPI is already initialized (MPI_Init may be called once)",
            ))
        }
        Phase::Finalized => {
            return Err(MpiError::new(
                MPI_ERR_OTHER,
                "MPI was finalized and cannot be initialized again",
            ))
        }
    }
    epoch();
    if state::installed() {
        // A session started the runtime: the world model joins it.
        let level = state::with(|s| Ok(s.thread_level))?;
        state::set_phase(Phase::Running);
        return Ok(level);
    }
    let universe = rmca::init().map_err(MpiError::from)?;
    let world = universe.world();
    // MPI_COMM_SELF: every process alone, with its own matching space. Collective over the
    // world once, here, so that no later call has to be.
    let self_comm = world
        .split(Some(world.rank() as u32), 0)?
        .ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "split left this process out"))?;
    // Every level is provided (the state module says how each is kept sound).
    let provided = required;
    state::install(universe, self_comm, provided);
    Ok(provided)
}

/// `MPI_Init`: join the job (argc and argv are not needed: rmca reads its environment).
#[export]
pub unsafe extern "C" fn MPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
    call("MPI_Init", MPI_COMM_WORLD, || {
        init(MPI_THREAD_SINGLE).map(|_| ())
    })
}

/// `MPI_Init_thread`: rmca provides the level asked for, up to `MPI_THREAD_MULTIPLE` (see the
/// `state` module for what each costs).
#[export]
pub unsafe extern "C" fn MPI_Init_thread(
    _argc: *mut c_int,
    _argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    call("MPI_Init_thread", MPI_COMM_WORLD, || {
        if ![
            MPI_THREAD_SINGLE,
            MPI_THREAD_FUNNELED,
            MPI_THREAD_SERIALIZED,
            MPI_THREAD_MULTIPLE,
        ]
        .contains(&required)
        {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("required thread level {required} is not one of MPI_THREAD_SINGLE, _FUNNELED, _SERIALIZED, _MULTIPLE"),
            ));
        }
        let level = init(required)?;
        // SAFETY: `provided` is the caller's int (MPI_Init_thread's contract).
        unsafe { put(provided, level, "provided") }
    })
}

/// `MPI_Query_thread` (from any thread, at any level).
#[export]
pub unsafe extern "C" fn MPI_Query_thread(provided: *mut c_int) -> c_int {
    call("MPI_Query_thread", MPI_COMM_WORLD, || {
        if state::phase() == Phase::Before && !state::installed() {
            return Err(state::not_running());
        }
        let level = state::thread_level();
        // SAFETY: the caller's int.
        unsafe { put(provided, level, "provided") }
    })
}

/// `MPI_Is_thread_main`: whether this thread called `MPI_Init_thread` (from any thread, at
/// any level).
#[export]
pub unsafe extern "C" fn MPI_Is_thread_main(flag: *mut c_int) -> c_int {
    call("MPI_Is_thread_main", MPI_COMM_WORLD, || {
        if state::phase() == Phase::Before && !state::installed() {
            return Err(state::not_running());
        }
        let main = state::is_main_thread();
        // SAFETY: the caller's int.
        unsafe { put(flag, c_int::from(main), "flag") }
    })
}

/// `MPI_Initialized` (callable at any time).
#[export]
pub unsafe extern "C" fn MPI_Initialized(flag: *mut c_int) -> c_int {
    call("MPI_Initialized", MPI_COMM_WORLD, || {
        let v = c_int::from(state::phase() != Phase::Before);
        // SAFETY: the caller's int.
        unsafe { put(flag, v, "flag") }
    })
}

/// `MPI_Finalized` (callable at any time).
#[export]
pub unsafe extern "C" fn MPI_Finalized(flag: *mut c_int) -> c_int {
    call("MPI_Finalized", MPI_COMM_WORLD, || {
        let v = c_int::from(state::phase() == Phase::Finalized);
        // SAFETY: the caller's int.
        unsafe { put(flag, v, "flag") }
    })
}

/// `MPI_Finalize`: complete buffered sends and freed requests, then leave the job.
#[export]
pub unsafe extern "C" fn MPI_Finalize() -> c_int {
    call("MPI_Finalize", MPI_COMM_WORLD, || {
        // First (MPI says so): the attributes of MPI_COMM_SELF, then of MPI_COMM_WORLD, are
        // deleted, their callbacks free to call MPI.
        super::attr::finalize()?;
        // The buffers attached to the world model's communicators complete their sends too.
        super::buffers::world_finalized()?;
        state::with(|s| {
            for r in s.detached.drain(..) {
                r.wait()?;
            }
            let active = s.active_requests();
            if active > 0 {
                tracing::warn!("MPI_Finalize with {active} active request(s): they are abandoned");
            }
            Ok(())
        })?;
        if super::session::live()? > 0 {
            // Sessions still use the runtime: the last MPI_Session_finalize ends it.
            state::set_phase(Phase::Finalized);
            return Ok(());
        }
        let state = state::take().ok_or_else(state::not_running)?;
        state::set_phase(Phase::Finalized);
        let State { universe, .. } = state;
        universe.finalize()?;
        Ok(())
    })
}

/// `MPI_Abort`: end every process of the job with `errorcode`, whatever thread calls it (as
/// Open MPI and MPICH do: neither checks the thread level here; MPI offers it as the last
/// resort of any thread).
///
/// A thread that may reach the library's state now (the main thread below SERIALIZED, any
/// thread at SERIALIZED and MULTIPLE, which the entry point made the owner) stops the
/// progress thread and asks the launcher to kill the job (the runtime's abort). Any other
/// thread (not the main one at SINGLE or FUNNELED, or before `MPI_Init`) must not touch the
/// state, which the main thread may be using at this very moment, nor the progress thread it
/// shares: it prints the message and ends this process with the code, which is how the
/// runtime's own abort ends when it cannot speak to the launcher, and what makes the launcher
/// end the job (rmca-run, Hydra and mpirun terminate a job one of whose processes exited
/// non-zero before finalizing).
#[export]
pub unsafe extern "C" fn MPI_Abort(comm: Handle, errorcode: c_int) -> c_int {
    let msg = format!("MPI_Abort called with error code {errorcode} on communicator {comm:#x}");
    let code = if errorcode == 0 { 1 } else { errorcode & 0xff };
    if state::owned() {
        crate::progress_thread::stop();
        let _ = state::with(|s| -> MpiResult<()> { s.universe.abort(errorcode, &msg) });
    } else {
        use std::io::Write;
        tracing::error!(code = errorcode, "{msg} (from a thread that may not reach the library's state: this process exits, and the launcher ends the job)");
        // Seen even without a tracing subscriber, as the runtime's own abort does.
        let why = if state::phase() == state::Phase::Running {
            format!(
                "called from a thread the thread level ({}) does not let into MPI",
                level_name(state::thread_level())
            )
        } else {
            "called while MPI is not running".to_owned()
        };
        let _ = writeln!(
            std::io::stderr(),
            "rmca: abort (code {errorcode}): {msg}; {why}: this process exits with code {code}"
        );
    }
    std::process::exit(code)
}

/// The name of thread level `level`, for messages.
fn level_name(level: c_int) -> &'static str {
    match level {
        MPI_THREAD_SINGLE => "MPI_THREAD_SINGLE",
        MPI_THREAD_FUNNELED => "MPI_THREAD_FUNNELED",
        MPI_THREAD_SERIALIZED => "MPI_THREAD_SERIALIZED",
        _ => "MPI_THREAD_MULTIPLE",
    }
}

/// `MPI_Wtime`: seconds since an arbitrary origin of this process.
#[export]
pub extern "C" fn MPI_Wtime() -> c_double {
    epoch().elapsed().as_secs_f64()
}

/// `MPI_Wtick`: the resolution of `MPI_Wtime` (a nanosecond clock).
#[export]
pub extern "C" fn MPI_Wtick() -> c_double {
    1e-9
}

/// `MPI_Get_processor_name`: the node name the launcher placed this process on.
#[export]
pub unsafe extern "C" fn MPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) -> c_int {
    call("MPI_Get_processor_name", MPI_COMM_WORLD, || {
        let node = state::with(|s| Ok(s.universe.node().0))?;
        // SAFETY: MPI_Get_processor_name's contract: `name` holds MPI_MAX_PROCESSOR_NAME bytes.
        unsafe { put_string(name, MPI_MAX_PROCESSOR_NAME, resultlen, &node) }
    })
}

/// `MPI_Get_version` (callable at any time).
#[export]
pub unsafe extern "C" fn MPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> c_int {
    call("MPI_Get_version", MPI_COMM_WORLD, || {
        // SAFETY: the caller's ints.
        unsafe {
            put(version, MPI_VERSION, "version")?;
            put(subversion, MPI_SUBVERSION, "subversion")
        }
    })
}

/// The text of `MPI_Get_library_version`.
pub fn library_version() -> String {
    format!(
        "rmca {} (MPI {MPI_VERSION}.{MPI_SUBVERSION} standard ABI {MPI_ABI_VERSION}.{MPI_ABI_SUBVERSION}, C bindings of crate rmca-mpi)",
        env!("CARGO_PKG_VERSION")
    )
}

/// `MPI_Get_library_version` (callable at any time).
#[export]
pub unsafe extern "C" fn MPI_Get_library_version(
    version: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    call("MPI_Get_library_version", MPI_COMM_WORLD, || {
        // SAFETY: the contract: `version` holds MPI_MAX_LIBRARY_VERSION_STRING bytes.
        unsafe {
            put_string(
                version,
                MPI_MAX_LIBRARY_VERSION_STRING,
                resultlen,
                &library_version(),
            )
        }
    })
}

/// `MPI_Abi_get_version`: the standard ABI version implemented.
#[export]
pub unsafe extern "C" fn MPI_Abi_get_version(
    abi_major: *mut c_int,
    abi_minor: *mut c_int,
) -> c_int {
    call("MPI_Abi_get_version", MPI_COMM_WORLD, || {
        // SAFETY: the caller's ints.
        unsafe {
            put(abi_major, MPI_ABI_VERSION, "abi_major")?;
            put(abi_minor, MPI_ABI_SUBVERSION, "abi_minor")
        }
    })
}

/// `MPI_Error_class`: rmca's predefined error codes are their classes; a code made by
/// `MPI_Add_error_code` has the class it was made for.
#[export]
pub unsafe extern "C" fn MPI_Error_class(errorcode: c_int, errorclass: *mut c_int) -> c_int {
    call("MPI_Error_class", MPI_COMM_WORLD, || {
        let class = errors::class_of(errorcode)?;
        // SAFETY: the caller's int.
        unsafe { put(errorclass, class, "errorclass") }
    })
}

/// `MPI_Error_string`: the class's text, and the details of the last such error returned; a
/// code or class the program added has the string it set (empty by default).
#[export]
pub unsafe extern "C" fn MPI_Error_string(
    errorcode: c_int,
    string: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    call("MPI_Error_string", MPI_COMM_WORLD, || {
        let text = match errors::user_string(errorcode)? {
            Some(t) => t,
            None => {
                let mut text = state::class_text(errorcode).to_owned();
                if let Ok(Some(last)) =
                    state::with(|s| Ok(s.last_error(errorcode).map(str::to_owned)))
                {
                    text = format!("{text} (last: {last})");
                }
                text
            }
        };
        // SAFETY: the contract: `string` holds MPI_MAX_ERROR_STRING bytes.
        unsafe { put_string(string, MPI_MAX_ERROR_STRING, resultlen, &text) }
    })
}

/// `MPI_Comm_set_errhandler`.
#[export]
pub unsafe extern "C" fn MPI_Comm_set_errhandler(comm: Handle, errhandler: Handle) -> c_int {
    call("MPI_Comm_set_errhandler", comm, || {
        state::with(|s| {
            s.comm(comm)?;
            let e = s.errhandler_for(errhandler, ErrhKind::Comm)?;
            s.comm_mut(comm)?.errhandler = e;
            Ok(())
        })
    })
}

/// `MPI_Comm_get_errhandler`.
#[export]
pub unsafe extern "C" fn MPI_Comm_get_errhandler(comm: Handle, errhandler: *mut Handle) -> c_int {
    call("MPI_Comm_get_errhandler", comm, || {
        let e = state::with(|s| Ok(s.comm(comm)?.errhandler))?;
        // SAFETY: the caller's handle.
        unsafe { put(errhandler, State::errhandler_handle(e), "errhandler") }
    })
}

/// `MPI_Comm_create_errhandler`.
#[export]
pub unsafe extern "C" fn MPI_Comm_create_errhandler(
    function: Option<CommErrhandlerFn>,
    errhandler: *mut Handle,
) -> c_int {
    call("MPI_Comm_create_errhandler", MPI_COMM_WORLD, || {
        let f = function
            .ok_or_else(|| MpiError::new(MPI_ERR_ARG, "the error handler function is NULL"))?;
        let h = state::add_errhandler(ErrhKind::Comm, f)?;
        // SAFETY: the caller's handle.
        unsafe { put(errhandler, h, "errhandler") }
    })
}

/// `MPI_Errhandler_free`: a predefined handler (as `MPI_Comm_get_errhandler` returns) is
/// left as it is, a user one lives on where it is set.
#[export]
pub unsafe extern "C" fn MPI_Errhandler_free(errhandler: *mut Handle) -> c_int {
    call("MPI_Errhandler_free", MPI_COMM_WORLD, || {
        if errhandler.is_null() {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                "the errhandler argument is NULL",
            ));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { errhandler.read() };
        state::free_errhandler(h)?;
        // SAFETY: as above.
        unsafe { errhandler.write(MPI_ERRHANDLER_NULL) };
        Ok(())
    })
}

/// `MPI_Comm_call_errhandler`: raise `errorcode` on `comm`'s handler.
#[export]
pub unsafe extern "C" fn MPI_Comm_call_errhandler(comm: Handle, errorcode: c_int) -> c_int {
    let checked = state::with(|s| s.comm(comm).map(|_| ()));
    if let Err(e) = checked {
        return super::raise("MPI_Comm_call_errhandler", comm, e);
    }
    super::raise(
        "MPI_Comm_call_errhandler",
        comm,
        MpiError::new(errorcode, "raised by MPI_Comm_call_errhandler"),
    );
    MPI_SUCCESS
}

// ---- error classes, codes and strings the program adds ----

/// `MPI_LASTUSEDCODE`'s value (the attribute is a pointer to it): the largest error code or
/// class in use, raised by `MPI_Add_error_class`/`_code`. MPI requires it to be at least
/// `MPI_ERR_LASTCODE`: the program's codes and classes are numbered above it.
pub static LASTUSEDCODE: AtomicI32 = AtomicI32::new(MPI_ERR_LASTCODE);

/// The error classes and codes the program added (`MPI_Add_error_class`, `_code`,
/// `_string`). Numbers are never reused: removing one leaves a gap, and
/// `MPI_LASTUSEDCODE` only grows.
mod errors {
    use std::collections::{BTreeMap, BTreeSet};
    use std::ffi::c_int;
    use std::sync::atomic::Ordering;
    use std::sync::Mutex;

    use super::LASTUSEDCODE;
    use crate::abi::*;
    use crate::state::{MpiError, MpiResult};

    struct Added {
        classes: BTreeSet<c_int>,
        /// Each added code's class.
        codes: BTreeMap<c_int, c_int>,
        strings: BTreeMap<c_int, String>,
    }

    static ADDED: Mutex<Added> = Mutex::new(Added {
        classes: BTreeSet::new(),
        codes: BTreeMap::new(),
        strings: BTreeMap::new(),
    });

    fn added() -> std::sync::MutexGuard<'static, Added> {
        ADDED.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn predefined(code: c_int) -> bool {
        (0..=MPI_ERR_ABI).contains(&code)
    }

    fn not_a_code(code: c_int) -> MpiError {
        MpiError::new(
            MPI_ERR_ARG,
            format!("{code} is not an error code: rmca's are the classes 0..={MPI_ERR_ABI} and those MPI_Add_error_class/_code made"),
        )
    }

    /// The next number, now the last used.
    fn next() -> MpiResult<c_int> {
        let n = LASTUSEDCODE
            .load(Ordering::Relaxed)
            .checked_add(1)
            .ok_or_else(|| {
                MpiError::new(
                    MPI_ERR_OTHER,
                    "no error code is left: every int above MPI_ERR_LASTCODE was used",
                )
            })?;
        LASTUSEDCODE.store(n, Ordering::Relaxed);
        Ok(n)
    }

    /// The class of `code`.
    pub fn class_of(code: c_int) -> MpiResult<c_int> {
        let a = added();
        if predefined(code) || a.classes.contains(&code) {
            return Ok(code);
        }
        a.codes.get(&code).copied().ok_or_else(|| not_a_code(code))
    }

    /// The string of an added code or class (empty until set); `None` for a predefined one.
    pub fn user_string(code: c_int) -> MpiResult<Option<String>> {
        if predefined(code) {
            return Ok(None);
        }
        class_of(code)?;
        Ok(Some(
            added().strings.get(&code).cloned().unwrap_or_default(),
        ))
    }

    pub fn add_class() -> MpiResult<c_int> {
        let mut a = added();
        let c = next()?;
        a.classes.insert(c);
        Ok(c)
    }

    pub fn add_code(class: c_int) -> MpiResult<c_int> {
        let mut a = added();
        if !predefined(class) && !a.classes.contains(&class) {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!(
                    "{class} is not an error class (predefined or added by MPI_Add_error_class)"
                ),
            ));
        }
        let c = next()?;
        a.codes.insert(c, class);
        Ok(c)
    }

    /// Refuse a predefined code or class where only added ones go.
    fn added_one(a: &Added, code: c_int, what: &str) -> MpiResult<()> {
        if a.classes.contains(&code) || a.codes.contains_key(&code) {
            return Ok(());
        }
        Err(MpiError::new(
            MPI_ERR_ARG,
            format!("{code} is not an error {what} the program added (predefined ones cannot be changed)"),
        ))
    }

    pub fn set_string(code: c_int, s: String) -> MpiResult<()> {
        let mut a = added();
        added_one(&a, code, "code or class")?;
        if s.len() >= MPI_MAX_ERROR_STRING {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!(
                    "the error string is {} B long: at most MPI_MAX_ERROR_STRING - 1 ({}) B",
                    s.len(),
                    MPI_MAX_ERROR_STRING - 1
                ),
            ));
        }
        a.strings.insert(code, s);
        Ok(())
    }

    pub fn remove_class(class: c_int) -> MpiResult<()> {
        let mut a = added();
        if !a.classes.contains(&class) {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("{class} is not an error class the program added"),
            ));
        }
        if let Some((code, _)) = a.codes.iter().find(|(_, c)| **c == class) {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("error class {class} still has error code {code}: remove its codes first (MPI_Remove_error_code)"),
            ));
        }
        if a.strings.contains_key(&class) {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("error class {class} still has a string: remove it first (MPI_Remove_error_string)"),
            ));
        }
        a.classes.remove(&class);
        Ok(())
    }

    pub fn remove_code(code: c_int) -> MpiResult<()> {
        let mut a = added();
        if !a.codes.contains_key(&code) {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("{code} is not an error code the program added"),
            ));
        }
        if a.strings.contains_key(&code) {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("error code {code} still has a string: remove it first (MPI_Remove_error_string)"),
            ));
        }
        a.codes.remove(&code);
        Ok(())
    }

    pub fn remove_string(code: c_int) -> MpiResult<()> {
        let mut a = added();
        added_one(&a, code, "code or class")?;
        a.strings.remove(&code).map(|_| ()).ok_or_else(|| {
            MpiError::new(
                MPI_ERR_ARG,
                format!("error code {code} has no string to remove"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_classes_and_codes_are_numbered_above_the_last_code_and_removed_in_order() {
        let class = errors::add_class().unwrap();
        assert!(class > MPI_ERR_LASTCODE);
        let code = errors::add_code(class).unwrap();
        assert!(code > class);
        assert!(LASTUSEDCODE.load(std::sync::atomic::Ordering::Relaxed) >= code);
        assert_eq!(errors::class_of(code).unwrap(), class);
        assert_eq!(errors::class_of(MPI_ERR_TAG).unwrap(), MPI_ERR_TAG);
        assert_eq!(errors::user_string(code).unwrap().as_deref(), Some(""));
        errors::set_string(code, "mine".into()).unwrap();
        assert_eq!(errors::user_string(code).unwrap().as_deref(), Some("mine"));
        assert!(errors::set_string(MPI_ERR_TAG, "no".into()).is_err());
        assert!(errors::remove_class(class).is_err());
        assert!(errors::remove_code(code).is_err());
        errors::remove_string(code).unwrap();
        errors::remove_code(code).unwrap();
        errors::remove_class(class).unwrap();
        assert_eq!(errors::class_of(code).unwrap_err().class, MPI_ERR_ARG);
    }
}

/// `MPI_Add_error_class`: a new class (above `MPI_LASTUSEDCODE`, which it becomes).
#[export]
pub unsafe extern "C" fn MPI_Add_error_class(errorclass: *mut c_int) -> c_int {
    call("MPI_Add_error_class", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        if errorclass.is_null() {
            return Err(super::null_argument("errorclass"));
        }
        let c = errors::add_class()?;
        // SAFETY: non-null, the caller's int.
        unsafe { put(errorclass, c, "errorclass") }
    })
}

/// `MPI_Add_error_code`: a new code of `errorclass`.
#[export]
pub unsafe extern "C" fn MPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) -> c_int {
    call("MPI_Add_error_code", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        if errorcode.is_null() {
            return Err(super::null_argument("errorcode"));
        }
        let c = errors::add_code(errorclass)?;
        // SAFETY: non-null, the caller's int.
        unsafe { put(errorcode, c, "errorcode") }
    })
}

/// `MPI_Add_error_string`: the text `MPI_Error_string` gives an added code or class.
#[export]
pub unsafe extern "C" fn MPI_Add_error_string(errorcode: c_int, string: *const c_char) -> c_int {
    call("MPI_Add_error_string", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        if string.is_null() {
            return Err(super::null_argument("string"));
        }
        // SAFETY: MPI_Add_error_string's contract: a NUL-terminated string.
        let s = unsafe { std::ffi::CStr::from_ptr(string) };
        errors::set_string(errorcode, s.to_string_lossy().into_owned())
    })
}

/// `MPI_Remove_error_class` (MPI 4.1): its codes and string must be removed first.
#[export]
pub unsafe extern "C" fn MPI_Remove_error_class(errorclass: c_int) -> c_int {
    call("MPI_Remove_error_class", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        errors::remove_class(errorclass)
    })
}

/// `MPI_Remove_error_code` (MPI 4.1): its string must be removed first.
#[export]
pub unsafe extern "C" fn MPI_Remove_error_code(errorcode: c_int) -> c_int {
    call("MPI_Remove_error_code", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        errors::remove_code(errorcode)
    })
}

/// `MPI_Remove_error_string` (MPI 4.1).
#[export]
pub unsafe extern "C" fn MPI_Remove_error_string(errorcode: c_int) -> c_int {
    call("MPI_Remove_error_string", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        errors::remove_string(errorcode)
    })
}

// ---- error handlers of windows, files and sessions ----

/// A user error handler for objects of `kind` (the four C function types have one shape).
///
/// # Safety
/// `errhandler` is null or valid for a write of a handle.
unsafe fn create_errhandler(
    kind: ErrhKind,
    function: Option<CommErrhandlerFn>,
    errhandler: *mut Handle,
) -> MpiResult<()> {
    let f =
        function.ok_or_else(|| MpiError::new(MPI_ERR_ARG, "the error handler function is NULL"))?;
    if errhandler.is_null() {
        return Err(super::null_argument("errhandler"));
    }
    let h = state::add_errhandler(kind, f)?;
    // SAFETY: the caller's handle.
    unsafe { put(errhandler, h, "errhandler") }
}

/// `MPI_Win_create_errhandler`: a handler for windows (to set on them once rmca has them).
#[export]
pub unsafe extern "C" fn MPI_Win_create_errhandler(
    function: Option<CommErrhandlerFn>,
    errhandler: *mut Handle,
) -> c_int {
    call("MPI_Win_create_errhandler", MPI_COMM_WORLD, || {
        // SAFETY: the caller's handle.
        unsafe { create_errhandler(ErrhKind::Win, function, errhandler) }
    })
}

/// `MPI_File_create_errhandler`.
#[export]
pub unsafe extern "C" fn MPI_File_create_errhandler(
    function: Option<CommErrhandlerFn>,
    errhandler: *mut Handle,
) -> c_int {
    call("MPI_File_create_errhandler", MPI_COMM_WORLD, || {
        // SAFETY: the caller's handle.
        unsafe { create_errhandler(ErrhKind::File, function, errhandler) }
    })
}

/// `MPI_Session_create_errhandler`: a handler for sessions (to set on them once rmca has
/// them).
#[export]
pub unsafe extern "C" fn MPI_Session_create_errhandler(
    function: Option<CommErrhandlerFn>,
    errhandler: *mut Handle,
) -> c_int {
    call("MPI_Session_create_errhandler", MPI_COMM_WORLD, || {
        // SAFETY: the caller's handle.
        unsafe { create_errhandler(ErrhKind::Session, function, errhandler) }
    })
}

/// `MPI_FILE_NULL`, the one file rmca knows (it has no MPI-IO yet).
pub(crate) const MPI_FILE_NULL: Handle = 0x118;
const MPI_ERR_FILE: c_int = 30;

/// Run the body of file call `fname` on `file`: its errors go to the file's error handler
/// (`MPI_FILE_NULL`'s: an invalid file has none of its own).
pub(crate) fn on_file(
    fname: &'static str,
    file: Handle,
    f: impl FnOnce() -> MpiResult<()>,
) -> c_int {
    match f() {
        Ok(()) => MPI_SUCCESS,
        Err(e) => {
            let h = state::with(|s| Ok(s.file_errhandler)).unwrap_or(ErrHandler::Return);
            super::invoke(fname, h, file, e)
        }
    }
}

fn check_file(file: Handle) -> MpiResult<()> {
    state::with(|_| Ok(()))?;
    if file != MPI_FILE_NULL {
        return Err(MpiError::new(
            MPI_ERR_FILE,
            format!(
                "invalid file {file:#x}: rmca has no MPI-IO yet, so the only file is MPI_FILE_NULL"
            ),
        ));
    }
    Ok(())
}

/// `MPI_File_set_errhandler` on `MPI_FILE_NULL`: the handler of file errors without a file
/// (and of files opened later, which inherit it).
#[export]
pub unsafe extern "C" fn MPI_File_set_errhandler(file: Handle, errhandler: Handle) -> c_int {
    on_file("MPI_File_set_errhandler", file, || {
        check_file(file)?;
        state::with(|s| {
            s.file_errhandler = s.errhandler_for(errhandler, ErrhKind::File)?;
            Ok(())
        })
    })
}

/// `MPI_File_get_errhandler` (of `MPI_FILE_NULL`: `MPI_ERRORS_RETURN` by default).
#[export]
pub unsafe extern "C" fn MPI_File_get_errhandler(file: Handle, errhandler: *mut Handle) -> c_int {
    on_file("MPI_File_get_errhandler", file, || {
        check_file(file)?;
        let e = state::with(|s| Ok(s.file_errhandler))?;
        // SAFETY: the caller's handle.
        unsafe { put(errhandler, State::errhandler_handle(e), "errhandler") }
    })
}

/// `MPI_File_call_errhandler`: raise `errorcode` on the file's handler.
#[export]
pub unsafe extern "C" fn MPI_File_call_errhandler(file: Handle, errorcode: c_int) -> c_int {
    let rc = on_file("MPI_File_call_errhandler", file, || check_file(file));
    if rc != MPI_SUCCESS {
        return rc;
    }
    on_file("MPI_File_call_errhandler", file, || {
        Err(MpiError::new(
            errorcode,
            "raised by MPI_File_call_errhandler",
        ))
    });
    MPI_SUCCESS
}

// ---- profiling, memory ----

/// `MPI_Pcontrol` (variadic in C; the level is the one argument read): rmca has no
/// profiling levels, so every level is accepted and changes nothing, as MPI allows.
#[export]
pub extern "C" fn MPI_Pcontrol(_level: c_int) -> c_int {
    MPI_SUCCESS
}

/// The blocks `MPI_Alloc_mem` handed out and not yet freed (process-wide: see
/// [`state::Confined`]; a block may be freed by another thread).
static ALLOCATED: state::Confined<std::collections::HashSet<usize>> =
    state::Confined::new("MPI_Alloc_mem blocks");

/// `MPI_Alloc_mem`: `size` bytes from the C heap (rmca needs no special memory: its
/// transports register what they send themselves); no info hint applies.
#[export]
pub unsafe extern "C" fn MPI_Alloc_mem(
    size: MPI_Aint,
    info: Handle,
    baseptr: *mut c_void,
) -> c_int {
    call("MPI_Alloc_mem", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        let n = usize::try_from(size)
            .map_err(|_| MpiError::new(MPI_ERR_ARG, format!("size {size} is negative")))?;
        super::info::entries_of(info)?;
        if baseptr.is_null() {
            return Err(super::null_argument("baseptr"));
        }
        // SAFETY: malloc has no preconditions; 1 byte at least, so that a 0-byte block is a
        // pointer MPI_Free_mem recognises.
        let p = unsafe { libc::malloc(n.max(1)) };
        if p.is_null() {
            return Err(MpiError::new(
                MPI_ERR_NO_MEM,
                format!("MPI_Alloc_mem of {n} B: out of memory"),
            ));
        }
        if let Err(e) = ALLOCATED.with(|a| a.insert(p as usize)) {
            // SAFETY: `p` came from malloc just above and was handed out to nobody.
            unsafe { libc::free(p) };
            return Err(e);
        }
        // SAFETY: MPI_Alloc_mem's contract: `baseptr` is a `void **` (non-null, checked).
        unsafe { baseptr.cast::<*mut c_void>().write(p) };
        Ok(())
    })
}

/// `MPI_Free_mem`: a block `MPI_Alloc_mem` returned (NULL: nothing).
#[export]
pub unsafe extern "C" fn MPI_Free_mem(base: *mut c_void) -> c_int {
    call("MPI_Free_mem", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        if base.is_null() {
            return Ok(());
        }
        if !ALLOCATED.with(|a| a.remove(&(base as usize)))? {
            return Err(MpiError::new(
                MPI_ERR_BASE,
                format!("{base:p} is not a block MPI_Alloc_mem returned (or it was freed)"),
            ));
        }
        // SAFETY: `base` came from libc::malloc in MPI_Alloc_mem and was not freed since
        // (it was in the set, removed now).
        unsafe { libc::free(base) };
        Ok(())
    })
}

const MPI_ERR_BASE: c_int = 24;

// ---- the buffer of buffered sends ----

// The process's buffer is one of buffers.rs's (the communicators' and sessions' are the
// others): the same accounting, flush and non-blocking flush.
use super::buffers::Owner;

/// `MPI_Buffer_attach` (`MPI_BUFFER_AUTOMATIC` too).
#[export]
pub unsafe extern "C" fn MPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
    call("MPI_Buffer_attach", MPI_COMM_WORLD, || {
        super::buffers::attach(Owner::Process, buffer, size.into())
    })
}

/// `MPI_Buffer_attach_c`: as `MPI_Buffer_attach`, with an `MPI_Count` size.
#[export]
pub unsafe extern "C" fn MPI_Buffer_attach_c(buffer: *mut c_void, size: MPI_Count) -> c_int {
    call("MPI_Buffer_attach_c", MPI_COMM_WORLD, || {
        super::buffers::attach(Owner::Process, buffer, size)
    })
}

/// `MPI_Buffer_detach`: waits for the buffered sends in flight.
#[export]
pub unsafe extern "C" fn MPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) -> c_int {
    call("MPI_Buffer_detach", MPI_COMM_WORLD, || {
        // A buffer attached by MPI_Buffer_attach_c may be larger than an int says: refused
        // before anything is detached.
        let (addr, n) = super::buffers::detach(Owner::Process, super::buffers::int_size)?;
        // SAFETY: MPI_Buffer_detach's contract: `buffer_addr` is a `void **`, `size` an int.
        unsafe {
            put(buffer_addr.cast::<usize>(), addr, "buffer_addr")?;
            put(size, n as c_int, "size")
        }
    })
}

/// `MPI_Buffer_detach_c`: as `MPI_Buffer_detach`, with an `MPI_Count` size.
#[export]
pub unsafe extern "C" fn MPI_Buffer_detach_c(
    buffer_addr: *mut c_void,
    size: *mut MPI_Count,
) -> c_int {
    call("MPI_Buffer_detach_c", MPI_COMM_WORLD, || {
        let (addr, n) = super::buffers::detach(Owner::Process, |_| Ok(()))?;
        // SAFETY: MPI_Buffer_detach_c's contract: `buffer_addr` is a `void **`, `size` an
        // MPI_Count.
        unsafe {
            put(buffer_addr.cast::<usize>(), addr, "buffer_addr")?;
            put(size, n as MPI_Count, "size")
        }
    })
}

/// `MPI_Buffer_flush` (MPI 4.1): waits until the buffered sends in flight are sent; the
/// buffer stays attached.
#[export]
pub unsafe extern "C" fn MPI_Buffer_flush() -> c_int {
    call("MPI_Buffer_flush", MPI_COMM_WORLD, || {
        super::buffers::flush(Owner::Process)
    })
}

/// `MPI_Buffer_iflush` (MPI 4.1): a request complete once the buffered sends in flight at
/// the call are sent (the receiver may post its receive after this call: MPICH's
/// pt2pt/bsend_iflush).
#[export]
pub unsafe extern "C" fn MPI_Buffer_iflush(request: *mut Handle) -> c_int {
    call("MPI_Buffer_iflush", MPI_COMM_WORLD, || {
        // SAFETY: the caller's contract: `request` is null (refused) or an MPI_Request.
        unsafe { super::buffers::iflush(Owner::Process, MPI_COMM_WORLD, request) }
    })
}

// ---- statuses ----

/// The status at `status` (refused when NULL).
///
/// # Safety
/// `status` is null or valid for reads and writes of an `MPI_Status`.
unsafe fn status_mut<'a>(status: *mut MpiStatus) -> MpiResult<&'a mut MpiStatus> {
    // SAFETY: the caller's contract.
    unsafe { status.as_mut() }.ok_or_else(|| super::null_argument("status"))
}

macro_rules! status_field {
    ($get:ident, $set:ident, $field:ident) => {
        #[doc = concat!("`", stringify!($get), "` (MPI 4.1).")]
        #[export]
        pub unsafe extern "C" fn $get(status: *mut MpiStatus, value: *mut c_int) -> c_int {
            call(stringify!($get), MPI_COMM_WORLD, || {
                // SAFETY: the call's contract: an MPI_Status and an int.
                unsafe {
                    let st = status_mut(status)?;
                    put(value, st.$field, stringify!($field))
                }
            })
        }

        #[doc = concat!("`", stringify!($set), "` (MPI 4.1).")]
        #[export]
        pub unsafe extern "C" fn $set(status: *mut MpiStatus, value: c_int) -> c_int {
            call(stringify!($set), MPI_COMM_WORLD, || {
                // SAFETY: the call's contract: an MPI_Status.
                unsafe { status_mut(status)? }.$field = value;
                Ok(())
            })
        }
    };
}

status_field!(MPI_Status_get_source, MPI_Status_set_source, source);
status_field!(MPI_Status_get_tag, MPI_Status_set_tag, tag);
status_field!(MPI_Status_get_error, MPI_Status_set_error, error);

/// `MPI_Status_set_cancelled`: what `MPI_Test_cancelled` then says.
#[export]
pub unsafe extern "C" fn MPI_Status_set_cancelled(status: *mut MpiStatus, flag: c_int) -> c_int {
    call("MPI_Status_set_cancelled", MPI_COMM_WORLD, || {
        // SAFETY: the call's contract: an MPI_Status.
        unsafe { status_mut(status)? }.internal[2] = c_int::from(flag != 0);
        Ok(())
    })
}

// ---- request status over arrays (MPI 4.1) ----

/// The requests of an array call, checked.
///
/// # Safety
/// `requests` holds `count` handles when `count` > 0.
unsafe fn request_array<'a>(count: c_int, requests: *const Handle) -> MpiResult<&'a [Handle]> {
    let n = super::count(count, "count")?;
    if n == 0 {
        return Ok(&[]);
    }
    if requests.is_null() {
        return Err(super::null_argument("array_of_requests"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(requests, n) })
}

/// Whether request `h` is complete, and its status, without freeing it (as
/// `MPI_Request_get_status`). An error was raised on its handler already: its code.
fn peek(h: Handle) -> Result<Option<MpiStatus>, c_int> {
    let mut flag = 0;
    let mut st = super::empty_status();
    // SAFETY: local out-arguments.
    let rc = unsafe { super::req::MPI_Request_get_status(h, &mut flag, &mut st) };
    if rc != MPI_SUCCESS {
        return Err(rc);
    }
    Ok((flag != 0).then_some(st))
}

/// `MPI_Request_get_status_all`: whether every request is complete (then their statuses),
/// leaving them as they are.
#[export]
pub unsafe extern "C" fn MPI_Request_get_status_all(
    count: c_int,
    requests: *const Handle,
    flag: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    let mut found = Vec::new();
    let rc = call("MPI_Request_get_status_all", MPI_COMM_WORLD, || {
        // SAFETY: the call's contract: `count` requests.
        found = unsafe { request_array(count, requests)? }.to_vec();
        if flag.is_null() {
            return Err(super::null_argument("flag"));
        }
        Ok(())
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    let mut done = Vec::with_capacity(found.len());
    for &h in &found {
        match peek(h) {
            Ok(Some(st)) => done.push(st),
            Ok(None) => {}
            Err(rc) => return rc,
        }
    }
    let all = done.len() == found.len();
    // SAFETY: the caller's int and, unless MPI_STATUSES_IGNORE, `count` statuses.
    unsafe {
        flag.write(c_int::from(all));
        if all && !statuses.is_null() {
            for (i, st) in done.iter().enumerate() {
                statuses.add(i).write(*st);
            }
        }
    }
    MPI_SUCCESS
}

/// `MPI_Request_get_status_any`: the first complete active request (`MPI_UNDEFINED` and
/// flag set when none is active), left as it is.
#[export]
pub unsafe extern "C" fn MPI_Request_get_status_any(
    count: c_int,
    requests: *const Handle,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    let mut found = Vec::new();
    let rc = call("MPI_Request_get_status_any", MPI_COMM_WORLD, || {
        // SAFETY: the call's contract: `count` requests.
        found = unsafe { request_array(count, requests)? }.to_vec();
        if flag.is_null() || index.is_null() {
            return Err(super::null_argument("index or flag"));
        }
        Ok(())
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    let mut answer = if found.iter().all(|&h| h == MPI_REQUEST_NULL) {
        Some((MPI_UNDEFINED, super::empty_status()))
    } else {
        None
    };
    for (i, &h) in found.iter().enumerate() {
        if answer.is_some() {
            break;
        }
        if h == MPI_REQUEST_NULL {
            continue;
        }
        match peek(h) {
            Ok(Some(st)) => answer = Some((i as c_int, st)),
            Ok(None) => {}
            Err(rc) => return rc,
        }
    }
    // SAFETY: the caller's ints (non-null, checked) and status (or MPI_STATUS_IGNORE).
    unsafe {
        flag.write(c_int::from(answer.is_some()));
        index.write(answer.map_or(MPI_UNDEFINED, |(i, _)| i));
        if let Some((_, st)) = answer {
            super::put_status(status, &st);
        }
    }
    MPI_SUCCESS
}

/// `MPI_Request_get_status_some`: the complete active requests (`MPI_UNDEFINED` when none
/// is active), left as they are.
#[export]
pub unsafe extern "C" fn MPI_Request_get_status_some(
    count: c_int,
    requests: *const Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    let mut found = Vec::new();
    let rc = call("MPI_Request_get_status_some", MPI_COMM_WORLD, || {
        // SAFETY: the call's contract: `count` requests.
        found = unsafe { request_array(count, requests)? }.to_vec();
        if outcount.is_null() || (!found.is_empty() && indices.is_null()) {
            return Err(super::null_argument("outcount or array_of_indices"));
        }
        Ok(())
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    if found.iter().all(|&h| h == MPI_REQUEST_NULL) {
        // SAFETY: the caller's int (non-null, checked).
        unsafe { outcount.write(MPI_UNDEFINED) };
        return MPI_SUCCESS;
    }
    let mut done = Vec::new();
    for (i, &h) in found.iter().enumerate() {
        if h == MPI_REQUEST_NULL {
            continue;
        }
        match peek(h) {
            Ok(Some(st)) => done.push((i as c_int, st)),
            Ok(None) => {}
            Err(rc) => return rc,
        }
    }
    // SAFETY: the caller's int, `count` indices and (unless MPI_STATUSES_IGNORE) statuses.
    unsafe {
        outcount.write(done.len() as c_int);
        for (k, (i, st)) in done.iter().enumerate() {
            indices.add(k).write(*i);
            if !statuses.is_null() {
                statuses.add(k).write(*st);
            }
        }
    }
    MPI_SUCCESS
}

// ---- hardware and ABI information ----

/// `MPI_Get_hw_resource_info` (MPI 4.1): a new info object. rmca reads no hardware topology
/// (no hwloc), so it holds no keys, as MPICH's.
#[export]
pub unsafe extern "C" fn MPI_Get_hw_resource_info(hw_info: *mut Handle) -> c_int {
    call("MPI_Get_hw_resource_info", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        if hw_info.is_null() {
            return Err(super::null_argument("hw_info"));
        }
        let h = super::info::new_info(Vec::new())?;
        // SAFETY: non-null, the caller's handle.
        unsafe { put(hw_info, h, "hw_info") }
    })
}

/// `MPI_Abi_get_info` (callable at any time): the sizes of `MPI_Aint`, `MPI_Count` and
/// `MPI_Offset` in bytes (`mpi_aint_size`, `mpi_count_size`, `mpi_offset_size`).
#[export]
pub unsafe extern "C" fn MPI_Abi_get_info(info: *mut Handle) -> c_int {
    call("MPI_Abi_get_info", MPI_COMM_WORLD, || {
        if info.is_null() {
            return Err(super::null_argument("info"));
        }
        let size = |n: usize| n.to_string();
        let h = super::info::new_info(vec![
            (
                "mpi_aint_size".into(),
                size(std::mem::size_of::<MPI_Aint>()),
            ),
            (
                "mpi_count_size".into(),
                size(std::mem::size_of::<MPI_Count>()),
            ),
            (
                "mpi_offset_size".into(),
                size(std::mem::size_of::<MPI_Offset>()),
            ),
        ])?;
        // SAFETY: non-null, the caller's handle.
        unsafe { put(info, h, "info") }
    })
}

/// What a Fortran layer told the library (`MPI_Abi_set_fortran_*`): nothing until one sets
/// it (rmca's libmpifort does in its `MPI_INIT`).
struct Fortran {
    /// `LOGICAL`'s size in bytes and its `.TRUE.` and `.FALSE.` values.
    booleans: Option<(c_int, i64, i64)>,
    /// The info of `MPI_Abi_set_fortran_info`.
    info: Option<Vec<(String, String)>>,
}

static FORTRAN: std::sync::Mutex<Fortran> = std::sync::Mutex::new(Fortran {
    booleans: None,
    info: None,
});

fn fortran() -> std::sync::MutexGuard<'static, Fortran> {
    FORTRAN.lock().unwrap_or_else(|p| p.into_inner())
}

/// A Fortran `LOGICAL` size, checked (1, 2, 4 or 8 bytes).
fn logical_size(n: c_int) -> MpiResult<usize> {
    match n {
        1 | 2 | 4 | 8 => Ok(n as usize),
        _ => Err(MpiError::new(
            MPI_ERR_ABI,
            format!("a Fortran LOGICAL of {n} B: sizes are 1, 2, 4 or 8"),
        )),
    }
}

/// `MPI_Abi_get_fortran_info`: `MPI_INFO_NULL` while no Fortran layer called
/// `MPI_Abi_set_fortran_info` (libmpifort does in its `MPI_INIT`), else a copy of what it set.
#[export]
pub unsafe extern "C" fn MPI_Abi_get_fortran_info(info: *mut Handle) -> c_int {
    call("MPI_Abi_get_fortran_info", MPI_COMM_WORLD, || {
        if info.is_null() {
            return Err(super::null_argument("info"));
        }
        let set = fortran().info.clone();
        let h = match set {
            None => MPI_INFO_NULL,
            Some(e) => super::info::new_info(e)?,
        };
        // SAFETY: non-null, the caller's handle.
        unsafe { put(info, h, "info") }
    })
}

/// `MPI_Abi_set_fortran_info`: what a Fortran layer says of its types (once).
#[export]
pub unsafe extern "C" fn MPI_Abi_set_fortran_info(info: Handle) -> c_int {
    call("MPI_Abi_set_fortran_info", MPI_COMM_WORLD, || {
        let e = super::info::entries_of(info)?;
        let mut f = fortran();
        if f.info.is_some() {
            return Err(MpiError::new(
                MPI_ERR_ABI,
                "the Fortran information was set already (MPI_Abi_set_fortran_info is called once)",
            ));
        }
        f.info = Some(e);
        Ok(())
    })
}

/// `MPI_Abi_get_fortran_booleans`: `is_set` 0 while no Fortran layer set them (libmpifort
/// does in its `MPI_INIT`), else `.TRUE.` and `.FALSE.` as `logical_size`-byte integers.
#[export]
pub unsafe extern "C" fn MPI_Abi_get_fortran_booleans(
    logical_size: c_int,
    logical_true: *mut c_void,
    logical_false: *mut c_void,
    is_set: *mut c_int,
) -> c_int {
    call("MPI_Abi_get_fortran_booleans", MPI_COMM_WORLD, || {
        let set = fortran().booleans;
        let Some((size, t, f)) = set else {
            // SAFETY: the caller's int.
            return unsafe { put(is_set, 0, "is_set") };
        };
        if logical_size != size {
            return Err(MpiError::new(
                MPI_ERR_ABI,
                format!("the Fortran LOGICAL was set as {size} B, not {logical_size} B"),
            ));
        }
        if logical_true.is_null() || logical_false.is_null() {
            return Err(super::null_argument("logical_true or logical_false"));
        }
        let n = size as usize;
        // SAFETY: the call's contract: `logical_true` and `logical_false` hold
        // `logical_size` bytes each (non-null, checked); `is_set` an int. The values are
        // written in native byte order, their low `n` bytes (little-endian) or high ones.
        unsafe {
            write_logical(logical_true, t, n);
            write_logical(logical_false, f, n);
            put(is_set, 1, "is_set")
        }
    })
}

/// # Safety
/// `p` is valid for writes of `n` bytes.
unsafe fn write_logical(p: *mut c_void, v: i64, n: usize) {
    // SAFETY: the caller's contract (unaligned writes: any address goes).
    unsafe {
        match n {
            1 => p.cast::<i8>().write_unaligned(v as i8),
            2 => p.cast::<i16>().write_unaligned(v as i16),
            4 => p.cast::<i32>().write_unaligned(v as i32),
            _ => p.cast::<i64>().write_unaligned(v),
        }
    }
}

/// # Safety
/// `p` is valid for reads of `n` bytes.
unsafe fn read_logical(p: *const c_void, n: usize) -> i64 {
    // SAFETY: the caller's contract.
    unsafe {
        match n {
            1 => i64::from(p.cast::<i8>().read_unaligned()),
            2 => i64::from(p.cast::<i16>().read_unaligned()),
            4 => i64::from(p.cast::<i32>().read_unaligned()),
            _ => p.cast::<i64>().read_unaligned(),
        }
    }
}

/// `MPI_Abi_set_fortran_booleans`: a Fortran layer's `LOGICAL` size and values (once).
#[export]
pub unsafe extern "C" fn MPI_Abi_set_fortran_booleans(
    logical_size: c_int,
    logical_true: *mut c_void,
    logical_false: *mut c_void,
) -> c_int {
    call("MPI_Abi_set_fortran_booleans", MPI_COMM_WORLD, || {
        let n = self::logical_size(logical_size)?;
        if logical_true.is_null() || logical_false.is_null() {
            return Err(super::null_argument("logical_true or logical_false"));
        }
        let mut f = fortran();
        if f.booleans.is_some() {
            return Err(MpiError::new(
                MPI_ERR_ABI,
                "the Fortran booleans were set already (MPI_Abi_set_fortran_booleans is called once)",
            ));
        }
        // SAFETY: the call's contract: `logical_size` bytes at each (non-null, checked).
        let (t, fa) = unsafe {
            (
                read_logical(logical_true, n),
                read_logical(logical_false, n),
            )
        };
        f.booleans = Some((logical_size, t, fa));
        Ok(())
    })
}
