//! Communicator queries and management, and names (attributes: `attr.rs`).
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int};

use super::{call, communicator, put, put_string};
use crate::abi::*;
use crate::state::{self, CommEntry, MpiError};
use rmca_mpi_export::export;

/// `MPI_Comm_size`.
#[export]
pub unsafe extern "C" fn MPI_Comm_size(comm: Handle, size: *mut c_int) -> c_int {
    call("MPI_Comm_size", comm, || {
        // An intercommunicator's size is its local group's (MPI).
        let n = state::with(|s| Ok(s.comm(comm)?.comm.local_size()))?;
        // SAFETY: the caller's int.
        unsafe { put(size, n as c_int, "size") }
    })
}

/// `MPI_Comm_rank`.
#[export]
pub unsafe extern "C" fn MPI_Comm_rank(comm: Handle, rank: *mut c_int) -> c_int {
    call("MPI_Comm_rank", comm, || {
        let r = state::with(|s| Ok(s.comm(comm)?.comm.rank()))?;
        // SAFETY: the caller's int.
        unsafe { put(rank, r as c_int, "rank") }
    })
}

/// `MPI_Comm_dup`: same group, new matching space, the same error handler, info hints and
/// the attributes the copy callbacks copy.
#[export]
pub unsafe extern "C" fn MPI_Comm_dup(comm: Handle, newcomm: *mut Handle) -> c_int {
    call("MPI_Comm_dup", comm, || {
        if newcomm.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the newcomm argument is NULL"));
        }
        let (c, errhandler) = state::with(|s| {
            let e = s.comm(comm)?;
            Ok((e.comm.clone(), e.errhandler))
        })?;
        let dup = c.dup()?;
        let h = state::with(|s| {
            s.add_comm(CommEntry {
                comm: dup,
                errhandler,
                name: String::new(),
            })
        })?;
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { super::attr::comm_dup(comm, h, newcomm)? };
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { put(newcomm, h, "newcomm") }
    })
}

/// `MPI_Comm_split`: `MPI_UNDEFINED` as color leaves the caller out (`MPI_COMM_NULL`).
#[export]
pub unsafe extern "C" fn MPI_Comm_split(
    comm: Handle,
    color: c_int,
    key: c_int,
    newcomm: *mut Handle,
) -> c_int {
    call("MPI_Comm_split", comm, || {
        if newcomm.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the newcomm argument is NULL"));
        }
        let (c, errhandler) = state::with(|s| {
            let e = s.comm(comm)?;
            Ok((e.comm.clone(), e.errhandler))
        })?;
        // A bad colour travels in the split's own exchange of (colour, key): every member
        // refuses it after that exchange (MPI_ERR_ARG naming the rank), not only its caller
        // while the others wait in the split.
        let color = match color {
            MPI_UNDEFINED => rmca::SplitColor::Undefined,
            c if c >= 0 => rmca::SplitColor::Of(c as u32),
            c => rmca::SplitColor::Invalid(c),
        };
        let h = match c.split_with(color, key)? {
            None => MPI_COMM_NULL,
            Some(part) => state::with(|s| {
                s.add_comm(CommEntry {
                    comm: part,
                    errhandler,
                    name: String::new(),
                })
            })?,
        };
        super::buffers::comm_derived(comm, h);
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { put(newcomm, h, "newcomm") }
    })
}

/// `MPI_Comm_free`.
#[export]
pub unsafe extern "C" fn MPI_Comm_free(comm: *mut Handle) -> c_int {
    if comm.is_null() {
        return call("MPI_Comm_free", MPI_COMM_WORLD, || {
            Err(MpiError::new(MPI_ERR_ARG, "the comm argument is NULL"))
        });
    }
    // SAFETY: non-null, the caller's handle.
    let h = unsafe { comm.read() };
    call("MPI_Comm_free", h, || {
        super::attr::comm_free(h)?;
        let c = communicator(h)?;
        state::with(|s| s.free_comm(h))?;
        // Its buffer is detached once its sends completed (as MPICH does).
        super::buffers::comm_freed(&c)?;
        // SAFETY: as above.
        unsafe { comm.write(MPI_COMM_NULL) };
        Ok(())
    })
}

