//! The MPI 5.0 standard ABI (version 1.0) as Rust sees it: handle representations, constant
//! values and the `MPI_Status` layout. The values are those the standard publishes (MPICH's
//! `src/binding/abi/mpi_abi.h` is a public copy of them); `include/mpi.h` states the same
//! values for C, and the C tests check that both agree.
//!
//! Handles are pointers to incomplete structs in C. Every platform rmca runs on passes a
//! pointer and a `usize` the same way, so handles cross the boundary as [`Handle`] (`usize`):
//! the predefined ones are small integers, the ones rmca creates are indices above
//! [`DYNAMIC_BASE`].
#![allow(missing_docs)]

use std::ffi::c_int;

/// An MPI handle (`MPI_Comm`, `MPI_Datatype`, ...), as the pointer value C passes.
pub type Handle = usize;

pub const MPI_VERSION: c_int = 5;
pub const MPI_SUBVERSION: c_int = 0;
pub const MPI_ABI_VERSION: c_int = 1;
pub const MPI_ABI_SUBVERSION: c_int = 0;

/// `MPI_Status`: three public fields and five ints for the implementation. rmca keeps the
/// received byte count in `internal[0..2]` (low, high) and the cancelled flag in `internal[2]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MpiStatus {
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
    pub internal: [c_int; 5],
}

impl MpiStatus {
    /// The byte count stored in the status.
    pub fn bytes(&self) -> u64 {
        u64::from(self.internal[0] as u32) | (u64::from(self.internal[1] as u32) << 32)
    }

    /// Store `bytes` as the count.
    pub fn set_bytes(&mut self, bytes: u64) {
        self.internal[0] = bytes as u32 as c_int;
        self.internal[1] = (bytes >> 32) as u32 as c_int;
    }
}

// Operations.
pub const MPI_OP_NULL: Handle = 0x20;
pub const MPI_SUM: Handle = 0x21;
pub const MPI_MIN: Handle = 0x22;
pub const MPI_MAX: Handle = 0x23;
pub const MPI_PROD: Handle = 0x24;
pub const MPI_BAND: Handle = 0x28;
pub const MPI_BOR: Handle = 0x29;
pub const MPI_BXOR: Handle = 0x2a;
pub const MPI_LAND: Handle = 0x30;
pub const MPI_LOR: Handle = 0x31;
pub const MPI_LXOR: Handle = 0x32;
pub const MPI_MINLOC: Handle = 0x38;
pub const MPI_MAXLOC: Handle = 0x39;
pub const MPI_REPLACE: Handle = 0x3c;
pub const MPI_NO_OP: Handle = 0x3d;

// Communicators, groups and other objects.
pub const MPI_COMM_NULL: Handle = 0x100;
pub const MPI_COMM_WORLD: Handle = 0x101;
pub const MPI_COMM_SELF: Handle = 0x102;
pub const MPI_INFO_NULL: Handle = 0x130;
pub const MPI_INFO_ENV: Handle = 0x131;
pub const MPI_ERRHANDLER_NULL: Handle = 0x140;
pub const MPI_ERRORS_ARE_FATAL: Handle = 0x141;
pub const MPI_ERRORS_ABORT: Handle = 0x142;
pub const MPI_ERRORS_RETURN: Handle = 0x143;
pub const MPI_REQUEST_NULL: Handle = 0x180;
pub const MPI_DATATYPE_NULL: Handle = 0x200;

/// Handles rmca creates (communicators, requests, error handlers) are this plus an index:
/// far above the range the standard reserves for predefined handles.
pub const DYNAMIC_BASE: Handle = 0x1_0000;

// Error classes.
pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ERR_BUFFER: c_int = 1;
pub const MPI_ERR_COUNT: c_int = 2;
pub const MPI_ERR_TYPE: c_int = 3;
pub const MPI_ERR_TAG: c_int = 4;
pub const MPI_ERR_COMM: c_int = 5;
pub const MPI_ERR_RANK: c_int = 6;
pub const MPI_ERR_REQUEST: c_int = 7;
pub const MPI_ERR_ROOT: c_int = 8;
pub const MPI_ERR_GROUP: c_int = 9;
pub const MPI_ERR_OP: c_int = 10;
pub const MPI_ERR_TOPOLOGY: c_int = 11;
pub const MPI_ERR_DIMS: c_int = 12;
pub const MPI_ERR_ARG: c_int = 13;
pub const MPI_ERR_UNKNOWN: c_int = 14;
pub const MPI_ERR_TRUNCATE: c_int = 15;
pub const MPI_ERR_OTHER: c_int = 16;
pub const MPI_ERR_INTERN: c_int = 17;
pub const MPI_ERR_PENDING: c_int = 18;
pub const MPI_ERR_IN_STATUS: c_int = 19;
pub const MPI_ERR_KEYVAL: c_int = 36;
pub const MPI_ERR_NO_MEM: c_int = 39;
pub const MPI_ERR_UNSUPPORTED_OPERATION: c_int = 55;
pub const MPI_ERR_PROC_ABORTED: c_int = 58;
pub const MPI_ERR_VALUE_TOO_LARGE: c_int = 59;
pub const MPI_ERR_ERRHANDLER: c_int = 61;
pub const MPI_ERR_ABI: c_int = 62;
pub const MPI_ERR_LASTCODE: c_int = 16383;

