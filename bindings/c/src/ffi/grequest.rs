//! Generalized requests: `MPI_Grequest_start`, `MPI_Grequest_complete`.
//!
//! A generalized request is an operation the program runs itself and completes with
//! `MPI_Grequest_complete`; the library's completion calls (`MPI_Wait`, `MPI_Test`, the
//! `all`/`any`/`some` families, mixed with any other requests) report it. When a completion
//! call finds it complete, it calls the program's `query_fn` (which fills the status) and
//! then its `free_fn`; `MPI_Cancel` calls its `cancel_fn` with whether it completed.
//!
//! The callbacks run inside the completion call, with the library state in use: they may
//! fill their status (directly or with the status calls that touch no MPI object) but not
//! call other MPI functions, which are refused there (as from an error handler).
#![allow(non_snake_case)]

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::rc::Rc;

use rmca::raw;

use super::{call, empty_status, put};
use crate::abi::*;
use crate::state::{self, Confined, MpiError, ReqEntry, ReqState};
use rmca_mpi_export::export;

/// `MPI_Grequest_query_function`.
pub type QueryFn = unsafe extern "C" fn(extra_state: *mut c_void, status: *mut MpiStatus) -> c_int;
/// `MPI_Grequest_free_function`.
pub type FreeFn = unsafe extern "C" fn(extra_state: *mut c_void) -> c_int;
/// `MPI_Grequest_cancel_function`.
pub type CancelFn = unsafe extern "C" fn(extra_state: *mut c_void, complete: c_int) -> c_int;

/// The completion flag of each generalized request not yet completed by the program, by
/// request handle (process-wide: see [`Confined`]; `MPI_Grequest_complete` may come from
/// another thread than `MPI_Grequest_start`). Reached through this table, not the request
/// entry: the program may free the request before completing it.
static PENDING: Confined<HashMap<Handle, Rc<Cell<bool>>>> = Confined::new("generalized requests");

/// A generalized request's operation.
#[derive(Debug)]
struct Greq {
    query: Option<QueryFn>,
    free: Option<FreeFn>,
    cancel: Option<CancelFn>,
    extra: *mut c_void,
    complete: Rc<Cell<bool>>,
}

/// The error of a callback that returned `code`: the completion call (or `MPI_Cancel`)
/// returns that code, as MPI specifies (in the status's `MPI_ERROR`, with
/// `MPI_ERR_IN_STATUS`, from the calls that complete several requests).
fn callback_failed(what: &str, code: c_int) -> rmca::Error {
    rmca::Error::Code {
        code,
        message: format!("the generalized request's {what} returned error {code}"),
    }
}

impl Greq {
    /// Call the free function (once) of a request the program freed: no completion call
    /// will query it.
    fn release(&mut self) {
        if let Some(f) = self.free.take() {
            // SAFETY: the program's MPI_Grequest_free_function, called once.
            let code = unsafe { f(self.extra) };
            if code != MPI_SUCCESS {
                tracing::warn!("a freed generalized request's free function returned {code}");
            }
        }
    }
}

impl raw::CustomOp for Greq {
    fn poll(&mut self) -> Option<rmca::Result<rmca::Status>> {
        if !self.complete.get() {
            return None;
        }
        let mut st = empty_status();
        st.source = MPI_ANY_SOURCE;
        let mut code = MPI_SUCCESS;
        if let Some(q) = self.query {
            // SAFETY: the program's MPI_Grequest_query_function, called with its extra
            // state and a status to fill, as MPI_Grequest_start's contract says.
            code = unsafe { q(self.extra, &mut st) };
        }
        let mut freed = MPI_SUCCESS;
        if let Some(f) = self.free.take() {
            // SAFETY: the program's MPI_Grequest_free_function, called once, after the query.
            freed = unsafe { f(self.extra) };
        }
        Some(if code != MPI_SUCCESS {
            Err(callback_failed("query function", code))
        } else if freed != MPI_SUCCESS {
            Err(callback_failed("free function", freed))
        } else {
            Ok(rmca::Status {
                // The source comes back as it was set (`to_mpi_status` truncates to a C int):
                // MPI_ANY_SOURCE (the default) through 32 bits, not as usize::MAX, which is
                // rmca's MPI_PROC_NULL.
                source: if st.source == MPI_PROC_NULL {
                    rmca::Status::PROC_NULL_SOURCE
                } else {
                    st.source as u32 as usize
                },
                tag: st.tag,
                bytes: st.bytes() as usize,
                cancelled: st.internal[2] != 0,
            })
        })
    }

    fn cancel(&mut self) -> rmca::Result<bool> {
        if let Some(c) = self.cancel {
            // SAFETY: the program's MPI_Grequest_cancel_function, with its extra state and
            // whether the request completed.
            let code = unsafe { c(self.extra, c_int::from(self.complete.get())) };
            if code != MPI_SUCCESS {
                return Err(callback_failed("cancel function", code));
            }
        }
        Ok(false)
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// `MPI_Grequest_start`: a request the program completes with `MPI_Grequest_complete`.
#[export]
pub unsafe extern "C" fn MPI_Grequest_start(
    query_fn: Option<QueryFn>,
    free_fn: Option<FreeFn>,
    cancel_fn: Option<CancelFn>,
    extra_state: *mut c_void,
    request: *mut Handle,
) -> c_int {
    call("MPI_Grequest_start", MPI_COMM_WORLD, || {
        if request.is_null() {
            return Err(super::null_argument("request"));
        }
        let complete = Rc::new(Cell::new(false));
        let op = Greq {
            query: query_fn,
            free: free_fn,
            cancel: cancel_fn,
            extra: extra_state,
            complete: complete.clone(),
        };
        let h = state::with(|s| {
            let world = s.comm(MPI_COMM_WORLD)?.comm.clone();
            let r = raw::custom(&world, Box::new(op));
            s.add_request(ReqEntry::new(MPI_COMM_WORLD, ReqState::Active(r)))
        })?;
        PENDING.with(|p| p.insert(h, complete))?;
        // SAFETY: the caller's request handle (non-null, checked).
        unsafe { put(request, h, "request") }
    })
}

/// `MPI_Grequest_complete`: the program's operation behind generalized request `request`
/// is done; the completion calls now report it.
#[export]
pub unsafe extern "C" fn MPI_Grequest_complete(request: Handle) -> c_int {
    call("MPI_Grequest_complete", MPI_COMM_WORLD, || {
        // Only the thread that initialized MPI reaches the table.
        state::with(|_| Ok(()))?;
        match PENDING.with(|p| p.remove(&request))? {
            Some(flag) => {
                flag.set(true);
                // Freed by MPI_Request_free before it completed: its free function is called
                // now (MPI: by whichever of the two calls comes last).
                state::with(|s| {
                    let mut kept = Vec::with_capacity(s.detached.len());
                    for mut r in std::mem::take(&mut s.detached) {
                        match r
                            .custom_mut()
                            .and_then(|op| op.as_any_mut().downcast_mut::<Greq>())
                        {
                            Some(g) if Rc::ptr_eq(&g.complete, &flag) => g.release(),
                            _ => kept.push(r),
                        }
                    }
                    s.detached = kept;
                    Ok(())
                })
            }
            None => Err(MpiError::new(
                MPI_ERR_REQUEST,
                format!("invalid request {request:#x}: not a generalized request (MPI_Grequest_start) that is not yet completed"),
            )),
        }
    })
}
