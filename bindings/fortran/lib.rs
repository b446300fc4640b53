//! rmca's MPI Fortran interface. The library itself is C and Fortran, built by this crate's
//! build script (build.rs) with the system's C compiler and gfortran into the build's
//! profile directory: `libmpifort.so` next to `libmpi.so`, and `fortran/` with `mpif.h`,
//! `mpi.mod` and `mpi_f08.mod` (where `rmca-fort`/`mpifort` point gfortran's `-I`).
//!
//! The wrappers and the modules are generated from one description of the calls by
//! `gen/generate.py` (see its header); `tests/tests/fortran.rs` regenerates them and fails
//! when the checked-in files differ.

/// The directory, under the profile directory (`target/release`), of `mpif.h` and the
/// module files.
pub const MODULE_SUBDIR: &str = "fortran";

/// The library's file name, in the profile directory.
pub const LIBRARY: &str = "libmpifort.so";

/// Whether the build script built the Fortran interface (false when no Fortran compiler
/// was found; the build printed a warning saying so).
pub const BUILT: bool = option_env!("RMCA_MPIFORT_BUILT").is_some();
