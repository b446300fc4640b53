//! rmca's MPI library for C: the MPI functions over the rmca runtime, with the MPI 5.0
//! standard ABI (handles, constants and `MPI_Status` as the standard publishes them), so that
//! a program built against any standard-ABI `mpi.h` runs on rmca without recompiling.
//!
//! The crate builds `libmpi_abi.so` (the name the standard ABI gives the library); the crate
//! `rmca-mpi-lib` links the same code as `libmpi.so` for programs compiled with rmca's own
//! `include/mpi.h` and `rmca-cc`. Every MCA parameter applies, as for Rust programs.
//!
//! Errors go through the communicator's error handler: `MPI_ERRORS_ARE_FATAL` (the default)
//! prints what was wrong and aborts the job; `MPI_ERRORS_RETURN` returns the error class.
//! Error codes are their classes; `MPI_Error_string` adds the detail of the last such error.
#![deny(unsafe_code)]

pub mod abi;
pub mod dtype;
pub mod ffi;
pub mod handoff;
pub mod progress_thread;
pub mod state;

pub use ffi::env::library_version;
