//! Sessions (MPI-4.1 §11.3): `MPI_Session_*`, process sets, and communicators made from a
//! group (`MPI_Group_from_session_pset`, `MPI_Comm_create_from_group`, `MPI_Comm_create_group`).
//!
//! The sessions model and the world model share one runtime: the first of
//! `MPI_Session_init` and `MPI_Init` starts it, and it ends with the last of
//! `MPI_Session_finalize` and `MPI_Finalize` (an `MPI_Finalize` while sessions live only
//! ends the world model). rmca has two process sets: `mpi://WORLD` and `mpi://SELF`.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int};

use super::group::{add_group, group};
use super::inter::{add_comm, c_str, comm_entry};
use super::{call, communicator, put};
use crate::abi::*;
use crate::state::{self, Confined, ErrHandler, MpiError, MpiResult, Phase, State};
use rmca_mpi_export::export;

/// Handles of sessions: this plus an index.
const SESSION_BASE: Handle = DYNAMIC_BASE * 17;
const MAX_SESSIONS: usize = DYNAMIC_BASE;
/// `MPI_ERR_SESSION` (standard ABI value).
pub(crate) const MPI_ERR_SESSION: c_int = 60;
/// `MPI_SESSION_NULL` (standard ABI value).
const MPI_SESSION_NULL: Handle = 0x120;

/// The process sets rmca knows, in `MPI_Session_get_nth_pset` order.
const PSETS: [&str; 2] = ["mpi://WORLD", "mpi://SELF"];

/// A session: its error handler.
struct Session {
    errhandler: ErrHandler,
}

/// The sessions, by handle less [`SESSION_BASE`] (process-wide: see [`Confined`]).
static SESSIONS: Confined<Vec<Option<Session>>> = Confined::new("sessions");

/// Sessions initialized and not finalized.
pub(crate) fn live() -> MpiResult<usize> {
    SESSIONS.with(|t| t.iter().flatten().count())
}

fn bad_session(h: Handle) -> MpiError {
    let what = if h == MPI_SESSION_NULL {
        "MPI_SESSION_NULL".to_owned()
    } else {
        format!("{h:#x}")
    };
    MpiError::new(
        MPI_ERR_SESSION,
        format!("invalid session {what}: not one initialized and not finalized"),
    )
}

pub(crate) fn index(h: Handle) -> MpiResult<usize> {
    let i = h
        .checked_sub(SESSION_BASE)
        .filter(|&i| i < MAX_SESSIONS)
        .ok_or_else(|| bad_session(h))?;
    SESSIONS
        .with(|t| t.get(i).is_some_and(Option::is_some))?
        .then_some(i)
        .ok_or_else(|| bad_session(h))
}

fn errhandler_of(h: Handle) -> Option<ErrHandler> {
    let i = index(h).ok()?;
    SESSIONS
        .with(|t| t[i].as_ref().map(|s| s.errhandler))
        .ok()
        .flatten()
}

/// Run `f`, handing an error to error handler `eh` (a handle) with `obj` (the session, or the
/// null handle of the object being made) as the object a user handler is called with.
pub(crate) fn call_eh(
    fname: &'static str,
    eh: Handle,
    obj: Handle,
    f: impl FnOnce() -> MpiResult<()>,
) -> c_int {
    let Err(e) = super::caught(f) else {
        return MPI_SUCCESS;
    };
    let handler = state::errhandler(eh).unwrap_or(ErrHandler::Fatal);
    match handler {
        ErrHandler::Return | ErrHandler::User(_) => return super::invoke(fname, handler, obj, e),
        // A fatal handler (the default, e.g. for MPI_SESSION_NULL, which has none of its own)
        // goes through the world's, as errors attached to no object do (mpi4py sets
        // MPI_ERRORS_RETURN there and expects MPI_ERR_SESSION back).
        _ if state::installed() => return super::raise(fname, MPI_COMM_WORLD, e),
        _ => {}
    }
    use std::io::Write;
    // No runtime to abort the job through: this process ends (the launcher ends the rest).
    let _ = writeln!(
        std::io::stderr(),
        "rmca MPI error (fatal): {fname}: {}",
        e.msg
    );
    std::process::exit(e.class.max(1))
}

/// Run `f` for a call on session `session`: errors go to its error handler.
pub(crate) fn on_session(
    fname: &'static str,
    session: Handle,
    f: impl FnOnce() -> MpiResult<()>,
) -> c_int {
    let eh = errhandler_of(session).map_or(MPI_ERRORS_ARE_FATAL, State::errhandler_handle);
    call_eh(fname, eh, session, f)
}

