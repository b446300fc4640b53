//! Helpers for the multi-process integration tests: locate the release binaries (building them
//! if needed) and run jobs under rmca-run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("workspace root")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// Build (once per test process) the release binaries and examples the jobs run, unless
/// `RMCA_TESTS_PREBUILT` is set.
fn ensure_built() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        // For developers who built the binaries themselves (e.g. part of the workspace only).
        if std::env::var_os("RMCA_TESTS_PREBUILT").is_some() {
            return;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(workspace_root())
            .args([
                "build",
                "--release",
                "--workspace",
                "--bins",
                "--examples",
                "--quiet",
            ])
            .status()
            .expect("run cargo build");
        assert!(status.success(), "building the release binaries failed");
    });
}

/// Path of a release binary (a `[[bin]]` of any workspace crate) or example.
pub fn release_bin(name: &str) -> PathBuf {
    ensure_built();
    let dir = target_dir().join("release");
    let p = dir.join(name);
    if p.exists() {
        return p;
    }
    let e = dir.join("examples").join(name);
    assert!(
        e.exists(),
        "no binary or example named {name} in {}",
        dir.display()
    );
    e
}

/// A job to run.
#[derive(Debug)]
pub struct Job<'a> {
    /// Number of ranks.
    pub ranks: usize,
    /// Binary or example name.
    pub program: &'a str,
    /// Program arguments.
    pub args: &'a [&'a str],
    /// `--mca` settings.
    pub mca: &'a [(&'a str, &'a str)],
    /// `--timeout` in seconds.
    pub timeout_s: u64,
}

/// What a job printed and how it ended.
#[derive(Debug)]
pub struct JobOutput {
    /// Exit code of rmca-run (None if killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl JobOutput {
    /// True when the job exited 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
    /// Both streams, for assertion messages.
    pub fn text(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Run a job under rmca-run and collect its output.
pub fn run_job(job: &Job<'_>) -> JobOutput {
    run_job_with(job, &[])
}

/// [`run_job`] with extra rmca-run options (e.g. `--keep-going`).
pub fn run_job_with(job: &Job<'_>, launcher_args: &[&str]) -> JobOutput {
    let mut cmd = Command::new(release_bin("rmca-run"));
    cmd.args(launcher_args);
    cmd.arg("-n")
        .arg(job.ranks.to_string())
        .arg("--timeout")
        .arg(job.timeout_s.to_string());
    for (k, v) in job.mca {
        cmd.arg("--mca").arg(k).arg(v);
    }
    cmd.arg(release_bin(job.program)).args(job.args);
    for (k, _) in std::env::vars() {
        if k.starts_with("RMCA_MCA_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().expect("spawn rmca-run");
    JobOutput {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Read, delete and parse the merged profile a job wrote with `--mca profile_json PATH`;
/// panics with the job's output (`out`) if it is missing or not JSON.
pub fn take_profile(path: &Path, out: &JobOutput) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no profile at {}: {e}\n{}", path.display(), out.text()));
    let _ = std::fs::remove_file(path);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("profile at {} is not JSON: {e}", path.display()))
}
