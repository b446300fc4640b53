//! Job-wide MCA parameters (declared with `Param::job_wide`, e.g. the collective algorithms):
//! ranks started with different values refuse to run, naming the parameter, ranks and values,
//! instead of running mismatched protocols into a hang.

use std::process::Command;

use rmca_tests::release_bin;

#[test]
fn ranks_with_different_collective_algorithms_fail_init_clearly() {
    let hello = release_bin("hello");
    // Only rank 1 gets the setting: through its environment, as a per-node config would.
    let script = format!(
        "if [ \"$PMI_RANK\" = 1 ]; then export RMCA_MCA_coll_bcast_algorithm=linear; fi; exec {}",
        hello.display()
    );
    let out = Command::new(release_bin("rmca-run"))
        .args(["-n", "2", "--timeout", "60", "sh", "-c", &script])
        .env_remove("RMCA_MCA_coll_bcast_algorithm")
        .output()
        .expect("spawn rmca-run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_ne!(
        out.status.code(),
        Some(124),
        "a hang, not an error: {stderr}"
    );
    assert!(
        stderr.contains("coll_bcast_algorithm: rank 0 has auto, rank 1 has linear")
            || stderr.contains("coll_bcast_algorithm: rank 1 has linear, rank 0 has auto"),
        "{stderr}"
    );
    // The same value everywhere is fine.
    let out = Command::new(release_bin("rmca-run"))
        .args([
            "-n",
            "2",
            "--timeout",
            "60",
            "--mca",
            "coll_bcast_algorithm",
            "linear",
        ])
        .arg(&hello)
        .output()
        .expect("spawn rmca-run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