/// The names of the thread levels, as the `thread_level` info key spells them.
const LEVELS: [(c_int, &str); 4] = [
    (MPI_THREAD_SINGLE, "MPI_THREAD_SINGLE"),
    (MPI_THREAD_FUNNELED, "MPI_THREAD_FUNNELED"),
    (MPI_THREAD_SERIALIZED, "MPI_THREAD_SERIALIZED"),
    (MPI_THREAD_MULTIPLE, "MPI_THREAD_MULTIPLE"),
];

/// The thread level `info`'s `thread_level` key asks for (`MPI_THREAD_FUNNELED` without it).
fn requested_level(info: Handle) -> MpiResult<c_int> {
    let entries = super::info::entries_of(info)?;
    let Some((_, v)) = entries.iter().find(|(k, _)| k == "thread_level") else {
        return Ok(MPI_THREAD_FUNNELED);
    };
    LEVELS
        .iter()
        .find(|(_, name)| name.eq_ignore_ascii_case(v.trim()))
        .map(|&(l, _)| l)
        .ok_or_else(|| {
            MpiError::new(
                MPI_ERR_ARG,
                format!("info key thread_level is {v:?}: MPI_THREAD_SINGLE, MPI_THREAD_FUNNELED, MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE"),
            )
        })
}

/// Start the runtime for the sessions model if nothing started it yet, at the thread level
/// `info` asks for (a level that does not exist is refused even when a runtime runs).
fn start_runtime(info: Handle) -> MpiResult<()> {
    let level = requested_level(info)?;
    match state::phase() {
        Phase::Running => return Ok(()),
        Phase::Finalized if state::installed() => return Ok(()),
        Phase::Finalized => {
            return Err(MpiError::new(
                MPI_ERR_OTHER,
                "MPI was finalized: rmca cannot start its runtime again in this process",
            ))
        }
        Phase::Before if state::installed() => return Ok(()),
        Phase::Before => {}
    }
    let universe = rmca::init().map_err(MpiError::from)?;
    let world = universe.world();
    // As MPI_Init does: MPI_COMM_SELF made once, collectively, now.
    let self_comm = world
        .split(Some(world.rank() as u32), 0)?
        .ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "split left this process out"))?;
    state::install_for_sessions(universe, self_comm, level);
    Ok(())
}

/// `MPI_Session_init`: starts the runtime unless `MPI_Init` or another session did.
#[export]
pub unsafe extern "C" fn MPI_Session_init(
    info: Handle,
    errhandler: Handle,
    session: *mut Handle,
) -> c_int {
    call_eh("MPI_Session_init", errhandler, MPI_SESSION_NULL, || {
        if session.is_null() {
            return Err(super::null_argument("session"));
        }
        start_runtime(info)?;
        let rest = || {
            let eh = state::with(|s| s.errhandler(errhandler))?;
            let h = SESSIONS.with(|t| {
                super::table_insert(
                    t,
                    Session { errhandler: eh },
                    (SESSION_BASE, MAX_SESSIONS),
                    "sessions",
                    "MPI_Session_finalize",
                )
            })??;
            // SAFETY: non-null (checked), the caller's handle.
            unsafe { put(session, h, "session") }
        };
        // A runtime this call started at MPI_THREAD_MULTIPLE belongs to the process lock
        // already: the rest of the call takes it, as the entry points do.
        if state::owned() || state::thread_level() != MPI_THREAD_MULTIPLE {
            rest()
        } else {
            state::entered(rest)
        }
    })
}

/// `MPI_Session_finalize`: the last user of the runtime (no other session, and `MPI_Init`
/// not called or already finalized) ends it.
#[export]
pub unsafe extern "C" fn MPI_Session_finalize(session: *mut Handle) -> c_int {
    if session.is_null() {
        return call_eh(
            "MPI_Session_finalize",
            MPI_ERRORS_ARE_FATAL,
            MPI_SESSION_NULL,
            || Err(super::null_argument("session")),
        );
    }
    // SAFETY: non-null, the caller's handle.
    let h = unsafe { session.read() };
    on_session("MPI_Session_finalize", h, || {
        let i = index(h)?;
        // Its buffer is detached once its sends completed (as MPICH does).
        super::buffers::session_finalized(h)?;
        SESSIONS.with(|t| t[i] = None)?;
        // SAFETY: as above.
        unsafe { session.write(MPI_SESSION_NULL) };
        if live()? == 0 && state::phase() != Phase::Running {
            let state = state::take().ok_or_else(state::not_running)?;
            state::set_phase(Phase::Finalized);
            let State { universe, .. } = state;
            universe.finalize()?;
        }
        Ok(())
    })
}

