//! Captures what a plugin must match to be loaded: the compiler version (Rust has no stable
//! ABI), a fingerprint of this crate's source (the traits and types a plugin is compiled
//! against; a version number alone does not change when they do) and the exact versions of the
//! other crates whose types cross the boundary (build/abi.rs).
use std::path::Path;
use std::process::Command;

#[path = "build/abi.rs"]
mod abi;

/// FNV-1a over the relative paths and contents of every file under `dir`, in path order.
fn fingerprint(dir: &Path) -> u64 {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    files.sort();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    for f in files {
        eat(f
            .strip_prefix(dir)
            .unwrap_or(&f)
            .to_string_lossy()
            .as_bytes());
        eat(&std::fs::read(&f).unwrap_or_default());
    }
    h
}

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=RMCA_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-env-changed=RUSTC");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    println!(
        "cargo:rustc-env=RMCA_FRAMEWORK_FINGERPRINT={:016x}",
        fingerprint(&src)
    );
    println!("cargo:rerun-if-changed=src");
    let manifest_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let manifest = std::fs::read_to_string(&manifest_path)
        .unwrap_or_else(|e| panic!("{}: {e}", manifest_path.display()));
    let pins = abi::pinned_versions(&manifest, abi::ABI_CRATES)
        .unwrap_or_else(|e| panic!("{}: {e}", manifest_path.display()));
    let pins: Vec<String> = pins.iter().map(|(n, v)| format!("{n}={v}")).collect();
    println!(
        "cargo:rustc-env=RMCA_FRAMEWORK_ABI_CRATES={}",
        pins.join(";")
    );
    println!("cargo:rerun-if-changed=Cargo.toml");
    println!("cargo:rerun-if-changed=build/abi.rs");
}
