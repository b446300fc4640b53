//! `bench/lib-at.sh` and `bench/osu-trees.sh`, which make what bench/RESULTS.md's commands run
//! on (an older commit's C library, the OSU trees): bad input is a clear error with its exit
//! status, a second call answers from the cache without building, and an OSU tree comes from a
//! given source or not at all. No builds: the cache is laid out by the test, the OSU source is a
//! stand-in with the two files the script checks.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rmca_tests::workspace_root;

/// A scratch directory of this test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("rmca-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `bench/SCRIPT ARGS` from the workspace root with the environment `env`.
fn run(script: &str, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(workspace_root().join("bench").join(script))
        .args(args)
        .current_dir(workspace_root());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run bash")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn git(args: &[&str]) -> String {
    git_in(&workspace_root(), args)
}

/// `git ARGS` in repository `dir`: its first line of output.
fn git_in(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args([
            "-c",
            "user.name=rmca-test",
            "-c",
            "user.email=rmca-test@localhost",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git");
    assert!(o.status.success(), "git {args:?}: {}", stderr(&o));
    stdout(&o).lines().next().unwrap_or_default().to_owned()
}

#[test]
fn lib_at_refuses_bad_input_and_answers_a_built_commit_from_its_cache() {
    let s = Scratch::new("lib-at");
    let env = [("RMCA_BUILD_CACHE", s.0.as_path())];
    let o = run("lib-at.sh", &[], &env);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("usage: lib-at.sh COMMIT"),
        "{}",
        stderr(&o)
    );
    let o = run("lib-at.sh", &["no-such-commit"], &env);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("'no-such-commit' is not a commit"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).is_empty(), "nothing printed on failure");

    // A commit built before (the cache as lib-at.sh leaves it): printed, nothing built.
    let sha = git(&["rev-parse", "HEAD"]);
    let lib = s.0.join(&sha).join("lib");
    fs::create_dir_all(&lib).unwrap();
    for p in ["libmpi.so", "libmpi_abi.so", "rmca-cc", "mpicc", "rmca-run"] {
        fs::write(lib.join(p), "").unwrap();
    }
    fs::write(s.0.join(&sha).join("done"), "").unwrap();
    let short = git(&["rev-parse", "--short", "HEAD"]);
    let o = run("lib-at.sh", &[&short], &env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), lib.display().to_string());
    assert!(
        !s.0.join(&sha).join("src").exists(),
        "a cached commit is not extracted again"
    );
    // Without the stamp a half-made directory is never printed: it would be built again
    // (not here: a commit too old to have the C library fails before building). That commit
    // is made here, in a repository of its own holding a copy of the script: this clone may
    // be shallow, and its oldest commit at hand would then have the library and be built.
    let old = s.0.join("old-repo");
    fs::create_dir_all(old.join("bench")).unwrap();
    fs::copy(
        workspace_root().join("bench/lib-at.sh"),
        old.join("bench/lib-at.sh"),
    )
    .unwrap();
    git_in(&old, &["init", "-q"]);
    git_in(&old, &["add", "bench"]);
    git_in(&old, &["commit", "-q", "-m", "before the C library"]);
    let o = Command::new("bash")
        .arg(old.join("bench/lib-at.sh"))
        .arg("HEAD")
        .env("RMCA_BUILD_CACHE", s.0.join("old-cache"))
        .output()
        .expect("run bash");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("too old"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
}

#[test]
fn osu_trees_makes_a_tree_from_its_source_once_and_refuses_a_wrong_one() {
    let s = Scratch::new("osu-trees");
    let o = run("osu-trees.sh", &["nonsense"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("usage: osu-trees.sh"), "{}", stderr(&o));

    // A stand-in OSU tree: the files the script checks.
    let src = s.0.join("src");
    fs::create_dir_all(src.join("c/util")).unwrap();
    fs::write(src.join("configure"), "#!/bin/sh\n").unwrap();
    fs::write(src.join("c/util/osu_util_mpi.c"), "").unwrap();
    let status = Command::new("chmod")
        .arg("+x")
        .arg(src.join("configure"))
        .status()
        .unwrap();
    assert!(status.success());

    let dir = s.0.join("osu");
    let dir_arg = dir.display().to_string();
    let o = run("osu-trees.sh", &["osu", &dir_arg], &[("OSU_SRC", &src)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), dir_arg);
    assert!(dir.join("c/util/osu_util_mpi.c").is_file());
    // Made: a second call needs no source at all.
    let gone = s.0.join("gone");
    let o = run("osu-trees.sh", &["osu", &dir_arg], &[("OSU_SRC", &gone)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), dir_arg);

    // A source that is no OSU tree: an error, and no directory left behind.
    let other = s.0.join("other");
    let other_arg = other.display().to_string();
    let o = run(
        "osu-trees.sh",
        &["osu", &other_arg],
        &[("OSU_SRC", &s.0.join("osu/c"))],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is not an OSU 7.x tree"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).is_empty());
    let left: Vec<_> = fs::read_dir(&s.0)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("other"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let o = run("osu-trees.sh", &["osu", &other_arg], &[("OSU_SRC", &gone)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("neither a directory nor a file"),
        "{}",
        stderr(&o)
    );
}
