//! The coll framework's selection and coll-hier across nodes: coll_hier_check (barrier,
//! bcast, reduce, allreduce, blocking and not, every root, commutative and non-commutative
//! operations; allgather and reduce_scatter; against sequential references) on the world and
//! on each node's communicator.
//!
//! - On one node, the world stacks coll-sm over coll-base (coll-hier declines: no hierarchy).
//! - Over two network-namespace nodes (2 x 2 ranks, and 2 + 1), the world stacks
//!   `hier,base`, rank 0's node communicator (2 ranks) `sm,base`, and every result is right; with
//!   `--mca coll base` the world runs coll-base alone.
//! - With `--mca coll hier` alone, what coll-hier does not provide fails on every rank with an
//!   error naming the operation and the components (no crash, no hang); an unknown component
//!   name is refused with the valid ones.

use rmca_tests::{run_job, Job, LossyLink};

fn job<'a>(ranks: usize, args: &'a [&'a str], mca: &'a [(&'a str, &'a str)]) -> Job<'a> {
    Job {
        ranks,
        program: "coll_hier_check",
        args,
        mca,
        timeout_s: 120,
    }
}

fn passed(out: &rmca_tests::JobOutput, ranks: usize) -> bool {
    out.success()
        && out
            .stdout
            .contains(&format!("coll_hier_check: {ranks} ranks"))
        && out.stdout.contains(" 0 failures")
}

#[test]
fn one_node_stacks_sm_over_base() {
    let out = run_job(&job(4, &[], &[]));
    assert!(passed(&out, 4), "{}", out.text());
    assert!(
        out.stdout.contains("stack world: sm,base\n"),
        "{}",
        out.text()
    );
    assert!(
        out.stdout.contains("stack node: sm,base\n"),
        "{}",
        out.text()
    );
}

#[test]
fn unknown_component_is_refused_with_the_valid_names() {
    let out = run_job(&job(2, &[], &[("coll", "heir")]));
    assert!(!out.success(), "{}", out.text());
    let text = out.text();
    assert!(text.contains("heir") && text.contains("hier"), "{text}");
}

#[test]
fn two_nodes_run_hier_under_base() {
    let link = match LossyLink::new(1500, 0.0, 30) {
        Ok(l) => l,
        Err(e) => {
            rmca_test_support::skip_or_fail(format!("needs root, iproute2 and veth: {e}"));
            return;
        }
    };
    // 2 x 2 ranks, and 2 + 1 (uneven: a node with one rank).
    for ranks in [4, 3] {
        let out = link.run_job(&job(ranks, &[], &[]));
        assert!(passed(&out, ranks), "{ranks} ranks: {}", out.text());
        assert!(
            out.stdout.contains("stack world: hier,base\n"),
            "{}",
            out.text()
        );
        assert!(
            out.stdout.contains("stack node: sm,base\n"),
            "{}",
            out.text()
        );
    }
    let out = link.run_job(&job(4, &[], &[("coll", "base")]));
    assert!(passed(&out, 4), "coll base: {}", out.text());
    assert!(out.stdout.contains("stack world: base\n"), "{}", out.text());
    let out = link.run_job(&job(4, &["--only-hier"], &[("coll", "hier")]));
    assert!(passed(&out, 4), "coll hier: {}", out.text());
    assert!(out.stdout.contains("stack world: hier\n"), "{}", out.text());
}
