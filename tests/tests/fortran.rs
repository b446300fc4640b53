//! The MPI Fortran interface (bindings/fortran, issue 31): the programs of `tests/fortran`
//! built with `mpifort` and run at 1, 2 and 3 ranks in every configuration (ob1+shm, dr+shm,
//! dr+ud, ob1+rc): `p2p.f90` and `coll.f90` through `use mpi`, `dtype.f90` and `comm.f90`
//! through `use mpi_f08`, `errhan.f` through `mpif.h` in fixed form. The generated sources
//! are regenerated and compared with the checked-in ones, and CMake's `FindMPI` is pointed at
//! rmca's wrappers (C, C++ and Fortran) through `PATH`.
//!
//! C mixed with Fortran: `mpi_abi_fort.h` declares exactly what libmpifort exports for C
//! (`MPI_Fint`, the `_c2f`/`_f2c` and status conversions, the Fortran status-ignore constants);
//! `tests/fortran/mixed.c` (C main) and `mixed_f.f90` (its Fortran routines) pass handles and
//! statuses both ways, built by `mpicc` and `mpifort`; `mpicc -mpi-fortran` builds C code that
//! includes `mpi.h` only.
//!
//! Without gfortran (or cmake, for the CMake test) a test prints `SKIPPED:` and passes, unless
//! `RMCA_TESTS_REQUIRE=1` / `CI=true`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use rmca_test_support::skip_or_fail;
use rmca_tests::c::{run, target_release};
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

/// Run rmca's compiler wrapper `wrapper` with `args`; panics with its output on failure.
fn wrapper(wrapper: &str, args: &[&str]) {
    let o = Command::new(release_bin(wrapper))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {wrapper}: {e}"));
    assert!(
        o.status.success(),
        "{wrapper} {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// The functions (`MPI_`/`PMPI_` names followed by `(`) and variables (`extern` lines) a header
/// declares.
fn header_names(header: &str) -> BTreeSet<String> {
    header
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let end = if l.starts_with("extern ") && l.ends_with(';') {
                l.len() - 1
            } else if l.ends_with(");") {
                l.find('(')?
            } else {
                return None;
            };
            let name = l[..end].rsplit([' ', '*']).next()?;
            (name.starts_with("MPI_") || name.starts_with("PMPI_")).then(|| name.to_owned())
        })
        .collect()
}

#[test]
fn the_fortran_c_header_declares_exactly_what_libmpifort_exports_for_c() {
    if !fortran_or_skip() {
        return;
    }
    ensure_libraries();
    let header =
        std::fs::read_to_string(workspace_root().join("bindings/c/include/mpi_abi_fort.h"))
            .expect("read mpi_abi_fort.h");
    let declared = header_names(&header);
    // 11 handle kinds x 2 conversions, 6 status conversions, both names; 4 constants.
    assert_eq!(declared.len(), (11 * 2 + 6) * 2 + 4, "{declared:?}");
    let lib = target_release().join("libmpifort.so");
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm {}", lib.display());
    // The C names (MPI_Comm_c2f, MPI_F_STATUS_IGNORE), not the Fortran ones (mpi_send_).
    let exported: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| s.starts_with("MPI_") || s.starts_with("PMPI_"))
        .map(str::to_owned)
        .collect();
    let missing: Vec<_> = declared.difference(&exported).collect();
    let undeclared: Vec<_> = exported.difference(&declared).collect();
    assert!(
        missing.is_empty() && undeclared.is_empty(),
        "mpi_abi_fort.h and libmpifort.so disagree: declared, not exported {missing:?}; \
         exported, not declared {undeclared:?}"
    );
    // mpi.h stays the standard ABI's: none of these there (tests/tests/c_abi.rs holds libmpi to
    // what mpi.h declares).
    let mpi_h = std::fs::read_to_string(workspace_root().join("bindings/c/include/mpi.h"))
        .expect("read mpi.h");
    let in_mpi_h: Vec<_> = header_names(&mpi_h)
        .intersection(&declared)
        .cloned()
        .collect();
    assert!(in_mpi_h.is_empty(), "mpi.h declares {in_mpi_h:?}");
}

#[test]
fn c_main_calls_fortran_and_back() {
    if !fortran_or_skip() {
        return;
    }
    ensure_libraries();
    let dir = target_release().join("fortran-tests").join("mixed.d");
    std::fs::create_dir_all(&dir).expect("create the build directory");
    let src = workspace_root().join("tests/fortran");
    let (c_obj, f_obj, program) = (
        dir.join("mixed.o"),
        dir.join("mixed_f.o"),
        dir.join("mixed"),
    );
    let c_src: PathBuf = src.join("mixed.c");
    let f_src: PathBuf = src.join("mixed_f.f90");
    wrapper(
        "mpicc",
        &[
            "-Wall",
            "-Wextra",
            "-Werror",
            "-std=c11",
            "-O1",
            "-c",
            path(&c_src),
            "-o",
            path(&c_obj),
        ],
    );
    wrapper(
        "mpifort",
        &[
            "-Wall",
            "-Werror",
            "-O1",
            "-fcheck=bounds",
            &format!("-J{}", dir.display()),
            "-c",
            path(&f_src),
            "-o",
            path(&f_obj),
        ],
    );
    wrapper(
        "mpifort",
        &[path(&c_obj), path(&f_obj), "-o", path(&program)],
    );
    for ranks in [1, 2, 3] {
        run(&program, "mixed", ranks, "ob1+shm", &[]);
    }
}

/// C code that mixes with Fortran as it always has: `mpi.h` only, `MPI_Fint` and the
/// conversions from it.
const C_MPI_H_ONLY: &str = r#"#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Fint world = MPI_Comm_c2f(MPI_COMM_WORLD), f[MPI_F_STATUS_SIZE];
    MPI_Status s = {0};
    s.MPI_TAG = 5;
    int ok = MPI_Comm_f2c(world) == MPI_COMM_WORLD && MPI_Status_c2f(&s, f) == MPI_SUCCESS &&
             f[MPI_F_TAG] == 5 && MPI_Status_f2c(MPI_F_STATUS_IGNORE, &s) == MPI_ERR_ARG;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (ok && rank == 0) printf("ok mpi-fortran:\n");
    MPI_Finalize();
    return !ok;
}
"#;

#[test]
fn mpicc_mpi_fortran_builds_c_that_includes_mpi_h_only() {
    if !fortran_or_skip() {
        return;
    }
    ensure_libraries();
    let dir = target_release().join("fortran-tests").join("mpi-fortran.d");
    std::fs::create_dir_all(&dir).expect("create the build directory");
    let src = dir.join("c2f.c");
    std::fs::write(&src, C_MPI_H_ONLY).expect("write the C source");
    let program = dir.join("c2f");
    let flags = ["-Wall", "-Wextra", "-Werror", "-std=c11"];
    // Plain mpicc: no MPI_Fint (the standard ABI's mpi.h), so the option is what makes it build.
    let plain = Command::new(release_bin("mpicc"))
        .args(flags)
        .args(["-c", path(&src), "-o", path(&dir.join("plain.o"))])
        .output()
        .expect("run mpicc");
    assert!(
        !plain.status.success() && String::from_utf8_lossy(&plain.stderr).contains("MPI_Fint"),
        "plain mpicc compiled C code using MPI_Fint:\n{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let mut args = vec!["-mpi-fortran"];
    args.extend(flags);
    args.extend([path(&src), "-o", path(&program)]);
    wrapper("mpicc", &args);
    run(&program, "mpi-fortran", 2, "ob1+shm", &[]);
}
