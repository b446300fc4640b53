//! Buffers for buffered sends attached to a communicator or a session, and
//! `MPI_Comm_get_parent` (`tests/c/buffers.c`): which buffer a send takes (the
//! communicator's, its session's, the process's), detach/flush/iflush waiting for the sends
//! in flight, `MPI_BUFFER_AUTOMATIC`, the implicit detach at free and session finalize, bad
//! input.

use rmca_tests::c::every_config;

#[test]
fn communicator_and_session_buffers() {
    every_config("buffers");
}