/// `MPI_Comm_disconnect`: collective; every rank's communication on the communicator is
/// complete (MPI requires it matched and completed before the call), then it is freed as by
/// `MPI_Comm_free`. rmca has no dynamic processes, so this is the free of a communicator that
/// waits for its peers (a barrier first), on any communicator but the predefined ones.
#[export]
pub unsafe extern "C" fn MPI_Comm_disconnect(comm: *mut Handle) -> c_int {
    if comm.is_null() {
        return call("MPI_Comm_disconnect", MPI_COMM_WORLD, || {
            Err(MpiError::new(MPI_ERR_ARG, "the comm argument is NULL"))
        });
    }
    // SAFETY: non-null, the caller's handle.
    let h = unsafe { comm.read() };
    let checked = call("MPI_Comm_disconnect", h, || {
        communicator(h)?;
        if matches!(h, MPI_COMM_WORLD | MPI_COMM_SELF) {
            return Err(MpiError::new(
                MPI_ERR_COMM,
                "MPI_COMM_WORLD and MPI_COMM_SELF cannot be disconnected",
            ));
        }
        Ok(())
    });
    if checked != MPI_SUCCESS {
        return checked;
    }
    // SAFETY: `h` is a valid communicator (checked); MPI_Comm_free's contract for `comm`.
    match unsafe { super::coll::MPI_Barrier(h) } {
        MPI_SUCCESS => unsafe { MPI_Comm_free(comm) },
        e => e,
    }
}

/// `MPI_Comm_compare`.
#[export]
pub unsafe extern "C" fn MPI_Comm_compare(
    comm1: Handle,
    comm2: Handle,
    result: *mut c_int,
) -> c_int {
    call("MPI_Comm_compare", comm1, || {
        let a = communicator(comm1)?;
        let b = communicator(comm2).map_err(|e| e.on(comm1))?;
        let r = if comm1 == comm2 {
            MPI_IDENT
        } else {
            // Distinct handles are distinct matching spaces: at most congruent.
            match a.compare(&b) {
                rmca::Comparison::Identical | rmca::Comparison::Congruent => MPI_CONGRUENT,
                rmca::Comparison::Similar => MPI_SIMILAR,
                rmca::Comparison::Unequal => MPI_UNEQUAL,
            }
        };
        // SAFETY: the caller's int.
        unsafe { put(result, r, "result") }
    })
}

/// `MPI_Comm_test_inter`.
#[export]
pub unsafe extern "C" fn MPI_Comm_test_inter(comm: Handle, flag: *mut c_int) -> c_int {
    call("MPI_Comm_test_inter", comm, || {
        let inter = communicator(comm)?.is_inter();
        // SAFETY: the caller's int.
        unsafe { put(flag, c_int::from(inter), "flag") }
    })
}

/// `MPI_Comm_set_name`.
#[export]
pub unsafe extern "C" fn MPI_Comm_set_name(comm: Handle, comm_name: *const c_char) -> c_int {
    call("MPI_Comm_set_name", comm, || {
        if comm_name.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the comm_name argument is NULL"));
        }
        // SAFETY: MPI_Comm_set_name's contract: a NUL-terminated string.
        let name = unsafe { std::ffi::CStr::from_ptr(comm_name) };
        let mut name = name.to_string_lossy().into_owned();
        // Names longer than MPI_MAX_OBJECT_NAME - 1 are truncated, as MPI allows.
        while name.len() > MPI_MAX_OBJECT_NAME - 1 {
            name.pop();
        }
        state::with(|s| {
            s.comm_mut(comm)?.name = name;
            Ok(())
        })
    })
}

/// `MPI_Comm_get_name`.
#[export]
pub unsafe extern "C" fn MPI_Comm_get_name(
    comm: Handle,
    comm_name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    call("MPI_Comm_get_name", comm, || {
        // The null handle has its name, as in MPICH and Open MPI (mpi4py asks for it).
        let name = if comm == MPI_COMM_NULL {
            "MPI_COMM_NULL".to_owned()
        } else {
            state::with(|s| Ok(s.comm(comm)?.name.clone()))?
        };
        // SAFETY: the contract: `comm_name` holds MPI_MAX_OBJECT_NAME bytes.
        unsafe { put_string(comm_name, MPI_MAX_OBJECT_NAME, resultlen, &name) }
    })
}

/// `MPI_Comm_get_parent`: `MPI_COMM_NULL`, since rmca starts no processes dynamically
/// (`MPI_Comm_spawn` is refused), and a process not spawned has no parent (MPI-4.1 §11.8.2).
#[export]
pub unsafe extern "C" fn MPI_Comm_get_parent(parent: *mut Handle) -> c_int {
    call("MPI_Comm_get_parent", MPI_COMM_WORLD, || {
        // SAFETY: the caller's handle (null refused by `put`).
        unsafe { put(parent, MPI_COMM_NULL, "parent") }
    })
}
