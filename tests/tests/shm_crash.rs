//! Shared-memory cleanup after a crash: a rank of a real job is killed by SIGKILL
//! mid-job, after btl shm created and used its segments; once rmca-run returns, no
//! `/dev/shm/rmca-<job>-*` file is left. And after the launcher itself is killed.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rmca_tests::{release_bin, run_job, Job};

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

// The launcher itself is killed (SIGKILL), at init or mid-run. Nobody is left
// to clean up but the ranks, which get the launcher's death signal: each removes the files it
// created before dying, so nothing of the job remains in /dev/shm.

/// A word unique to one test run, passed to the ranks as an argument to find them in /proc.
fn marker(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .subsec_nanos();
    format!("mk{name}{}x{nanos}", std::process::id())
}

/// Pids of live processes with `m` as one of their arguments.
fn procs_with(m: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cl) = std::fs::read(e.path().join("cmdline")) {
            if cl.split(|b| *b == 0).any(|a| a == m.as_bytes()) {
                v.push(pid);
            }
        }
    }
    v
}

/// Start rmca-run with `args`, its standard output read line by line into the returned channel.
fn launch(args: &[&std::ffi::OsStr]) -> (Child, mpsc::Receiver<String>) {
    let mut cmd = Command::new(release_bin("rmca-run"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, _) in std::env::vars() {
        if k.starts_with("RMCA_MCA_") {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd.spawn().expect("spawn rmca-run");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Poll `done` every 20 ms for at most `limit`; whether it became true.
fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while !done() {
        if t0.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// SIGKILL the launcher, then check that its ranks (found by `m`) went and took every file of
/// the job with them.
fn kill_launcher_and_check(mut launcher: Child, m: &str, prefix: &str) {
    launcher.kill().expect("kill rmca-run");
    let _ = launcher.wait();
    let gone = wait_until(Duration::from_secs(20), || procs_with(m).is_empty());
    assert!(gone, "ranks outlived the launcher: {:?}", procs_with(m));
    let left = leftovers(prefix);
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}

#[test]
fn launcher_killed_during_init_leaves_nothing() {
    let m = marker("init");
    let dir = std::env::temp_dir().join(format!("rmca-orphan-{m}"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let script = dir.join("rank.sh");
    // Rank 1 is slow to start: it waits (bounded) for a file the test never creates, so rank 0
    // has created its segment and waits in init for rank 1 when the launcher is killed.
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             echo \"$RMCA_JOB_ID\" > '{d}'/job.\"$PMI_RANK\"\n\
             if [ \"$PMI_RANK\" = 1 ]; then\n\
             \x20 i=0\n\
             \x20 while [ ! -e '{d}/go' ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\n\
             fi\n\
             exec '{hello}' \"$@\"\n",
            d = dir.display(),
            hello = release_bin("hello").display()
        ),
    )
    .expect("write the rank script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (launcher, _out) = launch(&[
        "-n".as_ref(),
        "2".as_ref(),
        "--mca".as_ref(),
        "btl".as_ref(),
        "self,shm".as_ref(),
        script.as_os_str(),
        m.as_ref(),
    ]);
    let job_file = dir.join("job.0");
    let limit = Duration::from_secs(60);
    assert!(
        wait_until(limit, || std::fs::read_to_string(&job_file)
            .is_ok_and(|s| s.ends_with('\n'))),
        "rank 0 never started"
    );
    let job = std::fs::read_to_string(&job_file).expect("job id");
    let prefix = format!("rmca-{}-", job.trim());
    let segment = std::path::Path::new("/dev/shm").join(format!("{prefix}shm-0"));
    assert!(
        wait_until(limit, || segment.exists()),
        "rank 0 never created {}",
        segment.display()
    );
    assert_eq!(
        leftovers(&prefix).len(),
        1,
        "rank 1 must not have started yet"
    );
    kill_launcher_and_check(launcher, &m, &prefix);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn launcher_killed_mid_run_leaves_nothing() {
    // Segments kept linked (early unlink off): at the kill, each rank's segment exists, rank 0
    // is in a long computation and the others are talking over shm.
    let m = marker("run");
    let ranks = 3;
    let (launcher, out) = launch(&[
        "-n".as_ref(),
        ranks.to_string().as_ref(),
        "--mca".as_ref(),
        "btl".as_ref(),
        "self,shm".as_ref(),
        "--mca".as_ref(),
        "pml".as_ref(),
        "ob1".as_ref(),
        "--mca".as_ref(),
        "btl_shm_early_unlink".as_ref(),
        "0".as_ref(),
        release_bin("launcher_loss").as_os_str(),
        m.as_ref(),
    ]);
    let mut prefix = String::new();
    for _ in 0..ranks {
        let line = out
            .recv_timeout(Duration::from_secs(120))
            .expect("every rank reports running");
        let p = line
            .split_once(" prefix ")
            .map(|(_, p)| p.trim().to_owned())
            .unwrap_or_else(|| panic!("unexpected output {line:?}"));
        assert!(p.starts_with("rmca-") && p.len() > 6, "{p}");
        prefix = p;
    }
    assert_eq!(
        leftovers(&prefix).len(),
        ranks,
        "every rank's segment exists during the run"
    );
    kill_launcher_and_check(launcher, &m, &prefix);
}
