//! Building the out-of-tree plugin examples (`examples/out-of-tree-*`) as a third party would:
//! with cargo, outside the workspace, into a target directory of their own.

use std::path::PathBuf;
use std::process::Command;

use crate::workspace_root;

/// The plugins' own target directory (shared by the examples, so the framework builds once),
/// not the workspace's, whose build lock the running `cargo test` may hold.
pub fn target_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("out-of-tree")
}

/// Run `cargo <args>` on the example `examples/<example>`; its output, or a panic with it if
/// cargo failed.
pub fn cargo(example: &str, args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args(args)
        .arg("--manifest-path")
        .arg(
            workspace_root()
                .join("examples")
                .join(example)
                .join("Cargo.toml"),
        )
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run '{cargo}' (set CARGO to the cargo that built the workspace): {e}")
        });
    let text = format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "cargo {} on {example} failed ({}):\n{text}",
        args.join(" "),
        out.status
    );
    text
}
