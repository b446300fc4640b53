//! The C library's fast path for small collectives (`tests/c/coll_fast.c`): `MPI_Allreduce`,
//! `MPI_Reduce` and `MPI_Bcast` (and the `_c` forms) on every predefined arithmetic,
//! logical and bitwise operation over several predefined types, in place and not, at every
//! root, either side of the in-place stack limit, on misaligned buffers (the general path),
//! and bad input refused with its error class, at 1, 2 and 3 ranks in every configuration.

use rmca_tests::c::every_config;

#[test]
fn small_collectives_fast_path_and_its_fallbacks() {
    every_config("coll_fast");
}
