//! The MPI Fortran interface (bindings/fortran, issue 31): the programs of `tests/fortran`
//! built with `mpifort` and run at 1, 2 and 3 ranks in every configuration (ob1+shm, dr+shm,
//! dr+ud, ob1+rc): `p2p.f90` and `coll.f90` through `use mpi`, `dtype.f90` and `comm.f90`
//! through `use mpi_f08`, `errhan.f` through `mpif.h` in fixed form. The generated sources
//! are regenerated and compared with the checked-in ones, and CMake's `FindMPI` is pointed at
//! rmca's wrappers (C, C++ and Fortran) through `PATH`.
//!
//! Without gfortran (or cmake, for the CMake test) a test prints `SKIPPED:` and passes, unless
//! `RMCA_TESTS_REQUIRE=1` / `CI=true`.

use std::path::Path;
use std::process::Command;

use rmca_test_support::skip_or_fail;
use rmca_tests::c::target_release;
use rmca_tests::fortran::{compiler_missing, ensure_libraries, every_config};
use rmca_tests::{release_bin, run_job, workspace_root, Job};

fn fortran_or_skip() -> bool {
    match compiler_missing() {
        Some(reason) => {
            skip_or_fail(reason);
            false
        }
        None => true,
    }
}

#[test]
fn generated_sources_are_current() {
    let root = workspace_root();
    let out = match Command::new("python3")
        .arg(root.join("bindings/fortran/gen/generate.py"))
        .arg("--check")
        .output()
    {
        Ok(o) => o,
        Err(e) => return skip_or_fail(format!("no python3 ({e}): Debian package python3")),
    };
    assert!(
        out.status.success(),
        "bindings/fortran's generated files differ from what gen/generate.py makes of mpi.h and \
         gen/api.json:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn point_to_point_use_mpi() {
    if fortran_or_skip() {
        every_config("p2p.f90", "p2p");
    }
}

#[test]
fn collectives_and_reductions_use_mpi() {
    if fortran_or_skip() {
        every_config("coll.f90", "coll");
    }
}

#[test]
fn derived_datatypes_use_mpi_f08() {
    if fortran_or_skip() {
        every_config("dtype.f90", "dtype");
    }
}

#[test]
fn communicators_groups_attributes_use_mpi_f08() {
    if fortran_or_skip() {
        every_config("comm.f90", "comm");
    }
}

#[test]
fn error_handlers_mpif_h_fixed_form() {
    if fortran_or_skip() {
        every_config("errhan.f", "errhan");
    }
}

const CMAKE_LISTS: &str = r#"cmake_minimum_required(VERSION 3.10)
project(rmca_findmpi C CXX Fortran)
find_package(MPI REQUIRED COMPONENTS C CXX Fortran)
add_executable(hello_c hello.c)
target_link_libraries(hello_c MPI::MPI_C)
add_executable(hello_f hello.f90)
target_link_libraries(hello_f MPI::MPI_Fortran)
file(WRITE "${CMAKE_BINARY_DIR}/found.txt"
  "C=${MPI_C_COMPILER}\nCXX=${MPI_CXX_COMPILER}\nFortran=${MPI_Fortran_COMPILER}\nf08=${MPI_Fortran_HAVE_F08_MODULE}\nf90=${MPI_Fortran_HAVE_F90_MODULE}\nf77=${MPI_Fortran_HAVE_F77_HEADER}\n")
"#;

const HELLO_C: &str = r#"#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) printf("ok cmake-c:\n");
    MPI_Finalize();
    return 0;
}
"#;

const HELLO_F: &str = r#"program hello
  use mpi_f08
  implicit none
  integer :: rank, size, total
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, size)
  call MPI_Allreduce(rank + 1, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0 .and. total == size * (size + 1) / 2) print '(a)', 'ok cmake-fortran:'
  call MPI_Finalize()
end program hello
"#;

#[test]
fn cmake_find_package_mpi_finds_the_wrappers() {
    if !fortran_or_skip() {
        return;
    }
    if Command::new("cmake").arg("--version").output().is_err() {
        return skip_or_fail(
            "no cmake (Debian package cmake, installed by scripts/install-deps.sh)",
        );
    }
    ensure_libraries();
    let bindir = release_bin("mpifort")
        .parent()
        .expect("a directory")
        .to_path_buf();
    let dir = target_release().join("fortran-tests").join("cmake");
    let _ = std::fs::remove_dir_all(&dir);
    let src = dir.join("src");
    let build = dir.join("build");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("CMakeLists.txt"), CMAKE_LISTS).unwrap();
    std::fs::write(src.join("hello.c"), HELLO_C).unwrap();
    std::fs::write(src.join("hello.f90"), HELLO_F).unwrap();
    let path = format!(
        "{}:{}",
        bindir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let cmake = |args: &[&str]| {
        let o = Command::new("cmake")
            .args(args)
            .env("PATH", &path)
            // Whatever another MPI's environment says, FindMPI must search PATH.
            .env_remove("MPI_HOME")
            .output()
            .expect("run cmake");
        assert!(
            o.status.success(),
            "cmake {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    };
    cmake(&[
        "-S",
        src.to_str().unwrap(),
        "-B",
        build.to_str().unwrap(),
        "-DCMAKE_BUILD_TYPE=Release",
        // FindMPI looks for the wrappers next to the launcher it found first (another MPI's
        // /usr/bin/mpiexec, were it left to search): name rmca's.
        &format!("-DMPIEXEC_EXECUTABLE={}", bindir.join("rmca-run").display()),
    ]);
    let found = std::fs::read_to_string(build.join("found.txt")).unwrap();
    // The wrapper FindMPI chose for `lang` is one of rmca's `names` (it prefers mpif90 to
    // mpifort: both are rmca-fort).
    let ours = |lang: &str, names: &[&str]| {
        let line = found
            .lines()
            .find(|l| l.starts_with(&format!("{lang}=")))
            .unwrap_or_else(|| panic!("{lang} missing from {found}"));
        let chosen = Path::new(&line[lang.len() + 1..]);
        assert!(
            names.iter().any(|n| chosen == bindir.join(n)),
            "FindMPI picked another {lang} wrapper: {line} (rmca's are {names:?} in {})",
            bindir.display()
        );
    };
    ours("C", &["mpicc", "rmca-cc"]);
    ours("CXX", &["mpicxx", "rmca-cxx"]);
    ours("Fortran", &["mpifort", "mpif90", "mpif77", "rmca-fort"]);
    for module in ["f08=TRUE", "f90=TRUE", "f77=TRUE"] {
        assert!(
            found.contains(module),
            "FindMPI: {module} expected in\n{found}"
        );
    }
    cmake(&["--build", build.to_str().unwrap()]);
    for (exe, area) in [("hello_c", "cmake-c"), ("hello_f", "cmake-fortran")] {
        let program = build.join(exe);
        let out = run_job(&Job {
            ranks: 2,
            program: program.to_str().unwrap(),
            args: &[],
            mca: &[],
            timeout_s: 60,
        });
        assert!(
            out.success() && out.stdout.contains(&format!("ok {area}:")),
            "{exe} built by CMake failed:\n{}",
            out.text()
        );
    }
}
