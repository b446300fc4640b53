//! MPI objects are the process's, not a thread's (`tests/c/threads_tables.c`): a datatype, a
//! user op, a group, an info object, an attribute keyval, a window, a matched message and a
//! request made on one thread are used on a second and freed on a third, at
//! `MPI_THREAD_MULTIPLE` (then two threads use them at once) and at `MPI_THREAD_SERIALIZED`;
//! info objects work on other threads before `MPI_Init` and after `MPI_Finalize`; at
//! `MPI_THREAD_FUNNELED` another thread naming the main thread's objects is refused. And the
//! sessions model at `MPI_THREAD_MULTIPLE` (`tests/c/threads_session.c`): a session asking for
//! it with the `thread_level` info key gets it, and its communicators serve threads at once.

use rmca_tests::c::{compile, every_config, run, CONFIGS};

#[test]
fn objects_made_on_one_thread_serve_every_thread_at_multiple() {
    every_config("threads_tables");
}

#[test]
fn objects_made_on_one_thread_serve_the_next_at_serialized() {
    let program = compile("threads_tables", &["-DSERIALIZED"]);
    let area = "threads_tables serialized";
    run(&program, area, 1, "ob1+shm", &[]);
    for (config, mca) in [CONFIGS[0], CONFIGS[2]] {
        run(&program, area, 2, config, mca);
    }
}

#[test]
fn another_thread_at_funneled_is_refused_the_main_threads_objects() {
    let program = compile("threads_tables", &["-DFUNNELED"]);
    run(&program, "threads_tables funneled", 2, "ob1+shm", &[]);
}

#[test]
fn a_session_asking_for_multiple_serves_threads_at_once() {
    every_config("threads_session");
}