// Sentinels.
pub const MPI_ANY_SOURCE: c_int = -1;
pub const MPI_ANY_TAG: c_int = -2;
pub const MPI_PROC_NULL: c_int = -3;
pub const MPI_ROOT: c_int = -4;
pub const MPI_UNDEFINED: c_int = -32766;

/// `MPI_IN_PLACE`.
pub const MPI_IN_PLACE: usize = 1;

pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_FUNNELED: c_int = 1024;
pub const MPI_THREAD_SERIALIZED: c_int = 2048;
pub const MPI_THREAD_MULTIPLE: c_int = 4096;

pub const MPI_IDENT: c_int = 201;
pub const MPI_CONGRUENT: c_int = 202;
pub const MPI_SIMILAR: c_int = 203;
pub const MPI_UNEQUAL: c_int = 204;

// Predefined communicator attribute keys.
pub const MPI_KEYVAL_INVALID: c_int = 0;
pub const MPI_TAG_UB: c_int = 501;
pub const MPI_IO: c_int = 502;
pub const MPI_HOST: c_int = 503;
pub const MPI_WTIME_IS_GLOBAL: c_int = 504;
pub const MPI_APPNUM: c_int = 505;
pub const MPI_LASTUSEDCODE: c_int = 506;
pub const MPI_UNIVERSE_SIZE: c_int = 507;

// One-sided communication: error classes, lock types, assertion modes, window flavors and
// models, and the predefined window attributes.
pub const MPI_WIN_NULL: Handle = 0x110;
pub const MPI_ERR_LOCKTYPE: c_int = 37;
pub const MPI_ERR_RMA_ATTACH: c_int = 46;
pub const MPI_ERR_RMA_RANGE: c_int = 48;
pub const MPI_ERR_RMA_SHARED: c_int = 49;
pub const MPI_ERR_RMA_SYNC: c_int = 50;
pub const MPI_ERR_RMA_FLAVOR: c_int = 57;
pub const MPI_LOCK_EXCLUSIVE: c_int = 301;
pub const MPI_LOCK_SHARED: c_int = 302;
pub const MPI_MODE_NOCHECK: c_int = 1024;
pub const MPI_MODE_NOSUCCEED: c_int = 16384;
pub const MPI_WIN_FLAVOR_CREATE: c_int = 311;
pub const MPI_WIN_FLAVOR_ALLOCATE: c_int = 312;
pub const MPI_WIN_FLAVOR_DYNAMIC: c_int = 313;
pub const MPI_WIN_FLAVOR_SHARED: c_int = 314;
pub const MPI_WIN_UNIFIED: c_int = 321;
pub const MPI_WIN_BASE: c_int = 601;
pub const MPI_WIN_DISP_UNIT: c_int = 602;
pub const MPI_WIN_SIZE: c_int = 603;
pub const MPI_WIN_CREATE_FLAVOR: c_int = 604;
pub const MPI_WIN_MODEL: c_int = 605;

// String sizes.
pub const MPI_MAX_ERROR_STRING: usize = 512;
pub const MPI_MAX_LIBRARY_VERSION_STRING: usize = 8192;
pub const MPI_MAX_OBJECT_NAME: usize = 128;
pub const MPI_MAX_PROCESSOR_NAME: usize = 256;
pub const MPI_BSEND_OVERHEAD: usize = 512;

/// `MPI_Aint`: an address-sized signed integer (C's `intptr_t`).
#[allow(non_camel_case_types)]
pub type MPI_Aint = isize;
/// `MPI_Count`: a 64-bit signed count.
#[allow(non_camel_case_types)]
pub type MPI_Count = i64;
/// `MPI_Offset`: a 64-bit signed file offset.
#[allow(non_camel_case_types)]
pub type MPI_Offset = i64;
