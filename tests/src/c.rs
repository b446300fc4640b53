//! The C programs of `tests/c`: compiled with the `mpicc` wrapper and run under rmca-run in
//! every configuration. Each program checks its own results and prints `ok <area>:` on rank 0.
//! Used by `tests/tests/c_*.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::{release_bin, run_job, workspace_root, Job};

/// The configurations every program runs in.
pub const CONFIGS: [(&str, &[(&str, &str)]); 4] = [
    ("ob1+shm", &[]),
    ("dr+shm", &[("pml", "dr")]),
    (
        "dr+ud",
        &[
            ("pml", "dr"),
            ("btl", "ud,self"),
            ("btl_ud_provider", "soft"),
        ],
    ),
    ("ob1+rc", &[("btl", "rc,self"), ("btl_rc_provider", "soft")]),
];

pub fn target_release() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("release")
}

/// Build libmpi.so and libmpi_abi.so (cdylibs: `--bins` does not build them) unless the
/// caller says the release build is done and they are there.
pub fn ensure_libraries() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        build_release_libs(
            &["rmca-mpi", "rmca-mpi-lib"],
            &["libmpi.so", "libmpi_abi.so"],
        )
    });
}

/// `cargo build --release --lib` of `packages`, unless `RMCA_TESTS_PREBUILT` says the release
/// build is done and every one of `products` (paths under the release directory) is there.
pub fn build_release_libs(packages: &[&str], products: &[&str]) {
    let dir = target_release();
    if std::env::var_os("RMCA_TESTS_PREBUILT").is_some()
        && products.iter().all(|p| dir.join(p).exists())
    {
        return;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .args(["build", "--release", "--quiet", "--lib"]);
    for p in packages {
        cmd.args(["-p", p]);
    }
    let status = cmd.status().expect("run cargo build");
    assert!(status.success(), "building {} failed", products.join(", "));
}

/// Compile `tests/c/<name>.c` with the wrapper (extra wrapper arguments `extra`, e.g.
/// `-abi`) into the target directory, once per test process; the absolute path.
pub fn compile(name: &str, extra: &[&str]) -> PathBuf {
    let suffix = extra.join("").replace('-', "_");
    let src = workspace_root().join("tests/c").join(format!("{name}.c"));
    let mut args = extra.to_vec();
    args.push("-O1");
    compile_source(&src, &format!("{name}{suffix}"), &args)
}

/// Compile C program `src` with rmca's mpicc (`-Wall -Wextra -Werror -std=c11` and `args`)
/// into `c-tests/<out_name>` of the target directory, once per test process; the absolute
/// path.
pub fn compile_source(src: &Path, out_name: &str, args: &[&str]) -> PathBuf {
    ensure_libraries();
    let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    all.extend(["-Wall", "-Wextra", "-Werror", "-std=c11"].map(String::from));
    build_once(
        "mpicc",
        src,
        target_release().join("c-tests").join(out_name),
        &all,
    )
}

/// Run rmca's compiler wrapper `wrapper` on `src` with `args` into `out`, once per `out` and
/// test process: tests of one file that share a program wait for its one build (rewriting a
/// binary another test is starting would fail that start). `out`.
pub fn build_once(wrapper: &str, src: &Path, out: PathBuf, args: &[String]) -> PathBuf {
    static BUILT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if built.contains(&out) {
        return out;
    }
    std::fs::create_dir_all(out.parent().expect("has a parent")).expect("create the output dir");
    let o = Command::new(release_bin(wrapper))
        .args(args)
        .arg(src)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("run {wrapper}: {e}"));
    assert!(
        o.status.success(),
        "{wrapper} {} failed:\n{}{}",
        src.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    built.push(out.clone());
    out
}

/// Run `program` (an absolute path: `release_bin` joins it onto the target directory, which
/// keeps an absolute path as it is) on `ranks` ranks in configuration `mca`.
pub fn run(program: &Path, area: &str, ranks: usize, config: &str, mca: &[(&str, &str)]) {
    let program = program.to_str().expect("UTF-8 path");
    let out = run_job(&Job {
        ranks,
        program,
        args: &[],
        mca,
        timeout_s: 120,
    });
    assert!(
        out.success() && out.stdout.contains(&format!("ok {area}:")),
        "{area} on {ranks} ranks over {config} failed:\n{}",
        out.text()
    );
}

/// `area` on 2 and 3 ranks in every configuration, and alone.
pub fn every_config(area: &str) {
    let program = compile(area, &[]);
    run(&program, area, 1, "ob1+shm", &[]);
    for (config, mca) in CONFIGS {
        for ranks in [2, 3] {
            run(&program, area, ranks, config, mca);
        }
    }
}
