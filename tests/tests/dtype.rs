//! Derived datatypes in real jobs: `rmca/examples/dtype_check.rs` (strided columns, a
//! transposition, structs into another layout, indexed triangles, halos with PROC_NULL,
//! truncation, refused layouts, typed collectives, all against serial results) on every
//! PML/BTL configuration at 1 to 4 ranks, one job each. The job profile proves which PML and
//! BTLs carried it.

use std::sync::atomic::{AtomicU32, Ordering};

use rmca_tests::{run_job, take_profile, Job};

fn dtype_check(config: &str, pml: &str, btls: &[&str], mca: &[(&str, &str)]) {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    for n in 1..=4 {
        let json = std::env::temp_dir().join(format!(
            "rmca-dtype-profile-{}-{}.json",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let json_s = json.to_str().expect("utf-8 temp path").to_owned();
        let mut all = mca.to_vec();
        all.push(("profile", "1"));
        all.push(("profile_json", &json_s));
        let out = run_job(&Job {
            ranks: n,
            program: "dtype_check",
            args: &[],
            mca: &all,
            timeout_s: 120,
        });
        let summary = format!("dtype_check: {n} ranks,");
        assert!(
            out.success()
                && out.stdout.contains(&summary)
                && out.stdout.contains(" 0 failures")
                && !out.stdout.contains("FAIL"),
            "dtype_check over {config} on {n} ranks failed:\n{}",
            out.text()
        );
        let profile = take_profile(&json, &out);
        assert_eq!(profile["pml"], pml, "{config}, {n} ranks: {profile:#}");
        // One rank reaches only itself: only `self` is in use then.
        let want: Vec<&str> = if n == 1 { vec!["self"] } else { btls.to_vec() };
        for btl in want {
            assert!(
                profile["btls"]
                    .as_array()
                    .is_some_and(|b| b.iter().any(|x| x == btl)),
                "{config}, {n} ranks: btl {btl} not selected: {profile:#}"
            );
        }
    }
}

#[test]
fn datatypes_over_ob1_shm() {
    dtype_check("ob1+shm", "ob1", &["shm", "self"], &[]);
}

#[test]
fn datatypes_over_dr_shm() {
    dtype_check("dr+shm", "dr", &["shm", "self"], &[("pml", "dr")]);
}

#[test]
fn datatypes_over_dr_ud() {
    dtype_check(
        "dr+ud",
        "dr",
        &["ud", "self"],
        &[
            ("pml", "dr"),
            ("btl", "ud,self"),
            ("btl_ud_provider", "soft"),
        ],
    );
}

#[test]
fn datatypes_over_ob1_rc() {
    dtype_check(
        "ob1+rc",
        "ob1",
        &["rc", "self"],
        &[("btl", "rc,self"), ("btl_rc_provider", "soft")],
    );
}
