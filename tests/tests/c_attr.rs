//! The MPI C interface's attributes, error handling and environment calls: `tests/c/attr.c`
//! (keyvals, attributes on communicators and datatypes, copy and delete callbacks,
//! `MPI_Finalize`'s order) and `tests/c/errh.c` (the error handler idioms, error classes
//! and codes the program adds, handlers of files, statuses, request status over arrays,
//! communicator info hints, `MPI_Info_create_env`, `MPI_Alloc_mem`, buffer flushes, the ABI
//! queries), each in every configuration.

use rmca_tests::c::every_config;

#[test]
fn attributes_keyvals_and_callbacks() {
    every_config("attr");
}

#[test]
fn error_handlers_codes_statuses_and_environment() {
    every_config("errh");
}
