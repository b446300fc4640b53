//! The compiler wrappers behind `rmca-cc`/`mpicc` (C) and `rmca-cxx`/`mpicxx` (C++, for
//! build systems that link C objects with the C++ compiler, as the OSU benchmarks do): run the
//! compiler with the include
//! directory of rmca's `mpi.h` and, when linking, `-L`, `-l` and an rpath for the library, so
//! that the program runs without `LD_LIBRARY_PATH`.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `RMCA_CC` | the C compiler | `cc` |
//! | `RMCA_CXX` | the C++ compiler | `c++` |
//! | `RMCA_CC_INCLUDE` | the directory of `mpi.h` | `<bin dir>/include` if it has `mpi.h`, else the source tree's `bindings/c/include` |
//! | `RMCA_CC_LIBDIR` | the directory of `libmpi.so` | the directory of this program |
//! | `RMCA_FC` | the Fortran compiler (`rmca-fort`, `mpifort`, `mpif90`, `mpif77`) | `gfortran` |
//! | `RMCA_FC_INCLUDE` | the directory of `mpif.h`, `mpi.mod`, `mpi_f08.mod` | `<bin dir>/fortran` |
//!
//! The Fortran wrappers link `-lmpifort` (the Fortran interface) before `-lmpi`.
//!
//! C code mixed with Fortran: `mpi.h` (the standard ABI's) has no `MPI_Fint` nor the
//! `MPI_*_c2f`/`_f2c` conversions; `mpi_abi_fort.h` declares them and libmpifort defines them.
//! As in MPICH's ABI build, `mpicc` alone links neither (a C program does not depend on the
//! Fortran runtime); `-mpi-fortran` (C and C++ wrappers) includes `mpi_abi_fort.h` in every
//! file (`-include`, for code that includes `mpi.h` only) and links `-lmpifort` before
//! `-lmpi`. A program with Fortran objects is linked with `mpifort`, which links both.
//!
//! Options of the wrapper itself (removed from the compiler's arguments): `-show` prints the
//! command instead of running it (as MPICH's and Open MPI's wrappers do; `-showme` too),
//! `-abi` links `libmpi_abi.so` (the standard-ABI name) instead of `libmpi.so`,
//! `-mpi-fortran` the Fortran interface's C side (above).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Arguments that make the compiler stop before linking.
const NO_LINK: [&str; 5] = ["-c", "-S", "-E", "-M", "-MM"];

/// The source tree's header directory, for runs from a build tree.
const SOURCE_INCLUDE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bindings/c/include");

/// The language a wrapper compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// C (`rmca-cc`, `mpicc`).
    C,
    /// C++ (`rmca-cxx`, `mpicxx`).
    Cxx,
    /// Fortran (`rmca-fort`, `mpifort`, `mpif90`, `mpif77`).
    Fortran,
}

/// Where the wrapper finds things.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The compiler to run.
    pub compiler: String,
    /// The directory of `mpi.h`.
    pub include: PathBuf,
    /// The directory of `libmpi.so` (also the rpath).
    pub libdir: PathBuf,
}

impl Layout {
    /// The layout from the environment and the location of this executable, for `language`.
    pub fn detect(language: Language) -> Self {
        let bindir = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from("."));
        let (include_var, fortran) = match language {
            Language::Fortran => ("RMCA_FC_INCLUDE", true),
            _ => ("RMCA_CC_INCLUDE", false),
        };
        let include = std::env::var_os(include_var)
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                if fortran {
                    // mpif.h and the modules of this build's gfortran, made by
                    // bindings/fortran's build script next to the library.
                    return bindir.join("fortran");
                }
                let next_to = bindir.join("include");
                if next_to.join("mpi.h").is_file() {
                    next_to
                } else {
                    PathBuf::from(SOURCE_INCLUDE)
                }
            });
        let libdir = std::env::var_os("RMCA_CC_LIBDIR")
            .map(PathBuf::from)
            .unwrap_or(bindir);
        let (var, default) = match language {
            Language::C => ("RMCA_CC", "cc"),
            Language::Cxx => ("RMCA_CXX", "c++"),
            Language::Fortran => ("RMCA_FC", "gfortran"),
        };
        let compiler = std::env::var(var).unwrap_or_else(|_| default.to_owned());
        Self {
            compiler,
            include: canonical(include),
            libdir: canonical(libdir),
        }
    }
}

