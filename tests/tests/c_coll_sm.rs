//! coll-sm through the C interface (`tests/c/coll_sm.c`): the blocking barrier, bcast, reduce,
//! allreduce, allgather, alltoall, allgatherv, alltoallv, reduce_scatter(_block), gather and
//! scatter coll-sm serves give the bytes of their non-blocking forms (coll-base's schedules;
//! the v-variants with uneven counts, zeros and displacements out of order, and an alltoallv
//! only one member cannot fit; user operations, commutative and not, which coll-sm serves
//! as the predefined ones) for every type, operation,
//! root and sizes around the thresholds, with MPI_IN_PLACE, on the world, a dup and split sub-communicators in turn (several segments at
//! once), back to back with rotating roots, and barriers in order; at 1-4 ranks over ob1+shm
//! and dr+shm, with the default thresholds and with small ones, and oversubscribed (4 ranks
//! on this 2-CPU machine) within the job's timeout; `--mca coll base` leaves coll-sm out.
//! A member killed before or during a collective fails the survivors' call through the
//! communicator's error handler (`tests/c/coll_sm_peer_loss.c`), and a `coll_sm_max_size`
//! beyond its range is refused at init, naming the parameter and the range. Collectives
//! accept `MPI_DATATYPE_NULL` where nothing moves (`tests/c/coll_null.c`).

use rmca_tests::c::{compile, run};
use rmca_tests::{run_job, run_job_with, Job};

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

/// A peer-loss case: the collective, when the victim dies, ranks, MCA settings.
type PeerLoss = (
    &'static str,
    &'static str,
    usize,
    &'static [(&'static str, &'static str)],
);

/// The last rank dies by SIGKILL (`when`: at once, or 300 ms into the survivors' wait) around
/// coll-sm's `op`: every survivor's call returns MPI_ERR_PROC_ABORTED after the
/// communicator's handler ran once, instead of hanging (rmca-run's --timeout would end it).
#[test]
fn a_dead_member_fails_the_survivors_collective_instead_of_hanging() {
    let program = compile("coll_sm_peer_loss", &[]);
    let path = program.to_str().expect("UTF-8 path");
    let cases: &[PeerLoss] = &[
        ("barrier", "before", 3, &[]),
        ("allreduce", "inside", 3, &[]),
        ("bcast", "inside", 3, &[]),
        // Oversubscribed and asleep on the futex while the victim dies.
        ("barrier", "inside", 4, &[("mpi_wait_mode", "block")]),
        ("allreduce", "before", 2, &[("pml", "dr")]),
        ("allgather", "inside", 3, &[]),
        ("alltoall", "inside", 4, &[("mpi_wait_mode", "block")]),
        ("reduce_scatter", "inside", 3, &[]),
        // Only the root of a gather waits: two ranks, the root the one survivor.
        ("gather", "inside", 2, &[]),
        ("scatter", "before", 4, &[("mpi_wait_mode", "block")]),
        // User operations (MPI_Op_create) reach coll-sm as the predefined ones do.
        ("allreduce_user", "inside", 3, &[]),
        ("reduce_user", "inside", 2, &[]),
    ];
    for &(op, when, ranks, mca) in cases {
        let out = run_job_with(
            &Job {
                ranks,
                program: path,
                args: &[op, when],
                mca,
                timeout_s: 60,
            },
            &["--keep-going"],
        );
        // The job's status is the victim's death (128 + SIGKILL); 124 would be the hang.
        assert_eq!(out.code, Some(137), "{op} {when}:\n{}", out.text());
        for r in 0..ranks - 1 {
            let line = out
                .stdout
                .lines()
                .find(|l| l.starts_with(&format!("rank {r}: {op} failed:")))
                .unwrap_or_else(|| {
                    panic!("rank {r} reported nothing ({op} {when}):\n{}", out.text())
                });
            assert!(
                line.contains("class 58, handler calls 1 (class 58)")
                    && line.contains(&format!("communicator rank {} failed", ranks - 1))
                    // Seen by coll-sm's own wait, not by a point-to-point schedule's.
                    && line.contains("coll-sm: its process"),
                "rank {r} ({op} {when}): {line}\n{}",
                out.text()
            );
        }
    }
}

/// `coll_sm_max_size` is at most 64M: a larger value stops the job at init with an error
/// naming the parameter, the value and the valid range (it used to be clamped silently).
#[test]
fn coll_sm_max_size_beyond_its_range_is_refused() {
    let program = compile("coll_sm", &[]);
    let out = run_job(&Job {
        ranks: 2,
        program: program.to_str().expect("UTF-8 path"),
        args: &[],
        mca: &[("coll_sm_max_size", "65M")],
        timeout_s: 60,
    });
    assert!(!out.success(), "{}", out.text());
    assert!(
        out.stderr
            .contains("invalid value '65M' for MCA parameter 'coll_sm_max_size'")
            && out.stderr.contains("0..=64M"),
        "{}",
        out.text()
    );
}

/// Collectives accept `MPI_DATATYPE_NULL` where its count is 0 (every count of that side on
/// the rank, for the v and w forms), as point-to-point does and MPICH does
/// (pmodels/mpich#6323), and still refuse it with data (`tests/c/coll_null.c`): every
/// collective and its non-blocking form, at 1, 2 and 3 ranks in every configuration.
#[test]
fn collectives_accept_the_null_datatype_where_nothing_moves() {
    rmca_tests::c::every_config("coll_null");
}
