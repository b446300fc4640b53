//! Conformance gaps MPICH's test suite and mpi4py found, through the C interface
//! (`tests/c/misc2.c`): `MPI_MAX`/`MIN`/`SUM`/`PROD` on `MPI_LONG_DOUBLE` and sums and
//! products on every complex type, each compared bit for bit with the C compiler's own
//! arithmetic (`MPI_Reduce_local`, blocking, non-blocking and persistent collectives);
//! generalized requests (the status a query function leaves alone, callback error codes
//! returned as they are, `MPI_ERR_IN_STATUS`); added error classes above
//! `MPI_ERR_LASTCODE`; `MPI_DATATYPE_NULL` an empty message with a count of 0, refused with
//! `MPI_ERR_TYPE` with data; every form of
//! `MPI_Alltoallw` on `MPI_BOTTOM`; `MPI_Comm_split_type` with
//! `MPI_COMM_TYPE_RESOURCE_GUIDED`; at 1, 2 and 3 ranks in every configuration.

use rmca_tests::c::every_config;

#[test]
fn long_double_complex_grequest_bottom_and_split_type() {
    every_config("misc2");
}
