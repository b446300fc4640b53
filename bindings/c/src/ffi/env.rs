//! Start and end, time, versions, error handling.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_double, c_int};
use std::sync::OnceLock;
use std::time::Instant;

use super::{call, put, put_string};
use crate::abi::*;
use crate::state::{self, CommErrhandlerFn, MpiError, MpiResult, Phase, State};
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
    let universe = rmca::init().map_err(MpiError::from)?;
    let world = universe.world();
    // MPI_COMM_SELF: every process alone, with its own matching space. Collective over the
    // world once, here, so that no later call has to be.
    let self_comm = world
        .split(Some(world.rank() as u32), 0)?
        .ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "split left this process out"))?;
    // rmca's runtime is driven by one thread: the thread that initialized.
    let provided = required.clamp(MPI_THREAD_SINGLE, MPI_THREAD_FUNNELED);
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

/// `MPI_Init_thread`: rmca provides up to `MPI_THREAD_FUNNELED`.
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

/// `MPI_Query_thread`.
#[export]
pub unsafe extern "C" fn MPI_Query_thread(provided: *mut c_int) -> c_int {
    call("MPI_Query_thread", MPI_COMM_WORLD, || {
        let level = state::with(|s| Ok(s.thread_level))?;
        // SAFETY: the caller's int.
        unsafe { put(provided, level, "provided") }
    })
}

/// `MPI_Is_thread_main`: the state lives on the thread that initialized.
#[export]
pub unsafe extern "C" fn MPI_Is_thread_main(flag: *mut c_int) -> c_int {
    call("MPI_Is_thread_main", MPI_COMM_WORLD, || {
        let main = state::with(|_| Ok(())).is_ok();
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
        state::with(|s| {
            for b in s.bsend.in_flight.drain(..) {
                if let Some(r) = b.request {
                    r.wait()?;
                }
            }
            for r in s.detached.drain(..) {
                r.wait()?;
            }
            let active = s.active_requests();
            if active > 0 {
                tracing::warn!("MPI_Finalize with {active} active request(s): they are abandoned");
            }
            Ok(())
        })?;
        let state = state::take().ok_or_else(state::not_running)?;
        state::set_phase(Phase::Finalized);
        let State { universe, .. } = state;
        universe.finalize()?;
        Ok(())
    })
}

/// `MPI_Abort`: end every process of the job with `errorcode`.
#[export]
pub unsafe extern "C" fn MPI_Abort(comm: Handle, errorcode: c_int) -> c_int {
    let msg = format!("MPI_Abort called with error code {errorcode} on communicator {comm:#x}");
    let _ = state::with(|s| -> MpiResult<()> { s.universe.abort(errorcode, &msg) });
    std::process::exit(if errorcode == 0 { 1 } else { errorcode & 0xff })
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

/// Is `code` an error code rmca can return? (Codes are classes.)
fn check_code(code: c_int) -> MpiResult<()> {
    if (0..=MPI_ERR_ABI).contains(&code) {
        Ok(())
    } else {
        Err(MpiError::new(
            MPI_ERR_ARG,
            format!(
                "{code} is not an error code of rmca (its codes are the classes 0..={MPI_ERR_ABI})"
            ),
        ))
    }
}

/// `MPI_Error_class`: rmca's error codes are their classes.
#[export]
pub unsafe extern "C" fn MPI_Error_class(errorcode: c_int, errorclass: *mut c_int) -> c_int {
    call("MPI_Error_class", MPI_COMM_WORLD, || {
        check_code(errorcode)?;
        // SAFETY: the caller's int.
        unsafe { put(errorclass, errorcode, "errorclass") }
    })
}

/// `MPI_Error_string`: the class's text, and the details of the last such error returned.
#[export]
pub unsafe extern "C" fn MPI_Error_string(
    errorcode: c_int,
    string: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    call("MPI_Error_string", MPI_COMM_WORLD, || {
        check_code(errorcode)?;
        let mut text = state::class_text(errorcode).to_owned();
        if let Ok(Some(last)) = state::with(|s| Ok(s.last_error(errorcode).map(str::to_owned))) {
            text = format!("{text} (last: {last})");
        }
        // SAFETY: the contract: `string` holds MPI_MAX_ERROR_STRING bytes.
        unsafe { put_string(string, MPI_MAX_ERROR_STRING, resultlen, &text) }
    })
}

/// `MPI_Comm_set_errhandler`.
#[export]
pub unsafe extern "C" fn MPI_Comm_set_errhandler(comm: Handle, errhandler: Handle) -> c_int {
    call("MPI_Comm_set_errhandler", comm, || {
        state::with(|s| {
            let e = s.errhandler(errhandler)?;
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
        let h = state::with(|s| s.add_errhandler(f))?;
        // SAFETY: the caller's handle.
        unsafe { put(errhandler, h, "errhandler") }
    })
}

/// `MPI_Errhandler_free`.
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
        state::with(|s| s.free_errhandler(h))?;
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
