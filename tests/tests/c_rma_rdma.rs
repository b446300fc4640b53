//! osc-rdma through the MPI C interface: `tests/c/rma.c` (every window flavor, RMA call and
//! synchronization) with `--mca osc rdma` forced, so that no window silently falls back to
//! osc-am, under ob1+shm (CMA) and ob1+rc (soft provider); the merged profile proves the
//! puts and gets moved by RDMA. Under pml dr, which offers no RDMA, forcing osc rdma is
//! refused at window creation with an error that says why (osc-am serves dr's windows, as
//! `c_rma.rs` runs by default); any component forced where it cannot serve gives its own
//! reason.

use rmca_tests::c::compile;
use rmca_tests::{run_job, take_profile, Job};
use serde_json::Value;

fn counter(profile: &Value, name: &str) -> u64 {
    profile["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("profile has no counter {name}: {profile:#}"))
}

#[test]
fn every_call_with_osc_rdma_forced_moves_puts_and_gets_by_rdma() {
    let program = compile("rma", &[]);
    let program = program.to_str().expect("UTF-8 path");
    let configs: [(&str, &[(&str, &str)]); 2] = [
        ("ob1+shm", &[]),
        ("ob1+rc", &[("btl", "rc,self"), ("btl_rc_provider", "soft")]),
    ];
    for (config, extra) in configs {
        for ranks in [1, 2, 3] {
            let json = std::env::temp_dir().join(format!(
                "rmca-osc-rdma-{}-{config}-{ranks}.json",
                std::process::id()
            ));
            let _ = std::fs::remove_file(&json);
            let json_s = json.to_str().expect("UTF-8 temp path").to_owned();
            // Every put and get by RDMA, however small (the default since small_limit is 0;
            // an operation behind a lock request not granted yet goes as a message, a mix
            // tests/tests/c_rma.rs runs too).
            let mut mca: Vec<(&str, &str)> = vec![
                ("osc", "rdma"),
                ("osc_rdma_small_limit", "0"),
                ("profile", "1"),
                ("profile_json", &json_s),
            ];
            mca.extend_from_slice(extra);
            let out = run_job(&Job {
                ranks,
                program,
                args: &[],
                mca: &mca,
                timeout_s: 120,
            });
            assert!(
                out.success() && out.stdout.contains("ok rma:"),
                "rma on {ranks} ranks over {config} with osc rdma failed:\n{}",
                out.text()
            );
            let profile = take_profile(&json, &out);
            for c in ["pml.ob1.osc_rdma_puts", "pml.ob1.osc_rdma_gets"] {
                assert!(
                    counter(&profile, c) > 0,
                    "{c} is 0 over {config} on {ranks} ranks: {profile:#}"
                );
            }
        }
    }
}

#[test]
fn osc_rdma_forced_under_pml_dr_is_refused_saying_why() {
    let program = compile("rma", &[]);
    let out = run_job(&Job {
        ranks: 2,
        program: program.to_str().expect("UTF-8 path"),
        args: &[],
        mca: &[("pml", "dr"), ("osc", "rdma")],
        timeout_s: 60,
    });
    assert!(!out.success(), "{}", out.text());
    assert!(
        out.stderr.contains("MPI_Win_create")
            && out
                .stderr
                .contains("osc rdma: it needs RDMA put and get to every member"),
        "{}",
        out.text()
    );
}

/// The refusal names the component the user forced and its own reason, not another's:
/// osc sm forced on `MPI_Win_create`'s window (memory it did not allocate) says so, under
/// ob1, where osc rdma would have served it, with no word of osc rdma.
#[test]
fn another_component_forced_is_refused_with_its_own_reason() {
    let program = compile("rma", &[]);
    let out = run_job(&Job {
        ranks: 2,
        program: program.to_str().expect("UTF-8 path"),
        args: &[],
        mca: &[("osc", "sm")],
        timeout_s: 60,
    });
    assert!(!out.success(), "{}", out.text());
    assert!(
        out.stderr.contains("MPI_Win_create")
            && out
                .stderr
                .contains("osc sm: it serves only windows whose memory it allocates")
            && out.stderr.contains("osc am, left out by the selection")
            && !out.stderr.contains("osc rdma"),
        "{}",
        out.text()
    );
}
