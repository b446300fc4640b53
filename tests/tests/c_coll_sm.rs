//! coll-sm through the C interface (`tests/c/coll_sm.c`): the blocking barrier, bcast, reduce
//! and allreduce coll-sm serves give the bytes of their non-blocking forms (coll-base's
//! schedules) for every type, operation, root and sizes around the thresholds, with
//! MPI_IN_PLACE, on the world, a dup and split sub-communicators in turn (several segments at
//! once), back to back with rotating roots, and barriers in order; at 1-4 ranks over ob1+shm
//! and dr+shm, with the default thresholds and with small ones, and oversubscribed (4 ranks
//! on this 2-CPU machine) within the job's timeout; `--mca coll base` leaves coll-sm out.

use rmca_tests::c::{compile, run};
use rmca_tests::{run_job, Job};

/// Small thresholds, so that the switches (split combining, fall-through) happen at sizes
/// the program checks on both sides.
const SMALL: &[(&str, &str)] = &[("coll_sm_max_size", "1k"), ("coll_sm_split_size", "256")];

#[test]
fn coll_sm_matches_coll_base() {
    let program = compile("coll_sm", &[]);
    for ranks in 1..=4 {
        run(&program, "coll_sm", ranks, "ob1+shm", &[]);
        run(&program, "coll_sm", ranks, "dr+shm", &[("pml", "dr")]);
    }
    for ranks in [2, 3, 4] {
        run(
            &program,
            "coll_sm",
            ranks,
            "ob1+shm, small thresholds",
            SMALL,
        );
    }
    run(
        &program,
        "coll_sm",
        4,
        "dr+shm, small thresholds",
        &[SMALL, &[("pml", "dr")]].concat(),
    );
    // Every wait mode that gives up the CPU (spin with more ranks than CPUs crawls for every
    // collective component alike).
    for mode in ["yield", "block"] {
        run(&program, "coll_sm", 4, mode, &[("mpi_wait_mode", mode)]);
    }
}

/// The world of a job on one node maps a coll-sm segment (its debug log says so), and a
/// job with `--mca coll base` does not.
#[test]
fn coll_sm_serves_one_node_unless_excluded() {
    let program = compile("coll_sm", &[]);
    let path = program.to_str().expect("UTF-8 path");
    // Inherited by rmca-run and its ranks (other tests of this binary only log more).
    std::env::set_var("RMCA_LOG", "rmca_coll_sm=debug");
    let job = |mca: &[(&str, &str)]| {
        run_job(&Job {
            ranks: 2,
            program: path,
            args: &[],
            mca,
            timeout_s: 60,
        })
    };
    let (sm, base) = (job(&[]), job(&[("coll", "base")]));
    std::env::remove_var("RMCA_LOG");
    for out in [&sm, &base] {
        assert!(
            out.success() && out.stdout.contains("ok coll_sm:"),
            "{}",
            out.text()
        );
    }
    assert!(
        sm.stderr.contains("coll-sm: segment mapped"),
        "{}",
        sm.text()
    );
    assert!(!base.stderr.contains("coll-sm"), "{}", base.text());
}

/// The Rust API's collectives against sequential references (`rmca/examples/coll_check.rs`,
/// non-commutative user operations included, which coll-sm combines in rank order) under the
/// default stack, coll-sm over coll-base.
#[test]
fn coll_check_under_the_default_stack() {
    for n in 2..=4 {
        let out = run_job(&Job {
            ranks: n,
            program: "coll_check",
            args: &[],
            mca: &[],
            timeout_s: 120,
        });
        assert!(
            out.success()
                && out.stdout.contains(&format!("coll_check: {n} ranks"))
                && out.stdout.contains(" 0 failures")
                && !out.stdout.contains("FAIL"),
            "coll_check on {n} ranks:\n{}",
            out.text()
        );
    }
}
