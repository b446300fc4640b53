//! MPI programs run under valgrind, as users run them to debug their own code:
//! `rmca-run -n 2 valgrind ./prog`. Valgrind reserves the last real-time signals, which rmca-run
//! names as its ranks' launcher-death signal: a rank that cannot handle it must still run (and
//! say what it loses), not fail `MPI_Init`. Memcheck must find no error in libmpi's common paths
//! (initialization, a collective, point-to-point with a derived datatype, finalization), with
//! the suppressions rmca ships for its known false reports (`bindings/c/valgrind.supp`).

use std::path::Path;

use rmca_test_support::skip_or_fail;
use rmca_tests::{c, run_job, workspace_root, Job};

#[test]
fn a_job_runs_under_memcheck_with_no_error() {
    let valgrind = Path::new("/usr/bin/valgrind");
    if !valgrind.exists() {
        skip_or_fail("needs valgrind (Debian package valgrind, in scripts/install-deps.sh)");
        return;
    }
    let program = c::compile("under_valgrind", &[]);
    let supp = workspace_root().join("bindings/c/valgrind.supp");
    let supp_arg = format!("--suppressions={}", supp.display());
    let args = [
        "-q",
        "--error-exitcode=3",
        supp_arg.as_str(),
        program.to_str().expect("UTF-8 path"),
    ];
    for config in [&[][..], &[("pml", "dr")][..]] {
        let out = run_job(&Job {
            ranks: 2,
            program: valgrind.to_str().expect("UTF-8 path"),
            args: &args,
            mca: config,
            timeout_s: 240,
        });
        assert!(
            out.success() && out.stdout.matches("ok under_valgrind:").count() == 2,
            "under valgrind with {config:?}:\n{}",
            out.text()
        );
        assert!(
            out.stderr.contains("launcher death"),
            "the lost cleanup is reported:\n{}",
            out.text()
        );
    }
}