fn canonical(p: PathBuf) -> PathBuf {
    std::fs::canonicalize(&p).unwrap_or(p)
}

/// What to run: the compiler and its arguments, and whether only to show them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The compiler.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Print the command instead of running it.
    pub show: bool,
}

/// The compiler command for the wrapper's arguments `args` (C or C++).
pub fn plan(layout: &Layout, args: Vec<String>) -> Plan {
    plan_for(Language::C, layout, args)
}

/// The compiler command of `language`'s wrapper for `args`: Fortran links the Fortran
/// interface's library (`-lmpifort`) before the C library.
pub fn plan_for(language: Language, layout: &Layout, args: Vec<String>) -> Plan {
    let mut show = false;
    let mut library = "mpi";
    let mut fortran = language == Language::Fortran;
    let mut c_fortran = false;
    let mut user = Vec::with_capacity(args.len());
    for a in args {
        match a.as_str() {
            "-show" | "-showme" | "--showme" => show = true,
            "-abi" => library = "mpi_abi",
            "-mpi-fortran" => {
                c_fortran = language != Language::Fortran;
                fortran = true;
            }
            _ => user.push(a),
        }
    }
    let links = !user.iter().any(|a| NO_LINK.contains(&a.as_str()));
    let mut out = vec![format!("-I{}", layout.include.display())];
    if c_fortran {
        out.push("-include".to_owned());
        out.push("mpi_abi_fort.h".to_owned());
    }
    // rmca's library directory comes before the program's own -L options: a build that
    // passes the system library directory (setuptools does, for mpi4py) would otherwise link
    // another MPI's libmpi.so found there. Only -lmpi goes last, after the objects that use it.
    if links {
        let lib = layout.libdir.display();
        out.push(format!("-L{lib}"));
        out.push(format!("-Wl,-rpath,{lib}"));
    }
    out.extend(user);
    if links {
        if fortran {
            out.push("-lmpifort".to_owned());
        }
        out.push(format!("-l{library}"));
    }
    Plan {
        program: layout.compiler.clone(),
        args: out,
        show,
    }
}

/// gfortran 10 and later refuse calls to one procedure with different argument types in a
/// file, which FORTRAN 77 programs using `mpif.h` make with every choice buffer:
/// `-fallow-argument-mismatch` makes that a warning again (MPICH's mpifort passes it too).
fn fortran_compat(compiler: &str) -> Vec<String> {
    let name = Path::new(compiler)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    if !name.contains("gfortran") {
        return Vec::new();
    }
    let major = Command::new(compiler)
        .arg("-dumpversion")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| v.trim().split('.').next()?.parse::<u32>().ok())
        .unwrap_or(0);
    if major >= 10 {
        vec!["-fallow-argument-mismatch".to_owned()]
    } else {
        Vec::new()
    }
}