/// `MPI_Session_get_num_psets`.
#[export]
pub unsafe extern "C" fn MPI_Session_get_num_psets(
    session: Handle,
    _info: Handle,
    npset_names: *mut c_int,
) -> c_int {
    on_session("MPI_Session_get_num_psets", session, || {
        index(session)?;
        // SAFETY: the caller's int.
        unsafe { put(npset_names, PSETS.len() as c_int, "npset_names") }
    })
}

/// `MPI_Session_get_nth_pset`: with `*pset_len` 0, only the length needed (with the NUL).
#[export]
pub unsafe extern "C" fn MPI_Session_get_nth_pset(
    session: Handle,
    _info: Handle,
    n: c_int,
    pset_len: *mut c_int,
    pset_name: *mut c_char,
) -> c_int {
    on_session("MPI_Session_get_nth_pset", session, || {
        index(session)?;
        let name = usize::try_from(n)
            .ok()
            .and_then(|n| PSETS.get(n))
            .ok_or_else(|| {
                MpiError::new(
                    MPI_ERR_ARG,
                    format!(
                        "pset index {n} is invalid: the session has {} process sets (0..{})",
                        PSETS.len(),
                        PSETS.len() - 1
                    ),
                )
            })?;
        if pset_len.is_null() {
            return Err(super::null_argument("pset_len"));
        }
        // SAFETY: non-null, the caller's int.
        let cap = unsafe { pset_len.read() };
        let needed = name.len() as c_int + 1;
        if cap <= 0 {
            // SAFETY: as above.
            unsafe { pset_len.write(needed) };
            return Ok(());
        }
        // SAFETY: MPI's contract: `pset_name` holds `*pset_len` bytes.
        unsafe { super::put_string(pset_name, cap as usize, std::ptr::null_mut(), name)? };
        // SAFETY: as above.
        unsafe { pset_len.write(needed) };
        Ok(())
    })
}

/// The processes of process set `name`, as a group.
fn pset_group(name: &str) -> MpiResult<rmca::Group> {
    let world = communicator(MPI_COMM_WORLD)?;
    if name.eq_ignore_ascii_case(PSETS[0]) {
        Ok(world.group())
    } else if name.eq_ignore_ascii_case(PSETS[1]) {
        Ok(world.group().incl(&[world.rank()])?)
    } else {
        Err(MpiError::new(
            MPI_ERR_ARG,
            format!("unknown process set {name:?}: rmca has mpi://WORLD and mpi://SELF"),
        ))
    }
}

/// `MPI_Session_get_pset_info`: key `mpi_size`.
#[export]
pub unsafe extern "C" fn MPI_Session_get_pset_info(
    session: Handle,
    pset_name: *const c_char,
    info: *mut Handle,
) -> c_int {
    on_session("MPI_Session_get_pset_info", session, || {
        index(session)?;
        // SAFETY: MPI's contract: a NUL-terminated string.
        let name = unsafe { c_str(pset_name, "pset_name")? };
        let size = pset_group(&name)?.size();
        let h = super::info::new_info(vec![("mpi_size".into(), size.to_string())])?;
        // SAFETY: the caller's handle.
        unsafe { put(info, h, "info") }
    })
}

/// `MPI_Session_get_info`: the thread support level (the runtime's: the first session's, or
/// `MPI_Init_thread`'s).
#[export]
pub unsafe extern "C" fn MPI_Session_get_info(session: Handle, info_used: *mut Handle) -> c_int {
    on_session("MPI_Session_get_info", session, || {
        index(session)?;
        let level = state::thread_level();
        let name = LEVELS
            .iter()
            .find(|&&(l, _)| l == level)
            .map_or("MPI_THREAD_SINGLE", |&(_, n)| n);
        let h = super::info::new_info(vec![("thread_level".into(), name.into())])?;
        // SAFETY: the caller's handle.
        unsafe { put(info_used, h, "info_used") }
    })
}

/// `MPI_Session_set_errhandler`.
#[export]
pub unsafe extern "C" fn MPI_Session_set_errhandler(session: Handle, errhandler: Handle) -> c_int {
    on_session("MPI_Session_set_errhandler", session, || {
        let i = index(session)?;
        let eh = state::with(|s| s.errhandler(errhandler))?;
        SESSIONS.with(|t| {
            if let Some(s) = t[i].as_mut() {
                s.errhandler = eh;
            }
        })
    })
}

