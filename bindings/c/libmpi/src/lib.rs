//! `libmpi.so`: links rmca-mpi, whose exported MPI functions become this library's. Cargo
//! names a library after its crate, so a second name needs a second crate.

// Referenced so that the crate, and with it every `#[no_mangle]` MPI function, is linked.
pub use mpi_abi::library_version;
