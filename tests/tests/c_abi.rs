//! The standard ABI as a whole: every function `mpi.h` declares is exported by both
//! libraries under its `MPI_` and its `PMPI_` name; a program that wraps MPI functions
//! through the profiling interface works (`tests/c/pmpi.c`), and so does a call of a function
//! rmca does not implement yet (refused through the error handler); the README lists exactly
//! the functions that are refused.

use std::collections::BTreeSet;
use std::process::Command;

use rmca_tests::c::{ensure_libraries, every_config, target_release};
use rmca_tests::workspace_root;

/// The functions `include/mpi.h` declares (`MPI_` names).
fn declared() -> BTreeSet<String> {
    let header = std::fs::read_to_string(workspace_root().join("bindings/c/include/mpi.h"))
        .expect("read mpi.h");
    header
        .lines()
        .filter_map(|l| {
            let open = l.find('(')?;
            let name = l[..open].rsplit([' ', '*']).next()?;
            (name.starts_with("MPI_") && l.ends_with(");")).then(|| name.to_owned())
        })
        .collect()
}

/// The dynamic symbols a library defines.
fn exported(lib: &str) -> BTreeSet<String> {
    let path = target_release().join(lib);
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&path)
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_owned))
        .collect()
}

#[test]
fn every_function_of_the_header_is_exported_under_both_names() {
    ensure_libraries();
    let declared = declared();
    // The standard ABI has 662 C functions (MPI 5.0, ABI 1.0); a header that lost some
    // would pass the comparison below.
    assert!(
        declared.len() >= 662,
        "mpi.h declares {} functions",
        declared.len()
    );
    for lib in ["libmpi.so", "libmpi_abi.so"] {
        let symbols = exported(lib);
        let missing: Vec<String> = declared
            .iter()
            .flat_map(|f| [f.clone(), format!("P{f}")])
            .filter(|s| !symbols.contains(s))
            .collect();
        assert!(missing.is_empty(), "{lib} does not export {missing:?}");
        let undeclared: Vec<&String> = symbols
            .iter()
            .filter(|s| s.starts_with("MPI_") && !declared.contains(*s))
            .collect();
        assert!(
            undeclared.is_empty(),
            "{lib} exports functions mpi.h does not declare: {undeclared:?}"
        );
    }
}

#[test]
fn a_program_wraps_mpi_functions_through_the_profiling_interface() {
    every_config("pmpi");
}

/// The functions `bindings/c/src/ffi/unsupported.rs` refuses, and the window calls
/// `info.rs` refuses by hand (setting the window handle to `MPI_WIN_NULL`).
fn refused() -> BTreeSet<String> {
    let read = |f: &str| {
        std::fs::read_to_string(workspace_root().join("bindings/c/src/ffi").join(f))
            .expect("read the C library's source")
    };
    let mut names: BTreeSet<String> = read("unsupported.rs")
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            l.starts_with("MPI_")
                .then(|| l[..l.find('(').expect("an entry has a parameter list")].to_owned())
        })
        .collect();
    let info = read("info.rs");
    for marker in ["on_window(\"", "refuse_window(\""] {
        for (at, _) in info.match_indices(marker) {
            let rest = &info[at + marker.len()..];
            names.insert(rest[..rest.find('"').expect("a quoted name")].to_owned());
        }
    }
    names
}

#[test]
fn the_readme_lists_exactly_the_functions_not_implemented() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README");
    let start = readme
        .find("<!-- unsupported:start -->")
        .expect("README has the list of unimplemented functions");
    let end = readme
        .find("<!-- unsupported:end -->")
        .expect("the list ends");
    let listed: BTreeSet<String> = readme[start..end]
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        // Function names (MPI_Comm_spawn), not constants (MPI_ERR_...).
        .filter(|w| w.starts_with("MPI_") && w.chars().any(|c| c.is_ascii_lowercase()))
        .map(str::to_owned)
        .collect();
    let refused = refused();
    let not_listed: Vec<_> = refused.difference(&listed).collect();
    let listed_but_implemented: Vec<_> = listed.difference(&refused).collect();
    assert!(
        not_listed.is_empty() && listed_but_implemented.is_empty(),
        "README's list is stale (regenerate it with bindings/c/abi/readme-unsupported.py): \
         refused but not listed {not_listed:?}; listed but implemented {listed_but_implemented:?}"
    );
}
