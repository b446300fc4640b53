//! The MPI C interface (crate rmca-mpi): the C programs of `tests/c`, compiled with the
//! `mpicc` wrapper, run under rmca-run in every configuration. Each program checks its own
//! results and prints `ok <area>` on rank 0.
//!
//! | program | area |
//! |---|---|
//! | `env.c` | init/finalize, versions, time, names, communicators, attributes, error handlers |
//! | `p2p.c` | send modes, receives, probes, exchanges, wait/test families, persistent requests |
//! | `coll.c` | the collectives on predefined types and operations, `MPI_IN_PLACE` |
//! | `dtype.c` | derived datatypes: constructors, queries, every send mode, exchanges, collectives, bad input |
//! | `vcoll.c` | v-collectives, reduce-scatter, scans, `MPI_IN_PLACE`, user operations, MINLOC/MAXLOC pairs, bad input |
//! | `group.c` | groups, `Comm_create`, `Comm_compare`, `Cancel`/`Test_cancelled`, bad input |
//! | `errors.c` | bad input under `MPI_ERRORS_RETURN` (the classes) and the fatal default |
//! | `pack.c` | `Pack`/`Unpack`/`Pack_size` (and `MPI_PACKED` messages), `Type_dup`, indexed blocks, `Alltoallw`, bad input |
//! | `info.c` | `MPI_Info` objects (and a window's hints) |
//! | `nbc.c` | non-blocking collectives: every root, `MPI_IN_PLACE`, derived datatypes, user operations, every completion call (mixed with point-to-point), `Request_free`, bad input |

use std::process::Command;

use rmca_tests::c::{compile, every_config, run};
use rmca_tests::{run_job, Job};

#[test]
fn environment_communicators_and_error_handlers() {
    every_config("env");
}

#[test]
fn point_to_point() {
    every_config("p2p");
}

#[test]
fn collectives() {
    every_config("coll");
}

#[test]
fn derived_datatypes() {
    every_config("dtype");
}

#[test]
fn varying_collectives_scans_and_operations() {
    every_config("vcoll");
}

#[test]
fn groups_communicators_from_groups_and_cancel() {
    every_config("group");
}

#[test]
fn non_blocking_collectives() {
    every_config("nbc");
    // Four ranks: a power of two takes other algorithms (recursive doubling) than 3.
    run(&compile("nbc", &[]), "nbc", 4, "ob1+shm", &[]);
}

#[test]
fn pack_type_dup_indexed_blocks_and_alltoallw() {
    every_config("pack");
}

#[test]
fn info_objects_and_window_hints() {
    // Local calls only: one transport is enough.
    let program = compile("info", &[]);
    for ranks in [1, 2] {
        run(&program, "info", ranks, "ob1+shm", &[]);
    }
}

#[test]
fn bad_input_returns_its_error_class() {
    every_config("errors");
}

#[test]
fn the_standard_abi_library_runs_the_same_program() {
    // Linked against libmpi_abi.so, the name the standard ABI gives the library.
    let program = compile("errors", &["-abi"]);
    let ldd = Command::new("ldd").arg(&program).output().expect("run ldd");
    let deps = String::from_utf8_lossy(&ldd.stdout);
    assert!(
        deps.contains("libmpi_abi.so") && !deps.contains("libmpi.so"),
        "{deps}"
    );
    run(&program, "errors", 2, "ob1+shm", &[]);
}

#[test]
fn c_programs_run_under_mpich_hydra() {
    let Some(hydra) = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("mpiexec.hydra"))
            .find(|f| f.is_file())
    }) else {
        rmca_test_support::skip_or_fail("mpiexec.hydra is not installed (Debian package mpich)");
        return;
    };
    let program = compile("coll", &[]);
    for (pmi, ranks) in [("pmi1", "3"), ("pmi2", "2")] {
        let out = Command::new(&hydra)
            .args(["-n", ranks])
            .arg(&program)
            .env("RMCA_PMI", pmi)
            .output()
            .expect("run mpiexec.hydra");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("ok coll:"),
            "{pmi}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn errors_are_fatal_by_default_and_name_the_call_and_class() {
    let program = compile("errors", &[]);
    let out = run_job(&Job {
        ranks: 2,
        program: program.to_str().expect("UTF-8 path"),
        args: &["fatal"],
        mca: &[],
        timeout_s: 60,
    });
    assert!(!out.success(), "{}", out.text());
    assert!(!out.stdout.contains("still alive"), "{}", out.text());
    assert!(
        out.stderr
            .contains("MPI_Send: destination rank 5 is invalid")
            && out.stderr.contains("MPI_ERR_RANK"),
        "{}",
        out.text()
    );
}
