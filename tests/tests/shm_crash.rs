//! Shared-memory cleanup after a crash (issue 4): a rank of a real job is killed by SIGKILL
//! mid-job, after btl shm created and used its segments; once rmca-run returns, no
//! `/dev/shm/rmca-<job>-*` file is left.

use rmca_tests::{run_job, Job};

/// Runs `shm_crash` and returns the job's shm prefix and the segment count rank 0 saw.
fn crash(ranks: usize, mca: &[(&str, &str)]) -> (String, usize) {
    let mut all = vec![("btl", "shm,self"), ("pml", "ob1")];
    all.extend_from_slice(mca);
    let out = run_job(&Job {
        ranks,
        program: "shm_crash",
        args: &[],
        mca: &all,
        timeout_s: 120,
    });
    assert!(
        !out.success(),
        "a killed rank must fail the job\n{}",
        out.text()
    );
    assert!(
        out.stderr.contains("killed by signal 9"),
        "the launcher should report the SIGKILL\n{}",
        out.text()
    );
    let field = |k: &str| -> String {
        out.stdout
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("no {k:?} line\n{}", out.text()))
            .trim()
            .to_owned()
    };
    let prefix = field("prefix ");
    let segments = field("segments ").parse().expect("segment count");
    assert!(prefix.starts_with("rmca-") && prefix.len() > 6, "{prefix}");
    (prefix, segments)
}

fn leftovers(prefix: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

#[test]
fn launcher_removes_segments_of_a_killed_job() {
    // Segments kept linked until finalize: at the kill every rank's segment exists (rank 0
    // counted them), and no rank finalizes, so only rmca-run can remove them.
    let ranks = 3;
    let (prefix, segments) = crash(ranks, &[("btl_shm_early_unlink", "0")]);
    assert_eq!(
        segments, ranks,
        "every rank's segment exists before the kill"
    );
    let left = leftovers(&prefix);
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}

#[test]
fn default_early_unlink_leaves_nothing_either() {
    // By default the owners unlink their segments once mapped: nothing to clean up at the kill.
    let (prefix, segments) = crash(2, &[]);
    assert_eq!(
        segments, 0,
        "segments are unlinked once every peer mapped them"
    );
    assert!(leftovers(&prefix).is_empty());
}