/// `MPI_Session_get_errhandler`.
#[export]
pub unsafe extern "C" fn MPI_Session_get_errhandler(
    session: Handle,
    errhandler: *mut Handle,
) -> c_int {
    on_session("MPI_Session_get_errhandler", session, || {
        let eh = errhandler_of(session).ok_or_else(|| bad_session(session))?;
        // SAFETY: the caller's handle.
        unsafe { put(errhandler, State::errhandler_handle(eh), "errhandler") }
    })
}

/// `MPI_Session_call_errhandler`: raise `errorcode` on the session's handler.
#[export]
pub unsafe extern "C" fn MPI_Session_call_errhandler(session: Handle, errorcode: c_int) -> c_int {
    if let Err(e) = index(session) {
        return call_eh(
            "MPI_Session_call_errhandler",
            MPI_ERRORS_ARE_FATAL,
            MPI_SESSION_NULL,
            || Err(e),
        );
    }
    on_session("MPI_Session_call_errhandler", session, || {
        Err(MpiError::new(
            errorcode,
            "raised by MPI_Session_call_errhandler",
        ))
    });
    MPI_SUCCESS
}

/// `MPI_Group_from_session_pset`.
#[export]
pub unsafe extern "C" fn MPI_Group_from_session_pset(
    session: Handle,
    pset_name: *const c_char,
    newgroup: *mut Handle,
) -> c_int {
    on_session("MPI_Group_from_session_pset", session, || {
        index(session)?;
        // SAFETY: MPI's contract: a NUL-terminated string.
        let name = unsafe { c_str(pset_name, "pset_name")? };
        add_group(pset_group(&name)?, newgroup)?;
        // SAFETY: add_group wrote the handle (non-null).
        super::buffers::group_made(session, unsafe { newgroup.read() });
        Ok(())
    })
}

/// `MPI_Comm_create_from_group`: collective over the group's members only, keyed by
/// `stringtag`. A process outside the group (`MPI_GROUP_EMPTY`, say) gets `MPI_COMM_NULL`
/// at once: a local call, as for `MPI_Comm_create_group` (MPI 4.1 §7.4.2).
#[export]
pub unsafe extern "C" fn MPI_Comm_create_from_group(
    g: Handle,
    stringtag: *const c_char,
    _info: Handle,
    errhandler: Handle,
    newcomm: *mut Handle,
) -> c_int {
    call_eh(
        "MPI_Comm_create_from_group",
        errhandler,
        MPI_COMM_NULL,
        || {
            if newcomm.is_null() {
                return Err(super::null_argument("newcomm"));
            }
            let eh = state::with(|s| s.errhandler(errhandler))?;
            let grp = group(g)?;
            // SAFETY: MPI's contract: a NUL-terminated string.
            let tag = unsafe { c_str(stringtag, "stringtag")? };
            if grp.rank().is_none() {
                // SAFETY: non-null (checked), the caller's handle.
                return unsafe { put(newcomm, MPI_COMM_NULL, "newcomm") };
            }
            let world = communicator(MPI_COMM_WORLD)?;
            let c = world.create_group(&grp, &format!("from_group:{tag}"))?;
            super::buffers::comm_from_group(g, &c);
            add_comm(c, eh, newcomm)
        },
    )
}

/// `MPI_Comm_create_group`: collective over the members of `group` (a subgroup of
/// `comm`'s) only, keyed by `tag`. A process not in `group` gets `MPI_COMM_NULL`: for it
/// the call is local (MPI 4.1 §7.4.2).
#[export]
pub unsafe extern "C" fn MPI_Comm_create_group(
    comm: Handle,
    g: Handle,
    tag: c_int,
    newcomm: *mut Handle,
) -> c_int {
    call("MPI_Comm_create_group", comm, || {
        if newcomm.is_null() {
            return Err(super::null_argument("newcomm"));
        }
        let (c, errhandler) = comm_entry(comm)?;
        super::inter::refuse(&c, "MPI_Comm_create_group")?;
        super::send_tag(tag)?;
        let grp = group(g)?;
        if grp.rank().is_none() {
            // SAFETY: non-null (checked), the caller's handle.
            return unsafe { put(newcomm, MPI_COMM_NULL, "newcomm") };
        }
        let nc = c.create_group(&grp, &format!("group:{tag}"))?;
        add_comm(nc, errhandler, newcomm)?;
        // SAFETY: add_comm wrote the handle (non-null, checked).
        super::buffers::comm_derived(comm, unsafe { newcomm.read() });
        Ok(())
    })
}
