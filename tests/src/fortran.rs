//! The Fortran programs of `tests/fortran`: compiled with the `mpifort` wrapper (mpif.h,
//! `use mpi`, `use mpi_f08`) and run under rmca-run in every configuration of
//! [`crate::c::CONFIGS`]. Each program checks its own results and prints `ok <area>:` on
//! rank 0. Used by `tests/tests/fortran.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::c::{
    build_once, build_release_libs, ensure_libraries as ensure_c_libraries, run, target_release,
    CONFIGS,
};
use crate::workspace_root;

/// Whether a Fortran compiler is there (`$RMCA_FC`, else `gfortran`): the reason if not.
pub fn compiler_missing() -> Option<String> {
    let fc = std::env::var("RMCA_FC").unwrap_or_else(|_| "gfortran".into());
    match Command::new(&fc).arg("--version").output() {
        Ok(o) if o.status.success() => None,
        _ => Some(format!(
            "no Fortran compiler '{fc}' (Debian package gfortran, installed by \
             scripts/install-deps.sh)"
        )),
    }
}

/// Build libmpifort.so and the modules (with libmpi.so) unless the caller says the release
/// build is done and they are there.
pub fn ensure_libraries() {
    static BUILT: OnceLock<()> = OnceLock::new();
    ensure_c_libraries();
    BUILT.get_or_init(|| {
        build_release_libs(&["rmca-mpifort"], &["libmpifort.so", "fortran/mpi_f08.mod"])
    });
}

/// Compile `tests/fortran/<file>` (`.f`: fixed form, `.f90`: free form) with `mpifort`
/// into the target directory, once per test process; the absolute path.
pub fn compile(file: &str) -> PathBuf {
    ensure_libraries();
    let stem = Path::new(file)
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a file name");
    let out = target_release().join("fortran-tests").join(stem);
    // Module files of the program itself go to its own directory.
    let work = out.with_extension("mod.d");
    std::fs::create_dir_all(&work).expect("create fortran-tests dir");
    let src = workspace_root().join("tests/fortran").join(file);
    let args = ["-Wall", "-Werror", "-O1", "-fcheck=bounds"]
        .map(String::from)
        .into_iter()
        .chain([format!("-J{}", work.display())])
        .collect::<Vec<_>>();
    build_once("mpifort", &src, out, &args)
}

/// `tests/fortran/<file>` (area `area`) on 1 rank, then on 2 and 3 ranks in every
/// configuration.
pub fn every_config(file: &str, area: &str) {
    let program = compile(file);
    run(&program, area, 1, "ob1+shm", &[]);
    for (config, mca) in CONFIGS {
        for ranks in [2, 3] {
            run(&program, area, ranks, config, mca);
        }
    }
}