/// Run the wrapper for `language`: the exit code.
pub fn run(language: Language, args: Vec<String>) -> i32 {
    let layout = Layout::detect(language);
    let mut p = plan_for(language, &layout, args);
    if language == Language::Fortran {
        let compat = fortran_compat(&layout.compiler);
        p.args.splice(1..1, compat);
    }
    if p.show {
        let mut line = p.program.clone();
        for a in &p.args {
            line.push(' ');
            line.push_str(a);
        }
        println!("{line}");
        return 0;
    }
    match Command::new(&p.program).args(&p.args).status() {
        Ok(st) => st.code().unwrap_or(1),
        Err(e) => {
            eprintln!(
                "rmca-cc: cannot run the compiler '{}': {e} (set {} to choose another)",
                p.program,
                match language {
                    Language::C => "RMCA_CC",
                    Language::Cxx => "RMCA_CXX",
                    Language::Fortran => "RMCA_FC",
                }
            );
            127
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            compiler: "gcc".into(),
            include: "/inc".into(),
            libdir: "/lib".into(),
        }
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn linking_puts_the_library_directory_first_and_the_library_last() {
        let p = plan(&layout(), args(&["-O2", "x.c", "-o", "x"]));
        assert_eq!(
            p.args,
            args(&[
                "-I/inc",
                "-L/lib",
                "-Wl,-rpath,/lib",
                "-O2",
                "x.c",
                "-o",
                "x",
                "-lmpi"
            ])
        );
        assert!(!p.show);
    }

    #[test]
    fn a_system_library_directory_given_by_the_build_does_not_shadow_rmca() {
        // As setuptools links an extension module: the system directory, where another
        // MPI's libmpi.so may be, among the user's arguments.
        let p = plan(
            &layout(),
            args(&[
                "-shared",
                "m.o",
                "-L/usr/lib/x86_64-linux-gnu",
                "-o",
                "m.so",
            ]),
        );
        let ours = p.args.iter().position(|a| a == "-L/lib").unwrap();
        let system = p
            .args
            .iter()
            .position(|a| a == "-L/usr/lib/x86_64-linux-gnu")
            .unwrap();
        assert!(ours < system, "{:?}", p.args);
        assert_eq!(p.args.last().map(String::as_str), Some("-lmpi"));
    }

    #[test]
    fn compile_only_adds_the_include_directory_only() {
        let p = plan(&layout(), args(&["-c", "x.c"]));
        assert_eq!(p.args, args(&["-I/inc", "-c", "x.c"]));
    }

    #[test]
    fn fortran_links_the_fortran_interface_before_the_c_library() {
        let p = plan_for(Language::Fortran, &layout(), args(&["x.f90", "-o", "x"]));
        assert_eq!(
            p.args,
            args(&[
                "-I/inc",
                "-L/lib",
                "-Wl,-rpath,/lib",
                "x.f90",
                "-o",
                "x",
                "-lmpifort",
                "-lmpi"
            ])
        );
        let c = plan_for(Language::Fortran, &layout(), args(&["-c", "x.f90"]));
        assert_eq!(c.args, args(&["-I/inc", "-c", "x.f90"]));
    }

    #[test]
    fn mpi_fortran_gives_c_the_fortran_header_and_library() {
        let p = plan(&layout(), args(&["-mpi-fortran", "x.c", "-o", "x"]));
        assert_eq!(
            p.args,
            args(&[
                "-I/inc",
                "-include",
                "mpi_abi_fort.h",
                "-L/lib",
                "-Wl,-rpath,/lib",
                "x.c",
                "-o",
                "x",
                "-lmpifort",
                "-lmpi"
            ])
        );
        let c = plan(&layout(), args(&["-mpi-fortran", "-c", "x.c"]));
        assert_eq!(
            c.args,
            args(&["-I/inc", "-include", "mpi_abi_fort.h", "-c", "x.c"])
        );
        // Plain mpicc links no Fortran library.
        let plain = plan(&layout(), args(&["x.c"]));
        assert!(
            !plain.args.iter().any(|a| a.contains("fort")),
            "{:?}",
            plain.args
        );
        // mpifort links it already; the option changes nothing there.
        let f = plan_for(
            Language::Fortran,
            &layout(),
            args(&["-mpi-fortran", "x.f90"]),
        );
        assert_eq!(
            f.args,
            plan_for(Language::Fortran, &layout(), args(&["x.f90"])).args
        );
    }

    #[test]
    fn show_and_abi_are_the_wrappers_own_options() {
        let p = plan(&layout(), args(&["-show", "-abi", "x.c"]));
        assert!(p.show);
        assert_eq!(
            p.args,
            args(&["-I/inc", "-L/lib", "-Wl,-rpath,/lib", "x.c", "-lmpi_abi"])
        );
    }
}
