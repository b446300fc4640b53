//! Builds libmpifort.so and the Fortran modules with the system's compilers: the C wrappers
//! (src/wrappers.c, generated; src/runtime.c) with `$CC` (default `cc`), the `mpi` and
//! `mpi_f08` modules with `$RMCA_FC` (default `gfortran`). Results go to the profile
//! directory (`target/release`), next to libmpi.so: `libmpifort.so` and `fortran/` (`mpif.h`,
//! `mpi.mod`, `mpi_f08.mod`). Without a Fortran compiler the build goes on with a warning.
//!
//! libmpifort.so leaves the C library's symbols undefined (libmpi.so is another crate's
//! artifact, maybe not built yet); the wrappers link `-lmpifort -lmpi`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn run(cmd: &mut Command) {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    if !out.status.success() {
        panic!(
            "{shown} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn main() {
    let here = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    for f in [
        "src/wrappers.c",
        "src/runtime.c",
        "src/rmcaf.h",
        "src/mpi.f90",
        "src/mpi_f08.f90",
        "include/mpif.h",
        "../c/include/mpi.h",
        "../c/include/mpi_abi_fort.h",
    ] {
        println!("cargo:rerun-if-changed={}", here.join(f).display());
    }
    println!("cargo:rerun-if-env-changed=RMCA_FC");
    println!("cargo:rerun-if-env-changed=CC");
    let fc = env::var("RMCA_FC").unwrap_or_else(|_| "gfortran".into());
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&fc).arg("--version").output().is_err() {
        println!(
            "cargo:warning=no Fortran compiler ('{fc}'): libmpifort.so and the mpi/mpi_f08 \
             modules are not built (Debian: apt-get install gfortran, or scripts/install-deps.sh; \
             RMCA_FC names another compiler)"
        );
        return;
    }
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    // OUT_DIR is <profile>/build/<crate>-<hash>/out.
    let profile = out
        .ancestors()
        .nth(3)
        .expect("OUT_DIR is <profile>/build/<pkg>/out")
        .to_path_buf();
    let moddir = out.join("mod");
    std::fs::create_dir_all(&moddir).unwrap();
    let cinc = here.join("../c/include");
    let objs: Vec<PathBuf> = ["wrappers", "runtime"]
        .iter()
        .map(|n| {
            let o = out.join(format!("{n}.o"));
            run(Command::new(&cc)
                .args([
                    "-O2",
                    "-fPIC",
                    "-std=gnu11",
                    "-Wall",
                    "-Wno-maybe-uninitialized",
                    // Calls into libmpi through its GOT entry, not a PLT stub: one jump
                    // fewer per call of the Fortran layer.
                    "-fno-plt",
                ])
                .arg(format!("-I{}", cinc.display()))
                .arg(format!("-I{}", here.join("src").display()))
                .arg("-c")
                .arg(here.join(format!("src/{n}.c")))
                .arg("-o")
                .arg(&o));
            o
        })
        .chain(["mpi", "mpi_f08"].iter().map(|n| {
            let o = out.join(format!("{n}.o"));
            run(Command::new(&fc)
                .args(["-O2", "-fPIC"])
                .arg(format!("-J{}", moddir.display()))
                .arg("-c")
                .arg(here.join(format!("src/{n}.f90")))
                .arg("-o")
                .arg(&o));
            o
        }))
        .collect();
    let lib = out.join("libmpifort.so");
    run(Command::new(&fc)
        .args(["-shared", "-Wl,-soname,libmpifort.so", "-o"])
        .arg(&lib)
        .args(&objs));
    // Install into the profile directory: write beside, then rename (a program being
    // linked against the old copy never sees half a file).
    let dest = profile.join(rmca_subdir());
    std::fs::create_dir_all(&dest).unwrap();
    install(&lib, &profile.join("libmpifort.so"));
    for m in ["mpi.mod", "mpi_f08.mod"] {
        install(&moddir.join(m), &dest.join(m));
    }
    install(&here.join("include/mpif.h"), &dest.join("mpif.h"));
    println!("cargo:rustc-env=RMCA_MPIFORT_BUILT=1");
}

fn rmca_subdir() -> &'static str {
    "fortran"
}

fn install(from: &Path, to: &Path) {
    let tmp = to.with_extension("tmp-install");
    std::fs::copy(from, &tmp).unwrap_or_else(|e| panic!("copy {from:?} -> {tmp:?}: {e}"));
    std::fs::rename(&tmp, to).unwrap_or_else(|e| panic!("rename {tmp:?} -> {to:?}: {e}"));
}
